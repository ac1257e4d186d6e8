/* Scoped-sandbox RPC (docs/rpc.md). The protocol's logic (hello, calls, values) is Lua
 * (lua/seer/rpc/); what is here is what must be fast or must not run on the main thread:
 *  - wire.c: the per-message hot path of both sides on engine/net's signed Jupyter layout
 *    (headers, header fields, frames kept as zmq messages, the replay guard);
 *  - watchdog.c: a call runs on the server's main thread, so a cancellation or a deadline has to
 *    be noticed by someone else: the watchdog, a thread with its own signed control socket,
 *    interrupts the running call the way Ctrl-C does (SIGINT to the main thread: Lua code stops
 *    at its next hook check, C code that polls seer_host_interrupted() returns "interrupted");
 *  - pool.c: the broker of `seer rpc serve --workers N`, in front of N worker processes. */
#ifndef SEER_RPC_H
#define SEER_RPC_H

#include <stddef.h>

#include <zmq.h>

#include "../seer.h"
#include "net/net.h"

typedef struct lua_State lua_State;

/* ---- the hot path (wire.c) ------------------------------------------------------------------ */

/* Makes the headers of one sender: {"date", "msg_id", "msg_type", "session", "username",
 * "version"} as seer.rpc.wire always wrote them; msg_id is "<session>-<counter>". */
typedef struct seer_rpc_hm {
    char session[SEER_NET_UUID_LEN + 1];
    unsigned long long n;
    char user[96]; /* the username as JSON text */
    long long sec; /* the second date_prefix was written for */
    char date_prefix[32];
} seer_rpc_hm_t;

int seer_rpc_hm_init(seer_rpc_hm_t *hm, seer_err_t *err);
/* Writes a fresh header (msg_type must need no JSON escape) into out and its msg_id into msg_id;
 * returns the header's length or SEER_EINVAL when it does not fit. */
int seer_rpc_header(seer_rpc_hm_t *hm, char *out, size_t cap, const char *msg_type, char *msg_id, size_t id_cap);

/* A slice of a text. */
typedef struct seer_rpc_str {
    const char *p; /* NULL: absent */
    size_t n;
} seer_rpc_str_t;

/* The raw text (between the quotes, escapes as written) of the string members keys[i] of the
 * JSON object text; out[i].p is NULL for a key that is absent or not a string. Returns 0, or -1
 * when the text is not a JSON object. Scanning stops once every key is found (the first of
 * duplicates counts), so what follows is not checked. */
int seer_rpc_json_fields(const char *text, size_t len, const char *const *keys, seer_rpc_str_t *out, int nkeys);
int seer_rpc_str_eq(seer_rpc_str_t s, const char *lit);

/* The members of a JSON object text in order: key (between the quotes, escapes as written) and
 * the raw text of the value (strings with their quotes). Values are checked for JSON's grammar
 * of numbers, literals and nesting; string contents are not decoded. next returns 1 per
 * member, 0 after the closing brace, -1 on malformed text. */
typedef struct seer_rpc_obj_iter {
    const char *p, *e;
    int first;
} seer_rpc_obj_iter_t;
int seer_rpc_obj_begin(seer_rpc_obj_iter_t *it, const char *text, size_t len);
int seer_rpc_obj_next(seer_rpc_obj_iter_t *it, seer_rpc_str_t *key, seer_rpc_str_t *value);
/* Just past the JSON number at p (RFC 8259's grammar), or NULL. */
const char *seer_rpc_json_number_end(const char *p, const char *e);

/* A received message: every frame as a zmq message (so frames can move on without a copy);
 * f[delim] is "<IDS|MSG>", routing ids come before it, then the signature, the four parts
 * (SEER_NET_HEADER.. at delim + 2 + i) and the buffers. */
typedef struct seer_rpc_msg {
    zmq_msg_t *f;
    int n, cap;
    int delim;
} seer_rpc_msg_t;

#define SEER_RPC_DROPPED 2

/* Receives one message into m (zeroed, or used before: its frame array is reused) and
 * verifies its signature; flags: 0 waits as the socket's ZMQ_RCVTIMEO says, ZMQ_DONTWAIT does
 * not. Returns 1 with m filled, 0 when none came (EAGAIN), SEER_EINTR when a signal interrupted
 * the wait, SEER_RPC_DROPPED when it had a bad signature or layout (dropped and counted as
 * engine/net does), or SEER_E*. */
int seer_rpc_recv(void *sock, const seer_net_key_t *k, seer_rpc_msg_t *m, int flags, seer_err_t *err);
seer_net_frame_t seer_rpc_frame(const seer_rpc_msg_t *m, int i);
void seer_rpc_msg_truncate(seer_rpc_msg_t *m, int n); /* closes the frames from n on */
void seer_rpc_msg_clear(seer_rpc_msg_t *m);           /* closes every frame, keeps the array */
void seer_rpc_msg_free(seer_rpc_msg_t *m);

/* Signs parts and sends: route->f[route_from..route_to) (moved: they are used once), then
 * "<IDS|MSG>", the signature, the parts and the buffers. */
int seer_rpc_send(void *sock, const seer_net_key_t *k, seer_rpc_msg_t *route, int route_from, int route_to,
                  const seer_net_frame_t parts[SEER_NET_NPARTS], const seer_net_frame_t *bufs, int nbufs,
                  seer_err_t *err);
