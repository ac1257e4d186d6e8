/* seer.core.json: encode builds a cJSON tree from a Lua value and prints it with its own printer
 * (sorted keys, exact numbers, indentation in spaces); decode checks the text, parses it with
 * cJSON and turns the tree into Lua values. Also the UTF-8 validator shared by the engine. */
#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <lua.h>

#define MAX_DEPTH SEER_JSON_MAX_DEPTH
#define MAX_INDENT 64
/* cJSON copies a number into a 64-byte buffer before strtod, so a longer number token would be
 * cut and then fail with a misleading position; we reject it with a clear message instead. */
#define MAX_NUMBER_LEN 63
#define STR_(x) #x
#define STR(x) STR_(x)
#define DEPTH_MSG "nesting deeper than " STR(SEER_JSON_MAX_DEPTH) " levels"
/* Error paths build messages in big buffers (a luaL_Buffer is 8 KiB); kept out of line so the
 * frames of the recursive encoder stay small enough for 1000 levels of nesting. */
#define COLD __attribute__((noinline, cold))

/* Every exported closure carries these upvalues, which saves registry lookups per value. */
#define UV_NULL lua_upvalueindex(1)
#define UV_ARRAY_MT lua_upvalueindex(2)
#define UV_OBJECT_MT lua_upvalueindex(3)

/* ---- UTF-8 --------------------------------------------------------------------------------- */

int seer_utf8_validate(const char *s, size_t n, size_t *bad_offset) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        /* Text is mostly ASCII: skip it eight bytes at a time. */
        if (n - i >= 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        /* The second byte's range is what excludes overlongs (E0, F0), surrogates (ED) and
         * code points above U+10FFFF (F4); later bytes are plain continuation bytes. */
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c == 0xE0) {
            need = 2;
            lo = 0xA0;
        } else if (c == 0xED) {
            need = 2;
            hi = 0x9F;
        } else if (c >= 0xE1 && c <= 0xEF) {
            need = 2;
        } else if (c == 0xF0) {
            need = 3;
            lo = 0x90;
        } else if (c == 0xF4) {
            need = 3;
            hi = 0x8F;
        } else if (c >= 0xF1 && c <= 0xF3) {
            need = 3;
        } else {
            goto bad; /* continuation byte without a lead, C0/C1 overlong leads, F5..FF */
        }
        if (n - i <= need || p[i + 1] < lo || p[i + 1] > hi) goto bad;
        for (size_t k = 2; k <= need; k++)
            if ((p[i + k] & 0xC0) != 0x80) goto bad;
        i += need + 1;
    }
    return 1;
bad:
    if (bad_offset) *bad_offset = i;
    return 0;
}

/* ---- shared helpers -------------------------------------------------------------------------- */

/* Where the encoder is, as a chain of nodes living in the frames of the recursion (so tracking
 * it costs no allocation); NULL is the top-level value, "$". */
typedef struct path_seg {
    const struct path_seg *up;
    const char *key; /* NULL: an array element */
    size_t len;
    size_t index; /* 1-based, as in Lua */
    int n;        /* segments from $ to here */
} path_seg;

#define NSEG(at) ((at) ? (at)->n : 0)

