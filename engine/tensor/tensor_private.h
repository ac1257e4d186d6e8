/* Shared between tensor.c, ops.c and lua_tensor.c only: element loads/stores for every dtype
 * and the row iterator (a counter over the outer dims; callers loop over the last dim). */
#ifndef SEER_TENSOR_PRIVATE_H
#define SEER_TENSOR_PRIVATE_H

#include <math.h>
#include <stdint.h>

#include "tensor.h"

#define SEER_IT_MAX_OPS 4

typedef struct seer_it {
    int nd, nops;
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    int64_t idx[SEER_TENSOR_MAX_DIMS];
    int64_t st[SEER_IT_MAX_OPS][SEER_TENSOR_MAX_DIMS];
    int64_t off[SEER_IT_MAX_OPS];
    int64_t rows, inner;
} seer_it_t;

/* After init the caller fills st[k][0..nd) and off[k]; a 0-d shape becomes one row of one. */
void seer__it_init(seer_it_t *it, int nd, const int64_t *shape, int nops);
void seer__it_next(seer_it_t *it);

void seer__contig_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Strides of src broadcast to shape (0 along broadcast dims); -1 if it does not broadcast. */
int seer__broadcast_strides(const seer_tensor_t *src, int nd, const int64_t *shape, int64_t *st);
const char *seer__shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
/* t retained when already f32 and contiguous, else a converted copy; NULL when out of memory. */
seer_tensor_t *seer__f32_contig(const seer_tensor_t *t);
void seer__release_nothing(void *ctx);

static inline float seer__ldf(const void *p, seer_dtype_t dt, int64_t i) {
    switch (dt) {
    case SEER_F32: return ((const float *)p)[i];
    case SEER_BF16: return seer_bf16_to_f32(((const uint16_t *)p)[i]);
    case SEER_F16: return seer_f16_to_f32(((const uint16_t *)p)[i]);
    case SEER_I32: return (float)((const int32_t *)p)[i];
    case SEER_I64: return (float)((const int64_t *)p)[i];
    case SEER_U8: return (float)((const uint8_t *)p)[i];
    case SEER_BOOL: return ((const uint8_t *)p)[i] ? 1.0f : 0.0f;
    case SEER_F64: return (float)((const double *)p)[i];
    default: return 0;
    }
}

static inline double seer__ld(const void *p, seer_dtype_t dt, int64_t i) {
    switch (dt) {
    case SEER_I64: return (double)((const int64_t *)p)[i];
    case SEER_F64: return ((const double *)p)[i];
    case SEER_I32: return ((const int32_t *)p)[i];
    default: return seer__ldf(p, dt, i);
    }
}

/* Integer stores truncate toward zero and saturate (NaN -> 0), so no input is undefined. */
static inline void seer__st(void *p, seer_dtype_t dt, int64_t i, double v) {
    switch (dt) {
    case SEER_F32: ((float *)p)[i] = (float)v; break;
    case SEER_BF16: ((uint16_t *)p)[i] = seer_f32_to_bf16((float)v); break;
    case SEER_F16: ((uint16_t *)p)[i] = seer_f32_to_f16((float)v); break;
    case SEER_I32:
        ((int32_t *)p)[i] = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
        break;
    case SEER_I64:
        ((int64_t *)p)[i] = v != v                       ? 0
                            : v >= 9223372036854775807.0  ? INT64_MAX
                            : v <= -9223372036854775808.0 ? INT64_MIN
                                                          : (int64_t)v;
        break;
    case SEER_U8: ((uint8_t *)p)[i] = v != v ? 0 : v >= 255 ? 255 : v <= 0 ? 0 : (uint8_t)v; break;
    case SEER_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case SEER_F64: ((double *)p)[i] = v; break;
    default: break;
    }
}

#endif
