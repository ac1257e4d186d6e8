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
/* One group of up to NT tokens (xt, nt of them) against row wr of W (`live`: the warp owns a
 * row; `vec`: 16-byte loads): returns the row's sum for token `lane` to the warp with sub == 0
 * (lanes < nt); every thread of the block must call it (two barriers). part: [8][NT] floats of
 * shared memory. Each lane sums its 8-element runs in the same order for any NT and U, so every
 * kernel built on it gives the same bits for the same (row, token, wpr). */
template <int NT, int U>
static __device__ __forceinline__ float gemv_group(const float *xt, int nt, const bf16 *wr, bool live, bool vec, int in,
                                                   int wpr, float (*part)[NT]) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, sub = w % wpr;
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
                        acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * c.x + wf[5] * c.y +
                                  wf[6] * c.z + wf[7] * c.w;
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
    float s = 0.0f;
    if (live && sub == 0 && lane < nt)
        for (int i = 0; i < wpr; i++) s += part[w + i][lane];
    __syncthreads(); /* part is reused by the next group */
    return s;
}

/* The body of the GEMV kernels: block `blk` of one matrix (rows blk*(8/wpr) ...), NT tokens per
 * pass over a row, U loads per lane in flight. With W2 (a gated pair: W the gate, W2 the up
 * projection, no bias), y = act(W x) * (W2 x) (seer_act, as seer_act_mul computes it). */
