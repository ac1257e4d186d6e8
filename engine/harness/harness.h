/* The agent harness core: LLM provider streams (the Anthropic Messages API and OpenAI-compatible
 * chat completions) over libcurl's multi interface, the SSE parser, the reassembly of streamed
 * deltas into whole assistant messages, the retry policy, a replay "provider" that plays recorded
 * messages, and the JSONL transcript writer that redacts secrets. The agent loop itself (turns,
 * tools over MCP, limits) is coordinated from Lua (lua/seer/harness.lua) over these
 * non-blocking objects; seer.core.harness (lua_harness.c) is the binding.
 *
 * Threads: a pool and its streams belong to one thread; nothing here takes a lock. */
#ifndef SEER_HARNESS_H
#define SEER_HARNESS_H

#include <stddef.h>

#include <cJSON.h>

#include "../seer.h"

/* ---- SSE ---------------------------------------------------------------------------------------
 * An incremental text/event-stream parser: bytes go in split anywhere (also inside a CRLF), and
 * each complete event comes out through the callback with its name ("" when the stream gave
 * none) and its data lines joined by '\n'. Comments and id/retry fields are skipped. An event
 * bigger than max_event_bytes (0: 64 MiB) fails the feed. A non-zero callback return stops the
 * feed and is returned. */
typedef int (*seer_harness_sse_cb)(void *ud, const char *event, const char *data, size_t n);
typedef struct seer_harness_sse seer_harness_sse_t;
seer_harness_sse_t *seer_harness_sse_new(seer_harness_sse_cb cb, void *ud, size_t max_event_bytes);
int seer_harness_sse_feed(seer_harness_sse_t *p, const char *buf, size_t n, seer_err_t *err);
void seer_harness_sse_free(seer_harness_sse_t *p);

/* ---- reassembly ----------------------------------------------------------------------------------
 * One response of a provider, event by event, into the canonical assistant message (Anthropic's
 * shape for every provider: {role, content[text|thinking|redacted_thinking|tool_use ...]}), with
 * stop_reason and usage ({input_tokens, output_tokens, cache_creation_input_tokens,
 * cache_read_input_tokens}). Events for the consumer (text_delta, thinking_delta, tool_use_start,
 * block) are appended to the `out` array as they become known. A tool_use whose streamed input
 * is not a JSON object keeps input {} and carries seer_invalid_input (the raw text) and
 * seer_input_error (why), so the loop can tell the model instead of calling the tool. */
enum { SEER_HARNESS_ANTHROPIC = 1, SEER_HARNESS_OPENAI = 2, SEER_HARNESS_REPLAY = 3 };

enum {
    SEER_HARNESS_MORE = 0,     /* keep feeding */
    SEER_HARNESS_FINISHED = 1, /* the response is complete */
    SEER_HARNESS_ESTREAM = -30, /* the provider sent an error inside the stream (see asm_error) */
    SEER_HARNESS_ETOOBIG = -31, /* the response passed max_response_bytes (err says so) */
};

/* The default cap on one response (max_response_bytes): what the assembler keeps (text,
 * thinking, tool arguments, names, signatures, citations, started blocks) may not pass it, nor
 * may a non-streamed body; an event stream may carry 4 times it on the wire (SSE framing,
 * pings, fields seer drops). Real responses are a few MB at most. */
#define SEER_HARNESS_MAX_RESPONSE_BYTES ((size_t)64 << 20)

typedef struct seer_harness_asm seer_harness_asm_t;
seer_harness_asm_t *seer_harness_asm_new(int provider);
void seer_harness_asm_free(seer_harness_asm_t *a);
/* The cap on what one response makes the assembler keep (0: SEER_HARNESS_MAX_RESPONSE_BYTES);
 * an event past it returns SEER_HARNESS_ETOOBIG. kept: the bytes counted so far. */
void seer_harness_asm_set_limit(seer_harness_asm_t *a, size_t max_bytes);
size_t seer_harness_asm_kept(const seer_harness_asm_t *a);
/* One SSE event. Returns MORE, FINISHED, ESTREAM (a provider error event), ETOOBIG (past the
 * limit), or SEER_EPARSE for data that is not JSON (err says where). */
int seer_harness_asm_event(seer_harness_asm_t *a, const char *event, const char *data, size_t n, cJSON *out,
                           seer_err_t *err);
/* A whole non-streamed response body (a server that ignored stream: true). */
int seer_harness_asm_whole(seer_harness_asm_t *a, const char *body, size_t n, cJSON *out, seer_err_t *err);
/* The end of the byte stream: FINISHED when the response was complete (an OpenAI stream that
 * gave a finish_reason but no [DONE] counts), else MORE (the stream was cut short). */
int seer_harness_asm_eof(seer_harness_asm_t *a);
/* {message: {role: "assistant", content[]}, stop_reason, usage, model?, id?}; the caller's to
 * delete. Partial responses give what arrived so far (blocks closed as they are). */
cJSON *seer_harness_asm_result(seer_harness_asm_t *a);
/* After ESTREAM: the provider's error object ({type, message, ...}) and whether the retry
 * policy retries it (overloaded, api and rate-limit errors). */
const cJSON *seer_harness_asm_error(const seer_harness_asm_t *a, int *retryable);

