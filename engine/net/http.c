/* The notebook live view server on libmicrohttpd: token-checked routes for the page, the
 * snapshots and their server-sent event streams, plus the seer.core.http Lua binding.
 * Publishing swaps a reference-counted snapshot under one mutex and broadcasts the channel's
 * condition variable; each event stream (one MHD thread per connection) wakes, takes the
 * newest snapshot and sends it, so a slow browser skips versions instead of holding anyone up. */
#include "http.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <lua.h>
#include <microhttpd.h>
#include <openssl/evp.h>

#include "../json/json.h"
#include "gen/live_page.h"

/* ---- snapshots and channels ------------------------------------------------------------ */

/* Immutable once published; shared by the channel, GET responses in flight and event streams
 * in the middle of sending it, hence the atomic count (dropped from MHD threads without the
 * server lock). */
typedef struct snap {
    atomic_int refs;
    char *title;       /* metadata.seer.path, for the channel list; NULL when absent */
    size_t json_len;
    char *json;        /* the JSON text as published */
    size_t event_len;
    char *event;       /* the same text as SSE "data:" lines ending in a blank line */
} snap_t;

typedef struct channel {
    struct channel *next;
    pthread_cond_t cond; /* broadcast on every publish/remove of this channel and on close */
    uint64_t version;    /* of the latest publish or remove; 0 = never published */
    snap_t *snap;        /* NULL: nothing published, or removed */
    char name[];
} channel_t;

struct seer_http_server {
    struct MHD_Daemon *daemon;
    seer_http_gate_t *gate;   /* owns the listening socket; only token holders reach daemon */
    pthread_mutex_t mu;       /* guards everything below but the immutable strings */
    int closing;
    uint64_t last_version;    /* server-wide, so a channel's versions only grow, removes too */
    channel_t *channels;      /* never freed before close: event streams hold pointers */
    int port;
    char *token;
    size_t token_len;
    char *info;
    size_t info_len;
    char *csp;
};

static void snap_unref(snap_t *s) {
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
    free(s->title);
    free(s->json);
    free(s->event);
    free(s);
}

static snap_t *snap_ref(snap_t *s) {
    atomic_fetch_add(&s->refs, 1);
    return s;
}

int seer_http_channel_valid(const char *name, size_t n) {
    if (n == 0 || n > SEER_HTTP_CHANNEL_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Caller holds mu. */
static channel_t *channel_find(seer_http_server_t *s, const char *name, size_t n) {
    for (channel_t *c = s->channels; c; c = c->next)
        if (strlen(c->name) == n && memcmp(c->name, name, n) == 0) return c;
    return NULL;
}

/* Caller holds mu. A browser may open a channel's stream before its session publishes, so
 * streams create the channel too. */
static channel_t *channel_get(seer_http_server_t *s, const char *name, size_t n) {
    channel_t *c = channel_find(s, name, n);
    if (c) return c;
    c = calloc(1, sizeof *c + n + 1);
    if (!c) return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    /* Keepalive deadlines must not jump with the wall clock. */
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        free(c);
        return NULL;
    }
    memcpy(c->name, name, n);
    c->next = s->channels;
    s->channels = c;
    return c;
}

/* ---- JSON checks --------------------------------------------------------------------------- */

/* Parses text as exactly one JSON value (whitespace around it allowed) and valid UTF-8, so a
 * browser never receives something JSON.parse rejects. Returns the parsed value or NULL with
 * err naming the byte offset. */
static cJSON *parse_json(const char *what, const char *text, size_t n, seer_err_t *err) {
    size_t bad;
    if (!seer_utf8_validate(text, n, &bad)) {
        seer_err_set(err, SEER_EINVAL, "%s is not valid UTF-8 (byte %zu)", what, bad);
        return NULL;
    }
    if (memchr(text, '\0', n)) {
        seer_err_set(err, SEER_EINVAL, "%s contains a NUL byte", what);
        return NULL;
    }
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!v) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        if (at > n) at = n;
        seer_err_set(err, SEER_EINVAL, "%s is not valid JSON (error near byte %zu: \"%.20s\")",
                     what, at, text + at);
        return NULL;
    }
    size_t at = (size_t)(end - text);
    while (at < n && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r'))
        at++;
    if (at < n) {
        cJSON_Delete(v);
        seer_err_set(err, SEER_EINVAL, "%s has text after the JSON value (byte %zu)", what, at);
        return NULL;
    }
    return v;
}

/* ---- server ---------------------------------------------------------------------------------- */

/* Compares in time that depends only on the expected token's length, so response timing does
 * not reveal how much of a guess was right. */
static int token_ok(const seer_http_server_t *s, const char *given, size_t n) {
    unsigned char diff = n != s->token_len;
    for (size_t i = 0; i < s->token_len; i++)
        diff |= (unsigned char)s->token[i] ^ (unsigned char)(i < n ? given[i] : 0);
    return diff == 0;
}

static int authorized(const seer_http_server_t *s, struct MHD_Connection *c) {
    const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
    if (q && token_ok(s, q, strlen(q))) return 1;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!a) return 0;
    while (*a == ' ' || *a == '\t') a++;
    if (strncasecmp(a, "token", 5) == 0 && (a[5] == ' ' || a[5] == '\t')) a += 5;
    else if (strncasecmp(a, "bearer", 6) == 0 && (a[6] == ' ' || a[6] == '\t')) a += 6;
    else return 0;
    while (*a == ' ' || *a == '\t') a++;
    size_t n = strlen(a);
    while (n > 0 && (a[n - 1] == ' ' || a[n - 1] == '\t')) n--;
    return token_ok(s, a, n);
}

static void add_security_headers(const seer_http_server_t *s, struct MHD_Response *r) {
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_SECURITY_POLICY, s->csp);
    MHD_add_response_header(r, MHD_HTTP_HEADER_X_CONTENT_TYPE_OPTIONS, "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
}

static enum MHD_Result queue(const seer_http_server_t *s, struct MHD_Connection *c,
                             unsigned status, const char *ctype, struct MHD_Response *r) {
    if (!r) return MHD_NO; /* out of memory: MHD drops the connection */
    add_security_headers(s, r);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_text(const seer_http_server_t *s, struct MHD_Connection *c,
                                  unsigned status, const char *text) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    return queue(s, c, status, "text/plain; charset=utf-8", r);
}

/* A growable string for the channel list page. */
typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} buf_t;

static void buf_add(buf_t *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void buf_str(buf_t *b, const char *s) { buf_add(b, s, strlen(s)); }

static void buf_html(buf_t *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': buf_str(b, "&amp;"); break;
        case '<': buf_str(b, "&lt;"); break;
        case '>': buf_str(b, "&gt;"); break;
        case '"': buf_str(b, "&quot;"); break;
        case '\'': buf_str(b, "&#39;"); break;
        default: buf_add(b, s, 1);
        }
    }
}

