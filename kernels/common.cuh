/* Device helpers shared by the kernels in kernels/ (each .cu is compiled on its own into a
 * fatbin, so everything here is static inline): bf16 <-> f32 conversion, unpacking of 16-byte
 * loads of 8 bf16 values, and warp / block reductions in f32.
 *
 * Block reductions assume blockDim.x is a multiple of 32 and at most 1024 (every launch
 * convention in kernels/ uses 128, 256 or 1024 threads), and must be reached by every thread of
 * the block (they contain __syncthreads). */
#ifndef SEER_KERNELS_COMMON_CUH
#define SEER_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

#define SEER_FULL_MASK 0xffffffffu

static __device__ __forceinline__ float seer_bf2f(bf16 v) { return __bfloat162float(v); }

/* Round to nearest, ties to even (NaN stays NaN, overflow goes to inf). */
static __device__ __forceinline__ bf16 seer_f2bf(float v) { return __float2bfloat16_rn(v); }

/* A bf16 is the top half of an f32: word w of a 16-byte load holds elements 2w (low 16 bits,
 * little-endian) and 2w+1 (high 16 bits). */
static __device__ __forceinline__ void seer_unpack8(uint4 u, float f[8]) {
    f[0] = __uint_as_float(u.x << 16);
    f[1] = __uint_as_float(u.x & 0xffff0000u);
    f[2] = __uint_as_float(u.y << 16);
    f[3] = __uint_as_float(u.y & 0xffff0000u);
    f[4] = __uint_as_float(u.z << 16);
    f[5] = __uint_as_float(u.z & 0xffff0000u);
    f[6] = __uint_as_float(u.w << 16);
    f[7] = __uint_as_float(u.w & 0xffff0000u);
}

static __device__ __forceinline__ bool seer_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

static __device__ __forceinline__ float seer_warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(SEER_FULL_MASK, v, off);
    return v;
}

static __device__ __forceinline__ float seer_warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(SEER_FULL_MASK, v, off));
    return v;
}

/* Sum of v over the block, returned to every thread. red: 32 floats of shared memory. The
 * leading __syncthreads makes back-to-back calls with the same red safe. */
static __device__ __forceinline__ float seer_block_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = seer_warp_sum(v);
    __syncthreads();
    if (lane == 0) red[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float t = lane < nw ? red[lane] : 0.0f;
        t = seer_warp_sum(t);
        if (lane == 0) red[0] = t;
    }
    __syncthreads();
    return red[0];
}

/* Maximum of v over the block (fmaxf: a NaN loses to any number), returned to every thread. */
static __device__ __forceinline__ float seer_block_max(float v, float *red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = seer_warp_max(v);
    __syncthreads();
    if (lane == 0) red[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float t = lane < nw ? red[lane] : -INFINITY;
        t = seer_warp_max(t);
        if (lane == 0) red[0] = t;
    }
    __syncthreads();
    return red[0];
}

/* Grid-stride loop bounds for elementwise kernels over a 64-bit count. */
#define SEER_GRID_STRIDE(i, n)                                                                   \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n);     \
         i += (long long)gridDim.x * blockDim.x)

#endif
