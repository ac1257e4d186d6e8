/* seer.core.hooks: interventions as Lua userdata (lua/seer/interventions.lua wraps them), Lua
 * functions as callback interventions, captures read back as tensors, and the hook set a
 * forward pass receives from a Lua list of {name, intervention}. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "../tensor/tensor.h"
#include "hooks.h"
#include "lua_hooks.h"
#include "host/host.h"

#define IV_MT "seer.intervention"

typedef struct {
    seer_intervention_t *iv;
} iv_ud;

static seer_intervention_t *check_iv(lua_State *L, int idx) {
    iv_ud *u = luaL_checkudata(L, idx, IV_MT);
    return u->iv;
}

seer_intervention_t *seer_hooks_lua_test(lua_State *L, int idx) {
    iv_ud *u = luaL_testudata(L, idx, IV_MT);
    return u ? u->iv : NULL;
}

static int push_iv(lua_State *L, seer_intervention_t *iv, seer_err_t *err) {
    if (!iv) return luaL_error(L, "%s", err->msg);
    iv_ud *u = lua_newuserdata(L, sizeof *u);
    u->iv = iv;
    luaL_getmetatable(L, IV_MT);
    lua_setmetatable(L, -2);
    return 1;
}

/* A tensor argument as a contiguous f32 copy (caller releases). */
static seer_tensor_t *f32_arg(lua_State *L, int idx, const char *what) {
    seer_tensor_t *t = seer_tensor_test(L, idx);
    if (!t) luaL_error(L, "%s: expected a tensor, got %s", what, luaL_typename(L, idx));
    seer_tensor_t *c = seer_tensor_to(t, SEER_F32);
    if (!c) luaL_error(L, "%s: out of memory", what);
    return c;
}

static int l_add(lua_State *L) {
    seer_tensor_t *v = f32_arg(L, 1, "add");
    if (v->ndim != 1) {
        char sh[64];
        seer_tensor_shape_str(v, sh, sizeof sh);
        seer_tensor_release(v);
        return luaL_error(L, "add: the vector must be 1-d, got shape %s", sh);
    }
    seer_err_t err;
    seer_intervention_t *iv = seer_iv_add(seer_tensor_data(v), v->shape[0], (float)luaL_optnumber(L, 2, 1.0), &err);
    seer_tensor_release(v);
    return push_iv(L, iv, &err);
}

static int l_ablate(lua_State *L) {
    seer_tensor_t *v = f32_arg(L, 1, "ablate");
    if (v->ndim != 1) {
        char sh[64];
        seer_tensor_shape_str(v, sh, sizeof sh);
        seer_tensor_release(v);
        return luaL_error(L, "ablate: the direction must be 1-d, got shape %s", sh);
    }
    seer_err_t err;
    seer_intervention_t *iv = seer_iv_ablate(seer_tensor_data(v), v->shape[0], &err);
    seer_tensor_release(v);
    return push_iv(L, iv, &err);
}

static int l_scale(lua_State *L) {
    float f = (float)luaL_checknumber(L, 1);
    int heads[256], nh = 0;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        int len = (int)lua_objlen(L, 2);
        if (len > 256) return luaL_error(L, "scale: at most 256 heads");
        for (int i = 1; i <= len; i++) {
            lua_rawgeti(L, 2, i);
            lua_Number h = lua_tonumber(L, -1);
            if (!lua_isnumber(L, -1) || !(h >= 0 && h <= 65535) || h != floor(h))
                return lua_isnumber(L, -1) ? luaL_error(L, "scale: heads must be 0-based integers; entry %d is %.17g", i, (double)h)
                                           : luaL_error(L, "scale: heads must be 0-based integers; entry %d is %s", i, luaL_typename(L, -1));
            heads[nh++] = (int)h;
            lua_pop(L, 1);
        }
    }
    seer_err_t err;
    return push_iv(L, seer_iv_scale(f, heads, nh, &err), &err);
}

static int l_replace(lua_State *L) {
    seer_tensor_t *v = f32_arg(L, 1, "replace");
    seer_err_t err;
    seer_intervention_t *iv = NULL;
    if (v->ndim < 1 || v->ndim > 4) {
        seer_tensor_release(v);
        return luaL_error(L, "replace: the saved activation must have 1 to 4 dimensions, got %d", v->ndim);
    }
    iv = seer_iv_replace(seer_tensor_data(v), v->ndim, v->shape, &err);
    seer_tensor_release(v);
    return push_iv(L, iv, &err);
}

static int l_capture(lua_State *L) {
    seer_err_t err;
    return push_iv(L, seer_iv_capture(&err), &err);
}