static void buf_urlenc(buf_t *b, const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~') {
            buf_add(b, s, 1);
        } else {
            char e[3] = {'%', hex[ch >> 4], hex[ch & 15]};
            buf_add(b, e, 3);
        }
    }
}

static enum MHD_Result reply_index(seer_http_server_t *s, struct MHD_Connection *c) {
    buf_t b = {0};
    buf_str(&b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                "<link rel=\"icon\" href=\"data:,\"><title>seer notebooks</title></head>\n"
                "<body><h1>seer notebooks</h1>\n<ul>\n");
    int any = 0;
    pthread_mutex_lock(&s->mu);
    for (channel_t *ch = s->channels; ch; ch = ch->next) {
        if (!ch->snap) continue;
        any = 1;
        buf_str(&b, "<li><a href=\"/notebooks/");
        buf_str(&b, ch->name); /* channel names need no escaping: [A-Za-z0-9._-] */
        buf_str(&b, "?token=");
        buf_urlenc(&b, s->token);
        buf_str(&b, "\">");
        buf_html(&b, ch->snap->title ? ch->snap->title : ch->name);
        buf_str(&b, "</a>");
        if (ch->snap->title) {
            buf_str(&b, " <small>(");
            buf_str(&b, ch->name);
            buf_str(&b, ")</small>");
        }
        buf_str(&b, "</li>\n");
    }
    pthread_mutex_unlock(&s->mu);
    if (!any) buf_str(&b, "<li>no notebooks yet</li>\n");
    buf_str(&b, "</ul>\n</body></html>\n");
    if (b.oom) {
        free(b.p);
        return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(b.n, b.p, MHD_RESPMEM_MUST_FREE);
    if (!r) free(b.p);
    return queue(s, c, MHD_HTTP_OK, "text/html; charset=utf-8", r);
}

static void snap_response_done(void *cls) { snap_unref(cls); }

static enum MHD_Result reply_snapshot(seer_http_server_t *s, struct MHD_Connection *c,
                                      const char *name, size_t n) {
    pthread_mutex_lock(&s->mu);
    channel_t *ch = channel_find(s, name, n);
    snap_t *snap = ch && ch->snap ? snap_ref(ch->snap) : NULL;
    pthread_mutex_unlock(&s->mu);
    if (!snap) return reply_text(s, c, MHD_HTTP_NOT_FOUND, "404 not found: no notebook has been published on this channel\n");
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback_cls(
        snap->json_len, snap->json, snap_response_done, snap);
    if (!r) snap_unref(snap);
    return queue(s, c, MHD_HTTP_OK, "application/json", r);
}

/* ---- server-sent events ---------------------------------------------------------------------- */

/* One event stream. Runs only in its connection's MHD thread; touches the channel under mu. */
typedef struct sse {
    seer_http_server_t *srv;
    channel_t *ch;
    int fd;             /* the client socket, to notice a browser that went away while idle */
    uint64_t sent;      /* channel version last sent */
    char head[96];      /* a per-stream prefix: event name and id, or a keepalive comment */
    size_t head_len, head_off;
    snap_t *body;       /* the shared "data:" lines being sent */
    size_t body_off;
    struct timespec keepalive_at;
} sse_t;

static void ts_add(struct timespec *t, long sec) { t->tv_sec += sec; }

static int ts_before(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static int peer_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Waits until there is something to send: a newer version, a removal, or a keepalive.
 * Returns 0 with head/body filled, or -1 when the stream should end (server closing or the
 * browser went away). Waking once a second also notices browsers that left while idle, which
 * would otherwise hold their thread until the next keepalive. */
static int sse_next(sse_t *st) {
    seer_http_server_t *s = st->srv;
    channel_t *ch = st->ch;
    int rc = -1;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->closing) break;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (ch->version != st->sent) {
            st->sent = ch->version;
            if (ch->snap) {
                st->body = snap_ref(ch->snap);
                st->body_off = 0;
                st->head_len = (size_t)snprintf(st->head, sizeof st->head,
                                                "event: notebook\nid: %" PRIu64 "\n", st->sent);
            } else {
                st->head_len = (size_t)snprintf(st->head, sizeof st->head,
                                                "event: removed\nid: %" PRIu64 "\ndata: {}\n\n", st->sent);
            }
            st->head_off = 0;
            st->keepalive_at = now;
            ts_add(&st->keepalive_at, SEER_HTTP_KEEPALIVE_S);
            rc = 0;
            break;
        }
        if (!ts_before(&now, &st->keepalive_at)) {
            st->head_len = (size_t)snprintf(st->head, sizeof st->head, ": keepalive\n\n");
            st->head_off = 0;
            st->keepalive_at = now;
            ts_add(&st->keepalive_at, SEER_HTTP_KEEPALIVE_S);
            rc = 0;
            break;
        }
        struct timespec until = now;
        ts_add(&until, 1);
        if (ts_before(&st->keepalive_at, &until)) until = st->keepalive_at;
        pthread_cond_timedwait(&ch->cond, &s->mu, &until);
        if (peer_gone(st->fd)) break;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse_t *st = cls;
    size_t n = 0;
    for (;;) {
        if (st->head_off < st->head_len && n < max) {
            size_t k = st->head_len - st->head_off;
            if (k > max - n) k = max - n;
            memcpy(buf + n, st->head + st->head_off, k);
            st->head_off += k;
            n += k;
        }
        if (st->head_off == st->head_len && st->body && n < max) {
            size_t k = st->body->event_len - st->body_off;
            if (k > max - n) k = max - n;
            memcpy(buf + n, st->body->event + st->body_off, k);
            st->body_off += k;
            n += k;
            if (st->body_off == st->body->event_len) {
                snap_unref(st->body);
                st->body = NULL;
            }
        }
        if (n > 0) return (ssize_t)n;
        /* Internal polling mode forbids returning 0, so the wait happens here. */
        if (sse_next(st) < 0) return MHD_CONTENT_READER_END_OF_STREAM;
    }
}

static void sse_free(void *cls) {
    sse_t *st = cls;
    snap_unref(st->body);
    free(st);
}

static enum MHD_Result reply_events(seer_http_server_t *s, struct MHD_Connection *c,
                                    const char *name, size_t n) {
    sse_t *st = calloc(1, sizeof *st);
    if (!st) return MHD_NO;
    st->srv = s;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    st->fd = ci ? ci->connect_fd : -1;
    pthread_mutex_lock(&s->mu);
    st->ch = channel_get(s, name, n);
    if (st->ch) st->sent = st->ch->snap ? 0 : st->ch->version; /* a snapshot goes out at once */
    pthread_mutex_unlock(&s->mu);
    if (!st->ch) {
        free(st);
        return MHD_NO;
    }
    /* EventSource waits 3 s by default before reconnecting; 1 s keeps the view fresh after a
     * server restart. */
    st->head_len = (size_t)snprintf(st->head, sizeof st->head, "retry: 1000\n\n");
    clock_gettime(CLOCK_MONOTONIC, &st->keepalive_at);
    ts_add(&st->keepalive_at, SEER_HTTP_KEEPALIVE_S);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024,
                                                               sse_read, st, sse_free);
    if (!r) {
        free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return queue(s, c, MHD_HTTP_OK, "text/event-stream; charset=utf-8", r);
}

/* ---- routing ------------------------------------------------------------------------------ */

static const char forbidden_text[] =
    "403 forbidden: this server needs its token. Open the jupyter_url the session printed (it "
    "ends in ?token=...), or send the header 'Authorization: token <token>'.\n";

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    (void)upload_data;
    seer_http_server_t *s = cls;
    int get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    /* Refusals go out at once (MHD then closes the connection rather than read a body). */
    if (!authorized(s, c)) return reply_text(s, c, MHD_HTTP_FORBIDDEN, forbidden_text);
    /* A GET is answered on the second call: MHD keeps a connection alive only when the
     * request has been read to its end before the response is queued. */
    static char seen;
    if (get && *con_cls != &seen) {
        *con_cls = &seen;
        return MHD_YES;
    }
    if (get && *upload_data_size) {
        *upload_data_size = 0; /* a GET body means nothing here */
        return MHD_YES;
    }
    static const char nb[] = "/notebooks/", api[] = "/api/notebooks/", ev[] = "/events";
    enum { NONE, INDEX, INFO, PAGE, SNAPSHOT, EVENTS } route = NONE;
    const char *name = NULL;
    size_t n = 0;
    if (strcmp(url, "/") == 0) {
        route = INDEX;
    } else if (strcmp(url, "/api/info") == 0) {
        route = INFO;
    } else if (strncmp(url, nb, sizeof nb - 1) == 0) {
        name = url + sizeof nb - 1;
        n = strlen(name);
        route = PAGE;
    } else if (strncmp(url, api, sizeof api - 1) == 0) {
        name = url + sizeof api - 1;
        n = strlen(name);
        route = SNAPSHOT;
        if (n > sizeof ev - 1 && strcmp(name + n - (sizeof ev - 1), ev) == 0) {
            n -= sizeof ev - 1;
            route = EVENTS;
        }
    }
    if (name && !seer_http_channel_valid(name, n)) route = NONE;
    if (route == NONE) return reply_text(s, c, MHD_HTTP_NOT_FOUND, "404 not found\n");
    if (!get)
        return reply_text(s, c, MHD_HTTP_METHOD_NOT_ALLOWED, "405 method not allowed: use GET\n");
    switch (route) {
    case INDEX: return reply_index(s, c);
    case INFO:
        return queue(s, c, MHD_HTTP_OK, "application/json",
                     MHD_create_response_from_buffer(s->info_len, s->info, MHD_RESPMEM_PERSISTENT));
    case PAGE:
        /* The page is the same for every channel; it reads its channel from its own URL and
         * waits for a session that has not published yet. */
        return queue(s, c, MHD_HTTP_OK, "text/html; charset=utf-8",
                     MHD_create_response_from_buffer(sizeof seer_live_page_html - 1,
                                                     (void *)seer_live_page_html,
                                                     MHD_RESPMEM_PERSISTENT));
    case SNAPSHOT: return reply_snapshot(s, c, name, n);
    case EVENTS: return reply_events(s, c, name, n);
    default: return reply_text(s, c, MHD_HTTP_NOT_FOUND, "404 not found\n");
    }
}

