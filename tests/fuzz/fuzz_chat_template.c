/* libFuzzer target: the Jinja chat-template interpreter. The input is the template; the
 * variables are a fixed conversation like the ones apply_chat_template passes. Tight limits
 * keep each run short; any input must render or fail with an error, never crash or hang. */
#include <stdint.h>
#include <stdlib.h>

#include <cJSON.h>

#include "tokenizer/chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static cJSON *vars;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!vars) {
        vars = cJSON_Parse("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                           "{\"role\": \"user\", \"content\": \"Hi \\u00e9\"},"
                           "{\"role\": \"assistant\", \"content\": \"Hello\", \"tool_calls\": [{\"type\": \"function\","
                           "\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null]}}}]},"
                           "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"more\"}]}],"
                           "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
                           "\"tools\": null, \"documents\": null}");
    }
    seer_chat_template_limits_t lim = {0};
    lim.max_output = 1 << 20;
    lim.max_memory = 64u << 20;
    lim.max_iters = 20000;
    lim.max_depth = 64;
    lim.max_work = 2000000; /* a render that runs long under the default budget would slow the fuzzer */
    char *out = NULL;
    size_t out_len = 0;
    seer_err_t err;
    if (seer_chat_template_render_ex((const char *)data, size, vars, &lim, &out, &out_len, &err) == 0) free(out);
    return 0;
}
