/* Prefill through OpenBLAS: with many tokens a linear layer is a real GEMM, where a tuned BLAS
 * beats the register-blocked kernel in kernels.c (make bench measures both). The output rows
 * are cut into fixed blocks of ROW_BLOCK rows, whatever the thread count, and seer's own pool
 * hands the blocks to threads that each run a single-threaded sgemm: every call has the same
 * shape, so OpenBLAS picks the same kernel and sums each element in the same order, and results
 * (and seeded generations) do not depend on SEER_THREADS. bf16/f16 weights are widened a block
 * of rows at a time into per-thread scratch, never into a full f32 copy.
 *
 * OpenBLAS is loaded with dlopen on first use, after OPENBLAS_NUM_THREADS=1 is set: loaded at
 * start-up it would spawn a thread per core that spins beside seer's pool (measured: 35 ms
 * instead of 26 ms for a 256-token stories260K prefill). Only the pthread build is used (its
 * sequential build is not safe to call from several threads at once); without it, seer runs its
 * own kernels and says so once. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "model_private.h"

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 }; /* CBLAS constants */
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c, int ldc);
static sgemm_fn p_sgemm;
static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

static void blas_load(void) {
    static const char *const libs[] = {"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                                       "libopenblas.so.0"};
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    /* OpenBLAS 0.3.21 does not recognise some current Xeons (inside VMs too) and falls back to
     * its SSE3 "Prescott" kernels, 4x slower here: name the core from what the CPU supports,
     * unless the user chose one. */
    if (!getenv("OPENBLAS_CORETYPE")) {
#if defined(__x86_64__)
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
            setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
        else if (seer_k_have_avx2())
            setenv("OPENBLAS_CORETYPE", "Haswell", 1);
#endif
    }
    for (size_t i = 0; i < sizeof libs / sizeof libs[0] && !p_sgemm; i++) {
        void *h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        int (*parallel)(void) = (int (*)(void))dlsym(h, "openblas_get_parallel");
        sgemm_fn f = (sgemm_fn)dlsym(h, "cblas_sgemm");
        if (f && parallel && parallel() == 1) {
            p_sgemm = f;
        } else {
            dlclose(h);
        }
    }
    if (!p_sgemm && getenv("SEER_QUIET_BLAS") == NULL)
        fprintf(stderr, "seer: OpenBLAS (pthread build, Debian's libopenblas0-pthread) not found; prefill runs on "
                        "seer's own kernels, slower for long prompts\n");
}

#define cblas_sgemm(o, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc) \
    p_sgemm(ROW_MAJOR, (ta), (tb), (m), (n), (k), (al), (a), (lda), (b), (ldb), (be), (c), (ldc))
#define CblasRowMajor ROW_MAJOR
#define CblasNoTrans NO_TRANS
#define CblasTrans TRANS

static int blas_ready(void) {
    pthread_once(&g_blas_once, blas_load);
    return p_sgemm != NULL;
}

#define ROW_BLOCK 256

typedef struct {
    float *y;
    const float *x;
    int n;
    const seer_weight_t *w;
    int failed;
} gemm_job;

static void widen_rows(const seer_weight_t *w, int64_t r0, int64_t nr, float *dst) {
    int64_t cols = w->cols;
    for (int64_t r = 0; r < nr; r++) {
        const uint16_t *src = (const uint16_t *)w->data + (size_t)(r0 + r) * (size_t)cols;
        float *out = dst + (size_t)r * (size_t)cols;
        if (w->dtype == SEER_BF16)
            for (int64_t c = 0; c < cols; c++) out[c] = seer_bf16_to_f32(src[c]);
        else
            for (int64_t c = 0; c < cols; c++) out[c] = seer_f16_to_f32(src[c]);
    }
}

static void gemm_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    gemm_job *j = ctx;
    const seer_weight_t *w = j->w;
    int64_t rows = w->rows, cols = w->cols;
    float *scratch = NULL;
    if (w->dtype != SEER_F32 && !(scratch = malloc((size_t)ROW_BLOCK * (size_t)cols * sizeof(float)))) {
        j->failed = 1;
        return;
    }
    for (size_t b = begin; b < end; b++) {
        int64_t r0 = (int64_t)b * ROW_BLOCK;
        int64_t nr = rows - r0 < ROW_BLOCK ? rows - r0 : ROW_BLOCK;
        const float *wf = (const float *)w->data + (size_t)r0 * (size_t)cols;
        if (scratch) {
            widen_rows(w, r0, nr, scratch);
            wf = scratch;
        }
        /* tokens in blocks of SEER_TOKEN_BLOCK from the first: a row's bits depend on the row
         * count of the call (OpenBLAS picks its tails by it), so every block but the last has the
         * same count whatever n is, and a prompt's rest run from a block boundary gets the bits the
         * whole prompt got there (seer_batch_seq_t.paths). Measured no slower than one call. */
        for (int t0 = 0; t0 < j->n; t0 += SEER_TOKEN_BLOCK) {
            int nt = j->n - t0 < SEER_TOKEN_BLOCK ? j->n - t0 : SEER_TOKEN_BLOCK;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nt, (int)nr, (int)cols, 1.0f, j->x + (size_t)t0 * (size_t)cols,
                        (int)cols, wf, (int)cols, 0.0f, j->y + (size_t)t0 * (size_t)rows + r0, (int)rows);
        }
    }
    free(scratch);
}

