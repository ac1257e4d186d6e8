/* The streamable HTTP transport of seer's MCP servers: libmicrohttpd receives requests, a queue
 * hands them to the Lua event loop (woken through an eventfd), and each connection's thread
 * waits for the answer Lua gives: a whole response, or a stream of server-sent event chunks.
 * Requests live in one list under one mutex; each has a reference for its connection and one
 * for a streaming response, and is freed when both are done. See http_transport.h. */
#include "http_transport.h"
#include "net/http.h"

#include <math.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <microhttpd.h>

/* A kept-alive connection with nothing to do is closed after this long. */
#define IDLE_TIMEOUT_S 120u
/* While a request is being read (its head went through the gate, its body is arriving), a
 * pause this long ends it: a body announced and never sent does not hold a thread for long. */
#define RECEIVE_TIMEOUT_S 30u

enum { R_RECEIVING, R_QUEUED, R_TAKEN, R_RESPONDED, R_STREAMING };

typedef struct req {
    struct req *next_all, *next_q;
    struct seer_mcphttp *srv;
    int refs;   /* the connection's, plus one while a streaming response exists */
    int state;
    int gone;   /* the connection ended (client left, or the request completed) */
    int too_big;
    int fd;
    unsigned long long id;
    pthread_cond_t cond;
    /* the request, moved to Lua by seer_mcphttp_next */
    char *method, *path;
    seer_mcphttp_header_t *headers;
    size_t nheaders;
    char *body;
    size_t body_len, body_cap;
    /* the answer */
    unsigned status;
    char **rnames, **rvalues;
    size_t rn;
    char *rbody;
    size_t rbody_len;
    /* a stream: bytes not yet sent */
    char *sbuf;
    size_t slen, soff, scap;
    int finished;
    struct timespec keepalive_at;
} req_t;

struct seer_mcphttp {
    struct MHD_Daemon *daemon;
    seer_http_gate_t *gate; /* owns the listening socket; only token holders reach daemon */
    pthread_mutex_t mu;
    int closing;
    int efd;
    int port;
    size_t max_body;
    unsigned long long next_id;
    req_t *all;
    req_t *qhead, *qtail;
};

/* ---- requests ---------------------------------------------------------------------------- */

