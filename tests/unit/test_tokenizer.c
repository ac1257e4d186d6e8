/* Unit tests of engine/tokenizer at the C level: GPT-2's byte-to-unicode table, BPE merge order
 * on small hand-written vocabularies, byte fallback and unk handling, and bad tokenizer.json
 * input that must give an error message rather than a crash. Golden encodings of real
 * tokenizers are in tests/lua/test_tokenizer.lua. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static seer_tokenizer_t *load(const char *json) {
    seer_tokenizer_t *t = NULL;
    seer_err_t err;
    int rc = seer_tokenizer_load_json(&t, json, strlen(json), "test.json", &err);
    cr_assert_eq(rc, 0, "load failed: %s", err.msg);
    return t;
}

/* Encodes text and compares with the expected ids (terminated by -1). */
static void expect(seer_tokenizer_t *t, const char *text, int add_special, const int32_t *want) {
    int32_t *ids;
    size_t n;
    seer_err_t err;
    cr_assert_eq(seer_tokenizer_encode(t, text, strlen(text), add_special, &ids, &n, &err), 0, "%s", err.msg);
    size_t wn = 0;
    while (want[wn] >= 0) wn++;
    cr_assert_eq(n, wn, "'%s': %zu ids, expected %zu", text, n, wn);
    for (size_t i = 0; i < n; i++) cr_assert_eq(ids[i], want[i], "'%s': ids[%zu] = %d, expected %d", text, i, ids[i], want[i]);
    free(ids);
}

static char *decode(seer_tokenizer_t *t, const int32_t *ids, size_t n, int skip) {
    char *text;
    size_t len;
    seer_err_t err;
    cr_assert_eq(seer_tokenizer_decode(t, ids, n, skip, &text, &len, &err), 0, "%s", err.msg);
    cr_assert_eq(strlen(text), len);
    return text;
}

Test(bytelevel, mapping_matches_gpt2) {
    /* printable ASCII stands for itself; space is U+0120 'Ġ', newline U+010A 'Ċ' */
    cr_assert_eq(seer_tokenizer_byte_to_unicode('a'), 'a');
    cr_assert_eq(seer_tokenizer_byte_to_unicode('!'), '!');
    cr_assert_eq(seer_tokenizer_byte_to_unicode(' '), 0x120);
    cr_assert_eq(seer_tokenizer_byte_to_unicode('\n'), 0x10A);
    cr_assert_eq(seer_tokenizer_byte_to_unicode(0), 0x100);
    cr_assert_eq(seer_tokenizer_byte_to_unicode(0xAD), 0x143); /* soft hyphen is not kept */
    cr_assert_eq(seer_tokenizer_byte_to_unicode(0xA1), 0xA1);
    cr_assert_eq(seer_tokenizer_byte_to_unicode(0xFF), 0xFF);
    /* a bijection onto 256 code points */
    int seen[324] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = seer_tokenizer_byte_to_unicode((uint8_t)b);
        cr_assert_lt(cp, 324u);
        cr_assert_eq(seen[cp], 0);
        seen[cp] = 1;
        cr_assert_eq(seer_tokenizer_unicode_to_byte(cp), b);
    }
    cr_assert_eq(seer_tokenizer_unicode_to_byte(0x2581), -1);
}

Test(bpe, merges_apply_by_rank_not_position) {
    /* "abc": merges rank 0 = "b c", rank 1 = "a b"; so bc merges first and ab never applies */
    seer_tokenizer_t *t = load("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, "
                               "\"ab\": 3, \"bc\": 4, \"abc\": 5, \"a bc\": 6}, \"merges\": [\"b c\", \"a b\"]}}");
    expect(t, "abc", 0, (int32_t[]){0, 4, -1});
    expect(t, "ab", 0, (int32_t[]){3, -1});
    expect(t, "abab", 0, (int32_t[]){3, 3, -1});
    char *s = decode(t, (int32_t[]){0, 4}, 2, 0);
    cr_assert_str_eq(s, "a bc"); /* no decoder: tokens joined with spaces, as HF does */
    free(s);
    seer_tokenizer_free(t);
}

