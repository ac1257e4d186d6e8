/* The GPT-NeoX architecture (transformers' GPTNeoXForCausalLM: Pythia, GPT-NeoX-20B):
 * LayerNorm with bias, a fused query_key_value projection laid out per head as
 * [heads][q|k|v][head_dim], partial rotary embeddings (rotate_half over the first rotary_ndims
 * dims of each head), the parallel residual x + attn(ln1(x)) + mlp(ln2(x)) (or the sequential
 * one), exact-erf GELU and a separate unembedding (embed_out). Reads transformers 5's
 * rope_parameters {rope_theta, partial_rotary_factor} and transformers 4's rotary_pct /
 * rotary_emb_base. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_common.h"

typedef struct {
    seer_weight_t ln1_w, ln1_b, qkv_w, qkv_b, dense_w, dense_b;
    seer_weight_t ln2_w, ln2_b, up_w, up_b, down_w, down_b;
} neox_layer;

typedef struct {
    neox_layer *layers;
    seer_weight_t lnf_b;
    seer_act_t act;
    int parallel, rot; /* rot: rotary_ndims, even, <= head_dim */
    float theta, linear_factor;
} neox_state;

static void neox_free(void *p) {
    neox_state *s = p;
    if (!s) return;
    free(s->layers);
    free(s);
}

/* A number from obj[key]; 0 when absent, an error when present and not a finite number. */
static int get_num(const seer_model_t *m, const cJSON *obj, const char *key, double *out, int *found, seer_err_t *err) {
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    *found = 0;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"%s\" must be a finite number", m->dir, key);
    *out = v->valuedouble;
    *found = 1;
    return 0;
}

/* inv[rot / 2]: the rotary inverse frequencies (transformers' default or linear, in f32). */
static void neox_inv_freq(const neox_state *s, float *inv) {
    for (int i = 0; i < s->rot / 2; i++) {
        float expo = (float)(2 * i) / (float)s->rot;
        inv[i] = (float)(1.0 / pow((double)s->theta, (double)expo)) / s->linear_factor;
    }
}

static int neox_rope_config(seer_model_t *m, neox_state *s, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(m->config_json, "rope_parameters");
    if (rp && !cJSON_IsObject(rp)) rp = NULL;
    double pct = 0.25, theta = 10000.0; /* transformers' GPTNeoXConfig defaults */
    int found, rc;
    double v;
    if ((rc = get_num(m, rp, "partial_rotary_factor", &v, &found, err)) < 0) return rc;
    if (found) {
        pct = v;
    } else {
        if ((rc = get_num(m, m->config_json, "rotary_pct", &v, &found, err)) < 0) return rc;
        if (found) pct = v;
    }
    if ((rc = get_num(m, rp, "rope_theta", &v, &found, err)) < 0) return rc;
    if (found) {
        theta = v;
    } else {
        if ((rc = get_num(m, m->config_json, "rotary_emb_base", &v, &found, err)) < 0) return rc;
        if (!found && (rc = get_num(m, m->config_json, "rope_theta", &v, &found, err)) < 0) return rc;
        if (found) theta = v;
    }
    if (!(pct >= 0.0 && pct <= 1.0))
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: the partial rotary factor %g is outside [0, 1]", m->dir, pct);
    /* kept as a float: past FLT_MAX it was infinite (frequencies of 0), under FLT_MIN 0 (infinite
     * frequencies, checked below) */
    if (!(theta > 0.0 && theta <= FLT_MAX))
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: rope_theta %g must be positive and at most %g (a float)",
                            m->dir, theta, (double)FLT_MAX);
    s->rot = (int)(c->head_dim * pct); /* int(head_size * partial_rotary_factor), as transformers */
    if (s->rot % 2 != 0)
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: rotary dims %d (head_dim %d x %g) must be even", m->dir,
                            s->rot, c->head_dim, pct);
    s->theta = (float)theta;
    s->linear_factor = 1.0f;
    if (c->rope_kind == SEER_ROPE_LINEAR) s->linear_factor = c->rope_factor;
    else if (c->rope_kind != SEER_ROPE_DEFAULT)
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: gpt_neox supports the default and linear rope types only",
                            m->dir);
    /* the frequencies the forward pass computes, checked once: a theta that is 0 as a float or a
     * tiny linear factor made them infinite (NaN angles, NaN logits) */
    int half = s->rot / 2;
    float *inv = malloc(((size_t)half + 1) * sizeof *inv);
    if (!inv) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    neox_inv_freq(s, inv);
    rc = seer_rope_check(inv, half, m->dir, err);
    free(inv);
    return rc;
}

