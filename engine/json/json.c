/* seer.core.json: encode writes a Lua value straight out as text (sorted keys, exact numbers,
 * indentation in spaces), checking it on the way; decode checks the text, parses it with cJSON
 * and turns the tree into Lua values. Also the UTF-8 validator shared by the engine. */
#include "json.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <lua.h>

#define MAX_DEPTH SEER_JSON_MAX_DEPTH
#define MAX_INDENT 64
/* cJSON copies a number into a 64-byte buffer before strtod, so a longer number token would be
 * cut and then fail with a misleading position; we reject it with a clear message instead. */
#define MAX_NUMBER_LEN 63
#define STR_(x) #x
#define STR(x) STR_(x)
#define DEPTH_MSG "nesting deeper than " STR(SEER_JSON_MAX_DEPTH) " levels"
/* Error paths build messages in big buffers (a luaL_Buffer is 8 KiB); kept out of line so the
 * frames of the recursive encoder stay small enough for 1000 levels of nesting. */
#define COLD __attribute__((noinline, cold))

/* Every exported closure carries these upvalues, which saves registry lookups per value. */
#define UV_NULL lua_upvalueindex(1)
#define UV_ARRAY_MT lua_upvalueindex(2)
#define UV_OBJECT_MT lua_upvalueindex(3)
#define UV_DEC_CACHE lua_upvalueindex(4)

/* ---- UTF-8 --------------------------------------------------------------------------------- */

/* The length of the well-formed sequence that starts with the byte p[0] >= 0x80, avail bytes
 * being there, or 0 if it is ill-formed. */
static size_t utf8_sequence(const unsigned char *p, size_t avail) {
    /* The second byte's range is what excludes overlongs (E0, F0), surrogates (ED) and code
     * points above U+10FFFF (F4); later bytes are plain continuation bytes. */
    unsigned char c = p[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c == 0xE0) {
        need = 2;
        lo = 0xA0;
    } else if (c == 0xED) {
        need = 2;
        hi = 0x9F;
    } else if (c >= 0xE1 && c <= 0xEF) {
        need = 2;
    } else if (c == 0xF0) {
        need = 3;
        lo = 0x90;
    } else if (c == 0xF4) {
        need = 3;
        hi = 0x8F;
    } else if (c >= 0xF1 && c <= 0xF3) {
        need = 3;
    } else {
        return 0; /* continuation byte without a lead, C0/C1 overlong leads, F5..FF */
    }
    if (avail <= need || p[1] < lo || p[1] > hi) return 0;
    for (size_t k = 2; k <= need; k++)
        if ((p[k] & 0xC0) != 0x80) return 0;
    return need + 1;
}

int seer_utf8_validate(const char *s, size_t n, size_t *bad_offset) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        /* Text is mostly ASCII: skip it eight bytes at a time. */
        if (n - i >= 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t len = utf8_sequence(p + i, n - i);
        if (!len) {
            if (bad_offset) *bad_offset = i;
            return 0;
        }
        i += len;
    }
    return 1;
}

/* ---- shared helpers -------------------------------------------------------------------------- */

/* Where the encoder is, as a chain of nodes living in the frames of the recursion (so tracking
 * it costs no allocation); NULL is the top-level value, "$". */
typedef struct path_seg {
    const struct path_seg *up;
    const char *key; /* NULL: an array element */
    size_t len;
    size_t index; /* 1-based, as in Lua */
    int n;        /* segments from $ to here */
} path_seg;

#define NSEG(at) ((at) ? (at)->n : 0)

/* The bytes of w that need a closer look in a JSON string (below 0x20, '"', '\\', non-ASCII),
 * as their high bits; the lowest one set is exact, higher ones may be spurious. It rests on
 * (x - ones * c) & ~x & high, which marks the first byte of x below c. */
