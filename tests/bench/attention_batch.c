/* One layer's decode attention for a batch of sequences, the two ways seer has run it: one
 * seer_k_attention call per sequence, and seer_k_attention_batch (every sequence's items in one
 * parallel loop). The 0.5B bench model's heads (16 query heads, 4 key/value heads, head size 64),
 * one new token per sequence at a given context, wall time per layer, best of 5 rounds of 300;
 * the caches are random (nothing is checked here: tests/unit/test_kernels.c checks the bits).
 * LAYERS (default 1) layers' caches are cycled through, as a forward pass does: with 36, the
 * 0.5B model's, the caches come from memory rather than from the last level cache.
 * Build and run: make bench-attention (ARGS="SEQS CONTEXT THREADS [LAYERS]", default 16 128 2 1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model/model_private.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int ns = argc > 1 ? atoi(argv[1]) : 16, ctx = argc > 2 ? atoi(argv[2]) : 128, threads = argc > 3 ? atoi(argv[3]) : 2;
    int layers = argc > 4 ? atoi(argv[4]) : 1;
    if (ns < 1 || ns > 4096 || ctx < 0 || ctx > 1 << 20 || threads < 1 || threads > 256 || layers < 1 || layers > 256) {
        fprintf(stderr, "attention_batch: usage: attention_batch [SEQS 1..4096] [CONTEXT 0..1048576] [THREADS 1..256] "
                        "[LAYERS 1..256]\n");
        return 2;
    }
    const int H = 16, KH = 4, hd = 64, qd = H * hd, kvd = KH * hd, L = ctx + 1;
    seer_pool_t *pool = seer_pool_new(threads);
    seer_attn_params_t *a = calloc((size_t)ns * (size_t)layers, sizeof *a);
    float *scratch = malloc(sizeof(float) * (size_t)threads * (size_t)L);
    if (!pool || !a || !scratch) {
        fprintf(stderr, "attention_batch: out of memory\n");
        return 1;
    }
    uint64_t s = 12345;
    for (int i = 0; i < ns * layers; i++) {
        float *q = malloc(sizeof(float) * (size_t)qd), *o = malloc(sizeof(float) * (size_t)qd);
        float *kc = malloc(sizeof(float) * (size_t)L * (size_t)kvd), *vc = malloc(sizeof(float) * (size_t)L * (size_t)kvd);
        if (!q || !o || !kc || !vc) {
            fprintf(stderr, "attention_batch: out of memory for %d sequences of %d positions\n", ns, L);
            return 1;
        }
        for (size_t j = 0; j < (size_t)L * (size_t)kvd + (size_t)qd; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            float v = ((float)(s >> 40) / 16777216.0f - 0.5f) * 2.0f;
            if (j < (size_t)qd) q[j] = v;
            else {
                kc[j - (size_t)qd] = v;
                vc[j - (size_t)qd] = v * 0.5f;
            }
        }
        a[i] = (seer_attn_params_t){.q = q, .kc = kc, .vc = vc, .out = o, .scratch = scratch, .n = 1, .start = ctx,
                                    .max_len = L, .H = H, .KH = KH, .hd = hd, .scale = 1.0f / sqrtf((float)hd)};
    }
    double best1 = 1e9, bestb = 1e9;
    for (int round = 0; round < 5; round++) {
        const int N = (300 + layers - 1) / layers * layers;
        double t0 = now();
        for (int k = 0; k < N; k++)
            for (int i = 0; i < ns; i++) seer_k_attention(pool, &a[(k % layers) * ns + i]);
        double t1 = now();
        for (int k = 0; k < N; k++) seer_k_attention_batch(pool, a + (k % layers) * ns, ns);
        double t2 = now();
        if ((t1 - t0) / N < best1) best1 = (t1 - t0) / N;
        if ((t2 - t1) / N < bestb) bestb = (t2 - t1) / N;
    }
    double bytes = 2.0 * (double)ns * (double)(ctx + 1) * (double)kvd * sizeof(float);
    printf("decode attention, %d sequences at a %d-token context, %d thread(s), one layer of %d: one call per sequence "
           "%.1f us, batched %.1f us (%.2fx; the batched call reads its caches at %.1f GB/s)\n",
           ns, ctx, threads, layers, best1 * 1e6, bestb * 1e6, best1 / bestb, bytes / bestb * 1e-9);
    return 0;
}
