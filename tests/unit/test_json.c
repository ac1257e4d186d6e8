/* Unit tests of engine/json: the UTF-8 validator on its edge cases, and the seer.core.json
 * module driven from C: results, registry entries, Lua stack balance, and no leaks of cJSON
 * trees or buffers on the error paths. The behaviour in detail is in tests/lua/test_json.lua. */
#include <criterion/criterion.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <cJSON.h>

#include "json/json.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define LEAK_CHECK() cr_assert(__lsan_do_recoverable_leak_check() == 0)
#else
#define LEAK_CHECK() ((void)0)
#endif

/* ---- seer_utf8_validate ---------------------------------------------------------------------- */

/* Validates a literal (sizeof - 1, so embedded NULs count) and returns the bad offset or -1. */
#define BAD_AT(lit) bad_at(lit, sizeof(lit) - 1)

static long bad_at(const char *s, size_t n) {
    size_t off = 12345;
    if (seer_utf8_validate(s, n, &off)) {
        cr_assert_eq(off, 12345, "a valid string must leave bad_offset alone");
        return -1;
    }
    return (long)off;
}

Test(utf8, accepts_well_formed_text) {
    cr_assert_eq(BAD_AT(""), -1);
    cr_assert_eq(BAD_AT("plain ascii"), -1);
    cr_assert_eq(BAD_AT("nul \0 inside"), -1);
    cr_assert_eq(BAD_AT("\xC3\xA9"), -1);         /* é, 2 bytes */
    cr_assert_eq(BAD_AT("\xE2\x82\xAC"), -1);     /* €, 3 bytes */
    cr_assert_eq(BAD_AT("\xF0\x9F\x98\x80"), -1); /* 😀, 4 bytes */
    cr_assert_eq(BAD_AT("\xC2\x80"), -1);         /* U+0080, smallest 2-byte */
    cr_assert_eq(BAD_AT("\xE0\xA0\x80"), -1);     /* U+0800, smallest 3-byte */
    cr_assert_eq(BAD_AT("\xED\x9F\xBF"), -1);     /* U+D7FF, just below the surrogates */
    cr_assert_eq(BAD_AT("\xEE\x80\x80"), -1);     /* U+E000, just above them */
    cr_assert_eq(BAD_AT("\xF0\x90\x80\x80"), -1); /* U+10000, smallest 4-byte */
    cr_assert_eq(BAD_AT("\xF4\x8F\xBF\xBF"), -1); /* U+10FFFF, the last code point */
    cr_assert_eq(BAD_AT("long ascii run before \xF0\x9F\x98\x80 and after it, more than 8 bytes"), -1);
}

Test(utf8, rejects_overlong_forms) {
    cr_assert_eq(BAD_AT("\xC0\x80"), 0); /* NUL in two bytes */
    cr_assert_eq(BAD_AT("\xC1\xBF"), 0);
    cr_assert_eq(BAD_AT("\xE0\x80\x80"), 0);
    cr_assert_eq(BAD_AT("\xE0\x9F\xBF"), 0);
    cr_assert_eq(BAD_AT("\xF0\x80\x80\x80"), 0);
    cr_assert_eq(BAD_AT("\xF0\x8F\xBF\xBF"), 0);
}

Test(utf8, rejects_surrogates) {
    cr_assert_eq(BAD_AT("\xED\xA0\x80"), 0); /* U+D800 */
    cr_assert_eq(BAD_AT("\xED\xBF\xBF"), 0); /* U+DFFF */
    cr_assert_eq(BAD_AT("ok\xED\xB0\x80"), 2);
}

Test(utf8, rejects_code_points_above_10FFFF) {
    cr_assert_eq(BAD_AT("\xF4\x90\x80\x80"), 0);
    cr_assert_eq(BAD_AT("\xF5\x80\x80\x80"), 0);
    cr_assert_eq(BAD_AT("\xFF"), 0);
    cr_assert_eq(BAD_AT("\xFE"), 0);
}

