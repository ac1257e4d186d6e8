/* Row normalisations: RMSNorm (Llama, Gemma's 1 + w) and LayerNorm. f32 activations, bf16
 * weights, f32 accumulation. */
#include "common.cuh"

/* seer_rmsnorm: grid (rows), block 256 (any multiple of 32 up to 1024), no dynamic shared
 * memory. Row r = blockIdx.x of x and y, D floats each:
 *   y = x * (1 / sqrtf(mean(x^2) + eps)) * (one_plus ? 1 + w : w)
 * as transformers computes it; yb, when not NULL, also gets bf16(y) (the input of a tensor-core
 * GEMM). y may alias x: the whole row is read for the sum before any thread writes (the block
 * reduction ends with a barrier). Rows of up to RN_REGS * blockDim.x floats are held in
 * registers, with every load of x and w issued before the first use (one memory latency per
 * row, not one per element: decode normalises single rows); longer rows are read twice. Each
 * thread sums its elements in the same order either way. */
extern "C" __global__ void seer_rmsnorm(float *y, const float *x, const bf16 *w, int D, float eps, int one_plus, bf16 *yb) {
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
        seer_rmsnorm_regs(xv, wv, D, eps, one_plus, red);
#pragma unroll
        for (int i = 0; i < RN_REGS; i++) {
            const int j = threadIdx.x + i * blockDim.x;
            if (j < D) {
                yr[j] = xv[i];
                if (yb) yb[row + j] = seer_f2bf(xv[i]);
            }
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
        const float v = xr[j] * inv * wj;
        yr[j] = v;
        if (yb) yb[row + j] = seer_f2bf(v);
    }
}

/* seer_add_rmsnorm: grid (rows), block 256 (any multiple of 32 up to 1024), no dynamic shared
 * memory; rows of at most RN_REGS * blockDim.x floats (the host checks). The residual step of a
 * layer in one pass, row r = blockIdx.x, D floats:
 *   a' = wa ? rmsnorm(a, wa) : a      (Gemma 2's post-attention / post-MLP norm)
 *   x  = x + a'
 *   y  = rmsnorm(x, w)                (the next pre-norm), yb = bf16(y) when not NULL
 * with the same bits as seer_rmsnorm, seer_add, seer_rmsnorm launched one after another (a is
 * not written back). y may alias a. */
extern "C" __global__ void seer_add_rmsnorm(float *x, const float *a, const bf16 *wa, const bf16 *w, float *y, bf16 *yb,
                                            int D, float eps, int one_plus) {
    __shared__ float red[32];
    const size_t row = (size_t)blockIdx.x * (size_t)D;
    float av[RN_REGS], xv[RN_REGS], wv[RN_REGS];
#pragma unroll
    for (int i = 0; i < RN_REGS; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        av[i] = j < D ? a[row + j] : 0.0f;
        xv[i] = j < D ? x[row + j] : 0.0f;
        wv[i] = j < D && wa ? seer_bf2f(wa[j]) : 0.0f;
    }
    if (wa) seer_rmsnorm_regs(av, wv, D, eps, one_plus, red);
#pragma unroll
    for (int i = 0; i < RN_REGS; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        xv[i] = xv[i] + av[i];
        wv[i] = j < D ? seer_bf2f(w[j]) : 0.0f;
        if (j < D) x[row + j] = xv[i];
    }
    seer_rmsnorm_regs(xv, wv, D, eps, one_plus, red);
#pragma unroll
    for (int i = 0; i < RN_REGS; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < D) {
            y[row + j] = xv[i];
            if (yb) yb[row + j] = seer_f2bf(xv[i]);
        }
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
