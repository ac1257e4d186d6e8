/* The SIMD kernels of engine/model (kernels.c, kernels_x86.c) against float64 references computed here:
 * exp, SiLU, softmax rows, RMSNorm, prefill attention (the small-head AVX-512 kernel and the
 * BLAS one, with GQA, sliding windows, soft-capping, a cache offset and ragged sizes), the
 * per-token attention kernel (decode: grouped heads, the same bits for any thread count and as
 * the hooked path's operations), the per-token linear kernels (bit for bit across tokens,
 * threads and row tasks) and the AMX linear layer for bf16 weights (skipped, and said so, on CPUs without AMX). On a CPU
 * without AVX-512 the same calls run the AVX2 or portable code, which must meet the same bounds. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_private.h"
#include "model/weight_load.h"

#include "test_rand.h"

Test(kernels, exp_matches_libm_and_sums) {
    enum { N = 1001 };
    static float v[N];
    for (int i = 0; i < N; i++) v[i] = -100.0f + 110.0f * (float)i / (N - 1);
    static float x[N];
    memcpy(x, v, sizeof v);
    float s = seer_k_exp_sub_sum(v, N, 2.5f);
    double ref = 0;
    for (int i = 0; i < N; i++) {
        float e = expf(x[i] - 2.5f);
        ref += e;
        if (x[i] - 2.5f < -87.34f) {
            cr_assert(v[i] == 0.0f || fabsf(v[i] - e) <= 2e-38f, "exp(%g) = %g, expf %g", x[i] - 2.5, v[i], e);
        } else if (x[i] - 2.5f > -87.33f) {
            cr_assert(fabsf(v[i] - e) <= 3e-7f * e, "exp(%g) = %.9g, expf %.9g", x[i] - 2.5, v[i], e);
        }
    }
    cr_assert(fabs(s - ref) <= 1e-6 * ref, "sum %.9g vs %.9g", s, ref);
}

Test(kernels, silu_mul) {
    enum { N = 77 };
    float g[N], u[N], g0[N];
    for (int i = 0; i < N; i++) {
        g0[i] = g[i] = nrand() * 6;
        u[i] = nrand();
    }
    seer_k_silu_mul(g, u, N);
    for (int i = 0; i < N; i++) {
        double r = (double)g0[i] / (1.0 + exp(-(double)g0[i])) * u[i];
        cr_assert(fabs(g[i] - r) <= 1e-6 * (fabs(r) + 1e-6), "%d: %g vs %g", i, g[i], r);
    }
}

Test(kernels, softmax_row_ranges_and_softcap) {
    enum { L = 45 };
    for (int cap = 0; cap < 2; cap++)
        for (int f = 0; f < 20; f += 7)
            for (int l = f; l < L; l += 9) {
                float row[L], in[L];
                for (int i = 0; i < L; i++) row[i] = in[i] = nrand() * 8;
                float softcap = cap ? 5.0f : 0.0f;
                seer_k_softmax_row(row, f, l, L, softcap);
                double mx = -INFINITY, sum = 0;
                for (int i = f; i <= l; i++) {
                    double s = cap ? tanh(in[i] / softcap) * softcap : in[i];
                    if (s > mx) mx = s;
                }
                for (int i = f; i <= l; i++) sum += exp((cap ? tanh(in[i] / softcap) * softcap : in[i]) - mx);
                for (int i = 0; i < L; i++) {
                    double r = i < f || i > l ? 0.0 : exp((cap ? tanh(in[i] / softcap) * softcap : in[i]) - mx) / sum;
                    cr_assert(fabs(row[i] - r) <= 1e-6 * r + 1e-9, "f %d l %d i %d: %g vs %g", f, l, i, row[i], r);
                }
            }
}

/* The vector paths of the softmax (AVX-512, AVX2) give the portable loop's bits: the maximum
 * (anywhere: in the vector part or the tail, among -inf entries), the sum of exps, one product
 * per entry; a row holding a NaN comes out all NaN. */
Test(kernels, softmax_row_bits_as_the_portable_loop) {
    enum { L = 53 };
    int checked = 0;
    for (int n = 1; n <= L; n++)
        for (int at = 0; at < n; at += 1 + n / 6)
            for (int kind = 0; kind < 3; kind++) {
                float row[L], want[L];
                for (int i = 0; i < n; i++) row[i] = nrand() * 4 - 2;
                row[at] = 9.5f; /* the maximum */
                if (kind == 1)
                    for (int i = 0; i < n; i += 3)
                        if (i != at) row[i] = -INFINITY; /* masked */
                if (kind == 2) row[(at * 7 + 3) % n] = NAN;
                memcpy(want, row, sizeof row);
                float mx = -INFINITY;
                for (int i = 0; i < n; i++)
                    if (want[i] > mx) mx = want[i];
                float inv = 1.0f / seer_k_exp_sub_sum(want, n, mx);
                for (int i = 0; i < n; i++) want[i] *= inv;
                seer_k_softmax_row(row, 0, n - 1, n, 0.0f);
                for (int i = 0; i < n; i++) {
                    if (kind == 2) cr_assert(isnan(row[i]) && isnan(want[i]), "n %d: entry %d of a row with a NaN is %g", n, i, row[i]);
                    else cr_assert(!memcmp(&row[i], &want[i], sizeof(float)), "n %d max at %d kind %d: entry %d %.9g, the loop's %.9g", n, at, kind, i, row[i], want[i]);
                }
                checked++;
            }
    cr_assert(checked > 400);
}

/* Widening 16-bit weights for the GEMM path: every one of the 65536 bf16 and f16 values
 * (infinities, subnormals, NaNs: a NaN, F16C sets a signalling one's quiet bit) gives the scalar
 * conversion's bits, at every tail length, and nothing past the end is written. */
Test(kernels, widen16_every_value) {
    enum { N = 65536 + 13 };
    uint16_t *src = malloc(sizeof(uint16_t) * N);
    float *dst = malloc(sizeof(float) * N), *want = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) src[i] = (uint16_t)(i * 40503u); /* odd: every value once in the first 65536 */
    for (int bf16 = 0; bf16 < 2; bf16++) {
        for (int i = 0; i < N; i++) want[i] = bf16 ? seer_bf16_to_f32(src[i]) : seer_f16_to_f32(src[i]);
        for (int len = N - 15; len <= N; len++) {
            memset(dst, 0xff, sizeof(float) * N);
            seer_k_widen16(dst, src, (size_t)len, bf16);
            for (int i = 0; i < N; i++) {
                uint32_t g, w = 0xffffffffu;
                memcpy(&g, &dst[i], 4);
                if (i < len) memcpy(&w, &want[i], 4);
                if (i < len && isnan(want[i]) && isnan(dst[i])) continue; /* F16C quiets a signalling NaN */
                if (g != w)
                    cr_assert_fail("%s %04x at %d (length %d): %08x, want %08x (past the end: never written)", bf16 ? "bf16" : "f16",
                             src[i], i, len, g, w);
            }
        }
    }
    free(src), free(dst), free(want);
}

Test(kernels, rmsnorm_all_weight_dtypes) {
    enum { N = 3, D = 67 };
    float x[N * D], y[N * D], wf[D];
    uint16_t wb[D], wh[D];
    for (int i = 0; i < N * D; i++) x[i] = nrand() * 3;
    for (int i = 0; i < D; i++) {
        wf[i] = nrand();
        wb[i] = seer_f32_to_bf16(wf[i]);
        wh[i] = seer_f32_to_f16(wf[i]);
    }
    seer_weight_t ws[3] = {{.dtype = SEER_F32, .data = wf, .rows = 1, .cols = D},
                           {.dtype = SEER_BF16, .data = wb, .rows = 1, .cols = D},
                           {.dtype = SEER_F16, .data = wh, .rows = 1, .cols = D}};
    for (int k = 0; k < 3; k++)
        for (int one_plus = 0; one_plus < 2; one_plus++) {
            seer_k_rmsnorm(y, x, N, D, &ws[k], 1e-5f, one_plus);
            for (int t = 0; t < N; t++) {
                double ss = 0;
                for (int i = 0; i < D; i++) ss += (double)x[t * D + i] * x[t * D + i];
                double inv = 1.0 / sqrt(ss / D + 1e-5);
                for (int i = 0; i < D; i++) {
                    double w = k == 0 ? wf[i] : k == 1 ? seer_bf16_to_f32(wb[i]) : seer_f16_to_f32(wh[i]);
                    double r = x[t * D + i] * inv * (one_plus ? 1 + w : w);
                    cr_assert(fabs(y[t * D + i] - r) <= 1e-6 * (fabs(r) + 1e-3), "dtype %d: %g vs %g", k, y[t * D + i], r);
                }
            }
        }
}

/* float64 reference of seer_attn_params_t's contract */
static void attention_ref(const seer_attn_params_t *a, double *out) {
    int qd = a->H * a->hd, kvd = a->KH * a->hd, group = a->H / a->KH, L = a->start + a->n;
    double *s = malloc(sizeof(double) * (size_t)L);
    for (int t = 0; t < a->n; t++)
        for (int h = 0; h < a->H; h++) {
            int pos = a->start + t, kv = (h / group) * a->hd;
            double mx = -INFINITY, sum = 0;
            for (int p = 0; p < L; p++) {
                int vis = p <= pos && !(a->window > 0 && pos - p >= a->window);
                if (!vis) {
                    s[p] = -INFINITY;
                    continue;
                }
                double d = 0;
                for (int i = 0; i < a->hd; i++) d += (double)a->q[t * qd + h * a->hd + i] * a->kc[p * kvd + kv + i];
                d *= a->scale;
                if (a->softcap > 0) d = tanh(d / a->softcap) * a->softcap;
                s[p] = d;
                if (d > mx) mx = d;
            }
            for (int p = 0; p < L; p++) sum += s[p] == -INFINITY ? 0 : exp(s[p] - mx);
            for (int i = 0; i < a->hd; i++) {
                double o = 0;
                for (int p = 0; p < L; p++)
                    if (s[p] != -INFINITY) o += exp(s[p] - mx) / sum * a->vc[p * kvd + kv + i];
                out[t * qd + h * a->hd + i] = o;
            }
        }
    free(s);
}

Test(kernels, prefill_attention_against_float64) {
    seer_pool_t *pool = seer_pool_new(2);
    static const int hds[] = {4, 8, 16, 32};
    static const int heads[][2] = {{4, 2}, {3, 1}, {2, 2}};
    static const int ns[] = {16, 37};
    int checked = 0;
    for (size_t a1 = 0; a1 < sizeof hds / sizeof *hds; a1++)
        for (size_t a2 = 0; a2 < 3; a2++)
            for (size_t a3 = 0; a3 < 2; a3++)
                for (int start = 0; start <= 5; start += 5)
                    for (int window = 0; window <= 7; window += 7)
                        for (int cap = 0; cap < 2; cap++) {
                            int hd = hds[a1], H = heads[a2][0], KH = heads[a2][1], n = ns[a3], L = start + n;
                            int qd = H * hd, kvd = KH * hd;
                            float *q = malloc(sizeof(float) * (size_t)(n * qd)), *kc = malloc(sizeof(float) * (size_t)(L * kvd));
                            float *vc = malloc(sizeof(float) * (size_t)(L * kvd)), *out = malloc(sizeof(float) * (size_t)(n * qd));
                            float *scratch = malloc(sizeof(float) * (size_t)(2 * L));
                            double *ref = malloc(sizeof(double) * (size_t)(n * qd));
                            for (int i = 0; i < n * qd; i++) q[i] = nrand() * 2;
                            for (int i = 0; i < L * kvd; i++) {
                                kc[i] = nrand() * 2;
                                vc[i] = nrand();
                            }
                            seer_attn_params_t a = {.q = q, .kc = kc, .vc = vc, .out = out, .scratch = scratch,
                                                    .n = n, .start = start, .max_len = L, .H = H, .KH = KH, .hd = hd,
                                                    .window = window, .scale = 1.0f / sqrtf((float)hd),
                                                    .softcap = cap ? 3.0f : 0.0f};
                            seer_k_attention(pool, &a);
                            attention_ref(&a, ref);
                            for (int i = 0; i < n * qd; i++)
                                cr_assert(fabs(out[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])),
                                          "hd %d H %d KH %d n %d start %d window %d softcap %d: out[%d] = %.8g, "
                                          "float64 %.8g",
                                          hd, H, KH, n, start, window, cap, i, out[i], ref[i]);
                            free(q), free(kc), free(vc), free(out), free(scratch), free(ref);
                            checked++;
                        }
    cr_assert_eq(checked, 4 * 3 * 2 * 2 * 2 * 2);
    seer_pool_free(pool);
}

