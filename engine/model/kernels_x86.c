/* x86 kernels chosen at run time: vectorized exp for softmax rows and SiLU (AVX-512, AVX2, or
 * the libm loop), and linear layers on AMX tiles for bf16 weights at every token count (Sapphire
 * Rapids and later).
 *
 * exp: Cephes' expf (range reduction by ln 2 in two parts, degree-6 polynomial, 2^n applied with
 * scalef/exponent bits); within 2 ulp of libm's expf on [-87.3, 88.7], and 0 below, where expf
 * returns denormals under 1.2e-38: far inside the 1e-4 parity tolerance of every test, and
 * denormals cost ~100 cycles each in the FMAs that use them (measured: a 256-token stories260K
 * prefill took 7.0 ms with them, 4.6 ms without).
 *
 * AMX: y = x W^T with W's bf16 rows as A tiles (16 output rows x 32 inputs, repacked per work
 * item so that a tile is contiguous) and the activations packed once per call into B tiles in the
 * VNNI layout (pairs of inputs per token, transposed in registers: a scatter per token took 14%
 * of a 0.5B bf16 prefill, the transpose 4%). The activations are f32: each is split exactly into
 * three bf16 pieces, hi + mid + lo (one, x rounded to bf16, in precision = "fast"), and every
 * piece is multiplied; the bf16 weights are exact and TDPBF16PS accumulates in f32. Every output
 * element is computed by one thread in one fixed order, whatever SEER_THREADS is and however many
 * tokens the call has (the prefill kernel past 32 tokens, the few-token kernel below that). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define SEER_X86 1

#include "x86_transpose.h"
#endif

#include "weight_load.h"

/* ---- feature checks -------------------------------------------------------------------------- */

int seer_k_have_avx512(void) {
#ifdef SEER_X86
    static int v = -1;
    if (v < 0)
        v = seer_k_have_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && !getenv("SEER_NO_AVX512");
    return v;
#else
    return 0;
#endif
}

int seer_k_intel_avx512(void) {
#ifdef SEER_X86
    return seer_k_have_avx512() && !__builtin_cpu_is("amd");
#else
    return 0;
#endif
}

int seer_k_linear_simd(void) {
#ifdef SEER_X86
    static int v = -1;
    if (v < 0) {
        const char *want = getenv("SEER_LINEAR_KERNELS");
        if (want && *want && strcmp(want, "avx2") != 0 && strcmp(want, "avx512") != 0)
            fprintf(stderr, "seer: SEER_LINEAR_KERNELS=%s is neither avx2 nor avx512; the default for this CPU is used\n", want);
        if (!seer_k_have_avx2()) v = 0;
        else if (!seer_k_have_avx512()) v = 1;
        else if (want && strcmp(want, "avx2") == 0) v = 1;
        else if (want && strcmp(want, "avx512") == 0) v = 2;
        /* Every CPU with AVX-512 (AMD; Intel, with AMX or without): the AVX2 family with its
         * 512-bit pair kernels (on Intel with SkylakeX's sgemm, kernels_blas.c). The AVX-512
         * family (rows_avx512: 4 rows x 2 tokens a call) stays for SEER_LINEAR_KERNELS=avx512.
         * On a 2-core AMX Xeon VM (2026-12-02, the 0.5B f32 bench model, tests/bench/batch_seer.lua
         * and prefill_lengths.lua, two alternating rounds, the AVX-512 family -> the AVX2 family):
         * batched decode at 2 threads batch 16 74.0-76.2 -> 129.2-130.4 tok/s, 4 47.3-48.5 ->
         * 60.4-60.8, 1 16.7-17.2 -> 16.6-16.7; one thread batch 16 38.2-38.9 -> 68.9-71.6, 1
         * 9.1-9.2 -> 8.8-8.9; one prompt of 24 / 32 tokens 124-126 / 139-143 -> 141-153 / 148-157
         * (GEMM from 40), 48-128 level, 512 289 -> 271-276 (both on SkylakeX's sgemm). Later the
         * same day, after the pair kernels' outputs left from registers, the same VM with AMX
         * turned off (SEER_NO_AMX=1: an Intel CPU with AVX-512 and no AMX, which ran the AVX-512
         * family until then), SEER_LINEAR_KERNELS=avx512 -> avx2, two rounds: f32 batch 1 / 4 /
         * 16 16.7-16.8 / 46.7-47.7 / 74.2-74.5 -> 16.1-16.3 / 60.0-60.5 / 171.8-173.1, bf16
         * 29.7-30.1 / 63.9-64.4 / 76.8-79.2 -> 30.2-30.8 / 97.0-98.3 / 206.6-207.7; one prompt
         * (prefill_lengths.lua MODEL 2 N..., OPENBLAS_CORETYPE=SkylakeX) f32 n = 8 / 16 / 32 / 64
         * 64-65 / 90 / 138-141 / 196-198 -> 120-121 / 179-186 / 225-232 / 231-240, bf16 78-79 /
         * 95-103 / 136-150 / 193-216 -> 120-121 / 224-229 / 240-242 / 213-221. */
        else v = 1;
    }
    return v;
#else
    return 0;
#endif
}

int seer_k_row_prefetch(void) {
    static int v = -1;
    if (v < 0) {
        const char *want = getenv("SEER_ROW_PREFETCH");
        if (want && *want && strcmp(want, "0") != 0 && strcmp(want, "1") != 0)
            fprintf(stderr, "seer: SEER_ROW_PREFETCH=%s is neither 0 nor 1; the default for this CPU is used\n", want);
        if (want && (strcmp(want, "0") == 0 || strcmp(want, "1") == 0)) v = want[0] == '1';
#ifdef SEER_X86
        else v = !(__builtin_cpu_is("amd") && __builtin_cpu_supports("avx512f"));
#else
        else v = 1;
#endif
    }
    return v;
}

#ifdef SEER_X86
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
static int g_amx;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static void amx_probe(void) {
    unsigned a, b, c, d;
    if (!seer_k_have_avx512() || getenv("SEER_NO_AMX")) return;
    /* CPUID.(7,0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE */
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!((d >> 22) & 1) || !((d >> 24) & 1)) return;
    /* Linux hands out the 8 KiB tile state only on request (once per process, all threads). */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return;
    g_amx = 1;
}
#endif

int seer_k_have_amx(void) {
#ifdef SEER_X86
    pthread_once(&g_amx_once, amx_probe);
    return g_amx;
#else
    return 0;
#endif
}

/* ---- exp ------------------------------------------------------------------------------------- */
#define EXP_HI 88.3762626647949f
#define EXP_LO -87.33654475f /* expf(EXP_LO) = FLT_MIN: below it, 0 instead of a denormal */
#define EXP_C1 0.693359375f
#define EXP_C2 -2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

#ifdef SEER_X86
__attribute__((target("avx512f"))) static inline __m512 exp16(__m512 x) {
    __mmask16 zero = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LO), _CMP_LT_OQ);
    /* the clamps take x as their second operand, which MINPS/MAXPS return when either is NaN:
     * exp(NaN) is NaN, as expf gives (x first turned NaN scores into exp(EXP_HI), finite, and a
     * softmax over NaN scores into numbers) */
    x = _mm512_min_ps(_mm512_set1_ps(EXP_HI), x);
    x = _mm512_max_ps(_mm512_set1_ps(EXP_LO), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_C1), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_C2), r);
    __m512 p = _mm512_set1_ps(EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps((__mmask16)~zero, _mm512_scalef_ps(p, n));
}

__attribute__((target("avx512f"))) static float exp_sub_sum_avx512(float *v, int n, float mx) {
    __m512 m = _mm512_set1_ps(mx), acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(v + i), m));
        _mm512_storeu_ps(v + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, v + i), m));
        e = _mm512_maskz_mov_ps(k, e);
        _mm512_mask_storeu_ps(v + i, k, e);
        acc = _mm512_add_ps(acc, e);
    }
    return _mm512_reduce_add_ps(acc);
}

__attribute__((target("avx512f"))) static void silu_mul_avx512(float *gate, const float *up, size_t n) {
    size_t i = 0;
    __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
    }
    for (; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

__attribute__((target("avx2,fma"))) static inline __m256 exp8(__m256 x) {
    __m256 zero = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_LT_OQ);
    /* the clamps take x as their second operand, which MINPS/MAXPS return when either is NaN:
     * exp(NaN) is NaN, as expf gives (x first turned NaN scores into exp(EXP_HI), finite, and a
     * softmax over NaN scores into numbers) */
    x = _mm256_min_ps(_mm256_set1_ps(EXP_HI), x);
    x = _mm256_max_ps(_mm256_set1_ps(EXP_LO), x);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_C1), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_C2), r);
    __m256 p = _mm256_set1_ps(EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n through the exponent bits: n >= -126 after the clamp above */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(zero, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

__attribute__((target("avx2,fma"))) static float exp_sub_sum_avx2(float *v, int n, float mx) {
    __m256 m = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(v + i), m));
        _mm256_storeu_ps(v + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    float s = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for (; i < n; i++) {
        v[i] = expf(v[i] - mx);
        s += v[i];
    }
    return s;
}

__attribute__((target("avx2,fma"))) static void silu_mul_avx2(float *gate, const float *up, size_t n) {
    size_t i = 0;
    __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}
#endif

float seer_k_exp_sub_sum(float *v, int n, float mx) {
#ifdef SEER_X86
    if (seer_k_have_avx512()) return exp_sub_sum_avx512(v, n, mx);
    if (seer_k_have_avx2()) return exp_sub_sum_avx2(v, n, mx);
#endif
    float s = 0.f;
    for (int i = 0; i < n; i++) {
        v[i] = expf(v[i] - mx);
        s += v[i];
    }
    return s;
}

void seer_k_silu_mul(float *gate, const float *up, size_t n) {
#ifdef SEER_X86
    if (seer_k_have_avx512()) {
        silu_mul_avx512(gate, up, n);
        return;
    }
    if (seer_k_have_avx2()) {
        silu_mul_avx2(gate, up, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* ---- softmax of one row of scores ------------------------------------------------------------
 * row[f .. l] holds scaled scores: soft-cap them (softcap > 0), take the softmax in place and
 * zero row[0 .. f) and row(l .. len). */
#ifdef SEER_X86
__attribute__((target("avx512f"))) static float max_avx512(const float *v, int n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(v + i));
    if (i < n) m = _mm512_mask_max_ps(m, (__mmask16)((1u << (n - i)) - 1), m, _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), v + i));
    return _mm512_reduce_max_ps(m);
}

__attribute__((target("avx512f"))) static void scale_avx512(float *v, int n, float s) {
    __m512 k = _mm512_set1_ps(s);
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(v + i, _mm512_mul_ps(_mm512_loadu_ps(v + i), k));
    for (; i < n; i++) v[i] *= s;
}

/* The same on AVX2. The maximum of floats is the same whatever the order (a row holding a NaN
 * comes out all NaN either way: exp of it, or of anything less it, is NaN), and each product is
 * one rounding, so these give the portable loops' bits. */
__attribute__((target("avx2"))) static float max_avx2(const float *v, int n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(v + i));
    float lanes[8], mx = -INFINITY;
    _mm256_storeu_ps(lanes, m);
    for (int k = 0; k < 8; k++)
        if (lanes[k] > mx) mx = lanes[k];
    for (; i < n; i++)
        if (v[i] > mx) mx = v[i];
    return mx;
}

__attribute__((target("avx2"))) static void scale_avx2(float *v, int n, float s) {
    __m256 k = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(v + i, _mm256_mul_ps(_mm256_loadu_ps(v + i), k));
    for (; i < n; i++) v[i] *= s;
}
#endif

void seer_k_softmax_row(float *row, int f, int l, int len, float softcap) {
    int n = l - f + 1;
    float *v = row + f, mx = -INFINITY;
    if (softcap > 0.f)
        for (int i = 0; i < n; i++) v[i] = tanhf(v[i] / softcap) * softcap;
#ifdef SEER_X86
    if (seer_k_have_avx512()) {
        mx = max_avx512(v, n);
        scale_avx512(v, n, 1.0f / seer_k_exp_sub_sum(v, n, mx));
    } else if (seer_k_have_avx2()) {
        mx = max_avx2(v, n);
        scale_avx2(v, n, 1.0f / seer_k_exp_sub_sum(v, n, mx));
    } else
#endif
    {
        for (int i = 0; i < n; i++)
            if (v[i] > mx) mx = v[i];
        float inv = 1.0f / seer_k_exp_sub_sum(v, n, mx);
        for (int i = 0; i < n; i++) v[i] *= inv;
    }
    if (f > 0) memset(row, 0, (size_t)f * sizeof(float));
    if (l + 1 < len) memset(row + l + 1, 0, (size_t)(len - l - 1) * sizeof(float));
}

