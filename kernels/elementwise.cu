/* Elementwise kernels: token embedding, residual add, gated activations, soft-capping,
 * scaling, a 16-byte copy for the bandwidth benchmark and deterministic random fills. All but
 * seer_embed are grid-stride loops over a 64-bit count: any grid and block work (the host uses
 * block 256). */
#include "common.cuh"

/* seer_embed: grid (n), block 256 (any size), no dynamic shared memory. Row t = blockIdx.x:
 *   x[t*D + j] = float(table[tokens[t]*D + j]) * scale
 * The host validates token ids against the table's rows. */
extern "C" __global__ void seer_embed(float *x, const bf16 *table, const int *tokens, int n, int D, float scale) {
    (void)n;
    const int t = blockIdx.x;
    const bf16 *row = table + (size_t)tokens[t] * (size_t)D;
    float *xr = x + (size_t)t * (size_t)D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) xr[j] = seer_bf2f(row[j]) * scale;
}

/* seer_add: grid-stride. x[i] += y[i]. */
extern "C" __global__ void seer_add(float *x, const float *y, long long n) {
    SEER_GRID_STRIDE(i, n) x[i] += y[i];
}

/* seer_act_mul: grid-stride. r = act(g[i]) * u[i], or act(g[i]) when u is NULL, with
 * act 0 = SiLU g / (1 + exp(-g)), 1 = GELU, tanh approximation, 2 = GELU, exact (erf) (seer_act);
 * g[i] = r, and gb[i] = bf16(r) when gb is not NULL (the input of a tensor-core GEMM, round to
 * nearest even). keep == 0 (only with gb): g is left as it was (nothing reads the f32 r). */
extern "C" __global__ void seer_act_mul(float *g, const float *u, long long n, int act, bf16 *gb, int keep) {
    SEER_GRID_STRIDE(i, n) {
        const float a = seer_act(g[i], act);
        const float r = u ? a * u[i] : a;
        if (keep || !gb) g[i] = r;
        if (gb) gb[i] = seer_f2bf(r);
    }
}

/* seer_softcap: grid-stride. x[i] = tanh(x[i] / cap) * cap. */
extern "C" __global__ void seer_softcap(float *x, long long n, float cap) {
    SEER_GRID_STRIDE(i, n) x[i] = tanhf(x[i] / cap) * cap;
}

/* seer_scale: grid-stride. x[i] *= s. */
extern "C" __global__ void seer_scale(float *x, long long n, float s) {
    SEER_GRID_STRIDE(i, n) x[i] *= s;
}

/* seer_copy16: grid-stride over n16 16-byte units; dst and src 16-byte aligned (device
 * allocations are). */
extern "C" __global__ void seer_copy16(void *dst, const void *src, long long n16) {
    uint4 *d = static_cast<uint4 *>(dst);
    const uint4 *s = static_cast<const uint4 *>(src);
    SEER_GRID_STRIDE(i, n16) d[i] = s[i];
}

/* The random fills: u in [-1, 1) from the top 24 bits of splitmix64(seed ^ i * golden), a
 * counter-based hash, so the values depend only on (seed, i), never on the launch shape. */
static __device__ __forceinline__ float seer_hash_uniform(unsigned long long seed, unsigned long long i) {
    unsigned long long z = seed ^ (i * 0x9E3779B97F4A7C15ull);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(unsigned)(z >> 40) * (1.0f / 8388608.0f) - 1.0f; /* 24 bits / 2^23 - 1, exact */
}

/* seer_fill_bf16: grid-stride. w[i] = bf16(scale * u(seed, i)), round to nearest even. */
extern "C" __global__ void seer_fill_bf16(bf16 *w, long long n, unsigned long long seed, float scale) {
    SEER_GRID_STRIDE(i, n) w[i] = seer_f2bf(scale * seer_hash_uniform(seed, (unsigned long long)i));
}

/* seer_fill_f32: grid-stride. x[i] = scale * u(seed, i). */
extern "C" __global__ void seer_fill_f32(float *x, long long n, unsigned long long seed, float scale) {
    SEER_GRID_STRIDE(i, n) x[i] = scale * seer_hash_uniform(seed, (unsigned long long)i);
}
