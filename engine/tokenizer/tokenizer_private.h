/* Shared by the files of engine/tokenizer/ (not by other subsystems): growable buffers and the
 * string hash map the loader and the encoder both use. */
#ifndef SEER_TOKENIZER_PRIVATE_H
#define SEER_TOKENIZER_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

/* A growable byte buffer whose allocation failure is sticky: operations after a failure do
 * nothing and `oom` stays set, so long sequences of appends need one check at the end. */
typedef struct tk_buf {
    char *p;
    size_t n, cap;
    int oom;
} tk_buf_t;

void tk_buf_reserve(tk_buf_t *b, size_t extra);
void tk_buf_add(tk_buf_t *b, const void *s, size_t len);
/* Appends b[off..off+len) to b itself (safe across reallocation). */
void tk_buf_add_self(tk_buf_t *b, size_t off, size_t len);
void tk_buf_add_cp(tk_buf_t *b, uint32_t cp);
void tk_buf_free(tk_buf_t *b);

struct tk_sm_entry {
    const char *s;
    uint32_t len;
    int32_t val;
    uint64_t hash;
};

/* String -> int32 map with open addressing; keys are copied into blocks owned by the map. */
typedef struct tk_strmap {
    struct tk_sm_entry *e;
    size_t n, cap_e;
    uint32_t *slots; /* entry index + 1; 0 = empty */
    size_t nslots;   /* power of two */
    struct tk_sm_block *blocks;
} tk_strmap_t;

/* 0 ok, -1 out of memory. Replaces the value of an existing key. *key_out (if not NULL)
 * points at the stored copy of the key. */
int tk_strmap_put(tk_strmap_t *m, const char *s, size_t len, int32_t val, const char **key_out);
/* -1 when absent. */
int32_t tk_strmap_get(const tk_strmap_t *m, const char *s, size_t len);
void tk_strmap_free(tk_strmap_t *m);

/* Decodes one code point of valid UTF-8; *n gets its length. */
uint32_t tk_utf8_decode(const unsigned char *p, size_t *n);

#endif
