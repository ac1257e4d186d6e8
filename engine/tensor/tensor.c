/* The tensor type: refcounted storages, views over them, dtype conversion, and the strided
 * iteration every CPU op is written on (a counter over the outer dims, a tight loop over the
 * last one). Ops live in ops.c; the Lua binding in lua_tensor.c. */
#include "tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_private.h"

static void storage_release(seer_storage_t *s) {
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    if (s->release) s->release(s->ctx);
    else free(s->data);
    free(s);
}

void seer_tensor_retain(seer_tensor_t *t) {
    if (t) __atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
}

void seer_tensor_release(seer_tensor_t *t) {
    if (!t || __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    storage_release(t->storage);
    free(t);
}

/* Checks shape and returns numel, or -1 when invalid or overflowing. */
static int64_t shape_numel(int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > SEER_TENSOR_MAX_DIMS || (ndim > 0 && !shape)) return -1;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n)) return -1;
    }
    if (n > INT64_MAX / 8) return -1;
    return n;
}

void seer__contig_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

static seer_tensor_t *header(seer_dtype_t dtype, int ndim, const int64_t *shape, const int64_t *strides) {
    seer_tensor_t *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->refs = 1;
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim > 0) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    if (strides) memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    else seer__contig_strides(ndim, shape, t->strides);
    return t;
}

static seer_tensor_t *tensor_alloc(seer_dtype_t dtype, int ndim, const int64_t *shape, int zero) {
    int64_t n = shape_numel(ndim, shape);
    if (n < 0 || (unsigned)dtype >= SEER_DTYPE_COUNT) return NULL;
    size_t nbytes = (size_t)n * seer_dtype_size(dtype);
    size_t alloc = (nbytes + 63) & ~(size_t)63;
    seer_tensor_t *t = header(dtype, ndim, shape, NULL);
    seer_storage_t *s = calloc(1, sizeof *s);
    void *data = aligned_alloc(64, alloc ? alloc : 64);
    if (!t || !s || !data) {
        free(t);
        free(s);
        free(data);
        return NULL;
    }
    if (zero) memset(data, 0, alloc ? alloc : 64);
    else memset((char *)data + nbytes, 0, (alloc ? alloc : 64) - nbytes);
    s->refs = 1;
    s->data = data;
    s->nbytes = nbytes;
    t->storage = s;
    return t;
}

seer_tensor_t *seer_tensor_new(seer_dtype_t dtype, int ndim, const int64_t *shape) { return tensor_alloc(dtype, ndim, shape, 1); }
seer_tensor_t *seer_tensor_new_uninit(seer_dtype_t dtype, int ndim, const int64_t *shape) {
    return tensor_alloc(dtype, ndim, shape, 0);
}

seer_tensor_t *seer_tensor_wrap(void *data, seer_dtype_t dtype, int ndim, const int64_t *shape,
                                const int64_t *strides, seer_tensor_release_fn release, void *ctx) {
    int64_t n = shape_numel(ndim, shape);
    if (n < 0 || (unsigned)dtype >= SEER_DTYPE_COUNT || (n > 0 && !data)) return NULL;
    seer_tensor_t *t = header(dtype, ndim, shape, strides);
    seer_storage_t *s = calloc(1, sizeof *s);
    if (!t || !s) {
        free(t);
        free(s);
        return NULL;
    }
    /* The extent the strides reach, so that nbytes describes the memory a view may touch. */
    int64_t extent = n > 0 ? 1 : 0;
    for (int i = 0; i < ndim && n > 0; i++) extent += (shape[i] - 1) * (t->strides[i] < 0 ? 0 : t->strides[i]);
    s->refs = 1;
    s->data = data;
    s->nbytes = (size_t)extent * seer_dtype_size(dtype);
    s->release = release;
    s->ctx = ctx;
    /* A wrap with release NULL must not free memory it does not own. */
    if (!release) s->release = seer__release_nothing;
    t->storage = s;
    return t;
}

void seer__release_nothing(void *ctx) { (void)ctx; }

seer_tensor_t *seer_tensor_view(const seer_tensor_t *t, int ndim, const int64_t *shape, const int64_t *strides,
                                int64_t offset) {
    if (ndim < 0 || ndim > SEER_TENSOR_MAX_DIMS) return NULL;
    seer_tensor_t *v = header(t->dtype, ndim, shape, strides);
    if (!v) return NULL;
    v->offset = offset;
    v->storage = t->storage;
    __atomic_add_fetch(&t->storage->refs, 1, __ATOMIC_RELAXED);
    return v;
}

