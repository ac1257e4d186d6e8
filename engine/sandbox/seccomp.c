/* The kernel-facing half of the sandbox: a seccomp filter (an allow-list at least as strict as
 * Docker's default profile), a fresh session keyring, and no-new-privileges. sandboxd installs
 * it on itself before it runs anything (lua/seer/cli/sandboxd.lua), so every process in the
 * sandbox inherits it and none can remove it. The filter is classic BPF written by hand (no
 * libseccomp): the arch check, the x32 check, a few argument checks, then a binary search over
 * the allowed syscall numbers compressed into ranges. docs/sandbox.md ("System calls") lists
 * what is denied and why. */
#include "sandbox.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)

/* Syscalls newer than the kernel headers this builds against (the numbers are the ABI). */
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif
#ifndef __NR_map_shadow_stack
#define __NR_map_shadow_stack 453
#endif
#ifndef __NR_futex_wake
#define __NR_futex_wake 454
#endif
#ifndef __NR_futex_wait
#define __NR_futex_wait 455
#endif
#ifndef __NR_futex_requeue
#define __NR_futex_requeue 456
#endif
#ifndef __NR_mseal
#define __NR_mseal 462
#endif
#ifndef __NR_uretprobe
#define __NR_uretprobe 335
#endif

/* Everything at or below this number is known to this table: a denied one gets EPERM. Above
 * it (syscalls added to kernels after this was written) the answer is ENOSYS, as runc does,
 * so a newer libc that tries a new syscall first falls back to an older one. */
#define SEER_SECCOMP_MAX_KNOWN 467

#define X32_SYSCALL_BIT 0x40000000u

/* Allowed without conditions. Docker's default list (x86_64 names) minus what seer's sandbox
 * does not need and the kernel has had bugs in: io_uring_*, process_vm_readv/writev,
 * name_to_handle_at, adjtimex, clock_adjtime, modify_ldt. Conditional ones (clone, clone3,
 * personality, socket, socketpair, ioctl; and the calls that set a file's mode: open, openat,
 * creat, mknod, mknodat, chmod, fchmod, fchmodat, fchmodat2, openat2) are checked separately.
 * ptrace stays, as in Docker: since Linux 4.8 the filter is checked again after a tracer
 * changes a syscall, so tracing gains nothing over the tracee's own filter; every process
 * inside is filtered (sandboxd is pid 1) and sandboxd is not dumpable, so nothing unfiltered or
 * trusted can be attached; and LeakSanitizer (make asan) and debuggers need it. */
