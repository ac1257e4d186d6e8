/* Unit tests of engine/hooks: hook names both ways, position filters (absolute, negative from the
 * prompt end, only_prompt), each intervention on position-major and head-major activations,
 * and the errors that must name the hook. The model-level behaviour is in tests/lua/test_hooks.lua. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "hooks/hooks.h"

Test(hooks, names_round_trip) {
    char buf[64];
    for (int p = 0; p < SEER_HP_COUNT; p++) {
        int layer = seer_hook_point_global(p) ? -1 : 17;
        seer_hook_name(p, layer, buf, sizeof buf);
        seer_hook_point_t q;
        int l;
        cr_assert_eq(seer_hook_parse(buf, &q, &l), 0, "%s", buf);
        cr_assert_eq((int)q, p);
        cr_assert_eq(l, layer);
    }
    seer_hook_point_t q;
    int l;
    cr_assert_eq(seer_hook_parse("blocks.3.hook_resid_posts", &q, &l), -1);
    cr_assert_eq(seer_hook_parse("blocks..hook_resid_post", &q, &l), -1);
    cr_assert_eq(seer_hook_parse("blocks.3hook_resid_post", &q, &l), -1);
    cr_assert_eq(seer_hook_parse("hook_resid_post", &q, &l), -1);
    cr_assert_eq(seer_hook_parse("blocks.99999999999.hook_resid_post", &q, &l), -1);
    cr_assert_eq(seer_hook_parse(NULL, &q, &l), -1);
}

static seer_hook_call_t call_at(seer_hook_point_t p, int start, int n, int prompt_len) {
    seer_hook_call_t c = {.point = p, .layer = 0, .start = start, .n = n, .prompt_len = prompt_len};
    return c;
}

Test(hooks, add_with_filters) {
    seer_err_t err;
    float vec[2] = {1, 10};
    seer_intervention_t *iv = seer_iv_add(vec, 2, 2.0f, &err);
    int64_t pos[] = {-1, 0};
    seer_iv_filter_t f = {.positions = pos, .npositions = 2};
    cr_assert_eq(seer_iv_set_filter(iv, &f, &err), 0);
    seer_hookset_t *s = seer_hookset_new(2);
    cr_assert_eq(seer_hookset_add(s, SEER_HP_RESID_POST, 0, iv, &err), 0);
    seer_iv_release(iv); /* the set holds its own reference */
    float x[4][2] = {{0}};
    seer_hook_act_t a = {.data = &x[0][0], .ndim = 2, .shape = {4, 2}};
    seer_hook_call_t c = call_at(SEER_HP_RESID_POST, 0, 4, 4); /* -1 = position 3 */
    cr_assert_eq(seer_hook_apply(s, &c, &a, &err), 0);
    cr_assert_float_eq(x[0][1], 20.f, 0);
    cr_assert_float_eq(x[1][1], 0.f, 0);
    cr_assert_float_eq(x[3][0], 2.f, 0);
    /* a decode step at position 5: neither 0 nor prompt_len - 1 */
    float y[1][2] = {{0}};
    seer_hook_act_t b = {.data = &y[0][0], .ndim = 2, .shape = {1, 2}};
    c = call_at(SEER_HP_RESID_POST, 5, 1, 4);
    cr_assert_eq(seer_hook_apply(s, &c, &b, &err), 0);
    cr_assert_float_eq(y[0][0], 0.f, 0);
    /* wrong row size names the hook */
    float z[3][3] = {{0}};
    seer_hook_act_t w = {.data = &z[0][0], .ndim = 2, .shape = {3, 3}};
    c = call_at(SEER_HP_RESID_POST, 0, 3, 3);
    cr_assert_lt(seer_hook_apply(s, &c, &w, &err), 0);
    cr_assert(strstr(err.msg, "blocks.0.hook_resid_post") && strstr(err.msg, "2 elements"), "%s", err.msg);
    seer_hookset_free(s);
}

Test(hooks, from_to_only_prompt) {
    seer_err_t err;
    seer_intervention_t *iv = seer_iv_scale(0.f, NULL, 0, &err);
    seer_iv_filter_t f = {.has_from = 1, .from = 2, .has_to = 1, .to = -1, .only_prompt = 1};
    seer_iv_set_filter(iv, &f, &err);
    seer_hookset_t *s = seer_hookset_new(1);
    seer_hookset_add(s, SEER_HP_MLP_OUT, 0, iv, &err);
    seer_iv_release(iv);
    float x[6] = {1, 1, 1, 1, 1, 1};
    seer_hook_act_t a = {.data = x, .ndim = 2, .shape = {6, 1}};
    seer_hook_call_t c = call_at(SEER_HP_MLP_OUT, 0, 6, 5); /* from 2 to 4 (exclusive), prompt < 5 */
    seer_hook_apply(s, &c, &a, &err);
    float want[6] = {1, 1, 0, 0, 1, 1};
    for (int i = 0; i < 6; i++) cr_assert_float_eq(x[i], want[i], 0, "position %d", i);
    seer_hookset_free(s);
}

