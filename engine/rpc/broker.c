/* The broker of `seer rpc serve --workers N`: N worker processes (`seer rpc serve --worker`),
 * each loading the interface in its own Lua state, behind the endpoint clients know. Clients
 * cannot tell it from a single server: the broker checks signatures, replays and dates, answers
 * hello and shutdown itself, and hands each call to an idle worker (or queues it), frames moving
 * through untouched (the worker signs its reply; the broker forwards it as it is).
 *
 * Cancels arrive on the broker's control socket: a queued call is answered "cancelled" at once,
 * a running one is passed to its worker's watchdog (each worker has its own). Deadlines are the
 * workers' (they start when the call starts, as in a single server). A worker that dies is seen
 * at once (a pidfd, else waitpid every 100 ms): the call it was running is answered with kind
 * "crashed" and how the process ended, and a new worker takes the slot; a worker that cannot be
 * replaced (its interface fails to load, or it dies while loading) stops the pool, loudly. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "host/host.h"
#include "rpc.h"

extern char **environ;

#define MAX_WORKERS 256
#define CANCEL_MEMORY 64
#define ID_MAX 128

enum { W_STARTING, W_IDLE, W_BUSY, W_DEAD };

typedef struct call {
    seer_rpc_msg_t msg; /* the request as received, until it goes to a worker */
    seer_rpc_msg_t keep; /* copies (shared, not duplicated) of its routing ids and header */
    char id[ID_MAX];
    char fn[128];
    struct call *next;
} call_t;

typedef struct {
    int slot; /* 1-based */
    pid_t pid;
    int pidfd; /* -1: none */
    int state;
    int generation;
    int ever_ready;
    char rid[256]; /* its routing id on the backend, from its first message */
    size_t rid_len;
    void *ctl; /* DEALER to its watchdog, for cancels */
    call_t *call;
} worker_t;

struct seer_rpc_broker {
    seer_rpc_broker_opts_t o;
    char **argv; /* the worker command line, owned */
    int argc;
    void *front, *back, *control;
    char front_ep[512], back_ep[512], control_ep[512];
    seer_net_key_t *key;
    seer_rpc_guard_t *guard;
    seer_rpc_hm_t hm;
    worker_t w[MAX_WORKERS];
    int nready_initial; /* workers that reported ready once */
    call_t *queue, *queue_tail;
    call_t *hellos; /* hello requests waiting for the pool */
    cJSON *hello;   /* the workers' hello content (functions, warnings) */
    int load_failed; /* the hello content is a load error */
    char load_error[1024];
    char cancelled[CANCEL_MEMORY][ID_MAX];
    int next_cancelled;
    int stopping;
    int exit_code;
    long long last_activity_ms;
};

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *socket_of(void *ctx, int type, seer_err_t *err) {
    void *s = zmq_socket(ctx, type);
    if (!s) {
        seer_err_set(err, SEER_EIO, "rpc pool: cannot create a socket: %s", zmq_strerror(zmq_errno()));
        return NULL;
    }
    int zero = 0, one = 1;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (type == ZMQ_ROUTER) zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    return s;
}

static int bind_to(void *s, const char *ep, char *bound, size_t cap, seer_err_t *err) {
    if (zmq_bind(s, ep) != 0)
        return seer_err_set(err, SEER_EIO, "rpc pool: cannot bind %s: %s", ep, zmq_strerror(zmq_errno()));
    size_t len = cap;
    if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, bound, &len) != 0) snprintf(bound, cap, "%s", ep);
    return SEER_OK;
}

