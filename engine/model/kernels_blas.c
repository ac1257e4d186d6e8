/* Prefill through OpenBLAS: with many tokens a linear layer is a real GEMM, where a tuned BLAS
 * beats the register-blocked kernel in kernels.c (make bench measures both). The output rows
 * are cut into fixed blocks of ROW_BLOCK rows, whatever the thread count, and seer's own pool
 * hands the blocks to threads that each run a single-threaded sgemm: every call has the same
 * shape, so OpenBLAS picks the same kernel and sums each element in the same order, and results
 * (and seeded generations) do not depend on SEER_THREADS. Matrices that read the same x (q, k
 * and v; gate and up) are one job of all their blocks (seer_k_linear_blas_multi). bf16/f16
 * weights are widened a block of rows at a time into per-thread scratch, never into a full f32
 * copy.
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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model_private.h"

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 }; /* CBLAS constants */
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c, int ldc);
static sgemm_fn p_sgemm;
static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

int seer_k_blas_own_haswell(void) {
#if defined(__x86_64__)
    return seer_k_linear_simd() == 1 && !seer_k_intel_avx512();
#else
    return 0;
#endif
}

static void blas_load(void) {
    static const char *const libs[] = {"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                                       "libopenblas.so.0"};
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    /* OpenBLAS 0.3.21 does not recognise some current Xeons (inside VMs too) and falls back to
     * its SSE3 "Prescott" kernels, 4x slower here: name the core, unless the user chose one, as
     * seer's own linear kernels choose their family (seer_k_linear_simd): SkylakeX's AVX-512
     * kernels on Intel CPUs with AVX-512 (whichever family seer runs there) and wherever seer runs
     * its AVX-512 family, Haswell's AVX2 kernels elsewhere, AMD CPUs with AVX-512 included. On the Zen 4 VM (2-vCPU EPYC, 2026-12-01, the 0.5B model,
     * tests/bench/model_seer.lua, OPENBLAS_CORETYPE alternating, three rounds) Haswell's took a
     * 512-token prefill from 186-197 to 213-215 tok/s at f32 on two threads, 180-190 to 203-211 at
     * bf16, and a 256-token f32 one on one thread from 100-101 to 109 (Zen 4 runs a 512-bit FMA as
     * two 256-bit halves); and SkylakeX's sgemm gives a row bits that depend on the call's
     * size, so no row period holds there (find_period below). */
    if (!getenv("OPENBLAS_CORETYPE")) {
#if defined(__x86_64__)
        /* (Intel CPUs with AVX-512 run seer's AVX2 family but keep SkylakeX's sgemm: a 512-token f32
         * prefill of the 0.5B model at 2 threads on a 2-core AMX Xeon VM, 2026-12-02, 271-276 tok/s
         * against 210-211 with Haswell's) */
        int family = seer_k_linear_simd();
        if (family == 1 && seer_k_blas_own_haswell())
            setenv("OPENBLAS_CORETYPE", "Haswell", 1);
        else if (family >= 1)
            setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
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

/* The row blocks of up to GEMM_MULTI matrices that read the same x (q, k and v; gate and up),
 * numbered one after another: block b of the job is block b - first[i] of matrix i. */
enum { GEMM_MULTI = 8 };

typedef struct {
    float *const *ys;
    const float *x;
    int n;
    const seer_weight_t *const *ws;
    size_t first[GEMM_MULTI + 1];
    int failed;
} gemm_job;

static void widen_rows(const seer_weight_t *w, int64_t r0, int64_t nr, float *dst) {
    seer_k_widen16(dst, (const uint16_t *)w->data + (size_t)r0 * (size_t)w->cols, (size_t)nr * (size_t)w->cols,
                   w->dtype == SEER_BF16);
}

static void gemm_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    gemm_job *j = ctx;
    float *scratch = NULL;
    int i = 0;
    for (size_t b = begin; b < end; b++) {
        while (b >= j->first[i + 1]) i++;
        const seer_weight_t *w = j->ws[i];
        int64_t rows = w->rows, cols = w->cols;
        int64_t r0 = (int64_t)(b - j->first[i]) * ROW_BLOCK;
        int64_t nr = rows - r0 < ROW_BLOCK ? rows - r0 : ROW_BLOCK;
        const float *wf = (const float *)w->data + (size_t)r0 * (size_t)cols;
        if (w->dtype != SEER_F32) {
            if (!scratch && !(scratch = malloc((size_t)ROW_BLOCK * (size_t)cols * sizeof(float)))) {
                j->failed = 1;
                return;
            }
            widen_rows(w, r0, nr, scratch);
            wf = scratch;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, (int)nr, (int)cols, 1.0f, j->x, (int)cols, wf,
                    (int)cols, 0.0f, j->ys[i] + r0, (int)rows);
    }
    free(scratch);
}

/* ---- the row period of sgemm ------------------------------------------------------------------
 * OpenBLAS's sgemm gives a row of x another bits at another row count: it cuts the rows into
 * tiles of its kernel's unroll (12 for the Haswell kernel seer asks for on the Zen 3 VM), and a row's bits
 * depend on its place in a tile (tail tiles run narrower kernels). Measured: the rows a call
 * starting `off` rows later computes are the bits of the longer call's exactly when off is a
 * multiple of that unroll, tails included. So a prompt's rest after a shared beginning of `lead`
 * rows (seer_batch_seq_t.paths) runs with lead % period zero rows in front of it: its rows sit
 * where the whole prompt's call put them. The period is found once per process by trying it:
 * the smallest of the candidates for which every offset that is a multiple of it gives the
 * longer call's bits on random data, over shapes seer calls (widths past a K block, a LoRA
 * rank's narrow output, few output rows against a hundred or more tokens); 0 where none does
 * (then no beginning is shared on the GEMM path). The SkylakeX kernels (OPENBLAS_CORETYPE=
 * SkylakeX: Intel CPUs with AVX-512, or a user's choice) have none: on the Zen 4 VM every
 * candidate gave other bits on some of a grid of 528 shapes (66 to 331 of them), among them 13
 * output rows of a 96-wide input at 94 tokens, which the first four shapes below missed (they
 * found 24, and a shared beginning then gave other logits than the whole prompt:
 * tests/lua/test_prefix_sharing.lua failed there); the Haswell kernels hold 12 on every shape
 * of the grid. */
static int g_row_period;
static pthread_once_t g_period_once = PTHREAD_ONCE_INIT;

static int period_holds(int u, int N, int K, const float *x, const float *w, float *c1, float *c2, int L) {
    p_sgemm(ROW_MAJOR, NO_TRANS, TRANS, L, N, K, 1.0f, x, K, w, K, 0.0f, c1, N);
    for (int off = u; off < L; off += u) {
        p_sgemm(ROW_MAJOR, NO_TRANS, TRANS, L - off, N, K, 1.0f, x + (size_t)off * (size_t)K, K, w, K, 0.0f, c2, N);
        if (memcmp(c1 + (size_t)off * (size_t)N, c2, sizeof(float) * (size_t)(L - off) * (size_t)N) != 0) return 0;
    }
    return 1;
}

static void find_period(void) {
    static const int cand[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128};
    static const int shapes[][3] = {{256, 96, 157}, {256, 1100, 131}, {8, 200, 101}, {100, 64, 263},
                                    {13, 96, 94},   {8, 64, 157},     {4, 1024, 263}, {32, 300, 100}};
    if (!blas_ready()) return;
    enum { LMAX = 263, NMAX = 256, KMAX = 1100 };
    float *x = malloc(sizeof(float) * LMAX * KMAX), *w = malloc(sizeof(float) * NMAX * KMAX);
    float *c1 = malloc(sizeof(float) * LMAX * NMAX), *c2 = malloc(sizeof(float) * LMAX * NMAX);
    if (x && w && c1 && c2) {
        uint32_t r = 12345;
        for (size_t i = 0; i < (size_t)LMAX * KMAX; i++) r = r * 1103515245u + 12345u, x[i] = (float)(r >> 8) / 16777216.0f - 0.5f;
        for (size_t i = 0; i < (size_t)NMAX * KMAX; i++) r = r * 1103515245u + 12345u, w[i] = (float)(r >> 8) / 16777216.0f - 0.5f;
        for (size_t c = 0; c < sizeof cand / sizeof cand[0] && !g_row_period; c++) {
            int ok = 1;
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0] && ok; s++)
                ok = period_holds(cand[c], shapes[s][0], shapes[s][1], x, w, c1, c2, shapes[s][2]);
            if (ok) g_row_period = cand[c];
        }
    }
    free(x);
    free(w);
    free(c1);
    free(c2);
}

