/* The seer command line: runs Lua scripts (`seer FILE.lua`, `seer -e CODE`, `seer -`), the
 * REPL, and the subcommands in the table below. One binary plays every role, so each
 * subsystem that becomes a process (kernel, mcp, sandboxd, ...) adds one row to that table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <luajit.h>

#include "host/host.h"
#include "seer.h"

enum { EXIT_LUA_ERROR = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

typedef struct seer_command {
    const char *name;
    const char *summary;
    /* full help text for `seer help NAME`; NULL: the command prints its own (`NAME --help`), so
     * the two never differ */
    const char *usage;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} seer_command_t;

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);
static int cmd_model(int argc, char **argv);
static int cmd_kernel(int argc, char **argv);
static int cmd_notebook(int argc, char **argv);
static int cmd_mcp(int argc, char **argv);
static int cmd_hub(int argc, char **argv);
static int cmd_sandbox(int argc, char **argv);
static int cmd_sandboxd(int argc, char **argv);
static int cmd_rpc(int argc, char **argv);
static int cmd_transcript(int argc, char **argv);
static int cmd_replay(int argc, char **argv);
static int cmd_serve(int argc, char **argv);

static const seer_command_t commands[] = {
    {"help", "show help for seer or for one command",
     "usage: seer help [COMMAND]\n\n"
     "Without COMMAND, lists the ways to run seer and its commands; with COMMAND, shows that\n"
     "command's usage.\n",
     cmd_help},
    {"version", "print the seer and LuaJIT versions",
     "usage: seer version    (same as seer --version)\n", cmd_version},
    {"model", "inspect a model (info) or generate text from the shell (generate)", NULL, cmd_model},
    {"kernel", "the Jupyter kernel for Lua (kernel -f FILE), or install its kernelspec", NULL, cmd_kernel},
    {"notebook", "the notebook server: kernels, live .ipynb notebooks and their live view", NULL, cmd_notebook},
    {"mcp", "MCP servers for agents: notebook (and cli, rpc, local), over stdio or streamable HTTP", NULL, cmd_mcp},
    {"hub", "download a model repository into the Hugging Face cache", NULL, cmd_hub},
    {"sandbox", "list, inspect and terminate local sandboxes", NULL, cmd_sandbox},
    {"sandboxd", "the daemon inside a sandbox (started by Sandbox:start, not by hand)", NULL, cmd_sandboxd},
    {"rpc", "serve a scoped interface.lua over signed RPC", NULL, cmd_rpc},
    {"transcript", "read agent transcripts", NULL, cmd_transcript},
    {"replay", "re-run a recorded investigation and compare every tool result", NULL, cmd_replay},
    {"serve", "a model behind an OpenAI-compatible HTTP endpoint", NULL, cmd_serve},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const seer_command_t *find_command(const char *name) {
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void list_command_names(FILE *f) {
    for (size_t i = 0; i < NCOMMANDS; i++) fprintf(f, "%s%s", i ? ", " : "", commands[i].name);
}

static void print_usage(FILE *f) {
    fprintf(f,
            "%s\n\n"
            "usage: seer FILE.lua [ARGS...]   run a Lua script (arg[0] = FILE, arg[1..] = ARGS)\n"
            "       seer -e CODE [ARGS...]    run CODE\n"
            "       seer - [ARGS...]          run the script read from standard input\n"
            "       seer                      start the REPL (on a terminal; otherwise read stdin)\n"
            "       seer --version            print the version\n"
            "       seer COMMAND [ARGS...]    run a command:\n\n",
            seer_version_long());
    for (size_t i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nseer help COMMAND shows a command's usage. Environment: SEER_LUA_DIR (the Lua tree),\n"
               "SEER_HISTORY (REPL history file; empty disables it).\n");
}

static int cmd_help(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stdout);
        return 0;
    }
    const seer_command_t *c = find_command(strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ? "help" : argv[1]);
    if (!c) {
        fprintf(stderr, "seer help: unknown command '%s'; commands: ", argv[1]);
        list_command_names(stderr);
        fputc('\n', stderr);
        return EXIT_USAGE;
    }
    if (c->usage) {
        fputs(c->usage, stdout);
        return 0;
    }
    char *help_argv[] = {(char *)c->name, "--help", NULL};
    return c->run(2, help_argv);
}