static void free_strings(char **v, size_t n) {
    if (!v) return;
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

static void free_headers(seer_mcphttp_header_t *h, size_t n) {
    if (!h) return;
    for (size_t i = 0; i < n; i++) {
        free(h[i].name);
        free(h[i].value);
    }
    free(h);
}

static void clear_answer(req_t *r) {
    free_strings(r->rnames, r->rn);
    free_strings(r->rvalues, r->rn);
    r->rnames = r->rvalues = NULL;
    r->rn = 0;
    free(r->rbody);
    r->rbody = NULL;
}

/* With s->mu held: drops a reference; the last one unlinks and frees the request. */
static void req_unref(req_t *r) {
    if (--r->refs > 0) return;
    struct seer_mcphttp *s = r->srv;
    for (req_t **p = &s->all; *p; p = &(*p)->next_all)
        if (*p == r) {
            *p = r->next_all;
            break;
        }
    req_t *prev = NULL;
    for (req_t *q = s->qhead; q; prev = q, q = q->next_q)
        if (q == r) {
            if (prev) prev->next_q = q->next_q;
            else s->qhead = q->next_q;
            if (s->qtail == q) s->qtail = prev;
            break;
        }
    pthread_cond_destroy(&r->cond);
    free(r->method);
    free(r->path);
    free_headers(r->headers, r->nheaders);
    free(r->body);
    clear_answer(r);
    free(r->sbuf);
    free(r);
}

static req_t *find(struct seer_mcphttp *s, unsigned long long id) {
    for (req_t *r = s->all; r; r = r->next_all)
        if (r->id == id) return r;
    return NULL;
}

static int peer_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void ts_now_plus(struct timespec *t, long sec) {
    clock_gettime(CLOCK_MONOTONIC, t);
    t->tv_sec += sec;
}

static int ts_before(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static void cond_init_monotonic(pthread_cond_t *c) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
}

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    req_t *r = cls;
    if (!key) return MHD_YES;
    if (!value) value = "";
    for (size_t i = 0; i < r->nheaders; i++) {
        if (strcasecmp(r->headers[i].name, key) == 0) { /* repeated header: joined with ", " */
            size_t a = strlen(r->headers[i].value), b = strlen(value);
            char *v = realloc(r->headers[i].value, a + b + 3);
            if (!v) return MHD_NO;
            memcpy(v + a, ", ", 2);
            memcpy(v + a + 2, value, b + 1);
            r->headers[i].value = v;
            return MHD_YES;
        }
    }
    seer_mcphttp_header_t *h = realloc(r->headers, (r->nheaders + 1) * sizeof *h);
    if (!h) return MHD_NO;
    r->headers = h;
    char *name = strdup(key), *val = strdup(value);
    if (!name || !val) {
        free(name);
        free(val);
        return MHD_NO;
    }
    for (char *p = name; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    h[r->nheaders].name = name;
    h[r->nheaders].value = val;
    r->nheaders++;
    return MHD_YES;
}

/* ---- MHD callbacks -------------------------------------------------------------------------- */

static enum MHD_Result queue_simple(struct MHD_Connection *c, unsigned status, const char *ctype, const char *body) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    req_t *r = cls;
    struct seer_mcphttp *s = r->srv;
    static const char keepalive[] = ": keepalive\n\n";
    ssize_t n = MHD_CONTENT_READER_END_OF_STREAM;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (r->slen > r->soff) {
            size_t k = r->slen - r->soff;
            if (k > max) k = max;
            memcpy(buf, r->sbuf + r->soff, k);
            r->soff += k;
            if (r->soff == r->slen) r->soff = r->slen = 0;
            n = (ssize_t)k;
            break;
        }
        if (r->finished || s->closing) break;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!ts_before(&now, &r->keepalive_at) && max >= sizeof keepalive - 1) {
            memcpy(buf, keepalive, sizeof keepalive - 1);
            ts_now_plus(&r->keepalive_at, SEER_MCPHTTP_KEEPALIVE_S);
            n = (ssize_t)(sizeof keepalive - 1);
            break;
        }
        struct timespec until = now;
        until.tv_sec += 1;
        if (ts_before(&r->keepalive_at, &until)) until = r->keepalive_at;
        pthread_cond_timedwait(&r->cond, &s->mu, &until);
        if (peer_gone(r->fd)) {
            r->gone = 1;
            n = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void stream_free(void *cls) {
    req_t *r = cls;
    struct seer_mcphttp *s = r->srv;
    pthread_mutex_lock(&s->mu);
    r->gone = 1;
    req_unref(r);
    pthread_mutex_unlock(&s->mu);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    (void)toe;
    struct seer_mcphttp *s = cls;
    req_t *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    r->gone = 1;
    pthread_cond_broadcast(&r->cond);
    req_unref(r);
    pthread_mutex_unlock(&s->mu);
}

static const char too_big_body[] =
    "{\"error\":{\"code\":-32600,\"message\":\"invalid request: the body is larger than the limit of 16 MiB\"},"
    "\"id\":null,\"jsonrpc\":\"2.0\"}";

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    struct seer_mcphttp *s = cls;
    req_t *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->srv = s;
        r->refs = 1;
        r->fd = -1;
        cond_init_monotonic(&r->cond);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) r->fd = ci->connect_fd;
        r->method = strdup(method);
        r->path = strdup(url);
        MHD_get_connection_values(c, MHD_HEADER_KIND, collect_header, r);
        pthread_mutex_lock(&s->mu);
        r->id = ++s->next_id;
        r->next_all = s->all;
        s->all = r;
        pthread_mutex_unlock(&s->mu);
        *con_cls = r; /* on_completed frees it from here on */
        if (!r->method || !r->path) return MHD_NO;
        /* A body over the limit is read and dropped (memory stays bounded) and answered 413
         * at its end: refusing at the head would reset clients that send the body before
         * reading any answer. Only token holders get here. */
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->too_big) return MHD_YES;
        if (r->body_len + n > s->max_body) {
            r->too_big = 1;
            free(r->body);
            r->body = NULL;
            r->body_len = r->body_cap = 0;
            return MHD_YES;
        }
        if (r->body_len + n + 1 > r->body_cap) {
            size_t cap = r->body_cap ? r->body_cap : 4096;
            while (cap < r->body_len + n + 1) cap *= 2;
            char *b = realloc(r->body, cap);
            if (!b) return MHD_NO;
            r->body = b;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, upload_data, n);
        r->body_len += n;
        r->body[r->body_len] = 0;
        return MHD_YES;
    }
    if (r->too_big) return queue_simple(c, MHD_HTTP_CONTENT_TOO_LARGE, "application/json", too_big_body);

    /* Hand the request to Lua and wait for its answer. */
    pthread_mutex_lock(&s->mu);
    if (s->closing) {
        pthread_mutex_unlock(&s->mu);
        return MHD_NO;
    }
    r->state = R_QUEUED;
    if (s->qtail) s->qtail->next_q = r;
    else s->qhead = r;
    s->qtail = r;
    uint64_t one = 1;
    if (write(s->efd, &one, sizeof one) < 0 && errno != EAGAIN) { /* the counter cannot overflow in practice */
    }
    while ((r->state == R_QUEUED || r->state == R_TAKEN) && !s->closing && !r->gone) {
        struct timespec until;
        ts_now_plus(&until, 1);
        pthread_cond_timedwait(&r->cond, &s->mu, &until);
        if (peer_gone(r->fd)) r->gone = 1;
    }
    if (r->state == R_RESPONDED) {
        unsigned status = r->status;
        char **names = r->rnames, **values = r->rvalues, *body = r->rbody;
        size_t rn = r->rn, body_len = r->rbody_len;
        r->rnames = r->rvalues = NULL;
        r->rbody = NULL;
        r->rn = 0;
        pthread_mutex_unlock(&s->mu);
        struct MHD_Response *resp = MHD_create_response_from_buffer(body_len, body ? body : (void *)"",
                                                                    body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        if (!resp) free(body);
        for (size_t i = 0; resp && i < rn; i++) MHD_add_response_header(resp, names[i], values[i]);
        free_strings(names, rn);
        free_strings(values, rn);
        if (!resp) return MHD_NO;
        /* The wait does not count as idleness: this restarts the idle timer. */
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, IDLE_TIMEOUT_S);
        enum MHD_Result ret = MHD_queue_response(c, status, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (r->state == R_STREAMING && !s->closing) {
        unsigned status = r->status;
        char **names = r->rnames, **values = r->rvalues;
        size_t rn = r->rn;
        r->rnames = r->rvalues = NULL;
        r->rn = 0;
        r->refs++; /* the response's reference, dropped in stream_free */
        pthread_mutex_unlock(&s->mu);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, stream_read, r, stream_free);
        if (!resp) {
            pthread_mutex_lock(&s->mu);
            req_unref(r);
            pthread_mutex_unlock(&s->mu);
        }
        for (size_t i = 0; resp && i < rn; i++) MHD_add_response_header(resp, names[i], values[i]);
        free_strings(names, rn);
        free_strings(values, rn);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, IDLE_TIMEOUT_S);
        enum MHD_Result ret = MHD_queue_response(c, status, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    pthread_mutex_unlock(&s->mu);
    return MHD_NO; /* the client left, or the server is closing */
}

/* ---- API ------------------------------------------------------------------------------------- */

int seer_mcphttp_serve(seer_mcphttp_t **out, const seer_mcphttp_opts_t *opts, seer_err_t *err) {
    *out = NULL;
    const char *host = opts->host ? opts->host : "127.0.0.1";
    if (opts->port < 0 || opts->port > 65535)
        return seer_err_set(err, SEER_EINVAL, "port must be 0..65535 (0 picks a free one), got %d", opts->port);
    if (!opts->token || strlen(opts->token) < 16)
        return seer_err_set(err, SEER_EINVAL, "token must be a string of at least 16 characters (a guessable token "
                                              "would let anyone who can reach the port run code), got %s",
                            opts->token ? "a shorter one" : "none");
    seer_mcphttp_t *s = calloc(1, sizeof *s);
    if (!s) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->max_body = opts->max_body ? opts->max_body : SEER_MCPHTTP_MAX_BODY;
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        int e = errno;
        pthread_mutex_destroy(&s->mu);
        free(s);
        return seer_err_set(err, SEER_EIO, "eventfd: %s", strerror(e));
    }
    int fd = -1;
    int rc = seer_http_listen(host, opts->port, &fd, &s->port, err);
    if (rc < 0) {
        close(s->efd);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return rc;
    }
    /* A thread per connection: a request's thread waits for the Lua loop's answer, and an
     * event stream's thread waits for the next chunk. Only connections that sent the token get
     * a thread (the gate answers the rest), so strangers cannot use up the limit. */
    s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                                     MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET,
                                 0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)SEER_HTTP_AUTHORIZED_MAX,
                                 MHD_OPTION_CONNECTION_TIMEOUT, RECEIVE_TIMEOUT_S,
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(2 * SEER_HTTP_GATE_HEAD_MAX),
                                 MHD_OPTION_END);
    if (!s->daemon) {
        close(fd);
        close(s->efd);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return seer_err_set(err, SEER_EIO, "libmicrohttpd could not start on %s:%d", host, opts->port);
    }
    seer_http_gate_opts_t go = {
        .listen_fd = fd, .daemon = s->daemon, .token = opts->token, .reject_type = "application/json",
        .reject_body = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":"
                       "\"unauthorized: send the server's token as 'Authorization: Bearer <token>'\"}}",
        .reject_headers = "WWW-Authenticate: Bearer realm=\"seer mcp\"\r\n"};
    rc = seer_http_gate_start(&s->gate, &go, err);
    if (rc < 0) {
        close(fd);
        MHD_stop_daemon(s->daemon);
        close(s->efd);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return rc;
    }
    *out = s;
    return SEER_OK;
}