static inline uint64_t string_specials(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    return (((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b) | w) & high;
}

static int is_ident(const char *s, size_t len) {
    if (len == 0 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
        return 0;
    for (size_t i = 1; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_'))
            return 0;
    }
    return 1;
}

/* Text for an error message: at most max bytes, cut on a character boundary, with control bytes
 * (and every non-ASCII byte when the text is not UTF-8) as \xNN so the message itself stays
 * printable, valid UTF-8. quoted: inside "...", with " and \ escaped. */
static void add_escaped(luaL_Buffer *b, const char *s, size_t len, size_t max, int quoted) {
    int utf8 = seer_utf8_validate(s, len, NULL);
    size_t cut = len;
    if (len > max) {
        cut = max;
        while (utf8 && cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--;
    }
    if (quoted) luaL_addchar(b, '"');
    for (size_t i = 0; i < cut; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (quoted && (ch == '"' || ch == '\\')) {
            luaL_addchar(b, '\\');
            luaL_addchar(b, (char)ch);
        } else if (ch < 0x20 || ch == 0x7F || (ch >= 0x80 && !utf8)) {
            char hex[5];
            snprintf(hex, sizeof hex, "\\x%02X", ch);
            luaL_addstring(b, hex);
        } else {
            luaL_addchar(b, (char)ch);
        }
    }
    if (quoted) luaL_addchar(b, '"');
    if (cut < len) luaL_addstring(b, "...");
}

static void add_quoted(luaL_Buffer *b, const char *s, size_t len, size_t max) {
    add_escaped(b, s, len, max, 1);
}

/* "$.a[2].b" for the first upto segments of the path at; a very deep path keeps its first and
 * last segments around a "...". */
COLD static void push_path(lua_State *L, const path_seg *at, int upto) {
    const path_seg *segs[MAX_DEPTH + 2];
    int nseg = 0;
    for (const path_seg *p = at; p && nseg < MAX_DEPTH + 2; p = p->up)
        if (p->n <= upto) segs[nseg++] = p;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addchar(&b, '$');
    for (int i = 0; i < nseg; i++) {
        if (nseg > 24 && i == 10) {
            luaL_addstring(&b, "...");
            i = nseg - 10;
        }
        const path_seg *sg = segs[nseg - 1 - i];
        if (!sg->key) {
            char num[32];
            snprintf(num, sizeof num, "[%zu]", sg->index);
            luaL_addstring(&b, num);
        } else if (is_ident(sg->key, sg->len)) {
            luaL_addchar(&b, '.');
            luaL_addlstring(&b, sg->key, sg->len);
        } else {
            luaL_addchar(&b, '[');
            add_quoted(&b, sg->key, sg->len, 40);
            luaL_addchar(&b, ']');
        }
    }
    luaL_pushresult(&b);
}

/* Lua's own spelling of a number key (%.14g, as tostring does). */
static void fmt_key_number(char *buf, size_t size, lua_Number d) {
    snprintf(buf, size, "%.14g", (double)d);
}

/* ---- encode: numbers --------------------------------------------------------------------------- */

/* Integral values print as integers below 2^63; everything else as the shortest of
 * %.15g/%.16g/%.17g that reads back exactly. Not cJSON's printer: it prints -0 as 0 and accepts
 * %.15g when it is merely within DBL_EPSILON of the value (0.1 + 0.2 would come out as 0.3).
 * printf and strtod cost hundreds of nanoseconds each and the rule may need three of each, so
 * integers and most other numbers are formatted here with the very same result; the rest
 * (roughly |d| < 1e-16 or non-integers above 1e15) keeps the printf route. */

static const char DIGIT_PAIRS[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                  "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                  "8081828384858687888990919293949596979899";

/* Writes v in decimal so that it ends just before end; returns where it starts. */
static char *fmt_u64_before(char *end, uint64_t v) {
    while (v >= 100) {
        end -= 2;
        memcpy(end, DIGIT_PAIRS + v % 100 * 2, 2);
        v /= 100;
    }
    if (v >= 10) {
        end -= 2;
        memcpy(end, DIGIT_PAIRS + v * 2, 2);
    } else {
        *--end = (char)('0' + v);
    }
    return end;
}

#ifdef __SIZEOF_INT128__
__extension__ typedef unsigned __int128 u128;

static const uint64_t POW10[19] = {
    1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull, 100000000ull, 1000000000ull,
    10000000000ull, 100000000000ull, 1000000000000ull, 10000000000000ull, 100000000000000ull,
    1000000000000000ull, 10000000000000000ull, 100000000000000000ull, 1000000000000000000ull,
};

/* 5^t for t <= 32; 10^t = 5^t * 2^t, and the factor 2^t folds into a shift. */
static u128 pow5(int t) {
    static const uint64_t P5[28] = {
        1ull, 5ull, 25ull, 125ull, 625ull, 3125ull, 15625ull, 78125ull, 390625ull, 1953125ull, 9765625ull,
        48828125ull, 244140625ull, 1220703125ull, 6103515625ull, 30517578125ull, 152587890625ull,
        762939453125ull, 3814697265625ull, 19073486328125ull, 95367431640625ull, 476837158203125ull,
        2384185791015625ull, 11920928955078125ull, 59604644775390625ull, 298023223876953125ull,
        1490116119384765625ull, 7450580596923828125ull,
    };
    return t <= 27 ? (u128)P5[t] : (u128)P5[27] * P5[t - 27];
}

/* For |d| = m * 2^-sh with m in [2^52, 2^53) and 10^E <= |d|: the p significant digits printf
 * gives (glibc rounds the exact binary value, ties to even), as the integer *digits with
 * decimal exponent *exp10, and whether strtod reads them back as d, i.e. whether they lie
 * inside d's rounding interval. Returns 1; -1 when |d| >= 10^(E+1) (E is one too small); 0
 * where the arithmetic would need more than 128 bits. */
static int fmt_round(uint64_t m, int sh, int E, int p, uint64_t *digits, int *exp10, int *round_trips) {
    int t = p - 1 - E; /* |d| * 10^t has p digits before the point */
    if (t < 0 || t > 32) return 0;
    u128 five = pow5(t);
    u128 n = (u128)m * five; /* |d| * 10^t = n * 2^-s; below 2^128 as m < 2^53, 5^32 < 2^75 */
    int s = sh - t;
    uint64_t q;
    int ok = 1;
    if (s <= 0) {
        q = (uint64_t)(n << -s); /* an integer, below 10^(p+1) since |d| < 10^(E+2) */
        if (q >= POW10[p]) return -1;
    } else {
        if (s > 120) return 0;
        u128 unit = (u128)1 << s, r = n & (unit - 1), half = unit >> 1, diff;
        q = (uint64_t)(n >> s);
        if (q >= POW10[p]) return -1;
        int below = !(r > half || (r == half && (q & 1)));
        if (below) {
            diff = r;
        } else {
            q++;
            diff = unit - r;
        }
        /* diff is the distance from d in units where half of d's gap to a neighbour is five / 2;
         * just below a power of two the gap is half as wide. A decimal exactly halfway reads as
         * the double with the even mantissa. */
        u128 lim = below && m == (1ull << 52) ? 4 * diff : 2 * diff;
        ok = lim < five || (lim == five && !(m & 1));
    }
    *round_trips = ok;
    *exp10 = E;
    if (q == POW10[p]) { /* rounding carried into a new digit: 9.99..96 -> 10.0..0 */
        q = POW10[p - 1];
        *exp10 = E + 1;
    }
    *digits = q;
    return 1;
}

/* printf's %.{p}g of digits * 10^(exp10 - p + 1): fixed or exponent notation by its rule,
 * trailing zeros dropped. */
static int fmt_g(char *buf, int neg, uint64_t digits, int p, int exp10) {
    int nd = p;
    while (digits % 10 == 0) {
        digits /= 10;
        nd--;
    }
    char dig[20];
    fmt_u64_before(dig + nd, digits);
    char *o = buf;
    if (neg) *o++ = '-';
    if (exp10 < -4 || exp10 >= p) {
        *o++ = dig[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, dig + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        *o++ = 'e';
        *o++ = exp10 < 0 ? '-' : '+';
        int ax = exp10 < 0 ? -exp10 : exp10;
        if (ax >= 100) *o++ = (char)('0' + ax / 100);
        memcpy(o, DIGIT_PAIRS + ax % 100 * 2, 2);
        o += 2;
    } else if (exp10 >= 0 && nd <= exp10 + 1) {
        memcpy(o, dig, (size_t)nd);
        memset(o + nd, '0', (size_t)(exp10 + 1 - nd));
        o += exp10 + 1;
    } else if (exp10 >= 0) {
        memcpy(o, dig, (size_t)exp10 + 1);
        o += exp10 + 1;
        *o++ = '.';
        memcpy(o, dig + exp10 + 1, (size_t)(nd - exp10 - 1));
        o += nd - exp10 - 1;
    } else {
        *o++ = '0';
        *o++ = '.';
        memset(o, '0', (size_t)(-exp10 - 1));
        o += -exp10 - 1;
        memcpy(o, dig, (size_t)nd);
        o += nd;
    }
    return (int)(o - buf);
}

/* The shortest-of-three rule for a finite non-integer d, or 0 where fmt_round cannot say. */
static int fmt_fraction(char *buf, double d) {
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    int biased = (int)(bits >> 52 & 0x7FF);
    if (biased == 0 || biased == 0x7FF) return 0; /* subnormal (or zero, inf, NaN) */
    uint64_t m = (bits & ((1ull << 52) - 1)) | (1ull << 52);
    int e2 = biased - 1023; /* 2^e2 <= |d| < 2^(e2+1) */
    /* floor(e2 * log10 2) (78913 / 2^18 is close enough for |e2| < 1650): 10^E <= |d|, and
     * |d| may still reach 10^(E+1), which the first fmt_round reports. */
    int E = e2 >= 0 ? (e2 * 78913) >> 18 : -((-e2 * 78913) >> 18) - 1;
    uint64_t digits;
    int exp10, ok;
    for (int p = 15; p <= 17; p++) {
        int rc = fmt_round(m, 52 - e2, E, p, &digits, &exp10, &ok);
        if (rc < 0) rc = fmt_round(m, 52 - e2, ++E, p, &digits, &exp10, &ok);
        if (rc <= 0) return 0;
        if (ok) return fmt_g(buf, (int)(bits >> 63), digits, p, exp10);
    }
    return 0; /* cannot happen: 17 digits always read back */
}
#else
static int fmt_fraction(char *buf, double d) {
    (void)buf;
    (void)d;
    return 0;
}
#endif

/* The text of a finite d in buf (at least 40 bytes); returns its length. */
static int fmt_number(char *buf, size_t size, double d) {
    if (fabs(d) < 9223372036854775808.0) {
        int64_t i = (int64_t)d;
        if ((double)i == d) {
            char tmp[24];
            char *p = fmt_u64_before(tmp + sizeof tmp, i < 0 ? 0 - (uint64_t)i : (uint64_t)i);
            if (i < 0 || (i == 0 && signbit(d))) *--p = '-';
            size_t n = (size_t)(tmp + sizeof tmp - p);
            memcpy(buf, p, n);
            return (int)n;
        }
    }
    int n = fmt_fraction(buf, d);
    if (n) return n;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(buf, size, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    return n;
}

/* ---- encode: Lua value -> text ------------------------------------------------------------------ */

/* A table or __tojson value being encoded, linked through the frames of the recursion; a value
 * met again while it is open is a cycle. */
typedef struct open_value {
    const struct open_value *up;
    const void *p;
    int nseg; /* path length where it was opened, for the message */
} open_value;

typedef struct {
    const char *s;
    size_t len;
    int slot;  /* where the key string is anchored: a stack slot, or an index in the anchor table */
    int plain; /* written as it is, without escapes */
} key_ref;

typedef struct {
    char *out; /* the text so far */
    size_t len, cap;
    key_ref *keys; /* the keys of every object being written, the innermost last */
    size_t nkeys, keycap;
    const open_value *open;
    int indent;      /* spaces per level; -1 for compact output */
    int empty_array; /* an unmarked empty table encodes as [] rather than {} */
} enc_ctx;

/* Stack slots of enc_run, the protected half of encode. */
enum { ENC_VALUE = 1, ENC_CTX, ENC_NULL, ENC_ARRAY_MT, ENC_OBJECT_MT };

/* Object keys are anchored on the Lua stack while we hold pointers to them (a __tojson further
 * down could otherwise remove them from their table and let them be freed). Past this many
 * slots they go into a table instead, so that deep nesting still finds stack room. */
#define KEYS_ON_STACK_MAX 1024

/* Raises "json.encode: WHAT at PATH DETAIL". Only called inside enc_run's protected call, so
 * the caller of the pcall frees the buffers. */
COLD static int enc_fail(lua_State *L, const path_seg *at, const char *what, const char *detail) {
    lua_pushfstring(L, "json.encode: %s at ", what);
    push_path(L, at, NSEG(at));
    lua_pushstring(L, detail);
    lua_concat(L, 3);
    return lua_error(L);
}

COLD static int enc_failf(lua_State *L, const path_seg *at, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
COLD static int enc_failf(lua_State *L, const path_seg *at, const char *what, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return enc_fail(L, at, what, detail);
}

COLD static void enc_grow(lua_State *L, enc_ctx *c, size_t extra) {
    size_t cap = c->cap ? c->cap : 4096;
    while (cap - c->len < extra) cap *= 2;
    char *p = realloc(c->out, cap);
    if (!p) luaL_error(L, "json.encode: out of memory");
    c->out = p;
    c->cap = cap;
}

/* Room for extra more bytes; returns where they go. */
static inline char *out_reserve(lua_State *L, enc_ctx *c, size_t extra) {
    if (c->cap - c->len < extra) enc_grow(L, c, extra);
    return c->out + c->len;
}

static inline void out_char(lua_State *L, enc_ctx *c, char ch) {
    out_reserve(L, c, 1);
    c->out[c->len++] = ch;
}

static void out_newline(lua_State *L, enc_ctx *c, int level) {
    size_t n = (size_t)c->indent * (size_t)level;
    char *o = out_reserve(L, c, n + 1);
    o[0] = '\n';
    memset(o + 1, ' ', n);
    c->len += n + 1;
}

/* 1 if every byte is printable ASCII other than " and \: such text needs neither escapes nor
 * a UTF-8 check. */
static int is_plain(const char *s, size_t len) {
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (string_specials(w)) return 0;
    }
    for (; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch >= 0x80 || ch == '"' || ch == '\\') return 0;
    }
    return 1;
}

/* Checks a string value or key that is not plain: JSON text is UTF-8. A NUL byte is fine: it
 * is written as \u0000 (out_string), and decode gives it back. */
static const char *enc_string_problem(const char *s, size_t len, size_t *bad) {
    if (!seer_utf8_validate(s, len, bad)) return "is not valid UTF-8";
    return NULL;
}

/* s in quotes. The escapes are the ones cJSON prints: the short forms, \u00XX for other control
 * characters, and everything else (including non-ASCII UTF-8) as it is. */
static void out_string(lua_State *L, enc_ctx *c, const char *s, size_t len, int plain) {
    if (plain) {
        char *o = out_reserve(L, c, len + 2);
        o[0] = '"';
        memcpy(o + 1, s, len);
        o[len + 1] = '"';
        c->len += len + 2;
        return;
    }
    /* at most 6 bytes out per byte in; the run between escapes is reserved as a whole */
    out_char(L, c, '"');
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') continue;
        char *o = out_reserve(L, c, i - run + 6);
        memcpy(o, s + run, i - run);
        o += i - run;
        c->len += i - run;
        run = i + 1;
        o[0] = '\\';
        switch (ch) {
        case '"': o[1] = '"'; break;
        case '\\': o[1] = '\\'; break;
        case '\b': o[1] = 'b'; break;
        case '\f': o[1] = 'f'; break;
        case '\n': o[1] = 'n'; break;
        case '\r': o[1] = 'r'; break;
        case '\t': o[1] = 't'; break;
        default:
            memcpy(o + 1, "u00", 3);
            o[4] = "0123456789abcdef"[ch >> 4];
            o[5] = "0123456789abcdef"[ch & 15];
            c->len += 4;
            break;
        }
        c->len += 2;
    }
    char *o = out_reserve(L, c, len - run + 1);
    memcpy(o, s + run, len - run);
    o[len - run] = '"';
    c->len += len - run + 1;
}

static void enc_value(lua_State *L, enc_ctx *c, int idx, const path_seg *at, int depth);

COLD static void enc_key_text(lua_State *L, int idx, char *buf, size_t size) {
    switch (lua_type(L, idx)) {
    case LUA_TNUMBER: fmt_key_number(buf, size, lua_tonumber(L, idx)); break;
    case LUA_TBOOLEAN: snprintf(buf, size, "%s", lua_toboolean(L, idx) ? "true" : "false"); break;
    default: snprintf(buf, size, "of type %s", luaL_typename(L, idx)); break;
    }
}

typedef struct {
    size_t n_int, n_str;
    lua_Number max_int, first_int;
} key_scan;

static int is_index_key(lua_Number k) {
    /* 2^53: beyond it not every integer is a double, so no array can reach it anyway. */
    return k >= 1 && k <= 9007199254740992.0 && k == floor(k);
}

COLD static void enc_keys_grow(lua_State *L, enc_ctx *c) {
    size_t cap = c->keycap ? c->keycap * 2 : 64;
    key_ref *p = realloc(c->keys, cap * sizeof *p);
    if (!p) luaL_error(L, "json.encode: out of memory");
    c->keys = p;
    c->keycap = cap;
}

/* One pass over the table: counts its keys by kind, fails on a key of neither kind, and
 * appends each string key to c->keys, anchored on the stack, or in the table at slot anchor
 * when that is not 0. Returns 0 (with the stack and c->keys as they were) when the stack is
 * too full to anchor more keys; the caller starts again with a table. */
static int enc_scan_keys(lua_State *L, enc_ctx *c, int idx, const path_seg *at, key_scan *ks, int anchor) {
    int top = lua_gettop(L);
    size_t nkeys = c->nkeys;
    memset(ks, 0, sizeof *ks);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        int kt = lua_type(L, -1);
        if (kt == LUA_TSTRING) {
            if (c->nkeys == c->keycap) enc_keys_grow(L, c);
            key_ref *r = &c->keys[c->nkeys++];
            r->s = lua_tolstring(L, -1, &r->len);
            ks->n_str++;
            if (anchor) {
                lua_pushvalue(L, -1);
                r->slot = (int)ks->n_str;
                lua_rawseti(L, anchor, r->slot);
            } else {
                if (lua_gettop(L) >= KEYS_ON_STACK_MAX || !lua_checkstack(L, 4)) {
                    lua_settop(L, top);
                    c->nkeys = nkeys;
                    return 0;
                }
                r->slot = lua_gettop(L); /* this copy stays; lua_next goes on from the next */
                lua_pushvalue(L, -1);
            }
            continue;
        }
        if (kt == LUA_TNUMBER && is_index_key(lua_tonumber(L, -1))) {
            lua_Number k = lua_tonumber(L, -1);
            if (ks->n_int++ == 0) ks->first_int = k;
            if (k > ks->max_int) ks->max_int = k;
            continue;
        }
        char kbuf[64];
        enc_key_text(L, -1, kbuf, sizeof kbuf);
        enc_failf(L, at, "cannot encode table",
                  ": key %s is neither a string (object key) nor an integer >= 1 (array index)", kbuf);
    }
    return 1;
}

/* The array 1..run and the smallest key after the gap, for the error about a hole. */
COLD static int enc_fail_hole(lua_State *L, int idx, const path_seg *at) {
    size_t run = 0;
    for (;;) {
        lua_rawgeti(L, idx, (int)run + 1);
        int present = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (!present) break;
        run++;
    }
    lua_Number next = HUGE_VAL;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TNUMBER) {
            lua_Number k = lua_tonumber(L, -1);
            if (k > (lua_Number)run && k < next) next = k;
        }
    }
    char kbuf[64];
    fmt_key_number(kbuf, sizeof kbuf, next);
    if (run == 0)
        return enc_failf(L, at, "cannot encode table",
                         ": key %s breaks the array: there is no key 1 (use json.null for holes)", kbuf);
    return enc_failf(L, at, "cannot encode table",
                     ": key %s breaks the array 1..%zu (use json.null for holes)", kbuf, run);
}

/* Byte order, a prefix first. */
static int key_cmp(const void *a, const void *b) {
    const key_ref *x = a, *y = b;
    size_t m = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->s, y->s, m);
    if (r) return r;
    return (x->len > y->len) - (x->len < y->len);
}

