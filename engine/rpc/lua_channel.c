/* seer.core.rpc.channel: one side of the RPC protocol on a seer.core.net socket (which the
 * channel keeps alive in its environment). The per-message work is here in C: headers,
 * signatures, frames, the replay guard (engine/rpc/wire.c). Two fast paths take the common
 * small call through without the Lua-level protocol code:
 *  - server (ch:fast{...}, then ch:recv): a call request with JSON scalar arguments to an
 *    exposed function runs from here, under the watchdog, and a scalar result is answered from
 *    here; a failure or a result that needs seer.rpc.wire goes to the Lua callbacks, and every
 *    other request comes back from recv for lua/seer/rpc/server.lua;
 *  - client (ch:call): scalar arguments are encoded and a reply {id, ok: true, result: scalar}
 *    decoded here; anything else is handed back for lua/seer/rpc.lua.
 * Both check what they accept strictly (only the members they know, JSON's grammar, valid UTF-8
 * strings without escapes), so a message the fast path takes gives the same result the Lua path
 * would. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include "host/host.h"
#include "json/json.h"
#include "rpc.h"

#define CH_MT "seer.rpc.channel"
#define HEADER_CAP 512
#define ID_CAP 96
#define BIG_STRING (64 * 1024) /* seer.rpc.wire.BIG_STRING: longer strings travel as frames */
#define FAST_MAX_ARGS 16

enum { ROLE_CLIENT, ROLE_SERVER };

/* Slots of the channel's environment table. */
enum { ENV_SOCKET = 1, ENV_FUNCTIONS, ENV_INVOKE, ENV_WATCHDOG, ENV_ON_ERROR, ENV_ENCODE };

typedef struct {
    int role;
    seer_rpc_hm_t hm;
    seer_rpc_guard_t *guard; /* servers facing clients; NULL otherwise */
    char name[128];          /* for log lines */
    int rcvtimeo;            /* the socket's ZMQ_RCVTIMEO as last set here */
    seer_rpc_msg_t msg;      /* the last message received; a server's request until replied to */
    int has_req;
    /* server fast path (ch:fast) */
    int fast;
    double default_timeout_ms; /* 0: none */
    seer_net_buf_t buf;        /* reply text */
} ch_ud;

static ch_ud *check_ch(lua_State *L) { return luaL_checkudata(L, 1, CH_MT); }

/* The channel's socket and key; raises when the socket is closed. */
static void *ch_sock(lua_State *L, const seer_net_key_t **key) {
    lua_getfenv(L, 1);
    lua_rawgeti(L, -1, ENV_SOCKET);
    void *sock = seer_net_lua_socket(L, -1, key);
    lua_pop(L, 2);
    return sock;
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* channel(socket, {role = "client"|"server", replay_guard?, name?}) */
static int l_channel(lua_State *L) {
    seer_net_lua_socket(L, 1, NULL);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "role");
    const char *role = luaL_checkstring(L, -1);
    int r = strcmp(role, "server") == 0 ? ROLE_SERVER : strcmp(role, "client") == 0 ? ROLE_CLIENT : -1;
    if (r < 0) return luaL_error(L, "rpc.channel: role must be \"client\" or \"server\", not %s", role);
    lua_getfield(L, 2, "replay_guard");
    int guard = lua_toboolean(L, -1);
    lua_getfield(L, 2, "name");
    const char *name = luaL_optstring(L, -1, "seer rpc");
    ch_ud *c = lua_newuserdata(L, sizeof *c);
    memset(c, 0, sizeof *c);
    c->role = r;
    c->rcvtimeo = -2;
    snprintf(c->name, sizeof c->name, "%s", name);
    luaL_getmetatable(L, CH_MT);
    lua_setmetatable(L, -2);
    seer_err_t err;
    if (seer_rpc_hm_init(&c->hm, &err) < 0) return luaL_error(L, "rpc.channel: %s", err.msg);
    if (guard && !(c->guard = seer_rpc_guard_new(600))) return luaL_error(L, "rpc.channel: out of memory");
    lua_createtable(L, ENV_ENCODE, 0);
    lua_pushvalue(L, 1);
    lua_rawseti(L, -2, ENV_SOCKET);
    lua_setfenv(L, -2);
    return 1;
}

