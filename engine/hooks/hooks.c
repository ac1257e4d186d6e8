/* Hook names, interventions and their application (see hooks.h and docs/hooks.md). Kept free
 * of model knowledge: an activation is a float buffer with a shape and absolute positions. */
#include "hooks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const suffix[SEER_HP_COUNT] = {
    [SEER_HP_EMBED] = "hook_embed",
    [SEER_HP_POS_EMBED] = "hook_pos_embed",
    [SEER_HP_RESID_PRE] = "hook_resid_pre",
    [SEER_HP_LN1] = "ln1.hook_normalized",
    [SEER_HP_Q] = "attn.hook_q",
    [SEER_HP_K] = "attn.hook_k",
    [SEER_HP_V] = "attn.hook_v",
    [SEER_HP_ATTN_SCORES] = "attn.hook_attn_scores",
    [SEER_HP_PATTERN] = "attn.hook_pattern",
    [SEER_HP_Z] = "attn.hook_z",
    [SEER_HP_ATTN_OUT] = "hook_attn_out",
    [SEER_HP_RESID_MID] = "hook_resid_mid",
    [SEER_HP_LN2] = "ln2.hook_normalized",
    [SEER_HP_MLP_PRE] = "mlp.hook_pre",
    [SEER_HP_MLP_POST] = "mlp.hook_post",
    [SEER_HP_MLP_OUT] = "hook_mlp_out",
    [SEER_HP_RESID_POST] = "hook_resid_post",
    [SEER_HP_LN_FINAL] = "ln_final.hook_normalized",
};

int seer_hook_point_global(seer_hook_point_t p) {
    return p == SEER_HP_EMBED || p == SEER_HP_POS_EMBED || p == SEER_HP_LN_FINAL;
}

int seer_hook_point_head_major(seer_hook_point_t p) { return p == SEER_HP_ATTN_SCORES || p == SEER_HP_PATTERN; }

int seer_hook_point_has_heads(seer_hook_point_t p) {
    return p == SEER_HP_Q || p == SEER_HP_K || p == SEER_HP_V || p == SEER_HP_Z || seer_hook_point_head_major(p);
}

int seer_hook_parse(const char *name, seer_hook_point_t *point, int *layer) {
    if (!name) return -1;
    for (int p = 0; p < SEER_HP_COUNT; p++) {
        if (!seer_hook_point_global(p)) continue;
        const char *want = p == SEER_HP_LN_FINAL ? "ln_final.hook_normalized" : suffix[p];
        if (strcmp(name, want) == 0) {
            *point = (seer_hook_point_t)p;
            *layer = -1;
            return 0;
        }
    }
    if (strncmp(name, "blocks.", 7) != 0) return -1;
    const char *s = name + 7;
    if (*s < '0' || *s > '9') return -1;
    long l = 0;
    while (*s >= '0' && *s <= '9') {
        l = l * 10 + (*s++ - '0');
        if (l > 1000000) return -1;
    }
    if (*s++ != '.') return -1;
    for (int p = 0; p < SEER_HP_COUNT; p++) {
        if (seer_hook_point_global(p)) continue;
        if (strcmp(s, suffix[p]) == 0) {
            *point = (seer_hook_point_t)p;
            *layer = (int)l;
            return 0;
        }
    }
    return -1;
}

const char *seer_hook_name(seer_hook_point_t p, int layer, char *buf, size_t n) {
    if ((int)p < 0 || p >= SEER_HP_COUNT) snprintf(buf, n, "?");
    else if (seer_hook_point_global(p)) snprintf(buf, n, "%s", suffix[p]);
    else snprintf(buf, n, "blocks.%d.%s", layer, suffix[p]);
    return buf;
}

/* ---- interventions -------------------------------------------------------------------------- */

