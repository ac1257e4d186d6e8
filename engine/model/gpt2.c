/* The GPT-2 architecture (transformers' GPT2LMHeadModel): token + learned position embeddings
 * (wte + wpe), pre-LayerNorm blocks with bias, fused q/k/v (c_attn), GELU MLP (gelu_new by
 * default), a final LayerNorm and a head tied to wte (or lm_head.weight when stored).
 * Conv1D weights are stored [in][out]; they stay mapped and are read by a transposed linear
 * kernel (gpt_common.c). Checkpoints name tensors with or without the "transformer." prefix. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_common.h"

typedef struct {
    seer_weight_t ln1_w, ln1_b, attn_w, attn_b, aproj_w, aproj_b;
    seer_weight_t ln2_w, ln2_b, fc_w, fc_b, mproj_w, mproj_b;
} gpt2_layer;

typedef struct {
    gpt2_layer *layers;
    seer_weight_t wpe, lnf_b;
    seer_act_t act;
    int scale_attn_weights, scale_by_layer;
} gpt2_state;

static void gpt2_free(void *p) {
    gpt2_state *s = p;
    if (!s) return;
    free(s->layers);
    free(s);
}

static int gpt2_bind(seer_model_t *m, seer_err_t *err) {
    m->hook_mask |= SEER_HP_BIT(SEER_HP_POS_EMBED);
    const seer_model_config_t *c = &m->cfg;
    int64_t D = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, P = c->max_position_embeddings;
    if (c->num_kv_heads != c->num_heads || (int64_t)c->num_heads * c->head_dim != D)
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: gpt2 needs n_embd (%lld) = n_head (%d) x head_dim (%d)",
                            m->dir, (long long)D, c->num_heads, c->head_dim);
    gpt2_state *s = calloc(1, sizeof *s);
    if (!s) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    m->arch_state = s;
    m->arch_free = gpt2_free;
    s->layers = calloc((size_t)c->num_layers, sizeof *s->layers);
    if (!s->layers) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int rc;
    int reorder = 0;
    if ((rc = seer_gpt_activation(m, "activation_function", "gelu_new", &s->act, err)) < 0 ||
        (rc = seer_gpt_bool(m, "scale_attn_weights", 1, &s->scale_attn_weights, err)) < 0 ||
        (rc = seer_gpt_bool(m, "scale_attn_by_inverse_layer_idx", 0, &s->scale_by_layer, err)) < 0 ||
        (rc = seer_gpt_bool(m, "reorder_and_upcast_attn", 0, &reorder, err)) < 0) /* same math in f32 */
        return rc;
    int tie = 1;
    if ((rc = seer_gpt_bool(m, "tie_word_embeddings", 1, &tie, err)) < 0) return rc;

    /* The Hub's original checkpoints have no "transformer." prefix; transformers writes one. */
    const char *pre = "transformer.";
    {
        seer_weight_t probe;
        char *none = NULL;
        if ((rc = seer_model_weight(m, &probe, "transformer.wte.weight", V, D, 1, &none, err)) < 0) return rc;
        if (!probe.data) {
            if ((rc = seer_model_weight(m, &probe, "wte.weight", V, D, 1, &none, err)) < 0) return rc;
            if (probe.data) pre = "";
        }
    }
    char *missing = NULL;
    char name[256];
