/* The CUDA backend on machines without a GPU: the driver loader (no driver, an old driver, a
 * failing cuInit, device listing), the kernels embedded by the build (every fatbin carries
 * sm_80 and sm_90 machine code and compute_90 PTX, and every kernel the runtime launches is in
 * it), and the model path up to the first kernel launch (weights uploaded in bf16, the
 * out-of-memory messages, the CPU fallback). The driver here is tests/unit/fake_libcuda.c, a
 * mock that keeps device memory in host memory and runs no kernels: what needs a real GPU is in
 * tests/unit/test_cuda_kernels.c and tests/gpu/, which skip without one. Each Criterion test
 * runs in its own process, so each can point SEER_LIBCUDA at its own driver before the first
 * call loads it. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cudrv.h"
#include "cuda/gpu_attn.h"
#include "cuda/gpu_model.h"
#include "model/model.h"

#define MODEL_DIR "tests/fixtures/models/stories260K"

static void use_fake(const char *devices, const char *memory, const char *version, const char *init) {
    char path[4096];
    const char *b = getenv("SEER_BUILD");
    snprintf(path, sizeof path, "%s/tests/libfakecuda.so", b && *b ? b : "build");
    cr_assert_eq(access(path, R_OK), 0, "%s is missing (make builds it with the unit tests)", path);
    setenv("SEER_LIBCUDA", path, 1);
    setenv("FAKE_CUDA_DEVICES", devices ? devices : "1", 1);
    if (memory) setenv("FAKE_CUDA_MEMORY", memory, 1);
    if (version) setenv("FAKE_CUDA_VERSION", version, 1);
    if (init) setenv("FAKE_CUDA_INIT", init, 1);
}

Test(cuda_driver, no_driver_means_no_gpu_and_says_why) {
    setenv("SEER_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    char why[512];
    cr_assert_eq(seer_cuda_device_count(why, sizeof why), 0);
    cr_assert(strstr(why, "no NVIDIA driver") && strstr(why, "could not be loaded"), "%s", why);
    seer_cuda_devinfo_t info;
    seer_err_t err;
    cr_assert_lt(seer_cuda_device_info(0, &info, &err), 0);
    cr_assert(strstr(err.msg, "no NVIDIA driver"), "%s", err.msg);
    seer_cuda_dev_t *d = NULL;
    cr_assert_lt(seer_cuda_open(&d, 0, &err), 0);
    cr_assert_null(d);
}

Test(cuda_driver, model_falls_back_to_the_cpu_with_one_line, .init = cr_redirect_stderr) {
    setenv("SEER_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    seer_model_t *m = NULL;
    seer_err_t err;
    seer_model_opts_t o = {.threads = 1, .device = "cuda:0"};
    cr_assert_eq(seer_model_load(&m, MODEL_DIR, &o, &err), 0, "%s", err.msg);
    char dev[32];
    cr_assert_str_eq(seer_model_device(m, dev, sizeof dev), "cpu");
    seer_model_t *m2 = NULL;
    cr_assert_eq(seer_model_load(&m2, MODEL_DIR, &o, &err), 0, "%s", err.msg);
    /* it still runs, on the CPU */
    seer_kv_cache_t *kv;
    cr_assert_eq(seer_kv_cache_new(&kv, m, 16, &err), 0);
    int32_t ids[3] = {1, 400, 500};
    int next = -1;
    cr_assert_eq(seer_model_forward_next(m, kv, ids, 3, &next, NULL, &err), 0, "%s", err.msg);
    cr_assert(next >= 0 && next < seer_model_config(m)->vocab_size);
    seer_kv_cache_free(kv);
    seer_model_free(m);
    seer_model_free(m2);
    fflush(stderr);
    /* said once per process, not once per model */
    cr_assert_stderr_eq_str(
        "seer: cuda:0: no NVIDIA driver (/nonexistent/libcuda.so.1 could not be loaded); running on the CPU\n");
}

