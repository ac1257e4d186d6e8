/* engine/sandbox/safe_fs.c: file operations beneath a root the sandbox can write. Each test
 * builds a root and an "outside" folder (standing for the researcher's files) in a fresh temp
 * folder, plants what a sandbox could plant (links, fifos, sockets, swaps in a loop from a child
 * process) and checks that nothing outside is ever read or written. Every case runs through
 * openat2 and through the O_NOFOLLOW walk (the fallback for kernels without openat2). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/sandbox.h"

static char base[256], root_dir[300], outside[300];

static void setup(void) {
    snprintf(base, sizeof base, "/tmp/seer-safe-fs-XXXXXX");
    cr_assert_not_null(mkdtemp(base));
    snprintf(root_dir, sizeof root_dir, "%s/root", base);
    snprintf(outside, sizeof outside, "%s/outside", base);
    cr_assert_eq(mkdir(root_dir, 0755), 0);
    cr_assert_eq(mkdir(outside, 0755), 0);
    char p[400];
    snprintf(p, sizeof p, "%s/secret.txt", outside);
    FILE *f = fopen(p, "w");
    fputs("host secret\n", f);
    fclose(f);
}

static void teardown(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) { /* best effort */
    }
}

TestSuite(safe_fs, .init = setup, .fini = teardown);

static void open_root(seer_sandbox_fs_root_t *r, int walk) {
    seer_err_t err;
    cr_assert_eq(seer_sandbox_fs_open_root(r, root_dir, "the sandbox's workspace", &err), 0, "%s", err.msg);
    r->no_openat2 = walk;
}

/* The outside folder holds exactly secret.txt, unchanged. */
static void assert_outside_unchanged(void) {
    DIR *d = opendir(outside);
    cr_assert_not_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        cr_assert_str_eq(e->d_name, "secret.txt", "a file appeared outside the root: %s", e->d_name);
        n++;
    }
    closedir(d);
    cr_assert_eq(n, 1, "secret.txt is gone");
    char p[400], buf[64] = {0};
    snprintf(p, sizeof p, "%s/secret.txt", outside);
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f);
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    cr_assert_eq(k, 12);
    cr_assert_str_eq(buf, "host secret\n");
}

static void at(char *buf, size_t size, const char *rel) { snprintf(buf, size, "%s/%s", root_dir, rel); }

static int count_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".seer-tmp-")) n++;
    closedir(d);
    return n;
}

Test(safe_fs, write_read_roundtrip_with_parents) {
    for (int walk = 0; walk < 2; walk++) {
        seer_sandbox_fs_root_t r;
        seer_err_t err;
        open_root(&r, walk);
        cr_assert_eq(seer_sandbox_fs_write(&r, "a/b/c.txt", "hello", 5, 0644, 1, &err), 0, "%s", err.msg);
        char *out;
        size_t n;
        long long size;
        cr_assert_eq(seer_sandbox_fs_read(&r, "a/b/c.txt", 100, 0, 0, &out, &n, &size, &err), 0, "%s", err.msg);
        cr_assert_eq(n, 5);
        cr_assert_eq(size, 5);
        cr_assert_str_eq(out, "hello");
        free(out);
        /* a leading slash is still beneath the root */
        cr_assert_eq(seer_sandbox_fs_write(&r, "/top.txt", "x", 1, 0644, 0, &err), 0, "%s", err.msg);
        struct stat st;
        char p[400];
        at(p, sizeof p, "top.txt");
        cr_assert_eq(stat(p, &st), 0);
        seer_sandbox_fs_entry_t *v;
        cr_assert_eq(seer_sandbox_fs_list(&r, "a/b", 10, &v, &n, &err), 0, "%s", err.msg);
        cr_assert_eq(n, 1);
        cr_assert_str_eq(v[0].name, "c.txt");
        free(v);
        cr_assert_eq(seer_sandbox_fs_remove_tree(&r, "a", &err), 0, "%s", err.msg);
        at(p, sizeof p, "a");
        cr_assert_neq(stat(p, &st), 0);
        seer_sandbox_fs_close_root(&r);
    }
}

