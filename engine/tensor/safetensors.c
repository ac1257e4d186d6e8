/* safetensors reader and writer. The reader maps the file, checks every byte of the header
 * before handing out a single pointer (a model file is untrusted input), and keeps the cJSON
 * tree alive so entry names and metadata point into it. The writer streams tensors into a
 * temporary file beside the target and renames it, so big checkpoints are never held twice. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "json/json.h"

/* The reference implementation caps the header at 100 MB; a bigger one is corrupt or hostile. */
#define ST_MAX_HEADER (100u * 1024u * 1024u)

struct seer_st_file {
    char *path;
    const unsigned char *base; /* whole file (or buffer) */
    size_t size;
    bool mapped;
    bool copied; /* base is an anonymous copy of the file (SEER_ST_COPY), read-only once read */
    cJSON *root;
    seer_st_entry_t *entries; /* sorted by data offset */
    size_t n;
    size_t *by_name; /* indices into entries, sorted by name */
    const char **meta; /* key, value, key, value, ... */
    size_t n_meta;
};

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static bool dtype_from_st(const char *s, seer_dtype_t *out) {
    for (int i = 0; i < SEER_DTYPE_COUNT; i++) {
        if (strcmp(s, seer_dtype_st_name((seer_dtype_t)i)) == 0) {
            *out = (seer_dtype_t)i;
            return true;
        }
    }
    return false;
}

/* A JSON number that is an exact non-negative integer no larger than 2^53. */
static bool json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || floor(d) != d) return false;
    *out = (uint64_t)d;
    return true;
}

static int cmp_name(const void *a, const void *b, void *ctx) {
    const seer_st_file_t *f = ctx;
    return strcmp(f->entries[*(const size_t *)a].name, f->entries[*(const size_t *)b].name);
}

static int cmp_offset(const void *a, const void *b) {
    const seer_st_entry_t *x = a, *y = b;
    const unsigned char *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

void seer_st_close(seer_st_file_t *f) {
    if (!f) return;
    if (f->mapped && f->base) munmap((void *)f->base, f->size);
    cJSON_Delete(f->root);
    free(f->entries);
    free(f->by_name);
    free(f->meta);
    free(f->path);
    free(f);
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        rc = seer_err_set(err, SEER_EPARSE, __VA_ARGS__);                                          \
        goto fail;                                                                                 \
    } while (0)

static int parse_entry(seer_st_file_t *f, const cJSON *item, seer_st_entry_t *e, const unsigned char *buf,
                       size_t buflen, seer_err_t *err) {
    int rc = 0;
    const char *path = f->path, *name = item->string;
    if (!cJSON_IsObject(item)) FAIL("%s: tensor '%s': entry is not an object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt)) FAIL("%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    if (!dtype_from_st(dt->valuestring, &e->dtype))
        FAIL("%s: tensor '%s': unknown dtype \"%s\" (known: F32 BF16 F16 I32 I64 U8 BOOL F64)", path, name,
             dt->valuestring);
    if (!cJSON_IsArray(shape)) FAIL("%s: tensor '%s': missing or non-array \"shape\"", path, name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > SEER_ST_MAX_DIMS)
        FAIL("%s: tensor '%s': shape has %d dimensions (at most %d)", path, name, nd, SEER_ST_MAX_DIMS);
    e->ndim = nd;
    uint64_t numel = 1;
    int k = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) {
        uint64_t v;
        if (!json_uint(d, &v)) FAIL("%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, k);
        e->shape[k++] = (int64_t)v;
        if (__builtin_mul_overflow(numel, v, &numel))
            FAIL("%s: tensor '%s': shape's element count overflows", path, name);
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)seer_dtype_size(e->dtype), &nbytes) || nbytes > SIZE_MAX)
        FAIL("%s: tensor '%s': shape's byte size overflows", path, name);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        FAIL("%s: tensor '%s': \"data_offsets\" must be an array [begin, end]", path, name);
    uint64_t b, en;
    if (!json_uint(cJSON_GetArrayItem(offs, 0), &b) || !json_uint(cJSON_GetArrayItem(offs, 1), &en))
        FAIL("%s: tensor '%s': data_offsets must be non-negative integers", path, name);
    if (b > en) FAIL("%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", path, name,
                     (unsigned long long)b, (unsigned long long)en);
    if (en > buflen)
        FAIL("%s: tensor '%s': data_offsets [%llu, %llu] past the end of the data (%zu bytes)", path, name,
             (unsigned long long)b, (unsigned long long)en, buflen);
    if (en - b != nbytes)
        FAIL("%s: tensor '%s': data_offsets span %llu bytes but %s x %llu elements need %llu", path, name,
             (unsigned long long)(en - b), seer_dtype_st_name(e->dtype), (unsigned long long)numel,
             (unsigned long long)nbytes);
    e->name = name;
    e->data = buf + b;
    e->nbytes = (size_t)nbytes;
    return 0;
fail:
    return rc;
}

