/* Provider streams over one curl multi handle: every agent of a process shares a pool, so their
 * responses stream concurrently and any of them can be cancelled at once. A stream owns its
 * attempts: a failure that the retry policy retries (429, 529, an error event after HTTP 200, a
 * stream that ends early) starts the request again after the policy's wait, and says so with a
 * "retry" event so that a consumer drops what the failed attempt streamed. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "hub/curl_dl.h"

#include "harness.h"
#include "harness_private.h"

#define MAX_ERROR_BODY ((size_t)1 << 20)
/* An event stream may carry this many times max_response_bytes on the wire: SSE framing and the
 * JSON around each delta (about 100 bytes a token), pings, logprobs and fields seer drops. */
#define WIRE_FACTOR 4

struct seer_harness_pool {
    CURLM *multi;
    seer_harness_stream_t *head;
    int produced; /* events or endings since pool_run began */
};

struct seer_harness_stream {
    seer_harness_pool_t *pool;
    seer_harness_stream_t *prev, *next;
    int kind;
    int state;
    cJSON *queue;
    /* the request */
    char *url, *body;
    struct curl_slist *headers;
    int max_retries;
    double retry_base, retry_max;
    long connect_timeout_ms, idle_timeout_s;
    size_t max_bytes;        /* max_response_bytes */
    double response_timeout; /* seconds per attempt, 0: none */
    /* the attempt in flight */
    CURL *easy;
    int attempt;
    double retry_at;
    long status;
    int should_retry_hdr; /* -1: no x-should-retry header */
    double retry_after;   /* seconds from the headers, -1: none */
    int is_sse;
    size_t wire;        /* body bytes of this attempt */
    int over;           /* past a cap on the wire: 2 an event stream, 3 a whole body (the assembled
                         * response past its cap is asm_rc == SEER_HARNESS_ETOOBIG) */
    double attempt_t0;
    hbuf_t raw; /* an error body or a whole (non-streamed) JSON body */
    seer_harness_sse_t *sse;
    seer_harness_asm_t *as;
    int asm_rc;
    seer_err_t perr;
    char curl_err[CURL_ERROR_SIZE];
    uint64_t rng;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *str_of(const cJSON *o, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static double num_of(const cJSON *o, const char *k, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* ---- the retry policy ---------------------------------------------------------------------------- */

int seer_harness_should_retry(long status, int should_retry_header, const char *body) {
    /* A spend limit will not lift by waiting: never retried, whatever the headers say. */
    if (status == 429 && body && strstr(body, "enforced_spend_limit_reached")) return 0;
    if (should_retry_header == 1) return 1;
    if (should_retry_header == 0) return 0;
    return status == 408 || status == 409 || status == 429 || status >= 500;
}

double seer_harness_retry_wait(double retry_after_s, int retries_done, double base_s, double max_s, double jitter01) {
    if (retry_after_s >= 0 && retry_after_s <= 60) return retry_after_s;
    double w = base_s * pow(2.0, retries_done);
    if (w > max_s) w = max_s;
    return w * (1.0 - 0.25 * jitter01);
}

double seer_harness_parse_retry_after(const char *value, int is_ms) {
    if (!value) return -1;
    while (*value == ' ' || *value == '\t') value++;
    char *end = NULL;
    errno = 0;
    double v = strtod(value, &end);
    if (end != value && errno == 0) {
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') end++;
        if (*end == 0 && v >= 0 && isfinite(v)) return is_ms ? v / 1000.0 : v;
    }
    if (is_ms) return -1;
    time_t t = curl_getdate(value, NULL);
    if (t == (time_t)-1) return -1;
    double d = difftime(t, time(NULL));
    return d < 0 ? 0 : d;
}

/* ---- events ------------------------------------------------------------------------------------- */

static void push(seer_harness_stream_t *s, cJSON *ev) {
    cJSON_AddItemToArray(s->queue, ev);
    if (s->pool) s->pool->produced++;
}

static void move_events(seer_harness_stream_t *s, cJSON *from) {
    cJSON *e;
    while ((e = cJSON_DetachItemFromArray(from, 0))) push(s, e);
}

static void fail(seer_harness_stream_t *s, long status, const cJSON *perr, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(seer_harness_stream_t *s, long status, const cJSON *perr, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "error");
    cJSON_AddStringToObject(ev, "message", msg);
    if (status) cJSON_AddNumberToObject(ev, "status", (double)status);
    if (perr) cJSON_AddItemToObject(ev, "error", cJSON_Duplicate(perr, 1));
    cJSON_AddNumberToObject(ev, "attempts", s->attempt);
    s->state = SEER_HARNESS_FAILED;
    push(s, ev);
}

/* ---- attempts ------------------------------------------------------------------------------------ */

static void end_attempt(seer_harness_stream_t *s) {
    if (s->easy) {
        if (s->pool) curl_multi_remove_handle(s->pool->multi, s->easy);
        curl_easy_cleanup(s->easy);
        s->easy = NULL;
    }
}

static int on_sse_event(void *ud, const char *event, const char *data, size_t n) {
    seer_harness_stream_t *s = ud;
    cJSON *out = cJSON_CreateArray();
    int rc = seer_harness_asm_event(s->as, event, data, n, out, &s->perr);
    move_events(s, out);
    cJSON_Delete(out);
    if (rc == SEER_HARNESS_FINISHED || rc == SEER_HARNESS_ESTREAM || rc < 0) s->asm_rc = rc;
    return rc < 0 ? rc : 0; /* a provider error or bad data stops reading */
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
    seer_harness_stream_t *s = ud;
    size_t n = size * nitems;
    if (n >= 5 && strncmp(buf, "HTTP/", 5) == 0) { /* a new response (after a 100 Continue, too) */
        s->should_retry_hdr = -1;
        s->retry_after = -1;
        s->is_sse = 0;
        return n;
    }
    char line[512];
    size_t m = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, buf, m);
    line[m] = 0;
    char *colon = strchr(line, ':');
    if (!colon) return n;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    char *e = v + strlen(v);
    while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ')) *--e = 0;
    if (strcasecmp(line, "x-should-retry") == 0) {
        s->should_retry_hdr = strcasecmp(v, "true") == 0 ? 1 : strcasecmp(v, "false") == 0 ? 0 : -1;
    } else if (strcasecmp(line, "retry-after-ms") == 0) {
        double w = seer_harness_parse_retry_after(v, 1);
        if (w >= 0) s->retry_after = w;
    } else if (strcasecmp(line, "retry-after") == 0) {
        double w = seer_harness_parse_retry_after(v, 0);
        if (w >= 0 && s->retry_after < 0) s->retry_after = w; /* retry-after-ms is more precise */
    } else if (strcasecmp(line, "content-type") == 0) {
        s->is_sse = strstr(v, "event-stream") != NULL;
    }
    return n;
}

static size_t on_body(char *buf, size_t size, size_t nmemb, void *ud) {
    seer_harness_stream_t *s = ud;
    size_t n = size * nmemb;
    if (!s->status) curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &s->status);
    /* Nothing bounds what a provider sends but these caps: the bytes of one response are
     * counted whatever they hold (pings and unknown events included), so an endless stream is
     * cut off too, not only one that grows what is kept. */
    size_t wire_cap = s->max_bytes > SIZE_MAX / WIRE_FACTOR ? SIZE_MAX : s->max_bytes * WIRE_FACTOR;
    s->wire = n > SIZE_MAX - s->wire ? SIZE_MAX : s->wire + n;
    if (s->status >= 200 && s->status < 300 && s->is_sse) {
        if (s->wire > wire_cap) {
            if (s->asm_rc != SEER_HARNESS_FINISHED) s->over = 2;
            return 0;
        }
        if (s->asm_rc == SEER_HARNESS_FINISHED) return n; /* trailing bytes after the end */
        int rc = seer_harness_sse_feed(s->sse, buf, n, &s->perr);
        /* The parser's own failures (a line or an event past max_response_bytes) end the
         * attempt with their reason; before, they read as a cut stream and were retried. */
        if (rc < 0 && s->asm_rc == 0) {
            s->asm_rc = rc;
            if (rc == SEER_HARNESS_ETOOBIG) {
                char m[sizeof s->perr.msg];
                snprintf(m, sizeof m, "%s", s->perr.msg);
                seer_err_set(&s->perr, rc, "the provider's stream has %.200s (max_response_bytes)", m);
            }
        }
        return rc ? 0 : n;
    }
    if (s->status >= 200 && s->status < 300) { /* a whole (non-streamed) body is held, then parsed */
        if (s->raw.n + n > s->max_bytes) {
            s->over = 3;
            return 0;
        }
    } else if (s->raw.n + n > MAX_ERROR_BODY) {
        return s->wire > wire_cap ? 0 : n; /* an error body is cut (and not read for ever) */
    }
    if (hbuf_add(&s->raw, buf, n) < 0) return 0;
    return n;
}

static int start_attempt(seer_harness_stream_t *s) {
    s->attempt++;
    s->status = 0;
    s->should_retry_hdr = -1;
    s->retry_after = -1;
    s->is_sse = 0;
    s->asm_rc = 0;
    s->wire = 0;
    s->over = 0;
    s->attempt_t0 = now_s();
    seer_err_clear(&s->perr);
    hbuf_reset(&s->raw);
    s->curl_err[0] = 0;
    seer_harness_sse_free(s->sse);
    seer_harness_asm_free(s->as);
    s->as = seer_harness_asm_new(s->kind);
    if (s->as) seer_harness_asm_set_limit(s->as, s->max_bytes);
    /* one event line or event may hold at most max_response_bytes, as a whole body may */
    s->sse = seer_harness_sse_new(on_sse_event, s, s->max_bytes);
    s->easy = curl_easy_init();
    if (!s->as || !s->sse || !s->easy) {
        end_attempt(s);
        fail(s, 0, NULL, "out of memory");
        return -1;
    }
    CURL *e = s->easy;
    curl_easy_setopt(e, CURLOPT_URL, s->url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, s->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(s->body));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, s->curl_err);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, s->connect_timeout_ms);
    /* A response that stops sending bytes (not even SSE pings) counts as a dropped stream. */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, s->idle_timeout_s);
    if (s->response_timeout > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(s->response_timeout * 1000));
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    char ua[64];
    snprintf(ua, sizeof ua, "seer/%s", seer_version());
    curl_easy_setopt(e, CURLOPT_USERAGENT, ua);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (curl_multi_add_handle(s->pool->multi, e) != CURLM_OK) {
        end_attempt(s);
        fail(s, 0, NULL, "curl_multi_add_handle failed");
        return -1;
    }
    s->state = SEER_HARNESS_RUNNING;
    return 0;
}