static int is_ident(const char *s, size_t len) {
    if (len == 0 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
        return 0;
    for (size_t i = 1; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_'))
            return 0;
    }
    return 1;
}

/* Text for an error message: at most max bytes, cut on a character boundary, with control bytes
 * (and every non-ASCII byte when the text is not UTF-8) as \xNN so the message itself stays
 * printable, valid UTF-8. quoted: inside "...", with " and \ escaped. */
static void add_escaped(luaL_Buffer *b, const char *s, size_t len, size_t max, int quoted) {
    int utf8 = seer_utf8_validate(s, len, NULL);
    size_t cut = len;
    if (len > max) {
        cut = max;
        while (utf8 && cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--;
    }
    if (quoted) luaL_addchar(b, '"');
    for (size_t i = 0; i < cut; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (quoted && (ch == '"' || ch == '\\')) {
            luaL_addchar(b, '\\');
            luaL_addchar(b, (char)ch);
        } else if (ch < 0x20 || ch == 0x7F || (ch >= 0x80 && !utf8)) {
            char hex[5];
            snprintf(hex, sizeof hex, "\\x%02X", ch);
            luaL_addstring(b, hex);
        } else {
            luaL_addchar(b, (char)ch);
        }
    }
    if (quoted) luaL_addchar(b, '"');
    if (cut < len) luaL_addstring(b, "...");
}

static void add_quoted(luaL_Buffer *b, const char *s, size_t len, size_t max) {
    add_escaped(b, s, len, max, 1);
}

/* "$.a[2].b" for the first upto segments of the path at; a very deep path keeps its first and
 * last segments around a "...". */
COLD static void push_path(lua_State *L, const path_seg *at, int upto) {
    const path_seg *segs[MAX_DEPTH + 2];
    int nseg = 0;
    for (const path_seg *p = at; p && nseg < MAX_DEPTH + 2; p = p->up)
        if (p->n <= upto) segs[nseg++] = p;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addchar(&b, '$');
    for (int i = 0; i < nseg; i++) {
        if (nseg > 24 && i == 10) {
            luaL_addstring(&b, "...");
            i = nseg - 10;
        }
        const path_seg *sg = segs[nseg - 1 - i];
        if (!sg->key) {
            char num[32];
            snprintf(num, sizeof num, "[%zu]", sg->index);
            luaL_addstring(&b, num);
        } else if (is_ident(sg->key, sg->len)) {
            luaL_addchar(&b, '.');
            luaL_addlstring(&b, sg->key, sg->len);
        } else {
            luaL_addchar(&b, '[');
            add_quoted(&b, sg->key, sg->len, 40);
            luaL_addchar(&b, ']');
        }
    }
    luaL_pushresult(&b);
}

/* Lua's own spelling of a number key (%.14g, as tostring does). */
static void fmt_key_number(char *buf, size_t size, lua_Number d) {
    snprintf(buf, size, "%.14g", (double)d);
}

/* ---- encode: Lua value -> cJSON tree --------------------------------------------------------- */

typedef struct {
    cJSON *root; /* everything built so far hangs here, so one cJSON_Delete frees it on error */
    char *out;   /* the printed text, freed by the caller in every case */
    size_t len, cap;
    int indent;      /* spaces per level; -1 for compact output */
    int empty_array; /* an unmarked empty table encodes as [] rather than {} */
} enc_ctx;

/* Stack slots of enc_run, the protected half of encode. */
enum { ENC_VALUE = 1, ENC_CTX, ENC_NULL, ENC_ARRAY_MT, ENC_OBJECT_MT, ENC_SEEN };

/* Raises "json.encode: WHAT at PATH DETAIL". Only called inside enc_run's protected call, so
 * the caller of the pcall frees the partial tree. */
COLD static int enc_fail(lua_State *L, const path_seg *at, const char *what, const char *detail) {
    lua_pushfstring(L, "json.encode: %s at ", what);
    push_path(L, at, NSEG(at));
    lua_pushstring(L, detail);
    lua_concat(L, 3);
    return lua_error(L);
}

COLD static int enc_failf(lua_State *L, const path_seg *at, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
COLD static int enc_failf(lua_State *L, const path_seg *at, const char *what, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return enc_fail(L, at, what, detail);
}

/* Hangs item under parent at once, before its own children are built, so that an error at any
 * depth leaves nothing unreachable from c->root. */
static void enc_attach(lua_State *L, enc_ctx *c, cJSON *parent, const char *key, cJSON *item) {
    if (!item) luaL_error(L, "json.encode: out of memory");
    if (!parent) {
        c->root = item;
        return;
    }
    if (!(key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item))) {
        cJSON_Delete(item);
        luaL_error(L, "json.encode: out of memory");
    }
}

/* Checks a string value or key: JSON text is UTF-8, and cJSON strings end at the first NUL. */
static const char *enc_string_problem(const char *s, size_t len, size_t *bad) {
    if (!seer_utf8_validate(s, len, bad)) return "is not valid UTF-8";
    const char *nul = memchr(s, '\0', len);
    if (nul) {
        *bad = (size_t)(nul - s);
        return "contains a NUL byte, which seer.json cannot carry";
    }
    return NULL;
}

static void enc_value(lua_State *L, enc_ctx *c, int idx, cJSON *parent, const char *key, const path_seg *at, int depth);

COLD static void enc_key_text(lua_State *L, int idx, char *buf, size_t size) {
    switch (lua_type(L, idx)) {
    case LUA_TNUMBER: fmt_key_number(buf, size, lua_tonumber(L, idx)); break;
    case LUA_TBOOLEAN: snprintf(buf, size, "%s", lua_toboolean(L, idx) ? "true" : "false"); break;
    default: snprintf(buf, size, "of type %s", luaL_typename(L, idx)); break;
    }
}

typedef struct {
    size_t n_int, n_str;
    lua_Number max_int, first_int;
    const char *first_str;
    size_t first_str_len;
} key_scan;

static int is_index_key(lua_Number k) {
    /* 2^53: beyond it not every integer is a double, so no array can reach it anyway. */
    return k >= 1 && k <= 9007199254740992.0 && k == floor(k);
}

static void enc_scan_keys(lua_State *L, int idx, const path_seg *at, key_scan *ks) {
    memset(ks, 0, sizeof *ks);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        int kt = lua_type(L, -1);
        if (kt == LUA_TSTRING) {
            if (ks->n_str++ == 0) ks->first_str = lua_tolstring(L, -1, &ks->first_str_len);
            continue;
        }
        if (kt == LUA_TNUMBER && is_index_key(lua_tonumber(L, -1))) {
            lua_Number k = lua_tonumber(L, -1);
            if (ks->n_int++ == 0) ks->first_int = k;
            if (k > ks->max_int) ks->max_int = k;
            continue;
        }
        char kbuf[64];
        enc_key_text(L, -1, kbuf, sizeof kbuf);
        enc_failf(L, at, "cannot encode table",
                  ": key %s is neither a string (object key) nor an integer >= 1 (array index)", kbuf);
    }
}

/* The array 1..run and the smallest key after the gap, for the error about a hole. */
COLD static int enc_fail_hole(lua_State *L, int idx, const path_seg *at) {
    size_t run = 0;
    for (;;) {
        lua_rawgeti(L, idx, (int)run + 1);
        int present = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (!present) break;
        run++;
    }
    lua_Number next = HUGE_VAL;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TNUMBER) {
            lua_Number k = lua_tonumber(L, -1);
            if (k > (lua_Number)run && k < next) next = k;
        }
    }
    char kbuf[64];
    fmt_key_number(kbuf, sizeof kbuf, next);
    if (run == 0)
        return enc_failf(L, at, "cannot encode table",
                         ": key %s breaks the array: there is no key 1 (use json.null for holes)", kbuf);
    return enc_failf(L, at, "cannot encode table",
                     ": key %s breaks the array 1..%zu (use json.null for holes)", kbuf, run);
}

