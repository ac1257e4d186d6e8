/* The worker pool (engine/tensor/pool.c): every index of every loop runs exactly once, and a
 * dispatch is never lost, whether the workers are spinning between jobs, asleep on the
 * condition variable (spinning off, or a pause longer than the spin), or being freed. A lost
 * wake-up would hang, which the timeouts turn into a failure. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "tensor/pool.h"

typedef struct {
    atomic_int *hits;
    atomic_int calls;
} job_t;

static void mark(void *ctx, size_t begin, size_t end, int thread) {
    job_t *j = ctx;
    cr_assert(thread >= 0 && thread < 8);
    for (size_t i = begin; i < end; i++) atomic_fetch_add(&j->hits[i], 1);
    atomic_fetch_add(&j->calls, 1);
}

/* rounds dispatches of loops of varying size, pausing pause_us between some of them; each index
 * of each loop must be hit once. */
static void run(int threads, int rounds, int pause_us) {
    seer_pool_t *p = seer_pool_new(threads);
    cr_assert(p);
    cr_assert_eq(seer_pool_threads(p), threads);
    enum { N = 1000 };
    atomic_int hits[N];
    for (int r = 0; r < rounds; r++) {
        size_t n = 1 + (size_t)(r * 7919) % N;
        for (size_t i = 0; i < n; i++) atomic_init(&hits[i], 0);
        job_t j = {.hits = hits};
        atomic_init(&j.calls, 0);
        seer_pool_for(p, n, 1 + (size_t)(r % 5), mark, &j);
        for (size_t i = 0; i < n; i++) cr_assert_eq(atomic_load(&hits[i]), 1, "round %d: index %zu of %zu ran %d times", r, i, n, atomic_load(&hits[i]));
        cr_assert(atomic_load(&j.calls) >= 1 && atomic_load(&j.calls) <= threads);
        if (pause_us && r % 3 == 0) usleep((useconds_t)pause_us);
    }
    seer_pool_free(p);
}

Test(pool, back_to_back_spinning, .timeout = 60) {
    setenv("SEER_POOL_SPIN_US", "100", 1);
    run(2, 20000, 0);
    run(4, 5000, 0);
}

Test(pool, workers_asleep_between_jobs, .timeout = 60) {
    setenv("SEER_POOL_SPIN_US", "100", 1);
    run(2, 600, 400); /* longer than the spin: workers and caller go to sleep */
    run(3, 300, 150);
}

Test(pool, spinning_off, .timeout = 60) {
    setenv("SEER_POOL_SPIN_US", "0", 1);
    run(2, 5000, 0);
    run(3, 300, 50);
}

Test(pool, free_while_spinning_or_asleep, .timeout = 60) {
    for (int k = 0; k < 50; k++) {
        setenv("SEER_POOL_SPIN_US", k % 2 ? "0" : "100000", 1);
        run(2 + k % 3, 3, k % 4 == 0 ? 200 : 0);
    }
}

Test(pool, one_thread_and_small_loops_run_on_the_caller) {
    seer_pool_t *p = seer_pool_new(1);
    atomic_int hits[10];
    for (int i = 0; i < 10; i++) atomic_init(&hits[i], 0);
    job_t j = {.hits = hits};
    atomic_init(&j.calls, 0);
    seer_pool_for(p, 10, 1, mark, &j);
    cr_assert_eq(atomic_load(&j.calls), 1);
    seer_pool_free(p);
    p = seer_pool_new(4);
    atomic_init(&j.calls, 0);
    seer_pool_for(p, 10, 100, mark, &j); /* below min_chunk: one call */
    cr_assert_eq(atomic_load(&j.calls), 1);
    seer_pool_for(p, 0, 1, mark, &j); /* nothing to do */
    cr_assert_eq(atomic_load(&j.calls), 1);
    seer_pool_free(p);
}