static double jitter(seer_harness_stream_t *s) {
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return (double)(s->rng >> 11) / 9007199254740992.0;
}

/* The attempt failed for `reason`: retry it if the policy allows and attempts are left. */
static void retry_or_fail(seer_harness_stream_t *s, int retryable, long status, const cJSON *perr, const char *reason) {
    if (!retryable) {
        fail(s, status, perr, "%s", reason);
        return;
    }
    if (s->attempt > s->max_retries) {
        fail(s, status, perr, "%s (gave up after %d attempt%s)", reason, s->attempt, s->attempt == 1 ? "" : "s");
        return;
    }
    double wait = seer_harness_retry_wait(s->retry_after, s->attempt - 1, s->retry_base, s->retry_max, jitter(s));
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "retry");
    cJSON_AddNumberToObject(ev, "attempt", s->attempt);
    if (status) cJSON_AddNumberToObject(ev, "status", (double)status);
    cJSON_AddNumberToObject(ev, "wait_s", wait);
    cJSON_AddStringToObject(ev, "reason", reason);
    if (perr) cJSON_AddItemToObject(ev, "error", cJSON_Duplicate(perr, 1));
    push(s, ev);
    s->state = SEER_HARNESS_WAITING;
    s->retry_at = now_s() + wait;
}

