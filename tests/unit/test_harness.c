/* Unit tests of the harness core (engine/harness): the SSE parser fed every way a network can
 * split a stream, the Anthropic and OpenAI reassembly on the recorded streams of
 * tests/fixtures/harness/ (fed one byte at a time), the retry policy, redaction, transcripts, and
 * streams on a pool (replay, an unreachable server retried then failed, cancellation, watching an
 * fd). The HTTP faults themselves are tested end to end in tests/integration/test_harness.py. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "harness/harness.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s (run the tests from the repository root)", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    cr_assert(fread(buf, 1, (size_t)len, f) == (size_t)len);
    buf[len] = 0;
    fclose(f);
    if (n) *n = (size_t)len;
    return buf;
}

/* ---- SSE ---------------------------------------------------------------------------------------- */

typedef struct {
    char log[4096];
    int count;
} sse_log;

static int log_event(void *ud, const char *event, const char *data, size_t n) {
    sse_log *l = ud;
    size_t used = strlen(l->log);
    snprintf(l->log + used, sizeof l->log - used, "[%s|%.*s]", event, (int)n, data);
    l->count++;
    return 0;
}

static const char *sse_parse(const char *text, size_t split) {
    static sse_log l;
    memset(&l, 0, sizeof l);
    seer_harness_sse_t *p = seer_harness_sse_new(log_event, &l, 0);
    seer_err_t err;
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += split) {
        size_t k = n - i < split ? n - i : split;
        cr_assert_eq(seer_harness_sse_feed(p, text + i, k, &err), 0);
    }
    seer_harness_sse_free(p);
    return l.log;
}

Test(sse, line_ends_fields_and_comments_split_anywhere) {
    const char *text = ": a comment\r\nevent: one\r\ndata: a\r\ndata:b\r\n\r\n"
                       "event:two\ndata: x: y\n\n"
                       "data: no name\r\r"
                       "id: 7\nretry: 10\nevent: empty\n\n" /* no data: not dispatched */
                       "data\n\n"                             /* a field without a colon */
                       "data: unterminated";
    const char *want = "[one|a\nb][two|x: y][|no name][|]";
    for (size_t split = 1; split <= strlen(text); split++) cr_assert_str_eq(sse_parse(text, split), want, "split %zu", split);
}

Test(sse, an_event_over_the_limit_fails) {
    sse_log l = {0};
    seer_harness_sse_t *p = seer_harness_sse_new(log_event, &l, 16);
    seer_err_t err;
    cr_assert_lt(seer_harness_sse_feed(p, "data: 0123456789abcdefghij\n\n", 28, &err), 0);
    cr_assert(strstr(err.msg, "larger than 16 bytes") || strstr(err.msg, "longer than 16 bytes"), "%s", err.msg);
    seer_harness_sse_free(p);
}

/* ---- reassembly ---------------------------------------------------------------------------------- */

typedef struct {
    seer_harness_asm_t *a;
    cJSON *out;
    int rc;
    seer_err_t err;
} feed_ctx;

static int to_asm(void *ud, const char *event, const char *data, size_t n) {
    feed_ctx *c = ud;
    int rc = seer_harness_asm_event(c->a, event, data, n, c->out, &c->err);
    if (rc != SEER_HARNESS_MORE) c->rc = rc;
    return rc < 0 ? rc : 0;
}

/* Feeds a fixture one byte at a time; returns the reassembled result. */
static cJSON *assemble(int provider, const char *fixture, size_t limit, feed_ctx *c) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/harness/%s", fixture);
    size_t n;
    char *text = slurp(path, &n);
    if (limit && limit < n) n = limit;
    memset(c, 0, sizeof *c);
    c->a = seer_harness_asm_new(provider);
    c->out = cJSON_CreateArray();
    seer_harness_sse_t *p = seer_harness_sse_new(to_asm, c, 0);
    seer_err_t err;
    for (size_t i = 0; i < n; i++)
        if (seer_harness_sse_feed(p, text + i, 1, &err) != 0) break;
    seer_harness_sse_free(p);
    free(text);
    return seer_harness_asm_result(c->a);
}

