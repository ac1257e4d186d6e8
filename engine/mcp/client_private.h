/* Shared by the MCP client's files (client.c: JSON-RPC, the lifecycle and the tool table;
 * client_stdio.c and client_http.c: the two transports). Not part of the public API.
 *
 * The client is single-threaded and synchronous: a request is written, then the transport
 * reads (and dispatches) whatever the server sends until the response with the request's id
 * arrives, the deadline passes or Ctrl-C is noticed. Notifications and server requests that
 * arrive meanwhile are handled on the way, so no reader thread is needed. */
#ifndef SEER_MCP_CLIENT_PRIVATE_H
#define SEER_MCP_CLIENT_PRIVATE_H

#include <stdint.h>
#include <sys/types.h>

#include "mcp.h"

#define MCP_STDERR_TAIL 4096

typedef enum { MCP_STDIO, MCP_HTTP } mcp_kind_t;

typedef struct mcp_buf {
    char *data;
    size_t len, cap;
} mcp_buf_t;

typedef struct mcp_http mcp_http_t;

typedef struct mcp_server {
    char *name;
    mcp_kind_t kind;
    const seer_mcp_opts_t *opts; /* the client's */

    /* protocol state */
    int64_t next_id;
    char version[32]; /* negotiated; empty until initialize answered */
    cJSON *init_result;
    int tools_stale; /* notifications/tools/list_changed seen since the last tools/list */
    cJSON *tools;    /* array of the server's tool objects */

    /* The request being waited for: dispatch stores its response in wait_msg. */
    int64_t wait_id;
    cJSON *wait_msg;
    const seer_mcp_call_opts_t *wait_call; /* for progress; NULL outside tools/call */

    /* Once the server is gone or broke the framing, every later request fails with this. */
    char *dead_msg;

    int nonjson_lines; /* only the first few are shown */
    /* Set while telling the server about a cancellation or a shutdown: the Ctrl-C that caused
     * it is still pending and must not cut that message short. */
    int uninterruptible;

    /* stdio */
    pid_t pid; /* 0 once reaped (or never started) */
    int exited, exit_status; /* waitpid status once exited */
    int in_fd, out_fd, err_fd;
    mcp_buf_t line;  /* stdout bytes not yet split into lines */
    size_t line_scan; /* how far line has been searched for '\n' */
    char tail[MCP_STDERR_TAIL]; /* ring of the last stderr bytes */
    size_t tail_len, tail_pos;
    mcp_buf_t tee_line; /* a partial stderr line waiting for its end (tee) */

    /* http */
    mcp_http_t *http;
} mcp_server_t;

int64_t mcp_now_ms(void);
int mcp_buf_add(mcp_buf_t *b, const void *p, size_t n);
void mcp_buf_free(mcp_buf_t *b);

/* client.c */
void mcp_warn(mcp_server_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Handles one complete message from the server (not NUL-terminated): answers its requests
 * through mcp_reply, delivers notifications, keeps the awaited response. */
void mcp_dispatch_text(mcp_server_t *s, const char *text, size_t n);
/* Marks the server dead with a reason (the first one wins); returns SEER_MCP_EDEAD. */
int mcp_set_dead(mcp_server_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int mcp_interrupted(mcp_server_t *s);

/* The transports. send/pump return 0, SEER_MCP_ETIMEOUT, SEER_EINTR, SEER_MCP_EDEAD (reason in
 * s->dead_msg) or another negative code with the reason (no server name) in err. */
int mcp_stdio_start(mcp_server_t *s, const cJSON *spec, seer_err_t *err);
int mcp_stdio_send(mcp_server_t *s, const char *text, size_t n, int64_t deadline, seer_err_t *err);
/* Reads and dispatches until s->wait_msg is set. */
int mcp_stdio_pump(mcp_server_t *s, int64_t deadline, seer_err_t *err);
/* Closing is split so that many servers can be told at once and then waited for together. */
void mcp_stdio_close_begin(mcp_server_t *s);
void mcp_stdio_close_end(mcp_server_t *s, int64_t deadline);

int mcp_http_start(mcp_server_t *s, const cJSON *spec, seer_err_t *err);
/* POSTs one message; for a request the reply (JSON or an SSE stream) is read and dispatched
 * until s->wait_msg is set. */
int mcp_http_send(mcp_server_t *s, const char *text, size_t n, int is_request, int64_t deadline, seer_err_t *err);
/* Server requests are answered from inside dispatch, which for HTTP runs inside a transfer:
 * the answer is queued and POSTed alongside. */
void mcp_http_queue(mcp_server_t *s, char *text /* taken */);
void mcp_http_close(mcp_server_t *s);

#endif
