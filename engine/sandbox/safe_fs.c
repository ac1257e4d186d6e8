/* File operations beneath a root directory that the sandbox can write (sandbox.h explains the
 * threat). Every path is split into components (".." refused), resolved relative to the root's
 * descriptor without following any symlink, and the final operation is an *at call on the
 * parent directory's descriptor, so a swap of a path component for a link after the check
 * cannot redirect it: the descriptors keep pointing at the directories that were checked. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <linux/openat2.h>
#include <lua.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sandbox.h"
#include "host/host.h"

#define MAX_COMPONENTS 256
#define MAX_REL 4096
/* Deeper directories are moved up to the top of the tree being removed instead of recursed
 * into: a tree of any depth is removed with at most this many descriptors open. */
#define RM_MAX_DEPTH 32

typedef struct path {
    char buf[MAX_REL];
    const char *c[MAX_COMPONENTS];
    int n;
} path_t;

static const char *kind_of(mode_t m) {
    if (S_ISREG(m)) return "regular file";
    if (S_ISDIR(m)) return "directory";
    if (S_ISLNK(m)) return "symbolic link";
    if (S_ISFIFO(m)) return "fifo";
    if (S_ISSOCK(m)) return "socket";
    if (S_ISCHR(m)) return "character device";
    if (S_ISBLK(m)) return "block device";
    return "special file";
}

/* The full path for messages: root + "/" + rel. */
static const char *shown(const seer_sandbox_fs_root_t *r, const char *rel, char *buf, size_t size) {
    while (*rel == '/') rel++;
    if (!*rel) snprintf(buf, size, "%s", r->path);
    else snprintf(buf, size, "%s%s%s", r->path, r->path[strlen(r->path) - 1] == '/' ? "" : "/", rel);
    return buf;
}

/* Turns an errno or one of our codes into a message naming the path and the reason. */
static int fail(const seer_sandbox_fs_root_t *r, const char *rel, int code, int e, seer_err_t *err) {
    char p[4600];
    shown(r, rel, p, sizeof p);
    switch (code) {
    case SEER_SANDBOX_FS_ESYMLINK:
        return seer_err_set(err, code,
                            "refusing to follow a symlink planted in %s: %s (the host never follows links in a "
                            "folder the sandbox can write; remove the link or use a real file)",
                            r->what, p);
    case SEER_SANDBOX_FS_EXDEV:
        return seer_err_set(err, code, "refusing a path that leaves %s or crosses a mount point: %s", r->what, p);
    case SEER_SANDBOX_FS_ENOTDIR:
        return seer_err_set(err, code, "%s in %s: a component of the path is not a directory", p, r->what);
    case SEER_ENOTFOUND:
        return seer_err_set(err, code, "%s: no such file or directory (in %s)", p, r->what);
    case SEER_SANDBOX_FS_EEXIST:
        return seer_err_set(err, code, "%s in %s: already exists", p, r->what);
    default:
        return seer_err_set(err, code ? code : SEER_EIO, "%s (in %s): %s", p, r->what, strerror(e));
    }
}

static int fail_errno(const seer_sandbox_fs_root_t *r, const char *rel, int e, seer_err_t *err) {
    if (e == ELOOP) return fail(r, rel, SEER_SANDBOX_FS_ESYMLINK, e, err);
    if (e == EXDEV) return fail(r, rel, SEER_SANDBOX_FS_EXDEV, e, err);
    if (e == ENOENT) return fail(r, rel, SEER_ENOTFOUND, e, err);
    if (e == ENOTDIR) return fail(r, rel, SEER_SANDBOX_FS_ENOTDIR, e, err);
    if (e == EEXIST) return fail(r, rel, SEER_SANDBOX_FS_EEXIST, e, err);
    return fail(r, rel, SEER_EIO, e, err);
}

static int split(const seer_sandbox_fs_root_t *r, const char *rel, path_t *p, seer_err_t *err) {
    if (!rel) rel = "";
    if (strlen(rel) >= MAX_REL) return seer_err_set(err, SEER_EINVAL, "path too long beneath %s", r->path);
    strcpy(p->buf, rel);
    p->n = 0;
    for (char *s = strtok(p->buf, "/"); s; s = strtok(NULL, "/")) {
        if (strcmp(s, ".") == 0) continue;
        if (strcmp(s, "..") == 0)
            return seer_err_set(err, SEER_SANDBOX_FS_EXDEV,
                                "refusing the path %s beneath %s: it contains '..' (paths in %s are relative "
                                "and stay inside it)",
                                rel, r->path, r->what);
        if (p->n == MAX_COMPONENTS) return seer_err_set(err, SEER_EINVAL, "path too deep beneath %s: %s", r->path, rel);
        p->c[p->n++] = s;
    }
    return 0;
}