int64_t seer_tensor_numel(const seer_tensor_t *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

bool seer_tensor_is_contiguous(const seer_tensor_t *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

void *seer_tensor_data(const seer_tensor_t *t) {
    return (char *)t->storage->data + t->offset * (int64_t)seer_dtype_size(t->dtype);
}

double seer_tensor_get_f64(const seer_tensor_t *t, const int64_t *index) {
    int64_t off = t->offset;
    for (int i = 0; i < t->ndim; i++) off += index[i] * t->strides[i];
    return seer__ld(t->storage->data, t->dtype, off);
}

void seer_tensor_set_f64(seer_tensor_t *t, const int64_t *index, double v) {
    int64_t off = t->offset;
    for (int i = 0; i < t->ndim; i++) off += index[i] * t->strides[i];
    seer__st(t->storage->data, t->dtype, off, v);
}

const char *seer_tensor_shape_str(const seer_tensor_t *t, char *buf, size_t n) {
    return seer__shape_str(t->ndim, t->shape, buf, n);
}

const char *seer__shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++) k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* ---- iteration ------------------------------------------------------------------------------ */

void seer__it_init(seer_it_t *it, int nd, const int64_t *shape, int nops) {
    memset(it, 0, sizeof *it);
    it->nops = nops;
    if (nd == 0) {
        it->nd = 1;
        it->shape[0] = 1;
    } else {
        it->nd = nd;
        memcpy(it->shape, shape, (size_t)nd * sizeof *shape);
    }
    it->inner = it->shape[it->nd - 1];
    int64_t rows = 1;
    for (int i = 0; i < it->nd - 1; i++) rows *= it->shape[i];
    for (int i = 0; i < it->nd; i++)
        if (it->shape[i] == 0) rows = 0;
    it->rows = rows;
}

void seer__it_next(seer_it_t *it) {
    for (int d = it->nd - 2; d >= 0; d--) {
        for (int k = 0; k < it->nops; k++) it->off[k] += it->st[k][d];
        if (++it->idx[d] < it->shape[d]) return;
        for (int k = 0; k < it->nops; k++) it->off[k] -= it->st[k][d] * it->shape[d];
        it->idx[d] = 0;
    }
}

/* ---- copies and conversion ------------------------------------------------------------------ */

int seer__broadcast_strides(const seer_tensor_t *src, int nd, const int64_t *shape, int64_t *st) {
    if (src->ndim > nd) return -1;
    for (int i = 0; i < nd; i++) {
        int j = i - (nd - src->ndim);
        if (j < 0) {
            st[i] = 0;
        } else if (src->shape[j] == shape[i]) {
            st[i] = src->shape[j] == 1 ? 0 : src->strides[j];
        } else if (src->shape[j] == 1) {
            st[i] = 0;
        } else {
            return -1;
        }
    }
    if (nd == 0) st[0] = 0;
    return 0;
}

int seer_tensor_copy(seer_tensor_t *dst, const seer_tensor_t *src, seer_err_t *err) {
    int64_t sst[SEER_TENSOR_MAX_DIMS];
    if (seer__broadcast_strides(src, dst->ndim, dst->shape, sst) < 0) {
        char a[128], b[128];
        return seer_err_set(err, SEER_EINVAL, "copy: source shape %s does not broadcast to %s",
                            seer_tensor_shape_str(src, a, sizeof a), seer_tensor_shape_str(dst, b, sizeof b));
    }
    seer_it_t it;
    seer__it_init(&it, dst->ndim, dst->shape, 2);
    for (int i = 0; i < dst->ndim; i++) {
        it.st[0][i] = dst->strides[i];
        it.st[1][i] = sst[i];
    }
    it.off[0] = dst->offset;
    it.off[1] = src->offset;
    int nd1 = it.nd - 1;
    int64_t ds = dst->ndim ? dst->strides[nd1] : 0, ss = dst->ndim ? sst[nd1] : 0;
    char *D = dst->storage->data;
    const char *S = src->storage->data;
    size_t es = seer_dtype_size(dst->dtype);
    bool same = dst->dtype == src->dtype;
    for (int64_t r = 0; r < it.rows; r++, seer__it_next(&it)) {
        int64_t od = it.off[0], os = it.off[1];
        if (same && ds == 1 && ss == 1) {
            memmove(D + od * (int64_t)es, S + os * (int64_t)es, (size_t)it.inner * es);
        } else if (same) {
            for (int64_t j = 0; j < it.inner; j++)
                memcpy(D + (od + j * ds) * (int64_t)es, S + (os + j * ss) * (int64_t)es, es);
        } else if (dst->dtype == SEER_F32 && src->dtype != SEER_I64 && src->dtype != SEER_F64) {
            float *df = (float *)(void *)D;
            for (int64_t j = 0; j < it.inner; j++) df[od + j * ds] = seer__ldf(S, src->dtype, os + j * ss);
        } else {
            for (int64_t j = 0; j < it.inner; j++)
                seer__st(D, dst->dtype, od + j * ds, seer__ld(S, src->dtype, os + j * ss));
        }
    }
    return 0;
}

seer_tensor_t *seer_tensor_to(const seer_tensor_t *t, seer_dtype_t dtype) {
    seer_tensor_t *o = seer_tensor_new(dtype, t->ndim, t->shape);
    if (o) seer_tensor_copy(o, t, NULL);
    return o;
}

seer_tensor_t *seer_tensor_contiguous(seer_tensor_t *t) {
    if (seer_tensor_is_contiguous(t)) {
        seer_tensor_retain(t);
        return t;
    }
    return seer_tensor_to(t, t->dtype);
}

seer_tensor_t *seer__f32_contig(const seer_tensor_t *t) {
    if (t->dtype == SEER_F32 && seer_tensor_is_contiguous(t)) {
        seer_tensor_retain((seer_tensor_t *)t);
        return (seer_tensor_t *)t;
    }
    return seer_tensor_to(t, SEER_F32);
}

/* ---- views ---------------------------------------------------------------------------------- */

static int bad_dim(seer_err_t *err, const char *op, int dim, const seer_tensor_t *t) {
    char b[128];
    return seer_err_set(err, SEER_EINVAL, "%s: dim %d out of range for a %d-d tensor %s", op, dim, t->ndim,
                        seer_tensor_shape_str(t, b, sizeof b));
}

#define OOM(err) seer_err_set(err, SEER_ENOMEM, "out of memory")

int seer_tensor_narrow(seer_tensor_t **out, const seer_tensor_t *t, int dim, int64_t start, int64_t len,
                       seer_err_t *err) {
    if (dim < 0 || dim >= t->ndim) return bad_dim(err, "narrow", dim, t);
    if (start < 0 || len < 0 || start + len > t->shape[dim]) {
        char b[128];
        return seer_err_set(err, SEER_EINVAL, "narrow: range [%lld, %lld) out of bounds for dim %d of %s",
                            (long long)start, (long long)(start + len), dim, seer_tensor_shape_str(t, b, sizeof b));
    }
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[dim] = len;
    *out = seer_tensor_view(t, t->ndim, shape, t->strides, t->offset + start * t->strides[dim]);
    return *out ? 0 : OOM(err);
}

int seer_tensor_select(seer_tensor_t **out, const seer_tensor_t *t, int dim, int64_t index, seer_err_t *err) {
    if (dim < 0 || dim >= t->ndim) return bad_dim(err, "select", dim, t);
    if (index < 0 || index >= t->shape[dim]) {
        char b[128];
        return seer_err_set(err, SEER_EINVAL, "select: index %lld out of range for dim %d of %s", (long long)index,
                            dim, seer_tensor_shape_str(t, b, sizeof b));
    }
    int64_t shape[SEER_TENSOR_MAX_DIMS], st[SEER_TENSOR_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i == dim) continue;
        shape[k] = t->shape[i];
        st[k++] = t->strides[i];
    }
    *out = seer_tensor_view(t, k, shape, st, t->offset + index * t->strides[dim]);
    return *out ? 0 : OOM(err);
}

