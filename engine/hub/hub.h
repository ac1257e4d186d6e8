/* Model downloads from a Hugging Face hub into the cache layout the Python tools use, so a
 * model fetched by seer is found by transformers and the other way round:
 *
 *   <cache>/models--{org}--{name}/blobs/<etag>             the file contents, named by ETag
 *   <cache>/models--{org}--{name}/snapshots/<commit>/<f>    relative symlink to ../../blobs/<etag>
 *   <cache>/models--{org}--{name}/refs/<revision>           the commit the revision points at
 *
 * <cache> is the cache_dir option, else $HF_HUB_CACHE, else $HF_HOME/hub, else
 * ~/.cache/huggingface/hub (the same order lua/seer/model.lua resolves hub ids with).
 *
 * A file is written to blobs/<etag>.incomplete and renamed only once its size (and its hash,
 * when the ETag is one) checks out, so the cache never holds half a file under its real name;
 * an .incomplete left by a cut connection is resumed with a Range request. With
 * HF_HUB_OFFLINE=1 nothing touches the network. Several files are fetched at once (curl's multi
 * interface, on the calling thread). Separate calls (and separate processes) may download into
 * the same cache: each blob is written under a lock. */
#ifndef SEER_HUB_H
#define SEER_HUB_H

#include <stddef.h>

#include "../seer.h"

enum {
    SEER_HUB_EHTTP = -30, /* the hub answered with an HTTP error (the message says which and why) */
    SEER_HUB_ENET = -31,  /* the hub could not be reached or the transfer broke */
    SEER_HUB_EOFFLINE = -32, /* HF_HUB_OFFLINE=1 and the cache does not have it */
};

typedef struct seer_hub_opts {
    const char *revision;       /* NULL: "main"; a branch, tag or commit */
    const char *const *allow;   /* glob patterns (fnmatch, '*' crosses '/'); NULL: the model files */
    size_t n_allow;
    const char *token;          /* NULL: $HF_TOKEN; sent as a bearer token, never printed */
    const char *endpoint;       /* NULL: $HF_ENDPOINT, else https://huggingface.co */
    const char *cache_dir;      /* NULL: see above */
    int progress;               /* <0: when stderr is a terminal; 0: never; >0: always */
    int max_workers;            /* files fetched at once, 1..64; 0: $SEER_HUB_MAX_WORKERS, else 4 */
    /* The time a file's GETs may take in one run: time_floor seconds plus the bytes left to fetch
     * over min_rate (bytes/s); past it the download stops, keeping the .incomplete. 0: from
     * $SEER_HUB_TIME_FLOOR / $SEER_HUB_MIN_RATE, else 300 s and 16384 bytes/s. */
    double time_floor;
    double min_rate;
    /* Polled during transfers (on the calling thread, about ten times a second); non-zero stops
     * the download with SEER_EINTR (what was fetched stays in the .incomplete files for the next
     * attempt). */
    int (*interrupted)(void *ud);
    void *ud;
} seer_hub_opts_t;

/* The patterns used when opts->allow is NULL: the files a model (or an adapter) needs. */
extern const char *const seer_hub_default_allow[];
extern const size_t seer_hub_default_allow_n;

/* Downloads the matching files of repo_id at the revision (files already in the cache are not
 * fetched again) and sets *snapshot_dir (malloc'd) to snapshots/<commit>. */
int seer_hub_download(const char *repo_id, const seer_hub_opts_t *opts, char **snapshot_dir,
                      seer_err_t *err);

/* The cached snapshot of repo_id at the revision, without any network: SEER_OK with
 * *snapshot_dir set, SEER_ENOTFOUND (err says where it looked), or SEER_EIO when the cache holds
 * what seer does not read (a link below the cache directory, a ref that is a FIFO, too large or
 * not a commit: err names it). Nothing below the cache directory is reached by path or through a
 * link. The snapshot's files are links into ../../blobs and are not checked: readers open them
 * confined (seer_st_open_confined). */
int seer_hub_cached(const char *repo_id, const seer_hub_opts_t *opts, char **snapshot_dir,
                    seer_err_t *err);

/* The cache directory as described above (malloc'd). */
int seer_hub_cache_dir(const char *override, char **out, seer_err_t *err);

#endif
