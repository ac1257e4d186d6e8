/* CPU kernels of the forward pass. The linear layer dominates: W is read once per call and
 * reused across up to 16 tokens at a time; rows of W are split across the thread pool.
 * bf16/f16 weights are widened in registers. AVX2+FMA paths are chosen at run time
 * (__builtin_cpu_supports), with portable loops as the reference and the fallback. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

static float dot_generic(const float *a, const float *b, int n) {
    float s = 0.f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
static void axpy_generic(float *o, float w, const float *v, int n) {
    for (int i = 0; i < n; i++) o[i] += w * v[i];
}
/* the same on a bf16 cache row, widened exactly (the same bits as on the widened row) */
static float dot_generic_bf16(const float *a, const uint16_t *b, int n) {
    float s = 0.f;
    for (int i = 0; i < n; i++) s += a[i] * seer_bf16_to_f32(b[i]);
    return s;
}
static void axpy_generic_bf16(float *o, float w, const uint16_t *v, int n) {
    for (int i = 0; i < n; i++) o[i] += w * seer_bf16_to_f32(v[i]);
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

/* hsum8 of eight vectors at once, out[j] = hsum8(v[j]) bit for bit: the same pairs added in the
 * same order (lane i + lane i+4, then those at 0+2 and 1+3, then the two), eight at a time: sum j
 * in lane j of the result (hsum8x8 stores them to out). */
__attribute__((target("avx2,fma,f16c"))) static inline __m256 hsum8x8_v(const __m256 *v) {
    /* written out rather than as loops over arrays: GCC kept the arrays on the stack, and each
     * 256-bit store read back as 128-bit halves stalled (the per-token attention's eight-key dot
     * at a 1024-token context, in cache: 190 -> 134 us a layer in a /tmp replica) */
#define SEER_HSUM_PAIR(a, b) _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31))
#define SEER_HSUM_HALF(a, b) _mm256_add_ps(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)))
    /* s_j = [lo + hi of v[2j] | lo + hi of v[2j+1]]; t = per half [x0 + x2, x1 + x3] of two */
    __m256 s0 = SEER_HSUM_PAIR(v[0], v[1]), s1 = SEER_HSUM_PAIR(v[2], v[3]), s2 = SEER_HSUM_PAIR(v[4], v[5]),
           s3 = SEER_HSUM_PAIR(v[6], v[7]);
    __m256 t0 = SEER_HSUM_HALF(s0, s1), t1 = SEER_HSUM_HALF(s2, s3);
#undef SEER_HSUM_PAIR
#undef SEER_HSUM_HALF
    __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    /* r holds v0 v2 v4 v6 | v1 v3 v5 v7 */
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
__attribute__((target("avx2,fma,f16c"))) static inline void hsum8x8(const __m256 *v, float *out) {
    _mm256_storeu_ps(out, hsum8x8_v(v));
}

/* The attention's two inner loops on AVX2 (seer_k_dot and seer_k_axpy below dispatch to them,
 * and the per-token attention kernel inlines them). q.k: one 8-lane FMA chain over the head
 * dimension, hsum8, then the scalar tail. The weighted sum of values: each output element one
 * FMA chain over the keys in order, o = fma(w_p, v_p[i], o) from o = 0, whether one key at a
 * time (seer_k_axpy, the hooked path) or with the head's outputs held in registers across keys
 * (attn_mix_avx2): the same bits either way, so capturing a pattern changes no result. */
__attribute__((target("avx2,fma,f16c"))) static inline float dot_avx2(const float *a, const float *b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = hsum8(acc);
    for (; i < n; i++) s = __builtin_fmaf(a[i], b[i], s);
    return s;
}
__attribute__((target("avx2,fma,f16c"))) static void axpy_avx2(float *o, float w, const float *v, int n) {
    __m256 wv = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(o + i)));
    for (; i < n; i++) o[i] = __builtin_fmaf(w, v[i], o[i]);
}
/* 8 bf16 at p widened exactly to f32 (each value's bits moved up 16): the 16 bytes loaded into
 * both 128-bit lanes (a load, no ALU uop) and one byte shuffle that puts each value in the high
 * half of its lane's 32-bit element and zeros the low half, where zero-extending and shifting
 * took two ALU uops. The same bits. Measured against the extend and shift (make
 * bench-kernel-ab DT=bf16 COLD=1 HUGE=1, 21 paired calls, 2-vCPU Emerald Rapids VM, 2026-12-02):
 * one thread 1 token 0.979x the time, 4 tokens 0.984x, 8 tokens 0.971x (0.950x without COLD);
 * two threads 1 token 1.012x (level: it waits on memory), 8 tokens 0.968x. */
#define SEER_BF16X8(p)                                                                                           \
    _mm256_castsi256_ps(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p))), \
                                            _mm256_set_epi32(0x0f0e8080, 0x0d0c8080, 0x0b0a8080, 0x09088080,   \
                                                             0x07068080, 0x05048080, 0x03028080, 0x01008080)))
/* The same two on a bf16 cache row (precision = "fast"): each 8-block widened exactly in a
 * register, then the same FMAs in the same order, so the bits of the f32 loops on the widened row. */
__attribute__((target("avx2,fma,f16c"))) static inline float dot_avx2_bf16(const float *a, const uint16_t *b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), SEER_BF16X8(b + i), acc);
    float s = hsum8(acc);
    for (; i < n; i++) s = __builtin_fmaf(a[i], seer_bf16_to_f32(b[i]), s);
    return s;
}
__attribute__((target("avx2,fma,f16c"))) static void axpy_avx2_bf16(float *o, float w, const uint16_t *v, int n) {
    __m256 wv = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, _mm256_fmadd_ps(wv, SEER_BF16X8(v + i), _mm256_loadu_ps(o + i)));
    for (; i < n; i++) o[i] = __builtin_fmaf(w, seer_bf16_to_f32(v[i]), o[i]);
}
/* o[0 .. hd) += sum over keys p in [first, last] of (sc[p] * inv) v_p, v_p = v + p * vs, each
 * element's chain continued from the o it finds (a float stored and reloaded rounds nothing):
 * 64 (then 32, 8, 1) outputs at a time held in registers while the keys go by. */
#define SEER_MIX_COLS(NV, T, LOADV)                                                                                    \
    for (; i + 8 * (NV) <= hd; i += 8 * (NV)) {                                                              \
        __m256 acc[NV];                                                                                      \
        _Pragma("GCC unroll 8") for (int k = 0; k < (NV); k++) acc[k] = _mm256_loadu_ps(o + i + 8 * k);    \
        for (int p = first; p <= last; p++) {                                                                \
            const T *vp = v + (size_t)p * vs + (size_t)i;                                                      \
            __m256 wv = _mm256_set1_ps(sc[p] * inv);                                                         \
            _Pragma("GCC unroll 8") for (int k = 0; k < (NV); k++)                                          \
                acc[k] = _mm256_fmadd_ps(wv, LOADV(vp + 8 * k), acc[k]);                                     \
        }                                                                                                    \
        _Pragma("GCC unroll 8") for (int k = 0; k < (NV); k++) _mm256_storeu_ps(o + i + 8 * k, acc[k]);    \
    }
__attribute__((target("avx2,fma,f16c"))) static void attn_mix_avx2(float *o, const float *sc, float inv, const float *v,
                                                                   size_t vs, int first, int last, int hd) {
    int i = 0;
    SEER_MIX_COLS(8, float, _mm256_loadu_ps)
    SEER_MIX_COLS(4, float, _mm256_loadu_ps)
    SEER_MIX_COLS(1, float, _mm256_loadu_ps)
    for (; i < hd; i++) {
        float acc = o[i];
        for (int p = first; p <= last; p++) acc = __builtin_fmaf(sc[p] * inv, v[(size_t)p * vs + (size_t)i], acc);
        o[i] = acc;
    }
}
__attribute__((target("avx2,fma,f16c"))) static void attn_mix_avx2_bf16(float *o, const float *sc, float inv, const uint16_t *v,
                                                                   size_t vs, int first, int last, int hd) {
    int i = 0;
    SEER_MIX_COLS(8, uint16_t, SEER_BF16X8)
    SEER_MIX_COLS(4, uint16_t, SEER_BF16X8)
    SEER_MIX_COLS(1, uint16_t, SEER_BF16X8)
    for (; i < hd; i++) {
        float acc = o[i];
        for (int p = first; p <= last; p++) acc = __builtin_fmaf(sc[p] * inv, seer_bf16_to_f32(v[(size_t)p * vs + (size_t)i]), acc);
        o[i] = acc;
    }
}
#undef SEER_MIX_COLS

/* Software prefetch for the decode blocks: each of the four rows is fetched into L1
 * SEER_PF_NEAR elements ahead and into L2 SEER_PF_FAR elements ahead. The rows of a block are
 * four interleaved streams, short ones (a row of a 0.5B model is 2 KB in bf16), on which the
 * hardware prefetchers do not run far enough ahead to keep a core's memory pipeline full.
 * Measured on the 0.5B Llama of make bench, two threads, 32-token greedy decode:
 *   bf16: none 12.8 tok/s, near only 15.9, near + far 19-21 (the one-thread memcpy bound is 19.9)
 *   f32:  none  9.8 tok/s, near only 11.2, near + far 12.2-13.2
 * Far distances of 2k-16k elements were within noise of each other, 1k less. Past the end of a
 * row the prefetches read the rows that follow; a prefetch never faults. */
#ifndef SEER_PF_NEAR
#define SEER_PF_NEAR 256
#endif
#ifndef SEER_PF_FAR
#define SEER_PF_FAR 4096
#endif
#ifndef SEER_PF_FAR_HINT
#define SEER_PF_FAR_HINT _MM_HINT_T1
#endif
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
        _mm_prefetch(pf0 + pf_o + pf_far, SEER_PF_FAR_HINT);                                             \
        _mm_prefetch(pf1 + pf_o + pf_far, SEER_PF_FAR_HINT);                                             \
        _mm_prefetch(pf2 + pf_o + pf_far, SEER_PF_FAR_HINT);                                             \
        _mm_prefetch(pf3 + pf_o + pf_far, SEER_PF_FAR_HINT);                                             \
    } while (0)

/* The chain every AVX2 path gives an output (one row of W against one token), however many
 * tokens run beside it. f32 weights: one 8-lane accumulator a0 over the row front to back.
 * bf16/f16 weights: two, a0 over the 8-blocks at i = 0, 16, 32, ... and a1 over those at
 * i = 8, 24, 40, ... (an odd last 8-block goes to a0). Then hsum8(a0 + a1) (a1 = 0 for f32) and
 * the scalar tail from in & ~7 on. The batch-1 kernel below and the batched kernel after it
 * hold to it, which the tests check bit for bit (tests/unit/test_kernels.c,
 * tests/lua/test_model_batch.lua).
 *
 * Why two chains for bf16: one FMA chain is latency-bound at 8 elements per FMA latency, which
 * for 16-bit weights is below what a core reads. Measured on the 2-vCPU AMD EPYC (Zen 3) bench
 * VM, a GEMV over 256 MiB of 1024-wide rows per thread (medians of 9 interleaved runs, GB/s of
 * weights read): bf16 one chain 6.8 (1 thread) / 12.0 (2 threads), two chains 9.7 / 15.4, four
 * chains 8.5 / 13.9, against 11.0-13.0 / 17.0-18.4 for plain AVX2 loads of the same bytes; f32
 * one chain 10.6 / 17.8, two 11.0 / 17.0, and on the 0.5B model f32 decode was no faster with
 * two (4 interleaved rounds), so f32 keeps one. Two rows at a time (two chains on two
 * interleaved streams) was slower still (10.2-11.4 against 12.8-13.1 tok/s, bf16, 0.5B model):
 * the hardware prefetchers follow one sequential stream per thread best.
 *
 * Batch-1 decode takes rows one after another, one sequential stream per thread, with one
 * software prefetch per cache line SEER_ROW1_PF bytes ahead: 3 KiB. On the Zen 3 VM 1 KiB was
 * chosen (bf16 at 512 bytes was 3-6% slower; 2 and 4 KiB level in the model); on a Zen 4 VM
 * (2026-11-29, more bandwidth per core) `make bench-kernel-ab` with cold weights had 3 KiB at
 * 0.93-0.95x the time of 1 KiB at f32 and 0.90-0.92x at bf16 on one thread, 0.96x / 0.94x on
 * two (1.5, 2 and 4 KiB in between), and the 0.5B model's decode, binaries alternating
 * (tests/bench/model_seer.lua, 3 rounds each): one thread f32 14.2/12.7/13.8 -> 14.3/13.0/14.2
 * tok/s, bf16 25.5/24.6/24.1 -> 27.4/25.3/25.6; two threads ahead in 5 of 6 rounds.
 *
 * Without any software prefetch the one-token kernel was faster still on that Zen 4 VM
 * (2026-11-29, the 0.5B model, tests/bench/model_seer.lua, SEER_ROW_PREFETCH=1 against 0, four
 * alternating rounds): one thread bf16 26.2-27.2 -> 31.0-31.9 tok/s, fast bf16 27.8-30.1 ->
 * 34.5-35.0, f32 14.6-14.9 -> 15.8-16.7; two threads level or ahead (bf16 35.6-38.0 -> 36.1-50.1).
 * A GEMV alone over 1 GiB of 1024-wide bf16 rows (a /tmp program, medians of 25) showed the same:
 * 27 GB/s with the prefetch against 27 without, and VDPBF16PS 26-27 with against 31 without, plain
 * loads reading 32. So the batch-1 kernel (row1_*, and the fast one in kernels_x86.c) runs without
 * it on AMD CPUs with AVX-512 (seer_k_row_prefetch; SEER_ROW_PREFETCH=0|1 chooses); the 2-4-token
 * kernels keep it: at two threads batch 2 and 4 were faster with it (bf16 batch 4 68-85 against
 * 64-69 tok/s, tests/bench/batch_seer.lua, three rounds). On other CPUs nothing changed (the Zen
 * 3 figures above were measured with it and not without). */
#ifndef SEER_ROW1_PF
#define SEER_ROW1_PF 3072
#endif
/* The 2-4-token rows' (and the row pairs') prefetch hint: T1, which on Zen 4 (as on Intel) fills
 * L2 only (Zen 3 filled L1 for every hint), the L1 left to the lines in use and the hardware's
 * L1 prefetchers; the batch-1 rows keep T0 (with the prefetch forced on here, SEER_ROW_PREFETCH=1,
 * T1 was 1.20x the time at f32 and 1.08x at bf16). Measured on the 2-vCPU Zen 4 VM, T1 against
 * T0: the kernel (make bench-kernel-ab, COLD=1, 41 pairs in both places, geometric mean over the
 * three 0.5B shapes) f32 4 tokens 0.73-0.75x the time at one thread (B faster in 41 of 41 pairs
 * on every shape), 0.81x at two, without the row pairs 0.86x; f32 3 tokens 0.77x, 2 tokens 0.95x;
 * bf16 2 / 4 / 8 / 12 tokens 0.97x / 0.95x / 0.94x / 0.93x, 4 tokens at two threads 0.89x. The
 * 0.5B model at two threads, four alternating rounds (tests/bench/batch_seer.lua): f32 batch 4
 * 61.2 -> 77.6 tok/s, bf16 batch 4 108.8 -> 127.1 and batch 8 113.0 -> 141.6 (ahead 4 of 4 each);
 * f32 batch 2 37.1 -> 38.7 (level). With T1 the distance moved too (SEER_ROWT_AHEAD, the batch-1
 * rows keep SEER_ROW1_PF): against 3 KiB, 1.5 KiB was 1.35x the time at f32 4 tokens, 4 KiB
 * 0.93-0.95x (f32 3 tokens 0.94x; two threads, f32 2 tokens and bf16 2-8 tokens 0.98-1.00x),
 * 6 KiB 0.95-0.97x, 8 KiB 0.96x, 12 KiB 0.99x. */
#ifndef SEER_ROWT_HINT
#define SEER_ROWT_HINT _MM_HINT_T1
#endif
#ifndef SEER_ROWT_AHEAD
#define SEER_ROWT_AHEAD 4096 /* bytes ahead, for the 2-4-token rows */
#endif
#define SEER_W_BF16(p) SEER_BF16X8(p)
#define SEER_W_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define SEER_W_F32(p) _mm256_loadu_ps(p)
/* One row against NT tokens (NT = 1 for batch-1 decode; 2 to 4 for the streamed kernel below),
 * written to y[t * ys]: each 8-block of weights loaded (and widened) once and multiplied into
 * every token's accumulators, each (row, token) output on the chain above. */
#define SEER_DEF_ROWT_PF(FN, T, LOAD, SCALAR, STEP, NT, PF)                                                       \
    __attribute__((target("avx2,fma,f16c"))) static void FN(const T *wr, const float *x, size_t xs, int64_t in, \
                                                                 float *y, size_t ys) {                         \
        int64_t n8 = in & ~(int64_t)7, nb = in & ~(int64_t)(STEP - 1);                                       \
        __m256 a0[NT], a1[NT];                                                                               \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) a0[t] = a1[t] = _mm256_setzero_ps();          \
        for (int64_t i = 0; i < nb; i += STEP) {                                                             \
            if (PF && !(((size_t)i * sizeof(T)) & 63)) _mm_prefetch((const char *)(wr + i) + (NT == 1 ? SEER_ROW1_PF : SEER_ROWT_AHEAD), NT == 1 ? _MM_HINT_T0 : SEER_ROWT_HINT); \
            __m256 w0 = LOAD(wr + i);                                                                        \
            _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                                            \
                a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + (size_t)t * xs + (size_t)i), a0[t]);        \
            if (STEP == 16) {                                                                                \
                __m256 w1 = LOAD(wr + i + 8);                                                                \
                _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                                        \
                    a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + (size_t)t * xs + (size_t)i + 8), a1[t]); \
            }                                                                                                \
        }                                                                                                    \
        if (nb < n8) {                                                                                       \
            __m256 w0 = LOAD(wr + nb);                                                                       \
            _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                                            \
                a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + (size_t)t * xs + (size_t)nb), a0[t]);       \
        }                                                                                                    \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {                                              \
            float sum = hsum8(_mm256_add_ps(a0[t], a1[t]));                                                  \
            for (int64_t i = n8; i < in; i++) sum += SCALAR(wr[i]) * x[(size_t)t * xs + (size_t)i];         \
            y[(size_t)t * ys] = sum;                                                                         \
        }                                                                                                    \
    }
#ifndef SEER_ROWT_PF
#define SEER_ROWT_PF 1
#endif
#define SEER_DEF_ROWT(NAME, T, LOAD, SCALAR, STEP, NT) SEER_DEF_ROWT_PF(NAME##NT, T, LOAD, SCALAR, STEP, NT, SEER_ROWT_PF)
/* The one-token kernel twice, with the software prefetch (NAME##_t1) and without it
 * (NAME##_t1_np), chosen per call by seer_k_row_prefetch(). */