/* ---- Lua functions as interventions ---------------------------------------------------------- */

typedef struct {
    lua_State *main; /* for luaL_unref when the intervention goes */
    int ref;
} fn_ctx;

static void fn_free(void *p) {
    fn_ctx *c = p;
    if (c->ref != LUA_NOREF) luaL_unref(c->main, LUA_REGISTRYINDEX, c->ref);
    free(c);
}

static int traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* The view handed to the function stays valid after the call: its storage moves to a private
 * copy (allocated before the call, so running out of memory cannot strand it), and a hook that
 * keeps the tensor (in a global, a closure) reads a snapshot instead of freed memory. */
static void detach(seer_tensor_t *t, void *copy) {
    seer_storage_t *st = t->storage;
    memcpy(copy, st->data, st->nbytes);
    st->data = copy;
    st->release = NULL; /* freed with free() like seer-owned storage */
    st->ctx = NULL;
}

static int fn_call(void *ctxp, const seer_hook_call_t *call, seer_hook_act_t *act, seer_err_t *err) {
    fn_ctx *c = ctxp;
    lua_State *L = call->user;
    char nm[64];
    seer_hook_name(call->point, call->layer, nm, sizeof nm);
    if (!L) return seer_err_set(err, SEER_EINVAL, "hook %s: a Lua function hook needs a Lua caller", nm);
    if (!lua_checkstack(L, 8)) return seer_err_set(err, SEER_ENOMEM, "hook %s: Lua stack overflow", nm);
    int64_t numel = 1;
    for (int i = 0; i < act->ndim; i++) numel *= act->shape[i];
    void *copy = malloc(sizeof(float) * (size_t)numel);
    seer_tensor_t *t = copy ? seer_tensor_wrap(act->data, SEER_F32, act->ndim, act->shape, NULL, NULL, NULL) : NULL;
    if (!t) {
        free(copy);
        return seer_err_set(err, SEER_ENOMEM, "hook %s: out of memory", nm);
    }
    t->storage->nbytes = (size_t)numel * sizeof(float);
    int base = lua_gettop(L);
    lua_pushcfunction(L, traceback);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->ref);
    seer_tensor_push(L, t);
    lua_createtable(L, 0, 5);
    lua_pushstring(L, nm);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, call->layer);
    lua_setfield(L, -2, "layer");
    lua_pushinteger(L, call->start);
    lua_setfield(L, -2, "pos");
    lua_pushinteger(L, call->batch + 1);
    lua_setfield(L, -2, "batch");
    lua_pushinteger(L, call->prompt_len);
    lua_setfield(L, -2, "prompt_len");
    int rc = 0;
    if (lua_pcall(L, 2, 1, base + 1) != 0) {
        rc = seer_err_set(err, SEER_EINVAL, "hook %s: %s", nm, lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
    } else if (!lua_isnil(L, -1)) {
        seer_tensor_t *r = seer_tensor_test(L, -1);
        if (!r) {
            rc = seer_err_set(err, SEER_EINVAL, "hook %s: the function returned a %s; return a tensor (the replacement) or nil",
                              nm, luaL_typename(L, -1));
        } else if (r->storage->data != act->data || r->offset != 0 || !seer_tensor_is_contiguous(r)) {
            seer_err_t e2;
            if (seer_tensor_copy(t, r, &e2) < 0) {
                char sh[64];
                rc = seer_err_set(err, SEER_EINVAL, "hook %s: the returned tensor does not fit the activation %s: %s", nm,
                                  seer_tensor_shape_str(t, sh, sizeof sh), e2.msg);
            }
        }
    }
    lua_settop(L, base);
    detach(t, copy);
    seer_tensor_release(t);
    return rc;
}

static int l_fn(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    fn_ctx *c = malloc(sizeof *c);
    if (!c) return luaL_error(L, "out of memory");
    lua_pushvalue(L, 1);
    c->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    /* The thread that loaded this module (the main thread in practice) outlives the hook; unref
     * through it, since the intervention may be freed after a coroutine that made it is dead. */
    lua_getfield(L, LUA_REGISTRYINDEX, "seer.hooks.main");
    c->main = lua_tothread(L, -1);
    lua_pop(L, 1);
    if (!c->main) c->main = L;
    seer_err_t err;
    return push_iv(L, seer_iv_callback(fn_call, c, fn_free, &err), &err);
}

/* ---- intervention methods --------------------------------------------------------------------- */

