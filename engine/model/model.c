/* Loading a Hugging Face model directory: config, the safetensors shards (read into huge-page
 * memory or mapped: open_shards), the architecture table and its weight binding; the KV cache. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/host.h"
#include "model_private.h"
#include "gemma_common.h"
#include "cuda/gpu_model.h"

/* NULL entries are architectures whose file is not linked in (weak symbols). */
static const seer_arch_t *const archs[] = {
    &seer_arch_llama, &seer_arch_mistral, &seer_arch_qwen2,  &seer_arch_qwen3,   &seer_arch_gemma,
    &seer_arch_gemma2, &seer_arch_gemma3, &seer_arch_gpt2, &seer_arch_gpt_neox, &seer_arch_granite,
    &seer_arch_olmo2, &seer_arch_phi3,
};
#define NARCHS (sizeof archs / sizeof archs[0])

const char *seer_model_supported(void) {
    static char list[256];
    if (!list[0]) {
        size_t o = 0;
        for (size_t i = 0; i < NARCHS; i++)
            if (archs[i]) o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", archs[i]->model_type);
        /* a Gemma 3 multimodal config loads as its text model (config.c flattens it) */
        if (&seer_arch_gemma3) snprintf(list + o, sizeof list - o, ", gemma3");
    }
    return list;
}

static const seer_arch_t *find_arch(const char *model_type) {
    for (size_t i = 0; i < NARCHS; i++)
        if (archs[i] && strcmp(archs[i]->model_type, model_type) == 0) return archs[i];
    return NULL;
}

/* dir/name into out, or an error when it does not fit. */
static int join_path(char *out, size_t size, const char *dir, const char *name, seer_err_t *err) {
    int w = snprintf(out, size, "%s/%s", dir, name);
    if (w < 0 || (size_t)w >= size) return seer_err_set(err, SEER_EINVAL, "path too long: %s/%s", dir, name);
    return 0;
}

/* seer_st_open_copy's progress callback: the bytes go to a seer_progress_t. */
static void read_tick(void *ctx, size_t add) { seer_progress_add(ctx, add); }

/* limit - usage from two files of a cgroup directory, the inactive file cache (stat_key in
 * memory.stat: reclaimed before anything else) not counted as use; SIZE_MAX when there is no
 * limit or the files cannot be read ("max", or v1's page-rounded 2^63). */
static size_t cgroup_left(const char *dir, const char *limit_file, const char *usage_file, const char *stat_key) {
    char path[1200];
    unsigned long long lim = 0, cur = 0;
    snprintf(path, sizeof path, "%s/%s", dir, limit_file);
    FILE *f = fopen(path, "re");
    if (!f) return SIZE_MAX;
    int ok = fscanf(f, "%llu", &lim) == 1;
    fclose(f);
    if (!ok || lim >= (1ull << 60)) return SIZE_MAX;
    snprintf(path, sizeof path, "%s/%s", dir, usage_file);
    if (!(f = fopen(path, "re"))) return SIZE_MAX;
    ok = fscanf(f, "%llu", &cur) == 1;
    fclose(f);
    if (!ok) return SIZE_MAX;
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    if ((f = fopen(path, "re"))) {
        char key[64];
        unsigned long long v;
        while (fscanf(f, "%63s %llu", key, &v) == 2)
            if (strcmp(key, stat_key) == 0) cur = v < cur ? cur - v : 0;
        fclose(f);
    }
    return cur < lim ? (size_t)(lim - cur) : 0;
}

/* Memory this process can still fill without swapping or meeting its cgroup's limit: MemAvailable,
 * or less where the process's memory cgroup (v2 memory.max, v1 memory.limit_in_bytes) leaves
 * less; 0 when unknown. */
static size_t available_memory(void) {
    size_t avail = SIZE_MAX;
    FILE *f = fopen("/proc/meminfo", "re");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = (size_t)kb * 1024;
        fclose(f);
    }
    if ((f = fopen("/proc/self/cgroup", "re"))) {
        char line[1024], dir[1100];
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = 0;
            char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (!c2) continue;
            *c2 = 0;
            const char *ctl = c1 + 1, *cg = c2 + 1;
            size_t left = SIZE_MAX;
            if (strcmp(line, "0") == 0 && !ctl[0]) {
                snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", cg);
                left = cgroup_left(dir, "memory.max", "memory.current", "inactive_file");
            } else if (strcmp(ctl, "memory") == 0 || strstr(ctl, ",memory") || strncmp(ctl, "memory,", 7) == 0) {
                snprintf(dir, sizeof dir, "/sys/fs/cgroup/memory%s", cg);
                left = cgroup_left(dir, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file");
                if (left == SIZE_MAX) /* a cgroup namespace shows its own group as the root */
                    left = cgroup_left("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
                                       "total_inactive_file");
            }
            if (left < avail) avail = left;
        }
        fclose(f);
    }
    return avail == SIZE_MAX ? 0 : avail;
}

/* The model directory's shard names (weight_map repeats each many times; kept once, in order). */
typedef struct {
    char *names[SEER_MODEL_MAX_SHARDS];
    int n;
} shard_list_t;

static int add_shard(seer_model_t *m, shard_list_t *l, const char *name, seer_err_t *err) {
    if (strchr(name, '/') || strcmp(name, "..") == 0 || strcmp(name, ".") == 0 || !name[0])
        return seer_err_set(err, SEER_EPARSE, "%s/model.safetensors.index.json: shard name \"%s\" leaves the model directory",
                            m->dir, name);
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0) return 0;
    if (l->n >= SEER_MODEL_MAX_SHARDS)
        return seer_err_set(err, SEER_EPARSE, "%s: more than %d safetensors shards", m->dir, SEER_MODEL_MAX_SHARDS);
    if (!(l->names[l->n] = strdup(name))) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    l->n++;
    return 0;
}

/* Opens the listed shards: read into memory (hidden models, weights = "memory", and by default on
 * the CPU when they fit in half the available memory) or mapped. */
