/* Unit tests of engine/host: opening the Lua state, running code, errors with tracebacks,
 * Ctrl-C delivery into running Lua code, atomic file writes, and the error record. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "host/host.h"
#include "seer.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define LEAK_CHECK() cr_assert(__lsan_do_recoverable_leak_check() == 0)
#else
#define LEAK_CHECK() ((void)0)
#endif

static seer_host_t *open_host(void) {
    seer_host_t *h = NULL;
    seer_err_t err;
    seer_host_opts_t opts = {.lua_dir = getenv("SEER_LUA_DIR") ? getenv("SEER_LUA_DIR") : "lua"};
    int rc = seer_host_open(&h, &opts, &err);
    cr_assert_eq(rc, SEER_OK, "seer_host_open: %s", err.msg);
    return h;
}

static char *make_tmpdir(void) {
    char tmpl[] = "/tmp/seer-unit-XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d);
    return strdup(d);
}

static void rm_rf(const char *dir) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(host, runs_a_chunk_and_sees_the_seer_global) {
    seer_host_t *h = open_host();
    seer_err_t err;
    int rc = seer_host_run_string(h, "result = seer.json.encode({a = {1, 2}}) .. type(jit) .. type(require 'ffi')",
                                  "=test", 0, NULL, &err);
    cr_assert_eq(rc, SEER_OK, "%s", err.msg);
    lua_State *L = seer_host_lua(h);
    lua_getglobal(L, "result");
    cr_assert_str_eq(lua_tostring(L, -1), "{\"a\":[1,2]}tabletable");
    lua_pop(L, 1);
    seer_host_close(h);
    LEAK_CHECK();
}

Test(host, runtime_error_carries_message_and_traceback) {
    seer_host_t *h = open_host();
    seer_err_t err;
    int rc = seer_host_run_string(h, "local function f()\n  error('deep problem')\nend\nf()", "@chunk.lua", 0, NULL, &err);
    cr_assert_eq(rc, SEER_ELUA);
    cr_assert_eq(err.code, SEER_ELUA);
    cr_assert(strstr(err.msg, "chunk.lua:2: deep problem") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, "stack traceback:") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, "in function 'f'") != NULL, "%s", err.msg);
    /* The state stays usable after an error, with a balanced stack. */
    int top = lua_gettop(seer_host_lua(h));
    cr_assert_eq(seer_host_run_string(h, "x = 1", "=t", 0, NULL, &err), SEER_OK);
    cr_assert_eq(lua_gettop(seer_host_lua(h)), top);
    seer_host_close(h);
}

Test(host, syntax_error_is_a_parse_error) {
    seer_host_t *h = open_host();
    seer_err_t err;
    cr_assert_eq(seer_host_run_string(h, "x = = 1", "=cell", 0, NULL, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "cell:1:") != NULL, "%s", err.msg);
    seer_host_close(h);
}

Test(host, non_string_error_values_are_described) {
    seer_host_t *h = open_host();
    seer_err_t err;
    cr_assert_eq(seer_host_run_string(h, "error({code = 3})", "=t", 0, NULL, &err), SEER_ELUA);
    cr_assert(strstr(err.msg, "(error object is a table value)") != NULL, "%s", err.msg);
    cr_assert_eq(seer_host_run_string(h, "error(setmetatable({}, {__tostring = function() return 'E42' end}))",
                                      "=t", 0, NULL, &err), SEER_ELUA);
    cr_assert(strstr(err.msg, "E42") != NULL, "%s", err.msg);
    seer_host_close(h);
}

Test(host, arguments_reach_arg_and_varargs) {
    seer_host_t *h = open_host();
    seer_err_t err;
    char *argv[] = {"one", "two"};
    cr_assert_eq(seer_host_run_string(h, "got = table.concat({...}, ',') .. '|' .. arg[0] .. '|' .. arg[2]", "=t", 2,
                                      argv, &err), SEER_OK, "%s", err.msg);
    lua_getglobal(seer_host_lua(h), "got");
    cr_assert_str_eq(lua_tostring(seer_host_lua(h), -1), "one,two|=t|two");
    seer_host_close(h);
}