#define SEER_DEF_ROW1(NAME, T, LOAD, SCALAR, STEP)                                                               \
    SEER_DEF_ROWT_PF(NAME##_t1, T, LOAD, SCALAR, STEP, 1, 1)                                                     \
    SEER_DEF_ROWT_PF(NAME##_t1_np, T, LOAD, SCALAR, STEP, 1, 0)                                                  \
    __attribute__((target("avx2,fma,f16c"))) static inline float NAME(const T *wr, const float *x, int64_t in,   \
                                                                      int pf) {                                  \
        float y;                                                                                             \
        if (pf) NAME##_t1(wr, x, 0, in, &y, 0);                                                              \
        else NAME##_t1_np(wr, x, 0, in, &y, 0);                                                              \
        return y;                                                                                            \
    }
#define SEER_F32_ID(v) (v)
SEER_DEF_ROW1(row1_f32, float, SEER_W_F32, SEER_F32_ID, 8)
SEER_DEF_ROW1(row1_bf16, uint16_t, SEER_W_BF16, seer_bf16_to_f32, 16)
SEER_DEF_ROW1(row1_f16, uint16_t, SEER_W_F16, seer_f16_to_f32, 16)

/* Where the one-token kernel runs without its software prefetch (AMD CPUs with AVX-512), a
 * thread's rows of 16-bit weights are taken two at a time, row j of the first half of its range
 * beside row j of the second half: two sequential streams, four independent FMA chains, one
 * call and one dtype switch per two rows; on Intel CPUs with AVX-512, which keep the prefetch,
 * rows of every dtype are, each stream with its own prefetch (f32: two chains, one a row; see
 * the Intel measurements at the end). Why it pays is not pinned down (no hardware counters
 * in this VM): over one long stream a row at a time already reads at the rate of the pairs (a
 * /tmp loop over 1 GiB of 1024-wide bf16 rows: 31-32 GB/s either way, plain loads 35), so not
 * the chains' latency; a model's matrices are short streams (0.5-5.8 MB, a thread's share of
 * them less) that the hardware prefetchers pick up anew at every start, where two streams keep
 * more lines in flight, a likely reason. Each row keeps its own chains (a0, a1 in the same
 * order, the same hsum and tail), so the bits are row1_*'s
 * (tests/unit/test_kernels.c, prefetch off: every token count against the token alone; row
 * counts 1, 5, 13 and 67 leave an odd last row, which runs alone). Measured on the 2-vCPU Zen 4
 * VM (2026-12-01): `make bench-kernel-ab`, 16-bit weights from memory, one token, time with /
 * without: one thread 0.93 (geometric mean over the 0.5B shapes), two threads 0.985; the 0.5B
 * model's bf16 decode at one thread, binaries alternating, a read probe before and after each
 * run (tests/bench/model_seer.lua MODEL 1 16 128; build/bench/peak 1 read), six rounds: 26.5-32.0
 * (mean 29.7) -> 30.6-32.9 (32.0) tok/s, ahead in 6 of 6, 72-87% -> 83-89% of the faster probe
 * (a second series of eight: 28.4-33.0 (30.6) -> 31.1-34.8 (32.9), ahead in 8 of 8);
 * two threads level (four rounds). Tried and not kept: two adjacent rows (two streams 2 KiB
 * apart) 2.4x the time; four rows in quarters (four streams) 1.06x the time of halves at one
 * thread; f32 (one chain, twice the bytes per FMA) 0.95x in the kernel but level in the model
 * (16.1-17.7 against 16.2-17.4 tok/s, four rounds), so f32 keeps a row at a time; the pairs on 512-bit registers (a0 and a1 as the two halves of one, the same lanes, so
 * the same bits) 0.96x the time in the kernel at one and two threads but level in the model
 * (six rounds at one thread, 33.4-34.6 against 29.7-34.7 tok/s).
 * On Intel with AVX-512 (a 2-vCPU Emerald Rapids VM with AMX hidden, model 207, 2026-12-02,
 * where bf16 decode runs these rows): a row at a time, bf16 read at 67-75% of `build/bench/peak
 * 1 read` and f32 at 72-86%. `make bench-kernel-ab` (COLD=1 HUGE=1, one token, 21 pairs, pairs
 * against a row at a time): one thread bf16 0.86-0.91x the time, f32 0.89-0.93x (geometric mean
 * 0.896); two threads bf16 0.92-0.95x, f32 0.88-0.92x (0.914). The 0.5B model's decode
 * (greedy steps after a 5-token prompt, timed as tests/bench/model_seer.lua times them; 48 steps
 * at one thread, 64 at two; binaries alternating, `build/bench/peak T read` after each run), three
 * rounds, tok/s and share of the probe: bf16 one thread 10.8-11.6 (70-75%) -> 12.8-13.3 (78-80%),
 * two threads 17.0-19.2 (56-61%) -> 20.7-23.4 (71-81%); f32 one thread 6.2-6.8 (71-81%) ->
 * 5.9-6.7 (78-89%), two threads 10.2-12.4 (71-75%) -> 9.5-13.0 (75-86%); an earlier pair of runs
 * bf16 one thread 9.8-9.9 GB/s (70%) -> 12.1-12.4 (92-93%). Tried there and not kept: the prefetch 6 or 10 KiB ahead instead of 3 (level
 * with the pairs; 4-6 KiB 0.96-0.97x without them), four rows in quarters (0.97x at one thread,
 * level at two), bf16 pairs on 512-bit registers (level at one thread, 1.05x at two), the first
 * 3 KiB of both streams prefetched at a range's start (level), 4 row tasks per thread instead
 * of 16 (level; 1, a fixed half each, 1.15x). On AVX2-only CPUs (prefetch on; the Zen 3 VM had
 * two rows at a time slower, above) nothing changes. */
#ifndef SEER_ROW1_SPLIT
#define SEER_ROW1_SPLIT 1
#endif
#define SEER_DEF_ROW2(FN, T, LOAD, SCALAR, STEP, PF)                                                                   \
    __attribute__((target("avx2,fma,f16c"))) static void FN(const T *wa, const T *wb, const float *x, int64_t in, \
                                                            float *ya, float *yb) {                              \
        int64_t n8 = in & ~(int64_t)7, nb = in & ~(int64_t)(STEP - 1);                                       \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;                                          \
        for (int64_t i = 0; i < nb; i += STEP) {                                                             \
            if (PF && !(((size_t)i * sizeof(T)) & 63)) {                                                     \
                _mm_prefetch((const char *)(wa + i) + SEER_ROW1_PF, _MM_HINT_T0);                            \
                _mm_prefetch((const char *)(wb + i) + SEER_ROW1_PF, _MM_HINT_T0);                            \
            }                                                                                                \
            __m256 x0 = _mm256_loadu_ps(x + i);                                                              \
            a0 = _mm256_fmadd_ps(LOAD(wa + i), x0, a0);                                                      \
            b0 = _mm256_fmadd_ps(LOAD(wb + i), x0, b0);                                                      \
            if (STEP == 16) {                                                                                \
                __m256 x1 = _mm256_loadu_ps(x + i + 8);                                                      \
                a1 = _mm256_fmadd_ps(LOAD(wa + i + 8), x1, a1);                                              \
                b1 = _mm256_fmadd_ps(LOAD(wb + i + 8), x1, b1);                                              \
            }                                                                                                \
        }                                                                                                    \
        if (nb < n8) {                                                                                       \
            __m256 x0 = _mm256_loadu_ps(x + nb);                                                             \
            a0 = _mm256_fmadd_ps(LOAD(wa + nb), x0, a0);                                                     \
            b0 = _mm256_fmadd_ps(LOAD(wb + nb), x0, b0);                                                     \
        }                                                                                                    \
        float sa = hsum8(_mm256_add_ps(a0, a1)), sb = hsum8(_mm256_add_ps(b0, b1));                          \
        for (int64_t i = n8; i < in; i++) sa += SCALAR(wa[i]) * x[i];                                        \
        for (int64_t i = n8; i < in; i++) sb += SCALAR(wb[i]) * x[i];                                        \
        *ya = sa, *yb = sb;                                                                                  \
    }
SEER_DEF_ROW2(row2_bf16, uint16_t, SEER_W_BF16, seer_bf16_to_f32, 16, 0)
SEER_DEF_ROW2(row2_f16, uint16_t, SEER_W_F16, seer_f16_to_f32, 16, 0)
SEER_DEF_ROW2(row2_bf16_pf, uint16_t, SEER_W_BF16, seer_bf16_to_f32, 16, 1)
SEER_DEF_ROW2(row2_f16_pf, uint16_t, SEER_W_F16, seer_f16_to_f32, 16, 1)
SEER_DEF_ROW2(row2_f32_pf, float, SEER_W_F32, SEER_F32_ID, 8, 1)
/* Rows [r0, r1) against one token, written to y[r]. */
__attribute__((target("avx2,fma,f16c"))) static void rows_avx2_one(const seer_weight_t *w, int64_t r0, int64_t r1,
                                                                   const float *x, float *y) {
    int64_t in = w->cols;
    int pf = seer_k_row_prefetch();
    /* pairs: on AMD with AVX-512 (no prefetch) 16-bit weights; on Intel with AVX-512 (with it) every dtype */
    if (SEER_ROW1_SPLIT && r1 - r0 >= 2 && (pf ? seer_k_intel_avx512() : w->dtype != SEER_F32)) {
        int64_t h = (r1 - r0) / 2, mid = r0 + h;
        for (int64_t j = 0; j < h; j++) {
            size_t a = (size_t)(r0 + j) * (size_t)in, b = (size_t)(mid + j) * (size_t)in;
            const uint16_t *wd = w->data;
            const float *wf = w->data;
            float *ya = y + r0 + j, *yb = y + mid + j;
            switch (w->dtype) {
            case SEER_BF16: (pf ? row2_bf16_pf : row2_bf16)(wd + a, wd + b, x, in, ya, yb); break;
            case SEER_F16: (pf ? row2_f16_pf : row2_f16)(wd + a, wd + b, x, in, ya, yb); break;
            default: row2_f32_pf(wf + a, wf + b, x, in, ya, yb); break;
            }
        }
        r0 = mid + h; /* an odd count's last row, alone below */
    }
    for (int64_t r = r0; r < r1; r++) {
        size_t at = (size_t)r * (size_t)in;
        switch (w->dtype) {
        case SEER_BF16: y[r] = row1_bf16((const uint16_t *)w->data + at, x, in, pf); break;
        case SEER_F16: y[r] = row1_f16((const uint16_t *)w->data + at, x, in, pf); break;
        default: y[r] = row1_f32((const float *)w->data + at, x, in, pf); break;
        }
    }
}
/* A few tokens (2 to 4) streamed like one: rows one after another, one sequential stream per
 * thread as in row1_*, each 8-block of weights loaded (and widened) once and multiplied into
 * every token's accumulators, and every (row, token) output on the canonical chain above. At
 * 2-4 tokens a step is still bound by reading the weights, which this kernel does at the
 * batch-1 kernel's pace; the blocked kernel below, built for compute, read them more slowly.
 * Measured on the 2-vCPU Zen 3 VM, 0.5B model, 2 threads, batched greedy decode
 * (tests/bench/batch_seer.lua, three interleaved rounds, SEER_STREAM_MAX=1 against 4), tok/s:
 * bf16 batch 4 32.8-40.7 -> 41.3-62.3, batch 2 19.5-22.6 -> 25.2-37.1; f32 batch 4 27.2-30.5 ->
 * 30.3-35.2, batch 2 14.3-17.0 -> 16.2-20.7. Streaming 5-16 tokens in groups of four, 32 or 64
 * rows at a time so the later groups read the rows from L2, was slower than the blocked kernel
 * at f32 (batch 16: 37-51 against 54-67) and level at bf16, so from 5 tokens on the blocked
 * kernel runs. */
#ifndef SEER_STREAM_MAX
#define SEER_STREAM_MAX 4
#endif
#if SEER_STREAM_MAX > 4
#error "SEER_STREAM_MAX: the streamed kernel takes 2 to 4 tokens"
#endif
#define SEER_DEF_ROWT_ALL(NAME, T, LOAD, SCALAR, STEP)                                                           \
    SEER_DEF_ROWT(NAME, T, LOAD, SCALAR, STEP, 2)                                                                \
    SEER_DEF_ROWT(NAME, T, LOAD, SCALAR, STEP, 3)                                                                \
    SEER_DEF_ROWT(NAME, T, LOAD, SCALAR, STEP, 4)
SEER_DEF_ROWT_ALL(rowt_f32_, float, SEER_W_F32, SEER_F32_ID, 8)
SEER_DEF_ROWT_ALL(rowt_bf16_, uint16_t, SEER_W_BF16, seer_bf16_to_f32, 16)
SEER_DEF_ROWT_ALL(rowt_f16_, uint16_t, SEER_W_F16, seer_f16_to_f32, 16)
#ifndef SEER_ROWT_PAIRS
#define SEER_ROWT_PAIRS 1
#endif
/* Two rows (wa, wb) against NT tokens, each row on its own chains exactly as SEER_DEF_ROWT_PF's
 * (a0, a1, the same hsum and tail: the same bits), sharing the loads of x. Built for AVX-512VL
 * (32 ymm registers: 16-bit weights at four tokens keep 16 accumulators) and called only where
 * the CPU has it (seer_k_have_avx512), on row j of the first half of a thread's range beside row j
 * of the second (two sequential streams, as the one-token kernel's pairs on AMD). One row at a
 * time, four tokens read their weights at about half the one-token rate (7.5-9 cycles an f32
 * 8-block at a nominal 3.7 GHz, where the chains' latency allows four: each 8-block's FMAs wait
 * on the previous block's whatever the token count); a second row doubles the independent work in flight,
 * which likely is what pays (no counters in this VM to say more). Measured on the
 * 2-vCPU Zen 4 VM (2026-12-01): make bench-kernel-ab, weights from memory, one thread, against
 * one row at a time: f32 4 tokens 0.88x the time (geometric mean over the 0.5B shapes; 0.77x on
 * 1024x2816), 2 tokens 0.95x; bf16 4 tokens 0.88x, 2 tokens 0.87x. The 0.5B model, batched
 * decode at 2 threads (tests/bench/batch_seer.lua, five alternating rounds, means): f32 batch 4
 * 55.2 -> 62.8 tok/s (ahead in 5), batch 2 level; bf16 batch 2 66.2 -> 69.2 (ahead in 4), batch 4
 * 89.9 -> 102.2 (4), batch 8 (groups of four) 115.6 -> 135.3 (5). Tried and not kept: the 16-bit
 * pairs on 512-bit registers (a row's a0 and a1 as the halves of one zmm, one widening and one
 * FMA per 16 weights; the same bits): 1.05x the time at 4 tokens, 1.11x at 2; the activations
 * interleaved for the pairs ([8-block][token][8], one sequential stream of x; the 2816-wide down
 * projection reads at 0.6x the others' rate, its 4 tokens' x of 45 KiB out of L1): f32 1.01x /
 * 1.03x, bf16 0.96x / 0.98x (4 / 2 tokens), the down projection 0.92-0.98x: within what the model
 * resolves. */
/* One 8-block of both rows at input i into the chains A (row a) and B (row b) of NT tokens */
#define SEER_ROWT2_BLOCK(LOAD, NT, A, B, I)                                                                      \
    do {                                                                                                     \
        __m256 wa_ = LOAD(wa + (I)), wb_ = LOAD(wb + (I));                                                   \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {                                              \
            __m256 xv = _mm256_loadu_ps(x + (size_t)t * xs + (size_t)(I));                                  \
            A[t] = _mm256_fmadd_ps(wa_, xv, A[t]);                                                           \
            B[t] = _mm256_fmadd_ps(wb_, xv, B[t]);                                                           \
        }                                                                                                    \
    } while (0)
#define SEER_DEF_ROWT2(FN, T, LOAD, SCALAR, STEP, NT)                                                            \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512vl"))) static void FN(                                  \
        const T *wa, const T *wb, const float *x, size_t xs, int64_t in, float *ya, float *yb, size_t ys) {   \
        int64_t n8 = in & ~(int64_t)7, nb = in & ~(int64_t)(STEP - 1);                                       \
        __m256 a0[NT], a1[NT], b0[NT], b1[NT];                                                               \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) a0[t] = a1[t] = b0[t] = b1[t] = _mm256_setzero_ps(); \
        for (int64_t i = 0; i < nb; i += STEP) {                                                             \
            if (SEER_ROWT_PF && !(((size_t)i * sizeof(T)) & 63)) {                                           \
                _mm_prefetch((const char *)(wa + i) + SEER_ROWT_AHEAD, SEER_ROWT_HINT);                      \
                _mm_prefetch((const char *)(wb + i) + SEER_ROWT_AHEAD, SEER_ROWT_HINT);                      \
            }                                                                                                \
            SEER_ROWT2_BLOCK(LOAD, NT, a0, b0, i);                                                           \
            if (STEP == 16) SEER_ROWT2_BLOCK(LOAD, NT, a1, b1, i + 8);                                       \
        }                                                                                                    \
        if (nb < n8) SEER_ROWT2_BLOCK(LOAD, NT, a0, b0, nb);                                                 \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {                                              \
            float sa = hsum8(_mm256_add_ps(a0[t], a1[t])), sb = hsum8(_mm256_add_ps(b0[t], b1[t]));          \
            for (int64_t i = n8; i < in; i++) sa += SCALAR(wa[i]) * x[(size_t)t * xs + (size_t)i];          \
            for (int64_t i = n8; i < in; i++) sb += SCALAR(wb[i]) * x[(size_t)t * xs + (size_t)i];          \
            ya[(size_t)t * ys] = sa, yb[(size_t)t * ys] = sb;                                                \
        }                                                                                                    \
    }
