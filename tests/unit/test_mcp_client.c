/* Unit tests of the MCP client (engine/mcp) against fake servers: small /bin/sh scripts that
 * speak just enough newline-delimited JSON-RPC for each case (framing, partial lines, garbage
 * lines, wrong ids, server requests, timeouts and cancellation, crashes, version negotiation,
 * paging, name clashes), and a libmicrohttpd server for the streamable HTTP transport (SSE
 * split anywhere, session ids, protocol version header, DELETE on close, HTTP errors). The
 * real peer, the MCP Python SDK, is driven by tests/lua/test_mcp_client.lua. */
#include <criterion/criterion.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "mcp/client_private.h"
#include "mcp/mcp.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define LEAK_CHECK() cr_assert(__lsan_do_recoverable_leak_check() == 0)
#define UNDER_ASAN 1
#else
#define LEAK_CHECK() ((void)0)
#define UNDER_ASAN 0
#endif

/* ---- fake stdio servers ------------------------------------------------------------------------
 * rd reads one line into $l (logging it to $LOG) and sets $m (method) and $i (id); res answers
 * the last request; init does the handshake; text answers a tools/call with one text block. */
static const char *PRELUDE =
    "LOG=${LOG:-/dev/null}\n"
    "rd() { IFS= read -r l || exit 0; printf '%s\\n' \"$l\" >> \"$LOG\";"
    " m=${l#*'\"method\":\"'}; if [ \"$m\" = \"$l\" ]; then m=; else m=${m%%'\"'*}; fi;"
    " i=${l#*'\"id\":'}; if [ \"$i\" = \"$l\" ]; then i=; else i=${i%%[,\\}]*}; fi; }\n"
    "res() { printf '{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}\\n' \"$i\" \"$1\"; }\n"
    "init() { rd; res \"{\\\"protocolVersion\\\":\\\"${V:-2025-11-25}\\\",\\\"capabilities\\\":{\\\"tools\\\":{}},"
    "\\\"serverInfo\\\":{\\\"name\\\":\\\"fake\\\",\\\"version\\\":\\\"1\\\"}}\"; rd; }\n"
    "tools() { rd; res '{\"tools\":[{\"name\":\"t\",\"inputSchema\":{\"type\":\"object\"}}]}'; }\n"
    "text() { res \"{\\\"content\\\":[{\\\"type\\\":\\\"text\\\",\\\"text\\\":\\\"$1\\\"}],\\\"isError\\\":false}\"; }\n"
    "serve() { while rd; do case $m in tools/call) text \"${1:-ok}\";; ping) res '{}';; esac; done; }\n";

static char tmpdir[64];

static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/seer-mcp-test-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void rm_tmpdir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static char *log_path(const char *name) {
    static char p[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s.log", tmpdir, name);
    return p[k];
}

static char *read_log(const char *name) {
    FILE *f = fopen(log_path(name), "rb");
    if (!f) return strdup("");
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* {"command": "/bin/sh", "args": ["-c", PRELUDE + script], "env": {"LOG": ..., extra env}} */
static cJSON *fake_spec(const char *name, const char *script, const char *version) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "type", "stdio");
    cJSON_AddStringToObject(s, "command", "/bin/sh");
    cJSON *args = cJSON_AddArrayToObject(s, "args");
    cJSON_AddItemToArray(args, cJSON_CreateString("-c"));
    char *full = malloc(strlen(PRELUDE) + strlen(script) + 2);
    sprintf(full, "%s%s\n", PRELUDE, script);
    cJSON_AddItemToArray(args, cJSON_CreateString(full));
    free(full);
    cJSON *env = cJSON_AddObjectToObject(s, "env");
    cJSON_AddStringToObject(env, "LOG", log_path(name));
    if (version) cJSON_AddStringToObject(env, "V", version);
    return s;
}

/* What the callbacks saw. */
static char warnings[8192];
static char notes[8192];
static int progress_calls;
static double last_progress, last_total;
static int interrupt_after; /* polls until "Ctrl-C"; 0: never */

static void on_warning(void *ud, const char *server, const char *text) {
    (void)ud;
    snprintf(warnings + strlen(warnings), sizeof warnings - strlen(warnings), "[%s] %s\n", server, text);
}

static void on_note(void *ud, const char *server, const char *method, const cJSON *params) {
    (void)ud;
    char *p = params ? cJSON_PrintUnformatted(params) : strdup("null");
    snprintf(notes + strlen(notes), sizeof notes - strlen(notes), "[%s] %s %s\n", server, method, p);
    free(p);
}

static void on_progress(void *ud, const char *server, double progress, double total, const char *message) {
    (void)ud;
    (void)server;
    (void)message;
    progress_calls++;
    last_progress = progress;
    last_total = total;
}

/* Like Ctrl-C in seer: once it happened it stays pending until someone clears it. */
static int interrupt_pending;
static int on_interrupted(void *ud) {
    (void)ud;
    if (interrupt_after > 0 && --interrupt_after == 0) interrupt_pending = 1;
    return interrupt_pending;
}

static seer_mcp_opts_t test_opts(void) {
    seer_mcp_opts_t o = {0};
    o.timeout_ms = 5000;
    o.connect_timeout_ms = 5000;
    o.cb.warning = on_warning;
    o.cb.notification = on_note;
    o.cb.interrupted = on_interrupted;
    return o;
}

/* Connects to one fake server; asserts success. */
static seer_mcp_client_t *connect_one(const char *name, const char *script, seer_mcp_opts_t *o) {
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, name, fake_spec(name, script, NULL));
    seer_mcp_client_t *c;
    seer_err_t err;
    int rc = seer_mcp_connect(&c, cfg, o, &err);
    cJSON_Delete(cfg);
    cr_assert_eq(rc, 0, "connect: %s", err.msg);
    return c;
}

/* Connects expecting failure; returns the message. */
static int connect_fails(cJSON *cfg, seer_mcp_opts_t *o, seer_err_t *err) {
    seer_mcp_client_t *c = NULL;
    int rc = seer_mcp_connect(&c, cfg, o, err);
    cJSON_Delete(cfg);
    cr_assert_lt(rc, 0, "connect should fail");
    cr_assert_null(c);
    return rc;
}

static const char *first_text(const cJSON *result) {
    const cJSON *content = cJSON_GetObjectItem(result, "content");
    const cJSON *text = cJSON_GetObjectItem(cJSON_GetArrayItem(content, 0), "text");
    return cJSON_IsString(text) ? text->valuestring : "";
}

/* The peak resident memory of this process so far (criterion runs each test in a fresh one), KiB. */
static long vm_hwm_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) v = atol(line + 6);
    if (f) fclose(f);
    return v;
}

static const char *last_text(const cJSON *result) {
    const cJSON *content = cJSON_GetObjectItem(result, "content");
    const cJSON *text = cJSON_GetObjectItem(cJSON_GetArrayItem(content, cJSON_GetArraySize(content) - 1), "text");
    return cJSON_IsString(text) ? text->valuestring : "";
}

static double cut_field(const cJSON *result, const char *name) {
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(result, "seer_cut"), name);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static cJSON *call_ok(seer_mcp_client_t *c, const char *name, const char *args_json, const seer_mcp_call_opts_t *co) {
    cJSON *args = args_json ? cJSON_Parse(args_json) : NULL;
    cJSON *res;
    seer_err_t err;
    int rc = seer_mcp_call(c, name, args, co, &res, &err);
    cJSON_Delete(args);
    cr_assert_eq(rc, 0, "call %s: %s", name, err.msg);
    return res;
}

TestSuite(mcp_stdio, .init = make_tmpdir, .fini = rm_tmpdir, .timeout = 30);

/* ---- the handshake and the requests the client writes -------------------------------------- */

