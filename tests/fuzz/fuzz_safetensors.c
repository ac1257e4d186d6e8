/* libFuzzer target: the safetensors header parser and its validation. Any input must either be
 * rejected with an error or give entries whose bytes all lie inside the input (touched here so
 * ASan sees an out-of-bounds read). */
#include <stddef.h>
#include <stdint.h>

#include "tensor/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    seer_st_file_t *f;
    seer_err_t err;
    if (seer_st_open_buffer(&f, data, size, "fuzz", &err) < 0) return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < seer_st_count(f); i++) {
        const seer_st_entry_t *e = seer_st_entry(f, i);
        if (e->nbytes) sink ^= ((const uint8_t *)e->data)[0] ^ ((const uint8_t *)e->data)[e->nbytes - 1];
        if (seer_st_find(f, e->name) == NULL) __builtin_trap();
    }
    (void)sink;
    seer_st_close(f);
    return 0;
}
