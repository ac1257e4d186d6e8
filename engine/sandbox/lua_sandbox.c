/* seer.core.sandbox: cgroups, the keeper and child processes for lua/seer/sandbox.lua (host
 * side) and lua/seer/cli/sandboxd.lua (inside the sandbox). */
#include <math.h>
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox.h"
#include "host/host.h"

int seer_sandbox_luaopen(lua_State *L);

#define PROC_MT "seer.sandbox.proc"

/* ------------------------------------------------------------------------------------------
 * argument helpers; string arrays live in userdata so a Lua error cannot leak them */

typedef struct strv {
    const char **v;
    int n;
} strv_t;

static int strv_gc(lua_State *L) {
    strv_t *s = lua_touserdata(L, 1);
    free(s->v);
    s->v = NULL;
    return 0;
}

/* A NULL-terminated array of the strings of list t[key] (a list), or of "K=V" for a map when
 * as_env. The strings stay alive through the table; the array through a userdata pushed on the
 * stack. Returns NULL when the field is nil. */
static const char **strv_field(lua_State *L, int t, const char *key, int as_env) {
    lua_getfield(L, t, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    if (!lua_istable(L, -1)) luaL_error(L, "seer.core.sandbox: '%s' must be a table", key);
    int list = lua_gettop(L);
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, list)) {
        n++;
        lua_pop(L, 1);
    }
    strv_t *s = lua_newuserdata(L, sizeof *s);
    s->v = NULL;
    s->n = 0;
    lua_newtable(L);
    lua_pushcfunction(L, strv_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    s->v = calloc((size_t)n + 1, sizeof *s->v);
    if (!s->v) luaL_error(L, "out of memory");
    if (as_env) {
        /* "K=V" strings are made in Lua and kept in a table anchored to the userdata's env */
        lua_newtable(L);
        int keep = lua_gettop(L);
        lua_pushnil(L);
        int i = 0;
        while (lua_next(L, list)) {
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
                luaL_error(L, "seer.core.sandbox: '%s' must map names to strings", key);
            lua_pushfstring(L, "%s=%s", lua_tostring(L, -2), lua_tostring(L, -1));
            s->v[i++] = lua_tostring(L, -1);
            lua_rawseti(L, keep, i);
            lua_pop(L, 1);
        }
        lua_setfenv(L, -2); /* the userdata keeps the strings alive */
    } else {
        for (int i = 1; i <= n; i++) {
            lua_rawgeti(L, list, i);
            if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "seer.core.sandbox: '%s'[%d] must be a string", key, i);
            s->v[i - 1] = lua_tostring(L, -1);
            lua_pop(L, 1);
        }
    }
    lua_remove(L, list); /* the userdata stays on the stack, the list stays in the options table */
    return s->v;
}

static const char *opt_str(lua_State *L, int t, const char *key) {
    lua_getfield(L, t, key);
    const char *s = NULL;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "seer.core.sandbox: '%s' must be a string", key);
        s = lua_tostring(L, -1);
    }
    lua_pop(L, 1);
    return s;
}

/* A limit or a time in a table: a whole number >= 0 (dflt when absent). */
static int64_t opt_num(lua_State *L, int t, const char *key, int64_t dflt) {
    lua_getfield(L, t, key);
    char what[64];
    snprintf(what, sizeof what, "seer.core.sandbox: '%s'", key);
    if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TNUMBER) luaL_error(L, "%s must be a number", what);
    int64_t v = seer_lua_optint(L, -1, dflt, 0, INT64_MAX, what);
    lua_pop(L, 1);
    return v;
}

