/* The kernel's transport: the five Jupyter sockets, the threads that must answer while a cell
 * runs (heartbeat, control), status messages around every request, coalesced output streams,
 * input requests, and interrupts. What a request means is up to lua/seer/kernel.lua, which gets
 * (msg_type, content JSON, header JSON) and returns the reply's content as JSON text.
 *
 * Threads: main (shell requests, and all Lua), heartbeat (echo), control (kernel_info,
 * interrupt, shutdown, answered even while a cell runs), flush (sends buffered stream output
 * a few ms after it was written). iopub is shared, so every send on it holds iopub_mu. Only the
 * main thread takes SIGINT: an interrupt_request becomes pthread_kill(main, SIGINT), the same
 * path as a real Ctrl-C or Jupyter's signal-mode interrupt. */
#include "kernel.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <zmq.h>

#include "host/host.h"
#include "net/net.h"

/* Output written within this many ms goes out as one stream message. */
#define STREAM_COALESCE_MS 5
/* A buffer this large is sent at once rather than waiting. */
#define STREAM_MAX_BUFFER (64 * 1024)
/* After a shutdown_request, how long a running cell gets to stop before the process exits. */
#define SHUTDOWN_GRACE_MS 2000
/* Sockets keep unsent messages this long at close, so the last replies still reach the client. */
#define CLOSE_LINGER_MS 500
/* iopub makes the kernel wait for a subscriber that reads slowly (ZMQ_XPUB_NODROP), at most this
 * long per message (SEER_KERNEL_IOPUB_WAIT_MS); past it the message is dropped, counted, and the
 * request's reply says how many (metadata.seer_iopub_dropped): a client that stopped reading
 * cannot hold the kernel forever. */
#define IOPUB_WAIT_MS 60000

typedef struct kernel {
    seer_host_t *host;
    lua_State *L;
    seer_net_key_t *key;
    void *ctx, *shell, *control, *stdin_sock, *iopub, *hb;
    char session[SEER_NET_UUID_LEN + 1];
    char username[64];
    pthread_t main_tid, hb_tid, control_tid, flush_tid;
    int hb_started, control_started, flush_started;
    int stop_fd; /* eventfd: readable once the kernel is stopping (heartbeat and control threads) */
    int wake_fd; /* eventfd: the control thread wakes the main loop after a shutdown_request */

    pthread_mutex_t iopub_mu;

    /* The shell request the main thread is handling (the parent of everything it publishes). */
    const seer_net_msg_t *cur;

    /* Stream output not sent yet: one stream (stdout or stderr) at a time, so order is kept. */
    pthread_mutex_t stream_mu;
    pthread_cond_t stream_cv;
    seer_net_buf_t stream_text;
    seer_net_buf_t stream_parent;
    int stream_name; /* 0: none, 1: stdout, 2: stderr */
    long long stream_t0;
    int stream_stop;

    char *kernel_info; /* kernel_info_reply content, from the interpreter at start-up */
    int handler_ref;
    int aborting; /* after an error with stop_on_error: queued execute requests are aborted */

    atomic_int shutdown;
    atomic_long iopub_dropped; /* messages iopub could not deliver within the wait (all threads) */
    int iopub_wait_ms;         /* SNDTIMEO while subscribers keep up */
    int iopub_overflow;        /* a send timed out: later sends do not wait until one succeeds (iopub_mu) */
    pthread_mutex_t done_mu;
    pthread_cond_t done_cv;
    int main_done;
} kernel_t;

/* An interrupt that arrives while no cell runs (between requests, or before a cell's code has
 * started): the next cell start sees it, so an interrupt sent right after execute_request is not
 * lost. seer_host_pcall installs its own handler while Lua code runs. */
static volatile sig_atomic_t g_pending_interrupt;

static void on_sigint_idle(int sig) {
    (void)sig;
    g_pending_interrupt = 1;
}

