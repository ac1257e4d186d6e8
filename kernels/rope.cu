/* Rotary position embedding, applied in place to q or k. */
#include "common.cuh"

/* Rotates the pairs of one head's row xh in place (threads stride over the pairs). */
static __device__ __forceinline__ void rope_head(float *xh, int rot, const float *inv, float position, int interleaved) {
    const int half = rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float angle = position * inv[i];
        float s, c;
        sincosf(angle, &s, &c);
        const int ia = interleaved ? 2 * i : i;
        const int ib = interleaved ? 2 * i + 1 : i + half;
        const float a = xh[ia], b = xh[ib];
        xh[ia] = a * c - b * s;
        xh[ib] = b * c + a * s;
    }
}

/* seer_rope: grid (n_tokens, nheads), block 128 (any size; threads loop over the rot/2 pairs
 * with stride blockDim.x), no dynamic shared memory. x is [n_tokens][nheads][hd] f32; token
 * t = blockIdx.x is at position pos[t] when pos is not NULL (the rows of a batch, each at its
 * own sequence's position), else start + t; inv holds rot/2 inverse frequencies. For pair i:
 *   angle = (float)position * inv[i] (f32), c = cos(angle), s = sin(angle) (precise),
 *   a' = a*c - b*s, b' = b*c + a*s
 * with (a, b) = (x[i], x[i + rot/2]) when interleaved == 0 (Llama/NeoX "rotate_half") and
 * (x[2i], x[2i+1]) when interleaved == 1 (GPT-J). Dims >= rot are untouched. */
extern "C" __global__ void seer_rope(float *x, int nheads, int hd, int rot, const float *inv, int start,
                                     int interleaved, const int *pos) {
    const int t = blockIdx.x, h = blockIdx.y;
    float *xh = x + ((size_t)t * (size_t)nheads + (size_t)h) * (size_t)hd;
    rope_head(xh, rot, inv, (float)(pos ? pos[t] : start + t), interleaved);
}

/* seer_rope_store: grid (n_tokens, H + KH), block 128 (any multiple of 32), no dynamic shared
 * memory. seer_rope on q ([n][H][hd]) and k ([n][KH][hd]) and then seer_kv_store (or
 * seer_kv_store_rows) of k and v in one launch, with the same bits: block (t, h < H) rotates
 * query head h of token t; block (t, H + j) rotates key head j in place, then stores key and
 * value head j of token t, rounded to bf16, into the cache: row start + t of kc / vc (kvd = KH *
 * hd per row) or, with pos not NULL (a batch: pos, seq, kbase, vbase, max_tokens as in
 * seer_kv_store_rows), row pos[t] of layer `layer` of sequence seq[t]'s cache. */
extern "C" __global__ void seer_rope_store(float *q, float *k, const float *v, int H, int KH, int hd, int rot,
                                           const float *inv, int start, int interleaved, bf16 *kc, bf16 *vc,
                                           const int *pos, const int *seq, const unsigned long long *kbase,
                                           const unsigned long long *vbase, const int *max_tokens, int layer) {
    const int t = blockIdx.x, h = blockIdx.y;
    const float position = (float)(pos ? pos[t] : start + t);
    if (h < H) {
        rope_head(q + ((size_t)t * (size_t)H + (size_t)h) * (size_t)hd, rot, inv, position, interleaved);
        return;
    }
    const int j = h - H;
    const size_t kvd = (size_t)KH * (size_t)hd, src = (size_t)t * kvd + (size_t)j * (size_t)hd;
    rope_head(k + src, rot, inv, position, interleaved);
    __syncthreads(); /* the rotated pairs were written by other threads */
    size_t dst;
    if (pos) {
        const int s = seq[t];
        kc = reinterpret_cast<bf16 *>(kbase[s]);
        vc = reinterpret_cast<bf16 *>(vbase[s]);
        dst = ((size_t)layer * (size_t)max_tokens[s] + (size_t)pos[t]) * kvd + (size_t)j * (size_t)hd;
    } else {
        dst = (size_t)(start + t) * kvd + (size_t)j * (size_t)hd;
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        kc[dst + d] = seer_f2bf(k[src + d]);
        vc[dst + d] = seer_f2bf(v[src + d]);
    }
}
