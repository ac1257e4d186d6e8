/* The CUDA kernels (kernels/, the fatbin embedded in the binary) against float64 CPU
 * references computed here, on random inputs from a fixed seed with ragged sizes that exercise
 * the tails: embedding, RMSNorm, LayerNorm, RoPE (both pairings, partial rotation), the KV-cache
 * store, causal GQA attention in both forms (sliding window, soft-capping, decode with a cache
 * offset and prefill), the decode GEMV and the tensor-core GEMM (which must also agree with each other),
 * f32 -> bf16 rounding, the elementwise kernels, argmax (ties, NaN) and the random fills.
 * Output buffers carry a guard region past their end that must come back untouched.
 *
 * On a machine without a GPU (or without the driver) every test reports itself skipped. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cudrv.h"
#include "cuda/gpu_attn.h"
#include "tensor/dtype.h"
#include "test_rand.h"

/* Tolerances. Where a kernel does one IEEE f32 operation (or one bf16 rounding) per element the
 * comparison is exact, since the CPU does the same operation in f32. */

/* RMSNorm: every step is multiplicative (sum of squares, one sqrt, two products), so the f32
 * result is within a few ulp of the float64 one relative to the element itself; the block-wide
 * sum of 4099 positive terms loses < 1e-6 relative. */
static const double TOL_RMSNORM_REL = 1e-5;
/* LayerNorm: the f32 mean of values around 3 carries an absolute error of ~1e-6, which shows up
 * as ~1e-6 * |w| / std in y; so the bound is relative to |y| + |w| + |b|. */
static const double TOL_LAYERNORM_REL = 1e-5;
static const double TOL_LAYERNORM_ABS = 1e-6;
/* RoPE: the angle is the same f32 product on both sides; precise sincosf is within 2 ulp and the
 * rotation is two products and a sum, so for |x| <= 1 and positions < 4096 the error is a few
 * 1e-7 absolute. */
static const double TOL_ROPE_ABS = 1e-5;
/* Attention: the reference uses the same bf16-rounded K/V; f32 dot products (scores up to ~20),
 * expf and the online rescaling perturb each probability by ~1e-6 relative, and the output is a
 * convex combination of V rows, so the error is bounded relative to max |v|. */
static const double TOL_ATTN_REL = 1e-4;
/* The cuBLAS form (gpu_attn.h) carries queries and probabilities as two bf16 terms each (~16
 * significant bits, relative error ~2^-17): with scores up to ~20 the probabilities move by up to
 * ~2e-4 relative, so its bound is ten times the kernel's. */
static const double TOL_ATTN_GEMM_REL = 1e-3;
/* GEMM / GEMV: inputs are the same bf16 values on both sides (bf16 x bf16 products are exact in
 * f32), only the f32 summation order differs (tensor cores, warp trees): |err| <= 1e-3 *
 * sum_k |w x| + 1e-5, far above the ~in * 2^-24 relative bound of f32 summation. */
static const double TOL_GEMM_REL = 1e-3;
static const double TOL_GEMM_ABS = 1e-5;
/* SiLU / GELU: expf, tanhf, erff are within 2 ulp; 1 + tanh(z) and 1 + erf(z) cancel for
 * negative arguments, leaving an absolute error of a few ulp(1) * |g|. */
static const double TOL_ACT_REL = 1e-5;
static const double TOL_ACT_ABS = 1e-6; /* times (1 + |g|) (and |u|) */
/* Soft-capping: x/cap rounds (6e-8 |x|), tanhf is within 2 ulp of a value <= 1, times cap. */
static const double TOL_SOFTCAP = 1e-6; /* times (|x| + cap) */

/* Bytes past the end of each output buffer that a kernel must not touch. */
#define GUARD_BYTES 256
#define GUARD_BYTE 0xA5

static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)urand(); }

static float f_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    cr_assert(p != NULL, "out of host memory (%zu bytes)", n);
    return p;
}

/* ---- the device: opened once per test process, allocations freed at the end of each test. ---- */

static seer_cuda_dev_t *g_dev;
static seer_err_t g_err;
#define MAX_ALLOCS 64
static seer_devptr_t g_allocs[MAX_ALLOCS];
static int g_nallocs;

/* Every test starts here: skips when there is no GPU, else opens device 0. */
static void gpu(void) {
    char why[512] = "";
    if (seer_cuda_device_count(why, sizeof why) <= 0) cr_skip_test("skipped: no GPU (%s)", why);
    if (!g_dev) {
        int rc = seer_cuda_open(&g_dev, 0, &g_err);
        cr_assert(rc >= 0 && g_dev != NULL, "seer_cuda_open(0): %s", g_err.msg);
    }
}

static void gpu_done(void) {
    for (int i = 0; i < g_nallocs; i++) seer_cuda_free(g_dev, g_allocs[i]);
    g_nallocs = 0;
}

static seer_devptr_t dalloc(size_t bytes) {
    cr_assert(g_nallocs < MAX_ALLOCS, "test bug: too many device allocations");
    seer_devptr_t p = 0;
    int rc = seer_cuda_alloc(g_dev, &p, bytes ? bytes : 16, "a test buffer", &g_err);
    cr_assert(rc >= 0, "seer_cuda_alloc(%zu): %s", bytes, g_err.msg);
    g_allocs[g_nallocs++] = p;
    return p;
}

static void htod(seer_devptr_t dst, const void *src, size_t bytes) {
    if (!bytes) return;
    int rc = seer_cuda_htod(g_dev, dst, src, bytes, &g_err);
    cr_assert(rc >= 0, "seer_cuda_htod(%zu): %s", bytes, g_err.msg);
}

static void dtoh(void *dst, seer_devptr_t src, size_t bytes) {
    if (!bytes) return;
    int rc = seer_cuda_dtoh(g_dev, dst, src, bytes, &g_err);
    cr_assert(rc >= 0, "seer_cuda_dtoh(%zu): %s", bytes, g_err.msg);
    rc = seer_cuda_sync(g_dev, &g_err);
    cr_assert(rc >= 0, "seer_cuda_sync: %s", g_err.msg);
}

/* A device copy of host data. */
static seer_devptr_t dput(const void *src, size_t bytes) {
    seer_devptr_t p = dalloc(bytes);
    htod(p, src, bytes);
    return p;
}

/* A buffer of `bytes` followed by GUARD_BYTES of GUARD_BYTE; filled from src when not NULL. */
static seer_devptr_t dguarded(const void *src, size_t bytes) {
    seer_devptr_t p = dalloc(bytes + GUARD_BYTES);
    unsigned char guard[GUARD_BYTES];
    memset(guard, GUARD_BYTE, sizeof guard);
    if (src) htod(p, src, bytes);
    htod(p + bytes, guard, sizeof guard);
    return p;
}

static void check_guard(seer_devptr_t p, size_t bytes, const char *what) {
    unsigned char guard[GUARD_BYTES];
    dtoh(guard, p + bytes, sizeof guard);
    for (int i = 0; i < GUARD_BYTES; i++)
        cr_assert(guard[i] == GUARD_BYTE, "%s: wrote past the end (byte %d of the guard is 0x%02x)", what, i,
                  guard[i]);
}

/* Launches kernel `name` and waits for it. */
static void launch(const char *name, unsigned gx, unsigned gy, unsigned bx, unsigned shmem, void **args) {
    seer_cuda_fn_t *fn = seer_cuda_fn(g_dev, name, &g_err);
    cr_assert(fn != NULL, "seer_cuda_fn(%s): %s", name, g_err.msg);
    int rc = seer_cuda_launch(g_dev, fn, gx, gy, 1, bx, 1, 1, shmem, args, &g_err);
    cr_assert(rc >= 0, "launch %s: %s", name, g_err.msg);
    rc = seer_cuda_sync(g_dev, &g_err);
    cr_assert(rc >= 0, "%s: %s", name, g_err.msg);
}

static unsigned cdiv(long long a, long long b) { return (unsigned)((a + b - 1) / b); }

/* ---- 1. seer_embed ---- */

Test(cuda_kernels, embed) {
    gpu();
    static const int Ds[] = {1000, 4099};
    static const int ns[] = {1, 5, 67};
    const int V = 37;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++) {
            int D = Ds[a], n = ns[b];
            float scale = sqrtf((float)D);
            uint16_t *table = xmalloc(sizeof(uint16_t) * (size_t)V * (size_t)D);
            int *tokens = xmalloc(sizeof(int) * (size_t)n);
            float *x = xmalloc(sizeof(float) * (size_t)n * (size_t)D);
            for (size_t i = 0; i < (size_t)V * (size_t)D; i++) table[i] = seer_f32_to_bf16(nrand());
            for (int t = 0; t < n; t++) tokens[t] = (int)(urand() * V);
            tokens[0] = V - 1;
            size_t xbytes = sizeof(float) * (size_t)n * (size_t)D;
            seer_devptr_t dtab = dput(table, sizeof(uint16_t) * (size_t)V * (size_t)D);
            seer_devptr_t dtok = dput(tokens, sizeof(int) * (size_t)n);
            seer_devptr_t dx = dguarded(NULL, xbytes);
            void *args[] = {&dx, &dtab, &dtok, &n, &D, &scale};
            launch("seer_embed", (unsigned)n, 1, 256, 0, args);
            dtoh(x, dx, xbytes);
            for (int t = 0; t < n; t++)
                for (int j = 0; j < D; j++) {
                    float r = seer_bf16_to_f32(table[(size_t)tokens[t] * (size_t)D + (size_t)j]) * scale;
                    float g = x[(size_t)t * (size_t)D + (size_t)j];
                    cr_assert(g == r, "embed D %d n %d: x[%d][%d] = %.9g, expected %.9g", D, n, t, j, g, r);
                }
            check_guard(dx, xbytes, "seer_embed");
            free(table);
            free(tokens);
            free(x);
            gpu_done();
        }
}

