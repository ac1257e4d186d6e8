/* Attention on a CUDA device (see gpu_attn.h). */
#include "gpu_attn.h"

#include <stdlib.h>
#include <string.h>

#define SPLIT_BLOCK 256
#define SPLIT_STEP 32 /* keys a block takes per step: 8 warps x 4 keys (kernels/attention.cu) */
#define SPLIT_MAX 64
#define GEMM_MIN_CHUNK 16
/* Queries per chunk at most: the products cover each chunk's keys up to its last query, so
 * smaller chunks skip more of the causal mask's zeros (1024 of 2048: 25% fewer scores than one
 * square) at the cost of more, smaller products. Measured on an H200, Gemma-2-2B shapes, a
 * 2048-token prefill's attention: 12.9 ms at 256, 9.5 at 512, 8.4 at 1024, 9.3 in one chunk. */
#define GEMM_MAX_CHUNK 1024 /* SEER_ATTN_MAX_CHUNK overrides (docs/cuda.md: for tuning) */
#define SOFTMAX_CACHE_BYTES (48 << 10) /* a row of scores in shared memory, without opting in */

int seer_gpu_attn_init(seer_gpu_attn_t *a, seer_cuda_dev_t *d, seer_err_t *err) {
    memset(a, 0, sizeof *a);
    a->d = d;
    a->budget = SEER_ATTN_GEMM_BUDGET;
    a->max_chunk = GEMM_MAX_CHUNK;
    const char *mc = getenv("SEER_ATTN_MAX_CHUNK");
    if (mc && *mc) {
        char *end;
        long v = strtol(mc, &end, 10);
        if (*end || v < GEMM_MIN_CHUNK || v > 1 << 20)
            return seer_err_set(err, SEER_EINVAL, "SEER_ATTN_MAX_CHUNK=%s: give a number of query tokens from %d to %d",
                                mc, GEMM_MIN_CHUNK, 1 << 20);
        a->max_chunk = (int)v;
    }
    a->sms = seer_cuda_info(d)->sm_count > 0 ? seer_cuda_info(d)->sm_count : 1;
    if (!(a->split = seer_cuda_fn(d, "seer_attn_split", err)) || !(a->combine = seer_cuda_fn(d, "seer_attn_combine", err)) ||
        !(a->softmax = seer_cuda_fn(d, "seer_attn_softmax", err)) ||
        !(a->split_pairs = seer_cuda_fn(d, "seer_split_pairs_bf16", err)) ||
        !(a->kv_twice = seer_cuda_fn(d, "seer_kv_twice", err)))
        return err ? err->code : SEER_EINVAL;
    return 0;
}

void seer_gpu_attn_free(seer_gpu_attn_t *a) {
    if (a->d && a->scratch) {
        seer_cuda_sync(a->d, NULL);
        seer_cuda_free(a->d, a->scratch);
    }
    a->scratch = 0, a->scratch_bytes = 0;
}

static int ensure_scratch(seer_gpu_attn_t *a, size_t bytes, seer_err_t *err) {
    if (bytes <= a->scratch_bytes) return 0;
    int rc = seer_cuda_sync(a->d, err); /* the old scratch may still be in use */
    if (rc < 0) return rc;
    seer_cuda_free(a->d, a->scratch);
    a->scratch = 0, a->scratch_bytes = 0;
    if ((rc = seer_cuda_alloc(a->d, &a->scratch, bytes, "attention scratch", err)) < 0) return rc;
    a->scratch_bytes = bytes;
    return 0;
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* Blocks of 256 for a grid-stride kernel over n elements. */
static unsigned grid_for(long long n) {
    long long b = (n + 255) / 256;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b < 1 ? 1 : b);
}