static int cmd_version(int argc, char **argv) {
    /* argv[0]: "version", "--version" or "-v"; anything after it was ignored without a word */
    if (argc > 1) {
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
            fputs(find_command("version")->usage, stdout);
            return 0;
        }
        fprintf(stderr, "seer %s: takes no arguments; unexpected argument '%s'\n%s", argv[0], argv[1],
                find_command("version")->usage);
        return EXIT_USAGE;
    }
    printf("%s, %s\n", seer_version_long(), LUAJIT_VERSION);
    return 0;
}

/* Opens the host, runs one of the three kinds of code, reports a failure the way the lua
 * interpreter does ("seer: FILE:LINE: message" and the traceback) and maps it to an exit code. */
enum run_kind { RUN_FILE, RUN_STRING, RUN_REPL };

static int run_lua(const char *progname, enum run_kind kind, const char *what, int argc, char **argv) {
    seer_host_t *h;
    seer_err_t err;
    seer_host_opts_t opts = {.progname = progname};
    if (seer_host_open(&h, &opts, &err) < 0) {
        fprintf(stderr, "seer: %s\n", err.msg);
        return EXIT_LUA_ERROR;
    }
    int rc;
    switch (kind) {
    case RUN_FILE: rc = seer_host_run_file(h, what, argc, argv, &err); break;
    case RUN_STRING: rc = seer_host_run_string(h, what, "=(command line)", argc, argv, &err); break;
    default: rc = seer_host_repl(h); break;
    }
    fflush(stdout);
    if (rc == SEER_EINTR && !getenv("SEER_TRACEBACK")) {
        /* Ctrl-C or SIGTERM: what happened, not a traceback that reads like a crash (it shows
         * where the code was: SEER_TRACEBACK=1) */
        const char *nl = strchr(err.msg, '\n');
        char first[sizeof err.msg];
        snprintf(first, sizeof first, "%.*s", nl ? (int)(nl - err.msg) : (int)strlen(err.msg), err.msg);
        /* where it was is the user's script's line, or seer's own (a command such as seer serve
         * waiting in its loop): that is no news to the user */
        const char *colon = strchr(first, ':');
        if (colon && strstr(first, "/lua/seer/") && strstr(first, "/lua/seer/") < colon) snprintf(first, sizeof first, "interrupted");
        seer_host_write_message(stderr, "seer: ", first);
    } else if (rc < 0)
        seer_host_write_message(stderr, "seer: ", err.msg);
    seer_host_close(h);
    if (rc == SEER_EINTR) return EXIT_INTERRUPTED;
    return rc < 0 ? EXIT_LUA_ERROR : 0;
}

/* Commands written in Lua: runs require(module).main(args...) in a fresh host. */
static int run_lua_command(const char *progname, const char *module, int argc, char **argv) {
    char code[256];
    snprintf(code, sizeof code, "return require('%s').main(...)", module);
    return run_lua(progname, RUN_STRING, code, argc, argv);
}

static int cmd_model(int argc, char **argv) { return run_lua_command("seer", "seer.cli.model", argc - 1, argv + 1); }

/* engine/kernel/ provides the kernel's main; weak so the CLI links while it is being built. */
int seer_kernel_main(int argc, char **argv) __attribute__((weak));
static int cmd_kernel(int argc, char **argv) {
    if (!seer_kernel_main) {
        fprintf(stderr, "seer kernel: this build has no kernel (engine/kernel/ missing)\n");
        return EXIT_LUA_ERROR;
    }
    return seer_kernel_main(argc, argv);
}

static int cmd_hub(int argc, char **argv) { return run_lua_command("seer", "seer.cli.hub", argc - 1, argv + 1); }