int seer_k_blas_row_period(void) {
    if (seer_k_gemm_own()) return 1; /* every row the same bits in any call (kernels_gemm.c) */
    pthread_once(&g_period_once, find_period);
    return g_row_period;
}

static void add_bias(float *y, int n, int64_t rows, const seer_weight_t *bias) {
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

int seer_k_linear_blas_multi(seer_pool_t *p, int count, float *const *ys, const float *x, int n, const seer_weight_t *const *ws,
                             const seer_weight_t *const *biases, int lead) {
    if (count < 1 || count > GEMM_MULTI) return 0;
    if (seer_k_gemm_own()) {
        /* seer's own GEMM (kernels_gemm.c): a row's bits do not depend on the call, so lead needs
         * no padding; out of memory: 0, and the caller's per-token kernels run */
        if (!seer_k_gemm_multi(p, count, ys, x, n, ws)) return 0;
        for (int i = 0; i < count; i++)
            if (biases && biases[i] && biases[i]->data) add_bias(ys[i], n, ws[i]->rows, biases[i]);
        return 1;
    }
    if (!blas_ready()) return 0;
    const int64_t cols = ws[0]->cols;
    for (int i = 0; i < count; i++)
        if ((ws[i]->dtype != SEER_F32 && ws[i]->dtype != SEER_BF16 && ws[i]->dtype != SEER_F16) || ws[i]->cols != cols)
            return 0;
    int period = lead > 0 ? seer_k_blas_row_period() : 0, pad = period ? lead % period : 0;
    if (pad) { /* zero rows in front, so that x's rows sit where the whole call put them */
        float *xp = calloc((size_t)(pad + n) * (size_t)cols, sizeof(float));
        float *yp[GEMM_MULTI] = {0};
        int ok = xp != NULL;
        for (int i = 0; i < count && ok; i++) ok = (yp[i] = malloc(sizeof(float) * (size_t)(pad + n) * (size_t)ws[i]->rows)) != NULL;
        if (ok) {
            memcpy(xp + (size_t)pad * (size_t)cols, x, sizeof(float) * (size_t)n * (size_t)cols);
            ok = seer_k_linear_blas_multi(p, count, yp, xp, pad + n, ws, biases, 0);
            for (int i = 0; i < count && ok; i++)
                memcpy(ys[i], yp[i] + (size_t)pad * (size_t)ws[i]->rows, sizeof(float) * (size_t)n * (size_t)ws[i]->rows);
        }
        free(xp);
        for (int i = 0; i < count; i++) free(yp[i]);
        return ok;
    }
    /* every matrix's blocks in one pool job: a matrix of one block (k and v of a grouped-query
     * layer) no longer leaves the other threads idle, and the blocks of gate and up split evenly;
     * each block is the same sgemm call as alone, so the bits do not change */
    gemm_job j = {.ys = ys, .x = x, .n = n, .ws = ws};
    for (int i = 0; i < count; i++) j.first[i + 1] = j.first[i] + (size_t)((ws[i]->rows + ROW_BLOCK - 1) / ROW_BLOCK);
    size_t nblocks = j.first[count];
    size_t block_work = (size_t)ROW_BLOCK * (size_t)cols * (size_t)n;
    size_t min_blocks = block_work >= 2 * SEER_PAR_WORK ? 1 : (2 * SEER_PAR_WORK + block_work - 1) / block_work;
    seer_pool_for(p, nblocks, min_blocks, gemm_chunk, &j);
    if (j.failed) return 0; /* out of memory for scratch: the register-blocked kernel needs none */
    for (int i = 0; i < count; i++)
        if (biases && biases[i] && biases[i]->data) add_bias(ys[i], n, ws[i]->rows, biases[i]);
    return 1;
}

int seer_k_linear_blas(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias,
                       int lead) {
    return seer_k_linear_blas_multi(p, 1, &y, x, n, &w, &bias, lead);
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
    /* a bf16 cache: a KV head's keys and values widened into [L][hd] scratch */
    float *kw = a->kc16 ? malloc((size_t)L * (size_t)hd * 2 * sizeof(float)) : NULL, *vw = kw ? kw + (size_t)L * (size_t)hd : NULL;
    if (!s || (a->kc16 && !kw)) {
        free(s);
        free(kw);
        j->failed = 1;
        return;
    }
    size_t widened = (size_t)-1; /* the KV head whose keys and values kw holds */
    int kw0 = 0;                   /* from this position (the first block's first key) */
    if (a->window > 0 && a->start - a->window + 1 > 0) kw0 = a->start - a->window + 1;
    for (size_t h = begin; h < end; h++) {
        size_t kv_off = (h / (size_t)group) * (size_t)hd;
        if (kw && widened != h / (size_t)group) {
            /* a bf16 cache: the KV head's keys and values widened once for its query heads and
             * every query block (each block reads a stretch of them) */
            for (int p = kw0; p < L; p++) {
                const uint16_t *kr = a->kc16 + (size_t)p * (size_t)kvd + kv_off, *vr = a->vc16 + (size_t)p * (size_t)kvd + kv_off;
                seer_k_widen16(kw + (size_t)(p - kw0) * (size_t)hd, kr, (size_t)hd, 1);
                seer_k_widen16(vw + (size_t)(p - kw0) * (size_t)hd, vr, (size_t)hd, 1);
            }
            widened = h / (size_t)group;
        }
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
                kb = kw + (size_t)(k0 - kw0) * (size_t)hd, vb = vw + (size_t)(k0 - kw0) * (size_t)hd;
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
    if (seer_k_gemm_own()) return seer_k_attention_own(p, a); /* kernels_gemm.c */
    if (!blas_ready()) return 0;
    attn_gemm_job j = {.a = a};
    size_t head_work = 2u * (size_t)a->n * (size_t)(a->start + a->n) * (size_t)a->hd;
    size_t min_heads = head_work >= 2 * SEER_PAR_WORK ? 1 : (2 * SEER_PAR_WORK + head_work - 1) / head_work;
    seer_pool_for(p, (size_t)a->H, min_heads, attn_gemm_chunk, &j);
    return !j.failed;
}
