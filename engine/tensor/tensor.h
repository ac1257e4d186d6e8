/* CPU tensors: a dtype, a shape and strides over a refcounted storage that may be owned by
 * seer (seer_tensor_new) or by someone else (seer_tensor_wrap: mmapped weights, activations of
 * the model runtime, read without copying). Views (narrow, select, transpose, reshape) share
 * the storage. Compute ops read any dtype and produce f32 (accumulating reductions in f64);
 * copies and views keep the dtype. The Lua module seer.core.tensor is built on this API. */
#ifndef SEER_TENSOR_H
#define SEER_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../seer.h"
#include "dtype.h"

#define SEER_TENSOR_MAX_DIMS 8

typedef struct lua_State lua_State;

/* Called once when the last tensor referring to a wrapped storage goes away. */
typedef void (*seer_tensor_release_fn)(void *ctx);

typedef struct seer_storage {
    int refs; /* atomic */
    void *data;
    size_t nbytes;
    seer_tensor_release_fn release; /* NULL: data was allocated by seer and is freed by it */
    void *ctx;
    /* Set for read-only memory (a PROT_READ file mapping): the Lua layer refuses in-place ops. */
    bool readonly;
} seer_storage_t;

/* Fields are public for fast kernels; change them only through the functions below. strides
 * and offset count elements, not bytes. A 0-d tensor (ndim 0) holds one element. */
typedef struct seer_tensor {
    int refs; /* atomic */
    seer_dtype_t dtype;
    int ndim;
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    int64_t strides[SEER_TENSOR_MAX_DIMS];
    int64_t offset;
    seer_storage_t *storage;
} seer_tensor_t;

/* A new zeroed, contiguous tensor whose data is 64-byte aligned; refcount 1. NULL when out of
 * memory or when ndim/shape are invalid (ndim outside 0..8, a negative size, overflow). */
seer_tensor_t *seer_tensor_new(seer_dtype_t dtype, int ndim, const int64_t *shape);
/* The same without zeroing the elements (the alignment padding after them is zeroed), for a
 * caller that writes every element before anyone reads the tensor. */
seer_tensor_t *seer_tensor_new_uninit(seer_dtype_t dtype, int ndim, const int64_t *shape);

/* A tensor over memory seer does not own. strides NULL means contiguous row-major. release
 * (may be NULL) is called with ctx when the last reference to the storage is dropped. On
 * failure returns NULL and does not call release: the caller still owns data. */
seer_tensor_t *seer_tensor_wrap(void *data, seer_dtype_t dtype, int ndim, const int64_t *shape,
                                const int64_t *strides, seer_tensor_release_fn release, void *ctx);

/* A new tensor header over t's storage (shares data, retains the storage). The caller
 * guarantees that every element addressed lies inside the storage. */
seer_tensor_t *seer_tensor_view(const seer_tensor_t *t, int ndim, const int64_t *shape, const int64_t *strides,
                                int64_t offset);

void seer_tensor_retain(seer_tensor_t *t);
void seer_tensor_release(seer_tensor_t *t); /* NULL is fine */

int64_t seer_tensor_numel(const seer_tensor_t *t);
bool seer_tensor_is_contiguous(const seer_tensor_t *t);
/* Address of the first element (storage data + offset). */
void *seer_tensor_data(const seer_tensor_t *t);

/* t itself (retained) when already contiguous, else a contiguous copy of the same dtype. The
 * caller releases the result. NULL when out of memory. */
seer_tensor_t *seer_tensor_contiguous(seer_tensor_t *t);
/* A contiguous copy converted to dtype (NULL when out of memory). */
seer_tensor_t *seer_tensor_to(const seer_tensor_t *t, seer_dtype_t dtype);

/* Element access by a full index (ndim entries, 0-based, unchecked). */
double seer_tensor_get_f64(const seer_tensor_t *t, const int64_t *index);
void seer_tensor_set_f64(seer_tensor_t *t, const int64_t *index, double v);

/* Views. Dims and indices are 0-based here (the Lua layer translates). Errors: SEER_EINVAL
 * with a message naming the shape. */
int seer_tensor_narrow(seer_tensor_t **out, const seer_tensor_t *t, int dim, int64_t start, int64_t len,
                       seer_err_t *err);
int seer_tensor_select(seer_tensor_t **out, const seer_tensor_t *t, int dim, int64_t index, seer_err_t *err);
int seer_tensor_transpose(seer_tensor_t **out, const seer_tensor_t *t, int d1, int d2, seer_err_t *err);
/* A view with a new shape when the strides allow it, else (copy_ok) a contiguous copy. One
 * size may be -1 (inferred). */