typedef struct {
    const char *s;
    size_t len;
    int slot; /* where the key string is anchored in the keys table */
} key_ref;

static int key_cmp(const void *a, const void *b) {
    const key_ref *x = a, *y = b;
    size_t m = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->s, y->s, m);
    if (r) return r;
    return (x->len > y->len) - (x->len < y->len);
}

COLD static int enc_fail_key(lua_State *L, const path_seg *at, const char *s, size_t len,
                            const char *problem, size_t bad) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    add_quoted(&b, s, len, 40);
    luaL_pushresult(&b);
    return enc_failf(L, at, "cannot encode table", ": key %s %s (at byte %zu of the key)", lua_tostring(L, -1),
                     problem, bad);
}

static void enc_object(lua_State *L, enc_ctx *c, int idx, cJSON *parent, const char *key, const path_seg *at, int depth,
                       size_t n) {
    /* The key strings are anchored in a Lua table while we hold pointers to them: a __tojson
     * further down could otherwise remove them from the source table and let them be freed. */
    lua_createtable(L, (int)n, 0);
    int keys = lua_gettop(L);
    key_ref *refs = n ? lua_newuserdata(L, n * sizeof *refs) : NULL;
    size_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (i == n) continue; /* cannot happen: nothing ran since the keys were counted */
        size_t len, bad;
        const char *s = lua_tolstring(L, -1, &len);
        const char *problem = enc_string_problem(s, len, &bad);
        if (problem) enc_fail_key(L, at, s, len, problem, bad);
        refs[i].s = s;
        refs[i].len = len;
        refs[i].slot = (int)i + 1;
        lua_pushvalue(L, -1);
        lua_rawseti(L, keys, (int)i + 1);
        i++;
    }
    if (n) qsort(refs, n, sizeof *refs, key_cmp);

    cJSON *obj = cJSON_CreateObject();
    enc_attach(L, c, parent, key, obj);
    for (i = 0; i < n; i++) {
        path_seg seg = {at, refs[i].s, refs[i].len, 0, NSEG(at) + 1};
        lua_rawgeti(L, keys, refs[i].slot);
        lua_rawget(L, idx);
        enc_value(L, c, lua_gettop(L), obj, refs[i].s, &seg, depth + 1);
        lua_pop(L, 1);
    }
    lua_settop(L, keys - 1);
}

static void enc_array(lua_State *L, enc_ctx *c, int idx, cJSON *parent, const char *key, const path_seg *at, int depth,
                      size_t n) {
    cJSON *arr = cJSON_CreateArray();
    enc_attach(L, c, parent, key, arr);
    for (size_t i = 1; i <= n; i++) {
        path_seg seg = {at, NULL, 0, i, NSEG(at) + 1};
        lua_rawgeti(L, idx, (int)i);
        enc_value(L, c, lua_gettop(L), arr, NULL, &seg, depth + 1);
        lua_pop(L, 1);
    }
}

COLD static int enc_fail_tojson(lua_State *L, const path_seg *at) {
    const char *msg = lua_tostring(L, -1);
    lua_pushfstring(L, "json.encode: __tojson failed at ");
    push_path(L, at, NSEG(at));
    lua_pushfstring(L, ": %s", msg ? msg : "(error object is not a string)");
    lua_concat(L, 3);
    return lua_error(L);
}

COLD static int enc_fail_type(lua_State *L, int idx, const path_seg *at) {
    char what[64];
    snprintf(what, sizeof what, "cannot encode %s", luaL_typename(L, idx));
    return enc_fail(L, at, what,
                    " (JSON has nil, booleans, numbers, strings, tables and json.null; give a userdata a "
                    "__tojson metamethod, or convert the value first)");
}

/* Calls the __tojson metamethod that is on top of the stack and encodes what it returns in
 * place of the value at idx. The value stays marked in the seen table meanwhile, so a result
 * that contains it is reported as a cycle instead of recursing forever. */
static void enc_tojson(lua_State *L, enc_ctx *c, int idx, cJSON *parent, const char *key, const path_seg *at, int depth) {
    if (depth > MAX_DEPTH) enc_fail(L, at, DEPTH_MSG, " (each __tojson call counts as a level)");
    lua_pushvalue(L, idx);
    lua_pushinteger(L, NSEG(at));
    lua_rawset(L, ENC_SEEN);
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) != 0) enc_fail_tojson(L, at);
    if (lua_rawequal(L, -1, idx))
        enc_failf(L, at, "cannot encode value", ": its __tojson returned the value itself");
    enc_value(L, c, lua_gettop(L), parent, key, at, depth + 1);
    lua_pop(L, 1);
    lua_pushvalue(L, idx);
    lua_pushnil(L);
    lua_rawset(L, ENC_SEEN);
}

COLD static int enc_fail_cycle(lua_State *L, const path_seg *at, int first) {
    push_path(L, at, first);
    return enc_failf(L, at, "cycle", " (the table at %s contains itself)", lua_tostring(L, -1));
}