#define W(dst, rows, cols, opt, fmt, ...) SEER_BIND_WEIGHT(dst, rows, cols, opt, "%s" fmt, pre, __VA_ARGS__)
    W(&m->embed, V, D, 0, "wte.weight%s", "");
    W(&s->wpe, P, D, 0, "wpe.weight%s", "");
    seer_model_lookup_table(m, &s->wpe); /* one row per token */
    W(&m->final_norm, D, 0, 0, "ln_f.weight%s", "");
    W(&s->lnf_b, D, 0, 0, "ln_f.bias%s", "");
    for (int i = 0; i < c->num_layers; i++) {
        gpt2_layer *l = &s->layers[i];
        W(&l->ln1_w, D, 0, 0, "h.%d.ln_1.weight", i);
        W(&l->ln1_b, D, 0, 0, "h.%d.ln_1.bias", i);
        W(&l->attn_w, D, 3 * D, 0, "h.%d.attn.c_attn.weight", i);
        W(&l->attn_b, 3 * D, 0, 0, "h.%d.attn.c_attn.bias", i);
        W(&l->aproj_w, D, D, 0, "h.%d.attn.c_proj.weight", i);
        W(&l->aproj_b, D, 0, 0, "h.%d.attn.c_proj.bias", i);
        W(&l->ln2_w, D, 0, 0, "h.%d.ln_2.weight", i);
        W(&l->ln2_b, D, 0, 0, "h.%d.ln_2.bias", i);
        W(&l->fc_w, D, I, 0, "h.%d.mlp.c_fc.weight", i);
        W(&l->fc_b, I, 0, 0, "h.%d.mlp.c_fc.bias", i);
        W(&l->mproj_w, I, D, 0, "h.%d.mlp.c_proj.weight", i);
        W(&l->mproj_b, D, 0, 0, "h.%d.mlp.c_proj.bias", i);
    }
#undef W
    /* lm_head.weight never has the prefix; transformers leaves it out when tied. */
    if ((rc = seer_model_weight(m, &m->lm_head, "lm_head.weight", V, D, tie, &missing, err)) < 0) goto out;
    if (!m->lm_head.data) m->lm_head = m->embed;
    if (missing)
        rc = seer_err_set(err, SEER_EPARSE, "%s: the checkpoint lacks tensors that config.json requires: %s", m->dir,
                          missing);
out:
    free(missing);
    return rc;
}

