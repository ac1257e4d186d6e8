/* The RPC server's watchdog: a thread that owns the signed control socket, so cancellations are
 * heard while the main thread runs a call, and that enforces per-call deadlines. It interrupts
 * a call by sending SIGINT to the main thread, which reuses the host's Ctrl-C path: a hook makes
 * the running Lua code raise "interrupted", and C loops that poll seer_host_interrupted() stop. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <zmq.h>

#include "net/net.h"
#include "rpc.h"

#define MAX_ID 128
#define CANCEL_MEMORY 64 /* cancels for calls that have not started yet */

struct seer_rpc_watchdog {
    pthread_t thread, target;
    pthread_mutex_t mu;
    void *sock;
    seer_net_key_t *key;
    atomic_int stop;
    atomic_ulong fired;
    atomic_ulong handled; /* fired, as of the last ack */
    /* guarded by mu */
    char current[MAX_ID];
    long long deadline_ms; /* 0: none */
    int reason;            /* SEER_RPC_* for the current call */
    char cancelled[CANCEL_MEMORY][MAX_ID];
    int next_cancelled;
};

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Called with mu held. */
static void fire(seer_rpc_watchdog_t *w, int reason) {
    if (w->current[0] == 0 || w->reason != SEER_RPC_RUNNING) return;
    w->reason = reason;
    /* Without the host's handler, SIGINT would end the process instead of the call. */
    struct sigaction sa;
    if (sigaction(SIGINT, NULL, &sa) != 0 || sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN) return;
    atomic_fetch_add(&w->fired, 1);
    pthread_kill(w->target, SIGINT);
}

static void on_cancel(seer_rpc_watchdog_t *w, const seer_net_msg_t *m) {
    cJSON *h = cJSON_ParseWithLength(m->parts[SEER_NET_HEADER].data, m->parts[SEER_NET_HEADER].len);
    cJSON *c = cJSON_ParseWithLength(m->parts[SEER_NET_CONTENT].data, m->parts[SEER_NET_CONTENT].len);
    const cJSON *type = h ? cJSON_GetObjectItemCaseSensitive(h, "msg_type") : NULL;
    const cJSON *id = c ? cJSON_GetObjectItemCaseSensitive(c, "call_id") : NULL;
    if (cJSON_IsString(type) && strcmp(type->valuestring, "rpc_cancel_request") == 0 && cJSON_IsString(id) &&
        strlen(id->valuestring) < MAX_ID) {
        pthread_mutex_lock(&w->mu);
        if (strcmp(w->current, id->valuestring) == 0) {
            fire(w, SEER_RPC_CANCELLED);
        } else {
            strcpy(w->cancelled[w->next_cancelled], id->valuestring);
            w->next_cancelled = (w->next_cancelled + 1) % CANCEL_MEMORY;
        }
        pthread_mutex_unlock(&w->mu);
    }
    cJSON_Delete(h);
    cJSON_Delete(c);
}

static void *run(void *arg) {
    seer_rpc_watchdog_t *w = arg;
    /* SIGINT is for the main thread: the hook it sets must never land here. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    while (!atomic_load(&w->stop)) {
        int timeout = 50; /* also how soon stop is noticed */
        pthread_mutex_lock(&w->mu);
        if (w->current[0] && w->deadline_ms && w->reason == SEER_RPC_RUNNING) {
            long long left = w->deadline_ms - now_ms();
            if (left <= 0) fire(w, SEER_RPC_TIMEOUT);
            else if (left < timeout) timeout = (int)left;
        }
        pthread_mutex_unlock(&w->mu);
        seer_net_msg_t m;
        seer_err_t err;
        int r = seer_net_recv(w->sock, w->key, &m, timeout, &err);
        if (r == 1) {
            on_cancel(w, &m);
            seer_net_msg_free(&m);
        }
    }
    return NULL;
}