/* ---- prefill attention for small heads ---------------------------------------------------------
 * With head_dim 4, 8 or 16 (stories260K has 8) the two GEMMs per head have a dimension of 8 or 16,
 * where BLAS kernels run at a few GFLOP/s. Here 16 queries sit in the 16 lanes of a vector:
 * a key's score for all of them is hd FMAs with the key's elements broadcast, the softmax is
 * lane-wise (no horizontal sums), and the output is hd FMAs per key with the value's elements
 * broadcast. out = (sum_p exp(s_p - max) v_p) / sum_p exp(s_p - max). Each (head, block of 16
 * queries) is computed by one thread in a fixed order. */
#define SMALL_HD 16
#ifdef SEER_X86
typedef struct {
    const seer_attn_params_t *a;
    int nqb; /* query blocks of 16 per head */
    int failed;
} small_job;

/* One (head, block of 16 queries); hd is a constant in each caller, so the FMA chains over the
 * head dimension unroll and the accumulators stay in registers. */
__attribute__((target("avx512f"), always_inline)) static inline void small_block(const seer_attn_params_t *a, size_t h,
                                                                                  int r0, float *sc, const int hd) {
    int n = a->n, qd = a->H * hd, kvd = a->KH * hd, group = a->H / a->KH;
    int nb = n - r0 < 16 ? n - r0 : 16;
    size_t kv_off = (h / (size_t)group) * (size_t)hd;
    const __m512 iota = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512 qt[SMALL_HD], acc[SMALL_HD];
    float tmp[16], kw[SMALL_HD];
    for (int i = 0; i < hd; i++) {
        for (int q = 0; q < 16; q++)
            tmp[q] = q < nb ? a->q[(size_t)(r0 + q) * (size_t)qd + h * (size_t)hd + (size_t)i] * a->scale : 0.f;
        qt[i] = _mm512_loadu_ps(tmp);
    }
    int p0 = 0, p1 = a->start + r0 + nb - 1; /* keys any query of the block sees */
    if (a->window > 0 && a->start + r0 - a->window + 1 > 0) p0 = a->start + r0 - a->window + 1;
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int p = p0; p <= p1; p++) {
        const float *k = kw;
        if (a->kc16) /* a bf16 cache: the key widened, so the bits of an f32 cache holding it */
            for (int i = 0; i < hd; i++) kw[i] = seer_bf16_to_f32(a->kc16[(size_t)p * (size_t)kvd + kv_off + (size_t)i]);
        else k = a->kc + (size_t)p * (size_t)kvd + kv_off;
        __m512 s = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int i = 0; i < hd; i++) s = _mm512_fmadd_ps(qt[i], _mm512_set1_ps(k[i]), s);
        if (a->softcap > 0.f) {
            _mm512_storeu_ps(tmp, s);
            for (int q = 0; q < 16; q++) tmp[q] = tanhf(tmp[q] / a->softcap) * a->softcap;
            s = _mm512_loadu_ps(tmp);
        }
        /* lane q (position start + r0 + q) sees key p when 0 <= pos - p (< window) */
        __m512 d = _mm512_set1_ps((float)(p - a->start - r0));
        __mmask16 ok = _mm512_cmp_ps_mask(iota, d, _CMP_GE_OQ);
        if (a->window > 0)
            ok &= _mm512_cmp_ps_mask(iota, _mm512_add_ps(d, _mm512_set1_ps((float)a->window)), _CMP_LT_OQ);
        s = _mm512_mask_blend_ps(ok, _mm512_set1_ps(-INFINITY), s);
        mx = _mm512_max_ps(mx, s);
        _mm512_store_ps(sc + (size_t)(p - p0) * 16, s);
    }
    /* lanes past the last query have no keys: any finite max keeps them NaN-free */
    mx = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), mx, _mm512_setzero_ps());
    __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < hd; i++) acc[i] = _mm512_setzero_ps();
    for (int p = p0; p <= p1; p++) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_load_ps(sc + (size_t)(p - p0) * 16), mx));
        sum = _mm512_add_ps(sum, e);
        const float *v = kw;
        if (a->vc16)
            for (int i = 0; i < hd; i++) kw[i] = seer_bf16_to_f32(a->vc16[(size_t)p * (size_t)kvd + kv_off + (size_t)i]);
        else v = a->vc + (size_t)p * (size_t)kvd + kv_off;
#pragma GCC unroll 16
        for (int i = 0; i < hd; i++) acc[i] = _mm512_fmadd_ps(e, _mm512_set1_ps(v[i]), acc[i]);
    }
    __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), sum);
    for (int i = 0; i < hd; i++) {
        _mm512_storeu_ps(tmp, _mm512_mul_ps(acc[i], inv));
        for (int q = 0; q < nb; q++) a->out[(size_t)(r0 + q) * (size_t)qd + h * (size_t)hd + (size_t)i] = tmp[q];
    }
}

__attribute__((target("avx512f"))) static void small_head_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    small_job *j = ctx;
    const seer_attn_params_t *a = j->a;
    float *sc = aligned_alloc(64, (size_t)(a->start + a->n) * 16 * sizeof(float));
    if (!sc) {
        j->failed = 1;
        return;
    }
    for (size_t item = begin; item < end; item++) {
        size_t h = item / (size_t)j->nqb;
        int r0 = (int)(item % (size_t)j->nqb) * 16;
        switch (a->hd) {
        case 4: small_block(a, h, r0, sc, 4); break;
        case 8: small_block(a, h, r0, sc, 8); break;
        default: small_block(a, h, r0, sc, 16); break;
        }
    }
    free(sc);
}
#endif

int seer_k_attention_small(seer_pool_t *p, const seer_attn_params_t *a) {
#ifdef SEER_X86
    if ((a->hd != 4 && a->hd != 8 && a->hd != 16) || !seer_k_have_avx512()) return 0;
    small_job j = {.a = a, .nqb = (a->n + 15) / 16};
    size_t item_work = 2u * 16u * (size_t)(a->start + a->n) * (size_t)a->hd;
    size_t min_items = item_work >= SEER_PAR_WORK ? 1 : (SEER_PAR_WORK + item_work - 1) / item_work;
    seer_pool_for(p, (size_t)a->H * (size_t)j.nqb, min_items, small_head_chunk, &j);
    return !j.failed;
#else
    (void)p;
    (void)a;
    return 0;
#endif
}

/* ---- widening 16-bit weights ------------------------------------------------------------------
 * bf16 (a shift) and f16 (F16C) to f32, exact either way: the GEMM path widens a block of rows
 * of 16-bit weights for OpenBLAS (kernels_blas.c). */
#ifdef SEER_X86
__attribute__((target("avx2,f16c"))) static void widen16_avx2(float *dst, const uint16_t *src, size_t n, int bf16) {
    size_t i = 0;
    if (bf16)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i))), 16)));
    else
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = bf16 ? seer_bf16_to_f32(src[i]) : seer_f16_to_f32(src[i]);
}
#endif

void seer_k_widen16(float *dst, const uint16_t *src, size_t n, int bf16) {
#ifdef SEER_X86
    if (seer_k_have_avx2()) { /* which checks F16C too */
        widen16_avx2(dst, src, n, bf16);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = bf16 ? seer_bf16_to_f32(src[i]) : seer_f16_to_f32(src[i]);
}

/* ---- RMSNorm ----------------------------------------------------------------------------------
 * The mean square is summed in double, as the portable loop in kernels.c does (16 lanes: a
 * different order of double additions, the same float after rounding in all but ties); AVX-512
 * and AVX2 in the same order, so every x86 CPU seer has a vector path on gives the same bits. */
#ifdef SEER_X86
/* y = (x * inv) * (w, or 1 + w) for one row: each product one rounding, so any vector width
 * gives these bits; the AVX-512 and AVX2 norms both end here. */
__attribute__((target("avx2,fma,f16c"))) static void rmsnorm_scale_avx2(float *yt, const float *xt, int d, const seer_weight_t *w,
                                                                      float inv, int one_plus) {
    __m256 vinv = _mm256_set1_ps(inv), one = _mm256_set1_ps(one_plus ? 1.0f : 0.0f);
    int i = 0;
    for (; i + 8 <= d; i += 8) {
        __m256 wv;
        if (w->dtype == SEER_F32) wv = _mm256_loadu_ps((const float *)w->data + i);
        else if (w->dtype == SEER_BF16)
            wv = _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w->data + i))), 16));
        else wv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w->data + i)));
        _mm256_storeu_ps(yt + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xt + i), vinv), _mm256_add_ps(one, wv)));
    }
    for (; i < d; i++) {
        float wi = seer_w_load(w, (size_t)i);
        yt[i] = (xt[i] * inv) * (one_plus ? 1.0f + wi : wi);
    }
}

__attribute__((target("avx512f,avx512dq,avx512vl"))) static void rmsnorm_avx512(float *y, const float *x, int n, int d,
                                                                                 const seer_weight_t *w, float eps,
                                                                                 int one_plus) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * (size_t)d;
        float *yt = y + (size_t)t * (size_t)d;
        __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
        int i = 0;
        for (; i + 16 <= d; i += 16) {
            __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(xt + i)), hi = _mm512_cvtps_pd(_mm256_loadu_ps(xt + i + 8));
            a0 = _mm512_fmadd_pd(lo, lo, a0);
            a1 = _mm512_fmadd_pd(hi, hi, a1);
        }
        double ss = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
        for (; i < d; i++) ss += (double)xt[i] * xt[i];
        rmsnorm_scale_avx2(yt, xt, d, w, 1.0f / sqrtf((float)(ss / d) + eps), one_plus);
    }
}

/* The same sums on AVX2 in the same order: AVX-512's two 8-lane accumulators as four of 4 lanes
 * (a0/a1 the low and high halves of the first, b0/b1 of the second), reduced as GCC's
 * _mm512_reduce_add_pd does (the 8 lanes' upper half onto the lower, then 4 onto 2, then 2 onto 1),
 * so an AVX2 and an AVX-512 CPU give a row the same bits (tests/unit/test_kernels.c). */
__attribute__((target("avx2,fma,f16c"))) static void rmsnorm_avx2(float *y, const float *x, int n, int d,
                                                             const seer_weight_t *w, float eps, int one_plus) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * (size_t)d;
        float *yt = y + (size_t)t * (size_t)d;
        __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd(), b0 = _mm256_setzero_pd(), b1 = _mm256_setzero_pd();
        int i = 0;
        for (; i + 16 <= d; i += 16) {
            __m256 lo = _mm256_loadu_ps(xt + i), hi = _mm256_loadu_ps(xt + i + 8);
            __m256d l0 = _mm256_cvtps_pd(_mm256_castps256_ps128(lo)), l1 = _mm256_cvtps_pd(_mm256_extractf128_ps(lo, 1));
            __m256d h0 = _mm256_cvtps_pd(_mm256_castps256_ps128(hi)), h1 = _mm256_cvtps_pd(_mm256_extractf128_ps(hi, 1));
            a0 = _mm256_fmadd_pd(l0, l0, a0);
            a1 = _mm256_fmadd_pd(l1, l1, a1);
            b0 = _mm256_fmadd_pd(h0, h0, b0);
            b1 = _mm256_fmadd_pd(h1, h1, b1);
        }
        __m256d u = _mm256_add_pd(_mm256_add_pd(a1, b1), _mm256_add_pd(a0, b0)); /* lanes 4-7 + lanes 0-3 */
        __m128d v = _mm_add_pd(_mm256_extractf128_pd(u, 1), _mm256_castpd256_pd128(u));
        double ss = _mm_cvtsd_f64(v) + _mm_cvtsd_f64(_mm_unpackhi_pd(v, v));
        for (; i < d; i++) ss += (double)xt[i] * xt[i];
        rmsnorm_scale_avx2(yt, xt, d, w, 1.0f / sqrtf((float)(ss / d) + eps), one_plus);
    }
}
#endif