/* Keys that do not fit the table's mark (marked: "array"/"object"), or a mix of both kinds. */
COLD static int enc_fail_keys(lua_State *L, const path_seg *at, const char *marked, const key_scan *ks) {
    char num[64];
    fmt_key_number(num, sizeof num, ks->first_int);
    if (marked && !strcmp(marked, "object"))
        return enc_failf(L, at, "cannot encode table",
                         ": key %s in a table marked json.object (object keys must be strings)", num);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    add_quoted(&b, ks->first_str, ks->first_str_len, 40);
    luaL_pushresult(&b);
    const char *str = lua_tostring(L, -1);
    if (marked)
        return enc_failf(L, at, "cannot encode table", ": string key %s in a table marked json.array", str);
    return enc_failf(L, at, "cannot encode table",
                     ": mixed key types (number %s and string %s); a JSON value is either an array or an object",
                     num, str);
}

static void enc_table(lua_State *L, enc_ctx *c, int idx, cJSON *parent, const char *key, const path_seg *at, int depth) {
    if (!lua_checkstack(L, 16)) enc_fail(L, at, "Lua stack exhausted", "");
    lua_pushvalue(L, idx);
    lua_rawget(L, ENC_SEEN);
    if (!lua_isnil(L, -1)) enc_fail_cycle(L, at, (int)lua_tointeger(L, -1));
    lua_pop(L, 1);

    enum { PLAIN, ARRAY, OBJECT } mark = PLAIN;
    if (lua_getmetatable(L, idx)) {
        if (lua_rawequal(L, -1, ENC_ARRAY_MT)) {
            mark = ARRAY;
        } else if (lua_rawequal(L, -1, ENC_OBJECT_MT)) {
            mark = OBJECT;
        } else {
            lua_pushliteral(L, "__tojson");
            lua_rawget(L, -2);
            if (!lua_isnil(L, -1)) {
                lua_remove(L, -2);
                enc_tojson(L, c, idx, parent, key, at, depth);
                return;
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }

    if (depth > MAX_DEPTH) enc_fail(L, at, DEPTH_MSG, "");

    key_scan ks;
    enc_scan_keys(L, idx, at, &ks);
    if ((mark == OBJECT && ks.n_int) || (mark == ARRAY && ks.n_str) || (mark == PLAIN && ks.n_int && ks.n_str))
        enc_fail_keys(L, at, mark == OBJECT ? "object" : mark == ARRAY ? "array" : NULL, &ks);
    int as_array = mark == ARRAY || (mark == PLAIN && (ks.n_int || (!ks.n_str && c->empty_array)));
    if (as_array && (lua_Number)ks.n_int != ks.max_int) enc_fail_hole(L, idx, at);

    lua_pushvalue(L, idx);
    lua_pushinteger(L, NSEG(at));
    lua_rawset(L, ENC_SEEN);
    if (as_array)
        enc_array(L, c, idx, parent, key, at, depth, ks.n_int);
    else
        enc_object(L, c, idx, parent, key, at, depth, ks.n_str);
    lua_pushvalue(L, idx);
    lua_pushnil(L);
    lua_rawset(L, ENC_SEEN);
}

/* depth is the nesting level a table at idx would have: 1 for the top-level value. */
static void enc_value(lua_State *L, enc_ctx *c, int idx, cJSON *parent, const char *key, const path_seg *at, int depth) {
    switch (lua_type(L, idx)) {
    case LUA_TNIL: enc_attach(L, c, parent, key, cJSON_CreateNull()); return;
    case LUA_TBOOLEAN: enc_attach(L, c, parent, key, cJSON_CreateBool(lua_toboolean(L, idx))); return;
    case LUA_TNUMBER: {
        double d = (double)lua_tonumber(L, idx);
        if (isnan(d)) enc_fail(L, at, "cannot encode NaN", " (JSON has no NaN/Infinity)");
        if (isinf(d))
            enc_fail(L, at, d > 0 ? "cannot encode inf" : "cannot encode -inf", " (JSON has no NaN/Infinity)");
        enc_attach(L, c, parent, key, cJSON_CreateNumber(d));
        return;
    }
    case LUA_TSTRING: {
        size_t len, bad;
        const char *s = lua_tolstring(L, idx, &len);
        const char *problem = enc_string_problem(s, len, &bad);
        if (problem)
            enc_failf(L, at, "cannot encode string", ": it %s (at byte %zu of the string)", problem, bad);
        enc_attach(L, c, parent, key, cJSON_CreateString(s));
        return;
    }
    case LUA_TTABLE: enc_table(L, c, idx, parent, key, at, depth); return;
    case LUA_TUSERDATA:
        if (lua_rawequal(L, idx, ENC_NULL)) {
            enc_attach(L, c, parent, key, cJSON_CreateNull());
            return;
        }
        if (luaL_getmetafield(L, idx, "__tojson")) {
            lua_pushvalue(L, idx);
            lua_rawget(L, ENC_SEEN);
            if (!lua_isnil(L, -1)) enc_fail(L, at, "cycle", " (a __tojson result contains the value itself)");
            lua_pop(L, 1);
            enc_tojson(L, c, idx, parent, key, at, depth);
            return;
        }
        break;
    default: break;
    }
    enc_fail_type(L, idx, at);
}

/* ---- encode: cJSON tree -> text ---------------------------------------------------------------- */

static void out_reserve(lua_State *L, enc_ctx *c, size_t extra) {
    if (c->cap - c->len >= extra) return;
    size_t cap = c->cap ? c->cap : 256;
    while (cap - c->len < extra) cap *= 2;
    char *p = realloc(c->out, cap);
    if (!p) luaL_error(L, "json.encode: out of memory");
    c->out = p;
    c->cap = cap;
}

static void out_put(lua_State *L, enc_ctx *c, const char *s, size_t n) {
    out_reserve(L, c, n);
    memcpy(c->out + c->len, s, n);
    c->len += n;
}

static void out_char(lua_State *L, enc_ctx *c, char ch) {
    out_reserve(L, c, 1);
    c->out[c->len++] = ch;
}

static void out_newline(lua_State *L, enc_ctx *c, int level) {
    size_t n = (size_t)c->indent * (size_t)level;
    out_reserve(L, c, n + 1);
    c->out[c->len++] = '\n';
    memset(c->out + c->len, ' ', n);
    c->len += n;
}

/* The escapes cJSON itself prints: the short forms, \u00XX for other control characters, and
 * everything else (including non-ASCII UTF-8) as is. */
static void out_string(lua_State *L, enc_ctx *c, const char *s) {
    out_char(L, c, '"');
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch >= 0x20 && ch != '"' && ch != '\\') continue;
        out_put(L, c, run, (size_t)(p - run));
        run = p + 1;
        char esc[8];
        switch (ch) {
        case '"': out_put(L, c, "\\\"", 2); break;
        case '\\': out_put(L, c, "\\\\", 2); break;
        case '\b': out_put(L, c, "\\b", 2); break;
        case '\f': out_put(L, c, "\\f", 2); break;
        case '\n': out_put(L, c, "\\n", 2); break;
        case '\r': out_put(L, c, "\\r", 2); break;
        case '\t': out_put(L, c, "\\t", 2); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            out_put(L, c, esc, 6);
            break;
        }
    }
    out_put(L, c, run, strlen(run));
    out_char(L, c, '"');
}

