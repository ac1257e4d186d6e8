/* CPU compute ops on tensors: elementwise with numpy broadcasting, reductions along a dim,
 * matmul (cache-blocked f32, rows split over the thread pool), softmax and topk. Inputs of
 * any dtype are widened to f32 (f64 accumulators in reductions); results are f32. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* the inner loops below are written for the vectorizer */
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "tensor.h"
#include "tensor_private.h"

#define OOM(err) seer_err_set(err, SEER_ENOMEM, "out of memory")

/* ---- elementwise ---------------------------------------------------------------------------- */

static inline float binop(seer_tensor_binop_t op, float x, float y) {
    switch (op) {
    case SEER_OP_ADD: return x + y;
    case SEER_OP_SUB: return x - y;
    case SEER_OP_MUL: return x * y;
    case SEER_OP_DIV: return x / y;
    case SEER_OP_POW: return y == 2.0f ? x * x : powf(x, y);
    case SEER_OP_MAXIMUM: return x != x || x > y ? x : y;
    case SEER_OP_MINIMUM: return x != x || x < y ? x : y;
    case SEER_OP_EQ: return x == y;
    case SEER_OP_NE: return x != y;
    case SEER_OP_LT: return x < y;
    case SEER_OP_LE: return x <= y;
    case SEER_OP_GT: return x > y;
    case SEER_OP_GE: return x >= y;
    default: return 0;
    }
}

int seer_tensor_binary(seer_tensor_t **out, seer_tensor_binop_t op, const seer_tensor_t *a, double sa,
                       const seer_tensor_t *b, double sb, bool inplace, const char *name, seer_err_t *err) {
    char s1[128], s2[128];
    float fa = (float)sa, fb = (float)sb;
    int nd;
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    /* Output shape: numpy rules, aligned from the right. */
    int na = a ? a->ndim : 0, nb = b ? b->ndim : 0;
    nd = na > nb ? na : nb;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - na), ib = i - (nd - nb);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return seer_err_set(err, SEER_EINVAL, "%s: shapes %s and %s do not broadcast", name,
                                seer__shape_str(na, a ? a->shape : NULL, s1, sizeof s1),
                                seer__shape_str(nb, b ? b->shape : NULL, s2, sizeof s2));
        shape[i] = da == 1 ? db : da;
    }
    seer_tensor_t *o;
    if (inplace) {
        o = (seer_tensor_t *)a;
        if (nd != a->ndim || memcmp(shape, a->shape, (size_t)nd * sizeof *shape) != 0)
            return seer_err_set(err, SEER_EINVAL, "%s: shape %s does not broadcast to the in-place target %s", name,
                                seer__shape_str(nb, b->shape, s2, sizeof s2), seer__shape_str(na, a->shape, s1, sizeof s1));
    } else {
        o = seer_tensor_new(SEER_F32, nd, shape);
        if (!o) return OOM(err);
    }
    seer_it_t it;
    seer__it_init(&it, nd, shape, 3);
    int64_t bst[SEER_TENSOR_MAX_DIMS] = {0};
    for (int i = 0; i < nd; i++) it.st[0][i] = o->strides[i];
    if (a) {
        seer__broadcast_strides(a, nd, shape, bst);
        for (int i = 0; i < nd; i++) it.st[1][i] = bst[i];
        it.off[1] = a->offset;
    }
    if (b) {
        seer__broadcast_strides(b, nd, shape, bst);
        for (int i = 0; i < nd; i++) it.st[2][i] = bst[i];
        it.off[2] = b->offset;
    }
    it.off[0] = o->offset;
    int l = it.nd - 1;
    int64_t so = nd ? it.st[0][l] : 0, s_a = nd ? it.st[1][l] : 0, s_b = nd ? it.st[2][l] : 0;
    void *O = o->storage->data;
    const void *A = a ? a->storage->data : NULL, *B = b ? b->storage->data : NULL;
    bool fast = o->dtype == SEER_F32 && (!a || a->dtype == SEER_F32) && (!b || b->dtype == SEER_F32);
    for (int64_t r = 0; r < it.rows; r++, seer__it_next(&it)) {
        int64_t oo = it.off[0], oa = it.off[1], ob = it.off[2];
        if (fast) {
            float *po = (float *)O + oo;
            const float *pa = a ? (const float *)A + oa : &fa, *pb = b ? (const float *)B + ob : &fb;
            int64_t sta = a ? s_a : 0, stb = b ? s_b : 0;
            if (so == 1 && sta == 1 && stb == 1 && op == SEER_OP_ADD) {
                for (int64_t j = 0; j < it.inner; j++) po[j] = pa[j] + pb[j];
            } else if (so == 1 && sta == 1 && stb == 1 && op == SEER_OP_MUL) {
                for (int64_t j = 0; j < it.inner; j++) po[j] = pa[j] * pb[j];
            } else {
                for (int64_t j = 0; j < it.inner; j++) po[j * so] = binop(op, pa[j * sta], pb[j * stb]);
            }
        } else {
            for (int64_t j = 0; j < it.inner; j++) {
                float x = a ? seer__ldf(A, a->dtype, oa + j * s_a) : fa;
                float y = b ? seer__ldf(B, b->dtype, ob + j * s_b) : fb;
                seer__st(O, o->dtype, oo + j * so, binop(op, x, y));
            }
        }
    }
    if (!inplace) *out = o;
    else if (out) *out = o;
    return 0;
}