Test(utf8, rejects_truncated_and_broken_sequences) {
    cr_assert_eq(BAD_AT("\xE2\x82"), 0);          /* € without its last byte */
    cr_assert_eq(BAD_AT("ab\xE2\x82"), 2);
    cr_assert_eq(BAD_AT("\xF0\x9F\x98"), 0);      /* 😀 without its last byte */
    cr_assert_eq(BAD_AT("\xC3"), 0);
    cr_assert_eq(BAD_AT("\xE2\x28\xA1"), 0);      /* second byte is not a continuation */
    cr_assert_eq(BAD_AT("\xF0\x9F\x28\x80"), 0);  /* third byte is not a continuation */
    cr_assert_eq(BAD_AT("\x80"), 0);              /* continuation without a lead */
    cr_assert_eq(BAD_AT("\xC3\xA9\xA9"), 2);      /* é then a stray continuation */
}

Test(utf8, reports_the_first_bad_offset_past_the_ascii_fast_path) {
    cr_assert_eq(BAD_AT("abcdefghijklmnopqrst\xFF"), 20);
    cr_assert_eq(BAD_AT("abcdefg\xFFhijklmnop"), 7);
    cr_assert_eq(BAD_AT("abcdefgh\xFFijklmnop"), 8);
    cr_assert_eq(BAD_AT("abcdefghi\xFFjklmnop\xFF"), 9);
    cr_assert_eq(BAD_AT("12345678\xC3\xA9" "12345678\xE2\x82"), 18);
    /* bad_offset may be NULL */
    cr_assert_eq(seer_utf8_validate("\xFF", 1, NULL), 0);
    cr_assert_eq(seer_utf8_validate("x", 1, NULL), 1);
}

/* ---- the Lua module -------------------------------------------------------------------------- */

static lua_State *open_state(void) {
    lua_State *L = luaL_newstate();
    cr_assert_not_null(L);
    luaL_openlibs(L);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, seer_json_luaopen);
    lua_setfield(L, -2, "seer.core.json");
    lua_pop(L, 2);
    cr_assert_eq(luaL_dostring(L, "json = require 'seer.core.json'"), 0);
    cr_assert_eq(lua_gettop(L), 0);
    return L;
}

/* Runs a chunk that must succeed and leave nothing on the stack. */
static void run(lua_State *L, const char *code) {
    int rc = luaL_dostring(L, code);
    cr_assert_eq(rc, 0, "%s\n--- in:\n%s", rc ? lua_tostring(L, -1) : "", code);
    cr_assert_eq(lua_gettop(L), 0, "stack left %d values after:\n%s", lua_gettop(L), code);
}

/* Calls json.<fn>(arg as a Lua expression) and returns the error message (copied into buf)
 * or NULL on success, checking that the stack is back to where it was. */
static const char *call_err(lua_State *L, const char *expr, char *buf, size_t size) {
    int top = lua_gettop(L);
    char code[512];
    snprintf(code, sizeof code, "return function() return %s end", expr);
    cr_assert_eq(luaL_dostring(L, code), 0, "%s", lua_tostring(L, -1));
    int rc = lua_pcall(L, 0, 1, 0);
    const char *msg = NULL;
    if (rc) {
        snprintf(buf, size, "%s", lua_tostring(L, -1));
        msg = buf;
    }
    lua_pop(L, 1);
    cr_assert_eq(lua_gettop(L), top);
    return msg;
}

Test(json, encodes_and_decodes) {
    lua_State *L = open_state();
    run(L, "assert(json.encode({b = {1, 2, 3}, a = 'x'}) == '{\"a\":\"x\",\"b\":[1,2,3]}')\n"
           "local v = json.decode('{\"k\": [true, null, 2.5, \"\\\\u00e9\"]}')\n"
           "assert(v.k[1] == true and v.k[2] == json.null and v.k[3] == 2.5 and v.k[4] == '\\195\\169')\n"
           "assert(json.pretty({a = {1}}) == '{\\n  \"a\": [\\n    1\\n  ]\\n}')\n"
           "assert(json.encode(json.decode('[]')) == '[]' and json.encode(json.decode('{}')) == '{}')\n"
           "assert(tostring(json.null) == 'json.null')");
    lua_close(L);
}

