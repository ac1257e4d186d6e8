/* seer.core.net: ZMQ sockets carrying signed Jupyter-format messages, for Lua. The JSON side
 * (tables to text and back) is in lua/seer/net.lua; this file moves frames, signs and verifies.
 * Sockets are userdata closed by __gc with linger 0, so a dropped socket never holds the
 * process open at exit. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <zmq.h>

#include "host/host.h"
#include "net.h"

#define SOCK_MT "seer.net.socket"

typedef struct {
    void *sock; /* NULL once closed */
    int type;
    const char *kind;
    seer_net_key_t *key;
    seer_net_rx_t rx; /* this socket's limits and drop count */
    int zap_slot;     /* CURVE servers: their ZAP entry; -1 otherwise */
    int guarded;      /* connects go through the connection guard (guard.c): a socket with limits */
    int curve;        /* a CURVE client: its stream is encrypted, the guard cannot read it */
    int nguards;
    void *guards[16];
    unsigned long guard_seen; /* guard disconnects already counted in rx.dropped */
} sock_ud;

#define MAX_GUARDED_CONNECTS 16

/* relay(listen_path, endpoint, {max_bytes?, max_frames?}) -> handle with close() (guard.c) */
#define RELAY_MT "seer.net.relay"
typedef struct {
    void *g;
} relay_ud;

static int l_relay_close(lua_State *L) {
    relay_ud *r = luaL_checkudata(L, 1, RELAY_MT);
    if (r->g) seer_net_guard_close(r->g);
    r->g = NULL;
    return 0;
}

static int l_relay_cuts(lua_State *L) {
    relay_ud *r = luaL_checkudata(L, 1, RELAY_MT);
    char why[160] = "";
    unsigned long n = r->g ? seer_net_guard_cuts(r->g, why, sizeof why) : 0;
    lua_pushnumber(L, (lua_Number)n);
    if (n) lua_pushstring(L, why);
    else lua_pushnil(L);
    return 2;
}

static int l_relay(lua_State *L) {
    const char *path = luaL_checkstring(L, 1), *ep = luaL_checkstring(L, 2);
    lua_Number mb = 0, mf = 0;
    const char *beneath = NULL, *listen_beneath = NULL;
    if (lua_istable(L, 3)) {
        lua_getfield(L, 3, "max_bytes");
        mb = lua_isnil(L, -1) ? 0 : luaL_checknumber(L, -1);
        lua_getfield(L, 3, "max_frames");
        mf = lua_isnil(L, -1) ? 0 : luaL_checknumber(L, -1);
        lua_getfield(L, 3, "beneath"); /* the strings live on in the options table at index 3 */
        beneath = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
        lua_getfield(L, 3, "listen_beneath");
        listen_beneath = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
        lua_pop(L, 4);
    }
    if (!(mb >= 0 && mb <= (lua_Number)SEER_NET_MAX_BYTES && mf >= 0 && mf <= SEER_NET_MAX_FRAMES))
        return luaL_error(L, "net.relay: max_bytes must be 0..%d and max_frames 0..%d", (int)SEER_NET_MAX_BYTES,
                          SEER_NET_MAX_FRAMES);
    relay_ud *r = lua_newuserdata(L, sizeof *r);
    r->g = NULL;
    if (luaL_newmetatable(L, RELAY_MT)) {
        lua_newtable(L);
        lua_pushcfunction(L, l_relay_close);
        lua_setfield(L, -2, "close");
        lua_pushcfunction(L, l_relay_cuts);
        lua_setfield(L, -2, "cuts");
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_relay_close);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    seer_err_t err;
    r->g = seer_net_guard_relay_beneath(path, listen_beneath, ep, beneath, (size_t)mb, (size_t)mf, &err);
    if (!r->g) return luaL_error(L, "%s", err.msg);
    return 1;
}

static const struct {
    const char *name;
    int type;
} kinds[] = {{"router", ZMQ_ROUTER}, {"dealer", ZMQ_DEALER}, {"pub", ZMQ_PUB},
             {"sub", ZMQ_SUB},       {"rep", ZMQ_REP},       {"req", ZMQ_REQ},
             {"stream", ZMQ_STREAM}};