static void done(feed_ctx *c, cJSON *r) {
    cJSON_Delete(r);
    cJSON_Delete(c->out);
    seer_harness_asm_free(c->a);
}

static const cJSON *path(const cJSON *j, const char *p) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", p);
    const cJSON *cur = j;
    for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, "."))
        cur = (tok[0] >= '0' && tok[0] <= '9') ? cJSON_GetArrayItem(cur, atoi(tok)) : cJSON_GetObjectItemCaseSensitive(cur, tok);
    return cur;
}

static const char *pstr(const cJSON *j, const char *p) { return cJSON_GetStringValue(path(j, p)); }
static double pnum(const cJSON *j, const char *p) { return cJSON_GetNumberValue(path(j, p)); }

Test(assemble, anthropic_parallel_tool_calls) {
    feed_ctx c;
    cJSON *r = assemble(SEER_HARNESS_ANTHROPIC, "anthropic_parallel.sse", 0, &c);
    cr_assert_eq(c.rc, SEER_HARNESS_FINISHED);
    cr_assert_str_eq(pstr(r, "stop_reason"), "tool_use");
    cr_assert_str_eq(pstr(r, "message.content.0.text"), "Two calls.");
    cr_assert_str_eq(pstr(r, "message.content.1.id"), "toolu_P1");
    cr_assert_eq(pnum(r, "message.content.1.input.b"), 3);
    cr_assert_str_eq(pstr(r, "message.content.2.input.text"), "par");
    cr_assert_eq(pnum(r, "usage.input_tokens"), 50);
    cr_assert_eq(pnum(r, "usage.output_tokens"), 40);
    cr_assert_str_eq(pstr(r, "model"), "claude-sonnet-4-5-20250929");
    /* events: one text delta, two tool_use_start, three blocks */
    int deltas = 0, starts = 0, blocks = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, c.out) {
        const char *t = pstr(e, "type");
        deltas += strcmp(t, "text_delta") == 0;
        starts += strcmp(t, "tool_use_start") == 0;
        blocks += strcmp(t, "block") == 0;
    }
    cr_assert_eq(deltas, 1);
    cr_assert_eq(starts, 2);
    cr_assert_eq(blocks, 3);
    done(&c, r);
}

Test(assemble, anthropic_thinking_keeps_its_signature) {
    feed_ctx c;
    cJSON *r = assemble(SEER_HARNESS_ANTHROPIC, "anthropic_thinking.sse", 0, &c);
    cr_assert_str_eq(pstr(r, "message.content.0.type"), "thinking");
    cr_assert_str_eq(pstr(r, "message.content.0.thinking"), "Let me think.");
    cr_assert_str_eq(pstr(r, "message.content.0.signature"), "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYrSaNOI9oQ==");
    done(&c, r);
}

Test(assemble, anthropic_error_event_after_200) {
    feed_ctx c;
    cJSON *r = assemble(SEER_HARNESS_ANTHROPIC, "anthropic_error_after_200.sse", 0, &c);
    cr_assert_eq(c.rc, SEER_HARNESS_ESTREAM);
    int retryable = 0;
    const cJSON *e = seer_harness_asm_error(c.a, &retryable);
    cr_assert_str_eq(pstr(e, "type"), "overloaded_error");
    cr_assert(retryable);
    done(&c, r);
    r = assemble(SEER_HARNESS_ANTHROPIC, "anthropic_invalid_request_event.sse", 0, &c);
    seer_harness_asm_error(c.a, &retryable);
    cr_assert_not(retryable);
    done(&c, r);
}

Test(assemble, anthropic_cut_short_keeps_closed_blocks_only) {
    feed_ctx c;
    /* stop inside the tool_use block: the text block is closed, the tool call is not */
    char *text = slurp("tests/fixtures/harness/anthropic_tool.sse", NULL);
    size_t cut = (size_t)(strstr(text, "lo wor") - text);
    free(text);
    cJSON *r = assemble(SEER_HARNESS_ANTHROPIC, "anthropic_tool.sse", cut, &c);
    cr_assert_eq(seer_harness_asm_eof(c.a), SEER_HARNESS_MORE);
    cr_assert_eq(cJSON_GetArraySize(path(r, "message.content")), 1);
    cr_assert_str_eq(pstr(r, "message.content.0.text"), "I will echo.");
    cr_assert(cJSON_IsNull(path(r, "stop_reason")));
    done(&c, r);
}

