/* The Jupyter multipart message on a ZMQ socket: routing ids, "<IDS|MSG>", the hex HMAC of the
 * next four frames, header, parent header, metadata, content, then binary buffers. Received
 * messages are verified before anyone sees them; a message that fails is dropped and counted.
 * Also the header builder and a JSON string writer that never produces invalid JSON. */
#include "net.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zmq.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

static const char DELIM[] = "<IDS|MSG>";
#define DELIM_LEN (sizeof DELIM - 1)

/* ---- the process's ZMQ context --------------------------------------------------------------
 * ZMQ wants one context per process (it owns the I/O thread); everything that opens a socket
 * takes it from here. It lives until the process exits: terminating it would block on any
 * socket some other part of the process still holds. */
static void *g_ctx;
static pthread_once_t g_ctx_once = PTHREAD_ONCE_INIT;

static void make_ctx(void) {
    g_ctx = zmq_ctx_new();
    /* zmq_ctx_term must not wait for unsent messages: sockets are closed with linger 0, and a
     * kernel that is told to shut down should not hang on a vanished peer. */
    if (g_ctx) zmq_ctx_set(g_ctx, ZMQ_BLOCKY, 0);
}

void *seer_net_context(seer_err_t *err) {
    pthread_once(&g_ctx_once, make_ctx);
    if (!g_ctx) seer_err_set(err, SEER_EIO, "cannot create a ZMQ context: %s", zmq_strerror(zmq_errno()));
    return g_ctx;
}

/* ---- dropped messages ----------------------------------------------------------------------- */

static atomic_ulong g_dropped;

unsigned long seer_net_dropped_count(void) { return atomic_load(&g_dropped); }

/* One line per dropped message would let a peer that sends garbage in a loop fill the log (and
 * spend the receiver's time writing it): at most DROP_LOG_PER_S lines a second, then one line
 * that says how many were not shown. */
#define DROP_LOG_PER_S 10
static pthread_mutex_t g_drop_mu = PTHREAD_MUTEX_INITIALIZER;
static time_t g_drop_sec;
static unsigned long g_drop_in_sec, g_drop_hidden;

static void drop(const char *why) {
    unsigned long n = atomic_fetch_add(&g_dropped, 1) + 1;
    time_t now = time(NULL);
    pthread_mutex_lock(&g_drop_mu);
    if (now != g_drop_sec) {
        if (g_drop_hidden)
            fprintf(stderr, "seer: dropped %lu more messages not shown (at most %d lines a second)\n", g_drop_hidden,
                    DROP_LOG_PER_S);
        g_drop_sec = now;
        g_drop_in_sec = g_drop_hidden = 0;
    }
    if (g_drop_in_sec++ < DROP_LOG_PER_S) fprintf(stderr, "seer: dropped a message: %s (%lu dropped so far)\n", why, n);
    else g_drop_hidden++;
    pthread_mutex_unlock(&g_drop_mu);
}

void seer_net_note_dropped(const char *why) { drop(why); }

static void rx_drop(seer_net_rx_t *rx, const char *why) {
    drop(why);
    if (rx) {
        rx->dropped++;
        snprintf(rx->why, sizeof rx->why, "%s", why);
    }
}

/* ---- sending -------------------------------------------------------------------------------- */

static int send_part(void *sock, const void *data, size_t len, int more, seer_err_t *err) {
    for (;;) {
        if (zmq_send(sock, data, len, more ? ZMQ_SNDMORE : 0) >= 0) return SEER_OK;
        if (zmq_errno() == EINTR) continue; /* the frame was not queued; a multipart message must go on */
        return seer_err_set(err, SEER_EIO, "zmq send: %s", zmq_strerror(zmq_errno()));
    }
}

int seer_net_send_frames(void *sock, const seer_net_frame_t *frames, int n, seer_err_t *err) {
    for (int i = 0; i < n; i++) {
        int rc = send_part(sock, frames[i].data, frames[i].len, i + 1 < n, err);
        if (rc < 0) return rc;
    }
    return SEER_OK;
}

