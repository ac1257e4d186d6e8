/* The generic decoder on a CUDA device (see gpu_model.h). Host code only: it uploads weights,
 * sizes the working set and launches the kernels of the kernels/ sources in the order the CPU
 * architectures run their steps (llama.c, gemma_common.c), so a hook sees the same values at
 * the same point on either backend, up to bf16 rounding of weights, matrix inputs and cache. */
#include "gpu_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_attn.h"
#include "host/host.h"

#define GEMV_MAX_TOKENS 8 /* seer_gemv_bf16 keeps this many accumulators per lane */
#define GEMV_ROWS 4        /* seer_gemv_rows_bf16: rows per warp */
#define RN_MAX_D 4096     /* seer_add_rmsnorm: rows of up to RN_REGS (16) x 256 floats */
#define ARGMAX_PARTS 1024 /* seer_argmax_part's blocks at most */

/* The argument of seer_gemv_segs and seer_gemv_gated (kernels/linear.cu, same layout). */
typedef struct {
    seer_devptr_t y, W, W2, bias;
    int out, wpr, blocks, pad;
} gemv_seg_t;
typedef struct {
    gemv_seg_t s[3];
    int nseg, n, in, act;
} gemv_segs_t;
_Static_assert(sizeof(gemv_seg_t) == 48 && sizeof(gemv_segs_t) == 160, "kernels/linear.cu reads this layout");
#define STAGING_BYTES ((size_t)64 << 20)

typedef struct {
#define DEV_W(f) seer_devptr_t f;
    SEER_GPU_LAYER_WEIGHTS(DEV_W)
#undef DEV_W
    seer_devptr_t inv;
} glayer_t;

/* The kernels the forward pass launches, resolved once when the model moves to the GPU. */
#define KERNELS(X)                                                                                   \
    X(EMBED, "seer_embed") X(RMSNORM, "seer_rmsnorm") X(ADD, "seer_add") X(SCALE, "seer_scale")        \
    X(SOFTCAP, "seer_softcap") X(GEMV, "seer_gemv_bf16") X(GEMV1, "seer_gemv1_bf16")                   \
    X(TO_BF16, "seer_f32_to_bf16") X(SPLIT_BF16, "seer_split_bf16") X(GEMM, "seer_gemm_bf16")          \
    X(BIAS, "seer_bias_add") X(ROPE_STORE, "seer_rope_store") X(ACT_MUL, "seer_act_mul")                \
    X(ARGMAX_PART, "seer_argmax_part") X(ARGMAX_FINAL, "seer_argmax_final") X(FILL, "seer_fill_bf16")   \
    X(GEMV_SEGS, "seer_gemv_segs") X(GEMV1_SEGS, "seer_gemv1_segs") X(GEMV_GATED, "seer_gemv_gated")     \
    X(GEMV1_GATED, "seer_gemv1_gated") X(ADD_RMSNORM, "seer_add_rmsnorm") X(GEMV_ROWS, "seer_gemv_rows_bf16")  \
    X(GEMV_ROWS_SEGS, "seer_gemv_rows_segs") X(GEMV_ROWS_GATED, "seer_gemv_rows_gated")
enum {
#define K_ENUM(id, name) K_##id,
    KERNELS(K_ENUM)
#undef K_ENUM
    K_COUNT
};
static const char *const kernel_names[K_COUNT] = {
#define K_NAME(id, name) name,
    KERNELS(K_NAME)
#undef K_NAME
};

/* What a profile attributes time to: each kernel above, then these. */
enum { P_GEMM = K_COUNT, P_ATTN, P_COPY, P_HOOK, P_LABELS };
static const char *label_name(int i) {
    static const char *const extra[] = {"cuBLAS linear", "attention", "copies", "hooks (host)"};
    return i < K_COUNT ? kernel_names[i] : extra[i - K_COUNT];
}
#define PROF_MARKS 8192

typedef struct {
    const void *host;
    seer_devptr_t dev;
    size_t bytes;
    int f32; /* a RoPE table (f32), not a bf16 weight */
} upload_t;

struct seer_gpu_model {
    seer_cuda_dev_t *d;
    seer_cuda_fn_t *fn[K_COUNT];
    seer_gpu_desc_t desc;
    glayer_t *L;
    seer_devptr_t embed, final_norm, lm_head;
    upload_t *up;
    int nup, capup;
    size_t weight_bytes;
    /* Working set for up to cap_tokens tokens per call. */
    int cap_tokens;
    seer_devptr_t ws, x, xb, att, q, k, v, h1, h2, xh, xl, tok, next, amax; /* xh, xl: bf16 copies of a GEMM's x */
    seer_devptr_t rowdesc; /* a batch's row and sequence descriptors (gbatch_t) */
    size_t cap_logits; /* floats */
    seer_devptr_t logits;
    float *host;       /* hook and host-attention staging */
    size_t host_cap;   /* bytes */
    void *staging;     /* pinned, STAGING_BYTES */
    seer_gpu_attn_t attn;
    int batch_exact; /* inside a batched decode step: linear layers keep f32 activations (linear_x) */
    int batch_gemm;  /* SEER_GPU_BATCH_GEMM=1: ... through linear_split past 8 sequences */
    /* Profile (seer_gpu_profile): an event after each piece of a forward pass, its label, and
     * the milliseconds and calls summed per label since the last report. */
    seer_cuda_marks_t *marks;
    int nmarks, lost;
    short mark_label[PROF_MARKS];
    double prof_ms[P_LABELS], prof_wall;
    long prof_calls[P_LABELS], prof_passes, prof_tokens;
};

static void prof_mark(struct seer_gpu_model *g, int label) {
    if (!g->marks) return;
    if (g->nmarks >= PROF_MARKS || seer_cuda_mark(g->marks, g->nmarks, NULL) < 0) {
        g->lost++;
        return;
    }
    g->mark_label[g->nmarks++] = (short)label;
}

static int launch(struct seer_gpu_model *g, int k, unsigned gx, unsigned gy, unsigned bx, unsigned shmem, void **args,
                  seer_err_t *err);

void seer_gpu_desc_free(seer_gpu_desc_t *d) {
    if (!d) return;
    free(d->layers);
    free(d->own);
    memset(d, 0, sizeof *d);
}

int seer_gpu_device_index(const seer_model_t *m) { return m->gpu ? seer_cuda_index(m->gpu->d) : -1; }
size_t seer_gpu_weight_bytes(const seer_model_t *m) { return m->gpu ? m->gpu->weight_bytes : 0; }
seer_cuda_dev_t *seer_gpu_dev(const seer_model_t *m) { return m->gpu ? m->gpu->d : NULL; }

static seer_devptr_t uploaded(const struct seer_gpu_model *g, const void *host);
seer_devptr_t seer_gpu_weight_dev(const seer_model_t *m, const seer_weight_t *w) {
    return m->gpu && w && w->data ? uploaded(m->gpu, w->data) : 0;
}

/* ---- weights --------------------------------------------------------------------------------- */

static size_t weight_elems(const seer_weight_t *w) { return (size_t)w->rows * (size_t)(w->cols > 0 ? w->cols : 1); }

static void to_bf16(uint16_t *dst, const seer_weight_t *w, size_t off, size_t n) {
    if (w->dtype == SEER_BF16) {
        memcpy(dst, (const uint16_t *)w->data + off, n * 2);
    } else if (w->dtype == SEER_F16) {
        const uint16_t *s = (const uint16_t *)w->data + off;
        for (size_t i = 0; i < n; i++) dst[i] = seer_f32_to_bf16(seer_f16_to_f32(s[i]));
    } else {
        const float *s = (const float *)w->data + off;
        for (size_t i = 0; i < n; i++) dst[i] = seer_f32_to_bf16(s[i]);
    }
}