Test(safe_fs, a_directory_symlink_is_never_followed) {
    char link[400];
    at(link, sizeof link, "lib");
    cr_assert_eq(symlink(outside, link), 0);
    for (int walk = 0; walk < 2; walk++) {
        seer_sandbox_fs_root_t r;
        seer_err_t err;
        open_root(&r, walk);
        int rc = seer_sandbox_fs_write(&r, "lib/pwned.txt", "x", 1, 0644, 1, &err);
        cr_assert_eq(rc, SEER_SANDBOX_FS_ESYMLINK, "walk=%d: %d %s", walk, rc, err.msg);
        cr_assert(strstr(err.msg, "refusing to follow a symlink planted in the sandbox's workspace"), "%s", err.msg);
        cr_assert(strstr(err.msg, link), "the message names the path: %s", err.msg);
        char *out;
        size_t n;
        rc = seer_sandbox_fs_read(&r, "lib/secret.txt", 100, 0, 0, &out, &n, NULL, &err);
        cr_assert_eq(rc, SEER_SANDBOX_FS_ESYMLINK, "%s", err.msg);
        cr_assert_eq(seer_sandbox_fs_mkdirs(&r, "lib/x/y", 0755, &err), SEER_SANDBOX_FS_ESYMLINK);
        seer_sandbox_fs_entry_t *v;
        cr_assert_eq(seer_sandbox_fs_list(&r, "lib", 10, &v, &n, &err), SEER_SANDBOX_FS_ESYMLINK);
        cr_assert_eq(seer_sandbox_fs_symlink(&r, "/etc", "lib/l", &err), SEER_SANDBOX_FS_ESYMLINK);
        cr_assert_eq(seer_sandbox_fs_rename(&r, "lib/secret.txt", "stolen.txt", &err), SEER_SANDBOX_FS_ESYMLINK);
        cr_assert_eq(seer_sandbox_fs_unlink(&r, "lib/secret.txt", &err), SEER_SANDBOX_FS_ESYMLINK);
        cr_assert_eq(seer_sandbox_fs_read(&r, "../outside/secret.txt", 100, 0, 0, &out, &n, NULL, &err),
                     SEER_SANDBOX_FS_EXDEV);
        seer_sandbox_fs_close_root(&r);
    }
    assert_outside_unchanged();
}

Test(safe_fs, a_final_symlink_is_replaced_on_write_and_refused_on_read) {
    char link[400], target[400];
    at(link, sizeof link, "notebook.ipynb");
    snprintf(target, sizeof target, "%s/secret.txt", outside);
    for (int walk = 0; walk < 2; walk++) {
        unlink(link);
        cr_assert_eq(symlink(target, link), 0);
        seer_sandbox_fs_root_t r;
        seer_err_t err;
        open_root(&r, walk);
        char *out;
        size_t n;
        cr_assert_eq(seer_sandbox_fs_read(&r, "notebook.ipynb", 100, 0, 0, &out, &n, NULL, &err),
                     SEER_SANDBOX_FS_ESYMLINK, "%s", err.msg);
        struct stat st;
        cr_assert_eq(seer_sandbox_fs_stat(&r, "notebook.ipynb", &st, &err), 0);
        cr_assert(S_ISLNK(st.st_mode), "stat reports the link itself");
        cr_assert_eq(seer_sandbox_fs_write(&r, "notebook.ipynb", "{}", 2, 0644, 0, &err), 0, "%s", err.msg);
        cr_assert_eq(lstat(link, &st), 0);
        cr_assert(S_ISREG(st.st_mode), "the link was replaced by the file");
        cr_assert_eq(seer_sandbox_fs_unlink(&r, "notebook.ipynb", &err), 0, "%s", err.msg);
        seer_sandbox_fs_close_root(&r);
    }
    assert_outside_unchanged();
}

