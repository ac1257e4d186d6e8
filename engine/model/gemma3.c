/* Gemma 3 (text, model_type gemma3_text): Gemma 2 plus q/k RMSNorm and a RoPE base per layer type (rope_parameters.full_attention / sliding_attention); the forward pass is in gemma_common.c. */
#include "gemma_common.h"

static int gemma3_bind(seer_model_t *m, seer_err_t *err) { return seer_gemma_bind(m, 3, err); }

const seer_arch_t seer_arch_gemma3 = {"gemma3_text", gemma3_bind, seer_gemma_forward, seer_gemma_final_norm, seer_gemma_final_softcap, seer_gemma_describe};
