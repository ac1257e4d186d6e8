/* Reassembly of a streamed provider response into one canonical assistant message. Anthropic's
 * stream already has content blocks (start, deltas, stop); OpenAI-style chat completions send
 * text, reasoning and tool-call fragments keyed by index, and are mapped onto the same blocks,
 * so the agent loop and the transcript see one shape whatever the provider. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_private.h"

#define MAX_TOOL_INDEX 1024
#define MAX_USAGE_FIELDS 64
#define MAX_NAME_BYTES 4096

typedef struct {
    cJSON *block; /* the block as started (type, id, name, ...) */
    hbuf_t text;  /* text, thinking or the input JSON as it streams */
    hbuf_t sig;   /* a thinking block's signature, joined from signature_delta events */
    int has_sig;
    int closed;
    int tool_index; /* OpenAI: the tool_calls index this slot holds, else -1 */
} slot_t;

struct seer_harness_asm {
    int provider;
    slot_t *slots;
    size_t n, cap;
    cJSON *usage;
    char *stop_reason;
    cJSON *stop_sequence;
    char *model, *id;
    cJSON *error;
    int retryable;
    int finished;
    int text_slot, think_slot; /* OpenAI: the open text / reasoning slot, or -1 */
    int tool_slot[MAX_TOOL_INDEX + 1]; /* OpenAI: the slot of each tool_calls index, or -1 */
    /* What the response has made the assembler keep (text, thinking, tool arguments, names,
     * signatures, citations, started blocks), against the limit (max_response_bytes). */
    size_t kept, limit;
};

/* Counts n more bytes kept for this response; past the limit the response is refused. */
static int charge(seer_harness_asm_t *a, size_t n, seer_err_t *err) {
    if (n > a->limit || a->kept > a->limit - n)
        return seer_err_set(err, SEER_HARNESS_ETOOBIG,
                            "the response is bigger than max_response_bytes (%zu bytes of text, thinking, tool "
                            "arguments and other content)",
                            a->limit);
    a->kept += n;
    return 0;
}

void seer_harness_asm_set_limit(seer_harness_asm_t *a, size_t max_bytes) {
    a->limit = max_bytes ? max_bytes : SEER_HARNESS_MAX_RESPONSE_BYTES;
}

size_t seer_harness_asm_kept(const seer_harness_asm_t *a) { return a->kept; }

seer_harness_asm_t *seer_harness_asm_new(int provider) {
    seer_harness_asm_t *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->provider = provider;
    a->usage = cJSON_CreateObject();
    a->text_slot = a->think_slot = -1;
    for (size_t i = 0; i <= MAX_TOOL_INDEX; i++) a->tool_slot[i] = -1;
    a->limit = SEER_HARNESS_MAX_RESPONSE_BYTES;
    return a;
}

void seer_harness_asm_free(seer_harness_asm_t *a) {
    if (!a) return;
    for (size_t i = 0; i < a->n; i++) {
        cJSON_Delete(a->slots[i].block);
        free(a->slots[i].text.p);
        free(a->slots[i].sig.p);
    }
    free(a->slots);
    cJSON_Delete(a->usage);
    cJSON_Delete(a->stop_sequence);
    cJSON_Delete(a->error);
    free(a->stop_reason);
    free(a->model);
    free(a->id);
    free(a);
}

const cJSON *seer_harness_asm_error(const seer_harness_asm_t *a, int *retryable) {
    if (retryable) *retryable = a->retryable;
    return a->error;
}

static void set_str(char **dst, const char *s) {
    free(*dst);
    *dst = s ? strdup(s) : NULL;
}

static slot_t *slot_at(seer_harness_asm_t *a, size_t i) {
    if (i > 4096) return NULL;
    if (i >= a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        while (cap <= i) cap *= 2;
        slot_t *s = realloc(a->slots, cap * sizeof *s);
        if (!s) return NULL;
        memset(s + a->cap, 0, (cap - a->cap) * sizeof *s);
        a->slots = s;
        a->cap = cap;
    }
    if (i >= a->n) {
        for (size_t k = a->n; k <= i; k++) a->slots[k].tool_index = -1;
        a->n = i + 1;
    }
    return &a->slots[i];
}

