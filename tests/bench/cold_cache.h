/* COLD=1 for the kernel benches (linear_kernel.c, kernel_pair.c): a 64 MiB buffer read line by
 * line before each timed call, so a matrix that would otherwise stay in L3 comes from memory, as
 * a model's weights do in a forward pass. Reads only: lines it leaves behind are clean, as the
 * weights' are in a model (a flush that wrote every line made each call write back 64 MiB of
 * dirty lines as its weights arrived). */
#ifndef SEER_BENCH_COLD_CACHE_H
#define SEER_BENCH_COLD_CACHE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COLD_BYTES ((size_t)64 << 20)
static volatile unsigned cold_sink;

/* The buffer when COLD=1 is set, else NULL; on out of memory the program exits 2 saying so. */
static unsigned char *cold_buffer(const char *prog) {
    const char *v = getenv("COLD");
    if (!v || !atoi(v)) return NULL;
    unsigned char *b = malloc(COLD_BYTES);
    if (!b) {
        fprintf(stderr, "%s: cannot allocate the 64 MiB COLD=1 buffer\n", prog);
        exit(2);
    }
    memset(b, 1, COLD_BYTES);
    return b;
}

/* Reads every line of the buffer (nothing when it is NULL). */
static void cold_flush(const unsigned char *b) {
    if (!b) return;
    unsigned acc = 0;
    for (size_t i = 0; i < COLD_BYTES; i += 64) acc += ((const volatile unsigned char *)b)[i];
    cold_sink += acc;
}
#endif
