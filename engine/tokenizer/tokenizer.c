/* The tokenizer pipeline of Hugging Face `tokenizers`, for BPE models: added tokens are cut out
 * of the text first, then normalizer -> pre-tokenizer -> BPE model -> post-processor on the way
 * in, and decoder on the way out. Loading turns tokenizer.json (cJSON) into the structures
 * below; a component type outside this list is rejected at load with an error naming its JSON path. */
#include "tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <sys/stat.h>
#include <unistd.h>

#include "../json/json.h"
#include "../tensor/safetensors.h"
#include "tokenizer_private.h"
#include "unicode_norm.h"

/* GPT-2's pre-tokenizer regex, used by the ByteLevel pre-tokenizer when use_regex is true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Words up to this many bytes are cached (token ids per pre-token); the cache is dropped when
 * it holds this many words, which bounds its memory. */
#define CACHE_MAX_WORD 64
#define CACHE_MAX_WORDS 100000

/* ---- regexes ------------------------------------------------------------------------------- */

typedef struct tk_re {
    pcre2_code *code;
} tk_re_t;

static void re_free(tk_re_t *re) {
    if (!re) return;
    pcre2_code_free(re->code);
    free(re);
}

/* Unicode's White_Space property: what Rust's char::is_whitespace (WhitespaceSplit, Strip) and
 * Oniguruma's \s (the regexes of tokenizer.json) match. PCRE2's \s also takes U+180E, which has
 * not been white space since Unicode 6.3, so \s and \S are rewritten to this set. */
#define WS_SET "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

/* pat with \s -> [WS_SET] and \S -> [^WS_SET] (inside a class: \s -> WS_SET; \S stays, as a
 * class cannot hold a negated set). NULL when out of memory. */
static char *re_white_space(const char *pat, size_t len, size_t *olen) {
    tk_buf_t b = {0};
    tk_buf_add(&b, "", 0);
    int in_class = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = pat[i];
        if (ch == '\\' && i + 1 < len) {
            char e = pat[i + 1];
            if (e == 's') tk_buf_add(&b, in_class ? WS_SET : "[" WS_SET "]", in_class ? strlen(WS_SET) : strlen(WS_SET) + 2);
            else if (e == 'S' && !in_class) tk_buf_add(&b, "[^" WS_SET "]", strlen(WS_SET) + 3);
            else tk_buf_add(&b, pat + i, 2);
            i++;
            continue;
        }
        if (!in_class && ch == '[') {
            in_class = 1;
            tk_buf_add(&b, pat + i, 1);
            /* a ] right after [ or [^ is a literal */
            if (i + 1 < len && pat[i + 1] == '^') tk_buf_add(&b, pat + ++i, 1);
            if (i + 1 < len && pat[i + 1] == ']') tk_buf_add(&b, pat + ++i, 1);
            continue;
        }
        if (in_class && ch == ']') in_class = 0;
        tk_buf_add(&b, &ch, 1);
    }
    if (b.oom) {
        tk_buf_free(&b);
        return NULL;
    }
    *olen = b.n;
    return b.p;
}

static int re_compile(tk_re_t **out, const char *pat, size_t len, int literal, const char *where,
                      seer_err_t *err) {
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
    size_t wlen = len;
    char *wpat = literal ? NULL : re_white_space(pat, len, &wlen);
    if (!literal && !wpat) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)(wpat ? wpat : pat), wlen, opts, &ec, &eo, NULL);
    free(wpat);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return seer_err_set(err, SEER_EINVAL, "%s: cannot compile regex /%.*s/ at offset %zu: %s",
                            where, (int)(len > 200 ? 200 : len), pat, (size_t)eo, (char *)msg);
    }
    /* JIT is an optimisation: where it is unavailable the interpreter gives the same matches. */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    tk_re_t *re = calloc(1, sizeof *re);
    if (!re) {
        pcre2_code_free(code);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }
    re->code = code;
    *out = re;
    return 0;
}

/* Match spans of re in s[0..len), appended to *m as start,end pairs. Empty matches are
 * skipped (they would make empty pieces, which every split behaviour drops). 0 or -1 (oom or a
 * matching error such as the match limit). */
typedef struct spans {
    size_t *v;
    size_t n, cap;
} spans_t;

static int spans_push(spans_t *m, size_t a, size_t b) {
    if (m->n + 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        size_t *v = realloc(m->v, cap * sizeof *v);
        if (!v) return -1;
        m->v = v;
        m->cap = cap;
    }
    m->v[m->n++] = a;
    m->v[m->n++] = b;
    return 0;
}

static int re_find_all(const tk_re_t *re, const char *s, size_t len, pcre2_match_data *md,
                       spans_t *m) {
    size_t off = 0;
    m->n = 0;
    while (off <= len) {
        /* the text was validated once; PCRE2 would otherwise re-check all of it on every call */
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, off, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return -1;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (b > a) {
            if (spans_push(m, a, b) < 0) return -1;
            off = b;
        } else {
            /* empty match: step over one character */
            if (a >= len) break;
            size_t k = a + 1;
            while (k < len && ((unsigned char)s[k] & 0xC0) == 0x80) k++;
            off = k;
        }
    }
    return 0;
}

/* ---- components ---------------------------------------------------------------------------- */

enum { N_SEQ, N_PREPEND, N_REPLACE, N_STRIP, N_UNICODE };
typedef struct norm {
    int type;
    struct norm **kids;
    int nkids;
    char *a, *b; /* Prepend: a; Replace: a -> b (re when a regex) */
    size_t alen, blen;
    tk_re_t *re;
    int left, right; /* Strip */
    int form;        /* NFC/NFD/NFKC/NFKD: SEER_NFC... */
} norm_t;

enum { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS };
enum { PT_SEQ, PT_SPLIT, PT_BYTELEVEL, PT_METASPACE };
enum { PREPEND_NEVER, PREPEND_FIRST, PREPEND_ALWAYS };
typedef struct pretok {
    int type;
    struct pretok **kids;
    int nkids;
    tk_re_t *re; /* Split, ByteLevel(use_regex) */
    int behavior, invert;
    int add_prefix_space;
    char repl[8]; /* Metaspace replacement character, UTF-8 */
    size_t repl_len;
    int prepend, split;
} pretok_t;

enum { PP_SEQ, PP_TEMPLATE, PP_NOOP };
typedef struct post {
    int type;
    struct post **kids;
    int nkids;
    /* TemplateProcessing "single": items, each either the sequence (n = -1) or special ids */
    struct pp_item {
        int32_t *ids;
        int n;
    } *items;
    int nitems;
} post_t;

enum { D_SEQ, D_BYTELEVEL, D_METASPACE, D_REPLACE, D_BYTEFALLBACK, D_FUSE, D_STRIP };
typedef struct dec {
    int type;
    struct dec **kids;
    int nkids;
    char *a, *b;
    size_t alen, blen;
    tk_re_t *re;
    int start, stop; /* Strip */
    int prepend;     /* Metaspace */
} dec_t;

typedef struct added {
    char *s; /* content as matched (normalized content for normalized tokens) */
    size_t len;
    char *content;
    size_t content_len;
    int32_t id;
    int special, single_word, lstrip, rstrip, normalized;
} added_t;

/* Added tokens of one kind (raw or normalized) bucketed by first byte, longest first. */
typedef struct added_set {
    int *idx; /* indices into tok->added */
    int start[257];
} added_set_t;

struct seer_tokenizer {
    /* model */
    tk_strmap_t vocab;
    uint64_t *mkeys; /* merge map: (left << 32 | right) -> rank, new id */
    int32_t *mrank, *mnew;
    size_t mslots;
    int32_t unk_id;
    int fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_id[256];
    /* pipeline */
    norm_t *norm;
    pretok_t *pretok;
    post_t *post;
    dec_t *dec;
    added_t *added;
    int nadded;
    added_set_t set_raw, set_norm;
    /* id -> token */
    const char **tok_s;
    uint32_t *tok_len;
    uint8_t *tok_special; /* 1 special added, 2 other added */
    int32_t nids;
    /* per-word cache and scratch (a tokenizer is used from one thread at a time) */
    tk_strmap_t cache;
    int32_t *cache_ids;
    size_t cache_n, cache_cap;
    pcre2_match_data *md;
};

/* ---- byte-level mapping -------------------------------------------------------------------- */

static int bl_printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

uint32_t seer_tokenizer_byte_to_unicode(uint8_t b) {
    if (bl_printable(b)) return b;
    uint32_t n = 0;
    for (int i = 0; i < b; i++)
        if (!bl_printable(i)) n++;
    return 256 + n;
}

