/* Shared pieces of gpt2.c and gpt_neox.c; see gpt_common.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define SEER_GPT_X86 1
#endif

#include "gpt_common.h"
#include "weight_load.h"

int seer_gpt_activation(const seer_model_t *m, const char *key, const char *dflt, seer_act_t *act, seer_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->config_json, key);
    const char *name = dflt;
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v)) return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"%s\" must be a string", m->dir, key);
        name = v->valuestring;
    }
    if (strcmp(name, "gelu") == 0) *act = SEER_ACT_GELU_ERF;
    else if (strcmp(name, "gelu_new") == 0 || strcmp(name, "gelu_pytorch_tanh") == 0 || strcmp(name, "gelu_fast") == 0)
        *act = SEER_ACT_GELU_TANH;
    else if (strcmp(name, "relu") == 0) *act = SEER_ACT_RELU;
    else
        return seer_err_set(err, SEER_EPARSE,
                            "%s/config.json: %s \"%s\" is not supported (supported: gelu, gelu_new, gelu_pytorch_tanh, "
                            "gelu_fast, relu)",
                            m->dir, key, name);
    return 0;
}

int seer_gpt_bool(const seer_model_t *m, const char *key, int dflt, int *out, seer_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->config_json, key);
    *out = dflt;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return seer_err_set(err, SEER_EPARSE, "%s/config.json: \"%s\" must be true or false", m->dir, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

void seer_gpt_act(float *x, size_t n, seer_act_t act) {
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        switch (act) {
        case SEER_ACT_GELU_TANH: x[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v))); break;
        case SEER_ACT_RELU: x[i] = v > 0.f ? v : 0.f; break;
        default: x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); break;
        }
    }
}

void seer_gpt_layernorm(float *y, const float *x, int n, int d, const seer_weight_t *w, const seer_weight_t *b, float eps) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * d;
        float *yt = y + (size_t)t * d;
        double s = 0.0;
        for (int i = 0; i < d; i++) s += xt[i];
        double mean = s / d, ss = 0.0;
        for (int i = 0; i < d; i++) ss += ((double)xt[i] - mean) * ((double)xt[i] - mean);
        float rstd = 1.0f / sqrtf((float)(ss / d) + eps), mf = (float)mean;
        for (int i = 0; i < d; i++) {
            float v = (xt[i] - mf) * rstd * seer_w_load(w, (size_t)i);
            yt[i] = b && b->data ? v + seer_w_load(b, (size_t)i) : v;
        }
    }
}

/* ---- transposed linear ------------------------------------------------------------------- */

#define TL_COLS 16  /* output columns per work item of the pool */
#define TL_TILE 1024 /* columns accumulated at once: 4 tokens x 1024 floats (16 KiB) stay in L1 */

typedef struct {
    float *y;
    const float *x;
    int n;
    const seer_weight_t *w, *bias;
} tlin_job;

/* Columns [c0, c1) for tokens [t0, t0 + nt), nt <= 4: y[t][c] = sum_i x[t][i] W[i][c], walking
 * W row by row (contiguous reads of the tile) and accumulating in y. Portable loop. */
static void tlin_tile_generic(const tlin_job *j, int64_t c0, int64_t c1, int t0, int nt) {
    int64_t in = j->w->rows, out = j->w->cols;
    for (int t = 0; t < nt; t++) memset(j->y + (size_t)(t0 + t) * out + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    for (int64_t i = 0; i < in; i++) {
        size_t base = (size_t)i * (size_t)out;
        for (int t = 0; t < nt; t++) {
            float xv = j->x[(size_t)(t0 + t) * in + i];
            float *yt = j->y + (size_t)(t0 + t) * out;
            for (int64_t c = c0; c < c1; c++) yt[c] += xv * seer_w_load(j->w, base + (size_t)c);
        }
    }
}

#ifdef SEER_GPT_X86
/* The same with 8-wide FMA: each weight vector is loaded once per (up to) 4 tokens. */
__attribute__((target("avx2,fma,f16c"))) static void tlin_tile_avx2(const tlin_job *j, int64_t c0, int64_t c1, int t0,
                                                               int nt) {
    int64_t in = j->w->rows, out = j->w->cols;
    int64_t c8 = c0 + ((c1 - c0) & ~(int64_t)7);
    float *y[4];
    for (int t = 0; t < nt; t++) {
        y[t] = j->y + (size_t)(t0 + t) * out;
        memset(y[t] + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    }
    for (int64_t i = 0; i < in; i++) {
        size_t base = (size_t)i * (size_t)out;
        float xs[4];
        __m256 xv[4];
        for (int t = 0; t < nt; t++) {
            xs[t] = j->x[(size_t)(t0 + t) * in + i];
            xv[t] = _mm256_set1_ps(xs[t]);
        }
        if (nt == 4) {
            for (int64_t c = c0; c < c8; c += 8) {
                __m256 wv = seer_w_load8(j->w, base + (size_t)c);
                _mm256_storeu_ps(y[0] + c, _mm256_fmadd_ps(wv, xv[0], _mm256_loadu_ps(y[0] + c)));
                _mm256_storeu_ps(y[1] + c, _mm256_fmadd_ps(wv, xv[1], _mm256_loadu_ps(y[1] + c)));
                _mm256_storeu_ps(y[2] + c, _mm256_fmadd_ps(wv, xv[2], _mm256_loadu_ps(y[2] + c)));
                _mm256_storeu_ps(y[3] + c, _mm256_fmadd_ps(wv, xv[3], _mm256_loadu_ps(y[3] + c)));
            }
        } else {
            for (int64_t c = c0; c < c8; c += 8) {
                __m256 wv = seer_w_load8(j->w, base + (size_t)c);
                for (int t = 0; t < nt; t++) _mm256_storeu_ps(y[t] + c, _mm256_fmadd_ps(wv, xv[t], _mm256_loadu_ps(y[t] + c)));
            }
        }
        for (int64_t c = c8; c < c1; c++) {
            float wi = seer_w_load(j->w, base + (size_t)c);
            for (int t = 0; t < nt; t++) y[t][c] += xs[t] * wi;
        }
    }
}

static int have_avx2(void) { return seer_k_have_avx2(); }
#endif

static void tlin_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    const tlin_job *j = ctx;
    int64_t out = j->w->cols;
    int64_t c0 = (int64_t)begin * TL_COLS, c1 = (int64_t)end * TL_COLS;
    if (c1 > out) c1 = out;
    for (int64_t a = c0; a < c1; a += TL_TILE) {
        int64_t b = a + TL_TILE < c1 ? a + TL_TILE : c1;
        for (int t0 = 0; t0 < j->n; t0 += 4) {
            int nt = j->n - t0 < 4 ? j->n - t0 : 4;
#ifdef SEER_GPT_X86
            if (have_avx2()) tlin_tile_avx2(j, a, b, t0, nt);
            else
#endif
                tlin_tile_generic(j, a, b, t0, nt);
            if (j->bias && j->bias->data)
                for (int t = 0; t < nt; t++)
                    for (int64_t c = a; c < b; c++) j->y[(size_t)(t0 + t) * out + c] += seer_w_load(j->bias, (size_t)c);
        }
    }
}

void seer_gpt_linear_t(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias) {
    tlin_job j = {.y = y, .x = x, .n = n, .w = w, .bias = bias};
    size_t blocks = (size_t)((w->cols + TL_COLS - 1) / TL_COLS);
    size_t min_blocks = (size_t)(w->rows * n < 4096 ? 4 : 1);
    seer_pool_for(p, blocks, min_blocks, tlin_chunk, &j);
}