int seer_rpc_broker_new(seer_rpc_broker_t **out, const seer_rpc_broker_opts_t *o, seer_err_t *err) {
    *out = NULL;
    if (o->workers < 1 || o->workers > MAX_WORKERS)
        return seer_err_set(err, SEER_EINVAL, "rpc pool: workers must be 1 to %d, not %d", MAX_WORKERS, o->workers);
    if (o->key_len == 0) return seer_err_set(err, SEER_EINVAL, "rpc pool: the key is empty; RPC messages must be signed");
    void *ctx = seer_net_context(err);
    if (!ctx) return SEER_EIO;
    seer_rpc_broker_t *b = calloc(1, sizeof *b);
    if (!b) return seer_err_set(err, SEER_ENOMEM, "rpc pool: out of memory");
    b->o = *o;
    b->o.name = strdup(o->name ? o->name : "seer rpc");
    b->o.key = NULL;
    int rc = SEER_OK;
    if (!b->o.name) rc = seer_err_set(err, SEER_ENOMEM, "rpc pool: out of memory");
    if (rc == SEER_OK) rc = seer_net_key_new(&b->key, o->key, o->key_len, err);
    if (rc == SEER_OK && !(b->guard = seer_rpc_guard_new(600)))
        rc = seer_err_set(err, SEER_ENOMEM, "rpc pool: out of memory");
    if (rc == SEER_OK) rc = seer_rpc_hm_init(&b->hm, err);
    if (rc == SEER_OK && (!(b->front = socket_of(ctx, ZMQ_ROUTER, err)) || !(b->back = socket_of(ctx, ZMQ_ROUTER, err)) ||
                          !(b->control = socket_of(ctx, ZMQ_ROUTER, err))))
        rc = SEER_EIO;
    if (rc == SEER_OK) rc = bind_to(b->front, o->frontend, b->front_ep, sizeof b->front_ep, err);
    if (rc == SEER_OK) rc = bind_to(b->control, o->control, b->control_ep, sizeof b->control_ep, err);
    if (rc == SEER_OK) rc = bind_to(b->back, o->backend, b->back_ep, sizeof b->back_ep, err);
    for (int i = 0; i < MAX_WORKERS; i++) b->w[i].pidfd = -1;
    if (rc < 0) {
        seer_rpc_broker_free(b);
        return rc;
    }
    b->last_activity_ms = now_ms();
    *out = b;
    return SEER_OK;
}

const char *seer_rpc_broker_endpoint(const seer_rpc_broker_t *b, int which) {
    return which == SEER_RPC_BROKER_FRONTEND ? b->front_ep : which == SEER_RPC_BROKER_CONTROL ? b->control_ep : b->back_ep;
}

static void call_free(call_t *c) {
    if (!c) return;
    seer_rpc_msg_free(&c->msg);
    seer_rpc_msg_free(&c->keep);
    free(c);
}

static void calls_free(call_t *c) {
    while (c) {
        call_t *n = c->next;
        call_free(c);
        c = n;
    }
}

void seer_rpc_broker_free(seer_rpc_broker_t *b) {
    if (!b) return;
    for (int i = 0; i < b->o.workers; i++) {
        worker_t *w = &b->w[i];
        if (w->ctl) zmq_close(w->ctl);
        if (w->pidfd >= 0) close(w->pidfd);
        call_free(w->call);
    }
    calls_free(b->queue);
    calls_free(b->hellos);
    cJSON_Delete(b->hello);
    if (b->front) zmq_close(b->front);
    if (b->back) zmq_close(b->back);
    if (b->control) zmq_close(b->control);
    seer_net_key_free(b->key);
    seer_rpc_guard_free(b->guard);
    for (int i = 0; b->argv && i < b->argc; i++) free(b->argv[i]);
    free(b->argv);
    free((char *)b->o.name);
    free(b);
}

/* ---- replies from the broker itself -------------------------------------------------------------- */

/* Sends content to the client of request m: m's routing ids (frames [0, delim), moved) and, as
 * the parent header, m's header. */
static void reply(seer_rpc_broker_t *b, seer_rpc_msg_t *m, const char *type, const char *content) {
    char header[512], id[96];
    int hn = seer_rpc_header(&b->hm, header, sizeof header, type, id, sizeof id);
    if (hn < 0) return;
    seer_net_frame_t parts[SEER_NET_NPARTS] = {{header, (size_t)hn},
                                               seer_rpc_frame(m, m->delim + 2 + SEER_NET_HEADER),
                                               {"{}", 2},
                                               {content, strlen(content)}};
    seer_err_t err;
    if (seer_rpc_send(b->front, b->key, m, 0, m->delim, parts, NULL, 0, &err) < 0)
        seer_rpc_log(b->o.name, "cannot send a reply: %s", err.msg);
}