int seer_tokenizer_unicode_to_byte(uint32_t cp) {
    if (cp < 256) return bl_printable((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t n = 0;
    for (int i = 0; i < 256; i++)
        if (!bl_printable(i)) {
            if (n == cp - 256) return i;
            n++;
        }
    return -1;
}

/* Table form of the same, filled once per process on first use: UTF-8 text of each byte's
 * character. Immutable after init, built under pthread_once-free idempotent writes. */
static char bl_utf8[256][3];
static uint8_t bl_utf8_len[256];
static int16_t bl_from_cp[324];
static void bl_init(void) {
    if (bl_utf8_len[0]) return;
    for (int i = 0; i < 324; i++) bl_from_cp[i] = -1;
    for (int b = 255; b >= 0; b--) {
        uint32_t cp = seer_tokenizer_byte_to_unicode((uint8_t)b);
        bl_from_cp[cp] = (int16_t)b;
        if (cp < 0x80) {
            bl_utf8[b][0] = (char)cp;
            bl_utf8_len[b] = 1;
        } else {
            bl_utf8[b][0] = (char)(0xC0 | (cp >> 6));
            bl_utf8[b][1] = (char)(0x80 | (cp & 0x3F));
            bl_utf8_len[b] = 2;
        }
    }
}

/* ---- freeing --------------------------------------------------------------------------------- */

static void norm_free(norm_t *n) {
    if (!n) return;
    for (int i = 0; i < n->nkids; i++) norm_free(n->kids[i]);
    free(n->kids);
    free(n->a);
    free(n->b);
    re_free(n->re);
    free(n);
}

static void pretok_free(pretok_t *p) {
    if (!p) return;
    for (int i = 0; i < p->nkids; i++) pretok_free(p->kids[i]);
    free(p->kids);
    re_free(p->re);
    free(p);
}

static void post_free(post_t *p) {
    if (!p) return;
    for (int i = 0; i < p->nkids; i++) post_free(p->kids[i]);
    free(p->kids);
    for (int i = 0; i < p->nitems; i++) free(p->items[i].ids);
    free(p->items);
    free(p);
}

static void dec_free(dec_t *d) {
    if (!d) return;
    for (int i = 0; i < d->nkids; i++) dec_free(d->kids[i]);
    free(d->kids);
    free(d->a);
    free(d->b);
    re_free(d->re);
    free(d);
}

void seer_tokenizer_free(seer_tokenizer_t *tok) {
    if (!tok) return;
    tk_strmap_free(&tok->vocab);
    free(tok->mkeys);
    free(tok->mrank);
    free(tok->mnew);
    norm_free(tok->norm);
    pretok_free(tok->pretok);
    post_free(tok->post);
    dec_free(tok->dec);
    for (int i = 0; i < tok->nadded; i++) {
        if (tok->added[i].s != tok->added[i].content) free(tok->added[i].s);
        free(tok->added[i].content);
    }
    free(tok->added);
    free(tok->set_raw.idx);
    free(tok->set_norm.idx);
    free(tok->tok_s);
    free(tok->tok_len);
    free(tok->tok_special);
    tk_strmap_free(&tok->cache);
    free(tok->cache_ids);
    if (tok->md) pcre2_match_data_free(tok->md);
    free(tok);
}

/* ---- loading helpers ------------------------------------------------------------------------ */

typedef struct lctx {
    const char *name; /* file name for messages */
    seer_err_t *err;
    /* strings of the parsed file that hold "\u0000" and their true lengths (a vocabulary entry
     * may contain NUL; cJSON's strings end there) */
    seer_json_len_t *nul;
    size_t nnul;
} lctx_t;

/* The true length of a string of the parsed tokenizer.json (NUL bytes included). */
static size_t jlen(const lctx_t *c, const char *s) { return seer_json_strlen(c->nul, c->nnul, s); }

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static int oom(lctx_t *c) { return seer_err_set(c->err, SEER_ENOMEM, "%s: out of memory", c->name); }

static const cJSON *jget(const cJSON *o, const char *k) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

/* A boolean member; absent or null gives dflt, anything else but a boolean is an error. */
static int jbool(lctx_t *c, const cJSON *o, const char *k, int dflt, const char *path, int *out) {
    const cJSON *v = jget(o, k);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return seer_err_set(c->err, SEER_EPARSE, "%s: %s.%s must be a boolean", c->name, path, k);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A string member: *out NULL when absent or null. */
static int jstr(lctx_t *c, const cJSON *o, const char *k, const char *path, const char **out) {
    const cJSON *v = jget(o, k);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v))
        return seer_err_set(c->err, SEER_EPARSE, "%s: %s.%s must be a string", c->name, path, k);
    *out = v->valuestring;
    return 0;
}

static int jtype(lctx_t *c, const cJSON *o, const char *path, const char **type) {
    if (!cJSON_IsObject(o))
        return seer_err_set(c->err, SEER_EPARSE, "%s: %s must be an object", c->name, path);
    const cJSON *t = jget(o, "type");
    if (!cJSON_IsString(t))
        return seer_err_set(c->err, SEER_EPARSE, "%s: %s has no string member 'type'", c->name, path);
    *type = t->valuestring;
    return 0;
}

static int unsupported(lctx_t *c, const char *path, const char *type, const char *supported) {
    return seer_err_set(c->err, SEER_EINVAL, "%s: %s type '%s' is not supported (supported: %s)",
                        c->name, path, type, supported);
}

/* {"String": s} or {"Regex": r}: a literal or a regex, both compiled (a literal with
 * PCRE2_LITERAL) so that replacing and splitting have one code path. */
static int jpattern(lctx_t *c, const cJSON *o, const char *path, tk_re_t **re, char **lit,
                    size_t *lit_len) {
    const cJSON *p = jget(o, "pattern");
    const cJSON *s = jget(p, "String"), *r = jget(p, "Regex");
    char where[300];
    snprintf(where, sizeof where, "%s: %s.pattern", c->name, path);
    if (cJSON_IsString(s)) {
        size_t n = strlen(s->valuestring);
        if (lit) {
            *lit = dupn(s->valuestring, n);
            if (!*lit) return oom(c);
            *lit_len = n;
        }
        if (n == 0)
            return seer_err_set(c->err, SEER_EINVAL, "%s: %s.pattern.String is empty", c->name, path);
        return re_compile(re, s->valuestring, n, 1, where, c->err);
    }
    if (cJSON_IsString(r)) return re_compile(re, r->valuestring, strlen(r->valuestring), 0, where, c->err);
    return seer_err_set(c->err, SEER_EPARSE, "%s: %s.pattern must be {\"String\": ...} or {\"Regex\": ...}",
                        c->name, path);
}

static int jarray_kids(lctx_t *c, const cJSON *o, const char *key, const char *path, const cJSON **arr,
                       int *n) {
    *arr = jget(o, key);
    if (!cJSON_IsArray(*arr))
        return seer_err_set(c->err, SEER_EPARSE, "%s: %s.%s must be an array", c->name, path, key);
    *n = cJSON_GetArraySize(*arr);
    return 0;
}

/* ---- loading: normalizer ---------------------------------------------------------------------- */

#define NORM_SUPPORTED "Sequence, Prepend, Replace, Strip, NFC, NFD, NFKC, NFKD"

static int load_norm(lctx_t *c, const cJSON *j, const char *path, norm_t **out) {
    const char *type;
    int rc = jtype(c, j, path, &type);
    if (rc) return rc;
    norm_t *n = calloc(1, sizeof *n);
    if (!n) return oom(c);
    *out = n;
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr;
        int cnt;
        if ((rc = jarray_kids(c, j, "normalizers", path, &arr, &cnt))) return rc;
        n->type = N_SEQ;
        n->kids = calloc((size_t)cnt + 1, sizeof *n->kids);
        if (!n->kids) return oom(c);
        for (int i = 0; i < cnt; i++) {
            char p[256];
            snprintf(p, sizeof p, "%s.normalizers[%d]", path, i);
            n->nkids = i + 1;
            if ((rc = load_norm(c, cJSON_GetArrayItem(arr, i), p, &n->kids[i]))) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "Prepend")) {
        const char *s;
        if ((rc = jstr(c, j, "prepend", path, &s))) return rc;
        if (!s) return seer_err_set(c->err, SEER_EPARSE, "%s: %s.prepend must be a string", c->name, path);
        n->type = N_PREPEND;
        n->alen = strlen(s);
        if (!(n->a = dupn(s, n->alen))) return oom(c);
        return 0;
    }
    if (!strcmp(type, "Replace")) {
        const char *s;
        n->type = N_REPLACE;
        if ((rc = jpattern(c, j, path, &n->re, NULL, NULL))) return rc;
        if ((rc = jstr(c, j, "content", path, &s))) return rc;
        if (!s) return seer_err_set(c->err, SEER_EPARSE, "%s: %s.content must be a string", c->name, path);
        n->blen = strlen(s);
        if (!(n->b = dupn(s, n->blen))) return oom(c);
        return 0;
    }
    if (!strcmp(type, "Strip")) {
        n->type = N_STRIP;
        if ((rc = jbool(c, j, "strip_left", 1, path, &n->left))) return rc;
        return jbool(c, j, "strip_right", 1, path, &n->right);
    }
    static const struct {
        const char *name;
        int form;
    } forms[] = {{"NFC", SEER_NFC}, {"NFD", SEER_NFD}, {"NFKC", SEER_NFKC}, {"NFKD", SEER_NFKD}};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++)
        if (!strcmp(type, forms[i].name)) {
            n->type = N_UNICODE;
            n->form = forms[i].form;
            return 0;
        }
    return unsupported(c, path, type, NORM_SUPPORTED);
}

/* ---- loading: pre-tokenizer --------------------------------------------------------------------- */

#define PRETOK_SUPPORTED "Sequence, Split, ByteLevel, Metaspace, Digits, Punctuation, WhitespaceSplit, Whitespace"

static int set_metaspace_repl(lctx_t *c, pretok_t *p, const cJSON *j, const char *path) {
    const char *r;
    int rc = jstr(c, j, "replacement", path, &r);
    if (rc) return rc;
    if (!r) r = "\xE2\x96\x81";
    size_t n = strlen(r);
    size_t cl = 0;
    if (n == 0 || n > 4 || !seer_utf8_validate(r, n, NULL) || (tk_utf8_decode((const unsigned char *)r, &cl), cl != n))
        return seer_err_set(c->err, SEER_EINVAL, "%s: %s.replacement must be one character", c->name, path);
    memcpy(p->repl, r, n);
    p->repl_len = n;
    return 0;
}

static int jprepend_scheme(lctx_t *c, const cJSON *j, const char *path, int *out) {
    const char *s;
    int rc = jstr(c, j, "prepend_scheme", path, &s);
    if (rc) return rc;
    if (!s) {
        /* older files: add_prefix_space */
        int aps;
        if ((rc = jbool(c, j, "add_prefix_space", 1, path, &aps))) return rc;
        *out = aps ? PREPEND_ALWAYS : PREPEND_NEVER;
        return 0;
    }
    if (!strcmp(s, "first")) *out = PREPEND_FIRST;
    else if (!strcmp(s, "always")) *out = PREPEND_ALWAYS;
    else if (!strcmp(s, "never")) *out = PREPEND_NEVER;
    else
        return seer_err_set(c->err, SEER_EINVAL, "%s: %s.prepend_scheme '%s' is not one of first, always, never",
                            c->name, path, s);
    return 0;
}

static int jbehavior(lctx_t *c, const cJSON *j, const char *path, int dflt, int *out) {
    const char *s;
    int rc = jstr(c, j, "behavior", path, &s);
    if (rc) return rc;
    if (!s) *out = dflt;
    else if (!strcmp(s, "Removed")) *out = B_REMOVED;
    else if (!strcmp(s, "Isolated")) *out = B_ISOLATED;
    else if (!strcmp(s, "MergedWithPrevious")) *out = B_MERGED_PREV;
    else if (!strcmp(s, "MergedWithNext")) *out = B_MERGED_NEXT;
    else if (!strcmp(s, "Contiguous")) *out = B_CONTIGUOUS;
    else
        return seer_err_set(c->err, SEER_EINVAL,
                            "%s: %s.behavior '%s' is not one of Removed, Isolated, MergedWithPrevious, "
                            "MergedWithNext, Contiguous",
                            c->name, path, s);
    return 0;
}

