/* CPU kernels of the forward pass. The linear layer dominates: W is read once per call and
 * reused across up to four tokens at a time; rows of W are split across the thread pool.
 * bf16/f16 weights are widened in registers. AVX2+FMA paths are chosen at run time
 * (__builtin_cpu_supports), with portable loops as the reference and the fallback. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define SEER_X86 1
#endif

#include "weight_load.h"

/* ---- portable reference ------------------------------------------------------------------- */

static void dot_rows_generic(const seer_weight_t *w, int64_t row, const float *x, int ntok, int64_t in, float *out) {
    for (int t = 0; t < ntok; t++) {
        const float *xt = x + (size_t)t * in;
        size_t base = (size_t)row * in;
        float acc = 0.f;
        for (int64_t i = 0; i < in; i++) acc += seer_w_load(w, base + i) * xt[i];
        out[t] = acc;
    }
}

float seer_k_dot(const float *a, const float *b, int n) {
    float s = 0.f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- AVX2 + FMA ------------------------------------------------------------------------------ */
#ifdef SEER_X86
__attribute__((target("avx2,fma,f16c"))) static inline float hsum8(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

/* Software prefetch for the decode blocks: each of the four rows is fetched into L1
 * SEER_PF_NEAR elements ahead and into L2 SEER_PF_FAR elements ahead. The rows of a block are
 * four interleaved streams, short ones (a row of a 0.5B model is 2 KB in bf16), on which the
 * hardware prefetchers do not run far enough ahead to keep a core's memory pipeline full.
 * Measured on the 0.5B Llama of make bench, two threads, 32-token greedy decode:
 *   bf16: none 12.8 tok/s, near only 15.9, near + far 19-21 (the one-thread memcpy bound is 19.9)
 *   f32:  none  9.8 tok/s, near only 11.2, near + far 12.2-13.2
 * Far distances of 2k-16k elements were within noise of each other, 1k less. Past the end of a
 * row the prefetches read the rows that follow; a prefetch never faults. */
#define SEER_PF_NEAR 256
#define SEER_PF_FAR 4096
#define SEER_PF_SETUP(w, rbase)                                                                          \
    const char *pf_base = (const char *)(w)->data;                                                       \
    size_t pf_es = (w)->dtype == SEER_F32 ? 4 : 2, pf_far = (SEER_PF_FAR - SEER_PF_NEAR) * pf_es;        \
    const char *pf0 = pf_base + ((rbase)[0] + SEER_PF_NEAR) * pf_es, *pf1 = pf_base + ((rbase)[1] + SEER_PF_NEAR) * pf_es; \
    const char *pf2 = pf_base + ((rbase)[2] + SEER_PF_NEAR) * pf_es, *pf3 = pf_base + ((rbase)[3] + SEER_PF_NEAR) * pf_es
#define SEER_PF_ROWS(i)                                                                                  \
    do {                                                                                                 \
        size_t pf_o = (size_t)(i) * pf_es;                                                               \
        _mm_prefetch(pf0 + pf_o, _MM_HINT_T0);                                                           \
        _mm_prefetch(pf1 + pf_o, _MM_HINT_T0);                                                           \
        _mm_prefetch(pf2 + pf_o, _MM_HINT_T0);                                                           \
        _mm_prefetch(pf3 + pf_o, _MM_HINT_T0);                                                           \
        _mm_prefetch(pf0 + pf_o + pf_far, _MM_HINT_T1);                                                  \
        _mm_prefetch(pf1 + pf_o + pf_far, _MM_HINT_T1);                                                  \
        _mm_prefetch(pf2 + pf_o + pf_far, _MM_HINT_T1);                                                  \
        _mm_prefetch(pf3 + pf_o + pf_far, _MM_HINT_T1);                                                  \
    } while (0)

/* Four rows of W against NT tokens (NT = 1 or 2): each W vector is loaded once and used NT
 * times, and 4 x NT independent accumulators keep the FMA units busy (one chain per row would
 * stall on FMA latency, which is what limits a naive decode). rbase: element offsets of the
 * four rows (a short tail block repeats its last row). out[t * 4 + k]. */
#define SEER_DEF_BLOCK(NT)                                                                                   \
    __attribute__((target("avx2,fma,f16c"))) static void block4x##NT(const seer_weight_t *w, const size_t *rbase, \
                                                                     const float *x, int64_t in, float *out) { \
        int64_t n8 = in & ~(int64_t)7;                                                                   \
        __m256 acc[NT][4];                                                                               \
        for (int t = 0; t < NT; t++)                                                                     \
            for (int k = 0; k < 4; k++) acc[t][k] = _mm256_setzero_ps();                                 \
        SEER_PF_SETUP(w, rbase);                                                                         \
        for (int64_t i = 0; i < n8; i += 8) {                                                            \
            if (!(i & 15)) SEER_PF_ROWS(i);                                                              \
            __m256 w0 = seer_w_load8(w, rbase[0] + (size_t)i), w1 = seer_w_load8(w, rbase[1] + (size_t)i);             \
            __m256 w2 = seer_w_load8(w, rbase[2] + (size_t)i), w3 = seer_w_load8(w, rbase[3] + (size_t)i);             \
            for (int t = 0; t < NT; t++) {                                                               \
                __m256 xv = _mm256_loadu_ps(x + (size_t)t * (size_t)in + (size_t)i);                     \
                acc[t][0] = _mm256_fmadd_ps(w0, xv, acc[t][0]);                                          \
                acc[t][1] = _mm256_fmadd_ps(w1, xv, acc[t][1]);                                          \
                acc[t][2] = _mm256_fmadd_ps(w2, xv, acc[t][2]);                                          \
                acc[t][3] = _mm256_fmadd_ps(w3, xv, acc[t][3]);                                          \
            }                                                                                            \
        }                                                                                                \
        for (int t = 0; t < NT; t++)                                                                     \
            for (int k = 0; k < 4; k++) {                                                                \
                float sum = hsum8(acc[t][k]);                                                            \
                for (int64_t i = n8; i < in; i++) sum += seer_w_load(w, rbase[k] + (size_t)i) * x[(size_t)t * (size_t)in + (size_t)i]; \
                out[t * 4 + k] = sum;                                                                    \
            }                                                                                            \
    }
SEER_DEF_BLOCK(1)
SEER_DEF_BLOCK(2)

/* Rows [r, r + nr) (nr <= 4) against ntok tokens, written to y[t][r] (row stride out). */
__attribute__((target("avx2,fma,f16c"))) static void rows_avx2(const seer_weight_t *w, int64_t r, int nr,
                                                               const float *x, int ntok, float *y, int64_t out) {
    int64_t in = w->cols;
    size_t rbase[4];
    for (int k = 0; k < 4; k++) rbase[k] = (size_t)(r + (k < nr ? k : nr - 1)) * (size_t)in;
    float tmp[8];
    for (int t = 0; t < ntok; t += 2) {
        int nt = ntok - t >= 2 ? 2 : 1;
        const float *xt = x + (size_t)t * (size_t)in;
        if (nt == 2) block4x2(w, rbase, xt, in, tmp);
        else block4x1(w, rbase, xt, in, tmp);
        for (int u = 0; u < nt; u++)
            for (int k = 0; k < nr; k++) y[(size_t)(t + u) * (size_t)out + (size_t)(r + k)] = tmp[u * 4 + k];
    }
}
/* Several tokens at once (a batched decode step): three rows of W against NT <= 4 tokens, 12
 * accumulators kept in registers (the unroll pragmas: without them GCC keeps a loop over the
 * tokens and the accumulators in memory, a third of the speed), so each widened weight vector serves four tokens and each token vector three
 * rows (the 4 x 2 block above re-widens every weight for each pair of tokens, which bounds a
 * batch of 16 on bf16 weights). Every (row, token) sum is the same chain of FMAs over the same
 * 8-lane slices, then hsum8 and the same scalar tail, as in block4xNT: a token's result does not
 * depend on how many tokens run beside it. pf: prefetch the rows ahead (the first token group,
 * which streams them from memory; later groups find them in L1/L2). */
#define SEER_DEF_BLOCK3(NT)                                                                                  \
    __attribute__((target("avx2,fma,f16c"))) static void block3x##NT(const seer_weight_t *w, const size_t *rbase, \
                                                                     const float *x, int64_t in, float *out, int pf) { \
        int64_t n8 = in & ~(int64_t)7;                                                                   \
        __m256 acc[NT][3];                                                                               \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                                            \
            _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++) acc[t][k] = _mm256_setzero_ps();        \
        const char *pb = (const char *)w->data;                                                          \
        size_t es = w->dtype == SEER_F32 ? 4 : 2;                                                        \
        for (int64_t i = 0; i < n8; i += 8) {                                                            \
            if (pf && !(i & 15))                                                                         \
                for (int k = 0; k < 3; k++) {                                                            \
                    _mm_prefetch(pb + (rbase[k] + (size_t)i + SEER_PF_NEAR) * es, _MM_HINT_T0);          \
                    _mm_prefetch(pb + (rbase[k] + (size_t)i + SEER_PF_FAR) * es, _MM_HINT_T1);           \
                }                                                                                        \
            __m256 w0 = seer_w_load8(w, rbase[0] + (size_t)i), w1 = seer_w_load8(w, rbase[1] + (size_t)i); \
            __m256 w2 = seer_w_load8(w, rbase[2] + (size_t)i);                                           \
            _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {                                      \
                __m256 xv = _mm256_loadu_ps(x + (size_t)t * (size_t)in + (size_t)i);                     \
                acc[t][0] = _mm256_fmadd_ps(w0, xv, acc[t][0]);                                          \
                acc[t][1] = _mm256_fmadd_ps(w1, xv, acc[t][1]);                                          \
                acc[t][2] = _mm256_fmadd_ps(w2, xv, acc[t][2]);                                          \
            }                                                                                            \
        }                                                                                                \
        for (int t = 0; t < NT; t++)                                                                     \
            for (int k = 0; k < 3; k++) {                                                                \
                float sum = hsum8(acc[t][k]);                                                            \
                for (int64_t i = n8; i < in; i++) sum += seer_w_load(w, rbase[k] + (size_t)i) * x[(size_t)t * (size_t)in + (size_t)i]; \
                out[t * 3 + k] = sum;                                                                    \
            }                                                                                            \
    }
