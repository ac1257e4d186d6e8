/* Qwen3 (dense): the Llama decoder with a per-head RMSNorm on q and k (q_norm/k_norm, weights
 * [head_dim]) before the rotary embedding, attention biases on all four projections when
 * "attention_bias" is true, and Qwen2's sliding-window rule. */
#include <stdlib.h>

#include "llama_family.h"

static int qwen3_bind(seer_model_t *m, seer_err_t *err) {
    int *window = calloc((size_t)m->cfg.num_layers, sizeof *window);
    if (!window) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int rc = seer_decoder_qwen_windows(m, window, err);
    if (rc == 0) {
        seer_decoder_opts_t o = {.qkv_bias = m->cfg.attention_bias, .o_bias = m->cfg.attention_bias, .qk_norm = 1,
                                 .window = window};
        rc = seer_decoder_bind(m, &o, err);
    }
    free(window);
    return rc;
}

const seer_arch_t seer_arch_qwen3 = {"qwen3", qwen3_bind, seer_decoder_forward, NULL, NULL, seer_decoder_describe};
