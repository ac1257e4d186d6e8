/* Hugging Face hub downloads (see hub.h). The flow follows huggingface_hub's snapshot_download
 * so the cache it leaves is the one the Python tools expect: one API call for the commit and the
 * file list, then per missing file a HEAD (without following the CDN redirect, because the blob
 * name is the hub's X-Linked-Etag, not the CDN's ETag) and a GET that follows it. The files are
 * jobs run max_workers at a time by one curl multi handle on the caller's thread (run_jobs). */
#include "hub.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>
#include "hub/curl_dl.h"
#include "json/json.h"
#include <openssl/evp.h>

const char *const seer_hub_default_allow[] = {
    "config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "adapter_config.json", "adapter_model.safetensors", "chat_template.jinja",
};
const size_t seer_hub_default_allow_n = sizeof seer_hub_default_allow / sizeof *seer_hub_default_allow;

/* A connection that breaks mid-file is retried (resuming) this many times before giving up. */
#define ATTEMPTS 4

/* What the hub and its file host (hostile input: docs/security.md, "Exhaustion") can make a
 * download hold or wait for (docs/hub.md, "Limits"):
 * - the API reply (the commit and file list): at most API_MAX_BYTES, and at most API_MAX_VALUES
 *   JSON values, counted before cJSON builds anything. A listing costs 3 values per file
 *   ({"rfilename": "..."}), ~15 with the blob fields huggingface_hub can ask for, plus a few
 *   thousand for the card data: 2M values covers 100k files with every field (a 60 MB reply of
 *   "0," took the process to 2.4 GB; 2M cJSON nodes are ~160 MB), and 100k names of 100 bytes
 *   are ~10 MB of the 64 MiB;
 * - an error page: read up to ERROR_BODY_MAX (it is not shown), then the transfer is cut;
 * - the header lines of one request, redirects included: HEADER_MAX_BYTES;
 * - a file: exactly its declared size (X-Linked-Size, else Content-Length); a byte more ends the
 *   transfer, and a file whose size is not declared, or does not fit on the disk, is refused;
 * - a redirect's body (curl reads it to keep the connection): REDIRECT_BODY_MAX for the
 *   redirects of one request together, then the transfer is cut (an endless body on a 302 kept
 *   a GET busy for as long as the server went on sending, at any rate);
 * - time: the API call has API_TIMEOUT_S in all, a HEAD HEAD_TIMEOUT_S; any transfer under
 *   STALL_RATE bytes/s for STALL_S seconds is a stall (a file's attempt is cut and resumed,
 *   ATTEMPTS in all); a file's GETs together have time_floor + size / min_rate seconds in one
 *   run (size: what is left to fetch; defaults TIME_FLOOR_S and MIN_RATE, options or
 *   SEER_HUB_TIME_FLOOR / SEER_HUB_MIN_RATE), so a server that drips just above the stall rate
 *   holds a file no longer than an honest one at min_rate would. */
#define API_MAX_BYTES ((size_t)64 << 20)
#define API_MAX_VALUES ((size_t)2000000)
#define ERROR_BODY_MAX ((size_t)64 << 10)
#define HEADER_MAX_BYTES ((size_t)1 << 20)
#define API_TIMEOUT_S 300L
#define HEAD_TIMEOUT_S 120L
#define STALL_RATE 1024L
#define STALL_S 60L
#define REDIRECT_BODY_MAX ((curl_off_t)64 << 10)
#define TIME_FLOOR_S 300.0
#define MIN_RATE 16384.0 /* bytes/s: 1 Mbit/s shared by the default 4 workers is ~2x this */
#define MAX_FILE_SIZE (1LL << 50) /* 1 PiB: a larger declared size is not a real file */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

/* ---- small helpers -------------------------------------------------------------------------- */

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

static int env_true(const char *name) {
    const char *v = getenv(name);
    if (!v) return 0;
    return !strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on");
}

static int mkdirs(const char *path, seer_err_t *err) {
    char *p = strdup(path);
    if (!p) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == 0) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                int e = errno;
                int rc = seer_err_set(err, SEER_EIO, "cannot create directory %s: %s", p, strerror(e));
                free(p);
                return rc;
            }
            *s = c;
            if (!c) break;
        }
    }
    free(p);
    return SEER_OK;
}

/* ---- the cache, by descriptor ------------------------------------------------------------------
 * The cache may hold what a sandbox (or another program) that can write it puts there at any
 * moment, so nothing below the cache directory is reached by path: a folder is opened with
 * openat(O_DIRECTORY | O_NOFOLLOW) relative to the one above it, from the cache directory's own
 * descriptor down, and files and folders are made (mkdirat, openat, symlinkat, renameat,
 * unlinkat) relative to the descriptor walked to. A folder swapped for a link, before or while
 * seer works, is refused or not reached; it is never followed. The cache directory itself may be
 * a link (or lie under one): the user chose it. */

/* Opens the folder rel ('/'-separated plain names, none empty) below the folder fd at, whose
 * path at_path is only for messages; with create, a missing folder is made (mode 0777 less the
 * umask). *out gets the descriptor. A component that is a link: "... is a symbolic link ...";
 * missing without create: SEER_ENOTFOUND. */
static int walk_at(int at, const char *at_path, const char *rel, int create, int *out, seer_err_t *err) {
    char *p = strdup(rel);
    if (!p) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int fd = at, rc = SEER_OK;
    for (char *c = p; rc == SEER_OK;) {
        char *sl = strchr(c, '/');
        if (sl) *sl = 0;
        int nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0 && errno == ENOENT && create) {
            if (mkdirat(fd, c, 0777) != 0 && errno != EEXIST) {
                int e = errno;
                rc = seer_err_set(err, SEER_EIO, "cannot create directory %s/%.*s: %s", at_path,
                                  (int)(c - p + strlen(c)), rel, strerror(e));
                break;
            }
            nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (nfd < 0) {
            int e = errno;
            int n = (int)(c - p + strlen(c));
            struct stat st; /* Linux says ENOTDIR for a link under O_NOFOLLOW | O_DIRECTORY */
            if ((e == ELOOP || e == ENOTDIR) && fstatat(fd, c, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
                rc = seer_err_set(err, SEER_EIO,
                                  "hub: %s/%.*s is a symbolic link; seer does not follow links inside the model cache "
                                  "(remove it and run again)",
                                  at_path, n, rel);
            else if (e == ENOENT)
                rc = seer_err_set(err, SEER_ENOTFOUND, "hub: %s/%.*s does not exist", at_path, n, rel);
            else if (e == ENOTDIR)
                rc = seer_err_set(err, SEER_EIO, "hub: %s/%.*s is not a directory (remove it and run again)", at_path,
                                  n, rel);
            else
                rc = seer_err_set(err, SEER_EIO, "hub: cannot open %s/%.*s: %s", at_path, n, rel, strerror(e));
            break;
        }
        if (fd != at) close(fd);
        fd = nfd;
        if (!sl) break;
        c = sl + 1;
    }
    if (rc != SEER_OK && fd != at) close(fd);
    if (rc == SEER_OK) *out = fd;
    free(p);
    return rc;
}

/* Repo ids are "name" or "org/name" of [A-Za-z0-9._-]; anything else could escape the cache. */
static int valid_repo_id(const char *id) {
    int slashes = 0;
    if (!id || !*id || *id == '/' || *id == '.') return 0;
    for (const char *p = id; *p; p++) {
        if (*p == '/') {
            if (++slashes > 1 || p[1] == 0 || p[1] == '.') return 0;
        } else if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') {
            return 0;
        }
    }
    return !strstr(id, "..");
}

/* s quoted safely in a message (the text may come from the hub): printable ASCII stays, every
 * other byte is \xNN, and what does not fit in out (cap >= 8) ends in "...". Returns out. */
static const char *esc(char *out, size_t cap, const char *s) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)(s ? s : "(null)"); *p; p++) {
        if (o + 8 > cap) {
            memcpy(out + o, "...", 4);
            return out;
        }
        if (*p >= 0x20 && *p < 0x7f && *p != '\\') out[o++] = (char)*p;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", *p);
    }
    out[o] = 0;
    return out;
}
#define ESC_MAX 1024

/* Code points that are not printable in a file name: C1 controls, and the characters that
 * reorder or hide text on a terminal (bidi controls and marks, zero-width and invisible ones,
 * fillers, tags). Names on the Hugging Face hub never hold them. */
static int hidden_cp(unsigned cp) {
    return (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x115F || cp == 0x1160 || cp == 0x180E ||
           (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x206F) ||
           cp == 0x3164 || cp == 0xFEFF || cp == 0xFFA0 || (cp >= 0xFFF9 && cp <= 0xFFFB) ||
           (cp >= 0xE0000 && cp <= 0xE007F);
}

/* A relative path with no empty, "." or ".." component, in well-formed UTF-8 with no control
 * character (C0, DEL, C1), backslash or hidden character (hidden_cp): names from the server and
 * revisions become paths under the cache, so they must stay inside it, and they are printed. */
static int safe_relpath(const char *s) {
    if (!s || !*s || *s == '/') return 0;
    size_t len = strlen(s);
    if (!seer_utf8_validate(s, len, NULL)) return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned c = *p;
        if (c < 0x20 || c == 0x7f || c == '\\') return 0;
        if (c < 0x80) {
            p++;
            continue;
        }
        int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2; /* well-formed: checked above */
        unsigned cp = c & (0x7F >> n);
        for (int k = 1; k < n; k++) cp = cp << 6 | (p[k] & 0x3F);
        if (hidden_cp(cp)) return 0;
        p += n;
    }
    const char *p = s;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return 0;
        if (!e) break;
        p = e + 1;
    }
    return 1;
}

/* A blob or commit name from the server: 1 to 128 of [A-Za-z0-9._+=-], not starting with '.'
 * nor ending in ".incomplete" (another blob's partial file) (the hub's are 40 or 64 hex digits;
 * other servers' ETags may add a "-N" part). */
static int safe_token(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 128 || s[0] == '.') return 0;
    if (n >= 11 && !strcmp(s + n - 11, ".incomplete")) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._+=-", s[i])) return 0;
    return 1;
}

static int is_hex(const char *s, size_t n) {
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* Percent-encodes everything but unreserved characters (and '/' when keep_slash). */
static char *urlenc(const char *s, int keep_slash) {
    char *out = malloc(strlen(s) * 3 + 1), *o = out;
    if (!out) return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/'))
            *o++ = (char)*p;
        else
            o += sprintf(o, "%%%02X", *p);
    }
    *o = 0;
    return out;
}

