/* The MCP client's protocol side: configuration checks, JSON-RPC requests with deadlines and
 * cancellation, the dispatch of whatever a server sends, the initialize handshake, paged
 * tools/list, and the table of tool names that stay unique across servers. The transports
 * (client_stdio.c, client_http.c) only move text. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_private.h"

#define DEFAULT_TIMEOUT_MS 60000
#define DEFAULT_CONNECT_TIMEOUT_MS 30000
#define DEFAULT_MAX_MESSAGE (64u << 20)
#define CANCEL_TIMEOUT_MS 2000
#define SHUTDOWN_WAIT_MS 2000
#define MAX_TOOL_PAGES 1000
/* What one server's tool list may amount to (seer_mcp_opts_t.max_tools, max_tools_bytes): every
 * tool goes to the model in every request, so a real list is tens or hundreds of KB. A server
 * that sent endless pages grew the host by 2.2 GB in 15 s, and one 200 MB description went into
 * the transcript and every request body. */
#define DEFAULT_MAX_TOOLS 1000
#define DEFAULT_MAX_TOOLS_BYTES ((size_t)4 << 20)
#define QNAME_MAX 64
#define NONJSON_SHOWN 5

struct seer_mcp_client {
    seer_mcp_opts_t opts;
    mcp_server_t **servers;
    size_t n;
    seer_mcp_tool_t *tools;
    char **qnames;
    size_t ntools;
};

static const char *const supported_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};

/* ---- small helpers ------------------------------------------------------------------------ */

