/* libFuzzer target: config.json and generation_config.json of a model folder (hostile, as every
 * file of one: docs/security.md). The first byte picks an architecture (or, past them, takes the
 * rest of the input as config.json verbatim); the following bytes choose every numeric, boolean
 * and string field the architecture reads, each either absent, a value that fits the others, or
 * a hostile one (0, negative, huge, non-integer, 1e309, a string, null, a list...). From the
 * config as written, the tensors it implies are derived; when they are small (under
 * MAX_ELEMS elements in all) a safetensors file with exactly those shapes is written (a byte of
 * the input may drop or reshape one), else a small mismatched one that the loader must refuse.
 * A Gemma 3 multimodal config (text_config) is one of the architectures; generation_config.json
 * is written when the input says so. The folder (under /dev/shm) is loaded with seer_model_load
 * (one thread, weights read in or mapped, hidden or not, precision exact or fast: fast on bf16
 * weights also keeps a bf16 KV cache); a loaded model runs a prefill of a few
 * tokens, one decode step (and, when the input says so, the logit lens and a batch of two), then
 * is freed.
 *
 * Any crash, sanitizer report, hang or huge allocation is a finding; so is a failed load or
 * forward whose error message is empty, and a decode that returns a token outside the vocabulary.
 * FUZZ_MODEL_NAN=1 in the environment also traps on non-finite logits (an exploration aid: a
 * config whose numbers give NaN without being refused is a silent wrong answer). */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "model/model.h"

/* The architectures other than llama are weak references in model.c (an architecture file may be
 * left out of a build); from a static library nothing would pull them in. */
struct seer_arch;
extern const struct seer_arch seer_arch_mistral, seer_arch_qwen2, seer_arch_qwen3, seer_arch_gemma, seer_arch_gemma2,
    seer_arch_gemma3, seer_arch_gpt2, seer_arch_gpt_neox, seer_arch_granite, seer_arch_olmo2, seer_arch_phi3;
const void *const fuzz_model_config_archs[] = {&seer_arch_mistral, &seer_arch_qwen2,   &seer_arch_qwen3,
                                               &seer_arch_gemma,   &seer_arch_gemma2,  &seer_arch_gemma3,
                                               &seer_arch_gpt2,    &seer_arch_gpt_neox, &seer_arch_granite,
                                               &seer_arch_olmo2,   &seer_arch_phi3};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_ELEMS ((int64_t)1 << 20) /* elements of all tensors of a written checkpoint */
#define MAX_TENSORS 2000

/* ---- input reader and string builder ------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    size_t n, i;
} rd_t;

static unsigned u8(rd_t *r) { return r->i < r->n ? r->p[r->i++] : 0; }

typedef struct {
    char *s;
    size_t len, cap;
    int first[8]; /* per nesting depth: no member written yet */
    int depth;
} sb_t;

static void sb_add(sb_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0) return;
    if (b->len + (size_t)need + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)need;
        char *s = realloc(b->s, cap);
        if (!s) abort();
        b->s = s, b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)need;
}

static void sb_open(sb_t *b, char c) {
    sb_add(b, "%c", c);
    if (b->depth < 7) b->depth++;
    b->first[b->depth] = 1;
}
static void sb_close(sb_t *b, char c) {
    sb_add(b, "%c", c);
    if (b->depth > 0) b->depth--;
}
static void sb_key(sb_t *b, const char *key) {
    sb_add(b, "%s\"%s\":", b->first[b->depth] ? "" : ",", key);
    b->first[b->depth] = 0;
}
static void sb_item(sb_t *b) {
    if (!b->first[b->depth]) sb_add(b, ",");
    b->first[b->depth] = 0;
}

/* ---- field values ------------------------------------------------------------------------- */

/* Hostile values as JSON text: around the limits config.c checks, past what an int or a float
 * holds, non-integers, infinities (1e309), tiny denormals and values of the wrong type. */
static const char *const specials[] = {
    "0", "-1", "1", "2", "3", "-0", "0.5", "1.5", "2.5", "-2", "4096", "4097", "65536", "16777216", "16777217",
    "2147483647", "2147483648", "4294967296", "-2147483649", "9007199254740993", "1e9", "1e18", "1e300", "-1e300",
    "1e309", "-1e309", "1e-320", "1e-45", "3.4028234663852886e38", "3.5e38", "-3.5e38", "1e38", "1e-38", "null",
    "true", "false", "\"8\"", "\"\"", "[]", "[8]", "[1,2]", "{}", "{\"a\":1}", "[null]", "\"nan\"", "[1e309]",
    "0.0001", "-0.5", "100000", "1048576", "1048577", "4194304", "4194305", "8192", "1e-300", "7",
};
#define NSPECIAL (sizeof specials / sizeof specials[0])

/* One selector byte: absent (s < 12), the value fitting the rest (s < 240), else a hostile one
 * (the first four relative to the fitting value when it is an integer). Returns 1 when the
 * field was written. */
static int put_text(sb_t *b, rd_t *r, const char *key, const char *fit, long fit_int, int has_int) {
    unsigned s = u8(r);
    if (s < 12) return 0;
    sb_key(b, key);
    if (s < 240) {
        sb_add(b, "%s", fit);
        return 1;
    }
    unsigned k = s - 240;
    if (has_int && k < 4) {
        long v = k == 0 ? fit_int + 1 : k == 1 ? fit_int - 1 : k == 2 ? fit_int * 2 : -fit_int;
        sb_add(b, "%ld", v);
        return 1;
    }
    sb_add(b, "%s", specials[(k + u8(r)) % NSPECIAL]);
    return 1;
}

static int put_int(sb_t *b, rd_t *r, const char *key, long v) {
    char t[32];
    snprintf(t, sizeof t, "%ld", v);
    return put_text(b, r, key, t, v, 1);
}

/* A fitting value chosen by one more byte from a list of JSON texts (mostly the first: the
 * others may be refused). */
