/* Shared between the files of engine/model only: the loaded model, weight views, kernels and
 * the per-architecture forward functions. */
#ifndef SEER_MODEL_PRIVATE_H
#define SEER_MODEL_PRIVATE_H

#include <cJSON.h>

#include "../tensor/pool.h"
#include "../tensor/safetensors.h"
#include "model.h"

/* A weight as stored: dtype and data in the mapped file, rows x cols (1-d: rows = 1). */
struct seer_lora;
typedef struct seer_weight {
    seer_dtype_t dtype;
    const void *data;
    int64_t rows, cols;
    /* 1: data is not row-major but the AMX tile layout (seer_k_amx_pack: bf16, rows and cols
     * multiples of 32, in the same bytes), which only the AMX kernels and seer_w_index read;
     * 0: row-major [rows][cols]. */
    int amx_packed;
    /* A LoRA adapter kept separate from the weight (lora.c): when set and enabled, every linear
     * through this weight adds its low-rank delta. NULL: none. */
    const struct seer_lora *lora;
} seer_weight_t;

/* w when it is bound, NULL for an absent optional weight (a bias the checkpoint lacks). */
static inline const seer_weight_t *seer_weight_or_null(const seer_weight_t *w) { return w && w->data ? w : NULL; }

typedef struct seer_layer_weights {
    seer_weight_t attn_norm, q, k, v, o, q_bias, k_bias, v_bias, o_bias;
    seer_weight_t mlp_norm, gate, up, down;
    seer_weight_t gate_bias, up_bias, down_bias; /* Llama's mlp_bias; unbound (NULL data) otherwise */
} seer_layer_weights_t;

#define SEER_MODEL_MAX_SHARDS 256

struct seer_model;
struct seer_gpu_desc;
struct seer_gpu_model;
/* A forward call over a batch of sequences (batch.c): their rows are packed one sequence after
 * another, [N][...] in all; sequence s has rows off[s] .. off[s + 1] - 1 at positions start[s] ..
 * of its own cache. A single forward call is a batch of one. */
typedef struct seer_fwd_batch {
    const seer_batch_seq_t *seq;
    int ns, N;
    int *off;    /* [ns + 1] */
    int *start;  /* [ns]: len(cache) before the call */
    int max_len; /* the largest cache size (attention scratch rows) */
    int stop;    /* seer_fwd_hooks_t.stop: the pass returns SEER_ESTOP there */
    /* seer_fwd_hooks_t.from (0: the embeddings): the pass begins at block `from - 1`, each
     * sequence's rows from resid[s] ([n][hidden_size]) instead of its embeddings (seer_fb_begin) */
    int from;
    const float *const *resid;
} seer_fwd_batch_t;
typedef int (*seer_arch_forward_fn)(struct seer_model *m, const seer_fwd_batch_t *fb, seer_err_t *err);

typedef struct seer_arch {
    const char *model_type;
    /* Reads the architecture's own config fields (m->config_json), looks up and shape-checks
     * the weights, and may keep per-architecture state in m->arch_state (freed with
     * m->arch_free). Must fill m->embed (its dtype is reported as the model's dtype). */
    int (*bind)(struct seer_model *m, seer_err_t *err);
    seer_arch_forward_fn forward;
    /* The final norm of residual rows (NULL: RMSNorm with m->final_norm and cfg.rms_norm_eps)
     * and a transform of the head's logits (NULL: none; Gemma 2's final soft-cap). */
    void (*final_norm)(struct seer_model *m, float *y, const float *x, int rows);
    void (*final_softcap)(struct seer_model *m, float *logits, int rows);
    /* Fills the generic decoder description the CUDA backend runs (engine/cuda/gpu_model.h);
     * NULL: the architecture has no GPU forward pass yet. */
    int (*describe)(struct seer_model *m, struct seer_gpu_desc *d, seer_err_t *err);
} seer_arch_t;