/* The device copy already made of host data, or 0. */
static seer_devptr_t uploaded(const struct seer_gpu_model *g, const void *host) {
    for (int i = 0; i < g->nup; i++)
        if (g->up[i].host == host) return g->up[i].dev;
    return 0;
}

static int remember(struct seer_gpu_model *g, upload_t u, seer_err_t *err) {
    if (g->nup == g->capup) {
        int nc = g->capup ? 2 * g->capup : 256;
        upload_t *nu = realloc(g->up, (size_t)nc * sizeof *nu);
        if (!nu) return seer_err_set(err, SEER_ENOMEM, "out of memory");
        g->up = nu, g->capup = nc;
    }
    g->up[g->nup++] = u;
    return 0;
}

/* Uploads a weight as bf16 (once per distinct tensor: a tied head reuses the embeddings). */
static int upload(struct seer_gpu_model *g, const seer_weight_t *w, seer_devptr_t *out, const char *what,
                  seer_progress_t *pr, seer_err_t *err) {
    *out = 0;
    if (!w || !w->data) return 0;
    if ((*out = uploaded(g, w->data)) != 0) return 0;
    if (w->lora)
        return seer_err_set(err, SEER_EUNSUPPORTED,
                            "%s has an unmerged LoRA adapter; the CUDA backend runs merged adapters only "
                            "(load_adapter(dir, true)) or load the model with device = \"cpu\"", what);
    if (w->dtype != SEER_F32 && w->dtype != SEER_BF16 && w->dtype != SEER_F16)
        return seer_err_set(err, SEER_EUNSUPPORTED, "%s is %s; the CUDA backend takes f32, bf16 or f16 weights", what,
                            seer_dtype_name(w->dtype));
    size_t n = weight_elems(w), bytes = n * 2;
    seer_devptr_t dp;
    int rc = seer_cuda_alloc(g->d, &dp, bytes, what, err);
    if (rc < 0) return rc;
    if ((rc = remember(g, (upload_t){w->data, dp, bytes, 0}, err)) < 0) {
        seer_cuda_free(g->d, dp);
        return rc;
    }
    g->weight_bytes += bytes;
    size_t chunk = STAGING_BYTES / 2;
    for (size_t off = 0; off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        /* The staging buffer is reused: wait for its previous copy before refilling it. */
        if ((rc = seer_cuda_sync(g->d, err)) < 0) return rc;
        to_bf16(g->staging, w, off, m);
        if ((rc = seer_cuda_htod(g->d, dp + off * 2, g->staging, m * 2, err)) < 0) return rc;
        seer_progress_add(pr, m * 2);
    }
    *out = dp;
    return 0;
}

static int upload_f32(struct seer_gpu_model *g, const float *v, size_t n, seer_devptr_t *out, const char *what,
                      seer_err_t *err) {
    if ((*out = uploaded(g, v)) != 0) return 0;
    int rc = seer_cuda_alloc(g->d, out, n * sizeof(float), what, err);
    if (rc < 0) return rc;
    if ((rc = remember(g, (upload_t){v, *out, n * sizeof(float), 1}, err)) < 0) {
        seer_cuda_free(g->d, *out);
        return rc;
    }
    if ((rc = seer_cuda_htod(g->d, *out, v, n * sizeof(float), err)) < 0) return rc;
    return seer_cuda_sync(g->d, err);
}

static void gpu_free(struct seer_gpu_model *g) {
    if (!g) return;
    if (g->d) {
        seer_cuda_sync(g->d, NULL);
        for (int i = 0; i < g->nup; i++) seer_cuda_free(g->d, g->up[i].dev);
        seer_cuda_free(g->d, g->ws);
        seer_cuda_free(g->d, g->logits);
        seer_cuda_host_free(g->d, g->staging);
        seer_gpu_attn_free(&g->attn);
        seer_cuda_marks_free(g->marks);
        seer_cuda_close(g->d);
    }
    free(g->up);
    free(g->L);
    free(g->host);
    seer_gpu_desc_free(&g->desc);
    free(g);
}

int seer_gpu_randomize(seer_model_t *m, uint64_t seed, float scale, seer_err_t *err) {
    struct seer_gpu_model *g = m->gpu;
    if (!g) return seer_err_set(err, SEER_EINVAL, "randomize: the model is not on a GPU");
    for (int i = 0; i < g->nup; i++) {
        if (g->up[i].f32) continue;
        long long n = (long long)(g->up[i].bytes / 2);
        unsigned long long s = seed + (unsigned long long)i * 0x9E3779B97F4A7C15ull;
        void *a[] = {&g->up[i].dev, &n, &s, &scale};
        int rc = launch(g, K_FILL, 1024, 1, 256, 0, a, err);
        if (rc < 0) return rc;
    }
    return seer_cuda_sync(g->d, err);
}

void seer_gpu_detach(seer_model_t *m) {
    gpu_free(m->gpu);
    m->gpu = NULL;
}

static size_t desc_weight_bytes(const seer_model_t *m, const seer_gpu_desc_t *d) {
    size_t n = weight_elems(&m->embed) + weight_elems(&m->final_norm);
    if (m->lm_head.data != m->embed.data) n += weight_elems(&m->lm_head);
    for (int i = 0; i < m->cfg.num_layers; i++) {
        const seer_gpu_layer_t *l = &d->layers[i];
#define COUNT_W(f) if (l->f && l->f->data) n += weight_elems(l->f);
        SEER_GPU_LAYER_WEIGHTS(COUNT_W)
#undef COUNT_W
    }
    return n * 2;
}

int seer_gpu_attach(seer_model_t *m, int device, int progress, seer_err_t *err) {
    if (m->gpu) return 0;
    if (!m->arch->describe)
        return seer_err_set(err, SEER_EUNSUPPORTED,
                            "model_type \"%s\" has no CUDA forward pass yet (supported on CUDA: llama, mistral, qwen2, "
                            "qwen3, gemma, gemma2, gemma3_text); load it with device = \"cpu\"",
                            m->cfg.model_type);
    if (m->lora_state)
        return seer_err_set(err, SEER_EUNSUPPORTED, "the model has LoRA adapters loaded; the CUDA backend takes a model "
                                               "without adapters (load them after moving the model, merged)");
    struct seer_gpu_model *g = calloc(1, sizeof *g);
    if (!g) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int rc = seer_cuda_open(&g->d, device, err);
    if (rc < 0) goto fail;
    for (int k = 0; k < K_COUNT; k++)
        if (!(g->fn[k] = seer_cuda_fn(g->d, kernel_names[k], err))) {
            rc = err ? err->code : SEER_EINVAL;
            goto fail;
        }
    if ((rc = seer_gpu_attn_init(&g->attn, g->d, err)) < 0) goto fail;
    const char *bg = getenv("SEER_GPU_BATCH_GEMM");
    g->batch_gemm = bg && *bg && strcmp(bg, "0") != 0;
    if ((rc = m->arch->describe(m, &g->desc, err)) < 0) goto fail;
    const seer_model_config_t *c = &m->cfg;
    if (c->head_dim > 256 || c->head_dim % 2) {
        rc = seer_err_set(err, SEER_EUNSUPPORTED, "head_dim %d: the CUDA attention kernel takes even head sizes up to 256",
                          c->head_dim);
        goto fail;
    }
    size_t need = desc_weight_bytes(m, &g->desc), fr = 0, tot = 0;
    if ((rc = seer_cuda_mem_info(g->d, &fr, &tot, err)) < 0) goto fail;
    if (need > fr) {
        char a[32], b[32], t[32];
        rc = seer_err_set(err, SEER_ENOMEM,
                          "cuda:%d: the weights need %s in bf16 but only %s of %s are free; use a GPU with more memory "
                          "or a smaller model",
                          device, seer_cuda_fmt_bytes(need, a, sizeof a), seer_cuda_fmt_bytes(fr, b, sizeof b),
                          seer_cuda_fmt_bytes(tot, t, sizeof t));
        goto fail;
    }
    if ((rc = seer_cuda_host_alloc(g->d, &g->staging, STAGING_BYTES, err)) < 0) goto fail;
    g->L = calloc((size_t)c->num_layers, sizeof *g->L);
    if (!g->L) {
        rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
        goto fail;
    }
    char label[48];
    snprintf(label, sizeof label, "weights to cuda:%d", device);
    seer_progress_t pr = {.show = progress > 0 || (progress < 0 && isatty(2)), .total = need, .last_pct = -1, .what = label};
    char what[96];
    if ((rc = upload(g, &m->embed, &g->embed, "the embeddings", &pr, err)) < 0 ||
        (rc = upload(g, &m->final_norm, &g->final_norm, "the final norm", &pr, err)) < 0 ||
        (rc = upload(g, &m->lm_head, &g->lm_head, "the LM head", &pr, err)) < 0)
        goto fail;
    for (int i = 0; i < c->num_layers; i++) {
        const seer_gpu_layer_t *s = &g->desc.layers[i];
        glayer_t *l = &g->L[i];
        snprintf(what, sizeof what, "layer %d's weights", i);
#define UP(f) if ((rc = upload(g, s->f, &l->f, what, &pr, err)) < 0) goto fail;
        SEER_GPU_LAYER_WEIGHTS(UP)
#undef UP
        if ((rc = upload_f32(g, s->inv_freq, (size_t)c->head_dim / 2, &l->inv, "RoPE frequencies", err)) < 0) goto fail;
    }
    if ((rc = seer_cuda_sync(g->d, err)) < 0) goto fail;
    if (pr.show && pr.done < pr.total) fputc('\n', stderr);
    m->gpu = g;
    return 0;
fail:
    gpu_free(g);
    return rc;
}