static int l_ch_gc(lua_State *L) {
    ch_ud *c = luaL_checkudata(L, 1, CH_MT);
    seer_rpc_msg_free(&c->msg);
    c->has_req = 0;
    seer_rpc_guard_free(c->guard);
    c->guard = NULL;
    seer_net_buf_free(&c->buf);
    return 0;
}

/* ---- sending ------------------------------------------------------------------------------------ */

static const char *check_type(lua_State *L, int idx) {
    const char *t = luaL_checkstring(L, idx);
    for (const char *p = t; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || *p == '_')) luaL_error(L, "rpc: bad message type %s", t);
    return t;
}

/* The buffers at idx (nil or a list of strings) as frames; the strings stay alive in the list. */
static seer_net_frame_t *buffers_at(lua_State *L, int idx, int *n) {
    *n = 0;
    if (lua_isnoneornil(L, idx)) return NULL;
    luaL_checktype(L, idx, LUA_TTABLE);
    int len = (int)lua_objlen(L, idx);
    if (len == 0) return NULL;
    seer_net_frame_t *f = lua_newuserdata(L, sizeof *f * (size_t)len);
    for (int i = 0; i < len; i++) {
        lua_rawgeti(L, idx, i + 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "rpc: buffer %d is a %s, not a string", i + 1, luaL_typename(L, -1));
        f[i].data = lua_tolstring(L, -1, &f[i].len);
        lua_pop(L, 1);
    }
    *n = len;
    return f;
}

/* Signs and sends {header of type, parent, {}, content} + buffers after route's routing ids
 * (route NULL: none); id receives the new msg_id. Returns 0 or raises. */
static void send_msg(lua_State *L, void *sock, const seer_net_key_t *key, ch_ud *c, seer_rpc_msg_t *route,
                     const char *type, seer_net_frame_t parent, seer_net_frame_t content, const seer_net_frame_t *bufs,
                     int nb, char id[ID_CAP]) {
    char header[HEADER_CAP];
    int hn = seer_rpc_header(&c->hm, header, sizeof header, type, id, ID_CAP);
    if (hn < 0) luaL_error(L, "rpc: the header of %s does not fit", type);
    seer_net_frame_t parts[SEER_NET_NPARTS];
    parts[SEER_NET_HEADER] = (seer_net_frame_t){header, (size_t)hn};
    parts[SEER_NET_PARENT] = parent;
    parts[SEER_NET_METADATA] = (seer_net_frame_t){"{}", 2};
    parts[SEER_NET_CONTENT] = content;
    seer_err_t err;
    if (seer_rpc_send(sock, key, route, 0, route ? route->delim : 0, parts, bufs, nb, &err) < 0)
        luaL_error(L, "%s", err.msg);
}

/* ch:send(msg_type, content, buffers?) -> msg_id: a request (no routing ids, no parent). */
static int l_ch_send(lua_State *L) {
    ch_ud *c = check_ch(L);
    const seer_net_key_t *key;
    void *sock = ch_sock(L, &key);
    const char *type = check_type(L, 2);
    seer_net_frame_t content;
    content.data = luaL_checklstring(L, 3, &content.len);
    int nb;
    seer_net_frame_t *bufs = buffers_at(L, 4, &nb);
    char id[ID_CAP];
    send_msg(L, sock, key, c, NULL, type, (seer_net_frame_t){"{}", 2}, content, bufs, nb, id);
    lua_pushstring(L, id);
    return 1;
}

/* Answers the request held in c->msg (its routing ids move to the socket: one reply each). */
static void reply_msg(lua_State *L, void *sock, const seer_net_key_t *key, ch_ud *c, const char *type,
                      seer_net_frame_t content, const seer_net_frame_t *bufs, int nb) {
    seer_rpc_msg_t *m = &c->msg;
    c->has_req = 0;
    char id[ID_CAP];
    send_msg(L, sock, key, c, m, type, seer_rpc_frame(m, m->delim + 2 + SEER_NET_HEADER), content, bufs, nb, id);
    seer_rpc_msg_clear(m);
}

/* ch:reply(msg_type, content, buffers?): the answer to the request recv returned last. */
static int l_ch_reply(lua_State *L) {
    ch_ud *c = check_ch(L);
    const seer_net_key_t *key;
    void *sock = ch_sock(L, &key);
    if (!c->has_req) return luaL_error(L, "rpc: reply: no request to answer");
    const char *type = check_type(L, 2);
    seer_net_frame_t content;
    content.data = luaL_checklstring(L, 3, &content.len);
    int nb;
    seer_net_frame_t *bufs = buffers_at(L, 4, &nb);
    reply_msg(L, sock, key, c, type, content, bufs, nb);
    return 0;
}

