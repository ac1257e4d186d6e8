/* libFuzzer target: the tree-less JSON check (engine/json/check.c) and the value counter
 * (seer_json_count_values) against cJSON. Whatever the
 * check accepts, cJSON must parse (the check is never looser than the parser seer uses, and
 * stricter where a browser's JSON.parse is: "+1", "01"); a capture must lie inside the input. */
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "json/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* cJSON's nodes in a tree: what seer_json_count_values must never undercount */
static size_t nodes(const cJSON *v) {
    size_t k = 0;
    for (; v; v = v->next) k += 1 + nodes(v->child);
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const path[] = { "metadata", "seer", "path" };
    const char *s = (const char *)data, *cap;
    size_t bad = 0, n;
    /* the value counter (engine/json/json.c) bounds cJSON's tree before the host parses a model
     * folder's or a hub's JSON: for any text cJSON parses it counts at least cJSON's nodes */
    size_t counted = seer_json_count_values(s, size);
    cJSON *t = cJSON_ParseWithLength(s, size);
    if (t) {
        if (counted < nodes(t)) __builtin_trap();
        cJSON_Delete(t);
    }
    int r = seer_json_check(s, size, &bad, path, 3, &cap, &n);
    if (r != 0) {
        if (bad > size) __builtin_trap();
        return 0;
    }
    if (cap && (cap < s || cap + n > s + size)) __builtin_trap();
    /* cJSON stops at a NUL; the check refuses a raw NUL anywhere, so the whole input is there.
     * The one place the check is looser: an unpaired UTF-16 surrogate escape (\uDC00, \uD800
     * not followed by a low one), which a browser's JSON.parse takes (the check's purpose: the
     * live view) and cJSON refuses. */
    cJSON *v = cJSON_ParseWithLength(s, size);
    if (!v) {
        for (size_t i = 0; i + 2 < size; i++)
            if (s[i] == '\\' && s[i + 1] == 'u' && (s[i + 2] == 'd' || s[i + 2] == 'D')) return 0;
        __builtin_trap();
    }
    cJSON_Delete(v);
    return 0;
}