/* ---- request bodies ------------------------------------------------------------------------------
 * From the canonical request {provider, model, max_tokens, system, messages, tools[{name,
 * description, input_schema}], cache?, max_tokens_field?, params?{...merged into the body}} to
 * the provider's JSON body (stream: true). Anthropic: cache_control breakpoints on the last tool,
 * the system prompt and the last user block unless cache is false; thinking blocks are sent back
 * unchanged; seer_* fields are stripped. OpenAI: the system prompt becomes a system message,
 * tool_use blocks become tool_calls, tool_result blocks become tool messages (images follow in a
 * user message), thinking blocks are dropped. */
char *seer_harness_build_body(const cJSON *request, seer_err_t *err);

/* ---- the retry policy ------------------------------------------------------------------------------
 * The decision for one failed HTTP response, as the official SDKs take it: x-should-retry wins
 * when present; 408, 409, 429 and >= 500 are retried, except a 429 whose error code is
 * enforced_spend_limit_reached (body). The wait is retry-after-ms / retry-after when it is
 * between 0 and 60 s, else base * 2^retries capped at max_delay with up to 25% jitter off.
 * retry_after_s < 0 means no header. Returns 1 (retry, *wait_s set) or 0. */
int seer_harness_should_retry(long status, int should_retry_header, const char *body);
double seer_harness_retry_wait(double retry_after_s, int retries_done, double base_s, double max_s, double jitter01);
/* Parses a Retry-After value (delta seconds or an HTTP date) into seconds from now; -1 if bad. */
double seer_harness_parse_retry_after(const char *value, int is_ms);

/* ---- streams over a curl multi pool ------------------------------------------------------------------ */
typedef struct seer_harness_pool seer_harness_pool_t;
typedef struct seer_harness_stream seer_harness_stream_t;

enum {
    SEER_HARNESS_RUNNING = 0,
    SEER_HARNESS_WAITING = 1, /* between attempts (a retry is due later) */
    SEER_HARNESS_DONE = 2,
    SEER_HARNESS_FAILED = 3,
    SEER_HARNESS_CANCELLED = 4,
};

int seer_harness_pool_new(seer_harness_pool_t **out, seer_err_t *err);
/* Streams still attached are cancelled and detached (they stay valid until freed). */
void seer_harness_pool_free(seer_harness_pool_t *p);

/* Drives every transfer of the pool for up to timeout_ms: returns 1 as soon as any stream has
 * produced an event or ended during this call, 2 when watch_fd (if >= 0) became readable,
 * 0 on timeout, SEER_EINTR when interrupted() says so (polled every 100 ms). */
int seer_harness_pool_run(seer_harness_pool_t *p, int timeout_ms, int watch_fd, int (*interrupted)(void *),
                          void *ud, seer_err_t *err);

/* Starts one request (see build_body for its fields, plus url, api_key, headers{}, max_retries
 * (default 2), retry_base (0.5 s), retry_max (8 s), connect_timeout (30 s), idle_timeout
 * (600 s without a byte), max_response_bytes (SEER_HARNESS_MAX_RESPONSE_BYTES), response_timeout
 * (seconds one attempt may take, 0: no limit), and for provider "replay": message, stop_reason,
 * usage). A response past max_response_bytes or response_timeout fails the stream (no retry). */
int seer_harness_stream_start(seer_harness_pool_t *p, const cJSON *request, seer_harness_stream_t **out,
                              seer_err_t *err);
/* The next event ({type: text_delta|thinking_delta|tool_use_start|block|retry|message|error,
 * ...}), the caller's to delete, or NULL when none is queued. The last event of a stream is
 * "message" (DONE) or "error" (FAILED). */
cJSON *seer_harness_stream_next(seer_harness_stream_t *s);
int seer_harness_stream_state(const seer_harness_stream_t *s);
/* Stops the transfer at once; what arrived so far stays in stream_partial. */
void seer_harness_stream_cancel(seer_harness_stream_t *s);
/* The reassembled message so far ({message, stop_reason, usage}), the caller's to delete. */
cJSON *seer_harness_stream_partial(seer_harness_stream_t *s);
void seer_harness_stream_free(seer_harness_stream_t *s);

/* ---- transcripts --------------------------------------------------------------------------------
 * A JSONL file, one event per line, each line written with one write(2) as it happens (so a
 * kill -9 leaves every earlier event readable) and fdatasync'd unless the event is a delta
 * (sync 1) or never (sync 0). Every string of an event (keys too) has each secret value replaced
 * by "[REDACTED]" before it is written; secrets shorter than 4 bytes are refused. write adds
 * "seq" (from 1) and "time" (Unix seconds) to the event. */
typedef struct seer_harness_transcript seer_harness_transcript_t;
int seer_harness_transcript_open(seer_harness_transcript_t **out, const char *path, const char *const *secrets,
                                 size_t n_secrets, int sync, seer_err_t *err);
int seer_harness_transcript_write(seer_harness_transcript_t *t, cJSON *event, seer_err_t *err);
/* The bytes written to the file so far (by this writer). */
size_t seer_harness_transcript_written(const seer_harness_transcript_t *t);
/* Replaces every secret in text; returns a malloc'd copy. */
char *seer_harness_redact(const char *text, const char *const *secrets, size_t n_secrets);
/* Redacts every string (and key) of a JSON tree in place. */
void seer_harness_redact_json(cJSON *v, const char *const *secrets, size_t n_secrets);
void seer_harness_transcript_close(seer_harness_transcript_t *t);

#endif