static const char *opt_revision(const seer_hub_opts_t *o) {
    return o && o->revision && *o->revision ? o->revision : "main";
}

int seer_hub_cache_dir(const char *override, char **out, seer_err_t *err) {
    const char *v;
    char *s;
    if (override && *override)
        s = strdup(override);
    else if ((v = getenv("HF_HUB_CACHE")) && *v)
        s = strdup(v);
    else if ((v = getenv("HF_HOME")) && *v)
        s = xasprintf("%s/hub", v);
    else if ((v = getenv("HOME")) && *v)
        s = xasprintf("%s/.cache/huggingface/hub", v);
    else
        return seer_err_set(err, SEER_EINVAL, "cannot place the model cache: set HF_HOME (HOME is not set)");
    if (!s) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    *out = s;
    return SEER_OK;
}

static int check_args(const char *repo_id, const seer_hub_opts_t *o, seer_err_t *err) {
    char e[ESC_MAX];
    if (!valid_repo_id(repo_id))
        return seer_err_set(err, SEER_EINVAL,
                            "hub: '%s' is not a repo id: expected \"org/name\" (letters, digits, '.', '_', '-')",
                            esc(e, sizeof e, repo_id));
    if (!safe_relpath(opt_revision(o)))
        return seer_err_set(err, SEER_EINVAL, "hub: %s: '%s' is not a revision", repo_id,
                            esc(e, sizeof e, opt_revision(o)));
    return SEER_OK;
}

/* <cache>/models--org--name */
static int repo_dir(const char *repo_id, const seer_hub_opts_t *o, char **out, seer_err_t *err) {
    char *cache = NULL;
    int rc = seer_hub_cache_dir(o ? o->cache_dir : NULL, &cache, err);
    if (rc < 0) return rc;
    /* "org/name" -> "models--org--name" */
    char *d = malloc(strlen(cache) + strlen("/models--") + 2 * strlen(repo_id) + 1);
    if (!d) {
        free(cache);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }
    char *p = d + sprintf(d, "%s/models--", cache);
    free(cache);
    for (const char *s = repo_id; *s; s++) {
        if (*s == '/') *p++ = '-', *p++ = '-';
        else *p++ = *s;
    }
    *p = 0;
    *out = d;
    return SEER_OK;
}

/* ---- reading the cache -------------------------------------------------------------------------
 * What seer reads of the cache is reached the same way as what it writes: from the cache
 * directory's descriptor down (walk_at), never by path, no link below the cache directory
 * followed. A file read (a ref) is first opened with O_PATH | O_NOFOLLOW, which opens nothing (a
 * FIFO is not waited on, a device not opened, a link not followed), checked to be a regular file
 * of a bounded size, then opened for reading with O_NONBLOCK | O_NOFOLLOW and checked to be the
 * same file. */

/* A ref holds a commit id (40 hex digits; safe_token allows 128 characters): a file in refs/
 * larger than this is not a ref. */
#define REF_MAX_BYTES ((size_t)256)

/* What st is, for messages about a cache entry that is not what it should be. */
static const char *file_kind(const struct stat *st) {
    if (S_ISLNK(st->st_mode)) return "a symbolic link";
    if (S_ISFIFO(st->st_mode)) return "a FIFO";
    if (S_ISSOCK(st->st_mode)) return "a socket";
    if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) return "a device";
    if (S_ISDIR(st->st_mode)) return "a directory";
    return S_ISREG(st->st_mode) ? "a regular file" : "not a regular file";
}

/* The contents of leaf in the folder dfd (path names it in messages), at most max bytes, in *out
 * (malloc'd, NUL-terminated) with *len its length. SEER_ENOTFOUND when there is no such entry;
 * SEER_EIO, with a message naming path, what it is and the fix, for a symbolic link (not
 * followed), anything but a regular file (not opened for reading, never waited on) or a file
 * larger than max (what: what the file should hold, for that message). */
