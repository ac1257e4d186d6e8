/* q, k and v, then gate and up, of the 0.5B bench model's 36 layers (1024 wide; 1024 + 256 + 256
 * and 2 x 2816 rows, bf16), in precision = "fast": one seer_k_linear_rows call per matrix against
 * seer_k_linear_multi (the activations packed once, one loop over every matrix's rows). The
 * weights (517 MB) come from memory as in a decode step; wall time, best of 7; random weights,
 * nothing checked (tests/unit/test_kernels.c checks the bits). Needs AVX512_BF16 (else fast runs
 * the default kernels and both sides are one call each).
 * Build and run: make bench-multi (ARGS="TOKENS THREADS", default 16 2). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model/model_private.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int make(seer_weight_t *w, int rows, int cols, uint64_t *s) {
    size_t n = (size_t)rows * (size_t)cols;
    uint16_t *d = aligned_alloc(64, n * 2);
    if (!d) return -1;
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        d[i] = seer_f32_to_bf16(((float)(*s >> 40) / 16777216.0f - 0.5f) * 0.04f);
    }
    *w = (seer_weight_t){.dtype = SEER_BF16, .data = d, .rows = rows, .cols = cols};
    return 0;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 16, threads = argc > 2 ? atoi(argv[2]) : 2;
    if (n < 1 || n > 64 || threads < 1 || threads > 256) {
        fprintf(stderr, "linear_multi: usage: linear_multi [TOKENS 1..64] [THREADS 1..256]\n");
        return 2;
    }
    enum { LAYERS = 36, D = 1024, KV = 256, I = 2816 };
    static seer_weight_t q[LAYERS], k[LAYERS], v[LAYERS], g[LAYERS], u[LAYERS];
    uint64_t s = 12345;
    for (int l = 0; l < LAYERS; l++)
        if (make(&q[l], D, D, &s) || make(&k[l], KV, D, &s) || make(&v[l], KV, D, &s) || make(&g[l], I, D, &s) ||
            make(&u[l], I, D, &s)) {
            fprintf(stderr, "linear_multi: out of memory for the weights (517 MB)\n");
            return 1;
        }
    seer_pool_t *pool = seer_pool_new(threads);
    float *x = malloc(sizeof(float) * (size_t)n * D), *y[3];
    for (int i = 0; i < 3; i++) y[i] = malloc(sizeof(float) * (size_t)n * I);
    if (!pool || !x || !y[0] || !y[1] || !y[2]) {
        fprintf(stderr, "linear_multi: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n * D; i++) x[i] = (float)(i % 13) * 0.1f - 0.6f;
    seer_k_fast_bf16 = 1;
    double one = 1e9, multi = 1e9;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now();
        for (int l = 0; l < LAYERS; l++) {
            seer_k_linear_rows(pool, y[0], x, n, &q[l], NULL);
            seer_k_linear_rows(pool, y[1], x, n, &k[l], NULL);
            seer_k_linear_rows(pool, y[2], x, n, &v[l], NULL);
            seer_k_linear_rows(pool, y[0], x, n, &g[l], NULL);
            seer_k_linear_rows(pool, y[1], x, n, &u[l], NULL);
        }
        double t1 = now();
        for (int l = 0; l < LAYERS; l++) {
            float *ys[3] = {y[0], y[1], y[2]};
            const seer_weight_t *qkv[3] = {&q[l], &k[l], &v[l]}, *gu[2] = {&g[l], &u[l]}, *none[3] = {NULL, NULL, NULL};
            seer_k_linear_multi(pool, 3, ys, x, n, qkv, none, 0);
            seer_k_linear_multi(pool, 2, ys, x, n, gu, none, 0);
        }
        double t2 = now();
        if (t1 - t0 < one) one = t1 - t0;
        if (t2 - t1 < multi) multi = t2 - t1;
    }
    printf("q, k, v, gate, up of 36 layers, %d token(s), %d thread(s), fast bf16 (%s): one call each %.2f ms, "
           "seer_k_linear_multi %.2f ms (%.3fx)\n",
           n, threads, seer_k_fast_kind(NULL) ? seer_k_fast_kind(NULL) : "neither AMX nor VDPBF16PS runs fast here: default kernels", one * 1e3,
           multi * 1e3, one / multi);
    return 0;
}