int seer_net_send(void *sock, const seer_net_key_t *k, const seer_net_msg_t *m, seer_err_t *err) {
    char sig[SEER_NET_SIG_HEX + 1];
    int rc = seer_net_sign(k, m->parts, SEER_NET_NPARTS, sig, err);
    if (rc < 0) return rc;
    for (int i = 0; i < m->nidents; i++)
        if ((rc = send_part(sock, m->idents[i].data, m->idents[i].len, 1, err)) < 0) return rc;
    if ((rc = send_part(sock, DELIM, DELIM_LEN, 1, err)) < 0) return rc;
    if ((rc = send_part(sock, sig, strlen(sig), 1, err)) < 0) return rc;
    for (int i = 0; i < SEER_NET_NPARTS; i++) {
        const seer_net_frame_t *p = &m->parts[i];
        int more = i + 1 < SEER_NET_NPARTS || m->nbuffers > 0;
        if ((rc = send_part(sock, p->data ? p->data : "{}", p->data ? p->len : 2, more, err)) < 0) return rc;
    }
    for (int i = 0; i < m->nbuffers; i++)
        if ((rc = send_part(sock, m->buffers[i].data, m->buffers[i].len, i + 1 < m->nbuffers, err)) < 0) return rc;
    return SEER_OK;
}

/* ---- receiving ------------------------------------------------------------------------------ */

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until sock is readable: 1 ready, 0 timeout, SEER_EINTR, SEER_EIO. */
static int wait_readable(void *sock, long long deadline, int forever, seer_err_t *err) {
    for (;;) {
        long timeout = -1;
        if (!forever) {
            long long left = deadline - now_ms();
            timeout = left > 0 ? (long)left : 0;
        }
        zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
        int r = zmq_poll(&it, 1, timeout);
        if (r > 0) return 1;
        if (r == 0) return 0;
        if (zmq_errno() == EINTR) return SEER_EINTR;
        return seer_err_set(err, SEER_EIO, "zmq poll: %s", zmq_strerror(zmq_errno()));
    }
}

/* Reads every frame of the next message (which must be waiting). */
typedef struct {
    zmq_msg_t *v;
    int n, cap;
} frames_t;

static void frames_close(frames_t *f) {
    for (int i = 0; i < f->n; i++) zmq_msg_close(&f->v[i]);
    free(f->v);
    f->v = NULL;
    f->n = f->cap = 0;
}

/* Reads every frame of the next message (which must be waiting), keeping at most max_frames
 * frames and max_bytes bytes: past either limit the rest of the message is read and thrown away
 * at once (a multipart message must be read whole) and *over says which limit it broke (1
 * frames, 2 bytes), so a peer cannot make the receiver hold more than the limits. */
static int read_all(void *sock, frames_t *f, size_t max_frames, size_t max_bytes, int *over, seer_err_t *err) {
    f->v = NULL;
    f->n = f->cap = 0;
    *over = 0;
    size_t bytes = 0;
    for (;;) {
        if (*over) {
            zmq_msg_t junk;
            zmq_msg_init(&junk);
            int r;
            do r = zmq_msg_recv(&junk, sock, 0);
            while (r < 0 && zmq_errno() == EINTR);
            int more = r >= 0 && zmq_msg_more(&junk);
            zmq_msg_close(&junk);
            if (r < 0) {
                frames_close(f);
                return seer_err_set(err, SEER_EIO, "zmq receive: %s", zmq_strerror(zmq_errno()));
            }
            if (!more) return 1;
            continue;
        }
        if (f->n == f->cap) {
            int nc = f->cap ? f->cap * 2 : 16;
            zmq_msg_t *nv = realloc(f->v, sizeof *nv * (size_t)nc);
            if (!nv) {
                frames_close(f);
                return seer_err_set(err, SEER_ENOMEM, "out of memory receiving a message");
            }
            f->v = nv;
            f->cap = nc;
        }
        zmq_msg_t *p = &f->v[f->n];
        zmq_msg_init(p);
        int r;
        /* Once the first frame is here, the rest of a multipart message is too (ZMQ delivers
         * messages atomically); only EINTR can interrupt reading them. */
        do r = zmq_msg_recv(p, sock, f->n ? 0 : ZMQ_DONTWAIT);
        while (r < 0 && zmq_errno() == EINTR);
        if (r < 0) {
            int e = zmq_errno();
            zmq_msg_close(p);
            frames_close(f);
            if (e == EAGAIN) return 0;
            return seer_err_set(err, SEER_EIO, "zmq receive: %s", zmq_strerror(e));
        }
        f->n++;
        bytes += zmq_msg_size(p);
        int more = zmq_msg_more(p);
        if ((size_t)f->n > max_frames || bytes > max_bytes) {
            *over = (size_t)f->n > max_frames ? 1 : 2;
            frames_close(f);
            if (!more) return 1;
        } else if (!more) return 1;
    }
}

/* Copies frames [from, to) into consecutive NUL-terminated slots of dst starting at *pos. */
static void copy_frames(frames_t *f, int from, int to, seer_net_frame_t *out, char *base, size_t *pos) {
    for (int i = from; i < to; i++) {
        size_t len = zmq_msg_size(&f->v[i]);
        memcpy(base + *pos, zmq_msg_data(&f->v[i]), len);
        base[*pos + len] = '\0';
        out[i - from].data = base + *pos;
        out[i - from].len = len;
        *pos += len + 1;
    }
}

