/* Unicode normalization: decompose (canonical or compatibility, Hangul algorithmically), put
 * each run of non-starters in canonical order (stable by combining class), then for NFC/NFKC
 * compose canonically (UAX #15). A quick check first returns text that cannot change. */
#include "unicode_norm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "unicode_tables.h"

#define SBASE 0xAC00u
#define LBASE 0x1100u
#define VBASE 0x1161u
#define TBASE 0x11A7u
#define LCOUNT 19u
#define VCOUNT 21u
#define TCOUNT 28u
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)

/* Set for the duration of a seer_unicode_normalize_hf call: the characters tokenizers' Unicode
 * 9.0 tables lack have no properties. */
static _Thread_local int g_hf;

static int hf_gap(uint32_t cp) {
    if (!g_hf || cp < seer_uhf_gaps[0].lo) return 0;
    size_t lo = 0, hi = seer_uhf_gaps_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < seer_uhf_gaps[mid].lo) hi = mid;
        else if (cp > seer_uhf_gaps[mid].hi) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* The run holding cp, or NULL (combining class 0, quick check "yes" for every form). */
static const seer_uprop_t *prop(uint32_t cp) {
    if (cp < seer_uprops[0].lo || hf_gap(cp)) return NULL;
    size_t lo = 0, hi = seer_uprops_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < seer_uprops[mid].lo) hi = mid;
        else if (cp > seer_uprops[mid].hi) lo = mid + 1;
        else return &seer_uprops[mid];
    }
    return NULL;
}

static unsigned ccc(uint32_t cp) {
    if (cp < 0x300) return 0;
    const seer_uprop_t *p = prop(cp);
    return p ? p->ccc : 0;
}

static const seer_udecomp_t *find_decomp(const seer_udecomp_t *t, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < t[mid].cp) hi = mid;
        else if (cp > t[mid].cp) lo = mid + 1;
        else return &t[mid];
    }
    return NULL;
}

static uint32_t compose(uint32_t a, uint32_t b) {
    if (a - LBASE < LCOUNT && b - VBASE < VCOUNT) return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a - SBASE < SCOUNT && (a - SBASE) % TCOUNT == 0 && b - TBASE - 1 < TCOUNT - 1) return a + (b - TBASE);
    if (hf_gap(a) || hf_gap(b)) return 0;
    size_t lo = 0, hi = seer_upairs_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const seer_upair_t *p = &seer_upairs[mid];
        if (a < p->first || (a == p->first && b < p->second)) hi = mid;
        else if (a > p->first || b > p->second) lo = mid + 1;
        else return p->composite;
    }
    return 0;
}

/* Decodes one code point of UTF-8 (shortest form, no surrogates); 0 bytes when invalid. */
static size_t utf8_dec(const unsigned char *p, size_t n, uint32_t *cp) {
    unsigned char c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

static size_t utf8_enc(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* 1 when s is valid UTF-8 that the form leaves unchanged, 0 when it may change, -1 when not
 * UTF-8. "May change": a character whose quick check is not "yes", or combining marks out of
 * canonical order. */
static int quick_check(const unsigned char *s, size_t n, unsigned bit) {
    unsigned last = 0;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            last = 0;
            i++;
            continue;
        }
        uint32_t cp;
        size_t l = utf8_dec(s + i, n - i, &cp);
        if (!l) return -1;
        i += l;
        const seer_uprop_t *p = cp < 0xA0 ? NULL : prop(cp);
        if (!p) {
            last = 0;
            continue;
        }
        if (p->flags & bit) return 0;
        if (p->ccc && last > p->ccc) return 0;
        last = p->ccc;
    }
    return 1;
}

typedef struct {
    uint32_t *v;
    size_t n, cap;
} cps_t;

static int push(cps_t *b, uint32_t cp) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        uint32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v) return -1;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = cp;
    return 0;
}

static int decompose(uint32_t cp, int compat, cps_t *b) {
    if (cp < 0xA0) return push(b, cp);
    if (cp - SBASE < SCOUNT) {
        uint32_t s = cp - SBASE, t = s % TCOUNT;
        if (push(b, LBASE + s / NCOUNT) || push(b, VBASE + (s % NCOUNT) / TCOUNT)) return -1;
        return t ? push(b, TBASE + t) : 0;
    }
    if (hf_gap(cp)) return push(b, cp);
    const seer_udecomp_t *d = compat ? find_decomp(seer_ucompat, seer_ucompat_n, cp) : NULL;
    if (!d) d = find_decomp(seer_ucanon, seer_ucanon_n, cp);
    if (!d) return push(b, cp);
    for (unsigned i = 0; i < d->len; i++)
        if (push(b, seer_udecomp_data[d->off + i])) return -1;
    return 0;
}

int seer_unicode_normalize(const char *s, size_t n, int form, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    unsigned bit;
    int compat, comp;
    switch (form) {
    case SEER_NFD: bit = 1, compat = 0, comp = 0; break;
    case SEER_NFC: bit = 2, compat = 0, comp = 1; break;
    case SEER_NFKD: bit = 4, compat = 1, comp = 0; break;
    case SEER_NFKC: bit = 8, compat = 1, comp = 1; break;
    default: return -2;
    }
    const unsigned char *u = (const unsigned char *)s;
    int qc = quick_check(u, n, bit);
    if (qc < 0) return -2;
    if (qc) {
        char *o = malloc(n + 1);
        if (!o) return -1;
        if (n) memcpy(o, s, n);
        o[n] = 0;
        *out = o;
        *out_len = n;
        return 0;
    }
    cps_t b = {0};
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = utf8_dec(u + i, n - i, &cp);
        i += l;
        if (decompose(cp, compat, &b)) goto oom;
    }
    /* canonical ordering: stable insertion sort of each run of non-starters */
    for (size_t i = 1; i < b.n; i++) {
        unsigned c = ccc(b.v[i]);
        if (!c) continue;
        uint32_t x = b.v[i];
        size_t j = i;
        while (j > 0 && ccc(b.v[j - 1]) > c) {
            b.v[j] = b.v[j - 1];
            j--;
        }
        b.v[j] = x;
    }
    if (comp && b.n) {
        size_t w = 0, starter = (size_t)-1;
        unsigned last = 0; /* class of the last character kept after the starter */
        for (size_t i = 0; i < b.n; i++) {
            uint32_t cp = b.v[i];
            unsigned c = ccc(cp);
            if (starter != (size_t)-1 && (w == starter + 1 || (last && last < c))) {
                uint32_t k = compose(b.v[starter], cp);
                if (k && !hf_gap(k)) {
                    b.v[starter] = k;
                    continue;
                }
            }
            if (!c) starter = w;
            b.v[w++] = cp;
            last = c;
        }
        b.n = w;
    }
    char *o = malloc(b.n * 4 + 1);
    if (!o) goto oom;
    size_t len = 0;
    for (size_t i = 0; i < b.n; i++) len += utf8_enc(b.v[i], o + len);
    o[len] = 0;
    free(b.v);
    *out = o;
    *out_len = len;
    return 0;
oom:
    free(b.v);
    return -1;
}

int seer_unicode_normalize_hf(const char *s, size_t n, int form, char **out, size_t *out_len) {
    g_hf = 1;
    int rc = seer_unicode_normalize(s, n, form, out, out_len);
    g_hf = 0;
    return rc;
}