static int load_pretok(lctx_t *c, const cJSON *j, const char *path, pretok_t **out) {
    const char *type;
    int rc = jtype(c, j, path, &type);
    if (rc) return rc;
    pretok_t *p = calloc(1, sizeof *p);
    if (!p) return oom(c);
    *out = p;
    char where[300];
    snprintf(where, sizeof where, "%s: %s", c->name, path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr;
        int cnt;
        if ((rc = jarray_kids(c, j, "pretokenizers", path, &arr, &cnt))) return rc;
        p->type = PT_SEQ;
        p->kids = calloc((size_t)cnt + 1, sizeof *p->kids);
        if (!p->kids) return oom(c);
        for (int i = 0; i < cnt; i++) {
            char q[256];
            snprintf(q, sizeof q, "%s.pretokenizers[%d]", path, i);
            p->nkids = i + 1;
            if ((rc = load_pretok(c, cJSON_GetArrayItem(arr, i), q, &p->kids[i]))) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        p->type = PT_SPLIT;
        if ((rc = jpattern(c, j, path, &p->re, NULL, NULL))) return rc;
        if ((rc = jbehavior(c, j, path, B_REMOVED, &p->behavior))) return rc;
        return jbool(c, j, "invert", 0, path, &p->invert);
    }
    if (!strcmp(type, "ByteLevel")) {
        int use_regex;
        p->type = PT_BYTELEVEL;
        if ((rc = jbool(c, j, "add_prefix_space", 1, path, &p->add_prefix_space))) return rc;
        if ((rc = jbool(c, j, "use_regex", 1, path, &use_regex))) return rc;
        if (use_regex) return re_compile(&p->re, GPT2_PATTERN, strlen(GPT2_PATTERN), 0, where, c->err);
        return 0;
    }
    if (!strcmp(type, "Metaspace")) {
        p->type = PT_METASPACE;
        if ((rc = set_metaspace_repl(c, p, j, path))) return rc;
        if ((rc = jprepend_scheme(c, j, path, &p->prepend))) return rc;
        return jbool(c, j, "split", 1, path, &p->split);
    }
    /* The rest are Split with a fixed pattern. */
    const char *pat = NULL;
    p->type = PT_SPLIT;
    if (!strcmp(type, "Digits")) {
        int individual;
        if ((rc = jbool(c, j, "individual_digits", 0, path, &individual))) return rc;
        pat = individual ? "\\p{N}" : "\\p{N}+";
        p->behavior = B_ISOLATED;
    } else if (!strcmp(type, "Punctuation")) {
        pat = "[\\p{P}!-/:-@\\[-`{-~]";
        if ((rc = jbehavior(c, j, path, B_ISOLATED, &p->behavior))) return rc;
    } else if (!strcmp(type, "WhitespaceSplit")) {
        pat = "\\s+";
        p->behavior = B_REMOVED;
    } else if (!strcmp(type, "Whitespace")) {
        pat = "\\w+|[^\\w\\s]+";
        p->behavior = B_REMOVED;
        p->invert = 1;
    } else {
        return unsupported(c, path, type, PRETOK_SUPPORTED);
    }
    return re_compile(&p->re, pat, strlen(pat), 0, where, c->err);
}

/* ---- loading: post-processor -------------------------------------------------------------------- */

#define POST_SUPPORTED "Sequence, TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing"

static int add_item(lctx_t *c, post_t *p, const int32_t *ids, int n) {
    struct pp_item *it = realloc(p->items, ((size_t)p->nitems + 1) * sizeof *it);
    if (!it) return oom(c);
    p->items = it;
    it[p->nitems].n = n;
    it[p->nitems].ids = NULL;
    if (n > 0) {
        it[p->nitems].ids = malloc((size_t)n * sizeof(int32_t));
        if (!it[p->nitems].ids) return oom(c);
        memcpy(it[p->nitems].ids, ids, (size_t)n * sizeof(int32_t));
    }
    p->nitems++;
    return 0;
}

/* ["<s>", 1] as RobertaProcessing writes its cls/sep. */
static int jtoken_pair(lctx_t *c, const cJSON *j, const char *k, const char *path, int32_t *id) {
    const cJSON *v = jget(j, k);
    const cJSON *n = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, 1) : NULL;
    if (!cJSON_IsNumber(n))
        return seer_err_set(c->err, SEER_EPARSE, "%s: %s.%s must be [token, id]", c->name, path, k);
    *id = (int32_t)n->valuedouble;
    return 0;
}

static int load_post(lctx_t *c, const cJSON *j, const char *path, post_t **out) {
    const char *type;
    int rc = jtype(c, j, path, &type);
    if (rc) return rc;
    post_t *p = calloc(1, sizeof *p);
    if (!p) return oom(c);
    *out = p;
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr;
        int cnt;
        if ((rc = jarray_kids(c, j, "processors", path, &arr, &cnt))) return rc;
        p->type = PP_SEQ;
        p->kids = calloc((size_t)cnt + 1, sizeof *p->kids);
        if (!p->kids) return oom(c);
        for (int i = 0; i < cnt; i++) {
            char q[256];
            snprintf(q, sizeof q, "%s.processors[%d]", path, i);
            p->nkids = i + 1;
            if ((rc = load_post(c, cJSON_GetArrayItem(arr, i), q, &p->kids[i]))) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) {
        p->type = PP_NOOP; /* only trims offsets, which seer does not report */
        return 0;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        int32_t cls, sep;
        p->type = PP_TEMPLATE;
        if ((rc = jtoken_pair(c, j, "cls", path, &cls)) || (rc = jtoken_pair(c, j, "sep", path, &sep))) return rc;
        if ((rc = add_item(c, p, &cls, 1)) || (rc = add_item(c, p, NULL, -1)) || (rc = add_item(c, p, &sep, 1)))
            return rc;
        return 0;
    }
    if (!strcmp(type, "TemplateProcessing")) {
        p->type = PP_TEMPLATE;
        const cJSON *single = jget(j, "single"), *specials = jget(j, "special_tokens");
        if (!cJSON_IsArray(single))
            return seer_err_set(c->err, SEER_EPARSE, "%s: %s.single must be an array", c->name, path);
        int i = 0;
        const cJSON *item;
        cJSON_ArrayForEach(item, single) {
            const cJSON *st = jget(item, "SpecialToken"), *sq = jget(item, "Sequence");
            if (sq) {
                if ((rc = add_item(c, p, NULL, -1))) return rc;
            } else if (st) {
                const cJSON *id = jget(st, "id");
                const cJSON *spec = cJSON_IsString(id) ? jget(specials, id->valuestring) : NULL;
                const cJSON *ids = jget(spec, "ids");
                if (!cJSON_IsArray(ids))
                    return seer_err_set(c->err, SEER_EPARSE,
                                        "%s: %s.single[%d] names special token %s, which %s.special_tokens "
                                        "does not define with an 'ids' array",
                                        c->name, path, i, cJSON_IsString(id) ? id->valuestring : "(no id)", path);
                int n = cJSON_GetArraySize(ids);
                int32_t buf[64];
                if (n > 64)
                    return seer_err_set(c->err, SEER_EINVAL, "%s: %s: special token with more than 64 ids",
                                        c->name, path);
                for (int k = 0; k < n; k++) {
                    const cJSON *v = cJSON_GetArrayItem(ids, k);
                    if (!cJSON_IsNumber(v))
                        return seer_err_set(c->err, SEER_EPARSE, "%s: %s.special_tokens: ids must be numbers",
                                            c->name, path);
                    buf[k] = (int32_t)v->valuedouble;
                }
                if ((rc = add_item(c, p, buf, n))) return rc;
            } else {
                return seer_err_set(c->err, SEER_EPARSE,
                                    "%s: %s.single[%d] must be {\"SpecialToken\": ...} or {\"Sequence\": ...}",
                                    c->name, path, i);
            }
            i++;
        }
        return 0;
    }
    return unsupported(c, path, type, POST_SUPPORTED);
}

/* ---- loading: decoder --------------------------------------------------------------------------- */

#define DEC_SUPPORTED "Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip"

static int load_dec(lctx_t *c, const cJSON *j, const char *path, dec_t **out) {
    const char *type;
    int rc = jtype(c, j, path, &type);
    if (rc) return rc;
    dec_t *d = calloc(1, sizeof *d);
    if (!d) return oom(c);
    *out = d;
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr;
        int cnt;
        if ((rc = jarray_kids(c, j, "decoders", path, &arr, &cnt))) return rc;
        d->type = D_SEQ;
        d->kids = calloc((size_t)cnt + 1, sizeof *d->kids);
        if (!d->kids) return oom(c);
        for (int i = 0; i < cnt; i++) {
            char q[256];
            snprintf(q, sizeof q, "%s.decoders[%d]", path, i);
            d->nkids = i + 1;
            if ((rc = load_dec(c, cJSON_GetArrayItem(arr, i), q, &d->kids[i]))) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) {
        d->type = D_BYTELEVEL;
        return 0;
    }
    if (!strcmp(type, "ByteFallback")) {
        d->type = D_BYTEFALLBACK;
        return 0;
    }
    if (!strcmp(type, "Fuse")) {
        d->type = D_FUSE;
        return 0;
    }
    if (!strcmp(type, "Metaspace")) {
        pretok_t tmp;
        memset(&tmp, 0, sizeof tmp);
        d->type = D_METASPACE;
        if ((rc = set_metaspace_repl(c, &tmp, j, path))) return rc;
        if (!(d->a = dupn(tmp.repl, tmp.repl_len))) return oom(c);
        d->alen = tmp.repl_len;
        return jprepend_scheme(c, j, path, &d->prepend);
    }
    if (!strcmp(type, "Replace")) {
        const char *s;
        d->type = D_REPLACE;
        if ((rc = jpattern(c, j, path, &d->re, NULL, NULL))) return rc;
        if ((rc = jstr(c, j, "content", path, &s))) return rc;
        if (!s) return seer_err_set(c->err, SEER_EPARSE, "%s: %s.content must be a string", c->name, path);
        d->blen = strlen(s);
        if (!(d->b = dupn(s, d->blen))) return oom(c);
        return 0;
    }
    if (!strcmp(type, "Strip")) {
        const char *s;
        const cJSON *a = jget(j, "start"), *b = jget(j, "stop");
        d->type = D_STRIP;
        if ((rc = jstr(c, j, "content", path, &s))) return rc;
        if (!s || !*s) return seer_err_set(c->err, SEER_EPARSE, "%s: %s.content must be a character", c->name, path);
        d->alen = strlen(s);
        if (!(d->a = dupn(s, d->alen))) return oom(c);
        d->start = cJSON_IsNumber(a) ? (int)a->valuedouble : 0;
        d->stop = cJSON_IsNumber(b) ? (int)b->valuedouble : 0;
        return 0;
    }
    return unsupported(c, path, type, DEC_SUPPORTED);
}

/* ---- loading: model ------------------------------------------------------------------------------ */

static uint64_t mhash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

static int merges_init(seer_tokenizer_t *t, size_t n) {
    size_t slots = 64;
    while (slots < n * 2 + 2) slots *= 2;
    t->mkeys = malloc(slots * sizeof *t->mkeys);
    t->mrank = malloc(slots * sizeof *t->mrank);
    t->mnew = malloc(slots * sizeof *t->mnew);
    if (!t->mkeys || !t->mrank || !t->mnew) return -1;
    memset(t->mkeys, 0xFF, slots * sizeof *t->mkeys);
    t->mslots = slots;
    return 0;
}

