/* make bench-gpu: seer's CUDA backend on random-weight bf16 models shaped like Gemma-2-2B and
 * Gemma-2-9B, against the hardware measured in the same run:
 *   - HBM bandwidth from a device-to-device copy kernel (bytes read + written / time);
 *   - decode tokens/s at batch 1 (greedy, argmax on the GPU) against the HBM bound: the weight
 *     bytes a decode step reads (seer_model_decode_params, bf16) over the measured bandwidth;
 *   - prefill TFLOP/s (matrix products + causal attention) against the GPU's dense bf16 peak
 *     (the datasheet figure for the GPU's name);
 *   - the cost of a capture hook (one layer's residual stream copied out every token).
 * The checkpoint is a sparse safetensors file of zeros written to a temporary directory (no disk
 * space, no download); after the upload every weight is overwritten on the device with uniform
 * random values, so the kernels see real data. Without a GPU it prints "skipped: no GPU" and
 * exits 0. Usage: gpu_bench [2b|9b|all] (default all); gpu_bench --write DIR writes the 2B checkpoint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cuda/cudrv.h"
#include "cuda/gpu_model.h"
#include "hooks/hooks.h"
#include "model/model.h"

typedef struct {
    const char *name;
    int hidden, inter, layers, heads, kv_heads, head_dim, vocab, window;
} shape_t;

static const shape_t shapes[] = {
    {"Gemma-2-2B", 2304, 9216, 26, 8, 4, 256, 256000, 4096},
    {"Gemma-2-9B", 3584, 14336, 42, 16, 8, 256, 256000, 4096},
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const seer_err_t *err) {
    fprintf(stderr, "gpu_bench: %s: %s\n", what, err->msg);
    exit(1);
}

/* config.json and a sparse bf16 model.safetensors with Gemma 2's tensor names. */
static void write_model(const char *dir, const shape_t *s) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) exit((perror(path), 1));
    fprintf(f,
            "{\"architectures\": [\"Gemma2ForCausalLM\"], \"model_type\": \"gemma2\", \"hidden_size\": %d, "
            "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
            "\"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, \"sliding_window\": %d, "
            "\"query_pre_attn_scalar\": 256, \"attn_logit_softcapping\": 50.0, \"final_logit_softcapping\": 30.0, "
            "\"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, \"max_position_embeddings\": 8192, "
            "\"hidden_activation\": \"gelu_pytorch_tanh\", \"torch_dtype\": \"bfloat16\", \"bos_token_id\": 2, "
            "\"eos_token_id\": 1, \"tie_word_embeddings\": true}\n",
            s->hidden, s->inter, s->layers, s->heads, s->kv_heads, s->head_dim, s->vocab, s->window);
    fclose(f);
    size_t cap = 1 << 20, len = 0, off = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{");
#define T(rows, cols, ...)                                                                                  \
    do {                                                                                                    \
        char nm[160];                                                                                       \
        snprintf(nm, sizeof nm, __VA_ARGS__);                                                               \
        size_t b = (size_t)(rows) * (size_t)((cols) > 0 ? (cols) : 1) * 2;                                  \
        if ((cols) > 0)                                                                                     \
            len += (size_t)snprintf(h + len, cap - len, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d,%d],"      \
                                    "\"data_offsets\":[%zu,%zu]}", len > 1 ? "," : "", nm, (int)(rows),     \
                                    (int)(cols), off, off + b);                                             \
        else                                                                                                \
            len += (size_t)snprintf(h + len, cap - len, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d],"          \
                                    "\"data_offsets\":[%zu,%zu]}", len > 1 ? "," : "", nm, (int)(rows), off, \
                                    off + b);                                                               \
        off += b;                                                                                           \
    } while (0)
    int D = s->hidden, I = s->inter, qd = s->heads * s->head_dim, kvd = s->kv_heads * s->head_dim;
    T(s->vocab, D, "model.embed_tokens.weight");
    T(D, 0, "model.norm.weight");
    for (int l = 0; l < s->layers; l++) {
        T(D, 0, "model.layers.%d.input_layernorm.weight", l);
        T(qd, D, "model.layers.%d.self_attn.q_proj.weight", l);
        T(kvd, D, "model.layers.%d.self_attn.k_proj.weight", l);
        T(kvd, D, "model.layers.%d.self_attn.v_proj.weight", l);
        T(D, qd, "model.layers.%d.self_attn.o_proj.weight", l);
        T(D, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        T(D, 0, "model.layers.%d.pre_feedforward_layernorm.weight", l);
        T(D, 0, "model.layers.%d.post_feedforward_layernorm.weight", l);
        T(I, D, "model.layers.%d.mlp.gate_proj.weight", l);
        T(I, D, "model.layers.%d.mlp.up_proj.weight", l);
        T(D, I, "model.layers.%d.mlp.down_proj.weight", l);
    }
#undef T
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f) exit((perror(path), 1));
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(h, 1, len, f);
    fclose(f);
    if (truncate(path, (off_t)(8 + len + off)) != 0) exit((perror(path), 1));
    free(h);
}