/* ---- JSON scalars ------------------------------------------------------------------------------- */

typedef enum { SC_NULL, SC_FALSE, SC_TRUE, SC_NUMBER, SC_STRING } sc_kind;

typedef struct {
    sc_kind kind;
    double num;
    const char *s; /* SC_STRING: the contents, which need no decoding */
    size_t n;
} scalar_t;

/* A string JSON can carry as it is: valid UTF-8 without control characters (so no escapes are
 * needed but for '"' and '\'), checked by the caller for those two. */
static int plain_text(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20) return 0;
    size_t bad;
    return seer_utf8_validate(s, n, &bad);
}

/* Reads the raw JSON value v as a scalar the fast paths can take: a number, a literal, or a
 * string without escapes. Returns 0 when it is anything else. */
static int read_scalar(seer_rpc_str_t v, scalar_t *out) {
    const char *p = v.p, *e = v.p + v.n;
    if (v.n == 0) return 0;
    if (*p == '"') {
        if (v.n < 2 || memchr(p + 1, '\\', v.n - 2) || !plain_text(p + 1, v.n - 2)) return 0;
        out->kind = SC_STRING;
        out->s = p + 1;
        out->n = v.n - 2;
        return 1;
    }
    if (v.n == 4 && memcmp(p, "null", 4) == 0) return out->kind = SC_NULL, 1;
    if (v.n == 4 && memcmp(p, "true", 4) == 0) return out->kind = SC_TRUE, 1;
    if (v.n == 5 && memcmp(p, "false", 5) == 0) return out->kind = SC_FALSE, 1;
    if (seer_rpc_json_number_end(p, e) != e) return 0;
    if (v.n <= 15 && !memchr(p, '.', v.n) && !memchr(p, 'e', v.n) && !memchr(p, 'E', v.n)) {
        /* an integer of at most 15 digits: exact in a double, no strtod needed */
        long long x = 0;
        for (const char *q = *p == '-' ? p + 1 : p; q < e; q++) x = x * 10 + (*q - '0');
        out->num = *p == '-' ? (x == 0 ? -0.0 : (double)-x) : (double)x;
        out->kind = SC_NUMBER;
        return 1;
    }
    char tmp[64];
    if (v.n >= sizeof tmp) return 0;
    memcpy(tmp, p, v.n);
    tmp[v.n] = 0;
    char *end;
    out->num = strtod(tmp, &end);
    if (*end || !isfinite(out->num)) return 0; /* a locale's decimal comma, or an overflow */
    out->kind = SC_NUMBER;
    return 1;
}