static long long mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("seer kernel: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- publishing on iopub ------------------------------------------------------------------- */

static const seer_net_frame_t empty_obj = {"{}", 2};

static void publish_raw(kernel_t *k, const seer_net_frame_t *parent, const char *msg_type, const char *content,
                        size_t clen) {
    char header[512];
    seer_err_t err;
    int hl = seer_net_header(header, sizeof header, msg_type, k->session, k->username, &err);
    if (hl < 0) {
        logf_("%s", err.msg);
        return;
    }
    seer_net_frame_t topic = {msg_type, strlen(msg_type)};
    seer_net_msg_t m = {.idents = &topic, .nidents = 1};
    m.parts[SEER_NET_HEADER] = (seer_net_frame_t){header, (size_t)hl};
    m.parts[SEER_NET_PARENT] = parent ? *parent : empty_obj;
    m.parts[SEER_NET_METADATA] = empty_obj;
    m.parts[SEER_NET_CONTENT] = (seer_net_frame_t){content, clen};
    pthread_mutex_lock(&k->iopub_mu);
    int rc = seer_net_send(k->iopub, k->key, &m, &err);
    /* Once a send has waited its full time, a subscriber is stuck: the next sends do not wait
     * (each would cost the whole wait) but drop at once, counted, until one goes through. */
    int was_overflow = k->iopub_overflow;
    if (rc < 0 && !k->iopub_overflow && k->iopub_wait_ms > 0) {
        int zero = 0;
        zmq_setsockopt(k->iopub, ZMQ_SNDTIMEO, &zero, sizeof zero);
        k->iopub_overflow = 1;
    } else if (rc == 0 && k->iopub_overflow) {
        zmq_setsockopt(k->iopub, ZMQ_SNDTIMEO, &k->iopub_wait_ms, sizeof k->iopub_wait_ms);
        k->iopub_overflow = 0;
    }
    pthread_mutex_unlock(&k->iopub_mu);
    if (rc < 0) {
        long n = atomic_fetch_add(&k->iopub_dropped, 1) + 1;
        /* one line for the first and then every 1000th: a stuck subscriber must not fill the log */
        if (n == 1 || n % 1000 == 0)
            logf_("iopub: %s (a subscriber did not read for %d ms; %ld messages dropped so far)", err.msg,
                  k->iopub_wait_ms, n);
    } else if (was_overflow) {
        logf_("iopub: delivering again after %ld dropped messages", atomic_load(&k->iopub_dropped));
    }
}

static void publish_status(kernel_t *k, const seer_net_frame_t *parent, const char *state) {
    char c[64];
    int n = snprintf(c, sizeof c, "{\"execution_state\":\"%s\"}", state);
    publish_raw(k, parent, "status", c, (size_t)n);
}

/* Sends the buffered stream text; stream_mu held. */
static void stream_flush_locked(kernel_t *k) {
    if (k->stream_text.len == 0) return;
    seer_net_buf_t c = {0};
    const char *head = k->stream_name == 2 ? "{\"name\":\"stderr\",\"text\":" : "{\"name\":\"stdout\",\"text\":";
    int bad = seer_net_buf_add(&c, head, strlen(head)) < 0 ||
              seer_net_buf_add_json_string(&c, k->stream_text.data, k->stream_text.len) < 0 ||
              seer_net_buf_add(&c, "}", 1) < 0;
    if (bad) logf_("out of memory for %zu bytes of output", k->stream_text.len);
    else {
        seer_net_frame_t parent = {k->stream_parent.data, k->stream_parent.len};
        publish_raw(k, k->stream_parent.len ? &parent : NULL, "stream", c.data, c.len);
    }
    seer_net_buf_free(&c);
    k->stream_text.len = 0;
    k->stream_name = 0;
}

static void stream_flush(kernel_t *k) {
    pthread_mutex_lock(&k->stream_mu);
    stream_flush_locked(k);
    pthread_mutex_unlock(&k->stream_mu);
}

static const seer_net_frame_t *cur_parent(kernel_t *k) { return k->cur ? &k->cur->parts[SEER_NET_HEADER] : NULL; }

/* Everything the main thread publishes goes after the output written before it. */
static void publish(kernel_t *k, const char *msg_type, const char *content, size_t clen) {
    pthread_mutex_lock(&k->stream_mu);
    stream_flush_locked(k);
    publish_raw(k, cur_parent(k), msg_type, content, clen);
    pthread_mutex_unlock(&k->stream_mu);
}

/* How much of s (n bytes) fits in room without splitting a UTF-8 sequence: 0 when the first
 * character does not fit (the caller flushes and tries again with a whole buffer). */
static size_t utf8_fit(const char *s, size_t n, size_t room) {
    if (n <= room) return n;
    size_t k = room;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    return k;
}

/* Output goes out in stream messages of at most STREAM_MAX_BUFFER bytes, however much one write
 * holds: a single huge message would be more than a client takes in one message (seer's notebook
 * server disconnects a peer past 64 MiB, and every later output of the session would be lost). */
static void stream_write(kernel_t *k, int name, const char *s, size_t n) {
    if (n == 0) return;
    pthread_mutex_lock(&k->stream_mu);
    if (k->stream_name && k->stream_name != name) stream_flush_locked(k);
    while (n > 0) {
        if (k->stream_text.len == 0) {
            const seer_net_frame_t *p = cur_parent(k);
            k->stream_parent.len = 0;
            if (p) seer_net_buf_add(&k->stream_parent, p->data, p->len);
            k->stream_t0 = mono_ms();
            pthread_cond_signal(&k->stream_cv);
        }
        k->stream_name = name;
        size_t room = k->stream_text.len < STREAM_MAX_BUFFER ? STREAM_MAX_BUFFER - k->stream_text.len : 0;
        size_t take = utf8_fit(s, n, room);
        if (take == 0 && k->stream_text.len == 0) take = n < STREAM_MAX_BUFFER ? n : STREAM_MAX_BUFFER; /* not UTF-8 */
        if (take > 0 && seer_net_buf_add(&k->stream_text, s, take) < 0) {
            logf_("out of memory buffering output");
            break;
        }
        s += take;
        n -= take;
        if (k->stream_text.len >= STREAM_MAX_BUFFER || n > 0) {
            stream_flush_locked(k);
            k->stream_name = name; /* flushing forgets it; the rest of this write is the same stream */
        }
    }
    pthread_mutex_unlock(&k->stream_mu);
}

static void *flush_main(void *arg) {
    kernel_t *k = arg;
    pthread_mutex_lock(&k->stream_mu);
    while (!k->stream_stop) {
        if (k->stream_text.len == 0) {
            pthread_cond_wait(&k->stream_cv, &k->stream_mu);
            continue;
        }
        long long due = k->stream_t0 + STREAM_COALESCE_MS;
        if (mono_ms() < due) {
            struct timespec ts = {.tv_sec = due / 1000, .tv_nsec = (long)(due % 1000) * 1000000};
            pthread_cond_timedwait(&k->stream_cv, &k->stream_mu, &ts);
            continue;
        }
        stream_flush_locked(k);
    }
    stream_flush_locked(k);
    pthread_mutex_unlock(&k->stream_mu);
    return NULL;
}

/* ---- replies ---------------------------------------------------------------------------------- */

static void reply_type(const char *req, char *out, size_t cap) {
    size_t n = strlen(req);
    if (n > 8 && strcmp(req + n - 8, "_request") == 0) snprintf(out, cap, "%.*s_reply", (int)(n - 8), req);
    else snprintf(out, cap, "%s_reply", req);
}

static void send_reply_md(kernel_t *k, void *sock, const seer_net_msg_t *req, const char *req_type, const char *content,
                          size_t clen, const char *metadata) {
    char type[128], header[512];
    reply_type(req_type, type, sizeof type);
    seer_err_t err;
    int hl = seer_net_header(header, sizeof header, type, k->session, k->username, &err);
    if (hl < 0) {
        logf_("%s", err.msg);
        return;
    }
    seer_net_msg_t m = {.idents = req->idents, .nidents = req->nidents};
    m.parts[SEER_NET_HEADER] = (seer_net_frame_t){header, (size_t)hl};
    m.parts[SEER_NET_PARENT] = req->parts[SEER_NET_HEADER];
    m.parts[SEER_NET_METADATA] = metadata ? (seer_net_frame_t){metadata, strlen(metadata)} : empty_obj;
    m.parts[SEER_NET_CONTENT] = (seer_net_frame_t){content, clen};
    if (seer_net_send(sock, k->key, &m, &err) < 0) logf_("reply %s: %s", type, err.msg);
}

static void send_reply(kernel_t *k, void *sock, const seer_net_msg_t *req, const char *req_type, const char *content,
                       size_t clen) {
    send_reply_md(k, sock, req, req_type, content, clen, NULL);
}

/* msg_type from a header's JSON text; "" when it has none. */
static void header_type(const seer_net_msg_t *m, char *out, size_t cap) {
    out[0] = '\0';
    cJSON *h = cJSON_ParseWithLength(m->parts[SEER_NET_HEADER].data, m->parts[SEER_NET_HEADER].len);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "msg_type");
    if (cJSON_IsString(t)) snprintf(out, cap, "%s", t->valuestring);
    cJSON_Delete(h);
}

static int content_restart(const seer_net_msg_t *m) {
    cJSON *c = cJSON_ParseWithLength(m->parts[SEER_NET_CONTENT].data, m->parts[SEER_NET_CONTENT].len);
    int r = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "restart"));
    cJSON_Delete(c);
    return r;
}

/* ipykernel also broadcasts the reply on iopub, so every client learns the kernel is going
 * away: the shell path does it here, the control thread after it has woken the main loop. */
static void answer_shutdown(kernel_t *k, void *sock, const seer_net_msg_t *m, const char *type) {
    char c[64];
    int n = snprintf(c, sizeof c, "{\"restart\":%s,\"status\":\"ok\"}", content_restart(m) ? "true" : "false");
    send_reply(k, sock, m, type, c, (size_t)n);
    atomic_store(&k->shutdown, 1);
    if (sock != k->control) publish_raw(k, &m->parts[SEER_NET_HEADER], "shutdown_reply", c, (size_t)n);
}

/* ---- control thread -------------------------------------------------------------------------- */

static void wait_main_or_exit(kernel_t *k) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += SHUTDOWN_GRACE_MS / 1000;
    ts.tv_nsec += (long)(SHUTDOWN_GRACE_MS % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&k->done_mu);
    while (!k->main_done)
        if (pthread_cond_timedwait(&k->done_cv, &k->done_mu, &ts) == ETIMEDOUT) break;
    int done = k->main_done;
    pthread_mutex_unlock(&k->done_mu);
    if (!done) {
        /* The cell is in code that cannot be interrupted; the reply is out, so leave now. */
        logf_("shutdown: the running cell did not stop within %d ms; exiting", SHUTDOWN_GRACE_MS);
        fflush(stderr);
        _exit(0);
    }
}