/* Prefill attention on seer's own GEMM micro-kernel (kernels_gemm.c, where it runs): against
 * float64 for head sizes of whole and cut 32-dimension panels (64, 80, 128), several 64-query
 * blocks with a short last one, a cache offset, sliding windows that cut the blocks' keys at
 * places that are and are not multiples of 32, soft-capping, P V over more than one 1024-key chunk,
 * f32 and bf16 caches (the reference
 * widens the same bf16 values); and a prompt's rest after a beginning of 64 or 128 positions (a
 * second call from there on the same cache) gives each row the bits the whole prompt's call gave
 * it, with and without a window. */
Test(kernels, own_attention_against_float64_and_rest_of_prompt_bits) {
    if (!seer_k_gemm_own()) cr_skip_test("skipped: seer's own GEMM runs on Intel CPUs with AVX-512 (OpenBLAS's sgemm here)");
    seer_pool_t *pool = seer_pool_new(2);
    static const int hds[] = {64, 80, 128};
    static const int windows[] = {0, 50, 100};
    int checked = 0;
    for (int a1 = 0; a1 < 3; a1++)
        for (int w = 0; w < 3; w++)
            for (int st = 0; st < 3; st++)
                for (int bf = 0; bf < 2; bf++) {
                    int start = st == 0 ? 0 : st == 1 ? 40 : 1000; /* 1000: P V over more than one 1024-key chunk */
                    int hd = hds[a1], H = 4, KH = 2, n = 150, L = start + n, qd = H * hd, kvd = KH * hd;
                    float *q = malloc(sizeof(float) * (size_t)(n * qd)), *kc = malloc(sizeof(float) * (size_t)(L * kvd));
                    float *vc = malloc(sizeof(float) * (size_t)(L * kvd)), *out = malloc(sizeof(float) * (size_t)(n * qd));
                    float *out2 = malloc(sizeof(float) * (size_t)(n * qd)), *scratch = malloc(sizeof(float) * (size_t)(2 * L));
                    uint16_t *k16 = malloc(sizeof(uint16_t) * (size_t)(L * kvd)), *v16 = malloc(sizeof(uint16_t) * (size_t)(L * kvd));
                    double *ref = malloc(sizeof(double) * (size_t)(n * qd));
                    for (int i = 0; i < n * qd; i++) q[i] = nrand() * 2;
                    for (int i = 0; i < L * kvd; i++) {
                        kc[i] = nrand() * 2, vc[i] = nrand();
                        if (bf) kc[i] = seer_bf16_to_f32(k16[i] = seer_f32_to_bf16(kc[i])), vc[i] = seer_bf16_to_f32(v16[i] = seer_f32_to_bf16(vc[i]));
                    }
                    seer_attn_params_t a = {.q = q, .kc = bf ? NULL : kc, .vc = bf ? NULL : vc, .kc16 = bf ? k16 : NULL,
                                            .vc16 = bf ? v16 : NULL, .out = out, .scratch = scratch, .n = n, .start = start,
                                            .max_len = L, .H = H, .KH = KH, .hd = hd, .window = windows[w],
                                            .scale = 1.0f / sqrtf((float)hd), .softcap = w == 1 ? 3.0f : 0.0f};
                    cr_assert(seer_k_attention_own(pool, &a));
                    seer_attn_params_t r = a;
                    r.kc = kc, r.vc = vc, r.kc16 = r.vc16 = NULL; /* the reference reads f32 */
                    attention_ref(&r, ref);
                    /* f32 sums over up to 1150 keys in order: the rounding error grows with the
                     * keys summed (1.3e-5 on an output of 0.24 at 1150 keys) */
                    double keys = windows[w] ? windows[w] : L, tol = 1e-5 * (keys > 512 ? keys / 512 : 1);
                    for (int i = 0; i < n * qd; i++)
                        cr_assert(fabs(out[i] - ref[i]) <= tol * (1 + fabs(ref[i])),
                                  "hd %d start %d window %d bf16 cache %d: out[%d] = %.8g, float64 %.8g", hd, start, windows[w], bf,
                                  i, out[i], ref[i]);
                    for (int lead = 64; lead <= 128 && start == 0; lead += 64) {
                        seer_attn_params_t b = a;
                        b.q = q + (size_t)lead * (size_t)qd, b.out = out2, b.n = n - lead, b.start = lead;
                        cr_assert(seer_k_attention_own(pool, &b));
                        cr_assert(!memcmp(out2, out + (size_t)lead * (size_t)qd, sizeof(float) * (size_t)(n - lead) * (size_t)qd),
                                  "hd %d window %d bf16 cache %d: the rest after %d positions differs from the whole call's rows",
                                  hd, windows[w], bf, lead);
                    }
                    free(q), free(kc), free(vc), free(out), free(out2), free(scratch), free(k16), free(v16), free(ref);
                    checked++;
                }
    cr_assert_eq(checked, 3 * 3 * 3 * 2);
    seer_pool_free(pool);
}

/* precision = "fast" with AVX512_BF16: VDPBF16PS on activations rounded to bf16 (kernels_x86.c).
 * The reference rounds the activations the same way (seer_f32_to_bf16, round to nearest even) and
 * sums in float64; what is left is f32 accumulation. Every token count (the streamed decode kernel
 * at 1-4, tiles with edges past that, token blocks past DP_TB = 64), rows that leave 4-row tiles'
 * edges, bias or not; each token's outputs are the same bits as the token alone (a batched decode
 * step or a prefill gives a sequence what it gets by itself); and it stays out when fast is off. */
static void check_dpbf16_fast(void) {
    if (!__builtin_cpu_supports("avx512bf16") || !seer_k_have_avx512())
        cr_skip_test("skipped: this CPU has no AVX512_BF16; precision = \"fast\" runs the default kernels here");
    setenv("SEER_FAST_DPBF16", "1", 1); /* the kernels on any CPU with VDPBF16PS (Intel's default is off) */
    seer_pool_t *pool = seer_pool_new(2);
    static const int ns[] = {1, 2, 3, 4, 5, 7, 16, 19, 70, 133};
    static const int rows_[] = {4, 67, 130};
    static const int cols_[] = {32, 96, 1024};
    uint16_t w[130 * 1024], bias[130];
    float *x = malloc(sizeof(float) * 133 * 1024), *y = malloc(sizeof(float) * 133 * 130), y1[130];
    seer_weight_t W0 = {.dtype = SEER_BF16, .data = w, .rows = 4, .cols = 32};
    seer_k_fast_bf16 = 0;
    cr_assert_eq(seer_k_linear_dpbf16(pool, y, x, 16, &W0, NULL), 0, "ran without precision = \"fast\"");
    seer_k_fast_bf16 = 1;
    W0.cols = 40;
    cr_assert_eq(seer_k_linear_dpbf16(pool, y, x, 16, &W0, NULL), 0, "ran on cols that are not a multiple of 32");
    for (int a = 0; a < 10; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 3; c++)
                for (int with_bias = 0; with_bias < 2; with_bias++) {
                    int n = ns[a], rows = rows_[b], cols = cols_[c];
                    for (int i = 0; i < rows * cols; i++) w[i] = seer_f32_to_bf16(nrand() * 0.1f);
                    for (int i = 0; i < n * cols; i++) x[i] = nrand() * 3;
                    for (int i = 0; i < rows; i++) bias[i] = seer_f32_to_bf16(nrand());
                    seer_weight_t W = {.dtype = SEER_BF16, .data = w, .rows = rows, .cols = cols};
                    seer_weight_t B = {.dtype = SEER_BF16, .data = bias, .rows = 1, .cols = rows};
                    memset(y, 0xff, sizeof(float) * (size_t)(n * rows)); /* NaN: an output never written shows */
                    cr_assert(seer_k_linear_dpbf16(pool, y, x, n, &W, with_bias ? &B : NULL));
                    for (int t = 0; t < n; t++) {
                        for (int r = 0; r < rows; r++) {
                            double ref = with_bias ? seer_bf16_to_f32(bias[r]) : 0, mag = fabs(ref);
                            for (int i = 0; i < cols; i++) {
                                double p = (double)seer_bf16_to_f32(w[r * cols + i]) *
                                           seer_bf16_to_f32(seer_f32_to_bf16(x[t * cols + i]));
                                ref += p;
                                mag += fabs(p);
                            }
                            cr_assert(fabs(y[t * rows + r] - ref) <= 1e-6 * mag + 1e-6, "n %d rows %d cols %d: y[%d][%d] = %.8g, float64 %.8g",
                                      n, rows, cols, t, r, y[t * rows + r], ref);
                        }
                        if (n == 1) continue;
                        cr_assert(seer_k_linear_dpbf16(pool, y1, x + (size_t)t * cols, 1, &W, with_bias ? &B : NULL));
                        cr_assert(!memcmp(y1, y + (size_t)t * rows, sizeof(float) * (size_t)rows),
                                  "n %d rows %d cols %d: token %d's outputs differ from the token alone", n, rows, cols, t);
                    }
                }
    seer_k_fast_bf16 = 0;
    free(x), free(y);
    seer_pool_free(pool);
}
Test(kernels, dpbf16_linear_fast_precision) { check_dpbf16_fast(); }
/* The one-token kernels come with and without their software prefetch (seer_k_row_prefetch: off
 * by default on AMD CPUs with AVX-512); both give the bits the batched kernels give each token. */
Test(kernels, dpbf16_linear_fast_precision_row_prefetch_on) {
    setenv("SEER_ROW_PREFETCH", "1", 1);
    cr_assert_eq(seer_k_row_prefetch(), 1);
    check_dpbf16_fast();
}
Test(kernels, dpbf16_linear_fast_precision_row_prefetch_off) {
    setenv("SEER_ROW_PREFETCH", "0", 1);
    cr_assert_eq(seer_k_row_prefetch(), 0);
    check_dpbf16_fast();
}
/* Where VDPBF16PS runs by default: AMD CPUs with AVX512_BF16 (Intel's makes half the products a
 * cycle its FMAs do: fast runs the tiles with AMX, else what the default does), SEER_FAST_DPBF16
 * choosing otherwise; fast_kind says so, with the reason. */
Test(kernels, dpbf16_where_it_runs) {
    int bf16 = __builtin_cpu_supports("avx512bf16") && seer_k_have_avx512(), amd = __builtin_cpu_is("amd");
    const char *why = NULL, *kind = seer_k_fast_kind(&why);
    if (seer_k_have_amx()) cr_assert_str_eq(kind, "AMX");
    else if (bf16 && amd) cr_assert_str_eq(kind, "AVX512_BF16");
    else {
        cr_assert_null(kind);
        cr_assert(why && strstr(why, bf16 ? "half the products" : "neither AMX nor AVX512_BF16"), "why: %s", why ? why : "(null)");
    }
    uint16_t w[32 * 32];
    float x[32], y[32];
    for (int i = 0; i < 32 * 32; i++) w[i] = seer_f32_to_bf16(0.01f * (float)(i % 17));
    for (int i = 0; i < 32; i++) x[i] = (float)i;
    seer_weight_t W = {.dtype = SEER_BF16, .data = w, .rows = 32, .cols = 32};
    seer_pool_t *pool = seer_pool_new(1);
    seer_k_fast_bf16 = 1;
    cr_assert_eq(seer_k_linear_dpbf16(pool, y, x, 1, &W, NULL), bf16 && amd);
    seer_k_fast_bf16 = 0;
    seer_pool_free(pool);
}
Test(kernels, dpbf16_forced_off) {
    setenv("SEER_FAST_DPBF16", "0", 1);
    const char *why = NULL;
    if (!seer_k_have_amx()) cr_assert_null(seer_k_fast_kind(&why));
    cr_assert(why != NULL);
}
Test(kernels, row_prefetch_default_and_bad_value) {
    setenv("SEER_ROW_PREFETCH", "yes", 1); /* neither 0 nor 1: a note on stderr, the CPU's default */
    cr_assert_eq(seer_k_row_prefetch(), !(__builtin_cpu_is("amd") && __builtin_cpu_supports("avx512f")));
}