static int gpt2_forward(seer_model_t *m, const seer_fwd_batch_t *fb, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    const gpt2_state *s = m->arch_state;
    int D = c->hidden_size, I = c->intermediate_size, H = c->num_heads, hd = c->head_dim;
    int n = fb->N, rc = 0;
    for (int b = 0; b < fb->ns; b++)
        if (fb->start[b] + fb->seq[b].n > c->max_position_embeddings)
            return seer_err_set(err, SEER_EINVAL,
                                "forward: positions up to %d exceed gpt2's learned position table (n_positions / "
                                "max_position_embeddings = %d)",
                                fb->start[b] + fb->seq[b].n - 1, c->max_position_embeddings);
    int nthreads = seer_pool_threads(m->pool);
    size_t nf = (size_t)n;
    float *buf = malloc(sizeof(float) * (nf * (size_t)(9 * D + I) + (size_t)nthreads * (size_t)fb->max_len));
    if (!buf) return seer_err_set(err, SEER_ENOMEM, "forward: out of memory for %d tokens", n);
    seer_attn_params_t ap1, *aps = seer_fb_attn_params(fb, &ap1);
    if (!aps) {
        free(buf);
        return seer_err_set(err, SEER_ENOMEM, "forward: out of memory for a batch of %d", fb->ns);
    }
    float *x = buf, *xb = x + nf * D, *qkv = xb + nf * D, *q = qkv + nf * 3 * D, *kb = q + nf * D, *vb = kb + nf * D;
    float *h = vb + nf * D, *pe = h + nf * I;
    float *scratch = pe + nf * D;
    float *att = qkv; /* the fused q/k/v rows are consumed (copied out) before attention writes */

    for (int b = 0; b < fb->ns; b++)
        for (int t = 0; t < fb->seq[b].n; t++) {
            size_t r = (size_t)(fb->off[b] + t);
            seer_k_embed_row(x + r * D, &m->embed, fb->seq[b].tokens[t]);
            seer_k_embed_row(pe + r * D, &s->wpe, fb->start[b] + t);
        }
    SEER_HOOK_ROWS(SEER_HP_EMBED, -1, x, D);
    SEER_HOOK_ROWS(SEER_HP_POS_EMBED, -1, pe, D);
    for (size_t i = 0; i < nf * D; i++) x[i] += pe[i];
    seer_fb_hidden(fb, 0, x, D);
    int l0 = seer_fb_begin(fb, x, D); /* start_at_layer: the given residual, from block l0 */

    for (int l = l0; l < c->num_layers; l++) {
        const gpt2_layer *L = &s->layers[l];
        SEER_HOOK_ROWS(SEER_HP_RESID_PRE, l, x, D);
        seer_gpt_layernorm(xb, x, n, D, &L->ln1_w, &L->ln1_b, c->rms_norm_eps);
        SEER_HOOK_ROWS(SEER_HP_LN1, l, xb, D);
        seer_gpt_linear_t(m->pool, qkv, xb, n, &L->attn_w, &L->attn_b);
        for (int t = 0; t < n; t++) {
            const float *r = qkv + (size_t)t * 3 * D;
            memcpy(q + (size_t)t * D, r, (size_t)D * sizeof(float));
            memcpy(kb + (size_t)t * D, r + D, (size_t)D * sizeof(float));
            memcpy(vb + (size_t)t * D, r + 2 * D, (size_t)D * sizeof(float));
        }
        SEER_HOOK_HEADS(SEER_HP_Q, l, q, H, hd);
        SEER_HOOK_HEADS(SEER_HP_K, l, kb, H, hd);
        SEER_HOOK_HEADS(SEER_HP_V, l, vb, H, hd);
        float scale = s->scale_attn_weights ? 1.0f / sqrtf((float)hd) : 1.0f;
        if (s->scale_by_layer) scale /= (float)(l + 1);
        for (int b = 0; b < fb->ns; b++) {
            seer_kv_cache_t *kv = fb->seq[b].cache;
            int r0 = fb->off[b], bn = fb->seq[b].n, bp = fb->start[b];
            seer_kv_put(kv, l, bp, bn, kb + (size_t)r0 * D, vb + (size_t)r0 * D);
            aps[b] = (seer_attn_params_t){.q = q + (size_t)r0 * D, .out = att + (size_t)r0 * D,
                                     .scratch = scratch, .n = bn, .start = bp, .H = H,
                                     .KH = H, .hd = hd, .scale = scale};
            seer_kv_attn(kv, l, &aps[b]);
        }
        if ((rc = seer_fb_attention(m, fb, l, aps, err)) < 0) goto out;
        SEER_HOOK_HEADS(SEER_HP_Z, l, att, H, hd);
        seer_gpt_linear_t(m->pool, xb, att, n, &L->aproj_w, &L->aproj_b);
        SEER_HOOK_ROWS(SEER_HP_ATTN_OUT, l, xb, D);
        seer_k_add_pool(m->pool, x, xb, nf * D, 0.f);
        SEER_HOOK_ROWS(SEER_HP_RESID_MID, l, x, D);

        seer_gpt_layernorm(xb, x, n, D, &L->ln2_w, &L->ln2_b, c->rms_norm_eps);
        SEER_HOOK_ROWS(SEER_HP_LN2, l, xb, D);
        seer_gpt_linear_t(m->pool, h, xb, n, &L->fc_w, &L->fc_b);
        SEER_HOOK_ROWS(SEER_HP_MLP_PRE, l, h, I);
        seer_gpt_act(h, nf * I, s->act);
        SEER_HOOK_ROWS(SEER_HP_MLP_POST, l, h, I);
        seer_gpt_linear_t(m->pool, xb, h, n, &L->mproj_w, &L->mproj_b);
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

static void gpt2_final_norm(seer_model_t *m, float *y, const float *x, int rows) {
    const gpt2_state *s = m->arch_state;
    seer_gpt_layernorm(y, x, rows, m->cfg.hidden_size, &m->final_norm, &s->lnf_b, m->cfg.rms_norm_eps);
}

const seer_arch_t seer_arch_gpt2 = {"gpt2", gpt2_bind, gpt2_forward, gpt2_final_norm, NULL, NULL};