static int parse(seer_st_file_t *f, seer_err_t *err) {
    int rc = 0;
    const char *path = f->path;
    if (f->size < 8) FAIL("%s: truncated: %zu bytes, too short for the 8-byte header length", path, f->size);
    uint64_t hlen = le64(f->base);
    if (hlen > f->size - 8)
        FAIL("%s: header length %llu is past the end of the file (%zu bytes)", path, (unsigned long long)hlen,
             f->size);
    if (hlen > ST_MAX_HEADER) FAIL("%s: header length %llu is absurd (limit %u)", path, (unsigned long long)hlen,
                                   ST_MAX_HEADER);
    const char *hdr = (const char *)f->base + 8;
    size_t bad;
    if (!seer_utf8_validate(hdr, (size_t)hlen, &bad)) FAIL("%s: header is not valid UTF-8 (byte %zu)", path, bad);
    /* Counted before cJSON builds its tree: a header of "[],[],..." within ST_MAX_HEADER would
     * take some 27 times its size in nodes (2.7 GB for 95 MiB). */
    size_t nvalues = seer_json_count_values(hdr, (size_t)hlen);
    if (nvalues > SEER_JSON_MAX_VALUES_ST_HEADER)
        FAIL("%s: header holds %zu JSON values, more than the %zu allowed (a tensor takes about 13)", path, nvalues,
             SEER_JSON_MAX_VALUES_ST_HEADER);
    f->root = cJSON_ParseWithLength(hdr, (size_t)hlen);
    if (!f->root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= hdr && at <= hdr + hlen ? (long)(at - hdr) : -1;
        FAIL("%s: header is not valid JSON (near byte %ld)", path, off);
    }
    if (!cJSON_IsObject(f->root)) FAIL("%s: header is not a JSON object", path);
    const unsigned char *buf = f->base + 8 + hlen;
    size_t buflen = f->size - 8 - (size_t)hlen;

    size_t count = (size_t)cJSON_GetArraySize(f->root);
    f->entries = calloc(count ? count : 1, sizeof *f->entries);
    f->by_name = calloc(count ? count : 1, sizeof *f->by_name);
    if (!f->entries || !f->by_name) {
        rc = seer_err_set(err, SEER_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    const cJSON *item;
    bool seen_meta = false;
    cJSON_ArrayForEach(item, f->root) {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (seen_meta) FAIL("%s: duplicate \"__metadata__\"", path);
            seen_meta = true;
            if (!cJSON_IsObject(item)) FAIL("%s: \"__metadata__\" is not an object", path);
            size_t nm = (size_t)cJSON_GetArraySize(item);
            f->meta = calloc(2 * nm + 1, sizeof *f->meta);
            if (!f->meta) {
                rc = seer_err_set(err, SEER_ENOMEM, "%s: out of memory", path);
                goto fail;
            }
            const cJSON *m;
            cJSON_ArrayForEach(m, item) {
                if (!cJSON_IsString(m)) FAIL("%s: \"__metadata__\" value of '%s' is not a string", path, m->string);
                f->meta[2 * f->n_meta] = m->string;
                f->meta[2 * f->n_meta + 1] = m->valuestring;
                f->n_meta++;
            }
            continue;
        }
        rc = parse_entry(f, item, &f->entries[f->n], buf, buflen, err);
        if (rc < 0) goto fail;
        f->n++;
    }
    for (size_t i = 0; i < f->n; i++) f->by_name[i] = i;
    /* Sort by offset first; the name index is built after, over the final positions. */
    qsort(f->entries, f->n, sizeof *f->entries, cmp_offset);
    for (size_t i = 1; i < f->n; i++) {
        const seer_st_entry_t *p = &f->entries[i - 1], *c = &f->entries[i];
        if ((const unsigned char *)c->data < (const unsigned char *)p->data + p->nbytes)
            FAIL("%s: tensor '%s': data overlaps tensor '%s'", path, c->name, p->name);
    }
    /* The data buffer is exactly the tensors, one after another, as the reference reader requires
     * (InvalidOffset, MetadataIncompleteBuffer): bytes no tensor covers are at best waste and at
     * worst a sparse file's terabyte of holes that a read into memory would have to walk. */
    size_t at = 0;
    for (size_t i = 0; i < f->n; i++) {
        const seer_st_entry_t *c = &f->entries[i];
        size_t b = (size_t)((const unsigned char *)c->data - buf);
        if (b != at)
            FAIL("%s: tensor '%s': data begins at byte %zu of the data, but %s ends at byte %zu (the tensors must cover "
                 "the data without gaps)", path, c->name, b, i ? "the tensor before it" : "nothing", at);
        at = b + c->nbytes;
    }
    if (at != buflen)
        FAIL("%s: the data has %zu bytes, but its tensors cover %zu (bytes past the last tensor)", path, buflen, at);
    qsort_r(f->by_name, f->n, sizeof *f->by_name, cmp_name, f);
    for (size_t i = 1; i < f->n; i++) {
        if (strcmp(f->entries[f->by_name[i - 1]].name, f->entries[f->by_name[i]].name) == 0)
            FAIL("%s: tensor '%s': duplicate name", path, f->entries[f->by_name[i]].name);
    }
    return 0;
fail:
    return rc;
}

static int open_common(seer_st_file_t **out, seer_st_file_t *f, seer_err_t *err) {
    int rc = parse(f, err);
    if (rc < 0) {
        seer_st_close(f);
        *out = NULL;
        return rc;
    }
    *out = f;
    return 0;
}

int seer_st_open_buffer(seer_st_file_t **out, const void *data, size_t n, const char *label, seer_err_t *err) {
    *out = NULL;
    seer_st_file_t *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(label ? label : "<buffer>"))) {
        free(f);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }
    f->base = data;
    f->size = n;
    return open_common(out, f, err);
}