static int cmd_sandbox(int argc, char **argv) { return run_lua_command("seer", "seer.cli.sandbox", argc - 1, argv + 1); }
static int cmd_sandboxd(int argc, char **argv) { return run_lua_command("seer", "seer.cli.sandboxd", argc - 1, argv + 1); }
static int cmd_rpc(int argc, char **argv) { return run_lua_command("seer", "seer.cli.rpc", argc - 1, argv + 1); }
static int cmd_transcript(int argc, char **argv) { return run_lua_command("seer", "seer.cli.transcript", argc - 1, argv + 1); }
static int cmd_replay(int argc, char **argv) { return run_lua_command("seer", "seer.cli.replay", argc - 1, argv + 1); }
static int cmd_serve(int argc, char **argv) { return run_lua_command("seer", "seer.cli.serve", argc - 1, argv + 1); }

static int cmd_mcp(int argc, char **argv) { return run_lua_command("seer", "seer.cli.mcp", argc - 1, argv + 1); }

static int cmd_notebook(int argc, char **argv) {
    return run_lua_command("seer", "seer.cli.notebook", argc - 1, argv + 1);
}

static int looks_like_script(const char *a) {
    size_t n = strlen(a);
    struct stat st;
    return strchr(a, '/') || (n > 4 && strcmp(a + n - 4, ".lua") == 0) || stat(a, &st) == 0;
}

/* SEER_DIE_WITH_PARENT=<pid> (or 1): this process gets SIGTERM when the process that started it
 * ends (PR_SET_PDEATHSIG), whatever the command; it exits at once when that parent is already
 * gone. Set by process.spawn{die_with_parent = true}: a `seer serve` an experiment started must
 * not outlive a kill -9 of the experiment. */
static void die_with_parent(void) {
    const char *v = getenv("SEER_DIE_WITH_PARENT");
    if (!v || !*v || strcmp(v, "0") == 0) return;
    long want = strtol(v, NULL, 10);
    /* for this process only: its own seer children have another parent (a grandchild that
     * inherited the pid exited at once, finding its parent was not that one) */
    unsetenv("SEER_DIE_WITH_PARENT");
    prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    pid_t pp = getppid();
    if (pp == 1 || (want > 1 && pp != (pid_t)want)) exit(1);
}

int main(int argc, char **argv) {
    const char *prog = argv[0];
    die_with_parent();
    if (argc < 2) {
        if (isatty(STDIN_FILENO)) return run_lua(prog, RUN_REPL, NULL, 0, NULL);
        return run_lua(prog, RUN_FILE, "-", 0, NULL);
    }
    const char *a = argv[1];
    if (strcmp(a, "--version") == 0 || strcmp(a, "-v") == 0) return cmd_version(argc - 1, argv + 1);
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return cmd_help(1, argv + 1);
    if (strcmp(a, "-e") == 0) {
        if (argc < 3) {
            fprintf(stderr, "seer: -e needs a chunk of code, e.g. seer -e 'print(1 + 1)'\n");
            return EXIT_USAGE;
        }
        return run_lua(prog, RUN_STRING, argv[2], argc - 3, argv + 3);
    }
    if (strcmp(a, "-") == 0) return run_lua(prog, RUN_FILE, "-", argc - 2, argv + 2);
    if (strcmp(a, "--") == 0 && argc >= 3) return run_lua(prog, RUN_FILE, argv[2], argc - 3, argv + 3);
    if (a[0] == '-') {
        fprintf(stderr, "seer: unknown option '%s'\n\n", a);
        print_usage(stderr);
        return EXIT_USAGE;
    }
    const seer_command_t *c = find_command(a);
    if (c) return c->run(argc - 1, argv + 1);
    if (looks_like_script(a)) return run_lua(prog, RUN_FILE, a, argc - 2, argv + 2);
    fprintf(stderr, "seer: unknown command '%s'; commands: ", a);
    list_command_names(stderr);
    fprintf(stderr, "\n(to run a script, give its path, e.g. seer ./%s.lua; see seer help)\n", a);
    return EXIT_USAGE;
}
