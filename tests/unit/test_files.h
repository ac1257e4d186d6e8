/* File helpers shared by the unit tests (include after <criterion/criterion.h> and <stdio.h>). */
#ifndef SEER_TEST_FILES_H
#define SEER_TEST_FILES_H

/* A copy of src at dst (a link out of a model folder is refused: docs/security.md). */
static void copy_file(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    cr_assert(in && out, "cannot copy %s to %s", src, dst);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) cr_assert_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    cr_assert_eq(fclose(out), 0);
}

#endif
