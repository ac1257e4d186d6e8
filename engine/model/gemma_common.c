/* The Gemma family's shared binding and forward pass (see gemma_common.h). Numerics follow
 * transformers' eager fp32 path: (1 + w) RMSNorm in f32, inverse frequencies and angles in f32,
 * scores scaled then soft-capped (tanh(s / cap) * cap) before the mask, softmax in f32, GeGLU
 * with the tanh GELU, final logits soft-capped after the head. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemma_common.h"
#include "cuda/gpu_model.h"

enum { ACT_GELU_TANH, ACT_GELU_ERF };
enum { ROPE_FULL, ROPE_SLIDING };

typedef struct {
    seer_weight_t attn_norm, q, k, v, o, q_bias, k_bias, v_bias, o_bias;
    seer_weight_t post_attn_norm, pre_ff_norm, post_ff_norm, q_norm, k_norm;
    seer_weight_t gate, up, down;
    int window; /* 0: full attention, else keys with pos - key < window */
    int rope;   /* ROPE_FULL or ROPE_SLIDING: which inverse-frequency table */
} gemma_layer_t;

typedef struct {
    int version;
    gemma_layer_t *layers;
    float embed_scale, attn_scale, attn_softcap, final_softcap; /* softcap 0: none */
    int act;
    float *inv_freq[2]; /* [head_dim / 2] each */
} gemma_state_t;

static void gemma_state_free(void *p) {
    gemma_state_t *s = p;
    if (!s) return;
    free(s->layers);
    free(s->inv_freq[0]);
    free(s->inv_freq[1]);
    free(s);
}

/* ---- config -------------------------------------------------------------------------------- */

static const cJSON *jget(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A number field: *out keeps its default when absent or null. */
static int jnum(const seer_model_t *m, const cJSON *o, const char *key, float *out, seer_err_t *err) {
    const cJSON *v = jget(o, key);
    if (!v) return 0;
    /* past FLT_MAX the conversion to float is undefined (infinite here: a soft-cap of infinity
     * gave NaN logits, a linear RoPE factor frequencies of 0), as config.c's get_float */
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || fabs(v->valuedouble) > FLT_MAX)
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"%s\" must be a finite number (a float: at most %g in "
                            "magnitude)", m->dir, key, (double)FLT_MAX);
    *out = (float)v->valuedouble;
    return 0;
}

static int jnum_d(const seer_model_t *m, const cJSON *o, const char *key, double *out, seer_err_t *err) {
    const cJSON *v = jget(o, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"%s\" must be a finite number", m->dir, key);
    *out = v->valuedouble;
    return 0;
}

static int jint(const seer_model_t *m, const cJSON *o, const char *key, int *out, int min, seer_err_t *err) {
    const cJSON *v = jget(o, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < min || v->valuedouble > 1e9)
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"%s\" must be an integer >= %d", m->dir, key, min);
    *out = (int)v->valuedouble;
    return 0;
}

static int parse_act(const seer_model_t *m, const char *key, const char *dflt, int version, int *act, seer_err_t *err) {
    const cJSON *v = jget(m->config_json, key);
    const char *name = dflt;
    if (v) {
        if (!cJSON_IsString(v)) return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"%s\" must be a string", m->dir, key);
        name = v->valuestring;
    }
    /* transformers' GemmaConfig maps the legacy "gelu" of the original Gemma releases to the
     * tanh approximation; Gemma 2/3 take the name as it is. */
    if (strcmp(name, "gelu_pytorch_tanh") == 0 || strcmp(name, "gelu_new") == 0 || strcmp(name, "gelu_fast") == 0 ||
        (version == 1 && strcmp(name, "gelu") == 0)) {
        *act = ACT_GELU_TANH;
    } else if (strcmp(name, "gelu") == 0) {
        *act = ACT_GELU_ERF;
    } else {
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: %s \"%s\" is not supported (supported: gelu_pytorch_tanh, gelu)",
                            m->dir, key, name);
    }
    return 0;
}

/* transformers' default/linear inverse frequencies, f32 as torch computes them. */
static void inv_freq_default(float *inv, int hd, double theta, float linear_factor) {
    for (int i = 0; i < hd / 2; i++) {
        float expo = (float)(2 * i) / (float)hd;
        inv[i] = (float)(1.0 / pow(theta, (double)expo));
        if (linear_factor > 0.f) inv[i] /= linear_factor;
    }
}