Test(safe_fs, fifos_sockets_and_devices_are_refused_without_blocking) {
    char p[400];
    at(p, sizeof p, "fifo");
    cr_assert_eq(mkfifo(p, 0644), 0);
    at(p, sizeof p, "sock");
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(p), sizeof a.sun_path);
    memcpy(a.sun_path, p, strlen(p) + 1);
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    at(p, sizeof p, "null");
    int have_dev = mknod(p, S_IFCHR | 0666, makedev(1, 3)) == 0;
    alarm(10); /* a blocking open of the fifo would hang here: fail the test instead */
    for (int walk = 0; walk < 2; walk++) {
        seer_sandbox_fs_root_t r;
        seer_err_t err;
        open_root(&r, walk);
        char *out;
        size_t n;
        int rc = seer_sandbox_fs_read(&r, "fifo", 100, 0, 0, &out, &n, NULL, &err);
        cr_assert_eq(rc, SEER_SANDBOX_FS_ENOTREG, "%s", err.msg);
        cr_assert(strstr(err.msg, "fifo"), "%s", err.msg);
        rc = seer_sandbox_fs_read(&r, "sock", 100, 0, 0, &out, &n, NULL, &err);
        cr_assert_eq(rc, SEER_SANDBOX_FS_ENOTREG, "%s", err.msg);
        cr_assert(strstr(err.msg, "socket"), "%s", err.msg);
        if (have_dev) {
            rc = seer_sandbox_fs_read(&r, "null", 100, 0, 0, &out, &n, NULL, &err);
            cr_assert_eq(rc, SEER_SANDBOX_FS_ENOTREG, "%s", err.msg);
            cr_assert(strstr(err.msg, "device"), "%s", err.msg);
        }
        rc = seer_sandbox_fs_read(&r, "", 100, 0, 0, &out, &n, NULL, &err);
        cr_assert_eq(rc, SEER_EINVAL, "the root itself is not a file: %s", err.msg);
        seer_sandbox_fs_close_root(&r);
    }
    alarm(0);
    close(s);
    if (!have_dev) cr_log_info("mknod is not allowed here: the device case was not run (fifo and socket were)");
}

Test(safe_fs, reads_are_bounded) {
    char big[10000];
    memset(big, 'a', sizeof big);
    memcpy(big + sizeof big - 4, "END\n", 4);
    for (int walk = 0; walk < 2; walk++) {
        seer_sandbox_fs_root_t r;
        seer_err_t err;
        open_root(&r, walk);
        cr_assert_eq(seer_sandbox_fs_write(&r, "log", big, sizeof big, 0644, 0, &err), 0);
        char *out;
        size_t n;
        long long size;
        int rc = seer_sandbox_fs_read(&r, "log", 1000, 0, 0, &out, &n, &size, &err);
        cr_assert_eq(rc, SEER_SANDBOX_FS_ETOOBIG, "%s", err.msg);
        cr_assert(strstr(err.msg, "10000 bytes"), "%s", err.msg);
        cr_assert_null(out);
        cr_assert_eq(seer_sandbox_fs_read(&r, "log", 1000, 0, 1, &out, &n, &size, &err), 0);
        cr_assert_eq(n, 1000);
        cr_assert_eq(size, 10000);
        cr_assert_str_eq(out + 996, "END\n");
        free(out);
        cr_assert_eq(seer_sandbox_fs_read(&r, "log", 1000, 9500, 0, &out, &n, &size, &err), 0, "%s", err.msg);
        cr_assert_eq(n, 500);
        free(out);
        seer_sandbox_fs_close_root(&r);
    }
}

