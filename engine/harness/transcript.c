/* Agent transcripts: JSONL, one event per line, each line handed to the kernel with a single
 * write(2) the moment it happens (a kill -9 keeps every earlier line whole) and synced to disk
 * unless it is a streaming delta. Secrets are replaced before anything reaches the file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "harness_private.h"

#define MIN_SECRET 4

struct seer_harness_transcript {
    int fd;
    int sync;
    long seq;
    char **secrets;
    size_t n_secrets;
    char *path;
    size_t written; /* bytes written so far */
};

char *seer_harness_redact(const char *text, const char *const *secrets, size_t n_secrets) {
    char *cur = strdup(text ? text : "");
    for (size_t i = 0; cur && i < n_secrets; i++) {
        const char *sec = secrets[i];
        size_t sl = sec ? strlen(sec) : 0;
        if (sl < MIN_SECRET || !strstr(cur, sec)) continue;
        hbuf_t out = {0};
        const char *p = cur, *hit;
        while ((hit = strstr(p, sec))) {
            hbuf_add(&out, p, (size_t)(hit - p));
            hbuf_add(&out, "[REDACTED]", 10);
            p = hit + sl;
        }
        hbuf_add(&out, p, strlen(p));
        free(cur);
        cur = out.p ? out.p : strdup("");
    }
    return cur;
}

void seer_harness_redact_json(cJSON *v, const char *const *secrets, size_t n_secrets) {
    if (!v || !n_secrets) return;
    if (v->string) {
        char *r = seer_harness_redact(v->string, secrets, n_secrets);
        if (r && strcmp(r, v->string) != 0 && !(v->type & cJSON_StringIsConst)) {
            free(v->string);
            v->string = r;
        } else {
            free(r);
        }
    }
    if (cJSON_IsString(v) && v->valuestring) {
        char *r = seer_harness_redact(v->valuestring, secrets, n_secrets);
        if (r && strcmp(r, v->valuestring) != 0 && !(v->type & cJSON_IsReference)) {
            free(v->valuestring);
            v->valuestring = r;
        } else {
            free(r);
        }
    }
    for (cJSON *c = v->child; c; c = c->next) seer_harness_redact_json(c, secrets, n_secrets);
}

int seer_harness_transcript_open(seer_harness_transcript_t **out, const char *path, const char *const *secrets,
                                 size_t n_secrets, int sync, seer_err_t *err) {
    *out = NULL;
    for (size_t i = 0; i < n_secrets; i++)
        if (!secrets[i] || strlen(secrets[i]) < MIN_SECRET)
            return seer_err_set(err, SEER_EINVAL,
                                "transcript: secret #%zu is shorter than %d characters, too short to redact safely "
                                "(leave it out of secrets or use a longer value)",
                                i + 1, MIN_SECRET);
    seer_harness_transcript_t *t = calloc(1, sizeof *t);
    if (!t) return seer_err_set(err, SEER_ENOMEM, "transcript: out of memory");
    t->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (t->fd < 0) {
        int e = errno;
        free(t);
        return seer_err_set(err, SEER_EIO, "transcript: cannot open %s: %s", path, strerror(e));
    }
    t->sync = sync;
    t->path = strdup(path);
    t->secrets = calloc(n_secrets ? n_secrets : 1, sizeof *t->secrets);
    for (size_t i = 0; i < n_secrets; i++) t->secrets[i] = strdup(secrets[i]);
    t->n_secrets = n_secrets;
    *out = t;
    return 0;
}

static int is_delta(const cJSON *ev) {
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev, "type"));
    size_t n = type ? strlen(type) : 0;
    return n > 6 && strcmp(type + n - 6, "_delta") == 0;
}

int seer_harness_transcript_write(seer_harness_transcript_t *t, cJSON *event, seer_err_t *err) {
    if (!t || t->fd < 0) return seer_err_set(err, SEER_EINVAL, "transcript: closed");
    if (!cJSON_IsObject(event)) return seer_err_set(err, SEER_EINVAL, "transcript: an event must be a JSON object");
    struct timeval tv;
    gettimeofday(&tv, NULL);
    /* seq and time lead the line, so a reader (and a person with `head`) sees them first. */
    cJSON_DeleteItemFromObjectCaseSensitive(event, "seq");
    cJSON_DeleteItemFromObjectCaseSensitive(event, "time");
    cJSON *seq = cJSON_CreateNumber((double)++t->seq);
    cJSON *tm = cJSON_CreateNumber((double)tv.tv_sec + (double)(tv.tv_usec / 1000) / 1000.0);
    cJSON_AddItemToObject(event, "time", tm);
    cJSON_AddItemToObject(event, "seq", seq);
    cJSON_DetachItemViaPointer(event, tm);
    cJSON_DetachItemViaPointer(event, seq);
    cJSON_InsertItemInArray(event, 0, tm); /* keeps the key; works on objects too */
    cJSON_InsertItemInArray(event, 0, seq);
    seer_harness_redact_json(event, (const char *const *)t->secrets, t->n_secrets);
    char *line = cJSON_PrintUnformatted(event);
    if (!line) return seer_err_set(err, SEER_ENOMEM, "transcript: out of memory");
    size_t n = strlen(line);
    line[n] = '\n'; /* PrintUnformatted leaves room for nothing, so write the NUL slot as the newline */
    size_t off = 0;
    int rc = 0;
    while (off < n + 1) {
        ssize_t w = write(t->fd, line + off, n + 1 - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            /* a line cut by a full disk would leave the file ending mid-line (the only line, if it
             * was the first, so no reader takes the file): the part written goes again */
            struct stat st;
            int cut = off > 0 && fstat(t->fd, &st) == 0 && (size_t)st.st_size >= off &&
                      ftruncate(t->fd, st.st_size - (off_t)off) == 0;
            rc = seer_err_set(err, SEER_EIO, "transcript: writing %s: %s%s", t->path, strerror(e),
                              cut ? " (the line it was writing was removed; the file ends with the last whole line)" : "");
            if (cut) off = 0;
            break;
        }
        off += (size_t)w;
    }
    t->written += off;
    free(line);
    if (rc == 0 && (t->sync == 2 || (t->sync == 1 && !is_delta(event)))) fdatasync(t->fd);
    return rc;
}

size_t seer_harness_transcript_written(const seer_harness_transcript_t *t) { return t ? t->written : 0; }

void seer_harness_transcript_close(seer_harness_transcript_t *t) {
    if (!t) return;
    if (t->fd >= 0) {
        fdatasync(t->fd);
        close(t->fd);
    }
    for (size_t i = 0; i < t->n_secrets; i++) {
        memset(t->secrets[i], 0, strlen(t->secrets[i]));
        free(t->secrets[i]);
    }
    free(t->secrets);
    free(t->path);
    free(t);
}