/* The same for the scaling config.c parsed (gemma, gemma2: one RoPE for every layer). */
static void inv_freq_from_cfg(const seer_model_config_t *c, float *inv) {
    int half = c->head_dim / 2;
    inv_freq_default(inv, c->head_dim, c->rope_theta, c->rope_kind == SEER_ROPE_LINEAR ? c->rope_factor : 0.f);
    if (c->rope_kind == SEER_ROPE_LLAMA3) {
        float old = (float)c->rope_original_max_position;
        float low_wl = old / c->rope_low_freq_factor, high_wl = old / c->rope_high_freq_factor;
        for (int i = 0; i < half; i++) {
            float wl = 2.0f * (float)M_PI / inv[i];
            float f = wl > low_wl ? inv[i] / c->rope_factor : inv[i];
            if (!(wl < high_wl) && !(wl > low_wl)) {
                float s = (old / wl - c->rope_low_freq_factor) / (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1.0f - s) * f / c->rope_factor + s * f;
            }
            inv[i] = f;
        }
    }
}

/* One Gemma 3 RoPE parameter object ({"rope_type", "rope_theta", "factor"}): theta and the
 * linear factor (0: none). */
static int rope_obj(const seer_model_t *m, const cJSON *o, const char *what, double *theta, float *factor,
                    seer_err_t *err) {
    if (!o) return 0;
    if (!cJSON_IsObject(o))
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: rope parameters for %s must be an object", m->dir, what);
    int rc = jnum_d(m, o, "rope_theta", theta, err);
    if (rc < 0) return rc;
    const cJSON *type = jget(o, "rope_type");
    if (!type) type = jget(o, "type");
    if (!type) return 0;
    if (!cJSON_IsString(type))
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: rope_type for %s must be a string", m->dir, what);
    if (strcmp(type->valuestring, "linear") == 0) {
        *factor = 0.f;
        if ((rc = jnum(m, o, "factor", factor, err)) < 0) return rc;
        if (!(*factor > 0.f))
            return seer_err_set(err, SEER_EPARSE, "%s/config.json: linear rope scaling for %s needs a positive \"factor\"",
                                m->dir, what);
    } else if (strcmp(type->valuestring, "default") != 0) {
        return seer_err_set(err, SEER_EPARSE,
                            "%s/config.json: rope_type \"%s\" for %s is not supported by gemma3 (supported: default, linear)",
                            m->dir, type->valuestring, what);
    }
    return 0;
}

/* Gemma 3: transformers 5 writes rope_parameters = {"full_attention": {...},
 * "sliding_attention": {...}}; transformers 4 wrote rope_theta (global), rope_local_base_freq
 * and rope_scaling (applied to the global layers). config.c's rope_theta is not used. */
static int gemma3_rope(seer_model_t *m, gemma_state_t *s, seer_err_t *err) {
    const cJSON *j = m->config_json;
    double theta[2] = {1000000.0, 10000.0};
    float factor[2] = {0.f, 0.f};
    int rc;
    const cJSON *rp = jget(j, "rope_parameters");
    const cJSON *full = rp ? jget(rp, "full_attention") : NULL, *slide = rp ? jget(rp, "sliding_attention") : NULL;
    if (full || slide) {
        if ((rc = rope_obj(m, full, "full_attention", &theta[ROPE_FULL], &factor[ROPE_FULL], err)) < 0 ||
            (rc = rope_obj(m, slide, "sliding_attention", &theta[ROPE_SLIDING], &factor[ROPE_SLIDING], err)) < 0)
            return rc;
    } else {
        if ((rc = jnum_d(m, j, "rope_theta", &theta[ROPE_FULL], err)) < 0 ||
            (rc = jnum_d(m, j, "rope_local_base_freq", &theta[ROPE_SLIDING], err)) < 0)
            return rc;
        if (rp && (rc = rope_obj(m, rp, "full_attention", &theta[ROPE_FULL], &factor[ROPE_FULL], err)) < 0) return rc;
        if ((rc = rope_obj(m, jget(j, "rope_scaling"), "full_attention", &theta[ROPE_FULL], &factor[ROPE_FULL], err)) < 0)
            return rc;
    }
    for (int t = 0; t < 2; t++) {
        if (!(theta[t] > 0.0))
            return seer_err_set(err, SEER_EPARSE, "%s/config.json: rope_theta must be positive", m->dir);
        inv_freq_default(s->inv_freq[t], m->cfg.head_dim, theta[t], factor[t]);
        /* a tiny theta or linear factor gives infinite frequencies (NaN angles, NaN logits) */
        if ((rc = seer_rope_check(s->inv_freq[t], m->cfg.head_dim / 2, m->dir, err)) < 0) return rc;
    }
    return 0;
}