/* ---- 2. seer_rmsnorm ---- */

Test(cuda_kernels, rmsnorm) {
    gpu();
    static const int Ds[] = {1000, 4099};
    const int rows = 5;
    const float eps = 1e-6f;
    for (int a = 0; a < 2; a++)
        for (int one_plus = 0; one_plus < 2; one_plus++)
            for (int inplace = 0; inplace < 2; inplace++) {
                int D = Ds[a];
                size_t nx = (size_t)rows * (size_t)D, bytes = sizeof(float) * nx;
                float *x = xmalloc(bytes), *y = xmalloc(bytes);
                uint16_t *w = xmalloc(sizeof(uint16_t) * (size_t)D);
                for (size_t i = 0; i < nx; i++) x[i] = nrand() * 2;
                for (int j = 0; j < D; j++) w[j] = seer_f32_to_bf16(one_plus ? nrand() * 0.2f : 1.0f + nrand() * 0.2f);
                seer_devptr_t dx = dguarded(x, bytes), dw = dput(w, sizeof(uint16_t) * (size_t)D);
                seer_devptr_t dy = inplace ? dx : dguarded(NULL, bytes);
                /* the bf16 copy of y (a GEMM's input) when asked for */
                seer_devptr_t dyb = inplace ? 0 : dguarded(NULL, sizeof(uint16_t) * nx);
                float e = eps;
                int op = one_plus;
                void *args[] = {&dy, &dx, &dw, &D, &e, &op, &dyb};
                launch("seer_rmsnorm", (unsigned)rows, 1, 256, 0, args);
                dtoh(y, dy, bytes);
                if (dyb) {
                    uint16_t *yb = xmalloc(sizeof(uint16_t) * nx);
                    dtoh(yb, dyb, sizeof(uint16_t) * nx);
                    for (size_t i = 0; i < nx; i++)
                        cr_assert(yb[i] == seer_f32_to_bf16(y[i]), "rmsnorm D %d: yb[%zu] %04x is not bf16(y) %04x", D, i,
                                  yb[i], seer_f32_to_bf16(y[i]));
                    check_guard(dyb, sizeof(uint16_t) * nx, "seer_rmsnorm yb");
                    free(yb);
                }
                for (int r = 0; r < rows; r++) {
                    const float *xr = x + (size_t)r * (size_t)D;
                    double ss = 0;
                    for (int j = 0; j < D; j++) ss += (double)xr[j] * xr[j];
                    double inv = 1.0 / sqrt(ss / D + eps);
                    for (int j = 0; j < D; j++) {
                        double wj = seer_bf16_to_f32(w[j]) + (one_plus ? 1.0 : 0.0);
                        double ref = xr[j] * inv * wj;
                        double g = y[(size_t)r * (size_t)D + (size_t)j];
                        cr_assert(fabs(g - ref) <= TOL_RMSNORM_REL * fabs(ref) + 1e-30,
                                  "rmsnorm D %d one_plus %d inplace %d: y[%d][%d] = %.9g, expected %.9g", D, one_plus,
                                  inplace, r, j, g, ref);
                    }
                }
                check_guard(dy, bytes, "seer_rmsnorm");
                free(x);
                free(y);
                free(w);
                gpu_done();
            }
}

/* ---- 3. seer_layernorm ---- */

Test(cuda_kernels, layernorm) {
    gpu();
    static const int Ds[] = {1000, 4099};
    const int rows = 5;
    const float eps = 1e-5f;
    for (int a = 0; a < 2; a++)
        for (int with_bias = 0; with_bias < 2; with_bias++)
            for (int inplace = 0; inplace < 2; inplace++) {
                int D = Ds[a];
                size_t nx = (size_t)rows * (size_t)D, bytes = sizeof(float) * nx;
                float *x = xmalloc(bytes), *y = xmalloc(bytes);
                uint16_t *w = xmalloc(sizeof(uint16_t) * (size_t)D), *b = xmalloc(sizeof(uint16_t) * (size_t)D);
                /* a mean far from 0 relative to the spread: a one-pass variance would lose it */
                for (size_t i = 0; i < nx; i++) x[i] = 3.0f + nrand() * 0.5f;
                for (int j = 0; j < D; j++) {
                    w[j] = seer_f32_to_bf16(1.0f + nrand() * 0.2f);
                    b[j] = seer_f32_to_bf16(nrand() * 0.1f);
                }
                seer_devptr_t dx = dguarded(x, bytes), dw = dput(w, sizeof(uint16_t) * (size_t)D);
                seer_devptr_t db = with_bias ? dput(b, sizeof(uint16_t) * (size_t)D) : 0;
                seer_devptr_t dy = inplace ? dx : dguarded(NULL, bytes);
                float e = eps;
                void *args[] = {&dy, &dx, &dw, &db, &D, &e};
                launch("seer_layernorm", (unsigned)rows, 1, 256, 0, args);
                dtoh(y, dy, bytes);
                for (int r = 0; r < rows; r++) {
                    const float *xr = x + (size_t)r * (size_t)D;
                    double mean = 0, var = 0;
                    for (int j = 0; j < D; j++) mean += xr[j];
                    mean /= D;
                    for (int j = 0; j < D; j++) var += (xr[j] - mean) * (xr[j] - mean);
                    var /= D;
                    for (int j = 0; j < D; j++) {
                        double wj = seer_bf16_to_f32(w[j]), bj = with_bias ? seer_bf16_to_f32(b[j]) : 0.0;
                        double ref = (xr[j] - mean) / sqrt(var + eps) * wj + bj;
                        double g = y[(size_t)r * (size_t)D + (size_t)j];
                        cr_assert(fabs(g - ref) <= TOL_LAYERNORM_REL * (fabs(ref) + fabs(wj) + fabs(bj)) +
                                                       TOL_LAYERNORM_ABS,
                                  "layernorm D %d bias %d inplace %d: y[%d][%d] = %.9g, expected %.9g", D, with_bias,
                                  inplace, r, j, g, ref);
                    }
                }
                check_guard(dy, bytes, "seer_layernorm");
                free(x);
                free(y);
                free(w);
                free(b);
                gpu_done();
            }
}

/* ---- 4. seer_rope ---- */

Test(cuda_kernels, rope) {
    gpu();
    static const struct {
        int nheads, hd, rot, start, n;
        float theta;
    } cs[] = {
        {3, 64, 64, 0, 5, 10000.0f},    {3, 64, 64, 4000, 5, 10000.0f}, {2, 80, 32, 17, 5, 10000.0f},
        {2, 80, 32, 4090, 5, 1e6f},     {1, 512, 512, 100, 3, 1e6f},    {4, 128, 96, 4088, 7, 500000.0f},
        {1, 256, 256, 3, 67, 10000.0f},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++)
        for (int interleaved = 0; interleaved < 2; interleaved++) {
            int nheads = cs[c].nheads, hd = cs[c].hd, rot = cs[c].rot, start = cs[c].start, n = cs[c].n, il = interleaved;
            int half = rot / 2;
            size_t nx = (size_t)n * (size_t)nheads * (size_t)hd, bytes = sizeof(float) * nx;
            float *x = xmalloc(bytes), *y = xmalloc(bytes), *inv = xmalloc(sizeof(float) * (size_t)half);
            for (size_t i = 0; i < nx; i++) x[i] = uniform(-1.0f, 1.0f);
            for (int i = 0; i < half; i++) inv[i] = (float)pow(cs[c].theta, -2.0 * i / rot);
            /* positions start + t, or given per row (a batch's rows): start + (n - 1 - t) */
            int byrow = (int)(c % 2), *posv = xmalloc(sizeof(int) * (size_t)n);
            for (int t = 0; t < n; t++) posv[t] = byrow ? start + (n - 1 - t) : start + t;
            seer_devptr_t dx = dguarded(x, bytes), dinv = dput(inv, sizeof(float) * (size_t)half);
            seer_devptr_t dpos = byrow ? dput(posv, sizeof(int) * (size_t)n) : 0;
            void *args[] = {&dx, &nheads, &hd, &rot, &dinv, &start, &il, &dpos};
            launch("seer_rope", (unsigned)n, (unsigned)nheads, 128, 0, args);
            dtoh(y, dx, bytes);
            for (int t = 0; t < n; t++)
                for (int h = 0; h < nheads; h++) {
                    const float *xh = x + ((size_t)t * (size_t)nheads + (size_t)h) * (size_t)hd;
                    const float *yh = y + ((size_t)t * (size_t)nheads + (size_t)h) * (size_t)hd;
                    double ref[512];
                    for (int d = 0; d < hd; d++) ref[d] = xh[d];
                    for (int i = 0; i < half; i++) {
                        float angle = (float)posv[t] * inv[i]; /* the same f32 product as the kernel */
                        double co = cos((double)angle), si = sin((double)angle);
                        int ia = il ? 2 * i : i, ib = il ? 2 * i + 1 : i + half;
                        ref[ia] = xh[ia] * co - xh[ib] * si;
                        ref[ib] = xh[ib] * co + xh[ia] * si;
                    }
                    for (int d = 0; d < hd; d++) {
                        if (d >= rot)
                            cr_assert(yh[d] == xh[d], "rope: dim %d >= rot %d changed", d, rot);
                        else
                            cr_assert(fabs(yh[d] - ref[d]) <= TOL_ROPE_ABS,
                                      "rope hd %d rot %d il %d start %d: t %d h %d d %d = %.9g, expected %.9g", hd,
                                      rot, il, start, t, h, d, yh[d], ref[d]);
                    }
                }
            check_guard(dx, bytes, "seer_rope");
            free(posv);
            free(x);
            free(y);
            free(inv);
            gpu_done();
        }
}