int seer_k_rmsnorm_fast(float *y, const float *x, int n, int d, const seer_weight_t *w, float eps, int one_plus) {
#ifdef SEER_X86
    if (w->dtype == SEER_F32 || w->dtype == SEER_BF16 || w->dtype == SEER_F16) {
        if (seer_k_have_avx512()) rmsnorm_avx512(y, x, n, d, w, eps, one_plus);
        else if (seer_k_have_avx2()) /* F16C included */
            rmsnorm_avx2(y, x, n, d, w, eps, one_plus);
        else return 0;
        return 1;
    }
#endif
    (void)y, (void)x, (void)n, (void)d, (void)w, (void)eps, (void)one_plus;
    return 0;
}

/* ---- prefill linear layers on AMX (bf16 weights) ----------------------------------------------
 * Work item: 128 output rows (4 sub-blocks of 32), repacked into contiguous 1 KiB tiles that stay
 * in L2 while every pair of 16-token blocks of packed activations streams past them; per 32-input
 * step 2 W tiles, each piece's 2 activation tiles, 4 TDPBF16PS per piece into four 16 x 16 f32
 * accumulators (tiles 0-3). Two arrangements, the same bits:
 * - amx_gemm_chunk (33 to AMX_XA_MIN - 1 tokens): W's rows are the A tiles (each item's rows
 *   copied 64 bytes at a time), the pieces the B tiles in the VNNI layout (amx_pack_chunk, as
 *   the few-token kernel below); a C tile is 16 rows x 16 tokens, transposed into y in registers.
 * - amx_gemm_xa_chunk (AMX_XA_MIN tokens on): x is the A tiles (each token's 32 inputs of a step
 *   a 64-byte row, as x holds them: amx_pack_xa_chunk, no transpose), W the B tiles (each 16
 *   rows' step transposed into the VNNI layout when the item starts); a C tile is 16 tokens x 16
 *   rows, y's own layout, stored straight into y (TILESTORED with y's row stride) unless it has a
 *   bias or is cut by the matrix's or the tokens' end. While an item runs, the next item's rows
 *   are prefetched into L2 (AMX_PF_MAX lines a step at most), so its tiles are made from L2.
 *   The transposes of W cost per item, those of C per token pair: past ~160 tokens this wins.
 *   Its items are 256 rows where the tiles of 128 take at most AMX_XA_ITEM_BYTES (inputs up to
 *   1024) and the matrix has 4 such items per thread or more (q, o, gate, up, the LM head of the
 *   0.5B model): the pieces, 3 MiB for 512 exact tokens of 1024 inputs, stream past half as many
 *   items (COLD=1 DTYPE=bf16 linear_kernel 512, one thread, three rounds: exact 2816x1024 /
 *   1024x1024 404-427 / 448-474 -> 472-499 / 502-539 GFLOP/s, fast level; 256-row items of
 *   2816 inputs were 10% slower fast; the 0.5B prefill, model_seer.lua 512 tokens 2 threads,
 *   exact 721-726 -> 733-773 tok/s, fast level).
 * Each output is the same chain of f32 additions of the same exact products whichever operand the
 * tile unit calls A (tests/unit/test_kernels.c: each token against its call alone, 1-192 tokens).
 * Pieces: by default x = hi + mid + lo exactly (three bf16 values hold f32's 24-bit mantissa; a
 * remainder x - round(x) is exact in f32), and bf16 x bf16 products are exact in f32, so the
 * only rounding left is f32 accumulation, as in the f32 kernels: the parity bar (1e-4) holds on
 * bf16 checkpoints. Two pieces (16 mantissa bits), the former default, left up to 1.4e-4 on the
 * bf16 parity models' logits (tests/parity/bf16_pieces.py replays it in transformers).
 * precision = "fast" (seer_k_fast_bf16 set for the forward pass) uses one piece, x rounded to
 * bf16 as torch's bf16 matmul does: a third of the tile work, at that rounding's error.
 * Measured on a 2-core AMX Xeon VM (2026-12-02), one thread, weights from memory (COLD=1
 * DTYPE=bf16 [FAST=1] build/bench/linear_kernel N, the 0.5B model's three shapes 2816x1024 /
 * 1024x2816 / 1024x1024, three rounds alternating), amx_gemm_chunk -> amx_gemm_xa_chunk: 512
 * tokens fast 817-839 / 907-967 / 783-819 -> 947-989 / 981-1006 / 904-951 GFLOP/s, exact 370-381 /
 * 289-305 / 403-429 -> 395-404 / 314-320 / 427-447; 192 tokens fast 715-721 / 786-856 / 694-714 ->
 * 792-834 / 800-828 / 746-759; 128 tokens 5% slower, 64 tokens 10-15% slower (so AMX_XA_MIN).
 * Tried there and not kept: the inputs in chunks of 4-16 steps with the sums carried in memory,
 * so a token pair's pieces are read from L1 by all four sub-blocks (level, in both arrangements);
 * the next item's rows read with plain loads instead of prefetched (slower), or made into tiles
 * a share per chain of this item (stores that miss L1 slow the tile loads next to them), or
 * prefetched for amx_gemm_chunk (level); tile 6's two products before tile 7's (exact 535-554
 * against 593-607 tok/s); items of 64 or 256 rows (level or slower). A /tmp replica of the inner
 * loop alone reaches ~48% of the tile rate with both operands from L2 and ~82% from L1. */
#ifdef SEER_X86
#ifndef AMX_ROWS
#define AMX_ROWS 128
#endif
#ifndef AMX_PF_MAX
#define AMX_PF_MAX 4 /* lines of the next item's rows prefetched per step, at most */
#endif
#ifndef AMX_XA_ITEM_BYTES
#define AMX_XA_ITEM_BYTES (256u << 10)
#endif
#ifndef AMX_XA_MIN
#define AMX_XA_MIN 160 /* tokens from which x is the A tiles (amx_gemm_xa_chunk) */
#endif
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg_t;

typedef struct {
    float *y;
    const float *x;
    /* packed activation pieces (hi, mid, lo): for the few-token kernel (amx_pack_chunk), each
     * [token block][in/2 pairs][16 tokens] pairs of bf16 (B tiles); for the prefill kernel
     * (amx_pack_xa_chunk), [token block][in/32 steps][16 tokens][32] bf16 (A tiles) */
    uint32_t *piece[3];
    int npieces; /* 3: exact (x = hi + mid + lo); 1: x rounded to bf16 (precision = "fast") */
    const seer_weight_t *w, *bias;
    int n, ntb;    /* tokens, token blocks (even) */
    int item_rows; /* amx_gemm_xa_chunk's rows per item */
    int no_pad;    /* amx_pack_xa_chunk: leave the rows past n unwritten (tiles of n rows read them not) */
    int failed;
} amx_job;

/* Every tile 16 rows of 64 bytes (palette 1), on the calling thread. */
__attribute__((target("amx-tile"))) static void amx_tiles_16x64(void) {
    amx_cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    _tile_loadconfig(&cfg);
}


/* x rounded to bf16 (round to nearest even), widened back to f32. */
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"), always_inline)) static inline __m512 bf16_round(__m512 a) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(a)), 16));
}

/* Token block tb of x into the VNNI layout, one array per piece (rows past n are zeros): for
 * each 32-input step, the 16 tokens' 16 input pairs are split into pieces and transposed in
 * registers so that each pair's 16 tokens are one contiguous 64-byte tile row. */
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"))) static void amx_pack_chunk(void *ctx, size_t begin,
                                                                                           size_t end, int thread) {
    (void)thread;
    amx_job *j = ctx;
    int64_t in = j->w->cols;
    int np = j->npieces;
    __m512i pc[3][16];
    for (size_t tb = begin; tb < end; tb++) {
        for (int64_t kb = 0; kb < in / 32; kb++) {
            for (int jj = 0; jj < 16; jj++) {
                int t = (int)tb * 16 + jj;
                if (t < j->n) {
                    const float *xt = j->x + (size_t)t * (size_t)in + (size_t)kb * 32;
                    __m512 a = _mm512_loadu_ps(xt), b = _mm512_loadu_ps(xt + 16);
                    for (int q = 0; q < np; q++) {
                        pc[q][jj] = (__m512i)_mm512_cvtne2ps_pbh(b, a);
                        /* the remainder is exact in f32: a and round(a) share the exponent
                         * range and differ in the low bits only */
                        a = _mm512_sub_ps(a, bf16_round(a));
                        b = _mm512_sub_ps(b, bf16_round(b));
                    }
                } else {
                    for (int q = 0; q < np; q++) pc[q][jj] = _mm512_setzero_si512();
                }
            }
            size_t base = (tb * (size_t)(in / 2) + (size_t)kb * 16) * 16;
            for (int q = 0; q < np; q++) {
                tr16x16_epi32(pc[q]);
                for (int p = 0; p < 16; p++) _mm512_store_si512(j->piece[q] + base + (size_t)p * 16, pc[q][p]);
            }
        }
    }
}

/* The bias of rows r0 .. r0 + nr - 1 in a vector (zeros past them, and without a bias). */
__attribute__((target("avx512f"), always_inline)) static inline __m512 amx_bias16(const amx_job *j, int64_t r0, int nr) {
    if (!(j->bias && j->bias->data)) return _mm512_setzero_ps();
    float bb[16] = {0};
    for (int r = 0; r < nr; r++) bb[r] = seer_w_load(j->bias, (size_t)(r0 + r));
    return _mm512_loadu_ps(bb);
}

/* A C tile stored at c (16 rows from r0, 16 tokens from t0) plus bias into y: column t of c is 16
 * consecutive floats of y's row t, transposed in registers (perf gave 16 gathers 10% of a bf16
 * prefill, the stores now 3%). */
__attribute__((target("amx-tile,amx-bf16,avx512f"), always_inline)) static inline void amx_store_tile(
    const amx_job *j, const float *c, int64_t r0, int t0) {
    int64_t out = j->w->rows;
    int nr = out - r0 < 16 ? (int)(out - r0) : 16;
    if (nr <= 0) return;
    __mmask16 km = (__mmask16)((1u << nr) - 1);
    __m512 bv = amx_bias16(j, r0, nr);
    __m512i cr[16];
    for (int r = 0; r < 16; r++) cr[r] = _mm512_load_si512(c + r * 16);
    tr16x16_epi32(cr);
    for (int t = 0; t < 16 && t0 + t < j->n; t++)
        _mm512_mask_storeu_ps(j->y + (size_t)(t0 + t) * (size_t)out + (size_t)r0, km,
                              _mm512_add_ps(_mm512_castsi512_ps(cr[t]), bv));
}