Test(cuda_driver, bad_device_names_are_errors) {
    setenv("SEER_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:0x", "CUDA"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        seer_model_t *m = NULL;
        seer_err_t err;
        seer_model_opts_t o = {.threads = 1, .device = bad[i]};
        cr_assert_lt(seer_model_load(&m, MODEL_DIR, &o, &err), 0, "%s loaded", bad[i]);
        cr_assert(strstr(err.msg, "unknown device") && strstr(err.msg, "\"cuda:N\""), "%s", err.msg);
    }
}

Test(cuda_driver, lists_devices) {
    use_fake("2", NULL, NULL, NULL);
    char why[512];
    cr_assert_eq(seer_cuda_device_count(why, sizeof why), 2, "%s", why);
    seer_cuda_devinfo_t info;
    seer_err_t err;
    cr_assert_eq(seer_cuda_device_info(1, &info, &err), 0, "%s", err.msg);
    cr_assert_str_eq(info.name, "Fake H100 1");
    cr_assert_eq(info.cc_major, 9);
    cr_assert_eq(info.cc_minor, 0);
    cr_assert_eq(info.sm_count, 132);
    cr_assert_eq(info.total_bytes, (size_t)80 << 30);
    cr_assert_eq(info.free_bytes, (size_t)80 << 30);
    cr_assert_lt(seer_cuda_device_info(2, &info, &err), 0);
    cr_assert_str_eq(err.msg, "cuda:2 does not exist: this machine has 2 GPUs (cuda:0 .. cuda:1)");
    char v[16];
    cr_assert_str_eq(seer_cuda_driver_version(v, sizeof v), "13.0");
}

Test(cuda_driver, old_driver_is_named) {
    use_fake("1", NULL, "12040", NULL);
    char why[512];
    cr_assert_eq(seer_cuda_device_count(why, sizeof why), 0);
    cr_assert_str_eq(why, "the NVIDIA driver supports CUDA 12.4 but seer's kernels need CUDA 13.0 (update the driver)");
}

Test(cuda_driver, failing_init_gives_the_drivers_words) {
    use_fake("1", NULL, NULL, "100");
    char why[512];
    cr_assert_eq(seer_cuda_device_count(why, sizeof why), 0);
    cr_assert(strstr(why, "did not initialise") && strstr(why, "CUDA_ERROR_NO_DEVICE"), "%s", why);
}

Test(cuda_driver, zero_devices) {
    use_fake("0", NULL, NULL, NULL);
    char why[512];
    cr_assert_eq(seer_cuda_device_count(why, sizeof why), 0);
    cr_assert_str_eq(why, "the NVIDIA driver sees no GPU");
}

/* ---- the embedded kernels ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const unsigned char *start, *end;
} fatbin_entry_t;
extern const fatbin_entry_t seer_cuda_fatbins[];
extern const int seer_cuda_nfatbins;

/* Fatbin layout: a 16-byte header (magic 0xBA55ED50, version, header size, payload size), then
 * entries: kind (1 PTX, 2 ELF), version, header size, payload size, ..., the sm version at 28. */
typedef struct {
    int kind, arch;
    const unsigned char *payload;
    size_t len;
} part_t;

static int fatbin_parts(const unsigned char *p, size_t n, part_t *parts, int max) {
    uint32_t magic;
    uint16_t hsz;
    uint64_t total;
    memcpy(&magic, p, 4);
    memcpy(&hsz, p + 6, 2);
    memcpy(&total, p + 8, 8);
    cr_assert_eq(magic, 0xBA55ED50u, "not a fatbin");
    cr_assert_leq(hsz + total, n);
    const unsigned char *e = p + hsz, *end = p + hsz + total;
    int k = 0;
    while (e + 32 <= end && k < max) {
        uint16_t kind;
        uint32_t ehs, arch;
        uint64_t psz;
        memcpy(&kind, e, 2);
        memcpy(&ehs, e + 4, 4);
        memcpy(&psz, e + 8, 8);
        memcpy(&arch, e + 28, 4);
        parts[k++] = (part_t){kind, (int)arch, e + ehs, (size_t)psz};
        e += ehs + psz;
    }
    return k;
}