static const int allowed[] = {
    __NR_read, __NR_write, __NR_close, __NR_stat, __NR_fstat, __NR_lstat, __NR_poll,
    __NR_lseek, __NR_mmap, __NR_mprotect, __NR_munmap, __NR_brk, __NR_rt_sigaction,
    __NR_rt_sigprocmask, __NR_rt_sigreturn, __NR_pread64, __NR_pwrite64, __NR_readv, __NR_writev,
    __NR_access, __NR_pipe, __NR_select, __NR_sched_yield, __NR_mremap, __NR_msync, __NR_mincore,
    __NR_madvise, __NR_shmget, __NR_shmat, __NR_shmctl, __NR_dup, __NR_dup2, __NR_pause,
    __NR_nanosleep, __NR_getitimer, __NR_alarm, __NR_setitimer, __NR_getpid, __NR_sendfile,
    __NR_connect, __NR_accept, __NR_sendto, __NR_recvfrom, __NR_sendmsg, __NR_recvmsg,
    __NR_shutdown, __NR_bind, __NR_listen, __NR_getsockname, __NR_getpeername, __NR_setsockopt,
    __NR_getsockopt, __NR_fork, __NR_vfork, __NR_execve, __NR_exit, __NR_wait4, __NR_kill,
    __NR_uname, __NR_semget, __NR_semop, __NR_semctl, __NR_shmdt, __NR_msgget, __NR_msgsnd,
    __NR_msgrcv, __NR_msgctl, __NR_fcntl, __NR_flock, __NR_fsync, __NR_fdatasync, __NR_truncate,
    __NR_ftruncate, __NR_getdents, __NR_getcwd, __NR_chdir, __NR_fchdir, __NR_rename, __NR_mkdir,
    __NR_rmdir, __NR_link, __NR_unlink, __NR_symlink, __NR_readlink, __NR_chown, __NR_fchown,
    __NR_lchown, __NR_umask, __NR_gettimeofday,
    __NR_getrlimit, __NR_getrusage, __NR_sysinfo, __NR_times, __NR_getuid, __NR_getgid,
    __NR_setuid, __NR_setgid, __NR_geteuid, __NR_getegid, __NR_setpgid, __NR_getppid,
    __NR_getpgrp, __NR_setsid, __NR_setreuid, __NR_setregid, __NR_getgroups, __NR_setgroups,
    __NR_setresuid, __NR_getresuid, __NR_setresgid, __NR_getresgid, __NR_getpgid,
    __NR_setfsuid, __NR_setfsgid, __NR_getsid, __NR_capget, __NR_capset, __NR_rt_sigpending,
    __NR_rt_sigtimedwait, __NR_rt_sigqueueinfo, __NR_rt_sigsuspend, __NR_sigaltstack,
    __NR_utime, __NR_statfs, __NR_fstatfs, __NR_getpriority, __NR_setpriority,
    __NR_sched_setparam, __NR_sched_getparam, __NR_sched_setscheduler, __NR_sched_getscheduler,
    __NR_sched_get_priority_max, __NR_sched_get_priority_min, __NR_sched_rr_get_interval,
    __NR_mlock, __NR_munlock, __NR_mlockall, __NR_munlockall, __NR_prctl, __NR_arch_prctl,
    __NR_setrlimit, __NR_sync, __NR_gettid, __NR_readahead, __NR_setxattr, __NR_lsetxattr,
    __NR_fsetxattr, __NR_getxattr, __NR_lgetxattr, __NR_fgetxattr, __NR_listxattr,
    __NR_llistxattr, __NR_flistxattr, __NR_removexattr, __NR_lremovexattr, __NR_fremovexattr,
    __NR_tkill, __NR_time, __NR_futex, __NR_ptrace, __NR_sched_setaffinity, __NR_sched_getaffinity,
    __NR_set_thread_area, __NR_io_setup, __NR_io_destroy, __NR_io_getevents, __NR_io_submit,
    __NR_io_cancel, __NR_get_thread_area, __NR_epoll_create, __NR_epoll_ctl_old,
    __NR_epoll_wait_old, __NR_remap_file_pages, __NR_getdents64, __NR_set_tid_address,
    __NR_restart_syscall, __NR_semtimedop, __NR_fadvise64, __NR_timer_create,
    __NR_timer_settime, __NR_timer_gettime, __NR_timer_getoverrun, __NR_timer_delete,
    __NR_clock_gettime, __NR_clock_getres, __NR_clock_nanosleep, __NR_exit_group,
    __NR_epoll_wait, __NR_epoll_ctl, __NR_tgkill, __NR_utimes, __NR_mq_open, __NR_mq_unlink,
    __NR_mq_timedsend, __NR_mq_timedreceive, __NR_mq_notify, __NR_mq_getsetattr, __NR_waitid,
    __NR_ioprio_set, __NR_ioprio_get, __NR_inotify_init, __NR_inotify_add_watch,
    __NR_inotify_rm_watch, __NR_mkdirat, __NR_fchownat,
    __NR_futimesat, __NR_newfstatat, __NR_unlinkat, __NR_renameat, __NR_linkat, __NR_symlinkat,
    __NR_readlinkat, __NR_faccessat, __NR_pselect6, __NR_ppoll,
    __NR_set_robust_list, __NR_get_robust_list, __NR_splice, __NR_tee, __NR_sync_file_range,
    __NR_vmsplice, __NR_utimensat, __NR_epoll_pwait, __NR_signalfd, __NR_timerfd_create,
    __NR_eventfd, __NR_fallocate, __NR_timerfd_settime, __NR_timerfd_gettime, __NR_accept4,
    __NR_signalfd4, __NR_eventfd2, __NR_epoll_create1, __NR_dup3, __NR_pipe2, __NR_inotify_init1,
    __NR_preadv, __NR_pwritev, __NR_rt_tgsigqueueinfo, __NR_recvmmsg, __NR_fanotify_mark,
    __NR_prlimit64, __NR_syncfs, __NR_sendmmsg, __NR_getcpu, __NR_sched_setattr,
    __NR_sched_getattr, __NR_renameat2, __NR_seccomp, __NR_getrandom, __NR_memfd_create,
    __NR_execveat, __NR_membarrier, __NR_mlock2, __NR_copy_file_range, __NR_preadv2,
    __NR_pwritev2, __NR_pkey_mprotect, __NR_pkey_alloc, __NR_pkey_free, __NR_statx,
    __NR_io_pgetevents, __NR_rseq, __NR_pidfd_send_signal, __NR_pidfd_open, __NR_close_range,
    __NR_faccessat2, __NR_process_mrelease, __NR_epoll_pwait2,
    __NR_landlock_create_ruleset, __NR_landlock_add_rule, __NR_landlock_restrict_self,
    __NR_memfd_secret, __NR_futex_waitv, __NR_uretprobe, __NR_map_shadow_stack,
    __NR_futex_wake, __NR_futex_wait, __NR_futex_requeue, __NR_mseal,
};