__attribute__((target("amx-tile,amx-bf16,avx512f"))) static void amx_gemm_chunk(void *ctx, size_t begin, size_t end,
                                                                                 int thread) {
    (void)thread;
    amx_job *j = ctx;
    const seer_weight_t *w = j->w;
    int64_t in = w->cols, out = w->rows, nkb = in / 32;
    const uint16_t *W = w->data;
    /* The item's rows repacked tile by tile ([sub-block][kb][2][16][32]): each A tile is then
     * one contiguous KiB instead of 16 rows 2*in bytes apart (measured: 1.3x faster), and the
     * partial last slice is zero-padded. */
    uint16_t *pk = aligned_alloc(64, (size_t)AMX_ROWS * (size_t)in * sizeof(uint16_t));
    if (!pk) {
        j->failed = 1;
        return;
    }
    amx_tiles_16x64();
    _Alignas(64) float c[16 * 16];
    for (size_t item = begin; item < end; item++) {
        int64_t base = (int64_t)item * AMX_ROWS;
        /* row by row, so that each weight row is read front to back (the hardware prefetchers
         * follow one stream; stepping across 32 rows per 64 bytes left them behind) */
        for (int sb = 0; sb < AMX_ROWS / 32 && base + sb * 32 < out; sb++)
            for (int r = 0; r < 32; r++) {
                int64_t o = base + sb * 32 + r;
                for (int64_t kb = 0; kb < nkb; kb++) {
                    uint16_t *dst = pk + (((size_t)sb * (size_t)nkb + (size_t)kb) * 32 + (size_t)r) * 32;
                    if (o < out) memcpy(dst, W + (size_t)o * (size_t)in + (size_t)kb * 32, 64);
                    else memset(dst, 0, 64);
                }
            }
        for (int tp = 0; tp < j->ntb; tp += 2) {
            for (int sb = 0; sb < AMX_ROWS / 32; sb++) {
                int64_t o0 = base + sb * 32;
                if (o0 >= out) break;
                const uint16_t *wa = pk + (size_t)sb * (size_t)nkb * 32 * 32;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (int64_t kb = 0; kb < nkb; kb++) {
                    _tile_loadd(4, wa + kb * 1024, 64);
                    _tile_loadd(5, wa + kb * 1024 + 512, 64);
                    /* hi first, then the smaller pieces, into the same accumulators */
                    for (int q = 0; q < j->npieces; q++) {
                        const uint32_t *b0 = j->piece[q] + (size_t)tp * (size_t)(in / 2) * 16;
                        const uint32_t *b1 = b0 + (size_t)(in / 2) * 16;
                        _tile_loadd(6, b0 + kb * 256, 64);
                        _tile_loadd(7, b1 + kb * 256, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(1, 4, 7);
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                }
                for (int q = 0; q < 4; q++) {
                    switch (q) { /* tile numbers are immediates */
                    case 0: _tile_stored(0, c, 64); break;
                    case 1: _tile_stored(1, c, 64); break;
                    case 2: _tile_stored(2, c, 64); break;
                    default: _tile_stored(3, c, 64); break;
                    }
                    amx_store_tile(j, c, o0 + (q >> 1) * 16, (tp + (q & 1)) * 16);
                }
            }
        }
    }
    _tile_release();
    free(pk);
}

/* Token block tb of x for the prefill kernel, one array per piece, as A tiles: [token block][kb]
 * [16 tokens][32 inputs] of bf16 (rows past n are zeros), each token's 32 inputs of a step one
 * 64-byte tile row, so no transpose. */
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"))) static void amx_pack_xa_chunk(void *ctx, size_t begin,
                                                                                                size_t end, int thread) {
    (void)thread;
    amx_job *j = ctx;
    int64_t in = j->w->cols, nkb = in / 32;
    int np = j->npieces;
    for (size_t tb = begin; tb < end; tb++)
        for (int jj = 0; jj < 16; jj++) {
            int t = (int)tb * 16 + jj;
            if (t >= j->n && j->no_pad) break;
            for (int64_t kb = 0; kb < nkb; kb++) {
                size_t at = ((tb * (size_t)nkb + (size_t)kb) * 16 + (size_t)jj) * 16; /* in 32-bit words */
                if (t >= j->n) {
                    for (int q = 0; q < np; q++) _mm512_store_si512(j->piece[q] + at, _mm512_setzero_si512());
                    continue;
                }
                const float *xt = j->x + (size_t)t * (size_t)in + (size_t)kb * 32;
                __m512 a = _mm512_loadu_ps(xt), b = _mm512_loadu_ps(xt + 16);
                for (int q = 0; q < np; q++) {
                    _mm512_store_si512(j->piece[q] + at, (__m512i)_mm512_cvtne2ps_pbh(b, a));
                    a = _mm512_sub_ps(a, bf16_round(a)); /* exact in f32, as in amx_pack_chunk */
                    b = _mm512_sub_ps(b, bf16_round(b));
                }
            }
        }
}

/* Step kb of 16 rows of W from row o (zeros past the last row) as a B tile at dst: tile row p
 * holds input pair p of each of the 16 rows (the VNNI layout), a 16 x 16 transpose of 32-bit
 * pairs. */
__attribute__((target("avx512f"), always_inline)) static inline void amx_w_tile(uint16_t *dst, const uint16_t *W, int64_t in,
                                                                                 int64_t out, int64_t o, int64_t kb) {
    __m512i r[16];
    for (int i = 0; i < 16; i++)
        r[i] = o + i < out ? _mm512_loadu_si512(W + (size_t)(o + i) * (size_t)in + (size_t)kb * 32) : _mm512_setzero_si512();
    tr16x16_epi32(r);
    for (int p = 0; p < 16; p++) _mm512_store_si512(dst + p * 32, r[p]);
}

/* C tile (16 tokens from t0, 16 rows from r0) at c into y, plus bias, rows and tokens past the
 * ends left out. */
__attribute__((target("avx512f"), always_inline)) static inline void amx_put_tile(const amx_job *j, const float *c, int64_t r0,
                                                                                   int t0) {
    int64_t out = j->w->rows;
    int nr = out - r0 < 16 ? (int)(out - r0) : 16;
    if (nr <= 0) return;
    __mmask16 km = (__mmask16)((1u << nr) - 1);
    __m512 bv = amx_bias16(j, r0, nr);
    for (int t = 0; t < 16 && t0 + t < j->n; t++)
        _mm512_mask_storeu_ps(j->y + (size_t)(t0 + t) * (size_t)out + (size_t)r0, km, _mm512_add_ps(_mm512_load_ps(c + t * 16), bv));
}

/* Tile i of a chain into y: straight from the tile when it is whole and there is no bias, else
 * through c. (tile numbers are immediates) */
#define AMX_PUT(I, R0, T0)                                                                                             \
    do {                                                                                                               \
        if (direct && (T0) + 16 <= j->n && (R0) + 16 <= out)                                                           \
            _tile_stored(I, j->y + (size_t)(T0) * (size_t)out + (size_t)(R0), out * 4);                               \
        else {                                                                                                         \
            _tile_stored(I, c, 64);                                                                                    \
            amx_put_tile(j, c, R0, T0);                                                                                \
        }                                                                                                              \
    } while (0)

__attribute__((target("amx-tile,amx-bf16,avx512f"))) static void amx_gemm_xa_chunk(void *ctx, size_t begin, size_t end,
                                                                                    int thread) {
    (void)thread;
    amx_job *j = ctx;
    const seer_weight_t *w = j->w;
    int64_t in = w->cols, out = w->rows, nkb = in / 32;
    const uint16_t *W = w->data;
    /* The item's rows as B tiles ([sub-block][kb][2][16 pairs][16 rows x 2]), each one contiguous
     * KiB, made when the item starts, from rows the item before prefetched into L2. */
    int64_t rows = j->item_rows; /* AMX_ROWS or twice that */
    /* a packed weight (seer_k_amx_pack) is those tiles already, an item's in its own bytes */
    const int packed = w->amx_packed;
/* A packed weight's item is copied into the buffer rather than read in place: in place, the
 * first token pair's tile loads from memory stall (0.5B bf16 512-token prefill, 2 threads, exact
 * 689-703 tok/s in place against 768-795 copied and 784-809 on rows, 2026-12-02). */
#ifndef AMX_PK_COPY
#define AMX_PK_COPY 1
#endif
    uint16_t *pk = packed && !AMX_PK_COPY ? NULL : aligned_alloc(64, (size_t)rows * (size_t)in * sizeof(uint16_t));
    if (!(packed && !AMX_PK_COPY) && !pk) {
        j->failed = 1;
        return;
    }
    int direct = !(j->bias && j->bias->data);
    int np = j->npieces;
    amx_tiles_16x64();
    _Alignas(64) float c[16 * 16];
    const size_t tb_words = (size_t)nkb * 256; /* a token block of a piece, in 32-bit words */
    for (size_t item = begin; item < end; item++) {
        int64_t base = (int64_t)item * rows;
        int nsb = 0;
        while (nsb < rows / 32 && base + nsb * 32 < out) nsb++;
        const uint16_t *tiles = packed && !AMX_PK_COPY ? W + (size_t)base * (size_t)in : pk;
        if (packed && AMX_PK_COPY) memcpy(pk, W + (size_t)base * (size_t)in, (size_t)nsb * 32 * (size_t)in * sizeof(uint16_t));
        for (int g = 0; g < nsb * 2 && !packed; g++)
            for (int64_t kb = 0; kb < nkb; kb++)
                amx_w_tile(pk + ((size_t)(g >> 1) * (size_t)nkb + (size_t)kb) * 1024 + (size_t)(g & 1) * 512, W, in, out,
                           base + g * 16, kb);
        /* the next item's rows (contiguous) prefetched into L2 a few lines a step, so that its
         * B tiles are made from L2 rather than from memory */
        const char *pf = NULL;
        size_t pf_left = 0, pf_per = 0;
        if (item + 1 < end) {
            int64_t nrows = out - (base + rows) < rows ? out - (base + rows) : rows;
            size_t steps = (size_t)(j->ntb / 2) * (size_t)nsb * (size_t)nkb;
            pf = (const char *)(W + (size_t)(base + rows) * (size_t)in);
            pf_left = (size_t)nrows * (size_t)in * sizeof(uint16_t) / 64;
            pf_per = (pf_left + steps - 1) / steps;
            if (pf_per > AMX_PF_MAX) pf_per = AMX_PF_MAX;
        }
        for (int tp = 0; tp < j->ntb; tp += 2) {
            for (int sb = 0; sb < nsb; sb++) {
                int64_t o0 = base + sb * 32;
                const uint16_t *wb = tiles + (size_t)sb * (size_t)nkb * 1024;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (int64_t kb = 0; kb < nkb; kb++) {
                    _tile_loadd(6, wb + kb * 1024, 64);
                    _tile_loadd(7, wb + kb * 1024 + 512, 64);
                    /* hi first, then the smaller pieces, into the same accumulators */
                    for (int q = 0; q < np; q++) {
                        const uint32_t *a0 = j->piece[q] + (size_t)tp * tb_words + (size_t)kb * 256;
                        _tile_loadd(4, a0, 64);
                        _tile_loadd(5, a0 + tb_words, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(1, 4, 7);
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                    for (size_t i = 0; i < pf_per && pf_left; i++, pf_left--, pf += 64) _mm_prefetch(pf, _MM_HINT_T2);
                }
                int t0 = tp * 16;
                AMX_PUT(0, o0, t0);
                AMX_PUT(1, o0 + 16, t0);
                AMX_PUT(2, o0, t0 + 16);
                AMX_PUT(3, o0 + 16, t0 + 16);
            }
        }
    }
    _tile_release();
    free(pk);
}
#undef AMX_PUT
#endif

/* ---- few tokens on AMX (decode steps, batched decode, short prompts) ---------------------------
 * Up to AMX_SMALL_MAX tokens: one or two 16-token blocks, the pieces packed on the calling thread
 * into a buffer it keeps, once for every matrix of a seer_k_linear_amx_multi call (q, k and v;
 * gate and up), whose blocks are one pool job. Each pool task is a run of 32-row blocks (AMX_SMALL_TASKS per thread,
 * from a shared counter); a whole block's A tiles are loaded straight from W's rows (stride = the
 * row), each row's line AMX_SMALL_ROWPF steps ahead prefetched (into the next block past this
 * one's end); the last, partial block is copied zero-padded. Per 32-input step: the two A tiles,
 * each piece's B tile(s), 2 (one token block) or 4 (two) TDPBF16PS per piece; with one token
 * block the A tiles alternate between two tile pairs from step to step and the pieces between
 * tiles 6 and 7 (a tile load waits for the products that read the tile before). Every output
 * element gets the prefill kernel's chain (zero; per 32-input step in order, the pieces hi, mid,
 * lo; then + bias), so a token's bits do not depend on how many tokens the call has or which
 * kernel ran it (tests/unit/test_kernels.c), and a batched decode step gives each sequence the
 * bits of its decode alone and of its prefill.
 * Measured on a 2-core Xeon VM with AMX (2026-12-02; tests/bench/batch_seer.lua MODEL 2 32 1 4 16
 * on the 0.5B bf16 bench model, 2 threads, against the AVX-512 kernels this CPU ran before,
 * alternating): batch 16 79.4 / 81.8 -> 352.7 / 360.4 tok/s, batch 4 66.8 / 66.4 -> 101.1 /
 * 101.1, batch 1 30.6 / 29.9 -> 26.8 / 27.4 (before the shared packing and one job per group:
 * 308-313, 87-90, 22.5-24.5; 8 row tasks per thread instead of 2, batch 1 22.6-23.6 against
 * 23.8-24.2). Batch 1 is the loss:
 * one thread's tile loads of 16 rows 64 bytes each reach ~22 GB/s with the weights in L2
 * (tests/bench/linear_kernel.c; the AVX-512 kernel 42-45) and 17-22 from memory (it 23-27).
 * Tried and not kept: rows copied into contiguous tiles first (12-13 GB/s), the next block
 * prefetched into L2 (T1 or T2) instead of each row's lines (level or slower), runs of 8 lines per
 * row (slower), four accumulators over 64 rows with one A tile reloaded per product (9 GB/s: a
 * tile load waits for the products that read the tile before), three over 48 rows (batch 1 18.6).
 * That is the row layout's cost: an in-memory model's weights are in the tile layout instead
 * (seer_k_amx_pack, below) and run amx_small_packed_chunk, one stream a task. */
#ifdef SEER_X86
#ifndef AMX_SMALL_MAX
#define AMX_SMALL_MAX 32
#endif
#ifndef AMX_SMALL_ROWPF
#define AMX_SMALL_ROWPF 2
#endif
#ifndef AMX_SMALL_HINT
#define AMX_SMALL_HINT _MM_HINT_T0
#endif
#ifndef AMX_SMALL_TASKS
#define AMX_SMALL_TASKS 2 /* row tasks per thread, taken from a shared counter */
#endif
enum { AMX_MULTI = 8 };
typedef struct {
    amx_job *jobs; /* one per matrix, sharing the packed pieces */
    int count;
    int64_t first[AMX_MULTI + 1]; /* matrix i's blocks are first[i] .. first[i + 1] - 1 */
    int64_t blocks, task;         /* 32-row blocks of every matrix, blocks per task */
    atomic_size_t next;
} amx_small_run;

/* The next task of a run: its blocks [*b0, *b1) of every matrix's 32-row blocks; 0 when none is left. */
static inline int amx_take_task(amx_small_run *run, int64_t *b0, int64_t *b1) {
    *b0 = (int64_t)atomic_fetch_add_explicit(&run->next, 1, memory_order_relaxed) * run->task;
    if (*b0 >= run->blocks) return 0;
    *b1 = *b0 + run->task < run->blocks ? *b0 + run->task : run->blocks;
    return 1;
}

/* The matrix that block gb of a run belongs to. */
static inline int amx_block_matrix(const amx_small_run *run, int64_t gb) {
    int m = 0;
    while (gb >= run->first[m + 1]) m++;
    return m;
}

/* C tiles 0, 1 (rows base .. base + 31 of the first token block) and, with TWO, 2, 3 (the second
 * block's) through c into y with PUT (amx_store_tile or amx_put_tile); tile numbers are
 * immediates. */
#define AMX_STORE_C(PUT, TWO)                                                                                          \
    do {                                                                                                               \
        _tile_stored(0, c, 64);                                                                                        \
        PUT(j, c, base, 0);                                                                                            \
        _tile_stored(1, c, 64);                                                                                        \
        PUT(j, c, base + 16, 0);                                                                                       \
        if (TWO) {                                                                                                     \
            _tile_stored(2, c, 64);                                                                                    \
            PUT(j, c, base, 16);                                                                                       \
            _tile_stored(3, c, 64);                                                                                    \
            PUT(j, c, base + 16, 16);                                                                                  \
        }                                                                                                              \
    } while (0)

__attribute__((target("amx-tile,amx-bf16,avx512f"))) static void amx_small_chunk(void *ctx, size_t begin, size_t end,
                                                                                  int thread) {
    (void)begin, (void)end, (void)thread;
    amx_small_run *run = ctx;
    amx_job *j = &run->jobs[0];
    int64_t in = j->w->cols, nkb = in / 32; /* every matrix's */
    enum { rb = 32 }; /* rows per block */
    int two = j->ntb > 1, np = j->npieces;
    size_t need = (size_t)rb * (size_t)in * sizeof(uint16_t);
    uint16_t *pk = (uint16_t *)seer_k_thread_buffer(SEER_BUF_AMX_PANEL, (need + 3) / 4);
    if (!pk) {
        j->failed = 1;
        return;
    }
    amx_tiles_16x64();
    _Alignas(64) float c[16 * 16];
    const size_t tb_words = (size_t)(in / 2) * 16;
    const uint32_t *B0 = j->piece[0], *B1 = np > 1 ? j->piece[1] : NULL, *B2 = np > 2 ? j->piece[2] : NULL;
    for (int64_t b0, b1; amx_take_task(run, &b0, &b1);) {
        for (int64_t gb = b0; gb < b1; gb++) {
            int m = amx_block_matrix(run, gb);
            j = &run->jobs[m];
            const uint16_t *W = j->w->data;
            int64_t out = j->w->rows, blk = gb - run->first[m], base = blk * rb;
            /* A tile i of step kb: a[i] + kb * astep, rows stride apart */
            const uint16_t *a[2];
            size_t astep;
            long stride;
            int direct = base + rb <= out;
            if (direct) { /* a whole block: the A tiles straight from W's rows */
                for (int i = 0; i < rb / 16; i++) a[i] = W + (size_t)(base + 16 * i) * (size_t)in;
                astep = 32, stride = (long)in * 2;
            } else { /* the last, partial block: its rows into [tile][kb][16 rows][32 inputs], zero-padded */
                for (int r = 0; r < rb; r++) {
                    int64_t o = base + r;
                    uint16_t *dst = pk + ((size_t)(r >> 4) * (size_t)nkb * 16 + (size_t)(r & 15)) * 32;
                    for (int64_t kb = 0; kb < nkb; kb++)
                        _mm512_store_si512(dst + (size_t)kb * 512,
                                           o < out ? _mm512_loadu_si512(W + (size_t)o * (size_t)in + kb * 32) : _mm512_setzero_si512());
                }
                for (int i = 0; i < rb / 16; i++) a[i] = pk + (size_t)i * (size_t)nkb * 512;
                astep = 512, stride = 64;
            }
            /* the rows of the next block of the task, whole, for the prefetch past this one's end */
            int next_whole = gb + 1 < b1 && base + 2 * rb <= out;
            _tile_zero(0);
            _tile_zero(1);
            if (two) {
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int64_t kb = 0; kb < nkb; kb++) {
#if AMX_SMALL_ROWPF
                /* each row's line AMX_SMALL_ROWPF steps on, into the next block's first steps */
                if (direct) {
                    const uint16_t *pr = kb + AMX_SMALL_ROWPF < nkb ? a[0] + (size_t)(kb + AMX_SMALL_ROWPF) * 32
                                         : next_whole ? a[0] + (size_t)rb * (size_t)in + (size_t)(kb + AMX_SMALL_ROWPF - nkb) * 32
                                                      : NULL;
                    if (pr)
                        for (int r = 0; r < rb; r++) _mm_prefetch((const char *)(pr + (size_t)r * (size_t)in), AMX_SMALL_HINT);
                }
#else
                (void)next_whole;
#endif
                size_t ao = (size_t)kb * astep, bo = (size_t)kb * 256;
                if (!two) {
                    /* C0 and C1 (rows 0-15, 16-31) each get the pieces in order, hi, mid, lo.
                     * Tiles are not renamed: a load waits for the products that read the tile
                     * before. So the A tiles alternate between 2-3 (even steps) and 4-5 (odd),
                     * and every piece loaded goes to the other of 6 and 7 than the one before
                     * (np = 3: even hi 6, mid 7, lo 6; odd hi 7, mid 6, lo 7). */
/* one step: A tiles TA0, TA1; the pieces into TB, TC, TB (tile numbers are immediates) */
#define AMX_SMALL_STEP(TA0, TA1, TB, TC)                                                                               \
    do {                                                                                                               \
        _tile_loadd(TA0, a[0] + ao, stride);                                                                           \
        _tile_loadd(TA1, a[1] + ao, stride);                                                                           \
        _tile_loadd(TB, B0 + bo, 64);                                                                                  \
        _tile_dpbf16ps(0, TA0, TB);                                                                                    \
        _tile_dpbf16ps(1, TA1, TB);                                                                                    \
        if (B1) {                                                                                                      \
            _tile_loadd(TC, B1 + bo, 64);                                                                              \
            _tile_dpbf16ps(0, TA0, TC);                                                                                \
            _tile_dpbf16ps(1, TA1, TC);                                                                                \
            _tile_loadd(TB, B2 + bo, 64);                                                                              \
            _tile_dpbf16ps(0, TA0, TB);                                                                                \
            _tile_dpbf16ps(1, TA1, TB);                                                                                \
        }                                                                                                              \
    } while (0)
                    if (!(kb & 1)) AMX_SMALL_STEP(2, 3, 6, 7);
                    else AMX_SMALL_STEP(4, 5, 7, 6);
#undef AMX_SMALL_STEP
                } else {
                    _tile_loadd(4, a[0] + ao, stride);
                    _tile_loadd(5, a[1] + ao, stride);
                    for (int q = 0; q < np; q++) {
                        const uint32_t *bq = j->piece[q] + bo;
                        _tile_loadd(6, bq, 64);
                        _tile_loadd(7, bq + tb_words, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(1, 5, 6);
                        _tile_dpbf16ps(2, 4, 7);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                }
            }
            /* C0, C1: rows 0-15, 16-31 of the first token block; C2, C3 (two token blocks): the second's */
            AMX_STORE_C(amx_store_tile, two);
        }
    }
    _tile_release();
}

/* The few-token kernel on packed weights (seer_k_amx_pack): W's tiles are B tiles, so x's pieces
 * are the A tiles (amx_pack_xa_chunk's layout), a C tile is the call's tokens (its rows: n, or 16
 * and n - 16) x 16 of W's rows, y's own layout, and each task reads its blocks as one stream,
 * each line AMX_PK_PF bytes ahead prefetched. The same chain per output as every AMX kernel
 * (zero; per 32-input step, the pieces in order; + bias). Measured on the 2-core AMX Xeon VM in a
 * /tmp replica (2026-12-02; 256 MiB of tiles per thread against one token, three pieces): 15.5-17.6
 * GB/s on one thread where a plain read of the same bytes gave 16.0-18.1, against 13.6-14.6 for
 * the row-strided tiles of amx_small_chunk; two threads 31.0 against 32.1-33.9 (27.8). */
#ifndef AMX_PK_PF
#define AMX_PK_PF 4096
#endif
#ifndef AMX_PK_HINT
#define AMX_PK_HINT _MM_HINT_T0
#endif
__attribute__((target("amx-tile,amx-bf16,avx512f"))) static void amx_small_packed_chunk(void *ctx, size_t begin, size_t end,
                                                                                         int thread) {
    (void)begin, (void)end, (void)thread;
    amx_small_run *run = ctx;
    amx_job *j = &run->jobs[0];
    int64_t in = j->w->cols, nkb = in / 32; /* every matrix's */
    int n = j->n, r0 = n < 16 ? n : 16, r1 = n - r0, np = j->npieces;
    amx_cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    /* C 0, 1: the first token block x rows 0-15, 16-31; B 6, 7: the step's two halves. One token
     * block: the pieces in A 2, 3, 4 (hi, mid, lo). Two: C 2, 3 the second block's, A 4 and 5
     * each block's piece. */
    cfg.rows[0] = cfg.rows[1] = (uint8_t)r0;
    cfg.rows[6] = cfg.rows[7] = 16;
    if (r1) cfg.rows[2] = cfg.rows[3] = cfg.rows[5] = (uint8_t)r1, cfg.rows[4] = (uint8_t)r0;
    else cfg.rows[2] = cfg.rows[3] = cfg.rows[4] = (uint8_t)r0;
    for (int i = 0; i < 8; i++) cfg.colsb[i] = cfg.rows[i] ? 64 : 0; /* a tile not used: 0 x 0 */
    _tile_loadconfig(&cfg);
    _Alignas(64) float c[16 * 16];
    const size_t tb_words = (size_t)nkb * 256; /* a token block of a piece, in 32-bit words */
    const uint32_t *P0 = j->piece[0], *P1 = np > 1 ? j->piece[1] : NULL, *P2 = np > 2 ? j->piece[2] : NULL;
    for (int64_t b0, b1; amx_take_task(run, &b0, &b1);) {
        for (int64_t gb = b0; gb < b1; gb++) {
            int m = amx_block_matrix(run, gb);
            j = &run->jobs[m];
            const uint16_t *W = j->w->data;
            int64_t out = j->w->rows, blk = gb - run->first[m], base = blk * 32;
            int64_t last = (b1 < run->first[m + 1] ? b1 : run->first[m + 1]) - run->first[m];
            const uint16_t *wb = W + (size_t)blk * (size_t)nkb * 1024;
            const char *pf_end = (const char *)(W + (size_t)last * (size_t)nkb * 1024); /* this task's blocks of W */
            _tile_zero(0);
            _tile_zero(1);
            if (r1) {
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int64_t kb = 0; kb < nkb; kb++) {
                const uint16_t *t = wb + (size_t)kb * 1024;
                const char *pf = (const char *)t + AMX_PK_PF;
                if (pf < pf_end)
                    for (int l = 0; l < 2048; l += 64) _mm_prefetch(pf + l, AMX_PK_HINT);
                _tile_loadd(6, t, 64);
                _tile_loadd(7, t + 512, 64);
                size_t ao = (size_t)kb * 256;
                if (!r1) {
                    _tile_loadd(2, P0 + ao, 64);
                    _tile_dpbf16ps(0, 2, 6);
                    _tile_dpbf16ps(1, 2, 7);
                    if (P1) {
                        _tile_loadd(3, P1 + ao, 64);
                        _tile_dpbf16ps(0, 3, 6);
                        _tile_dpbf16ps(1, 3, 7);
                        _tile_loadd(4, P2 + ao, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(1, 4, 7);
                    }
                } else {
                    for (int q = 0; q < np; q++) {
                        const uint32_t *a = j->piece[q] + ao;
                        _tile_loadd(4, a, 64);
                        _tile_loadd(5, a + tb_words, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(1, 4, 7);
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                }
            }
            /* C 0, 1 (and 2, 3): straight into y without a bias (the rows are whole: packed
             * weights have rows in multiples of 32), else through c */
            if (!(j->bias && j->bias->data)) {
                float *y = j->y + base;
                size_t ld = (size_t)out * sizeof(float);
                _tile_stored(0, y, ld);
                _tile_stored(1, y + 16, ld);
                if (r1) {
                    _tile_stored(2, y + (size_t)16 * (size_t)out, ld);
                    _tile_stored(3, y + (size_t)16 * (size_t)out + 16, ld);
                }
            } else {
                AMX_STORE_C(amx_put_tile, r1);
            }
        }
    }
    _tile_release();
}
#undef AMX_STORE_C
#endif

#ifdef SEER_X86
/* More than AMX_SMALL_MAX tokens (a prefill): the activations packed once for every matrix (q, k
 * and v; gate and up), then each matrix's items of AMX_ROWS rows over the pool; from AMX_XA_MIN
 * tokens with x as the A tiles (amx_gemm_xa_chunk), below that with W's rows as the A tiles
 * (amx_gemm_chunk: its items' rows are copied, not transposed, which wins while few token pairs
 * share each item). The same bits either way. */
static int amx_prefill(seer_pool_t *p, int count, float *const *ys, const float *x, int n, const seer_weight_t *const *ws,
                       const seer_weight_t *const *biases) {
    /* packed weights need no tiles made, so x is the A tiles at every count */
    int ntb = ((n + 31) / 32) * 2, np = seer_k_fast_bf16 ? 1 : 3, xa = n >= AMX_XA_MIN || ws[0]->amx_packed;
    size_t words = (size_t)ntb * 16 * (size_t)(ws[0]->cols / 2);
    uint32_t *buf = aligned_alloc(64, (size_t)np * words * sizeof(uint32_t));
    if (!buf) return 0;
    amx_job j = {.x = x, .npieces = np, .w = ws[0], .n = n, .ntb = ntb};
    for (int q = 0; q < np; q++) j.piece[q] = buf + (size_t)q * words;
    seer_pool_for(p, (size_t)ntb, 1, xa ? amx_pack_xa_chunk : amx_pack_chunk, &j);
    int failed = 0;
    for (int i = 0; i < count && !failed; i++) {
        j.y = ys[i], j.w = ws[i], j.bias = biases[i];
        j.item_rows = AMX_ROWS;
        if (xa && ws[i]->cols * 2 * AMX_ROWS <= AMX_XA_ITEM_BYTES && ws[i]->rows >= (int64_t)AMX_ROWS * 4 * seer_pool_threads(p))
            j.item_rows = 2 * AMX_ROWS;
        seer_pool_for(p, (size_t)((ws[i]->rows + j.item_rows - 1) / j.item_rows), 1, xa ? amx_gemm_xa_chunk : amx_gemm_chunk, &j);
        failed = j.failed;
    }
    free(buf);
    return !failed;
}
#endif

#ifdef SEER_X86
/* Up to AMX_SMALL_MAX tokens: the pieces once, on the calling thread, into a buffer kept per
 * thread (every decode step), then every matrix's 32-row blocks as one pool job. */
static int amx_small(seer_pool_t *p, int count, float *const *ys, const float *x, int n, const seer_weight_t *const *ws,
                     const seer_weight_t *const *biases) {
    int np = seer_k_fast_bf16 ? 1 : 3, ntb = (n + 15) / 16, packed = ws[0]->amx_packed;
    size_t words = (size_t)ntb * 16 * (size_t)(ws[0]->cols / 2), need = (size_t)np * words * sizeof(uint32_t);
    uint32_t *kept = (uint32_t *)seer_k_thread_buffer(SEER_BUF_AMX_X, need / 4);
    if (!kept) return 0;
    amx_job jobs[AMX_MULTI];
    amx_small_run run = {.jobs = jobs, .count = count};
    size_t work = 0;
    for (int i = 0; i < count; i++) {
        jobs[i] = (amx_job){.y = ys[i], .x = x, .npieces = np, .w = ws[i], .bias = biases[i], .n = n, .ntb = ntb};
        for (int q = 0; q < np; q++) jobs[i].piece[q] = kept + (size_t)q * words;
        run.first[i + 1] = run.first[i] + (ws[i]->rows + 31) / 32;
        work += (size_t)ws[i]->rows * (size_t)ws[i]->cols * (size_t)n;
    }
    if (packed) { /* A tiles of n (or 16 and n - 16) rows: the rows past n are never read */
        jobs[0].no_pad = 1;
        amx_pack_xa_chunk(&jobs[0], 0, (size_t)ntb, 0);
    }
    else amx_pack_chunk(&jobs[0], 0, (size_t)ntb, 0);
    run.blocks = run.first[count];
    int threads = seer_pool_threads(p);
    int par = threads > 1 && work >= SEER_PAR_WORK && run.blocks >= 2;
    int64_t tasks = par ? (int64_t)threads * AMX_SMALL_TASKS : 1;
    run.task = (run.blocks + tasks - 1) / tasks;
    atomic_init(&run.next, 0);
    seer_pool_for(p, par ? (size_t)threads : 1, 1, packed ? amx_small_packed_chunk : amx_small_chunk, &run);
    int failed = 0;
    for (int i = 0; i < count; i++) failed |= jobs[i].failed;
    return !failed;
}
#endif

int seer_k_linear_amx_multi(seer_pool_t *p, int count, float *const *ys, const float *x, int n,
                            const seer_weight_t *const *ws, const seer_weight_t *const *biases) {
#ifdef SEER_X86
    if (count < 1 || count > AMX_MULTI || n < 1 || !seer_k_have_amx()) return 0;
    for (int i = 0; i < count; i++)
        if (ws[i]->dtype != SEER_BF16 || ws[i]->cols % 32 != 0 || ws[i]->cols != ws[0]->cols ||
            ws[i]->amx_packed != ws[0]->amx_packed) /* one layout a call (mixed: one call each) */
            return 0;
    if (n <= AMX_SMALL_MAX) return amx_small(p, count, ys, x, n, ws, biases);
    if (amx_prefill(p, count, ys, x, n, ws, biases)) return 1;
    if (!ws[0]->amx_packed) return 0;
    /* A packed weight has no other fast path: out of memory for a prefill's pieces, the same
     * bits AMX_SMALL_MAX tokens at a time. */
    for (int t0 = 0; t0 < n; t0 += AMX_SMALL_MAX) {
        int c = n - t0 < AMX_SMALL_MAX ? n - t0 : AMX_SMALL_MAX;
        float *yc[AMX_MULTI];
        for (int i = 0; i < count; i++) yc[i] = ys[i] + (size_t)t0 * (size_t)ws[i]->rows;
        if (!amx_small(p, count, yc, x + (size_t)t0 * (size_t)ws[0]->cols, c, ws, biases)) return 0;
    }
    return 1;
#else
    (void)p, (void)count, (void)ys, (void)x, (void)n, (void)ws, (void)biases;
    return 0;
#endif
}

int seer_k_linear_amx(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w,
                      const seer_weight_t *bias) {
#ifdef SEER_X86
    return seer_k_linear_amx_multi(p, 1, &y, x, n, &w, &bias);
#else
    (void)p, (void)y, (void)x, (void)n, (void)w, (void)bias;
    return 0;
#endif
}

/* ---- bf16 weights in the AMX tile layout --------------------------------------------------------
 * A weight read as rows costs the few-token kernel 16 strided rows per tile load (13.6-14.6 GB/s
 * a thread in a replica where the plain read gives 16-18) and a prefill a transpose of every
 * item's rows; in the tile layout (seer_k_amx_pack, model.c packs the in-memory weights of the
 * layers and the LM head at load) a tile is one contiguous KiB. A block of 32 rows occupies the
 * bytes its rows did, so a weight bound as rows [a, b) of a packed one stays a packed weight
 * when a and b are multiples of 32. */
int seer_k_amx_packable(const seer_weight_t *w) {
    return w && w->data && !w->amx_packed && w->dtype == SEER_BF16 && w->rows > 0 && w->rows % 32 == 0 &&
           w->cols > 0 && w->cols % 32 == 0 && seer_k_have_amx();
}

#ifdef SEER_X86
typedef struct {
    uint16_t *data;
    int64_t in;
    uint16_t **tmp; /* [threads]: one 32-row block each */
} amx_pack_job;

__attribute__((target("avx512f"))) static void amx_pack_blocks(void *ctx, size_t begin, size_t end, int thread) {
    amx_pack_job *j = ctx;
    int64_t in = j->in, nkb = in / 32;
    uint16_t *tmp = j->tmp[thread];
    for (size_t b = begin; b < end; b++) {
        uint16_t *blk = j->data + b * 32 * (size_t)in;
        memcpy(tmp, blk, (size_t)32 * (size_t)in * sizeof(uint16_t));
        for (int64_t kb = 0; kb < nkb; kb++)
            for (int h = 0; h < 2; h++) amx_w_tile(blk + ((size_t)kb * 2 + (size_t)h) * 512, tmp, in, 32, 16 * h, kb);
    }
}
#endif

int seer_k_amx_pack(seer_pool_t *p, seer_weight_t *w) {
#ifdef SEER_X86
    if (!seer_k_amx_packable(w)) return 0;
    int threads = seer_pool_threads(p); /* a chunk's thread index is below it */
    uint16_t **tmp = calloc((size_t)threads, sizeof *tmp);
    if (!tmp) return 0;
    size_t bytes = (size_t)32 * (size_t)w->cols * sizeof(uint16_t);
    int got = 0;
    while (got < threads && (tmp[got] = aligned_alloc(64, bytes))) got++;
    int ok = got == threads;
    if (ok) {
        amx_pack_job j = {.data = (uint16_t *)w->data, .in = w->cols, .tmp = tmp};
        size_t blocks = (size_t)(w->rows / 32);
        seer_pool_for(p, blocks, (SEER_PAR_WORK / (32 * (size_t)w->cols)) + 1, amx_pack_blocks, &j);
        w->amx_packed = 1;
    }
    for (int i = 0; i < got; i++) free(tmp[i]);
    free(tmp);
    return ok;
#else
    (void)p, (void)w;
    return 0;
#endif
}

void seer_k_linear_amx_packed_slow(float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias) {
    int64_t in = w->cols, out = w->rows;
    int np = seer_k_fast_bf16 ? 1 : 3;
    const uint16_t *W = w->data;
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * (size_t)in;
        for (int64_t o = 0; o < out; o++) {
            float acc = 0.0f;
            for (int64_t k0 = 0; k0 < in; k0 += 32) {
                float rest[32];
                for (int i = 0; i < 32; i++) rest[i] = xt[k0 + i];
                for (int q = 0; q < np; q++) /* hi, mid, lo: each a bf16 of what is left (as amx_pack_chunk) */
                    for (int i = 0; i < 32; i++) {
                        float piece = seer_bf16_to_f32(seer_f32_to_bf16(rest[i]));
                        rest[i] -= piece;
                        acc += piece * seer_bf16_to_f32(W[seer_w_index(w, o, k0 + i)]);
                    }
            }
            y[(size_t)t * (size_t)out + (size_t)o] = acc + (bias && bias->data ? seer_w_load(bias, (size_t)o) : 0.0f);
        }
    }
}

/* ---- linear layers with AVX512_BF16 (precision = "fast", bf16 weights) ------------------------
 * For CPUs with VDPBF16PS (AMD Zen 4; Intel from Cooper Lake): the activations are rounded to bf16
 * once per call (as torch's bf16 matmul, and as precision = "fast" does on AMX), then every output
 * is a dot product of a weight row and a token's activations, 32 inputs per instruction (products
 * of two bf16 are exact in f32; the sums are f32), one accumulator per (row, token) over the input
 * in order, reduced across the lanes at the end. That chain is the same for every kernel below, so
 * a token gets the same bits alone, in a batched decode step or in a prefill of any length
 * (tests/unit/test_kernels.c, tests/lua/test_model_batch.lua). The kernel depends on the count:
 * - 1 to DP_STREAM_MAX tokens (decode): rows one after another, one sequential stream per thread
 *   with a software prefetch per cache line DP_PF bytes ahead (as the default's batch-1 kernel),
 *   each 32-block of a row loaded once for every token;
 * - more (a batched decode step, a prefill): tiles of 4 rows x 4 tokens (16 accumulators, 8 loads
 *   per 16 products), the tokens in blocks of DP_TB whose activations stay in L2 while a task's
 *   rows (DP_ROWS, also in L2) meet every token of the block.
 * On AMX CPUs a prefill of 16 tokens or more runs on the tiles instead (seer_k_linear_amx, tried
 * first). The default precision keeps f32 activations (three bf16 pieces would cost three products
 * for one, slower than the f32 kernels), so this runs only in the fast mode.
 * Measured on the 2-vCPU Zen 4 VM (one VDPBF16PS per cycle per core, latency 6): one thread, 16
 * tokens, weights from memory, 1024-2816 wide: 93-128 GFLOP/s with the [token][input] layout and
 * no prefetch of the next block; with the interleaved layout and the prefetch, and the 16 sums
 * reduced together, 143-163 (200-215 with the weights in cache, of 232). In the 0.5B model,
 * batched decode at 2 threads: batch 16 233-300 tok/s (112-149 in the default precision), batch 4
 * 97-115 (75-87). Two rows at a time in the streamed kernel (two streams) halved its speed; row i
 * of each half of a task beside each other (what the default kernel does on AMD, kernels.c) was
 * no faster either: fast bf16 decode at one thread 32.8-35.5 against 34.9-36.9 tok/s (five
 * alternating rounds, 2026-12-01), this kernel already reading at 90-98% of the read probe. */
#ifdef SEER_X86
#define DP_TB 64
#define DP_ROWS 64
#ifndef DP_STREAM_MAX
#define DP_STREAM_MAX 4
#endif
#ifndef DP_PF
#define DP_PF 3072
#endif
/* The streamed kernel's prefetch hint from two tokens on (one token keeps T0): T1, into L2 only
 * on Zen 4 (and Intel), as the default kernels' 2-4-token rows (kernels.c, SEER_ROWT_HINT). Fast
 * bf16 on the 0.5B model, 2 threads, four alternating rounds (tests/bench/batch_seer.lua, T0
 * against T1): batch 4 122.9 -> 127.9 tok/s (ahead 4 of 4), batch 2 71.7 -> 73.9 (3 of 4). The
 * tiles' near prefetch (DP_NEAR) as T1 was level at batch 8 and 16 (four rounds): kept T0. */
#ifndef DP_STREAM_HINT
#define DP_STREAM_HINT _MM_HINT_T1
#endif
#ifndef DP_TREE
#define DP_TREE 1
#endif
#ifndef DP_TILE_AHEAD
#define DP_TILE_AHEAD 1
#endif
/* Each tile also prefetches its own rows DP_NEAR elements (512 bytes) ahead into L1: the
 * first tile of a row block reads rows the block-ahead prefetch (DP_TILE_AHEAD) only brought
 * to L2, four streams the hardware prefetchers start late on. One thread, fast bf16, 16 tokens,
 * weights from memory (FAST=1 COLD=1 REPS=15 build/bench/linear_kernel 16, three alternating
 * rounds): 2816x1024 120-150 -> 137-161 GFLOP/s, 1024x2816 133-158 -> 141-165, 1024x1024
 * 115-142 -> 136-152; from L3 (no COLD) the same or better; 64 tokens cold 180-192 -> 188-201.
 * 128 and 384-1024 elements were no better. 0 turns it off. */
/* Activations packed on the calling thread up to this many elements, else by the pool, a token
 * per item. */
#ifndef DP_PACK_SERIAL
#define DP_PACK_SERIAL 8192
#endif
#ifndef DP_NEAR
#define DP_NEAR 256
#endif
#ifndef DP_TILE_HINT
#define DP_TILE_HINT _MM_HINT_T1
#endif
/* One matrix of a call: y = x W^T (+ bias) against the shared bf16 activations xb. */
typedef struct {
    float *y;
    const float *x;
    uint16_t *xb; /* bf16: [n][cols] for the streamed kernel, else [cols / 32][n][32] (a 32-block of
                   * every token together, one stream for the tiles) */
    const seer_weight_t *w, *bias;
    int n;
} dp_job;

/* A call over up to DP_MULTI matrices of the same width (q, k and v; gate and up): the
 * activations packed once, one loop whose tasks are row ranges of any of the matrices. Matrix
 * i's rows are tasks first[i] .. first[i + 1] - 1 of `task` rows each (its last may be short). */
#define DP_MULTI 4
typedef struct {
    dp_job m[DP_MULTI];
    size_t first[DP_MULTI + 1];
    int count;
    size_t task;        /* rows per task, taken as the threads go */
    atomic_size_t next; /* the next task */
} dp_run;

/* The matrix and rows [*r0, *r1) of task b; 0 when b is past the last. */
static int dp_take(const dp_run *run, size_t b, int *i, int *r0, int *r1) {
    if (b >= run->first[run->count]) return 0;
    int k = 0;
    while (b >= run->first[k + 1]) k++;
    size_t rows = (size_t)run->m[k].w->rows, a = (b - run->first[k]) * run->task;
    *i = k;
    *r0 = (int)a;
    *r1 = (int)(a + run->task < rows ? a + run->task : rows);
    return 1;
}

static int have_avx512bf16(void) {
    static int v = -1;
    if (v < 0) v = seer_k_have_avx512() && __builtin_cpu_supports("avx512bf16");
    return v;
}

/* Whether precision = "fast" runs on VDPBF16PS here: AVX512_BF16 on AMD (Zen 4 issues one a cycle,
 * 32 products where an FMA makes 16). Not on Intel: on a 2-vCPU Emerald Rapids VM with AMX
 * hidden (model 207, 2026-12-02; /tmp loop of 12 independent chains) VDPBF16PS zmm retired
 * 1.2-1.3 G/s against 4.6-5.3 G/s for FMA zmm, so 16 products a cycle against 32: `make bench`
 * there read fast bf16 prefill at 103.8 tok/s against 243.3 for the default precision's f32
 * kernels, and batch-16 decode 146.0 against 168.8. Intel CPUs with AMX run fast on the tiles;
 * without it, fast computes what the default does (seer_k_fast_kind says why).
 * SEER_FAST_DPBF16=1 runs VDPBF16PS on any CPU that has it (the tests, and measuring), =0 on none. */
static int dp_units(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("SEER_FAST_DPBF16");
        if (e && *e && strcmp(e, "0") != 0 && strcmp(e, "1") != 0)
            fprintf(stderr, "seer: SEER_FAST_DPBF16=%s is neither 0 nor 1; the default for this CPU is used\n", e);
        int want = e && strcmp(e, "1") == 0 ? 1 : e && strcmp(e, "0") == 0 ? 0 : __builtin_cpu_is("amd");
        v = want && have_avx512bf16();
    }
    return v;
}

__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"))) static void dp_pack_chunk(void *ctx, size_t begin,
                                                                                         size_t end, int thread) {
    (void)thread;
    dp_job *j = ctx;
    size_t cols = (size_t)j->w->cols;
    for (size_t t = begin; t < end; t++)
        for (size_t k = 0; k < cols; k += 16)
            _mm256_storeu_si256((__m256i *)(j->xb + (j->n <= DP_STREAM_MAX ? t * cols + k : (k & ~(size_t)31) * (size_t)j->n + t * 32 + (k & 31))),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(j->x + t * cols + k)));
}

/* y[t][r] = lane sum of the (row, token) accumulator (+ bias). */
static inline void dp_put(const dp_job *j, int r, int t, float v) {
    if (j->bias && j->bias->data) v += seer_w_load(j->bias, (size_t)r);
    j->y[(size_t)t * (size_t)j->w->rows + (size_t)r] = v;
}

/* The 16 lane sums of a 4 x 4 tile at once, each the same tree of additions as
 * _mm512_reduce_add_ps (lanes i + 8, then i + 4 of that, then i + 2, then i + 1; a + b and b + a
 * are the same bits), so the same bits as the other kernels' reductions, in 15 additions and 30
 * shuffles instead of 16 x 4 of each: halves of two accumulators side by side, then quarters
 * of four, then within each 128-bit lane, ending with lane q holding token q's four rows. */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline void dp_put16(const dp_job *j, int r, int t,
                                                                                              __m512 acc[4][4]) {
    __m512 w[4];
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++) {
        __m512 z0 = _mm512_add_ps(_mm512_shuffle_f32x4(acc[a][0], acc[a][1], 0x44), _mm512_shuffle_f32x4(acc[a][0], acc[a][1], 0xEE));
        __m512 z1 = _mm512_add_ps(_mm512_shuffle_f32x4(acc[a][2], acc[a][3], 0x44), _mm512_shuffle_f32x4(acc[a][2], acc[a][3], 0xEE));
        w[a] = _mm512_add_ps(_mm512_shuffle_f32x4(z0, z1, 0x88), _mm512_shuffle_f32x4(z0, z1, 0xDD));
    }
    __m512 v0 = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x44), _mm512_shuffle_ps(w[0], w[1], 0xEE));
    __m512 v1 = _mm512_add_ps(_mm512_shuffle_ps(w[2], w[3], 0x44), _mm512_shuffle_ps(w[2], w[3], 0xEE));
    __m512 sum = _mm512_add_ps(_mm512_shuffle_ps(v0, v1, 0x88), _mm512_shuffle_ps(v0, v1, 0xDD));
    if (j->bias && j->bias->data) {
        float b4[4];
        for (int a = 0; a < 4; a++) b4[a] = seer_w_load(j->bias, (size_t)(r + a));
        sum = _mm512_add_ps(sum, _mm512_broadcast_f32x4(_mm_loadu_ps(b4)));
    }
    float *y = j->y + (size_t)t * (size_t)j->w->rows + (size_t)r;
    _mm_storeu_ps(y, _mm512_castps512_ps128(sum));
    _mm_storeu_ps(y + j->w->rows, _mm512_extractf32x4_ps(sum, 1));
    _mm_storeu_ps(y + 2 * (size_t)j->w->rows, _mm512_extractf32x4_ps(sum, 2));
    _mm_storeu_ps(y + 3 * (size_t)j->w->rows, _mm512_extractf32x4_ps(sum, 3));
}

/* nr rows from r against nt tokens from t, all nr x nt accumulators in registers; called with
 * constant nr, nt (the wrappers below), so the loops unroll and nothing runs on run-time bounds. */
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"), always_inline)) static inline void
dp_tile(const dp_job *j, int r, int t, const char *pf, int pfn, const int nr, const int nt) {
    const size_t cols = (size_t)j->w->cols;
    const uint16_t *w0 = (const uint16_t *)j->w->data + (size_t)r * cols, *x0 = j->xb + (size_t)t * 32;
    const size_t n = (size_t)j->n;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int a = 0; a < nr; a++)
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) acc[a][b] = _mm512_setzero_ps();
    for (size_t k = 0; k < cols; k += 32) {
        __m512bh wv[4], xv[4];
        for (int a = 0; a < pfn; a++) _mm_prefetch(pf + 2 * ((size_t)a * cols + k), DP_TILE_HINT);
#if DP_NEAR
#pragma GCC unroll 4
        for (int a = 0; a < nr; a++) _mm_prefetch((const char *)(w0 + (size_t)a * cols + k + DP_NEAR), _MM_HINT_T0);
#endif
#pragma GCC unroll 4
        for (int a = 0; a < nr; a++) wv[a] = (__m512bh)_mm512_loadu_si512(w0 + (size_t)a * cols + k);
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) xv[b] = (__m512bh)_mm512_loadu_si512(x0 + k * n + (size_t)b * 32);
#pragma GCC unroll 4
        for (int a = 0; a < nr; a++)