static inline float unop(seer_tensor_unop_t op, float x) {
    switch (op) {
    case SEER_OP_NEG: return -x;
    case SEER_OP_ABS: return fabsf(x);
    case SEER_OP_EXP: return expf(x);
    case SEER_OP_LOG: return logf(x);
    case SEER_OP_SQRT: return sqrtf(x);
    case SEER_OP_RSQRT: return 1.0f / sqrtf(x);
    case SEER_OP_TANH: return tanhf(x);
    case SEER_OP_RELU: return x > 0 ? x : 0.0f * (x == x ? 1.0f : x); /* keeps NaN */
    case SEER_OP_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case SEER_OP_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case SEER_OP_SILU: return x / (1.0f + expf(-x));
    case SEER_OP_SIN: return sinf(x);
    case SEER_OP_COS: return cosf(x);
    case SEER_OP_FLOOR: return floorf(x);
    case SEER_OP_ROUND: return nearbyintf(x);
    default: return x;
    }
}

int seer_tensor_unary(seer_tensor_t **out, seer_tensor_unop_t op, seer_tensor_t *t, bool inplace, seer_err_t *err) {
    seer_tensor_t *o = inplace ? t : seer_tensor_new(SEER_F32, t->ndim, t->shape);
    if (!o) return OOM(err);
    seer_it_t it;
    seer__it_init(&it, t->ndim, t->shape, 2);
    for (int i = 0; i < t->ndim; i++) {
        it.st[0][i] = o->strides[i];
        it.st[1][i] = t->strides[i];
    }
    it.off[0] = o->offset;
    it.off[1] = t->offset;
    int l = it.nd - 1;
    int64_t so = t->ndim ? it.st[0][l] : 0, si = t->ndim ? it.st[1][l] : 0;
    for (int64_t r = 0; r < it.rows; r++, seer__it_next(&it)) {
        for (int64_t j = 0; j < it.inner; j++)
            seer__st(o->storage->data, o->dtype, it.off[0] + j * so,
                     unop(op, seer__ldf(t->storage->data, t->dtype, it.off[1] + j * si)));
    }
    if (out) *out = o;
    return 0;
}

/* ---- lanes: every 1-d run along one dim ----------------------------------------------------- */

/* Sets up it so that each row is one lane of t along dim (the dim moved last); op 1 (if out)
 * walks out's lanes along the same dim. */
static void lanes_init(seer_it_t *it, const seer_tensor_t *t, int dim, const seer_tensor_t *o, const seer_tensor_t *o2) {
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    int k = 0;
    const seer_tensor_t *ops[3] = {t, o, o2};
    for (int i = 0; i < t->ndim; i++)
        if (i != dim) shape[k++] = t->shape[i];
    shape[k++] = t->shape[dim];
    seer__it_init(it, k, shape, 3);
    for (int n = 0; n < 3; n++) {
        if (!ops[n]) continue;
        int j = 0;
        for (int i = 0; i < t->ndim; i++)
            if (i != dim) it->st[n][j++] = ops[n]->strides[i];
        it->st[n][j] = ops[n]->strides[dim];
        it->off[n] = ops[n]->offset;
    }
}

/* ---- reductions ----------------------------------------------------------------------------- */