/* {"id", "ok": false, "kind", "error", "traceback"?} */
static void reply_error(seer_rpc_broker_t *b, seer_rpc_msg_t *m, const char *id, const char *kind, const char *error,
                        const char *traceback) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddFalseToObject(o, "ok");
    cJSON_AddStringToObject(o, "kind", kind);
    cJSON_AddStringToObject(o, "error", error);
    if (traceback) cJSON_AddStringToObject(o, "traceback", traceback);
    char *text = cJSON_PrintUnformatted(o);
    if (text) reply(b, m, "rpc_call_reply", text);
    cJSON_free(text);
    cJSON_Delete(o);
}

/* The call's routing ids and header again (the originals went to a worker). */
static seer_rpc_msg_t *kept(call_t *c) { return &c->keep; }

static void hello_reply(seer_rpc_broker_t *b, seer_rpc_msg_t *m, const char *id) {
    cJSON *o = cJSON_Duplicate(b->hello, 1);
    if (!o) return;
    cJSON_DeleteItemFromObjectCaseSensitive(o, "control_endpoint");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "slot");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "id");
    cJSON_AddStringToObject(o, "id", id);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "pid");
    cJSON_AddNumberToObject(o, "pid", (double)getpid());
    cJSON_DeleteItemFromObjectCaseSensitive(o, "workers");
    cJSON_AddNumberToObject(o, "workers", b->o.workers);
    char *text = cJSON_PrintUnformatted(o);
    if (text) reply(b, m, "rpc_hello_reply", text);
    cJSON_free(text);
    cJSON_Delete(o);
}

/* ---- workers ------------------------------------------------------------------------------------- */

static const char *signame(int sig, char *buf, size_t cap) {
    static const struct {
        int sig;
        const char *name;
    } names[] = {{SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGABRT, "SIGABRT"}, {SIGKILL, "SIGKILL"},
                 {SIGSEGV, "SIGSEGV"}, {SIGPIPE, "SIGPIPE"}, {SIGTERM, "SIGTERM"}, {SIGBUS, "SIGBUS"},
                 {SIGFPE, "SIGFPE"},   {SIGILL, "SIGILL"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig) return names[i].name;
    snprintf(buf, cap, "signal %d", sig);
    return buf;
}

static void describe_exit(int status, char *out, size_t cap) {
    char sb[32];
    if (WIFEXITED(status)) snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) snprintf(out, cap, "was killed by %s", signame(WTERMSIG(status), sb, sizeof sb));
    else snprintf(out, cap, "ended");
}