static int has_symbol(const part_t *p, const char *name) {
    size_t n = strlen(name) + 1;
    for (size_t i = 1; i + n <= p->len; i++)
        if (p->payload[i - 1] == 0 && memcmp(p->payload + i, name, n) == 0) return 1;
    return 0;
}

Test(cuda_kernels, every_fatbin_has_sm80_sm90_and_ptx) {
    cr_assert_gt(seer_cuda_nfatbins, 0, "no kernels embedded: the build did not find nvcc");
    for (int i = 0; i < seer_cuda_nfatbins; i++) {
        const fatbin_entry_t *f = &seer_cuda_fatbins[i];
        part_t parts[16];
        int np = fatbin_parts(f->start, (size_t)(f->end - f->start), parts, 16);
        int sm80 = 0, sm90 = 0, ptx = 0;
        for (int j = 0; j < np; j++) {
            if (parts[j].kind == 2 && parts[j].arch == 80) sm80 = 1;
            if (parts[j].kind == 2 && parts[j].arch == 90) sm90 = 1;
            if (parts[j].kind == 1 && parts[j].arch == 90) ptx = 1;
        }
        cr_assert(sm80 && sm90 && ptx, "kernels/%s.cu: sm_80 %d, sm_90 %d, compute_90 PTX %d", f->name, sm80, sm90, ptx);
    }
    size_t total;
    cr_assert_not_null(seer_cuda_fatbin(&total));
    cr_assert_gt(total, 1000);
}

/* Every kernel name that engine/cuda/gpu_model.c and gpu_attn.c launch is in the sm_90 code of some fatbin,
 * so a renamed kernel fails here rather than on the first GPU that runs it. */
/* The "seer_..." names in one source file, each checked against the sm_90 code; their count. */
static int check_launched(const char *file) {
    FILE *f = fopen(file, "r");
    cr_assert_not_null(f, "%s: run from the repository root", file);
    static char src[1 << 17];
    size_t n = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    src[n] = 0;
    int found = 0;
    for (char *p = src; (p = strstr(p, "\"seer_")) != NULL; p++) {
        char name[64];
        size_t k = 0;
        for (const char *q = p + 1; *q && *q != '"' && k < sizeof name - 1; q++) name[k++] = *q;
        name[k] = 0;
        int ok = 0;
        for (int i = 0; i < seer_cuda_nfatbins && !ok; i++) {
            part_t parts[16];
            int np = fatbin_parts(seer_cuda_fatbins[i].start,
                                  (size_t)(seer_cuda_fatbins[i].end - seer_cuda_fatbins[i].start), parts, 16);
            for (int j = 0; j < np && !ok; j++)
                if (parts[j].kind == 2 && parts[j].arch == 90 && has_symbol(&parts[j], name)) ok = 1;
        }
        cr_assert(ok, "%s launches %s but no kernels/*.cu defines it (extern \"C\")", file, name);
        found++;
    }
    return found;
}

Test(cuda_kernels, every_launched_kernel_is_embedded) {
    int found = check_launched("engine/cuda/gpu_model.c");
    cr_assert_geq(check_launched("engine/cuda/gpu_attn.c"), 4, "gpu_attn.c launches 4 kernels");
    cr_assert_geq(found, 12, "found only %d kernel names in gpu_model.c", found);
}

/* ---- the model on the fake device ------------------------------------------------------------ */