/* ---- opening files ---------------------------------------------------------------------- */

/* SEER_MODEL_FOLLOW_LINKS=1: links in model folders are followed wherever they lead (a folder the
 * researcher assembled from links to their own files). */
static bool follow_any_link(void) {
    const char *v = getenv("SEER_MODEL_FOLLOW_LINKS");
    return v && strcmp(v, "1") == 0;
}

/* p is root or inside it (both canonical paths). */
static bool beneath(const char *p, const char *root) {
    size_t n = strlen(root);
    if (n == 0) return false;
    if (n == 1 && root[0] == '/') return p[0] == '/';
    return strncmp(p, root, n) == 0 && (p[n] == '/' || p[n] == 0);
}

/* Where a link in the folder holding path may lead: that folder (canonical) and, for a Hugging
 * Face cache snapshot (.../models--org--name/snapshots/<rev>/...), the repository folder
 * models--org--name, whose snapshots are links into its blobs/. "" when there is none. */
static void link_roots(const char *path, char roots[2][PATH_MAX]) {
    char dir[PATH_MAX];
    roots[0][0] = roots[1][0] = 0;
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (!realpath(dir, roots[0])) {
        roots[0][0] = 0;
        return;
    }
    /* the last ".../models--X/snapshots/" in the canonical folder */
    const char *r = roots[0], *snap = NULL;
    for (const char *q = strstr(r, "/snapshots/"); q; q = strstr(q + 1, "/snapshots/")) snap = q;
    if (!snap) {
        size_t n = strlen(r);
        if (n >= 10 && strcmp(r + n - 10, "/snapshots") == 0) snap = r + n - 10;
    }
    if (!snap) return;
    const char *repo = snap;
    while (repo > r && repo[-1] != '/') repo--;
    if (strncmp(repo, "models--", 8) != 0 || snap - repo <= 8) return;
    snprintf(roots[1], PATH_MAX, "%.*s", (int)(snap - r), r);
}

/* The last component of path is a symbolic link: opened only when it leads to a regular file
 * inside link_roots (or SEER_MODEL_FOLLOW_LINKS=1). What is checked is the file the kernel
 * opened (O_PATH, which opens no device and waits on no FIFO, then its /proc/self/fd name), and
 * that same file is then opened for reading through /proc/self/fd, so swapping the link after
 * the check changes nothing. */
