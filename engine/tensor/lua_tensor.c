/* seer.core.tensor: tensors as Lua userdata (each holds one reference), with the Torch7-style
 * methods written in C so that errors point at the caller's line and indexing stays cheap.
 * Dims and element indices arriving from Lua are 1-based (negative counts from the end) and
 * are translated here; argmax/topk indices go back 0-based (token ids). lua/seer/tensor.lua
 * adds constructors from tables, __tostring, save/load helpers and documentation. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "safetensors.h"
#include "host/host.h"
#include "tensor.h"
#include "tensor_private.h"

#define MT "seer.tensor"

typedef struct {
    seer_tensor_t *t;
} ud_t;

seer_tensor_t *seer_tensor_test(lua_State *L, int idx) {
    ud_t *u = lua_touserdata(L, idx);
    if (!u || !lua_getmetatable(L, idx)) return NULL;
    luaL_getmetatable(L, MT);
    int eq = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    return eq ? u->t : NULL;
}

/* The name of the tensor method (or metamethod) now running, for argument errors: Lua gives a C
 * function called through a method table no name ("bad argument #2 to '?'"). It is looked up
 * in the metatable only when an error is about to be raised; NULL outside a tensor method. */
static const char *running_method(lua_State *L) {
    lua_Debug ar;
    if (!lua_getstack(L, 0, &ar) || !lua_getinfo(L, "f", &ar)) return NULL;
    const char *name = NULL;
    luaL_getmetatable(L, MT);
    for (int pass = 0; pass < 2 && !name && lua_istable(L, -1); pass++) {
        if (pass == 0) {
            lua_getfield(L, -1, "methods");
            if (!lua_istable(L, -1)) { lua_pop(L, 1); continue; }
        } else {
            lua_pushvalue(L, -1); /* the metatable itself: __add, __newindex, ... */
        }
        lua_pushnil(L);
        while (!name && lua_next(L, -2)) {
            /* the key string stays alive: the method table holds it as long as the state */
            if (lua_rawequal(L, -1, -5) && lua_type(L, -2) == LUA_TSTRING) name = lua_tostring(L, -2);
            lua_pop(L, 1);
        }
        if (name) lua_pop(L, 1); /* the key lua_next left */
        lua_pop(L, 1);
    }
    lua_pop(L, 2); /* the metatable, the function */
    if (name && strcmp(name, "__newindex") == 0) return "index assignment";
    return name;
}

seer_tensor_t *seer_tensor_check(lua_State *L, int idx) {
    seer_tensor_t *t = seer_tensor_test(L, idx);
    if (!t) {
        const char *m = running_method(L);
        if (!m) luaL_typerror(L, idx, "tensor");
        if (idx == 1 && m[0] != '_' && strcmp(m, "index assignment") != 0)
            luaL_error(L, "%s: the tensor is missing (its first argument is %s): call it with a colon, t:%s(...)", m,
                       luaL_typename(L, 1), m);
        luaL_error(L, "%s: argument %d must be a tensor, got %s", m, idx, luaL_typename(L, idx));
    }
    return t;
}

/* A number argument of a tensor method: an error naming the method and the argument. */
static double num_arg(lua_State *L, int idx, const char *what) {
    if (lua_type(L, idx) != LUA_TNUMBER) {
        const char *m = running_method(L);
        luaL_error(L, "%s: %s must be a number, got %s", m ? m : "tensor", what, luaL_typename(L, idx));
    }
    return lua_tonumber(L, idx);
}
static double opt_num_arg(lua_State *L, int idx, double def, const char *what) {
    return lua_isnoneornil(L, idx) ? def : num_arg(L, idx, what);
}

static void build_mt(lua_State *L);

void seer_tensor_push(lua_State *L, seer_tensor_t *t) {
    ud_t *u = lua_newuserdata(L, sizeof *u);
    u->t = t;
    seer_tensor_retain(t);
    luaL_getmetatable(L, MT);
    if (lua_isnil(L, -1)) {
        /* First tensor in this state: load the documented module (it adds __tostring and the
         * Lua-side methods), falling back to the bare C metatable. */
        lua_pop(L, 1);
        lua_getglobal(L, "require");
        lua_pushliteral(L, "seer.tensor");
        if (lua_pcall(L, 1, 0, 0) != 0) lua_pop(L, 1);
        luaL_getmetatable(L, MT);
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            build_mt(L);
        }
    }
    lua_setmetatable(L, -2);
}

/* Pushes t and drops the caller's reference (for freshly created results). */
static void push_new(lua_State *L, seer_tensor_t *t) {
    seer_tensor_push(L, t);
    seer_tensor_release(t);
}

static int raise(lua_State *L, const seer_err_t *e) { return luaL_error(L, "%s", e->msg); }

static int oom(lua_State *L) { return luaL_error(L, "out of memory"); }

#define CHECK(L, call)                                                                                 \
    do {                                                                                               \
        seer_err_t err_;                                                                               \
        if ((call) < 0) return raise(L, &err_);                                                        \
    } while (0)
#define ERR (&err_)

static const char *shp(const seer_tensor_t *t, char *buf) { return seer_tensor_shape_str(t, buf, 128); }

/* A Lua dim (1-based, negative from the end) to 0-based. extra allows ndim+1 (unsqueeze). */
static int dim_arg(lua_State *L, const seer_tensor_t *t, int idx, const char *op, int extra) {
    char what[64];
    snprintf(what, sizeof what, "%s: dim", op);
    int64_t d = seer_lua_int(L, idx, INT32_MIN, INT32_MAX, what);
    int nd = t->ndim + extra;
    int64_t d0 = d < 0 ? d + nd : d - 1;
    if (d == 0 || d0 < 0 || d0 >= nd) {
        char b[128];
        luaL_error(L, "%s: dim %d out of range for a %d-d tensor %s (dims are 1..%d or -%d..-1)", op, (int)d,
                   t->ndim, shp(t, b), nd, nd);
    }
    return (int)d0;
}

