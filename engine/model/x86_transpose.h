/* A 16 x 16 transpose of 32-bit elements in zmm registers, shared by the x86 kernels that make
 * tiles or panels out of rows (kernels_x86.c: AMX's VNNI packing and C tiles; kernels_gemm.c: the
 * own GEMM's weight panels and packed activations). Include only under __x86_64__. */
#ifndef SEER_X86_TRANSPOSE_H
#define SEER_X86_TRANSPOSE_H

#include <immintrin.h>

/* r[i] element p becomes r[p] element i. */
__attribute__((target("avx512f"), always_inline)) static inline void tr16x16_epi32(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* each 128-bit lane L of r[4j + c] now holds element 4L + c of rows 4j .. 4j + 3 */
    for (int j = 0; j < 4; j++) {
        r[4 * j] = _mm512_unpacklo_epi64(t[4 * j], t[4 * j + 2]);
        r[4 * j + 1] = _mm512_unpackhi_epi64(t[4 * j], t[4 * j + 2]);
        r[4 * j + 2] = _mm512_unpacklo_epi64(t[4 * j + 1], t[4 * j + 3]);
        r[4 * j + 3] = _mm512_unpackhi_epi64(t[4 * j + 1], t[4 * j + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i s0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), s1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
        __m512i s2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88), s3 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
        t[c] = _mm512_shuffle_i32x4(s0, s2, 0x88);
        t[4 + c] = _mm512_shuffle_i32x4(s1, s3, 0x88);
        t[8 + c] = _mm512_shuffle_i32x4(s0, s2, 0xdd);
        t[12 + c] = _mm512_shuffle_i32x4(s1, s3, 0xdd);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

#endif
