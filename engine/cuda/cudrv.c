/* The CUDA driver API through dlopen (see cudrv.h). Every driver call goes through a function
 * pointer resolved once; a failure is reported with the driver's own error name and text. */
#include "cudrv.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUevent;

/* Driver constants (cuda.h). */
#define CUDA_SUCCESS 0
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE 36
#define CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH 37
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_STREAM_NON_BLOCKING 1
#define CU_EVENT_DEFAULT 0

/* The versioned symbol names cuda.h maps the API names to. */
#define DRIVER_FUNCS(X)                                                                                    \
    X(cuInit, CUresult, (unsigned))                                                                        \
    X(cuDriverGetVersion, CUresult, (int *))                                                               \
    X(cuGetErrorName, CUresult, (CUresult, const char **))                                                 \
    X(cuGetErrorString, CUresult, (CUresult, const char **))                                               \
    X(cuDeviceGetCount, CUresult, (int *))                                                                 \
    X(cuDeviceGet, CUresult, (CUdevice *, int))                                                            \
    X(cuDeviceGetName, CUresult, (char *, int, CUdevice))                                                  \
    X(cuDeviceTotalMem_v2, CUresult, (size_t *, CUdevice))                                                 \
    X(cuDeviceGetAttribute, CUresult, (int *, int, CUdevice))                                              \
    X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice))                                         \
    X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice))                                                  \
    X(cuCtxSetCurrent, CUresult, (CUcontext))                                                              \
    X(cuMemGetInfo_v2, CUresult, (size_t *, size_t *))                                                     \
    X(cuMemAlloc_v2, CUresult, (seer_devptr_t *, size_t))                                                  \
    X(cuMemFree_v2, CUresult, (seer_devptr_t))                                                             \
    X(cuMemAllocHost_v2, CUresult, (void **, size_t))                                                      \
    X(cuMemFreeHost, CUresult, (void *))                                                                   \
    X(cuMemcpyHtoDAsync_v2, CUresult, (seer_devptr_t, const void *, size_t, CUstream))                     \
    X(cuMemcpyDtoHAsync_v2, CUresult, (void *, seer_devptr_t, size_t, CUstream))                          \
    X(cuMemcpyDtoDAsync_v2, CUresult, (seer_devptr_t, seer_devptr_t, size_t, CUstream))                   \
    X(cuMemsetD8Async, CUresult, (seer_devptr_t, unsigned char, size_t, CUstream))                        \
    X(cuModuleLoadData, CUresult, (CUmodule *, const void *))                                              \
    X(cuModuleUnload, CUresult, (CUmodule))                                                                \
    X(cuModuleGetFunction, CUresult, (CUfunction *, CUmodule, const char *))                               \
    X(cuFuncSetAttribute, CUresult, (CUfunction, int, int))                                                \
    X(cuLaunchKernel, CUresult,                                                                            \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, \
       void **))                                                                                           \
    X(cuStreamCreate, CUresult, (CUstream *, unsigned))                                                    \
    X(cuStreamDestroy_v2, CUresult, (CUstream))                                                            \
    X(cuStreamSynchronize, CUresult, (CUstream))                                                           \
    X(cuEventCreate, CUresult, (CUevent *, unsigned))                                                      \
    X(cuEventDestroy_v2, CUresult, (CUevent))                                                              \
    X(cuEventRecord, CUresult, (CUevent, CUstream))                                                        \
    X(cuEventSynchronize, CUresult, (CUevent))                                                             \
    X(cuEventElapsedTime_v2, CUresult, (float *, CUevent, CUevent))

static struct {
#define X(name, ret, args) ret(*name) args;
    DRIVER_FUNCS(X)
#undef X
} drv;

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static int drv_count = -1;
static char drv_why[512];

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a driver result. */
static const char *cu_msg(CUresult r, char *buf, size_t n) {
    const char *name = NULL, *text = NULL;
    if (drv.cuGetErrorName) drv.cuGetErrorName(r, &name);
    if (drv.cuGetErrorString) drv.cuGetErrorString(r, &text);
    snprintf(buf, n, "%s (%s)", name ? name : "CUDA error", text ? text : "no description");
    return buf;
}