/* A JSON array of scalars (at most FAST_MAX_ARGS); returns how many, or -1. */
static int read_scalar_array(seer_rpc_str_t v, scalar_t *out) {
    const char *p = v.p, *e = v.p + v.n;
    if (v.n < 2 || *p != '[' || e[-1] != ']') return -1;
    p++;
    e--;
    int n = 0;
    for (;;) {
        while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
        if (p == e) return n == 0 ? 0 : -1;
        if (n == FAST_MAX_ARGS) return -1;
        const char *s = p;
        if (*p == '"') {
            for (p++; p < e && *p != '"'; p++)
                if (*p == '\\') return -1;
            if (p == e) return -1;
            p++;
        } else {
            while (p < e && *p != ',' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') p++;
        }
        if (!read_scalar((seer_rpc_str_t){s, (size_t)(p - s)}, &out[n])) return -1;
        n++;
        while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
        if (p == e) return n;
        if (*p != ',') return -1;
        p++;
    }
}

static void push_scalar(lua_State *L, const scalar_t *v) {
    switch (v->kind) {
    case SC_NULL: lua_pushnil(L); break;
    case SC_FALSE: lua_pushboolean(L, 0); break;
    case SC_TRUE: lua_pushboolean(L, 1); break;
    case SC_NUMBER: lua_pushnumber(L, v->num); break;
    case SC_STRING: lua_pushlstring(L, v->s, v->n); break;
    }
}

/* Appends v in decimal; returns 1, or 0 when out of memory. */
static int add_int(seer_net_buf_t *b, long long v) {
    char tmp[24];
    int n = (int)sizeof tmp;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do tmp[--n] = (char)('0' + u % 10), u /= 10;
    while (u);
    if (v < 0) tmp[--n] = '-';
    return seer_net_buf_add(b, tmp + n, sizeof tmp - (size_t)n) == 0;
}

/* Appends the Lua value at idx as JSON when it is a scalar seer.rpc.wire would send as it is
 * (nil, a boolean, a finite number, a string shorter than BIG_STRING of valid UTF-8 without NUL
 * bytes). Returns 1, or 0 when it needs seer.rpc.wire. */
static int add_scalar(lua_State *L, int idx, seer_net_buf_t *b) {
    int t = lua_type(L, idx);
    if (t == LUA_TNIL) return seer_net_buf_add(b, "null", 4) == 0;
    if (t == LUA_TBOOLEAN)
        return lua_toboolean(L, idx) ? seer_net_buf_add(b, "true", 4) == 0 : seer_net_buf_add(b, "false", 5) == 0;
    if (t == LUA_TNUMBER) {
        double d = lua_tonumber(L, idx);
        if (!isfinite(d)) return 0;
        if (d == floor(d) && fabs(d) < 9007199254740992.0) {
            if (d == 0) return signbit(d) ? seer_net_buf_add(b, "-0", 2) == 0 : seer_net_buf_add(b, "0", 1) == 0;
            return add_int(b, (long long)d);
        }
        char tmp[40];
        int n = snprintf(tmp, sizeof tmp, "%.17g", d);
        return seer_net_buf_add(b, tmp, (size_t)n) == 0;
    }
    if (t == LUA_TSTRING) {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        size_t bad;
        if (n >= BIG_STRING || memchr(s, 0, n) || !seer_utf8_validate(s, n, &bad)) return 0;
        return seer_net_buf_add_json_string(b, s, n) == 0;
    }
    return 0;
}

/* ---- receiving ---------------------------------------------------------------------------------- */

static void push_buffers(lua_State *L, seer_rpc_msg_t *m, int from) {
    if (from >= m->n) {
        lua_pushnil(L);
        return;
    }
    lua_createtable(L, m->n - from, 0);
    for (int i = from; i < m->n; i++) {
        seer_net_frame_t f = seer_rpc_frame(m, i);
        lua_pushlstring(L, f.data, f.len);
        lua_rawseti(L, -2, i - from + 1);
    }
}

/* Waits for the next verified message in c->msg until deadline (timeout < 0: forever). Returns
 * 1, or 0 on timeout. Ctrl-C raises "interrupted", or with quiet returns 0 (the interrupt stays
 * pending for the caller's next wait). */
static int next_msg(lua_State *L, void *sock, const seer_net_key_t *key, ch_ud *c, int timeout, long long deadline,
                    int quiet) {
    for (;;) {
        if (seer_host_interrupted()) {
            if (quiet) return 0;
            seer_host_interrupt_raise(L);
        }
        int left = -1;
        if (timeout >= 0) {
            long long l = deadline - now_ms();
            left = l > 0 ? (int)l : 0;
        }
        if (left != c->rcvtimeo) {
            zmq_setsockopt(sock, ZMQ_RCVTIMEO, &left, sizeof left);
            c->rcvtimeo = left;
        }
        seer_err_t err;
        int r = seer_rpc_recv(sock, key, &c->msg, 0, &err);
        if (r == SEER_EINTR || r == SEER_RPC_DROPPED) continue;
        if (r < 0) luaL_error(L, "%s", err.msg);
        if (r == 1) return 1;
        if (timeout >= 0 && now_ms() >= deadline) return 0;
    }
}

static int id_ok(seer_rpc_str_t id) {
    if (!id.p || id.n == 0 || id.n >= ID_CAP) return 0;
    for (size_t i = 0; i < id.n; i++) {
        char ch = id.p[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '-' ||
              ch == '_' || ch == '.' || ch == ':'))
            return 0;
    }
    return 1;
}

/* The fast path of a server: runs the call request in c->msg when it is a plain one. Returns 1
 * when it was answered, 0 when Lua must handle it (nothing was done). */