static int open_shards(seer_model_t *m, const shard_list_t *l, int weights, int on_gpu, seer_err_t *err) {
    char path[PATH_MAX];
    size_t total = 0;
    struct stat st;
    for (int i = 0; i < l->n; i++) {
        int rc = join_path(path, sizeof path, m->dir, l->names[i], err);
        if (rc < 0) return rc;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) total += (size_t)st.st_size;
    }
    m->in_memory = m->hidden || weights == SEER_WEIGHTS_MEMORY;
    if (m->in_memory) {
        /* Read in whatever the folder holds, a file bigger than the memory left (a sparse file
         * costs its maker nothing) would end in the OOM killer: refused, naming the sizes. */
        size_t avail = available_memory();
        if (avail && total > avail)
            return seer_err_set(err, SEER_ENOMEM,
                                "%s: the weights' files take %.2f GiB, more than the %.2f GiB of memory available, so they "
                                "cannot be read into memory%s",
                                m->dir, (double)total / 1073741824.0, (double)avail / 1073741824.0,
                                m->hidden ? "" : " (weights = \"mapped\" maps them instead)");
    }
    if (weights == SEER_WEIGHTS_AUTO && !m->hidden && !on_gpu) {
        size_t avail = available_memory();
        m->in_memory = avail && total <= avail / 2;
        static int told;
        if (!m->in_memory && !told) {
            told = 1;
            if (avail)
                fprintf(stderr,
                        "seer: the weights (%.2f GiB) are mapped from their files, not read into memory: %.2f GiB is "
                        "available and they would take more than half of it (decode reads mapped weights more slowly; "
                        "weights = \"memory\" reads them in anyway)\n",
                        (double)total / 1073741824.0, (double)avail / 1073741824.0);
            else
                fprintf(stderr,
                        "seer: the weights (%.2f GiB) are mapped from their files, not read into memory: the available "
                        "memory could not be read from /proc/meminfo (decode reads mapped weights more slowly; "
                        "weights = \"memory\" reads them in anyway)\n",
                        (double)total / 1073741824.0);
        }
    }
    /* a progress line on a terminal when the read takes a while (0.2-0.5 s per GiB here) */
    seer_progress_t pr = {.show = m->in_memory && total >= ((size_t)1 << 30) && isatty(2), .last_pct = -1, .total = total,
                          .what = "reading weights"};
    for (int i = 0; i < l->n; i++) {
        int rc = join_path(path, sizeof path, m->dir, l->names[i], err);
        if (rc < 0) return rc;
        /* confined: no link out of the folder is followed, no FIFO waited on (docs/security.md) */
        if (m->in_memory) {
            char label[PATH_MAX + 16];
            snprintf(label, sizeof label, "%s/%s", m->hidden ? "<hidden>" : m->dir, l->names[i]);
            rc = seer_st_open_ex(&m->files[m->nfiles], path, label, SEER_ST_COPY | SEER_ST_CONFINED, read_tick, &pr, err);
        } else {
            rc = seer_st_open_ex(&m->files[m->nfiles], path, NULL, SEER_ST_CONFINED, NULL, NULL, err);
        }
        if (rc < 0) return rc;
        m->nfiles++;
    }
    return 0;
}

/* Something (of any type: a FIFO or a link is refused when it is opened, with its own message)
 * has this path. */
static int entry_exists(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0;
}

typedef struct {
    const char *name;
    int file;
} tensor_at_t;

static int cmp_tensor_at(const void *a, const void *b) {
    return strcmp(((const tensor_at_t *)a)->name, ((const tensor_at_t *)b)->name);
}

/* Across the shards: a tensor stored twice is refused (which copy is meant? seer would take the
 * first shard's, transformers the last loaded), and every entry of the index's weight_map (wm:
 * NULL without an index) must be in the shard it names. */
static int check_shards(seer_model_t *m, const shard_list_t *l, const cJSON *wm, const char *index_path, seer_err_t *err) {
    if (m->nfiles > 1) {
        size_t total = 0;
        for (int i = 0; i < m->nfiles; i++) total += seer_st_count(m->files[i]);
        tensor_at_t *all = malloc((total ? total : 1) * sizeof *all);
        if (!all) return seer_err_set(err, SEER_ENOMEM, "out of memory");
        size_t n = 0;
        for (int i = 0; i < m->nfiles; i++)
            for (size_t k = 0; k < seer_st_count(m->files[i]); k++)
                all[n++] = (tensor_at_t){seer_st_entry(m->files[i], k)->name, i};
        qsort(all, n, sizeof *all, cmp_tensor_at);
        for (size_t k = 1; k < n; k++)
            if (strcmp(all[k - 1].name, all[k].name) == 0) {
                int a = all[k - 1].file < all[k].file ? all[k - 1].file : all[k].file;
                int b = all[k - 1].file < all[k].file ? all[k].file : all[k - 1].file;
                int rc = seer_err_set(err, SEER_EPARSE, "%s: tensor %.300s is stored in two shards, %s and %s", m->dir,
                                      all[k].name, l->names[a], l->names[b]);
                free(all);
                return rc;
            }
        free(all);
    }
    const cJSON *e;
    if (wm)
        cJSON_ArrayForEach(e, wm) {
            int f = 0;
            while (f < l->n && strcmp(l->names[f], e->valuestring) != 0) f++;
            if (f < m->nfiles && !seer_st_find(m->files[f], e->string))
                return seer_err_set(err, SEER_EPARSE, "%s: weight_map puts tensor %.300s in %s, which does not hold it",
                                    index_path, e->string, e->valuestring);
        }
    return 0;
}

static int open_weights(seer_model_t *m, int weights, int on_gpu, seer_err_t *err) {
    char path[PATH_MAX];
    shard_list_t l = {.n = 0};
    cJSON *idx = NULL;
    const cJSON *wm = NULL;
    int rc = join_path(path, sizeof path, m->dir, "model.safetensors.index.json", err);
    if (rc < 0) return rc;
    if (entry_exists(path)) {
        idx = seer_model_read_json(path, err);
        if (!idx) return err ? err->code : SEER_EPARSE;
        wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
        if (!cJSON_IsObject(wm)) {
            rc = seer_err_set(err, SEER_EPARSE, "%s: missing \"weight_map\" object", path);
        } else {
            const cJSON *e;
            cJSON_ArrayForEach(e, wm) {
                if (!cJSON_IsString(e)) {
                    rc = seer_err_set(err, SEER_EPARSE, "%s: weight_map[\"%s\"] is not a file name", path, e->string);
                    break;
                }
                if ((rc = add_shard(m, &l, e->valuestring, err)) < 0) break;
            }
        }
    } else if ((rc = join_path(path, sizeof path, m->dir, "model.safetensors", err)) == 0) {
        if (!entry_exists(path))
            rc = seer_err_set(err, SEER_ENOTFOUND,
                              "%s: no model.safetensors or model.safetensors.index.json (PyTorch .bin checkpoints are "
                              "not read; convert them to safetensors)", m->dir);
        else
            rc = add_shard(m, &l, "model.safetensors", err);
    }
    if (rc == 0) rc = open_shards(m, &l, weights, on_gpu, err);
    if (rc == 0) {
        char ipath[sizeof m->dir + 32];
        snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", m->dir);
        rc = check_shards(m, &l, idx ? wm : NULL, ipath, err);
    }
    cJSON_Delete(idx);
    for (int i = 0; i < l.n; i++) free(l.names[i]);
    return rc;
}

