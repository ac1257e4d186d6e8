/* Where the model runtime meets engine/hooks: activations of a forward pass handed to hook
 * sets, attention with materialized [head, pos, k] scores for score/pattern hooks, and the
 * unembedding shared by the forward pass and the logit lens. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host/host.h"
#include "model_private.h"

int seer_fwd_hook_rows(const seer_fwd_hooks_t *hk, seer_hook_point_t p, int layer, int start, int n, float *data,
                       int cols, seer_err_t *err) {
    if (!SEER_HOOKED(hk, p, layer)) return 0;
    seer_hook_call_t call = {.point = p, .layer = seer_hook_point_global(p) ? -1 : layer, .start = start, .n = n,
                             .prompt_len = hk->prompt_len, .batch = hk->batch, .user = hk->user};
    seer_hook_act_t a = {.data = data, .ndim = 2, .shape = {n, cols}};
    return seer_hook_apply(hk->set, &call, &a, err);
}

int seer_fwd_hook_heads(const seer_fwd_hooks_t *hk, seer_hook_point_t p, int layer, int start, int n, float *data,
                        int heads, int hd, seer_err_t *err) {
    if (!SEER_HOOKED(hk, p, layer)) return 0;
    seer_hook_call_t call = {.point = p, .layer = layer, .start = start, .n = n, .prompt_len = hk->prompt_len,
                             .batch = hk->batch, .user = hk->user};
    seer_hook_act_t a = {.data = data, .ndim = 3, .shape = {n, heads, hd}, .heads = heads};
    return seer_hook_apply(hk->set, &call, &a, err);
}

int seer_fb_attention(seer_model_t *m, const seer_fwd_batch_t *fb, int layer, seer_attn_params_t *aps, seer_err_t *err) {
    for (int s = 0; s < fb->ns; s++) aps[s].paths = fb->seq[s].paths; /* a prompt's rest takes the whole prompt's kernel */
    if (fb->ns == 1) return seer_fwd_attention(m, fb->seq[0].hk, layer, &aps[0], err);
    if (seer_host_interrupted()) return seer_err_set(err, SEER_EINTR, "interrupted");
    int plain = 0;
    for (int s = 0; s < fb->ns; s++) {
        const seer_fwd_hooks_t *hk = fb->seq[s].hk;
        if (SEER_HOOKED(hk, SEER_HP_ATTN_SCORES, layer) || SEER_HOOKED(hk, SEER_HP_PATTERN, layer)) {
            int rc = seer_fwd_attention(m, hk, layer, &aps[s], err);
            if (rc < 0) return rc;
        } else
            aps[plain++] = aps[s]; /* s >= plain: an entry already used or this one */
    }
    seer_k_attention_batch(m->pool, aps, plain);
    return 0;
}

seer_attn_params_t *seer_fb_attn_params(const seer_fwd_batch_t *fb, seer_attn_params_t *one) {
    return fb->ns == 1 ? one : malloc(sizeof *one * (size_t)fb->ns);
}

void seer_fb_attn_free(seer_attn_params_t *aps, seer_attn_params_t *one) {
    if (aps != one) free(aps);
}

/* The hooked attention's three loops, each over independent rows on the model's pool (the hooks
 * run between them on the calling thread): every row computes what it computed when one thread
 * ran them all, in the same order, so the thread count changes no bit. */
typedef struct {
    const seer_attn_params_t *a;
    float *sc; /* [H, n, K] */
    int K;
} hooked_attn_t;

