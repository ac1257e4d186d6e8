/* seer.core.json: Lua values to JSON text and back, on top of cJSON, with errors that name the
 * JSON path or the byte offset; and the UTF-8 validator that every subsystem taking text from
 * outside (files, sockets, tokenizers) reuses. */
#ifndef SEER_JSON_H
#define SEER_JSON_H

#include <stddef.h>

#include <lua.h>

/* Registry fields holding the json.null sentinel and the metatables that mark a table as a
 * JSON array or object, so other C code can recognise them (lua_getfield(L,
 * LUA_REGISTRYINDEX, SEER_JSON_NULL_KEY) then lua_rawequal). They exist once
 * seer_json_luaopen has run, and stay the same values if the module is opened again. */
#define SEER_JSON_NULL_KEY "seer.json.null"
#define SEER_JSON_ARRAY_MT_KEY "seer.json.array"
#define SEER_JSON_OBJECT_MT_KEY "seer.json.object"

/* Deepest nesting of arrays and objects that encode and decode accept (cJSON's own limit). */
#define SEER_JSON_MAX_DEPTH 1000

/* lua_CFunction: pushes the module table (encode, decode, pretty, array, object, is_array,
 * is_object, null). The host registers it as package.preload["seer.core.json"]. */
int seer_json_luaopen(lua_State *L);

/* 1 if s[0..n) is well-formed UTF-8 (no overlong forms, no surrogates U+D800..DFFF, nothing
 * above U+10FFFF, no truncated sequence); otherwise 0, and *bad_offset (if not NULL) is the
 * offset of the first byte of the first ill-formed sequence. NUL bytes are valid. */
int seer_utf8_validate(const char *s, size_t n, size_t *bad_offset);

/* 0 if s[0..n) is exactly one JSON value (RFC 8259; whitespace around it allowed) in
 * well-formed UTF-8, checked without building anything; else -1 (or -2 when a whole value is
 * followed by more text) and *bad_offset (if not NULL) the byte where it stops being JSON (or
 * the first ill-formed UTF-8 byte). With path (path_n
 * object keys from the top) and cap, *cap and *cap_n get the raw text between the quotes of the
 * string value found there (escapes left as they are), or NULL when there is none. Nesting
 * deeper than SEER_JSON_MAX_DEPTH is refused. */
int seer_json_check(const char *s, size_t n, size_t *bad_offset, const char *const *path, size_t path_n,
                    const char **cap, size_t *cap_n);

/* The number of JSON values in s[0..n), counted as json.decode's max_values counts them
 * (arrays, objects, strings and object keys, numbers, and true/false/null once each), in one
 * pass that allocates nothing and checks nothing else; s need not end in a NUL. For any text
 * cJSON parses, the count is at least the number of nodes cJSON builds, so a caller that
 * refuses a count above its limit before cJSON_Parse bounds the tree (a node costs ~80 bytes:
 * "[[],[],..." is 27 bytes of memory per byte of text). */
size_t seer_json_count_values(const char *s, size_t n);

/* Limits on the values of the JSON files the host reads from a model folder (hostile: docs/
 * security.md), counted with seer_json_count_values (C) or json.decode's max_values (Lua, as
 * json.MODEL_MAX_VALUES) before any tree is built. Several times the largest real files:
 * - a safetensors header: ~13 values per tensor, keys counted (a 0.5B Llama's 290 tensors hold
 *   3,856), so a 100k-tensor header holds ~1.3M;
 * - config.json, generation_config.json, tokenizer_config.json, special_tokens_map.json,
 *   adapter_config.json, model.safetensors.index.json: gemma 3's tokenizer_config.json (6k
 *   added tokens) holds 89,855; an index holds ~2 per tensor (DeepSeek V3's 92k: ~184k);
 * - tokenizer.json and vocab.json: GPT-2's holds 150,590 and Mistral v0.3's 136,216 (~0.07 a
 *   byte), so the largest published ones (gemma 3's 262k vocabulary, 33 MB) hold ~2.3M. */
#define SEER_JSON_MAX_VALUES_ST_HEADER ((size_t)4000000)
#define SEER_JSON_MAX_VALUES_CONFIG ((size_t)1000000)
#define SEER_JSON_MAX_VALUES_TOKENIZER ((size_t)8000000)

/* cJSON's strings end at NUL, yet it decodes "\u0000" into the string's buffer and goes on, so
 * the bytes are there and only the length is lost. For a tree cJSON parsed from text[0..n),
 * these recover it: seer_json_nul_bound is an upper bound of the strings (keys and values) that
 * hold a "\u0000"; seer_json_nul_strings fills out (cap entries) with those strings' buffers and
 * true lengths, sorted by buffer, and returns how many; seer_json_strlen gives a string's true
 * length (strlen unless it is listed). */
typedef struct cJSON cJSON;
typedef struct seer_json_len {
    const char *p;
    size_t len;
} seer_json_len_t;
size_t seer_json_nul_bound(const char *text, size_t n);
size_t seer_json_nul_strings(const char *text, size_t n, const cJSON *tree, seer_json_len_t *out, size_t cap);
size_t seer_json_strlen(const seer_json_len_t *v, size_t nv, const char *p);

#endif