struct seer_model {
    seer_model_config_t cfg;
    char dir[4096];
    seer_st_file_t *files[SEER_MODEL_MAX_SHARDS];
    int nfiles;
    const seer_arch_t *arch;
    seer_pool_t *pool;
    seer_weight_t embed, final_norm, lm_head;
    seer_layer_weights_t *layers;
    size_t n_params, weight_bytes;
    /* What one decode step reads of the weights (seer_model_decode_bytes): every tensor bound,
     * once, except that a lookup table (the embeddings, gpt2's positions) gives one row, unless
     * the LM head is the same tensor. `bound` lists the bound tensors during the load only. */
    size_t decode_params, decode_bytes;
    struct seer_bound_tensor *bound;
    size_t nbound, bound_cap;
    const void *lookup[2]; /* lookup tables besides embed (seer_model_lookup_table) */
    cJSON *config_json; /* config.json as parsed, for architecture-specific fields */
    void *arch_state;
    void (*arch_free)(void *arch_state);
    /* LoRA adapters loaded onto the model (lora.c): adapter tensors, merged weight copies. */
    void *lora_state;
    void (*lora_free)(void *lora_state);
    int hidden;         /* seer_model_opts_t.hidden */
    int in_memory;      /* the shards were read into memory (seer_st_open_copy), not mapped */
    int amx_packed;     /* matrices put into the AMX tile layout at load (pack_for_amx) */
    int fast_bf16;      /* seer_model_opts_t.fast_bf16 */
    /* the kinds of matrices bound (seer_model_weight): bit (dtype index * 2 + (width % 32 == 0)),
     * dtype index 0 f32, 1 bf16, 2 f16; for seer_model_gemm_min_tokens */
    unsigned matrix_kinds;
    /* Weight names are looked up with "model." replaced by model_prefix and "lm_head." by
     * head_prefix when those are set (a Gemma 3 multimodal checkpoint's language model). */
    char model_prefix[48], head_prefix[48];
    unsigned hook_mask; /* SEER_HP_BIT set of the points this model has (bind may change it) */
    /* moved by every change to what a forward pass computes (an adapter loaded or switched):
     * seer_model_state_epoch */
    unsigned state_epoch;
    struct seer_gpu_model *gpu; /* the model's copy on a CUDA device (gpu_model.c); NULL: CPU */
};

struct seer_kv_cache {
    int max_tokens, len;
    int layers, kv_dim;
    float *k, *v; /* [layers][max_tokens][kv_dim]; NULL for a GPU model's cache and a bf16 one */
    /* The same in bf16 (each key and value rounded to nearest even, as torch's bf16 cache holds
     * them): the cache of a model whose precision = "fast" changes its linear layers (bf16
     * weights on a CPU with AVX512_BF16 or AMX). NULL otherwise. */
    uint16_t *k16, *v16;
    /* A GPU model's cache (engine/cuda/gpu_model.c): the device and bf16 device arrays of the
     * same layout. */
    void *gdev;
    uint64_t gk, gv;
};

/* Finds a tensor by name across the shards and checks its shape (cols = 0: a 1-d tensor of
 * rows elements). Missing tensors are collected in *missing (a growing ", "-list) instead of
 * failing at once, so the error lists them all. */
int seer_model_weight(struct seer_model *m, seer_weight_t *w, const char *name, int64_t rows, int64_t cols,
                      int optional, char **missing, seer_err_t *err);

/* The bound weight of linear module `mod` of `layer` (0-6: q, k, v, o, gate, up, down; the
 * names in seer_model_layer_modules): m->layers for the Llama family, Gemma's own layer structs
 * for Gemma; NULL out of range. For LoRA (lora.c) and the AMX packing at load (model.c). */
#define SEER_LAYER_MODULES 7
extern const char *const seer_model_layer_modules[SEER_LAYER_MODULES];
seer_weight_t *seer_model_layer_weight(struct seer_model *m, int layer, int mod);

/* Marks a bound weight as a table a forward pass reads one row of per token (gpt2's position
 * embeddings; m->embed is one without this), for seer_model_decode_bytes. */
void seer_model_lookup_table(struct seer_model *m, const seer_weight_t *w);

/* For an architecture's bind function, which has the locals m, err, rc, missing (char *) and
 * name (a char array) and an `out:` label: looks up the weight whose name the printf-style
 * arguments give, collecting missing ones, and jumps to out on a hard error. */
#define SEER_BIND_WEIGHT(dst, rows, cols, optional, ...)                                                \
    do {                                                                                             \
        snprintf(name, sizeof name, __VA_ARGS__);                                                    \
        if ((rc = seer_model_weight(m, (dst), name, (rows), (cols), (optional), &missing, err)) < 0) \
            goto out;                                                                                \
    } while (0)

int seer_model_parse_config(seer_model_config_t *c, const char *dir, seer_err_t *err);
/* config.json parsed, a Gemma 3 multimodal config flattened to its text model's (gemma3_text)
 * with *multimodal set. */
cJSON *seer_model_read_config(const char *path, int *multimodal, seer_err_t *err);

/* config_fields.c: every config.json field of m->config_json is known (used or inert) or, when
 * it is refused, has an accepted value; a refused value fails naming the field, unknown fields
 * get a one-line note on stderr. multimodal: the config was a Gemma 3 multimodal one. */