/* ---- 5. seer_kv_store ---- */

Test(cuda_kernels, kv_store) {
    gpu();
    static const struct {
        int n, start, kvd;
        unsigned grid, block;
    } cs[] = {{5, 7, 130, 2, 64}, {1, 300, 512, 2, 256}, {67, 0, 36, 1000, 256}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int n = cs[c].n, start = cs[c].start, kvd = cs[c].kvd;
        int rows = start + n + 2;
        size_t nkv = (size_t)n * (size_t)kvd, ncache = (size_t)rows * (size_t)kvd;
        float *k = xmalloc(sizeof(float) * nkv), *v = xmalloc(sizeof(float) * nkv);
        uint16_t *kc = xmalloc(sizeof(uint16_t) * ncache), *vc = xmalloc(sizeof(uint16_t) * ncache);
        for (size_t i = 0; i < nkv; i++) {
            k[i] = nrand();
            v[i] = nrand() * 100;
            if (i % 5 == 0) /* exact ties between two bf16 values: round to even */
                k[i] = f_from_bits(((uint32_t)seer_f32_to_bf16(k[i]) << 16) | 0x8000u);
        }
        for (size_t i = 0; i < ncache; i++) kc[i] = vc[i] = 0xABCD;
        seer_devptr_t dk = dput(k, sizeof(float) * nkv), dv = dput(v, sizeof(float) * nkv);
        seer_devptr_t dkc = dguarded(kc, sizeof(uint16_t) * ncache), dvc = dguarded(vc, sizeof(uint16_t) * ncache);
        void *args[] = {&dkc, &dvc, &dk, &dv, &n, &start, &kvd};
        launch("seer_kv_store", cs[c].grid, 1, cs[c].block, 0, args);
        dtoh(kc, dkc, sizeof(uint16_t) * ncache);
        dtoh(vc, dvc, sizeof(uint16_t) * ncache);
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < kvd; j++) {
                size_t i = (size_t)r * (size_t)kvd + (size_t)j;
                int t = r - start;
                uint16_t ek = 0xABCD, ev = 0xABCD;
                if (t >= 0 && t < n) {
                    ek = seer_f32_to_bf16(k[(size_t)t * (size_t)kvd + (size_t)j]);
                    ev = seer_f32_to_bf16(v[(size_t)t * (size_t)kvd + (size_t)j]);
                }
                cr_assert(kc[i] == ek && vc[i] == ev, "kv_store n %d start %d kvd %d: row %d col %d k %04x v %04x, expected %04x %04x",
                          n, start, kvd, r, j, kc[i], vc[i], ek, ev);
            }
        check_guard(dkc, sizeof(uint16_t) * ncache, "seer_kv_store k");
        check_guard(dvc, sizeof(uint16_t) * ncache, "seer_kv_store v");
        free(k);
        free(v);
        free(kc);
        free(vc);
        gpu_done();
    }
}

/* ---- 5b. seer_kv_store_rows: a batch's rows, each into its own sequence's cache ---- */

Test(cuda_kernels, kv_store_rows) {
    gpu();
    enum { NS = 3, LAYERS = 2 };
    static const int max_tokens[NS] = {7, 12, 5}, kvd = 40, layer = 1;
    /* rows: (sequence, position), not in sequence order, two rows for sequence 1 */
    static const int rseq[] = {2, 0, 1, 1}, rpos[] = {4, 0, 11, 3};
    const int n = 4;
    float *k = xmalloc(sizeof(float) * (size_t)n * kvd), *v = xmalloc(sizeof(float) * (size_t)n * kvd);
    for (int i = 0; i < n * kvd; i++) k[i] = nrand(), v[i] = nrand() * 10;
    seer_devptr_t dk = dput(k, sizeof(float) * (size_t)n * kvd), dv = dput(v, sizeof(float) * (size_t)n * kvd);
    seer_devptr_t kc[NS], vc[NS];
    unsigned long long kb[NS], vb[NS];
    uint16_t *host[NS];
    for (int s = 0; s < NS; s++) {
        size_t elems = (size_t)LAYERS * max_tokens[s] * kvd;
        host[s] = xmalloc(sizeof(uint16_t) * elems);
        for (size_t i = 0; i < elems; i++) host[s][i] = 0xABCD;
        kc[s] = dguarded(host[s], sizeof(uint16_t) * elems), vc[s] = dguarded(host[s], sizeof(uint16_t) * elems);
        kb[s] = kc[s], vb[s] = vc[s];
    }
    seer_devptr_t dpos = dput(rpos, sizeof rpos), dseq = dput(rseq, sizeof rseq), dmax = dput(max_tokens, sizeof max_tokens);
    seer_devptr_t dkb = dput(kb, sizeof kb), dvb = dput(vb, sizeof vb);
    int nn = n, kd = kvd, ly = layer;
    void *args[] = {&dk, &dv, &nn, &kd, &ly, &dpos, &dseq, &dkb, &dvb, &dmax};
    launch("seer_kv_store_rows", 3, 1, 64, 0, args);
    for (int s = 0; s < NS; s++) {
        size_t elems = (size_t)LAYERS * max_tokens[s] * kvd;
        uint16_t *gk = xmalloc(sizeof(uint16_t) * elems), *gv = xmalloc(sizeof(uint16_t) * elems);
        dtoh(gk, kc[s], sizeof(uint16_t) * elems);
        dtoh(gv, vc[s], sizeof(uint16_t) * elems);
        for (int l = 0; l < LAYERS; l++)
            for (int r = 0; r < max_tokens[s]; r++)
                for (int j = 0; j < kvd; j++) {
                    uint16_t ek = 0xABCD, ev = 0xABCD;
                    for (int t = 0; t < n; t++)
                        if (l == layer && rseq[t] == s && rpos[t] == r) {
                            ek = seer_f32_to_bf16(k[t * kvd + j]);
                            ev = seer_f32_to_bf16(v[t * kvd + j]);
                        }
                    size_t i = ((size_t)l * max_tokens[s] + (size_t)r) * kvd + (size_t)j;
                    cr_assert(gk[i] == ek && gv[i] == ev, "kv_store_rows: sequence %d layer %d row %d col %d: k %04x v %04x, "
                              "expected %04x %04x", s, l, r, j, gk[i], gv[i], ek, ev);
                }
        check_guard(kc[s], sizeof(uint16_t) * elems, "seer_kv_store_rows k");
        check_guard(vc[s], sizeof(uint16_t) * elems, "seer_kv_store_rows v");
        free(gk), free(gv), free(host[s]);
    }
    free(k), free(v);
    gpu_done();
}

/* ---- 6. attention: seer_attn_split (+ seer_attn_combine), and the cuBLAS form
 * (seer_split_pairs_bf16, seer_kv_twice, seer_attn_softmax), through seer_gpu_attention (engine/cuda/gpu_attn.c) ---- */

