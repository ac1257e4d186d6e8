/* Unit tests of the chat-template interpreter through its pure C entry point: Jinja2's
 * whitespace rules, expressions and filters with Python semantics, loop variables, errors with
 * positions, and the limits that keep untrusted templates bounded. The golden renders of real
 * templates are in tests/lua/test_chat_template.lua. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template.h"

/* Renders with vars given as JSON text; returns the output (caller frees) or NULL with *err. */
static char *render_lim(const char *tmpl, const char *vars_json, const seer_chat_template_limits_t *lim, seer_err_t *err) {
    cJSON *vars = vars_json ? cJSON_Parse(vars_json) : NULL;
    if (vars_json) cr_assert_not_null(vars, "bad test JSON: %s", vars_json);
    char *out = NULL;
    size_t n = 0;
    int rc = seer_chat_template_render_ex(tmpl, strlen(tmpl), vars, lim, &out, &n, err);
    cJSON_Delete(vars);
    if (rc < 0) {
        cr_assert_null(out);
        return NULL;
    }
    cr_assert_eq(strlen(out), n);
    return out;
}

static void expect(const char *tmpl, const char *vars, const char *want) {
    seer_err_t err;
    char *out = render_lim(tmpl, vars, NULL, &err);
    cr_assert_not_null(out, "render of %s failed: %s", tmpl, err.msg);
    cr_expect_str_eq(out, want, "template %s", tmpl);
    free(out);
}

