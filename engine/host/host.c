/* The Lua state of a seer process: libraries, module search path, seer.core.* registration,
 * running scripts and chunks under a traceback handler, and Ctrl-C delivery into Lua code.
 * The REPL is in repl.c; the seer.core.host functions exposed to Lua are in corelib.c. */
#include "host.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>

#include "../json/json.h"
#include "host_private.h"

int seer_tensor_luaopen(lua_State *L) __attribute__((weak));
int seer_tokenizer_luaopen(lua_State *L) __attribute__((weak));
int seer_chat_template_luaopen(lua_State *L) __attribute__((weak));
int seer_model_luaopen(lua_State *L) __attribute__((weak));
int seer_hooks_luaopen(lua_State *L) __attribute__((weak));
int seer_net_luaopen(lua_State *L) __attribute__((weak));
int seer_http_luaopen(lua_State *L) __attribute__((weak));
int seer_png_luaopen(lua_State *L) __attribute__((weak));
int seer_mcp_luaopen(lua_State *L) __attribute__((weak));
int seer_mcphttp_luaopen(lua_State *L) __attribute__((weak));
int seer_hub_luaopen(lua_State *L) __attribute__((weak));
int seer_httpc_luaopen(lua_State *L) __attribute__((weak));
int seer_sandbox_luaopen(lua_State *L) __attribute__((weak));
int seer_rpc_luaopen(lua_State *L) __attribute__((weak));
int seer_harness_luaopen(lua_State *L) __attribute__((weak));

struct seer_host {
    lua_State *L;
    char lua_dir[PATH_MAX];
};

/* ---- Ctrl-C -----------------------------------------------------------------------------
 * Signals are process-wide, so the state the handler touches is necessarily global: the Lua
 * state to interrupt and how many Ctrl-Cs arrived since the code started. lua_sethook is the
 * one Lua API call documented as safe from a signal handler. */
static lua_State *volatile g_sig_L;
static volatile sig_atomic_t g_sig_count;
static volatile sig_atomic_t g_hook_fired;
static struct sigaction g_prev_action;
static int g_armed;

static void on_interrupt_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    g_hook_fired = 1;
    g_sig_count = 0;
    luaL_where(L, 0); /* a C hook adds no frame: level 0 is the running Lua code */
    lua_pushfstring(L, "%sinterrupted", lua_tostring(L, -1));
    lua_error(L);
}

static void write_stderr(const char *s) {
    ssize_t r = write(STDERR_FILENO, s, strlen(s));
    (void)r;
}