Test(cuda_kernels, attention) {
    gpu();
    static const struct {
        int H, KH, hd, n, start, window;
        float softcap, qscale;
    } cs[] = {
        {8, 2, 64, 67, 0, 0, 0.0f, 1.0f},      /* prefill */
        {8, 2, 64, 67, 0, 16, 0.0f, 1.0f},     /* prefill, sliding window */
        {8, 2, 64, 67, 0, 0, 5.0f, 3.0f},      /* prefill, soft-capped, peaky */
        {8, 2, 256, 1, 300, 0, 0.0f, 1.0f},    /* decode behind a cache offset: 301 keys, several slices */
        {8, 2, 256, 1, 300, 100, 30.0f, 3.0f}, /* decode, window and softcap */
        {8, 2, 64, 5, 300, 200, 20.0f, 2.0f},  /* a few tokens, window spanning slices */
        {4, 4, 72, 3, 130, 0, 0.0f, 1.0f},     /* MHA, hd % 16 != 0 */
        {2, 1, 36, 2, 129, 0, 0.0f, 1.0f},     /* hd % 8 != 0: the scalar lane path */
        {8, 2, 256, 67, 0, 0, 0.0f, 1.0f},     /* prefill, large heads */
        {16, 8, 128, 40, 2000, 512, 0.0f, 1.0f}, /* a continuation behind a long cache, window */
        {1, 1, 8, 1, 0, 0, 0.0f, 1.0f},        /* one key */
    };
    seer_gpu_attn_t at;
    cr_assert_eq(seer_gpu_attn_init(&at, g_dev, &g_err), 0, "seer_gpu_attn_init: %s", g_err.msg);
    int have_gemm = seer_cuda_has_batched_gemm(g_dev);
    if (!have_gemm) fprintf(stderr, "attention: no cuBLAS here, the gemm form is not tested\n");
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int H = cs[c].H, KH = cs[c].KH, hd = cs[c].hd, n = cs[c].n, start = cs[c].start, window = cs[c].window;
        float softcap = cs[c].softcap, scale = 1.0f / sqrtf((float)hd);
        int ctx = start + n;
        size_t nq = (size_t)n * (size_t)H * (size_t)hd, nkv = (size_t)ctx * (size_t)KH * (size_t)hd;
        float *q = xmalloc(sizeof(float) * nq), *o = xmalloc(sizeof(float) * nq);
        uint16_t *kc = xmalloc(sizeof(uint16_t) * nkv), *vc = xmalloc(sizeof(uint16_t) * nkv);
        double *sc = xmalloc(sizeof(double) * (size_t)ctx), *ref = xmalloc(sizeof(double) * nq);
        for (size_t i = 0; i < nq; i++) q[i] = nrand() * cs[c].qscale;
        double vmax = 0;
        for (size_t i = 0; i < nkv; i++) {
            kc[i] = seer_f32_to_bf16(nrand());
            vc[i] = seer_f32_to_bf16(nrand());
            if (fabs(seer_bf16_to_f32(vc[i])) > vmax) vmax = fabs(seer_bf16_to_f32(vc[i]));
        }
        for (int t = 0; t < n; t++)
            for (int h = 0; h < H; h++) {
                int p = start + t, kvh = h / (H / KH);
                int lo = window > 0 ? (p - window + 1 > 0 ? p - window + 1 : 0) : 0;
                const float *qr = q + ((size_t)t * (size_t)H + (size_t)h) * (size_t)hd;
                double mx = -INFINITY, sum = 0, *r = ref + ((size_t)t * (size_t)H + (size_t)h) * (size_t)hd;
                for (int j = lo; j <= p; j++) {
                    const uint16_t *kr = kc + ((size_t)j * (size_t)KH + (size_t)kvh) * (size_t)hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += (double)qr[d] * seer_bf16_to_f32(kr[d]);
                    s *= scale;
                    if (softcap > 0) s = tanh(s / softcap) * softcap;
                    sc[j] = s;
                    if (s > mx) mx = s;
                }
                for (int d = 0; d < hd; d++) r[d] = 0;
                for (int j = lo; j <= p; j++) {
                    double e = exp(sc[j] - mx);
                    sum += e;
                    const uint16_t *vr = vc + ((size_t)j * (size_t)KH + (size_t)kvh) * (size_t)hd;
                    for (int d = 0; d < hd; d++) r[d] += e * seer_bf16_to_f32(vr[d]);
                }
                for (int d = 0; d < hd; d++) r[d] /= sum;
            }
        seer_devptr_t dq = dput(q, sizeof(float) * nq), dkc = dput(kc, sizeof(uint16_t) * nkv),
                      dvc = dput(vc, sizeof(uint16_t) * nkv), dout = dguarded(NULL, sizeof(float) * nq);
        /* the split form; the gemm form with the default budget and with one small enough to
         * take several chunks of queries */
        static const struct {
            int path;
            size_t budget;
            const char *name;
        } runs[] = {{SEER_ATTN_SPLIT, SEER_ATTN_GEMM_BUDGET, "split"},
                    {SEER_ATTN_GEMM, SEER_ATTN_GEMM_BUDGET, "gemm"},
                    {SEER_ATTN_GEMM, 16 << 10, "gemm, chunked"}};
        for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
            if (runs[r].path == SEER_ATTN_GEMM && !have_gemm) continue;
            for (size_t i = 0; i < nq; i++) o[i] = NAN;
            htod(dout, o, sizeof(float) * nq); /* poisoned: every output must be written */
            at.budget = runs[r].budget;
            seer_gpu_attn_args_t x = {.out = dout, .q = dq, .kc = dkc, .vc = dvc, .n = n, .start = start, .H = H,
                                      .KH = KH, .hd = hd, .window = window, .scale = scale, .softcap = softcap};
            cr_assert_eq(seer_gpu_attention(&at, &x, runs[r].path, &g_err), 0, "%s: %s", runs[r].name, g_err.msg);
            cr_assert_eq(seer_cuda_sync(g_dev, &g_err), 0, "%s: %s", runs[r].name, g_err.msg);
            dtoh(o, dout, sizeof(float) * nq);
            double tol = (runs[r].path == SEER_ATTN_GEMM ? TOL_ATTN_GEMM_REL : TOL_ATTN_REL) * vmax, worst = 0;
            for (size_t i = 0; i < nq; i++) {
                size_t t = i / ((size_t)H * hd), h = i / (size_t)hd % (size_t)H, d = i % (size_t)hd;
                cr_assert(fabs(o[i] - ref[i]) <= tol,
                          "attention (%s) case %zu (H %d KH %d hd %d n %d start %d window %d softcap %g): t %zu h %zu "
                          "d %zu = %.9g, expected %.9g",
                          runs[r].name, c, H, KH, hd, n, start, window, (double)softcap, t, h, d, o[i], ref[i]);
                if (fabs(o[i] - ref[i]) > worst) worst = fabs(o[i] - ref[i]);
            }
            fprintf(stderr, "attention (%s) case %zu: max error %.3g of max |v| %.3g\n", runs[r].name, c, worst, vmax);
            check_guard(dout, sizeof(float) * nq, runs[r].name);
        }
        free(q);
        free(o);
        free(kc);
        free(vc);
        free(sc);
        free(ref);
        gpu_done();
    }
    seer_gpu_attn_free(&at);
}

/* ---- 7, 8. seer_gemv_bf16, seer_gemm_bf16 (and 9 feeding the GEMM in one case) ---- */

static void gemm_reference(const uint16_t *xb, const uint16_t *w, const uint16_t *bias, int n, int in, int out,
                           double *ref, double *tol) {
    for (int t = 0; t < n; t++)
        for (int o = 0; o < out; o++) {
            double s = 0, sa = 0;
            for (int k = 0; k < in; k++) {
                double p = (double)seer_bf16_to_f32(xb[(size_t)t * (size_t)in + (size_t)k]) * seer_bf16_to_f32(w[(size_t)o * (size_t)in + (size_t)k]);
                s += p;
                sa += fabs(p);
            }
            double b = bias ? seer_bf16_to_f32(bias[o]) : 0.0;
            ref[(size_t)t * (size_t)out + (size_t)o] = s + b;
            tol[(size_t)t * (size_t)out + (size_t)o] = TOL_GEMM_REL * (sa + fabs(b)) + TOL_GEMM_ABS;
        }
}

