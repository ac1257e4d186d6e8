/* Unit tests of engine/net: HMAC-SHA256 signatures against Python's hmac module, verification
 * of tampered messages, the empty key, messages round-tripped over inproc and tcp (routing ids,
 * buffers, bad signatures dropped and counted, broken layouts dropped), headers, UUIDs, keys and
 * the JSON string writer, and CURVE (one client key per server). */
#include <criterion/criterion.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>
#include <zmq.h>

#include "net/net.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define LEAK_CHECK() cr_assert(__lsan_do_recoverable_leak_check() == 0)
#else
#define LEAK_CHECK() ((void)0)
#endif

#define F(s) ((seer_net_frame_t){(s), sizeof(s) - 1})

static seer_net_key_t *key_of(const char *k) {
    seer_net_key_t *key;
    seer_err_t err;
    cr_assert_eq(seer_net_key_new(&key, k, strlen(k), &err), 0, "%s", err.msg);
    return key;
}

/* ---- signatures ------------------------------------------------------------------------------ */

/* The expected hex digests were computed with /usr/bin/python3 (3.11):
 *   h = hmac.new(key, digestmod=hashlib.sha256); [h.update(f) for f in frames]; h.hexdigest()
 * the second one is also RFC 4231 test case 2. */
Test(sign, matches_python_hmac) {
    seer_net_key_t *k = key_of("5ca1ab1e-0000-4000-8000-00000000c0de");
    seer_net_frame_t frames[4] = {F("{\"msg_id\":\"1\",\"msg_type\":\"execute_request\"}"), F("{}"), F("{}"),
                                  F("{\"code\":\"1+1\"}")};
    char hex[SEER_NET_SIG_HEX + 1];
    cr_assert_eq(seer_net_sign(k, frames, 4, hex, NULL), 0);
    cr_assert_str_eq(hex, "4e193b201e659a277f5953aec1b02070cc21db78ad33f12db624d8424b567300");
    seer_net_key_free(k);

    k = key_of("Jefe");
    seer_net_frame_t rfc[2] = {F("what do ya want "), F("for nothing?")};
    cr_assert_eq(seer_net_sign(k, rfc, 2, hex, NULL), 0);
    cr_assert_str_eq(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    seer_net_key_free(k);

    /* RFC 4231 test case 6: a key longer than SHA-256's block is hashed first */
    char long_key[131];
    memset(long_key, 0xaa, sizeof long_key);
    cr_assert_eq(seer_net_key_new(&k, long_key, sizeof long_key, NULL), 0);
    seer_net_frame_t tc6[1] = {F("Test Using Larger Than Block-Size Key - Hash Key First")};
    cr_assert_eq(seer_net_sign(k, tc6, 1, hex, NULL), 0);
    cr_assert_str_eq(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    seer_net_key_free(k);

    k = key_of("k");
    seer_net_frame_t empty[4] = {F(""), F(""), F(""), F("")};
    cr_assert_eq(seer_net_sign(k, empty, 4, hex, NULL), 0);
    cr_assert_str_eq(hex, "8bb990c40a7d61cb97597a942125025be50ac8beb74436e3735b98893a7f6620");
    seer_net_key_free(k);
    LEAK_CHECK();
}

Test(sign, tampered_messages_do_not_verify) {
    seer_net_key_t *k = key_of("5ca1ab1e-0000-4000-8000-00000000c0de");
    seer_net_frame_t frames[4] = {F("{\"msg_id\":\"1\",\"msg_type\":\"execute_request\"}"), F("{}"), F("{}"),
                                  F("{\"code\":\"1+1\"}")};
    const char *good = "4e193b201e659a277f5953aec1b02070cc21db78ad33f12db624d8424b567300";
    cr_assert(seer_net_verify(k, frames, 4, good, 64));
    /* upper-case hex is the same signature */
    cr_assert(seer_net_verify(k, frames, 4, "4E193B201E659A277F5953AEC1B02070CC21DB78AD33F12DB624D8424B567300", 64));
    /* one changed digit, a truncated signature, an empty one */
    cr_assert_not(seer_net_verify(k, frames, 4, "4e193b201e659a277f5953aec1b02070cc21db78ad33f12db624d8424b567301", 64));
    cr_assert_not(seer_net_verify(k, frames, 4, good, 63));
    cr_assert_not(seer_net_verify(k, frames, 4, "", 0));
    /* changed content, and the same bytes moved between frames */
    seer_net_frame_t tampered[4] = {frames[0], frames[1], frames[2], F("{\"code\":\"1+2\"}")};
    cr_assert_not(seer_net_verify(k, tampered, 4, good, 64));
    seer_net_frame_t moved[4] = {frames[0], F("{}{}"), F(""), frames[3]};
    char hex[SEER_NET_SIG_HEX + 1];
    seer_net_sign(k, moved, 4, hex, NULL);
    cr_assert_str_eq(hex, good, "HMAC covers the concatenation, as Jupyter's scheme does");
    /* another key */
    seer_net_key_t *other = key_of("another key");
    cr_assert_not(seer_net_verify(other, frames, 4, good, 64));
    seer_net_key_free(other);
    seer_net_key_free(k);
}

Test(sign, empty_key_means_no_signature) {
    seer_net_key_t *k;
    cr_assert_eq(seer_net_key_new(&k, "", 0, NULL), 0);
    cr_assert(seer_net_key_empty(k));
    seer_net_frame_t frames[4] = {F("{}"), F("{}"), F("{}"), F("{}")};
    char hex[SEER_NET_SIG_HEX + 1] = "x";
    cr_assert_eq(seer_net_sign(k, frames, 4, hex, NULL), 0);
    cr_assert_str_eq(hex, "");
    cr_assert(seer_net_verify(k, frames, 4, "", 0));
    cr_assert(seer_net_verify(k, frames, 4, "anything", 8));
    seer_net_key_free(k);
}

Test(sign, keys_and_uuids) {
    char a[65], b[65];
    cr_assert_eq(seer_net_random_hex(a, 32, NULL), 0);
    cr_assert_eq(seer_net_random_hex(b, 32, NULL), 0);
    cr_assert_eq(strlen(a), 64);
    cr_assert_eq(strspn(a, "0123456789abcdef"), 64);
    cr_assert_str_neq(a, b);
    seer_err_t err;
    cr_assert_lt(seer_net_random_hex(a, 100000, &err), 0);

    regex_t re;
    cr_assert_eq(regcomp(&re, "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", REG_EXTENDED), 0);
    char u1[SEER_NET_UUID_LEN + 1], u2[SEER_NET_UUID_LEN + 1];
    for (int i = 0; i < 200; i++) {
        cr_assert_eq(seer_net_uuid(u1, NULL), 0);
        cr_assert_eq(regexec(&re, u1, 0, NULL, 0), 0, "not a version 4 UUID: %s", u1);
    }
    seer_net_uuid(u2, NULL);
    cr_assert_str_neq(u1, u2);
    regfree(&re);
}

/* ---- headers and JSON text --------------------------------------------------------------------- */

Test(header, fields_and_date) {
    char h[512];
    seer_err_t err;
    int n = seer_net_header(h, sizeof h, "execute_request", "sess-\"1\"", "me", &err);
    cr_assert_gt(n, 0, "%s", err.msg);
    cr_assert_eq((size_t)n, strlen(h));
    cJSON *j = cJSON_Parse(h);
    cr_assert(cJSON_IsObject(j), "not JSON: %s", h);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "msg_type")->valuestring, "execute_request");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "session")->valuestring, "sess-\"1\"");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "username")->valuestring, "me");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "version")->valuestring, "5.3");
    cr_assert_eq(strlen(cJSON_GetObjectItem(j, "msg_id")->valuestring), 36);
    regex_t re;
    regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z$", REG_EXTENDED);
    const char *date = cJSON_GetObjectItem(j, "date")->valuestring;
    cr_assert_eq(regexec(&re, date, 0, NULL, 0), 0, "date %s is not ISO 8601 with microseconds and Z", date);
    regfree(&re);
    cJSON_Delete(j);
    cr_assert_lt(seer_net_header(h, 40, "execute_request", "s", "u", &err), 0, "a too small buffer is an error");
}

