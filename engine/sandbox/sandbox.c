/* cgroups, the keeper and sandboxd's child processes (see sandbox.h for the process tree).
 * Everything the keeper does after fork is async-signal-safe (the owner has other threads:
 * libzmq's, the thread pool's), so it uses raw syscalls and hand-rolled formatting only. */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------
 * async-signal-safe helpers */

static size_t s_len(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

/* Appends src to dst (capacity cap) and returns the new length; stops at the capacity. */
static size_t s_cat(char *dst, size_t len, size_t cap, const char *src) {
    while (*src && len + 1 < cap) dst[len++] = *src++;
    dst[len] = 0;
    return len;
}

static size_t s_cat_long(char *dst, size_t len, size_t cap, long long v) {
    char tmp[24];
    int n = 0, neg = v < 0;
    unsigned long long u = neg ? (unsigned long long)(-(v + 1)) + 1 : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (neg && len + 1 < cap) dst[len++] = '-';
    while (n && len + 1 < cap) dst[len++] = tmp[--n];
    dst[len] = 0;
    return len;
}

static void s_write_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static int write_file_str(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = s_len(text);
    ssize_t w = write(fd, text, n);
    int e = errno;
    close(fd);
    if (w != (ssize_t)n) {
        errno = w < 0 ? e : EIO;
        return -1;
    }
    return 0;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Kills every pid listed in dir/cgroup.procs; returns how many were listed (-1: unreadable). */
static int cgroup_kill_listed(const char *dir) {
    char path[600];
    size_t n = s_cat(path, 0, sizeof path, dir);
    s_cat(path, n, sizeof path, "/cgroup.procs");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[4096];
    int count = 0;
    long pid = 0;
    int in_num = 0;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; i++) {
            if (buf[i] >= '0' && buf[i] <= '9') {
                pid = pid * 10 + (buf[i] - '0');
                in_num = 1;
            } else if (in_num) {
                if (pid > 1) kill((pid_t)pid, SIGKILL);
                count++;
                pid = 0;
                in_num = 0;
            }
        }
    }
    if (in_num) {
        if (pid > 1) kill((pid_t)pid, SIGKILL);
        count++;
    }
    close(fd);
    return count;
}

int seer_sandbox_cgroup_destroy(const seer_sandbox_cgroup_t *cg, int timeout_ms) {
    if (!cg) return SEER_OK;
    const char *dirs[2] = {cg->memory, cg->pids};
    long long deadline = now_ms() + timeout_ms;
    int rc = SEER_OK;
    for (int i = 0; i < 2; i++) {
        if (!dirs[i][0]) continue;
        for (;;) {
            int listed = cgroup_kill_listed(dirs[i]);
            if (listed < 0) break; /* gone already */
            if (listed == 0 && (rmdir(dirs[i]) == 0 || errno == ENOENT)) break;
            if (now_ms() > deadline) {
                rc = SEER_SANDBOX_EBUSY;
                break;
            }
            sleep_ms(5);
        }
    }
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * cgroups */

static void note(char *notes, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(char *notes, size_t size, const char *fmt, ...) {
    if (!notes || !size) return;
    size_t len = strlen(notes);
    if (len + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(notes + len, size - len, fmt, ap);
    va_end(ap);
    len = strlen(notes);
    if (len + 1 < size) {
        notes[len] = '\n';
        notes[len + 1] = 0;
    }
}

/* This process's path in the v1 hierarchy that has `controller`, from /proc/self/cgroup. */
static int own_cgroup_path(const char *controller, char *out, size_t size) {
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f) return -1;
    char line[1024];
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        char *a = strchr(line, ':');
        char *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) continue;
        *b = 0;
        /* the middle field is a comma-separated controller list */
        char *list = a + 1, *save = NULL;
        for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (strcmp(tok, controller) == 0) {
                char *p = b + 1;
                p[strcspn(p, "\n")] = 0;
                snprintf(out, size, "%s", strcmp(p, "/") == 0 ? "" : p);
                found = 0;
            }
        }
        if (found == 0) break;
    }
    fclose(f);
    return found;
}