static const seer_st_entry_t *find_tensor(seer_model_t *m, const char *name) {
    const seer_st_entry_t *e = NULL;
    for (int i = 0; i < m->nfiles && !e; i++) e = seer_st_find(m->files[i], name);
    return e;
}

/* A Gemma 3 multimodal checkpoint keeps its language model under a prefix: transformers 5 saves
 * model.language_model.* and lm_head.*, the checkpoints on the hub (transformers 4) have
 * language_model.model.* and language_model.lm_head.*. The vision tower and projector are
 * skipped, and one line says so. */
static int multimodal_prefixes(seer_model_t *m, seer_err_t *err) {
    if (find_tensor(m, "model.language_model.embed_tokens.weight")) {
        snprintf(m->model_prefix, sizeof m->model_prefix, "model.language_model.");
        snprintf(m->head_prefix, sizeof m->head_prefix, "lm_head.");
    } else if (find_tensor(m, "language_model.model.embed_tokens.weight")) {
        snprintf(m->model_prefix, sizeof m->model_prefix, "language_model.model.");
        snprintf(m->head_prefix, sizeof m->head_prefix, "language_model.lm_head.");
    } else {
        return seer_err_set(err, SEER_EPARSE,
                            "%s: a Gemma 3 multimodal config, but the checkpoint has neither "
                            "model.language_model.embed_tokens.weight nor language_model.model.embed_tokens.weight",
                            m->dir);
    }
    size_t skipped = 0, ml = strlen(m->model_prefix), hl = strlen(m->head_prefix);
    for (int i = 0; i < m->nfiles; i++)
        for (size_t k = 0; k < seer_st_count(m->files[i]); k++) {
            const char *n = seer_st_entry(m->files[i], k)->name;
            if (strncmp(n, m->model_prefix, ml) != 0 && strncmp(n, m->head_prefix, hl) != 0) skipped++;
        }
    fprintf(stderr, "seer: a Gemma 3 multimodal checkpoint: loading its text model (%s*); the vision tower and "
            "projector (%zu tensors) are skipped\n", m->model_prefix, skipped);
    return 0;
}

/* ---- what a decode step reads ----------------------------------------------------------------
 * Each tensor bind looks up is listed once (by its data: gpt2 probes a name before binding it,
 * a tied head may be bound under two names); after bind, seer_model_decode_bytes counts them,
 * a lookup table as one row. */
struct seer_bound_tensor {
    const void *data;
    size_t es, elems, row_elems; /* element size, elements, elements of a row (a lookup reads one) */
};

static int note_bound(seer_model_t *m, const seer_st_entry_t *e) {
    if (m->bound_cap == SIZE_MAX) return 0; /* the load is over */
    for (size_t i = 0; i < m->nbound; i++)
        if (m->bound[i].data == e->data) return 0;
    if (m->nbound == m->bound_cap) {
        size_t cap = m->bound_cap ? m->bound_cap * 2 : 64;
        struct seer_bound_tensor *b = realloc(m->bound, cap * sizeof *b);
        if (!b) return -1;
        m->bound = b, m->bound_cap = cap;
    }
    size_t es = seer_dtype_size(e->dtype), elems = e->nbytes / es;
    m->bound[m->nbound++] = (struct seer_bound_tensor){e->data, es, elems, e->ndim == 2 ? (size_t)e->shape[1] : elems};
    return 0;
}

void seer_model_lookup_table(seer_model_t *m, const seer_weight_t *w) {
    for (size_t i = 0; i < sizeof m->lookup / sizeof m->lookup[0]; i++)
        if (!m->lookup[i] || m->lookup[i] == w->data) {
            m->lookup[i] = w->data;
            return;
        }
}

/* After bind: the sums, and the list freed (later binds are not counted). */
static void count_decode_reads(seer_model_t *m) {
    m->decode_params = m->decode_bytes = 0;
    for (size_t i = 0; i < m->nbound; i++) {
        const struct seer_bound_tensor *b = &m->bound[i];
        int lookup = b->data == m->embed.data && m->lm_head.data != m->embed.data;
        for (size_t k = 0; k < sizeof m->lookup / sizeof m->lookup[0]; k++) lookup |= m->lookup[k] && b->data == m->lookup[k];
        size_t elems = lookup ? b->row_elems : b->elems;
        m->decode_params += elems;
        m->decode_bytes += elems * b->es;
    }
    free(m->bound);
    m->bound = NULL, m->nbound = 0, m->bound_cap = SIZE_MAX;
}