Test(cuda_model, weights_go_up_in_bf16_and_the_first_launch_fails_cleanly) {
    use_fake("1", NULL, NULL, NULL);
    seer_model_t *m = NULL;
    seer_err_t err;
    seer_model_opts_t o = {.threads = 1, .device = "cuda"};
    cr_assert_eq(seer_model_load(&m, MODEL_DIR, &o, &err), 0, "%s", err.msg);
    char dev[32];
    cr_assert_str_eq(seer_model_device(m, dev, sizeof dev), "cuda:0");
    /* stories260K is f32 with tied embeddings: every tensor once, 2 bytes per parameter. */
    cr_assert_eq(seer_gpu_weight_bytes(m), seer_model_param_count(m) * 2);

    /* The fake keeps device memory in host memory: read the embeddings back through the driver
     * and compare with the checkpoint rounded to bf16. */
    const seer_model_config_t *c = seer_model_config(m);
    seer_kv_cache_t *kv = NULL;
    cr_assert_eq(seer_kv_cache_new(&kv, m, 32, &err), 0, "%s", err.msg);
    int32_t ids[2] = {1, 2};
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    int rc = seer_model_forward(m, kv, ids, 2, logits, 0, &err);
    cr_assert_lt(rc, 0);
    cr_assert(strstr(err.msg, "launching seer_embed") && strstr(err.msg, "CUDA_ERROR_NOT_SUPPORTED"), "%s", err.msg);
    cr_assert_eq(seer_kv_cache_len(kv), 0, "a failed pass must not count tokens in the cache");
    /* A CPU cache for a GPU model is refused with a message, not a crash. */
    seer_model_t *cpu = NULL;
    seer_model_opts_t oc = {.threads = 1};
    cr_assert_eq(seer_model_load(&cpu, MODEL_DIR, &oc, &err), 0, "%s", err.msg);
    seer_kv_cache_t *ckv = NULL;
    cr_assert_eq(seer_kv_cache_new(&ckv, cpu, 32, &err), 0);
    cr_assert_lt(seer_model_forward(m, ckv, ids, 2, logits, 0, &err), 0);
    cr_assert(strstr(err.msg, "another device"), "%s", err.msg);
    seer_kv_cache_free(ckv);
    seer_model_free(cpu);
    free(logits);
    seer_kv_cache_free(kv);
    seer_model_free(m);
}

/* A batched decode step (one token per sequence) takes the one-pass path, a step with a prompt
 * the one-at-a-time path; on the fake device both fail at their first launch with the driver's
 * message, and no sequence's cache counts the token. */
Test(cuda_model, a_failed_batched_step_leaves_every_cache_as_it_was) {
    use_fake("1", NULL, NULL, NULL);
    seer_model_t *m = NULL;
    seer_err_t err;
    seer_model_opts_t o = {.threads = 1, .device = "cuda"};
    cr_assert_eq(seer_model_load(&m, MODEL_DIR, &o, &err), 0, "%s", err.msg);
    int V = seer_model_config(m)->vocab_size;
    seer_kv_cache_t *kv[3];
    for (int s = 0; s < 3; s++) cr_assert_eq(seer_kv_cache_new(&kv[s], m, 32, &err), 0, "%s", err.msg);
    int32_t ids[3][2] = {{1, 2}, {3, 4}, {5, 6}};
    float *lg = malloc(sizeof(float) * 3 * (size_t)V);
    for (int prompt = 0; prompt < 2; prompt++) {
        seer_batch_seq_t seqs[3];
        for (int s = 0; s < 3; s++)
            seqs[s] = (seer_batch_seq_t){.cache = kv[s], .tokens = ids[s], .n = prompt && s == 1 ? 2 : 1,
                                         .logits = lg + (size_t)s * V};
        cr_assert_lt(seer_model_forward_batch(m, seqs, 3, &err), 0);
        cr_assert(strstr(err.msg, "launching seer_embed") && strstr(err.msg, "CUDA_ERROR_NOT_SUPPORTED"), "%s", err.msg);
        for (int s = 0; s < 3; s++) cr_assert_eq(seer_kv_cache_len(kv[s]), 0, "prompt %d, sequence %d", prompt, s);
    }
    for (int s = 0; s < 3; s++) seer_kv_cache_free(kv[s]);
    free(lg);
    seer_model_free(m);
}

