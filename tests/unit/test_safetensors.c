/* Unit tests of engine/tensor/safetensors.c: round trip through the writer, every corruption
 * the reader must reject (files built by hand here), and the real stories260K checkpoint. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor/safetensors.h"

#define MODEL "tests/fixtures/models/stories260K/model.safetensors"

/* A file image: 8-byte length, the JSON header, then nbuf data bytes (0..). */
static unsigned char *image(const char *json, size_t nbuf, size_t *n) {
    size_t hl = strlen(json);
    *n = 8 + hl + nbuf;
    unsigned char *p = calloc(1, *n);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(p + 8, json, hl);
    for (size_t i = 0; i < nbuf; i++) p[8 + hl + i] = (unsigned char)i;
    return p;
}

/* Opens the image and expects failure with msg containing `want`. */
static void expect_bad(const char *json, size_t nbuf, const char *want) {
    size_t n;
    unsigned char *p = image(json, nbuf, &n);
    seer_st_file_t *f = (void *)1;
    seer_err_t err;
    int rc = seer_st_open_buffer(&f, p, n, "bad.safetensors", &err);
    cr_assert_lt(rc, 0, "expected failure for %s", json);
    cr_assert_null(f);
    cr_assert(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
    cr_assert(strstr(err.msg, "bad.safetensors"), "message '%s' lacks the file name", err.msg);
    free(p);
}

Test(safetensors, good_buffer_and_find) {
    size_t n;
    unsigned char *p = image("{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                             "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                             "\"__metadata__\":{\"format\":\"pt\"}}",
                             16, &n);
    seer_st_file_t *f;
    seer_err_t err;
    cr_assert_eq(seer_st_open_buffer(&f, p, n, "x", &err), 0, "%s", err.msg);
    cr_assert_eq(seer_st_count(f), 2);
    cr_assert_str_eq(seer_st_entry(f, 0)->name, "a"); /* sorted by offset */
    cr_assert_str_eq(seer_st_entry(f, 1)->name, "b");
    const seer_st_entry_t *e = seer_st_find(f, "b");
    cr_assert_not_null(e);
    cr_assert_eq(e->dtype, SEER_F32);
    cr_assert_eq(e->ndim, 1);
    cr_assert_eq(e->shape[0], 2);
    cr_assert_eq(e->nbytes, 8);
    cr_assert_eq((const unsigned char *)e->data, p + n - 8);
    cr_assert_null(seer_st_find(f, "c"));
    cr_assert_str_eq(seer_st_metadata(f, "format"), "pt");
    cr_assert_null(seer_st_metadata(f, "nope"));
    cr_assert_str_eq(seer_st_metadata_key(f, 0), "format");
    cr_assert_null(seer_st_metadata_key(f, 1));
    seer_st_close(f);
    free(p);
}

Test(safetensors, rejects_corruption) {
    size_t n;
    seer_err_t err;
    seer_st_file_t *f;
    /* truncated: fewer than 8 bytes */
    cr_assert_lt(seer_st_open_buffer(&f, "abc", 3, "bad.safetensors", &err), 0);
    cr_assert(strstr(err.msg, "truncated"), "%s", err.msg);
    /* header length past the end */
    unsigned char *p = image("{}", 0, &n);
    p[0] = 200;
    cr_assert_lt(seer_st_open_buffer(&f, p, n, "bad.safetensors", &err), 0);
    cr_assert(strstr(err.msg, "past the end"), "%s", err.msg);
    free(p);
    /* absurd header length (bigger than the cap, within a big fake size) */
    p = image("{}", 0, &n);
    p[0] = 0;
    p[3] = 0x10; /* 256 MiB */
    cr_assert_lt(seer_st_open_buffer(&f, p, (size_t)1 << 40, "bad.safetensors", &err), 0);
    cr_assert(strstr(err.msg, "absurd"), "%s", err.msg);
    free(p);

    expect_bad("[1,2]", 0, "not a JSON object");
    expect_bad("{\"a\":", 0, "not valid JSON");
    expect_bad("{\"a\xff\":1}", 0, "UTF-8");
    expect_bad("{\"t\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "unknown dtype \"F8\"");
    expect_bad("{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 't': missing");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape[0]");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
               "9 dimensions");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
               "overflow");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 8, "past the end");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, "need 8");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "end before");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, "overlaps");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, "duplicate name");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, "not a string");
    expect_bad("{\"__metadata__\":[]}", 0, "__metadata__");
    expect_bad("{\"t\":3}", 0, "not an object");
}