struct seer_intervention {
    int refs;
    seer_iv_kind_t kind;
    float *vec; /* add: the vector; ablate: the unit direction */
    int64_t len;
    float strength, factor;
    int *heads;
    int nheads;
    float *saved;
    int saved_ndim;
    int64_t saved_shape[4];
    seer_iv_filter_t f;
    seer_capture_chunk_t *chunks;
    int nchunks, capchunks;
    seer_iv_callback_fn fn;
    void *ctx;
    void (*free_ctx)(void *);
    int64_t hits; /* rows the filter selected since the last seer_iv_reset_hits (not callbacks) */
    int attached; /* added to a hook set at least once (a filter change then moves seer_iv_epoch) */
};

/* seer_iv_epoch: moved by every filter change of an intervention that is in a hook set */
static unsigned g_iv_epoch;
unsigned seer_iv_epoch(void) { return __atomic_load_n(&g_iv_epoch, __ATOMIC_ACQUIRE); }

static seer_intervention_t *iv_new(seer_iv_kind_t kind, seer_err_t *err) {
    seer_intervention_t *iv = calloc(1, sizeof *iv);
    if (!iv) {
        seer_err_set(err, SEER_ENOMEM, "out of memory");
        return NULL;
    }
    iv->refs = 1;
    iv->kind = kind;
    iv->f.npositions = -1; /* no position list: every position */
    return iv;
}

static int check_finite(const float *v, int64_t n, const char *what, seer_err_t *err) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return seer_err_set(err, SEER_EINVAL, "%s: element %lld is %g; the vector must be finite", what,
                                (long long)i + 1, (double)v[i]);
    return 0;
}

/* An add or ablate intervention holding a checked copy of a non-empty, finite vector, scaled by
 * `scale` (1 for add; 1 / |v| for ablate). */
static seer_intervention_t *iv_vector(seer_iv_kind_t kind, const char *what, const float *v, int64_t len, double scale,
                                      seer_err_t *err) {
    seer_intervention_t *iv = iv_new(kind, err);
    if (!iv) return NULL;
    iv->vec = malloc(sizeof(float) * (size_t)len);
    if (!iv->vec) {
        seer_iv_release(iv);
        seer_err_set(err, SEER_ENOMEM, "%s: out of memory", what);
        return NULL;
    }
    for (int64_t i = 0; i < len; i++) iv->vec[i] = (float)(v[i] * scale);
    iv->len = len;
    return iv;
}

seer_intervention_t *seer_iv_add(const float *vec, int64_t len, float strength, seer_err_t *err) {
    if (len <= 0) {
        seer_err_set(err, SEER_EINVAL, "add: the vector is empty");
        return NULL;
    }
    if (check_finite(vec, len, "add", err) < 0) return NULL;
    if (!isfinite(strength)) {
        seer_err_set(err, SEER_EINVAL, "add: strength must be a finite number");
        return NULL;
    }
    seer_intervention_t *iv = iv_vector(SEER_IV_ADD, "add", vec, len, 1.0, err);
    if (iv) iv->strength = strength;
    return iv;
}

seer_intervention_t *seer_iv_ablate(const float *dir, int64_t len, seer_err_t *err) {
    if (len <= 0) {
        seer_err_set(err, SEER_EINVAL, "ablate: the direction is empty");
        return NULL;
    }
    if (check_finite(dir, len, "ablate", err) < 0) return NULL;
    double ss = 0;
    for (int64_t i = 0; i < len; i++) ss += (double)dir[i] * dir[i];
    if (!(ss > 0)) {
        seer_err_set(err, SEER_EINVAL, "ablate: the direction is the zero vector; there is nothing to project out");
        return NULL;
    }
    return iv_vector(SEER_IV_ABLATE, "ablate", dir, len, 1.0 / sqrt(ss), err);
}

