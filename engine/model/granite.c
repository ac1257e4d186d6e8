/* IBM Granite (3.x dense): the Llama decoder with four multipliers from config.json, as
 * transformers' modeling_granite: embeddings x embedding_multiplier, each attention and MLP
 * output x residual_multiplier before the residual add, attention scores x
 * attention_multiplier (instead of head_dim^-0.5), logits / logits_scaling. */
#include <float.h>
#include <math.h>

#include <cJSON.h>

#include "llama_family.h"

/* A multiplier field (transformers' default 1.0): a finite positive number. */
static int multiplier(seer_model_t *m, const char *key, float *out, seer_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->config_json, key);
    *out = 1.0f;
    if (!v || cJSON_IsNull(v)) return 0;
    /* a normal float: past FLT_MAX it became infinite (NaN logits), and a value too small for a
     * float became 0, which the decoder reads as "not set" (a multiplier of 1) */
    if (!cJSON_IsNumber(v))
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"%s\" must be a positive number", m->dir, key);
    if (!(v->valuedouble >= FLT_MIN && v->valuedouble <= FLT_MAX))
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"%s\" must be a positive number from %g to %g (a float), got %g",
                            m->dir, key, (double)FLT_MIN, (double)FLT_MAX, v->valuedouble);
    *out = (float)v->valuedouble;
    return 0;
}

static int granite_bind(seer_model_t *m, seer_err_t *err) {
    seer_decoder_opts_t o = {.qkv_bias = m->cfg.attention_bias, .o_bias = m->cfg.attention_bias,
                             .mlp_bias = m->cfg.mlp_bias};
    int rc;
    if ((rc = multiplier(m, "embedding_multiplier", &o.embed_mult, err)) < 0 ||
        (rc = multiplier(m, "residual_multiplier", &o.resid_mult, err)) < 0 ||
        (rc = multiplier(m, "attention_multiplier", &o.attn_mult, err)) < 0 ||
        (rc = multiplier(m, "logits_scaling", &o.logits_scale, err)) < 0)
        return rc;
    return seer_decoder_bind(m, &o, err);
}

const seer_arch_t seer_arch_granite = {"granite", granite_bind, seer_decoder_forward, NULL, seer_decoder_final_scale,
                                       seer_decoder_describe};