/* seer_k_linear_multi (q, k and v; gate and up in one call): every matrix's outputs the bits of
 * its own seer_k_linear / seer_k_linear_rows call, in precision = "fast" (one pass: x packed
 * once, one loop over every matrix's rows) and in the default precision (the per-token kernels
 * one call each; the GEMM path, taken here from 16 tokens, one job of every matrix's blocks), for
 * the streamed (1-4 tokens) and tiled token counts, rows that leave short tasks and tiles, with
 * and without bias, 1 to 3 threads and enough rows that the loop is split; more matrices than
 * the fused path takes run one call each. */
Test(kernels, linear_multi_same_bits_as_one_call_each) {
    seer_pool_t *pools[3] = {seer_pool_new(1), seer_pool_new(2), seer_pool_new(3)};
    static const int ns[] = {1, 2, 4, 5, 13, 16, 17};
    static const int rows_[5] = {1024, 256, 67, 256, 1};
    enum { COLS = 256, NMAX = 17, RMAX = 1024 };
    uint16_t *w[5], *b[5];
    seer_weight_t W[5], B[5];
    for (int i = 0; i < 5; i++) {
        w[i] = malloc(sizeof(uint16_t) * (size_t)rows_[i] * COLS);
        b[i] = malloc(sizeof(uint16_t) * (size_t)rows_[i]);
        for (int k = 0; k < rows_[i] * COLS; k++) w[i][k] = seer_f32_to_bf16(nrand() * 0.1f);
        for (int k = 0; k < rows_[i]; k++) b[i][k] = seer_f32_to_bf16(nrand());
        W[i] = (seer_weight_t){.dtype = SEER_BF16, .data = w[i], .rows = rows_[i], .cols = COLS};
        B[i] = (seer_weight_t){.dtype = SEER_BF16, .data = b[i], .rows = 1, .cols = rows_[i]};
    }
    float *x = malloc(sizeof(float) * NMAX * COLS), *want = malloc(sizeof(float) * NMAX * RMAX);
    float *got[5];
    for (int i = 0; i < 5; i++) got[i] = malloc(sizeof(float) * NMAX * RMAX);
    for (int k = 0; k < NMAX * COLS; k++) x[k] = nrand() * 3;
    int checked = 0;
    for (int fast = 0; fast < 2; fast++)
        for (int count = 2; count <= 5; count++)
            for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
                for (int gemm = 0; gemm < 2; gemm++)
                    for (int with_bias = 0; with_bias < 2; with_bias++)
                        for (int k = 0; k < 3; k++) {
                            int n = ns[a];
                            seer_k_fast_bf16 = fast;
                            float *ys[5];
                            const seer_weight_t *ws[5], *bs[5];
                            for (int i = 0; i < count; i++) {
                                ys[i] = got[i];
                                ws[i] = &W[i];
                                bs[i] = with_bias && i != 1 ? &B[i] : NULL;
                                memset(got[i], 0xff, sizeof(float) * (size_t)n * (size_t)rows_[i]);
                            }
                            /* gemm: the whole call's token count as paths, the GEMM path from 16
                             * tokens (as seer_k_linear decides); else the per-token kernels */
                            int old_min = seer_k_gemm_min_override(SEER_BLAS_MIN_TOKENS);
                            seer_k_linear_multi(pools[k], count, ys, x, n, ws, bs, gemm ? n : 0);
                            for (int i = 0; i < count; i++) {
                                if (gemm) seer_k_linear(pools[0], want, x, n, ws[i], bs[i]);
                                else seer_k_linear_rows(pools[0], want, x, n, ws[i], bs[i]);
                                cr_assert(!memcmp(want, got[i], sizeof(float) * (size_t)n * (size_t)rows_[i]),
                                          "fast %d, %d matrices, %d tokens, gemm %d, bias %d, %d thread(s): matrix %d "
                                          "differs from its own call",
                                          fast, count, n, gemm, with_bias, k + 1, i);
                            }
                            seer_k_gemm_min_override(old_min);
                            checked++;
                        }
    seer_k_fast_bf16 = 0;
    cr_assert_eq(checked, 2 * 4 * 7 * 2 * 2 * 3);
    for (int i = 0; i < 5; i++) free(w[i]), free(b[i]), free(got[i]);
    free(x), free(want);
    for (int k = 0; k < 3; k++) seer_pool_free(pools[k]);
}

/* RMSNorm against its definition, bit for bit on x86 with AVX2 or AVX-512: the mean square summed
 * in double over 16 lanes (element i in lane i % 16 while 16 remain), the lanes reduced as
 * 8 + 8, 4 + 4, 2 + 2, 1 + 1, the rest added in order; then y = (x * inv) * (w, or 1 + w). Rows
 * shorter than, equal to and longer than 16, tails of every length mod 16 and 8, f32, bf16 and
 * f16 weights, both forms of the weight, y aliasing x. Elsewhere (the portable loop) within a
 * float's rounding. */
static void rmsnorm_ref(float *y, const float *x, int d, const float *wf, float eps, int one_plus) {
    double lane[16] = {0}, s8[8], u4[4], v2[2];
    int i = 0;
    for (; i + 16 <= d; i += 16)
        for (int k = 0; k < 16; k++) lane[k] += (double)x[i + k] * x[i + k];
    for (int k = 0; k < 8; k++) s8[k] = lane[k] + lane[k + 8];
    for (int k = 0; k < 4; k++) u4[k] = s8[k + 4] + s8[k];
    for (int k = 0; k < 2; k++) v2[k] = u4[k + 2] + u4[k];
    double ss = v2[0] + v2[1];
    for (; i < d; i++) ss += (double)x[i] * x[i];
    float inv = 1.0f / sqrtf((float)(ss / d) + eps);
    for (int j = 0; j < d; j++) y[j] = (x[j] * inv) * (one_plus ? 1.0f + wf[j] : wf[j]);
}

Test(kernels, rmsnorm_bits_on_every_path) {
    static const int ds[] = {1, 7, 8, 15, 16, 17, 24, 31, 64, 100, 1024, 2304, 4099};
    static const seer_dtype_t dts[3] = {SEER_F32, SEER_BF16, SEER_F16};
    enum { DMAX = 4099, N = 3 };
    int exact = seer_k_have_avx2();
    float *x = malloc(sizeof(float) * N * DMAX), *y = malloc(sizeof(float) * N * DMAX), *want = malloc(sizeof(float) * DMAX);
    float *wf = malloc(sizeof(float) * DMAX), *w32 = malloc(sizeof(float) * DMAX);
    uint16_t *w16 = malloc(sizeof(uint16_t) * DMAX);
    int checked = 0;
    for (size_t a = 0; a < sizeof ds / sizeof *ds; a++)
        for (int dt = 0; dt < 3; dt++)
            for (int one_plus = 0; one_plus < 2; one_plus++)
                for (int alias = 0; alias < 2; alias++) {
                    int d = ds[a];
                    for (int i = 0; i < d; i++) {
                        float v = nrand() * 0.5f + (one_plus ? 0.0f : 1.0f);
                        if (dts[dt] == SEER_F32) wf[i] = w32[i] = v;
                        else if (dts[dt] == SEER_BF16) wf[i] = seer_bf16_to_f32(w16[i] = seer_f32_to_bf16(v));
                        else wf[i] = seer_f16_to_f32(w16[i] = seer_f32_to_f16(v));
                    }
                    for (int i = 0; i < N * d; i++) x[i] = nrand() * (float)(1 + i % 13) * (i % 97 == 0 ? 300.0f : 1.0f);
                    seer_weight_t W = {.dtype = dts[dt], .data = dts[dt] == SEER_F32 ? (void *)w32 : (void *)w16, .rows = 1, .cols = d};
                    float *out = alias ? x : y;
                    float *xin = malloc(sizeof(float) * N * (size_t)d);
                    memcpy(xin, x, sizeof(float) * N * (size_t)d);
                    seer_k_rmsnorm(out, x, N, d, &W, 1e-5f, one_plus);
                    for (int t = 0; t < N; t++) {
                        rmsnorm_ref(want, xin + (size_t)t * d, d, wf, 1e-5f, one_plus);
                        for (int i = 0; i < d; i++) {
                            float got = out[(size_t)t * d + i];
                            if (exact)
                                cr_assert(!memcmp(&got, &want[i], sizeof got),
                                          "d %d dtype %d one_plus %d alias %d: y[%d][%d] = %.9g, by definition %.9g", d,
                                          (int)dts[dt], one_plus, alias, t, i, got, want[i]);
                            else
                                cr_assert(fabsf(got - want[i]) <= 4e-7f * fabsf(want[i]) + 1e-30f, "d %d: y[%d][%d] = %.9g, %.9g", d, t, i, got,
                                          want[i]);
                        }
                    }
                    free(xin);
                    checked++;
                }
    cr_assert_eq(checked, 13 * 3 * 2 * 2);
    /* The order of the additions, made visible: rows whose large squares sum exactly to d times a
     * float midpoint (2 + 2^-23: rounded to even, down to 2, whose 1 / sqrt differs from the float
     * above's) and squares of 2^-48 that a lane holding 64 absorbs but lanes holding less keep,
     * which then add up to a float-visible amount (the mean rounds up) or not, by where they sit.
     * The sequential sum, or another pairing of the lanes, gives other floats in some rows. */
    if (exact) {
        /* squares summing to 64 + 2^-18, 80 + 5 * 2^-20 and 128 + 2^-17: d * (2 + 2^-23) */
        static const float bigs[3][4] = {{8, 0x1p-9f}, {8, 4, 0x1p-9f, 0x1p-10f}, {8, 8, 0x1p-9f, 0x1p-9f}};
        const float inv_down = 1.0f / sqrtf(2.0f);
        int ups = 0, downs = 0;
        for (int cfg = 0; cfg < 3; cfg++) {
            int d = cfg == 0 ? 32 : cfg == 1 ? 40 : 64, nb = cfg == 0 ? 2 : 4;
            for (int i = 0; i < d; i++) w32[i] = 1.0f;
            seer_weight_t W = {.dtype = SEER_F32, .data = w32, .rows = 1, .cols = d};
            for (int trial = 0; trial < 600; trial++) {
                int pos[64];
                for (int i = 0; i < d; i++) pos[i] = i;
                for (int i = d - 1; i > 0; i--) { /* a random order of the positions */
                    int j = (int)(urand() * (i + 1)), tmp = pos[i];
                    pos[i] = pos[j], pos[j] = tmp;
                }
                memset(x, 0, sizeof(float) * (size_t)d);
                for (int b = 0; b < nb; b++) x[pos[b]] = (urand() < 0.5 ? -1 : 1) * bigs[cfg][b];
                int smalls = 1 + (int)(urand() * 14);
                for (int k = 0; k < smalls; k++) x[pos[nb + k]] = (urand() < 0.5 ? -1 : 1) * 0x1p-24f;
                seer_k_rmsnorm(y, x, 1, d, &W, 0.0f, 0);
                rmsnorm_ref(want, x, d, w32, 0.0f, 0);
                cr_assert(!memcmp(y, want, sizeof(float) * (size_t)d), "d %d trial %d: the additions were not made in the definition's order",
                          d, trial);
                if (want[pos[0]] != x[pos[0]] * inv_down) ups++; /* x[pos[0]] is +-8: exact */
                else downs++;
            }
        }
        cr_assert(ups > 100 && downs > 100, "the rows must round both ways (%d up, %d down)", ups, downs);
    }
    free(x), free(y), free(want), free(wf), free(w32), free(w16);
}

/* OpenBLAS's GEMM path over several matrices (seer_k_linear_blas_multi: every matrix's 256-row
 * blocks in one job, so k and v of a grouped-query layer no longer run on one thread while the
 * others wait): each matrix's outputs the bits of its own seer_k_linear_blas call, for f32, bf16
 * and f16 weights, matrices of one block, several, and a short tail block, widths under and over
 * sgemm's K block, with and without bias, a prompt's rest after a shared beginning (lead: the
 * zero rows in front), 1 to 3 threads; and seer_k_linear_multi on the GEMM path the same. */