static void on_sigint(int sig) {
    (void)sig;
    int n = ++g_sig_count;
    if (n == 1) {
        if (g_sig_L) lua_sethook(g_sig_L, on_interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
    } else if (n == 2) {
        write_stderr("\nseer: still running (JIT-compiled Lua or C code cannot always be "
                     "interrupted); press Ctrl-C again to quit\n");
    } else {
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
    }
}

/* SIGTERM (or SIGHUP, when it is not ignored) while a script runs (`seer FILE.lua`, the process
 * of an experiment) ends it as Ctrl-C does: "interrupted" is raised in the running code, so the
 * script's cleanup runs (sessions terminated, notebooks saved with a running cell's output so
 * far, the run's ledger written) instead of the process vanishing with them. A second SIGTERM (a second or more after the first:
 * one sooner is the same request), or one before the script's code runs, ends the process at
 * once, so a script stuck where it cannot be interrupted still goes.
 * Only scripts: seer's own commands (sandboxd, servers) keep SIGTERM's default. */
static volatile sig_atomic_t g_term_count;

static unsigned g_term_grace = 15; /* seconds; SEER_SIGTERM_GRACE_S, read when a script starts */
static struct timespec g_term_first;
static void on_sigterm(int sig) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
    if (g_term_count > 0 && g_sig_L) {
        long long ms = (long long)(now.tv_sec - g_term_first.tv_sec) * 1000 + (now.tv_nsec - g_term_first.tv_nsec) / 1000000;
        /* the same request twice: a process that dies sends its children's parent-death signal
         * once per thread that exits (the notebook server got two SIGTERMs 0.6 ms apart when its
         * experiment was killed, and lost the running cell in half the runs) */
        if (ms < 1000) return;
    }
    if (g_term_count++ == 0 && g_sig_L) {
        g_term_first = now;
        if (++g_sig_count == 1) lua_sethook(g_sig_L, on_interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
        /* whoever sent it (timeout(1), systemd, kill) sends it once: a process stuck in C code
         * that never returns to Lua, or a cleanup that hangs, must still end. SIGALRM's default
         * action ends the process g_term_grace seconds from now (seer sets no alarm itself). */
        signal(SIGALRM, SIG_DFL);
        alarm(g_term_grace);
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Calls nest (C code run from Lua may call back into Lua through seer_host_pcall): only the
 * outermost call installs and restores the handler. */
void seer_host_interrupt_arm(lua_State *L) {
    if (g_armed++ > 0) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a blocking read returns so the hook can run */
    g_sig_L = L;
    g_sig_count = 0;
    g_hook_fired = 0;
    sigaction(SIGINT, &sa, &g_prev_action);
}

void seer_host_interrupt_disarm(lua_State *L) {
    if (g_armed == 0 || --g_armed > 0) return;
    sigaction(SIGINT, &g_prev_action, NULL);
    g_sig_L = NULL;
    /* A Ctrl-C that arrived after the last hook check must not fire in the next call. */
    lua_sethook(L, NULL, 0, 0);
}

bool seer_host_interrupted(void) { return g_sig_count > 0; }

int seer_host_interrupt_raise(lua_State *L) {
    lua_sethook(L, NULL, 0, 0);
    g_hook_fired = 1;
    g_sig_count = 0;
    return luaL_error(L, "interrupted");
}

void seer_host_interrupt_clear(void) {
    g_sig_count = 0;
    g_hook_fired = 0;
}

/* ---- errors ------------------------------------------------------------------------------ */

/* Message handler: turns any error value into "message\nstack traceback:\n...". */
static int traceback_handler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) {
            msg = lua_tostring(L, -1);
        } else {
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
        }
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int seer_host_pcall(seer_host_t *h, int nargs, int nresults, seer_err_t *err) {
    lua_State *L = h->L;
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, traceback_handler);
    lua_insert(L, base);
    seer_host_interrupt_arm(L);
    int rc = lua_pcall(L, nargs, nresults, base);
    int interrupted = g_hook_fired;
    seer_host_interrupt_disarm(L);
    if (g_armed == 0) seer_host_interrupt_clear();
    lua_remove(L, base);
    if (rc == 0) return SEER_OK;
    const char *msg = lua_tostring(L, -1);
    int code = interrupted ? SEER_EINTR : rc == LUA_ERRMEM ? SEER_ENOMEM : SEER_ELUA;
    seer_err_set(err, code, "%s", msg ? msg : "(error without message)");
    lua_pop(L, 1);
    return code;
}

/* ---- module search path ------------------------------------------------------------------ */

/* snprintf that reports truncation instead of silently cutting a path. */
static int fmt_path(char *out, size_t n, const char *fmt, const char *a) {
    int w = snprintf(out, n, fmt, a);
    return w >= 0 && (size_t)w < n;
}

static int dir_has_seer(const char *dir) {
    char p[PATH_MAX];
    struct stat st;
    return fmt_path(p, sizeof p, "%s/seer/init.lua", dir) && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int find_lua_dir(const char *given, char *out, size_t outsz, seer_err_t *err) {
    char exe[PATH_MAX];
    const char *env = getenv("SEER_LUA_DIR");
    if (given && *given) {
        if (!dir_has_seer(given))
            return seer_err_set(err, SEER_ENOTFOUND, "seer's Lua tree is not in %s (no seer/init.lua there)", given);
        fmt_path(out, outsz, "%s", given);
        return SEER_OK;
    }
    if (env && *env) {
        if (!dir_has_seer(env))
            return seer_err_set(err, SEER_ENOTFOUND,
                                "SEER_LUA_DIR=%s does not hold seer's Lua tree (no seer/init.lua); "
                                "unset it or point it at the lua/ directory", env);
        fmt_path(out, outsz, "%s", env);
        return SEER_OK;
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0) return seer_err_set(err, SEER_EIO, "cannot locate the seer executable: %s", strerror(errno));
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    char a[PATH_MAX], b[PATH_MAX], real[PATH_MAX];
    int ok_a = fmt_path(a, sizeof a, "%s/lua", exe);
    int ok_b = fmt_path(b, sizeof b, "%s/../share/seer/lua", exe);
    if (ok_a && dir_has_seer(a)) {
        fmt_path(out, outsz, "%s", a);
    } else if (ok_b && dir_has_seer(b)) {
        fmt_path(out, outsz, "%s", realpath(b, real) ? real : b);
    } else {
        return seer_err_set(err, SEER_ENOTFOUND,
                            "cannot find seer's Lua tree: looked in %s and %s; reinstall with "
                            "`make install`, or set SEER_LUA_DIR to the lua/ directory", a, b);
    }
    return SEER_OK;
}

/* Puts dir's ?.lua and ?/init.lua (and those of dir/libraries) in front of package.path,
 * after seer's own tree so an experiment cannot shadow seer.* by accident. */
void seer_host_add_script_dir(lua_State *L, const char *dir, const char *lua_dir) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    const char *old = lua_tostring(L, -1);
    const char *rest = old;
    /* Strip seer's own prefix so it stays first. */
    char prefix[PATH_MAX * 2 + 64];
    snprintf(prefix, sizeof prefix, "%s/?.lua;%s/?/init.lua;", lua_dir, lua_dir);
    if (rest && strncmp(rest, prefix, strlen(prefix)) == 0) rest += strlen(prefix);
    lua_pushfstring(L, "%s%s/?.lua;%s/?/init.lua;%s/libraries/?.lua;%s/libraries/?/init.lua;%s",
                    prefix, dir, dir, dir, dir, rest ? rest : "");
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
}

static void set_package_path(lua_State *L, const char *lua_dir) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", lua_dir, lua_dir, lua_tostring(L, -1));
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
}

