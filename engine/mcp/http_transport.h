/* The HTTP side of seer's MCP servers' streamable HTTP transport (docs/mcp.md), on
 * libmicrohttpd. It knows HTTP and nothing of MCP: each request (method, path, headers, body)
 * is queued for the Lua event loop, which is woken through an eventfd it polls with its other
 * inputs, decides everything (token, Origin, sessions, JSON-RPC) and answers with a whole
 * response or a stream of chunks (server-sent events). One MHD thread per connection waits for
 * the answer; the Lua side never blocks on HTTP. The Lua binding is seer.core.mcphttp. */
#ifndef SEER_MCP_HTTP_TRANSPORT_H
#define SEER_MCP_HTTP_TRANSPORT_H

#include <stddef.h>

#include "../seer.h"

/* A request body larger than this is answered 413 without reaching Lua (MCP's stdio limit). */
#define SEER_MCPHTTP_MAX_BODY (16u * 1024u * 1024u)
/* An event stream with nothing to send gets a ": keepalive" comment this often. */
#define SEER_MCPHTTP_KEEPALIVE_S 15

typedef struct seer_mcphttp seer_mcphttp_t;

typedef struct seer_mcphttp_header {
    char *name; /* lower-cased */
    char *value;
} seer_mcphttp_header_t;

/* A request taken from the queue; the caller frees it with seer_mcphttp_request_free. */
typedef struct seer_mcphttp_request {
    unsigned long long id; /* what respond/stream/send/finish name it by */
    char *method, *path;
    seer_mcphttp_header_t *headers;
    size_t nheaders;
    char *body;
    size_t body_len;
} seer_mcphttp_request_t;

typedef struct seer_mcphttp_opts {
    const char *host; /* default 127.0.0.1; only this address is bound */
    int port;         /* 0 picks a free one */
    size_t max_body;  /* default SEER_MCPHTTP_MAX_BODY */
    const char *token; /* required: only requests with 'Authorization: Bearer <token>' reach the
                          queue (net/http.h's gate answers the rest with 401, times out slow
                          heads and caps pending connections) */
} seer_mcphttp_opts_t;

int seer_mcphttp_serve(seer_mcphttp_t **out, const seer_mcphttp_opts_t *opts, seer_err_t *err);
int seer_mcphttp_port(const seer_mcphttp_t *s);
/* Readable (poll) while requests wait in the queue. */
int seer_mcphttp_fd(const seer_mcphttp_t *s);
/* The next queued request, or NULL when none. */
seer_mcphttp_request_t *seer_mcphttp_next(seer_mcphttp_t *s);
void seer_mcphttp_request_free(seer_mcphttp_request_t *r);

/* headers: n name/value pairs (names[i], values[i]). Each returns 1 when the request is still
 * there to answer, 0 when its client has gone (or it was answered already). */
int seer_mcphttp_respond(seer_mcphttp_t *s, unsigned long long id, unsigned status, const char *const *names,
                         const char *const *values, size_t n, const char *body, size_t body_len);
int seer_mcphttp_stream(seer_mcphttp_t *s, unsigned long long id, unsigned status, const char *const *names,
                        const char *const *values, size_t n);
int seer_mcphttp_send(seer_mcphttp_t *s, unsigned long long id, const char *data, size_t len);
int seer_mcphttp_finish(seer_mcphttp_t *s, unsigned long long id);

/* Counters of the gate in front of the server (SEER_HTTP_GATE_*). */
void seer_mcphttp_stats(seer_mcphttp_t *s, unsigned long long *out);

/* Ends every stream and waiting request, stops the daemon (joining its threads), frees s. */
void seer_mcphttp_close(seer_mcphttp_t *s);

/* package.preload["seer.core.mcphttp"] */
struct lua_State;
int seer_mcphttp_luaopen(struct lua_State *L);

#endif
