/* The Gemma family (gemma.c, gemma2.c, gemma3.c) shares one forward pass: embeddings scaled
 * by sqrt(hidden_size) (rounded to the weight dtype, as transformers does), (1 + w) RMSNorm,
 * rotary embeddings (rotate_half), grouped-query attention, a GeGLU MLP. Gemma 2 adds
 * sandwich norms (post-attention, pre- and post-feedforward), query_pre_attn_scalar, attention
 * and final logit soft-capping and sliding-window layers; Gemma 3 adds q/k norms and a RoPE
 * base per layer type. */
#ifndef SEER_MODEL_GEMMA_COMMON_H
#define SEER_MODEL_GEMMA_COMMON_H

#include "model_private.h"

/* version: 1 (gemma), 2 (gemma2), 3 (gemma3_text). */
int seer_gemma_bind(seer_model_t *m, int version, seer_err_t *err);
int seer_gemma_forward(seer_model_t *m, const seer_fwd_batch_t *fb, seer_err_t *err);
/* The (1 + w) final norm and the final logit soft-cap (Gemma 2), for seer_arch_t. */
void seer_gemma_final_norm(seer_model_t *m, float *y, const float *x, int rows);
void seer_gemma_final_softcap(seer_model_t *m, float *logits, int rows);
/* The Gemma decoder as the CUDA backend's generic description (engine/cuda/gpu_model.h). */
int seer_gemma_describe(seer_model_t *m, struct seer_gpu_desc *d, seer_err_t *err);
/* The bound weight of a layer's linear module by its Hugging Face name (q_proj, k_proj,
 * v_proj, o_proj, gate_proj, up_proj, down_proj), for LoRA adapters (lora.c); NULL when the
 * layer or the name does not exist. */
seer_weight_t *seer_gemma_layer_weight(seer_model_t *m, int layer, const char *module);

#endif
