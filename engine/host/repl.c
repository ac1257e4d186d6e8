/* The interactive REPL: GNU readline in callback mode (so Ctrl-C at the prompt cancels the
 * line instead of killing the process), multi-line chunks the way the lua REPL detects them,
 * every value printed through seer.pretty, Tab completion of globals and table fields, and a
 * persistent history file. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>

#include "host_private.h"

#define PROMPT1 "> "
#define PROMPT2 ">> "
#define HISTORY_MAX 2000

/* ---- reading a line ------------------------------------------------------------------------
 * readline's callback interface hands back a line through a function; the REPL is a plain
 * loop, so the callback parks the line in these (readline itself is global state too). */
static char *g_line;
static int g_line_done;
static volatile sig_atomic_t g_prompt_sigint;
static lua_State *g_complete_L;

enum { READ_LINE, READ_EOF, READ_INTR };

static void on_line(char *line) {
    g_line = line;
    g_line_done = 1;
    rl_callback_handler_remove();
}

static void on_prompt_sigint(int sig) {
    (void)sig;
    g_prompt_sigint = 1;
}

static void arm_prompt_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prompt_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* poll() must return EINTR */
    sigaction(SIGINT, &sa, NULL);
}

/* SIGINT stays blocked except inside ppoll, which unblocks it atomically: a Ctrl-C that
 * arrived between checking the flag and starting to wait would otherwise go unseen until the
 * next key press. */
static int read_line(const char *prompt, char **out) {
    *out = NULL;
    g_line = NULL;
    g_line_done = 0;
    g_prompt_sigint = 0;
    sigset_t block, waitmask;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &waitmask);
    sigdelset(&waitmask, SIGINT);
    arm_prompt_sigint();
    rl_callback_handler_install(prompt, on_line);
    int result = READ_LINE;
    while (!g_line_done) {
        struct pollfd p = {.fd = fileno(rl_instream), .events = POLLIN};
        int r = g_prompt_sigint ? -1 : ppoll(&p, 1, NULL, &waitmask);
        if (r < 0 && !g_prompt_sigint && errno != EINTR) {
            rl_callback_handler_remove();
            result = READ_EOF;
            break;
        }
        if (g_prompt_sigint) {
            g_prompt_sigint = 0;
            rl_free_line_state();
            rl_callback_sigcleanup();
            rl_replace_line("", 0);
            rl_callback_handler_remove();
            fputs("^C\n", stdout);
            fflush(stdout);
            result = READ_INTR;
            break;
        }
        if (r > 0) rl_callback_read_char();
    }
    sigprocmask(SIG_UNBLOCK, &block, NULL);
    if (result != READ_LINE) return result;
    if (!g_line) return READ_EOF;
    *out = g_line;
    return READ_LINE;
}

/* ---- completion --------------------------------------------------------------------------- */

static char **g_matches;
static size_t g_nmatches, g_match_i;

static void free_matches(void) {
    for (size_t i = g_match_i; i < g_nmatches; i++) free(g_matches[i]);
    free(g_matches);
    g_matches = NULL;
    g_nmatches = g_match_i = 0;
}

static void add_match(const char *s) {
    char **m = realloc(g_matches, (g_nmatches + 1) * sizeof *m);
    if (!m) return;
    g_matches = m;
    g_matches[g_nmatches] = strdup(s);
    if (g_matches[g_nmatches]) g_nmatches++;
}

static void add_prefixed_match(const char *prefix, const char *k) {
    size_t n = strlen(prefix) + strlen(k) + 1;
    char *full = malloc(n);
    if (!full) return;
    snprintf(full, n, "%s%s", prefix, k);
    add_match(full);
    free(full);
}

static int is_ident(const char *s) {
    if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))) return 0;
    for (s++; *s; s++)
        if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

/* Collects the string keys of the table at the top of the stack (and of tables reachable
 * through __index, which is how modules with methods look) that start with word. */
static void collect_keys(lua_State *L, const char *prefix, const char *word, int methods_only, int depth) {
    if (depth > 4 || !lua_istable(L, -1)) return;
    size_t wl = strlen(word);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_type(L, -2) == LUA_TSTRING) {
            const char *k = lua_tostring(L, -2);
            if (strncmp(k, word, wl) == 0 && is_ident(k) && (!methods_only || lua_isfunction(L, -1)))
                add_prefixed_match(prefix, k);
        }
        lua_pop(L, 1);
    }
    if (lua_getmetatable(L, -1)) {
        /* Fields that appear on first access (seer's lazily loaded modules) are announced in
         * the metatable's __complete list, since an __index function cannot be listed. */
        lua_getfield(L, -1, "__complete");
        if (lua_istable(L, -1) && !methods_only) {
            for (int i = 1;; i++) {
                lua_rawgeti(L, -1, i);
                const char *k = lua_tostring(L, -1);
                if (!k) {
                    lua_pop(L, 1);
                    break;
                }
                if (strncmp(k, word, wl) == 0 && is_ident(k)) add_prefixed_match(prefix, k);
                lua_pop(L, 1);
            }
        }
        lua_pop(L, 1);
        lua_getfield(L, -1, "__index");
        collect_keys(L, prefix, word, methods_only, depth + 1);
        lua_pop(L, 2);
    }
}