static int serve_fast(lua_State *L, void *sock, const seer_net_key_t *key, ch_ud *c, seer_rpc_str_t id) {
    seer_rpc_msg_t *m = &c->msg;
    int base = m->delim + 2;
    if (m->n != base + SEER_NET_NPARTS || !id_ok(id)) return 0; /* binary frames: Lua */
    seer_net_frame_t content = seer_rpc_frame(m, base + SEER_NET_CONTENT);
    /* only {fn, args?, nargs?, timeout_ms?}, each once */
    seer_rpc_obj_iter_t it;
    seer_rpc_str_t k, v, fn = {0}, args = {0}, nargs = {0}, tmo = {0};
    if (seer_rpc_obj_begin(&it, content.data, content.len) < 0) return 0;
    int r;
    while ((r = seer_rpc_obj_next(&it, &k, &v)) == 1) {
        seer_rpc_str_t *slot = seer_rpc_str_eq(k, "fn")           ? &fn
                               : seer_rpc_str_eq(k, "args")       ? &args
                               : seer_rpc_str_eq(k, "nargs")      ? &nargs
                               : seer_rpc_str_eq(k, "timeout_ms") ? &tmo
                                                                  : NULL;
        if (!slot || slot->p) return 0;
        *slot = v;
    }
    if (r < 0) return 0;
    const char *rest = it.p, *end = content.data + content.len;
    while (rest < end && (*rest == ' ' || *rest == '\t' || *rest == '\n' || *rest == '\r')) rest++;
    if (rest != end) return 0;
    scalar_t name, a[FAST_MAX_ARGS], sn, st;
    if (!fn.p || !read_scalar(fn, &name) || name.kind != SC_STRING) return 0;
    int na = 0;
    if (args.p && (na = read_scalar_array(args, a)) < 0) return 0;
    int n = na;
    if (nargs.p) {
        if (!read_scalar(nargs, &sn) || sn.kind != SC_NUMBER || sn.num != floor(sn.num) || sn.num < 0 ||
            sn.num > FAST_MAX_ARGS)
            return 0;
        if (args.p) n = (int)sn.num; /* nargs counts only with args, as in arg_list */
    }
    double timeout = c->default_timeout_ms;
    if (tmo.p) {
        /* out of range: the Lua path answers bad_request (a cast of 1e300 is undefined) */
        if (!read_scalar(tmo, &st) || st.kind != SC_NUMBER || !(st.num >= 0 && st.num <= 1e15)) return 0;
        timeout = st.num;
    }
    /* the function: an exposed one, else Lua answers not_found */
    int top = lua_gettop(L);
    lua_getfenv(L, 1);
    int env = lua_gettop(L);
    lua_rawgeti(L, env, ENV_FUNCTIONS);
    lua_pushlstring(L, name.s, name.n);
    lua_rawget(L, -2);
    if (lua_type(L, -1) != LUA_TFUNCTION) {
        lua_settop(L, top);
        return 0;
    }
    int fnidx = lua_gettop(L);
    lua_rawgeti(L, env, ENV_WATCHDOG);
    seer_rpc_watchdog_t *wd = NULL;
    if (lua_type(L, -1) == LUA_TUSERDATA) wd = *(seer_rpc_watchdog_t **)lua_touserdata(L, -1);
    char idz[ID_CAP];
    memcpy(idz, id.p, id.n);
    idz[id.n] = 0;
    char fname[128];
    snprintf(fname, sizeof fname, "%.*s", (int)(name.n < 127 ? name.n : 127), name.s);
    int with_bufs = 0; /* whether the Lua callback below returned buffers after the text */
    /* a cancel that came before the call starts it not at all */
    if (wd && seer_rpc_watchdog_begin(wd, idz, (long long)timeout) == SEER_RPC_CANCELLED) {
        lua_rawgeti(L, env, ENV_ON_ERROR);
        lua_pushstring(L, idz);
        lua_pushstring(L, fname);
        lua_pushnil(L);
        lua_pushliteral(L, "cancelled_before_start");
        lua_call(L, 4, 1);
    } else {
        /* invoke(fn, ...) is xpcall under the server's traceback handler: ok, results... */
        lua_rawgeti(L, env, ENV_INVOKE);
        int rb = lua_gettop(L);
        lua_pushvalue(L, fnidx);
        for (int i = 0; i < n; i++) {
            if (i < na) push_scalar(L, &a[i]);
            else lua_pushnil(L);
        }
        double t0 = now_s();
        lua_call(L, n + 1, LUA_MULTRET);
        int reason = wd ? seer_rpc_watchdog_end(wd) : SEER_RPC_RUNNING;
        static const char *const reasons[] = {NULL, "cancelled", "timeout"};
        if (!lua_toboolean(L, rb)) {
            /* the error reply (interrupted by the watchdog, or raised): Lua writes it */
            lua_rawgeti(L, env, ENV_ON_ERROR);
            lua_pushstring(L, idz);
            lua_pushstring(L, fname);
            lua_pushvalue(L, rb + 1); /* the error, with its traceback */
            if (reasons[reason]) lua_pushstring(L, reasons[reason]);
            else lua_pushnil(L);
            lua_pushnumber(L, timeout);
            lua_pushnumber(L, (now_s() - t0) * 1000);
            lua_call(L, 6, 1);
        } else {
            if (reason != SEER_RPC_RUNNING && wd) seer_rpc_watchdog_ack(wd);
            int nres = lua_gettop(L) - rb;
            c->buf.len = 0;
            int simple = nres <= 1 && seer_net_buf_add(&c->buf, "{\"id\":\"", 7) == 0 &&
                         seer_net_buf_add(&c->buf, idz, id.n) == 0 &&
                         seer_net_buf_add(&c->buf, "\",\"ok\":true,\"result\":", 21) == 0 &&
                         (nres == 0 ? seer_net_buf_add(&c->buf, "null", 4) == 0 : add_scalar(L, rb + 1, &c->buf)) &&
                         seer_net_buf_add(&c->buf, "}", 1) == 0;
            if (simple) {
                lua_settop(L, top);
                reply_msg(L, sock, key, c, "rpc_call_reply", (seer_net_frame_t){c->buf.data, c->buf.len}, NULL, 0);
                return 1;
            }
            /* tables, tensors, big or binary strings, several results: seer.rpc.wire */
            lua_rawgeti(L, env, ENV_ENCODE);
            lua_replace(L, rb); /* over the ok flag */
            lua_pushstring(L, idz);
            lua_insert(L, rb + 1);
            lua_pushstring(L, fname);
            lua_insert(L, rb + 2);
            lua_call(L, nres + 2, 2);
            with_bufs = 1;
        }
    }
    /* a reply text (and buffers) from Lua on top */
    int ti = lua_gettop(L) - (with_bufs ? 1 : 0);
    seer_net_frame_t text;
    text.data = luaL_checklstring(L, ti, &text.len);
    int nb = 0;
    seer_net_frame_t *bufs = with_bufs ? buffers_at(L, ti + 1, &nb) : NULL;
    reply_msg(L, sock, key, c, "rpc_call_reply", text, bufs, nb);
    lua_settop(L, top);
    return 1;
}