static void handle_control(kernel_t *k, const seer_net_msg_t *m) {
    char type[128];
    header_type(m, type, sizeof type);
    const seer_net_frame_t *parent = &m->parts[SEER_NET_HEADER];
    /* The request is acted on before anything is published: iopub may be waiting for a slow
     * subscriber (a cell flooding output), and an interrupt or a shutdown must not wait with it. */
    if (strcmp(type, "kernel_info_request") == 0) {
        send_reply(k, k->control, m, type, k->kernel_info, strlen(k->kernel_info));
    } else if (strcmp(type, "interrupt_request") == 0) {
        pthread_kill(k->main_tid, SIGINT);
        send_reply(k, k->control, m, type, "{\"status\":\"ok\"}", 15);
    } else if (strcmp(type, "shutdown_request") == 0) {
        answer_shutdown(k, k->control, m, type);
    } else {
        logf_("ignoring %s on the control channel", type[0] ? type : "a message without msg_type");
    }
    if (atomic_load(&k->shutdown)) {
        pthread_kill(k->main_tid, SIGINT);
        uint64_t one = 1;
        ssize_t w = write(k->wake_fd, &one, sizeof one);
        (void)w;
    }
    publish_status(k, parent, "busy");
    if (atomic_load(&k->shutdown)) {
        char c[64];
        int n = snprintf(c, sizeof c, "{\"restart\":%s,\"status\":\"ok\"}", content_restart(m) ? "true" : "false");
        publish_raw(k, parent, "shutdown_reply", c, (size_t)n);
    }
    publish_status(k, parent, "idle");
    if (atomic_load(&k->shutdown)) wait_main_or_exit(k); /* the main loop tears everything down */
}

static void *control_main(void *arg) {
    kernel_t *k = arg;
    for (;;) {
        zmq_pollitem_t it[2] = {{.socket = k->control, .events = ZMQ_POLLIN}, {.fd = k->stop_fd, .events = ZMQ_POLLIN}};
        int r = zmq_poll(it, 2, -1);
        if (r < 0) {
            if (zmq_errno() == EINTR) continue;
            logf_("control: poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        if (it[1].revents) break;
        seer_net_msg_t m;
        seer_err_t err;
        r = seer_net_recv(k->control, k->key, &m, 0, &err);
        if (r < 0 && r != SEER_EINTR) {
            logf_("control: %s", err.msg);
            break;
        }
        if (r != 1) continue;
        handle_control(k, &m);
        seer_net_msg_free(&m);
        if (atomic_load(&k->shutdown)) break;
    }
    return NULL;
}

/* ---- heartbeat thread ------------------------------------------------------------------------ */

static void *hb_main(void *arg) {
    kernel_t *k = arg;
    for (;;) {
        zmq_pollitem_t it[2] = {{.socket = k->hb, .events = ZMQ_POLLIN}, {.fd = k->stop_fd, .events = ZMQ_POLLIN}};
        int r = zmq_poll(it, 2, -1);
        if (r < 0) {
            if (zmq_errno() == EINTR) continue;
            break;
        }
        if (it[1].revents) break;
        if (!it[0].revents) continue;
        /* REP: echo every frame back as it came. */
        seer_net_frame_t *f;
        void *block;
        seer_err_t err;
        int n = seer_net_recv_frames(k->hb, &f, &block, 0, &err);
        if (n > 0) seer_net_send_frames(k->hb, f, n, &err);
        free(block);
    }
    return NULL;
}

/* ---- functions the interpreter calls (upvalue 1: the kernel) ------------------------------------- */

static kernel_t *K(lua_State *L) { return lua_touserdata(L, lua_upvalueindex(1)); }

/* publish(msg_type, content_json) */
static int l_publish(lua_State *L) {
    size_t n;
    const char *type = luaL_checkstring(L, 1);
    const char *content = luaL_checklstring(L, 2, &n);
    publish(K(L), type, content, n);
    return 0;
}

/* stream("stdout"|"stderr", text) */
static int l_stream(lua_State *L) {
    size_t n;
    const char *name = luaL_checkstring(L, 1);
    const char *s = luaL_checklstring(L, 2, &n);
    stream_write(K(L), strcmp(name, "stderr") == 0 ? 2 : 1, s, n);
    return 0;
}

static int l_flush(lua_State *L) {
    stream_flush(K(L));
    return 0;
}

/* input(prompt, password) -> the text typed | nil, "interrupted". Asks the client on the stdin
 * channel (routed to the client that sent the current request) and waits for input_reply. */
static int l_input(lua_State *L) {
    kernel_t *k = K(L);
    size_t plen;
    const char *prompt = luaL_checklstring(L, 1, &plen);
    int password = lua_toboolean(L, 2);
    if (!k->cur) return luaL_error(L, "input: no request is being handled");
    seer_err_t err;
    seer_net_msg_t stale;
    while (seer_net_recv(k->stdin_sock, k->key, &stale, 0, &err) == 1) seer_net_msg_free(&stale);
    seer_net_buf_t c = {0};
    if (seer_net_buf_add(&c, "{\"password\":", 12) < 0 || seer_net_buf_add(&c, password ? "true" : "false", password ? 4 : 5) < 0 ||
        seer_net_buf_add(&c, ",\"prompt\":", 10) < 0 || seer_net_buf_add_json_string(&c, prompt, plen) < 0 ||
        seer_net_buf_add(&c, "}", 1) < 0) {
        seer_net_buf_free(&c);
        return luaL_error(L, "input: out of memory");
    }
    stream_flush(k);
    char header[512];
    int hl = seer_net_header(header, sizeof header, "input_request", k->session, k->username, &err);
    if (hl < 0) {
        seer_net_buf_free(&c);
        return luaL_error(L, "input: %s", err.msg);
    }
    seer_net_msg_t m = {.idents = k->cur->idents, .nidents = k->cur->nidents};
    m.parts[SEER_NET_HEADER] = (seer_net_frame_t){header, (size_t)hl};
    m.parts[SEER_NET_PARENT] = k->cur->parts[SEER_NET_HEADER];
    m.parts[SEER_NET_METADATA] = empty_obj;
    m.parts[SEER_NET_CONTENT] = (seer_net_frame_t){c.data, c.len};
    int rc = seer_net_send(k->stdin_sock, k->key, &m, &err);
    seer_net_buf_free(&c);
    if (rc < 0) return luaL_error(L, "input: %s", err.msg);
    for (;;) {
        if (seer_host_interrupted() || g_pending_interrupt || atomic_load(&k->shutdown)) {
            lua_pushnil(L);
            lua_pushliteral(L, "interrupted");
            return 2;
        }
        seer_net_msg_t r;
        int got = seer_net_recv(k->stdin_sock, k->key, &r, 100, &err);
        if (got == 0 || got == SEER_EINTR) continue;
        if (got < 0) return luaL_error(L, "input: %s", err.msg);
        char type[64];
        header_type(&r, type, sizeof type);
        if (strcmp(type, "input_reply") != 0) {
            logf_("stdin: ignoring %s while waiting for input_reply", type);
            seer_net_msg_free(&r);
            continue;
        }
        cJSON *content = cJSON_ParseWithLength(r.parts[SEER_NET_CONTENT].data, r.parts[SEER_NET_CONTENT].len);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(content, "value");
        if (cJSON_IsString(v)) lua_pushstring(L, v->valuestring);
        else lua_pushliteral(L, "");
        cJSON_Delete(content);
        seer_net_msg_free(&r);
        return 1;
    }
}

/* run(fn, ...) -> true, results... | false, message, interrupted. Runs fn as a cell: JIT off
 * for fn and the functions defined in it (LuaJIT checks hooks only in interpreted code, and an
 * interrupt must stop `while true do end`), under seer_host_pcall so SIGINT raises
 * "interrupted"; library code it calls is still compiled. */
/* A cell's error as "message\nstack traceback:\n...", every byte of the message kept (luaL_traceback
 * takes a C string, so the message is joined to the traceback here instead). */
static int run_error_handler(lua_State *L) {
    if (lua_type(L, 1) == LUA_TSTRING || lua_type(L, 1) == LUA_TNUMBER) {
        lua_pushvalue(L, 1);
        lua_tostring(L, -1);
    } else if (!(luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)) {
        lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    lua_pushliteral(L, "\n");
    luaL_traceback(L, L, NULL, 1);
    lua_concat(L, 3);
    return 1;
}

#define CELL_ERROR_KEY "seer.kernel.cell_error"

/* run_cell_inner(fn, ...): fn's results; on an error the whole message with its traceback is
 * kept in the registry (CELL_ERROR_KEY) and the error raised again for seer_host_pcall. */
static int run_cell_inner(lua_State *L) {
    int n = lua_gettop(L);
    lua_pushcfunction(L, run_error_handler);
    lua_insert(L, 1);
    if (lua_pcall(L, n - 1, LUA_MULTRET, 1) != 0) {
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, CELL_ERROR_KEY);
        return lua_error(L);
    }
    return lua_gettop(L) - 1;
}

static int l_run(lua_State *L) {
    kernel_t *k = K(L);
    luaL_checktype(L, 1, LUA_TFUNCTION);
    if (g_pending_interrupt) {
        g_pending_interrupt = 0;
        lua_pushboolean(L, 0);
        lua_pushliteral(L, "interrupted");
        lua_pushboolean(L, 1);
        return 3;
    }
    luaJIT_setmode(L, 1, LUAJIT_MODE_ALLFUNC | LUAJIT_MODE_OFF);
    /* The cell runs under run_cell_inner, which keeps its error whole (seer_host_pcall's error
     * is a C string of at most SEER_ERR_MSG_MAX bytes: error("p\0q") was recorded as "p", and
     * errors were cut at 8 KiB); seer_host_pcall still arms the interrupt and tells it apart. */
    lua_pushcfunction(L, run_cell_inner);
    lua_insert(L, 1);
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, CELL_ERROR_KEY);
    int nargs = lua_gettop(L) - 1;
    seer_err_t err;
    int rc = seer_host_pcall(k->host, nargs, LUA_MULTRET, &err);
    if (rc < 0) {
        lua_settop(L, 0);
        lua_pushboolean(L, 0);
        lua_getfield(L, LUA_REGISTRYINDEX, CELL_ERROR_KEY);
        if (lua_type(L, -1) != LUA_TSTRING) {
            lua_pop(L, 1);
            lua_pushstring(L, err.msg);
        }
        lua_pushnil(L);
        lua_setfield(L, LUA_REGISTRYINDEX, CELL_ERROR_KEY);
        lua_pushboolean(L, rc == SEER_EINTR);
        return 3;
    }
    lua_pushboolean(L, 1);
    lua_insert(L, 1);
    return lua_gettop(L);
}

/* take_interrupt() -> true once when an interrupt arrived outside a running cell */
static int l_take_interrupt(lua_State *L) {
    lua_pushboolean(L, g_pending_interrupt != 0);
    g_pending_interrupt = 0;
    return 1;
}

/* b64(bytes) -> base64 text (images in display_data) */
static int l_b64(lua_State *L) {
    size_t n;
    const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    char chunk[LUAL_BUFFERSIZE];
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
        chunk[o++] = tbl[v >> 18];
        chunk[o++] = tbl[(v >> 12) & 63];
        chunk[o++] = tbl[(v >> 6) & 63];
        chunk[o++] = tbl[v & 63];
        if (o + 4 > sizeof chunk) {
            luaL_addlstring(&b, chunk, o);
            o = 0;
        }
    }
    if (i < n) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0);
        chunk[o++] = tbl[v >> 18];
        chunk[o++] = tbl[(v >> 12) & 63];
        chunk[o++] = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
        chunk[o++] = '=';
    }
    luaL_addlstring(&b, chunk, o);
    luaL_pushresult(&b);
    return 1;
}