/* ---- KV cache -------------------------------------------------------------------------------- */

int seer_gpu_kv_alloc(seer_model_t *m, seer_kv_cache_t *c, seer_err_t *err) {
    struct seer_gpu_model *g = m->gpu;
    size_t n = (size_t)c->layers * (size_t)c->max_tokens * (size_t)c->kv_dim * 2;
    char what[96];
    snprintf(what, sizeof what, "a KV cache of %d tokens", c->max_tokens);
    int rc = seer_cuda_alloc(g->d, &c->gk, n, what, err);
    if (rc < 0) return rc;
    if ((rc = seer_cuda_alloc(g->d, &c->gv, n, what, err)) < 0) {
        seer_cuda_free(g->d, c->gk);
        c->gk = 0;
        return rc;
    }
    c->gdev = g->d;
    return 0;
}

void seer_gpu_kv_free(seer_kv_cache_t *c) {
    if (!c->gdev) return;
    seer_cuda_free(c->gdev, c->gk);
    seer_cuda_free(c->gdev, c->gv);
    c->gdev = NULL;
    c->gk = c->gv = 0;
}

/* ---- launches -------------------------------------------------------------------------------- */

static int launch(struct seer_gpu_model *g, int k, unsigned gx, unsigned gy, unsigned bx, unsigned shmem, void **args,
                  seer_err_t *err) {
    int rc = seer_cuda_launch(g->d, g->fn[k], gx, gy, 1, bx, 1, 1, shmem, args, err);
    prof_mark(g, k);
    return rc;
}

static unsigned blocks_for(long long n, unsigned per) {
    long long b = (n + per - 1) / per;
    return b > 65535 * 8 ? 65535 * 8 : (unsigned)(b > 0 ? b : 1);
}

/* y = rmsnorm(x) rows; yb (0: none) also gets bf16(y), the input of a prefill GEMM. */
static int k_rmsnorm_b(struct seer_gpu_model *g, seer_devptr_t y, seer_devptr_t x, seer_devptr_t w, int rows, int D,
                       float eps, seer_devptr_t yb, seer_err_t *err) {
    int one_plus = g->desc.norm_one_plus;
    void *a[] = {&y, &x, &w, &D, &eps, &one_plus, &yb};
    return launch(g, K_RMSNORM, (unsigned)rows, 1, 256, 0, a, err);
}

static int k_rmsnorm(struct seer_gpu_model *g, seer_devptr_t y, seer_devptr_t x, seer_devptr_t w, int rows, int D,
                     float eps, seer_err_t *err) {
    return k_rmsnorm_b(g, y, x, w, rows, D, eps, 0, err);
}

/* x += (wa ? rmsnorm(a, wa) : a); y = rmsnorm(x, w) (yb: bf16(y) too), rows of D <= RN_MAX_D. */
static int k_add_rmsnorm(struct seer_gpu_model *g, seer_devptr_t x, seer_devptr_t a, seer_devptr_t wa, seer_devptr_t w,
                         seer_devptr_t y, seer_devptr_t yb, int rows, int D, float eps, seer_err_t *err) {
    int one_plus = g->desc.norm_one_plus;
    void *p[] = {&x, &a, &wa, &w, &y, &yb, &D, &eps, &one_plus};
    return launch(g, K_ADD_RMSNORM, (unsigned)rows, 1, 256, 0, p, err);
}

static int k_add(struct seer_gpu_model *g, seer_devptr_t x, seer_devptr_t y, long long n, seer_err_t *err) {
    void *a[] = {&x, &y, &n};
    return launch(g, K_ADD, blocks_for(n, 256), 1, 256, 0, a, err);
}

static int k_scale(struct seer_gpu_model *g, seer_devptr_t x, long long n, float s, seer_err_t *err) {
    void *a[] = {&x, &n, &s};
    return launch(g, K_SCALE, blocks_for(n, 256), 1, 256, 0, a, err);
}

static int k_softcap(struct seer_gpu_model *g, seer_devptr_t x, long long n, float cap, seer_err_t *err) {
    void *a[] = {&x, &n, &cap};
    return launch(g, K_SOFTCAP, blocks_for(n, 256), 1, 256, 0, a, err);
}

/* A batched decode step of more than 8 sequences with SEER_GPU_BATCH_GEMM=1: y = W x_hi + W x_lo,
 * x split into two bf16 terms (~16 bits, relative error ~2^-17) and two cuBLAS products, W read
 * twice rather than once per 8 rows (measured on an H200, batch 16 over batch 1: 7.3x for
 * Gemma-2-2B shapes, 8.1x for 9B, against 3.2x and 2.2x through the GEMV). Not the default: the
 * rows differ from the sequence decoding alone by a little (the products' order), and a KV-cache
 * entry whose bf16 rounding flips carries that forward; measured 5e-4 of the largest logit on
 * the llama parity model one step later, where the default is exact (docs/cuda.md). 0 when
 * cuBLAS is not there. */
static int linear_split(struct seer_gpu_model *g, seer_devptr_t y, seer_devptr_t x, seer_devptr_t w, int n, int in, int out,
                        int x_converted, seer_err_t *err) {
    if (!seer_cuda_has_batched_gemm(g->d)) return 0;
    long long nx = (long long)n * in;
    void *sa[] = {&g->xh, &g->xl, &x, &nx};
    int rc = x_converted ? 0 : launch(g, K_SPLIT_BF16, blocks_for(nx, 256), 1, 256, 0, sa, err);
    for (int half = 0; rc >= 0 && half < 2; half++) {
        seer_cuda_gemm_t gm = {.trans_a = 1, .m = out, .n = n, .k = in, .batch = 1, .accumulate = half, .a = w,
                               .lda = in, .b = half ? g->xl : g->xh, .ldb = in, .c = y, .ldc = out};
        if ((rc = seer_cuda_gemm_batched_bf16(g->d, &gm, err)) == 0)
            rc = seer_err_set(err, SEER_EUNSUPPORTED, "cuBLAS lost its batched product");
        prof_mark(g, P_GEMM);
    }
    return rc < 0 ? rc : 1;
}

