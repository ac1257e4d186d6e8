/* Signed multipart messages in the Jupyter wire format over libzmq: HMAC-SHA256 keys and
 * signatures, the message layout (routing ids, "<IDS|MSG>", signature, header, parent header,
 * metadata, content, buffers), message headers, and the random ids and keys they need. The
 * kernel (engine/kernel), seer.core.net (lua_net.c) and every other signed channel share it. */
#ifndef SEER_NET_H
#define SEER_NET_H

#include <stddef.h>

#include "../seer.h"

typedef struct lua_State lua_State;

/* ---- keys and signatures (sign.c) ---------------------------------------------------------- */

/* A connection key ready to sign with. An empty key means "no signatures": messages carry an
 * empty signature frame and any signature is accepted, as Jupyter specifies. A key may be used
 * from several threads at once (signing never modifies it). */
typedef struct seer_net_key seer_net_key_t;

#define SEER_NET_SIG_HEX 64 /* hex digits of an HMAC-SHA256 */

int seer_net_key_new(seer_net_key_t **out, const void *key, size_t len, seer_err_t *err);
void seer_net_key_free(seer_net_key_t *k);
int seer_net_key_empty(const seer_net_key_t *k);

/* A contiguous piece of bytes: one frame of a message. */
typedef struct seer_net_frame {
    const void *data;
    size_t len;
} seer_net_frame_t;

/* hex = lowercase hex HMAC-SHA256 over the frames in order ("" for an empty key); hex must
 * hold SEER_NET_SIG_HEX + 1 bytes. */
int seer_net_sign(const seer_net_key_t *k, const seer_net_frame_t *frames, int n, char *hex, seer_err_t *err);

/* 1 when sig (sig_len bytes, hex) is the signature of the frames, compared in constant time;
 * 0 otherwise. With an empty key every signature verifies. */
int seer_net_verify(const seer_net_key_t *k, const seer_net_frame_t *frames, int n, const void *sig, size_t sig_len);

/* As seer_net_verify, and a signature is accepted only once: the key remembers the MACs it has
 * accepted (at least the last SEER_NET_HISTORY / 2, at most SEER_NET_HISTORY of them, in at most
 * 32 bytes each), as ipykernel's digest history does. 1 verified and new, 0 a bad signature,
 * -1 a replay (a signature this key has accepted before). With an empty key every signature
 * verifies and nothing is remembered. Thread-safe for one key. Every signed receiver in seer
 * (seer_net_recv, seer_rpc_recv) goes through it, so none executes a message twice. */
#define SEER_NET_HISTORY 65536
int seer_net_verify_once(const seer_net_key_t *k, const seer_net_frame_t *frames, int n, const void *sig,
                         size_t sig_len);
/* Bytes the replay history of k holds now (for the tests that check it stays bounded). */
size_t seer_net_history_bytes(const seer_net_key_t *k);

/* n random bytes from OpenSSL's RAND_bytes as 2n lowercase hex digits plus a NUL. */
int seer_net_random_hex(char *out, size_t nbytes, seer_err_t *err);
/* A random (version 4) UUID, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx" plus a NUL. */
#define SEER_NET_UUID_LEN 36
int seer_net_uuid(char out[SEER_NET_UUID_LEN + 1], seer_err_t *err);

/* ---- messages (msg.c) ------------------------------------------------------------------------ */

enum { SEER_NET_HEADER, SEER_NET_PARENT, SEER_NET_METADATA, SEER_NET_CONTENT, SEER_NET_NPARTS };

/* One Jupyter message. parts[] are JSON texts (header, parent_header, metadata, content). A
 * received message owns its memory (one block, freed by seer_net_msg_free) and every frame in
 * it is followed by a NUL byte, so the JSON parts can go straight to a parser; a message built
 * for sending points at the caller's memory. */
typedef struct seer_net_msg {
    seer_net_frame_t *idents;
    int nidents;
    seer_net_frame_t parts[SEER_NET_NPARTS];
    seer_net_frame_t *buffers;
    int nbuffers;
    void *block; /* received messages: the allocation behind every pointer above */
} seer_net_msg_t;

/* The one ZMQ context of the process, created on first use (thread-safe). */
void *seer_net_context(seer_err_t *err);

/* Sends m on a ZMQ socket: idents, "<IDS|MSG>", signature, the four parts, buffers. Not
 * thread-safe for one socket (ZMQ sockets are not): callers sharing a socket lock around it. */
int seer_net_send(void *sock, const seer_net_key_t *k, const seer_net_msg_t *m, seer_err_t *err);