/* Dense bf16 tensor-core peak (TFLOP/s, no sparsity) by GPU name, from NVIDIA's datasheets. */
static double bf16_peak(const char *name) {
    if (strstr(name, "H200")) return 989.4;
    if (strstr(name, "H100") && strstr(name, "PCIe")) return 756.0;
    if (strstr(name, "H100")) return 989.4; /* SXM */
    if (strstr(name, "A100")) return 312.0;
    if (strstr(name, "L40S")) return 362.05;
    return 0;
}

static double copy_bandwidth(seer_cuda_dev_t *d) {
    seer_err_t err;
    size_t bytes = (size_t)2 << 30;
    seer_devptr_t a, b;
    if (seer_cuda_alloc(d, &a, bytes, "the copy benchmark", &err) < 0 ||
        seer_cuda_alloc(d, &b, bytes, "the copy benchmark", &err) < 0)
        die("copy", &err);
    seer_cuda_memset0(d, a, bytes, &err);
    seer_cuda_fn_t *fn = seer_cuda_fn(d, "seer_copy16", &err);
    if (!fn) die("copy", &err);
    long long n16 = (long long)(bytes / 16);
    void *args[] = {&b, &a, &n16};
    unsigned grid = (unsigned)seer_cuda_info(d)->sm_count * 8;
    seer_cuda_timer_t *t;
    if (seer_cuda_timer_new(d, &t, &err) < 0) die("timer", &err);
    for (int i = 0; i < 3; i++) seer_cuda_launch(d, fn, grid, 1, 1, 512, 1, 1, 0, args, &err);
    float ms;
    seer_cuda_timer_start(t, &err);
    int reps = 20;
    for (int i = 0; i < reps; i++)
        if (seer_cuda_launch(d, fn, grid, 1, 1, 512, 1, 1, 0, args, &err) < 0) die("copy", &err);
    if (seer_cuda_timer_stop(t, &ms, &err) < 0) die("copy", &err);
    seer_cuda_timer_free(t);
    seer_cuda_free(d, a);
    seer_cuda_free(d, b);
    return 2.0 * (double)bytes * reps / (ms * 1e-3) / 1e9;
}

/* Greedy decode steps/s after a prompt of `prompt` tokens, optionally with a capture hook. */
static double decode_rate(seer_model_t *m, int prompt, int steps, int hooked, int profile) {
    seer_err_t err;
    seer_kv_cache_t *kv;
    if (seer_kv_cache_new(&kv, m, prompt + steps + 8, &err) < 0) die("kv cache", &err);
    int V = seer_model_config(m)->vocab_size;
    int32_t *ids = malloc(sizeof(int32_t) * prompt);
    for (int i = 0; i < prompt; i++) ids[i] = (i * 7919 + 13) % V;
    seer_hookset_t *set = NULL;
    seer_intervention_t *cap = NULL;
    seer_fwd_hooks_t hk = {0};
    if (hooked) {
        int L = seer_model_config(m)->num_layers;
        set = seer_hookset_new(L);
        cap = seer_iv_capture(&err);
        if (seer_hookset_add(set, SEER_HP_RESID_POST, L / 2, cap, &err) < 0) die("hook", &err);
        hk.set = set;
        hk.prompt_len = prompt;
    }
    int next = 0;
    if (seer_model_forward_next(m, kv, ids, prompt, &next, hooked ? &hk : NULL, &err) < 0) die("prefill", &err);
    for (int i = 0; i < 4; i++) /* warm-up */
        if (seer_model_forward_next(m, kv, &next, 1, &next, hooked ? &hk : NULL, &err) < 0) die("decode", &err);
    if (profile) seer_gpu_profile_report(m, NULL); /* only the steps below */
    double t0 = now();
    for (int i = 0; i < steps; i++)
        if (seer_model_forward_next(m, kv, &next, 1, &next, hooked ? &hk : NULL, &err) < 0) die("decode", &err);
    double dt = now() - t0;
    if (hooked) {
        seer_iv_release(cap);
        seer_hookset_free(set);
    }
    free(ids);
    seer_kv_cache_free(kv);
    return steps / dt;
}

