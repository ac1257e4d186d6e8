/* Unit tests of the keeper's argument passing and clean-up (engine/sandbox/sandbox.c): fd_args
 * reach the child on fd 3 (NUL-separated, sealed) and never its command line; without them
 * the child has no fd 3; pass_fds reach it as fds 4, 5, ... in order, and nothing else does;
 * remove_dirs go with state_dir when the owner dies. The sandbox tests
 * (tests/lua/test_sandbox.lua, test_attack_hidden.lua) cover the same through real bwrap. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/sandbox.h"

static char *make_tmpdir(void) {
    char tmpl[] = "/tmp/seer-keeper-XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d);
    return strdup(d);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, f);
    fclose(f);
    if (len) *len = n;
    return buf;
}

static void rm_rf(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* Runs sh -c script under a keeper with the options in o (argv set here) and waits for it. */
static void run_keeper_with(seer_sandbox_keeper_opts_t *o, const char *script) {
    const char *argv[] = {"/bin/sh", "-c", script, NULL};
    o->argv = argv;
    pid_t k;
    seer_err_t err;
    cr_assert_eq(seer_sandbox_keeper_start(o, &k, &err), SEER_OK, "%s", err.msg);
    int st;
    cr_assert_eq(waitpid(k, &st, 0), k);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    o->argv = NULL;
}

/* Runs sh -c script under a keeper (with fd_args when given) and waits for it. */
static void run_keeper(const char *script, const char *const *fd_args) {
    seer_sandbox_keeper_opts_t o;
    memset(&o, 0, sizeof o);
    o.fd_args = fd_args;
    run_keeper_with(&o, script);
}

Test(keeper, fd_args_reach_fd_3_and_not_the_command_line) {
    char *d = make_tmpdir();
    char script[1024];
    snprintf(script, sizeof script,
             "cat <&3 > %s/args; tr '\\0' ' ' < /proc/$$/cmdline > %s/cmdline; "
             "(echo more >> /proc/self/fd/3) 2>/dev/null; echo $? > %s/write_rc",
             d, d, d);
    const char *fd_args[] = {"--ro-bind", "/secret/host/models--org--name", "/models/m-1", "", NULL};
    run_keeper(script, fd_args);
    char path[600];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/args", d);
    char *args = slurp(path, &n);
    cr_assert_not_null(args);
    static const char want[] = "--ro-bind\0/secret/host/models--org--name\0/models/m-1\0";
    cr_assert_eq(n, sizeof want, "fd 3 held %zu bytes", n); /* the empty last argument is one NUL */
    cr_assert_eq(memcmp(args, want, sizeof want - 1), 0);
    snprintf(path, sizeof path, "%s/cmdline", d);
    char *cmdline = slurp(path, NULL);
    cr_assert_not_null(cmdline);
    cr_assert_not_null(strstr(cmdline, "/bin/sh -c"));
    cr_assert_null(strstr(cmdline, "/secret/host"), "the arguments are on the command line: %s", cmdline);
    snprintf(path, sizeof path, "%s/write_rc", d);
    char *rc = slurp(path, NULL);
    cr_assert_neq(atoi(rc), 0, "the memfd could be written to after sealing");
    free(args);
    free(cmdline);
    free(rc);
    rm_rf(d);
    free(d);
}

Test(keeper, no_fd_3_without_fd_args) {
    char *d = make_tmpdir();
    char script[600];
    snprintf(script, sizeof script, "ls /proc/$$/fd > %s/fd3", d);
    run_keeper(script, NULL);
    char path[600];
    snprintf(path, sizeof path, "%s/fd3", d);
    char *out = slurp(path, NULL);
    cr_assert_not_null(out);
    cr_assert(strncmp(out, "0\n1\n", 4) == 0, "%s", out);
    cr_assert_null(strstr(out, "\n3\n"), "the child has an fd 3 without fd_args: %s", out);
    free(out);
    rm_rf(d);
    free(d);
}

/* The descriptors to mount reach the child as fds 4, 5, ... in the order given, whatever
 * numbers they had here (these are opened low, so some sit where others must go), beside fd 3's
 * arguments, and no other descriptor of this process does; this process keeps its own. */
