/* The stdio transport of the MCP client: the server is a child process (posix_spawn) that
 * reads newline-delimited JSON-RPC on stdin and writes it on stdout; its stderr is kept in a
 * small ring so that a crash can be reported with the server's last words. The child gets its
 * own process group, so a Ctrl-C at the terminal reaches seer (which cancels the call) and not
 * the server. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client_private.h"

extern char **environ;

#define SLICE_MS 100
#define EXIT_WAIT_MS 2000
#define TERM_WAIT_MS 1000
#define READ_CHUNK 65536

/* ---- stderr ----------------------------------------------------------------------------- */

static void tail_add(mcp_server_t *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        s->tail[s->tail_pos] = p[i];
        s->tail_pos = (s->tail_pos + 1) % MCP_STDERR_TAIL;
        if (s->tail_len < MCP_STDERR_TAIL) s->tail_len++;
    }
}

static void tee_add(mcp_server_t *s, const char *p, size_t n) {
    mcp_buf_add(&s->tee_line, p, n);
    char *start = s->tee_line.data, *nl;
    while ((nl = memchr(start, '\n', s->tee_line.len - (size_t)(start - s->tee_line.data)))) {
        fprintf(stderr, "[%s] %.*s\n", s->name, (int)(nl - start), start);
        start = nl + 1;
    }
    size_t rest = s->tee_line.len - (size_t)(start - s->tee_line.data);
    memmove(s->tee_line.data, start, rest);
    s->tee_line.len = rest;
}

/* Reads what stderr has now, up to 512 KB at a time, so a server that floods its stderr
 * cannot keep the caller from its deadline. */
static void drain_stderr(mcp_server_t *s) {
    char buf[8192];
    for (int rounds = 0; s->err_fd >= 0 && rounds < 64; rounds++) {
        ssize_t r = read(s->err_fd, buf, sizeof buf);
        if (r > 0) {
            tail_add(s, buf, (size_t)r);
            if (s->opts->stderr_tee) tee_add(s, buf, (size_t)r);
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) {
            close(s->err_fd);
            s->err_fd = -1;
            if (s->opts->stderr_tee && s->tee_line.len) tee_add(s, "\n", 1);
        }
        break;
    }
}

/* The last lines of stderr, indented, for an error message. */
static void stderr_tail(mcp_server_t *s, char *out, size_t size) {
    char raw[MCP_STDERR_TAIL + 1];
    size_t start = (s->tail_pos + MCP_STDERR_TAIL - s->tail_len) % MCP_STDERR_TAIL;
    for (size_t i = 0; i < s->tail_len; i++) raw[i] = s->tail[(start + i) % MCP_STDERR_TAIL];
    size_t n = s->tail_len;
    while (n && (raw[n - 1] == '\n' || raw[n - 1] == '\r' || raw[n - 1] == ' ')) n--;
    raw[n] = 0;
    /* The last 20 lines at most, within the space the message has. */
    size_t from = 0;
    int lines = 0;
    for (size_t i = n; i > 0; i--)
        if (raw[i - 1] == '\n' && ++lines == 20) {
            from = i;
            break;
        }
    if (n - from > size / 2) from = n - size / 2;
    size_t o = 0;
    if (o + 3 < size) out[o++] = ' ', out[o++] = ' ';
    for (size_t i = from; i < n && o + 4 < size; i++) {
        unsigned char ch = (unsigned char)raw[i];
        if (ch == '\n') {
            out[o++] = '\n';
            out[o++] = ' ';
            out[o++] = ' ';
        } else if (ch != '\r') {
            out[o++] = (ch >= 0x20 || ch == '\t') ? (char)ch : '?';
        }
    }
    out[o] = 0;
}

/* ---- the child ---------------------------------------------------------------------------- */

static int reap(mcp_server_t *s, int options) {
    if (!s->pid || s->exited) return s->exited;
    int st;
    pid_t r;
    do r = waitpid(s->pid, &st, options);
    while (r < 0 && errno == EINTR);
    if (r == s->pid) {
        s->exited = 1;
        s->exit_status = st;
    } else if (r < 0) {
        s->exited = 1; /* not our child any more (someone reaped it); nothing to wait for */
        s->exit_status = -1;
    }
    return s->exited;
}