typedef enum { SEER_FIELD_USED, SEER_FIELD_INERT, SEER_FIELD_REFUSED } seer_field_kind_t;
int seer_model_check_fields(struct seer_model *m, int multimodal, seer_err_t *err);
/* Calls fn for every field seer knows for model_type ("gemma3": the multimodal config); -1 for
 * an unknown model_type. ok/bad/why are NULL unless the field is refused. */
typedef void (*seer_field_visit_fn)(void *ud, const char *name, seer_field_kind_t kind, const char *ok,
                                    const char *bad, const char *why);
int seer_model_config_fields(const char *model_type, seer_field_visit_fn fn, void *ud);
cJSON *seer_model_read_json(const char *path, seer_err_t *err);
char *seer_model_read_text(const char *path, size_t *len, seer_err_t *err);

/* ---- kernels (kernels.c) ---- */
/* Set for the duration of a forward pass of a model loaded with precision = "fast" (on the
 * calling thread, which is where seer_k_linear_amx packs the activations). */
extern _Thread_local int seer_k_fast_bf16;
/* Below about this many multiply-adds a pool task is not worth waking a worker for (tiny models
 * run fastest on one thread); every kernel sizes its chunks with it. */
#define SEER_PAR_WORK (1u << 18)
/* From this many tokens on, a sequence's attention takes its GEMM path (kernels_blas.c), and a
 * linear layer may take OpenBLAS sgemm or AMX: seer_k_linear_gemm_min says from how many. */
#define SEER_BLAS_MIN_TOKENS 16
/* Attention's GEMM path cuts a call's queries into blocks of this many from its first: a
 * prompt's rest run from a multiple of it after its first rows were taken from another sequence
 * (seer_batch_seq_t.paths) makes the calls the whole prompt made for those rows, shape for shape
 * (the linear layers' sgemm keeps its rows in place with seer_k_linear_blas's lead). */
#define SEER_TOKEN_BLOCK SEER_PREFIX_BLOCK
/* The fewest tokens with which seer_k_linear runs w as a GEMM (AMX, OpenBLAS) rather than its
 * per-token kernel: SEER_BLAS_MIN_TOKENS, or more where the per-token kernel is the blocked one
 * and faster than sgemm for short prompts (kernels.c says where and by how much). A batch runs a
 * sequence of at least this many tokens alone, every shorter one with the others, so each row
 * gets the bits it gets alone: every caller that groups rows asks this. */
int seer_k_linear_gemm_min(const seer_weight_t *w);
#define SEER_GEMM_NEVER (1 << 30) /* seer_k_linear_gemm_min: no count takes a GEMM path */
/* The count that replaces both crossings of seer_k_linear_gemm_min where they apply (0: this CPU's
 * defaults; at first the SEER_GEMM_MIN_TOKENS environment variable's): n >= SEER_BLAS_MIN_TOKENS
 * or 0 sets it, n < 0 only reads it; returns the previous value. Changing it between a sequence's
 * run alone and its run in a batch changes which bits each gets; the tests use it. */
int seer_k_gemm_min_override(int n);
/* Moved by every change of that override (seer_model_state_epoch). */
unsigned seer_k_gemm_min_epoch(void);
/* Whether w's products run on bf16 units rather than the f32 kernels: 2, AMX (bf16 weights of a
 * width divisible by 32, either precision) or, without AMX, the fast kernel (the same weights
 * with AVX512_BF16 under precision = "fast" on the calling thread): any count, every row the same
 * bits whatever the count; 0 neither. */
int seer_k_bf16_units_take(const seer_weight_t *w);
/* Whether seer asks OpenBLAS for its Haswell kernels when the user named no core
 * (OPENBLAS_CORETYPE): the AVX2 family's CPUs but Intel ones with AMX, which get SkylakeX's, as
 * the AVX-512 family does (kernels_blas.c). */
int seer_k_blas_own_haswell(void);
/* lead: rows the whole call had before x's (a prompt's rest after a shared beginning; 0 otherwise):
 * x's rows then get the bits they got in that call (seer_k_blas_row_period). */
int seer_k_linear_blas(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias,
                       int lead);
/* seer_k_linear_blas for up to 8 matrices of the same width against the same x (q, k and v; gate
 * and up): their row blocks in one job on the pool, each the sgemm call it is alone (the same
 * bits). 0 where seer_k_linear_blas would return 0 for one of them (the caller then computes
 * every matrix another way). */
