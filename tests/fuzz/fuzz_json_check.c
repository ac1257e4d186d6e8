/* libFuzzer target: the tree-less JSON check (engine/json/check.c) against cJSON. Whatever the
 * check accepts, cJSON must parse (the check is never looser than the parser seer uses, and
 * stricter where a browser's JSON.parse is: "+1", "01"); a capture must lie inside the input. */
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "json/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const path[] = { "metadata", "seer", "path" };
    const char *s = (const char *)data, *cap;
    size_t bad = 0, n;
    int r = seer_json_check(s, size, &bad, path, 3, &cap, &n);
    if (r != 0) {
        if (bad > size) __builtin_trap();
        return 0;
    }
    if (cap && (cap < s || cap + n > s + size)) __builtin_trap();
    /* cJSON stops at a NUL; the check refuses a raw NUL anywhere, so the whole input is there */
    cJSON *v = cJSON_ParseWithLength(s, size);
    if (!v) __builtin_trap();
    cJSON_Delete(v);
    return 0;
}