/* Objects mostly have a handful of keys, where insertion sort beats qsort's overhead; keys are
 * distinct, so both give the same order. */
static void sort_keys(key_ref *k, size_t n) {
    if (n > 16) {
        qsort(k, n, sizeof *k, key_cmp);
        return;
    }
    for (size_t i = 1; i < n; i++) {
        key_ref x = k[i];
        size_t j = i;
        for (; j > 0 && key_cmp(&k[j - 1], &x) > 0; j--) k[j] = k[j - 1];
        k[j] = x;
    }
}

COLD static int enc_fail_key(lua_State *L, const path_seg *at, const char *s, size_t len,
                            const char *problem, size_t bad) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    add_quoted(&b, s, len, 40);
    luaL_pushresult(&b);
    return enc_failf(L, at, "cannot encode table", ": key %s %s (at byte %zu of the key)", lua_tostring(L, -1),
                     problem, bad);
}

/* The n keys from c->keys[first] on, anchored as enc_scan_keys left them. */
static void enc_object(lua_State *L, enc_ctx *c, int idx, const path_seg *at, int depth, size_t first, size_t n,
                       int anchor) {
    for (size_t i = 0; i < n; i++) {
        key_ref *r = &c->keys[first + i];
        r->plain = is_plain(r->s, r->len);
        size_t bad;
        const char *problem = r->plain ? NULL : enc_string_problem(r->s, r->len, &bad);
        if (problem) enc_fail_key(L, at, r->s, r->len, problem, bad);
    }
    sort_keys(c->keys + first, n);

    int level = NSEG(at);
    out_char(L, c, '{');
    for (size_t i = 0; i < n; i++) {
        const key_ref *r = &c->keys[first + i]; /* not kept across enc_value, which may move c->keys */
        if (c->indent >= 0) out_newline(L, c, level + 1);
        out_string(L, c, r->s, r->len, r->plain);
        if (c->indent >= 0) {
            memcpy(out_reserve(L, c, 2), ": ", 2);
            c->len += 2;
        } else {
            out_char(L, c, ':');
        }
        path_seg seg = {at, r->s, r->len, 0, level + 1};
        if (anchor)
            lua_rawgeti(L, anchor, r->slot);
        else
            lua_pushvalue(L, r->slot);
        lua_rawget(L, idx);
        enc_value(L, c, lua_gettop(L), &seg, depth + 1);
        lua_pop(L, 1);
        if (i + 1 < n) out_char(L, c, ',');
    }
    if (n && c->indent >= 0) out_newline(L, c, level);
    out_char(L, c, '}');
}