static sock_ud *check_sock(lua_State *L, int idx) {
    sock_ud *s = luaL_checkudata(L, idx, SOCK_MT);
    if (!s->sock) luaL_error(L, "net: the socket is closed");
    return s;
}

void *seer_net_lua_socket(lua_State *L, int idx, const seer_net_key_t **key) {
    sock_ud *s = check_sock(L, idx);
    if (key) *key = s->key;
    return s->sock;
}

static int zfail(lua_State *L, const char *what) { return luaL_error(L, "net: %s: %s", what, zmq_strerror(zmq_errno())); }

/* socket(kind, key, {max_bytes?, max_frames?, rcvhwm?}) */
static int l_socket(lua_State *L) {
    const char *kind = luaL_checkstring(L, 1);
    size_t klen = 0;
    const char *key = luaL_optlstring(L, 2, "", &klen);
    lua_Number max_bytes = 0, max_frames = 0, rcvhwm = 0;
    int guard = 0;
    if (lua_istable(L, 3)) {
        /* limits mean the peer may be hostile: its connects go through the guard unless guard = false */
        lua_getfield(L, 3, "guard");
        guard = lua_isnil(L, -1) ? 1 : lua_toboolean(L, -1);
        lua_pop(L, 1);
        lua_getfield(L, 3, "rcvhwm");
        rcvhwm = lua_isnil(L, -1) ? 0 : luaL_checknumber(L, -1);
        lua_pop(L, 1);
        if (!(rcvhwm >= 0 && rcvhwm <= 1e6)) return luaL_error(L, "net.socket: rcvhwm must be 0..1000000"); /* NaN too */
        lua_getfield(L, 3, "max_bytes");
        max_bytes = lua_isnil(L, -1) ? 0 : luaL_checknumber(L, -1);
        lua_getfield(L, 3, "max_frames");
        max_frames = lua_isnil(L, -1) ? 0 : luaL_checknumber(L, -1);
        lua_pop(L, 2);
        if (!(max_bytes >= 0 && max_bytes <= (lua_Number)SEER_NET_MAX_BYTES && max_frames >= 0 &&
              max_frames <= SEER_NET_MAX_FRAMES)) /* NaN fails too: it would be cast below */
            return luaL_error(L, "net.socket: max_bytes must be 0..%d and max_frames 0..%d", (int)SEER_NET_MAX_BYTES,
                              SEER_NET_MAX_FRAMES);
    }
    int type = -1;
    const char *kname = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i].name, kind) == 0) {
            type = kinds[i].type;
            kname = kinds[i].name;
        }
    if (type < 0)
        return luaL_error(L, "net.socket: unknown kind '%s' (router, dealer, pub, sub, rep, req or stream)", kind);
    seer_err_t err;
    void *ctx = seer_net_context(&err);
    if (!ctx) return luaL_error(L, "net.socket: %s", err.msg);
    sock_ud *s = lua_newuserdata(L, sizeof *s);
    memset(s, 0, sizeof *s);
    s->zap_slot = -1;
    luaL_getmetatable(L, SOCK_MT);
    lua_setmetatable(L, -2);
    if (seer_net_key_new(&s->key, key, klen, &err) < 0) return luaL_error(L, "net.socket: %s", err.msg);
    s->sock = zmq_socket(ctx, type);
    if (!s->sock) return zfail(L, "socket");
    s->type = type;
    s->kind = kname;
    s->rx.max_bytes = (size_t)max_bytes;
    s->rx.max_frames = (size_t)max_frames;
    s->guarded = guard && type != ZMQ_STREAM && (max_bytes > 0 || max_frames > 0 || rcvhwm > 0);
    if (max_bytes > 0) {
        /* No single frame bigger than the whole message may be: ZMQ disconnects a peer that sends
         * one before it is ever buffered (the peer reconnects; the frame is gone). */
        int64_t mx = (int64_t)max_bytes;
        zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &mx, sizeof mx);
    }
    if (rcvhwm > 0) {
        /* How many messages ZMQ may hold for this socket before it stops reading from the peer
         * (which then buffers, or drops, on its own side: a sandbox pays for its own backlog). */
        int hwm = (int)rcvhwm;
        zmq_setsockopt(s->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    }
    int zero = 0, one = 1;
    zmq_setsockopt(s->sock, ZMQ_LINGER, &zero, sizeof zero);
    /* A client that reconnects under the same identity takes its route over (as ipykernel). */
    if (type == ZMQ_ROUTER) zmq_setsockopt(s->sock, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    /* seer connects to processes it has just started (kernels, the notebook server): with
     * ZMQ's default 100 ms retry, a connect that races the peer's bind costs 100 ms. Retry
     * after 5 ms, backing off to 1 s for peers that are really gone. */
    int ivl = 5, ivl_max = 1000;
    zmq_setsockopt(s->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(s->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
    return 1;
}

static int l_bind(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    const char *ep = luaL_checkstring(L, 2);
    /* s:bind(ep, beneath): an ipc path in a folder another side can write (guard.c) */
    const char *beneath = luaL_optstring(L, 3, NULL);
    char last[256];
    if (beneath && (!s->guarded || s->curve || s->zap_slot >= 0))
        return luaL_error(L, "net: bind %s beneath %s: only a socket with limits (guarded) can", ep, beneath);
    if (s->guarded && !s->curve && s->zap_slot < 0 && (strncmp(ep, "ipc://", 6) == 0 || strncmp(ep, "tcp://", 6) == 0)) {
        /* peers reach libzmq only through the guard, which bounds a message (guard.c) */
        if (s->nguards == MAX_GUARDED_CONNECTS)
            return luaL_error(L, "net: bind %s: a socket with limits binds and connects %d endpoints at most", ep,
                              MAX_GUARDED_CONNECTS);
        char local[160];
        seer_err_t err;
        void *g = seer_net_guard_bind_beneath(ep, beneath, s->rx.max_bytes, s->rx.max_frames, local, sizeof local, last,
                                              sizeof last, &err);
        if (!g) return luaL_error(L, "%s", err.msg);
        /* the guard connects each peer it carries to this bind at once: libzmq's backlog (100)
         * must hold as many as the guard carries, or a burst of peers loses some (EAGAIN) */
        int backlog = SEER_NET_GUARD_MAX_PEERS + 16;
        zmq_setsockopt(s->sock, ZMQ_BACKLOG, &backlog, sizeof backlog);
        if (zmq_bind(s->sock, local) != 0) {
            int e = zmq_errno();
            seer_net_guard_close(g);
            return luaL_error(L, "net: bind %s: %s", ep, zmq_strerror(e));
        }
        s->guards[s->nguards++] = g;
    } else {
        if (zmq_bind(s->sock, ep) != 0) return luaL_error(L, "net: bind %s: %s", ep, zmq_strerror(zmq_errno()));
        size_t n = sizeof last;
        if (zmq_getsockopt(s->sock, ZMQ_LAST_ENDPOINT, last, &n) != 0) return zfail(L, "bind");
    }
    lua_pushstring(L, last);
    const char *colon = strrchr(last, ':');
    if (strncmp(last, "tcp://", 6) == 0 && colon) {
        lua_pushinteger(L, atoi(colon + 1));
        return 2;
    }
    return 1;
}

static int l_connect(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    const char *ep = luaL_checkstring(L, 2);
    /* s:connect(ep, beneath): an ipc path under a folder the other side can write; nothing below
     * beneath (trusted itself) is followed, a link in any folder of the path refused */
    const char *beneath = luaL_optstring(L, 3, NULL);
    if (beneath && (!s->guarded || s->curve))
        return luaL_error(L, "net: connect %s beneath %s: only a socket with limits (guarded) can", ep, beneath);
    if (s->guarded && !s->curve && (strncmp(ep, "ipc://", 6) == 0 || strncmp(ep, "tcp://", 6) == 0)) {
        /* the peer's bytes reach libzmq only through the guard, which bounds a message (guard.c) */
        if (s->nguards == MAX_GUARDED_CONNECTS)
            return luaL_error(L, "net: connect %s: a socket with limits connects to at most %d endpoints", ep,
                              MAX_GUARDED_CONNECTS);
        char local[160];
        seer_err_t err;
        void *g = beneath ? seer_net_guard_open_beneath(ep, beneath, s->rx.max_bytes, s->rx.max_frames, local, sizeof local, &err)
                          : seer_net_guard_open(ep, s->rx.max_bytes, s->rx.max_frames, local, sizeof local, &err);
        if (!g) return luaL_error(L, "%s", err.msg);
        if (zmq_connect(s->sock, local) != 0) {
            int e = zmq_errno();
            seer_net_guard_close(g);
            return luaL_error(L, "net: connect %s: %s", ep, zmq_strerror(e));
        }
        s->guards[s->nguards++] = g;
        return 0;
    }
    if (zmq_connect(s->sock, ep) != 0) return luaL_error(L, "net: connect %s: %s", ep, zmq_strerror(zmq_errno()));
    return 0;
}

/* Counts the guard's disconnects of this socket's peers as dropped messages (once each). */
static void sync_guards(sock_ud *s) {
    unsigned long total = 0;
    char why[160], last[160] = "";
    for (int i = 0; i < s->nguards; i++) {
        unsigned long n = seer_net_guard_cuts(s->guards[i], why, sizeof why);
        total += n;
        if (n) snprintf(last, sizeof last, "%s", why);
    }
    if (total > s->guard_seen) {
        s->rx.dropped += total - s->guard_seen;
        snprintf(s->rx.why, sizeof s->rx.why, "%.*s", (int)sizeof s->rx.why - 1, last); /* cut to fit */
        s->guard_seen = total;
    }
}

static int l_subscribe(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    size_t n;
    const char *p = luaL_optlstring(L, 2, "", &n);
    if (s->type != ZMQ_SUB) return luaL_error(L, "net: subscribe needs a sub socket, this one is %s", s->kind);
    if (zmq_setsockopt(s->sock, ZMQ_SUBSCRIBE, p, n) != 0) return zfail(L, "subscribe");
    return 0;
}

static int l_close(lua_State *L) {
    sock_ud *s = luaL_checkudata(L, 1, SOCK_MT);
    if (s->sock) zmq_close(s->sock);
    s->sock = NULL;
    for (int i = 0; i < s->nguards; i++) seer_net_guard_close(s->guards[i]);
    s->nguards = 0;
    if (s->zap_slot >= 0) seer_net_curve_release(s->zap_slot);
    s->zap_slot = -1;
    seer_net_key_free(s->key);
    s->key = NULL;
    return 0;
}

/* Builds the frame list from a table of strings, keeping the table on the stack so the strings
 * stay alive. Returns a userdata-backed array (collected by the GC). */
static seer_net_frame_t *frames_from(lua_State *L, int idx, int *n, const char *what) {
    *n = 0;
    if (lua_isnoneornil(L, idx)) return NULL;
    if (!lua_istable(L, idx)) {
        luaL_error(L, "net: %s must be a list of strings", what);
        return NULL;
    }
    int len = (int)lua_objlen(L, idx);
    seer_net_frame_t *f = lua_newuserdata(L, sizeof *f * (size_t)(len > 0 ? len : 1));
    for (int i = 0; i < len; i++) {
        lua_rawgeti(L, idx, i + 1);
        size_t l;
        const char *s = lua_tolstring(L, -1, &l);
        if (!s || lua_type(L, -1) != LUA_TSTRING) {
            luaL_error(L, "net: %s[%d] is a %s, not a string", what, i + 1, luaL_typename(L, -1));
            return NULL;
        }
        f[i].data = s; /* the string is held by the table at idx */
        f[i].len = l;
        lua_pop(L, 1);
    }
    *n = len;
    return f;
}

/* send(idents|nil, header, parent, metadata, content, buffers|nil): JSON texts. */
static int l_send(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    seer_net_msg_t m;
    memset(&m, 0, sizeof m);
    m.idents = frames_from(L, 2, &m.nidents, "idents");
    for (int i = 0; i < SEER_NET_NPARTS; i++) m.parts[i].data = luaL_checklstring(L, 3 + i, &m.parts[i].len);
    m.buffers = frames_from(L, 7, &m.nbuffers, "buffers");
    seer_err_t err;
    if (seer_net_send(s->sock, s->key, &m, &err) < 0) return luaL_error(L, "net: %s", err.msg);
    return 0;
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A signal that is not Ctrl-C (SIGCHLD with a handler, say) must not end a wait early; Ctrl-C
 * becomes the "interrupted" error, as Lua code sees it everywhere else. */
static int remaining(lua_State *L, long long deadline, int timeout) {
    if (seer_host_interrupted()) seer_host_interrupt_raise(L);
    if (timeout < 0) return -1;
    long long left = deadline - now_ms();
    return left > 0 ? (int)left : 0;
}

static void push_frames(lua_State *L, const seer_net_frame_t *f, int n) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushlstring(L, f[i].data, f[i].len);
        lua_rawseti(L, -2, i + 1);
    }
}

/* recv(timeout_ms) -> idents, header, parent, metadata, content, buffers | nil, "timeout" */
static int l_recv(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    int timeout = (int)seer_lua_opttimeout(L, 2, -1, "timeout");
    long long deadline = now_ms() + (timeout > 0 ? timeout : 0);
    seer_net_msg_t m;
    seer_err_t err;
    int r;
    while ((r = seer_net_recv_rx(s->sock, s->key, &s->rx, &m, remaining(L, deadline, timeout), &err)) == SEER_EINTR) {
    }
    if (r < 0) return luaL_error(L, "net: %s", err.msg);
    if (r == 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "timeout");
        return 2;
    }
    push_frames(L, m.idents, m.nidents);
    for (int i = 0; i < SEER_NET_NPARTS; i++) lua_pushlstring(L, m.parts[i].data, m.parts[i].len);
    push_frames(L, m.buffers, m.nbuffers);
    seer_net_msg_free(&m);
    return 6;
}

static int l_send_frames(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    int n;
    luaL_checktype(L, 2, LUA_TTABLE);
    seer_net_frame_t *f = frames_from(L, 2, &n, "frames");
    if (n == 0) return luaL_error(L, "net: send_frames needs at least one frame");
    seer_err_t err;
    if (seer_net_send_frames(s->sock, f, n, &err) < 0) return luaL_error(L, "net: %s", err.msg);
    return 0;
}

static int l_recv_frames(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    int timeout = (int)seer_lua_opttimeout(L, 2, -1, "timeout");
    long long deadline = now_ms() + (timeout > 0 ? timeout : 0);
    seer_net_frame_t *f;
    void *block;
    seer_err_t err;
    int r;
    while ((r = seer_net_recv_frames(s->sock, &f, &block, remaining(L, deadline, timeout), &err)) == SEER_EINTR) {
    }
    if (r < 0) return luaL_error(L, "net: %s", err.msg);
    if (r == 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "timeout");
        return 2;
    }
    push_frames(L, f, r);
    free(block);
    return 1;
}

