/* The CPU model runtime against the real stories260K Llama: golden logits (an independent
 * float64 reference), the 120-token greedy continuation, KV-cache consistency, thread-count
 * independence, sampling, and the errors for bad model directories. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "model/model.h"
#include "model/model_private.h" /* seer_k_gemm_min_override */
#include "test_files.h"

#define MODEL_DIR "tests/fixtures/models/stories260K"

static cJSON *golden(void) {
    FILE *f = fopen(MODEL_DIR "/golden/golden.json", "rb");
    cr_assert_not_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j);
    return j;
}

static int ids_of(const cJSON *arr, int32_t *out, int max) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        cr_assert(n < max);
        out[n++] = (int32_t)e->valuedouble;
    }
    return n;
}

static seer_model_t *load(int threads) {
    seer_model_t *m;
    seer_err_t err;
    seer_model_opts_t o = {.threads = threads};
    int rc = seer_model_load(&m, MODEL_DIR, &o, &err);
    cr_assert_eq(rc, 0, "%s", err.msg);
    return m;
}

Test(model, config_and_counts) {
    seer_model_t *m = load(1);
    const seer_model_config_t *c = seer_model_config(m);
    cr_assert_str_eq(c->model_type, "llama");
    cr_assert_eq(c->hidden_size, 64);
    cr_assert_eq(c->num_layers, 5);
    cr_assert_eq(c->num_kv_heads, 4);
    cr_assert_eq(c->head_dim, 8);
    cr_assert_eq(c->bos_token_id, 1);
    cr_assert_eq(c->num_eos, 1);
    cr_assert_eq(c->eos_token_ids[0], 2);
    cr_assert(c->tie_word_embeddings);
    cr_assert_eq(seer_model_param_count(m), 260032);
    cr_assert_eq(seer_model_weight_bytes(m), 260032 * 4);
    seer_model_free(m);
}

Test(model, golden_logits_within_1e4) {
    cJSON *g = golden();
    int32_t ids[16];
    int n = ids_of(cJSON_GetObjectItem(g, "prompt_ids_with_bos"), ids, 16);
    cr_assert_eq(n, 5);
    float want[5 * 512];
    FILE *f = fopen(MODEL_DIR "/golden/logits_once_upon_a_time_5x512_f32le.bin", "rb");
    cr_assert_not_null(f);
    cr_assert_eq(fread(want, sizeof(float), 5 * 512, f), 5 * 512);
    fclose(f);
    for (int threads = 1; threads <= 2; threads++) {
        seer_model_t *m = load(threads);
        seer_kv_cache_t *kv;
        seer_err_t err;
        cr_assert_eq(seer_kv_cache_new(&kv, m, 64, &err), 0, "%s", err.msg);
        float got[5 * 512];
        cr_assert_eq(seer_model_forward(m, kv, ids, n, got, 1, &err), 0, "%s", err.msg);
        float worst = 0;
        for (int i = 0; i < 5 * 512; i++) worst = fmaxf(worst, fabsf(got[i] - want[i]));
        cr_assert(worst <= 1e-4f, "threads=%d: max abs diff %g", threads, worst);
        /* Token by token through the cache gives the same last row. */
        seer_kv_cache_reset(kv);
        float last[512];
        for (int i = 0; i < n; i++) cr_assert_eq(seer_model_forward(m, kv, ids + i, 1, last, 0, &err), 0, "%s", err.msg);
        worst = 0;
        for (int i = 0; i < 512; i++) worst = fmaxf(worst, fabsf(last[i] - want[4 * 512 + i]));
        cr_assert(worst <= 1e-4f, "incremental: max abs diff %g", worst);
        seer_kv_cache_free(kv);
        seer_model_free(m);
    }
    cJSON_Delete(g);
}