/* rel's first n components joined with '/', for openat2 and for messages. */
static const char *join(const path_t *p, int n, char *buf, size_t size) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        int w = snprintf(buf + off, size - off, "%s%s", i ? "/" : "", p->c[i]);
        if (w < 0 || (size_t)w >= size - off) break;
        off += (size_t)w;
    }
    return buf;
}

int seer_sandbox_fs_open_root(seer_sandbox_fs_root_t *r, const char *path, const char *what, seer_err_t *err) {
    memset(r, 0, sizeof *r);
    r->fd = -1;
    snprintf(r->path, sizeof r->path, "%s", path ? path : "");
    snprintf(r->what, sizeof r->what, "%s", what && *what ? what : "a folder the sandbox can write");
    if (!path || !*path) return seer_err_set(err, SEER_EINVAL, "no root directory given");
    r->fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (r->fd < 0) {
        int e = errno;
        return seer_err_set(err, e == ENOENT ? SEER_ENOTFOUND : SEER_EIO, "%s (%s): %s", path, r->what, strerror(e));
    }
    struct stat st;
    if (fstat(r->fd, &st) != 0) {
        int e = errno;
        close(r->fd);
        r->fd = -1;
        return seer_err_set(err, SEER_EIO, "%s: %s", path, strerror(e));
    }
    r->dev = st.st_dev;
    return 0;
}

void seer_sandbox_fs_close_root(seer_sandbox_fs_root_t *r) {
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
}

/* A descriptor (O_PATH) of the directory made of p's first n components, created when create.
 * openat2 resolves the whole path in the kernel with no symlink allowed anywhere; where the
 * kernel lacks it (or a filter refuses it) each component is opened O_NOFOLLOW | O_DIRECTORY
 * relative to the previous one, which is just as strict: no component can be a link, none can
 * be "..", and each must be on the root's device. */
static int open_dir(const seer_sandbox_fs_root_t *r, const path_t *p, int n, int create, unsigned mode,
                    seer_err_t *err) {
    char rel[MAX_REL];
    if (n == 0) {
        int fd = fcntl(r->fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) return fail_errno(r, "", errno, err);
        return fd;
    }
    if (!create && !r->no_openat2) {
        struct open_how how = {0};
        how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
                      (r->cross_mounts ? 0 : RESOLVE_NO_XDEV);
        int fd = (int)syscall(SYS_openat2, r->fd, join(p, n, rel, sizeof rel), &how, sizeof how);
        if (fd >= 0) return fd;
        int e = errno;
        /* ENOSYS: an old kernel; EPERM: a seccomp filter; E2BIG/EINVAL: flags it does not know */
        if (e != ENOSYS && e != EPERM && e != E2BIG && e != EINVAL) return fail_errno(r, rel, e, err);
    }
    int cur = fcntl(r->fd, F_DUPFD_CLOEXEC, 0);
    if (cur < 0) return fail_errno(r, "", errno, err);
    for (int i = 0; i < n; i++) {
        join(p, i + 1, rel, sizeof rel);
        if (create && mkdirat(cur, p->c[i], mode) != 0 && errno != EEXIST) {
            int e = errno;
            close(cur);
            return fail_errno(r, rel, e, err);
        }
        int fd = openat(cur, p->c[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            struct stat st;
            if ((e == ENOTDIR || e == ELOOP) && fstatat(cur, p->c[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISLNK(st.st_mode))
                e = ELOOP;
            close(cur);
            return fail_errno(r, rel, e, err);
        }
        close(cur);
        cur = fd;
        struct stat st;
        if (fstat(cur, &st) != 0) {
            int e = errno;
            close(cur);
            return fail_errno(r, rel, e, err);
        }
        if (!r->cross_mounts && st.st_dev != r->dev) {
            close(cur);
            return fail(r, rel, SEER_SANDBOX_FS_EXDEV, 0, err);
        }
    }
    return cur;
}

/* The parent's descriptor and the final name of rel (which must have one). */
static int open_parent(const seer_sandbox_fs_root_t *r, const char *rel, path_t *p, int create, seer_err_t *err) {
    int rc = split(r, rel, p, err);
    if (rc < 0) return rc;
    if (p->n == 0) return seer_err_set(err, SEER_EINVAL, "%s: a file name is needed beneath the root of %s", r->path, r->what);
    return open_dir(r, p, p->n - 1, create, 0755, err);
}

int seer_sandbox_fs_read(const seer_sandbox_fs_root_t *r, const char *rel, size_t max, long long offset, int tail,
                         char **out, size_t *n, long long *size, seer_err_t *err) {
    path_t p;
    *out = NULL;
    *n = 0;
    int dfd = open_parent(r, rel, &p, 0, err);
    if (dfd < 0) return dfd;
    const char *name = p.c[p.n - 1];
    struct stat st;
    /* Look before opening, so a device or fifo is never even opened... */
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        int e = errno;
        close(dfd);
        return fail_errno(r, rel, e, err);
    }
    if (S_ISLNK(st.st_mode)) {
        close(dfd);
        return fail(r, rel, SEER_SANDBOX_FS_ESYMLINK, 0, err);
    }
    int fd = -1;
    if (S_ISREG(st.st_mode)) {
        /* ...and check again after: it may have been swapped meanwhile. O_NONBLOCK keeps a fifo
         * swapped in from blocking the open; O_NOFOLLOW refuses a link swapped in. */
        fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e != ENXIO) { /* ENXIO: a socket was swapped in */
                close(dfd);
                return fail_errno(r, rel, e, err);
            }
            st.st_mode = S_IFSOCK;
        } else if (fstat(fd, &st) != 0) {
            int e = errno;
            close(fd);
            close(dfd);
            return fail_errno(r, rel, e, err);
        }
    }
    close(dfd);
    if (!S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        char pbuf[4600];
        return seer_err_set(err, SEER_SANDBOX_FS_ENOTREG,
                            "refusing to read %s in %s: it is a %s, not a regular file (a fifo, socket or device "
                            "there could block or trick the host)",
                            shown(r, rel, pbuf, sizeof pbuf), r->what, kind_of(st.st_mode));
    }
    if (!r->cross_mounts && st.st_dev != r->dev) { /* a file mounted over a name in the tree */
        close(fd);
        return fail(r, rel, SEER_SANDBOX_FS_EXDEV, 0, err);
    }
    long long whole = (long long)st.st_size;
    if (size) *size = whole;
    long long start = offset > 0 ? offset : 0;
    if (tail) start = whole > (long long)max ? whole - (long long)max : 0;
    if (start > whole) start = whole;
    if (!tail && whole - start > (long long)max) {
        close(fd);
        char pbuf[4600];
        return seer_err_set(err, SEER_SANDBOX_FS_ETOOBIG,
                            "refusing to read %s in %s: it holds %lld bytes, more than the %zu the host reads "
                            "from a folder the sandbox can write",
                            shown(r, rel, pbuf, sizeof pbuf), r->what, whole - start, max);
    }
    size_t want = (size_t)(whole - start);
    char *buf = malloc(want + 1);
    if (!buf) {
        close(fd);
        return seer_err_set(err, SEER_ENOMEM, "out of memory reading %s", rel);
    }
    size_t got = 0;
    while (got < want) {
        ssize_t k = pread(fd, buf + got, want - got, (off_t)(start + (long long)got));
        if (k < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(buf);
            close(fd);
            return fail_errno(r, rel, e, err);
        }
        if (k == 0) break; /* truncated meanwhile: what is there */
        got += (size_t)k;
    }
    close(fd);
    buf[got] = '\0';
    *out = buf;
    *n = got;
    return 0;
}