static void emit(cJSON *out, cJSON *ev) {
    if (out)
        cJSON_AddItemToArray(out, ev);
    else
        cJSON_Delete(ev);
}

static void emit_delta(cJSON *out, const char *type, size_t index, const char *text, size_t n) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", type);
    cJSON_AddNumberToObject(ev, "index", (double)index);
    char *copy = strndup(text, n);
    cJSON_AddStringToObject(ev, "text", copy ? copy : "");
    free(copy);
    emit(out, ev);
}

static int is_tool_block(const char *type) {
    return type && (strcmp(type, "tool_use") == 0 || strcmp(type, "server_tool_use") == 0 ||
                    strcmp(type, "mcp_tool_use") == 0);
}

/* The block with its streamed text put in place; NULL for a block that cannot stand alone (an
 * open tool call or an open thinking block without its signature). */
static cJSON *materialize(const slot_t *s, int partial) {
    if (!s->block) return NULL;
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s->block, "type"));
    if (partial && !s->closed && type && (is_tool_block(type) || strcmp(type, "thinking") == 0)) return NULL;
    cJSON *b = cJSON_Duplicate(s->block, 1);
    if (!b) return NULL;
    const char *text = s->text.p ? s->text.p : "";
    if (type && strcmp(type, "text") == 0) {
        cJSON_DeleteItemFromObjectCaseSensitive(b, "text");
        cJSON_AddStringToObject(b, "text", text);
    } else if (type && strcmp(type, "thinking") == 0) {
        cJSON_DeleteItemFromObjectCaseSensitive(b, "thinking");
        cJSON_AddStringToObject(b, "thinking", text);
        if (!s->has_sig && !cJSON_GetObjectItemCaseSensitive(b, "signature")) cJSON_AddStringToObject(b, "signature", "");
    } else if (is_tool_block(type)) {
        cJSON *start_input = cJSON_DetachItemFromObjectCaseSensitive(b, "input");
        cJSON *input = NULL;
        const char *why = NULL;
        if (s->text.n == 0) {
            input = cJSON_IsObject(start_input) ? cJSON_Duplicate(start_input, 1) : cJSON_CreateObject();
        } else {
            const char *end = NULL;
            input = cJSON_ParseWithLengthOpts(text, s->text.n, &end, 0);
            while (input && end && end < text + s->text.n && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
            if (input && end != text + s->text.n) { /* trailing garbage after the object */
                cJSON_Delete(input);
                input = NULL;
            }
            if (!input) {
                why = "the arguments are not valid JSON";
            } else if (!cJSON_IsObject(input)) {
                why = "the arguments are JSON but not an object";
                cJSON_Delete(input);
                input = NULL;
            }
        }
        cJSON_Delete(start_input);
        if (!input) {
            input = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "seer_invalid_input", text);
            cJSON_AddStringToObject(b, "seer_input_error", why ? why : "invalid arguments");
        }
        cJSON_AddItemToObject(b, "input", input);
    }
    if (s->has_sig) {
        cJSON_DeleteItemFromObjectCaseSensitive(b, "signature");
        cJSON_AddStringToObject(b, "signature", s->sig.p ? s->sig.p : "");
    }
    return b;
}

static void close_slot(seer_harness_asm_t *a, size_t i, cJSON *out) {
    slot_t *s = &a->slots[i];
    if (!s->block || s->closed) return;
    s->closed = 1;
    cJSON *b = materialize(s, 0);
    if (!b) return;
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "block");
    cJSON_AddNumberToObject(ev, "index", (double)i);
    cJSON_AddItemToObject(ev, "block", b);
    emit(out, ev);
}