int64_t mcp_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int mcp_buf_add(mcp_buf_t *b, const void *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return SEER_ENOMEM;
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

void mcp_buf_free(mcp_buf_t *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

void mcp_warn(mcp_server_t *s, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (s->opts->cb.warning)
        s->opts->cb.warning(s->opts->cb.ud, s->name, text);
    else
        fprintf(stderr, "seer: mcp server '%s': %s\n", s->name, text);
}

int mcp_set_dead(mcp_server_t *s, const char *fmt, ...) {
    if (s->dead_msg) return SEER_MCP_EDEAD;
    char text[SEER_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    s->dead_msg = strdup(text);
    if (!s->dead_msg) s->dead_msg = strdup("out of memory");
    return SEER_MCP_EDEAD;
}

int mcp_interrupted(mcp_server_t *s) {
    return !s->uninterruptible && s->opts->cb.interrupted && s->opts->cb.interrupted(s->opts->cb.ud);
}

/* A short, printable excerpt of what a server sent, for warnings. */
static void excerpt(char *out, size_t size, const char *p, size_t n) {
    size_t o = 0, max = size > 4 ? size - 4 : 0;
    for (size_t i = 0; i < n && o < max; i++) {
        unsigned char ch = (unsigned char)p[i];
        out[o++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (o < n && size > 4) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    if (size) out[o < size ? o : size - 1] = 0;
}

static int ms_left(int64_t deadline) {
    int64_t left = deadline - mcp_now_ms();
    return left < 1 ? 1 : left > INT32_MAX ? INT32_MAX : (int)left;
}

/* ---- sending ----------------------------------------------------------------------------- */

static int transport_send(mcp_server_t *s, const char *text, int is_request, int64_t deadline, seer_err_t *err) {
    if (s->kind == MCP_STDIO) return mcp_stdio_send(s, text, strlen(text), deadline, err);
    return mcp_http_send(s, text, strlen(text), is_request, deadline, err);
}

static int send_notification(mcp_server_t *s, const char *method, cJSON *params /* taken */, int64_t deadline,
                             seer_err_t *err) {
    cJSON *m = cJSON_CreateObject();
    if (!m) {
        cJSON_Delete(params);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }
    cJSON_AddStringToObject(m, "jsonrpc", "2.0");
    cJSON_AddStringToObject(m, "method", method);
    if (params) cJSON_AddItemToObject(m, "params", params);
    char *text = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    if (!text) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    int rc = transport_send(s, text, 0, deadline, err);
    free(text);
    return rc;
}

/* Answers a server's request: ping is answered, everything else is a method we do not have
 * (seer declares no client capabilities, so a well-behaved server asks for nothing else). */
static void answer_request(mcp_server_t *s, const cJSON *id, const char *method) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return;
    cJSON_AddStringToObject(m, "jsonrpc", "2.0");
    cJSON_AddItemToObject(m, "id", cJSON_Duplicate(id, 1));
    if (strcmp(method, "ping") == 0) {
        cJSON_AddItemToObject(m, "result", cJSON_CreateObject());
    } else {
        cJSON *e = cJSON_AddObjectToObject(m, "error");
        cJSON_AddNumberToObject(e, "code", -32601);
        char msg[300];
        snprintf(msg, sizeof msg, "Method not found: %.200s (seer's MCP client offers no such capability)", method);
        cJSON_AddStringToObject(e, "message", msg);
    }
    char *text = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    if (!text) return;
    if (s->kind == MCP_HTTP)
        mcp_http_queue(s, text);
    else
        mcp_stdio_queue(s, text);
}

/* ---- receiving ----------------------------------------------------------------------------- */

static void on_notification(mcp_server_t *s, const char *method, const cJSON *params) {
    if (strcmp(method, "notifications/progress") == 0 && s->wait_call && s->wait_call->progress) {
        const cJSON *tok = cJSON_GetObjectItemCaseSensitive(params, "progressToken");
        if (cJSON_IsNumber(tok) && (int64_t)tok->valuedouble == s->wait_id) {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(params, "progress");
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(params, "total");
            const cJSON *msg = cJSON_GetObjectItemCaseSensitive(params, "message");
            s->wait_call->progress(s->wait_call->progress_ud, s->name, cJSON_IsNumber(p) ? p->valuedouble : NAN,
                                   cJSON_IsNumber(t) ? t->valuedouble : NAN, cJSON_IsString(msg) ? msg->valuestring : NULL);
            return;
        }
    }
    if (strcmp(method, "notifications/tools/list_changed") == 0) s->tools_stale = 1;
    if (strcmp(method, "notifications/cancelled") == 0) return; /* we never run server requests for long */
    if (s->opts->cb.notification) s->opts->cb.notification(s->opts->cb.ud, s->name, method, params);
}

/* Returns 1 when it kept m (the awaited response), 0 when the caller frees it. */
static int dispatch_msg(mcp_server_t *s, cJSON *m) {
    if (!cJSON_IsObject(m)) {
        mcp_warn(s, "ignoring a JSON value that is not a JSON-RPC message");
        return 0;
    }
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(m, "method");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "id");
    int has_id = cJSON_IsNumber(id) || cJSON_IsString(id);
    if (cJSON_IsString(method)) {
        if (has_id)
            answer_request(s, id, method->valuestring);
        else
            on_notification(s, method->valuestring, cJSON_GetObjectItemCaseSensitive(m, "params"));
        return 0;
    }
    if (has_id && (cJSON_GetObjectItemCaseSensitive(m, "result") || cJSON_GetObjectItemCaseSensitive(m, "error"))) {
        /* Our ids are numbers; a few servers echo them back as strings. */
        int64_t v = -1;
        if (cJSON_IsNumber(id)) {
            v = (int64_t)id->valuedouble;
        } else {
            char *end;
            long long x = strtoll(id->valuestring, &end, 10);
            if (*id->valuestring && !*end) v = x;
        }
        if (v == s->wait_id && !s->wait_msg) {
            s->wait_msg = m;
            return 1;
        }
        /* A response to a request we gave up on (timeout, Ctrl-C) arrives late: expected. */
        if (!(v > 0 && v < s->next_id)) mcp_warn(s, "ignoring a response to a request it was never sent");
        return 0;
    }
    mcp_warn(s, "ignoring a JSON object that is not a JSON-RPC message");
    return 0;
}

void mcp_dispatch_cut(mcp_server_t *s, cJSON *m, const mcp_reader_t *r) {
    if (r->has_method) {
        mcp_warn(s, "ignoring a %s of %zu bytes: only %zu bytes of a message are read while a tool call is awaited "
                    "(max_result_bytes)",
                 r->id_state == 2 ? "request" : "notification", r->total, s->keep);
        cJSON_Delete(m);
        return;
    }
    /* The id as the whole message has it (it may have come after the cut). */
    cJSON_DeleteItemFromObjectCaseSensitive(m, "id");
    cJSON *id = r->id_state == 2 ? cJSON_ParseWithLength(r->id, r->id_len) : NULL;
    if (id) cJSON_AddItemToObject(m, "id", id);
    if (r->has_result && !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(m, "result"))) {
        cJSON_DeleteItemFromObjectCaseSensitive(m, "result");
        cJSON_AddObjectToObject(m, "result");
    }
    if (r->has_error && !r->has_result && !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(m, "error"))) {
        cJSON_DeleteItemFromObjectCaseSensitive(m, "error");
        cJSON *e = cJSON_AddObjectToObject(m, "error");
        cJSON_AddNumberToObject(e, "code", -32603);
        cJSON_AddStringToObject(e, "message", "(the error was cut: it is longer than max_result_bytes)");
    }
    mcp_cut_t cut = {1, r->total, r->read_bytes, r->content_bytes, s->keep, r->structured_done, r->cut_in_block,
                     r->is_error};
    if (dispatch_msg(s, m))
        s->cut = cut; /* it is the awaited response */
    else
        cJSON_Delete(m);
}

void mcp_dispatch_refused(mcp_server_t *s, const mcp_reader_t *r) {
    cJSON *id = r->id_state == 2 ? cJSON_ParseWithLength(r->id, r->id_len) : NULL;
    if (r->has_method || !id || !(r->has_result || r->has_error)) {
        mcp_warn(s, "ignoring a message of %zu bytes: it has more than %d JSON values (the limit)", r->total,
                 MCP_READER_MAX_VALUES);
        cJSON_Delete(id);
        return;
    }
    /* A stand-in for the response ends the wait; rpc sees s->refused and fails the request. */
    cJSON *m = cJSON_CreateObject();
    if (!m) {
        cJSON_Delete(id);
        return;
    }
    cJSON_AddItemToObject(m, "id", id);
    cJSON_AddObjectToObject(m, "result");
    if (dispatch_msg(s, m))
        s->refused = 1;
    else
        cJSON_Delete(m);
}

void mcp_dispatch_text(mcp_server_t *s, const char *text, size_t n) {
    while (n && isspace((unsigned char)*text)) text++, n--;
    while (n && isspace((unsigned char)text[n - 1])) n--;
    if (!n) return;
    cJSON *m = cJSON_ParseWithLength(text, n);
    if (!m) {
        /* Servers that print banners or logs on stdout are common; the protocol survives them. */
        if (++s->nonjson_lines <= NONJSON_SHOWN) {
            char ex[120];
            excerpt(ex, sizeof ex, text, n);
            mcp_warn(s, "ignoring output that is not JSON: %s%s", ex,
                     s->nonjson_lines == NONJSON_SHOWN ? " (further such lines are not shown)" : "");
        }
        return;
    }
    if (cJSON_IsArray(m)) { /* a JSON-RPC batch (2025-03-26 allowed them) */
        cJSON *it = m->child;
        while (it) {
            cJSON *next = it->next;
            cJSON *one = cJSON_DetachItemViaPointer(m, it);
            if (!dispatch_msg(s, one)) cJSON_Delete(one);
            it = next;
        }
        cJSON_Delete(m);
        return;
    }
    if (!dispatch_msg(s, m)) cJSON_Delete(m);
}

/* ---- requests ----------------------------------------------------------------------------- */

static int reinitialize(mcp_server_t *s, int64_t deadline, seer_err_t *err);

/* One JSON-RPC request with a deadline. what names it in messages ("tools/call 'x'"). On a
 * timeout or Ctrl-C the server is told with notifications/cancelled (not for initialize, which
 * the protocol says must not be cancelled). *result gets the result object. */
static int rpc(mcp_server_t *s, const char *method, cJSON *params /* taken */, const char *what, int timeout_ms,
               const seer_mcp_call_opts_t *call, cJSON **result, seer_err_t *err) {
    *result = NULL;
    int64_t deadline = mcp_now_ms() + timeout_ms;
    if (s->dead_msg) {
        cJSON_Delete(params);
        return seer_err_set(err, SEER_MCP_EDEAD, "mcp server '%s': %s: %s", s->name, what, s->dead_msg);
    }
    int64_t id = s->next_id++;
    cJSON *m = cJSON_CreateObject();
    if (!m) {
        cJSON_Delete(params);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }
    cJSON_AddStringToObject(m, "jsonrpc", "2.0");
    cJSON_AddNumberToObject(m, "id", (double)id);
    cJSON_AddStringToObject(m, "method", method);
    if (params) cJSON_AddItemToObject(m, "params", params);
    char *text = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    if (!text) return seer_err_set(err, SEER_ENOMEM, "out of memory");

    seer_err_t terr;
    int rc;
    int is_call = strcmp(method, "tools/call") == 0;
    for (int attempt = 0;; attempt++) {
        s->wait_id = id;
        s->wait_msg = NULL;
        s->wait_call = call;
        s->keep = is_call && s->opts->max_result_bytes ? s->opts->max_result_bytes : s->opts->max_message_bytes;
        s->cut_ok = is_call && s->keep < s->opts->max_message_bytes;
        memset(&s->cut, 0, sizeof s->cut);
        s->refused = 0;
        seer_err_clear(&terr);
        if (s->kind == MCP_STDIO) {
            rc = mcp_stdio_send(s, text, strlen(text), deadline, &terr);
            if (rc == 0) rc = mcp_stdio_pump(s, deadline, &terr);
        } else {
            rc = mcp_http_send(s, text, strlen(text), 1, deadline, &terr);
        }
        if (rc != SEER_MCP_ESESSION || attempt > 0 || strcmp(method, "initialize") == 0) break;
        /* A new HTTP session, then the same request again, once. */
        s->wait_call = NULL;
        cJSON_Delete(s->wait_msg);
        s->wait_msg = NULL;
        seer_err_t ierr;
        if (reinitialize(s, deadline, &ierr) < 0) {
            snprintf(terr.msg, sizeof terr.msg, "the session expired and starting a new one failed: %.7000s", ierr.msg);
            rc = SEER_EIO;
            break;
        }
    }
    if (rc == SEER_MCP_ESESSION) rc = SEER_EIO; /* a new session was refused too: an I/O error to callers */
    free(text);
    s->wait_call = NULL;
    cJSON *resp = s->wait_msg;
    s->wait_msg = NULL;
    s->wait_id = 0;
    s->keep = s->opts->max_message_bytes;
    s->cut_ok = 0;

    if (rc == SEER_MCP_ETIMEOUT || rc == SEER_EINTR) {
        cJSON_Delete(resp);
        const char *why = rc == SEER_EINTR ? "interrupted" : "timed out";
        if (strcmp(method, "initialize") != 0 && !s->dead_msg) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "requestId", (double)id);
            cJSON_AddStringToObject(p, "reason", why);
            seer_err_t cerr;
            s->uninterruptible = 1;
            send_notification(s, "notifications/cancelled", p, mcp_now_ms() + CANCEL_TIMEOUT_MS, &cerr);
            s->uninterruptible = 0;
        }
        if (rc == SEER_EINTR) return seer_err_set(err, SEER_EINTR, "mcp server '%s': %s: interrupted", s->name, what);
        return seer_err_set(err, SEER_MCP_ETIMEOUT, "mcp server '%s': %s timed out after %.3g s (the request was cancelled)",
                            s->name, what, (double)timeout_ms / 1000.0);
    }
    if (rc == SEER_MCP_EDEAD) {
        cJSON_Delete(resp);
        return seer_err_set(err, rc, "mcp server '%s': %s: %s", s->name, what, s->dead_msg ? s->dead_msg : "gone");
    }
    if (rc < 0) {
        cJSON_Delete(resp);
        return seer_err_set(err, rc, "mcp server '%s': %s: %s", s->name, what, terr.msg);
    }
    if (!resp) return seer_err_set(err, SEER_EIO, "mcp server '%s': %s: no response", s->name, what);
    if (s->refused) {
        s->refused = 0;
        cJSON_Delete(resp);
        return seer_err_set(err, SEER_EPARSE,
                            "mcp server '%s': %s: the response has more than %d JSON values (the limit): it was not read",
                            s->name, what, MCP_READER_MAX_VALUES);
    }

    const cJSON *e = cJSON_GetObjectItemCaseSensitive(resp, "error");
    if (e) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(e, "data");
        char extra[600] = "";
        if (cJSON_IsString(data)) snprintf(extra, sizeof extra, "; %.500s", data->valuestring);
        rc = seer_err_set(err, SEER_MCP_ERPC, "mcp server '%s': %s failed: %s (JSON-RPC error %d)%s", s->name, what,
                          cJSON_IsString(msg) ? msg->valuestring : "(no message)",
                          cJSON_IsNumber(code) ? (int)code->valuedouble : 0, extra);
        cJSON_Delete(resp);
        return rc;
    }
    cJSON *r = cJSON_DetachItemFromObjectCaseSensitive(resp, "result");
    cJSON_Delete(resp);
    if (!cJSON_IsObject(r)) {
        cJSON_Delete(r);
        return seer_err_set(err, SEER_EPARSE, "mcp server '%s': %s: the result is not a JSON object", s->name, what);
    }
    *result = r;
    return 0;
}