static void enc_array(lua_State *L, enc_ctx *c, int idx, const path_seg *at, int depth, size_t n) {
    int level = NSEG(at);
    out_char(L, c, '[');
    for (size_t i = 1; i <= n; i++) {
        if (c->indent >= 0) out_newline(L, c, level + 1);
        path_seg seg = {at, NULL, 0, i, level + 1};
        lua_rawgeti(L, idx, (int)i);
        enc_value(L, c, lua_gettop(L), &seg, depth + 1);
        lua_pop(L, 1);
        if (i < n) out_char(L, c, ',');
    }
    if (n && c->indent >= 0) out_newline(L, c, level);
    out_char(L, c, ']');
}

COLD static int enc_fail_tojson(lua_State *L, const path_seg *at) {
    const char *msg = lua_tostring(L, -1);
    lua_pushfstring(L, "json.encode: __tojson failed at ");
    push_path(L, at, NSEG(at));
    lua_pushfstring(L, ": %s", msg ? msg : "(error object is not a string)");
    lua_concat(L, 3);
    return lua_error(L);
}

COLD static int enc_fail_type(lua_State *L, int idx, const path_seg *at) {
    char what[64];
    snprintf(what, sizeof what, "cannot encode %s", luaL_typename(L, idx));
    return enc_fail(L, at, what,
                    " (JSON has nil, booleans, numbers, strings, tables and json.null; give a userdata a "
                    "__tojson metamethod, or convert the value first)");
}

/* The path length where the value at idx is open, or -1. Open values are as many as the
 * nesting is deep, and that is small in practice. */
static int enc_find_open(const enc_ctx *c, const void *p) {
    for (const open_value *o = c->open; o; o = o->up)
        if (o->p == p) return o->nseg;
    return -1;
}

/* Calls the __tojson metamethod that is on top of the stack and encodes what it returns in
 * place of the value at idx. The value stays open meanwhile, so a result that contains it is
 * reported as a cycle instead of recursing forever. */
static void enc_tojson(lua_State *L, enc_ctx *c, int idx, const path_seg *at, int depth) {
    if (depth > MAX_DEPTH) enc_fail(L, at, DEPTH_MSG, " (each __tojson call counts as a level)");
    open_value self = {c->open, lua_topointer(L, idx), NSEG(at)};
    c->open = &self;
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) != 0) enc_fail_tojson(L, at);
    if (lua_rawequal(L, -1, idx))
        enc_failf(L, at, "cannot encode value", ": its __tojson returned the value itself");
    enc_value(L, c, lua_gettop(L), at, depth + 1);
    lua_pop(L, 1);
    c->open = self.up;
}

COLD static int enc_fail_cycle(lua_State *L, const path_seg *at, int first) {
    push_path(L, at, first);
    return enc_failf(L, at, "cycle", " (the table at %s contains itself)", lua_tostring(L, -1));
}

/* Keys that do not fit the table's mark (marked: "array"/"object"), or a mix of both kinds;
 * first_str is the first string key met. */
COLD static int enc_fail_keys(lua_State *L, const path_seg *at, const char *marked, const key_scan *ks,
                              const key_ref *first_str) {
    char num[64];
    fmt_key_number(num, sizeof num, ks->first_int);
    if (marked && !strcmp(marked, "object"))
        return enc_failf(L, at, "cannot encode table",
                         ": key %s in a table marked json.object (object keys must be strings)", num);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    add_quoted(&b, first_str->s, first_str->len, 40);
    luaL_pushresult(&b);
    const char *str = lua_tostring(L, -1);
    if (marked)
        return enc_failf(L, at, "cannot encode table", ": string key %s in a table marked json.array", str);
    return enc_failf(L, at, "cannot encode table",
                     ": mixed key types (number %s and string %s); a JSON value is either an array or an object",
                     num, str);
}

static void enc_table(lua_State *L, enc_ctx *c, int idx, const path_seg *at, int depth) {
    if (!lua_checkstack(L, 16)) enc_fail(L, at, "Lua stack exhausted", "");
    const void *self_p = lua_topointer(L, idx);
    int first = enc_find_open(c, self_p);
    if (first >= 0) enc_fail_cycle(L, at, first);

    enum { PLAIN, ARRAY, OBJECT } mark = PLAIN;
    if (lua_getmetatable(L, idx)) {
        if (lua_rawequal(L, -1, ENC_ARRAY_MT)) {
            mark = ARRAY;
        } else if (lua_rawequal(L, -1, ENC_OBJECT_MT)) {
            mark = OBJECT;
        } else {
            lua_pushliteral(L, "__tojson");
            lua_rawget(L, -2);
            if (!lua_isnil(L, -1)) {
                lua_remove(L, -2);
                enc_tojson(L, c, idx, at, depth);
                return;
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }

    if (depth > MAX_DEPTH) enc_fail(L, at, DEPTH_MSG, "");

    int top = lua_gettop(L), anchor = 0;
    size_t first_key = c->nkeys;
    key_scan ks;
    if (!enc_scan_keys(L, c, idx, at, &ks, 0)) {
        lua_newtable(L);
        anchor = top + 1;
        enc_scan_keys(L, c, idx, at, &ks, anchor);
    }
    if ((mark == OBJECT && ks.n_int) || (mark == ARRAY && ks.n_str) || (mark == PLAIN && ks.n_int && ks.n_str))
        enc_fail_keys(L, at, mark == OBJECT ? "object" : mark == ARRAY ? "array" : NULL, &ks, &c->keys[first_key]);
    int as_array = mark == ARRAY || (mark == PLAIN && (ks.n_int || (!ks.n_str && c->empty_array)));
    if (as_array && (lua_Number)ks.n_int != ks.max_int) enc_fail_hole(L, idx, at);

    open_value self = {c->open, self_p, NSEG(at)};
    c->open = &self;
    if (as_array)
        enc_array(L, c, idx, at, depth, ks.n_int);
    else
        enc_object(L, c, idx, at, depth, first_key, ks.n_str, anchor);
    c->open = self.up;
    c->nkeys = first_key;
    lua_settop(L, top);
}

/* depth is the nesting level a table at idx would have: 1 for the top-level value. */
static void enc_value(lua_State *L, enc_ctx *c, int idx, const path_seg *at, int depth) {
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
        memcpy(out_reserve(L, c, 4), "null", 4);
        c->len += 4;
        return;
    case LUA_TBOOLEAN:
        if (lua_toboolean(L, idx)) {
            memcpy(out_reserve(L, c, 4), "true", 4);
            c->len += 4;
        } else {
            memcpy(out_reserve(L, c, 5), "false", 5);
            c->len += 5;
        }
        return;
    case LUA_TNUMBER: {
        double d = (double)lua_tonumber(L, idx);
        if (isnan(d)) enc_fail(L, at, "cannot encode NaN", " (JSON has no NaN/Infinity)");
        if (isinf(d))
            enc_fail(L, at, d > 0 ? "cannot encode inf" : "cannot encode -inf", " (JSON has no NaN/Infinity)");
        c->len += (size_t)fmt_number(out_reserve(L, c, 40), 40, d);
        return;
    }
    case LUA_TSTRING: {
        size_t len, bad;
        const char *s = lua_tolstring(L, idx, &len);
        int plain = is_plain(s, len);
        const char *problem = plain ? NULL : enc_string_problem(s, len, &bad);
        if (problem)
            enc_failf(L, at, "cannot encode string", ": it %s (at byte %zu of the string)", problem, bad);
        out_string(L, c, s, len, plain);
        return;
    }
    case LUA_TTABLE: enc_table(L, c, idx, at, depth); return;
    case LUA_TUSERDATA:
        if (lua_rawequal(L, idx, ENC_NULL)) {
            memcpy(out_reserve(L, c, 4), "null", 4);
            c->len += 4;
            return;
        }
        if (luaL_getmetafield(L, idx, "__tojson")) {
            if (enc_find_open(c, lua_topointer(L, idx)) >= 0)
                enc_fail(L, at, "cycle", " (a __tojson result contains the value itself)");
            enc_tojson(L, c, idx, at, depth);
            return;
        }
        break;
    default: break;
    }
    enc_fail_type(L, idx, at);
}

/* The part of encode that may raise: every error unwinds to json_encode_with's lua_pcall, which
 * frees the buffers and re-raises. */
static int enc_run(lua_State *L) {
    enc_ctx *c = lua_touserdata(L, ENC_CTX);
    lua_settop(L, ENC_OBJECT_MT);
    enc_value(L, c, ENC_VALUE, NULL, 1);
    lua_pushlstring(L, c->out, c->len);
    return 1;
}

static void enc_options(lua_State *L, int *indent, int *empty_array) {
    if (lua_isnoneornil(L, 2)) return;
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (name && !strcmp(name, "indent")) {
            lua_Number d = lua_tonumber(L, -1);
            if (lua_type(L, -1) != LUA_TNUMBER || d != floor(d) || d < 0 || d > MAX_INDENT)
                luaL_argerror(L, 2, "indent must be an integer from 0 to " STR(MAX_INDENT) " (spaces per level)");
            *indent = (int)d;
        } else if (name && !strcmp(name, "empty")) {
            const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
            if (!strcmp(v, "array"))
                *empty_array = 1;
            else if (!strcmp(v, "object"))
                *empty_array = 0;
            else
                luaL_argerror(L, 2, "empty must be \"object\" or \"array\"");
        } else {
            if (name)
                lua_pushfstring(L, "unknown option '%s' (the options are indent, empty)", name);
            else
                lua_pushfstring(L, "option names are strings, not %s", luaL_typename(L, -2));
            luaL_argerror(L, 2, lua_tostring(L, -1));
        }
        lua_pop(L, 1);
    }
}