/* Which layers use the sliding window: "layer_types", else transformers' default pattern. */
static int layer_types(seer_model_t *m, gemma_state_t *s, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    int window = 4096, rc;
    if ((rc = jint(m, m->config_json, "sliding_window", &window, 1, err)) < 0) return rc;
    if (!jget(m->config_json, "sliding_window")) {
        const cJSON *sw = cJSON_GetObjectItemCaseSensitive(m->config_json, "sliding_window");
        if (sw && cJSON_IsNull(sw)) window = 0; /* explicitly none */
    }
    const cJSON *lt = jget(m->config_json, "layer_types");
    if (lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->num_layers)
            return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"layer_types\" must list %d layer types", m->dir,
                                c->num_layers);
        for (int i = 0; i < c->num_layers; i++) {
            const cJSON *e = cJSON_GetArrayItem(lt, i);
            if (cJSON_IsString(e) && strcmp(e->valuestring, "sliding_attention") == 0) {
                s->layers[i].window = window;
                s->layers[i].rope = ROPE_SLIDING;
            } else if (cJSON_IsString(e) && strcmp(e->valuestring, "full_attention") == 0) {
                s->layers[i].window = 0;
                s->layers[i].rope = ROPE_FULL;
            } else {
                return seer_err_set(err, SEER_EPARSE,
                                    "%s/config.json: layer_types[%d] must be \"sliding_attention\" or \"full_attention\"",
                                    m->dir, i);
            }
        }
        return 0;
    }
    int pattern = 2; /* gemma2: even layers slide */
    if (s->version == 3) {
        pattern = 6;
        if ((rc = jint(m, m->config_json, "_sliding_window_pattern", &pattern, 1, err)) < 0 ||
            (rc = jint(m, m->config_json, "sliding_window_pattern", &pattern, 1, err)) < 0)
            return rc;
    }
    for (int i = 0; i < c->num_layers; i++) {
        int sliding = (i + 1) % pattern != 0;
        s->layers[i].window = sliding ? window : 0;
        s->layers[i].rope = sliding ? ROPE_SLIDING : ROPE_FULL;
    }
    return 0;
}

/* ---- binding ------------------------------------------------------------------------------- */

