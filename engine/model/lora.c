/* LoRA adapters in PEFT format on a loaded model (lora.h, docs/lora.md).
 *
 * An adapter directory holds adapter_config.json (peft's LoraConfig) and
 * adapter_model.safetensors with, per adapted module, lora_A [r][in] and lora_B [out][r] named
 * base_model.model.<module path>.lora_{A,B}.weight. The adapted weight becomes
 * W + scale * B.A with scale = lora_alpha / r (lora_alpha / sqrt(r) with use_rslora), as peft.
 *
 * Unmerged: A and B are copied to f32 (B also transposed) and every linear through the weight
 * adds scale * B.(A.x) after the base product (seer_k_linear calls seer_lora_apply): per token
 * with AVX2 dots and axpys for decode, as two OpenBLAS GEMMs for prefill. One switch per model
 * turns all of them off. Merged: each adapted weight gets a private f32 copy holding
 * W + scale * B.A computed in f32 (the mapped file stays read-only and untouched), so a merged
 * bf16 model matches peft's unmerged f32 result rather than a bf16-rounded merge; the cost is
 * 4 bytes per adapted weight element.
 *
 * Supported: the linear modules q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj and
 * down_proj of the llama family (llama, mistral, qwen2, qwen3) and gemma, gemma2 and
 * gemma3_text. Every tensor in the file must be one of those; anything else (embeddings,
 * lm_head, DoRA magnitudes, LoRA biases, modules_to_save copies) is an error naming it, never
 * skipped. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>

#include "gemma_common.h"
#include "lora.h"
#include "weight_load.h"

#define NMOD SEER_LAYER_MODULES
#define MODULES seer_model_layer_modules
static const char *const PARENTS[NMOD] = {"self_attn", "self_attn", "self_attn", "self_attn", "mlp", "mlp", "mlp"};
#define SUPPORTED_MODULES "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"
#define SUPPORTED_ARCHS "llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text"
#define TENSOR_FORM                                                                                                    \
    "base_model.model.model.layers.N.self_attn.{q,k,v,o}_proj.lora_{A,B}.weight or "                                 \
    "base_model.model.model.layers.N.mlp.{gate,up,down}_proj.lora_{A,B}.weight"

enum { FAMILY_LLAMA = 1, FAMILY_GEMMA };

typedef struct {
    int enabled;           /* the switch every unmerged seer_lora points at */
    int unmerged;          /* a separately kept adapter is attached */
    char unmerged_dir[PATH_MAX];
    int nmerged;           /* adapters merged into the weights so far */
    char merged_dir[PATH_MAX]; /* the last one */
    struct seer_lora *mods; /* the unmerged adapter's modules */
    int nmods;
    float **merged;        /* [num_layers * NMOD]: the private merged copy a weight points at, or NULL */
    int nslots;
} lora_state;

static void mods_free(struct seer_lora *mods, int n) {
    if (!mods) return;
    for (int i = 0; i < n; i++) {
        free(mods[i].A);
        free(mods[i].B);
        free(mods[i].BT);
    }
    free(mods);
}

static void state_free(void *p) {
    lora_state *s = p;
    if (!s) return;
    mods_free(s->mods, s->nmods);
    if (s->merged)
        for (int i = 0; i < s->nslots; i++) free(s->merged[i]);
    free(s->merged);
    free(s);
}

static lora_state *get_state(seer_model_t *m, seer_err_t *err) {
    if (m->lora_state) return m->lora_state;
    lora_state *s = calloc(1, sizeof *s);
    if (s) {
        s->nslots = m->cfg.num_layers * NMOD;
        s->merged = calloc((size_t)(s->nslots > 0 ? s->nslots : 1), sizeof *s->merged);
    }
    if (!s || !s->merged) {
        free(s);
        seer_err_set(err, SEER_ENOMEM, "load_adapter: out of memory");
        return NULL;
    }
    m->lora_state = s;
    m->lora_free = state_free;
    return s;
}

