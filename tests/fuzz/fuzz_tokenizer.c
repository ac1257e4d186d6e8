/* libFuzzer target: the tokenizer.json loader, then encode and decode of fixed hard strings
 * (whitespace runs, CJK, emoji, combining marks, special tokens inside text) with whatever
 * tokenizer the input describes. Any input must load or fail with an error; a loaded
 * tokenizer must encode and decode without crashing, and decode only ids it gave. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const texts[] = {
    "Hello world, tokenizers!", "  two  spaces\tand\nnewline  ", "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82",
    "e\xcc\x81 combining", "<s>special</s> inside <|endoftext|> text", "",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    seer_tokenizer_t *t;
    seer_err_t err;
    if (seer_tokenizer_load_json(&t, (const char *)data, size, "fuzz.json", &err) < 0) return 0;
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (seer_tokenizer_encode(t, texts[i], strlen(texts[i]), (int)(i & 1), &ids, &n, &err) == 0) {
            char *out = NULL;
            size_t len = 0;
            if (seer_tokenizer_decode(t, ids, n, 0, &out, &len, &err) == 0) free(out);
            free(ids);
        }
    }
    seer_tokenizer_free(t);
    return 0;
}