int seer_model_weight(seer_model_t *m, seer_weight_t *w, const char *name, int64_t rows, int64_t cols, int optional,
                      char **missing, seer_err_t *err) {
    memset(w, 0, sizeof *w);
    char mapped[512];
    if (m->model_prefix[0] && strncmp(name, "model.", 6) == 0) {
        snprintf(mapped, sizeof mapped, "%s%s", m->model_prefix, name + 6);
        name = mapped;
    } else if (m->head_prefix[0] && strncmp(name, "lm_head.", 8) == 0) {
        snprintf(mapped, sizeof mapped, "%s%s", m->head_prefix, name + 8);
        name = mapped;
    }
    if (rows <= 0 || cols < 0) /* the config's checks make this impossible; a zero would mean "1-d" below */
        return seer_err_set(err, SEER_EPARSE, "%s: config.json gives tensor %s the impossible shape [%lld, %lld]", m->dir,
                            name, (long long)rows, (long long)cols);
    const seer_st_entry_t *e = find_tensor(m, name);
    if (!e) {
        if (optional) return 0;
        size_t old = *missing ? strlen(*missing) : 0;
        if (old > 4000) { /* enough to say what is wrong; a config claiming 4096 layers would list 36,000 */
            if (strcmp(*missing + old - 5, ", ...") != 0) {
                char *nm = realloc(*missing, old + 6);
                if (!nm) return seer_err_set(err, SEER_ENOMEM, "out of memory");
                memcpy(nm + old, ", ...", 6);
                *missing = nm;
            }
            return 0;
        }
        char *nm = realloc(*missing, old + strlen(name) + 3);
        if (!nm) return seer_err_set(err, SEER_ENOMEM, "out of memory");
        snprintf(nm + old, strlen(name) + 3, "%s%s", old ? ", " : "", name);
        *missing = nm;
        return 0;
    }
    if (e->dtype != SEER_F32 && e->dtype != SEER_BF16 && e->dtype != SEER_F16)
        return seer_err_set(err, SEER_EPARSE, "%s: tensor %s has dtype %s; weights must be F32, BF16 or F16", m->dir, name,
                            seer_dtype_st_name(e->dtype));
    int64_t want_rows = rows, want_cols = cols;
    int ok = cols == 0 ? (e->ndim == 1 && e->shape[0] == rows) : (e->ndim == 2 && e->shape[0] == rows && e->shape[1] == cols);
    if (!ok) {
        char got[128] = "";
        size_t o = 0;
        for (int d = 0; d < e->ndim && o < sizeof got - 24; d++)
            o += (size_t)snprintf(got + o, sizeof got - o, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
        if (cols == 0)
            return seer_err_set(err, SEER_EPARSE, "%s: tensor %s has shape [%s], config.json implies [%lld]", m->dir, name,
                                got, (long long)want_rows);
        return seer_err_set(err, SEER_EPARSE, "%s: tensor %s has shape [%s], config.json implies [%lld, %lld]", m->dir, name,
                            got, (long long)want_rows, (long long)want_cols);
    }
    /* The kernels read elements of their dtype in place: data off its element boundary is
     * undefined behaviour in C (the reference writers align every tensor; a crafted file may not). */
    if ((uintptr_t)e->data % seer_dtype_size(e->dtype) != 0)
        return seer_err_set(err, SEER_EPARSE,
                            "%s: tensor %s's data is not aligned to its %zu-byte %s elements (a crafted or corrupt "
                            "safetensors file)", m->dir, name, seer_dtype_size(e->dtype), seer_dtype_st_name(e->dtype));
    w->dtype = e->dtype;
    w->data = e->data;
    w->rows = cols == 0 ? 1 : rows;
    w->cols = cols == 0 ? rows : cols;
    if (note_bound(m, e) < 0) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    if (cols > 0) m->matrix_kinds |= 1u << ((e->dtype == SEER_F32 ? 0 : e->dtype == SEER_BF16 ? 2 : 4) + (cols % 32 == 0));
    return 0;
}

/* Every occurrence of dir in msg becomes "<hidden>" (a hidden model's load errors). */
static void hide_dir(char *msg, size_t cap, const char *dir) {
    size_t dl = strlen(dir);
    if (dl == 0) return;
    char out[sizeof ((seer_err_t *)0)->msg];
    size_t o = 0;
    for (const char *p = msg; *p && o + 1 < sizeof out;) {
        if (strncmp(p, dir, dl) == 0) {
            o += (size_t)snprintf(out + o, sizeof out - o, "<hidden>");
            if (o >= sizeof out) o = sizeof out - 1;
            p += dl;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = 0;
    snprintf(msg, cap, "%s", out);
}

/* "cuda" -> 0, "cuda:N" -> N. */
static int parse_device(const char *dev, int *idx, seer_err_t *err) {
    const char *p = NULL;
    if (strcmp(dev, "cuda") == 0) {
        *idx = 0;
        return 0;
    }
    if (strncmp(dev, "cuda:", 5) == 0) p = dev + 5;
    char *end = NULL;
    long v = p && *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;
    if (v < 0 || v > 255 || !end || *end)
        return seer_err_set(err, SEER_EINVAL, "unknown device '%s'; devices are \"cpu\", \"cuda\", \"cuda:N\"", dev);
    *idx = (int)v;
    return 0;
}

const char *seer_model_device(const seer_model_t *m, char *buf, size_t n) {
    int i = seer_gpu_device_index(m);
    if (i < 0) snprintf(buf, n, "cpu");
    else snprintf(buf, n, "cuda:%d", i);
    return buf;
}

/* ---- bf16 weights into the AMX tile layout -------------------------------------------------------
 * On a CPU that runs bf16 on AMX, the linear weights of an in-memory model (the layers of the
 * Llama family, m->layers, and of Gemma, and any LM head) are rewritten in place into the tile layout
 * (seer_k_amx_pack, kernels_x86.c): a decode step then reads each matrix as one stream and a
 * prefill makes no tiles, with the same bits (tests/unit/test_kernels.c). Never packed: a
 * mapped file (it is never written), a GPU model, the embeddings or a lookup table (read as
 * rows; a tied LM head is the embeddings), a weight whose bytes partly overlap another
 * candidate's (two views of one tensor that are not 32-row aligned), and any weight outside the
 * model's copies. Only the AMX kernels and seer_w_index (LoRA merges) read a packed weight.
 * SEER_AMX_PACK=0 leaves every weight as rows (to compare). Out of memory for a packing's
 * scratch leaves that weight as rows, which every kernel still takes. */
static size_t weight_bytes_of(const seer_weight_t *w) {
    return (size_t)w->rows * (size_t)w->cols * seer_dtype_size(w->dtype);
}

static int weights_overlap(const seer_weight_t *a, const void *b, size_t bn) {
    uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b;
    return a0 < b0 + bn && b0 < a0 + weight_bytes_of(a);
}

static int same_weight(const seer_weight_t *a, const seer_weight_t *b) {
    return a->data == b->data && a->rows == b->rows && a->cols == b->cols && a->dtype == b->dtype;
}

const char *const seer_model_layer_modules[SEER_LAYER_MODULES] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                                  "gate_proj", "up_proj", "down_proj"};

seer_weight_t *seer_model_layer_weight(seer_model_t *m, int layer, int mod) {
    if (layer < 0 || layer >= m->cfg.num_layers || mod < 0 || mod >= SEER_LAYER_MODULES) return NULL;
    if (m->arch && m->arch->forward == seer_gemma_forward) /* Gemma keeps its layers itself */
        return seer_gemma_layer_weight(m, layer, seer_model_layer_modules[mod]);
    if (!m->layers) return NULL;
    seer_layer_weights_t *l = &m->layers[layer];
    seer_weight_t *w[SEER_LAYER_MODULES] = {&l->q, &l->k, &l->v, &l->o, &l->gate, &l->up, &l->down};
    return w[mod];
}

static void pack_for_amx(seer_model_t *m) {
    const char *env = getenv("SEER_AMX_PACK");
    if (!m->in_memory || !m->layers || m->nfiles < 1 || (env && strcmp(env, "0") == 0) || !seer_k_have_amx()) return;
    size_t cap = (size_t)m->cfg.num_layers * SEER_LAYER_MODULES + 1, nc = 0;
    seer_weight_t **c = malloc(cap * sizeof *c);
    unsigned char *ok = calloc(cap, 1);
    if (!c || !ok) goto out;
    for (int i = 0; i < m->cfg.num_layers; i++)
        for (int k = 0; k < SEER_LAYER_MODULES; k++) {
            seer_weight_t *w = seer_model_layer_weight(m, i, k);
            if (w && seer_k_amx_packable(w)) c[nc++] = w;
        }
    if (seer_k_amx_packable(&m->lm_head)) c[nc++] = &m->lm_head;
    int any = 0;
    for (size_t i = 0; i < nc; i++) {
        int good = !(m->embed.data && weights_overlap(c[i], m->embed.data, weight_bytes_of(&m->embed)));
        for (size_t k = 0; k < sizeof m->lookup / sizeof m->lookup[0]; k++)
            good &= !(m->lookup[k] && weights_overlap(c[i], m->lookup[k], 1));
        for (size_t j = 0; j < nc && good; j++)
            good = j == i || same_weight(c[i], c[j]) || !weights_overlap(c[i], c[j]->data, weight_bytes_of(c[j]));
        int inside = 0;
        for (int f = 0; f < m->nfiles && !inside; f++) inside = seer_st_contains(m->files[f], c[i]->data, weight_bytes_of(c[i]));
        ok[i] = (unsigned char)(good && inside);
        any |= ok[i];
    }
    if (!any) goto out;
    int f = 0;
    while (f < m->nfiles && seer_st_set_writable(m->files[f], 1) == 0) f++;
    if (f == m->nfiles)
        for (size_t i = 0; i < nc; i++) {
            if (!ok[i]) continue;
            size_t j = 0;
            while (j < i && !(ok[j] && same_weight(c[i], c[j]))) j++;
            if (j < i) c[i]->amx_packed = c[j]->amx_packed; /* one tensor bound twice: packed once */
            else seer_k_amx_pack(m->pool, c[i]);
            m->amx_packed += c[i]->amx_packed;
        }
    while (f-- > 0) seer_st_set_writable(m->files[f], 0);
out:
    free(c);
    free(ok);
}

int seer_model_load(seer_model_t **out, const char *dir, const seer_model_opts_t *opts, seer_err_t *err) {
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0)
        return seer_err_set(err, SEER_ENOTFOUND, "cannot open model %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return seer_err_set(err, SEER_EINVAL, "%s is not a directory; give the model directory (with config.json)", dir);
    seer_model_t *m = calloc(1, sizeof *m);
    if (!m) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    m->hidden = opts && opts->hidden;
    m->fast_bf16 = opts && opts->fast_bf16;
    int rc = seer_model_parse_config(&m->cfg, dir, err);
    if (rc < 0) goto fail;
    char cpath[PATH_MAX];
    if ((rc = join_path(cpath, sizeof cpath, dir, "config.json", err)) < 0) goto fail;
    int multimodal = 0;
    if (!(m->config_json = seer_model_read_config(cpath, &multimodal, err))) {
        rc = err ? err->code : SEER_EPARSE;
        goto fail;
    }
    m->arch = find_arch(m->cfg.model_type);
    if (!m->arch) {
        rc = seer_err_set(err, SEER_EINVAL, "%s/config.json: model_type \"%s\" is not supported (supported: %s)", dir,
                          m->cfg.model_type, seer_model_supported());
        goto fail;
    }
    if ((rc = seer_model_check_fields(m, multimodal, err)) < 0) goto fail;
    int gpu_idx = -1; /* decided first: weights bound for a GPU are not read into host memory */
    if (opts && opts->device && strcmp(opts->device, "cpu") != 0) {
        if ((rc = parse_device(opts->device, &gpu_idx, err)) < 0) goto fail;
        char why[512];
        if (seer_cuda_device_count(why, sizeof why) <= 0) {
            static int told;
            if (!told) fprintf(stderr, "seer: %s: %s; running on the CPU\n", opts->device, why);
            told = 1;
            gpu_idx = -1;
        }
    }
    if ((rc = open_weights(m, opts ? opts->weights : SEER_WEIGHTS_AUTO, gpu_idx >= 0, err)) < 0) goto fail;
    if (multimodal && (rc = multimodal_prefixes(m, err)) < 0) goto fail;
    m->layers = calloc((size_t)m->cfg.num_layers, sizeof *m->layers);
    if (!m->layers) {
        rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
        goto fail;
    }
    m->hook_mask = SEER_HP_DEFAULT_MASK;
    if ((rc = m->arch->bind(m, err)) < 0) goto fail;
    count_decode_reads(m);
    for (int i = 0; i < m->nfiles; i++)
        for (size_t k = 0; k < seer_st_count(m->files[i]); k++) {
            const seer_st_entry_t *e = seer_st_entry(m->files[i], k);
            m->weight_bytes += e->nbytes;
            m->n_params += e->nbytes / seer_dtype_size(e->dtype);
        }
    m->cfg.weight_dtype = m->embed.dtype;
    m->pool = opts && opts->threads > 0 ? seer_pool_new(opts->threads) : seer_pool_default();
    if (!m->pool) {
        rc = seer_err_set(err, SEER_ENOMEM, "cannot start the thread pool");
        goto fail;
    }
    if (gpu_idx >= 0 && (rc = seer_gpu_attach(m, gpu_idx, opts->progress, err)) < 0) goto fail;
    if (gpu_idx < 0) pack_for_amx(m);
    if (m->hidden) snprintf(m->dir, sizeof m->dir, "<hidden>");
    *out = m;
    return 0;
fail:
    if (m->hidden && err) hide_dir(err->msg, sizeof err->msg, dir);
    seer_model_free(m);
    return rc;
}

void seer_model_free(seer_model_t *m) {
    if (!m) return;
    seer_gpu_detach(m);
    if (m->lora_free) m->lora_free(m->lora_state);
    if (m->arch_free) m->arch_free(m->arch_state);
    cJSON_Delete(m->config_json);
    for (int i = 0; i < m->nfiles; i++) seer_st_close(m->files[i]);
    if (m->pool && m->pool != seer_pool_default()) seer_pool_free(m->pool);
    free(m->layers);
    free(m->bound);
    free(m);
}

const seer_model_config_t *seer_model_config(const seer_model_t *m) { return &m->cfg; }
size_t seer_model_param_count(const seer_model_t *m) { return m->n_params; }
size_t seer_model_weight_bytes(const seer_model_t *m) { return m->weight_bytes; }
size_t seer_model_decode_bytes(const seer_model_t *m) { return m->decode_bytes; }
size_t seer_model_decode_params(const seer_model_t *m) { return m->decode_params; }
int seer_model_weights_in_memory(const seer_model_t *m) { return m->in_memory; }
int seer_model_amx_packed(const seer_model_t *m) { return m->amx_packed; }
const char *seer_model_kv_dtype(const seer_model_t *m) {
    return m->gpu || (m->fast_bf16 && m->embed.dtype == SEER_BF16 && seer_k_fast_kind(NULL) != NULL) ? "bf16" : "f32";
}
const char *seer_model_dir(const seer_model_t *m) { return m->dir; }
int seer_model_gemm_min_tokens(const seer_model_t *m) {
    if (m->gpu) return 0;
    int saved = seer_k_fast_bf16, most = SEER_BLAS_MIN_TOKENS;
    seer_k_fast_bf16 = m->fast_bf16;
    for (int k = 0; k < 6; k++)
        if (m->matrix_kinds & (1u << k)) {
            seer_weight_t w = {.dtype = k < 2 ? SEER_F32 : k < 4 ? SEER_BF16 : SEER_F16, .rows = 1, .cols = k % 2 ? 32 : 33};
            int g = seer_k_linear_gemm_min(&w);
            if (g > most) most = g;
        }
    seer_k_fast_bf16 = saved;
    return most;
}

int seer_model_forward(seer_model_t *m, seer_kv_cache_t *c, const int32_t *tokens, int n, float *logits, int all_logits,
                       seer_err_t *err) {
    return seer_model_forward_ex(m, c, tokens, n, logits, all_logits, NULL, err);
}

int seer_model_forward_ex(seer_model_t *m, seer_kv_cache_t *c, const int32_t *tokens, int n, float *logits,
                          int all_logits, float *hidden, seer_err_t *err) {
    return seer_model_forward_hooked(m, c, tokens, n, logits, all_logits, hidden, NULL, err);
}

static int check_forward(const seer_model_t *m, const seer_kv_cache_t *c, const int32_t *tokens, int n,
                         seer_err_t *err) {
    if (n <= 0) return seer_err_set(err, SEER_EINVAL, "forward: no tokens");
    if (c->len + n > c->max_tokens)
        return seer_err_set(err, SEER_EINVAL, "forward: %d cached + %d new tokens exceed the cache size %d", c->len, n,
                            c->max_tokens);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return seer_err_set(err, SEER_EINVAL, "forward: token id %d at position %d is outside the vocabulary [0, %d)",
                                tokens[i], i, m->cfg.vocab_size);
    if ((m->gpu != NULL) != (c->gdev != NULL))
        return seer_err_set(err, SEER_EINVAL, "forward: the KV cache was made for the model on another device; make a new one");
    return 0;
}

int seer_fwd_check_from(const seer_model_t *m, int from, int stop, const float *resid, const float *hidden, int seq,
                        seer_err_t *err) {
    /* from, stop: seer_fwd_hooks_t's, each the block + 1 */
    char which[32] = "";
    if (seq > 0) snprintf(which, sizeof which, " (sequence %d)", seq);
    if (from < 1 || from > m->cfg.num_layers + 1)
        return seer_err_set(err, SEER_EINVAL, "forward: start_at_layer %d%s is outside 0 .. %d", from - 1, which, m->cfg.num_layers);
    if (!resid)
        return seer_err_set(err, SEER_EINVAL, "forward: start_at_layer %d%s needs the residual entering that block", from - 1, which);
    if (hidden) return seer_err_set(err, SEER_EINVAL, "forward: start_at_layer and hidden states cannot be asked together");
    if (stop && stop < from)
        return seer_err_set(err, SEER_EINVAL, "forward: stop_at_layer %d is before start_at_layer %d", stop - 1, from - 1);
    if (m->gpu)
        return seer_err_set(err, SEER_EINVAL, "forward: start_at_layer runs on a CPU model; this one is on a GPU (load it with device = \"cpu\")");
    return 0;
}

int seer_model_forward_hooked(seer_model_t *m, seer_kv_cache_t *c, const int32_t *tokens, int n, float *logits,
                              int all_logits, float *hidden, const seer_fwd_hooks_t *hk, seer_err_t *err) {
    int rc = check_forward(m, c, tokens, n, err);
    if (rc < 0) return rc;
    /* Ctrl-C / a kernel interrupt: long C work stops between passes (and, in
     * seer_fwd_attention, between layers) instead of running to the end. */
    if (seer_host_interrupted()) return seer_err_set(err, SEER_EINTR, "interrupted");
    int start = c->len, stop = hk ? hk->stop : 0, from = hk ? hk->from : 0;
    const float *resid = hk ? hk->resid : NULL;
    if (from && (rc = seer_fwd_check_from(m, from, stop, resid, hidden, 0, err)) < 0) return rc;
    if (hk && seer_hookset_empty(hk->set)) hk = NULL;
    int saved_fast = seer_k_fast_bf16; /* a hook may run another model's forward inside this one */
    seer_k_fast_bf16 = m->fast_bf16;
    if (m->gpu) {
        rc = seer_gpu_forward(m, c, tokens, n, logits, all_logits, hidden, hk, NULL, err);
    } else {
        seer_batch_seq_t one = {.cache = c, .tokens = tokens, .n = n, .logits = logits, .all_logits = all_logits,
                                .hidden = hidden, .hk = hk};
        int off[3] = {0, n, start};
        seer_fwd_batch_t fb = {.seq = &one, .ns = 1, .N = n, .off = off, .start = off + 2, .max_len = c->max_tokens, .stop = stop,
                               .from = from, .resid = &resid};
        rc = m->arch->forward(m, &fb, err);
    }
    seer_k_fast_bf16 = saved_fast;
    /* A failed pass (a hook raised) must not leave half-written entries counted in the cache, nor
     * does a stopped one add any, nor one that began past block 0 (its earlier blocks have no keys
     * and values for these positions). */
    if (rc < 0 || from) c->len = start;
    return rc == SEER_ESTOP ? 0 : rc;
}

int seer_model_forward_next(seer_model_t *m, seer_kv_cache_t *c, const int32_t *tokens, int n, int *next,
                            const seer_fwd_hooks_t *hk, seer_err_t *err) {
    if (!m->gpu) {
        float *lg = malloc((size_t)m->cfg.vocab_size * sizeof(float));
        if (!lg) return seer_err_set(err, SEER_ENOMEM, "out of memory for the logits");
        int start = c->len;
        int rc = seer_model_forward_hooked(m, c, tokens, n, lg, 0, NULL, hk, err);
        if (rc >= 0) {
            seer_sampler_opts_t o = {.temperature = 0.f, .top_p = 1.f, .repetition_penalty = 1.f};
            seer_rng_t r;
            seer_rng_seed(&r, 0);
            *next = seer_sample(lg, m->cfg.vocab_size, NULL, 0, &o, &r);
            if (*next == SEER_SAMPLE_NONFINITE) { /* a failed call: the cache does not keep its tokens */
                c->len = start;
                rc = seer_err_set(err, SEER_EINVAL, "forward: the logits are not finite (NaN or infinity); no token "
                                                    "can be chosen");
            }
        }
        free(lg);
        return rc;
    }
    int rc = check_forward(m, c, tokens, n, err);
    if (rc < 0) return rc;
    if (hk && seer_hookset_empty(hk->set)) hk = NULL;
    if (seer_host_interrupted()) return seer_err_set(err, SEER_EINTR, "interrupted");
    int start = c->len;
    rc = seer_gpu_forward(m, c, tokens, n, NULL, 0, NULL, hk, next, err);
    if (rc < 0) c->len = start;
    return rc;
}

/* ---- KV cache -------------------------------------------------------------------------------- */

int seer_kv_cache_new(seer_kv_cache_t **out, const seer_model_t *m, int max_tokens, seer_err_t *err) {
    *out = NULL;
    if (max_tokens <= 0) max_tokens = m->cfg.max_position_embeddings;
    seer_kv_cache_t *c = calloc(1, sizeof *c);
    if (!c) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    c->max_tokens = max_tokens;
    c->layers = m->cfg.num_layers;
    c->kv_dim = m->cfg.num_kv_heads * m->cfg.head_dim;
    /* layers x tokens x key/value dims floats for the keys and as many for the values (bf16 on a
     * GPU), counted without wrapping: a config of 256 layers of 4096 x 4096 key/value dims (its
     * weights a sparse file) and a cache of 2^30 tokens made 2^64 bytes, 0 as a size_t, and the
     * forward pass wrote past the 0-byte cache */
    size_t n;
    if (__builtin_mul_overflow((size_t)c->layers, (size_t)max_tokens, &n) ||
        __builtin_mul_overflow(n, (size_t)c->kv_dim, &n) || n > SIZE_MAX / 2 / sizeof(float)) {
        free(c);
        return seer_err_set(err, SEER_ENOMEM,
                            "cannot allocate a KV cache of %d tokens: that many tokens x %d layers x %d key/value dims "
                            "(num_hidden_layers x num_key_value_heads x head_dim of config.json), for keys and values, "
                            "is more than memory can address",
                            max_tokens, m->cfg.num_layers, m->cfg.num_kv_heads * m->cfg.head_dim);
    }
    if (m->gpu) {
        int rc = seer_gpu_kv_alloc((seer_model_t *)m, c, err);
        if (rc < 0) {
            free(c);
            return rc;
        }
        *out = c;
        return 0;
    }
    /* bf16 where precision = "fast" changes the linear layers (the peers' cache too); an f32 cache
     * everywhere else, so "fast" changes nothing where it says it does not */
    int bf16 = strcmp(seer_model_kv_dtype(m), "bf16") == 0;
    size_t es = bf16 ? sizeof(uint16_t) : sizeof(float);
    void *k = malloc(n * es), *v = malloc(n * es);
    if (bf16) c->k16 = k, c->v16 = v;
    else c->k = k, c->v = v;
    if (!k || !v) {
        seer_kv_cache_free(c);
        return seer_err_set(err, SEER_ENOMEM, "cannot allocate a KV cache of %d tokens (%zu MiB)", max_tokens,
                            2 * n * es >> 20);
    }
    *out = c;
    return 0;
}

void seer_kv_put(seer_kv_cache_t *c, int l, int pos, int n, const float *k, const float *v) {
    size_t at = ((size_t)l * (size_t)c->max_tokens + (size_t)pos) * (size_t)c->kv_dim, cnt = (size_t)n * (size_t)c->kv_dim;
    if (!c->k16) {
        memcpy(c->k + at, k, cnt * sizeof(float));
        memcpy(c->v + at, v, cnt * sizeof(float));
        return;
    }
    for (size_t i = 0; i < cnt; i++) {
        c->k16[at + i] = seer_f32_to_bf16(k[i]);
        c->v16[at + i] = seer_f32_to_bf16(v[i]);
    }
}

void seer_kv_attn(const seer_kv_cache_t *c, int l, seer_attn_params_t *a) {
    size_t at = (size_t)l * (size_t)c->max_tokens * (size_t)c->kv_dim;
    a->kc = c->k ? c->k + at : NULL;
    a->vc = c->v ? c->v + at : NULL;
    a->kc16 = c->k16 ? c->k16 + at : NULL;
    a->vc16 = c->v16 ? c->v16 + at : NULL;
    a->max_len = c->max_tokens;
}

void seer_kv_cache_free(seer_kv_cache_t *c) {
    if (!c) return;
    seer_gpu_kv_free(c);
    free(c->k);
    free(c->v);
    free(c->k16);
    free(c->v16);
    free(c);
}

int seer_kv_cache_len(const seer_kv_cache_t *c) { return c->len; }
void seer_kv_cache_reset(seer_kv_cache_t *c) { c->len = 0; }
void seer_kv_cache_truncate(seer_kv_cache_t *c, int n) {
    if (n >= 0 && n < c->len) c->len = n;
}

int seer_kv_cache_host(const seer_kv_cache_t *c) { return c && (c->k || c->k16); }

size_t seer_kv_cache_bytes(const seer_kv_cache_t *c) {
    size_t es = c->k16 || c->gdev ? sizeof(uint16_t) : sizeof(float); /* a GPU cache is bf16 */
    return 2 * (size_t)c->layers * (size_t)c->max_tokens * (size_t)c->kv_dim * es;
}

/* The first n positions of blocks 0 .. blocks-1 from src into dst (checked by the callers). */
static void copy_rows(seer_kv_cache_t *dst, const seer_kv_cache_t *src, int n, int blocks) {
    size_t row = (size_t)n * (size_t)src->kv_dim * (src->k16 ? sizeof(uint16_t) : sizeof(float));
    for (int l = 0; l < blocks; l++) {
        size_t so = (size_t)l * (size_t)src->max_tokens * (size_t)src->kv_dim, dof = (size_t)l * (size_t)dst->max_tokens * (size_t)dst->kv_dim;
        if (src->k16) {
            memcpy(dst->k16 + dof, src->k16 + so, row);
            memcpy(dst->v16 + dof, src->v16 + so, row);
        } else {
            memcpy(dst->k + dof, src->k + so, row);
            memcpy(dst->v + dof, src->v + so, row);
        }
    }
}

static int check_copy(const seer_kv_cache_t *dst, const seer_kv_cache_t *src, seer_err_t *err) {
    if (!seer_kv_cache_host(dst) || !seer_kv_cache_host(src))
        return seer_err_set(err, SEER_EINVAL, "copying a KV cache: only a CPU model's caches can be copied");
    if (dst->layers != src->layers || dst->kv_dim != src->kv_dim || !dst->k16 != !src->k16)
        return seer_err_set(err, SEER_EINVAL, "copying a KV cache: the caches belong to different models");
    return 0;
}

int seer_kv_cache_copy_prefix(seer_kv_cache_t *dst, const seer_kv_cache_t *src, int n, seer_err_t *err) {
    int rc = check_copy(dst, src, err);
    if (rc < 0) return rc;
    if (n < 0 || n > src->len || n > dst->max_tokens)
        return seer_err_set(err, SEER_EINVAL, "copying a KV cache: %d positions, but the source holds %d and the target has room for %d",
                            n, src->len, dst->max_tokens);
    copy_rows(dst, src, n, src->layers);
    dst->len = n;
    return 0;
}

int seer_kv_cache_copy_blocks(seer_kv_cache_t *dst, const seer_kv_cache_t *src, int n, int blocks, seer_err_t *err) {
    int rc = check_copy(dst, src, err);
    if (rc < 0) return rc;
    if (blocks < 1 || blocks > src->layers || dst->len != 0 || n < 0 || n > src->len || n > dst->max_tokens)
        return seer_err_set(err, SEER_EINVAL,
                            "copying a KV cache: %d positions of %d blocks into a cache of length %d, but the source holds "
                            "%d positions of %d blocks and the target has room for %d (the target must be empty)",
                            n, blocks, dst->len, src->len, src->layers, dst->max_tokens);
    copy_rows(dst, src, n, blocks);
    return 0;
}

int seer_model_prefix_rows(const seer_model_t *m, int donor_len, int taker_len, int common) {
    if (m->gpu || donor_len <= 0 || taker_len <= 0) return 0;
    int lo = donor_len < taker_len ? donor_len : taker_len, hi = donor_len + taker_len - lo;
    /* rope frequencies that depend on the pass's length: dynamic NTK's base past
     * max_position_embeddings (the same below it), LongRoPE's factor set (its switch point is
     * phi3.c's; not compared here) */
    if (m->cfg.rope_kind == SEER_ROPE_LONGROPE || (m->cfg.rope_kind == SEER_ROPE_DYNAMIC && hi > m->cfg.max_position_embeddings))
        return 0;
    /* attention's GEMM path from SEER_BLAS_MIN_TOKENS queries; each matrix kind's crossing */
    if (lo < SEER_BLAS_MIN_TOKENS && hi >= SEER_BLAS_MIN_TOKENS) return 0;
    int saved = seer_k_fast_bf16, ok = 1, gemm = 0;
    seer_k_fast_bf16 = m->fast_bf16;
    for (int k = 0; k < 6 && ok; k++)
        if (m->matrix_kinds & (1u << k)) {
            seer_weight_t w = {.dtype = k < 2 ? SEER_F32 : k < 4 ? SEER_BF16 : SEER_F16, .rows = 1, .cols = k % 2 ? 32 : 33};
            int g = seer_k_linear_gemm_min(&w);
            if (lo < g && hi >= g) ok = 0;
            if (lo >= g) gemm = 1;
        }
    seer_k_fast_bf16 = saved;
    if (!ok) return 0;
    int n = common < lo ? common : lo;
    if (n > taker_len - 1) n = taker_len - 1; /* the rest has at least one token: the prompt's logits */
    if (gemm) {
        /* sgemm: a shared row must sit in a whole tile of both prompts' calls (their tails run
         * narrower kernels); the rest keeps its rows in place (seer_k_linear_blas's lead) */
        int u = seer_k_blas_row_period();
        if (!u) return 0;
        if (n > lo / u * u) n = lo / u * u;
    }
    return n < 0 ? 0 : n / SEER_PREFIX_BLOCK * SEER_PREFIX_BLOCK;
}

uint64_t seer_model_state_epoch(const seer_model_t *m) {
    /* counters that only grow: their sum moves whenever one of them does */
    return (uint64_t)m->state_epoch + (uint64_t)seer_k_gemm_min_epoch() + (uint64_t)seer_iv_epoch();
}