static void merges_put(seer_tokenizer_t *t, int32_t a, int32_t b, int32_t rank, int32_t nid) {
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t j = mhash(k) & (t->mslots - 1);
    while (t->mkeys[j] != UINT64_MAX && t->mkeys[j] != k) j = (j + 1) & (t->mslots - 1);
    t->mkeys[j] = k;
    t->mrank[j] = rank;
    t->mnew[j] = nid;
}

static inline int merges_get(const seer_tokenizer_t *t, int32_t a, int32_t b, int32_t *rank, int32_t *nid) {
    if (!t->mslots) return 0;
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t j = mhash(k) & (t->mslots - 1);
    for (;;) {
        uint64_t x = t->mkeys[j];
        if (x == k) {
            *rank = t->mrank[j];
            *nid = t->mnew[j];
            return 1;
        }
        if (x == UINT64_MAX) return 0;
        j = (j + 1) & (t->mslots - 1);
    }
}

/* One merge, given as the two token strings. */
static int add_merge(lctx_t *c, seer_tokenizer_t *t, const char *a, size_t al, const char *b, size_t bl,
                     int32_t rank, const char *path) {
    int32_t ia = tk_strmap_get(&t->vocab, a, al), ib = tk_strmap_get(&t->vocab, b, bl);
    if (ia < 0 || ib < 0)
        return seer_err_set(c->err, SEER_EINVAL, "%s: %s[%d]: token '%.*s' is not in the vocabulary", c->name,
                            path, rank, ia < 0 ? (int)al : (int)bl, ia < 0 ? a : b);
    char stack[512];
    char *cat = al + bl <= sizeof stack ? stack : malloc(al + bl);
    if (!cat) return oom(c);
    memcpy(cat, a, al);
    memcpy(cat + al, b, bl);
    int32_t nid = tk_strmap_get(&t->vocab, cat, al + bl);
    if (cat != stack) free(cat);
    if (nid < 0)
        return seer_err_set(c->err, SEER_EINVAL, "%s: %s[%d]: merged token '%.*s%.*s' is not in the vocabulary",
                            c->name, path, rank, (int)al, a, (int)bl, b);
    merges_put(t, ia, ib, rank, nid);
    return 0;
}

static int load_vocab(lctx_t *c, seer_tokenizer_t *t, const cJSON *vocab, const char *path) {
    if (!cJSON_IsObject(vocab))
        return seer_err_set(c->err, SEER_EPARSE, "%s: %s must be an object of token: id", c->name, path);
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 16777216.0 ||
            e->valuedouble != (double)(int32_t)e->valuedouble)
            return seer_err_set(c->err, SEER_EPARSE, "%s: %s[\"%.100s\"] must be an integer id in 0..2^24",
                                c->name, path, e->string);
        if (tk_strmap_put(&t->vocab, e->string, jlen(c, e->string), (int32_t)e->valuedouble, NULL) < 0)
            return oom(c);
    }
    return 0;
}

static void find_byte_ids(seer_tokenizer_t *t) {
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        t->byte_id[b] = tk_strmap_get(&t->vocab, s, 6);
    }
}

static int load_model(lctx_t *c, seer_tokenizer_t *t, const cJSON *m) {
    const char *type;
    int rc = jtype(c, m, "model", &type);
    if (rc) return rc;
    if (strcmp(type, "BPE") != 0)
        return seer_err_set(c->err, SEER_EINVAL, "%s: model type '%s' is not supported (supported: BPE)", c->name,
                            type);
    const char *s;
    if ((rc = jstr(c, m, "continuing_subword_prefix", "model", &s))) return rc;
    if (s && *s)
        return seer_err_set(c->err, SEER_EINVAL, "%s: model.continuing_subword_prefix '%s' is not supported",
                            c->name, s);
    if ((rc = jstr(c, m, "end_of_word_suffix", "model", &s))) return rc;
    if (s && *s)
        return seer_err_set(c->err, SEER_EINVAL, "%s: model.end_of_word_suffix '%s' is not supported", c->name, s);
    const cJSON *dropout = jget(m, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return seer_err_set(c->err, SEER_EINVAL, "%s: model.dropout is not supported", c->name);
    if ((rc = jbool(c, m, "fuse_unk", 0, "model", &t->fuse_unk))) return rc;
    if ((rc = jbool(c, m, "byte_fallback", 0, "model", &t->byte_fallback))) return rc;
    if ((rc = jbool(c, m, "ignore_merges", 0, "model", &t->ignore_merges))) return rc;
    if ((rc = load_vocab(c, t, jget(m, "vocab"), "model.vocab"))) return rc;
    t->unk_id = -1;
    if ((rc = jstr(c, m, "unk_token", "model", &s))) return rc;
    if (s) {
        t->unk_id = tk_strmap_get(&t->vocab, s, strlen(s));
        if (t->unk_id < 0)
            return seer_err_set(c->err, SEER_EINVAL, "%s: model.unk_token '%s' is not in the vocabulary", c->name, s);
    }
    find_byte_ids(t);
    const cJSON *merges = jget(m, "merges");
    if (!merges || cJSON_IsNull(merges)) return 0;
    if (!cJSON_IsArray(merges))
        return seer_err_set(c->err, SEER_EPARSE, "%s: model.merges must be an array", c->name);
    int n = cJSON_GetArraySize(merges);
    if (merges_init(t, (size_t)n) < 0) return oom(c);
    int32_t rank = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, merges) {
        if (cJSON_IsString(e)) {
            size_t len = jlen(c, e->valuestring);
            const char *sp = memchr(e->valuestring, ' ', len);
            if (!sp || sp == e->valuestring)
                return seer_err_set(c->err, SEER_EPARSE, "%s: model.merges[%d] \"%.100s\" is not \"a b\"", c->name,
                                    rank, e->valuestring);
            if ((rc = add_merge(c, t, e->valuestring, (size_t)(sp - e->valuestring), sp + 1,
                                len - (size_t)(sp + 1 - e->valuestring), rank, "model.merges")))
                return rc;
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring, *b = cJSON_GetArrayItem(e, 1)->valuestring;
            if ((rc = add_merge(c, t, a, jlen(c, a), b, jlen(c, b), rank, "model.merges"))) return rc;
        } else {
            return seer_err_set(c->err, SEER_EPARSE, "%s: model.merges[%d] must be \"a b\" or [\"a\", \"b\"]",
                                c->name, rank);
        }
        rank++;
    }
    return 0;
}

/* ---- finishing: added tokens, id table ------------------------------------------------------------- */

static void normalize_str(const seer_tokenizer_t *t, const char *s, size_t len, tk_buf_t *out);

static int build_set(seer_tokenizer_t *t, added_set_t *set, int normalized) {
    int n = 0;
    for (int i = 0; i < t->nadded; i++)
        if (t->added[i].normalized == normalized && t->added[i].len > 0) n++;
    set->idx = malloc(((size_t)n + 1) * sizeof *set->idx);
    if (!set->idx) return -1;
    int k = 0;
    for (int b = 0; b < 256; b++) {
        set->start[b] = k;
        int first = k;
        for (int i = 0; i < t->nadded; i++) {
            added_t *a = &t->added[i];
            if (a->normalized != normalized || a->len == 0 || (unsigned char)a->s[0] != b) continue;
            /* insertion sort, longest first; equal lengths keep file order */
            int j = k++;
            while (j > first && t->added[set->idx[j - 1]].len < a->len) {
                set->idx[j] = set->idx[j - 1];
                j--;
            }
            set->idx[j] = i;
        }
    }
    set->start[256] = k;
    return 0;
}

static int finish(lctx_t *c, seer_tokenizer_t *t) {
    bl_init();
    /* normalized added tokens are matched against normalized text, so normalize them too */
    for (int i = 0; i < t->nadded; i++) {
        added_t *a = &t->added[i];
        if (!seer_utf8_validate(a->content, a->content_len, NULL))
            return seer_err_set(c->err, SEER_EPARSE, "%s: added token %d is not valid UTF-8", c->name, (int)a->id);
        a->s = a->content;
        a->len = a->content_len;
        if (a->normalized && t->norm) {
            tk_buf_t b = {0};
            normalize_str(t, a->content, a->content_len, &b);
            if (b.oom) return oom(c);
            a->s = b.p ? b.p : dupn("", 0);
            a->len = b.n;
            if (!a->s) return oom(c);
        }
    }
    if (build_set(t, &t->set_raw, 0) < 0 || build_set(t, &t->set_norm, 1) < 0) return oom(c);
    int32_t max = -1;
    const struct tk_sm_entry *ents = t->vocab.e;
    for (size_t i = 0; i < t->vocab.n; i++)
        if (ents[i].val > max) max = ents[i].val;
    for (int i = 0; i < t->nadded; i++)
        if (t->added[i].id > max) max = t->added[i].id;
    t->nids = max + 1;
    size_t n = (size_t)t->nids + 1;
    t->tok_s = calloc(n, sizeof *t->tok_s);
    t->tok_len = calloc(n, sizeof *t->tok_len);
    t->tok_special = calloc(n, 1);
    if (!t->tok_s || !t->tok_len || !t->tok_special) return oom(c);
    for (size_t i = 0; i < t->vocab.n; i++) {
        if (t->tok_s[ents[i].val]) continue; /* first wins, as when HF inverts the map */
        t->tok_s[ents[i].val] = ents[i].s;
        t->tok_len[ents[i].val] = ents[i].len;
    }
    for (int i = 0; i < t->nadded; i++) {
        added_t *a = &t->added[i];
        t->tok_s[a->id] = a->content;
        t->tok_len[a->id] = (uint32_t)a->content_len;
        t->tok_special[a->id] = a->special ? 1 : 2;
    }
    t->md = pcre2_match_data_create(4, NULL);
    if (!t->md) return oom(c);
    return 0;
}

static int load_added(lctx_t *c, seer_tokenizer_t *t, const cJSON *arr) {
    if (!arr || cJSON_IsNull(arr)) return 0;
    if (!cJSON_IsArray(arr)) return seer_err_set(c->err, SEER_EPARSE, "%s: added_tokens must be an array", c->name);
    int n = cJSON_GetArraySize(arr);
    t->added = calloc((size_t)n + 1, sizeof *t->added);
    if (!t->added) return oom(c);
    const cJSON *e;
    int i = 0, rc;
    cJSON_ArrayForEach(e, arr) {
        char path[64];
        snprintf(path, sizeof path, "added_tokens[%d]", i);
        added_t *a = &t->added[i];
        const char *content;
        const cJSON *id = jget(e, "id");
        if ((rc = jstr(c, e, "content", path, &content))) return rc;
        if (!content || !cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 16777216.0)
            return seer_err_set(c->err, SEER_EPARSE, "%s: %s needs a string 'content' and an integer 'id'", c->name,
                                path);
        a->id = (int32_t)id->valuedouble;
        a->content_len = jlen(c, content);
        if (!(a->content = dupn(content, a->content_len))) return oom(c);
        t->nadded = i + 1;
        if ((rc = jbool(c, e, "special", 0, path, &a->special)) || (rc = jbool(c, e, "single_word", 0, path, &a->single_word)) ||
            (rc = jbool(c, e, "lstrip", 0, path, &a->lstrip)) || (rc = jbool(c, e, "rstrip", 0, path, &a->rstrip)) ||
            (rc = jbool(c, e, "normalized", !a->special, path, &a->normalized)))
            return rc;
        i++;
    }
    return 0;
}