/* ch:recv(timeout_ms) (-1: forever)
 *   server: msg_type, msg_id, content, buffers|nil (reply answers it); with ch:fast set, plain
 *           calls are served in here and only the other requests come back
 *   client: parent msg_id (false when it has none), content, buffers|nil
 *   nothing in time: nil, "timeout". Ctrl-C raises "interrupted". */
static int l_ch_recv(lua_State *L) {
    ch_ud *c = check_ch(L);
    const seer_net_key_t *key;
    void *sock = ch_sock(L, &key);
    int timeout = (int)seer_lua_opttimeout(L, 2, -1, "channel: timeout");
    long long deadline = now_ms() + (timeout > 0 ? timeout : 0);
    c->has_req = 0;
    seer_rpc_msg_t *m = &c->msg;
    for (;;) {
        if (!next_msg(L, sock, key, c, timeout, deadline, 0)) {
            lua_pushnil(L);
            lua_pushliteral(L, "timeout");
            return 2;
        }
        int base = m->delim + 2;
        seer_net_frame_t h = seer_rpc_frame(m, base + SEER_NET_HEADER);
        seer_net_frame_t content = seer_rpc_frame(m, base + SEER_NET_CONTENT);
        if (c->role == ROLE_CLIENT) {
            seer_net_frame_t p = seer_rpc_frame(m, base + SEER_NET_PARENT);
            static const char *const keys[] = {"msg_id"};
            seer_rpc_str_t id;
            seer_rpc_json_fields(p.data, p.len, keys, &id, 1);
            if (id.p) lua_pushlstring(L, id.p, id.n);
            else lua_pushboolean(L, 0); /* a message that answers nothing we sent */
            lua_pushlstring(L, content.data, content.len);
            push_buffers(L, m, base + SEER_NET_NPARTS);
            seer_rpc_msg_clear(m);
            return 3;
        }
        static const char *const keys[] = {"msg_type", "msg_id", "date"};
        seer_rpc_str_t v[3];
        const char *why = NULL;
        if (seer_rpc_json_fields(h.data, h.len, keys, v, 3) < 0 || !v[0].p) why = "an unreadable header";
        else if (c->guard) why = seer_rpc_guard_check(c->guard, v[1], v[2]);
        else if (!v[1].p) why = "a bad msg_id";
        if (why) {
            seer_rpc_log(c->name, "dropped a signed message with %s", why);
            continue;
        }
        c->has_req = 1;
        if (c->fast && seer_rpc_str_eq(v[0], "rpc_call_request") && serve_fast(L, sock, key, c, v[1])) continue;
        lua_pushlstring(L, v[0].p, v[0].n);
        lua_pushlstring(L, v[1].p, v[1].n);
        lua_pushlstring(L, content.data, content.len);
        push_buffers(L, m, base + SEER_NET_NPARTS);
        seer_rpc_msg_truncate(m, base + SEER_NET_PARENT); /* keep the routing ids and the header */
        return 4;
    }
}