Test(mcp_stdio, handshake_paged_tools_and_a_call) {
    seer_mcp_opts_t o = test_opts();
    seer_mcp_client_t *c = connect_one("fake",
                                       "init; rd; res '{\"tools\":[{\"name\":\"t\",\"description\":\"first\"}],\"nextCursor\":\"p2\"}';"
                                       " rd; res '{\"tools\":[{\"name\":\"u.v\"},{\"nameless\":1}]}'; serve hello",
                                       &o);
    const seer_mcp_tool_t *tools;
    size_t n;
    seer_err_t err;
    cr_assert_eq(seer_mcp_tools(c, &tools, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(tools[0].qualified_name, "t");
    cr_assert_str_eq(tools[1].name, "u.v");
    cr_assert_str_eq(tools[1].qualified_name, "u_v", "characters outside [A-Za-z0-9_-] become _");
    cr_assert(strstr(warnings, "without a name"), "%s", warnings);
    cJSON *r = call_ok(c, "u_v", "{\"x\":[1,2]}", NULL);
    cr_assert_str_eq(first_text(r), "hello");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r, "isError")));
    cJSON_Delete(r);

    seer_mcp_server_info_t info;
    cr_assert_eq(seer_mcp_server_info(c, 0, &info), 0);
    cr_assert_str_eq(info.name, "fake");
    cr_assert_str_eq(info.transport, "stdio");
    cr_assert_str_eq(info.protocol_version, "2025-11-25");
    cr_assert_str_eq(cJSON_GetObjectItem(info.server_info, "name")->valuestring, "fake");
    cr_assert_gt(info.pid, 0);
    seer_mcp_close(c);

    /* What went over the wire, in order. */
    char *log = read_log("fake");
    char *lines[8] = {0};
    int nl = 0;
    for (char *p = strtok(log, "\n"); p && nl < 8; p = strtok(NULL, "\n")) lines[nl++] = p;
    cr_assert_eq(nl, 5, "%d lines", nl);
    cJSON *init = cJSON_Parse(lines[0]);
    cr_assert_str_eq(cJSON_GetObjectItem(init, "jsonrpc")->valuestring, "2.0");
    cr_assert_str_eq(cJSON_GetObjectItem(init, "method")->valuestring, "initialize");
    cJSON *ip = cJSON_GetObjectItem(init, "params");
    cr_assert_str_eq(cJSON_GetObjectItem(ip, "protocolVersion")->valuestring, "2025-11-25");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ip, "clientInfo"), "name")->valuestring, "seer");
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(ip, "capabilities")));
    cJSON_Delete(init);
    cr_assert_str_eq(lines[1], "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    cr_assert(strstr(lines[2], "\"method\":\"tools/list\""));
    cr_assert(strstr(lines[3], "\"cursor\":\"p2\""), "%s", lines[3]);
    cJSON *call = cJSON_Parse(lines[4]);
    cJSON *cp = cJSON_GetObjectItem(call, "params");
    cr_assert_str_eq(cJSON_GetObjectItem(call, "method")->valuestring, "tools/call");
    cr_assert_str_eq(cJSON_GetObjectItem(cp, "name")->valuestring, "u.v", "the server gets its own tool name");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(cp, "arguments"), "x")), 2);
    /* ids are fresh integers */
    cr_assert(cJSON_GetObjectItem(call, "id")->valuedouble > 3);
    cJSON_Delete(call);
    free(log);
    LEAK_CHECK();
}

/* A server whose tool list never ends (or is too big) is refused at once, naming the limit; the
 * limits count every page, and a list within them connects. */
Test(mcp_stdio, tool_lists_past_max_tools_or_max_tools_bytes_are_refused) {
    const char *endless =
        "init; while rd; do res \"{\\\"tools\\\":[{\\\"name\\\":\\\"a$i\\\",\\\"description\\\":\\\"xxxxxxxxxxxxxxxx\\\"},"
        "{\\\"name\\\":\\\"b$i\\\"}],\\\"nextCursor\\\":\\\"c$i\\\"}\"; done";
    seer_mcp_opts_t o = test_opts();
    o.max_tools = 5;
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, "pager", fake_spec("pager", endless, NULL));
    seer_err_t err;
    connect_fails(cfg, &o, &err);
    cr_assert(strstr(err.msg, "mcp server 'pager': tools/list: the server offers more than 5 tools (max_tools)"), "%s",
              err.msg);
    o = test_opts();
    o.max_tools_bytes = 300;
    cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, "pager", fake_spec("pager", endless, NULL));
    connect_fails(cfg, &o, &err);
    cr_assert(strstr(err.msg, "more than 300 bytes of names, descriptions and schemas (max_tools_bytes)"), "%s", err.msg);
    /* the defaults: 1000 tools */
    o = test_opts();
    cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, "pager", fake_spec("pager", endless, NULL));
    connect_fails(cfg, &o, &err);
    cr_assert(strstr(err.msg, "more than 1000 tools (max_tools)"), "%s", err.msg);
    /* within the limits */
    o = test_opts();
    o.max_tools = 2;
    o.max_tools_bytes = 200;
    seer_mcp_client_t *c = connect_one(
        "two", "init; rd; res '{\"tools\":[{\"name\":\"a\"}],\"nextCursor\":\"p2\"}'; rd; res '{\"tools\":[{\"name\":\"b\"}]}'; serve",
        &o);
    const seer_mcp_tool_t *tools;
    size_t n;
    cr_assert_eq(seer_mcp_tools(c, &tools, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 2);
    seer_mcp_close(c);
    LEAK_CHECK();
}

Test(mcp_stdio, falls_back_to_2025_06_18_and_refuses_unknown_versions) {
    seer_mcp_opts_t o = test_opts();
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, "old", fake_spec("old", "init; tools; serve", "2025-06-18"));
    seer_mcp_client_t *c;
    seer_err_t err;
    cr_assert_eq(seer_mcp_connect(&c, cfg, &o, &err), 0, "%s", err.msg);
    cJSON_Delete(cfg);
    seer_mcp_server_info_t info;
    seer_mcp_server_info(c, 0, &info);
    cr_assert_str_eq(info.protocol_version, "2025-06-18");
    seer_mcp_close(c);

    cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, "ancient", fake_spec("ancient", "init; tools; serve", "2024-11-05"));
    connect_fails(cfg, &o, &err);
    cr_assert(strstr(err.msg, "mcp server 'ancient'") && strstr(err.msg, "2024-11-05") && strstr(err.msg, "2025-06-18"),
              "%s", err.msg);
    LEAK_CHECK();
}

/* ---- framing --------------------------------------------------------------------------------- */

Test(mcp_stdio, partial_lines_garbage_wrong_ids_and_notifications) {
    seer_mcp_opts_t o = test_opts();
    /* Before answering the call: a banner, a JSON value that is no message, a response to an id
     * never used, a log notification, the progress of this call, then the answer in three pieces
     * with pauses and a CRLF end, followed in the same write by a notification. */
    seer_mcp_client_t *c = connect_one(
        "fake",
        "init; tools; rd;"
        " echo 'Server v1 starting...'; echo '[1,2,3]'; echo '{\"hello\":1}';"
        " echo '{\"jsonrpc\":\"2.0\",\"id\":999,\"result\":{}}';"
        " echo '{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"hi\"}}';"
        " printf '{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":%s,\"progress\":2,\"total\":4}}\\n' $i;"
        " printf '{\"jsonrpc\":\"2.0\",'; sleep 0.05; printf '\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",' $i; sleep 0.05;"
        " printf '\"text\":\"whole\"}]}}\\r\\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"after\"}}\\n';"
        " serve",
        &o);
    seer_mcp_call_opts_t co = {0, on_progress, NULL};
    cJSON *r = call_ok(c, "t", NULL, &co);
    cr_assert_str_eq(first_text(r), "whole");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r, "isError")), "isError is filled in when the server leaves it out");
    cJSON_Delete(r);
    cr_assert_eq(progress_calls, 1);
    cr_assert_float_eq(last_progress, 2, 0);
    cr_assert_float_eq(last_total, 4, 0);
    cr_assert(strstr(warnings, "[fake] ignoring output that is not JSON: Server v1 starting..."), "%s", warnings);
    cr_assert(strstr(warnings, "not a JSON-RPC message"), "%s", warnings);
    cr_assert(strstr(warnings, "never sent"), "%s", warnings);
    cr_assert(strstr(notes, "[fake] notifications/message {\"level\":\"info\",\"data\":\"hi\"}"), "%s", notes);
    /* The notification that came with the answer is delivered by the next exchange. */
    seer_err_t err;
    cJSON *pong;
    cr_assert_eq(seer_mcp_request(c, "fake", "ping", NULL, 0, &pong, &err), 0, "%s", err.msg);
    cr_assert_eq(cJSON_GetArraySize(pong), 0);
    cJSON_Delete(pong);
    cr_assert(strstr(notes, "\"after\""), "%s", notes);
    seer_mcp_close(c);
    LEAK_CHECK();
}

Test(mcp_stdio, answers_server_requests) {
    seer_mcp_opts_t o = test_opts();
    seer_mcp_client_t *c = connect_one(
        "fake",
        "init; tools; rd; ci=$i;"
        " echo '{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"ping\"}';"
        " echo '{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"sampling/createMessage\",\"params\":{}}';"
        " rd; rd; i=$ci; text done; serve",
        &o);
    cJSON *r = call_ok(c, "t", NULL, NULL);
    cr_assert_str_eq(first_text(r), "done");
    cJSON_Delete(r);
    seer_mcp_close(c);
    char *log = read_log("fake");
    cr_assert(strstr(log, "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"result\":{}}"), "%s", log);
    cr_assert(strstr(log, "\"id\":7,\"error\":{\"code\":-32601"), "%s", log);
    free(log);
    LEAK_CHECK();
}

Test(mcp_stdio, accepts_a_response_on_the_last_line_without_newline) {
    seer_mcp_opts_t o = test_opts();
    seer_mcp_client_t *c = connect_one("fake", "init; tools; rd; printf '{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}' $i; exit 0", &o);
    cJSON *r = call_ok(c, "t", NULL, NULL);
    cJSON_Delete(r);
    /* ... but the server is gone now. */
    seer_err_t err;
    cr_assert_eq(seer_mcp_call(c, "t", NULL, NULL, &r, &err), SEER_MCP_EDEAD);
    cr_assert(strstr(err.msg, "exited with status 0"), "%s", err.msg);
    seer_mcp_close(c);
    LEAK_CHECK();
}