static int neox_bind(seer_model_t *m, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    int64_t D = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
    if (c->num_kv_heads != c->num_heads || (int64_t)c->num_heads * c->head_dim != D)
        return seer_err_set(err, SEER_EPARSE,
                            "%s/config.json: gpt_neox needs hidden_size (%lld) = num_attention_heads (%d) x head_dim "
                            "(%d) and no grouped key/value heads",
                            m->dir, (long long)D, c->num_heads, c->head_dim);
    neox_state *s = calloc(1, sizeof *s);
    if (!s) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    m->arch_state = s;
    m->arch_free = neox_free;
    s->layers = calloc((size_t)c->num_layers, sizeof *s->layers);
    if (!s->layers) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int rc, bias = 1, tie = 0;
    if ((rc = seer_gpt_activation(m, "hidden_act", "gelu", &s->act, err)) < 0 ||
        (rc = seer_gpt_bool(m, "use_parallel_residual", 1, &s->parallel, err)) < 0 ||
        (rc = seer_gpt_bool(m, "attention_bias", 1, &bias, err)) < 0 ||
        (rc = seer_gpt_bool(m, "tie_word_embeddings", 0, &tie, err)) < 0 || (rc = neox_rope_config(m, s, err)) < 0)
        return rc;
    if (s->parallel) m->hook_mask &= ~SEER_HP_BIT(SEER_HP_RESID_MID); /* no residual between attention and MLP */

    char *missing = NULL;
    char name[256];
#define W SEER_BIND_WEIGHT
    W(&m->embed, V, D, 0, "gpt_neox.embed_in.weight");
    W(&m->final_norm, D, 0, 0, "gpt_neox.final_layer_norm.weight");
    W(&s->lnf_b, D, 0, 0, "gpt_neox.final_layer_norm.bias");
    W(&m->lm_head, V, D, tie, "embed_out.weight");
    for (int i = 0; i < c->num_layers; i++) {
        neox_layer *l = &s->layers[i];
        W(&l->ln1_w, D, 0, 0, "gpt_neox.layers.%d.input_layernorm.weight", i);
        W(&l->ln1_b, D, 0, 0, "gpt_neox.layers.%d.input_layernorm.bias", i);
        W(&l->qkv_w, 3 * D, D, 0, "gpt_neox.layers.%d.attention.query_key_value.weight", i);
        W(&l->dense_w, D, D, 0, "gpt_neox.layers.%d.attention.dense.weight", i);
        if (bias) {
            W(&l->qkv_b, 3 * D, 0, 0, "gpt_neox.layers.%d.attention.query_key_value.bias", i);
            W(&l->dense_b, D, 0, 0, "gpt_neox.layers.%d.attention.dense.bias", i);
        }
        W(&l->ln2_w, D, 0, 0, "gpt_neox.layers.%d.post_attention_layernorm.weight", i);
        W(&l->ln2_b, D, 0, 0, "gpt_neox.layers.%d.post_attention_layernorm.bias", i);
        W(&l->up_w, I, D, 0, "gpt_neox.layers.%d.mlp.dense_h_to_4h.weight", i);
        W(&l->up_b, I, 0, 0, "gpt_neox.layers.%d.mlp.dense_h_to_4h.bias", i);
        W(&l->down_w, D, I, 0, "gpt_neox.layers.%d.mlp.dense_4h_to_h.weight", i);
        W(&l->down_b, D, 0, 0, "gpt_neox.layers.%d.mlp.dense_4h_to_h.bias", i);
    }
#undef W
    if (!m->lm_head.data) m->lm_head = m->embed; /* tied: embed_out absent */
    if (missing)
        rc = seer_err_set(err, SEER_EPARSE, "%s: the checkpoint lacks tensors that config.json requires: %s", m->dir,
                          missing);
out:
    free(missing);
    return rc;
}