static int arch_family(const seer_model_t *m) {
    const char *t = m->arch ? m->arch->model_type : "";
    if (!strcmp(t, "llama") || !strcmp(t, "mistral") || !strcmp(t, "qwen2") || !strcmp(t, "qwen3")) return FAMILY_LLAMA;
    if (!strcmp(t, "gemma") || !strcmp(t, "gemma2") || !strcmp(t, "gemma3_text")) return FAMILY_GEMMA;
    return 0;
}

/* ---- kernels ------------------------------------------------------------------------------- */

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    float s = _mm_cvtss_f32(lo);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *y, float c, const float *x, int64_t n) {
    __m256 cv = _mm256_set1_ps(c);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(cv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += c * x[i];
}
#endif

static float dot(const float *a, const float *b, int64_t n, int simd) {
#if defined(__x86_64__)
    if (simd) return dot_avx2(a, b, n);
#endif
    (void)simd;
    float s = 0.f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy(float *y, float c, const float *x, int64_t n, int simd) {
#if defined(__x86_64__)
    if (simd) {
        axpy_avx2(y, c, x, n);
        return;
    }
#endif
    (void)simd;
    for (int64_t i = 0; i < n; i++) y[i] += c * x[i];
}

typedef struct {
    float *y;
    const float *x;
    const struct seer_lora *l;
    int simd;
} apply_job;

/* Tokens [begin, end): t = scale * A.x (r values), then y += B.t as r contiguous axpys. */
static void apply_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    const apply_job *j = ctx;
    const struct seer_lora *l = j->l;
    float t[SEER_LORA_MAX_RANK];
    for (size_t i = begin; i < end; i++) {
        const float *x = j->x + i * (size_t)l->in;
        float *y = j->y + i * (size_t)l->out;
        for (int k = 0; k < l->r; k++) t[k] = l->scale * dot(l->A + (size_t)k * (size_t)l->in, x, l->in, j->simd);
        for (int k = 0; k < l->r; k++) axpy(y, t[k], l->BT + (size_t)k * (size_t)l->out, l->out, j->simd);
    }
}

/* Prefill: two OpenBLAS GEMMs (t = x.A^T, d = t.B^T), then y += d * scale as peft adds it.
 * Returns 0 when it cannot (no OpenBLAS, out of memory); then the per-token kernel runs. */
static int apply_blas(seer_pool_t *p, float *y, const float *x, int n, const struct seer_lora *l, int lead) {
    float *t = malloc((size_t)n * (size_t)l->r * sizeof(float));
    float *d = malloc((size_t)n * (size_t)l->out * sizeof(float));
    seer_weight_t wa = {.dtype = SEER_F32, .data = l->A, .rows = l->r, .cols = l->in};
    seer_weight_t wb = {.dtype = SEER_F32, .data = l->B, .rows = l->out, .cols = l->r};
    int ok = t && d && seer_k_linear_blas(p, t, x, n, &wa, NULL, lead) && seer_k_linear_blas(p, d, t, n, &wb, NULL, lead);
    if (ok)
        for (size_t i = 0; i < (size_t)n * (size_t)l->out; i++) y[i] += d[i] * l->scale;
    free(t);
    free(d);
    return ok;
}

static void apply(seer_pool_t *p, float *y, const float *x, int n, const struct seer_lora *lora, int gemm, int lead) {
    if (!lora || !*lora->enabled || n <= 0) return;
    if (gemm && apply_blas(p, y, x, n, lora, lead)) return;
    apply_job j = {.y = y, .x = x, .l = lora, .simd = seer_k_have_avx2()};
    /* A decode step (one token) is r * (in + out) multiply-adds: far below what a thread
     * wake-up is worth, so it stays on the caller; prefill splits the tokens. */
    size_t per_tok = (size_t)lora->r * (size_t)(lora->in + lora->out);
    size_t min_tok = per_tok ? (SEER_PAR_WORK + per_tok - 1) / per_tok : 1;
    seer_pool_for(p, (size_t)n, min_tok ? min_tok : 1, apply_chunk, &j);
}

void seer_lora_apply(seer_pool_t *p, float *y, const float *x, int n, const struct seer_lora *lora, int lead) {
    apply(p, y, x, n, lora, 1, lead);
}

void seer_lora_apply_rows(seer_pool_t *p, float *y, const float *x, int n, const struct seer_lora *lora) {
    apply(p, y, x, n, lora, 0, 0);
}

typedef struct {
    float *dst;                /* [out][in] */
    const seer_weight_t *w;    /* the weight as bound now (mapped, or an earlier merge) */
    const struct seer_lora *l; /* A, BT, scale */
    int simd;
} merge_job;

/* Rows [begin, end) of W + (B.A) * scale, in f32 (peft: weight + (B @ A) * scaling). */
static void merge_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    const merge_job *j = ctx;
    const struct seer_lora *l = j->l;
    size_t in = (size_t)l->in, out = (size_t)l->out;
    for (size_t o = begin; o < end; o++) {
        float *row = j->dst + o * in;
        memset(row, 0, in * sizeof(float));
        for (int k = 0; k < l->r; k++) axpy(row, l->BT[(size_t)k * out + o], l->A + (size_t)k * in, l->in, j->simd);
        for (size_t i = 0; i < in; i++) /* (a packed weight's element: seer_w_index) */
            row[i] = seer_w_load(j->w, seer_w_index(j->w, (int64_t)o, (int64_t)i)) + row[i] * l->scale;
    }
}