/* A Lua element index (1-based, negative from the end) along dim to 0-based. */
static int64_t index_arg(lua_State *L, const seer_tensor_t *t, int dim, int64_t i, const char *op) {
    int64_t n = t->shape[dim];
    int64_t i0 = i < 0 ? i + n : i - 1;
    if (i == 0 || i0 < 0 || i0 >= n) {
        char b[128], msg[384];
        snprintf(msg, sizeof msg, "%s: index %lld out of range for dim %d of size %lld (tensor %s; indices are 1..%lld or -%lld..-1)",
                 op, (long long)i, dim + 1, (long long)n, shp(t, b), (long long)n, (long long)n);
        luaL_error(L, "%s", msg);
    }
    return i0;
}

/* The Lua index at stack slot idx (a whole number, checked) along dim, 0-based. */
static int64_t index_at(lua_State *L, const seer_tensor_t *t, int dim, int idx, const char *op) {
    char what[64];
    snprintf(what, sizeof what, "%s: index", op);
    return index_arg(L, t, dim, seer_lua_int(L, idx, INT64_MIN, INT64_MAX, what), op);
}

static seer_dtype_t dtype_arg(lua_State *L, int idx, seer_dtype_t def) {
    if (lua_isnoneornil(L, idx)) return def;
    if (lua_type(L, idx) != LUA_TSTRING) { /* the method's name is looked up only for an error */
        const char *m = running_method(L);
        luaL_error(L, "%s%sdtype must be a string such as \"f32\" or \"bf16\", got %s", m ? m : "", m ? ": " : "",
                   luaL_typename(L, idx));
    }
    const char *s = lua_tostring(L, idx);
    for (int i = 0; i < SEER_DTYPE_COUNT; i++)
        if (strcmp(s, seer_dtype_name((seer_dtype_t)i)) == 0) return (seer_dtype_t)i;
    static const char *alias[][2] = {{"float32", "f32"}, {"float", "f32"}, {"bfloat16", "bf16"}, {"float16", "f16"},
                                     {"half", "f16"},    {"int32", "i32"}, {"int64", "i64"},    {"long", "i64"},
                                     {"uint8", "u8"},    {"float64", "f64"}, {"double", "f64"}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (strcmp(s, alias[i][0]) == 0)
            for (int j = 0; j < SEER_DTYPE_COUNT; j++)
                if (strcmp(alias[i][1], seer_dtype_name((seer_dtype_t)j)) == 0) return (seer_dtype_t)j;
    const char *m = running_method(L);
    luaL_error(L, "%s%sunknown dtype '%s' (valid: f32, bf16, f16, i32, i64, u8, bool, f64)", m ? m : "", m ? ": " : "", s);
    return def;
}

static void check_writable(lua_State *L, const seer_tensor_t *t, const char *op) {
    if (t->storage->readonly)
        luaL_error(L, "%s: tensor is read-only (a view of a mapped file); clone() it first", op);
}

/* A shape from a table {2,3} at idx, or from the integers idx..top. */
static int shape_args(lua_State *L, int idx, int64_t *shape, const char *op) {
    int n = 0;
    if (lua_istable(L, idx)) {
        n = (int)lua_objlen(L, idx);
        if (n > SEER_TENSOR_MAX_DIMS) luaL_error(L, "%s: %d dimensions (at most %d)", op, n, SEER_TENSOR_MAX_DIMS);
        for (int i = 0; i < n; i++) {
            lua_rawgeti(L, idx, i + 1);
            char what[64];
            snprintf(what, sizeof what, "%s: shape entry %d", op, i + 1);
            shape[i] = seer_lua_int(L, -1, INT64_MIN, INT64_MAX, what);
            lua_pop(L, 1);
        }
        return n;
    }
    int top = lua_gettop(L);
    for (int i = idx; i <= top; i++) {
        if (n >= SEER_TENSOR_MAX_DIMS) luaL_error(L, "%s: too many dimensions (at most %d)", op, SEER_TENSOR_MAX_DIMS);
        char what[64];
        snprintf(what, sizeof what, "%s: size %d", op, n + 1);
        shape[n++] = seer_lua_int(L, i, INT64_MIN, INT64_MAX, what);
    }
    return n;
}

static seer_tensor_t *new_or_raise(lua_State *L, seer_dtype_t dt, int nd, const int64_t *shape, const char *op) {
    for (int i = 0; i < nd; i++) {
        if (shape[i] < 0) {
            char b[128];
            luaL_error(L, "%s: invalid shape %s (negative size)", op, seer__shape_str(nd, shape, b, sizeof b));
        }
    }
    seer_tensor_t *t = seer_tensor_new(dt, nd, shape);
    if (!t) luaL_error(L, "%s: cannot allocate a tensor of that shape (too large?)", op);
    return t;
}

/* ---- constructors --------------------------------------------------------------------------- */

/* new(shape_table, dtype) zeros; full(shape_table, value, dtype) */
static int l_full(lua_State *L) {
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *op = luaL_optstring(L, 4, "full"); /* the constructor the user called: zeros, ones, new */
    int nd = shape_args(L, 1, shape, op);
    if (!lua_isnoneornil(L, 2) && lua_type(L, 2) != LUA_TNUMBER)
        return luaL_error(L, "%s: the value must be a number, got %s", op, luaL_typename(L, 2));
    double v = lua_isnoneornil(L, 2) ? 0 : lua_tonumber(L, 2);
    seer_dtype_t dt = dtype_arg(L, 3, SEER_F32);
    seer_tensor_t *t = new_or_raise(L, dt, nd, shape, op);
    if (v != 0) {
        int64_t n = seer_tensor_numel(t);
        for (int64_t i = 0; i < n; i++) seer__st(t->storage->data, dt, i, v);
    }
    push_new(L, t);
    return 1;
}

/* arange(start, stop, step, dtype): [start, stop) */
static int l_arange(lua_State *L) {
    static const char *const what[] = {"start", "stop", "step"};
    for (int i = 1; i <= 3; i++)
        if (lua_type(L, i) != LUA_TNUMBER && (i < 3 || !lua_isnoneornil(L, i)))
            return luaL_error(L, "arange: %s must be a number, got %s", what[i - 1], luaL_typename(L, i));
    double a = lua_tonumber(L, 1), b = lua_tonumber(L, 2), s = lua_isnoneornil(L, 3) ? 1 : lua_tonumber(L, 3);
    seer_dtype_t dt = dtype_arg(L, 4, SEER_F32);
    if (s == 0 || s != s) return luaL_error(L, "arange: step must be non-zero");
    double nf = ceil((b - a) / s);
    if (nf < 0) nf = 0;
    if (nf > 1e12) return luaL_error(L, "arange: too many elements");
    int64_t n = (int64_t)nf;
    seer_tensor_t *t = new_or_raise(L, dt, 1, &n, "arange");
    for (int64_t i = 0; i < n; i++) seer__st(t->storage->data, dt, i, a + (double)i * s);
    push_new(L, t);
    return 1;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return ((double)(splitmix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* rand/randn(shape_table, seed|nil, dtype, normal): without a seed, the module's generator
 * (one per Lua state, reset by manual_seed) advances. */
static int l_random(lua_State *L) {
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    luaL_checktype(L, 1, LUA_TTABLE);
    int nd = shape_args(L, 1, shape, "randn");
    seer_dtype_t dt = dtype_arg(L, 3, SEER_F32);
    int normal = lua_toboolean(L, 4);
    uint64_t local, *state = lua_touserdata(L, lua_upvalueindex(1));
    if (!lua_isnoneornil(L, 2)) {
        local = (uint64_t)seer_lua_int(L, 2, INT64_MIN, INT64_MAX, normal ? "randn: seed" : "rand: seed");
        state = &local;
    }
    seer_tensor_t *t = new_or_raise(L, dt, nd, shape, normal ? "randn" : "rand");
    int64_t n = seer_tensor_numel(t);
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = uniform01(state), u2 = uniform01(state);
        if (normal) {
            double r = sqrt(-2.0 * log(u1));
            seer__st(t->storage->data, dt, i, r * cos(2 * M_PI * u2));
            if (i + 1 < n) seer__st(t->storage->data, dt, i + 1, r * sin(2 * M_PI * u2));
        } else {
            seer__st(t->storage->data, dt, i, u1);
            if (i + 1 < n) seer__st(t->storage->data, dt, i + 1, u2);
        }
    }
    push_new(L, t);
    return 1;
}

static int l_manual_seed(lua_State *L) {
    uint64_t *state = lua_touserdata(L, lua_upvalueindex(1));
    *state = (uint64_t)seer_lua_int(L, 1, INT64_MIN, INT64_MAX, "manual_seed: seed");
    return 0;
}

/* from_flat(values_table, shape_table, dtype) */
static int l_from_flat(lua_State *L) {
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    int nd = shape_args(L, 2, shape, "from");
    seer_dtype_t dt = dtype_arg(L, 3, SEER_F32);
    seer_tensor_t *t = new_or_raise(L, dt, nd, shape, "from");
    int64_t n = seer_tensor_numel(t);
    if ((int64_t)lua_objlen(L, 1) != n) {
        seer_tensor_release(t);
        return luaL_error(L, "from: %d values for %d elements", (int)lua_objlen(L, 1), (int)n);
    }
    for (int64_t i = 0; i < n; i++) {
        lua_rawgeti(L, 1, (int)i + 1);
        double v;
        if (lua_isboolean(L, -1)) {
            v = lua_toboolean(L, -1);
        } else if (lua_type(L, -1) == LUA_TNUMBER) {
            v = lua_tonumber(L, -1);
        } else {
            seer_tensor_release(t);
            return luaL_error(L, "from: element %d is a %s, not a number", (int)i + 1, luaL_typename(L, -1));
        }
        lua_pop(L, 1);
        seer__st(t->storage->data, dt, i, v);
    }
    push_new(L, t);
    return 1;
}

/* ---- basic queries ------------------------------------------------------------------------- */

static int l_gc(lua_State *L) {
    ud_t *u = luaL_checkudata(L, 1, MT);
    seer_tensor_release(u->t);
    u->t = NULL;
    return 0;
}

static int l_size(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    if (!lua_isnoneornil(L, 2)) {
        lua_pushinteger(L, (lua_Integer)t->shape[dim_arg(L, t, 2, "size", 0)]);
        return 1;
    }
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; i++) {
        lua_pushinteger(L, (lua_Integer)t->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_stride(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    if (!lua_isnoneornil(L, 2)) {
        lua_pushinteger(L, (lua_Integer)t->strides[dim_arg(L, t, 2, "stride", 0)]);
        return 1;
    }
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; i++) {
        lua_pushinteger(L, (lua_Integer)t->strides[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_dim(lua_State *L) {
    lua_pushinteger(L, seer_tensor_check(L, 1)->ndim);
    return 1;
}

static int l_numel(lua_State *L) {
    lua_pushnumber(L, (lua_Number)seer_tensor_numel(seer_tensor_check(L, 1)));
    return 1;
}

static int l_dtype(lua_State *L) {
    lua_pushstring(L, seer_dtype_name(seer_tensor_check(L, 1)->dtype));
    return 1;
}

static int l_element_size(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)seer_dtype_size(seer_tensor_check(L, 1)->dtype));
    return 1;
}

static int l_is_contiguous(lua_State *L) {
    lua_pushboolean(L, seer_tensor_is_contiguous(seer_tensor_check(L, 1)));
    return 1;
}

static int l_is_readonly(lua_State *L) {
    lua_pushboolean(L, seer_tensor_check(L, 1)->storage->readonly);
    return 1;
}

static int l_data_ptr(lua_State *L) {
    lua_pushlightuserdata(L, seer_tensor_data(seer_tensor_check(L, 1)));
    return 1;
}

/* True when both share one storage (views of each other). */
static int l_shares_storage(lua_State *L) {
    lua_pushboolean(L, seer_tensor_check(L, 1)->storage == seer_tensor_check(L, 2)->storage);
    return 1;
}

/* ---- views ---------------------------------------------------------------------------------- */

static int l_narrow(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *o;
    int d = dim_arg(L, t, 2, "narrow", 0);
    int64_t first = seer_lua_int(L, 3, INT64_MIN, INT64_MAX, "narrow: start"), n = seer_lua_int(L, 4, 0, INT64_MAX, "narrow: length");
    int64_t size = t->shape[d];
    int64_t f0 = first < 0 ? first + size : first - 1;
    if (first == 0 || f0 < 0 || f0 > size || n < 0 || f0 + n > size) {
        char b[128], msg[320];
        snprintf(msg, sizeof msg, "narrow: elements %lld..%lld out of range for dim %d of size %lld (tensor %s)", (long long)first,
                 (long long)(f0 + n), d + 1, (long long)size, shp(t, b));
        return luaL_error(L, "%s", msg);
    }
    CHECK(L, seer_tensor_narrow(&o, t, d, f0, n, ERR));
    push_new(L, o);
    return 1;
}

static int l_select(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *o;
    int d = dim_arg(L, t, 2, "select", 0);
    int64_t i = index_at(L, t, d, 3, "select");
    CHECK(L, seer_tensor_select(&o, t, d, i, ERR));
    push_new(L, o);
    return 1;
}

static int l_transpose(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *o;
    int d1, d2;
    if (lua_isnoneornil(L, 2)) {
        if (t->ndim != 2) {
            char b[128];
            return luaL_error(L, "transpose: dims required for a %d-d tensor %s", t->ndim, shp(t, b));
        }
        d1 = 0;
        d2 = 1;
    } else {
        d1 = dim_arg(L, t, 2, "transpose", 0);
        d2 = dim_arg(L, t, 3, "transpose", 0);
    }
    CHECK(L, seer_tensor_transpose(&o, t, d1, d2, ERR));
    push_new(L, o);
    return 1;
}

static int l_t(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *o;
    if (t->ndim != 2) {
        char b[128];
        return luaL_error(L, "t: expects a 2-d tensor, got %s", shp(t, b));
    }
    CHECK(L, seer_tensor_transpose(&o, t, 0, 1, ERR));
    push_new(L, o);
    return 1;
}

static int reshape_impl(lua_State *L, bool copy_ok) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *o;
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    int nd = shape_args(L, 2, shape, copy_ok ? "reshape" : "view");
    CHECK(L, seer_tensor_reshape(&o, t, nd, shape, copy_ok, ERR));
    push_new(L, o);
    return 1;
}

static int l_view(lua_State *L) { return reshape_impl(L, false); }
static int l_reshape(lua_State *L) { return reshape_impl(L, true); }

static int l_flatten(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *o;
    int64_t n = seer_tensor_numel(t);
    CHECK(L, seer_tensor_reshape(&o, t, 1, &n, true, ERR));
    push_new(L, o);
    return 1;
}

static int l_unsqueeze(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    if (t->ndim >= SEER_TENSOR_MAX_DIMS) return luaL_error(L, "unsqueeze: already %d dims", t->ndim);
    int d = dim_arg(L, t, 2, "unsqueeze", 1);
    int64_t shape[SEER_TENSOR_MAX_DIMS], st[SEER_TENSOR_MAX_DIMS];
    for (int i = 0, k = 0; i <= t->ndim; i++) {
        if (i == d) {
            shape[i] = 1;
            st[i] = i < t->ndim ? t->strides[k] * t->shape[k] : 1;
        } else {
            shape[i] = t->shape[k];
            st[i] = t->strides[k++];
        }
    }
    seer_tensor_t *o = seer_tensor_view(t, t->ndim + 1, shape, st, t->offset);
    if (!o) return oom(L);
    push_new(L, o);
    return 1;
}

static int l_squeeze(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    int only = lua_isnoneornil(L, 2) ? -1 : dim_arg(L, t, 2, "squeeze", 0);
    int64_t shape[SEER_TENSOR_MAX_DIMS], st[SEER_TENSOR_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1 && (only < 0 || only == i)) continue;
        shape[k] = t->shape[i];
        st[k++] = t->strides[i];
    }
    seer_tensor_t *o = seer_tensor_view(t, k, shape, st, t->offset);
    if (!o) return oom(L);
    push_new(L, o);
    return 1;
}

static int l_permute(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    int64_t perm[SEER_TENSOR_MAX_DIMS];
    int n = shape_args(L, 2, perm, "permute");
    char b[128];
    if (n != t->ndim) return luaL_error(L, "permute: %d dims given for a %d-d tensor %s", n, t->ndim, shp(t, b));
    int64_t shape[SEER_TENSOR_MAX_DIMS], st[SEER_TENSOR_MAX_DIMS];
    int seen = 0;
    for (int i = 0; i < n; i++) {
        int64_t d = perm[i] < 0 ? perm[i] + n : perm[i] - 1;
        if (perm[i] == 0 || d < 0 || d >= n || (seen & (1 << d)))
            return luaL_error(L, "permute: invalid permutation for %s", shp(t, b));
        seen |= 1 << d;
        shape[i] = t->shape[d];
        st[i] = t->strides[d];
    }
    seer_tensor_t *o = seer_tensor_view(t, n, shape, st, t->offset);
    if (!o) return oom(L);
    push_new(L, o);
    return 1;
}

static int l_contiguous(lua_State *L) {
    seer_tensor_t *o = seer_tensor_contiguous(seer_tensor_check(L, 1));
    if (!o) return oom(L);
    push_new(L, o);
    return 1;
}

static int l_clone(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    seer_tensor_t *o = seer_tensor_to(t, t->dtype);
    if (!o) return oom(L);
    push_new(L, o);
    return 1;
}

static int l_to(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    seer_dtype_t dt = dtype_arg(L, 2, SEER_F32);
    if (lua_isnoneornil(L, 2)) return luaL_error(L, "to: dtype required (f32, bf16, f16, i32, i64, u8, bool, f64)");
    if (dt == t->dtype) {
        lua_settop(L, 1);
        return 1;
    }
    seer_tensor_t *o = seer_tensor_to(t, dt);
    if (!o) return oom(L);
    push_new(L, o);
    return 1;
}

static int l_float(lua_State *L) {
    lua_settop(L, 1);
    lua_pushliteral(L, "f32");
    return l_to(L);
}

/* ---- elements ------------------------------------------------------------------------------- */

static void push_elem(lua_State *L, const seer_tensor_t *t, int64_t off) {
    lua_pushnumber(L, seer__ld(t->storage->data, t->dtype, off));
}

static void totable_rec(lua_State *L, const seer_tensor_t *t, int d, int64_t off) {
    if (d == t->ndim) {
        push_elem(L, t, off);
        return;
    }
    lua_createtable(L, (int)t->shape[d], 0);
    for (int64_t i = 0; i < t->shape[d]; i++) {
        totable_rec(L, t, d + 1, off + i * t->strides[d]);
        lua_rawseti(L, -2, (int)i + 1);
    }
}

static int l_totable(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    luaL_checkstack(L, t->ndim + 4, "totable");
    totable_rec(L, t, 0, t->offset);
    return 1;
}

static int l_item(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    if (seer_tensor_numel(t) != 1) {
        char b[128];
        return luaL_error(L, "item: tensor %s has %d elements, not 1", shp(t, b), (int)seer_tensor_numel(t));
    }
    int64_t off = t->offset;
    push_elem(L, t, off);
    return 1;
}

/* Every element of t set to v (through a broadcast copy from a 0-d f64). */
static int fill(seer_tensor_t *t, double v, seer_err_t *err) {
    seer_tensor_t *s = seer_tensor_new(SEER_F64, 0, NULL);
    if (!s) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    *(double *)s->storage->data = v;
    int rc = seer_tensor_copy(t, s, err);
    seer_tensor_release(s);
    return rc;
}

/* Offset of t[{i, j, ...}] (a full 1-based index table). */
static int64_t table_index(lua_State *L, const seer_tensor_t *t, int idx) {
    int n = (int)lua_objlen(L, idx);
    char b[128];
    if (n != t->ndim) luaL_error(L, "index: %d indices for a %d-d tensor %s", n, t->ndim, shp(t, b));
    int64_t off = t->offset;
    for (int d = 0; d < n; d++) {
        lua_rawgeti(L, idx, d + 1);
        if (lua_type(L, -1) != LUA_TNUMBER) luaL_error(L, "index: entry %d is not an integer", d + 1);
        off += index_at(L, t, d, -1, "index") * t->strides[d];
        lua_pop(L, 1);
    }
    return off;
}

static int l_index(lua_State *L) {
    int kt = lua_type(L, 2);
    if (kt == LUA_TSTRING) {
        lua_pushvalue(L, 2);
        lua_rawget(L, lua_upvalueindex(1));
        return 1;
    }
    seer_tensor_t *t = seer_tensor_check(L, 1);
    if (kt == LUA_TNUMBER) {
        if (t->ndim == 0) return luaL_error(L, "index: cannot index a 0-d tensor (use item())");
        int64_t i = index_at(L, t, 0, 2, "index");
        if (t->ndim == 1) {
            push_elem(L, t, t->offset + i * t->strides[0]);
            return 1;
        }
        seer_tensor_t *o;
        CHECK(L, seer_tensor_select(&o, t, 0, i, ERR));
        push_new(L, o);
        return 1;
    }
    if (kt == LUA_TTABLE) {
        push_elem(L, t, table_index(L, t, 2));
        return 1;
    }
    lua_pushnil(L);
    return 1;
}

static int l_newindex(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    check_writable(L, t, "index assignment");
    int kt = lua_type(L, 2);
    if (kt == LUA_TTABLE) {
        seer__st(t->storage->data, t->dtype, table_index(L, t, 2), num_arg(L, 3, "the value"));
        return 0;
    }
    if (kt != LUA_TNUMBER) return luaL_error(L, "index assignment: tensors have no field '%s'", lua_tostring(L, 2));
    if (t->ndim == 0) return luaL_error(L, "index assignment: cannot index a 0-d tensor (use fill_())");
    int64_t i = index_at(L, t, 0, 2, "index assignment");
    if (t->ndim == 1) {
        seer__st(t->storage->data, t->dtype, t->offset + i * t->strides[0], num_arg(L, 3, "the value"));
        return 0;
    }
    seer_tensor_t *row;
    CHECK(L, seer_tensor_select(&row, t, 0, i, ERR));
    seer_tensor_t *src = seer_tensor_test(L, 3);
    seer_err_t e;
    int rc = 0;
    if (src) {
        rc = seer_tensor_copy(row, src, &e);
    } else if (lua_type(L, 3) == LUA_TNUMBER) {
        rc = fill(row, lua_tonumber(L, 3), &e);
    } else {
        seer_tensor_release(row);
        return luaL_error(L, "index assignment: expected a number or a tensor, got %s", luaL_typename(L, 3));
    }
    seer_tensor_release(row);
    if (rc < 0) return raise(L, &e);
    return 0;
}

static int l_is_tensor(lua_State *L) {
    lua_pushboolean(L, seer_tensor_test(L, 1) != NULL);
    return 1;
}

static int l_len(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    if (t->ndim == 0) return luaL_error(L, "#: a 0-d tensor has no length");
    lua_pushinteger(L, (lua_Integer)t->shape[0]);
    return 1;
}

/* ---- arithmetic ----------------------------------------------------------------------------- */

static const char *const binop_names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum",
                                          "eq",  "ne",  "lt",  "le",  "gt",  "ge"};

static int binary_impl(lua_State *L, seer_tensor_binop_t op, bool inplace) {
    seer_tensor_t *a = seer_tensor_test(L, 1), *b = seer_tensor_test(L, 2), *o = NULL;
    const char *name = binop_names[op];
    double sa = 0, sb = 0;
    if (!a) {
        if (lua_type(L, 1) != LUA_TNUMBER)
            return luaL_error(L, "%s: expected a tensor or a number, got %s", name, luaL_typename(L, 1));
        sa = lua_tonumber(L, 1);
    }
    if (!b) {
        if (lua_type(L, 2) != LUA_TNUMBER)
            return luaL_error(L, "%s: expected a tensor or a number, got %s", name, luaL_typename(L, 2));
        sb = lua_tonumber(L, 2);
    }
    if (inplace) {
        if (!a) return luaL_error(L, "%s_: self must be a tensor", name);
        check_writable(L, a, name);
    }
    CHECK(L, seer_tensor_binary(&o, op, a, sa, b, sb, inplace, name, ERR));
    if (inplace) {
        lua_settop(L, 1);
        return 1;
    }
    push_new(L, o);
    return 1;
}

#define BIN(fn, op)                                                                                    \
    static int l_##fn(lua_State *L) { return binary_impl(L, op, false); }                             \
    static int l_##fn##_(lua_State *L) { return binary_impl(L, op, true); }
BIN(add, SEER_OP_ADD)
BIN(sub, SEER_OP_SUB)
BIN(mul, SEER_OP_MUL)
BIN(div, SEER_OP_DIV)
BIN(pow, SEER_OP_POW)
BIN(maximum, SEER_OP_MAXIMUM)
BIN(minimum, SEER_OP_MINIMUM)
BIN(eq, SEER_OP_EQ)
BIN(ne, SEER_OP_NE)
BIN(lt, SEER_OP_LT)
BIN(le, SEER_OP_LE)
BIN(gt, SEER_OP_GT)
BIN(ge, SEER_OP_GE)

static int l_copy_(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *s = seer_tensor_check(L, 2);
    check_writable(L, t, "copy_");
    CHECK(L, seer_tensor_copy(t, s, ERR));
    lua_settop(L, 1);
    return 1;
}

static int l_fill_(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1);
    double v = num_arg(L, 2, "the value");
    check_writable(L, t, "fill_");
    CHECK(L, fill(t, v, ERR));
    lua_settop(L, 1);
    return 1;
}

static int l_zero_(lua_State *L) {
    lua_settop(L, 1);
    lua_pushnumber(L, 0);
    return l_fill_(L);
}

static int l_clamp(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *a = NULL, *b = NULL;
    double lo = opt_num_arg(L, 2, -HUGE_VAL, "min"), hi = opt_num_arg(L, 3, HUGE_VAL, "max");
    CHECK(L, seer_tensor_binary(&a, SEER_OP_MAXIMUM, t, 0, NULL, lo, false, "clamp", ERR));
    seer_err_t e;
    int rc = seer_tensor_binary(&b, SEER_OP_MINIMUM, a, 0, NULL, hi, false, "clamp", &e);
    seer_tensor_release(a);
    if (rc < 0) return raise(L, &e);
    push_new(L, b);
    return 1;
}

static int unary_impl(lua_State *L, seer_tensor_unop_t op, bool inplace) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *o;
    if (inplace) check_writable(L, t, "in-place op");
    CHECK(L, seer_tensor_unary(&o, op, t, inplace, ERR));
    if (inplace) {
        lua_settop(L, 1);
        return 1;
    }
    push_new(L, o);
    return 1;
}

#define UN(fn, op)                                                                                     \
    static int l_##fn(lua_State *L) { return unary_impl(L, op, false); }                              \
    static int l_##fn##_(lua_State *L) { return unary_impl(L, op, true); }
UN(neg, SEER_OP_NEG)
UN(abs, SEER_OP_ABS)
UN(exp, SEER_OP_EXP)
UN(log, SEER_OP_LOG)
UN(sqrt, SEER_OP_SQRT)
UN(rsqrt, SEER_OP_RSQRT)
UN(tanh, SEER_OP_TANH)
UN(relu, SEER_OP_RELU)
UN(sigmoid, SEER_OP_SIGMOID)
UN(gelu, SEER_OP_GELU)
UN(silu, SEER_OP_SILU)
UN(sin, SEER_OP_SIN)
UN(cos, SEER_OP_COS)
UN(floor, SEER_OP_FLOOR)
UN(round, SEER_OP_ROUND)

static int l_unm(lua_State *L) {
    lua_settop(L, 1);
    return l_neg(L);
}

/* ---- reductions ----------------------------------------------------------------------------- */

/* Without a dim: a Lua number (Torch7). With a dim: a tensor (keepdim false by default). */
static int reduce_impl(lua_State *L, seer_tensor_redop_t op, const char *name, int dimidx, double p) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *o;
    if (lua_isnoneornil(L, dimidx)) {
        CHECK(L, seer_tensor_reduce(&o, op, t, -1, false, p, ERR));
        lua_pushnumber(L, seer__ld(o->storage->data, o->dtype, 0));
        seer_tensor_release(o);
        return 1;
    }
    int d = dim_arg(L, t, dimidx, name, 0);
    bool keep = lua_toboolean(L, dimidx + 1);
    CHECK(L, seer_tensor_reduce(&o, op, t, d, keep, p, ERR));
    push_new(L, o);
    if (op == SEER_RED_MAX || op == SEER_RED_MIN) {
        seer_tensor_t *ix;
        CHECK(L, seer_tensor_reduce(&ix, op == SEER_RED_MAX ? SEER_RED_ARGMAX : SEER_RED_ARGMIN, t, d, keep, p, ERR));
        push_new(L, ix);
        return 2;
    }
    return 1;
}