static double reduce_lane(seer_tensor_redop_t op, const void *p, seer_dtype_t dt, int64_t off, int64_t n, int64_t s,
                          double pnorm) {
    double acc;
    switch (op) {
    case SEER_RED_SUM:
    case SEER_RED_MEAN:
        acc = 0;
        for (int64_t j = 0; j < n; j++) acc += seer__ld(p, dt, off + j * s);
        return op == SEER_RED_MEAN ? (n ? acc / (double)n : NAN) : acc;
    case SEER_RED_PROD:
        acc = 1;
        for (int64_t j = 0; j < n; j++) acc *= seer__ld(p, dt, off + j * s);
        return acc;
    case SEER_RED_VAR:
    case SEER_RED_STD: {
        if (n < 2) return NAN;
        double m = 0;
        for (int64_t j = 0; j < n; j++) m += seer__ld(p, dt, off + j * s);
        m /= (double)n;
        acc = 0;
        for (int64_t j = 0; j < n; j++) {
            double d = seer__ld(p, dt, off + j * s) - m;
            acc += d * d;
        }
        acc /= (double)(n - 1);
        return op == SEER_RED_STD ? sqrt(acc) : acc;
    }
    case SEER_RED_NORM:
        acc = 0;
        if (isinf(pnorm)) {
            for (int64_t j = 0; j < n; j++) {
                double v = fabs(seer__ld(p, dt, off + j * s));
                if (v > acc || v != v) acc = v;
            }
            return acc;
        }
        for (int64_t j = 0; j < n; j++) {
            double v = fabs(seer__ld(p, dt, off + j * s));
            acc += pnorm == 2 ? v * v : pnorm == 1 ? v : pow(v, pnorm);
        }
        return pnorm == 2 ? sqrt(acc) : pnorm == 1 ? acc : pow(acc, 1.0 / pnorm);
    default: { /* max, min, argmax, argmin: NaN wins, first occurrence on ties */
        bool mx = op == SEER_RED_MAX || op == SEER_RED_ARGMAX;
        int64_t best = 0;
        double bv = seer__ld(p, dt, off);
        for (int64_t j = 1; j < n && bv == bv; j++) {
            double v = seer__ld(p, dt, off + j * s);
            if (v != v || (mx ? v > bv : v < bv)) {
                bv = v;
                best = j;
            }
        }
        return op == SEER_RED_ARGMAX || op == SEER_RED_ARGMIN ? (double)best : bv;
    }
    }
}

int seer_tensor_reduce(seer_tensor_t **out, seer_tensor_redop_t op, const seer_tensor_t *t, int dim, bool keepdim,
                       double p, seer_err_t *err) {
    char b[128];
    bool arg = op == SEER_RED_ARGMAX || op == SEER_RED_ARGMIN;
    bool needs_elems = op == SEER_RED_MAX || op == SEER_RED_MIN || arg;
    seer_dtype_t odt = arg ? SEER_I64 : SEER_F32;
    if (dim < 0) {
        int64_t n = seer_tensor_numel(t);
        if (needs_elems && n == 0)
            return seer_err_set(err, SEER_EINVAL, "reduction over an empty tensor %s has no identity",
                                seer_tensor_shape_str(t, b, sizeof b));
        seer_tensor_t *c = seer_tensor_contiguous((seer_tensor_t *)t);
        if (!c) return OOM(err);
        int64_t ones[SEER_TENSOR_MAX_DIMS];
        for (int i = 0; i < t->ndim; i++) ones[i] = 1;
        seer_tensor_t *o = seer_tensor_new(odt, keepdim ? t->ndim : 0, ones);
        if (!o) {
            seer_tensor_release(c);
            return OOM(err);
        }
        seer__st(o->storage->data, odt, 0, reduce_lane(op, c->storage->data, c->dtype, c->offset, n, 1, p));
        seer_tensor_release(c);
        *out = o;
        return 0;
    }
    if (dim >= t->ndim)
        return seer_err_set(err, SEER_EINVAL, "reduction: dim %d out of range for a %d-d tensor %s", dim, t->ndim,
                            seer_tensor_shape_str(t, b, sizeof b));
    if (needs_elems && t->shape[dim] == 0)
        return seer_err_set(err, SEER_EINVAL, "reduction over an empty dim %d of %s", dim,
                            seer_tensor_shape_str(t, b, sizeof b));
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[dim] = 1;
    seer_tensor_t *o = seer_tensor_new(odt, t->ndim, shape);
    if (!o) return OOM(err);
    seer_it_t it;
    lanes_init(&it, t, dim, o, NULL);
    int64_t n = t->shape[dim], s = t->strides[dim];
    it.inner = 1; /* we walk lanes ourselves: one "row" per lane start */
    int64_t lanes = 1;
    for (int i = 0; i < t->ndim; i++)
        if (i != dim) lanes *= t->shape[i];
    /* it's rows are over all dims but the last (the lane dim), so one row == one lane. */
    for (int64_t r = 0; r < lanes; r++, seer__it_next(&it))
        seer__st(o->storage->data, odt, it.off[1], reduce_lane(op, t->storage->data, t->dtype, it.off[0], n, s, p));
    if (!keepdim) {
        int64_t sh2[SEER_TENSOR_MAX_DIMS];
        int k = 0;
        for (int i = 0; i < t->ndim; i++)
            if (i != dim) sh2[k++] = t->shape[i];
        o->ndim = k;
        memcpy(o->shape, sh2, sizeof(int64_t) * (size_t)k);
        seer__contig_strides(k, o->shape, o->strides);
    }
    *out = o;
    return 0;
}