static int spawn_worker(seer_rpc_broker_t *b, worker_t *w, seer_err_t *err) {
    char slot[16];
    snprintf(slot, sizeof slot, "%d", w->slot);
    b->argv[b->argc] = "--worker-slot";
    b->argv[b->argc + 1] = slot;
    b->argv[b->argc + 2] = NULL;
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    int sigs[] = {SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(&defaults, sigs[i]);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int rc = posix_spawn(&pid, b->argv[0], NULL, &attr, b->argv, environ);
    posix_spawnattr_destroy(&attr);
    b->argv[b->argc] = NULL;
    if (rc != 0) return seer_err_set(err, SEER_EIO, "rpc pool: cannot start worker %d (%s): %s", w->slot, b->argv[0], strerror(rc));
    w->pid = pid;
    w->state = W_STARTING;
    w->generation++;
    w->rid_len = 0;
    if (w->ctl) zmq_close(w->ctl);
    w->ctl = NULL;
#ifdef SYS_pidfd_open
    w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#else
    w->pidfd = -1;
#endif
    return SEER_OK;
}

/* Answers every queued call and waiting hello with an error (the pool stops). */
static void fail_all(seer_rpc_broker_t *b, const char *why) {
    for (int i = 0; i < b->o.workers; i++) {
        worker_t *w = &b->w[i];
        if (w->call) {
            reply_error(b, kept(w->call), w->call->id, "crashed", why, NULL);
            call_free(w->call);
            w->call = NULL;
        }
    }
    while (b->queue) {
        call_t *c = b->queue;
        b->queue = c->next;
        reply_error(b, &c->msg, c->id, "crashed", why, NULL);
        call_free(c);
    }
    b->queue_tail = NULL;
    calls_free(b->hellos);
    b->hellos = NULL;
}

static void stop_workers(seer_rpc_broker_t *b) {
    for (int i = 0; i < b->o.workers; i++)
        if (b->w[i].pid > 0 && b->w[i].state != W_DEAD) kill(b->w[i].pid, SIGTERM);
    long long deadline = now_ms() + 2000;
    for (int i = 0; i < b->o.workers; i++) {
        worker_t *w = &b->w[i];
        if (w->pid <= 0 || w->state == W_DEAD) continue;
        int status;
        while (waitpid(w->pid, &status, WNOHANG) == 0) {
            if (now_ms() > deadline) {
                /* then 2 s more at most: a worker in an uninterruptible sleep ignores SIGKILL
                 * until it leaves it, and is left unreaped rather than waited for forever */
                kill(w->pid, SIGKILL);
                for (int k = 0; k < 400 && waitpid(w->pid, &status, WNOHANG) == 0; k++) usleep(5000);
                break;
            }
            usleep(5000);
        }
        w->state = W_DEAD;
    }
}

/* A worker ended (status from waitpid). */
static void worker_ended(seer_rpc_broker_t *b, worker_t *w, int status) {
    char how[64], msg[512];
    describe_exit(status, how, sizeof how);
    if (w->pidfd >= 0) close(w->pidfd);
    w->pidfd = -1;
    int was = w->state;
    w->state = W_DEAD;
    if (b->stopping || b->load_failed) return;
    if (was == W_STARTING) {
        /* it never got the interface loaded: a pool that cannot have its workers stops */
        snprintf(msg, sizeof msg, "worker %d (pid %d) %s while loading the interface%s", w->slot, (int)w->pid, how,
                 w->generation > 1 ? "; it replaced a worker that had ended, and the pool cannot go on without it"
                                   : "");
        seer_rpc_log(b->o.name, "%s; stopping", msg);
        fail_all(b, msg);
        b->stopping = 1;
        b->exit_code = 1;
        return;
    }
    if (w->call) {
        snprintf(msg, sizeof msg, "%s: the worker process running it (pid %d) %s", w->call->fn, (int)w->pid, how);
        seer_rpc_log(b->o.name, "call %s", msg);
        reply_error(b, kept(w->call), w->call->id, "crashed", msg, NULL);
        call_free(w->call);
        w->call = NULL;
    } else {
        seer_rpc_log(b->o.name, "worker %d (pid %d) %s while idle", w->slot, (int)w->pid, how);
    }
    seer_err_t err;
    if (spawn_worker(b, w, &err) < 0) {
        seer_rpc_log(b->o.name, "%s; stopping", err.msg);
        fail_all(b, err.msg);
        b->stopping = 1;
        b->exit_code = 1;
        return;
    }
    seer_rpc_log(b->o.name, "worker %d replaced (pid %d), loading the interface", w->slot, (int)w->pid);
}

static void check_workers(seer_rpc_broker_t *b, int all) {
    for (int i = 0; i < b->o.workers; i++) {
        worker_t *w = &b->w[i];
        if (w->state == W_DEAD || (!all && w->pidfd >= 0)) continue;
        int status;
        if (waitpid(w->pid, &status, WNOHANG) == w->pid) worker_ended(b, w, status);
    }
}

/* Hands queued calls to idle workers. */
static void dispatch(seer_rpc_broker_t *b) {
    for (int i = 0; i < b->o.workers && b->queue; i++) {
        worker_t *w = &b->w[i];
        if (w->state != W_IDLE) continue;
        call_t *c = b->queue;
        b->queue = c->next;
        if (!b->queue) b->queue_tail = NULL;
        c->next = NULL;
        seer_err_t err;
        if (seer_rpc_forward(b->back, &c->msg, 0, w->rid, w->rid_len, &err) < 0) {
            seer_rpc_log(b->o.name, "cannot pass call %s to worker %d: %s", c->fn, w->slot, err.msg);
            reply_error(b, kept(c), c->id, "crashed", err.msg, NULL);
            call_free(c);
            continue;
        }
        seer_rpc_msg_clear(&c->msg);
        w->call = c;
        w->state = W_BUSY;
    }
}

/* ---- messages ------------------------------------------------------------------------------------ */

static void copy_str(char *dst, size_t cap, seer_rpc_str_t s) {
    size_t n = s.p ? (s.n < cap - 1 ? s.n : cap - 1) : 0;
    if (n) memcpy(dst, s.p, n);
    dst[n] = 0;
}

static int was_cancelled(seer_rpc_broker_t *b, const char *id) {
    for (int i = 0; i < CANCEL_MEMORY; i++)
        if (strcmp(b->cancelled[i], id) == 0) {
            b->cancelled[i][0] = 0;
            return 1;
        }
    return 0;
}

static void on_front(seer_rpc_broker_t *b, seer_rpc_msg_t *m) {
    int base = m->delim + 2;
    seer_net_frame_t h = seer_rpc_frame(m, base + SEER_NET_HEADER);
    static const char *const keys[] = {"msg_type", "msg_id", "date"};
    seer_rpc_str_t v[3];
    const char *why = NULL;
    if (seer_rpc_json_fields(h.data, h.len, keys, v, 3) < 0 || !v[0].p) why = "an unreadable header";
    else why = seer_rpc_guard_check(b->guard, v[1], v[2]);
    if (why) {
        seer_rpc_log(b->o.name, "dropped a signed message with %s", why);
        return;
    }
    b->last_activity_ms = now_ms();
    char id[ID_MAX];
    copy_str(id, sizeof id, v[1]);
    if (seer_rpc_str_eq(v[0], "rpc_call_request")) {
        call_t *c = calloc(1, sizeof *c);
        if (!c) return;
        c->msg = *m;
        memset(m, 0, sizeof *m);
        snprintf(c->id, sizeof c->id, "%s", id);
        seer_net_frame_t content = seer_rpc_frame(&c->msg, base + SEER_NET_CONTENT);
        static const char *const fk[] = {"fn"};
        seer_rpc_str_t fn;
        seer_rpc_json_fields(content.data, content.len, fk, &fn, 1);
        copy_str(c->fn, sizeof c->fn, fn);
        if (!c->fn[0]) snprintf(c->fn, sizeof c->fn, "the call");
        /* its routing ids and header, for answering it from here once the originals moved on */
        c->keep.cap = c->msg.delim + 3;
        c->keep.f = calloc((size_t)c->keep.cap, sizeof(zmq_msg_t));
        if (!c->keep.f) {
            call_free(c);
            return;
        }
        for (int i = 0; i < c->msg.delim; i++) {
            zmq_msg_init(&c->keep.f[i]);
            zmq_msg_copy(&c->keep.f[i], &c->msg.f[i]);
        }
        c->keep.delim = c->msg.delim;
        for (int i = 0; i < 2; i++) zmq_msg_init_size(&c->keep.f[c->keep.delim + i], 0);
        zmq_msg_init(&c->keep.f[c->keep.delim + 2]);
        zmq_msg_copy(&c->keep.f[c->keep.delim + 2], &c->msg.f[base + SEER_NET_HEADER]);
        c->keep.n = c->keep.delim + 3;
        if (b->load_failed) {
            char msg[1200];
            snprintf(msg, sizeof msg, "the interface failed to load: %s", b->load_error);
            cJSON *tb = cJSON_GetObjectItemCaseSensitive(b->hello, "traceback");
            reply_error(b, &c->msg, c->id, "load_error", msg, cJSON_IsString(tb) ? tb->valuestring : NULL);
            call_free(c);
        } else if (was_cancelled(b, c->id)) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s was cancelled before it started", c->fn);
            reply_error(b, &c->msg, c->id, "cancelled", msg, NULL);
            call_free(c);
        } else {
            if (b->queue_tail) b->queue_tail->next = c;
            else b->queue = c;
            b->queue_tail = c;
            dispatch(b);
        }
    } else if (seer_rpc_str_eq(v[0], "rpc_hello_request")) {
        if (b->hello && (b->load_failed || b->nready_initial == b->o.workers)) {
            hello_reply(b, m, id);
        } else {
            call_t *c = calloc(1, sizeof *c);
            if (!c) return;
            c->msg = *m;
            memset(m, 0, sizeof *m);
            snprintf(c->id, sizeof c->id, "%s", id);
            c->next = b->hellos;
            b->hellos = c;
        }
    } else if (seer_rpc_str_eq(v[0], "rpc_shutdown_request")) {
        reply(b, m, "rpc_shutdown_reply", "{\"ok\":true}");
        seer_rpc_log(b->o.name, "shutdown requested");
        b->stopping = 1;
    } else {
        char type[64], msg[160];
        copy_str(type, sizeof type, v[0]);
        snprintf(msg, sizeof msg, "unknown message type %s", type);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddFalseToObject(o, "ok");
        cJSON_AddStringToObject(o, "kind", "bad_request");
        cJSON_AddStringToObject(o, "error", msg);
        char *text = cJSON_PrintUnformatted(o);
        if (text) reply(b, m, "rpc_error_reply", text);
        cJSON_free(text);
        cJSON_Delete(o);
    }
}