static atomic_uint tmp_counter;

/* data/n, or (data NULL) everything read from src_fd, into rel atomically. */
static int write_atomic(const seer_sandbox_fs_root_t *r, const char *rel, const void *data, size_t n, int src_fd,
                        unsigned mode, int mkdirs, int exclusive, seer_err_t *err) {
    path_t p;
    int dfd = open_parent(r, rel, &p, mkdirs, err);
    if (dfd < 0) return dfd;
    const char *name = p.c[p.n - 1];
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        close(dfd);
        char pbuf[4600];
        return seer_err_set(err, SEER_SANDBOX_FS_ENOTREG, "cannot write %s in %s: it is a directory",
                            shown(r, rel, pbuf, sizeof pbuf), r->what);
    }
    char tmp[64];
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 16; tries++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        snprintf(tmp, sizeof tmp, ".seer-tmp-%d-%u-%lx", (int)getpid(), atomic_fetch_add(&tmp_counter, 1),
                 (unsigned long)ts.tv_nsec);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode ? mode : 0644);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        int e = errno;
        close(dfd);
        return fail_errno(r, rel, e, err);
    }
    int e = 0;
    if (data) {
        const char *d = data;
        size_t done = 0;
        while (done < n) {
            ssize_t k = write(fd, d + done, n - done);
            if (k < 0) {
                if (errno == EINTR) continue;
                e = errno;
                break;
            }
            done += (size_t)k;
        }
    } else {
        static __thread char chunk[65536];
        for (;;) {
            ssize_t k = read(src_fd, chunk, sizeof chunk);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) {
                e = errno;
                break;
            }
            if (k == 0) break;
            ssize_t off = 0;
            while (off < k) {
                ssize_t w = write(fd, chunk + off, (size_t)(k - off));
                if (w < 0 && errno == EINTR) continue;
                if (w < 0) {
                    e = errno;
                    break;
                }
                off += w;
            }
            if (e) break;
        }
    }
    if (close(fd) != 0 && !e) e = errno;
    /* rename never follows the target: a link planted at rel is replaced, not written through;
     * exclusive: nothing at rel is replaced either (a name reserved atomically: EEXIST) */
    if (!e && (exclusive ? renameat2(dfd, tmp, dfd, name, RENAME_NOREPLACE) : renameat(dfd, tmp, dfd, name)) != 0) e = errno;
    if (e) {
        unlinkat(dfd, tmp, 0);
        close(dfd);
        return fail_errno(r, rel, e, err);
    }
    close(dfd);
    return 0;
}

