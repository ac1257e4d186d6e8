/* Row normalisations: RMSNorm (Llama, Gemma's 1 + w) and LayerNorm. f32 activations, bf16
 * weights, f32 accumulation. */
#include "common.cuh"

/* seer_rmsnorm: grid (rows), block 256 (any multiple of 32 up to 1024), no dynamic shared
 * memory. Row r = blockIdx.x of x and y, D floats each:
 *   y = x * (1 / sqrtf(mean(x^2) + eps)) * (one_plus ? 1 + w : w)
 * as transformers computes it. y may alias x: the whole row is read for the sum before any
 * thread writes (the block reduction ends with a barrier). Rows of up to RN_REGS * blockDim.x
 * floats are held in registers, with every load of x and w issued before the first use (one
 * memory latency per row, not one per element: decode normalises single rows); longer rows are
 * read twice. Each thread sums its elements in the same order either way. */
#define RN_REGS 16
extern "C" __global__ void seer_rmsnorm(float *y, const float *x, const bf16 *w, int D, float eps, int one_plus) {
    __shared__ float red[32];
    const size_t row = (size_t)blockIdx.x * (size_t)D;
    const float *xr = x + row;
    float *yr = y + row;
    if (D <= RN_REGS * (int)blockDim.x) { /* the same for the whole block */
        float xv[RN_REGS], wv[RN_REGS];
#pragma unroll
        for (int i = 0; i < RN_REGS; i++) {
            const int j = threadIdx.x + i * blockDim.x;
            xv[i] = j < D ? xr[j] : 0.0f;
            wv[i] = j < D ? seer_bf2f(w[j]) : 0.0f;
        }
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < RN_REGS; i++) ss += xv[i] * xv[i];
        ss = seer_block_sum(ss, red);
        const float inv = 1.0f / sqrtf(ss / (float)D + eps);
#pragma unroll
        for (int i = 0; i < RN_REGS; i++) {
            const int j = threadIdx.x + i * blockDim.x;
            if (j < D) yr[j] = xv[i] * inv * (one_plus ? wv[i] + 1.0f : wv[i]);
        }
        return;
    }
    float ss = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float v = xr[j];
        ss += v * v;
    }
    ss = seer_block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / (float)D + eps);
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float wj = seer_bf2f(w[j]);
        if (one_plus) wj += 1.0f;
        yr[j] = xr[j] * inv * wj;
    }
}

/* seer_layernorm: grid (rows), block 256 (any multiple of 32 up to 1024), no dynamic shared
 * memory. Row r = blockIdx.x, D floats: two passes, mean then var = mean((x - mean)^2), and
 *   y = (x - mean) / sqrtf(var + eps) * w + b
 * b may be NULL (no bias); w may be NULL too (no scale). y may alias x: every read of the row
 * happens before the barrier that ends the second reduction. */
extern "C" __global__ void seer_layernorm(float *y, const float *x, const bf16 *w, const bf16 *b, int D, float eps) {
    __shared__ float red[32];
    const size_t row = (size_t)blockIdx.x * (size_t)D;
    const float *xr = x + row;
    float *yr = y + row;
    float s = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) s += xr[j];
    const float mean = seer_block_sum(s, red) / (float)D;
    float s2 = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float c = xr[j] - mean;
        s2 += c * c;
    }
    const float var = seer_block_sum(s2, red) / (float)D;
    const float rstd = 1.0f / sqrtf(var + eps);
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float v = (xr[j] - mean) * rstd;
        if (w) v *= seer_bf2f(w[j]);
        if (b) v += seer_bf2f(b[j]);
        yr[j] = v;
    }
}