/* Not cJSON's printer: it prints -0 as 0 and accepts %.15g when it is merely within
 * DBL_EPSILON of the value (0.1 + 0.2 would come out as 0.3). Integral values print as
 * integers up to 2^63; everything else as the shortest %.15g/%.16g/%.17g that reads back
 * exactly. */
static int fmt_number(char *buf, size_t size, double d) {
    if (d == 0) return snprintf(buf, size, "%s", signbit(d) ? "-0" : "0");
    if (d == floor(d) && fabs(d) < 9223372036854775808.0) return snprintf(buf, size, "%.0f", d);
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(buf, size, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    return n;
}

static void enc_print(lua_State *L, enc_ctx *c, const cJSON *item, int level) {
    char num[40];
    switch (item->type & 0xFF) {
    case cJSON_NULL: out_put(L, c, "null", 4); return;
    case cJSON_False: out_put(L, c, "false", 5); return;
    case cJSON_True: out_put(L, c, "true", 4); return;
    case cJSON_Number: out_put(L, c, num, (size_t)fmt_number(num, sizeof num, item->valuedouble)); return;
    case cJSON_String: out_string(L, c, item->valuestring); return;
    case cJSON_Array:
    case cJSON_Object: {
        int obj = (item->type & 0xFF) == cJSON_Object;
        out_char(L, c, obj ? '{' : '[');
        for (const cJSON *ch = item->child; ch; ch = ch->next) {
            if (c->indent >= 0) out_newline(L, c, level + 1);
            if (obj) {
                out_string(L, c, ch->string);
                out_put(L, c, ": ", c->indent >= 0 ? 2 : 1);
            }
            enc_print(L, c, ch, level + 1);
            if (ch->next) out_char(L, c, ',');
        }
        if (item->child && c->indent >= 0) out_newline(L, c, level);
        out_char(L, c, obj ? '}' : ']');
        return;
    }
    default: luaL_error(L, "json.encode: internal error: unexpected cJSON node type %d", item->type);
    }
}

/* The part of encode that may raise: every error unwinds to json_encode's lua_pcall, which
 * frees the tree and the text buffer and re-raises. */
static int enc_run(lua_State *L) {
    enc_ctx *c = lua_touserdata(L, ENC_CTX);
    lua_settop(L, ENC_OBJECT_MT);
    lua_newtable(L); /* ENC_SEEN: table -> path length where it is being encoded */
    enc_value(L, c, ENC_VALUE, NULL, NULL, NULL, 1);
    enc_print(L, c, c->root, 0);
    lua_pushlstring(L, c->out, c->len);
    return 1;
}


static void enc_options(lua_State *L, int *indent, int *empty_array) {
    if (lua_isnoneornil(L, 2)) return;
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (name && !strcmp(name, "indent")) {
            lua_Number d = lua_tonumber(L, -1);
            if (lua_type(L, -1) != LUA_TNUMBER || d != floor(d) || d < 0 || d > MAX_INDENT)
                luaL_argerror(L, 2, "indent must be an integer from 0 to " STR(MAX_INDENT) " (spaces per level)");
            *indent = (int)d;
        } else if (name && !strcmp(name, "empty")) {
            const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
            if (!strcmp(v, "array"))
                *empty_array = 1;
            else if (!strcmp(v, "object"))
                *empty_array = 0;
            else
                luaL_argerror(L, 2, "empty must be \"object\" or \"array\"");
        } else {
            if (name)
                lua_pushfstring(L, "unknown option '%s' (the options are indent, empty)", name);
            else
                lua_pushfstring(L, "option names are strings, not %s", luaL_typename(L, -2));
            luaL_argerror(L, 2, lua_tostring(L, -1));
        }
        lua_pop(L, 1);
    }
}