static void read_rlimits(lua_State *L, int t, seer_sandbox_rlimits_t *r) {
    memset(r, 0, sizeof *r);
    lua_getfield(L, t, "rlimits");
    if (lua_istable(L, -1)) {
        int i = lua_gettop(L);
        /* CPU time may be fractional (environment.lua allows any positive number); RLIMIT_CPU
         * counts whole seconds, so it is rounded up: 0.5 must not become 0, "no limit" */
        lua_getfield(L, i, "cpu_seconds");
        if (!lua_isnil(L, -1)) {
            double c = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
            if (!(c >= 0 && c <= 9007199254740992.0))
                luaL_error(L, "seer.core.sandbox: 'cpu_seconds' must be a finite number >= 0, got %s",
                           lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
            r->cpu_seconds = (long)ceil(c);
        }
        lua_pop(L, 1);
        r->open_files = (long)opt_num(L, i, "open_files", 0);
        r->address_space = (unsigned long long)opt_num(L, i, "address_space", 0);
        r->processes = (long)opt_num(L, i, "processes", 0);
    }
    lua_pop(L, 1);
}

static void read_cgroup(lua_State *L, int t, seer_sandbox_cgroup_t *cg) {
    memset(cg, 0, sizeof *cg);
    if (!lua_istable(L, t)) return;
    const char *m = opt_str(L, t, "memory"), *p = opt_str(L, t, "pids");
    if (m) snprintf(cg->memory, sizeof cg->memory, "%s", m);
    if (p) snprintf(cg->pids, sizeof cg->pids, "%s", p);
}

/* ------------------------------------------------------------------------------------------
 * cgroups and the keeper */

/* cgroup_create(name, memory_bytes, pids_max) -> {memory=, pids=}, notes */
static int l_cgroup_create(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    int64_t mem = seer_lua_optint(L, 2, 0, 0, INT64_MAX, "cgroup_create: memory bytes"),
            pids = seer_lua_optint(L, 3, 0, 0, INT32_MAX, "cgroup_create: pids");
    seer_sandbox_cgroup_t cg;
    char notes[2048];
    seer_err_t err;
    if (seer_sandbox_cgroup_create(name, (unsigned long long)mem, (long)pids, &cg, notes, sizeof notes, &err) < 0)
        return luaL_error(L, "%s", err.msg);
    lua_newtable(L);
    if (cg.memory[0]) {
        lua_pushstring(L, cg.memory);
        lua_setfield(L, -2, "memory");
    }
    if (cg.pids[0]) {
        lua_pushstring(L, cg.pids);
        lua_setfield(L, -2, "pids");
    }
    lua_pushstring(L, notes);
    return 2;
}

static int l_cgroup_destroy(lua_State *L) {
    seer_sandbox_cgroup_t cg;
    luaL_checktype(L, 1, LUA_TTABLE);
    read_cgroup(L, 1, &cg);
    lua_pushboolean(L, seer_sandbox_cgroup_destroy(&cg, seer_lua_opttimeout(L, 2, 3000, "cgroup_destroy: timeout")) == 0);
    return 1;
}

static void set_num(lua_State *L, const char *k, double v) {
    if (v < 0) return;
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static int l_cgroup_stats(lua_State *L) {
    seer_sandbox_cgroup_t cg;
    luaL_checktype(L, 1, LUA_TTABLE);
    read_cgroup(L, 1, &cg);
    seer_sandbox_cgroup_stats_t st;
    seer_sandbox_cgroup_stats(&cg, &st);
    lua_newtable(L);
    if (st.memory_limit) set_num(L, "memory_limit", (double)st.memory_limit);
    if (cg.memory[0]) set_num(L, "memory_peak", (double)st.memory_peak);
    set_num(L, "memory_failcnt", (double)st.memory_failcnt);
    set_num(L, "oom_kills", (double)st.oom_kills);
    set_num(L, "pids_max_hits", (double)st.pids_max_hits);
    set_num(L, "pids_current", (double)st.pids_current);
    return 1;
}

/* keeper_start{argv, env, log, status, state_dir, cgroup, rlimits, timeout_ms, fd_args, pass_fds, remove_dirs, detach}
 * -> pid (fd_args: given to the child on its fd 3, for bwrap --args 3; pass_fds: on its fds 4, 5, ...) */
static int l_keeper_start(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    seer_sandbox_keeper_opts_t o;
    memset(&o, 0, sizeof o);
    o.argv = strv_field(L, 1, "argv", 0);
    if (!o.argv) return luaL_error(L, "keeper_start: argv is required");
    o.envp = strv_field(L, 1, "env", 1);
    o.log_path = opt_str(L, 1, "log");
    o.status_path = opt_str(L, 1, "status");
    o.state_dir = opt_str(L, 1, "state_dir");
    o.disk_image = opt_str(L, 1, "disk_image");
    o.timeout_ms = (long)opt_num(L, 1, "timeout_ms", 0);
    lua_getfield(L, 1, "detach");
    o.detach = lua_toboolean(L, -1);
    lua_pop(L, 1);
    o.fd_args = strv_field(L, 1, "fd_args", 0);
    o.remove_dirs = strv_field(L, 1, "remove_dirs", 0);
    /* pass_fds: descriptors for the child's fds 4, 5, ... (bwrap --ro-bind-fd) */
    lua_getfield(L, 1, "pass_fds");
    if (!lua_isnil(L, -1)) {
        luaL_checktype(L, -1, LUA_TTABLE);
        size_t n = lua_objlen(L, -1);
        if (n > SEER_SANDBOX_PASS_FDS_MAX)
            return luaL_error(L, "keeper_start: pass_fds holds %d descriptors at most, not %d", SEER_SANDBOX_PASS_FDS_MAX, (int)n);
        int *fds = lua_newuserdata(L, (n ? n : 1) * sizeof *fds); /* collected with the call */
        for (size_t i = 0; i < n; i++) {
            lua_rawgeti(L, -2, (int)i + 1);
            fds[i] = (int)seer_lua_int(L, -1, 0, INT32_MAX, "keeper_start: pass_fds[i]");
            lua_pop(L, 1);
        }
        o.pass_fds = fds;
        o.npass_fds = (int)n;
    }
    read_rlimits(L, 1, &o.rlimits);
    seer_sandbox_cgroup_t cg;
    lua_getfield(L, 1, "cgroup");
    if (lua_istable(L, -1)) {
        read_cgroup(L, lua_gettop(L), &cg);
        o.cgroup = &cg;
    }
    lua_pop(L, 1);
    pid_t pid;
    seer_err_t err;
    if (seer_sandbox_keeper_start(&o, &pid, &err) < 0) return luaL_error(L, "%s", err.msg);
    lua_pushinteger(L, pid);
    return 1;
}

/* raise_nofile(n) -> true when this process's soft limit on open files is now n or more (raised
 * up to the hard limit, never past it) */
static int l_raise_nofile(lua_State *L) {
    int64_t n = seer_lua_int(L, 1, 0, INT32_MAX, "raise_nofile: n");
    struct rlimit rl;
    int ok = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)n && (rl.rlim_max == RLIM_INFINITY || rl.rlim_cur < rl.rlim_max)) {
            rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)n ? rl.rlim_max : (rlim_t)n;
            (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
        ok = getrlimit(RLIMIT_NOFILE, &rl) == 0 && (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)n);
    }
    lua_pushboolean(L, ok);
    return 1;
}