static int put_pick(sb_t *b, rd_t *r, const char *key, const char *const *vals, size_t n) {
    unsigned k = u8(r);
    const char *v = vals[k < 128 ? 0 : k % n];
    return put_text(b, r, key, v, 0, 0);
}
#define PICK(b, r, key, ...)                                                                  \
    do {                                                                                      \
        static const char *const vals_[] = {__VA_ARGS__};                                     \
        put_pick((b), (r), (key), vals_, sizeof vals_ / sizeof vals_[0]);                     \
    } while (0)

static int put_bool(sb_t *b, rd_t *r, const char *key) {
    static const char *const tf[] = {"true", "false"};
    return put_pick(b, r, key, tf, 2);
}

/* ---- architectures ------------------------------------------------------------------------ */

enum {
    A_LLAMA, A_MISTRAL, A_QWEN2, A_QWEN3, A_GEMMA, A_GEMMA2, A_GEMMA3, A_GEMMA3MM, A_GPT2, A_NEOX, A_GRANITE,
    A_OLMO2, A_PHI3, A_COUNT
};
static const char *const arch_type[A_COUNT] = {"llama",   "mistral", "qwen2",    "qwen3",   "gemma",
                                               "gemma2",  "gemma3_text", "gemma3", "gpt2", "gpt_neox",
                                               "granite", "olmo2",   "phi3"};

static int is_gemma(int a) { return a == A_GEMMA || a == A_GEMMA2 || a == A_GEMMA3 || a == A_GEMMA3MM; }
static int is_llama_family(int a) {
    return a == A_LLAMA || a == A_MISTRAL || a == A_QWEN2 || a == A_QWEN3 || a == A_GRANITE || a == A_OLMO2 ||
           a == A_PHI3;
}

/* The sizes the generated config is meant to have (each field may still be written otherwise). */
typedef struct {
    int H, KH, hd, D, I, V, L, P;
} dims_t;

static void rope_block(sb_t *b, rd_t *r, const dims_t *d, int in_parameters) {
    static const char *const types[] = {"\"default\"", "\"linear\"", "\"dynamic\"", "\"llama3\"", "\"yarn\"",
                                        "\"longrope\"", "\"su\"", "\"ntk\"", "3"};
    unsigned t = u8(r) % (sizeof types / sizeof types[0]);
    sb_open(b, '{');
    sb_key(b, u8(r) & 1 ? "type" : "rope_type");
    sb_add(b, "%s", types[t]);
    if (in_parameters) PICK(b, r, "rope_theta", "10000.0", "1000000", "2", "1.0", "0.5", "500000");
    PICK(b, r, "factor", "2.0", "8", "1", "0.5", "32", "0.001", "4");
    if (t == 3) {
        PICK(b, r, "low_freq_factor", "1", "4", "2", "0.5");
        PICK(b, r, "high_freq_factor", "4", "1", "8", "1.0000001");
    }
    if (t == 3 || t == 4 || t == 5 || t == 6) put_int(b, r, "original_max_position_embeddings", 2 + (long)(u8(r) % 8));
    if (t == 4) {
        PICK(b, r, "beta_fast", "32", "0", "-1", "1e30", "4");
        PICK(b, r, "beta_slow", "1", "0", "2", "1e-30");
        PICK(b, r, "mscale", "1", "0.707", "0", "-10", "1e30");
        PICK(b, r, "mscale_all_dim", "0", "1", "0.707", "-10");
        PICK(b, r, "attention_factor", "0", "1", "0.5", "1e-30");
        put_bool(b, r, "truncate");
    }
    if (t == 5 || t == 6) {
        int rot = d->hd; /* partial_rotary_factor may make it shorter: then the length is wrong */
        static const char *const fv[] = {"1", "1.5", "0.5", "1e-30", "1e30", "4.0", "1e-45", "3.5e38", "0", "-1"};
        for (int which = 0; which < 2; which++) {
            unsigned sel = u8(r);
            if (sel < 16) continue;
            sb_key(b, which ? "long_factor" : "short_factor");
            int n = rot / 2 + (sel >= 240 ? (int)(sel % 3) - 1 : 0);
            sb_open(b, '[');
            for (int i = 0; i < n && i < 64; i++) {
                sb_item(b);
                unsigned v = u8(r);
                sb_add(b, "%s", v < 160 ? fv[v % 4] : fv[v % (sizeof fv / sizeof fv[0])]);
            }
            sb_close(b, ']');
        }
        PICK(b, r, "partial_rotary_factor", "1.0", "0.5", "0.75", "0.25");
    }
    sb_close(b, '}');
}

static void layer_types(sb_t *b, rd_t *r, int L) {
    unsigned s = u8(r);
    if (s < 128) return;
    sb_key(b, "layer_types");
    if (s >= 250) {
        sb_add(b, "%s", specials[u8(r) % NSPECIAL]);
        return;
    }
    int n = L + (s >= 240 ? (int)(s % 3) - 1 : 0);
    static const char *const lt[] = {"\"full_attention\"", "\"sliding_attention\"", "\"chunked_attention\"", "null"};
    sb_open(b, '[');
    for (int i = 0; i < n && i < 64; i++) {
        sb_item(b);
        unsigned v = u8(r);
        sb_add(b, "%s", lt[v < 200 ? v % 2 : v % 4]);
    }
    sb_close(b, ']');
}

