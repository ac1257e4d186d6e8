/* seer.core.rpc: the RPC watchdog and worker pool for Lua (lua/seer/rpc/server.lua); channels
 * are in lua_channel.c. A watchdog is userdata whose __gc stops its thread; a pool is the broker
 * of `seer rpc serve --workers N` (broker.c), closed by __gc. */
#include <lauxlib.h>
#include <lua.h>

#include "rpc.h"
#include "host/host.h"

/* ---- the watchdog ------------------------------------------------------------------------------- */

#define WD_MT SEER_RPC_WATCHDOG_MT

typedef struct {
    seer_rpc_watchdog_t *w;
} wd_ud;

static wd_ud *check_wd(lua_State *L) {
    wd_ud *u = luaL_checkudata(L, 1, WD_MT);
    if (!u->w) luaL_error(L, "rpc: the watchdog is stopped");
    return u;
}

/* watchdog(endpoint, key) -> watchdog, bound endpoint */
static int l_watchdog(lua_State *L) {
    const char *ep = luaL_checkstring(L, 1);
    size_t klen;
    const char *key = luaL_checklstring(L, 2, &klen);
    wd_ud *u = lua_newuserdata(L, sizeof *u);
    u->w = NULL;
    luaL_getmetatable(L, WD_MT);
    lua_setmetatable(L, -2);
    char bound[512];
    seer_err_t err;
    if (seer_rpc_watchdog_start(&u->w, ep, key, klen, bound, sizeof bound, &err) < 0)
        return luaL_error(L, "%s", err.msg);
    lua_pushstring(L, bound);
    return 2;
}

static const char *const reasons[] = {"running", "cancelled", "timeout"};

/* w:begin(call_id, timeout_ms) -> "running" | "cancelled" */
static int l_begin(lua_State *L) {
    wd_ud *u = check_wd(L);
    double ms = luaL_optnumber(L, 3, 0);
    if (!(ms >= 0 && ms <= 1e15)) return luaL_error(L, "watchdog: timeout_ms must be a finite number >= 0 (0: none), got %s", lua_tostring(L, 3));
    int r = seer_rpc_watchdog_begin(u->w, luaL_checkstring(L, 2), (long long)ms);
    lua_pushstring(L, reasons[r]);
    return 1;
}

/* w:finish() -> nil | "cancelled" | "timeout" */
static int l_finish(lua_State *L) {
    int r = seer_rpc_watchdog_end(check_wd(L)->w);
    if (r == SEER_RPC_RUNNING) lua_pushnil(L);
    else lua_pushstring(L, reasons[r]);
    return 1;
}

static int l_fired(lua_State *L) {
    lua_pushnumber(L, (lua_Number)seer_rpc_watchdog_fired(check_wd(L)->w));
    return 1;
}

/* w:ack(): the interrupts sent so far are accounted for (their calls ended) */
static int l_ack(lua_State *L) {
    seer_rpc_watchdog_ack(check_wd(L)->w);
    return 0;
}

/* w:unhandled() -> whether an interrupt was sent after the last ack (so a SIGINT the server
 * sees between calls is the watchdog's, not Ctrl-C) */
static int l_unhandled(lua_State *L) {
    lua_pushboolean(L, seer_rpc_watchdog_unhandled(check_wd(L)->w));
    return 1;
}

static int l_was_cancelled(lua_State *L) {
    lua_pushboolean(L, seer_rpc_watchdog_was_cancelled(check_wd(L)->w, luaL_checkstring(L, 2)));
    return 1;
}

static int l_stop(lua_State *L) {
    wd_ud *u = luaL_checkudata(L, 1, WD_MT);
    seer_rpc_watchdog_stop(u->w);
    u->w = NULL;
    return 0;
}

/* ---- the worker pool ------------------------------------------------------------------------------ */

#define POOL_MT "seer.rpc.pool"

typedef struct {
    seer_rpc_broker_t *b;
} pool_ud;

static pool_ud *check_pool(lua_State *L) {
    pool_ud *u = luaL_checkudata(L, 1, POOL_MT);
    if (!u->b) luaL_error(L, "rpc: the pool is closed");
    return u;
}