Test(safe_fs, a_failed_write_leaves_no_temporary_file_and_the_old_content) {
    seer_sandbox_fs_root_t r;
    seer_err_t err;
    open_root(&r, 0);
    cr_assert_eq(seer_sandbox_fs_write(&r, "d/keep.txt", "old", 3, 0644, 1, &err), 0);
    char dir[400];
    at(dir, sizeof dir, "d");
    /* 1: the target is a directory */
    cr_assert_eq(seer_sandbox_fs_mkdirs(&r, "d/sub", 0755, &err), 0);
    cr_assert_lt(seer_sandbox_fs_write(&r, "d/sub", "x", 1, 0644, 0, &err), 0);
    cr_assert_eq(count_tmp(dir), 0);
    /* 2: the write itself fails half-way (file size limit) */
    struct rlimit old, lim = {.rlim_cur = 16, .rlim_max = RLIM_INFINITY};
    getrlimit(RLIMIT_FSIZE, &old);
    lim.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    char big[1000];
    memset(big, 'x', sizeof big);
    int rc = seer_sandbox_fs_write(&r, "d/keep.txt", big, sizeof big, 0644, 0, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    cr_assert_lt(rc, 0, "the write past the size limit fails");
    cr_assert(strstr(err.msg, "keep.txt"), "the error names the file: %s", err.msg);
    cr_assert_eq(count_tmp(dir), 0, "no temporary file is left behind");
    char *out;
    size_t n;
    cr_assert_eq(seer_sandbox_fs_read(&r, "d/keep.txt", 100, 0, 0, &out, &n, NULL, &err), 0);
    cr_assert_str_eq(out, "old", "the old content is intact");
    free(out);
    /* 3: the parent is missing and mkdirs was not asked */
    cr_assert_eq(seer_sandbox_fs_write(&r, "nope/x", "x", 1, 0644, 0, &err), SEER_ENOTFOUND);
    seer_sandbox_fs_close_root(&r);
}

Test(safe_fs, remove_tree_removes_links_not_their_targets_at_any_depth) {
    seer_sandbox_fs_root_t r;
    seer_err_t err;
    open_root(&r, 0);
    char rel[4096] = "t";
    for (int i = 0; i < 150; i++) strcat(rel, "/d");
    cr_assert_eq(seer_sandbox_fs_mkdirs(&r, rel, 0755, &err), 0, "%s", err.msg);
    strcat(rel, "/f");
    cr_assert_eq(seer_sandbox_fs_write(&r, rel, "x", 1, 0644, 0, &err), 0);
    char p[400];
    at(p, sizeof p, "t/link");
    cr_assert_eq(symlink(outside, p), 0);
    at(p, sizeof p, "t/d/file-link");
    char target[400];
    snprintf(target, sizeof target, "%s/secret.txt", outside);
    cr_assert_eq(symlink(target, p), 0);
    at(p, sizeof p, "t/d/locked");
    cr_assert_eq(mkdir(p, 0755), 0);
    char q[450];
    snprintf(q, sizeof q, "%s/inner", p);
    cr_assert_eq(mkdir(q, 0755), 0);
    cr_assert_eq(chmod(p, 0), 0);
    cr_assert_eq(seer_sandbox_fs_remove_tree(&r, "t", &err), 0, "%s", err.msg);
    struct stat st;
    at(p, sizeof p, "t");
    cr_assert_neq(lstat(p, &st), 0, "the tree is gone");
    /* "" empties the root but keeps it */
    cr_assert_eq(seer_sandbox_fs_write(&r, "a/b", "x", 1, 0644, 1, &err), 0);
    cr_assert_eq(seer_sandbox_fs_remove_tree(&r, "", &err), 0, "%s", err.msg);
    cr_assert_eq(stat(root_dir, &st), 0);
    seer_sandbox_fs_entry_t *v;
    size_t n;
    cr_assert_eq(seer_sandbox_fs_list(&r, "", 10, &v, &n, &err), 0);
    cr_assert_eq(n, 0);
    free(v);
    seer_sandbox_fs_close_root(&r);
    assert_outside_unchanged();
}

/* A child swaps root/d between a real directory and a symlink to the outside folder (an
 * atomic RENAME_EXCHANGE, as fast as it can) while the parent writes, reads, lists and makes
 * directories through d thousands of times. Whatever the interleaving, nothing may land
 * outside or be read from there. */
static void race(int walk) {
    char d[400], alt[400];
    at(d, sizeof d, "d");
    at(alt, sizeof alt, "alt");
    cr_assert_eq(mkdir(d, 0755), 0);
    cr_assert_eq(symlink(outside, alt), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int rfd = open(root_dir, O_PATH | O_DIRECTORY);
        for (;;) renameat2(rfd, "d", rfd, "alt", RENAME_EXCHANGE);
    }
    seer_sandbox_fs_root_t r;
    seer_err_t err;
    open_root(&r, walk);
    int wrote = 0, refused = 0, read_secret = 0;
    for (int i = 0; i < 4000; i++) {
        char name[64];
        snprintf(name, sizeof name, "d/f%d.txt", i % 50);
        int rc = seer_sandbox_fs_write(&r, name, "pwned", 5, 0644, 0, &err);
        if (rc == 0) wrote++;
        else refused++;
        char *out;
        size_t n;
        if (seer_sandbox_fs_read(&r, "d/secret.txt", 100, 0, 0, &out, &n, NULL, &err) == 0) {
            read_secret++;
            free(out);
        }
        seer_sandbox_fs_mkdirs(&r, "d/sub", 0755, &err);
        seer_sandbox_fs_entry_t *v;
        if (seer_sandbox_fs_list(&r, "d", 1000, &v, &n, &err) == 0) {
            for (size_t k = 0; k < n; k++) cr_assert_str_neq(v[k].name, "secret.txt", "listed the outside folder");
            free(v);
        }
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    seer_sandbox_fs_close_root(&r);
    cr_assert_eq(read_secret, 0, "read the outside file through the swapped link");
    /* the race really happened both ways: some writes went through the directory, some were refused */
    cr_assert_gt(wrote, 0, "no write went through (the probe is broken)");
    cr_assert_gt(refused, 0, "no write met the link (the swap is not racing)");
    cr_log_info("walk=%d: %d writes landed in the real directory, %d were refused", walk, wrote, refused);
    assert_outside_unchanged();
}

Test(safe_fs, race_swapping_a_directory_and_a_symlink_openat2, .timeout = 120) { race(0); }
Test(safe_fs, race_swapping_a_directory_and_a_symlink_walk, .timeout = 120) { race(1); }

/* The control: the same swap defeats plain path-based writes, so the race test can fail. */
Test(safe_fs, control_plain_open_follows_the_swapped_link, .timeout = 120) {
    char d[400], alt[400];
    at(d, sizeof d, "d");
    at(alt, sizeof alt, "alt");
    cr_assert_eq(mkdir(d, 0755), 0);
    cr_assert_eq(symlink(outside, alt), 0);
    pid_t pid = fork();
    if (pid == 0) {
        int rfd = open(root_dir, O_PATH | O_DIRECTORY);
        for (;;) renameat2(rfd, "d", rfd, "alt", RENAME_EXCHANGE);
    }
    /* Until the race is hit once, for up to 20 s: a fixed 4000 tries (~40 ms) could all run while
     * the swapping child waited for a CPU on a loaded 2-core machine, and the control failed. */
    int escaped = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; !escaped; i++) {
        if ((i & 1023) == 1023) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (t1.tv_sec - t0.tv_sec > 20) break;
            sched_yield();
        }
        char p[450], o[450];
        snprintf(p, sizeof p, "%s/plain.txt", d);
        int fd = open(p, O_WRONLY | O_CREAT, 0644);
        if (fd >= 0) close(fd);
        snprintf(o, sizeof o, "%s/plain.txt", outside);
        escaped = access(o, F_OK) == 0;
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cr_assert(escaped, "a plain open through the swapped path never landed outside: the race probe is broken");
}