/* Attention refuses what its kernels do not take, with the numbers, before any launch. */
Test(cuda_model, attention_refuses_shapes_it_cannot_run) {
    use_fake("1", NULL, NULL, NULL);
    seer_cuda_dev_t *d = NULL;
    seer_err_t err;
    cr_assert_eq(seer_cuda_open(&d, 0, &err), 0, "%s", err.msg);
    seer_gpu_attn_t a;
    cr_assert_eq(seer_gpu_attn_init(&a, d, &err), 0, "%s", err.msg);
    seer_gpu_attn_args_t x = {.n = 2, .H = 8, .KH = 2, .hd = 320, .scale = 1};
    cr_assert_lt(seer_gpu_attention(&a, &x, SEER_ATTN_AUTO, &err), 0);
    cr_assert(strstr(err.msg, "head_dim 320, 8 heads over 2 kv heads"), "%s", err.msg);
    x.hd = 64, x.KH = 3;
    cr_assert_lt(seer_gpu_attention(&a, &x, SEER_ATTN_AUTO, &err), 0);
    cr_assert(strstr(err.msg, "8 heads over 3 kv heads"), "%s", err.msg);
    x.KH = 2;
    seer_gpu_attn_rows_t rows = {.max_ctx = 4};
    x.rows = &rows;
    cr_assert_lt(seer_gpu_attention(&a, &x, SEER_ATTN_GEMM, &err), 0);
    cr_assert(strstr(err.msg, "the rows of a batch take the split form"), "%s", err.msg);
    x.rows = NULL, x.n = 0;
    cr_assert_eq(seer_gpu_attention(&a, &x, SEER_ATTN_AUTO, &err), 0, "no queries, nothing to do");
    seer_gpu_attn_free(&a);
    seer_cuda_close(d);
}

Test(cuda_model, a_bad_attention_chunk_setting_is_an_error_naming_it) {
    use_fake("1", NULL, NULL, NULL);
    setenv("SEER_ATTN_MAX_CHUNK", "lots", 1);
    seer_model_t *m = NULL;
    seer_err_t err;
    seer_model_opts_t o = {.threads = 1, .device = "cuda:0"};
    cr_assert_lt(seer_model_load(&m, MODEL_DIR, &o, &err), 0);
    cr_assert(strstr(err.msg, "SEER_ATTN_MAX_CHUNK=lots: give a number of query tokens from 16 to"), "%s", err.msg);
    setenv("SEER_ATTN_MAX_CHUNK", "512", 1);
    cr_assert_eq(seer_model_load(&m, MODEL_DIR, &o, &err), 0, "%s", err.msg);
    seer_model_free(m);
}

Test(cuda_model, upload_rounds_to_bf16) {
    use_fake("1", NULL, NULL, NULL);
    seer_model_t *m = NULL;
    seer_err_t err;
    seer_model_opts_t o = {.threads = 1, .device = "cuda:0"};
    cr_assert_eq(seer_model_load(&m, MODEL_DIR, &o, &err), 0, "%s", err.msg);
    seer_cuda_dev_t *d = seer_gpu_dev(m);
    cr_assert_not_null(d);
    /* Every upload, read back through the driver (the fake's device memory is host memory),
     * equals the checkpoint's f32 values rounded to bf16 (nearest even). */
    const seer_weight_t *ws[] = {&m->embed, &m->final_norm, &m->layers[0].q, &m->layers[4].down, &m->layers[2].attn_norm};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
        const seer_weight_t *w = ws[i];
        cr_assert_eq(w->dtype, SEER_F32);
        size_t n = (size_t)w->rows * (size_t)(w->cols > 0 ? w->cols : 1);
        seer_devptr_t dp = seer_gpu_weight_dev(m, w);
        cr_assert_neq(dp, 0);
        uint16_t *back = malloc(n * 2);
        cr_assert_eq(seer_cuda_dtoh(d, back, dp, n * 2, &err), 0, "%s", err.msg);
        for (size_t j = 0; j < n; j++)
            cr_assert_eq(back[j], seer_f32_to_bf16(((const float *)w->data)[j]), "weight %zu element %zu", i, j);
        free(back);
    }
    /* The tied head is the embeddings' copy, not a second upload. */
    cr_assert_eq(seer_gpu_weight_dev(m, &m->lm_head), seer_gpu_weight_dev(m, &m->embed));
    size_t free_b = 0, total_b = 0;
    cr_assert_eq(seer_cuda_mem_info(d, &free_b, &total_b, &err), 0);
    cr_assert_eq(total_b - free_b, seer_gpu_weight_bytes(m) + (size_t)m->cfg.head_dim / 2 * sizeof(float),
                 "device memory in use: the weights plus one RoPE table (shared by the layers)");
    seer_model_free(m);
}