/* Warps per row of the GEMV: up to 32 warps per multiprocessor, for the loads in flight that the
 * memory needs, as long as each lane keeps at least 4 loads of 8 weights of its own. */
static int gemv_wpr(struct seer_gpu_model *g, int in, int out) {
    int wpr = 1, sms = seer_cuda_info(g->d)->sm_count;
    while (wpr < 8 && (long long)out * wpr < 32LL * sms && in >= 32 * 8 * 4 * (wpr * 2)) wpr *= 2;
    return wpr;
}

/* Whether the batched GEMV (seer_gemv_rows_*: 4 rows per warp, x staged in shared memory, the
 * same bits) takes n > 1 tokens of x [n][in] through a matrix with wpr warps per row. */
static int gemv_rows_ok(int n, int in, int wpr, seer_devptr_t x, seer_devptr_t w) {
    return n > 1 && in % 8 == 0 && wpr <= 4 && (x & 15) == 0 && (w & 15) == 0; /* its 16-byte loads */
}

/* Whether linear_x takes the GEMV for n rows (decode, every batched decode step), not a GEMM. */
static int gemv_path(struct seer_gpu_model *g, int n) {
    if (n > GEMV_MAX_TOKENS && g->batch_exact && g->batch_gemm && seer_cuda_has_batched_gemm(g->d)) return 0;
    return n <= GEMV_MAX_TOKENS || g->batch_exact;
}

/* Whether linear_x takes a GEMM on bf16 inputs (g->xh) for n rows: then a kernel that writes x
 * can write its bf16 copy too (x_converted). */
static int gemm_path(struct seer_gpu_model *g, int n) { return n > GEMV_MAX_TOKENS && !g->batch_exact; }

/* Several products of the same x [n][in] in one GEMV launch (gemv_path(n) must hold): ys[i] =
 * x Ws[i]^T (+ biases[i]), outs[i] rows each, the bits linear_x gives each alone; or, gated, one
 * pair: ys[0] = act(x Ws[0]^T) * (x Ws[1]^T) (seer_act_mul's bits). */
static int gemv_multi(struct seer_gpu_model *g, seer_devptr_t x, int n, int in, int nseg, const seer_devptr_t *ys,
                      const seer_devptr_t *ws, const seer_devptr_t *biases, const int *outs, int gated, seer_err_t *err) {
    gemv_segs_t S;
    memset(&S, 0, sizeof S);
    S.n = n, S.in = in, S.act = g->desc.act;
    unsigned blocks = 0;
    int rows = GEMV_ROWS; /* rows per warp: the batched GEMV when every segment can take it */
    for (int i = 0; i < (gated ? 1 : nseg); i++) {
        gemv_seg_t *sg = &S.s[S.nseg++];
        sg->y = ys[i], sg->W = ws[i], sg->W2 = gated ? ws[1] : 0, sg->bias = gated ? 0 : biases[i];
        sg->out = outs[i], sg->wpr = gemv_wpr(g, in, outs[i]);
        if (!gemv_rows_ok(n, in, sg->wpr, x, sg->W) || (gated && (ws[1] & 15) != 0)) rows = 1;
    }
    for (int i = 0; i < S.nseg; i++) {
        int per = rows * (8 / S.s[i].wpr);
        S.s[i].blocks = (S.s[i].out + per - 1) / per;
        blocks += (unsigned)S.s[i].blocks;
    }
    void *a[] = {&x, &S};
    int k = rows > 1 ? (gated ? K_GEMV_ROWS_GATED : K_GEMV_ROWS_SEGS)
            : gated  ? (n == 1 ? K_GEMV1_GATED : K_GEMV_GATED)
                     : (n == 1 ? K_GEMV1_SEGS : K_GEMV_SEGS);
    return launch(g, k, blocks, 1, 256, 0, a, err);
}

/* y[n][out] = x[n][in] W^T (+ bias): the GEMV kernel for decode-sized n and every batched decode
 * step (linear_split past 8 sequences when asked for), else bf16 inputs through cuBLAS (or the
 * WMMA kernel when cuBLAS is not there). x_converted: g->xh (and g->xl) already hold this x. */
static int linear_x(struct seer_gpu_model *g, seer_devptr_t y, seer_devptr_t x, seer_devptr_t w, seer_devptr_t bias,
                    int n, int in, int out, int x_converted, seer_err_t *err) {
    int rc = 0;
    if (n > GEMV_MAX_TOKENS && g->batch_exact && g->batch_gemm &&
        (rc = linear_split(g, y, x, w, n, in, out, x_converted, err)) != 0) {
        if (rc < 0 || !bias) return rc < 0 ? rc : 0;
        void *b[] = {&y, &bias, &n, &out};
        return launch(g, K_BIAS, (unsigned)n, 1, 256, 0, b, err);
    }
    if (n <= GEMV_MAX_TOKENS || g->batch_exact) { /* a batched decode step: the GEMV at any n */
        int wpr = gemv_wpr(g, in, out), batched = gemv_rows_ok(n, in, wpr, x, w);
        int rows = (8 / wpr) * (batched ? GEMV_ROWS : 1); /* per block */
        void *a[] = {&y, &x, &w, &bias, &n, &in, &out, &wpr};
        return launch(g, n == 1 ? K_GEMV1 : batched ? K_GEMV_ROWS : K_GEMV, (unsigned)((out + rows - 1) / rows), 1, 256, 0,
                      a, err);
    }
    long long nx = (long long)n * in;
    void *ca[] = {&g->xh, &x, &nx};
    rc = x_converted ? 0 : launch(g, K_TO_BF16, blocks_for(nx, 256), 1, 256, 0, ca, err);
    if (rc < 0) return rc;
    rc = seer_cuda_gemm_bf16(g->d, y, g->xh, w, n, in, out, err);
    if (rc < 0) return rc;
    if (rc > 0) prof_mark(g, P_GEMM);
    if (rc == 0) {
        void *a[] = {&y, &g->xh, &w, &bias, &n, &in, &out};
        return launch(g, K_GEMM, (unsigned)((out + 63) / 64), (unsigned)((n + 63) / 64), 128, 0, a, err);
    }
    if (!bias) return 0;
    void *b[] = {&y, &bias, &n, &out};
    return launch(g, K_BIAS, (unsigned)n, 1, 256, 0, b, err);
}

static int linear(struct seer_gpu_model *g, seer_devptr_t y, seer_devptr_t x, seer_devptr_t w, seer_devptr_t bias,
                  int n, int in, int out, seer_err_t *err) {
    return linear_x(g, y, x, w, bias, n, in, out, 0, err);
}

/* A second product of the x the previous linear call took (q then k and v, gate then up): its
 * bf16 copy for the GEMM is still in g->xh. */
static int linear_again(struct seer_gpu_model *g, seer_devptr_t y, seer_devptr_t x, seer_devptr_t w, seer_devptr_t bias,
                        int n, int in, int out, seer_err_t *err) {
    return linear_x(g, y, x, w, bias, n, in, out, 1, err);
}

/* ---- working set ----------------------------------------------------------------------------- */