Test(bpe, ties_merge_leftmost_and_pairs_form) {
    seer_tokenizer_t *t = load("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"aa\": 1, \"aaaa\": 2}, "
                               "\"merges\": [[\"a\", \"a\"], [\"aa\", \"aa\"]]}}");
    expect(t, "aaa", 0, (int32_t[]){1, 0, -1});
    expect(t, "aaaa", 0, (int32_t[]){2, -1});
    expect(t, "aaaaa", 0, (int32_t[]){2, 0, -1});
    seer_tokenizer_free(t);
}

Test(bpe, byte_fallback_unk_and_fuse_unk) {
    /* byte fallback for '\xC3\xA9' (é) through <0xC3> <0xA9>; unknown without byte tokens: unk */
    seer_tokenizer_t *t = load("{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\", "
                               "\"vocab\": {\"<unk>\": 0, \"a\": 1, \"<0xC3>\": 2, \"<0xA9>\": 3}, \"merges\": []},"
                               "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, "
                               "{\"type\": \"Fuse\"}]}}");
    expect(t, "a\xC3\xA9", 0, (int32_t[]){1, 2, 3, -1});
    expect(t, "axyz", 0, (int32_t[]){1, 0, 0, 0, -1}); /* x y z have no byte tokens: unk each */
    char *s = decode(t, (int32_t[]){1, 2, 3}, 3, 0);
    cr_assert_str_eq(s, "a\xC3\xA9");
    free(s);
    s = decode(t, (int32_t[]){2, 1}, 2, 0); /* a lone lead byte: U+FFFD */
    cr_assert_str_eq(s, "\xEF\xBF\xBD" "a");
    free(s);
    seer_tokenizer_free(t);
    t = load("{\"model\": {\"type\": \"BPE\", \"fuse_unk\": true, \"unk_token\": \"<unk>\", "
             "\"vocab\": {\"<unk>\": 0, \"a\": 1}, \"merges\": []}}");
    expect(t, "axyza", 0, (int32_t[]){1, 0, 1, -1});
    seer_tokenizer_free(t);
}

Test(bpe, ignore_merges_takes_whole_words) {
    seer_tokenizer_t *t = load("{\"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {\"a\": 0, "
                               "\"b\": 1, \"c\": 2, \"ab\": 3, \"abc\": 4}, \"merges\": [\"a b\"]}}");
    expect(t, "abc", 0, (int32_t[]){4, -1});
    seer_tokenizer_free(t);
}

Test(pipeline, template_processing_and_added_tokens) {
    seer_tokenizer_t *t = load(
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"<s>\": 0, \"a\": 1, \"b\": 2}, \"merges\": []},"
        "\"added_tokens\": [{\"id\": 0, \"content\": \"<s>\", \"special\": true, \"normalized\": false}],"
        "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
        "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": "
        "{\"id\": \"<s>\", \"ids\": [0], \"tokens\": [\"<s>\"]}}}}");
    expect(t, "ab", 1, (int32_t[]){0, 1, 2, -1});
    expect(t, "ab", 0, (int32_t[]){1, 2, -1});
    expect(t, "a<s>b", 0, (int32_t[]){1, 0, 2, -1});
    expect(t, "", 1, (int32_t[]){0, -1});
    cr_assert(seer_tokenizer_is_special(t, 0));
    cr_assert(!seer_tokenizer_is_special(t, 1));
    char *s = decode(t, (int32_t[]){0, 1, 2}, 3, 1);
    cr_assert_str_eq(s, "a b");
    free(s);
    cr_assert_eq(seer_tokenizer_token_to_id(t, "b", 1), 2);
    cr_assert_eq(seer_tokenizer_token_to_id(t, "zz", 2), -1);
    size_t len;
    cr_assert_str_eq(seer_tokenizer_id_to_token(t, 0, &len), "<s>");
    cr_assert_null(seer_tokenizer_id_to_token(t, 3, &len));
    seer_tokenizer_free(t);
}

Test(gpt2, files_encode_hello_world) {
    seer_tokenizer_t *t;
    seer_err_t err;
    int rc = seer_tokenizer_load_gpt2(&t, "tests/fixtures/tokenizers/gpt2/vocab.json",
                                      "tests/fixtures/tokenizers/gpt2/merges.txt", &err);
    cr_assert_eq(rc, 0, "%s", err.msg);
    expect(t, "Hello world, tokenizers!", 0, (int32_t[]){15496, 995, 11, 11241, 11341, 0, -1});
    expect(t, "\n\n", 0, (int32_t[]){628, -1});
    char *s = decode(t, (int32_t[]){15496, 995}, 2, 0);
    cr_assert_str_eq(s, "Hello world");
    free(s);
    seer_tokenizer_free(t);
}