Test(host, wrong_lua_dir_names_the_directory) {
    seer_host_t *h = (seer_host_t *)1;
    seer_err_t err;
    seer_host_opts_t opts = {.lua_dir = "/nonexistent/lua"};
    cr_assert_eq(seer_host_open(&h, &opts, &err), SEER_ENOTFOUND);
    cr_assert_null(h);
    cr_assert(strstr(err.msg, "/nonexistent/lua") != NULL, "%s", err.msg);
}

Test(host, run_file_rejects_directories_and_missing_files) {
    seer_host_t *h = open_host();
    seer_err_t err;
    cr_assert_eq(seer_host_run_file(h, "/tmp", 0, NULL, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "is a directory") != NULL, "%s", err.msg);
    cr_assert_eq(seer_host_run_file(h, "/nonexistent.lua", 0, NULL, &err), SEER_ENOTFOUND);
    cr_assert(strstr(err.msg, "No such file") != NULL, "%s", err.msg);
    seer_host_close(h);
}

Test(host, run_file_puts_script_dir_and_libraries_on_the_path) {
    char *d = make_tmpdir();
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/libraries", d);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/libraries/helper_mod.lua", d);
    FILE *f = fopen(p, "w");
    fputs("return 'from libraries'", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/main.lua", d);
    f = fopen(p, "w");
    fputs("got = require('helper_mod')", f);
    fclose(f);
    seer_host_t *h = open_host();
    seer_err_t err;
    cr_assert_eq(seer_host_run_file(h, p, 0, NULL, &err), SEER_OK, "%s", err.msg);
    lua_getglobal(seer_host_lua(h), "got");
    cr_assert_str_eq(lua_tostring(seer_host_lua(h), -1), "from libraries");
    seer_host_close(h);
    rm_rf(d);
    free(d);
}

/* A C function that delivers SIGINT to the process, as a Ctrl-C on the terminal would. */
static int l_raise_sigint(lua_State *L) {
    (void)L;
    raise(SIGINT);
    return 0;
}

Test(host, sigint_interrupts_running_lua_code) {
    seer_host_t *h = open_host();
    lua_State *L = seer_host_lua(h);
    lua_pushcfunction(L, l_raise_sigint);
    lua_setglobal(L, "press_ctrl_c");
    seer_err_t err;
    /* jit.off: hooks only run in interpreted code (see host.h). */
    int rc = seer_host_run_string(h, "jit.off() press_ctrl_c() local n = 0 while true do n = n + 1 end", "=loop", 0,
                                  NULL, &err);
    cr_assert_eq(rc, SEER_EINTR, "rc=%d %s", rc, err.msg);
    cr_assert(strstr(err.msg, "interrupted") != NULL, "%s", err.msg);
    cr_assert(!seer_host_interrupted());
    /* The next run is not interrupted by a stale Ctrl-C. */
    cr_assert_eq(seer_host_run_string(h, "for i = 1, 100000 do end", "=t", 0, NULL, &err), SEER_OK, "%s", err.msg);
    /* SIGINT is restored to what it was outside runs. */
    struct sigaction sa;
    sigaction(SIGINT, NULL, &sa);
    cr_assert(sa.sa_handler == SIG_DFL);
    seer_host_close(h);
}

Test(host, interrupt_can_be_caught_by_pcall_in_lua) {
    seer_host_t *h = open_host();
    lua_State *L = seer_host_lua(h);
    lua_pushcfunction(L, l_raise_sigint);
    lua_setglobal(L, "press_ctrl_c");
    seer_err_t err;
    int rc = seer_host_run_string(h,
        "jit.off() local ok, e = pcall(function() press_ctrl_c() while true do end end) caught = e", "=t", 0, NULL, &err);
    cr_assert_eq(rc, SEER_OK, "%s", err.msg);
    lua_getglobal(L, "caught");
    cr_assert(strstr(lua_tostring(L, -1), "interrupted") != NULL);
    seer_host_close(h);
}