/* The namespace flags of clone(2); CLONE_NEWTIME (0x80) is not among them because clone()'s
 * low byte is the exit signal (a new time namespace needs clone3 or unshare, both denied). */
#define CLONE_NAMESPACE_FLAGS 0x7E020000u

#define ARG_LO(i) (offsetof(struct seccomp_data, args) + (i) * sizeof(uint64_t)) /* little endian */

typedef struct prog {
    struct sock_filter *f;
    size_t n, cap;
} prog_t;

static void emit(prog_t *p, uint16_t code, uint8_t jt, uint8_t jf, uint32_t k) {
    if (p->n < p->cap) p->f[p->n] = (struct sock_filter){code, jt, jf, k};
    p->n++;
}

#define RET_ALLOW SECCOMP_RET_ALLOW
#define RET_ERRNO(e) (SECCOMP_RET_ERRNO | ((uint32_t)(e) & SECCOMP_RET_DATA))

typedef struct range {
    uint32_t lo, hi;
} range_t;

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* A binary search over ranges[a..b] of allowed numbers (the syscall number in A): log2 of the
 * number of ranges comparisons, then allow or EPERM. Far jumps go through BPF_JA (32-bit). */
static void emit_tree(prog_t *p, const range_t *r, size_t a, size_t b) {
    if (a == b) {
        if (r[a].lo == r[a].hi) {
            emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 1, r[a].lo);
        } else {
            emit(p, BPF_JMP | BPF_JGE | BPF_K, 0, 2, r[a].lo);
            emit(p, BPF_JMP | BPF_JGT | BPF_K, 1, 0, r[a].hi);
        }
        emit(p, BPF_RET | BPF_K, 0, 0, RET_ALLOW);
        emit(p, BPF_RET | BPF_K, 0, 0, RET_ERRNO(EPERM));
        return;
    }
    size_t mid = (a + b + 1) / 2;
    emit(p, BPF_JMP | BPF_JGE | BPF_K, 0, 1, r[mid].lo);
    size_t ja = p->n;
    emit(p, BPF_JMP | BPF_JA, 0, 0, 0);
    emit_tree(p, r, a, mid - 1);
    if (ja < p->cap) p->f[ja].k = (uint32_t)(p->n - ja - 1);
    emit_tree(p, r, mid, b);
}