static void merge_usage(seer_harness_asm_t *a, const cJSON *u) {
    if (!cJSON_IsObject(u)) return;
    const cJSON *f;
    cJSON_ArrayForEach(f, u) {
        if (!f->string) continue;
        /* a real usage object has about ten fields: more are dropped, so a provider cannot
         * grow it (or the time each merge takes) without bound */
        if (!cJSON_HasObjectItem(a->usage, f->string) && cJSON_GetArraySize(a->usage) >= MAX_USAGE_FIELDS) continue;
        /* a later event's null does not erase a count an earlier one gave (Anthropic's
         * message_delta may carry input_tokens: null after message_start's count) */
        if (cJSON_IsNull(f) && cJSON_HasObjectItem(a->usage, f->string)) continue;
        cJSON_DeleteItemFromObjectCaseSensitive(a->usage, f->string);
        cJSON_AddItemToObject(a->usage, f->string, cJSON_Duplicate(f, 1));
    }
}

/* ---- Anthropic ------------------------------------------------------------------------------- */

static int retryable_type(const char *type) {
    return type && (strcmp(type, "overloaded_error") == 0 || strcmp(type, "api_error") == 0 ||
                    strcmp(type, "rate_limit_error") == 0 || strcmp(type, "timeout_error") == 0);
}