SEER_DEF_BLOCK3(1)
SEER_DEF_BLOCK3(2)
SEER_DEF_BLOCK3(3)
SEER_DEF_BLOCK3(4)

/* Rows [r0, r1) against ntok >= 4 tokens, three rows at a time (a short tail block repeats its
 * last row), written to y[t][r]. */
__attribute__((target("avx2,fma,f16c"))) static void rows_avx2_multi(const seer_weight_t *w, int64_t r0, int64_t r1,
                                                                     const float *x, int ntok, float *y, int64_t out) {
    int64_t in = w->cols;
    float tmp[12];
    for (int64_t r = r0; r < r1; r += 3) {
        int nr = r1 - r >= 3 ? 3 : (int)(r1 - r);
        size_t rbase[3];
        for (int k = 0; k < 3; k++) rbase[k] = (size_t)(r + (k < nr ? k : nr - 1)) * (size_t)in;
        for (int t = 0; t < ntok; t += 4) {
            int nt = ntok - t >= 4 ? 4 : ntok - t;
            const float *xt = x + (size_t)t * (size_t)in;
            switch (nt) {
            case 4: block3x4(w, rbase, xt, in, tmp, t == 0); break;
            case 3: block3x3(w, rbase, xt, in, tmp, t == 0); break;
            case 2: block3x2(w, rbase, xt, in, tmp, t == 0); break;
            default: block3x1(w, rbase, xt, in, tmp, t == 0); break;
            }
            for (int u = 0; u < nt; u++)
                for (int k = 0; k < nr; k++) y[(size_t)(t + u) * (size_t)out + (size_t)(r + k)] = tmp[u * 3 + k];
        }
    }
}
/* The same on AVX-512: 16 weights per load, widened in registers; the reduction at the end
 * adds the two 256-bit halves first so the sum order stays fixed for a given CPU path. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) static inline __m512 w_load16(const seer_weight_t *w,
                                                                                               size_t i) {
    switch (w->dtype) {
    case SEER_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w->data + i))), 16));
    case SEER_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w->data + i)));
    default: return _mm512_loadu_ps((const float *)w->data + i);
    }
}

#define SEER_DEF_BLOCK512(NT)                                                                                \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) static void block4x##NT##_512(            \
        const seer_weight_t *w, const size_t *rbase, const float *x, int64_t in, float *out) {             \
        int64_t n16 = in & ~(int64_t)15;                                                                 \
        __m512 acc[NT][4];                                                                               \
        for (int t = 0; t < NT; t++)                                                                     \
            for (int k = 0; k < 4; k++) acc[t][k] = _mm512_setzero_ps();                                 \
        SEER_PF_SETUP(w, rbase);                                                                         \
        for (int64_t i = 0; i < n16; i += 16) {                                                          \
            SEER_PF_ROWS(i);                                                                             \
            __m512 w0 = w_load16(w, rbase[0] + (size_t)i), w1 = w_load16(w, rbase[1] + (size_t)i);       \
            __m512 w2 = w_load16(w, rbase[2] + (size_t)i), w3 = w_load16(w, rbase[3] + (size_t)i);       \
            for (int t = 0; t < NT; t++) {                                                               \
                __m512 xv = _mm512_loadu_ps(x + (size_t)t * (size_t)in + (size_t)i);                     \
                acc[t][0] = _mm512_fmadd_ps(w0, xv, acc[t][0]);                                          \
                acc[t][1] = _mm512_fmadd_ps(w1, xv, acc[t][1]);                                          \
                acc[t][2] = _mm512_fmadd_ps(w2, xv, acc[t][2]);                                          \
                acc[t][3] = _mm512_fmadd_ps(w3, xv, acc[t][3]);                                          \
            }                                                                                            \
        }                                                                                                \
        for (int t = 0; t < NT; t++)                                                                     \
            for (int k = 0; k < 4; k++) {                                                                \
                __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc[t][k]),                              \
                                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t][k]), 1))); \
                float sum = hsum8(h);                                                                    \
                for (int64_t i = n16; i < in; i++) sum += seer_w_load(w, rbase[k] + (size_t)i) * x[(size_t)t * (size_t)in + (size_t)i]; \
                out[t * 4 + k] = sum;                                                                    \
            }                                                                                            \
    }
SEER_DEF_BLOCK512(1)
SEER_DEF_BLOCK512(2)

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) static void rows_avx512(const seer_weight_t *w, int64_t r,
                                                                                        int nr, const float *x, int ntok,
                                                                                        float *y, int64_t out) {
    int64_t in = w->cols;
    size_t rbase[4];
    for (int k = 0; k < 4; k++) rbase[k] = (size_t)(r + (k < nr ? k : nr - 1)) * (size_t)in;
    float tmp[8];
    for (int t = 0; t < ntok; t += 2) {
        int nt = ntok - t >= 2 ? 2 : 1;
        const float *xt = x + (size_t)t * (size_t)in;
        if (nt == 2) block4x2_512(w, rbase, xt, in, tmp);
        else block4x1_512(w, rbase, xt, in, tmp);
        for (int u = 0; u < nt; u++)
            for (int k = 0; k < nr; k++) y[(size_t)(t + u) * (size_t)out + (size_t)(r + k)] = tmp[u * 4 + k];
    }
}
#endif


int seer_k_have_avx2(void) {
#ifdef SEER_X86
    static int v = -1;
    if (v < 0) {
        /* F16C is read from CPUID directly: clang 14's __builtin_cpu_supports does not know it. */
        unsigned a, b, c, d;
        int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    }
    return v;