/* Sends route (when not NULL) then m's frames from `from` on, as they are (moved). */
int seer_rpc_forward(void *sock, seer_rpc_msg_t *m, int from, const void *route, size_t route_len, seer_err_t *err);

/* Refuses replays of signed messages: a msg_id seen before (remembered window_s to 2 window_s)
 * or a date more than window_s / 2 away from this machine's clock. Ids "<session>-<counter>"
 * cost one entry per session (a window of its last 64 counters), other ids one entry each. */
typedef struct seer_rpc_guard seer_rpc_guard_t;
seer_rpc_guard_t *seer_rpc_guard_new(int window_s);
void seer_rpc_guard_free(seer_rpc_guard_t *g);
/* NULL when the message is accepted (and its id remembered), else why it is refused. */
const char *seer_rpc_guard_check(seer_rpc_guard_t *g, seer_rpc_str_t msg_id, seer_rpc_str_t date);

/* One line on stderr in the server's log format: "2024-05-01T12:00:00Z [name] message". */
void seer_rpc_log(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the watchdog (watchdog.c) -------------------------------------------------------------- */

/* Why a call ended early. */
enum { SEER_RPC_RUNNING = 0, SEER_RPC_CANCELLED = 1, SEER_RPC_TIMEOUT = 2 };

typedef struct seer_rpc_watchdog seer_rpc_watchdog_t;

/* Starts the watchdog thread, which binds a ROUTER socket at endpoint ("tcp://127.0.0.1:*"
 * picks a port) and accepts rpc_cancel_request messages signed with key (which must not be
 * empty). The thread to interrupt is the calling thread. bound receives the endpoint actually
 * bound (cap bytes). */
int seer_rpc_watchdog_start(seer_rpc_watchdog_t **out, const char *endpoint, const void *key, size_t key_len,
                            char *bound, size_t cap, seer_err_t *err);

/* A call starts: the watchdog interrupts it when a cancel for call_id arrives or after
 * timeout_ms (<= 0: no deadline). Returns SEER_RPC_CANCELLED when call_id was cancelled before
 * it started (then nothing is armed), else SEER_RPC_RUNNING. */
int seer_rpc_watchdog_begin(seer_rpc_watchdog_t *w, const char *call_id, long long timeout_ms);

/* The call ended: disarms, and returns why it was interrupted (SEER_RPC_RUNNING: it was not). */
int seer_rpc_watchdog_end(seer_rpc_watchdog_t *w);

/* How many interrupts the watchdog has sent so far (the server tells its own SIGINTs apart from
 * a real Ctrl-C with it). */
unsigned long seer_rpc_watchdog_fired(const seer_rpc_watchdog_t *w);

/* The server tells its own SIGINTs apart from a real Ctrl-C: ack records that every interrupt
 * sent so far is accounted for; unhandled says whether one was sent since. */
void seer_rpc_watchdog_ack(seer_rpc_watchdog_t *w);
int seer_rpc_watchdog_unhandled(const seer_rpc_watchdog_t *w);

/* Whether a cancel for call_id arrived (for calls still queued). */
int seer_rpc_watchdog_was_cancelled(seer_rpc_watchdog_t *w, const char *call_id);

void seer_rpc_watchdog_stop(seer_rpc_watchdog_t *w);

/* ---- the worker pool (broker.c) ------------------------------------------------------------- */

typedef struct seer_rpc_broker seer_rpc_broker_t;

typedef struct seer_rpc_broker_opts {
    const char *frontend; /* where clients connect ("tcp://127.0.0.1:*" picks a port) */
    const char *control;  /* where cancels come */
    const char *backend;  /* where the workers connect */
    const void *key;      /* the HMAC key (not empty) */
    size_t key_len;
    const char *name;     /* in log lines */
    int workers;          /* 1 to 256 */
    int idle_exit_s;      /* after a load error, exit once no request came for this long */
} seer_rpc_broker_opts_t;

enum { SEER_RPC_BROKER_FRONTEND, SEER_RPC_BROKER_CONTROL, SEER_RPC_BROKER_BACKEND };

/* Binds the three sockets. */
int seer_rpc_broker_new(seer_rpc_broker_t **out, const seer_rpc_broker_opts_t *o, seer_err_t *err);
/* The endpoint bound for SEER_RPC_BROKER_*. */
const char *seer_rpc_broker_endpoint(const seer_rpc_broker_t *b, int which);
/* Starts the workers (argv, NULL-terminated, argv[0] an absolute path, plus "--worker-slot K")
 * and serves until a shutdown request, Ctrl-C, or a pool that cannot go on. Returns the exit
 * status (0, or 1 when the interface failed to load or a worker could not be replaced), or
 * SEER_E* when it could not run at all. */
int seer_rpc_broker_run(seer_rpc_broker_t *b, char *const *argv, seer_err_t *err);
void seer_rpc_broker_free(seer_rpc_broker_t *b);

/* ---- Lua ------------------------------------------------------------------------------------ */

/* seer.core.rpc (lua_rpc.c): channels, the watchdog and the worker pool for Lua (lua/seer/rpc.lua,
 * lua/seer/rpc/server.lua). A watchdog userdata holds a seer_rpc_watchdog_t * first. */
#define SEER_RPC_WATCHDOG_MT "seer.rpc.watchdog"
int seer_rpc_luaopen(lua_State *L);
/* Adds channel() to the module table on top of the stack (lua_channel.c). */
void seer_rpc_channel_open(lua_State *L);

#endif
