/* seer's own f32 GEMM for linear layers on many tokens (a prefill), AVX-512 on Intel CPUs:
 * y[n][rows] = x[n][cols] . W[rows][cols]^T for f32, bf16 or f16 weights, in place of OpenBLAS's
 * sgemm (kernels_blas.c) there.
 *
 * Why: on a 2-core AMX Xeon VM (2026-12-02) a 512-token f32 prefill of the 0.5B bench model spent
 * ~76% of its time in SkylakeX's sgemm kernel at ~70% of one core's FMA rate, and 15% more
 * packing: each 256-row block's sgemm call packed all of x again (and W). Here x is packed once
 * per call (for q, k and v together), each weight element once.
 *
 * Data flow of one call:
 *   1. x is packed into token groups of MR (14) tokens, per input chunk of KC (1024): for each
 *      input k of the chunk, the group's 14 values side by side ([chunk][group][k][16] floats,
 *      lanes 14 and 15 unused, tokens past n zero), so a step of the kernel broadcasts them from
 *      one 64-byte line. A pool job over (chunk, group).
 *   2. The output rows of every matrix are cut into blocks of RB (256) rows, a pool job over all
 *      the blocks of all the matrices (each block is computed by one thread). A block, per input
 *      chunk: its rows' chunk is transposed into panels of 32 rows ([panel][k][32] floats, widened
 *      from bf16/f16, rows past the matrix zero; 1 MiB, in L2, kept per thread until it ends), then for each
 *      token group and panel the micro-kernel computes a 14-token x 32-row tile of y on 28 zmm
 *      accumulators: per input, two loads of the panel, 14 broadcasts of x, 28 FMAs.
 *   3. Between chunks the running sums are in y itself (stored after one chunk, loaded before
 *      the next), so every element of y is one chain of fused multiply-adds in input order:
 *      y = fma(w[c-1], x[c-1], ... fma(w[1], x[1], w[0] * x[0])), the sum a scalar loop of fmaf
 *      gives. A token's row therefore has the same bits whatever the token count, its place in
 *      the call, the thread count or the block it falls in (the GEMM path's row period is 1: a
 *      prompt's rest after a shared beginning needs no padding, seer_k_blas_row_period).
 *
 * Failure modes: out of memory for the packed x or a thread's panel buffer: returns 0 and the
 * caller runs OpenBLAS or seer's per-token kernels (nothing of y is relied on). Not x86, no
 * AVX-512, an AMD CPU (not measured there: Zen 4 runs a 512-bit FMA as two halves) or
 * SEER_OWN_GEMM=0: returns 0 at once. The caller's x and weights are only read. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define SEER_X86 1

#include "x86_transpose.h"
#endif

#include "model_private.h"

#define GEMM_MR 14  /* tokens per micro-tile */
#define GEMM_LD 16  /* packed x: floats per input of a group */
#define GEMM_NR 32  /* rows per panel (two zmm) */
#ifndef GEMM_KC
#define GEMM_KC 1024 /* inputs per chunk: a 0.5B model's 1024-wide inputs in one (no sums carried
                       * through y); 512-input chunks were 4% slower on a 512-token f32 prefill
                       * (2026-12-02, prefill_lengths.lua MODEL 2 512, seven alternating rounds),
                       * 1536 and 2048 level with 1024 */
#endif
#define GEMM_RB 256 /* rows per block (a pool item) */
#define GEMM_MULTI 8

int seer_k_gemm_own(void) {
#ifdef SEER_X86
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("SEER_OWN_GEMM");
        v = seer_k_intel_avx512() && !(e && strcmp(e, "0") == 0);
    }
    return v;
#else
    return 0;
#endif
}

#ifdef SEER_X86