static int read_small_at(int dfd, const char *leaf, const char *path, size_t max, const char *what, char **out,
                         size_t *len, seer_err_t *err) {
    int pfd = openat(dfd, leaf, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (pfd < 0) {
        int e = errno;
        return seer_err_set(err, e == ENOENT ? SEER_ENOTFOUND : SEER_EIO, "hub: cannot open %s: %s", path,
                            strerror(e));
    }
    struct stat st, st2;
    int rc = SEER_OK;
    if (fstat(pfd, &st) != 0)
        rc = seer_err_set(err, SEER_EIO, "hub: cannot open %s: %s", path, strerror(errno));
    else if (S_ISLNK(st.st_mode))
        rc = seer_err_set(err, SEER_EIO,
                          "hub: %s is a symbolic link; seer does not follow links inside the model cache (remove it "
                          "and run again)",
                          path);
    else if (!S_ISREG(st.st_mode))
        rc = seer_err_set(err, SEER_EIO,
                          "hub: %s is %s, not a regular file; seer does not read it (remove it and run again)", path,
                          file_kind(&st));
    else if ((unsigned long long)st.st_size > max)
        rc = seer_err_set(err, SEER_EIO,
                          "hub: %s holds %lld bytes, more than %s can (%zu at most); seer does not read it (remove "
                          "it and run again)",
                          path, (long long)st.st_size, what, max);
    close(pfd);
    if (rc < 0) return rc;
    int fd = openat(dfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st2) != 0 || !S_ISREG(st2.st_mode) || st2.st_dev != st.st_dev ||
        st2.st_ino != st.st_ino) {
        if (fd >= 0) close(fd);
        return seer_err_set(err, SEER_EIO, "hub: %s was replaced while seer read it; run again", path);
    }
    char *buf = malloc(max + 2);
    size_t n = 0;
    while (buf && n <= max) {
        ssize_t r = read(fd, buf + n, max + 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = seer_err_set(err, SEER_EIO, "hub: cannot read %s: %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (!buf) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    if (rc == SEER_OK && n > max)
        rc = seer_err_set(err, SEER_EIO,
                          "hub: %s holds more than %zu bytes, more than %s can; seer does not read it (remove it and "
                          "run again)",
                          path, max, what);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return SEER_OK;
}

/* The commit a ref (leaf in the refs folder dfd) names: trailing white space dropped, the rest a
 * safe_token, else SEER_EIO naming the file (a ref that is not a commit is not followed). */
static int read_ref_at(int dfd, const char *leaf, const char *path, char **commit, seer_err_t *err) {
    char *s = NULL;
    size_t n = 0;
    int rc = read_small_at(dfd, leaf, path, REF_MAX_BYTES, "a ref (a commit id)", &s, &n, err);
    if (rc < 0) return rc;
    while (n > 0 && strchr("\r\n \t", s[n - 1])) s[--n] = 0;
    if (strlen(s) != n || !safe_token(s)) {
        char e[ESC_MAX];
        rc = seer_err_set(err, SEER_EIO,
                          "hub: %s holds '%s', not a commit id; seer does not follow it (remove it and run again)",
                          path, esc(e, sizeof e, s));
        free(s);
        return rc;
    }
    *commit = s;
    return SEER_OK;
}

/* Whether the entry name of the snapshot folder dfd, depth folders below snapshots/<commit>,
 * is a file of the repo seer can take as already fetched: a regular file (a copy, where links
 * could not be made), or a link of exactly huggingface_hub's and seer's shape, "../../blobs/<etag>"
 * with one more "../" per folder of the file's name, to a regular file in the repo's own blobs
 * folder (base/blobs below the cache directory root_fd, walked to without following a link, so
 * the kernel resolves the link to the file checked). Nothing is followed: a link elsewhere, to
 * a blob that is a link, a FIFO or missing, or any other entry, is not such a file (0). */
static int snapshot_entry_ok(int root_fd, const char *cache, const char *base, int dfd, const char *name,
                             int depth) {
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
    if (S_ISREG(st.st_mode)) return 1;
    if (!S_ISLNK(st.st_mode)) return 0;
    char target[PATH_MAX];
    ssize_t n = readlinkat(dfd, name, target, sizeof target - 1);
    if (n < 0) return 0;
    target[n] = 0;
    const char *p = target;
    for (int i = 0; i < depth + 2; i++, p += 3)
        if (strncmp(p, "../", 3) != 0) return 0;
    if (strncmp(p, "blobs/", 6) != 0 || !safe_token(p + 6)) return 0;
    char *rel = xasprintf("%s/blobs", base);
    int bfd = -1, ok = 0;
    seer_err_t scratch;
    if (rel && walk_at(root_fd, cache, rel, 0, &bfd, &scratch) == SEER_OK)
        ok = fstatat(bfd, p + 6, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
    if (bfd >= 0) close(bfd);
    free(rel);
    return ok;
}

/* The offline lookup, every step by descriptor from the cache directory, no link below it
 * followed: refs/<revision> read with read_ref_at (a link, FIFO or other non-file there is
 * refused naming it, never followed or waited on), and snapshots/<commit> walked to with walk_at,
 * so the folder handed back is the repo's own snapshot folder, not one a link leads to.
 *
 * The files in it are not vouched for: they are links into ../../blobs by design, and whoever
 * reads them opens each confined, with its own policy (seer.model.load and the tokenizer with
 * seer_st_open_confined: a link must resolve inside models--org--name and lead to a regular file;
 * the sandbox mounts each file confined the same way, passing over FIFOs and links to folders;
 * SEER_MODEL_FOLLOW_LINKS=1 lifts both for a folder the user assembled). A caller that opens them
 * itself must do the same (docs/hub.md, "Cache layout"). */
int seer_hub_cached(const char *repo_id, const seer_hub_opts_t *o, char **snapshot_dir, seer_err_t *err) {
    int rc = check_args(repo_id, o, err);
    if (rc < 0) return rc;
    char *rd = NULL;
    if ((rc = repo_dir(repo_id, o, &rd, err)) < 0) return rc;
    const char *rev = opt_revision(o);
    const char *slash = strrchr(rd, '/'); /* rd is "<cache>/models--org--name" */
    const char *base = slash + 1;
    char *cache = strndup(rd, slash > rd ? (size_t)(slash - rd) : 1);
    char *refrel = xasprintf("%s/refs/%s", base, rev), *refpath = xasprintf("%s/refs/%s", rd, rev);
    char *commit = NULL, *snaprel = NULL;
    int root = -1, rfd = -1, sfd = -1;
    if (!cache || !refrel || !refpath) {
        rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
        goto out;
    }
    root = open(cache, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        int e = errno;
        rc = e == ENOENT ? SEER_ENOTFOUND
                         : seer_err_set(err, SEER_EIO, "hub: cannot open the model cache %s: %s", cache, strerror(e));
        goto notfound;
    }
    char *leaf = strrchr(refrel, '/');
    *leaf++ = 0;
    rc = walk_at(root, cache, refrel, 0, &rfd, err);
    if (rc == SEER_OK) rc = read_ref_at(rfd, leaf, refpath, &commit, err);
    if (rc < 0 && rc != SEER_ENOTFOUND) goto out;
    if (!commit && is_hex(rev, 40) && !(commit = strdup(rev))) {
        rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
        goto out;
    }
    if (!commit) {
        rc = SEER_ENOTFOUND;
        goto notfound;
    }
    if (!(snaprel = xasprintf("%s/snapshots/%s", base, commit))) {
        rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = walk_at(root, cache, snaprel, 0, &sfd, err)) < 0) goto notfound;
    if (!(*snapshot_dir = xasprintf("%s/snapshots/%s", rd, commit)))
        rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
    goto out;
notfound:
    if (rc == SEER_ENOTFOUND)
        rc = seer_err_set(err, SEER_ENOTFOUND, "%s (revision %s) is not in the model cache at %s", repo_id, rev, rd);
out:
    if (sfd >= 0) close(sfd);
    if (rfd >= 0) close(rfd);
    if (root >= 0) close(root);
    free(commit), free(snaprel), free(refrel), free(refpath), free(cache), free(rd);
    return rc;
}
/* ---- HTTP ----------------------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} buf_t;

static int buf_add(buf_t *b, const void *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

/* The running checksum of a blob being written: the hub's ETag is the file's SHA-256 for LFS
 * files and its git blob id (SHA-1 over "blob <size>\0" + content) for the others. Hashing the
 * bytes as they arrive spares reading a large file back at the end, which would stall every
 * other transfer of the loop. covered is how many leading bytes of the file the state holds. */
typedef struct {
    EVP_MD_CTX *ctx;
    const EVP_MD *md; /* NULL: the ETag is not a hash we can check this way */
    int git;
    long long size;   /* the file size (the git header needs it up front) */
    long long covered;
    int ok;           /* 0 after an OpenSSL failure: fall back to reading the file */
} hash_t;

static void hash_reset(hash_t *h) {
    h->covered = 0;
    if (!h->md || !h->ok) return;
    if (EVP_DigestInit_ex(h->ctx, h->md, NULL) != 1) {
        h->ok = 0;
        return;
    }
    if (h->git) {
        char hdr[64];
        int n = snprintf(hdr, sizeof hdr, "blob %lld", h->size);
        if (EVP_DigestUpdate(h->ctx, hdr, (size_t)n + 1) != 1) h->ok = 0;
    }
}

/* Picks the hash from the ETag's shape; a git id with an unknown size is checked at the end
 * by verify_hash instead. */
static void hash_begin(hash_t *h, const char *etag, long long size) {
    memset(h, 0, sizeof *h);
    h->size = size;
    if (is_hex(etag, 64))
        h->md = EVP_sha256();
    else if (is_hex(etag, 40) && size >= 0)
        h->md = EVP_sha1(), h->git = 1;
    if (!h->md) return;
    h->ctx = EVP_MD_CTX_new();
    h->ok = h->ctx != NULL;
    hash_reset(h);
}

static void hash_update(hash_t *h, const void *p, size_t n) {
    if (h->md && h->ok && EVP_DigestUpdate(h->ctx, p, n) != 1) h->ok = 0;
    h->covered += (long long)n;
}

/* Brings the state to the first n bytes of fd (what an earlier run or attempt left). */
static int hash_sync(hash_t *h, int fd, long long n) {
    if (!h->md || h->covered == n) return 0;
    hash_reset(h);
    char *chunk = malloc(1 << 16);
    if (!chunk) return -1;
    while (h->covered < n) {
        size_t want = (size_t)(n - h->covered < (1 << 16) ? n - h->covered : (1 << 16));
        ssize_t got = pread(fd, chunk, want, (off_t)h->covered);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            free(chunk);
            return -1;
        }
        hash_update(h, chunk, (size_t)got);
    }
    free(chunk);
    return 0;
}

static void hash_free(hash_t *h) {
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
}

/* Returns 1 ok, 0 mismatch, -1 the state cannot tell (the caller reads the file instead). */
static int hash_check(hash_t *h, const char *etag, long long size) {
    if (!h->md) return is_hex(etag, 64) || is_hex(etag, 40) ? -1 : 1; /* not a hash ETag: unchecked */
    if (!h->ok || h->covered != size) return -1;
    unsigned char dig[EVP_MAX_MD_SIZE];
    unsigned int dl = 0;
    if (EVP_DigestFinal_ex(h->ctx, dig, &dl) != 1) return -1;
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    for (unsigned i = 0; i < dl; i++) sprintf(hex + 2 * i, "%02x", dig[i]);
    return strcasecmp(hex, etag) == 0;
}

/* The same check by reading the file (fd, the .incomplete): for a git id whose size was not
 * known up front. Other ETags (a different server) are not checked. Returns 1 ok, 0 mismatch,
 * -1 read error. */
static int verify_hash(int fd, const char *etag, long long size) {
    if (!is_hex(etag, 64) && !is_hex(etag, 40)) return 1;
    hash_t h;
    hash_begin(&h, etag, size);
    int rc = h.ok && hash_sync(&h, fd, size) == 0 ? hash_check(&h, etag, size) : -1;
    hash_free(&h);
    return rc;
}

typedef struct {
    const seer_hub_opts_t *o;
    const char *token;
    CURL *easy;
    struct curl_slist *headers;
    char *auth;
    /* headers of the last response (redirects reset them) */
    long status;
    char commit[128], linked_etag[256], etag[256], location[2048];
    long long linked_size, content_length; /* -1: not sent; -2: not a size */
    long long range_start;                 /* Content-Range's first byte; -1: none */
    size_t header_bytes;                   /* every header line so far (redirects too) */
    /* body: into memory (API, error pages) or the blob file */
    buf_t body;
    size_t max_body; /* a 2xx body into memory: at most this (error pages: ERROR_BODY_MAX) */
    int fd;          /* -1: body goes to memory */
    long long start; /* bytes already in the .incomplete file */
    long long size;  /* with fd: the declared size; no byte past it is written */
    long long written;
    int over;        /* why on_header/on_body cut the transfer (OVER_*), 0 if they did not */
    hash_t *hash;    /* with fd: the checksum of the file so far */
    int body_started;
    int io_error;
    int interrupted;
    char errbuf[CURL_ERROR_SIZE];
} req_t;

enum {
    OVER_BODY = 1, /* a 2xx body into memory passed max_body */
    OVER_ERRPAGE,  /* an error page passed ERROR_BODY_MAX (its status is what matters) */
    OVER_FILE,     /* a file passed its declared size */
    OVER_RANGE,    /* a 206 for other bytes than the ones asked for */
    OVER_HEADERS,  /* headers passed HEADER_MAX_BYTES */
    OVER_REDIRECT, /* the bodies of the redirects followed passed REDIRECT_BODY_MAX */
};

/* A size header: digits only, at most MAX_FILE_SIZE; else -2. */
static long long parse_size(const char *s) {
    if (!*s || strlen(s) > 16) return -2;
    long long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -2;
        v = v * 10 + (*p - '0');
    }
    return v <= MAX_FILE_SIZE ? v : -2;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void copy_header_value(char *dst, size_t cap, const char *v, size_t n) {
    while (n && (*v == ' ' || *v == '\t')) v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) n--;
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
    req_t *r = ud;
    size_t n = sz * nm;
    r->header_bytes += n;
    if (r->header_bytes > HEADER_MAX_BYTES) {
        r->over = OVER_HEADERS;
        return 0;
    }
    if (n >= 5 && !strncmp(p, "HTTP/", 5)) { /* a new response (after a redirect): forget the old headers */
        r->status = 0;
        r->etag[0] = r->location[0] = 0;
        r->content_length = r->linked_size = r->range_start = -1;
        const char *sp = memchr(p, ' ', n);
        if (sp) r->status = strtol(sp + 1, NULL, 10);
        return n;
    }
    const char *colon = memchr(p, ':', n);
    if (!colon) return n;
    size_t kn = (size_t)(colon - p);
    const char *v = colon + 1;
    size_t vn = n - kn - 1;
    char tmp[128];
#define IS(name) (kn == strlen(name) && !strncasecmp(p, name, kn))
    if (IS("X-Repo-Commit")) copy_header_value(r->commit, sizeof r->commit, v, vn);
    else if (IS("X-Linked-Etag")) copy_header_value(r->linked_etag, sizeof r->linked_etag, v, vn);
    else if (IS("ETag")) copy_header_value(r->etag, sizeof r->etag, v, vn);
    else if (IS("Location")) copy_header_value(r->location, sizeof r->location, v, vn);
    else if (IS("X-Linked-Size")) { copy_header_value(tmp, sizeof tmp, v, vn); r->linked_size = parse_size(tmp); }
    else if (IS("Content-Length")) { copy_header_value(tmp, sizeof tmp, v, vn); r->content_length = parse_size(tmp); }
    else if (IS("Content-Range")) { /* "bytes FIRST-LAST/TOTAL": only FIRST is used */
        copy_header_value(tmp, sizeof tmp, v, vn);
        char *dash = strncmp(tmp, "bytes ", 6) ? NULL : strchr(tmp + 6, '-');
        if (dash) *dash = 0;
        r->range_start = dash ? parse_size(tmp + 6) : -2;
    }
#undef IS
    return n;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
    req_t *r = ud;
    size_t n = sz * nm;
    /* Returning less than n cuts the transfer (CURLE_WRITE_ERROR); r->over says why. */
    if (r->fd < 0 || r->status < 200 || r->status >= 300) { /* into memory: the API reply, error pages */
        int page = r->status < 200 || r->status >= 300;
        if (r->body.len + n > (page ? ERROR_BODY_MAX : r->max_body)) {
            r->over = page ? OVER_ERRPAGE : OVER_BODY;
            return 0;
        }
        if (buf_add(&r->body, p, n) < 0) return 0;
        return n;
    }
    if (!r->body_started) {
        r->body_started = 1;
        if (r->status == 206 && r->range_start != r->start) { /* other bytes than the ones asked for */
            r->over = OVER_RANGE;
            return 0;
        }
        /* A server that ignores Range sends the whole file: start the .incomplete over. */
        if (r->status == 200 && r->start > 0) {
            if (ftruncate(r->fd, 0) != 0 || lseek(r->fd, 0, SEEK_SET) != 0) {
                r->io_error = errno;
                return 0;
            }
            r->start = 0;
            if (r->hash) hash_reset(r->hash);
        }
    }
    if (r->start + r->written + (long long)n > r->size) { /* past the declared size: not the file named */
        r->over = OVER_FILE;
        return 0;
    }
    if (write_all(r->fd, p, n) < 0) {
        r->io_error = errno;
        return 0;
    }
    if (r->hash) hash_update(r->hash, p, n);
    r->written += (long long)n;
    return n;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    (void)dt, (void)ut, (void)un;
    req_t *r = ud;
    /* A redirect curl is going to follow: curl reads its body to reuse the connection, without
     * passing it to on_body, however long it is (an endless one kept the GET busy for as long
     * as the server sent, at any rate). dn counts those bytes (and only the redirects' bodies
     * while the response is a redirect). */
    if (r->status >= 300 && r->status < 400 && r->location[0] && dn > REDIRECT_BODY_MAX) {
        r->over = OVER_REDIRECT;
        return 1;
    }
    if (r->o && r->o->interrupted && r->o->interrupted(r->o->ud)) {
        r->interrupted = 1;
        return 1;
    }
    return 0;
}

/* Sets up r->easy for one request (method "GET" or "HEAD"; follow: whether to follow
 * redirects; timeout_s: the whole request's time, 0 for none); the caller runs it, alone or in a
 * multi handle, and then calls req_end. */
static int req_begin(req_t *r, const char *url, const char *method, int follow, long timeout_s) {
    r->easy = curl_easy_init();
    if (!r->easy) return -1;
    CURL *e = r->easy;
    if (r->token && *r->token) {
        r->auth = xasprintf("Authorization: Bearer %s", r->token);
        if (r->auth) r->headers = curl_slist_append(NULL, r->auth);
    }
    char ua[64];
    snprintf(ua, sizeof ua, "seer/%s", seer_version());
    r->status = 0;
    r->commit[0] = r->linked_etag[0] = r->etag[0] = r->location[0] = 0;
    r->linked_size = r->content_length = r->range_start = -1;
    r->header_bytes = 0;
    r->errbuf[0] = 0;
    r->body.len = 0;
    r->written = 0;
    r->body_started = r->io_error = r->interrupted = r->over = 0;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, ua);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 30L);
    /* A stalled transfer (under STALL_RATE bytes/s for STALL_S) fails, and a file's is resumed,
     * rather than hanging or dripping; see the limits at the top. */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, STALL_RATE);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, STALL_S);
    if (timeout_s > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT, timeout_s);
    /* The token goes only to the hub: curl drops the Authorization header on a redirect to
     * another host (the CDN), which is what we want. */
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 10L);
    if (!strcmp(method, "HEAD")) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    if (r->start > 0) curl_easy_setopt(e, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)r->start);
    /* interrupts, and the bound on a redirect's body */
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, r);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    return 0;
}

