/* Gemma (1): (1 + w) RMSNorm, embeddings scaled by sqrt(hidden_size), RoPE, GQA, GeGLU; the forward pass is shared with Gemma 2/3 in gemma_common.c. */
#include "gemma_common.h"

static int gemma_bind(seer_model_t *m, seer_err_t *err) { return seer_gemma_bind(m, 1, err); }

const seer_arch_t seer_arch_gemma = {"gemma", gemma_bind, seer_gemma_forward, seer_gemma_final_norm, seer_gemma_final_softcap, seer_gemma_describe};