static int ensure_ws(struct seer_gpu_model *g, const seer_model_config_t *c, int n, size_t logit_floats,
                     seer_err_t *err) {
    int rc;
    if (n > g->cap_tokens) {
        int cap = n < 64 ? 64 : n;
        size_t D = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
        size_t qd = (size_t)c->num_heads * c->head_dim, kvd = (size_t)c->num_kv_heads * c->head_dim;
        size_t widest = D > qd ? D : qd;
        if (I > widest) widest = I;
        size_t per = 2 * D + 2 * qd + 2 * kvd + 2 * I; /* floats per token */
        /* xl: the lo halves of SEER_GPU_BATCH_GEMM's split (linear_split), only with it on */
        size_t xl_bytes = g->batch_gemm ? (size_t)cap * widest * 2 : 0;
        size_t bytes = (size_t)cap * (per * 4 + widest * 2) + xl_bytes + (size_t)cap * 4 + (size_t)cap * 28 + 256 * 14 +
                       ARGMAX_PARTS * 8;
        seer_cuda_sync(g->d, NULL);
        seer_cuda_free(g->d, g->ws);
        g->ws = 0, g->cap_tokens = 0;
        char what[96];
        snprintf(what, sizeof what, "the activations of %d tokens", cap);
        if ((rc = seer_cuda_alloc(g->d, &g->ws, bytes, what, err)) < 0) return rc;
        seer_devptr_t p = g->ws;
#define TAKE(dst, b)                        \
    do {                                    \
        dst = p;                            \
        p += ((size_t)(b) + 255) & ~(size_t)255; \
    } while (0)
        TAKE(g->x, cap * D * 4);
        TAKE(g->xb, cap * D * 4);
        TAKE(g->att, cap * qd * 4);
        TAKE(g->q, cap * qd * 4);
        TAKE(g->k, cap * kvd * 4);
        TAKE(g->v, cap * kvd * 4);
        TAKE(g->h1, cap * I * 4);
        TAKE(g->h2, cap * I * 4);
        TAKE(g->xh, cap * widest * 2);
        g->xl = 0;
        if (xl_bytes) TAKE(g->xl, xl_bytes);
        TAKE(g->tok, cap * 4);
        TAKE(g->next, 16);
        TAKE(g->amax, ARGMAX_PARTS * 8);
        TAKE(g->rowdesc, cap * (4 + 4 + 4 + 8 + 8) + 64);
#undef TAKE
        if (p - g->ws > bytes) return seer_err_set(err, SEER_EINVAL, "internal: working set overflow");
        g->cap_tokens = cap;
    }
    if (logit_floats > g->cap_logits) {
        seer_cuda_sync(g->d, NULL);
        seer_cuda_free(g->d, g->logits);
        g->logits = 0, g->cap_logits = 0;
        if ((rc = seer_cuda_alloc(g->d, &g->logits, logit_floats * 4, "the logits", err)) < 0) return rc;
        g->cap_logits = logit_floats;
    }
    return 0;
}

static int ensure_host(struct seer_gpu_model *g, size_t bytes, seer_err_t *err) {
    if (bytes <= g->host_cap) return 0;
    float *h = realloc(g->host, bytes);
    if (!h) return seer_err_set(err, SEER_ENOMEM, "out of host memory for %zu MiB of hooked activations", bytes >> 20);
    g->host = h, g->host_cap = bytes;
    return 0;
}

/* ---- hooks ----------------------------------------------------------------------------------- */

/* Rows [n][cols] at a hooked point: to the host, through the hooks, back. heads > 0: per-head rows. */
static int hook(struct seer_gpu_model *g, const seer_fwd_hooks_t *hk, seer_hook_point_t p, int layer, int start, int n,
                seer_devptr_t buf, int cols, int heads, seer_err_t *err) {
    if (!SEER_HOOKED(hk, p, layer)) return 0;
    size_t bytes = (size_t)n * (size_t)cols * 4;
    int rc = ensure_host(g, bytes, err);
    if (rc < 0) return rc;
    if ((rc = seer_cuda_dtoh(g->d, g->host, buf, bytes, err)) < 0) return rc;
    rc = heads > 0 ? seer_fwd_hook_heads(hk, p, layer, start, n, g->host, heads, cols / heads, err)
                   : seer_fwd_hook_rows(hk, p, layer, start, n, g->host, cols, err);
    if (rc < 0) return rc;
    if ((rc = seer_cuda_htod(g->d, buf, g->host, bytes, err)) < 0) return rc;
    prof_mark(g, P_HOOK);
    return seer_cuda_sync(g->d, err); /* the host buffer is reused by the next hook */
}

/* A decode step of several sequences, one row each (seer_gpu_forward_batch): row s is sequence
 * s's token; rows.* are the descriptors on the device. */
typedef struct {
    int ns;
    const seer_batch_seq_t *seq;
    seer_gpu_attn_rows_t rows;
} gbatch_t;

/* hook() for a pass: one sequence (b NULL: hk, start, n) or a batch's rows, each through its own
 * sequence's hooks. */
static int hook_any(struct seer_gpu_model *g, const gbatch_t *b, const seer_fwd_hooks_t *hk, seer_hook_point_t p,
                    int layer, int start, int n, seer_devptr_t buf, int cols, int heads, seer_err_t *err) {
    if (!b) return hook(g, hk, p, layer, start, n, buf, cols, heads, err);
    int any = 0;
    for (int s = 0; s < b->ns && !any; s++) any = SEER_HOOKED(b->seq[s].hk, p, layer);
    if (!any) return 0;
    size_t bytes = (size_t)b->ns * (size_t)cols * 4;
    int rc = ensure_host(g, bytes, err);
    if (rc < 0) return rc;
    if ((rc = seer_cuda_dtoh(g->d, g->host, buf, bytes, err)) < 0 || (rc = seer_cuda_sync(g->d, err)) < 0) return rc;
    for (int s = 0; s < b->ns; s++) {
        const seer_fwd_hooks_t *h = b->seq[s].hk;
        if (!SEER_HOOKED(h, p, layer)) continue;
        float *row = g->host + (size_t)s * (size_t)cols;
        int st = b->seq[s].cache->len;
        rc = heads > 0 ? seer_fwd_hook_heads(h, p, layer, st, 1, row, heads, cols / heads, err)
                       : seer_fwd_hook_rows(h, p, layer, st, 1, row, cols, err);
        if (rc < 0) return rc;
    }
    if ((rc = seer_cuda_htod(g->d, buf, g->host, bytes, err)) < 0) return rc;
    prof_mark(g, P_HOOK);
    return seer_cuda_sync(g->d, err);
}

/* Whether any sequence of the pass (one sequence, or each of a batch) hooks (p, layer). */
static int hooked_any(const gbatch_t *b, const seer_fwd_hooks_t *hk, seer_hook_point_t p, int layer) {
    if (!b) return SEER_HOOKED(hk, p, layer);
    for (int s = 0; s < b->ns; s++)
        if (SEER_HOOKED(b->seq[s].hk, p, layer)) return 1;
    return 0;
}

/* Attention with score or pattern hooks: the layer's queries and cache prefix to the host, the
 * CPU path (seer_fwd_attention: materialized scores, hooks, softmax, values), the result back. */
static int host_attention(seer_model_t *m, struct seer_gpu_model *g, seer_kv_cache_t *kv, const seer_fwd_hooks_t *hk,
                          int l, int start, int n, int window, seer_err_t *err) {
    const seer_model_config_t *c = &m->cfg;
    int H = c->num_heads, KH = c->num_kv_heads, hd = c->head_dim, K = start + n;
    size_t qd = (size_t)H * hd, kvd = (size_t)KH * hd;
    int threads = seer_pool_threads(m->pool);
    size_t floats = (size_t)n * qd * 2 + 2 * (size_t)K * kvd + (size_t)threads * (size_t)K;
    int rc = ensure_host(g, floats * 4 + (size_t)K * kvd * 2, err);
    if (rc < 0) return rc;
    float *q = g->host, *out = q + (size_t)n * qd, *kc = out + (size_t)n * qd, *vc = kc + (size_t)K * kvd;
    float *scratch = vc + (size_t)K * kvd;
    uint16_t *tmp = (uint16_t *)(scratch + (size_t)threads * K);
    if ((rc = seer_cuda_dtoh(g->d, q, g->q, (size_t)n * qd * 4, err)) < 0) return rc;
    size_t layer_off = (size_t)l * (size_t)kv->max_tokens * kvd * 2;
    for (int which = 0; which < 2; which++) {
        float *dst = which ? vc : kc;
        if ((rc = seer_cuda_dtoh(g->d, tmp, (which ? kv->gv : kv->gk) + layer_off, (size_t)K * kvd * 2, err)) < 0)
            return rc;
        for (size_t i = 0; i < (size_t)K * kvd; i++) dst[i] = seer_bf16_to_f32(tmp[i]);
    }
    seer_attn_params_t ap = {.q = q, .kc = kc, .vc = vc, .out = out, .scratch = scratch, .n = n, .start = start,
                             .max_len = K, .H = H, .KH = KH, .hd = hd, .window = window,
                             .scale = g->desc.attn_scale, .softcap = g->desc.attn_softcap};
    if ((rc = seer_fwd_attention(m, hk, l, &ap, err)) < 0) return rc;
    if ((rc = seer_cuda_htod(g->d, g->att, out, (size_t)n * qd * 4, err)) < 0) return rc;
    prof_mark(g, P_HOOK);
    return seer_cuda_sync(g->d, err);
}