/* ---- Content-Security-Policy ------------------------------------------------------------- */

/* Appends 'sha256-...' for every <tag>...</tag> body in the page: the policy then admits the
 * page's own inline script and style and nothing else (no 'unsafe-inline'). */
static int add_hashes(buf_t *b, const char *page, const char *tag) {
    char open[16], close[16];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    int count = 0;
    for (const char *p = strstr(page, open); p; p = strstr(p, open)) {
        p += strlen(open);
        const char *e = strstr(p, close);
        if (!e) return -1;
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int mdlen = 0;
        if (!EVP_Digest(p, (size_t)(e - p), md, &mdlen, EVP_sha256(), NULL)) return -1;
        unsigned char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
        int k = EVP_EncodeBlock(b64, md, (int)mdlen);
        buf_str(b, " 'sha256-");
        buf_add(b, (const char *)b64, (size_t)k);
        buf_str(b, "'");
        count++;
        p = e;
    }
    return count;
}

static char *build_csp(seer_err_t *err) {
    buf_t b = {0};
    buf_str(&b, "default-src 'none'; script-src");
    int ns = add_hashes(&b, seer_live_page_html, "script");
    buf_str(&b, "; style-src");
    int nc = add_hashes(&b, seer_live_page_html, "style");
    /* data: images carry image/png outputs. srcdoc frames (text/html outputs) need no
     * frame-src, and they inherit this policy on top of their empty sandbox. */
    buf_str(&b, "; img-src data:; connect-src 'self'; base-uri 'none'; "
                "form-action 'none'");
    if (ns < 1 || nc < 1 || b.oom) {
        free(b.p);
        seer_err_set(err, b.oom ? SEER_ENOMEM : SEER_EINVAL,
                     "the embedded live page has no well-formed <script> or <style> block");
        return NULL;
    }
    return b.p;
}

/* ---- public API ------------------------------------------------------------------------------ */

int seer_http_listen(const char *host, int port, int *out_fd, int *out_port, seer_err_t *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0)
        return seer_err_set(err, SEER_EINVAL, "host '%s' does not resolve: %s", host, gai_strerror(g));
    int fd = -1, e = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) break;
        e = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return seer_err_set(err, SEER_EIO, "cannot listen on %s:%d: %s", host, port, strerror(e));
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        e = errno;
        close(fd);
        return seer_err_set(err, SEER_EIO, "getsockname: %s", strerror(e));
    }
    *out_port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    *out_fd = fd;
    return SEER_OK;
}

/* ---- the gate: unauthenticated connections never reach libmicrohttpd ------------------------
 *
 * MHD gives each connection a thread and a slot under one connection limit, and a client that
 * has not sent its headers yet holds both. A few hundred idle sockets from anyone who can
 * reach the port would then fill the limit and lock out the researcher. So the listening socket
 * belongs to this gate instead: one thread accepts, reads each request head with MSG_PEEK
 * (nothing is consumed, so MHD later reads the request exactly as the client sent it), checks
 * the token, and hands only connections that proved they hold it to MHD (MHD_add_connection).
 * Everything else is answered and closed by the gate, which costs a few dozen bytes per
 * pending connection and no thread:
 *   - the whole head must arrive within SEER_HTTP_GATE_HEAD_MS of the accept (a total, not an
 *     idle timer, so a head sent a byte at a time is cut off like an idle one);
 *   - a head longer than SEER_HTTP_GATE_HEAD_MAX gets 431;
 *   - pending connections are capped in total and per client address; a new connection past
 *     a cap evicts the oldest pending one (of that address, then overall) rather than being
 *     refused, so a fresh request (which sends its head at once) always gets a turn;
 *   - a body is never read for an unauthenticated request: its 401 goes out at the end of the
 *     head, so a body announced and never sent costs nothing. */

