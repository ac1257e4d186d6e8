/* Unit tests of engine/tensor: storage ownership (new, wrap with a release callback, views
 * keeping storage alive), strided views, copies and dtype conversion, the ops against naive
 * references (matmul over the blocked and threaded paths), and the Lua push/check pair. The
 * Lua API in detail is tested in tests/lua/test_tensor.lua. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "tensor/tensor.h"

static int released;
static void on_release(void *ctx) { released += *(int *)ctx; }

/* The elements are the caller's to write; the alignment padding after them is zeroed all the
 * same (a kernel reading whole 64-byte lines sees zeros, not another tensor's old data). */
Test(tensor, new_uninit_zeroes_only_the_padding) {
    for (int64_t n = 0; n < 40; n++) {
        int64_t shape[1] = {n};
        /* dirty the allocator's free memory first, so that zeros there are not luck */
        void *junk[8];
        for (int k = 0; k < 8; k++) memset(junk[k] = malloc(256), 0xA5, 256);
        for (int k = 0; k < 8; k++) free(junk[k]);
        seer_tensor_t *t = seer_tensor_new_uninit(SEER_F32, 1, shape);
        cr_assert_not_null(t);
        cr_assert_eq((uintptr_t)seer_tensor_data(t) % 64, 0);
        cr_assert_eq(seer_tensor_numel(t), n);
        size_t used = (size_t)n * 4, line = (used + 63) / 64 * 64;
        if (!line) line = 64;
        const unsigned char *b = seer_tensor_data(t);
        for (size_t i = used; i < line; i++) cr_assert_eq(b[i], 0, "n = %lld: padding byte %zu", (long long)n, i);
        seer_tensor_release(t);
    }
    int64_t bad[2] = {2, -1};
    cr_assert_null(seer_tensor_new_uninit(SEER_F32, 2, bad));
}

Test(tensor, new_is_zeroed_and_aligned) {
    int64_t shape[3] = {2, 3, 5};
    seer_tensor_t *t = seer_tensor_new(SEER_F32, 3, shape);
    cr_assert_not_null(t);
    cr_assert_eq(seer_tensor_numel(t), 30);
    cr_assert_eq((uintptr_t)seer_tensor_data(t) % 64, 0);
    cr_assert(seer_tensor_is_contiguous(t));
    cr_assert_eq(t->strides[0], 15);
    cr_assert_eq(t->strides[2], 1);
    for (int i = 0; i < 30; i++) cr_assert_eq(((float *)seer_tensor_data(t))[i], 0);
    seer_tensor_release(t);
    int64_t bad[2] = {2, -1};
    cr_assert_null(seer_tensor_new(SEER_F32, 2, bad));
    cr_assert_null(seer_tensor_new(SEER_F32, 9, shape));
    int64_t huge[2] = {INT64_MAX / 2, 4};
    cr_assert_null(seer_tensor_new(SEER_F32, 2, huge));
    seer_tensor_t *s = seer_tensor_new(SEER_I64, 0, NULL);
    cr_assert_eq(seer_tensor_numel(s), 1);
    seer_tensor_release(s);
}

Test(tensor, wrap_release_runs_once_after_last_view) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    int one = 1;
    released = 0;
    seer_tensor_t *t = seer_tensor_wrap(data, SEER_F32, 2, shape, NULL, on_release, &one);
    seer_tensor_t *v, *w;
    seer_err_t err;
    cr_assert_eq(seer_tensor_transpose(&v, t, 0, 1, &err), 0);
    cr_assert_eq(seer_tensor_select(&w, v, 0, 2, &err), 0); /* column 2: {3, 6} */
    seer_tensor_release(t);
    seer_tensor_release(v);
    cr_assert_eq(released, 0);
    int64_t i0 = 0, i1 = 1;
    cr_assert_eq(seer_tensor_get_f64(w, &i0), 3);
    cr_assert_eq(seer_tensor_get_f64(w, &i1), 6);
    seer_tensor_set_f64(w, &i1, 60);
    cr_assert_eq(data[5], 60);
    seer_tensor_release(w);
    cr_assert_eq(released, 1);
}

