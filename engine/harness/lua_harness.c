/* seer.core.harness: the harness core for Lua (lua/seer/harness.lua drives the agent loop on
 * top). JSON crosses this boundary as text, as in seer.core.mcp. Objects: a pool (one curl multi
 * shared by every agent of the process), streams started on it, and transcripts; plus the
 * terminal helpers of the interactive mode (raw mode for ESC, non-blocking reads). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "harness.h"
#include "host/host.h"

int seer_harness_luaopen(lua_State *L);

#define POOL_MT "seer.harness.pool"
#define STREAM_MT "seer.harness.stream"
#define TRANSCRIPT_MT "seer.harness.transcript"
#define TTY_MT "seer.harness.tty"

typedef struct {
    seer_harness_pool_t *p;
} pool_ud;
typedef struct {
    seer_harness_stream_t *s;
} stream_ud;
typedef struct {
    seer_harness_transcript_t *t;
    int ended; /* a "result" event was written: set here, in the call that wrote it, so that no
                * Lua instruction (where Ctrl-C's hook can raise) lies between the line and the
                * record of it */
} transcript_ud;
typedef struct {
    int fd;
    int active;
    struct termios saved;
} tty_ud;

static int interrupted(void *ud) {
    (void)ud;
    return seer_host_interrupted();
}

static cJSON *parse_arg(lua_State *L, int idx, const char *what) {
    size_t n;
    const char *text = luaL_checklstring(L, idx, &n);
    cJSON *j = cJSON_ParseWithLength(text, n);
    if (!j) luaL_error(L, "harness: %s is not valid JSON", what);
    return j;
}

static void push_json(lua_State *L, const cJSON *j) {
    char *text = cJSON_PrintUnformatted(j);
    if (!text) luaL_error(L, "harness: out of memory");
    lua_pushstring(L, text);
    free(text);
}

/* ---- pool ---------------------------------------------------------------------------------------- */

static int l_pool(lua_State *L) {
    pool_ud *u = lua_newuserdata(L, sizeof *u);
    u->p = NULL;
    luaL_getmetatable(L, POOL_MT);
    lua_setmetatable(L, -2);
    seer_err_t err;
    seer_err_clear(&err);
    if (seer_harness_pool_new(&u->p, &err) < 0) return luaL_error(L, "%s", err.msg);
    return 1;
}

static pool_ud *check_pool(lua_State *L) {
    pool_ud *u = luaL_checkudata(L, 1, POOL_MT);
    if (!u->p) luaL_error(L, "harness: the pool is closed");
    return u;
}

/* pool:run(timeout_s, fd?) -> "event" | "fd" | "timeout"; Ctrl-C raises "interrupted". */
static int l_pool_run(lua_State *L) {
    pool_ud *u = check_pool(L);
    double t = luaL_optnumber(L, 2, 0.1);
    int fd = (int)seer_lua_optint(L, 3, -1, -1, INT32_MAX, "file descriptor");
    if (!(t >= 0)) t = 0; /* NaN too: it is cast to milliseconds below */
    if (t > 3600) t = 3600;
    seer_err_t err;
    seer_err_clear(&err);
    int rc = seer_harness_pool_run(u->p, (int)(t * 1000), fd, interrupted, NULL, &err);
    if (rc == SEER_EINTR) return seer_host_interrupt_raise(L);
    if (rc < 0) return luaL_error(L, "%s", err.msg);
    lua_pushstring(L, rc == 1 ? "event" : rc == 2 ? "fd" : "timeout");
    return 1;
}

static int l_pool_stream(lua_State *L) {
    pool_ud *pu = check_pool(L);
    cJSON *req = parse_arg(L, 2, "the request");
    stream_ud *u = lua_newuserdata(L, sizeof *u);
    u->s = NULL;
    luaL_getmetatable(L, STREAM_MT);
    lua_setmetatable(L, -2);
    /* The stream keeps its pool alive: the pool userdata sits in the stream's environment. */
    lua_createtable(L, 1, 0);
    lua_pushvalue(L, 1);
    lua_rawseti(L, -2, 1);
    lua_setfenv(L, -2);
    seer_err_t err;
    seer_err_clear(&err);
    int rc = seer_harness_stream_start(pu->p, req, &u->s, &err);
    cJSON_Delete(req);
    if (rc < 0) return luaL_error(L, "%s", err.msg);
    return 1;
}

static int l_pool_close(lua_State *L) {
    pool_ud *u = luaL_checkudata(L, 1, POOL_MT);
    seer_harness_pool_free(u->p);
    u->p = NULL;
    return 0;
}

