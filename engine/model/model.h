/* The CPU model runtime: Hugging Face checkpoints (config.json + safetensors, single or
 * sharded) memory-mapped as they are, a forward pass per architecture, a KV cache and
 * sampling. Weights stay in their file dtype (f32/bf16/f16) and are widened inside the
 * kernels; activations are f32. */
#ifndef SEER_MODEL_H
#define SEER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "../hooks/hooks.h"
#include "../seer.h"
#include "../tensor/dtype.h"

#define SEER_MODEL_MAX_EOS 8

typedef enum { SEER_ROPE_DEFAULT = 0, SEER_ROPE_LLAMA3, SEER_ROPE_LINEAR, SEER_ROPE_YARN, SEER_ROPE_DYNAMIC,
               /* Phi-3's: short/long factor lists, read by phi3.c */
               SEER_ROPE_LONGROPE } seer_rope_kind_t;

typedef struct seer_model_config {
    char model_type[32];   /* config.json "model_type": "llama", "mistral", "qwen2", ... */
    char architecture[64]; /* "LlamaForCausalLM" ... */
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int num_layers;
    int num_heads;
    int num_kv_heads;
    int head_dim;
    int max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;
    seer_rope_kind_t rope_kind;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_position;
    /* yarn: cos and sin are multiplied by rope_attention_factor; beta_fast/slow bound the ramp
     * between interpolated and extrapolated frequencies (truncated to whole dims unless
     * rope_truncate is 0). dynamic (NTK): the base grows with the sequence past
     * max_position_embeddings, per forward pass. */
    float rope_attention_factor, rope_beta_fast, rope_beta_slow;
    int rope_truncate;
    int tie_word_embeddings;
    int attention_bias;
    int mlp_bias;
    int sliding_window; /* 0: none */
    int bos_token_id;   /* -1: none */
    int eos_token_ids[SEER_MODEL_MAX_EOS];
    int num_eos;
    seer_dtype_t weight_dtype; /* dtype of most weights in the checkpoint */
} seer_model_config_t;

typedef struct seer_model seer_model_t;

typedef struct seer_model_opts {
    int threads; /* <= 0: SEER_THREADS or the core count */
    /* A hidden model: weights are read into anonymous memory (no file mapping or descriptor
     * names the directory), seer_model_dir and later messages say "<hidden>", and load errors
     * have the directory replaced by "<hidden>". */
    int hidden;
    /* NULL or "cpu": the CPU runtime. "cuda" or "cuda:N": the weights are also uploaded to that
     * GPU in bf16 and the forward pass runs there (docs/cuda.md). Without a driver or GPU, one
     * line on stderr says why (once per process) and the model runs on the CPU. */
    const char *device;
    int progress; /* upload progress bar: < 0 when stderr is a terminal (the default 0 = never) */
    /* 0 (precision = "exact", the default): bf16 weights meet f32 activations without rounding
     * them (AMX splits them into three exact bf16 pieces). 1 ("fast"): AMX prefill rounds the
     * activations to bf16, as torch's bf16 matmul does (docs/model.md has the error and speed). */
    int fast_bf16;
    /* Where the weights live on the CPU. SEER_WEIGHTS_AUTO (0, the default): read into memory
     * backed by transparent huge pages when the model runs on the CPU and its files take at most
     * half the available memory (MemAvailable, or the cgroup's memory.max less its use), else
     * mapped, and one line on stderr says so. SEER_WEIGHTS_MEMORY: always read in.
     * SEER_WEIGHTS_MAPPED: mapped from the files (shared with other processes through the page
     * cache, paged in lazily). A hidden model is always read in. */
    int weights;
} seer_model_opts_t;
enum { SEER_WEIGHTS_AUTO = 0, SEER_WEIGHTS_MEMORY = 1, SEER_WEIGHTS_MAPPED = 2 };

/* Loads a model directory (config.json, model.safetensors or model.safetensors.index.json +
 * shards, optional generation_config.json). Weights are read in or mapped (opts->weights). Errors name the
 * file and, for missing tensors, list them. */
