/* A stand-in for the NVIDIA driver (libcuda.so.1) for tests on machines without a GPU. This is
 * a mock, said plainly: it cannot run kernels. It implements the driver entry points that
 * engine/cuda/cudrv.c resolves, with device memory that is host memory, so the tests can check
 * device enumeration, the messages for a missing or old driver, out-of-memory errors, weight
 * upload and bf16 conversion (read back through cuMemcpyDtoH), and that every kernel the
 * runtime launches exists in the embedded fatbin. cuLaunchKernel fails with
 * CUDA_ERROR_NOT_SUPPORTED, so a forward pass stops at its first launch; with FAKE_CUDA_LAUNCH_LOG
 * set it instead appends the kernel's name to that file and succeeds without running anything,
 * so a test can check which kernels a pass launches (the values it leaves are meaningless).
 *
 * Configured by the environment:
 *   FAKE_CUDA_DEVICES  number of GPUs (default 1)
 *   FAKE_CUDA_MEMORY   bytes of memory per GPU (default 80 GiB)
 *   FAKE_CUDA_VERSION  the driver's CUDA version as cuDriverGetVersion reports it (default 13000)
 *   FAKE_CUDA_INIT     the result cuInit returns (default 0)
 *   FAKE_CUDA_LAUNCH_LOG  a file: launches succeed and are listed there, one name per line */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;

#define OK 0
#define ERR_INVALID_VALUE 1
#define ERR_OOM 2
#define ERR_NOT_INITIALIZED 3
#define ERR_NO_DEVICE 100
#define ERR_INVALID_DEVICE 101
#define ERR_INVALID_IMAGE 200
#define ERR_NOT_FOUND 500
#define ERR_NOT_SUPPORTED 801

static int inited;
static size_t used;

static long long env_ll(const char *k, long long dflt) {
    const char *v = getenv(k);
    return v && *v ? strtoll(v, NULL, 10) : dflt;
}
static int ndev(void) { return (int)env_ll("FAKE_CUDA_DEVICES", 1); }
static size_t memsize(void) { return (size_t)env_ll("FAKE_CUDA_MEMORY", 80LL << 30); }

/* Each allocation: a header with its size in front of the memory handed out. */
typedef struct {
    size_t size;
    size_t pad;
} hdr_t;

CUresult cuInit(unsigned flags);
CUresult cuInit(unsigned flags) {
    (void)flags;
    CUresult r = (CUresult)env_ll("FAKE_CUDA_INIT", 0);
    if (r == OK) inited = 1;
    return r;
}
CUresult cuDriverGetVersion(int *v);
CUresult cuDriverGetVersion(int *v) {
    *v = (int)env_ll("FAKE_CUDA_VERSION", 13000);
    return OK;
}
CUresult cuGetErrorName(CUresult r, const char **s);
CUresult cuGetErrorName(CUresult r, const char **s) {
    switch (r) {
    case ERR_OOM: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case ERR_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; break;
    case ERR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case ERR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case ERR_INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; return ERR_INVALID_VALUE;
    }
    return OK;
}
CUresult cuGetErrorString(CUresult r, const char **s);
CUresult cuGetErrorString(CUresult r, const char **s) {
    switch (r) {
    case ERR_OOM: *s = "out of memory"; break;
    case ERR_NO_DEVICE: *s = "no CUDA-capable device is detected"; break;
    case ERR_NOT_SUPPORTED: *s = "operation not supported (the fake driver runs no kernels)"; break;
    default: *s = "unknown error"; break;
    }
    return OK;
}
CUresult cuDeviceGetCount(int *n);
CUresult cuDeviceGetCount(int *n) {
    if (!inited) return ERR_NOT_INITIALIZED;
    *n = ndev();
    return OK;
}
CUresult cuDeviceGet(int *d, int i);
CUresult cuDeviceGet(int *d, int i) {
    if (i < 0 || i >= ndev()) return ERR_INVALID_DEVICE;
    *d = i;
    return OK;
}
CUresult cuDeviceGetName(char *name, int len, int d);
CUresult cuDeviceGetName(char *name, int len, int d) {
    snprintf(name, (size_t)len, "Fake H100 %d", d);
    return OK;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int d);
CUresult cuDeviceTotalMem_v2(size_t *b, int d) {
    (void)d;
    *b = memsize();
    return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int d);
CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
    (void)d;
    switch (attr) {
    case 16: *v = 132; break;      /* SMs */
    case 36: *v = 2619000; break;  /* memory clock, kHz */
    case 37: *v = 5120; break;     /* bus width, bits */
    case 75: *v = 9; break;        /* cc major */
    case 76: *v = 0; break;        /* cc minor */
    default: *v = 0;
    }
    return OK;
}
static int ctx_token;
CUresult cuDevicePrimaryCtxRetain(void **c, int d);
CUresult cuDevicePrimaryCtxRetain(void **c, int d) {
    (void)d;
    *c = &ctx_token;
    return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int d);
