/* One bounded, interruptible HTTP request over libcurl (see httpc.h). Everything the remote
 * side sends is capped (headers, body) so a hostile or broken server cannot grow this process
 * without bound; a transfer that stalls is ended by its timeout; Ctrl-C ends it at once. */
#include "httpc.h"

#include <stdlib.h>
#include <string.h>

#include "host/host.h"
#include "hub/curl_dl.h"

#define DEFAULT_MAX_BODY ((size_t)64 << 20)
#define DEFAULT_MAX_HEADERS ((size_t)256 << 10)

typedef struct {
    const seer_httpc_req_t *req;
    char *hdr;
    size_t hdr_len, hdr_cap;
    char *body;
    size_t body_len, body_cap;
    size_t max_body, max_hdr, seen;
    int too_big, stopped, interrupted;
} xfer_t;

static int grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    char *p = realloc(*buf, c);
    if (!p) return -1;
    *buf = p;
    *cap = c;
    return 0;
}

static size_t on_header(char *data, size_t size, size_t n, void *ud) {
    xfer_t *x = ud;
    size_t len = size * n;
    /* A redirect or a 100-continue starts a new header block: keep only the last one. */
    if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) x->hdr_len = 0;
    if (x->hdr_len + len > x->max_hdr) {
        x->too_big = 2;
        return 0;
    }
    if (grow(&x->hdr, &x->hdr_cap, x->hdr_len + len + 1) < 0) return 0;
    memcpy(x->hdr + x->hdr_len, data, len);
    x->hdr_len += len;
    x->hdr[x->hdr_len] = 0;
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
    xfer_t *x = ud;
    size_t len = size * n;
    x->seen += len;
    if (x->seen > x->max_body) {
        x->too_big = 1;
        return 0;
    }
    if (x->req->on_chunk) {
        if (x->req->on_chunk(x->req->ud, data, len) != 0) {
            x->stopped = 1;
            return 0;
        }
        return len;
    }
    if (grow(&x->body, &x->body_cap, x->body_len + len + 1) < 0) return 0;
    memcpy(x->body + x->body_len, data, len);
    x->body_len += len;
    x->body[x->body_len] = 0;
    return len;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    (void)dt, (void)dn, (void)ut, (void)un;
    xfer_t *x = ud;
    if (seer_host_interrupted()) {
        x->interrupted = 1;
        return 1;
    }
    return 0;
}

/* The URL as errors show it: without its query string and user info (either may hold a key). */
static void safe_url(const char *url, char *out, size_t cap) {
    const char *scheme_end = strstr(url, "://");
    const char *host = scheme_end ? scheme_end + 3 : url;
    const char *at = NULL;
    for (const char *p = host; *p && *p != '/' && *p != '?' && *p != '#'; p++)
        if (*p == '@') at = p;
    size_t n = 0;
    if (scheme_end) {
        size_t sl = (size_t)(host - url);
        n = sl < cap - 1 ? sl : cap - 1;
        memcpy(out, url, n);
    }
    const char *rest = at ? at + 1 : host;
    for (const char *p = rest; *p && *p != '?' && *p != '#' && n + 1 < cap; p++) out[n++] = *p;
    out[n] = 0;
}