int seer_mcphttp_port(const seer_mcphttp_t *s) { return s->port; }
int seer_mcphttp_fd(const seer_mcphttp_t *s) { return s->efd; }

seer_mcphttp_request_t *seer_mcphttp_next(seer_mcphttp_t *s) {
    seer_mcphttp_request_t *out = NULL;
    pthread_mutex_lock(&s->mu);
    while (s->qhead && !out) {
        req_t *r = s->qhead;
        s->qhead = r->next_q;
        if (!s->qhead) s->qtail = NULL;
        r->next_q = NULL;
        if (r->gone) continue;
        out = calloc(1, sizeof *out);
        if (!out) break;
        r->state = R_TAKEN;
        out->id = r->id;
        out->method = r->method;
        out->path = r->path;
        out->headers = r->headers;
        out->nheaders = r->nheaders;
        out->body = r->body;
        out->body_len = r->body_len;
        r->method = r->path = NULL;
        r->headers = NULL;
        r->nheaders = 0;
        r->body = NULL;
        r->body_len = r->body_cap = 0;
    }
    if (!s->qhead) {
        uint64_t v;
        while (read(s->efd, &v, sizeof v) > 0) {
        }
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}

void seer_mcphttp_request_free(seer_mcphttp_request_t *r) {
    if (!r) return;
    free(r->method);
    free(r->path);
    free_headers(r->headers, r->nheaders);
    free(r->body);
    free(r);
}

static int copy_headers(req_t *r, const char *const *names, const char *const *values, size_t n) {
    char **nv = calloc(n ? n : 1, sizeof *nv), **vv = calloc(n ? n : 1, sizeof *vv);
    if (!nv || !vv) {
        free(nv);
        free(vv);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        nv[i] = strdup(names[i]);
        vv[i] = strdup(values[i]);
        if (!nv[i] || !vv[i]) {
            free_strings(nv, n);
            free_strings(vv, n);
            return -1;
        }
    }
    clear_answer(r);
    r->rnames = nv;
    r->rvalues = vv;
    r->rn = n;
    return 0;
}

int seer_mcphttp_respond(seer_mcphttp_t *s, unsigned long long id, unsigned status, const char *const *names,
                         const char *const *values, size_t n, const char *body, size_t body_len) {
    int ok = 0;
    pthread_mutex_lock(&s->mu);
    req_t *r = find(s, id);
    if (r && r->state == R_TAKEN && !r->gone && copy_headers(r, names, values, n) == 0) {
        r->rbody = malloc(body_len ? body_len : 1);
        if (r->rbody) {
            if (body_len) memcpy(r->rbody, body, body_len);
            r->rbody_len = body_len;
            r->status = status;
            r->state = R_RESPONDED;
            pthread_cond_broadcast(&r->cond);
            ok = 1;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

int seer_mcphttp_stream(seer_mcphttp_t *s, unsigned long long id, unsigned status, const char *const *names,
                        const char *const *values, size_t n) {
    int ok = 0;
    pthread_mutex_lock(&s->mu);
    req_t *r = find(s, id);
    if (r && r->state == R_TAKEN && !r->gone && copy_headers(r, names, values, n) == 0) {
        r->status = status;
        r->state = R_STREAMING;
        ts_now_plus(&r->keepalive_at, SEER_MCPHTTP_KEEPALIVE_S);
        pthread_cond_broadcast(&r->cond);
        ok = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

int seer_mcphttp_send(seer_mcphttp_t *s, unsigned long long id, const char *data, size_t len) {
    int ok = 0;
    pthread_mutex_lock(&s->mu);
    req_t *r = find(s, id);
    if (r && r->state == R_STREAMING && !r->gone && !r->finished) {
        if (r->slen + len > r->scap) {
            size_t cap = r->scap ? r->scap : 4096;
            while (cap < r->slen + len) cap *= 2;
            char *b = realloc(r->sbuf, cap);
            if (b) {
                r->sbuf = b;
                r->scap = cap;
            }
        }
        if (r->slen + len <= r->scap) {
            memcpy(r->sbuf + r->slen, data, len);
            r->slen += len;
            pthread_cond_broadcast(&r->cond);
            ok = 1;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

int seer_mcphttp_finish(seer_mcphttp_t *s, unsigned long long id) {
    int ok = 0;
    pthread_mutex_lock(&s->mu);
    req_t *r = find(s, id);
    if (r && r->state == R_STREAMING && !r->finished) {
        r->finished = 1;
        pthread_cond_broadcast(&r->cond);
        ok = !r->gone;
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void seer_mcphttp_stats(seer_mcphttp_t *s, unsigned long long *out) { seer_http_gate_stats(s->gate, out); }

void seer_mcphttp_close(seer_mcphttp_t *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    for (req_t *r = s->all; r; r = r->next_all) pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&s->mu);
    seer_http_gate_stop(s->gate); /* no new connections */
    MHD_stop_daemon(s->daemon); /* joins every connection thread; on_completed frees their requests */
    pthread_mutex_lock(&s->mu);
    while (s->all) {
        s->all->refs = 1;
        req_unref(s->all);
    }
    pthread_mutex_unlock(&s->mu);
    close(s->efd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- Lua binding: seer.core.mcphttp ----------------------------------------------------------- */

#define MT "seer.mcphttp.server"

typedef struct {
    seer_mcphttp_t *srv; /* NULL once closed */
    int port, fd;
} ud_t;

static seer_mcphttp_t *check_open(lua_State *L, const char *fn) {
    ud_t *u = luaL_testudata(L, 1, MT);
    if (!u) luaL_error(L, "%s: expected a server (call it as srv:%s(...)), got %s", fn, fn, luaL_typename(L, 1));
    if (!u->srv) luaL_error(L, "%s: the server is closed", fn);
    return u->srv;
}

static unsigned long long check_id(lua_State *L, const char *fn) {
    lua_Number v = lua_tonumber(L, 2);
    if (lua_type(L, 2) != LUA_TNUMBER || !(v >= 1 && v <= 9007199254740992.0) || v != floor(v))
        luaL_error(L, "%s: id (argument 1) must be a request id from next(), got %s", fn, luaL_typename(L, 2));
    return (unsigned long long)v;
}

static unsigned check_status(lua_State *L, int idx, const char *fn) {
    lua_Number v = lua_tonumber(L, idx);
    if (lua_type(L, idx) != LUA_TNUMBER || !(v >= 100 && v <= 599) || v != floor(v))
        luaL_error(L, "%s: status must be an HTTP status (100..599)", fn);
    return (unsigned)v;
}

/* The headers table at idx as two arrays on the C stack's heap; the strings stay on the Lua stack. */
static size_t headers_of(lua_State *L, int idx, const char ***names, const char ***values, const char *fn) {
    *names = *values = NULL;
    if (lua_isnoneornil(L, idx)) return 0;
    if (lua_type(L, idx) != LUA_TTABLE) luaL_error(L, "%s: headers must be a table {name = value}", fn);
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: headers must map strings to strings", fn);
        n++;
        lua_pop(L, 1);
    }
    const char **nv = lua_newuserdata(L, (n ? n : 1) * 2 * sizeof *nv); /* freed by the GC */
    size_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *k = lua_tostring(L, -2), *v = lua_tostring(L, -1);
        if (strpbrk(k, "\r\n:") || strpbrk(v, "\r\n")) luaL_error(L, "%s: header %s has a line break or a colon", fn, k);
        nv[i] = k;
        nv[n + i] = v;
        i++;
        lua_pop(L, 1);
    }
    *names = nv;
    *values = nv + n;
    return n;
}

static int l_serve(lua_State *L) {
    static const char valid[] = "host, port, max_body, token";
    if (lua_type(L, 1) != LUA_TTABLE) return luaL_error(L, "mcphttp.serve: expected a table {%s}", valid);
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (!k || (strcmp(k, "host") && strcmp(k, "port") && strcmp(k, "max_body") && strcmp(k, "token")))
            return luaL_error(L, "mcphttp.serve: unknown field '%s' (valid fields: %s)", k ? k : luaL_typename(L, -1), valid);
    }
    seer_mcphttp_opts_t o = {0};
    lua_getfield(L, 1, "host");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "mcphttp.serve: host must be a string");
        o.host = lua_tostring(L, -1);
    }
    lua_getfield(L, 1, "port");
    if (!lua_isnil(L, -1)) {
        lua_Number p = lua_tonumber(L, -1);
        if (lua_type(L, -1) != LUA_TNUMBER || !(p >= 0 && p <= 65535) || p != floor(p))
            return luaL_error(L, "mcphttp.serve: port must be an integer 0..65535 (0 picks a free one)");
        o.port = (int)p;
    }
    lua_getfield(L, 1, "max_body");
    if (!lua_isnil(L, -1)) {
        lua_Number m = lua_tonumber(L, -1);
        if (lua_type(L, -1) != LUA_TNUMBER || m < 1 || m > 1e9) return luaL_error(L, "mcphttp.serve: max_body must be 1..1e9 bytes");
        o.max_body = (size_t)m;
    }
    lua_getfield(L, 1, "token");
    if (lua_type(L, -1) != LUA_TSTRING || strlen(lua_tostring(L, -1)) != lua_objlen(L, -1))
        return luaL_error(L, "mcphttp.serve: token must be a string without NUL bytes (e.g. seer.net.new_key()), got %s",
                          luaL_typename(L, -1));
    o.token = lua_tostring(L, -1);
    ud_t *u = lua_newuserdata(L, sizeof *u);
    u->srv = NULL;
    u->port = u->fd = -1;
    luaL_getmetatable(L, MT);
    lua_setmetatable(L, -2);
    seer_err_t err;
    if (seer_mcphttp_serve(&u->srv, &o, &err) < 0) return luaL_error(L, "mcphttp.serve: %s", err.msg);
    u->port = seer_mcphttp_port(u->srv);
    u->fd = seer_mcphttp_fd(u->srv);
    return 1;
}

/* srv:next() -> {id, method, path, headers = {name = value}, body} or nil */
static int l_next(lua_State *L) {
    seer_mcphttp_t *s = check_open(L, "next");
    seer_mcphttp_request_t *r = seer_mcphttp_next(s);
    if (!r) return 0;
    lua_createtable(L, 0, 5);
    lua_pushnumber(L, (lua_Number)r->id);
    lua_setfield(L, -2, "id");
    lua_pushstring(L, r->method);
    lua_setfield(L, -2, "method");
    lua_pushstring(L, r->path);
    lua_setfield(L, -2, "path");
    lua_createtable(L, 0, (int)r->nheaders);
    for (size_t i = 0; i < r->nheaders; i++) {
        lua_pushstring(L, r->headers[i].value);
        lua_setfield(L, -2, r->headers[i].name);
    }
    lua_setfield(L, -2, "headers");
    lua_pushlstring(L, r->body ? r->body : "", r->body_len);
    lua_setfield(L, -2, "body");
    seer_mcphttp_request_free(r);
    return 1;
}

static int l_respond(lua_State *L) {
    seer_mcphttp_t *s = check_open(L, "respond");
    unsigned long long id = check_id(L, "respond");
    unsigned status = check_status(L, 3, "respond");
    const char **names, **values;
    size_t n = headers_of(L, 4, &names, &values, "respond");
    size_t len = 0;
    const char *body = lua_isnoneornil(L, 5) ? "" : luaL_checklstring(L, 5, &len);
    lua_pushboolean(L, seer_mcphttp_respond(s, id, status, names, values, n, body, len));
    return 1;
}

static int l_stream(lua_State *L) {
    seer_mcphttp_t *s = check_open(L, "stream");
    unsigned long long id = check_id(L, "stream");
    unsigned status = check_status(L, 3, "stream");
    const char **names, **values;
    size_t n = headers_of(L, 4, &names, &values, "stream");
    lua_pushboolean(L, seer_mcphttp_stream(s, id, status, names, values, n));
    return 1;
}

static int l_send(lua_State *L) {
    seer_mcphttp_t *s = check_open(L, "send");
    unsigned long long id = check_id(L, "send");
    size_t len;
    const char *data = luaL_checklstring(L, 3, &len);
    lua_pushboolean(L, seer_mcphttp_send(s, id, data, len));
    return 1;
}

static int l_finish(lua_State *L) {
    seer_mcphttp_t *s = check_open(L, "finish");
    unsigned long long id = check_id(L, "finish");
    lua_pushboolean(L, seer_mcphttp_finish(s, id));
    return 1;
}

/* srv:stats() -> what the gate did with the connections it accepted (net/http.h). */
static int l_stats(lua_State *L) {
    ud_t *u = luaL_testudata(L, 1, MT);
    if (!u || !u->srv) return luaL_error(L, "stats: expected an open server (srv:stats())");
    seer_http_lua_gate_stats(L, u->srv->gate);
    return 1;
}

static int l_close(lua_State *L) {
    ud_t *u = luaL_checkudata(L, 1, MT);
    seer_mcphttp_t *s = u->srv;
    u->srv = NULL;
    seer_mcphttp_close(s);
    return 0;
}

static int l_index(lua_State *L) {
    ud_t *u = luaL_checkudata(L, 1, MT);
    const char *k = lua_tostring(L, 2);
    if (k && strcmp(k, "port") == 0) {
        lua_pushinteger(L, u->port);
        return 1;
    }
    if (k && strcmp(k, "fd") == 0) {
        lua_pushinteger(L, u->fd);
        return 1;
    }
    lua_getmetatable(L, 1);
    lua_getfield(L, -1, "methods");
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

static int l_tostring(lua_State *L) {
    ud_t *u = luaL_checkudata(L, 1, MT);
    if (u->srv) lua_pushfstring(L, "seer.mcphttp.server(port %d)", u->port);
    else lua_pushstring(L, "seer.mcphttp.server(closed)");
    return 1;
}

int seer_mcphttp_luaopen(lua_State *L) {
    if (luaL_newmetatable(L, MT)) {
        static const luaL_Reg methods[] = {{"next", l_next},     {"respond", l_respond}, {"stream", l_stream},
                                           {"send", l_send},     {"finish", l_finish},   {"close", l_close},
                                           {"stats", l_stats},
                                           {NULL, NULL}};
        lua_newtable(L);
        luaL_setfuncs(L, methods, 0);
        lua_setfield(L, -2, "methods");
        lua_pushcfunction(L, l_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_close);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, l_serve);
    lua_setfield(L, -2, "serve");
    lua_pushinteger(L, (lua_Integer)SEER_MCPHTTP_MAX_BODY);
    lua_setfield(L, -2, "MAX_BODY");
    return 1;
}