Test(model, greedy_120_tokens_match) {
    cJSON *g = golden();
    int32_t ids[512];
    int n = ids_of(cJSON_GetObjectItem(g, "prompt_ids_with_bos"), ids, 512);
    int32_t want[256];
    int nw = ids_of(cJSON_GetObjectItem(g, "greedy_new_ids"), want, 256);
    cr_assert_eq(nw, 120);
    seer_model_t *m = load(0);
    seer_kv_cache_t *kv;
    seer_err_t err;
    cr_assert_eq(seer_kv_cache_new(&kv, m, 256, &err), 0);
    float logits[512];
    seer_sampler_opts_t o = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    seer_rng_t rng;
    seer_rng_seed(&rng, 0);
    cr_assert_eq(seer_model_forward(m, kv, ids, n, logits, 0, &err), 0, "%s", err.msg);
    for (int i = 0; i < nw; i++) {
        int32_t next = seer_sample(logits, 512, ids, n, &o, &rng);
        cr_assert_eq(next, want[i], "token %d: got %d, want %d", i, next, want[i]);
        ids[n++] = next;
        cr_assert_eq(seer_model_forward(m, kv, &next, 1, logits, 0, &err), 0, "%s", err.msg);
    }
    seer_kv_cache_free(kv);
    seer_model_free(m);
    cJSON_Delete(g);
}

Test(model, seeded_sampling_is_reproducible_and_thread_independent) {
    int32_t seqs[2][40];
    for (int threads = 1; threads <= 2; threads++) {
        seer_model_t *m = load(threads);
        seer_kv_cache_t *kv;
        seer_err_t err;
        cr_assert_eq(seer_kv_cache_new(&kv, m, 64, &err), 0);
        int32_t ids[64] = {1, 403, 407, 261, 378};
        int n = 5;
        float logits[512];
        seer_sampler_opts_t o = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.0f,
                                 .repetition_penalty = 1.1f};
        seer_rng_t rng;
        seer_rng_seed(&rng, 1234);
        cr_assert_eq(seer_model_forward(m, kv, ids, n, logits, 0, &err), 0);
        for (int i = 0; i < 40; i++) {
            int32_t next = seer_sample(logits, 512, ids, n, &o, &rng);
            cr_assert(next >= 0 && next < 512);
            seqs[threads - 1][i] = next;
            ids[n++] = next;
            if (n >= 64) break;
            cr_assert_eq(seer_model_forward(m, kv, &next, 1, logits, 0, &err), 0);
        }
        seer_kv_cache_free(kv);
        seer_model_free(m);
    }
    cr_assert_arr_eq(seqs[0], seqs[1], sizeof seqs[0]);
}

Test(sample, filters) {
    seer_rng_t rng;
    seer_rng_seed(&rng, 7);
    float l[4] = {1.0f, 3.0f, 3.0f, -2.0f};
    seer_sampler_opts_t greedy = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    cr_assert_eq(seer_sample(l, 4, NULL, 0, &greedy, &rng), 1, "ties go to the lowest id");
    /* top_k = 1 is greedy whatever the temperature. */
    seer_sampler_opts_t k1 = {.temperature = 5, .top_k = 1, .top_p = 1, .repetition_penalty = 1};
    for (int i = 0; i < 20; i++) {
        float m[4] = {0.5f, 0.1f, 2.0f, 0.0f};
        cr_assert_eq(seer_sample(m, 4, NULL, 0, &k1, &rng), 2);
    }
    /* The repetition penalty divides positive logits and multiplies negative ones. */
    float r[3] = {2.0f, -1.0f, 1.5f};
    int32_t hist[3] = {0, 1, 0};
    seer_sampler_opts_t rp = {.temperature = 0, .top_p = 1, .repetition_penalty = 2.0f};
    cr_assert_eq(seer_sample(r, 3, hist, 3, &rp, &rng), 2);
    cr_assert_float_eq(r[0], 1.0f, 1e-6);
    cr_assert_float_eq(r[1], -2.0f, 1e-6);
    /* min_p keeps only tokens with at least min_p of the top probability. */
    seer_sampler_opts_t mp = {.temperature = 1, .top_p = 1, .min_p = 0.5f, .repetition_penalty = 1};
    for (int i = 0; i < 50; i++) {
        float m[3] = {0.0f, 10.0f, 9.9f};
        int t = seer_sample(m, 3, NULL, 0, &mp, &rng);
        cr_assert(t == 1 || t == 2);
    }
}