static void answer_hellos(seer_rpc_broker_t *b) {
    while (b->hellos) {
        call_t *c = b->hellos;
        b->hellos = c->next;
        hello_reply(b, &c->msg, c->id);
        call_free(c);
    }
}

static void on_ready(seer_rpc_broker_t *b, seer_rpc_msg_t *m) {
    seer_net_frame_t content = seer_rpc_frame(m, m->delim + 2 + SEER_NET_CONTENT);
    cJSON *o = cJSON_ParseWithLength(content.data, content.len);
    const cJSON *slot = cJSON_GetObjectItemCaseSensitive(o, "slot");
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(o, "pid");
    const cJSON *ctl = cJSON_GetObjectItemCaseSensitive(o, "control_endpoint");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(o, "status");
    worker_t *w = NULL;
    if (cJSON_IsNumber(slot) && slot->valueint >= 1 && slot->valueint <= b->o.workers) w = &b->w[slot->valueint - 1];
    if (!w || !cJSON_IsNumber(pid) || (pid_t)pid->valuedouble != w->pid || w->state != W_STARTING) {
        seer_rpc_log(b->o.name, "ignored a ready message from no worker it started");
        cJSON_Delete(o);
        return;
    }
    seer_net_frame_t rid = seer_rpc_frame(m, 0);
    if (m->delim != 1 || rid.len == 0 || rid.len > sizeof w->rid) {
        cJSON_Delete(o);
        return;
    }
    memcpy(w->rid, rid.data, rid.len);
    w->rid_len = rid.len;
    if (cJSON_IsString(status) && strcmp(status->valuestring, "ok") == 0) {
        if (cJSON_IsString(ctl) && ctl->valuestring[0]) {
            void *ctx = seer_net_context(NULL);
            w->ctl = ctx ? socket_of(ctx, ZMQ_DEALER, NULL) : NULL;
            if (w->ctl && zmq_connect(w->ctl, ctl->valuestring) != 0) {
                zmq_close(w->ctl);
                w->ctl = NULL;
            }
        }
        if (!w->ctl) seer_rpc_log(b->o.name, "worker %d has no watchdog: its calls cannot be cancelled", w->slot);
        w->state = W_IDLE;
        if (!w->ever_ready) {
            w->ever_ready = 1;
            b->nready_initial++;
        }
        if (!b->hello) {
            b->hello = o;
            o = NULL;
        }
        seer_rpc_log(b->o.name, "worker %d (pid %d) ready%s", w->slot, (int)w->pid,
                     b->nready_initial == b->o.workers && w->generation == 1 ? "; the pool is up" : "");
        if (b->nready_initial == b->o.workers) answer_hellos(b);
        dispatch(b);
    } else {
        /* the interface failed to load: answered as a single server would, then the pool ends */
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
        snprintf(b->load_error, sizeof b->load_error, "%s", cJSON_IsString(e) ? e->valuestring : "unknown error");
        char *nl = strchr(b->load_error, '\n');
        if (nl) *nl = 0;
        seer_rpc_log(b->o.name, "worker %d could not load the interface: %s%s", w->slot, b->load_error,
                     w->generation > 1 ? " (it replaced a worker that had ended); stopping" : "");
        w->state = W_IDLE; /* it exits after a while; nothing goes to it */
        cJSON_Delete(b->hello);
        b->hello = o;
        o = NULL;
        b->load_failed = 1;
        b->exit_code = 1;
        answer_hellos(b); /* with the load error, as a single server does */
        char msg[1200];
        snprintf(msg, sizeof msg, "the interface failed to load: %s", b->load_error);
        fail_all(b, msg);
        stop_workers(b);
    }
    cJSON_Delete(o);
}

