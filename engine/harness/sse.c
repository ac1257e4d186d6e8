/* The text/event-stream parser of the harness: incremental, so a network read may end anywhere
 * (inside a line, between the CR and the LF of a CRLF), following the WHATWG rules for lines,
 * fields and dispatch. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_private.h"

struct seer_harness_sse {
    seer_harness_sse_cb cb;
    void *ud;
    size_t max;
    hbuf_t line;  /* the line being read */
    hbuf_t event; /* the event name of the event being built */
    hbuf_t data;  /* its data lines, joined by '\n' */
    int have_data;
    int skip_lf; /* the last byte was CR: an LF right after it ends nothing */
};

seer_harness_sse_t *seer_harness_sse_new(seer_harness_sse_cb cb, void *ud, size_t max_event_bytes) {
    seer_harness_sse_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->cb = cb;
    p->ud = ud;
    p->max = max_event_bytes ? max_event_bytes : (size_t)64 << 20;
    return p;
}

void seer_harness_sse_free(seer_harness_sse_t *p) {
    if (!p) return;
    free(p->line.p);
    free(p->event.p);
    free(p->data.p);
    free(p);
}

static int dispatch(seer_harness_sse_t *p) {
    int rc = 0;
    if (p->have_data) rc = p->cb(p->ud, p->event.p ? p->event.p : "", p->data.p ? p->data.p : "", p->data.n);
    p->event.n = 0;
    if (p->event.p) p->event.p[0] = 0;
    p->data.n = 0;
    if (p->data.p) p->data.p[0] = 0;
    p->have_data = 0;
    return rc;
}

/* One complete line (without its terminator). */
static int take_line(seer_harness_sse_t *p, seer_err_t *err) {
    const char *s = p->line.p ? p->line.p : "";
    size_t n = p->line.n;
    if (n == 0) return dispatch(p);
    if (s[0] == ':') return 0; /* comment */
    const char *colon = memchr(s, ':', n);
    size_t fl = colon ? (size_t)(colon - s) : n;
    const char *v = colon ? colon + 1 : s + n;
    size_t vl = colon ? n - fl - 1 : 0;
    if (vl && v[0] == ' ') v++, vl--;
    if (fl == 5 && memcmp(s, "event", 5) == 0) {
        p->event.n = 0;
        if (hbuf_add(&p->event, v, vl) < 0) return seer_err_set(err, SEER_ENOMEM, "sse: out of memory");
    } else if (fl == 4 && memcmp(s, "data", 4) == 0) {
        if (p->data.n + vl + 1 > p->max)
            return seer_err_set(err, SEER_HARNESS_ETOOBIG, "an event longer than %zu bytes", p->max);
        if (p->have_data && hbuf_add(&p->data, "\n", 1) < 0) return seer_err_set(err, SEER_ENOMEM, "sse: out of memory");
        if (hbuf_add(&p->data, v, vl) < 0) return seer_err_set(err, SEER_ENOMEM, "sse: out of memory");
        p->have_data = 1;
    }
    /* id, retry and unknown fields mean nothing to a one-shot response stream. */
    return 0;
}

int seer_harness_sse_feed(seer_harness_sse_t *p, const char *buf, size_t n, seer_err_t *err) {
    size_t i = 0;
    while (i < n) {
        if (p->skip_lf) {
            p->skip_lf = 0;
            if (buf[i] == '\n') {
                i++;
                continue;
            }
        }
        /* Copy up to the next line end in one go. */
        size_t j = i;
        while (j < n && buf[j] != '\n' && buf[j] != '\r') j++;
        if (j > i) {
            if (p->line.n + (j - i) > p->max)
                return seer_err_set(err, SEER_HARNESS_ETOOBIG, "an event line longer than %zu bytes", p->max);
            if (hbuf_add(&p->line, buf + i, j - i) < 0) return seer_err_set(err, SEER_ENOMEM, "sse: out of memory");
        }
        if (j == n) break;
        if (buf[j] == '\r') p->skip_lf = 1;
        int rc = take_line(p, err);
        p->line.n = 0;
        if (p->line.p) p->line.p[0] = 0;
        if (rc) return rc;
        i = j + 1;
    }
    return 0;
}