static void describe_exit(mcp_server_t *s, char *buf, size_t size) {
    int n;
    if (!s->exited)
        n = snprintf(buf, size, "the server closed its stdout");
    else if (s->exit_status == -1)
        n = snprintf(buf, size, "the server exited");
    else if (WIFEXITED(s->exit_status))
        n = snprintf(buf, size, "the server exited with status %d", WEXITSTATUS(s->exit_status));
    else if (WIFSIGNALED(s->exit_status))
        n = snprintf(buf, size, "the server was killed by signal %d (%s)", WTERMSIG(s->exit_status),
                     strsignal(WTERMSIG(s->exit_status)));
    else
        n = snprintf(buf, size, "the server stopped");
    if (n < 0 || (size_t)n >= size) return;
    if (s->tail_len) {
        int m = snprintf(buf + n, size - (size_t)n, "; its stderr ends with:\n");
        if (m > 0 && (size_t)(n + m) < size) stderr_tail(s, buf + n + m, size - (size_t)(n + m));
    } else {
        snprintf(buf + n, size - (size_t)n, " (nothing on its stderr)");
    }
}

/* The server is gone or going: wait a little for its exit status (reading the rest of its
 * stderr meanwhile) and record why. */
static int gone(mcp_server_t *s) {
    int64_t deadline = mcp_now_ms() + EXIT_WAIT_MS;
    while (!reap(s, WNOHANG) && mcp_now_ms() < deadline) {
        struct pollfd p = {s->err_fd, POLLIN, 0};
        if (poll(&p, s->err_fd >= 0 ? 1 : 0, 10) > 0) drain_stderr(s);
    }
    for (int i = 0; i < 16 && s->err_fd >= 0; i++) drain_stderr(s);
    char why[3000];
    describe_exit(s, why, sizeof why);
    return mcp_set_dead(s, "%s", why);
}

static void set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* environ with the entries of env (a JSON object of strings) set or replaced. */
static char **make_env(const cJSON *env) {
    size_t n = 0, extra = 0;
    while (environ && environ[n]) n++;
    if (cJSON_IsObject(env))
        for (const cJSON *e = env->child; e; e = e->next) extra++;
    char **out = calloc(n + extra + 1, sizeof *out);
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t kl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        int replaced = 0;
        if (cJSON_IsObject(env))
            for (const cJSON *e = env->child; e; e = e->next)
                if (strlen(e->string) == kl && strncmp(e->string, environ[i], kl) == 0) replaced = 1;
        if (!replaced) out[k++] = environ[i]; /* borrowed; only the new entries are freed */
    }
    size_t first_new = k;
    if (cJSON_IsObject(env))
        for (const cJSON *e = env->child; e; e = e->next) {
            size_t l = strlen(e->string) + strlen(e->valuestring) + 2;
            char *kv = malloc(l);
            if (!kv) {
                for (size_t i = first_new; i < k; i++) free(out[i]);
                free(out);
                return NULL;
            }
            snprintf(kv, l, "%s=%s", e->string, e->valuestring);
            out[k++] = kv;
        }
    out[k] = NULL; /* free_env frees the new entries: they are the last ones */
    return out;
}

static void free_env(char **envp, const cJSON *env) {
    if (!envp) return;
    size_t extra = 0, n = 0;
    if (cJSON_IsObject(env))
        for (const cJSON *e = env->child; e; e = e->next) extra++;
    while (envp[n]) n++;
    for (size_t i = n - extra; i < n; i++) free(envp[i]);
    free(envp);
}