int seer_gemma_bind(seer_model_t *m, int version, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    int64_t D = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, hd = c->head_dim;
    int64_t qd = (int64_t)c->num_heads * hd, kvd = (int64_t)c->num_kv_heads * hd;
    const cJSON *j = m->config_json;
    char *missing = NULL;
    char name[256];
    int rc = 0;

    gemma_state_t *s = calloc(1, sizeof *s);
    if (!s) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    m->arch_state = s;
    m->arch_free = gemma_state_free;
    s->version = version;
    s->layers = calloc((size_t)c->num_layers, sizeof *s->layers);
    s->inv_freq[0] = calloc((size_t)hd / 2 + 1, sizeof(float));
    s->inv_freq[1] = calloc((size_t)hd / 2 + 1, sizeof(float));
    if (!s->layers || !s->inv_freq[0] || !s->inv_freq[1]) return seer_err_set(err, SEER_ENOMEM, "out of memory");

    const cJSON *bidi = jget(j, "use_bidirectional_attention");
    if (bidi && cJSON_IsTrue(bidi))
        return seer_err_set(err, SEER_EPARSE,
                            "%s/config.json: use_bidirectional_attention (an encoder such as EmbeddingGemma) is not "
                            "supported; seer runs causal language models", m->dir);

    /* Scores: head_dim^-0.5 (gemma) or query_pre_attn_scalar^-0.5, a Python float rounded to f32. */
    double qpas = version == 1 ? (double)hd : 256.0;
    if (version > 1 && (rc = jnum_d(m, j, "query_pre_attn_scalar", &qpas, err)) < 0) return rc;
    if (!(qpas > 0.0)) return seer_err_set(err, SEER_EPARSE, "%s/config.json: query_pre_attn_scalar must be positive", m->dir);
    double scale = pow(qpas, -0.5);
    if (!(scale <= FLT_MAX)) /* infinite as a float */
        return seer_err_set(err, SEER_EPARSE,
                            "%s/config.json: query_pre_attn_scalar must be positive and not so small that the attention "
                            "scale 1 / sqrt(query_pre_attn_scalar) overflows a float: %g gives %g",
                            m->dir, qpas, scale);
    s->attn_scale = (float)scale;
    if (version == 2) {
        s->attn_softcap = 50.f;
        s->final_softcap = 30.f;
    }
    if (version > 1) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "attn_logit_softcapping");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "final_logit_softcapping");
        if (a && cJSON_IsNull(a)) s->attn_softcap = 0.f;
        if (f && cJSON_IsNull(f)) s->final_softcap = 0.f;
        if ((rc = jnum(m, j, "attn_logit_softcapping", &s->attn_softcap, err)) < 0 ||
            (rc = jnum(m, j, "final_logit_softcapping", &s->final_softcap, err)) < 0)
            return rc;
        if (s->attn_softcap < 0.f || s->final_softcap < 0.f)
            return seer_err_set(err, SEER_EPARSE, "%s/config.json: logit soft-capping values must be positive", m->dir);
        /* Gemma 3 configs carry attn_logit_softcapping, but transformers' Gemma3Attention never
         * passes it to the attention function, so the reference does not cap scores: neither
         * does seer (the final logit soft-cap is applied). */
        if (version == 3) s->attn_softcap = 0.f;
    }
    if (version == 1) rc = parse_act(m, "hidden_act", "gelu_pytorch_tanh", version, &s->act, err);
    else rc = parse_act(m, "hidden_activation", "gelu_pytorch_tanh", version, &s->act, err);
    if (rc < 0) return rc;

    if (version < 3 && (c->rope_kind == SEER_ROPE_YARN || c->rope_kind == SEER_ROPE_DYNAMIC || c->rope_kind == SEER_ROPE_LONGROPE))
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: yarn and dynamic RoPE are not supported for gemma "
                            "(supported: default, linear, llama3)", m->dir);
    if (version == 1) {
        for (int i = 0; i < c->num_layers; i++) s->layers[i].rope = ROPE_FULL;
    } else if ((rc = layer_types(m, s, err)) < 0) {
        return rc;
    }
    if (version == 3) {
        if ((rc = gemma3_rope(m, s, err)) < 0) return rc;
    } else {
        inv_freq_from_cfg(c, s->inv_freq[ROPE_FULL]);
        if ((rc = seer_rope_check(s->inv_freq[ROPE_FULL], hd / 2, m->dir, err)) < 0) return rc;
        memcpy(s->inv_freq[ROPE_SLIDING], s->inv_freq[ROPE_FULL], (size_t)hd / 2 * sizeof(float));
    }

    /* transformers' Gemma configs tie the head unless config.json says otherwise. */
    const cJSON *tie = jget(j, "tie_word_embeddings");
    int tied = !(tie && cJSON_IsFalse(tie));

#define W SEER_BIND_WEIGHT
    W(&m->embed, V, D, 0, "model.embed_tokens.weight");
    W(&m->final_norm, D, 0, 0, "model.norm.weight");
    if (!tied) W(&m->lm_head, V, D, 0, "lm_head.weight");
    for (int i = 0; i < c->num_layers; i++) {
        gemma_layer_t *l = &s->layers[i];
        W(&l->attn_norm, D, 0, 0, "model.layers.%d.input_layernorm.weight", i);
        W(&l->q, qd, D, 0, "model.layers.%d.self_attn.q_proj.weight", i);
        W(&l->k, kvd, D, 0, "model.layers.%d.self_attn.k_proj.weight", i);
        W(&l->v, kvd, D, 0, "model.layers.%d.self_attn.v_proj.weight", i);
        W(&l->o, D, qd, 0, "model.layers.%d.self_attn.o_proj.weight", i);
        if (c->attention_bias) {
            W(&l->q_bias, qd, 0, 0, "model.layers.%d.self_attn.q_proj.bias", i);
            W(&l->k_bias, kvd, 0, 0, "model.layers.%d.self_attn.k_proj.bias", i);
            W(&l->v_bias, kvd, 0, 0, "model.layers.%d.self_attn.v_proj.bias", i);
            W(&l->o_bias, D, 0, 0, "model.layers.%d.self_attn.o_proj.bias", i);
        }
        if (version == 3) {
            W(&l->q_norm, hd, 0, 0, "model.layers.%d.self_attn.q_norm.weight", i);
            W(&l->k_norm, hd, 0, 0, "model.layers.%d.self_attn.k_norm.weight", i);
        }
        W(&l->post_attn_norm, D, 0, 0, "model.layers.%d.post_attention_layernorm.weight", i);
        if (version > 1) {
            W(&l->pre_ff_norm, D, 0, 0, "model.layers.%d.pre_feedforward_layernorm.weight", i);
            W(&l->post_ff_norm, D, 0, 0, "model.layers.%d.post_feedforward_layernorm.weight", i);
        }
        W(&l->gate, I, D, 0, "model.layers.%d.mlp.gate_proj.weight", i);
        W(&l->up, I, D, 0, "model.layers.%d.mlp.up_proj.weight", i);
        W(&l->down, D, I, 0, "model.layers.%d.mlp.down_proj.weight", i);
    }
