/* Compute peak and read bandwidth of this machine for `make bench`: the prefill compute bound,
 * and a decode bound for the thread count in use. Usage: peak THREADS. Prints one line:
 * "FMA_GFLOPS AMX_GFLOPS READ_GBS READ4K_GBS", each summed over THREADS threads that run at once
 * (so two vCPUs that share one core's FMA units show it).
 *   FMA: f32 fused multiply-adds on 12 independent registers (AVX-512, else AVX2+FMA), the most
 *        an f32 kernel can do;
 *   AMX: bf16 tile products (TDPBF16PS on register tiles, no memory traffic), the most a bf16
 *        GEMM can do; 0 where the CPU or kernel has no AMX.
 *   READ: GB/s of streaming reads, each thread summing its own 256 MiB (what a decode step does
 *        with the weights, with nothing written back), on transparent huge pages (MADV_HUGEPAGE)
 *        as seer keeps the weights it reads into memory;
 *   READ4K: the same on 4 KiB pages (MADV_NOHUGEPAGE), as a file mapping is (llama.cpp's GGUF,
 *        seer's weights = "mapped"). Each is measured once, one after the other, so the VM's
 *        minute-to-minute drift is in their difference too.
 * Each is the best of 5 runs (FMA and AMX about 50 ms each, READ about 256 MiB per thread).
 * Not x86: prints "0 0 0 0".
 * Usage: peak THREADS read prints READ alone (a third of a second), which make bench measures
 * beside each decode round: on a VM whose memory bandwidth moves 2x from minute to minute, a
 * probe from another minute does not bound a round. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define ITERS 16000000L

#if defined(__x86_64__)
/* Each returns the flops it did (a*b + c on every lane of 12 registers, ITERS times). */
__attribute__((target("avx512f"))) static double fma512(float *sink) {
    __m512 a[12], b = _mm512_set1_ps(0.5f), c = _mm512_set1_ps(1.0f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < ITERS; k++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    *sink = _mm512_reduce_add_ps(s);
    return (double)ITERS * 12 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma256(float *sink) {
    __m256 a[12], b = _mm256_set1_ps(0.5f), c = _mm256_set1_ps(1.0f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    for (long k = 0; k < ITERS; k++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    float t[8];
    _mm256_storeu_ps(t, s);
    *sink = t[0];
    return (double)ITERS * 12 * 8 * 2;
}

typedef struct {
    uint8_t palette, start;
    uint8_t res[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg_t;

static int amx_usable(void) {
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!(d & (1u << 22)) || !(d & (1u << 24))) return 0; /* AMX-BF16, AMX-TILE */
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}

/* Four accumulators (tiles 0-3) fed by tiles 4-7: independent products, as a GEMM's inner
 * block does; each product is 16 x 16 x 32 multiply-adds. */
__attribute__((target("amx-tile,amx-bf16"))) static double amx(float *sink) {
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return 0;
    tilecfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    _tile_loadconfig(&cfg);
    static __thread uint16_t src[16 * 32];
    for (int i = 0; i < 16 * 32; i++) src[i] = 0x3c00; /* 2^-7 in bf16: sums stay finite */
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, src, 64);
    _tile_loadd(5, src, 64);
    _tile_loadd(6, src, 64);
    _tile_loadd(7, src, 64);
    long n = ITERS / 8;
    for (long k = 0; k < n; k++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float out[256];
    _tile_stored(0, out, 64);
    _tile_release();
    *sink = out[0];
    return (double)n * 4 * 16 * 16 * 32 * 2;
}
#endif

#define READ_BYTES ((size_t)256 << 20)
static __thread const uint64_t *g_slice; /* this thread's buffer for the read probe */
static int g_read_huge = 1;               /* the read probe's pages: huge (1) or 4 KiB (0) */

/* Returns the bytes read (the sum goes to *sink so that the loads stay). */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static double read512(float *sink) {
    const float *v = (const float *)g_slice;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < READ_BYTES / 4; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(v + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(v + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(v + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(v + i + 48));
    }
    *sink = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    return (double)READ_BYTES;
}

/* AVX2: 32-byte loads, as the AVX2 decode kernels read (scalar 8-byte loads read 10-35% less
 * here, below what seer's f32 decode reached, so they were no bound). */
__attribute__((target("avx2"))) static double read256(float *sink) {
    const float *v = (const float *)g_slice;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < READ_BYTES / 4; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(v + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(v + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(v + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(v + i + 24));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    *sink = _mm_cvtss_f32(_mm_add_ps(h, _mm_movehl_ps(h, h)));
    return (double)READ_BYTES;
}
#endif

static double read_slice(float *sink) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) return read512(sink);
    if (__builtin_cpu_supports("avx2")) return read256(sink);
#endif
    const uint64_t *v = g_slice;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (size_t i = 0; i < READ_BYTES / 8; i += 8) {
        s0 += v[i], s1 += v[i + 1], s2 += v[i + 2], s3 += v[i + 3];
        s4 += v[i + 4], s5 += v[i + 5], s6 += v[i + 6], s7 += v[i + 7];
    }
    *sink = (float)(s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7);
    return (double)READ_BYTES;
}

typedef double (*probe_fn)(float *);
typedef struct {
    probe_fn fn;
    pthread_barrier_t *bar;
    double flops, secs;
    float sink;
    void *map; /* the read probe's mapping */
} job_t;

static void *worker(void *arg) {
    job_t *j = arg;
    if (j->fn == read_slice) {
        /* 2 MiB-aligned inside a mapping 2 MiB longer, so that huge pages can back all of it */
        char *m = mmap(NULL, READ_BYTES + ((size_t)2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "peak: cannot allocate %zu MiB for the read probe\n", READ_BYTES >> 20);
            exit(1);
        }
        uint64_t *buf = (uint64_t *)(((uintptr_t)m + ((2u << 20) - 1)) & ~(uintptr_t)((2u << 20) - 1));
        (void)madvise(buf, READ_BYTES, g_read_huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        memset(buf, 1, READ_BYTES); /* pages in before the clock starts */
        g_slice = buf;
        j->map = m;
    }
    pthread_barrier_wait(j->bar);
    double t = now();
    j->flops = j->fn(&j->sink);
    j->secs = now() - t;
    if (j->fn == read_slice) munmap(j->map, READ_BYTES + ((size_t)2 << 20));
    return NULL;
}

/* Best of 5 of THREADS threads running fn at once; GFLOP/s summed over the threads. */
static double measure(probe_fn fn, int threads) {
    double best = 0;
    job_t *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    if (!jobs || !tids) {
        fprintf(stderr, "peak: out of memory\n");
        exit(1);
    }
    for (int r = 0; r < 5; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)threads);
        for (int i = 0; i < threads; i++) {
            jobs[i] = (job_t){.fn = fn, .bar = &bar};
            pthread_create(&tids[i], NULL, worker, &jobs[i]);
        }
        double total = 0;
        for (int i = 0; i < threads; i++) {
            pthread_join(tids[i], NULL);
            if (jobs[i].secs > 0) total += jobs[i].flops / jobs[i].secs / 1e9; /* GFLOP/s, or GB/s */
        }
        pthread_barrier_destroy(&bar);
        if (total > best) best = total;
    }
    free(jobs);
    free(tids);
    return best;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    int read_only = argc > 2 && strcmp(argv[2], "read") == 0;
    if (threads < 1 || threads > 1024 || (argc > 2 && !read_only) || argc > 3) {
        fprintf(stderr, "usage: peak THREADS [read] (THREADS 1 to 1024; read: the huge-page read probe alone, for a\n"
                        "figure measured beside each round of a benchmark)\n");
        return 2;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (read_only) {
        printf("%.1f\n", measure(read_slice, threads));
        return 0;
    }
    double f = __builtin_cpu_supports("avx512f")                                     ? measure(fma512, threads)
               : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? measure(fma256, threads)
                                                                                  : 0;
    double a = amx_usable() ? measure(amx, threads) : 0;
    double r = measure(read_slice, threads);
    g_read_huge = 0;
    printf("%.1f %.1f %.1f %.1f\n", f, a, r, measure(read_slice, threads));
#else
    printf(read_only ? "0\n" : "0 0 0 0\n");
#endif
    return 0;
}