static int anthropic_event(seer_harness_asm_t *a, const char *event, cJSON *d, size_t n, cJSON *out, seer_err_t *err) {
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "type"));
    if (!type) type = event;
    if (!type) return SEER_HARNESS_MORE;
    if (strcmp(type, "message_start") == 0) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(d, "message");
        set_str(&a->model, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "model")));
        set_str(&a->id, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "id")));
        merge_usage(a, cJSON_GetObjectItemCaseSensitive(m, "usage"));
        return SEER_HARNESS_MORE;
    }
    if (strcmp(type, "content_block_start") == 0 || strcmp(type, "content_block_delta") == 0 ||
        strcmp(type, "content_block_stop") == 0) {
        const cJSON *ix = cJSON_GetObjectItemCaseSensitive(d, "index");
        if (!cJSON_IsNumber(ix) || ix->valuedouble < 0 || ix->valuedouble > 4096)
            return seer_err_set(err, SEER_EPARSE, "anthropic stream: %s without a valid index", type);
        size_t i = (size_t)ix->valuedouble;
        slot_t *s = slot_at(a, i);
        if (!s) return seer_err_set(err, SEER_ENOMEM, "out of memory");
        if (strcmp(type, "content_block_start") == 0) {
            const cJSON *cb = cJSON_GetObjectItemCaseSensitive(d, "content_block");
            if (!cJSON_IsObject(cb)) return seer_err_set(err, SEER_EPARSE, "anthropic stream: content_block_start without a block");
            /* the block is kept as it came (its text too): the whole event counts */
            if (charge(a, n, err) < 0) return SEER_HARNESS_ETOOBIG;
            cJSON_Delete(s->block);
            s->block = cJSON_Duplicate(cb, 1);
            s->closed = 0;
            hbuf_reset(&s->text);
            hbuf_reset(&s->sig);
            s->has_sig = 0;
            const char *bt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cb, "type"));
            const char *init = NULL;
            if (bt && strcmp(bt, "text") == 0) init = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cb, "text"));
            if (bt && strcmp(bt, "thinking") == 0)
                init = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cb, "thinking"));
            if (init && *init) {
                if (hbuf_add(&s->text, init, strlen(init)) < 0) return seer_err_set(err, SEER_ENOMEM, "out of memory");
                emit_delta(out, strcmp(bt, "text") == 0 ? "text_delta" : "thinking_delta", i, init, strlen(init));
            }
            if (is_tool_block(bt)) {
                cJSON *ev = cJSON_CreateObject();
                cJSON_AddStringToObject(ev, "type", "tool_use_start");
                cJSON_AddNumberToObject(ev, "index", (double)i);
                cJSON_AddItemToObject(ev, "id", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cb, "id"), 1));
                cJSON_AddItemToObject(ev, "name", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cb, "name"), 1));
                emit(out, ev);
            }
            return SEER_HARNESS_MORE;
        }
        if (!s->block) return seer_err_set(err, SEER_EPARSE, "anthropic stream: %s for block %zu that never started", type, i);
        if (strcmp(type, "content_block_stop") == 0) {
            close_slot(a, i, out);
            return SEER_HARNESS_MORE;
        }
        const cJSON *delta = cJSON_GetObjectItemCaseSensitive(d, "delta");
        const char *dt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(delta, "type"));
        if (!dt) return SEER_HARNESS_MORE;
        const char *field = NULL, *evtype = NULL;
        if (strcmp(dt, "text_delta") == 0) field = "text", evtype = "text_delta";
        else if (strcmp(dt, "thinking_delta") == 0) field = "thinking", evtype = "thinking_delta";
        else if (strcmp(dt, "input_json_delta") == 0) field = "partial_json";
        if (field) {
            const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(delta, field));
            if (t && *t) {
                if (charge(a, strlen(t), err) < 0) return SEER_HARNESS_ETOOBIG;
                if (hbuf_add(&s->text, t, strlen(t)) < 0) return seer_err_set(err, SEER_ENOMEM, "out of memory");
                if (evtype) emit_delta(out, evtype, i, t, strlen(t));
            }
        } else if (strcmp(dt, "signature_delta") == 0) {
            /* joined in a buffer (re-joining a string per delta took time quadratic in its length) */
            const char *sig = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(delta, "signature"));
            if (!s->has_sig) {
                const char *prev = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s->block, "signature"));
                hbuf_reset(&s->sig);
                if (hbuf_add(&s->sig, prev ? prev : "", prev ? strlen(prev) : 0) < 0)
                    return seer_err_set(err, SEER_ENOMEM, "out of memory");
                s->has_sig = 1;
            }
            if (sig && *sig) {
                if (charge(a, strlen(sig), err) < 0) return SEER_HARNESS_ETOOBIG;
                if (hbuf_add(&s->sig, sig, strlen(sig)) < 0) return seer_err_set(err, SEER_ENOMEM, "out of memory");
            }
        } else if (strcmp(dt, "citations_delta") == 0) {
            if (charge(a, n, err) < 0) return SEER_HARNESS_ETOOBIG;
            cJSON *cits = cJSON_GetObjectItemCaseSensitive(s->block, "citations");
            if (!cJSON_IsArray(cits)) {
                cJSON_DeleteItemFromObjectCaseSensitive(s->block, "citations");
                cits = cJSON_AddArrayToObject(s->block, "citations");
            }
            cJSON_AddItemToArray(cits, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(delta, "citation"), 1));
        }
        return SEER_HARNESS_MORE;
    }
    if (strcmp(type, "message_delta") == 0) {
        const cJSON *delta = cJSON_GetObjectItemCaseSensitive(d, "delta");
        const char *sr = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(delta, "stop_reason"));
        if (sr) set_str(&a->stop_reason, sr);
        const cJSON *ss = cJSON_GetObjectItemCaseSensitive(delta, "stop_sequence");
        if (ss) {
            cJSON_Delete(a->stop_sequence);
            a->stop_sequence = cJSON_Duplicate(ss, 1);
        }
        merge_usage(a, cJSON_GetObjectItemCaseSensitive(d, "usage"));
        return SEER_HARNESS_MORE;
    }
    if (strcmp(type, "message_stop") == 0) {
        for (size_t i = 0; i < a->n; i++) close_slot(a, i, out);
        a->finished = 1;
        return SEER_HARNESS_FINISHED;
    }
    if (strcmp(type, "error") == 0) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(d, "error");
        cJSON_Delete(a->error);
        a->error = cJSON_IsObject(e) ? cJSON_Duplicate(e, 1) : cJSON_Duplicate(d, 1);
        a->retryable = retryable_type(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a->error, "type")));
        return SEER_HARNESS_ESTREAM;
    }
    return SEER_HARNESS_MORE; /* ping and events this version does not know */
}

/* ---- OpenAI-compatible ------------------------------------------------------------------------- */

static size_t new_slot(seer_harness_asm_t *a, const char *type) {
    size_t i = a->n;
    slot_t *s = slot_at(a, i);
    if (!s) return (size_t)-1;
    s->block = cJSON_CreateObject();
    cJSON_AddStringToObject(s->block, "type", type);
    return i;
}