/* encode and pretty; indent -1 means compact unless the options say otherwise. */
static int json_encode_with(lua_State *L, int indent) {
    luaL_checkany(L, 1);
    lua_settop(L, 2);
    int empty_array = 0;
    enc_options(L, &indent, &empty_array);
    enc_ctx c = {NULL, 0, 0, NULL, 0, 0, NULL, indent, empty_array};
    lua_pushcfunction(L, enc_run);
    lua_pushvalue(L, 1);
    lua_pushlightuserdata(L, &c);
    lua_pushvalue(L, UV_NULL);
    lua_pushvalue(L, UV_ARRAY_MT);
    lua_pushvalue(L, UV_OBJECT_MT);
    int rc = lua_pcall(L, 5, 1, 0);
    free(c.out);
    free(c.keys);
    if (rc != 0) return lua_error(L);
    return 1;
}

static int json_encode(lua_State *L) { return json_encode_with(L, -1); }

static int json_pretty(lua_State *L) { return json_encode_with(L, 2); }

/* ---- decode ------------------------------------------------------------------------------------ */

static int is_json_space(unsigned char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

static int is_digit(unsigned char ch) { return ch >= '0' && ch <= '9'; }

static long hex4(const unsigned char *p) {
    long v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char ch = p[k];
        int h = is_digit(ch) ? ch - '0' : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10 : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10 : -1;
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

typedef struct {
    size_t off;      /* the first problem found */
    const char *why; /* what it is, for the message */
    int unclosed;    /* no problem, but the text ends inside a string or an open [ or { ... */
    size_t open_at;  /* ... opened here */
    size_t commas;   /* at the top level, for the size of a top-level array */
    size_t values;   /* arrays, objects, strings (keys too), numbers and literals: a bound for max_values */
} dec_scan_t;

static int dec_flag(dec_scan_t *sc, size_t off, const char *why) {
    sc->off = off;
    sc->why = why;
    return 0;
}

/* Returns the end of the number token at s[i], or 0 (after dec_flag) if it is malformed. The
 * loops need no bound: the text is a Lua string, which always has a NUL after its last byte. */
static size_t dec_scan_number(const unsigned char *s, size_t i, dec_scan_t *sc) {
    size_t start = i;
    if (s[i] == '-') i++;
    if (s[i] == '0') {
        i++;
        if (is_digit(s[i])) return dec_flag(sc, start, "leading zero in a number"), 0;
    } else if (is_digit(s[i])) {
        while (is_digit(s[i])) i++;
    } else {
        return dec_flag(sc, start, "malformed number"), 0;
    }
    if (s[i] == '.') {
        i++;
        if (!is_digit(s[i])) return dec_flag(sc, start, "malformed number"), 0;
        while (is_digit(s[i])) i++;
    }
    if (s[i] == 'e' || s[i] == 'E') {
        i++;
        if (s[i] == '+' || s[i] == '-') i++;
        if (!is_digit(s[i])) return dec_flag(sc, start, "malformed number"), 0;
        while (is_digit(s[i])) i++;
    }
    if (s[i] == '.' || s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-')
        return dec_flag(sc, start, "malformed number"), 0;
    if (i - start > MAX_NUMBER_LEN)
        return dec_flag(sc, start, "number longer than " STR(MAX_NUMBER_LEN) " characters (not supported)"), 0;
    return i;
}

/* ---- counting values without building anything (for C callers; json_decode counts in dec_scan) ---- */

size_t seer_json_count_values(const char *text, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    size_t values = 0, i = 0;
    while (i < n) {
        unsigned char ch = s[i];
        if (ch == '"') { /* to past the closing quote, as cJSON finds it: a backslash hides the next byte */
            values++;
            i++;
            for (;;) {
                const unsigned char *q = memchr(s + i, '"', n - i);
                if (!q) return values;
                size_t k = (size_t)(q - s), bs = 0;
                while (k - bs > i && s[k - bs - 1] == '\\') bs++;
                i = k + 1;
                if (!(bs & 1)) break; /* an even run of backslashes escapes only itself */
            }
        } else if (ch == '[' || ch == '{' || ch == 't' || ch == 'f' || ch == 'n') {
            values++;
            i++;
        } else if (ch == '-' || is_digit(ch)) { /* one number: the run of bytes a number is made of */
            values++;
            i++;
            while (i < n && (is_digit(s[i]) || s[i] == '.' || s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-')) i++;
        } else {
            i++;
        }
    }
    return values;
}

/* ---- strings holding "\u0000" (cJSON keeps the bytes but not the length) ---------------------- */

size_t seer_json_nul_bound(const char *text, size_t n) {
    size_t k = 0;
    for (const char *p = text, *e = text + n; (p = memchr(p, 'u', (size_t)(e - p))) && e - p >= 5; p++)
        if (p > text && p[-1] == '\\' && !memcmp(p + 1, "0000", 4)) k++;
    return k;
}

typedef struct {
    const unsigned char *s;
    size_t n, i;
    seer_json_len_t *out;
    size_t cap, count;
} nul_walk;

/* The next string token of the text (cJSON parsed it, so it is well-formed): whether it holds
 * a \u0000, and its decoded length in UTF-8 bytes, as cJSON writes it. */
static int nul_next(nul_walk *w, size_t *len) {
    const unsigned char *s = w->s;
    while (w->i < w->n && s[w->i] != '"') w->i++;
    size_t i = w->i + 1, l = 0;
    int nul = 0;
    while (i < w->n && s[i] != '"') {
        if (s[i] != '\\') {
            i++, l++;
            continue;
        }
        if (i + 1 < w->n && s[i + 1] == 'u' && w->n - i >= 6) {
            long cp = hex4(s + i + 2);
            if (cp == 0) nul = 1;
            if (cp >= 0xD800 && cp <= 0xDBFF) i += 12, l += 4;
            else i += 6, l += cp < 0 ? 1 : cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
        } else {
            i += 2, l++;
        }
    }
    w->i = i + 1;
    *len = l;
    return nul;
}

static void nul_take(nul_walk *w, const char *p) {
    size_t len;
    if (nul_next(w, &len) && p && w->count < w->cap) w->out[w->count++] = (seer_json_len_t){p, len};
}

/* Document order: a member's key, then its value; an array's elements in order. */
static void nul_visit(nul_walk *w, const cJSON *item) {
    if (item->string) nul_take(w, item->string);
    switch (item->type & 0xFF) {
    case cJSON_String: nul_take(w, item->valuestring); break;
    case cJSON_Array:
    case cJSON_Object:
        for (const cJSON *ch = item->child; ch; ch = ch->next) nul_visit(w, ch);
        break;
    default: break;
    }
}

static int len_cmp(const void *a, const void *b) {
    const char *x = ((const seer_json_len_t *)a)->p, *y = ((const seer_json_len_t *)b)->p;
    return x < y ? -1 : x > y;
}

size_t seer_json_nul_strings(const char *text, size_t n, const cJSON *tree, seer_json_len_t *out, size_t cap) {
    if (!tree || !cap) return 0;
    nul_walk w = {(const unsigned char *)text, n, 0, out, cap, 0};
    nul_visit(&w, tree);
    qsort(out, w.count, sizeof *out, len_cmp);
    return w.count;
}

size_t seer_json_strlen(const seer_json_len_t *v, size_t nv, const char *p) {
    if (nv) {
        seer_json_len_t key = {p, 0};
        const seer_json_len_t *hit = bsearch(&key, v, nv, sizeof *v, len_cmp);
        if (hit) return hit->len;
    }
    return strlen(p);
}

/* Returns the end of the string that starts with the quote at s[i], or 0 (after dec_flag) if
 * it has a problem, or n with sc->unclosed set if the text ends inside it. */
static size_t dec_scan_string(const unsigned char *s, size_t n, size_t i, dec_scan_t *sc) {
    size_t start = i++;
    for (;;) {
        /* to the next byte that needs a look, eight at a time */
        if (n - i >= 8) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            uint64_t special = string_specials(w);
            if (!special) {
                i += 8;
                continue;
            }
            i += (size_t)__builtin_ctzll(special) / 8;
        } else {
            while (i < n && s[i] >= 0x20 && s[i] < 0x80 && s[i] != '"' && s[i] != '\\') i++;
            if (i >= n) {
                sc->unclosed = 1;
                sc->open_at = start;
                return n;
            }
        }
        unsigned char c = s[i];
        if (c == '"') return i + 1;
        if (c < 0x20)
            return dec_flag(sc, i, "control character inside a string (write it as an escape: \\n, \\t, \\u001f, ...)");
        if (c >= 0x80) {
            size_t len = utf8_sequence(s + i, n - i);
            if (!len) return dec_flag(sc, i, "not UTF-8"); /* json_decode reports it as such */
            i += len;
            continue;
        }
        if (i + 1 >= n) { /* a backslash, the last byte */
            i++;
            continue;
        }
        switch (s[i + 1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': i += 2; continue;
        case 'u': break;
        default: return dec_flag(sc, i, "invalid escape (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
        }
        long cp = n - i >= 6 ? hex4(s + i + 2) : -1;
        if (cp < 0) return dec_flag(sc, i, "\\u needs 4 hex digits");
        if (cp >= 0xDC00 && cp <= 0xDFFF) return dec_flag(sc, i, "unpaired UTF-16 surrogate");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            long lo = n - i >= 12 && s[i + 6] == '\\' && s[i + 7] == 'u' ? hex4(s + i + 8) : -1;
            if (lo < 0xDC00 || lo > 0xDFFF) return dec_flag(sc, i, "unpaired UTF-16 surrogate");
            i += 12;
        } else {
            i += 6;
        }
    }
}

/* The lexical checks that cJSON 1.7.15 skips: it takes any byte <= 32 (NUL included) for
 * white space, copies raw control characters into strings, reads "\u00zz" as NUL, cannot
 * represent "\u0000" (its strings end at NUL), and reads numbers with strtod ("01", "1.", and
 * cut at 63 characters). Also finds where nesting passes the limit and, for the message, what
 * is left open when the text ends. Structure (commas, colons, brackets) is left to cJSON.
 * Strings are checked for UTF-8 on the way, and anything else must be ASCII, so a text that
 * passes is valid UTF-8. */
static int dec_scan(const unsigned char *s, size_t n, dec_scan_t *sc) {
    size_t open[MAX_DEPTH];
    int depth = 0;
    size_t i = 0;
    sc->unclosed = 0;
    sc->commas = 0;
    sc->values = 0;
    while (i < n) {
        unsigned char ch = s[i];
        switch (ch) {
        case ' ': case '\t': case '\n': case '\r': case ':':
            i++;
            break;
        case ',':
            sc->commas += depth == 1;
            i++;
            break;
        case '[': case '{':
            if (depth == MAX_DEPTH) return dec_flag(sc, i, DEPTH_MSG);
            open[depth++] = i++;
            sc->values++;
            break;
        case ']': case '}':
            if (depth > 0) depth--;
            i++;
            break;
        case '"':
            sc->values++;
            i = dec_scan_string(s, n, i, sc);
            if (!i) return 0;
            if (sc->unclosed) return 1;
            break;
        case '-': case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8': case '9':
            sc->values++;
            i = dec_scan_number(s, i, sc);
            if (!i) return 0;
            break;
        default:
            if (ch < 0x20) return dec_flag(sc, i, "control character outside a string");
            if (ch >= 0x80) return dec_flag(sc, i, "unexpected character outside a string");
            sc->values += ch == 't' || ch == 'f' || ch == 'n'; /* each of true, false, null has one */
            i++; /* letters and stray punctuation: cJSON's business */
            break;
        }
    }
    if (depth > 0) {
        sc->unclosed = 1;
        sc->open_at = open[depth - 1];
    }
    return 1;
}

/* Raises "json.decode: WHAT at byte OFF (line L, column C)DETAIL". Columns count characters;
 * byte offsets are 0-based, lines and columns 1-based, as editors show them. */
static int dec_fail(lua_State *L, const char *s, size_t n, size_t off, const char *what, const char *detail) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < off && i < n; i++) {
        if (s[i] == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)s[i] & 0xC0) != 0x80) {
            col++;
        }
    }
    char head[160];
    snprintf(head, sizeof head, "json.decode: %s at byte %zu (line %zu, column %zu)", what, off, line, col);
    lua_pushstring(L, head);
    lua_pushstring(L, detail);
    lua_concat(L, 2);
    return lua_error(L);
}

/* ": WHY, near 'TEXT'" (the text from off to the end of its line, at most 24 bytes) and a hint
 * about what the input leaves open. */
static int dec_fail_syntax(lua_State *L, const char *s, size_t n, size_t off, const char *why,
                           const dec_scan_t *sc) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, ": ");
    if (why) {
        luaL_addstring(&b, why);
        luaL_addstring(&b, ", ");
    }
    if (off >= n) {
        luaL_addstring(&b, "at the end of the input");
    } else {
        size_t len = 0;
        while (off + len < n && s[off + len] != '\n' && s[off + len] != '\r') len++;
        luaL_addstring(&b, "near '");
        add_escaped(&b, s + off, len, 24, 0);
        luaL_addchar(&b, '\'');
    }
    if (!why && sc->unclosed) {
        char hint[96];
        if (s[sc->open_at] == '"')
            snprintf(hint, sizeof hint, " (the input ends inside the string that starts at byte %zu)", sc->open_at);
        else
            snprintf(hint, sizeof hint, " (the input ends before the %c at byte %zu is closed)", s[sc->open_at],
                     sc->open_at);
        luaL_addstring(&b, hint);
    }
    luaL_pushresult(&b);
    return dec_fail(L, s, n, off, "invalid JSON", lua_tostring(L, -1));
}

