/* The LuaJIT host: one Lua state per seer process with the standard libraries, ffi and jit,
 * seer's C modules under seer.core.*, a package.path over seer's Lua tree and the running
 * script's directory, errors carried back with tracebacks, Ctrl-C that interrupts running
 * Lua code, and the interactive REPL. */
#ifndef SEER_HOST_H
#define SEER_HOST_H

#include <stdbool.h>

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

/* Writes data to path through a temporary file in the same directory, fsync and rename, so a
 * crash leaves either the old file or the new one, never a half-written one. */
int seer_host_write_file_atomic(const char *path, const void *data, size_t n, seer_err_t *err);

#endif