int seer_rpc_watchdog_start(seer_rpc_watchdog_t **out, const char *endpoint, const void *key, size_t key_len,
                            char *bound, size_t cap, seer_err_t *err) {
    *out = NULL;
    if (key_len == 0)
        return seer_err_set(err, SEER_EINVAL, "rpc watchdog: the key is empty; RPC messages must be signed");
    void *ctx = seer_net_context(err);
    if (!ctx) return SEER_EIO;
    seer_rpc_watchdog_t *w = calloc(1, sizeof *w);
    if (!w) return seer_err_set(err, SEER_ENOMEM, "rpc watchdog: out of memory");
    int rc = seer_net_key_new(&w->key, key, key_len, err);
    if (rc < 0) {
        free(w);
        return rc;
    }
    w->sock = zmq_socket(ctx, ZMQ_ROUTER);
    int zero = 0;
    if (w->sock) zmq_setsockopt(w->sock, ZMQ_LINGER, &zero, sizeof zero);
    if (!w->sock || zmq_bind(w->sock, endpoint) != 0) {
        rc = seer_err_set(err, SEER_EIO, "rpc watchdog: cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
        if (w->sock) zmq_close(w->sock);
        seer_net_key_free(w->key);
        free(w);
        return rc;
    }
    size_t len = cap;
    if (zmq_getsockopt(w->sock, ZMQ_LAST_ENDPOINT, bound, &len) != 0 && cap) bound[0] = 0;
    pthread_mutex_init(&w->mu, NULL);
    w->target = pthread_self();
    if (pthread_create(&w->thread, NULL, run, w) != 0) {
        zmq_close(w->sock);
        seer_net_key_free(w->key);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return seer_err_set(err, SEER_EIO, "rpc watchdog: cannot start its thread");
    }
    *out = w;
    return SEER_OK;
}

int seer_rpc_watchdog_begin(seer_rpc_watchdog_t *w, const char *call_id, long long timeout_ms) {
    if (strlen(call_id) >= MAX_ID) call_id = "";
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < CANCEL_MEMORY; i++)
        if (call_id[0] && w->cancelled[i][0] == call_id[0] && strcmp(w->cancelled[i], call_id) == 0) {
            w->cancelled[i][0] = 0;
            pthread_mutex_unlock(&w->mu);
            return SEER_RPC_CANCELLED;
        }
    strcpy(w->current, call_id[0] ? call_id : "?");
    w->deadline_ms = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
    w->reason = SEER_RPC_RUNNING;
    pthread_mutex_unlock(&w->mu);
    return SEER_RPC_RUNNING;
}

int seer_rpc_watchdog_end(seer_rpc_watchdog_t *w) {
    pthread_mutex_lock(&w->mu);
    int reason = w->reason;
    w->current[0] = 0;
    w->deadline_ms = 0;
    w->reason = SEER_RPC_RUNNING;
    pthread_mutex_unlock(&w->mu);
    return reason;
}

unsigned long seer_rpc_watchdog_fired(const seer_rpc_watchdog_t *w) { return atomic_load(&w->fired); }

void seer_rpc_watchdog_ack(seer_rpc_watchdog_t *w) { atomic_store(&w->handled, atomic_load(&w->fired)); }

int seer_rpc_watchdog_unhandled(const seer_rpc_watchdog_t *w) {
    return atomic_load(&w->fired) > atomic_load(&w->handled);
}

int seer_rpc_watchdog_was_cancelled(seer_rpc_watchdog_t *w, const char *call_id) {
    int found = 0;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < CANCEL_MEMORY && !found; i++)
        if (call_id[0] && strcmp(w->cancelled[i], call_id) == 0) found = 1;
    pthread_mutex_unlock(&w->mu);
    return found;
}

void seer_rpc_watchdog_stop(seer_rpc_watchdog_t *w) {
    if (!w) return;
    atomic_store(&w->stop, 1);
    pthread_join(w->thread, NULL);
    zmq_close(w->sock);
    seer_net_key_free(w->key);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