/* Rows r = h * n + t: the scores of query t on head h against keys 0 .. K-1, -inf where masked. */
static void hooked_scores(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    const hooked_attn_t *j = ctx;
    const seer_attn_params_t *a = j->a;
    int n = a->n, K = j->K, hd = a->hd, qd = a->H * hd, kvd = a->KH * hd, group = a->H / a->KH;
    for (size_t r = begin; r < end; r++) {
        int h = (int)(r / (size_t)n), t = (int)(r % (size_t)n), pos = a->start + t;
        size_t kv_off = (size_t)(h / group) * (size_t)hd;
        const float *q = a->q + (size_t)t * qd + (size_t)h * hd;
        float *row = j->sc + r * (size_t)K;
        for (int p = 0; p < K; p++) {
            int visible = p <= pos && !(a->window > 0 && pos - p >= a->window);
            if (!visible) {
                row[p] = -INFINITY;
                continue;
            }
            float s = (a->kc16 ? seer_k_dot_bf16(q, a->kc16 + (size_t)p * kvd + kv_off, hd)
                               : seer_k_dot(q, a->kc + (size_t)p * kvd + kv_off, hd)) * a->scale;
            if (a->softcap > 0.f) s = tanhf(s / a->softcap) * a->softcap;
            row[p] = s;
        }
    }
}

/* Rows of [H * n]: the softmax over [lo, hi], the entries that are not -inf: for scores no hook
 * changed, the row's visible keys, with the same exp and summation as seer_k_attention's
 * per-token kernel, so capturing a pattern changes no result bit. */
static void hooked_softmax(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    const hooked_attn_t *j = ctx;
    int K = j->K;
    for (size_t r = begin; r < end; r++) {
        float *row = j->sc + r * (size_t)K;
        int lo = 0, hi = K - 1;
        while (lo < K && row[lo] == -INFINITY) row[lo++] = 0.f;
        while (hi >= lo && row[hi] == -INFINITY) row[hi--] = 0.f;
        if (lo > hi) continue;
        float mx = -INFINITY;
        for (int p = lo; p <= hi; p++)
            if (row[p] > mx) mx = row[p];
        if (mx == INFINITY || mx != mx) { /* a hook wrote inf or NaN: the softmax is NaN, as in torch */
            for (int p = lo; p <= hi; p++) row[p] = NAN;
            continue;
        }
        float sum = seer_k_exp_sub_sum(row + lo, hi - lo + 1, mx);
        float inv = sum > 0.f ? 1.0f / sum : 0.f;
        for (int p = lo; p <= hi; p++) row[p] *= inv;
    }
}

/* Rows r = t * H + h: query t's output on head h, the pattern's weights times the values. */
static void hooked_mix(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    const hooked_attn_t *j = ctx;
    const seer_attn_params_t *a = j->a;
    int n = a->n, H = a->H, K = j->K, hd = a->hd, qd = H * hd, kvd = a->KH * hd, group = H / a->KH;
    for (size_t r = begin; r < end; r++) {
        int t = (int)(r / (size_t)H), h = (int)(r % (size_t)H);
        const float *w = j->sc + ((size_t)h * n + t) * K;
        size_t kv_off = (size_t)(h / group) * (size_t)hd;
        float *o = a->out + (size_t)t * qd + (size_t)h * hd;
        memset(o, 0, sizeof(float) * (size_t)hd);
        for (int p = 0; p < K; p++) {
            if (w[p] == 0.f) continue;
            if (a->vc16) seer_k_axpy_bf16(o, w[p], a->vc16 + (size_t)p * kvd + kv_off, hd);
            else seer_k_axpy(o, w[p], a->vc + (size_t)p * kvd + kv_off, hd);
        }
    }
}

/* Items per pool task for rows of `row_work` multiply-adds each (the pool runs small loops on
 * the caller alone). */
static size_t rows_per_task(size_t row_work) {
    return row_work >= SEER_PAR_WORK ? 1 : (SEER_PAR_WORK + row_work - 1) / (row_work ? row_work : 1);
}

/* Scores for every (head, query, key) of the cache, masked with -inf, as transformers' eager
 * attention computes them before the softmax; the hooks at the scores, the softmax, the hooks
 * at the pattern, then the values weighted by it. */
