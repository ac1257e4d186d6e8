/* The public face of the chat-template interpreter (jinja.c): the C entry points and the Lua
 * module seer.core.chat_template, which turns a Lua table of variables into cJSON and raises
 * the interpreter's message as a Lua error. */
#include "tokenizer/chat_template.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "json/json.h"
#include "tokenizer/jinja.h"

int seer_chat_template_render_ex(const char *tmpl, size_t tmpl_len, const cJSON *vars,
                                 const seer_chat_template_limits_t *lim, char **out,
                                 size_t *out_len, seer_err_t *err) {
    return seer_jinja_render(tmpl, tmpl_len, vars, lim, out, out_len, NULL, err);
}

int seer_chat_template_render(const char *tmpl, size_t tmpl_len, const cJSON *vars, char **out,
                              size_t *out_len, seer_err_t *err) {
    return seer_jinja_render(tmpl, tmpl_len, vars, NULL, out, out_len, NULL, err);
}

/* ---- Lua tables to cJSON ---- */

#define MAX_LUA_DEPTH 200

/* Converts the value at idx; returns NULL and sets *why on failure. Tables with keys exactly
 * 1..n become arrays, tables with string keys objects; an empty table is an array unless
 * json.object marks it; json.null becomes null. */
static cJSON *to_cjson(lua_State *L, int idx, int depth, const char **why) {
    if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
    switch (lua_type(L, idx)) {
    case LUA_TNIL: return cJSON_CreateNull();
    case LUA_TBOOLEAN: return cJSON_CreateBool(lua_toboolean(L, idx));
    case LUA_TNUMBER: {
        double d = lua_tonumber(L, idx);
        if (!isfinite(d)) { *why = "NaN or infinite number"; return NULL; }
        return cJSON_CreateNumber(d);
    }
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        if (memchr(s, 0, n)) { *why = "string with a NUL byte"; return NULL; }
        return cJSON_CreateString(s);
    }
    case LUA_TLIGHTUSERDATA:
    case LUA_TUSERDATA: {
        lua_getfield(L, LUA_REGISTRYINDEX, SEER_JSON_NULL_KEY);
        int is_null = lua_rawequal(L, -1, idx);
        lua_pop(L, 1);
        if (is_null) return cJSON_CreateNull();
        *why = "userdata value";
        return NULL;
    }
    case LUA_TTABLE: break;
    default: *why = "function, thread or other non-data value"; return NULL;
    }
    if (depth > MAX_LUA_DEPTH) { *why = "tables nested too deeply (or a cycle)"; return NULL; }
    luaL_checkstack(L, 4, "chat_template");
    /* classify: count keys, check for 1..n */
    size_t count = 0, nstr = 0;
    int other = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        count++;
        if (lua_type(L, -2) == LUA_TSTRING) nstr++;
        else if (lua_type(L, -2) != LUA_TNUMBER) other = 1;
        lua_pop(L, 1);
    }
    int marked_object = 0;
    if (count == 0 && lua_getmetatable(L, idx)) {
        lua_getfield(L, LUA_REGISTRYINDEX, SEER_JSON_OBJECT_MT_KEY);
        marked_object = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
    }
    size_t n = lua_objlen(L, idx);
    if (!other && nstr == 0 && n == count && !marked_object) {
        cJSON *arr = cJSON_CreateArray();
        if (!arr) { *why = "out of memory"; return NULL; }
        for (size_t i = 1; i <= n; i++) {
            lua_rawgeti(L, idx, (int)i);
            cJSON *c = to_cjson(L, -1, depth + 1, why);
            lua_pop(L, 1);
            if (!c) { cJSON_Delete(arr); return NULL; }
            cJSON_AddItemToArray(arr, c);
        }
        return arr;
    }
    if (other || nstr != count) { *why = "table with both number and string keys (or a sparse array)"; return NULL; }
    cJSON *obj = cJSON_CreateObject();
    if (!obj) { *why = "out of memory"; return NULL; }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        size_t kl;
        const char *k = lua_tolstring(L, -2, &kl);
        if (memchr(k, 0, kl)) { lua_pop(L, 2); cJSON_Delete(obj); *why = "key with a NUL byte"; return NULL; }
        cJSON *c = to_cjson(L, -1, depth + 1, why);
        lua_pop(L, 1);
        if (!c) { lua_pop(L, 1); cJSON_Delete(obj); return NULL; }
        cJSON_AddItemToObject(obj, k, c);
    }
    return obj;
}

/* render(template, vars[, max_work]) -> text, work units spent. max_work (nil or 0: the
 * default) is the fixed part of the work budget. */
static int l_render(lua_State *L) {
    size_t tl;
    const char *tmpl = luaL_checklstring(L, 1, &tl);
    seer_chat_template_limits_t lim = {0};
    if (!lua_isnoneornil(L, 3)) {
        lua_Number mw = luaL_checknumber(L, 3);
        if (!(mw >= 0) || mw > 9.0e18 || mw != floor(mw))
            return luaL_error(L, "chat_template.render: max_work must be a whole number of work units >= 0");
        lim.max_work = (size_t)mw;
    }
    cJSON *vars = NULL;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        const char *why = NULL;
        vars = to_cjson(L, 2, 0, &why);
        if (!vars) return luaL_error(L, "chat_template.render: cannot convert vars: %s", why ? why : "unknown error");
        if (!cJSON_IsObject(vars)) {
            if (cJSON_IsArray(vars) && cJSON_GetArraySize(vars) == 0) {
                cJSON_Delete(vars);
                vars = NULL;
            } else {
                cJSON_Delete(vars);
                return luaL_error(L, "chat_template.render: vars must be a table with string keys");
            }
        }
    }
    char *out = NULL;
    size_t n = 0;
    seer_err_t *err = malloc(sizeof *err);
    if (!err) { cJSON_Delete(vars); return luaL_error(L, "chat_template.render: out of memory"); }
    seer_err_clear(err);
    size_t work = 0;
    int rc = seer_jinja_render(tmpl, tl, vars, &lim, &out, &n, &work, err);
    cJSON_Delete(vars);
    if (rc < 0) {
        lua_pushfstring(L, "chat_template: %s", err->msg);
        free(err);
        return lua_error(L);
    }
    free(err);
    lua_pushlstring(L, out, n);
    free(out);
    lua_pushnumber(L, (lua_Number)work);
    return 2;
}

int seer_chat_template_luaopen(lua_State *L) {
    lua_newtable(L);
    lua_pushcfunction(L, l_render);
    lua_setfield(L, -2, "render");
    return 1;
}
