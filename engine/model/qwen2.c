/* Qwen2 / Qwen2.5: the Llama decoder with biases on q_proj, k_proj and v_proj (none on
 * o_proj), and sliding-window attention only when "use_sliding_window" is true (per layer:
 * "layer_types", else the layers from "max_window_layers" on). */
#include <stdlib.h>

#include "llama_family.h"

static int qwen2_bind(seer_model_t *m, seer_err_t *err) {
    int *window = calloc((size_t)m->cfg.num_layers, sizeof *window);
    if (!window) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int rc = seer_decoder_qwen_windows(m, window, err);
    if (rc == 0) {
        seer_decoder_opts_t o = {.qkv_bias = 1, .o_bias = 0, .window = window};
        rc = seer_decoder_bind(m, &o, err);
    }
    free(window);
    return rc;
}

const seer_arch_t seer_arch_qwen2 = {"qwen2", qwen2_bind, seer_decoder_forward, NULL, NULL, seer_decoder_describe};