/* ---- streams ------------------------------------------------------------------------------------- */

static stream_ud *check_stream(lua_State *L) {
    stream_ud *u = luaL_checkudata(L, 1, STREAM_MT);
    if (!u->s) luaL_error(L, "harness: the stream is closed");
    return u;
}

static int l_stream_next(lua_State *L) {
    stream_ud *u = check_stream(L);
    cJSON *ev = seer_harness_stream_next(u->s);
    if (!ev) {
        lua_pushnil(L);
        return 1;
    }
    char *text = cJSON_PrintUnformatted(ev);
    cJSON_Delete(ev);
    if (!text) return luaL_error(L, "harness: out of memory");
    lua_pushstring(L, text);
    free(text);
    return 1;
}

static int l_stream_state(lua_State *L) {
    static const char *names[] = {"running", "waiting", "done", "failed", "cancelled"};
    stream_ud *u = check_stream(L);
    int st = seer_harness_stream_state(u->s);
    lua_pushstring(L, st >= 0 && st <= 4 ? names[st] : "?");
    return 1;
}

static int l_stream_cancel(lua_State *L) {
    stream_ud *u = check_stream(L);
    seer_harness_stream_cancel(u->s);
    return 0;
}

static int l_stream_partial(lua_State *L) {
    stream_ud *u = check_stream(L);
    cJSON *r = seer_harness_stream_partial(u->s);
    push_json(L, r);
    cJSON_Delete(r);
    return 1;
}

static int l_stream_close(lua_State *L) {
    stream_ud *u = luaL_checkudata(L, 1, STREAM_MT);
    seer_harness_stream_free(u->s);
    u->s = NULL;
    return 0;
}

/* ---- transcripts ------------------------------------------------------------------------------ */

/* A list of strings at idx into a userdata-held array (freed by Lua on error). */
static const char **string_list(lua_State *L, int idx, size_t *n) {
    *n = 0;
    if (lua_isnoneornil(L, idx)) return NULL;
    luaL_checktype(L, idx, LUA_TTABLE);
    size_t k = lua_objlen(L, idx);
    const char **arr = lua_newuserdata(L, (k ? k : 1) * sizeof *arr);
    for (size_t i = 0; i < k; i++) {
        lua_rawgeti(L, idx, (int)i + 1);
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "harness: secrets[%d] must be a string", (int)i + 1);
        arr[i] = lua_tostring(L, -1); /* kept alive by the table */
        lua_pop(L, 1);
    }
    *n = k;
    return arr;
}

static int l_transcript(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    int sync = (int)seer_lua_optint(L, 3, 1, INT32_MIN, INT32_MAX, "sync"); /* before string_list pushes its array */
    lua_settop(L, 2);
    size_t n;
    const char **secrets = string_list(L, 2, &n);
    transcript_ud *u = lua_newuserdata(L, sizeof *u);
    u->t = NULL;
    u->ended = 0;
    luaL_getmetatable(L, TRANSCRIPT_MT);
    lua_setmetatable(L, -2);
    seer_err_t err;
    seer_err_clear(&err);
    if (seer_harness_transcript_open(&u->t, path, secrets, n, sync, &err) < 0) return luaL_error(L, "%s", err.msg);
    return 1;
}

static int l_transcript_write(lua_State *L) {
    transcript_ud *u = luaL_checkudata(L, 1, TRANSCRIPT_MT);
    if (!u->t) return luaL_error(L, "transcript: closed");
    cJSON *ev = parse_arg(L, 2, "the event");
    seer_err_t err;
    seer_err_clear(&err);
    size_t before = seer_harness_transcript_written(u->t);
    int rc = seer_harness_transcript_write(u->t, ev, &err);
    if (rc >= 0 && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(ev, "type")) &&
        strcmp(cJSON_GetObjectItemCaseSensitive(ev, "type")->valuestring, "result") == 0)
        u->ended = 1;
    cJSON_Delete(ev);
    if (rc < 0) return luaL_error(L, "%s", err.msg);
    lua_pushinteger(L, (lua_Integer)(seer_harness_transcript_written(u->t) - before)); /* the line's bytes */
    return 1;
}

/* transcript:ended() -> whether a "result" event was written to it */
static int l_transcript_ended(lua_State *L) {
    transcript_ud *u = luaL_checkudata(L, 1, TRANSCRIPT_MT);
    lua_pushboolean(L, u->ended);
    return 1;
}