/* Batched greedy-shaped decode: `bs` sequences after a prompt of `prompt` tokens each, `steps`
 * steps of seer_model_forward_batch (one pass over the weights per step), each sequence's logits
 * copied back as batch_generate does; tokens/s over the batch. */
static double batch_rate(seer_model_t *m, int bs, int prompt, int steps, int profile) {
    seer_err_t err;
    int V = seer_model_config(m)->vocab_size;
    seer_kv_cache_t **kv = calloc((size_t)bs, sizeof *kv);
    float *lg = malloc(sizeof(float) * (size_t)bs * (size_t)V);
    int32_t *ids = malloc(sizeof(int32_t) * prompt), *tok = malloc(sizeof(int32_t) * bs);
    seer_batch_seq_t *seqs = calloc((size_t)bs, sizeof *seqs);
    for (int s = 0; s < bs; s++) {
        if (seer_kv_cache_new(&kv[s], m, prompt + steps + 8, &err) < 0) die("kv cache", &err);
        for (int i = 0; i < prompt; i++) ids[i] = (i * 7919 + 13 + 101 * s) % V;
        if (seer_model_forward(m, kv[s], ids, prompt, NULL, 0, &err) < 0) die("prefill", &err);
        tok[s] = (s * 31 + 5) % V;
    }
    double t0 = 0;
    for (int i = 0; i < steps + 2; i++) {
        if (i == 2) { /* two warm-up steps */
            if (profile) seer_gpu_profile_report(m, NULL);
            t0 = now();
        }
        for (int s = 0; s < bs; s++)
            seqs[s] = (seer_batch_seq_t){.cache = kv[s], .tokens = &tok[s], .n = 1, .logits = lg + (size_t)s * V};
        if (seer_model_forward_batch(m, seqs, bs, &err) < 0) die("batched decode", &err);
        for (int s = 0; s < bs; s++) tok[s] = (tok[s] + 1) % V;
    }
    double dt = now() - t0;
    for (int s = 0; s < bs; s++) seer_kv_cache_free(kv[s]);
    free(kv), free(lg), free(ids), free(tok), free(seqs);
    return (double)bs * steps / dt;
}

/* Prefill of n tokens (no logits): seconds per pass, best of reps. */
static double prefill_time(seer_model_t *m, int n, int reps) {
    seer_err_t err;
    seer_kv_cache_t *kv;
    if (seer_kv_cache_new(&kv, m, n, &err) < 0) die("kv cache", &err);
    int V = seer_model_config(m)->vocab_size;
    int32_t *ids = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) ids[i] = (i * 104729 + 7) % V;
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        seer_kv_cache_reset(kv);
        double t0 = now();
        if (seer_model_forward(m, kv, ids, n, NULL, 0, &err) < 0) die("prefill", &err);
        double dt = now() - t0;
        if (r > 0 && dt < best) best = dt; /* the first pass sizes buffers and loads cuBLAS */
    }
    free(ids);
    seer_kv_cache_free(kv);
    return best;
}