seer_intervention_t *seer_iv_scale(float factor, const int *heads, int nheads, seer_err_t *err) {
    if (!isfinite(factor)) {
        seer_err_set(err, SEER_EINVAL, "scale: the factor must be a finite number");
        return NULL;
    }
    for (int i = 0; i < nheads; i++)
        if (heads[i] < 0) {
            seer_err_set(err, SEER_EINVAL, "scale: head %d is negative; heads are 0-based indices", heads[i]);
            return NULL;
        }
    seer_intervention_t *iv = iv_new(SEER_IV_SCALE, err);
    if (!iv) return NULL;
    iv->factor = factor;
    if (heads && nheads > 0) {
        iv->heads = malloc(sizeof(int) * (size_t)nheads);
        if (!iv->heads) {
            seer_iv_release(iv);
            seer_err_set(err, SEER_ENOMEM, "out of memory");
            return NULL;
        }
        memcpy(iv->heads, heads, sizeof(int) * (size_t)nheads);
        iv->nheads = nheads;
    }
    return iv;
}

seer_intervention_t *seer_iv_replace(const float *saved, int ndim, const int64_t *shape, seer_err_t *err) {
    if (ndim < 1 || ndim > 4) {
        seer_err_set(err, SEER_EINVAL, "replace: the saved activation must have 1 to 4 dimensions ([pos, ...]), got %d",
                     ndim);
        return NULL;
    }
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    if (numel <= 0) {
        seer_err_set(err, SEER_EINVAL, "replace: the saved activation is empty");
        return NULL;
    }
    seer_intervention_t *iv = iv_new(SEER_IV_REPLACE, err);
    if (!iv) return NULL;
    iv->saved = malloc(sizeof(float) * (size_t)numel);
    if (!iv->saved) {
        seer_iv_release(iv);
        seer_err_set(err, SEER_ENOMEM, "out of memory");
        return NULL;
    }
    memcpy(iv->saved, saved, sizeof(float) * (size_t)numel);
    iv->saved_ndim = ndim;
    memcpy(iv->saved_shape, shape, sizeof(int64_t) * (size_t)ndim);
    return iv;
}

seer_intervention_t *seer_iv_capture(seer_err_t *err) { return iv_new(SEER_IV_CAPTURE, err); }

seer_intervention_t *seer_iv_callback(seer_iv_callback_fn fn, void *ctx, void (*free_ctx)(void *), seer_err_t *err) {
    seer_intervention_t *iv = iv_new(SEER_IV_CALLBACK, err);
    if (!iv) {
        if (free_ctx) free_ctx(ctx);
        return NULL;
    }
    iv->fn = fn;
    iv->ctx = ctx;
    iv->free_ctx = free_ctx;
    return iv;
}

int seer_iv_set_filter(seer_intervention_t *iv, const seer_iv_filter_t *f, seer_err_t *err) {
    int64_t *pos = NULL;
    if (f->positions && f->npositions > 0) {
        pos = malloc(sizeof(int64_t) * (size_t)f->npositions);
        if (!pos) return seer_err_set(err, SEER_ENOMEM, "out of memory");
        memcpy(pos, f->positions, sizeof(int64_t) * (size_t)f->npositions);
    }
    free(iv->f.positions);
    iv->f = *f;
    iv->f.positions = pos;
    if (!pos) iv->f.npositions = f->positions ? 0 : -1; /* an empty list selects nothing */
    if (__atomic_load_n(&iv->attached, __ATOMIC_RELAXED)) __atomic_add_fetch(&g_iv_epoch, 1, __ATOMIC_ACQ_REL);
    return 0;
}

seer_iv_kind_t seer_iv_kind(const seer_intervention_t *iv) { return iv->kind; }

void seer_iv_retain(seer_intervention_t *iv) { __atomic_add_fetch(&iv->refs, 1, __ATOMIC_RELAXED); }

void seer_iv_capture_clear(seer_intervention_t *iv) {
    for (int i = 0; i < iv->nchunks; i++) {
        free(iv->chunks[i].data);
        free(iv->chunks[i].positions);
    }
    iv->nchunks = 0;
}