/* Greedy's scan (vectorised where the CPU allows) against the scalar rule it must keep: the
 * first index of the largest logit (x > best: -0 and +0 tie), nothing when a logit is NaN or
 * +inf or all are -inf; lengths around the vector width, ties, special values anywhere. */
static int greedy_ref(const float *l, int n) {
    int best = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(l[i]) || l[i] == INFINITY) return SEER_SAMPLE_NONFINITE;
        if (l[i] > l[best]) best = i;
    }
    return l[best] == -INFINITY ? SEER_SAMPLE_NONFINITE : best;
}

Test(sample, greedy_scan_matches_the_scalar_rule) {
    seer_rng_t rng;
    seer_rng_seed(&rng, 11);
    seer_sampler_opts_t greedy = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    static const int lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100, 32000, 32003};
    static float l[32003], copy[32003];
    int checked = 0;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (int trial = 0; trial < 60; trial++) {
            int n = lens[li];
            for (int i = 0; i < n; i++) /* few distinct values: many ties */
                l[i] = (float)((int)(seer_rng_uniform(&rng) * 7) - 3) * (trial % 2 ? 0.5f : 1.0f);
            int kind = trial % 10, at = (int)(seer_rng_uniform(&rng) * n);
            if (kind == 1) l[at] = NAN;
            if (kind == 2) l[at] = INFINITY;
            if (kind == 3) l[at] = -INFINITY;
            if (kind == 4)
                for (int i = 0; i < n; i++) l[i] = -INFINITY;
            if (kind == 5)
                for (int i = 0; i < n; i++) l[i] = (i % 3) ? -0.0f : 0.0f;
            if (kind == 6) l[n - 1] = 100.0f; /* the maximum in the tail */
            if (kind == 7) l[0] = 100.0f, l[n - 1] = 100.0f;
            if (kind == 8) {
                for (int i = 0; i < n; i++) l[i] = -INFINITY;
                l[at] = -1e30f;
            }
            memcpy(copy, l, sizeof(float) * (size_t)n);
            int want = greedy_ref(l, n), got = seer_sample(l, n, NULL, 0, &greedy, &rng);
            cr_assert_eq(got, want, "length %d, case %d: %d, the scalar rule gives %d", n, kind, got, want);
            cr_assert_arr_eq(l, copy, sizeof(float) * (size_t)n, "greedy changed the logits");
            checked++;
        }
    cr_assert_eq(checked, 13 * 60);
}

/* The sampler as it was before its candidates were radix-sorted: qsort with a comparator
 * (logit descending, ties by id), then the same probabilities, filters and walk. The fast sort
 * must give its picks exactly, so that seeded generations are what they were. */