/* cJSON allocates every node and string separately and frees them one by one, which was about
 * a quarter of decode. While a decode parses, its thread's cJSON allocations come from an
 * arena instead, released in one go; elsewhere the hooks are plain malloc and free. The
 * chunks come from the Lua state's allocator, as the spare below lives as long as the state
 * and is owned by a Lua value. */
typedef struct dec_chunk {
    struct dec_chunk *prev;
    size_t cap, used; /* bytes after the header */
} dec_chunk;

/* cJSON allocates nothing but its nodes and strings, and Lua's allocator aligns to 8. */
#define DEC_ALIGN _Alignof(cJSON)
_Static_assert(sizeof(dec_chunk) % DEC_ALIGN == 0, "chunk data must stay aligned");
#define DEC_FIRST_CHUNK ((size_t)16 << 10)
/* Fresh memory costs a page fault per page on first touch, which ate much of what the arena
 * saved on big documents, so the largest chunk (up to this size) stays with the module for
 * the next decode. */
#define DEC_SPARE_MAX ((size_t)32 << 20)

typedef struct {
    dec_chunk *spare; /* freed by the __gc of the userdata this lives in */
} dec_cache;

typedef struct {
    dec_chunk *last;
    dec_chunk *spare; /* taken from the cache for this decode */
    size_t next_cap;
    lua_Alloc alloc;
    void *ud;
} dec_arena;

static _Thread_local dec_arena *dec_active;

static void dec_chunk_free(lua_Alloc alloc, void *ud, dec_chunk *ch) {
    if (ch) alloc(ud, ch, sizeof *ch + ch->cap, 0);
}

/* A new chunk for size more bytes: the spare if it is big enough, else a fresh one. */
COLD static void *dec_alloc_chunk(dec_arena *a, size_t size) {
    dec_chunk *ch;
    if (a->spare && a->spare->cap >= size) {
        ch = a->spare;
        a->spare = NULL;
    } else {
        size_t cap = a->next_cap > size ? a->next_cap : size;
        ch = a->alloc(a->ud, NULL, 0, sizeof *ch + cap);
        if (!ch) return NULL;
        ch->cap = cap;
    }
    ch->prev = a->last;
    ch->used = size;
    a->last = ch;
    /* doubling, so that a big document needs few chunks and the spare soon covers it */
    if (a->next_cap < 2 * ch->cap) a->next_cap = 2 * ch->cap;
    return ch + 1;
}

static void *dec_alloc(size_t size) {
    dec_arena *a = dec_active;
    if (!a) return malloc(size);
    size = (size + DEC_ALIGN - 1) / DEC_ALIGN * DEC_ALIGN;
    dec_chunk *ch = a->last;
    if (!ch || ch->cap - ch->used < size) return dec_alloc_chunk(a, size);
    void *p = (char *)(ch + 1) + ch->used;
    ch->used += size;
    return p;
}

static void dec_free(void *p) {
    if (!dec_active) free(p);
}

/* Frees the arena but for its largest chunk, which goes back to the cache unless another
 * decode (run from a finalizer meanwhile) has already put one there. */