#pragma GCC unroll 4
            for (int b = 0; b < nt; b++) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], wv[a], xv[b]);
    }
    if (nr == 4 && nt == 4 && DP_TREE) {
        dp_put16(j, r, t, acc);
        return;
    }
#pragma GCC unroll 4
    for (int a = 0; a < nr; a++)
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) dp_put(j, r + a, t + b, _mm512_reduce_add_ps(acc[a][b]));
}
#define DP_TILE(NR, NT)                                                                                                \
    __attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"), noinline)) static void dp_tile##NR##x##NT(         \
        const dp_job *j, int r, int t, const char *pf, int pfn) {                                                      \
        dp_tile(j, r, t, pf, pfn, NR, NT);                                                                             \
    }
DP_TILE(4, 4)
DP_TILE(4, 3)
DP_TILE(4, 2)
DP_TILE(4, 1)
DP_TILE(1, 4)
DP_TILE(1, 3)
DP_TILE(1, 2)
DP_TILE(1, 1)
#undef DP_TILE

/* Rows of one task (whole tiles of 4 rows and the last rows one at a time) against every token. */
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"))) static void dp_gemm_rows(const dp_job *j, int r0, int r1) {
    const int n = j->n;
    for (int t0 = 0; t0 < n; t0 += DP_TB) {
        int t1 = t0 + DP_TB < n ? t0 + DP_TB : n;
        for (int r = r0; r < r1; r += 4) {
            int t = t0;
            if (r1 - r >= 4) {
                /* the tiles of a row block fetch the rows DP_TILE_AHEAD blocks on (the block's own
                 * rows stay in L1 from the first tile to the last), each a share of them, one
                 * cache line per row per 32-step, so the misses are spread over the block */
                int ahead = r + 4 * DP_TILE_AHEAD, pf_rows = ahead + 4 <= r1 ? 4 : 0, ntiles = (t1 - t0 + 3) / 4;
                int per = (pf_rows + ntiles - 1) / ntiles, q = 0;
                const char *pf0 = (const char *)((const uint16_t *)j->w->data + (size_t)ahead * (size_t)j->w->cols);
#define DP_PF_ARGS pf0 + (size_t)2 * (size_t)(q * per) * (size_t)j->w->cols, q * per < pf_rows ? (pf_rows - q * per < per ? pf_rows - q * per : per) : 0
                for (; t + 4 <= t1; t += 4, q++) dp_tile4x4(j, r, t, DP_PF_ARGS);
                switch (t1 - t) {
                case 3: dp_tile4x3(j, r, t, DP_PF_ARGS); break;
                case 2: dp_tile4x2(j, r, t, DP_PF_ARGS); break;
                case 1: dp_tile4x1(j, r, t, DP_PF_ARGS); break;
                default: break;
                }
#undef DP_PF_ARGS
            } else
                for (int rr = r; rr < r1; rr++) {
                    for (t = t0; t + 4 <= t1; t += 4) dp_tile1x4(j, rr, t, NULL, 0);
                    switch (t1 - t) {
                    case 3: dp_tile1x3(j, rr, t, NULL, 0); break;
                    case 2: dp_tile1x2(j, rr, t, NULL, 0); break;
                    case 1: dp_tile1x1(j, rr, t, NULL, 0); break;
                    default: break;
                    }
                }
        }
    }
}