Test(kernels, linear_multi_blas_same_bits_as_one_call_each) {
    if (!seer_k_linear_blas(NULL, (float[1]){0}, (float[1]){1}, 1,
                            &(seer_weight_t){.dtype = SEER_F32, .data = (float[1]){1}, .rows = 1, .cols = 1}, NULL, 0))
        cr_skip_test("skipped: no OpenBLAS (Debian's libopenblas0-pthread); `make setup` installs it");
    int old_min = seer_k_gemm_min_override(SEER_BLAS_MIN_TOKENS); /* the GEMM path from 16 tokens */
    seer_pool_t *pools[3] = {seer_pool_new(1), seer_pool_new(2), seer_pool_new(3)};
    static const int rows_[4] = {600, 256, 13, 1024};
    static const int cols_[2] = {96, 300};
    static const int ns[3] = {16, 17, 70};
    static const int leads[3] = {0, 5, 24};
    static const seer_dtype_t dts[3] = {SEER_F32, SEER_BF16, SEER_F16};
    enum { NMAX = 70, RMAX = 1024, CMAX = 300, LMAX = 24 };
    void *w[4], *b[4];
    for (int i = 0; i < 4; i++) {
        w[i] = malloc(sizeof(float) * (size_t)rows_[i] * CMAX);
        b[i] = malloc(sizeof(float) * (size_t)rows_[i]);
    }
    /* xl: a beginning of up to LMAX rows (of any width up to CMAX), then the rows x points at */
    float *xl = malloc(sizeof(float) * (LMAX + NMAX) * CMAX), *x = xl + (size_t)LMAX * CMAX;
    float *want = malloc(sizeof(float) * NMAX * RMAX), *whole = malloc(sizeof(float) * (LMAX + NMAX) * RMAX), *got[4];
    for (int i = 0; i < 4; i++) got[i] = malloc(sizeof(float) * NMAX * RMAX);
    for (int k = 0; k < (LMAX + NMAX) * CMAX; k++) xl[k] = nrand() * 3;
    int checked = 0, wholes = 0, period = seer_k_blas_row_period();
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < 2; c++) {
            seer_weight_t W[4], B[4];
            for (int i = 0; i < 4; i++) {
                size_t nw = (size_t)rows_[i] * (size_t)cols_[c];
                for (size_t k = 0; k < nw; k++) {
                    float v = nrand() * 0.1f;
                    if (dts[d] == SEER_F32) ((float *)w[i])[k] = v;
                    else ((uint16_t *)w[i])[k] = dts[d] == SEER_BF16 ? seer_f32_to_bf16(v) : seer_f32_to_f16(v);
                }
                for (int k = 0; k < rows_[i]; k++) ((float *)b[i])[k] = nrand();
                W[i] = (seer_weight_t){.dtype = dts[d], .data = w[i], .rows = rows_[i], .cols = cols_[c]};
                B[i] = (seer_weight_t){.dtype = SEER_F32, .data = b[i], .rows = 1, .cols = rows_[i]};
            }
            for (int count = 2; count <= 4; count++)
                for (int a = 0; a < 3; a++)
                    for (int l = 0; l < 3; l++)
                        for (int with_bias = 0; with_bias < 2; with_bias++)
                            for (int k = 0; k < 3; k++)
                                for (int via = 0; via < 2; via++) {
                                    int n = ns[a], lead = leads[l];
                                    float *ys[4];
                                    const seer_weight_t *ws[4], *bs[4];
                                    for (int i = 0; i < count; i++) {
                                        ys[i] = got[i];
                                        ws[i] = &W[i];
                                        bs[i] = with_bias && i != 1 ? &B[i] : NULL;
                                        memset(got[i], 0xff, sizeof(float) * (size_t)n * (size_t)rows_[i]);
                                    }
                                    if (via) seer_k_linear_multi(pools[k], count, ys, x, n, ws, bs, n + lead);
                                    else cr_assert(seer_k_linear_blas_multi(pools[k], count, ys, x, n, ws, bs, lead));
                                    for (int i = 0; i < count; i++) {
                                        /* seer_k_linear_multi: the bits of the matrix's own call on its GEMM
                                         * path, which is AMX's for bf16 on a CPU with AMX, else sgemm's */
                                        if (via) seer_k_linear_as(pools[0], want, x, n, ws[i], bs[i], 1, lead);
                                        else cr_assert(seer_k_linear_blas(pools[0], want, x, n, ws[i], bs[i], lead));
                                        cr_assert(!memcmp(want, got[i], sizeof(float) * (size_t)n * (size_t)rows_[i]),
                                                  "dtype %d, %d columns, %d matrices, %d tokens after %d, bias %d, %d thread(s), "
                                                  "%s: matrix %d differs from its own call",
                                                  (int)dts[d], cols_[c], count, n, lead, with_bias, k + 1,
                                                  via ? "seer_k_linear_multi" : "seer_k_linear_blas_multi", i);
                                        if (!lead || !period) continue;
                                        /* the rows after a beginning: the whole prompt's call's bits */
                                        const float *xw = x - (size_t)lead * (size_t)cols_[c];
                                        if (via) seer_k_linear_as(pools[0], whole, xw, lead + n, ws[i], bs[i], 1, 0);
                                        else cr_assert(seer_k_linear_blas(pools[0], whole, xw, lead + n, ws[i], bs[i], 0));
                                        cr_assert(!memcmp(whole + (size_t)lead * (size_t)rows_[i], got[i], sizeof(float) * (size_t)n * (size_t)rows_[i]),
                                                  "dtype %d, %d columns, %d matrices, %d tokens after %d, %d thread(s): matrix %d "
                                                  "differs from the whole prompt's rows", (int)dts[d], cols_[c], count, n, lead, k + 1, i);
                                        wholes++;
                                    }
                                    checked++;
                                }
        }
    cr_assert_eq(checked, 3 * 2 * 3 * 3 * 3 * 2 * 3 * 2);
    cr_assert(!period || wholes > 0);
    seer_k_gemm_min_override(old_min);
    for (int i = 0; i < 4; i++) free(w[i]), free(b[i]), free(got[i]);
    free(xl), free(want), free(whole);
    for (int k = 0; k < 3; k++) seer_pool_free(pools[k]);
}

/* seer's own GEMM (kernels_gemm.c: Intel CPUs with AVX-512): every output the bits of a scalar
 * fmaf loop over the inputs in order (the sums carried through y from one 1024-input chunk to the
 * next), for f32, bf16 and f16 weights, token counts around its 14-token groups, rows around its
 * 32-row panels and 256-row blocks (three matrices in one call: several blocks, one row, a panel
 * and one), widths around its 16-input steps and 1024-input chunks, 1 to 3 threads; and
 * seer_k_linear_blas (the GEMM path's linear layer) the same plus its bias. */
Test(kernels, own_gemm_bits_of_a_scalar_fma_loop) {
    if (!seer_k_gemm_own())
        cr_skip_test("skipped: seer's own GEMM runs on Intel CPUs with AVX-512 (unless SEER_OWN_GEMM=0); OpenBLAS's sgemm here");
    seer_pool_t *pools[3] = {seer_pool_new(1), seer_pool_new(2), seer_pool_new(3)};
    static const int rows_[3] = {600, 1, 33};
    static const int cols_[7] = {1, 7, 16, 33, 1024, 1025, 2100};
    static const int ns[6] = {1, 13, 14, 15, 29, 57};
    static const seer_dtype_t dts[3] = {SEER_F32, SEER_BF16, SEER_F16};
    enum { NMAX = 57, CMAX = 2100, RSUM = 634 };
    float *x = malloc(sizeof(float) * NMAX * CMAX), *wf = malloc(sizeof(float) * RSUM * CMAX), *bias = malloc(sizeof(float) * 600);
    float *want = malloc(sizeof(float) * NMAX * RSUM), *got = malloc(sizeof(float) * NMAX * RSUM);
    void *w = malloc(sizeof(float) * RSUM * CMAX);
    for (int k = 0; k < NMAX * CMAX; k++) x[k] = nrand() * 3;
    for (int k = 0; k < 600; k++) bias[k] = nrand();
    int checked = 0;
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < 7; c++) {
            int cols = cols_[c];
            for (int k = 0; k < RSUM * cols; k++) {
                float v = nrand() * 0.1f;
                if (dts[d] == SEER_F32) ((float *)w)[k] = wf[k] = v;
                else if (dts[d] == SEER_BF16) wf[k] = seer_bf16_to_f32(((uint16_t *)w)[k] = seer_f32_to_bf16(v));
                else wf[k] = seer_f16_to_f32(((uint16_t *)w)[k] = seer_f32_to_f16(v));
            }
            size_t es = dts[d] == SEER_F32 ? 4 : 2;
            seer_weight_t W[3];
            const seer_weight_t *ws[3];
            float *ys[3];
            for (int i = 0, r = 0; i < 3; r += rows_[i], i++) {
                W[i] = (seer_weight_t){.dtype = dts[d], .data = (const char *)w + (size_t)r * (size_t)cols * es, .rows = rows_[i], .cols = cols};
                ws[i] = &W[i];
            }
            for (int a = 0; a < 6; a++) {
                int n = ns[a];
                /* the reference: matrix i's rows at want + n * (rows before i) */
                for (int i = 0, r = 0; i < 3; r += rows_[i], i++)
                    for (int t = 0; t < n; t++)
                        for (int o = 0; o < rows_[i]; o++) {
                            float acc = 0.0f;
                            const float *wr = wf + (size_t)(r + o) * (size_t)cols, *xt = x + (size_t)t * (size_t)cols;
                            for (int k = 0; k < cols; k++) acc = fmaf(wr[k], xt[k], acc);
                            want[(size_t)n * (size_t)r + (size_t)t * (size_t)rows_[i] + (size_t)o] = acc;
                        }
                for (int k = 0; k < 3; k++) {
                    memset(got, 0xff, sizeof(float) * (size_t)n * RSUM);
                    for (int i = 0, r = 0; i < 3; r += rows_[i], i++) ys[i] = got + (size_t)n * (size_t)r;
                    cr_assert(seer_k_gemm_multi(pools[k], 3, ys, x, n, ws));
                    cr_assert(!memcmp(want, got, sizeof(float) * (size_t)n * RSUM),
                              "dtype %d, %d columns, %d tokens, %d thread(s): not the bits of a scalar fmaf loop", (int)dts[d], cols, n, k + 1);
                    /* the linear layer on the GEMM path: the same, then the bias */
                    seer_weight_t B = {.dtype = SEER_F32, .data = bias, .rows = 1, .cols = 600};
                    cr_assert(seer_k_linear_blas(pools[k], got, x, n, &W[0], &B, 0));
                    for (size_t e = 0; e < (size_t)n * 600; e++)
                        cr_assert(got[e] == want[e] + bias[e % 600], "dtype %d, %d columns, %d tokens, %d thread(s): linear "
                                  "layer output %zu is not the fmaf loop plus the bias", (int)dts[d], cols, n, k + 1, e);
                    checked++;
                }
            }
        }
    cr_assert_eq(checked, 3 * 7 * 6 * 3);
    free(x), free(wf), free(bias), free(want), free(got), free(w);
    for (int k = 0; k < 3; k++) seer_pool_free(pools[k]);
}

/* The prefill's elementwise steps over the pool (RMSNorm, residual adds with and without a
 * multiplier, SiLU-and-multiply with a length that is no multiple of 16, RoPE on q and k, partial
 * rotary): the bits of the serial calls, 1 to 3 threads, sizes on both sides of the threshold
 * from which they go over the pool. */
