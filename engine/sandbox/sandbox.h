/* The process side of sandboxes: the keeper that owns a sandbox's process tree (limits, wall
 * time, cleanup when its owner dies), cgroup v1 limits with an rlimit fallback, and the child
 * processes sandboxd runs (pipes, process groups, timeouts). The policy (what bubblewrap is
 * told, which mounts) is Lua's (lua/seer/sandbox.lua); this file is where mistakes would leak
 * processes or hang, so it is C.
 *
 *   owner (the script) ── fork ──> keeper ── fork+exec ──> bwrap ──> [pid ns] sandboxd, kernels...
 *
 * The keeper gets SIGTERM when its owner dies (PR_SET_PDEATHSIG), on `seer sandbox terminate`
 * and when the wall-time limit passes; it then kills bwrap (whose --die-with-parent and the pid
 * namespace take everything inside down with it), kills whatever is left in the sandbox's
 * cgroups, removes them, writes a status file, and — only when the owner is gone — removes
 * the sandbox's state directory. A SIGKILL of the keeper still takes the sandbox down
 * (bwrap dies with its parent); only the empty cgroup directories can then stay behind, and
 * `seer sandbox list` sweeps them. */
#ifndef SEER_SANDBOX_H
#define SEER_SANDBOX_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "../seer.h"

enum { SEER_SANDBOX_EBUSY = -40 }; /* processes in a cgroup survived SIGKILL for the whole wait */

/* cgroup v1 directories made for one sandbox ("" where the controller is not usable). */
typedef struct seer_sandbox_cgroup {
    char memory[512];
    char pids[512];
} seer_sandbox_cgroup_t;

/* Creates seer-<name> under this process's own memory and pids cgroups and sets the limits
 * (0: no limit). A controller that cannot be used (not mounted, not writable) leaves its path
 * empty and appends a line to notes (NUL-terminated, truncated to notes_size); the caller falls
 * back to rlimits. Only an invalid name is an error. */
int seer_sandbox_cgroup_create(const char *name, unsigned long long memory_bytes, long pids_max,
                               seer_sandbox_cgroup_t *cg, char *notes, size_t notes_size,
                               seer_err_t *err);

/* SIGKILLs every process in the cgroups until they are empty (at most timeout_ms), then
 * removes the directories. Returns 0, or SEER_EBUSY if something was still alive. */
int seer_sandbox_cgroup_destroy(const seer_sandbox_cgroup_t *cg, int timeout_ms);

typedef struct seer_sandbox_cgroup_stats {
    unsigned long long memory_limit, memory_peak; /* bytes; 0 when unknown */
    long memory_failcnt, oom_kills;               /* -1 when unknown */
    long pids_max_hits, pids_current;             /* -1 when unknown */
} seer_sandbox_cgroup_stats_t;

void seer_sandbox_cgroup_stats(const seer_sandbox_cgroup_t *cg, seer_sandbox_cgroup_stats_t *st);

/* Resource limits applied with setrlimit before exec (0: leave as is). */
typedef struct seer_sandbox_rlimits {
    long cpu_seconds;
    long open_files;
    unsigned long long address_space; /* bytes; the memory fallback without a memory cgroup */
    long processes;                   /* RLIMIT_NPROC; the fallback without a pids cgroup */
} seer_sandbox_rlimits_t;

/* The most descriptors a keeper hands its child (one per file of a model snapshot mounted). */
#define SEER_SANDBOX_PASS_FDS_MAX 100000

typedef struct seer_sandbox_keeper_opts {
    const char *const *argv;       /* what the keeper runs (bwrap ...); argv[0] is a path */
    const char *const *envp;       /* its whole environment */
    const char *log_path;          /* its stdout and stderr (appended) */
    const char *status_path;       /* written by the keeper when the sandbox has ended */
    const char *state_dir;         /* removed when the owner died (NULL: never) */
    const seer_sandbox_cgroup_t *cgroup; /* may be NULL */
    seer_sandbox_rlimits_t rlimits;
    long timeout_ms;               /* wall time from start; 0: none */
    /* Arguments handed to the child on its fd 3 (NUL-separated, from a sealed memfd), for
     * `bwrap --args 3`: bwrap is pid 1 of the sandbox, so anything inside reads its command
     * line as /proc/1/cmdline, and the mount options name host paths. NULL: none. */
    const char *const *fd_args;
    /* Descriptors handed to the child as its fds 4, 5, ... in this order (fd 3 is fd_args'), for
     * `bwrap --ro-bind-fd N DEST`: a file the host opened and checked through descriptors is
     * mounted as that very file (bwrap compares the mount with the descriptor), where a path
     * would be resolved again. The caller keeps its own descriptors and closes them. */
    const int *pass_fds;
    int npass_fds;
    const char *const *remove_dirs; /* also removed (with state_dir) when the owner died; may be NULL */
    const char *disk_image;        /* limits.disk: an image mounted on state_dir; when the owner
                                      died, state_dir is unmounted and the image removed too */
    int detach;                    /* a detached sandbox: the keeper runs in its own session and
                                      outlives its owner; it ends at timeout or when terminated,
                                      and then removes state_dir (and remove_dirs) itself */
} seer_sandbox_keeper_opts_t;