int seer_sandbox_fs_write(const seer_sandbox_fs_root_t *r, const char *rel, const void *data, size_t n,
                          unsigned mode, int mkdirs, seer_err_t *err) {
    return write_atomic(r, rel, data ? data : "", n, -1, mode, mkdirs, 0, err);
}

int seer_sandbox_fs_create(const seer_sandbox_fs_root_t *r, const char *rel, const void *data, size_t n, unsigned mode,
                           int mkdirs, seer_err_t *err) {
    return write_atomic(r, rel, data ? data : "", n, -1, mode, mkdirs, 1, err);
}

int seer_sandbox_fs_copy_in(const seer_sandbox_fs_root_t *r, const char *rel, const char *src, unsigned mode,
                            int mkdirs, seer_err_t *err) {
    /* src is the host's own file (trusted): opened normally, streamed in 64 KiB chunks */
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return seer_err_set(err, errno == ENOENT ? SEER_ENOTFOUND : SEER_EIO, "%s: %s", src, strerror(errno));
    int rc = write_atomic(r, rel, NULL, 0, fd, mode, mkdirs, 0, err);
    close(fd);
    return rc;
}

int seer_sandbox_fs_mkdirs(const seer_sandbox_fs_root_t *r, const char *rel, unsigned mode, seer_err_t *err) {
    path_t p;
    int rc = split(r, rel, &p, err);
    if (rc < 0) return rc;
    int fd = open_dir(r, &p, p.n, 1, mode ? mode : 0755, err);
    if (fd < 0) return fd;
    close(fd);
    return 0;
}

int seer_sandbox_fs_stat(const seer_sandbox_fs_root_t *r, const char *rel, struct stat *st, seer_err_t *err) {
    path_t p;
    int rc = split(r, rel, &p, err);
    if (rc < 0) return rc;
    if (p.n == 0) return fstat(r->fd, st) == 0 ? 0 : fail_errno(r, rel, errno, err);
    int dfd = open_dir(r, &p, p.n - 1, 0, 0, err);
    if (dfd < 0) return dfd;
    rc = fstatat(dfd, p.c[p.n - 1], st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : fail_errno(r, rel, errno, err);
    close(dfd);
    return rc;
}

/* An O_RDONLY descriptor of a directory given as an O_PATH one (for readdir). */
static int readable_dir(int pathfd) { return openat(pathfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

int seer_sandbox_fs_list(const seer_sandbox_fs_root_t *r, const char *rel, size_t max_entries,
                         seer_sandbox_fs_entry_t **out, size_t *n, seer_err_t *err) {
    path_t p;
    *out = NULL;
    *n = 0;
    int rc = split(r, rel, &p, err);
    if (rc < 0) return rc;
    int pfd = open_dir(r, &p, p.n, 0, 0, err);
    if (pfd < 0) return pfd;
    int fd = readable_dir(pfd);
    close(pfd);
    if (fd < 0) return fail_errno(r, rel, errno, err);
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return fail_errno(r, rel, e, err);
    }
    size_t cap = 0;
    seer_sandbox_fs_entry_t *v = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (*n == max_entries) {
            free(v);
            closedir(d);
            char pbuf[4600];
            return seer_err_set(err, SEER_SANDBOX_FS_ETOOBIG, "refusing to list %s in %s: more than %zu entries",
                                shown(r, rel, pbuf, sizeof pbuf), r->what, max_entries);
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 32;
            seer_sandbox_fs_entry_t *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                free(v);
                closedir(d);
                return seer_err_set(err, SEER_ENOMEM, "out of memory listing %s", rel);
            }
            v = nv;
        }
        seer_sandbox_fs_entry_t *x = &v[(*n)++];
        snprintf(x->name, sizeof x->name, "%s", e->d_name);
        if (fstatat(dirfd(d), e->d_name, &x->st, AT_SYMLINK_NOFOLLOW) != 0) memset(&x->st, 0, sizeof x->st);
    }
    closedir(d);
    *out = v;
    return 0;
}