/* s:send_raw(frames, dontwait) -> true, or false when dontwait and ZMQ would block (EAGAIN:
 * the high-water mark is reached, or no peer). Unsigned frames, as send_frames. */
static int l_send_raw(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    int n;
    luaL_checktype(L, 2, LUA_TTABLE);
    seer_net_frame_t *f = frames_from(L, 2, &n, "frames");
    if (n == 0) return luaL_error(L, "net: send_raw needs at least one frame");
    int flags = lua_toboolean(L, 3) ? ZMQ_DONTWAIT : 0;
    for (int i = 0; i < n; i++) {
        int rc;
        while ((rc = zmq_send(s->sock, f[i].data, f[i].len, flags | (i + 1 < n ? ZMQ_SNDMORE : 0))) < 0 &&
               zmq_errno() == EINTR) {
        }
        if (rc < 0) {
            if (zmq_errno() == EAGAIN && i == 0) {
                lua_pushboolean(L, 0);
                return 1;
            }
            if (zmq_errno() == EHOSTUNREACH && i == 0) {
                lua_pushboolean(L, 0);
                lua_pushliteral(L, "unreachable");
                return 2;
            }
            return zfail(L, "send_raw");
        }
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* s:writable() -> true when a send would not block now (ZMQ_EVENTS has POLLOUT). */
static int l_writable(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    int ev = 0;
    size_t len = sizeof ev;
    if (zmq_getsockopt(s->sock, ZMQ_EVENTS, &ev, &len) != 0) return zfail(L, "writable");
    lua_pushboolean(L, (ev & ZMQ_POLLOUT) != 0);
    return 1;
}

/* s:setopt(name, value): the few ZMQ options the tunnel sets (before bind/connect). */
static int l_setopt(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    const char *name = luaL_checkstring(L, 2);
    static const struct {
        const char *name;
        int opt;
    } ints[] = {{"sndhwm", ZMQ_SNDHWM},
                {"rcvhwm", ZMQ_RCVHWM},
                {"heartbeat_ivl", ZMQ_HEARTBEAT_IVL},
                {"heartbeat_timeout", ZMQ_HEARTBEAT_TIMEOUT},
                {"heartbeat_ttl", ZMQ_HEARTBEAT_TTL},
                {"handshake_ivl", ZMQ_HANDSHAKE_IVL},
                {"router_mandatory", ZMQ_ROUTER_MANDATORY},
                {"immediate", ZMQ_IMMEDIATE},
                {"stream_notify", ZMQ_STREAM_NOTIFY}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (strcmp(ints[i].name, name) == 0) {
            int v = (int)seer_lua_int(L, 3, INT32_MIN, INT32_MAX, name);
            if (zmq_setsockopt(s->sock, ints[i].opt, &v, sizeof v) != 0) return zfail(L, name);
            return 0;
        }
    if (strcmp(name, "maxmsgsize") == 0) {
        int64_t v = seer_lua_int(L, 3, -1, INT64_MAX, name);
        if (zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &v, sizeof v) != 0) return zfail(L, name);
        return 0;
    }
    if (strcmp(name, "connect_routing_id") == 0 || strcmp(name, "routing_id") == 0) {
        size_t n;
        const char *v = luaL_checklstring(L, 3, &n);
        if (zmq_setsockopt(s->sock, name[0] == 'c' ? ZMQ_CONNECT_ROUTING_ID : ZMQ_ROUTING_ID, v, n) != 0)
            return zfail(L, name);
        return 0;
    }
    return luaL_error(L, "net: setopt: unknown option '%s'", name);
}

/* s:curve_server(secret, client_public): before bind. Only that client key gets through. */
static int l_curve_server(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    if (s->zap_slot >= 0) return luaL_error(L, "net: curve_server: this socket is already a CURVE server");
    seer_err_t err;
    int slot = -1;
    if (seer_net_curve_server(s->sock, luaL_checkstring(L, 2), luaL_checkstring(L, 3), &slot, &err) < 0)
        return luaL_error(L, "net.curve_server: %s", err.msg);
    s->zap_slot = slot;
    return 0;
}

/* s:curve_refused() -> handshakes with another client key this server refused */
static int l_curve_refused(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    lua_pushnumber(L, (lua_Number)seer_net_curve_refused(s->zap_slot));
    return 1;
}

/* s:curve_client(server_public, client_public, client_secret): before connect. */
static int l_curve_client(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    seer_err_t err;
    if (seer_net_curve_client(s->sock, luaL_checkstring(L, 2), luaL_checkstring(L, 3), luaL_checkstring(L, 4), &err) < 0)
        return luaL_error(L, "net.curve_client: %s", err.msg);
    s->curve = 1;
    return 0;
}

static int l_has_curve(lua_State *L) {
    lua_pushboolean(L, seer_net_has_curve());
    return 1;
}

/* curve_keypair() -> public, secret (Z85) */
static int l_curve_keypair(lua_State *L) {
    char pub[41], sec[41];
    seer_err_t err;
    if (seer_net_curve_keypair(pub, sec, &err) < 0) return luaL_error(L, "net.curve_keypair: %s", err.msg);
    lua_pushstring(L, pub);
    lua_pushstring(L, sec);
    return 2;
}

/* curve_public(secret) -> public */
static int l_curve_public(lua_State *L) {
    char pub[41];
    seer_err_t err;
    if (seer_net_curve_public(pub, luaL_checkstring(L, 1), &err) < 0) return luaL_error(L, "net.curve_public: %s", err.msg);
    lua_pushstring(L, pub);
    return 1;
}

/* s:dropped() -> how many messages this socket dropped, why the last one was (nil if none) */
static int l_sock_dropped(lua_State *L) {
    sock_ud *s = luaL_checkudata(L, 1, SOCK_MT);
    sync_guards(s);
    lua_pushnumber(L, (lua_Number)s->rx.dropped);
    if (s->rx.dropped) lua_pushstring(L, s->rx.why);
    else lua_pushnil(L);
    return 2;
}

/* s:endpoint_down_ms(): how long every endpoint this socket connects to through the guard has
 * refused connects (the shortest of them; 0 when one is up or the socket is not guarded). */
static int l_sock_down_ms(lua_State *L) {
    sock_ud *s = luaL_checkudata(L, 1, SOCK_MT);
    long long least = -1;
    for (int i = 0; i < s->nguards; i++) {
        long long d = seer_net_guard_down_ms(s->guards[i]);
        if (least < 0 || d < least) least = d;
    }
    lua_pushnumber(L, (lua_Number)(least < 0 ? 0 : least));
    return 1;
}

/* s:note_dropped(why): a message that passed the signature check but that Lua refused (JSON,
 * fields), counted and logged like the ones refused here. */
static int l_sock_note_dropped(lua_State *L) {
    sock_ud *s = luaL_checkudata(L, 1, SOCK_MT);
    const char *why = luaL_checkstring(L, 2);
    seer_net_note_dropped(why);
    s->rx.dropped++;
    snprintf(s->rx.why, sizeof s->rx.why, "%s", why);
    return 0;
}

/* s:history_bytes() -> bytes the replay history of this socket's key holds */
static int l_sock_history(lua_State *L) {
    sock_ud *s = check_sock(L, 1);
    lua_pushnumber(L, (lua_Number)seer_net_history_bytes(s->key));
    return 1;
}

static int l_kind(lua_State *L) {
    lua_pushstring(L, check_sock(L, 1)->kind);
    return 1;
}

static int l_tostring(lua_State *L) {
    sock_ud *s = luaL_checkudata(L, 1, SOCK_MT);
    if (s->sock) lua_pushfstring(L, "net.socket(%s)", s->kind);
    else lua_pushliteral(L, "net.socket(closed)");
    return 1;
}

/* poll({socket | fd, ...}, timeout_ms) -> {indices of the readable entries} */
static int l_poll(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int timeout = (int)seer_lua_opttimeout(L, 2, -1, "poll: timeout");
    int n = (int)lua_objlen(L, 1);
    zmq_pollitem_t *items = lua_newuserdata(L, sizeof *items * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        memset(&items[i], 0, sizeof items[i]);
        items[i].events = ZMQ_POLLIN;
        if (lua_type(L, -1) == LUA_TNUMBER) {
            items[i].fd = (int)seer_lua_int(L, -1, 0, INT32_MAX, "poll: file descriptor");
        } else {
            sock_ud *s = luaL_testudata(L, -1, SOCK_MT);
            if (!s) return luaL_error(L, "net.poll: entry %d is a %s, not a socket or a file descriptor", i + 1,
                                      luaL_typename(L, -1));
            if (!s->sock) return luaL_error(L, "net.poll: entry %d is a closed socket", i + 1);
            items[i].socket = s->sock;
        }
        lua_pop(L, 1);
    }
    long long deadline = now_ms() + (timeout > 0 ? timeout : 0);
    int r;
    for (;;) {
        r = zmq_poll(items, n, remaining(L, deadline, timeout));
        if (r >= 0 || zmq_errno() != EINTR) break;
    }
    if (r < 0) return zfail(L, "poll");
    lua_createtable(L, r, 0);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (items[i].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) {
            lua_pushinteger(L, i + 1);
            lua_rawseti(L, -2, ++k);
        }
    return 1;
}

static int l_new_key(lua_State *L) {
    char hex[65];
    seer_err_t err;
    if (seer_net_random_hex(hex, 32, &err) < 0) return luaL_error(L, "net.new_key: %s", err.msg);
    lua_pushstring(L, hex);
    return 1;
}

static int l_uuid(lua_State *L) {
    char id[SEER_NET_UUID_LEN + 1];
    seer_err_t err;
    if (seer_net_uuid(id, &err) < 0) return luaL_error(L, "net.uuid: %s", err.msg);
    lua_pushstring(L, id);
    return 1;
}

/* header(msg_type, session, username) -> JSON text of a fresh header */
static int l_header(lua_State *L) {
    char buf[1024];
    seer_err_t err;
    int n = seer_net_header(buf, sizeof buf, luaL_checkstring(L, 1), luaL_checkstring(L, 2),
                            luaL_optstring(L, 3, ""), &err);
    if (n < 0) return luaL_error(L, "net.header: %s", err.msg);
    lua_pushlstring(L, buf, (size_t)n);
    return 1;
}

/* sign(key, frame1, frame2, ...) -> hex: for tests and for peers that sign by hand */
static int l_sign(lua_State *L) {
    size_t klen;
    const char *key = luaL_checklstring(L, 1, &klen);
    int n = lua_gettop(L) - 1;
    seer_net_frame_t *f = lua_newuserdata(L, sizeof *f * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++) f[i].data = luaL_checklstring(L, 2 + i, &f[i].len);
    seer_net_key_t *k;
    seer_err_t err;
    if (seer_net_key_new(&k, key, klen, &err) < 0) return luaL_error(L, "net.sign: %s", err.msg);
    char hex[SEER_NET_SIG_HEX + 1];
    int rc = seer_net_sign(k, f, n, hex, &err);
    seer_net_key_free(k);
    if (rc < 0) return luaL_error(L, "net.sign: %s", err.msg);
    lua_pushstring(L, hex);
    return 1;
}

/* utf8_fix(s) -> s with every byte that does not start a well-formed UTF-8 sequence replaced by
 * U+FFFD (s itself when it is valid): text from a peer goes into notebooks and JSON, which must
 * be UTF-8, without failing on the peer's bad bytes. */
static int l_utf8_fix(lua_State *L) {
    size_t n;
    const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
    size_t i = 0;
    while (i < n && (s[i] < 0x80 || seer_net_utf8_seq(s + i, n - i))) i += s[i] < 0x80 ? 1 : seer_net_utf8_seq(s + i, n - i);
    if (i == n) {
        lua_settop(L, 1);
        return 1;
    }
    luaL_Buffer lb;
    luaL_buffinit(L, &lb);
    luaL_addlstring(&lb, (const char *)s, i);
    while (i < n) {
        size_t adv = s[i] < 0x80 ? 1 : seer_net_utf8_seq(s + i, n - i);
        if (adv) luaL_addlstring(&lb, (const char *)s + i, adv);
        else {
            luaL_addlstring(&lb, "\xEF\xBF\xBD", 3);
            adv = 1;
        }
        i += adv;
    }
    luaL_pushresult(&lb);
    return 1;
}

static int l_now_ms(lua_State *L) {
    lua_pushnumber(L, (lua_Number)now_ms());
    return 1;
}

static int l_dropped(lua_State *L) {
    lua_pushnumber(L, (lua_Number)seer_net_dropped_count());
    return 1;
}

int seer_net_luaopen(lua_State *L) {
    if (luaL_newmetatable(L, SOCK_MT)) {
        static const luaL_Reg methods[] = {
            {"bind", l_bind},           {"connect", l_connect},         {"subscribe", l_subscribe},
            {"close", l_close},         {"send", l_send},               {"recv", l_recv},
            {"send_frames", l_send_frames}, {"recv_frames", l_recv_frames}, {"kind", l_kind},
            {"dropped", l_sock_dropped}, {"note_dropped", l_sock_note_dropped}, {"endpoint_down_ms", l_sock_down_ms}, {"history_bytes", l_sock_history},
            {"send_raw", l_send_raw}, {"writable", l_writable}, {"setopt", l_setopt},
            {"curve_server", l_curve_server}, {"curve_client", l_curve_client}, {"curve_refused", l_curve_refused},
            {NULL, NULL}};
        lua_newtable(L);
        luaL_register(L, NULL, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_close);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"socket", l_socket}, {"poll", l_poll},     {"new_key", l_new_key}, {"relay", l_relay},
                                   {"uuid", l_uuid},     {"header", l_header}, {"sign", l_sign},
                                   {"dropped", l_dropped}, {"utf8_fix", l_utf8_fix}, {"now_ms", l_now_ms},
                                   {"has_curve", l_has_curve}, {"curve_keypair", l_curve_keypair},
                                   {"curve_public", l_curve_public}, {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, fns);
    lua_pushliteral(L, SEER_NET_PROTOCOL_VERSION);
    lua_setfield(L, -2, "protocol_version");
    return 1;
}
