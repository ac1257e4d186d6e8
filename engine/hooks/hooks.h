/* Hook points and built-in interventions (docs/hooks.md). A forward pass hands each activation
 * to seer_hook_apply when a hook set is attached; interventions (add, ablate, scale, replace,
 * capture, or a callback such as a Lua function) rewrite or record rows in place, in C, with
 * no per-token call into Lua unless the user asked for one. Independent of the model runtime:
 * the model supplies activations and positions, this file knows nothing about weights. */
#ifndef SEER_HOOKS_H
#define SEER_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "../seer.h"

/* In the order a forward pass reaches them inside a block. EMBED/POS_EMBED/LN_FINAL are global
 * (layer -1); the rest are per block. */
typedef enum seer_hook_point {
    SEER_HP_EMBED,
    SEER_HP_POS_EMBED,
    SEER_HP_RESID_PRE,
    SEER_HP_LN1,
    SEER_HP_Q,
    SEER_HP_K,
    SEER_HP_V,
    SEER_HP_ATTN_SCORES,
    SEER_HP_PATTERN,
    SEER_HP_Z,
    SEER_HP_ATTN_OUT,
    SEER_HP_RESID_MID,
    SEER_HP_LN2,
    SEER_HP_MLP_PRE,
    SEER_HP_MLP_POST,
    SEER_HP_MLP_OUT,
    SEER_HP_RESID_POST,
    SEER_HP_LN_FINAL,
    SEER_HP_COUNT
} seer_hook_point_t;

#define SEER_HP_BIT(p) (1u << (p))
/* Points every architecture has; an architecture adds or removes bits (GPT-2 adds POS_EMBED,
 * parallel-residual GPT-NeoX removes RESID_MID). */
#define SEER_HP_DEFAULT_MASK (((1u << SEER_HP_COUNT) - 1u) & ~SEER_HP_BIT(SEER_HP_POS_EMBED))

/* "blocks.3.attn.hook_q" -> (SEER_HP_Q, 3); "hook_embed" -> (SEER_HP_EMBED, -1). Returns 0, or
 * -1 when the string is not a hook name (layer range is the caller's business). */
int seer_hook_parse(const char *name, seer_hook_point_t *point, int *layer);
/* The name of (point, layer) into buf; returns buf. */
const char *seer_hook_name(seer_hook_point_t point, int layer, char *buf, size_t n);
int seer_hook_point_global(seer_hook_point_t point);
/* Head-major points ([head, pos, k]: scores, pattern); the others are position-major. */
int seer_hook_point_head_major(seer_hook_point_t point);
/* Points whose rows are [head][d_head] (q, k, v, z): `heads` options apply there. */
int seer_hook_point_has_heads(seer_hook_point_t point);

/* An activation handed to hooks. Position-major points: shape [n][...], row r at absolute
 * position start + r, row length = numel / n. Head-major points: shape [heads][n][k], row
 * (h, r) has length k and absolute position start + r. */
typedef struct seer_act {
    float *data;
    int ndim;
    int64_t shape[4];
    int heads; /* head count of the row layout (q/k/v/z: shape[1]; scores/pattern: shape[0]); else 0 */
} seer_hook_act_t;

/* What the running forward pass tells its hooks. */
typedef struct seer_hook_call {
    seer_hook_point_t point;
    int layer; /* -1 for global points */
    int start; /* absolute position of row 0 */
    int n;     /* rows (positions) in this call */
    /* Length of the prompt of the current generation (or of the forward input): negative
     * positions count back from it, and only_prompt means positions < prompt_len. */
    int prompt_len;
    int batch; /* 0-based index of the sequence in a batch */
    void *user; /* the caller's context for callback interventions (e.g. the running lua_State) */
} seer_hook_call_t;

typedef enum seer_iv_kind {
    SEER_IV_ADD,
    SEER_IV_ABLATE,
    SEER_IV_SCALE,
    SEER_IV_REPLACE,
    SEER_IV_CAPTURE,
    SEER_IV_CALLBACK
} seer_iv_kind_t;

/* Which positions an intervention touches. Positions may be negative (from the prompt end). */
typedef struct seer_iv_filter {
    int has_from, has_to;
    int64_t from, to; /* from <= p < to */
    int64_t *positions; /* NULL: all (subject to from/to); else a list of npositions */
    int npositions;
    int only_prompt;
} seer_iv_filter_t;

/* A callback: returns 0 or a negative SEER_E* with err filled (the forward pass stops). */
typedef int (*seer_iv_callback_fn)(void *ctx, const seer_hook_call_t *call, seer_hook_act_t *act, seer_err_t *err);

typedef struct seer_intervention seer_intervention_t;

/* Constructors copy their inputs; the result has one reference. NULL with err set on bad input. */
seer_intervention_t *seer_iv_add(const float *vec, int64_t len, float strength, seer_err_t *err);
seer_intervention_t *seer_iv_ablate(const float *dir, int64_t len, seer_err_t *err);
/* heads: NULL (every element) or a list of 0-based head indices. */
seer_intervention_t *seer_iv_scale(float factor, const int *heads, int nheads, seer_err_t *err);
/* saved: [rows][row_len] floats; row p replaces the activation row at absolute position p. For
 * head-major points saved is [heads][rows][k] and must match the call's shape. */