/* ---- adapter_config.json ------------------------------------------------------------------- */

typedef struct {
    int r;
    double alpha;
    int rslora;
} lora_cfg;

static const cJSON *jget(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* null, false, "", [] and {} count as unset. */
static int is_set(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return 0;
    if (cJSON_IsString(v)) return v->valuestring[0] != 0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return v->child != NULL;
    return 1;
}

/* Fields that change what a LoRA layer computes, which seer does not implement. */
static const struct {
    const char *key, *what;
} UNSUPPORTED[] = {
    {"use_dora", "DoRA (weight-decomposed LoRA)"},
    {"fan_in_fan_out", "fan_in_fan_out (Conv1D-layout weights, GPT-2)"},
    {"lora_bias", "a bias on lora_B"},
    {"modules_to_save", "modules_to_save (fully trained copies of modules)"},
    {"rank_pattern", "rank_pattern (per-module ranks)"},
    {"alpha_pattern", "alpha_pattern (per-module alphas)"},
    {"layer_replication", "layer_replication"},
    {"trainable_token_indices", "trainable_token_indices (trained embedding rows)"},
    {"target_parameters", "target_parameters (LoRA on raw parameters)"},
    {"alora_invocation_tokens", "activated LoRA (alora_invocation_tokens)"},
    {"use_qalora", "QA-LoRA (use_qalora)"},
    {"use_bdlora", "use_bdlora"},
    {"arrow_config", "Arrow routing (arrow_config)"},
    {"kasa_config", "kasa_config"},
    {"velora_config", "velora_config"},
    {"monteclora_config", "monteclora_config"},
};

/* Puts "load_adapter: " before the message a lower layer left in err. */
static int prefixed(seer_err_t *err, int rc) {
    if (!err) return rc;
    char msg[SEER_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return seer_err_set(err, rc, "load_adapter: %s", msg);
}

static int parse_config(const char *path, lora_cfg *c, seer_err_t *err) {
    cJSON *j = seer_model_read_json(path, err);
    if (!j) return prefixed(err, err ? err->code : SEER_EPARSE);
    int rc = 0;
    const cJSON *v = jget(j, "peft_type");
    if (!v || !cJSON_IsString(v)) {
        rc = seer_err_set(err, SEER_EPARSE, "load_adapter: %s: missing \"peft_type\" (not a PEFT adapter config)", path);
        goto out;
    }
    if (strcmp(v->valuestring, "LORA") != 0) {
        rc = seer_err_set(err, SEER_EINVAL, "load_adapter: %s: peft_type \"%s\" is not supported (supported: LORA)", path,
                          v->valuestring);
        goto out;
    }
    v = jget(j, "r");
    if (!v || !cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > SEER_LORA_MAX_RANK) {
        rc = seer_err_set(err, SEER_EPARSE, "load_adapter: %s: \"r\" must be an integer in [1, %d]", path,
                          SEER_LORA_MAX_RANK);
        goto out;
    }
    c->r = (int)v->valuedouble;
    c->alpha = 8.0; /* peft's default */
    if ((v = jget(j, "lora_alpha"))) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
            rc = seer_err_set(err, SEER_EPARSE, "load_adapter: %s: \"lora_alpha\" must be a finite number", path);
            goto out;
        }
        c->alpha = v->valuedouble;
    }
    c->rslora = 0;
    if ((v = jget(j, "use_rslora"))) {
        if (!cJSON_IsBool(v)) {
            rc = seer_err_set(err, SEER_EPARSE, "load_adapter: %s: \"use_rslora\" must be true or false", path);
            goto out;
        }
        c->rslora = cJSON_IsTrue(v);
    }
    if ((v = jget(j, "bias")) && !(cJSON_IsString(v) && strcmp(v->valuestring, "none") == 0)) {
        rc = seer_err_set(err, SEER_EINVAL,
                          "load_adapter: %s: \"bias\" is %s; only \"none\" is supported (bias terms trained with the "
                          "adapter are not applied)",
                          path, cJSON_IsString(v) ? v->valuestring : "not a string");
        goto out;
    }
    for (size_t i = 0; i < sizeof UNSUPPORTED / sizeof UNSUPPORTED[0]; i++)
        if (is_set(cJSON_GetObjectItemCaseSensitive(j, UNSUPPORTED[i].key))) {
            rc = seer_err_set(err, SEER_EINVAL,
                              "load_adapter: %s: \"%s\" is set: %s is not supported (seer applies plain LoRA to the "
                              "linear modules " SUPPORTED_MODULES ")",
                              path, UNSUPPORTED[i].key, UNSUPPORTED[i].what);
            goto out;
        }
    /* target_modules: a list is checked name by name; a string is "all-linear" or a regex over
     * module paths, and then the tensors in the file are what is checked. */
    if ((v = jget(j, "target_modules"))) {
        if (cJSON_IsArray(v)) {
            const cJSON *e;
            cJSON_ArrayForEach(e, v) {
                int ok = 0;
                for (int k = 0; k < NMOD && cJSON_IsString(e); k++) ok |= strcmp(e->valuestring, MODULES[k]) == 0;
                if (!ok) {
                    rc = seer_err_set(err, SEER_EINVAL,
                                      "load_adapter: %s: target module %s%s%s is not supported (supported: " SUPPORTED_MODULES
                                      ")",
                                      path, cJSON_IsString(e) ? "\"" : "", cJSON_IsString(e) ? e->valuestring : "(not a string)",
                                      cJSON_IsString(e) ? "\"" : "");
                    goto out;
                }
            }
        } else if (!cJSON_IsString(v)) {
            rc = seer_err_set(err, SEER_EPARSE, "load_adapter: %s: \"target_modules\" must be a list of names or a string",
                              path);
            goto out;
        }
    }
out:
    cJSON_Delete(j);
    return rc;
}