Test(kernels, elementwise_pool_steps_same_bits_as_serial) {
    seer_pool_t *pools[3] = {seer_pool_new(1), seer_pool_new(2), seer_pool_new(3)};
    enum { NMAX = 301, D = 1024, H = 8, KH = 2, HD = 64, ROT = 32 };
    size_t big = (size_t)NMAX * 2816 * 2 + 16; /* two SiLU inputs of the longest case */
    float *x = malloc(sizeof(float) * big), *a = malloc(sizeof(float) * big), *b = malloc(sizeof(float) * big);
    float *wv = malloc(sizeof(float) * D), *cs = malloc(sizeof(float) * NMAX * ROT / 2), *sn = malloc(sizeof(float) * NMAX * ROT / 2);
    for (size_t i = 0; i < big; i++) x[i] = nrand() * 2;
    for (int i = 0; i < D; i++) wv[i] = 1 + nrand() * 0.1f;
    for (int i = 0; i < NMAX * ROT / 2; i++) cs[i] = cosf(0.01f * (float)i), sn[i] = sinf(0.01f * (float)i);
    seer_weight_t W = {.dtype = SEER_F32, .data = wv, .rows = 1, .cols = D};
    static const int ns[3] = {3, 64, NMAX};
    for (int k = 0; k < 3; k++)
        for (int c = 0; c < 3; c++) {
            int n = ns[c];
            size_t e = (size_t)n * D;
            seer_k_rmsnorm(a, x, n, D, &W, 1e-5f, c == 1);
            seer_k_rmsnorm_pool(pools[k], b, x, n, D, &W, 1e-5f, c == 1);
            cr_assert(!memcmp(a, b, sizeof(float) * e), "rmsnorm, %d tokens, %d thread(s)", n, k + 1);
            for (int m = 0; m < 2; m++) {
                float mult = m ? 0.37f : 0.f;
                memcpy(a, x, sizeof(float) * e), memcpy(b, x, sizeof(float) * e);
                for (size_t i = 0; i < e; i++) a[i] += mult != 0.f ? x[e + i] * mult : x[e + i];
                seer_k_add_pool(pools[k], b, x + e, e, mult);
                cr_assert(!memcmp(a, b, sizeof(float) * e), "add (mult %g), %d tokens, %d thread(s)", mult, n, k + 1);
            }
            size_t se = (size_t)n * 2816 + 7; /* the vector kernel's scalar tail at the end */
            memcpy(a, x, sizeof(float) * se), memcpy(b, x, sizeof(float) * se);
            seer_k_silu_mul(a, x + se, se);
            seer_k_silu_mul_pool(pools[k], b, x + se, se);
            cr_assert(!memcmp(a, b, sizeof(float) * se), "silu_mul, %zu elements, %d thread(s)", se, k + 1);
            size_t qe = (size_t)n * H * HD, ke = (size_t)n * KH * HD;
            memcpy(a, x, sizeof(float) * (qe + ke)), memcpy(b, x, sizeof(float) * (qe + ke));
            for (int t = 0; t < n; t++) {
                seer_k_rope(a + (size_t)t * H * HD, H, HD, ROT, cs + (size_t)t * ROT / 2, sn + (size_t)t * ROT / 2);
                seer_k_rope(a + qe + (size_t)t * KH * HD, KH, HD, ROT, cs + (size_t)t * ROT / 2, sn + (size_t)t * ROT / 2);
            }
            seer_k_rope_rows_pool(pools[k], n, b, H, b + qe, KH, HD, ROT, cs, sn);
            cr_assert(!memcmp(a, b, sizeof(float) * (qe + ke)), "rope, %d tokens, %d thread(s)", n, k + 1);
        }
    free(x), free(a), free(b), free(wv), free(cs), free(sn);
    for (int k = 0; k < 3; k++) seer_pool_free(pools[k]);
}

Test(kernels, amx_linear_bf16_weights) {
    if (!seer_k_have_amx()) {
        cr_skip_test("skipped: this CPU (or kernel) has no AMX-BF16; bf16 prefill uses OpenBLAS here");
    }
    seer_pool_t *pool = seer_pool_new(2);
    /* 1-32 tokens: the few-token kernel (one or two token blocks, rows streamed); more: the
     * prefill kernels (128-row items, pairs of token blocks; W's rows as the A tiles below
     * AMX_XA_MIN = 160 tokens, x as the A tiles from there, its C tiles stored straight into y
     * when whole and without bias: 176 and 192 have partial and whole token pairs) */
    static const int ns[] = {1, 2, 15, 16, 17, 32, 33, 64, 70, 159, 176, 192};
    static const int rows_[] = {17, 130, 256};
    static const int cols_[] = {32, 96};
    for (int a = 0; a < 12; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2; c++)
                for (int with_bias = 0; with_bias < 2; with_bias++) {
                    int n = ns[a], rows = rows_[b], cols = cols_[c];
                    uint16_t *w = malloc(sizeof(uint16_t) * (size_t)(rows * cols)), bias[256];
                    float *x = malloc(sizeof(float) * (size_t)(n * cols)), *y = malloc(sizeof(float) * (size_t)(n * rows));
                    for (int i = 0; i < rows * cols; i++) w[i] = seer_f32_to_bf16(nrand() * 0.1f);
                    for (int i = 0; i < n * cols; i++) x[i] = nrand() * 3;
                    for (int i = 0; i < rows; i++) bias[i] = seer_f32_to_bf16(nrand());
                    seer_weight_t W = {.dtype = SEER_BF16, .data = w, .rows = rows, .cols = cols};
                    seer_weight_t B = {.dtype = SEER_BF16, .data = bias, .rows = 1, .cols = rows};
                    cr_assert(seer_k_linear_amx(pool, y, x, n, &W, with_bias ? &B : NULL));
                    double worst = 0;
                    for (int t = 0; t < n; t++)
                        for (int r = 0; r < rows; r++) {
                            double ref = with_bias ? seer_bf16_to_f32(bias[r]) : 0, mag = 0;
                            for (int i = 0; i < cols; i++) {
                                double p = (double)seer_bf16_to_f32(w[r * cols + i]) * x[t * cols + i];
                                ref += p;
                                mag += fabs(p);
                            }
                            double err = fabs(y[t * rows + r] - ref);
                            /* x split into hi + lo keeps 16 bits: 2^-16 of sum |w x| bounds it;
                             * a plain bf16 cast of x (8 bits) would not meet this */
                            cr_assert(err <= mag * 1.5e-5 + 1e-6, "n %d rows %d cols %d: y[%d][%d] = %.8g, float64 %.8g",
                                      n, rows, cols, t, r, y[t * rows + r], ref);
                            if (err / (mag + 1e-30) > worst) worst = err / (mag + 1e-30);
                        }
                    /* the dispatch in seer_k_linear and seer_k_linear_rows picks the same kernel */
                    float *y2 = malloc(sizeof(float) * (size_t)(n * rows));
                    seer_k_linear(pool, y2, x, n, &W, with_bias ? &B : NULL);
                    cr_assert(memcmp(y, y2, sizeof(float) * (size_t)(n * rows)) == 0);
                    seer_k_linear_rows(pool, y2, x, n, &W, with_bias ? &B : NULL);
                    cr_assert(memcmp(y, y2, sizeof(float) * (size_t)(n * rows)) == 0);
                    /* every token the bits it gets alone (a decode step), whichever kernel ran
                     * the call, in both precisions */
                    for (int fast = 0; fast < 2; fast++) {
                        seer_k_fast_bf16 = fast;
                        if (fast) cr_assert(seer_k_linear_amx(pool, y, x, n, &W, with_bias ? &B : NULL));
                        for (int t = 0; t < n; t++) {
                            cr_assert(seer_k_linear_amx(pool, y2, x + (size_t)t * (size_t)cols, 1, &W, with_bias ? &B : NULL));
                            cr_assert(memcmp(y + (size_t)t * (size_t)rows, y2, sizeof(float) * (size_t)rows) == 0,
                                      "n %d rows %d cols %d fast %d: token %d differs from its call alone", n, rows, cols, fast, t);
                        }
                    }
                    seer_k_fast_bf16 = 0;
                    free(w), free(x), free(y), free(y2);
                    cr_assert(worst < 1.5e-5);
                }
    seer_pool_free(pool);
}

/* seer_k_linear_amx_multi (q, k, v; gate and up on AMX): the activations packed once for the
 * matrices (up to 32 tokens every matrix's row blocks in one job, past that one prefill job per
 * matrix); each matrix the bits of its own call and each token the bits of its call alone,
 * matrices of one partial block, several, and whole blocks, with and without bias, both
 * precisions, 1-176 tokens (the few-token kernel and both prefill kernels, the second with items
 * of 128 and 256 rows), 1 and 2 threads;
 * with mixed widths it declines (0) and computes nothing. */
Test(kernels, amx_multi_same_bits_as_one_call_each) {
    if (!seer_k_have_amx()) cr_skip_test("skipped: this CPU (or kernel) has no AMX-BF16");
    seer_pool_t *pools[2] = {seer_pool_new(1), seer_pool_new(2)};
    /* 600 rows: on one thread, past AMX_XA_MIN tokens, items of 256 rows (two whole, one cut) */
    static const int rows_[3] = {17, 130, 600}, ns[8] = {1, 3, 16, 17, 32, 33, 70, 176};
    enum { COLS = 96, NMAX = 176 };
    uint16_t *w[3], *bias[3];
    float *x = malloc(sizeof(float) * NMAX * COLS), *got[3], *want = malloc(sizeof(float) * NMAX * 600);
    for (int k = 0; k < NMAX * COLS; k++) x[k] = nrand() * 3;
    seer_weight_t W[3], B[3];
    for (int i = 0; i < 3; i++) {
        w[i] = malloc(sizeof(uint16_t) * (size_t)rows_[i] * COLS);
        bias[i] = malloc(sizeof(uint16_t) * (size_t)rows_[i]);
        got[i] = malloc(sizeof(float) * NMAX * (size_t)rows_[i]);
        for (int k = 0; k < rows_[i] * COLS; k++) w[i][k] = seer_f32_to_bf16(nrand() * 0.1f);
        for (int k = 0; k < rows_[i]; k++) bias[i][k] = seer_f32_to_bf16(nrand());
        W[i] = (seer_weight_t){.dtype = SEER_BF16, .data = w[i], .rows = rows_[i], .cols = COLS};
        B[i] = (seer_weight_t){.dtype = SEER_BF16, .data = bias[i], .rows = 1, .cols = rows_[i]};
    }
    int checked = 0;
    for (int fast = 0; fast < 2; fast++)
        for (int a = 0; a < 8; a++)
            for (int with_bias = 0; with_bias < 2; with_bias++)
                for (int t = 0; t < 2; t++) {
                    seer_k_fast_bf16 = fast;
                    int n = ns[a];
                    float *ys[3] = {got[0], got[1], got[2]};
                    const seer_weight_t *ws[3] = {&W[0], &W[1], &W[2]};
                    const seer_weight_t *bs[3] = {with_bias ? &B[0] : NULL, NULL, with_bias ? &B[2] : NULL};
                    cr_assert(seer_k_linear_amx_multi(pools[t], 3, ys, x, n, ws, bs));
                    for (int i = 0; i < 3; i++) {
                        cr_assert(seer_k_linear_amx(pools[0], want, x, n, ws[i], bs[i]));
                        cr_assert(!memcmp(want, got[i], sizeof(float) * (size_t)n * (size_t)rows_[i]),
                                  "fast %d, %d tokens, bias %d, %d thread(s): matrix %d differs from its own call", fast,
                                  n, with_bias, t + 1, i);
                        for (int k = 0; k < n; k += n > 32 ? 3 : 1) {
                            float one[600];
                            cr_assert(seer_k_linear_amx(pools[0], one, x + (size_t)k * COLS, 1, ws[i], bs[i]));
                            cr_assert(!memcmp(one, got[i] + (size_t)k * (size_t)rows_[i], sizeof(float) * (size_t)rows_[i]),
                                      "fast %d, %d tokens, bias %d, %d thread(s): matrix %d, token %d differs from "
                                      "its call alone", fast, n, with_bias, t + 1, i, k);
                        }
                    }
                    checked++;
                }
    seer_k_fast_bf16 = 0;
    /* declined: widths that differ */
    float *ys[2] = {got[0], got[1]};
    const seer_weight_t *bs[2] = {NULL, NULL};
    seer_weight_t narrow = {.dtype = SEER_BF16, .data = w[1], .rows = 4, .cols = 64};
    const seer_weight_t *mixed[2] = {&W[0], &narrow};
    cr_assert(!seer_k_linear_amx_multi(pools[1], 2, ys, x, 1, mixed, bs));
    cr_assert_eq(checked, 2 * 8 * 2 * 2);
    for (int i = 0; i < 3; i++) free(w[i]), free(bias[i]), free(got[i]);
    free(x), free(want);
    seer_pool_free(pools[0]), seer_pool_free(pools[1]);
}

/* bf16 weights in the AMX tile layout (seer_k_amx_pack, as model.c packs an in-memory model's
 * layers): the layout holds every element where seer_w_index says; every kernel on it (the
 * few-token one at 1-32 tokens, one and two token blocks; the prefill one with x as the A tiles
 * at every count past 32, items of 128 and 256 rows) gives the bits the same call gives on the
 * rows, in both precisions, with and without bias, on 1 and 2 threads, alone and with q, k and v
 * together (a mix of layouts declines and seer_k_linear_multi still computes each); the path of
 * last resort (seer_k_linear_amx_packed_slow) too; and a weight that is not packable is refused
 * and left as it was. */