int seer_sandbox_fs_unlink(const seer_sandbox_fs_root_t *r, const char *rel, seer_err_t *err) {
    path_t p;
    int dfd = open_parent(r, rel, &p, 0, err);
    if (dfd < 0) return dfd;
    int rc = unlinkat(dfd, p.c[p.n - 1], 0) == 0 ? 0 : fail_errno(r, rel, errno == EISDIR ? EISDIR : errno, err);
    close(dfd);
    return rc;
}

int seer_sandbox_fs_rename(const seer_sandbox_fs_root_t *r, const char *from, const char *to, seer_err_t *err) {
    path_t a, b;
    int fa = open_parent(r, from, &a, 0, err);
    if (fa < 0) return fa;
    int fb = open_parent(r, to, &b, 1, err);
    if (fb < 0) {
        close(fa);
        return fb;
    }
    int rc = renameat(fa, a.c[a.n - 1], fb, b.c[b.n - 1]) == 0 ? 0 : fail_errno(r, to, errno, err);
    close(fa);
    close(fb);
    return rc;
}

int seer_sandbox_fs_symlink(const seer_sandbox_fs_root_t *r, const char *target, const char *rel, seer_err_t *err) {
    path_t p;
    int dfd = open_parent(r, rel, &p, 1, err);
    if (dfd < 0) return dfd;
    int rc = symlinkat(target, dfd, p.c[p.n - 1]) == 0 ? 0 : fail_errno(r, rel, errno, err);
    close(dfd);
    return rc;
}

/* Makes a directory the sandbox left without permissions removable: chmod through the
 * descriptor's /proc/self/fd link, which names the very inode that was opened O_NOFOLLOW (a
 * path-based chmod could be redirected by a swap). */
static void make_writable(int dfd, const char *name) {
    int fd = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (chmod(proc, 0700) != 0) { /* best effort: the removal below reports what fails */
    }
    close(fd);
}

static int rm_children(const seer_sandbox_fs_root_t *r, int top, int dfd, int depth, int *moved, const char *rel,
                       seer_err_t *err);

static int rm_entry(const seer_sandbox_fs_root_t *r, int top, int dfd, const char *name, int depth, int *moved,
                    const char *rel, seer_err_t *err) {
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : fail_errno(r, rel, errno, err);
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT) return 0;
        return fail_errno(r, rel, errno, err);
    }
    if (!r->cross_mounts && st.st_dev != r->dev) return fail(r, rel, SEER_SANDBOX_FS_EXDEV, 0, err);
    if (depth >= RM_MAX_DEPTH) {
        for (int tries = 0; tries < 64; tries++) {
            char up[64];
            snprintf(up, sizeof up, ".seer-rm-%d-%u", (int)getpid(), atomic_fetch_add(&tmp_counter, 1));
            if (renameat2(dfd, name, top, up, RENAME_NOREPLACE) == 0) {
                (*moved)++;
                return 0;
            }
            if (errno != EEXIST) return fail_errno(r, rel, errno, err);
        }
        return fail_errno(r, rel, EEXIST, err);
    }
    for (int attempt = 0; attempt < 8; attempt++) {
        int cfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cfd < 0 && errno == EACCES) {
            make_writable(dfd, name);
            cfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (cfd < 0) {
            if (errno == ENOENT) return 0;
            if (errno == ELOOP || errno == ENOTDIR) { /* swapped for a link or file: unlink that */
                if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT) return 0;
            }
            return fail_errno(r, rel, errno, err);
        }
        struct stat cst;
        if (fstat(cfd, &cst) != 0 || (!r->cross_mounts && cst.st_dev != r->dev)) {
            close(cfd);
            return fail(r, rel, SEER_SANDBOX_FS_EXDEV, 0, err);
        }
        if (!(cst.st_mode & S_IWUSR) || !(cst.st_mode & S_IXUSR)) {
            close(cfd);
            make_writable(dfd, name);
            cfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (cfd < 0) return fail_errno(r, rel, errno, err);
        }
        int rc = rm_children(r, top, cfd, depth + 1, moved, rel, err);
        close(cfd);
        if (rc < 0) return rc;
        if (unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT) return 0;
        if (errno != ENOTEMPTY && errno != EEXIST) return fail_errno(r, rel, errno, err);
        /* something was written meanwhile: go again */
    }
    return fail_errno(r, rel, ENOTEMPTY, err);
}

static int rm_children(const seer_sandbox_fs_root_t *r, int top, int dfd, int depth, int *moved, const char *rel,
                       seer_err_t *err) {
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return fail_errno(r, rel, errno, err);
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return fail_errno(r, rel, e, err);
    }
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        rc = rm_entry(r, top, dirfd(d), e->d_name, depth, moved, rel, err);
    }
    closedir(d);
    return rc;
}

