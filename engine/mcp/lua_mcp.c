/* seer.core.mcp: the MCP client for Lua. Arguments cross this boundary as JSON text (the Lua
 * side, lua/seer/mcp/client.lua, encodes with seer.json, which keeps the difference between []
 * and {} that tool schemas need); results come back as Lua tables made straight from the
 * client's cJSON tree, as seer.json would decode them (push_tree). Errors become Lua errors that
 * name the server; Ctrl-C while waiting cancels the request and raises "interrupted". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "host/host.h"
#include "json/json.h"
#include "mcp.h"
#include "net/net.h"

#define CLIENT_MT "seer.mcp.client"

typedef struct {
    seer_mcp_client_t *c;
    seer_mcp_opts_t opts;
    lua_State *L;     /* the state of the call in progress (callbacks run in it) */
    int notif_ref;    /* on_notification, or LUA_NOREF */
    int warn_ref;     /* on_warning, or LUA_NOREF */
    int progress_ref; /* the current call's on_progress, or LUA_NOREF */
    int busy;
    int interrupt_seen; /* Ctrl-C fired inside a callback */
    char *cb_error;     /* a failing progress callback ends the call with its message */
} client_ud;

/* ---- callbacks from C into Lua ------------------------------------------------------------ */

static int ud_interrupted(void *p) {
    client_ud *u = p;
    return u->interrupt_seen || u->cb_error || seer_host_interrupted();
}

/* Calls the function on the stack below nargs arguments; on failure returns its message
 * (owned by the caller) and notes a Ctrl-C that surfaced as the error "interrupted". */
static char *call_lua(client_ud *u, int nargs) {
    lua_State *L = u->L;
    if (lua_pcall(L, nargs, 0, 0) == 0) return NULL;
    const char *msg = lua_tostring(L, -1);
    char *copy = strdup(msg ? msg : "(error object is not a string)");
    lua_pop(L, 1);
    size_t n = copy ? strlen(copy) : 0;
    if (n >= 11 && strcmp(copy + n - 11, "interrupted") == 0) u->interrupt_seen = 1;
    return copy;
}

static void ud_notification(void *p, const char *server, const char *method, const cJSON *params) {
    client_ud *u = p;
    if (u->notif_ref == LUA_NOREF || !u->L || seer_host_interrupted()) return;
    lua_State *L = u->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, u->notif_ref);
    lua_pushstring(L, server);
    lua_pushstring(L, method);
    char *text = params ? cJSON_PrintUnformatted(params) : NULL;
    if (text)
        lua_pushstring(L, text);
    else
        lua_pushnil(L);
    free(text);
    char *e = call_lua(u, 3);
    if (e && !u->interrupt_seen) fprintf(stderr, "seer: mcp server '%s': the on_notification handler failed: %s\n", server, e);
    free(e);
}

static void ud_warning(void *p, const char *server, const char *text) {
    client_ud *u = p;
    if (u->warn_ref == LUA_NOREF || !u->L || seer_host_interrupted()) {
        fprintf(stderr, "seer: mcp server '%s': %s\n", server, text);
        return;
    }
    lua_rawgeti(u->L, LUA_REGISTRYINDEX, u->warn_ref);
    lua_pushstring(u->L, server);
    lua_pushstring(u->L, text);
    char *e = call_lua(u, 2);
    if (e && !u->interrupt_seen) fprintf(stderr, "seer: mcp server '%s': %s (the on_warning handler failed: %s)\n", server, text, e);
    free(e);
}

static void ud_progress(void *p, const char *server, double progress, double total, const char *message) {
    client_ud *u = p;
    if (u->progress_ref == LUA_NOREF || u->cb_error || seer_host_interrupted()) return;
    lua_State *L = u->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, u->progress_ref);
    lua_pushnumber(L, progress);
    if (isnan(total))
        lua_pushnil(L);
    else
        lua_pushnumber(L, total);
    if (message)
        lua_pushstring(L, message);
    else
        lua_pushnil(L);
    lua_pushstring(L, server);
    char *e = call_lua(u, 4);
    if (e && !u->interrupt_seen) u->cb_error = e;
    else free(e);
}

/* ---- helpers ------------------------------------------------------------------------------ */

static client_ud *check_client(lua_State *L) {
    client_ud *u = luaL_checkudata(L, 1, CLIENT_MT);
    if (!u->c) luaL_error(L, "mcp: the client is closed");
    if (u->busy) luaL_error(L, "mcp: the client is busy (a callback cannot use the client it was called from)");
    return u;
}