/* Rows [0, nrows) (nrows <= 16; the rest zeros) of kc inputs from src (row stride lds elements of
 * dtype dt), transposed into dst: input k's 16 values at dst + k * ldd. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void gemm_pack16(float *dst, int ldd, const void *src, size_t lds,
                                                                                seer_dtype_t dt, int nrows, int kc) {
    size_t es = dt == SEER_F32 ? 4 : 2;
    for (int k = 0; k < kc; k += 16) {
        int nk = kc - k < 16 ? kc - k : 16;
        __mmask16 m = (__mmask16)((1u << nk) - 1);
        __m512i r[16];
        for (int i = 0; i < 16; i++) {
            if (i >= nrows) {
                r[i] = _mm512_setzero_si512();
                continue;
            }
            const char *p = (const char *)src + ((size_t)i * lds + (size_t)k) * es;
            if (dt == SEER_F32) {
                r[i] = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, p));
            } else {
                __m256i h = _mm256_maskz_loadu_epi16(m, p);
                r[i] = dt == SEER_BF16 ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16) : _mm512_castps_si512(_mm512_cvtph_ps(h));
            }
        }
        tr16x16_epi32(r);
        for (int i = 0; i < nk; i++) _mm512_store_si512((void *)(dst + (size_t)(k + i) * (size_t)ldd), r[i]);
    }
}

/* The micro-kernel: a tile of NT tokens (packed x at xp, [kc][16]) x 32 rows (the panel at wp,
 * [kc][32]) into y (row stride ldy; masks m0, m1: the valid rows of each half). first: the
 * chunk starts the sums (from 0), else they continue from y. */
#define GEMM_UK(NT)                                                                                                         \
    __attribute__((target("avx512f"))) static void gemm_uk##NT(int kc, const float *restrict xp, const float *restrict wp, \
                                                              float *restrict y, size_t ldy, __mmask16 m0, __mmask16 m1,    \
                                                              int first) {                                                \
        __m512 a0[NT], a1[NT];                                                                                              \
        _Pragma("GCC unroll 16") for (int t = 0; t < NT; t++) {                                                             \
            if (first) {                                                                                                    \
                a0[t] = a1[t] = _mm512_setzero_ps();                                                                        \
            } else {                                                                                                        \
                a0[t] = _mm512_maskz_loadu_ps(m0, y + (size_t)t * ldy);                                                     \
                a1[t] = _mm512_maskz_loadu_ps(m1, y + (size_t)t * ldy + 16);                                                \
            }                                                                                                               \
        }                                                                                                                   \
        _Pragma("GCC unroll 2") for (int k = 0; k < kc; k++) {                                                              \
            __m512 w0 = _mm512_load_ps(wp + (size_t)k * GEMM_NR), w1 = _mm512_load_ps(wp + (size_t)k * GEMM_NR + 16);       \
            _Pragma("GCC unroll 16") for (int t = 0; t < NT; t++) {                                                         \
                __m512 xb = _mm512_set1_ps(xp[(size_t)k * GEMM_LD + t]);                                                    \
                a0[t] = _mm512_fmadd_ps(w0, xb, a0[t]);                                                                     \
                a1[t] = _mm512_fmadd_ps(w1, xb, a1[t]);                                                                     \
            }                                                                                                               \
        }                                                                                                                   \
        _Pragma("GCC unroll 16") for (int t = 0; t < NT; t++) {                                                             \
            _mm512_mask_storeu_ps(y + (size_t)t * ldy, m0, a0[t]);                                                          \
            _mm512_mask_storeu_ps(y + (size_t)t * ldy + 16, m1, a1[t]);                                                     \
        }                                                                                                                   \
    }
GEMM_UK(1)
GEMM_UK(2)
GEMM_UK(3)
GEMM_UK(4)
GEMM_UK(5)
GEMM_UK(6)
GEMM_UK(7)
GEMM_UK(8)
GEMM_UK(9)
GEMM_UK(10)
GEMM_UK(11)
GEMM_UK(12)
GEMM_UK(13)
GEMM_UK(14)
#undef GEMM_UK
_Static_assert(GEMM_MR == 14 && GEMM_MR <= GEMM_LD, "gemm_uks lists the micro-kernels of 1 to GEMM_MR tokens");
typedef void (*gemm_uk_fn)(int, const float *, const float *, float *, size_t, __mmask16, __mmask16, int);
static const gemm_uk_fn gemm_uks[GEMM_MR + 1] = {NULL,       gemm_uk1,  gemm_uk2,  gemm_uk3,  gemm_uk4,
                                                 gemm_uk5,   gemm_uk6,  gemm_uk7,  gemm_uk8,  gemm_uk9,
                                                 gemm_uk10,  gemm_uk11, gemm_uk12, gemm_uk13, gemm_uk14};