Test(cuda_model, out_of_memory_for_weights_says_what_was_needed) {
    use_fake("1", "100000", NULL, NULL);
    seer_model_t *m = NULL;
    seer_err_t err;
    seer_model_opts_t o = {.threads = 1, .device = "cuda:0"};
    /* 260,032 parameters x 2 bytes = 507.9 KiB */
    cr_assert_lt(seer_model_load(&m, MODEL_DIR, &o, &err), 0);
    cr_assert_null(m);
    cr_assert(strstr(err.msg, "cuda:0: the weights need 507.9 KiB in bf16 but only 97.7 KiB of 97.7 KiB are free"), "%s",
              err.msg);
}

Test(cuda_model, out_of_memory_for_the_kv_cache_says_how_many_tokens) {
    use_fake("1", "2000000", NULL, NULL);
    seer_model_t *m = NULL;
    seer_err_t err;
    seer_model_opts_t o = {.threads = 1, .device = "cuda:0"};
    cr_assert_eq(seer_model_load(&m, MODEL_DIR, &o, &err), 0, "%s", err.msg);
    seer_kv_cache_t *kv = NULL;
    /* 5 layers x 100000 tokens x 32 (4 kv heads x head_dim 8) x 2 bytes = 30.5 MiB for the keys */
    cr_assert_lt(seer_kv_cache_new(&kv, m, 100000, &err), 0);
    cr_assert_null(kv);
    cr_assert(strstr(err.msg, "cuda:0: out of GPU memory for a KV cache of 100000 tokens: needs 30.5 MiB"), "%s",
              err.msg);
    seer_model_free(m);
}

Test(cuda_model, architectures_without_a_gpu_pass_are_refused) {
    use_fake("1", NULL, NULL, NULL);
    /* A GPT-2 model made by the parity fixtures, when present. */
    const char *dir = "tests/parity/models/gpt2";
    if (access(dir, R_OK) != 0) cr_skip_test("no %s", dir);
    seer_model_t *m = NULL;
    seer_err_t err;
    seer_model_opts_t o = {.threads = 1, .device = "cuda:0"};
    cr_assert_lt(seer_model_load(&m, dir, &o, &err), 0);
    cr_assert(strstr(err.msg, "model_type \"gpt2\" has no CUDA forward pass yet"), "%s", err.msg);
}

/* Every architecture with a GPU pass describes itself and uploads on the fake device (the parity
 * fixtures: f32 and bf16 checkpoints, biases, q/k norms, sandwich norms, windows); the first
 * launch then fails with the driver's message and the cache stays empty. */
Test(cuda_model, every_described_architecture_uploads) {
    use_fake("1", NULL, NULL, NULL);
    const char *names[] = {"llama", "llama_tied_bias", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3"};
    int tried = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char dir[256];
        snprintf(dir, sizeof dir, "tests/parity/models/%s", names[i]);
        if (access(dir, R_OK) != 0) continue;
        seer_model_t *m = NULL;
        seer_err_t err;
        seer_model_opts_t o = {.threads = 1, .device = "cuda:0"};
        cr_assert_eq(seer_model_load(&m, dir, &o, &err), 0, "%s: %s", names[i], err.msg);
        cr_assert_eq(seer_gpu_device_index(m), 0, "%s", names[i]);
        cr_assert_gt(seer_gpu_weight_bytes(m), 0);
        cr_assert_leq(seer_gpu_weight_bytes(m), seer_model_param_count(m) * 2, "%s: no tensor twice", names[i]);
        seer_kv_cache_t *kv = NULL;
        cr_assert_eq(seer_kv_cache_new(&kv, m, 16, &err), 0, "%s", err.msg);
        int32_t ids[3] = {1, 2, 3};
        int next = -1;
        cr_assert_lt(seer_model_forward_next(m, kv, ids, 3, &next, NULL, &err), 0);
        cr_assert(strstr(err.msg, "CUDA_ERROR_NOT_SUPPORTED"), "%s: %s", names[i], err.msg);
        cr_assert_eq(seer_kv_cache_len(kv), 0);
        seer_kv_cache_free(kv);
        seer_model_free(m);
        tried++;
    }
    cr_assert_eq(tried, 8, "the parity fixtures are missing");
}