int seer_tokenizer_load_json(seer_tokenizer_t **out, const char *text, size_t len, const char *name,
                             seer_err_t *err) {
    lctx_t c = {name ? name : "tokenizer.json", err, NULL, 0};
    *out = NULL;
    /* counted before cJSON builds its tree (a value costs it ~80 bytes): a model folder's
     * tokenizer.json may be hostile */
    size_t nvalues = seer_json_count_values(text, len);
    if (nvalues > SEER_JSON_MAX_VALUES_TOKENIZER)
        return seer_err_set(err, SEER_EPARSE, "%s: holds %zu JSON values, more than the %zu allowed for a tokenizer",
                            c.name, nvalues, SEER_JSON_MAX_VALUES_TOKENIZER);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        size_t line = 1;
        for (size_t i = 0; i < off && i < len; i++)
            if (text[i] == '\n') line++;
        return seer_err_set(err, SEER_EPARSE, "%s: malformed JSON near byte %zu (line %zu)", c.name, off, line);
    }
    int rc;
    size_t nul_bound = seer_json_nul_bound(text, len);
    if (nul_bound && (c.nul = malloc(nul_bound * sizeof *c.nul)))
        c.nnul = seer_json_nul_strings(text, len, root, c.nul, nul_bound);
    seer_tokenizer_t *t = nul_bound && !c.nul ? NULL : calloc(1, sizeof *t);
    if (!t) {
        cJSON_Delete(root);
        free(c.nul);
        return oom(&c);
    }
    if (!cJSON_IsObject(root)) {
        rc = seer_err_set(err, SEER_EPARSE, "%s: the top level must be an object", c.name);
        goto fail;
    }
    const cJSON *j;
    if ((rc = load_model(&c, t, jget(root, "model")))) goto fail;
    if ((j = jget(root, "normalizer")) && !cJSON_IsNull(j) && (rc = load_norm(&c, j, "normalizer", &t->norm))) goto fail;
    if ((j = jget(root, "pre_tokenizer")) && !cJSON_IsNull(j) && (rc = load_pretok(&c, j, "pre_tokenizer", &t->pretok)))
        goto fail;
    if ((j = jget(root, "post_processor")) && !cJSON_IsNull(j) && (rc = load_post(&c, j, "post_processor", &t->post)))
        goto fail;
    if ((j = jget(root, "decoder")) && !cJSON_IsNull(j) && (rc = load_dec(&c, j, "decoder", &t->dec))) goto fail;
    if ((rc = load_added(&c, t, jget(root, "added_tokens")))) goto fail;
    if ((j = jget(root, "truncation")) && !cJSON_IsNull(j)) {
        rc = seer_err_set(err, SEER_EINVAL, "%s: truncation is not supported (it must be null)", c.name);
        goto fail;
    }
    if ((rc = finish(&c, t))) goto fail;
    cJSON_Delete(root);
    free(c.nul); /* its entries point into the tree just freed: nothing kept them */
    *out = t;
    return 0;
fail:
    cJSON_Delete(root);
    free(c.nul);
    seer_tokenizer_free(t);
    return rc;
}

/* A tokenizer's file comes from a model folder, which is not trusted (docs/security.md): opened
 * as the model's files are (seer_st_open_confined: a regular file, a link only when it stays in
 * the folder, a FIFO refused rather than waited on), and at most max bytes. */
static int read_max(const char *path, size_t max, char **out, size_t *len, seer_err_t *err) {
    int fd = seer_st_open_confined(path, path, err);
    if (fd < 0) return fd;
    struct stat st;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size > (uint64_t)max) {
        close(fd);
        return seer_err_set(err, SEER_EINVAL, "%s is %llu bytes, more than such a file may be (%zu)", path,
                            (unsigned long long)st.st_size, max);
    }
    tk_buf_t b = {0};
    char chunk[65536];
    int bad = 0;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            bad = 1;
            break;
        }
        if (n == 0) break;
        if (b.n + (size_t)n > max) { /* it grew while read */
            close(fd);
            tk_buf_free(&b);
            return seer_err_set(err, SEER_EINVAL, "%s is more than such a file may be (%zu bytes)", path, max);
        }
        tk_buf_add(&b, chunk, (size_t)n);
    }
    close(fd);
    if (bad) {
        tk_buf_free(&b);
        return seer_err_set(err, SEER_EIO, "cannot read %s", path);
    }
    if (b.oom) {
        tk_buf_free(&b);
        return seer_err_set(err, SEER_ENOMEM, "out of memory reading %s", path);
    }
    if (!b.p) tk_buf_add(&b, "", 0);
    *out = b.p;
    *len = b.n;
    return 0;
}

static int read_all(const char *path, char **out, size_t *len, seer_err_t *err) {
    return read_max(path, SEER_TOKENIZER_MAX_FILE, out, len, err);
}

int seer_tokenizer_read_model_file(const char *path, size_t max_bytes, char **out, size_t *len, seer_err_t *err) {
    return read_max(path, max_bytes, out, len, err);
}

int seer_tokenizer_load_file(seer_tokenizer_t **out, const char *path, seer_err_t *err) {
    char *text;
    size_t len;
    *out = NULL;
    int rc = read_all(path, &text, &len, err);
    if (rc) return rc;
    rc = seer_tokenizer_load_json(out, text, len, path, err);
    free(text);
    return rc;
}

int seer_tokenizer_load_gpt2(seer_tokenizer_t **out, const char *vocab_path, const char *merges_path,
                             seer_err_t *err) {
    char *vtext = NULL, *mtext = NULL;
    size_t vlen, mlen;
    *out = NULL;
    int rc = read_all(vocab_path, &vtext, &vlen, err);
    if (rc) return rc;
    if ((rc = read_all(merges_path, &mtext, &mlen, err))) {
        free(vtext);
        return rc;
    }
    lctx_t c = {vocab_path, err, NULL, 0};
    size_t nvalues = seer_json_count_values(vtext, vlen);
    if (nvalues > SEER_JSON_MAX_VALUES_TOKENIZER) {
        free(vtext);
        free(mtext);
        return seer_err_set(err, SEER_EPARSE, "%s: holds %zu JSON values, more than the %zu allowed for a vocabulary",
                            vocab_path, nvalues, SEER_JSON_MAX_VALUES_TOKENIZER);
    }
    seer_tokenizer_t *t = calloc(1, sizeof *t);
    cJSON *root = cJSON_ParseWithLength(vtext, vlen);
    if (!t) {
        rc = oom(&c);
        goto done;
    }
    if (!root) {
        rc = seer_err_set(err, SEER_EPARSE, "%s: malformed JSON", vocab_path);
        goto done;
    }
    if ((rc = load_vocab(&c, t, root, "vocab"))) goto done;
    t->unk_id = -1;
    find_byte_ids(t);
    size_t nlines = 1;
    for (size_t i = 0; i < mlen; i++) nlines += mtext[i] == '\n';
    if (merges_init(t, nlines) < 0) {
        rc = oom(&c);
        goto done;
    }
    c.name = merges_path;
    int32_t rank = 0;
    size_t lineno = 0;
    for (char *p = mtext, *e; p < mtext + mlen; p = e + 1) {
        e = memchr(p, '\n', (size_t)(mtext + mlen - p));
        if (!e) e = mtext + mlen;
        lineno++;
        size_t n = (size_t)(e - p);
        if (n && p[n - 1] == '\r') n--;
        if (n == 0 || (lineno == 1 && n >= 8 && !memcmp(p, "#version", 8))) continue;
        char *sp = memchr(p, ' ', n);
        if (!sp || sp == p || sp + 1 == p + n) {
            rc = seer_err_set(err, SEER_EPARSE, "%s:%zu: a merge line must be \"a b\"", merges_path, lineno);
            goto done;
        }
        if ((rc = add_merge(&c, t, p, (size_t)(sp - p), sp + 1, (size_t)(p + n - sp - 1), rank, "merges"))) goto done;
        rank++;
    }
    c.name = vocab_path;
    /* the layout of Hugging Face's GPT-2 tokenizer.json */
    if (!(t->pretok = calloc(1, sizeof *t->pretok)) || !(t->dec = calloc(1, sizeof *t->dec))) {
        rc = oom(&c);
        goto done;
    }
    t->pretok->type = PT_BYTELEVEL;
    if ((rc = re_compile(&t->pretok->re, GPT2_PATTERN, strlen(GPT2_PATTERN), 0, "GPT-2 pattern", err))) goto done;
    t->dec->type = D_BYTELEVEL;
    int32_t eot = tk_strmap_get(&t->vocab, "<|endoftext|>", 13);
    if (eot >= 0) {
        if (!(t->added = calloc(1, sizeof *t->added)) || !(t->added[0].content = dupn("<|endoftext|>", 13))) {
            rc = oom(&c);
            goto done;
        }
        t->nadded = 1;
        t->added[0].content_len = 13;
        t->added[0].id = eot;
        t->added[0].special = 1;
        t->added[0].normalized = 1;
    }
    rc = finish(&c, t);
done:
    cJSON_Delete(root);
    free(vtext);
    free(mtext);
    if (rc) seer_tokenizer_free(t);
    else *out = t;
    return rc;
}

/* ---- encoding: normalizer ----------------------------------------------------------------------- */

static void replace_all(const tk_re_t *re, pcre2_match_data *md, const char *s, size_t len, const char *with,
                        size_t wlen, tk_buf_t *out) {
    spans_t m = {0};
    if (re_find_all(re, s, len, md, &m) < 0) {
        out->oom = 1;
        free(m.v);
        return;
    }
    size_t prev = 0;
    for (size_t i = 0; i < m.n; i += 2) {
        tk_buf_add(out, s + prev, m.v[i] - prev);
        tk_buf_add(out, with, wlen);
        prev = m.v[i + 1];
    }
    tk_buf_add(out, s + prev, len - prev);
    free(m.v);
}

static int is_ws(unsigned char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); }

