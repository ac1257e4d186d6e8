/* The streamable HTTP transport of the MCP client (libcurl): every message is a POST; a
 * request's answer is either one JSON body or an SSE stream of messages that ends with the
 * response. The session id from initialize goes on every later POST, with the negotiated
 * protocol version; close DELETEs the session. Transfers run on a curl multi handle polled in
 * short slices, so deadlines and Ctrl-C are noticed within about 100 ms, and answers to the
 * server's own requests can be POSTed while its stream is still open. */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hub/curl_dl.h"

#include "client_private.h"

#define SLICE_MS 100
#define CONNECT_TIMEOUT_MS 10000
#define AFTER_RESPONSE_MS 200
#define CLOSE_TIMEOUT_MS 2000
/* Answers to the server's own requests (ping, and errors for methods seer does not offer) are
 * POSTed at most MAX_SIDE at a time; up to MAX_QUEUED more wait their turn, and beyond that the
 * server's requests go unanswered (with a warning). A server that sent a batch of 100,000 pings
 * made the client open 100,000 connections at once. */
#define MAX_SIDE 4
#define MAX_QUEUED 1024

typedef struct xfer xfer_t;

struct mcp_http {
    char *url;
    struct curl_slist *user_headers; /* "Name: value" from the configuration */
    char *session_id;
    CURLM *multi;
    char **queue; /* answers to server requests waiting to be POSTed, oldest first */
    size_t nqueue;
    xfer_t *side; /* those being POSTed */
    size_t nside;
    size_t dropped; /* requests left unanswered since the last warning about them */
};

/* The body of an error status is kept up to this, for the message (and a JSON-RPC error in it). */
#define ERROR_BODY_MAX 65536

enum { SSE_FIELD, SSE_DATA_SPACE, SSE_DATA, SSE_EVENT_SPACE, SSE_EVENT, SSE_SKIP };

struct xfer {
    mcp_server_t *s;
    CURL *e;
    struct curl_slist *hdrs;
    char *body;
    int side;       /* an answer to the server: what it says back is not read */
    int error_body; /* the status is 300 or more: the body goes to resp */
    mcp_buf_t resp;
    mcp_reader_t rd; /* the JSON body, or the data of the SSE event being read */
    int sse;
    int sse_checked;
    /* SSE, line by line without holding a line: the field name, then the value streams to rd
     * (data) or into sse_event (event; its first 63 bytes) or nowhere (comments, id, retry). */
    int sse_st;
    char sse_field[8];
    size_t sse_field_len;
    int sse_data_lines;
    char sse_event[64];
    size_t sse_event_len;
    int too_big;
    int done;
    CURLcode result;
    char errbuf[CURL_ERROR_SIZE];
    xfer_t *next;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) {
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- SSE ----------------------------------------------------------------------------------- */

static void sse_event_end(xfer_t *x) {
    if (x->sse_data_lines) {
        x->sse_event[x->sse_event_len] = 0;
        if (!x->sse_event[0] || strcmp(x->sse_event, "message") == 0)
            mcp_rd_end(x->s, &x->rd);
        else
            mcp_rd_reset(&x->rd);
    }
    x->sse_data_lines = 0;
    x->sse_event_len = 0;
}

/* A data line begins: lines of one event are joined with newlines. */
static int sse_data_line(xfer_t *x) {
    return x->sse_data_lines++ ? mcp_rd_feed(x->s, &x->rd, "\n", 1) : 0;
}

/* The line's field name is complete (at ':' or at the end of the line). */
static int sse_field_is(xfer_t *x, const char *name) {
    size_t n = x->sse_field_len;
    if (n && x->sse_field[n - 1] == '\r') n--;
    return n == strlen(name) && n < sizeof x->sse_field && memcmp(x->sse_field, name, n) == 0;
}

/* Returns -1 when the event's data passes the limit (the transfer is then cut off). */
static int sse_feed(xfer_t *x, const char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        char c = p[i];
        const char *nl;
        size_t take;
        switch (x->sse_st) {
        case SSE_FIELD:
            i++;
            if (c == '\n') { /* a line without ':' is a field with an empty value */
                if (sse_field_is(x, "")) {
                    sse_event_end(x);
                } else if (sse_field_is(x, "data")) {
                    if (sse_data_line(x) < 0) return -1;
                } else if (sse_field_is(x, "event")) {
                    x->sse_event_len = 0;
                }
                x->sse_field_len = 0;
            } else if (c == ':') {
                x->sse_st = sse_field_is(x, "data") ? SSE_DATA_SPACE : sse_field_is(x, "event") ? SSE_EVENT_SPACE : SSE_SKIP;
                if (x->sse_st == SSE_DATA_SPACE && sse_data_line(x) < 0) return -1;
                if (x->sse_st == SSE_EVENT_SPACE) x->sse_event_len = 0;
                x->sse_field_len = 0;
            } else if (x->sse_field_len < sizeof x->sse_field) {
                x->sse_field[x->sse_field_len++] = c;
            }
            break;
        case SSE_DATA_SPACE:
        case SSE_EVENT_SPACE:
            if (c == ' ') i++;
            x->sse_st = x->sse_st == SSE_DATA_SPACE ? SSE_DATA : SSE_EVENT;
            break;
        case SSE_DATA:
            nl = memchr(p + i, '\n', n - i);
            take = nl ? (size_t)(nl - p) - i : n - i;
            if (take && mcp_rd_feed(x->s, &x->rd, p + i, take) < 0) return -1;
            i += take;
            if (nl) {
                i++;
                x->sse_st = SSE_FIELD;
            }
            break;
        case SSE_EVENT:
            i++;
            if (c == '\n') {
                if (x->sse_event_len && x->sse_event[x->sse_event_len - 1] == '\r') x->sse_event_len--;
                x->sse_st = SSE_FIELD;
            } else if (x->sse_event_len < sizeof x->sse_event - 1) {
                x->sse_event[x->sse_event_len++] = c;
            }
            break;
        default: /* a comment, id, retry or unknown field: skipped */
            nl = memchr(p + i, '\n', n - i);
            if (!nl) return 0;
            i = (size_t)(nl - p) + 1;
            x->sse_st = SSE_FIELD;
            break;
        }
    }
    return 0;
}