#define RED(fn, op)                                                                                    \
    static int l_##fn(lua_State *L) { return reduce_impl(L, op, #fn, 2, 0); }
RED(sum, SEER_RED_SUM)
RED(mean, SEER_RED_MEAN)
RED(max, SEER_RED_MAX)
RED(min, SEER_RED_MIN)
RED(argmax, SEER_RED_ARGMAX)
RED(argmin, SEER_RED_ARGMIN)
RED(var, SEER_RED_VAR)
RED(std, SEER_RED_STD)
RED(prod, SEER_RED_PROD)

/* norm([p=2 [, dim [, keepdim]]]) */
static int l_norm(lua_State *L) {
    double p = opt_num_arg(L, 2, 2, "p");
    if (!(p > 0)) return luaL_error(L, "norm: p must be positive, got %g", p);
    return reduce_impl(L, SEER_RED_NORM, "norm", 3, p);
}

static int l_dot(lua_State *L) {
    seer_tensor_t *a = seer_tensor_check(L, 1), *b = seer_tensor_check(L, 2);
    int64_t n = seer_tensor_numel(a);
    if (n != seer_tensor_numel(b)) {
        char x[128], y[128];
        return luaL_error(L, "dot: shapes %s and %s have different numbers of elements", shp(a, x), shp(b, y));
    }
    seer_tensor_t *ca = seer_tensor_contiguous(a), *cb = seer_tensor_contiguous(b);
    if (!ca || !cb) {
        seer_tensor_release(ca);
        seer_tensor_release(cb);
        return oom(L);
    }
    double acc = 0;
    for (int64_t i = 0; i < n; i++)
        acc += seer__ld(ca->storage->data, ca->dtype, ca->offset + i) * seer__ld(cb->storage->data, cb->dtype, cb->offset + i);
    seer_tensor_release(ca);
    seer_tensor_release(cb);
    lua_pushnumber(L, acc);
    return 1;
}