static const char *openai_stop_reason(const char *fr, int has_tools) {
    if (has_tools) return "tool_use";
    if (!fr) return "end_turn";
    if (strcmp(fr, "stop") == 0) return "end_turn";
    if (strcmp(fr, "length") == 0) return "max_tokens";
    if (strcmp(fr, "tool_calls") == 0 || strcmp(fr, "function_call") == 0) return "tool_use";
    if (strcmp(fr, "content_filter") == 0) return "refusal";
    return fr;
}

/* A token count as a provider may report it: a whole number from 0 to 2^53. */
static int is_count(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 9007199254740992.0 &&
           v->valuedouble == (double)(long long)v->valuedouble;
}

/* OpenAI's usage in Anthropic's terms (input_tokens without the cached ones). Nothing is made
 * up: a field the server did not send is left out, and one that is not a count goes through
 * as it came, so that the harness marks the turn's usage unknown instead of counting a 0 (a
 * string "5000" read as 0) or the difference of two bad values (-5e9 - 0). */
static void openai_usage(seer_harness_asm_t *a, const cJSON *u) {
    if (!cJSON_IsObject(u)) return;
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
    const cJSON *outt = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
    const cJSON *det = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details");
    const cJSON *cached = cJSON_IsObject(det) ? cJSON_GetObjectItemCaseSensitive(det, "cached_tokens") : NULL;
    if (cJSON_IsNull(cached)) cached = NULL;
    cJSON *m = cJSON_CreateObject();
    if (in && !cJSON_IsNull(in)) {
        if (is_count(in) && (!cached || (is_count(cached) && cached->valuedouble <= in->valuedouble))) {
            double c = cached ? cached->valuedouble : 0;
            cJSON_AddNumberToObject(m, "input_tokens", in->valuedouble - c);
            cJSON_AddNumberToObject(m, "cache_read_input_tokens", c);
        } else {
            cJSON_AddItemToObject(m, "input_tokens", cJSON_Duplicate(in, 1));
            if (cached) cJSON_AddItemToObject(m, "cache_read_input_tokens", cJSON_Duplicate(cached, 1));
            if (is_count(in) && is_count(cached)) /* both counts, but more cached than sent */
                cJSON_AddStringToObject(m, "seer_usage_error", "prompt_tokens_details.cached_tokens is more than prompt_tokens");
        }
        cJSON_AddNumberToObject(m, "cache_creation_input_tokens", 0);
    }
    if (outt && !cJSON_IsNull(outt)) cJSON_AddItemToObject(m, "output_tokens", cJSON_Duplicate(outt, 1));
    merge_usage(a, m);
    cJSON_Delete(m);
}

static int has_tool_slots(const seer_harness_asm_t *a) {
    for (size_t i = 0; i < a->n; i++)
        if (a->slots[i].tool_index >= 0) return 1;
    return 0;
}

static void openai_finish(seer_harness_asm_t *a, cJSON *out) {
    for (size_t i = 0; i < a->n; i++) close_slot(a, i, out);
    if (!a->stop_reason) set_str(&a->stop_reason, openai_stop_reason(NULL, has_tool_slots(a)));
    a->finished = 1;
}

static int openai_error(seer_harness_asm_t *a, const cJSON *e) {
    cJSON_Delete(a->error);
    a->error = cJSON_IsObject(e) ? cJSON_Duplicate(e, 1) : cJSON_CreateObject();
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(a->error, "code");
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a->error, "type"));
    const char *scode = cJSON_GetStringValue(code);
    a->retryable = 0;
    if (cJSON_IsNumber(code)) {
        int c = (int)code->valuedouble;
        a->retryable = c == 408 || c == 409 || c == 429 || c >= 500;
    }
    const char *words[] = {type, scode};
    for (int k = 0; k < 2; k++)
        if (words[k] && (strstr(words[k], "overloaded") || strstr(words[k], "server_error") ||
                         strstr(words[k], "rate_limit") || strstr(words[k], "timeout")))
            a->retryable = 1;
    if (!cJSON_GetObjectItemCaseSensitive(a->error, "message"))
        cJSON_AddStringToObject(a->error, "message", "the provider sent an error in the stream");
    return SEER_HARNESS_ESTREAM;
}