Test(cuda_kernels, gemv_gemm_bf16) {
    gpu();
    static const struct {
        int n, in, out;
        int misalign; /* W (and x) start 2 bytes past a 16-byte boundary: the scalar paths */
    } cs[] = {
        {1, 100, 129, 0},  {5, 100, 129, 0},  {67, 100, 129, 0}, {1, 1536, 129, 0}, {5, 1536, 129, 0},
        {8, 1536, 129, 0}, {67, 1536, 129, 0}, {1, 7, 1, 0},     {3, 33, 65, 0},    {64, 64, 64, 0},
        {130, 40, 70, 0},  {5, 1536, 129, 1}, {67, 1536, 129, 1}, {8, 2048, 8, 0},   {2, 8, 200, 0},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int n = cs[c].n, in = cs[c].in, out = cs[c].out, with_bias = (int)(c % 2);
        size_t nx = (size_t)n * (size_t)in, nw = (size_t)out * (size_t)in, ny = (size_t)n * (size_t)out;
        size_t off = cs[c].misalign ? 2 : 0;
        uint16_t *xb = xmalloc(sizeof(uint16_t) * nx), *w = xmalloc(sizeof(uint16_t) * nw),
                 *bias = xmalloc(sizeof(uint16_t) * (size_t)out);
        float *x = xmalloc(sizeof(float) * nx), *y1 = xmalloc(sizeof(float) * ny), *y2 = xmalloc(sizeof(float) * ny);
        double *ref = xmalloc(sizeof(double) * ny), *tol = xmalloc(sizeof(double) * ny);
        for (size_t i = 0; i < nx; i++) {
            xb[i] = seer_f32_to_bf16(nrand());
            x[i] = seer_bf16_to_f32(xb[i]);
        }
        for (size_t i = 0; i < nw; i++) w[i] = seer_f32_to_bf16(nrand() * 0.05f);
        for (int o = 0; o < out; o++) bias[o] = seer_f32_to_bf16(nrand());
        gemm_reference(xb, w, with_bias ? bias : NULL, n, in, out, ref, tol);

        seer_devptr_t dwbase = dalloc(sizeof(uint16_t) * nw + 16), dw = dwbase + off;
        htod(dw, w, sizeof(uint16_t) * nw);
        seer_devptr_t dxbbase = dalloc(sizeof(uint16_t) * nx + 16), dxb = dxbbase + off;
        htod(dxb, xb, sizeof(uint16_t) * nx);
        seer_devptr_t dbias = with_bias ? dput(bias, sizeof(uint16_t) * (size_t)out) : 0;
        seer_devptr_t dy = dguarded(NULL, sizeof(float) * ny);

        /* the GEMM, on tensor cores */
        void *gargs[] = {&dy, &dxb, &dw, &dbias, &n, &in, &out};
        launch("seer_gemm_bf16", cdiv(out, 64), cdiv(n, 64), 128, 0, gargs);
        dtoh(y1, dy, sizeof(float) * ny);
        check_guard(dy, sizeof(float) * ny, "seer_gemm_bf16");
        for (size_t i = 0; i < ny; i++)
            cr_assert(fabs(y1[i] - ref[i]) <= tol[i], "gemm n %d in %d out %d bias %d misalign %d: y[%zu][%zu] = %.9g, expected %.9g",
                      n, in, out, with_bias, cs[c].misalign, i / (size_t)out, i % (size_t)out, y1[i], ref[i]);

        /* the GEMV, for decode-sized n; it must agree with the GEMM */
        if (n <= 8) {
            seer_devptr_t dxbase = dalloc(sizeof(float) * nx + 16), dx = dxbase + (cs[c].misalign ? 4 : 0);
            htod(dx, x, sizeof(float) * nx);
            seer_devptr_t dy2 = dguarded(NULL, sizeof(float) * ny);
            for (int kern = 0; kern < 2; kern++) /* up to 8 tokens per pass, and one */
            for (int wpr = 1; wpr <= 8; wpr *= 2) { /* 1, 2, 4 or 8 warps per row */
                const char *name = kern ? "seer_gemv1_bf16" : "seer_gemv_bf16";
                for (size_t i = 0; i < ny; i++) y2[i] = NAN;
                htod(dy2, y2, sizeof(float) * ny); /* poisoned: every output must be written */
                void *vargs[] = {&dy2, &dx, &dw, &dbias, &n, &in, &out, &wpr};
                launch(name, cdiv(out, 8 / wpr), 1, 256, 0, vargs);
                dtoh(y2, dy2, sizeof(float) * ny);
                check_guard(dy2, sizeof(float) * ny, name);
                for (size_t i = 0; i < ny; i++) {
                    cr_assert(fabs(y2[i] - ref[i]) <= tol[i],
                              "%s (%d warps per row) n %d in %d out %d bias %d misalign %d: y[%zu][%zu] = %.9g, "
                              "expected %.9g",
                              name, wpr, n, in, out, with_bias, cs[c].misalign, i / (size_t)out, i % (size_t)out, y2[i],
                              ref[i]);
                    cr_assert(fabs(y2[i] - y1[i]) <= 2 * tol[i], "gemv vs gemm n %d in %d out %d: [%zu] %.9g vs %.9g",
                              n, in, out, i, y2[i], y1[i]);
                }
            }
        }
        free(xb);
        free(w);
        free(bias);
        free(x);
        free(y1);
        free(y2);
        free(ref);
        free(tol);
        gpu_done();
    }
}

/* ---- 9. seer_f32_to_bf16 ---- */

Test(cuda_kernels, f32_to_bf16) {
    gpu();
    static const uint32_t specials[] = {
        0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
        0x7f7fffffu, /* FLT_MAX: rounds up to inf */
        0x7f7f7fffu, /* just below the halfway point: stays finite */
        0x00000001u, /* the smallest subnormal: rounds to +0 */
        0x00008000u, /* a tie: to even, +0 */
        0x00018000u, /* a tie: to even, 0x0002 */
        0x3f808000u, /* 1 + 2^-8, a tie: to even, 1.0 */
        0x3f818000u, /* a tie: to even, up */
        0x3f80ffffu, 0x3f807fffu, 0xbf818000u, 0x0001ffffu, 0x807fffffu, 0x00800000u, 0x33800000u,
    };
    const long long nspec = (long long)(sizeof specials / sizeof specials[0]);
    long long n = 100003;
    float *x = xmalloc(sizeof(float) * (size_t)n);
    uint16_t *y = xmalloc(sizeof(uint16_t) * (size_t)n);
    for (long long i = 0; i < n; i++) x[i] = i < nspec ? f_from_bits(specials[i]) : nrand() * (float)pow(2.0, (double)(i % 61) - 30);
    seer_devptr_t dx = dput(x, sizeof(float) * (size_t)n), dy = dguarded(NULL, sizeof(uint16_t) * (size_t)n);
    for (int g = 0; g < 2; g++) {
        void *args[] = {&dy, &dx, &n};
        launch("seer_f32_to_bf16", g ? cdiv(n, 256) : 13, 1, 256, 0, args);
        dtoh(y, dy, sizeof(uint16_t) * (size_t)n);
        for (long long i = 0; i < n; i++) {
            uint16_t e = seer_f32_to_bf16(x[i]);
            if (isnan(x[i]))
                cr_assert((y[i] & 0x7f80u) == 0x7f80u && (y[i] & 0x7fu) != 0, "f32_to_bf16(NaN %08x) = %04x, not a NaN",
                          f_bits(x[i]), y[i]);
            else
                cr_assert(y[i] == e, "f32_to_bf16(%08x = %.9g) = %04x, expected %04x", f_bits(x[i]), x[i], y[i], e);
        }
    }
    check_guard(dy, sizeof(uint16_t) * (size_t)n, "seer_f32_to_bf16");
    free(x);
    free(y);
    gpu_done();
}

/* ---- 10, 12, 13. seer_add, seer_softcap, seer_scale ---- */

Test(cuda_kernels, add_softcap_scale) {
    gpu();
    long long n = 100003;
    size_t bytes = sizeof(float) * (size_t)n;
    float *x = xmalloc(bytes), *y = xmalloc(bytes), *r = xmalloc(bytes);
    for (long long i = 0; i < n; i++) {
        x[i] = nrand() * 50;
        y[i] = nrand() * 50;
    }
    x[0] = INFINITY;
    x[1] = -INFINITY;
    seer_devptr_t dx = dguarded(x, bytes), dy = dput(y, bytes);

    void *aargs[] = {&dx, &dy, &n};
    launch("seer_add", 7, 1, 256, 0, aargs); /* few blocks: many trips of the grid-stride loop */
    dtoh(r, dx, bytes);
    for (long long i = 0; i < n; i++) {
        float e = x[i] + y[i];
        cr_assert(r[i] == e, "add [%lld]: %.9g, expected %.9g", i, r[i], e);
    }
    check_guard(dx, bytes, "seer_add");

    htod(dx, x, bytes);
    float cap = 30.0f;
    void *cargs[] = {&dx, &n, &cap};
    launch("seer_softcap", cdiv(n, 256), 1, 256, 0, cargs);
    dtoh(r, dx, bytes);
    for (long long i = 0; i < n; i++) {
        double e = tanh((double)x[i] / cap) * cap;
        cr_assert(fabs(r[i] - e) <= TOL_SOFTCAP * ((isinf(x[i]) ? 0 : fabs(x[i])) + cap), "softcap [%lld] (%.9g): %.9g, expected %.9g", i,
                  x[i], r[i], e);
    }
    check_guard(dx, bytes, "seer_softcap");

    static const float scales[] = {0.125f, 3.3f};
    for (int s = 0; s < 2; s++) {
        htod(dx, x, bytes);
        float sc = scales[s];
        void *sargs[] = {&dx, &n, &sc};
        launch("seer_scale", 5, 1, 256, 0, sargs);
        dtoh(r, dx, bytes);
        for (long long i = 0; i < n; i++) {
            float e = x[i] * sc;
            cr_assert(r[i] == e, "scale %g [%lld]: %.9g, expected %.9g", (double)sc, i, r[i], e);
        }
        check_guard(dx, bytes, "seer_scale");
    }
    free(x);
    free(y);
    free(r);
    gpu_done();
}

/* ---- 11. seer_act_mul ---- */

static double act_ref(double g, int act) {
    if (act == 0) return g / (1.0 + exp(-g));
    if (act == 1) return 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
    return 0.5 * g * (1.0 + erf(g * 0.7071067811865476));
}

