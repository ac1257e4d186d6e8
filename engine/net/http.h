/* The notebook live view's HTTP server (seer.core.http): holds the latest JSON snapshot of each
 * published notebook and pushes every new one to the browsers watching it over server-sent
 * events. It runs in libmicrohttpd's threads and never calls back into Lua. */
#ifndef SEER_NET_HTTP_H
#define SEER_NET_HTTP_H

#include <stddef.h>

#include "../seer.h"

typedef struct lua_State lua_State;
typedef struct seer_http_server seer_http_server_t;

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

/* 1 if name is a valid channel name. */
int seer_http_channel_valid(const char *name, size_t n);

/* lua_CFunction: the seer.core.http module table {serve}. */
int seer_http_luaopen(lua_State *L);

#endif