Test(kernels, amx_packed_same_bits_as_rows) {
    if (!seer_k_have_amx()) cr_skip_test("skipped: this CPU (or kernel) has no AMX-BF16");
    seer_pool_t *pools[2] = {seer_pool_new(1), seer_pool_new(2)};
    static const int ns[] = {1, 2, 15, 16, 17, 31, 32, 33, 64, 100, 160, 176};
    static const int shapes[][2] = {{32, 32}, {96, 96}, {256, 64}, {1024, 96}, {64, 1024}};
    enum { NN = sizeof ns / sizeof ns[0], NS = sizeof shapes / sizeof shapes[0], NMAX = 176 };
    int checked = 0;
    for (int sh = 0; sh < NS; sh++) {
        int rows = shapes[sh][0], cols = shapes[sh][1];
        size_t wn = (size_t)rows * (size_t)cols;
        uint16_t *w = malloc(sizeof(uint16_t) * wn), *pk = malloc(sizeof(uint16_t) * wn), *bias = malloc(sizeof(uint16_t) * (size_t)rows);
        float *x = malloc(sizeof(float) * NMAX * (size_t)cols), *a = malloc(sizeof(float) * NMAX * (size_t)rows),
              *b = malloc(sizeof(float) * NMAX * (size_t)rows);
        for (size_t i = 0; i < wn; i++) w[i] = seer_f32_to_bf16(nrand() * 0.1f);
        for (int i = 0; i < rows; i++) bias[i] = seer_f32_to_bf16(nrand());
        for (int i = 0; i < NMAX * cols; i++) x[i] = nrand() * 3;
        memcpy(pk, w, sizeof(uint16_t) * wn);
        seer_weight_t W = {.dtype = SEER_BF16, .data = w, .rows = rows, .cols = cols};
        seer_weight_t P = {.dtype = SEER_BF16, .data = pk, .rows = rows, .cols = cols};
        seer_weight_t B = {.dtype = SEER_BF16, .data = bias, .rows = 1, .cols = rows};
        cr_assert(seer_k_amx_pack(pools[sh & 1], &P) && P.amx_packed);
        cr_assert(!seer_k_amx_pack(pools[0], &P), "packed twice");
        cr_assert(memcmp(w, pk, sizeof(uint16_t) * wn) != 0, "%dx%d: the layout is the rows'", rows, cols);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                cr_assert_eq(pk[seer_w_index(&P, r, c)], w[(size_t)r * (size_t)cols + (size_t)c], "%dx%d: (%d, %d)", rows, cols, r, c);
        for (int fast = 0; fast < 2; fast++)
            for (int k = 0; k < NN; k++)
                for (int t = 0; t < 2; t++) {
                    int n = ns[k], with_bias = (k + t) & 1;
                    seer_k_fast_bf16 = fast;
                    cr_assert(seer_k_linear_amx(pools[t], a, x, n, &W, with_bias ? &B : NULL));
                    cr_assert(seer_k_linear_amx(pools[t], b, x, n, &P, with_bias ? &B : NULL));
                    cr_assert(!memcmp(a, b, sizeof(float) * (size_t)n * (size_t)rows),
                              "%dx%d, %d tokens, fast %d, bias %d, %d thread(s): packed differs from rows", rows, cols, n, fast,
                              with_bias, t + 1);
                    memset(b, 0, sizeof(float) * (size_t)n * (size_t)rows);
                    seer_k_linear(pools[t], b, x, n, &P, with_bias ? &B : NULL);
                    cr_assert(!memcmp(a, b, sizeof(float) * (size_t)n * (size_t)rows), "seer_k_linear on a packed weight");
                    if (n <= 2 || n == 33) {
                        seer_k_linear_amx_packed_slow(b, x, n, &P, with_bias ? &B : NULL);
                        /* the same products and pieces, summed in another order than the tiles' */
                        for (int tt = 0; tt < n; tt++)
                            for (int r = 0; r < rows; r++) {
                                double mag = 0;
                                for (int c = 0; c < cols; c++)
                                    mag += fabs((double)seer_bf16_to_f32(w[(size_t)r * (size_t)cols + (size_t)c]) *
                                                x[(size_t)tt * (size_t)cols + (size_t)c]);
                                size_t i = (size_t)tt * (size_t)rows + (size_t)r;
                                cr_assert(fabs((double)a[i] - b[i]) <= mag * 1e-6 + 1e-6,
                                          "%dx%d, %d tokens, fast %d: the slow path's y[%d][%d] is %.9g, the tiles' %.9g", rows,
                                          cols, n, fast, tt, r, b[i], a[i]);
                            }
                    }
                    checked++;
                }
        seer_k_fast_bf16 = 0;
        free(w), free(pk), free(bias), free(x), free(a), free(b);
    }
    cr_assert_eq(checked, NS * 2 * NN * 2);
    /* q, k and v packed together, and a mix of layouts */
    enum { COLS = 128 };
    static const int qkv[3] = {256, 64, 64};
    uint16_t *w[3];
    seer_weight_t W[3], P[3];
    float *x = malloc(sizeof(float) * NMAX * COLS), *got[3], *want = malloc(sizeof(float) * NMAX * 256);
    for (int k = 0; k < NMAX * COLS; k++) x[k] = nrand() * 3;
    for (int i = 0; i < 3; i++) {
        size_t wn = (size_t)qkv[i] * COLS;
        w[i] = malloc(sizeof(uint16_t) * wn * 2);
        for (size_t k = 0; k < wn; k++) w[i][k] = w[i][wn + k] = seer_f32_to_bf16(nrand() * 0.1f);
        W[i] = (seer_weight_t){.dtype = SEER_BF16, .data = w[i], .rows = qkv[i], .cols = COLS};
        P[i] = (seer_weight_t){.dtype = SEER_BF16, .data = w[i] + wn, .rows = qkv[i], .cols = COLS};
        cr_assert(seer_k_amx_pack(pools[1], &P[i]));
        got[i] = malloc(sizeof(float) * NMAX * (size_t)qkv[i]);
    }
    for (int fast = 0; fast < 2; fast++)
        for (int k = 0; k < NN; k++) {
            int n = ns[k];
            seer_k_fast_bf16 = fast;
            const seer_weight_t *ps[3] = {&P[0], &P[1], &P[2]}, *mix[3] = {&P[0], &W[1], &P[2]}, *bs[3] = {NULL, NULL, NULL};
            cr_assert(seer_k_linear_amx_multi(pools[1], 3, got, x, n, ps, bs));
            for (int i = 0; i < 3; i++) {
                cr_assert(seer_k_linear_amx(pools[0], want, x, n, &W[i], NULL));
                cr_assert(!memcmp(want, got[i], sizeof(float) * (size_t)n * (size_t)qkv[i]), "fast %d, %d tokens: matrix %d",
                          fast, n, i);
            }
            cr_assert(!seer_k_linear_amx_multi(pools[1], 3, got, x, n, mix, bs), "a mix of layouts in one call");
            for (int i = 0; i < 3; i++) memset(got[i], 0, sizeof(float) * (size_t)n * (size_t)qkv[i]);
            seer_k_linear_multi(pools[1], 3, got, x, n, mix, bs, n);
            for (int i = 0; i < 3; i++) {
                cr_assert(seer_k_linear_amx(pools[0], want, x, n, &W[i], NULL));
                cr_assert(!memcmp(want, got[i], sizeof(float) * (size_t)n * (size_t)qkv[i]), "mixed, fast %d, %d tokens: matrix %d",
                          fast, n, i);
            }
        }
    seer_k_fast_bf16 = 0;
    /* not packable: rows or cols not multiples of 32, or not bf16; nothing is touched */
    uint16_t keep[40 * 64];
    memcpy(keep, w[0], sizeof keep);
    seer_weight_t odd_rows = {.dtype = SEER_BF16, .data = w[0], .rows = 40, .cols = 64};
    seer_weight_t odd_cols = {.dtype = SEER_BF16, .data = w[0], .rows = 32, .cols = 80};
    seer_weight_t f16 = {.dtype = SEER_F16, .data = w[0], .rows = 32, .cols = 64};
    cr_assert(!seer_k_amx_pack(pools[0], &odd_rows) && !seer_k_amx_pack(pools[0], &odd_cols) && !seer_k_amx_pack(pools[0], &f16));
    cr_assert(!odd_rows.amx_packed && !odd_cols.amx_packed && !f16.amx_packed && !memcmp(keep, w[0], sizeof keep));
    for (int i = 0; i < 3; i++) free(w[i]), free(got[i]);
    free(x), free(want);
    seer_pool_free(pools[0]), seer_pool_free(pools[1]);
}

/* Many tokens at once (a batch of short prompts' prefill: from SEER_BIG_PANEL_MIN = 96 tokens the
 * blocked kernel widens bf16/f16 rows once per row block for all its passes; past SEER_ZMM_MAX =
 * 96 an Intel CPU with AMX runs f32 in runs of the pair kernels, SEER_ZMM_SPLIT: 97 two runs, an
 * odd one last, 130 two, 193 three): each token still gets the bits it gets alone, at token
 * counts on both sides of those and past several passes. */
static void check_linear_rows_many_tokens(void) {
    seer_pool_t *pool = seer_pool_new(2);
    static const int rows_[] = {13, 40}, cols_[] = {300, 605}, ns[] = {95, 96, 97, 130, 193};
    static const seer_dtype_t dts[] = {SEER_F32, SEER_BF16, SEER_F16};
    enum { NMAX = 193, KMAX = 605, NN = sizeof ns / sizeof ns[0] };
    float *x = malloc(sizeof(float) * NMAX * KMAX), *y = malloc(sizeof(float) * NMAX * 40), y1[40];
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int d = 0; d < 3; d++) {
                int rows = rows_[a], cols = cols_[b];
                float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
                uint16_t *wh = malloc(sizeof(uint16_t) * (size_t)(rows * cols));
                for (int i = 0; i < rows * cols; i++) {
                    float v = nrand() * 0.1f;
                    wf[i] = v;
                    wh[i] = dts[d] == SEER_BF16 ? seer_f32_to_bf16(v) : seer_f32_to_f16(v);
                }
                for (int i = 0; i < NMAX * cols; i++) x[i] = nrand() * 3;
                seer_weight_t W = {.dtype = dts[d], .data = dts[d] == SEER_F32 ? (const void *)wf : (const void *)wh,
                                   .rows = rows, .cols = cols};
                for (int k = 0; k < NN; k++) {
                    int n = ns[k];
                    seer_k_linear_rows(pool, y, x, n, &W, NULL);
                    for (int t = 0; t < n; t++) {
                        seer_k_linear_rows(pool, y1, x + (size_t)t * cols, 1, &W, NULL);
                        cr_assert(memcmp(y1, y + (size_t)t * rows, sizeof(float) * (size_t)rows) == 0,
                                  "dtype %d rows %d cols %d: token %d of %d differs from the token alone", dts[d], rows,
                                  cols, t, n);
                    }
                }
                free(wf);
                free(wh);
            }
    free(x);
    free(y);
    seer_pool_free(pool);
}

/* The batched forward's exactness rests on this: the per-token linear kernel gives each token
 * the same bits however many tokens run beside it (1, 2, the 3-row x 4-token block and its
 * tails), for every weight dtype, odd widths (scalar tails) and row counts that leave short
 * row blocks, with and without bias; and its result is within float rounding of float64. */