/* Is key listed in the __complete table of the metatable of the table at idx? */
static int announced(lua_State *L, int idx, const char *key, size_t klen) {
    int found = 0;
    if (!lua_getmetatable(L, idx)) return 0;
    lua_getfield(L, -1, "__complete");
    for (int i = 1; lua_istable(L, -1) && !found; i++) {
        lua_rawgeti(L, -1, i);
        size_t n;
        const char *k = lua_tolstring(L, -1, &n);
        lua_pop(L, 1);
        if (!k) break;
        found = n == klen && memcmp(k, key, n) == 0;
    }
    lua_pop(L, 2);
    return found;
}

static int gettable_unprotected(lua_State *L) {
    lua_gettable(L, 1);
    return 1;
}

/* Resolves "a.b.c" and pushes the value or nil. Fields are read with rawget, so completion
 * never runs user code; the one exception is a field the table announces in __complete
 * (seer's lazily loaded modules), which is loaded through __index under pcall. */
static void push_path(lua_State *L, const char *path, size_t len) {
    lua_pushvalue(L, LUA_GLOBALSINDEX);
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && path[j] != '.' && path[j] != ':') j++;
        if (!lua_istable(L, -1)) {
            lua_pop(L, 1);
            lua_pushnil(L);
            return;
        }
        lua_pushlstring(L, path + i, j - i);
        lua_rawget(L, -2);
        if (lua_isnil(L, -1) && announced(L, -2, path + i, j - i)) {
            lua_pop(L, 1);
            lua_pushcfunction(L, gettable_unprotected);
            lua_pushvalue(L, -2);
            lua_pushlstring(L, path + i, j - i);
            if (lua_pcall(L, 2, 1, 0) != 0) {
                lua_pop(L, 1);
                lua_pushnil(L);
            }
        }
        lua_remove(L, -2);
        i = j + 1;
    }
}

static char *match_generator(const char *text, int state) {
    (void)text;
    (void)state;
    if (g_match_i < g_nmatches) return g_matches[g_match_i++]; /* readline frees it */
    return NULL;
}

static char **complete(const char *text, int start, int end) {
    (void)start;
    (void)end;
    lua_State *L = g_complete_L;
    rl_attempted_completion_over = 1; /* never fall back to file names */
    rl_completion_append_character = '\0'; /* readline resets it to ' ' before each attempt */
    free_matches();
    if (!L) return NULL;
    const char *sep = NULL;
    for (const char *p = text; *p; p++)
        if (*p == '.' || *p == ':') sep = p;
    int top = lua_gettop(L);
    if (sep) {
        size_t plen = (size_t)(sep - text) + 1;
        char *prefix = strndup(text, plen);
        if (!prefix) return NULL;
        push_path(L, text, (size_t)(sep - text));
        collect_keys(L, prefix, sep + 1, *sep == ':', 0);
        free(prefix);
    } else {
        static const char *keywords[] = {"and", "break", "do", "else", "elseif", "end", "false", "for",
                                         "function", "if", "in", "local", "nil", "not", "or", "repeat",
                                         "return", "then", "true", "until", "while", NULL};
        size_t tl = strlen(text);
        for (const char **k = keywords; *k; k++)
            if (strncmp(*k, text, tl) == 0) add_match(*k);
        lua_pushvalue(L, LUA_GLOBALSINDEX);
        collect_keys(L, "", text, 0, 0);
    }
    lua_settop(L, top);
    if (g_nmatches == 0) return NULL;
    return rl_completion_matches(text, match_generator);
}

/* ---- history ------------------------------------------------------------------------------ */

static const char *history_path(char *buf, size_t n) {
    const char *env = getenv("SEER_HISTORY");
    if (env) return *env ? env : NULL; /* SEER_HISTORY= (empty) turns history off */
    const char *home = getenv("HOME");
    if (!home || !*home) return NULL;
    snprintf(buf, n, "%s/.seer_history", home);
    return buf;
}

/* ---- evaluating ----------------------------------------------------------------------------- */

/* Incomplete input is a syntax error whose message ends at '<eof>' (as lua.c decides). */
static int is_incomplete(lua_State *L, int status) {
    if (status != LUA_ERRSYNTAX) return 0;
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    static const char mark[] = "'<eof>'";
    size_t ml = sizeof mark - 1;
    return msg && len >= ml && strcmp(msg + len - ml, mark) == 0;
}

/* Compiles a chunk; an expression list is compiled so that its values come back and print.
 * It is passed through an identity function rather than returned directly: `return f()` is a
 * tail call, which would drop the chunk's frame and with it "stdin:1:" from error messages and
 * the function names from tracebacks. The newline keeps a trailing comment from swallowing
 * the closing parenthesis. Returns LUA_ERRSYNTAX with the message pushed, or 0 with the
 * function pushed. */