Test(mcp_stdio, oversized_message_is_an_error) {
    seer_mcp_opts_t o = test_opts();
    o.max_message_bytes = 10000;
    seer_mcp_client_t *c = connect_one("fake", "init; tools; rd; head -c 50000 /dev/zero | tr '\\0' x; echo; serve", &o);
    cJSON *r;
    seer_err_t err;
    cr_assert_eq(seer_mcp_call(c, "t", NULL, NULL, &r, &err), SEER_MCP_EDEAD, "%s", err.msg);
    cr_assert(strstr(err.msg, "mcp server 'fake'") && strstr(err.msg, "longer than 10000 bytes"), "%s", err.msg);
    seer_mcp_close(c);
    LEAK_CHECK();
}

Test(mcp_stdio, big_messages_both_ways) {
    seer_mcp_opts_t o = test_opts();
    /* The fake echoes the length of the request it got (wc -c) after reading a 3 MB line, and
     * answers with a 3 MB text. */
    seer_mcp_client_t *c = connect_one(
        "fake",
        "init; tools; rd; n=$(printf '%s' \"$l\" | wc -c);"
        " printf '{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"' $i;"
        " head -c 3000000 /dev/zero | tr '\\0' y; printf '\"},{\"type\":\"text\",\"text\":\"%s\"}]}}\\n' $n; serve",
        &o);
    char *args = malloc(3000100);
    strcpy(args, "{\"s\":\"");
    memset(args + 6, 'x', 3000000);
    strcpy(args + 3000006, "\"}");
    cJSON *r = call_ok(c, "t", args, NULL);
    free(args);
    cr_assert_eq(strlen(first_text(r)), 3000000);
    int sent = atoi(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "content"), 1)->child->next->valuestring);
    cr_assert_gt(sent, 3000000);
    cJSON_Delete(r);
    seer_mcp_close(c);
    LEAK_CHECK();
}

/* ---- what the client holds of a big message (max_result_bytes) ------------------------------ */

/* A tool result of 40 MB with max_result_bytes = 64 KiB, written the way the TypeScript SDK
 * writes it (result first, isError and the id last), after a 1 MB notification and a 200 KB line
 * that is not JSON: the notification and the line are dropped with warnings, the result is its
 * first 64 KiB with a note, isError and the id as the end of the message says, and the process
 * never held the 40 MB. The next call works: nothing of the big message is left in the pipe. */
Test(mcp_stdio, a_result_past_max_result_bytes_is_cut_as_it_streams_and_the_next_call_works) {
    seer_mcp_opts_t o = test_opts();
    o.max_result_bytes = 65536;
    seer_mcp_client_t *c = connect_one(
        "fake",
        "init; tools; rd;"
        " printf '{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"';"
        " head -c 1000000 /dev/zero | tr '\\0' n; printf '\"}}\\n';"
        " head -c 200000 /dev/zero | tr '\\0' '#'; echo;"
        " printf '{\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"';"
        " head -c 40000000 /dev/zero | tr '\\0' x;"
        " printf '\"},{\"type\":\"text\",\"text\":\"more\"}],\"isError\":true},\"jsonrpc\":\"2.0\",\"id\":%s}\\n' $i;"
        " serve",
        &o);
    long before = vm_hwm_kib();
    cJSON *r = call_ok(c, "t", NULL, NULL);
    long after = vm_hwm_kib();
    const char *t = first_text(r);
    cr_assert(strlen(t) > 60000 && strlen(t) <= 65536, "%zu bytes kept", strlen(t));
    cr_assert(strspn(t, "x") == strlen(t));
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "content")), 2, "the text, then the note");
    cr_assert(strstr(last_text(r), "only its first") && strstr(last_text(r), "(max_result_bytes = 65536)"), "%s", last_text(r));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "isError")), "isError comes after the cut");
    cr_assert_eq(cut_field(r, "message_bytes"), 40000000 + 118, "%f", cut_field(r, "message_bytes"));
    cr_assert_eq(cut_field(r, "content_bytes"), 40000004);
    cr_assert_eq(cut_field(r, "max_result_bytes"), 65536);
    cr_assert(cut_field(r, "read_bytes") <= 65536);
    cJSON_Delete(r);
    /* (ASan keeps freed memory in quarantine: the peak says nothing there) */
    cr_assert(UNDER_ASAN || after - before < 16 * 1024, "the call grew the process by %ld KiB", after - before);
    cr_assert(strstr(warnings, "ignoring a notification of 1000071 bytes"), "%s", warnings);
    cr_assert(strstr(warnings, "ignoring output that is not JSON: ###"), "%s", warnings);
    r = call_ok(c, "t", NULL, NULL);
    cr_assert_str_eq(first_text(r), "ok");
    cr_assert_null(cJSON_GetObjectItem(r, "seer_cut"));
    cJSON_Delete(r);
    seer_mcp_close(c);
    LEAK_CHECK();
}

/* A server that floods its stdout with 100 MB of notifications, without reading, while the
 * client writes a 3 MB request: the messages are dispatched as they come (not piled up until the
 * request is written), and the server's requests meanwhile are answered once it is. A server's
 * own "seer_cut" in a result is dropped. */
Test(mcp_stdio, output_while_a_request_is_written_is_not_piled_up) {
    seer_mcp_opts_t o = test_opts();
    o.timeout_ms = 20000;
    seer_mcp_client_t *c = connect_one(
        "fake",
        "init; tools;"
        " n='{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"'$(head -c 1000 /dev/zero | tr '\\0' d)'\"}}';"
        " echo '{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"ping\"}';"
        " yes \"$n\" | head -n 100000; rd; ci=$i; rd; i=$ci;"
        " res '{\"content\":[{\"type\":\"text\",\"text\":\"got it\"}],\"seer_cut\":{\"message_bytes\":1}}'; serve",
        &o);
    char *args = malloc(3000100);
    strcpy(args, "{\"s\":\"");
    memset(args + 6, 'x', 3000000);
    strcpy(args + 3000006, "\"}");
    long before = vm_hwm_kib();
    cJSON *r = call_ok(c, "t", args, NULL);
    long after = vm_hwm_kib();
    free(args);
    cr_assert(UNDER_ASAN || after - before < 40 * 1024, "the call grew the process by %ld KiB", after - before);
    cr_assert_str_eq(first_text(r), "got it");
    cr_assert_null(cJSON_GetObjectItem(r, "seer_cut"));
    cJSON_Delete(r);
    seer_mcp_close(c);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "grep -q '^{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"result\":{}}$' '%s'", log_path("fake"));
    cr_assert_eq(system(cmd), 0, "the ping was not answered");
    LEAK_CHECK();
}

/* ---- the reader alone (client_reader.c) against cJSON ------------------------------------------
 * Random JSON-RPC responses (strings with every kind of escape, surrogate pairs and multi-byte
 * UTF-8, numbers, literals, nesting, odd whitespace), fed in random pieces: read whole, the
 * reader gives cJSON the same value; cut at any bound, what it kept is valid JSON no larger than
 * the bound, the text it cut is a prefix of the real one, and the id, isError and content size
 * are those of the whole message. Mutated documents that cJSON still accepts are never lost. */

static unsigned rng;
static unsigned rnd(unsigned n) {
    rng = rng * 1103515245u + 12345u;
    return ((rng >> 8) & 0xffffff) % n;
}

static void put(mcp_buf_t *b, const char *t) {
    mcp_buf_add(b, t, strlen(t));
}

static void gen_ws(mcp_buf_t *b) {
    static const char *const ws[] = {"", "", "", " ", "\t", "\r\n", "  "};
    put(b, ws[rnd(7)]);
}

static void gen_string(mcp_buf_t *b, size_t n) {
    static const char *const parts[] = {"\\n", "\\\"", "\\\\", "\\u00e9", "\\ud83d\\ude00", "\xc3\xa9", "\xe2\x82\xac",
                                        "\xf0\x9f\x98\x80", "\\/", "\\t", "a", "b", "z", " ", "Q", "7"};
    put(b, "\"");
    for (size_t i = 0; i < n; i++) put(b, parts[rnd(16)]);
    put(b, "\"");
}

static void gen_value(mcp_buf_t *b, int depth) {
    static const char *const scalars[] = {"0", "-12", "3.25", "1e5", "-0.5E-3", "true", "false", "null", "123456789"};
    gen_ws(b);
    switch (depth > 5 ? rnd(3) : rnd(6)) {
    case 0:
        gen_string(b, rnd(20));
        break;
    case 1:
    case 2:
        put(b, scalars[rnd(9)]);
        break;
    case 3:
        put(b, "{");
        for (unsigned k = 0, n = rnd(5); k < n; k++) {
            if (k) put(b, ",");
            gen_ws(b);
            gen_string(b, rnd(4));
            gen_ws(b);
            put(b, ":");
            gen_value(b, depth + 1);
        }
        gen_ws(b);
        put(b, "}");
        break;
    default:
        put(b, "[");
        for (unsigned k = 0, n = rnd(6); k < n; k++) {
            if (k) put(b, ",");
            gen_value(b, depth + 1);
        }
        gen_ws(b);
        put(b, "]");
        break;
    }
    gen_ws(b);
}