/* Tasks of DP_ROWS rows taken from a shared counter as the threads go (a thread on a slower vCPU
 * takes fewer; a fixed half each left the other waiting at the end of every matrix). */
static void dp_gemm_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread, (void)begin, (void)end;
    dp_run *run = ctx;
    int i, r0, r1;
    while (dp_take(run, atomic_fetch_add(&run->next, 1), &i, &r0, &r1)) dp_gemm_rows(&run->m[i], r0, r1);
}

/* One row against NT (1 to 4) tokens, streamed with a prefetch per cache line: the same chain per
 * (row, token) as the tiles. Tried and not kept (2026-12-01, Zen 4 VM, linear_kernel COLD=1
 * FAST=1, one thread): two rows at a time, row i of each half (as the default kernel's 2-4-token
 * pairs, kernels.c): 4 tokens on 1024x2816 484 -> 399 us, but 2816x1024 199 -> 289 and 1024x1024
 * 83 -> 115 us. */
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"), always_inline)) static inline void
dp_stream_rows(const dp_job *j, int r0, int r1, const int nt, const int pf) {
    const size_t cols = (size_t)j->w->cols;
    const uint16_t *xb = j->xb;
    for (int r = r0; r < r1; r++) {
        const uint16_t *wr = (const uint16_t *)j->w->data + (size_t)r * cols;
        __m512 acc[4];
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) acc[b] = _mm512_setzero_ps();
        for (size_t k = 0; k < cols; k += 32) {
            if (pf && nt == 1) _mm_prefetch((const char *)(wr + k) + DP_PF, _MM_HINT_T0);
            else if (pf) _mm_prefetch((const char *)(wr + k) + DP_PF, DP_STREAM_HINT);
            __m512bh wv = (__m512bh)_mm512_loadu_si512(wr + k);
#pragma GCC unroll 4
            for (int b = 0; b < nt; b++)
                acc[b] = _mm512_dpbf16_ps(acc[b], wv, (__m512bh)_mm512_loadu_si512(xb + (size_t)b * cols + k));
        }
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) dp_put(j, r, b, _mm512_reduce_add_ps(acc[b]));
    }
}
#ifndef DP_PAIRS
#define DP_PAIRS 1
#endif
/* One token on Intel with AVX-512: rows two at a time, row j of each half of [r0, r1), each its
 * own stream with its own prefetch and its own chain (the same bits as dp_stream_rows; tested by
 * dpbf16_linear_fast_precision_row_prefetch_on), as the default precision's batch-1 rows
 * (kernels.c, SEER_ROW1_SPLIT). Measured on a 2-vCPU Emerald Rapids VM with AMX hidden
 * (2026-12-02; the 0.5B bf16 model, precision = "fast", greedy steps after a 5-token prompt,
 * binaries alternating, `build/bench/peak T read` after each, three rounds): one thread 13.3-15.3
 * tok/s (78-82% of the probe) -> 16.1-16.7 (88-90%); two threads 24.3-26.2 (73-82%) -> 24.5-29.0
 * (71-90%). */
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"), noinline)) static void dp_stream_pairs1(const dp_job *j, int r0,
                                                                                                     int r1) {
    const size_t cols = (size_t)j->w->cols;
    const uint16_t *xb = j->xb;
    int h = (r1 - r0) / 2, mid = r0 + h;
    for (int q = 0; q < h; q++) {
        const uint16_t *wa = (const uint16_t *)j->w->data + (size_t)(r0 + q) * cols;
        const uint16_t *wb = (const uint16_t *)j->w->data + (size_t)(mid + q) * cols;
        __m512 a = _mm512_setzero_ps(), b = a;
        for (size_t k = 0; k < cols; k += 32) {
            _mm_prefetch((const char *)(wa + k) + DP_PF, _MM_HINT_T0);
            _mm_prefetch((const char *)(wb + k) + DP_PF, _MM_HINT_T0);
            __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + k);
            a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_loadu_si512(wa + k), xv);
            b = _mm512_dpbf16_ps(b, (__m512bh)_mm512_loadu_si512(wb + k), xv);
        }
        dp_put(j, r0 + q, 0, _mm512_reduce_add_ps(a));
        dp_put(j, mid + q, 0, _mm512_reduce_add_ps(b));
    }
    if (mid + h < r1) dp_stream_rows(j, mid + h, r1, 1, 1); /* an odd count's last row */
}
#define DP_STREAM(NT)                                                                                                  \
    __attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"), noinline)) static void dp_stream##NT(               \
        const dp_job *j, int r0, int r1) {                                                                             \
        if (NT == 1 && DP_PAIRS && r1 - r0 >= 2 && seer_k_row_prefetch() && seer_k_intel_avx512()) dp_stream_pairs1(j, r0, r1); \
        else if (NT > 1 || seer_k_row_prefetch()) dp_stream_rows(j, r0, r1, NT, 1);                                    \
        else dp_stream_rows(j, r0, r1, NT, 0);                                                                         \
    }
