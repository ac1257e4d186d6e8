/* The sandbox's seccomp filter as a program: a small classic-BPF interpreter runs it for every
 * syscall number and ABI, so a mistake in the generated binary search (an off-by-one at a range
 * edge, a wrong jump) cannot leave a dangerous syscall open unnoticed. The attack suite
 * (tests/lua/test_attack_seccomp.lua) checks the same filter in the kernel, from inside a real
 * sandbox. */
#include <criterion/criterion.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>

#include "sandbox/sandbox.h"

#if defined(__x86_64__)

static struct sock_filter prog[4096];
static size_t prog_len;

static void build(void) {
    prog_len = seer_sandbox_seccomp_program(prog, 4096);
    cr_assert(prog_len > 0 && prog_len <= 4096, "program length %zu", prog_len);
}

/* Runs the program on one seccomp_data; returns the action word. Fails the test on anything a
 * kernel would reject (a jump out of the program, an unknown instruction, no return). */
static uint32_t run(const struct seccomp_data *d) {
    uint32_t A = 0;
    size_t pc = 0;
    for (int steps = 0; steps < 10000; steps++) {
        cr_assert(pc < prog_len, "pc %zu ran off the program (%zu instructions)", pc, prog_len);
        const struct sock_filter *f = &prog[pc];
        switch (f->code) {
        case BPF_LD | BPF_W | BPF_ABS:
            cr_assert(f->k + 4 <= sizeof *d && f->k % 4 == 0, "load at %u", f->k);
            memcpy(&A, (const char *)d + f->k, 4);
            pc++;
            break;
        case BPF_JMP | BPF_JA: pc += 1 + f->k; break;
        case BPF_JMP | BPF_JEQ | BPF_K: pc += 1 + (A == f->k ? f->jt : f->jf); break;
        case BPF_JMP | BPF_JGT | BPF_K: pc += 1 + (A > f->k ? f->jt : f->jf); break;
        case BPF_JMP | BPF_JGE | BPF_K: pc += 1 + (A >= f->k ? f->jt : f->jf); break;
        case BPF_JMP | BPF_JSET | BPF_K: pc += 1 + ((A & f->k) ? f->jt : f->jf); break;
        case BPF_RET | BPF_K: return f->k;
        default: cr_assert_fail("instruction %u at %zu is not one the filter should use", f->code, pc);
        }
    }
    cr_assert_fail("the program does not end");
    return 0;
}

static uint32_t action(uint32_t arch, int nr, uint64_t a0, uint64_t a1) {
    struct seccomp_data d;
    memset(&d, 0, sizeof d);
    d.arch = arch;
    d.nr = nr;
    d.args[0] = a0;
    d.args[1] = a1;
    return run(&d);
}

static uint32_t action4(int nr, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3) {
    struct seccomp_data d;
    memset(&d, 0, sizeof d);
    d.arch = AUDIT_ARCH_X86_64;
    d.nr = nr;
    d.args[0] = a0;
    d.args[1] = a1;
    d.args[2] = a2;
    d.args[3] = a3;
    return run(&d);
}

#define ALLOW SECCOMP_RET_ALLOW
#define DENY (SECCOMP_RET_ERRNO | EPERM)
#define NOSYS (SECCOMP_RET_ERRNO | ENOSYS)

static uint32_t native(int nr) { return action(AUDIT_ARCH_X86_64, nr, 0, 0); }