/* A tools/call response: a long text first, then other blocks, structuredContent, isError, and
 * the id last (or first). */
static void gen_response(mcp_buf_t *b, int id) {
    char t[64];
    int id_first = rnd(2);
    put(b, "{");
    if (id_first) snprintf(t, sizeof t, "\"id\":%d,", id), put(b, t);
    put(b, "\"result\":{\"content\":[{\"type\":\"text\",\"text\":");
    gen_string(b, 50 + rnd(400));
    put(b, "}");
    for (unsigned k = 0, n = rnd(3); k < n; k++) {
        put(b, ",{\"type\":\"image\",\"data\":");
        gen_string(b, rnd(50));
        put(b, ",\"mimeType\":\"image/png\"}");
    }
    put(b, "],\"structuredContent\":");
    gen_value(b, 1);
    put(b, rnd(2) ? ",\"isError\":true}" : ",\"isError\":false}");
    if (!id_first) snprintf(t, sizeof t, ",\"id\":%d", id), put(b, t);
    put(b, ",\"jsonrpc\":\"2.0\"}");
}

/* Feeds text in random pieces; returns what mcp_rd_feed said last. */
static int feed_pieces(mcp_server_t *s, mcp_reader_t *r, const char *text, size_t n) {
    mcp_rd_reset(r);
    for (size_t off = 0; off < n;) {
        size_t k = 1 + rnd(rnd(4) ? 64 : 4096);
        if (k > n - off) k = n - off;
        int rc = mcp_rd_feed(s, r, text + off, k);
        if (rc < 0) return rc;
        off += k;
    }
    return 0;
}

/* The same value (printed: cJSON_Compare is confused by repeated keys). */
static int same_json(const cJSON *a, const cJSON *b) {
    if (!a || !b) return a == b;
    char *x = cJSON_PrintUnformatted(a), *y = cJSON_PrintUnformatted(b);
    int same = x && y && strcmp(x, y) == 0;
    free(x);
    free(y);
    return same;
}

static mcp_server_t *reader_server(seer_mcp_opts_t *o, size_t keep, int cut_ok) {
    static mcp_server_t s;
    memset(&s, 0, sizeof s);
    o->max_message_bytes = 64u << 20;
    s.name = (char *)"r";
    s.opts = o;
    s.keep = keep;
    s.cut_ok = cut_ok;
    return &s;
}

Test(mcp_reader, whole_or_cut_it_agrees_with_cjson) {
    seer_mcp_opts_t o = test_opts();
    mcp_reader_t r;
    memset(&r, 0, sizeof r);
    rng = getenv("MCP_READER_SEED") ? (unsigned)atoi(getenv("MCP_READER_SEED")) : 12345;
    int cuts = 0;
    for (int iter = 0; iter < 3000; iter++) {
        mcp_buf_t doc = {0};
        if (iter % 3)
            gen_response(&doc, iter);
        else
            gen_value(&doc, 0);
        cJSON *want = cJSON_ParseWithLength(doc.data, doc.len);
        cr_assert_not_null(want, "generated JSON does not parse: %s", doc.data);
        /* whole */
        mcp_server_t *s = reader_server(&o, 64u << 20, 0);
        cr_assert_eq(feed_pieces(s, &r, doc.data, doc.len), 0);
        cr_assert_eq(r.over, 0);
        cJSON *got = cJSON_ParseWithLength(r.buf.data, r.buf.len);
        cr_assert(got && same_json(want, got), "read whole, it is not the same: %s\n%.*s", doc.data, (int)r.buf.len,
                  r.buf.data);
        cJSON_Delete(got);
        /* cut */
        if (iter % 3) {
            size_t keep = 40 + rnd((unsigned)r.charge + 40);
            s = reader_server(&o, keep, 1);
            cr_assert_eq(feed_pieces(s, &r, doc.data, doc.len), 0);
            const cJSON *wres = cJSON_GetObjectItem(want, "result");
            cr_assert_eq(r.id_state, 2);
            cr_assert_eq(atoi(r.id), iter);
            cr_assert_eq(r.is_error, cJSON_IsTrue(cJSON_GetObjectItem(wres, "isError")));
            size_t content_decoded = 0;
            for (const cJSON *b = cJSON_GetObjectItem(wres, "content")->child; b; b = b->next) {
                const cJSON *t = cJSON_GetObjectItem(b, "text");
                if (!t) t = cJSON_GetObjectItem(b, "data");
                content_decoded += strlen(t->valuestring);
            }
            cr_assert_geq(r.content_bytes, content_decoded);
            if (!r.over) goto next;
            cuts++;
            cr_assert_leq(r.buf.len, keep + 16, "%zu bytes kept for a bound of %zu", r.buf.len, keep);
            if (!r.buf.len) goto next; /* cut before anything could be kept */
            got = cJSON_ParseWithLength(r.buf.data, r.buf.len);
            cr_assert_not_null(got, "the cut is not JSON (keep %zu): %.*s", keep, (int)r.buf.len, r.buf.data);
            const cJSON *gres = cJSON_GetObjectItem(got, "result");
            const cJSON *gtext = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(gres, "content"), 0), "text");
            const char *wtext = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(wres, "content"), 0), "text")->valuestring;
            if (gtext) {
                cr_assert(cJSON_IsString(gtext));
                cr_assert_eq(strncmp(gtext->valuestring, wtext, strlen(gtext->valuestring)), 0, "not a prefix:\n%s\n%s",
                             gtext->valuestring, wtext);
            }
            if (r.structured_done)
                cr_assert(same_json(cJSON_GetObjectItem(gres, "structuredContent"), cJSON_GetObjectItem(wres, "structuredContent")));
            cJSON_Delete(got);
        }
    next:
        cJSON_Delete(want);
        mcp_buf_free(&doc);
    }
    cr_assert_gt(cuts, 1000);
    /* mutations: whatever cJSON accepts, the reader hands over unchanged */
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        mcp_buf_t doc = {0};
        if (iter % 2)
            gen_response(&doc, iter);
        else
            gen_value(&doc, 0);
        static const char set[] = "{}[]\":,\\ \t\nu0aZ-.e\x01\xff";
        for (unsigned m = 0, nm = 1 + rnd(3); m < nm && doc.len > 1; m++) {
            size_t at = rnd((unsigned)doc.len);
            switch (rnd(3)) {
            case 0: memmove(doc.data + at, doc.data + at + 1, doc.len - at), doc.len--; break;
            case 1: doc.data[at] = set[rnd(sizeof set - 1)]; break;
            default:
                mcp_buf_add(&doc, "x", 1);
                memmove(doc.data + at + 1, doc.data + at, doc.len - at - 1);
                doc.data[at] = set[rnd(sizeof set - 1)];
            }
        }
        cJSON *want = cJSON_ParseWithLength(doc.data, doc.len);
        if (want) {
            accepted++;
            mcp_server_t *s = reader_server(&o, 64u << 20, 0);
            cr_assert_eq(feed_pieces(s, &r, doc.data, doc.len), 0);
            cJSON *got = cJSON_ParseWithLength(r.buf.data, r.buf.len);
            cr_assert(got && same_json(want, got), "cJSON takes it, the reader lost it:\n%.*s\n%.*s", (int)doc.len,
                      doc.data, (int)r.buf.len, r.buf.data);
            cJSON_Delete(got);
            cJSON_Delete(want);
        }
        mcp_buf_free(&doc);
    }
    cr_assert_gt(accepted, 1000);
    mcp_rd_free(&r);
}

/* A message of millions of tiny values is bounded like a long string: against max_result_bytes
 * each value counts 16 bytes more, and any other message past 4,000,000 values is not read at
 * all (nothing of it is kept; the rest is scanned); past max_message_bytes the reader says so. */
Test(mcp_reader, bounds_count_values_and_bytes) {
    seer_mcp_opts_t o = test_opts();
    mcp_reader_t r;
    memset(&r, 0, sizeof r);
    size_t n = 4500000;
    char *zeros = malloc(n * 2 + 2);
    zeros[0] = '[';
    for (size_t i = 0; i < n; i++) zeros[1 + 2 * i] = '0', zeros[2 + 2 * i] = ',';
    zeros[2 * n] = ']';
    /* 2,000,000 values: read whole without a bound, cut at 1 MiB with one */
    size_t m = 2000000;
    zeros[2 * m] = ']';
    mcp_server_t *s = reader_server(&o, 64u << 20, 0);
    cr_assert_eq(feed_pieces(s, &r, zeros, 2 * m + 1), 0);
    cr_assert_eq(r.over, 0);
    cr_assert_eq(r.buf.len, 2 * m + 1);
    s = reader_server(&o, 1u << 20, 1);
    cr_assert_eq(feed_pieces(s, &r, zeros, 2 * m + 1), 0);
    cr_assert_eq(r.over, 1);
    cr_assert_eq(r.buf.len, 0, "a batch is not cut (only one JSON-RPC object is)");
    cr_assert_lt(r.read_bytes, (1u << 20) / 8, "%zu: 18 bytes a value against the bound, 2 of them text", r.read_bytes);
    zeros[2 * m] = ',';
    /* 4,500,000 values: not read */
    s = reader_server(&o, 64u << 20, 0);
    cr_assert_eq(feed_pieces(s, &r, zeros, 2 * n + 1), 0);
    cr_assert(r.over && r.refused);
    cr_assert_eq(r.buf.len, 0);
    cr_assert_eq(r.values, n + 1, "%zu: scanned to the end", r.values);
    /* bytes */
    o.max_message_bytes = 1000;
    s->opts = &o;
    cr_assert_lt(feed_pieces(s, &r, zeros, 2000), 0);
    free(zeros);
    mcp_rd_free(&r);
}