Test(tensor, views_contiguous_and_reshape) {
    int64_t shape[2] = {3, 4};
    seer_tensor_t *t = seer_tensor_new(SEER_F32, 2, shape);
    float *p = seer_tensor_data(t);
    for (int i = 0; i < 12; i++) p[i] = (float)i;
    seer_err_t err;
    seer_tensor_t *tr, *c, *n, *r;
    cr_assert_eq(seer_tensor_transpose(&tr, t, 0, 1, &err), 0);
    cr_assert(!seer_tensor_is_contiguous(tr));
    c = seer_tensor_contiguous(tr);
    cr_assert(seer_tensor_is_contiguous(c));
    float *q = seer_tensor_data(c);
    cr_assert_eq(q[1], 4); /* tr[0][1] = t[1][0] */
    cr_assert_eq(q[3], 1); /* tr[1][0] = t[0][1] */
    /* view of a non-contiguous tensor fails, reshape copies */
    int64_t flat = 12;
    cr_assert_lt(seer_tensor_reshape(&r, tr, 1, &flat, false, &err), 0);
    cr_assert(strstr(err.msg, "non-contiguous"), "%s", err.msg);
    cr_assert_eq(seer_tensor_reshape(&r, tr, 1, &flat, true, &err), 0);
    cr_assert_neq(r->storage, t->storage);
    seer_tensor_release(r);
    /* narrow rows keeps a view-able layout: [2,4] -> [8] without copying */
    cr_assert_eq(seer_tensor_narrow(&n, t, 0, 1, 2, &err), 0);
    int64_t eight = 8, neg[2] = {-1, 2};
    cr_assert_eq(seer_tensor_reshape(&r, n, 1, &eight, false, &err), 0);
    cr_assert_eq(r->storage, t->storage);
    cr_assert_eq(((float *)seer_tensor_data(r))[0], 4);
    seer_tensor_release(r);
    cr_assert_eq(seer_tensor_reshape(&r, n, 2, neg, false, &err), 0);
    cr_assert_eq(r->shape[0], 4);
    seer_tensor_release(r);
    int64_t five = 5;
    cr_assert_lt(seer_tensor_reshape(&r, n, 1, &five, true, &err), 0);
    cr_assert(strstr(err.msg, "[5]") && strstr(err.msg, "[2,4]"), "%s", err.msg);
    cr_assert_lt(seer_tensor_narrow(&r, t, 0, 2, 2, &err), 0);
    cr_assert_lt(seer_tensor_select(&r, t, 2, 0, &err), 0);
    cr_assert(strstr(err.msg, "dim 2 out of range"), "%s", err.msg);
    seer_tensor_release(n);
    seer_tensor_release(c);
    seer_tensor_release(tr);
    seer_tensor_release(t);
}

Test(tensor, dtype_conversion_round_trip) {
    int64_t n = 5;
    seer_tensor_t *t = seer_tensor_new(SEER_F32, 1, &n);
    float v[5] = {1.0f, -2.5f, 0.1f, 65504.0f, 1e-3f};
    memcpy(seer_tensor_data(t), v, sizeof v);
    seer_tensor_t *b = seer_tensor_to(t, SEER_BF16), *h = seer_tensor_to(t, SEER_F16), *i = seer_tensor_to(t, SEER_I32);
    seer_tensor_t *b2 = seer_tensor_to(b, SEER_F32), *h2 = seer_tensor_to(h, SEER_F32);
    const float *pb = seer_tensor_data(b2), *ph = seer_tensor_data(h2);
    cr_assert_eq(pb[0], 1.0f);
    cr_assert_eq(pb[1], -2.5f);
    cr_assert_float_eq(pb[2], 0.1f, 1e-3);
    cr_assert_eq(ph[3], 65504.0f);
    cr_assert_float_eq(ph[4], 1e-3f, 1e-6);
    cr_assert_eq(((int32_t *)seer_tensor_data(i))[1], -2);
    seer_tensor_release(t);
    seer_tensor_release(b);
    seer_tensor_release(h);
    seer_tensor_release(i);
    seer_tensor_release(b2);
    seer_tensor_release(h2);
}

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void check_matmul(int64_t M, int64_t K, int64_t N) {
    int64_t sa[2] = {M, K}, sb[2] = {K, N};
    seer_tensor_t *a = seer_tensor_new(SEER_F32, 2, sa), *b = seer_tensor_new(SEER_F32, 2, sb), *c;
    unsigned s = 7;
    float *pa = seer_tensor_data(a), *pb = seer_tensor_data(b);
    for (int64_t i = 0; i < M * K; i++) pa[i] = frand(&s);
    for (int64_t i = 0; i < K * N; i++) pb[i] = frand(&s);
    seer_err_t err;
    cr_assert_eq(seer_tensor_matmul(&c, a, b, &err), 0, "%s", err.msg);
    const float *pc = seer_tensor_data(c);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (double)pa[i * K + k] * pb[k * N + j];
            cr_assert(fabs(pc[i * N + j] - acc) < 1e-4 * (1 + fabs(acc)), "C[%ld,%ld] = %g, want %g", (long)i,
                      (long)j, pc[i * N + j], acc);
        }
    seer_tensor_release(a);
    seer_tensor_release(b);
    seer_tensor_release(c);
}