static int l_transcript_close(lua_State *L) {
    transcript_ud *u = luaL_checkudata(L, 1, TRANSCRIPT_MT);
    seer_harness_transcript_close(u->t);
    u->t = NULL;
    return 0;
}

/* redact(text, secrets) -> text with every secret (>= 4 bytes) replaced by [REDACTED] */
static int l_redact(lua_State *L) {
    const char *text = luaL_checkstring(L, 1);
    size_t n;
    const char **secrets = string_list(L, 2, &n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (strlen(secrets[i]) >= 4) secrets[m++] = secrets[i];
    char *r = seer_harness_redact(text, secrets, m);
    if (!r) return luaL_error(L, "harness: out of memory");
    lua_pushstring(L, r);
    free(r);
    return 1;
}

static int l_build_body(lua_State *L) {
    cJSON *req = parse_arg(L, 1, "the request");
    seer_err_t err;
    seer_err_clear(&err);
    char *body = seer_harness_build_body(req, &err);
    cJSON_Delete(req);
    if (!body) return luaL_error(L, "%s", err.msg);
    lua_pushstring(L, body);
    free(body);
    return 1;
}

/* ---- the terminal (interactive mode) ------------------------------------------------------------ */

/* tty_raw(fd) -> handle: no line buffering and no echo (signals stay on, so Ctrl-C still works);
 * handle:restore() (and garbage collection) puts the terminal back. nil when fd is no terminal. */
static int l_tty_raw(lua_State *L) {
    int fd = (int)seer_lua_int(L, 1, 0, INT32_MAX, "file descriptor");
    struct termios t;
    if (!isatty(fd) || tcgetattr(fd, &t) != 0) {
        lua_pushnil(L);
        return 1;
    }
    tty_ud *u = lua_newuserdata(L, sizeof *u);
    u->fd = fd;
    u->saved = t;
    u->active = 0;
    luaL_getmetatable(L, TTY_MT);
    lua_setmetatable(L, -2);
    t.c_lflag &= (tcflag_t) ~(ICANON | ECHO);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    if (tcsetattr(fd, TCSANOW, &t) != 0) return luaL_error(L, "harness: tcsetattr: %s", strerror(errno));
    u->active = 1;
    return 1;
}

static int l_tty_restore(lua_State *L) {
    tty_ud *u = luaL_checkudata(L, 1, TTY_MT);
    if (u->active) tcsetattr(u->fd, TCSANOW, &u->saved);
    u->active = 0;
    return 0;
}

/* read_available(fd) -> the bytes that can be read now (at most 4 KB), "" when none, nil at EOF. */
static int l_read_available(lua_State *L) {
    int fd = (int)seer_lua_int(L, 1, 0, INT32_MAX, "file descriptor");
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0) {
        lua_pushnil(L);
        return 1;
    }
    if (n < 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    lua_pushlstring(L, buf, (size_t)n);
    return 1;
}

static int l_isatty(lua_State *L) {
    lua_pushboolean(L, isatty((int)seer_lua_int(L, 1, 0, INT32_MAX, "isatty: file descriptor")));
    return 1;
}

static void new_mt(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc) {
    luaL_newmetatable(L, name);
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
}

int seer_harness_luaopen(lua_State *L) {
    static const luaL_Reg pool_m[] = {{"run", l_pool_run}, {"stream", l_pool_stream}, {"close", l_pool_close}, {NULL, NULL}};
    static const luaL_Reg stream_m[] = {{"next", l_stream_next},       {"state", l_stream_state},
                                        {"cancel", l_stream_cancel},   {"partial", l_stream_partial},
                                        {"close", l_stream_close},     {NULL, NULL}};
    static const luaL_Reg tr_m[] = {{"write", l_transcript_write}, {"ended", l_transcript_ended},
                                       {"close", l_transcript_close}, {NULL, NULL}};
    static const luaL_Reg tty_m[] = {{"restore", l_tty_restore}, {NULL, NULL}};
    new_mt(L, POOL_MT, pool_m, l_pool_close);
    new_mt(L, STREAM_MT, stream_m, l_stream_close);
    new_mt(L, TRANSCRIPT_MT, tr_m, l_transcript_close);
    new_mt(L, TTY_MT, tty_m, l_tty_restore);
    static const luaL_Reg fns[] = {{"pool", l_pool},
                                   {"transcript", l_transcript},
                                   {"redact", l_redact},
                                   {"build_body", l_build_body},
                                   {"tty_raw", l_tty_raw},
                                   {"read_available", l_read_available},
                                   {"isatty", l_isatty},
                                   {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, fns);
    return 1;
}
