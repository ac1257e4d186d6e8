/* The batched per-token linear kernel alone (seer_k_linear_rows, the path a decode step of a
 * batch takes), on the 0.5B bench model's matrix shapes, one thread: GFLOP/s from the thread's
 * CPU time (best of REPS), so a busy machine disturbs it less than wall time. Random weights;
 * nothing is checked here (tests/unit/test_kernels.c checks the results).
 * Build: make build/bench/linear_kernel (or make bench-kernel, which also runs it).
 * Usage: build/bench/linear_kernel [TOKENS...]   (default 1 4 16)
 * Environment: REPS (best of, default 9); SHAPES="ROWSxCOLS,..." other matrix shapes (a small one,
 * e.g. 96x1024, runs from L2); COLD=1 streams twice the L3 (64 MiB at least) through the caches before every rep, so the
 * weights come from memory as in a model's forward pass (the default leaves a matrix of up to a
 * few MiB in L3, which measures the kernel, not its overlap with the memory); FAST=1 measures
 * bf16 in precision = "fast" (VDPBF16PS on activations rounded to bf16, where the CPU has
 * AVX512_BF16; elsewhere the same kernels as the default); DTYPE=f32, bf16 or f16 measures that one
 * alone (a profile of one dtype's calls; f16 runs only when asked for). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cold_cache.h"
#include "model/model_private.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int shapes[16][2] = {{2816, 1024}, {1024, 2816}, {1024, 1024}}, nshapes = 3;
    const char *sh = getenv("SHAPES");
    if (sh && *sh) {
        nshapes = 0;
        for (const char *p = sh; *p && nshapes < 16;) {
            int r = 0, c = 0, used = 0;
            if (sscanf(p, "%dx%d%n", &r, &c, &used) != 2 || r <= 0 || c <= 0) {
                fprintf(stderr, "linear_kernel: SHAPES must be ROWSxCOLS[,ROWSxCOLS...] with positive sizes, got '%s'\n", sh);
                return 2;
            }
            shapes[nshapes][0] = r, shapes[nshapes][1] = c, nshapes++;
            p += used;
            if (*p == ',') p++;
        }
    }
    unsigned char *flush = cold_buffer("linear_kernel");
    int toks[16], nt = 0;
    for (int i = 1; i < argc && nt < 16; i++) toks[nt++] = atoi(argv[i]);
    if (!nt) toks[nt++] = 1, toks[nt++] = 4, toks[nt++] = 16;
    int reps = getenv("REPS") ? atoi(getenv("REPS")) : 9;
    seer_pool_t *pool = seer_pool_new(1);
    seer_k_fast_bf16 = getenv("FAST") && atoi(getenv("FAST"));
    uint64_t s = 12345;
    const char *only = getenv("DTYPE");
    if (only && *only && strcmp(only, "f32") && strcmp(only, "bf16") && strcmp(only, "f16")) {
        fprintf(stderr, "linear_kernel: DTYPE must be f32, bf16 or f16 (or unset for f32 and bf16), got '%s'\n", only);
        return 2;
    }
    static const char *const names[] = {"f32", "bf16", "f16"};
    static const seer_dtype_t dts[] = {SEER_F32, SEER_BF16, SEER_F16};
    for (int d = 0; d < 3; d++) {
        seer_dtype_t dt = dts[d];
        if (only && *only ? strcmp(only, names[d]) != 0 : d == 2) continue;
        for (int k = 0; k < nshapes; k++) {
            int rows = shapes[k][0], cols = shapes[k][1];
            size_t n = (size_t)rows * (size_t)cols;
            void *wd = malloc(n * (d ? 2 : 4));
            for (size_t i = 0; i < n; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                float v = ((float)(s >> 40) / 16777216.0f - 0.5f) * 0.04f;
                if (d == 1) ((uint16_t *)wd)[i] = seer_f32_to_bf16(v);
                else if (d == 2) ((uint16_t *)wd)[i] = seer_f32_to_f16(v);
                else ((float *)wd)[i] = v;
            }
            seer_weight_t W = {.dtype = dt, .data = wd, .rows = rows, .cols = cols};
            for (int q = 0; q < nt; q++) {
                int T = toks[q];
                float *x = malloc(sizeof(float) * (size_t)T * (size_t)cols), *y = malloc(sizeof(float) * (size_t)T * (size_t)rows);
                for (size_t i = 0; i < (size_t)T * (size_t)cols; i++) x[i] = (float)(i % 17) * 0.1f - 0.8f;
                double best = 1e9;
                for (int r = 0; r < reps; r++) {
                    cold_flush(flush);
                    double t0 = cpu_now();
                    seer_k_linear_rows(pool, y, x, T, &W, NULL);
                    double dt_ = cpu_now() - t0;
                    if (dt_ < best) best = dt_;
                }
                printf("%-4s %4dx%-4d tokens %2d: %7.1f us  %6.1f GFLOP/s  %5.1f GB/s of weights\n", names[d], rows,
                       cols, T, best * 1e6, 2.0 * (double)n * T / best * 1e-9, (double)n * (d ? 2 : 4) / best * 1e-9);
                free(x);
                free(y);
            }
            free(wd);
        }
    }
    seer_pool_free(pool);
    free(flush);
    return 0;
}