#undef W
    if (missing) {
        rc = seer_err_set(err, SEER_EPARSE, "%s: the checkpoint lacks tensors that config.json requires: %s", m->dir,
                          missing);
        goto out;
    }
    if (tied) m->lm_head = m->embed;

    /* sqrt(hidden_size) as a f32 tensor, then in the weight dtype (55.43 -> 55.5 in bf16). */
    s->embed_scale = (float)sqrt((double)D);
    if (m->embed.dtype == SEER_BF16) s->embed_scale = seer_bf16_to_f32(seer_f32_to_bf16(s->embed_scale));
    else if (m->embed.dtype == SEER_F16) s->embed_scale = seer_f16_to_f32(seer_f32_to_f16(s->embed_scale));
out:
    free(missing);
    return rc;
}

seer_weight_t *seer_gemma_layer_weight(seer_model_t *m, int layer, const char *module) {
    gemma_state_t *s = m->arch_state;
    if (!s || !s->layers || layer < 0 || layer >= m->cfg.num_layers) return NULL;
    gemma_layer_t *l = &s->layers[layer];
    if (strcmp(module, "q_proj") == 0) return &l->q;
    if (strcmp(module, "k_proj") == 0) return &l->k;
    if (strcmp(module, "v_proj") == 0) return &l->v;
    if (strcmp(module, "o_proj") == 0) return &l->o;
    if (strcmp(module, "gate_proj") == 0) return &l->gate;
    if (strcmp(module, "up_proj") == 0) return &l->up;
    if (strcmp(module, "down_proj") == 0) return &l->down;
    return NULL;
}

/* ---- forward ------------------------------------------------------------------------------- */

/* gate = act(gate) * up. */
static void geglu(float *gate, const float *up, size_t n, int act) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f; /* sqrt(2 / pi) */
    for (size_t i = 0; i < n; i++) {
        float x = gate[i], g;
        if (act == ACT_GELU_TANH) g = 0.5f * x * (1.0f + tanhf(k0 * (x + k1 * x * x * x)));
        else g = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
        gate[i] = g * up[i];
    }
}