/* ---- softmax -------------------------------------------------------------------------------- */

int seer_tensor_softmax(seer_tensor_t **out, const seer_tensor_t *t, int dim, bool log, seer_err_t *err) {
    char b[128];
    if (dim < 0 || dim >= t->ndim)
        return seer_err_set(err, SEER_EINVAL, "softmax: dim %d out of range for a %d-d tensor %s", dim, t->ndim,
                            seer_tensor_shape_str(t, b, sizeof b));
    seer_tensor_t *o = seer_tensor_new(SEER_F32, t->ndim, t->shape);
    if (!o) return OOM(err);
    seer_it_t it;
    lanes_init(&it, t, dim, o, NULL);
    int64_t n = t->shape[dim], s = t->strides[dim], so = o->strides[dim];
    int64_t lanes = n ? seer_tensor_numel(t) / n : 0;
    float *O = o->storage->data;
    for (int64_t r = 0; r < lanes; r++, seer__it_next(&it)) {
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            float v = seer__ldf(t->storage->data, t->dtype, it.off[0] + j * s);
            O[it.off[1] + j * so] = v;
            if (v > mx) mx = v;
        }
        double sum = 0;
        for (int64_t j = 0; j < n; j++) sum += exp((double)O[it.off[1] + j * so] - mx);
        if (log) {
            float lse = (float)(mx + (float)logf((float)sum));
            for (int64_t j = 0; j < n; j++) O[it.off[1] + j * so] -= lse;
        } else {
            float inv = (float)(1.0 / sum);
            for (int64_t j = 0; j < n; j++) O[it.off[1] + j * so] = expf(O[it.off[1] + j * so] - mx) * inv;
        }
    }
    *out = o;
    return 0;
}

/* ---- topk ----------------------------------------------------------------------------------- */

typedef struct {
    float v;
    int64_t i;
} vi_t;