typedef struct gate_conn {
    int fd;
    socklen_t alen;
    struct sockaddr_storage addr;
    unsigned char akey[16]; /* the client address, IPv4 as a v4-mapped IPv6 address */
    uint64_t seq;           /* accept order: the smallest is evicted first */
    int64_t deadline_ms;
    size_t seen;            /* bytes of head peeked so far */
    int refusing;           /* a wrong token from an address over its failure budget: the refusal
                               goes out at deadline_ms, not at once */
} gate_conn_t;

/* Failed attempts per client address, for the guessing tarpit. */
typedef struct gate_fail {
    unsigned char akey[16];
    int64_t window_ms; /* start of the current window */
    unsigned count;
} gate_fail_t;

struct seer_http_gate {
    pthread_t thread;
    int started;
    int listen_fd, wake_fd;
    struct MHD_Daemon *daemon;
    char *token;
    size_t token_len;
    int query_token;
    char *reject; /* the whole 401 response */
    size_t reject_len;
    size_t max_pending, max_per_addr;
    atomic_int stop;
    gate_conn_t *conns;
    size_t n;
    uint64_t next_seq;
    gate_fail_t fails[64];
    atomic_ullong stats[SEER_HTTP_GATE_NSTATS];
};

const char *const seer_http_gate_stat_names[SEER_HTTP_GATE_NSTATS] = {
    "accepted", "authorized", "unauthorized", "timed_out", "evicted", "too_large", "server_full", "tarpitted"};

static int64_t mono_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void gate_count(seer_http_gate_t *g, int which) { atomic_fetch_add(&g->stats[which], 1); }

static void addr_key(const struct sockaddr_storage *sa, unsigned char key[16]) {
    memset(key, 0, 16);
    if (sa->ss_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->ss_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    }
}

/* Best effort, never blocking: a peer that does not read its refusal just loses it. */
static void gate_send(int fd, const char *text, size_t n) {
    ssize_t w = send(fd, text, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
}

static void gate_refuse(int fd, unsigned status, const char *reason) {
    char msg[256];
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 %u %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\r\n%s\n",
                     status, reason, strlen(reason) + 1, reason);
    if (n > 0) gate_send(fd, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
}

/* Consumes what the peer sent (so close() sends FIN, not a reset that could overtake the
 * answer), stops writing, and closes. */
static void gate_close_fd(int fd) {
    char sink[4096];
    for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++) {
    }
    shutdown(fd, SHUT_WR);
    close(fd);
}

static void gate_drop(seer_http_gate_t *g, size_t i) {
    g->conns[i] = g->conns[--g->n];
}

static void gate_evict(seer_http_gate_t *g, size_t i) {
    gate_refuse(g->conns[i].fd, 503, "503 busy: too many connections that have not sent a request");
    gate_close_fd(g->conns[i].fd);
    gate_drop(g, i);
    gate_count(g, SEER_HTTP_GATE_EVICTED);
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Compares in time that depends only on the token's length. */
static int gate_token_ok(const seer_http_gate_t *g, const char *given, size_t n) {
    unsigned char diff = n != g->token_len;
    for (size_t i = 0; i < g->token_len; i++)
        diff |= (unsigned char)g->token[i] ^ (unsigned char)(i < n ? given[i] : 0);
    return diff == 0;
}

/* 1 if the head (request line and headers, n bytes, not NUL-terminated) carries the token:
 * `Authorization: Bearer|token <token>`, or `?token=` / `&token=` in the target when the server
 * allows that. Only decides who reaches MHD; the server checks the request again there. */
static int gate_authorized(const seer_http_gate_t *g, const char *h, size_t n) {
    const char *end = h + n;
    const char *eol = memchr(h, '\n', n);
    if (!eol) return 0;
    if (g->query_token) {
        const char *sp = memchr(h, ' ', (size_t)(eol - h));
        const char *t = sp ? sp + 1 : eol;
        const char *te = memchr(t, ' ', (size_t)(eol - t));
        if (!te) te = eol;
        const char *q = memchr(t, '?', (size_t)(te - t));
        while (q && q < te) {
            const char *k = q + 1;
            const char *amp = memchr(k, '&', (size_t)(te - k));
            const char *ke = amp ? amp : te;
            if (ke - k > 6 && memcmp(k, "token=", 6) == 0) {
                char v[512];
                size_t vn = 0;
                for (const char *p = k + 6; p < ke && vn < sizeof v; p++) {
                    if (*p == '%' && ke - p > 2 && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
                        v[vn++] = (char)(hexval(p[1]) * 16 + hexval(p[2]));
                        p += 2;
                    } else {
                        v[vn++] = *p == '+' ? ' ' : *p;
                    }
                }
                if (gate_token_ok(g, v, vn)) return 1;
            }
            q = amp;
        }
    }
    for (const char *line = eol + 1; line < end;) {
        const char *le = memchr(line, '\n', (size_t)(end - line));
        if (!le) le = end;
        static const char name[] = "authorization:";
        if ((size_t)(le - line) > sizeof name - 1 && strncasecmp(line, name, sizeof name - 1) == 0) {
            const char *a = line + sizeof name - 1, *ae = le;
            while (ae > a && (ae[-1] == '\r' || ae[-1] == ' ' || ae[-1] == '\t')) ae--;
            while (a < ae && (*a == ' ' || *a == '\t')) a++;
            size_t skip = 0;
            if (ae - a > 6 && strncasecmp(a, "bearer", 6) == 0 && (a[6] == ' ' || a[6] == '\t')) skip = 6;
            else if (ae - a > 5 && strncasecmp(a, "token", 5) == 0 && (a[5] == ' ' || a[5] == '\t')) skip = 5;
            if (skip) {
                a += skip;
                while (a < ae && (*a == ' ' || *a == '\t')) a++;
                if (gate_token_ok(g, a, (size_t)(ae - a))) return 1;
            }
        }
        line = le + 1;
    }
    return 0;
}

/* Counts a failed attempt from akey; 1 if the address is over its budget
 * (SEER_HTTP_GATE_FAIL_BURST in SEER_HTTP_GATE_FAIL_WINDOW_MS). */
static int gate_failed(seer_http_gate_t *g, const unsigned char akey[16]) {
    int64_t now = mono_ms();
    gate_fail_t *slot = NULL, *oldest = &g->fails[0];
    for (size_t i = 0; i < sizeof g->fails / sizeof g->fails[0]; i++) {
        gate_fail_t *f = &g->fails[i];
        if (f->count && memcmp(f->akey, akey, 16) == 0) {
            slot = f;
            break;
        }
        if (f->window_ms < oldest->window_ms || !f->count) oldest = f;
    }
    if (!slot) {
        slot = oldest;
        memcpy(slot->akey, akey, 16);
        slot->count = 0;
        slot->window_ms = now;
    }
    if (now - slot->window_ms > SEER_HTTP_GATE_FAIL_WINDOW_MS) {
        slot->window_ms = now;
        slot->count = 0;
    }
    slot->count++;
    return slot->count > SEER_HTTP_GATE_FAIL_BURST;
}

/* The end of the head (the byte after the blank line), or 0 while it is incomplete. */
static size_t head_end(const char *b, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (b[i] != '\n') continue;
        if (b[i + 1] == '\n') return i + 2;
        if (i + 2 < n && b[i + 1] == '\r' && b[i + 2] == '\n') return i + 3;
    }
    return 0;
}