Test(json, leaves_the_stack_as_it_found_it) {
    lua_State *L = open_state();
    lua_pushliteral(L, "sentinel");
    lua_getglobal(L, "json");
    lua_getfield(L, -1, "encode");
    lua_newtable(L);
    lua_pushinteger(L, 7);
    lua_setfield(L, -2, "n");
    cr_assert_eq(lua_pcall(L, 1, 1, 0), 0);
    cr_assert_str_eq(lua_tostring(L, -1), "{\"n\":7}");
    lua_pop(L, 1);
    lua_getfield(L, -1, "decode");
    lua_pushliteral(L, "[1, [2, [3]]]");
    cr_assert_eq(lua_pcall(L, 1, 1, 0), 0);
    cr_assert(lua_istable(L, -1));
    lua_pop(L, 2);
    cr_assert_eq(lua_gettop(L), 1);
    cr_assert_str_eq(lua_tostring(L, 1), "sentinel");
    lua_close(L);
}

Test(json, registry_holds_null_and_the_marks) {
    lua_State *L = open_state();
    lua_getglobal(L, "json");
    lua_getfield(L, -1, "null");
    lua_getfield(L, LUA_REGISTRYINDEX, SEER_JSON_NULL_KEY);
    cr_assert(lua_rawequal(L, -1, -2), "json.null is the registry's sentinel");
    lua_pop(L, 2);

    /* Opening the module again (package.loaded cleared) keeps the same sentinel. */
    lua_pushcfunction(L, seer_json_luaopen);
    cr_assert_eq(lua_pcall(L, 0, 1, 0), 0);
    lua_getfield(L, -1, "null");
    lua_getfield(L, -3, "null");
    cr_assert(lua_rawequal(L, -1, -2));
    lua_settop(L, 0);

    run(L, "local a = json.decode('[{}]') rawset(_G, 'decoded', a)");
    lua_getglobal(L, "decoded");
    cr_assert(lua_getmetatable(L, -1));
    lua_getfield(L, LUA_REGISTRYINDEX, SEER_JSON_ARRAY_MT_KEY);
    cr_assert(lua_rawequal(L, -1, -2), "decoded arrays carry the registry's array metatable");
    lua_pop(L, 2);
    lua_rawgeti(L, -1, 1);
    cr_assert(lua_getmetatable(L, -1));
    lua_getfield(L, LUA_REGISTRYINDEX, SEER_JSON_OBJECT_MT_KEY);
    cr_assert(lua_rawequal(L, -1, -2), "decoded objects carry the registry's object metatable");
    lua_settop(L, 0);
    lua_close(L);
}

Test(json, light_userdata_is_an_error) {
    lua_State *L = open_state();
    lua_getglobal(L, "json");
    lua_getfield(L, -1, "encode");
    lua_createtable(L, 0, 1);
    lua_pushlightuserdata(L, L);
    lua_setfield(L, -2, "p");
    cr_assert_neq(lua_pcall(L, 1, 1, 0), 0);
    cr_assert(strstr(lua_tostring(L, -1), "json.encode: cannot encode userdata at $.p"), "%s", lua_tostring(L, -1));
    lua_settop(L, 0);
    lua_close(L);
}

Test(json, error_messages) {
    lua_State *L = open_state();
    char buf[1024];
    const char *e;
    e = call_err(L, "json.encode({a = {b = {1, 2, [4] = 4}}})", buf, sizeof buf);
    cr_assert_str_eq(e, "json.encode: cannot encode table at $.a.b: key 4 breaks the array 1..2 (use json.null for holes)");
    e = call_err(L, "json.encode({x = 0/0})", buf, sizeof buf);
    cr_assert_str_eq(e, "json.encode: cannot encode NaN at $.x (JSON has no NaN/Infinity)");
    e = call_err(L, "json.decode('[1, 2, x]')", buf, sizeof buf);
    cr_assert_str_eq(e, "json.decode: invalid JSON at byte 7 (line 1, column 8): near 'x]'");
    e = call_err(L, "json.decode('')", buf, sizeof buf);
    cr_assert_str_eq(e, "json.decode: empty input");
    e = call_err(L, "json.decode('[1]\\0')", buf, sizeof buf);
    cr_assert(e && strstr(e, "at byte 3 (line 1, column 4)"), "%s", e ? e : "no error");
    e = call_err(L, "json.encode({1, 2, 3})", buf, sizeof buf);
    cr_assert_null(e);
    lua_close(L);
}

/* Every error path after a cJSON tree or the output buffer exists must free them: errors deep
 * inside a half-built tree, in __tojson, in printing, and decode errors after cJSON parsed. */
