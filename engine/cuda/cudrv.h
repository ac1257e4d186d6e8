/* The CUDA driver API, loaded at run time with dlopen("libcuda.so.1") (docs/cuda.md): the
 * binary has no link-time dependency on CUDA and starts on machines without a driver, where
 * every entry point below reports why there is no GPU instead of crashing. The kernels are
 * compiled by nvcc during `make` into one fatbin (sm_80, sm_90 and compute_90 PTX) that is
 * embedded in the binary and loaded into each device's context on first use.
 *
 * Types are declared here (the driver ABI: CUresult is an int, CUdeviceptr a 64-bit address,
 * handles are opaque pointers), so the C build needs no CUDA headers. */
#ifndef SEER_CUDRV_H
#define SEER_CUDRV_H

#include <stddef.h>
#include <stdint.h>

#include "../seer.h"

typedef uint64_t seer_devptr_t; /* CUdeviceptr */
typedef struct seer_cuda_fn seer_cuda_fn_t; /* a kernel of the embedded fatbin (CUfunction) */

typedef struct seer_cuda_devinfo {
    int index;
    char name[256];
    int cc_major, cc_minor;
    int sm_count;
    size_t total_bytes, free_bytes; /* free_bytes: 0 when no context could be made to ask */
    int mem_clock_khz, bus_width_bits; /* for a theoretical bandwidth figure; 0 when unknown */
} seer_cuda_devinfo_t;

/* Number of usable GPUs; 0 with *why set (one line: no driver, cuInit failed, no device) when
 * there is none. Loads and initialises the driver once per process; cheap afterwards. */
int seer_cuda_device_count(char *why, size_t whylen);
int seer_cuda_device_info(int index, seer_cuda_devinfo_t *info, seer_err_t *err);
/* The driver's CUDA version as "13.0" into buf ("" when unknown). */
const char *seer_cuda_driver_version(char *buf, size_t n);

/* The embedded fatbin (engine/cuda/fatbin.S): size 0 when this binary was built without nvcc. */
const unsigned char *seer_cuda_fatbin(size_t *size);

/* One GPU in use: its primary context, a stream and the loaded kernels. Not thread-safe: one
 * host thread drives a device at a time (the model runtime's forward pass). */
typedef struct seer_cuda_dev seer_cuda_dev_t;
/* Opens device `index` ("cuda:index"): retains its primary context, creates a stream and loads
 * the embedded kernels. Errors say which step failed and the driver's message. */
int seer_cuda_open(seer_cuda_dev_t **out, int index, seer_err_t *err);
void seer_cuda_close(seer_cuda_dev_t *d);
int seer_cuda_index(const seer_cuda_dev_t *d);
const seer_cuda_devinfo_t *seer_cuda_info(const seer_cuda_dev_t *d);
/* Makes d's context current on the calling thread (each entry point below does it itself). */
int seer_cuda_bind(seer_cuda_dev_t *d, seer_err_t *err);

/* Device memory. what names the allocation in the out-of-memory error, which states what was
 * needed and what was free: "cuda:0: out of GPU memory for the KV cache: needs 2.00 GiB, 1.20
 * GiB of 79.10 GiB free". */
/* "1.25 GiB", "24.4 MiB", "97.7 KiB" into buf (32 bytes is enough). */
const char *seer_cuda_fmt_bytes(size_t bytes, char *buf, size_t n);
int seer_cuda_alloc(seer_cuda_dev_t *d, seer_devptr_t *out, size_t bytes, const char *what, seer_err_t *err);
void seer_cuda_free(seer_cuda_dev_t *d, seer_devptr_t p);
int seer_cuda_mem_info(seer_cuda_dev_t *d, size_t *free_bytes, size_t *total_bytes, seer_err_t *err);
/* Page-locked host memory for staging copies. */
int seer_cuda_host_alloc(seer_cuda_dev_t *d, void **out, size_t bytes, seer_err_t *err);
void seer_cuda_host_free(seer_cuda_dev_t *d, void *p);
/* Copies on d's stream; the *_sync forms wait for the stream. */
int seer_cuda_htod(seer_cuda_dev_t *d, seer_devptr_t dst, const void *src, size_t bytes, seer_err_t *err);
int seer_cuda_dtoh(seer_cuda_dev_t *d, void *dst, seer_devptr_t src, size_t bytes, seer_err_t *err);
int seer_cuda_dtod(seer_cuda_dev_t *d, seer_devptr_t dst, seer_devptr_t src, size_t bytes, seer_err_t *err);
int seer_cuda_memset0(seer_cuda_dev_t *d, seer_devptr_t dst, size_t bytes, seer_err_t *err);
int seer_cuda_sync(seer_cuda_dev_t *d, seer_err_t *err);