/* Forks the keeper, which starts argv. Returns the keeper's pid in *keeper (a child of the
 * caller: reap it with waitpid). */
int seer_sandbox_keeper_start(const seer_sandbox_keeper_opts_t *o, pid_t *keeper, seer_err_t *err);

/* A child process with pipes, in its own process group (so a timeout or a cancel stops what
 * it started too). Used by sandboxd for exec requests and services. */
typedef struct seer_sandbox_proc {
    pid_t pid;
    int in_fd, out_fd, err_fd;      /* non-blocking pipe ends; -1 when not piped / closed */
    int exited, code, signal;       /* filled by seer_sandbox_proc_poll */
} seer_sandbox_proc_t;

typedef struct seer_sandbox_spawn_opts {
    const char *const *argv;        /* argv[0] looked up on PATH from envp when it has no '/' */
    const char *const *envp;        /* NULL: this process's environment */
    const char *cwd;                /* NULL: this process's */
    int pipe_stdin;                 /* 0: /dev/null */
    const char *output_path;        /* non-NULL: stdout and stderr appended to this file, no pipes */
    seer_sandbox_rlimits_t rlimits;
} seer_sandbox_spawn_opts_t;

int seer_sandbox_proc_spawn(const seer_sandbox_spawn_opts_t *o, seer_sandbox_proc_t *p, seer_err_t *err);

/* Reaps the child if it has ended (never blocks): 1 ended (p->exited set), 0 still running. */
int seer_sandbox_proc_poll(seer_sandbox_proc_t *p);

/* Signals the child's whole process group. */
void seer_sandbox_proc_kill(seer_sandbox_proc_t *p, int sig);

/* Closes the pipe ends that are still open. */
void seer_sandbox_proc_close(seer_sandbox_proc_t *p);

/* ------------------------------------------------------------------------------------------
 * the kernel's attack surface (seccomp.c; docs/sandbox.md "System calls") */

struct sock_filter;

/* Sets no_new_privs and installs seer's seccomp filter on every thread of the calling process
 * (an allow-list at least as strict as Docker's default profile; denied calls fail with EPERM,
 * clone3 and syscalls newer than the table with ENOSYS, other ABIs than the native one with
 * EPERM). Inherited by every child; cannot be removed. x86_64 only: elsewhere it returns
 * SEER_EUNSUPPORTED and sandboxd refuses to run. */
int seer_sandbox_seccomp_install(seer_err_t *err);

/* Writes the filter's classic BPF program into out[0..cap) and returns its length (which may
 * exceed cap; 0 on an architecture without a filter). For tests and for install. */
size_t seer_sandbox_seccomp_program(struct sock_filter *out, size_t cap);

/* Replaces the calling process's session keyring with a new, empty, anonymous one, so keys of
 * the session that started the sandbox are not possessed inside (call before the filter, which
 * denies keyctl). */
int seer_sandbox_keyring_new_session(seer_err_t *err);

/* ------------------------------------------------------------------------------------------
 * File operations beneath a root the sandbox can write (engine/sandbox/safe_fs.c).
 *
 * The host reads and writes the workspace, the run and log directories of a sandbox while
 * code inside can change them at any moment: plant a symlink, a fifo, swap a directory for a
 * link between a check and a use, or grow a file without end. Every such operation goes
 * through these functions: paths are resolved component by component beneath the root's file
 * descriptor (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 * RESOLVE_NO_XDEV, or an O_NOFOLLOW | O_DIRECTORY walk where openat2 is missing), no symlink is
 * ever followed (a final one included), only regular files are read (opened O_NONBLOCK, then
 * checked with fstat), reads are bounded, and writes go to a temporary file renamed into place
 * in the same directory fd. Errors name the path and the reason. */

enum {
    SEER_SANDBOX_FS_ESYMLINK = -50,    /* a component of the path is a symbolic link */
    SEER_SANDBOX_FS_ENOTREG = -51,     /* not a regular file (fifo, socket, device, dir) */
    SEER_SANDBOX_FS_ETOOBIG = -52,     /* larger than the caller's bound */
    SEER_SANDBOX_FS_EXDEV = -53,       /* the path leaves the root or crosses a mount */
    SEER_SANDBOX_FS_ENOTDIR = -54,     /* a component that must be a directory is not one */
    SEER_SANDBOX_FS_EEXIST = -55,
};

