/* seer.core.host: the few process facts and file primitives the Lua side needs from C
 * (version, where the Lua tree is, atomic writes, real paths, terminals, a monotonic clock).
 * The user-facing wrappers with documentation are in lua/seer/init.lua. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>

#include "host_private.h"

#define SEER_LUA_INT_MAX 9007199254740992LL /* 2^53 */

int64_t seer_lua_int(lua_State *L, int idx, int64_t lo, int64_t hi, const char *what) {
    if (lo < -SEER_LUA_INT_MAX) lo = -SEER_LUA_INT_MAX;
    if (hi > SEER_LUA_INT_MAX) hi = SEER_LUA_INT_MAX;
    int t = lua_type(L, idx);
    char got[64];
    if (t != LUA_TNUMBER && !(t == LUA_TSTRING && lua_isnumber(L, idx))) {
        snprintf(got, sizeof got, "%s", t == LUA_TNONE ? "nothing" : lua_typename(L, t));
    } else {
        double d = lua_tonumber(L, idx);
        if (d >= (double)lo && d <= (double)hi && d == floor(d)) return (int64_t)d; /* NaN fails every comparison */
        if (d != d) snprintf(got, sizeof got, "nan");
        else if (isinf(d)) snprintf(got, sizeof got, "%sinf", d < 0 ? "-" : "");
        else snprintf(got, sizeof got, "%.14g", d);
    }
    /* lua_pushfstring has no 64-bit conversions: the message is made here */
    char msg[320];
    if (lo == -SEER_LUA_INT_MAX && hi == SEER_LUA_INT_MAX) snprintf(msg, sizeof msg, "%s must be a whole number, got %s", what, got);
    else if (hi == SEER_LUA_INT_MAX) snprintf(msg, sizeof msg, "%s must be a whole number >= %lld, got %s", what, (long long)lo, got);
    else snprintf(msg, sizeof msg, "%s must be a whole number from %lld to %lld, got %s", what, (long long)lo, (long long)hi, got);
    return luaL_error(L, "%s", msg);
}

int64_t seer_lua_optint(lua_State *L, int idx, int64_t def, int64_t lo, int64_t hi, const char *what) {
    return lua_isnoneornil(L, idx) ? def : seer_lua_int(L, idx, lo, hi, what);
}

int seer_lua_opttimeout(lua_State *L, int idx, int def, const char *what) {
    if (lua_isnoneornil(L, idx)) return def;
    int t = lua_type(L, idx);
    double d = t == LUA_TNUMBER || (t == LUA_TSTRING && lua_isnumber(L, idx)) ? lua_tonumber(L, idx) : NAN;
    if (d != d) return luaL_error(L, "%s must be a number of milliseconds (negative: none), got %s", what, t == LUA_TNUMBER ? "nan" : lua_typename(L, t));
    if (d < 0) return -1;
    if (d >= (double)INT32_MAX) return INT32_MAX;
    return (int)ceil(d);
}

static int l_version(lua_State *L) {
    lua_pushstring(L, seer_version());
    return 1;
}

static int l_version_long(lua_State *L) {
    lua_pushfstring(L, "%s, %s", seer_version_long(), LUAJIT_VERSION);
    return 1;
}

static int l_lua_dir(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, "seer.lua_dir");
    return 1;
}

static int l_read_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    FILE *f = fopen(path, "rb");
    if (!f) return luaL_error(L, "cannot read %s: %s", path, strerror(errno));
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (;;) {
        char *p = luaL_prepbuffer(&b);
        size_t n = fread(p, 1, LUAL_BUFFERSIZE, f);
        luaL_addsize(&b, n);
        if (n < LUAL_BUFFERSIZE) break;
    }
    int bad = ferror(f);
    int e = errno;
    fclose(f);
    if (bad) return luaL_error(L, "cannot read %s: %s", path, strerror(e));
    luaL_pushresult(&b);
    return 1;
}

static int l_write_file(lua_State *L) {
    size_t n;
    const char *path = luaL_checkstring(L, 1);
    const char *data = luaL_checklstring(L, 2, &n);
    seer_err_t err;
    if (seer_host_write_file_atomic(path, data, n, &err) < 0) return luaL_error(L, "%s", err.msg);
    return 0;
}

static int l_realpath(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    char buf[PATH_MAX];
    if (!realpath(path, buf)) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    lua_pushstring(L, buf);
    return 1;
}

static int l_cwd(lua_State *L) {
    char buf[PATH_MAX];
    if (!getcwd(buf, sizeof buf)) return luaL_error(L, "cannot get the working directory: %s", strerror(errno));
    lua_pushstring(L, buf);
    return 1;
}

static int l_isatty(lua_State *L) {
    int fd = (int)seer_lua_optint(L, 1, 1, 0, INT32_MAX, "isatty: file descriptor");
    lua_pushboolean(L, isatty(fd));
    return 1;
}

static int l_now(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    return 1;
}

static int l_interrupted(lua_State *L) {
    lua_pushboolean(L, seer_host_interrupted());
    return 1;
}

/* Names in a directory (no "." or ".."), unsorted; errors name the directory. */
static int l_list_dir(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    DIR *d = opendir(path);
    if (!d) return luaL_error(L, "cannot list %s: %s", path, strerror(errno));
    lua_newtable(L);
    int i = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        lua_pushstring(L, e->d_name);
        lua_rawseti(L, -2, ++i);
    }
    closedir(d);
    return 1;
}

/* script_error() -> the first line of the error the script ended with ("interrupted" for
 * Ctrl-C, SIGTERM or a hangup), or nil while it runs or when it ended normally. For finalizers
 * (seer.exit). */
static int l_script_error(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, "seer.script_error");
    return 1;
}

static int l_getpid(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)getpid());
    return 1;
}

static const luaL_Reg corelib[] = {
    {"version", l_version},
    {"version_long", l_version_long},
    {"lua_dir", l_lua_dir},
    {"read_file", l_read_file},
    {"write_file", l_write_file},
    {"realpath", l_realpath},
    {"cwd", l_cwd},
    {"isatty", l_isatty},
    {"now", l_now},
    {"interrupted", l_interrupted},
    {"script_error", l_script_error},
    {"getpid", l_getpid},
    {"list_dir", l_list_dir},
    {NULL, NULL},
};

int seer_host_corelib_open(lua_State *L) {
    lua_newtable(L);
    luaL_register(L, NULL, corelib);
    return 1;
}

void seer_host_corelib_configure(lua_State *L, const char *lua_dir, const char *progname) {
    lua_pushstring(L, lua_dir);
    lua_setfield(L, LUA_REGISTRYINDEX, "seer.lua_dir");
    lua_pushstring(L, progname ? progname : "seer");
    lua_setfield(L, LUA_REGISTRYINDEX, "seer.progname");
}