Test(tensor, matmul_matches_naive) {
    check_matmul(1, 1, 1);
    check_matmul(3, 5, 7);
    check_matmul(37, 301, 263); /* crosses the KB/NB block edges and goes to the pool */
    int64_t sa[2] = {2, 3}, sb[2] = {4, 5};
    seer_tensor_t *a = seer_tensor_new(SEER_F32, 2, sa), *b = seer_tensor_new(SEER_F32, 2, sb), *c;
    seer_err_t err;
    cr_assert_lt(seer_tensor_matmul(&c, a, b, &err), 0);
    cr_assert(strstr(err.msg, "[2,3] and [4,5]"), "%s", err.msg);
    seer_tensor_release(a);
    seer_tensor_release(b);
}

Test(tensor, binary_broadcast_reduce_topk_softmax) {
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    seer_tensor_t *a = seer_tensor_new(SEER_F32, 2, sa), *b = seer_tensor_new(SEER_F32, 1, sb), *c;
    float *pa = seer_tensor_data(a), *pb = seer_tensor_data(b);
    for (int i = 0; i < 6; i++) pa[i] = (float)i;
    for (int i = 0; i < 3; i++) pb[i] = (float)(10 * i);
    seer_err_t err;
    cr_assert_eq(seer_tensor_binary(&c, SEER_OP_ADD, a, 0, b, 0, false, "add", &err), 0);
    cr_assert_eq(((float *)seer_tensor_data(c))[5], 25);
    seer_tensor_release(c);
    int64_t sc[1] = {2};
    seer_tensor_t *d = seer_tensor_new(SEER_F32, 1, sc);
    cr_assert_lt(seer_tensor_binary(&c, SEER_OP_ADD, a, 0, d, 0, false, "add", &err), 0);
    cr_assert_str_eq(err.msg, "add: shapes [2,3] and [2] do not broadcast");
    seer_tensor_release(d);

    cr_assert_eq(seer_tensor_reduce(&c, SEER_RED_SUM, a, 0, false, 0, &err), 0);
    cr_assert_eq(c->ndim, 1);
    cr_assert_eq(((float *)seer_tensor_data(c))[2], 7);
    seer_tensor_release(c);
    cr_assert_eq(seer_tensor_reduce(&c, SEER_RED_ARGMAX, a, 1, true, 0, &err), 0);
    cr_assert_eq(c->dtype, SEER_I64);
    cr_assert_eq(c->shape[1], 1);
    cr_assert_eq(((int64_t *)seer_tensor_data(c))[1], 2);
    seer_tensor_release(c);

    seer_tensor_t *v, *ix;
    cr_assert_eq(seer_tensor_topk(&v, &ix, a, 2, 1, true, &err), 0);
    cr_assert_eq(((float *)seer_tensor_data(v))[0], 2);
    cr_assert_eq(((int64_t *)seer_tensor_data(ix))[3], 1);
    seer_tensor_release(v);
    seer_tensor_release(ix);

    cr_assert_eq(seer_tensor_softmax(&c, a, 1, false, &err), 0);
    const float *ps = seer_tensor_data(c);
    cr_assert_float_eq(ps[0] + ps[1] + ps[2], 1.0f, 1e-6);
    seer_tensor_release(c);
    seer_tensor_release(a);
    seer_tensor_release(b);
}

Test(tensor, lua_push_check_gc) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_pushcfunction(L, seer_tensor_luaopen);
    lua_call(L, 0, 1);
    lua_setglobal(L, "C");
    float data[3] = {1, 2, 3};
    int64_t n = 3;
    int one = 1;
    released = 0;
    seer_tensor_t *t = seer_tensor_wrap(data, SEER_F32, 1, &n, NULL, on_release, &one);
    seer_tensor_push(L, t);
    cr_assert_eq(seer_tensor_check(L, -1), t);
    cr_assert_eq(t->refs, 2);
    seer_tensor_release(t); /* the userdata holds the remaining reference */
    lua_setglobal(L, "x");
    cr_assert_eq(luaL_dostring(L, "assert(x[3] == 3 and x:sum() == 6); y = x:narrow(1, 2, 2); x = nil"), 0,
                 "%s", lua_tostring(L, -1));
    lua_gc(L, LUA_GCCOLLECT, 0);
    cr_assert_eq(released, 0, "y still views the storage");
    cr_assert_eq(luaL_dostring(L, "assert(y[1] == 2); y = nil"), 0);
    lua_gc(L, LUA_GCCOLLECT, 0);
    cr_assert_eq(released, 1);
    lua_pushnumber(L, 1);
    cr_assert_null(seer_tensor_test(L, -1));
    lua_close(L);
}

