/* `seer kernel install`: writes kernel.json so Jupyter (JupyterLab, nbclient, jupyter_client)
 * can start this seer binary as a kernel. The argv holds the binary's absolute path, so the
 * kernelspec keeps working from any directory; SEER_LUA_DIR goes into env when the Lua tree in
 * use is not the one an installed seer would find by itself. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "host/host.h"
#include "kernel.h"

static const char usage[] =
    "usage: seer kernel install [--user | --prefix PREFIX] [--name NAME] [--display-name TEXT]\n"
    "                           [--interrupt-mode signal|message]\n"
    "  --user          ~/.local/share/jupyter/kernels/NAME\n"
    "  --prefix P      P/share/jupyter/kernels/NAME\n"
    "  (neither)       /usr/local/share/jupyter/kernels/NAME\n"
    "  --name N        kernelspec name (default seer; letters, digits, '.', '_', '-')\n"
    "  --display-name  what notebooks show (default \"Lua (seer)\")\n";

/* mkdir -p */
static int make_dirs(const char *path, char *why, size_t whylen) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            struct stat st;
            if (stat(p, &st) != 0) {
                if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                    snprintf(why, whylen, "cannot create %s: %s", p, strerror(errno));
                    return -1;
                }
            } else if (!S_ISDIR(st.st_mode)) {
                snprintf(why, whylen, "%s exists and is not a directory", p);
                return -1;
            }
            *s = c;
            if (c == '\0') break;
        }
    }
    return 0;
}

static int valid_name(const char *n) {
    if (!*n) return 0;
    for (; *n; n++)
        if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || (*n >= '0' && *n <= '9') || *n == '.' ||
              *n == '_' || *n == '-'))
            return 0;
    return 1;
}

int seer_kernel_install(int argc, char **argv) {
    const char *prefix = NULL, *name = "seer", *display = "Lua (seer)", *imode = "signal";
    int user = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (strcmp(a, "--user") == 0) user = 1;
        else if (strcmp(a, "--prefix") == 0 && has_val) prefix = argv[++i];
        else if (strcmp(a, "--name") == 0 && has_val) name = argv[++i];
        else if (strcmp(a, "--display-name") == 0 && has_val) display = argv[++i];
        else if (strcmp(a, "--interrupt-mode") == 0 && has_val) imode = argv[++i];
        else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else {
            int known = strcmp(a, "--prefix") == 0 || strcmp(a, "--name") == 0 || strcmp(a, "--display-name") == 0 ||
                        strcmp(a, "--interrupt-mode") == 0;
            fprintf(stderr, "seer kernel install: %s '%s'\n%s", known ? "missing value for" : "unknown argument", a,
                    usage);
            return 2;
        }
    }
    if (user && prefix) {
        fprintf(stderr, "seer kernel install: --user and --prefix exclude each other\n");
        return 2;
    }
    if (!valid_name(name)) {
        fprintf(stderr, "seer kernel install: invalid kernel name '%s' (use letters, digits, '.', '_' and '-')\n", name);
        return 2;
    }
    if (!display[strspn(display, " \t")]) {
        fprintf(stderr, "seer kernel install: --display-name is empty; give the name notebooks should show\n");
        return 2;
    }
    if (strcmp(imode, "signal") != 0 && strcmp(imode, "message") != 0) {
        fprintf(stderr, "seer kernel install: --interrupt-mode must be signal or message, not '%s'\n", imode);
        return 2;
    }

    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0) {
        fprintf(stderr, "seer kernel install: cannot locate the seer executable: %s\n", strerror(errno));
        return 1;
    }
    exe[n] = '\0';

    /* The Lua tree this seer uses now; an installed seer finds <exe dir>/../share/seer/lua on its
     * own, anything else (a build tree, SEER_LUA_DIR) must be written into the kernelspec. */
    seer_host_t *h;
    seer_err_t err;
    seer_host_opts_t opts = {.progname = "seer"};
    if (seer_host_open(&h, &opts, &err) < 0) {
        fprintf(stderr, "seer kernel install: %s\n", err.msg);
        return 1;
    }
    char lua_dir[PATH_MAX], installed[PATH_MAX + 32], exe_dir[PATH_MAX];
    if (!realpath(seer_host_lua_dir(h), lua_dir)) snprintf(lua_dir, sizeof lua_dir, "%s", seer_host_lua_dir(h));
    seer_host_close(h);
    snprintf(exe_dir, sizeof exe_dir, "%s", exe);
    char *slash = strrchr(exe_dir, '/');
    if (slash) *slash = '\0';
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/../share/seer/lua", exe_dir);
    int need_env = !realpath(probe, installed) || strcmp(installed, lua_dir) != 0;

    char dir[PATH_MAX];
    int w;
    if (user) {
        const char *home = getenv("HOME");
        if (!home || !*home) {
            fprintf(stderr, "seer kernel install: --user needs $HOME\n");
            return 1;
        }
        w = snprintf(dir, sizeof dir, "%s/.local/share/jupyter/kernels/%s", home, name);
    } else {
        w = snprintf(dir, sizeof dir, "%s/share/jupyter/kernels/%s", prefix ? prefix : "/usr/local", name);
    }
    if (w < 0 || (size_t)w >= sizeof dir) {
        fprintf(stderr, "seer kernel install: path too long\n");
        return 1;
    }
    char why[PATH_MAX + 128];
    if (make_dirs(dir, why, sizeof why) < 0) {
        fprintf(stderr, "seer kernel install: %s%s\n", why,
                (!user && !prefix && errno == EACCES) ? " (install with --user, or --prefix PREFIX)" : "");
        return 1;
    }

    cJSON *spec = cJSON_CreateObject();
    cJSON *av = cJSON_AddArrayToObject(spec, "argv");
    cJSON_AddItemToArray(av, cJSON_CreateString(exe));
    cJSON_AddItemToArray(av, cJSON_CreateString("kernel"));
    cJSON_AddItemToArray(av, cJSON_CreateString("-f"));
    cJSON_AddItemToArray(av, cJSON_CreateString("{connection_file}"));
    cJSON_AddStringToObject(spec, "display_name", display);
    cJSON_AddStringToObject(spec, "language", "lua");
    cJSON_AddStringToObject(spec, "interrupt_mode", imode);
    if (need_env) {
        cJSON *env = cJSON_AddObjectToObject(spec, "env");
        cJSON_AddStringToObject(env, "SEER_LUA_DIR", lua_dir);
    }
    cJSON *md = cJSON_AddObjectToObject(spec, "metadata");
    cJSON_AddBoolToObject(md, "debugger", 0);
    char *text = cJSON_Print(spec);
    cJSON_Delete(spec);
    if (!text) {
        fprintf(stderr, "seer kernel install: out of memory\n");
        return 1;
    }
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/kernel.json", dir);
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print leaves no newline; the NUL is not written */
    int rc = seer_host_write_file_atomic(path, text, len + 1, &err);
    free(text);
    if (rc < 0) {
        fprintf(stderr, "seer kernel install: %s\n", err.msg);
        return 1;
    }
    printf("installed kernelspec %s in %s\n", name, dir);
    return 0;
}