/* A stdio response of 4.5 million values fails its request without breaking the server; so
 * does one over HTTP (below). */
Test(mcp_stdio, a_response_of_too_many_values_is_not_read_and_the_server_stays_usable) {
    seer_mcp_opts_t o = test_opts();
    seer_mcp_client_t *c = connect_one(
        "fake",
        "init; tools; rd; printf '{\"jsonrpc\":\"2.0\",\"result\":{\"content\":[],\"structuredContent\":[';"
        " yes 0, | head -n 4500000 | tr -d '\\n'; printf '0]},\"id\":%s}\\n' $i; serve",
        &o);
    cJSON *r;
    seer_err_t err;
    long before = vm_hwm_kib();
    cr_assert_eq(seer_mcp_call(c, "t", NULL, NULL, &r, &err), SEER_EPARSE, "%s", err.msg);
    long after = vm_hwm_kib();
    cr_assert(strstr(err.msg, "mcp server 'fake': tools/call 't': the response has more than 4000000 JSON values"), "%s", err.msg);
    cr_assert(UNDER_ASAN || after - before < 16 * 1024, "the call grew the process by %ld KiB", after - before);
    r = call_ok(c, "t", NULL, NULL);
    cr_assert_str_eq(first_text(r), "ok");
    cJSON_Delete(r);
    seer_mcp_close(c);
    LEAK_CHECK();
}

/* ---- timeouts, cancellation, Ctrl-C ---------------------------------------------------------- */

Test(mcp_stdio, timeout_cancels_and_the_client_stays_usable) {
    seer_mcp_opts_t o = test_opts();
    /* The first call is never answered; after the cancellation arrives the late answer is sent
     * anyway (the client must ignore it), then the next call is answered normally. */
    seer_mcp_client_t *c =
        connect_one("fake", "init; tools; rd; first=$i; rd; i=$first; text late; serve fine", &o);
    seer_mcp_call_opts_t co = {300, NULL, NULL};
    cJSON *r;
    seer_err_t err;
    int64_t t0 = 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    }
    cr_assert_eq(seer_mcp_call(c, "t", NULL, &co, &r, &err), SEER_MCP_ETIMEOUT);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t took = ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - t0;
    cr_assert(took >= 290 && took < 1500, "took %d ms", (int)took);
    cr_assert(strstr(err.msg, "mcp server 'fake': tools/call 't' timed out after 0.3"), "%s", err.msg);
    r = call_ok(c, "t", NULL, NULL);
    cr_assert_str_eq(first_text(r), "fine");
    cJSON_Delete(r);
    seer_mcp_close(c);
    char *log = read_log("fake");
    cr_assert(strstr(log, "\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":"), "%s", log);
    cr_assert(strstr(log, "\"reason\":\"timed out\""), "%s", log);
    cr_assert_null(strstr(warnings, "never sent"), "a late answer to a cancelled request is expected: %s", warnings);
    free(log);
    LEAK_CHECK();
}

Test(mcp_stdio, interrupt_cancels_the_call) {
    seer_mcp_opts_t o = test_opts();
    seer_mcp_client_t *c = connect_one("fake", "init; tools; rd; rd; serve", &o);
    interrupt_after = 3;
    cJSON *r;
    seer_err_t err;
    cr_assert_eq(seer_mcp_call(c, "t", NULL, NULL, &r, &err), SEER_EINTR);
    cr_assert(strstr(err.msg, "mcp server 'fake': tools/call 't': interrupted"), "%s", err.msg);
    interrupt_pending = 0;
    r = call_ok(c, "t", NULL, NULL);
    cJSON_Delete(r);
    seer_mcp_close(c);
    char *log = read_log("fake");
    cr_assert(strstr(log, "\"reason\":\"interrupted\""), "%s", log);
    free(log);
    LEAK_CHECK();
}

Test(mcp_stdio, server_that_never_initializes) {
    seer_mcp_opts_t o = test_opts();
    o.connect_timeout_ms = 300;
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, "mute", fake_spec("mute", "rd; sleep 30", NULL));
    seer_err_t err;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    cr_assert_eq(connect_fails(cfg, &o, &err), SEER_MCP_ETIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double took = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    cr_assert(strstr(err.msg, "mcp server 'mute': initialize timed out after 0.3 s"), "%s", err.msg);
    cr_assert_lt(took, 2.0, "a server that hangs is killed at once (took %.2f s)", took);
    LEAK_CHECK();
}

/* ---- crashes ---------------------------------------------------------------------------------- */

Test(mcp_stdio, crash_during_a_call_reports_status_and_stderr) {
    seer_mcp_opts_t o = test_opts();
    seer_mcp_client_t *c = connect_one("fake", "init; tools; rd; echo 'Traceback: something broke' >&2; exit 7", &o);
    cJSON *r;
    seer_err_t err;
    cr_assert_eq(seer_mcp_call(c, "t", NULL, NULL, &r, &err), SEER_MCP_EDEAD);
    cr_assert(strstr(err.msg, "mcp server 'fake': tools/call 't': the server exited with status 7"), "%s", err.msg);
    cr_assert(strstr(err.msg, "Traceback: something broke"), "%s", err.msg);
    /* Later calls fail at once with the same reason. */
    cr_assert_eq(seer_mcp_call(c, "t", NULL, NULL, &r, &err), SEER_MCP_EDEAD);
    cr_assert(strstr(err.msg, "exited with status 7"), "%s", err.msg);
    seer_mcp_server_info_t info;
    seer_mcp_server_info(c, 0, &info);
    cr_assert_not_null(info.dead);
    cr_assert_eq(info.pid, 0);
    seer_mcp_close(c);
    LEAK_CHECK();
}

Test(mcp_stdio, a_server_that_floods_stderr_is_not_blocked) {
    seer_mcp_opts_t o = test_opts();
    /* 2 MB of stderr before the answer: far more than a pipe holds. */
    seer_mcp_client_t *c = connect_one("fake", "init; tools; rd; head -c 2000000 /dev/zero | tr '\\0' e >&2; echo END >&2; text ok; serve", &o);
    cJSON *r = call_ok(c, "t", NULL, NULL);
    cr_assert_str_eq(first_text(r), "ok");
    cJSON_Delete(r);
    seer_mcp_close(c);
    LEAK_CHECK();
}

Test(mcp_stdio, killed_by_a_signal) {
    seer_mcp_opts_t o = test_opts();
    seer_mcp_client_t *c = connect_one("fake", "init; tools; rd; kill -9 $$", &o);
    cJSON *r;
    seer_err_t err;
    cr_assert_eq(seer_mcp_call(c, "t", NULL, NULL, &r, &err), SEER_MCP_EDEAD);
    cr_assert(strstr(err.msg, "killed by signal 9"), "%s", err.msg);
    cr_assert(strstr(err.msg, "nothing on its stderr"), "%s", err.msg);
    seer_mcp_close(c);
    LEAK_CHECK();
}

Test(mcp_stdio, crash_before_initialize) {
    seer_mcp_opts_t o = test_opts();
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, "bad", fake_spec("bad", "echo 'ImportError: no module named foo' >&2; exit 1", NULL));
    seer_err_t err;
    cr_assert_eq(connect_fails(cfg, &o, &err), SEER_MCP_EDEAD);
    cr_assert(strstr(err.msg, "mcp server 'bad': initialize: the server exited with status 1"), "%s", err.msg);
    cr_assert(strstr(err.msg, "ImportError: no module named foo"), "%s", err.msg);
    LEAK_CHECK();
}

Test(mcp_stdio, jsonrpc_errors_name_the_server) {
    seer_mcp_opts_t o = test_opts();
    seer_mcp_client_t *c = connect_one(
        "fake",
        "init; tools; rd; printf '{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-32602,\"message\":\"Unknown tool: nope\"}}\\n' $i; serve",
        &o);
    cJSON *r;
    seer_err_t err;
    cr_assert_eq(seer_mcp_call_tool(c, "fake", "nope", NULL, NULL, &r, &err), SEER_MCP_ERPC);
    cr_assert_str_eq(err.msg, "mcp server 'fake': tools/call 'nope' failed: Unknown tool: nope (JSON-RPC error -32602)");
    r = call_ok(c, "t", NULL, NULL);
    cJSON_Delete(r);
    seer_mcp_close(c);
    LEAK_CHECK();
}

/* ---- several servers ------------------------------------------------------------------------ */