Test(seccomp, denies_the_dangerous_list) {
    build();
    static const int denied[] = {
        __NR_keyctl, __NR_add_key, __NR_request_key, __NR_bpf, __NR_userfaultfd, __NR_perf_event_open,
        425 /* io_uring_setup */, 426, 427, __NR_kexec_load, __NR_kexec_file_load, __NR_init_module,
        __NR_finit_module, __NR_delete_module, __NR_mount, __NR_umount2, __NR_pivot_root, 430 /* fsopen */, 431, 432,
        433, 429 /* move_mount */, 428 /* open_tree */, 442 /* mount_setattr */, 457 /* statmount */,
        458 /* listmount */, __NR_unshare, __NR_setns, __NR_clock_settime, __NR_clock_adjtime, __NR_settimeofday,
        __NR_adjtimex, __NR_swapon, __NR_swapoff, __NR_reboot, __NR_acct, __NR_quotactl, 443 /* quotactl_fd */,
        __NR_process_vm_readv, __NR_process_vm_writev, __NR_name_to_handle_at, __NR_open_by_handle_at,
        __NR_lookup_dcookie, __NR_syslog, __NR_vhangup, __NR_iopl, __NR_ioperm, __NR_uselib, __NR_ustat, __NR_sysfs,
        __NR__sysctl, __NR_kcmp, __NR_nfsservctl, __NR_modify_ldt, 438 /* pidfd_getfd */, 440 /* process_madvise */,
        __NR_fanotify_init, __NR_chroot, __NR_sethostname, __NR_setdomainname, __NR_mbind, __NR_set_mempolicy,
        __NR_get_mempolicy, __NR_migrate_pages, __NR_move_pages, __NR_create_module, __NR_get_kernel_syms,
        __NR_query_module, __NR_vserver, __NR_afs_syscall, __NR_tuxcall, __NR_security, __NR_getpmsg, __NR_putpmsg,
        451 /* cachestat */, 459, 460, 461 /* lsm_* */, 467 /* open_tree_attr */};
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++)
        cr_expect_eq(native(denied[i]), DENY, "syscall %d is not denied", denied[i]);
}

Test(seccomp, allows_what_the_runtime_needs) {
    build();
    static const int allowed[] = {__NR_read, __NR_write, __NR_openat, __NR_close, __NR_mmap, __NR_munmap,
                                  __NR_mprotect, __NR_madvise, __NR_futex, __NR_execve, __NR_fork, __NR_vfork,
                                  __NR_wait4, __NR_exit_group, __NR_arch_prctl, __NR_prctl, __NR_epoll_wait,
                                  __NR_eventfd2, __NR_getrandom, __NR_rseq, __NR_set_robust_list,
                                  __NR_sched_setaffinity, __NR_memfd_create, __NR_statx, __NR_seccomp,
                                  452 /* fchmodat2 */, 462 /* mseal */, __NR_restart_syscall,
                                  __NR_ptrace /* LeakSanitizer, debuggers; see seccomp.c */};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        cr_expect_eq(native(allowed[i]), ALLOW, "syscall %d is not allowed", allowed[i]);
}

Test(seccomp, every_number_gets_a_definite_answer) {
    build();
    int n_allow = 0;
    for (int nr = 0; nr <= 467; nr++) {
        uint32_t a = native(nr);
        cr_expect(a == ALLOW || a == DENY || ((nr == __NR_clone3 || nr == __NR_openat2) && a == NOSYS),
                  "syscall %d: action %#x", nr, a);
        n_allow += a == ALLOW;
    }
    /* Docker's x86_64 list is about 300; this one is narrower. */
    cr_expect(n_allow > 250 && n_allow < 330, "%d syscalls allowed", n_allow);
    for (int nr = 468; nr < 2000; nr++) cr_expect_eq(native(nr), NOSYS, "syscall %d (newer than the table)", nr);
    cr_expect_eq(native(-1), DENY);
}

Test(seccomp, other_abis_are_denied) {
    build();
    for (int nr = 0; nr < 500; nr++) {
        cr_expect_eq(action(AUDIT_ARCH_I386, nr, 0, 0), DENY, "i386 syscall %d", nr);
        cr_expect_eq(action(AUDIT_ARCH_X86_64, (int)(0x40000000u | (unsigned)nr), 0, 0), DENY, "x32 syscall %d", nr);
    }
    cr_expect_eq(action(AUDIT_ARCH_AARCH64, __NR_read, 0, 0), DENY);
}