/* ---- callbacks ------------------------------------------------------------------------------ */

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
    xfer_t *x = ud;
    size_t n = size * nmemb;
    char line[1024];
    size_t l = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, p, l);
    line[l] = 0;
    while (l && (line[l - 1] == '\r' || line[l - 1] == '\n' || line[l - 1] == ' ')) line[--l] = 0;
    char *colon = strchr(line, ':');
    if (!colon) return n;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    if (strcasecmp(line, "mcp-session-id") == 0 && *v) {
        int ok = 1;
        for (const char *c = v; *c; c++)
            if (*c < 0x21 || *c > 0x7e) ok = 0;
        if (ok && (!x->s->http->session_id || strcmp(x->s->http->session_id, v) != 0)) {
            free(x->s->http->session_id);
            x->s->http->session_id = strdup(v);
        }
    } else if (strcasecmp(line, "content-type") == 0) {
        for (char *c = v; *c; c++) *c = (char)tolower((unsigned char)*c);
        x->sse = strstr(v, "text/event-stream") != NULL;
    }
    return n;
}

/* The body streams through: a JSON body or the events of a stream to the reader (which holds a
 * message only up to its bound), an error status's body up to ERROR_BODY_MAX, and what the
 * server says to an answer of ours nowhere. */
static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
    xfer_t *x = ud;
    size_t n = size * nmemb;
    if (x->side) return n;
    if (!x->sse_checked) {
        /* An error status carries an error body, never a stream of protocol messages. */
        long status = 0;
        curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &status);
        if (status >= 300) x->sse = 0, x->error_body = 1;
        x->sse_checked = 1;
    }
    if (x->error_body) {
        size_t take = x->resp.len >= ERROR_BODY_MAX ? 0 : ERROR_BODY_MAX - x->resp.len;
        if (take > n) take = n;
        if (take && mcp_buf_add(&x->resp, p, take) < 0) x->too_big = 1;
    } else if (x->sse) {
        if (sse_feed(x, p, n) < 0) x->too_big = 1;
    } else if (mcp_rd_feed(x->s, &x->rd, p, n) < 0) {
        x->too_big = 1;
    }
    return x->too_big ? 0 : n;
}

