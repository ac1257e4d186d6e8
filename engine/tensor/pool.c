/* The worker pool behind seer_pool_for: workers sleep on a condition variable, a job is a
 * generation number plus the loop to run, and the caller takes chunk 0 itself so a pool of
 * one thread costs nothing. */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct seer_pool {
    int nthreads;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    unsigned long generation;
    int pending;
    int stop;
    /* the current job */
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

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    seer_pool_t *p = wa->p;
    int index = wa->index;
    free(wa);
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->start, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        int mine = index < p->nchunks;
        pthread_mutex_unlock(&p->mu);
        if (mine) run_chunk(p, index);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
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

seer_pool_t *seer_pool_new(int nthreads) {
    seer_pool_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nthreads = nthreads > 0 ? nthreads : default_threads();
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

void seer_pool_free(seer_pool_t *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
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
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = (n + (size_t)t - 1) / (size_t)t;
    p->nchunks = t;
    p->pending = p->nthreads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;
static seer_pool_t *g_default; /* process-wide by nature: one set of cores */

static void make_default(void) { g_default = seer_pool_new(0); }

seer_pool_t *seer_pool_default(void) {
    pthread_once(&g_default_once, make_default);
    return g_default;
}