#define SEER_DEF_ROWT2_ALL(NAME, T, LOAD, SCALAR, STEP)                                                          \
    SEER_DEF_ROWT2(NAME##2, T, LOAD, SCALAR, STEP, 2)                                                            \
    SEER_DEF_ROWT2(NAME##3, T, LOAD, SCALAR, STEP, 3)                                                            \
    SEER_DEF_ROWT2(NAME##4, T, LOAD, SCALAR, STEP, 4)
SEER_DEF_ROWT2_ALL(rowt_f32_pair, float, SEER_W_F32, SEER_F32_ID, 8)
SEER_DEF_ROWT2_ALL(rowt_bf16_pair, uint16_t, SEER_W_BF16, seer_bf16_to_f32, 16)
SEER_DEF_ROWT2_ALL(rowt_f16_pair, uint16_t, SEER_W_F16, seer_f16_to_f32, 16)

/* Rows [r0, r1) against ntok (2 to 4) tokens, streamed (x's rows xs floats apart: stream_x);
 * written to y[t][r] (row stride out). */
__attribute__((target("avx2,fma,f16c"))) static void rows_avx2_stream(const seer_weight_t *w, int64_t r0, int64_t r1,
                                                                      const float *x, size_t xs, int ntok, float *y, int64_t out) {
    int64_t in = w->cols;
    size_t ys = (size_t)out;
#define SEER_ROWT_CALL(NAME, T)                                                                                  \
    if (SEER_ROWT_PAIRS && r1 - r0 >= 2 && seer_k_have_avx512()) {                                           \
        int64_t h = (r1 - r0) / 2, mid = r0 + h;                                                             \
        for (int64_t j = 0; j < h; j++) {                                                                    \
            const T *wa = (const T *)w->data + (size_t)(r0 + j) * (size_t)in;                                \
            const T *wb = (const T *)w->data + (size_t)(mid + j) * (size_t)in;                               \
            if (ntok == 4) NAME##pair4(wa, wb, x, xs, in, y + r0 + j, y + mid + j, ys);                      \
            else if (ntok == 3) NAME##pair3(wa, wb, x, xs, in, y + r0 + j, y + mid + j, ys);                 \
            else NAME##pair2(wa, wb, x, xs, in, y + r0 + j, y + mid + j, ys);                                \
        }                                                                                                    \
        r0 = mid + h; /* an odd count's last row, alone below */                                             \
    }                                                                                                        \
    for (int64_t r = r0; r < r1; r++) {                                                                      \
        const T *wr = (const T *)w->data + (size_t)r * (size_t)in;                                           \
        if (ntok == 4) NAME##4(wr, x, xs, in, y + r, ys);                                                    \
        else if (ntok == 3) NAME##3(wr, x, xs, in, y + r, ys);                                               \
        else NAME##2(wr, x, xs, in, y + r, ys);                                                              \
    }
    switch (w->dtype) {
    case SEER_BF16: SEER_ROWT_CALL(rowt_bf16_, uint16_t) break;
    case SEER_F16: SEER_ROWT_CALL(rowt_f16_, uint16_t) break;
    default: SEER_ROWT_CALL(rowt_f32_, float) break;
    }
#undef SEER_ROWT_CALL
}

/* Five to SEER_STREAM_GROUPS_MAX tokens on bf16/f16 weights: streamed in groups of up to four
 * tokens over chunks of SEER_STREAM_CHUNK rows, so the first group reads a chunk from memory and
 * the later groups from L2 (64 rows of a 2816-wide bf16 matrix are 352 KiB), with the threads
 * taking row tasks as at 1-4 tokens. Each (row, token) output is the streamed or batch-1
 * kernel's, so the same chain as the token alone. At these counts the blocked kernel below,
 * which widens each slice into an f32 panel for the later groups, has too few groups to pay for
 * the widening. Measured on the 2-vCPU Zen 3 VM, 0.5B model, 2 threads, bf16 batched decode
 * (tests/bench/batch_seer.lua, three interleaved rounds, blocked against groups), tok/s: batch 5
 * 42.9-49.3 -> 48.1-50.0, batch 6 47.5-49.5 -> 55.3-63.0, batch 8 47.0-59.5 -> 66.7-77.2, batch
 * 10 52.4-63.4 -> 59.5-68.8, batch 12 51.0-64.4 -> 66.9-76.9; at 14 and 16 level (means of six
 * rounds at 16: 71.2 and 71.1), so from 13 tokens the blocked kernel runs. f32 weights (twice the
 * bytes to re-read from L2) were slower in groups (batch 12: 53-62 -> 41-53), so f32 takes the
 * blocked kernel from five tokens (SEER_STREAM_GROUPS_F32_MAX). */
#ifndef SEER_STREAM_GROUPS_MAX
#define SEER_STREAM_GROUPS_MAX 12
#endif
#ifndef SEER_STREAM_CHUNK
#define SEER_STREAM_CHUNK 64
#endif
__attribute__((target("avx2,fma,f16c"))) static void rows_avx2_stream_groups(const seer_weight_t *w, int64_t r0, int64_t r1,
                                                                             const float *x, size_t xs, int ntok, float *y, int64_t out) {
    for (int64_t r = r0; r < r1; r += SEER_STREAM_CHUNK) {
        int64_t re = r1 - r < SEER_STREAM_CHUNK ? r1 : r + SEER_STREAM_CHUNK;
        for (int t0 = 0; t0 < ntok; t0 += 4) {
            int nt = ntok - t0 < 4 ? ntok - t0 : 4;
            if (nt == 1) rows_avx2_one(w, r, re, x + (size_t)t0 * xs, y + (size_t)t0 * (size_t)out);
            else rows_avx2_stream(w, r, re, x + (size_t)t0 * xs, xs, nt, y + (size_t)t0 * (size_t)out, out);
        }
    }
}
#ifndef SEER_STREAM_GROUPS_F32_MAX
#define SEER_STREAM_GROUPS_F32_MAX SEER_STREAM_MAX
#endif
/* Whether n tokens against w take a streamed kernel (rows one after another, no packing) rather
 * than the blocked one. */
static int streamed(const seer_weight_t *w, int n) {
    return n <= (w->dtype == SEER_F32 ? SEER_STREAM_GROUPS_F32_MAX : SEER_STREAM_GROUPS_MAX);
}

/* More tokens (f32 from five, bf16/f16 past SEER_STREAM_GROUPS_MAX: a batched decode step, or a
 * short sequence's prefill): a blocked kernel that reads each weight once per step for up to 16
 * tokens and keeps the FMA units fed. Rows are taken SEER_RB at a time and the input dimension in
 * slices of SEER_KB elements (SEER_KB_F32 for f32 weights at 9 to 16 tokens); a slice of the
 * block's rows (bf16/f16 widened to f32 once, into a 12 KiB panel, by the first group of tokens,
 * instead of once per group) and the same slice of 16 tokens' activations (16 KiB) sit in L1 while a 3-row x 4-token micro-kernel (12
 * accumulators in registers; the unroll pragmas keep them there) runs over them. Each (row,
 * token) accumulator is saved to a small buffer between slices and reloaded, which rounds nothing, so every output is the same chain of FMAs over the same
 * 8-lane slices in the same order, then hsum8 and the same scalar tail, as row1_* computes
 * for a token alone: a token's result does not depend on how many tokens run beside it, nor
 * on the thread count (tests/lua/test_model_batch.lua, tests/unit/test_kernels.c). The next
 * slice of weights is prefetched while the current one is computed (one slice ahead: on AMD
 * Zen every prefetch hint fills L1, so fetching a whole row block ahead evicted the working set;
 * measured, the widening loop's loads then took a fifth of a batch-16 step).
 *
 * Compared with `make bench-kernel-ab` (tests/bench/kernel_ab.sh: two builds of this file in one
 * program, calls alternating, so both see the same minute of this VM) and on the model with two
 * binaries alternating (tests/bench/batch_seer.lua's step, ten paired rounds): issuing the
 * prefetches from inside the micro-kernels' loops and summing a full 3x4 tile without a branch
 * per output made the kernel 0.88-0.92x the time with the weights in L3 (one thread, 16 tokens,
 * every shape, 36-40 of 41 pairs; measured before the tool swapped places, and identical code
 * ran up to 5% faster in B's place, so 0.93-0.95x is the safer figure) and batch-16 f32 decode
 * 1.10x (binaries alternating, 7 of 8 rounds; bf16 level). Within
 * the noise or slower there: 128-, 192- or 384-input slices (1.06-1.10x the time cold), 512
 * (level), 8 tokens per pass (1.13x), prefetching two slices ahead, NTA prefetches (level), and
 * copying each row block into an L2 panel ahead of use as one sequential stream, between the
 * calls of the block before it (1.15x the time cold, 1.20x warm: the copy is a pass of its own,
 * where the panel fill of the first token group hides in the FMAs' shadow). On the Zen 4 VM
 * (AVX-512VL: 32 ymm registers), a 3-row x 8-token micro-kernel (24 accumulators, half the
 * weight loads per FMA) was level with the weights in L3 and 1.02x the time cold (geometric
 * means over the six 16-token shapes, 15 pairs each): the loads are not what holds it back.
 * Also tried there (2026-12-01, make bench-kernel-ab, f32, 16 tokens, weights from memory): 6-row
 * blocks 0.97x the time, 128-input slices 0.97x, both 0.98x, 3-row blocks and 24 x 128 level (within
 * what the model's decode can resolve, so not taken); no f32 panel (SEER_F32_PANEL=0) 0.96-0.97x
 * in the kernel, but batch-16 f32 decode in the model was level at two threads and slower at one
 * (62.1, 59.2 against 72.4, 68.4 tok/s); a prefetch of each row 64 or 128 inputs ahead from the
 * first group's loop level; and the weights in this kernel's own order ([row block][slice][row]
 * [SEER_KB], one sequential stream, simulated by addressing a matrix so) 1.03-1.05x the time, so
 * the first group's wait on memory (perf: 1.6-2.2x a later group's time cold, 1.3x from L2) does
 * not come from the rows lying 4 KiB apart; nor from the panel's stores aliasing the weights'
 * loads modulo 4 KiB (panel rows 264 or 272 floats apart, or the panel 64 bytes further on:
 * 0.998-1.004x, f32, 16 tokens; in the model too, f32 batch 16 with 128-input slices: the panel
 * placed 0, 128, 256 or 448 bytes past the weights' address modulo 512, four rounds, 121.5 /
 * 125.3 / 130.2 / 119.6 against 123.7 tok/s, then 256 against the stack's place 139.3 / 137.1
 * over six). For bf16 at 16 tokens, whose accumulators (two chains, 12 KiB) and 256-input slices
 * also exceed the L1, in the model (batch 16, 2 threads, 2026-12-01): 6-row blocks 146.4 -> 149.1
 * and 150.5 -> 151.4 tok/s (5 and 6 alternating rounds: level), 6-row blocks with 128-input
 * slices 126.9 (behind in 5 of 5). */
#ifndef SEER_RB
#define SEER_RB 12 /* rows per block (4 micro-panels of 3) */
#endif
#ifndef SEER_KB
/* input elements per slice (a multiple of 16, so a slice starts each bf16 chain on a0). Each
 * micro-kernel call over a slice loads and stores its 12 accumulators and each slice sets up its
 * prefetches, so a longer slice costs less per FMA, until the panel and the activations no longer
 * fit L1 together. Batch-16 decode of the 0.5B model, 2 threads, five interleaved rounds, tok/s
 * (means): 128 / 256 / 512: bf16 62.8 / 72.8 / 67.2, f32 59.8 / 64.5 / 57.7 (256 ahead of 128 in 5
 * of 5 rounds at bf16, 4 of 5 at f32); the kernel alone (make bench-kernel, COLD=1, one thread,
 * 16 tokens, best of three rounds) bf16 39-44 -> 44-52 GFLOP/s at 256. */
#define SEER_KB 256
#endif
_Static_assert(SEER_KB % 16 == 0, "SEER_KB: slices must start every bf16/f16 chain on a0");
#ifndef SEER_TB
#define SEER_TB 16 /* tokens per pass over a row block */
#endif
#ifndef SEER_BLOCK_PF
/* 0: the blocked kernel prefetches nothing. Unlike the batch-1 kernel's (above), this one pays on
 * the Zen 4 VM: batched decode of the 0.5B model, 2 threads, four alternating rounds
 * (tests/bench/batch_seer.lua), f32 batch 16 95.2-111.2 tok/s without against 125.9-142.6 with,
 * bf16 batch 16 96.8-108.9 against 128.1-146.2 (2026-11-29). */
#define SEER_BLOCK_PF 1
#endif
/* Up to this many tokens in a pass, the blocked kernel prefetches the next slice into L2
 * (PREFETCHT1; on Zen 4 the T1 and T2 hints fill L2 only, where Zen 3 filled L1 for every hint),
 * from more into L1 (T0). Few tokens are few FMAs per weight line, so the slice's loads must
 * arrive faster, and the L1 prefetches then evicted lines still in use. Measured on the 2-vCPU
 * Zen 4 VM, f32, all T1 against all T0: the kernel (make bench-kernel-ab, COLD=1, one thread, 41
 * pairs in both places, geometric mean over the three 0.5B shapes) 5 tokens 0.73x the time,
 * 8 tokens 0.78x, 16 tokens 0.88-0.93x (four runs), 32 tokens 0.97x, two threads 8 tokens 0.89x,
 * 16 tokens 0.96-0.97x; bf16 13 / 16 / 32 tokens 0.96x / 0.98x / 1.00x. But in the model (one
 * thread, tests/bench/batch_seer.lua, seer binaries alternating) f32 batch 16 read 73.7 tok/s with
 * T0 against 71.0 with T1 (T0 ahead in 6 of 6 rounds), batch 12 59.8 / 60.8 (level), batch 8
 * 49.4 / 53.6 and batch 6 37.3 / 39.5 (T1 ahead in 4 of 4 and 3 of 4): T1 up to 8 tokens only.
 * bf16 batch 16 (one thread, five alternating rounds) read 76.7 tok/s with T0 against 63.9 with T1
 * (T0 ahead in 5 of 5), where the kernel bench had T1 at 0.98x the time: at 16 tokens the kernel
 * bench does not reproduce what the model's calls see (not pinned down: no counters here).
 * A second walker (T1 two or three slices ahead beside T0 one ahead) was 1.06-1.08x the time of T1
 * alone at 16 tokens, and T1 two to four slices ahead level with one. With this split against
 * all T0 (six alternating rounds, one thread): batch 8 48.1 -> 51.1 tok/s (ahead 6 of 6), batch
 * 16 70.5 -> 72.7 (the same hint; level); two threads, batch 8 90.9 -> 95.2 (4 of 4). 0 takes T0
 * throughout. */
#ifndef SEER_PF_FAR_MAX
#define SEER_PF_FAR_MAX 8
#endif
#ifndef SEER_KB_F32
/* The slice for f32 weights in a single pass of 9 to 16 tokens (a batched decode step), which
 * prefetches into L1 (past SEER_PF_FAR_MAX tokens): at 256 inputs, the slice of the block's rows
 * as they lie (12 KiB, read by the first token group, f32 weights not being widened), its panel
 * copy (12 KiB), 16 tokens' activations (16 KiB) and the next slice arriving (12 KiB) were more
 * than the 32 KiB L1; at 128 half of each. f32 decode of the 0.5B model, two binaries alternating,
 * order swapped every round (tests/bench/batch_seer.lua MODEL THREADS 32 B), Zen 4 VM, 2026-12-01,
 * tok/s, 256 against 128: 2 threads batch 16 129.9 / 139.6 (24 rounds, 128 ahead in 21, level in
 * 1) and 134.2 / 139.4 (6 more, ahead in 5), batch 12 114.7 / 123.7 (6 of 6); one thread batch 16
 * 69.5 / 73.0, batch 12 56.7 / 65.9 (4 of 4 each; four earlier rounds at batch 16 were level, 128
 * ahead in 2: 72.9 / 70.4). Not taken: batch 8 (T1 prefetches, into L2: 93 against 76 tok/s with
 * 128), bf16 (136.8 against 145.3 at batch 16 with 128, behind in 4 of 5: its slice of weights is
 * half the bytes) and passes of more than 16 tokens (a 32-token f32 prefill 148.5 against 143.4
 * tok/s, ten rounds, 128 behind in 6). Slices change no sums: every accumulator is carried from
 * one slice to the next. Tried with 128 at batch 16 (2 threads, five alternating rounds each,
 * tok/s against the kept settings beside them), not kept: 64- or 192-input slices 105.9 / 124.6
 * against 127.1; T1 prefetches (SEER_PF_FAR_MAX 16, six rounds) 105.3 against 130.3 (batch 12 95.4
 * / 113.7); the next slice's prefetch issued two or three slices ahead 137.7 / 129.6 against 138.6
 * (so the first group's wait is not the prefetches arriving late); no f32 panel 122.7 against
 * 133.4; 6- or 9-row blocks 113.3 / 122.4 against 123.5; the next slice's rows prefetched last row
 * first (so the rows used first arrive last, six rounds) 131.5 against 135.5. */
#define SEER_KB_F32 128
#endif
_Static_assert(SEER_KB_F32 % 16 == 0 && SEER_KB_F32 <= SEER_KB, "SEER_KB_F32: a multiple of 16, at most SEER_KB");
/* The slice length for ntok tokens against weights of dtype dt (above) */
static inline int slice_len(seer_dtype_t dt, int ntok) {
    return dt == SEER_F32 && ntok > SEER_PF_FAR_MAX && ntok <= SEER_TB ? SEER_KB_F32 : SEER_KB;
}
#ifndef SEER_PACK_X
#define SEER_PACK_X 1
#endif
/* The walk over the next slice's lines that the micro-kernels prefetch as they go, one line per
 * iteration of their loop up to their share (`pq`), then the rest of the share after it: `p` the
 * next line, `line` its index in its row's run of `lines` lines, `skip` the bytes from a run's end
 * to the next row's. Issued from inside the FMA loop rather than in a loop between the calls. */
typedef struct {
    const char *p;
    int line, lines;
    ptrdiff_t skip; /* negative when a row is narrower than its run of lines */
    int far;        /* into L2 (SEER_PF_FAR_MAX) rather than L1 */
} seer_pfw_t;
#define SEER_PF_LINE(P, L, PF)                                                                           \
    do {                                                                                                 \
        if ((PF)->far)                                                                                   \
            _mm_prefetch((P), _MM_HINT_T1);                                                              \
        else                                                                                             \
            _mm_prefetch((P), _MM_HINT_T0);                                                              \
        (P) += 64;                                                                                       \
        if (++(L) == (PF)->lines) (L) = 0, (P) += (PF)->skip;                                            \
    } while (0)
/* The body of both micro-kernels: the 3 x NT accumulators in from acc (zero for the first
 * slice, `fresh`: clearing the buffer for every row block was 2% of a batch-16 step), then for
 * each 8-block i of the chain (off, off + step, ...) three rows' vectors v0..v2 (LOAD3(CVT, i)
 * declares them) against NT tokens, then the accumulators back out. */
#define SEER_MICRO_BODY(NT, LOAD3, CVT)                                                                          \
    __m256 a[NT][3];                                                                                         \
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                                                    \
        _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++)                                                 \
            a[t][k] = fresh ? _mm256_setzero_ps() : _mm256_load_ps(acc + (t * 3 + k) * 8);                   \
    const char *pfp = pf->p;                                                                                 \
    int pfl = pf->line;                                                                                      \
    for (int i = off; i < nk; i += step) {                                                                   \
        if (pq > 0) { SEER_PF_LINE(pfp, pfl, pf); pq--; }                                                    \
        LOAD3(CVT, i);                                                                                       \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {                                              \
            __m256 xv = _mm256_loadu_ps(x + (size_t)t * xs + (size_t)i);                                     \
            a[t][0] = _mm256_fmadd_ps(v0, xv, a[t][0]);                                                      \
            a[t][1] = _mm256_fmadd_ps(v1, xv, a[t][1]);                                                      \
            a[t][2] = _mm256_fmadd_ps(v2, xv, a[t][2]);                                                      \
        }                                                                                                    \
    }                                                                                                        \
    for (; pq > 0; pq--) SEER_PF_LINE(pfp, pfl, pf);                                                         \
    pf->p = pfp, pf->line = pfl;                                                                             \
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                                                    \
        _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++) _mm256_store_ps(acc + (t * 3 + k) * 8, a[t][k])
/* f32 rows (or a panel already widened) read in place */
#define SEER_LOAD3_F32(CVT, i)                                                                                   \
    __m256 v0 = _mm256_loadu_ps(w0 + (i));                                                                   \
    __m256 v1 = _mm256_loadu_ps(w1 + (i));                                                                   \
    __m256 v2 = _mm256_loadu_ps(w2 + (i))
/* bf16/f16 rows widened with CVT, and stored into the panel for the later token groups */
#define SEER_LOAD3_WIDEN(CVT, i)                                                                                 \
    __m256 v0 = CVT(h0 + (i));                                                                               \
    __m256 v1 = CVT(h1 + (i));                                                                               \
    __m256 v2 = CVT(h2 + (i));                                                                               \
    _mm256_store_ps(p0 + (i), v0);                                                                           \
    _mm256_store_ps(p1 + (i), v1);                                                                           \
    _mm256_store_ps(p2 + (i), v2)
#define SEER_DEF_MICRO(NT)                                                                                       \
    __attribute__((target("avx2,fma,f16c"))) static inline void micro3x##NT(                                     \
        const float *w0, const float *w1, const float *w2, const float *x, size_t xs, int off, int step, int nk, float *acc, int fresh, \
        seer_pfw_t *pf, int pq) {                                                                            \
        SEER_MICRO_BODY(NT, SEER_LOAD3_F32, _);                                                              \
    }
SEER_DEF_MICRO(1)
SEER_DEF_MICRO(2)
SEER_DEF_MICRO(3)
SEER_DEF_MICRO(4)
/* The same for the first group of tokens on bf16/f16 weights, which also widens the weights it
 * reads into the panel for the later groups: the widening hides in the FMAs' shadow (a separate
 * widening pass was store-bound and took a fifth of a batch-16 step). f32 weights are copied
 * into the panel the same way when more than one group of tokens runs (SEER_F32_PANEL): the
 * panel is contiguous, while the block's rows lie a row apart, 4 KiB at width 1024, and fall
 * into the same L1 sets. Batch-16 decode of the 0.5B model at f32, 2 threads, five interleaved
 * rounds (SEER_F32_PANEL=0 against 1): 49.5-59.8 (mean 54.7) -> 53.6-62.2 (58.9) tok/s. */
#define SEER_DEF_MICROW(NT, NAME, CVT) SEER_DEF_MICROWT(NT, NAME, CVT, uint16_t)
#define SEER_DEF_MICROWT(NT, NAME, CVT, T)                                                                      \
    __attribute__((target("avx2,fma,f16c"))) static inline void NAME##NT(                                       \
        const T *const *h, float *const *pn, const float *x, size_t xs, int off, int step, int nk, float *acc, int fresh, \
        seer_pfw_t *pf, int pq) {                                                                            \
        const T *h0 = h[0], *h1 = h[1], *h2 = h[2];                                                          \
        float *p0 = pn[0], *p1 = pn[1], *p2 = pn[2];                                                         \
        SEER_MICRO_BODY(NT, SEER_LOAD3_WIDEN, CVT);                                                          \
    }