/* A timeout in seconds (nil: 0 = the default) as milliseconds. */
static int opt_timeout(lua_State *L, int idx, const char *what) {
    if (lua_isnoneornil(L, idx)) return 0;
    if (lua_type(L, idx) != LUA_TNUMBER) luaL_error(L, "mcp: %s must be a number of seconds (got %s)", what, luaL_typename(L, idx));
    double s = lua_tonumber(L, idx);
    if (!(s > 0) || s > 2e6) luaL_error(L, "mcp: %s must be more than 0 seconds (got %f)", what, s);
    int ms = (int)ceil(s * 1000.0);
    return ms > 0 ? ms : 1;
}

static cJSON *opt_json(lua_State *L, int idx, const char *what) {
    if (lua_isnoneornil(L, idx)) return NULL;
    size_t n;
    const char *text = luaL_checklstring(L, idx, &n);
    cJSON *j = cJSON_ParseWithLength(text, n);
    if (!j) luaL_error(L, "mcp: %s is not valid JSON", what);
    return j;
}

static int opt_ref(lua_State *L, int idx, const char *what) {
    if (lua_isnoneornil(L, idx)) return LUA_NOREF;
    if (lua_type(L, idx) != LUA_TFUNCTION) luaL_error(L, "mcp: %s must be a function (got %s)", what, luaL_typename(L, idx));
    lua_pushvalue(L, idx);
    return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* ---- results: the cJSON tree as Lua values ------------------------------------------------------
 *
 * A result used to reach Lua as text: cJSON_PrintUnformatted (a copy), lua_pushstring (another),
 * utf8_fix and json.decode (a cJSON tree of its own, then the Lua strings), so a response of B
 * bytes cost about 4B at the peak (a 9 MiB cut result took the process to 46.6 MiB). The tree is
 * now turned into Lua values directly, the same values json.decode gave for its text:
 * - objects and arrays are tables marked with json.object and json.array (empty ones too), a
 *   repeated key's last value wins;
 * - null is json.null; a number is the double its digits name (what json.decode reads; the text
 *   cJSON printed had 15 digits whenever they came within 2 ulp, so 0.30000000000000004 came
 *   back as 0.3), except that a non-finite one (cJSON reads 1e999 as inf) is json.null, as
 *   cJSON printed it;
 * - a string (or key) is its bytes up to a NUL, as cJSON printed it, with each byte that does not
 *   start a well-formed UTF-8 sequence replaced by U+FFFD, as seer.core.net.utf8_fix did to the
 *   text (results go into transcripts and notebooks, which must be UTF-8).
 * Nesting is cJSON's (at most 1000 levels, as json.decode) and the number of values the reader's
 * (MCP_READER_MAX_VALUES). It runs protected, so that the tree is freed whatever happens. */

typedef struct {
    const cJSON *tree;
    int null_idx, arr_idx, obj_idx; /* stack slots of json.null and the two marks */
} tree_ctx;

static void push_utf8(lua_State *L, const char *p) {
    const unsigned char *s = (const unsigned char *)p;
    size_t n = strlen(p);
    if (seer_utf8_validate(p, n, NULL)) {
        lua_pushlstring(L, p, n);
        return;
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && s[run] < 0x80) run++;
        if (run > i) {
            luaL_addlstring(&b, p + i, run - i);
            i = run;
            continue;
        }
        size_t adv = seer_net_utf8_seq(s + i, n - i);
        if (adv) {
            luaL_addlstring(&b, p + i, adv);
        } else {
            luaL_addlstring(&b, "\xEF\xBF\xBD", 3);
            adv = 1;
        }
        i += adv;
    }
    luaL_pushresult(&b);
}

static void push_value(lua_State *L, const tree_ctx *t, const cJSON *j) {
    if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
        int obj = cJSON_IsObject(j);
        if (!lua_checkstack(L, 6)) luaL_error(L, "mcp: the result is nested too deeply for the Lua stack");
        lua_newtable(L);
        lua_pushvalue(L, obj ? t->obj_idx : t->arr_idx);
        lua_setmetatable(L, -2);
        int i = 0;
        for (const cJSON *c = j->child; c; c = c->next) {
            if (obj) {
                push_utf8(L, c->string ? c->string : "");
                push_value(L, t, c);
                lua_rawset(L, -3);
            } else {
                push_value(L, t, c);
                lua_rawseti(L, -2, ++i);
            }
        }
    } else if (cJSON_IsString(j)) {
        push_utf8(L, j->valuestring ? j->valuestring : "");
    } else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (!isfinite(d))
            lua_pushvalue(L, t->null_idx);
        else
            lua_pushnumber(L, d);
    } else if (cJSON_IsBool(j)) {
        lua_pushboolean(L, cJSON_IsTrue(j));
    } else {
        lua_pushvalue(L, t->null_idx);
    }
}