Test(assemble, anthropic_bad_input) {
    seer_harness_asm_t *a = seer_harness_asm_new(SEER_HARNESS_ANTHROPIC);
    seer_err_t err;
    cr_assert_eq(seer_harness_asm_event(a, "x", "{nope", 5, NULL, &err), SEER_EPARSE);
    const char *d = "{\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}";
    cr_assert_eq(seer_harness_asm_event(a, "content_block_delta", d, strlen(d), NULL, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "never started"), "%s", err.msg);
    d = "{\"type\":\"content_block_start\",\"index\":-1}";
    cr_assert_eq(seer_harness_asm_event(a, NULL, d, strlen(d), NULL, &err), SEER_EPARSE);
    d = "{\"type\":\"some_future_event\"}";
    cr_assert_eq(seer_harness_asm_event(a, NULL, d, strlen(d), NULL, &err), SEER_HARNESS_MORE);
    /* a tool input that is JSON but not an object */
    d = "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\",\"input\":{}}}";
    seer_harness_asm_event(a, NULL, d, strlen(d), NULL, &err);
    d = "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"[1,2]\"}}";
    seer_harness_asm_event(a, NULL, d, strlen(d), NULL, &err);
    d = "{\"type\":\"message_stop\"}";
    cr_assert_eq(seer_harness_asm_event(a, NULL, d, strlen(d), NULL, &err), SEER_HARNESS_FINISHED);
    cJSON *r = seer_harness_asm_result(a);
    cr_assert_str_eq(pstr(r, "message.content.0.seer_invalid_input"), "[1,2]");
    cr_assert_str_eq(pstr(r, "message.content.0.seer_input_error"), "the arguments are JSON but not an object");
    cr_assert(cJSON_IsObject(path(r, "message.content.0.input")));
    cJSON_Delete(r);
    seer_harness_asm_free(a);
}

Test(assemble, openai_fragmented_tool_calls) {
    feed_ctx c;
    cJSON *r = assemble(SEER_HARNESS_OPENAI, "openai_tools.sse", 0, &c);
    cr_assert_eq(c.rc, SEER_HARNESS_FINISHED);
    cr_assert_str_eq(pstr(r, "stop_reason"), "tool_use");
    cr_assert_str_eq(pstr(r, "message.content.0.text"), "Calling tools.");
    cr_assert_str_eq(pstr(r, "message.content.1.id"), "call_a");
    cr_assert_str_eq(pstr(r, "message.content.1.input.text"), "frag");
    cr_assert_str_eq(pstr(r, "message.content.2.name"), "add");
    cr_assert_str_eq(pstr(r, "message.content.2.seer_invalid_input"), "{\"a\": 1, \"b\": oops}");
    cr_assert_eq(pnum(r, "usage.input_tokens"), 60);
    cr_assert_eq(pnum(r, "usage.cache_read_input_tokens"), 40);
    cr_assert_eq(pnum(r, "usage.output_tokens"), 20);
    done(&c, r);
}

/* llama.cpp's server repeats the whole function name in every delta of a tool call: one copy is
 * kept (before, the name came out as "execute_codeexecute_codeexecute_code"). */