int seer_net_recv(void *sock, const seer_net_key_t *k, seer_net_msg_t *m, int timeout_ms, seer_err_t *err) {
    return seer_net_recv_rx(sock, k, NULL, m, timeout_ms, err);
}

int seer_net_recv_rx(void *sock, const seer_net_key_t *k, seer_net_rx_t *rx, seer_net_msg_t *m, int timeout_ms,
                     seer_err_t *err) {
    memset(m, 0, sizeof *m);
    size_t max_frames = rx && rx->max_frames ? rx->max_frames : SEER_NET_MAX_FRAMES;
    size_t max_bytes = rx && rx->max_bytes ? rx->max_bytes : SEER_NET_MAX_BYTES;
    long long deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        int r = wait_readable(sock, deadline, timeout_ms < 0, err);
        if (r <= 0) return r;
        frames_t f;
        int over;
        r = read_all(sock, &f, max_frames, max_bytes, &over, err);
        if (r < 0) return r;
        if (r == 0) continue; /* a spurious wake-up */
        if (over) {
            rx_drop(rx, over == 1 ? "more frames than a message may have" : "larger than a message may be");
#ifdef __GLIBC__
            /* The frames were big and are freed now; glibc keeps such memory for reuse (its
             * mmap threshold grows with what it has freed), so a peer that sends oversized
             * messages would leave the receiver that much bigger for good. Give it back. */
            if (over == 2) malloc_trim(0);
#endif
            continue;
        }
        int d = -1;
        for (int i = 0; i < f.n && d < 0; i++)
            if (zmq_msg_size(&f.v[i]) == DELIM_LEN && memcmp(zmq_msg_data(&f.v[i]), DELIM, DELIM_LEN) == 0) d = i;
        if (d < 0 || f.n < d + 2 + SEER_NET_NPARTS) {
            frames_close(&f);
            rx_drop(rx, d < 0 ? "no <IDS|MSG> delimiter" : "fewer than four frames after the signature");
            continue;
        }
        seer_net_frame_t parts[SEER_NET_NPARTS];
        for (int i = 0; i < SEER_NET_NPARTS; i++) {
            parts[i].data = zmq_msg_data(&f.v[d + 2 + i]);
            parts[i].len = zmq_msg_size(&f.v[d + 2 + i]);
        }
        int v = seer_net_verify_once(k, parts, SEER_NET_NPARTS, zmq_msg_data(&f.v[d + 1]), zmq_msg_size(&f.v[d + 1]));
        if (v <= 0) {
            frames_close(&f);
            rx_drop(rx, v == 0 ? "bad signature" : "a replay (a signature accepted before)");
            continue;
        }
        int nid = d, nbuf = f.n - (d + 2 + SEER_NET_NPARTS);
        size_t bytes = sizeof(seer_net_frame_t) * (size_t)(nid + nbuf);
        for (int i = 0; i < f.n; i++)
            if (i != d && i != d + 1) bytes += zmq_msg_size(&f.v[i]) + 1;
        char *block = malloc(bytes ? bytes : 1);
        if (!block) {
            frames_close(&f);
            return seer_err_set(err, SEER_ENOMEM, "out of memory for a %zu-byte message", bytes);
        }
        m->block = block;
        m->idents = (seer_net_frame_t *)block;
        m->nidents = nid;
        m->buffers = m->idents + nid;
        m->nbuffers = nbuf;
        size_t pos = sizeof(seer_net_frame_t) * (size_t)(nid + nbuf);
        copy_frames(&f, 0, d, m->idents, block, &pos);
        copy_frames(&f, d + 2, d + 2 + SEER_NET_NPARTS, m->parts, block, &pos);
        copy_frames(&f, d + 2 + SEER_NET_NPARTS, f.n, m->buffers, block, &pos);
        frames_close(&f);
        return 1;
    }
}

void seer_net_msg_free(seer_net_msg_t *m) {
    if (!m) return;
    free(m->block);
    memset(m, 0, sizeof *m);
}

