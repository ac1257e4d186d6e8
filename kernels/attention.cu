/* The KV cache store and causal grouped-query attention over it (bf16 cache, f32 math). */
#include "common.cuh"

/* seer_kv_store: any grid, any block (grid-stride over n*kvd; the host uses block 256). Rows
 * t = 0..n-1 of k and v ([n][kvd] f32) go to cache rows start+t, rounded to bf16 (nearest even):
 *   kc[(start+t)*kvd + j] = bf16(k[t*kvd + j]), vc likewise. */
extern "C" __global__ void seer_kv_store(bf16 *kc, bf16 *vc, const float *k, const float *v, int n, int start,
                                         int kvd) {
    const long long total = (long long)n * kvd;
    SEER_GRID_STRIDE(i, total) {
        const long long t = i / kvd, j = i - t * kvd;
        const size_t dst = (size_t)(start + t) * (size_t)kvd + (size_t)j;
        kc[dst] = seer_f2bf(k[i]);
        vc[dst] = seer_f2bf(v[i]);
    }
}

/* seer_attention: grid (n, H), block 128 (any multiple of 32 up to 128), dynamic shared memory
 * (2*hd + 128 + 64) * sizeof(float). One block per (query token t = blockIdx.x, head h =
 * blockIdx.y). The query is at position p = start + t and sees keys lo..p of the cache, lo =
 * window > 0 ? max(0, p - window + 1) : 0; head h reads kv head h / (H / KH).
 *   q    [n][H][hd] f32          out [n][H][hd] f32
 *   kc,vc [ctx][KH][hd] bf16      score = dot(q, k) * scale, then tanhf(score/softcap)*softcap
 *                                 when softcap > 0; softmax in f32; out = sum_j p_j v_j
 * Online softmax over chunks of blockDim.x keys: each thread scores one key of the chunk, the
 * block takes the chunk max, rescales the running accumulator (hd floats in shared memory,
 * thread-strided over d) and adds the chunk's sum_j p_j v_j. Any context length, hd <= 256 is
 * what the host sizes for (nothing here limits hd beyond the shared memory it passes). */
extern "C" __global__ void seer_attention(float *out, const float *q, const bf16 *kc, const bf16 *vc, int n, int start,
                                          int H, int KH, int hd, int window, float scale, float softcap) {
    extern __shared__ float sh[];
    float *sq = sh;                /* [hd] the query row */
    float *acc = sh + hd;          /* [hd] running sum_j p_j v_j */
    float *sp = sh + 2 * hd;       /* [128] this chunk's probabilities (unnormalised) */
    float *red = sh + 2 * hd + 128; /* [64] reduction scratch: 0..31 max, 32..63 sum */
    (void)n;

    const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const int group = H / KH, kvh = h / group;
    const int p = start + t;
    const int lo = window > 0 ? max(0, p - window + 1) : 0;
    const size_t kv_stride = (size_t)KH * (size_t)hd; /* elements between consecutive keys */
    const bf16 *kbase = kc + (size_t)kvh * (size_t)hd;
    const bf16 *vbase = vc + (size_t)kvh * (size_t)hd;
    const float *qrow = q + ((size_t)t * (size_t)H + (size_t)h) * (size_t)hd;

    for (int d = tid; d < hd; d += nt) {
        sq[d] = qrow[d];
        acc[d] = 0.0f;
    }
    __syncthreads();

    /* 16-byte loads of a key row when every row start is 16-byte aligned. */
    const bool vec = (hd % 8) == 0 && (kv_stride % 8) == 0 && seer_aligned16(kbase);
    float m = -INFINITY, l = 0.0f; /* running max and sum of exp, the same in every thread */

    for (int base = lo; base <= p; base += nt) {
        const int cnt = min(nt, p - base + 1); /* keys in this chunk, >= 1 */
        const int key = base + tid;
        float s = -INFINITY;
        if (tid < cnt) {
            const bf16 *kr = kbase + (size_t)key * kv_stride;
            float dot = 0.0f;
            if (vec) {
                const uint4 *k4 = reinterpret_cast<const uint4 *>(kr);
                for (int d8 = 0; d8 < hd / 8; d8++) {
                    float f[8];
                    seer_unpack8(k4[d8], f);
#pragma unroll
                    for (int e = 0; e < 8; e++) dot += sq[d8 * 8 + e] * f[e];
                }
            } else {
                for (int d = 0; d < hd; d++) dot += sq[d] * seer_bf2f(kr[d]);
            }
            s = dot * scale;
            if (softcap > 0.0f) s = tanhf(s / softcap) * softcap;
        }
        const float cmax = seer_block_max(s, red);
        const float mnew = fmaxf(m, cmax);
        /* -inf only when every score so far is -inf (infinite inputs): contribute nothing. */
        const float alpha = m == -INFINITY ? 0.0f : expf(m - mnew);
        const float pj = (tid < cnt && mnew != -INFINITY) ? expf(s - mnew) : 0.0f;
        sp[tid] = pj;
        const float csum = seer_block_sum(pj, red + 32); /* its barriers publish sp */
        l = l * alpha + csum;
        m = mnew;
        for (int d = tid; d < hd; d += nt) {
            float a = acc[d] * alpha;
            const bf16 *vr = vbase + (size_t)base * kv_stride + d;
            for (int j = 0; j < cnt; j++) a += sp[j] * seer_bf2f(vr[(size_t)j * kv_stride]);
            acc[d] = a;
        }
        __syncthreads(); /* sp and acc are reused by the next chunk */
    }

    const float invl = l > 0.0f ? 1.0f / l : 0.0f;
    float *orow = out + ((size_t)t * (size_t)H + (size_t)h) * (size_t)hd;
    for (int d = tid; d < hd; d += nt) orow[d] = acc[d] * invl;
}