static int compile(lua_State *L, const char *chunk, int *incomplete) {
    *incomplete = 0;
    const char *body = chunk[0] == '=' ? chunk + 1 : chunk; /* Lua 5.1's "=expr" shorthand */
    lua_pushfstring(L, "return (function(...) return ... end)(%s\n)", body);
    int st = luaL_loadbuffer(L, lua_tostring(L, -1), lua_objlen(L, -1), "=stdin");
    lua_remove(L, -2);
    if (st == 0) return 0;
    lua_pop(L, 1);
    st = luaL_loadbuffer(L, chunk, strlen(chunk), "=stdin");
    if (st != 0) *incomplete = is_incomplete(L, st);
    return st;
}

static void print_results(seer_host_t *h, int n) {
    lua_State *L = seer_host_lua(h);
    if (n == 0) return;
    int base = lua_gettop(L) - n;
    lua_getglobal(L, "require");
    lua_pushliteral(L, "seer.pretty");
    if (lua_pcall(L, 1, 1, 0) != 0) {
        fprintf(stderr, "seer: cannot print results: %s\n", lua_tostring(L, -1));
        lua_settop(L, base);
        return;
    }
    lua_getfield(L, -1, "repl_print");
    lua_remove(L, -2);
    lua_insert(L, base + 1);
    seer_err_t err;
    if (seer_host_pcall(h, n, 0, &err) < 0) fprintf(stderr, "seer: cannot print results: %s\n", err.msg);
    lua_settop(L, base);
}

/* Runs the compiled chunk on top of the stack (above top) and prints what it returns. */
static void run_compiled(seer_host_t *h, int top) {
    lua_State *L = seer_host_lua(h);
    /* Code typed at the prompt runs in the interpreter: LuaJIT never checks hooks inside
     * compiled traces, and Ctrl-C must always stop `while true do end`. Library code it calls
     * is still compiled. */
    luaJIT_setmode(L, -1, LUAJIT_MODE_ALLFUNC | LUAJIT_MODE_OFF);
    seer_err_t err;
    int rc = seer_host_pcall(h, 0, LUA_MULTRET, &err);
    if (rc < 0) {
        fflush(stdout);
        seer_host_write_message(stderr, "", err.msg);
        lua_settop(L, top);
        return;
    }
    print_results(h, lua_gettop(L) - top);
    lua_settop(L, top);
    fflush(stdout);
}

int seer_host_repl(seer_host_t *h) {
    lua_State *L = seer_host_lua(h);
    char hbuf[PATH_MAX];
    const char *hist = history_path(hbuf, sizeof hbuf);

    rl_readline_name = "seer";
    rl_catch_signals = 0; /* SIGINT is ours, see read_line */
    rl_attempted_completion_function = complete;
    rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(,+-*/%^#~[]";
    g_complete_L = L;
    using_history();
    stifle_history(HISTORY_MAX);
    if (hist) {
        struct stat st;
        if (stat(hist, &st) == 0) read_history(hist);
        else write_history(hist); /* append_history needs the file to exist */
    }

    lua_getglobal(L, "jit");
    lua_getfield(L, -1, "version");
    printf("%s, %s -- Ctrl-D exits, Ctrl-C interrupts\n", seer_version_long(),
           lua_tostring(L, -1) ? lua_tostring(L, -1) : LUAJIT_VERSION);
    lua_pop(L, 2);
    fflush(stdout);

    char *chunk = NULL;
    size_t clen = 0;
    for (;;) {
        char *line;
        int r = read_line(chunk ? PROMPT2 : PROMPT1, &line);
        if (r == READ_EOF) {
            if (chunk) fputc('\n', stdout);
            break;
        }
        if (r == READ_INTR) {
            free(chunk);
            chunk = NULL;
            clen = 0;
            continue;
        }
        size_t ll = strlen(line);
        char *nc = realloc(chunk, clen + ll + 2);
        if (!nc) {
            free(line);
            fputs("seer: out of memory\n", stderr);
            break;
        }
        if (chunk) nc[clen++] = '\n';
        chunk = nc;
        memcpy(chunk + clen, line, ll + 1);
        clen += ll;
        free(line);

        int incomplete;
        int top = lua_gettop(L);
        int st = compile(L, chunk, &incomplete);
        if (st != 0 && incomplete) {
            lua_settop(L, top);
            continue;
        }
        if (chunk[strspn(chunk, " \t\n")] != '\0') {
            add_history(chunk);
            if (hist) append_history(1, hist);
        }
        if (st != 0) {
            fprintf(stderr, "%s\n", lua_tostring(L, -1));
            lua_settop(L, top);
        } else {
            run_compiled(h, top);
        }
        free(chunk);
        chunk = NULL;
        clen = 0;
    }
    free(chunk);
    free_matches();
    if (hist) history_truncate_file(hist, HISTORY_MAX);
    g_complete_L = NULL;
    signal(SIGINT, SIG_DFL);
    return 0;
}