static int openai_append(seer_harness_asm_t *a, int *slotp, const char *type, const char *evtype, const char *t,
                         cJSON *out, seer_err_t *err) {
    if (!t || !*t) return 0;
    if (charge(a, strlen(t), err) < 0) return SEER_HARNESS_ETOOBIG;
    if (*slotp < 0) {
        size_t i = new_slot(a, type);
        if (i == (size_t)-1) return seer_err_set(err, SEER_ENOMEM, "out of memory");
        *slotp = (int)i;
    }
    slot_t *s = &a->slots[*slotp];
    if (hbuf_add(&s->text, t, strlen(t)) < 0) return seer_err_set(err, SEER_ENOMEM, "out of memory");
    emit_delta(out, evtype, (size_t)*slotp, t, strlen(t));
    return 0;
}

static int openai_chunk(seer_harness_asm_t *a, cJSON *d, size_t n, cJSON *out, seer_err_t *err) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(d, "error");
    if (e && !cJSON_IsNull(e)) return openai_error(a, e);
    if (!a->model) set_str(&a->model, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "model")));
    if (!a->id) set_str(&a->id, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "id")));
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(d, "usage");
    if (cJSON_IsObject(u)) openai_usage(a, u);
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "choices"), 0);
    if (!choice) return SEER_HARNESS_MORE;
    const cJSON *delta = cJSON_GetObjectItemCaseSensitive(choice, "delta");
    if (!delta) delta = cJSON_GetObjectItemCaseSensitive(choice, "message"); /* some servers */
    const char *r = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(delta, "reasoning_content"));
    if (!r) r = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(delta, "reasoning"));
    int arc = openai_append(a, &a->think_slot, "thinking", "thinking_delta", r, out, err);
    if (arc < 0) return arc;
    arc = openai_append(a, &a->text_slot, "text", "text_delta",
                        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(delta, "content")), out, err);
    if (arc < 0) return arc;
    const cJSON *tc;
    cJSON_ArrayForEach(tc, cJSON_GetObjectItemCaseSensitive(delta, "tool_calls")) {
        const cJSON *ix = cJSON_GetObjectItemCaseSensitive(tc, "index");
        int tix = cJSON_IsNumber(ix) ? (int)ix->valuedouble : 0;
        if (tix < 0 || tix > MAX_TOOL_INDEX)
            return seer_err_set(err, SEER_EPARSE, "openai stream: tool call index %d out of range", tix);
        slot_t *s = a->tool_slot[tix] >= 0 ? &a->slots[a->tool_slot[tix]] : NULL;
        size_t si = 0;
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tc, "id"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
        if ((id && strlen(id) > MAX_NAME_BYTES) || (name && strlen(name) > MAX_NAME_BYTES))
            return seer_err_set(err, SEER_EPARSE, "openai stream: a tool call id or name longer than %d bytes", MAX_NAME_BYTES);
        if (charge(a, (id ? strlen(id) : 0) + (name ? strlen(name) : 0), err) < 0) return SEER_HARNESS_ETOOBIG;
        if (!s) {
            si = new_slot(a, "tool_use");
            if (si == (size_t)-1) goto oom;
            s = &a->slots[si];
            s->tool_index = tix;
            a->tool_slot[tix] = (int)si;
            cJSON_AddStringToObject(s->block, "id", id && *id ? id : "");
            cJSON_AddStringToObject(s->block, "name", name ? name : "");
            name = NULL; /* taken whole */
        } else if (id && *id && !*cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s->block, "id"))) {
            cJSON_ReplaceItemInObjectCaseSensitive(s->block, "id", cJSON_CreateString(id));
        }
        if (name && *name && strcmp(name, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s->block, "name"))) != 0) {
            /* a name sent in fragments (a server that repeats the whole name in every delta, as
             * llama.cpp's does, sends the same string again: that is not a fragment) */
            const char *prev = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s->block, "name"));
            if (prev && strlen(prev) + strlen(name) > MAX_NAME_BYTES)
                return seer_err_set(err, SEER_EPARSE, "openai stream: a tool name longer than %d bytes", MAX_NAME_BYTES);
            char *joined = NULL;
            if (asprintf(&joined, "%s%s", prev ? prev : "", name) < 0) goto oom;
            cJSON_ReplaceItemInObjectCaseSensitive(s->block, "name", cJSON_CreateString(joined));
            free(joined);
        }
        const cJSON *extra = cJSON_GetObjectItemCaseSensitive(tc, "extra_content"); /* Gemini thought signatures */
        if (extra && !cJSON_GetObjectItemCaseSensitive(s->block, "seer_extra_content")) {
            if (charge(a, n, err) < 0) return SEER_HARNESS_ETOOBIG; /* at most once per call */
            cJSON_AddItemToObject(s->block, "seer_extra_content", cJSON_Duplicate(extra, 1));
        }
        const char *args = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
        if (args && *args) {
            if (charge(a, strlen(args), err) < 0) return SEER_HARNESS_ETOOBIG;
            if (hbuf_add(&s->text, args, strlen(args)) < 0) goto oom;
        }
        (void)si;
    }
    const char *fr = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(choice, "finish_reason"));
    if (fr) {
        set_str(&a->stop_reason, openai_stop_reason(fr, has_tool_slots(a)));
        /* Usage may still follow (stream_options.include_usage), so [DONE] finishes. */
    }
    return SEER_HARNESS_MORE;