Test(cuda_kernels, act_mul) {
    gpu();
    long long n = 10007;
    size_t bytes = sizeof(float) * (size_t)n;
    float *g = xmalloc(bytes), *u = xmalloc(bytes), *r = xmalloc(bytes);
    for (long long i = 0; i < n; i++) {
        g[i] = uniform(-12.0f, 12.0f);
        u[i] = nrand();
    }
    g[0] = 0.0f;
    g[1] = -100.0f;
    g[2] = 100.0f;
    g[3] = -0.0f;
    seer_devptr_t dg = dguarded(g, bytes), du = dput(u, bytes), dnull = 0;
    seer_devptr_t dgb = dguarded(NULL, sizeof(uint16_t) * (size_t)n);
    uint16_t *gb = xmalloc(sizeof(uint16_t) * (size_t)n);
    for (int act = 0; act < 3; act++)
        for (int with_u = 0; with_u < 2; with_u++) {
            htod(dg, g, bytes);
            int a = act;
            int keep = 1;
            void *args[] = {&dg, with_u ? &du : &dnull, &n, &a, with_u ? &dgb : &dnull, &keep}; /* bf16 copy with u */
            launch("seer_act_mul", with_u ? 3 : cdiv(n, 256), 1, 256, 0, args);
            dtoh(r, dg, bytes);
            if (with_u) {
                dtoh(gb, dgb, sizeof(uint16_t) * (size_t)n);
                for (long long i = 0; i < n; i++)
                    cr_assert(gb[i] == seer_f32_to_bf16(r[i]), "act_mul %d: gb[%lld] %04x is not bf16 of %.9g", act, i,
                              gb[i], r[i]);
                check_guard(dgb, sizeof(uint16_t) * (size_t)n, "seer_act_mul gb");
                /* keep 0: the same bf16 copy, g untouched */
                uint16_t *gb2 = xmalloc(sizeof(uint16_t) * (size_t)n);
                float *g2 = xmalloc(bytes);
                htod(dg, g, bytes);
                keep = 0;
                launch("seer_act_mul", 5, 1, 256, 0, args);
                dtoh(gb2, dgb, sizeof(uint16_t) * (size_t)n);
                dtoh(g2, dg, bytes);
                cr_assert(memcmp(gb2, gb, sizeof(uint16_t) * (size_t)n) == 0, "act_mul %d keep 0: another bf16 copy", act);
                cr_assert(memcmp(g2, g, bytes) == 0, "act_mul %d keep 0: g was written", act);
                free(gb2), free(g2);
            }
            for (long long i = 0; i < n; i++) {
                double uf = with_u ? u[i] : 1.0;
                double e = act_ref(g[i], act) * uf;
                double tol = TOL_ACT_REL * fabs(e) + TOL_ACT_ABS * (1.0 + fabs(g[i])) * fabs(uf);
                cr_assert(fabs(r[i] - e) <= tol, "act %d u %d [%lld] g %.9g: %.9g, expected %.9g", act, with_u, i,
                          g[i], r[i], e);
            }
            check_guard(dg, bytes, "seer_act_mul");
        }
    free(g);
    free(u);
    free(r);
    free(gb);
    gpu_done();
}

/* ---- 14. seer_argmax_part, seer_argmax_final ---- */

static int argmax_ref(const float *x, int V) {
    int bi = -1;
    for (int i = 0; i < V; i++)
        if (!isnan(x[i]) && (bi < 0 || x[i] > x[bi])) bi = i;
    return bi;
}

Test(cuda_kernels, argmax) {
    gpu();
    const int V = 151937;
    float *x = xmalloc(sizeof(float) * (size_t)V);
    seer_devptr_t dx = dalloc(sizeof(float) * (size_t)V), dout = dalloc(sizeof(int));
    seer_devptr_t pv = dalloc(sizeof(float) * 1024), pix = dalloc(sizeof(int) * 1024);
    for (int c = 0; c < 10; c++) {
        int len = V;
        for (int i = 0; i < V; i++) x[i] = nrand() * 5;
        switch (c) {
        case 0: break; /* a unique maximum somewhere */
        case 1: /* ties across threads, within one thread's stride and across warps: lowest wins */
            x[70000] = x[5000] = x[5001] = x[5000 + 1024] = x[140000] = 100.0f;
            break;
        case 2: /* NaN (bigger than everything by bit pattern) before and after the maximum */
            x[3] = NAN;
            x[100] = 50.0f;
            x[V - 1] = NAN;
            x[7] = -NAN;
            break;
        case 3: /* all NaN */
            for (int i = 0; i < V; i++) x[i] = NAN;
            break;
        case 4: /* all NaN but one -inf */
            for (int i = 0; i < V; i++) x[i] = NAN;
            x[123456] = -INFINITY;
            break;
        case 5: /* all -inf: the first */
            for (int i = 0; i < V; i++) x[i] = -INFINITY;
            break;
        case 6: /* the last element */
            x[V - 1] = 1000.0f;
            break;
        case 7: /* V = 1 */
            len = 1;
            break;
        case 8: /* fewer elements than threads, max tie at the end */
            len = 37;
            x[36] = x[20] = 99.0f;
            break;
        case 9: /* -0 and +0 tie, everything else negative */
            for (int i = 0; i < V; i++) x[i] = -1.0f - (float)urand();
            x[9000] = 0.0f;
            x[800] = -0.0f;
            break;
        }
        htod(dx, x, sizeof(float) * (size_t)len);
        int e = argmax_ref(x, len);
        /* seer_argmax_part over 1 to 1024 blocks (one block of 1024 threads: a single block's
         * whole reduction), then seer_argmax_final */
        static const int parts[] = {1, 7, 264, 1024};
        for (int pc = 0; pc < 4; pc++) {
            int np = parts[pc], got = -7;
            void *pa[] = {&pv, &pix, &dx, &len};
            launch("seer_argmax_part", (unsigned)np, 1, np == 1 ? 1024 : 256, 0, pa);
            void *fa[] = {&dout, &pv, &pix, &np};
            launch("seer_argmax_final", 1, 1, 256, 0, fa);
            dtoh(&got, dout, sizeof(int));
            cr_assert(got == e, "argmax_part/final, %d parts, case %d (V %d): %d, expected %d", np, c, len, got, e);
        }
    }
    free(x);
    gpu_done();
}

/* ---- 15. seer_copy16 ---- */

Test(cuda_kernels, copy16) {
    gpu();
    long long n16 = 100003;
    size_t bytes = (size_t)n16 * 16;
    unsigned char *src = xmalloc(bytes), *dst = xmalloc(bytes);
    for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(urand() * 256);
    seer_devptr_t ds = dput(src, bytes), dd = dguarded(NULL, bytes);
    void *args[] = {&dd, &ds, &n16};
    launch("seer_copy16", 11, 1, 256, 0, args);
    dtoh(dst, dd, bytes);
    cr_assert(memcmp(src, dst, bytes) == 0, "copy16: the copy differs");
    check_guard(dd, bytes, "seer_copy16");
    free(src);
    free(dst);
    gpu_done();
}

/* ---- 16, 17. seer_fill_bf16, seer_fill_f32 ---- */