int seer_gemma_forward(seer_model_t *m, const seer_fwd_batch_t *fb, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    const gemma_state_t *s = m->arch_state;
    int D = c->hidden_size, I = c->intermediate_size, H = c->num_heads, KH = c->num_kv_heads, hd = c->head_dim;
    int qd = H * hd, kvd = KH * hd, half = hd / 2;
    int n = fb->N, rc = 0;
    int nthreads = seer_pool_threads(m->pool);
    size_t nf = (size_t)n;
    float *buf = malloc(sizeof(float) * (nf * (size_t)(2 * D + 2 * qd + 2 * kvd + 2 * I) + 4 * nf * (size_t)half +
                                         (size_t)nthreads * (size_t)fb->max_len));
    if (!buf) return seer_err_set(err, SEER_ENOMEM, "forward: out of memory for %d tokens", n);
    seer_attn_params_t ap1, *aps = seer_fb_attn_params(fb, &ap1);
    if (!aps) {
        free(buf);
        return seer_err_set(err, SEER_ENOMEM, "forward: out of memory for a batch of %d", fb->ns);
    }
    float *x = buf, *xb = x + nf * D, *att = xb + nf * D, *q = att + nf * qd, *k = q + nf * qd, *v = k + nf * kvd;
    float *h1 = v + nf * kvd, *h2 = h1 + nf * I;
    float *cs[2], *sn[2];
    cs[0] = h2 + nf * I;
    sn[0] = cs[0] + nf * half;
    cs[1] = sn[0] + nf * half;
    sn[1] = cs[1] + nf * half;
    float *scratch = sn[1] + nf * half;

    for (int b = 0; b < fb->ns; b++) {
        int r0 = fb->off[b], bn = fb->seq[b].n, bp = fb->start[b];
        for (int r = 0; r < 2; r++)
            seer_k_rope_table(s->inv_freq[r], half, bp, bn, cs[r] + (size_t)r0 * half, sn[r] + (size_t)r0 * half);
        for (int t = 0; t < bn; t++) seer_k_embed_row(x + (size_t)(r0 + t) * D, &m->embed, fb->seq[b].tokens[t]);
    }
    SEER_HOOK_ROWS(SEER_HP_EMBED, -1, x, D); /* before the sqrt(d_model) scale */
    for (size_t i = 0; i < nf * D; i++) x[i] *= s->embed_scale;
    seer_fb_hidden(fb, 0, x, D);
    int l0 = seer_fb_begin(fb, x, D); /* start_at_layer: the given residual, from block l0 */

    float eps = c->rms_norm_eps;
    for (int l = l0; l < c->num_layers; l++) {
        const gemma_layer_t *L = &s->layers[l];
        SEER_HOOK_ROWS(SEER_HP_RESID_PRE, l, x, D);
        seer_k_rmsnorm_pool(m->pool, xb, x, n, D, &L->attn_norm, eps, 1);
        SEER_HOOK_ROWS(SEER_HP_LN1, l, xb, D);
        {
            float *ys[3] = {q, k, v};
            const seer_weight_t *ws[3] = {&L->q, &L->k, &L->v}, *bs[3] = {&L->q_bias, &L->k_bias, &L->v_bias};
            seer_fb_linear_multi(m->pool, fb, 3, ys, xb, ws, bs);
        }
        if (s->version == 3) {
            seer_k_rmsnorm(q, q, n * H, hd, &L->q_norm, eps, 1);
            seer_k_rmsnorm(k, k, n * KH, hd, &L->k_norm, eps, 1);
        }
        SEER_HOOK_HEADS(SEER_HP_Q, l, q, H, hd);
        SEER_HOOK_HEADS(SEER_HP_K, l, k, KH, hd);
        SEER_HOOK_HEADS(SEER_HP_V, l, v, KH, hd);
        const float *lc = cs[L->rope], *ls = sn[L->rope];
        for (int t = 0; t < n; t++) {
            seer_k_rope(q + (size_t)t * qd, H, hd, hd, lc + (size_t)t * half, ls + (size_t)t * half);
            seer_k_rope(k + (size_t)t * kvd, KH, hd, hd, lc + (size_t)t * half, ls + (size_t)t * half);
        }
        for (int b = 0; b < fb->ns; b++) {
            seer_kv_cache_t *kv = fb->seq[b].cache;
            int r0 = fb->off[b], bn = fb->seq[b].n, bp = fb->start[b];
            seer_kv_put(kv, l, bp, bn, k + (size_t)r0 * kvd, v + (size_t)r0 * kvd);
            aps[b] = (seer_attn_params_t){.q = q + (size_t)r0 * qd, .out = att + (size_t)r0 * qd,
                                     .scratch = scratch, .n = bn, .start = bp, .H = H,
                                     .KH = KH, .hd = hd, .window = L->window, .scale = s->attn_scale,
                                     .softcap = s->attn_softcap};
            seer_kv_attn(kv, l, &aps[b]);
        }
        if ((rc = seer_fb_attention(m, fb, l, aps, err)) < 0) goto out;
        SEER_HOOK_HEADS(SEER_HP_Z, l, att, H, hd);
        seer_fb_linear(m->pool, fb, xb, att, &L->o, &L->o_bias);
        if (s->version > 1) seer_k_rmsnorm_pool(m->pool, xb, xb, n, D, &L->post_attn_norm, eps, 1);
        SEER_HOOK_ROWS(SEER_HP_ATTN_OUT, l, xb, D);
        seer_k_add_pool(m->pool, x, xb, nf * D, 0.f);
        SEER_HOOK_ROWS(SEER_HP_RESID_MID, l, x, D);

        /* Gemma: post_attention_layernorm is the pre-MLP norm; Gemma 2/3: pre_feedforward. */
        seer_k_rmsnorm_pool(m->pool, xb, x, n, D, s->version > 1 ? &L->pre_ff_norm : &L->post_attn_norm, eps, 1);
        SEER_HOOK_ROWS(SEER_HP_LN2, l, xb, D);
        {
            float *ys[2] = {h1, h2};
            const seer_weight_t *ws[2] = {&L->gate, &L->up}, *bs[2] = {NULL, NULL};
            seer_fb_linear_multi(m->pool, fb, 2, ys, xb, ws, bs);
        }
        SEER_HOOK_ROWS(SEER_HP_MLP_PRE, l, h1, I);
        geglu(h1, h2, nf * I, s->act);
        SEER_HOOK_ROWS(SEER_HP_MLP_POST, l, h1, I);
        seer_fb_linear(m->pool, fb, xb, h1, &L->down, NULL);
        if (s->version > 1) seer_k_rmsnorm_pool(m->pool, xb, xb, n, D, &L->post_ff_norm, eps, 1);
        SEER_HOOK_ROWS(SEER_HP_MLP_OUT, l, xb, D);
        seer_k_add_pool(m->pool, x, xb, nf * D, 0.f);
        SEER_HOOK_ROWS(SEER_HP_RESID_POST, l, x, D);
        seer_fb_hidden(fb, l + 1, x, D);
    }
    for (int b = 0; b < fb->ns; b++) fb->seq[b].cache->len = fb->start[b] + fb->seq[b].n;
    rc = seer_fwd_finish(m, fb, x, xb, err);
out:
    seer_fb_attn_free(aps, &ap1);
    free(buf);
    return rc;
}