/* ---- adapter_model.safetensors ------------------------------------------------------------- */

/* base_model.model.model.layers.<N>.<self_attn|mlp>.<module>.lora_<A|B>.weight -> layer, module
 * index, is_b. 0 when the name is not of that form (or names an unsupported module). */
static int parse_name(const char *name, int *layer, int *mod, int *is_b) {
    static const char prefix[] = "base_model.model.model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0) return 0;
    const char *p = name + sizeof prefix - 1;
    long v = 0;
    int nd = 0;
    while (*p >= '0' && *p <= '9' && nd < 9) v = v * 10 + (*p++ - '0'), nd++;
    if (nd == 0 || *p != '.' || (nd > 1 && p[-nd] == '0')) return 0;
    p++;
    for (int k = 0; k < NMOD; k++) {
        size_t lp = strlen(PARENTS[k]), lm = strlen(MODULES[k]);
        if (strncmp(p, PARENTS[k], lp) != 0 || p[lp] != '.' || strncmp(p + lp + 1, MODULES[k], lm) != 0) continue;
        const char *rest = p + lp + 1 + lm;
        if (strcmp(rest, ".lora_A.weight") == 0) *is_b = 0;
        else if (strcmp(rest, ".lora_B.weight") == 0) *is_b = 1;
        else continue;
        *layer = (int)v;
        *mod = k;
        return 1;
    }
    return 0;
}