Test(assemble, openai_name_repeated_in_every_delta) {
    seer_harness_asm_t *a = seer_harness_asm_new(SEER_HARNESS_OPENAI);
    seer_err_t err;
    const char *d[] = {
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\","
        "\"function\":{\"name\":\"execute_code\",\"arguments\":\"{\\\"code\\\": \"}}]}}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"execute_code\","
        "\"arguments\":\"\\\"1+1\\\"\"}}]}}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"execute_code\","
        "\"arguments\":\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}",
    };
    for (size_t i = 0; i < 3; i++) cr_assert_eq(seer_harness_asm_event(a, "", d[i], strlen(d[i]), NULL, &err), SEER_HARNESS_MORE, "%s", err.msg);
    cr_assert_eq(seer_harness_asm_eof(a), SEER_HARNESS_FINISHED);
    cJSON *r = seer_harness_asm_result(a);
    cr_assert_str_eq(pstr(r, "message.content.0.name"), "execute_code");
    cr_assert_str_eq(pstr(r, "message.content.0.input.code"), "1+1");
    cJSON_Delete(r);
    seer_harness_asm_free(a);
}

Test(assemble, openai_without_done_ids_or_streaming) {
    seer_harness_asm_t *a = seer_harness_asm_new(SEER_HARNESS_OPENAI);
    seer_err_t err;
    const char *d = "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"ec\",\"arguments\":\"{}\"}}]}}]}";
    cr_assert_eq(seer_harness_asm_event(a, "", d, strlen(d), NULL, &err), SEER_HARNESS_MORE);
    d = "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"ho\"}}]},\"finish_reason\":\"stop\"}]}";
    seer_harness_asm_event(a, "", d, strlen(d), NULL, &err);
    cr_assert_eq(seer_harness_asm_eof(a), SEER_HARNESS_FINISHED); /* no [DONE], but a finish_reason */
    cJSON *r = seer_harness_asm_result(a);
    cr_assert_str_eq(pstr(r, "stop_reason"), "tool_use"); /* "stop" with calls is a tool turn (Ollama) */
    cr_assert_str_eq(pstr(r, "message.content.0.name"), "echo");
    cr_assert_str_eq(pstr(r, "message.content.0.id"), "call_seer_0");
    cJSON_Delete(r);
    seer_harness_asm_free(a);

    a = seer_harness_asm_new(SEER_HARNESS_OPENAI);
    d = "{\"id\":\"x\",\"model\":\"m\",\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"hi\",\"tool_calls\":"
        "[{\"id\":\"c9\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"k\\\":1}\"}}]},"
        "\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}";
    cJSON *out = cJSON_CreateArray();
    cr_assert_eq(seer_harness_asm_whole(a, d, strlen(d), out, &err), SEER_HARNESS_FINISHED);
    r = seer_harness_asm_result(a);
    cr_assert_str_eq(pstr(r, "message.content.0.text"), "hi");
    cr_assert_eq(pnum(r, "message.content.1.input.k"), 1);
    cr_assert_eq(pnum(r, "usage.input_tokens"), 5);
    cJSON_Delete(r);
    cJSON_Delete(out);
    seer_harness_asm_free(a);

    a = seer_harness_asm_new(SEER_HARNESS_OPENAI);
    d = "{\"error\":{\"message\":\"upstream overloaded\",\"code\":502}}";
    cr_assert_eq(seer_harness_asm_event(a, "", d, strlen(d), NULL, &err), SEER_HARNESS_ESTREAM);
    int retryable = 0;
    seer_harness_asm_error(a, &retryable);
    cr_assert(retryable);
    seer_harness_asm_free(a);
}

/* ---- the retry policy ---------------------------------------------------------------------------- */

Test(retry, which_responses_are_retried) {
    cr_assert(seer_harness_should_retry(429, -1, "{}"));
    cr_assert(seer_harness_should_retry(529, -1, NULL));
    cr_assert(seer_harness_should_retry(500, -1, NULL));
    cr_assert(seer_harness_should_retry(408, -1, NULL));
    cr_assert(seer_harness_should_retry(409, -1, NULL));
    cr_assert_not(seer_harness_should_retry(400, -1, NULL));
    cr_assert_not(seer_harness_should_retry(401, -1, NULL));
    cr_assert_not(seer_harness_should_retry(404, -1, NULL));
    cr_assert(seer_harness_should_retry(400, 1, NULL), "x-should-retry: true wins");
    cr_assert_not(seer_harness_should_retry(529, 0, NULL), "x-should-retry: false wins");
    const char *spend = "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"details\":{\"error_code\":\"enforced_spend_limit_reached\"}}}";
    cr_assert_not(seer_harness_should_retry(429, -1, spend));
    cr_assert_not(seer_harness_should_retry(429, 1, spend), "not even when the header says so");
}