int seer_net_recv_frames(void *sock, seer_net_frame_t **frames, void **block, int timeout_ms, seer_err_t *err) {
    *frames = NULL;
    *block = NULL;
    long long deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        int r = wait_readable(sock, deadline, timeout_ms < 0, err);
        if (r <= 0) return r;
        frames_t f;
        int over;
        r = read_all(sock, &f, SEER_NET_MAX_FRAMES, SEER_NET_MAX_BYTES, &over, err);
        if (r < 0) return r;
        if (r == 0) continue;
        if (over) {
            drop(over == 1 ? "more frames than a message may have" : "larger than a message may be");
            continue;
        }
        size_t bytes = sizeof(seer_net_frame_t) * (size_t)f.n;
        for (int i = 0; i < f.n; i++) bytes += zmq_msg_size(&f.v[i]) + 1;
        char *b = malloc(bytes);
        if (!b) {
            frames_close(&f);
            return seer_err_set(err, SEER_ENOMEM, "out of memory for a %zu-byte message", bytes);
        }
        seer_net_frame_t *fr = (seer_net_frame_t *)b;
        size_t pos = sizeof(seer_net_frame_t) * (size_t)f.n;
        copy_frames(&f, 0, f.n, fr, b, &pos);
        int n = f.n;
        frames_close(&f);
        *frames = fr;
        *block = b;
        return n;
    }
}

/* ---- JSON text -------------------------------------------------------------------------------- */

int seer_net_buf_add(seer_net_buf_t *b, const void *data, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *nd = realloc(b->data, nc);
        if (!nd) return SEER_ENOMEM;
        b->data = nd;
        b->cap = nc;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return SEER_OK;
}

void seer_net_buf_free(seer_net_buf_t *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

size_t seer_net_utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else return 0;
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

int seer_net_buf_add_json_string(seer_net_buf_t *b, const void *data, size_t n) {
    const unsigned char *s = data;
    if (seer_net_buf_add(b, "\"", 1) < 0) return SEER_ENOMEM;
    size_t run = 0; /* start of the pending run of bytes that need no escape */
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        const char *esc = NULL;
        char ubuf[8];
        size_t adv = 1;
        if (c >= 0x80) {
            adv = seer_net_utf8_seq(s + i, n - i);
            if (adv) {
                i += adv;
                continue;
            }
            esc = "\\ufffd";
            adv = 1;
        } else if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
            esc = ubuf;
        }
        if (!esc) {
            i++;
            continue;
        }
        if (seer_net_buf_add(b, s + run, i - run) < 0 || seer_net_buf_add(b, esc, strlen(esc)) < 0) return SEER_ENOMEM;
        i += adv;
        run = i;
    }
    if (seer_net_buf_add(b, s + run, n - run) < 0 || seer_net_buf_add(b, "\"", 1) < 0) return SEER_ENOMEM;
    return SEER_OK;
}

/* ---- headers --------------------------------------------------------------------------------- */

/* Appends a short JSON string to out (which has room for cap bytes); 0 or -1 when full. */
static int put_str(char *out, size_t cap, size_t *pos, const char *s) {
    size_t p = *pos;
    if (p + 1 >= cap) return -1;
    out[p++] = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (p + 7 >= cap) return -1;
        if (c == '"' || c == '\\') {
            out[p++] = '\\';
            out[p++] = (char)c;
        } else if (c < 0x20) {
            p += (size_t)snprintf(out + p, cap - p, "\\u%04x", c);
        } else {
            out[p++] = (char)c;
        }
    }
    if (p + 1 >= cap) return -1;
    out[p++] = '"';
    out[p] = '\0';
    *pos = p;
    return 0;
}

static int put_raw(char *out, size_t cap, size_t *pos, const char *s) {
    size_t n = strlen(s);
    if (*pos + n + 1 > cap) return -1;
    memcpy(out + *pos, s, n + 1);
    *pos += n;
    return 0;
}

int seer_net_header(char *out, size_t cap, const char *msg_type, const char *session, const char *username,
                    seer_err_t *err) {
    char id[SEER_NET_UUID_LEN + 1];
    int rc = seer_net_uuid(id, err);
    if (rc < 0) return rc;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char date[64];
    snprintf(date, sizeof date, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ts.tv_nsec / 1000) % 1000000);
    size_t pos = 0;
    if (put_raw(out, cap, &pos, "{\"date\":") || put_str(out, cap, &pos, date) ||
        put_raw(out, cap, &pos, ",\"msg_id\":") || put_str(out, cap, &pos, id) ||
        put_raw(out, cap, &pos, ",\"msg_type\":") || put_str(out, cap, &pos, msg_type ? msg_type : "") ||
        put_raw(out, cap, &pos, ",\"session\":") || put_str(out, cap, &pos, session ? session : "") ||
        put_raw(out, cap, &pos, ",\"username\":") || put_str(out, cap, &pos, username ? username : "") ||
        put_raw(out, cap, &pos, ",\"version\":\"" SEER_NET_PROTOCOL_VERSION "\"}"))
        return seer_err_set(err, SEER_EINVAL, "message header does not fit in %zu bytes (msg_type %.40s)", cap,
                            msg_type ? msg_type : "");
    return (int)pos;
}