Test(hooks, ablate_removes_the_component) {
    seer_err_t err;
    float dir[3] = {0, 3, 4};
    seer_intervention_t *iv = seer_iv_ablate(dir, 3, &err);
    seer_hookset_t *s = seer_hookset_new(1);
    seer_hookset_add(s, SEER_HP_RESID_PRE, 0, iv, &err);
    seer_iv_release(iv);
    float x[3] = {7, 1, 2};
    seer_hook_act_t a = {.data = x, .ndim = 2, .shape = {1, 3}};
    seer_hook_call_t c = call_at(SEER_HP_RESID_PRE, 0, 1, 1);
    seer_hook_apply(s, &c, &a, &err);
    cr_assert_float_eq(x[0], 7.f, 1e-6);
    cr_assert_float_eq(x[1] * 0.6f + x[2] * 0.8f, 0.f, 1e-6);
    cr_assert_null(seer_iv_ablate((float[3]){0, 0, 0}, 3, &err));
    cr_assert(strstr(err.msg, "zero vector"));
    seer_hookset_free(s);
}

Test(hooks, heads_on_both_layouts) {
    seer_err_t err;
    seer_intervention_t *iv = seer_iv_scale(0.f, (int[]){1}, 1, &err);
    seer_hookset_t *s = seer_hookset_new(1);
    cr_assert_eq(seer_hookset_add(s, SEER_HP_Z, 0, iv, &err), 0);
    cr_assert_eq(seer_hookset_add(s, SEER_HP_PATTERN, 0, iv, &err), 0);
    cr_assert_lt(seer_hookset_add(s, SEER_HP_RESID_POST, 0, iv, &err), 0);
    cr_assert(strstr(err.msg, "per-head point"), "%s", err.msg);
    seer_iv_release(iv);
    float z[2][2][2] = {{{1, 1}, {1, 1}}, {{1, 1}, {1, 1}}}; /* [pos][head][hd] */
    seer_hook_act_t a = {.data = &z[0][0][0], .ndim = 3, .shape = {2, 2, 2}, .heads = 2};
    seer_hook_call_t c = call_at(SEER_HP_Z, 0, 2, 2);
    cr_assert_eq(seer_hook_apply(s, &c, &a, &err), 0);
    cr_assert_float_eq(z[0][0][1], 1.f, 0);
    cr_assert_float_eq(z[1][1][0], 0.f, 0);
    float p[2][2][2] = {{{1, 0}, {.5f, .5f}}, {{1, 0}, {.5f, .5f}}}; /* [head][q][k] */
    seer_hook_act_t b = {.data = &p[0][0][0], .ndim = 3, .shape = {2, 2, 2}, .heads = 2};
    c = call_at(SEER_HP_PATTERN, 0, 2, 2);
    cr_assert_eq(seer_hook_apply(s, &c, &b, &err), 0);
    cr_assert_float_eq(p[0][1][0], .5f, 0);
    cr_assert_float_eq(p[1][1][0], 0.f, 0);
    seer_hookset_free(s);
}

Test(hooks, capture_and_replace) {
    seer_err_t err;
    seer_intervention_t *cap = seer_iv_capture(&err);
    float saved[3][2] = {{10, 11}, {20, 21}, {30, 31}};
    seer_intervention_t *rep = seer_iv_replace(&saved[0][0], 2, (int64_t[]){3, 2}, &err);
    seer_hookset_t *s = seer_hookset_new(1);
    seer_hookset_add(s, SEER_HP_ATTN_OUT, 0, cap, &err);
    seer_hookset_add(s, SEER_HP_ATTN_OUT, 0, rep, &err);
    float x[2][2] = {{1, 2}, {3, 4}};
    seer_hook_act_t a = {.data = &x[0][0], .ndim = 2, .shape = {2, 2}};
    seer_hook_call_t c = call_at(SEER_HP_ATTN_OUT, 0, 2, 2);
    cr_assert_eq(seer_hook_apply(s, &c, &a, &err), 0);
    cr_assert_float_eq(x[1][1], 21.f, 0);
    float y[1][2] = {{5, 6}};
    seer_hook_act_t b = {.data = &y[0][0], .ndim = 2, .shape = {1, 2}};
    c = call_at(SEER_HP_ATTN_OUT, 2, 1, 2);
    cr_assert_eq(seer_hook_apply(s, &c, &b, &err), 0);
    cr_assert_float_eq(y[0][0], 30.f, 0);
    cr_assert_eq(seer_iv_capture_count(cap), 2);
    const seer_capture_chunk_t *ch = seer_iv_capture_chunk(cap, 1);
    cr_assert_eq(ch->shape[0], 1);
    cr_assert_eq(ch->positions[0], 2);
    cr_assert_float_eq(ch->data[1], 6.f, 0); /* captured before the replace ran */
    c = call_at(SEER_HP_ATTN_OUT, 3, 1, 2); /* past the saved positions */
    cr_assert_lt(seer_hook_apply(s, &c, &b, &err), 0);
    cr_assert(strstr(err.msg, "limit the replace"), "%s", err.msg);
    seer_iv_release(cap);
    seer_iv_release(rep);
    seer_hookset_free(s);
}
