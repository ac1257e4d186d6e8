/* Element types shared by tensors, safetensors files and the model kernels, with the exact
 * bf16/f16 <-> f32 conversions the kernels widen through (round-to-nearest-even when
 * narrowing, as torch does). */
#ifndef SEER_DTYPE_H
#define SEER_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum seer_dtype {
    SEER_F32 = 0,
    SEER_BF16,
    SEER_F16,
    SEER_I32,
    SEER_I64,
    SEER_U8,
    SEER_BOOL,
    SEER_F64,
    SEER_DTYPE_COUNT
} seer_dtype_t;

static inline size_t seer_dtype_size(seer_dtype_t t) {
    static const size_t sizes[SEER_DTYPE_COUNT] = {4, 2, 2, 4, 8, 1, 1, 8};
    return (unsigned)t < SEER_DTYPE_COUNT ? sizes[t] : 0;
}

/* seer's names ("f32", "bf16", ...) as the Lua API and DESIGN.md spell them. */
static inline const char *seer_dtype_name(seer_dtype_t t) {
    static const char *names[SEER_DTYPE_COUNT] = {"f32", "bf16", "f16", "i32", "i64", "u8", "bool", "f64"};
    return (unsigned)t < SEER_DTYPE_COUNT ? names[t] : "?";
}

/* safetensors' names ("F32", "BF16", ...). */
static inline const char *seer_dtype_st_name(seer_dtype_t t) {
    static const char *names[SEER_DTYPE_COUNT] = {"F32", "BF16", "F16", "I32", "I64", "U8", "BOOL", "F64"};
    return (unsigned)t < SEER_DTYPE_COUNT ? names[t] : "?";
}

static inline float seer_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t seer_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float seer_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t seer_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);           /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);          /* overflow -> inf */
    if (a < 0x38800000u) {                                            /* subnormal or zero */
        if (a < 0x33000000u) return (uint16_t)sign;
        uint32_t man = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23);                             /* 14..24 */
        uint32_t half = 1u << (shift - 1);
        uint32_t r = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((a >> 13) - ((127 - 15) << 10));
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

#endif
