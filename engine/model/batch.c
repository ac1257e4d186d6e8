/* Batched forward calls: the rows of several sequences packed into one pass over the weights,
 * with positions, KV caches, attention and hooks kept per sequence (seer_model_forward_batch).
 * The per-sequence pieces every architecture's forward function shares live here. Exactness:
 * every kernel a batch runs over packed rows computes a row the same way whatever the other
 * rows are, so each sequence's results are bit-identical to running it alone (tested per
 * architecture in tests/lua/test_model_batch.lua). */
#include <stdlib.h>
#include <string.h>

#include "host/host.h"
#include "model_private.h"
#include "cuda/gpu_model.h"

/* The row count by which sequence s's kernels are chosen: its own, or the whole prompt's when it
 * runs a prompt's rest after a taken prefix (seer_batch_seq_t.paths). */
static int seq_paths(const seer_fwd_batch_t *fb, int s) {
    const seer_batch_seq_t *q = &fb->seq[s];
    return q->paths > q->n ? q->paths : q->n;
}

void seer_fb_linear_multi(seer_pool_t *p, const seer_fwd_batch_t *fb, int count, float *const *ys, const float *x,
                          const seer_weight_t *const *ws, const seer_weight_t *const *biases) {
    enum { MAX = 4 };
    if (count > MAX) {
        for (int i = 0; i < count; i++) seer_fb_linear(p, fb, ys[i], x, ws[i], biases[i]);
        return;
    }
    size_t in = (size_t)ws[0]->cols;
    if (fb->ns == 1) {
        seer_k_linear_multi(p, count, ys, x, fb->N, ws, biases, seq_paths(fb, 0));
        return;
    }
    /* the matrices group the rows alike when they take their GEMM path from one count */
    int gmin = seer_k_linear_gemm_min(ws[0]);
    for (int i = 1; i < count; i++)
        if (seer_k_linear_gemm_min(ws[i]) != gmin) {
            for (int k = 0; k < count; k++) seer_fb_linear(p, fb, ys[k], x, ws[k], biases[k]);
            return;
        }
    for (int s = 0; s < fb->ns;) {
        int e = s + 1, gemm = seq_paths(fb, s) >= gmin;
        if (!gemm)
            while (e < fb->ns && seq_paths(fb, e) < gmin) e++;
        float *yo[MAX];
        for (int i = 0; i < count; i++) yo[i] = ys[i] + (size_t)fb->off[s] * (size_t)ws[i]->rows;
        seer_k_linear_multi(p, count, yo, x + (size_t)fb->off[s] * in, fb->off[e] - fb->off[s], ws, biases,
                            gemm ? seq_paths(fb, s) : 0);
        s = e;
    }
}

int seer_fb_begin(const seer_fwd_batch_t *fb, float *x, int D) {
    if (!fb->from) return 0;
    for (int s = 0; s < fb->ns; s++)
        memcpy(x + (size_t)fb->off[s] * (size_t)D, fb->resid[s], sizeof(float) * (size_t)fb->seq[s].n * (size_t)D);
    return fb->from - 1;
}

int seer_fb_hook_rows(const seer_fwd_batch_t *fb, seer_hook_point_t p, int layer, float *data, int cols, seer_err_t *err) {
    /* a pass that begins at a block never passes the embeddings */
    if (fb->from && (p == SEER_HP_EMBED || p == SEER_HP_POS_EMBED)) return 0;
    for (int s = 0; s < fb->ns; s++) {
        const seer_batch_seq_t *q = &fb->seq[s];
        if (!SEER_HOOKED(q->hk, p, layer)) continue;
        int rc = seer_fwd_hook_rows(q->hk, p, layer, fb->start[s], q->n, data + (size_t)fb->off[s] * (size_t)cols, cols,
                                    err);
        if (rc < 0) return rc;
    }
    /* a stop at block `layer`: its resid_pre hooks (above) were the last to run */
    if (fb->stop && p == SEER_HP_RESID_PRE && layer == fb->stop - 1) return SEER_ESTOP;
    return 0;
}

int seer_fb_hook_heads(const seer_fwd_batch_t *fb, seer_hook_point_t p, int layer, float *data, int heads, int hd,
                       seer_err_t *err) {
    for (int s = 0; s < fb->ns; s++) {
        const seer_batch_seq_t *q = &fb->seq[s];
        if (!SEER_HOOKED(q->hk, p, layer)) continue;
        int rc = seer_fwd_hook_heads(q->hk, p, layer, fb->start[s], q->n,
                                     data + (size_t)fb->off[s] * (size_t)heads * (size_t)hd, heads, hd, err);
        if (rc < 0) return rc;
    }
    return 0;
}

