/* Rotary position embedding, applied in place to q or k. */
#include "common.cuh"

/* seer_rope: grid (n_tokens, nheads), block 128 (any size; threads loop over the rot/2 pairs
 * with stride blockDim.x), no dynamic shared memory. x is [n_tokens][nheads][hd] f32; token
 * t = blockIdx.x is at position pos[t] when pos is not NULL (the rows of a batch, each at its
 * own sequence's position), else start + t; inv holds rot/2 inverse frequencies. For pair i:
 *   angle = (float)position * inv[i] (f32), c = cos(angle), s = sin(angle) (precise),
 *   a' = a*c - b*s, b' = b*c + a*s
 * with (a, b) = (x[i], x[i + rot/2]) when interleaved == 0 (Llama/NeoX "rotate_half") and
 * (x[2i], x[2i+1]) when interleaved == 1 (GPT-J). Dims >= rot are untouched. */
extern "C" __global__ void seer_rope(float *x, int nheads, int hd, int rot, const float *inv, int start,
                                     int interleaved, const int *pos) {
    const int t = blockIdx.x, h = blockIdx.y;
    float *xh = x + ((size_t)t * (size_t)nheads + (size_t)h) * (size_t)hd;
    const int half = rot / 2;
    const float position = (float)(pos ? pos[t] : start + t);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float angle = position * inv[i];
        float s, c;
        sincosf(angle, &s, &c);
        const int ia = interleaved ? 2 * i : i;
        const int ib = interleaved ? 2 * i + 1 : i + half;
        const float a = xh[ia], b = xh[ib];
        xh[ia] = a * c - b * s;
        xh[ib] = b * c + a * s;
    }
}