typedef struct {
    float logit;
    int id;
} ref_cand;
static int ref_desc(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}
static int sample_ref(const float *logits, int vocab, const seer_sampler_opts_t *o, seer_rng_t *rng) {
    int finite = 0;
    for (int i = 0; i < vocab; i++) finite |= logits[i] != -INFINITY;
    if (!finite) return SEER_SAMPLE_NONFINITE; /* nothing to choose (the test makes no NaN) */
    ref_cand *c = malloc((size_t)vocab * sizeof *c);
    double *p = malloc((size_t)vocab * sizeof *p);
    cr_assert(c && p);
    for (int i = 0; i < vocab; i++) c[i] = (ref_cand){logits[i], i};
    qsort(c, (size_t)vocab, sizeof *c, ref_desc);
    int n = vocab;
    if (o->top_k > 0 && o->top_k < n) n = o->top_k;
    double mx = c[0].logit, t = o->temperature, sum = 0;
    for (int i = 0; i < n; i++) sum += (p[i] = exp(((double)c[i].logit - mx) / t));
    for (int i = 0; i < n; i++) p[i] /= sum;
    if (o->top_p >= 0 && o->top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += p[i];
            if (cum >= o->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (o->min_p > 0) {
        double thr = o->min_p * p[0];
        int keep = 1;
        while (keep < n && p[keep] >= thr) keep++;
        n = keep;
    }
    double total = 0;
    for (int i = 0; i < n; i++) total += p[i];
    double u = seer_rng_uniform(rng) * total, acc = 0;
    int pick = c[n - 1].id;
    for (int i = 0; i < n; i++) {
        acc += p[i];
        if (u < acc) {
            pick = c[i].id;
            break;
        }
    }
    free(p);
    free(c);
    return pick;
}

Test(sample, picks_are_the_comparator_sorts_exactly) {
    seer_rng_t gen, a, b;
    seer_rng_seed(&gen, 5);
    static const int lens[] = {1, 2, 3, 7, 33, 2048, 2049, 32000, 32003};
    static float l[32003], copy[32003];
    int checked = 0, ties = 0;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        int n = lens[li], trials = n > 4096 ? 40 : 300;
        for (int trial = 0; trial < trials; trial++) {
            int kind = trial % 6;
            for (int i = 0; i < n; i++) {
                double u = seer_rng_uniform(&gen);
                if (kind == 0) l[i] = (float)(u * 40 - 20);                    /* spread */
                else if (kind == 1) l[i] = (float)((int)(u * 5) - 2);          /* few values: ties */
                else if (kind == 2) l[i] = (u < 0.5 ? -0.0f : 0.0f);           /* -0 and +0 tie */
                else if (kind == 3) l[i] = u < 0.3 ? -INFINITY : (float)(u * 8); /* masked tokens */
                else if (kind == 4) l[i] = (float)(u * 1e-6) + 1000.0f;        /* close and large */
                else l[i] = (float)((u - 0.5) * 1e30);                         /* huge spread */
            }
            if (kind == 1 || kind == 2) ties++;
            static const float temps[] = {0.05f, 0.7f, 1.0f, 2.5f};
            static const int ks[] = {0, 1, 40};
            static const float ps[] = {1.0f, 0.9f, 0.0f, 0.5f};
            static const float mps[] = {0.0f, 0.05f};
            seer_sampler_opts_t o = {.temperature = temps[trial % 4], .top_k = ks[(trial / 4) % 3],
                                     .top_p = ps[(trial / 12) % 4], .min_p = mps[(trial / 48) % 2],
                                     .repetition_penalty = 1};
            for (int draw = 0; draw < 5; draw++) {
                uint64_t seed = (uint64_t)(trial * 16 + draw);
                seer_rng_seed(&a, seed);
                seer_rng_seed(&b, seed);
                memcpy(copy, l, sizeof(float) * (size_t)n);
                int want = sample_ref(l, n, &o, &a), got = seer_sample(copy, n, NULL, 0, &o, &b);
                cr_assert_eq(got, want, "length %d, trial %d (values %d, T %g, top_k %d, top_p %g, min_p %g), draw %d: %d, the comparator sort's sampler %d",
                             n, trial, kind, (double)o.temperature, o.top_k, (double)o.top_p, (double)o.min_p, draw, got, want);
                checked++;
            }
        }
    }
    cr_assert(checked > 10000 && ties > 100);
}

Test(sample, tiny_temperatures_tend_to_greedy_and_nonfinite_logits_choose_nothing) {
    seer_rng_t rng;
    seer_rng_seed(&rng, 11);
    /* logit / temperature overflowed float to infinity: every probability was NaN and the
     * least likely token was picked */
    float temps[] = {1e-30f, 1e-38f, 1e-40f, 1e-45f};
    for (int t = 0; t < 4; t++) {
        for (int i = 0; i < 20; i++) {
            float l[4] = {2.0f, 9.5f, 9.0f, -3.0f};
            seer_sampler_opts_t o = {.temperature = temps[t], .top_p = 1, .repetition_penalty = 1};
            cr_assert_eq(seer_sample(l, 4, NULL, 0, &o, &rng), 1, "temperature %g", (double)temps[t]);
        }
    }
    /* at temperature 1 both of the close pair come up */
    int seen[4] = {0};
    for (int i = 0; i < 200; i++) {
        float l[4] = {2.0f, 9.5f, 9.0f, -3.0f};
        seer_sampler_opts_t o = {.temperature = 1, .top_p = 1, .repetition_penalty = 1};
        seen[seer_sample(l, 4, NULL, 0, &o, &rng)]++;
    }
    cr_assert(seen[1] > 80 && seen[2] > 40, "%d %d", seen[1], seen[2]);
    /* NaN or +inf anywhere, or nothing above -inf: no token, greedy or sampled */
    float bad[3][4] = {{1.0f, NAN, 0.0f, 0.0f}, {1.0f, 0.0f, INFINITY, 0.0f}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY}};
    for (int b = 0; b < 3; b++) {
        for (int t = 0; t < 2; t++) {
            float l[4];
            memcpy(l, bad[b], sizeof l);
            seer_sampler_opts_t o = {.temperature = t ? 0.8f : 0.0f, .top_p = 1, .repetition_penalty = 1};
            cr_assert_eq(seer_sample(l, 4, NULL, 0, &o, &rng), SEER_SAMPLE_NONFINITE, "case %d, temperature %d", b, t);
        }
    }
    /* -inf entries (stop tokens held back by min_new_tokens) are fine */
    float masked[3] = {-INFINITY, 0.5f, -INFINITY};
    seer_sampler_opts_t o = {.temperature = 1, .top_p = 1, .repetition_penalty = 1};
    cr_assert_eq(seer_sample(masked, 3, NULL, 0, &o, &rng), 1);
}

