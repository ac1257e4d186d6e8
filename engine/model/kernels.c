/* CPU kernels of the forward pass. The linear layer dominates: W is read once per call and
 * reused across up to four tokens at a time; rows of W are split across the thread pool.
 * bf16/f16 weights are widened in registers. AVX2+FMA paths are chosen at run time
 * (__builtin_cpu_supports), with portable loops as the reference and the fallback. */
#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define SEER_X86 1
#endif

#include "model_private.h"

/* ---- portable reference ------------------------------------------------------------------- */

static inline float load_w(const seer_weight_t *w, size_t i) {
    switch (w->dtype) {
    case SEER_BF16: return seer_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case SEER_F16: return seer_f16_to_f32(((const uint16_t *)w->data)[i]);
    default: return ((const float *)w->data)[i];
    }
}

static void dot_rows_generic(const seer_weight_t *w, int64_t row, const float *x, int ntok, int64_t in, float *out) {
    for (int t = 0; t < ntok; t++) {
        const float *xt = x + (size_t)t * in;
        size_t base = (size_t)row * in;
        float acc = 0.f;
        for (int64_t i = 0; i < in; i++) acc += load_w(w, base + i) * xt[i];
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
__attribute__((target("avx2,fma,f16c"))) static inline __m256 load8(const seer_weight_t *w, size_t i) {
    switch (w->dtype) {
    case SEER_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w->data + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case SEER_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w->data + i)));
    default: return _mm256_loadu_ps((const float *)w->data + i);
    }
}

__attribute__((target("avx2,fma,f16c"))) static inline float hsum8(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

/* One row of W against up to 4 tokens: each W vector is loaded once and used 4 times. */
__attribute__((target("avx2,fma,f16c"))) static void dot_rows_avx2(const seer_weight_t *w, int64_t row, const float *x,
                                                              int ntok, int64_t in, float *out) {
    size_t base = (size_t)row * (size_t)in;
    int64_t n8 = in & ~(int64_t)7;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const float *x0 = x, *x1 = x + in, *x2 = x + 2 * in, *x3 = x + 3 * in;
    if (ntok == 4) {
        for (int64_t i = 0; i < n8; i += 8) {
            __m256 wv = load8(w, base + (size_t)i);
            a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + i), a0);
            a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + i), a1);
            a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x2 + i), a2);
            a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x3 + i), a3);
        }
        out[0] = hsum8(a0);
        out[1] = hsum8(a1);
        out[2] = hsum8(a2);
        out[3] = hsum8(a3);
    } else {
        for (int t = 0; t < ntok; t++) {
            const float *xt = x + (size_t)t * in;
            __m256 acc = _mm256_setzero_ps();
            for (int64_t i = 0; i < n8; i += 8) acc = _mm256_fmadd_ps(load8(w, base + (size_t)i), _mm256_loadu_ps(xt + i), acc);
            out[t] = hsum8(acc);
        }
    }
    for (int64_t i = n8; i < in; i++) { /* tail */
        float wi = load_w(w, base + (size_t)i);
        for (int t = 0; t < ntok; t++) out[t] += wi * x[(size_t)t * in + i];
    }
}
#endif

typedef void (*dot_rows_fn)(const seer_weight_t *, int64_t, const float *, int, int64_t, float *);

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

static dot_rows_fn pick_dot_rows(void) {
#ifdef SEER_X86
    if (seer_k_have_avx2()) return dot_rows_avx2;
#endif
    return dot_rows_generic;
}

typedef struct {
    float *y;
    const float *x;
    int n;
    const seer_weight_t *w, *bias;
    dot_rows_fn dot;
} linear_job;

static void linear_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    linear_job *j = ctx;
    int64_t in = j->w->cols, out = j->w->rows;
    float tmp[4];
    for (int t0 = 0; t0 < j->n; t0 += 4) {
        int nt = j->n - t0 < 4 ? j->n - t0 : 4;
        const float *xt = j->x + (size_t)t0 * in;
        for (size_t r = begin; r < end; r++) {
            j->dot(j->w, (int64_t)r, xt, nt, in, tmp);
            float b = j->bias && j->bias->data ? load_w(j->bias, r) : 0.f;
            for (int t = 0; t < nt; t++) j->y[(size_t)(t0 + t) * out + r] = tmp[t] + b;
        }
    }
}

void seer_k_linear(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias) {
    static dot_rows_fn dot;
    if (!dot) dot = pick_dot_rows();
    linear_job j = {.y = y, .x = x, .n = n, .w = w, .bias = bias, .dot = dot};
    /* Enough rows per chunk that a thread's share of W is worth waking it for. */
    size_t min_rows = (size_t)(w->cols * n < 4096 ? 64 : 8);
    seer_pool_for(p, (size_t)w->rows, min_rows, linear_chunk, &j);
}

void seer_k_rmsnorm(float *y, const float *x, int n, int d, const seer_weight_t *w, float eps, int one_plus) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * d;
        float *yt = y + (size_t)t * d;
        double ss = 0.0;
        for (int i = 0; i < d; i++) ss += (double)xt[i] * xt[i];
        float inv = 1.0f / sqrtf((float)(ss / d) + eps);
        for (int i = 0; i < d; i++) {
            float wi = load_w(w, (size_t)i);
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
    for (int64_t i = 0; i < table->cols; i++) out[i] = load_w(table, base + (size_t)i);
}

void seer_k_silu_mul(float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
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
        float sum = 0.f;
        for (int p = first; p <= pos; p++) {
            sc[p] = expf(sc[p] - mx);
            sum += sc[p];
        }
        float inv = 1.0f / sum;
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
    seer_pool_for(p, (size_t)a->n * (size_t)a->H, 4, attention_chunk, (void *)a);
}
