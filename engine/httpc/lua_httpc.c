/* seer.core.httpc: the Lua binding of httpc.c; lua/seer/http.lua builds the API on it.
 *   request{url, method?, headers? = {"Name: value", ...}, body?, timeout_ms?, connect_timeout_ms?,
 *           max_bytes?, follow_redirects?, proxy?, on_chunk? = fn(string) -> stop?}
 *   -> status, raw_headers, body, seconds          (any HTTP status)
 *   -> nil, message, transient                     (transport failure)
 * Bad arguments raise; Ctrl-C raises "interrupted"; an error in on_chunk stops the transfer and
 * is raised again once libcurl has let go. */
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>

#include "host/host.h"
#include "httpc.h"

int seer_httpc_luaopen(lua_State *L);

typedef struct {
    lua_State *L;
    int fn;      /* stack index of on_chunk */
    int failed;  /* on_chunk raised: its error is at the top of the stack */
} chunk_ud_t;

static int call_chunk(void *ud, const char *data, size_t n) {
    chunk_ud_t *c = ud;
    lua_State *L = c->L;
    lua_pushvalue(L, c->fn);
    lua_pushlstring(L, data, n);
    if (lua_pcall(L, 1, 1, 0) != 0) {
        c->failed = 1; /* the error stays on the stack */
        return 1;
    }
    int stop = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return stop;
}

static long opt_ms(lua_State *L, const char *key, long dflt) {
    lua_getfield(L, 1, key);
    long v = dflt;
    if (!lua_isnil(L, -1)) {
        lua_Number n = lua_tonumber(L, -1);
        if (lua_type(L, -1) != LUA_TNUMBER || !(n >= 0 && n <= 86400000.0))
            luaL_error(L, "seer.http: %s must be a number of milliseconds from 0 to 86400000", key);
        v = (long)n;
    }
    lua_pop(L, 1);
    return v;
}

static const char *opt_s(lua_State *L, const char *key, size_t *len) {
    lua_getfield(L, 1, key);
    const char *s = NULL;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "seer.http: %s must be a string", key);
        s = lua_tolstring(L, -1, len);
    }
    lua_pop(L, 1); /* the string stays alive: the options table holds it */
    return s;
}

static int l_request(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    seer_httpc_req_t r;
    memset(&r, 0, sizeof r);
    r.url = opt_s(L, "url", NULL);
    r.method = opt_s(L, "method", NULL);
    r.body = opt_s(L, "body", &r.body_len);
    r.proxy = opt_s(L, "proxy", NULL);
    r.ca_pem = opt_s(L, "ca_pem", &r.ca_pem_len);
    r.cert_pem = opt_s(L, "cert_pem", &r.cert_pem_len);
    r.key_pem = opt_s(L, "key_pem", &r.key_pem_len);
    if ((r.cert_pem == NULL) != (r.key_pem == NULL)) luaL_error(L, "seer.http: cert_pem and key_pem go together");
    r.timeout_ms = opt_ms(L, "timeout_ms", 0);
    r.connect_timeout_ms = opt_ms(L, "connect_timeout_ms", 0);
    lua_getfield(L, 1, "max_bytes");
    if (!lua_isnil(L, -1)) {
        lua_Number n = lua_tonumber(L, -1);
        if (lua_type(L, -1) != LUA_TNUMBER || !(n >= 1 && n <= 1e12)) luaL_error(L, "seer.http: max_bytes must be a positive number");
        r.max_bytes = (size_t)n;
    }
    lua_pop(L, 1);
    lua_getfield(L, 1, "follow_redirects");
    r.follow_redirects = lua_isnil(L, -1) ? 1 : lua_toboolean(L, -1);
    lua_pop(L, 1);
    /* headers: a list of "Name: value" strings, kept alive in a userdata on the stack */
    lua_getfield(L, 1, "headers");
    int hidx = lua_gettop(L);
    if (!lua_isnil(L, hidx)) {
        if (lua_type(L, hidx) != LUA_TTABLE) luaL_error(L, "seer.http: headers must be a list of \"Name: value\" strings");
        size_t n = lua_objlen(L, hidx);
        if (n > 256) luaL_error(L, "seer.http: at most 256 headers");
        const char **h = lua_newuserdata(L, (n + 1) * sizeof *h);
        for (size_t i = 0; i < n; i++) {
            lua_rawgeti(L, hidx, (int)i + 1);
            if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "seer.http: headers[%d] must be a string", (int)i + 1);
            h[i] = lua_tostring(L, -1);
            lua_pop(L, 1); /* the list holds the string */
        }
        h[n] = NULL;
        r.headers = h;
    }
    chunk_ud_t cu = {L, 0, 0};
    lua_getfield(L, 1, "on_chunk");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TFUNCTION) luaL_error(L, "seer.http: on_chunk must be a function");
        cu.fn = lua_gettop(L);
        r.on_chunk = call_chunk;
        r.ud = &cu;
    }
    seer_httpc_resp_t resp;
    seer_err_t err = {0};
    int rc = seer_httpc_request(&r, &resp, &err);
    if (cu.failed) {
        seer_httpc_resp_free(&resp);
        return lua_error(L); /* on_chunk's error, at the top of the stack */
    }
    if (rc == SEER_EINTR) return seer_host_interrupt_raise(L);
    if (rc == SEER_EINVAL || rc == SEER_ENOMEM) return luaL_error(L, "%s", err.msg);
    if (rc < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err.msg);
        lua_pushboolean(L, resp.transient);
        return 3;
    }
    lua_pushinteger(L, (lua_Integer)resp.status);
    lua_pushlstring(L, resp.headers ? resp.headers : "", resp.headers_len);
    if (resp.body) lua_pushlstring(L, resp.body, resp.body_len);
    else lua_pushliteral(L, "");
    lua_pushnumber(L, resp.seconds);
    seer_httpc_resp_free(&resp);
    return 4;
}

int seer_httpc_luaopen(lua_State *L) {
    lua_newtable(L);
    lua_pushcfunction(L, l_request);
    lua_setfield(L, -2, "request");
    return 1;
}