/* ---- forward --------------------------------------------------------------------------------- */

/* One pass: one sequence (b NULL: kv, tokens, n, ...) or a batch's decode step (b: one row per
 * sequence; kv, hidden, hk and next NULL, each sequence's logits row copied to its own buffer). */
static int forward(seer_model_t *m, seer_kv_cache_t *kv, const int32_t *tokens, int n, float *logits, int all_logits,
                   float *hidden, const seer_fwd_hooks_t *hk, int *next, gbatch_t *b, seer_err_t *err) {
    struct seer_gpu_model *g = m->gpu;
    const seer_model_config_t *c = &m->cfg;
    const seer_gpu_desc_t *ds = &g->desc;
    if (!b && !kv->gdev)
        return seer_err_set(err, SEER_EINVAL, "forward: the KV cache was made before the model moved to the GPU; make a new one");
    int D = c->hidden_size, I = c->intermediate_size, H = c->num_heads, KH = c->num_kv_heads, hd = c->head_dim;
    int V = c->vocab_size, qd = H * hd, kvd = KH * hd, start = b ? 0 : kv->len, rc;
    float eps = c->rms_norm_eps;
    int want_head = logits || next;
    for (int s = 0; b && s < b->ns; s++) want_head |= b->seq[s].logits != NULL;
    if (b) all_logits = 1; /* one row per sequence */
    int head_rows = all_logits ? n : 1;
    if ((rc = ensure_ws(g, c, n, want_head ? (size_t)head_rows * V : 0, err)) < 0) return rc;
    if ((rc = seer_cuda_htod(g->d, g->tok, tokens, (size_t)n * 4, err)) < 0) return rc;
    prof_mark(g, P_COPY);
    size_t nD = (size_t)n * D;

    float escale = SEER_HOOKED(hk, SEER_HP_EMBED, -1) ? 1.f : ds->embed_scale;
    {
        void *a[] = {&g->x, &g->embed, &g->tok, &n, &D, &escale};
        if ((rc = launch(g, K_EMBED, (unsigned)n, 1, 256, 0, a, err)) < 0) return rc;
    }
    if (SEER_HOOKED(hk, SEER_HP_EMBED, -1)) {
        if ((rc = hook(g, hk, SEER_HP_EMBED, -1, start, n, g->x, D, 0, err)) < 0) return rc;
        if (ds->embed_scale != 1.f && (rc = k_scale(g, g->x, (long long)nD, ds->embed_scale, err)) < 0) return rc;
    }
    if (hidden && (rc = seer_cuda_dtoh(g->d, hidden, g->x, nD * 4, err)) < 0) return rc;

    /* Fusions (each only where no hook looks between the pieces it joins, so hooks see what they
     * always saw): q, k and v in one GEMV launch and gate, up and the activation in another
     * (decode); RoPE with the KV-cache store; a residual add with the norms on either side of it
     * (seer_add_rmsnorm, which also normalises the next layer's input); and, for a prefill GEMM,
     * the bf16 copy of its input written by the kernel before it (no separate conversion). */
    const int multi = gemv_path(g, n), conv = gemm_path(g, n), fuse_norm = D <= RN_MAX_D;
    int normed = 0, normed_bf16 = 0; /* the layer's input norm (and its bf16 copy) already done */
    for (int l = 0; l < c->num_layers; l++) {
        if (seer_host_interrupted()) return seer_err_set(err, SEER_EINTR, "interrupted");
        const glayer_t *L = &g->L[l];
        const seer_gpu_layer_t *S = &ds->layers[l];
        seer_devptr_t kc = b ? 0 : kv->gk + (size_t)l * kv->max_tokens * kvd * 2;
        seer_devptr_t vc = b ? 0 : kv->gv + (size_t)l * kv->max_tokens * kvd * 2;
#define HOOKED(p, layer) hooked_any(b, hk, (p), (layer))
#define HOOK(p, buf, cols, heads)                                                                      \
    if ((rc = hook_any(g, b, hk, (p), l, start, n, (buf), (cols), (heads), err)) < 0) return rc;
        if (!normed) {
            HOOK(SEER_HP_RESID_PRE, g->x, D, 0)
            normed_bf16 = conv && !HOOKED(SEER_HP_LN1, l);
            if ((rc = k_rmsnorm_b(g, g->xb, g->x, L->pre_attn_norm, n, D, eps, normed_bf16 ? g->xh : 0, err)) < 0)
                return rc;
        }
        normed = 0;
        HOOK(SEER_HP_LN1, g->xb, D, 0)
        if (multi) {
            seer_devptr_t ys[] = {g->q, g->k, g->v}, ws[] = {L->q, L->k, L->v}, bs[] = {L->q_bias, L->k_bias, L->v_bias};
            int outs[] = {qd, kvd, kvd};
            if ((rc = gemv_multi(g, g->xb, n, D, 3, ys, ws, bs, outs, 0, err)) < 0) return rc;
        } else if ((rc = linear_x(g, g->q, g->xb, L->q, L->q_bias, n, D, qd, normed_bf16, err)) < 0 ||
                   (rc = linear_again(g, g->k, g->xb, L->k, L->k_bias, n, D, kvd, err)) < 0 ||
                   (rc = linear_again(g, g->v, g->xb, L->v, L->v_bias, n, D, kvd, err)) < 0) {
            return rc;
        }
        if (L->q_norm) {
            if ((rc = k_rmsnorm(g, g->q, g->q, L->q_norm, n * H, hd, eps, err)) < 0 ||
                (rc = k_rmsnorm(g, g->k, g->k, L->k_norm, n * KH, hd, eps, err)) < 0)
                return rc;
        }
        HOOK(SEER_HP_Q, g->q, qd, H)
        HOOK(SEER_HP_K, g->k, kvd, KH)
        HOOK(SEER_HP_V, g->v, kvd, KH)
        {
            int interleaved = 0, lay = l;
            seer_devptr_t z = 0;
            const seer_gpu_attn_rows_t *r = b ? &b->rows : NULL;
            void *a[] = {&g->q, &g->k, &g->v, &H, &KH, &hd, &hd, (void *)&L->inv, &start, &interleaved, &kc, &vc,
                         r ? (void *)&r->pos : &z, r ? (void *)&r->seq : &z, r ? (void *)&r->seq_k : &z,
                         r ? (void *)&r->seq_v : &z, r ? (void *)&r->max_tokens : &z, &lay};
            if ((rc = launch(g, K_ROPE_STORE, (unsigned)n, (unsigned)(H + KH), 128, 0, a, err)) < 0) return rc;
        }
        if (SEER_HOOKED(hk, SEER_HP_ATTN_SCORES, l) || SEER_HOOKED(hk, SEER_HP_PATTERN, l)) {
            if ((rc = host_attention(m, g, kv, hk, l, start, n, S->window, err)) < 0) return rc;
        } else {
            if (b) b->rows.layer = l;
            seer_gpu_attn_args_t aa = {.out = g->att, .q = g->q, .kc = kc, .vc = vc, .n = n, .start = start, .H = H,
                                       .KH = KH, .hd = hd, .window = S->window, .scale = ds->attn_scale,
                                       .softcap = ds->attn_softcap, .rows = b ? &b->rows : NULL};
            if ((rc = seer_gpu_attention(&g->attn, &aa, SEER_ATTN_AUTO, err)) < 0) return rc;
            prof_mark(g, P_ATTN);
        }
        HOOK(SEER_HP_Z, g->att, qd, H)
        if ((rc = linear(g, g->xb, g->att, L->o, L->o_bias, n, qd, D, err)) < 0) return rc;
        int ln2_bf16 = 0;
        if (fuse_norm && !HOOKED(SEER_HP_ATTN_OUT, l) && !HOOKED(SEER_HP_RESID_MID, l)) {
            ln2_bf16 = conv && !HOOKED(SEER_HP_LN2, l);
            if ((rc = k_add_rmsnorm(g, g->x, g->xb, L->post_attn_norm, L->pre_mlp_norm, g->xb, ln2_bf16 ? g->xh : 0, n, D,
                                    eps, err)) < 0)
                return rc;
        } else {
            if (L->post_attn_norm && (rc = k_rmsnorm(g, g->xb, g->xb, L->post_attn_norm, n, D, eps, err)) < 0) return rc;
            HOOK(SEER_HP_ATTN_OUT, g->xb, D, 0)
            if ((rc = k_add(g, g->x, g->xb, (long long)nD, err)) < 0) return rc;
            HOOK(SEER_HP_RESID_MID, g->x, D, 0)
            ln2_bf16 = conv && !HOOKED(SEER_HP_LN2, l);
            if ((rc = k_rmsnorm_b(g, g->xb, g->x, L->pre_mlp_norm, n, D, eps, ln2_bf16 ? g->xh : 0, err)) < 0) return rc;
        }
        HOOK(SEER_HP_LN2, g->xb, D, 0)
        int act_bf16 = 0;
        if (multi && !HOOKED(SEER_HP_MLP_PRE, l)) {
            seer_devptr_t ys[] = {g->h1}, ws[] = {L->gate, L->up}, bs[] = {0};
            int outs[] = {I};
            if ((rc = gemv_multi(g, g->xb, n, D, 2, ys, ws, bs, outs, 1, err)) < 0) return rc;
        } else {
            if ((rc = linear_x(g, g->h1, g->xb, L->gate, 0, n, D, I, ln2_bf16, err)) < 0 ||
                (rc = linear_again(g, g->h2, g->xb, L->up, 0, n, D, I, err)) < 0)
                return rc;
            HOOK(SEER_HP_MLP_PRE, g->h1, I, 0)
            long long nI = (long long)n * I;
            int act = ds->act;
            act_bf16 = conv && !HOOKED(SEER_HP_MLP_POST, l);
            seer_devptr_t gb = act_bf16 ? g->xh : 0;
            int keep = !act_bf16; /* with the bf16 copy, nothing reads h1's f32 values */
            void *a[] = {&g->h1, &g->h2, &nI, &act, &gb, &keep};
            if ((rc = launch(g, K_ACT_MUL, blocks_for(nI, 256), 1, 256, 0, a, err)) < 0) return rc;
        }
        HOOK(SEER_HP_MLP_POST, g->h1, I, 0)
        if ((rc = linear_x(g, g->xb, g->h1, L->down, 0, n, I, D, act_bf16, err)) < 0) return rc;
        if (fuse_norm && l + 1 < c->num_layers && !hidden && !HOOKED(SEER_HP_MLP_OUT, l) &&
            !HOOKED(SEER_HP_RESID_POST, l) && !HOOKED(SEER_HP_RESID_PRE, l + 1)) {
            /* this layer's residual add and the next layer's input norm */
            normed = 1, normed_bf16 = conv && !HOOKED(SEER_HP_LN1, l + 1);
            if ((rc = k_add_rmsnorm(g, g->x, g->xb, L->post_mlp_norm, g->L[l + 1].pre_attn_norm, g->xb,
                                    normed_bf16 ? g->xh : 0, n, D, eps, err)) < 0)
                return rc;
            continue;
        }
        if (L->post_mlp_norm && (rc = k_rmsnorm(g, g->xb, g->xb, L->post_mlp_norm, n, D, eps, err)) < 0) return rc;
        HOOK(SEER_HP_MLP_OUT, g->xb, D, 0)
        if ((rc = k_add(g, g->x, g->xb, (long long)nD, err)) < 0) return rc;
        HOOK(SEER_HP_RESID_POST, g->x, D, 0)
#undef HOOK
#undef HOOKED
        if (hidden && (rc = seer_cuda_dtoh(g->d, hidden + (size_t)(l + 1) * nD, g->x, nD * 4, err)) < 0) return rc;
    }
    if (!b) kv->len = start + n; /* a batch's caches grow when the whole pass has succeeded */

    /* The end: the final norm (all rows when ln_final is hooked), the head, the soft-cap. */
    seer_devptr_t rows_in;
    if (SEER_HOOKED(hk, SEER_HP_LN_FINAL, -1)) {
        if ((rc = k_rmsnorm(g, g->xb, g->x, g->final_norm, n, D, eps, err)) < 0) return rc;
        if ((rc = hook(g, hk, SEER_HP_LN_FINAL, -1, start, n, g->xb, D, 0, err)) < 0) return rc;
        rows_in = all_logits ? g->xb : g->xb + (size_t)(n - 1) * D * 4;
    } else {
        if (!want_head) return seer_cuda_sync(g->d, err);
        seer_devptr_t src = all_logits ? g->x : g->x + (size_t)(n - 1) * D * 4;
        if ((rc = k_rmsnorm(g, g->xb, src, g->final_norm, head_rows, D, eps, err)) < 0) return rc;
        rows_in = g->xb;
    }
    if (!want_head) return seer_cuda_sync(g->d, err);
    if ((rc = linear(g, g->logits, rows_in, g->lm_head, 0, head_rows, D, V, err)) < 0) return rc;
    if (ds->final_softcap > 0.f && (rc = k_softcap(g, g->logits, (long long)head_rows * V, ds->final_softcap, err)) < 0)
        return rc;
    if (next) {
        seer_devptr_t last = g->logits + (size_t)(head_rows - 1) * V * 4;
        int parts = (V + 2047) / 2048, sms = seer_cuda_info(g->d)->sm_count;
        if (parts > 2 * sms) parts = 2 * sms;
        if (parts > ARGMAX_PARTS) parts = ARGMAX_PARTS;
        if (parts < 1) parts = 1;
        seer_devptr_t pv = g->amax, pi = g->amax + ARGMAX_PARTS * 4;
        void *a[] = {&pv, &pi, &last, &V};
        void *f[] = {&g->next, &pv, &pi, &parts};
        if ((rc = launch(g, K_ARGMAX_PART, (unsigned)parts, 1, 256, 0, a, err)) < 0 ||
            (rc = launch(g, K_ARGMAX_FINAL, 1, 1, 256, 0, f, err)) < 0)
            return rc;
        int32_t id = -1;
        if ((rc = seer_cuda_dtoh(g->d, &id, g->next, 4, err)) < 0) return rc;
        *next = id;
    }
    if (logits && (rc = seer_cuda_dtoh(g->d, logits, g->logits, (size_t)head_rows * V * 4, err)) < 0) return rc;
    for (int s = 0; b && s < b->ns; s++)
        if (b->seq[s].logits &&
            (rc = seer_cuda_dtoh(g->d, b->seq[s].logits, g->logits + (size_t)s * V * 4, (size_t)V * 4, err)) < 0)
            return rc;
    return seer_cuda_sync(g->d, err);
}

