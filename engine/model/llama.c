/* The Llama architecture (Llama 2/3, TinyLlama, SmolLM): RMSNorm, rotary embeddings in the
 * rotate_half layout with default/linear/llama3 frequency scaling, grouped-query attention,
 * SwiGLU MLP, optionally tied embeddings. Its decoder is shared with mistral.c, qwen2.c and
 * qwen3.c (llama_family.h): q/k/v and o biases, Qwen3's q/k norms and per-layer sliding
 * windows are options. Numerics follow transformers' eager fp32 path:
 * inverse frequencies and angles in f32, softmax in f32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_family.h"
#include "cuda/gpu_model.h"

typedef struct {
    seer_decoder_opts_t o;
    int *window;                    /* [num_layers], 0: full attention */
    seer_weight_t *q_norm, *k_norm; /* [num_layers] when o.qk_norm or o.olmo2 */
    seer_weight_t *post_ff_norm;    /* [num_layers] when o.olmo2 */
    int rot;                        /* rotary dims per head */
    float *lr_short, *lr_long;      /* longrope factors [rot / 2], owned */
} decoder_state;

static void decoder_state_free(void *p) {
    decoder_state *s = p;
    if (!s) return;
    free(s->window);
    free(s->q_norm);
    free(s->k_norm);
    free(s->post_ff_norm);
    free(s->lr_short);
    free(s->lr_long);
    free(s);
}

static void rope_inv_freq(const seer_model_config_t *c, const decoder_state *st, float *inv, int seq_len);

int seer_rope_check(const float *inv, int half, const char *dir, seer_err_t *err) {
    for (int i = 0; i < half; i++)
        if (!(inv[i] > 0.f) || !isfinite(inv[i]))
            return seer_err_set(err, SEER_EPARSE,
                                "%s/config.json: the RoPE scaling gives inverse frequency %g for rotary pair %d (it must be "
                                "finite and positive): check rope_theta and rope_scaling's factor, low_freq_factor and "
                                "high_freq_factor (high_freq_factor must be greater than low_freq_factor), or longrope's "
                                "short_factor and long_factor",
                                dir, inv[i], i);
    return 0;
}

