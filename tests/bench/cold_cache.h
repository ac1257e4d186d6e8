/* COLD=1 for the kernel benches (linear_kernel.c, kernel_pair.c): a buffer of twice the L3 (at
 * least 64 MiB; an Emerald Rapids VM reports 260 MiB of L3, where 64 MiB left a 0.5B shape's
 * weights in it) read line by line before each timed call, so a matrix that would otherwise stay
 * in L3 comes from memory, as a model's weights do in a forward pass. Reads only: lines it leaves behind are clean, as the
 * weights' are in a model (a flush that wrote every line made each call write back 64 MiB of
 * dirty lines as its weights arrived). */
#ifndef SEER_BENCH_COLD_CACHE_H
#define SEER_BENCH_COLD_CACHE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t cold_bytes = (size_t)64 << 20;
static volatile unsigned cold_sink;

/* The buffer when COLD=1 is set, else NULL; on out of memory the program exits 2 saying so. */
static unsigned char *cold_buffer(const char *prog) {
    const char *v = getenv("COLD");
    if (!v || !atoi(v)) return NULL;
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0 && (size_t)l3 * 2 > cold_bytes) cold_bytes = (size_t)l3 * 2;
    unsigned char *b = malloc(cold_bytes);
    if (!b) {
        fprintf(stderr, "%s: cannot allocate the %zu MiB COLD=1 buffer\n", prog, cold_bytes >> 20);
        exit(2);
    }
    memset(b, 1, cold_bytes);
    return b;
}

/* Reads every line of the buffer (nothing when it is NULL). */
static void cold_flush(const unsigned char *b) {
    if (!b) return;
    unsigned acc = 0;
    for (size_t i = 0; i < cold_bytes; i += 64) acc += ((const volatile unsigned char *)b)[i];
    cold_sink += acc;
}
#endif