int seer_k_linear_blas_multi(seer_pool_t *p, int count, float *const *ys, const float *x, int n, const seer_weight_t *const *ws,
                             const seer_weight_t *const *biases, int lead);
/* The row unit of the GEMM path's tiles: 1 where seer's own GEMM runs (seer_k_gemm_own: every
 * row the same bits in any call), else OpenBLAS's sgemm's, found by trying it once per process
 * (kernels_blas.c): rows a call computes from an offset that is a multiple of it get the longer
 * call's bits. 0: none found, or no OpenBLAS. */
int seer_k_blas_row_period(void);
/* This thread's buffer `slot` of at least `floats` floats, 64-byte aligned, grown as needed and
 * freed when the thread ends (a pthread key's destructor: the pool's threads keep theirs between
 * calls, and LeakSanitizer sees none lost); NULL when out of memory (each caller then takes
 * another path or fails its call). One slot per use, so two uses in one thread never share. */
enum { SEER_BUF_PACK, SEER_BUF_ATTN, SEER_BUF_PANEL, SEER_BUF_STREAM, SEER_BUF_GEMM, SEER_BUF_AMX_PANEL, SEER_BUF_AMX_X,
       SEER_BUF_DP_X, SEER_BUF_N };
float *seer_k_thread_buffer(int slot, size_t floats);
/* Whether seer's own GEMM (kernels_gemm.c) takes the GEMM path's linear layers in place of
 * OpenBLAS's sgemm: Intel CPUs with AVX-512, unless SEER_OWN_GEMM=0. */
int seer_k_gemm_own(void);
/* y_i[n][rows_i] = x[n][cols] . W_i^T for up to 8 matrices of one width (f32, bf16 or f16; no
 * bias, no LoRA): every element one chain of fused multiply-adds in input order, the bits of
 * a scalar fmaf loop, whatever n, the thread count or the other matrices. 0: not taken
 * (seer_k_gemm_own false, a shape or dtype it does not take, out of memory). */
int seer_k_gemm_multi(seer_pool_t *p, int count, float *const *ys, const float *x, int n, const seer_weight_t *const *ws);
/* y[n][out] = x[n][in] . W[out][in]^T (+ bias[out] when bias.data), plus the weight's LoRA
 * delta when it has an enabled one (seer_lora_apply). */
void seer_k_linear(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias);
/* The same with the path chosen by the caller: gemm 1 the GEMM path (AMX from 16 rows, OpenBLAS),
 * 0 the per-token kernel (seer_k_linear_rows). seer_k_linear is gemm = n >= seer_k_linear_gemm_min
 * and lead 0; a prompt's rest after a taken beginning passes the whole prompt's choice and, as
 * lead, the beginning's length (seer_k_linear_blas). */
void seer_k_linear_as(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias,
                      int gemm, int lead);
/* y[n][d] = x / rms(x) * w (w + 1 when one_plus: Gemma). y may alias x. */
void seer_k_rmsnorm(float *y, const float *x, int n, int d, const seer_weight_t *w, float eps, int one_plus);
/* Row r of an embedding table (any dtype) as f32. */
void seer_k_embed_row(float *out, const seer_weight_t *table, int64_t row);
void seer_k_silu_mul(float *gate, const float *up, size_t n); /* gate = silu(gate) * up */
/* The same steps over the pool for a many-token pass (the bits of the serial calls; small calls
 * stay on the caller): RMSNorm; y[i] += x[i] (* mult when mult != 0); SiLU-and-multiply; and
 * RoPE on n tokens of q ([n][H][hd]) and k ([n][KH][hd]; NULL: q alone), cs/sn [n][rot/2]. */
void seer_k_rmsnorm_pool(seer_pool_t *p, float *y, const float *x, int n, int d, const seer_weight_t *w, float eps, int one_plus);
void seer_k_add_pool(seer_pool_t *p, float *y, const float *x, size_t n, float mult);
void seer_k_silu_mul_pool(seer_pool_t *p, float *gate, const float *up, size_t n);
void seer_k_rope_rows_pool(seer_pool_t *p, int n, float *q, int H, float *k, int KH, int hd, int rot, const float *cs,
                           const float *sn);
/* Rotary embeddings: cos/sin tables [n][half] for positions start .. start+n-1 from the inverse
 * frequencies (angles in f32, as transformers), and rotate_half on the first rot dims of each of
 * nheads heads of x ([nheads][hd], one token; rot = hd for full rotary). */