/* ---- transfers ------------------------------------------------------------------------------ */

static void xfer_free(xfer_t *x) {
    if (!x) return;
    if (x->e) curl_easy_cleanup(x->e);
    curl_slist_free_all(x->hdrs);
    free(x->body);
    mcp_buf_free(&x->resp);
    mcp_rd_free(&x->rd);
    free(x);
}

static xfer_t *xfer_new(mcp_server_t *s, const char *method, const char *text, size_t n, int64_t deadline) {
    mcp_http_t *h = s->http;
    xfer_t *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->s = s;
    mcp_rd_reset(&x->rd);
    x->e = curl_easy_init();
    if (!x->e) {
        free(x);
        return NULL;
    }
    struct curl_slist *hl = NULL;
    if (text) {
        x->body = malloc(n + 1);
        if (!x->body) {
            xfer_free(x);
            return NULL;
        }
        memcpy(x->body, text, n);
        x->body[n] = 0;
        hl = curl_slist_append(hl, "Content-Type: application/json");
        hl = curl_slist_append(hl, "Accept: application/json, text/event-stream");
        hl = curl_slist_append(hl, "Expect:"); /* no 100-continue round trip on big POSTs */
    }
    char line[600];
    if (h->session_id) {
        snprintf(line, sizeof line, "Mcp-Session-Id: %s", h->session_id);
        hl = curl_slist_append(hl, line);
    }
    if (s->version[0]) {
        snprintf(line, sizeof line, "MCP-Protocol-Version: %s", s->version);
        hl = curl_slist_append(hl, line);
    }
    for (struct curl_slist *u = h->user_headers; u; u = u->next) hl = curl_slist_append(hl, u->data);
    x->hdrs = hl;
    CURL *e = x->e;
    curl_easy_setopt(e, CURLOPT_URL, h->url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    int64_t left = deadline - mcp_now_ms();
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(left < CONNECT_TIMEOUT_MS ? (left > 1 ? left : 1) : CONNECT_TIMEOUT_MS));
    if (text) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
    } else {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    }
    return x;
}

/* Completed transfers: the main one is marked done; finished side POSTs are freed. */
static void collect(mcp_server_t *s, xfer_t *main_x) {
    mcp_http_t *h = s->http;
    CURLMsg *m;
    int q;
    while ((m = curl_multi_info_read(h->multi, &q))) {
        if (m->msg != CURLMSG_DONE) continue;
        if (main_x && m->easy_handle == main_x->e) {
            main_x->done = 1;
            main_x->result = m->data.result;
            continue;
        }
        for (xfer_t **pp = &h->side; *pp; pp = &(*pp)->next)
            if ((*pp)->e == m->easy_handle) {
                xfer_t *x = *pp;
                long status = 0;
                curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &status);
                if (m->data.result != CURLE_OK || status >= 300)
                    mcp_warn(s, "answering its request failed: %s",
                             m->data.result != CURLE_OK ? curl_easy_strerror(m->data.result) : "HTTP error");
                *pp = x->next;
                h->nside--;
                curl_multi_remove_handle(h->multi, x->e);
                xfer_free(x);
                break;
            }
    }
}

/* Starts queued answers while fewer than MAX_SIDE are in flight. */
static void start_side(mcp_server_t *s, int64_t deadline) {
    mcp_http_t *h = s->http;
    size_t i = 0;
    for (; i < h->nqueue && h->nside < MAX_SIDE; i++) {
        xfer_t *x = xfer_new(s, "POST", h->queue[i], strlen(h->queue[i]), deadline);
        free(h->queue[i]);
        if (!x) continue;
        x->side = 1;
        curl_easy_setopt(x->e, CURLOPT_TIMEOUT_MS, (long)CLOSE_TIMEOUT_MS);
        x->next = h->side;
        h->side = x;
        h->nside++;
        curl_multi_add_handle(h->multi, x->e);
    }
    if (i) {
        memmove(h->queue, h->queue + i, (h->nqueue - i) * sizeof *h->queue);
        h->nqueue -= i;
    }
}