/* Empties the directory top; what was moved up into it gets removed on the next pass. */
static int rm_all(const seer_sandbox_fs_root_t *r, int top, const char *rel, seer_err_t *err) {
    for (int pass = 0; pass < 1000000; pass++) {
        int moved = 0;
        int rc = rm_children(r, top, top, 0, &moved, rel, err);
        if (rc < 0) return rc;
        if (!moved) return 0;
    }
    return fail_errno(r, rel, ENOTEMPTY, err);
}

int seer_sandbox_fs_remove_tree(const seer_sandbox_fs_root_t *r, const char *rel, seer_err_t *err) {
    path_t p;
    int rc = split(r, rel, &p, err);
    if (rc < 0) return rc;
    if (p.n == 0) {
        int top = readable_dir(r->fd);
        if (top < 0) return fail_errno(r, rel, errno, err);
        rc = rm_all(r, top, rel, err);
        close(top);
        return rc;
    }
    int dfd = open_dir(r, &p, p.n - 1, 0, 0, err);
    if (dfd < 0) return dfd == SEER_ENOTFOUND ? 0 : dfd;
    const char *name = p.c[p.n - 1];
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        int e = errno;
        close(dfd);
        return e == ENOENT ? 0 : fail_errno(r, rel, e, err);
    }
    if (!S_ISDIR(st.st_mode)) {
        rc = unlinkat(dfd, name, 0) == 0 || errno == ENOENT ? 0 : fail_errno(r, rel, errno, err);
        close(dfd);
        return rc;
    }
    int top = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (top < 0 && errno == EACCES) {
        make_writable(dfd, name);
        top = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (top < 0) {
        int e = errno;
        close(dfd);
        return fail_errno(r, rel, e, err);
    }
    struct stat tst;
    if (fstat(top, &tst) != 0 || (!r->cross_mounts && tst.st_dev != r->dev)) {
        close(top);
        close(dfd);
        return fail(r, rel, SEER_SANDBOX_FS_EXDEV, 0, err);
    }
    if (!(tst.st_mode & S_IWUSR) || !(tst.st_mode & S_IXUSR)) make_writable(dfd, name);
    rc = rm_all(r, top, rel, err);
    close(top);
    if (rc == 0 && unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) rc = fail_errno(r, rel, errno, err);
    close(dfd);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Lua: seer.core.sandbox.fs_*(root, rel, ..., opts) -> result | nil, message, code
 * opts: what (names the tree in errors), walk (force the O_NOFOLLOW walk; tests the fallback),
 * cross_mounts (allow other devices below the root). */

static const char *code_name(int rc) {
    switch (rc) {
    case SEER_SANDBOX_FS_ESYMLINK: return "symlink";
    case SEER_SANDBOX_FS_ENOTREG: return "notregular";
    case SEER_SANDBOX_FS_ETOOBIG: return "toobig";
    case SEER_SANDBOX_FS_EXDEV: return "outside";
    case SEER_SANDBOX_FS_ENOTDIR: return "notdir";
    case SEER_SANDBOX_FS_EEXIST: return "exists";
    case SEER_ENOTFOUND: return "notfound";
    case SEER_EINVAL: return "invalid";
    default: return "io";
    }
}

static int push_fail(lua_State *L, int rc, const seer_err_t *err) {
    lua_pushnil(L);
    lua_pushstring(L, err->msg);
    lua_pushstring(L, code_name(rc));
    return 3;
}

/* The end of a binding that returns true: the root closed, then true or the failure triple. */
static int push_done(lua_State *L, seer_sandbox_fs_root_t *r, int rc, const seer_err_t *err) {
    seer_sandbox_fs_close_root(r);
    if (rc < 0) return push_fail(L, rc, err);
    lua_pushboolean(L, 1);
    return 1;
}

static int opt_bool(lua_State *L, int idx, const char *key) {
    if (!lua_istable(L, idx)) return 0;
    lua_getfield(L, idx, key);
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* A whole-number option from lo to hi in the table at idx (dflt when absent). */
static int64_t opt_num(lua_State *L, int idx, const char *key, int64_t dflt, int64_t lo, int64_t hi) {
    if (!lua_istable(L, idx)) return dflt;
    lua_getfield(L, idx, key);
    char what[48];
    snprintf(what, sizeof what, "safe_fs: %s", key);
    int64_t v = seer_lua_optint(L, -1, dflt, lo, hi, what);
    lua_pop(L, 1);
    return v;
}

/* A path argument; an embedded NUL would silently cut it short in C, so it is refused. */
static const char *check_path(lua_State *L, int idx) {
    size_t len;
    const char *s = luaL_checklstring(L, idx, &len);
    if (strlen(s) != len) luaL_argerror(L, idx, "a path may not contain a NUL byte");
    return s;
}

/* Opens the root named by argument 1 with the options at opts_idx; on failure pushes the
 * nil, message, code triple and returns it (>0). */
static int lua_root(lua_State *L, int opts_idx, seer_sandbox_fs_root_t *r, seer_err_t *err) {
    const char *root = check_path(L, 1);
    const char *what = NULL;
    if (lua_istable(L, opts_idx)) {
        lua_getfield(L, opts_idx, "what");
        what = lua_tostring(L, -1); /* stays alive: the table holds it */
        lua_pop(L, 1);
    }
    int rc = seer_sandbox_fs_open_root(r, root, what, err);
    if (rc < 0) return push_fail(L, rc, err);
    r->no_openat2 = opt_bool(L, opts_idx, "walk");
    r->cross_mounts = opt_bool(L, opts_idx, "cross_mounts");
    return 0;
}

static seer_sandbox_fs_root_t *new_root(lua_State *L) {
    /* kept in a userdata so a Lua error in the middle cannot leak it (the err buffer too) */
    return lua_newuserdata(L, sizeof(seer_sandbox_fs_root_t) + sizeof(seer_err_t));
}

/* fs_read(root, rel, {max = bytes, offset, tail, ...}) -> data, size */
static int l_fs_read(lua_State *L) {
    seer_sandbox_fs_root_t *r = new_root(L);
    seer_err_t *err = (seer_err_t *)(r + 1);
    const char *rel = check_path(L, 2);
    /* options first: a Lua error after lua_root would leave the root's descriptors open */
    size_t max = (size_t)opt_num(L, 3, "max", 1 << 20, 0, INT64_MAX);
    long long offset = (long long)opt_num(L, 3, "offset", 0, INT64_MIN, INT64_MAX);
    int n = lua_root(L, 3, r, err);
    if (n) return n;
    char *buf;
    size_t len;
    long long size;
    int rc = seer_sandbox_fs_read(r, rel, max, offset, opt_bool(L, 3, "tail"), &buf, &len, &size, err);
    seer_sandbox_fs_close_root(r);
    if (rc < 0) return push_fail(L, rc, err);
    lua_pushlstring(L, buf, len);
    free(buf);
    lua_pushnumber(L, (lua_Number)size);
    return 2;
}

/* fs_write(root, rel, data, {mode, mkdirs, exclusive, ...}) -> true */
static int l_fs_write(lua_State *L) {
    seer_sandbox_fs_root_t *r = new_root(L);
    seer_err_t *err = (seer_err_t *)(r + 1);
    const char *rel = check_path(L, 2);
    size_t len;
    const char *data = luaL_checklstring(L, 3, &len);
    unsigned mode = (unsigned)opt_num(L, 4, "mode", 0644, 0, 07777);
    int n = lua_root(L, 4, r, err);
    if (n) return n;
    int rc = opt_bool(L, 4, "exclusive") ? seer_sandbox_fs_create(r, rel, data, len, mode, opt_bool(L, 4, "mkdirs"), err)
                                         : seer_sandbox_fs_write(r, rel, data, len, mode, opt_bool(L, 4, "mkdirs"), err);
    return push_done(L, r, rc, err);
}

/* fs_copy_in(root, rel, host_src, {mode, mkdirs}) -> true: a host file streamed in atomically */
static int l_fs_copy_in(lua_State *L) {
    seer_sandbox_fs_root_t *r = new_root(L);
    seer_err_t *err = (seer_err_t *)(r + 1);
    const char *rel = check_path(L, 2), *src = check_path(L, 3);
    unsigned mode = (unsigned)opt_num(L, 4, "mode", 0644, 0, 07777);
    int n = lua_root(L, 4, r, err);
    if (n) return n;
    int rc = seer_sandbox_fs_copy_in(r, rel, src, mode, opt_bool(L, 4, "mkdirs"), err);
    return push_done(L, r, rc, err);
}

static int l_fs_mkdirs(lua_State *L) {
    seer_sandbox_fs_root_t *r = new_root(L);
    seer_err_t *err = (seer_err_t *)(r + 1);
    const char *rel = check_path(L, 2);
    unsigned mode = (unsigned)opt_num(L, 3, "mode", 0755, 0, 07777);
    int n = lua_root(L, 3, r, err);
    if (n) return n;
    int rc = seer_sandbox_fs_mkdirs(r, rel, mode, err);
    return push_done(L, r, rc, err);
}

static const char *type_name(mode_t m) {
    return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "link" : S_ISFIFO(m) ? "fifo"
         : S_ISSOCK(m) ? "socket" : "other";
}

static void push_stat(lua_State *L, const struct stat *st) {
    lua_newtable(L);
    lua_pushstring(L, type_name(st->st_mode));
    lua_setfield(L, -2, "type");
    lua_pushnumber(L, (lua_Number)st->st_size);
    lua_setfield(L, -2, "size");
    lua_pushnumber(L, (lua_Number)st->st_mtim.tv_sec + st->st_mtim.tv_nsec / 1e9);
    lua_setfield(L, -2, "mtime");
    lua_pushinteger(L, (lua_Integer)(st->st_mode & 07777));
    lua_setfield(L, -2, "mode");
}

/* fs_stat(root, rel, opts) -> {type = "file"|"dir"|"link"|"fifo"|"socket"|"other", size, mtime, mode} */
static int l_fs_stat(lua_State *L) {
    seer_sandbox_fs_root_t *r = new_root(L);
    seer_err_t *err = (seer_err_t *)(r + 1);
    const char *rel = check_path(L, 2);
    int n = lua_root(L, 3, r, err);
    if (n) return n;
    struct stat st;
    int rc = seer_sandbox_fs_stat(r, rel, &st, err);
    seer_sandbox_fs_close_root(r);
    if (rc < 0) return push_fail(L, rc, err);
    push_stat(L, &st);
    return 1;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const seer_sandbox_fs_entry_t *)a)->name, ((const seer_sandbox_fs_entry_t *)b)->name);
}