template <int NT, int U, bool GATED>
static __device__ __forceinline__ void gemv_body(float *y, const float *x, const bf16 *W, const bf16 *W2, const bf16 *bias,
                                                 int n, int in, int out, int wpr, int blk, int act) {
    __shared__ float part[8][NT]; /* [warp][token] */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int o = blk * (8 / wpr) + w / wpr, sub = w % wpr;
    const bool live = o < out; /* a dead warp still reaches the barriers */
    const size_t roff = (size_t)(live ? o : 0) * (size_t)in;
    const bool vec = (in % 8) == 0 && seer_aligned16(W + roff) && (!GATED || seer_aligned16(W2 + roff)) && seer_aligned16(x);
    for (int t0 = 0; t0 < n; t0 += NT) {
        const int nt = min(NT, n - t0);
        const float *xt = x + (size_t)t0 * (size_t)in;
        const float s = gemv_group<NT, U>(xt, nt, W + roff, live, vec, in, wpr, part);
        if (GATED) {
            const float u = gemv_group<NT, U>(xt, nt, W2 + roff, live, vec, in, wpr, part);
            if (live && sub == 0 && lane < nt) y[(size_t)(t0 + lane) * (size_t)out + o] = seer_act(s + 0.0f, act) * u;
        } else if (live && sub == 0 && lane < nt) {
            y[(size_t)(t0 + lane) * (size_t)out + o] = s + (bias ? seer_bf2f(bias[o]) : 0.0f);
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) seer_gemv_bf16(float *y, const float *x, const bf16 *W, const bf16 *bias,
                                                                 int n, int in, int out, int wpr) {
    gemv_body<8, 4, false>(y, x, W, nullptr, bias, n, in, out, wpr, blockIdx.x, 0);
}

/* seer_gemv1_bf16: seer_gemv_bf16 for one token at a time (the same launch and arguments; any
 * n, one pass over W per token): fewer registers, so more warps and 8 loads per lane in flight. */
extern "C" __global__ void __launch_bounds__(256) seer_gemv1_bf16(float *y, const float *x, const bf16 *W, const bf16 *bias,
                                                                  int n, int in, int out, int wpr) {
    gemv_body<1, 8, false>(y, x, W, nullptr, bias, n, in, out, wpr, blockIdx.x, 0);
}

/* seer_gemv_segs / seer_gemv1_segs: up to SEER_GEMV_SEGS products of the same x in one launch
 * (q, k and v), each segment as seer_gemv_bf16 / seer_gemv1_bf16 would compute it alone with its
 * own wpr (the same bits). Grid: the sum of the segments' `blocks` (each ceil(out / (8 / wpr))),
 * block 256. seer_gemv_gated / seer_gemv1_gated: one segment that is a gated pair (W the gate,
 * W2 the up projection, no bias): y = act(W x) * (W2 x), the bits of the two GEMVs followed by
 * seer_act_mul. The host packs gemv_segs_t with the same layout (gpu_model.c). */
struct gemv_seg_t {
    float *y;
    const bf16 *W, *W2, *bias;
    int out, wpr, blocks, pad;
};
#define SEER_GEMV_SEGS 3
struct gemv_segs_t {
    gemv_seg_t s[SEER_GEMV_SEGS];
    int nseg, n, in, act;
};
static_assert(sizeof(gemv_seg_t) == 48 && sizeof(gemv_segs_t) == 160, "the host (gpu_model.c) packs this layout");

/* The segment of this block (and the block's index within it) */
static __device__ __forceinline__ int gemv_seg_of(const gemv_segs_t &S, int &b) {
    int i = 0;
    b = blockIdx.x;
    while (i < S.nseg - 1 && b >= S.s[i].blocks) b -= S.s[i++].blocks;
    return i;
}
/* selects rather than S.s[i]: a dynamic index into a parameter would copy it to local memory */
#define SEG(f) (i == 0 ? S.s[0].f : i == 1 ? S.s[1].f : S.s[2].f)

template <int NT, int U, bool GATED>
static __device__ __forceinline__ void gemv_segs(const float *x, const gemv_segs_t &S) {
    int b = blockIdx.x;
    const int i = GATED ? 0 : gemv_seg_of(S, b);
    gemv_body<NT, U, GATED>(SEG(y), x, SEG(W), SEG(W2), SEG(bias), S.n, S.in, SEG(out), SEG(wpr), b, S.act);
}

extern "C" __global__ void __launch_bounds__(256, 3) seer_gemv_segs(const float *x, gemv_segs_t S) {
    gemv_segs<8, 4, false>(x, S);
}
extern "C" __global__ void __launch_bounds__(256, 4) seer_gemv1_segs(const float *x, gemv_segs_t S) {
    gemv_segs<1, 8, false>(x, S);
}
extern "C" __global__ void __launch_bounds__(256, 3) seer_gemv_gated(const float *x, gemv_segs_t S) {
    gemv_segs<8, 4, true>(x, S);
}
extern "C" __global__ void __launch_bounds__(256, 4) seer_gemv1_gated(const float *x, gemv_segs_t S) {
    gemv_segs<1, 8, true>(x, S);
}

/* ---- the batched GEMV: 2 to 8 tokens per pass, 4 rows per warp, x staged in shared memory ----
 * seer_gemv_bf16 reads each token's x once per row: at 8 tokens the x traffic (32 bytes per
 * weight's 2) from L1/L2, not the weights from memory, sets its speed. Here each warp takes
 * GR_R = 4 consecutive rows (one load of x serves 4 rows) and the block stages x for its 8 tokens
 * in tiles of 1024 elements in shared memory (read from L2 once per block, not once per warp).
 * Each lane still visits its k8 runs (k8 = sub*32 + lane + m*32*wpr, m = 0, 1, ...) in the same
 * order with the same 8-term expression, and the warps' sums meet in the same order, so every
 * (row, token) gets the bits of seer_gemv1_bf16 / seer_gemv_bf16 with the same wpr.
 * Preconditions (the host checks): in % 8 == 0, W (and W2) and x 16-byte aligned, wpr <= 4. */
#define GR_R 4
#define GR_NT 8
#define GR_TILE 1024 /* elements of x per tile (128 k8 runs; 4 / wpr runs per lane) */

static __device__ __forceinline__ float seer_dot8(const float *wf, float4 a, float4 c) {
    return wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * c.x + wf[5] * c.y + wf[6] * c.z + wf[7] * c.w;
}

/* One group of nt <= 8 tokens through rows o0 .. o0 + nrows - 1 (nrows <= GR_R): the sums of row
 * o0 + r for token `lane`, to the warp with sub == 0, in s[r]. Every thread of the block calls it. */
static __device__ __forceinline__ void gemv_rows_group(float (&s)[GR_R], const float *xt, int nt, const bf16 *W, int o0,
                                                       int nrows, int in, int wpr, float4 *xs, float (*part)[GR_R][GR_NT]) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, sub = w % wpr;
    const int in8 = in / 8, step = 32 * wpr, ut = 4 / wpr;
    float acc[GR_R][GR_NT];
#pragma unroll
    for (int r = 0; r < GR_R; r++)
#pragma unroll
        for (int t = 0; t < GR_NT; t++) acc[r][t] = 0.0f;
    const uint4 *w4[GR_R];
#pragma unroll
    for (int r = 0; r < GR_R; r++) w4[r] = reinterpret_cast<const uint4 *>(W + (size_t)(r < nrows ? o0 + r : 0) * (size_t)in);
    /* The lane's m-th run is k8 = sub * 32 + lane + m * step, in tile m / ut (ut runs per lane
     * per tile; the same count for every warp, so all reach the tile barriers). The weights of run
     * m + 1 are loaded before run m is computed, across tile boundaries too, so their latency
     * overlaps the FMAs and the staging of the next tile. */
    const int tiles = (in8 + GR_TILE / 8 - 1) / (GR_TILE / 8), runs = tiles * ut;
    uint4 wv[GR_R], wn[GR_R];
    {
        const int k8 = sub * 32 + lane;
#pragma unroll
        for (int r = 0; r < GR_R; r++) wv[r] = r < nrows && k8 < in8 ? __ldg(w4[r] + k8) : make_uint4(0, 0, 0, 0);
    }
    for (int m = 0; m < runs; m++) {
        const int base8 = (m / ut) * (GR_TILE / 8);
        if (m % ut == 0) {
            __syncthreads(); /* the previous tile has been read */
            for (int i = threadIdx.x; i < GR_NT * (GR_TILE / 4); i += blockDim.x) {
                const int t = i / (GR_TILE / 4), e4 = i % (GR_TILE / 4), k = base8 * 8 + e4 * 4;
                xs[i] = t < nt && k < in ? *reinterpret_cast<const float4 *>(xt + (size_t)t * (size_t)in + k)
                                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            __syncthreads();
        }
        const int k8 = sub * 32 + lane + m * step, kn = k8 + step;
#pragma unroll
        for (int r = 0; r < GR_R; r++) wn[r] = r < nrows && kn < in8 ? __ldg(w4[r] + kn) : make_uint4(0, 0, 0, 0);
        if (k8 < in8) {
            float wf[GR_R][8];
#pragma unroll
            for (int r = 0; r < GR_R; r++) seer_unpack8(wv[r], wf[r]);
            const int l4 = (k8 - base8) * 2; /* this run's first float4 within a token's tile */
#pragma unroll
            for (int t = 0; t < GR_NT; t++) {
                if (t < nt) {
                    const float4 a = xs[t * (GR_TILE / 4) + l4], c = xs[t * (GR_TILE / 4) + l4 + 1];
#pragma unroll
                    for (int r = 0; r < GR_R; r++) acc[r][t] += seer_dot8(wf[r], a, c);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < GR_R; r++) wv[r] = wn[r];
    }
#pragma unroll
    for (int r = 0; r < GR_R; r++)
#pragma unroll
        for (int t = 0; t < GR_NT; t++) {
            const float v = seer_warp_sum(acc[r][t]);
            if (lane == 0) part[w][r][t] = v;
        }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < GR_R; r++) {
        s[r] = 0.0f;
        if (sub == 0 && lane < nt && r < nrows)
            for (int i = 0; i < wpr; i++) s[r] += part[w + i][r][lane];
    }
    __syncthreads(); /* part is reused by the next group */
}

/* Block `blk` of one matrix (rows blk * GR_R * (8 / wpr) ...), any n in groups of 8 tokens. */
template <bool GATED>
static __device__ __forceinline__ void gemv_rows_body(float *y, const float *x, const bf16 *W, const bf16 *W2,
                                                      const bf16 *bias, int n, int in, int out, int wpr, int blk, int act) {
    __shared__ float4 xs[GR_NT * (GR_TILE / 4)]; /* 32 KiB */
    __shared__ float part[8][GR_R][GR_NT];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, sub = w % wpr;
    const int o0 = blk * GR_R * (8 / wpr) + (w / wpr) * GR_R;
    const int nrows = max(0, min(GR_R, out - o0));
    for (int t0 = 0; t0 < n; t0 += GR_NT) {
        const int nt = min(GR_NT, n - t0);
        const float *xt = x + (size_t)t0 * (size_t)in;
        float s[GR_R], u[GR_R];
        gemv_rows_group(s, xt, nt, W, o0, nrows, in, wpr, xs, part);
        if (GATED) gemv_rows_group(u, xt, nt, W2, o0, nrows, in, wpr, xs, part);
        if (sub == 0 && lane < nt) {
#pragma unroll
            for (int r = 0; r < GR_R; r++) {
                if (r >= nrows) break;
                const int o = o0 + r;
                y[(size_t)(t0 + lane) * (size_t)out + o] =
                    GATED ? seer_act(s[r] + 0.0f, act) * u[r] : s[r] + (bias ? seer_bf2f(bias[o]) : 0.0f);
            }
        }
    }
}

/* seer_gemv_rows_bf16: seer_gemv_bf16's arguments and bits, grid ceil(out / (GR_R * 8 / wpr)),
 * block 256, under the preconditions above. */
extern "C" __global__ void __launch_bounds__(256, 2) seer_gemv_rows_bf16(float *y, const float *x, const bf16 *W,
                                                                         const bf16 *bias, int n, int in, int out, int wpr) {
    gemv_rows_body<false>(y, x, W, nullptr, bias, n, in, out, wpr, blockIdx.x, 0);
}

/* seer_gemv_rows_segs / seer_gemv_rows_gated: seer_gemv_segs / seer_gemv_gated through the
 * batched body (each segment's blocks = ceil(out / (GR_R * 8 / wpr))). */
extern "C" __global__ void __launch_bounds__(256, 2) seer_gemv_rows_segs(const float *x, gemv_segs_t S) {
    int b;
    const int i = gemv_seg_of(S, b);
    gemv_rows_body<false>(SEG(y), x, SEG(W), nullptr, SEG(bias), S.n, S.in, SEG(out), SEG(wpr), b, S.act);
}
extern "C" __global__ void __launch_bounds__(256, 2) seer_gemv_rows_gated(const float *x, gemv_segs_t S) {
    gemv_rows_body<true>(S.s[0].y, x, S.s[0].W, S.s[0].W2, nullptr, S.n, S.in, S.s[0].out, S.s[0].wpr, blockIdx.x, S.act);
}
#undef SEG

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