seer_intervention_t *seer_iv_replace(const float *saved, int ndim, const int64_t *shape, seer_err_t *err);
seer_intervention_t *seer_iv_capture(seer_err_t *err);
/* free_ctx (may be NULL) runs when the last reference goes. */
seer_intervention_t *seer_iv_callback(seer_iv_callback_fn fn, void *ctx, void (*free_ctx)(void *), seer_err_t *err);
/* Copies the filter (NULL positions: none). */
int seer_iv_set_filter(seer_intervention_t *iv, const seer_iv_filter_t *f, seer_err_t *err);
seer_iv_kind_t seer_iv_kind(const seer_intervention_t *iv);
void seer_iv_retain(seer_intervention_t *iv);
void seer_iv_release(seer_intervention_t *iv);

/* A capture's record: chunks appended in call order. Each chunk has its own shape (the rows that
 * passed the filter) and the absolute positions of those rows. */
typedef struct seer_capture_chunk {
    int ndim;
    int64_t shape[4];
    float *data;
    int64_t *positions; /* shape[0] entries (position-major) or shape[1] (head-major) */
    int point, layer, batch;
} seer_capture_chunk_t;
int seer_iv_capture_count(const seer_intervention_t *iv);
/* Rows (positions) the intervention's filter selected since the last reset (callbacks: 0);
 * *restricted (may be NULL) tells whether it has a position filter at all. A caller that runs a
 * forward pass with interventions for that call alone can tell one that selected nothing. */
int64_t seer_iv_hits(const seer_intervention_t *iv, int *restricted);
void seer_iv_reset_hits(seer_intervention_t *iv);
const seer_capture_chunk_t *seer_iv_capture_chunk(const seer_intervention_t *iv, int i);
void seer_iv_capture_clear(seer_intervention_t *iv);

/* A set of (point, layer) -> interventions for one model, in attach order. */
typedef struct seer_hookset seer_hookset_t;
seer_hookset_t *seer_hookset_new(int num_layers);
void seer_hookset_free(seer_hookset_t *s);
/* Attaches iv (retained) at (point, layer); checks what can be checked without an activation
 * (a heads option on a point without heads, add/ablate on a head-major point). */
int seer_hookset_add(seer_hookset_t *s, seer_hook_point_t point, int layer, seer_intervention_t *iv, seer_err_t *err);
int seer_hookset_empty(const seer_hookset_t *s);
/* 1 when a prompt of n tokens (positions 0 .. n-1, prompt_len n) passes through hook sets a and
 * b (either may be NULL) the same way and leaves nothing behind: the interventions that act on
 * a prompt position (or that act on every call: callbacks, and any hook at the attention scores
 * or pattern, which moves the pass onto the hooked attention path) are the same objects in the
 * same order at the same points, and none of them records (a capture) or runs code (a callback).
 * An intervention whose positions are all past the prompt (steering from the first new token)
 * does nothing to it. Two sequences with the same prompt tokens and such hook sets compute the
 * same prompt, so one's KV cache can serve the other (seer_kv_cache_copy_prefix). */
int seer_hookset_same_on_prompt(const seer_hookset_t *a, const seer_hookset_t *b, int n);
/* The same for the first k positions of two prompts of alen and blen tokens (k <= both), each
 * hook set with its own prompt_len (negative positions count back from it): the interventions
 * acting on a position under k are the same objects in the same order, each selects the same
 * positions under k in both, and none records or runs code. With k below a prompt's length any
 * hook at the attention scores or pattern counts as different (it runs the hooked attention path,
 * whose rows are not those of a pass split at k). Two prompts with the same first k tokens and
 * such hook sets compute those positions alike (seer_model_prefix_rows says where the kernels
 * do too). */
int seer_hookset_same_on_rows(const seer_hookset_t *a, int alen, const seer_hookset_t *b, int blen, int k);
/* Counts, in each intervention's hits (seer_iv_hits), the positions under k of a prompt of plen
 * tokens that its filter selects at each point where it is attached: what running those positions
 * through s would have counted, for a sequence that took them from another instead. */
void seer_hookset_credit_rows(const seer_hookset_t *s, int plen, int k);
/* The same for the points before block `blocks` only (the embeddings and blocks 0 .. blocks-1;
 * blocks past the last layer: every point, the final norm too): a sequence that took those
 * blocks of its prompt from another (seer_hookset_blocks_alike) and computed the rest. */
void seer_hookset_credit_blocks(const seer_hookset_t *s, int plen, int k, int blocks);
/* How many first blocks a prompt of n tokens passes through hook sets a and b (either may be NULL;
 * a model of `layers` blocks) the same way, leaving nothing behind (seer_hookset_same_on_prompt,
 * point by point): 0 where they differ at the embeddings or in block 0, L where block L is the
 * first to differ, `layers` where no block does. Two sequences with the same prompt tokens then
 * have the same residual entering block L and the same keys and values in blocks 0 .. L-1, so one
 * can start at block L from the other's (seer_batch_seq_t.cached_below). */
int seer_hookset_blocks_alike(const seer_hookset_t *a, const seer_hookset_t *b, int n, int layers);
/* A counter moved by every filter change (seer_iv_set_filter) of an intervention that is in a
 * hook set: what an earlier forward pass computed with it may no longer hold. */
unsigned seer_iv_epoch(void);
/* Whether anything is attached at (point, layer): the forward pass's cheap test. */
int seer_hookset_has(const seer_hookset_t *s, seer_hook_point_t point, int layer);

/* Runs every intervention at call->point/layer on act, in order. Errors (a vector of the wrong
 * size, a replace without the position, a failing callback) name the hook. */
int seer_hook_apply(const seer_hookset_t *s, const seer_hook_call_t *call, seer_hook_act_t *act, seer_err_t *err);

#endif