/* The fields of one config object for architecture a (the text model's for Gemma 3 multimodal). */
static void config_fields(sb_t *b, rd_t *r, int a, const dims_t *d) {
    int gpt2 = a == A_GPT2;
    /* GPT-2's own names (config.c reads them as aliases; any architecture may carry them) */
    if (gpt2 || (u8(r) & 7) == 0) {
        put_int(b, r, "n_embd", d->D);
        put_int(b, r, "n_layer", d->L);
        put_int(b, r, "n_head", d->H);
        put_int(b, r, "n_positions", d->P);
        put_int(b, r, "n_inner", d->I);
        PICK(b, r, "layer_norm_epsilon", "1e-5", "0", "1e-12", "0.5");
        if (gpt2) {
            put_int(b, r, "n_ctx", d->P);
            PICK(b, r, "activation_function", "\"gelu_new\"", "\"gelu\"", "\"relu\"", "\"gelu_fast\"", "\"tanh\"");
            put_bool(b, r, "scale_attn_weights");
            put_bool(b, r, "scale_attn_by_inverse_layer_idx");
            put_bool(b, r, "reorder_and_upcast_attn");
        }
    }
    if (!gpt2 || (u8(r) & 3) == 0) {
        put_int(b, r, "hidden_size", d->D);
        put_int(b, r, "intermediate_size", d->I);
        put_int(b, r, "num_hidden_layers", d->L);
        put_int(b, r, "num_attention_heads", d->H);
        put_int(b, r, "max_position_embeddings", d->P);
    }
    put_int(b, r, "vocab_size", d->V);
    put_int(b, r, "num_key_value_heads", d->KH);
    put_int(b, r, "head_dim", d->hd);
    PICK(b, r, "rms_norm_eps", "1e-5", "1e-6", "0", "1e-12", "0.1");
    PICK(b, r, "rope_theta", "10000.0", "1000000", "500000", "2", "1.5", "100");
    put_bool(b, r, "tie_word_embeddings");
    put_bool(b, r, "attention_bias");
    if (a == A_LLAMA || a == A_GRANITE || (u8(r) & 15) == 0) put_bool(b, r, "mlp_bias");
    {
        unsigned s = u8(r);
        if (s >= 40) {
            sb_key(b, "eos_token_id");
            if (s < 150) sb_add(b, "%u", u8(r) % (unsigned)d->V);
            else if (s < 230) sb_add(b, "[%u,%u]", u8(r) % (unsigned)d->V, u8(r) % (unsigned)d->V);
            else sb_add(b, "%s", specials[u8(r) % NSPECIAL]);
        }
    }
    put_int(b, r, "bos_token_id", (long)(u8(r) % (unsigned)d->V));
    put_int(b, r, "sliding_window", (long)(u8(r) % 9));
    /* rope: transformers 4's rope_scaling, 5's rope_parameters (or per layer type for gemma3) */
    {
        unsigned s = u8(r);
        if (s >= 96 && s < 176) {
            sb_key(b, "rope_scaling");
            rope_block(b, r, d, 0);
        } else if (s >= 176 && s < 240) {
            sb_key(b, "rope_parameters");
            if (a == A_GEMMA3 || a == A_GEMMA3MM ? u8(r) & 1 : 0) {
                sb_open(b, '{');
                sb_key(b, "full_attention");
                rope_block(b, r, d, 1);
                sb_key(b, "sliding_attention");
                rope_block(b, r, d, 1);
                sb_close(b, '}');
            } else {
                rope_block(b, r, d, 1);
            }
        } else if (s >= 240) {
            sb_key(b, u8(r) & 1 ? "rope_scaling" : "rope_parameters");
            sb_add(b, "%s", specials[u8(r) % NSPECIAL]);
        }
    }
    if (is_llama_family(a)) PICK(b, r, "hidden_act", "\"silu\"", "\"swish\"", "\"gelu\"", "\"relu\"");
    if (a == A_QWEN2 || a == A_QWEN3) {
        put_bool(b, r, "use_sliding_window");
        put_int(b, r, "max_window_layers", (long)(u8(r) % (unsigned)(d->L + 2)));
        layer_types(b, r, d->L);
    }
    if (a == A_PHI3) {
        PICK(b, r, "partial_rotary_factor", "1.0", "0.5", "0.75", "0.25");
        put_int(b, r, "original_max_position_embeddings", 2 + (long)(u8(r) % 8));
    }
    if (a == A_GRANITE) {
        PICK(b, r, "embedding_multiplier", "12.0", "1", "0.5", "1e-30");
        PICK(b, r, "residual_multiplier", "0.22", "1", "2");
        PICK(b, r, "attention_multiplier", "0.0078125", "1", "0.5");
        PICK(b, r, "logits_scaling", "8.0", "1", "0.25", "1e-30");
    }
    if (is_gemma(a)) {
        PICK(b, r, a == A_GEMMA ? "hidden_act" : "hidden_activation", "\"gelu_pytorch_tanh\"", "\"gelu\"",
             "\"gelu_new\"", "\"silu\"");
        if (a != A_GEMMA) {
            put_int(b, r, "query_pre_attn_scalar", d->hd);
            PICK(b, r, "attn_logit_softcapping", "50.0", "null", "0.5", "1e-3", "0");
            PICK(b, r, "final_logit_softcapping", "30.0", "null", "0.5", "1e-3", "0");
            layer_types(b, r, d->L);
            PICK(b, r, "use_bidirectional_attention", "false", "null", "true");
            PICK(b, r, "cache_implementation", "\"hybrid\"", "null");
        }
        if (a == A_GEMMA3 || a == A_GEMMA3MM) {
            put_int(b, r, "sliding_window_pattern", 1 + (long)(u8(r) % 6));
            put_int(b, r, "_sliding_window_pattern", 1 + (long)(u8(r) % 6));
            PICK(b, r, "rope_local_base_freq", "10000.0", "1", "0.5");
        }
    }
    if (a == A_NEOX) {
        PICK(b, r, "rotary_pct", "0.25", "0", "0.5", "1", "0.125");
        PICK(b, r, "partial_rotary_factor", "0.25", "0", "0.5", "1");
        PICK(b, r, "rotary_emb_base", "10000", "1", "0.5", "1000000");
        PICK(b, r, "layer_norm_eps", "1e-5", "0", "1e-12");
        put_bool(b, r, "use_parallel_residual");
        PICK(b, r, "hidden_act", "\"gelu\"", "\"gelu_new\"", "\"relu\"", "\"silu\"");
    }
    if ((u8(r) & 15) == 0) PICK(b, r, "quantization_config", "null", "{\"quant_method\":\"gptq\"}");
    if ((u8(r) & 15) == 0) PICK(b, r, "some_future_field", "1", "\"x\"");
}