static void req_end(req_t *r) {
    if (!r->easy) return;
    long code = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code) r->status = code;
    curl_easy_cleanup(r->easy);
    r->easy = NULL;
    curl_slist_free_all(r->headers);
    r->headers = NULL;
    if (r->auth) {
        memset(r->auth, 0, strlen(r->auth));
        free(r->auth);
        r->auth = NULL;
    }
}

/* One request on its own (the API call), polling opts->interrupted. Returns the curl code. */
static CURLcode perform(req_t *r, const char *url, const char *method, int follow, long timeout_s) {
    if (req_begin(r, url, method, follow, timeout_s) < 0) {
        req_end(r);
        return CURLE_OUT_OF_MEMORY;
    }
    CURLcode c = curl_easy_perform(r->easy);
    req_end(r);
    return c;
}

/* The message for an HTTP error, with what to do about it. */
static int http_error(seer_err_t *err, const char *repo_id, const char *file, const char *rev, req_t *r) {
    const char *why;
    switch (r->status) {
    case 401:
    case 403:
        why = r->token && *r->token
                  ? "the token was refused: check that HF_TOKEN (or the token option) can read this repo, "
                    "and accept the model's licence on its hub page if it is gated"
                  : "the repo is gated or private: set HF_TOKEN (or the token option) to a token that can read it, "
                    "and accept the model's licence on its hub page if it is gated";
        break;
    case 404: why = "not found: check the repo id, the revision and the file name"; break;
    case 429: why = "rate limited by the hub: wait and try again (a token raises the limit)"; break;
    default: why = r->status >= 500 ? "the hub failed: try again later" : "unexpected answer from the hub";
    }
    if (file)
        return seer_err_set(err, SEER_HUB_EHTTP, "hub: %s (revision %s): %s: HTTP %ld: %s", repo_id, rev, file,
                            r->status, why);
    return seer_err_set(err, SEER_HUB_EHTTP, "hub: %s (revision %s): HTTP %ld: %s", repo_id, rev, r->status, why);
}

static int net_error(seer_err_t *err, const char *repo_id, const char *file, const char *endpoint, CURLcode c,
                     req_t *r) {
    if (r->interrupted) return seer_err_set(err, SEER_EINTR, "interrupted");
    char ee[ESC_MAX], ew[ESC_MAX]; /* curl's message can quote what the server sent (a redirect's host) */
    esc(ee, sizeof ee, endpoint);
    esc(ew, sizeof ew, r->errbuf[0] ? r->errbuf : curl_easy_strerror(c));
    if (c == CURLE_OPERATION_TIMEDOUT)
        return seer_err_set(err, SEER_HUB_ENET, "hub: %s%s%s: %s did not answer in time: %s", repo_id,
                            file ? ": " : "", file ? file : "", ee, ew);
    return seer_err_set(err, SEER_HUB_ENET, "hub: %s%s%s: cannot reach %s: %s (set HF_HUB_OFFLINE=1 to use the cache only)",
                        repo_id, file ? ": " : "", file ? file : "", ee, ew);
}

/* The message for a transfer on_header/on_body cut (r->over other than OVER_ERRPAGE). */
static int over_error(seer_err_t *err, const char *repo_id, const char *file, const char *endpoint, const req_t *r) {
    char ee[ESC_MAX];
    esc(ee, sizeof ee, endpoint);
    const char *f = file ? file : "", *sep = file ? ": " : "";
    switch (r->over) {
    case OVER_BODY:
        return seer_err_set(err, SEER_HUB_ENET,
                            "hub: %s: the API reply from %s is larger than %zu MiB (a repo's file list is far "
                            "smaller); refusing it",
                            repo_id, ee, API_MAX_BYTES >> 20);
    case OVER_FILE:
        return seer_err_set(err, SEER_HUB_ENET,
                            "hub: %s%s%s: the server sent more than the %lld bytes declared for the file; the "
                            "partial download was deleted",
                            repo_id, sep, f, r->size);
    case OVER_REDIRECT:
        return seer_err_set(err, SEER_HUB_ENET,
                            "hub: %s%s%s: a redirect came with a body of more than %lld KiB (a redirect needs "
                            "none); refusing it",
                            repo_id, sep, f, (long long)(REDIRECT_BODY_MAX >> 10));
    case OVER_RANGE:
        return seer_err_set(err, SEER_HUB_ENET,
                            "hub: %s%s%s: asked for the bytes from %lld on, the server sent a range starting elsewhere",
                            repo_id, sep, f, r->start);
    default:
        return seer_err_set(err, SEER_HUB_ENET, "hub: %s%s%s: %s sent more than %zu KiB of headers; refusing it",
                            repo_id, sep, f, ee, HEADER_MAX_BYTES >> 10);
    }
}

/* ---- the download --------------------------------------------------------------------------- */

/* Each matching file is a job that moves through these states; up to max_workers jobs are past
 * J_PENDING and not yet J_DONE at once, and all their requests run in one curl multi handle on
 * the calling thread, so nothing here needs a lock and opts->interrupted is polled where it was
 * given. */
enum { J_PENDING, J_HEAD, J_LOCK, J_GET, J_DONE };

typedef struct {
    const char *file;
    int state;
    int slot;             /* index in dl_t.slots while active */
    char *url;            /* resolve URL (after the hub's own relative redirects) */
    int hops, attempt;
    char etag[256];
    long long size;       /* -1: the server did not say */
    char *blob, *part, *lockp; /* full paths, for messages */
    int lockfd, fd;
    int dirfd;            /* the blobs folder the .incomplete was opened in (J_GET on) */
    double deadline;      /* when this run's GETs of the file must be done (0: not started) */
    double allowed;       /* how long that is from the first GET, in seconds */
    double lock_retry;    /* J_LOCK: when to try the lock again */
    req_t r;              /* the request in flight (J_HEAD, J_GET) */
    hash_t hash;
    long long have;       /* bytes in the .incomplete when the current GET began */
    long long got;        /* bytes of the file on disk, for the progress line */
    long long fetched;    /* bytes received by finished GETs of this run (for the rate) */
    int fetching;         /* the blob was missing, so this job's bytes count in the progress */
} job_t;

typedef struct {
    const char *repo_id, *rev, *endpoint, *token;
    const seer_hub_opts_t *o;
    char *repo_dir;       /* <cache>/models--org--name, for messages */
    char *cache;          /* <cache> */
    const char *base;     /* models--org--name (in repo_dir) */
    int root_fd;          /* the cache directory (-1: not opened yet); see walk_at */
    double time_floor, min_rate; /* a file's time: time_floor + bytes left / min_rate */
    char commit[128];
    int show;
    int max_workers;
    CURLM *multi;
    job_t *jobs;
    job_t **slots;        /* max_workers entries; NULL where free */
    size_t njobs, next, done;
    int active;
    double t0, last_draw; /* t0: when the first GET began (0: none yet) */
    int drawn;
} dl_t;

/* The cache directory's descriptor; with create, the directory (and those above it) is made
 * when missing. Without create, SEER_ENOTFOUND when it is not there. */
static int cache_root(dl_t *d, int create, seer_err_t *err) {
    if (d->root_fd >= 0) return SEER_OK;
    if (create) {
        int rc = mkdirs(d->cache, err);
        if (rc < 0) return rc;
    }
    d->root_fd = open(d->cache, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->root_fd < 0) {
        int e = errno;
        return seer_err_set(err, e == ENOENT ? SEER_ENOTFOUND : SEER_EIO, "hub: cannot open the model cache %s: %s",
                            d->cache, strerror(e));
    }
    return SEER_OK;
}