static int push_tree_protected(lua_State *L) {
    tree_ctx *t = lua_touserdata(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, SEER_JSON_NULL_KEY);
    if (lua_isnil(L, -1)) { /* seer.json not loaded yet: its sentinel and marks are made there */
        lua_pop(L, 1);
        lua_getglobal(L, "require");
        lua_pushliteral(L, "seer.core.json");
        lua_call(L, 1, 0);
        lua_getfield(L, LUA_REGISTRYINDEX, SEER_JSON_NULL_KEY);
    }
    t->null_idx = lua_gettop(L);
    lua_getfield(L, LUA_REGISTRYINDEX, SEER_JSON_ARRAY_MT_KEY);
    t->arr_idx = lua_gettop(L);
    lua_getfield(L, LUA_REGISTRYINDEX, SEER_JSON_OBJECT_MT_KEY);
    t->obj_idx = lua_gettop(L);
    push_value(L, t, t->tree);
    return 1;
}

/* Pushes j as Lua values and frees it. */
static int push_json(lua_State *L, cJSON *j) {
    if (!j) return luaL_error(L, "mcp: out of memory");
    tree_ctx t = {j, 0, 0, 0};
    lua_pushcfunction(L, push_tree_protected);
    lua_pushlightuserdata(L, &t);
    int rc = lua_pcall(L, 1, 1, 0);
    cJSON_Delete(j);
    if (rc != 0) return lua_error(L);
    return 1;
}

/* After a C call: raise its error (Ctrl-C as "interrupted", a failed progress callback with
 * its own message) or return normally. */
static void finish_call(lua_State *L, client_ud *u, int rc, seer_err_t *err) {
    u->busy = 0;
    if (u->progress_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, u->progress_ref);
    u->progress_ref = LUA_NOREF;
    char *cb_error = u->cb_error;
    u->cb_error = NULL;
    int interrupt = u->interrupt_seen;
    u->interrupt_seen = 0;
    if (rc == 0) {
        free(cb_error);
        return;
    }
    if (cb_error) {
        lua_pushfstring(L, "mcp: the on_progress handler failed (the call was cancelled): %s", cb_error);
        free(cb_error);
        lua_error(L);
    }
    if (rc == SEER_EINTR || interrupt) seer_host_interrupt_raise(L);
    /* No "file:line:" prefix: the message starts with the server's name, which is the point. */
    lua_pushstring(L, err->msg);
    lua_error(L);
}

/* ---- the module ----------------------------------------------------------------------------- */

/* connect(config_json, {timeout, connect_timeout, stderr, on_notification, on_warning, max_tools, max_tools_bytes,
 * max_result_bytes}) */