static int neox_forward(seer_model_t *m, const seer_fwd_batch_t *fb, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    const neox_state *s = m->arch_state;
    int D = c->hidden_size, I = c->intermediate_size, H = c->num_heads, hd = c->head_dim;
    int half = s->rot / 2;
    int n = fb->N, rc = 0;
    int nthreads = seer_pool_threads(m->pool);
    size_t nf = (size_t)n;
    float *buf = malloc(sizeof(float) * (nf * (size_t)(10 * D + I) + (size_t)half * (1 + 2 * nf) +
                                         (size_t)nthreads * (size_t)fb->max_len));
    if (!buf) return seer_err_set(err, SEER_ENOMEM, "forward: out of memory for %d tokens", n);
    seer_attn_params_t ap1, *aps = seer_fb_attn_params(fb, &ap1);
    if (!aps) {
        free(buf);
        return seer_err_set(err, SEER_ENOMEM, "forward: out of memory for a batch of %d", fb->ns);
    }
    float *x = buf, *xb = x + nf * D, *qkv = xb + nf * D, *q = qkv + nf * 3 * D, *att = q + nf * D, *ao = att + nf * D;
    float *kb = ao + nf * D, *vb = kb + nf * D;
    float *h = vb + nf * D, *inv = h + nf * I, *cs = inv + half, *sn = cs + nf * half, *scratch = sn + nf * half;

    neox_inv_freq(s, inv);
    for (int b = 0; b < fb->ns; b++) {
        int r0 = fb->off[b];
        seer_k_rope_table(inv, half, fb->start[b], fb->seq[b].n, cs + (size_t)r0 * half, sn + (size_t)r0 * half);
        for (int t = 0; t < fb->seq[b].n; t++) seer_k_embed_row(x + (size_t)(r0 + t) * D, &m->embed, fb->seq[b].tokens[t]);
    }
    SEER_HOOK_ROWS(SEER_HP_EMBED, -1, x, D);
    seer_fb_hidden(fb, 0, x, D);
    int l0 = seer_fb_begin(fb, x, D); /* start_at_layer: the given residual, from block l0 */

    for (int l = l0; l < c->num_layers; l++) {
        const neox_layer *L = &s->layers[l];
        SEER_HOOK_ROWS(SEER_HP_RESID_PRE, l, x, D);
        seer_gpt_layernorm(xb, x, n, D, &L->ln1_w, &L->ln1_b, c->rms_norm_eps);
        SEER_HOOK_ROWS(SEER_HP_LN1, l, xb, D);
        seer_fb_linear(m->pool, fb, qkv, xb, &L->qkv_w, &L->qkv_b);
        for (int t = 0; t < n; t++) { /* [heads][q|k|v][hd] -> q, k, v as [heads][hd] */
            const float *r = qkv + (size_t)t * 3 * D;
            for (int hh = 0; hh < H; hh++) {
                const float *src = r + (size_t)hh * 3 * hd;
                size_t o = (size_t)t * D + (size_t)hh * hd;
                memcpy(q + o, src, (size_t)hd * sizeof(float));
                memcpy(kb + o, src + hd, (size_t)hd * sizeof(float));
                memcpy(vb + o, src + 2 * hd, (size_t)hd * sizeof(float));
            }
        }
        SEER_HOOK_HEADS(SEER_HP_Q, l, q, H, hd);
        SEER_HOOK_HEADS(SEER_HP_K, l, kb, H, hd);
        SEER_HOOK_HEADS(SEER_HP_V, l, vb, H, hd);
        for (int b = 0; b < fb->ns; b++) {
            seer_kv_cache_t *kv = fb->seq[b].cache;
            int r0 = fb->off[b], bn = fb->seq[b].n, bp = fb->start[b];
            if (half > 0) /* the keys rotated before they go into the cache (rounded there when it is bf16) */
                for (int t = 0; t < bn; t++) {
                    const float *tc = cs + (size_t)(r0 + t) * half, *ts = sn + (size_t)(r0 + t) * half;
                    seer_k_rope(q + (size_t)(r0 + t) * D, H, hd, s->rot, tc, ts);
                    seer_k_rope(kb + (size_t)(r0 + t) * D, H, hd, s->rot, tc, ts);
                }
            seer_kv_put(kv, l, bp, bn, kb + (size_t)r0 * D, vb + (size_t)r0 * D);
            aps[b] = (seer_attn_params_t){.q = q + (size_t)r0 * D, .out = att + (size_t)r0 * D,
                                     .scratch = scratch, .n = bn, .start = bp, .H = H,
                                     .KH = H, .hd = hd, .scale = 1.0f / sqrtf((float)hd)};
            seer_kv_attn(kv, l, &aps[b]);
        }
        if ((rc = seer_fb_attention(m, fb, l, aps, err)) < 0) goto out;
        SEER_HOOK_HEADS(SEER_HP_Z, l, att, H, hd);
        seer_fb_linear(m->pool, fb, ao, att, &L->dense_w, &L->dense_b);
        SEER_HOOK_ROWS(SEER_HP_ATTN_OUT, l, ao, D);

        if (s->parallel) {
            seer_gpt_layernorm(xb, x, n, D, &L->ln2_w, &L->ln2_b, c->rms_norm_eps);
        } else {
            for (size_t i = 0; i < nf * D; i++) x[i] = ao[i] + x[i];
            SEER_HOOK_ROWS(SEER_HP_RESID_MID, l, x, D);
            seer_gpt_layernorm(xb, x, n, D, &L->ln2_w, &L->ln2_b, c->rms_norm_eps);
        }
        SEER_HOOK_ROWS(SEER_HP_LN2, l, xb, D);
        seer_fb_linear(m->pool, fb, h, xb, &L->up_w, &L->up_b);
        SEER_HOOK_ROWS(SEER_HP_MLP_PRE, l, h, I);
        seer_gpt_act(h, nf * I, s->act);
        SEER_HOOK_ROWS(SEER_HP_MLP_POST, l, h, I);
        seer_fb_linear(m->pool, fb, xb, h, &L->down_w, &L->down_b);
        SEER_HOOK_ROWS(SEER_HP_MLP_OUT, l, xb, D);
        if (s->parallel) /* mlp_output + attn_output + hidden_states, in transformers' order */
            for (size_t i = 0; i < nf * D; i++) x[i] = (xb[i] + ao[i]) + x[i];
        else
            for (size_t i = 0; i < nf * D; i++) x[i] = xb[i] + x[i];
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

static void neox_final_norm(seer_model_t *m, float *y, const float *x, int rows) {
    const neox_state *s = m->arch_state;
    seer_gpt_layernorm(y, x, rows, m->cfg.hidden_size, &m->final_norm, &s->lnf_b, m->cfg.rms_norm_eps);
}

const seer_arch_t seer_arch_gpt_neox = {"gpt_neox", neox_bind, neox_forward, neox_final_norm, NULL, NULL};