void seer_k_rope_table(const float *inv, int half, int start, int n, float *cs, float *sn);
void seer_k_rope(float *x, int nheads, int hd, int rot, const float *cs, const float *sn);
/* a . b, and o[i] += w * v[i] for i < n: the attention's inner loops, on the same chains as the
 * per-token attention kernel for this CPU (kernels.c), so the hooked attention path that
 * materialises the scores computes the same bits. */
float seer_k_dot(const float *a, const float *b, int n);
void seer_k_axpy(float *o, float w, const float *v, int n);
/* The same with b / v a bf16 cache row, widened exactly: the bits seer_k_dot / seer_k_axpy give
 * on the widened row, and the per-token attention kernel on a bf16 cache. */
float seer_k_dot_bf16(const float *a, const uint16_t *b, int n);
/* dst[i] = src[i] widened to f32 (bf16 when bf16, else f16), exactly. */
void seer_k_widen16(float *dst, const uint16_t *src, size_t n, int bf16);
void seer_k_axpy_bf16(float *o, float w, const uint16_t *v, int n);
/* y[n][out] += scale * B . (A . x) for an unmerged, enabled LoRA adapter on a weight (lora.c);
 * a no-op when the adapter is disabled. */
void seer_lora_apply(seer_pool_t *p, float *y, const float *x, int n, const struct seer_lora *lora, int lead);
/* Lua methods of a model userdata implemented in lora.c (registered by lua_model.c):
 * c:load_adapter(dir, merge) and c:set_adapter(enabled). seer_model_lua_check returns the
 * model of the userdata at idx (a Lua error when it is not one or was freed). */
typedef struct lua_State lua_State;
int seer_lora_l_load(lua_State *L);
int seer_lora_l_set(lua_State *L);
struct seer_model *seer_model_lua_check(lua_State *L, int idx);
/* Causal (optionally sliding-window, soft-capped) grouped-query attention for n new tokens at
 * positions start .. start+n-1 over one layer's cache, which already holds their keys and
 * values. Softmax in f32, as transformers' eager path. Shared by every architecture. */
typedef struct seer_attn_params {
    const float *q;       /* [n][H*hd] */
    const float *kc, *vc; /* [max_len][KH*hd]; NULL when the cache is bf16 */
    const uint16_t *kc16, *vc16; /* the same of a bf16 cache (seer_kv_cache_t.k16), else NULL */
    float *out;           /* [n][H*hd] */
    float *scratch;       /* [threads][max_len] */
    int n, start, max_len;
    int H, KH, hd;
    int window;    /* 0: full causal; else a query at p sees keys k with p - k < window */
    float scale;   /* multiplies q.k */
    float softcap; /* 0: off; else scores become tanh(s / softcap) * softcap after scaling */
    int paths;     /* 0: the kernel chosen by n; else by this query count (seer_batch_seq_t.paths) */
} seer_attn_params_t;
void seer_k_attention(seer_pool_t *p, const seer_attn_params_t *a);
/* Layer l's keys and values of positions pos .. pos+n-1 into the cache from k and v ([n][kv_dim]
 * f32 each): copied, or rounded to bf16 in a bf16 cache. */
void seer_kv_put(seer_kv_cache_t *c, int l, int pos, int n, const float *k, const float *v);
/* Points a->kc / a->vc (an f32 cache) or a->kc16 / a->vc16 (a bf16 one) at layer l of c, and sets
 * a->max_len. */
void seer_kv_attn(const seer_kv_cache_t *c, int l, seer_attn_params_t *a);
/* seer_k_attention for several sequences' attentions of one layer (a batched forward call): the
 * per-token attentions (fewer than SEER_BLAS_MIN_TOKENS query tokens each) run as one parallel
 * loop over every sequence's (token, head block) items, where one call each would leave the
 * threads but one idle on a short context and wait at a barrier per sequence; longer ones run
 * alone. Each output the same bits as seer_k_attention gives it. The sequences share H, KH, hd
 * and one scratch of threads x their largest max_len. */
void seer_k_attention_batch(seer_pool_t *p, const seer_attn_params_t *a, int count);
/* The same as two GEMMs per head (kernels_blas.c), used from SEER_BLAS_MIN_TOKENS query tokens
 * on; returns 0 when it cannot (out of memory), and then the per-token kernel runs. */
int seer_k_attention_blas(seer_pool_t *p, const seer_attn_params_t *a);
/* The same on seer's own GEMM micro-kernel (kernels_gemm.c) where seer_k_gemm_own: each output
 * one fma chain over its keys in order. 0: not taken (no own GEMM, hd past 512, out of memory). */