/* Bad inputs: each must fail with a message that says something useful, never crash. */
Test(errors, malformed_files_fail_cleanly) {
    static const struct {
        const char *json, *needle;
    } cases[] = {
        {"", "malformed JSON"},
        {"{", "malformed JSON"},
        {"null", "top level"},
        {"{}", "model must be an object"},
        {"{\"model\": {}}", "no string member 'type'"},
        {"{\"model\": {\"type\": 3}}", "no string member 'type'"},
        {"{\"model\": {\"type\": \"WordPiece\"}}", "model type 'WordPiece' is not supported"},
        {"{\"model\": {\"type\": \"BPE\"}}", "model.vocab must be an object"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}}}", "must be an integer id"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}}}", "must be an integer id"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": 5}}", "model.merges must be an array"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]}}", "is not \"a b\""},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[1, 2]]}}", "must be \"a b\" or"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a a\"]}}", "merged token 'aa'"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"unk_token\": \"<unk>\"}}", "unk_token '<unk>'"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"normalizer\": {\"type\": \"BertNormalizer\"}}",
         "normalizer type 'BertNormalizer' is not supported (supported: "},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"normalizer\": {\"type\": \"Sequence\"}}",
         "normalizer.normalizers must be an array"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"normalizer\": {\"type\": \"Replace\", \"pattern\": 1}}",
         "normalizer.pattern must be"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
         "{\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}}",
         "behavior 'Sideways'"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"pre_tokenizer\": {\"type\": \"Metaspace\", "
         "\"prepend_scheme\": \"sometimes\"}}",
         "prepend_scheme 'sometimes'"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"post_processor\": {\"type\": \"TemplateProcessing\", "
         "\"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}]}}",
         "does not define"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"added_tokens\": [{\"content\": \"x\"}]}",
         "added_tokens[0] needs"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"decoder\": {\"type\": \"Strip\"}}",
         "decoder.content must be a character"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"truncation\": {\"max_length\": 5}}",
         "truncation is not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        seer_tokenizer_t *t = (seer_tokenizer_t *)1;
        seer_err_t err;
        int rc = seer_tokenizer_load_json(&t, cases[i].json, strlen(cases[i].json), "x.json", &err);
        cr_assert_lt(rc, 0, "case %zu should fail", i);
        cr_assert_null(t);
        cr_assert(strstr(err.msg, cases[i].needle) != NULL, "case %zu: '%s' lacks '%s'", i, err.msg, cases[i].needle);
        cr_assert(strncmp(err.msg, "x.json: ", 8) == 0, "case %zu: '%s' does not name the file", i, err.msg);
    }
}

Test(errors, missing_files) {
    seer_tokenizer_t *t;
    seer_err_t err;
    cr_assert_eq(seer_tokenizer_load_file(&t, "/nonexistent/tokenizer.json", &err), SEER_ENOTFOUND);
    cr_assert(strstr(err.msg, "/nonexistent/tokenizer.json") != NULL);
    cr_assert_lt(seer_tokenizer_load_gpt2(&t, "/nonexistent/vocab.json", "/nonexistent/merges.txt", &err), 0);
}

/* Every prefix of a real tokenizer.json is malformed JSON (or a truncated one): none may crash. */
Test(errors, truncated_real_file) {
    FILE *f = fopen("tests/fixtures/models/stories260K/tokenizer.json", "rb");
    cr_assert_not_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    for (size_t cut = 0; cut < n; cut += 97) {
        seer_tokenizer_t *t;
        seer_err_t err;
        cr_assert_lt(seer_tokenizer_load_json(&t, buf, cut, "cut.json", &err), 0);
    }
    seer_tokenizer_t *t;
    seer_err_t err;
    cr_assert_eq(seer_tokenizer_load_json(&t, buf, n, "full.json", &err), 0, "%s", err.msg);
    seer_tokenizer_free(t);
}
