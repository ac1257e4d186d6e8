/* Request bodies: the canonical conversation (Anthropic's message shape, which the agent loop
 * keeps whatever the provider) into an Anthropic Messages body or an OpenAI chat-completions
 * body. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_private.h"

static const char *str_of(const cJSON *o, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* Drops the fields the harness keeps for itself (seer_invalid_input, ...) from a block. */
static void strip_private(cJSON *block) {
    cJSON *f = block ? block->child : NULL;
    while (f) {
        cJSON *next = f->next;
        if (f->string && strncmp(f->string, "seer_", 5) == 0) cJSON_Delete(cJSON_DetachItemViaPointer(block, f));
        f = next;
    }
}

static cJSON *ephemeral(void) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "type", "ephemeral");
    return c;
}

static void merge_params(cJSON *body, const cJSON *params) {
    const cJSON *p;
    cJSON_ArrayForEach(p, params) {
        if (!p->string) continue;
        cJSON_DeleteItemFromObjectCaseSensitive(body, p->string);
        cJSON_AddItemToObject(body, p->string, cJSON_Duplicate(p, 1));
    }
}

/* ---- Anthropic ------------------------------------------------------------------------------- */

static int anthropic_body(const cJSON *req, cJSON *body, seer_err_t *err) {
    int cache = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(req, "cache"));
    const char *system = str_of(req, "system");
    if (system && *system) {
        cJSON *sys = cJSON_AddArrayToObject(body, "system");
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", system);
        if (cache) cJSON_AddItemToObject(b, "cache_control", ephemeral());
        cJSON_AddItemToArray(sys, b);
    }
    cJSON *msgs = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(req, "messages"), 1);
    if (!cJSON_IsArray(msgs)) {
        cJSON_Delete(msgs);
        return seer_err_set(err, SEER_EINVAL, "harness: the request has no messages array");
    }
    cJSON *m, *last_user = NULL;
    cJSON_ArrayForEach(m, msgs) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        cJSON *b;
        cJSON_ArrayForEach(b, content) strip_private(b);
        const char *role = str_of(m, "role");
        if (role && strcmp(role, "user") == 0) last_user = m;
    }
    if (cache && last_user) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(last_user, "content");
        if (cJSON_IsString(content) && *content->valuestring) {
            cJSON *arr = cJSON_CreateArray();
            cJSON *b = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "type", "text");
            cJSON_AddStringToObject(b, "text", content->valuestring);
            cJSON_AddItemToArray(arr, b);
            cJSON_ReplaceItemInObjectCaseSensitive(last_user, "content", arr);
            content = arr;
        }
        int n = cJSON_GetArraySize(content);
        cJSON *lb = n > 0 ? cJSON_GetArrayItem(content, n - 1) : NULL;
        const char *lt = str_of(lb, "type");
        const char *ltext = str_of(lb, "text");
        int empty_text = lt && strcmp(lt, "text") == 0 && (!ltext || !*ltext);
        if (lb && lt && !empty_text && !cJSON_GetObjectItemCaseSensitive(lb, "cache_control"))
            cJSON_AddItemToObject(lb, "cache_control", ephemeral());
    }
    cJSON_AddItemToObject(body, "messages", msgs);
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    int nt = cJSON_GetArraySize(tools);
    if (nt > 0) {
        cJSON *out = cJSON_AddArrayToObject(body, "tools");
        int i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToObject(o, "name", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t, "name"), 1));
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "description");
            if (cJSON_IsString(d)) cJSON_AddItemToObject(o, "description", cJSON_Duplicate(d, 1));
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
            cJSON_AddItemToObject(o, "input_schema", cJSON_IsObject(s) ? cJSON_Duplicate(s, 1) : cJSON_Parse("{\"type\":\"object\"}"));
            if (cache && ++i == nt) cJSON_AddItemToObject(o, "cache_control", ephemeral());
            cJSON_AddItemToArray(out, o);
        }
    }
    return 0;
}

/* ---- OpenAI-compatible --------------------------------------------------------------------------- */

static cJSON *text_message(const char *role, const char *text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", text);
    return m;
}