static int l_connect(lua_State *L) {
    cJSON *config = opt_json(L, 1, "the configuration");
    if (!config) return luaL_error(L, "mcp.connect: the configuration is missing");
    int opts = 2;
    client_ud *u = lua_newuserdata(L, sizeof *u);
    memset(u, 0, sizeof *u);
    u->notif_ref = u->warn_ref = u->progress_ref = LUA_NOREF;
    luaL_getmetatable(L, CLIENT_MT);
    lua_setmetatable(L, -2);
    int ok = 1;
    const char *bad = NULL;
    if (lua_istable(L, opts)) {
        lua_getfield(L, opts, "timeout");
        lua_getfield(L, opts, "connect_timeout");
        lua_getfield(L, opts, "stderr");
        lua_getfield(L, opts, "on_notification");
        lua_getfield(L, opts, "on_warning");
        int top = lua_gettop(L);
        /* Checked with luaL errors only after config is safe from leaking: parse errors below
         * free it first. */
        if (!lua_isnil(L, top - 4) && !(lua_type(L, top - 4) == LUA_TNUMBER && lua_tonumber(L, top - 4) > 0 && lua_tonumber(L, top - 4) <= 2000000)) ok = 0, bad = "timeout must be a positive number of seconds (at most 2000000)";
        if (!lua_isnil(L, top - 3) && !(lua_type(L, top - 3) == LUA_TNUMBER && lua_tonumber(L, top - 3) > 0 && lua_tonumber(L, top - 3) <= 2000000)) ok = 0, bad = "connect_timeout must be a positive number of seconds (at most 2000000)";
        if (!lua_isnil(L, top - 2)) {
            const char *m = lua_type(L, top - 2) == LUA_TSTRING ? lua_tostring(L, top - 2) : "";
            if (strcmp(m, "tee") == 0) u->opts.stderr_tee = 1;
            else if (strcmp(m, "capture") != 0) ok = 0, bad = "stderr must be \"capture\" or \"tee\"";
        }
        if (!lua_isnil(L, top - 1) && !lua_isfunction(L, top - 1)) ok = 0, bad = "on_notification must be a function";
        if (!lua_isnil(L, top) && !lua_isfunction(L, top)) ok = 0, bad = "on_warning must be a function";
        if (ok) {
            if (!lua_isnil(L, top - 4)) u->opts.timeout_ms = (int)ceil(lua_tonumber(L, top - 4) * 1000.0);
            if (!lua_isnil(L, top - 3)) u->opts.connect_timeout_ms = (int)ceil(lua_tonumber(L, top - 3) * 1000.0);
            u->notif_ref = opt_ref(L, top - 1, "on_notification");
            u->warn_ref = opt_ref(L, top, "on_warning");
        }
        lua_pop(L, 5);
        /* a server's tool list: at most max_tools tools of at most max_tools_bytes; a tool
         * result's message: at most max_result_bytes held (0: defaults) */
        static const char *const lim_names[3] = {"max_tools", "max_tools_bytes", "max_result_bytes"};
        static const char *const lim_errors[3] = {"max_tools must be a whole number >= 1",
                                                  "max_tools_bytes must be a whole number >= 1",
                                                  "max_result_bytes must be a whole number >= 4096"};
        size_t *lim_fields[3] = {&u->opts.max_tools, &u->opts.max_tools_bytes, &u->opts.max_result_bytes};
        for (int k = 0; k < 3 && ok; k++) {
            lua_getfield(L, opts, lim_names[k]);
            if (!lua_isnil(L, -1)) {
                lua_Number v = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
                if (!(v >= (k == 2 ? 4096 : 1) && v <= 1e15 && v == floor(v))) ok = 0, bad = lim_errors[k];
                else *lim_fields[k] = (size_t)v;
            }
            lua_pop(L, 1);
        }
    } else if (!lua_isnoneornil(L, opts)) {
        ok = 0;
        bad = "the options must be a table";
    }
    if (!ok) {
        cJSON_Delete(config);
        return luaL_error(L, "mcp.connect: %s", bad);
    }
    u->opts.cb.ud = u;
    u->opts.cb.interrupted = ud_interrupted;
    u->opts.cb.notification = ud_notification;
    u->opts.cb.warning = ud_warning;
    u->L = L;
    u->busy = 1;
    seer_err_t err;
    int rc = seer_mcp_connect(&u->c, config, &u->opts, &err);
    cJSON_Delete(config);
    finish_call(L, u, rc, &err);
    return 1;
}

static int l_tools(lua_State *L) {
    client_ud *u = check_client(L);
    u->L = L;
    u->busy = 1;
    const seer_mcp_tool_t *t;
    size_t n;
    seer_err_t err;
    int rc = seer_mcp_tools(u->c, &t, &n, &err);
    finish_call(L, u, rc, &err);
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "server", t[i].server);
        cJSON_AddStringToObject(o, "name", t[i].name);
        cJSON_AddStringToObject(o, "qualified_name", t[i].qualified_name);
        static const struct {
            const char *from, *to;
        } copy[] = {{"title", "title"},
                    {"description", "description"},
                    {"inputSchema", "input_schema"},
                    {"outputSchema", "output_schema"},
                    {"annotations", "annotations"}};
        for (size_t k = 0; k < sizeof copy / sizeof *copy; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(t[i].tool, copy[k].from);
            if (v) cJSON_AddItemToObject(o, copy[k].to, cJSON_Duplicate(v, 1));
        }
        if (!cJSON_GetObjectItemCaseSensitive(o, "input_schema")) {
            cJSON *s = cJSON_AddObjectToObject(o, "input_schema");
            cJSON_AddStringToObject(s, "type", "object");
        }
        cJSON_AddItemToArray(arr, o);
    }
    return push_json(L, arr);
}