static int l_session(lua_State *L) {
    lua_pushstring(L, K(L)->session);
    return 1;
}

static void push_transport(lua_State *L, kernel_t *k) {
    static const luaL_Reg fns[] = {{"publish", l_publish},
                                   {"stream", l_stream},
                                   {"flush", l_flush},
                                   {"input", l_input},
                                   {"run", l_run},
                                   {"take_interrupt", l_take_interrupt},
                                   {"b64", l_b64},
                                   {"session", l_session},
                                   {NULL, NULL}};
    lua_newtable(L);
    for (const luaL_Reg *f = fns; f->name; f++) {
        lua_pushlightuserdata(L, k);
        lua_pushcclosure(L, f->func, 1);
        lua_setfield(L, -2, f->name);
    }
}

/* ---- the interpreter -------------------------------------------------------------------------- */

static int traceback(lua_State *L) {
    luaL_traceback(L, L, lua_tostring(L, 1) ? lua_tostring(L, 1) : "(error without message)", 1);
    return 1;
}

/* Loads lua/seer/kernel.lua and hands it the transport; keeps its handler. */
static int interpreter_open(kernel_t *k, seer_err_t *err) {
    lua_State *L = k->L;
    lua_pushcfunction(L, traceback);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "seer.kernel");
    if (lua_pcall(L, 1, 1, -3) != 0) {
        seer_err_set(err, SEER_ELUA, "cannot load seer.kernel: %s", lua_tostring(L, -1));
        lua_settop(L, 0);
        return SEER_ELUA;
    }
    lua_getfield(L, -1, "attach");
    push_transport(L, k);
    if (lua_pcall(L, 1, 1, 1) != 0 || !lua_isfunction(L, -1)) {
        seer_err_set(err, SEER_ELUA, "seer.kernel.attach failed: %s", lua_tostring(L, -1));
        lua_settop(L, 0);
        return SEER_ELUA;
    }
    k->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_settop(L, 0);
    return SEER_OK;
}

/* Calls handler(msg_type, content, header) -> reply JSON | nil, stop. Returns the reply (a
 * malloc'd copy, or NULL) and sets *stop when queued execute requests must be aborted. */