static void add_image_part(cJSON *parts, const cJSON *img) {
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(img, "source");
    const char *mt = str_of(src, "media_type"), *data = str_of(src, "data");
    if (!data) return;
    char *url = NULL;
    if (asprintf(&url, "data:%s;base64,%s", mt ? mt : "image/png", data) < 0) return;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "image_url");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(p, "image_url"), "url", url);
    free(url);
    cJSON_AddItemToArray(parts, p);
}

/* A user message's blocks: tool results become tool messages (in order, as the API wants them
 * right after the assistant's calls); text and images follow in one user message. */
static void openai_user(cJSON *out, const cJSON *content) {
    if (cJSON_IsString(content)) {
        cJSON_AddItemToArray(out, text_message("user", content->valuestring));
        return;
    }
    cJSON *parts = cJSON_CreateArray();
    hbuf_t text = {0};
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const char *t = str_of(b, "type");
        if (!t) continue;
        if (strcmp(t, "tool_result") == 0) {
            hbuf_t r = {0};
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "is_error"))) hbuf_add(&r, "Error: ", 7);
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(b, "content");
            if (cJSON_IsString(c)) {
                hbuf_add(&r, c->valuestring, strlen(c->valuestring));
            } else {
                const cJSON *cb;
                int images = 0;
                cJSON_ArrayForEach(cb, c) {
                    const char *ct = str_of(cb, "type");
                    if (ct && strcmp(ct, "text") == 0 && str_of(cb, "text")) {
                        if (r.n && r.p[r.n - 1] != ' ') hbuf_add(&r, "\n", 1);
                        hbuf_add(&r, str_of(cb, "text"), strlen(str_of(cb, "text")));
                    } else if (ct && strcmp(ct, "image") == 0) {
                        if (!images++) {
                            char note[160];
                            snprintf(note, sizeof note, "(the images of tool call %.80s follow)",
                                     str_of(b, "tool_use_id") ? str_of(b, "tool_use_id") : "?");
                            cJSON *p = cJSON_CreateObject();
                            cJSON_AddStringToObject(p, "type", "text");
                            cJSON_AddStringToObject(p, "text", note);
                            cJSON_AddItemToArray(parts, p);
                        }
                        add_image_part(parts, cb);
                    }
                }
                if (images) {
                    char note[64];
                    snprintf(note, sizeof note, "%s[%d image(s) follow in the next message]", r.n ? "\n" : "", images);
                    hbuf_add(&r, note, strlen(note));
                }
            }
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "tool");
            cJSON_AddStringToObject(m, "tool_call_id", str_of(b, "tool_use_id") ? str_of(b, "tool_use_id") : "");
            cJSON_AddStringToObject(m, "content", r.p ? r.p : "");
            free(r.p);
            cJSON_AddItemToArray(out, m);
        } else if (strcmp(t, "text") == 0 && str_of(b, "text")) {
            if (text.n) hbuf_add(&text, "\n", 1);
            hbuf_add(&text, str_of(b, "text"), strlen(str_of(b, "text")));
        } else if (strcmp(t, "image") == 0) {
            add_image_part(parts, b);
        }
    }
    if (cJSON_GetArraySize(parts) > 0) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        if (text.n) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "text");
            cJSON_AddStringToObject(p, "text", text.p);
            cJSON_InsertItemInArray(parts, 0, p);
        }
        cJSON_AddItemToObject(m, "content", parts);
        cJSON_AddItemToArray(out, m);
    } else {
        cJSON_Delete(parts);
        if (text.n) cJSON_AddItemToArray(out, text_message("user", text.p));
    }
    free(text.p);
}

