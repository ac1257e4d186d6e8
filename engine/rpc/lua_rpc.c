/* seer.core.rpc: the RPC hot path, watchdog and worker pool for Lua (lua/seer/rpc.lua,
 * lua/seer/rpc/server.lua). A channel wraps a seer.core.net socket (which it keeps alive) with
 * the per-message work of one side of the protocol; a watchdog is userdata whose __gc stops its
 * thread; a pool is the broker of `seer rpc serve --workers N`. */
#include <lauxlib.h>
#include <lua.h>

#include "rpc.h"

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
    int r = seer_rpc_watchdog_begin(u->w, luaL_checkstring(L, 2), (long long)luaL_optnumber(L, 3, 0));
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

int seer_rpc_luaopen(lua_State *L) {
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
    static const luaL_Reg fns[] = {{"watchdog", l_watchdog}, {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, fns);
    seer_rpc_channel_open(L);
    return 1;
}