/* "HTTP 529 overloaded_error: Overloaded" from a provider's error body. */
static void describe_http(char *out, size_t cap, long status, const char *body, cJSON **perr) {
    cJSON *j = body ? cJSON_Parse(body) : NULL;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsString(e)) { /* {"error": "text"} */
        snprintf(out, cap, "HTTP %ld: %s", status, e->valuestring);
    } else if (cJSON_IsObject(e)) {
        const char *type = str_of(e, "type"), *msg = str_of(e, "message");
        snprintf(out, cap, "HTTP %ld%s%s: %s", status, type ? " " : "", type ? type : "", msg ? msg : "(no message)");
        *perr = cJSON_Duplicate(e, 1);
    } else {
        char snippet[200];
        snprintf(snippet, sizeof snippet, "%s", body && *body ? body : "(empty body)");
        for (char *c = snippet; *c; c++)
            if (*c == '\n' || *c == '\r') *c = ' ';
        snprintf(out, cap, "HTTP %ld: %s", status, snippet);
    }
    cJSON_Delete(j);
}

static void finish_ok(seer_harness_stream_t *s) {
    cJSON *r = seer_harness_asm_result(s->as);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "message");
    cJSON *f;
    while ((f = r->child)) {
        cJSON *d = cJSON_DetachItemViaPointer(r, f);
        cJSON_AddItemToObject(ev, d->string, d);
    }
    cJSON_Delete(r);
    cJSON_AddNumberToObject(ev, "attempts", s->attempt);
    s->state = SEER_HARNESS_DONE;
    push(s, ev);
}