/* Why a tensor name is not usable, for the error. */
static const char *name_hint(const char *name) {
    if (strstr(name, "lora_embedding_")) return "embedding adapters (embed_tokens) are not supported";
    if (strstr(name, "lora_magnitude_vector")) return "DoRA magnitudes are not supported";
    if (strstr(name, "lm_head")) return "adapters on lm_head are not supported";
    if (strstr(name, "embed_tokens")) return "adapters on embed_tokens are not supported";
    if (strstr(name, "modules_to_save")) return "modules_to_save is not supported";
    if (strstr(name, ".lora_B.bias") || strstr(name, ".lora_A.bias")) return "LoRA biases are not supported";
    if (strstr(name, ".lora_A.") || strstr(name, ".lora_B.")) return "this module is not supported";
    return "not a LoRA tensor seer knows";
}

static void shape_str(const seer_st_entry_t *e, char *buf, size_t size) {
    size_t o = 0;
    buf[0] = 0;
    for (int d = 0; d < e->ndim && o + 24 < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
}

/* An adapter tensor widened to f32; transpose: store [cols][rows] instead of [rows][cols]. */
static float *widen(const seer_st_entry_t *e, int transpose) {
    int64_t rows = e->shape[0], cols = e->shape[1];
    float *out = malloc((size_t)(rows * cols) * sizeof(float) + 1);
    if (!out) return NULL;
    seer_weight_t w = {.dtype = e->dtype, .data = e->data, .rows = rows, .cols = cols};
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float x = seer_w_load(&w, (size_t)(r * cols + c));
            if (transpose) out[c * rows + r] = x;
            else out[r * cols + c] = x;
        }
    return out;
}

typedef struct {
    const seer_st_entry_t *a, *b;
    seer_weight_t *w;
    int layer, mod;
} pending_t;