#else
    return 0;
#endif
}

static void rows_generic(const seer_weight_t *w, int64_t r, int nr, const float *x, int ntok, float *y, int64_t out) {
    for (int k = 0; k < nr; k++) {
        float tmp[1];
        for (int t = 0; t < ntok; t++) {
            dot_rows_generic(w, r + k, x + (size_t)t * (size_t)w->cols, 1, w->cols, tmp);
            y[(size_t)t * (size_t)out + (size_t)(r + k)] = tmp[0];
        }
    }
}

typedef struct {
    float *y;
    const float *x;
    int n;
    const seer_weight_t *w, *bias;
    int simd;
} linear_job;

static void linear_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    linear_job *j = ctx;
    int64_t out = j->w->rows;
#ifdef SEER_X86
    if (j->simd == 1 && j->n >= 4) {
        rows_avx2_multi(j->w, (int64_t)begin, (int64_t)end, j->x, j->n, j->y, out);
        goto bias;
    }
#endif
    for (size_t r = begin; r < end; r += 4) {
        int nr = end - r >= 4 ? 4 : (int)(end - r);
#ifdef SEER_X86
        if (j->simd == 2) rows_avx512(j->w, (int64_t)r, nr, j->x, j->n, j->y, out);
        else if (j->simd) rows_avx2(j->w, (int64_t)r, nr, j->x, j->n, j->y, out);
        else
#endif
            rows_generic(j->w, (int64_t)r, nr, j->x, j->n, j->y, out);
    }
