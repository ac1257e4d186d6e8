/* Private to engine/tokenizer: the Jinja2-subset interpreter behind chat_template.h. Kept apart
 * from the Lua binding so a fuzzer can link it with cJSON alone. */
#ifndef SEER_TOKENIZER_JINJA_H
#define SEER_TOKENIZER_JINJA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "seer.h"
#include "tokenizer/chat_template.h"

/* Lexes, parses and renders in one call; the contract is seer_chat_template_render_ex's.
 * work_used (may be NULL) receives the work units the render spent, on success or failure. */
int seer_jinja_render(const char *tmpl, size_t tmpl_len, const cJSON *vars,
                      const seer_chat_template_limits_t *lim, char **out, size_t *out_len,
                      size_t *work_used, seer_err_t *err);

#endif