/* Waits up to timeout_ms (-1: forever, 0: only what is already queued) for a message whose
 * signature verifies and has not been seen before (a replay is dropped). Returns 1 with *m filled, 0 on timeout, SEER_EINTR when a signal
 * interrupted the wait, SEER_E* on a socket error. Messages with a bad signature or a broken
 * layout are dropped, each with one line on stderr that carries the running count, and the
 * wait goes on. */
int seer_net_recv(void *sock, const seer_net_key_t *k, seer_net_msg_t *m, int timeout_ms, seer_err_t *err);
void seer_net_msg_free(seer_net_msg_t *m);

/* What one receiver accepts beyond a good signature, and what it has dropped. A message with
 * more frames or bytes (all frames together) than the limits is read and thrown away as it
 * comes, never held whole; so is a replay (seer_net_verify_once). Zero limits mean the defaults. */
#define SEER_NET_MAX_FRAMES 4096
#define SEER_NET_MAX_BYTES ((size_t)1 << 30)
/* Peers one guarded bind or relay carries at once; past it a new connection is closed at once
 * (engine/net/guard.c): a peer connecting in a loop cannot take every descriptor. */
#define SEER_NET_GUARD_MAX_PEERS 256
typedef struct seer_net_rx {
    size_t max_frames, max_bytes;
    unsigned long dropped; /* messages this receiver dropped (signature, layout, limits, replays) */
    char why[96];          /* why the last one was dropped */
} seer_net_rx_t;
/* seer_net_recv with limits and per-receiver counts (rx may be NULL: the defaults). */
int seer_net_recv_rx(void *sock, const seer_net_key_t *k, seer_net_rx_t *rx, seer_net_msg_t *m, int timeout_ms,
                     seer_err_t *err);

/* How many messages were dropped for a bad signature (or layout) so far in this process. */
unsigned long seer_net_dropped_count(void);
/* Counts one more dropped message and says why on stderr (for readers outside msg.c). */
void seer_net_note_dropped(const char *why);

/* Raw multipart send/receive (heartbeats and other unsigned traffic). recv_frames returns the
 * number of frames (frames[] and one block in *block that owns them, free(*block) when done),
 * 0 on timeout, or SEER_E*. */
int seer_net_send_frames(void *sock, const seer_net_frame_t *frames, int n, seer_err_t *err);
int seer_net_recv_frames(void *sock, seer_net_frame_t **frames, void **block, int timeout_ms, seer_err_t *err);

/* A message header as JSON text: {"date", "msg_id", "msg_type", "session", "username",
 * "version": "5.3"}, the date in ISO 8601 UTC with microseconds ("2024-01-02T03:04:05.123456Z"),
 * msg_id a fresh UUID4. Returns the text length, or SEER_E* when cap is too small. */
#define SEER_NET_PROTOCOL_VERSION "5.3"
int seer_net_header(char *out, size_t cap, const char *msg_type, const char *session, const char *username,
                    seer_err_t *err);

/* The JSON text of s as a quoted string ("..." with \" \\ \n \uXXXX escapes) appended to a
 * growing buffer; bytes that are not valid UTF-8 become U+FFFD, so any output (a process's raw
 * bytes) can go into a message. Returns 0 or SEER_ENOMEM. */
typedef struct seer_net_buf {
    char *data;
    size_t len, cap;
} seer_net_buf_t;
/* Length of the well-formed UTF-8 sequence at s (n >= 1 bytes left), or 0 when it is not one
 * (overlong forms, surrogates and code points above U+10FFFF are not). */
size_t seer_net_utf8_seq(const unsigned char *s, size_t n);
int seer_net_buf_add(seer_net_buf_t *b, const void *data, size_t n);
int seer_net_buf_add_json_string(seer_net_buf_t *b, const void *s, size_t n);
void seer_net_buf_free(seer_net_buf_t *b);

/* ---- Lua ------------------------------------------------------------------------------------- */

/* seer.core.net (lua_net.c); lua/seer/net.lua documents and wraps it. */
int seer_net_luaopen(lua_State *L);
/* The ZMQ socket and signing key of the seer.core.net socket at stack index idx (raises a Lua
 * error when it is not one or is closed). The pointers live as long as the socket is open. */
void *seer_net_lua_socket(lua_State *L, int idx, const seer_net_key_t **key);

/* ---- CURVE (curve.c) --------------------------------------------------------------------------- */

/* 1 when this libzmq has CURVE (built with libsodium). Every call below fails with a message
 * saying so when it has not. Keys are Z85 text: 40 characters plus a NUL. */
int seer_net_has_curve(void);
int seer_net_curve_keypair(char pub[41], char sec[41], seer_err_t *err);
int seer_net_curve_public(char pub[41], const char *sec, seer_err_t *err);
/* Makes sock (before bind) a CURVE server whose ZAP handler accepts only client_public; *slot
 * names its entry (seer_net_curve_release when the socket closes). */