/* encode and pretty; indent -1 means compact unless the options say otherwise. */
static int json_encode_with(lua_State *L, int indent) {
    luaL_checkany(L, 1);
    lua_settop(L, 2);
    int empty_array = 0;
    enc_options(L, &indent, &empty_array);
    enc_ctx c = {NULL, NULL, 0, 0, indent, empty_array};
    lua_pushcfunction(L, enc_run);
    lua_pushvalue(L, 1);
    lua_pushlightuserdata(L, &c);
    lua_pushvalue(L, UV_NULL);
    lua_pushvalue(L, UV_ARRAY_MT);
    lua_pushvalue(L, UV_OBJECT_MT);
    int rc = lua_pcall(L, 5, 1, 0);
    cJSON_Delete(c.root);
    free(c.out);
    if (rc != 0) return lua_error(L);
    return 1;
}

static int json_encode(lua_State *L) { return json_encode_with(L, -1); }

static int json_pretty(lua_State *L) { return json_encode_with(L, 2); }

/* ---- decode ------------------------------------------------------------------------------------ */

static int is_json_space(unsigned char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

static int is_digit(unsigned char ch) { return ch >= '0' && ch <= '9'; }

static long hex4(const unsigned char *p) {
    long v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char ch = p[k];
        int h = is_digit(ch) ? ch - '0' : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10 : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10 : -1;
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

typedef struct {
    size_t off;      /* the first problem found */
    const char *why; /* what it is, for the message */
    int unclosed;    /* no problem, but the text ends inside a string or an open [ or { ... */
    size_t open_at;  /* ... opened here */
} dec_scan_t;

static int dec_flag(dec_scan_t *sc, size_t off, const char *why) {
    sc->off = off;
    sc->why = why;
    return 0;
}

/* Returns the end of the number token at s[i], or 0 (after dec_flag) if it is malformed. */
static size_t dec_scan_number(const unsigned char *s, size_t n, size_t i, dec_scan_t *sc) {
    size_t start = i;
    if (s[i] == '-') i++;
    if (i < n && s[i] == '0') {
        i++;
        if (i < n && is_digit(s[i])) return dec_flag(sc, start, "leading zero in a number"), 0;
    } else if (i < n && is_digit(s[i])) {
        while (i < n && is_digit(s[i])) i++;
    } else {
        return dec_flag(sc, start, "malformed number"), 0;
    }
    if (i < n && s[i] == '.') {
        i++;
        if (!(i < n && is_digit(s[i]))) return dec_flag(sc, start, "malformed number"), 0;
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (!(i < n && is_digit(s[i]))) return dec_flag(sc, start, "malformed number"), 0;
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && (s[i] == '.' || s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-'))
        return dec_flag(sc, start, "malformed number"), 0;
    if (i - start > MAX_NUMBER_LEN)
        return dec_flag(sc, start, "number longer than " STR(MAX_NUMBER_LEN) " characters (not supported)"), 0;
    return i;
}

/* The lexical checks that cJSON 1.7.15 skips: it takes any byte <= 32 (NUL included) for
 * white space, copies raw control characters into strings, reads "\u00zz" as NUL, cannot
 * represent "\u0000" (its strings end at NUL), and reads numbers with strtod ("01", "1.", and
 * cut at 63 characters). Also finds where nesting passes the limit and, for the message, what
 * is left open when the text ends. Structure (commas, colons, brackets) is left to cJSON. */
static int dec_scan(const unsigned char *s, size_t n, dec_scan_t *sc) {
    size_t open[MAX_DEPTH];
    int depth = 0;
    size_t i = 0;
    sc->unclosed = 0;
    while (i < n) {
        unsigned char ch = s[i];
        if (is_json_space(ch)) {
            i++;
        } else if (ch == '[' || ch == '{') {
            if (depth == MAX_DEPTH) return dec_flag(sc, i, DEPTH_MSG);
            open[depth++] = i++;
        } else if (ch == ']' || ch == '}') {
            if (depth > 0) depth--;
            i++;
        } else if (ch == '"') {
            size_t start = i++;
            for (;;) {
                if (i >= n) {
                    sc->unclosed = 1;
                    sc->open_at = start;
                    return 1;
                }
                unsigned char c = s[i];
                if (c == '"') {
                    i++;
                    break;
                }
                if (c < 0x20)
                    return dec_flag(sc, i, "control character inside a string (write it as an escape: \\n, \\t, \\u001f, ...)");
                if (c != '\\') {
                    i++;
                    continue;
                }
                if (i + 1 >= n) {
                    i++;
                    continue;
                }
                switch (s[i + 1]) {
                case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': i += 2; continue;
                case 'u': break;
                default: return dec_flag(sc, i, "invalid escape (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
                }
                long cp = n - i >= 6 ? hex4(s + i + 2) : -1;
                if (cp < 0) return dec_flag(sc, i, "\\u needs 4 hex digits");
                if (cp == 0) return dec_flag(sc, i, "\\u0000 is not supported (seer.json strings cannot contain NUL)");
                if (cp >= 0xDC00 && cp <= 0xDFFF) return dec_flag(sc, i, "unpaired UTF-16 surrogate");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    long lo = n - i >= 12 && s[i + 6] == '\\' && s[i + 7] == 'u' ? hex4(s + i + 8) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) return dec_flag(sc, i, "unpaired UTF-16 surrogate");
                    i += 12;
                } else {
                    i += 6;
                }
            }
        } else if (ch == '-' || is_digit(ch)) {
            i = dec_scan_number(s, n, i, sc);
            if (!i) return 0;
        } else if (ch < 0x20) {
            return dec_flag(sc, i, "control character outside a string");
        } else if (ch >= 0x80) {
            return dec_flag(sc, i, "unexpected character outside a string");
        } else {
            i++; /* letters, commas, colons: cJSON's business */
        }
    }
    if (depth > 0) {
        sc->unclosed = 1;
        sc->open_at = open[depth - 1];
    }
    return 1;
}

/* Raises "json.decode: WHAT at byte OFF (line L, column C)DETAIL". Columns count characters;
 * byte offsets are 0-based, lines and columns 1-based, as editors show them. */
static int dec_fail(lua_State *L, const char *s, size_t n, size_t off, const char *what, const char *detail) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < off && i < n; i++) {
        if (s[i] == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)s[i] & 0xC0) != 0x80) {
            col++;
        }
    }
    char head[160];
    snprintf(head, sizeof head, "json.decode: %s at byte %zu (line %zu, column %zu)", what, off, line, col);
    lua_pushstring(L, head);
    lua_pushstring(L, detail);
    lua_concat(L, 2);
    return lua_error(L);
}