/* ch:fast{functions, invoke, watchdog?, timeout_ms?, on_error, encode} (servers): serve plain
 * calls from recv.
 *   functions  name -> function (the exposed ones)
 *   invoke(fn, ...) -> ok, results... | false, error  (xpcall under the traceback handler)
 *   on_error(id, name, err, reason, timeout_ms, ms) -> reply text, for a call that raised
 *              (reason "timeout" / "cancelled" when the watchdog interrupted it) or, with err nil
 *              and reason "cancelled_before_start", one cancelled before it started
 *   encode(id, name, ...) -> reply text, buffers, for results that are not plain scalars */
static int l_ch_fast(lua_State *L) {
    ch_ud *c = check_ch(L);
    if (c->role != ROLE_SERVER) return luaL_error(L, "rpc: fast is for server channels");
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfenv(L, 1);
    static const struct {
        const char *name;
        int slot, type;
    } fields[] = {{"functions", ENV_FUNCTIONS, LUA_TTABLE},
                  {"invoke", ENV_INVOKE, LUA_TFUNCTION},
                  {"on_error", ENV_ON_ERROR, LUA_TFUNCTION},
                  {"encode", ENV_ENCODE, LUA_TFUNCTION},
                  {"watchdog", ENV_WATCHDOG, LUA_TNIL}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        lua_getfield(L, 2, fields[i].name);
        if (fields[i].type != LUA_TNIL && lua_type(L, -1) != fields[i].type)
            return luaL_error(L, "rpc: fast: %s must be a %s", fields[i].name, lua_typename(L, fields[i].type));
        if (fields[i].slot == ENV_WATCHDOG && !lua_isnil(L, -1) && !luaL_testudata(L, -1, SEER_RPC_WATCHDOG_MT))
            return luaL_error(L, "rpc: fast: watchdog must be a seer.core.rpc watchdog");
        lua_rawseti(L, -2, fields[i].slot);
    }
    lua_getfield(L, 2, "timeout_ms");
    c->default_timeout_ms = lua_isnil(L, -1) ? 0 : luaL_checknumber(L, -1);
    c->fast = 1;
    return 0;
}

/* ---- the client's fast call ----------------------------------------------------------------------- */

/* ch:call(name, slice_ms, nargs, ...): a call whose arguments are scalars, encoded and sent here.
 *   true, result              the reply was {id, ok: true, result: scalar}
 *   false, id, content, bufs  the reply to it needs seer.rpc (an error, tables, several results)
 *   nil, id[, parent, content, bufs]  sent; no reply within slice_ms (then the reply to another
 *                             request that came meanwhile, which the caller keeps)
 *   nil                       not sent: an argument needs seer.rpc.wire */