int seer_model_load(seer_model_t **out, const char *dir, const seer_model_opts_t *opts, seer_err_t *err);
void seer_model_free(seer_model_t *m);
const seer_model_config_t *seer_model_config(const seer_model_t *m);
size_t seer_model_param_count(const seer_model_t *m);
size_t seer_model_weight_bytes(const seer_model_t *m);
/* The bytes and parameters of the weights one decode step reads: every tensor the architecture
 * uses, once, with one row of each embedding table (the token embeddings unless they are also
 * the LM head, gpt2's positions), which is what a decode step's read bound divides by. Tensors
 * a checkpoint holds and the model does not use (a multimodal checkpoint's vision tower) are
 * left out. The base weights only (a LoRA adapter's reads are not counted). */
size_t seer_model_decode_bytes(const seer_model_t *m);
size_t seer_model_decode_params(const seer_model_t *m);
int seer_model_weights_in_memory(const seer_model_t *m); /* 1: read into memory, 0: mapped */
/* How many of the model's matrices were put into the AMX tile layout at load (model.c). */
int seer_model_amx_packed(const seer_model_t *m);
/* What the model's KV caches hold: "bf16" on a GPU and where precision = "fast" changes the
 * linear layers (bf16 weights on a CPU with AVX512_BF16 or AMX), else "f32". */
const char *seer_model_kv_dtype(const seer_model_t *m);
/* The fewest tokens with which a sequence runs every linear layer of the model as a GEMM (a long
 * prompt's prefill): shorter sequences run the per-token kernel (and, in a batch, share one pass
 * over the weights). 1 << 30 where no count does (precision = "fast" on AVX512_BF16 without
 * AMX); 0 for a model on a GPU. */
int seer_model_gemm_min_tokens(const seer_model_t *m);
const char *seer_model_dir(const seer_model_t *m);
/* Where the forward pass runs: "cpu" or "cuda:N". */
const char *seer_model_device(const seer_model_t *m, char *buf, size_t n);
/* Names of the supported model_type values, ", "-separated. */
const char *seer_model_supported(void);

/* Key/value cache for one sequence. */
typedef struct seer_kv_cache seer_kv_cache_t;
int seer_kv_cache_new(seer_kv_cache_t **out, const seer_model_t *m, int max_tokens, seer_err_t *err);
void seer_kv_cache_free(seer_kv_cache_t *c);
int seer_kv_cache_len(const seer_kv_cache_t *c);
void seer_kv_cache_reset(seer_kv_cache_t *c);
/* Drops everything after the first n tokens (for re-running from a shared prefix). */
void seer_kv_cache_truncate(seer_kv_cache_t *c, int n);
/* Whether the cache lives in host memory (a CPU model's); a GPU model's is on the device. */
int seer_kv_cache_host(const seer_kv_cache_t *c);
/* The bytes its keys and values take (its room, not its length; a GPU cache's on the device). */
size_t seer_kv_cache_bytes(const seer_kv_cache_t *c);
/* Copies src's first n positions (every layer's keys and values) into dst and sets dst's length
 * to n: a sequence whose first n tokens, hooks and model state are src's takes src's cache for
 * them instead of computing it again (the same bits: the forward pass is deterministic). Both
 * host caches of one model; 0 <= n <= len(src) and n fits dst; else SEER_EINVAL. */
int seer_kv_cache_copy_prefix(seer_kv_cache_t *dst, const seer_kv_cache_t *src, int n, seer_err_t *err);
/* Copies src's first n positions of blocks 0 .. blocks-1 only into an empty dst (its length stays
 * 0): a sequence with src's prompt and hooks before block `blocks` takes those blocks' keys and
 * values, then runs its prompt from that block (seer_batch_seq_t.cached_below), which adds the
 * other blocks' and sets the length. Both host caches of one model; 0 < blocks <= layers,
 * 0 <= n <= len(src), n fits dst; else SEER_EINVAL. */
int seer_kv_cache_copy_blocks(seer_kv_cache_t *dst, const seer_kv_cache_t *src, int n, int blocks, seer_err_t *err);
/* A number that changes whenever something changes what a forward pass of m computes for the
 * same tokens and hooks: an adapter loaded or switched on or off, the GEMM-threshold override
 * (core.gemm_min_tokens), a filter changed on an intervention that is attached somewhere. A
 * result kept from an earlier pass stands for a new one only while the number is the same. */
