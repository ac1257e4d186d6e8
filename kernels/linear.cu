/* Linear layers with bf16 weights W[out][in] (row-major, the safetensors layout):
 * a decode GEMV (f32 activations, a few tokens), a prefill GEMM on tensor cores (bf16
 * activations, WMMA), and the f32 -> bf16 conversion that feeds it. f32 accumulation. */
#include <mma.h>

#include "common.cuh"

/* seer_gemv_bf16: grid (ceil(out / (8 / wpr))), block 256 (8 warps), no dynamic shared memory.
 * y[t][o] = sum_k x[t][k] * W[o][k] (+ bias[o] when bias is not NULL), x [n][in] f32, y [n][out]
 * f32. Each output row o is read once for up to 8 tokens by wpr warps (1, 2, 4 or 8: the host
 * takes more for a matrix of few rows, so that the GPU has enough loads in flight); block b owns
 * rows b*(8/wpr) ...; warp w takes row b*(8/wpr) + w/wpr and the (w % wpr)-th of wpr interleaved
 * runs of 32 16-byte loads (8 bf16 each; 4 of them per lane issued together) when
 * in % 8 == 0 and W and x are 16-byte aligned, else one element at a time; the warps' sums meet
 * in shared memory. Meant for decode, where the host guarantees n <= 8 (one pass over W); a
 * larger n is still computed correctly, in groups of 8 tokens, each group re-reading the row. */
/* The body of both GEMV kernels: NT tokens per pass over a row, U loads per lane in flight. */
template <int NT, int U>
static __device__ __forceinline__ void gemv_body(float *y, const float *x, const bf16 *W, const bf16 *bias, int n, int in,
                                                 int out, int wpr) {
    __shared__ float part[8][NT]; /* [warp][token] */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int o = blockIdx.x * (8 / wpr) + w / wpr, sub = w % wpr;
    const bool live = o < out; /* a dead warp still reaches the barriers */
    const bf16 *wr = W + (size_t)(live ? o : 0) * (size_t)in;
    const bool vec = (in % 8) == 0 && seer_aligned16(wr) && seer_aligned16(x);

    for (int t0 = 0; t0 < n; t0 += NT) {
        const int nt = min(NT, n - t0);
        const float *xt = x + (size_t)t0 * (size_t)in;
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) acc[t] = 0.0f;
        if (live && vec) {
            const uint4 *w4 = reinterpret_cast<const uint4 *>(wr);
            const int in8 = in / 8, step = 32 * wpr;
            for (int kb = sub * 32; kb < in8; kb += step * U) {
                uint4 wv[U];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int k8 = kb + u * step + lane;
                    wv[u] = k8 < in8 ? __ldg(w4 + k8) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int k8 = kb + u * step + lane;
                    if (k8 >= in8) break;
                    float wf[8];
                    seer_unpack8(wv[u], wf);
#pragma unroll
                    for (int t = 0; t < NT; t++) {
                        if (t < nt) {
                            const float4 *x4 = reinterpret_cast<const float4 *>(xt + (size_t)t * (size_t)in) + 2 * k8;
                            const float4 a = x4[0], c = x4[1];
                            acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * c.x +
                                      wf[5] * c.y + wf[6] * c.z + wf[7] * c.w;
                        }
                    }
                }
            }
        } else if (live) {
            for (int k = sub * 32 + lane; k < in; k += 32 * wpr) {
                const float wk = seer_bf2f(wr[k]);
#pragma unroll
                for (int t = 0; t < NT; t++)
                    if (t < nt) acc[t] += wk * xt[(size_t)t * (size_t)in + k];
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float s = seer_warp_sum(acc[t]);
            if (lane == 0) part[w][t] = s;
        }
        __syncthreads();
        if (live && sub == 0 && lane < nt) {
            float s = 0.0f;
            for (int i = 0; i < wpr; i++) s += part[w + i][lane];
            y[(size_t)(t0 + lane) * (size_t)out + o] = s + (bias ? seer_bf2f(bias[o]) : 0.0f);
        }
        __syncthreads(); /* part is reused by the next group of tokens */
    }
}

extern "C" __global__ void __launch_bounds__(256) seer_gemv_bf16(float *y, const float *x, const bf16 *W, const bf16 *bias,
                                                                 int n, int in, int out, int wpr) {
    gemv_body<8, 4>(y, x, W, bias, n, in, out, wpr);
}

/* seer_gemv1_bf16: seer_gemv_bf16 for one token at a time (the same launch and arguments; any
 * n, one pass over W per token): fewer registers, so more warps and 8 loads per lane in flight. */
extern "C" __global__ void __launch_bounds__(256) seer_gemv1_bf16(float *y, const float *x, const bf16 *W, const bf16 *bias,
                                                                  int n, int in, int out, int wpr) {
    gemv_body<1, 8>(y, x, W, bias, n, in, out, wpr);
}