Test(retry, waits) {
    cr_assert_float_eq(seer_harness_retry_wait(2.5, 0, 0.5, 8, 0.9), 2.5, 1e-12);
    cr_assert_float_eq(seer_harness_retry_wait(0, 3, 0.5, 8, 0.9), 0, 1e-12);
    cr_assert_float_eq(seer_harness_retry_wait(61, 0, 0.5, 8, 0), 0.5, 1e-12, "over 60 s: backoff instead");
    cr_assert_float_eq(seer_harness_retry_wait(-1, 0, 0.5, 8, 0), 0.5, 1e-12);
    cr_assert_float_eq(seer_harness_retry_wait(-1, 2, 0.5, 8, 0), 2.0, 1e-12);
    cr_assert_float_eq(seer_harness_retry_wait(-1, 10, 0.5, 8, 0), 8.0, 1e-12);
    cr_assert_float_eq(seer_harness_retry_wait(-1, 10, 0.5, 8, 1.0), 6.0, 1e-12, "25%% jitter at most");
    cr_assert_float_eq(seer_harness_parse_retry_after("1500", 1), 1.5, 1e-12);
    cr_assert_float_eq(seer_harness_parse_retry_after(" 3 ", 0), 3, 1e-12);
    cr_assert_float_eq(seer_harness_parse_retry_after("0.25", 0), 0.25, 1e-12);
    cr_assert_eq(seer_harness_parse_retry_after("soon", 0), -1);
    cr_assert_eq(seer_harness_parse_retry_after("-4", 1), -1);
    cr_assert_eq(seer_harness_parse_retry_after(NULL, 0), -1);
    char date[64];
    time_t t = time(NULL) + 20;
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime(&t));
    double w = seer_harness_parse_retry_after(date, 0);
    cr_assert(w > 17 && w <= 21, "%f", w);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime(&(time_t){time(NULL) - 100}));
    cr_assert_float_eq(seer_harness_parse_retry_after(date, 0), 0, 1e-12);
}

/* ---- redaction and transcripts ------------------------------------------------------------------ */

Test(transcript, redaction) {
    const char *secrets[] = {"sk-abc-123", "abc-1"};
    char *r = seer_harness_redact("x sk-abc-123 y sk-abc-123abc-1", secrets, 2);
    cr_assert_str_eq(r, "x [REDACTED] y [REDACTED][REDACTED]");
    free(r);
    cJSON *j = cJSON_Parse("{\"sk-abc-123\":[\"pre sk-abc-123\",{\"k\":\"abc-1\"}],\"n\":1}");
    seer_harness_redact_json(j, secrets, 2);
    char *t = cJSON_PrintUnformatted(j);
    cr_assert_str_eq(t, "{\"[REDACTED]\":[\"pre [REDACTED]\",{\"k\":\"[REDACTED]\"}],\"n\":1}");
    free(t);
    cJSON_Delete(j);
}

