/* The LuaJIT host: one Lua state per seer process with the standard libraries, ffi and jit,
 * seer's C modules under seer.core.*, a package.path over seer's Lua tree and the running
 * script's directory, errors carried back with tracebacks, Ctrl-C that interrupts running
 * Lua code, and the interactive REPL. */
#ifndef SEER_HOST_H
#define SEER_HOST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../seer.h"

typedef struct lua_State lua_State;
typedef struct seer_host seer_host_t;

typedef struct seer_host_opts {
    /* Directory holding seer/ and toolkit/. NULL: $SEER_LUA_DIR, then <exe dir>/lua (in-tree
     * build), then <exe dir>/../share/seer/lua (installed). */
    const char *lua_dir;
    /* How the binary was invoked (argv[0]); becomes arg[-1] as in the lua interpreter. */
    const char *progname;
} seer_host_opts_t;

/* Creates the Lua state. Fails (with a message naming the directories it looked in) when
 * seer's Lua tree cannot be found. */
int seer_host_open(seer_host_t **out, const seer_host_opts_t *opts, seer_err_t *err);
void seer_host_close(seer_host_t *h);
lua_State *seer_host_lua(seer_host_t *h);
const char *seer_host_lua_dir(const seer_host_t *h);

/* Runs a script file with the standard `arg` table (arg[0] = path, arg[1..] = args) and the
 * args also passed as `...`. The script's directory (and its libraries/ folder) join
 * package.path. path "-" reads standard input. On a Lua error returns SEER_ELUA with
 * "message\nstack traceback:..." in err; on Ctrl-C, SEER_EINTR. */
int seer_host_run_file(seer_host_t *h, const char *path, int argc, char **argv, seer_err_t *err);

/* Runs a chunk of code; chunkname as in lua_load ("=(command line)"). */
int seer_host_run_string(seer_host_t *h, const char *code, const char *chunkname, int argc,
                         char **argv, seer_err_t *err);

/* Calls the function on top of the stack with nargs arguments under the traceback handler and
 * with Ctrl-C armed; leaves nresults (LUA_MULTRET allowed) on success, nothing on failure. */
int seer_host_pcall(seer_host_t *h, int nargs, int nresults, seer_err_t *err);

/* The interactive loop on the terminal. Returns 0 when the user leaves with Ctrl-D. */
int seer_host_repl(seer_host_t *h);

/* Ctrl-C. While Lua code runs under seer_host_pcall, SIGINT makes the running code raise
 * "interrupted" at its next hook check. LuaJIT does not check hooks inside JIT-compiled
 * traces, so a second Ctrl-C warns and a third one quits the process. Long-running C code
 * polls seer_host_interrupted() and returns SEER_EINTR. */
bool seer_host_interrupted(void);
void seer_host_interrupt_clear(void);

/* For C functions that notice seer_host_interrupted() while they wait or compute: raises the
 * Lua error "interrupted" (never returns). The pending interrupt hook is cleared first (it would
 * otherwise fire inside the error handler: "error in error handling") and the interrupt is
 * recorded, so seer_host_pcall reports SEER_EINTR (exit status 130) as for a hook check. */
int seer_host_interrupt_raise(lua_State *L);

/* A Lua number that C uses as an integer (a size, an index, a count, a seed, a pid, a file
 * descriptor): the argument at stack index idx must be a whole number from lo to hi, else it
 * raises "<what> must be a whole number from <lo> to <hi>, got <value>" (the value as Lua
 * prints it: 1.5, nan, inf, 1e+20, or its type; the range is left out of the message where a
 * side is unbounded). Every C function that turns a Lua number into a
 * C integer goes through these: a bare cast of NaN, an infinity or a number outside the type's
 * range is undefined behaviour in C, and a fraction would be dropped without a word. lo and hi
 * are clamped to +-2^53, past which a Lua number no longer holds every integer. Numeric strings
 * are accepted as luaL_checknumber accepts them. The opt form returns def for none or nil. */
int64_t seer_lua_int(lua_State *L, int idx, int64_t lo, int64_t hi, const char *what);
int64_t seer_lua_optint(lua_State *L, int idx, int64_t def, int64_t lo, int64_t hi, const char *what);
/* A timeout in milliseconds (def for none or nil): any number, a fraction rounded up, a negative
 * one meaning "no timeout" (-1), and past INT32_MAX clamped to it (24.8 days); NaN or a value
 * that is not a number raises "<what> must be a number of milliseconds". */
int seer_lua_opttimeout(lua_State *L, int idx, int def, const char *what);

/* Writes data to path through a temporary file in the same directory, fsync and rename, so a
 * crash leaves either the old file or the new one, never a half-written one. */
int seer_host_write_file_atomic(const char *path, const void *data, size_t n, seer_err_t *err);

/* Writes prefix, msg and a newline to f. When f is a terminal, control characters in msg other
 * than newline and tab are written as \xNN, and C1 controls in UTF-8 (U+0080-U+009F) as \u00NN:
 * an error can quote what a sandbox or a model wrote, and its escape sequences must not command
 * the user's terminal (seer.terminal does the same for Lua; docs/security.md, "Terminals"). */
void seer_host_write_message(FILE *f, const char *prefix, const char *msg);

#endif