Test(mcp_stdio, clashing_tool_names_are_qualified) {
    seer_mcp_opts_t o = test_opts();
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, "a", fake_spec("a", "init; tools; serve from-a", NULL));
    cJSON_AddItemToObject(
        cfg, "b",
        fake_spec("b", "init; rd; res '{\"tools\":[{\"name\":\"t\"},{\"name\":\"only_b\"}]}'; serve from-b", NULL));
    seer_mcp_client_t *c;
    seer_err_t err;
    cr_assert_eq(seer_mcp_connect(&c, cfg, &o, &err), 0, "%s", err.msg);
    cJSON_Delete(cfg);
    const seer_mcp_tool_t *tools;
    size_t n;
    cr_assert_eq(seer_mcp_tools(c, &tools, &n, &err), 0);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(tools[0].qualified_name, "a__t");
    cr_assert_str_eq(tools[1].qualified_name, "b__t");
    cr_assert_str_eq(tools[2].qualified_name, "only_b");
    cJSON *r = call_ok(c, "a__t", NULL, NULL);
    cr_assert_str_eq(first_text(r), "from-a");
    cJSON_Delete(r);
    r = call_ok(c, "b__t", NULL, NULL);
    cr_assert_str_eq(first_text(r), "from-b");
    cJSON_Delete(r);
    r = call_ok(c, "b__only_b", NULL, NULL); /* <server>__<tool> always works */
    cr_assert_str_eq(first_text(r), "from-b");
    cJSON_Delete(r);
    cr_assert_eq(seer_mcp_call(c, "t", NULL, NULL, &r, &err), SEER_ENOTFOUND);
    cr_assert(strstr(err.msg, "several servers have a tool 't'"), "%s", err.msg);
    cr_assert_eq(seer_mcp_call(c, "zzz", NULL, NULL, &r, &err), SEER_ENOTFOUND);
    cr_assert(strstr(err.msg, "no tool 'zzz' (tools: a__t, b__t, only_b)"), "%s", err.msg);
    cr_assert_eq(seer_mcp_call_tool(c, "nobody", "t", NULL, NULL, &r, &err), SEER_ENOTFOUND);
    cr_assert(strstr(err.msg, "no server named 'nobody' (servers: a, b)"), "%s", err.msg);
    seer_mcp_close(c);
    LEAK_CHECK();
}

Test(mcp_stdio, one_dead_server_leaves_the_others_working) {
    seer_mcp_opts_t o = test_opts();
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, "a", fake_spec("a", "init; rd; res '{\"tools\":[{\"name\":\"x\"}]}'; rd; exit 2", NULL));
    cJSON_AddItemToObject(cfg, "b", fake_spec("b", "init; tools; serve alive", NULL));
    seer_mcp_client_t *c;
    seer_err_t err;
    cr_assert_eq(seer_mcp_connect(&c, cfg, &o, &err), 0, "%s", err.msg);
    cJSON_Delete(cfg);
    cJSON *r;
    cr_assert_eq(seer_mcp_call(c, "x", NULL, NULL, &r, &err), SEER_MCP_EDEAD);
    cr_assert(strstr(err.msg, "mcp server 'a'"), "%s", err.msg);
    r = call_ok(c, "t", NULL, NULL);
    cr_assert_str_eq(first_text(r), "alive");
    cJSON_Delete(r);
    seer_mcp_close(c);
    LEAK_CHECK();
}