int seer_k_linear_blas(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias) {
    if (!blas_ready()) return 0;
    if (w->dtype != SEER_F32 && w->dtype != SEER_BF16 && w->dtype != SEER_F16) return 0;
    int64_t rows = w->rows;
    gemm_job j = {.y = y, .x = x, .n = n, .w = w};
    size_t nblocks = (size_t)((rows + ROW_BLOCK - 1) / ROW_BLOCK);
    size_t block_work = (size_t)ROW_BLOCK * (size_t)w->cols * (size_t)n;
    size_t min_blocks = block_work >= 2 * SEER_PAR_WORK ? 1 : (2 * SEER_PAR_WORK + block_work - 1) / block_work;
    seer_pool_for(p, nblocks, min_blocks, gemm_chunk, &j);
    if (j.failed) return 0; /* out of memory for scratch: the register-blocked kernel needs none */
    if (bias && bias->data) {
        for (int t = 0; t < n; t++) {
            float *yt = y + (size_t)t * (size_t)rows;
            for (int64_t r = 0; r < rows; r++) {
                float b = bias->dtype == SEER_F32   ? ((const float *)bias->data)[r]
                          : bias->dtype == SEER_BF16 ? seer_bf16_to_f32(((const uint16_t *)bias->data)[r])
                                                     : seer_f16_to_f32(((const uint16_t *)bias->data)[r]);
                yt[r] += b;
            }
        }
    }
    return 1;
}

/* ---- prefill attention as two GEMMs per head ----------------------------------------------
 * For many query tokens, scores = Q_h K^T and out = softmax(scores) V are matrix products;
 * each head is one task on seer's pool with single-threaded sgemm calls of a fixed shape, so
 * the result does not depend on the thread count. Masking (causal, sliding window), scaling
 * and soft-capping happen between the two products, with the softmax in f32 as in the
 * per-token kernel. */
typedef struct {
    const seer_attn_params_t *a;
    int failed;
} attn_gemm_job;

#define QUERY_BLOCK SEER_TOKEN_BLOCK /* blocks from the call's first query (SEER_TOKEN_BLOCK) */

static void attn_gemm_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    attn_gemm_job *j = ctx;
    const seer_attn_params_t *a = j->a;
    int n = a->n, L = a->start + a->n, hd = a->hd, qd = a->H * hd, kvd = a->KH * hd, group = a->H / a->KH;
    int qb = n < QUERY_BLOCK ? n : QUERY_BLOCK;
    float *s = malloc((size_t)qb * (size_t)L * sizeof(float));
    /* a bf16 cache: each block's keys and values of the head widened into [lb][hd] scratch */
    float *kw = a->kc16 ? malloc((size_t)L * (size_t)hd * 2 * sizeof(float)) : NULL, *vw = kw ? kw + (size_t)L * (size_t)hd : NULL;
    if (!s || (a->kc16 && !kw)) {
        free(s);
        free(kw);
        j->failed = 1;
        return;
    }
    for (size_t h = begin; h < end; h++) {
        size_t kv_off = (h / (size_t)group) * (size_t)hd;
        /* Query rows in fixed blocks: each block multiplies only the keys its rows can see
         * (causal, sliding window), not all L of them. */
        for (int r0 = 0; r0 < n; r0 += qb) {
            int nb = n - r0 < qb ? n - r0 : qb;
            int k0 = 0; /* first key any row of the block sees */
            if (a->window > 0 && a->start + r0 - a->window + 1 > 0) k0 = a->start + r0 - a->window + 1;
            int lb = a->start + r0 + nb - k0; /* keys k0 .. the block's last position */
            const float *kb = kw, *vb = vw;
            int ld = hd;
            if (!kw) {
                kb = a->kc + (size_t)k0 * (size_t)kvd + kv_off, vb = a->vc + (size_t)k0 * (size_t)kvd + kv_off;
                ld = kvd;
            } else {
                for (int p = 0; p < lb; p++) {
                    const uint16_t *kr = a->kc16 + (size_t)(k0 + p) * (size_t)kvd + kv_off, *vr = a->vc16 + (size_t)(k0 + p) * (size_t)kvd + kv_off;
                    for (int i = 0; i < hd; i++) {
                        kw[(size_t)p * (size_t)hd + (size_t)i] = seer_bf16_to_f32(kr[i]);
                        vw[(size_t)p * (size_t)hd + (size_t)i] = seer_bf16_to_f32(vr[i]);
                    }
                }
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, lb, hd, a->scale,
                        a->q + (size_t)r0 * (size_t)qd + h * (size_t)hd, qd, kb, ld, 0.0f, s, lb);
            for (int t = 0; t < nb; t++) {
                float *row = s + (size_t)t * (size_t)lb;
                int pos = a->start + r0 + t;
                int first = 0;
                if (a->window > 0 && pos - a->window + 1 > 0) first = pos - a->window + 1;
                int f = first - k0, l = pos - k0; /* the row's keys, relative to k0 */
                seer_k_softmax_row(row, f, l, lb, a->softcap);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, hd, lb, 1.0f, s, lb, vb, ld, 0.0f,
                        a->out + (size_t)r0 * (size_t)qd + h * (size_t)hd, qd);
        }
    }
    free(s);
    free(kw);
}

int seer_k_attention_blas(seer_pool_t *p, const seer_attn_params_t *a) {
    if (!blas_ready()) return 0;
    attn_gemm_job j = {.a = a};
    size_t head_work = 2u * (size_t)a->n * (size_t)(a->start + a->n) * (size_t)a->hd;
    size_t min_heads = head_work >= 2 * SEER_PAR_WORK ? 1 : (2 * SEER_PAR_WORK + head_work - 1) / head_work;
    seer_pool_for(p, (size_t)a->H, min_heads, attn_gemm_chunk, &j);
    return !j.failed;
}