/* Looks at what conns[i] has sent. Returns 1 if the connection left the gate (handed to MHD,
 * answered, or gone), 0 if it keeps waiting. */
static int gate_examine(seer_http_gate_t *g, size_t i, char *buf) {
    gate_conn_t *c = &g->conns[i];
    ssize_t k = recv(c->fd, buf, SEER_HTTP_GATE_HEAD_MAX, MSG_PEEK | MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    if (k <= 0) { /* the peer left (or reset) before sending a whole head */
        close(c->fd);
        gate_drop(g, i);
        return 1;
    }
    size_t n = (size_t)k, he = head_end(buf, n);
    if (he == 0) {
        if (n >= SEER_HTTP_GATE_HEAD_MAX) {
            gate_refuse(c->fd, 431, "431 request header fields too large");
            gate_close_fd(c->fd);
            gate_drop(g, i);
            gate_count(g, SEER_HTTP_GATE_TOO_LARGE);
            return 1;
        }
        /* Wake again only when more than what is already here has arrived: poll would
         * otherwise report the unconsumed bytes as readable forever. */
        int low = (int)n + 1;
        setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &low, sizeof low);
        c->seen = n;
        return 0;
    }
    if (gate_authorized(g, buf, he)) {
        int one = 1;
        setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
        int fd = c->fd;
        struct sockaddr_storage sa = c->addr;
        socklen_t alen = c->alen;
        gate_drop(g, i);
        /* MHD owns (and closes) the socket from here, whether it takes it or not. */
        if (MHD_add_connection(g->daemon, fd, (struct sockaddr *)&sa, alen) == MHD_YES)
            gate_count(g, SEER_HTTP_GATE_AUTHORIZED);
        else
            gate_count(g, SEER_HTTP_GATE_MHD_FULL);
        return 1;
    }
    gate_count(g, SEER_HTTP_GATE_UNAUTHORIZED);
    if (gate_failed(g, c->akey)) {
        /* Over the budget: the answer waits, so one address learns at most max_per_addr
         * results a second however many connections it opens (a new one past the cap evicts
         * a waiting one, whose answer is then lost). A right token is never delayed. */
        c->refusing = 1;
        c->deadline_ms = mono_ms() + SEER_HTTP_GATE_TARPIT_MS;
        gate_count(g, SEER_HTTP_GATE_TARPITTED);
        return 0;
    }
    gate_send(c->fd, g->reject, g->reject_len);
    gate_close_fd(c->fd);
    gate_drop(g, i);
    return 1;
}

static void gate_accept(seer_http_gate_t *g, char *buf) {
    /* A bounded batch, so connections already waiting get looked at between batches. */
    for (int batch = 0; batch < 256; batch++) {
        struct sockaddr_storage sa;
        socklen_t alen = sizeof sa;
        int fd = accept4(g->listen_fd, (struct sockaddr *)&sa, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if ((errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) && g->n > 0) {
                /* Out of descriptors: the oldest pending connection makes room, so the listening
                 * socket does not stay readable with nothing accepted. */
                size_t old = 0;
                for (size_t j = 1; j < g->n; j++)
                    if (g->conns[j].seq < g->conns[old].seq) old = j;
                gate_evict(g, old);
                continue;
            }
            return;
        }
        gate_count(g, SEER_HTTP_GATE_ACCEPTED);
        unsigned char key[16];
        addr_key(&sa, key);
        size_t same = 0, oldest_same = SIZE_MAX, oldest = SIZE_MAX;
        for (size_t j = 0; j < g->n; j++) {
            if (oldest == SIZE_MAX || g->conns[j].seq < g->conns[oldest].seq) oldest = j;
            if (memcmp(g->conns[j].akey, key, 16) == 0) {
                same++;
                if (oldest_same == SIZE_MAX || g->conns[j].seq < g->conns[oldest_same].seq) oldest_same = j;
            }
        }
        if (same >= g->max_per_addr) gate_evict(g, oldest_same);
        else if (g->n >= g->max_pending) gate_evict(g, oldest);
        gate_conn_t *c = &g->conns[g->n++];
        memset(c, 0, sizeof *c);
        c->fd = fd;
        c->addr = sa;
        c->alen = alen;
        memcpy(c->akey, key, 16);
        c->seq = g->next_seq++;
        c->deadline_ms = mono_ms() + SEER_HTTP_GATE_HEAD_MS;
        /* A request that waited in the backlog has its head here already: look now, before a
         * flood behind it can evict it. */
        gate_examine(g, g->n - 1, buf);
    }
}

static void *gate_main(void *arg) {
    seer_http_gate_t *g = arg;
    char *buf = malloc(SEER_HTTP_GATE_HEAD_MAX);
    struct pollfd *pf = calloc(g->max_pending + 2, sizeof *pf);
    if (!buf || !pf) { /* cannot run: nothing can be served, but the server still closes cleanly */
        free(buf);
        free(pf);
        return NULL;
    }
    while (!atomic_load(&g->stop)) {
        int64_t now = mono_ms(), next = now + 1000;
        for (size_t i = 0; i < g->n;) {
            if (g->conns[i].deadline_ms <= now && g->conns[i].refusing) {
                gate_send(g->conns[i].fd, g->reject, g->reject_len);
                gate_close_fd(g->conns[i].fd);
                gate_drop(g, i);
                continue;
            }
            if (g->conns[i].deadline_ms <= now) {
                gate_refuse(g->conns[i].fd, 408, "408 request timeout: the request head did not arrive in time");
                gate_close_fd(g->conns[i].fd);
                gate_drop(g, i);
                gate_count(g, SEER_HTTP_GATE_TIMED_OUT);
                continue;
            }
            if (g->conns[i].deadline_ms < next) next = g->conns[i].deadline_ms;
            i++;
        }
        pf[0] = (struct pollfd){.fd = g->wake_fd, .events = POLLIN};
        pf[1] = (struct pollfd){.fd = g->listen_fd, .events = POLLIN};
        size_t np = g->n;
        for (size_t i = 0; i < np; i++)
            pf[i + 2] = (struct pollfd){.fd = g->conns[i].fd,
                                        .events = g->conns[i].refusing ? POLLRDHUP : POLLIN | POLLRDHUP};
        int r = poll(pf, np + 2, (int)(next - now + 1));
        if (r < 0) continue;
        if (pf[0].revents) break;
        /* Back to front: gate_drop moves the last entry into the hole, which was seen already. */
        for (size_t i = np; i-- > 0;) {
            if (!pf[i + 2].revents || i >= g->n || g->conns[i].fd != pf[i + 2].fd) continue;
            if (!g->conns[i].refusing) {
                gate_examine(g, i, buf);
            } else if (pf[i + 2].revents & (POLLHUP | POLLERR | POLLRDHUP)) { /* it gave up waiting */
                close(g->conns[i].fd);
                gate_drop(g, i);
            }
        }
        if (pf[1].revents & POLLIN) gate_accept(g, buf);
    }
    for (size_t i = 0; i < g->n; i++) close(g->conns[i].fd);
    g->n = 0;
    free(buf);
    free(pf);
    return NULL;
}

