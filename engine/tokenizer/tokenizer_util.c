/* Small containers for the tokenizer: byte buffers with sticky allocation failure and an
 * open-addressing string map (vocabularies of 50k-250k tokens, the per-word cache). */
#include "tokenizer_private.h"

#include <stdlib.h>
#include <string.h>

void tk_buf_reserve(tk_buf_t *b, size_t extra) {
    if (b->oom) return;
    if (b->n + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->p = p;
    b->cap = cap;
}

void tk_buf_add(tk_buf_t *b, const void *s, size_t len) {
    tk_buf_reserve(b, len);
    if (b->oom) return;
    if (len) memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
}

void tk_buf_add_self(tk_buf_t *b, size_t off, size_t len) {
    tk_buf_reserve(b, len);
    if (b->oom) return;
    memmove(b->p + b->n, b->p + off, len);
    b->n += len;
    b->p[b->n] = 0;
}

void tk_buf_add_cp(tk_buf_t *b, uint32_t cp) {
    char t[4];
    size_t n;
    if (cp < 0x80) {
        t[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xC0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    tk_buf_add(b, t, n);
}

void tk_buf_free(tk_buf_t *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

uint32_t tk_utf8_decode(const unsigned char *p, size_t *n) {
    unsigned char c = p[0];
    if (c < 0x80) {
        *n = 1;
        return c;
    }
    if (c < 0xE0) {
        *n = 2;
        return ((uint32_t)(c & 0x1F) << 6) | (p[1] & 0x3F);
    }
    if (c < 0xF0) {
        *n = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    }
    *n = 4;
    return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
           ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

/* ---- string map ---------------------------------------------------------------------------- */

#define BLOCK_SIZE (256 * 1024)
struct tk_sm_block {
    struct tk_sm_block *next;
    size_t used, size;
    char data[];
};

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static char *store_key(tk_strmap_t *m, const char *s, size_t len) {
    struct tk_sm_block *b = m->blocks;
    if (!b || b->size - b->used < len + 1) {
        size_t size = len + 1 > BLOCK_SIZE ? len + 1 : BLOCK_SIZE;
        b = malloc(sizeof *b + size);
        if (!b) return NULL;
        b->next = m->blocks;
        b->used = 0;
        b->size = size;
        m->blocks = b;
    }
    char *k = b->data + b->used;
    memcpy(k, s, len);
    k[len] = 0;
    b->used += len + 1;
    return k;
}

static int rehash(tk_strmap_t *m, size_t nslots) {
    uint32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < m->n; i++) {
        size_t j = m->e[i].hash & (nslots - 1);
        while (slots[j]) j = (j + 1) & (nslots - 1);
        slots[j] = (uint32_t)(i + 1);
    }
    free(m->slots);
    m->slots = slots;
    m->nslots = nslots;
    return 0;
}

int32_t tk_strmap_get(const tk_strmap_t *m, const char *s, size_t len) {
    if (!m->nslots) return -1;
    uint64_t h = hash_bytes(s, len);
    size_t j = h & (m->nslots - 1);
    for (;;) {
        uint32_t k = m->slots[j];
        if (!k) return -1;
        const struct tk_sm_entry *e = &m->e[k - 1];
        if (e->hash == h && e->len == len && memcmp(e->s, s, len) == 0) return e->val;
        j = (j + 1) & (m->nslots - 1);
    }
}

int tk_strmap_put(tk_strmap_t *m, const char *s, size_t len, int32_t val, const char **key_out) {
    if (len > UINT32_MAX) return -1;
    if ((m->n + 1) * 2 > m->nslots && rehash(m, m->nslots ? m->nslots * 2 : 64) < 0) return -1;
    uint64_t h = hash_bytes(s, len);
    size_t j = h & (m->nslots - 1);
    for (;;) {
        uint32_t k = m->slots[j];
        if (!k) break;
        struct tk_sm_entry *e = &m->e[k - 1];
        if (e->hash == h && e->len == len && memcmp(e->s, s, len) == 0) {
            e->val = val;
            if (key_out) *key_out = e->s;
            return 0;
        }
        j = (j + 1) & (m->nslots - 1);
    }
    if (m->n == m->cap_e) {
        size_t cap = m->cap_e ? m->cap_e * 2 : 64;
        struct tk_sm_entry *e = realloc(m->e, cap * sizeof *e);
        if (!e) return -1;
        m->e = e;
        m->cap_e = cap;
    }
    char *key = store_key(m, s, len);
    if (!key) return -1;
    m->e[m->n] = (struct tk_sm_entry){key, (uint32_t)len, val, h};
    m->n++;
    m->slots[j] = (uint32_t)m->n;
    if (key_out) *key_out = key;
    return 0;
}

void tk_strmap_free(tk_strmap_t *m) {
    struct tk_sm_block *b = m->blocks;
    while (b) {
        struct tk_sm_block *next = b->next;
        free(b);
        b = next;
    }
    free(m->e);
    free(m->slots);
    memset(m, 0, sizeof *m);
}