static int cu_fail(seer_err_t *err, CUresult r, const char *what) {
    char m[256];
    return seer_err_set(err, SEER_EIO, "CUDA: %s failed: %s", what, cu_msg(r, m, sizeof m));
}

static void drv_load(void) {
    drv_count = 0;
    const char *lib = getenv("SEER_LIBCUDA");
    if (!lib || !*lib) lib = "libcuda.so.1";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(drv_why, sizeof drv_why, "no NVIDIA driver (%s could not be loaded)", lib);
        return;
    }
#define X(name, ret, args)                                                                        \
    drv.name = (ret(*) args)dlsym(h, #name);                                                      \
    if (!drv.name) {                                                                              \
        snprintf(drv_why, sizeof drv_why, "the NVIDIA driver %s lacks %s (too old for CUDA 13?)", lib, #name); \
        memset(&drv, 0, sizeof drv);                                                              \
        return;                                                                                   \
    }
    DRIVER_FUNCS(X)
#undef X
    char m[256];
    CUresult r = drv.cuInit(0);
    if (r != CUDA_SUCCESS) {
        snprintf(drv_why, sizeof drv_why, "the NVIDIA driver did not initialise: %s", cu_msg(r, m, sizeof m));
        return;
    }
    int n = 0;
    r = drv.cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS) {
        snprintf(drv_why, sizeof drv_why, "cuDeviceGetCount failed: %s", cu_msg(r, m, sizeof m));
        return;
    }
    if (n <= 0) {
        snprintf(drv_why, sizeof drv_why, "the NVIDIA driver sees no GPU");
        return;
    }
    int v = 0;
    drv.cuDriverGetVersion(&v);
    if (v > 0 && v < 13000) {
        snprintf(drv_why, sizeof drv_why,
                 "the NVIDIA driver supports CUDA %d.%d but seer's kernels need CUDA 13.0 (update the driver)", v / 1000,
                 v % 1000 / 10);
        return;
    }
    drv_count = n;
}

int seer_cuda_device_count(char *why, size_t whylen) {
    pthread_once(&drv_once, drv_load);
    if (why && whylen) snprintf(why, whylen, "%s", drv_count > 0 ? "" : drv_why);
    return drv_count;
}

const char *seer_cuda_driver_version(char *buf, size_t n) {
    int v = 0;
    if (seer_cuda_device_count(NULL, 0) > 0 || drv.cuDriverGetVersion) drv.cuDriverGetVersion(&v);
    if (v > 0)
        snprintf(buf, n, "%d.%d", v / 1000, v % 1000 / 10);
    else if (n)
        buf[0] = 0;
    return buf;
}