static char *interpret(kernel_t *k, const char *type, const seer_net_msg_t *m, int *stop) {
    lua_State *L = k->L;
    *stop = 0;
    lua_pushcfunction(L, traceback);
    lua_rawgeti(L, LUA_REGISTRYINDEX, k->handler_ref);
    lua_pushstring(L, type);
    lua_pushlstring(L, m->parts[SEER_NET_CONTENT].data, m->parts[SEER_NET_CONTENT].len);
    lua_pushlstring(L, m->parts[SEER_NET_HEADER].data, m->parts[SEER_NET_HEADER].len);
    char *reply = NULL;
    if (lua_pcall(L, 3, 2, 1) != 0) {
        const char *msg = lua_tostring(L, -1);
        logf_("the interpreter failed on %s: %s", type, msg ? msg : "?");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "status", "error");
        cJSON_AddStringToObject(c, "ename", "KernelError");
        cJSON_AddStringToObject(c, "evalue", msg ? msg : "the interpreter failed");
        cJSON_AddItemToObject(c, "traceback", cJSON_CreateArray());
        reply = cJSON_PrintUnformatted(c);
        cJSON_Delete(c);
    } else {
        size_t n;
        const char *r = lua_tolstring(L, -2, &n);
        if (r) {
            reply = malloc(n + 1);
            if (reply) memcpy(reply, r, n + 1);
        }
        *stop = lua_toboolean(L, -1);
    }
    lua_settop(L, 0);
    return reply;
}

/* ---- the shell loop ---------------------------------------------------------------------------- */

static void handle_shell(kernel_t *k, const seer_net_msg_t *m);

/* After an error with stop_on_error, the requests queued on shell behind the failed one are taken
 * off the socket before its reply is sent (collect_queued), then answered, their execute
 * requests "aborted", before its idle is published (abort_collected). Nothing is read from the
 * socket after the failed request's reply goes out, so a request a client sends once it has
 * that reply, an aborted reply or the idle always runs: deciding later (from a poll after the
 * idle, or polling again after each aborted reply) aborted such a request whenever this process
 * lost the CPU in between (seen under load in CI). What is collected is what ZMQ had already
 * queued, at most SEER_ABORT_MAX requests and SEER_ABORT_MAX_BYTES of them (plus the one that
 * crosses it: a message's size is known once it is read), so a client that keeps sending while
 * they are collected cannot grow this process's memory; past that, or if the list cannot grow,
 * the rest stays on the socket and runs as usual (logged). tests/integration/test_kernel.py
 * (AbortCapTest) reaches both caps. */
#define SEER_ABORT_MAX 4096
#define SEER_ABORT_MAX_BYTES ((size_t)64 << 20)
typedef struct {
    seer_net_msg_t *m;
    size_t n, cap, bytes;
} msg_list;

static size_t msg_bytes(const seer_net_msg_t *m) {
    size_t b = 0;
    for (int i = 0; i < m->nidents; i++) b += m->idents[i].len;
    for (int i = 0; i < SEER_NET_NPARTS; i++) b += m->parts[i].len;
    for (int i = 0; i < m->nbuffers; i++) b += m->buffers[i].len;
    return b;
}

static void collect_queued(kernel_t *k, msg_list *q) {
    for (;;) {
        zmq_pollitem_t it = {.socket = k->shell, .events = ZMQ_POLLIN};
        int r = zmq_poll(&it, 1, 0);
        if (r < 0 && zmq_errno() == EINTR) continue;
        if (r <= 0 || !(it.revents & ZMQ_POLLIN)) return;
        if (q->n == SEER_ABORT_MAX || q->bytes >= SEER_ABORT_MAX_BYTES) {
            logf_("shell: %zu requests (%zu bytes) queued behind a failed one are aborted, at most %d or %zu MiB; "
                  "the ones after them will run",
                  q->n, q->bytes, SEER_ABORT_MAX, SEER_ABORT_MAX_BYTES >> 20);
            return;
        }
        if (q->n == q->cap) {
            size_t cap = q->cap ? 2 * q->cap : 16;
            seer_net_msg_t *g = realloc(q->m, cap * sizeof *g);
            if (!g) {
                logf_("shell: out of memory collecting the requests to abort; %zu collected, the rest will run", q->n);
                return;
            }
            q->m = g, q->cap = cap;
        }
        seer_err_t err;
        r = seer_net_recv(k->shell, k->key, &q->m[q->n], 0, &err);
        if (r == SEER_EINTR) continue;
        if (r == 0) return; /* what was queued was dropped (a bad signature; logged) */
        if (r < 0) {
            logf_("shell: %s", err.msg);
            return;
        }
        q->bytes += msg_bytes(&q->m[q->n]);
        q->n++;
    }
}

static void abort_collected(kernel_t *k, msg_list *q) {
    k->aborting = 1;
    for (size_t i = 0; i < q->n; i++) {
        handle_shell(k, &q->m[i]);
        seer_net_msg_free(&q->m[i]);
    }
    k->aborting = 0;
    free(q->m);
    *q = (msg_list){0};
}

static void handle_shell(kernel_t *k, const seer_net_msg_t *m) {
    char type[128];
    header_type(m, type, sizeof type);
    k->cur = m;
    publish_status(k, &m->parts[SEER_NET_HEADER], "busy");
    if (strcmp(type, "execute_request") == 0 && k->aborting) {
        send_reply(k, k->shell, m, type, "{\"status\":\"aborted\"}", 20);
    } else if (strcmp(type, "kernel_info_request") == 0) {
        send_reply(k, k->shell, m, type, k->kernel_info, strlen(k->kernel_info));
    } else if (strcmp(type, "shutdown_request") == 0) {
        answer_shutdown(k, k->shell, m, type);
    } else {
        /* A request starts with no interrupt pending: one sent while the kernel was idle is not
         * meant for it. */
        if (strcmp(type, "execute_request") == 0) g_pending_interrupt = 0;
        int stop;
        long dropped0 = atomic_load(&k->iopub_dropped);
        char *reply = interpret(k, type, m, &stop);
        msg_list queued = {0};
        if (stop && !k->aborting) collect_queued(k, &queued);
        stream_flush(k);
        long dropped = atomic_load(&k->iopub_dropped) - dropped0;
        char md[96];
        if (dropped > 0) snprintf(md, sizeof md, "{\"seer_iopub_dropped\":%ld}", dropped);
        if (reply) send_reply_md(k, k->shell, m, type, reply, strlen(reply), dropped > 0 ? md : NULL);
        else if (strncmp(type, "comm_", 5) != 0) logf_("ignoring %s", type[0] ? type : "a message without msg_type");
        free(reply);
        if (stop && !k->aborting) {
            stream_flush(k);
            abort_collected(k, &queued);
            k->cur = m;
        }
    }
    stream_flush(k);
    publish_status(k, &m->parts[SEER_NET_HEADER], "idle");
    k->cur = NULL;
}

static int serve(kernel_t *k) {
    publish_status(k, NULL, "starting");
    while (!atomic_load(&k->shutdown)) {
        zmq_pollitem_t it[2] = {{.socket = k->shell, .events = ZMQ_POLLIN}, {.fd = k->wake_fd, .events = ZMQ_POLLIN}};
        int r = zmq_poll(it, 2, -1);
        if (r < 0) {
            if (zmq_errno() == EINTR) continue;
            logf_("shell: poll: %s", zmq_strerror(zmq_errno()));
            return 1;
        }
        if (r == 0 || !it[0].revents) continue;
        seer_net_msg_t m;
        seer_err_t err;
        r = seer_net_recv(k->shell, k->key, &m, 0, &err);
        if (r < 0 && r != SEER_EINTR) {
            logf_("shell: %s", err.msg);
            return 1;
        }
        if (r != 1) continue;
        handle_shell(k, &m);
        seer_net_msg_free(&m);
    }
    return 0;
}