/* call(name, args_json, timeout, on_progress) / call_tool(server, tool, args_json, timeout, on_progress) */
static int do_call(lua_State *L, int with_server) {
    client_ud *u = check_client(L);
    const char *server = with_server ? luaL_checkstring(L, 2) : NULL;
    int a = with_server ? 3 : 2;
    const char *name = luaL_checkstring(L, a);
    int timeout = opt_timeout(L, a + 2, "timeout");
    int ref = opt_ref(L, a + 3, "on_progress");
    cJSON *args = NULL;
    if (!lua_isnoneornil(L, a + 1)) {
        size_t n;
        const char *text = lua_tolstring(L, a + 1, &n);
        if (!text || !(args = cJSON_ParseWithLength(text, n))) {
            if (ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, ref);
            return luaL_error(L, "mcp: the arguments are not valid JSON");
        }
    }
    seer_mcp_call_opts_t co = {timeout, ref != LUA_NOREF ? ud_progress : NULL, u};
    u->L = L;
    u->busy = 1;
    u->progress_ref = ref;
    cJSON *result = NULL;
    seer_err_t err;
    int rc = with_server ? seer_mcp_call_tool(u->c, server, name, args, &co, &result, &err)
                         : seer_mcp_call(u->c, name, args, &co, &result, &err);
    cJSON_Delete(args);
    if (rc < 0) cJSON_Delete(result);
    finish_call(L, u, rc, &err);
    return push_json(L, result);
}

static int l_call(lua_State *L) {
    return do_call(L, 0);
}

static int l_call_tool(lua_State *L) {
    return do_call(L, 1);
}

/* request(server, method, params_json, timeout) */
static int l_request(lua_State *L) {
    client_ud *u = check_client(L);
    const char *server = luaL_checkstring(L, 2);
    const char *method = luaL_checkstring(L, 3);
    int timeout = opt_timeout(L, 5, "timeout");
    cJSON *params = opt_json(L, 4, "params");
    u->L = L;
    u->busy = 1;
    cJSON *result = NULL;
    seer_err_t err;
    int rc = seer_mcp_request(u->c, server, method, params, timeout, &result, &err);
    cJSON_Delete(params);
    finish_call(L, u, rc, &err);
    return push_json(L, result);
}

static int l_servers(lua_State *L) {
    client_ud *u = check_client(L);
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < seer_mcp_server_count(u->c); i++) {
        seer_mcp_server_info_t in;
        seer_mcp_server_info(u->c, i, &in);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", in.name);
        cJSON_AddStringToObject(o, "transport", in.transport);
        cJSON_AddStringToObject(o, "protocol_version", in.protocol_version);
        if (in.server_info) cJSON_AddItemToObject(o, "server_info", cJSON_Duplicate(in.server_info, 1));
        if (in.capabilities) cJSON_AddItemToObject(o, "capabilities", cJSON_Duplicate(in.capabilities, 1));
        if (in.instructions) cJSON_AddStringToObject(o, "instructions", in.instructions);
        if (in.pid) cJSON_AddNumberToObject(o, "pid", in.pid);
        if (in.dead) cJSON_AddStringToObject(o, "dead", in.dead);
        cJSON_AddItemToArray(arr, o);
    }
    return push_json(L, arr);
}

static int l_close(lua_State *L) {
    client_ud *u = luaL_checkudata(L, 1, CLIENT_MT);
    if (u->busy && u->c) return luaL_error(L, "mcp: the client is busy (a callback cannot close the client it was called from)");
    seer_mcp_close(u->c);
    u->c = NULL;
    if (u->notif_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, u->notif_ref);
    if (u->warn_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, u->warn_ref);
    u->notif_ref = u->warn_ref = LUA_NOREF;
    return 0;
}

static int l_gc(lua_State *L) {
    client_ud *u = luaL_checkudata(L, 1, CLIENT_MT);
    /* Callbacks must not run during collection: the servers are closed with them detached. */
    u->opts.cb.notification = NULL;
    u->opts.cb.warning = NULL;
    u->opts.cb.interrupted = NULL;
    u->busy = 0;
    return l_close(L);
}

static int l_tostring(lua_State *L) {
    client_ud *u = luaL_checkudata(L, 1, CLIENT_MT);
    if (!u->c) {
        lua_pushstring(L, "mcp client (closed)");
        return 1;
    }
    lua_pushfstring(L, "mcp client (%d servers)", (int)seer_mcp_server_count(u->c));
    return 1;
}

int seer_mcp_luaopen(lua_State *L);
int seer_mcp_luaopen(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"tools", l_tools},     {"call", l_call},   {"call_tool", l_call_tool},
        {"request", l_request}, {"servers", l_servers}, {"close", l_close},
        {NULL, NULL},
    };
    if (luaL_newmetatable(L, CLIENT_MT)) {
        lua_newtable(L);
        luaL_register(L, NULL, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    static const luaL_Reg funcs[] = {{"connect", l_connect}, {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, funcs);
    lua_pushstring(L, SEER_MCP_PROTOCOL_VERSION);
    lua_setfield(L, -2, "PROTOCOL_VERSION");
    return 1;
}