/* ": WHY, near 'TEXT'" (the text from off to the end of its line, at most 24 bytes) and a hint
 * about what the input leaves open. */
static int dec_fail_syntax(lua_State *L, const char *s, size_t n, size_t off, const char *why,
                           const dec_scan_t *sc) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, ": ");
    if (why) {
        luaL_addstring(&b, why);
        luaL_addstring(&b, ", ");
    }
    if (off >= n) {
        luaL_addstring(&b, "at the end of the input");
    } else {
        size_t len = 0;
        while (off + len < n && s[off + len] != '\n' && s[off + len] != '\r') len++;
        luaL_addstring(&b, "near '");
        add_escaped(&b, s + off, len, 24, 0);
        luaL_addchar(&b, '\'');
    }
    if (!why && sc->unclosed) {
        char hint[96];
        if (s[sc->open_at] == '"')
            snprintf(hint, sizeof hint, " (the input ends inside the string that starts at byte %zu)", sc->open_at);
        else
            snprintf(hint, sizeof hint, " (the input ends before the %c at byte %zu is closed)", s[sc->open_at],
                     sc->open_at);
        luaL_addstring(&b, hint);
    }
    luaL_pushresult(&b);
    return dec_fail(L, s, n, off, "invalid JSON", lua_tostring(L, -1));
}

/* Stack slots of dec_run, the protected half of decode. */
enum { DEC_TREE = 1, DEC_NULL, DEC_ARRAY_MT, DEC_OBJECT_MT };

static void dec_value(lua_State *L, const cJSON *item) {
    switch (item->type & 0xFF) {
    case cJSON_NULL: lua_pushvalue(L, DEC_NULL); return;
    case cJSON_False: lua_pushboolean(L, 0); return;
    case cJSON_True: lua_pushboolean(L, 1); return;
    case cJSON_Number: lua_pushnumber(L, (lua_Number)item->valuedouble); return;
    case cJSON_String: lua_pushstring(L, item->valuestring); return;
    case cJSON_Array:
    case cJSON_Object: {
        if (!lua_checkstack(L, 8)) luaL_error(L, "json.decode: Lua stack exhausted");
        int obj = (item->type & 0xFF) == cJSON_Object;
        int count = 0;
        for (const cJSON *ch = item->child; ch && count < INT32_MAX; ch = ch->next) count++;
        lua_createtable(L, obj ? 0 : count, obj ? count : 0);
        lua_pushvalue(L, obj ? DEC_OBJECT_MT : DEC_ARRAY_MT);
        lua_setmetatable(L, -2);
        int i = 0;
        for (const cJSON *ch = item->child; ch; ch = ch->next) {
            if (obj) {
                lua_pushstring(L, ch->string);
                dec_value(L, ch);
                lua_rawset(L, -3); /* a repeated key overwrites: the last one wins */
            } else {
                dec_value(L, ch);
                lua_rawseti(L, -2, ++i);
            }
        }
        return;
    }
    default: luaL_error(L, "json.decode: internal error: unexpected cJSON node type %d", item->type);
    }
}

static int dec_run(lua_State *L) {
    dec_value(L, lua_touserdata(L, DEC_TREE));
    return 1;
}