/* ---- last words: output written before the process ends -----------------------------------------
 * A cell that ends the process (os.exit, a library that calls exit(), a segfault, an abort) must
 * not take its last output with it: that line is what tells the user what happened. Two things
 * stood between a write and the client: the stream buffer (sent STREAM_COALESCE_MS after the
 * first write) and ZMQ's queue (zmq_send only hands a message to ZMQ's I/O thread, which exit()
 * stops). So on exit() (on_exit) and on a fatal signal, last_words sends the buffered stream
 * text, closes iopub (ZMQ then delivers what it holds, for up to its linger) and waits until the
 * socket is gone, which iopub's monitor reports (ZMQ_EVENT_MONITOR_STOPPED). After that, iopub_mu
 * and stream_mu stay held: nothing else is published. Armed only while serve() runs, in the
 * process that armed it (not in a forked child). A fatal signal gets FATAL_WAIT_MS in all (an
 * alarm ends the wait if ZMQ or a lock the crash left held would block it), then the process
 * dies of that signal as before, so the client still reports the signal. SIGKILL (the OOM
 * killer) cannot be caught: what it loses is what was written in the last STREAM_COALESCE_MS. */
#define LAST_WORDS_WAIT_MS (CLOSE_LINGER_MS + 200)
#define FATAL_WAIT_S 2

static kernel_t *volatile g_armed;
static pid_t g_armed_pid;
static void *g_iopub_monitor; /* PAIR connected to iopub's monitor */
static atomic_int g_last_words_said;
static volatile sig_atomic_t g_fatal_sig;
static const int fatal_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
static struct sigaction g_fatal_old[sizeof fatal_sigs / sizeof fatal_sigs[0]];
static int g_fatal_installed[sizeof fatal_sigs / sizeof fatal_sigs[0]];

/* Locks mu unless deadline passes first (a crash may have left it held, even by this thread). */
static int lock_by(pthread_mutex_t *mu, long long deadline) {
    while (pthread_mutex_trylock(mu) != 0) {
        if (mono_ms() >= deadline) return -1;
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void last_words(long wait_ms) {
    kernel_t *k = g_armed;
    if (!k || getpid() != g_armed_pid || atomic_exchange(&g_last_words_said, 1)) return;
    long long deadline = mono_ms() + wait_ms;
    /* without stream_mu (held by a thread the crash stopped) what ZMQ holds is still delivered */
    int have_stream = lock_by(&k->stream_mu, deadline) == 0;
    if (lock_by(&k->iopub_mu, deadline) < 0) return;
    /* a subscriber that stopped reading must not hold the exit for IOPUB_WAIT_MS */
    int wait = (int)(wait_ms / 2);
    k->iopub_wait_ms = wait;
    k->iopub_overflow = 0;
    zmq_setsockopt(k->iopub, ZMQ_SNDTIMEO, &wait, sizeof wait);
    pthread_mutex_unlock(&k->iopub_mu);
    if (have_stream) stream_flush_locked(k);
    if (lock_by(&k->iopub_mu, deadline) < 0) return;
    void *iopub = k->iopub;
    k->iopub = NULL;
    zmq_close(iopub);
    if (!g_iopub_monitor) return;
    for (;;) {
        long long left = deadline - mono_ms();
        if (left <= 0) return;
        zmq_pollitem_t it = {.socket = g_iopub_monitor, .events = ZMQ_POLLIN};
        int r = zmq_poll(&it, 1, (long)left);
        if (r < 0 && zmq_errno() == EINTR) continue;
        if (r <= 0) return;
        /* an event is two frames: 2 bytes of event number and 4 of value, then the address */
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, g_iopub_monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            continue;
        }
        uint16_t event = 0;
        if (zmq_msg_size(&ev) >= 2) memcpy(&event, zmq_msg_data(&ev), 2);
        while (zmq_msg_more(&ev)) {
            zmq_msg_close(&ev);
            zmq_msg_init(&ev);
            if (zmq_msg_recv(&ev, g_iopub_monitor, 0) < 0) break;
        }
        zmq_msg_close(&ev);
        if (event == ZMQ_EVENT_MONITOR_STOPPED) return;
    }
}

static void on_exit_hook(int status, void *arg) {
    (void)status, (void)arg;
    last_words(LAST_WORDS_WAIT_MS);
}

/* The fatal signal again, with its default action: the process ends as it would have. */
static void die_of(int sig) {
    signal(sig, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
    raise(sig);
    _exit(128 + sig);
}

static void on_fatal_timeout(int sig) {
    (void)sig;
    die_of(g_fatal_sig);
}

static void on_fatal(int sig) {
    if (!g_fatal_sig) {
        g_fatal_sig = sig;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_timeout;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGALRM, &sa, NULL);
        alarm(FATAL_WAIT_S);
        last_words(FATAL_WAIT_S * 1000L - 100);
    }
    die_of(sig);
}

static void arm_last_words(kernel_t *k) {
    static int hooked;
    if (!hooked && on_exit(on_exit_hook, NULL) == 0) hooked = 1;
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://seer-kernel-iopub-monitor-%d", (int)getpid());
    if (zmq_socket_monitor(k->iopub, ep, ZMQ_EVENT_MONITOR_STOPPED) == 0) {
        g_iopub_monitor = zmq_socket(k->ctx, ZMQ_PAIR);
        int zero = 0;
        if (g_iopub_monitor) zmq_setsockopt(g_iopub_monitor, ZMQ_LINGER, &zero, sizeof zero);
        if (g_iopub_monitor && zmq_connect(g_iopub_monitor, ep) != 0) {
            zmq_close(g_iopub_monitor);
            g_iopub_monitor = NULL;
        }
    }
    /* the main thread runs the cells: a stack overflow in C code there still reaches the handler */
    static char *alt;
    if (!alt && (alt = malloc(256 * 1024))) {
        stack_t st = {.ss_sp = alt, .ss_size = 256 * 1024};
        sigaltstack(&st, NULL);
    }
    for (size_t i = 0; i < sizeof fatal_sigs / sizeof fatal_sigs[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal;
        sigemptyset(&sa.sa_mask);
        /* NODEFER: a second fault inside the handler ends the process (RESETHAND made it default) */
        sa.sa_flags = SA_RESETHAND | SA_NODEFER | SA_ONSTACK;
        /* a handler someone else installed (a sanitizer, a debugger's) is left alone */
        if (sigaction(fatal_sigs[i], NULL, &g_fatal_old[i]) == 0 && g_fatal_old[i].sa_handler == SIG_DFL &&
            !(g_fatal_old[i].sa_flags & SA_SIGINFO))
            g_fatal_installed[i] = sigaction(fatal_sigs[i], &sa, NULL) == 0;
    }
    g_armed_pid = getpid();
    g_armed = k;
}

static void disarm_last_words(kernel_t *k) {
    g_armed = NULL;
    for (size_t i = 0; i < sizeof fatal_sigs / sizeof fatal_sigs[0]; i++)
        if (g_fatal_installed[i]) sigaction(fatal_sigs[i], &g_fatal_old[i], NULL), g_fatal_installed[i] = 0;
    if (g_iopub_monitor) {
        zmq_socket_monitor(k->iopub, NULL, 0);
        zmq_close(g_iopub_monitor);
        g_iopub_monitor = NULL;
    }
}

/* ---- start-up and teardown --------------------------------------------------------------------- */

typedef struct conn {
    char transport[16], ip[256], key[512], scheme[64];
    int ports[5]; /* shell, iopub, stdin, control, hb */
} conn_t;

static const char *const port_names[5] = {"shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"};

static int read_connection(const char *path, conn_t *c, seer_err_t *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return seer_err_set(err, SEER_EIO, "cannot read the connection file %s: %s", path, strerror(errno));
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return seer_err_set(err, SEER_EPARSE, "%s is not a JSON object (a Jupyter connection file)", path);
    }
    memset(c, 0, sizeof *c);
    const struct {
        const char *name;
        char *out;
        size_t cap;
        const char *dflt;
    } strs[] = {{"transport", c->transport, sizeof c->transport, "tcp"},
                {"ip", c->ip, sizeof c->ip, "127.0.0.1"},
                {"key", c->key, sizeof c->key, ""},
                {"signature_scheme", c->scheme, sizeof c->scheme, "hmac-sha256"}};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, strs[i].name);
        if (v && !cJSON_IsString(v)) {
            cJSON_Delete(j);
            return seer_err_set(err, SEER_EPARSE, "%s: \"%s\" must be a string", path, strs[i].name);
        }
        const char *s = v ? v->valuestring : strs[i].dflt;
        if (strlen(s) >= strs[i].cap) {
            cJSON_Delete(j);
            return seer_err_set(err, SEER_EPARSE, "%s: \"%s\" is too long", path, strs[i].name);
        }
        snprintf(strs[i].out, strs[i].cap, "%s", s);
    }
    for (int i = 0; i < 5; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, port_names[i]);
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 65535) {
            cJSON_Delete(j);
            return seer_err_set(err, SEER_EPARSE, "%s: \"%s\" must be a port number", path, port_names[i]);
        }
        c->ports[i] = (int)v->valuedouble;
    }
    cJSON_Delete(j);
    if (strcmp(c->scheme, "hmac-sha256") != 0)
        return seer_err_set(err, SEER_EINVAL, "%s: signature_scheme \"%s\" is not supported (only hmac-sha256)", path,
                            c->scheme);
    if (strcmp(c->transport, "tcp") != 0 && strcmp(c->transport, "ipc") != 0)
        return seer_err_set(err, SEER_EINVAL, "%s: transport \"%s\" is not supported (tcp or ipc)", path, c->transport);
    return SEER_OK;
}