Test(json, strings_are_always_valid_json) {
    seer_net_buf_t b = {0};
    const char in[] = "a\"b\\c\nd\t\x01 \xC3\xA9 \xFF \xED\xA0\x80 \xF0\x9F\x98\x80 \xE2\x82";
    cr_assert_eq(seer_net_buf_add_json_string(&b, in, sizeof in - 1), 0);
    cr_assert_str_eq(b.data, "\"a\\\"b\\\\c\\nd\\t\\u0001 \xC3\xA9 \\ufffd \\ufffd\\ufffd\\ufffd \xF0\x9F\x98\x80 "
                             "\\ufffd\\ufffd\"");
    cJSON *j = cJSON_Parse(b.data);
    cr_assert(cJSON_IsString(j));
    cJSON_Delete(j);
    seer_net_buf_free(&b);
}

/* ---- messages over sockets ----------------------------------------------------------------------- */

typedef struct {
    void *a, *b;
} pair_t;

static pair_t connect_pair(int type_a, int type_b, const char *endpoint) {
    void *ctx = seer_net_context(NULL);
    cr_assert_not_null(ctx);
    pair_t p = {zmq_socket(ctx, type_a), zmq_socket(ctx, type_b)};
    int zero = 0;
    zmq_setsockopt(p.a, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(p.b, ZMQ_LINGER, &zero, sizeof zero);
    cr_assert_eq(zmq_bind(p.a, endpoint), 0, "bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
    char last[128];
    size_t n = sizeof last;
    zmq_getsockopt(p.a, ZMQ_LAST_ENDPOINT, last, &n);
    cr_assert_eq(zmq_connect(p.b, last), 0);
    return p;
}

static void close_pair(pair_t p) {
    zmq_close(p.a);
    zmq_close(p.b);
}

static void round_trip(const char *endpoint) {
    pair_t p = connect_pair(ZMQ_ROUTER, ZMQ_DEALER, endpoint);
    seer_net_key_t *k = key_of("a key");
    seer_net_frame_t bufs[2] = {F("\x00\x01\x02 binary"), F("")};
    seer_net_msg_t m = {.buffers = bufs, .nbuffers = 2};
    m.parts[SEER_NET_HEADER] = F("{\"msg_type\":\"ping\"}");
    m.parts[SEER_NET_PARENT] = F("{}");
    m.parts[SEER_NET_METADATA] = F("{\"x\":1}");
    m.parts[SEER_NET_CONTENT] = F("{\"text\":\"h\\u00e9\"}");
    seer_err_t err;
    cr_assert_eq(seer_net_send(p.b, k, &m, &err), 0, "%s", err.msg);
    seer_net_msg_t r;
    cr_assert_eq(seer_net_recv(p.a, k, &r, 5000, &err), 1);
    cr_assert_eq(r.nidents, 1, "a router sees the dealer's routing id");
    for (int i = 0; i < SEER_NET_NPARTS; i++) {
        cr_assert_eq(r.parts[i].len, m.parts[i].len);
        cr_assert_eq(memcmp(r.parts[i].data, m.parts[i].data, m.parts[i].len), 0);
        cr_assert_eq(((const char *)r.parts[i].data)[r.parts[i].len], '\0', "received parts end in a NUL");
    }
    cr_assert_eq(r.nbuffers, 2);
    cr_assert_eq(r.buffers[0].len, bufs[0].len);
    cr_assert_eq(memcmp(r.buffers[0].data, bufs[0].data, bufs[0].len), 0);
    cr_assert_eq(r.buffers[1].len, 0);

    /* The reply goes back through the routing id. */
    seer_net_msg_t back = {.idents = r.idents, .nidents = r.nidents};
    back.parts[SEER_NET_HEADER] = F("{\"msg_type\":\"pong\"}");
    back.parts[SEER_NET_PARENT] = r.parts[SEER_NET_HEADER];
    back.parts[SEER_NET_METADATA] = F("{}");
    back.parts[SEER_NET_CONTENT] = F("{}");
    cr_assert_eq(seer_net_send(p.a, k, &back, &err), 0);
    seer_net_msg_t r2;
    cr_assert_eq(seer_net_recv(p.b, k, &r2, 5000, &err), 1);
    cr_assert_eq(r2.nidents, 0);
    cr_assert_str_eq(r2.parts[SEER_NET_PARENT].data, "{\"msg_type\":\"ping\"}");
    seer_net_msg_free(&r);
    seer_net_msg_free(&r2);
    /* nothing else is waiting */
    cr_assert_eq(seer_net_recv(p.a, k, &r, 0, &err), 0);
    cr_assert_eq(seer_net_recv(p.a, k, &r, 20, &err), 0);
    seer_net_key_free(k);
    close_pair(p);
    LEAK_CHECK();
}

Test(msg, round_trip_inproc) { round_trip("inproc://seer-test-net"); }
Test(msg, round_trip_tcp) { round_trip("tcp://127.0.0.1:*"); }

Test(msg, bad_signatures_are_dropped_and_counted) {
    pair_t p = connect_pair(ZMQ_ROUTER, ZMQ_DEALER, "tcp://127.0.0.1:*");
    seer_net_key_t *good = key_of("right"), *bad = key_of("wrong"), *none = key_of("");
    seer_net_msg_t m = {0};
    m.parts[SEER_NET_HEADER] = F("{\"n\":1}");
    m.parts[SEER_NET_PARENT] = F("{}");
    m.parts[SEER_NET_METADATA] = F("{}");
    m.parts[SEER_NET_CONTENT] = F("{}");
    unsigned long before = seer_net_dropped_count();
    seer_err_t err;
    cr_assert_eq(seer_net_send(p.b, bad, &m, &err), 0);
    cr_assert_eq(seer_net_send(p.b, none, &m, &err), 0); /* unsigned, to a socket that wants signatures */
    m.parts[SEER_NET_HEADER] = F("{\"n\":2}");
    cr_assert_eq(seer_net_send(p.b, good, &m, &err), 0);
    seer_net_msg_t r;
    cr_assert_eq(seer_net_recv(p.a, good, &r, 5000, &err), 1, "the good message after two bad ones arrives");
    cr_assert_str_eq(r.parts[SEER_NET_HEADER].data, "{\"n\":2}");
    seer_net_msg_free(&r);
    cr_assert_eq(seer_net_dropped_count(), before + 2);

    /* broken layouts: no delimiter; a delimiter but too few frames */
    seer_net_frame_t junk[2] = {F("hello"), F("world")};
    seer_net_send_frames(p.b, junk, 2, &err);
    seer_net_frame_t shortmsg[3] = {F("<IDS|MSG>"), F(""), F("{}")};
    seer_net_send_frames(p.b, shortmsg, 3, &err);
    cr_assert_eq(seer_net_recv(p.a, good, &r, 300, &err), 0);
    cr_assert_eq(seer_net_dropped_count(), before + 4);
    seer_net_key_free(good);
    seer_net_key_free(bad);
    seer_net_key_free(none);
    close_pair(p);
}

Test(msg, raw_frames_round_trip) {
    pair_t p = connect_pair(ZMQ_REP, ZMQ_REQ, "inproc://seer-test-hb");
    seer_err_t err;
    seer_net_frame_t ping[1] = {F("ping")};
    cr_assert_eq(seer_net_send_frames(p.b, ping, 1, &err), 0);
    seer_net_frame_t *f;
    void *block;
    cr_assert_eq(seer_net_recv_frames(p.a, &f, &block, 5000, &err), 1);
    cr_assert_eq(f[0].len, 4);
    cr_assert_eq(memcmp(f[0].data, "ping", 4), 0);
    cr_assert_eq(seer_net_send_frames(p.a, f, 1, &err), 0);
    free(block);
    cr_assert_eq(seer_net_recv_frames(p.b, &f, &block, 5000, &err), 1);
    cr_assert_eq(memcmp(f[0].data, "ping", 4), 0);
    free(block);
    close_pair(p);
}

/* ---- issue 18: replays and limits ---------------------------------------------------------- */

Test(replay, a_signature_is_accepted_once) {
    seer_net_key_t *k = key_of("replay key");
    seer_net_frame_t frames[4] = {F("{\"msg_id\":\"1\"}"), F("{}"), F("{}"), F("{}")};
    char sig[SEER_NET_SIG_HEX + 1];
    cr_assert_eq(seer_net_sign(k, frames, 4, sig, NULL), 0);
    cr_assert_eq(seer_net_verify_once(k, frames, 4, sig, 64), 1);
    cr_assert_eq(seer_net_verify_once(k, frames, 4, sig, 64), -1, "the same message again is a replay");
    /* the same signature in upper case is the same MAC: still a replay */
    char upper[SEER_NET_SIG_HEX + 1];
    for (int i = 0; i <= SEER_NET_SIG_HEX; i++) upper[i] = (sig[i] >= 'a' && sig[i] <= 'f') ? (char)(sig[i] - 32) : sig[i];
    cr_assert_eq(seer_net_verify_once(k, frames, 4, upper, 64), -1);
    /* a bad signature is 0, not a replay; plain verify does not remember */
    cr_assert_eq(seer_net_verify_once(k, frames, 4, "00", 2), 0);
    cr_assert(seer_net_verify(k, frames, 4, sig, 64));
    /* another key has its own history */
    seer_net_key_t *k2 = key_of("replay key");
    cr_assert_eq(seer_net_verify_once(k2, frames, 4, sig, 64), 1);
    seer_net_key_free(k2);
    seer_net_key_free(k);
}

Test(replay, the_history_is_bounded_and_keeps_the_recent_half) {
    seer_net_key_t *k = key_of("bounded");
    char text[64], sig[SEER_NET_SIG_HEX + 1], first[SEER_NET_SIG_HEX + 1], recent[SEER_NET_SIG_HEX + 1];
    const int n = 3 * SEER_NET_HISTORY;
    for (int i = 0; i < n; i++) {
        int len = snprintf(text, sizeof text, "{\"msg_id\":\"%d\"}", i);
        seer_net_frame_t f[4] = {{text, (size_t)len}, F("{}"), F("{}"), F("{}")};
        cr_assert_eq(seer_net_sign(k, f, 4, sig, NULL), 0);
        cr_assert_eq(seer_net_verify_once(k, f, 4, sig, 64), 1, "message %d", i);
        if (i == 0) memcpy(first, sig, sizeof sig);
        if (i == n - SEER_NET_HISTORY / 2 + 1) memcpy(recent, sig, sizeof sig);
    }
    /* at most 2 generations of 2 * HISTORY / 2 slots of 16 bytes */
    cr_assert_leq(seer_net_history_bytes(k), (size_t)2 * SEER_NET_HISTORY * 16);
    int len = snprintf(text, sizeof text, "{\"msg_id\":\"%d\"}", n - SEER_NET_HISTORY / 2 + 1);
    seer_net_frame_t f[4] = {{text, (size_t)len}, F("{}"), F("{}"), F("{}")};
    cr_assert_eq(seer_net_verify_once(k, f, 4, recent, 64), -1, "one of the last HISTORY/2 is remembered");
    len = snprintf(text, sizeof text, "{\"msg_id\":\"%d\"}", 0);
    seer_net_frame_t f0[4] = {{text, (size_t)len}, F("{}"), F("{}"), F("{}")};
    cr_assert_eq(seer_net_verify_once(k, f0, 4, first, 64), 1, "the oldest was forgotten (bounded memory)");
    seer_net_key_free(k);
}

Test(replay, recv_drops_a_replayed_message_and_over_limit_ones) {
    pair_t p = connect_pair(ZMQ_ROUTER, ZMQ_DEALER, "tcp://127.0.0.1:*");
    seer_net_key_t *k = key_of("k");
    seer_net_msg_t m = {0};
    m.parts[SEER_NET_HEADER] = F("{\"msg_id\":\"a\"}");
    m.parts[SEER_NET_PARENT] = F("{}");
    m.parts[SEER_NET_METADATA] = F("{}");
    m.parts[SEER_NET_CONTENT] = F("{}");
    seer_err_t err;
    seer_net_rx_t rx = {.max_frames = 12, .max_bytes = 4096};
    cr_assert_eq(seer_net_send(p.b, k, &m, &err), 0);
    cr_assert_eq(seer_net_send(p.b, k, &m, &err), 0); /* the same bytes: a replay */
    seer_net_msg_t r;
    cr_assert_eq(seer_net_recv_rx(p.a, k, &rx, &r, 5000, &err), 1);
    seer_net_msg_free(&r);
    cr_assert_eq(seer_net_recv_rx(p.a, k, &rx, &r, 300, &err), 0, "the replay was not returned");
    cr_assert_eq(rx.dropped, 1);
    cr_assert(strstr(rx.why, "replay"), "%s", rx.why);
    /* 20 buffers: more frames than 12; then 8 KiB: more bytes than 4096 */
    seer_net_frame_t bufs[20];
    for (int i = 0; i < 20; i++) bufs[i] = F("b");
    m.parts[SEER_NET_HEADER] = F("{\"msg_id\":\"b\"}");
    m.buffers = bufs;
    m.nbuffers = 20;
    cr_assert_eq(seer_net_send(p.b, k, &m, &err), 0);
    static char big[8192];
    memset(big, 'x', sizeof big);
    seer_net_frame_t one = {big, sizeof big};
    m.parts[SEER_NET_HEADER] = F("{\"msg_id\":\"c\"}");
    m.buffers = &one;
    m.nbuffers = 1;
    cr_assert_eq(seer_net_send(p.b, k, &m, &err), 0);
    m.parts[SEER_NET_HEADER] = F("{\"msg_id\":\"d\"}");
    m.nbuffers = 0;
    cr_assert_eq(seer_net_send(p.b, k, &m, &err), 0);
    cr_assert_eq(seer_net_recv_rx(p.a, k, &rx, &r, 5000, &err), 1, "the good one after two over the limits");
    cr_assert_str_eq(r.parts[SEER_NET_HEADER].data, "{\"msg_id\":\"d\"}");
    seer_net_msg_free(&r);
    cr_assert_eq(rx.dropped, 3);
    seer_net_key_free(k);
    close_pair(p);
}

/* CURVE (curve.c): a server accepts only the one client key its ZAP entry names. */
static int recv_within(void *s, char *buf, size_t cap, int ms) {
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) <= 0) return -1;
    return zmq_recv(s, buf, cap, 0);
}