SEER_DEF_MICROW(1, microb3x, SEER_W_BF16)
SEER_DEF_MICROW(2, microb3x, SEER_W_BF16)
SEER_DEF_MICROW(3, microb3x, SEER_W_BF16)
SEER_DEF_MICROW(4, microb3x, SEER_W_BF16)
SEER_DEF_MICROW(1, microh3x, SEER_W_F16)
SEER_DEF_MICROW(2, microh3x, SEER_W_F16)
SEER_DEF_MICROW(3, microh3x, SEER_W_F16)
SEER_DEF_MICROW(4, microh3x, SEER_W_F16)
SEER_DEF_MICROWT(1, microf3x, SEER_W_F32, float)
SEER_DEF_MICROWT(2, microf3x, SEER_W_F32, float)
SEER_DEF_MICROWT(3, microf3x, SEER_W_F32, float)
SEER_DEF_MICROWT(4, microf3x, SEER_W_F32, float)
#ifndef SEER_F32_PANEL
#define SEER_F32_PANEL 1
#endif
#ifndef SEER_BIG_PANEL_MIN
#define SEER_BIG_PANEL_MIN 96 /* tokens from which bf16/f16 rows are widened once per row block */
#endif

/* The tokens' activations packed slice by slice for the batched kernel: [slice][token][SEER_KB].
 * Rows of x lie `in` floats apart, and for widths like 1024 (4 KiB) the same slice of 16 tokens
 * falls into one L1 set, more lines than its 8 ways: packed, a slice of 16 tokens is 16 KiB in a
 * row. One buffer per thread, grown as needed and freed when the thread ends. Measured on the
 * 2-vCPU Zen 3 VM (tests/bench/linear_kernel.c, one thread, 16 tokens, GFLOP/s, three
 * interleaved rounds, SEER_PACK_X=0 against 1): f32 1024x1024 26.0-26.8 -> 32.4-34.3,
 * 2816x1024 29.2-30.4 -> 30.4-32.5, 1024x2816 35.2-36.9 -> 35.8-39.4; bf16 +3-12%. */
static pthread_key_t g_buf_keys[SEER_BUF_N];
static pthread_once_t g_buf_once = PTHREAD_ONCE_INIT;
static _Thread_local float *g_buf[SEER_BUF_N];
static _Thread_local size_t g_buf_cap[SEER_BUF_N];
static void buf_keys_make(void) {
    for (int k = 0; k < SEER_BUF_N; k++) (void)pthread_key_create(&g_buf_keys[k], free);
}
float *seer_k_thread_buffer(int slot, size_t floats) {
    if (floats <= g_buf_cap[slot]) return g_buf[slot];
    pthread_once(&g_buf_once, buf_keys_make);
    float *b = aligned_alloc(64, (floats * sizeof(float) + 63) & ~(size_t)63);
    if (!b) return NULL;
    free(g_buf[slot]);
    g_buf[slot] = b, g_buf_cap[slot] = floats;
    (void)pthread_setspecific(g_buf_keys[slot], b);
    return b;
}

/* The tokens' activations packed for rows_avx2_multi into this thread's buffer: NULL when there
 * is no 8-block, SEER_PACK_X is off or the buffer cannot grow (the kernel then reads x in place,
 * the same bits). Each thread packs its own copy, once per linear call (job->gen), before its
 * first row task: one copy packed by the calling thread and shared was slower at batch 16 (f32,
 * 0.5B model, 2 threads, ten paired rounds: 0.93x, behind in 8 of 10), the other thread reading
 * lines another core had just written. */
static const float *pack_x(const float *x, int ntok, int64_t in, int kb) {
    int64_t n8 = in & ~(int64_t)7;
    size_t nslices = (size_t)((n8 + kb - 1) / kb);
    float *xp = SEER_PACK_X && n8 ? seer_k_thread_buffer(SEER_BUF_PACK, nslices * (size_t)ntok * (size_t)kb) : NULL;
    if (xp)
        for (size_t sl = 0; sl < nslices; sl++) {
            size_t k0 = sl * (size_t)kb, nk = (size_t)n8 - k0 < (size_t)kb ? (size_t)n8 - k0 : (size_t)kb;
            for (int t = 0; t < ntok; t++) memcpy(xp + (sl * (size_t)ntok + (size_t)t) * (size_t)kb, x + (size_t)t * (size_t)in + k0, nk * sizeof(float));
        }
    return xp;
}

/* The streamed kernels' activations (2 to SEER_STREAM_GROUPS_MAX tokens, each row of weights
 * multiplied into the same 8-block of every token in turn): where the tokens' rows lie a multiple
 * of 4 KiB apart, or nearly (hidden size 1024 in f32: 4 KiB exactly), the loads of one 8-block of
 * every token fall on the same L1 set and line offset (contention there the likely cause: no
 * counters in this VM), and a 4-token step read its weights at half the one-token rate. Such rows are copied into this thread's buffer
 * with a stride 64 bytes past the next multiple of 64 (the rows then start a line apart, modulo
 * 4 KiB); other widths are read in place. Returns x's rows and sets *xs to their stride in floats.
 * Once per linear call per thread (job->gen), as pack_x. The same values in the same chains, so
 * the same bits. Measured on the 2-vCPU Zen 4 VM (make bench-kernel-ab, weights from memory, one
 * thread, 41 paired calls in both places; time copied over in place on the 1024-wide shapes):
 * f32 4 tokens 0.73-0.83x, 2 tokens 0.90-0.92x; bf16 4 tokens 0.83-0.91x, 3 tokens 0.82-0.94x,
 * 8 tokens (groups of four) 0.82-0.84x; the 2816-wide shape, not copied, 0.99-1.01x. */
static int rows_alias(size_t stride_bytes, int ntok) {
    int span = ntok < 4 ? ntok : 4; /* the streamed kernels run groups of up to four tokens */
    for (int k = 1; k < span; k++) { /* rows k apart, at least ~4 KiB apart (nearer ones share lines) */
        size_t b = (size_t)k * stride_bytes, d = b & 4095;
        if (b >= 4096 - 64 && (d < 64 || d > 4096 - 64)) return 1;
    }
    return 0;
}
static const float *stream_x(const float *x, int ntok, const seer_weight_t *w, size_t *xs) {
    int64_t in = w->cols;
    *xs = (size_t)in;
    /* two tokens against 16-bit weights, a row at a time, were 1.02-1.07x the time copied: read in
     * place there; with the row pairs (AVX-512VL) copied, bf16 batch 2 of the 0.5B model at 2 threads
     * 77.0 -> 80.9 tok/s (twelve alternating rounds, ahead in 9; the kernel 0.94x / 0.99x) */
    int pairs = SEER_ROWT_PAIRS && seer_k_have_avx512();
    if (ntok < (w->dtype == SEER_F32 || pairs ? 2 : 3) || !rows_alias((size_t)in * sizeof(float), ntok)) return x;
    size_t ps = ((size_t)in + 15) / 16 * 16 + 16;
    while (rows_alias(ps * sizeof(float), ntok)) ps += 16;
    float *xb = seer_k_thread_buffer(SEER_BUF_STREAM, ps * (size_t)ntok);
    if (!xb) return x; /* out of memory: in place, the same bits */
    for (int t = 0; t < ntok; t++) memcpy(xb + (size_t)t * ps, x + (size_t)t * (size_t)in, (size_t)in * sizeof(float));
    *xs = ps;
    return xb;
}

/* The blocked kernels' outputs of one 3-row micro-panel (rows row0.., `left` of them still in the
 * block) for gt tokens from token t: sums[u * 3 + k] from the 8-lane chains (hsum8x8), then the
 * scalar tail of inputs past n8, written to y[t + u][row0 + k] (row stride out). */
static inline void block_out(const seer_weight_t *w, const float *x, float *y, int64_t out, int64_t row0, int left, int t,
                             int gt, const float *sums, int64_t n8) {
    int64_t in = w->cols;
    if (n8 == in && gt == 4 && left >= 3) { /* the common case, without a branch per output */
        float *yb = y + (size_t)t * (size_t)out + (size_t)row0;
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++)
            _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++) yb[(size_t)u * (size_t)out + (size_t)k] = sums[u * 3 + k];
        return;
    }
    for (int u = 0; u < gt; u++)
        for (int k = 0; k < 3 && k < left; k++) {
            int64_t row = row0 + k;
            const float *xr = x + (size_t)(t + u) * (size_t)in;
            float sum = sums[u * 3 + k];
            for (int64_t i = n8; i < in; i++) sum += seer_w_load(w, (size_t)row * (size_t)in + (size_t)i) * xr[i];
            y[(size_t)(t + u) * (size_t)out + (size_t)row] = sum;
        }
}

/* block_out's common case (4 tokens, 3 rows, no tail) from the sums in registers (s0: sums 0-7,
 * s1: 8-15, sum u * 3 + k in lane order): each token's three moved to the low lanes and stored
 * from there (a 64-bit and a 32-bit store), rather than the sums stored as vectors and read back
 * one float at a time, each read waiting on the vector store (block_out: 10.5% of f32 batch-16
 * decode's samples on the Intel AMX VM, the first read its hot spot). The same values, so the
 * same bits. */
__attribute__((target("avx2,fma,f16c"))) static inline void store_sums4x3(float *yb, size_t out, __m256 s0, __m256 s1) {
    __m128 t0 = _mm256_castps256_ps128(s0);
    __m128 t1 = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(s0, _mm256_setr_epi32(3, 4, 5, 0, 0, 0, 0, 0)));
    __m128 t2 = _mm256_castps256_ps128(_mm256_blend_ps(_mm256_permutevar8x32_ps(s0, _mm256_setr_epi32(6, 7, 0, 0, 0, 0, 0, 0)),
                                                       _mm256_permutevar8x32_ps(s1, _mm256_setzero_si256()), 0x4));
    __m128 t3 = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(s1, _mm256_setr_epi32(1, 2, 3, 0, 0, 0, 0, 0)));
    _mm_storel_pi((__m64 *)yb, t0), _mm_store_ss(yb + 2, _mm_movehl_ps(t0, t0));
    _mm_storel_pi((__m64 *)(yb + out), t1), _mm_store_ss(yb + out + 2, _mm_movehl_ps(t1, t1));
    _mm_storel_pi((__m64 *)(yb + 2 * out), t2), _mm_store_ss(yb + 2 * out + 2, _mm_movehl_ps(t2, t2));
    _mm_storel_pi((__m64 *)(yb + 3 * out), t3), _mm_store_ss(yb + 3 * out + 2, _mm_movehl_ps(t3, t3));
}

/* Rows [r0, r1) against ntok >= 2 tokens (packed by pack_x into xp, or NULL), written to y[t][r]
 * (row stride out). */
