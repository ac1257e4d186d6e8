/* seer.core.hub: the hub downloader for Lua (lua/seer/hub.lua documents the API). Options come
 * as a table; errors become Lua errors carrying hub.c's message; Ctrl-C during a transfer
 * raises "interrupted" and leaves the partial file to be resumed next time. */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "host/host.h"
#include "hub.h"

int seer_hub_luaopen(lua_State *L);

static int interrupted(void *ud) {
    (void)ud;
    return seer_host_interrupted();
}

static const char *opt_str(lua_State *L, int t, const char *key) {
    lua_getfield(L, t, key);
    const char *s = NULL;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "seer.hub: option '%s' must be a string", key);
        s = lua_tostring(L, -1);
    }
    lua_pop(L, 1); /* the string stays alive: the options table holds it */
    return s;
}

/* Reads the options table at index 2 into o; the pattern array lives in a userdata on the stack
 * so a Lua error cannot leak it. */
static void read_opts(lua_State *L, seer_hub_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->progress = -1;
    o->interrupted = interrupted;
    if (lua_isnoneornil(L, 2)) return;
    luaL_checktype(L, 2, LUA_TTABLE);
    o->revision = opt_str(L, 2, "revision");
    o->token = opt_str(L, 2, "token");
    o->endpoint = opt_str(L, 2, "endpoint");
    o->cache_dir = opt_str(L, 2, "cache_dir");
    lua_getfield(L, 2, "progress");
    if (!lua_isnil(L, -1)) o->progress = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 2, "max_workers");
    if (!lua_isnil(L, -1)) {
        lua_Number n = lua_tonumber(L, -1);
        if (lua_type(L, -1) != LUA_TNUMBER || !(n >= 1 && n <= 64) || n != (lua_Number)(int)n)
            luaL_error(L, "seer.hub: max_workers must be a whole number from 1 to 64");
        o->max_workers = (int)n;
    }
    lua_pop(L, 1);
    static const char *const times[] = {"time_floor", "min_rate"};
    for (int i = 0; i < 2; i++) {
        lua_getfield(L, 2, times[i]);
        if (!lua_isnil(L, -1)) {
            lua_Number n = lua_tonumber(L, -1);
            if (lua_type(L, -1) != LUA_TNUMBER || !(n > 0 && n <= 1e15))
                luaL_error(L, "seer.hub: %s must be a number above 0", times[i]);
            if (i == 0) o->time_floor = n;
            else o->min_rate = n;
        }
        lua_pop(L, 1);
    }
    lua_getfield(L, 2, "allow_patterns");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TTABLE) luaL_error(L, "seer.hub: allow_patterns must be a list of glob strings");
        size_t n = lua_objlen(L, -1);
        const char **pats = lua_newuserdata(L, (n ? n : 1) * sizeof *pats);
        for (size_t i = 0; i < n; i++) {
            lua_rawgeti(L, -2, (int)i + 1);
            if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "seer.hub: allow_patterns[%d] must be a string", (int)i + 1);
            pats[i] = lua_tostring(L, -1);
            lua_pop(L, 1);
        }
        o->allow = pats;
        o->n_allow = n;
        lua_replace(L, 3); /* keep the array alive in slot 3 (the table stays in 2) */
    } else {
        lua_pop(L, 1);
    }
}

typedef int (*hub_lookup_fn)(const char *, const seer_hub_opts_t *, char **, seer_err_t *);

/* download and cached share one shape: options in, a snapshot directory out. */
static int lookup(lua_State *L, hub_lookup_fn fn) {
    const char *id = luaL_checkstring(L, 1);
    lua_settop(L, 3);
    seer_hub_opts_t o;
    read_opts(L, &o);
    seer_err_t err;
    seer_err_clear(&err);
    char *dir = NULL;
    int rc = fn(id, &o, &dir, &err);
    if (rc == SEER_EINTR) return seer_host_interrupt_raise(L);
    if (rc == SEER_ENOTFOUND && fn == seer_hub_cached) { /* not cached: nil, not an error */
        lua_pushnil(L);
        return 1;
    }
    if (rc < 0) return luaL_error(L, "%s", err.msg);
    lua_pushstring(L, dir);
    free(dir);
    return 1;
}

static int l_download(lua_State *L) { return lookup(L, seer_hub_download); }
static int l_cached(lua_State *L) { return lookup(L, seer_hub_cached); }

static int l_cache_dir(lua_State *L) {
    seer_err_t err;
    seer_err_clear(&err);
    char *dir = NULL;
    if (seer_hub_cache_dir(luaL_optstring(L, 1, NULL), &dir, &err) < 0) return luaL_error(L, "%s", err.msg);
    lua_pushstring(L, dir);
    free(dir);
    return 1;
}

int seer_hub_luaopen(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"download", l_download}, {"cached", l_cached}, {"cache_dir", l_cache_dir}, {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, fns);
    lua_newtable(L);
    for (size_t i = 0; i < seer_hub_default_allow_n; i++) {
        lua_pushstring(L, seer_hub_default_allow[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, -2, "DEFAULT_ALLOW");
    return 1;
}
