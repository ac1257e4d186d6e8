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
    const char *const *remove_dirs; /* also removed (with state_dir) when the owner died; may be NULL */
    const char *disk_image;        /* limits.disk: an image mounted on state_dir; when the owner
                                      died, state_dir is unmounted and the image removed too */
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

#endif