Test(transcript, lines_seq_and_short_secrets) {
    char dir[] = "/tmp/seer-harness-unit-XXXXXX";
    cr_assert(mkdtemp(dir));
    char p[128];
    snprintf(p, sizeof p, "%s/t.jsonl", dir);
    seer_err_t err;
    seer_harness_transcript_t *t = NULL;
    const char *bad[] = {"abc"};
    cr_assert_eq(seer_harness_transcript_open(&t, p, bad, 1, 1, &err), SEER_EINVAL);
    const char *secrets[] = {"hunter2hunter2"};
    cr_assert_eq(seer_harness_transcript_open(&t, p, secrets, 1, 1, &err), 0);
    for (int i = 0; i < 3; i++) {
        cJSON *e = cJSON_Parse(i == 1 ? "{\"type\":\"text_delta\",\"text\":\"hunter2hunter2\"}" : "{\"type\":\"x\",\"seq\":99}");
        cr_assert_eq(seer_harness_transcript_write(t, e, &err), 0);
        cJSON_Delete(e);
    }
    cJSON *arr = cJSON_Parse("[1]");
    cr_assert_eq(seer_harness_transcript_write(t, arr, &err), SEER_EINVAL);
    cJSON_Delete(arr);
    seer_harness_transcript_close(t);
    char *text = slurp(p, NULL);
    cr_assert(strncmp(text, "{\"seq\":1,\"time\":", 16) == 0, "%s", text);
    cr_assert(strstr(text, "\n{\"seq\":2,"));
    cr_assert(strstr(text, "\n{\"seq\":3,"));
    cr_assert(strstr(text, "\"text\":\"[REDACTED]\""));
    cr_assert_null(strstr(text, "hunter2"));
    /* the writer's own seq replaces the event's (not a bare "99": the time field can hold one) */
    cr_assert_null(strstr(text, "\"seq\":99"), "%s", text);
    cr_assert(strstr(text, "\"type\":\"x\""), "%s", text);
    free(text);
    unlink(p);
    rmdir(dir);
}

/* ---- streams on a pool ------------------------------------------------------------------------- */

static cJSON *drain(seer_harness_pool_t *p, seer_harness_stream_t *s, int max_ms) {
    cJSON *all = cJSON_CreateArray();
    seer_err_t err;
    for (int waited = 0; waited < max_ms; waited += 50) {
        cJSON *e;
        while ((e = seer_harness_stream_next(s))) cJSON_AddItemToArray(all, e);
        int st = seer_harness_stream_state(s);
        if (st != SEER_HARNESS_RUNNING && st != SEER_HARNESS_WAITING) break;
        seer_harness_pool_run(p, 50, -1, NULL, NULL, &err);
    }
    return all;
}

Test(stream, replay) {
    seer_harness_pool_t *p;
    seer_err_t err;
    cr_assert_eq(seer_harness_pool_new(&p, &err), 0);
    cJSON *req = cJSON_Parse("{\"provider\":\"replay\",\"stop_reason\":\"tool_use\",\"message\":{\"content\":["
                             "{\"type\":\"text\",\"text\":\"hi\"},{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\",\"input\":{}}]}}");
    seer_harness_stream_t *s;
    cr_assert_eq(seer_harness_stream_start(p, req, &s, &err), 0);
    cJSON *all = drain(p, s, 1000);
    cr_assert_eq(seer_harness_stream_state(s), SEER_HARNESS_DONE);
    cr_assert_str_eq(pstr(all, "0.type"), "text_delta");
    cr_assert_str_eq(pstr(all, "2.type"), "tool_use_start");
    const cJSON *last = cJSON_GetArrayItem(all, cJSON_GetArraySize(all) - 1);
    cr_assert_str_eq(pstr(last, "type"), "message");
    cr_assert_str_eq(pstr(last, "stop_reason"), "tool_use");
    cr_assert_str_eq(pstr(last, "message.content.1.id"), "t");
    cJSON_Delete(all);
    cJSON_Delete(req);
    seer_harness_stream_free(s);
    seer_harness_pool_free(p);
}

/* A port nobody listens on: connecting fails at once, is retried, then the stream fails. */
static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t n = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &n);
    close(fd);
    return ntohs(a.sin_port);
}

Test(stream, unreachable_is_retried_then_fails) {
    seer_harness_pool_t *p;
    seer_err_t err;
    cr_assert_eq(seer_harness_pool_new(&p, &err), 0);
    char json[512];
    snprintf(json, sizeof json,
             "{\"provider\":\"anthropic\",\"url\":\"http://127.0.0.1:%d/v1/messages\",\"api_key\":\"k\",\"model\":\"m\","
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_retries\":2,\"retry_base\":0.01}",
             closed_port());
    cJSON *req = cJSON_Parse(json);
    seer_harness_stream_t *s;
    cr_assert_eq(seer_harness_stream_start(p, req, &s, &err), 0);
    cJSON *all = drain(p, s, 5000);
    cr_assert_eq(seer_harness_stream_state(s), SEER_HARNESS_FAILED);
    cr_assert_eq(cJSON_GetArraySize(all), 3);
    cr_assert_str_eq(pstr(all, "0.type"), "retry");
    cr_assert_str_eq(pstr(all, "1.type"), "retry");
    cr_assert_str_eq(pstr(all, "2.type"), "error");
    cr_assert(strstr(pstr(all, "2.message"), "could not reach"), "%s", pstr(all, "2.message"));
    cr_assert(strstr(pstr(all, "2.message"), "gave up after 3 attempts"), "%s", pstr(all, "2.message"));
    cJSON_Delete(all);
    cJSON_Delete(req);
    seer_harness_stream_free(s);
    seer_harness_pool_free(p);
}