#ifdef SEER_X86
bias:
#endif
    if (j->bias && j->bias->data)
        for (int t = 0; t < j->n; t++)
            for (size_t r = begin; r < end; r++) j->y[(size_t)t * (size_t)out + r] += seer_w_load(j->bias, r);
}

static void linear_base(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w,
                        const seer_weight_t *bias, int gemm) {
    if (gemm && n >= SEER_BLAS_MIN_TOKENS &&
        (seer_k_linear_amx(p, y, x, n, w, bias) || seer_k_linear_blas(p, y, x, n, w, bias)))
        return;
    linear_job j = {.y = y, .x = x, .n = n, .w = w, .bias = bias, .simd = seer_k_have_avx512() ? 2 : seer_k_have_avx2()};
    size_t per_row = (size_t)w->cols * (size_t)n;
    size_t min_rows = per_row ? (SEER_PAR_WORK / 2 + per_row - 1) / per_row : 1;
    if (min_rows < 4) min_rows = 4;
    if ((size_t)w->rows * per_row < SEER_PAR_WORK) min_rows = (size_t)w->rows;
    min_rows = (min_rows + 3) & ~(size_t)3; /* chunks of whole 4-row blocks */
    seer_pool_for(p, (size_t)w->rows, min_rows, linear_chunk, &j);
}