static void check_linear_rows_token_independent(void) {
    seer_pool_t *pool = seer_pool_new(2);
    static const int rows_[] = {1, 5, 13, 67};
    /* 5: no 8-block at all (the scalar tail alone); 24 and 136: an odd last 8-block (chain a0); 300 and 605: two and three k-slices of the
     * batched kernel (SEER_KB = 256; SEER_KB_F32 = 128 for f32 weights at 9 to 16 tokens: three and five), the last ending on an odd 8-block, and a scalar tail; 512, 1024 and
     * 1030: tokens' rows a multiple of 4 KiB apart, or nearly (every other row at 512), which the
     * streamed kernels read from a copy with another stride (stream_x; 1030 with a scalar tail) */
    static const int cols_[] = {5, 8, 24, 37, 96, 136, 300, 605, 512, 1024, 1030};
    enum { NCOLS = sizeof cols_ / sizeof cols_[0] };
    static const seer_dtype_t dts[] = {SEER_F32, SEER_BF16, SEER_F16};
    /* 1-17 every count; past 16 the f32 whole-row kernel's passes (two of 4-8 pairs to 32 tokens,
     * three to 48, six at 96 = SEER_ZMM_MAX) and the blocked kernel's second and third groups of 16 */
    static const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 24, 31, 32, 33, 40, 47, 48, 49, 79, 96};
    enum { NMAX = 96, KMAX = 1030 };
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < NCOLS; b++)
            for (int d = 0; d < 3; d++) {
                int rows = rows_[a], cols = cols_[b];
                float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
                uint16_t *wh = malloc(sizeof(uint16_t) * (size_t)(rows * cols));
                static float x[NMAX * KMAX];
                float bias[67], y1[67], *y = malloc(sizeof(float) * (size_t)(NMAX * rows));
                for (int i = 0; i < rows * cols; i++) {
                    float v = nrand() * 0.1f;
                    wh[i] = dts[d] == SEER_BF16 ? seer_f32_to_bf16(v) : seer_f32_to_f16(v);
                    wf[i] = dts[d] == SEER_F32 ? v : dts[d] == SEER_BF16 ? seer_bf16_to_f32(wh[i]) : seer_f16_to_f32(wh[i]);
                }
                for (int i = 0; i < rows; i++) bias[i] = nrand();
                for (int i = 0; i < NMAX * cols; i++) x[i] = nrand() * 3;
                seer_weight_t W = {.dtype = dts[d], .data = dts[d] == SEER_F32 ? (const void *)wf : (const void *)wh,
                                   .rows = rows, .cols = cols};
                seer_weight_t B = {.dtype = SEER_F32, .data = bias, .rows = 1, .cols = rows};
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    int n = ns[ni];
                    seer_k_linear_rows(pool, y, x, n, &W, &B);
                    for (int t = 0; t < n; t++) {
                        seer_k_linear_rows(pool, y1, x + (size_t)t * cols, 1, &W, &B);
                        cr_assert(memcmp(y1, y + (size_t)t * rows, sizeof(float) * (size_t)rows) == 0,
                                  "dtype %d rows %d cols %d: token %d of %d differs from the token alone", dts[d], rows,
                                  cols, t, n);
                        for (int r = 0; r < rows; r++) {
                            double ref = bias[r], mag = fabs(bias[r]);
                            for (int i = 0; i < cols; i++) {
                                ref += (double)wf[r * cols + i] * x[t * cols + i];
                                mag += fabs((double)wf[r * cols + i] * x[t * cols + i]);
                            }
                            cr_assert(fabs(y[t * rows + r] - ref) <= 1e-6 * mag + 1e-7, "y[%d][%d] = %.8g, float64 %.8g",
                                      t, r, y[t * rows + r], ref);
                        }
                    }
                }
                free(wf);
                free(wh);
                free(y);
            }
    seer_pool_free(pool);
}
Test(kernels, linear_rows_token_independent) { check_linear_rows_token_independent(); }
/* Both x86 kernel families, whichever this CPU picks by default (seer_k_linear_simd: the AVX2
 * family on AMD, the AVX-512 rows kernel on other AVX-512 CPUs). */
Test(kernels, linear_rows_token_independent_avx2_family) {
    setenv("SEER_LINEAR_KERNELS", "avx2", 1);
    if (!seer_k_have_avx2()) cr_skip_test("no AVX2 on this CPU");
    cr_assert_eq(seer_k_linear_simd(), 1);
    check_linear_rows_token_independent();
}
Test(kernels, linear_rows_token_independent_avx2_row_prefetch_on) {
    setenv("SEER_LINEAR_KERNELS", "avx2", 1);
    setenv("SEER_ROW_PREFETCH", "1", 1);
    if (!seer_k_have_avx2()) cr_skip_test("no AVX2 on this CPU");
    cr_assert_eq(seer_k_row_prefetch(), 1);
    check_linear_rows_token_independent();
}
Test(kernels, linear_rows_token_independent_avx2_row_prefetch_off) {
    setenv("SEER_LINEAR_KERNELS", "avx2", 1);
    setenv("SEER_ROW_PREFETCH", "0", 1);
    if (!seer_k_have_avx2()) cr_skip_test("no AVX2 on this CPU");
    cr_assert_eq(seer_k_row_prefetch(), 0);
    check_linear_rows_token_independent();
}
Test(kernels, linear_rows_many_tokens_avx2_family) {
    setenv("SEER_LINEAR_KERNELS", "avx2", 1);
    if (!seer_k_have_avx2()) cr_skip_test("no AVX2 on this CPU");
    check_linear_rows_many_tokens();
}
Test(kernels, linear_rows_token_independent_avx512_family) {
    setenv("SEER_LINEAR_KERNELS", "avx512", 1);
    if (!seer_k_have_avx512()) cr_skip_test("no AVX-512 on this CPU");
    cr_assert_eq(seer_k_linear_simd(), 2);
    check_linear_rows_token_independent();
}
Test(kernels, linear_rows_token_independent_portable_path) {
    setenv("SEER_NO_AVX2", "1", 1);
    cr_assert(!seer_k_have_avx2(), "SEER_NO_AVX2=1 did not turn the AVX2 paths off");
    check_linear_rows_token_independent();
}

/* 1-17, 32 and 33 tokens (the batch-1 kernel, the streamed one and its groups, the blocked one,
 * its second pass of tokens past 16, and the f32 whole-row kernel's passes) against a matrix large enough that the pool's threads take row
 * tasks as they go (linear_base, SEER_LINEAR_TASKS and SEER_MULTI_TASKS): every row
 * of every token is written, and the result is the same bits whatever the thread count, equal
 * to one thread's and to each token run alone. */
Test(kernels, linear_few_tokens_tasks_cover_every_row) {
    /* bf16/f16 stream 5-12 tokens in groups over row chunks, also as tasks, and the blocked
     * kernel takes 13 on (f32 5 on), in tasks of whole 12-row blocks; 5003 rows leave a short
     * last block */
    enum { ROWS = 5003, COLS = 72, NT = 33 };
    static const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 32, 33};
    static const seer_dtype_t dts[] = {SEER_F32, SEER_BF16, SEER_F16};
    float *wf = malloc(sizeof(float) * ROWS * COLS), *y1 = malloc(sizeof(float) * ROWS * NT), *yn = malloc(sizeof(float) * ROWS * NT);
    uint16_t *wb = malloc(sizeof(uint16_t) * ROWS * COLS), *wh = malloc(sizeof(uint16_t) * ROWS * COLS);
    float x[NT * COLS];
    for (int i = 0; i < ROWS * COLS; i++) {
        wf[i] = nrand() * 0.1f;
        wb[i] = seer_f32_to_bf16(wf[i]);
        wh[i] = seer_f32_to_f16(wf[i]);
    }
    for (int i = 0; i < NT * COLS; i++) x[i] = nrand();
    seer_pool_t *one = seer_pool_new(1);
    for (int d = 0; d < 3; d++) {
        const void *data = d == 0 ? (const void *)wf : d == 1 ? (const void *)wb : (const void *)wh;
        seer_weight_t W = {.dtype = dts[d], .data = data, .rows = ROWS, .cols = COLS};
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            int n = ns[ni];
            seer_k_linear_rows(one, y1, x, n, &W, NULL);
            for (int t = 0; t < n; t++) {
                seer_k_linear_rows(one, yn, x + (size_t)t * COLS, 1, &W, NULL);
                cr_assert(memcmp(y1 + (size_t)t * ROWS, yn, sizeof(float) * ROWS) == 0,
                          "dtype %d: token %d of %d differs from the token alone", dts[d], t, n);
            }
            for (int threads = 2; threads <= 3; threads++) {
                seer_pool_t *pool = seer_pool_new(threads);
                for (int rep = 0; rep < 10; rep++) {
                    for (int r = 0; r < ROWS * n; r++) yn[r] = NAN;
                    seer_k_linear_rows(pool, yn, x, n, &W, NULL);
                    cr_assert(memcmp(y1, yn, sizeof(float) * ROWS * (size_t)n) == 0,
                              "dtype %d, %d tokens, %d threads, pass %d: differs from one thread", dts[d], n, threads, rep);
                }
                seer_pool_free(pool);
            }
        }
    }
    seer_pool_free(one);
    free(wf);
    free(wb);
    free(wh);
    free(y1);
    free(yn);
}

/* The per-token attention kernel (decode, and prefills under 16 tokens): against float64, and
 * bit for bit (1) whatever the thread count, which decides how many query heads of a group one
 * work item takes (the grouped AVX2 kernel reads each tile of keys and values once for all of
 * them), and (2) against the operations the hooked path uses when it materialises the scores
 * (seer_k_dot, seer_k_exp_sub_sum, seer_k_axpy, one head at a time), so that capturing a pattern
 * changes no bit. Group sizes 1, 3, 4, 7 and 8, head sizes that are and are not multiples of 8,
 * contexts that cross the kernel's 32-key tiles, sliding windows and soft-capping. */
static void check_decode_attention(void) {
    seer_pool_t *pools[3] = {seer_pool_new(1), seer_pool_new(2), seer_pool_new(3)};
    static const int hds[] = {4, 12, 64, 72};
    static const int heads[][2] = {{16, 4}, {12, 4}, {8, 1}, {4, 4}, {14, 2}};
    static const int ns[] = {1, 3};
    static const int starts[] = {0, 40, 101};
    int checked = 0;
    for (size_t a1 = 0; a1 < sizeof hds / sizeof *hds; a1++)
        for (size_t a2 = 0; a2 < sizeof heads / sizeof *heads; a2++)
            for (size_t a3 = 0; a3 < sizeof ns / sizeof *ns; a3++)
                for (size_t a4 = 0; a4 < sizeof starts / sizeof *starts; a4++)
                    for (int window = 0; window <= 37; window += 37)
                        for (int cap = 0; cap < 2; cap++) {
                            int hd = hds[a1], H = heads[a2][0], KH = heads[a2][1], n = ns[a3], start = starts[a4];
                            int L = start + n, qd = H * hd, kvd = KH * hd, group = H / KH;
                            float *q = malloc(sizeof(float) * (size_t)(n * qd)), *kc = malloc(sizeof(float) * (size_t)(L * kvd));
                            float *vc = malloc(sizeof(float) * (size_t)(L * kvd)), *scratch = malloc(sizeof(float) * (size_t)(3 * L));
                            float *out[3], *mine = malloc(sizeof(float) * (size_t)(n * qd)), *s = malloc(sizeof(float) * (size_t)L);
                            double *ref = malloc(sizeof(double) * (size_t)(n * qd));
                            for (int i = 0; i < n * qd; i++) q[i] = nrand() * 2;
                            for (int i = 0; i < L * kvd; i++) {
                                kc[i] = nrand() * 2;
                                vc[i] = nrand();
                            }
                            seer_attn_params_t a = {.q = q, .kc = kc, .vc = vc, .scratch = scratch, .n = n, .start = start,
                                                    .max_len = L, .H = H, .KH = KH, .hd = hd, .window = window,
                                                    .scale = 1.0f / sqrtf((float)hd), .softcap = cap ? 2.5f : 0.0f};
                            for (int k = 0; k < 3; k++) {
                                out[k] = malloc(sizeof(float) * (size_t)(n * qd));
                                for (int i = 0; i < n * qd; i++) out[k][i] = NAN;
                                a.out = out[k];
                                seer_k_attention(pools[k], &a);
                            }
                            attention_ref(&a, ref);
                            for (int t = 0; t < n; t++) /* the hooked path's operations, one head at a time */
                                for (int h = 0; h < H; h++) {
                                    int pos = start + t, first = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
                                    const float *qh = q + t * qd + h * hd;
                                    size_t kv = (size_t)(h / group) * (size_t)hd;
                                    float mx = -INFINITY;
                                    for (int p = first; p <= pos; p++) {
                                        float v = seer_k_dot(qh, kc + (size_t)p * kvd + kv, hd) * a.scale;
                                        if (a.softcap > 0.f) v = tanhf(v / a.softcap) * a.softcap;
                                        s[p] = v;
                                        if (v > mx) mx = v;
                                    }
                                    float inv = 1.0f / seer_k_exp_sub_sum(s + first, pos - first + 1, mx);
                                    float *o = mine + t * qd + h * hd;
                                    memset(o, 0, sizeof(float) * (size_t)hd);
                                    for (int p = first; p <= pos; p++) seer_k_axpy(o, s[p] * inv, vc + (size_t)p * kvd + kv, hd);
                                }
                            for (int i = 0; i < n * qd; i++) {
                                cr_assert(fabs(out[0][i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])),
                                          "hd %d H %d KH %d n %d start %d window %d softcap %d: out[%d] = %.8g, float64 %.8g",
                                          hd, H, KH, n, start, window, cap, i, out[0][i], ref[i]);
                                for (int k = 1; k < 3; k++)
                                    cr_assert(memcmp(&out[k][i], &out[0][i], sizeof(float)) == 0,
                                              "hd %d H %d KH %d n %d start %d window %d softcap %d: out[%d] with %d threads "
                                              "%.9g, with 1 thread %.9g",
                                              hd, H, KH, n, start, window, cap, i, k + 1, out[k][i], out[0][i]);
                                cr_assert(memcmp(&mine[i], &out[0][i], sizeof(float)) == 0,
                                          "hd %d H %d KH %d n %d start %d window %d softcap %d: out[%d] = %.9g, the hooked "
                                          "path's operations give %.9g",
                                          hd, H, KH, n, start, window, cap, i, out[0][i], mine[i]);
                            }
                            for (int k = 0; k < 3; k++) free(out[k]);
                            free(q), free(kc), free(vc), free(scratch), free(mine), free(s), free(ref);
                            checked++;
                        }
    cr_assert_eq(checked, 4 * 5 * 2 * 3 * 2 * 2);
    for (int k = 0; k < 3; k++) seer_pool_free(pools[k]);
}
Test(kernels, decode_attention_grouped_heads_same_bits) {
    if (!seer_k_have_avx2()) cr_skip_test("skipped: this CPU has no AVX2 (the portable path is the test below)");
    check_decode_attention();
}
/* The portable loops (the reference, and the fallback on CPUs without AVX2), made to run here
 * with SEER_NO_AVX2 (criterion runs each test in its own process, before any kernel call). */