Test(stream, bad_requests_cancel_and_watched_fds) {
    seer_harness_pool_t *p;
    seer_err_t err;
    cr_assert_eq(seer_harness_pool_new(&p, &err), 0);
    seer_harness_stream_t *s = NULL;
    cJSON *req = cJSON_Parse("{\"provider\":\"anthropic\",\"url\":\"ftp://x\",\"model\":\"m\",\"messages\":[]}");
    cr_assert_lt(seer_harness_stream_start(p, req, &s, &err), 0);
    cr_assert(strstr(err.msg, "must start with http"), "%s", err.msg);
    cJSON_Delete(req);
    req = cJSON_Parse("{\"provider\":\"bedrock\"}");
    cr_assert_lt(seer_harness_stream_start(p, req, &s, &err), 0);
    cr_assert(strstr(err.msg, "unknown provider kind 'bedrock'"), "%s", err.msg);
    cJSON_Delete(req);
    req = cJSON_Parse("{\"provider\":\"anthropic\",\"url\":\"http://127.0.0.1:1/\",\"model\":\"m\",\"messages\":[],"
                      "\"headers\":{\"x-bad\":\"a\\r\\nb\"}}");
    cr_assert_lt(seer_harness_stream_start(p, req, &s, &err), 0);
    cr_assert(strstr(err.msg, "header 'x-bad'"), "%s", err.msg);
    cJSON_Delete(req);
    /* a stream waiting to retry is cancelled at once */
    char json[512];
    snprintf(json, sizeof json,
             "{\"provider\":\"openai\",\"url\":\"http://127.0.0.1:%d/v1/chat/completions\",\"model\":\"m\","
             "\"messages\":[],\"retry_base\":30}",
             closed_port());
    req = cJSON_Parse(json);
    cr_assert_eq(seer_harness_stream_start(p, req, &s, &err), 0);
    cJSON_Delete(req);
    for (int i = 0; i < 40 && seer_harness_stream_state(s) == SEER_HARNESS_RUNNING; i++) seer_harness_pool_run(p, 50, -1, NULL, NULL, &err);
    cr_assert_eq(seer_harness_stream_state(s), SEER_HARNESS_WAITING);
    seer_harness_stream_cancel(s);
    cr_assert_eq(seer_harness_stream_state(s), SEER_HARNESS_CANCELLED);
    cJSON *partial = seer_harness_stream_partial(s);
    cr_assert_eq(cJSON_GetArraySize(path(partial, "message.content")), 0);
    cJSON_Delete(partial);
    /* nothing to do: a timeout; a readable fd: 2 */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(seer_harness_pool_run(p, 150, -1, NULL, NULL, &err), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    cr_assert(took >= 0.14 && took < 1.0, "%f", took);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(write(fds[1], "\x1b", 1), 1);
    cr_assert_eq(seer_harness_pool_run(p, 2000, fds[0], NULL, NULL, &err), 2);
    close(fds[0]);
    close(fds[1]);
    seer_harness_pool_free(p); /* the stream outlives its pool */
    cJSON *e = seer_harness_stream_next(s); /* the retry it was waiting on */
    cr_assert_str_eq(pstr(e, "type"), "retry");
    cJSON_Delete(e);
    cr_assert_null(seer_harness_stream_next(s));
    seer_harness_stream_free(s);
}
