/* Lua bindings of the tokenizer (module seer.core.tokenizer): a tokenizer is a userdata with
 * __gc; ids cross as Lua arrays of integers (0-based ids, as in Hugging Face). The documented
 * API is lua/seer/tokenizer.lua. */
#include "tokenizer.h"
#include "host/host.h"

#include <math.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#define TOK_MT "seer.tokenizer"

typedef struct {
    seer_tokenizer_t *tok;
} ud_t;

static seer_tokenizer_t *check(lua_State *L) {
    ud_t *u = luaL_checkudata(L, 1, TOK_MT);
    if (!u->tok) luaL_error(L, "tokenizer has been freed");
    return u->tok;
}

static int push_new(lua_State *L, seer_tokenizer_t *tok) {
    ud_t *u = lua_newuserdata(L, sizeof *u);
    u->tok = tok;
    luaL_getmetatable(L, TOK_MT);
    lua_setmetatable(L, -2);
    return 1;
}

static int l_load_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    seer_err_t err;
    seer_tokenizer_t *tok;
    if (seer_tokenizer_load_file(&tok, path, &err) < 0) return luaL_error(L, "%s", err.msg);
    return push_new(L, tok);
}

/* read_model_file(path, max_bytes) -> text | nil, message, "missing" (absent) or "refused" (a
 * link out of the folder, not a regular file, too big, unreadable): seer_tokenizer_read_model_file. */
static int l_read_model_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    lua_Number mx = luaL_checknumber(L, 2);
    if (!(mx >= 0 && mx <= (lua_Number)SEER_TOKENIZER_MAX_FILE)) return luaL_error(L, "read_model_file: bad max_bytes");
    seer_err_t err;
    char *text;
    size_t len;
    int rc = seer_tokenizer_read_model_file(path, (size_t)mx, &text, &len, &err);
    if (rc < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err.msg);
        lua_pushstring(L, rc == SEER_ENOTFOUND ? "missing" : "refused");
        return 3;
    }
    lua_pushlstring(L, text, len);
    free(text);
    return 1;
}

/* kind(path) -> "file", "dir", "other" or nil (stat: follows links, opens nothing, so a FIFO is
 * "other" rather than waited on; reading goes through read_model_file's checks). */
static int l_kind(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : "other");
    return 1;
}

static int l_load_json(lua_State *L) {
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    const char *name = luaL_optstring(L, 2, "tokenizer.json");
    seer_err_t err;
    seer_tokenizer_t *tok;
    if (seer_tokenizer_load_json(&tok, text, len, name, &err) < 0) return luaL_error(L, "%s", err.msg);
    return push_new(L, tok);
}

static int l_load_gpt2(lua_State *L) {
    const char *vocab = luaL_checkstring(L, 1), *merges = luaL_checkstring(L, 2);
    seer_err_t err;
    seer_tokenizer_t *tok;
    if (seer_tokenizer_load_gpt2(&tok, vocab, merges, &err) < 0) return luaL_error(L, "%s", err.msg);
    return push_new(L, tok);
}

static int l_gc(lua_State *L) {
    ud_t *u = luaL_checkudata(L, 1, TOK_MT);
    seer_tokenizer_free(u->tok);
    u->tok = NULL;
    return 0;
}