/* Profiled passes: mark 0 before the pass, one after each piece; the time between consecutive
 * marks (stream order) goes to the later mark's label, so idle gaps count against what came next. */
static int prof_begin(struct seer_gpu_model *g, struct timespec *t0, seer_err_t *err) {
    g->nmarks = 0;
    int rc = seer_cuda_sync(g->d, err);
    if (rc < 0) return rc;
    clock_gettime(CLOCK_MONOTONIC, t0);
    prof_mark(g, P_COPY);
    return 0;
}

static int prof_end(struct seer_gpu_model *g, const struct timespec *t0, int n, seer_err_t *err) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int i = 1; i < g->nmarks; i++) {
        float ms = 0;
        int rc = seer_cuda_marks_elapsed(g->marks, i - 1, i, &ms, err);
        if (rc < 0) return rc;
        g->prof_ms[g->mark_label[i]] += ms;
        g->prof_calls[g->mark_label[i]]++;
    }
    g->prof_wall += (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-6;
    g->prof_passes++;
    g->prof_tokens += n;
    return 0;
}

int seer_gpu_forward(seer_model_t *m, seer_kv_cache_t *kv, const int32_t *tokens, int n, float *logits, int all_logits,
                     float *hidden, const seer_fwd_hooks_t *hk, int *next, seer_err_t *err) {
    struct seer_gpu_model *g = m->gpu;
    struct timespec t0;
    int rc = g->marks ? prof_begin(g, &t0, err) : 0;
    if (rc < 0) return rc;
    rc = forward(m, kv, tokens, n, logits, all_logits, hidden, hk, next, NULL, err);
    if (rc < 0 || !g->marks) return rc;
    return prof_end(g, &t0, n, err);
}