int seer_fwd_attention(seer_model_t *m, const seer_fwd_hooks_t *hk, int layer, const seer_attn_params_t *a,
                       seer_err_t *err) {
    /* Every architecture calls this once per layer, so an interrupt stops a long forward pass
     * within one layer (the pass's caller resets the KV cache on failure). */
    if (seer_host_interrupted()) return seer_err_set(err, SEER_EINTR, "interrupted");
    if (!SEER_HOOKED(hk, SEER_HP_ATTN_SCORES, layer) && !SEER_HOOKED(hk, SEER_HP_PATTERN, layer)) {
        seer_k_attention(m->pool, a);
        return 0;
    }
    int H = a->H, n = a->n, K = a->start + a->n;
    size_t total = (size_t)H * (size_t)n * (size_t)K, rows = (size_t)H * (size_t)n;
    float *sc = malloc(sizeof(float) * total);
    if (!sc)
        return seer_err_set(err, SEER_ENOMEM, "attention scores for hooks: out of memory for [%d, %d, %d] floats", H, n, K);
    hooked_attn_t j = {.a = a, .sc = sc, .K = K};
    size_t per = rows_per_task((size_t)K * (size_t)a->hd);
    seer_pool_for(m->pool, rows, per, hooked_scores, &j);
    seer_hook_call_t call = {.point = SEER_HP_ATTN_SCORES, .layer = layer, .start = a->start, .n = n,
                             .prompt_len = hk->prompt_len, .batch = hk->batch, .user = hk->user};
    seer_hook_act_t act = {.data = sc, .ndim = 3, .shape = {H, n, K}, .heads = H};
    int rc = seer_hook_apply(hk->set, &call, &act, err);
    if (rc < 0) goto out;
    seer_pool_for(m->pool, rows, rows_per_task((size_t)K * 4u), hooked_softmax, &j);
    call.point = SEER_HP_PATTERN;
    if ((rc = seer_hook_apply(hk->set, &call, &act, err)) < 0) goto out;
    seer_pool_for(m->pool, rows, per, hooked_mix, &j);
out:
    free(sc);
    return rc;
}

int seer_fwd_final_norm(seer_model_t *m, float *y, const float *x, int rows) {
    if (m->arch->final_norm) {
        m->arch->final_norm(m, y, x, rows);
    } else {
        seer_k_rmsnorm(y, x, rows, m->cfg.hidden_size, &m->final_norm, m->cfg.rms_norm_eps, 0);
    }
    return 0;
}

/* The row count whose path the head takes for a sequence's `rows` rows of logits: rows, or for a
 * prompt's rest that asks for every position, the whole prompt's (seer_batch_seq_t.paths). */
static int head_paths(const seer_batch_seq_t *q, int rows) { return q->all_logits && q->paths ? q->paths : rows; }

/* paths: head_paths */
static void head(seer_model_t *m, float *logits, const float *xn, int rows, int paths) {
    seer_k_linear_as(m->pool, logits, xn, rows, &m->lm_head, NULL, paths >= seer_k_linear_gemm_min(&m->lm_head), paths - rows);
    if (m->arch->final_softcap) m->arch->final_softcap(m, logits, rows);
}