/* ------------------------------------------------------------------------------------------
 * processes by pid */

static void push_status(lua_State *L, int st) {
    lua_newtable(L);
    if (WIFEXITED(st)) {
        lua_pushinteger(L, WEXITSTATUS(st));
        lua_setfield(L, -2, "code");
    } else if (WIFSIGNALED(st)) {
        lua_pushinteger(L, 128 + WTERMSIG(st));
        lua_setfield(L, -2, "code");
        lua_pushinteger(L, WTERMSIG(st));
        lua_setfield(L, -2, "signal");
    }
}

/* A process id from Lua: a whole number >= 1. 0 and negative numbers mean process groups (or
 * every process) to kill() and waitpid(), never what a caller here means. */
static pid_t pid_arg(lua_State *L, int idx, const char *op) {
    char what[48];
    snprintf(what, sizeof what, "%s: pid", op);
    return (pid_t)seer_lua_int(L, idx, 1, INT32_MAX, what);
}

/* waitpid(pid [, block]) -> nil (still running) | status table | false (not our child) */
static int l_waitpid(lua_State *L) {
    pid_t pid = pid_arg(L, 1, "waitpid");
    int st;
    pid_t r = waitpid(pid, &st, lua_toboolean(L, 2) ? 0 : WNOHANG);
    if (r == 0) return 0;
    if (r < 0) {
        lua_pushboolean(L, 0);
        return 1;
    }
    push_status(L, st);
    return 1;
}

static int l_kill(lua_State *L) {
    pid_t pid = pid_arg(L, 1, "kill");
    int sig = (int)seer_lua_optint(L, 2, SIGTERM, 0, 64, "kill: signal");
    lua_pushboolean(L, kill(pid, sig) == 0);
    return 1;
}