/* ---- configuration ------------------------------------------------------------------------- */

static int check_fields(const char *server, const cJSON *spec, const char *kind, const char *const *valid,
                        seer_err_t *err) {
    for (const cJSON *f = spec->child; f; f = f->next) {
        int ok = 0;
        for (const char *const *v = valid; *v; v++)
            if (strcmp(f->string, *v) == 0) ok = 1;
        if (!ok) {
            char list[200] = "";
            for (const char *const *v = valid; *v; v++) {
                strncat(list, *v, sizeof list - strlen(list) - 1);
                if (v[1]) strncat(list, ", ", sizeof list - strlen(list) - 1);
            }
            return seer_err_set(err, SEER_EINVAL, "mcp server '%s': unknown field '%s' (a %s server takes %s)", server,
                                f->string, kind, list);
        }
    }
    return 0;
}

static int is_empty_container(const cJSON *v) {
    return (cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child;
}

/* Checks a server's entry and says which transport it uses. */
static int check_spec(const char *name, const cJSON *spec, mcp_kind_t *kind, seer_err_t *err) {
    if (!cJSON_IsObject(spec))
        return seer_err_set(err, SEER_EINVAL, "mcp server '%s': the entry must be a table (type, command, ... or url)", name);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(spec, "type");
    const char *t;
    if (type) {
        if (!cJSON_IsString(type))
            return seer_err_set(err, SEER_EINVAL, "mcp server '%s': type must be a string (stdio, http or streamable-http)", name);
        t = type->valuestring;
    } else if (cJSON_GetObjectItemCaseSensitive(spec, "command")) {
        t = "stdio"; /* Claude Desktop's files leave the type out */
    } else if (cJSON_GetObjectItemCaseSensitive(spec, "url")) {
        t = "http";
    } else {
        return seer_err_set(err, SEER_EINVAL, "mcp server '%s': needs type = \"stdio\" with a command, or type = \"http\" with a url",
                            name);
    }
    if (strcmp(t, "stdio") == 0) {
        static const char *const valid[] = {"type", "command", "args", "env", "cwd", NULL};
        if (check_fields(name, spec, "stdio", valid, err) < 0) return err->code;
        const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(spec, "command");
        if (!cJSON_IsString(cmd) || !*cmd->valuestring)
            return seer_err_set(err, SEER_EINVAL, "mcp server '%s': command must be a non-empty string", name);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(spec, "args");
        if (args && !is_empty_container(args)) {
            if (!cJSON_IsArray(args)) return seer_err_set(err, SEER_EINVAL, "mcp server '%s': args must be a list of strings", name);
            int i = 1;
            for (const cJSON *a = args->child; a; a = a->next, i++)
                if (!cJSON_IsString(a))
                    return seer_err_set(err, SEER_EINVAL, "mcp server '%s': args[%d] must be a string", name, i);
        }
        const cJSON *env = cJSON_GetObjectItemCaseSensitive(spec, "env");
        if (env && !is_empty_container(env)) {
            if (!cJSON_IsObject(env))
                return seer_err_set(err, SEER_EINVAL, "mcp server '%s': env must be a table of strings", name);
            for (const cJSON *e = env->child; e; e = e->next)
                if (!cJSON_IsString(e) || !*e->string || strchr(e->string, '='))
                    return seer_err_set(err, SEER_EINVAL, "mcp server '%s': env.%s must be a string (and the name have no '=')",
                                        name, e->string);
        }
        const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(spec, "cwd");
        if (cwd && !cJSON_IsString(cwd)) return seer_err_set(err, SEER_EINVAL, "mcp server '%s': cwd must be a string", name);
        *kind = MCP_STDIO;
        return 0;
    }
    if (strcmp(t, "http") == 0 || strcmp(t, "streamable-http") == 0 || strcmp(t, "streamable_http") == 0) {
        static const char *const valid[] = {"type", "url", "headers", NULL};
        if (check_fields(name, spec, "http", valid, err) < 0) return err->code;
        const cJSON *url = cJSON_GetObjectItemCaseSensitive(spec, "url");
        if (!cJSON_IsString(url) ||
            (strncmp(url->valuestring, "http://", 7) != 0 && strncmp(url->valuestring, "https://", 8) != 0))
            return seer_err_set(err, SEER_EINVAL, "mcp server '%s': url must be an http:// or https:// address", name);
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(spec, "headers");
        if (h && !is_empty_container(h)) {
            if (!cJSON_IsObject(h))
                return seer_err_set(err, SEER_EINVAL, "mcp server '%s': headers must be a table of strings", name);
            for (const cJSON *e = h->child; e; e = e->next)
                if (!cJSON_IsString(e) || !*e->string || strpbrk(e->string, ":\r\n") || strpbrk(e->valuestring, "\r\n"))
                    return seer_err_set(err, SEER_EINVAL, "mcp server '%s': headers.%s must be a one-line string", name, e->string);
        }
        *kind = MCP_HTTP;
        return 0;
    }
    if (strcmp(t, "sse") == 0)
        return seer_err_set(err, SEER_EINVAL,
                            "mcp server '%s': type 'sse' (the HTTP+SSE transport of 2024-11-05) is not supported; valid types: "
                            "stdio, http (streamable HTTP; also spelled streamable-http)", name);
    return seer_err_set(err, SEER_EINVAL, "mcp server '%s': unknown type '%s' (valid types: stdio, http, streamable-http)", name, t);
}

/* ---- servers ------------------------------------------------------------------------------ */

static void server_free(mcp_server_t *s) {
    if (!s) return;
    free(s->name);
    cJSON_Delete(s->init_result);
    cJSON_Delete(s->tools);
    cJSON_Delete(s->wait_msg);
    free(s->dead_msg);
    mcp_rd_free(&s->rd);
    for (size_t i = 0; i < s->nanswers; i++) free(s->answers[i]);
    free(s->answers);
    mcp_buf_free(&s->tee_line);
    free(s);
}

static mcp_server_t *server_new(const char *name, mcp_kind_t kind, const seer_mcp_opts_t *opts) {
    mcp_server_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->name = strdup(name);
    if (!s->name) {
        free(s);
        return NULL;
    }
    s->kind = kind;
    s->opts = opts;
    s->next_id = 1;
    s->keep = opts->max_message_bytes;
    mcp_rd_reset(&s->rd);
    s->in_fd = s->out_fd = s->err_fd = -1;
    return s;
}

/* About the bytes a value takes as JSON text: its strings, keys and numbers, and a few for the
 * punctuation. Nesting is bounded by the parser (1000 levels). */
static size_t json_size(const cJSON *v) {
    size_t n = 4 + (v->string ? strlen(v->string) + 3 : 0);
    if (cJSON_IsString(v)) n += strlen(v->valuestring);
    else if (cJSON_IsNumber(v)) n += 8;
    for (const cJSON *c = v->child; c; c = c->next) n += json_size(c);
    return n;
}

static int list_tools(mcp_server_t *s, int64_t deadline, seer_err_t *err) {
    cJSON *all = cJSON_CreateArray();
    char *cursor = NULL;
    int rc = 0;
    size_t max_tools = s->opts->max_tools ? s->opts->max_tools : DEFAULT_MAX_TOOLS;
    size_t max_bytes = s->opts->max_tools_bytes ? s->opts->max_tools_bytes : DEFAULT_MAX_TOOLS_BYTES;
    size_t ntools = 0, bytes = 0;
    int nameless = 0;
    for (int page = 0;; page++) {
        if (page == MAX_TOOL_PAGES) {
            rc = seer_err_set(err, SEER_EPARSE, "mcp server '%s': tools/list: more than %d pages", s->name, MAX_TOOL_PAGES);
            break;
        }
        cJSON *params = cJSON_CreateObject();
        if (cursor) cJSON_AddStringToObject(params, "cursor", cursor);
        cJSON *res;
        rc = rpc(s, "tools/list", params, "tools/list", ms_left(deadline), NULL, &res, err);
        if (rc < 0) break;
        cJSON *tools = cJSON_GetObjectItemCaseSensitive(res, "tools");
        if (!cJSON_IsArray(tools)) {
            cJSON_Delete(res);
            rc = seer_err_set(err, SEER_EPARSE, "mcp server '%s': tools/list: the result has no tools list", s->name);
            break;
        }
        cJSON *t = tools->child;
        while (t) {
            cJSON *next = t->next;
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(t, "name");
            /* every entry counts, kept or not (a list of nameless tools is no cheaper) */
            bytes += json_size(t);
            if (++ntools > max_tools) {
                rc = seer_err_set(err, SEER_EPARSE,
                                  "mcp server '%s': tools/list: the server offers more than %zu tools (max_tools): it is "
                                  "refused",
                                  s->name, max_tools);
                break;
            }
            if (bytes > max_bytes) {
                rc = seer_err_set(err, SEER_EPARSE,
                                  "mcp server '%s': tools/list: the server's tools take more than %zu bytes of names, "
                                  "descriptions and schemas (max_tools_bytes): it is refused",
                                  s->name, max_bytes);
                break;
            }
            if (cJSON_IsString(nm) && *nm->valuestring) {
                cJSON_AddItemToArray(all, cJSON_DetachItemViaPointer(tools, t));
            } else if (!nameless++) {
                mcp_warn(s, "tools/list: ignoring a tool without a name");
            }
            t = next;
        }
        if (rc < 0) {
            cJSON_Delete(res);
            break;
        }
        const cJSON *nc = cJSON_GetObjectItemCaseSensitive(res, "nextCursor");
        char *next_cursor = cJSON_IsString(nc) && *nc->valuestring ? strdup(nc->valuestring) : NULL;
        cJSON_Delete(res);
        if (next_cursor && cursor && strcmp(next_cursor, cursor) == 0) {
            free(next_cursor);
            rc = seer_err_set(err, SEER_EPARSE, "mcp server '%s': tools/list: the server repeats the cursor '%s'", s->name, cursor);
            break;
        }
        free(cursor);
        cursor = next_cursor;
        if (!cursor) break;
    }
    free(cursor);
    if (rc < 0) {
        cJSON_Delete(all);
        return rc;
    }
    cJSON_Delete(s->tools);
    s->tools = all;
    s->tools_stale = 0;
    return 0;
}

static int send_initialize(mcp_server_t *s, int64_t deadline, seer_err_t *err);

/* initialize -> check the version -> notifications/initialized -> tools/list. For stdio the
 * initialize request was written already (so all servers start in parallel); the response
 * is what this waits for. */
static int finish_connect(mcp_server_t *s, int64_t deadline, seer_err_t *err) {
    cJSON *res = NULL;
    int rc;
    if (s->kind == MCP_STDIO) {
        seer_err_t terr;
        seer_err_clear(&terr);
        rc = mcp_stdio_pump(s, deadline, &terr);
        cJSON *resp = s->wait_msg;
        s->wait_msg = NULL;
        if (rc == SEER_MCP_ETIMEOUT)
            return seer_err_set(err, rc, "mcp server '%s': initialize timed out after %.3g s (the server did not answer)",
                                s->name, (double)s->opts->connect_timeout_ms / 1000.0);
        if (rc == SEER_EINTR) return seer_err_set(err, rc, "mcp server '%s': initialize: interrupted", s->name);
        if (rc == SEER_MCP_EDEAD) return seer_err_set(err, rc, "mcp server '%s': initialize: %s", s->name, s->dead_msg);
        if (rc < 0) return seer_err_set(err, rc, "mcp server '%s': initialize: %s", s->name, terr.msg);
        if (s->refused) {
            s->refused = 0;
            cJSON_Delete(resp);
            return seer_err_set(err, SEER_EPARSE, "mcp server '%s': initialize: the response has more than %d JSON values",
                                s->name, MCP_READER_MAX_VALUES);
        }
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(resp, "error");
        if (e) {
            const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
            rc = seer_err_set(err, SEER_MCP_ERPC, "mcp server '%s': initialize failed: %s", s->name,
                              cJSON_IsString(msg) ? msg->valuestring : "(no message)");
            cJSON_Delete(resp);
            return rc;
        }
        res = cJSON_DetachItemFromObjectCaseSensitive(resp, "result");
        cJSON_Delete(resp);
        if (!cJSON_IsObject(res)) {
            cJSON_Delete(res);
            return seer_err_set(err, SEER_EPARSE, "mcp server '%s': initialize: the result is not a JSON object", s->name);
        }
    } else {
        rc = send_initialize(s, deadline, err);
        if (rc < 0) return rc;
        res = s->init_result;
        s->init_result = NULL;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(res, "protocolVersion");
    const char *ver = cJSON_IsString(v) ? v->valuestring : "";
    int ok = 0;
    for (size_t i = 0; i < sizeof supported_versions / sizeof *supported_versions; i++)
        if (strcmp(ver, supported_versions[i]) == 0) ok = 1;
    if (!ok) {
        rc = seer_err_set(err, SEER_EPARSE, "mcp server '%s' speaks protocol version '%s'; seer's client speaks %s", s->name,
                          ver, SEER_MCP_PROTOCOL_VERSIONS);
        cJSON_Delete(res);
        return rc;
    }
    snprintf(s->version, sizeof s->version, "%s", ver);
    s->init_result = res;
    rc = send_notification(s, "notifications/initialized", NULL, deadline, err);
    if (rc < 0) {
        if (rc == SEER_MCP_EDEAD)
            return seer_err_set(err, rc, "mcp server '%s': notifications/initialized: %s", s->name, s->dead_msg);
        char msg[SEER_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return seer_err_set(err, rc, "mcp server '%s': notifications/initialized: %s", s->name, msg);
    }
    return list_tools(s, deadline, err);
}

static cJSON *initialize_params(void) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "protocolVersion", SEER_MCP_PROTOCOL_VERSION);
    cJSON_AddObjectToObject(p, "capabilities");
    cJSON *ci = cJSON_AddObjectToObject(p, "clientInfo");
    cJSON_AddStringToObject(ci, "name", "seer");
    cJSON_AddStringToObject(ci, "version", seer_version());
    return p;
}

/* HTTP: the whole initialize request (its response lands in s->init_result). */
static int send_initialize(mcp_server_t *s, int64_t deadline, seer_err_t *err) {
    cJSON *res;
    int rc = rpc(s, "initialize", initialize_params(), "initialize", ms_left(deadline), NULL, &res, err);
    if (rc < 0) return rc;
    s->init_result = res;
    return 0;
}

/* HTTP: the server forgot the session (404): initialize again and announce it, keeping the
 * tools listed at connect time. */
static int reinitialize(mcp_server_t *s, int64_t deadline, seer_err_t *err) {
    cJSON *res;
    int rc = rpc(s, "initialize", initialize_params(), "initialize (new session)", ms_left(deadline), NULL, &res, err);
    if (rc < 0) return rc;
    cJSON_Delete(s->init_result);
    s->init_result = res;
    return send_notification(s, "notifications/initialized", NULL, deadline, err);
}

/* Stdio: writes initialize and leaves the response to finish_connect. */
static int start_initialize(mcp_server_t *s, int64_t deadline, seer_err_t *err) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "jsonrpc", "2.0");
    s->wait_id = s->next_id++;
    cJSON_AddNumberToObject(m, "id", (double)s->wait_id);
    cJSON_AddStringToObject(m, "method", "initialize");
    cJSON_AddItemToObject(m, "params", initialize_params());
    char *text = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    if (!text) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    seer_err_t terr;
    int rc = mcp_stdio_send(s, text, strlen(text), deadline, &terr);
    free(text);
    if (rc == SEER_MCP_EDEAD) return seer_err_set(err, rc, "mcp server '%s': initialize: %s", s->name, s->dead_msg);
    if (rc < 0) return seer_err_set(err, rc, "mcp server '%s': initialize: %s", s->name, terr.msg);
    return 0;
}