static void dec_arena_release(dec_arena *a, dec_cache *cache) {
    dec_chunk *keep = a->spare;
    while (a->last) {
        dec_chunk *ch = a->last;
        a->last = ch->prev;
        if (ch->cap <= DEC_SPARE_MAX && (!keep || ch->cap > keep->cap)) {
            dec_chunk_free(a->alloc, a->ud, keep);
            keep = ch;
        } else {
            dec_chunk_free(a->alloc, a->ud, ch);
        }
    }
    if (cache->spare)
        dec_chunk_free(a->alloc, a->ud, keep);
    else
        cache->spare = keep;
}

/* Empties the arena for the next parse, keeping its newest (largest) chunk. */
static void dec_arena_reset(dec_arena *a) {
    dec_chunk *keep = a->last;
    if (!keep) return;
    while (keep->prev) {
        dec_chunk *prev = keep->prev->prev;
        dec_chunk_free(a->alloc, a->ud, keep->prev);
        keep->prev = prev;
    }
    keep->used = 0;
}

static int dec_cache_gc(lua_State *L) {
    dec_cache *cache = lua_touserdata(L, 1);
    void *ud;
    lua_Alloc alloc = lua_getallocf(L, &ud);
    dec_chunk_free(alloc, ud, cache->spare);
    cache->spare = NULL;
    return 0;
}

static void dec_install_hooks(void) {
    cJSON_Hooks hooks = {dec_alloc, dec_free};
    cJSON_InitHooks(&hooks);
}

/* The most recent object keys, so that the same key in row after row becomes the same Lua
 * string without hashing and interning it again (a lookup in LuaJIT's string table that
 * misses the cache more often than not). The strings are anchored in stack slots. */
#define KEY_CACHE 64

typedef struct {
    const char *s[KEY_CACHE];
    size_t len[KEY_CACHE];
    const seer_json_len_t *nul; /* strings holding \u0000 (seer_json_nul_strings); NULL: none */
    size_t nnul;
} dec_keys;

/* What decode hands its protected half. */
typedef struct {
    const char *s;
    size_t n;
    size_t first;   /* where the top-level value starts */
    size_t count;   /* elements of a top-level array, if the text is valid */
    cJSON *tree;    /* the whole text parsed, or NULL to try the top-level array element-wise */
    dec_arena *arena;
    cJSON *loose;   /* a tree outside the arena (see dec_parse), freed by json_decode */
    int done;       /* the element-wise attempt got through */
    seer_json_len_t *nul; /* strings of d->tree holding \u0000, in a userdata on the stack */
    size_t nnul;
} dec_ctx;

/* Stack slots of dec_run, the protected half of decode; from DEC_KEYS on, KEY_CACHE keys. */
enum { DEC_CTX = 1, DEC_NULL, DEC_ARRAY_MT, DEC_OBJECT_MT, DEC_KEYS };

static void dec_push_key(lua_State *L, dec_keys *k, const char *s) {
    size_t len = k->nnul ? seer_json_strlen(k->nul, k->nnul, s) : strlen(s);
    unsigned h = len ? ((unsigned)len * 31u + (unsigned char)s[0] * 7u + (unsigned char)s[len - 1]) % KEY_CACHE : 0;
    if (k->s[h] && k->len[h] == len && !memcmp(k->s[h], s, len)) {
        lua_pushvalue(L, DEC_KEYS + (int)h);
        return;
    }
    lua_pushlstring(L, s, len);
    lua_pushvalue(L, -1);
    lua_replace(L, DEC_KEYS + (int)h);
    k->s[h] = lua_tostring(L, -1);
    k->len[h] = len;
}

static void dec_value(lua_State *L, dec_keys *k, const cJSON *item) {
    switch (item->type & 0xFF) {
    case cJSON_NULL: lua_pushvalue(L, DEC_NULL); return;
    case cJSON_False: lua_pushboolean(L, 0); return;
    case cJSON_True: lua_pushboolean(L, 1); return;
    case cJSON_Number: lua_pushnumber(L, (lua_Number)item->valuedouble); return;
    case cJSON_String:
        if (k->nnul) lua_pushlstring(L, item->valuestring, seer_json_strlen(k->nul, k->nnul, item->valuestring));
        else lua_pushstring(L, item->valuestring);
        return;
    case cJSON_Array:
    case cJSON_Object: {
        if (!lua_checkstack(L, 8)) luaL_error(L, "json.decode: Lua stack exhausted");
        int obj = (item->type & 0xFF) == cJSON_Object;
        /* Sized up front when small. A long list is not counted first: chasing its nodes twice
         * cost more than letting the table grow. */
        enum { DEC_PRESIZE_MAX = 64 };
        int count = 0;
        for (const cJSON *ch = item->child; ch && count < DEC_PRESIZE_MAX; ch = ch->next) count++;
        lua_createtable(L, obj ? 0 : count, obj ? count : 0);
        lua_pushvalue(L, obj ? DEC_OBJECT_MT : DEC_ARRAY_MT);
        lua_setmetatable(L, -2);
        int i = 0;
        for (const cJSON *ch = item->child; ch; ch = ch->next) {
            if (obj) {
                dec_push_key(L, k, ch->string);
                dec_value(L, k, ch);
                lua_rawset(L, -3); /* a repeated key overwrites: the last one wins */
            } else {
                dec_value(L, k, ch);
                lua_rawseti(L, -2, ++i);
            }
        }
        return;
    }
    default: luaL_error(L, "json.decode: internal error: unexpected cJSON node type %d", item->type);
    }
}

/* cJSON parses the value at s[0..n) with its allocations in the arena; *end is where it
 * stopped (or failed). */
static cJSON *dec_parse(dec_ctx *d, const char *s, size_t n, const char **end) {
    dec_active = d->arena;
    cJSON *tree = cJSON_ParseWithLengthOpts(s, n, end, 0);
    dec_active = NULL;
    /* Should other code have installed cJSON hooks of its own, the tree is not in the arena. */
    if (tree && !d->arena->last) d->loose = tree;
    return tree;
}

static size_t skip_space(const char *s, size_t n, size_t i) {
    while (i < n && is_json_space((unsigned char)s[i])) i++;
    return i;
}

/* A top-level array (the usual shape of rows and records) is parsed by cJSON one element at a
 * time and each element converted at once, so that the tree stays small and in the cache
 * instead of growing to ten times the text. A value parses the same wherever it stands, so
 * the result is the same. Only for a text the scan has passed; returns 0 at the first thing
 * that is off, and json_decode then parses the whole text to find the error to report. */
static int dec_elements(lua_State *L, dec_keys *k, dec_ctx *d) {
    const char *s = d->s;
    size_t n = d->n, i = skip_space(s, n, d->first + 1);
    lua_createtable(L, d->count < INT32_MAX ? (int)d->count : 0, 0);
    lua_pushvalue(L, DEC_ARRAY_MT);
    lua_setmetatable(L, -2);
    int t = lua_gettop(L);
    if (i < n && s[i] == ']') return skip_space(s, n, i + 1) == n;
    for (int idx = 1;; idx++) {
        dec_arena_reset(d->arena);
        const char *end;
        cJSON *tree = dec_parse(d, s + i, n - i, &end);
        if (!tree) return 0;
        dec_value(L, k, tree);
        lua_rawseti(L, t, idx);
        cJSON_Delete(d->loose);
        d->loose = NULL;
        i = skip_space(s, n, (size_t)(end - s));
        if (i < n && s[i] == ',') {
            i = skip_space(s, n, i + 1);
            continue;
        }
        if (i < n && s[i] == ']') return skip_space(s, n, i + 1) == n;
        return 0;
    }
}

static int dec_run(lua_State *L) {
    dec_ctx *d = lua_touserdata(L, DEC_CTX);
    if (!lua_checkstack(L, KEY_CACHE + 8)) luaL_error(L, "json.decode: Lua stack exhausted");
    lua_settop(L, DEC_KEYS + KEY_CACHE - 1);
    dec_keys k;
    memset(&k, 0, sizeof k);
    k.nul = d->nul;
    k.nnul = d->nnul;
    if (d->tree)
        dec_value(L, &k, d->tree);
    else
        d->done = dec_elements(L, &k, d);
    return 1;
}

/* Runs dec_run protected; on an error frees what the arena and d hold and re-raises. */
static void dec_protected(lua_State *L, dec_ctx *d, dec_cache *cache) {
    lua_pushcfunction(L, dec_run);
    lua_pushlightuserdata(L, d);
    lua_pushvalue(L, 3);
    lua_pushvalue(L, UV_ARRAY_MT);
    lua_pushvalue(L, UV_OBJECT_MT);
    if (lua_pcall(L, 4, 1, 0) != 0) {
        cJSON_Delete(d->loose);
        dec_arena_release(d->arena, cache);
        lua_error(L);
    }
}