/* alive(pid): the process exists (zombies count as gone). */
static int l_alive(lua_State *L) {
    pid_t pid = pid_arg(L, 1, "alive");
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) {
        lua_pushboolean(L, 0);
        return 1;
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    lua_pushboolean(L, p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X');
    return 1;
}

/* start_time(pid) -> clock ticks since boot (field 22 of /proc/pid/stat), to tell a pid from a
 * reused one; nil when the process does not exist. */
static int l_start_time(lua_State *L) {
    pid_t pid = pid_arg(L, 1, "start_time");
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    /* after ") " comes field 3 (state); field 22 is 19 fields later */
    p += 2;
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p, ' ');
        if (p) p++;
    }
    if (!p) return 0;
    lua_pushnumber(L, strtod(p, NULL));
    return 1;
}

/* environ() -> {"K=V", ...}: this process's environment */
static int l_environ(lua_State *L) {
    extern char **environ;
    lua_newtable(L);
    int i = 0;
    for (char **e = environ; e && *e; e++) {
        lua_pushstring(L, *e);
        lua_rawseti(L, -2, ++i);
    }
    return 1;
}

/* listdir(path) -> {{name, type = "file"|"dir"|"link"|"other", size, mtime}, ...} sorted by
 * name | nil, message */
/* listdir(path[, max]) -> {{name, type, size, mtime, uid}, ...}, or nil and the reason; with
 * max, a folder of more than max entries is nil and "<path>: more than <max> entries" (a folder a
 * sandbox could fill, read by the host, must not grow the host's memory without bound). */
static int l_listdir(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    lua_Integer max = luaL_optinteger(L, 2, 0);
    if (max < 0) return luaL_error(L, "listdir: max must be a positive count of entries (or absent), got %d", (int)max);
    DIR *d = opendir(path);
    if (!d) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    lua_newtable(L);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (max > 0 && n >= max) {
            closedir(d);
            lua_pop(L, 1);
            lua_pushnil(L);
            lua_pushfstring(L, "%s: more than %d entries", path, (int)max);
            return 2;
        }
        struct stat st;
        const char *type = "other";
        lua_newtable(L);
        lua_pushstring(L, e->d_name);
        lua_setfield(L, -2, "name");
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            type = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : S_ISLNK(st.st_mode) ? "link" : "other";
            lua_pushnumber(L, (lua_Number)st.st_size);
            lua_setfield(L, -2, "size");
            lua_pushnumber(L, (lua_Number)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9);
            lua_setfield(L, -2, "mtime");
            lua_pushnumber(L, (lua_Number)st.st_uid);
            lua_setfield(L, -2, "uid");
        }
        lua_pushstring(L, type);
        lua_setfield(L, -2, "type");
        lua_rawseti(L, -2, ++n);
    }
    closedir(d);
    return 1;
}

/* ------------------------------------------------------------------------------------------
 * proc userdata */

static seer_sandbox_proc_t *check_proc(lua_State *L) { return luaL_checkudata(L, 1, PROC_MT); }

/* spawn{argv, env, cwd, stdin = bool, output = path, rlimits} -> proc */
static int l_spawn(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    seer_sandbox_spawn_opts_t o;
    memset(&o, 0, sizeof o);
    o.argv = strv_field(L, 1, "argv", 0);
    if (!o.argv) return luaL_error(L, "spawn: argv is required");
    o.envp = strv_field(L, 1, "env", 1);
    o.cwd = opt_str(L, 1, "cwd");
    o.output_path = opt_str(L, 1, "output");
    lua_getfield(L, 1, "stdin");
    o.pipe_stdin = lua_toboolean(L, -1);
    lua_pop(L, 1);
    read_rlimits(L, 1, &o.rlimits);
    seer_sandbox_proc_t *p = lua_newuserdata(L, sizeof *p);
    memset(p, 0, sizeof *p);
    p->in_fd = p->out_fd = p->err_fd = -1;
    luaL_getmetatable(L, PROC_MT);
    lua_setmetatable(L, -2);
    seer_err_t err;
    if (seer_sandbox_proc_spawn(&o, p, &err) < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err.msg);
        return 2;
    }
    return 1;
}

static int proc_pid(lua_State *L) {
    lua_pushinteger(L, check_proc(L)->pid);
    return 1;
}