static void *open_socket(kernel_t *k, int type, conn_t *c, int which, seer_err_t *err) {
    void *s = zmq_socket(k->ctx, type);
    if (!s) {
        seer_err_set(err, SEER_EIO, "zmq socket: %s", zmq_strerror(zmq_errno()));
        return NULL;
    }
    int linger = CLOSE_LINGER_MS, one = 1;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (type == ZMQ_ROUTER) zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    /* iopub: a subscriber that reads slowly makes the publisher wait instead of losing messages
     * (a PUB socket drops silently at its high-water mark). */
    if (type == ZMQ_PUB) {
        zmq_setsockopt(s, ZMQ_XPUB_NODROP, &one, sizeof one);
        const char *w = getenv("SEER_KERNEL_IOPUB_WAIT_MS");
        k->iopub_wait_ms = w && *w ? atoi(w) : IOPUB_WAIT_MS;
        if (k->iopub_wait_ms > 0) zmq_setsockopt(s, ZMQ_SNDTIMEO, &k->iopub_wait_ms, sizeof k->iopub_wait_ms);
    }
    char ep[320];
    if (strcmp(c->transport, "ipc") == 0) snprintf(ep, sizeof ep, "ipc://%s-%d", c->ip, c->ports[which]);
    else if (c->ports[which] == 0) snprintf(ep, sizeof ep, "tcp://%s:*", c->ip);
    else snprintf(ep, sizeof ep, "tcp://%s:%d", c->ip, c->ports[which]);
    if (zmq_bind(s, ep) != 0) {
        seer_err_set(err, SEER_EIO, "cannot bind the %s (%s): %s", port_names[which], ep, zmq_strerror(zmq_errno()));
        zmq_close(s);
        return NULL;
    }
    if (c->ports[which] == 0) {
        char last[320];
        size_t n = sizeof last;
        const char *colon = zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, last, &n) == 0 ? strrchr(last, ':') : NULL;
        if (colon) c->ports[which] = atoi(colon + 1);
    }
    return s;
}

/* Port 0 in the connection file means "pick one": the ports actually bound are written back
 * (atomically) so the client that reads the file after the kernel started finds them. */
static int write_back_ports(const char *path, const conn_t *c, seer_err_t *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return seer_err_set(err, SEER_EIO, "cannot reread %s: %s", path, strerror(errno));
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    if (!j) return seer_err_set(err, SEER_EPARSE, "%s changed while the kernel started", path);
    for (int i = 0; i < 5; i++) cJSON_ReplaceItemInObjectCaseSensitive(j, port_names[i], cJSON_CreateNumber(c->ports[i]));
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int rc = seer_host_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

/* If the parent dies (a killed notebook server), so does the kernel: no orphans holding a
 * model in memory. getppid after prctl covers a parent that died before it. */
static void die_with_parent(void) {
    const char *v = getenv("SEER_KERNEL_DIE_WITH_PARENT");
    if (!v || strcmp(v, "1") != 0) return;
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent || parent == 1) {
        logf_("the parent process is gone (SEER_KERNEL_DIE_WITH_PARENT=1); exiting");
        _exit(1);
    }
}

/* JPY_PARENT_PID (what jupyter_client sets for the kernels it launches, as ipykernel reads it):
 * the kernel exits when that process ends, whether or not it is the direct parent (a launcher
 * script in between, nbconvert's process, jupyter console). A pidfd made at start-up names
 * exactly that process (no pid reuse); a thread waits on it. SEER_KERNEL_DETACH=1 keeps the
 * kernel running without it. */
static pid_t g_watch_pid;
static int g_watch_fd = -1;

static void *parent_watch_main(void *arg) {
    (void)arg;
    for (;;) {
        if (g_watch_fd >= 0) {
            struct pollfd p = {.fd = g_watch_fd, .events = POLLIN};
            int r = poll(&p, 1, -1);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) break;
        } else {
            /* no pidfd (Linux before 5.3): look every 200 ms */
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
            if (kill(g_watch_pid, 0) == 0 || errno == EPERM) continue;
        }
        logf_("the process that launched this kernel (JPY_PARENT_PID=%d) has ended; exiting", (int)g_watch_pid);
        fflush(stderr);
        _exit(1);
    }
    return NULL;
}

static int watch_launcher(void) {
    const char *v = getenv("JPY_PARENT_PID");
    const char *detach = getenv("SEER_KERNEL_DETACH");
    if (!v || !*v || (detach && strcmp(detach, "1") == 0)) return 0;
    char *end;
    long pid = strtol(v, &end, 10);
    if (*end || pid <= 1 || pid > 0x3fffffff) {
        logf_("JPY_PARENT_PID=%s is not a process id; not watching it", v);
        return 0;
    }
    g_watch_pid = (pid_t)pid;
    g_watch_fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (g_watch_fd < 0 && errno != ENOSYS) {
        if (errno == ESRCH) {
            logf_("the process that launched this kernel (JPY_PARENT_PID=%ld) has already ended; exiting", pid);
            return -1;
        }
        g_watch_fd = -1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, parent_watch_main, NULL) != 0) {
        logf_("cannot start the thread that watches JPY_PARENT_PID");
        return 0;
    }
    pthread_detach(t);
    return 0;
}