_Thread_local int seer_k_fast_bf16;

void seer_k_linear(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias) {
    linear_base(p, y, x, n, w, bias, 1);
    if (w->lora) seer_lora_apply(p, y, x, n, w->lora);
}

void seer_k_linear_rows(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias) {
    linear_base(p, y, x, n, w, bias, 0);
    if (w->lora) seer_lora_apply_rows(p, y, x, n, w->lora);
}

void seer_k_rmsnorm(float *y, const float *x, int n, int d, const seer_weight_t *w, float eps, int one_plus) {
    if (seer_k_rmsnorm_fast(y, x, n, d, w, eps, one_plus)) return;
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * d;
        float *yt = y + (size_t)t * d;
        double ss = 0.0;
        for (int i = 0; i < d; i++) ss += (double)xt[i] * xt[i];
        float inv = 1.0f / sqrtf((float)(ss / d) + eps);
        for (int i = 0; i < d; i++) {
            float wi = seer_w_load(w, (size_t)i);
            yt[i] = (xt[i] * inv) * (one_plus ? 1.0f + wi : wi);
        }
    }
}

void seer_k_embed_row(float *out, const seer_weight_t *table, int64_t row) {
    size_t base = (size_t)row * (size_t)table->cols;
    if (table->dtype == SEER_F32) {
        memcpy(out, (const float *)table->data + base, (size_t)table->cols * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < table->cols; i++) out[i] = seer_w_load(table, base + (size_t)i);
}

static void attention_chunk(void *ctx, size_t begin, size_t end, int thread) {
    const seer_attn_params_t *a = ctx;
    int H = a->H, hd = a->hd, qd = H * hd, kvd = a->KH * hd, group = H / a->KH;
    float *sc = a->scratch + (size_t)thread * (size_t)a->max_len;
    for (size_t w = begin; w < end; w++) {
        int t = (int)(w / (size_t)H), h = (int)(w % (size_t)H);
        int pos = a->start + t;
        const float *q = a->q + (size_t)t * qd + (size_t)h * hd;
        size_t kv_off = (size_t)(h / group) * (size_t)hd;
        int first = 0;
        if (a->window > 0 && pos - a->window + 1 > 0) first = pos - a->window + 1;
        float mx = -INFINITY;
        for (int p = first; p <= pos; p++) {
            float s = seer_k_dot(q, a->kc + (size_t)p * kvd + kv_off, hd) * a->scale;
            if (a->softcap > 0.f) s = tanhf(s / a->softcap) * a->softcap;
            sc[p] = s;
            if (s > mx) mx = s;
        }
        float inv = 1.0f / seer_k_exp_sub_sum(sc + first, pos - first + 1, mx);
        float *o = a->out + (size_t)t * qd + (size_t)h * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        for (int p = first; p <= pos; p++) {
            float wgt = sc[p] * inv;
            const float *v = a->vc + (size_t)p * kvd + kv_off;
            for (int i = 0; i < hd; i++) o[i] += wgt * v[i];
        }
    }
}

void seer_k_attention(seer_pool_t *p, const seer_attn_params_t *a) {
    if (a->n >= SEER_BLAS_MIN_TOKENS && (seer_k_attention_small(p, a) || seer_k_attention_blas(p, a))) return;
    /* One (token, head) item costs about 2 * keys * head_dim multiply-adds. */
    size_t item = 2u * (size_t)(a->start + a->n) * (size_t)a->hd;
    size_t min_items = item ? (SEER_PAR_WORK / 2 + item - 1) / item : 1;
    seer_pool_for(p, (size_t)a->n * (size_t)a->H, min_items ? min_items : 1, attention_chunk, (void *)a);
}

void seer_k_rope_table(const float *inv, int half, int start, int n, float *cs, float *sn) {
    for (int t = 0; t < n; t++) {
        float pos = (float)(start + t);
        for (int i = 0; i < half; i++) {
            float a = pos * inv[i]; /* f32 product, as transformers computes the angle */
            cs[(size_t)t * half + i] = (float)cos((double)a);
            sn[(size_t)t * half + i] = (float)sin((double)a);
        }
    }
}

void seer_k_rope(float *x, int nheads, int hd, int rot, const float *cs, const float *sn) {
    int half = rot / 2;
    for (int h = 0; h < nheads; h++) {
        float *v = x + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * cs[i] - b * sn[i];
            v[i + half] = b * cs[i] + a * sn[i];
        }
    }
}