static void attempt_done(seer_harness_stream_t *s, CURLcode rc) {
    if (!s->status) curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &s->status);
    char cerr[CURL_ERROR_SIZE + 64];
    snprintf(cerr, sizeof cerr, "%s", s->curl_err[0] ? s->curl_err : curl_easy_strerror(rc));
    end_attempt(s);
    long st = s->status;
    char reason[1200];
    if (s->asm_rc == SEER_HARNESS_FINISHED) {
        finish_ok(s);
        return;
    }
    /* Past a limit: the same request would only grow as big (or take as long) again, so it is
     * not retried. */
    if (s->asm_rc == SEER_HARNESS_ETOOBIG || s->over) {
        char what[600];
        if (s->asm_rc == SEER_HARNESS_ETOOBIG)
            snprintf(what, sizeof what, "%.500s", s->perr.msg);
        else if (s->over == 2)
            snprintf(what, sizeof what,
                     "the provider's event stream passed %zu bytes for one response (%d x max_response_bytes, "
                     "max_response_bytes = %zu)",
                     s->max_bytes > SIZE_MAX / WIRE_FACTOR ? SIZE_MAX : s->max_bytes * WIRE_FACTOR, WIRE_FACTOR,
                     s->max_bytes);
        else
            snprintf(what, sizeof what, "the response body is bigger than max_response_bytes (%zu bytes)", s->max_bytes);
        fail(s, st, NULL,
             "%s: it was cut off and is not retried (pass a bigger max_response_bytes in the agent's options "
             "to accept it)",
             what);
        return;
    }
    if (rc == CURLE_OPERATION_TIMEDOUT && s->response_timeout > 0 &&
        now_s() - s->attempt_t0 >= s->response_timeout - 0.01) {
        fail(s, st, NULL,
             "the response took longer than response_timeout (%g s): it was cut off and is not retried (pass a "
             "bigger response_timeout in the agent's options, or none, to wait longer)",
             s->response_timeout);
        return;
    }
    if (s->asm_rc == SEER_HARNESS_ESTREAM) {
        int retryable = 0;
        const cJSON *pe = seer_harness_asm_error(s->as, &retryable);
        const char *type = str_of(pe, "type"), *msg = str_of(pe, "message");
        snprintf(reason, sizeof reason, "an error event after HTTP %ld: %s%s%s", st, type ? type : "", type ? ": " : "",
                 msg ? msg : "(no message)");
        retry_or_fail(s, retryable, st, pe, reason);
        return;
    }
    if (s->asm_rc < 0) { /* malformed stream data: the response cannot be trusted */
        snprintf(reason, sizeof reason, "the provider's stream is malformed: %.900s", s->perr.msg);
        retry_or_fail(s, 1, st, NULL, reason);
        return;
    }
    if (st >= 200 && st < 300) {
        if (s->is_sse) {
            if (rc == CURLE_OK && seer_harness_asm_eof(s->as) == SEER_HARNESS_FINISHED) {
                finish_ok(s);
                return;
            }
            snprintf(reason, sizeof reason, "the stream was cut off before the response ended (%s)",
                     rc == CURLE_OK ? "the connection closed" : cerr);
            retry_or_fail(s, 1, st, NULL, reason);
            return;
        }
        if (rc != CURLE_OK) {
            snprintf(reason, sizeof reason, "the response was cut off (%s)", cerr);
            retry_or_fail(s, 1, st, NULL, reason);
            return;
        }
        cJSON *out = cJSON_CreateArray();
        seer_err_t e;
        seer_err_clear(&e);
        int arc = seer_harness_asm_whole(s->as, s->raw.p ? s->raw.p : "", s->raw.n, out, &e);
        move_events(s, out);
        cJSON_Delete(out);
        if (arc == SEER_HARNESS_FINISHED) {
            finish_ok(s);
        } else if (arc == SEER_HARNESS_ESTREAM) {
            int retryable = 0;
            const cJSON *pe = seer_harness_asm_error(s->as, &retryable);
            snprintf(reason, sizeof reason, "HTTP %ld with an error: %s", st, str_of(pe, "message") ? str_of(pe, "message") : "?");
            retry_or_fail(s, retryable, st, pe, reason);
        } else {
            char snippet[120];
            snprintf(snippet, sizeof snippet, "%s", s->raw.p ? s->raw.p : "");
            fail(s, st, NULL, "HTTP %ld but the body is neither an event stream nor a JSON response: %s", st, snippet);
        }
        return;
    }
    if (st == 0) { /* no response at all: connection refused, reset, DNS, timeout */
        snprintf(reason, sizeof reason, "could not reach %s: %s", s->url, cerr);
        retry_or_fail(s, 1, 0, NULL, reason);
        return;
    }
    cJSON *pe = NULL;
    describe_http(reason, sizeof reason, st, s->raw.p, &pe);
    retry_or_fail(s, seer_harness_should_retry(st, s->should_retry_hdr, s->raw.p), st, pe, reason);
    cJSON_Delete(pe);
}