Test(mcp_stdio, tool_list_changes_are_picked_up) {
    seer_mcp_opts_t o = test_opts();
    seer_mcp_client_t *c = connect_one(
        "fake",
        "init; tools; rd; echo '{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}'; text ok;"
        " rd; res '{}'; rd; res '{\"tools\":[{\"name\":\"t\"},{\"name\":\"new\"}]}'; serve",
        &o);
    cJSON *r = call_ok(c, "t", NULL, NULL);
    cJSON_Delete(r);
    const seer_mcp_tool_t *tools;
    size_t n;
    seer_err_t err;
    /* The notification came with the answer; a ping reads it. */
    cr_assert_eq(seer_mcp_request(c, "fake", "ping", NULL, 0, &r, &err), 0, "%s", err.msg);
    cJSON_Delete(r);
    cr_assert_eq(seer_mcp_tools(c, &tools, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(tools[1].name, "new");
    seer_mcp_close(c);
    LEAK_CHECK();
}

Test(mcp_stdio, env_args_and_cwd_reach_the_server) {
    seer_mcp_opts_t o = test_opts();
    cJSON *spec = fake_spec("fake", "init; tools; rd; text \"$(pwd)|$FOO|$0|$1\"; serve", NULL);
    cJSON_AddStringToObject(cJSON_GetObjectItem(spec, "env"), "FOO", "bar baz");
    cJSON_AddItemToArray(cJSON_GetObjectItem(spec, "args"), cJSON_CreateString("zero"));
    cJSON_AddItemToArray(cJSON_GetObjectItem(spec, "args"), cJSON_CreateString("one"));
    cJSON_AddStringToObject(spec, "cwd", tmpdir);
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddItemToObject(cfg, "fake", spec);
    seer_mcp_client_t *c;
    seer_err_t err;
    cr_assert_eq(seer_mcp_connect(&c, cfg, &o, &err), 0, "%s", err.msg);
    cJSON_Delete(cfg);
    cJSON *r = call_ok(c, "t", NULL, NULL);
    char want[200];
    snprintf(want, sizeof want, "%s|bar baz|zero|one", tmpdir);
    cr_assert_str_eq(first_text(r), want);
    cJSON_Delete(r);
    seer_mcp_close(c);
    LEAK_CHECK();
}

Test(mcp_stdio, close_waits_then_terminates) {
    seer_mcp_opts_t o = test_opts();
    /* Ignores EOF on stdin and SIGTERM is its only way out. */
    seer_mcp_client_t *c = connect_one("fake", "init; tools; while :; do sleep 0.05; done", &o);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    seer_mcp_close(c);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double took = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    cr_assert(took > 1.9 && took < 4.0, "took %.2f s", took);
    LEAK_CHECK();
}

/* ---- configuration errors ---------------------------------------------------------------------- */

static void config_error(const char *json, const char *expect) {
    seer_mcp_opts_t o = test_opts();
    cJSON *cfg = cJSON_Parse(json);
    cr_assert_not_null(cfg, "%s", json);
    seer_err_t err;
    connect_fails(cfg, &o, &err);
    cr_assert(strstr(err.msg, expect), "config %s: got '%s', want '%s'", json, err.msg, expect);
}

Test(mcp_config, errors_name_the_server_and_the_fix) {
    config_error("{\"s\":{\"type\":\"sse\",\"url\":\"http://x\"}}", "mcp server 's': type 'sse'");
    config_error("{\"s\":{\"type\":\"websocket\"}}", "mcp server 's': unknown type 'websocket' (valid types: stdio, http, streamable-http)");
    config_error("{\"s\":{\"type\":\"stdio\"}}", "mcp server 's': command must be a non-empty string");
    config_error("{\"s\":{\"command\":\"x\",\"arg\":[]}}", "mcp server 's': unknown field 'arg' (a stdio server takes type, command, args, env, cwd)");
    config_error("{\"s\":{\"command\":\"x\",\"args\":[\"a\",1]}}", "mcp server 's': args[2] must be a string");
    config_error("{\"s\":{\"command\":\"x\",\"env\":{\"A\":1}}}", "mcp server 's': env.A must be a string");
    config_error("{\"s\":{\"command\":\"x\",\"cwd\":\"/nonexistent/dir\"}}", "mcp server 's': cwd '/nonexistent/dir' is not a directory");
    config_error("{\"s\":{\"url\":\"ftp://x\"}}", "mcp server 's': url must be an http:// or https:// address");
    config_error("{\"s\":{\"type\":\"http\",\"url\":\"http://x\",\"command\":\"y\"}}", "unknown field 'command' (a http server takes type, url, headers)");
    config_error("{\"s\":{}}", "mcp server 's': needs type = \"stdio\" with a command, or type = \"http\" with a url");
    config_error("{\"s\":3}", "mcp server 's': the entry must be a table");
    config_error("[1]", "the configuration must be a table");
    config_error("{\"s\":{\"command\":\"/nonexistent/seer-mcp-server\"}}",
                 "mcp server 's': cannot start '/nonexistent/seer-mcp-server': No such file or directory");
    /* A bad entry starts nothing, not even the good ones before it. */
    unlink("/tmp/seer-mcp-test-started");
    config_error("{\"ok\":{\"command\":\"/bin/sh\",\"args\":[\"-c\",\"touch /tmp/seer-mcp-test-started\"]},\"bad\":{\"type\":\"x\"}}",
                 "mcp server 'bad'");
    usleep(100000);
    cr_assert_neq(access("/tmp/seer-mcp-test-started", F_OK), 0);
    LEAK_CHECK();
}

Test(mcp_config, empty_configuration_and_the_claude_desktop_wrapper) {
    seer_mcp_opts_t o = test_opts();
    cJSON *cfg = cJSON_Parse("{\"mcpServers\":{}}");
    seer_mcp_client_t *c;
    seer_err_t err;
    cr_assert_eq(seer_mcp_connect(&c, cfg, &o, &err), 0, "%s", err.msg);
    cJSON_Delete(cfg);
    const seer_mcp_tool_t *tools;
    size_t n = 9;
    cr_assert_eq(seer_mcp_tools(c, &tools, &n, &err), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(seer_mcp_server_count(c), 0);
    seer_mcp_close(c);
    LEAK_CHECK();
}

/* ---- streamable HTTP against libmicrohttpd --------------------------------------------------------
 * The fake answers initialize with an SSE stream cut into odd pieces (with a comment, an event
 * of another type and CRLF line ends), tools/list with a JSON body, tools/call with an SSE
 * stream that pings the client first, notifications with 202; it records the headers it saw. */

typedef struct {
    char body[65536];
    size_t len;
} req_t;

static struct {
    pthread_mutex_t mu;
    char seen[16384]; /* "METHOD session=... version=... auth=...|" per request, and the bodies */
    int fail_calls_with; /* HTTP status for tools/call, 0: answer normally */
    int sleep_ms;
    int big_call; /* tools/call answers with 40 MB: 1 a JSON body, 2 an event stream */
} H = {PTHREAD_MUTEX_INITIALIZER, "", 0, 0, 0};

/* A body made on the fly: head, then unit count times, then tail (never held whole). */
typedef struct {
    char *head, *unit, *tail;
    size_t hl, ul, tl, count;
} gen_body_t;

static ssize_t gen_read(void *cls, uint64_t pos, char *buf, size_t max) {
    gen_body_t *g = cls;
    size_t total = g->hl + g->ul * g->count + g->tl, o = 0;
    if (pos >= total) return MHD_CONTENT_READER_END_OF_STREAM;
    while (o < max && pos < total) {
        const char *src;
        size_t avail;
        if (pos < g->hl) {
            src = g->head + pos, avail = g->hl - pos;
        } else if (pos < g->hl + g->ul * g->count) {
            size_t k = (size_t)(pos - g->hl) % g->ul;
            src = g->unit + k, avail = g->ul - k;
        } else {
            size_t k = (size_t)(pos - g->hl - g->ul * g->count);
            src = g->tail + k, avail = g->tl - k;
        }
        size_t n = avail < max - o ? avail : max - o;
        memcpy(buf + o, src, n);
        o += n;
        pos += n;
    }
    return (ssize_t)o;
}

static void gen_free(void *cls) {
    gen_body_t *g = cls;
    free(g->head);
    free(g->unit);
    free(g->tail);
    free(g);
}

static gen_body_t *gen_new(char *head, char *unit, size_t count, char *tail) {
    gen_body_t *g = calloc(1, sizeof *g);
    g->head = head, g->unit = unit, g->tail = tail, g->count = count;
    g->hl = strlen(head), g->ul = strlen(unit), g->tl = strlen(tail);
    return g;
}

/* 40 MB for a tools/call: as one JSON body (a single text, the id last), or as an event stream
 * of 2000 progress events and then one event of 40,000 data lines (a block of 1000 bytes each).
 * Both go out chunked (the size is not announced). */
static struct MHD_Response *big_response(int kind, int idv) {
    char *head = malloc(400000), *unit = malloc(1100), *tail = malloc(200);
    size_t count = 40000;
    if (kind == 3) { /* 4.5 million values */
        strcpy(head, "{\"jsonrpc\":\"2.0\",\"result\":{\"content\":[],\"structuredContent\":[");
        strcpy(unit, "0,");
        snprintf(tail, 200, "0]},\"id\":%d}", idv);
        count = 4500000;
    } else if (kind == 1) {
        strcpy(head, "{\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"");
        memset(unit, 'x', 1000), unit[1000] = 0;
        snprintf(tail, 200, "\"}],\"isError\":false},\"id\":%d}", idv);
    } else {
        size_t o = 0;
        for (int k = 0; k < 2000; k++)
            o += (size_t)snprintf(head + o, 400000 - o,
                                  "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":%d,\"progress\":%d}}\n\n",
                                  idv, k);
        snprintf(head + o, 400000 - o, "data: {\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"first\"}\n", idv);
        strcpy(unit, "data: ,{\"type\":\"text\",\"text\":\"");
        size_t ul = strlen(unit);
        memset(unit + ul, 'y', 1000);
        strcpy(unit + ul + 1000, "\"}\n");
        strcpy(tail, "data: ],\"isError\":true}}\n\n");
    }
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, gen_read, gen_new(head, unit, count, tail), gen_free);
    MHD_add_response_header(resp, "Content-Type", kind == 2 ? "text/event-stream" : "application/json");
    return resp;
}

static void seen_add(const char *s) {
    pthread_mutex_lock(&H.mu);
    strncat(H.seen, s, sizeof H.seen - strlen(H.seen) - 1);
    pthread_mutex_unlock(&H.mu);
}

/* Serves the chunks of an SSE answer one by one. */
typedef struct {
    char *parts[8];
    int n, next;
    size_t off;
} stream_t;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_t *s = cls;
    if (s->next >= s->n) return MHD_CONTENT_READER_END_OF_STREAM;
    const char *p = s->parts[s->next];
    size_t left = strlen(p) - s->off;
    size_t n = left < max ? left : max;
    memcpy(buf, p + s->off, n);
    s->off += n;
    if (s->off == strlen(p)) {
        s->next++;
        s->off = 0;
        usleep(20000); /* separate TCP writes, so the client sees the pieces apart */
    }
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_t *s = cls;
    for (int i = 0; i < s->n; i++) free(s->parts[i]);
    free(s);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)cls;
    (void)url;
    (void)version;
    req_t *r = *con_cls;
    if (!r) {
        *con_cls = calloc(1, sizeof *r);
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size < sizeof r->body - r->len - 1 ? *upload_size : sizeof r->body - r->len - 1;
        memcpy(r->body + r->len, upload, n);
        r->len += n;
        *upload_size = 0;
        return MHD_YES;
    }
    const char *sid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Mcp-Session-Id");
    const char *ver = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "MCP-Protocol-Version");
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
    char line[70000];
    snprintf(line, sizeof line, "%s session=%s version=%s auth=%s accept=%s body=%s|\n", method, sid ? sid : "-",
             ver ? ver : "-", auth ? auth : "-", accept ? accept : "-", r->body);
    seen_add(line);
    struct MHD_Response *resp;
    int status = 200;
    cJSON *m = cJSON_Parse(r->body);
    const cJSON *meth = cJSON_GetObjectItem(m, "method");
    const cJSON *id = cJSON_GetObjectItem(m, "id");
    int idv = cJSON_IsNumber(id) ? (int)id->valuedouble : -1;
    const char *mname = cJSON_IsString(meth) ? meth->valuestring : "";
    char buf[2048];
    if (strcmp(method, "DELETE") == 0) {
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    } else if (!meth || !cJSON_IsNumber(id)) { /* notification or response */
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        status = 202;
    } else if (strcmp(mname, "initialize") == 0) {
        stream_t *s = calloc(1, sizeof *s);
        s->parts[s->n++] = strdup(": a comment\r\n\r\nevent: other\r\ndata: {\"not\":\"for us\"}\r\n\r\nevent: mess");
        snprintf(buf, sizeof buf,
                 "age\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"protocolVersion\":\"2025-06-18\",\r\n"
                 "data: \"capabilities\":{},\"serverInfo\":{\"name\":\"mhd\"}}}\r\n",
                 idv);
        s->parts[s->n++] = strdup(buf);
        s->parts[s->n++] = strdup("\r\n");
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, stream_read, s, stream_free);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Mcp-Session-Id", "sess-42");
    } else if (strcmp(mname, "tools/list") == 0) {
        snprintf(buf, sizeof buf, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"tools\":[{\"name\":\"t\"}]}}", idv);
        resp = MHD_create_response_from_buffer(strlen(buf), buf, MHD_RESPMEM_MUST_COPY);
        MHD_add_response_header(resp, "Content-Type", "application/json");
    } else if (strcmp(mname, "tools/call") == 0 && H.fail_calls_with) {
        status = H.fail_calls_with;
        const char *b = status == 404 ? "session not found" : "<html>Internal Server Error</html>";
        resp = MHD_create_response_from_buffer(strlen(b), (void *)b, MHD_RESPMEM_PERSISTENT);
    } else if (strcmp(mname, "tools/call") == 0 && H.big_call) {
        resp = big_response(H.big_call, idv);
    } else if (strcmp(mname, "big/values") == 0) {
        resp = big_response(3, idv);
    } else if (strcmp(mname, "tools/call") == 0) {
        if (H.sleep_ms) usleep((useconds_t)H.sleep_ms * 1000);
        stream_t *s = calloc(1, sizeof *s);
        s->parts[s->n++] = strdup("data: {\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"method\":\"ping\"}\n\n");
        snprintf(buf, sizeof buf,
                 "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":%d,\"progress\":1}}\n\n"
                 "data: {\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"via sse\"}],\"isError\":false}}\n\n",
                 idv, idv);
        s->parts[s->n++] = strdup(buf);
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, stream_read, s, stream_free);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    } else {
        snprintf(buf, sizeof buf, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{}}", idv);
        resp = MHD_create_response_from_buffer(strlen(buf), buf, MHD_RESPMEM_MUST_COPY);
        MHD_add_response_header(resp, "Content-Type", "application/json");
    }
    cJSON_Delete(m);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)conn;
    (void)toe;
    free(*con_cls);
    *con_cls = NULL;
}

