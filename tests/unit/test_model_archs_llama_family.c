/* The Llama-family architectures (llama, mistral, qwen2, qwen3) on the random-weight parity
 * models of tests/parity/models: incremental decoding through the KV cache, in chunks of
 * different sizes and past the sliding window, gives the logits of one full forward; missing
 * architecture-specific tensors are all named. (Parity with transformers itself is
 * tests/lua/test_parity.lua.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "model/model.h"
#include "test_files.h"

/* model.c refers to the architectures weakly, and unit tests link libseer.a without
 * --whole-archive, so strong references are what pull these objects in. */
struct seer_arch;
extern const struct seer_arch seer_arch_mistral, seer_arch_qwen2, seer_arch_qwen3;
__attribute__((used)) static const void *const linked_archs[] = {&seer_arch_mistral, &seer_arch_qwen2,
                                                                 &seer_arch_qwen3};

#define PARITY "tests/parity/models/"
#define NTOK 23 /* longer than the sliding windows (5) */

static void check_incremental(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, PARITY "%s", name);
    seer_err_t err;
    seer_model_t *m;
    cr_assert_eq(seer_model_load(&m, dir, NULL, &err), 0, "%s: %s", name, err.msg);
    const seer_model_config_t *c = seer_model_config(m);
    int V = c->vocab_size;
    int32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++) tok[i] = (int32_t)((i * 37 + 11) % V);
    float *full = malloc(sizeof(float) * NTOK * V), *step = malloc(sizeof(float) * NTOK * V);
    cr_assert(full && step);
    seer_kv_cache_t *kv;
    cr_assert_eq(seer_kv_cache_new(&kv, m, 64, &err), 0, "%s", err.msg);
    cr_assert_eq(seer_model_forward(m, kv, tok, NTOK, full, 1, &err), 0, "%s: %s", name, err.msg);
    seer_kv_cache_reset(kv);
    /* Chunks of 1, 3, 5 and 2 tokens, then one at a time. */
    static const int chunks[] = {1, 3, 5, 2};
    int pos = 0, ci = 0;
    while (pos < NTOK) {
        int k = ci < 4 ? chunks[ci++] : 1;
        if (k > NTOK - pos) k = NTOK - pos;
        cr_assert_eq(seer_model_forward(m, kv, tok + pos, k, step + (size_t)pos * V, 1, &err), 0, "%s: %s", name, err.msg);
        pos += k;
    }
    cr_assert_eq(seer_kv_cache_len(kv), NTOK);
    float worst = 0.f;
    for (size_t i = 0; i < (size_t)NTOK * V; i++) {
        float d = fabsf(full[i] - step[i]);
        if (d > worst) worst = d;
    }
    /* The full forward runs the prefill GEMM path (OpenBLAS), the cached steps the register-blocked
     * kernel: the same sums in a different order, so agreement is to the parity tolerance. */
    cr_expect(worst <= 1e-4f, "%s: incremental logits differ from the full forward by %g", name, worst);
    /* The last-token-only path agrees with the all-logits path. */
    float *last = malloc(sizeof(float) * V);
    cr_assert(last);
    seer_kv_cache_truncate(kv, NTOK - 1);
    cr_assert_eq(seer_model_forward(m, kv, tok + NTOK - 1, 1, last, 0, &err), 0, "%s", err.msg);
    for (int i = 0; i < V; i++) cr_expect(fabsf(last[i] - full[(size_t)(NTOK - 1) * V + i]) <= 1e-4f);
    free(last);
    free(full);
    free(step);
    seer_kv_cache_free(kv);
    seer_model_free(m);
}

Test(llama_family, llama_cache_matches_full_forward) { check_incremental("llama"); }
Test(llama_family, mistral_cache_matches_full_forward) { check_incremental("mistral"); }
Test(llama_family, qwen2_cache_matches_full_forward) { check_incremental("qwen2"); }
Test(llama_family, qwen3_cache_matches_full_forward) { check_incremental("qwen3"); }

/* A temporary model directory: `weights_of`'s model.safetensors (copied) under its
 * config.json with some fields replaced. Returns the directory (caller frees). */
static char *retyped(const char *weights_of, const char *model_type, int attention_bias) {
    char tmpl[] = "/tmp/seer_archs_XXXXXX";
    char *d = strdup(mkdtemp(tmpl));
    char src[1024], dst[512];
    snprintf(src, sizeof src, PARITY "%s/config.json", weights_of);
    FILE *f = fopen(src, "rb");
    cr_assert_not_null(f);
    static char buf[1 << 14];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j);
    cJSON_ReplaceItemInObject(j, "model_type", cJSON_CreateString(model_type));
    cJSON_DeleteItemFromObject(j, "attention_bias");
    cJSON_AddBoolToObject(j, "attention_bias", attention_bias);
    char *text = cJSON_Print(j);
    snprintf(dst, sizeof dst, "%s/config.json", d);
    f = fopen(dst, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    free(text);
    cJSON_Delete(j);
    char cwd[512];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    snprintf(src, sizeof src, "%s/" PARITY "%s/model.safetensors", cwd, weights_of);
    snprintf(dst, sizeof dst, "%s/model.safetensors", d);
    copy_file(src, dst);
    return d;
}

static void remove_dir(char *d) {
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", d);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    unlink(p);
    rmdir(d);
    free(d);
}

static void expect_missing(const char *weights_of, const char *model_type, int attention_bias, const char *const *names) {
    char *d = retyped(weights_of, model_type, attention_bias);
    seer_model_t *m = NULL;
    seer_err_t err;
    cr_expect_neq(seer_model_load(&m, d, NULL, &err), 0, "%s on %s's weights loaded", model_type, weights_of);
    cr_expect_null(m);
    cr_expect(strstr(err.msg, "lacks tensors") != NULL, "%s", err.msg);
    for (int i = 0; names[i]; i++) cr_expect(strstr(err.msg, names[i]) != NULL, "%s not named in: %s", names[i], err.msg);
    remove_dir(d);
}

Test(llama_family, qwen2_without_biases_names_them) {
    static const char *const names[] = {"model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.bias",
                                        "model.layers.2.self_attn.v_proj.bias", NULL};
    expect_missing("qwen3", "qwen2", 0, names);
}

Test(llama_family, qwen3_without_qk_norms_names_them) {
    static const char *const names[] = {"model.layers.0.self_attn.q_norm.weight", "model.layers.2.self_attn.k_norm.weight",
                                        NULL};
    expect_missing("mistral", "qwen3", 0, names);
}

Test(llama_family, qwen3_attention_bias_needs_the_o_bias) {
    static const char *const names[] = {"model.layers.1.self_attn.o_proj.bias", "model.layers.1.self_attn.q_proj.bias",
                                        NULL};
    expect_missing("qwen3", "qwen3", 1, names);
}

Test(llama_family, mistral_ignores_qwen_tensors_it_does_not_use) {
    /* qwen3's checkpoint has every tensor Mistral needs (plus q_norm/k_norm). */
    char *d = retyped("qwen3", "mistral", 0);
    seer_model_t *m = NULL;
    seer_err_t err;
    cr_expect_eq(seer_model_load(&m, d, NULL, &err), 0, "%s", err.msg);
    seer_model_free(m);
    remove_dir(d);
}
