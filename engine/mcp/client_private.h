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
#define MCP_MAX_ANSWERS 1024

typedef enum { MCP_STDIO, MCP_HTTP } mcp_kind_t;

typedef struct mcp_buf {
    char *data;
    size_t len, cap;
} mcp_buf_t;

typedef struct mcp_http mcp_http_t;

/* One message from a server as it streams in (a stdio line, the data of an SSE event, an HTTP
 * body), read by client_reader.c: its bytes are kept only up to a bound, and a JSON scanner runs
 * over every byte, so that a message past the bound is known (its id, method, and what it says
 * about a tool result) without being held. Against max_result_bytes each JSON value costs
 * MCP_READER_VALUE_COST bytes more, so that the bound on bytes is also one on the decoded tree
 * (a cJSON node is about 80 bytes; "0," is 2); any other message past MCP_READER_MAX_VALUES
 * values is not read at all (the Lua decoder's limit: such a message never got through anyway). A message that is not JSON keeps its first 256 bytes (for the warning); what follows
 * a complete value is not kept (cJSON ignores it). */
#define MCP_READER_VALUE_COST 16
#define MCP_READER_MAX_VALUES 4000000
#define MCP_READER_KEYS 5 /* keys remembered at depths 1..4 */
#define MCP_READER_KEY_MAX 24
#define MCP_READER_NEST_MAX 1000 /* cJSON's nesting limit */

typedef struct mcp_reader {
    mcp_buf_t buf;  /* the bytes kept: the message, or after a cut its repaired prefix */
    size_t total;   /* bytes fed */
    size_t charge;  /* bytes kept + MCP_READER_VALUE_COST per value begun */
    size_t values;  /* JSON values begun */
    int started;    /* a byte has been fed */
    int over;       /* the bound was passed: the prefix was cut and the rest is only scanned */
    int refused;    /* over, and nothing kept: past MCP_READER_MAX_VALUES */
    size_t read_bytes; /* after a cut: the bytes of the message that were read (kept) */
    /* the scanner */
    int st, depth, str_key, esc, u_left;
    unsigned uhex;
    size_t esc_at, u_at, hi_end, str_start, safe;
    unsigned char nest[MCP_READER_NEST_MAX / 8 + 2]; /* bit d: the container at depth d is an object */
    char key[MCP_READER_KEYS][MCP_READER_KEY_MAX + 2];
    size_t key_len;
    /* what the whole message says, read past a cut too */
    char id[72];
    size_t id_len;
    int id_state; /* 0 none; 1 capturing; 2 complete; -1 too long */
    int has_method, has_result, has_error, is_error; /* is_error: -1 unknown, 0, 1 */
    int is_error_capture;
    char scal[8];
    size_t scal_len;
    size_t content_bytes; /* bytes of the strings result.content[*].text and .data */
    int structured_done;  /* result.structuredContent was complete before the cut */
    int cut_in_block;     /* the cut fell inside a block of result.content */
    int top_object;       /* the message is a JSON object (not a batch) */
    unsigned char top;    /* the first byte of its value */
} mcp_reader_t;

/* What the client knows about a tools/call response that was cut (client.c adds it to the
 * result as seer_cut and fixes the blocks the cut touched). */
typedef struct mcp_cut {
    int active;
    size_t message_bytes, read_bytes, content_bytes, limit;
    int structured_done, cut_in_block, is_error;
} mcp_cut_t;

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
    /* The most a message may keep while this request is awaited: max_result_bytes for
     * tools/call (a response past it is cut: s->cut says how), max_message_bytes otherwise (a
     * message past it is an error). */
    size_t keep;
    int cut_ok;
    mcp_cut_t cut;
    int refused; /* the awaited response had too many values and was not read (r->refused) */

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
    mcp_reader_t rd; /* the stdout line being read */
    /* Answers to the server's requests wait here while a message is being written or read
     * (dispatch runs inside both); at most MCP_MAX_ANSWERS, later ones are dropped. */
    char **answers;
    size_t nanswers, answers_dropped;
    int sending, reading, flushing;
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
/* A message that was cut (r->over): its repaired prefix, with the id the scanner read past the
 * cut; kept as the awaited response (with s->cut) or dropped with a warning. Taken. */
void mcp_dispatch_cut(mcp_server_t *s, cJSON *m, const mcp_reader_t *r);
/* A message that was not read at all (r->refused): the awaited request fails, anything else is
 * dropped with a warning. */
void mcp_dispatch_refused(mcp_server_t *s, const mcp_reader_t *r);
/* Marks the server dead with a reason (the first one wins); returns SEER_MCP_EDEAD. */
int mcp_set_dead(mcp_server_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int mcp_interrupted(mcp_server_t *s);

/* client_reader.c. feed returns 0, or SEER_EPARSE once the message is past max_message_bytes:
 * the caller breaks the connection. end dispatches
 * the message (whole, cut or not JSON) and readies the reader for the next. */
int mcp_rd_feed(mcp_server_t *s, mcp_reader_t *r, const char *p, size_t n);
void mcp_rd_end(mcp_server_t *s, mcp_reader_t *r);
void mcp_rd_reset(mcp_reader_t *r);
void mcp_rd_free(mcp_reader_t *r);
/* The error for a message past the limit (with max_message_bytes). */
#define MCP_TOO_LONG_FMT "the server sent a message longer than %zu bytes (the limit)"

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
/* Stdio: the same; the answers are written once the message being read or written is done. */
void mcp_stdio_queue(mcp_server_t *s, char *text /* taken */);
void mcp_http_close(mcp_server_t *s);

#endif