/* ---- the tool table ------------------------------------------------------------------------ */

static void free_tools(seer_mcp_client_t *c) {
    for (size_t i = 0; i < c->ntools; i++) free(c->qnames[i]);
    free(c->qnames);
    free(c->tools);
    c->qnames = NULL;
    c->tools = NULL;
    c->ntools = 0;
}

static const char *tool_name(const cJSON *t) {
    return cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring;
}

static void sanitize(char *out, const char *in, size_t max) {
    size_t o = 0;
    for (; *in && o < max; in++) {
        unsigned char ch = (unsigned char)*in;
        out[o++] = (isalnum(ch) || ch == '_' || ch == '-') && ch < 0x80 ? (char)ch : '_';
    }
    out[o] = 0;
}

static int qname_taken(seer_mcp_client_t *c, size_t upto, const char *q) {
    for (size_t i = 0; i < upto; i++)
        if (strcmp(c->qnames[i], q) == 0) return 1;
    return 0;
}

static int build_tools(seer_mcp_client_t *c, seer_err_t *err) {
    free_tools(c);
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++) n += (size_t)cJSON_GetArraySize(c->servers[i]->tools);
    c->tools = calloc(n ? n : 1, sizeof *c->tools);
    c->qnames = calloc(n ? n : 1, sizeof *c->qnames);
    if (!c->tools || !c->qnames) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) {
        for (const cJSON *t = c->servers[i]->tools ? c->servers[i]->tools->child : NULL; t; t = t->next) {
            const char *nm = tool_name(t);
            int clash = 0;
            for (size_t j = 0; j < c->n && !clash; j++) {
                if (j == i) continue;
                for (const cJSON *u = c->servers[j]->tools ? c->servers[j]->tools->child : NULL; u; u = u->next)
                    if (strcmp(tool_name(u), nm) == 0) {
                        clash = 1;
                        break;
                    }
            }
            char raw[1024], base[QNAME_MAX + 1], q[QNAME_MAX + 1];
            if (clash)
                snprintf(raw, sizeof raw, "%s__%s", c->servers[i]->name, nm);
            else
                snprintf(raw, sizeof raw, "%s", nm);
            sanitize(base, raw, QNAME_MAX);
            snprintf(q, sizeof q, "%s", base);
            for (int dup = 2; qname_taken(c, k, q); dup++) {
                char suffix[16];
                int sl = snprintf(suffix, sizeof suffix, "_%d", dup);
                sanitize(q, raw, QNAME_MAX - (size_t)sl);
                strcat(q, suffix);
            }
            c->qnames[k] = strdup(q);
            if (!c->qnames[k]) {
                c->ntools = k;
                return seer_err_set(err, SEER_ENOMEM, "out of memory");
            }
            c->tools[k] = (seer_mcp_tool_t){c->servers[i]->name, nm, c->qnames[k], t};
            k++;
        }
    }
    c->ntools = k;
    return 0;
}