Test(json, error_paths_do_not_leak) {
    lua_State *L = open_state();
    run(L, "local function fails(f, ...) assert(not pcall(f, ...)) end\n"
           "local big = {}\n"
           "for i = 1, 200 do big[i] = {name = 'item' .. i, tags = {'a', 'b'}, n = i} end\n"
           "big[150].tags[2] = 0/0\n"
           "fails(json.encode, big)\n"
           "fails(json.pretty, big)\n"
           "local deep = {} local cur = deep for i = 1, 1000 do cur[1] = {x = 'y'} cur = cur[1] end\n"
           "fails(json.encode, deep)\n"
           "fails(json.encode, {a = {1, 2}, b = {f = print}})\n"
           "fails(json.encode, {a = {1, 2}, b = {[1] = 1, x = 2}})\n"
           "fails(json.encode, {a = {1, 2}, b = {s = '\\255'}})\n"
           "local t = {1, 2} t[3] = {t} fails(json.encode, {ok = 'x', t = t})\n"
           "fails(json.encode, {a = 'x', b = setmetatable({}, {__tojson = function() error('boom') end})})\n"
           "fails(json.encode, {a = 'x', b = setmetatable({}, {__tojson = function() error({}) end})})\n"
           "fails(json.decode, '[1, 2, {\"a\": [3, 4]}] trailing')\n"
           "fails(json.decode, '{\"a\": \"\\\\u0000\", \"b\": [1, }')\n" /* \u0000 decodes now (issue 22): the NUL-length path's error */
           "for i = 1, 50 do assert(#json.decode('[\"a\\\\u0000b\"]')[1] == 3) end\n"
           "fails(json.decode, '[' .. string.rep('{\"k\":[1,', 5) .. 'x')\n"
           "fails(json.decode, string.rep('[', 1001) .. string.rep(']', 1001))\n"
           "fails(json.decode, '\"\\255\"')\n"
           "big[150].tags[2] = 'b'\n"
           "for i = 1, 50 do assert(#json.encode(big[1]) > 0) end\n"
           "for i = 1, 50 do json.decode(json.encode(big)) end\n");
    lua_close(L);
    LEAK_CHECK();
}

/* Decode's own paths: a top-level array goes element by element and falls back to the whole
 * text on an error; other shapes parse whole, and the arena's spare chunk lives on in the module
 * until the state is closed. */
Test(json, decode_paths_do_not_leak) {
    lua_State *L = open_state();
    run(L, "local function fails(f, ...) assert(not pcall(f, ...)) end\n"
           "local rows = {}\n"
           "for i = 1, 300 do rows[i] = {a = {1, 2}, s = 'row' .. i} end\n"
           "local text = json.encode(rows)\n"
           "for i = 1, 5 do assert(#json.decode(text) == 300) end\n"
           "fails(json.decode, text:sub(1, -2) .. ',{\"a\": [1, x]}]')\n"
           "fails(json.decode, text .. ' 8')\n"
           "for i = 1, 5 do assert(#json.decode(json.encode({rows = rows})).rows == 300) end\n"
           "fails(json.decode, json.encode({rows = rows}) .. ' 8')\n");
    lua_close(L);
    LEAK_CHECK();
}

/* ---- seer_json_check ------------------------------------------------------------------------- */

static int check(const char *s) { return seer_json_check(s, strlen(s), NULL, NULL, 0, NULL, NULL); }

Test(json_check, accepts_what_rfc_8259_accepts) {
    const char *ok[] = { "{}", "[]", " {\"a\" : [1, -0, 0.5, 1e5, 1E-5, -12.25e+3, true, false, null, \"x\"]} ",
                         "\"\\u00e9\\n\\t\\\\\\/\\\"\"", "0", "-1", "[[[[]]]]", "{\"\":{}}", "\"caf\xc3\xa9\"", "\r\n\t[]\n" };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) cr_assert_eq(check(ok[i]), 0, "refused %s", ok[i]);
}

Test(json_check, refuses_what_json_parse_refuses) {
    /* cJSON itself takes some of these ("+1", "01", "1.", ".5"): a browser's JSON.parse does not */
    const char *bad[] = { "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{a:1}", "{'a':1}", "+1", "01", "1.", ".5", "1e",
                          "-", "--1", "tru", "nul", "True", "[1 2]", "{\"a\" 1}", "\"abc", "\"a\\x\"", "\"\\u12\"",
                          "\"\\u12G4\"", "\"a\tb\"", "\"a\nb\"", "{} {}", "[] x", "NaN", "Infinity", "[\"\xc3\"]",
                          "\"\xed\xa0\x80\"" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) cr_assert_lt(check(bad[i]), 0, "accepted %s", bad[i]);
}