static void gate_free(seer_http_gate_t *g) {
    if (g->wake_fd >= 0) close(g->wake_fd);
    if (g->listen_fd >= 0) close(g->listen_fd);
    free(g->token);
    free(g->reject);
    free(g->conns);
    free(g);
}

int seer_http_gate_start(seer_http_gate_t **out, const seer_http_gate_opts_t *o, seer_err_t *err) {
    *out = NULL;
    if (!o->token || !*o->token) return seer_err_set(err, SEER_EINVAL, "the gate needs a non-empty token");
    seer_http_gate_t *g = calloc(1, sizeof *g);
    if (!g) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    g->listen_fd = o->listen_fd;
    g->wake_fd = -1;
    g->daemon = o->daemon;
    g->query_token = o->query_token;
    g->token = strdup(o->token);
    g->token_len = g->token ? strlen(g->token) : 0;
    /* Two descriptors per pending connection would be the most a flood could cost; stay well
     * inside the process's limit so kernels, ZMQ and MHD keep theirs. */
    struct rlimit rl;
    size_t cap = SEER_HTTP_GATE_MAX_PENDING;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 4 < cap)
        cap = rl.rlim_cur / 4 < 16 ? 16 : (size_t)(rl.rlim_cur / 4);
    g->max_pending = cap;
    g->max_per_addr = SEER_HTTP_GATE_MAX_PER_ADDR < cap ? SEER_HTTP_GATE_MAX_PER_ADDR : cap;
    g->conns = calloc(cap, sizeof *g->conns);
    const char *body = o->reject_body ? o->reject_body : "401 unauthorized: this server needs its token\n";
    const char *ctype = o->reject_type ? o->reject_type : "text/plain; charset=utf-8";
    const char *extra = o->reject_headers ? o->reject_headers : "";
    unsigned status = o->reject_status ? o->reject_status : 401;
    size_t rn = strlen(body) + strlen(ctype) + strlen(extra) + 200;
    g->reject = malloc(rn);
    if (g->reject)
        g->reject_len = (size_t)snprintf(g->reject, rn,
                                         "HTTP/1.1 %u %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                                         "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n%s",
                                         status, status == 403 ? "Forbidden" : "Unauthorized", ctype, strlen(body),
                                         extra, body);
    g->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!g->token || !g->conns || !g->reject || g->wake_fd < 0) {
        g->listen_fd = -1; /* the caller still owns it on failure */
        gate_free(g);
        return seer_err_set(err, SEER_ENOMEM, "out of memory (or eventfd failed) starting the HTTP gate");
    }
    int fl = fcntl(g->listen_fd, F_GETFL);
    if (fl >= 0) fcntl(g->listen_fd, F_SETFL, fl | O_NONBLOCK);
    /* The gate thread takes no signals: a Ctrl-C must reach the thread whose loop handles it
     * (the server's main loop), not wake this poll. The mask is inherited at creation. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&g->thread, NULL, gate_main, g);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        g->listen_fd = -1;
        gate_free(g);
        return seer_err_set(err, SEER_EIO, "cannot start the HTTP gate thread: %s", strerror(rc));
    }
    g->started = 1;
    *out = g;
    return SEER_OK;
}

void seer_http_gate_stop(seer_http_gate_t *g) {
    if (!g) return;
    atomic_store(&g->stop, 1);
    uint64_t one = 1;
    if (write(g->wake_fd, &one, sizeof one) < 0) { /* an eventfd counter this small cannot overflow */
    }
    if (g->started) pthread_join(g->thread, NULL);
    gate_free(g);
}

void seer_http_gate_stats(seer_http_gate_t *g, unsigned long long out[SEER_HTTP_GATE_NSTATS]) {
    for (int i = 0; i < SEER_HTTP_GATE_NSTATS; i++) out[i] = atomic_load(&g->stats[i]);
}


static void server_free(seer_http_server_t *s) {
    for (channel_t *c = s->channels, *next; c; c = next) {
        next = c->next;
        snap_unref(c->snap);
        pthread_cond_destroy(&c->cond);
        free(c);
    }
    pthread_mutex_destroy(&s->mu);
    free(s->token);
    free(s->info);
    free(s->csp);
    free(s);
}

int seer_http_serve(seer_http_server_t **out, const seer_http_opts_t *opts, seer_err_t *err) {
    *out = NULL;
    const char *host = opts->host ? opts->host : "127.0.0.1";
    if (opts->port < 0 || opts->port > 65535)
        return seer_err_set(err, SEER_EINVAL, "port must be 0..65535 (0 picks a free one), got %d", opts->port);
    if (!opts->token || !*opts->token)
        return seer_err_set(err, SEER_EINVAL, "token must be a non-empty string");
    const char *info = opts->info_json ? opts->info_json : "{}";
    cJSON *iv = parse_json("info", info, strlen(info), err);
    if (!iv) return SEER_EINVAL;
    cJSON_Delete(iv);

    seer_http_server_t *s = calloc(1, sizeof *s);
    if (!s) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->token = strdup(opts->token);
    s->info = strdup(info);
    s->csp = build_csp(err);
    if (!s->token || !s->info || !s->csp) {
        int rc = s->csp ? seer_err_set(err, SEER_ENOMEM, "out of memory") : err ? err->code : SEER_ENOMEM;
        server_free(s);
        return rc;
    }
    s->token_len = strlen(s->token);
    s->info_len = strlen(s->info);

    int fd = -1;
    int rc = seer_http_listen(host, opts->port, &fd, &s->port, err);
    if (rc < 0) {
        server_free(s);
        return rc;
    }
    /* A thread per connection: an event stream may block in its content callback waiting for
     * the next version, which the internal select/poll modes do not allow. Only connections
     * that carry the token get here (the gate answers the rest without a thread), so the
     * thread count is bounded by SEER_HTTP_AUTHORIZED_MAX and no stranger can use it up. */
    s->daemon = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
            MHD_USE_NO_LISTEN_SOCKET,
        0, NULL, NULL, on_request, s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)SEER_HTTP_AUTHORIZED_MAX,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(2 * SEER_HTTP_GATE_HEAD_MAX),
        MHD_OPTION_END);
    if (!s->daemon) {
        close(fd);
        server_free(s);
        return seer_err_set(err, SEER_EIO, "libmicrohttpd could not start on %s:%d", host, opts->port);
    }
    /* The gate's refusals carry the same security headers as every other answer. */
    size_t hn = strlen(s->csp) + 128;
    char *hdrs = malloc(hn);
    if (!hdrs) {
        close(fd);
        MHD_stop_daemon(s->daemon);
        server_free(s);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }
    snprintf(hdrs, hn, "Content-Security-Policy: %s\r\nX-Content-Type-Options: nosniff\r\n"
                       "Referrer-Policy: no-referrer\r\n", s->csp);
    seer_http_gate_opts_t go = {.listen_fd = fd, .daemon = s->daemon, .token = s->token, .query_token = 1,
                                .reject_status = 403, .reject_body = forbidden_text, .reject_headers = hdrs};
    rc = seer_http_gate_start(&s->gate, &go, err);
    free(hdrs);
    if (rc < 0) {
        close(fd);
        MHD_stop_daemon(s->daemon);
        server_free(s);
        return rc;
    }
    *out = s;
    return SEER_OK;
}