/* ---- which kernels a pass launches: the fusions step aside where a hook looks ----------------
 * The fake driver lists each launch (FAKE_CUDA_LAUNCH_LOG) and runs nothing, so this checks the
 * host's choices only; that the fused kernels compute what the unfused ones do is checked bit for
 * bit on a GPU (test_cuda_kernels.c). stories260K: a llama of 5 layers, hidden 64. */

static char g_log[256];

/* stories260K on the fake device, its launches listed in g_log. */
static seer_model_t *logged_model(void) {
    use_fake("1", NULL, NULL, NULL);
    snprintf(g_log, sizeof g_log, "/tmp/seer-fake-launches-%d.txt", (int)getpid());
    unlink(g_log);
    setenv("FAKE_CUDA_LAUNCH_LOG", g_log, 1);
    setenv("SEER_NO_CUBLAS", "1", 1); /* the fake has no cuBLAS behind it */
    seer_model_t *m = NULL;
    seer_err_t err;
    seer_model_opts_t o = {.threads = 1, .device = "cuda"};
    cr_assert_eq(seer_model_load(&m, MODEL_DIR, &o, &err), 0, "%s", err.msg);
    return m;
}

/* How many launches of `name` the log lists since the last call; the log starts over. */
static int launches(const char *name) {
    FILE *f = fopen(g_log, "r");
    if (!f) return 0;
    char line[128];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        n += strcmp(line, name) == 0;
    }
    fclose(f);
    return n;
}

static void forward_with(seer_model_t *m, int n, seer_hook_point_t p, int layer) {
    seer_err_t err;
    const seer_model_config_t *c = seer_model_config(m);
    seer_kv_cache_t *kv = NULL;
    cr_assert_eq(seer_kv_cache_new(&kv, m, 32, &err), 0, "%s", err.msg);
    int32_t ids[12];
    for (int i = 0; i < n; i++) ids[i] = 1 + i;
    float *lg = malloc(sizeof(float) * (size_t)c->vocab_size);
    seer_hookset_t *s = seer_hookset_new(c->num_layers);
    if (layer >= 0) cr_assert_eq(seer_hookset_add(s, p, layer, seer_iv_capture(&err), &err), 0, "%s", err.msg);
    seer_fwd_hooks_t hk = {.set = s, .prompt_len = n};
    unlink(g_log);
    cr_assert_eq(seer_model_forward_hooked(m, kv, ids, n, lg, 0, NULL, &hk, &err), 0, "%s", err.msg);
    seer_hookset_free(s);
    free(lg);
    seer_kv_cache_free(kv);
}