/* A sequence of at least seer_k_linear_gemm_min(w) rows takes the GEMM path (OpenBLAS, AMX) when
 * it runs alone, so in a batch it runs alone too; runs of shorter sequences go through the
 * per-token kernel together, which reads each weight once for all their rows (a decode step of
 * the whole batch is one pass over the weights). */
void seer_fb_linear(seer_pool_t *p, const seer_fwd_batch_t *fb, float *y, const float *x, const seer_weight_t *w,
                    const seer_weight_t *bias) {
    int gmin = seer_k_linear_gemm_min(w);
    if (fb->ns == 1) {
        seer_k_linear_as(p, y, x, fb->N, w, bias, seq_paths(fb, 0) >= gmin, seq_paths(fb, 0) - fb->N);
        return;
    }
    size_t in = (size_t)w->cols, out = (size_t)w->rows;
    for (int s = 0; s < fb->ns;) {
        if (seq_paths(fb, s) >= gmin) {
            seer_k_linear_as(p, y + (size_t)fb->off[s] * out, x + (size_t)fb->off[s] * in, fb->seq[s].n, w, bias, 1,
                             seq_paths(fb, s) - fb->seq[s].n);
            s++;
            continue;
        }
        int e = s;
        while (e < fb->ns && seq_paths(fb, e) < gmin) e++;
        seer_k_linear_rows(p, y + (size_t)fb->off[s] * out, x + (size_t)fb->off[s] * in, fb->off[e] - fb->off[s], w, bias);
        s = e;
    }
}

void seer_fb_hidden(const seer_fwd_batch_t *fb, int block, const float *x, int D) {
    for (int s = 0; s < fb->ns; s++) {
        const seer_batch_seq_t *q = &fb->seq[s];
        size_t rows = (size_t)q->n * (size_t)D;
        const float *at = x + (size_t)fb->off[s] * (size_t)D;
        if (q->hidden) memcpy(q->hidden + (size_t)block * rows, at, rows * sizeof(float));
        if (q->save_block == block && block > 0) memcpy(q->save, at, rows * sizeof(float));
    }
}

void seer_fb_silu_mul(seer_pool_t *p, const seer_fwd_batch_t *fb, float *gate, const float *up, int I) {
    for (int s = 0; s < fb->ns; s++) {
        size_t o = (size_t)fb->off[s] * (size_t)I;
        seer_k_silu_mul_pool(p, gate + o, up + o, (size_t)fb->seq[s].n * (size_t)I);
    }
}

static int check_seq(const seer_model_t *m, const seer_batch_seq_t *q, int s, seer_err_t *err) {
    if (!q->cache || !q->tokens || q->n <= 0)
        return seer_err_set(err, SEER_EINVAL, "forward: sequence %d of the batch has no tokens or no cache", s + 1);
    const seer_kv_cache_t *c = q->cache;
    if (c->len + q->n > c->max_tokens)
        return seer_err_set(err, SEER_EINVAL, "forward: sequence %d: %d cached + %d new tokens exceed the cache size %d",
                            s + 1, c->len, q->n, c->max_tokens);
    for (int i = 0; i < q->n; i++)
        if (q->tokens[i] < 0 || q->tokens[i] >= m->cfg.vocab_size)
            return seer_err_set(err, SEER_EINVAL,
                                "forward: sequence %d: token id %d at position %d is outside the vocabulary [0, %d)", s + 1,
                                q->tokens[i], i, m->cfg.vocab_size);
    if ((m->gpu != NULL) != (c->gdev != NULL))
        return seer_err_set(err, SEER_EINVAL,
                            "forward: sequence %d: the KV cache was made for the model on another device; make a new one",
                            s + 1);
    if (q->paths) {
        if (m->gpu)
            return seer_err_set(err, SEER_EINVAL, "forward: sequence %d: a model on a GPU runs no prompt's rest as the whole prompt (paths); leave paths 0", s + 1);
        if (q->paths < 0 || c->len <= 0 || c->len % SEER_TOKEN_BLOCK || q->paths != c->len + q->n)
            return seer_err_set(err, SEER_EINVAL,
                                "forward: sequence %d: paths = %d must be the whole prompt's length, its %d cached tokens "
                                "(a positive multiple of %d) + its %d new ones",
                                s + 1, q->paths, c->len, SEER_TOKEN_BLOCK, q->n);
        if (q->hk && (q->hk->from || q->hk->stop))
            return seer_err_set(err, SEER_EINVAL, "forward: sequence %d: paths cannot be combined with start_at_layer or stop_at_layer", s + 1);
    }
    if (q->save_block) {
        if (m->gpu || q->save_block < 1 || q->save_block > m->cfg.num_layers || !q->save ||
            (q->hk && (q->hk->stop || (q->hk->from && q->save_block < q->hk->from))))
            return seer_err_set(err, SEER_EINVAL,
                                "forward: sequence %d: save_block %d must be a block from 1 to %d with room for the residual, "
                                "on a CPU model, in a pass to the logits that runs that block's start (from the embeddings, "
                                "or start_at_layer below it)",
                                s + 1, q->save_block, m->cfg.num_layers);
    }
    if (q->cached_below && (m->gpu || !q->hk || q->hk->from < 2 || q->hk->stop || q->paths))
        return seer_err_set(err, SEER_EINVAL,
                            "forward: sequence %d: cached_below needs a pass from block 1 or later (start_at_layer) to the "
                            "logits on a CPU model, without paths", s + 1);
    return 0;
}