int seer_decoder_bind(seer_model_t *m, const seer_decoder_opts_t *o, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    int64_t D = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, hd = c->head_dim;
    int64_t qd = (int64_t)c->num_heads * c->head_dim, kvd = (int64_t)c->num_kv_heads * c->head_dim;
    char *missing = NULL;
    char name[256];
    int rc = 0;
    decoder_state *st = calloc(1, sizeof *st);
    if (!st) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    m->arch_state = st;
    m->arch_free = decoder_state_free;
    st->o = *o;
    st->window = calloc((size_t)c->num_layers, sizeof *st->window);
    if (o->qk_norm || o->olmo2) {
        st->q_norm = calloc((size_t)c->num_layers, sizeof *st->q_norm);
        st->k_norm = calloc((size_t)c->num_layers, sizeof *st->k_norm);
    }
    if (o->olmo2) st->post_ff_norm = calloc((size_t)c->num_layers, sizeof *st->post_ff_norm);
    if (!st->window || ((o->qk_norm || o->olmo2) && (!st->q_norm || !st->k_norm)) || (o->olmo2 && !st->post_ff_norm))
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    if (o->window) memcpy(st->window, o->window, (size_t)c->num_layers * sizeof *st->window);
    st->o.window = st->window;
    st->rot = o->rot_dim > 0 ? o->rot_dim : c->head_dim;
    if (st->rot % 2 || st->rot > c->head_dim)
        return seer_err_set(err, SEER_EPARSE, "%s: the rotary dims (%d) must be even and at most head_dim (%d)", m->dir,
                            st->rot, c->head_dim);
    if (c->rope_kind == SEER_ROPE_LONGROPE && !o->longrope_short)
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: longrope RoPE is implemented for phi3 only", m->dir);
    if (o->longrope_short) {
        size_t nh = (size_t)st->rot / 2;
        st->lr_short = malloc(nh * sizeof(float));
        st->lr_long = malloc(nh * sizeof(float));
        if (!st->lr_short || !st->lr_long) return seer_err_set(err, SEER_ENOMEM, "out of memory");
        memcpy(st->lr_short, o->longrope_short, nh * sizeof(float));
        memcpy(st->lr_long, o->longrope_long, nh * sizeof(float));
        st->o.longrope_short = st->lr_short, st->o.longrope_long = st->lr_long;
    }
    {
        /* a scaling config whose frequencies are not finite and positive (llama3 with
         * low_freq_factor == high_freq_factor hitting a wavelength exactly: 0 / 0) gave NaN
         * logits; transformers only warns. Checked once, at bind. */
        float *inv = malloc(((size_t)st->rot / 2 + 1) * sizeof(float));
        if (!inv) return seer_err_set(err, SEER_ENOMEM, "out of memory");
        rope_inv_freq(c, st, inv, 0);
        int bad = seer_rope_check(inv, st->rot / 2, m->dir, err);
        /* longrope: the long factors too, which a forward pass past original_max_position_embeddings
         * uses (dynamic NTK only lowers the frequencies it checked here as the sequence grows) */
        if (bad == 0 && c->rope_kind == SEER_ROPE_LONGROPE) {
            rope_inv_freq(c, st, inv, st->o.longrope_orig + 1);
            bad = seer_rope_check(inv, st->rot / 2, m->dir, err);
        }
        free(inv);
        if (bad < 0) return bad;
    }
#define W SEER_BIND_WEIGHT
    W(&m->embed, V, D, 0, "model.embed_tokens.weight");
    W(&m->final_norm, D, 0, 0, "model.norm.weight");
    W(&m->lm_head, V, D, c->tie_word_embeddings, "lm_head.weight");
    for (int i = 0; i < c->num_layers; i++) {
        seer_layer_weights_t *l = &m->layers[i];
        if (!o->olmo2) W(&l->attn_norm, D, 0, 0, "model.layers.%d.input_layernorm.weight", i);
        if (o->phi3) {
            /* views into the fused [q; k; v] rows */
            seer_weight_t qkv;
            W(&qkv, qd + 2 * kvd, D, 0, "model.layers.%d.self_attn.qkv_proj.weight", i);
            if (qkv.data) {
                size_t row = (size_t)D * seer_dtype_size(qkv.dtype);
                l->q = qkv, l->q.rows = qd;
                l->k = qkv, l->k.rows = kvd, l->k.data = (const char *)qkv.data + (size_t)qd * row;
                l->v = qkv, l->v.rows = kvd, l->v.data = (const char *)qkv.data + (size_t)(qd + kvd) * row;
            }
        } else {
            W(&l->q, qd, D, 0, "model.layers.%d.self_attn.q_proj.weight", i);
            W(&l->k, kvd, D, 0, "model.layers.%d.self_attn.k_proj.weight", i);
            W(&l->v, kvd, D, 0, "model.layers.%d.self_attn.v_proj.weight", i);
        }
        W(&l->o, D, qd, 0, "model.layers.%d.self_attn.o_proj.weight", i);
        if (o->qkv_bias) {
            W(&l->q_bias, qd, 0, 0, "model.layers.%d.self_attn.q_proj.bias", i);
            W(&l->k_bias, kvd, 0, 0, "model.layers.%d.self_attn.k_proj.bias", i);
            W(&l->v_bias, kvd, 0, 0, "model.layers.%d.self_attn.v_proj.bias", i);
        }
        if (o->o_bias) W(&l->o_bias, D, 0, 0, "model.layers.%d.self_attn.o_proj.bias", i);
        if (o->qk_norm) {
            W(&st->q_norm[i], hd, 0, 0, "model.layers.%d.self_attn.q_norm.weight", i);
            W(&st->k_norm[i], hd, 0, 0, "model.layers.%d.self_attn.k_norm.weight", i);
        }
        if (o->olmo2) {
            W(&st->q_norm[i], qd, 0, 0, "model.layers.%d.self_attn.q_norm.weight", i);
            W(&st->k_norm[i], kvd, 0, 0, "model.layers.%d.self_attn.k_norm.weight", i);
            W(&st->post_ff_norm[i], D, 0, 0, "model.layers.%d.post_feedforward_layernorm.weight", i);
        }
        /* the pre-MLP norm; OLMo 2's post-attention norm (same name, applied after attention) */
        W(&l->mlp_norm, D, 0, 0, "model.layers.%d.post_attention_layernorm.weight", i);
        if (o->phi3) {
            /* views into the fused [gate; up] rows (transformers: gate, up = chunk(2)) */
            seer_weight_t gu;
            W(&gu, 2 * I, D, 0, "model.layers.%d.mlp.gate_up_proj.weight", i);
            if (gu.data) {
                l->gate = gu, l->gate.rows = I;
                l->up = gu, l->up.rows = I, l->up.data = (const char *)gu.data + (size_t)I * (size_t)D * seer_dtype_size(gu.dtype);
            }
        } else {
            W(&l->gate, I, D, 0, "model.layers.%d.mlp.gate_proj.weight", i);
            W(&l->up, I, D, 0, "model.layers.%d.mlp.up_proj.weight", i);
        }
        W(&l->down, D, I, 0, "model.layers.%d.mlp.down_proj.weight", i);
        if (o->mlp_bias) {
            W(&l->gate_bias, I, 0, 0, "model.layers.%d.mlp.gate_proj.bias", i);
            W(&l->up_bias, I, 0, 0, "model.layers.%d.mlp.up_proj.bias", i);
            W(&l->down_bias, D, 0, 0, "model.layers.%d.mlp.down_proj.bias", i);
        }
    }
#undef W
    if (c->tie_word_embeddings && !m->lm_head.data) m->lm_head = m->embed;
    if (!m->lm_head.data) {
        /* Untied config but no lm_head: name it among the missing tensors. */
        if (!missing) rc = seer_err_set(err, SEER_EPARSE, "%s: lm_head.weight is missing", m->dir);
    }
    if (missing)
        rc = seer_err_set(err, SEER_EPARSE, "%s: the checkpoint lacks tensors that config.json requires: %s", m->dir,
                          missing);
out:
    free(missing);
    return rc;
}