static char *tmpdir_with_config(const char *config_json) {
    char tmpl[] = "/tmp/seer-model-XXXXXX";
    char *d = strdup(mkdtemp(tmpl));
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/config.json", d);
    FILE *f = fopen(p, "w");
    fputs(config_json, f);
    fclose(f);
    return d;
}

static void rm_rf(const char *d) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    cr_assert_eq(system(cmd), 0);
}

Test(model_errors, missing_directory_and_file_instead_of_dir) {
    seer_model_t *m;
    seer_err_t err;
    cr_assert_eq(seer_model_load(&m, "/nonexistent/model", NULL, &err), SEER_ENOTFOUND);
    cr_assert(strstr(err.msg, "/nonexistent/model") != NULL, "%s", err.msg);
    cr_assert_eq(seer_model_load(&m, MODEL_DIR "/config.json", NULL, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "not a directory") != NULL, "%s", err.msg);
}

Test(model_errors, unsupported_architecture_lists_supported) {
    char *d = tmpdir_with_config("{\"model_type\": \"rwkv\", \"vocab_size\": 10, \"hidden_size\": 8, "
                                 "\"intermediate_size\": 16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2}");
    seer_model_t *m;
    seer_err_t err;
    cr_assert_eq(seer_model_load(&m, d, NULL, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "\"rwkv\" is not supported") && strstr(err.msg, "llama"), "%s", err.msg);
    rm_rf(d);
    free(d);
}

Test(model_errors, malformed_config) {
    seer_model_t *m;
    seer_err_t err;
    char *d = tmpdir_with_config("{\"model_type\": \"llama\", \"vocab_size\": 10");
    cr_assert_eq(seer_model_load(&m, d, NULL, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "config.json: invalid JSON") != NULL, "%s", err.msg);
    rm_rf(d);
    free(d);
    d = tmpdir_with_config("{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8, "
                           "\"intermediate_size\": 16, \"num_hidden_layers\": -1, \"num_attention_heads\": 2}");
    cr_assert_eq(seer_model_load(&m, d, NULL, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "\"num_hidden_layers\" must be an integer") != NULL, "%s", err.msg);
    rm_rf(d);
    free(d);
    d = tmpdir_with_config("{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8, "
                           "\"intermediate_size\": 16, \"num_attention_heads\": 2}");
    cr_assert_eq(seer_model_load(&m, d, NULL, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "missing required field \"num_hidden_layers\"") != NULL, "%s", err.msg);
    rm_rf(d);
    free(d);
}