int seer_http_port(const seer_http_server_t *s) { return s->port; }

int seer_http_publish(seer_http_server_t *s, const char *channel, const char *json, size_t n,
                      seer_err_t *err) {
    size_t cn = strlen(channel);
    if (!seer_http_channel_valid(channel, cn))
        return seer_err_set(err, SEER_EINVAL, "channel must be 1 to %d characters of A-Z a-z 0-9 . _ -, got '%.*s'",
                            SEER_HTTP_CHANNEL_MAX, (int)(cn > 160 ? 160 : cn), channel);
    /* Checked without a tree (a notebook can be megabytes, and is published often): exactly one
     * JSON value, an object, valid UTF-8 and no NUL, so a browser never receives something
     * JSON.parse rejects. metadata.seer.path, the channel list's title, is read on the way. */
    static const char *const title_path[] = { "metadata", "seer", "path" };
    const char *raw = NULL;
    size_t raw_n = 0, bad = 0;
    if (memchr(json, '\0', n)) return seer_err_set(err, SEER_EINVAL, "json_text contains a NUL byte");
    int checked = seer_json_check(json, n, &bad, title_path, 3, &raw, &raw_n);
    if (checked == -2)
        return seer_err_set(err, SEER_EINVAL, "json_text has text after the JSON value (byte %zu)", bad);
    if (checked != 0) {
        size_t ub;
        if (!seer_utf8_validate(json, n, &ub))
            return seer_err_set(err, SEER_EINVAL, "json_text is not valid UTF-8 (byte %zu)", ub);
        return seer_err_set(err, SEER_EINVAL, "json_text is not valid JSON (error near byte %zu: \"%.20s\")", bad,
                            json + bad);
    }
    size_t first = 0;
    while (first < n && (json[first] == ' ' || json[first] == '\t' || json[first] == '\n' || json[first] == '\r')) first++;
    if (json[first] != '{') {
        char c = json[first];
        const char *type = c == '[' ? "an array" : c == '"' ? "a string" : (c == 't' || c == 'f') ? "a boolean"
                           : c == 'n' ? "null" : "a number";
        return seer_err_set(err, SEER_EINVAL, "json_text must be a JSON object (a notebook), got %s", type);
    }
    snap_t *sn = calloc(1, sizeof *sn);
    if (sn && raw) {
        if (!memchr(raw, '\\', raw_n)) {
            sn->title = strndup(raw, raw_n);
        } else { /* escapes: decode just this string */
            cJSON *t = cJSON_ParseWithLength(raw - 1, raw_n + 2);
            if (cJSON_IsString(t)) sn->title = strdup(t->valuestring);
            cJSON_Delete(t);
        }
    }

    /* SSE data may not contain line breaks; JSON has them only as whitespace between tokens
     * (never raw inside strings), so each line becomes a "data:" line and the browser's
     * re-joining with \n gives back equivalent JSON. */
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) lines += json[i] == '\n' || json[i] == '\r';
    if (sn) {
        atomic_init(&sn->refs, 1);
        sn->json = malloc(n ? n : 1);
        sn->event = malloc(n + lines * 7 + 2);
    }
    if (!sn || !sn->json || !sn->event) {
        if (sn) {
            free(sn->title);
            free(sn->json);
            free(sn->event);
            free(sn);
        }
        return seer_err_set(err, SEER_ENOMEM, "out of memory publishing %zu bytes", n);
    }
    memcpy(sn->json, json, n);
    sn->json_len = n;
    char *o = sn->event;
    memcpy(o, "data: ", 6);
    o += 6;
    for (size_t i = 0; i < n; i++) {
        if (json[i] == '\n' || json[i] == '\r') {
            memcpy(o, "\ndata: ", 7);
            o += 7;
        } else {
            *o++ = json[i];
        }
    }
    *o++ = '\n';
    *o++ = '\n';
    sn->event_len = (size_t)(o - sn->event);

    snap_t *old = NULL;
    pthread_mutex_lock(&s->mu);
    channel_t *ch = channel_get(s, channel, cn);
    if (ch) {
        old = ch->snap;
        ch->snap = sn;
        ch->version = ++s->last_version;
        pthread_cond_broadcast(&ch->cond);
    }
    pthread_mutex_unlock(&s->mu);
    if (!ch) {
        snap_unref(sn);
        return seer_err_set(err, SEER_ENOMEM, "out of memory adding channel '%s'", channel);
    }
    snap_unref(old);
    return SEER_OK;
}

int seer_http_remove(seer_http_server_t *s, const char *channel, seer_err_t *err) {
    size_t cn = strlen(channel);
    if (!seer_http_channel_valid(channel, cn))
        return seer_err_set(err, SEER_EINVAL, "channel must be 1 to %d characters of A-Z a-z 0-9 . _ -, got '%.*s'",
                            SEER_HTTP_CHANNEL_MAX, (int)(cn > 160 ? 160 : cn), channel);
    snap_t *old = NULL;
    pthread_mutex_lock(&s->mu);
    channel_t *ch = channel_find(s, channel, cn);
    if (ch && ch->snap) {
        old = ch->snap;
        ch->snap = NULL;
        ch->version = ++s->last_version;
        pthread_cond_broadcast(&ch->cond);
    }
    pthread_mutex_unlock(&s->mu);
    snap_unref(old);
    return SEER_OK;
}

void seer_http_close(seer_http_server_t *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    for (channel_t *c = s->channels; c; c = c->next) pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&s->mu);
    /* No new connections first, then join every connection thread; the streams have seen
     * `closing` and ended. */
    seer_http_gate_stop(s->gate);
    MHD_stop_daemon(s->daemon);
    server_free(s);
}

/* ---- Lua binding --------------------------------------------------------------------------- */

#define SERVER_MT "seer.http.server"