DP_STREAM(1)
DP_STREAM(2)
DP_STREAM(3)
DP_STREAM(4)
#undef DP_STREAM

static void dp_stream_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread, (void)begin, (void)end;
    dp_run *run = ctx;
    int i, r0, r1;
    while (dp_take(run, atomic_fetch_add(&run->next, 1), &i, &r0, &r1)) {
        const dp_job *j = &run->m[i];
        switch (j->n) {
        case 1: dp_stream1(j, r0, r1); break;
        case 2: dp_stream2(j, r0, r1); break;
        case 3: dp_stream3(j, r0, r1); break;
        default: dp_stream4(j, r0, r1); break;
        }
    }
}
#endif

const char *seer_k_fast_kind(const char **why) {
    if (why) *why = "this CPU has neither AMX nor AVX512_BF16";
#ifdef SEER_X86
    if (seer_k_have_amx()) return "AMX";
    if (dp_units()) return "AVX512_BF16";
    if (why && have_avx512bf16())
        *why = "this CPU's VDPBF16PS makes half the products a cycle its f32 FMAs do (an Intel CPU without AMX; "
               "SEER_FAST_DPBF16=1 runs it anyway)";
#endif
    return NULL;
}

int seer_k_linear_dpbf16(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w,
                         const seer_weight_t *bias) {
    return seer_k_linear_dpbf16_multi(p, 1, &y, x, n, &w, &bias);
}