int seer_tensor_reshape(seer_tensor_t **out, seer_tensor_t *t, int ndim, const int64_t *shape, bool copy_ok,
                        seer_err_t *err);

/* dst <- src with numpy broadcasting of src to dst's shape and dtype conversion. */
int seer_tensor_copy(seer_tensor_t *dst, const seer_tensor_t *src, seer_err_t *err);

/* Elementwise binary ops with numpy broadcasting; the result is f32 (bool-valued ops give 1/0). */
typedef enum seer_tensor_binop {
    SEER_OP_ADD, SEER_OP_SUB, SEER_OP_MUL, SEER_OP_DIV, SEER_OP_POW, SEER_OP_MAXIMUM, SEER_OP_MINIMUM,
    SEER_OP_EQ, SEER_OP_NE, SEER_OP_LT, SEER_OP_LE, SEER_OP_GT, SEER_OP_GE, SEER_OP_BINOP_COUNT
} seer_tensor_binop_t;
/* a or b may be NULL, meaning the scalar sa / sb. out NULL: allocate the result; out == a: in
 * place (b must broadcast to a's shape; a keeps its dtype). name: for messages ("add"). */
int seer_tensor_binary(seer_tensor_t **out, seer_tensor_binop_t op, const seer_tensor_t *a, double sa,
                       const seer_tensor_t *b, double sb, bool inplace, const char *name, seer_err_t *err);

typedef enum seer_tensor_unop {
    SEER_OP_NEG, SEER_OP_ABS, SEER_OP_EXP, SEER_OP_LOG, SEER_OP_SQRT, SEER_OP_TANH, SEER_OP_RELU,
    SEER_OP_SIGMOID, SEER_OP_GELU, SEER_OP_SILU, SEER_OP_SIN, SEER_OP_COS, SEER_OP_FLOOR, SEER_OP_ROUND,
    SEER_OP_RSQRT, SEER_OP_UNOP_COUNT
} seer_tensor_unop_t;
/* f32 result; inplace writes into t (keeping its dtype). */
int seer_tensor_unary(seer_tensor_t **out, seer_tensor_unop_t op, seer_tensor_t *t, bool inplace, seer_err_t *err);

typedef enum seer_tensor_redop {
    SEER_RED_SUM, SEER_RED_MEAN, SEER_RED_MAX, SEER_RED_MIN, SEER_RED_ARGMAX, SEER_RED_ARGMIN, SEER_RED_VAR,
    SEER_RED_STD, SEER_RED_PROD, SEER_RED_NORM
} seer_tensor_redop_t;
/* Reduces over dim (0-based), or over everything when dim < 0 (a 0-d result). Values are f32,
 * ARGMAX/ARGMIN give 0-based i64 indices (first occurrence). VAR/STD are unbiased (n - 1),
 * NORM uses p. keepdim keeps the reduced dim with size 1. */
int seer_tensor_reduce(seer_tensor_t **out, seer_tensor_redop_t op, const seer_tensor_t *t, int dim, bool keepdim,
                       double p, seer_err_t *err);

/* Matrix product: 1-d x 1-d (dot, 0-d result), 2-d x 2-d, 1-d/2-d mixed (vector-matrix),
 * and batched 3-d x 3-d / 3-d x 2-d; f32 result, f32 accumulation. */
int seer_tensor_matmul(seer_tensor_t **out, const seer_tensor_t *a, const seer_tensor_t *b, seer_err_t *err);

/* (log-)softmax along dim (0-based); f32 result. */
int seer_tensor_softmax(seer_tensor_t **out, const seer_tensor_t *t, int dim, bool log, seer_err_t *err);

/* The k largest (or smallest) along dim, sorted; ties keep the lower index first. values f32,
 * indices i64 0-based. */
int seer_tensor_topk(seer_tensor_t **values, seer_tensor_t **indices, const seer_tensor_t *t, int64_t k, int dim,
                     bool largest, seer_err_t *err);

/* "[3,4]" into buf (for messages). */
const char *seer_tensor_shape_str(const seer_tensor_t *t, char *buf, size_t n);

/* Lua: push a userdata holding its own reference (t is retained; the caller keeps its own). */
void seer_tensor_push(lua_State *L, seer_tensor_t *t);
/* The tensor at idx, or a Lua error "bad argument #idx (tensor expected, got TYPE)". The
 * reference stays owned by the userdata. */
seer_tensor_t *seer_tensor_check(lua_State *L, int idx);
/* NULL when the value at idx is not a tensor. */
seer_tensor_t *seer_tensor_test(lua_State *L, int idx);
/* package.preload["seer.core.tensor"]. */
int seer_tensor_luaopen(lua_State *L);

#endif