static void make_config(sb_t *b, rd_t *r, int a) {
    dims_t d;
    d.H = 1 + (int)(u8(r) % 4);
    int kv_div = 1 + (int)(u8(r) % 4);
    d.KH = d.H % kv_div == 0 ? d.H / kv_div : d.H;
    d.hd = 2 * (1 + (int)(u8(r) % 8));
    unsigned dsel = u8(r);
    d.D = dsel < 192 ? d.H * d.hd : 1 + (int)(dsel % 48);
    if (a == A_GPT2 || a == A_NEOX) d.KH = d.H, d.D = d.H * d.hd;
    d.I = 1 + (int)(u8(r) % 48);
    d.V = 1 + (int)(u8(r) % 64);
    d.L = 1 + (int)(u8(r) % 3);
    d.P = 1 + (int)(u8(r) % 64);
    sb_open(b, '{');
    sb_key(b, "model_type");
    unsigned mt = u8(r);
    sb_add(b, "\"%s\"", mt < 250 ? arch_type[a] : arch_type[mt % A_COUNT]);
    if (a == A_GEMMA3MM) {
        sb_key(b, "text_config");
        if (u8(r) < 248) {
            sb_open(b, '{');
            config_fields(b, r, A_GEMMA3, &d);
            sb_close(b, '}');
        } else {
            sb_add(b, "%s", specials[u8(r) % NSPECIAL]);
        }
        if (u8(r) & 1) {
            sb_key(b, "vision_config");
            sb_add(b, "{\"hidden_size\":8}");
        }
        put_int(b, r, "eos_token_id", 1);
        put_int(b, r, "mm_tokens_per_image", 256);
    } else {
        config_fields(b, r, a, &d);
    }
    sb_close(b, '}');
}

static void make_generation_config(sb_t *b, rd_t *r) {
    sb_open(b, '{');
    unsigned s = u8(r);
    if (s >= 30) {
        sb_key(b, "eos_token_id");
        if (s < 120) sb_add(b, "%u", u8(r) % 16);
        else if (s < 200) sb_add(b, "[%u,%u,%u,%u,%u,%u,%u,%u,%u,%u]", u8(r) % 16, u8(r) % 16, u8(r) % 16, u8(r) % 16,
                                 u8(r) % 16, u8(r) % 16, u8(r) % 16, u8(r) % 16, u8(r) % 16, u8(r) % 16);
        else sb_add(b, "%s", specials[u8(r) % NSPECIAL]);
    }
    put_int(b, r, "bos_token_id", (long)(u8(r) % 16));
    PICK(b, r, "max_new_tokens", "32", "-1");
    sb_close(b, '}');
}

/* ---- the tensors a config implies --------------------------------------------------------- */

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
} tensor_t;

typedef struct {
    tensor_t *t;
    int n;
    int64_t elems;
    int over; /* more than MAX_TENSORS tensors or MAX_ELEMS elements */
} tlist_t;

static void t_add(tlist_t *l, const char *prefix, const char *name, int64_t r0, int64_t c0) {
    if (l->n >= MAX_TENSORS) {
        l->over = 1;
        return;
    }
    tensor_t *t = &l->t[l->n++];
    snprintf(t->name, sizeof t->name, "%s%s", prefix, name);
    t->ndim = c0 ? 2 : 1;
    t->shape[0] = r0, t->shape[1] = c0;
    int64_t e = c0 ? r0 * c0 : r0;
    if (e < 0 || e > MAX_ELEMS || l->elems + e > MAX_ELEMS) l->over = 1;
    else l->elems += e;
}

/* A field as seer would read it: 1 and *out set when a whole number in [0, 2^24], 0 when absent
 * or null (*out = dflt), -1 otherwise. */
static int gi(const cJSON *o, const char *k, int64_t *out, int64_t dflt) {
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    *out = dflt;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > (double)(1 << 24))
        return -1;
    *out = (int64_t)v->valuedouble;
    return 1;
}
/* A boolean: its value, dflt when absent or null, -1 when of another type. */
static int gb(const cJSON *o, const char *k, int dflt) {
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsBool(v)) return -1;
    return cJSON_IsTrue(v);
}

/* Gemma 3 multimodal: the text model's config as config.c flattens it (text_config, then the
 * top level, then Gemma3TextConfig's defaults). Returns a new object. */
static cJSON *flatten_mm(const cJSON *top) {
    static const char *const defaults[][2] = {
        {"vocab_size", "262208"}, {"hidden_size", "2304"}, {"intermediate_size", "9216"}, {"num_hidden_layers", "26"},
        {"num_attention_heads", "8"}, {"num_key_value_heads", "4"}, {"head_dim", "256"},
    };
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(top, "text_config");
    cJSON *o = cJSON_IsObject(tc) ? cJSON_Duplicate(tc, 1) : cJSON_CreateObject();
    const cJSON *e;
    cJSON_ArrayForEach(e, top) if (e->string && !cJSON_GetObjectItemCaseSensitive(o, e->string))
        cJSON_AddItemToObject(o, e->string, cJSON_Duplicate(e, 1));
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        if (!cJSON_GetObjectItemCaseSensitive(o, defaults[i][0]))
            cJSON_AddItemToObject(o, defaults[i][0], cJSON_Parse(defaults[i][1]));
    return o;
}

/* config.c's GPT-2 aliases: the Llama name when present, else the GPT-2 one. */
static int gi_alias(const cJSON *o, const char *k, const char *alias, int64_t *out, int64_t dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v && alias) {
        const cJSON *al = cJSON_GetObjectItemCaseSensitive(o, alias);
        if (al && !cJSON_IsNull(al)) return gi(o, alias, out, dflt);
    }
    return gi(o, k, out, dflt);
}