int seer_k_attention_own(seer_pool_t *p, const seer_attn_params_t *a);
/* AVX2 + FMA + F16C available and SEER_NO_AVX2 unset (checked once): the condition for every
 * x86 SIMD path. */
int seer_k_have_avx2(void);
/* AVX-512 (F, BW, DQ, VL; SEER_NO_AVX512 turns it off) and AMX-BF16 usable by this process
 * (kernels_x86.c; SEER_NO_AMX turns it off). */
int seer_k_have_avx512(void);
int seer_k_intel_avx512(void); /* AVX-512 on a CPU that is not AMD's (SkylakeX's sgemm, kernels_blas.c) */
int seer_k_have_amx(void);
/* Which family of per-token linear kernels runs (checked once): 2 the AVX-512 rows kernel, 1 the
 * AVX2 kernels (the n = 1 GEMV, the streamed and blocked batched kernels, with their software
 * prefetch), 0 the portable loops. AVX-512 CPUs get the AVX2 family on AMD (Zen 4 runs 512-bit
 * FMAs as two 256-bit halves; measured there: batch-1 decode 1.25x, batch-16 1.9x) and the
 * AVX-512 kernel elsewhere; SEER_LINEAR_KERNELS=avx2 or avx512 chooses (the other one's CPU
 * features permitting). Each family gives a sequence the same bits whatever the batch. */
int seer_k_linear_simd(void);
/* Whether the one-token row kernels (batch-1 decode, default and fast precision) issue a software
 * prefetch per cache line ahead of their loads: off on AMD CPUs with AVX-512 (Zen 4, where it
 * slowed them; docs/model.md), on elsewhere; SEER_ROW_PREFETCH=0|1 chooses. The same bits either
 * way. The 2-4-token streamed kernels always prefetch (measured faster with it there). */
int seer_k_row_prefetch(void);
/* v[i] = exp(v[i] - mx) for i < n, returning the sum (vectorized, kernels_x86.c). */
float seer_k_exp_sub_sum(float *v, int n, float mx);
/* y = x W^T (+ bias) for bf16 W on AMX tiles, x split exactly into three bf16 pieces (one, rounded,
 * when seer_k_fast_bf16) (kernels_x86.c), any n >= 1, each token the same bits whatever n; 0 when
 * it does not apply (no AMX, other dtypes, cols not a multiple of 32, out of memory). */
int seer_k_linear_amx(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias);
/* seer_k_linear_amx for up to 8 matrices of the same width against the same x (q, k and v; gate
 * and up), any n >= 1: the activations packed once for all of them (up to 32 tokens, decode steps
 * and batched decode, every matrix's row blocks in one pool job; past that, a prefill, one pool
 * job per matrix), each output the bits of its own call. 0 when it does not apply (any matrix:
 * nothing is computed) or scratch memory runs out (some outputs may be written): the caller then
 * computes every output another way. */
int seer_k_linear_amx_multi(seer_pool_t *p, int count, float *const *ys, const float *x, int n,
                            const seer_weight_t *const *ws, const seer_weight_t *const *biases);
/* Whether w can be put into the AMX tile layout: this CPU runs bf16 on AMX, w is bf16 and its
 * rows and cols are multiples of 32 (so the layout fills the same bytes). */
int seer_k_amx_packable(const seer_weight_t *w);
/* Rewrites w's data (writable, w->amx_packed 0) in place into the AMX tile layout and sets
 * w->amx_packed: per 32-row block, per 32-input step, the block's two 16-row halves each one
 * contiguous KiB in the VNNI layout of a B tile (element (r, c) of the block: step c / 32, half
 * r / 16, pair (c % 32) / 2, then row r % 16, then c % 2), so a decode step reads every matrix
 * as one stream and a prefill makes no tiles. The blocks are spread over p's threads. 0: not
 * packable, or out of memory (w untouched). */
int seer_k_amx_pack(seer_pool_t *p, seer_weight_t *w);
/* y = x W^T (+ bias) on a packed weight without tiles, in f32 with each product exact and the
 * pieces of x as the AMX kernels split them: the path of last resort when the kernels' scratch
 * cannot be had (out of memory), so a packed weight is never read as rows. */
void seer_k_linear_amx_packed_slow(float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias);
/* y = x W^T (+ bias) for bf16 W with AVX512_BF16's VDPBF16PS, x rounded to bf16 (precision =
 * "fast"; kernels_x86.c), any n >= 1, each (row, token) output the same bits whatever n; 0 when
 * it does not apply (not fast, no AVX512_BF16, other dtypes, cols not a multiple of 32, out of
 * memory). */