/* fs_list(root, rel, {max = entries}) -> {{name, type, size, mtime, mode}, ...} sorted by name */
static int l_fs_list(lua_State *L) {
    seer_sandbox_fs_root_t *r = new_root(L);
    seer_err_t *err = (seer_err_t *)(r + 1);
    const char *rel = lua_isnoneornil(L, 2) ? "" : check_path(L, 2);
    size_t max = (size_t)opt_num(L, 3, "max", 100000, 0, INT64_MAX);
    int n = lua_root(L, 3, r, err);
    if (n) return n;
    seer_sandbox_fs_entry_t *v;
    size_t cnt;
    int rc = seer_sandbox_fs_list(r, rel, max, &v, &cnt, err);
    seer_sandbox_fs_close_root(r);
    if (rc < 0) return push_fail(L, rc, err);
    if (cnt > 1) qsort(v, cnt, sizeof *v, cmp_entry); /* v is NULL when empty */
    lua_createtable(L, (int)cnt, 0);
    for (size_t i = 0; i < cnt; i++) {
        push_stat(L, &v[i].st);
        lua_pushstring(L, v[i].name);
        lua_setfield(L, -2, "name");
        lua_rawseti(L, -2, (int)i + 1);
    }
    free(v);
    return 1;
}

static int l_fs_unlink(lua_State *L) {
    seer_sandbox_fs_root_t *r = new_root(L);
    seer_err_t *err = (seer_err_t *)(r + 1);
    const char *rel = check_path(L, 2);
    int n = lua_root(L, 3, r, err);
    if (n) return n;
    int rc = seer_sandbox_fs_unlink(r, rel, err);
    return push_done(L, r, rc, err);
}

