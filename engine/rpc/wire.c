/* The RPC hot path in C: what every request and reply goes through on both sides, so a small
 * call costs little more than libzmq's own round trip. Messages keep engine/net's signed Jupyter
 * layout exactly (routing ids, "<IDS|MSG>", HMAC, header, parent header, metadata, content,
 * buffers); what is here is the cheap way to make and read them: headers written from a cached
 * date prefix and a session-counter msg_id, header fields read by a scanner instead of a full
 * JSON parse, frames kept as zmq messages (buffers move to Lua or to another socket without an
 * extra copy), and a replay guard that remembers each client session's counter window instead
 * of every msg_id. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zmq.h>

#include "rpc.h"

static const char DELIM[] = "<IDS|MSG>";
#define DELIM_LEN (sizeof DELIM - 1)

/* ---- headers ------------------------------------------------------------------------------------ */

int seer_rpc_hm_init(seer_rpc_hm_t *hm, seer_err_t *err) {
    memset(hm, 0, sizeof *hm);
    hm->sec = -1;
    int rc = seer_net_uuid(hm->session, err);
    if (rc < 0) return rc;
    const char *user = getenv("USER");
    seer_net_buf_t b = {0};
    if (seer_net_buf_add_json_string(&b, user && *user ? user : "seer", strlen(user && *user ? user : "seer")) < 0)
        return seer_err_set(err, SEER_ENOMEM, "rpc: out of memory");
    snprintf(hm->user, sizeof hm->user, "%s", b.len < sizeof hm->user ? b.data : "\"seer\"");
    seer_net_buf_free(&b);
    return SEER_OK;
}

/* Appends n bytes at *p if they fit before end; returns 0 or -1. */
static int put(char **p, const char *end, const char *s, size_t n) {
    if ((size_t)(end - *p) < n) return -1;
    memcpy(*p, s, n);
    *p += n;
    return 0;
}

#define PUT_LIT(p, end, lit) put(p, end, lit, sizeof lit - 1)

int seer_rpc_header(seer_rpc_hm_t *hm, char *out, size_t cap, const char *msg_type, char *msg_id, size_t id_cap) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if ((long long)ts.tv_sec != hm->sec) {
        struct tm tm;
        time_t t = ts.tv_sec;
        gmtime_r(&t, &tm);
        strftime(hm->date_prefix, sizeof hm->date_prefix, "%Y-%m-%dT%H:%M:%S", &tm);
        hm->sec = (long long)ts.tv_sec;
    }
    /* msg_id: the session, "-", the counter in decimal */
    char digits[24];
    int nd = 0;
    unsigned long long c = ++hm->n;
    do digits[nd++] = (char)('0' + c % 10), c /= 10;
    while (c);
    size_t sl = strlen(hm->session);
    if (sl + 1 + (size_t)nd + 1 > id_cap) return SEER_EINVAL;
    memcpy(msg_id, hm->session, sl);
    msg_id[sl] = '-';
    for (int i = 0; i < nd; i++) msg_id[sl + 1 + (size_t)i] = digits[nd - 1 - i];
    size_t idl = sl + 1 + (size_t)nd;
    msg_id[idl] = 0;
    char micros[8] = ".000000";
    long us = (long)(ts.tv_nsec / 1000);
    for (int i = 6; i >= 1; i--, us /= 10) micros[i] = (char)('0' + us % 10);
    char *p = out, *end = out + cap - 1;
    if (PUT_LIT(&p, end, "{\"date\":\"") || put(&p, end, hm->date_prefix, strlen(hm->date_prefix)) ||
        put(&p, end, micros, 7) || PUT_LIT(&p, end, "Z\",\"msg_id\":\"") || put(&p, end, msg_id, idl) ||
        PUT_LIT(&p, end, "\",\"msg_type\":\"") || put(&p, end, msg_type, strlen(msg_type)) ||
        PUT_LIT(&p, end, "\",\"session\":\"") || put(&p, end, hm->session, sl) ||
        PUT_LIT(&p, end, "\",\"username\":") || put(&p, end, hm->user, strlen(hm->user)) ||
        PUT_LIT(&p, end, ",\"version\":\"" SEER_NET_PROTOCOL_VERSION "\"}"))
        return SEER_EINVAL;
    *p = 0;
    return (int)(p - out);
}

