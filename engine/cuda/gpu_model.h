/* The model runtime on a CUDA GPU (docs/cuda.md). A model loaded with a device >= 0 keeps its
 * CPU binding (the mapped checkpoint, the architecture's bound weights) and gets a GPU copy:
 * every matrix and norm weight in bf16 in device memory, uploaded once through pinned staging.
 * The forward pass is one generic decoder driven by a description that the architecture fills
 * (seer_arch_t.describe): pre-norms, optional sandwich norms, q/k norms, biases, the MLP's
 * activation, soft-caps, per-layer windows and RoPE frequencies. Activations stay in f32 on the
 * device; matrix products take bf16 operands with f32 accumulation; the KV cache is bf16.
 *
 * Hooks: a hooked point copies its rows to the host, runs the same C hook code as the CPU
 * backend (engine/hooks), and copies them back; attention-score and pattern hooks run that
 * layer's attention on the host from the device KV cache. Unhooked points never leave the GPU. */
#ifndef SEER_GPU_MODEL_H
#define SEER_GPU_MODEL_H

#include <stdio.h>

#include "../model/model_private.h"
#include "cudrv.h"

enum { SEER_GPU_ACT_SILU = 0, SEER_GPU_ACT_GELU_TANH = 1, SEER_GPU_ACT_GELU_ERF = 2 };

/* The weights of one decoder layer, in upload order (X(field) for each). */
#define SEER_GPU_LAYER_WEIGHTS(X)                                                                      \
    X(pre_attn_norm) X(q) X(k) X(v) X(o) X(q_bias) X(k_bias) X(v_bias) X(o_bias) X(q_norm) X(k_norm) \
    X(post_attn_norm) X(pre_mlp_norm) X(gate) X(up) X(down) X(post_mlp_norm)

/* One decoder layer; a NULL weight is absent. post_attn_norm (Gemma 2/3) normalises the
 * attention output before the residual add, post_mlp_norm the MLP output. */
typedef struct seer_gpu_layer {
#define SEER_GPU_W(f) const seer_weight_t *f;
    SEER_GPU_LAYER_WEIGHTS(SEER_GPU_W)
#undef SEER_GPU_W
    int window;            /* 0: full causal attention */
    const float *inv_freq; /* [head_dim / 2] RoPE inverse frequencies (rotate_half layout) */
} seer_gpu_layer_t;

typedef struct seer_gpu_desc {
    seer_gpu_layer_t *layers; /* [num_layers], malloc'd by describe */
    float *own;               /* memory describe allocated for frequencies (freed with the desc) */
    int norm_one_plus;        /* RMSNorm weight is (1 + w): Gemma */
    int act;                  /* SEER_GPU_ACT_*: gate = act(gate) * up */
    float embed_scale;        /* multiplies the embeddings after hook_embed; 1: none */
    float attn_scale, attn_softcap, final_softcap; /* softcap 0: none */
} seer_gpu_desc_t;

void seer_gpu_desc_free(seer_gpu_desc_t *d);

/* Moves m onto cuda:device: describes it, checks that it fits (weights + a working set),
 * uploads the weights with a progress bar on a terminal (progress: < 0 when stderr is a
 * terminal, 0 never, > 0 always). Errors name what did not fit and what was free. */
int seer_gpu_attach(seer_model_t *m, int device, int progress, seer_err_t *err);
void seer_gpu_detach(seer_model_t *m);
int seer_gpu_device_index(const seer_model_t *m);
/* Bytes of device memory the weights take. */
size_t seer_gpu_weight_bytes(const seer_model_t *m);
seer_cuda_dev_t *seer_gpu_dev(const seer_model_t *m);
/* The device copy (bf16) of one of the model's weights; 0 when it has none. */
seer_devptr_t seer_gpu_weight_dev(const seer_model_t *m, const seer_weight_t *w);

/* Overwrites every weight on the device with uniform values in [-scale, scale) (for benchmarks
 * on random-weight models whose checkpoint is a sparse file of zeros). */
int seer_gpu_randomize(seer_model_t *m, uint64_t seed, float scale, seer_err_t *err);

/* The KV cache of a GPU model: bf16 [layers][max_tokens][kv_dim] for keys and for values,
 * allocated when the cache is made (an out-of-memory error says how many tokens it was for). */
int seer_gpu_kv_alloc(seer_model_t *m, seer_kv_cache_t *c, seer_err_t *err);
void seer_gpu_kv_free(seer_kv_cache_t *c);

/* The forward pass (same contract as seer_arch_t.forward). next: when not NULL, also the
 * argmax of the last row's logits, computed on the GPU (greedy decoding without copying
 * the logits back; logits may then be NULL). */
int seer_gpu_forward(seer_model_t *m, seer_kv_cache_t *kv, const int32_t *tokens, int n, float *logits, int all_logits,
                     float *hidden, const seer_fwd_hooks_t *hk, int *next, seer_err_t *err);

/* A decode step of a batch in one pass over the weights (seer_model_forward_batch on a GPU
 * model): every sequence one token, rows packed, RoPE, the KV cache and attention per sequence
 * (kernels given each row's position and cache), hooks per sequence on their own rows. The linear
 * layers take the GEMV with f32 activations, as each sequence alone does (W read once per 8
 * sequences); SEER_GPU_BATCH_GEMM=1 trades that for speed past 8 sequences (gpu_model.c,
 * linear_split). 1 when it
 * ran (each cache one token longer), 0 when the batch is not such a step (a prompt, hidden
 * states, embedding, final-norm, score or pattern hooks: the caller runs the sequences one at a
 * time), < 0 on an error (no cache grows). */
int seer_gpu_forward_batch(seer_model_t *m, const seer_batch_seq_t *seqs, int ns, seer_err_t *err);

/* Profiling: while on, each forward pass times its pieces with device events (each kernel,
 * cuBLAS, attention, copies, hooks) and the report prints the time per pass and per piece,
 * largest first, then starts over (f NULL: only starts over). Costs an event record per piece; for finding where time
 * goes, not for timing. */
int seer_gpu_profile(seer_model_t *m, int on, seer_err_t *err);
void seer_gpu_profile_report(seer_model_t *m, FILE *f);

#endif