/* Unicode White_Space (Rust's char::is_whitespace, which the Strip normalizer uses). */
static int is_white_space_cp(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Length of the white-space character that starts at s[a] (0: none). The text is UTF-8. */
static size_t ws_at(const unsigned char *s, size_t a, size_t b) {
    if (is_ws(s[a])) return 1;
    if (s[a] == 0xC2 && a + 1 < b && (s[a + 1] == 0x85 || s[a + 1] == 0xA0)) return 2;
    if ((s[a] == 0xE1 || s[a] == 0xE2 || s[a] == 0xE3) && a + 2 < b) {
        uint32_t c = ((uint32_t)(s[a] & 0x0F) << 12) | ((uint32_t)(s[a + 1] & 0x3F) << 6) | (s[a + 2] & 0x3F);
        return is_white_space_cp(c) ? 3 : 0;
    }
    return 0;
}

/* Length of the white-space character that ends at s[b - 1] (0: none). */
static size_t ws_before(const unsigned char *s, size_t a, size_t b) {
    if (is_ws(s[b - 1])) return 1;
    if (b - a >= 2 && ws_at(s, b - 2, b) == 2) return 2;
    if (b - a >= 3 && ws_at(s, b - 3, b) == 3) return 3;
    return 0;
}

static void norm_apply(const norm_t *n, pcre2_match_data *md, const char *s, size_t len, tk_buf_t *out) {
    switch (n->type) {
    case N_SEQ: {
        tk_buf_t cur = {0};
        tk_buf_add(&cur, s, len);
        for (int i = 0; i < n->nkids; i++) {
            tk_buf_t next = {0};
            tk_buf_add(&next, "", 0);
            norm_apply(n->kids[i], md, cur.p, cur.n, &next);
            if (next.oom) cur.oom = 1;
            tk_buf_free(&cur);
            cur = next;
        }
        if (cur.oom) out->oom = 1;
        tk_buf_add(out, cur.p, cur.n);
        tk_buf_free(&cur);
        return;
    }
    case N_PREPEND:
        if (len) tk_buf_add(out, n->a, n->alen); /* Hugging Face prepends to non-empty text only */
        tk_buf_add(out, s, len);
        return;
    case N_REPLACE:
        replace_all(n->re, md, s, len, n->b, n->blen, out);
        return;
    case N_STRIP: {
        size_t a = 0, b = len;
        const unsigned char *u = (const unsigned char *)s;
        size_t k;
        if (n->left)
            while (a < b && (k = ws_at(u, a, b))) a += k;
        if (n->right)
            while (b > a && (k = ws_before(u, a, b))) b -= k;
        tk_buf_add(out, s + a, b - a);
        return;
    }
    case N_UNICODE: {
        char *o;
        size_t olen;
        int rc = seer_unicode_normalize_hf(s, len, n->form, &o, &olen);
        if (rc == -1) out->oom = 1;
        else if (rc) tk_buf_add(out, s, len); /* not UTF-8: left as is */
        else tk_buf_add(out, o, olen);
        free(o);
        return;
    }
    }
}

static void normalize_str(const seer_tokenizer_t *t, const char *s, size_t len, tk_buf_t *out) {
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    if (!md) {
        out->oom = 1;
        return;
    }
    tk_buf_add(out, "", 0);
    norm_apply(t->norm, md, s, len, out);
    pcre2_match_data_free(md);
}

/* ---- encoding: pre-tokenizer ------------------------------------------------------------------------- */

/* A piece of text in the arena; `first` marks the piece that starts at offset 0 of the input
 * (Metaspace's prepend_scheme "first"). */
typedef struct piece {
    size_t off, len;
    int first;
} piece_t;

typedef struct pieces {
    piece_t *v;
    size_t n, cap;
    int oom;
} pieces_t;

static void pieces_push(pieces_t *p, size_t off, size_t len, int first) {
    if (p->oom || len == 0) return;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 32;
        piece_t *v = realloc(p->v, cap * sizeof *v);
        if (!v) {
            p->oom = 1;
            return;
        }
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = (piece_t){off, len, first};
}

/* Splits one piece at the spans of m according to the behaviour. */
static void split_piece(const piece_t *pc, const spans_t *m, int behavior, int invert, pieces_t *out) {
    size_t base = pc->off, len = pc->len;
    /* pieces as (start, end, is_delim) over [0, len) */
    size_t prev = 0;
    size_t pend_start = 0;
    int have_pend = 0; /* MergedWithNext: a delimiter waiting for what follows; Contiguous: a run */
    size_t k = 0;
    for (;;) {
        size_t a, b;
        int delim;
        if (k < m->n && prev < m->v[k]) {
            a = prev;
            b = m->v[k];
            delim = 0;
        } else if (k < m->n) {
            a = m->v[k];
            b = m->v[k + 1];
            delim = 1;
            k += 2;
        } else if (prev < len) {
            a = prev;
            b = len;
            delim = 0;
        } else {
            break;
        }
        prev = b;
        if (invert) delim = !delim;
        int first = pc->first && a == 0;
        switch (behavior) {
        case B_REMOVED:
            if (!delim) pieces_push(out, base + a, b - a, first);
            break;
        case B_ISOLATED:
            pieces_push(out, base + a, b - a, first);
            break;
        case B_MERGED_PREV:
            if (delim && out->n > 0 && have_pend) {
                out->v[out->n - 1].len += b - a;
            } else {
                pieces_push(out, base + a, b - a, first);
            }
            have_pend = 1;
            break;
        case B_MERGED_NEXT:
            if (delim) {
                if (!have_pend) pend_start = a;
                have_pend = 1;
            } else {
                size_t s0 = have_pend ? pend_start : a;
                pieces_push(out, base + s0, b - s0, pc->first && s0 == 0);
                have_pend = 0;
            }
            break;
        case B_CONTIGUOUS:
            if (delim) {
                if (!have_pend) pend_start = a;
                have_pend = 1;
            } else {
                if (have_pend) pieces_push(out, base + pend_start, a - pend_start, pc->first && pend_start == 0);
                have_pend = 0;
                pieces_push(out, base + a, b - a, first);
            }
            break;
        }
    }
    if (have_pend && (behavior == B_MERGED_NEXT || behavior == B_CONTIGUOUS))
        pieces_push(out, base + pend_start, len - pend_start, pc->first && pend_start == 0);
}

typedef struct enc {
    seer_tokenizer_t *t;
    tk_buf_t arena;
    spans_t spans;
    int32_t *ids;
    size_t n, cap;
    int oom, fail;
} enc_t;

static void pretok_apply(enc_t *e, const pretok_t *p, pieces_t *in, pieces_t *out);

static void split_all(enc_t *e, const tk_re_t *re, int behavior, int invert, pieces_t *in, pieces_t *out) {
    for (size_t i = 0; i < in->n; i++) {
        piece_t pc = in->v[i];
        if (re_find_all(re, e->arena.p + pc.off, pc.len, e->t->md, &e->spans) < 0) {
            e->fail = 1;
            return;
        }
        split_piece(&pc, &e->spans, behavior, invert, out);
    }
}

static void pretok_apply(enc_t *e, const pretok_t *p, pieces_t *in, pieces_t *out) {
    switch (p->type) {
    case PT_SEQ: {
        pieces_t cur = {0};
        for (size_t i = 0; i < in->n; i++) pieces_push(&cur, in->v[i].off, in->v[i].len, in->v[i].first);
        for (int k = 0; k < p->nkids; k++) {
            pieces_t next = {0};
            pretok_apply(e, p->kids[k], &cur, &next);
            if (next.oom || cur.oom) e->oom = 1;
            free(cur.v);
            cur = next;
        }
        for (size_t i = 0; i < cur.n; i++) pieces_push(out, cur.v[i].off, cur.v[i].len, cur.v[i].first);
        free(cur.v);
        return;
    }
    case PT_SPLIT:
        split_all(e, p->re, p->behavior, p->invert, in, out);
        return;
    case PT_BYTELEVEL: {
        pieces_t tmp = {0}, *src = in;
        if (p->add_prefix_space || p->re) {
            pieces_t pre = {0};
            for (size_t i = 0; i < in->n; i++) {
                piece_t pc = in->v[i];
                if (p->add_prefix_space && e->arena.p[pc.off] != ' ') {
                    size_t off = e->arena.n;
                    tk_buf_add(&e->arena, " ", 1);
                    tk_buf_add_self(&e->arena, pc.off, pc.len);
                    pc.off = off;
                    pc.len++;
                }
                pieces_push(&pre, pc.off, pc.len, pc.first);
            }
            if (p->re) {
                split_all(e, p->re, B_ISOLATED, 0, &pre, &tmp);
                free(pre.v);
            } else {
                tmp = pre;
            }
            if (tmp.oom) e->oom = 1;
            src = &tmp;
        }
        /* bytes -> the characters that stand for them */
        for (size_t i = 0; i < src->n && !e->arena.oom; i++) {
            piece_t pc = src->v[i];
            size_t off = e->arena.n;
            tk_buf_reserve(&e->arena, pc.len * 2);
            if (e->arena.oom) break;
            const unsigned char *s = (const unsigned char *)e->arena.p + pc.off;
            char *d = e->arena.p + e->arena.n;
            for (size_t k = 0; k < pc.len; k++) {
                unsigned char b = s[k];
                *d++ = bl_utf8[b][0];
                if (bl_utf8_len[b] == 2) *d++ = bl_utf8[b][1];
            }
            e->arena.n = (size_t)(d - e->arena.p);
            e->arena.p[e->arena.n] = 0;
            pieces_push(out, off, e->arena.n - off, pc.first);
        }
        if (src == &tmp) free(tmp.v);
        return;
    }
    case PT_METASPACE: {
        pieces_t rep = {0};
        for (size_t i = 0; i < in->n; i++) {
            piece_t pc = in->v[i];
            size_t off = e->arena.n;
            /* tokenizers tests the text after replacing spaces: a piece that already starts
             * with the replacement character ("▁Hello") gets no second one */
            int starts = (pc.len && e->arena.p[pc.off] == ' ') ||
                         (pc.len >= p->repl_len && memcmp(e->arena.p + pc.off, p->repl, p->repl_len) == 0);
            if (!starts && (p->prepend == PREPEND_ALWAYS || (p->prepend == PREPEND_FIRST && pc.first)))
                tk_buf_add(&e->arena, p->repl, p->repl_len);
            for (size_t k = 0; k < pc.len && !e->arena.oom; k++) {
                char ch = e->arena.p[pc.off + k];
                if (ch == ' ') tk_buf_add(&e->arena, p->repl, p->repl_len);
                else tk_buf_add(&e->arena, &ch, 1);
            }
            pieces_push(&rep, off, e->arena.n - off, pc.first);
        }
        if (p->split) {
            /* split before each replacement character (MergedWithNext) */
            for (size_t i = 0; i < rep.n; i++) {
                piece_t pc = rep.v[i];
                const char *s = e->arena.p + pc.off;
                size_t a = 0;
                for (size_t k = 1; k + p->repl_len <= pc.len; k++) {
                    if (memcmp(s + k, p->repl, p->repl_len) == 0 && k > a) {
                        pieces_push(out, pc.off + a, k - a, pc.first && a == 0);
                        a = k;
                    }
                }
                pieces_push(out, pc.off + a, pc.len - a, pc.first && a == 0);
            }
        } else {
            for (size_t i = 0; i < rep.n; i++) pieces_push(out, rep.v[i].off, rep.v[i].len, rep.v[i].first);
        }
        if (rep.oom) e->oom = 1;
        free(rep.v);
        return;
    }
    }
}

/* ---- encoding: the BPE model ------------------------------------------------------------------------ */

static void ids_push(enc_t *e, int32_t id) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 256;
        int32_t *v = realloc(e->ids, cap * sizeof *v);
        if (!v) {
            e->oom = 1;
            return;
        }
        e->ids = v;
        e->cap = cap;
    }
    e->ids[e->n++] = id;
}

