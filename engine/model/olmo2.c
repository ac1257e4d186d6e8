/* OLMo 2: the Llama decoder with RMSNorm over the whole q and k projections (q_norm/k_norm,
 * weights [heads * head_dim]) before RoPE, and norms after each block rather than before it
 * (post_attention_layernorm on the attention output, post_feedforward_layernorm on the MLP
 * output, each then added to the residual), as transformers' modeling_olmo2. */
#include "llama_family.h"

static int olmo2_bind(seer_model_t *m, seer_err_t *err) {
    seer_decoder_opts_t o = {.qkv_bias = m->cfg.attention_bias, .o_bias = m->cfg.attention_bias, .olmo2 = 1};
    return seer_decoder_bind(m, &o, err);
}

const seer_arch_t seer_arch_olmo2 = {"olmo2", olmo2_bind, seer_decoder_forward, NULL, NULL, seer_decoder_describe};