/* A block for one syscall number: `JEQ nr, else skip the block`. Returns the index of the
 * JEQ so the caller patches its skip once the block is written. */
static size_t block_start(prog_t *p, uint32_t nr) {
    emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, nr);
    return p->n - 1;
}

static void block_end(prog_t *p, size_t at) {
    size_t len = p->n - at - 1;
    if (at < p->cap) p->f[at].jf = (uint8_t)len; /* blocks are short (< 16 instructions) */
}

/* Allows the syscall when the low 32 bits of argument `arg` equal one of vals; EPERM otherwise. */
static void emit_arg_in(prog_t *p, uint32_t nr, int arg, const uint32_t *vals, size_t nvals) {
    size_t at = block_start(p, nr);
    emit(p, BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)ARG_LO(arg));
    for (size_t i = 0; i < nvals; i++)
        emit(p, BPF_JMP | BPF_JEQ | BPF_K, (uint8_t)(nvals - i), 0, vals[i]);
    emit(p, BPF_RET | BPF_K, 0, 0, RET_ERRNO(EPERM));
    emit(p, BPF_RET | BPF_K, 0, 0, RET_ALLOW);
    block_end(p, at);
}

/* S_ISUID | S_ISGID: the bits that make running a file take its owner's user or group. */
#define SETID_BITS 06000u
/* O_CREAT and __O_TMPFILE (O_TMPFILE is __O_TMPFILE | O_DIRECTORY): the open flags under which
 * the kernel reads the mode argument; without them it is ignored (and may be anything). */
#define OPEN_MODE_FLAGS (0100u | 020000000u)

/* EPERM when the mode in argument `mode_arg` has S_ISUID or S_ISGID; allowed otherwise. Every
 * one of these calls takes a umode_t (16 bits), so the low 32 bits hold all the kernel reads. */
static void emit_no_setid(prog_t *p, uint32_t nr, int mode_arg) {
    size_t at = block_start(p, nr);
    emit(p, BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)ARG_LO(mode_arg));
    emit(p, BPF_JMP | BPF_JSET | BPF_K, 0, 1, SETID_BITS);
    emit(p, BPF_RET | BPF_K, 0, 0, RET_ERRNO(EPERM));
    emit(p, BPF_RET | BPF_K, 0, 0, RET_ALLOW);
    block_end(p, at);
}

/* The same for an open: the mode is checked only when the flags (an int) create a file. */
static void emit_no_setid_open(prog_t *p, uint32_t nr, int flags_arg, int mode_arg) {
    size_t at = block_start(p, nr);
    emit(p, BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)ARG_LO(flags_arg));
    emit(p, BPF_JMP | BPF_JSET | BPF_K, 0, 3, OPEN_MODE_FLAGS);
    emit(p, BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)ARG_LO(mode_arg));
    emit(p, BPF_JMP | BPF_JSET | BPF_K, 0, 1, SETID_BITS);
    emit(p, BPF_RET | BPF_K, 0, 0, RET_ERRNO(EPERM));
    emit(p, BPF_RET | BPF_K, 0, 0, RET_ALLOW);
    block_end(p, at);
}

/* Builds the filter into out[0..cap) and returns its length (which may exceed cap: call again
 * with more room). */