Test(kernels, decode_attention_portable_path) {
    setenv("SEER_NO_AVX2", "1", 1);
    cr_assert(!seer_k_have_avx2(), "SEER_NO_AVX2=1 did not turn the AVX2 paths off");
    check_decode_attention();
}
/* precision = "fast" keeps a bf16 KV cache (seer_kv_cache_t.k16): every attention path (the
 * per-token kernel, grouped or not, at 1-3 threads; the GEMM path from 16 query tokens, which
 * widens blocks into scratch, small heads included; a batch's one loop; the hooked path's dot and
 * axpy) gives on it the bits it gives on an f32 cache holding the same values widened. */
static void check_bf16_cache_attention(void) {
    seer_pool_t *pools[2] = {seer_pool_new(1), seer_pool_new(3)};
    static const int hds[] = {8, 12, 64};
    static const int heads[][2] = {{16, 4}, {4, 4}};
    static const int ns[] = {1, 3, 16, 37};
    int checked = 0;
    for (size_t a1 = 0; a1 < 3; a1++)
        for (size_t a2 = 0; a2 < 2; a2++)
            for (size_t a3 = 0; a3 < 4; a3++)
                for (int window = 0; window <= 23; window += 23)
                    for (int cap = 0; cap < 2; cap++) {
                        int hd = hds[a1], H = heads[a2][0], KH = heads[a2][1], n = ns[a3], start = 45, L = start + n + 9;
                        int qd = H * hd, kvd = KH * hd, group = H / KH;
                        float *q = malloc(sizeof(float) * (size_t)(n * qd)), *kc = malloc(sizeof(float) * (size_t)(L * kvd));
                        float *vc = malloc(sizeof(float) * (size_t)(L * kvd)), *scratch = malloc(sizeof(float) * (size_t)(3 * L));
                        uint16_t *k16 = malloc(sizeof(uint16_t) * (size_t)(L * kvd)), *v16 = malloc(sizeof(uint16_t) * (size_t)(L * kvd));
                        float *o32 = malloc(sizeof(float) * (size_t)(n * qd)), *o16 = malloc(sizeof(float) * (size_t)(n * qd));
                        for (int i = 0; i < n * qd; i++) q[i] = nrand() * 2;
                        for (int i = 0; i < L * kvd; i++) {
                            k16[i] = seer_f32_to_bf16(nrand() * 2);
                            v16[i] = seer_f32_to_bf16(nrand());
                            kc[i] = seer_bf16_to_f32(k16[i]);
                            vc[i] = seer_bf16_to_f32(v16[i]);
                        }
                        seer_attn_params_t a = {.q = q, .kc = kc, .vc = vc, .scratch = scratch, .n = n, .start = start,
                                                .max_len = L, .H = H, .KH = KH, .hd = hd, .window = window,
                                                .scale = 1.0f / sqrtf((float)hd), .softcap = cap ? 2.5f : 0.0f};
                        seer_attn_params_t b = a;
                        b.kc = b.vc = NULL, b.kc16 = k16, b.vc16 = v16;
                        for (int k = 0; k < 2; k++) {
                            a.out = o32, b.out = o16;
                            memset(o16, 0xff, sizeof(float) * (size_t)(n * qd));
                            seer_k_attention(pools[k], &a);
                            seer_k_attention(pools[k], &b);
                            cr_assert(!memcmp(o32, o16, sizeof(float) * (size_t)(n * qd)),
                                      "hd %d H %d KH %d n %d window %d softcap %d, %d thread(s): a bf16 cache gave other bits "
                                      "than the same values in f32", hd, H, KH, n, window, cap, k ? 3 : 1);
                            if (n >= 16) { /* the same tokens as one-token items of a batch (the per-token kernel) */
                                seer_attn_params_t one[2] = {a, b};
                                for (int t = 0; t < n; t += 5) {
                                    float oa[64 * 16], ob[64 * 16];
                                    one[0].q = one[1].q = q + (size_t)t * qd, one[0].n = one[1].n = 1;
                                    one[0].start = one[1].start = start + t, one[0].out = oa, one[1].out = ob;
                                    seer_k_attention_batch(pools[k], one, 2);
                                    cr_assert(!memcmp(oa, ob, sizeof(float) * (size_t)qd), "batch: token %d differs", t);
                                }
                            }
                        }
                        for (int h = 0; h < H; h++) { /* the hooked path's operations */
                            size_t kv = (size_t)(h / group) * (size_t)hd;
                            for (int p = 0; p < L; p += 7) {
                                float d32 = seer_k_dot(q + h * hd, kc + (size_t)p * kvd + kv, hd);
                                float d16 = seer_k_dot_bf16(q + h * hd, k16 + (size_t)p * kvd + kv, hd);
                                cr_assert(!memcmp(&d32, &d16, sizeof d32), "seer_k_dot_bf16: %.9g against %.9g", d16, d32);
                                float x32[64], x16[64];
                                for (int i = 0; i < hd; i++) x32[i] = x16[i] = q[i];
                                seer_k_axpy(x32, 0.37f, vc + (size_t)p * kvd + kv, hd);
                                seer_k_axpy_bf16(x16, 0.37f, v16 + (size_t)p * kvd + kv, hd);
                                cr_assert(!memcmp(x32, x16, sizeof(float) * (size_t)hd), "seer_k_axpy_bf16 differs");
                            }
                        }
                        free(q), free(kc), free(vc), free(scratch), free(k16), free(v16), free(o32), free(o16);
                        checked++;
                    }
    cr_assert_eq(checked, 3 * 2 * 4 * 2 * 2);
    for (int k = 0; k < 2; k++) seer_pool_free(pools[k]);
}
Test(kernels, attention_bf16_cache_same_bits_as_widened) { check_bf16_cache_attention(); }
Test(kernels, attention_bf16_cache_portable_path) {
    setenv("SEER_NO_AVX2", "1", 1);
    cr_assert(!seer_k_have_avx2(), "SEER_NO_AVX2=1 did not turn the AVX2 paths off");
    check_bf16_cache_attention();
}
/* seer_k_attention_batch (a batched forward call's attention: every sequence's per-token items
 * in one parallel loop) gives each sequence the bits seer_k_attention gives it alone, whatever
 * the thread count: sequences of different lengths, new-token counts (one of 17 takes the GEMM
 * path alone) and cache sizes (max_len) sharing one scratch of threads x the largest, contexts
 * long enough that the loop is split over the threads; grouped (4 and 2 query heads per
 * key/value head) and one head per group (the kernel's scratch rows), windows and soft-capping. */
static void check_batch_attention(void) {
    seer_pool_t *pools[3] = {seer_pool_new(1), seer_pool_new(2), seer_pool_new(3)};
    static const int heads[][2] = {{16, 4}, {8, 8}, {12, 6}};
    enum { NS = 7 };
    static const int starts[NS] = {300, 0, 171, 40, 250, 3, 120}, news[NS] = {1, 3, 1, 17, 2, 1, 1};
    static const int extra[NS] = {0, 200, 7, 31, 500, 1, 64}; /* max_len = start + n + extra */
    int checked = 0;
    for (size_t hh = 0; hh < sizeof heads / sizeof *heads; hh++)
        for (int window = 0; window <= 45; window += 45)
            for (int cap = 0; cap < 2; cap++) {
                int H = heads[hh][0], KH = heads[hh][1], hd = 64, qd = H * hd, kvd = KH * hd, maxl = 0;
                seer_attn_params_t a[NS];
                float *q[NS], *kc[NS], *vc[NS], *alone[NS], *batch[NS];
                for (int i = 0; i < NS; i++) {
                    int n = news[i], L = starts[i] + n + extra[i];
                    if (L > maxl) maxl = L;
                    q[i] = malloc(sizeof(float) * (size_t)(n * qd));
                    kc[i] = malloc(sizeof(float) * (size_t)L * (size_t)kvd);
                    vc[i] = malloc(sizeof(float) * (size_t)L * (size_t)kvd);
                    alone[i] = malloc(sizeof(float) * (size_t)(n * qd));
                    batch[i] = malloc(sizeof(float) * (size_t)(n * qd));
                    for (int j = 0; j < n * qd; j++) q[i][j] = nrand() * 2;
                    for (size_t j = 0; j < (size_t)L * (size_t)kvd; j++) {
                        kc[i][j] = nrand() * 2;
                        vc[i][j] = nrand();
                    }
                }
                float *scratch = malloc(sizeof(float) * (size_t)(3 * maxl));
                for (int i = 0; i < NS; i++)
                    a[i] = (seer_attn_params_t){.q = q[i], .kc = kc[i], .vc = vc[i], .scratch = scratch, .n = news[i],
                                                .start = starts[i], .max_len = starts[i] + news[i] + extra[i], .H = H,
                                                .KH = KH, .hd = hd, .window = window, .scale = 1.0f / sqrtf((float)hd),
                                                .softcap = cap ? 2.5f : 0.0f};
                for (int i = 0; i < NS; i++) {
                    seer_attn_params_t one = a[i];
                    one.out = alone[i];
                    seer_k_attention(pools[0], &one);
                }
                for (int k = 0; k < 3; k++) {
                    for (int i = 0; i < NS; i++) {
                        for (int j = 0; j < news[i] * qd; j++) batch[i][j] = NAN;
                        a[i].out = batch[i];
                    }
                    seer_k_attention_batch(pools[k], a, NS);
                    for (int i = 0; i < NS; i++)
                        for (int j = 0; j < news[i] * qd; j++)
                            cr_assert(memcmp(&batch[i][j], &alone[i][j], sizeof(float)) == 0,
                                      "H %d KH %d window %d softcap %d, %d thread(s): sequence %d (start %d, %d new) "
                                      "out[%d] = %.9g in the batch, %.9g alone",
                                      H, KH, window, cap, k + 1, i, starts[i], news[i], j, batch[i][j], alone[i][j]);
                    checked++;
                }
                for (int i = 0; i < NS; i++) free(q[i]), free(kc[i]), free(vc[i]), free(alone[i]), free(batch[i]);
                free(scratch);
            }
    cr_assert_eq(checked, 3 * 2 * 2 * 3);
    for (int k = 0; k < 3; k++) seer_pool_free(pools[k]);
}
Test(kernels, batch_attention_same_bits_as_alone) {
    if (!seer_k_have_avx2()) cr_skip_test("skipped: this CPU has no AVX2 (the portable path is the test below)");
    check_batch_attention();
}
Test(kernels, batch_attention_portable_path) {
    setenv("SEER_NO_AVX2", "1", 1);
    cr_assert(!seer_k_have_avx2(), "SEER_NO_AVX2=1 did not turn the AVX2 paths off");
    check_batch_attention();
}
