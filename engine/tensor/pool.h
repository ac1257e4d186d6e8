/* A fixed pool of worker threads for data-parallel loops: seer_pool_for splits [0, n) into
 * contiguous chunks, runs them on the workers and the caller, and returns when all are done.
 * Sized to the cores (SEER_THREADS overrides). Chunks are fixed by n and the thread count, so
 * results never depend on scheduling. */
#ifndef SEER_POOL_H
#define SEER_POOL_H

#include <stddef.h>

typedef struct seer_pool seer_pool_t;

/* fn(ctx, begin, end, thread_index) handles [begin, end). */
typedef void (*seer_pool_fn)(void *ctx, size_t begin, size_t end, int thread_index);

/* nthreads <= 0: $SEER_THREADS if set, else the number of online cores. NULL on failure. */
seer_pool_t *seer_pool_new(int nthreads);
void seer_pool_free(seer_pool_t *p);
int seer_pool_threads(const seer_pool_t *p);

/* Runs fn over [0, n) in at most nthreads chunks of at least min_chunk items (small loops run
 * on the caller alone). Not reentrant: fn must not call seer_pool_for on the same pool. */
void seer_pool_for(seer_pool_t *p, size_t n, size_t min_chunk, seer_pool_fn fn, void *ctx);

/* The process-wide default pool, created on first use. */
seer_pool_t *seer_pool_default(void);

#endif
