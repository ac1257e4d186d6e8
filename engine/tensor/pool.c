/* The worker pool behind seer_pool_for. A job is a generation number plus the loop to run; the
 * caller takes chunk 0 itself, so a pool of one thread costs nothing.
 *
 * Waking a thread that sleeps on a condition variable costs 15-25 us on a VM (futex wake, an
 * inter-processor interrupt, the vCPU leaving its idle halt), and a decode step of a 36-layer
 * model dispatches about 300 loops: 5-7% of a 0.5B model's step on the 2-vCPU bench machine.
 * So between jobs each side spins for a bounded time (SEER_POOL_SPIN_US, default 100 us; 0
 * turns spinning off) on an atomic before it sleeps: a worker for the next generation, the
 * caller for the last chunk to finish. The spin yields the CPU every few microseconds
 * (sched_yield), so on a machine with more runnable threads than cores it gives way rather than
 * stealing a time slice; and it is bounded, so an idle pool sleeps (llama.cpp's OpenMP threads,
 * which spin for long by default, were 4-5x slower here beside other processes).
 *
 * Sleeping and waking cannot lose a wake-up: a sleeper raises its counter and then reads the
 * state it waits for, all under the mutex and in sequentially consistent order, and the side
 * that changes that state writes it first and then reads the counter, so at least one of the
 * two sees the other (and a sleeper holds the mutex until it is in pthread_cond_wait). */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define SEER_CPU_RELAX() _mm_pause()
#else
#define SEER_CPU_RELAX() ((void)0)
#endif

struct seer_pool {
    int nthreads;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    atomic_ulong generation;
    atomic_int pending;
    atomic_int stop;
    atomic_int sleepers;       /* workers in (or about to enter) pthread_cond_wait(start) */
    atomic_int caller_waiting; /* the caller is in (or about to enter) pthread_cond_wait(done) */
    long spin_ns;
    /* the current job: written before generation is bumped, read after it is seen */
    seer_pool_fn fn;
    void *ctx;
    size_t n, chunk;
    int nchunks;
};

typedef struct {
    seer_pool_t *p;
    int index;
} worker_arg;

static void run_chunk(seer_pool_t *p, int i) {
    size_t b = (size_t)i * p->chunk;
    size_t e = b + p->chunk;
    if (e > p->n) e = p->n;
    if (b < e) p->fn(p->ctx, b, e, i);
}

static long mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}

/* Spins until done(p, arg) or spin_ns have passed; returns done's last answer. */
static int spin_until(seer_pool_t *p, int (*done)(seer_pool_t *, unsigned long), unsigned long arg) {
    if (p->spin_ns <= 0) return done(p, arg);
    long t0 = mono_ns(), last_yield = t0;
    for (unsigned i = 1;; i++) {
        if (done(p, arg)) return 1;
        SEER_CPU_RELAX();
        if (i % 64 == 0) {
            long t = mono_ns();
            if (t - t0 >= p->spin_ns) return done(p, arg);
            if (t - last_yield >= 5000) {
                sched_yield();
                last_yield = t;
            }
        }
    }
}

static int new_job(seer_pool_t *p, unsigned long seen) {
    return atomic_load(&p->stop) || atomic_load(&p->generation) != seen;
}
static int all_done(seer_pool_t *p, unsigned long unused) {
    (void)unused;
    return atomic_load(&p->pending) == 0;
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    seer_pool_t *p = wa->p;
    int index = wa->index;
    free(wa);
    unsigned long seen = 0;
    for (;;) {
        if (!spin_until(p, new_job, seen)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (!new_job(p, seen)) pthread_cond_wait(&p->start, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->generation);
        if (index < p->nchunks) run_chunk(p, index);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

static int default_threads(void) {
    const char *env = getenv("SEER_THREADS");
    if (env && *env) {
        int n = atoi(env);
        if (n > 0) return n > 256 ? 256 : n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n > 256 ? 256 : n) : 1;
}

static long spin_setting(void) {
    const char *env = getenv("SEER_POOL_SPIN_US");
    if (env && *env) {
        char *end;
        long us = strtol(env, &end, 10);
        if (*end == 0 && us >= 0) return (us > 100000 ? 100000 : us) * 1000L;
    }
    return 100 * 1000L;
}

seer_pool_t *seer_pool_new(int nthreads) {
    seer_pool_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nthreads = nthreads > 0 ? nthreads : default_threads();
    p->spin_ns = spin_setting();
    atomic_init(&p->generation, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    if (p->nthreads > 1) {
        p->workers = calloc((size_t)p->nthreads - 1, sizeof *p->workers);
        if (!p->workers) {
            free(p);
            return NULL;
        }
        for (int i = 1; i < p->nthreads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa) *wa = (worker_arg){.p = p, .index = i};
            if (!wa || pthread_create(&p->workers[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                p->nthreads = i; /* run with the workers that did start */
                break;
            }
        }
    }
    return p;
}

static void wake_sleepers(seer_pool_t *p) {
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->start);
        pthread_mutex_unlock(&p->mu);
    }
}

void seer_pool_free(seer_pool_t *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    pthread_mutex_lock(&p->mu); /* a worker between its check and its wait holds the mutex */
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->nthreads; i++) pthread_join(p->workers[i - 1], NULL);
    free(p->workers);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    free(p);
}

int seer_pool_threads(const seer_pool_t *p) { return p ? p->nthreads : 1; }

void seer_pool_for(seer_pool_t *p, size_t n, size_t min_chunk, seer_pool_fn fn, void *ctx) {
    if (n == 0) return;
    if (min_chunk == 0) min_chunk = 1;
    int t = p ? p->nthreads : 1;
    size_t max_chunks = (n + min_chunk - 1) / min_chunk;
    if ((size_t)t > max_chunks) t = (int)max_chunks;
    if (t <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    /* every worker of the last job has finished with these fields (pending reached 0) */
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = (n + (size_t)t - 1) / (size_t)t;
    p->nchunks = t;
    atomic_store(&p->pending, p->nthreads - 1);
    atomic_fetch_add(&p->generation, 1); /* seq_cst: publishes the job, then sleepers is read */
    wake_sleepers(p);
    run_chunk(p, 0);
    if (!spin_until(p, all_done, 0)) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_waiting, 1);
        while (!all_done(p, 0)) pthread_cond_wait(&p->done, &p->mu);
        atomic_store(&p->caller_waiting, 0);
        pthread_mutex_unlock(&p->mu);
    }
}

static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;
static seer_pool_t *g_default; /* process-wide by nature: one set of cores */

static void make_default(void) { g_default = seer_pool_new(0); }

seer_pool_t *seer_pool_default(void) {
    pthread_once(&g_default_once, make_default);
    return g_default;
}