size_t seer_sandbox_seccomp_program(struct sock_filter *out, size_t cap) {
    prog_t p = {out, 0, cap};
    /* Only the native ABI: i386 (int 0x80, sysenter) has its own numbers and would pass a
     * 64-bit number check, and x32 shares the x86_64 arch with bit 30 set in the number. */
    emit(&p, BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)offsetof(struct seccomp_data, arch));
    emit(&p, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, AUDIT_ARCH_X86_64);
    emit(&p, BPF_RET | BPF_K, 0, 0, RET_ERRNO(EPERM));
    emit(&p, BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)offsetof(struct seccomp_data, nr));
    emit(&p, BPF_JMP | BPF_JGE | BPF_K, 0, 1, X32_SYSCALL_BIT);
    emit(&p, BPF_RET | BPF_K, 0, 0, RET_ERRNO(EPERM));

    /* clone: threads and processes yes, new namespaces no. */
    size_t at = block_start(&p, __NR_clone);
    emit(&p, BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)ARG_LO(0));
    emit(&p, BPF_JMP | BPF_JSET | BPF_K, 0, 1, CLONE_NAMESPACE_FLAGS);
    emit(&p, BPF_RET | BPF_K, 0, 0, RET_ERRNO(EPERM));
    emit(&p, BPF_RET | BPF_K, 0, 0, RET_ALLOW);
    block_end(&p, at);
    /* clone3 passes its flags in memory, which a filter cannot read: ENOSYS makes glibc fall
     * back to clone, whose flags are checked above (what Docker does). */
    at = block_start(&p, __NR_clone3);
    emit(&p, BPF_RET | BPF_K, 0, 0, RET_ERRNO(ENOSYS));
    block_end(&p, at);
    /* personality: the default persona (PER_LINUX) and the query (0xffffffff) only; the others
     * turn off ASLR (ADDR_NO_RANDOMIZE), map page 0 (MMAP_PAGE_ZERO) or fake the kernel version. */
    static const uint32_t persona[] = {0, 0xffffffffu};
    emit_arg_in(&p, __NR_personality, 0, persona, 2);
    /* Socket families: local, IP and netlink (ZMQ, git, HTTP, getifaddrs); not the dozens of
     * rarely used protocol families (AF_ALG, AF_VSOCK, AF_TIPC, AF_RDS, ...) that make up much of
     * the kernel's network attack surface. */
    static const uint32_t families[] = {1 /* AF_UNIX */, 2 /* AF_INET */, 10 /* AF_INET6 */, 16 /* AF_NETLINK */};
    emit_arg_in(&p, __NR_socket, 0, families, 4);
    static const uint32_t unix_only[] = {1};
    emit_arg_in(&p, __NR_socketpair, 0, unix_only, 1);
    /* ioctl: all requests (the GPU driver talks through ioctl on /dev/nvidia*) except the two
     * that push input into a terminal (TIOCSTI, TIOCLINUX). */
    at = block_start(&p, __NR_ioctl);
    emit(&p, BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)ARG_LO(1));
    emit(&p, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 0x5412 /* TIOCSTI */);
    emit(&p, BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0x541C /* TIOCLINUX */);
    emit(&p, BPF_RET | BPF_K, 0, 0, RET_ERRNO(EPERM));
    emit(&p, BPF_RET | BPF_K, 0, 0, RET_ALLOW);
    block_end(&p, at);

    /* No setuid or setgid file. The sandbox's user is mapped to the uid that started seer, so
     * run as root everything it creates in the workspace (a host folder) is owned by host root:
     * `cp /bin/sh x; chmod 4755 x` left a setuid-root shell on the host for anyone who runs or
     * copies it (found by a probe). The filter cannot see whether a path is a file or a
     * directory, so the bits are refused on both: inside the sandbox a setgid directory changes
     * nothing (every file it makes already has the sandbox's one group). mkdir and mkdirat are
     * not checked: the kernel keeps only 01777 of their mode (a directory gets S_ISGID only from
     * a setgid parent). File capabilities (setxattr "security.capability") need CAP_SETFCAP,
     * which nothing in the sandbox has; the kernel refuses them (EPERM). */
    emit_no_setid(&p, __NR_chmod, 1);
    emit_no_setid(&p, __NR_fchmod, 1);
    emit_no_setid(&p, __NR_fchmodat, 2);
    emit_no_setid(&p, __NR_fchmodat2, 2);
    emit_no_setid_open(&p, __NR_openat, 2, 3);
    emit_no_setid_open(&p, __NR_open, 1, 2);
    emit_no_setid(&p, __NR_creat, 1);
    /* mknod makes regular files too (S_IFREG or no type: mknod(path, 04755, 0)) */
    emit_no_setid(&p, __NR_mknod, 1);
    emit_no_setid(&p, __NR_mknodat, 2);
    /* openat2 passes flags and mode in a struct a filter cannot read: ENOSYS, so callers fall
     * back to openat as on kernels before 5.6 (glibc's open never uses it). */
    at = block_start(&p, __NR_openat2);
    emit(&p, BPF_RET | BPF_K, 0, 0, RET_ERRNO(ENOSYS));
    block_end(&p, at);

    emit(&p, BPF_JMP | BPF_JGT | BPF_K, 0, 1, SEER_SECCOMP_MAX_KNOWN);
    emit(&p, BPF_RET | BPF_K, 0, 0, RET_ERRNO(ENOSYS));

    int nums[sizeof allowed / sizeof allowed[0]];
    size_t n = sizeof allowed / sizeof allowed[0];
    memcpy(nums, allowed, sizeof nums);
    qsort(nums, n, sizeof nums[0], cmp_int);
    range_t ranges[sizeof allowed / sizeof allowed[0]];
    size_t nr = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)nums[i];
        if (nr && (v == ranges[nr - 1].hi || v == ranges[nr - 1].hi + 1)) ranges[nr - 1].hi = v;
        else ranges[nr++] = (range_t){v, v};
    }
    emit_tree(&p, ranges, 0, nr - 1);
    return p.n;
}