/* fds() -> stdout fd, stderr fd, stdin fd (-1 for closed ones) */
static int proc_fds(lua_State *L) {
    seer_sandbox_proc_t *p = check_proc(L);
    lua_pushinteger(L, p->out_fd);
    lua_pushinteger(L, p->err_fd);
    lua_pushinteger(L, p->in_fd);
    return 3;
}

/* read("out"|"err", max) -> data | "" (nothing now) | nil (end of stream; the fd is closed) */
static int proc_read(lua_State *L) {
    seer_sandbox_proc_t *p = check_proc(L);
    const char *which = luaL_checkstring(L, 2);
    size_t max = (size_t)seer_lua_optint(L, 3, 65536, 0, INT64_MAX, "read: max bytes");
    int *fd = strcmp(which, "err") == 0 ? &p->err_fd : &p->out_fd;
    if (*fd < 0) return 0;
    if (max == 0 || max > (1u << 24)) max = 65536;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    char *buf = malloc(max);
    if (!buf) return luaL_error(L, "out of memory");
    ssize_t r;
    do r = read(*fd, buf, max);
    while (r < 0 && errno == EINTR);
    if (r > 0) {
        luaL_addlstring(&b, buf, (size_t)r);
        free(buf);
        luaL_pushresult(&b);
        return 1;
    }
    free(buf);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        lua_pushliteral(L, "");
        return 1;
    }
    close(*fd);
    *fd = -1;
    return 0;
}

/* write(data) -> bytes written now (0 when the pipe is full); nil, why when it is closed */
static int proc_write(lua_State *L) {
    seer_sandbox_proc_t *p = check_proc(L);
    size_t n;
    const char *s = luaL_checklstring(L, 2, &n);
    if (p->in_fd < 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "stdin is closed");
        return 2;
    }
    /* The child may have closed its stdin (or died): SIGPIPE is blocked for this thread while
     * writing and a pending one consumed, so that is EPIPE here, never a killed process (in
     * sandboxd, pid 1, that would end the whole sandbox). */
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t w;
    do w = write(p->in_fd, s, n);
    while (w < 0 && errno == EINTR);
    int e = errno;
    if (w < 0 && e == EPIPE && !was_pending) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (w < 0 && (e == EAGAIN || e == EWOULDBLOCK)) w = 0;
    if (w < 0) {
        lua_pushnil(L);
        lua_pushstring(L, e == EPIPE ? "EPIPE" : strerror(e));
        return 2;
    }
    lua_pushinteger(L, (lua_Integer)w);
    return 1;
}

static int proc_close_stdin(lua_State *L) {
    seer_sandbox_proc_t *p = check_proc(L);
    if (p->in_fd >= 0) close(p->in_fd);
    p->in_fd = -1;
    return 0;
}

/* poll() -> nil while running, else {code, signal?} */
static int proc_poll(lua_State *L) {
    seer_sandbox_proc_t *p = check_proc(L);
    if (!seer_sandbox_proc_poll(p)) return 0;
    lua_newtable(L);
    lua_pushinteger(L, p->code);
    lua_setfield(L, -2, "code");
    if (p->signal) {
        lua_pushinteger(L, p->signal);
        lua_setfield(L, -2, "signal");
    }
    return 1;
}

static int proc_kill(lua_State *L) {
    seer_sandbox_proc_t *p = check_proc(L);
    seer_sandbox_proc_kill(p, (int)seer_lua_optint(L, 2, SIGKILL, 0, 64, "kill: signal"));
    return 0;
}

static int proc_close(lua_State *L) {
    seer_sandbox_proc_close(check_proc(L));
    return 0;
}

/* Collected while running: the group is killed and reaped so nothing is left behind, waiting
 * at most 2 s for the reaping: a process in an uninterruptible sleep (a hung FUSE or NFS mount)
 * ignores SIGKILL until it leaves it, and an unbounded wait here would hold a collection, or the
 * host's exit, with it. Not reaped by then, it is left as it is (a zombie until this process
 * ends, when init takes it). */
