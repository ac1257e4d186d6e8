/* seer.core.tokenizer: Hugging Face `tokenizers` semantics for the BPE tokenizers seer targets
 * (byte-level BPE as in GPT-2, Llama 3, Qwen 2; SentencePiece-style BPE with byte fallback as
 * in Llama 2, Mistral, Gemma), loaded from tokenizer.json or GPT-2's vocab.json + merges.txt.
 * Configuration files around it (tokenizer_config.json, chat templates) are read in Lua
 * (lua/seer/tokenizer.lua). */
#ifndef SEER_TOKENIZER_H
#define SEER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "../seer.h"

/* A loaded tokenizer. Encoding uses scratch space and a word cache inside it, so one object is
 * used by one thread at a time (a Lua state is single-threaded). */
typedef struct seer_tokenizer seer_tokenizer_t;

/* Loads a tokenizer.json file. Unsupported component types and malformed files are
 * SEER_EINVAL / SEER_EPARSE with a message naming the file and the JSON path. */
/* The largest tokenizer.json, vocab.json or merges.txt read (the biggest real ones are tens of
 * MB: Gemma 3's tokenizer.json is 33 MB). */
#define SEER_TOKENIZER_MAX_FILE (256u << 20)
/* Reads a file of a model folder for the tokenizer's Lua side (tokenizer_config.json, special
 * tokens, chat templates) as the loader reads its own: seer_st_open_confined, at most max_bytes.
 * *out is malloc'ed (NUL-terminated), the caller frees it. SEER_ENOTFOUND when it is absent. */
int seer_tokenizer_read_model_file(const char *path, size_t max_bytes, char **out, size_t *len, seer_err_t *err);
int seer_tokenizer_load_file(seer_tokenizer_t **out, const char *path, seer_err_t *err);
/* The same from text in memory; `name` is what messages call it (e.g. "tokenizer.json"). */
int seer_tokenizer_load_json(seer_tokenizer_t **out, const char *text, size_t len,
                             const char *name, seer_err_t *err);
/* GPT-2's original files: byte-level BPE, ByteLevel pre-tokenizer and decoder, and
 * `<|endoftext|>` as a special added token when the vocabulary has it. */
int seer_tokenizer_load_gpt2(seer_tokenizer_t **out, const char *vocab_path,
                             const char *merges_path, seer_err_t *err);
void seer_tokenizer_free(seer_tokenizer_t *tok);

/* Encodes UTF-8 text (SEER_EINVAL if it is not valid UTF-8). *ids is malloc'd (free it);
 * add_special applies the post-processor (e.g. BOS). */
int seer_tokenizer_encode(seer_tokenizer_t *tok, const char *text, size_t len, int add_special,
                          int32_t **ids, size_t *n_ids, seer_err_t *err);
/* Decodes ids into malloc'd, NUL-terminated UTF-8 text (invalid byte sequences become U+FFFD,
 * as in Hugging Face). An id outside the vocabulary is SEER_EINVAL. */
int seer_tokenizer_decode(seer_tokenizer_t *tok, const int32_t *ids, size_t n_ids,
                          int skip_special, char **text, size_t *text_len, seer_err_t *err);

/* -1 when the token is unknown. Added tokens are looked up first, as in Hugging Face. */
int32_t seer_tokenizer_token_to_id(const seer_tokenizer_t *tok, const char *s, size_t len);
/* NULL when the id has no token; *len gets the length. */
const char *seer_tokenizer_id_to_token(const seer_tokenizer_t *tok, int32_t id, size_t *len);
/* One more than the largest id of the vocabulary and the added tokens. */
int32_t seer_tokenizer_vocab_size(const seer_tokenizer_t *tok);
/* 1 if id is an added token marked special. */
int seer_tokenizer_is_special(const seer_tokenizer_t *tok, int32_t id);

/* GPT-2's byte-to-unicode table (byte-level BPE): the code point standing for byte b, and
 * the inverse (-1 for a code point that stands for no byte). Exposed for tests. */
uint32_t seer_tokenizer_byte_to_unicode(uint8_t b);
int seer_tokenizer_unicode_to_byte(uint32_t cp);

/* lua_CFunction: pushes the module table; the host registers it as
 * package.preload["seer.core.tokenizer"]. */
int seer_tokenizer_luaopen(lua_State *L);

#endif