static struct MHD_Daemon *start_mhd(int *port) {
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL, handler, NULL,
                         MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
    cr_assert_not_null(d);
    *port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
    return d;
}

static cJSON *http_config(int port) {
    char json[300];
    snprintf(json, sizeof json,
             "{\"web\":{\"type\":\"streamable-http\",\"url\":\"http://127.0.0.1:%d/mcp\",\"headers\":{\"Authorization\":\"Bearer tok\"}}}",
             port);
    return cJSON_Parse(json);
}

Test(mcp_http, sse_json_sessions_headers_and_delete) {
    int port;
    struct MHD_Daemon *d = start_mhd(&port);
    seer_mcp_opts_t o = test_opts();
    cJSON *cfg = http_config(port);
    seer_mcp_client_t *c;
    seer_err_t err;
    cr_assert_eq(seer_mcp_connect(&c, cfg, &o, &err), 0, "%s", err.msg);
    cJSON_Delete(cfg);
    seer_mcp_server_info_t info;
    seer_mcp_server_info(c, 0, &info);
    cr_assert_str_eq(info.protocol_version, "2025-06-18");
    cr_assert_str_eq(info.transport, "http");
    seer_mcp_call_opts_t co = {0, on_progress, NULL};
    cJSON *r = call_ok(c, "t", "{\"q\":1}", &co);
    cr_assert_str_eq(first_text(r), "via sse");
    cJSON_Delete(r);
    cr_assert_eq(progress_calls, 1);
    cr_assert(isnan(last_total));
    seer_mcp_close(c);
    MHD_stop_daemon(d);

    char *lines[16];
    int n = 0;
    for (char *p = strtok(H.seen, "\n"); p && n < 16; p = strtok(NULL, "\n")) lines[n++] = p;
    /* initialize, initialized, tools/list, tools/call, the answer to the server's ping, DELETE
     * (the ping answer and the call may be seen in either order) */
    cr_assert_eq(n, 6, "%d requests:\n%s", n, H.seen);
    cr_assert(strstr(lines[0], "POST session=- version=- auth=Bearer tok accept=application/json, text/event-stream"), "%s", lines[0]);
    cr_assert(strstr(lines[1], "POST session=sess-42 version=2025-06-18 auth=Bearer tok") && strstr(lines[1], "notifications/initialized"),
              "%s", lines[1]);
    cr_assert(strstr(lines[2], "session=sess-42 version=2025-06-18") && strstr(lines[2], "tools/list"), "%s", lines[2]);
    int ping_answer = 0, call = 0;
    for (int i = 3; i < 5; i++) {
        if (strstr(lines[i], "{\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"result\":{}}")) ping_answer = 1;
        if (strstr(lines[i], "tools/call") && strstr(lines[i], "\"progressToken\"")) call = 1;
    }
    cr_assert(ping_answer && call, "%s\n%s", lines[3], lines[4]);
    cr_assert(strstr(lines[5], "DELETE session=sess-42 version=2025-06-18 auth=Bearer tok"), "%s", lines[5]);
    LEAK_CHECK();
}

Test(mcp_http, http_errors_and_timeouts_name_the_server) {
    int port;
    struct MHD_Daemon *d = start_mhd(&port);
    seer_mcp_opts_t o = test_opts();
    cJSON *cfg = http_config(port);
    seer_mcp_client_t *c;
    seer_err_t err;
    cr_assert_eq(seer_mcp_connect(&c, cfg, &o, &err), 0, "%s", err.msg);
    cJSON_Delete(cfg);
    cJSON *r;
    H.fail_calls_with = 500;
    cr_assert_eq(seer_mcp_call(c, "t", NULL, NULL, &r, &err), SEER_EIO);
    cr_assert(strstr(err.msg, "mcp server 'web': tools/call 't': HTTP 500 from http://127.0.0.1:"), "%s", err.msg);
    cr_assert(strstr(err.msg, "Internal Server Error"), "%s", err.msg);
    H.fail_calls_with = 404;
    cr_assert_eq(seer_mcp_call(c, "t", NULL, NULL, &r, &err), SEER_EIO);
    cr_assert(strstr(err.msg, "no longer knows the session"), "%s", err.msg);
    H.fail_calls_with = 0;
    H.sleep_ms = 600;
    seer_mcp_call_opts_t co = {200, NULL, NULL};
    cr_assert_eq(seer_mcp_call(c, "t", NULL, &co, &r, &err), SEER_MCP_ETIMEOUT);
    cr_assert(strstr(err.msg, "mcp server 'web': tools/call 't' timed out after 0.2"), "%s", err.msg);
    /* Ctrl-C: the cancellation still goes out while the interrupt is pending. */
    interrupt_after = 3;
    cr_assert_eq(seer_mcp_call(c, "t", NULL, NULL, &r, &err), SEER_EINTR);
    cr_assert(strstr(err.msg, "mcp server 'web': tools/call 't': interrupted"), "%s", err.msg);
    interrupt_pending = 0;
    H.sleep_ms = 0;
    r = call_ok(c, "t", NULL, NULL);
    cJSON_Delete(r);
    seer_mcp_close(c);
    MHD_stop_daemon(d);
    cr_assert(strstr(H.seen, "\"reason\":\"timed out\""), "%s", H.seen);
    cr_assert(strstr(H.seen, "\"reason\":\"interrupted\""), "%s", H.seen);

    /* Nobody listening. */
    cfg = http_config(port);
    cr_assert_eq(connect_fails(cfg, &o, &err), SEER_EIO);
    cr_assert(strstr(err.msg, "mcp server 'web': initialize: POST http://127.0.0.1:"), "%s", err.msg);
    LEAK_CHECK();
}

/* 40 MB tool results over HTTP with max_result_bytes = 64 KiB, as a JSON body and as an event
 * stream (2000 events first, then one event of 40,000 data lines), both chunked: the client
 * holds about the bound, the result is the first 64 KiB with a note, and the next call on the
 * same session works. A response of 4.5 million values to another request fails it, and the next
 * call works. */
Test(mcp_http, a_result_past_max_result_bytes_is_cut_as_it_streams_and_the_next_call_works) {
    int port;
    struct MHD_Daemon *d = start_mhd(&port);
    seer_mcp_opts_t o = test_opts();
    o.max_result_bytes = 65536;
    o.timeout_ms = 20000;
    cJSON *cfg = http_config(port);
    seer_mcp_client_t *c;
    seer_err_t err;
    cr_assert_eq(seer_mcp_connect(&c, cfg, &o, &err), 0, "%s", err.msg);
    cJSON_Delete(cfg);
    for (int kind = 1; kind <= 2; kind++) {
        H.big_call = kind;
        long before = vm_hwm_kib();
        seer_mcp_call_opts_t co = {0, on_progress, NULL};
        progress_calls = 0;
        cJSON *r = call_ok(c, "t", NULL, &co);
        long after = vm_hwm_kib();
        cr_assert(UNDER_ASAN || after - before < 16 * 1024, "the call grew the process by %ld KiB", after - before);
        cr_assert(strstr(last_text(r), "only its first") && strstr(last_text(r), "(max_result_bytes = 65536)"), "%s", last_text(r));
        cr_assert(cut_field(r, "message_bytes") > 40000000);
        cr_assert(cut_field(r, "read_bytes") <= 65536);
        const cJSON *content = cJSON_GetObjectItem(r, "content");
        size_t kept = 0;
        for (const cJSON *b = content->child; b && b->next; b = b->next) kept += strlen(cJSON_GetObjectItem(b, "text")->valuestring);
        cr_assert(kept > 30000 && kept < 65536, "%zu bytes kept", kept);
        if (kind == 1) {
            cr_assert_eq(cut_field(r, "content_bytes"), 40000000);
            cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r, "isError")));
        } else {
            cr_assert_eq(cut_field(r, "content_bytes"), 40000005);
            cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "isError")));
            cr_assert_str_eq(first_text(r), "first");
            cr_assert_eq(progress_calls, 2000);
        }
        cJSON_Delete(r);
        H.big_call = 0;
        r = call_ok(c, "t", NULL, NULL);
        cr_assert_str_eq(first_text(r), "via sse");
        cJSON_Delete(r);
    }
    /* a response of 4.5 million values to any other request is not read; the session goes on */
    cJSON *r;
    cr_assert_eq(seer_mcp_request(c, "web", "big/values", NULL, 0, &r, &err), SEER_EPARSE, "%s", err.msg);
    cr_assert(strstr(err.msg, "mcp server 'web': big/values: the response has more than 4000000 JSON values"), "%s", err.msg);
    r = call_ok(c, "t", NULL, NULL);
    cr_assert_str_eq(first_text(r), "via sse");
    cJSON_Delete(r);
    seer_mcp_close(c);
    MHD_stop_daemon(d);
    /* one session throughout: initialize was sent once */
    size_t inits = 0;
    for (const char *p = H.seen; (p = strstr(p, "\"method\":\"initialize\"")); p++) inits++;
    cr_assert_eq(inits, 1, "%s", H.seen);
    LEAK_CHECK();
}