int seer_k_linear_dpbf16(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias);
/* seer_k_linear_dpbf16 for up to 4 matrices of the same width against the same x (q, k and v;
 * gate and up): x packed once and one parallel loop over all their rows, each output the bits
 * it gets in a call of its own. 0 when it does not apply (any matrix), and nothing is computed. */
int seer_k_linear_dpbf16_multi(seer_pool_t *p, int count, float *const *ys, const float *x, int n,
                               const seer_weight_t *const *ws, const seer_weight_t *const *biases);
/* What precision = "fast" runs on here: "AMX", "AVX512_BF16", or NULL (fast computes what the
 * default does; *why, when why is not NULL, says why in a sentence). */
const char *seer_k_fast_kind(const char **why);
/* seer_k_rmsnorm on AVX-512; 0 when not available (then the portable loop runs). */
int seer_k_rmsnorm_fast(float *y, const float *x, int n, int d, const seer_weight_t *w, float eps, int one_plus);
/* Softmax of row[f .. l] in place after soft-capping (softcap > 0); row[0 .. f) and row(l .. len)
 * become 0. */
void seer_k_softmax_row(float *row, int f, int l, int len, float softcap);
/* Prefill attention for head_dim 4, 8 or 16 on AVX-512 (kernels_x86.c); 0 when it does not apply or
 * is out of memory, and then another kernel runs. */
int seer_k_attention_small(seer_pool_t *p, const seer_attn_params_t *a);

/* ---- hooks in the forward pass (hooks_glue.c) ---- */
/* Anything attached at (point, layer)? The forward pass's cheap test before building an act. */
#define SEER_HOOKED(hk, p, layer) ((hk) && seer_hookset_has((hk)->set, (p), (layer)))
/* Hands rows [n][cols] (positions start ..) to the hooks at (point, layer); 0 when none. */
int seer_fwd_hook_rows(const seer_fwd_hooks_t *hk, seer_hook_point_t p, int layer, int start, int n, float *data,
                       int cols, seer_err_t *err);
/* The same for per-head rows [n][heads][hd] (q, k, v, z). */
int seer_fwd_hook_heads(const seer_fwd_hooks_t *hk, seer_hook_point_t p, int layer, int start, int n, float *data,
                        int heads, int hd, seer_err_t *err);
/* The same over a batch: each sequence's rows of the packed data go to its own hooks. */
int seer_fb_hook_rows(const seer_fwd_batch_t *fb, seer_hook_point_t p, int layer, float *data, int cols, seer_err_t *err);
int seer_fb_hook_heads(const seer_fwd_batch_t *fb, seer_hook_point_t p, int layer, float *data, int heads, int hd,
                       seer_err_t *err);
/* For forward functions with the locals fb, err, rc and an `out:` label that frees their
 * buffers: run the hooks at a point and leave on error. */
/* Checks a start_at_layer request (seer_fwd_hooks_t.from and .resid, against its .stop; seq: a
 * batch's sequence number for the error, 0 alone). */
int seer_fwd_check_from(const struct seer_model *m, int from, int stop, const float *resid, const float *hidden, int seq,
                        seer_err_t *err);
/* After an architecture computed its embeddings into x: with fb->from > 0, overwrites x with
 * each sequence's given residual. Returns the first block to run (fb->from - 1, else 0). */
int seer_fb_begin(const seer_fwd_batch_t *fb, float *x, int D);
#define SEER_HOOK_ROWS(p, layer, data, cols)                                                   \
    do {                                                                                       \
        if ((rc = seer_fb_hook_rows(fb, (p), (layer), (data), (cols), err)) < 0) goto out;      \
    } while (0)
#define SEER_HOOK_HEADS(p, layer, data, heads, hd)                                                      \
    do {                                                                                                \
        if ((rc = seer_fb_hook_heads(fb, (p), (layer), (data), (heads), (hd), err)) < 0) goto out;       \
    } while (0)
/* y = x W^T (+ bias) over the packed rows, each row's result what the sequence alone gets
 * (seer_model_forward_batch says how). */
void seer_fb_linear(seer_pool_t *p, const seer_fwd_batch_t *fb, float *y, const float *x, const seer_weight_t *w,
                    const seer_weight_t *bias);
/* The per-token kernel whatever n (no GEMM), LoRA included: a row's result does not depend on n. */
void seer_k_linear_rows(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias);
/* ys[i] = x ws[i]^T (+ biases[i]) for count matrices of the same width against the same x (q, k
 * and v; gate and up), each as seer_k_linear_as with gemm = paths >= seer_k_linear_gemm_min(ws[i])
 * and lead = paths - n (paths: the row count whose path the call takes, n for a plain call, 0 the
 * per-token kernel),
 * LoRA included; where the kernel can (precision = "fast" on AVX512_BF16, no matrix on its GEMM
 * path) in one pass with x packed once and one barrier, each output the same bits. */
