/* The Llama-family decoder shared by llama.c, mistral.c, qwen2.c and qwen3.c: pre-norm
 * RMSNorm blocks, rotary attention (GQA) and a SwiGLU MLP. The architectures differ only in the
 * options below, which their bind functions pass to seer_decoder_bind. Private to
 * engine/model. */
#ifndef SEER_LLAMA_FAMILY_H
#define SEER_LLAMA_FAMILY_H

#include "model_private.h"

typedef struct seer_decoder_opts {
    int qkv_bias; /* q_proj/k_proj/v_proj have biases */
    int o_bias;   /* o_proj has a bias */
    int mlp_bias; /* gate_proj/up_proj/down_proj have biases (Llama's "mlp_bias") */
    /* Granite's multipliers (0: not set, the Llama behaviour): embeddings x embed_mult, every
     * block's attention and MLP output x resid_mult before it is added to the residual,
     * attention scores x attn_mult instead of head_dim^-0.5, logits / logits_scale. */
    float embed_mult, resid_mult, attn_mult, logits_scale;
    int qk_norm;  /* Qwen3: RMSNorm over each head of q and k (weights [head_dim]) before RoPE */
    /* OLMo 2: q_norm/k_norm over the whole q and k projections (weights [heads * head_dim]),
     * and norms after each block instead of before it (post_attention_layernorm on the
     * attention output, post_feedforward_layernorm on the MLP output, then the residual add;
     * no input_layernorm) */
    int olmo2;
    /* Phi-3: fused qkv_proj ([q; k; v] rows) and gate_up_proj ([gate; up] rows), bound as views;
     * RoPE on the first rot_dim dims of each head (0: all); longrope frequencies (short_factor
     * while the forward pass stays within longrope_orig positions, long_factor past them; cos
     * and sin x longrope_att) when longrope_short is set ([rot_dim / 2] each, copied by bind) */
    int phi3, rot_dim;
    const float *longrope_short, *longrope_long;
    int longrope_orig;
    float longrope_att;
    /* Per-layer sliding window (num_layers entries; 0: full causal attention), or NULL for full
     * attention everywhere. A query at position p sees keys k with p - k < window, as
     * transformers' sliding_window_overlay (kv_idx > q_idx - sliding_window). */
    const int *window;
} seer_decoder_opts_t;

/* Binds the weights named model.embed_tokens, model.layers.N.{input_layernorm, self_attn.
 * {q,k,v,o}_proj[, q_norm, k_norm], post_attention_layernorm, mlp.{gate,up,down}_proj},
 * model.norm and lm_head (tied when config.json says so), reporting all missing tensors at
 * once; keeps the options in m->arch_state. */
int seer_decoder_bind(seer_model_t *m, const seer_decoder_opts_t *o, seer_err_t *err);
int seer_decoder_forward(seer_model_t *m, const seer_fwd_batch_t *fb, seer_err_t *err);

/* logits / o.logits_scale when set (seer_arch_t.final_softcap of granite). */
void seer_decoder_final_scale(seer_model_t *m, float *logits, int rows);

/* The decoder as the CUDA backend's generic description (engine/cuda/gpu_model.h). */
int seer_decoder_describe(seer_model_t *m, struct seer_gpu_desc *d, seer_err_t *err);

/* config.json's "layer_types" ("sliding_attention" / "full_attention"...) into window[]:
 * sliding layers get `sliding_window`, the rest 0. Returns 1 when the field is present, 0 when
 * it is absent, < 0 on a malformed list. */
int seer_decoder_layer_types(seer_model_t *m, int *window, int sliding_window, seer_err_t *err);

/* Qwen2/Qwen3 windows: none unless "use_sliding_window" is true; then "layer_types" when given,
 * else sliding_window on layers >= "max_window_layers" (default 28), as their configs derive it. */
int seer_decoder_qwen_windows(seer_model_t *m, int *window, seer_err_t *err);

#endif