CUresult cuDevicePrimaryCtxRelease_v2(int d) {
    (void)d;
    return OK;
}
CUresult cuCtxSetCurrent(void *c);
CUresult cuCtxSetCurrent(void *c) {
    (void)c;
    return OK;
}
CUresult cuMemGetInfo_v2(size_t *fr, size_t *tot);
CUresult cuMemGetInfo_v2(size_t *fr, size_t *tot) {
    *tot = memsize();
    *fr = used < *tot ? *tot - used : 0;
    return OK;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    if (used + n > memsize()) return ERR_OOM;
    hdr_t *h = malloc(sizeof *h + n);
    if (!h) return ERR_OOM;
    h->size = n;
    used += n;
    *p = (CUdeviceptr)(uintptr_t)(h + 1);
    return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemFree_v2(CUdeviceptr p) {
    if (!p) return OK;
    hdr_t *h = (hdr_t *)(uintptr_t)p - 1;
    used -= h->size;
    free(h);
    return OK;
}
CUresult cuMemAllocHost_v2(void **p, size_t n);
CUresult cuMemAllocHost_v2(void **p, size_t n) {
    *p = malloc(n);
    return *p ? OK : ERR_OOM;
}
CUresult cuMemFreeHost(void *p);
CUresult cuMemFreeHost(void *p) {
    free(p);
    return OK;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, void *st);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, void *st) {
    (void)st;
    memcpy((void *)(uintptr_t)d, s, n);
    return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, void *st);
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, void *st) {
    (void)st;
    memcpy(d, (const void *)(uintptr_t)s, n);
    return OK;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void *st);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void *st) {
    (void)st;
    memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
    return OK;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *st);
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *st) {
    (void)st;
    memset((void *)(uintptr_t)d, v, n);
    return OK;
}

/* A module is the fatbin image itself; a function is found when its name occurs in it. */
typedef struct {
    const unsigned char *img;
    size_t len;
} module_t;
CUresult cuModuleLoadData(void **m, const void *img);
CUresult cuModuleLoadData(void **m, const void *img) {
    const unsigned char *p = img;
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic != 0xBA55ED50u) return ERR_INVALID_IMAGE;
    uint64_t size;
    memcpy(&size, p + 8, 8);
    module_t *mod = malloc(sizeof *mod);
    if (!mod) return ERR_OOM;
    mod->img = p;
    mod->len = (size_t)size + 16;
    *m = mod;
    return OK;
}
CUresult cuModuleUnload(void *m);
CUresult cuModuleUnload(void *m) {
    free(m);
    return OK;
}
CUresult cuModuleGetFunction(void **f, void *m, const char *name);
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
    module_t *mod = m;
    size_t n = strlen(name) + 1; /* with the NUL: the whole symbol, not a prefix */
    for (size_t i = 0; i + n <= mod->len; i++)
        if (memcmp(mod->img + i, name, n) == 0 && i > 0 && mod->img[i - 1] == 0) {
            *f = (void *)(mod->img + i);
            return OK;
        }
    return ERR_NOT_FOUND;
}
CUresult cuFuncSetAttribute(void *f, int a, int v);
CUresult cuFuncSetAttribute(void *f, int a, int v) {
    (void)f, (void)a, (void)v;
    return OK;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sh, void *st, void **args, void **extra);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sh, void *st, void **args, void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)sh, (void)st, (void)args, (void)extra;
    const char *log = getenv("FAKE_CUDA_LAUNCH_LOG");
    if (!log || !*log) return ERR_NOT_SUPPORTED;
    FILE *fp = fopen(log, "a");
    if (!fp) return ERR_INVALID_VALUE;
    fprintf(fp, "%s\n", (const char *)f); /* a function is its name inside the image */
    fclose(fp);
    return OK;
}
static int stream_token, event_token;
CUresult cuStreamCreate(void **s, unsigned fl);
CUresult cuStreamCreate(void **s, unsigned fl) {
    (void)fl;
    *s = &stream_token;
    return OK;
}
CUresult cuStreamDestroy_v2(void *s);
CUresult cuStreamDestroy_v2(void *s) {
    (void)s;
    return OK;
}
CUresult cuStreamSynchronize(void *s);
CUresult cuStreamSynchronize(void *s) {
    (void)s;
    return OK;
}
CUresult cuEventCreate(void **e, unsigned fl);
CUresult cuEventCreate(void **e, unsigned fl) {
    (void)fl;
    *e = &event_token;
    return OK;
}
CUresult cuEventDestroy_v2(void *e);
CUresult cuEventDestroy_v2(void *e) {
    (void)e;
    return OK;
}
CUresult cuEventRecord(void *e, void *s);
CUresult cuEventRecord(void *e, void *s) {
    (void)e, (void)s;
    return OK;
}
CUresult cuEventSynchronize(void *e);
CUresult cuEventSynchronize(void *e) {
    (void)e;
    return OK;
}
CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b);
CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) {
    (void)a, (void)b;
    *ms = 0.f;
    return OK;
}
