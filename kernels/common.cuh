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

/* The gated activations (seer_act_mul and the gated GEMV give the same bits through this):
 * act 0 = SiLU g / (1 + exp(-g)), 1 = GELU, tanh approximation, 2 = GELU, exact (erf). */
static __device__ __forceinline__ float seer_act(float v, int act) {
    if (act == 0) return v / (1.0f + expf(-v));
    if (act == 1) return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
}

/* RMSNorm of one row held in registers (RN_REGS values per thread, element j = threadIdx.x +
 * i * blockDim.x, zeros past D): v = v * (1 / sqrtf(mean(v^2) + eps)) * (one_plus ? 1 + w : w)
 * as transformers computes it. seer_rmsnorm and seer_add_rmsnorm share it, so they give the same
 * bits. Every thread of the block must call it (block reduction). */
#define RN_REGS 16
static __device__ __forceinline__ void seer_rmsnorm_regs(float (&v)[RN_REGS], const float (&w)[RN_REGS], int D, float eps,
                                                         int one_plus, float *red) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < RN_REGS; i++) ss += v[i] * v[i];
    ss = seer_block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / (float)D + eps);
#pragma unroll
    for (int i = 0; i < RN_REGS; i++) v[i] = v[i] * inv * (one_plus ? w[i] + 1.0f : w[i]);
}

/* Grid-stride loop bounds for elementwise kernels over a 64-bit count. */
#define SEER_GRID_STRIDE(i, n)                                                                   \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n);     \
         i += (long long)gridDim.x * blockDim.x)

#endif