static int json_decode(lua_State *L) {
    luaL_checktype(L, 1, LUA_TSTRING);
    size_t n;
    const char *s = lua_tolstring(L, 1, &n);
    lua_settop(L, 2);
    lua_pushvalue(L, UV_NULL); /* 3: what null decodes to */
    double max_values = -1; /* opts.max_values: no limit */
    if (!lua_isnil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            if (lua_type(L, -2) == LUA_TSTRING && !strcmp(lua_tostring(L, -2), "null")) {
                lua_replace(L, 3);
                continue;
            }
            if (lua_type(L, -2) == LUA_TSTRING && !strcmp(lua_tostring(L, -2), "max_values")) {
                max_values = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
                if (!(max_values >= 0) || max_values != floor(max_values))
                    luaL_argerror(L, 2, "max_values must be a whole number >= 0");
                lua_pop(L, 1);
                continue;
            }
            if (lua_type(L, -2) == LUA_TSTRING)
                lua_pushfstring(L, "unknown option '%s' (the options are null and max_values)", lua_tostring(L, -2));
            else
                lua_pushfstring(L, "option names are strings, not %s", luaL_typename(L, -2));
            luaL_argerror(L, 2, lua_tostring(L, -1));
        }
    }

    /* A byte order mark is allowed (RFC 8259 lets parsers ignore one); offsets stay those of
     * the whole input. Only white space follows it in an empty input, so that is valid UTF-8. */
    size_t base = n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3) ? 3 : 0;
    size_t first = skip_space(s, n, base);
    if (first == n) return luaL_error(L, "json.decode: empty input");

    dec_scan_t sc;
    int scan_ok = dec_scan((const unsigned char *)s + base, n - base, &sc);
    /* A text the scan passes is valid UTF-8. Where it stopped early, the whole text is checked,
     * since invalid UTF-8 anywhere is the error reported first. */
    size_t bad;
    if (!scan_ok && !seer_utf8_validate(s, n, &bad)) return dec_fail(L, s, n, bad, "input is not valid UTF-8", "");
    if (!scan_ok) sc.off += base;
    if (sc.unclosed) sc.open_at += base;
    /* Counted before anything is built: a text of many tiny values ("[0,0,0,...") costs tens of
     * bytes of memory per byte of text once decoded. */
    if (scan_ok && max_values >= 0 && (double)sc.values > max_values) {
        char msg[200];
        snprintf(msg, sizeof msg, "json.decode: the text holds %zu values, more than max_values = %.0f (arrays, objects, strings and keys, numbers and literals count)",
                 sc.values, max_values);
        return luaL_error(L, "%s", msg);
    }

    dec_cache *cache = lua_touserdata(L, UV_DEC_CACHE);
    dec_arena arena = {NULL, cache->spare, DEC_FIRST_CHUNK, NULL, NULL};
    arena.alloc = lua_getallocf(L, &arena.ud);
    cache->spare = NULL;
    dec_ctx d = {s, n, first, sc.commas + 1, NULL, &arena, NULL, 0, NULL, 0};
    /* Strings holding \u0000 need their lengths from the text (seer_json_nul_strings), which
     * is worked out over the whole tree: such a text skips the element-wise path. */
    size_t nul_bound = scan_ok ? seer_json_nul_bound(s + base, n - base) : 0;
    if (nul_bound) {
        d.nul = lua_newuserdata(L, nul_bound * sizeof *d.nul); /* slot 4, freed by the GC */
    } else if (scan_ok && !sc.unclosed && s[first] == '[') {
        dec_protected(L, &d, cache);
        if (d.done) {
            dec_arena_release(&arena, cache);
            return 1;
        }
        lua_pop(L, 1);
        dec_arena_reset(&arena);
    }

    /* Not require_null_terminated: with an explicit length cJSON 1.7.15 then wants the NUL
     * counted inside the length, and stops at an embedded NUL as if the text ended there. We
     * check what follows the value ourselves. */
    const char *end = NULL;
    d.tree = dec_parse(&d, s + base, n - base, &end);
    size_t c_off = SIZE_MAX;
    const char *c_why = NULL;
    if (!d.tree) {
        c_off = end ? (size_t)(end - s) : base;
    } else {
        size_t p = skip_space(s, n, (size_t)(end - s));
        if (p < n) {
            c_off = p;
            c_why = "unexpected text after the JSON value";
        }
    }
    /* Report whichever problem comes first in the text; at the same byte ours says more. */
    if ((!scan_ok && sc.off <= c_off) || c_off != SIZE_MAX) {
        cJSON_Delete(d.loose);
        dec_arena_release(&arena, cache);
    }
    if (!scan_ok && sc.off <= c_off) return dec_fail_syntax(L, s, n, sc.off, sc.why, &sc);
    if (c_off != SIZE_MAX) {
        if (!scan_ok) sc.unclosed = 0;
        return dec_fail_syntax(L, s, n, c_off, c_why, &sc);
    }

    if (nul_bound) d.nnul = seer_json_nul_strings(s + base, n - base, d.tree, d.nul, nul_bound);
    dec_protected(L, &d, cache);
    cJSON_Delete(d.loose);
    dec_arena_release(&arena, cache);
    return 1;
}

/* ---- marks and the module ----------------------------------------------------------------------- */

static int json_mark(lua_State *L, int mt) {
    if (lua_isnoneornil(L, 1)) {
        lua_settop(L, 0);
        lua_newtable(L);
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    if (lua_getmetatable(L, 1)) {
        /* Replacing someone else's metatable would silently break that object. */
        if (!lua_rawequal(L, -1, UV_ARRAY_MT) && !lua_rawequal(L, -1, UV_OBJECT_MT))
            luaL_argerror(L, 1, "the table already has a metatable (give it a __tojson metamethod instead)");
        lua_pop(L, 1);
    }
    lua_pushvalue(L, mt);
    lua_setmetatable(L, 1);
    return 1;
}

static int json_array(lua_State *L) { return json_mark(L, UV_ARRAY_MT); }

static int json_object(lua_State *L) { return json_mark(L, UV_OBJECT_MT); }

static int json_has_mark(lua_State *L, int mt) {
    int yes = lua_type(L, 1) == LUA_TTABLE && lua_getmetatable(L, 1) && lua_rawequal(L, -1, mt);
    lua_pushboolean(L, yes);
    return 1;
}

static int json_is_array(lua_State *L) { return json_has_mark(L, UV_ARRAY_MT); }

static int json_is_object(lua_State *L) { return json_has_mark(L, UV_OBJECT_MT); }

static int json_null_tostring(lua_State *L) {
    lua_pushliteral(L, "json.null");
    return 1;
}

/* Pushes registry[key], creating it first with make (which pushes the new value). The values
 * outlive the module table, so opening the module twice keeps json.null the same value. */
static void registry_value(lua_State *L, const char *key, void (*make)(lua_State *)) {
    lua_getfield(L, LUA_REGISTRYINDEX, key);
    if (!lua_isnil(L, -1)) return;
    lua_pop(L, 1);
    make(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, key);
}

static void make_null(lua_State *L) {
    lua_newuserdata(L, 0);
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, json_null_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "json.null");
    lua_setfield(L, -2, "__name");
    lua_setmetatable(L, -2);
}

static void make_array_mt(lua_State *L) {
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "json.array");
    lua_setfield(L, -2, "__name");
}

static void make_object_mt(lua_State *L) {
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "json.object");
    lua_setfield(L, -2, "__name");
}

int seer_json_luaopen(lua_State *L) {
    static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;
    pthread_once(&hooks_once, dec_install_hooks);
    static const luaL_Reg funcs[] = {
        {"encode", json_encode}, {"decode", json_decode},     {"pretty", json_pretty},       {"array", json_array},
        {"object", json_object}, {"is_array", json_is_array}, {"is_object", json_is_object}, {NULL, NULL},
    };
    lua_createtable(L, 0, 8);
    int mod = lua_gettop(L);
    registry_value(L, SEER_JSON_NULL_KEY, make_null);
    registry_value(L, SEER_JSON_ARRAY_MT_KEY, make_array_mt);
    registry_value(L, SEER_JSON_OBJECT_MT_KEY, make_object_mt);
    dec_cache *cache = lua_newuserdata(L, sizeof *cache);
    cache->spare = NULL;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, dec_cache_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    for (const luaL_Reg *f = funcs; f->name; f++) {
        lua_pushvalue(L, mod + 1);
        lua_pushvalue(L, mod + 2);
        lua_pushvalue(L, mod + 3);
        lua_pushvalue(L, mod + 4);
        lua_pushcclosure(L, f->func, 4);
        lua_setfield(L, mod, f->name);
    }
    lua_pushvalue(L, mod + 1);
    lua_setfield(L, mod, "null");
    lua_createtable(L, 0, 3); /* the model-folder limits of json.h, for the Lua loaders */
    lua_pushnumber(L, (lua_Number)SEER_JSON_MAX_VALUES_ST_HEADER);
    lua_setfield(L, -2, "safetensors_header");
    lua_pushnumber(L, (lua_Number)SEER_JSON_MAX_VALUES_CONFIG);
    lua_setfield(L, -2, "config");
    lua_pushnumber(L, (lua_Number)SEER_JSON_MAX_VALUES_TOKENIZER);
    lua_setfield(L, -2, "tokenizer");
    lua_setfield(L, mod, "MODEL_MAX_VALUES");
    lua_settop(L, mod);
    return 1;
}