/* Tiles of seer_gemm_bf16: 64x64 outputs per block, K step 32; shared rows padded by 8 bf16
 * (16 bytes) so that the 16x16 fragment loads do not hit the same banks. */
#define GM_BM 64
#define GM_BN 64
#define GM_BK 32
#define GM_LDA (GM_BK + 8) /* bf16 per row of the A (x) and B (W) tiles */
#define GM_LDC (GM_BN + 4) /* floats per row of the output staging tile */

/* seer_gemm_bf16: grid (ceil(out/64), ceil(n/64)), block 128 (4 warps), no dynamic shared memory
 * (27 KiB static). y[n][out] = xb[n][in] . W[out][in]^T (+ bias[out] when not NULL); xb and W
 * bf16, y f32, f32 accumulation on tensor cores (WMMA bf16 16x16x16, sm_80+). Block (bx, by)
 * computes rows by*64.. of y and columns bx*64..; its 4 warps form a 2x2 grid of 32x32 outputs
 * (2x2 fragments each). Each K step of 32 stages a 64x32 tile of xb and of W in shared memory,
 * zero-filled past n, out and in (16-byte loads when in % 8 == 0 and both matrices are 16-byte
 * aligned, else element by element); the accumulators go through shared memory so the final,
 * bounds-checked write to y can add the bias. Any n, in, out >= 1. */
extern "C" __global__ void seer_gemm_bf16(float *y, const bf16 *xb, const bf16 *W, const bf16 *bias, int n, int in,
                                          int out) {
    using namespace nvcuda;
    __shared__ __align__(32) bf16 As[GM_BM * GM_LDA];
    __shared__ __align__(32) bf16 Bs[GM_BN * GM_LDA];
    __shared__ __align__(32) float Cs[GM_BM * GM_LDC];

    const int tid = threadIdx.x, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1; /* this warp's 32x32 quadrant */
    const int row0 = blockIdx.y * GM_BM, col0 = blockIdx.x * GM_BN;
    const bool vec = (in % 8) == 0 && seer_aligned16(xb) && seer_aligned16(W);

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < in; k0 += GM_BK) {
        if (vec) {
            /* 64 rows x 4 chunks of 8 per tile; a chunk is all in range or all out (in % 8 == 0). */
            for (int c = tid; c < GM_BM * (GM_BK / 8); c += blockDim.x) {
                const int r = c / (GM_BK / 8), kc = (c % (GM_BK / 8)) * 8, k = k0 + kc;
                uint4 a = make_uint4(0, 0, 0, 0), b = make_uint4(0, 0, 0, 0);
                if (row0 + r < n && k < in)
                    a = *reinterpret_cast<const uint4 *>(xb + (size_t)(row0 + r) * (size_t)in + k);
                if (col0 + r < out && k < in)
                    b = *reinterpret_cast<const uint4 *>(W + (size_t)(col0 + r) * (size_t)in + k);
                *reinterpret_cast<uint4 *>(As + r * GM_LDA + kc) = a;
                *reinterpret_cast<uint4 *>(Bs + r * GM_LDA + kc) = b;
            }
        } else {
            const bf16 zero = __float2bfloat16_rn(0.0f);
            for (int e = tid; e < GM_BM * GM_BK; e += blockDim.x) {
                const int r = e / GM_BK, kc = e % GM_BK, k = k0 + kc;
                As[r * GM_LDA + kc] = (row0 + r < n && k < in) ? xb[(size_t)(row0 + r) * (size_t)in + k] : zero;
                Bs[r * GM_LDA + kc] = (col0 + r < out && k < in) ? W[(size_t)(col0 + r) * (size_t)in + k] : zero;
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GM_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], As + (wm * 32 + i * 16) * GM_LDA + kk, GM_LDA);
            /* B[k][o] = W[o][k]: column o of B is row o of the W tile, i.e. col-major. */
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], Bs + (wn * 32 + j * 16) * GM_LDA + kk, GM_LDA);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads(); /* the tiles are overwritten by the next K step */
    }

#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * GM_LDC + wn * 32 + j * 16, acc[i][j], GM_LDC,
                                    wmma::mem_row_major);
    __syncthreads();
    for (int e = tid; e < GM_BM * GM_BN; e += blockDim.x) {
        const int r = e / GM_BN, c = e % GM_BN, gr = row0 + r, gc = col0 + c;
        if (gr < n && gc < out) y[(size_t)gr * (size_t)out + gc] = Cs[r * GM_LDC + c] + (bias ? seer_bf2f(bias[gc]) : 0.0f);
    }
}

/* seer_f32_to_bf16: any grid, any block (grid-stride; the host uses block 256).
 * y[i] = bf16(x[i]), round to nearest even. */
extern "C" __global__ void seer_f32_to_bf16(bf16 *y, const float *x, long long n) {
    SEER_GRID_STRIDE(i, n) y[i] = seer_f2bf(x[i]);
}