/* topk against the whole lane sorted by the rule it documents (values descending or ascending,
 * NaN the largest, ties by the lower index), over the three ways it selects: a selection pass
 * (k <= 16), a heap of the k best (k < n / 4), a whole sort; lanes with ties, NaN, -0 and +0,
 * infinities, along the last dim and a strided one. */
typedef struct {
    float v;
    int64_t i;
} ref_vi;
static int ref_largest;
static int ref_cmp(const void *pa, const void *pb) {
    const ref_vi *a = pa, *b = pb;
    int na = a->v != a->v, nb = b->v != b->v;
    if (na != nb) return (na ? -1 : 1) * (ref_largest ? 1 : -1);
    if (!na && a->v != b->v) return ((a->v > b->v) ? -1 : 1) * (ref_largest ? 1 : -1);
    return a->i < b->i ? -1 : a->i > b->i;
}
Test(tensor, topk_is_the_sorted_lanes_first_k) {
    static const int64_t ns[] = {1, 5, 17, 64, 100, 2000, 32000};
    static const int64_t ks[] = {0, 1, 3, 16, 17, 20, 50, 499, 500, 1999, 2000};
    uint64_t r = 7;
    int checked = 0;
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        int64_t n = ns[ni], rows = 3;
        int64_t shape[2] = {rows, n}, tshape[2] = {n, rows};
        seer_tensor_t *a = seer_tensor_new(SEER_F32, 2, shape), *at = seer_tensor_new(SEER_F32, 2, tshape);
        float *pa = seer_tensor_data(a), *pt = seer_tensor_data(at);
        for (int64_t row = 0; row < rows; row++)
            for (int64_t j = 0; j < n; j++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                int u = (int)(r >> 40) % 1000;
                float x = row == 0 ? (float)(u % 7) - 3.0f                           /* ties */
                        : row == 1 ? (float)u * 0.37f - 150.0f                      /* spread */
                                   : (u < 20 ? NAN : u < 40 ? -INFINITY : u < 60 ? INFINITY
                                      : u < 300 ? (u % 2 ? -0.0f : 0.0f) : (float)(u - 500));
                pa[row * n + j] = x;
                pt[j * rows + row] = x;
            }
        ref_vi *ref = malloc(sizeof *ref * (size_t)n);
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            int64_t k = ks[ki];
            if (k > n) continue;
            for (int largest = 0; largest < 2; largest++)
                for (int along = 0; along < 2; along++) { /* the last dim, or dim 0 of the transposed copy */
                    seer_tensor_t *v, *ix;
                    seer_err_t err;
                    cr_assert_eq(seer_tensor_topk(&v, &ix, along ? at : a, k, along ? 0 : 1, largest, &err), 0, "%s", err.msg);
                    const float *pv = seer_tensor_data(v);
                    const int64_t *pi = seer_tensor_data(ix);
                    for (int64_t row = 0; row < rows; row++) {
                        for (int64_t j = 0; j < n; j++) ref[j] = (ref_vi){pa[row * n + j], j};
                        ref_largest = largest;
                        qsort(ref, (size_t)n, sizeof *ref, ref_cmp);
                        for (int64_t j = 0; j < k; j++) {
                            int64_t o = along ? j * rows + row : row * k + j;
                            cr_assert_eq(pi[o], ref[j].i, "n %lld, k %lld, largest %d, row %lld, rank %lld: index %lld, the sorted lane's %lld",
                                         (long long)n, (long long)k, largest, (long long)row, (long long)j, (long long)pi[o],
                                         (long long)ref[j].i);
                            cr_assert(memcmp(&pv[o], &ref[j].v, sizeof(float)) == 0, "value bits");
                        }
                    }
                    seer_tensor_release(v);
                    seer_tensor_release(ix);
                    checked++;
                }
        }
        free(ref);
        seer_tensor_release(a);
        seer_tensor_release(at);
    }
    cr_assert_gt(checked, 100);
}