/* Whether a batch can run as one pass: a decode step (one token each) without per-sequence
 * hidden states or hooks that need the sequence alone (embeddings, final norm, scores). */
static int batchable(const seer_model_t *m, const seer_batch_seq_t *seqs, int ns) {
    if (ns < 2) return 0;
    for (int s = 0; s < ns; s++) {
        const seer_batch_seq_t *q = &seqs[s];
        if (q->n != 1 || q->hidden || !q->cache->gdev) return 0;
        const seer_fwd_hooks_t *hk = q->hk;
        if (SEER_HOOKED(hk, SEER_HP_EMBED, -1) || SEER_HOOKED(hk, SEER_HP_LN_FINAL, -1)) return 0;
        for (int l = 0; l < m->cfg.num_layers; l++)
            if (SEER_HOOKED(hk, SEER_HP_ATTN_SCORES, l) || SEER_HOOKED(hk, SEER_HP_PATTERN, l)) return 0;
    }
    return 1;
}

int seer_gpu_forward_batch(seer_model_t *m, const seer_batch_seq_t *seqs, int ns, seer_err_t *err) {
    struct seer_gpu_model *g = m->gpu;
    if (!batchable(m, seqs, ns)) return 0;
    const seer_model_config_t *c = &m->cfg;
    int rc = ensure_ws(g, c, ns, (size_t)ns * (size_t)c->vocab_size, err);
    if (rc < 0) return rc;
    /* the descriptors, packed as on the device: pos, seq, max_tokens (int32), then seq_k, seq_v (u64) */
    size_t ints = (size_t)2 * ns + (size_t)ns, u64_off = (ints * 4 + 7) & ~(size_t)7;
    size_t bytes = u64_off + (size_t)2 * ns * 8;
    unsigned char *h = malloc(bytes);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)ns);
    if (!h || !tok) {
        free(h), free(tok);
        return seer_err_set(err, SEER_ENOMEM, "out of memory for a batch of %d", ns);
    }
    int32_t *pos = (int32_t *)h, *seq = pos + ns, *maxt = seq + ns;
    uint64_t *sk = (uint64_t *)(h + u64_off), *sv = sk + ns;
    int max_ctx = 0;
    for (int s = 0; s < ns; s++) {
        const seer_kv_cache_t *kv = seqs[s].cache;
        tok[s] = seqs[s].tokens[0];
        pos[s] = kv->len, seq[s] = s, maxt[s] = kv->max_tokens;
        sk[s] = kv->gk, sv[s] = kv->gv;
        if (kv->len + 1 > max_ctx) max_ctx = kv->len + 1;
    }
    gbatch_t b = {.ns = ns, .seq = seqs};
    b.rows = (seer_gpu_attn_rows_t){.pos = g->rowdesc, .seq = g->rowdesc + (size_t)ns * 4,
                                    .max_tokens = g->rowdesc + (size_t)2 * ns * 4, .seq_k = g->rowdesc + u64_off,
                                    .seq_v = g->rowdesc + u64_off + (size_t)ns * 8, .max_ctx = max_ctx};
    struct timespec t0;
    rc = seer_cuda_htod(g->d, g->rowdesc, h, bytes, err);
    if (rc == 0 && g->marks) rc = prof_begin(g, &t0, err);
    g->batch_exact = 1;
    if (rc == 0) rc = forward(m, NULL, tok, ns, NULL, 1, NULL, NULL, NULL, &b, err);
    g->batch_exact = 0;
    if (rc == 0 && g->marks) rc = prof_end(g, &t0, ns, err);
    free(h), free(tok);
    if (rc < 0) return rc;
    for (int s = 0; s < ns; s++) seqs[s].cache->len += 1;
    return 1;
}

int seer_gpu_profile(seer_model_t *m, int on, seer_err_t *err) {
    struct seer_gpu_model *g = m->gpu;
    if (!g) return seer_err_set(err, SEER_EINVAL, "profile: the model is not on a GPU");
    if (!on) {
        seer_cuda_marks_free(g->marks);
        g->marks = NULL;
        return 0;
    }
    if (g->marks) return 0;
    memset(g->prof_ms, 0, sizeof g->prof_ms);
    memset(g->prof_calls, 0, sizeof g->prof_calls);
    g->prof_wall = 0, g->prof_passes = g->prof_tokens = 0, g->lost = 0;
    return seer_cuda_marks_new(g->d, PROF_MARKS, &g->marks, err);
}

void seer_gpu_profile_report(seer_model_t *m, FILE *f) {
    struct seer_gpu_model *g = m->gpu;
    if (!g) return;
    if (!f || !g->prof_passes) goto reset;
    double total = 0;
    for (int i = 0; i < P_LABELS; i++) total += g->prof_ms[i];
    double np = (double)g->prof_passes;
    fprintf(f, "    %ld passes of %.1f tokens: %.3f ms on the GPU and %.3f ms wall per pass%s\n", g->prof_passes,
            (double)g->prof_tokens / np, total / np, g->prof_wall / np,
            g->lost ? " (some pieces not timed: too many per pass)" : "");
    int order[P_LABELS];
    for (int i = 0; i < P_LABELS; i++) order[i] = i;
    for (int i = 1; i < P_LABELS; i++)
        for (int j = i; j > 0 && g->prof_ms[order[j]] > g->prof_ms[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    for (int i = 0; i < P_LABELS; i++) {
        int l = order[i];
        if (!g->prof_calls[l]) continue;
        fprintf(f, "      %-20s %8.3f ms %5.1f%%  %6.1f calls, %7.2f us each\n", label_name(l), g->prof_ms[l] / np,
                total > 0 ? 100 * g->prof_ms[l] / total : 0, g->prof_calls[l] / np,
                1e3 * g->prof_ms[l] / (double)g->prof_calls[l]);
    }
reset:
    memset(g->prof_ms, 0, sizeof g->prof_ms);
    memset(g->prof_calls, 0, sizeof g->prof_calls);
    g->prof_wall = 0, g->prof_passes = g->prof_tokens = 0, g->lost = 0;
}