/* ---- reading a few fields of a JSON object ------------------------------------------------------ */

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* p at '"': returns just past the closing quote, or NULL. */
static const char *skip_string(const char *p, const char *e) {
    for (p++; p < e; p++) {
        if (*p == '\\') {
            if (++p >= e) return NULL;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

/* A JSON number (RFC 8259's grammar) at p: returns just past it, or NULL. */
const char *seer_rpc_json_number_end(const char *p, const char *e) {
    if (p < e && *p == '-') p++;
    if (p >= e) return NULL;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9')
        while (p < e && *p >= '0' && *p <= '9') p++;
    else return NULL;
    if (p < e && *p == '.') {
        if (++p >= e || !(*p >= '0' && *p <= '9')) return NULL;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || !(*p >= '0' && *p <= '9')) return NULL;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    return p;
}

static const char *skip_literal(const char *p, const char *e, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(e - p) >= n && memcmp(p, lit, n) == 0 ? p + n : NULL;
}

static const char *skip_value(const char *p, const char *e, int depth) {
    p = skip_ws(p, e);
    if (p >= e || depth > 64) return NULL;
    if (*p == '"') return skip_string(p, e);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        int object = *p == '{';
        p = skip_ws(p + 1, e);
        if (p < e && *p == close) return p + 1;
        for (;;) {
            if (object) {
                p = skip_ws(p, e);
                if (p >= e || *p != '"' || !(p = skip_string(p, e))) return NULL;
                p = skip_ws(p, e);
                if (p >= e || *p != ':') return NULL;
                p++;
            }
            if (!(p = skip_value(p, e, depth + 1))) return NULL;
            p = skip_ws(p, e);
            if (p >= e) return NULL;
            if (*p == close) return p + 1;
            if (*p != ',') return NULL;
            p++;
        }
    }
    if (*p == 't') return skip_literal(p, e, "true");
    if (*p == 'f') return skip_literal(p, e, "false");
    if (*p == 'n') return skip_literal(p, e, "null");
    return seer_rpc_json_number_end(p, e);
}

int seer_rpc_obj_begin(seer_rpc_obj_iter_t *it, const char *text, size_t len) {
    it->e = text + len;
    it->p = skip_ws(text, it->e);
    it->first = 1;
    if (it->p >= it->e || *it->p != '{') return -1;
    it->p++;
    return 0;
}

int seer_rpc_obj_next(seer_rpc_obj_iter_t *it, seer_rpc_str_t *key, seer_rpc_str_t *value) {
    const char *p = skip_ws(it->p, it->e), *e = it->e;
    if (p >= e) return -1;
    if (*p == '}') {
        it->p = p + 1;
        return 0;
    }
    if (!it->first) {
        if (*p != ',') return -1;
        p = skip_ws(p + 1, e);
    }
    it->first = 0;
    if (p >= e || *p != '"') return -1;
    const char *k = p + 1, *kend = skip_string(p, e);
    if (!kend) return -1;
    p = skip_ws(kend, e);
    if (p >= e || *p != ':') return -1;
    const char *v = skip_ws(p + 1, e);
    if (!(p = skip_value(v, e, 0))) return -1;
    key->p = k;
    key->n = (size_t)(kend - 1 - k);
    value->p = v;
    value->n = (size_t)(p - v);
    it->p = p;
    return 1;
}

int seer_rpc_json_fields(const char *text, size_t len, const char *const *keys, seer_rpc_str_t *out, int nkeys) {
    for (int i = 0; i < nkeys; i++) out[i].p = NULL, out[i].n = 0;
    int found = 0;
    seer_rpc_obj_iter_t it;
    if (seer_rpc_obj_begin(&it, text, len) < 0) return -1;
    seer_rpc_str_t k, v;
    int r;
    while ((r = seer_rpc_obj_next(&it, &k, &v)) == 1)
        for (int i = 0; i < nkeys; i++)
            if (!out[i].p && strlen(keys[i]) == k.n && memcmp(keys[i], k.p, k.n) == 0 && *v.p == '"') {
                out[i].p = v.p + 1;
                out[i].n = v.n - 2;
                if (++found == nkeys) return 0; /* the rest of the text is not looked at */
            }
    return r;
}

int seer_rpc_str_eq(seer_rpc_str_t s, const char *lit) {
    return s.p && strlen(lit) == s.n && memcmp(s.p, lit, s.n) == 0;
}

/* ---- messages ----------------------------------------------------------------------------------- */

void seer_rpc_msg_clear(seer_rpc_msg_t *m) {
    for (int i = 0; i < m->n; i++) zmq_msg_close(&m->f[i]);
    m->n = 0;
    m->delim = -1;
}

void seer_rpc_msg_free(seer_rpc_msg_t *m) {
    seer_rpc_msg_clear(m);
    free(m->f);
    memset(m, 0, sizeof *m);
}

void seer_rpc_msg_truncate(seer_rpc_msg_t *m, int n) {
    while (m->n > n) zmq_msg_close(&m->f[--m->n]);
}

seer_net_frame_t seer_rpc_frame(const seer_rpc_msg_t *m, int i) {
    seer_net_frame_t f = {"", 0};
    if (i >= 0 && i < m->n) {
        f.data = zmq_msg_data((zmq_msg_t *)&m->f[i]);
        f.len = zmq_msg_size((zmq_msg_t *)&m->f[i]);
    }
    return f;
}

/* Reads the rest of a message whose first frame is m->f[0]. A message of more than
 * SEER_NET_MAX_FRAMES frames is read to its end and thrown away as it comes (returns 0), so a
 * peer cannot make the receiver hold an unbounded frame list. */
static int read_rest(void *sock, seer_rpc_msg_t *m, seer_err_t *err) {
    while (zmq_msg_more(&m->f[m->n - 1])) {
        if (m->n >= SEER_NET_MAX_FRAMES) {
            zmq_msg_t junk;
            int more = 1;
            while (more) {
                zmq_msg_init(&junk);
                int r;
                do r = zmq_msg_recv(&junk, sock, 0);
                while (r < 0 && zmq_errno() == EINTR);
                more = r >= 0 && zmq_msg_more(&junk);
                zmq_msg_close(&junk);
                if (r < 0) return seer_err_set(err, SEER_EIO, "rpc: zmq receive: %s", zmq_strerror(zmq_errno()));
            }
            return 0;
        }
        if (m->n == m->cap) {
            int nc = m->cap * 2;
            zmq_msg_t *nf = realloc(m->f, sizeof *nf * (size_t)nc);
            if (!nf) return seer_err_set(err, SEER_ENOMEM, "rpc: out of memory receiving a message");
            m->f = nf;
            m->cap = nc;
        }
        zmq_msg_t *p = &m->f[m->n];
        zmq_msg_init(p);
        int r;
        /* ZMQ delivers a multipart message whole: the rest is here, only a signal can interrupt. */
        do r = zmq_msg_recv(p, sock, 0);
        while (r < 0 && zmq_errno() == EINTR);
        if (r < 0) {
            zmq_msg_close(p);
            return seer_err_set(err, SEER_EIO, "rpc: zmq receive: %s", zmq_strerror(zmq_errno()));
        }
        m->n++;
    }
    return 1;
}

int seer_rpc_recv(void *sock, const seer_net_key_t *k, seer_rpc_msg_t *m, int flags, seer_err_t *err) {
    seer_rpc_msg_clear(m);
    if (m->cap < 8) {
        zmq_msg_t *nf = realloc(m->f, sizeof *nf * 12);
        if (!nf) return seer_err_set(err, SEER_ENOMEM, "rpc: out of memory receiving a message");
        m->f = nf;
        m->cap = 12;
    }
    zmq_msg_init(&m->f[0]);
    if (zmq_msg_recv(&m->f[0], sock, flags) < 0) {
        int e = zmq_errno();
        zmq_msg_close(&m->f[0]);
        if (e == EAGAIN) return 0;
        if (e == EINTR) return SEER_EINTR;
        return seer_err_set(err, SEER_EIO, "rpc: zmq receive: %s", zmq_strerror(e));
    }
    m->n = 1;
    int rc = read_rest(sock, m, err);
    if (rc <= 0) {
        seer_rpc_msg_clear(m);
        if (rc == 0) {
            seer_net_note_dropped("more frames than a message may have");
            return SEER_RPC_DROPPED;
        }
        return rc;
    }
    m->delim = -1;
    for (int i = 0; i < m->n && m->delim < 0; i++)
        if (zmq_msg_size(&m->f[i]) == DELIM_LEN && memcmp(zmq_msg_data(&m->f[i]), DELIM, DELIM_LEN) == 0) m->delim = i;
    if (m->delim < 0 || m->n < m->delim + 2 + SEER_NET_NPARTS) {
        seer_net_note_dropped(m->delim < 0 ? "no <IDS|MSG> delimiter" : "fewer than four frames after the signature");
        seer_rpc_msg_clear(m);
        return SEER_RPC_DROPPED;
    }
    seer_net_frame_t parts[SEER_NET_NPARTS];
    for (int i = 0; i < SEER_NET_NPARTS; i++) parts[i] = seer_rpc_frame(m, m->delim + 2 + i);
    seer_net_frame_t sig = seer_rpc_frame(m, m->delim + 1);
    int v = seer_net_verify_once(k, parts, SEER_NET_NPARTS, sig.data, sig.len);
    if (v <= 0) {
        seer_net_note_dropped(v == 0 ? "bad signature" : "a replay (a signature accepted before)");
        seer_rpc_msg_clear(m);
        return SEER_RPC_DROPPED;
    }
    return 1;
}

static int send_part(void *sock, const void *data, size_t len, int more, seer_err_t *err) {
    for (;;) {
        if (zmq_send(sock, data, len, more ? ZMQ_SNDMORE : 0) >= 0) return SEER_OK;
        if (zmq_errno() == EINTR) continue; /* the frame was not queued; a multipart message must go on */
        return seer_err_set(err, SEER_EIO, "rpc: zmq send: %s", zmq_strerror(zmq_errno()));
    }
}

/* Sends a received frame (moving it) or, when it cannot move, a copy. */
static int send_msg(void *sock, zmq_msg_t *msg, int more, seer_err_t *err) {
    for (;;) {
        if (zmq_msg_send(msg, sock, more ? ZMQ_SNDMORE : 0) >= 0) return SEER_OK;
        if (zmq_errno() == EINTR) continue;
        return seer_err_set(err, SEER_EIO, "rpc: zmq send: %s", zmq_strerror(zmq_errno()));
    }
}

int seer_rpc_send(void *sock, const seer_net_key_t *k, seer_rpc_msg_t *route, int route_from, int route_to,
                  const seer_net_frame_t parts[SEER_NET_NPARTS], const seer_net_frame_t *bufs, int nbufs,
                  seer_err_t *err) {
    char sig[SEER_NET_SIG_HEX + 1];
    int rc = seer_net_sign(k, parts, SEER_NET_NPARTS, sig, err);
    if (rc < 0) return rc;
    for (int i = route_from; route && i < route_to; i++) {
        /* a routing id is needed once: it moves to the socket */
        if ((rc = send_msg(sock, &route->f[i], 1, err)) < 0) return rc;
    }
    if ((rc = send_part(sock, DELIM, DELIM_LEN, 1, err)) < 0) return rc;
    if ((rc = send_part(sock, sig, strlen(sig), 1, err)) < 0) return rc;
    for (int i = 0; i < SEER_NET_NPARTS; i++)
        if ((rc = send_part(sock, parts[i].data, parts[i].len, i + 1 < SEER_NET_NPARTS || nbufs > 0, err)) < 0)
            return rc;
    for (int i = 0; i < nbufs; i++)
        if ((rc = send_part(sock, bufs[i].data, bufs[i].len, i + 1 < nbufs, err)) < 0) return rc;
    return SEER_OK;
}

int seer_rpc_forward(void *sock, seer_rpc_msg_t *m, int from, const void *route, size_t route_len, seer_err_t *err) {
    int rc;
    if (route && (rc = send_part(sock, route, route_len, 1, err)) < 0) return rc;
    for (int i = from; i < m->n; i++)
        if ((rc = send_msg(sock, &m->f[i], i + 1 < m->n, err)) < 0) return rc;
    return SEER_OK;
}

/* ---- the replay guard --------------------------------------------------------------------------- */

/* Open-addressing string table. A value is a counter window for session-counter ids, unused for
 * ids of other shapes (which are remembered one by one). */
typedef struct {
    char *key;
    unsigned long long max;
    uint64_t bits; /* bit d: counter max - d was seen */
} slot_t;

typedef struct {
    slot_t *s;
    size_t cap, used;
} table_t;

struct seer_rpc_guard {
    table_t cur, old; /* two generations, rotated every window */
    long long rotated_ms;
    long long bounds_sec;
    char lo[32], hi[32];
    int window_s;
};

static uint64_t hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static void table_free(table_t *t) {
    for (size_t i = 0; i < t->cap; i++) free(t->s[i].key);
    free(t->s);
    memset(t, 0, sizeof *t);
}

static slot_t *table_find(table_t *t, const char *k, size_t n) {
    if (!t->cap) return NULL;
    for (size_t i = hash(k, n) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        slot_t *s = &t->s[i];
        if (!s->key) return NULL;
        if (strlen(s->key) == n && memcmp(s->key, k, n) == 0) return s;
    }
}

static slot_t *table_add(table_t *t, const char *k, size_t n) {
    if ((t->used + 1) * 2 > t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        slot_t *ns = calloc(nc, sizeof *ns);
        if (!ns) return NULL;
        for (size_t i = 0; i < t->cap; i++)
            if (t->s[i].key) {
                size_t j = hash(t->s[i].key, strlen(t->s[i].key)) & (nc - 1);
                while (ns[j].key) j = (j + 1) & (nc - 1);
                ns[j] = t->s[i];
            }
        free(t->s);
        t->s = ns;
        t->cap = nc;
    }
    size_t i = hash(k, n) & (t->cap - 1);
    while (t->s[i].key) i = (i + 1) & (t->cap - 1);
    char *key = malloc(n + 1);
    if (!key) return NULL;
    memcpy(key, k, n);
    key[n] = 0;
    t->s[i].key = key;
    t->s[i].max = 0;
    t->s[i].bits = 0;
    t->used++;
    return &t->s[i];
}

static long long mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

seer_rpc_guard_t *seer_rpc_guard_new(int window_s) {
    seer_rpc_guard_t *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->window_s = window_s;
    g->rotated_ms = mono_ms();
    g->bounds_sec = -1;
    return g;
}

void seer_rpc_guard_free(seer_rpc_guard_t *g) {
    if (!g) return;
    table_free(&g->cur);
    table_free(&g->old);
    free(g);
}

static int id_char(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_' ||
           c == '.' || c == ':';
}

/* Accepts counter c of a session whose state is s (a fresh one has bits 0). */
static int window_accept(slot_t *s, unsigned long long c) {
    if (s->bits == 0 || c > s->max) {
        unsigned long long shift = s->bits == 0 ? 64 : c - s->max;
        s->bits = shift >= 64 ? 0 : s->bits << shift;
        s->bits |= 1;
        s->max = c;
        return 1;
    }
    unsigned long long d = s->max - c;
    if (d >= 64) return 0; /* older than the window remembers: refused as a replay */
    if (s->bits & (1ULL << d)) return 0;
    s->bits |= 1ULL << d;
    return 1;
}

const char *seer_rpc_guard_check(seer_rpc_guard_t *g, seer_rpc_str_t id, seer_rpc_str_t date) {
    if (!id.p || id.n == 0 || id.n > 100) return "a bad msg_id";
    for (size_t i = 0; i < id.n; i++)
        if (!id_char(id.p[i])) return "a bad msg_id";
    /* the date: within half the window of this machine's clock (ISO 8601 dates compare as text) */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if ((long long)ts.tv_sec != g->bounds_sec) {
        struct tm tm;
        time_t lo = ts.tv_sec - g->window_s / 2, hi = ts.tv_sec + g->window_s / 2;
        gmtime_r(&lo, &tm);
        strftime(g->lo, sizeof g->lo, "%Y-%m-%dT%H:%M:%S", &tm);
        gmtime_r(&hi, &tm);
        strftime(g->hi, sizeof g->hi, "%Y-%m-%dT%H:%M:%S", &tm);
        g->bounds_sec = (long long)ts.tv_sec;
    }
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    size_t sl = sizeof shape - 1, lol = strlen(g->lo), hil = strlen(g->hi);
    if (!date.p || date.n < sl) return "a date outside the accepted window";
    for (size_t i = 0; i < sl; i++)
        if (shape[i] == 'd' ? !(date.p[i] >= '0' && date.p[i] <= '9') : date.p[i] != shape[i])
            return "a date outside the accepted window";
    int c = memcmp(date.p, g->lo, date.n < lol ? date.n : lol);
    if (c < 0 || (c == 0 && date.n < lol)) return "a date outside the accepted window";
    c = memcmp(date.p, g->hi, date.n < hil ? date.n : hil);
    if (c > 0 || (c == 0 && date.n > hil)) return "a date outside the accepted window";
    /* the id: once */
    long long now = mono_ms();
    if (now - g->rotated_ms > (long long)g->window_s * 1000) {
        table_free(&g->old);
        g->old = g->cur;
        memset(&g->cur, 0, sizeof g->cur);
        g->rotated_ms = now;
    }
    /* "<session>-<counter>" (seer's clients): one window per session */
    size_t dash = id.n;
    while (dash > 0 && id.p[dash - 1] >= '0' && id.p[dash - 1] <= '9') dash--;
    if (dash >= 2 && dash < id.n && id.n - dash <= 18 && id.p[dash - 1] == '-') {
        unsigned long long counter = strtoull(id.p + dash, NULL, 10);
        size_t sn = dash - 1;
        slot_t *s = table_find(&g->cur, id.p, sn);
        if (!s) {
            slot_t *o = table_find(&g->old, id.p, sn);
            if (!(s = table_add(&g->cur, id.p, sn))) return "no memory to remember the msg_id";
            if (o) s->max = o->max, s->bits = o->bits;
        }
        return window_accept(s, counter) ? NULL : "a replayed msg_id";
    }
    if (table_find(&g->cur, id.p, id.n) || table_find(&g->old, id.p, id.n)) return "a replayed msg_id";
    return table_add(&g->cur, id.p, id.n) ? NULL : "no memory to remember the msg_id";
}

/* ---- logging ------------------------------------------------------------------------------------- */

void seer_rpc_log(const char *name, const char *fmt, ...) {
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s [%s] %s\n", when, name, line);
    fflush(stderr);
}