int seer_decoder_layer_types(seer_model_t *m, int *window, int sliding_window, seer_err_t *err) {
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(m->config_json, "layer_types");
    if (!lt || cJSON_IsNull(lt)) return 0;
    int nl = m->cfg.num_layers;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != nl)
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"layer_types\" must be a list of %d strings", m->dir, nl);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, lt) {
        if (!cJSON_IsString(e))
            return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"layer_types\" must be a list of %d strings", m->dir,
                                nl);
        if (strcmp(e->valuestring, "sliding_attention") == 0) {
            if (sliding_window <= 0)
                return seer_err_set(err, SEER_EPARSE,
                                    "%s/config.json: layer %d is \"sliding_attention\" but no sliding_window is set",
                                    m->dir, i);
            window[i] = sliding_window;
        } else if (strcmp(e->valuestring, "full_attention") == 0) {
            window[i] = 0;
        } else {
            return seer_err_set(err, SEER_EPARSE,
                                "%s/config.json: layer_types[%d] is \"%s\" (supported: full_attention, sliding_attention)",
                                m->dir, i, e->valuestring);
        }
        i++;
    }
    return 1;
}

int seer_decoder_qwen_windows(seer_model_t *m, int *window, seer_err_t *err) {
    const cJSON *j = m->config_json;
    int nl = m->cfg.num_layers;
    memset(window, 0, (size_t)nl * sizeof *window);
    const cJSON *use = cJSON_GetObjectItemCaseSensitive(j, "use_sliding_window");
    if (use && !cJSON_IsNull(use) && !cJSON_IsBool(use))
        return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"use_sliding_window\" must be true or false", m->dir);
    int sw = cJSON_IsTrue(use) ? m->cfg.sliding_window : 0;
    int rc = seer_decoder_layer_types(m, window, sw, err);
    if (rc != 0) return rc < 0 ? rc : 0;
    if (sw <= 0) return 0;
    int mwl = 28;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "max_window_layers");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
            return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"max_window_layers\" must be a non-negative integer",
                                m->dir);
        mwl = v->valuedouble > nl ? nl : (int)v->valuedouble;
    }
    for (int i = mwl; i < nl; i++) window[i] = sw;
    return 0;
}