/* ---- the public API ------------------------------------------------------------------------ */

static void close_servers(mcp_server_t **servers, size_t n) {
    /* Every stdio server sees its stdin close first, then they are waited for together, so
     * closing N servers costs one grace period, not N. */
    for (size_t i = 0; i < n; i++)
        if (servers[i] && servers[i]->kind == MCP_STDIO) mcp_stdio_close_begin(servers[i]);
    int64_t now = mcp_now_ms(), deadline = now + SHUTDOWN_WAIT_MS;
    for (size_t i = 0; i < n; i++) {
        if (!servers[i]) continue;
        /* A server that never finished initialize, or broke the protocol, gets no grace period:
         * it is not going to shut down cleanly, and a failed connect should fail fast. */
        int graceful = servers[i]->version[0] && !servers[i]->dead_msg;
        if (servers[i]->kind == MCP_STDIO)
            mcp_stdio_close_end(servers[i], graceful ? deadline : now);
        else
            mcp_http_close(servers[i]);
        server_free(servers[i]);
    }
}

void seer_mcp_close(seer_mcp_client_t *c) {
    if (!c) return;
    close_servers(c->servers, c->n);
    free(c->servers);
    free_tools(c);
    free(c);
}

int seer_mcp_connect(seer_mcp_client_t **out, const cJSON *config, const seer_mcp_opts_t *opts, seer_err_t *err) {
    *out = NULL;
    if (!cJSON_IsObject(config) && !is_empty_container(config))
        return seer_err_set(err, SEER_EINVAL, "mcp: the configuration must be a table of server name -> server");
    const cJSON *wrapped = cJSON_GetObjectItemCaseSensitive(config, "mcpServers");
    if (cJSON_IsObject(wrapped) && !wrapped->next && config->child == wrapped) config = wrapped;

    seer_mcp_client_t *c = calloc(1, sizeof *c);
    if (!c) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    if (opts) c->opts = *opts;
    if (c->opts.timeout_ms <= 0) c->opts.timeout_ms = DEFAULT_TIMEOUT_MS;
    if (c->opts.connect_timeout_ms <= 0) c->opts.connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
    if (!c->opts.max_message_bytes) c->opts.max_message_bytes = DEFAULT_MAX_MESSAGE;

    size_t n = 0;
    for (const cJSON *e = config->child; e; e = e->next) n++;
    c->servers = calloc(n ? n : 1, sizeof *c->servers);
    if (!c->servers) {
        free(c);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }
    int64_t deadline = mcp_now_ms() + c->opts.connect_timeout_ms;
    int rc = 0;
    /* Check every entry before starting anything, so a typo starts no process. */
    for (const cJSON *e = config->child; e && rc == 0; e = e->next) {
        mcp_kind_t kind;
        if (!e->string || !*e->string)
            rc = seer_err_set(err, SEER_EINVAL, "mcp: a server name must be a non-empty string");
        else
            rc = check_spec(e->string, e, &kind, err);
    }
    for (const cJSON *e = config->child; e && rc == 0; e = e->next) {
        mcp_kind_t kind;
        check_spec(e->string, e, &kind, err);
        mcp_server_t *s = server_new(e->string, kind, &c->opts);
        if (!s) {
            rc = seer_err_set(err, SEER_ENOMEM, "out of memory");
            break;
        }
        c->servers[c->n++] = s;
        rc = kind == MCP_STDIO ? mcp_stdio_start(s, e, err) : mcp_http_start(s, e, err);
        if (rc == 0 && kind == MCP_STDIO) rc = start_initialize(s, deadline, err);
    }
    for (size_t i = 0; i < c->n && rc == 0; i++) rc = finish_connect(c->servers[i], deadline, err);
    if (rc == 0) rc = build_tools(c, err);
    if (rc < 0) {
        seer_mcp_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

static mcp_server_t *find_server(const seer_mcp_client_t *c, const char *name) {
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->servers[i]->name, name) == 0) return c->servers[i];
    return NULL;
}