static void warn_dropped(mcp_server_t *s) {
    mcp_http_t *h = s->http;
    if (h->dropped > 1)
        mcp_warn(s, "%zu of its requests went unanswered: it sent more than %d at once (seer answers %d at a time)",
                 h->dropped, MAX_QUEUED + MAX_SIDE, MAX_SIDE);
    h->dropped = 0;
}

void mcp_http_queue(mcp_server_t *s, char *text) {
    mcp_http_t *h = s->http;
    if (h->nqueue >= MAX_QUEUED) {
        free(text);
        if (h->dropped++ == 0)
            mcp_warn(s, "it sent more than %d requests at once: answers beyond that are not sent (seer answers %d "
                        "at a time and queues %d)",
                     MAX_QUEUED + MAX_SIDE, MAX_SIDE, MAX_QUEUED);
        return;
    }
    char **q = realloc(h->queue, (h->nqueue + 1) * sizeof *q);
    if (!q) {
        free(text);
        return;
    }
    h->queue = q;
    h->queue[h->nqueue++] = text;
}

/* Runs x until it completes, the request's response has been seen (then a short while more for
 * the stream to end cleanly, which keeps the connection reusable), the deadline or Ctrl-C. */
static int run(mcp_server_t *s, xfer_t *x, int is_request, int64_t deadline) {
    mcp_http_t *h = s->http;
    curl_multi_add_handle(h->multi, x->e);
    int rc = 0;
    int64_t linger = 0;
    for (;;) {
        int running = 0;
        CURLMcode mc = curl_multi_perform(h->multi, &running);
        collect(s, x);
        if (h->nqueue) start_side(s, deadline);
        if (mc != CURLM_OK) {
            rc = mcp_set_dead(s, "curl: %s", curl_multi_strerror(mc));
            break;
        }
        if (x->done) break;
        int64_t now = mcp_now_ms();
        if (is_request && s->wait_msg) {
            if (!linger) linger = now + AFTER_RESPONSE_MS;
            if (now >= linger) break;
        } else {
            if (mcp_interrupted(s)) {
                rc = SEER_EINTR;
                break;
            }
            if (now >= deadline) {
                rc = SEER_MCP_ETIMEOUT;
                break;
            }
        }
        int64_t until = linger ? linger : deadline;
        int slice = until - now < SLICE_MS ? (int)(until - now) : SLICE_MS;
        curl_multi_poll(h->multi, NULL, 0, slice > 0 ? slice : 1, NULL);
    }
    curl_multi_remove_handle(h->multi, x->e);
    /* Side POSTs (answers to the server) get a moment to finish; answers still queued then
     * wait for the next request. */
    int64_t side_deadline = mcp_now_ms() + CLOSE_TIMEOUT_MS;
    while ((h->side || h->nqueue) && mcp_now_ms() < side_deadline) {
        if (h->nqueue) start_side(s, side_deadline);
        int running = 0;
        curl_multi_perform(h->multi, &running);
        collect(s, NULL);
        if (h->side) curl_multi_poll(h->multi, NULL, 0, 10, NULL);
    }
    warn_dropped(s);
    return rc;
}

/* A body that is not a JSON-RPC message, for an error: its first line or so. */
static void body_excerpt(const xfer_t *x, char *out, size_t size) {
    size_t o = 0;
    for (size_t i = 0; i < x->resp.len && o + 4 < size && i < 300; i++) {
        unsigned char ch = (unsigned char)x->resp.data[i];
        out[o++] = ch == '\n' || ch == '\r' ? ' ' : (ch >= 0x20 && ch < 0x7f ? (char)ch : '?');
    }
    if (x->resp.len > 300 && o + 4 < size) memcpy(out + o, "...", 3), o += 3;
    out[o] = 0;
}