static void on_back(seer_rpc_broker_t *b, seer_rpc_msg_t *m) {
    seer_net_frame_t rid = seer_rpc_frame(m, 0);
    int base = m->delim + 2;
    seer_net_frame_t h = seer_rpc_frame(m, base + SEER_NET_HEADER);
    static const char *const keys[] = {"msg_type"};
    seer_rpc_str_t type;
    seer_rpc_json_fields(h.data, h.len, keys, &type, 1);
    if (seer_rpc_str_eq(type, "rpc_worker_ready")) {
        on_ready(b, m);
        return;
    }
    worker_t *w = NULL;
    for (int i = 0; i < b->o.workers && !w; i++)
        if (b->w[i].rid_len == rid.len && rid.len && memcmp(b->w[i].rid, rid.data, rid.len) == 0) w = &b->w[i];
    if (!w) return;
    if (m->delim >= 2) { /* a reply to a client: on its way, as the worker signed it */
        seer_err_t err;
        if (seer_rpc_forward(b->front, m, 1, NULL, 0, &err) < 0) seer_rpc_log(b->o.name, "cannot forward a reply: %s", err.msg);
        seer_rpc_msg_clear(m);
    }
    if (w->state == W_BUSY && seer_rpc_str_eq(type, "rpc_call_reply")) {
        call_free(w->call);
        w->call = NULL;
        w->state = W_IDLE;
        dispatch(b);
    }
}