static int no_server(const seer_mcp_client_t *c, const char *name, seer_err_t *err) {
    char list[512] = "";
    for (size_t i = 0; i < c->n; i++) {
        strncat(list, c->servers[i]->name, sizeof list - strlen(list) - 1);
        if (i + 1 < c->n) strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return seer_err_set(err, SEER_ENOTFOUND, "mcp: no server named '%s' (servers: %s)", name, c->n ? list : "none");
}

int seer_mcp_tools(seer_mcp_client_t *c, const seer_mcp_tool_t **tools, size_t *n, seer_err_t *err) {
    int changed = 0;
    for (size_t i = 0; i < c->n; i++) {
        mcp_server_t *s = c->servers[i];
        if (!s->tools_stale || s->dead_msg) continue;
        int rc = list_tools(s, mcp_now_ms() + c->opts.timeout_ms, err);
        if (rc < 0) return rc;
        changed = 1;
    }
    if (changed) {
        int rc = build_tools(c, err);
        if (rc < 0) return rc;
    }
    *tools = c->tools;
    *n = c->ntools;
    return 0;
}

/* A response past max_result_bytes was cut (client_reader.c): the block the cut went through is
 * left out unless it is text (cut at a character), structuredContent too unless it was whole,
 * isError is what the whole response said, and a text block and seer_cut say what happened. */
static int apply_cut(mcp_server_t *s, cJSON *r) {
    const mcp_cut_t *cut = &s->cut;
    cJSON *content = cJSON_GetObjectItemCaseSensitive(r, "content");
    if (!cJSON_IsArray(content)) {
        cJSON_DeleteItemFromObjectCaseSensitive(r, "content");
        content = cJSON_AddArrayToObject(r, "content");
        if (!content) return SEER_ENOMEM;
    }
    int dropped = 0, structured = 0;
    if (cut->cut_in_block) {
        int n = cJSON_GetArraySize(content);
        cJSON *last = n > 0 ? cJSON_GetArrayItem(content, n - 1) : NULL;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(last, "type");
        if (cJSON_IsObject(last) && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(last, "text")) &&
            (!type || (cJSON_IsString(type) && strcmp(type->valuestring, "text") == 0))) {
            if (!type) cJSON_AddStringToObject(last, "type", "text");
        } else if (last) {
            cJSON_DeleteItemFromArray(content, n - 1);
            dropped = 1;
        }
    }
    if (!cut->structured_done && cJSON_GetObjectItemCaseSensitive(r, "structuredContent")) {
        cJSON_DeleteItemFromObjectCaseSensitive(r, "structuredContent");
        structured = 1;
    }
    if (cut->is_error >= 0) {
        cJSON_DeleteItemFromObjectCaseSensitive(r, "isError");
        cJSON_AddBoolToObject(r, "isError", cut->is_error);
    }
    char note[400];
    snprintf(note, sizeof note,
             "[seer: the server's response to this call is %zu bytes; only its first %zu bytes were read "
             "(max_result_bytes = %zu) and the rest was skipped%s%s]",
             cut->message_bytes, cut->read_bytes, cut->limit, dropped ? "; the block it was in was left out" : "",
             structured ? "; structuredContent was left out" : "");
    cJSON *b = cJSON_CreateObject();
    cJSON *info = cJSON_CreateObject();
    if (!b || !info) {
        cJSON_Delete(b);
        cJSON_Delete(info);
        return SEER_ENOMEM;
    }
    cJSON_AddStringToObject(b, "type", "text");
    cJSON_AddStringToObject(b, "text", note);
    cJSON_AddItemToArray(content, b);
    cJSON_AddNumberToObject(info, "message_bytes", (double)cut->message_bytes);
    cJSON_AddNumberToObject(info, "read_bytes", (double)cut->read_bytes);
    cJSON_AddNumberToObject(info, "content_bytes", (double)cut->content_bytes);
    cJSON_AddNumberToObject(info, "max_result_bytes", (double)cut->limit);
    cJSON_AddItemToObject(r, "seer_cut", info);
    return 0;
}