Test(curve, one_client_key_only) {
    cr_assert(seer_net_has_curve(), "Debian's libzmq5 is built with libsodium");
    seer_err_t err;
    char spub[41], ssec[41], cpub[41], csec[41], wpub[41], wsec[41], again[41];
    cr_assert_eq(seer_net_curve_keypair(spub, ssec, &err), 0, "%s", err.msg);
    cr_assert_eq(seer_net_curve_keypair(cpub, csec, &err), 0, "%s", err.msg);
    cr_assert_eq(seer_net_curve_keypair(wpub, wsec, &err), 0, "%s", err.msg);
    cr_assert_eq(seer_net_curve_public(again, ssec, &err), 0);
    cr_assert_str_eq(again, spub);
    cr_assert_lt(seer_net_curve_public(again, "short", &err), 0);
    void *ctx = seer_net_context(&err);
    int zero = 0;
    void *srv = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(srv, ZMQ_LINGER, &zero, sizeof zero);
    int slot = -1;
    cr_assert_eq(seer_net_curve_server(srv, ssec, cpub, &slot, &err), 0, "%s", err.msg);
    cr_assert_eq(zmq_bind(srv, "tcp://127.0.0.1:*"), 0);
    char ep[256];
    size_t n = sizeof ep;
    zmq_getsockopt(srv, ZMQ_LAST_ENDPOINT, ep, &n);
    /* a wrong key: refused, nothing arrives */
    void *bad = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(bad, ZMQ_LINGER, &zero, sizeof zero);
    cr_assert_eq(seer_net_curve_client(bad, spub, wpub, wsec, &err), 0, "%s", err.msg);
    zmq_connect(bad, ep);
    zmq_send(bad, "evil", 4, ZMQ_DONTWAIT);
    char buf[16];
    cr_assert_lt(recv_within(srv, buf, sizeof buf, 500), 0);
    cr_assert_geq(seer_net_curve_refused(slot), 1);
    /* the right key: delivered */
    void *good = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(good, ZMQ_LINGER, &zero, sizeof zero);
    cr_assert_eq(seer_net_curve_client(good, spub, cpub, csec, &err), 0, "%s", err.msg);
    zmq_connect(good, ep);
    zmq_send(good, "hello", 5, 0);
    cr_assert_eq(recv_within(srv, buf, sizeof buf, 5000), 5);
    cr_assert_eq(memcmp(buf, "hello", 5), 0);
    zmq_close(bad);
    zmq_close(good);
    zmq_close(srv);
    seer_net_curve_release(slot);
    cr_assert_lt(seer_net_curve_server(NULL, "x", cpub, &slot, &err), 0); /* refused before the socket is touched */
}