static void close_socket(void **s) {
    if (*s) zmq_close(*s);
    *s = NULL;
}

static int run_kernel(const char *conn_path) {
    die_with_parent();
    kernel_t kk;
    kernel_t *k = &kk;
    memset(k, 0, sizeof *k);
    k->stop_fd = k->wake_fd = -1;
    k->main_tid = pthread_self();
    pthread_mutex_init(&k->iopub_mu, NULL);
    pthread_mutex_init(&k->stream_mu, NULL);
    pthread_mutex_init(&k->done_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->stream_cv, &ca);
    pthread_cond_init(&k->done_cv, &ca);
    pthread_condattr_destroy(&ca);

    /* Threads inherit the signal mask: block SIGINT before ZMQ or any thread starts, so only
     * the main thread (unblocked below) ever runs the handler. */
    sigset_t intr, old;
    sigemptyset(&intr);
    sigaddset(&intr, SIGINT);
    pthread_sigmask(SIG_BLOCK, &intr, &old);
    if (watch_launcher() < 0) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint_idle;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);

    int status = 1;
    seer_err_t err;
    conn_t c;
    if (read_connection(conn_path, &c, &err) < 0) {
        logf_("%s", err.msg);
        goto out;
    }
    int any_zero = 0;
    for (int i = 0; i < 5; i++) any_zero |= strcmp(c.transport, "tcp") == 0 && c.ports[i] == 0;
    if (seer_net_key_new(&k->key, c.key, strlen(c.key), &err) < 0 || seer_net_uuid(k->session, &err) < 0) {
        logf_("%s", err.msg);
        goto out;
    }
    const char *user = getenv("USER");
    snprintf(k->username, sizeof k->username, "%s", user && *user ? user : "kernel");
    k->ctx = seer_net_context(&err);
    if (!k->ctx) {
        logf_("%s", err.msg);
        goto out;
    }
    k->stop_fd = eventfd(0, EFD_CLOEXEC);
    k->wake_fd = eventfd(0, EFD_CLOEXEC);
    if (k->stop_fd < 0 || k->wake_fd < 0) {
        logf_("eventfd: %s", strerror(errno));
        goto out;
    }
    if (!(k->shell = open_socket(k, ZMQ_ROUTER, &c, 0, &err)) || !(k->iopub = open_socket(k, ZMQ_PUB, &c, 1, &err)) ||
        !(k->stdin_sock = open_socket(k, ZMQ_ROUTER, &c, 2, &err)) ||
        !(k->control = open_socket(k, ZMQ_ROUTER, &c, 3, &err)) || !(k->hb = open_socket(k, ZMQ_REP, &c, 4, &err))) {
        logf_("%s", err.msg);
        goto out;
    }
    if (any_zero && write_back_ports(conn_path, &c, &err) < 0) {
        logf_("%s", err.msg);
        goto out;
    }
    /* The heartbeat answers from the first moment, even while the interpreter loads. */
    if (pthread_create(&k->hb_tid, NULL, hb_main, k) != 0) {
        logf_("cannot start the heartbeat thread");
        goto out;
    }
    k->hb_started = 1;

    seer_host_opts_t opts = {.progname = "seer"};
    if (seer_host_open(&k->host, &opts, &err) < 0) {
        logf_("%s", err.msg);
        goto out;
    }
    k->L = seer_host_lua(k->host);
    if (interpreter_open(k, &err) < 0) {
        logf_("%s", err.msg);
        goto out;
    }
    {
        seer_net_msg_t info = {0};
        info.parts[SEER_NET_CONTENT] = empty_obj;
        info.parts[SEER_NET_HEADER] = empty_obj;
        int stop;
        k->kernel_info = interpret(k, "kernel_info_request", &info, &stop);
        if (!k->kernel_info) {
            logf_("the interpreter gave no kernel_info");
            goto out;
        }
    }
    if (pthread_create(&k->flush_tid, NULL, flush_main, k) != 0) {
        logf_("cannot start the output thread");
        goto out;
    }
    k->flush_started = 1;
    if (pthread_create(&k->control_tid, NULL, control_main, k) != 0) {
        logf_("cannot start the control thread");
        goto out;
    }
    k->control_started = 1;
    arm_last_words(k);
    pthread_sigmask(SIG_UNBLOCK, &intr, NULL);
    status = serve(k);
    pthread_sigmask(SIG_BLOCK, &intr, NULL);
    disarm_last_words(k);

out:
    pthread_mutex_lock(&k->done_mu);
    k->main_done = 1;
    pthread_cond_broadcast(&k->done_cv);
    pthread_mutex_unlock(&k->done_mu);
    if (k->stop_fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(k->stop_fd, &one, sizeof one);
        (void)w;
    }
    if (k->control_started) pthread_join(k->control_tid, NULL);
    if (k->hb_started) pthread_join(k->hb_tid, NULL);
    if (k->flush_started) {
        pthread_mutex_lock(&k->stream_mu);
        k->stream_stop = 1;
        pthread_cond_signal(&k->stream_cv);
        pthread_mutex_unlock(&k->stream_mu);
        pthread_join(k->flush_tid, NULL);
    }
    close_socket(&k->control);
    close_socket(&k->hb);
    close_socket(&k->shell);
    close_socket(&k->stdin_sock);
    close_socket(&k->iopub);
    if (k->host) {
        if (k->handler_ref) luaL_unref(k->L, LUA_REGISTRYINDEX, k->handler_ref);
        seer_host_close(k->host); /* closes any socket user code left open */
    }
    if (k->ctx) zmq_ctx_term(k->ctx);
    free(k->kernel_info);
    seer_net_buf_free(&k->stream_text);
    seer_net_buf_free(&k->stream_parent);
    seer_net_key_free(k->key);
    if (k->stop_fd >= 0) close(k->stop_fd);
    if (k->wake_fd >= 0) close(k->wake_fd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return status;
}

int seer_kernel_main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "install") == 0) return seer_kernel_install(argc - 1, argv + 1);
    const char *conn = NULL;
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--connection-file") == 0) && i + 1 < argc) conn = argv[++i];
        else if (strncmp(argv[i], "--f=", 4) == 0) conn = argv[i] + 4;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs("usage: seer kernel -f CONNECTION_FILE\n"
                  "       seer kernel install [--user | --prefix PREFIX] [--name NAME] [--display-name TEXT]\n"
                  "                           [--interrupt-mode signal|message]\n\n"
                  "The first form is what Jupyter runs (the kernelspec's argv); the second writes kernel.json\n"
                  "so JupyterLab, nbclient and jupyter_client find the kernel (seer kernel install --help).\n",
                  stdout);
            return 0;
        } else {
            fprintf(stderr, "seer kernel: unexpected argument '%s'\nusage: seer kernel -f CONNECTION_FILE\n", argv[i]);
            return 2;
        }
    }
    if (!conn) {
        fprintf(stderr, "seer kernel: missing -f CONNECTION_FILE (Jupyter passes it; see seer kernel install)\n");
        return 2;
    }
    return run_kernel(conn);
}
