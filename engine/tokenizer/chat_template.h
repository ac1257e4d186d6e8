/* Chat templates: a C interpreter for the subset of Jinja2 that Hugging Face chat templates use,
 * rendering byte for byte what transformers' apply_chat_template renders (sandboxed Jinja2 with
 * trim_blocks, lstrip_blocks, loopcontrols, raise_exception, strftime_now and a tojson filter
 * that keeps non-ASCII text). Pure C with no Lua in the render path, so it can be fuzzed. */
#ifndef SEER_CHAT_TEMPLATE_H
#define SEER_CHAT_TEMPLATE_H

#include <stddef.h>

#include <cjson/cJSON.h>
#include <lua.h>

#include "seer.h"

/* Default limits: a template is untrusted input, so every render is bounded. */
#define SEER_CHAT_TEMPLATE_MAX_OUTPUT (64u << 20)   /* bytes of rendered text (and any string) */
#define SEER_CHAT_TEMPLATE_MAX_MEMORY (512u << 20)  /* bytes of interpreter memory */
#define SEER_CHAT_TEMPLATE_MAX_ITERS 1000000u       /* loop iterations, all loops together */
#define SEER_CHAT_TEMPLATE_MAX_DEPTH 200u           /* nesting of syntax and of macro calls */

typedef struct seer_chat_template_limits {
    size_t max_output;  /* 0 means the default above, for each field */
    size_t max_memory;
    size_t max_iters;
    size_t max_depth;
} seer_chat_template_limits_t;

/* Renders tmpl[0..tmpl_len) with the variables of the cJSON object vars (messages,
 * add_generation_prompt, bos_token, tools, any extras; NULL means none). On success returns 0
 * and *out is a malloc'd NUL-terminated text of *out_len bytes (the caller frees it). On failure
 * returns a negative SEER_E* and err->msg says why: "syntax error at line L, column C: ...",
 * "raise_exception: <msg>" when the template raised, "undefined: ...", "type error: ...", or
 * "limit: ..." when a bound was hit. Never aborts, never loops without bound. */
int seer_chat_template_render(const char *tmpl, size_t tmpl_len, const cJSON *vars, char **out,
                              size_t *out_len, seer_err_t *err);

/* The same with explicit limits (lim may be NULL). */
int seer_chat_template_render_ex(const char *tmpl, size_t tmpl_len, const cJSON *vars,
                                 const seer_chat_template_limits_t *lim, char **out,
                                 size_t *out_len, seer_err_t *err);

/* lua_CFunction: pushes the module table { render = function(template, vars) -> string }.
 * The host registers it as package.preload["seer.core.chat_template"]. */
int seer_chat_template_luaopen(lua_State *L);

#endif
