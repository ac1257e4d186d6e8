/* What the files of engine/harness share and nothing else sees: a growable byte buffer. */
#ifndef SEER_HARNESS_PRIVATE_H
#define SEER_HARNESS_PRIVATE_H

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n, cap;
} hbuf_t;

/* Appends n bytes and keeps the buffer NUL-terminated; -1 when memory runs out. */
static inline int hbuf_add(hbuf_t *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static inline void hbuf_reset(hbuf_t *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
}

#endif