static int64_t *int_list(lua_State *L, int idx, const char *what, int *n) {
    int len = (int)lua_objlen(L, idx);
    int64_t *v = malloc(sizeof(int64_t) * (size_t)(len > 0 ? len : 1));
    if (!v) luaL_error(L, "out of memory");
    for (int i = 1; i <= len; i++) {
        lua_rawgeti(L, idx, i);
        lua_Number x = lua_tonumber(L, -1);
        if (!lua_isnumber(L, -1) || !(x >= -9007199254740992.0 && x <= 9007199254740992.0) || x != floor(x)) {
            free(v);
            if (lua_isnumber(L, -1)) luaL_error(L, "%s: entry %d must be an integer position (at most 2^53 in size), got %.17g", what, i, (double)x);
            luaL_error(L, "%s: entry %d must be an integer position, got %s", what, i, luaL_typename(L, -1));
        }
        v[i - 1] = (int64_t)x;
        lua_pop(L, 1);
    }
    *n = len;
    return v;
}

/* iv:filter{positions, from, to, only_prompt} (validated by lua/seer/interventions.lua). */
static int l_iv_filter(lua_State *L) {
    seer_intervention_t *iv = check_iv(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    seer_iv_filter_t f = {0};
    lua_getfield(L, 2, "from");
    if (!lua_isnil(L, -1)) f.has_from = 1, f.from = seer_lua_int(L, -1, INT64_MIN, INT64_MAX, "intervention: from");
    lua_getfield(L, 2, "to");
    if (!lua_isnil(L, -1)) f.has_to = 1, f.to = seer_lua_int(L, -1, INT64_MIN, INT64_MAX, "intervention: to");
    lua_getfield(L, 2, "only_prompt");
    f.only_prompt = lua_toboolean(L, -1);
    lua_getfield(L, 2, "positions");
    int64_t *pos = NULL;
    if (lua_istable(L, -1)) {
        pos = int_list(L, lua_gettop(L), "positions", &f.npositions);
        f.positions = pos;
    }
    seer_err_t err;
    int rc = seer_iv_set_filter(iv, &f, &err);
    free(pos);
    if (rc < 0) return luaL_error(L, "%s", err.msg);
    return 0;
}

static int l_iv_kind(lua_State *L) {
    static const char *const names[] = {"add", "ablate", "scale", "replace", "capture", "function"};
    lua_pushstring(L, names[seer_iv_kind(check_iv(L, 1))]);
    return 1;
}

/* iv:hits() -> rows its filter selected since the last iv:hits(true) (which also resets), and
 * whether it has a position filter at all. */
static int l_iv_hits(lua_State *L) {
    seer_intervention_t *iv = check_iv(L, 1);
    int restricted = 0, reset = lua_toboolean(L, 2); /* read before the results go on the stack */
    lua_pushnumber(L, (lua_Number)seer_iv_hits(iv, &restricted));
    lua_pushboolean(L, restricted);
    if (reset) seer_iv_reset_hits(iv);
    return 2;
}

/* cap:count() -> the number of chunks (forward calls captured), without copying them. */
static int l_iv_count(lua_State *L) {
    seer_intervention_t *iv = check_iv(L, 1);
    lua_pushinteger(L, seer_iv_capture_count(iv)); /* 0 for other kinds */
    return 1;
}

/* cap:chunks() -> list of {tensor, positions = {...}, name, batch} in call order. */
static int l_iv_chunks(lua_State *L) {
    seer_intervention_t *iv = check_iv(L, 1);
    int n = seer_iv_capture_count(iv);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        const seer_capture_chunk_t *ch = seer_iv_capture_chunk(iv, i);
        seer_tensor_t *t = seer_tensor_new_uninit(SEER_F32, ch->ndim, ch->shape); /* every element copied next */
        if (!t) return luaL_error(L, "out of memory");
        memcpy(seer_tensor_data(t), ch->data, sizeof(float) * (size_t)seer_tensor_numel(t));
        lua_createtable(L, 0, 4);
        seer_tensor_push(L, t);
        seer_tensor_release(t);
        lua_setfield(L, -2, "tensor");
        int head_major = seer_hook_point_head_major((seer_hook_point_t)ch->point);
        int np = (int)(head_major ? ch->shape[1] : ch->shape[0]);
        lua_createtable(L, np, 0);
        for (int j = 0; j < np; j++) {
            lua_pushinteger(L, (lua_Integer)ch->positions[j]);
            lua_rawseti(L, -2, j + 1);
        }
        lua_setfield(L, -2, "positions");
        char nm[64];
        lua_pushstring(L, seer_hook_name((seer_hook_point_t)ch->point, ch->layer, nm, sizeof nm));
        lua_setfield(L, -2, "name");
        lua_pushboolean(L, head_major);
        lua_setfield(L, -2, "head_major");
        lua_pushinteger(L, ch->batch + 1);
        lua_setfield(L, -2, "batch");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_iv_clear(lua_State *L) {
    seer_iv_capture_clear(check_iv(L, 1));
    return 0;
}

static int l_iv_gc(lua_State *L) {
    iv_ud *u = luaL_checkudata(L, 1, IV_MT);
    seer_iv_release(u->iv);
    u->iv = NULL;
    return 0;
}

static int l_iv_tostring(lua_State *L) {
    static const char *const names[] = {"add", "ablate", "scale", "replace", "capture", "function"};
    lua_pushfstring(L, "Intervention(%s)", names[seer_iv_kind(check_iv(L, 1))]);
    return 1;
}

/* ---- names ------------------------------------------------------------------------------------ */

/* names(num_layers, mask) -> every hook name of a model in forward order. */
static int l_names(lua_State *L) {
    int layers = (int)seer_lua_int(L, 1, 0, 65536, "hook names: num_layers");
    unsigned mask = (unsigned)seer_lua_int(L, 2, 0, UINT32_MAX, "hook names: mask");
    char nm[64];
    int k = 0;
    lua_newtable(L);
    for (int p = 0; p < SEER_HP_COUNT; p++)
        if (seer_hook_point_global(p) && p != SEER_HP_LN_FINAL && (mask & SEER_HP_BIT(p))) {
            lua_pushstring(L, seer_hook_name(p, -1, nm, sizeof nm));
            lua_rawseti(L, -2, ++k);
        }
    for (int l = 0; l < layers; l++)
        for (int p = 0; p < SEER_HP_COUNT; p++)
            if (!seer_hook_point_global(p) && (mask & SEER_HP_BIT(p))) {
                lua_pushstring(L, seer_hook_name(p, l, nm, sizeof nm));
                lua_rawseti(L, -2, ++k);
            }
    if (mask & SEER_HP_BIT(SEER_HP_LN_FINAL)) {
        lua_pushstring(L, seer_hook_name(SEER_HP_LN_FINAL, -1, nm, sizeof nm));
        lua_rawseti(L, -2, ++k);
    }
    return 1;
}

seer_hookset_t *seer_hooks_lua_build(lua_State *L, int idx, int num_layers, unsigned mask) {
    if (lua_isnoneornil(L, idx)) return NULL;
    luaL_checktype(L, idx, LUA_TTABLE);
    int len = (int)lua_objlen(L, idx);
    if (len == 0) return NULL;
    seer_hookset_t *s = seer_hookset_new(num_layers);
    if (!s) luaL_error(L, "out of memory");
    for (int i = 1; i <= len; i++) {
        lua_rawgeti(L, idx, i);
        lua_rawgeti(L, -1, 1);
        lua_rawgeti(L, -2, 2);
        const char *name = lua_tostring(L, -2);
        seer_intervention_t *iv = seer_hooks_lua_test(L, -1);
        seer_hook_point_t p;
        int layer;
        seer_err_t err;
        if (!name || !iv) {
            seer_hookset_free(s);
            luaL_error(L, "hooks: entry %d must be {hook name, intervention}", i);
        }
        if (seer_hook_parse(name, &p, &layer) < 0 || !(mask & SEER_HP_BIT(p)) ||
            (!seer_hook_point_global(p) && layer >= num_layers)) {
            seer_hookset_free(s);
            luaL_error(L, "hooks: '%s' is not a hook point of this model (model:hook_names() lists them)", name);
        }
        if (seer_hookset_add(s, p, layer, iv, &err) < 0) {
            seer_hookset_free(s);
            luaL_error(L, "%s", err.msg);
        }
        lua_pop(L, 3);
    }
    return s;
}

static const luaL_Reg iv_methods[] = {
    {"filter", l_iv_filter},
    {"kind", l_iv_kind},
    {"chunks", l_iv_chunks},
    {"count", l_iv_count},
    {"clear", l_iv_clear},
    {"hits", l_iv_hits},
    {NULL, NULL},
};

static const luaL_Reg funcs[] = {
    {"add", l_add},         {"ablate", l_ablate}, {"scale", l_scale}, {"replace", l_replace},
    {"capture", l_capture}, {"fn", l_fn},         {"names", l_names}, {NULL, NULL},
};

int seer_hooks_luaopen(lua_State *L) {
    if (luaL_newmetatable(L, IV_MT)) {
        lua_newtable(L);
        luaL_register(L, NULL, iv_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_iv_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_iv_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    lua_pushthread(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "seer.hooks.main");
    lua_newtable(L);
    luaL_register(L, NULL, funcs);
    return 1;
}
