/* Attention on a CUDA device over the bf16 KV cache (kernels/attention.cu, docs/cuda.md): which
 * form runs for a call, the scratch it takes, and the batched cuBLAS products of the prefill form.
 *   - split (flash-decoding): seer_attn_split over slices of the keys, enough slices that the
 *     GPU has at least two blocks per multiprocessor, merged by seer_attn_combine. Any n; the
 *     default for n <= 8 query tokens (decode) and wherever cuBLAS is missing.
 *   - gemm: per chunk of query tokens, scores S = Q K^T in f32 (cuBLAS, bf16 operands), then
 *     seer_attn_softmax (mask, scale, soft-cap, normalise) into P, then O = P V (cuBLAS). Q and P
 *     are each split into two bf16 terms (hi + lo, ~16 bits), so the products keep about f32's
 *     precision on the f32 queries and probabilities while running on tensor cores; the scores
 *     come from one product over 2 x head_dim, [K | K] . [Q_hi | Q_lo]^T (seer_kv_twice copies
 *     the chunk's keys twice per row), so they are written once, not accumulated. The default
 *     for n > 8. Chunks of at most 1024 queries (SEER_ATTN_MAX_CHUNK overrides) (each chunk's products stop at its last query's
 *     keys, skipping most of the causal mask), fewer when scores and probabilities would take
 *     more than SEER_ATTN_GEMM_BUDGET bytes (more only when one chunk of 16 queries needs more). */
#ifndef SEER_GPU_ATTN_H
#define SEER_GPU_ATTN_H

#include "cudrv.h"

#define SEER_ATTN_GEMM_BUDGET ((size_t)512 << 20)

enum { SEER_ATTN_AUTO = 0, SEER_ATTN_SPLIT = 1, SEER_ATTN_GEMM = 2 };

/* The rows of a batch (batched decode): row t of q is at position pos[t] of sequence seq[t]
 * (int32 arrays on the device), whose cache's keys and values start at the device addresses
 * seq_k[s] and seq_v[s] (u64 arrays), max_tokens[s] (int32) rows per layer; max_ctx: the most
 * keys any row sees. */
typedef struct {
    seer_devptr_t pos, seq, seq_k, seq_v, max_tokens;
    int layer, max_ctx;
} seer_gpu_attn_rows_t;

typedef struct {
    seer_devptr_t out; /* [n][H][hd] f32 */
    seer_devptr_t q;   /* [n][H][hd] f32, query token t at position start + t */
    seer_devptr_t kc, vc; /* this layer's cache, [ctx >= start + n][KH][hd] bf16 */
    int n, start, H, KH, hd, window; /* window 0: full causal; hd <= 256, H % KH == 0 */
    float scale, softcap;            /* softcap 0: none */
    const seer_gpu_attn_rows_t *rows; /* NULL: one sequence (kc, vc, start); else a batch's rows (split form) */
} seer_gpu_attn_args_t;

typedef struct seer_gpu_attn {
    seer_cuda_dev_t *d;
    seer_cuda_fn_t *split, *combine, *softmax, *split_pairs, *kv_twice;
    int sms;               /* multiprocessors */
    seer_devptr_t scratch; /* partial states (split), or Q and K pairs, scores and probabilities (gemm) */
    size_t scratch_bytes;
    size_t budget; /* SEER_ATTN_GEMM_BUDGET; tests lower it to exercise chunking */
    int max_chunk; /* queries per chunk at most (1024, or SEER_ATTN_MAX_CHUNK) */
} seer_gpu_attn_t;

int seer_gpu_attn_init(seer_gpu_attn_t *a, seer_cuda_dev_t *d, seer_err_t *err);
void seer_gpu_attn_free(seer_gpu_attn_t *a);
/* Runs attention on the device's stream. path SEER_ATTN_GEMM without cuBLAS is an error naming
 * it; SEER_ATTN_AUTO picks as above. */
int seer_gpu_attention(seer_gpu_attn_t *a, const seer_gpu_attn_args_t *x, int path, seer_err_t *err);

#endif