static int l_ch_call(lua_State *L) {
    ch_ud *c = check_ch(L);
    const seer_net_key_t *key;
    void *sock = ch_sock(L, &key);
    size_t nl;
    const char *name = luaL_checklstring(L, 2, &nl);
    int slice = (int)seer_lua_int(L, 3, INT32_MIN, INT32_MAX, "channel: slice");
    int n = (int)seer_lua_int(L, 4, INT32_MIN, INT32_MAX, "channel: count");
    seer_net_buf_t *b = &c->buf;
    b->len = 0;
    int ok = seer_net_buf_add(b, "{\"fn\":", 6) == 0 && seer_net_buf_add_json_string(b, name, nl) == 0 &&
             (nl == 0 || !memchr(name, 0, nl));
    if (ok && n > 0) {
        ok = seer_net_buf_add(b, ",\"args\":[", 9) == 0;
        for (int i = 0; i < n && ok; i++) ok = (i == 0 || seer_net_buf_add(b, ",", 1) == 0) && add_scalar(L, 5 + i, b);
        ok = ok && seer_net_buf_add(b, "],\"nargs\":", 10) == 0 && add_int(b, n) && seer_net_buf_add(b, "}", 1) == 0;
    } else if (ok) {
        ok = seer_net_buf_add(b, "}", 1) == 0;
    }
    size_t bad;
    if (!ok || !seer_utf8_validate(name, nl, &bad)) {
        lua_pushnil(L);
        return 1;
    }
    char id[ID_CAP];
    send_msg(L, sock, key, c, NULL, "rpc_call_request", (seer_net_frame_t){"{}", 2},
             (seer_net_frame_t){b->data, b->len}, NULL, 0, id);
    size_t idn = strlen(id);
    /* Ctrl-C while waiting: "no reply yet", so that seer.rpc's wait sees it and cancels the call */
    if (!next_msg(L, sock, key, c, slice, now_ms() + slice, 1)) {
        lua_pushnil(L);
        lua_pushstring(L, id);
        return 2;
    }
    seer_rpc_msg_t *m = &c->msg;
    int base = m->delim + 2;
    seer_net_frame_t p = seer_rpc_frame(m, base + SEER_NET_PARENT), content = seer_rpc_frame(m, base + SEER_NET_CONTENT);
    static const char *const keys[] = {"msg_id"};
    seer_rpc_str_t pid;
    seer_rpc_json_fields(p.data, p.len, keys, &pid, 1);
    if (!pid.p || pid.n != idn || memcmp(pid.p, id, idn) != 0) {
        lua_pushnil(L);
        lua_pushstring(L, id);
        if (pid.p) lua_pushlstring(L, pid.p, pid.n);
        else lua_pushboolean(L, 0);
        lua_pushlstring(L, content.data, content.len);
        push_buffers(L, m, base + SEER_NET_NPARTS);
        seer_rpc_msg_clear(m);
        return 5;
    }
    /* {"id": id, "ok": true, "result": scalar} and nothing else is ours to decode */
    int simple = m->n == base + SEER_NET_NPARTS;
    seer_rpc_obj_iter_t it;
    seer_rpc_str_t k, v, rid = {0}, rok = {0}, res = {0};
    if (simple && seer_rpc_obj_begin(&it, content.data, content.len) == 0) {
        int r;
        while (simple && (r = seer_rpc_obj_next(&it, &k, &v)) == 1) {
            seer_rpc_str_t *slot = seer_rpc_str_eq(k, "id") ? &rid : seer_rpc_str_eq(k, "ok") ? &rok
                                   : seer_rpc_str_eq(k, "result") ? &res : NULL;
            if (!slot || slot->p) simple = 0;
            else *slot = v;
        }
        const char *rest = it.p, *end = content.data + content.len;
        while (rest < end && (*rest == ' ' || *rest == '\t' || *rest == '\n' || *rest == '\r')) rest++;
        simple = simple && r == 0 && rest == end;
    } else {
        simple = 0;
    }
    scalar_t result;
    simple = simple && rok.p && rok.n == 4 && memcmp(rok.p, "true", 4) == 0 && res.p && read_scalar(res, &result);
    if (simple) {
        lua_pushboolean(L, 1);
        push_scalar(L, &result);
        seer_rpc_msg_clear(m);
        return 2;
    }
    lua_pushboolean(L, 0);
    lua_pushstring(L, id);
    lua_pushlstring(L, content.data, content.len);
    push_buffers(L, m, base + SEER_NET_NPARTS);
    seer_rpc_msg_clear(m);
    return 4;
}

/* ---- registration -------------------------------------------------------------------------------- */

void seer_rpc_channel_open(lua_State *L) {
    if (luaL_newmetatable(L, CH_MT)) {
        static const luaL_Reg methods[] = {{"send", l_ch_send}, {"recv", l_ch_recv}, {"reply", l_ch_reply},
                                           {"fast", l_ch_fast}, {"call", l_ch_call}, {NULL, NULL}};
        lua_newtable(L);
        luaL_register(L, NULL, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_ch_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    lua_pushcfunction(L, l_channel);
    lua_setfield(L, -2, "channel");
}