static int llama_bind(seer_model_t *m, seer_err_t *err) {
    seer_decoder_opts_t o = {.qkv_bias = m->cfg.attention_bias, .o_bias = m->cfg.attention_bias,
                             .mlp_bias = m->cfg.mlp_bias};
    return seer_decoder_bind(m, &o, err);
}

/* transformers' inverse frequencies for the configured rope scaling, in f32, for a forward
 * pass whose last position is seq_len - 1 (only dynamic NTK scaling depends on it). */
static void rope_inv_freq(const seer_model_config_t *c, const decoder_state *st, float *inv, int seq_len) {
    int dim = st->rot, half = dim / 2;
    double base = c->rope_theta;
    if (c->rope_kind == SEER_ROPE_DYNAMIC) {
        /* _compute_dynamic_ntk_parameters: the base grows once the sequence passes
         * max_position_embeddings (transformers recomputes it as the sequence grows; seer per
         * forward pass, from the positions it covers) */
        double L = seq_len > c->max_position_embeddings ? seq_len : c->max_position_embeddings;
        double f = c->rope_factor;
        base = base * pow(f * L / c->max_position_embeddings - (f - 1.0), (double)dim / (dim - 2));
    }
    for (int i = 0; i < half; i++) {
        float expo = (float)(2 * i) / (float)dim;
        inv[i] = (float)(1.0 / pow(base, (double)expo));
    }
    if (c->rope_kind == SEER_ROPE_LONGROPE) {
        /* _compute_longrope_parameters: 1 / (ext * base^(2i/dim)), the long factors once the
         * pass reaches past original_max_position_embeddings (transformers switches per pass) */
        const float *ext = seq_len > st->o.longrope_orig ? st->o.longrope_long : st->o.longrope_short;
        for (int i = 0; i < half; i++) {
            float p = (float)pow(base, (double)((float)(2 * i) / (float)dim));
            inv[i] = 1.0f / (ext[i] * p);
        }
    }
    if (c->rope_kind == SEER_ROPE_YARN) {
        /* _compute_yarn_parameters: extrapolated (plain) frequencies for the fast-rotating dims,
         * interpolated (/ factor) ones for the slow, a linear ramp in between */
        double orig = c->rope_original_max_position, b = c->rope_theta;
        double lo = dim * log(orig / (c->rope_beta_fast * 2 * M_PI)) / (2 * log(b));
        double hi = dim * log(orig / (c->rope_beta_slow * 2 * M_PI)) / (2 * log(b));
        if (c->rope_truncate) lo = floor(lo), hi = ceil(hi);
        if (lo < 0) lo = 0;
        if (hi > dim - 1) hi = dim - 1;
        if (lo == hi) hi += 0.001;
        for (int i = 0; i < half; i++) {
            float pos_freq = (float)pow(b, (double)((float)(2 * i) / (float)dim));
            float extra = 1.0f / pos_freq, inter = 1.0f / (c->rope_factor * pos_freq);
            float ramp = (float)(((float)i - (float)lo) / (float)(hi - lo));
            ramp = ramp < 0.f ? 0.f : ramp > 1.f ? 1.f : ramp;
            float ef = 1.0f - ramp;
            inv[i] = inter * (1.0f - ef) + extra * ef;
        }
    }
    if (c->rope_kind == SEER_ROPE_LINEAR) {
        for (int i = 0; i < half; i++) inv[i] /= c->rope_factor;
    } else if (c->rope_kind == SEER_ROPE_LLAMA3) {
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

int seer_decoder_forward(seer_model_t *m, const seer_fwd_batch_t *fb, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    const decoder_state *st = m->arch_state;
    int D = c->hidden_size, I = c->intermediate_size, H = c->num_heads, KH = c->num_kv_heads, hd = c->head_dim;
    int qd = H * hd, kvd = KH * hd, rot = st->rot, half = rot / 2;
    int n = fb->N, rc = 0;
    int nthreads = seer_pool_threads(m->pool);
    size_t nf = (size_t)n;
    float *buf = malloc(sizeof(float) * (nf * (size_t)(2 * D + 2 * qd + 2 * kvd + 2 * I) + (size_t)half * (1 + 2 * nf) +
                                         (size_t)nthreads * (size_t)fb->max_len));
    if (!buf) return seer_err_set(err, SEER_ENOMEM, "forward: out of memory for %d tokens", n);
    seer_attn_params_t ap1, *aps = seer_fb_attn_params(fb, &ap1);
    if (!aps) {
        free(buf);
        return seer_err_set(err, SEER_ENOMEM, "forward: out of memory for a batch of %d", fb->ns);
    }
    float *x = buf, *xb = x + nf * D, *att = xb + nf * D, *q = att + nf * qd, *k = q + nf * qd, *v = k + nf * kvd;
    float *h1 = v + nf * kvd, *h2 = h1 + nf * I, *inv = h2 + nf * I, *cs = inv + half, *sn = cs + nf * half;
    float *scratch = sn + nf * half;

    float cs_scale = c->rope_kind == SEER_ROPE_YARN       ? c->rope_attention_factor
                     : c->rope_kind == SEER_ROPE_LONGROPE ? st->o.longrope_att
                                                          : 1.0f;
    for (int s = 0; s < fb->ns; s++) { /* per sequence: its positions (dynamic NTK and longrope: its length) */
        int r0 = fb->off[s], sn_ = fb->seq[s].n, sp = fb->start[s];
        rope_inv_freq(c, st, inv, sp + sn_);
        seer_k_rope_table(inv, half, sp, sn_, cs + (size_t)r0 * half, sn + (size_t)r0 * half);
        for (int t = 0; t < sn_; t++) seer_k_embed_row(x + (size_t)(r0 + t) * D, &m->embed, fb->seq[s].tokens[t]);
    }
    if (cs_scale != 1.0f) /* cos, sin x attention_factor */
        for (size_t i = 0; i < nf * (size_t)half; i++) cs[i] *= cs_scale, sn[i] *= cs_scale;
    if (st->o.embed_mult != 0.f)
        for (size_t i = 0; i < nf * D; i++) x[i] *= st->o.embed_mult;
    SEER_HOOK_ROWS(SEER_HP_EMBED, -1, x, D);
    seer_fb_hidden(fb, 0, x, D);
    int l0 = seer_fb_begin(fb, x, D); /* start_at_layer: the given residual, from block l0 */

    for (int l = l0; l < c->num_layers; l++) {
        const seer_layer_weights_t *L = &m->layers[l];
        SEER_HOOK_ROWS(SEER_HP_RESID_PRE, l, x, D);
        if (st->o.olmo2) memcpy(xb, x, nf * D * sizeof(float)); /* no pre-norm: the block sees x */
        else seer_k_rmsnorm_pool(m->pool, xb, x, n, D, &L->attn_norm, c->rms_norm_eps, 0);
        SEER_HOOK_ROWS(SEER_HP_LN1, l, xb, D);
        {
            float *ys[3] = {q, k, v};
            const seer_weight_t *ws[3] = {&L->q, &L->k, &L->v}, *bs[3] = {&L->q_bias, &L->k_bias, &L->v_bias};
            seer_fb_linear_multi(m->pool, fb, 3, ys, xb, ws, bs);
        }
        if (st->o.qk_norm) { /* per head, before RoPE */
            seer_k_rmsnorm(q, q, n * H, hd, &st->q_norm[l], c->rms_norm_eps, 0);
            seer_k_rmsnorm(k, k, n * KH, hd, &st->k_norm[l], c->rms_norm_eps, 0);
        } else if (st->o.olmo2) { /* over the whole projection, before RoPE */
            seer_k_rmsnorm(q, q, n, qd, &st->q_norm[l], c->rms_norm_eps, 0);
            seer_k_rmsnorm(k, k, n, kvd, &st->k_norm[l], c->rms_norm_eps, 0);
        }
        SEER_HOOK_HEADS(SEER_HP_Q, l, q, H, hd);
        SEER_HOOK_HEADS(SEER_HP_K, l, k, KH, hd);
        SEER_HOOK_HEADS(SEER_HP_V, l, v, KH, hd);
        seer_k_rope_rows_pool(m->pool, n, q, H, k, KH, hd, rot, cs, sn);
        for (int s = 0; s < fb->ns; s++) {
            seer_kv_cache_t *kv = fb->seq[s].cache;
            int r0 = fb->off[s], sn_ = fb->seq[s].n, sp = fb->start[s];
            seer_kv_put(kv, l, sp, sn_, k + (size_t)r0 * kvd, v + (size_t)r0 * kvd);
            aps[s] = (seer_attn_params_t){.q = q + (size_t)r0 * qd, .out = att + (size_t)r0 * qd,
                                     .scratch = scratch, .n = sn_, .start = sp, .H = H,
                                     .KH = KH, .hd = hd, .window = st->window ? st->window[l] : 0,
                                     .scale = st->o.attn_mult != 0.f ? st->o.attn_mult : 1.0f / sqrtf((float)hd)};
            seer_kv_attn(kv, l, &aps[s]);
        }
        if ((rc = seer_fb_attention(m, fb, l, aps, err)) < 0) goto out;
        SEER_HOOK_HEADS(SEER_HP_Z, l, att, H, hd);
        seer_fb_linear(m->pool, fb, xb, att, &L->o, &L->o_bias);
        if (st->o.olmo2) seer_k_rmsnorm(xb, xb, n, D, &L->mlp_norm, c->rms_norm_eps, 0);
        SEER_HOOK_ROWS(SEER_HP_ATTN_OUT, l, xb, D);
        seer_k_add_pool(m->pool, x, xb, nf * D, st->o.resid_mult);
        SEER_HOOK_ROWS(SEER_HP_RESID_MID, l, x, D);

        if (st->o.olmo2) memcpy(xb, x, nf * D * sizeof(float));
        else seer_k_rmsnorm_pool(m->pool, xb, x, n, D, &L->mlp_norm, c->rms_norm_eps, 0);
        SEER_HOOK_ROWS(SEER_HP_LN2, l, xb, D);
        {
            float *ys[2] = {h1, h2};
            const seer_weight_t *ws[2] = {&L->gate, &L->up}, *bs[2] = {&L->gate_bias, &L->up_bias};
            seer_fb_linear_multi(m->pool, fb, 2, ys, xb, ws, bs);
        }
        SEER_HOOK_ROWS(SEER_HP_MLP_PRE, l, h1, I);
        seer_fb_silu_mul(m->pool, fb, h1, h2, I);
        SEER_HOOK_ROWS(SEER_HP_MLP_POST, l, h1, I);
        seer_fb_linear(m->pool, fb, xb, h1, &L->down, &L->down_bias);
        if (st->o.olmo2) seer_k_rmsnorm(xb, xb, n, D, &st->post_ff_norm[l], c->rms_norm_eps, 0);
        SEER_HOOK_ROWS(SEER_HP_MLP_OUT, l, xb, D);
        seer_k_add_pool(m->pool, x, xb, nf * D, st->o.resid_mult);
        SEER_HOOK_ROWS(SEER_HP_RESID_POST, l, x, D);
        seer_fb_hidden(fb, l + 1, x, D);
    }
    for (int s = 0; s < fb->ns; s++) fb->seq[s].cache->len = fb->start[s] + fb->seq[s].n;
    rc = seer_fwd_finish(m, fb, x, xb, err);
out:
    seer_fb_attn_free(aps, &ap1);
    free(buf);
    return rc;
}

int seer_decoder_describe(seer_model_t *m, seer_gpu_desc_t *d, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    const decoder_state *st = m->arch_state;
    memset(d, 0, sizeof *d);
    /* The GPU decoder has no MLP biases: refuse rather than drop them. */
    if (st->o.mlp_bias)
        return seer_err_set(err, SEER_EINVAL, "%s: \"mlp_bias\": true is not supported on the GPU yet; load it on the CPU",
                            m->dir);
    if (st->o.olmo2)
        return seer_err_set(err, SEER_EINVAL, "%s: OLMo 2 is not supported on the GPU yet; load it on the CPU", m->dir);
    if (st->o.embed_mult != 0.f || st->o.resid_mult != 0.f || st->o.attn_mult != 0.f || st->o.logits_scale != 0.f)
        return seer_err_set(err, SEER_EINVAL, "%s: Granite's multipliers are not supported on the GPU yet; load it on the CPU",
                            m->dir);
    if (st->o.phi3)
        return seer_err_set(err, SEER_EINVAL, "%s: Phi-3 is not supported on the GPU yet; load it on the CPU", m->dir);
    /* the GPU decoder takes one inverse-frequency table and no cos/sin scale */
    if (c->rope_kind == SEER_ROPE_YARN || c->rope_kind == SEER_ROPE_DYNAMIC)
        return seer_err_set(err, SEER_EINVAL, "%s: yarn and dynamic RoPE are not supported on the GPU yet; load it on the CPU",
                            m->dir);
    d->layers = calloc((size_t)c->num_layers, sizeof *d->layers);
    d->own = calloc((size_t)c->head_dim / 2 + 1, sizeof(float));
    if (!d->layers || !d->own) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    rope_inv_freq(c, st, d->own, 0);
    d->act = SEER_GPU_ACT_SILU;
    d->embed_scale = 1.f;
    d->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    for (int i = 0; i < c->num_layers; i++) {
        const seer_layer_weights_t *L = &m->layers[i];
        seer_gpu_layer_t *g = &d->layers[i];
        g->pre_attn_norm = &L->attn_norm;
        g->q = &L->q, g->k = &L->k, g->v = &L->v, g->o = &L->o;
        g->q_bias = seer_weight_or_null(&L->q_bias), g->k_bias = seer_weight_or_null(&L->k_bias), g->v_bias = seer_weight_or_null(&L->v_bias);
        g->o_bias = seer_weight_or_null(&L->o_bias);
        if (st->o.qk_norm) g->q_norm = &st->q_norm[i], g->k_norm = &st->k_norm[i];
        g->pre_mlp_norm = &L->mlp_norm;
        g->gate = &L->gate, g->up = &L->up, g->down = &L->down;
        g->window = st->window ? st->window[i] : 0;
        g->inv_freq = d->own;
    }
    return 0;
}

void seer_decoder_final_scale(seer_model_t *m, float *logits, int rows) {
    const decoder_state *st = m->arch_state;
    if (st->o.logits_scale == 0.f) return;
    size_t nv = (size_t)rows * (size_t)m->cfg.vocab_size;
    for (size_t i = 0; i < nv; i++) logits[i] /= st->o.logits_scale;
}

const seer_arch_t seer_arch_llama = {"llama", llama_bind, seer_decoder_forward, NULL, NULL, seer_decoder_describe};