static int l_matmul(lua_State *L) {
    seer_tensor_t *a = seer_tensor_check(L, 1), *b = seer_tensor_check(L, 2), *o;
    CHECK(L, seer_tensor_matmul(&o, a, b, ERR));
    push_new(L, o);
    return 1;
}

static int softmax_impl(lua_State *L, bool log) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *o;
    if (t->ndim == 0) return luaL_error(L, "%s: expects at least 1 dim", log ? "log_softmax" : "softmax");
    int d = lua_isnoneornil(L, 2) ? t->ndim - 1 : dim_arg(L, t, 2, log ? "log_softmax" : "softmax", 0);
    CHECK(L, seer_tensor_softmax(&o, t, d, log, ERR));
    push_new(L, o);
    return 1;
}

static int l_softmax(lua_State *L) { return softmax_impl(L, false); }
static int l_log_softmax(lua_State *L) { return softmax_impl(L, true); }

/* topk(k [, dim=-1 [, largest=true]]) -> values (f32), indices (i64, 0-based) */
static int l_topk(lua_State *L) {
    seer_tensor_t *t = seer_tensor_check(L, 1), *v, *ix;
    int64_t k = seer_lua_int(L, 2, 0, INT64_MAX, "topk: k");
    if (t->ndim == 0) return luaL_error(L, "topk: expects at least 1 dim");
    int d = lua_isnoneornil(L, 3) ? t->ndim - 1 : dim_arg(L, t, 3, "topk", 0);
    bool largest = lua_isnoneornil(L, 4) ? true : lua_toboolean(L, 4);
    if (k > t->shape[d]) { /* said here with Lua's 1-based dim (the C library counts from 0) */
        char b[128], msg[256];
        snprintf(msg, sizeof msg, "topk: k = %lld is more than the %lld elements of dim %d (tensor %s)", (long long)k,
                 (long long)t->shape[d], d + 1, shp(t, b));
        return luaL_error(L, "%s", msg);
    }
    CHECK(L, seer_tensor_topk(&v, &ix, t, k, d, largest, ERR));
    push_new(L, v);
    push_new(L, ix);
    return 2;
}