static float hash_uniform(unsigned long long seed, unsigned long long i) { /* the kernels' hash */
    unsigned long long z = seed ^ (i * 0x9E3779B97F4A7C15ull);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(unsigned)(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

Test(cuda_kernels, fill) {
    gpu();
    long long n = 100003;
    float *f = xmalloc(sizeof(float) * (size_t)n), *f2 = xmalloc(sizeof(float) * (size_t)n);
    uint16_t *b = xmalloc(sizeof(uint16_t) * (size_t)n);
    seer_devptr_t df = dguarded(NULL, sizeof(float) * (size_t)n), db = dguarded(NULL, sizeof(uint16_t) * (size_t)n);
    unsigned long long seed = 0x1234abcdull;
    float scale = 0.02f;

    void *fargs[] = {&df, &n, &seed, &scale};
    launch("seer_fill_f32", 9, 1, 256, 0, fargs);
    dtoh(f, df, sizeof(float) * (size_t)n);
    double mean = 0;
    for (long long i = 0; i < n; i++) {
        float e = scale * hash_uniform(seed, (unsigned long long)i);
        cr_assert(f[i] == e, "fill_f32 [%lld]: %.9g, expected %.9g", i, f[i], e);
        cr_assert(f[i] >= -scale && f[i] < scale, "fill_f32 [%lld] = %g outside [-%g, %g)", i, f[i], (double)scale,
                  (double)scale);
        mean += f[i];
    }
    mean /= (double)n;
    cr_assert(fabs(mean) < 0.01 * scale, "fill_f32: mean %g is not ~0", mean);
    check_guard(df, sizeof(float) * (size_t)n, "seer_fill_f32");

    /* the same seed with another launch shape gives the same values; another seed does not */
    launch("seer_fill_f32", cdiv(n, 256), 1, 256, 0, fargs);
    dtoh(f2, df, sizeof(float) * (size_t)n);
    cr_assert(memcmp(f, f2, sizeof(float) * (size_t)n) == 0, "fill_f32 depends on the launch shape");
    unsigned long long seed2 = seed + 1;
    void *fargs2[] = {&df, &n, &seed2, &scale};
    launch("seer_fill_f32", 9, 1, 256, 0, fargs2);
    dtoh(f2, df, sizeof(float) * (size_t)n);
    long long same = 0;
    for (long long i = 0; i < n; i++) same += f[i] == f2[i];
    cr_assert(same < n / 100, "fill_f32: seeds %llu and %llu agree on %lld of %lld values", seed, seed2, same, n);

    void *bargs[] = {&db, &n, &seed, &scale};
    launch("seer_fill_bf16", 9, 1, 256, 0, bargs);
    dtoh(b, db, sizeof(uint16_t) * (size_t)n);
    for (long long i = 0; i < n; i++) {
        uint16_t e = seer_f32_to_bf16(scale * hash_uniform(seed, (unsigned long long)i));
        cr_assert(b[i] == e, "fill_bf16 [%lld]: %04x, expected %04x", i, b[i], e);
    }
    check_guard(db, sizeof(uint16_t) * (size_t)n, "seer_fill_bf16");
    free(f);
    free(f2);
    free(b);
    gpu_done();
}

/* ---- 18. the fused kernels give the bits of the kernels they replace ----
 * engine/cuda/gpu_model.c launches these where no hook looks between the pieces; a sequence run
 * in a batch and alone can take different paths (a hook on one sequence of the batch turns a
 * fusion off for the whole step), so they must agree bit for bit, not within a tolerance. */

static void expect_same_bits(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        cr_assert(f_bits(a[i]) == f_bits(b[i]), "%s: [%zu] %.9g (%08x), the unfused kernels give %.9g (%08x)", what, i,
                  a[i], f_bits(a[i]), b[i], f_bits(b[i]));
}

/* seer_gemv_segs' argument (kernels/linear.cu, gemv_segs_t) */
typedef struct {
    seer_devptr_t y, W, W2, bias;
    int out, wpr, blocks, pad;
} t_seg_t;
typedef struct {
    t_seg_t s[3];
    int nseg, n, in, act;
} t_segs_t;

/* seer_gemv1_bf16 (what a sequence decoding alone takes) is the reference for every variant:
 * the 8-token GEMV, the one-token and batched (4 rows per warp, x in shared memory) kernels, each
 * alone, as segments of one launch, and as a gated pair. */
Test(cuda_kernels, gemv_variants_match_the_one_token_gemv) {
    gpu();
    static const struct {
        int n, in, outs[3], wprs[3];
    } cs[] = {
        {1, 2304, {200, 72, 72}, {1, 2, 8}}, {3, 2304, {200, 72, 72}, {2, 4, 1}}, {8, 1032, {129, 16, 16}, {1, 1, 2}},
        {13, 512, {64, 33, 33}, {4, 2, 1}},  {1, 1003, {50, 9, 9}, {1, 2, 4}},    {5, 1003, {50, 9, 9}, {8, 1, 2}},
        {16, 3584, {300, 61, 61}, {1, 2, 4}}, {2, 1040, {7, 130, 130}, {4, 1, 1}},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int n = cs[c].n, in = cs[c].in;
        size_t nx = (size_t)n * (size_t)in;
        float *x = xmalloc(sizeof(float) * nx);
        for (size_t i = 0; i < nx; i++) x[i] = nrand();
        seer_devptr_t dx = dput(x, sizeof(float) * nx), W[3], B[3], Y[3], R[3];
        for (int i = 0; i < 3; i++) {
            int out = cs[c].outs[i];
            size_t nw = (size_t)out * (size_t)in;
            uint16_t *w = xmalloc(sizeof(uint16_t) * nw), *b = xmalloc(sizeof(uint16_t) * (size_t)out);
            for (size_t j = 0; j < nw; j++) w[j] = seer_f32_to_bf16(nrand() * 0.05f);
            for (int j = 0; j < out; j++) b[j] = seer_f32_to_bf16(nrand());
            W[i] = dput(w, sizeof(uint16_t) * nw), B[i] = i == 1 ? 0 : dput(b, sizeof(uint16_t) * (size_t)out);
            Y[i] = dguarded(NULL, sizeof(float) * (size_t)n * out), R[i] = dalloc(sizeof(float) * (size_t)n * out);
            free(w), free(b);
        }
        /* the references: each matrix alone, and the gated pair (matrices 1 and 2, same shape)
         * as two GEMVs and seer_act_mul, for each activation */
        float *ref[3], *gref[3];
        for (int i = 0; i < 3; i++) {
            int out = cs[c].outs[i], wpr = cs[c].wprs[i];
            void *pa[] = {&R[i], &dx, &W[i], &B[i], &n, &in, &out, &wpr};
            launch("seer_gemv1_bf16", cdiv(out, 8 / wpr), 1, 256, 0, pa);
            ref[i] = xmalloc(sizeof(float) * (size_t)n * out);
            dtoh(ref[i], R[i], sizeof(float) * (size_t)n * out);
        }
        int gout = cs[c].outs[1], gwpr = cs[c].wprs[1];
        size_t gny = (size_t)n * gout;
        for (int act = 0; act < 3; act++) {
            seer_devptr_t dnull = 0;
            void *g1[] = {&R[1], &dx, &W[1], &dnull, &n, &in, &gout, &gwpr};
            void *g2[] = {&R[2], &dx, &W[2], &dnull, &n, &in, &gout, &gwpr};
            launch("seer_gemv1_bf16", cdiv(gout, 8 / gwpr), 1, 256, 0, g1);
            launch("seer_gemv1_bf16", cdiv(gout, 8 / gwpr), 1, 256, 0, g2);
            long long nI = (long long)gny;
            int a = act;
            int keep = 1;
            void *am[] = {&R[1], &R[2], &nI, &a, &dnull, &keep};
            launch("seer_act_mul", cdiv(nI, 256), 1, 256, 0, am);
            gref[act] = xmalloc(sizeof(float) * gny);
            dtoh(gref[act], R[1], sizeof(float) * gny);
        }
        int rows_ok = n > 1 && in % 8 == 0;
        for (int i = 0; i < 3; i++) rows_ok &= cs[c].wprs[i] <= 4;
        static const struct {
            const char *alone, *segs, *gated;
            int rows, needs; /* rows per warp; needs: 0 any n, 1 n == 1, 2 rows_ok */
        } ks[] = {{"seer_gemv_bf16", "seer_gemv_segs", "seer_gemv_gated", 1, 0},
                  {"seer_gemv1_bf16", "seer_gemv1_segs", "seer_gemv1_gated", 1, 1},
                  {"seer_gemv_rows_bf16", "seer_gemv_rows_segs", "seer_gemv_rows_gated", 4, 2}};
        for (int k = 0; k < 3; k++) {
            if ((ks[k].needs == 1 && n != 1) || (ks[k].needs == 2 && !rows_ok)) continue;
            char what[128];
            t_segs_t S;
            memset(&S, 0, sizeof S);
            S.nseg = 3, S.n = n, S.in = in;
            unsigned blocks = 0;
            for (int i = 0; i < 3; i++) {
                int out = cs[c].outs[i], wpr = cs[c].wprs[i], per = ks[k].rows * (8 / wpr);
                S.s[i] = (t_seg_t){.y = Y[i], .W = W[i], .bias = B[i], .out = out, .wpr = wpr, .blocks = (int)cdiv(out, per)};
                blocks += (unsigned)S.s[i].blocks;
            }
            /* each matrix alone, then all three as segments of one launch */
            for (int segs = 0; segs < 2; segs++) {
                for (int i = 0; i < 3; i++) {
                    size_t ny = (size_t)n * cs[c].outs[i];
                    float *poison = xmalloc(sizeof(float) * ny);
                    for (size_t j = 0; j < ny; j++) poison[j] = NAN;
                    htod(Y[i], poison, sizeof(float) * ny);
                    free(poison);
                    if (!segs) {
                        int out = cs[c].outs[i], wpr = cs[c].wprs[i];
                        void *pa[] = {&Y[i], &dx, &W[i], &B[i], &n, &in, &out, &wpr};
                        launch(ks[k].alone, (unsigned)S.s[i].blocks, 1, 256, 0, pa);
                    }
                }
                if (segs) {
                    void *a[] = {&dx, &S};
                    launch(ks[k].segs, blocks, 1, 256, 0, a);
                }
                for (int i = 0; i < 3; i++) {
                    size_t ny = (size_t)n * cs[c].outs[i];
                    float *y = xmalloc(sizeof(float) * ny);
                    dtoh(y, Y[i], sizeof(float) * ny);
                    snprintf(what, sizeof what, "%s case %zu matrix %d (n %d in %d out %d wpr %d)",
                             segs ? ks[k].segs : ks[k].alone, c, i, n, in, cs[c].outs[i], cs[c].wprs[i]);
                    expect_same_bits(y, ref[i], ny, what);
                    check_guard(Y[i], sizeof(float) * ny, what);
                    free(y);
                }
            }
            for (int act = 0; act < 3; act++) {
                t_segs_t G;
                memset(&G, 0, sizeof G);
                G.nseg = 1, G.n = n, G.in = in, G.act = act;
                unsigned gb = cdiv(gout, ks[k].rows * (8 / gwpr));
                G.s[0] = (t_seg_t){.y = Y[1], .W = W[1], .W2 = W[2], .out = gout, .wpr = gwpr, .blocks = (int)gb};
                void *ga[] = {&dx, &G};
                launch(ks[k].gated, gb, 1, 256, 0, ga);
                float *y = xmalloc(sizeof(float) * gny);
                dtoh(y, Y[1], sizeof(float) * gny);
                snprintf(what, sizeof what, "%s act %d case %zu (n %d in %d out %d wpr %d)", ks[k].gated, act, c, n, in,
                         gout, gwpr);
                expect_same_bits(y, gref[act], gny, what);
                check_guard(Y[1], sizeof(float) * gny, what);
                free(y);
            }
        }
        for (int i = 0; i < 3; i++) free(ref[i]), free(gref[i]);
        free(x);
        gpu_done();
    }
}

Test(cuda_kernels, add_rmsnorm_matches_add_then_rmsnorm) {
    gpu();
    static const int Ds[] = {2304, 3584, 100, 4096};
    for (int di = 0; di < 4; di++)
        for (int with_wa = 0; with_wa < 2; with_wa++)
            for (int one_plus = 0; one_plus < 2; one_plus++) {
                int D = Ds[di], rows = di == 1 ? 1 : 5, op = one_plus;
                float eps = 1e-6f;
                size_t nx = (size_t)rows * D, bytes = sizeof(float) * nx;
                float *x = xmalloc(bytes), *a = xmalloc(bytes), *y1 = xmalloc(bytes), *y2 = xmalloc(bytes);
                float *x1 = xmalloc(bytes), *x2 = xmalloc(bytes);
                uint16_t *wa = xmalloc(sizeof(uint16_t) * D), *w = xmalloc(sizeof(uint16_t) * D), *yb = xmalloc(sizeof(uint16_t) * nx);
                for (size_t i = 0; i < nx; i++) x[i] = nrand() * 3, a[i] = nrand() * 10;
                for (int j = 0; j < D; j++) wa[j] = seer_f32_to_bf16(nrand() * 0.3f), w[j] = seer_f32_to_bf16(1 + nrand() * 0.3f);
                seer_devptr_t dwa = with_wa ? dput(wa, sizeof(uint16_t) * D) : 0, dw = dput(w, sizeof(uint16_t) * D);
                /* fused: y written over a (as the forward pass does) */
                seer_devptr_t fx = dguarded(x, bytes), fa = dguarded(a, bytes), fyb = dguarded(NULL, sizeof(uint16_t) * nx);
                void *fargs[] = {&fx, &fa, &dwa, &dw, &fa, &fyb, &D, &eps, &op};
                launch("seer_add_rmsnorm", (unsigned)rows, 1, 256, 0, fargs);
                dtoh(x1, fx, bytes), dtoh(y1, fa, bytes), dtoh(yb, fyb, sizeof(uint16_t) * nx);
                /* unfused: [rmsnorm a in place], add, rmsnorm into a */
                seer_devptr_t ux = dput(x, bytes), ua = dput(a, bytes), dnull = 0;
                if (with_wa) {
                    void *r1[] = {&ua, &ua, &dwa, &D, &eps, &op, &dnull};
                    launch("seer_rmsnorm", (unsigned)rows, 1, 256, 0, r1);
                }
                long long n = (long long)nx;
                void *ad[] = {&ux, &ua, &n};
                launch("seer_add", cdiv(n, 256), 1, 256, 0, ad);
                void *r2[] = {&ua, &ux, &dw, &D, &eps, &op, &dnull};
                launch("seer_rmsnorm", (unsigned)rows, 1, 256, 0, r2);
                dtoh(x2, ux, bytes), dtoh(y2, ua, bytes);
                char what[96];
                snprintf(what, sizeof what, "add_rmsnorm D %d wa %d one_plus %d: x", D, with_wa, one_plus);
                expect_same_bits(x1, x2, nx, what);
                snprintf(what, sizeof what, "add_rmsnorm D %d wa %d one_plus %d: y", D, with_wa, one_plus);
                expect_same_bits(y1, y2, nx, what);
                for (size_t i = 0; i < nx; i++)
                    cr_assert(yb[i] == seer_f32_to_bf16(y1[i]), "add_rmsnorm: yb[%zu] is not bf16(y)", i);
                check_guard(fx, bytes, "seer_add_rmsnorm x");
                check_guard(fa, bytes, "seer_add_rmsnorm y");
                check_guard(fyb, sizeof(uint16_t) * nx, "seer_add_rmsnorm yb");
                free(x), free(a), free(y1), free(y2), free(x1), free(x2), free(wa), free(w), free(yb);
                gpu_done();
            }
}

Test(cuda_kernels, rope_store_matches_rope_then_kv_store) {
    gpu();
    static const struct {
        int n, H, KH, hd, start, batch;
    } cs[] = {{5, 8, 4, 256, 7, 0}, {1, 16, 8, 128, 300, 0}, {67, 4, 1, 64, 0, 0}, {4, 8, 4, 256, 0, 1}, {3, 6, 2, 80, 0, 1}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int n = cs[c].n, H = cs[c].H, KH = cs[c].KH, hd = cs[c].hd, start = cs[c].start, il = 0, rot = hd;
        int kvd = KH * hd, half = hd / 2, layer = 1, maxt = start + n + 3;
        size_t nq = (size_t)n * H * hd, nk = (size_t)n * kvd, ncache = (size_t)2 * maxt * kvd; /* 2 layers */
        float *q = xmalloc(sizeof(float) * nq), *k = xmalloc(sizeof(float) * nk), *v = xmalloc(sizeof(float) * nk);
        float *inv = xmalloc(sizeof(float) * half), *o1 = xmalloc(sizeof(float) * nq), *o2 = xmalloc(sizeof(float) * nq);
        float *k1 = xmalloc(sizeof(float) * nk), *k2 = xmalloc(sizeof(float) * nk);
        uint16_t *c1 = xmalloc(2 * ncache), *c2 = xmalloc(2 * ncache);
        for (size_t i = 0; i < nq; i++) q[i] = nrand();
        for (size_t i = 0; i < nk; i++) k[i] = nrand(), v[i] = nrand() * 4;
        for (int i = 0; i < half; i++) inv[i] = (float)pow(10000.0, -2.0 * i / hd);
        /* a batch: rows of one cache (sequence 0) at scattered positions, layer 1 */
        int *pos = xmalloc(sizeof(int) * n), *seq = xmalloc(sizeof(int) * n);
        for (int t = 0; t < n; t++) pos[t] = (t * 5 + 2) % maxt, seq[t] = 0;
        seer_devptr_t dinv = dput(inv, sizeof(float) * half), dv = dput(v, sizeof(float) * nk);
        seer_devptr_t dpos = dput(pos, sizeof(int) * n), dseq = dput(seq, sizeof(int) * n);
        int mt[1] = {maxt};
        seer_devptr_t dmt = dput(mt, sizeof mt);
        for (int run = 0; run < 2; run++) { /* 0: fused, 1: rope, rope, kv_store */
            seer_devptr_t dq = dguarded(q, sizeof(float) * nq), dk = dguarded(k, sizeof(float) * nk);
            uint16_t *fill = run ? c2 : c1;
            for (size_t i = 0; i < ncache; i++) fill[i] = 0xABCD;
            seer_devptr_t kc = dguarded(fill, 2 * ncache), vc = dguarded(fill, 2 * ncache), dnull = 0;
            unsigned long long kb = kc, vb = vc;
            seer_devptr_t dkb = dput(&kb, 8), dvb = dput(&vb, 8);
            seer_devptr_t lkc = kc + (size_t)layer * maxt * kvd * 2, lvc = vc + (size_t)layer * maxt * kvd * 2;
            int b = cs[c].batch;
            if (run == 0) {
                void *a[] = {&dq, &dk, &dv, &H, &KH, &hd, &rot, &dinv, &start, &il, b ? &dnull : &lkc, b ? &dnull : &lvc,
                             b ? &dpos : &dnull, b ? &dseq : &dnull, b ? &dkb : &dnull, b ? &dvb : &dnull, b ? &dmt : &dnull, &layer};
                launch("seer_rope_store", (unsigned)n, (unsigned)(H + KH), 128, 0, a);
            } else {
                seer_devptr_t p = b ? dpos : 0;
                void *aq[] = {&dq, &H, &hd, &rot, &dinv, &start, &il, &p};
                void *ak[] = {&dk, &KH, &hd, &rot, &dinv, &start, &il, &p};
                launch("seer_rope", (unsigned)n, (unsigned)H, 128, 0, aq);
                launch("seer_rope", (unsigned)n, (unsigned)KH, 128, 0, ak);
                if (b) {
                    void *as[] = {&dk, &dv, &n, &kvd, &layer, &dpos, &dseq, &dkb, &dvb, &dmt};
                    launch("seer_kv_store_rows", cdiv((long long)nk, 256), 1, 256, 0, as);
                } else {
                    void *as[] = {&lkc, &lvc, &dk, &dv, &n, &start, &kvd};
                    launch("seer_kv_store", cdiv((long long)nk, 256), 1, 256, 0, as);
                }
            }
            dtoh(run ? o2 : o1, dq, sizeof(float) * nq);
            dtoh(run ? k2 : k1, dk, sizeof(float) * nk);
            dtoh(fill, kc, 2 * ncache);
            uint16_t *fv = xmalloc(2 * ncache);
            dtoh(fv, vc, 2 * ncache);
            for (size_t i = 0; i < ncache; i++) fill[i] ^= (uint16_t)(fv[i] * 31u); /* keys and values in one check */
            free(fv);
            check_guard(dq, sizeof(float) * nq, "rope_store q");
            check_guard(dk, sizeof(float) * nk, "rope_store k");
            check_guard(kc, 2 * ncache, "rope_store key cache");
            check_guard(vc, 2 * ncache, "rope_store value cache");
        }
        char what[96];
        snprintf(what, sizeof what, "rope_store case %zu: q", c);
        expect_same_bits(o1, o2, nq, what);
        snprintf(what, sizeof what, "rope_store case %zu: k", c);
        expect_same_bits(k1, k2, nk, what);
        for (size_t i = 0; i < ncache; i++)
            cr_assert(c1[i] == c2[i], "rope_store case %zu: cache element %zu %04x, unfused %04x", c, i, c1[i], c2[i]);
        free(q), free(k), free(v), free(inv), free(o1), free(o2), free(k1), free(k2), free(c1), free(c2), free(pos), free(seq);
        gpu_done();
    }
}