int seer_httpc_request(const seer_httpc_req_t *req, seer_httpc_resp_t *resp, seer_err_t *err) {
    memset(resp, 0, sizeof *resp);
    if (!req || !req->url) return seer_err_set(err, SEER_EINVAL, "seer.http: a request needs a url");
    char shown[512];
    safe_url(req->url, shown, sizeof shown);
    if (strncmp(req->url, "http://", 7) != 0 && strncmp(req->url, "https://", 8) != 0)
        return seer_err_set(err, SEER_EINVAL, "seer.http: %s is not an http:// or https:// URL", shown);
    const char *method = req->method ? req->method : (req->body ? "POST" : "GET");
    for (const char *p = method; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || *p == '-'))
            return seer_err_set(err, SEER_EINVAL, "seer.http: method %s is not an HTTP method (use GET, POST, PUT, ...)", method);
    CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) return seer_err_set(err, SEER_EUNSUPPORTED, "seer.http: %s", curl_easy_strerror(rc));
    CURL *e = curl_easy_init();
    if (!e) return seer_err_set(err, SEER_ENOMEM, "seer.http: curl_easy_init failed");
    xfer_t x = {.req = req,
                .max_body = req->max_bytes ? req->max_bytes : DEFAULT_MAX_BODY,
                .max_hdr = req->max_header_bytes ? req->max_header_bytes : DEFAULT_MAX_HEADERS};
    struct curl_slist *hl = NULL;
    int status = SEER_OK;
    for (const char *const *h = req->headers; h && *h; h++) {
        if (strchr(*h, '\r') || strchr(*h, '\n')) {
            status = seer_err_set(err, SEER_EINVAL, "seer.http: a header holds a line break (header injection refused)");
            goto out;
        }
        struct curl_slist *nl = curl_slist_append(hl, *h);
        if (!nl) {
            status = seer_err_set(err, SEER_ENOMEM, "seer.http: out of memory for headers");
            goto out;
        }
        hl = nl;
    }
    /* Expect: 100-continue would stall a POST for a second against servers that ignore it. */
    hl = curl_slist_append(hl, "Expect:");
    curl_easy_setopt(e, CURLOPT_URL, req->url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "HEAD") == 0) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    if (req->body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, &x);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(e, CURLOPT_USERAGENT, "seer.http");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, req->connect_timeout_ms > 0 ? req->connect_timeout_ms : 30000L);
    if (req->timeout_ms > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, req->timeout_ms);
    int follow = req->follow_redirects && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    if (req->proxy) curl_easy_setopt(e, CURLOPT_PROXY, req->proxy);
    struct curl_blob ca = {(void *)req->ca_pem, req->ca_pem_len, CURL_BLOB_COPY};
    struct curl_blob cert = {(void *)req->cert_pem, req->cert_pem_len, CURL_BLOB_COPY};
    struct curl_blob key = {(void *)req->key_pem, req->key_pem_len, CURL_BLOB_COPY};
    if (req->ca_pem && curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &ca) != CURLE_OK) {
        status = seer_err_set(err, SEER_EUNSUPPORTED, "seer.http: this libcurl cannot take a CA certificate from memory (needs curl 7.77 or later)");
        goto out;
    }
    if (req->ca_pem) curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
    if (req->cert_pem) {
        curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
        if (curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert) != CURLE_OK) {
            status = seer_err_set(err, SEER_EUNSUPPORTED, "seer.http: this libcurl cannot take a client certificate from memory (needs curl 7.71 or later)");
            goto out;
        }
    }
    if (req->key_pem) {
        curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
        curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key);
    }
    rc = curl_easy_perform(e);
    double secs = 0;
    curl_easy_getinfo(e, CURLINFO_TOTAL_TIME, &secs);
    resp->seconds = secs;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &resp->status);
    if (x.interrupted) {
        status = seer_err_set(err, SEER_EINTR, "interrupted");
    } else if (x.too_big == 1) {
        status = seer_err_set(err, SEER_EIO, "seer.http: %s %s: the response body is larger than max_bytes (%zu); raise max_bytes or stream it",
                              method, shown, x.max_body);
    } else if (x.too_big == 2) {
        status = seer_err_set(err, SEER_EIO, "seer.http: %s %s: the response headers are larger than %zu bytes", method, shown, x.max_hdr);
    } else if (x.stopped) {
        status = SEER_OK; /* the chunk callback asked to stop: what arrived is the answer */
    } else if (rc != CURLE_OK) {
        resp->transient = rc == CURLE_COULDNT_CONNECT || rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_RECV_ERROR ||
                          rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE ||
                          rc == CURLE_COULDNT_RESOLVE_HOST;
        const char *hint = rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT
                               ? " (check the URL; inside a sandbox the network is off unless SandboxConfig.network allows it)"
                           : rc == CURLE_OPERATION_TIMEDOUT ? " (raise timeout if the server is slow)"
                                                            : "";
        if (rc == CURLE_OPERATION_TIMEDOUT)
            status = seer_err_set(err, SEER_EIO, "seer.http: %s %s timed out after %.1f s%s", method, shown, secs, hint);
        else
            status = seer_err_set(err, SEER_EIO, "seer.http: %s %s failed: %s%s", method, shown, curl_easy_strerror(rc), hint);
    }
    if (status == SEER_OK) {
        resp->headers = x.hdr;
        resp->headers_len = x.hdr_len;
        resp->body = x.body;
        resp->body_len = x.body_len;
        x.hdr = x.body = NULL;
    }
out:
    free(x.hdr);
    free(x.body);
    curl_slist_free_all(hl);
    curl_easy_cleanup(e);
    return status;
}

void seer_httpc_resp_free(seer_httpc_resp_t *resp) {
    if (!resp) return;
    free(resp->headers);
    free(resp->body);
    memset(resp, 0, sizeof *resp);
}