typedef struct {
    float *const *ys;
    const float *x;
    float *xp; /* packed x */
    int n, ngroups;
    int64_t cols;
    const seer_weight_t *const *ws;
    size_t first[GEMM_MULTI + 1]; /* block b of the job is block b - first[i] of matrix i */
    int failed;
} gemm_job;

/* chunk c's packed x starts at xp + c * KC * ngroups * LD; group g's at + g * kc * LD (the last
 * chunk, shorter, comes last, so no chunk needs room past its own inputs) */
static inline float *gemm_xgroup(const gemm_job *j, int c, int g, int kc) {
    return j->xp + ((size_t)c * GEMM_KC * (size_t)j->ngroups + (size_t)g * (size_t)kc) * GEMM_LD;
}

static void gemm_pack_x_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    gemm_job *j = ctx;
    for (size_t it = begin; it < end; it++) {
        int c = (int)(it / (size_t)j->ngroups), g = (int)(it % (size_t)j->ngroups);
        int64_t k0 = (int64_t)c * GEMM_KC;
        int kc = (int)(j->cols - k0 < GEMM_KC ? j->cols - k0 : GEMM_KC), t0 = g * GEMM_MR;
        int nt = j->n - t0 < GEMM_MR ? j->n - t0 : GEMM_MR;
        gemm_pack16(gemm_xgroup(j, c, g, kc), GEMM_LD, j->x + (size_t)t0 * (size_t)j->cols + (size_t)k0, (size_t)j->cols,
                    SEER_F32, nt, kc);
    }
}

static void gemm_block_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    gemm_job *j = ctx;
    /* the block's panels of one input chunk: 1 MiB, kept per thread between calls (freed when
     * the thread ends) */
    float *wbuf = seer_k_thread_buffer(SEER_BUF_GEMM, (size_t)GEMM_RB * GEMM_KC);
    if (!wbuf) {
        j->failed = 1;
        return;
    }
    int i = 0;
    for (size_t b = begin; b < end; b++) {
        while (b >= j->first[i + 1]) i++;
        const seer_weight_t *w = j->ws[i];
        int64_t rows = w->rows, cols = w->cols, r0 = (int64_t)(b - j->first[i]) * GEMM_RB;
        int nr = (int)(rows - r0 < GEMM_RB ? rows - r0 : GEMM_RB), np = (nr + GEMM_NR - 1) / GEMM_NR;
        size_t es = w->dtype == SEER_F32 ? 4 : 2;
        float *yb = j->ys[i] + r0;
        for (int c = 0; (int64_t)c * GEMM_KC < cols; c++) {
            int64_t k0 = (int64_t)c * GEMM_KC;
            int kc = (int)(cols - k0 < GEMM_KC ? cols - k0 : GEMM_KC);
            for (int p = 0; p < np; p++)
                for (int h = 0; h < 2; h++) {
                    int r = p * GEMM_NR + h * 16, rr = nr - r < 16 ? nr - r : 16;
                    const char *src = (const char *)w->data + ((size_t)(r0 + (r < nr ? r : 0)) * (size_t)cols + (size_t)k0) * es;
                    gemm_pack16(wbuf + (size_t)p * GEMM_KC * GEMM_NR + h * 16, GEMM_NR, src, (size_t)cols, w->dtype,
                                rr > 0 ? rr : 0, kc);
                }
            for (int g = 0; g < j->ngroups; g++) {
                int t0 = g * GEMM_MR, nt = j->n - t0 < GEMM_MR ? j->n - t0 : GEMM_MR;
                const float *xg = gemm_xgroup(j, c, g, kc);
                for (int p = 0; p < np; p++) {
                    int rr = nr - p * GEMM_NR < GEMM_NR ? nr - p * GEMM_NR : GEMM_NR;
                    __mmask16 m0 = rr >= 16 ? 0xffff : (__mmask16)((1u << rr) - 1);
                    __mmask16 m1 = rr >= 32 ? 0xffff : rr <= 16 ? 0 : (__mmask16)((1u << (rr - 16)) - 1);
                    gemm_uks[nt](kc, xg, wbuf + (size_t)p * GEMM_KC * GEMM_NR, yb + (size_t)t0 * (size_t)rows + (size_t)p * GEMM_NR,
                                 (size_t)rows, m0, m1, c == 0);
                }
            }
        }
    }
}
#endif