/* stories260K's weights with a config that wants more layers: every missing tensor is listed. */
Test(model_errors, missing_tensors_are_listed) {
    FILE *f = fopen(MODEL_DIR "/config.json", "rb");
    char cfg[4096];
    size_t n = fread(cfg, 1, sizeof cfg - 1, f);
    fclose(f);
    cfg[n] = '\0';
    char *p = strstr(cfg, "\"num_hidden_layers\": 5");
    cr_assert_not_null(p);
    p[strlen("\"num_hidden_layers\": ")] = '6';
    char *d = tmpdir_with_config(cfg);
    char link[PATH_MAX], target[PATH_MAX];
    snprintf(link, sizeof link, "%s/model.safetensors", d);
    cr_assert_not_null(realpath(MODEL_DIR "/model.safetensors", target));
    copy_file(target, link);
    seer_model_t *m;
    seer_err_t err;
    cr_assert_eq(seer_model_load(&m, d, NULL, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "lacks tensors") && strstr(err.msg, "model.layers.5.input_layernorm.weight") &&
                  strstr(err.msg, "model.layers.5.mlp.down_proj.weight"),
              "%s", err.msg);
    rm_rf(d);
    free(d);
}

Test(model_errors, bad_tokens_and_full_cache) {
    seer_model_t *m = load(1);
    seer_kv_cache_t *kv;
    seer_err_t err;
    cr_assert_eq(seer_kv_cache_new(&kv, m, 4, &err), 0);
    int32_t bad[2] = {1, 512};
    cr_assert_eq(seer_model_forward(m, kv, bad, 2, NULL, 0, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "token id 512") != NULL, "%s", err.msg);
    int32_t ok[5] = {1, 2, 3, 4, 5};
    cr_assert_eq(seer_model_forward(m, kv, ok, 5, NULL, 0, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "exceed the cache size 4") != NULL, "%s", err.msg);
    seer_kv_cache_free(kv);
    seer_model_free(m);
}

/* seer_model_forward_batch: logits equal to each sequence alone (the Lua tests cover every
 * architecture), and the errors: an empty batch, a shared cache, a bad sequence (named by its
 * number), each leaving every cache as it was. */
Test(model_batch, equals_alone_and_errors) {
    seer_model_t *m = load(2);
    seer_err_t err;
    int32_t a[3] = {1, 403, 407}, b[20], c[1] = {1};
    for (int i = 0; i < 20; i++) b[i] = (int32_t)((i * 37 + 5) % 500 + 1);
    int32_t *toks[3] = {a, b, c};
    int ns[3] = {3, 20, 1};
    seer_kv_cache_t *kv[3];
    static float lg[3][20 * 512], alone[20 * 512];
    seer_batch_seq_t seqs[3];
    for (int s = 0; s < 3; s++) {
        cr_assert_eq(seer_kv_cache_new(&kv[s], m, 64, &err), 0);
        seqs[s] = (seer_batch_seq_t){.cache = kv[s], .tokens = toks[s], .n = ns[s], .logits = lg[s], .all_logits = 1};
    }
    cr_assert_eq(seer_model_forward_batch(m, seqs, 3, &err), 0, "%s", err.msg);
    for (int s = 0; s < 3; s++) {
        cr_assert_eq(seer_kv_cache_len(kv[s]), ns[s]);
        seer_kv_cache_t *one;
        cr_assert_eq(seer_kv_cache_new(&one, m, 32, &err), 0);
        cr_assert_eq(seer_model_forward(m, one, toks[s], ns[s], alone, 1, &err), 0);
        cr_assert(memcmp(alone, lg[s], sizeof(float) * 512 * (size_t)ns[s]) == 0, "sequence %d differs from alone", s);
        seer_kv_cache_free(one);
    }
    cr_assert_eq(seer_model_forward_batch(m, seqs, 0, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "empty batch") != NULL, "%s", err.msg);
    seqs[2].cache = kv[0];
    cr_assert_eq(seer_model_forward_batch(m, seqs, 3, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "sequences 1 and 3 of the batch share a KV cache") != NULL, "%s", err.msg);
    seqs[2].cache = kv[2];
    int32_t bad[2] = {1, 512};
    seqs[1].tokens = bad, seqs[1].n = 2;
    cr_assert_eq(seer_model_forward_batch(m, seqs, 3, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "sequence 2: token id 512") != NULL, "%s", err.msg);
    for (int s = 0; s < 3; s++) cr_assert_eq(seer_kv_cache_len(kv[s]), ns[s], "cache %d changed by a failed call", s);
    for (int s = 0; s < 3; s++) seer_kv_cache_free(kv[s]);
    seer_model_free(m);
}