/* ---- safetensors ---------------------------------------------------------------------------- */

typedef struct {
    seer_st_file_t *f;
    int refs;
} shared_file_t;

static void shared_release(void *ctx) {
    shared_file_t *s = ctx;
    if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        seer_st_close(s->f);
        free(s);
    }
}

/* load(path, copy) -> {name = tensor}, metadata. Zero-copy views keep the mapping alive; an
 * entry whose data is not aligned for its dtype is copied instead. */
static int l_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    bool copy = lua_toboolean(L, 2);
    seer_st_file_t *f;
    CHECK(L, seer_st_open(&f, path, ERR));
    shared_file_t *sh = malloc(sizeof *sh);
    if (!sh) {
        seer_st_close(f);
        return oom(L);
    }
    sh->f = f;
    sh->refs = 1; /* ours, dropped at the end */
    size_t n = seer_st_count(f);
    lua_createtable(L, 0, (int)n);
    for (size_t i = 0; i < n; i++) {
        const seer_st_entry_t *e = seer_st_entry(f, i);
        seer_tensor_t *t = NULL;
        size_t es = seer_dtype_size(e->dtype);
        if (!copy && ((uintptr_t)e->data % es) == 0) {
            __atomic_add_fetch(&sh->refs, 1, __ATOMIC_RELAXED);
            t = seer_tensor_wrap((void *)e->data, e->dtype, e->ndim, e->shape, NULL, shared_release, sh);
            if (!t) shared_release(sh);
            else t->storage->readonly = true;
        } else {
            t = seer_tensor_new(e->dtype, e->ndim, e->shape);
            if (t) memcpy(t->storage->data, e->data, e->nbytes);
        }
        if (!t) {
            shared_release(sh);
            return oom(L);
        }
        push_new(L, t);
        lua_setfield(L, -2, e->name);
    }
    lua_newtable(L);
    const char *key;
    for (size_t i = 0; (key = seer_st_metadata_key(f, i)); i++) {
        lua_pushstring(L, seer_st_metadata(f, key));
        lua_setfield(L, -2, key);
    }
    shared_release(sh);
    return 2;
}