int seer_sandbox_seccomp_install(seer_err_t *err) {
    struct sock_filter buf[1024];
    size_t n = seer_sandbox_seccomp_program(buf, sizeof buf / sizeof buf[0]);
    if (n > sizeof buf / sizeof buf[0])
        return seer_err_set(err, SEER_EINVAL, "the seccomp filter has %zu instructions, more than its buffer", n);
    struct sock_fprog prog = {(unsigned short)n, buf};
    /* Without no_new_privs an unprivileged process may not install a filter; with it, nothing
     * run later (setuid binaries included) gains privileges the filter was written against. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return seer_err_set(err, SEER_EIO, "prctl(PR_SET_NO_NEW_PRIVS): %s", strerror(errno));
    /* TSYNC: every thread of this process (LuaJIT's, libzmq's, the thread pool's) gets the
     * filter, not only the calling one. */
    if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0)
        return seer_err_set(err, SEER_EIO,
                            "cannot install the sandbox's seccomp filter: %s (the kernel needs CONFIG_SECCOMP_FILTER)",
                            strerror(errno));
    return SEER_OK;
}

#else /* not x86_64 */

size_t seer_sandbox_seccomp_program(struct sock_filter *out, size_t cap) {
    (void)out;
    (void)cap;
    return 0;
}

int seer_sandbox_seccomp_install(seer_err_t *err) {
    return seer_err_set(err, SEER_EUNSUPPORTED,
                        "seer's seccomp filter is written for x86_64 only; this machine's architecture has none, "
                        "and sandboxes refuse to run without one");
}

#endif

int seer_sandbox_keyring_new_session(seer_err_t *err) {
    /* KEYCTL_JOIN_SESSION_KEYRING with no name: a new anonymous session keyring, so keys the
     * researcher's session holds (credentials, tickets) are not possessed by anything here. */
    long id = syscall(__NR_keyctl, 1 /* KEYCTL_JOIN_SESSION_KEYRING */, (const char *)NULL);
    /* ENOSYS: a kernel without keyrings; EPERM: keyctl is already denied by a filter seer runs
     * under (Docker's default profile denies it), which this process and its children keep. In
     * both cases nothing here can reach a keyring through keyctl. */
    if (id < 0 && (errno == ENOSYS || errno == EPERM)) return SEER_OK;
    if (id < 0)
        return seer_err_set(err, SEER_EIO, "cannot join a new session keyring: %s", strerror(errno));
    return SEER_OK;
}