int seer_net_curve_server(void *sock, const char *secret, const char *client_public, int *slot, seer_err_t *err);
void seer_net_curve_release(int slot);
/* How many handshakes with another client key this server's ZAP entry refused. */
unsigned long seer_net_curve_refused(int slot);
/* Makes sock (before connect) a CURVE client of the server with that public key. */
int seer_net_curve_client(void *sock, const char *server_public, const char *client_public, const char *client_secret,
                          seer_err_t *err);

/* ---- the connection guard (guard.c) --------------------------------------------------------
 * libzmq holds every frame of a multipart message until its last arrives, whatever
 * ZMQ_MAXMSGSIZE and ZMQ_RCVHWM say, so a peer speaking ZMTP itself can grow the receiver without
 * bound. A socket with limits connects through a guard instead: open returns a local endpoint
 * (ipc:// in a private 0700 folder) to give zmq_connect; one thread carries the bytes to and from
 * `endpoint`, and disconnects a peer whose message passes max_bytes (all frames) or max_frames
 * (0: the defaults above), whose command passes 64 KiB, or that does not speak ZMTP 3 with the
 * NULL mechanism. An ipc:// path that is a link is refused, not followed. cuts counts the
 * disconnects and failed connects for a reason (why: the last). close after zmq_close. */
void *seer_net_guard_open(const char *endpoint, size_t max_bytes, size_t max_frames, char *local, size_t local_cap,
                          seer_err_t *err);
/* The same for a socket that binds: the guard listens at `endpoint` (ipc:// path or tcp://host:port,
 * port * for any) and hands each peer's connection, checked, to `local` (an ipc:// path in the
 * private folder), where libzmq binds; pub gets the endpoint peers use (the port resolved). */
/* seer_net_guard_open for an ipc:// path beneath root, a folder whose own path is trusted but
 * whose contents another side can change: the socket's folder is opened once, now, with no link
 * followed below root (each reconnect opens the socket's name in that folder, O_NOFOLLOW). NULL
 * with err set when a folder on the way is a link or missing, or the path is not beneath root.
 * Endpoints other than ipc paths are guarded as seer_net_guard_open does. */
void *seer_net_guard_open_beneath(const char *endpoint, const char *root, size_t max_bytes, size_t max_frames,
                                  char *local, size_t local_cap, seer_err_t *err);
/* seer_net_guard_relay whose endpoint (an ipc path) lies beneath a folder the other side can
 * change: reached with no link followed below `beneath` (NULL: as seer_net_guard_relay); and whose
 * listening socket lies beneath `listen_beneath`, a folder a (possibly other) side can change: made
 * there as seer_net_guard_bind_beneath makes its socket, and left there when the relay closes
 * (NULL: what is at listen_path is replaced, and removed at the close). */
void *seer_net_guard_relay_beneath(const char *listen_path, const char *listen_beneath, const char *endpoint,
                                   const char *beneath, size_t max_bytes, size_t max_frames, seer_err_t *err);
void *seer_net_guard_bind(const char *endpoint, size_t max_bytes, size_t max_frames, char *local, size_t local_cap,
                          char *pub, size_t pub_cap, seer_err_t *err);
/* seer_net_guard_bind for an ipc:// path beneath `beneath`, a folder whose own path is trusted but
 * whose contents another side can change (a sandbox's run folder): the socket's folder is opened
 * with no link followed below it and the socket made through that descriptor, so a folder on the
 * way swapped for a link is refused, never followed (the host creates nothing elsewhere); a stale
 * socket or link at the name is removed, anything else there refused. NULL with err set. */
void *seer_net_guard_bind_beneath(const char *endpoint, const char *beneath, size_t max_bytes, size_t max_frames,
                                  char *local, size_t local_cap, char *pub, size_t pub_cap, seer_err_t *err);
/* A relay: the guard listens at listen_path (a unix socket, for any local peer) and connects each
 * connection to `endpoint` as a guarded connect does (no link followed at an ipc path, the
 * endpoint's side read and bounded), for a host folder that must offer a socket living in a
 * folder another side controls (a container's shared folder). */
void *seer_net_guard_relay(const char *listen_path, const char *endpoint, size_t max_bytes, size_t max_frames,
                           seer_err_t *err);
unsigned long seer_net_guard_cuts(void *guard, char *why, size_t why_cap);
/* How long (ms) the guard's real endpoint has refused every connect tried (nothing listens
 * there: the peer has ended); 0 while a connection is up or none was tried. */
long long seer_net_guard_down_ms(void *guard);
void seer_net_guard_close(void *guard);

#endif