int seer_tensor_transpose(seer_tensor_t **out, const seer_tensor_t *t, int d1, int d2, seer_err_t *err) {
    if (d1 < 0 || d1 >= t->ndim) return bad_dim(err, "transpose", d1, t);
    if (d2 < 0 || d2 >= t->ndim) return bad_dim(err, "transpose", d2, t);
    int64_t shape[SEER_TENSOR_MAX_DIMS], st[SEER_TENSOR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(st, t->strides, sizeof st);
    shape[d1] = t->shape[d2];
    shape[d2] = t->shape[d1];
    st[d1] = t->strides[d2];
    st[d2] = t->strides[d1];
    *out = seer_tensor_view(t, t->ndim, shape, st, t->offset);
    return *out ? 0 : OOM(err);
}

/* Strides for viewing t with a new shape without copying (numpy's _attempt_nocopy_reshape):
 * walk groups of old dims whose product matches a group of new dims; each old group must be
 * contiguous in itself. */
static bool nocopy_strides(const seer_tensor_t *t, int nd, const int64_t *shape, int64_t *st) {
    int64_t od[SEER_TENSOR_MAX_DIMS], os[SEER_TENSOR_MAX_DIMS];
    int on = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1) continue;
        od[on] = t->shape[i];
        os[on++] = t->strides[i];
    }
    int oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < nd && oi < on) {
        int64_t np = shape[ni], op = od[oi];
        while (np != op) {
            if (np < op) np *= shape[nj++];
            else op *= od[oj++];
        }
        for (int ok = oi; ok < oj - 1; ok++)
            if (os[ok] != od[ok + 1] * os[ok + 1]) return false;
        st[nj - 1] = os[oj - 1];
        for (int nk = nj - 1; nk > ni; nk--) st[nk - 1] = st[nk] * shape[nk];
        ni = nj++;
        oi = oj++;
    }
    for (int i = ni; i < nd; i++) st[i] = 1; /* trailing size-1 dims */
    return true;
}

