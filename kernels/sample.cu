/* Sampling helpers: greedy argmax over the logits. */
#include "common.cuh"

/* Keeps the better of (bv, bi) and (v, i): the larger value, the lower index on equal values;
 * index -1 means "no candidate yet". A total order, so any reduction order gives one answer. */
static __device__ __forceinline__ void seer_argmax_merge(float &bv, int &bi, float v, int i) {
    if (i < 0) return;
    if (bi < 0 || v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

/* The best (value, index) of the block's candidates, to thread 0 (every thread calls it). */
static __device__ __forceinline__ void seer_argmax_block(float &bv, int &bi) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(SEER_FULL_MASK, bv, off);
        const int oi = __shfl_xor_sync(SEER_FULL_MASK, bi, off);
        seer_argmax_merge(bv, bi, ov, oi);
    }
    if (lane == 0) {
        sv[wid] = bv;
        si[wid] = bi;
    }
    __syncthreads();
    if (wid == 0) {
        bv = lane < nw ? sv[lane] : -INFINITY;
        bi = lane < nw ? si[lane] : -1;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(SEER_FULL_MASK, bv, off);
            const int oi = __shfl_xor_sync(SEER_FULL_MASK, bi, off);
            seer_argmax_merge(bv, bi, ov, oi);
        }
    }
}

/* seer_argmax_part then seer_argmax_final: the index of the largest of x[0..V-1], the lowest
 * index on ties, NaN entries skipped, -1 when there is no non-NaN entry (V <= 0 or all NaN); over
 * many blocks, then one (decode's argmax over a vocabulary of 256k in a few microseconds rather
 * than the single block's 60 us it took before). seer_argmax_part: any
 * grid up to SEER_ARGMAX_PARTS blocks, any block (multiple of 32, up to 1024), no dynamic shared
 * memory: block b writes the best (value, index) of its grid-stride share of x[0..V-1] to pv[b],
 * pi[b] (index -1: none). seer_argmax_final: grid 1, block 32 * k (k <= 32), nparts = the
 * first kernel's grid: out[0] = the best of the parts (the merge is a total order, so any
 * number of parts gives the same answer). */
extern "C" __global__ void seer_argmax_part(float *pv, int *pi, const float *x, int V) {
    float bv = -INFINITY;
    int bi = -1;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < V; i += (long long)gridDim.x * blockDim.x) {
        const float v = x[i];
        if (v == v) seer_argmax_merge(bv, bi, v, (int)i);
    }
    seer_argmax_block(bv, bi);
    if (threadIdx.x == 0) {
        pv[blockIdx.x] = bv;
        pi[blockIdx.x] = bi;
    }
}

extern "C" __global__ void seer_argmax_final(int *out, const float *pv, const int *pi, int nparts) {
    float bv = -INFINITY;
    int bi = -1;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) seer_argmax_merge(bv, bi, pv[i], pi[i]);
    seer_argmax_block(bv, bi);
    if (threadIdx.x == 0) out[0] = bi;
}