/* save(path, names_array, tensors_array, meta_flat_array_or_nil) */
static int l_save(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    int n = (int)lua_objlen(L, 2);
    int nm = lua_istable(L, 4) ? (int)lua_objlen(L, 4) / 2 : 0;
    seer_st_tensor_in_t *in = lua_newuserdata(L, sizeof *in * (size_t)(n ? n : 1));
    const char **meta = lua_newuserdata(L, sizeof(char *) * (size_t)(2 * nm + 1));
    int keep = lua_gettop(L) + 1;
    lua_createtable(L, n, 0); /* keeps contiguous copies alive until written */
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        in[i].name = lua_tostring(L, -1);
        if (!in[i].name) return luaL_error(L, "save: name %d is not a string", i + 1);
        lua_pop(L, 1); /* strings stay alive in table 2 */
        lua_rawgeti(L, 3, i + 1);
        seer_tensor_t *t = seer_tensor_test(L, -1);
        if (!t) return luaL_error(L, "save: '%s' is not a tensor", in[i].name);
        lua_pop(L, 1);
        seer_tensor_t *c = seer_tensor_contiguous(t);
        if (!c) return oom(L);
        push_new(L, c);
        lua_rawseti(L, keep, i + 1);
        in[i].dtype = c->dtype;
        in[i].ndim = c->ndim;
        in[i].shape = c->shape;
        in[i].data = seer_tensor_data(c);
    }
    for (int i = 0; i < 2 * nm; i++) {
        lua_rawgeti(L, 4, i + 1);
        meta[i] = lua_tostring(L, -1);
        if (!meta[i]) return luaL_error(L, "save: metadata keys and values must be strings");
        lua_pop(L, 1);
    }
    CHECK(L, seer_st_write(path, in, (size_t)n, meta, (size_t)nm, ERR));
    return 0;
}