/* Fills l with the tensors config c implies for architecture a (names under the Gemma 3
 * multimodal prefixes when mm). Returns -1 when a size is not a clean number (then the loader
 * refuses the config whatever the checkpoint holds). */
static int derive(const cJSON *c, int a, int mm_style, int gpt2_prefix, tlist_t *l) {
    int64_t D, I, V, L, H, KH, hd, P;
    if (gi_alias(c, "hidden_size", "n_embd", &D, 0) <= 0 || gi(c, "vocab_size", &V, 0) <= 0 ||
        gi_alias(c, "num_hidden_layers", "n_layer", &L, 0) <= 0 || gi_alias(c, "num_attention_heads", "n_head", &H, 0) <= 0)
        return -1;
    int ri = gi_alias(c, "intermediate_size", "n_inner", &I, 0);
    if (ri == 0) {
        const cJSON *ne = cJSON_GetObjectItemCaseSensitive(c, "n_embd");
        if (!cJSON_IsNumber(ne) || ne->valuedouble != floor(ne->valuedouble) || ne->valuedouble < 0 ||
            ne->valuedouble > (double)(1 << 20))
            return -1;
        I = 4 * (int64_t)ne->valuedouble;
    } else if (ri < 0) {
        return -1;
    }
    if (gi(c, "num_key_value_heads", &KH, H) < 0 || gi(c, "head_dim", &hd, H ? D / H : 0) < 0 ||
        gi_alias(c, "max_position_embeddings", "n_positions", &P, 2048) < 0)
        return -1;
    if (!D || !I || !V || !L || !H || !KH || !hd || !P) return -1;
    int64_t qd = H * hd, kvd = KH * hd;
    char name[96];
    if (is_llama_family(a)) {
        int tie = gb(c, "tie_word_embeddings", 0), ab = gb(c, "attention_bias", 0), mb = gb(c, "mlp_bias", 0);
        if (tie < 0 || ab < 0 || mb < 0) return -1;
        int qkv_bias = a == A_QWEN2 ? 1 : (a == A_MISTRAL || a == A_PHI3) ? 0 : ab;
        int o_bias = (a == A_QWEN2 || a == A_MISTRAL || a == A_PHI3) ? 0 : ab;
        int mlp_bias = (a == A_LLAMA || a == A_GRANITE) ? mb : 0;
        t_add(l, "", "model.embed_tokens.weight", V, D);
        t_add(l, "", "model.norm.weight", D, 0);
        if (!tie) t_add(l, "", "lm_head.weight", V, D);
        for (int64_t i = 0; i < L && !l->over; i++) {
#define LT(fmt, r0, c0) (snprintf(name, sizeof name, "model.layers.%d." fmt, (int)i), t_add(l, "", name, (r0), (c0)))
            if (a != A_OLMO2) LT("input_layernorm.weight", D, 0);
            if (a == A_PHI3) {
                LT("self_attn.qkv_proj.weight", qd + 2 * kvd, D);
            } else {
                LT("self_attn.q_proj.weight", qd, D);
                LT("self_attn.k_proj.weight", kvd, D);
                LT("self_attn.v_proj.weight", kvd, D);
            }
            LT("self_attn.o_proj.weight", D, qd);
            if (qkv_bias) {
                LT("self_attn.q_proj.bias", qd, 0);
                LT("self_attn.k_proj.bias", kvd, 0);
                LT("self_attn.v_proj.bias", kvd, 0);
            }
            if (o_bias) LT("self_attn.o_proj.bias", D, 0);
            if (a == A_QWEN3) {
                LT("self_attn.q_norm.weight", hd, 0);
                LT("self_attn.k_norm.weight", hd, 0);
            }
            if (a == A_OLMO2) {
                LT("self_attn.q_norm.weight", qd, 0);
                LT("self_attn.k_norm.weight", kvd, 0);
                LT("post_feedforward_layernorm.weight", D, 0);
            }
            LT("post_attention_layernorm.weight", D, 0);
            if (a == A_PHI3) {
                LT("mlp.gate_up_proj.weight", 2 * I, D);
            } else {
                LT("mlp.gate_proj.weight", I, D);
                LT("mlp.up_proj.weight", I, D);
            }
            LT("mlp.down_proj.weight", D, I);
            if (mlp_bias) {
                LT("mlp.gate_proj.bias", I, 0);
                LT("mlp.up_proj.bias", I, 0);
                LT("mlp.down_proj.bias", D, 0);
            }
#undef LT
        }
    } else if (is_gemma(a)) {
        int tie = gb(c, "tie_word_embeddings", 1), ab = gb(c, "attention_bias", 0);
        if (tie < 0 || ab < 0) return -1;
        int v = a == A_GEMMA ? 1 : a == A_GEMMA2 ? 2 : 3;
        const char *mp = a != A_GEMMA3MM ? "model." : mm_style ? "model.language_model." : "language_model.model.";
        const char *hp = a != A_GEMMA3MM ? "" : mm_style ? "" : "language_model.";
        t_add(l, mp, "embed_tokens.weight", V, D);
        t_add(l, mp, "norm.weight", D, 0);
        if (!tie) t_add(l, hp, "lm_head.weight", V, D);
        for (int64_t i = 0; i < L && !l->over; i++) {
#define LT(fmt, r0, c0) (snprintf(name, sizeof name, "layers.%d." fmt, (int)i), t_add(l, mp, name, (r0), (c0)))
            LT("input_layernorm.weight", D, 0);
            LT("self_attn.q_proj.weight", qd, D);
            LT("self_attn.k_proj.weight", kvd, D);
            LT("self_attn.v_proj.weight", kvd, D);
            LT("self_attn.o_proj.weight", D, qd);
            if (ab) {
                LT("self_attn.q_proj.bias", qd, 0);
                LT("self_attn.k_proj.bias", kvd, 0);
                LT("self_attn.v_proj.bias", kvd, 0);
                LT("self_attn.o_proj.bias", D, 0);
            }
            if (v == 3) {
                LT("self_attn.q_norm.weight", hd, 0);
                LT("self_attn.k_norm.weight", hd, 0);
            }
            LT("post_attention_layernorm.weight", D, 0);
            if (v > 1) {
                LT("pre_feedforward_layernorm.weight", D, 0);
                LT("post_feedforward_layernorm.weight", D, 0);
            }
            LT("mlp.gate_proj.weight", I, D);
            LT("mlp.up_proj.weight", I, D);
            LT("mlp.down_proj.weight", D, I);
#undef LT
        }
        if (a == A_GEMMA3MM) t_add(l, "", "vision_tower.patch.weight", 2, 0); /* skipped by the loader */
    } else if (a == A_GPT2) {
        int tie = gb(c, "tie_word_embeddings", 1);
        if (tie < 0) return -1;
        const char *p = gpt2_prefix ? "transformer." : "";
        t_add(l, p, "wte.weight", V, D);
        t_add(l, p, "wpe.weight", P, D);
        t_add(l, p, "ln_f.weight", D, 0);
        t_add(l, p, "ln_f.bias", D, 0);
        for (int64_t i = 0; i < L && !l->over; i++) {
#define LT(fmt, r0, c0) (snprintf(name, sizeof name, "h.%d." fmt, (int)i), t_add(l, p, name, (r0), (c0)))
            LT("ln_1.weight", D, 0);
            LT("ln_1.bias", D, 0);
            LT("attn.c_attn.weight", D, 3 * D);
            LT("attn.c_attn.bias", 3 * D, 0);
            LT("attn.c_proj.weight", D, D);
            LT("attn.c_proj.bias", D, 0);
            LT("ln_2.weight", D, 0);
            LT("ln_2.bias", D, 0);
            LT("mlp.c_fc.weight", D, I);
            LT("mlp.c_fc.bias", I, 0);
            LT("mlp.c_proj.weight", I, D);
            LT("mlp.c_proj.bias", D, 0);
#undef LT
        }
        if (!tie) t_add(l, "", "lm_head.weight", V, D);
    } else if (a == A_NEOX) {
        int tie = gb(c, "tie_word_embeddings", 0), ab = gb(c, "attention_bias", 1);
        if (tie < 0 || ab < 0) return -1;
        t_add(l, "", "gpt_neox.embed_in.weight", V, D);
        t_add(l, "", "gpt_neox.final_layer_norm.weight", D, 0);
        t_add(l, "", "gpt_neox.final_layer_norm.bias", D, 0);
        if (!tie) t_add(l, "", "embed_out.weight", V, D);
        for (int64_t i = 0; i < L && !l->over; i++) {
#define LT(fmt, r0, c0) (snprintf(name, sizeof name, "gpt_neox.layers.%d." fmt, (int)i), t_add(l, "", name, (r0), (c0)))
            LT("input_layernorm.weight", D, 0);
            LT("input_layernorm.bias", D, 0);
            LT("attention.query_key_value.weight", 3 * D, D);
            LT("attention.dense.weight", D, D);
            if (ab) {
                LT("attention.query_key_value.bias", 3 * D, 0);
                LT("attention.dense.bias", D, 0);
            }
            LT("post_attention_layernorm.weight", D, 0);
            LT("post_attention_layernorm.bias", D, 0);
            LT("mlp.dense_h_to_4h.weight", I, D);
            LT("mlp.dense_h_to_4h.bias", I, 0);
            LT("mlp.dense_4h_to_h.weight", D, I);
            LT("mlp.dense_4h_to_h.bias", D, 0);
#undef LT
        }
    }
    return 0;
}