int mcp_stdio_start(mcp_server_t *s, const cJSON *spec, seer_err_t *err) {
    const char *command = cJSON_GetObjectItemCaseSensitive(spec, "command")->valuestring;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(spec, "args");
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(spec, "env");
    const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(spec, "cwd");
    if (cJSON_IsString(cwd)) {
        struct stat st;
        if (stat(cwd->valuestring, &st) != 0 || !S_ISDIR(st.st_mode))
            return seer_err_set(err, SEER_EINVAL, "mcp server '%s': cwd '%s' is not a directory", s->name, cwd->valuestring);
    }
    int nargs = cJSON_IsArray(args) ? cJSON_GetArraySize(args) : 0;
    char **argv = calloc((size_t)nargs + 2, sizeof *argv);
    char **envp = make_env(env);
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
    int rc = 0;
    if (!argv || !envp) {
        rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
        goto done;
    }
    argv[0] = (char *)command;
    for (int i = 0; i < nargs; i++) argv[i + 1] = cJSON_GetArrayItem(args, i)->valuestring;
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC)) {
        rc = seer_err_set(err, SEER_EIO, "mcp server '%s': pipe: %s", s->name, strerror(errno));
        goto done;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    /* seer's own descriptors (ZMQ sockets, files) are none of the server's business. */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
    if (cJSON_IsString(cwd)) posix_spawn_file_actions_addchdir_np(&fa, cwd->valuestring);
    sigset_t def, empty;
    sigemptyset(&def);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGTERM);
    sigaddset(&def, SIGQUIT);
    sigaddset(&def, SIGHUP);
    sigemptyset(&empty);
    posix_spawnattr_setsigdefault(&attr, &def);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
    pid_t pid;
    int e = posix_spawnp(&pid, command, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (e != 0) {
        rc = seer_err_set(err, SEER_EIO, "mcp server '%s': cannot start '%s': %s", s->name, command, strerror(e));
        goto done;
    }
    s->pid = pid;
    s->in_fd = in[1];
    s->out_fd = out[0];
    s->err_fd = errp[0];
    in[1] = out[0] = errp[0] = -1;
    set_nonblock(s->in_fd);
    set_nonblock(s->out_fd);
    set_nonblock(s->err_fd);
done:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0) close(in[i]);
        if (out[i] >= 0) close(out[i]);
        if (errp[i] >= 0) close(errp[i]);
    }
    free(argv);
    free_env(envp, env);
    return rc;
}

/* ---- reading ------------------------------------------------------------------------------ */

static int too_long(mcp_server_t *s) {
    mcp_rd_reset(&s->rd);
    return mcp_set_dead(s, MCP_TOO_LONG_FMT, s->opts->max_message_bytes);
}

/* Feeds what stdout gave to the line being read; each newline ends a message, which is
 * dispatched. A line is held only up to its bound (client_reader.c), however it was split
 * into reads and whether or not its end ever comes. */
static int take_bytes(mcp_server_t *s, const char *p, size_t n) {
    while (n) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;
        if (take && mcp_rd_feed(s, &s->rd, p, take) < 0) return too_long(s);
        if (!nl) break;
        mcp_rd_end(s, &s->rd);
        p = nl + 1;
        n -= take + 1;
    }
    return 0;
}

/* Reads what stdout has now and dispatches the messages in it. Returns 0, or SEER_MCP_EDEAD at
 * EOF / on a line past max_message_bytes. Answers to the server's requests are queued (they are
 * written by flush_answers, never in the middle of reading or writing a message). */