/* ---- the replay "provider" ------------------------------------------------------------------------ */

static void replay(seer_harness_stream_t *s, const cJSON *req) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(req, "message");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    int i = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const char *t = str_of(b, "type");
        const char *text = NULL, *evt = NULL;
        if (t && strcmp(t, "text") == 0) text = str_of(b, "text"), evt = "text_delta";
        if (t && strcmp(t, "thinking") == 0) text = str_of(b, "thinking"), evt = "thinking_delta";
        if (text && *text) {
            cJSON *ev = cJSON_CreateObject();
            cJSON_AddStringToObject(ev, "type", evt);
            cJSON_AddNumberToObject(ev, "index", i);
            cJSON_AddStringToObject(ev, "text", text);
            push(s, ev);
        }
        if (t && strcmp(t, "tool_use") == 0) {
            cJSON *ev = cJSON_CreateObject();
            cJSON_AddStringToObject(ev, "type", "tool_use_start");
            cJSON_AddNumberToObject(ev, "index", i);
            cJSON_AddItemToObject(ev, "id", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(b, "id"), 1));
            cJSON_AddItemToObject(ev, "name", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(b, "name"), 1));
            push(s, ev);
        }
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "type", "block");
        cJSON_AddNumberToObject(ev, "index", i);
        cJSON_AddItemToObject(ev, "block", cJSON_Duplicate(b, 1));
        push(s, ev);
        i++;
    }
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "message");
    cJSON *msg = cJSON_AddObjectToObject(ev, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    cJSON_AddItemToObject(msg, "content", content ? cJSON_Duplicate(content, 1) : cJSON_CreateArray());
    const cJSON *sr = cJSON_GetObjectItemCaseSensitive(req, "stop_reason");
    cJSON_AddItemToObject(ev, "stop_reason", sr ? cJSON_Duplicate(sr, 1) : cJSON_CreateString("end_turn"));
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(req, "usage");
    cJSON_AddItemToObject(ev, "usage", cJSON_IsObject(u) ? cJSON_Duplicate(u, 1) : cJSON_CreateObject());
    cJSON_AddStringToObject(ev, "model", str_of(req, "model") ? str_of(req, "model") : "replay");
    cJSON_AddNumberToObject(ev, "attempts", 1);
    s->attempt = 1;
    s->state = SEER_HARNESS_DONE;
    push(s, ev);
}

/* ---- pool and streams ------------------------------------------------------------------------------- */

int seer_harness_pool_new(seer_harness_pool_t **out, seer_err_t *err) {
    *out = NULL;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return seer_err_set(err, SEER_EIO, "harness: curl_global_init: %s", curl_easy_strerror(curl_init_rc));
    seer_harness_pool_t *p = calloc(1, sizeof *p);
    if (!p) return seer_err_set(err, SEER_ENOMEM, "harness: out of memory");
    p->multi = curl_multi_init();
    if (!p->multi) {
        free(p);
        return seer_err_set(err, SEER_ENOMEM, "harness: curl_multi_init failed");
    }
    *out = p;
    return 0;
}