uint64_t seer_model_state_epoch(const seer_model_t *m);
/* How many first positions of a prompt of taker_len tokens can be taken from another's prompt of
 * donor_len tokens whose first `common` tokens are the same (with the same hooks on them and the
 * same model state): the rows the whole-prompt passes of both compute alike. A multiple of 64
 * (attention's query block) under both lengths and under taker_len (the rest runs with
 * seer_batch_seq_t.paths = taker_len), and on the GEMM path within the whole sgemm tiles of both
 * passes (seer_k_blas_row_period; 1 where seer's own GEMM runs); 0 where nothing can be taken: a GPU model, a CPU with AMX (its
 * tile kernels were not checked for this), rope scaling that depends on the pass's length
 * (LongRoPE; dynamic NTK past max_position_embeddings), the two lengths on two sides of a
 * kernel's crossing (seer_model_gemm_min_tokens and the like), no sgemm row period found. */
int seer_model_prefix_rows(const seer_model_t *m, int donor_len, int taker_len, int common);
#define SEER_PREFIX_BLOCK 64 /* seer_model_prefix_rows returns multiples of it */

/* Runs n tokens at positions len(cache) .. len(cache)+n-1 and appends them to the cache.
 * logits: NULL, or room for (all_logits ? n : 1) * vocab_size floats (the last token's row
 * when all_logits is 0). */
int seer_model_forward(seer_model_t *m, seer_kv_cache_t *cache, const int32_t *tokens, int n, float *logits,
                       int all_logits, seer_err_t *err);

/* The same, also copying the residual stream into hidden (NULL: not captured): (num_layers + 1)
 * blocks of [n][hidden_size] floats: block 0 is the input of layer 0 (the embeddings, scaled
 * where the architecture scales them), block i + 1 the residual after layer i, before the
 * final norm (TransformerLens blocks.{i}.hook_resid_post). */
int seer_model_forward_ex(seer_model_t *m, seer_kv_cache_t *cache, const int32_t *tokens, int n, float *logits,
                          int all_logits, float *hidden, seer_err_t *err);

/* Hooks for one forward call (docs/hooks.md). set NULL or empty: none. prompt_len: where the
 * prompt of the current generation ends (negative hook positions count back from it, and
 * only_prompt means positions before it); for a plain forward, len(cache) + n. batch: the
 * sequence's 0-based index in a batch. user: passed to callback interventions. */
typedef struct seer_fwd_hooks {
    const seer_hookset_t *set;
    int prompt_len;
    int batch;
    void *user;
    /* 0: the whole pass. L + 1: stop where block L would begin, after the hooks at its
     * blocks.L.hook_resid_pre (L = num_layers: before the final norm), with no logits computed
     * and nothing added to the cache (TransformerLens's stop_at_layer; a CPU model only, a GPU
     * model runs the whole pass). In a batch, the first sequence's stop is the batch's. */
    int stop;
    /* 0: the whole pass from the embeddings. L + 1 (L from 0 to num_layers): begin where block L begins, with
     * resid ([n][hidden_size] floats, the residual entering block L, blocks.L.hook_resid_pre) in
     * place of the embeddings: no embedding hooks, blocks L .. on, then the final norm and the
     * logits (TransformerLens's start_at_layer; L = num_layers: only those). The tokens are not
     * read (any valid ids), hidden states cannot be asked, nothing is added to the cache (its
     * earlier blocks would have no keys and values), a CPU model only. In a batch, every sequence
     * must give the same L and its own resid. */
    int from;
    const float *resid;
} seer_fwd_hooks_t;

/* seer_model_forward_ex with hooks (hk may be NULL). */
int seer_model_forward_hooked(seer_model_t *m, seer_kv_cache_t *cache, const int32_t *tokens, int n, float *logits,
                              int all_logits, float *hidden, const seer_fwd_hooks_t *hk, seer_err_t *err);
/* One sequence of a batched forward call: n tokens appended to its own cache (positions
 * len(cache) ..), its own logits/hidden buffers (as seer_model_forward_hooked) and its own hooks
 * (NULL: none), so each sequence can carry a different intervention. */