void seer_http_lua_gate_stats(lua_State *L, seer_http_gate_t *g) {
    unsigned long long v[SEER_HTTP_GATE_NSTATS];
    seer_http_gate_stats(g, v);
    lua_createtable(L, 0, SEER_HTTP_GATE_NSTATS);
    for (int i = 0; i < SEER_HTTP_GATE_NSTATS; i++) {
        lua_pushnumber(L, (lua_Number)v[i]);
        lua_setfield(L, -2, seer_http_gate_stat_names[i]);
    }
}

typedef struct {
    seer_http_server_t *srv; /* NULL once closed */
    int port;
} server_ud;

static server_ud *check_server(lua_State *L, const char *fn) {
    server_ud *u = luaL_testudata(L, 1, SERVER_MT);
    if (!u) luaL_error(L, "%s: expected a server (call it as srv:%s(...)), got %s", fn, fn, luaL_typename(L, 1));
    return u;
}

static seer_http_server_t *open_server(lua_State *L, const char *fn) {
    server_ud *u = check_server(L, fn);
    if (!u->srv) luaL_error(L, "%s: the server is closed", fn);
    return u->srv;
}

static const char *check_channel(lua_State *L, int idx, const char *fn) {
    if (lua_type(L, idx) != LUA_TSTRING)
        luaL_error(L, "%s: channel (argument 1) must be a string, got %s", fn, luaL_typename(L, idx));
    return lua_tostring(L, idx);
}

/* A value for an error message: strings and numbers as themselves, anything else by type. */
static const char *shown(lua_State *L, int idx) {
    int t = lua_type(L, idx);
    if (t == LUA_TNUMBER || t == LUA_TSTRING) {
        lua_pushvalue(L, idx);
        return lua_tostring(L, -1);
    }
    return luaL_typename(L, idx);
}

static int l_serve(lua_State *L) {
    static const char valid[] = "host, port, token, info";
    if (lua_type(L, 1) != LUA_TTABLE)
        return luaL_error(L, "http.serve: expected a table {%s}, got %s", valid, luaL_typename(L, 1));
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (!k || (strcmp(k, "host") && strcmp(k, "port") && strcmp(k, "token") && strcmp(k, "info"))) {
            return luaL_error(L, "http.serve: unknown field '%s' (valid fields: %s)", shown(L, -1), valid);
        }
    }
    seer_http_opts_t o = {0};
    lua_getfield(L, 1, "host");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "http.serve: host must be a string, got %s", luaL_typename(L, -1));
        o.host = lua_tostring(L, -1);
    }
    lua_getfield(L, 1, "port");
    if (!lua_isnil(L, -1)) {
        lua_Number p = lua_tonumber(L, -1);
        if (lua_type(L, -1) != LUA_TNUMBER || p != (lua_Number)(int)p || p < 0 || p > 65535)
            return luaL_error(L, "http.serve: port must be an integer 0..65535 (0 picks a free one), got %s",
                              shown(L, -1));
        o.port = (int)p;
    }
    lua_getfield(L, 1, "token");
    if (lua_type(L, -1) != LUA_TSTRING || lua_objlen(L, -1) == 0)
        return luaL_error(L, "http.serve: token must be a non-empty string (e.g. seer.net.new_key()), got %s",
                          lua_type(L, -1) == LUA_TSTRING ? "an empty string" : luaL_typename(L, -1));
    o.token = lua_tostring(L, -1);
    if (strlen(o.token) != lua_objlen(L, -1)) return luaL_error(L, "http.serve: token contains a NUL byte");
    lua_getfield(L, 1, "info");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "http.serve: info must be JSON text (a string), got %s", luaL_typename(L, -1));
        o.info_json = lua_tostring(L, -1);
        if (strlen(o.info_json) != lua_objlen(L, -1)) return luaL_error(L, "http.serve: info contains a NUL byte");
    }
    server_ud *u = lua_newuserdata(L, sizeof *u);
    u->srv = NULL;
    u->port = 0;
    luaL_getmetatable(L, SERVER_MT);
    lua_setmetatable(L, -2);
    seer_err_t err;
    if (seer_http_serve(&u->srv, &o, &err) < 0) return luaL_error(L, "http.serve: %s", err.msg);
    u->port = seer_http_port(u->srv);
    return 1;
}

static int l_publish(lua_State *L) {
    seer_http_server_t *s = open_server(L, "publish");
    const char *ch = check_channel(L, 2, "publish");
    if (lua_type(L, 3) != LUA_TSTRING)
        return luaL_error(L, "publish: json_text (argument 2) must be a string, got %s", luaL_typename(L, 3));
    size_t n;
    const char *json = lua_tolstring(L, 3, &n);
    seer_err_t err;
    if (seer_http_publish(s, ch, json, n, &err) < 0) return luaL_error(L, "publish: %s", err.msg);
    return 0;
}

static int l_remove(lua_State *L) {
    seer_http_server_t *s = open_server(L, "remove");
    const char *ch = check_channel(L, 2, "remove");
    seer_err_t err;
    if (seer_http_remove(s, ch, &err) < 0) return luaL_error(L, "remove: %s", err.msg);
    return 0;
}

static int l_close(lua_State *L) {
    server_ud *u = check_server(L, "close");
    seer_http_server_t *s = u->srv;
    u->srv = NULL;
    seer_http_close(s);
    return 0;
}

/* srv:stats() -> {accepted, authorized, unauthorized, timed_out, evicted, too_large, server_full}:
 * what the gate did with the connections it accepted. */
static int l_stats(lua_State *L) {
    seer_http_server_t *s = open_server(L, "stats");
    seer_http_lua_gate_stats(L, s->gate);
    return 1;
}

static int l_gc(lua_State *L) {
    server_ud *u = luaL_checkudata(L, 1, SERVER_MT);
    seer_http_server_t *s = u->srv;
    u->srv = NULL;
    seer_http_close(s);
    return 0;
}

static int l_tostring(lua_State *L) {
    server_ud *u = luaL_checkudata(L, 1, SERVER_MT);
    if (u->srv) lua_pushfstring(L, "seer.http.server(port %d)", u->port);
    else lua_pushstring(L, "seer.http.server(closed)");
    return 1;
}

static int l_index(lua_State *L) {
    server_ud *u = luaL_checkudata(L, 1, SERVER_MT);
    const char *k = lua_tostring(L, 2);
    if (k && strcmp(k, "port") == 0) {
        lua_pushinteger(L, u->port);
        return 1;
    }
    lua_getmetatable(L, 1);
    lua_getfield(L, -1, "methods");
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

int seer_http_luaopen(lua_State *L) {
    if (luaL_newmetatable(L, SERVER_MT)) {
        static const luaL_Reg methods[] = {
            {"publish", l_publish}, {"remove", l_remove}, {"close", l_close}, {"stats", l_stats}, {NULL, NULL}};
        lua_newtable(L);
        luaL_setfuncs(L, methods, 0);
        lua_setfield(L, -2, "methods");
        lua_pushcfunction(L, l_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, l_serve);
    lua_setfield(L, -2, "serve");
    return 1;
}