void seer_gemma_final_norm(seer_model_t *m, float *y, const float *x, int rows) {
    seer_k_rmsnorm(y, x, rows, m->cfg.hidden_size, &m->final_norm, m->cfg.rms_norm_eps, 1);
}

void seer_gemma_final_softcap(seer_model_t *m, float *logits, int rows) {
    const gemma_state_t *s = m->arch_state;
    if (!(s->final_softcap > 0.f)) return;
    float cap = s->final_softcap;
    for (size_t i = 0; i < (size_t)rows * (size_t)m->cfg.vocab_size; i++) logits[i] = tanhf(logits[i] / cap) * cap;
}

int seer_gemma_describe(seer_model_t *m, seer_gpu_desc_t *d, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    const gemma_state_t *s = m->arch_state;
    memset(d, 0, sizeof *d);
    d->layers = calloc((size_t)c->num_layers, sizeof *d->layers);
    if (!d->layers) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    d->norm_one_plus = 1;
    d->act = s->act == ACT_GELU_TANH ? SEER_GPU_ACT_GELU_TANH : SEER_GPU_ACT_GELU_ERF;
    d->embed_scale = s->embed_scale;
    d->attn_scale = s->attn_scale;
    d->attn_softcap = s->attn_softcap;
    d->final_softcap = s->final_softcap;
    for (int i = 0; i < c->num_layers; i++) {
        const gemma_layer_t *L = &s->layers[i];
        seer_gpu_layer_t *g = &d->layers[i];
        g->pre_attn_norm = &L->attn_norm;
        g->q = &L->q, g->k = &L->k, g->v = &L->v, g->o = &L->o;
        g->q_bias = seer_weight_or_null(&L->q_bias), g->k_bias = seer_weight_or_null(&L->k_bias), g->v_bias = seer_weight_or_null(&L->v_bias);
        g->o_bias = seer_weight_or_null(&L->o_bias);
        if (s->version == 3) g->q_norm = &L->q_norm, g->k_norm = &L->k_norm;
        if (s->version > 1) {
            g->post_attn_norm = &L->post_attn_norm;
            g->pre_mlp_norm = &L->pre_ff_norm;
            g->post_mlp_norm = &L->post_ff_norm;
        } else {
            g->pre_mlp_norm = &L->post_attn_norm;
        }
        g->gate = &L->gate, g->up = &L->up, g->down = &L->down;
        g->window = L->window;
        g->inv_freq = s->inv_freq[L->rope];
    }
    return 0;
}