static void detach(seer_harness_stream_t *s) {
    seer_harness_pool_t *p = s->pool;
    if (!p) return;
    if (s->prev) s->prev->next = s->next;
    else p->head = s->next;
    if (s->next) s->next->prev = s->prev;
    s->prev = s->next = NULL;
    s->pool = NULL;
}

void seer_harness_pool_free(seer_harness_pool_t *p) {
    if (!p) return;
    while (p->head) {
        seer_harness_stream_t *s = p->head;
        seer_harness_stream_cancel(s);
        detach(s);
    }
    curl_multi_cleanup(p->multi);
    free(p);
}

int seer_harness_stream_start(seer_harness_pool_t *p, const cJSON *req, seer_harness_stream_t **out, seer_err_t *err) {
    *out = NULL;
    if (!p) return seer_err_set(err, SEER_EINVAL, "harness: the pool is closed");
    const char *provider = str_of(req, "provider");
    int kind = !provider ? 0
               : strcmp(provider, "anthropic") == 0 ? SEER_HARNESS_ANTHROPIC
               : strcmp(provider, "openai") == 0    ? SEER_HARNESS_OPENAI
               : strcmp(provider, "replay") == 0    ? SEER_HARNESS_REPLAY
                                                    : 0;
    if (!kind)
        return seer_err_set(err, SEER_EINVAL, "harness: unknown provider kind '%s' (anthropic, openai or replay)",
                            provider ? provider : "(none)");
    seer_harness_stream_t *s = calloc(1, sizeof *s);
    if (!s) return seer_err_set(err, SEER_ENOMEM, "harness: out of memory");
    s->kind = kind;
    s->queue = cJSON_CreateArray();
    s->pool = p;
    s->next = p->head;
    if (p->head) p->head->prev = s;
    p->head = s;
    s->rng = (uint64_t)(now_s() * 1e9) ^ (uint64_t)(uintptr_t)s ^ 0x9e3779b97f4a7c15ULL;
    if (!s->rng) s->rng = 1;
    if (kind == SEER_HARNESS_REPLAY) {
        replay(s, req);
        *out = s;
        return 0;
    }
    const char *url = str_of(req, "url");
    if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
        seer_harness_stream_free(s);
        return seer_err_set(err, SEER_EINVAL, "harness: the request's url must start with http:// or https:// (got '%s')",
                            url ? url : "(none)");
    }
    s->body = seer_harness_build_body(req, err);
    if (!s->body) {
        seer_harness_stream_free(s);
        return err ? err->code : SEER_EINVAL;
    }
    s->url = strdup(url);
    s->max_retries = (int)num_of(req, "max_retries", 2);
    s->retry_base = num_of(req, "retry_base", 0.5);
    s->retry_max = num_of(req, "retry_max", 8.0);
    s->connect_timeout_ms = (long)(num_of(req, "connect_timeout", 30) * 1000);
    s->idle_timeout_s = (long)num_of(req, "idle_timeout", 600);
    if (s->idle_timeout_s < 1) s->idle_timeout_s = 1;
    double mb = num_of(req, "max_response_bytes", (double)SEER_HARNESS_MAX_RESPONSE_BYTES);
    s->max_bytes = mb >= 1 && mb < 9e15 ? (size_t)mb : SEER_HARNESS_MAX_RESPONSE_BYTES;
    s->response_timeout = num_of(req, "response_timeout", 0);
    if (!(s->response_timeout > 0) || s->response_timeout > 1e9) s->response_timeout = 0;
    const char *key = str_of(req, "api_key");
    char line[8192];
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "content-type: application/json");
    h = curl_slist_append(h, "accept: text/event-stream");
    h = curl_slist_append(h, "expect:"); /* no 100-continue round trip for big bodies */
    if (kind == SEER_HARNESS_ANTHROPIC) {
        h = curl_slist_append(h, "anthropic-version: 2023-06-01");
        if (key && *key) {
            snprintf(line, sizeof line, "x-api-key: %s", key);
            h = curl_slist_append(h, line);
        }
    } else if (key && *key) {
        snprintf(line, sizeof line, "authorization: Bearer %s", key);
        h = curl_slist_append(h, line);
    }
    const cJSON *hv;
    cJSON_ArrayForEach(hv, cJSON_GetObjectItemCaseSensitive(req, "headers")) {
        if (!hv->string || !cJSON_IsString(hv) || strpbrk(hv->string, "\r\n:") || strpbrk(hv->valuestring, "\r\n")) {
            curl_slist_free_all(h);
            seer_harness_stream_free(s);
            return seer_err_set(err, SEER_EINVAL, "harness: header '%s' must be a string without line breaks",
                                hv->string ? hv->string : "?");
        }
        snprintf(line, sizeof line, "%s: %s", hv->string, hv->valuestring);
        h = curl_slist_append(h, line);
    }
    memset(line, 0, sizeof line); /* the key does not linger on the stack */
    s->headers = h;
    if (start_attempt(s) < 0) {
        /* failed streams report through their error event */
    }
    *out = s;
    return 0;
}