typedef struct seer_sandbox_fs_root {
    int fd;                 /* O_PATH | O_DIRECTORY descriptor of the root */
    dev_t dev;              /* the root's device: nothing below may be on another (a mount) */
    int cross_mounts;       /* 1: allow other devices below (a root of "/" for an absolute path) */
    int no_openat2;         /* 1: always walk (tests the fallback; set when openat2 is missing) */
    char path[4096];        /* for messages */
    char what[128];         /* "the sandbox's workspace", for messages */
} seer_sandbox_fs_root_t;

/* Opens the root (its own path is trusted: it is followed). what names the tree in errors. */
int seer_sandbox_fs_open_root(seer_sandbox_fs_root_t *r, const char *path, const char *what, seer_err_t *err);
void seer_sandbox_fs_close_root(seer_sandbox_fs_root_t *r);

/* Reads rel (a regular file) into *out (malloc'd, NUL-terminated, *n bytes). At most max bytes
 * from offset; a file with more is SEER_SANDBOX_FS_ETOOBIG unless tail (then the last max bytes
 * are read and offset is ignored). *size gets the file's whole size (may be NULL). */
int seer_sandbox_fs_read(const seer_sandbox_fs_root_t *r, const char *rel, size_t max, long long offset, int tail,
                         char **out, size_t *n, long long *size, seer_err_t *err);

/* Writes data to rel atomically (temporary file + rename in the same directory; a symlink
 * or file at rel is replaced, never followed). mkdirs creates the missing parents (0755). */
int seer_sandbox_fs_write(const seer_sandbox_fs_root_t *r, const char *rel, const void *data, size_t n,
                          unsigned mode, int mkdirs, seer_err_t *err);

/* The same, but rel must not exist yet (anything there, a link included, is SEER_SANDBOX_FS_EEXIST):
 * reserves a name atomically, the content complete from the first moment it is visible. */
int seer_sandbox_fs_create(const seer_sandbox_fs_root_t *r, const char *rel, const void *data, size_t n, unsigned mode,
                           int mkdirs, seer_err_t *err);

/* The same, streaming the host file src (trusted, followed) in: no size limit, no copy in memory. */
int seer_sandbox_fs_copy_in(const seer_sandbox_fs_root_t *r, const char *rel, const char *src, unsigned mode,
                            int mkdirs, seer_err_t *err);

/* mkdir -p beneath the root (an existing symlink anywhere on the way is an error). */
int seer_sandbox_fs_mkdirs(const seer_sandbox_fs_root_t *r, const char *rel, unsigned mode, seer_err_t *err);

/* lstat of rel (a final symlink is reported, not followed); SEER_ENOTFOUND when missing. */
int seer_sandbox_fs_stat(const seer_sandbox_fs_root_t *r, const char *rel, struct stat *st, seer_err_t *err);

typedef struct seer_sandbox_fs_entry {
    char name[256];
    struct stat st; /* lstat; st_mode 0 when it vanished meanwhile */
} seer_sandbox_fs_entry_t;

/* The entries of directory rel ("" or "." for the root), without . and .., in *out
 * (malloc'd), at most max_entries (more: SEER_SANDBOX_FS_ETOOBIG). */
int seer_sandbox_fs_list(const seer_sandbox_fs_root_t *r, const char *rel, size_t max_entries,
                         seer_sandbox_fs_entry_t **out, size_t *n, seer_err_t *err);

int seer_sandbox_fs_unlink(const seer_sandbox_fs_root_t *r, const char *rel, seer_err_t *err);
int seer_sandbox_fs_rename(const seer_sandbox_fs_root_t *r, const char *from, const char *to, seer_err_t *err);
/* Creates a symlink at rel holding target (the link itself is never followed by these functions). */
int seer_sandbox_fs_symlink(const seer_sandbox_fs_root_t *r, const char *target, const char *rel, seer_err_t *err);

/* rm -rf rel beneath the root ("" removes what the root holds, not the root): symlinks are
 * removed, never followed; any depth (deep subtrees are moved up rather than recursed into). */
int seer_sandbox_fs_remove_tree(const seer_sandbox_fs_root_t *r, const char *rel, seer_err_t *err);

/* Registers the Lua functions (fs_read, fs_write, ...) in the table at the top of the stack. */
struct lua_State;
void seer_sandbox_fs_lua_register(struct lua_State *L);

#endif