static void on_control(seer_rpc_broker_t *b, seer_rpc_msg_t *m) {
    int base = m->delim + 2;
    seer_net_frame_t h = seer_rpc_frame(m, base + SEER_NET_HEADER), content = seer_rpc_frame(m, base + SEER_NET_CONTENT);
    static const char *const hk[] = {"msg_type"}, *const ck[] = {"call_id"};
    seer_rpc_str_t type, cid;
    seer_rpc_json_fields(h.data, h.len, hk, &type, 1);
    seer_rpc_json_fields(content.data, content.len, ck, &cid, 1);
    if (!seer_rpc_str_eq(type, "rpc_cancel_request") || !cid.p || cid.n >= ID_MAX) return;
    char id[ID_MAX];
    copy_str(id, sizeof id, cid);
    for (int i = 0; i < b->o.workers; i++) {
        worker_t *w = &b->w[i];
        if (w->state == W_BUSY && w->call && strcmp(w->call->id, id) == 0) {
            if (w->ctl) {
                seer_net_frame_t parts[SEER_NET_NPARTS];
                for (int k = 0; k < SEER_NET_NPARTS; k++) parts[k] = seer_rpc_frame(m, base + k);
                seer_err_t err;
                if (seer_rpc_send(w->ctl, b->key, NULL, 0, 0, parts, NULL, 0, &err) < 0)
                    seer_rpc_log(b->o.name, "cannot pass a cancel to worker %d: %s", w->slot, err.msg);
            }
            return;
        }
    }
    for (call_t **pc = &b->queue, *prev = NULL; *pc; prev = *pc, pc = &(*pc)->next) {
        call_t *c = *pc;
        if (strcmp(c->id, id) != 0) continue;
        *pc = c->next;
        if (b->queue_tail == c) b->queue_tail = prev;
        char msg[256];
        snprintf(msg, sizeof msg, "%s was cancelled before it started", c->fn);
        reply_error(b, &c->msg, c->id, "cancelled", msg, NULL);
        call_free(c);
        return;
    }
    snprintf(b->cancelled[b->next_cancelled], ID_MAX, "%s", id);
    b->next_cancelled = (b->next_cancelled + 1) % CANCEL_MEMORY;
}