/* The folder holding rel (a path below the cache directory: "models--o--n/blobs/<etag>"),
 * walked to without following a link (walk_at): *dfd gets its descriptor, *leaf the last name
 * of rel. */
static int cache_dir_of(dl_t *d, const char *rel, int create, int *dfd, const char **leaf, seer_err_t *err) {
    int rc = cache_root(d, create, err);
    if (rc < 0) return rc;
    const char *sl = strrchr(rel, '/');
    char *dir = sl ? strndup(rel, (size_t)(sl - rel)) : NULL;
    if (!dir) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    rc = walk_at(d->root_fd, d->cache, dir, create, dfd, err);
    free(dir);
    if (rc == SEER_OK) *leaf = sl + 1;
    return rc;
}

/* Writes a small file atomically in the folder dfd: a new temporary name (O_EXCL, no link
 * followed), fsync, renameat over leaf. path is for messages. */
static int write_file_at(int dfd, const char *leaf, const char *path, const char *data, seer_err_t *err) {
    char *tmp = xasprintf("%s.tmp.%d.%lld", leaf, (int)getpid(), (long long)(now_s() * 1e9));
    if (!tmp) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int e = 0, fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) e = errno;
    if (!e && write_all(fd, data, strlen(data)) != 0) e = errno;
    if (!e && fsync(fd) != 0) e = errno;
    if (fd >= 0 && close(fd) != 0 && !e) e = errno;
    if (!e && renameat(dfd, tmp, dfd, leaf) != 0) e = errno;
    if (e && fd >= 0) unlinkat(dfd, tmp, 0);
    free(tmp);
    return e ? seer_err_set(err, SEER_EIO, "cannot write %s: %s", path, strerror(e)) : SEER_OK;
}

/* Files fetched at once when neither the option nor SEER_HUB_MAX_WORKERS says: enough to hide
 * the per-request latency of the hub and to use more than one CDN connection's bandwidth,
 * without looking like a flood to the hub (huggingface_hub uses 8). */
#define DEFAULT_WORKERS 4
#define MAX_WORKERS 64

static int resolve_workers(const seer_hub_opts_t *o, int *out, seer_err_t *err) {
    if (o && (o->max_workers < 0 || o->max_workers > MAX_WORKERS))
        return seer_err_set(err, SEER_EINVAL, "hub: max_workers must be from 1 to %d (got %d)", MAX_WORKERS,
                            o->max_workers);
    if (o && o->max_workers > 0) {
        *out = o->max_workers;
        return SEER_OK;
    }
    const char *v = getenv("SEER_HUB_MAX_WORKERS");
    if (v && *v) {
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        char e[ESC_MAX];
        if (errno || *end || n < 1 || n > MAX_WORKERS)
            return seer_err_set(err, SEER_EINVAL,
                                "hub: SEER_HUB_MAX_WORKERS='%s': expected how many files to fetch at once, from 1 to %d",
                                esc(e, sizeof e, v), MAX_WORKERS);
        *out = (int)n;
        return SEER_OK;
    }
    *out = DEFAULT_WORKERS;
    return SEER_OK;
}

/* A positive number from the option (when not 0), else the variable env, else def. */
static int resolve_time(double opt, const char *opt_name, const char *env, double def, const char *what, double *out,
                        seer_err_t *err) {
    if (opt != 0) {
        if (!(opt > 0 && opt <= 1e15))
            return seer_err_set(err, SEER_EINVAL, "hub: %s must be a number above 0: %s (got %g)", opt_name, what, opt);
        *out = opt;
        return SEER_OK;
    }
    const char *v = getenv(env);
    if (v && *v) {
        char *end;
        errno = 0;
        double n = strtod(v, &end);
        char e[ESC_MAX];
        if (errno || *end || !(n > 0 && n <= 1e15))
            return seer_err_set(err, SEER_EINVAL, "hub: %s='%s': expected %s, a number above 0", env,
                                esc(e, sizeof e, v), what);
        *out = n;
        return SEER_OK;
    }
    *out = def;
    return SEER_OK;
}

static int matches(const dl_t *d, const char *name) {
    const char *const *pat = d->o && d->o->allow ? d->o->allow : seer_hub_default_allow;
    size_t n = d->o && d->o->allow ? d->o->n_allow : seer_hub_default_allow_n;
    for (size_t i = 0; i < n; i++)
        if (pat[i] && fnmatch(pat[i], name, 0) == 0) return 1;
    return 0;
}

/* snapshots/<commit>/<file> -> ../../blobs/<etag> (one more ../ per directory in file), made
 * under a temporary name and renamed so a reader never sees a missing or dangling link; all of
 * it relative to the folder's descriptor (walk_at). blob is the blob as seer found or wrote it:
 * the new link must lead to it, else the cache was changed under seer (a folder on the way
 * swapped for another) and the snapshot would not hold what was checked. */
static int link_snapshot(dl_t *d, const char *file, const char *etag, const struct stat *blob, seer_err_t *err) {
    char *rel = xasprintf("%s/snapshots/%s/%s", d->base, d->commit, file);
    char *dst = xasprintf("%s/snapshots/%s/%s", d->repo_dir, d->commit, file);
    int depth = 0;
    for (const char *p = file; *p; p++) depth += *p == '/';
    size_t cap = (size_t)(depth + 2) * 3 + strlen("blobs/") + strlen(etag) + 1;
    char *target = malloc(cap), *tmp = NULL;
    int dfd = -1, rc = SEER_OK;
    const char *leaf = NULL;
    if (!rel || !dst || !target) rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
    if (rc == SEER_OK) rc = cache_dir_of(d, rel, 1, &dfd, &leaf, err);
    if (rc == SEER_OK && !(tmp = xasprintf("%s.seer-link.%d", leaf, (int)getpid())))
        rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
    if (rc == SEER_OK) {
        target[0] = 0;
        for (int i = 0; i < depth + 2; i++) strcat(target, "../");
        strcat(target, "blobs/");
        strcat(target, etag);
        unlinkat(dfd, tmp, 0);
        if (symlinkat(target, dfd, tmp) != 0 || renameat(dfd, tmp, dfd, leaf) != 0) {
            int e = errno;
            unlinkat(dfd, tmp, 0);
            rc = seer_err_set(err, SEER_EIO, "hub: cannot link %s: %s", dst, strerror(e));
        }
    }
    struct stat st;
    if (rc == SEER_OK && (fstatat(dfd, leaf, &st, 0) != 0 || st.st_dev != blob->st_dev || st.st_ino != blob->st_ino)) {
        /* name the folder that is now a link when that is what happened */
        int bfd = -1;
        const char *bl;
        char *brel = xasprintf("%s/blobs/%s", d->base, etag);
        rc = brel ? cache_dir_of(d, brel, 0, &bfd, &bl, err) : seer_err_set(err, SEER_ENOMEM, "out of memory");
        if (rc == SEER_OK)
            rc = seer_err_set(err, SEER_EIO,
                              "hub: %s does not lead to the blob %s that seer checked (%s/blobs was changed during "
                              "the download); run again",
                              dst, etag, d->repo_dir);
        else if (rc != SEER_ENOMEM)
            rc = SEER_EIO;
        if (bfd >= 0) close(bfd);
        free(brel);
    }
    if (dfd >= 0) close(dfd);
    free(target), free(tmp), free(dst), free(rel);
    return rc;
}

static void strip_etag(char *dst, size_t cap, const char *s) {
    if (!strncmp(s, "W/", 2)) s += 2;
    size_t n = strlen(s);
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') s++, n -= 2;
    if (n >= cap) n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = 0;
}

/* ---- progress: one line for the whole download ----------------------------------------------- */

static void human(char *out, size_t cap, double b) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

/* "3/8 files  12.0 MiB / 40.0 MiB  5.2 MiB/s": files done, bytes of the files being fetched
 * (a '+' while some sizes are not known yet) and the rate since the first byte was asked for.
 * Redrawn at most ten times a second; the caller decides whether stderr gets it at all. */
static void draw(dl_t *d, int final) {
    if (!d->show || d->t0 == 0) return;
    double t = now_s();
    if (!final && t - d->last_draw < 0.1) return;
    d->last_draw = t;
    long long have = 0, total = 0, recv = 0;
    int unknown = 0;
    for (size_t i = 0; i < d->njobs; i++) {
        const job_t *j = &d->jobs[i];
        if (j->state == J_PENDING || j->state == J_HEAD) {
            unknown = 1;
            continue;
        }
        if (!j->fetching) continue;
        long long live = j->state == J_GET ? j->r.written : 0;
        have += j->state == J_GET ? j->r.start + j->r.written : j->got;
        recv += j->fetched + live;
        if (j->size >= 0) total += j->size;
        else if (j->state != J_DONE) unknown = 1;
        else total += j->got;
    }
    char hv[32], tv[32], rv[32];
    human(hv, sizeof hv, (double)have);
    human(tv, sizeof tv, (double)total);
    double dt = t - d->t0;
    human(rv, sizeof rv, dt > 0 ? recv / dt : 0);
    fprintf(stderr, "\r\033[K%zu/%zu files  %s / %s%s  %s/s%s", d->done, d->njobs, hv, tv, unknown ? "+" : "", rv,
            final ? "\n" : "");
    fflush(stderr);
    d->drawn = 1;
}

/* ---- jobs ----------------------------------------------------------------------------------- */

static int job_request(dl_t *d, job_t *j, const char *url, const char *method, int follow, seer_err_t *err) {
    if (req_begin(&j->r, url, method, follow, strcmp(method, "HEAD") ? 0 : HEAD_TIMEOUT_S) < 0) {
        req_end(&j->r);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }
    curl_easy_setopt(j->r.easy, CURLOPT_PRIVATE, j);
    CURLMcode mc = curl_multi_add_handle(d->multi, j->r.easy);
    if (mc != CURLM_OK) {
        req_end(&j->r);
        return seer_err_set(err, SEER_HUB_ENET, "hub: %s: %s: %s", d->repo_id, j->file, curl_multi_strerror(mc));
    }
    return SEER_OK;
}

/* Stops the job's request (if any) and lets go of its files and lock; what a GET wrote stays in
 * the .incomplete file for the next attempt. */
static void job_close(dl_t *d, job_t *j) {
    if (j->r.easy) {
        curl_multi_remove_handle(d->multi, j->r.easy);
        req_end(&j->r);
    }
    if (j->fd >= 0) close(j->fd);
    if (j->lockfd >= 0) close(j->lockfd);
    if (j->dirfd >= 0) close(j->dirfd);
    j->fd = j->lockfd = j->dirfd = -1;
    hash_free(&j->hash);
}