static const char *opt_field(lua_State *L, const char *name, size_t *len, int required) {
    lua_getfield(L, 1, name);
    const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, len) : NULL;
    if (!v && required) luaL_error(L, "rpc.pool: %s must be a string", name);
    lua_pop(L, 1); /* the string stays alive in the options table */
    return v;
}

/* pool{frontend, control, backend, key, name?, workers, idle_exit_s?} -> pool (its sockets bound) */
static int l_pool(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    seer_rpc_broker_opts_t o = {0};
    o.frontend = opt_field(L, "frontend", NULL, 1);
    o.control = opt_field(L, "control", NULL, 1);
    o.backend = opt_field(L, "backend", NULL, 1);
    o.key = opt_field(L, "key", &o.key_len, 1);
    o.name = opt_field(L, "name", NULL, 0);
    lua_getfield(L, 1, "workers");
    o.workers = (int)seer_lua_int(L, -1, INT32_MIN, INT32_MAX, "rpc: workers");
    lua_getfield(L, 1, "idle_exit_s");
    o.idle_exit_s = (int)seer_lua_optint(L, -1, 10, 0, INT32_MAX, "rpc: idle_exit_s");
    lua_pop(L, 2);
    pool_ud *u = lua_newuserdata(L, sizeof *u);
    u->b = NULL;
    luaL_getmetatable(L, POOL_MT);
    lua_setmetatable(L, -2);
    seer_err_t err;
    if (seer_rpc_broker_new(&u->b, &o, &err) < 0) return luaL_error(L, "%s", err.msg);
    return 1;
}

/* p:endpoints() -> frontend, control, backend (as bound) */
static int l_pool_endpoints(lua_State *L) {
    pool_ud *u = check_pool(L);
    lua_pushstring(L, seer_rpc_broker_endpoint(u->b, SEER_RPC_BROKER_FRONTEND));
    lua_pushstring(L, seer_rpc_broker_endpoint(u->b, SEER_RPC_BROKER_CONTROL));
    lua_pushstring(L, seer_rpc_broker_endpoint(u->b, SEER_RPC_BROKER_BACKEND));
    return 3;
}

/* p:run(argv) -> exit status: starts the workers and serves until shutdown */
static int l_pool_run(lua_State *L) {
    pool_ud *u = check_pool(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    int n = (int)lua_objlen(L, 2);
    const char **argv = lua_newuserdata(L, sizeof *argv * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "rpc.pool: argv[%d] must be a string", i + 1);
        argv[i] = lua_tostring(L, -1); /* alive in the table */
        lua_pop(L, 1);
    }
    argv[n] = NULL;
    seer_err_t err;
    int rc = seer_rpc_broker_run(u->b, (char *const *)argv, &err);
    if (rc < 0) return luaL_error(L, "%s", err.msg);
    lua_pushinteger(L, rc);
    return 1;
}

static int l_pool_close(lua_State *L) {
    pool_ud *u = luaL_checkudata(L, 1, POOL_MT);
    seer_rpc_broker_free(u->b);
    u->b = NULL;
    return 0;
}

int seer_rpc_luaopen(lua_State *L) {
    if (luaL_newmetatable(L, POOL_MT)) {
        static const luaL_Reg methods[] = {
            {"endpoints", l_pool_endpoints}, {"run", l_pool_run}, {"close", l_pool_close}, {NULL, NULL}};
        lua_newtable(L);
        luaL_register(L, NULL, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_pool_close);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, WD_MT)) {
        static const luaL_Reg methods[] = {{"begin", l_begin},
                                           {"finish", l_finish},
                                           {"fired", l_fired},
                                           {"ack", l_ack},
                                           {"unhandled", l_unhandled},
                                           {"was_cancelled", l_was_cancelled},
                                           {"stop", l_stop},
                                           {NULL, NULL}};
        lua_newtable(L);
        luaL_register(L, NULL, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_stop);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"watchdog", l_watchdog}, {"pool", l_pool}, {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, fns);
    seer_rpc_channel_open(L);
    return 1;
}