oom:
    return seer_err_set(err, SEER_ENOMEM, "out of memory");
}

/* Tool calls without ids (some local servers) get stable made-up ones, since results must name
 * the call they answer. */
static void openai_fill_ids(seer_harness_asm_t *a) {
    for (size_t i = 0; i < a->n; i++) {
        slot_t *s = &a->slots[i];
        if (s->tool_index < 0 || !s->block) continue;
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s->block, "id"));
        if (id && *id) continue;
        char made[64];
        snprintf(made, sizeof made, "call_seer_%zu", i);
        cJSON_ReplaceItemInObjectCaseSensitive(s->block, "id", cJSON_CreateString(made));
    }
}

int seer_harness_asm_event(seer_harness_asm_t *a, const char *event, const char *data, size_t n, cJSON *out,
                           seer_err_t *err) {
    if (a->finished) return SEER_HARNESS_FINISHED;
    if (a->provider == SEER_HARNESS_OPENAI) {
        /* Skip leading white space so "[DONE]" and JSON both match. */
        while (n && (*data == ' ' || *data == '\t')) data++, n--;
        if (n >= 6 && memcmp(data, "[DONE]", 6) == 0) {
            openai_fill_ids(a);
            openai_finish(a, out);
            return SEER_HARNESS_FINISHED;
        }
    }
    if (n == 0) return SEER_HARNESS_MORE;
    const char *end = NULL;
    cJSON *d = cJSON_ParseWithLengthOpts(data, n, &end, 0);
    if (!d) {
        char near[48];
        snprintf(near, sizeof near, "%.40s", data);
        return seer_err_set(err, SEER_EPARSE, "%s stream: an event's data is not JSON: %s",
                            a->provider == SEER_HARNESS_OPENAI ? "openai" : "anthropic", near);
    }
    int rc;
    if (a->provider == SEER_HARNESS_OPENAI)
        rc = openai_chunk(a, d, n, out, err);
    else
        rc = anthropic_event(a, event && *event ? event : NULL, d, n, out, err);
    cJSON_Delete(d);
    return rc;
}

int seer_harness_asm_eof(seer_harness_asm_t *a) {
    if (a->finished) return SEER_HARNESS_FINISHED;
    /* Some OpenAI-compatible servers end the body after the finish_reason without [DONE]. */
    if (a->provider == SEER_HARNESS_OPENAI && a->stop_reason) {
        openai_fill_ids(a);
        openai_finish(a, NULL);
        return SEER_HARNESS_FINISHED;
    }
    return SEER_HARNESS_MORE;
}