static void job_done(dl_t *d, job_t *j) {
    job_close(d, j);
    j->state = J_DONE;
    d->slots[j->slot] = NULL;
    d->active--;
    d->done++;
}

static int job_get(dl_t *d, job_t *j, seer_err_t *err);

/* A blob (path) that is there but is not a regular file: a link is not followed, a FIFO not
 * linked into a snapshot. */
static int blob_not_file(const char *path, const struct stat *st, seer_err_t *err) {
    return seer_err_set(err, SEER_EIO,
                        "hub: %s is %s, not a regular file; seer does not follow it or link a snapshot to it (remove "
                        "it and run again)",
                        path, file_kind(st));
}

/* The blob (as found or written: blob) is in place: link it into the snapshot. */
static int job_link(dl_t *d, job_t *j, const struct stat *blob, seer_err_t *err) {
    int rc = link_snapshot(d, j->file, j->etag, blob, err);
    if (rc == SEER_OK) job_done(d, j);
    return rc;
}

static int job_start(dl_t *d, job_t *j, seer_err_t *err) {
    /* Already in this snapshot (a regular file, or a link ../../blobs/<etag> to a regular file
     * of the repo's blobs: snapshot_entry_ok): nothing to ask the server. The folders on the way
     * are walked to without following a link (a folder that is one: not there, and refused
     * when the file is linked). Anything else there (a link elsewhere, a FIFO, a link to a
     * missing blob or to one that is a link) is fetched as if missing, and its link replaces it. */
    char *snap = xasprintf("%s/snapshots/%s/%s", d->base, d->commit, j->file);
    if (!snap) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int have = 0, dfd, depth = 0;
    const char *leaf;
    seer_err_t scratch;
    for (const char *p = j->file; *p; p++) depth += *p == '/';
    if (cache_dir_of(d, snap, 0, &dfd, &leaf, &scratch) == SEER_OK) {
        have = snapshot_entry_ok(d->root_fd, d->cache, d->base, dfd, leaf, depth);
        close(dfd);
    }
    free(snap);
    if (have) {
        job_done(d, j);
        return SEER_OK;
    }
    char *ef = urlenc(j->file, 1), *er = urlenc(d->commit, 0);
    j->url = ef && er ? xasprintf("%s/%s/resolve/%s/%s", d->endpoint, d->repo_id, er, ef) : NULL;
    free(ef), free(er);
    if (!j->url) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    /* HEAD without following the CDN redirect: the hub's own answer names the blob. */
    j->state = J_HEAD;
    return job_request(d, j, j->url, "HEAD", 0, err);
}

