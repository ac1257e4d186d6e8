/* Whole models on a real GPU against the CPU backend (the reference): logits, hooks, the KV
 * cache and greedy generation. Every test skips with "skipped: no GPU" where the driver or a
 * GPU is missing (this includes the machine CI runs on); run it on a GPU machine with
 * `make test` or build/tests/test_cuda_gpu.
 *
 * Tolerances (bf16 on the GPU against f32 on the CPU). The GPU runs bf16 weights (relative
 * rounding 2^-9), bf16 matrix inputs for prefill and a bf16 KV cache, with f32 accumulation and
 * f32 activations; the CPU runs the checkpoint's weights in f32. Over a few layers that gives
 * logit errors of the order of 1% of the logit range, so:
 *   LOGIT_TOL   max |gpu - cpu| <= 3% of max |cpu| over every logit
 *   the argmax agrees wherever the CPU's top-2 margin exceeds twice the observed max error. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cudrv.h"
#include "cuda/gpu_model.h"
#include "hooks/hooks.h"
#include "model/model.h"

#define LOGIT_TOL 0.03

static void need_gpu(void) {
    char why[512];
    if (seer_cuda_device_count(why, sizeof why) <= 0) cr_skip_test("skipped: no GPU (%s)", why);
}

static seer_model_t *load(const char *dir, const char *device) {
    seer_model_t *m = NULL;
    seer_err_t err;
    seer_model_opts_t o = {.threads = 2, .device = device};
    cr_assert_eq(seer_model_load(&m, dir, &o, &err), 0, "%s: %s", dir, err.msg);
    return m;
}

/* logits [n][V] of a fresh forward of ids; hooks may be NULL. */
static float *run(seer_model_t *m, const int32_t *ids, int n, const seer_fwd_hooks_t *hk) {
    const seer_model_config_t *c = seer_model_config(m);
    float *lg = malloc(sizeof(float) * (size_t)n * (size_t)c->vocab_size);
    seer_kv_cache_t *kv = NULL;
    seer_err_t err;
    cr_assert_eq(seer_kv_cache_new(&kv, m, 64, &err), 0, "%s", err.msg);
    cr_assert_eq(seer_model_forward_hooked(m, kv, ids, n, lg, 1, NULL, hk, &err), 0, "%s", err.msg);
    seer_kv_cache_free(kv);
    return lg;
}

static void compare(const char *what, const float *cpu, const float *gpu, int rows, int V) {
    double mx = 0, err = 0;
    for (size_t i = 0; i < (size_t)rows * V; i++) {
        cr_assert(isfinite(gpu[i]), "%s: logit %zu is %f", what, i, gpu[i]);
        if (fabs(cpu[i]) > mx) mx = fabs(cpu[i]);
        if (fabs(cpu[i] - gpu[i]) > err) err = fabs(cpu[i] - gpu[i]);
    }
    cr_assert_leq(err, LOGIT_TOL * mx, "%s: max |gpu - cpu| = %g, %.2f%% of max |logit| %g", what, err, 100 * err / mx, mx);
    for (int r = 0; r < rows; r++) {
        const float *c = cpu + (size_t)r * V, *g = gpu + (size_t)r * V;
        int a = 0, b = -1, ga = 0;
        for (int i = 1; i < V; i++) {
            if (c[i] > c[a]) b = a, a = i;
            else if (b < 0 || c[i] > c[b]) b = i;
            if (g[i] > g[ga]) ga = i;
        }
        if (b >= 0 && c[a] - c[b] > 2 * err) cr_assert_eq(ga, a, "%s row %d: gpu argmax %d, cpu %d", what, r, ga, a);
    }
    fprintf(stderr, "%s: max |gpu - cpu| %.3g (%.3f%% of max |logit| %.3g)\n", what, err, 100 * err / mx, mx);
}

static const char *models[] = {"tests/fixtures/models/stories260K", "tests/parity/models/llama",
                               "tests/parity/models/llama_tied_bias", "tests/parity/models/mistral",
                               "tests/parity/models/qwen2", "tests/parity/models/qwen3",
                               "tests/parity/models/gemma", "tests/parity/models/gemma2",
                               "tests/parity/models/gemma3"};

