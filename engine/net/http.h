/* The notebook live view's HTTP server (seer.core.http): holds the latest JSON snapshot of each
 * published notebook and pushes every new one to the browsers watching it over server-sent
 * events. It runs in libmicrohttpd's threads and never calls back into Lua. */
#ifndef SEER_NET_HTTP_H
#define SEER_NET_HTTP_H

#include <stddef.h>

#include "../seer.h"

typedef struct lua_State lua_State;
typedef struct seer_http_server seer_http_server_t;
struct MHD_Daemon;

/* Longest channel name; channels are session ids, so [A-Za-z0-9._-] only. */
#define SEER_HTTP_CHANNEL_MAX 128
/* Seconds between ": keepalive" comments on an idle event stream, so proxies and browsers do
 * not drop it. */
#define SEER_HTTP_KEEPALIVE_S 15

typedef struct seer_http_opts {
    const char *host;      /* NULL: "127.0.0.1"; a numeric address or a name that resolves */
    int port;              /* 0: a free port, see seer_http_port */
    const char *token;     /* required, non-empty: every route checks it */
    const char *info_json; /* served at /api/info; NULL: "{}"; must be valid JSON */
} seer_http_opts_t;

/* Binds host:port and starts serving. Errors (bad options, a port in use, a host that does
 * not resolve) come back in err with the reason. */
int seer_http_serve(seer_http_server_t **out, const seer_http_opts_t *opts, seer_err_t *err);

/* The port actually bound. */
int seer_http_port(const seer_http_server_t *s);

/* Replaces the channel's snapshot (json: a JSON object, normally an nbformat notebook) and
 * wakes its event streams. Never waits for a browser: a stream that is still sending an old
 * version skips straight to the newest one. SEER_EINVAL for a bad channel name or bad JSON. */
int seer_http_publish(seer_http_server_t *s, const char *channel, const char *json, size_t n,
                      seer_err_t *err);

/* Drops the channel's snapshot; its streams get a "removed" event and wait for the next
 * publish. Removing an unknown channel is not an error. */
int seer_http_remove(seer_http_server_t *s, const char *channel, seer_err_t *err);

/* Ends every event stream, stops the server and joins its threads, then frees s. NULL is a
 * no-op. */
void seer_http_close(seer_http_server_t *s);

/* A listening TCP socket (SOCK_CLOEXEC, SO_REUSEADDR, backlog 64) on host:port for a
 * libmicrohttpd daemon to take over (MHD_OPTION_LISTEN_SOCKET); port 0 picks a free one and
 * *out_port reports it. Shared by the live view and the MCP server's HTTP transport. */
int seer_http_listen(const char *host, int port, int *out_fd, int *out_port, seer_err_t *err);

/* ---- the gate in front of both HTTP servers (live view, MCP streamable HTTP) ---------------
 * Owns the listening socket; reads each request head (MSG_PEEK) within a deadline and hands
 * only connections that carry the token to the MHD daemon (started with
 * MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC); answers everything else itself. See http.c. */
typedef struct seer_http_gate seer_http_gate_t;

/* Pending (not yet authorized) connections at most, in total and per client address; past
 * either cap the oldest pending one is closed. The total is lowered to a quarter of
 * RLIMIT_NOFILE when that is smaller. */
#define SEER_HTTP_GATE_MAX_PENDING 1024
#define SEER_HTTP_GATE_MAX_PER_ADDR 256
/* The request line and headers: at most this many bytes, all within this many ms of the
 * connection's accept. */
#define SEER_HTTP_GATE_HEAD_MAX 16384
#define SEER_HTTP_GATE_HEAD_MS 5000
/* Token guessing: an address with more than BURST failed attempts in WINDOW_MS gets each
 * further refusal only after TARPIT_MS (a right token still goes through at once). */
#define SEER_HTTP_GATE_FAIL_BURST 100
#define SEER_HTTP_GATE_FAIL_WINDOW_MS 10000
#define SEER_HTTP_GATE_TARPIT_MS 1000
/* Connections MHD serves at once (all of them authorized). */
#define SEER_HTTP_AUTHORIZED_MAX 128

enum {
    SEER_HTTP_GATE_ACCEPTED,     /* connections accepted */
    SEER_HTTP_GATE_AUTHORIZED,   /* handed to MHD */
    SEER_HTTP_GATE_UNAUTHORIZED, /* answered 401 (no or a wrong token) */
    SEER_HTTP_GATE_TIMED_OUT,    /* head not complete in time: 408 */
    SEER_HTTP_GATE_EVICTED,      /* closed to make room under a cap: 503 */
    SEER_HTTP_GATE_TOO_LARGE,    /* head too long: 431 */
    SEER_HTTP_GATE_MHD_FULL,     /* authorized, but MHD was at its limit */
    SEER_HTTP_GATE_TARPITTED,    /* wrong token past the address's budget: answered late */
    SEER_HTTP_GATE_NSTATS
};

typedef struct seer_http_gate_opts {
    int listen_fd;              /* from seer_http_listen; the gate closes it when stopped */
    struct MHD_Daemon *daemon;  /* receives the authorized connections */
    const char *token;          /* non-empty */
    int query_token;            /* also accept ?token=<token> in the request target */
    unsigned reject_status;     /* 401 (0) or 403 */
    const char *reject_type;    /* the refusal's Content-Type; NULL: text/plain */
    const char *reject_body;    /* the 401's body; NULL: a line of text */
    const char *reject_headers; /* extra header lines for the 401, each ending in \r\n; or NULL */
} seer_http_gate_opts_t;

int seer_http_gate_start(seer_http_gate_t **out, const seer_http_gate_opts_t *opts, seer_err_t *err);
/* Stops accepting, closes pending connections and the listening socket, frees g. Call before
 * MHD_stop_daemon. NULL is a no-op. */
void seer_http_gate_stop(seer_http_gate_t *g);
/* Counters since start, indexed by SEER_HTTP_GATE_*. */
void seer_http_gate_stats(seer_http_gate_t *g, unsigned long long out[SEER_HTTP_GATE_NSTATS]);
/* Names of the counters, for the Lua bindings' stats() tables. */
extern const char *const seer_http_gate_stat_names[SEER_HTTP_GATE_NSTATS];
/* Pushes g's counters as a Lua table {accepted = n, ...}. */
void seer_http_lua_gate_stats(lua_State *L, seer_http_gate_t *g);

/* 1 if name is a valid channel name. */
int seer_http_channel_valid(const char *name, size_t n);

/* lua_CFunction: the seer.core.http module table {serve}. */
int seer_http_luaopen(lua_State *L);

#endif