/* Reads what is waiting on sock (without blocking) and hands each message to fn. */
static void drain(seer_rpc_broker_t *b, void *sock, void (*fn)(seer_rpc_broker_t *, seer_rpc_msg_t *)) {
    seer_rpc_msg_t m = {0};
    for (int k = 0; k < 1000; k++) {
        seer_err_t err;
        int r = seer_rpc_recv(sock, b->key, &m, ZMQ_DONTWAIT, &err);
        if (r == SEER_RPC_DROPPED) continue;
        if (r == SEER_EINTR) continue;
        if (r <= 0) break;
        fn(b, &m);
    }
    seer_rpc_msg_free(&m);
}

int seer_rpc_broker_run(seer_rpc_broker_t *b, char *const *argv, seer_err_t *err) {
    if (!argv || !argv[0] || argv[0][0] != '/')
        return seer_err_set(err, SEER_EINVAL, "rpc pool: the worker command must start with an absolute path");
    for (b->argc = 0; argv[b->argc]; b->argc++) {
    }
    b->argv = calloc((size_t)b->argc + 3, sizeof *b->argv);
    if (!b->argv) return seer_err_set(err, SEER_ENOMEM, "rpc pool: out of memory");
    for (int i = 0; i < b->argc; i++)
        if (!(b->argv[i] = strdup(argv[i]))) return seer_err_set(err, SEER_ENOMEM, "rpc pool: out of memory");
    for (int i = 0; i < b->o.workers; i++) {
        b->w[i].slot = i + 1;
        int rc = spawn_worker(b, &b->w[i], err);
        if (rc < 0) {
            stop_workers(b);
            return rc;
        }
    }
    seer_rpc_log(b->o.name, "pool of %d workers on %s (control %s), loading the interface in each", b->o.workers,
                 b->front_ep, b->control_ep);
    zmq_pollitem_t items[3 + MAX_WORKERS];
    int polled[MAX_WORKERS];
    while (!b->stopping) {
        if (seer_host_interrupted()) {
            seer_rpc_log(b->o.name, "stopping: interrupted");
            break;
        }
        int n = 0, timeout = 500, no_pidfd = 0;
        items[n++] = (zmq_pollitem_t){.socket = b->front, .events = ZMQ_POLLIN};
        items[n++] = (zmq_pollitem_t){.socket = b->back, .events = ZMQ_POLLIN};
        items[n++] = (zmq_pollitem_t){.socket = b->control, .events = ZMQ_POLLIN};
        int nw = 0;
        for (int i = 0; i < b->o.workers; i++) {
            if (b->w[i].state == W_DEAD) continue;
            if (b->w[i].pidfd >= 0) {
                polled[nw++] = i;
                items[n++] = (zmq_pollitem_t){.fd = b->w[i].pidfd, .events = ZMQ_POLLIN};
            } else {
                no_pidfd = 1;
            }
        }
        if (no_pidfd) timeout = 100;
        int r = zmq_poll(items, n, timeout);
        if (r < 0) {
            if (zmq_errno() == EINTR) continue;
            seer_err_set(err, SEER_EIO, "rpc pool: zmq poll: %s", zmq_strerror(zmq_errno()));
            stop_workers(b);
            return SEER_EIO;
        }
        /* replies before deaths: a worker that answers and then exits has answered */
        if (items[1].revents & ZMQ_POLLIN) drain(b, b->back, on_back);
        if (items[0].revents & ZMQ_POLLIN) drain(b, b->front, on_front);
        if (items[2].revents & ZMQ_POLLIN) drain(b, b->control, on_control);
        for (int k = 0; k < nw; k++)
            if (items[3 + k].revents & ZMQ_POLLIN) {
                worker_t *w = &b->w[polled[k]];
                int status;
                if (w->state != W_DEAD && waitpid(w->pid, &status, WNOHANG) == w->pid) worker_ended(b, w, status);
            }
        if (no_pidfd) check_workers(b, 0);
        if (b->load_failed && now_ms() - b->last_activity_ms > (long long)b->o.idle_exit_s * 1000) {
            seer_rpc_log(b->o.name, "exiting after the load error");
            break;
        }
    }
    stop_workers(b);
    return b->exit_code;
}