Test(json_check, says_where_it_stops) {
    size_t at = 0;
    cr_assert_eq(seer_json_check("{\"a\": [1, 2,]}", 14, &at, NULL, 0, NULL, NULL), -1);
    cr_assert_eq(at, 12);
    cr_assert_eq(seer_json_check("[1] 2", 5, &at, NULL, 0, NULL, NULL), -2, "a whole value, then more text");
    cr_assert_eq(at, 4);
}

Test(json_check, nesting_is_bounded) {
    static char deep[2 * (SEER_JSON_MAX_DEPTH + 1) + 1];
    size_t d = SEER_JSON_MAX_DEPTH;
    memset(deep, '[', d);
    memset(deep + d, ']', d);
    cr_assert_eq(seer_json_check(deep, 2 * d, NULL, NULL, 0, NULL, NULL), 0);
    d = SEER_JSON_MAX_DEPTH + 1;
    memset(deep, '[', d);
    memset(deep + d, ']', d);
    cr_assert_lt(seer_json_check(deep, 2 * d, NULL, NULL, 0, NULL, NULL), 0);
}

Test(json_check, captures_the_string_at_a_key_path) {
    static const char *const path[] = { "metadata", "seer", "path" };
    const char *cap;
    size_t n;
    const char *doc = "{\"cells\":[{\"metadata\":{\"seer\":{\"path\":\"not this\"}}}],"
                      "\"metadata\":{\"x\":{\"path\":\"nor this\"},\"seer\":{\"path\":\"nb/a\\u00e9.ipynb\",\"k\":1}}}";
    cr_assert_eq(seer_json_check(doc, strlen(doc), NULL, path, 3, &cap, &n), 0);
    cr_assert_eq(n, strlen("nb/a\\u00e9.ipynb"));
    cr_assert_eq(memcmp(cap, "nb/a\\u00e9.ipynb", n), 0);
    /* not a string there, or no such key: nothing */
    const char *doc2 = "{\"metadata\":{\"seer\":{\"path\":[\"x\"]}}}";
    cr_assert_eq(seer_json_check(doc2, strlen(doc2), NULL, path, 3, &cap, &n), 0);
    cr_assert_null(cap);
    cr_assert_eq(seer_json_check("{}", 2, NULL, path, 3, &cap, &n), 0);
    cr_assert_null(cap);
    /* an invalid document captures nothing */
    const char *doc3 = "{\"metadata\":{\"seer\":{\"path\":\"p\"}},}";
    cr_assert_lt(seer_json_check(doc3, strlen(doc3), NULL, path, 3, &cap, &n), 0);
    cr_assert_null(cap);
}

/* What the check accepts, cJSON parses too, on text built from a seeded generator: the check is
 * never looser than the parser the rest of seer uses. */
Test(json_check, agrees_with_cjson_on_generated_documents) {
    static const char *const atoms[] = { "1", "-0.5e3", "\"s\"", "true", "null", "[", "]", "{", "}", ",", ":", "\"k\"",
                                         " ", "01", "+1", "\"\\u0041\"", "\"\\q\"", "[]", "{}" };
    unsigned long x = 12345;
    char buf[256];
    int agreed_valid = 0;
    for (int t = 0; t < 200000; t++) {
        size_t len = 0;
        int parts = 1 + (int)((x >> 7) % 12);
        for (int k = 0; k < parts; k++) {
            x = x * 6364136223846793005UL + 1442695040888963407UL;
            const char *a = atoms[(x >> 33) % (sizeof atoms / sizeof *atoms)];
            size_t an = strlen(a);
            if (len + an >= sizeof buf) break;
            memcpy(buf + len, a, an);
            len += an;
        }
        if (seer_json_check(buf, len, NULL, NULL, 0, NULL, NULL) == 0) {
            cJSON *v = cJSON_ParseWithLength(buf, len);
            cr_assert_not_null(v, "the check accepted what cJSON refuses: %.*s", (int)len, buf);
            cJSON_Delete(v);
            agreed_valid++;
        }
    }
    cr_assert_gt(agreed_valid, 1000, "the generator made too few valid documents to mean anything");
}