static int l_encode(lua_State *L) {
    seer_tokenizer_t *tok = check(L);
    size_t len;
    const char *text = luaL_checklstring(L, 2, &len);
    int add_special = lua_toboolean(L, 3);
    int32_t *ids;
    size_t n;
    seer_err_t err;
    if (seer_tokenizer_encode(tok, text, len, add_special, &ids, &n, &err) < 0) return luaL_error(L, "%s", err.msg);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushinteger(L, ids[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    free(ids);
    return 1;
}

static int l_decode(lua_State *L) {
    seer_tokenizer_t *tok = check(L);
    int skip = lua_toboolean(L, 3);
    int32_t one, *ids = &one;
    size_t n;
    if (lua_isnumber(L, 2)) {
        one = (int32_t)seer_lua_int(L, 2, INT32_MIN, INT32_MAX, "tokenizer: decode: id");
        n = 1;
    } else {
        luaL_checktype(L, 2, LUA_TTABLE);
        n = lua_objlen(L, 2);
        ids = malloc((n + 1) * sizeof *ids);
        if (!ids) return luaL_error(L, "tokenizer: out of memory");
        for (size_t i = 0; i < n; i++) {
            lua_rawgeti(L, 2, (int)i + 1);
            lua_Number v = lua_tonumber(L, -1);
            if (!lua_isnumber(L, -1) || !(v >= INT32_MIN && v <= INT32_MAX) || v != floor(v)) {
                free(ids);
                return luaL_error(L, "tokenizer: decode: ids[%d] is not an integer id", (int)i + 1);
            }
            ids[i] = (int32_t)v;
            lua_pop(L, 1);
        }
    }
    char *text;
    size_t len;
    seer_err_t err;
    int rc = seer_tokenizer_decode(tok, ids, n, skip, &text, &len, &err);
    if (ids != &one) free(ids);
    if (rc < 0) return luaL_error(L, "%s", err.msg);
    lua_pushlstring(L, text, len);
    free(text);
    return 1;
}

static int l_token_to_id(lua_State *L) {
    seer_tokenizer_t *tok = check(L);
    size_t len;
    const char *s = luaL_checklstring(L, 2, &len);
    int32_t id = seer_tokenizer_token_to_id(tok, s, len);
    if (id < 0) lua_pushnil(L);
    else lua_pushinteger(L, id);
    return 1;
}

static int l_id_to_token(lua_State *L) {
    seer_tokenizer_t *tok = check(L);
    lua_Number v = luaL_checknumber(L, 2);
    size_t len;
    const char *s = v >= INT32_MIN && v <= INT32_MAX && v == floor(v) ? seer_tokenizer_id_to_token(tok, (int32_t)v, &len) : NULL;
    if (!s) lua_pushnil(L);
    else lua_pushlstring(L, s, len);
    return 1;
}

static int l_vocab_size(lua_State *L) {
    lua_pushinteger(L, seer_tokenizer_vocab_size(check(L)));
    return 1;
}

static int l_is_special(lua_State *L) {
    seer_tokenizer_t *tok = check(L);
    lua_pushboolean(L, seer_tokenizer_is_special(tok, (int32_t)seer_lua_int(L, 2, INT32_MIN, INT32_MAX, "tokenizer: is_special: id")));
    return 1;
}

static int l_byte_to_unicode(lua_State *L) {
    int64_t b = seer_lua_int(L, 1, 0, 255, "byte_to_unicode: byte");
    lua_pushinteger(L, seer_tokenizer_byte_to_unicode((uint8_t)b));
    return 1;
}

int seer_tokenizer_luaopen(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"encode", l_encode},           {"decode", l_decode},         {"token_to_id", l_token_to_id},
        {"id_to_token", l_id_to_token}, {"vocab_size", l_vocab_size}, {"is_special", l_is_special},
        {NULL, NULL},
    };
    static const luaL_Reg funcs[] = {
        {"load_file", l_load_file},
        {"load_json", l_load_json},
        {"read_model_file", l_read_model_file},
        {"kind", l_kind},
        {"load_gpt2", l_load_gpt2},
        {"byte_to_unicode", l_byte_to_unicode},
        {NULL, NULL},
    };
    if (luaL_newmetatable(L, TOK_MT)) {
        lua_newtable(L);
        luaL_register(L, NULL, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushstring(L, "seer.tokenizer");
        lua_setfield(L, -2, "__name");
    }
    lua_pop(L, 1);
    lua_newtable(L);
    luaL_register(L, NULL, funcs);
    return 1;
}
