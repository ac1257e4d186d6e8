/* safetensors files: a validated, memory-mapped reader (the model loader and tensor.load use
 * it) and an atomic writer (tensor.save). Format: u64 little-endian header length N, N bytes
 * of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}},
 * then the data buffer; offsets are relative to the buffer. */
#ifndef SEER_SAFETENSORS_H
#define SEER_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../seer.h"
#include "dtype.h"

#define SEER_ST_MAX_DIMS 8

typedef struct seer_st_entry {
    const char *name;
    seer_dtype_t dtype;
    int ndim;
    int64_t shape[SEER_ST_MAX_DIMS];
    const void *data; /* inside the mapping; valid until seer_st_close */
    size_t nbytes;    /* == product(shape) * dtype size (checked) */
} seer_st_entry_t;

typedef struct seer_st_file seer_st_file_t;

/* Maps the file read-only and validates everything before returning: header length within the
 * file, valid UTF-8 JSON object, every entry has a known dtype, a shape of non-negative
 * integers (at most SEER_ST_MAX_DIMS), data_offsets inside the buffer with end - begin equal
 * to the shape's byte size, no two entries overlapping, the tensors covering the data buffer
 * exactly (no gap, nothing after the last one: the reference reader's rule), no duplicate names.
 * Errors name the file, the tensor and the problem. */
int seer_st_open(seer_st_file_t **out, const char *path, seer_err_t *err);

/* The same over bytes in memory (for fuzzing and tests); data must outlive the handle. */
/* Like seer_st_open, but the file is read into anonymous memory and closed: nothing in the process
 * (its mappings, its open descriptors) refers to the path afterwards, later changes to the file
 * (truncation included) cannot reach the copy, and label (not the path) names the file in later
 * messages. The memory starts on a 2 MiB boundary and asks for transparent huge pages
 * (MADV_HUGEPAGE): a decode step streams every weight, and with 4 KiB pages the hardware
 * prefetchers stop at each page and the TLB misses once per 4 KiB (docs/model.md has the
 * measured difference). progress (NULL: none) is called with the bytes of each read. */
typedef void (*seer_st_progress_fn)(void *ctx, size_t bytes);
int seer_st_open_copy(seer_st_file_t **out, const char *path, const char *label, seer_st_progress_fn progress, void *ctx,
                      seer_err_t *err);
int seer_st_open_buffer(seer_st_file_t **out, const void *data, size_t n, const char *label, seer_err_t *err);

/* Opens path, a file of a folder that is not trusted (a model folder, a LoRA adapter: the threat
 * model in docs/security.md), for reading: a regular file (a FIFO or device is refused, never
 * waited on or opened for I/O), either the name itself or a symbolic link whose target, as the
 * kernel resolved it, lies inside the folder holding path or, in the Hugging Face cache layout
 * (.../models--org--name/snapshots/<rev>/...), inside models--org--name (its files are links into
 * blobs/). A link leading anywhere else is refused with a message naming label (NULL: path);
 * SEER_MODEL_FOLLOW_LINKS=1 in the environment follows any link. Returns the descriptor
 * (O_CLOEXEC, O_NONBLOCK), or a negative SEER_E* with err set. */
int seer_st_open_confined(const char *path, const char *label, seer_err_t *err);

/* A copy (seer_st_open_copy) made writable (1) or read-only again (0), for a loader that
 * rewrites its own tensors in place (model.c: bf16 weights into the AMX tile layout). -1: not a
 * copy (a file mapping is never written), or mprotect failed. */
int seer_st_set_writable(seer_st_file_t *f, int writable);
/* Whether the n bytes at p lie inside f's data (file or copy). */
int seer_st_contains(const seer_st_file_t *f, const void *p, size_t n);

/* seer_st_open / seer_st_open_copy with flags: SEER_ST_COPY reads the file into memory (as
 * seer_st_open_copy: the header is checked before any data is read), SEER_ST_CONFINED opens it
 * with seer_st_open_confined. label (NULL: path) names the file in messages. */
#define SEER_ST_COPY 1
#define SEER_ST_CONFINED 2
int seer_st_open_ex(seer_st_file_t **out, const char *path, const char *label, int flags, seer_st_progress_fn progress,
                    void *ctx, seer_err_t *err);

void seer_st_close(seer_st_file_t *f);
size_t seer_st_count(const seer_st_file_t *f);
const seer_st_entry_t *seer_st_entry(const seer_st_file_t *f, size_t i); /* in file order of data */
const seer_st_entry_t *seer_st_find(const seer_st_file_t *f, const char *name);
const char *seer_st_metadata(const seer_st_file_t *f, const char *key); /* NULL if absent */
const char *seer_st_metadata_key(const seer_st_file_t *f, size_t i);    /* i-th key; NULL past the end */
const char *seer_st_path(const seer_st_file_t *f);

/* Tensors to write: contiguous row-major data. */
typedef struct seer_st_tensor_in {
    const char *name;
    seer_dtype_t dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
} seer_st_tensor_in_t;

/* Writes through a temporary file + rename (never a half-written file). metadata: NULL or
 * n_meta pairs {key, value, key, value, ...}. Names must be unique and valid UTF-8. */
int seer_st_write(const char *path, const seer_st_tensor_in_t *tensors, size_t n, const char *const *metadata,
                  size_t n_meta, seer_err_t *err);

#endif