static double prefill_flops(const shape_t *s, int n) {
    double D = s->hidden, I = s->inter, qd = (double)s->heads * s->head_dim, kvd = (double)s->kv_heads * s->head_dim;
    double per_tok_layer = 2.0 * (D * qd + 2 * D * kvd + qd * D + 3 * D * I);
    double att = 0;
    for (int l = 0; l < s->layers; l++) {
        int window = l % 2 == 0 ? s->window : 0; /* Gemma 2: even layers slide */
        for (int t = 0; t < n; t++) {
            int ctx = t + 1;
            if (window && ctx > window) ctx = window;
            att += 4.0 * ctx * qd; /* q.k and p.v */
        }
    }
    return per_tok_layer * n * s->layers + att;
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    if (argc == 3 && strcmp(argv[1], "--write") == 0) { /* the checkpoint alone, for checking the writer */
        write_model(argv[2], &shapes[0]);
        return 0;
    }
    char why[512];
    if (seer_cuda_device_count(why, sizeof why) <= 0) {
        printf("gpu bench: skipped: no GPU (%s)\n", why);
        return 0;
    }
    seer_cuda_devinfo_t info;
    seer_err_t err;
    if (seer_cuda_device_info(0, &info, &err) < 0) die("device", &err);
    char dv[16];
    time_t tt = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&tt));
    printf("GPU: %s (compute capability %d.%d, %d SMs, %.1f GiB), driver CUDA %s, %s\n", info.name, info.cc_major,
           info.cc_minor, info.sm_count, info.total_bytes / 1073741824.0, seer_cuda_driver_version(dv, sizeof dv), date);
    double peak = bf16_peak(info.name);
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const shape_t *s = &shapes[k];
        if (strcmp(which, "all") != 0 && !strstr(s->name, strcmp(which, "2b") == 0 ? "2B" : "9B")) continue;
        char dir[] = "/tmp/seer-gpu-bench-XXXXXX";
        if (!mkdtemp(dir)) exit((perror("mkdtemp"), 1));
        write_model(dir, s);
        seer_model_t *m;
        seer_model_opts_t o = {.device = "cuda:0", .progress = -1};
        double t0 = now();
        if (seer_model_load(&m, dir, &o, &err) < 0) die(s->name, &err);
        double load = now() - t0;
        if (seer_gpu_randomize(m, 1234 + k, 0.02f, &err) < 0) die("randomize", &err);
        double bw = copy_bandwidth(seer_gpu_dev(m));
        size_t wb = seer_gpu_weight_bytes(m);
        /* what a decode step reads: every weight the model uses (bf16 on the device) but an
         * embedding table that is not the head, of which it reads one row */
        double bound = bw * 1e9 / (double)(seer_model_decode_params(m) * 2);
        double dec = decode_rate(m, 128, 128, 0, 0);
        double dech = decode_rate(m, 128, 128, 1, 0);
        int np = 2048;
        double pt = prefill_time(m, np, 3);
        double tf = prefill_flops(s, np) / pt / 1e12;
        printf("%s: %.2f GiB of bf16 weights, loaded in %.1f s\n", s->name, wb / 1073741824.0, load);
        printf("  copy bandwidth   %.0f GB/s (read + write)\n", bw);
        printf("  decode batch 1   %.1f tok/s = %.1f%% of the HBM bound %.1f tok/s (target >= 75%%)\n", dec,
               100 * dec / bound, bound);
        if (peak > 0)
            printf("  prefill %d tok  %.0f tok/s, %.1f TFLOP/s = %.1f%% of the dense bf16 peak %.0f (target >= 50%%)\n",
                   np, np / pt, tf, 100 * tf / peak, peak);
        else
            printf("  prefill %d tok  %.0f tok/s, %.1f TFLOP/s (no datasheet peak known for this GPU)\n", np, np / pt, tf);
        printf("  capture hook     %.1f tok/s with one resid_post capture: %.1f%% overhead (target <= 5%%)\n", dech,
               100 * (dec / dech - 1));
        double b1 = batch_rate(m, 1, 128, 32, 0), b4 = batch_rate(m, 4, 128, 32, 0), b16 = batch_rate(m, 16, 128, 32, 0);
        const char *bg = getenv("SEER_GPU_BATCH_GEMM");
        printf("  batched decode   batch 1 / 4 / 16: %.1f / %.1f / %.1f tok/s over the batch (16 vs 1: %.2fx), "
               "logits copied back, %s\n", b1, b4, b16, b16 / b1,
               bg && *bg && strcmp(bg, "0") != 0 ? "SEER_GPU_BATCH_GEMM=1" : "exact (GEMV)");
        fflush(stdout);
        /* Where the time goes: one prefill and 16 decode steps again, each piece timed with
         * device events (seer_gpu_profile; the records themselves cost a little). */
        if (seer_gpu_profile(m, 1, &err) < 0) die("profile", &err);
        printf("  profile of a %d-token prefill:\n", np);
        prefill_time(m, np, 0);
        seer_gpu_profile_report(m, stdout);
        printf("  profile of decode steps after 128 tokens:\n");
        decode_rate(m, 128, 16, 0, 1);
        seer_gpu_profile_report(m, stdout);
        printf("  profile of batched decode steps, batch 16:\n");
        batch_rate(m, 16, 128, 8, 1);
        seer_gpu_profile_report(m, stdout);
        seer_gpu_profile(m, 0, &err);
        fflush(stdout);
        seer_model_free(m);
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "gpu_bench: could not remove %s\n", dir);
    }
    return 0;
}