typedef struct sym {
    int32_t id;
    int prev, next;
    int alive;
} sym_t;

typedef struct hnode {
    int32_t rank;
    int pos;
    int32_t nid;
} hnode_t;

static int hless(const hnode_t *a, const hnode_t *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void hpush(hnode_t *h, size_t *n, hnode_t x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static hnode_t hpop(hnode_t *h, size_t *n) {
    hnode_t top = h[0], x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const hnode_t *best = &x;
        if (l < *n && hless(&h[l], best)) {
            m = l;
            best = &h[l];
        }
        if (r < *n && hless(&h[r], best)) m = r;
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = x;
    return top;
}

static void cache_clear(seer_tokenizer_t *t) {
    tk_strmap_free(&t->cache);
    t->cache_n = 0;
}

static void bpe_word(enc_t *e, const char *w, size_t len) {
    seer_tokenizer_t *t = e->t;
    if (t->ignore_merges) {
        int32_t id = tk_strmap_get(&t->vocab, w, len);
        if (id >= 0) {
            ids_push(e, id);
            return;
        }
    }
    int cacheable = len <= CACHE_MAX_WORD;
    if (cacheable) {
        int32_t v = tk_strmap_get(&t->cache, w, len);
        if (v >= 0) {
            int32_t cnt = t->cache_ids[v];
            for (int32_t i = 0; i < cnt; i++) ids_push(e, t->cache_ids[v + 1 + i]);
            return;
        }
    }
    /* initial symbols: one per character, or byte tokens, or (fused) unk */
    sym_t stack_syms[128];
    hnode_t stack_heap[256];
    size_t maxsym = len + 1;
    sym_t *sy = maxsym <= 128 ? stack_syms : malloc(maxsym * sizeof *sy);
    hnode_t *heap = maxsym * 2 <= 256 ? stack_heap : malloc(maxsym * 2 * sizeof *heap);
    if (!sy || !heap) {
        e->oom = 1;
        goto out;
    }
    int ns = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < len;) {
        size_t cl;
        tk_utf8_decode((const unsigned char *)w + i, &cl);
        int32_t id = tk_strmap_get(&t->vocab, w + i, cl);
        if (id >= 0) {
            if (unk_pending) {
                sy[ns++] = (sym_t){t->unk_id, 0, 0, 1};
                unk_pending = 0;
            }
            sy[ns++] = (sym_t){id, 0, 0, 1};
        } else {
            int done = 0;
            if (t->byte_fallback) {
                int all = 1;
                for (size_t k = 0; k < cl; k++)
                    if (t->byte_id[(unsigned char)w[i + k]] < 0) all = 0;
                if (all) {
                    for (size_t k = 0; k < cl; k++) sy[ns++] = (sym_t){t->byte_id[(unsigned char)w[i + k]], 0, 0, 1};
                    done = 1;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (unk_pending && !t->fuse_unk) sy[ns++] = (sym_t){t->unk_id, 0, 0, 1};
                unk_pending = 1;
            }
        }
        i += cl;
    }
    if (unk_pending) sy[ns++] = (sym_t){t->unk_id, 0, 0, 1};
    for (int i = 0; i < ns; i++) {
        sy[i].prev = i - 1;
        sy[i].next = i + 1 < ns ? i + 1 : -1;
    }
    size_t hn = 0;
    for (int i = 0; i + 1 < ns; i++) {
        int32_t r, nid;
        if (merges_get(t, sy[i].id, sy[i + 1].id, &r, &nid)) hpush(heap, &hn, (hnode_t){r, i, nid});
    }
    while (hn) {
        hnode_t top = hpop(heap, &hn);
        sym_t *s = &sy[top.pos];
        if (!s->alive || s->next < 0) continue;
        int32_t r, nid;
        if (!merges_get(t, s->id, sy[s->next].id, &r, &nid) || nid != top.nid) continue;
        int nx = s->next;
        s->id = nid;
        sy[nx].alive = 0;
        s->next = sy[nx].next;
        if (s->next >= 0) sy[s->next].prev = top.pos;
        if (s->prev >= 0 && merges_get(t, sy[s->prev].id, s->id, &r, &nid))
            hpush(heap, &hn, (hnode_t){r, s->prev, nid});
        if (s->next >= 0 && merges_get(t, s->id, sy[s->next].id, &r, &nid))
            hpush(heap, &hn, (hnode_t){r, top.pos, nid});
    }
    size_t first_out = e->n;
    for (int i = ns ? 0 : -1; i >= 0; i = sy[i].next) ids_push(e, sy[i].id);
    if (cacheable && !e->oom) {
        size_t cnt = e->n - first_out;
        if (t->cache.n >= CACHE_MAX_WORDS) cache_clear(t);
        if (t->cache_n + cnt + 1 > t->cache_cap) {
            size_t cap = t->cache_cap ? t->cache_cap * 2 : 4096;
            while (cap < t->cache_n + cnt + 1) cap *= 2;
            int32_t *v = realloc(t->cache_ids, cap * sizeof *v);
            if (!v) goto out; /* the cache is optional */
            t->cache_ids = v;
            t->cache_cap = cap;
        }
        if (tk_strmap_put(&t->cache, w, len, (int32_t)t->cache_n, NULL) == 0) {
            t->cache_ids[t->cache_n] = (int32_t)cnt;
            if (cnt) memcpy(t->cache_ids + t->cache_n + 1, e->ids + first_out, cnt * sizeof(int32_t)); /* e->ids may be NULL */
            t->cache_n += cnt + 1;
        }
    }
out:
    if (sy != stack_syms) free(sy);
    if (heap != stack_heap) free(heap);
}

/* ---- encoding: added tokens and the whole pipeline --------------------------------------------------- */

static int word_byte(unsigned char ch) { return ch >= 0x80 || ch == '_' || (ch >= '0' && ch <= '9') || ((ch | 32) >= 'a' && (ch | 32) <= 'z'); }

/* Text segment s[0..len) (in the arena at `off`) without added tokens of `set` in it: calls
 * `text` for the stretches between tokens and pushes the tokens' ids. */
typedef void (*text_fn)(enc_t *e, size_t off, size_t len, int first);

static void split_added(enc_t *e, const added_set_t *set, size_t off, size_t len, int first, text_fn text) {
    seer_tokenizer_t *t = e->t;
    size_t start = 0; /* of the text stretch not yet emitted */
    size_t pos = 0;
    if (set->start[256] == 0) {
        text(e, off, len, first);
        return;
    }
    while (pos < len) {
        const char *s = e->arena.p + off;
        unsigned char c0 = (unsigned char)s[pos];
        const added_t *hit = NULL;
        for (int k = set->start[c0]; k < set->start[c0 + 1]; k++) {
            const added_t *a = &t->added[set->idx[k]];
            if (a->len > len - pos || memcmp(s + pos, a->s, a->len) != 0) continue;
            if (a->single_word && ((pos > 0 && word_byte((unsigned char)s[pos - 1])) ||
                                   (pos + a->len < len && word_byte((unsigned char)s[pos + a->len]))))
                continue;
            hit = a;
            break;
        }
        if (!hit) {
            pos++;
            continue;
        }
        size_t a = pos, b = pos + hit->len;
        if (hit->lstrip)
            while (a > start && is_ws((unsigned char)s[a - 1])) a--;
        if (hit->rstrip)
            while (b < len && is_ws((unsigned char)s[b])) b++;
        if (a > start) text(e, off + start, a - start, first && start == 0);
        ids_push(e, hit->id);
        pos = start = b;
    }
    if (len > start) text(e, off + start, len - start, first && start == 0);
}

static void model_text(enc_t *e, size_t off, size_t len, int first) {
    pieces_t in = {0}, out = {0};
    pieces_push(&in, off, len, first);
    if (e->t->pretok) {
        pretok_apply(e, e->t->pretok, &in, &out);
    } else {
        out = in;
        in = (pieces_t){0};
    }
    if (in.oom || out.oom || e->arena.oom) e->oom = 1;
    for (size_t i = 0; i < out.n && !e->oom; i++) bpe_word(e, e->arena.p + out.v[i].off, out.v[i].len);
    free(in.v);
    free(out.v);
}

static void raw_text(enc_t *e, size_t off, size_t len, int first) {
    if (!e->t->norm) {
        split_added(e, &e->t->set_norm, off, len, first, model_text);
        return;
    }
    tk_buf_t nb = {0};
    norm_apply(e->t->norm, e->t->md, e->arena.p + off, len, &nb);
    size_t noff = e->arena.n;
    tk_buf_add(&e->arena, nb.p ? nb.p : "", nb.n);
    if (nb.oom) e->oom = 1;
    tk_buf_free(&nb);
    if (e->oom || e->arena.oom) {
        e->oom = 1;
        return;
    }
    split_added(e, &e->t->set_norm, noff, e->arena.n - noff, first, model_text);
}

static void post_apply(enc_t *e, const post_t *p, const int32_t *ids, size_t n) {
    switch (p->type) {
    case PP_NOOP:
        for (size_t i = 0; i < n; i++) ids_push(e, ids[i]);
        return;
    case PP_TEMPLATE:
        for (int k = 0; k < p->nitems; k++) {
            if (p->items[k].n < 0)
                for (size_t i = 0; i < n; i++) ids_push(e, ids[i]);
            else
                for (int i = 0; i < p->items[k].n; i++) ids_push(e, p->items[k].ids[i]);
        }
        return;
    case PP_SEQ: {
        int32_t *cur = malloc((n + 1) * sizeof *cur);
        if (!cur) {
            e->oom = 1;
            return;
        }
        memcpy(cur, ids, n * sizeof *cur);
        size_t cn = n;
        for (int k = 0; k < p->nkids; k++) {
            enc_t sub = {.t = e->t};
            post_apply(&sub, p->kids[k], cur, cn);
            free(cur);
            if (sub.oom) {
                free(sub.ids);
                e->oom = 1;
                return;
            }
            cur = sub.ids;
            cn = sub.n;
        }
        for (size_t i = 0; i < cn; i++) ids_push(e, cur[i]);
        free(cur);
        return;
    }
    }
}

int seer_tokenizer_encode(seer_tokenizer_t *t, const char *text, size_t len, int add_special, int32_t **ids,
                          size_t *n_ids, seer_err_t *err) {
    size_t bad;
    *ids = NULL;
    *n_ids = 0;
    if (!seer_utf8_validate(text, len, &bad))
        return seer_err_set(err, SEER_EINVAL, "tokenizer: text is not valid UTF-8 (at byte %zu)", bad);
    enc_t e = {.t = t};
    tk_buf_add(&e.arena, text, len);
    if (!e.arena.oom) split_added(&e, &t->set_raw, 0, len, 1, raw_text);
    if (add_special && t->post && !e.oom && !e.fail) {
        enc_t out = {.t = t};
        post_apply(&out, t->post, e.ids, e.n);
        free(e.ids);
        e.ids = out.ids;
        e.n = out.n;
        if (out.oom) e.oom = 1;
    }
    tk_buf_free(&e.arena);
    free(e.spans.v);
    if (e.oom || e.fail) {
        free(e.ids);
        return e.fail ? seer_err_set(err, SEER_EINVAL, "tokenizer: a pre-tokenizer regex failed to match (match limit?)")
                      : seer_err_set(err, SEER_ENOMEM, "tokenizer: out of memory");
    }
    if (!e.ids) e.ids = malloc(sizeof(int32_t));
    if (!e.ids) return seer_err_set(err, SEER_ENOMEM, "tokenizer: out of memory");
    *ids = e.ids;
    *n_ids = e.n;
    return 0;
}

/* ---- decoding ------------------------------------------------------------------------------------------ */

typedef struct toks {
    tk_buf_t *v;
    size_t n, cap;
    int oom;
} toks_t;

static tk_buf_t *toks_push(toks_t *l, const char *s, size_t len) {
    if (l->oom) return NULL;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        tk_buf_t *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->oom = 1;
            return NULL;
        }
        l->v = v;
        l->cap = cap;
    }
    tk_buf_t *b = &l->v[l->n++];
    memset(b, 0, sizeof *b);
    tk_buf_add(b, s, len);
    if (b->oom) l->oom = 1;
    return b;
}