/* A prompt that takes another's first rows (seer_model_prefix_rows) and runs its rest with paths =
 * its whole length gets, for every position of the rest (all_logits: the head's GEMM path
 * included), the whole pass's logits bit for bit: random pairs of lengths and shared beginnings,
 * at this CPU's GEMM crossing and with the GEMM path from 16 tokens. */
static int prefix_case(seer_model_t *m, int Ld, int Lt, int common, uint32_t *seed) {
    int V = seer_model_config(m)->vocab_size;
    int32_t a[320], b[320];
    for (int i = 0; i < 320; i++) {
        *seed = *seed * 1103515245u + 12345u;
        a[i] = 3 + (int32_t)((*seed >> 8) % (uint32_t)(V - 3));
        *seed = *seed * 1103515245u + 12345u;
        b[i] = i < common ? a[i] : 3 + (int32_t)((*seed >> 8) % (uint32_t)(V - 3));
    }
    int k = seer_model_prefix_rows(m, Ld, Lt, common);
    if (k == 0) return 0;
    cr_assert_eq(k % SEER_PREFIX_BLOCK, 0);
    cr_assert(k <= common && k < Lt && k <= Ld, "k = %d for %d, %d, %d", k, Ld, Lt, common);
    seer_err_t err;
    seer_kv_cache_t *d, *t, *w;
    float *want = malloc(sizeof(float) * (size_t)Lt * (size_t)V), *got = malloc(sizeof(float) * (size_t)(Lt - k) * (size_t)V);
    cr_assert(want && got);
    cr_assert_eq(seer_kv_cache_new(&d, m, Ld, &err), 0);
    cr_assert_eq(seer_kv_cache_new(&t, m, Lt, &err), 0);
    cr_assert_eq(seer_kv_cache_new(&w, m, Lt, &err), 0);
    cr_assert_eq(seer_model_forward(m, d, a, Ld, NULL, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(seer_model_forward(m, w, b, Lt, want, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(seer_kv_cache_copy_prefix(t, d, k, &err), 0, "%s", err.msg);
    seer_batch_seq_t q = {.cache = t, .tokens = b + k, .n = Lt - k, .logits = got, .all_logits = 1, .paths = Lt};
    cr_assert_eq(seer_model_forward_batch(m, &q, 1, &err), 0, "%s", err.msg);
    for (int r = 0; r < Lt - k; r++)
        cr_assert(memcmp(want + (size_t)(k + r) * (size_t)V, got + (size_t)r * (size_t)V, sizeof(float) * (size_t)V) == 0,
                  "donor %d, taker %d, %d alike, %d taken: position %d differs from the whole pass", Ld, Lt, common, k, k + r);
    seer_kv_cache_free(d);
    seer_kv_cache_free(t);
    seer_kv_cache_free(w);
    free(want);
    free(got);
    return 1;
}

Test(model_batch, prefix_rows_then_paths_equal_the_whole_pass) {
    seer_model_t *m = load(2);
    uint32_t seed = 5;
    for (int pass = 0; pass < 2; pass++) {
        int prev = seer_k_gemm_min_override(pass ? 16 : 0), shared = 0;
        for (int it = 0; it < 40; it++) {
            seed = seed * 1103515245u + 12345u;
            int Ld = 2 + (int)((seed >> 8) % 300);
            seed = seed * 1103515245u + 12345u;
            int Lt = 2 + (int)((seed >> 8) % 300), lo = Ld < Lt ? Ld : Lt;
            seed = seed * 1103515245u + 12345u;
            shared += prefix_case(m, Ld, Lt, (int)((seed >> 8) % (uint32_t)(lo + 1)), &seed);
        }
        /* the crossings: on both sides of 16 and of the GEMM threshold nothing is taken; on the
         * GEMM path a shared row lies in a whole sgemm tile of both calls (u rows) */
        cr_assert_eq(seer_model_prefix_rows(m, 15, 200, 15), 0);
        /* u: OpenBLAS's row period on this machine (0: none found, then nothing on the GEMM path) */
        int g = seer_model_gemm_min_tokens(m), u = seer_k_blas_row_period();
        cr_assert(u >= 0 && u <= 128, "OpenBLAS's row period: %d", u);
#define TILED(n) (u ? (n) / u * u : 0)
        if (g > 65 && g < 300) cr_assert_eq(seer_model_prefix_rows(m, g - 1, g, g - 1), 0);
        if (g < 300) cr_assert_eq(seer_model_prefix_rows(m, g + 64, g + 70, g + 64), TILED(g + 64) / 64 * 64);
        cr_assert_eq(seer_model_prefix_rows(m, 66, 64, 64), 0, "the rest keeps a token: 63 rows are not a block");
        cr_assert_eq(seer_model_prefix_rows(m, 66, 65, 64), g > 66 || TILED(65) >= 64 ? 64 : 0);
#undef TILED
        cr_assert_eq(seer_model_prefix_rows(m, 66, 65, 63), 0);
        if (u) cr_assert(shared >= 8, "only %d of 40 random cases shared anything", shared);
        seer_k_gemm_min_override(prev);
    }
    seer_model_free(m);
}

Test(model_batch, paths_are_refused_where_they_cannot_hold) {
    seer_model_t *m = load(1);
    seer_err_t err;
    seer_kv_cache_t *c;
    cr_assert_eq(seer_kv_cache_new(&c, m, 256, &err), 0);
    int32_t t[200];
    for (int i = 0; i < 200; i++) t[i] = 5 + i % 100;
    float *lg = malloc(sizeof(float) * 512);
    /* nothing cached: a rest must follow a block-aligned beginning */
    seer_batch_seq_t q = {.cache = c, .tokens = t, .n = 10, .logits = lg, .paths = 10};
    cr_assert_eq(seer_model_forward_batch(m, &q, 1, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "paths = 10") && strstr(err.msg, "multiple of 64"), "%s", err.msg);
    cr_assert_eq(seer_model_forward(m, c, t, 70, NULL, 0, &err), 0);
    q.paths = 80; /* 70 cached: not a block */
    cr_assert_eq(seer_model_forward_batch(m, &q, 1, &err), SEER_EINVAL);
    seer_kv_cache_truncate(c, 64);
    q.paths = 90; /* 64 + 10 is 74 */
    cr_assert_eq(seer_model_forward_batch(m, &q, 1, &err), SEER_EINVAL);
    cr_assert_eq(seer_kv_cache_len(c), 64, "a refused call adds nothing");
    seer_fwd_hooks_t hk = {.stop = 2};
    q.paths = 74;
    q.hk = &hk;
    cr_assert_eq(seer_model_forward_batch(m, &q, 1, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "stop_at_layer"), "%s", err.msg);
    q.hk = NULL;
    cr_assert_eq(seer_model_forward_batch(m, &q, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(seer_kv_cache_len(c), 74);
    free(lg);
    seer_kv_cache_free(c);
    seer_model_free(m);
}