void seer_k_linear_multi(seer_pool_t *p, int count, float *const *ys, const float *x, int n, const seer_weight_t *const *ws,
                         const seer_weight_t *const *biases, int paths);
void seer_lora_apply_rows(seer_pool_t *p, float *y, const float *x, int n, const struct seer_lora *lora);
/* seer_fb_linear for up to 4 matrices of the same width against the same rows x (q, k and v;
 * gate and up): each run of short sequences (and a batch of one under seer_k_linear_gemm_min rows)
 * through seer_k_linear_multi, the same bits as one seer_fb_linear per matrix. */
void seer_fb_linear_multi(seer_pool_t *p, const seer_fwd_batch_t *fb, int count, float *const *ys, const float *x,
                          const seer_weight_t *const *ws, const seer_weight_t *const *biases);
/* Copies the packed rows x[N][D] into each sequence's hidden buffer (block b of it), when set, and
 * into its save buffer where b is its save_block. */
void seer_fb_hidden(const seer_fwd_batch_t *fb, int block, const float *x, int D);
/* gate = silu(gate) * up per sequence (the vector kernel's scalar tail depends on the length). */
void seer_fb_silu_mul(seer_pool_t *p, const seer_fwd_batch_t *fb, float *gate, const float *up, int I);
/* Attention for one layer: seer_k_attention, or, when attn.hook_attn_scores / attn.hook_pattern
 * have hooks at this layer, an explicit [head, n, k] scores -> hooks -> softmax -> hooks ->
 * values path. */
int seer_fwd_attention(seer_model_t *m, const seer_fwd_hooks_t *hk, int layer, const seer_attn_params_t *a,
                       seer_err_t *err);
/* Attention for one layer of every sequence of a batched call, aps[s] sequence s's (reordered
 * here): the sequences with score or pattern hooks at this layer through seer_fwd_attention, the
 * others together (seer_k_attention_batch: one parallel loop). */
int seer_fb_attention(seer_model_t *m, const seer_fwd_batch_t *fb, int layer, seer_attn_params_t *aps, seer_err_t *err);
/* The per-sequence attention parameters of a forward call: one on the stack for a single
 * sequence, else fb->ns allocated (NULL: out of memory). seer_fb_attn_free releases them. */
seer_attn_params_t *seer_fb_attn_params(const seer_fwd_batch_t *fb, seer_attn_params_t *one);
void seer_fb_attn_free(seer_attn_params_t *aps, seer_attn_params_t *one);
/* The end of every forward pass, per sequence: the final norm (all its rows when its
 * ln_final.hook_normalized has hooks, else only the rows that need logits; xb has room for N
 * rows), the hooks there, then the head into its logits (NULL: none) for all rows or the last
 * one; the head runs once over the rows of every sequence (grouped as seer_fb_linear). */
int seer_fwd_finish(seer_model_t *m, const seer_fwd_batch_t *fb, const float *x, float *xb, seer_err_t *err);
int seer_fwd_final_norm(seer_model_t *m, float *y, const float *x, int rows);

/* Architectures, one file each. All but llama are weak so an architecture file can be added
 * (or be absent) without touching the table in model.c. */
extern const seer_arch_t seer_arch_llama;
extern const seer_arch_t seer_arch_mistral __attribute__((weak));
extern const seer_arch_t seer_arch_qwen2 __attribute__((weak));
extern const seer_arch_t seer_arch_qwen3 __attribute__((weak));
extern const seer_arch_t seer_arch_gemma __attribute__((weak));
extern const seer_arch_t seer_arch_gemma2 __attribute__((weak));
extern const seer_arch_t seer_arch_gemma3 __attribute__((weak));
extern const seer_arch_t seer_arch_gpt2 __attribute__((weak));
extern const seer_arch_t seer_arch_gpt_neox __attribute__((weak));
extern const seer_arch_t seer_arch_granite __attribute__((weak));
extern const seer_arch_t seer_arch_olmo2 __attribute__((weak));
extern const seer_arch_t seer_arch_phi3 __attribute__((weak));

/* 0, or an error naming the first of half RoPE inverse frequencies that is not finite and
 * positive and the config.json of dir (llama.c). */
int seer_rope_check(const float *inv, int half, const char *dir, seer_err_t *err);

#endif