static int open_link(const char *path, const char *label, seer_err_t *err) {
    int pfd = open(path, O_PATH | O_CLOEXEC);
    if (pfd < 0) {
        int e = errno;
        return seer_err_set(err, e == ENOENT ? SEER_ENOTFOUND : SEER_EIO, "cannot open %s: %s", label, strerror(e));
    }
    struct stat st;
    if (fstat(pfd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(pfd);
        return seer_err_set(err, SEER_EIO, "cannot open %s: not a regular file", label);
    }
    char proc[64], real[PATH_MAX];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", pfd);
    if (!follow_any_link()) {
        ssize_t n = readlink(proc, real, sizeof real - 1);
        char roots[2][PATH_MAX];
        link_roots(path, roots);
        if (n > 0) real[n] = 0;
        if (n <= 0 || (size_t)n >= sizeof real - 1 || !(beneath(real, roots[0]) || beneath(real, roots[1]))) {
            close(pfd);
            return seer_err_set(err, SEER_EIO,
                                "%s is a symbolic link that leads out of its folder%s; the files of a model folder are "
                                "not trusted, so seer does not follow it (copy the file into the folder, or set "
                                "SEER_MODEL_FOLLOW_LINKS=1 for a folder you assembled yourself)",
                                label, n <= 0 ? " (or where it leads cannot be read from /proc)" : "");
        }
    }
    int fd = open(proc, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    int e = errno;
    close(pfd);
    if (fd < 0) return seer_err_set(err, SEER_EIO, "cannot open %s: %s", label, strerror(e));
    return fd;
}

int seer_st_open_confined(const char *path, const char *label, seer_err_t *err) {
    if (!label) label = path;
    /* O_NONBLOCK: a FIFO planted in the folder is refused below instead of waited on (it does
     * nothing to a regular file); O_NOFOLLOW: a link goes through open_link's check */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0 && errno == ELOOP) {
        fd = open_link(path, label, err);
        if (fd < 0) return fd;
    } else if (fd < 0) {
        int e = errno;
        return seer_err_set(err, e == ENOENT ? SEER_ENOTFOUND : SEER_EIO, "cannot open %s: %s", label, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return seer_err_set(err, SEER_EIO, "cannot open %s: not a regular file", label);
    }
    return fd;
}

/* n bytes of fd into dst, 64 MiB at a time so that progress can be shown. */
static int read_full(int fd, unsigned char *dst, size_t n, const char *label, seer_st_progress_fn progress, void *ctx,
                     seer_err_t *err) {
    size_t got = 0;
    while (got < n) {
        size_t want = n - got < ((size_t)64 << 20) ? n - got : ((size_t)64 << 20);
        ssize_t r = read(fd, dst + got, want);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            return seer_err_set(err, SEER_EIO, "cannot read %s: %s", label, r < 0 ? strerror(e) : "file shrank while reading");
        }
        got += (size_t)r;
        if (progress) progress(ctx, (size_t)r);
    }
    return 0;
}

/* Anonymous memory of n bytes starting on a 2 MiB boundary, asked to be backed by transparent huge
 * pages (MADV_HUGEPAGE: granted where THP is "always" or "madvise", ignored where "never"); NULL
 * when out of memory. The head and tail left over from aligning are unmapped, so munmap(p, n)
 * releases it all. */
#define ST_HUGE ((size_t)2 << 20)
static void *map_huge(size_t n) {
    size_t len = (n + 4095) & ~(size_t)4095;
    if (len < n || len + ST_HUGE < len) return NULL;
    char *m = mmap(NULL, len + ST_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    char *p = (char *)(((uintptr_t)m + ST_HUGE - 1) & ~(uintptr_t)(ST_HUGE - 1));
    if (p > m) munmap(m, (size_t)(p - m));
    if (m + len + ST_HUGE > p + len) munmap(p + len, (size_t)(m + len + ST_HUGE - (p + len)));
    (void)madvise(p, len, MADV_HUGEPAGE);
    return p;
}

int seer_st_open_ex(seer_st_file_t **out, const char *path, const char *label, int flags, seer_st_progress_fn progress,
                    void *ctx, seer_err_t *err) {
    *out = NULL;
    if (!label) label = path;
    int fd;
    if (flags & SEER_ST_CONFINED) {
        if ((fd = seer_st_open_confined(path, label, err)) < 0) return fd;
    } else {
        /* O_NONBLOCK: a FIFO is refused below instead of waited on */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
            int e = errno;
            return seer_err_set(err, e == ENOENT ? SEER_ENOTFOUND : SEER_EIO, "cannot open %s: %s", label, strerror(e));
        }
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return seer_err_set(err, SEER_EIO, "cannot stat %s: %s", label, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return seer_err_set(err, SEER_EIO, "cannot open %s: not a regular file", label);
    }
    seer_st_file_t *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(label))) {
        free(f);
        close(fd);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0 && !(flags & SEER_ST_COPY)) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            seer_st_close(f);
            return seer_err_set(err, SEER_EIO, "cannot map %s: %s", label, strerror(e));
        }
        f->base = m;
        f->mapped = true;
    } else if (f->size > 0) {
        unsigned char *m = map_huge(f->size);
        if (!m) {
            close(fd);
            seer_st_close(f);
            return seer_err_set(err, SEER_ENOMEM, "cannot allocate %zu bytes for %s", (size_t)st.st_size, label);
        }
        f->base = m;
        f->mapped = true;
        /* The header is read and checked before the data: a hostile file (a sparse one claims
         * terabytes at no cost) is refused before a byte of its data is read. */
        size_t head = f->size < 8 ? f->size : 8;
        int rc = read_full(fd, m, head, label, progress, ctx, err);
        if (rc == 0 && head == 8) {
            uint64_t hlen = le64(m);
            if (hlen <= f->size - 8 && hlen <= ST_MAX_HEADER) {
                rc = read_full(fd, m + 8, (size_t)hlen, label, progress, ctx, err);
                head += (size_t)hlen;
            }
        }
        if (rc == 0) rc = parse(f, err);
        if (rc == 0) rc = read_full(fd, m + head, f->size - head, label, progress, ctx, err);
        close(fd);
        if (rc < 0) {
            seer_st_close(f);
            return rc;
        }
        mprotect(m, f->size, PROT_READ);
        f->copied = true;
        *out = f;
        return 0;
    }
    close(fd);
    return open_common(out, f, err);
}