static int proc_gc(lua_State *L) {
    seer_sandbox_proc_t *p = check_proc(L);
    if (p->pid > 0 && !seer_sandbox_proc_poll(p)) {
        seer_sandbox_proc_kill(p, SIGKILL);
        for (int i = 0; i < 2000 && !seer_sandbox_proc_poll(p); i++) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    seer_sandbox_proc_close(p);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * finding what could name a hidden model */

/* The character at text[i] as a reader of names sees it: a lowercase letter or a digit, or 0
 * for anything else (punctuation, spaces, other scripts' bytes); *next is where the next one
 * starts. In json mode a \uXXXX escape of an ASCII letter or digit is that character, and
 * another escape (\n, \", \\) is one non-character, so an escaped name is still found. */
static char fold_at(const char *text, size_t len, size_t i, int json, size_t *next) {
    unsigned char c = (unsigned char)text[i];
    *next = i + 1;
    if (json && c == '\\' && i + 1 < len) {
        if (text[i + 1] == 'u' && i + 5 < len) {
            unsigned v = 0;
            int ok = 1;
            for (int k = 2; k < 6; k++) {
                int h = text[i + k];
                v <<= 4;
                if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
                else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
                else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
                else ok = 0;
            }
            if (ok) {
                *next = i + 6;
                c = v < 0x80 ? (unsigned char)v : 0;
            }
        } else {
            *next = i + 2;
            return 0;
        }
    }
    if (c >= 'A' && c <= 'Z') return (char)(c - 'A' + 'a');
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return (char)c;
    return 0;
}

/* find_fragment(text, fragments, init, json) -> start, end, index | nil: the first place in
 * text (from byte init, 1-based) where one of the fragments occurs when both are compared
 * letters and digits only, case-folded: "Org/Name", "org--name" and "ORG name" all hold
 * "orgname". start and end are the byte positions (1-based, inclusive) of the occurrence in
 * text; index is the fragment's place in the list. Used to keep a hidden model's id out of
 * the files and paths a sandbox can read (lua/seer/sandbox.lua). */
static int l_find_fragment(lua_State *L) {
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    luaL_checktype(L, 2, LUA_TTABLE);
    int64_t init = seer_lua_optint(L, 3, 1, INT64_MIN, INT64_MAX, "find_fragment: start");
    int json = lua_toboolean(L, 4);
    if (init < 1) init = 1;
    if ((size_t)init > len) return 0;
    int nf = (int)lua_objlen(L, 2);
    /* the folded text, from init */
    char *norm = malloc(len - (size_t)init + 2);
    if (!norm) return luaL_error(L, "out of memory");
    size_t nn = 0;
    for (size_t i = (size_t)init - 1, next; i < len; i = next) {
        char c = fold_at(text, len, i, json, &next);
        if (c) norm[nn++] = c;
    }
    size_t best = (size_t)-1, best_len = 0;
    int best_index = 0;
    char frag[512];
    for (int f = 1; f <= nf; f++) {
        lua_rawgeti(L, 2, f);
        size_t fl;
        const char *fs = lua_tolstring(L, -1, &fl);
        size_t k = 0;
        for (size_t i = 0, next; fs && i < fl && k < sizeof frag; i = next) {
            char c = fold_at(fs, fl, i, 0, &next);
            if (c) frag[k++] = c;
        }
        lua_pop(L, 1);
        if (k == 0 || k > nn) continue;
        const char *hit = memmem(norm, nn, frag, k);
        if (hit && (size_t)(hit - norm) < best) {
            best = (size_t)(hit - norm);
            best_len = k;
            best_index = f;
        }
    }
    free(norm);
    if (!best_index) return 0;
    /* back from folded positions to byte positions */
    size_t count = 0, start = 0, end = 0;
    for (size_t i = (size_t)init - 1, next; i < len; i = next) {
        char c = fold_at(text, len, i, json, &next);
        if (!c) continue;
        if (count == best) start = i;
        if (count == best + best_len - 1) {
            end = next;
            break;
        }
        count++;
    }
    lua_pushinteger(L, (lua_Integer)start + 1);
    lua_pushinteger(L, (lua_Integer)end);
    lua_pushinteger(L, best_index);
    return 3;
}

/* ------------------------------------------------------------------------------------------
 * the kernel's attack surface: what sandboxd does to itself before it runs anything */

/* seccomp_install() -> true | nil, message (docs/sandbox.md "System calls") */
static int l_seccomp_install(lua_State *L) {
    seer_err_t err;
    if (seer_sandbox_seccomp_install(&err) < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err.msg);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* keyring_new_session() -> true | nil, message */
static int l_keyring_new_session(lua_State *L) {
    seer_err_t err;
    if (seer_sandbox_keyring_new_session(&err) < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err.msg);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* set_dumpable(flag) -> true | nil, message. A process that is not dumpable cannot be read
 * through /proc/PID/mem, environ, maps, ... by the other processes of its user (sandboxd holds
 * its key in memory); its children are dumpable again after execve. */
static int l_set_dumpable(lua_State *L) {
    if (prctl(PR_SET_DUMPABLE, lua_toboolean(L, 1) ? 1 : 0, 0, 0, 0) != 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "prctl(PR_SET_DUMPABLE): %s", strerror(errno));
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* reap_orphans(known) -> count. sandboxd is the sandbox's pid 1 (bubblewrap --as-pid-1, so no
 * process inside runs without the seccomp filter), and orphans (`setsid cmd &` from an exec)
 * are re-parented to it: this reaps those that have ended, leaving alone the children sandboxd
 * tracks itself (known: a set of pids), whose exit status their owners collect. */
static int l_reap_orphans(lua_State *L) {
    int known = lua_istable(L, 1) ? 1 : 0;
    pid_t self = getpid();
    DIR *d = opendir("/proc");
    int reaped = 0;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            char *end;
            long pid = strtol(e->d_name, &end, 10);
            if (*end || pid <= 0 || pid == self) continue;
            char path[64], buf[512];
            snprintf(path, sizeof path, "/proc/%ld/stat", pid);
            FILE *f = fopen(path, "re");
            if (!f) continue;
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = 0;
            /* "pid (comm) S ppid ..." */
            char *p = strrchr(buf, ')');
            char state;
            long ppid;
            if (!p || sscanf(p + 1, " %c %ld", &state, &ppid) != 2) continue;
            if (state != 'Z' || ppid != (long)self) continue;
            if (known) {
                lua_pushinteger(L, (lua_Integer)pid);
                lua_rawget(L, known);
                int tracked = lua_toboolean(L, -1);
                lua_pop(L, 1);
                if (tracked) continue;
            }
            int st;
            if (waitpid((pid_t)pid, &st, WNOHANG) == (pid_t)pid) reaped++;
        }
        closedir(d);
    }
    lua_pushinteger(L, reaped);
    return 1;
}

int seer_sandbox_luaopen(lua_State *L) {
    static const luaL_Reg methods[] = {{"pid", proc_pid},     {"fds", proc_fds},   {"read", proc_read},
                                       {"write", proc_write}, {"close_stdin", proc_close_stdin},
                                       {"poll", proc_poll},   {"kill", proc_kill}, {"close", proc_close},
                                       {NULL, NULL}};
    luaL_newmetatable(L, PROC_MT);
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, proc_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);

    static const luaL_Reg fns[] = {{"cgroup_create", l_cgroup_create},
                                   {"cgroup_destroy", l_cgroup_destroy},
                                   {"cgroup_stats", l_cgroup_stats},
                                   {"keeper_start", l_keeper_start},
                                   {"raise_nofile", l_raise_nofile},
                                   {"spawn", l_spawn},
                                   {"waitpid", l_waitpid},
                                   {"kill", l_kill},
                                   {"alive", l_alive},
                                   {"start_time", l_start_time},
                                   {"listdir", l_listdir},
                                   {"environ", l_environ},
                                   {"find_fragment", l_find_fragment},
                                   {"seccomp_install", l_seccomp_install},
                                   {"keyring_new_session", l_keyring_new_session},
                                   {"set_dumpable", l_set_dumpable},
                                   {"reap_orphans", l_reap_orphans},
                                   {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, fns);
    seer_sandbox_fs_lua_register(L); /* fs_read, fs_write, ...: safe_fs.c */
    static const struct {
        const char *name;
        int sig;
    } sigs[] = {{"SIGTERM", SIGTERM}, {"SIGKILL", SIGKILL}, {"SIGINT", SIGINT}, {"SIGHUP", SIGHUP}, {"SIGSTOP", SIGSTOP}, {"SIGCONT", SIGCONT}};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        lua_pushinteger(L, sigs[i].sig);
        lua_setfield(L, -2, sigs[i].name);
    }
    return 1;
}