static int l_fs_rename(lua_State *L) {
    seer_sandbox_fs_root_t *r = new_root(L);
    seer_err_t *err = (seer_err_t *)(r + 1);
    const char *from = check_path(L, 2), *to = check_path(L, 3);
    int n = lua_root(L, 4, r, err);
    if (n) return n;
    int rc = seer_sandbox_fs_rename(r, from, to, err);
    return push_done(L, r, rc, err);
}

/* fs_symlink(root, target, rel, opts) */
static int l_fs_symlink(lua_State *L) {
    seer_sandbox_fs_root_t *r = new_root(L);
    seer_err_t *err = (seer_err_t *)(r + 1);
    const char *target = check_path(L, 2), *rel = check_path(L, 3);
    int n = lua_root(L, 4, r, err);
    if (n) return n;
    int rc = seer_sandbox_fs_symlink(r, target, rel, err);
    return push_done(L, r, rc, err);
}

static int l_fs_remove_tree(lua_State *L) {
    seer_sandbox_fs_root_t *r = new_root(L);
    seer_err_t *err = (seer_err_t *)(r + 1);
    const char *rel = check_path(L, 2);
    int n = lua_root(L, 3, r, err);
    if (n) return n;
    int rc = seer_sandbox_fs_remove_tree(r, rel, err);
    return push_done(L, r, rc, err);
}

void seer_sandbox_fs_lua_register(struct lua_State *L) {
    static const luaL_Reg fns[] = {{"fs_read", l_fs_read},     {"fs_write", l_fs_write},
                                   {"fs_mkdirs", l_fs_mkdirs}, {"fs_copy_in", l_fs_copy_in}, {"fs_stat", l_fs_stat},
                                   {"fs_list", l_fs_list},     {"fs_unlink", l_fs_unlink},
                                   {"fs_rename", l_fs_rename}, {"fs_symlink", l_fs_symlink},
                                   {"fs_remove_tree", l_fs_remove_tree}, {NULL, NULL}};
    luaL_register(L, NULL, fns);
}