static int json_decode(lua_State *L) {
    luaL_checktype(L, 1, LUA_TSTRING);
    size_t n;
    const char *s = lua_tolstring(L, 1, &n);
    lua_settop(L, 2);
    lua_pushvalue(L, UV_NULL); /* 3: what null decodes to */
    if (!lua_isnil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            if (lua_type(L, -2) == LUA_TSTRING && !strcmp(lua_tostring(L, -2), "null")) {
                lua_replace(L, 3);
                continue;
            }
            if (lua_type(L, -2) == LUA_TSTRING)
                lua_pushfstring(L, "unknown option '%s' (the only option is null)", lua_tostring(L, -2));
            else
                lua_pushfstring(L, "option names are strings, not %s", luaL_typename(L, -2));
            luaL_argerror(L, 2, lua_tostring(L, -1));
        }
    }

    size_t bad;
    if (!seer_utf8_validate(s, n, &bad)) return dec_fail(L, s, n, bad, "input is not valid UTF-8", "");
    /* A byte order mark is allowed (RFC 8259 lets parsers ignore one); offsets stay those of
     * the whole input. */
    size_t base = n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3) ? 3 : 0;
    size_t first = base;
    while (first < n && is_json_space((unsigned char)s[first])) first++;
    if (first == n) return luaL_error(L, "json.decode: empty input");

    dec_scan_t sc;
    int scan_ok = dec_scan((const unsigned char *)s + base, n - base, &sc);
    if (!scan_ok) sc.off += base;
    if (sc.unclosed) sc.open_at += base;

    /* Not require_null_terminated: with an explicit length cJSON 1.7.15 then wants the NUL
     * counted inside the length, and stops at an embedded NUL as if the text ended there. We
     * check what follows the value ourselves. */
    const char *end = NULL;
    cJSON *tree = cJSON_ParseWithLengthOpts(s + base, n - base, &end, 0);
    size_t c_off = SIZE_MAX;
    const char *c_why = NULL;
    if (!tree) {
        c_off = end ? (size_t)(end - s) : base;
    } else {
        size_t p = (size_t)(end - s);
        while (p < n && is_json_space((unsigned char)s[p])) p++;
        if (p < n) {
            c_off = p;
            c_why = "unexpected text after the JSON value";
        }
    }
    /* Report whichever problem comes first in the text; at the same byte ours says more. */
    if (!scan_ok && sc.off <= c_off) {
        cJSON_Delete(tree);
        return dec_fail_syntax(L, s, n, sc.off, sc.why, &sc);
    }
    if (c_off != SIZE_MAX) {
        cJSON_Delete(tree);
        if (!scan_ok) sc.unclosed = 0;
        return dec_fail_syntax(L, s, n, c_off, c_why, &sc);
    }

    lua_pushcfunction(L, dec_run);
    lua_pushlightuserdata(L, tree);
    lua_pushvalue(L, 3);
    lua_pushvalue(L, UV_ARRAY_MT);
    lua_pushvalue(L, UV_OBJECT_MT);
    int rc = lua_pcall(L, 4, 1, 0);
    cJSON_Delete(tree);
    if (rc != 0) return lua_error(L);
    return 1;
}

/* ---- marks and the module ----------------------------------------------------------------------- */

static int json_mark(lua_State *L, int mt) {
    if (lua_isnoneornil(L, 1)) {
        lua_settop(L, 0);
        lua_newtable(L);
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    if (lua_getmetatable(L, 1)) {
        /* Replacing someone else's metatable would silently break that object. */
        if (!lua_rawequal(L, -1, UV_ARRAY_MT) && !lua_rawequal(L, -1, UV_OBJECT_MT))
            luaL_argerror(L, 1, "the table already has a metatable (give it a __tojson metamethod instead)");
        lua_pop(L, 1);
    }
    lua_pushvalue(L, mt);
    lua_setmetatable(L, 1);
    return 1;
}

static int json_array(lua_State *L) { return json_mark(L, UV_ARRAY_MT); }

static int json_object(lua_State *L) { return json_mark(L, UV_OBJECT_MT); }

static int json_has_mark(lua_State *L, int mt) {
    int yes = lua_type(L, 1) == LUA_TTABLE && lua_getmetatable(L, 1) && lua_rawequal(L, -1, mt);
    lua_pushboolean(L, yes);
    return 1;
}

static int json_is_array(lua_State *L) { return json_has_mark(L, UV_ARRAY_MT); }

static int json_is_object(lua_State *L) { return json_has_mark(L, UV_OBJECT_MT); }

static int json_null_tostring(lua_State *L) {
    lua_pushliteral(L, "json.null");
    return 1;
}

/* Pushes registry[key], creating it first with make (which pushes the new value). The values
 * outlive the module table, so opening the module twice keeps json.null the same value. */
static void registry_value(lua_State *L, const char *key, void (*make)(lua_State *)) {
    lua_getfield(L, LUA_REGISTRYINDEX, key);
    if (!lua_isnil(L, -1)) return;
    lua_pop(L, 1);
    make(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, key);
}

static void make_null(lua_State *L) {
    lua_newuserdata(L, 0);
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, json_null_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "json.null");
    lua_setfield(L, -2, "__name");
    lua_setmetatable(L, -2);
}

static void make_array_mt(lua_State *L) {
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "json.array");
    lua_setfield(L, -2, "__name");
}

static void make_object_mt(lua_State *L) {
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "json.object");
    lua_setfield(L, -2, "__name");
}

int seer_json_luaopen(lua_State *L) {
    static const luaL_Reg funcs[] = {
        {"encode", json_encode}, {"decode", json_decode},     {"pretty", json_pretty},       {"array", json_array},
        {"object", json_object}, {"is_array", json_is_array}, {"is_object", json_is_object}, {NULL, NULL},
    };
    lua_createtable(L, 0, 8);
    int mod = lua_gettop(L);
    registry_value(L, SEER_JSON_NULL_KEY, make_null);
    registry_value(L, SEER_JSON_ARRAY_MT_KEY, make_array_mt);
    registry_value(L, SEER_JSON_OBJECT_MT_KEY, make_object_mt);
    for (const luaL_Reg *f = funcs; f->name; f++) {
        lua_pushvalue(L, mod + 1);
        lua_pushvalue(L, mod + 2);
        lua_pushvalue(L, mod + 3);
        lua_pushcclosure(L, f->func, 3);
        lua_setfield(L, mod, f->name);
    }
    lua_pushvalue(L, mod + 1);
    lua_setfield(L, mod, "null");
    lua_settop(L, mod);
    return 1;
}