/* require("seer.core.sigterm").term_as_interrupt(): from now on SIGTERM ends the running code as
 * Ctrl-C does (on_sigterm). `seer notebook serve` calls it, so a SIGTERM saves its notebooks with
 * a running cell's output so far and marks that cell, as Ctrl-C does; seer's other commands keep
 * SIGTERM's default. */
static int l_term_as_interrupt(lua_State *L) {
    (void)L;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART, as for SIGINT */
    g_term_count = 0;
    sigaction(SIGTERM, &sa, NULL);
    return 0;
}

static int open_sigterm(lua_State *L) {
    lua_newtable(L);
    lua_pushcfunction(L, l_term_as_interrupt);
    lua_setfield(L, -2, "term_as_interrupt");
    return 1;
}

static void preload(lua_State *L, const char *name, lua_CFunction fn) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, fn);
    lua_setfield(L, -2, name);
    lua_pop(L, 2);
}

/* Runs `seer = require "seer"` so scripts, -e chunks and the REPL see the same environment. */
static int load_seer_global(lua_State *L) {
    lua_getglobal(L, "require");
    lua_pushliteral(L, "seer");
    lua_call(L, 1, 1);
    lua_setglobal(L, "seer");
    return 0;
}

int seer_host_open(seer_host_t **out, const seer_host_opts_t *opts, seer_err_t *err) {
    *out = NULL;
    seer_host_t *h = calloc(1, sizeof *h);
    if (!h) return seer_err_set(err, SEER_ENOMEM, "out of memory creating the Lua host");
    int rc = find_lua_dir(opts ? opts->lua_dir : NULL, h->lua_dir, sizeof h->lua_dir, err);
    if (rc < 0) {
        free(h);
        return rc;
    }
    h->L = luaL_newstate();
    if (!h->L) {
        free(h);
        return seer_err_set(err, SEER_ENOMEM, "cannot create a Lua state (out of memory)");
    }
    lua_State *L = h->L;
    luaL_openlibs(L); /* includes ffi, jit and bit in LuaJIT */
    set_package_path(L, h->lua_dir);
    preload(L, "seer.core.host", seer_host_corelib_open);
    preload(L, "seer.core.json", seer_json_luaopen);
    preload(L, "seer.core.sigterm", open_sigterm);
    /* Subsystems being built in parallel register here once they link in (weak until then). */
    if (seer_tensor_luaopen) preload(L, "seer.core.tensor", seer_tensor_luaopen);
    if (seer_tokenizer_luaopen) preload(L, "seer.core.tokenizer", seer_tokenizer_luaopen);
    if (seer_chat_template_luaopen) preload(L, "seer.core.chat_template", seer_chat_template_luaopen);
    if (seer_model_luaopen) preload(L, "seer.core.model", seer_model_luaopen);
    if (seer_hooks_luaopen) preload(L, "seer.core.hooks", seer_hooks_luaopen);
    if (seer_net_luaopen) preload(L, "seer.core.net", seer_net_luaopen);
    if (seer_http_luaopen) preload(L, "seer.core.http", seer_http_luaopen);
    if (seer_png_luaopen) preload(L, "seer.core.png", seer_png_luaopen);
    if (seer_mcp_luaopen) preload(L, "seer.core.mcp", seer_mcp_luaopen);
    if (seer_mcphttp_luaopen) preload(L, "seer.core.mcphttp", seer_mcphttp_luaopen);
    if (seer_hub_luaopen) preload(L, "seer.core.hub", seer_hub_luaopen);
    if (seer_httpc_luaopen) preload(L, "seer.core.httpc", seer_httpc_luaopen);
    if (seer_sandbox_luaopen) preload(L, "seer.core.sandbox", seer_sandbox_luaopen);
    if (seer_rpc_luaopen) preload(L, "seer.core.rpc", seer_rpc_luaopen);
    if (seer_harness_luaopen) preload(L, "seer.core.harness", seer_harness_luaopen);
    seer_host_corelib_configure(L, h->lua_dir, opts ? opts->progname : NULL);

    lua_pushcfunction(L, load_seer_global);
    rc = seer_host_pcall(h, 0, 0, err);
    if (rc < 0) {
        char msg[SEER_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        seer_err_set(err, rc, "loading seer's Lua modules from %s failed:\n%s", h->lua_dir, msg);
        seer_host_close(h);
        return rc;
    }
    *out = h;
    return SEER_OK;
}

/* seer.exit's handlers (an experiment's ledger, unfinished agents' transcripts, sandboxes and
 * notebook servers left running) run here, before lua_close, in a whole state: run from a
 * finalizer while the state closes, a cleanup loop once spun in LuaJIT's interpreter for good
 * (stop 65). Only a state that loaded seer.exit has any; os.exit ran them already (it is wrapped),
 * and they run once. Signals keep their defaults here (the script's code has returned): Ctrl-C
 * or SIGTERM during the cleanup ends the process, and the keeper takes the sandboxes. */
static void run_exit_handlers(lua_State *L) {
    int top = lua_gettop(L);
    lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "seer.exit");
        if (lua_istable(L, -1)) {
            lua_getfield(L, -1, "_at_close");
            if (lua_isfunction(L, -1) && lua_pcall(L, 0, 0, 0) != 0) {
                const char *msg = lua_tostring(L, -1);
                fprintf(stderr, "seer: the work at exit failed: %s\n", msg ? msg : "(error without message)");
            }
        }
    }
    lua_settop(L, top);
}