static void openai_assistant(cJSON *out, const cJSON *content) {
    if (cJSON_IsString(content)) {
        cJSON_AddItemToArray(out, text_message("assistant", content->valuestring));
        return;
    }
    hbuf_t text = {0};
    cJSON *calls = cJSON_CreateArray();
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const char *t = str_of(b, "type");
        if (t && strcmp(t, "text") == 0 && str_of(b, "text")) {
            hbuf_add(&text, str_of(b, "text"), strlen(str_of(b, "text")));
        } else if (t && strcmp(t, "tool_use") == 0) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "id", str_of(b, "id") ? str_of(b, "id") : "");
            cJSON_AddStringToObject(c, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "name", str_of(b, "name") ? str_of(b, "name") : "");
            const char *raw = str_of(b, "seer_invalid_input");
            if (raw) {
                cJSON_AddStringToObject(fn, "arguments", raw);
            } else {
                char *args = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(b, "input"));
                cJSON_AddStringToObject(fn, "arguments", args ? args : "{}");
                free(args);
            }
            const cJSON *extra = cJSON_GetObjectItemCaseSensitive(b, "seer_extra_content");
            if (extra) cJSON_AddItemToObject(c, "extra_content", cJSON_Duplicate(extra, 1));
            cJSON_AddItemToArray(calls, c);
        }
        /* thinking blocks have no place in chat completions */
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    if (text.n)
        cJSON_AddStringToObject(m, "content", text.p);
    else
        /* "" rather than null beside tool calls: OpenAI takes either, but some OpenAI-compatible
         * servers (llama-cpp-python) answer 500 to a null content. */
        cJSON_AddStringToObject(m, "content", "");
    if (cJSON_GetArraySize(calls))
        cJSON_AddItemToObject(m, "tool_calls", calls);
    else
        cJSON_Delete(calls);
    free(text.p);
    cJSON_AddItemToArray(out, m);
}

static int openai_body(const cJSON *req, cJSON *body, seer_err_t *err) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages");
    if (!cJSON_IsArray(msgs)) return seer_err_set(err, SEER_EINVAL, "harness: the request has no messages array");
    cJSON *out = cJSON_AddArrayToObject(body, "messages");
    const char *system = str_of(req, "system");
    if (system && *system) cJSON_AddItemToArray(out, text_message("system", system));
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const char *role = str_of(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (role && strcmp(role, "assistant") == 0)
            openai_assistant(out, content);
        else if (role && strcmp(role, "user") == 0)
            openai_user(out, content);
        else
            return seer_err_set(err, SEER_EINVAL, "harness: a message has role '%s' (user or assistant expected)", role ? role : "?");
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    if (cJSON_GetArraySize(tools) > 0) {
        cJSON *ot = cJSON_AddArrayToObject(body, "tools");
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(o, "function");
            cJSON_AddItemToObject(fn, "name", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t, "name"), 1));
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "description");
            if (cJSON_IsString(d)) cJSON_AddItemToObject(fn, "description", cJSON_Duplicate(d, 1));
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
            cJSON_AddItemToObject(fn, "parameters", cJSON_IsObject(s) ? cJSON_Duplicate(s, 1) : cJSON_Parse("{\"type\":\"object\"}"));
            cJSON_AddItemToArray(ot, o);
        }
    }
    if (!cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(req, "stream_usage")))
        cJSON_AddTrueToObject(cJSON_AddObjectToObject(body, "stream_options"), "include_usage");
    return 0;
}

char *seer_harness_build_body(const cJSON *req, seer_err_t *err) {
    const char *provider = str_of(req, "provider");
    const char *model = str_of(req, "model");
    if (!model || !*model) {
        seer_err_set(err, SEER_EINVAL, "harness: the request has no model");
        return NULL;
    }
    cJSON *body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "model", model);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(req, "max_tokens");
    int rc;
    if (provider && strcmp(provider, "anthropic") == 0) {
        cJSON_AddNumberToObject(body, "max_tokens", cJSON_IsNumber(mt) ? mt->valuedouble : 8192);
        rc = anthropic_body(req, body, err);
    } else if (provider && strcmp(provider, "openai") == 0) {
        if (cJSON_IsNumber(mt)) {
            const char *field = str_of(req, "max_tokens_field");
            cJSON_AddNumberToObject(body, field ? field : "max_tokens", mt->valuedouble);
        }
        rc = openai_body(req, body, err);
    } else {
        rc = seer_err_set(err, SEER_EINVAL, "harness: unknown provider kind '%s' (anthropic or openai)", provider ? provider : "?");
    }
    if (rc < 0) {
        cJSON_Delete(body);
        return NULL;
    }
    cJSON_AddTrueToObject(body, "stream");
    merge_params(body, cJSON_GetObjectItemCaseSensitive(req, "params"));
    char *text = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    if (!text) seer_err_set(err, SEER_ENOMEM, "harness: out of memory");
    return text;
}
