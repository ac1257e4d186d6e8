/* Shared by every subsystem of the seer engine: status codes, the error record that carries a
 * human message back to the caller, and the version string. Everything else lives behind one
 * header per subsystem (engine/<sub>/<sub>.h). */
#ifndef SEER_H
#define SEER_H

#include <stdarg.h>
#include <stddef.h>

/* Status codes: 0 is success, failures are negative so `if (rc < 0)` reads naturally. */
enum {
    SEER_OK = 0,
    SEER_EINVAL = -1,  /* bad argument or bad input from the user */
    SEER_ENOMEM = -2,  /* allocation failed */
    SEER_EIO = -3,     /* file or stream error (errno is in the message) */
    SEER_ELUA = -4,    /* a Lua error; the message carries the traceback */
    SEER_EINTR = -5,   /* interrupted by the user (Ctrl-C, kernel interrupt) */
    SEER_ENOTFOUND = -6,
    SEER_EPARSE = -7,  /* malformed input (JSON, config, ...) */
    SEER_EUNSUPPORTED = -8, /* not available in this build or on this machine (no GPU, no kernels) */
    SEER_ESTOP = -9,   /* inside a forward pass only: it reached its stop (seer_fwd_hooks_t.stop), not a failure */
};

/* Large enough for a Lua message plus a traceback of a deep stack; longer text is cut with a
 * visible marker rather than silently. */
#define SEER_ERR_MSG_MAX 8192

typedef struct seer_err {
    int code;
    char msg[SEER_ERR_MSG_MAX];
} seer_err_t;

/* Fills err (if not NULL) and returns code, so call sites can `return seer_err_set(...)`. */
int seer_err_set(seer_err_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int seer_err_setv(seer_err_t *err, int code, const char *fmt, va_list ap);
void seer_err_clear(seer_err_t *err);

/* Writing a file so that a crash leaves the old file or the new one, never half of one: data
 * goes to a temporary file beside the target; commit keeps the target's mode (new files get
 * 0666 & ~umask), fsyncs, and renames it over the target. Every subsystem that saves user work
 * (notebooks, transcripts, tensors, caches) writes through this. */
typedef struct seer_atomic_file {
    int fd;
    char *tmp;
    const char *path;
} seer_atomic_file_t;

int seer_atomic_open(seer_atomic_file_t *f, const char *path, seer_err_t *err);
int seer_atomic_write(seer_atomic_file_t *f, const void *data, size_t n, seer_err_t *err);
/* On failure the temporary file is removed and the target is untouched. */
int seer_atomic_commit(seer_atomic_file_t *f, seer_err_t *err);
void seer_atomic_abort(seer_atomic_file_t *f); /* removes the temporary file; safe to repeat */

/* A percentage line on stderr for a long transfer of bytes ("\rseer: <what> 42% (0.80 / 1.90
 * GiB)"), rewritten only when the percentage changes and ended with a newline at 100%. Set show
 * (e.g. isatty(2)), total and what, last_pct = -1; then seer_progress_add for each piece. */
typedef struct seer_progress {
    int show, last_pct;
    size_t done, total;
    const char *what;
} seer_progress_t;
void seer_progress_add(seer_progress_t *p, size_t bytes);

/* "0.1.0"; the build adds the git revision in seer_version_long(). */
const char *seer_version(void);
const char *seer_version_long(void);

#endif