void seer_host_close(seer_host_t *h) {
    if (!h) return;
    if (h->L) {
        run_exit_handlers(h->L);
        lua_close(h->L);
    }
    free(h);
}

lua_State *seer_host_lua(seer_host_t *h) { return h->L; }
const char *seer_host_lua_dir(const seer_host_t *h) { return h->lua_dir; }

/* ---- running code ------------------------------------------------------------------------ */

/* arg[-1] = seer, arg[0] = script, arg[1..] = args, as the lua interpreter does; returns the
 * number of args also pushed for `...`. */
static int push_args(lua_State *L, const char *script, int argc, char **argv) {
    lua_createtable(L, argc, 2);
    lua_getfield(L, LUA_REGISTRYINDEX, "seer.progname");
    lua_rawseti(L, -2, -1);
    lua_pushstring(L, script);
    lua_rawseti(L, -2, 0);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setglobal(L, "arg");
    luaL_checkstack(L, argc + 1, "too many script arguments");
    for (int i = 0; i < argc; i++) lua_pushstring(L, argv[i]);
    return argc;
}

static int load_error(lua_State *L, int rc, seer_err_t *err) {
    const char *msg = lua_tostring(L, -1);
    int code = rc == LUA_ERRSYNTAX ? SEER_EPARSE : rc == LUA_ERRMEM ? SEER_ENOMEM : SEER_EIO;
    seer_err_set(err, code, "%s", msg ? msg : "cannot load chunk");
    lua_pop(L, 1);
    return code;
}

/* The error a script ended with (host.script_error()), kept for the work done when it ends
 * (seer.exit's handlers, run by seer_host_close): an object whose work was cut short (an
 * agent's transcript, an experiment's summary) records why instead of guessing. Its first line
 * only: the traceback follows on stderr. Interrupts (Ctrl-C, SIGTERM, a hangup) read
 * "interrupted". */
static int note_script_end(lua_State *L, int rc, const seer_err_t *err) {
    if (rc == SEER_OK) return rc;
    const char *nl = strchr(err->msg, '\n');
    if (rc == SEER_EINTR) lua_pushliteral(L, "interrupted");
    else lua_pushlstring(L, err->msg, nl ? (size_t)(nl - err->msg) : strlen(err->msg));
    lua_setfield(L, LUA_REGISTRYINDEX, "seer.script_error");
    return rc;
}

int seer_host_run_string(seer_host_t *h, const char *code, const char *chunkname, int argc,
                         char **argv, seer_err_t *err) {
    lua_State *L = h->L;
    int rc = luaL_loadbuffer(L, code, strlen(code), chunkname);
    if (rc != 0) return load_error(L, rc, err);
    int nargs = push_args(L, chunkname, argc, argv);
    return note_script_end(L, seer_host_pcall(h, nargs, 0, err), err);
}

