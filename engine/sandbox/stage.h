/* Staging a hidden model (lua/seer/sandbox.lua, Sandbox:_stage_hidden): its files are opened once,
 * confined to the model folder, and what is hard-linked or copied into the sandbox's mount is the
 * file behind that descriptor, never a path looked up again. The model folder may be one a
 * sandbox can write (an agent's model in its workspace, hidden into a second sandbox): a file
 * checked by path and then linked or copied by path could meanwhile have become a link to a host
 * file, or a directory on the way a link to a host folder (docs/sandbox.md, "Hidden").
 *
 * Lua calls these through the FFI (the binary is linked with -rdynamic). Every function returns
 * a descriptor or 0 on success and a negative errno, or one of the SEER_STAGE_E* below, on
 * failure; none keeps state. */
#ifndef SEER_SANDBOX_STAGE_H
#define SEER_SANDBOX_STAGE_H

#include <stddef.h>

enum {
    SEER_STAGE_ENOTREG = -1000,  /* not a regular file (a directory, fifo, socket, device) */
    SEER_STAGE_EOUTSIDE = -1001, /* a link whose target, as the kernel resolved it, is outside the roots */
    SEER_STAGE_ESHORT = -1002,   /* the source ended before the bytes asked for: it shrank */
};

/* Opens the directory path (its links followed: the model folder as it was configured) as an
 * O_PATH descriptor, and writes the canonical path the kernel resolved it to into real. */
int seer_stage_open_dir(const char *path, char *real, size_t real_size);

/* Opens path (its links followed: a SandboxConfig.local_files / local_dirs entry as configured)
 * as an O_PATH descriptor that is a directory when dir is non-zero and anything else when it is
 * zero (-ENOTDIR / -EISDIR otherwise), and writes its canonical path into real. */
int seer_stage_open_path(const char *path, int dir, char *real, size_t real_size);

/* Opens name, one component (no '/', not "." or ".."), of the directory dirfd as an O_PATH
 * descriptor when it is a directory itself, not a link to one (a link is -ENOTDIR): for walking a
 * model folder's sub-folders without leaving it. */
int seer_stage_open_subdir(int dirfd, const char *name);

/* Opens name, one component (no '/', not "." or ".."), of the directory dirfd for reading. A link
 * is followed, then the file the kernel reached (an O_PATH open: no FIFO waited on, no device
 * opened) must be a regular file whose canonical path (its /proc/self/fd name) is root0 or root1
 * or beneath one of them (root1 may be NULL or ""; root0 NULL: no check, any link followed). That
 * same file is then opened for reading through /proc/self/fd, so a swap after the check changes
 * nothing. Writes its size and canonical path; returns the descriptor (O_RDONLY, O_CLOEXEC).
 * -ENOENT: nothing there (or a link to nothing); SEER_STAGE_ENOTREG; SEER_STAGE_EOUTSIDE. */
int seer_stage_open_file(int dirfd, const char *name, const char *root0, const char *root1, long long *size,
                         char *real, size_t real_size);

/* Hard-links the file open at fd to dst, which must not exist (linkat of /proc/self/fd/N with
 * AT_SYMLINK_FOLLOW: the inode of the descriptor, whatever its name now leads to). -EXDEV on
 * another file system, -ENOENT when the file was removed meanwhile. */
int seer_stage_link(int fd, const char *dst);

/* Creates dst, which must not exist (O_EXCL, no link followed), for writing: mode 0644 less the
 * umask. */
int seer_stage_create(const char *dst);

/* Makes out, an empty file, a clone of in (FICLONE: a reflink, where the file system shares
 * extents) of exactly n bytes: longer is cut to n, shorter is SEER_STAGE_ESHORT (in shrank since
 * it was checked). -EOPNOTSUPP, -EXDEV, -EINVAL where the file system cannot clone. */
int seer_stage_clone(int out, int in, long long n);

/* Copies n bytes of in from in_off to out at out_off (copy_file_range, else read and write).
 * Returns n, or SEER_STAGE_ESHORT when in ends first. */
long long seer_stage_copy(int in, long long in_off, int out, long long out_off, long long n);

/* Reads up to n bytes of fd at off into buf (until n or the end): the count read. */
long long seer_stage_pread(int fd, void *buf, long long n, long long off);

/* Writes n bytes of buf to fd at off: n. */
long long seer_stage_pwrite(int fd, const void *buf, long long n, long long off);

/* close(2) that reports its error: 0 or -errno. */
int seer_stage_close(int fd);

#endif