int seer_tensor_reshape(seer_tensor_t **out, seer_tensor_t *t, int ndim, const int64_t *shape_in, bool copy_ok,
                        seer_err_t *err) {
    char a[128], b[128];
    const char *op = copy_ok ? "reshape" : "view";
    if (ndim < 0 || ndim > SEER_TENSOR_MAX_DIMS)
        return seer_err_set(err, SEER_EINVAL, "%s: %d dimensions (at most %d)", op, ndim, SEER_TENSOR_MAX_DIMS);
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    int infer = -1;
    int64_t known = 1, n = seer_tensor_numel(t);
    for (int i = 0; i < ndim; i++) {
        shape[i] = shape_in[i];
        if (shape[i] == -1 && infer < 0) {
            infer = i;
        } else if (shape[i] < 0 || __builtin_mul_overflow(known, shape[i], &known)) {
            return seer_err_set(err, SEER_EINVAL, "%s: invalid shape %s", op, seer__shape_str(ndim, shape_in, a, sizeof a));
        }
    }
    if (infer >= 0) {
        if (known == 0 || n % known != 0)
            return seer_err_set(err, SEER_EINVAL, "%s: shape %s is incompatible with %s (%lld elements)",
                                op, seer__shape_str(ndim, shape_in, a, sizeof a), seer_tensor_shape_str(t, b, sizeof b),
                                (long long)n);
        shape[infer] = n / known;
        known = n;
    }
    if (known != n)
        return seer_err_set(err, SEER_EINVAL, "%s: shape %s is incompatible with %s (%lld elements)",
                            op, seer__shape_str(ndim, shape_in, a, sizeof a), seer_tensor_shape_str(t, b, sizeof b),
                            (long long)n);
    int64_t st[SEER_TENSOR_MAX_DIMS];
    if (n == 0 || seer_tensor_is_contiguous(t)) {
        seer__contig_strides(ndim, shape, st);
    } else if (!nocopy_strides(t, ndim, shape, st)) {
        if (!copy_ok)
            return seer_err_set(err, SEER_EINVAL,
                                "view: cannot view the non-contiguous tensor %s as %s; use reshape or contiguous()",
                                seer_tensor_shape_str(t, b, sizeof b), seer__shape_str(ndim, shape, a, sizeof a));
        seer_tensor_t *c = seer_tensor_contiguous(t);
        if (!c) return OOM(err);
        seer__contig_strides(ndim, shape, st);
        *out = seer_tensor_view(c, ndim, shape, st, c->offset);
        seer_tensor_release(c);
        return *out ? 0 : OOM(err);
    }
    *out = seer_tensor_view(t, ndim, shape, st, t->offset);
    return *out ? 0 : OOM(err);
}