int seer_cuda_device_info(int index, seer_cuda_devinfo_t *info, seer_err_t *err) {
    char why[512];
    int count = seer_cuda_device_count(why, sizeof why);
    if (count <= 0) return seer_err_set(err, SEER_EUNSUPPORTED, "CUDA: %s", why);
    if (index < 0 || index >= count)
        return seer_err_set(err, SEER_EINVAL, "cuda:%d does not exist: this machine has %d GPU%s (cuda:0 .. cuda:%d)",
                            index, count, count == 1 ? "" : "s", count - 1);
    memset(info, 0, sizeof *info);
    info->index = index;
    CUdevice dev;
    CUresult r = drv.cuDeviceGet(&dev, index);
    if (r != CUDA_SUCCESS) return cu_fail(err, r, "cuDeviceGet");
    if ((r = drv.cuDeviceGetName(info->name, (int)sizeof info->name - 1, dev)) != CUDA_SUCCESS)
        return cu_fail(err, r, "cuDeviceGetName");
    if ((r = drv.cuDeviceTotalMem_v2(&info->total_bytes, dev)) != CUDA_SUCCESS) return cu_fail(err, r, "cuDeviceTotalMem");
    drv.cuDeviceGetAttribute(&info->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    drv.cuDeviceGetAttribute(&info->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    drv.cuDeviceGetAttribute(&info->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    drv.cuDeviceGetAttribute(&info->mem_clock_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev);
    drv.cuDeviceGetAttribute(&info->bus_width_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev);
    /* Free memory needs a context: the primary one, released again (it stays alive while any
     * other user of this process holds it). */
    CUcontext ctx = NULL;
    if (drv.cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS) {
        size_t fr = 0, tot = 0;
        if (drv.cuCtxSetCurrent(ctx) == CUDA_SUCCESS && drv.cuMemGetInfo_v2(&fr, &tot) == CUDA_SUCCESS)
            info->free_bytes = fr;
        drv.cuCtxSetCurrent(NULL);
        drv.cuDevicePrimaryCtxRelease_v2(dev);
    }
    return 0;
}

/* ---- the embedded kernels ------------------------------------------------------------------ */

/* engine/cuda/fatbin.S: one table of (name, start, end) per kernels/NAME.cu. */
typedef struct {
    const char *name;
    const unsigned char *start, *end;
} seer_fatbin_entry_t;
extern const seer_fatbin_entry_t seer_cuda_fatbins[];
extern const int seer_cuda_nfatbins;

const unsigned char *seer_cuda_fatbin(size_t *size) {
    size_t total = 0;
    for (int i = 0; i < seer_cuda_nfatbins; i++) total += (size_t)(seer_cuda_fatbins[i].end - seer_cuda_fatbins[i].start);
    if (size) *size = total;
    return seer_cuda_nfatbins > 0 ? seer_cuda_fatbins[0].start : NULL;
}

#define MAX_MODULES 32
#define FN_CACHE 64

struct seer_cuda_fn {
    char name[64];
    CUfunction f;
};

struct seer_cuda_dev {
    int index;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUmodule mods[MAX_MODULES];
    int nmods;
    seer_cuda_fn_t fns[FN_CACHE];
    int nfns;
    seer_cuda_devinfo_t info;
    /* cuBLAS, loaded on first use (seer_cuda_gemm_bf16). */
    int blas_state; /* 0: not tried, 1: ready, -1: unavailable */
    void *blas;
};

static int bind_ctx(seer_cuda_dev_t *d, seer_err_t *err) {
    CUresult r = drv.cuCtxSetCurrent(d->ctx);
    return r == CUDA_SUCCESS ? 0 : cu_fail(err, r, "cuCtxSetCurrent");
}

int seer_cuda_bind(seer_cuda_dev_t *d, seer_err_t *err) { return bind_ctx(d, err); }

int seer_cuda_open(seer_cuda_dev_t **out, int index, seer_err_t *err) {
    *out = NULL;
    seer_cuda_dev_t *d = calloc(1, sizeof *d);
    if (!d) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int rc = seer_cuda_device_info(index, &d->info, err);
    if (rc < 0) {
        free(d);
        return rc;
    }
    d->index = index;
    CUresult r;
    if ((r = drv.cuDeviceGet(&d->dev, index)) != CUDA_SUCCESS) {
        free(d);
        return cu_fail(err, r, "cuDeviceGet");
    }
    if ((r = drv.cuDevicePrimaryCtxRetain(&d->ctx, d->dev)) != CUDA_SUCCESS) {
        free(d);
        return cu_fail(err, r, "cuDevicePrimaryCtxRetain");
    }
    if ((rc = bind_ctx(d, err)) < 0) goto fail;
    if ((r = drv.cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
        rc = cu_fail(err, r, "cuStreamCreate");
        goto fail;
    }
    if (seer_cuda_nfatbins == 0) {
        rc = seer_err_set(err, SEER_EUNSUPPORTED,
                          "this seer was built without nvcc, so it has no CUDA kernels; install the CUDA toolkit "
                          "(/usr/local/cuda) and rebuild with make");
        goto fail;
    }
    for (int i = 0; i < seer_cuda_nfatbins && i < MAX_MODULES; i++) {
        if ((r = drv.cuModuleLoadData(&d->mods[d->nmods], seer_cuda_fatbins[i].start)) != CUDA_SUCCESS) {
            char m[256];
            rc = seer_err_set(err, SEER_EIO,
                              "CUDA: loading the kernels of kernels/%s.cu on cuda:%d (%s, compute capability %d.%d) "
                              "failed: %s; seer's kernels are built for sm_80, sm_90 and compute_90",
                              seer_cuda_fatbins[i].name, index, d->info.name, d->info.cc_major, d->info.cc_minor,
                              cu_msg(r, m, sizeof m));
            goto fail;
        }
        d->nmods++;
    }
    *out = d;
    return 0;
fail:
    seer_cuda_close(d);
    return rc;
}

void seer_cuda_blas_free(void *blas); /* below */

void seer_cuda_close(seer_cuda_dev_t *d) {
    if (!d) return;
    if (d->ctx) {
        drv.cuCtxSetCurrent(d->ctx);
        if (d->blas) seer_cuda_blas_free(d->blas);
        for (int i = 0; i < d->nmods; i++) drv.cuModuleUnload(d->mods[i]);
        if (d->stream) drv.cuStreamDestroy_v2(d->stream);
        drv.cuCtxSetCurrent(NULL);
        drv.cuDevicePrimaryCtxRelease_v2(d->dev);
    }
    free(d);
}

int seer_cuda_index(const seer_cuda_dev_t *d) { return d->index; }
const seer_cuda_devinfo_t *seer_cuda_info(const seer_cuda_dev_t *d) { return &d->info; }

/* ---- memory -------------------------------------------------------------------------------- */

const char *seer_cuda_fmt_bytes(size_t bytes, char *buf, size_t n) {
    double b = (double)bytes;
    if (b >= 1073741824.0) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(buf, n, "%.1f MiB", b / 1048576.0);
    else snprintf(buf, n, "%.1f KiB", b / 1024.0);
    return buf;
}

int seer_cuda_mem_info(seer_cuda_dev_t *d, size_t *free_bytes, size_t *total_bytes, seer_err_t *err) {
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    CUresult r = drv.cuMemGetInfo_v2(free_bytes, total_bytes);
    return r == CUDA_SUCCESS ? 0 : cu_fail(err, r, "cuMemGetInfo");
}

int seer_cuda_alloc(seer_cuda_dev_t *d, seer_devptr_t *out, size_t bytes, const char *what, seer_err_t *err) {
    *out = 0;
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    if (bytes == 0) bytes = 16;
    CUresult r = drv.cuMemAlloc_v2(out, bytes);
    if (r == CUDA_SUCCESS) return 0;
    size_t fr = 0, tot = 0;
    drv.cuMemGetInfo_v2(&fr, &tot);
    char m[256], a[32], b[32], c[32];
    return seer_err_set(err, SEER_ENOMEM, "cuda:%d: out of GPU memory for %s: needs %s, %s of %s free (%s)", d->index,
                        what, seer_cuda_fmt_bytes(bytes, a, sizeof a), seer_cuda_fmt_bytes(fr, b, sizeof b),
                        seer_cuda_fmt_bytes(tot, c, sizeof c), cu_msg(r, m, sizeof m));
}

void seer_cuda_free(seer_cuda_dev_t *d, seer_devptr_t p) {
    if (!p) return;
    drv.cuCtxSetCurrent(d->ctx);
    drv.cuMemFree_v2(p);
}

int seer_cuda_host_alloc(seer_cuda_dev_t *d, void **out, size_t bytes, seer_err_t *err) {
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    CUresult r = drv.cuMemAllocHost_v2(out, bytes);
    return r == CUDA_SUCCESS ? 0 : cu_fail(err, r, "cuMemAllocHost (pinned staging memory)");
}

void seer_cuda_host_free(seer_cuda_dev_t *d, void *p) {
    if (!p) return;
    drv.cuCtxSetCurrent(d->ctx);
    drv.cuMemFreeHost(p);
}

int seer_cuda_sync(seer_cuda_dev_t *d, seer_err_t *err) {
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    CUresult r = drv.cuStreamSynchronize(d->stream);
    return r == CUDA_SUCCESS ? 0 : cu_fail(err, r, "a kernel or copy on the stream (cuStreamSynchronize)");
}

int seer_cuda_htod(seer_cuda_dev_t *d, seer_devptr_t dst, const void *src, size_t bytes, seer_err_t *err) {
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    CUresult r = drv.cuMemcpyHtoDAsync_v2(dst, src, bytes, d->stream);
    return r == CUDA_SUCCESS ? 0 : cu_fail(err, r, "cuMemcpyHtoDAsync");
}

int seer_cuda_dtoh(seer_cuda_dev_t *d, void *dst, seer_devptr_t src, size_t bytes, seer_err_t *err) {
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    CUresult r = drv.cuMemcpyDtoHAsync_v2(dst, src, bytes, d->stream);
    if (r != CUDA_SUCCESS) return cu_fail(err, r, "cuMemcpyDtoHAsync");
    return seer_cuda_sync(d, err);
}

int seer_cuda_dtod(seer_cuda_dev_t *d, seer_devptr_t dst, seer_devptr_t src, size_t bytes, seer_err_t *err) {
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    CUresult r = drv.cuMemcpyDtoDAsync_v2(dst, src, bytes, d->stream);
    return r == CUDA_SUCCESS ? 0 : cu_fail(err, r, "cuMemcpyDtoDAsync");
}

int seer_cuda_memset0(seer_cuda_dev_t *d, seer_devptr_t dst, size_t bytes, seer_err_t *err) {
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    CUresult r = drv.cuMemsetD8Async(dst, 0, bytes, d->stream);
    return r == CUDA_SUCCESS ? 0 : cu_fail(err, r, "cuMemsetD8Async");
}

/* ---- kernels ------------------------------------------------------------------------------- */

seer_cuda_fn_t *seer_cuda_fn(seer_cuda_dev_t *d, const char *name, seer_err_t *err) {
    for (int i = 0; i < d->nfns; i++)
        if (strcmp(d->fns[i].name, name) == 0) return &d->fns[i];
    if (d->nfns == FN_CACHE || strlen(name) >= sizeof d->fns[0].name) {
        seer_err_set(err, SEER_EINVAL, "CUDA: kernel name table full or name too long (%s)", name);
        return NULL;
    }
    if (bind_ctx(d, err) < 0) return NULL;
    for (int i = 0; i < d->nmods; i++) {
        CUfunction f = NULL;
        if (drv.cuModuleGetFunction(&f, d->mods[i], name) == CUDA_SUCCESS && f) {
            seer_cuda_fn_t *e = &d->fns[d->nfns++];
            snprintf(e->name, sizeof e->name, "%s", name);
            e->f = f;
            return e;
        }
    }
    seer_err_set(err, SEER_EINVAL, "CUDA: the embedded kernels have no function %s (stale build? run make)", name);
    return NULL;
}

int seer_cuda_launch(seer_cuda_dev_t *d, seer_cuda_fn_t *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                     unsigned by, unsigned bz, unsigned shmem, void **args, seer_err_t *err) {
    if (gx == 0 || gy == 0 || gz == 0) return 0; /* nothing to do (an empty range) */
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    CUresult r = drv.cuLaunchKernel(fn->f, gx, gy, gz, bx, by, bz, shmem, d->stream, args, NULL);
    if (r == CUDA_SUCCESS) return 0;
    char what[160];
    snprintf(what, sizeof what, "launching %s (grid %ux%ux%u, block %ux%ux%u, %u B shared)", fn->name, gx, gy, gz, bx,
             by, bz, shmem);
    return cu_fail(err, r, what);
}

int seer_cuda_fn_max_shared(seer_cuda_dev_t *d, seer_cuda_fn_t *fn, int bytes, seer_err_t *err) {
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    CUresult r = drv.cuFuncSetAttribute(fn->f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
    return r == CUDA_SUCCESS ? 0 : cu_fail(err, r, "cuFuncSetAttribute(max dynamic shared memory)");
}

/* ---- timers -------------------------------------------------------------------------------- */

struct seer_cuda_timer {
    seer_cuda_dev_t *d;
    CUevent a, b;
};

int seer_cuda_timer_new(seer_cuda_dev_t *d, seer_cuda_timer_t **out, seer_err_t *err) {
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    seer_cuda_timer_t *t = calloc(1, sizeof *t);
    if (!t) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    t->d = d;
    CUresult r;
    if ((r = drv.cuEventCreate(&t->a, CU_EVENT_DEFAULT)) != CUDA_SUCCESS ||
        (r = drv.cuEventCreate(&t->b, CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
        seer_cuda_timer_free(t);
        return cu_fail(err, r, "cuEventCreate");
    }
    *out = t;
    return 0;
}

int seer_cuda_timer_start(seer_cuda_timer_t *t, seer_err_t *err) {
    int rc = bind_ctx(t->d, err);
    if (rc < 0) return rc;
    CUresult r = drv.cuEventRecord(t->a, t->d->stream);
    return r == CUDA_SUCCESS ? 0 : cu_fail(err, r, "cuEventRecord");
}

int seer_cuda_timer_stop(seer_cuda_timer_t *t, float *ms, seer_err_t *err) {
    int rc = bind_ctx(t->d, err);
    if (rc < 0) return rc;
    CUresult r;
    if ((r = drv.cuEventRecord(t->b, t->d->stream)) != CUDA_SUCCESS) return cu_fail(err, r, "cuEventRecord");
    if ((r = drv.cuEventSynchronize(t->b)) != CUDA_SUCCESS) return cu_fail(err, r, "cuEventSynchronize");
    if ((r = drv.cuEventElapsedTime_v2(ms, t->a, t->b)) != CUDA_SUCCESS) return cu_fail(err, r, "cuEventElapsedTime");
    return 0;
}

void seer_cuda_timer_free(seer_cuda_timer_t *t) {
    if (!t) return;
    drv.cuCtxSetCurrent(t->d->ctx);
    if (t->a) drv.cuEventDestroy_v2(t->a);
    if (t->b) drv.cuEventDestroy_v2(t->b);
    free(t);
}

/* ---- cuBLAS -------------------------------------------------------------------------------- */

/* cublas_api.h, as far as cublasGemmEx goes. */
#define CUBLAS_OP_N 0
#define CUBLAS_OP_T 1
#define CUDA_R_32F 0
#define CUDA_R_16BF 14
#define CUBLAS_COMPUTE_32F 68
#define CUBLAS_GEMM_DEFAULT 0

typedef struct {
    void *lib;
    void *handle;
    int (*create)(void **);
    int (*destroy)(void *);
    int (*set_stream)(void *, CUstream);
    int (*gemm_ex)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
                   const void *, void *, int, int, int, int);
    /* cublasGemmStridedBatchedEx; NULL when this cuBLAS lacks it (attention then runs its own kernel) */
    int (*gemm_sb)(void *, int, int, int, int, int, const void *, const void *, int, int, long long, const void *, int,
                   int, long long, const void *, void *, int, int, long long, int, int, int);
} blas_t;

void seer_cuda_blas_free(void *p) {
    blas_t *b = p;
    if (!b) return;
    if (b->handle) b->destroy(b->handle);
    if (b->lib) dlclose(b->lib);
    free(b);
}

static blas_t *blas_load(seer_cuda_dev_t *d) {
    const char *names[] = {"libcublas.so.13", "libcublas.so"};
    blas_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !b->lib; i++) b->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!b->lib) goto fail;
    *(void **)&b->create = dlsym(b->lib, "cublasCreate_v2");
    *(void **)&b->destroy = dlsym(b->lib, "cublasDestroy_v2");
    *(void **)&b->set_stream = dlsym(b->lib, "cublasSetStream_v2");
    *(void **)&b->gemm_ex = dlsym(b->lib, "cublasGemmEx");
    *(void **)&b->gemm_sb = dlsym(b->lib, "cublasGemmStridedBatchedEx");
    if (!b->create || !b->destroy || !b->set_stream || !b->gemm_ex) goto fail;
    if (b->create(&b->handle) != 0) {
        b->handle = NULL;
        goto fail;
    }
    if (b->set_stream(b->handle, d->stream) != 0) goto fail;
    return b;
fail:
    seer_cuda_blas_free(b);
    return NULL;
}

/* Loads cuBLAS on first use; NULL when it is not there or SEER_NO_CUBLAS is set. */
static blas_t *blas_get(seer_cuda_dev_t *d) {
    if (d->blas_state == 0) {
        const char *off = getenv("SEER_NO_CUBLAS");
        d->blas = off && *off && strcmp(off, "0") != 0 ? NULL : blas_load(d);
        d->blas_state = d->blas ? 1 : -1;
    }
    return d->blas_state > 0 ? d->blas : NULL;
}

int seer_cuda_gemm_bf16(seer_cuda_dev_t *d, seer_devptr_t y, seer_devptr_t x, seer_devptr_t w, int n, int in, int out,
                        seer_err_t *err) {
    if (d->blas_state < 0) return 0;
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    blas_t *b = blas_get(d);
    if (!b) return 0;
    /* Column-major: Y^T[out][n] = W[out][in] . X^T: op(A) = W^T as stored (in x out, lda in),
     * op(B) = X^T (in x n, ldb in), C = out x n with ldc out. */
    float one = 1.f, zero = 0.f;
    int st = b->gemm_ex(b->handle, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, (const void *)(uintptr_t)w, CUDA_R_16BF,
                        in, (const void *)(uintptr_t)x, CUDA_R_16BF, in, &zero, (void *)(uintptr_t)y, CUDA_R_32F, out,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != 0) return seer_err_set(err, SEER_EIO, "cuBLAS: cublasGemmEx (%d x %d x %d, bf16) failed with status %d", n, out, in, st);
    return 1;
}

int seer_cuda_has_batched_gemm(seer_cuda_dev_t *d) {
    if (d->blas_state < 0 || bind_ctx(d, NULL) < 0) return 0;
    blas_t *b = blas_get(d);
    return b && b->gemm_sb;
}

int seer_cuda_gemm_batched_bf16(seer_cuda_dev_t *d, const seer_cuda_gemm_t *g, seer_err_t *err) {
    if (d->blas_state < 0) return 0;
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    blas_t *b = blas_get(d);
    if (!b || !b->gemm_sb) return 0;
    float one = 1.f, beta = g->accumulate ? 1.f : 0.f;
    int st = b->gemm_sb(b->handle, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, g->m, g->n, g->k, &one,
                        (const void *)(uintptr_t)g->a, CUDA_R_16BF, g->lda, g->stride_a, (const void *)(uintptr_t)g->b,
                        CUDA_R_16BF, g->ldb, g->stride_b, &beta, (void *)(uintptr_t)g->c, CUDA_R_32F, g->ldc,
                        g->stride_c, g->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != 0)
        return seer_err_set(err, SEER_EIO, "cuBLAS: cublasGemmStridedBatchedEx (%d x %d x %d, %d batches, bf16) failed "
                                           "with status %d", g->m, g->n, g->k, g->batch, st);
    return 1;
}

/* ---- event marks ----------------------------------------------------------------------------- */

struct seer_cuda_marks {
    seer_cuda_dev_t *d;
    int cap;
    CUevent *ev;
};

int seer_cuda_marks_new(seer_cuda_dev_t *d, int cap, seer_cuda_marks_t **out, seer_err_t *err) {
    int rc = bind_ctx(d, err);
    if (rc < 0) return rc;
    seer_cuda_marks_t *m = calloc(1, sizeof *m);
    if (!m || !(m->ev = calloc((size_t)cap, sizeof *m->ev))) {
        free(m);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }
    m->d = d;
    for (int i = 0; i < cap; i++) {
        CUresult r = drv.cuEventCreate(&m->ev[i], CU_EVENT_DEFAULT);
        if (r != CUDA_SUCCESS) {
            seer_cuda_marks_free(m);
            return cu_fail(err, r, "cuEventCreate");
        }
        m->cap = i + 1;
    }
    *out = m;
    return 0;
}

int seer_cuda_mark(seer_cuda_marks_t *m, int i, seer_err_t *err) {
    if (i < 0 || i >= m->cap) return seer_err_set(err, SEER_EINVAL, "internal: event mark %d of %d", i, m->cap);
    CUresult r = drv.cuEventRecord(m->ev[i], m->d->stream);
    return r == CUDA_SUCCESS ? 0 : cu_fail(err, r, "cuEventRecord");
}

int seer_cuda_marks_elapsed(seer_cuda_marks_t *m, int i, int j, float *ms, seer_err_t *err) {
    if (i < 0 || j < 0 || i >= m->cap || j >= m->cap)
        return seer_err_set(err, SEER_EINVAL, "internal: event marks %d, %d of %d", i, j, m->cap);
    CUresult r = drv.cuEventSynchronize(m->ev[j]);
    if (r == CUDA_SUCCESS) r = drv.cuEventElapsedTime_v2(ms, m->ev[i], m->ev[j]);
    return r == CUDA_SUCCESS ? 0 : cu_fail(err, r, "cuEventElapsedTime");
}

void seer_cuda_marks_free(seer_cuda_marks_t *m) {
    if (!m) return;
    drv.cuCtxSetCurrent(m->d->ctx);
    for (int i = 0; i < m->cap; i++) drv.cuEventDestroy_v2(m->ev[i]);
    free(m->ev);
    free(m);
}
