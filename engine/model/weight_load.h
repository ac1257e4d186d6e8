/* Reading weight elements in their stored dtype as f32: one element (portable) or eight at a time
 * (AVX2 + F16C, widened in registers). Shared by every kernel file of engine/model. */
#ifndef SEER_WEIGHT_LOAD_H
#define SEER_WEIGHT_LOAD_H

#include "model_private.h"

/* The element index of (r, c) in w's data: row-major, or the AMX tile layout (seer_k_amx_pack). */
static inline size_t seer_w_index(const seer_weight_t *w, int64_t r, int64_t c) {
    if (!w->amx_packed) return (size_t)r * (size_t)w->cols + (size_t)c;
    size_t nkb = (size_t)w->cols / 32, b = (size_t)r / 32, h = (size_t)(r % 32) / 16;
    return (((b * nkb + (size_t)c / 32) * 2 + h) * 16 + (size_t)(c % 32) / 2) * 32 + (size_t)(r % 16) * 2 + (size_t)(c % 2);
}

static inline float seer_w_load(const seer_weight_t *w, size_t i) {
    switch (w->dtype) {
    case SEER_BF16: return seer_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case SEER_F16: return seer_f16_to_f32(((const uint16_t *)w->data)[i]);
    default: return ((const float *)w->data)[i];
    }
}

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2,fma,f16c"))) static inline __m256 seer_w_load8(const seer_weight_t *w, size_t i) {
    switch (w->dtype) {
    case SEER_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w->data + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case SEER_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w->data + i)));
    default: return _mm256_loadu_ps((const float *)w->data + i);
    }
}
#endif

#endif