/* NaN counts as the largest value, ties keep the lower index first. */
static int cmp_desc(const void *pa, const void *pb) {
    const vi_t *a = pa, *b = pb;
    bool na = a->v != a->v, nb = b->v != b->v;
    if (na != nb) return na ? -1 : 1;
    if (!na && a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static int cmp_asc(const void *pa, const void *pb) {
    const vi_t *a = pa, *b = pb;
    bool na = a->v != a->v, nb = b->v != b->v;
    if (na != nb) return na ? 1 : -1;
    if (!na && a->v != b->v) return a->v < b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

/* The first k of buf[0..n) under cmp (a total order: values, then indices), in order, into
 * buf[0..k): a heap of the k best seen so far whose root is the worst of them, so each element
 * past the first k costs one comparison unless it enters. The order is total, so the result is
 * the sorted lane's first k exactly. topk(20) of [512, 32000] logits (a prompt's top tokens at
 * every position) took 3.2 s as a qsort of each lane, 0.12 s so; topk(5) 0.59 s by five
 * selection passes per lane, 0.10 s (t = seer.tensor.randn(512, 32000), t:topk(k) timed once,
 * Zen 3 VM). */
static void heap_down(vi_t *h, int64_t k, int64_t at, int (*cmp)(const void *, const void *)) {
    for (;;) {
        int64_t l = 2 * at + 1, r = l + 1, worst = at;
        if (l < k && cmp(&h[l], &h[worst]) > 0) worst = l;
        if (r < k && cmp(&h[r], &h[worst]) > 0) worst = r;
        if (worst == at) return;
        vi_t tmp = h[at];
        h[at] = h[worst];
        h[worst] = tmp;
        at = worst;
    }
}
static void first_k(vi_t *buf, int64_t n, int64_t k, int (*cmp)(const void *, const void *)) {
    for (int64_t a = k / 2 - 1; a >= 0; a--) heap_down(buf, k, a, cmp);
    for (int64_t j = k; j < n; j++)
        if (cmp(&buf[j], &buf[0]) < 0) {
            buf[0] = buf[j];
            heap_down(buf, k, 0, cmp);
        }
    qsort(buf, (size_t)k, sizeof *buf, cmp);
}

int seer_tensor_topk(seer_tensor_t **values, seer_tensor_t **indices, const seer_tensor_t *t, int64_t k, int dim,
                     bool largest, seer_err_t *err) {
    char b[128];
    if (dim < 0 || dim >= t->ndim)
        return seer_err_set(err, SEER_EINVAL, "topk: dim %d out of range for a %d-d tensor %s", dim, t->ndim,
                            seer_tensor_shape_str(t, b, sizeof b));
    int64_t n = t->shape[dim];
    if (k < 0 || k > n)
        return seer_err_set(err, SEER_EINVAL, "topk: k = %lld out of range for dim %d of size %lld (shape %s)",
                            (long long)k, dim, (long long)n, seer_tensor_shape_str(t, b, sizeof b));
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[dim] = k;
    seer_tensor_t *v = seer_tensor_new(SEER_F32, t->ndim, shape), *ix = seer_tensor_new(SEER_I64, t->ndim, shape);
    vi_t *buf = malloc(sizeof(vi_t) * (size_t)(n ? n : 1));
    if (!v || !ix || !buf) {
        seer_tensor_release(v);
        seer_tensor_release(ix);
        free(buf);
        return OOM(err);
    }
    seer_it_t it;
    lanes_init(&it, t, dim, v, ix);
    int64_t s = t->strides[dim], sv = v->strides[dim], si = ix->strides[dim];
    int64_t lanes = 1;
    for (int i = 0; i < t->ndim; i++)
        if (i != dim) lanes *= t->shape[i];
    float *V = v->storage->data;
    int64_t *I = ix->storage->data;
    for (int64_t r = 0; r < lanes && k > 0; r++, seer__it_next(&it)) {
        for (int64_t j = 0; j < n; j++) {
            buf[j].v = seer__ldf(t->storage->data, t->dtype, it.off[0] + j * s);
            buf[j].i = j;
        }
        /* k under a quarter of the lane: a heap of the k best (first_k); a few of a short
         * lane: selection passes; else the whole lane sorted */
        if (k > 0 && k < n / 4) {
            first_k(buf, n, k, largest ? cmp_desc : cmp_asc);
        } else if (k <= 16) {
            for (int64_t a = 0; a < k; a++) {
                int64_t best = a;
                for (int64_t j = a + 1; j < n; j++)
                    if ((largest ? cmp_desc : cmp_asc)(&buf[j], &buf[best]) < 0) best = j;
                vi_t tmp = buf[a];
                buf[a] = buf[best];
                buf[best] = tmp;
                /* the swap moves buf[a] past lower indices; order stays correct because we
                 * compare full (value, index) keys, not positions */
            }
        } else {
            qsort(buf, (size_t)n, sizeof *buf, largest ? cmp_desc : cmp_asc);
        }
        for (int64_t j = 0; j < k; j++) {
            V[it.off[1] + j * sv] = buf[j].v;
            I[it.off[2] + j * si] = buf[j].i;
        }
    }
    free(buf);
    *values = v;
    *indices = ix;
    return 0;
}

/* ---- matmul --------------------------------------------------------------------------------- */

typedef struct {
    const float *A, *B;
    float *C;
    int64_t M, K, N;
} gemm_t;

#define KB 128
#define NB 256

/* C[m0:m1] += A[m0:m1] B, blocked so a KB x NB panel of B stays in cache while rows stream. */
static void gemm_rows(void *ctx, size_t m0, size_t m1, int thread) {
    (void)thread;
    const gemm_t *g = ctx;
    int64_t K = g->K, N = g->N;
    for (int64_t kk = 0; kk < K; kk += KB) {
        int64_t ke = kk + KB < K ? kk + KB : K;
        for (int64_t jj = 0; jj < N; jj += NB) {
            int64_t nb = jj + NB < N ? NB : N - jj;
            for (int64_t i = (int64_t)m0; i < (int64_t)m1; i++) {
                float *restrict c = g->C + i * N + jj;
                const float *a = g->A + i * K;
                int64_t k = kk;
                for (; k + 4 <= ke; k += 4) {
                    float a0 = a[k], a1 = a[k + 1], a2 = a[k + 2], a3 = a[k + 3];
                    const float *restrict b0 = g->B + k * N + jj, *restrict b1 = b0 + N, *restrict b2 = b1 + N,
                                         *restrict b3 = b2 + N;
                    for (int64_t j = 0; j < nb; j++) c[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
                }
                for (; k < ke; k++) {
                    float a0 = a[k];
                    const float *restrict b0 = g->B + k * N + jj;
                    for (int64_t j = 0; j < nb; j++) c[j] += a0 * b0[j];
                }
            }
        }
    }
}

static void gemm(const float *A, const float *B, float *C, int64_t M, int64_t K, int64_t N) {
    gemm_t g = {A, B, C, M, K, N};
    if ((double)M * (double)K * (double)N >= 1 << 20 && M >= 4) {
        seer_pool_t *pool = seer_pool_default();
        if (pool) {
            seer_pool_for(pool, (size_t)M, 1, gemm_rows, &g);
            return;
        }
    }
    gemm_rows(&g, 0, (size_t)M, 0);
}

int seer_tensor_matmul(seer_tensor_t **out, const seer_tensor_t *a, const seer_tensor_t *b, seer_err_t *err) {
    char s1[128], s2[128];
    int na = a->ndim, nb = b->ndim;
    if (na < 1 || na > 3 || nb < 1 || nb > 3)
        return seer_err_set(err, SEER_EINVAL, "matmul: shapes %s and %s: only 1-d, 2-d and 3-d (batched) operands",
                            seer_tensor_shape_str(a, s1, sizeof s1), seer_tensor_shape_str(b, s2, sizeof s2));
    /* Normalise to [Ba, M, K] x [Bb, K, N]. */
    int64_t Ba = na == 3 ? a->shape[0] : 1, M = na == 1 ? 1 : a->shape[na - 2], K = a->shape[na - 1];
    int64_t Bb = nb == 3 ? b->shape[0] : 1, K2 = nb == 1 ? b->shape[0] : b->shape[nb - 2],
            N = nb == 1 ? 1 : b->shape[nb - 1];
    if (K != K2)
        return seer_err_set(err, SEER_EINVAL, "matmul: shapes %s and %s do not match (%lld != %lld)",
                            seer_tensor_shape_str(a, s1, sizeof s1), seer_tensor_shape_str(b, s2, sizeof s2),
                            (long long)K, (long long)K2);
    if (Ba != Bb && Ba != 1 && Bb != 1)
        return seer_err_set(err, SEER_EINVAL, "matmul: batch sizes of %s and %s do not match",
                            seer_tensor_shape_str(a, s1, sizeof s1), seer_tensor_shape_str(b, s2, sizeof s2));
    int64_t Bo = Ba > Bb ? Ba : Bb;
    int64_t shape[3];
    int nd = 0;
    if (na == 3 || nb == 3) shape[nd++] = Bo;
    if (na >= 2) shape[nd++] = M;
    if (nb >= 2) shape[nd++] = N;
    seer_tensor_t *A = seer__f32_contig(a), *B = seer__f32_contig(b), *C = seer_tensor_new(SEER_F32, nd, shape);
    if (!A || !B || !C) {
        seer_tensor_release(A);
        seer_tensor_release(B);
        seer_tensor_release(C);
        return OOM(err);
    }
    const float *pa = seer_tensor_data(A), *pb = seer_tensor_data(B);
    float *pc = C->storage->data;
    for (int64_t i = 0; i < Bo; i++) {
        const float *ai = pa + (Ba == 1 ? 0 : i * M * K), *bi = pb + (Bb == 1 ? 0 : i * K * N);
        gemm(ai, bi, pc + i * M * N, M, K, N);
    }
    seer_tensor_release(A);
    seer_tensor_release(B);
    *out = C;
    return 0;
}