int seer_fwd_finish(seer_model_t *m, const seer_fwd_batch_t *fb, const float *x, float *xb, seer_err_t *err) {
    if (fb->stop) return SEER_ESTOP; /* a stop after the last block: no final norm, no logits */
    int D = m->cfg.hidden_size, V = m->cfg.vocab_size;
    if (fb->ns == 1) { /* one sequence: straight into its logits, no gathering */
        const seer_batch_seq_t *q = &fb->seq[0];
        int n = q->n;
        if (SEER_HOOKED(q->hk, SEER_HP_LN_FINAL, -1)) { /* the hook sees every position */
            seer_fwd_final_norm(m, xb, x, n);
            int rc = seer_fwd_hook_rows(q->hk, SEER_HP_LN_FINAL, -1, fb->start[0], n, xb, D, err);
            if (rc < 0) return rc;
            int rows = q->all_logits ? n : 1;
            if (q->logits) head(m, q->logits, q->all_logits ? xb : xb + (size_t)(n - 1) * D, rows, head_paths(q, rows));
            return 0;
        }
        if (!q->logits) return 0;
        int rows = q->all_logits ? n : 1;
        seer_fwd_final_norm(m, xb, q->all_logits ? x : x + (size_t)(n - 1) * D, rows);
        head(m, q->logits, xb, rows, head_paths(q, rows));
        return 0;
    }
    /* Several: the rows that need logits are gathered, one after another, into xb (they never
     * outnumber the packed rows), normed, and the head runs once over all of them. */
    int *goff = malloc(sizeof(int) * (size_t)(fb->ns + 1));
    if (!goff) return seer_err_set(err, SEER_ENOMEM, "forward: out of memory");
    int R = 0, rc = 0;
    for (int s = 0; s < fb->ns; s++) {
        const seer_batch_seq_t *q = &fb->seq[s];
        int n = q->n, r0 = fb->off[s];
        goff[s] = R;
        if (SEER_HOOKED(q->hk, SEER_HP_LN_FINAL, -1)) {
            /* normed in place at the sequence's rows (gathered rows never pass them: R <= r0) */
            seer_fwd_final_norm(m, xb + (size_t)r0 * D, x + (size_t)r0 * D, n);
            if ((rc = seer_fwd_hook_rows(q->hk, SEER_HP_LN_FINAL, -1, fb->start[s], n, xb + (size_t)r0 * D, D, err)) < 0)
                goto out;
            if (q->logits) {
                int rows = q->all_logits ? n : 1;
                memmove(xb + (size_t)R * D, xb + (size_t)(r0 + n - rows) * D, (size_t)rows * D * sizeof(float));
                R += rows;
            }
        } else if (q->logits) {
            int rows = q->all_logits ? n : 1;
            seer_fwd_final_norm(m, xb + (size_t)R * D, x + (size_t)(r0 + n - rows) * D, rows);
            R += rows;
        }
    }
    goff[fb->ns] = R;
    if (R > 0) {
        float *lg = malloc(sizeof(float) * (size_t)R * (size_t)V);
        if (!lg) {
            rc = seer_err_set(err, SEER_ENOMEM, "forward: out of memory for %d rows of logits", R);
            goto out;
        }
        /* The head as seer_fb_linear groups a batch: rows of a sequence that would take the GEMM
         * path alone go alone, every other row through the per-token kernel together. */
        int gmin = seer_k_linear_gemm_min(&m->lm_head);
        for (int s = 0; s < fb->ns;) {
            int rows = goff[s + 1] - goff[s];
            if (head_paths(&fb->seq[s], rows) >= gmin) {
                seer_k_linear_as(m->pool, lg + (size_t)goff[s] * V, xb + (size_t)goff[s] * D, rows, &m->lm_head, NULL, 1,
                                 head_paths(&fb->seq[s], rows) - rows);
                s++;
                continue;
            }
            int e = s;
            while (e < fb->ns && head_paths(&fb->seq[e], goff[e + 1] - goff[e]) < gmin) e++;
            if (goff[e] > goff[s])
                seer_k_linear_rows(m->pool, lg + (size_t)goff[s] * V, xb + (size_t)goff[s] * D, goff[e] - goff[s],
                                   &m->lm_head, NULL);
            s = e;
        }
        if (m->arch->final_softcap) m->arch->final_softcap(m, lg, R);
        for (int s = 0; s < fb->ns; s++)
            if (fb->seq[s].logits)
                memcpy(fb->seq[s].logits, lg + (size_t)goff[s] * V, sizeof(float) * (size_t)(goff[s + 1] - goff[s]) * V);
        free(lg);
    }
out:
    free(goff);
    return rc;
}

int seer_model_unembed(seer_model_t *m, const float *x, int rows, float *logits, seer_err_t *err) {
    if (rows <= 0) return seer_err_set(err, SEER_EINVAL, "unembed: no rows");
    float *xb = malloc(sizeof(float) * (size_t)rows * (size_t)m->cfg.hidden_size);
    if (!xb) return seer_err_set(err, SEER_ENOMEM, "unembed: out of memory for %d rows", rows);
    seer_fwd_final_norm(m, xb, x, rows);
    head(m, logits, xb, rows, rows);
    free(xb);
    return 0;
}

unsigned seer_model_hook_mask(const seer_model_t *m) { return m->hook_mask; }