/* A kernel by name (extern "C" in the kernels/ sources); NULL with err naming it when the fatbin lacks
 * it. Looked up once and cached per device. */
seer_cuda_fn_t *seer_cuda_fn(seer_cuda_dev_t *d, const char *name, seer_err_t *err);
/* Launches fn on d's stream: grid and block sizes, dynamic shared memory bytes, and the
 * kernel's arguments as an array of pointers to each argument (the driver's convention). */
int seer_cuda_launch(seer_cuda_dev_t *d, seer_cuda_fn_t *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                     unsigned by, unsigned bz, unsigned shmem, void **args, seer_err_t *err);
/* Raises fn's dynamic shared memory limit (above 48 KiB needs it). */
int seer_cuda_fn_max_shared(seer_cuda_dev_t *d, seer_cuda_fn_t *fn, int bytes, seer_err_t *err);

/* Timing on d's stream: an event pair; elapsed milliseconds after the second is recorded. */
typedef struct seer_cuda_timer seer_cuda_timer_t;
int seer_cuda_timer_new(seer_cuda_dev_t *d, seer_cuda_timer_t **out, seer_err_t *err);
int seer_cuda_timer_start(seer_cuda_timer_t *t, seer_err_t *err);
int seer_cuda_timer_stop(seer_cuda_timer_t *t, float *ms, seer_err_t *err);
void seer_cuda_timer_free(seer_cuda_timer_t *t);

/* cuBLAS (libcublas.so.13, loaded with dlopen on first use): y[n][out] = x[n][in] W[out][in]^T
 * with bf16 x and W, f32 accumulation and f32 y (beta 0). 0 when cuBLAS is not available (then
 * the caller runs its own kernel), 1 when it ran, < 0 on a cuBLAS error. */
int seer_cuda_gemm_bf16(seer_cuda_dev_t *d, seer_devptr_t y, seer_devptr_t x, seer_devptr_t w, int n, int in, int out,
                        seer_err_t *err);

/* A strided batched product in cuBLAS's column-major terms, bf16 operands, f32 C and f32
 * accumulation: for each b < batch, C_b (m x n, ldc) = op(A_b) (m x k) . B_b (k x n, ldb)
 * (+ C_b when accumulate), op(A) = A^T (A stored k x m, lda) when trans_a, else A (m x k, lda);
 * X_b = X + b * stride_x elements. */
typedef struct {
    int trans_a, m, n, k, batch, accumulate;
    seer_devptr_t a, b, c;
    int lda, ldb, ldc;
    long long stride_a, stride_b, stride_c;
} seer_cuda_gemm_t;
/* 1 when it ran, 0 when cuBLAS (or its strided batched product) is not available, < 0 on an error. */
int seer_cuda_gemm_batched_bf16(seer_cuda_dev_t *d, const seer_cuda_gemm_t *g, seer_err_t *err);
/* Whether seer_cuda_gemm_batched_bf16 can run (loads cuBLAS on first use). */
int seer_cuda_has_batched_gemm(seer_cuda_dev_t *d);

/* Event marks on the device's stream, for timing the pieces of a pass: mark i records event i;
 * elapsed(i, j) waits for j and gives the milliseconds between the two. */
typedef struct seer_cuda_marks seer_cuda_marks_t;
int seer_cuda_marks_new(seer_cuda_dev_t *d, int cap, seer_cuda_marks_t **out, seer_err_t *err);
int seer_cuda_mark(seer_cuda_marks_t *m, int i, seer_err_t *err);
int seer_cuda_marks_elapsed(seer_cuda_marks_t *m, int i, int j, float *ms, seer_err_t *err);
void seer_cuda_marks_free(seer_cuda_marks_t *m);

#endif