static int load_adapter(seer_model_t *m, const char *dir, int merge, seer_err_t *err) {
    char cpath[PATH_MAX], wpath[PATH_MAX];
    struct stat st;
    int family = arch_family(m);
    if (!family)
        return seer_err_set(err, SEER_EINVAL, "load_adapter: LoRA adapters are supported on " SUPPORTED_ARCHS
                                              " models; this model is %s",
                            m->arch ? m->arch->model_type : "unknown");
    if (stat(dir, &st) != 0)
        return seer_err_set(err, SEER_ENOTFOUND, "load_adapter: cannot open adapter directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return seer_err_set(err, SEER_EINVAL,
                            "load_adapter: %s is not a directory; give the adapter directory (with adapter_config.json "
                            "and adapter_model.safetensors)",
                            dir);
    int w1 = snprintf(cpath, sizeof cpath, "%s/adapter_config.json", dir);
    int w2 = snprintf(wpath, sizeof wpath, "%s/adapter_model.safetensors", dir);
    if (w1 < 0 || (size_t)w1 >= sizeof cpath || w2 < 0 || (size_t)w2 >= sizeof wpath)
        return seer_err_set(err, SEER_EINVAL, "load_adapter: path too long: %s", dir);
    if (stat(cpath, &st) != 0)
        return seer_err_set(err, SEER_ENOTFOUND,
                            "load_adapter: %s has no adapter_config.json (a PEFT adapter directory holds "
                            "adapter_config.json and adapter_model.safetensors)",
                            dir);
    if (stat(wpath, &st) != 0) {
        char bpath[PATH_MAX + 32];
        snprintf(bpath, sizeof bpath, "%s/adapter_model.bin", dir);
        if (stat(bpath, &st) == 0)
            return seer_err_set(err, SEER_ENOTFOUND,
                                "load_adapter: %s has adapter_model.bin but no adapter_model.safetensors (PyTorch "
                                "pickles are not read; save the adapter with safe_serialization=True)",
                                dir);
        return seer_err_set(err, SEER_ENOTFOUND, "load_adapter: %s has no adapter_model.safetensors", dir);
    }

    lora_state *s = get_state(m, err);
    if (!s) return SEER_ENOMEM;
    if (s->unmerged)
        return seer_err_set(err, SEER_EINVAL,
                            "load_adapter: an unmerged adapter (%s) is already loaded; seer keeps one switchable adapter "
                            "per model and it must be the last one loaded (merge the first one, or load the model again)",
                            s->unmerged_dir);

    lora_cfg c = {0};
    int rc = parse_config(cpath, &c, err);
    if (rc < 0) return rc;
    double dscale = c.rslora ? c.alpha / sqrt((double)c.r) : c.alpha / (double)c.r;
    if (!(fabs(dscale) <= FLT_MAX)) /* past FLT_MAX: undefined as a float, and every output NaN or infinite */
        return seer_err_set(err, SEER_EPARSE, "load_adapter: %s: lora_alpha %g gives the scale %g, which is not a finite f32",
                            cpath, c.alpha, dscale);
    float scale = (float)dscale;

    seer_st_file_t *f = NULL;
    pending_t *pend = NULL;
    struct seer_lora *mods = NULL;
    float **bufs = NULL;
    int nt = 0;
    /* an adapter folder is not trusted either: no link out of it, no FIFO (docs/security.md) */
    if ((rc = seer_st_open_ex(&f, wpath, NULL, SEER_ST_CONFINED, NULL, NULL, err)) < 0) return prefixed(err, rc);
    int nslots = m->cfg.num_layers * NMOD;
    pend = calloc((size_t)(nslots > 0 ? nslots : 1), sizeof *pend);
    if (!pend) {
        rc = seer_err_set(err, SEER_ENOMEM, "load_adapter: out of memory");
        goto out;
    }
    for (size_t i = 0; i < seer_st_count(f); i++) {
        const seer_st_entry_t *e = seer_st_entry(f, i);
        int layer, mod, is_b;
        if (!parse_name(e->name, &layer, &mod, &is_b)) {
            rc = seer_err_set(err, SEER_EINVAL,
                              "load_adapter: %s: tensor \"%s\": %s (seer applies LoRA to " SUPPORTED_MODULES
                              " of the decoder layers: tensors named " TENSOR_FORM ")",
                              wpath, e->name, name_hint(e->name));
            goto out;
        }
        if (layer >= m->cfg.num_layers) {
            rc = seer_err_set(err, SEER_EINVAL, "load_adapter: %s: tensor \"%s\" is for layer %d, but the model has %d layers",
                              wpath, e->name, layer, m->cfg.num_layers);
            goto out;
        }
        if (e->dtype != SEER_F32 && e->dtype != SEER_BF16 && e->dtype != SEER_F16) {
            rc = seer_err_set(err, SEER_EPARSE, "load_adapter: %s: tensor \"%s\" has dtype %s; LoRA weights must be F32, BF16 or F16",
                              wpath, e->name, seer_dtype_st_name(e->dtype));
            goto out;
        }
        if ((uintptr_t)e->data % seer_dtype_size(e->dtype) != 0) { /* read in place below: undefined off-boundary */
            rc = seer_err_set(err, SEER_EPARSE,
                              "load_adapter: %s: tensor \"%s\"'s data is not aligned to its %zu-byte %s elements (a crafted "
                              "or corrupt safetensors file)",
                              wpath, e->name, seer_dtype_size(e->dtype), seer_dtype_st_name(e->dtype));
            goto out;
        }
        pending_t *pd = &pend[layer * NMOD + mod];
        pd->layer = layer;
        pd->mod = mod;
        if (is_b) pd->b = e;
        else pd->a = e;
    }
    /* Shapes: A [r][in], B [out][r] against the bound weight [out][in] and the config's r. */
    for (int i = 0; i < nslots; i++) {
        pending_t *pd = &pend[i];
        if (!pd->a && !pd->b) continue;
        const char *pref = "base_model.model.model.layers";
        if (!pd->a || !pd->b) {
            rc = seer_err_set(err, SEER_EPARSE, "load_adapter: %s: tensor \"%s\" has no matching %s.%d.%s.%s.lora_%c.weight",
                              wpath, (pd->a ? pd->a : pd->b)->name, pref, pd->layer, PARENTS[pd->mod], MODULES[pd->mod],
                              pd->a ? 'B' : 'A');
            goto out;
        }
        pd->w = seer_model_layer_weight(m, pd->layer, pd->mod); /* family checked above */
        if (!pd->w || !pd->w->data || pd->w->rows <= 0 || pd->w->cols <= 0) {
            rc = seer_err_set(err, SEER_EINVAL, "load_adapter: %s: the model has no weight model.layers.%d.%s.%s for tensor \"%s\"",
                              wpath, pd->layer, PARENTS[pd->mod], MODULES[pd->mod], pd->a->name);
            goto out;
        }
        int64_t in = pd->w->cols, outd = pd->w->rows;
        char got[128];
        if (pd->a->ndim != 2 || pd->a->shape[0] != c.r || pd->a->shape[1] != in) {
            shape_str(pd->a, got, sizeof got);
            rc = seer_err_set(err, SEER_EPARSE,
                              "load_adapter: %s: tensor \"%s\" has shape [%s], expected [%d, %lld] (r = %d from "
                              "adapter_config.json; model.layers.%d.%s.%s.weight is [%lld, %lld])",
                              wpath, pd->a->name, got, c.r, (long long)in, c.r, pd->layer, PARENTS[pd->mod],
                              MODULES[pd->mod], (long long)outd, (long long)in);
            goto out;
        }
        if (pd->b->ndim != 2 || pd->b->shape[0] != outd || pd->b->shape[1] != c.r) {
            shape_str(pd->b, got, sizeof got);
            rc = seer_err_set(err, SEER_EPARSE,
                              "load_adapter: %s: tensor \"%s\" has shape [%s], expected [%lld, %d] (r = %d from "
                              "adapter_config.json; model.layers.%d.%s.%s.weight is [%lld, %lld])",
                              wpath, pd->b->name, got, (long long)outd, c.r, c.r, pd->layer, PARENTS[pd->mod],
                              MODULES[pd->mod], (long long)outd, (long long)in);
            goto out;
        }
        nt++;
    }
    if (nt == 0) {
        rc = seer_err_set(err, SEER_EINVAL, "load_adapter: %s holds no LoRA tensors", wpath);
        goto out;
    }

    /* Build everything before touching the model. */
    mods = calloc((size_t)nt, sizeof *mods);
    bufs = calloc((size_t)nt, sizeof *bufs);
    if (!mods || !bufs) {
        rc = seer_err_set(err, SEER_ENOMEM, "load_adapter: out of memory");
        goto out;
    }
    int simd = seer_k_have_avx2();
    size_t merged_bytes = 0;
    for (int i = 0, t = 0; i < nslots; i++) {
        pending_t *pd = &pend[i];
        if (!pd->w) continue;
        struct seer_lora *l = &mods[t];
        l->r = c.r;
        l->in = pd->w->cols;
        l->out = pd->w->rows;
        l->scale = scale;
        l->enabled = &s->enabled;
        l->A = widen(pd->a, 0);
        l->B = widen(pd->b, 0);
        l->BT = widen(pd->b, 1);
        if (!l->A || !l->B || !l->BT) {
            rc = seer_err_set(err, SEER_ENOMEM, "load_adapter: out of memory");
            goto out;
        }
        if (merge) {
            size_t bytes = (size_t)l->out * (size_t)l->in * sizeof(float);
            bufs[t] = malloc(bytes);
            if (!bufs[t]) {
                rc = seer_err_set(err, SEER_ENOMEM, "load_adapter: out of memory for the merged weights (%zu MiB so far)",
                                  (merged_bytes + bytes) >> 20);
                goto out;
            }
            merged_bytes += bytes;
            merge_job j = {.dst = bufs[t], .w = pd->w, .l = l, .simd = simd};
            size_t per_row = (size_t)l->r * (size_t)l->in + (size_t)l->in;
            seer_pool_for(m->pool, (size_t)l->out, (SEER_PAR_WORK + per_row - 1) / per_row, merge_chunk, &j);
        }
        t++;
    }

    /* Commit. */
    if (merge) {
        for (int i = 0, t = 0; i < nslots; i++) {
            pending_t *pd = &pend[i];
            if (!pd->w) continue;
            free(s->merged[i]); /* an earlier merge's copy, now folded into this one */
            s->merged[i] = bufs[t];
            bufs[t] = NULL;
            pd->w->dtype = SEER_F32;
            pd->w->data = s->merged[i];
            pd->w->amx_packed = 0; /* the merged copy is rows */
            t++;
        }
        s->nmerged++;
        snprintf(s->merged_dir, sizeof s->merged_dir, "%s", dir);
    } else {
        for (int i = 0, t = 0; i < nslots; i++) {
            pending_t *pd = &pend[i];
            if (!pd->w) continue;
            pd->w->lora = &mods[t++];
        }
        s->mods = mods;
        s->nmods = nt;
        mods = NULL;
        s->unmerged = 1;
        s->enabled = 1;
        snprintf(s->unmerged_dir, sizeof s->unmerged_dir, "%s", dir);
    }
    rc = 0;
out:
    mods_free(mods, nt);
    if (bufs)
        for (int t = 0; t < nt; t++) free(bufs[t]);
    free(bufs);
    free(pend);
    seer_st_close(f);
    return rc;
}

