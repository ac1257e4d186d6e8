/* Mistral: the Llama decoder with sliding-window attention on every layer when config.json
 * sets "sliding_window" (null: full attention), no attention biases (transformers hard-codes
 * bias=False). */
#include <stdlib.h>

#include "llama_family.h"

static int mistral_bind(seer_model_t *m, seer_err_t *err) {
    int *window = calloc((size_t)m->cfg.num_layers, sizeof *window);
    if (!window) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    for (int i = 0; i < m->cfg.num_layers; i++) window[i] = m->cfg.sliding_window > 0 ? m->cfg.sliding_window : 0;
    seer_decoder_opts_t o = {.window = window};
    int rc = seer_decoder_bind(m, &o, err);
    free(window);
    return rc;
}

const seer_arch_t seer_arch_mistral = {"mistral", mistral_bind, seer_decoder_forward, NULL, NULL, seer_decoder_describe};