int seer_st_open(seer_st_file_t **out, const char *path, seer_err_t *err) {
    return seer_st_open_ex(out, path, NULL, 0, NULL, NULL, err);
}

int seer_st_open_copy(seer_st_file_t **out, const char *path, const char *label, seer_st_progress_fn progress, void *ctx,
                      seer_err_t *err) {
    return seer_st_open_ex(out, path, label, SEER_ST_COPY, progress, ctx, err);
}

int seer_st_set_writable(seer_st_file_t *f, int writable) {
    if (!f->copied || !f->base) return -1;
    return mprotect((void *)f->base, f->size, writable ? PROT_READ | PROT_WRITE : PROT_READ);
}

int seer_st_contains(const seer_st_file_t *f, const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)f->base;
    return f->base && a >= b && n <= f->size && a - b <= f->size - n;
}

size_t seer_st_count(const seer_st_file_t *f) { return f->n; }

const seer_st_entry_t *seer_st_entry(const seer_st_file_t *f, size_t i) { return i < f->n ? &f->entries[i] : NULL; }

const seer_st_entry_t *seer_st_find(const seer_st_file_t *f, const char *name) {
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const seer_st_entry_t *e = &f->entries[f->by_name[mid]];
        int c = strcmp(name, e->name);
        if (c == 0) return e;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

const char *seer_st_metadata(const seer_st_file_t *f, const char *key) {
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

const char *seer_st_metadata_key(const seer_st_file_t *f, size_t i) { return i < f->n_meta ? f->meta[2 * i] : NULL; }

const char *seer_st_path(const seer_st_file_t *f) { return f->path; }

/* ---- writer ------------------------------------------------------------------------------- */

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int seer_st_write(const char *path, const seer_st_tensor_in_t *tensors, size_t n, const char *const *metadata,
                  size_t n_meta, seer_err_t *err) {
    int rc = 0;
    cJSON *root = NULL;
    char *json = NULL;
    const char **names = NULL;
    size_t *sizes = NULL;
    if (n > 0 && !tensors) return seer_err_set(err, SEER_EINVAL, "%s: tensors is NULL", path);
    names = malloc((n ? n : 1) * sizeof *names);
    sizes = malloc((n ? n : 1) * sizeof *sizes);
    root = cJSON_CreateObject();
    if (!names || !sizes || !root) goto oom;

    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        if (!m) goto oom;
        for (size_t i = 0; i < n_meta; i++) {
            const char *k = metadata[2 * i], *v = metadata[2 * i + 1];
            if (!k || !v) {
                rc = seer_err_set(err, SEER_EINVAL, "%s: metadata pair %zu has a NULL key or value", path, i);
                goto done;
            }
            if (!seer_utf8_validate(k, strlen(k), NULL) || !seer_utf8_validate(v, strlen(v), NULL)) {
                rc = seer_err_set(err, SEER_EINVAL, "%s: metadata '%s' is not valid UTF-8", path, k);
                goto done;
            }
            if (!cJSON_AddStringToObject(m, k, v)) goto oom;
        }
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const seer_st_tensor_in_t *t = &tensors[i];
        const char *name = t->name ? t->name : "(null)";
        if (!t->name || !*t->name || !seer_utf8_validate(t->name, strlen(t->name), NULL) ||
            strcmp(t->name, "__metadata__") == 0) {
            rc = seer_err_set(err, SEER_EINVAL, "%s: tensor %zu: invalid name '%s'", path, i, name);
            goto done;
        }
        if ((unsigned)t->dtype >= SEER_DTYPE_COUNT) {
            rc = seer_err_set(err, SEER_EINVAL, "%s: tensor '%s': invalid dtype %d", path, name, (int)t->dtype);
            goto done;
        }
        if (t->ndim < 0 || t->ndim > SEER_ST_MAX_DIMS || (t->ndim > 0 && !t->shape)) {
            rc = seer_err_set(err, SEER_EINVAL, "%s: tensor '%s': invalid ndim %d", path, name, t->ndim);
            goto done;
        }
        uint64_t numel = 1;
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", seer_dtype_st_name(t->dtype))) goto oom;
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        if (!sh) goto oom;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel)) {
                rc = seer_err_set(err, SEER_EINVAL, "%s: tensor '%s': invalid shape", path, name);
                goto done;
            }
            cJSON *num = cJSON_CreateNumber((double)t->shape[d]);
            if (!num || !cJSON_AddItemToArray(sh, num)) goto oom;
        }
        uint64_t nb;
        if (__builtin_mul_overflow(numel, (uint64_t)seer_dtype_size(t->dtype), &nb) || nb > SIZE_MAX ||
            (nb > 0 && !t->data)) {
            rc = seer_err_set(err, SEER_EINVAL, "%s: tensor '%s': invalid size or NULL data", path, name);
            goto done;
        }
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON *ob = cJSON_CreateNumber((double)off), *oe = cJSON_CreateNumber((double)(off + nb));
        if (!o || !ob || !oe) {
            cJSON_Delete(ob);
            cJSON_Delete(oe);
            goto oom;
        }
        cJSON_AddItemToArray(o, ob);
        cJSON_AddItemToArray(o, oe);
        names[i] = t->name;
        sizes[i] = (size_t)nb;
        off += nb;
    }
    qsort(names, n, sizeof *names, cmp_str_ptr);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            rc = seer_err_set(err, SEER_EINVAL, "%s: tensor '%s': duplicate name", path, names[i]);
            goto done;
        }
    }
    json = cJSON_PrintUnformatted(root);
    if (!json) goto oom;
    size_t jlen = strlen(json);
    size_t padded = (jlen + 7) & ~(size_t)7;

    seer_atomic_file_t af;
    if ((rc = seer_atomic_open(&af, path, err)) < 0) goto done;
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    rc = seer_atomic_write(&af, lenb, 8, err);
    if (rc == 0) rc = seer_atomic_write(&af, json, jlen, err);
    if (rc == 0 && padded > jlen) rc = seer_atomic_write(&af, "        ", padded - jlen, err);
    for (size_t i = 0; i < n && rc == 0; i++) rc = seer_atomic_write(&af, tensors[i].data, sizes[i], err);
    if (rc == 0) rc = seer_atomic_commit(&af, err);
    goto done;
oom:
    rc = seer_err_set(err, SEER_ENOMEM, "%s: out of memory", path);
done:
    cJSON_free(json);
    cJSON_Delete(root);
    free(names);
    free(sizes);
    return rc;
}
