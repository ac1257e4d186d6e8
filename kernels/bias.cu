// Bias after a cuBLAS matrix product (engine/cuda/gpu_model.c: linear): cuBLAS computes
// y = x W^T with beta 0, and this adds the bf16 bias row to each of the n rows.
#include <cuda_bf16.h>

// grid (n), block 256: y[t*out + o] += float(b[o]).
extern "C" __global__ void seer_bias_add(float *y, const __nv_bfloat16 *b, int n, int out) {
    int t = blockIdx.x;
    if (t >= n) return;
    float *row = y + (size_t)t * out;
    for (int o = threadIdx.x; o < out; o += blockDim.x) row[o] += __bfloat162float(b[o]);
}