Test(safetensors, missing_file) {
    seer_st_file_t *f;
    seer_err_t err;
    cr_assert_eq(seer_st_open(&f, "/nonexistent/x.safetensors", &err), SEER_ENOTFOUND);
    cr_assert(strstr(err.msg, "/nonexistent/x.safetensors"));
}

Test(safetensors, write_round_trip) {
    char dir[] = "/tmp/seer-st-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {0x3f80, 0x4000, 0xc040};
    int64_t c = 42;
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    seer_st_tensor_in_t in[3] = {{"weight", SEER_F32, 2, sa, a}, {"bias", SEER_BF16, 1, sb, b},
                                 {"scalar", SEER_I64, 0, NULL, &c}};
    const char *meta[] = {"format", "pt", "note", "héllo"};
    seer_err_t err;
    cr_assert_eq(seer_st_write(path, in, 3, meta, 2, &err), 0, "%s", err.msg);
    FILE *fp = fopen(path, "rb");
    unsigned char hdr[8];
    cr_assert_eq(fread(hdr, 1, 8, fp), 8);
    fclose(fp);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | hdr[i];
    cr_assert_eq(hl % 8, 0, "header padded to 8");
    seer_st_file_t *f;
    cr_assert_eq(seer_st_open(&f, path, &err), 0, "%s", err.msg);
    cr_assert_eq(seer_st_count(f), 3);
    cr_assert_str_eq(seer_st_entry(f, 0)->name, "weight"); /* given order */
    const seer_st_entry_t *e = seer_st_find(f, "weight");
    cr_assert_eq(memcmp(e->data, a, sizeof a), 0);
    cr_assert_eq(e->shape[1], 3);
    e = seer_st_find(f, "bias");
    cr_assert_eq(e->dtype, SEER_BF16);
    cr_assert_eq(memcmp(e->data, b, sizeof b), 0);
    e = seer_st_find(f, "scalar");
    cr_assert_eq(e->ndim, 0);
    cr_assert_eq(e->nbytes, 8);
    cr_assert_eq(memcmp(e->data, &c, 8), 0);
    cr_assert_str_eq(seer_st_metadata(f, "note"), "héllo");
    cr_assert_str_eq(seer_st_path(f), path);
    seer_st_close(f);
    /* duplicate names are refused and leave the old file in place */
    seer_st_tensor_in_t dup[2] = {{"x", SEER_F32, 1, sb, a}, {"x", SEER_F32, 1, sb, a}};
    cr_assert_lt(seer_st_write(path, dup, 2, NULL, 0, &err), 0);
    cr_assert(strstr(err.msg, "duplicate"), "%s", err.msg);
    cr_assert_eq(seer_st_open(&f, path, &err), 0);
    cr_assert_eq(seer_st_count(f), 3);
    seer_st_close(f);
    unlink(path);
    rmdir(dir);
}

Test(safetensors, real_model) {
    seer_st_file_t *f;
    seer_err_t err;
    cr_assert_eq(seer_st_open(&f, MODEL, &err), 0, "%s", err.msg);
    cr_assert_gt(seer_st_count(f), 10);
    const seer_st_entry_t *e = seer_st_find(f, "model.embed_tokens.weight");
    cr_assert_not_null(e);
    cr_assert_eq(e->dtype, SEER_F32);
    cr_assert_eq(e->ndim, 2);
    cr_assert_eq(e->shape[0], 512);
    cr_assert_eq(e->shape[1], 64);
    cr_assert_eq(e->nbytes, 512 * 64 * 4);
    for (size_t i = 0; i < seer_st_count(f); i++) {
        const seer_st_entry_t *x = seer_st_entry(f, i);
        cr_assert_eq(seer_st_find(f, x->name), x);
        if (i) cr_assert((const char *)x->data >= (const char *)seer_st_entry(f, i - 1)->data);
    }
    seer_st_close(f);
}