static int make_cgroup(const char *controller, const char *probe, const char *name, char *dir, size_t size,
                       char *notes, size_t notes_size) {
    char own[400], base[512], check[700];
    snprintf(base, sizeof base, "/sys/fs/cgroup/%s", controller);
    snprintf(check, sizeof check, "%s/%s", base, probe);
    if (access(check, F_OK) != 0) {
        note(notes, notes_size, "no cgroup v1 %s controller at %s", controller, base);
        return -1;
    }
    if (own_cgroup_path(controller, own, sizeof own) != 0) {
        note(notes, notes_size, "this process is in no %s cgroup (/proc/self/cgroup)", controller);
        return -1;
    }
    int n = snprintf(dir, size, "%s%s/seer-%s", base, own, name);
    if (n < 0 || (size_t)n >= size) {
        note(notes, notes_size, "the %s cgroup path is too long", controller);
        dir[0] = 0;
        return -1;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        note(notes, notes_size, "cannot create the %s cgroup %s: %s", controller, dir, strerror(errno));
        dir[0] = 0;
        return -1;
    }
    return 0;
}

static int set_value(const char *dir, const char *file, const char *value, char *notes, size_t notes_size) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (write_file_str(path, value) != 0) {
        note(notes, notes_size, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int seer_sandbox_cgroup_create(const char *name, unsigned long long memory_bytes, long pids_max,
                               seer_sandbox_cgroup_t *cg, char *notes, size_t notes_size, seer_err_t *err) {
    memset(cg, 0, sizeof *cg);
    if (notes && notes_size) notes[0] = 0;
    if (!name || !*name || name[0] == '.' || strlen(name) > 100)
        return seer_err_set(err, SEER_EINVAL, "sandbox cgroup name '%s' is not valid", name ? name : "");
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_' || *p == '.'))
            return seer_err_set(err, SEER_EINVAL, "sandbox cgroup name '%s' may use only letters, digits, '-', '_', '.'", name);

    char v[32];
    if (make_cgroup("memory", "memory.limit_in_bytes", name, cg->memory, sizeof cg->memory, notes, notes_size) == 0 &&
        memory_bytes) {
        snprintf(v, sizeof v, "%llu", memory_bytes);
        if (set_value(cg->memory, "memory.limit_in_bytes", v, notes, notes_size) != 0) {
            rmdir(cg->memory);
            cg->memory[0] = 0;
        } else {
            /* with swap accounting, swap counts too (otherwise a bomb swaps instead of dying) */
            char p[700];
            snprintf(p, sizeof p, "%s/memory.memsw.limit_in_bytes", cg->memory);
            if (access(p, F_OK) == 0) write_file_str(p, v);
        }
    }
    if (make_cgroup("pids", "cgroup.procs", name, cg->pids, sizeof cg->pids, notes, notes_size) == 0 && pids_max > 0) {
        snprintf(v, sizeof v, "%ld", pids_max);
        if (set_value(cg->pids, "pids.max", v, notes, notes_size) != 0) {
            rmdir(cg->pids);
            cg->pids[0] = 0;
        }
    }
    return SEER_OK;
}

static long long read_ll(const char *dir, const char *file) {
    char path[700], buf[64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    if (strncmp(buf, "max", 3) == 0) return -1;
    return strtoll(buf, NULL, 10);
}

/* "key value" lines (memory.oom_control, pids.events). */
static long read_keyed(const char *dir, const char *file, const char *key) {
    char path[700], line[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ') v = strtol(line + kl + 1, NULL, 10);
    fclose(f);
    return v;
}

void seer_sandbox_cgroup_stats(const seer_sandbox_cgroup_t *cg, seer_sandbox_cgroup_stats_t *st) {
    memset(st, 0, sizeof *st);
    st->memory_failcnt = st->oom_kills = st->pids_max_hits = st->pids_current = -1;
    if (cg->memory[0]) {
        long long lim = read_ll(cg->memory, "memory.limit_in_bytes");
        long long peak = read_ll(cg->memory, "memory.max_usage_in_bytes");
        st->memory_limit = lim > 0 ? (unsigned long long)lim : 0;
        st->memory_peak = peak > 0 ? (unsigned long long)peak : 0;
        st->memory_failcnt = (long)read_ll(cg->memory, "memory.failcnt");
        st->oom_kills = read_keyed(cg->memory, "memory.oom_control", "oom_kill");
    }
    if (cg->pids[0]) {
        st->pids_max_hits = read_keyed(cg->pids, "pids.events", "max");
        st->pids_current = (long)read_ll(cg->pids, "pids.current");
    }
}

/* ------------------------------------------------------------------------------------------
 * limits shared by the keeper's child and sandboxd's children (async-signal-safe) */

/* The bit a spawned child sets in the errno it reports when its limits, not its exec, failed. */
#define SEER_SPAWN_RLIMIT 0x40000000
/* Returns 0, or the name of the limit that could not be set (errno tells why): a limit that
 * does not take must not pass for one that does. Raising a hard limit needs a privilege
 * (EPERM: open files above `ulimit -Hn`), so the Lua side checks what it asks for first
 * (lua/seer/sandbox.lua, Sandbox:_limits); this is the backstop. */
static const char *apply_rlimits(const seer_sandbox_rlimits_t *r) {
    struct rlimit rl;
    if (r->cpu_seconds > 0) {
        rl.rlim_cur = (rlim_t)r->cpu_seconds;
        rl.rlim_max = (rlim_t)r->cpu_seconds + 1; /* SIGXCPU first, SIGKILL a second later */
        if (setrlimit(RLIMIT_CPU, &rl) != 0) return "cpu_seconds";
    }
    if (r->open_files > 0) {
        rl.rlim_cur = rl.rlim_max = (rlim_t)r->open_files;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return "open_files";
    }
    if (r->address_space > 0) {
        rl.rlim_cur = rl.rlim_max = (rlim_t)r->address_space;
        if (setrlimit(RLIMIT_AS, &rl) != 0) return "memory (RLIMIT_AS)";
    }
    if (r->processes > 0) {
        rl.rlim_cur = rl.rlim_max = (rlim_t)r->processes;
        if (setrlimit(RLIMIT_NPROC, &rl) != 0) return "processes (RLIMIT_NPROC)";
    }
    return NULL;
}

static void reset_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (int s = 1; s < 32; s++)
        if (s != SIGKILL && s != SIGSTOP) sigaction(s, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

static void close_from(int lowfd) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lowfd, ~0U, 0) == 0) return;
#endif
    struct rlimit rl;
    long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 4096;
    for (long fd = lowfd; fd < max; fd++) close((int)fd);
}

/* ------------------------------------------------------------------------------------------
 * the keeper */

static volatile sig_atomic_t g_term_sig, g_timeout;

static void on_term(int sig) { g_term_sig = sig; }
static void on_alarm(int sig) {
    (void)sig;
    g_timeout = 1;
}

/* The keeper's child cannot go on: "<msg><name> (errno E)<tail>" on stderr, exit 127
 * (async-signal-safe: it runs between fork and exec). */
static void keeper_fail(const char *msg, const char *name, int e, const char *tail) {
    s_write_all(2, msg, s_len(msg));
    s_write_all(2, name, s_len(name));
    char t[128];
    size_t k = s_cat(t, 0, sizeof t, " (errno ");
    k = s_cat_long(t, k, sizeof t, e);
    k = s_cat(t, k, sizeof t, ")");
    k = s_cat(t, k, sizeof t, tail);
    s_write_all(2, t, k);
    _exit(127);
}

static void join_cgroup(const char *dir) {
    if (!dir[0]) return;
    char path[600], pid[24];
    size_t n = s_cat(path, 0, sizeof path, dir);
    s_cat(path, n, sizeof path, "/cgroup.procs");
    s_cat_long(pid, 0, sizeof pid, (long long)getpid());
    if (write_file_str(path, pid) != 0) {
        /* the cgroup exists (it was made for this sandbox) but the sandbox cannot enter it: it
         * would run without its memory or process limit, so it does not run at all */
        keeper_fail("seer keeper: cannot join the sandbox cgroup ", dir, errno, "; the sandbox does not start without its limits\n");
    }
}

static void write_status(const char *path, const char *how, int code, int sig, long long elapsed) {
    if (!path) return;
    char tmp[1100], text[256];
    size_t n = s_cat(tmp, 0, sizeof tmp, path);
    s_cat(tmp, n, sizeof tmp, ".tmp");
    size_t t = s_cat(text, 0, sizeof text, "{\"how\":\"");
    t = s_cat(text, t, sizeof text, how);
    t = s_cat(text, t, sizeof text, "\",\"code\":");
    t = s_cat_long(text, t, sizeof text, code);
    t = s_cat(text, t, sizeof text, ",\"signal\":");
    t = s_cat_long(text, t, sizeof text, sig);
    t = s_cat(text, t, sizeof text, ",\"elapsed_ms\":");
    t = s_cat_long(text, t, sizeof text, elapsed);
    t = s_cat(text, t, sizeof text, "}\n");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    s_write_all(fd, text, t);
    fsync(fd);
    close(fd);
    rename(tmp, path);
}

/* Whether the owner is dead or dying. getppid() alone is not enough: when a multi-threaded
 * owner is killed, its main thread (our parent) can exit first, and the kernel reparents us
 * to another of its threads, still alive for a moment, before it sends the death signal; so
 * getppid() still returns the owner. A thread-group leader that has exited before its other
 * threads shows as a zombie in /proc/PID/stat. Async-signal-safe (open/read/close). */
static int owner_dead(pid_t owner) {
    if (getppid() != owner) return 1;
    char path[64];
    size_t n = s_cat(path, 0, sizeof path, "/proc/");
    n = s_cat_long(path, n, sizeof path, owner);
    s_cat(path, n, sizeof path, "/stat");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    char buf[512];
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0) return 1;
    buf[r] = 0;
    /* "pid (comm) S ...": the state follows the last ')' (comm may itself hold parentheses) */
    ssize_t close_paren = -1;
    for (ssize_t i = 0; i < r; i++)
        if (buf[i] == ')') close_paren = i;
    if (close_paren < 0 || close_paren + 2 >= r) return 0;
    char st = buf[close_paren + 2];
    return st == 'Z' || st == 'X' || st == 'x';
}

/* What the keeper runs when the owner has gone: rm -rf -- state_dir remove_dirs... Built before
 * the fork (the keeper may not allocate). */
typedef struct {
    const char **argv;
} keeper_rm_t;

static void keeper_main(const seer_sandbox_keeper_opts_t *o, pid_t owner, int log_fd, int null_fd, int args_fd,
                        const int *pass, int npass, const keeper_rm_t *rm) {
    long long t0 = now_ms();
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    int owner_gone;
    if (o->detach) {
        /* outlives the script: its own session (no terminal's SIGHUP or Ctrl-C reaches it), no
         * death signal; only the timeout or a terminate ends it */
        setsid();
        owner_gone = 0;
    } else {
        setpgid(0, 0); /* the terminal's Ctrl-C goes to the owner, which decides */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        owner_gone = owner_dead(owner);
    }

    dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    /* fd 3 of the child: the arguments bwrap reads with --args 3 (args_fd is >= 10, so it is
     * not one of 0..3, and dup2 clears close-on-exec on the copy) */
    if (args_fd >= 0) dup2(args_fd, 3);
    else close(3);
    /* fds 4.. of the child: the descriptors to mount (each copy in pass[] is >= 4 + npass, so
     * no dup2 here overwrites one still to be copied) */
    for (int i = 0; i < npass; i++) dup2(pass[i], 4 + i);
    close_from(4 + npass); /* nothing else of the owner's (sockets, model files) stays open here */

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_term; /* no SA_RESTART: waitpid returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);

    pid_t child = fork();
    if (child == 0) {
        if (o->cgroup) {
            join_cgroup(o->cgroup->memory);
            join_cgroup(o->cgroup->pids);
        }
        const char *bad = apply_rlimits(&o->rlimits);
        if (bad) keeper_fail("seer keeper: cannot set the sandbox's limit ", bad, errno, "\n");
        reset_signals();
        execve(o->argv[0], (char *const *)o->argv, (char *const *)o->envp);
        keeper_fail("seer keeper: cannot run ", o->argv[0], errno, "\n");
    }
    if (args_fd >= 0) close(3); /* the child has its copy; bwrap closes it once read */
    for (int i = 0; i < npass; i++) close(4 + i); /* and of these (bwrap closes each once mounted) */
    if (o->timeout_ms > 0) {
        struct itimerval it = {{0, 0}, {o->timeout_ms / 1000, (o->timeout_ms % 1000) * 1000}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    const char *how = "exited";
    int code = 0, sig = 0, killed = 0;
    if (child < 0) {
        how = "not_started";
        code = errno;
    } else {
        if (owner_gone) g_term_sig = SIGTERM;
        for (;;) {
            if (!killed && (g_term_sig || g_timeout)) {
                kill(child, SIGKILL);
                killed = 1;
                if (g_timeout) how = "timeout";
                else how = (!o->detach && owner_dead(owner)) ? "owner_died" : "terminated";
            }
            int st;
            pid_t r = waitpid(child, &st, 0);
            if (r == child) {
                if (!killed) {
                    if (WIFEXITED(st)) code = WEXITSTATUS(st);
                    else if (WIFSIGNALED(st)) {
                        how = "signaled";
                        sig = WTERMSIG(st);
                    }
                }
                break;
            }
            if (r < 0 && errno != EINTR) break;
        }
    }
    if (o->cgroup) seer_sandbox_cgroup_destroy(o->cgroup, 3000);
    /* a detached sandbox has no owner to clean up after it: it always counts as gone */
    owner_gone = o->detach ? 1 : owner_dead(owner);
    /* the kernel sends the death signal just before it marks the leader a zombie: a dying
     * owner can still read as alive for a moment, so look again briefly before deciding */
    for (int i = 0; !owner_gone && g_term_sig && i < 10; i++) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        owner_gone = owner_dead(owner);
    }
    if (!o->detach && owner_gone && strcmp(how, "terminated") == 0) how = "owner_died";
    write_status(o->status_path, how, code, sig, now_ms() - t0);
    if (owner_gone && rm->argv) {
        /* nobody is left to read the workspace or the logs (or to use a hidden model's staged
         * files): remove them (with limits.disk the state directory is a mounted image: detach
         * it first; the image is in rm's argv too) */
        if (o->disk_image && o->disk_image[0] && o->state_dir && o->state_dir[0]) umount2(o->state_dir, MNT_DETACH);
        const char *env[] = {"PATH=/usr/bin:/bin", NULL};
        execve(rm->argv[0], (char *const *)rm->argv, (char *const *)env);
    }
    _exit(0);
}

/* The arguments, NUL-separated, in a sealed memfd at a descriptor >= 10 (close-on-exec; the
 * keeper moves it to fd 3 of its child). */
static int args_memfd(const char *const *args, int *fd_out, seer_err_t *err) {
    int fd = memfd_create("seer-args", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return seer_err_set(err, SEER_EIO, "cannot pass the sandbox's arguments: memfd_create: %s", strerror(errno));
    for (const char *const *a = args; *a; a++) {
        size_t n = strlen(*a) + 1; /* with its NUL */
        const char *p = *a;
        while (n) {
            ssize_t w = write(fd, p, n);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                int e = errno;
                close(fd);
                return seer_err_set(err, SEER_EIO, "cannot pass the sandbox's arguments: write: %s", strerror(e));
            }
            p += w;
            n -= (size_t)w;
        }
    }
    /* nothing that gets the descriptor can change what bwrap will read */
    fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
    lseek(fd, 0, SEEK_SET);
    int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    int e = errno;
    close(fd);
    if (high < 0) return seer_err_set(err, SEER_EIO, "cannot pass the sandbox's arguments: dup: %s", strerror(e));
    *fd_out = high;
    return SEER_OK;
}

int seer_sandbox_keeper_start(const seer_sandbox_keeper_opts_t *o, pid_t *keeper, seer_err_t *err) {
    if (!o || !o->argv || !o->argv[0] || o->argv[0][0] != '/')
        return seer_err_set(err, SEER_EINVAL, "the keeper needs an argv whose first entry is an absolute path");
    if (access(o->argv[0], X_OK) != 0)
        return seer_err_set(err, SEER_ENOTFOUND, "cannot run %s: %s", o->argv[0], strerror(errno));
    int log_fd = open(o->log_path ? o->log_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd < 0) return seer_err_set(err, SEER_EIO, "cannot open %s: %s", o->log_path, strerror(errno));
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0) {
        close(log_fd);
        return seer_err_set(err, SEER_EIO, "cannot open /dev/null: %s", strerror(errno));
    }
    static const char *const empty_env[] = {NULL};
    seer_sandbox_keeper_opts_t copy = *o;
    if (!copy.envp) copy.envp = empty_env;
    if (o->npass_fds < 0 || o->npass_fds > SEER_SANDBOX_PASS_FDS_MAX || (o->npass_fds > 0 && !o->pass_fds)) {
        close(log_fd);
        close(null_fd);
        return seer_err_set(err, SEER_EINVAL, "the keeper takes 0 to %d descriptors to pass, not %d", SEER_SANDBOX_PASS_FDS_MAX,
                            o->npass_fds);
    }
    /* copies of the descriptors to pass, all at or above 4 + npass (close-on-exec), made before
     * the fork: the keeper moves them to 4.. in its child */
    int npass = o->npass_fds, *pass = NULL;
    if (npass > 0) {
        pass = malloc((size_t)npass * sizeof *pass);
        int made = 0, e = ENOMEM;
        if (pass)
            for (; made < npass; made++) {
                if (o->pass_fds[made] < 0) {
                    e = EBADF;
                    break;
                }
                pass[made] = fcntl(o->pass_fds[made], F_DUPFD_CLOEXEC, 4 + npass);
                if (pass[made] < 0) {
                    e = errno;
                    break;
                }
            }
        if (!pass || made < npass) {
            for (int i = 0; pass && i < made; i++) close(pass[i]);
            free(pass);
            close(log_fd);
            close(null_fd);
            return seer_err_set(err, SEER_EIO,
                                "cannot hand the sandbox the %d files to mount: %s%s", npass, strerror(e),
                                e == EMFILE ? " (each is held open until the sandbox has mounted it: raise the open-file limit, "
                                              "ulimit -n)"
                                            : "");
        }
    }
    int args_fd = -1;
    if (o->fd_args) {
        int rc = args_memfd(o->fd_args, &args_fd, err);
        if (rc < 0) {
            for (int i = 0; i < npass; i++) close(pass[i]);
            free(pass);
            close(log_fd);
            close(null_fd);
            return rc;
        }
    }
    keeper_rm_t rm = {NULL};
    size_t nrm = 0;
    if (o->state_dir && o->state_dir[0]) nrm++;
    if (o->disk_image && o->disk_image[0]) nrm++;
    for (const char *const *d = o->remove_dirs; d && *d; d++)
        if ((*d)[0]) nrm++;
    if (nrm) {
        rm.argv = calloc(nrm + 4, sizeof *rm.argv);
        if (!rm.argv) {
            close(log_fd);
            close(null_fd);
            if (args_fd >= 0) close(args_fd);
            for (int i = 0; i < npass; i++) close(pass[i]);
            free(pass);
            return seer_err_set(err, SEER_ENOMEM, "out of memory");
        }
        size_t i = 0;
        rm.argv[i++] = "/bin/rm";
        rm.argv[i++] = "-rf";
        rm.argv[i++] = "--";
        if (o->state_dir && o->state_dir[0]) rm.argv[i++] = o->state_dir;
        if (o->disk_image && o->disk_image[0]) rm.argv[i++] = o->disk_image;
        for (const char *const *d = o->remove_dirs; d && *d; d++)
            if ((*d)[0]) rm.argv[i++] = *d;
    }
    pid_t owner = getpid();
    pid_t k = fork();
    if (k < 0) {
        int e = errno;
        close(log_fd);
        close(null_fd);
        if (args_fd >= 0) close(args_fd);
        for (int i = 0; i < npass; i++) close(pass[i]);
        free(pass);
        free(rm.argv);
        return seer_err_set(err, SEER_EIO, "cannot fork the sandbox keeper: %s", strerror(e));
    }
    if (k == 0) keeper_main(&copy, owner, log_fd, null_fd, args_fd, pass, npass, &rm);
    close(log_fd);
    close(null_fd);
    if (args_fd >= 0) close(args_fd);
    for (int i = 0; i < npass; i++) close(pass[i]);
    free(pass);
    free(rm.argv);
    *keeper = k;
    return SEER_OK;
}

/* ------------------------------------------------------------------------------------------
 * sandboxd's children */

/* argv[0] resolved on the PATH of envp (or of this process), before fork: execvpe may allocate. */
static char *resolve(const char *cmd, const char *const *envp) {
    if (strchr(cmd, '/')) return strdup(cmd);
    const char *path = NULL;
    if (envp) {
        for (const char *const *e = envp; *e; e++)
            if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
    } else {
        path = getenv("PATH");
    }
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    const char *p = path;
    while (*p) {
        size_t n = strcspn(p, ":");
        char buf[4096];
        if (n > 0 && n + strlen(cmd) + 2 < sizeof buf) {
            memcpy(buf, p, n);
            buf[n] = '/';
            strcpy(buf + n + 1, cmd);
            if (access(buf, X_OK) == 0) return strdup(buf);
        }
        p += n;
        if (*p == ':') p++;
    }
    return NULL;
}

static int set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int seer_sandbox_proc_spawn(const seer_sandbox_spawn_opts_t *o, seer_sandbox_proc_t *p, seer_err_t *err) {
    memset(p, 0, sizeof *p);
    p->in_fd = p->out_fd = p->err_fd = -1;
    if (!o->argv || !o->argv[0] || !o->argv[0][0]) return seer_err_set(err, SEER_EINVAL, "spawn: empty command");
    char *exe = resolve(o->argv[0], o->envp);
    if (!exe) return seer_err_set(err, SEER_ENOTFOUND, "%s: command not found (not on PATH)", o->argv[0]);

    int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1}, report[2] = {-1, -1}, file_fd = -1;
    int ok = pipe2(report, O_CLOEXEC) == 0;
    if (ok && o->pipe_stdin) ok = pipe2(in, O_CLOEXEC) == 0;
    if (ok && o->output_path) {
        file_fd = open(o->output_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        ok = file_fd >= 0;
    } else if (ok) {
        ok = pipe2(out, O_CLOEXEC) == 0 && pipe2(er, O_CLOEXEC) == 0;
    }
    int null_fd = ok ? open("/dev/null", O_RDWR | O_CLOEXEC) : -1;
    if (!ok || null_fd < 0) {
        int e = errno;
        int fds[] = {in[0], in[1], out[0], out[1], er[0], er[1], report[0], report[1], file_fd, null_fd};
        for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
            if (fds[i] >= 0) close(fds[i]);
        free(exe);
        return seer_err_set(err, SEER_EIO, "spawn %s: %s", o->argv[0], strerror(e));
    }
    extern char **environ;
    char *const *envp = o->envp ? (char *const *)o->envp : environ;
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int fd0 = o->pipe_stdin ? in[0] : null_fd;
        int fd1 = file_fd >= 0 ? file_fd : out[1];
        int fd2 = file_fd >= 0 ? file_fd : er[1];
        /* move the report pipe out of the way of 0..2 before the dup2s */
        int rep = fcntl(report[1], F_DUPFD_CLOEXEC, 10);
        if (dup2(fd0, 0) < 0 || dup2(fd1, 1) < 0 || dup2(fd2, 2) < 0) _exit(127);
        if (rep >= 0 && rep != 10) {
            dup3(rep, 10, O_CLOEXEC);
            rep = 10;
        }
        /* everything but 0..2 and the report pipe closes */
#ifdef SYS_close_range
        syscall(SYS_close_range, 3u, 9u, 0);
        syscall(SYS_close_range, 11u, ~0U, 0);
#endif
        int e = 0;
        if (o->cwd && chdir(o->cwd) != 0) e = errno;
        if (!e && apply_rlimits(&o->rlimits)) e = SEER_SPAWN_RLIMIT | (errno ? errno : EPERM);
        if (!e) {
            reset_signals();
            execve(exe, (char *const *)o->argv, envp);
            e = errno;
        }
        int v = e;
        if (rep >= 0) s_write_all(rep, (const char *)&v, sizeof v);
        _exit(127);
    }
    int fork_errno = errno;
    close(report[1]);
    if (in[0] >= 0) close(in[0]);
    if (out[1] >= 0) close(out[1]);
    if (er[1] >= 0) close(er[1]);
    if (file_fd >= 0) close(file_fd);
    close(null_fd);
    if (pid < 0) {
        close(report[0]);
        if (in[1] >= 0) close(in[1]);
        if (out[0] >= 0) close(out[0]);
        if (er[0] >= 0) close(er[0]);
        free(exe);
        return seer_err_set(err, SEER_EIO, "spawn %s: fork: %s", o->argv[0], strerror(fork_errno));
    }
    setpgid(pid, pid); /* also here: no window where a kill(-pid) misses the group */
    int child_errno = 0;
    ssize_t r;
    do r = read(report[0], &child_errno, sizeof child_errno);
    while (r < 0 && errno == EINTR);
    close(report[0]);
    if (r == (ssize_t)sizeof child_errno) {
        int st;
        waitpid(pid, &st, 0);
        if (in[1] >= 0) close(in[1]);
        if (out[0] >= 0) close(out[0]);
        if (er[0] >= 0) close(er[0]);
        int rc;
        if (child_errno & SEER_SPAWN_RLIMIT)
            rc = seer_err_set(err, SEER_EIO, "cannot set the resource limits for %s: %s (a limit above this process's hard limit?)",
                              exe, strerror(child_errno & ~SEER_SPAWN_RLIMIT));
        else
            rc = seer_err_set(err, child_errno == ENOENT ? SEER_ENOTFOUND : SEER_EIO, "cannot run %s%s%s: %s", exe,
                              o->cwd ? " in " : "", o->cwd ? o->cwd : "", strerror(child_errno));
        free(exe);
        return rc;
    }
    free(exe);
    p->pid = pid;
    p->in_fd = in[1];
    p->out_fd = out[0];
    p->err_fd = er[0];
    if (p->in_fd >= 0) set_nonblock(p->in_fd);
    if (p->out_fd >= 0) set_nonblock(p->out_fd);
    if (p->err_fd >= 0) set_nonblock(p->err_fd);
    return SEER_OK;
}

int seer_sandbox_proc_poll(seer_sandbox_proc_t *p) {
    if (p->exited) return 1;
    if (p->pid <= 0) return 1;
    int st;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == 0) return 0;
    if (r < 0) { /* reaped elsewhere: report it as gone */
        p->exited = 1;
        p->code = -1;
        return 1;
    }
    p->exited = 1;
    if (WIFEXITED(st)) p->code = WEXITSTATUS(st);
    else if (WIFSIGNALED(st)) {
        p->signal = WTERMSIG(st);
        p->code = 128 + p->signal;
    }
    return 1;
}

void seer_sandbox_proc_kill(seer_sandbox_proc_t *p, int sig) {
    if (p->pid <= 0) return;
    if (kill(-p->pid, sig) != 0 && !p->exited) kill(p->pid, sig);
}

void seer_sandbox_proc_close(seer_sandbox_proc_t *p) {
    if (p->in_fd >= 0) close(p->in_fd);
    if (p->out_fd >= 0) close(p->out_fd);
    if (p->err_fd >= 0) close(p->err_fd);
    p->in_fd = p->out_fd = p->err_fd = -1;
}