static void toks_free(toks_t *l) {
    for (size_t i = 0; i < l->n; i++) tk_buf_free(&l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* Bytes to text the way Rust's String::from_utf8_lossy does: each maximal ill-formed
 * subpart becomes one U+FFFD. */
static void utf8_lossy(const unsigned char *p, size_t n, tk_buf_t *out) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) {
            tk_buf_add(out, p + i, 1);
            i++;
            continue;
        }
        size_t need = 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) need = 2, lo = 0xA0;
        else if (c == 0xED) need = 2, hi = 0x9F;
        else if (c >= 0xE1 && c <= 0xEF) need = 2;
        else if (c == 0xF0) need = 3, lo = 0x90;
        else if (c == 0xF4) need = 3, hi = 0x8F;
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        size_t k = 1;
        int ok = need > 0;
        for (; ok && k <= need; k++) {
            if (i + k >= n) {
                ok = 0;
                break;
            }
            unsigned char x = p[i + k];
            if (k == 1 ? (x < lo || x > hi) : ((x & 0xC0) != 0x80)) {
                ok = 0;
                break;
            }
        }
        if (ok) {
            tk_buf_add(out, p + i, need + 1);
            i += need + 1;
        } else {
            tk_buf_add(out, "\xEF\xBF\xBD", 3);
            i += k > 1 ? k : 1;
        }
    }
}

static void dec_apply(const seer_tokenizer_t *t, const dec_t *d, pcre2_match_data *md, toks_t *in, toks_t *out) {
    switch (d->type) {
    case D_SEQ: {
        toks_t cur = *in;
        memset(in, 0, sizeof *in);
        for (int k = 0; k < d->nkids; k++) {
            toks_t next = {0};
            dec_apply(t, d->kids[k], md, &cur, &next);
            if (cur.oom) next.oom = 1;
            toks_free(&cur);
            cur = next;
        }
        *out = cur;
        return;
    }
    case D_BYTELEVEL: {
        tk_buf_t bytes = {0};
        for (size_t i = 0; i < in->n; i++) {
            const unsigned char *s = (const unsigned char *)in->v[i].p;
            size_t n = in->v[i].n, k = 0, start = bytes.n;
            int all = 1;
            while (k < n) {
                size_t cl;
                uint32_t cp = tk_utf8_decode(s + k, &cl);
                int b = cp < 324 ? bl_from_cp[cp] : -1;
                if (b < 0) {
                    all = 0;
                    break;
                }
                unsigned char ch = (unsigned char)b;
                tk_buf_add(&bytes, &ch, 1);
                k += cl;
            }
            if (!all) {
                bytes.n = start;
                tk_buf_add(&bytes, s, n);
            }
        }
        tk_buf_t *o = toks_push(out, "", 0);
        if (o) utf8_lossy((const unsigned char *)bytes.p, bytes.n, o);
        if (bytes.oom || (o && o->oom)) out->oom = 1;
        tk_buf_free(&bytes);
        return;
    }
    case D_BYTEFALLBACK: {
        tk_buf_t pend = {0};
        for (size_t i = 0; i <= in->n; i++) {
            const tk_buf_t *b = i < in->n ? &in->v[i] : NULL;
            unsigned int byte;
            char tail;
            if (b && b->n == 6 && !memcmp(b->p, "<0x", 3) && b->p[5] == '>' &&
                sscanf(b->p + 3, "%2x%c", &byte, &tail) == 2 && tail == '>') {
                unsigned char ch = (unsigned char)byte;
                tk_buf_add(&pend, &ch, 1);
                continue;
            }
            if (pend.n) {
                if (seer_utf8_validate(pend.p, pend.n, NULL)) {
                    toks_push(out, pend.p, pend.n);
                } else {
                    for (size_t k = 0; k < pend.n; k++) toks_push(out, "\xEF\xBF\xBD", 3);
                }
                pend.n = 0;
            }
            if (b) toks_push(out, b->p, b->n);
        }
        if (pend.oom) out->oom = 1;
        tk_buf_free(&pend);
        return;
    }
    case D_FUSE: {
        tk_buf_t *o = toks_push(out, "", 0);
        for (size_t i = 0; o && i < in->n; i++) tk_buf_add(o, in->v[i].p, in->v[i].n);
        if (o && o->oom) out->oom = 1;
        return;
    }
    case D_REPLACE:
        for (size_t i = 0; i < in->n; i++) {
            tk_buf_t *o = toks_push(out, "", 0);
            if (!o) return;
            /* matching assumes valid UTF-8; a vocabulary entry need not be (it is left alone) */
            if (seer_utf8_validate(in->v[i].p, in->v[i].n, NULL))
                replace_all(d->re, md, in->v[i].p, in->v[i].n, d->b, d->blen, o);
            else
                tk_buf_add(o, in->v[i].p, in->v[i].n);
            if (o->oom) out->oom = 1;
        }
        return;
    case D_STRIP:
        for (size_t i = 0; i < in->n; i++) {
            const char *s = in->v[i].p;
            size_t a = 0, b = in->v[i].n;
            for (int k = 0; k < d->start && b - a >= d->alen && !memcmp(s + a, d->a, d->alen); k++) a += d->alen;
            for (int k = 0; k < d->stop && b - a >= d->alen && !memcmp(s + b - d->alen, d->a, d->alen); k++)
                b -= d->alen;
            toks_push(out, s + a, b - a);
        }
        return;
    case D_METASPACE:
        for (size_t i = 0; i < in->n; i++) {
            tk_buf_t *o = toks_push(out, "", 0);
            if (!o) return;
            const char *s = in->v[i].p;
            size_t n = in->v[i].n;
            for (size_t k = 0; k < n;) {
                if (n - k >= d->alen && !memcmp(s + k, d->a, d->alen)) {
                    if (!(i == 0 && d->prepend != PREPEND_NEVER)) tk_buf_add(o, " ", 1);
                    k += d->alen;
                } else {
                    tk_buf_add(o, s + k, 1);
                    k++;
                }
            }
            if (o->oom) out->oom = 1;
        }
        return;
    }
}

int seer_tokenizer_decode(seer_tokenizer_t *t, const int32_t *ids, size_t n, int skip_special, char **text,
                          size_t *text_len, seer_err_t *err) {
    toks_t in = {0}, out = {0};
    *text = NULL;
    *text_len = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->nids || !t->tok_s[id]) {
            toks_free(&in);
            return seer_err_set(err, SEER_EINVAL, "tokenizer: id %d at position %zu is not in the vocabulary (size %d)",
                                (int)id, i, (int)t->nids);
        }
        if (skip_special && t->tok_special[id] == 1) continue;
        toks_push(&in, t->tok_s[id], t->tok_len[id]);
    }
    tk_buf_t res = {0};
    tk_buf_add(&res, "", 0);
    if (t->dec) {
        dec_apply(t, t->dec, t->md, &in, &out);
        for (size_t i = 0; i < out.n; i++) tk_buf_add(&res, out.v[i].p, out.v[i].n);
    } else {
        for (size_t i = 0; i < in.n; i++) {
            if (i) tk_buf_add(&res, " ", 1);
            tk_buf_add(&res, in.v[i].p, in.v[i].n);
        }
    }
    int bad = in.oom || out.oom || res.oom;
    toks_free(&in);
    toks_free(&out);
    if (bad) {
        tk_buf_free(&res);
        return seer_err_set(err, SEER_ENOMEM, "tokenizer: out of memory");
    }
    *text = res.p;
    *text_len = res.n;
    return 0;
}

/* ---- lookups ---------------------------------------------------------------------------------------------- */

int32_t seer_tokenizer_token_to_id(const seer_tokenizer_t *t, const char *s, size_t len) {
    for (int i = 0; i < t->nadded; i++)
        if (t->added[i].content_len == len && !memcmp(t->added[i].content, s, len)) return t->added[i].id;
    return tk_strmap_get(&t->vocab, s, len);
}

const char *seer_tokenizer_id_to_token(const seer_tokenizer_t *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->nids || !t->tok_s[id]) return NULL;
    if (len) *len = t->tok_len[id];
    return t->tok_s[id];
}

int32_t seer_tokenizer_vocab_size(const seer_tokenizer_t *t) { return t->nids; }

int seer_tokenizer_is_special(const seer_tokenizer_t *t, int32_t id) {
    return id >= 0 && id < t->nids && t->tok_special[id] == 1;
}
