/* Unit tests of engine/tokenizer/unicode_norm.c: NFC, NFD, NFKC and NFKD of the corpus in
 * tests/fixtures/unicode_norm.json (Hangul, reordered combining sequences, singletons,
 * composition exclusions, compatibility forms, emoji, every code point that changes under some
 * form), whose expected strings come from Python's unicodedata.normalize via
 * tools/gen_unicode_tables.py; plus the quick-check path and invalid UTF-8. */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/unicode_norm.h"

static const char *FORM_NAMES[] = {"NFC", "NFD", "NFKC", "NFKD"};
static const int FORMS[] = {SEER_NFC, SEER_NFD, SEER_NFKC, SEER_NFKD};

static cJSON *load_fixture(void) {
    FILE *f = fopen("tests/fixtures/unicode_norm.json", "rb");
    cr_assert(f, "cannot open tests/fixtures/unicode_norm.json (run from the repository root)");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    cr_assert(text);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = 0;
    fclose(f);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert(j, "malformed fixture");
    return j;
}

static void check(const char *name, const char *in, int form, const char *want) {
    char *out;
    size_t len;
    int rc = seer_unicode_normalize(in, strlen(in), form, &out, &len);
    cr_assert_eq(rc, 0, "%s: rc %d", name, rc);
    cr_assert_eq(strlen(out), len, "%s", name);
    if (strcmp(out, want)) {
        size_t i = 0;
        while (out[i] && out[i] == want[i]) i++;
        cr_assert_fail("%s %s: differs at byte %zu (got %zu bytes, want %zu)", name, FORM_NAMES[form], i, len,
                       strlen(want));
    }
    free(out);
}

Test(unicode_norm, fixture_matches_python_unicodedata) {
    cJSON *j = load_fixture();
    const cJSON *ver = cJSON_GetObjectItem(j, "unicode_version");
    cr_assert(cJSON_IsString(ver));
    cr_assert_str_eq(ver->valuestring, seer_unicode_version, "fixture and tables are from different Unicode versions");
    const cJSON *cases = cJSON_GetObjectItem(j, "cases");
    cr_assert(cJSON_GetArraySize(cases) > 100);
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *in = cJSON_GetObjectItem(c, "input")->valuestring;
        for (int k = 0; k < 4; k++) {
            const cJSON *want = cJSON_GetObjectItem(c, FORM_NAMES[FORMS[k]]);
            cr_assert(cJSON_IsString(want), "%s: no %s", name, FORM_NAMES[FORMS[k]]);
            check(name, in, FORMS[k], want->valuestring);
        }
    }
    cJSON_Delete(j);
}

Test(unicode_norm, idempotent_on_fixture_outputs) {
    cJSON *j = load_fixture();
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        for (int k = 0; k < 4; k++) {
            const char *s = cJSON_GetObjectItem(c, FORM_NAMES[FORMS[k]])->valuestring;
            check(name, s, FORMS[k], s);
        }
    }
    cJSON_Delete(j);
}

Test(unicode_norm, small_cases) {
    check("ascii", "Hello, world!", SEER_NFC, "Hello, world!");
    check("ascii", "Hello, world!", SEER_NFKD, "Hello, world!");
    check("compose", "e\xCC\x81", SEER_NFC, "\xC3\xA9");
    check("decompose", "\xC3\xA9", SEER_NFD, "e\xCC\x81");
    check("hangul", "\xEA\xB0\x80", SEER_NFD, "\xE1\x84\x80\xE1\x85\xA1");
    check("hangul", "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", SEER_NFC, "\xEA\xB0\x81");
    check("ligature", "\xEF\xAC\x81", SEER_NFKC, "fi");
    check("ligature", "\xEF\xAC\x81", SEER_NFC, "\xEF\xAC\x81");
    check("reorder", "a\xCC\x81\xCC\xA3", SEER_NFD, "a\xCC\xA3\xCC\x81");
    check("empty", "", SEER_NFC, "");
}

Test(unicode_norm, rejects_invalid_utf8_and_forms) {
    const char *bad[] = {"\xC3", "\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "a\xFF", "\xE2\x82"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *out = (char *)1;
        size_t len = 7;
        cr_assert_eq(seer_unicode_normalize(bad[i], strlen(bad[i]), SEER_NFD, &out, &len), -2, "case %zu", i);
        cr_assert_null(out);
        cr_assert_eq(len, 0);
    }
    char *out;
    size_t len;
    cr_assert_eq(seer_unicode_normalize("a", 1, 42, &out, &len), -2);
}

Test(unicode_norm, embedded_nul_is_kept) {
    char *out;
    size_t len;
    cr_assert_eq(seer_unicode_normalize("e\0\xCC\x81", 4, SEER_NFC, &out, &len), 0);
    cr_assert_eq(len, 4);
    cr_assert_eq(memcmp(out, "e\0\xCC\x81", 4), 0);
    free(out);
}