Test(keeper, pass_fds_reach_fds_4_on_in_order_and_nothing_else) {
    char *d = make_tmpdir();
    int lows[3];
    for (int i = 0; i < 3; i++) { /* free the low numbers first, so the files take 3, 4, 5 or so */
        char path[600];
        snprintf(path, sizeof path, "%s/f%d", d, i);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "file%d", i);
        fclose(f);
        lows[i] = open(path, O_RDONLY);
        cr_assert_geq(lows[i], 0);
    }
    int stray = open("/dev/null", O_RDONLY); /* not passed: must not reach the child */
    cr_assert_geq(stray, 0);
    int pass[3] = {lows[2], lows[0], lows[1]};
    char script[1024];
    /* The shell's descriptors listed by the shell itself with builtins only: `ls /proc/$$/fd`
     * in a pipeline could see the pipe the shell holds until it has forked both sides (it did,
     * once in a make test), and dash keeps a copy of fd 1 (as fd 10) while a redirected command
     * runs. */
    snprintf(script, sizeof script,
             "cat <&4 <&5 <&6 > %s/got 2>&1; r=; n=0; while [ $n -lt 1024 ]; do [ -e /proc/$$/fd/$n ] && r=\"$r$n \"; "
             "n=$((n + 1)); done; printf %%s \"$r\" > %s/fds", d, d);
    const char *fd_args[] = {"--ro-bind-fd", "4", "/models/m/a", NULL};
    seer_sandbox_keeper_opts_t o;
    memset(&o, 0, sizeof o);
    o.fd_args = fd_args;
    o.pass_fds = pass;
    o.npass_fds = 3;
    run_keeper_with(&o, script);
    char path[600];
    snprintf(path, sizeof path, "%s/got", d);
    char *got = slurp(path, NULL);
    cr_assert_not_null(got);
    /* sh reads 4, then 5, then 6 as stdin in turn: only the last redirection counts for cat */
    cr_assert_str_eq(got, "file1", "fd 6 of the child: %s", got);
    snprintf(path, sizeof path, "%s/fds", d);
    char *fds = slurp(path, NULL);
    cr_assert_not_null(fds);
    cr_assert_str_eq(fds, "0 1 2 3 4 5 6 ", "the child's descriptors: %s", fds);
    for (int i = 0; i < 3; i++) cr_assert_neq(fcntl(lows[i], F_GETFD), -1, "the caller's descriptor %d was closed", lows[i]);
    free(got);
    free(fds);
    /* each passed descriptor is the file given in its place */
    snprintf(script, sizeof script, "for n in 4 5 6; do cat /proc/self/fd/$n; echo; done > %s/each", d);
    run_keeper_with(&o, script);
    snprintf(path, sizeof path, "%s/each", d);
    char *each = slurp(path, NULL);
    cr_assert_not_null(each);
    cr_assert_str_eq(each, "file2\nfile0\nfile1\n");
    free(each);
    /* a descriptor that is not one is refused before anything starts */
    int bad[2] = {lows[0], -1};
    const char *argv[] = {"/bin/true", NULL};
    o.argv = argv;
    o.pass_fds = bad;
    o.npass_fds = 2;
    pid_t k;
    seer_err_t err;
    cr_assert_lt(seer_sandbox_keeper_start(&o, &k, &err), 0);
    cr_assert_not_null(strstr(err.msg, "cannot hand the sandbox the 2 files to mount"), "%s", err.msg);
    for (int i = 0; i < 3; i++) close(lows[i]);
    close(stray);
    rm_rf(d);
    free(d);
}

Test(keeper, remove_dirs_go_with_the_state_dir_when_the_owner_dies) {
    char *d = make_tmpdir();
    char state[600], stage[600], owner_file[600];
    snprintf(state, sizeof state, "%s/state", d);
    snprintf(stage, sizeof stage, "%s/stage-XYZ", d);
    snprintf(owner_file, sizeof owner_file, "%s/stage-XYZ.owner", d);
    cr_assert_eq(mkdir(state, 0700), 0);
    cr_assert_eq(mkdir(stage, 0700), 0);
    FILE *f = fopen(owner_file, "w");
    cr_assert_not_null(f);
    fclose(f);
    pid_t owner = fork();
    if (owner == 0) {
        const char *argv[] = {"/bin/sleep", "30", NULL};
        const char *dirs[] = {stage, owner_file, NULL};
        seer_sandbox_keeper_opts_t o;
        memset(&o, 0, sizeof o);
        o.argv = argv;
        o.state_dir = state;
        o.remove_dirs = dirs;
        pid_t k;
        seer_err_t err;
        if (seer_sandbox_keeper_start(&o, &k, &err) != SEER_OK) _exit(1);
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL); /* the keeper is up, its child running */
        _exit(0);             /* the owner dies: the keeper cleans up */
    }
    int st;
    cr_assert_eq(waitpid(owner, &st, 0), owner);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int gone = 0;
    for (int i = 0; i < 200 && !gone; i++) {
        struct stat sb;
        gone = stat(state, &sb) != 0 && stat(stage, &sb) != 0 && stat(owner_file, &sb) != 0;
        if (!gone) {
            struct timespec ts = {0, 25000000};
            nanosleep(&ts, NULL);
        }
    }
    cr_assert(gone, "the keeper left %s, %s or %s", state, stage, owner_file);
    rm_rf(d);
    free(d);
}