cJSON *seer_harness_stream_next(seer_harness_stream_t *s) { return cJSON_DetachItemFromArray(s->queue, 0); }

int seer_harness_stream_state(const seer_harness_stream_t *s) { return s->state; }

void seer_harness_stream_cancel(seer_harness_stream_t *s) {
    if (s->state != SEER_HARNESS_RUNNING && s->state != SEER_HARNESS_WAITING) return;
    end_attempt(s);
    s->state = SEER_HARNESS_CANCELLED;
}

cJSON *seer_harness_stream_partial(seer_harness_stream_t *s) {
    if (s->as) return seer_harness_asm_result(s->as);
    cJSON *r = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(r, "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddArrayToObject(m, "content");
    cJSON_AddNullToObject(r, "stop_reason");
    cJSON_AddObjectToObject(r, "usage");
    return r;
}

void seer_harness_stream_free(seer_harness_stream_t *s) {
    if (!s) return;
    end_attempt(s);
    detach(s);
    seer_harness_sse_free(s->sse);
    seer_harness_asm_free(s->as);
    curl_slist_free_all(s->headers);
    cJSON_Delete(s->queue);
    if (s->body) free(s->body);
    free(s->url);
    free(s->raw.p);
    free(s);
}

int seer_harness_pool_run(seer_harness_pool_t *p, int timeout_ms, int watch_fd, int (*interrupted)(void *), void *ud,
                          seer_err_t *err) {
    double deadline = now_s() + (timeout_ms > 0 ? timeout_ms : 0) / 1000.0;
    p->produced = 0;
    for (;;) {
        double t = now_s();
        double next_retry = INFINITY;
        for (seer_harness_stream_t *s = p->head; s; s = s->next) {
            if (s->state != SEER_HARNESS_WAITING) continue;
            if (s->retry_at <= t)
                start_attempt(s);
            else if (s->retry_at < next_retry)
                next_retry = s->retry_at;
        }
        int running = 0;
        CURLMcode mc = curl_multi_perform(p->multi, &running);
        if (mc != CURLM_OK) return seer_err_set(err, SEER_EIO, "harness: curl_multi_perform: %s", curl_multi_strerror(mc));
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(p->multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            for (seer_harness_stream_t *s = p->head; s; s = s->next) {
                if (s->easy == msg->easy_handle) {
                    attempt_done(s, msg->data.result);
                    break;
                }
            }
        }
        if (p->produced) return 1;
        if (interrupted && interrupted(ud)) return SEER_EINTR;
        t = now_s();
        if (t >= deadline) return 0;
        double wait = deadline - t;
        if (wait > 0.1) wait = 0.1;
        if (next_retry - t < wait) wait = next_retry - t;
        if (wait < 0) wait = 0;
        struct curl_waitfd wfd = {.fd = watch_fd, .events = CURL_WAIT_POLLIN, .revents = 0};
        int nfds = 0;
        mc = curl_multi_poll(p->multi, watch_fd >= 0 ? &wfd : NULL, watch_fd >= 0 ? 1 : 0, (int)(wait * 1000) + 1, &nfds);
        if (mc != CURLM_OK) return seer_err_set(err, SEER_EIO, "harness: curl_multi_poll: %s", curl_multi_strerror(mc));
        if (watch_fd >= 0 && (wfd.revents & (CURL_WAIT_POLLIN | POLLHUP | POLLERR))) return 2;
    }
}
