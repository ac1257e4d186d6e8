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

/* Attention over the bf16 KV cache, in two forms (engine/cuda/gpu_attn.c picks one per call):
 *   - seer_attn_split (+ seer_attn_combine): flash-decoding for a few query tokens. One block of
 *     8 warps per (query token, head, slice of keys); each warp streams its keys with the online
 *     softmax held in registers, lanes splitting the head's dimensions; the warps of a block merge
 *     through shared memory, the slices (when more than one) through seer_attn_combine.
 *   - seer_attn_softmax between two batched cuBLAS products for prefill: scores S = Q K^T in f32,
 *     masked, scaled, soft-capped and normalised here into P, then O = P V.
 * Common terms: query token t is at position p = start + t and sees keys lo..p of the cache,
 * lo = window > 0 ? max(0, p - window + 1) : 0; head h reads kv head h / (H / KH);
 *   q [n][H][hd] f32, kc, vc [ctx][KH][hd] bf16, out [n][H][hd] f32;
 *   score = dot(q, k) * scale, then tanhf(score / softcap) * softcap when softcap > 0;
 *   softmax in f32; out = sum_j p_j v_j. A query whose scores are all -inf (infinite inputs)
 *   gets zeros. hd <= 256. */

#define AS_WARPS 8
#define AS_KEYS 4 /* keys a warp has in flight per step */

/* The dimensions a lane holds: 8 consecutive ones (16-byte loads) when `vec`, else every 32nd. */
static __device__ __forceinline__ int as_dim(bool vec, int lane, int e) { return vec ? lane * 8 + e : lane + 32 * e; }

/* seer_kv_store_rows: any grid, any block (grid-stride over n*kvd; the host uses 256). The rows
 * of a batch, each into its own sequence's cache: row t of k and v ([n][kvd] f32) goes, rounded
 * to bf16, to row pos[t] of layer `layer` of sequence seq[t]'s cache, whose keys start at device
 * address kbase[seq[t]] and values at vbase[seq[t]], max_tokens[seq[t]] rows per layer. */
extern "C" __global__ void seer_kv_store_rows(const float *k, const float *v, int n, int kvd, int layer, const int *pos,
                                              const int *seq, const unsigned long long *kbase,
                                              const unsigned long long *vbase, const int *max_tokens) {
    const long long total = (long long)n * kvd;
    SEER_GRID_STRIDE(i, total) {
        const long long t = i / kvd, j = i - t * kvd;
        const int s = seq[t];
        const size_t dst = ((size_t)layer * (size_t)max_tokens[s] + (size_t)pos[t]) * (size_t)kvd + (size_t)j;
        reinterpret_cast<bf16 *>(kbase[s])[dst] = seer_f2bf(k[i]);
        reinterpret_cast<bf16 *>(vbase[s])[dst] = seer_f2bf(v[i]);
    }
}

/* seer_attn_split: grid (n*H, splits), block 256 (AS_WARPS warps), no dynamic shared memory.
 * Block (t*H + h, s) takes keys lo + s*chunk .. min(p, lo + (s+1)*chunk - 1) (possibly none) of
 * query t, head h. splits == 1: writes out directly. Else writes its partial state to
 *   part[((t*H + h) * splits + s) * (hd + 2) + {0: running max m, 1: sum of exp(score - m),
 *        2 + d: sum_j exp(score_j - m) v_j[d]}]
 * for seer_attn_combine. With pos not NULL the rows are a batch's: row t is at position pos[t]
 * of sequence seq[t], whose cache (seq_k, seq_v, max_tokens as kbase, vbase, max_tokens of
 * seer_kv_store_rows) replaces kc, vc and start. */
