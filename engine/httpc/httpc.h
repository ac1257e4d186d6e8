/* seer.http's transport: one HTTP(S) request with libcurl (loaded with dlopen, hub/curl_dl.h),
 * bounded in time and size, interruptible by Ctrl-C or a kernel interrupt, with an optional
 * callback that receives the body as it arrives (server-sent events, long downloads). Retries,
 * JSON and the Lua API are in lua/seer/http.lua (docs/http.md). */
#ifndef SEER_HTTPC_H
#define SEER_HTTPC_H

#include <stddef.h>

#include "seer.h"

/* Called with each piece of the body as it arrives; a non-zero return stops the transfer. */
typedef int (*seer_httpc_chunk_fn)(void *ud, const char *data, size_t n);

typedef struct seer_httpc_req {
    const char *method;        /* "GET", "POST", ... (NULL: GET, or POST with a body) */
    const char *url;           /* http:// or https:// only */
    const char *const *headers; /* "Name: value" strings, NULL-terminated (may be NULL) */
    const char *body;          /* request body (may be NULL) */
    size_t body_len;
    long timeout_ms;           /* the whole request; 0: none */
    long connect_timeout_ms;   /* 0: 30 s */
    size_t max_bytes;          /* response body cap; 0: 64 MiB. Past it the request fails */
    size_t max_header_bytes;   /* response header cap; 0: 256 KiB */
    int follow_redirects;      /* GET/HEAD only, at most 5 */
    const char *proxy;         /* a proxy URL, or NULL (curl then honours https_proxy etc.) */
    /* TLS for https:// (PEM text, not paths; NULL: curl's defaults, the system CA store): the CA
     * that must have signed the server's certificate (replaces the system store), and a client
     * certificate with its key (mutual TLS, e.g. a Kubernetes API server). */
    const char *ca_pem;
    size_t ca_pem_len;
    const char *cert_pem;
    size_t cert_pem_len;
    const char *key_pem;
    size_t key_pem_len;
    seer_httpc_chunk_fn on_chunk; /* NULL: the body is collected into resp->body */
    void *ud;
} seer_httpc_req_t;

typedef struct seer_httpc_resp {
    long status;               /* 0 when no response arrived */
    char *headers;             /* the raw header block of the last response (malloc'd) */
    size_t headers_len;
    char *body;                /* collected body (malloc'd; NULL with on_chunk) */
    size_t body_len;
    double seconds;            /* total time */
    int transient;             /* on error: 1 when a retry may succeed (connect, timeout, reset) */
} seer_httpc_resp_t;

/* Performs the request. 0 with resp filled (any HTTP status), or a negative SEER_E* with a
 * message naming the method, the URL without its query and the cause: SEER_EIO (transport),
 * SEER_EINVAL (bad request), SEER_EINTR (interrupted), SEER_EUNSUPPORTED (no libcurl). */
int seer_httpc_request(const seer_httpc_req_t *req, seer_httpc_resp_t *resp, seer_err_t *err);
void seer_httpc_resp_free(seer_httpc_resp_t *resp);

#endif