int seer_k_linear_dpbf16_multi(seer_pool_t *p, int count, float *const *ys, const float *x, int n,
                               const seer_weight_t *const *ws, const seer_weight_t *const *biases) {
#ifdef SEER_X86
    if (!seer_k_fast_bf16 || count < 1 || count > DP_MULTI || n < 1 || !dp_units()) return 0;
    for (int i = 0; i < count; i++)
        if (ws[i]->dtype != SEER_BF16 || ws[i]->cols % 32 != 0 || ws[i]->cols != ws[0]->cols) return 0;
    const seer_weight_t *w0 = ws[0];
    /* the activations in bf16: a buffer kept per thread for up to DP_KEEP bytes (every decode
     * step), else one per call */
    enum { DP_KEEP = 256 * 1024 };
    size_t elems = (size_t)n * (size_t)w0->cols, bytes = (elems * sizeof(uint16_t) + 63) & ~(size_t)63;
    uint16_t *xb, *kept = NULL;
    if (bytes <= DP_KEEP) {
        if (!(kept = (uint16_t *)seer_k_thread_buffer(SEER_BUF_DP_X, DP_KEEP / 4))) return 0;
        xb = kept;
    } else if (!(xb = aligned_alloc(64, bytes)))
        return 0;
    dp_run run = {.count = count};
    size_t rows = 0, max_rows = 0;
    for (int i = 0; i < count; i++) {
        run.m[i] = (dp_job){.y = ys[i], .x = x, .xb = xb, .w = ws[i], .bias = biases[i], .n = n};
        rows += (size_t)ws[i]->rows;
        if ((size_t)ws[i]->rows > max_rows) max_rows = (size_t)ws[i]->rows;
    }
    atomic_init(&run.next, 0);
    if (elems <= DP_PACK_SERIAL || n < 2) dp_pack_chunk(&run.m[0], 0, (size_t)n, 0);
    else seer_pool_for(p, (size_t)n, 1, dp_pack_chunk, &run.m[0]);
    int threads = seer_pool_threads(p);
    size_t work = rows * (size_t)w0->cols * (size_t)n;
    int par;
    if (n <= DP_STREAM_MAX) {
        /* about SEER_LINEAR_TASKS (16) tasks per thread, as the default's streamed kernels */
        size_t task = (rows + (size_t)threads * 16 - 1) / ((size_t)threads * 16);
        run.task = task < 16 ? 16 : task;
        if (work < SEER_PAR_WORK) run.task = max_rows;
        par = run.task < rows;
    } else {
        run.task = DP_ROWS;
        par = work >= SEER_PAR_WORK && rows > DP_ROWS;
    }
    run.first[0] = 0;
    for (int i = 0; i < count; i++) run.first[i + 1] = run.first[i] + ((size_t)ws[i]->rows + run.task - 1) / run.task;
    seer_pool_for(p, par ? (size_t)threads : 1, 1, n <= DP_STREAM_MAX ? dp_stream_chunk : dp_gemm_chunk, &run);
    if (xb != kept) free(xb);
    return 1;
#else
    (void)p, (void)count, (void)ys, (void)x, (void)n, (void)ws, (void)biases;
    return 0;
#endif
}

int seer_k_bf16_units_take(const seer_weight_t *w) {
#ifdef SEER_X86
    if (w->dtype != SEER_BF16 || w->cols % 32 != 0) return 0;
    return seer_k_have_amx() || (seer_k_fast_bf16 && dp_units()) ? 2 : 0;
#else
    (void)w;
    return 0;
#endif
}