int seer_model_forward_batch(seer_model_t *m, const seer_batch_seq_t *seqs, int nseq, seer_err_t *err) {
    if (nseq <= 0) return seer_err_set(err, SEER_EINVAL, "forward: an empty batch");
    for (int s = 0; s < nseq; s++) {
        int rc = check_seq(m, &seqs[s], s, err);
        if (rc < 0) return rc;
        for (int t = 0; t < s; t++)
            if (seqs[t].cache == seqs[s].cache)
                return seer_err_set(err, SEER_EINVAL,
                                    "forward: sequences %d and %d of the batch share a KV cache; give each its own", t + 1,
                                    s + 1);
    }
    if (seer_host_interrupted()) return seer_err_set(err, SEER_EINTR, "interrupted");
    if (m->gpu && seqs[0].hk && seqs[0].hk->from)
        return seer_fwd_check_from(m, seqs[0].hk->from, seqs[0].hk->stop, seqs[0].hk->resid, NULL, 1, err);
    if (m->gpu) { /* a decode step in one pass, else one sequence at a time */
        int one = seer_gpu_forward_batch(m, seqs, nseq, err);
        if (one != 0) return one < 0 ? one : 0;
        for (int s = 0; s < nseq; s++) {
            const seer_batch_seq_t *q = &seqs[s];
            int rc = seer_model_forward_hooked(m, q->cache, q->tokens, q->n, q->logits, q->all_logits, q->hidden, q->hk, err);
            if (rc < 0) {
                for (int t = 0; t < s; t++) seqs[t].cache->len -= seqs[t].n;
                return rc;
            }
        }
        return 0;
    }
    seer_batch_seq_t *own = malloc(sizeof *own * (size_t)nseq);
    int *off = malloc(sizeof(int) * (size_t)(2 * nseq + 1));
    if (!own || !off) {
        free(own);
        free(off);
        return seer_err_set(err, SEER_ENOMEM, "forward: out of memory for a batch of %d", nseq);
    }
    int from = seqs[0].hk ? seqs[0].hk->from : 0;
    const float **resid = from ? malloc(sizeof *resid * (size_t)nseq) : NULL;
    if (from && !resid) {
        free(own);
        free(off);
        return seer_err_set(err, SEER_ENOMEM, "forward: out of memory for a batch of %d", nseq);
    }
    seer_fwd_batch_t fb = {.seq = own, .ns = nseq, .off = off, .start = off + nseq + 1, .stop = seqs[0].hk ? seqs[0].hk->stop : 0,
                           .from = from, .resid = resid};
    for (int s = 0; s < nseq; s++) {
        if (from) {
            const seer_fwd_hooks_t *h = seqs[s].hk;
            int rc = h && h->from == from ? seer_fwd_check_from(m, from, fb.stop, h->resid, seqs[s].hidden, s + 1, err)
                                          : seer_err_set(err, SEER_EINVAL, "forward: sequence %d of the batch does not start at block %d as sequence 1 does", s + 1, from - 1);
            if (rc < 0) {
                free(own);
                free(off);
                free(resid);
                return rc;
            }
            resid[s] = h->resid;
        }
        own[s] = seqs[s];
        if (own[s].hk && seer_hookset_empty(own[s].hk->set)) own[s].hk = NULL;
        off[s] = fb.N;
        fb.N += seqs[s].n;
        fb.start[s] = seqs[s].cache->len;
        if (seqs[s].cache->max_tokens > fb.max_len) fb.max_len = seqs[s].cache->max_tokens;
    }
    off[nseq] = fb.N;
    int saved_fast = seer_k_fast_bf16; /* a hook may run another model's forward inside this one */
    seer_k_fast_bf16 = m->fast_bf16;
    int rc = m->arch->forward(m, &fb, err);
    seer_k_fast_bf16 = saved_fast;
    /* A failed pass (a hook raised) must not leave half-written entries counted in a cache, nor
     * does a stopped one add any, nor one that began past block 0. */
    if (rc < 0 || from)
        for (int s = 0; s < nseq; s++)
            if (rc < 0 || !seqs[s].cached_below) seqs[s].cache->len = fb.start[s];
    if (rc == SEER_ESTOP) rc = 0;
    free(own);
    free(off);
    free(resid);
    return rc;
}