/* Runs a trivial Lua function through seer_host_pcall from C, as a C module calling back
 * into Lua would, then presses Ctrl-C. */
static int l_nested_then_sigint(lua_State *L) {
    seer_host_t *h = lua_touserdata(L, lua_upvalueindex(1));
    seer_err_t err;
    luaL_loadstring(L, "return 1");
    cr_assert_eq(seer_host_pcall(h, 0, 1, &err), SEER_OK, "%s", err.msg);
    lua_pop(L, 1);
    raise(SIGINT);
    return 0;
}

Test(host, nested_calls_keep_ctrl_c_armed) {
    seer_host_t *h = open_host();
    lua_State *L = seer_host_lua(h);
    lua_pushlightuserdata(L, h);
    lua_pushcclosure(L, l_nested_then_sigint, 1);
    lua_setglobal(L, "nested_then_ctrl_c");
    seer_err_t err;
    int rc = seer_host_run_string(h, "jit.off() nested_then_ctrl_c() while true do end", "=t", 0, NULL, &err);
    cr_assert_eq(rc, SEER_EINTR, "rc=%d %s", rc, err.msg);
    struct sigaction sa;
    sigaction(SIGINT, NULL, &sa);
    cr_assert(sa.sa_handler == SIG_DFL);
    seer_host_close(h);
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

Test(host, atomic_write_replaces_and_keeps_mode) {
    char *d = make_tmpdir();
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/notebook.ipynb", d);
    seer_err_t err;
    cr_assert_eq(seer_host_write_file_atomic(p, "first", 5, &err), SEER_OK, "%s", err.msg);
    cr_assert_eq(chmod(p, 0600), 0);
    cr_assert_eq(seer_host_write_file_atomic(p, "second version", 14, &err), SEER_OK, "%s", err.msg);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    cr_assert_eq(st.st_size, 14);
    char buf[32] = {0};
    FILE *f = fopen(p, "rb");
    cr_assert_eq(fread(buf, 1, sizeof buf, f), 14);
    fclose(f);
    cr_assert_str_eq(buf, "second version");
    cr_assert_eq(count_entries(d), 1, "a temporary file was left behind");
    rm_rf(d);
    free(d);
}

Test(host, atomic_write_failure_leaves_old_file_and_no_temp) {
    char *d = make_tmpdir();
    char p[PATH_MAX];
    seer_err_t err;
    snprintf(p, sizeof p, "%s/missing/dir/file.txt", d);
    cr_assert_eq(seer_host_write_file_atomic(p, "x", 1, &err), SEER_EIO);
    cr_assert(strstr(err.msg, "cannot write") != NULL && strstr(err.msg, "No such file") != NULL, "%s", err.msg);
    /* Target is a directory: rename fails, the temp file is removed. */
    snprintf(p, sizeof p, "%s/sub", d);
    cr_assert_eq(mkdir(p, 0755), 0);
    cr_assert_eq(seer_host_write_file_atomic(p, "x", 1, &err), SEER_EIO);
    cr_assert_eq(count_entries(d), 1);
    rm_rf(d);
    free(d);
}

Test(err, long_messages_are_cut_visibly) {
    seer_err_t err;
    char big[SEER_ERR_MSG_MAX * 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_assert_eq(seer_err_set(&err, SEER_EINVAL, "%s", big), SEER_EINVAL);
    cr_assert_eq(err.code, SEER_EINVAL);
    cr_assert_eq(strlen(err.msg), SEER_ERR_MSG_MAX - 1);
    cr_assert(strstr(err.msg, "(message truncated)") != NULL);
    cr_assert_eq(seer_err_set(NULL, SEER_EIO, "ignored"), SEER_EIO);
    seer_err_clear(&err);
    cr_assert_eq(err.code, SEER_OK);
    cr_assert_str_eq(err.msg, "");
}

Test(version, strings_are_consistent) {
    cr_assert(strstr(seer_version_long(), seer_version()) != NULL);
    cr_assert(strncmp(seer_version_long(), "seer ", 5) == 0);
}