Test(cuda_model, fusions_step_aside_where_a_hook_looks) {
    seer_model_t *m = logged_model();
    const int L = seer_model_config(m)->num_layers;

    /* decode, no hooks: every fusion */
    forward_with(m, 1, SEER_HP_RESID_MID, -1);
    cr_assert_eq(launches("seer_gemv1_segs"), L);
    cr_assert_eq(launches("seer_gemv1_gated"), L);
    cr_assert_eq(launches("seer_rope_store"), L);
    cr_assert_eq(launches("seer_add_rmsnorm"), 2 * L - 1, "the last layer's residual add stands alone");
    cr_assert_eq(launches("seer_add"), 1);
    cr_assert_eq(launches("seer_rmsnorm"), 2, "layer 0's input norm and the final norm");
    cr_assert_eq(launches("seer_act_mul"), 0);
    cr_assert_eq(launches("seer_gemv1_bf16"), 2 * L + 1, "o, down, and the head");

    /* a capture of resid_mid at layer 1: that layer's add and MLP norm run on their own */
    forward_with(m, 1, SEER_HP_RESID_MID, 1);
    cr_assert_eq(launches("seer_add_rmsnorm"), 2 * L - 2);
    cr_assert_eq(launches("seer_add"), 2);
    cr_assert_eq(launches("seer_rmsnorm"), 3);

    /* mlp_pre (the gate's output, before the activation) at layer 2: gate and up apart there */
    forward_with(m, 1, SEER_HP_MLP_PRE, 2);
    cr_assert_eq(launches("seer_gemv1_gated"), L - 1);
    cr_assert_eq(launches("seer_act_mul"), 1);
    cr_assert_eq(launches("seer_gemv1_bf16"), 2 * L + 3, "o, down, the head, and gate and up there");

    /* resid_pre at layer 3: layer 2's add and layer 3's input norm apart */
    forward_with(m, 1, SEER_HP_RESID_PRE, 3);
    cr_assert_eq(launches("seer_add_rmsnorm"), 2 * L - 2);
    cr_assert_eq(launches("seer_add"), 2);

    /* a prefill of 10 tokens: GEMMs (the WMMA kernel here) on bf16 inputs that the norms and the
     * activation write; only the attention output is converted on its own */
    forward_with(m, 10, SEER_HP_RESID_MID, -1);
    cr_assert_eq(launches("seer_gemm_bf16"), 7 * L, "q, k, v, o, gate, up, down (the head's one row: a GEMV)");
    cr_assert_eq(launches("seer_f32_to_bf16"), L, "the attention outputs");
    cr_assert_eq(launches("seer_act_mul"), L);
    /* ln1 hooked at layer 0: the hook may change the norm's output, so it is converted after it */
    forward_with(m, 10, SEER_HP_LN1, 0);
    cr_assert_eq(launches("seer_f32_to_bf16"), L + 1);
    seer_model_free(m);
    unlink(g_log);
}

/* A batched step where one sequence hooks resid_mid at layer 1 turns that fusion off for every
 * sequence of the step, and the step takes the batched GEMV (4 rows per warp) elsewhere. */
Test(cuda_model, a_hook_on_one_sequence_turns_a_fusion_off_for_the_step) {
    seer_model_t *m = logged_model();
    seer_err_t err;
    const seer_model_config_t *c = seer_model_config(m);
    const int L = c->num_layers, V = c->vocab_size;
    seer_kv_cache_t *kv[3];
    seer_hookset_t *set[3];
    seer_fwd_hooks_t hk[3];
    seer_batch_seq_t seqs[3];
    int32_t ids[3] = {4, 5, 6};
    float *lg = malloc(sizeof(float) * 3 * (size_t)V);
    for (int s = 0; s < 3; s++) {
        cr_assert_eq(seer_kv_cache_new(&kv[s], m, 32, &err), 0, "%s", err.msg);
        set[s] = seer_hookset_new(L);
        if (s == 1) cr_assert_eq(seer_hookset_add(set[s], SEER_HP_RESID_MID, 1, seer_iv_capture(&err), &err), 0);
        hk[s] = (seer_fwd_hooks_t){.set = set[s], .prompt_len = 0};
        seqs[s] = (seer_batch_seq_t){.cache = kv[s], .tokens = &ids[s], .n = 1, .logits = lg + (size_t)s * V, .hk = &hk[s]};
    }
    unlink(g_log);
    cr_assert_eq(seer_model_forward_batch(m, seqs, 3, &err), 0, "%s", err.msg);
    cr_assert_eq(launches("seer_gemv_rows_segs"), L);
    cr_assert_eq(launches("seer_gemv_rows_gated"), L);
    cr_assert_eq(launches("seer_add_rmsnorm"), 2 * L - 2);
    cr_assert_eq(launches("seer_add"), 2);
    for (int s = 0; s < 3; s++) {
        cr_assert_eq(seer_kv_cache_len(kv[s]), 1);
        seer_hookset_free(set[s]);
        seer_kv_cache_free(kv[s]);
    }
    free(lg);
    seer_model_free(m);
    unlink(g_log);
}