int seer_k_gemm_multi(seer_pool_t *p, int count, float *const *ys, const float *x, int n, const seer_weight_t *const *ws) {
#ifdef SEER_X86
    if (count < 1 || count > GEMM_MULTI || n < 1 || !seer_k_gemm_own()) return 0;
    const int64_t cols = ws[0]->cols;
    if (cols < 1) return 0;
    for (int i = 0; i < count; i++)
        if ((ws[i]->dtype != SEER_F32 && ws[i]->dtype != SEER_BF16 && ws[i]->dtype != SEER_F16) || ws[i]->cols != cols ||
            ws[i]->rows < 1)
            return 0;
    gemm_job j = {.ys = ys, .x = x, .n = n, .ngroups = (n + GEMM_MR - 1) / GEMM_MR, .cols = cols, .ws = ws};
    size_t chunks = (size_t)((cols + GEMM_KC - 1) / GEMM_KC);
    /* every chunk but the last holds KC inputs per group; the last its own count */
    size_t xfloats = ((size_t)(chunks - 1) * GEMM_KC + (size_t)(cols - (int64_t)(chunks - 1) * GEMM_KC)) * (size_t)j.ngroups * GEMM_LD;
    if (!(j.xp = aligned_alloc(64, xfloats * sizeof(float)))) return 0;
    seer_pool_for(p, chunks * (size_t)j.ngroups, 8, gemm_pack_x_chunk, &j);
    for (int i = 0; i < count; i++) j.first[i + 1] = j.first[i] + (size_t)((ws[i]->rows + GEMM_RB - 1) / GEMM_RB);
    size_t block_work = (size_t)GEMM_RB * (size_t)cols * (size_t)n;
    size_t min_blocks = block_work >= 2 * SEER_PAR_WORK ? 1 : (2 * SEER_PAR_WORK + block_work - 1) / block_work;
    seer_pool_for(p, j.first[count], min_blocks, gemm_block_chunk, &j);
    free(j.xp);
    return !j.failed;
#else
    (void)p, (void)count, (void)ys, (void)x, (void)n, (void)ws;
    return 0;
#endif
}

/* ---- prefill attention on the same micro-kernel ------------------------------------------------
 * Per query head, per block of 64 queries (as kernels_blas.c's sgemm path): scores = Q K^T over
 * the keys the block can see, scaled, soft-capped and softmaxed per row (seer_k_softmax_row),
 * then out = P V (the scale applied to the packed queries). The keys of a KV head are transposed once into 32-key panels ([hd][32] each,
 * from the first key any query sees), its values copied into 32-dimension panels ([key][32]),
 * widened from a bf16 cache either way; the query block and the probabilities are packed as x is
 * for the linear layers. A block's scores start at its first key's panel (the columns before its
 * first key are masked off by the softmax), and P V sums the block's keys in order, so each
 * output is one fma chain over its keys, whatever the block or thread it falls in. On Intel
 * CPUs with AVX-512 where seer's own GEMM runs (2026-12-02, the 2-core AMX Xeon VM: OpenBLAS's
 * two sgemm calls per block and their packing were ~7% of a 512-token f32 prefill of the 0.5B
 * model and ~17% of a bf16 one in precision = "fast"). */
#ifdef SEER_X86
#define ATTN_QB 64 /* query rows per block (kernels_blas.c's QUERY_BLOCK) */

typedef struct {
    const seer_attn_params_t *a;
    int failed;
} attn_own_job;

/* Rows [0, nrows) of 32 dims from src (row stride lds elements, dims past hd zero) into dst ([row][32]). */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void attn_copy_panel(float *dst, const void *src, size_t lds, seer_dtype_t dt,
                                                                             int nrows, int dims) {
    __mmask16 m0 = dims >= 16 ? 0xffff : (__mmask16)((1u << dims) - 1);
    __mmask16 m1 = dims >= 32 ? 0xffff : dims <= 16 ? 0 : (__mmask16)((1u << (dims - 16)) - 1);
    for (int r = 0; r < nrows; r++) {
        if (dt == SEER_F32) {
            const float *s = (const float *)src + (size_t)r * lds;
            _mm512_store_ps(dst + (size_t)r * 32, _mm512_maskz_loadu_ps(m0, s));
            _mm512_store_ps(dst + (size_t)r * 32 + 16, _mm512_maskz_loadu_ps(m1, s + 16));
        } else {
            const uint16_t *s = (const uint16_t *)src + (size_t)r * lds;
            _mm512_store_si512((void *)(dst + (size_t)r * 32), _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m0, s)), 16));
            _mm512_store_si512((void *)(dst + (size_t)r * 32 + 16),
                               _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m1, s + 16)), 16));
        }
    }
}