extern "C" __global__ void __launch_bounds__(256)
    seer_attn_split(float *out, float *part, const float *q, const bf16 *kc, const bf16 *vc, int n, int start, int H, int KH,
                    int hd, int window, float scale, float softcap, int splits, int chunk, const int *pos,
                    const int *seq, const unsigned long long *seq_k, const unsigned long long *seq_v,
                    const int *max_tokens, int layer) {
    __shared__ float wm[AS_WARPS], wl[AS_WARPS];
    __shared__ float wacc[AS_WARPS][256];
    (void)n;
    const int bh = blockIdx.x, t = bh / H, h = bh % H, s = blockIdx.y;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int kvh = h / (H / KH);
    int p = start + t;
    if (pos) {
        const int sq = seq[t];
        const size_t layer_off = (size_t)layer * (size_t)max_tokens[sq] * (size_t)KH * (size_t)hd;
        p = pos[t];
        kc = reinterpret_cast<const bf16 *>(seq_k[sq]) + layer_off;
        vc = reinterpret_cast<const bf16 *>(seq_v[sq]) + layer_off;
    }
    const int lo = window > 0 ? max(0, p - window + 1) : 0;
    const long long kb = (long long)lo + (long long)s * chunk;
    const int ke = (int)min((long long)p + 1, kb + chunk); /* keys [kb, ke) */
    const size_t kvs = (size_t)KH * (size_t)hd;
    const bf16 *kbase = kc + (size_t)kvh * (size_t)hd, *vbase = vc + (size_t)kvh * (size_t)hd;
    const float *qrow = q + ((size_t)t * (size_t)H + (size_t)h) * (size_t)hd;
    const bool vec = (hd % 8) == 0 && (kvs % 8) == 0 && seer_aligned16(kbase) && seer_aligned16(vbase);
    const bool mine = vec ? lane * 8 < hd : true; /* this lane holds some dimensions */

    float qf[8], acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const int d = as_dim(vec, lane, e);
        qf[e] = d < hd ? qrow[d] : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f; /* the same in every lane of the warp */
    for (long long k0 = kb + (long long)w * AS_KEYS; k0 < ke; k0 += AS_WARPS * AS_KEYS) {
        float sc[AS_KEYS], vf[AS_KEYS][8];
#pragma unroll
        for (int u = 0; u < AS_KEYS; u++) {
            const long long key = k0 + u;
            float dot = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; e++) vf[u][e] = 0.0f;
            if (key < ke && mine) { /* key < ke is the same in every lane */
                const bf16 *kr = kbase + (size_t)key * kvs, *vr = vbase + (size_t)key * kvs;
                if (vec) {
                    float kf[8];
                    seer_unpack8(*reinterpret_cast<const uint4 *>(kr + lane * 8), kf);
                    seer_unpack8(*reinterpret_cast<const uint4 *>(vr + lane * 8), vf[u]);
#pragma unroll
                    for (int e = 0; e < 8; e++) dot += qf[e] * kf[e];
                } else {
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        const int d = lane + 32 * e;
                        if (d < hd) {
                            dot += qf[e] * seer_bf2f(kr[d]);
                            vf[u][e] = seer_bf2f(vr[d]);
                        }
                    }
                }
            }
            sc[u] = dot;
        }
        float cmax = -INFINITY;
#pragma unroll
        for (int u = 0; u < AS_KEYS; u++) {
            float x = seer_warp_sum(sc[u]) * scale;
            if (softcap > 0.0f) x = tanhf(x / softcap) * softcap;
            sc[u] = k0 + u < ke ? x : -INFINITY;
            cmax = fmaxf(cmax, sc[u]);
        }
        const float mn = fmaxf(m, cmax);
        const float alpha = m == -INFINITY ? 0.0f : expf(m - mn);
        l *= alpha;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] *= alpha;
#pragma unroll
        for (int u = 0; u < AS_KEYS; u++) {
            const float pj = (mn == -INFINITY || sc[u] == -INFINITY) ? 0.0f : expf(sc[u] - mn);
            l += pj;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] += pj * vf[u][e];
        }
        m = mn;
    }

    if (lane == 0) wm[w] = m, wl[w] = l;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const int d = as_dim(vec, lane, e);
        if (d < hd) wacc[w][d] = acc[e];
    }
    __syncthreads();
    float M = -INFINITY, L = 0.0f, f[AS_WARPS];
#pragma unroll
    for (int i = 0; i < AS_WARPS; i++) M = fmaxf(M, wm[i]);
#pragma unroll
    for (int i = 0; i < AS_WARPS; i++) {
        f[i] = wm[i] == -INFINITY ? 0.0f : expf(wm[i] - M);
        L += f[i] * wl[i];
    }
    float *pb = part + ((size_t)bh * (size_t)splits + (size_t)s) * (size_t)(hd + 2);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
#pragma unroll
        for (int i = 0; i < AS_WARPS; i++) a += f[i] * wacc[i][d];
        if (splits == 1)
            out[(size_t)bh * (size_t)hd + d] = L > 0.0f ? a / L : 0.0f;
        else
            pb[2 + d] = a;
    }
    if (splits > 1 && threadIdx.x == 0) pb[0] = M, pb[1] = L;
}

/* seer_attn_combine: grid (n*H), any block (the host uses 256). Merges the `splits` partial
 * states of row t*H + h written by seer_attn_split into out[(t*H + h)*hd + d]. */
extern "C" __global__ void seer_attn_combine(float *out, const float *part, int hd, int splits) {
    const float *pb = part + (size_t)blockIdx.x * (size_t)splits * (size_t)(hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < splits; s++) M = fmaxf(M, pb[(size_t)s * (hd + 2)]);
    float L = 0.0f;
    for (int s = 0; s < splits; s++) {
        const float ms = pb[(size_t)s * (hd + 2)];
        if (ms != -INFINITY) L += expf(ms - M) * pb[(size_t)s * (hd + 2) + 1];
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        for (int s = 0; s < splits; s++) {
            const float ms = pb[(size_t)s * (hd + 2)];
            if (ms != -INFINITY) a += expf(ms - M) * pb[(size_t)s * (hd + 2) + 2 + d];
        }
        out[(size_t)blockIdx.x * (size_t)hd + d] = L > 0.0f ? a / L : 0.0f;
    }
}

