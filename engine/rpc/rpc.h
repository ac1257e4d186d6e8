/* Scoped-sandbox RPC: the parts that must not run on the server's main thread. The protocol
 * itself (signed Jupyter-format messages over ZMQ, lua/seer/rpc/) runs in Lua over seer.core.net;
 * a call runs on the main thread, so a cancellation or a deadline has to be noticed by someone
 * else: the watchdog, a thread with its own signed control socket, interrupts the running call
 * the way Ctrl-C does (SIGINT to the main thread: Lua code stops at its next hook check, C code
 * that polls seer_host_interrupted() returns "interrupted"). */
#ifndef SEER_RPC_H
#define SEER_RPC_H

#include <stddef.h>

#include "../seer.h"

typedef struct lua_State lua_State;

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

/* Whether a cancel for call_id arrived (for calls still queued). */
int seer_rpc_watchdog_was_cancelled(seer_rpc_watchdog_t *w, const char *call_id);

void seer_rpc_watchdog_stop(seer_rpc_watchdog_t *w);

/* seer.core.rpc (lua_rpc.c): the watchdog for Lua (lua/seer/rpc/server.lua). */
int seer_rpc_luaopen(lua_State *L);

#endif