static int read_stdout(mcp_server_t *s) {
    char buf[READ_CHUNK];
    for (int rounds = 0; s->out_fd >= 0 && rounds < 64; rounds++) {
        ssize_t r = read(s->out_fd, buf, sizeof buf);
        if (r > 0) {
            s->reading++;
            int rc = take_bytes(s, buf, (size_t)r);
            s->reading--;
            if (rc < 0) return rc;
            if (s->wait_msg) return 0;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return 0; /* EAGAIN: all read */
        /* EOF: a last message without its newline still counts. */
        close(s->out_fd);
        s->out_fd = -1;
        s->reading++;
        mcp_rd_end(s, &s->rd);
        s->reading--;
        if (s->wait_msg) {
            gone(s); /* later requests fail, this one got its answer */
            return 0;
        }
        return gone(s);
    }
    return 0;
}

void mcp_stdio_queue(mcp_server_t *s, char *text) {
    if (s->nanswers >= MCP_MAX_ANSWERS) {
        free(text);
        if (s->answers_dropped++ == 0)
            mcp_warn(s, "it sent more than %d requests at once: answers beyond that are not sent", MCP_MAX_ANSWERS);
        return;
    }
    char **q = realloc(s->answers, (s->nanswers + 1) * sizeof *q);
    if (!q) {
        free(text);
        return;
    }
    s->answers = q;
    s->answers[s->nanswers++] = text;
}

/* Writes the queued answers (those queued meanwhile wait for the next time), all within one
 * grace period: a server that asks and does not read cannot hold the client for long. */
static void flush_answers(mcp_server_t *s) {
    if (s->sending || s->reading || s->flushing || !s->nanswers) return;
    s->flushing = 1;
    char **q = s->answers;
    size_t n = s->nanswers;
    s->answers = NULL;
    s->nanswers = 0;
    int64_t deadline = mcp_now_ms() + 2000;
    size_t i = 0;
    int failed = 0;
    for (; i < n && !failed; i++) {
        int rc = mcp_stdio_send(s, q[i], strlen(q[i]), deadline, NULL);
        if (rc < 0) {
            failed = 1;
            if (!s->dead_msg)
                mcp_warn(s, "could not answer its requests: %s",
                         rc == SEER_MCP_ETIMEOUT ? "it does not read its stdin" : rc == SEER_EINTR ? "interrupted" : "writing failed");
        }
        free(q[i]);
    }
    for (; i < n; i++) free(q[i]);
    free(q);
    if (s->answers_dropped > 1)
        mcp_warn(s, "%zu of its requests went unanswered: it sent more than %d at once", s->answers_dropped, MCP_MAX_ANSWERS);
    s->answers_dropped = 0;
    s->flushing = 0;
}

int mcp_stdio_pump(mcp_server_t *s, int64_t deadline, seer_err_t *err) {
    (void)err;
    for (;;) {
        flush_answers(s);
        if (s->wait_msg) return 0;
        if (s->dead_msg) return SEER_MCP_EDEAD;
        if (mcp_interrupted(s)) return SEER_EINTR;
        int64_t now = mcp_now_ms();
        if (now >= deadline) return SEER_MCP_ETIMEOUT;
        int slice = deadline - now < SLICE_MS ? (int)(deadline - now) : SLICE_MS;
        struct pollfd p[2] = {{s->out_fd, POLLIN, 0}, {s->err_fd, POLLIN, 0}};
        int r = poll(p, 2, slice);
        if (r < 0 && errno != EINTR) return mcp_set_dead(s, "poll: %s", strerror(errno));
        if (r > 0 && p[1].revents) drain_stderr(s);
        if (r > 0 && p[0].revents) {
            int rc = read_stdout(s);
            if (rc < 0) return rc;
        } else if (r == 0 && reap(s, WNOHANG)) {
            /* Exited while something else (a grandchild) keeps its stdout open: no EOF comes. */
            read_stdout(s);
            if (s->wait_msg) return 0;
            return gone(s);
        }
    }
}

/* ---- writing ------------------------------------------------------------------------------ */

/* Writes to a pipe whose reader may be gone: SIGPIPE is blocked for this thread while writing
 * and a pending one is consumed, so a dead server is an EPIPE error, never a killed seer. */
static int stdio_send(mcp_server_t *s, const char *text, size_t n, int64_t deadline);

int mcp_stdio_send(mcp_server_t *s, const char *text, size_t n, int64_t deadline, seer_err_t *err) {
    (void)err;
    if (s->dead_msg) return SEER_MCP_EDEAD;
    if (s->in_fd < 0) return mcp_set_dead(s, "the server's stdin is closed");
    s->sending++;
    int rc = stdio_send(s, text, n, deadline);
    s->sending--;
    if (rc == 0) flush_answers(s);
    return rc;
}

/* Messages the server sends while this one is written are read and dispatched meanwhile (a
 * server blocked on its own stdout cannot deadlock us); answers to its requests wait. */
static int stdio_send(mcp_server_t *s, const char *text, size_t n, int64_t deadline) {
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    int rc = 0;
    int epipe = 0;
    /* The message and its newline; the newline is a separate write of one byte at the end. */
    const char *parts[2] = {text, "\n"};
    size_t lens[2] = {n, 1};
    for (int k = 0; k < 2 && rc == 0; k++) {
        size_t off = 0;
        while (off < lens[k]) {
            ssize_t w = write(s->in_fd, parts[k] + off, lens[k] - off);
            if (w > 0) {
                off += (size_t)w;
                continue;
            }
            if (w < 0 && errno == EINTR) continue;
            if (w < 0 && errno == EPIPE) {
                epipe = 1;
                rc = SEER_MCP_EDEAD;
                break;
            }
            if (w < 0 && errno != EAGAIN) {
                rc = mcp_set_dead(s, "writing to the server: %s", strerror(errno));
                break;
            }
            /* The pipe is full: wait for room, reading the server's output meanwhile so that a
             * server blocked on its own stdout cannot deadlock us. */
            if (mcp_interrupted(s)) {
                rc = SEER_EINTR;
                break;
            }
            int64_t now = mcp_now_ms();
            if (now >= deadline) {
                rc = SEER_MCP_ETIMEOUT;
                break;
            }
            struct pollfd p[3] = {{s->in_fd, POLLOUT, 0}, {s->reading ? -1 : s->out_fd, POLLIN, 0}, {s->err_fd, POLLIN, 0}};
            int slice = deadline - now < SLICE_MS ? (int)(deadline - now) : SLICE_MS;
            if (poll(p, 3, slice) > 0) {
                if (p[2].revents) drain_stderr(s);
                if (p[1].revents) {
                    int r = read_stdout(s);
                    if (r < 0) {
                        rc = r;
                        break;
                    }
                }
            }
        }
    }
    if (epipe && !was_pending) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (epipe) return gone(s);
    return rc;
}

/* ---- closing ------------------------------------------------------------------------------ */

void mcp_stdio_close_begin(mcp_server_t *s) {
    if (s->in_fd >= 0) close(s->in_fd);
    s->in_fd = -1;
}

/* The shutdown the MCP spec describes for stdio: stdin closed, a grace period, SIGTERM, then
 * SIGKILL. Signals go to the child's process group, which takes helpers it started along. */
void mcp_stdio_close_end(mcp_server_t *s, int64_t deadline) {
    mcp_stdio_close_begin(s);
    if (s->pid && !s->exited) {
        int sig = 0;
        for (;;) {
            if (reap(s, WNOHANG)) break;
            if (mcp_now_ms() >= deadline) {
                /* not gone TERM_WAIT_MS after SIGKILL: in an uninterruptible sleep (a hung
                 * mount); it is left unreaped rather than waited for without a bound */
                if (sig == SIGKILL) break;
                sig = sig == 0 ? SIGTERM : SIGKILL;
                kill(-s->pid, sig);
                kill(s->pid, sig);
                deadline = mcp_now_ms() + TERM_WAIT_MS;
            }
            /* Keep its pipes drained: a server blocked writing cannot see its stdin close. */
            struct pollfd p[2] = {{s->out_fd, POLLIN, 0}, {s->err_fd, POLLIN, 0}};
            if (poll(p, 2, 10) > 0) {
                if (p[1].revents) drain_stderr(s);
                if (p[0].revents) {
                    char buf[READ_CHUNK];
                    ssize_t r = read(s->out_fd, buf, sizeof buf);
                    if (r == 0) {
                        close(s->out_fd);
                        s->out_fd = -1;
                    }
                }
            }
        }
    }
    if (s->out_fd >= 0) close(s->out_fd);
    if (s->err_fd >= 0) close(s->err_fd);
    s->out_fd = s->err_fd = -1;
    s->pid = 0;
}