/* seer_attn_softmax: grid (Qc, H), block 256, dynamic shared memory Kc floats when `cached`
 * (then each score is read from S once), else none (three passes over the row in S). The scores
 * of query tokens t0 .. t0+Qc-1 against cache keys k0 .. k0+Kc-1: S [H][Qc][Kc] f32 raw dot
 * products (cuBLAS), into probabilities P = phi + plo ([H][Qc][Kc], each bf16: phi = bf16(p),
 * plo = bf16(p - phi), so that the P V product in bf16 keeps ~16 bits of each probability).
 * Keys outside lo..p get 0. */
/* A raw dot product as a score: times scale, then soft-capped when softcap > 0. */
static __device__ __forceinline__ float attn_cap(float dot, float scale, float softcap) {
    float x = dot * scale;
    if (softcap > 0.0f) x = tanhf(x / softcap) * softcap;
    return x;
}

extern "C" __global__ void seer_attn_softmax(bf16 *phi, bf16 *plo, const float *S, int Qc, int Kc, int t0, int k0,
                                             int start, int window, float scale, float softcap, int cached) {
    extern __shared__ float row_cache[];
    __shared__ float red[64];
    const size_t row = (size_t)blockIdx.y * (size_t)Qc + blockIdx.x;
    const float *sr = S + row * (size_t)Kc;
    bf16 *hr = phi + row * (size_t)Kc, *lr = plo + row * (size_t)Kc;
    const int p = start + t0 + (int)blockIdx.x;
    const int lo = window > 0 ? max(0, p - window + 1) : 0;
    const int jlo = max(0, lo - k0), jhi = min(Kc - 1, p - k0); /* valid columns [jlo, jhi] */
    float mx = -INFINITY;
    for (int j = jlo + threadIdx.x; j <= jhi; j += blockDim.x) {
        const float x = attn_cap(sr[j], scale, softcap);
        if (cached) row_cache[j] = x;
        mx = fmaxf(mx, x);
    }
    mx = seer_block_max(mx, red); /* its barriers also publish row_cache */
    float sum = 0.0f;
    for (int j = jlo + threadIdx.x; j <= jhi; j += blockDim.x) {
        const float x = cached ? row_cache[j] : attn_cap(sr[j], scale, softcap);
        sum += mx == -INFINITY ? 0.0f : expf(x - mx);
    }
    sum = seer_block_sum(sum, red + 32);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const bf16 zero = seer_f2bf(0.0f);
    for (int j = threadIdx.x; j < Kc; j += blockDim.x) {
        float pj = 0.0f;
        if (j >= jlo && j <= jhi && mx != -INFINITY)
            pj = expf((cached ? row_cache[j] : attn_cap(sr[j], scale, softcap)) - mx) * inv;
        const bf16 hi = seer_f2bf(pj);
        hr[j] = hi;
        lr[j] = pj == 0.0f ? zero : seer_f2bf(pj - seer_bf2f(hi));
    }
}

/* seer_split_bf16: any grid, any block (grid-stride; the host uses 256). x = hi + lo to ~16 bits:
 * hi[i] = bf16(x[i]), lo[i] = bf16(x[i] - hi[i]) (round to nearest even; 0 for an infinite or NaN x). */
extern "C" __global__ void seer_split_bf16(bf16 *hi, bf16 *lo, const float *x, long long n) {
    SEER_GRID_STRIDE(i, n) {
        const bf16 h = seer_f2bf(x[i]);
        hi[i] = h;
        lo[i] = seer_f2bf(isfinite(x[i]) ? x[i] - seer_bf2f(h) : 0.0f);
    }
}

/* The gemm form's score product in one pass (gpu_attn.c): S = [K | K] . [Q_hi | Q_lo]^T, a
 * product over 2 * hd, rather than K . Q_hi^T and then K . Q_lo^T accumulated into S (which
 * reads and writes the scores twice more).
 * seer_split_pairs_bf16: grid-stride over rows * hd (the host uses block 256). Row r of x (hd
 * floats) becomes row r of dst (2 * hd bf16): [hi | lo], split as seer_split_bf16 does. */
extern "C" __global__ void seer_split_pairs_bf16(bf16 *dst, const float *x, long long rows, int hd) {
    const long long n = rows * hd;
    SEER_GRID_STRIDE(i, n) {
        const long long r = i / hd, d = i - r * hd;
        const bf16 h = seer_f2bf(x[i]);
        dst[r * 2 * hd + d] = h;
        dst[r * 2 * hd + hd + d] = seer_f2bf(isfinite(x[i]) ? x[i] - seer_bf2f(h) : 0.0f);
    }
}

/* seer_kv_twice: grid-stride over rows * KH * hd (the host uses block 256). Each head's row of
 * hd bf16 values of the cache rows kc[0 .. rows) ([rows][KH][hd]) twice in a row of dst:
 * dst[(i * KH + h) * 2 * hd + {0, hd} + d] = kc[(i * KH + h) * hd + d]. */
extern "C" __global__ void seer_kv_twice(bf16 *dst, const bf16 *kc, long long rows, int KH, int hd) {
    const long long n = rows * KH * hd;
    SEER_GRID_STRIDE(i, n) {
        const long long rh = i / hd, d = i - rh * hd;
        const bf16 v = kc[i];
        dst[rh * 2 * hd + d] = v;
        dst[rh * 2 * hd + hd + d] = v;
    }
}