void seer_iv_release(seer_intervention_t *iv) {
    if (!iv || __atomic_sub_fetch(&iv->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    seer_iv_capture_clear(iv);
    free(iv->chunks);
    free(iv->vec);
    free(iv->heads);
    free(iv->saved);
    free(iv->f.positions);
    if (iv->free_ctx) iv->free_ctx(iv->ctx);
    free(iv);
}

int seer_iv_capture_count(const seer_intervention_t *iv) { return iv->kind == SEER_IV_CAPTURE ? iv->nchunks : 0; }

int64_t seer_iv_hits(const seer_intervention_t *iv, int *restricted) {
    if (restricted)
        *restricted = iv->f.npositions >= 0 || iv->f.has_from || iv->f.has_to || iv->f.only_prompt;
    return iv->hits;
}

void seer_iv_reset_hits(seer_intervention_t *iv) { iv->hits = 0; }

const seer_capture_chunk_t *seer_iv_capture_chunk(const seer_intervention_t *iv, int i) {
    if (iv->kind != SEER_IV_CAPTURE || i < 0 || i >= iv->nchunks) return NULL;
    return &iv->chunks[i];
}

/* ---- hook sets -------------------------------------------------------------------------------- */

typedef struct {
    seer_intervention_t **iv;
    int n, cap;
} slot_t;

struct seer_hookset {
    int layers;
    int count;
    slot_t *slots; /* [(layers + 1) * SEER_HP_COUNT]; layer -1 uses row `layers` */
};

static slot_t *slot_of(const seer_hookset_t *s, seer_hook_point_t p, int layer) {
    int row = layer < 0 ? s->layers : layer;
    return &s->slots[(size_t)row * SEER_HP_COUNT + p];
}

seer_hookset_t *seer_hookset_new(int num_layers) {
    seer_hookset_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->layers = num_layers;
    s->slots = calloc((size_t)(num_layers + 1) * SEER_HP_COUNT, sizeof *s->slots);
    if (!s->slots) {
        free(s);
        return NULL;
    }
    return s;
}

void seer_hookset_free(seer_hookset_t *s) {
    if (!s) return;
    for (size_t i = 0; i < (size_t)(s->layers + 1) * SEER_HP_COUNT; i++) {
        for (int j = 0; j < s->slots[i].n; j++) seer_iv_release(s->slots[i].iv[j]);
        free(s->slots[i].iv);
    }
    free(s->slots);
    free(s);
}

static const char *kind_name(seer_iv_kind_t k) {
    switch (k) {
    case SEER_IV_ADD: return "add";
    case SEER_IV_ABLATE: return "ablate";
    case SEER_IV_SCALE: return "scale";
    case SEER_IV_REPLACE: return "replace";
    case SEER_IV_CAPTURE: return "capture";
    default: return "function";
    }
}

int seer_hookset_add(seer_hookset_t *s, seer_hook_point_t p, int layer, seer_intervention_t *iv, seer_err_t *err) {
    char nm[64];
    if ((int)p < 0 || p >= SEER_HP_COUNT) return seer_err_set(err, SEER_EINVAL, "unknown hook point %d", (int)p);
    if (seer_hook_point_global(p)) layer = -1;
    else if (layer < 0 || layer >= s->layers)
        return seer_err_set(err, SEER_EINVAL, "hook %s: the model has layers 0 to %d", seer_hook_name(p, layer, nm, sizeof nm),
                            s->layers - 1);
    seer_hook_name(p, layer, nm, sizeof nm);
    if (seer_hook_point_head_major(p) && (iv->kind == SEER_IV_ADD || iv->kind == SEER_IV_ABLATE))
        return seer_err_set(err, SEER_EINVAL,
                            "hook %s: %s works on [pos, ...] rows; attention scores and patterns are [head, pos, k] "
                            "(use scale, zero_heads, replace, capture or a function there)",
                            nm, kind_name(iv->kind));
    if (iv->kind == SEER_IV_SCALE && iv->nheads > 0 && !seer_hook_point_has_heads(p))
        return seer_err_set(err, SEER_EINVAL,
                            "hook %s: a heads option needs a per-head point (attn.hook_q/k/v/z, attn.hook_attn_scores, "
                            "attn.hook_pattern)",
                            nm);
    slot_t *sl = slot_of(s, p, layer);
    if (sl->n == sl->cap) {
        int nc = sl->cap ? sl->cap * 2 : 2;
        seer_intervention_t **v = realloc(sl->iv, sizeof *v * (size_t)nc);
        if (!v) return seer_err_set(err, SEER_ENOMEM, "out of memory");
        sl->iv = v;
        sl->cap = nc;
    }
    seer_iv_retain(iv);
    __atomic_store_n(&iv->attached, 1, __ATOMIC_RELAXED);
    sl->iv[sl->n++] = iv;
    s->count++;
    return 0;
}

int seer_hookset_empty(const seer_hookset_t *s) { return !s || s->count == 0; }

int seer_hookset_has(const seer_hookset_t *s, seer_hook_point_t p, int layer) {
    if (!s || !s->count) return 0;
    if (seer_hook_point_global(p)) layer = -1;
    else if (layer < 0 || layer >= s->layers) return 0;
    return slot_of(s, p, layer)->n > 0;
}

/* ---- application ------------------------------------------------------------------------------ */

static int64_t resolve(int64_t p, const seer_hook_call_t *c) { return p < 0 ? c->prompt_len + p : p; }

static int selected(const seer_iv_filter_t *f, const seer_hook_call_t *c, int64_t p) {
    if (f->only_prompt && p >= c->prompt_len) return 0;
    if (f->has_from && p < resolve(f->from, c)) return 0;
    if (f->has_to && p >= resolve(f->to, c)) return 0;
    if (f->npositions < 0) return 1;
    for (int i = 0; i < f->npositions; i++)
        if (resolve(f->positions[i], c) == p) return 1;
    return 0;
}

/* Whether iv can change, record or run anything at point p on positions 0 .. k-1 of a prompt
 * whose prompt_len is plen: a callback always runs; at the attention scores and pattern any hook
 * moves the pass onto the hooked attention path (other bits than the GEMM path); elsewhere only
 * an intervention whose filter selects one of those positions. */
static int acts_on_rows(const seer_intervention_t *iv, seer_hook_point_t p, int plen, int k) {
    if (iv->kind == SEER_IV_CALLBACK || p == SEER_HP_ATTN_SCORES || p == SEER_HP_PATTERN) return 1;
    seer_hook_call_t c = {.point = p, .prompt_len = plen};
    for (int64_t q = 0; q < k; q++)
        if (selected(&iv->f, &c, q)) return 1;
    return 0;
}

static const seer_intervention_t *next_acting(const slot_t *sl, int *j, seer_hook_point_t p, int plen, int k) {
    while (sl && *j < sl->n) {
        const seer_intervention_t *iv = sl->iv[(*j)++];
        if (acts_on_rows(iv, p, plen, k)) return iv;
    }
    return NULL;
}

/* Whether slot `at` (row * SEER_HP_COUNT + point) of a and b (either NULL: nothing there) does the
 * same to the first k positions of prompts of alen and blen tokens and records or runs nothing
 * (seer_hookset_same_on_rows, one slot). */
static int slot_same(const seer_hookset_t *a, int alen, const seer_hookset_t *b, int blen, int k, size_t at) {
    seer_hook_point_t p = (seer_hook_point_t)(at % SEER_HP_COUNT);
    const slot_t *x = a ? &a->slots[at] : NULL, *y = b ? &b->slots[at] : NULL;
    int i = 0, j = 0, whole = k >= alen && k >= blen;
    for (;;) {
        const seer_intervention_t *u = next_acting(x, &i, p, alen, k), *v = next_acting(y, &j, p, blen, k);
        if (u != v) return 0;
        if (!u) return 1;
        if (u->kind == SEER_IV_CAPTURE || u->kind == SEER_IV_CALLBACK) return 0; /* records or runs code */
        if (!whole && (p == SEER_HP_ATTN_SCORES || p == SEER_HP_PATTERN)) return 0;
        if (alen != blen) { /* positions counted back from the prompt's end land elsewhere */
            seer_hook_call_t ca = {.point = p, .prompt_len = alen}, cb = {.point = p, .prompt_len = blen};
            for (int64_t q = 0; q < k; q++)
                if (selected(&u->f, &ca, q) != selected(&u->f, &cb, q)) return 0;
        }
    }
}

int seer_hookset_same_on_rows(const seer_hookset_t *a, int alen, const seer_hookset_t *b, int blen, int k) {
    if (seer_hookset_empty(a)) a = NULL;
    if (seer_hookset_empty(b)) b = NULL;
    if (!a && !b) return 1;
    if (a && b && a->layers != b->layers) return 0;
    int layers = a ? a->layers : b->layers;
    for (size_t at = 0; at < (size_t)(layers + 1) * SEER_HP_COUNT; at++)
        if (!slot_same(a, alen, b, blen, k, at)) return 0;
    return 1;
}

int seer_hookset_blocks_alike(const seer_hookset_t *a, const seer_hookset_t *b, int n, int layers) {
    if (seer_hookset_empty(a)) a = NULL;
    if (seer_hookset_empty(b)) b = NULL;
    if (!a && !b) return layers;
    if ((a && a->layers != layers) || (b && b->layers != layers)) return 0;
    size_t global = (size_t)layers * SEER_HP_COUNT; /* the row of the points outside the blocks */
    if (!slot_same(a, n, b, n, n, global + SEER_HP_EMBED) || !slot_same(a, n, b, n, n, global + SEER_HP_POS_EMBED))
        return 0;
    for (int l = 0; l < layers; l++)
        for (int p = 0; p < SEER_HP_COUNT; p++)
            if (!slot_same(a, n, b, n, n, (size_t)l * SEER_HP_COUNT + (size_t)p)) return l;
    return layers;
}

void seer_hookset_credit_rows(const seer_hookset_t *s, int plen, int k) {
    seer_hookset_credit_blocks(s, plen, k, s ? s->layers + 1 : 0);
}

void seer_hookset_credit_blocks(const seer_hookset_t *s, int plen, int k, int blocks) {
    if (seer_hookset_empty(s)) return;
    size_t global = (size_t)s->layers * SEER_HP_COUNT;
    for (size_t at = 0; at < (size_t)(s->layers + 1) * SEER_HP_COUNT; at++) {
        /* the blocks under `blocks`, and the embeddings (the row past the blocks holds the points
         * outside them: the embeddings come first, the final norm only after every block) */
        if (at >= global ? blocks <= s->layers && at % SEER_HP_COUNT == SEER_HP_LN_FINAL : (int)(at / SEER_HP_COUNT) >= blocks)
            continue;
        seer_hook_call_t c = {.point = (seer_hook_point_t)(at % SEER_HP_COUNT), .prompt_len = plen};
        for (int j = 0; j < s->slots[at].n; j++) {
            seer_intervention_t *iv = s->slots[at].iv[j];
            if (iv->kind == SEER_IV_CALLBACK) continue;
            for (int64_t q = 0; q < k; q++) iv->hits += selected(&iv->f, &c, q);
        }
    }
}

int seer_hookset_same_on_prompt(const seer_hookset_t *a, const seer_hookset_t *b, int n) {
    return seer_hookset_same_on_rows(a, n, b, n, n);
}

static const char *shape_str(const seer_hook_act_t *a, char *buf, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < a->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

static int head_listed(const seer_intervention_t *iv, int h) {
    for (int i = 0; i < iv->nheads; i++)
        if (iv->heads[i] == h) return 1;
    return 0;
}

static int capture_rows(seer_intervention_t *iv, const seer_hook_call_t *c, const seer_hook_act_t *a, seer_err_t *err) {
    int head_major = seer_hook_point_head_major(c->point);
    int n = c->n;
    int64_t numel = 1;
    for (int i = 0; i < a->ndim; i++) numel *= a->shape[i];
    int64_t rowlen = head_major ? a->shape[2] : numel / n;
    int64_t H = head_major ? a->shape[0] : 1;
    int m = 0;
    for (int r = 0; r < n; r++) m += selected(&iv->f, c, c->start + r);
    iv->hits += m;
    if (m == 0) return 0;
    if (iv->nchunks == iv->capchunks) {
        int nc = iv->capchunks ? iv->capchunks * 2 : 8;
        seer_capture_chunk_t *v = realloc(iv->chunks, sizeof *v * (size_t)nc);
        if (!v) return seer_err_set(err, SEER_ENOMEM, "capture: out of memory");
        iv->chunks = v;
        iv->capchunks = nc;
    }
    seer_capture_chunk_t ch = {.ndim = a->ndim, .point = c->point, .layer = c->layer, .batch = c->batch};
    memcpy(ch.shape, a->shape, sizeof ch.shape);
    if (head_major) ch.shape[1] = m;
    else ch.shape[0] = m;
    ch.data = malloc(sizeof(float) * (size_t)(H * m * rowlen));
    ch.positions = malloc(sizeof(int64_t) * (size_t)m);
    if (!ch.data || !ch.positions) {
        free(ch.data);
        free(ch.positions);
        return seer_err_set(err, SEER_ENOMEM, "capture: out of memory for %lld floats", (long long)(H * m * rowlen));
    }
    int j = 0;
    for (int r = 0; r < n; r++) {
        if (!selected(&iv->f, c, c->start + r)) continue;
        ch.positions[j] = c->start + r;
        for (int64_t h = 0; h < H; h++)
            memcpy(ch.data + ((size_t)h * m + j) * rowlen, a->data + ((size_t)h * n + r) * rowlen,
                   sizeof(float) * (size_t)rowlen);
        j++;
    }
    iv->chunks[iv->nchunks++] = ch;
    return 0;
}

static int apply_one(seer_intervention_t *iv, const seer_hook_call_t *c, seer_hook_act_t *a, seer_err_t *err) {
    char nm[64], sh[96];
    int head_major = seer_hook_point_head_major(c->point);
    int n = c->n;
    int64_t numel = 1;
    for (int i = 0; i < a->ndim; i++) numel *= a->shape[i];
    int64_t rowlen = head_major ? a->shape[2] : numel / n;
    int64_t H = head_major ? a->shape[0] : 1;
    switch (iv->kind) {
    case SEER_IV_CALLBACK: return iv->fn(iv->ctx, c, a, err);
    case SEER_IV_CAPTURE: return capture_rows(iv, c, a, err);
    case SEER_IV_ADD:
    case SEER_IV_ABLATE:
        if (iv->len != rowlen)
            return seer_err_set(err, SEER_EINVAL, "hook %s: the %s vector has %lld elements but each position has %lld (activation %s)",
                                seer_hook_name(c->point, c->layer, nm, sizeof nm), kind_name(iv->kind), (long long)iv->len,
                                (long long)rowlen, shape_str(a, sh, sizeof sh));
        for (int r = 0; r < n; r++) {
            if (!selected(&iv->f, c, c->start + r)) continue;
            iv->hits++;
            float *x = a->data + (size_t)r * rowlen;
            if (iv->kind == SEER_IV_ADD) {
                for (int64_t i = 0; i < rowlen; i++) x[i] += iv->strength * iv->vec[i];
            } else {
                double d = 0;
                for (int64_t i = 0; i < rowlen; i++) d += (double)x[i] * iv->vec[i];
                float df = (float)d;
                for (int64_t i = 0; i < rowlen; i++) x[i] -= df * iv->vec[i];
            }
        }
        return 0;
    case SEER_IV_SCALE: {
        int heads = a->heads;
        for (int i = 0; i < iv->nheads; i++)
            if (iv->heads[i] >= heads)
                return seer_err_set(err, SEER_EINVAL, "hook %s: head %d does not exist (the activation %s has heads 0 to %d)",
                                    seer_hook_name(c->point, c->layer, nm, sizeof nm), iv->heads[i],
                                    shape_str(a, sh, sizeof sh), heads - 1);
        for (int r = 0; r < n; r++) {
            if (!selected(&iv->f, c, c->start + r)) continue;
            iv->hits++;
            for (int64_t h = 0; h < H; h++) {
                if (head_major && iv->nheads && !head_listed(iv, (int)h)) continue;
                float *x = a->data + ((size_t)h * n + r) * rowlen;
                if (!head_major && iv->nheads) {
                    int64_t hd = rowlen / heads;
                    for (int i = 0; i < iv->nheads; i++)
                        for (int64_t e = 0; e < hd; e++) x[iv->heads[i] * hd + e] *= iv->factor;
                } else {
                    for (int64_t i = 0; i < rowlen; i++) x[i] *= iv->factor;
                }
            }
        }
        return 0;
    }
    case SEER_IV_REPLACE: {
        seer_hook_name(c->point, c->layer, nm, sizeof nm);
        int64_t srows, srow, sH = 1;
        if (head_major) {
            if (iv->saved_ndim != 3 || iv->saved_shape[0] != H || iv->saved_shape[2] < rowlen)
                return seer_err_set(err, SEER_EINVAL,
                                    "hook %s: replace needs a saved [head, pos, k] tensor with %lld heads and k >= %lld "
                                    "(activation %s)",
                                    nm, (long long)H, (long long)rowlen, shape_str(a, sh, sizeof sh));
            sH = H;
            srows = iv->saved_shape[1];
            srow = iv->saved_shape[2];
        } else {
            srows = iv->saved_shape[0];
            srow = 1;
            for (int i = 1; i < iv->saved_ndim; i++) srow *= iv->saved_shape[i];
            if (iv->saved_ndim == 1) { /* one row for every selected position */
                srow = srows;
                srows = -1;
            }
            if (srow != rowlen)
                return seer_err_set(err, SEER_EINVAL,
                                    "hook %s: the saved activation's rows have %lld elements but each position has %lld "
                                    "(activation %s)",
                                    nm, (long long)srow, (long long)rowlen, shape_str(a, sh, sizeof sh));
        }
        for (int r = 0; r < n; r++) {
            int64_t p = c->start + r;
            if (!selected(&iv->f, c, p)) continue;
            iv->hits++;
            int64_t sr = srows < 0 ? 0 : p;
            if (srows >= 0 && p >= srows)
                return seer_err_set(err, SEER_EINVAL,
                                    "hook %s: replace (activation patching) reached position %lld of this run, but the "
                                    "saved activation has only positions 0 to %lld (it came from a shorter input); "
                                    "limit the replace with positions/from/to to positions both inputs have",
                                    nm, (long long)p, (long long)srows - 1);
            for (int64_t h = 0; h < sH; h++)
                memcpy(a->data + ((size_t)h * n + r) * rowlen, iv->saved + ((size_t)h * (srows < 0 ? 1 : srows) + sr) * srow,
                       sizeof(float) * (size_t)rowlen);
        }
        return 0;
    }
    }
    return 0;
}

int seer_hook_apply(const seer_hookset_t *s, const seer_hook_call_t *c, seer_hook_act_t *a, seer_err_t *err) {
    if (!seer_hookset_has(s, c->point, c->layer)) return 0;
    slot_t *sl = slot_of(s, c->point, seer_hook_point_global(c->point) ? -1 : c->layer);
    for (int i = 0; i < sl->n; i++) {
        int rc = apply_one(sl->iv[i], c, a, err);
        if (rc < 0) return rc;
    }
    return 0;
}