Test(seccomp, argument_checks) {
    build();
    /* clone: plain threads and processes, never a namespace flag */
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_clone, 0x3d0f00 /* glibc pthread_create */, 0), ALLOW);
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_clone, 0x01200011 /* fork */, 0), ALLOW);
    static const uint32_t ns[] = {0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_clone, ns[i] | 17, 0), DENY, "clone flag %#x", ns[i]);
    cr_expect_eq(native(__NR_clone3), NOSYS);
    /* personality: PER_LINUX and the query only */
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_personality, 0, 0), ALLOW);
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_personality, 0xffffffffu, 0), ALLOW);
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_personality, 0x0040000, 0), DENY);
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_personality, 0x0008, 0), DENY);
    /* the kernel reads an unsigned int: high bits do not change the answer */
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_personality, 0x100000000ull, 0), ALLOW);
    /* socket families */
    static const uint32_t ok_families[] = {1, 2, 10, 16};
    for (size_t i = 0; i < 4; i++) cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_socket, ok_families[i], 0), ALLOW);
    for (uint32_t fam = 0; fam < 64; fam++)
        if (fam != 1 && fam != 2 && fam != 10 && fam != 16)
            cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_socket, fam, 0), DENY, "family %u", fam);
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_socketpair, 1, 0), ALLOW);
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_socketpair, 30, 0), DENY);
    /* ioctl: everything but terminal injection */
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_ioctl, 3, 0xc0104608 /* an nvidia-style request */), ALLOW);
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_ioctl, 0, 0x5412), DENY);
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_ioctl, 0, 0x541C), DENY);
    cr_expect_eq(action(AUDIT_ARCH_X86_64, __NR_ioctl, 0, 0xffffffff00005412ull), DENY);
}

Test(seccomp, no_setuid_or_setgid_file) {
    build();
    /* the mode argument of each call that sets one; its other arguments are 0 */
    static const struct {
        int nr, mode_arg;
    } calls[] = {{__NR_chmod, 1}, {__NR_fchmod, 1}, {__NR_fchmodat, 2}, {452 /* fchmodat2 */, 2},
                 {__NR_creat, 1}, {__NR_mknod, 1},  {__NR_mknodat, 2}};
    static const uint64_t ok[] = {0, 0755, 0644, 0777, 01777, 0100755 /* S_IFREG */, 0010644 /* S_IFIFO */};
    static const uint64_t bad[] = {04755, 02755, 06755, 04000, 02000, 0104755, 0x100000000ull | 04755};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        uint64_t a[4] = {0};
        for (size_t j = 0; j < sizeof ok / sizeof ok[0]; j++) {
            a[calls[i].mode_arg] = ok[j];
            cr_expect_eq(action4(calls[i].nr, a[0], a[1], a[2], a[3]), ALLOW, "syscall %d mode %#llo", calls[i].nr,
                         (unsigned long long)ok[j]);
        }
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
            a[calls[i].mode_arg] = bad[j];
            cr_expect_eq(action4(calls[i].nr, a[0], a[1], a[2], a[3]), DENY, "syscall %d mode %#llo", calls[i].nr,
                         (unsigned long long)bad[j]);
        }
    }
    /* open(path, flags, mode), openat(dfd, path, flags, mode): the mode counts only with O_CREAT
     * (0100) or O_TMPFILE (020200000) */
    cr_expect_eq(action4(__NR_open, 0, 0101 /* O_CREAT|O_WRONLY */, 0644, 0), ALLOW);
    cr_expect_eq(action4(__NR_open, 0, 0101, 04755, 0), DENY);
    cr_expect_eq(action4(__NR_open, 0, 0101, 02755, 0), DENY);
    cr_expect_eq(action4(__NR_open, 0, 020200002 /* O_TMPFILE|O_RDWR */, 04755, 0), DENY);
    cr_expect_eq(action4(__NR_open, 0, 0 /* O_RDONLY: the mode is ignored */, 04755, 0), ALLOW);
    cr_expect_eq(action4(__NR_openat, 0, 0, 0101, 0644), ALLOW);
    cr_expect_eq(action4(__NR_openat, 0, 0, 0101, 04755), DENY);
    cr_expect_eq(action4(__NR_openat, 0, 0, 0301 /* |O_EXCL */, 06700), DENY);
    cr_expect_eq(action4(__NR_openat, 0, 0, 020200002, 02755), DENY);
    cr_expect_eq(action4(__NR_openat, 0, 0, 02000000 /* O_CLOEXEC */, 04755), ALLOW);
    cr_expect_eq(action4(__NR_openat, 0, 0, 0101, 0x100000000ull | 04000), DENY);
    /* openat2's flags and mode are in memory: ENOSYS, so callers fall back to openat */
    cr_expect_eq(native(__NR_openat2), NOSYS);
    /* mkdir keeps only 01777 of its mode in the kernel: not checked */
    cr_expect_eq(action4(__NR_mkdir, 0, 02755, 0, 0), ALLOW);
    cr_expect_eq(action4(__NR_mkdirat, 0, 0, 02755, 0), ALLOW);
}

#else

Test(seccomp, not_built_here) {
    cr_skip_test("the seccomp filter is x86_64 only");
}

#endif