static int call_on(seer_mcp_client_t *c, mcp_server_t *s, const char *tool, const cJSON *arguments,
                   const seer_mcp_call_opts_t *opts, cJSON **result, seer_err_t *err) {
    *result = NULL;
    if (arguments && !cJSON_IsObject(arguments) && !is_empty_container(arguments))
        return seer_err_set(err, SEER_EINVAL, "mcp server '%s': tools/call '%s': the arguments must be a table", s->name, tool);
    int timeout = opts && opts->timeout_ms > 0 ? opts->timeout_ms : c->opts.timeout_ms;
    int64_t id = s->next_id; /* the progress token is the request's id */
    cJSON *params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "name", tool);
    cJSON *args = arguments && arguments->child ? cJSON_Duplicate(arguments, 1) : cJSON_CreateObject();
    if (!args || !params) {
        cJSON_Delete(args);
        cJSON_Delete(params);
        return seer_err_set(err, SEER_ENOMEM, "out of memory");
    }
    cJSON_AddItemToObject(params, "arguments", args);
    if (opts && opts->progress) {
        cJSON *meta = cJSON_AddObjectToObject(params, "_meta");
        cJSON_AddNumberToObject(meta, "progressToken", (double)id);
    }
    char what[300];
    snprintf(what, sizeof what, "tools/call '%.200s'", tool);
    int rc = rpc(s, "tools/call", params, what, timeout, opts, result, err);
    if (rc < 0) return rc;
    /* Normalized so callers need not check: content is always a list, isError a boolean. */
    cJSON *r = *result;
    if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(r, "content"))) {
        cJSON_DeleteItemFromObjectCaseSensitive(r, "content");
        cJSON_AddArrayToObject(r, "content");
    }
    if (!cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(r, "isError"))) {
        cJSON_DeleteItemFromObjectCaseSensitive(r, "isError");
        cJSON_AddFalseToObject(r, "isError");
    }
    /* seer_cut is the client's word, never the server's. */
    cJSON_DeleteItemFromObjectCaseSensitive(r, "seer_cut");
    if (s->cut.active && apply_cut(s, r) < 0) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    /* Every content block an object with a string "type", and a text block's text a string:
     * a block that is not is replaced by a text block that says so, so callers can index
     * blocks without checking (a server may be a sandbox's, hence hostile). */
    cJSON *content = cJSON_GetObjectItemCaseSensitive(r, "content");
    int i = 0;
    for (cJSON *b = content->child; b; i++) {
        cJSON *next = b->next;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        int ok = cJSON_IsObject(b) && cJSON_IsString(type);
        if (ok && strcmp(type->valuestring, "text") == 0) ok = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(b, "text"));
        if (!ok) {
            cJSON *fix = cJSON_CreateObject();
            if (!fix) return seer_err_set(err, SEER_ENOMEM, "out of memory");
            cJSON_AddStringToObject(fix, "type", "text");
            cJSON_AddStringToObject(fix, "text", "[seer: the server sent a malformed content block here; it was dropped]");
            cJSON_ReplaceItemInArray(content, i, fix);
        }
        b = next;
    }
    return 0;
}

