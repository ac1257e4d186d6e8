/* Paired A/B of the per-token linear kernel (seer_k_linear_rows): two builds of
 * engine/model/kernels.c linked into one program under the prefixes A_ and B_
 * (tests/bench/kernel_ab.sh makes them), called alternately on the same weights and tokens, each
 * rep timing A then B or B then A. This VM's speed drifts 1.5-2x from minute to minute, which
 * swamps a few percent between two programs run one after the other; calls a millisecond apart
 * see the same minute, so the per-rep ratio B/A is steady where the raw GFLOP/s are not.
 * Prints, per dtype and shape, both medians and the median of the per-rep time ratios B/A, and
 * checks that A and B wrote the same bits.
 * Usage (through kernel_ab.sh): kernel_pair [TOKENS]   (default 16)
 * Environment: REPS (default 41); THREADS (default 1: thread CPU time; more: wall time);
 * COLD=1 reads twice the L3 (64 MiB at least; cold_cache.h) between calls so the weights come from memory; HUGE=1 puts the weights
 * on transparent huge pages, as a model read into memory has them; DT=f32,bf16 (default both). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cold_cache.h"
#include "model/model_private.h"

void A_seer_k_linear_rows(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias);
void B_seer_k_linear_rows(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias);

static double now(int wall) {
    struct timespec t;
    clock_gettime(wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

int main(int argc, char **argv) {
    static const int shapes[3][2] = {{2816, 1024}, {1024, 2816}, {1024, 1024}};
    int T = argc > 1 ? atoi(argv[1]) : 16, reps = env_int("REPS", 41), threads = env_int("THREADS", 1);
    int huge = env_int("HUGE", 0);
    const char *dts = getenv("DT") && *getenv("DT") ? getenv("DT") : "f32,bf16";
    if (T < 1 || T > 4096 || reps < 1 || threads < 1) {
        fprintf(stderr, "kernel_pair: TOKENS must be 1-4096, REPS and THREADS at least 1\n");
        return 2;
    }
    unsigned char *flush = cold_buffer("kernel_pair");
    seer_pool_t *pool = seer_pool_new(threads);
    uint64_t s = 12345;
    int differ = 0;
    for (int d = 0; d < 2; d++) {
        if (!strstr(dts, d ? "bf16" : "f32")) continue;
        for (int k = 0; k < 3; k++) {
            int rows = shapes[k][0], cols = shapes[k][1];
            size_t n = (size_t)rows * (size_t)cols, huge_sz = (size_t)2 << 20;
            size_t bytes = (n * (d ? 2 : 4) + huge_sz - 1) & ~(huge_sz - 1);
            void *wd = aligned_alloc(huge_sz, bytes);
            float *x = malloc(sizeof(float) * (size_t)T * (size_t)cols);
            float *ya = malloc(sizeof(float) * (size_t)T * (size_t)rows), *yb = malloc(sizeof(float) * (size_t)T * (size_t)rows);
            double *ta = malloc(sizeof(double) * (size_t)reps), *tb = malloc(sizeof(double) * (size_t)reps);
            double *rt = malloc(sizeof(double) * (size_t)reps);
            if (!wd || !x || !ya || !yb || !ta || !tb || !rt) {
                fprintf(stderr, "kernel_pair: out of memory\n");
                return 2;
            }
            if (huge) (void)madvise(wd, bytes, MADV_HUGEPAGE);
            for (size_t i = 0; i < n; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                float v = ((float)(s >> 40) / 16777216.0f - 0.5f) * 0.04f;
                if (d) ((uint16_t *)wd)[i] = seer_f32_to_bf16(v);
                else ((float *)wd)[i] = v;
            }
            for (size_t i = 0; i < (size_t)T * (size_t)cols; i++) x[i] = (float)(i % 17) * 0.1f - 0.8f;
            seer_weight_t W = {.dtype = d ? SEER_BF16 : SEER_F32, .data = wd, .rows = rows, .cols = cols};
            int bwins = 0;
            for (int r = 0; r < reps; r++) {
                for (int o = 0; o < 2; o++) {
                    int isb = (r & 1) ^ o;
                    cold_flush(flush);
                    double t0 = now(threads > 1);
                    if (isb) B_seer_k_linear_rows(pool, yb, x, T, &W, NULL);
                    else A_seer_k_linear_rows(pool, ya, x, T, &W, NULL);
                    double dt = now(threads > 1) - t0;
                    if (isb) tb[r] = dt;
                    else ta[r] = dt;
                }
                rt[r] = tb[r] / ta[r];
                bwins += tb[r] < ta[r];
            }
            int same = memcmp(ya, yb, sizeof(float) * (size_t)T * (size_t)rows) == 0;
            differ |= !same;
            qsort(ta, (size_t)reps, sizeof(double), cmp);
            qsort(tb, (size_t)reps, sizeof(double), cmp);
            qsort(rt, (size_t)reps, sizeof(double), cmp);
            double fl = 2.0 * (double)n * T * 1e-9;
            printf("%-4s %4dx%-4d tokens %2d: A %5.1f B %5.1f GFLOP/s (medians), time B/A %.3f (median of %d pairs), B faster in %d%s\n",
                   d ? "bf16" : "f32", rows, cols, T, fl / ta[reps / 2], fl / tb[reps / 2], rt[reps / 2], reps, bwins,
                   same ? "" : "  RESULTS DIFFER");
            free(x), free(ya), free(yb), free(ta), free(tb), free(rt), free(wd);
        }
    }
    seer_pool_free(pool);
    free(flush);
    return differ ? 1 : 0;
}