int seer_lora_load(seer_model_t *m, const char *dir, int merge, seer_err_t *err) {
    m->state_epoch++; /* a failed load may have merged part of the adapter */
    return load_adapter(m, dir, merge, err);
}

int seer_lora_set_enabled(seer_model_t *m, int enabled, seer_err_t *err) {
    lora_state *s = m->lora_state;
    if (!s || (!s->unmerged && s->nmerged == 0))
        return seer_err_set(err, SEER_EINVAL, "set_adapter: no adapter is loaded (use load_adapter first)");
    if (!s->unmerged)
        return seer_err_set(err, SEER_EINVAL,
                            "set_adapter: the adapter (%s) was merged into the weights and cannot be switched; load it "
                            "with merge = false to switch it on and off",
                            s->merged_dir);
    if (s->enabled != (enabled != 0)) m->state_epoch++;
    s->enabled = enabled != 0;
    return 0;
}

/* ---- Lua methods (registered on the model userdata by lua_model.c) -------------------------- */

int seer_lora_l_load(lua_State *L) {
    seer_model_t *m = seer_model_lua_check(L, 1);
    const char *dir = luaL_checkstring(L, 2);
    int merge = lua_toboolean(L, 3);
    seer_err_t err;
    if (seer_lora_load(m, dir, merge, &err) < 0) return luaL_error(L, "%s", err.msg);
    return 0;
}

int seer_lora_l_set(lua_State *L) {
    seer_model_t *m = seer_model_lua_check(L, 1);
    luaL_checktype(L, 2, LUA_TBOOLEAN);
    seer_err_t err;
    if (seer_lora_set_enabled(m, lua_toboolean(L, 2), &err) < 0) return luaL_error(L, "%s", err.msg);
    return 0;
}
