/* Descriptor-based staging of a hidden model's files (stage.h explains why). */
#include "stage.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* The canonical path of what fd is open at (its /proc/self/fd name): 0 or -errno. */
static int fd_path(int fd, char *real, size_t size) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (size < 2) return -EINVAL;
    ssize_t n = readlink(proc, real, size - 1);
    if (n < 0) return -errno;
    if ((size_t)n >= size - 1) return -ENAMETOOLONG;
    real[n] = 0;
    return 0;
}

/* p is root or beneath it (both canonical). */
static int beneath(const char *p, const char *root) {
    size_t n = strlen(root);
    if (n == 0) return 0;
    if (n == 1 && root[0] == '/') return p[0] == '/';
    return strncmp(p, root, n) == 0 && (p[n] == '/' || p[n] == 0);
}

int seer_stage_open_dir(const char *path, char *real, size_t real_size) {
    if (!path || !*path) return -EINVAL;
    int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = fd_path(fd, real, real_size);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int seer_stage_open_path(const char *path, int dir, char *real, size_t real_size) {
    if (!path || !*path) return -EINVAL;
    int fd = open(path, O_PATH | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
    if (fd < 0) return -errno;
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? -errno : (!dir && S_ISDIR(st.st_mode)) ? -EISDIR : fd_path(fd, real, real_size);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int seer_stage_open_subdir(int dirfd, const char *name) {
    if (!name || !*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return -EINVAL;
    /* O_NOFOLLOW with O_DIRECTORY: a link, whatever it leads to, is ENOTDIR (O_PATH alone would
     * open the link itself) */
    int fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
        close(fd);
        return -ENOTDIR;
    }
    return fd;
}

int seer_stage_open_file(int dirfd, const char *name, const char *root0, const char *root1, long long *size,
                         char *real, size_t real_size) {
    if (!name || !*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return -EINVAL;
    /* O_PATH follows a link without opening what it reaches: a FIFO is not waited on, a device
     * not opened */
    int pfd = openat(dirfd, name, O_PATH | O_CLOEXEC);
    if (pfd < 0) return -errno;
    struct stat pst, st;
    if (fstat(pfd, &pst) != 0) {
        int e = errno;
        close(pfd);
        return -e;
    }
    if (!S_ISREG(pst.st_mode)) {
        close(pfd);
        return SEER_STAGE_ENOTREG;
    }
    int rc = fd_path(pfd, real, real_size);
    if (rc < 0) {
        close(pfd);
        return rc;
    }
    if (root0 && !(beneath(real, root0) || (root1 && beneath(real, root1)))) {
        close(pfd);
        return SEER_STAGE_EOUTSIDE;
    }
    /* the same inode, opened for reading through its descriptor (the magic link names the file
     * itself, not a path that could be swapped) */
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", pfd);
    int fd = open(proc, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    int e = errno;
    close(pfd);
    if (fd < 0) return -e;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != pst.st_dev || st.st_ino != pst.st_ino) {
        close(fd);
        return SEER_STAGE_ENOTREG;
    }
    /* back to blocking reads (O_NONBLOCK only guarded the open) */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (size) *size = (long long)st.st_size;
    return fd;
}

int seer_stage_link(int fd, const char *dst) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, dst, AT_SYMLINK_FOLLOW) != 0) return -errno;
    return 0;
}

int seer_stage_create(const char *dst) {
    int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    return fd < 0 ? -errno : fd;
}

int seer_stage_clone(int out, int in, long long n) {
#ifdef FICLONE
    if (n < 0) return -EINVAL;
    if (ioctl(out, FICLONE, in) != 0) return -errno;
    struct stat st;
    if (fstat(out, &st) != 0) return -errno;
    if ((long long)st.st_size < n) return SEER_STAGE_ESHORT;
    if ((long long)st.st_size > n && ftruncate(out, (off_t)n) != 0) return -errno;
    return 0;
#else
    (void)out;
    (void)in;
    (void)n;
    return -EOPNOTSUPP;
#endif
}

long long seer_stage_copy(int in, long long in_off, int out, long long out_off, long long n) {
    if (n < 0 || in_off < 0 || out_off < 0) return -EINVAL;
    long long done = 0;
    int kernel = 1; /* copy_file_range until it says it cannot */
    char *buf = NULL;
    const size_t chunk = (size_t)1 << 20;
    while (done < n) {
        ssize_t k;
        if (kernel) {
            loff_t a = (loff_t)(in_off + done), b = (loff_t)(out_off + done);
            size_t want = (size_t)(n - done < (1LL << 30) ? n - done : (1LL << 30));
            k = copy_file_range(in, &a, out, &b, want, 0);
            if (k == 0) { /* the end, or a file system that copies nothing this way: read() tells */
                kernel = 0;
                continue;
            }
            if (k < 0) {
                if (errno == EINTR) continue;
                /* another file system (older kernels), a file system without it, a filter */
                if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP || errno == EPERM ||
                    errno == EBADF) {
                    kernel = 0;
                    continue;
                }
                int e = errno;
                free(buf);
                return -e;
            }
        } else {
            if (!buf && !(buf = malloc(chunk))) return -ENOMEM;
            size_t want = (size_t)(n - done < (long long)chunk ? n - done : (long long)chunk);
            k = pread(in, buf, want, (off_t)(in_off + done));
            if (k < 0) {
                if (errno == EINTR) continue;
                int e = errno;
                free(buf);
                return -e;
            }
            if (k > 0) {
                ssize_t w = 0;
                while (w < k) {
                    ssize_t x = pwrite(out, buf + w, (size_t)(k - w), (off_t)(out_off + done + w));
                    if (x < 0 && errno == EINTR) continue;
                    if (x < 0) {
                        int e = errno;
                        free(buf);
                        return -e;
                    }
                    w += x;
                }
            }
        }
        if (k == 0) {
            free(buf);
            return SEER_STAGE_ESHORT;
        }
        done += k;
    }
    free(buf);
    return done;
}

long long seer_stage_pread(int fd, void *buf, long long n, long long off) {
    if (n < 0 || off < 0) return -EINVAL;
    long long got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)buf + got, (size_t)(n - got), (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -errno;
        if (k == 0) break;
        got += k;
    }
    return got;
}

long long seer_stage_pwrite(int fd, const void *buf, long long n, long long off) {
    if (n < 0 || off < 0) return -EINVAL;
    long long done = 0;
    while (done < n) {
        ssize_t k = pwrite(fd, (const char *)buf + done, (size_t)(n - done), (off_t)(off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -errno;
        done += k;
    }
    return done;
}

int seer_stage_close(int fd) { return close(fd) != 0 ? -errno : 0; }