int mcp_http_send(mcp_server_t *s, const char *text, size_t n, int is_request, int64_t deadline, seer_err_t *err) {
    if (s->dead_msg) return SEER_MCP_EDEAD;
    xfer_t *x = xfer_new(s, "POST", text, n, deadline);
    if (!x) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int rc = run(s, x, is_request, deadline);
    if (rc < 0) {
        xfer_free(x);
        return rc;
    }
    long status = 0;
    curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &status);
    if (is_request && s->wait_msg) { /* answered, whatever happened to the rest of the stream */
        xfer_free(x);
        return 0;
    }
    if (x->too_big) {
        rc = seer_err_set(err, SEER_EIO, MCP_TOO_LONG_FMT, s->opts->max_message_bytes);
    } else if (x->result != CURLE_OK) {
        rc = seer_err_set(err, SEER_EIO, "POST %s: %s", s->http->url, x->errbuf[0] ? x->errbuf : curl_easy_strerror(x->result));
    } else if (status >= 400) {
        /* The body may be a JSON-RPC error for our request (it then becomes the answer). */
        if (is_request && x->resp.len) mcp_dispatch_text(s, x->resp.data, x->resp.len);
        if (is_request && s->wait_msg) {
            rc = 0;
        } else {
            char ex[400];
            body_excerpt(x, ex, sizeof ex);
            if (status == 404 && s->http->session_id) {
                /* The session is gone (the server restarted or expired it): the caller starts a
                 * new one with initialize, as the transport spec says, and sends again. */
                rc = seer_err_set(err, SEER_MCP_ESESSION, "HTTP 404 from %s: the server no longer knows the session (it may have restarted)%s%s",
                                  s->http->url, ex[0] ? ": " : "", ex);
                free(s->http->session_id);
                s->http->session_id = NULL;
            }
            else
                rc = seer_err_set(err, SEER_EIO, "HTTP %ld from %s%s%s", status, s->http->url, ex[0] ? ": " : "", ex);
        }
    } else if (!x->sse) {
        mcp_rd_end(s, &x->rd);
    }
    if (rc == 0 && is_request && !s->wait_msg)
        rc = seer_err_set(err, SEER_EIO, "the server answered HTTP %ld %s without a response to the request", status,
                          x->sse ? "(an event stream that ended)" : "(no JSON-RPC response in the body)");
    xfer_free(x);
    return rc;
}

int mcp_http_start(mcp_server_t *s, const cJSON *spec, seer_err_t *err) {
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return seer_err_set(err, SEER_EIO, "mcp server '%s': curl_global_init: %s", s->name, curl_easy_strerror(curl_init_rc));
    mcp_http_t *h = calloc(1, sizeof *h);
    if (!h) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    s->http = h;
    h->url = strdup(cJSON_GetObjectItemCaseSensitive(spec, "url")->valuestring);
    h->multi = curl_multi_init();
    if (!h->url || !h->multi) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(spec, "headers");
    if (cJSON_IsObject(hd))
        for (const cJSON *e = hd->child; e; e = e->next) {
            char *line = malloc(strlen(e->string) + strlen(e->valuestring) + 3);
            if (!line) return seer_err_set(err, SEER_ENOMEM, "out of memory");
            sprintf(line, "%s: %s", e->string, e->valuestring);
            struct curl_slist *l = curl_slist_append(h->user_headers, line);
            free(line);
            if (!l) return seer_err_set(err, SEER_ENOMEM, "out of memory");
            h->user_headers = l;
        }
    return 0;
}

void mcp_http_close(mcp_server_t *s) {
    mcp_http_t *h = s->http;
    if (!h) return;
    /* Ending the session frees it on the server now rather than at its idle timeout. A server
     * may answer 405 (it does not let clients end sessions): nothing to do then. */
    s->uninterruptible = 1;
    if (h->session_id && h->multi && !s->dead_msg) {
        xfer_t *x = xfer_new(s, "DELETE", NULL, 0, mcp_now_ms() + CLOSE_TIMEOUT_MS);
        if (x) {
            run(s, x, 0, mcp_now_ms() + CLOSE_TIMEOUT_MS);
            xfer_free(x);
        }
    }
    while (h->side) {
        xfer_t *x = h->side;
        h->side = x->next;
        curl_multi_remove_handle(h->multi, x->e);
        xfer_free(x);
    }
    h->nside = 0;
    for (size_t i = 0; i < h->nqueue; i++) free(h->queue[i]);
    free(h->queue);
    if (h->multi) curl_multi_cleanup(h->multi);
    curl_slist_free_all(h->user_headers);
    free(h->session_id);
    free(h->url);
    free(h);
    s->http = NULL;
}