typedef struct seer_batch_seq {
    seer_kv_cache_t *cache;
    const int32_t *tokens;
    int n;
    float *logits; /* NULL, or (all_logits ? n : 1) * vocab_size floats */
    int all_logits;
    float *hidden; /* NULL, or (num_layers + 1) * n * hidden_size floats */
    const seer_fwd_hooks_t *hk;
    /* 0: the kernels are chosen by n. Else the rest of a prompt whose first len(cache) tokens
     * were copied from another sequence (seer_kv_cache_copy_prefix, seer_model_prefix_rows said
     * how many): paths = len(cache) + n, the whole prompt's length, len(cache) a multiple of 64,
     * and every kernel runs as it ran for these rows in the whole prompt's pass, so the results
     * are that pass's, bit for bit. A CPU model only; not with start_at_layer / stop_at_layer. */
    int paths;
    /* 0: nothing. B (1 .. num_layers): copies the residual entering block B, before the hooks at
     * blocks.B.hook_resid_pre run (the hidden state of block B), into save ([n][hidden_size]
     * floats): what a sequence with the same tokens and the same hooks before block B starts
     * from (cached_below). A CPU model only; not with stop_at_layer, and with start_at_layer
     * (hk->from) only for a block the pass runs from its start (save_block >= from). */
    int save_block;
    float *save;
    /* 0: a start_at_layer pass (hk->from) adds nothing to the cache. 1: the cache already holds
     * this sequence's keys and values of blocks 0 .. from-2 at positions len(cache) .. + n - 1
     * (seer_kv_cache_copy_blocks from a sequence that saved its residual entering that block,
     * save_block), so the pass keeps the rows it adds from its block on, and the cache ends as
     * a pass from the embeddings would leave it; with that sequence's residual (hk->resid) the
     * logits and every row from the block on are that pass's, bit for bit. */
    int cached_below;
} seer_batch_seq_t;

/* Runs every sequence of a batch in one pass over the weights (the rows of all sequences are
 * packed; positions, RoPE, the KV cache, attention and hooks stay per sequence). Each
 * sequence's results are bit-identical to seer_model_forward_hooked on it alone: a linear
 * layer runs the sequences that would take the GEMM path alone (seer_model_gemm_min_tokens: 16,
 * or 96 / 128 where the blocked per-token kernel is faster on short prompts) one by one and
 * all the others together through the per-token kernel, whose result for a row does not depend
 * on the other rows. Caches must be distinct. On a GPU model a decode step (one token per
 * sequence) runs in one pass (seer_gpu_forward_batch), anything else one sequence after another.
 * On failure no cache keeps the new tokens. */
int seer_model_forward_batch(seer_model_t *m, const seer_batch_seq_t *seqs, int nseq, seer_err_t *err);

/* A forward pass that returns the greedy next token (the argmax of the last row's logits, lowest
 * id on ties) instead of logits; on a GPU the logits never leave the device. */
int seer_model_forward_next(seer_model_t *m, seer_kv_cache_t *cache, const int32_t *tokens, int n, int *next,
                            const seer_fwd_hooks_t *hk, seer_err_t *err);
/* Bit mask of the hook points (SEER_HP_BIT) this model has; names via seer_hook_name. */
unsigned seer_model_hook_mask(const seer_model_t *m);
/* logits[rows][vocab] of residual-stream rows x[rows][hidden_size]: the final norm, the
 * unembedding and any final soft-cap (the logit lens). */
int seer_model_unembed(seer_model_t *m, const float *x, int rows, float *logits, seer_err_t *err);

/* Sampling. temperature 0 = greedy (argmax, lowest id on ties). Filters apply in the order
 * transformers applies them: repetition penalty, temperature, top_k, top_p, min_p. */
typedef struct seer_sampler_opts {
    float temperature;
    int top_k;       /* 0: off */
    float top_p;     /* 1: off */
    float min_p;     /* 0: off */
    float repetition_penalty; /* 1: off */
    uint64_t seed;
} seer_sampler_opts_t;

typedef struct seer_rng {
    uint64_t s[2];
} seer_rng_t;

void seer_rng_seed(seer_rng_t *r, uint64_t seed);
double seer_rng_uniform(seer_rng_t *r); /* [0, 1) */

/* Picks the next token from logits (vocab floats, modified in place). history: the tokens so
 * far (prompt + generated) for the repetition penalty. Returns the id, -1 when out of memory,
 * or SEER_SAMPLE_NONFINITE when the logits hold NaN or +infinity or are all -infinity. */
#define SEER_SAMPLE_NONFINITE (-2)
int seer_sample(float *logits, int vocab, const int32_t *history, int n_history, const seer_sampler_opts_t *o,
                seer_rng_t *rng);

/* package.preload["seer.core.model"] (engine/model/lua_model.c). */
typedef struct lua_State lua_State;
int seer_model_luaopen(lua_State *L);

#endif
