/* Gemma 2: Gemma plus sandwich norms, query_pre_attn_scalar, attention and final logit soft-capping and sliding-window layers (layer_types); the forward pass is in gemma_common.c. */
#include "gemma_common.h"

static int gemma2_bind(seer_model_t *m, seer_err_t *err) { return seer_gemma_bind(m, 2, err); }

const seer_arch_t seer_arch_gemma2 = {"gemma2", gemma2_bind, seer_gemma_forward, seer_gemma_final_norm, seer_gemma_final_softcap, seer_gemma_describe};