/* ---- files -------------------------------------------------------------------------------- */

static char dir[256];

static void write_file(const char *name, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

static void remove_files(void) {
    static const char *const names[] = {"config.json", "generation_config.json", "model.safetensors"};
    char path[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
}

static void cleanup(void) {
    remove_files();
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/seer-fuzz-model.XXXXXX", base);
    if (!mkdtemp(dir)) abort();
    atexit(cleanup);
    return 0;
}

static uint16_t f32_to_half(float f, int bf16) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if (bf16) return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
    /* f16 of a small normal value (|f| in [2^-14, 2]): enough for these weights */
    uint32_t sign = (x >> 16) & 0x8000;
    int e = (int)((x >> 23) & 0xff) - 127 + 15;
    if (e <= 0) return (uint16_t)sign;
    return (uint16_t)(sign | (uint32_t)e << 10 | ((x >> 13) & 0x3ff));
}

/* The shape a tensor is written with: as derived (how 0 or 4), one row more (1), its dims
 * swapped or one fewer (2), flattened or given a second dim (3). */
static void shape_of(const tensor_t *t, unsigned how, int *nd, int64_t *s0, int64_t *s1) {
    *nd = t->ndim, *s0 = t->shape[0], *s1 = t->shape[1];
    if (how == 1) *s0 += 1;
    else if (how == 2 && *nd == 2) *s0 = t->shape[1], *s1 = t->shape[0];
    else if (how == 2) *s0 = *s0 > 1 ? *s0 - 1 : 2;
    else if (how == 3 && *nd == 2) *nd = 1, *s0 *= *s1;
    else if (how == 3) *nd = 2, *s1 = 1;
}

/* dtype: 0 F32, 1 BF16, 2 F16, 3 per tensor (the 4-byte ones first, so every tensor's data
 * stays on its element boundary). perturb: which tensor to damage (>= n: none) and how. */
static void write_safetensors(const tlist_t *l, int dtype, unsigned perturb, unsigned perturb_how) {
    static const char *const dn[] = {"F32", "BF16", "F16", "I32"};
    static const int ds[] = {4, 2, 2, 4};
    int n = l->n;
    int *dt = malloc(((size_t)n + 1) * sizeof *dt);
    int *order = malloc(((size_t)n + 1) * sizeof *order);
    if (!dt || !order) abort();
    int k = 0;
    for (int i = 0; i < n; i++) dt[i] = dtype < 3 ? dtype : (int)((i * 7 + dtype) % 3);
    int damaged = perturb < (unsigned)n ? (int)perturb : -1;
    if (damaged >= 0 && perturb_how % 5 == 4) dt[damaged] = 3; /* an integer dtype: refused */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            if ((ds[dt[i]] == 4) == (pass == 0)) order[k++] = i;
    sb_t h = {0};
    sb_open(&h, '{');
    if (perturb_how & 8) {
        sb_key(&h, "__metadata__");
        sb_add(&h, "{\"format\":\"pt\"}");
    }
    size_t off = 0;
    for (int j = 0; j < k; j++) {
        int i = order[j];
        if (i == damaged && perturb_how % 5 == 0) continue; /* dropped */
        int nd;
        int64_t s0, s1;
        shape_of(&l->t[i], i == damaged ? perturb_how % 5 : 0, &nd, &s0, &s1);
        const tensor_t *t = &l->t[i];
        size_t bytes = (size_t)ds[dt[i]] * (size_t)s0 * (size_t)(nd == 2 ? s1 : 1);
        sb_key(&h, t->name);
        if (nd == 2)
            sb_add(&h, "{\"dtype\":\"%s\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]}", dn[dt[i]], (long long)s0,
                   (long long)s1, off, off + bytes);
        else
            sb_add(&h, "{\"dtype\":\"%s\",\"shape\":[%lld],\"data_offsets\":[%zu,%zu]}", dn[dt[i]], (long long)s0, off,
                   off + bytes);
        off += bytes;
    }
    sb_close(&h, '}');
    while (h.len % 8) sb_add(&h, " ");
    size_t total = 8 + h.len + off;
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf) abort();
    uint64_t hl = h.len;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hl >> (8 * i));
    memcpy(buf + 8, h.s, h.len);
    /* small finite values, varied so the forward pass computes something */
    uint8_t *d = buf + 8 + h.len;
    size_t pos = 0;
    uint32_t seed = 12345;
    for (int j = 0; j < k; j++) {
        int i = order[j];
        if (i == damaged && perturb_how % 5 == 0) continue;
        int nd;
        int64_t s0, s1;
        shape_of(&l->t[i], i == damaged ? perturb_how % 5 : 0, &nd, &s0, &s1);
        size_t ne = (size_t)s0 * (size_t)(nd == 2 ? s1 : 1);
        for (size_t e = 0; e < ne; e++) {
            seed = seed * 1103515245u + 12345u;
            float v = (float)((int)((seed >> 16) % 33) - 16) * (1.0f / 64.0f);
            if (dt[i] == 0) memcpy(d + pos, &v, 4), pos += 4;
            else if (dt[i] == 3) { int32_t iv = (int32_t)(seed >> 20); memcpy(d + pos, &iv, 4); pos += 4; }
            else {
                uint16_t hv = f32_to_half(v, dt[i] == 1);
                memcpy(d + pos, &hv, 2), pos += 2;
            }
        }
    }
    write_file("model.safetensors", buf, total);
    free(buf);
    free(h.s);
    free(dt);
    free(order);
}