int seer_host_run_file(seer_host_t *h, const char *path, int argc, char **argv, seer_err_t *err) {
    lua_State *L = h->L;
    int from_stdin = strcmp(path, "-") == 0;
    if (!from_stdin) {
        struct stat st;
        if (stat(path, &st) != 0)
            return seer_err_set(err, SEER_ENOTFOUND, "cannot open %s: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode)) {
            char main_lua[PATH_MAX];
            snprintf(main_lua, sizeof main_lua, "%s/main.lua", path);
            return seer_err_set(err, SEER_EINVAL, "%s is a directory; to run an experiment give its main.lua (%s)",
                                path, main_lua);
        }
        char real[PATH_MAX];
        if (realpath(path, real)) {
            char *slash = strrchr(real, '/');
            if (slash) *slash = '\0';
            seer_host_add_script_dir(L, real[0] ? real : "/", h->lua_dir);
        }
    }
    int rc = luaL_loadfile(L, from_stdin ? NULL : path);
    if (rc != 0) return load_error(L, rc, err);
    int nargs = push_args(L, from_stdin ? "-" : path, argc, argv);
    struct sigaction sa, prev;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART, as for SIGINT */
    g_term_count = 0;
    const char *grace = getenv("SEER_SIGTERM_GRACE_S");
    if (grace && atoi(grace) >= 1 && atoi(grace) <= 3600) g_term_grace = (unsigned)atoi(grace);
    sigaction(SIGTERM, &sa, &prev);
    /* A hangup (the terminal or SSH link of `seer FILE.lua` gone) ends the script the same way,
     * unless SIGHUP was ignored when seer started (nohup: the script is meant to outlive it). */
    struct sigaction hup_prev;
    sigaction(SIGHUP, NULL, &hup_prev);
    int take_hup = !(hup_prev.sa_flags & SA_SIGINFO) && hup_prev.sa_handler == SIG_DFL;
    if (take_hup) sigaction(SIGHUP, &sa, NULL);
    rc = seer_host_pcall(h, nargs, 0, err);
    if (take_hup) sigaction(SIGHUP, &hup_prev, NULL);
    sigaction(SIGTERM, &prev, NULL);
    return note_script_end(L, rc, err);
}

/* ---- files ------------------------------------------------------------------------------- */

int seer_host_write_file_atomic(const char *path, const void *data, size_t n, seer_err_t *err) {
    seer_atomic_file_t f;
    int rc = seer_atomic_open(&f, path, err);
    if (rc == 0) rc = seer_atomic_write(&f, data, n, err);
    if (rc == 0) rc = seer_atomic_commit(&f, err);
    return rc;
}

/* The code point of the well-formed UTF-8 character at p (its length in *len), or -1. */
static long utf8_at(const unsigned char *p, int *len) {
    int n;
    long cp, min;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) n = 2, cp = p[0] - 0xc0, min = 0x80;
    else if (p[0] >= 0xe0 && p[0] <= 0xef) n = 3, cp = p[0] - 0xe0, min = 0x800;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4) n = 4, cp = p[0] - 0xf0, min = 0x10000;
    else return -1;
    for (int k = 1; k < n; k++) {
        if (p[k] < 0x80 || p[k] > 0xbf) return -1; /* also stops at the terminating 0 */
        cp = cp * 64 + (p[k] - 0x80);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
    *len = n;
    return cp;
}

/* Characters that reorder or hide text on a terminal (lua/seer/terminal.lua has the same list). */
static int hides_text(long cp) {
    return cp == 0x061c || cp == 0x200b || cp == 0x200e || cp == 0x200f || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x2060 || cp == 0xfeff || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* On a terminal, as seer.terminal.safe shows text: control characters as \xNN, C1 controls and
 * the characters that reorder or hide text as \uNNNN, bytes that are not UTF-8 as \xNN. */
void seer_host_write_message(FILE *f, const char *prefix, const char *msg) {
    fputs(prefix, f);
    if (!isatty(fileno(f))) {
        fputs(msg, f);
    } else {
        for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
            if (*p >= 0x80) {
                int len = 1;
                long cp = utf8_at(p, &len);
                if (cp < 0) fprintf(f, "\\x%02x", *p);
                else if (cp <= 0x9f || hides_text(cp)) fprintf(f, "\\u%04lx", cp);
                else fwrite(p, 1, (size_t)len, f);
                p += len - 1;
            } else if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f) {
                fprintf(f, "\\x%02x", *p);
            } else {
                fputc(*p, f);
            }
        }
    }
    fputc('\n', f);
}