/* ---- module --------------------------------------------------------------------------------- */

static const luaL_Reg methods[] = {
    {"size", l_size}, {"stride", l_stride}, {"dim", l_dim}, {"numel", l_numel}, {"nElement", l_numel},
    {"dtype", l_dtype}, {"element_size", l_element_size}, {"is_contiguous", l_is_contiguous},
    {"is_readonly", l_is_readonly}, {"data_ptr", l_data_ptr}, {"shares_storage", l_shares_storage},
    {"narrow", l_narrow}, {"select", l_select}, {"transpose", l_transpose}, {"t", l_t}, {"view", l_view},
    {"reshape", l_reshape}, {"flatten", l_flatten}, {"unsqueeze", l_unsqueeze}, {"squeeze", l_squeeze},
    {"permute", l_permute}, {"contiguous", l_contiguous}, {"clone", l_clone}, {"to", l_to}, {"float", l_float},
    {"totable", l_totable}, {"item", l_item},
    {"add", l_add}, {"sub", l_sub}, {"mul", l_mul}, {"div", l_div}, {"pow", l_pow}, {"maximum", l_maximum},
    {"minimum", l_minimum}, {"eq", l_eq}, {"ne", l_ne}, {"lt", l_lt}, {"le", l_le}, {"gt", l_gt}, {"ge", l_ge},
    {"add_", l_add_}, {"sub_", l_sub_}, {"mul_", l_mul_}, {"div_", l_div_}, {"pow_", l_pow_},
    {"maximum_", l_maximum_}, {"minimum_", l_minimum_}, {"eq_", l_eq_}, {"ne_", l_ne_}, {"lt_", l_lt_},
    {"le_", l_le_}, {"gt_", l_gt_}, {"ge_", l_ge_},
    {"copy_", l_copy_}, {"fill_", l_fill_}, {"zero_", l_zero_}, {"clamp", l_clamp},
    {"neg", l_neg}, {"abs", l_abs}, {"exp", l_exp}, {"log", l_log}, {"sqrt", l_sqrt}, {"rsqrt", l_rsqrt},
    {"tanh", l_tanh}, {"relu", l_relu}, {"sigmoid", l_sigmoid}, {"gelu", l_gelu}, {"silu", l_silu},
    {"sin", l_sin}, {"cos", l_cos}, {"floor", l_floor}, {"round", l_round},
    {"neg_", l_neg_}, {"abs_", l_abs_}, {"exp_", l_exp_}, {"log_", l_log_}, {"sqrt_", l_sqrt_},
    {"rsqrt_", l_rsqrt_}, {"tanh_", l_tanh_}, {"relu_", l_relu_}, {"sigmoid_", l_sigmoid_}, {"gelu_", l_gelu_},
    {"silu_", l_silu_}, {"sin_", l_sin_}, {"cos_", l_cos_}, {"floor_", l_floor_}, {"round_", l_round_},
    {"sum", l_sum}, {"mean", l_mean}, {"max", l_max}, {"min", l_min}, {"argmax", l_argmax},
    {"argmin", l_argmin}, {"var", l_var}, {"std", l_std}, {"prod", l_prod}, {"norm", l_norm}, {"dot", l_dot},
    {"matmul", l_matmul}, {"softmax", l_softmax}, {"log_softmax", l_log_softmax}, {"topk", l_topk},
    {NULL, NULL}};

