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

/* Default limits: a template is untrusted input, so every render is bounded. The iteration cap
 * bounds how often a loop body runs, not what one run costs, so every render also has a work
 * budget: each operation charges what it costs (one unit per byte a string operation scans or
 * copies, three per code point decoded one by one, one per list or dict element made, eight per
 * comparison of two values, sixteen per expression node, statement, loop iteration, call or match
 * found, 1024 per float formatted). A render may spend max_work units plus
 * SEER_CHAT_TEMPLATE_WORK_PER_VAR_BYTE units per byte of its variables (a long conversation
 * earns a proportional allowance; the template cannot raise its own budget). Real templates
 * spend well under 1% of the default (the fixture families' golden renders at most ~30,000
 * units); at the default a render ends within about half a second of one core at worst. Past it
 * the render fails with "limit: the render exceeded its work budget (N units): ...". */
#define SEER_CHAT_TEMPLATE_MAX_OUTPUT (64u << 20)   /* bytes of rendered text (and any string) */
#define SEER_CHAT_TEMPLATE_MAX_MEMORY (512u << 20)  /* bytes of interpreter memory */
#define SEER_CHAT_TEMPLATE_MAX_ITERS 1000000u       /* loop iterations, all loops together */
#define SEER_CHAT_TEMPLATE_MAX_DEPTH 200u           /* nesting of syntax and of macro calls */
#define SEER_CHAT_TEMPLATE_MAX_WORK 250000000u      /* work units, on top of the allowance below */
#define SEER_CHAT_TEMPLATE_WORK_PER_VAR_BYTE 32u    /* work units per byte of the variables */

typedef struct seer_chat_template_limits {
    size_t max_output;  /* 0 means the default above, for each field */
    size_t max_memory;
    size_t max_iters;
    size_t max_depth;
    size_t max_work;    /* the fixed part of the work budget */
} seer_chat_template_limits_t;

/* Renders tmpl[0..tmpl_len) with the variables of the cJSON object vars (messages,
 * add_generation_prompt, bos_token, tools, any extras; NULL means none). On success returns 0
 * and *out is a malloc'd NUL-terminated text of *out_len bytes (the caller frees it). On failure
 * returns a negative SEER_E* and err->msg says why: "syntax error at line L, column C: ...",
 * "raise_exception: <msg>" when the template raised, "undefined: ...", "type error: ...", or
 * "limit: ..." when a bound was hit ("limit: the render exceeded its work budget (N units)..." when
 * it ran out of work budget). Never aborts, never loops without bound: every loop of the
 * interpreter charges the work budget, so a render ends after a bounded amount of work. */
int seer_chat_template_render(const char *tmpl, size_t tmpl_len, const cJSON *vars, char **out,
                              size_t *out_len, seer_err_t *err);

/* The same with explicit limits (lim may be NULL). */
int seer_chat_template_render_ex(const char *tmpl, size_t tmpl_len, const cJSON *vars,
                                 const seer_chat_template_limits_t *lim, char **out,
                                 size_t *out_len, seer_err_t *err);

/* lua_CFunction: pushes the module table
 * { render = function(template, vars[, max_work]) -> string, work units spent }.
 * The host registers it as package.preload["seer.core.chat_template"]. */
int seer_chat_template_luaopen(lua_State *L);

#endif