static int run_split(seer_gpu_attn_t *a, const seer_gpu_attn_args_t *x, seer_err_t *err) {
    long long ctx = x->rows ? x->rows->max_ctx : (long long)x->start + x->n; /* the most keys one query sees */
    if (x->window > 0 && x->window < ctx) ctx = x->window;
    long long rows = (long long)x->n * x->H;
    long long splits = (2LL * a->sms + rows - 1) / rows; /* at least two blocks per multiprocessor */
    long long most = (ctx + SPLIT_STEP - 1) / SPLIT_STEP; /* every slice at least one step of keys */
    if (splits > most) splits = most;
    if (splits > SPLIT_MAX) splits = SPLIT_MAX;
    if (splits < 1) splits = 1;
    long long chunk = (ctx + splits - 1) / splits;
    chunk = (chunk + SPLIT_STEP - 1) / SPLIT_STEP * SPLIT_STEP;
    splits = (ctx + chunk - 1) / chunk;
    if (rows > 0x7fffffffLL || chunk > 0x7fffffffLL)
        return seer_err_set(err, SEER_EINVAL, "attention: %lld query rows or %lld keys per slice is too many", rows, chunk);
    int rc;
    if (splits > 1 && (rc = ensure_scratch(a, (size_t)rows * (size_t)splits * (size_t)(x->hd + 2) * 4, err)) < 0)
        return rc;
    int sp = (int)splits, ch = (int)chunk;
    seer_devptr_t part = a->scratch;
    seer_gpu_attn_rows_t none = {0};
    const seer_gpu_attn_rows_t *r = x->rows ? x->rows : &none;
    void *args[] = {(void *)&x->out, &part, (void *)&x->q, (void *)&x->kc, (void *)&x->vc, (void *)&x->n,
                    (void *)&x->start, (void *)&x->H, (void *)&x->KH, (void *)&x->hd, (void *)&x->window,
                    (void *)&x->scale, (void *)&x->softcap, &sp, &ch, (void *)&r->pos, (void *)&r->seq,
                    (void *)&r->seq_k, (void *)&r->seq_v, (void *)&r->max_tokens, (void *)&r->layer};
    if ((rc = seer_cuda_launch(a->d, a->split, (unsigned)rows, (unsigned)sp, 1, SPLIT_BLOCK, 1, 1, 0, args, err)) < 0)
        return rc;
    if (sp == 1) return 0;
    void *cargs[] = {(void *)&x->out, &part, (void *)&x->hd, &sp};
    return seer_cuda_launch(a->d, a->combine, (unsigned)rows, 1, 1, SPLIT_BLOCK, 1, 1, 0, cargs, err);
}

/* The keys a chunk of queries [t0, t0 + qc) needs: [k0, k0 + Kc). */
static void chunk_keys(const seer_gpu_attn_args_t *x, int t0, int qc, int *k0, int *kc) {
    int first = x->start + t0, last = x->start + t0 + qc - 1;
    *k0 = x->window > 0 && first - x->window + 1 > 0 ? first - x->window + 1 : 0;
    *kc = last - *k0 + 1;
}

