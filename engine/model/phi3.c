/* Phi-3 / Phi-4-mini: the Llama decoder with fused qkv_proj and gate_up_proj weights (bound as
 * row views, no copy), partial rotary embeddings (partial_rotary_factor), LongRoPE
 * (short_factor / long_factor, switched per forward pass at original_max_position_embeddings,
 * cos and sin x attention_factor) and a sliding window on every layer when sliding_window is
 * set, as transformers' modeling_phi3. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cJSON.h>

#include "llama_family.h"

static const cJSON *jget(const cJSON *o, const char *k) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A JSON value as short text for a message (a static buffer: one per message). */
static const char *json_text(const cJSON *v) {
    static _Thread_local char buf[48];
    if (cJSON_IsNumber(v)) snprintf(buf, sizeof buf, "%g", v->valuedouble);
    else
        snprintf(buf, sizeof buf, "%s",
                 cJSON_IsString(v) ? "a string" : cJSON_IsNull(v) ? "null" : cJSON_IsBool(v) ? "a boolean"
                                                                  : cJSON_IsArray(v) ? "a list" : "an object");
    return buf;
}

/* A number from the rope object, else from the top level of config.json, else dflt. */
static int rope_num(seer_model_t *m, const cJSON *rope, const char *key, double dflt, double *out, seer_err_t *err) {
    const cJSON *v = jget(rope, key);
    if (!v) v = jget(m->config_json, key);
    *out = dflt;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"%s\" must be a number", m->dir, key);
    *out = v->valuedouble;
    return 0;
}

static int factors(seer_model_t *m, const cJSON *rope, const char *key, int n, float **out, seer_err_t *err) {
    const cJSON *a = jget(rope, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: longrope \"%s\" must be a list of %d numbers (rotary dims / 2)",
                            m->dir, key, n);
    *out = malloc((size_t)n * sizeof(float));
    if (!*out) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        /* a normal float: past FLT_MAX a factor became infinite, under FLT_MIN 0 or a denormal, and
         * the inverse frequencies 1 / (factor x base^(2i/dim)) 0 or infinite */
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= FLT_MIN && e->valuedouble <= FLT_MAX))
            return seer_err_set(err, SEER_EPARSE,
                                "%s/config.json: longrope \"%s\"[%d] must be a positive number from %g to %g (a float), "
                                "got %s",
                                m->dir, key, i, (double)FLT_MIN, (double)FLT_MAX, json_text(e));
        (*out)[i++] = (float)e->valuedouble;
    }
    return 0;
}

static int phi3_bind(seer_model_t *m, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    const cJSON *rope = jget(m->config_json, "rope_parameters");
    if (!rope || !jget(rope, "rope_type")) rope = jget(m->config_json, "rope_scaling");
    float *sf = NULL, *lf = NULL;
    int *window = calloc((size_t)c->num_layers, sizeof *window);
    int rc = window ? 0 : seer_err_set(err, SEER_ENOMEM, "out of memory");
    double prf = 1.0, orig = 4096, factor = 0, att = 0;
    if (rc == 0) rc = rope_num(m, rope, "partial_rotary_factor", 1.0, &prf, err);
    seer_decoder_opts_t o = {.phi3 = 1, .window = window};
    if (rc == 0) {
        /* checked before the product becomes an int (1e300 x head_dim as an int is undefined) */
        if (!(prf > 0.0 && prf <= 1.0))
            rc = seer_err_set(err, SEER_EPARSE, "%s/config.json: \"partial_rotary_factor\" must be in (0, 1], got %g", m->dir,
                              prf);
        else if ((o.rot_dim = (int)(c->head_dim * prf)) < 2)
            rc = seer_err_set(err, SEER_EPARSE,
                              "%s/config.json: \"partial_rotary_factor\" must be in (0, 1] and leave at least 2 rotary "
                              "dims: %g x head_dim %d gives %d",
                              m->dir, prf, c->head_dim, o.rot_dim);
    }
    if (rc == 0 && c->sliding_window > 0)
        for (int i = 0; i < c->num_layers; i++) window[i] = c->sliding_window;
    if (rc == 0 && c->rope_kind == SEER_ROPE_LONGROPE) {
        int nh = o.rot_dim / 2;
        if ((rc = rope_num(m, rope, "original_max_position_embeddings", 4096, &orig, err)) < 0 ||
            (rc = rope_num(m, rope, "factor", 0, &factor, err)) < 0 ||
            (rc = rope_num(m, rope, "attention_factor", 0, &att, err)) < 0 ||
            (rc = factors(m, rope, "short_factor", nh, &sf, err)) < 0 || (rc = factors(m, rope, "long_factor", nh, &lf, err)) < 0)
            goto out;
        /* an int below (the switch point), and the log's base in the attention factor */
        if (!(orig >= 2 && orig <= (double)(1 << 24) && orig == floor(orig))) {
            rc = seer_err_set(err, SEER_EPARSE,
                              "%s/config.json: longrope \"original_max_position_embeddings\" must be a whole number "
                              "from 2 to 16777216, got %g",
                              m->dir, orig);
            goto out;
        }
        if (jget(rope, "factor") && !(factor > 0 && isfinite(factor))) {
            rc = seer_err_set(err, SEER_EPARSE, "%s/config.json: longrope \"factor\" must be a positive number, got %g", m->dir,
                              factor);
            goto out;
        }
        if (jget(rope, "attention_factor") && !(att > 0 && isfinite(att) && att <= 3.4e38)) {
            rc = seer_err_set(err, SEER_EPARSE,
                              "%s/config.json: longrope \"attention_factor\" must be a positive finite number, got %g",
                              m->dir, att);
            goto out;
        }
        if (!jget(rope, "factor")) factor = (double)c->max_position_embeddings / orig;
        if (!jget(rope, "attention_factor"))
            att = factor <= 1.0 ? 1.0 : sqrt(1 + log(factor) / log(orig));
        o.longrope_short = sf, o.longrope_long = lf, o.longrope_orig = (int)orig, o.longrope_att = (float)att;
    }
    if (rc == 0) rc = seer_decoder_bind(m, &o, err);
out:
    free(sf);
    free(lf);
    free(window);
    return rc;
}

const seer_arch_t seer_arch_phi3 = {"phi3", phi3_bind, seer_decoder_forward, NULL, NULL, seer_decoder_describe};