static void attn_own_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    attn_own_job *j = ctx;
    const seer_attn_params_t *a = j->a;
    int n = a->n, L = a->start + a->n, hd = a->hd, qd = a->H * hd, kvd = a->KH * hd, group = a->H / a->KH;
    /* the first key any query of the call sees: the panels start there, so a block's scores may
     * start some keys before its own first (those columns are masked off: their probabilities
     * are exact zeros, and the +0 products they add leave P V's sums as they were, so a row
     * gets the same bits whatever call or block it is in: tested) */
    int kw0 = 0;
    if (a->window > 0 && a->start - a->window + 1 > 0) kw0 = a->start - a->window + 1;
    int nkeys = L - kw0, kp = (nkeys + GEMM_NR - 1) / GEMM_NR, dp = (hd + GEMM_NR - 1) / GEMM_NR;
    int qb = n < ATTN_QB ? n : ATTN_QB, ngq = (qb + GEMM_MR - 1) / GEMM_MR, lds = kp * GEMM_NR;
    seer_dtype_t dt = a->kc16 ? SEER_BF16 : SEER_F32;
    size_t es = a->kc16 ? 2 : 4;
    const char *kbase = a->kc16 ? (const char *)a->kc16 : (const char *)a->kc;
    const char *vbase = a->kc16 ? (const char *)a->vc16 : (const char *)a->vc;
    size_t kpf = (size_t)kp * (size_t)hd * GEMM_NR, vpf = (size_t)dp * (size_t)lds * GEMM_NR;
    size_t xqf = (size_t)ngq * (size_t)hd * GEMM_LD, sf = (size_t)qb * (size_t)lds, xsf = (size_t)ngq * (size_t)lds * GEMM_LD;
    float *buf = aligned_alloc(64, (kpf + vpf + xqf + sf + xsf) * sizeof(float) + 64);
    if (!buf) {
        j->failed = 1;
        return;
    }
    float *kpn = buf, *vpn = kpn + kpf, *xq = vpn + vpf, *S = xq + xqf, *xs = S + sf;
    size_t packed = (size_t)-1;
    for (size_t h = begin; h < end; h++) {
        size_t kvh = h / (size_t)group, off = kvh * (size_t)hd;
        if (packed != kvh) {
            for (int p = 0; p < kp; p++)
                for (int half = 0; half < 2; half++) {
                    int k0 = kw0 + p * GEMM_NR + half * 16, rows = L - k0 < 16 ? L - k0 : 16;
                    gemm_pack16(kpn + (size_t)p * (size_t)hd * GEMM_NR + half * 16, GEMM_NR,
                                kbase + ((size_t)(rows > 0 ? k0 : 0) * (size_t)kvd + off) * es, (size_t)kvd, dt, rows > 0 ? rows : 0, hd);
                }
            for (int q = 0; q < dp; q++)
                attn_copy_panel(vpn + (size_t)q * (size_t)lds * GEMM_NR, vbase + ((size_t)kw0 * (size_t)kvd + off + (size_t)q * GEMM_NR) * es,
                                (size_t)kvd, dt, nkeys, hd - q * GEMM_NR);
            packed = kvh;
        }
        for (int r0 = 0; r0 < n; r0 += qb) {
            int nb = n - r0 < qb ? n - r0 : qb, ng = (nb + GEMM_MR - 1) / GEMM_MR;
            int k0 = 0; /* the first key any row of the block sees, and its panel's first key */
            if (a->window > 0 && a->start + r0 - a->window + 1 > 0) k0 = a->start + r0 - a->window + 1;
            int p0 = (k0 - kw0) / GEMM_NR, a0 = kw0 + p0 * GEMM_NR; /* the first key of k0's panel */
            int lb = a->start + r0 + nb - a0, np = (lb + GEMM_NR - 1) / GEMM_NR;
            for (int g = 0; g < ng; g++) {
                int t0 = g * GEMM_MR, nt = nb - t0 < GEMM_MR ? nb - t0 : GEMM_MR;
                gemm_pack16(xq + (size_t)g * (size_t)hd * GEMM_LD, GEMM_LD, a->q + (size_t)(r0 + t0) * (size_t)qd + h * (size_t)hd,
                            (size_t)qd, SEER_F32, nt, hd);
            }
            /* the scale on the queries (hd x 16 a group) rather than on the scores (lb a row) */
            for (size_t e = 0; e < (size_t)ng * (size_t)hd * GEMM_LD; e++) xq[e] *= a->scale;
            for (int g = 0; g < ng; g++) {
                int t0 = g * GEMM_MR, nt = nb - t0 < GEMM_MR ? nb - t0 : GEMM_MR;
                for (int p = 0; p < np; p++)
                    gemm_uks[nt](hd, xq + (size_t)g * (size_t)hd * GEMM_LD, kpn + (size_t)(p0 + p) * (size_t)hd * GEMM_NR,
                                 S + (size_t)t0 * (size_t)lds + (size_t)p * GEMM_NR, (size_t)lds, 0xffff, 0xffff, 1);
            }
            for (int t = 0; t < nb; t++) {
                float *row = S + (size_t)t * (size_t)lds;
                int pos = a->start + r0 + t, first = 0;
                if (a->window > 0 && pos - a->window + 1 > 0) first = pos - a->window + 1;
                seer_k_softmax_row(row, first - a0, pos - a0, lb, a->softcap);
            }
            /* P V over the block's keys a0 .. a0 + lb - 1, GEMM_KC keys a chunk */
            for (int c = 0; c * GEMM_KC < lb; c++) {
                int kc = lb - c * GEMM_KC < GEMM_KC ? lb - c * GEMM_KC : GEMM_KC;
                for (int g = 0; g < ng; g++) {
                    int t0 = g * GEMM_MR, nt = nb - t0 < GEMM_MR ? nb - t0 : GEMM_MR;
                    float *xg = xs + (size_t)g * (size_t)kc * GEMM_LD;
                    gemm_pack16(xg, GEMM_LD, S + (size_t)t0 * (size_t)lds + (size_t)c * GEMM_KC, (size_t)lds, SEER_F32, nt, kc);
                    for (int q = 0; q < dp; q++) {
                        int rr = hd - q * GEMM_NR < GEMM_NR ? hd - q * GEMM_NR : GEMM_NR;
                        __mmask16 m0 = rr >= 16 ? 0xffff : (__mmask16)((1u << rr) - 1);
                        __mmask16 m1 = rr >= 32 ? 0xffff : rr <= 16 ? 0 : (__mmask16)((1u << (rr - 16)) - 1);
                        gemm_uks[nt](kc, xg, vpn + (size_t)q * (size_t)lds * GEMM_NR + (size_t)(a0 - kw0 + c * GEMM_KC) * GEMM_NR,
                                     a->out + (size_t)(r0 + t0) * (size_t)qd + h * (size_t)hd + (size_t)q * GEMM_NR, (size_t)qd, m0, m1, c == 0);
                    }
                }
            }
        }
    }
    free(buf);
}
#endif

int seer_k_attention_own(seer_pool_t *p, const seer_attn_params_t *a) {
#ifdef SEER_X86
    if (!seer_k_gemm_own() || a->hd < 1 || a->hd > GEMM_KC || a->n < 1 || a->KH < 1 || a->H % a->KH) return 0;
    attn_own_job j = {.a = a};
    size_t head_work = 2u * (size_t)a->n * (size_t)(a->start + a->n) * (size_t)a->hd;
    size_t min_heads = head_work >= 2 * SEER_PAR_WORK ? 1 : (2 * SEER_PAR_WORK + head_work - 1) / head_work;
    seer_pool_for(p, (size_t)a->H, min_heads, attn_own_chunk, &j);
    return !j.failed;
#else
    (void)p, (void)a;
    return 0;
#endif
}