static int run_gemm(seer_gpu_attn_t *a, const seer_gpu_attn_args_t *x, seer_err_t *err) {
    const int n = x->n, H = x->H, KH = x->KH, hd = x->hd, group = H / KH;
    const size_t qelems = (size_t)n * (size_t)H * (size_t)hd;
    /* The largest chunk of queries whose scores and probabilities (8 bytes each) fit the budget;
     * every chunk's H x qc x kc scores then fit in H x qc_max x most. */
    int qc_max = n < a->max_chunk ? n : a->max_chunk, k0, kc, most;
    for (;;) {
        most = 0;
        for (int t0 = 0; t0 < n; t0 += qc_max) {
            chunk_keys(x, t0, n - t0 < qc_max ? n - t0 : qc_max, &k0, &kc);
            if (kc > most) most = kc;
        }
        if (qc_max <= GEMM_MIN_CHUNK || (size_t)H * (size_t)qc_max * (size_t)most * 8 <= a->budget) break;
        qc_max = (qc_max + 1) / 2;
    }
    /* scratch: Q as [hi | lo] rows, the chunk's keys as [k | k] rows, scores, P as hi and lo */
    const size_t kvrow = (size_t)KH * (size_t)hd; /* elements between consecutive cache rows */
    size_t q_bytes = align256(qelems * 4), k_bytes = align256((size_t)most * kvrow * 4);
    size_t p_elems = (size_t)H * (size_t)qc_max * (size_t)most;
    size_t total = q_bytes + k_bytes + align256(p_elems * 4) + 2 * align256(p_elems * 2);
    int rc = ensure_scratch(a, total, err);
    if (rc < 0) return rc;
    seer_devptr_t qpair = a->scratch, kpair = qpair + q_bytes, S = kpair + k_bytes;
    seer_devptr_t phi = S + align256(p_elems * 4), plo = phi + align256(p_elems * 2);
    long long qrows = (long long)n * H;
    int hdv = hd, khv = KH;
    void *sargs[] = {&qpair, (void *)&x->q, &qrows, &hdv};
    if ((rc = seer_cuda_launch(a->d, a->split_pairs, grid_for((long long)qelems), 1, 1, 256, 1, 1, 0, sargs, err)) < 0)
        return rc;
    for (int t0 = 0; t0 < n; t0 += qc_max) {
        int qc = n - t0 < qc_max ? n - t0 : qc_max;
        chunk_keys(x, t0, qc, &k0, &kc);
        const long long sq = (long long)qc * kc; /* elements of one head's scores */
        long long krows = kc;
        seer_devptr_t ksrc = x->kc + (size_t)k0 * kvrow * 2;
        void *kargs[] = {&kpair, &ksrc, &krows, &khv, &hdv};
        if ((rc = seer_cuda_launch(a->d, a->kv_twice, grid_for((long long)kc * (long long)kvrow), 1, 1, 256, 1, 1, 0, kargs,
                                   err)) < 0)
            return rc;
        for (int j = 0; j < group; j++) {
            /* S_h^T (Kc x qc) = [K | K] . [Q_hi | Q_lo]_h^T over 2 hd; batch b = kv head, head
             * h = b * group + j */
            seer_cuda_gemm_t g = {.trans_a = 1, .m = kc, .n = qc, .k = 2 * hd, .batch = KH, .accumulate = 0,
                                  .a = kpair, .lda = (int)(2 * kvrow), .stride_a = 2 * hd,
                                  .b = qpair + ((size_t)t0 * H + (size_t)j) * (size_t)hd * 4, .ldb = 2 * H * hd,
                                  .stride_b = (long long)group * 2 * hd,
                                  .c = S + (size_t)j * (size_t)sq * 4, .ldc = kc, .stride_c = (long long)group * sq};
            if ((rc = seer_cuda_gemm_batched_bf16(a->d, &g, err)) <= 0)
                return rc < 0 ? rc : seer_err_set(err, SEER_EUNSUPPORTED, "attention: cuBLAS is not available");
        }
        int cached = (size_t)kc * 4 <= SOFTMAX_CACHE_BYTES;
        void *margs[] = {&phi, &plo, &S, &qc, &kc, &t0, &k0, (void *)&x->start, (void *)&x->window,
                         (void *)&x->scale, (void *)&x->softcap, &cached};
        if ((rc = seer_cuda_launch(a->d, a->softmax, (unsigned)qc, (unsigned)H, 1, 256, 1, 1,
                                   cached ? (unsigned)kc * 4 : 0, margs, err)) < 0)
            return rc;
        for (int j = 0; j < group; j++)
            for (int half = 0; half < 2; half++) {
                /* O_h^T (hd x qc, ldc H*hd: out's rows) = V^T (hd x Kc) . P_h^T (Kc x qc) */
                seer_cuda_gemm_t g = {
                    .trans_a = 0, .m = hd, .n = qc, .k = kc, .batch = KH, .accumulate = half,
                    .a = x->vc + (size_t)k0 * kvrow * 2, .lda = (int)kvrow, .stride_a = hd,
                    .b = (half ? plo : phi) + (size_t)j * (size_t)sq * 2, .ldb = kc, .stride_b = (long long)group * sq,
                    .c = x->out + ((size_t)t0 * H + (size_t)j) * (size_t)hd * 4, .ldc = H * hd,
                    .stride_c = (long long)group * hd};
                if ((rc = seer_cuda_gemm_batched_bf16(a->d, &g, err)) <= 0)
                    return rc < 0 ? rc : seer_err_set(err, SEER_EUNSUPPORTED, "attention: cuBLAS is not available");
            }
    }
    return 0;
}

int seer_gpu_attention(seer_gpu_attn_t *a, const seer_gpu_attn_args_t *x, int path, seer_err_t *err) {
    if (x->n <= 0) return 0;
    if (x->hd <= 0 || x->hd > 256 || x->KH <= 0 || x->H % x->KH != 0 || x->start < 0)
        return seer_err_set(err, SEER_EINVAL, "attention: head_dim %d, %d heads over %d kv heads, start %d not supported",
                            x->hd, x->H, x->KH, x->start);
    if (x->rows && path == SEER_ATTN_GEMM)
        return seer_err_set(err, SEER_EINVAL, "attention: the rows of a batch take the split form");
    if (x->rows || path == SEER_ATTN_SPLIT || (path == SEER_ATTN_AUTO && x->n <= 8)) return run_split(a, x, err);
    if (path == SEER_ATTN_AUTO && !seer_cuda_has_batched_gemm(a->d)) return run_split(a, x, err);
    return run_gemm(a, x, err);
}