static int job_try_lock(dl_t *d, job_t *j, seer_err_t *err) {
    if (flock(j->lockfd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK || errno == EINTR) { /* another process (or job) writes this blob */
            j->lock_retry = now_s() + 0.1;
            return SEER_OK;
        }
        return seer_err_set(err, SEER_EIO, "hub: cannot lock %s: %s", j->lockp, strerror(errno));
    }
    /* The blobs folder walked to again now that the lock is ours (however long the wait was):
     * everything of this blob from here on is relative to this descriptor. */
    char *rel = xasprintf("%s/blobs/%s", d->base, j->etag), part[sizeof j->etag + 16];
    if (!rel) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    const char *leaf;
    if (j->dirfd >= 0) close(j->dirfd);
    j->dirfd = -1;
    int rc = cache_dir_of(d, rel, 1, &j->dirfd, &leaf, err);
    free(rel);
    if (rc < 0) return rc == SEER_ENOTFOUND ? SEER_EIO : rc;
    struct stat st;
    if (fstatat(j->dirfd, j->etag, &st, AT_SYMLINK_NOFOLLOW) == 0) { /* whoever held the lock finished it */
        if (!S_ISREG(st.st_mode)) return blob_not_file(j->blob, &st, err);
        j->got = st.st_size;
        return job_link(d, j, &st, err);
    }
    /* Not through a link, nor into a file with another name elsewhere (a hard link planted in
     * the cache): what is resumed or truncated here must be the cache's own partial file. */
    snprintf(part, sizeof part, "%s.incomplete", j->etag);
    j->fd = openat(j->dirfd, part, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
    struct stat pst;
    if (j->fd < 0 && errno != ELOOP)
        return seer_err_set(err, SEER_EIO, "hub: cannot write %s: %s", j->part, strerror(errno));
    if (j->fd < 0 || fstat(j->fd, &pst) != 0 || !S_ISREG(pst.st_mode) || pst.st_nlink != 1)
        return seer_err_set(err, SEER_EIO,
                            "hub: %s is not a plain file of the cache (a symbolic link, a file with another "
                            "name too, or not a file); seer does not write through it (remove it and run again)",
                            j->part);
    hash_begin(&j->hash, j->etag, j->size);
    return job_get(d, j, err);
}

static int job_head_done(dl_t *d, job_t *j, CURLcode c, seer_err_t *err) {
    req_t *r = &j->r;
    if (r->over && r->over != OVER_ERRPAGE) return over_error(err, d->repo_id, j->file, d->endpoint, r);
    if (c != CURLE_OK && r->over != OVER_ERRPAGE) return net_error(err, d->repo_id, j->file, d->endpoint, c, r);
    /* A relative redirect (a renamed repo) stays on the hub and is followed by hand. */
    if (r->status >= 300 && r->status < 400 && r->location[0] == '/' && !r->linked_etag[0] && !r->etag[0] &&
        j->hops < 5) {
        char *next = xasprintf("%s%s", d->endpoint, r->location);
        if (!next) return seer_err_set(err, SEER_ENOMEM, "out of memory");
        free(j->url);
        j->url = next;
        j->hops++;
        return job_request(d, j, j->url, "HEAD", 0, err);
    }
    if (r->status >= 400 || r->status < 200) return http_error(err, d->repo_id, j->file, d->rev, r);
    strip_etag(j->etag, sizeof j->etag, r->linked_etag[0] ? r->linked_etag : r->etag);
    if (!safe_token(j->etag))
        return seer_err_set(err, SEER_HUB_EHTTP, "hub: %s: %s: the server sent no usable ETag, so the file cannot be cached",
                            d->repo_id, j->file);
    /* The size bounds what the GET may write, so a file without one (or with one that is not a
     * number) is refused rather than fetched unbounded. */
    j->size = r->linked_size != -1 ? r->linked_size : (r->status < 300 ? r->content_length : -1);
    if (j->size < 0)
        return seer_err_set(err, SEER_HUB_EHTTP,
                            j->size == -1 ? "hub: %s: %s: the server did not declare the file's size (X-Linked-Size or "
                                            "Content-Length), so its download cannot be bounded"
                                          : "hub: %s: %s: the server declared a size that is not a number of bytes "
                                            "(X-Linked-Size or Content-Length)",
                            d->repo_id, j->file);
    j->blob = xasprintf("%s/blobs/%s", d->repo_dir, j->etag);
    j->part = xasprintf("%s/blobs/%s.incomplete", d->repo_dir, j->etag);
    /* Where huggingface_hub keeps its locks too (<cache>/.locks/models--org--name/<etag>.lock),
     * so the two exclude each other; the file stays, because unlinking a lock others may
     * already have open would let two writers in. */
    const char *base = strrchr(d->repo_dir, '/');
    j->lockp = base ? xasprintf("%.*s/.locks%s/%s.lock", (int)(base - d->repo_dir), d->repo_dir, base, j->etag) : NULL;
    if (!j->blob || !j->part || !j->lockp) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    /* The blobs and lock folders, made when missing, walked to without following a link. */
    char *brel = xasprintf("%s/blobs/%s", d->base, j->etag), *lrel = xasprintf(".locks/%s/%s.lock", d->base, j->etag);
    int bfd = -1, lfd = -1, rc = SEER_OK;
    const char *bleaf, *lleaf;
    struct stat st;
    if (!brel || !lrel) rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
    if (rc == SEER_OK) rc = cache_dir_of(d, brel, 1, &bfd, &bleaf, err);
    /* another file or model has this blob: a regular file, not a link (not followed) */
    int have = rc == SEER_OK && fstatat(bfd, bleaf, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (have && !S_ISREG(st.st_mode)) rc = blob_not_file(j->blob, &st, err);
    if (rc == SEER_OK && !have) rc = cache_dir_of(d, lrel, 1, &lfd, &lleaf, err);
    if (rc == SEER_OK && !have) {
        j->lockfd = openat(lfd, lleaf, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
        int e = errno;
        struct stat lst = {0};
        if (j->lockfd < 0)
            rc = seer_err_set(err, SEER_EIO, "hub: cannot lock %s: %s%s", j->lockp, strerror(e),
                              e == ELOOP ? " (a symbolic link: seer does not follow links inside the model "
                                           "cache; remove it and run again)"
                                         : "");
        else if (fstat(j->lockfd, &lst) != 0 || !S_ISREG(lst.st_mode))
            rc = seer_err_set(err, SEER_EIO, "hub: cannot lock %s: it is %s, not a regular file (remove it and run again)",
                              j->lockp, file_kind(&lst));
    }
    if (bfd >= 0) close(bfd);
    if (lfd >= 0) close(lfd);
    free(brel), free(lrel);
    if (rc < 0) return rc == SEER_ENOTFOUND ? SEER_EIO : rc;
    if (have) return job_link(d, j, &st, err);
    j->state = J_LOCK;
    j->fetching = 1;
    return job_try_lock(d, j, err);
}

/* Every byte is in: check the size and the hash, then give the blob its real name. */
static int job_finish(dl_t *d, job_t *j, seer_err_t *err) {
    if (fsync(j->fd) != 0) return seer_err_set(err, SEER_EIO, "hub: cannot write %s: %s", j->part, strerror(errno));
    off_t got = lseek(j->fd, 0, SEEK_END);
    if (got < 0) return seer_err_set(err, SEER_EIO, "hub: %s: %s", j->part, strerror(errno));
    if ((long long)got != j->size) /* the callers check it: this is the last line of defence */
        return seer_err_set(err, SEER_HUB_ENET, "hub: %s: %s: got %lld bytes, the hub declared %lld; run again",
                            d->repo_id, j->file, (long long)got, j->size);
    int h = hash_check(&j->hash, j->etag, (long long)got);
    if (h < 0) h = verify_hash(j->fd, j->etag, (long long)got);
    char part[sizeof j->etag + 16];
    snprintf(part, sizeof part, "%s.incomplete", j->etag);
    if (h <= 0) {
        if (h == 0) unlinkat(j->dirfd, part, 0); /* wrong bytes cannot be resumed: start over next time */
        return seer_err_set(err, SEER_HUB_ENET,
                            h == 0 ? "hub: %s: %s: the download does not match its checksum (ETag %s); run again"
                                   : "hub: %s: %s: cannot read back the download to check it (ETag %s)",
                            d->repo_id, j->file, j->etag);
    }
    struct stat st;
    if (renameat(j->dirfd, part, j->dirfd, j->etag) != 0 || fstat(j->fd, &st) != 0)
        return seer_err_set(err, SEER_EIO, "hub: cannot rename %s: %s", j->part, strerror(errno));
    j->got = (long long)got;
    close(j->fd);
    j->fd = -1;
    return job_link(d, j, &st, err); /* the lock goes with job_done, after the blob has its name */
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* SEER_EPARSE when a file to fetch is also a folder of another ("a" and "a/b"). */
static int folder_file_clash(const dl_t *d, const char *repo_id, seer_err_t *err) {
    size_t k = d->njobs;
    const char **names = malloc((k ? k : 1) * sizeof *names);
    if (!names) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    for (size_t i = 0; i < k; i++) names[i] = d->jobs[i].file;
    qsort(names, k, sizeof *names, cmp_str);
    int rc = SEER_OK;
    char *pre = NULL;
    for (size_t i = 0; i < k && rc == SEER_OK; i++) {
        free(pre);
        if (!(pre = strdup(names[i]))) {
            rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
            break;
        }
        for (char *sl = strchr(pre, '/'); sl && rc == SEER_OK; sl = strchr(sl + 1, '/')) {
            *sl = 0;
            const char *key = pre;
            if (bsearch(&key, names, k, sizeof *names, cmp_str)) {
                char ex[ESC_MAX], ey[ESC_MAX];
                rc = seer_err_set(err, SEER_EPARSE,
                                  "hub: %s: the file list names '%s' both as a file and as a folder of '%s'; no "
                                  "snapshot can hold both",
                                  repo_id, esc(ex, sizeof ex, pre), esc(ey, sizeof ey, names[i]));
            }
            *sl = '/';
        }
    }
    free(pre);
    free(names);
    return rc;
}

/* The file took longer than its time (job_get): what arrived stays in the .incomplete. */
static int deadline_error(dl_t *d, job_t *j, seer_err_t *err) {
    off_t got = j->fd >= 0 ? lseek(j->fd, 0, SEEK_END) : -1;
    return seer_err_set(err, SEER_HUB_ENET,
                        "hub: %s: %s: not fetched in the %.1f s it is allowed (%g s, plus 1 s per %.0f bytes to "
                        "fetch: time_floor / --time-floor / SEER_HUB_TIME_FLOOR, min_rate / --min-rate / "
                        "SEER_HUB_MIN_RATE); %lld of %lld bytes are kept: run again to resume, or lower the min rate "
                        "(--min-rate, SEER_HUB_MIN_RATE) for a slow link",
                        d->repo_id, j->file, j->allowed, d->time_floor, d->min_rate, (long long)(got > 0 ? got : 0),
                        j->size);
}

/* One GET attempt into the .incomplete, resuming from what it holds. */
static int job_get(dl_t *d, job_t *j, seer_err_t *err) {
    off_t have = lseek(j->fd, 0, SEEK_END);
    if (have < 0) return seer_err_set(err, SEER_EIO, "hub: %s: %s", j->part, strerror(errno));
    if (j->size >= 0 && have > j->size) { /* longer than the file: not ours to resume */
        if (ftruncate(j->fd, 0) != 0 || lseek(j->fd, 0, SEEK_SET) != 0)
            return seer_err_set(err, SEER_EIO, "hub: %s: %s", j->part, strerror(errno));
        have = 0;
    }
    j->got = j->have = (long long)have;
    if (hash_sync(&j->hash, j->fd, (long long)have) < 0)
        return seer_err_set(err, SEER_EIO, "hub: cannot read back %s: %s", j->part, strerror(errno));
    if (have == j->size) return job_finish(d, j, err);
    /* A declared size the disk cannot hold is refused before a byte is written, counting what
     * the other files being fetched still have to write (each of many files declaring nearly
     * all the free space passed alone, and together they filled the disk). */
    struct statvfs sv;
    if (j->attempt == 0 && j->size >= 0 && fstatvfs(j->fd, &sv) == 0) {
        unsigned long long others = 0;
        for (size_t i = 0; i < d->njobs; i++) {
            const job_t *o = &d->jobs[i];
            if (o != j && o->state == J_GET && o->size >= 0) {
                long long left = o->size - (o->r.start + o->r.written);
                if (left > 0) others += (unsigned long long)left;
            }
        }
        unsigned long long avail = (unsigned long long)sv.f_bavail * sv.f_frsize, mine = (unsigned long long)(j->size - have);
        if (mine > avail || others > avail - mine) {
            char need[32], free_[32], pend[32];
            human(need, sizeof need, (double)mine);
            human(free_, sizeof free_, (double)avail);
            human(pend, sizeof pend, (double)others);
            return seer_err_set(err, SEER_EIO, "hub: %s: %s: %s more to fetch%s%s, but the disk of %s has %s free",
                                d->repo_id, j->file, need, others ? " beside the " : "", others ? pend : "",
                                d->repo_dir, free_);
        }
    }
    /* The file's time in this run, set at its first GET from what is left to fetch; a retry
     * gets what remains of it (see the limits at the top). */
    double now = now_s();
    if (j->deadline == 0) {
        j->allowed = d->time_floor + (double)(j->size - have) / d->min_rate;
        j->deadline = now + j->allowed;
    } else if (now >= j->deadline) return deadline_error(d, j, err);
    j->attempt++;
    j->state = J_GET;
    j->r.fd = j->fd;
    j->r.start = (long long)have;
    j->r.size = j->size;
    j->r.hash = &j->hash;
    if (d->t0 == 0) d->t0 = d->last_draw = now_s();
    return job_request(d, j, j->url, "GET", 1, err);
}

static int job_get_done(dl_t *d, job_t *j, CURLcode c, seer_err_t *err) {
    req_t *r = &j->r;
    j->fetched += r->written;
    if (r->interrupted) return seer_err_set(err, SEER_EINTR, "interrupted");
    if (r->io_error) return seer_err_set(err, SEER_EIO, "hub: cannot write %s: %s", j->part, strerror(r->io_error));
    if (r->over == OVER_FILE) { /* the server is not sending the file it named: its bytes are not kept */
        char part[sizeof j->etag + 16];
        snprintf(part, sizeof part, "%s.incomplete", j->etag);
        unlinkat(j->dirfd, part, 0);
    }
    if (r->over && r->over != OVER_ERRPAGE) return over_error(err, d->repo_id, j->file, d->endpoint, r);
    if ((c == CURLE_OK || r->over == OVER_ERRPAGE) && (r->status < 200 || r->status >= 300))
        return http_error(err, d->repo_id, j->file, d->rev, r);
    off_t now = lseek(j->fd, 0, SEEK_END);
    j->got = (long long)now;
    if (c == CURLE_OK && now == j->size) return job_finish(d, j, err);
    /* a redirect the server sent that no retry can follow (file://, a loop, a bad URL): say so
     * now, not after ATTEMPTS tries as if the network broke */
    if (c == CURLE_UNSUPPORTED_PROTOCOL || c == CURLE_TOO_MANY_REDIRECTS || c == CURLE_URL_MALFORMAT)
        return seer_err_set(err, SEER_HUB_ENET, "hub: %s: %s: the file host's redirect cannot be followed: %s", d->repo_id,
                            j->file, r->errbuf[0] ? r->errbuf : curl_easy_strerror(c));
    if (j->attempt >= ATTEMPTS) {
        if (c == CURLE_OK)
            return seer_err_set(err, SEER_HUB_ENET,
                                "hub: %s: %s: the server sent %lld bytes but the file has %lld; run again to retry",
                                d->repo_id, j->file, (long long)now, j->size);
        return seer_err_set(err, SEER_HUB_ENET,
                            "hub: %s: %s: transfer failed after %d attempts at %lld of %lld bytes: %s "
                            "(run again to resume)",
                            d->repo_id, j->file, ATTEMPTS, (long long)now, j->size,
                            r->errbuf[0] ? r->errbuf : curl_easy_strerror(c));
    }
    return job_get(d, j, err); /* a broken connection: resume where it stopped */
}

/* Runs every job to the end, max_workers at a time. The first error (or an interrupt) stops the
 * rest at once and is the one reported. */
static int run_jobs(dl_t *d, seer_err_t *err) {
    int rc = SEER_OK;
    for (;;) {
        for (int s = 0; rc == SEER_OK && s < d->max_workers && d->next < d->njobs; s++) {
            if (d->slots[s]) continue;
            job_t *j = &d->jobs[d->next++];
            j->slot = s;
            d->slots[s] = j;
            d->active++;
            rc = job_start(d, j, err);
        }
        if (rc < 0 || d->done == d->njobs) break;
        int running;
        CURLMcode mc = curl_multi_perform(d->multi, &running);
        if (mc != CURLM_OK) {
            rc = seer_err_set(err, SEER_HUB_ENET, "hub: %s: %s", d->repo_id, curl_multi_strerror(mc));
            break;
        }
        CURLMsg *m;
        int queued;
        while (rc == SEER_OK && (m = curl_multi_info_read(d->multi, &queued))) {
            if (m->msg != CURLMSG_DONE) continue;
            CURL *e = m->easy_handle;
            CURLcode c = m->data.result;
            char *priv = NULL;
            curl_easy_getinfo(e, CURLINFO_PRIVATE, &priv);
            job_t *j = (job_t *)(void *)priv;
            curl_multi_remove_handle(d->multi, e);
            req_end(&j->r);
            rc = j->state == J_HEAD ? job_head_done(d, j, c, err) : job_get_done(d, j, c, err);
        }
        if (rc < 0) break;
        double now = now_s();
        for (int s = 0; rc == SEER_OK && s < d->max_workers; s++) {
            job_t *j = d->slots[s];
            if (j && j->state == J_LOCK && now >= j->lock_retry) rc = job_try_lock(d, j, err);
            else if (j && j->state == J_GET && now >= j->deadline) rc = deadline_error(d, j, err);
        }
        if (rc < 0) break;
        if (d->o && d->o->interrupted && d->o->interrupted(d->o->ud)) {
            rc = seer_err_set(err, SEER_EINTR, "interrupted");
            break;
        }
        draw(d, 0);
        if (d->done == d->njobs) break;
        if (d->active < d->max_workers && d->next < d->njobs) continue; /* a slot is free: fill it first */
        /* Wakes on socket activity or curl's own timers; 100 ms bounds how late an interrupt
         * or a freed lock is noticed. */
        mc = curl_multi_poll(d->multi, NULL, 0, 100, NULL);
        if (mc != CURLM_OK) {
            rc = seer_err_set(err, SEER_HUB_ENET, "hub: %s: %s", d->repo_id, curl_multi_strerror(mc));
            break;
        }
    }
    for (size_t i = 0; i < d->njobs; i++) job_close(d, &d->jobs[i]);
    if (d->drawn || (rc == SEER_OK && d->t0 > 0)) draw(d, 1);
    return rc;
}

int seer_hub_download(const char *repo_id, const seer_hub_opts_t *o, char **snapshot_dir, seer_err_t *err) {
    int rc = check_args(repo_id, o, err);
    if (rc < 0) return rc;
    int workers = DEFAULT_WORKERS;
    if ((rc = resolve_workers(o, &workers, err)) < 0) return rc;
    double floor_s, rate;
    if ((rc = resolve_time(o ? o->time_floor : 0, "time_floor", "SEER_HUB_TIME_FLOOR", TIME_FLOOR_S,
                           "how many seconds any file may take (more for larger files)", &floor_s, err)) < 0 ||
        (rc = resolve_time(o ? o->min_rate : 0, "min_rate", "SEER_HUB_MIN_RATE", MIN_RATE,
                           "the slowest average rate a file may arrive at, in bytes per second", &rate, err)) < 0)
        return rc;
    const char *rev = opt_revision(o);
    if (env_true("HF_HUB_OFFLINE")) {
        rc = seer_hub_cached(repo_id, o, snapshot_dir, err);
        if (rc == SEER_ENOTFOUND) {
            char where[SEER_ERR_MSG_MAX];
            snprintf(where, sizeof where, "%s", err ? err->msg : "");
            rc = seer_err_set(err, SEER_HUB_EOFFLINE,
                              "hub: HF_HUB_OFFLINE=1 and %s; download it with network access first (unset HF_HUB_OFFLINE)",
                              where);
        }
        return rc;
    }
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return seer_err_set(err, SEER_HUB_ENET, "hub: curl_global_init: %s", curl_easy_strerror(curl_init_rc));

    dl_t d = {0};
    d.o = o;
    d.repo_id = repo_id;
    d.rev = rev;
    d.max_workers = workers;
    const char *ep = o && o->endpoint && *o->endpoint ? o->endpoint : getenv("HF_ENDPOINT");
    char *endpoint = strdup(ep && *ep ? ep : "https://huggingface.co");
    if (!endpoint) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    size_t el = strlen(endpoint);
    while (el > 0 && endpoint[el - 1] == '/') endpoint[--el] = 0;
    d.endpoint = endpoint;
    d.token = o && o->token ? o->token : getenv("HF_TOKEN");
    d.show = o && o->progress >= 0 ? o->progress > 0 : isatty(STDERR_FILENO);
    d.root_fd = -1;
    d.time_floor = floor_s;
    d.min_rate = rate;
    if ((rc = repo_dir(repo_id, o, &d.repo_dir, err)) < 0) {
        free(endpoint);
        return rc;
    }
    /* repo_dir is "<cache>/models--org--name" */
    const char *slash = strrchr(d.repo_dir, '/');
    d.base = slash + 1;
    d.cache = strndup(d.repo_dir, slash > d.repo_dir ? (size_t)(slash - d.repo_dir) : 1);
    if (!d.cache) {
        free(d.repo_dir);
        free(endpoint);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }

    /* The commit and the file list. */
    char *er = urlenc(rev, 0);
    char *api = er ? xasprintf("%s/api/models/%s/revision/%s", endpoint, repo_id, er) : NULL;
    free(er);
    req_t r = {0};
    r.o = o;
    r.token = d.token;
    r.fd = -1;
    cJSON *j = NULL;
    if (!api) {
        rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
        goto out;
    }
    r.max_body = API_MAX_BYTES;
    CURLcode c = perform(&r, api, "GET", 1, API_TIMEOUT_S);
    if (r.over && r.over != OVER_ERRPAGE) {
        rc = over_error(err, repo_id, NULL, endpoint, &r);
        goto out;
    }
    if (c != CURLE_OK && r.over != OVER_ERRPAGE) {
        rc = net_error(err, repo_id, NULL, endpoint, c, &r);
        goto out;
    }
    if (r.status != 200) {
        rc = http_error(err, repo_id, NULL, rev, &r);
        goto out;
    }
    /* Counted before cJSON builds a tree: a node costs ~80 bytes, "[0,0,..." 2 bytes of text. */
    size_t nvalues = seer_json_count_values(r.body.data ? r.body.data : "", r.body.len);
    if (nvalues > API_MAX_VALUES) {
        char ee[ESC_MAX];
        rc = seer_err_set(err, SEER_EPARSE,
                          "hub: %s (revision %s): the API reply from %s holds %zu JSON values, more than the %zu a "
                          "repo's file list can need; refusing it",
                          repo_id, rev, esc(ee, sizeof ee, endpoint), nvalues, API_MAX_VALUES);
        goto out;
    }
    j = cJSON_Parse(r.body.data ? r.body.data : "");
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(j, "sha");
    const cJSON *sib = cJSON_GetObjectItemCaseSensitive(j, "siblings");
    if (!cJSON_IsString(sha) || !safe_token(sha->valuestring) || strlen(sha->valuestring) >= sizeof d.commit ||
        !cJSON_IsArray(sib)) {
        rc = seer_err_set(err, SEER_EPARSE, "hub: %s (revision %s): %s did not answer with a model's sha and siblings",
                          repo_id, rev, endpoint);
        goto out;
    }
    /* A revision that is a full commit id pins the files: another commit is not what was asked. */
    if (is_hex(rev, 40) && strcasecmp(rev, sha->valuestring) != 0) {
        char es[ESC_MAX];
        rc = seer_err_set(err, SEER_EPARSE, "hub: %s: asked for commit %s, %s answered with commit %s; refusing it",
                          repo_id, rev, endpoint, esc(es, sizeof es, sha->valuestring));
        goto out;
    }
    strcpy(d.commit, sha->valuestring);
    d.jobs = calloc((size_t)cJSON_GetArraySize(sib) + 1, sizeof *d.jobs);
    d.slots = calloc((size_t)workers, sizeof *d.slots);
    d.multi = curl_multi_init();
    if (!d.jobs || !d.slots || !d.multi) {
        rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
        goto out;
    }
    /* One connection per transfer rather than HTTP/2 streams sharing one: a CDN limits each
     * connection's rate, which is much of why fetching several files at once is faster. */
    curl_multi_setopt(d.multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
    const cJSON *it;
    cJSON_ArrayForEach(it, sib) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(it, "rfilename");
        if (!cJSON_IsString(fn)) continue;
        if (!safe_relpath(fn->valuestring)) {
            char en[ESC_MAX];
            rc = seer_err_set(err, SEER_EPARSE,
                              "hub: %s: the file list has an unsafe name '%s' (a path outside the snapshot, a "
                              "control or invisible character, or not UTF-8)",
                              repo_id, esc(en, sizeof en, fn->valuestring));
            goto out;
        }
        if (matches(&d, fn->valuestring)) {
            job_t *jb = &d.jobs[d.njobs++];
            jb->file = fn->valuestring;
            jb->fd = jb->lockfd = jb->dirfd = jb->r.fd = -1;
            jb->size = -1;
            jb->r.o = o;
            jb->r.token = d.token;
        }
    }
    /* A file that is also a folder of another ("a" and "a/b") cannot both be in a snapshot:
     * refused here, naming both, rather than failing on the folder later (names sorted, each
     * folder prefix of each name looked up: n log n however long the list). */
    if ((rc = folder_file_clash(&d, repo_id, err)) < 0) goto out;
    if (d.njobs == 0) {
        rc = seer_err_set(err, SEER_ENOTFOUND, "hub: %s (revision %s): no file matches %s",
                          repo_id, rev, o && o->allow ? "allow_patterns" : "the model files (config.json, *.safetensors, tokenizer.json, ...); pass allow_patterns");
        goto out;
    }
    if ((rc = run_jobs(&d, err)) < 0) goto out;

    /* The ref last: until every file is in, the cache does not claim the revision is there. */
    if (strcmp(rev, d.commit) != 0) {
        char *ref = xasprintf("%s/refs/%s", d.repo_dir, rev), *rel = xasprintf("%s/refs/%s", d.base, rev);
        int dfd = -1;
        const char *leaf;
        if (!ref || !rel) rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
        if (rc == SEER_OK) rc = cache_dir_of(&d, rel, 1, &dfd, &leaf, err);
        /* the ref as it is (read as any cache file is: read_ref_at); anything else, a link or a
         * FIFO planted there included, is replaced by the commit, never followed or waited on */
        char *old = NULL;
        seer_err_t scratch;
        if (rc == SEER_OK && read_ref_at(dfd, leaf, ref, &old, &scratch) < 0) old = NULL;
        if (rc == SEER_OK && (!old || strcmp(old, d.commit) != 0)) rc = write_file_at(dfd, leaf, ref, d.commit, err);
        if (dfd >= 0) close(dfd);
        free(old);
        free(ref), free(rel);
        if (rc < 0) {
            if (rc == SEER_ENOTFOUND) rc = SEER_EIO;
            goto out;
        }
    }
    *snapshot_dir = xasprintf("%s/snapshots/%s", d.repo_dir, d.commit);
    if (!*snapshot_dir) rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
out:
    for (size_t i = 0; i < d.njobs; i++) {
        job_t *jb = &d.jobs[i];
        job_close(&d, jb);
        free(jb->r.body.data);
        free(jb->url), free(jb->blob), free(jb->part), free(jb->lockp);
    }
    free(d.jobs);
    free(d.slots);
    if (d.multi) curl_multi_cleanup(d.multi);
    if (d.root_fd >= 0) close(d.root_fd);
    free(d.cache);
    cJSON_Delete(j);
    free(r.body.data);
    free(api);
    free(d.repo_dir);
    free(endpoint);
    return rc;
}