static void expect_err(const char *tmpl, const char *vars, int code, const char *needle) {
    seer_err_t err;
    err.code = 0;
    char *out = render_lim(tmpl, vars, NULL, &err);
    cr_assert_null(out, "expected %s to fail, got %s", tmpl, out ? out : "");
    if (code) cr_expect_eq(err.code, code, "code %d for %s (%s)", err.code, tmpl, err.msg);
    cr_expect(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
}

/* ---- whitespace ---------------------------------------------------------------------------- */

Test(whitespace, trim_blocks_and_lstrip_blocks) {
    expect("  {% if true %}\n  yes\n  {% endif %}\nafter", NULL, "  yes\nafter");
    expect("{% if true %}   {% endif %}\n  x", NULL, "     x");
    expect("{{ 'a' }}\n{{ 'b' }}", NULL, "a\nb");         /* no trim after {{ }} */
    expect("  {{ 'a' }}", NULL, "  a");                    /* no lstrip before {{ }} */
    expect("a\n  {# c #}\nb", NULL, "a\nb");               /* comments lstrip and trim too */
    expect("x\n  {%+ if true %}y{% endif +%}\nz", NULL, "x\n  y\nz");
}

Test(whitespace, minus_markers_and_trailing_newline) {
    expect("a  \n {%- if true -%} \n b {%- endif %}", NULL, "ab");
    expect("x  {{- 'y' -}}  z", NULL, "xyz");
    expect("text\n", NULL, "text");                        /* one trailing newline dropped */
    expect("text\n\n", NULL, "text\n");
    expect("a\r\nb", NULL, "a\nb");                        /* universal newlines */
    expect("{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}");
}

/* ---- expressions and values ---------------------------------------------------------------- */

Test(values, python_str_and_repr) {
    expect("{{ none }}{{ True }}{{ false }}", NULL, "NoneTrueFalse");
    expect("{{ [1, 2.5, 'a', none, {'k': (1, 2)}] }}", NULL, "[1, 2.5, 'a', None, {'k': (1, 2)}]");
    expect("{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 0.1 + 0.2 }} {{ 4 / 2 }}", NULL,
           "1e+16 1000000000000000.0 0.0001 1e-05 0.30000000000000004 2.0");
    expect("{{ [\"it's\", 'a\"b', 'x\\ny'] }}", NULL, "[\"it's\", 'a\"b', 'x\\ny']");
    expect("{{ (1,) }}{{ () }}{{ [] }}{{ {} }}", NULL, "(1,)()[]{}");
}

Test(values, arithmetic_and_logic) {
    expect("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} {{ 1 ~ 'x' ~ none }}", NULL,
           "3 -4 2 1024 abab 1xNone");
    expect("{{ 2 + 3 * 4 }} {{ 10 - 3 - 2 }} {{ -2 ** 2 }}", NULL, "14 5 4");
    expect("{{ 1 if x else 2 }}{{ x or 'd' }}{{ not x }}{{ 1 < 2 < 3 }}{{ 'a' in 'cat' }}{{ 3 not in [1] }}", NULL,
           "2dTrueTrueTrueTrue");
    expect("{{ t == 1 }}{{ 1 == 1.0 }}{{ (1,) == [1] }}", "{\"t\": true}", "TrueTrueFalse");
}

Test(values, attributes_items_and_slices) {
    const char *v = "{\"m\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"x\"}], \"d\": {\"a\": 1}}";
    expect("{{ m[0].role }}{{ m[-1]['role'] }}{{ m[0].missing }}|{{ m[5] }}|{{ d.get('a') }}{{ d.get('z', 9) }}", v, "userx||19");
    expect("{{ m[1:]|length }}{{ [1, 2, 3][::-1] }}{{ 'héllo'[:2] }}{{ 'hello'[-3:] }}", v, "1[3, 2, 1]héllo");
    expect("{% for k, v in d.items() %}{{ k }}={{ v }}{% endfor %}{{ d.keys()|list }}", v, "a=1['a']");
    expect("{{ x is defined }}{{ m is iterable }}{{ d is mapping }}{{ 'a' is string }}{{ 1 is number }}{{ none is none }}",
           v, "FalseTrueTrueTrueTrueTrue");
}

/* ---- filters and methods -------------------------------------------------------------------- */

Test(filters, strings) {
    expect("{{ '  x  '|trim }}|{{ ' a b '.split() }}|{{ 'a,b'.split(',') }}|{{ 'ab'.upper() }}{{ 'AB'|lower }}", NULL,
           "x|['a', 'b']|['a', 'b']|ABab");
    expect("{{ 'hello world-x'|title }} {{ 'hELLO'|capitalize }} {{ 'aXa'|replace('a', 'b') }}", NULL,
           "Hello World-X Hello bXb");
    expect("{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}{{ '-'.join(['a', 'b']) }}", NULL, "TrueTruea-b");
}

Test(filters, tojson_matches_python) {
    expect("{{ {'a': [1, 'é', none, true], 'b': 1.5}|tojson }}", NULL, "{\"a\": [1, \"é\", null, true], \"b\": 1.5}");
    expect("{{ {'a': [1], 'b': {}}|tojson(indent=2) }}", NULL, "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
    expect("{{ 'q\"\\n\\t'|tojson }}", NULL, "\"q\\\"\\n\\t\"");
    expect("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}", NULL, "{\"a\": 2, \"b\": 1}");
}

Test(filters, sequences) {
    const char *v = "{\"m\": [{\"role\": \"user\", \"c\": \"a\"}, {\"role\": \"bot\", \"c\": \"b\"}, {\"role\": \"user\", \"c\": \"c\"}]}";
    expect("{{ m|selectattr('role', 'equalto', 'user')|map(attribute='c')|join(',') }}", v, "a,c");
    expect("{{ m|rejectattr('role', 'equalto', 'user')|list|length }}{{ m|first|tojson }}", v, "1{\"role\": \"user\", \"c\": \"a\"}");
    expect("{{ x|default('d') }}{{ ''|default('d', true) }}{{ '3'|int + 1 }}{{ 2.5|round }}{{ [3, 1]|sort }}", NULL, "dd42.0[1, 3]");
}

/* ---- statements ---------------------------------------------------------------------------- */

Test(statements, loop_variables) {
    expect("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", NULL,
           "10TrueFalse3|21FalseFalse3|32FalseTrue3|");
    expect("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", NULL, "-2;1-3;2-;");
    expect("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }}{% else %}none{% endfor %}", NULL, "2/24/2");
    expect("{% for x in [] %}{{ x }}{% else %}none{% endfor %}", NULL, "none");
    expect("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}",
           NULL, "1");
}

Test(statements, scoping_namespace_macro) {
    expect("{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}", NULL, "01020");
    expect("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", NULL, "3");
    expect("{% set a, b = 1, 2 %}{% set c %}[{{ a }}{{ b }}]{% endset %}{{ c }}", NULL, "[12]");
    expect("{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}", NULL, "<1B><23>");
}

/* ---- errors -------------------------------------------------------------------------------- */

Test(errors, syntax_errors_have_positions) {
    expect_err("{% if x %}", NULL, SEER_EPARSE, "line 1, column 1");
    expect_err("ab\ncd {{ 1 + }}", NULL, SEER_EPARSE, "syntax error at line 2, column 11");
    expect_err("{% for %}", NULL, SEER_EPARSE, "line 1, column 8");
    expect_err("{{ 'abc }}", NULL, SEER_EPARSE, "unterminated string");
    expect_err("{% frob %}", NULL, SEER_EPARSE, "unknown or unexpected tag 'frob'");
    expect_err("{% endif %}", NULL, SEER_EPARSE, "unexpected tag 'endif'");
    expect_err("{{ (1 }}", NULL, SEER_EPARSE, "syntax error");
    expect_err("{# open", NULL, SEER_EPARSE, "missing end of comment");
}

Test(errors, runtime_errors) {
    expect_err("{{ raise_exception('Roles must alternate') }}", NULL, SEER_EINVAL, "raise_exception: Roles must alternate");
    expect_err("{{ x.y }}", NULL, SEER_EINVAL, "undefined: 'x' is undefined");
    expect_err("{{ m[0].role }}", "{\"m\": []}", SEER_EINVAL, "list object has no element 0");
    expect_err("{{ 'a' + 1 }}", NULL, SEER_EINVAL, "type error: can only concatenate str");
    expect_err("{{ 1 // 0 }}", NULL, SEER_EINVAL, "division");
    expect_err("{{ x|tojson }}", NULL, SEER_EINVAL, "not JSON serializable");
    expect_err("{% set x.y = 1 %}", NULL, SEER_EINVAL, "non-namespace");
    expect_err("{{ 1|nosuchfilter }}", NULL, SEER_EINVAL, "unknown filter 'nosuchfilter'");
}

/* ---- limits -------------------------------------------------------------------------------- */

Test(limits, output_iterations_depth) {
    seer_chat_template_limits_t lim = {.max_output = 1000};
    seer_err_t err;
    cr_assert_null(render_lim("{% for i in range(2000) %}x{% endfor %}", NULL, &lim, &err));
    cr_expect(strstr(err.msg, "limit: output longer than 1000 bytes"), "%s", err.msg);

    lim = (seer_chat_template_limits_t){.max_iters = 50};
    cr_assert_null(render_lim("{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}", NULL, &lim, &err));
    cr_expect(strstr(err.msg, "limit: more than 50 loop iterations"), "%s", err.msg);

    cr_assert_null(render_lim("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", NULL, NULL, &err));
    cr_expect(strstr(err.msg, "limit:"), "%s", err.msg);

    char deep[4000];
    memset(deep, '(', 3000);
    strcpy(deep + 3000, "1");
    char tmpl[4100];
    snprintf(tmpl, sizeof tmpl, "{{ %s }}", deep);
    cr_assert_null(render_lim(tmpl, NULL, NULL, &err));
    cr_expect(strstr(err.msg, "nested"), "%s", err.msg);

    lim = (seer_chat_template_limits_t){.max_memory = 1 << 20};
    cr_assert_null(render_lim("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", NULL, &lim, &err));
    cr_expect(strstr(err.msg, "limit:"), "%s", err.msg);
}

Test(limits, hostile_inputs_fail_cleanly) {
    static const char *const bad[] = {"{{", "{%", "{{ }}", "{% if %}{% endif %}", "{{ a.}}", "{{ [1,2 }}", "{{ {1:2 }}",
                                      "{% for x in %}", "{% set %}", "{{ 1 is }}", "{{ x|}}", "{% macro %}", "{{ 'a' ~ }}",
                                      "{% endfor %}", "{% else %}", "{{ ) }}", "{{ \x01 }}", "{{ 99999999999999999999 }}",
                                      "{{ 9223372036854775807 + 1 }}", "{% break %}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        seer_err_t err;
        err.msg[0] = 0;
        cr_expect_null(render_lim(bad[i], NULL, NULL, &err), "%s should fail", bad[i]);
        cr_expect(err.msg[0] != 0, "%s gave no message", bad[i]);
    }
    /* NUL bytes inside the template are data, not an end */
    char *out = NULL;
    size_t n = 0;
    seer_err_t err;
    cr_assert_eq(seer_chat_template_render("a\0b", 3, NULL, &out, &n, &err), 0);
    cr_expect_eq(n, 3);
    cr_expect(memcmp(out, "a\0b", 3) == 0);
    free(out);
    cr_expect_lt(seer_chat_template_render(NULL, 5, NULL, &out, &n, &err), 0);
}