int seer_mcp_call_tool(seer_mcp_client_t *c, const char *server, const char *tool, const cJSON *arguments,
                       const seer_mcp_call_opts_t *opts, cJSON **result, seer_err_t *err) {
    *result = NULL;
    mcp_server_t *s = find_server(c, server);
    if (!s) return no_server(c, server, err);
    return call_on(c, s, tool, arguments, opts, result, err);
}

int seer_mcp_call(seer_mcp_client_t *c, const char *qualified_name, const cJSON *arguments,
                  const seer_mcp_call_opts_t *opts, cJSON **result, seer_err_t *err) {
    *result = NULL;
    for (size_t i = 0; i < c->ntools; i++)
        if (strcmp(c->tools[i].qualified_name, qualified_name) == 0)
            return seer_mcp_call_tool(c, c->tools[i].server, c->tools[i].name, arguments, opts, result, err);
    /* "<server>__<tool>" always reaches the tool, clash or not. */
    for (size_t i = 0; i < c->n; i++) {
        size_t ln = strlen(c->servers[i]->name);
        if (strncmp(qualified_name, c->servers[i]->name, ln) == 0 && strncmp(qualified_name + ln, "__", 2) == 0)
            for (size_t j = 0; j < c->ntools; j++)
                if (c->tools[j].server == c->servers[i]->name && strcmp(c->tools[j].name, qualified_name + ln + 2) == 0)
                    return call_on(c, c->servers[i], c->tools[j].name, arguments, opts, result, err);
    }
    const seer_mcp_tool_t *only = NULL;
    int count = 0;
    for (size_t i = 0; i < c->ntools; i++)
        if (strcmp(c->tools[i].name, qualified_name) == 0) {
            only = &c->tools[i];
            count++;
        }
    if (count == 1) return seer_mcp_call_tool(c, only->server, only->name, arguments, opts, result, err);
    char list[1024] = "";
    for (size_t i = 0; i < c->ntools && strlen(list) < 900; i++) {
        strncat(list, c->tools[i].qualified_name, sizeof list - strlen(list) - 1);
        if (i + 1 < c->ntools) strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    if (count > 1)
        return seer_err_set(err, SEER_ENOTFOUND, "mcp: several servers have a tool '%s'; use its qualified name (tools: %s)",
                            qualified_name, list);
    return seer_err_set(err, SEER_ENOTFOUND, "mcp: no tool '%s' (tools: %s)", qualified_name, c->ntools ? list : "none");
}

int seer_mcp_request(seer_mcp_client_t *c, const char *server, const char *method, const cJSON *params, int timeout_ms,
                     cJSON **result, seer_err_t *err) {
    *result = NULL;
    mcp_server_t *s = find_server(c, server);
    if (!s) return no_server(c, server, err);
    cJSON *p = NULL;
    if (params && !is_empty_container(params)) {
        if (!cJSON_IsObject(params))
            return seer_err_set(err, SEER_EINVAL, "mcp server '%s': %s: params must be a table", server, method);
        p = cJSON_Duplicate(params, 1);
    }
    char what[300];
    snprintf(what, sizeof what, "%.200s", method);
    int rc = rpc(s, method, p, what, timeout_ms > 0 ? timeout_ms : c->opts.timeout_ms, NULL, result, err);
    /* a tools/call sent this way is cut as seer_mcp_call's are, and says so the same way */
    if (rc == 0 && strcmp(method, "tools/call") == 0) cJSON_DeleteItemFromObjectCaseSensitive(*result, "seer_cut");
    if (rc == 0 && s->cut.active && apply_cut(s, *result) < 0) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    return rc;
}

size_t seer_mcp_server_count(const seer_mcp_client_t *c) {
    return c->n;
}

int seer_mcp_server_info(const seer_mcp_client_t *c, size_t i, seer_mcp_server_info_t *info) {
    if (i >= c->n) return SEER_EINVAL;
    const mcp_server_t *s = c->servers[i];
    memset(info, 0, sizeof *info);
    info->name = s->name;
    info->transport = s->kind == MCP_STDIO ? "stdio" : "http";
    info->protocol_version = s->version;
    info->server_info = cJSON_GetObjectItemCaseSensitive(s->init_result, "serverInfo");
    info->capabilities = cJSON_GetObjectItemCaseSensitive(s->init_result, "capabilities");
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(s->init_result, "instructions");
    info->instructions = cJSON_IsString(ins) ? ins->valuestring : NULL;
    info->pid = s->exited ? 0 : (int)s->pid;
    info->dead = s->dead_msg;
    return 0;
}
