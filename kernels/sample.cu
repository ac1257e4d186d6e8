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

/* seer_argmax: grid 1, block 1024 (any multiple of 32 up to 1024), no dynamic shared memory.
 * out[0] = index of the largest of x[0..V-1], the lowest index on ties; NaN entries are
 * skipped; -1 when there is no non-NaN entry (V <= 0 or all NaN). */
extern "C" __global__ void seer_argmax(int *out, const float *x, int V) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    float bv = -INFINITY;
    int bi = -1;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        const float v = x[i];
        if (v == v) seer_argmax_merge(bv, bi, v, i); /* v != v: NaN */
    }
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
        if (lane == 0) out[0] = bi;
    }
}