Test(cuda_gpu, logits_match_the_cpu_on_every_architecture, .timeout = 300) {
    need_gpu();
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        seer_model_t *c = load(models[i], "cpu"), *g = load(models[i], "cuda:0");
        int V = seer_model_config(c)->vocab_size;
        /* 20 tokens: the prefill GEMM path (n > 8) */
        int32_t ids[20];
        for (int t = 0; t < 20; t++) ids[t] = (t * 37 + 11) % V;
        float *lc = run(c, ids, 20, NULL), *lgp = run(g, ids, 20, NULL);
        compare(models[i], lc, lgp, 20, V);
        free(lgp);
        /* 5 tokens: the decode GEMV path (n <= 8) */
        float *lc5 = run(c, ids, 5, NULL), *lg5 = run(g, ids, 5, NULL);
        compare(models[i], lc5, lg5, 5, V);
        free(lc), free(lc5), free(lg5);
        seer_model_free(c);
        seer_model_free(g);
    }
}

/* Prefill in one pass and then token by token through the cache give the same last logits. */
Test(cuda_gpu, cache_decode_matches_prefill) {
    need_gpu();
    seer_model_t *g = load("tests/parity/models/gemma2", "cuda:0");
    int V = seer_model_config(g)->vocab_size;
    int32_t ids[24];
    for (int t = 0; t < 24; t++) ids[t] = (t * 53 + 7) % V;
    float *all = run(g, ids, 24, NULL);
    seer_kv_cache_t *kv;
    seer_err_t err;
    cr_assert_eq(seer_kv_cache_new(&kv, g, 64, &err), 0);
    float *lg = malloc(sizeof(float) * V);
    cr_assert_eq(seer_model_forward(g, kv, ids, 12, lg, 0, &err), 0, "%s", err.msg);
    for (int t = 12; t < 24; t++) cr_assert_eq(seer_model_forward(g, kv, ids + t, 1, lg, 0, &err), 0, "%s", err.msg);
    compare("gemma2 decode vs prefill", all + (size_t)23 * V, lg, 1, V);
    seer_kv_cache_free(kv);
    free(all), free(lg);
    seer_model_free(g);
}