__attribute__((target("avx2,fma,f16c"))) static void rows_avx2_multi(const seer_weight_t *w, int64_t r0, int64_t r1,
                                                                     const float *x, const float *xp, int ntok, float *y,
                                                                     int64_t out) {
    int64_t in = w->cols, n8 = in & ~(int64_t)7;
    size_t es = w->dtype == SEER_F32 ? 4 : 2;
    const int kb = slice_len(w->dtype, ntok); /* input elements per slice */
    const char *pb = (const char *)w->data;
    _Alignas(32) float panel[SEER_RB * SEER_KB]; /* SEER_KB >= kb */
    _Alignas(32) float acc[(SEER_RB / 3) * (SEER_TB / 4) * 2 * 12 * 8]; /* [micro-panel][token group][chain][t * 3 + k][8] */
    /* Many passes of SEER_TB tokens over bf16/f16 weights (a batch of short prompts' prefill):
     * the block's rows widened once, slice by slice ([slice][row][kb]), into a per-thread
     * panel that every pass reads, rather than by each pass's first token group. The same values
     * in the same chains, so the same bits. make bench-kernel-ab (one thread, paired calls, both
     * places, geometric mean over the three 0.5B shapes), time with / without: bf16 17 tokens
     * 1.04, 32 1.09, 64 0.99, 96 0.97, 128 0.96, 256 0.96, 480 0.94; f32 (a copy, not a widening)
     * 1.24 at 17, 1.08 at 64, 0.99 at 480: not for f32. NULL: the panel per pass, as below. */
    float *big = ntok >= SEER_BIG_PANEL_MIN && w->dtype != SEER_F32 && n8
                     ? seer_k_thread_buffer(SEER_BUF_PANEL, (size_t)((n8 + kb - 1) / kb) * SEER_RB * kb)
                     : NULL;
    for (int64_t r = r0; r < r1; r += SEER_RB) {
        int nr = r1 - r >= SEER_RB ? SEER_RB : (int)(r1 - r), nm = (nr + 2) / 3;
        int64_t pf_r = r + SEER_RB, pf_n = r1 - pf_r < SEER_RB ? r1 - pf_r : SEER_RB; /* the next block */
        if (big)
            for (int k = 0; k < nm * 3; k++) {
                int kk = k < nr ? k : nr - 1;
                for (int64_t k0 = 0; k0 < n8; k0 += kb) {
                    int nk = n8 - k0 < kb ? (int)(n8 - k0) : kb;
                    float *dst = big + ((size_t)(k0 / kb) * SEER_RB + (size_t)k) * kb;
                    size_t at = (size_t)(r + kk) * (size_t)in + (size_t)k0;
                    seer_k_widen16(dst, (const uint16_t *)w->data + at, nk, w->dtype == SEER_BF16);
                }
            }
        for (int t0 = 0; t0 < ntok; t0 += SEER_TB) {
            int nt = ntok - t0 < SEER_TB ? ntok - t0 : SEER_TB, ng = (nt + 3) / 4;
            const float *xt = x + (size_t)t0 * (size_t)in;
            for (int64_t k0 = 0; k0 < n8; k0 += kb) {
                int nk = n8 - k0 < kb ? (int)(n8 - k0) : kb;
                /* the next slice (of this block, or the first of the next block), a share of its
                 * lines issued by each micro-kernel call rather than all at once: batch-16 decode
                 * of the 0.5B model, 2 threads, three interleaved rounds, f32 50.2-53.3 ->
                 * 52.5-64.0 tok/s, bf16 50.3-56.9 -> 56.9-58.9 (all at once against spread) */
                int64_t pr = r, pn = nr, pk = k0 + kb;
                if (pk >= n8) pr = pf_r, pn = pf_n, pk = 0;
                int pbytes = (int)((n8 - pk < kb ? n8 - pk : kb) * (int64_t)es);
                int plines = (pbytes + 63) / 64, ptotal = SEER_BLOCK_PF && t0 == 0 && pn > 0 ? (int)pn * plines : 0;
                /* walked line by line (seer_pfw_t), without a division per line: the address as
                 * pr + pdone / plines rows and pdone % plines lines took about 15% of the kernel's
                 * samples (perf, make bench-kernel at 16 tokens). Each micro-kernel call issues an
                 * equal share from inside its loop (one division per slice for the share). */
                seer_pfw_t pfw = {ptotal ? pb + ((size_t)pr * (size_t)in + (size_t)pk) * es : pb, 0, plines,
                                  (ptrdiff_t)((size_t)in * es) - (ptrdiff_t)plines * 64, nt <= SEER_PF_FAR_MAX};
                int pcalls = ng * nm * (w->dtype != SEER_F32 ? 2 : 1), pshare = (ptotal + pcalls - 1) / pcalls, pleft = ptotal;
                const float *rows[SEER_RB];
                float *prow[SEER_RB];
                const uint16_t *hrow[SEER_RB];
                const float *frow[SEER_RB];
                int step = w->dtype != SEER_F32 ? 16 : 8; /* two chains or one */
                int widen = !big && (w->dtype != SEER_F32 || (SEER_F32_PANEL && ntok > 4));
                for (int k = 0; k < nm * 3; k++) { /* a short block repeats its last row */
                    int kk = k < nr ? k : nr - 1;
                    size_t at = (size_t)(r + kk) * (size_t)in + (size_t)k0;
                    if (big) {
                        rows[k] = big + ((size_t)(k0 / kb) * SEER_RB + (size_t)k) * kb;
                    } else if (widen) {
                        prow[k] = panel + (size_t)kk * kb;
                        hrow[k] = (const uint16_t *)w->data + at;
                        frow[k] = w->dtype == SEER_F32 ? (const float *)w->data + at : NULL;
                        rows[k] = prow[k];
                    } else {
                        rows[k] = (const float *)w->data + at;
                    }
                }
                for (int g = 0; g < ng; g++) {
                    int gt = nt - g * 4 < 4 ? nt - g * 4 : 4;
                    const float *xg = xp ? xp + ((size_t)(k0 / kb) * (size_t)ntok + (size_t)(t0 + g * 4)) * kb
                                         : xt + (size_t)g * 4 * (size_t)in + (size_t)k0;
                    size_t xs = xp ? (size_t)kb : (size_t)in;
                    for (int m = 0; m < nm; m++) {
                        float *am = acc + ((size_t)m * (size_t)ng + (size_t)g) * 192;
                        const float **rw = rows + m * 3;
                        for (int off = 0; off < step; off += 8) { /* chain a0, then a1 */
                            float *as = am + off * 12;
                            int pq = pleft < pshare ? pleft : pshare;
                            pleft -= pq;
                            if (widen && g == 0) { /* widens this slice into the panel as it goes */
                                const uint16_t *const *hw = hrow + m * 3;
                                float *const *pw = prow + m * 3;
                                if (w->dtype == SEER_F32) switch (gt) {
                                    case 4: microf3x4(frow + m * 3, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    case 3: microf3x3(frow + m * 3, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    case 2: microf3x2(frow + m * 3, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    default: microf3x1(frow + m * 3, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    }
                                else if (w->dtype == SEER_BF16) switch (gt) {
                                    case 4: microb3x4(hw, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    case 3: microb3x3(hw, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    case 2: microb3x2(hw, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    default: microb3x1(hw, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    }
                                else switch (gt) {
                                    case 4: microh3x4(hw, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    case 3: microh3x3(hw, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    case 2: microh3x2(hw, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    default: microh3x1(hw, pw, xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                                    }
                                continue;
                            }
                            switch (gt) {
                            case 4: micro3x4(rw[0], rw[1], rw[2], xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                            case 3: micro3x3(rw[0], rw[1], rw[2], xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                            case 2: micro3x2(rw[0], rw[1], rw[2], xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                            default: micro3x1(rw[0], rw[1], rw[2], xg, xs, off, step, nk, as, k0 == 0, &pfw, pq); break;
                            }
                        }
                    }
                }
            }
            for (int m = 0; m < nm; m++)
                for (int g = 0; g < ng; g++) {
                    int gt = nt - g * 4 < 4 ? nt - g * 4 : 4;
                    const float *am = acc + ((size_t)m * (size_t)ng + (size_t)g) * 192;
                    __m256 v[16];
                    _Alignas(32) float sums[16];
                    const __m256 z = _mm256_setzero_ps();
                    if (!n8) { /* no 8-block: nothing was accumulated */
                        for (int j = 0; j < 12; j++) v[j] = z;
                    } else if (w->dtype == SEER_F32) { /* a0 + a1, a1 = 0 for f32 (one chain) */
                        _Pragma("GCC unroll 12") for (int j = 0; j < 12; j++) v[j] = _mm256_add_ps(_mm256_load_ps(am + j * 8), z);
                    } else {
                        _Pragma("GCC unroll 12") for (int j = 0; j < 12; j++) v[j] = _mm256_add_ps(_mm256_load_ps(am + j * 8), _mm256_load_ps(am + 96 + j * 8));
                    }
                    v[12] = v[13] = v[14] = v[15] = z;
                    if (gt == 4 && nr - m * 3 >= 3 && n8 == in) {
                        store_sums4x3(y + (size_t)(t0 + g * 4) * (size_t)out + (size_t)(r + m * 3), (size_t)out, hsum8x8_v(v),
                                      hsum8x8_v(v + 8));
                        continue;
                    }
                    hsum8x8(v, sums);
                    hsum8x8(v + 8, sums + 8);
                    block_out(w, x, y, out, r + m * 3, nr - m * 3, t0 + g * 4, gt, sums, n8);
                }
        }
    }
}
#ifndef SEER_ZMM_PAIRS
/* Two tokens to a 512-bit vector on a CPU with AVX-512 that runs the AVX2 kernels (AMD:
 * seer_k_linear_simd): f32 weights from SEER_ZMM_F32_MIN tokens (rows_zmm_whole) and bf16 from
 * SEER_ZMM_BF16_MIN (rows_zmm_pairs), up to SEER_ZMM_MAX, rather than rows_avx2_multi; 0: the
 * latter. Each weight 8-block is loaded once, into both halves of a vector, and multiplied into
 * every pair of tokens: no panel copy, no second read of the weights, half the instructions per
 * FMA. Each half is the 8-lane chain rows_avx2_multi keeps for that row and token, over the same
 * elements in the same order, so every output has the same bits. */
#define SEER_ZMM_PAIRS 1
#endif
/* rows_zmm_pairs (bf16) takes each block of SEER_ZRB rows in slices of inputs, the slice's 8-blocks
 * of each 3-row micro-panel in passes of up to 8 pairs. 6-row blocks: width-1024 rows lie 4 KiB
 * apart, so 12 rows put 12 lines in each L1 set a slice touches (8 ways) and the next slice's
 * prefetched lines evicted each other before use (f32 batch 16, 2 threads, 2026-12-01: 12-row
 * blocks level with rows_avx2_multi, 6-row 133.2 -> 142.5 tok/s, ahead in 20 of 20 rounds). Each
 * pair's activations are held in a register (an empty asm): GCC otherwise folded the load into
 * each of the three FMAs, three 512-bit loads where one does (Zen 4 takes one a cycle): 0.95x.
 *
 * bf16 weights from 13 tokens (where rows_avx2_multi took them; 5-12 stream in groups): each
 * 8-block widened exactly to f32 in both halves of a vector, bf16's two chains (a0 on even
 * 8-blocks, a1 on odd) each in its own call over the slice, so the 24 accumulators of a call are
 * one chain's, and the two reduced as rows_avx2_multi reduces them. Slices of 256 inputs (512
 * bytes of a row). Zen 4 VM, bf16 decode, rows_avx2_multi against this kernel, binaries
 * alternating with the order swapped each round (tests/bench/batch_seer.lua MODEL T 32 B,
 * 2026-12-01), tok/s: 2 threads batch 16 112.4 -> 137.8 (ahead in 6 of 6; with 128-input slices
 * level), another four rounds 125.1 -> 141.6 (4 of 4), batch 13 level (114.7 against 112.7); one
 * thread batch 16 74.0 -> 85.1 (3 of 3). At 10 and 12 tokens it was behind the grouped stream
 * (128.6 against 131, 135.5 against 146.9), hence 13. One prompt's bf16 forward at 2 threads,
 * three rounds: 16 tokens 77-152 -> 146-153, 40 125-147 -> 144-176, 47 121-143 -> 140-166
 * (128-input slices past 16 tokens: 120-135 at 47). A prefetch of the slice two on into L2 (as
 * f32's sliced kernel had) was level at two slices on and behind at four. On a 2-vCPU Emerald
 * Rapids VM with AMX hidden (2026-12-02), where bf16 batch 16 runs here at 39-45% of the FMA
 * bound: slices of 512 or 1024 inputs level (make bench-kernel-ab TOKENS=16 THREADS=2 DT=bf16
 * COLD=1: 1.025x, 1.031x the time), 16 tokens through the grouped stream instead 0.6x the
 * tok/s (tests/bench/batch_seer.lua MODEL 2 17 16, three rounds). Tried there later the same
 * day and not kept (make bench-kernel-ab TOKENS=16 DT=bf16, paired calls): a whole-row kernel as
 * f32's rows_zmm_whole, each 3-row micro-panel in chunks of 32 8-blocks, passes of 4 token pairs
 * with both chains in one call (24 accumulators), the micro-panel two on prefetched into L2:
 * 1.106x the time at one thread with COLD=1, 1.114x without, 1.025x at two threads (half the
 * FMAs per widened weight vector); the prefetch two slices on into L2 instead of one into L1
 * 0.987x, four 1.023x; 3-row blocks 1.034x, with the prefetch 4 or 8 slices on into L2 0.992x,
 * 1.087x; the next two slices into L1 0.964x, three 1.052x (within this VM's noise); no prefetch
 * 1.189x. */
#ifndef SEER_ZKB_BF16
#define SEER_ZKB_BF16 256 /* rows_zmm_pairs: input elements per slice, to 16 tokens */
#endif
#ifndef SEER_ZKB_MANY_BF16
#define SEER_ZKB_MANY_BF16 256 /* and past 16 tokens */
#endif
#ifndef SEER_ZMM_MAX
#define SEER_ZMM_MAX 96 /* tokens at most (an even number; more: rows_avx2_multi, or runs: SEER_ZMM_SPLIT) */
#endif
/* Past SEER_ZMM_MAX tokens on Intel CPUs with AVX-512 (f32 weights; bf16 too where no AMX takes
 * them), the tokens go in runs of at most SEER_ZMM_MAX through the pair kernels, each run a pass
 * over the weights, rather than rows_avx2_multi in one pass: every token's chains and reduction
 * are the same in both kernels, so the same bits. On the 2-vCPU AMX Xeon VM (2026-12-02, one
 * thread, COLD=1 build/bench/linear_kernel N, the 0.5B shapes) the pair kernels ran f32 at
 * 113-141 GFLOP/s from 16 to 96 tokens and rows_avx2_multi 71-83 from 98 to 480; bf16 with AMX
 * off (SEER_NO_AMX=1) 72-84 on rows_avx2_multi at 98 and 192 tokens, 107-123 in runs. Not measured on Zen 4 (where sgemm
 * takes a prompt from 48 tokens and only a batch's shared pass runs past it), so not there. */
#ifndef SEER_ZMM_SPLIT
#define SEER_ZMM_SPLIT 1
#endif
#ifndef SEER_ZPF_AHEAD
#define SEER_ZPF_AHEAD 1 /* rows_zmm_pairs: the slice prefetched into L1, this many slices on */
#endif
#ifndef SEER_ZRB
#define SEER_ZRB 6 /* rows_zmm_pairs: rows per block (a multiple of 3, at most SEER_RB) */
#endif
/* f32 weights: rows_zmm_whole takes each micro-panel of 3 rows whole, in one micro-kernel call
 * per pass of up to 8 token pairs, the accumulators in registers from a row's first input to its
 * last and the activations streamed from L2 (16 tokens of a 1024-wide row are 64 KiB), where
 * rows_zmm_pairs took slices of 128 inputs and stored and loaded its 24 accumulators around each
 * (the micro-kernel alone, its data in L1, ran at 70% of the FMA peak at 16 8-blocks a call and at
 * 86% at 128: a /tmp program, 2026-12-02). The micro-panel SEER_ZWHOLE_L2 on is prefetched into
 * L2 as the rows are read. Past 16 tokens (passes of pairs) the rows go in chunks of
 * SEER_ZWHOLE_KC 8-blocks, every pass over a chunk before the next, so the later passes find it
 * in L1. Zen 4 VM, 2026-12-02, the sliced kernel (and rows_avx2_multi at 5-8 tokens) against
 * this: the kernel alone (make bench-kernel-ab DT=f32 COLD=1) 16 tokens 0.82x the time at one
 * thread, 0.86x at two, 8 tokens 1.03x; f32 decode of the 0.5B model, binaries alternating with
 * the order swapped each round (tests/bench/batch_seer.lua MODEL T 32 B), tok/s: 2 threads batch
 * 16 127.7 -> 157.2 (ahead in 6 of 6), 12 119.7 -> 128.6 (2 of 3), 10 level (109.2 / 109.3),
 * 8 82.6 -> 99.2, 6 58.7 -> 75.4, 5 47.3 -> 64.6 (3 of 3 each); one thread batch 16 73.6 -> 91.5
 * (4 of 4). At 2-4 tokens it was behind the streamed kernel (batch 4 65.1 against 75.2), which
 * keeps them. The L2 prefetch: none 109.8 against 150.6 tok/s (batch 16, 2 threads, 4 rounds);
 * one micro-panel on 133.9 against 151.4 for a walk over the next micro-panel's lines one row
 * after another; two or three on level with that walk (158.5 / 156.1 against 159.8, 6 rounds),
 * four 140.0; the next 512 bytes of the rows into L1 besides, level (163.0). One prompt's forward
 * (tests/bench/prefill_lengths.lua MODEL 2 N..., 2 threads, a noisy phase), means of 3-4 rounds:
 * whole rows in every pass 119 / 132 / 146 / 158 / 168 tok/s at 17 / 20 / 24 / 32 / 47 tokens
 * against the sliced kernel's 136 / 151 / 152 / 154 / 148, so chunks: 16 8-blocks 139 / 147 /
 * 149 / 158 / 153, 32 123 / 146 / 154 / 172 / 171, 64 112 / 121 / 130 / 158 / 168; 32 again,
 * four more rounds: 141 / 152 / 162 at 17 / 20 / 24 against 130 / 158 / 158, 40 level. */
#ifndef SEER_ZWHOLE_L2
#define SEER_ZWHOLE_L2 2 /* rows_zmm_whole: the micro-panel this many on prefetched into L2 (0: none) */
#endif
#ifndef SEER_ZWHOLE_KC
#define SEER_ZWHOLE_KC 32 /* rows_zmm_whole past 16 tokens: 8-blocks per chunk (0: whole rows) */
#endif
#ifndef SEER_ZMM_F32_MIN
#define SEER_ZMM_F32_MIN 5 /* f32 weights from this many tokens (more than SEER_STREAM_MAX) */
#endif
#ifndef SEER_ZMM_BF16_MIN
#define SEER_ZMM_BF16_MIN 13 /* bf16 weights from this many tokens (where rows_avx2_multi took them) */
#endif
_Static_assert(SEER_ZRB % 3 == 0 && SEER_ZRB <= SEER_RB, "SEER_ZRB: whole 3-row micro-panels, at most SEER_RB");
_Static_assert(SEER_ZKB_BF16 % 16 == 0 && SEER_ZKB_MANY_BF16 % 16 == 0,
               "SEER_ZKB_BF16, SEER_ZKB_MANY_BF16: whole pairs of 8-blocks (bf16's two chains alternate)");
_Static_assert(SEER_ZMM_MAX % 2 == 0 && SEER_ZMM_MAX >= 16, "SEER_ZMM_MAX: an even number, at least 16");
_Static_assert(SEER_ZPF_AHEAD >= 1, "SEER_ZPF_AHEAD: at least the next slice");
_Static_assert(SEER_ZMM_F32_MIN > SEER_STREAM_MAX && SEER_ZMM_BF16_MIN > SEER_STREAM_MAX,
               "SEER_ZMM_F32_MIN, SEER_ZMM_BF16_MIN: past the streamed kernel's tokens (at least 3 pairs)");
static int zmm_pairs(const seer_weight_t *w, int ntok) {
    return SEER_ZMM_PAIRS && ntok <= SEER_ZMM_MAX && w->cols >= 8 &&
           ((w->dtype == SEER_F32 && ntok >= SEER_ZMM_F32_MIN) || (w->dtype == SEER_BF16 && ntok >= SEER_ZMM_BF16_MIN)) &&
           seer_k_have_avx512();
}
/* The activations for the pair kernels: [8-block b][token t][8], so that tokens 2p and 2p+1 of a
 * block are one 512-bit vector (a missing last token zeros); NULL when the buffer cannot grow. */
static const float *pack_x_pairs(const float *x, int ntok, int64_t in) {
    int64_t nb = in / 8;
    int np = (ntok + 1) / 2;
    float *xp = seer_k_thread_buffer(SEER_BUF_PACK, (size_t)nb * (size_t)np * 16);
    if (!xp) return NULL;
    for (int64_t b = 0; b < nb; b++) {
        float *d = xp + (size_t)b * (size_t)np * 16;
        for (int t = 0; t < ntok; t++) memcpy(d + (size_t)t * 8, x + (size_t)t * (size_t)in + (size_t)b * 8, 8 * sizeof(float));
        if (ntok & 1) memset(d + (size_t)ntok * 8, 0, 8 * sizeof(float));
    }
    return xp;
}
/* An 8-block of weights at p as f32 in both halves of a 512-bit vector: f32 read as it is, bf16
 * widened exactly (the bits moved up 16), as rows_avx2_multi's panel holds them */
#define SEER_ZW_F32(p) _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps((const float *)(p)))))
/* (bf16: as SEER_BF16X8, the 16 bytes in all four 128-bit lanes and one byte shuffle, where
 * zero-extending to 512 bits and shifting took two ALU uops; rows_zmm_pairs at 16 tokens, make
 * bench-kernel-ab DT=bf16, 2-vCPU Emerald Rapids VM, 2026-12-02: 0.954x the time at one thread,
 * 0.938x at two; with COLD=1 HUGE=1, 21 pairs, 0.966x and 0.981x) */
#define SEER_ZW_BF16(p)                                                                                          \
    _mm512_castsi512_ps(_mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(p))),      \
                                            _mm512_set_epi32(0x0f0e8080, 0x0d0c8080, 0x0b0a8080, 0x09088080, \
                                                             0x07068080, 0x05048080, 0x03028080, 0x01008080, \
                                                             0x0f0e8080, 0x0d0c8080, 0x0b0a8080, 0x09088080, \
                                                             0x07068080, 0x05048080, 0x03028080, 0x01008080)))
/* The FMAs of one 8-block of 3 rows (v0..v2) into NP token pairs' accumulators a[p][0..2], the
 * pairs' activations at xs */
#define SEER_ZFMA(NP, xs, v0, v1, v2)                                                                            \
    _Pragma("GCC unroll 8") for (int p = 0; p < NP; p++) {                                                  \
        __m512 xv = _mm512_load_ps((xs) + p * 16);                                                           \
        /* in a register: GCC otherwise folds the load into each of the three FMAs, three 512-bit   \
         * loads where one will do (Zen 4 takes one a cycle) */                                     \
        __asm__("" : "+v"(xv));                                                                              \
        a[p][0] = _mm512_fmadd_ps(v0, xv, a[p][0]);                                                          \
        a[p][1] = _mm512_fmadd_ps(v1, xv, a[p][1]);                                                          \
        a[p][2] = _mm512_fmadd_ps(v2, xv, a[p][2]);                                                          \
    }
/* bf16: 3 rows x NP token pairs over the 8-blocks off8, off8 + bstep, ... (nsteps of them) of a
 * slice, one of the two chains (every other 8-block), the accumulators in from acc (zero for the
 * first slice, `fresh`) and back out, a share `pq` of the walk over the next slice's lines
 * prefetched as it goes (24 accumulators at NP 8). */
#define SEER_DEF_ZMICRO(NP)                                                                                      \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) static inline void zmicrob3x##NP(                 \
        const uint16_t *w0, const uint16_t *w1, const uint16_t *w2, const float *xb, size_t xstep, int off8, \
        int bstep, int nsteps, float *acc, int fresh, seer_pfw_t *pf, int pq) {                              \
        __m512 a[NP][3];                                                                                     \
        _Pragma("GCC unroll 8") for (int p = 0; p < NP; p++)                                                \
            _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++)                                             \
                a[p][k] = fresh ? _mm512_setzero_ps() : _mm512_load_ps(acc + (p * 3 + k) * 16);             \
        const char *pfp = pf->p;                                                                             \
        int pfl = pf->line;                                                                                  \
        for (int s = 0, b = off8; s < nsteps; s++, b += bstep) {                                             \
            if (pq > 0) { SEER_PF_LINE(pfp, pfl, pf); pq--; }                                                \
            __m512 v0 = SEER_ZW_BF16(w0 + (size_t)b * 8);                                                    \
            __m512 v1 = SEER_ZW_BF16(w1 + (size_t)b * 8);                                                    \
            __m512 v2 = SEER_ZW_BF16(w2 + (size_t)b * 8);                                                    \
            SEER_ZFMA(NP, xb + (size_t)b * xstep, v0, v1, v2)                                                \
        }                                                                                                    \
        for (; pq > 0; pq--) SEER_PF_LINE(pfp, pfl, pf);                                                     \
        pf->p = pfp, pf->line = pfl;                                                                         \
        _Pragma("GCC unroll 8") for (int p = 0; p < NP; p++)                                                \
            _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++) _mm512_store_ps(acc + (p * 3 + k) * 16, a[p][k]); \
    }
/* f32: 3 rows x NP token pairs over nsteps 8-blocks from w0..w2 (whole rows, or a chunk of them),
 * in order (the one f32 chain), the accumulators zeroed first (`fresh`) or loaded from acc, and
 * stored there at the end; with `ahead` (bytes, 0: none) the lines that far on in each row
 * prefetched into L2 as the rows are read, one line of each per two 8-blocks, so the micro-panel
 * SEER_ZWHOLE_L2 on arrives in the order it will be read. */
#define SEER_DEF_ZWHOLE(NP)                                                                                      \
    __attribute__((target("avx512f,avx512vl,avx2,fma"))) static inline void zwhole3x##NP(                  \
        const float *w0, const float *w1, const float *w2, const float *xb, size_t xstep, int nsteps,       \
        float *acc, int fresh, size_t ahead) {                                                               \
        __m512 a[NP][3];                                                                                     \
        _Pragma("GCC unroll 8") for (int p = 0; p < NP; p++)                                                \
            _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++)                                             \
                a[p][k] = fresh ? _mm512_setzero_ps() : _mm512_load_ps(acc + (p * 3 + k) * 16);             \
        for (int b = 0; b < nsteps; b++) {                                                                   \
            if (ahead && !(b & 1)) {                                                                         \
                _mm_prefetch((const char *)(w0 + (size_t)b * 8) + ahead, _MM_HINT_T1);                       \
                _mm_prefetch((const char *)(w1 + (size_t)b * 8) + ahead, _MM_HINT_T1);                       \
                _mm_prefetch((const char *)(w2 + (size_t)b * 8) + ahead, _MM_HINT_T1);                       \
            }                                                                                                \
            __m512 v0 = SEER_ZW_F32(w0 + (size_t)b * 8);                                                     \
            __m512 v1 = SEER_ZW_F32(w1 + (size_t)b * 8);                                                     \
            __m512 v2 = SEER_ZW_F32(w2 + (size_t)b * 8);                                                     \
            SEER_ZFMA(NP, xb + (size_t)b * xstep, v0, v1, v2)                                                \
        }                                                                                                    \
        _Pragma("GCC unroll 8") for (int p = 0; p < NP; p++)                                                \
            _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++) _mm512_store_ps(acc + (p * 3 + k) * 16, a[p][k]); \
    }
SEER_DEF_ZWHOLE(3)
SEER_DEF_ZMICRO(4)
SEER_DEF_ZWHOLE(4)
SEER_DEF_ZMICRO(5)
SEER_DEF_ZWHOLE(5)
SEER_DEF_ZMICRO(6)
SEER_DEF_ZWHOLE(6)
SEER_DEF_ZMICRO(7)
SEER_DEF_ZWHOLE(7)
SEER_DEF_ZMICRO(8)
SEER_DEF_ZWHOLE(8)
/* The outputs of one 3-row micro-panel (rows row0.., `left` of them still in the range) from its
 * accumulators a0 (and bf16's second chain a1; NULL for f32), [pair][row][16]: each (token, row)
 * chain reduced as rows_avx2_multi reduces it (a0 + a1 for bf16, a0 + 0 for f32, then hsum8x8),
 * so the same bits. */
/* Token group g's chains (gt tokens from token 4g, 3 rows) from the accumulators, a0 + a1 (a1 = 0
 * for f32) into v[u * 3 + k]; the entries past them zero (only those: zeroing all 16 compiled to
 * a 512-byte rep stos per group, ~5% of the kernel's samples, perf, f32 batch 16; without it,
 * batch-16 decode on 2 threads, 4 alternating rounds each: f32 124.3 -> 127.5 tok/s, bf16 154.6
 * -> 160.8, ahead in 4 of 4 each). Inlined with gt = 4, v stays in registers. */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline void zmm_group(const float *a0, const float *a1, int g,
                                                                                     int gt, __m256 *v) {
    const __m256 z = _mm256_setzero_ps();
    for (int j = gt * 3; j < 16; j++) v[j] = z;
    _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {
        if (u >= gt) break;
        int t = g * 4 + u;
        _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++) {
            size_t at = ((size_t)(t / 2) * 3 + (size_t)k) * 16 + (size_t)(t & 1) * 8;
            v[u * 3 + k] = _mm256_add_ps(_mm256_load_ps(a0 + at), a1 ? _mm256_load_ps(a1 + at) : z);
        }
    }
}
#ifndef SEER_ZOUT512
#define SEER_ZOUT512 1
#endif
/* The common case of zmm_out on 512-bit registers: token group g (4 tokens: pairs 2g and 2g + 1)
 * x 3 rows, each (token, row) chain a0 + a1 (a1 NULL: + 0, as rows_avx2_multi), then reduced by
 * hsum8x8_v's tree (lane j + lane j + 4; then (0 + 2) + (1 + 3)) with two chains to a vector
 * where hsum8x8_v has one, so the same bits; each token's 3 outputs stored with one masked store.
 * Against the 256-bit loads, adds and two hsum8x8_v (~44 uops a group where that took ~90; make
 * bench-kernel-ab A_REF=d8a6728 TOKENS=16, 21 pairs, 2-vCPU Emerald Rapids VM, 2026-12-02): one
 * thread 0.984x the time with COLD=1 HUGE=1, 0.982x without, 48 tokens 0.992x; two threads with
 * COLD=1 HUGE=1 0.987x (geometric means over f32 and bf16; small, the same sign in all four).
 * SEER_ZOUT512=0: the 256-bit path. */
__attribute__((target("avx512f,avx512vl,avx2,fma,f16c"), always_inline)) static inline void zmm_out4x3_512(const float *a0,
                                                                                                      const float *a1, int g,
                                                                                                      float *yb, size_t out) {
    const __m512 z = _mm512_setzero_ps();
    __m512 v[6]; /* [pair][row]: tokens 4g + 2q (low half) and 4g + 2q + 1 (high half) */
    _Pragma("GCC unroll 6") for (int i = 0; i < 6; i++) {
        size_t at = ((size_t)(g * 2 + i / 3) * 3 + (size_t)(i % 3)) * 16;
        v[i] = _mm512_add_ps(_mm512_load_ps(a0 + at), a1 ? _mm512_load_ps(a1 + at) : z);
    }
    /* lane j + lane j + 4 of each chain: per 128-bit lane, [v[2m] low, v[2m] high, v[2m+1] low,
     * v[2m+1] high] */
    __m512 s0 = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x88), _mm512_shuffle_f32x4(v[0], v[1], 0xdd));
    __m512 s1 = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x88), _mm512_shuffle_f32x4(v[2], v[3], 0xdd));
    __m512 s2 = _mm512_add_ps(_mm512_shuffle_f32x4(v[4], v[5], 0x88), _mm512_shuffle_f32x4(v[4], v[5], 0xdd));
    /* (0 + 2), (1 + 3) */
    __m512 t0 = _mm512_add_ps(_mm512_shuffle_ps(s0, s1, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(s0, s1, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 t1 = _mm512_add_ps(_mm512_shuffle_ps(s2, z, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(s2, z, _MM_SHUFFLE(3, 2, 3, 2)));
    /* their sum: 128-bit lane m holds [s0's m-th, s1's m-th, s2's m-th, 0], where the m-th of s_i
     * is chain (token u, row k) with s0: (0,0) (1,0) (0,1) (1,1); s1: (0,2) (1,2) (2,0) (3,0);
     * s2: (2,1) (3,1) (2,2) (3,2) */
    __m512 r = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    /* to token u in 128-bit lane u: rows 0, 1, 2 */
    r = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 8, 1, 3, 4, 12, 5, 7, 9, 2, 10, 11, 13, 6, 14, 15), r);
    _mm_mask_storeu_ps(yb, 0x7, _mm512_castps512_ps128(r));
    _mm_mask_storeu_ps(yb + out, 0x7, _mm512_extractf32x4_ps(r, 1));
    _mm_mask_storeu_ps(yb + 2 * out, 0x7, _mm512_extractf32x4_ps(r, 2));
    _mm_mask_storeu_ps(yb + 3 * out, 0x7, _mm512_extractf32x4_ps(r, 3));
}
__attribute__((target("avx512f,avx512vl,avx2,fma,f16c"))) static inline void zmm_out(const seer_weight_t *w, const float *x, float *y,
                                                                    int64_t out, int64_t row0, int left, int ntok,
                                                                    const float *a0, const float *a1, int64_t n8) {
    for (int g = 0; g < (ntok + 3) / 4; g++) {
        int gt = ntok - g * 4 < 4 ? ntok - g * 4 : 4;
        __m256 v[16];
        if (gt == 4 && left >= 3 && n8 == w->cols) { /* the common case, from registers */
            if (SEER_ZOUT512) {
                zmm_out4x3_512(a0, a1, g, y + (size_t)(g * 4) * (size_t)out + (size_t)row0, (size_t)out);
                continue;
            }
            zmm_group(a0, a1, g, 4, v);
            store_sums4x3(y + (size_t)(g * 4) * (size_t)out + (size_t)row0, (size_t)out, hsum8x8_v(v), hsum8x8_v(v + 8));
            continue;
        }
        _Alignas(32) float sums[16];
        zmm_group(a0, a1, g, gt, v);
        hsum8x8(v, sums);
        hsum8x8(v + 8, sums + 8);
        block_out(w, x, y, out, row0, left, g * 4, gt, sums, n8);
    }
}
/* Rows [r0, r1) of f32 weights against SEER_ZMM_F32_MIN to SEER_ZMM_MAX tokens (x, packed by
 * pack_x_pairs into xz), written to y[t][r] (row stride out): each micro-panel of 3 rows (a short
 * last one repeats its last row) whole, in passes of at most 8 token pairs (one to 16 tokens,
 * 17-32 two, 33-48 three, of balanced sizes; more than one: chunk by chunk, see SEER_ZWHOLE_KC). */
__attribute__((target("avx512f,avx512vl,avx2,fma,f16c"))) static void rows_zmm_whole(const seer_weight_t *w, int64_t r0,
                                                                                    int64_t r1, const float *x,
                                                                                    const float *xz, int ntok, float *y,
                                                                                    int64_t out) {
    int64_t in = w->cols, n8 = in & ~(int64_t)7;
    int np = (ntok + 1) / 2, npass = (np + 7) / 8, pbase = np / npass, pextra = np % npass, nb = (int)(n8 / 8);
    int kc = npass > 1 && SEER_ZWHOLE_KC > 0 ? SEER_ZWHOLE_KC : nb; /* 8-blocks per call */
    const size_t xstep = (size_t)np * 16; /* floats per 8-block of xz */
    const float *pb = (const float *)w->data;
    _Alignas(64) float acc[SEER_ZMM_MAX / 2 * 3 * 16]; /* [pair][row][16] */
    for (int64_t r = r0; r < r1; r += 3) {
        int nr = r1 - r >= 3 ? 3 : (int)(r1 - r);
        const float *wr[3];
        for (int k = 0; k < 3; k++) wr[k] = pb + (size_t)(r + (k < nr ? k : nr - 1)) * (size_t)in;
        /* the micro-panel SEER_ZWHOLE_L2 on, when it is whole and in the range (rows past r1 are
         * another task's), by the first pass */
        size_t ahead = SEER_ZWHOLE_L2 > 0 && r + 3 * (int64_t)SEER_ZWHOLE_L2 + 3 <= r1
                           ? (size_t)SEER_ZWHOLE_L2 * 3 * (size_t)in * sizeof(float)
                           : 0;
        for (int k0 = 0; k0 < nb; k0 += kc) {
            int steps = nb - k0 < kc ? nb - k0 : kc;
            const float *w0 = wr[0] + (size_t)k0 * 8, *w1 = wr[1] + (size_t)k0 * 8, *w2 = wr[2] + (size_t)k0 * 8;
            for (int q = 0, p0 = 0; q < npass; q++) {
                int pp = pbase + (q < pextra);
                const float *xq = xz + (size_t)k0 * xstep + (size_t)p0 * 16;
                float *aq = acc + (size_t)p0 * 3 * 16;
                size_t aa = q == 0 ? ahead : 0;
                switch (pp) {
                case 3: zwhole3x3(w0, w1, w2, xq, xstep, steps, aq, k0 == 0, aa); break;
                case 4: zwhole3x4(w0, w1, w2, xq, xstep, steps, aq, k0 == 0, aa); break;
                case 5: zwhole3x5(w0, w1, w2, xq, xstep, steps, aq, k0 == 0, aa); break;
                case 6: zwhole3x6(w0, w1, w2, xq, xstep, steps, aq, k0 == 0, aa); break;
                case 7: zwhole3x7(w0, w1, w2, xq, xstep, steps, aq, k0 == 0, aa); break;
                default: zwhole3x8(w0, w1, w2, xq, xstep, steps, aq, k0 == 0, aa); break;
                }
                p0 += pp;
            }
        }
        zmm_out(w, x, y, out, r, nr, ntok, acc, NULL, n8);
    }
}
/* Rows [r0, r1) of bf16 weights against SEER_ZMM_BF16_MIN to SEER_ZMM_MAX tokens (x, packed by
 * pack_x_pairs into xz), written to y[t][r] (row stride out): rows_avx2_multi's blocks of rows and
 * slices of inputs with its prefetch of the next slice, but with no panel: the weights are read
 * once, straight from where they lie. Each micro-panel of 3 rows takes its slice in passes of at
 * most 8 token pairs (one pass up to 16 tokens; 17-32 two, 33-48 three, of balanced sizes), the
 * slice in L1 for the passes after the first. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) static void rows_zmm_pairs(const seer_weight_t *w, int64_t r0,
                                                                                    int64_t r1, const float *x,
                                                                                    const float *xz, int ntok, float *y,
                                                                                    int64_t out) {
    int64_t in = w->cols, n8 = in & ~(int64_t)7;
    int np = (ntok + 1) / 2;
    int npass = (np + 7) / 8, pbase = np / npass, pextra = np % npass;
    enum { NCH = 2 }; /* chains: a0 on even 8-blocks, a1 on odd */
    const size_t es = 2;
    const int kb = np > 8 ? SEER_ZKB_MANY_BF16 : SEER_ZKB_BF16;
    const size_t xstep = (size_t)np * 16; /* floats per 8-block of xz */
    const char *pb = (const char *)w->data;
    enum { ZP = SEER_ZMM_MAX / 2 };            /* pairs at most */
    _Alignas(64) float acc[(SEER_ZRB / 3) * 2 * ZP * 3 * 16]; /* [micro-panel][chain][pair][row][16] */
    for (int64_t r = r0; r < r1; r += SEER_ZRB) {
        int nr = r1 - r >= SEER_ZRB ? SEER_ZRB : (int)(r1 - r), nm = (nr + 2) / 3;
        for (int64_t k0 = 0; k0 < n8; k0 += kb) {
            int nk = n8 - k0 < kb ? (int)(n8 - k0) : kb, nb = nk / 8;
            /* the slice SEER_ZPF_AHEAD slices on, in this block or the ones after (none past r1:
             * those rows are another task's), a share of its lines issued by each micro-kernel */
            int64_t nsl = (n8 + kb - 1) / kb, ahead = k0 / kb + SEER_ZPF_AHEAD;
            int64_t pr = r + (ahead / nsl) * SEER_ZRB, pk = (ahead % nsl) * kb;
            int64_t pn = r1 - pr < SEER_ZRB ? r1 - pr : SEER_ZRB;
            int pbytes = (int)((n8 - pk < kb ? n8 - pk : kb) * (int64_t)es);
            int plines = (pbytes + 63) / 64, ptotal = SEER_BLOCK_PF && pn > 0 ? (int)pn * plines : 0;
            seer_pfw_t pfw = {ptotal ? pb + ((size_t)pr * (size_t)in + (size_t)pk) * es : pb, 0, plines,
                              (ptrdiff_t)((size_t)in * es) - (ptrdiff_t)plines * 64, 0};
            int pcalls = nm * npass * NCH, pshare = (ptotal + pcalls - 1) / pcalls, pleft = ptotal;
            const float *xb = xz + (size_t)(k0 / 8) * xstep;
            for (int m = 0; m < nm; m++) {
                const uint16_t *wr[3];
                for (int k = 0; k < 3; k++) { /* a short block repeats its last row */
                    int kk = m * 3 + k < nr ? m * 3 + k : nr - 1;
                    wr[k] = (const uint16_t *)(pb + ((size_t)(r + kk) * (size_t)in + (size_t)k0) * es);
                }
                for (int c = 0; c < NCH; c++) {
                    int steps = (nb - c + NCH - 1) / NCH;
                    for (int q = 0, p0 = 0; q < npass; q++) {
                        int pp = pbase + (q < pextra);
                        float *am = acc + (((size_t)m * 2 + (size_t)c) * ZP + (size_t)p0) * 3 * 16;
                        const float *xq = xb + (size_t)p0 * 16;
                        int pq = pleft < pshare ? pleft : pshare;
                        pleft -= pq;
                        switch (pp) {
                        case 4: zmicrob3x4(wr[0], wr[1], wr[2], xq, xstep, c, NCH, steps, am, k0 == 0, &pfw, pq); break;
                        case 5: zmicrob3x5(wr[0], wr[1], wr[2], xq, xstep, c, NCH, steps, am, k0 == 0, &pfw, pq); break;
                        case 6: zmicrob3x6(wr[0], wr[1], wr[2], xq, xstep, c, NCH, steps, am, k0 == 0, &pfw, pq); break;
                        case 7: zmicrob3x7(wr[0], wr[1], wr[2], xq, xstep, c, NCH, steps, am, k0 == 0, &pfw, pq); break;
                        default: zmicrob3x8(wr[0], wr[1], wr[2], xq, xstep, c, NCH, steps, am, k0 == 0, &pfw, pq); break;
                        }
                        p0 += pp;
                    }
                }
            }
        }
        for (int m = 0; m < nm; m++) {
            const float *a0 = acc + (size_t)m * 2 * ZP * 3 * 16;
            zmm_out(w, x, y, out, r + m * 3, nr - m * 3, ntok, a0, a0 + (size_t)ZP * 3 * 16, n8);
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
        /* SEER_NO_AVX2=1 turns off every x86 SIMD path (AVX-512 and AMX need this one): the
         * portable loops then run, as on a CPU without AVX2, so they can be tested here */
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c && !getenv("SEER_NO_AVX2");
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

/* A streamed call (one to four tokens: a decode step's GEMV or the streamed kernel; bf16/f16 up to
 * SEER_STREAM_GROUPS_MAX tokens in groups): the threads take row tasks
 * from a shared counter as they go, about SEER_LINEAR_TASKS per thread (at least the pool's
 * minimum chunk), rather than one fixed range each, so a thread that starts late or runs on a
 * slower vCPU does not leave the other waiting at the end of every matrix. Rows are independent,
 * so the result is the same bits however they are shared (tests/unit/test_kernels.c). Measured
 * on the 2-vCPU VM, 0.5B model, 2 threads: the share of samples spent waiting for the other
 * thread went from 4.2% to 3.4% (perf, bf16 decode, 8 tasks per thread in that run); decode
 * 17.3-18.8 -> 17.0-18.7 tok/s bf16 and 7.9-10.4 -> 8.8-10.1 f32 with 16 (four interleaved
 * rounds: within this VM's noise). The blocked kernel (f32 from five tokens, bf16/f16 from 13)
 * keeps one range per thread: it packs the activations once per call, and 16 tasks per thread
 * made batch-16 decode 10% slower. */
#ifndef SEER_LINEAR_TASKS
#define SEER_LINEAR_TASKS 16
#endif
#ifndef SEER_MULTI_TASKS
/* Row tasks per thread for the blocked kernel (1: a fixed range each), taken as the threads go
 * so a thread slowed by a neighbour on the host takes fewer. Batch-16 decode of the 0.5B model,
 * 2 threads, ten paired rounds against a fixed half each: 4 tasks bf16 1.08x (8 of 10 rounds
 * ahead), f32 1.02x (6 of 10); 8 tasks bf16 1.02x (7 of 10), f32 1.03x (7 of 10). */
#define SEER_MULTI_TASKS 4
#endif
#ifndef SEER_TASKS_STREAMED
#define SEER_TASKS_STREAMED 1 /* tasks for every streamed call (0: only 1-4 tokens) */
#endif
typedef struct {
    float *y;
    const float *x;
    int n;
    const seer_weight_t *w, *bias;
    int simd;
    size_t task;       /* rows per task when the threads take tasks as they go (0: one range each) */
    uint64_t gen;      /* this call's number, for pack_x once per thread (0: no packing) */
    atomic_size_t next; /* the next task's first row */
} linear_job;

static void linear_range(linear_job *j, size_t begin, size_t end);
static void linear_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    linear_job *j = ctx;
    if (!j->task) {
        linear_range(j, begin, end);
        return;
    }
    size_t rows = (size_t)j->w->rows;
    for (;;) {
        size_t b = atomic_fetch_add(&j->next, j->task);
        if (b >= rows) return;
        linear_range(j, b, b + j->task < rows ? b + j->task : rows);
    }
}

static void linear_range(linear_job *j, size_t begin, size_t end) {
    int64_t out = j->w->rows;
#ifdef SEER_X86
    if (j->simd == 1) {
        static _Thread_local uint64_t packed_gen;
        static _Thread_local const float *packed;
        static _Thread_local size_t packed_stride;
        if (j->n == 1) rows_avx2_one(j->w, (int64_t)begin, (int64_t)end, j->x, j->y);
        else if (j->n <= SEER_STREAM_MAX || streamed(j->w, j->n)) {
            if (packed_gen != j->gen) packed = stream_x(j->x, j->n, j->w, &packed_stride), packed_gen = j->gen;
            if (j->n <= SEER_STREAM_MAX) rows_avx2_stream(j->w, (int64_t)begin, (int64_t)end, packed, packed_stride, j->n, j->y, out);
            else rows_avx2_stream_groups(j->w, (int64_t)begin, (int64_t)end, packed, packed_stride, j->n, j->y, out);
        } else {
            if (zmm_pairs(j->w, j->n)) {
                if (packed_gen != j->gen) packed = pack_x_pairs(j->x, j->n, j->w->cols), packed_gen = j->gen;
                if (packed) {
                    if (j->w->dtype == SEER_F32) rows_zmm_whole(j->w, (int64_t)begin, (int64_t)end, j->x, packed, j->n, j->y, out);
                    else rows_zmm_pairs(j->w, (int64_t)begin, (int64_t)end, j->x, packed, j->n, j->y, out);
                    goto bias;
                }
                packed_gen = 0; /* out of memory: the blocked kernel below, the same bits */
            }
            if (packed_gen != j->gen) packed = pack_x(j->x, j->n, j->w->cols, slice_len(j->w->dtype, j->n)), packed_gen = j->gen;
            rows_avx2_multi(j->w, (int64_t)begin, (int64_t)end, j->x, packed, j->n, j->y, out);
        }
        goto bias;
    }
#endif
    for (size_t r = begin; r < end; r += 4) {
        int nr = end - r >= 4 ? 4 : (int)(end - r);
#ifdef SEER_X86
        if (j->simd == 2) rows_avx512(j->w, (int64_t)r, nr, j->x, j->n, j->y, out);
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
                        const seer_weight_t *bias, int gemm, int lead) {
    /* bf16 weights on AMX, and precision = "fast" on bf16 weights on AVX512_BF16, take every
     * count (the same bits per token whatever n, so decode, batches and prefill alike) */
    if (seer_k_linear_amx(p, y, x, n, w, bias)) return;
    if (w->amx_packed) { /* never read as rows: out of memory for the tiles' scratch */
        seer_k_linear_amx_packed_slow(y, x, n, w, bias);
        return;
    }
    if (seer_k_linear_dpbf16(p, y, x, n, w, bias)) return;
    if (gemm && seer_k_linear_blas(p, y, x, n, w, bias, lead)) return;
#ifdef SEER_X86
    if (n > SEER_ZMM_MAX && SEER_ZMM_SPLIT && seer_k_intel_avx512() && seer_k_linear_simd() == 1 && zmm_pairs(w, SEER_ZMM_MAX)) {
        /* more tokens than the pair kernels take (a batch's short prompts sharing a pass): in
         * runs of at most SEER_ZMM_MAX (even sizes, balanced), each a pass over the weights, the
         * same bits per token (see SEER_ZMM_SPLIT) */
        int runs = (n + SEER_ZMM_MAX - 1) / SEER_ZMM_MAX, c = ((n + runs - 1) / runs + 1) & ~1;
        size_t in = (size_t)w->cols, out = (size_t)w->rows;
        for (int t0 = 0; t0 < n; t0 += c)
            linear_base(p, y + (size_t)t0 * out, x + (size_t)t0 * in, n - t0 < c ? n - t0 : c, w, bias, 0, 0);
        return;
    }
#endif
    linear_job j = {.y = y, .x = x, .n = n, .w = w, .bias = bias, .simd = seer_k_linear_simd()};
    atomic_init(&j.next, 0);
    size_t per_row = (size_t)w->cols * (size_t)n;
    size_t min_rows = per_row ? (SEER_PAR_WORK / 2 + per_row - 1) / per_row : 1;
    if (min_rows < 4) min_rows = 4;
    if ((size_t)w->rows * per_row < SEER_PAR_WORK) min_rows = (size_t)w->rows;
    min_rows = (min_rows + 3) & ~(size_t)3; /* chunks of whole 4-row blocks */
    int t = seer_pool_threads(p);
#ifdef SEER_X86
    int multi = j.simd == 1 && n > SEER_STREAM_MAX && !streamed(w, n);
    static atomic_uint_fast64_t calls;
    if (j.simd == 1 && n > 1) j.gen = atomic_fetch_add(&calls, 1) + 1; /* pack_x, stream_x: once a call per thread */
#else
    int multi = 0;
#endif
    /* threads taking row tasks as they go: the blocked kernel in whole row blocks, SEER_MULTI_TASKS
     * per thread; the streamed kernels SEER_LINEAR_TASKS per thread of at least min_rows */
    if (t > 1 && SEER_MULTI_TASKS > 1 && multi && (size_t)w->rows >= 2 * (size_t)SEER_RB * SEER_MULTI_TASKS) {
        size_t blocks = ((size_t)w->rows + SEER_RB - 1) / SEER_RB;
        j.task = (blocks + (size_t)t * SEER_MULTI_TASKS - 1) / ((size_t)t * SEER_MULTI_TASKS) * SEER_RB;
    } else if (t > 1 && SEER_LINEAR_TASKS > 1 && (SEER_TASKS_STREAMED ? streamed(w, n) : n <= SEER_STREAM_MAX) &&
               (size_t)w->rows >= 2 * min_rows) {
        size_t task = ((size_t)w->rows + (size_t)t * SEER_LINEAR_TASKS - 1) / ((size_t)t * SEER_LINEAR_TASKS);
        j.task = task < min_rows ? min_rows : task;
    }
    if (j.task) {
        seer_pool_for(p, (size_t)t, 1, linear_chunk, &j);
        return;
    }
    seer_pool_for(p, (size_t)w->rows, min_rows, linear_chunk, &j);
}

_Thread_local int seer_k_fast_bf16;

/* Where the per-token kernel is the blocked one (AVX2 family: AMD CPUs, and any without AVX-512),
 * it beats OpenBLAS sgemm on short prompts: sgemm widens (bf16/f16) and packs every weight per
 * call, a cost spread over only n tokens, while the blocked kernel reads each weight once and
 * widens it in the FMAs' shadow. Measured on the 2-vCPU Zen 4 VM (0.5B bench model, a forward
 * of n tokens, best of 3, 2 threads, two alternating rounds; tests/bench/prefill_lengths.lua,
 * the blocked kernel forced with SEER_GEMM_MIN_TOKENS=100000), tok/s sgemm -> blocked: f32 n = 16: 73 -> 140, 30: 101 ->
 * 144, 48: 128 -> 159-162, 64: 140-142 -> 157-162, 96: 155-157 -> 159-162, 128: 164-168 ->
 * 159-163, 192: 175-176 -> 152-154; bf16 16: 59 -> 155, 30: 84 -> 158, 64: 114-127 -> 152-158,
 * 96: 143 -> 153-161, 128: 146-153 -> 137-160, 192: 163-166 -> 151-157; one thread the same
 * crossings (f32 at 96: 88.6 both; bf16 at 128: 85.8 against 85.1). So from 96 tokens (f32) and
 * 128 (bf16, f16) sgemm runs; below, the blocked kernel, and in a batch such prompts share one
 * pass over the weights (tests/bench/short_prompts.lua MODEL 2 32 30 24 16: 32 prompts of 30
 * tokens, 24 new tokens each, max_batch 16: bf16 48.6-49.1 -> 72.1-72.5 new tok/s, f32
 * 53.5-55.1 -> 68.8-69.0; SEER_GEMM_MIN_TOKENS=16 is the old behaviour). Where AMX or the fast bf16 kernel takes w, and on
 * the AVX-512 family (Intel), 16 as before; where the fast bf16 kernel runs without AMX, whose
 * rows do not depend on the count, never (every sequence of a batch shares the pass, LoRA's
 * per-token path with it). SEER_GEMM_MIN_TOKENS=N (16 or more) sets both
 * crossings, for a CPU where they lie elsewhere (on a Zen 3 VM one prompt's sgemm wins from
 * 64 tokens at f32 and about 96 at bf16, by 10-15%; kept at 96 / 128 there for the batches'
 * shared pass: docs/model.md); so does
 * seer_k_gemm_min_override (the tests, to run the GEMM path on models too small for 96 tokens). */
#ifndef SEER_GEMM_MIN_F32
#define SEER_GEMM_MIN_F32 96
#endif
#ifndef SEER_GEMM_MIN_16
#define SEER_GEMM_MIN_16 128
#endif
/* On CPUs with AVX-512 that run the AVX2 family (AMD Zen 4), where OpenBLAS runs its Haswell
 * kernels since 2026-12-01 (kernels_blas.c): their sgemm overtakes the blocked kernel far earlier
 * than the SkylakeX kernels the figures above were measured with. The 2-vCPU Zen 4 VM, 0.5B bench
 * model, 2 threads, 2026-12-01 (tests/bench/prefill_lengths.lua MODEL 2 N..., three alternating
 * rounds, SEER_GEMM_MIN_TOKENS=100000 -> 16), one prompt, tok/s: bf16 n = 32 119-144 -> 119-143,
 * 36-44 level within the noise, 48 151-156 -> 168-176, 64 155-158 -> 174-187, 80 155-160 ->
 * 188-192, 96 163-171 -> 195-198, 112 162-170 -> 187-199; f32 32 157-160 -> 149-151, 48 163-167
 * -> 170-173, 64 167-172 -> 182-184, 80 169-172 -> 188-192. And a batch's shared pass no longer
 * wins there either: 16 prompts, 4 new tokens each, max_batch 16 (tests/bench/short_prompts.lua
 * MODEL 2 16 L 4 16, one run each, thresholds 128 -> 32 or 48): bf16 L = 40 5.11 -> 4.49 s, 48
 * 5.58 -> 4.53, 64 7.35-8.30 -> 5.84-5.87; f32 40 4.24 -> 3.88, 48 5.27 -> 4.47; while at 24 and
 * 32 tokens the shared pass stays ahead (bf16 2.72 against 3.08 s, 3.38 against 3.61; f32 2.98
 * against 3.02, 3.57 against 3.83). So 48 for both dtypes there. */
#ifndef SEER_GEMM_MIN_AVX512
#define SEER_GEMM_MIN_AVX512 48
#endif
/* Intel CPUs with AMX, which run the AVX2 family (seer_k_linear_simd) with SkylakeX's sgemm
 * (kernels_blas.c): one prompt of n tokens of the 0.5B f32 bench model, 2 threads, on a 2-core
 * AMX Xeon VM (2026-12-02, tests/bench/prefill_lengths.lua MODEL 2 24 32 40 48 64, two rounds,
 * the AVX-512 family with GEMMs from 16 -> this family with GEMMs from 48 / from 40), tok/s: n =
 * 24 124-126 -> 143-153 / 139-141, 32 139-143 -> 150-157 / 148-153, 40 161-171 -> 147-165 /
 * 155-166, 48 181-193 -> 182-189 / 179-185, 64 level. So 40 there, until the pair kernels' outputs
 * left from registers (store_sums4x3, the same machine, the same day, two rounds, sgemm off against
 * sgemm from 16): n = 64 224-237 against 197-206, 80 233-242 against 206-215, 96 233-234 against
 * 228-235, 112 232 against 236-240, 128 232-233 against 238-243, 192 226-228 against 266. So 96;
 * a batch of 32 prompts of L tokens (tests/bench/short_prompts.lua MODEL 2 32 L 16 16, shared
 * pass against sgemm per prompt): L = 30 78.1 against 62.1 new tok/s, 60 48.7 against 45.8, 90
 * 34.5 against 35.0. With seer's own GEMM in sgemm's place (kernels_gemm.c, the same VM, 2026-12-02,
 * prefill_lengths.lua MODEL 2 N, two rounds, the pair kernels against the GEMM path from 16 or
 * from 96): n = 48 241-264 against 184-185, 64 232-255 against 213-220, 80 231-261 against
 * 229, 96 243-250 against 246-251, 128 241-242 against 265-266, 192 241-249 against 291-300.
 * So 96 still. */
#ifndef SEER_GEMM_MIN_INTEL
#define SEER_GEMM_MIN_INTEL 96
#endif
/* Whether OpenBLAS runs (or will run: kernels_blas.c names it on first use) its Haswell kernels,
 * which SEER_GEMM_MIN_AVX512 was measured with: seer's own choice on the AVX2 family's CPUs
 * except Intel ones with AMX (SkylakeX there), unless the user set OPENBLAS_CORETYPE to another
 * core, whose crossings the figures above (SkylakeX) give. Read once: the threshold is asked for
 * on every linear call. */
static int g_blas_haswell = -1;
static int blas_haswell(void) {
    if (g_blas_haswell < 0) {
        const char *ct = getenv("OPENBLAS_CORETYPE");
        g_blas_haswell = !ct || !*ct ? seer_k_blas_own_haswell() : strcasecmp(ct, "haswell") == 0;
    }
    return g_blas_haswell;
}
static atomic_int g_gemm_min = -1; /* -1: not read from the environment yet; 0: the defaults */
static pthread_once_t g_gemm_min_once = PTHREAD_ONCE_INIT;
static void gemm_min_env(void) {
    const char *s = getenv("SEER_GEMM_MIN_TOKENS");
    char *end = NULL;
    long v = s && *s ? strtol(s, &end, 10) : 0;
    if (s && *s && (*end || v < SEER_BLAS_MIN_TOKENS || v > (1L << 30))) {
        fprintf(stderr, "seer: SEER_GEMM_MIN_TOKENS=%s is not a whole number from %d to 2^30; the default for this CPU is used\n",
                s, SEER_BLAS_MIN_TOKENS);
        v = 0;
    }
    int unset = -1;
    atomic_compare_exchange_strong(&g_gemm_min, &unset, (int)v);
}
static atomic_uint g_gemm_min_epoch;
int seer_k_gemm_min_override(int n) {
    pthread_once(&g_gemm_min_once, gemm_min_env);
    if (n < 0) return atomic_load_explicit(&g_gemm_min, memory_order_relaxed);
    int old = atomic_exchange(&g_gemm_min, n);
    if (old != n) atomic_fetch_add(&g_gemm_min_epoch, 1);
    return old;
}
unsigned seer_k_gemm_min_epoch(void) { return atomic_load(&g_gemm_min_epoch); }
int seer_k_linear_gemm_min(const seer_weight_t *w) {
#ifdef SEER_X86
    int units = seer_k_bf16_units_take(w);
    if (units == 2) return SEER_GEMM_NEVER;
    if (seer_k_linear_simd() == 1 && !units) {
        int o = seer_k_gemm_min_override(-1);
        if (o > 0) return o;
        if (seer_k_intel_avx512() && !blas_haswell()) return SEER_GEMM_MIN_INTEL;
        if (seer_k_have_avx512() && blas_haswell()) return SEER_GEMM_MIN_AVX512;
        return w->dtype == SEER_F32 ? SEER_GEMM_MIN_F32 : SEER_GEMM_MIN_16;
    }
#else
    (void)w;
#endif
    return SEER_BLAS_MIN_TOKENS;
}

void seer_k_linear_as(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias,
                      int gemm, int lead) {
    linear_base(p, y, x, n, w, bias, gemm, lead);
    if (w->lora) {
        if (gemm) seer_lora_apply(p, y, x, n, w->lora, lead);
        else seer_lora_apply_rows(p, y, x, n, w->lora);
    }
}

void seer_k_linear(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias) {
    seer_k_linear_as(p, y, x, n, w, bias, n >= seer_k_linear_gemm_min(w), 0);
}

void seer_k_linear_rows(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias) {
    linear_base(p, y, x, n, w, bias, 0, 0);
    if (w->lora) seer_lora_apply_rows(p, y, x, n, w->lora);
}

void seer_k_linear_multi(seer_pool_t *p, int count, float *const *ys, const float *x, int n, const seer_weight_t *const *ws,
                         const seer_weight_t *const *biases, int paths) {
    enum { MAX = 8 };
    int gemm[MAX], any = 0;
    if (count > MAX) {
        for (int i = 0; i < count; i++)
            seer_k_linear_as(p, ys[i], x, n, ws[i], biases[i], paths >= seer_k_linear_gemm_min(ws[i]), paths > n ? paths - n : 0);
        return;
    }
    for (int i = 0; i < count; i++) any |= gemm[i] = paths >= seer_k_linear_gemm_min(ws[i]);
    /* the fast bf16 kernel takes the matrices together; so does OpenBLAS when every matrix is on
     * its GEMM path and no bf16 unit takes one */
    int together = 0, blas = count > 1;
    for (int i = 0; i < count && blas; i++) blas = gemm[i] && !seer_k_bf16_units_take(ws[i]);
    /* (on AMX CPUs the tiles take every count of what the fast kernel could, the activations
     * packed once for the matrices together) */
    if (count > 1 && !any && seer_k_have_amx()) together = seer_k_linear_amx_multi(p, count, ys, x, n, ws, biases);
    else if (count > 1 && !any) together = seer_k_linear_dpbf16_multi(p, count, ys, x, n, ws, biases);
    else if (blas) together = seer_k_linear_blas_multi(p, count, ys, x, n, ws, biases, paths > n ? paths - n : 0);
    if (together) {
        for (int i = 0; i < count; i++) /* as seer_k_linear_as would */
            if (ws[i]->lora) {
                if (blas) seer_lora_apply(p, ys[i], x, n, ws[i]->lora, paths > n ? paths - n : 0);
                else seer_lora_apply_rows(p, ys[i], x, n, ws[i]->lora);
            }
        return;
    }
    for (int i = 0; i < count; i++) seer_k_linear_as(p, ys[i], x, n, ws[i], biases[i], gemm[i], paths > n ? paths - n : 0);
}

/* ---- elementwise steps of a prefill over the pool ------------------------------------------
 * The norms, residual adds, SiLU and RoPE of a many-token pass ran on the calling thread while
 * the pool's other threads waited (2026-12-02, 2-core AMX Xeon VM, a 512-token f32 prefill of
 * the 0.5B model: ~6% of the wall time on the caller alone). Each splits its rows (elements for
 * the adds, 16-element steps for SiLU) into contiguous chunks computed as the serial loop would,
 * so the bits do not change. Small calls (a decode step) stay on the caller. */
#define SEER_ELEM_PAR (1u << 16) /* elements from which a step goes over the pool */

typedef struct {
    float *y;
    const float *x;
    const seer_weight_t *w;
    int d, one_plus;
    float eps, mult;
} elem_job;

static void rmsnorm_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    const elem_job *j = ctx;
    seer_k_rmsnorm(j->y + begin * (size_t)j->d, j->x + begin * (size_t)j->d, (int)(end - begin), j->d, j->w, j->eps, j->one_plus);
}

void seer_k_rmsnorm_pool(seer_pool_t *p, float *y, const float *x, int n, int d, const seer_weight_t *w, float eps, int one_plus) {
    if (!p || (size_t)n * (size_t)d < SEER_ELEM_PAR || n < 2) {
        seer_k_rmsnorm(y, x, n, d, w, eps, one_plus);
        return;
    }
    elem_job j = {.y = y, .x = x, .w = w, .d = d, .one_plus = one_plus, .eps = eps};
    seer_pool_for(p, (size_t)n, 1, rmsnorm_chunk, &j);
}

static void add_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    const elem_job *j = ctx;
    float *y = j->y;
    const float *x = j->x;
    if (j->mult != 0.f)
        for (size_t i = begin; i < end; i++) y[i] += x[i] * j->mult;
    else
        for (size_t i = begin; i < end; i++) y[i] += x[i];
}

void seer_k_add_pool(seer_pool_t *p, float *y, const float *x, size_t n, float mult) {
    elem_job j = {.y = y, .x = x, .mult = mult};
    if (!p || n < SEER_ELEM_PAR) add_chunk(&j, 0, n, 0);
    else seer_pool_for(p, n, 4096, add_chunk, &j);
}

static void silu_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    const elem_job *j = ctx;
    size_t n = (size_t)j->d, b = begin * 16, e = end * 16 < n ? end * 16 : n;
    seer_k_silu_mul(j->y + b, j->x + b, e - b);
}

void seer_k_silu_mul_pool(seer_pool_t *p, float *gate, const float *up, size_t n) {
    if (!p || n < SEER_ELEM_PAR || n > (size_t)INT32_MAX) {
        seer_k_silu_mul(gate, up, n);
        return;
    }
    /* steps of 16 from the start, the last holding the tail: the vector kernel's grouping */
    elem_job j = {.y = gate, .x = up, .d = (int)n};
    seer_pool_for(p, (n + 15) / 16, 256, silu_chunk, &j);
}

typedef struct {
    float *q, *k;
    int H, KH, hd, rot, half;
    size_t qd, kvd;
    const float *cs, *sn;
} rope_job;

static void rope_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    const rope_job *j = ctx;
    for (size_t t = begin; t < end; t++) {
        seer_k_rope(j->q + t * j->qd, j->H, j->hd, j->rot, j->cs + t * (size_t)j->half, j->sn + t * (size_t)j->half);
        if (j->k) seer_k_rope(j->k + t * j->kvd, j->KH, j->hd, j->rot, j->cs + t * (size_t)j->half, j->sn + t * (size_t)j->half);
    }
}

void seer_k_rope_rows_pool(seer_pool_t *p, int n, float *q, int H, float *k, int KH, int hd, int rot, const float *cs,
                           const float *sn) {
    rope_job j = {.q = q, .k = k, .H = H, .KH = KH, .hd = hd, .rot = rot, .half = rot / 2,
                  .qd = (size_t)H * (size_t)hd, .kvd = (size_t)KH * (size_t)hd, .cs = cs, .sn = sn};
    if (!p || (size_t)n * (size_t)(H + KH) * (size_t)hd < SEER_ELEM_PAR) rope_chunk(&j, 0, (size_t)n, 0);
    else seer_pool_for(p, (size_t)n, 1, rope_chunk, &j);
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

float seer_k_dot(const float *a, const float *b, int n) {
#ifdef SEER_X86
    if (seer_k_have_avx2()) return dot_avx2(a, b, n);
#endif
    return dot_generic(a, b, n);
}

void seer_k_axpy(float *o, float w, const float *v, int n) {
#ifdef SEER_X86
    if (seer_k_have_avx2()) {
        axpy_avx2(o, w, v, n);
        return;
    }
#endif
    axpy_generic(o, w, v, n);
}

float seer_k_dot_bf16(const float *a, const uint16_t *b, int n) {
#ifdef SEER_X86
    if (seer_k_have_avx2()) return dot_avx2_bf16(a, b, n);
#endif
    return dot_generic_bf16(a, b, n);
}

void seer_k_axpy_bf16(float *o, float w, const uint16_t *v, int n) {
#ifdef SEER_X86
    if (seer_k_have_avx2()) {
        axpy_avx2_bf16(o, w, v, n);
        return;
    }
#endif
    axpy_generic_bf16(o, w, v, n);
}

/* The per-token attention kernel on AVX2, for one token and nh query heads h0 .. h0+nh-1: those
 * of one key/value head (grouped-query attention), or of several whole groups (SEER_ATTN_SPAN:
 * a batch's items then read whole rows of the cache, one stream, where a group's share of a row
 * is every kvd-th run of hd floats). Keys and values are taken SEER_ATTN_TILE
 * positions at a time, and each tile serves every head of the item while it sits in L1: the
 * heads of a group otherwise read the same keys and values from L3 one after another (at a
 * 1900-token context one head's keys and values fill the 512 KiB L2); the next tile's keys and
 * this tile's values are prefetched (SEER_ATTN_PF). One layer of a 16-sequence decode at a
 * 256-token context, 36 layers' caches cycled (from memory), 2 threads (make bench-attention
 * ARGS="16 256 2 36"): 643-674 us a layer without either, 602-617 spanning alone, 601-619
 * prefetching alone, 506-525 with both; at 128 tokens 334-343 -> 261-262 us, one sequence at 256
 * tokens 139-140 -> 118-119 us. Each head's scores (dot_avx2, eight keys at a time through
 * dot8_avx2 where a tile has eight left, the same bits; then the soft-cap), softmax (its running
 * max, then seer_k_exp_sub_sum) and weighted sum (one
 * FMA chain per output element over the keys in order, carried across tiles through o) are
 * the same operations in the same order as for a head alone, so the grouping, which depends on
 * the thread count, changes no bit. sc holds nh rows of a->max_len scores. */
#ifndef SEER_ATTN_TILE
#define SEER_ATTN_TILE 32
#endif
#define SEER_ATTN_MAX_GROUP 64

#ifndef SEER_ATTN_GROUP
#define SEER_ATTN_GROUP 1
#endif
#ifndef SEER_ATTN_AVX2
#define SEER_ATTN_AVX2 1
#endif
#ifndef SEER_ATTN_PF
#define SEER_ATTN_PF 1
#endif
#ifndef SEER_ATTN_KDIST
#define SEER_ATTN_KDIST SEER_ATTN_TILE
#endif
#ifndef SEER_ATTN_VDIST
#define SEER_ATTN_VDIST 0
#endif
#ifndef SEER_ATTN_VHINT
#define SEER_ATTN_VHINT _MM_HINT_T1
#endif
#ifndef SEER_ATTN_SPAN
#define SEER_ATTN_SPAN 1
#endif
/* Eight keys' scores at once (dot8_avx2). One sequence at a 1024-token context, 36 layers' caches
 * cycled (make bench-attention ARGS="1 1024 T 36"), the Zen 3 VM, three rounds alternating with
 * SEER_ATTN_DOT8=0: one thread 619-661 -> 485-541 us a layer, two 360-400 -> 300-385; one layer
 * in cache (ARGS="1 1024 1 1") 288-367 -> 271-294; 16 sequences at 32 tokens 102-112 -> 82-100;
 * 16 x 128 and 16 x 256 level. What is left is memory: a plain read of the same bytes in the
 * same order (a /tmp program, two threads) takes 346 us a layer when each thread reads a
 * quarter of every row (one key/value head, as the items of one token are cut) and 210 us when
 * each reads whole rows of half the positions. Scores could be cut so without changing a bit,
 * but each output's weighted sum is one FMA chain over the keys in order, which only one
 * thread can run. */
#ifndef SEER_ATTN_DOT8
#define SEER_ATTN_DOT8 1
#endif
#ifdef SEER_X86
/* dot_avx2 (or dot_avx2_bf16) of q against eight keys at once, k + j * ks for j = 0 .. 7:
 * out[j] gets the bits dot_avx2 gives that key (each key's chain the same FMAs in the same order,
 * hsum8x8, then the same scalar tail). One key at a time, each score waited on its chain of
 * hd / 8 dependent FMAs and its hsum8 (~60 cycles a key for hd 64 on the Zen 3 VM: the per-token
 * attention at a 1024-token context was compute-bound); eight chains side by side keep both FMA
 * pipes busy. */
#define SEER_DEF_DOT8(NAME, T, LOADK, SCALAR)                                                                    \
    __attribute__((target("avx2,fma,f16c"))) static inline void NAME(const float *q, const T *k, size_t ks, int n, \
                                                                     float *out) {                           \
        __m256 acc[8];                                                                                       \
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();                  \
        int i = 0;                                                                                           \
        for (; i + 8 <= n; i += 8) {                                                                         \
            __m256 qv = _mm256_loadu_ps(q + i);                                                              \
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)                                             \
                acc[j] = _mm256_fmadd_ps(qv, LOADK(k + (size_t)j * ks + (size_t)i), acc[j]);                \
        }                                                                                                    \
        hsum8x8(acc, out);                                                                                   \
        for (; i < n; i++)                                                                                   \
            for (int j = 0; j < 8; j++) out[j] = __builtin_fmaf(q[i], SCALAR(k[(size_t)j * ks + (size_t)i]), out[j]); \
    }
SEER_DEF_DOT8(dot8_avx2, float, SEER_W_F32, SEER_F32_ID)
SEER_DEF_DOT8(dot8_avx2_bf16, uint16_t, SEER_W_BF16, seer_bf16_to_f32)
#undef SEER_DEF_DOT8
/* bf16: the cache is a bf16 one (a->kc16, a->vc16); a constant in each of the two functions below. */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline void attention_heads_avx2_any(const seer_attn_params_t *a, int t,
                                                                                                   int h0, int nh, float *sc,
                                                                                                   const int bf16) {
    int H = a->H, hd = a->hd, qd = H * hd, kvd = a->KH * hd, group = H / a->KH;
    int pos = a->start + t, first = 0;
    if (a->window > 0 && pos - a->window + 1 > 0) first = pos - a->window + 1;
    size_t L = (size_t)a->max_len;
    const float *q = a->q + (size_t)t * qd + (size_t)h0 * hd;
    float *out = a->out + (size_t)t * qd + (size_t)h0 * hd;
    float mx[SEER_ATTN_MAX_GROUP], inv[SEER_ATTN_MAX_GROUP];
    for (int g = 0; g < nh; g++) mx[g] = -INFINITY;
#if SEER_ATTN_PF
    /* head g's pass over a key prefetches its share of the item's cache lines of that row, so
     * the fetches are spread over the tile's work rather than issued in one burst; the item's
     * key/value heads are kv0 .. kv1 - 1, a range of each row */
    int kv0 = h0 / group, kv1 = (h0 + nh - 1) / group + 1;
    size_t pf_lo[SEER_ATTN_MAX_GROUP + 1], span = (size_t)(kv1 - kv0) * (size_t)hd;
    for (int g = 0; g <= nh; g++) pf_lo[g] = (size_t)kv0 * (size_t)hd + (span * (size_t)g / (size_t)nh + 15) / 16 * 16;
    if (pf_lo[nh] > (size_t)kv1 * (size_t)hd) pf_lo[nh] = (size_t)kv1 * (size_t)hd;
#endif
    for (int p0 = first; p0 <= pos; p0 += SEER_ATTN_TILE) {
        int p1 = pos - p0 < SEER_ATTN_TILE ? pos : p0 + SEER_ATTN_TILE - 1;
        for (int g = 0; g < nh; g++) {
            const float *qg = q + (size_t)g * hd;
            size_t koff = (size_t)((h0 + g) / group) * (size_t)hd;
            float *sg = sc + (size_t)g * L, m = mx[g];
            for (int p = p0; p <= p1;) {
                int nk = SEER_ATTN_DOT8 && p + 7 <= p1 ? 8 : 1; /* eight keys at once: the same scores */
#if SEER_ATTN_PF
                /* the keys of the next tile into L1 and this tile's values into L2 (read after
                 * the softmax), the item's share of each row, one cache line per step, while the
                 * first head goes by: the rows of one key/value head are every kvd-th run of
                 * hd floats, a pattern the hardware prefetchers follow late */
                for (int pp = p; pp < p + nk; pp++)
                    for (size_t i = pf_lo[g]; i < pf_lo[g + 1]; i += bf16 ? 32 : 16) {
                        size_t ki = (size_t)(pp + SEER_ATTN_KDIST) * (size_t)kvd + i, vi = (size_t)(pp + SEER_ATTN_VDIST) * (size_t)kvd + i;
                        _mm_prefetch(bf16 ? (const char *)(a->kc16 + ki) : (const char *)(a->kc + ki), _MM_HINT_T0);
                        _mm_prefetch(bf16 ? (const char *)(a->vc16 + vi) : (const char *)(a->vc + vi), SEER_ATTN_VHINT);
                    }
#endif
                float s8[8];
                if (nk == 8 && bf16) dot8_avx2_bf16(qg, a->kc16 + koff + (size_t)p * kvd, (size_t)kvd, hd, s8);
                else if (nk == 8) dot8_avx2(qg, a->kc + koff + (size_t)p * kvd, (size_t)kvd, hd, s8);
                else s8[0] = bf16 ? dot_avx2_bf16(qg, a->kc16 + koff + (size_t)p * kvd, hd) : dot_avx2(qg, a->kc + koff + (size_t)p * kvd, hd);
                for (int j = 0; j < nk; j++) {
                    float s = s8[j] * a->scale;
                    if (a->softcap > 0.f) s = tanhf(s / a->softcap) * a->softcap;
                    sg[p + j] = s;
                    if (s > m) m = s;
                }
                p += nk;
            }
            mx[g] = m;
        }
    }
    for (int g = 0; g < nh; g++) inv[g] = 1.0f / seer_k_exp_sub_sum(sc + (size_t)g * L + first, pos - first + 1, mx[g]);
    memset(out, 0, sizeof(float) * (size_t)nh * (size_t)hd);
    for (int p0 = first; p0 <= pos; p0 += SEER_ATTN_TILE) {
        int p1 = pos - p0 < SEER_ATTN_TILE ? pos : p0 + SEER_ATTN_TILE - 1;
        for (int g = 0; g < nh; g++) {
            size_t voff = (size_t)((h0 + g) / group) * (size_t)hd;
            if (bf16) attn_mix_avx2_bf16(out + (size_t)g * hd, sc + (size_t)g * L, inv[g], a->vc16 + voff, (size_t)kvd, p0, p1, hd);
            else attn_mix_avx2(out + (size_t)g * hd, sc + (size_t)g * L, inv[g], a->vc + voff, (size_t)kvd, p0, p1, hd);
        }
    }
}
__attribute__((target("avx2,fma,f16c"))) static void attention_heads_avx2(const seer_attn_params_t *a, int t, int h0, int nh,
                                                                          float *sc) {
    if (a->kc16) attention_heads_avx2_any(a, t, h0, nh, sc, 1);
    else attention_heads_avx2_any(a, t, h0, nh, sc, 0);
}
#endif

/* One item of the per-token attention: hpi query heads (a divisor of the group) of token t of
 * a, item w counting (token, head block) pairs. sc: the thread's max_len scores (the portable
 * loop and a group without its own rows); gs: hpi rows of max_len, or NULL. The same operations
 * whichever hpi, thread or batch the item runs in. */
static void attention_item(const seer_attn_params_t *a, int hpi, size_t w, float *sc, float *gs) {
    int H = a->H, hd = a->hd, qd = H * hd, kvd = a->KH * hd, group = H / a->KH, per_t = H / hpi;
    int t = (int)(w / (size_t)per_t), h0 = (int)(w % (size_t)per_t) * hpi;
#ifdef SEER_X86
    if (SEER_ATTN_AVX2 && seer_k_have_avx2()) {
        if (gs) attention_heads_avx2(a, t, h0, hpi, gs);
        else
            for (int h = h0; h < h0 + hpi; h++) attention_heads_avx2(a, t, h, 1, sc);
        return;
    }
#else
    (void)gs;
#endif
    int pos = a->start + t; /* the portable loop goes head by head */
    int first = 0;
    if (a->window > 0 && pos - a->window + 1 > 0) first = pos - a->window + 1;
    for (int h = h0; h < h0 + hpi; h++) {
        const float *q = a->q + (size_t)t * qd + (size_t)h * hd;
        size_t kv_off = (size_t)(h / group) * (size_t)hd;
        float mx = -INFINITY;
        for (int p = first; p <= pos; p++) {
            float s = (a->kc16 ? dot_generic_bf16(q, a->kc16 + (size_t)p * kvd + kv_off, hd)
                               : dot_generic(q, a->kc + (size_t)p * kvd + kv_off, hd)) * a->scale;
            if (a->softcap > 0.f) s = tanhf(s / a->softcap) * a->softcap;
            sc[p] = s;
            if (s > mx) mx = s;
        }
        float inv = 1.0f / seer_k_exp_sub_sum(sc + first, pos - first + 1, mx);
        float *o = a->out + (size_t)t * qd + (size_t)h * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        for (int p = first; p <= pos; p++) {
            if (a->vc16) axpy_generic_bf16(o, sc[p] * inv, a->vc16 + (size_t)p * kvd + kv_off, hd);
            else axpy_generic(o, sc[p] * inv, a->vc + (size_t)p * kvd + kv_off, hd);
        }
    }
}

/* The items of several sequences' attentions in one loop: items first[i] .. first[i + 1] - 1 are
 * a[i]'s (a single call is a batch of one). The scores' rows are `stride` floats per thread in
 * each sequence's scratch (the largest max_len of the batch: every sequence of a forward call
 * shares one scratch of threads x its largest cache). */
typedef struct {
    const seer_attn_params_t *a;
    const size_t *first;
    int count, hpi;
    size_t stride;
} attn_job;

static void attention_chunk(void *ctx, size_t begin, size_t end, int thread) {
    const attn_job *j = ctx;
    int i = 0;
    while (i + 1 < j->count && j->first[i + 1] <= begin) i++;
    for (size_t w = begin; w < end; w++) {
        while (w >= j->first[i + 1]) i++;
        const seer_attn_params_t *a = &j->a[i];
        float *sc = a->scratch + (size_t)thread * j->stride;
        float *gs = j->hpi > 1 ? seer_k_thread_buffer(SEER_BUF_ATTN, (size_t)j->hpi * j->stride) : NULL;
        attention_item(a, j->hpi, w - j->first[i], sc, gs);
    }
}

/* Query heads per item (see attention_heads_avx2): the most heads (whole groups, up to all of
 * them, with SEER_ATTN_SPAN) that leave at least two items per thread, else the largest divisor
 * of the group that does (one head at a time at worst). */
static int attention_hpi(const seer_attn_params_t *a, size_t tokens, int threads) {
    int group = a->H / a->KH, top = SEER_ATTN_SPAN ? a->H : group;
    if (SEER_ATTN_GROUP)
        for (int d = top < SEER_ATTN_MAX_GROUP ? top : SEER_ATTN_MAX_GROUP; d > 1; d--)
            if ((SEER_ATTN_SPAN ? a->H % d == 0 && (d % group == 0 || group % d == 0) : group % d == 0) &&
                tokens * (size_t)(a->H / d) >= 2u * (size_t)threads)
                return d;
    return 1;
}

/* The query count whose kernel a takes: its own, or a whole prompt's (seer_attn_params_t.paths). */
static int attn_paths(const seer_attn_params_t *a) { return a->paths > a->n ? a->paths : a->n; }

static void attention_rows(seer_pool_t *p, const seer_attn_params_t *items, int count);

void seer_k_attention(seer_pool_t *p, const seer_attn_params_t *a) {
    if (attn_paths(a) >= SEER_BLAS_MIN_TOKENS && (seer_k_attention_small(p, a) || seer_k_attention_blas(p, a))) return;
    attention_rows(p, a, 1);
}

/* Sequences of SEER_BLAS_MIN_TOKENS query tokens or more (or whose whole prompt has that many:
 * attn_paths) run alone, on the path they take alone (seer_k_attention: the GEMM path), however
 * many sequences run beside them, one included: a batch's other sequences may have left for the
 * hooked path (seer_fb_attention), and a long sequence left alone here ran the per-token kernel,
 * other bits than its pass alone (found by tests/lua/test_fuzz_batch.lua). The rest share one
 * per-token pass. */
void seer_k_attention_batch(seer_pool_t *p, const seer_attn_params_t *a, int count) {
    if (count <= 0) return;
    int short_ = 0;
    for (int i = 0; i < count; i++) {
        if (attn_paths(&a[i]) >= SEER_BLAS_MIN_TOKENS) seer_k_attention(p, &a[i]);
        else short_++;
    }
    if (!short_) return;
    if (short_ == count) {
        attention_rows(p, a, count);
        return;
    }
    seer_attn_params_t *sel = malloc(sizeof *sel * (size_t)short_);
    if (!sel) { /* out of memory: one at a time */
        for (int i = 0; i < count; i++)
            if (attn_paths(&a[i]) < SEER_BLAS_MIN_TOKENS) attention_rows(p, &a[i], 1);
        return;
    }
    for (int i = 0, k = 0; i < count; i++)
        if (attn_paths(&a[i]) < SEER_BLAS_MIN_TOKENS) sel[k++] = a[i];
    attention_rows(p, sel, short_);
    free(sel);
}

/* The per-token kernel over every item, in one pass on the pool. */
static void attention_rows(seer_pool_t *p, const seer_attn_params_t *items, int count) {
    enum { STACK = 64 };
    size_t first_stack[STACK + 1], *first = first_stack;
    if (count <= 0) return;
    if (count > STACK && !(first = malloc(sizeof *first * (size_t)(count + 1)))) {
        for (int i = 0; i < count; i++) attention_rows(p, &items[i], 1);
        return;
    }
    int threads = seer_pool_threads(p);
    size_t tokens = 0, work = 0, stride = 0;
    for (int i = 0; i < count; i++) {
        tokens += (size_t)items[i].n;
        if ((size_t)items[i].max_len > stride) stride = (size_t)items[i].max_len;
    }
    /* every sequence of a batch has the same heads: one grouping for all */
    int hpi = attention_hpi(&items[0], tokens, threads);
    first[0] = 0;
    for (int i = 0; i < count; i++) {
        first[i + 1] = first[i] + (size_t)items[i].n * (size_t)(items[i].H / hpi);
        /* one item costs about 2 * keys * head_dim multiply-adds per head */
        work += (size_t)items[i].n * (size_t)(items[i].H / hpi) * 2u * (size_t)(items[i].start + items[i].n) *
                (size_t)items[i].hd * (size_t)hpi;
    }
    attn_job j = {.a = items, .first = first, .count = count, .hpi = hpi, .stride = stride};
    size_t n_items = first[count], item = n_items ? work / n_items : 0;
    size_t min_items = item ? (SEER_PAR_WORK / 2 + item - 1) / item : 1;
    seer_pool_for(p, n_items, min_items ? min_items : 1, attention_chunk, &j);
    if (first != first_stack) free(first);
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