static void build_mt(lua_State *L) {
    luaL_newmetatable(L, MT);
    lua_newtable(L); /* methods */
    luaL_register(L, NULL, methods);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "methods");
    lua_pushcclosure(L, l_index, 1);
    lua_setfield(L, -2, "__index");
    static const luaL_Reg meta[] = {{"__gc", l_gc},   {"__newindex", l_newindex}, {"__len", l_len},
                                    {"__add", l_add}, {"__sub", l_sub},           {"__mul", l_mul},
                                    {"__div", l_div}, {"__pow", l_pow},           {"__unm", l_unm},
                                    {NULL, NULL}};
    luaL_register(L, NULL, meta);
    lua_pushliteral(L, "seer.tensor");
    lua_setfield(L, -2, "__name");
}

int seer_tensor_luaopen(lua_State *L) {
    luaL_getmetatable(L, MT);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        build_mt(L);
    }
    int mt = lua_gettop(L);
    lua_newtable(L);
    lua_pushvalue(L, mt);
    lua_setfield(L, -2, "metatable");
    lua_getfield(L, mt, "methods");
    lua_setfield(L, -2, "methods");
    static const luaL_Reg fns[] = {{"full", l_full},
                                   {"arange", l_arange},
                                   {"from_flat", l_from_flat},
                                   {"load", l_load},
                                   {"save", l_save},
                                   {"is_tensor", l_is_tensor},
                                   {NULL, NULL}};
    luaL_register(L, NULL, fns);
    /* The random generator: one per Lua state, shared by rand/randn/manual_seed. */
    uint64_t *state = lua_newuserdata(L, sizeof *state);
    *state = 0;
    lua_pushvalue(L, -1);
    lua_pushcclosure(L, l_random, 1);
    lua_setfield(L, -3, "random");
    lua_pushcclosure(L, l_manual_seed, 1);
    lua_setfield(L, -2, "manual_seed");
    return 1;
}