/* Greedy generation on the GPU (argmax on the device) equals the argmax of the copied logits. */
Test(cuda_gpu, greedy_next_token_on_the_device) {
    need_gpu();
    seer_model_t *g = load("tests/fixtures/models/stories260K", "cuda:0");
    int V = seer_model_config(g)->vocab_size;
    seer_kv_cache_t *a, *b;
    seer_err_t err;
    cr_assert_eq(seer_kv_cache_new(&a, g, 64, &err), 0);
    cr_assert_eq(seer_kv_cache_new(&b, g, 64, &err), 0);
    int32_t ta = 1, tb = 1;
    float *lg = malloc(sizeof(float) * V);
    for (int step = 0; step < 30; step++) {
        int next = -1;
        cr_assert_eq(seer_model_forward_next(g, a, &ta, 1, &next, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(seer_model_forward(g, b, &tb, 1, lg, 0, &err), 0, "%s", err.msg);
        int am = 0;
        for (int i = 1; i < V; i++)
            if (lg[i] > lg[am]) am = i;
        cr_assert_eq(next, am, "step %d", step);
        ta = tb = next;
    }
    free(lg);
    seer_kv_cache_free(a);
    seer_kv_cache_free(b);
    seer_model_free(g);
}

/* Hooks on the GPU: a capture sees what the CPU's capture sees, an add changes the logits as it
 * does on the CPU, and attention-pattern hooks (the host attention path) work. */
Test(cuda_gpu, hooks_match_the_cpu) {
    need_gpu();
    const char *dir = "tests/parity/models/llama";
    seer_model_t *c = load(dir, "cpu"), *g = load(dir, "cuda:0");
    const seer_model_config_t *cfg = seer_model_config(c);
    int V = cfg->vocab_size, D = cfg->hidden_size, n = 10;
    int32_t ids[10];
    for (int t = 0; t < n; t++) ids[t] = (t * 31 + 5) % V;
    seer_err_t err;
    float *vec = malloc(sizeof(float) * D);
    for (int i = 0; i < D; i++) vec[i] = (float)((i % 7) - 3) * 0.5f;
    seer_model_t *ms[2] = {c, g};
    float *logits[2], *cap[2], *pat[2];
    for (int k = 0; k < 2; k++) {
        seer_hookset_t *s = seer_hookset_new(cfg->num_layers);
        seer_intervention_t *capture = seer_iv_capture(&err), *add = seer_iv_add(vec, D, 2.f, &err);
        seer_intervention_t *pcap = seer_iv_capture(&err);
        cr_assert_eq(seer_hookset_add(s, SEER_HP_RESID_POST, 0, capture, &err), 0, "%s", err.msg);
        cr_assert_eq(seer_hookset_add(s, SEER_HP_RESID_MID, 1, add, &err), 0, "%s", err.msg);
        cr_assert_eq(seer_hookset_add(s, SEER_HP_PATTERN, 1, pcap, &err), 0, "%s", err.msg);
        seer_fwd_hooks_t hk = {.set = s, .prompt_len = n};
        logits[k] = run(ms[k], ids, n, &hk);
        cr_assert_eq(seer_iv_capture_count(capture), 1);
        cr_assert_eq(seer_iv_capture_count(pcap), 1);
        const seer_capture_chunk_t *ch = seer_iv_capture_chunk(capture, 0);
        cap[k] = malloc(sizeof(float) * (size_t)n * D);
        memcpy(cap[k], ch->data, sizeof(float) * (size_t)n * D);
        const seer_capture_chunk_t *pc = seer_iv_capture_chunk(pcap, 0);
        size_t np = (size_t)pc->shape[0] * pc->shape[1] * pc->shape[2];
        pat[k] = malloc(sizeof(float) * np);
        memcpy(pat[k], pc->data, sizeof(float) * np);
        seer_iv_release(capture), seer_iv_release(add), seer_iv_release(pcap);
        seer_hookset_free(s);
    }
    compare("llama with hooks", logits[0], logits[1], n, V);
    double mx = 0, e = 0;
    for (size_t i = 0; i < (size_t)n * D; i++) {
        mx = fmax(mx, fabs(cap[0][i]));
        e = fmax(e, fabs(cap[0][i] - cap[1][i]));
    }
    cr_assert_leq(e, LOGIT_TOL * mx, "captured resid_post: %g of %g", e, mx);
    size_t np = (size_t)cfg->num_heads * n * n;
    for (size_t i = 0; i < np; i++) cr_assert_leq(fabs(pat[0][i] - pat[1][i]), 0.02, "pattern entry %zu", i);
    for (int k = 0; k < 2; k++) free(logits[k]), free(cap[k]), free(pat[k]);
    free(vec);
    seer_model_free(c);
    seer_model_free(g);
}

/* A decode step of several sequences runs as one pass on the GPU (seer_gpu_forward_batch): each
 * sequence's logits equal those of the same step run alone to 1e-4 of the largest logit (the
 * linear layers take the same GEMV as one sequence, also for the batch of 10, past the GEMV's 8
 * tokens per pass; attention's split over keys differs), with sequences at
 * different positions (prompts of 5 + s tokens), each with its own intervention or none, and the
 * captures they make equal the ones made alone.
 * Architectures: llama, gemma2 (sliding window of 5, soft-caps, sandwich norms), qwen3 (q/k
 * norms). */
Test(cuda_gpu, batched_decode_matches_one_at_a_time, .timeout = 300) {
    need_gpu();
    static const char *dirs[] = {"tests/parity/models/llama", "tests/parity/models/gemma2", "tests/parity/models/qwen3"};
    enum { MAXS = 10, STEPS = 6 };
    static const int sizes[] = {3, MAXS};
    for (size_t mi = 0; mi < sizeof dirs / sizeof *dirs; mi++)
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const int NS = sizes[si];
        seer_model_t *g = load(dirs[mi], "cuda:0");
        const seer_model_config_t *cfg = seer_model_config(g);
        int V = cfg->vocab_size, D = cfg->hidden_size;
        seer_err_t err;
        float *vec = malloc(sizeof(float) * D);
        for (int i = 0; i < D; i++) vec[i] = (float)((i % 5) - 2) * 0.7f;
        /* [0]: the batch, [1]: one at a time; each its own caches and interventions */
        seer_kv_cache_t *kv[2][MAXS];
        seer_hookset_t *set[2][MAXS];
        seer_intervention_t *cap[2];
        seer_fwd_hooks_t hk[2][MAXS];
        for (int w = 0; w < 2; w++) {
            cap[w] = seer_iv_capture(&err);
            for (int s = 0; s < NS; s++) {
                int plen = 5 + s;
                cr_assert_eq(seer_kv_cache_new(&kv[w][s], g, 64, &err), 0, "%s", err.msg);
                set[w][s] = seer_hookset_new(cfg->num_layers);
                if (s % 3 == 0) {
                    seer_intervention_t *add = seer_iv_add(vec, D, 1.5f, &err);
                    cr_assert_eq(seer_hookset_add(set[w][s], SEER_HP_RESID_MID, 1, add, &err), 0, "%s", err.msg);
                    seer_iv_release(add);
                } else if (s % 3 == 2) {
                    cr_assert_eq(seer_hookset_add(set[w][s], SEER_HP_RESID_POST, 0, cap[w], &err), 0, "%s", err.msg);
                }
                hk[w][s] = (seer_fwd_hooks_t){.set = set[w][s], .prompt_len = plen};
                int32_t ids[16];
                for (int t = 0; t < plen; t++) ids[t] = (t * 29 + 3 + 11 * s) % V;
                cr_assert_eq(seer_model_forward_hooked(g, kv[w][s], ids, plen, NULL, 0, NULL, &hk[w][s], &err), 0,
                             "%s", err.msg);
            }
        }
        int32_t tok[MAXS];
        for (int s = 0; s < NS; s++) tok[s] = 1 + s;
        float *lb = malloc(sizeof(float) * MAXS * (size_t)V), *l1 = malloc(sizeof(float) * MAXS * (size_t)V);
        for (int step = 0; step < STEPS; step++) {
            seer_batch_seq_t seqs[MAXS];
            for (int s = 0; s < NS; s++)
                seqs[s] = (seer_batch_seq_t){.cache = kv[0][s], .tokens = &tok[s], .n = 1, .logits = lb + (size_t)s * V,
                                             .hk = &hk[0][s]};
            cr_assert_eq(seer_model_forward_batch(g, seqs, NS, &err), 0, "%s step %d: %s", dirs[mi], step, err.msg);
            for (int s = 0; s < NS; s++) {
                cr_assert_eq(seer_model_forward_hooked(g, kv[1][s], &tok[s], 1, l1 + (size_t)s * V, 0, NULL, &hk[1][s], &err),
                             0, "%s", err.msg);
                cr_assert_eq(kv[0][s]->len, kv[1][s]->len, "sequence %d: cache lengths", s);
            }
            for (int s = 0; s < NS; s++) {
                double mx = 0, e = 0;
                int am = 0;
                for (int i = 0; i < V; i++) {
                    const float a = lb[(size_t)s * V + i], o = l1[(size_t)s * V + i];
                    cr_assert(isfinite(a), "%s step %d sequence %d: logit %d is %f", dirs[mi], step, s, i, a);
                    mx = fmax(mx, fabs(o));
                    e = fmax(e, fabs(a - o));
                    if (o > l1[(size_t)s * V + am]) am = i;
                }
                cr_assert_leq(e, 1e-4 * mx, "%s batch %d step %d sequence %d: batched vs alone differ by %g (max |logit| %g)",
                              dirs[mi], NS, step, s, e, mx);
                tok[s] = am;
            }
        }
        /* the captures (prompts, then each step) are the same */
        cr_assert_eq(seer_iv_capture_count(cap[0]), seer_iv_capture_count(cap[1]));
        for (int i = 0; i < seer_iv_capture_count(cap[0]); i++) {
            const seer_capture_chunk_t *a = seer_iv_capture_chunk(cap[0], i), *o = seer_iv_capture_chunk(cap[1], i);
            size_t na = (size_t)a->shape[0] * a->shape[1], no = (size_t)o->shape[0] * o->shape[1];
            cr_assert_eq(na, no, "capture %d: %zu vs %zu values", i, na, no);
            for (size_t j = 0; j < na; j++)
                cr_assert_leq(fabs(a->data[j] - o->data[j]), 1e-4 * (1 + fabs(o->data[j])), "capture %d value %zu", i, j);
        }
        fprintf(stderr, "%s: %d batched decode steps of %d sequences match one at a time\n", dirs[mi], STEPS, NS);
        for (int w = 0; w < 2; w++) {
            for (int s = 0; s < NS; s++) {
                seer_kv_cache_free(kv[w][s]);
                seer_hookset_free(set[w][s]);
            }
            seer_iv_release(cap[w]);
        }
        free(lb), free(l1), free(vec);
        seer_model_free(g);
    }
}