/* ---- running it --------------------------------------------------------------------------- */

static int trap_nan = -1;
/* FUZZ_MODEL_STATS=1: a line per input on stderr (architecture, whether the checkpoint fits the
 * config, what became of the load), 2: the config too; for checking how deep the inputs get */
static int stats = -1;

#define MUST_SAY(rc, err)                                                                      \
    do {                                                                                       \
        if ((rc) < 0 && !(err).msg[0]) {                                                       \
            fprintf(stderr, "fuzz_model_config: failure %d without a message at line %d\n", (rc), __LINE__); \
            __builtin_trap();                                                                  \
        }                                                                                      \
    } while (0)

static void check_finite(const float *x, size_t n, const char *what) {
    if (trap_nan <= 0) return;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            fprintf(stderr, "fuzz_model_config: non-finite %s[%zu] = %g\n", what, i, (double)x[i]);
            __builtin_trap();
        }
}

static void run_model(seer_model_t *m, rd_t *r, unsigned flags) {
    const seer_model_config_t *c = seer_model_config(m);
    /* an epsilon of 0 normalises a zero row to 0 / 0, in transformers too: not a finding */
    int saved_trap = trap_nan;
    if (c->rms_norm_eps == 0.f) trap_nan = 0;
    int V = c->vocab_size, D = c->hidden_size, L = c->num_layers;
    int np = 1 + (int)(u8(r) % 6);
    int cap = np + 1 + ((flags & 0x80) ? 40 : 0);
    int32_t toks[48];
    for (int i = 0; i < np; i++) {
        unsigned t = u8(r);
        toks[i] = t == 255 ? V : (int32_t)(t % (unsigned)V); /* 255: one id past the vocabulary, refused */
    }
    seer_err_t err = {0};
    seer_kv_cache_t *kv = NULL;
    int rc = seer_kv_cache_new(&kv, m, cap, &err);
    MUST_SAY(rc, err);
    if (rc < 0) {
        trap_nan = saved_trap;
        return;
    }
    float *logits = malloc((size_t)np * (size_t)V * sizeof(float));
    int want_hidden = (flags & 0x40) != 0;
    float *hidden = want_hidden ? malloc((size_t)(L + 1) * (size_t)np * (size_t)D * sizeof(float)) : NULL;
    if (!logits || (want_hidden && !hidden)) abort();
    err = (seer_err_t){0}; /* cleared before each call: a failure must say something of its own */
    rc = seer_model_forward_ex(m, kv, toks, np, logits, 1, hidden, &err);
    MUST_SAY(rc, err);
    if (rc == 0) {
        check_finite(logits, (size_t)np * (size_t)V, "prefill logits");
        int32_t t1 = (int32_t)(u8(r) % (unsigned)V);
        int next = -1;
        err = (seer_err_t){0};
        rc = seer_model_forward_next(m, kv, &t1, 1, &next, NULL, &err);
        MUST_SAY(rc, err);
        if (rc == 0 && (next < 0 || next >= V)) {
            fprintf(stderr, "fuzz_model_config: decode chose token %d outside [0, %d)\n", next, V);
            __builtin_trap();
        }
        if (hidden) {
            err = (seer_err_t){0};
            rc = seer_model_unembed(m, hidden + (size_t)L * (size_t)np * (size_t)D, np, logits, &err);
            MUST_SAY(rc, err);
        }
    }
    if (flags & 0x20) { /* two sequences in one batched pass, from fresh caches */
        seer_kv_cache_t *k2[2] = {NULL, NULL};
        err = (seer_err_t){0};
        int ok = seer_kv_cache_new(&k2[0], m, cap, &err) == 0 && seer_kv_cache_new(&k2[1], m, cap, &err) == 0;
        if (ok) {
            float *lg = malloc(2 * (size_t)V * sizeof(float));
            if (!lg) abort();
            seer_batch_seq_t seqs[2] = {{.cache = k2[0], .tokens = toks, .n = np, .logits = lg},
                                        {.cache = k2[1], .tokens = toks, .n = 1, .logits = lg + V}};
            err = (seer_err_t){0};
            rc = seer_model_forward_batch(m, seqs, 2, &err);
            MUST_SAY(rc, err);
            free(lg);
        } else {
            MUST_SAY(-1, err);
        }
        seer_kv_cache_free(k2[0]);
        seer_kv_cache_free(k2[1]);
    }
    free(hidden);
    free(logits);
    seer_kv_cache_free(kv);
    trap_nan = saved_trap;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    if (trap_nan < 0) {
        const char *e = getenv("FUZZ_MODEL_NAN");
        trap_nan = e && *e == '1';
        e = getenv("FUZZ_MODEL_STATS");
        stats = e ? atoi(e) : 0;
    }
    rd_t r = {data, size, 0};
    unsigned a = u8(&r) % (A_COUNT + 1);
    unsigned flags = u8(&r);
    remove_files();

    sb_t cfg = {0};
    const char *cfg_text;
    size_t cfg_len;
    rd_t tail = r;
    if (a == A_COUNT) {
        /* raw: the rest of the input is config.json; its model_type picks the tensors */
        cfg_text = (const char *)data + r.i;
        cfg_len = size - r.i;
        tail.i = tail.n; /* nothing left to read: defaults below */
    } else {
        make_config(&cfg, &r, (int)a);
        if (!cfg.s) return 0;
        cfg_text = cfg.s;
        cfg_len = cfg.len;
        tail = r;
    }
    write_file("config.json", cfg_text, cfg_len);

    if (flags & 1) {
        sb_t g = {0};
        make_generation_config(&g, &tail);
        write_file("generation_config.json", g.s, g.len);
        free(g.s);
    }

    /* the tensors the config implies */
    cJSON *j = cJSON_ParseWithLength(cfg_text, cfg_len);
    int arch = (int)a;
    if (a == A_COUNT) {
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
        arch = A_LLAMA;
        if (cJSON_IsString(mt))
            for (int i = 0; i < A_COUNT; i++)
                if (strcmp(mt->valuestring, arch_type[i]) == 0) arch = i;
    }
    cJSON *view = j;
    if (arch == A_GEMMA3MM && j) view = flatten_mm(j);
    tlist_t tl = {.t = malloc(MAX_TENSORS * sizeof(tensor_t))};
    if (!tl.t) abort();
    unsigned shape_byte = u8(&tail);
    int shapeable = view && derive(view, arch, shape_byte & 1, (shape_byte & 2) != 0, &tl) == 0;
    if (!shapeable || tl.over) {
        /* too big to write, or sizes seer must refuse: a small file that does not fit them */
        for (int i = 0; i < tl.n; i++) {
            if (tl.t[i].shape[0] > 3) tl.t[i].shape[0] = 3;
            if (tl.t[i].shape[1] > 3) tl.t[i].shape[1] = 3;
        }
        if (tl.n > 64) tl.n = 64;
        if (tl.n == 0) {
            snprintf(tl.t[0].name, sizeof tl.t[0].name, "model.embed_tokens.weight");
            tl.t[0].ndim = 2, tl.t[0].shape[0] = 1, tl.t[0].shape[1] = 1;
            tl.n = 1;
        }
    }
    unsigned pb = u8(&tail), ph = u8(&tail);
    write_safetensors(&tl, (int)((flags >> 2) & 3), pb >= 224 ? (pb * 7u + ph) % (unsigned)(tl.n ? tl.n : 1) : ~0u, ph);
    int tl_over = tl.over;
    free(tl.t);
    if (view != j) cJSON_Delete(view);
    cJSON_Delete(j);

    /* precision = "fast" on odd bytes: on bf16 weights (where this CPU has its kernels) the
     * linear layers round activations and the KV cache is bf16, which every attention path reads */
    int fast = (u8(&tail) & 1) != 0;
    seer_model_opts_t opts = {.threads = 1, .hidden = (flags & 0x10) != 0, .fast_bf16 = fast,
                              .weights = (flags & 2) ? SEER_WEIGHTS_MAPPED : SEER_WEIGHTS_MEMORY};
    seer_model_t *m = NULL;
    seer_err_t err = {0};
    int rc = seer_model_load(&m, dir, &opts, &err);
    MUST_SAY(rc, err);
    if (stats > 1) fprintf(stderr, "%.*s\n", (int)(cfg_len > 2000 ? 2000 : cfg_len), cfg_text);
    if (stats) fprintf(stderr, "stat [%s] %s %s\n", a == A_COUNT ? "raw" : arch_type[a], shapeable && !tl_over ? "fits" : "unfit",
                       rc == 0 ? "loaded" : err.msg);
    if (rc == 0) {
        run_model(m, &tail, flags);
        seer_model_free(m);
    }
    free(cfg.s);
    return 0;
}