int seer_harness_asm_whole(seer_harness_asm_t *a, const char *body, size_t n, cJSON *out, seer_err_t *err) {
    cJSON *d = cJSON_ParseWithLength(body, n);
    if (!d) return seer_err_set(err, SEER_EPARSE, "the response is not JSON");
    int rc = SEER_HARNESS_FINISHED;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(d, "error");
    if (e && !cJSON_IsNull(e)) {
        if (a->provider == SEER_HARNESS_OPENAI) {
            rc = openai_error(a, e);
        } else {
            cJSON_Delete(a->error);
            a->error = cJSON_Duplicate(e, 1);
            a->retryable = retryable_type(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "type")));
            rc = SEER_HARNESS_ESTREAM;
        }
        cJSON_Delete(d);
        return rc;
    }
    if (a->provider == SEER_HARNESS_OPENAI) {
        const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "choices"), 0);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(choice, "message");
        /* A whole message reads like one big delta with every tool call complete. */
        cJSON *chunk = cJSON_CreateObject();
        cJSON *choices = cJSON_AddArrayToObject(chunk, "choices");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, c);
        cJSON *delta = cJSON_Duplicate(m, 1);
        cJSON *tcs = cJSON_GetObjectItemCaseSensitive(delta, "tool_calls");
        int k = 0;
        cJSON *tc;
        cJSON_ArrayForEach(tc, tcs) {
            cJSON_DeleteItemFromObjectCaseSensitive(tc, "index");
            cJSON_AddNumberToObject(tc, "index", k++);
        }
        cJSON_AddItemToObject(c, "delta", delta ? delta : cJSON_CreateObject());
        cJSON_AddItemToObject(c, "finish_reason", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(choice, "finish_reason"), 1));
        cJSON_AddItemToObject(chunk, "usage", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(d, "usage"), 1));
        cJSON_AddItemToObject(chunk, "model", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(d, "model"), 1));
        cJSON_AddItemToObject(chunk, "id", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(d, "id"), 1));
        rc = openai_chunk(a, chunk, 0, out, err); /* the body itself is capped (stream.c) */
        cJSON_Delete(chunk);
        if (rc == SEER_HARNESS_MORE) {
            openai_fill_ids(a);
            openai_finish(a, out);
            rc = SEER_HARNESS_FINISHED;
        }
    } else {
        set_str(&a->model, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "model")));
        set_str(&a->id, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "id")));
        set_str(&a->stop_reason, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "stop_reason")));
        merge_usage(a, cJSON_GetObjectItemCaseSensitive(d, "usage"));
        const cJSON *b;
        size_t i = 0;
        cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(d, "content")) {
            slot_t *s = slot_at(a, i);
            if (!s) break;
            s->block = cJSON_Duplicate(b, 1);
            const char *bt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "type"));
            const char *t = NULL;
            if (bt && strcmp(bt, "text") == 0) t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "text"));
            if (bt && strcmp(bt, "thinking") == 0) t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "thinking"));
            if (t) {
                if (charge(a, strlen(t), err) < 0) {
                    cJSON_Delete(d);
                    return SEER_HARNESS_ETOOBIG;
                }
                hbuf_add(&s->text, t, strlen(t));
                emit_delta(out, strcmp(bt, "text") == 0 ? "text_delta" : "thinking_delta", i, t, strlen(t));
            }
            close_slot(a, i, out);
            i++;
        }
        a->finished = 1;
    }
    cJSON_Delete(d);
    return rc;
}

cJSON *seer_harness_asm_result(seer_harness_asm_t *a) {
    cJSON *r = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(r, "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(m, "content");
    for (size_t i = 0; i < a->n; i++) {
        cJSON *b = materialize(&a->slots[i], !a->finished);
        if (b) cJSON_AddItemToArray(content, b);
    }
    if (a->stop_reason)
        cJSON_AddStringToObject(r, "stop_reason", a->stop_reason);
    else
        cJSON_AddNullToObject(r, "stop_reason");
    if (a->stop_sequence && !cJSON_IsNull(a->stop_sequence))
        cJSON_AddItemToObject(r, "stop_sequence", cJSON_Duplicate(a->stop_sequence, 1));
    cJSON_AddItemToObject(r, "usage", cJSON_Duplicate(a->usage, 1));
    if (a->model) cJSON_AddStringToObject(r, "model", a->model);
    if (a->id) cJSON_AddStringToObject(r, "id", a->id);
    return r;
}
