/* The Jinja2 subset that chat templates use, interpreted in C: a lexer that reproduces Jinja2's
 * whitespace rules (trim_blocks, lstrip_blocks, "-" and "+" markers), a recursive-descent parser
 * with Jinja2's precedence, and a tree walker with Python's value semantics (truthiness, str(),
 * repr of containers, json.dumps). Every allocation of a render lives in one arena that is freed
 * at the end, and errors unwind with longjmp, so no error path can leak or double free. Every
 * operation charges a work budget by what it costs (charge() below), so a render ends after a
 * bounded amount of work whatever the template does. */
#include "tokenizer/jinja.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ======================================================================================== */
/* Values                                                                                    */
/* ======================================================================================== */

enum { T_UNDEF, T_NONE, T_BOOL, T_INT, T_FLOAT, T_STR, T_LIST, T_TUPLE, T_DICT, T_NS, T_FUNC,
       T_METHOD, T_MACRO, T_LOOP };

typedef struct jstr { const char *p; size_t n; } jstr;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jmeth jmeth;
typedef struct jloop jloop;
typedef struct node node;

typedef struct jv {
    int t;
    union {
        int b;
        int64_t i;
        double f;
        jstr s;            /* T_STR; for T_UNDEF the hint ("'x' is undefined") */
        jlist *l;          /* T_LIST, T_TUPLE */
        jdict *d;          /* T_DICT, T_NS */
        int fn;            /* T_FUNC */
        jmeth *m;          /* T_METHOD */
        node *mac;         /* T_MACRO */
        jloop *loop;       /* T_LOOP */
    } u;
} jv;

struct jlist { jv *v; size_t n, cap; };
struct jdict { jv *k; jv *v; size_t n, cap; };
struct jmeth { jv self; const char *name; };
struct jloop { jlist *items; size_t i; int depth; };

enum { F_RAISE, F_STRFTIME, F_NAMESPACE, F_RANGE, F_DICT };
static const char *const func_names[] = {"raise_exception", "strftime_now", "namespace", "range",
                                         "dict"};

/* ======================================================================================== */
/* The render state, arena, errors                                                           */
/* ======================================================================================== */

typedef struct blk { struct blk *next; size_t cap, used; } blk;
typedef struct sb { char *p; size_t n, cap; struct sb *next_live; } sb;
typedef struct scope { struct scope *parent; jdict vars; } scope;

typedef struct R {
    jmp_buf jb;
    int code;
    char msg[1024];
    blk *arena;
    size_t mem_used;
    sb *live;        /* malloc'd builders, freed at the end whatever happens */
    seer_chat_template_limits_t lim;
    size_t iters;
    size_t depth;
    const char *src; /* normalized template source, for positions */
    size_t src_n;
    scope *root;     /* the template's top-level scope (child of the globals) */
    sb *out;         /* where output goes now */
    size_t work;     /* work units spent so far */
    size_t budget;   /* work units this render may spend (max_work + the variables' allowance) */
    struct { const char *p; size_t n, len; } lens[64]; /* code-point counts of long strings */
} R;

static _Noreturn void jfail(R *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void jfail(R *r, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    r->code = code;
    longjmp(r->jb, 1);
}

/* The work budget. Every operation whose cost the template controls charges it: one unit per
 * byte scanned or copied, one per element made or compared, COST_NODE per expression node,
 * statement, loop iteration or call. The iteration and memory caps alone do not bound time (a
 * loop can scan a 60 MB string in each of its million iterations, a macro can call itself twice
 * at every level without looping at all), the budget does. */
#define COST_NODE 16    /* an expression node, statement, loop iteration, call, found match */
#define COST_CHAR 3     /* a code point decoded one at a time */
#define COST_CMP 8      /* one comparison of two values */
#define COST_FLOAT 1024 /* formatting a float (shortest repr: up to 17 printf/strtod rounds) */
#define COST_DIGIT 16   /* a digit printed and read back at a fixed precision (round: up to 700) */

static _Noreturn void work_fail(R *r) {
    jfail(r, SEER_EINVAL,
          "limit: the render exceeded its work budget (%zu units): the template does too much work for its "
          "input (raise max_work in seer_chat_template_limits_t, or from Lua seer.chat_template.render's "
          "opts.max_work or seer.chat_template.limits.max_work, only for a template you trust)",
          r->budget);
}

static inline void charge(R *r, size_t units) {
    if (units > r->budget - r->work) work_fail(r);
    r->work += units;
}

static void *ar_alloc(R *r, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    blk *b = r->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (cap > r->lim.max_memory || r->mem_used > r->lim.max_memory - cap)
            jfail(r, SEER_ENOMEM, "limit: the render needs more than %zu bytes of memory", r->lim.max_memory);
        size_t hdr = (sizeof(blk) + 15) & ~(size_t)15;
        b = malloc(hdr + cap);
        if (!b) jfail(r, SEER_ENOMEM, "out of memory");
        b->cap = cap;
        b->used = 0;
        b->next = r->arena;
        r->arena = b;
        r->mem_used += cap;
    }
    size_t hdr = (sizeof(blk) + 15) & ~(size_t)15;
    void *p = (char *)b + hdr + b->used;
    b->used += n;
    return p;
}

static void *ar_calloc(R *r, size_t n) { void *p = ar_alloc(r, n); memset(p, 0, n); return p; }

static jstr ar_str(R *r, const char *s, size_t n) {
    charge(r, n);
    char *p = ar_alloc(r, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return (jstr){p, n};
}

/* ---- string builders ---- */

static sb *sb_new(R *r) {
    sb *b = ar_calloc(r, sizeof *b);
    b->next_live = r->live;
    r->live = b;
    return b;
}

static void sb_reserve(R *r, sb *b, size_t extra) {
    if (extra > r->lim.max_output || b->n > r->lim.max_output - extra)
        jfail(r, SEER_EINVAL, "limit: output longer than %zu bytes", r->lim.max_output);
    size_t need = b->n + extra + 1;
    if (need <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) jfail(r, SEER_ENOMEM, "out of memory");
    b->p = p;
    b->cap = cap;
}

static void sb_add(R *r, sb *b, const char *s, size_t n) {
    charge(r, n);
    if (!n) return;
    sb_reserve(r, b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_adds(R *r, sb *b, const char *s) { sb_add(r, b, s, strlen(s)); }
static void sb_addc(R *r, sb *b, char c) { sb_add(r, b, &c, 1); }

/* Copies the builder into the arena and releases its heap buffer. */
static jstr sb_take(R *r, sb *b) {
    jstr s = ar_str(r, b->p ? b->p : "", b->n);
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
    return s;
}

/* ---- value constructors ---- */

static jv v_undef(const char *hint) { jv v = {.t = T_UNDEF}; v.u.s.p = hint; v.u.s.n = hint ? strlen(hint) : 0; return v; }
static jv v_none(void) { return (jv){.t = T_NONE}; }
static jv v_bool(int b) { jv v = {.t = T_BOOL}; v.u.b = !!b; return v; }
static jv v_int(int64_t i) { jv v = {.t = T_INT}; v.u.i = i; return v; }
static jv v_float(double f) { jv v = {.t = T_FLOAT}; v.u.f = f; return v; }
static jv v_str(jstr s) { jv v = {.t = T_STR}; v.u.s = s; return v; }
static jv v_cstr(const char *s) { return v_str((jstr){s, strlen(s)}); }

static jlist *list_new(R *r, size_t cap) {
    jlist *l = ar_calloc(r, sizeof *l);
    if (cap) { l->v = ar_alloc(r, cap * sizeof(jv)); l->cap = cap; }
    return l;
}
static void list_push(R *r, jlist *l, jv v) {
    charge(r, 1);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = ar_alloc(r, cap * sizeof(jv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}
static jv v_list(jlist *l) { jv v = {.t = T_LIST}; v.u.l = l; return v; }
static jv v_tuple(jlist *l) { jv v = {.t = T_TUPLE}; v.u.l = l; return v; }
static jv v_dict(jdict *d) { jv v = {.t = T_DICT}; v.u.d = d; return v; }

static int str_eq(jstr a, const char *b) { size_t n = strlen(b); return a.n == n && memcmp(a.p, b, n) == 0; }

static int v_eq(R *r, jv a, jv b);

static jv *dict_find(R *r, jdict *d, jv k) {
    for (size_t i = 0; i < d->n; i++)
        if (v_eq(r, d->k[i], k)) return &d->v[i];
    return NULL;
}
static jv *dict_finds(R *r, jdict *d, const char *s, size_t n) {
    charge(r, d->n);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == T_STR && d->k[i].u.s.n == n && (charge(r, n), memcmp(d->k[i].u.s.p, s, n) == 0)) return &d->v[i];
    return NULL;
}
static void dict_set(R *r, jdict *d, jv k, jv v) {
    jv *slot = dict_find(r, d, k);
    if (slot) { *slot = v; return; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *nk = ar_alloc(r, cap * sizeof(jv)), *nv = ar_alloc(r, cap * sizeof(jv));
        if (d->n) { memcpy(nk, d->k, d->n * sizeof(jv)); memcpy(nv, d->v, d->n * sizeof(jv)); }
        d->k = nk; d->v = nv; d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

/* ======================================================================================== */
/* UTF-8 and Python string helpers                                                           */
/* ======================================================================================== */

/* Decodes one code point leniently: an ill-formed byte counts as one character of its own, so
 * byte strings that are not UTF-8 still have a length and can be sliced. */
static size_t u8_next(const char *s, size_t n, size_t i, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s + i;
    size_t avail = n - i;
    unsigned c = p[0];
    size_t len = 1;
    uint32_t v = c;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; }
    if (len > avail) len = 1, v = c;
    for (size_t k = 1; k < len; k++) {
        if ((p[k] & 0xC0) != 0x80) { len = 1; v = c; break; }
        v = (v << 6) | (p[k] & 0x3F);
    }
    if (cp) *cp = v;
    return len;
}

static size_t u8_len(jstr s, size_t *slow) {
    size_t n = 0, i = 0, k = 0;
    while (i < s.n) {
        if (s.n - i >= 8) {   /* eight ASCII bytes at a time */
            uint64_t w;
            memcpy(&w, s.p + i, 8);
            if (!(w & 0x8080808080808080ull)) { n += 8; i += 8; continue; }
        }
        i += u8_next(s.p, s.n, i, NULL);
        n++;
        k++;
    }
    if (slow) *slow = k;
    return n;
}

/* len(s) in code points, charged; a long string's count is computed once per render (strings
 * are immutable and the arena is never freed before the end, so (pointer, length) names the
 * same text for the whole render). */
static size_t str_len(R *r, jstr s) {
    size_t slow;
    if (s.n < 256) { size_t len = u8_len(s, &slow); charge(r, s.n + COST_CHAR * slow); return len; }
    size_t h = ((uintptr_t)s.p ^ ((uintptr_t)s.p >> 9) ^ s.n) & 63;
    charge(r, 1);
    if (r->lens[h].p == s.p && r->lens[h].n == s.n) return r->lens[h].len;
    size_t len = u8_len(s, &slow);
    charge(r, s.n + COST_CHAR * slow);
    r->lens[h].p = s.p;
    r->lens[h].n = s.n;
    r->lens[h].len = len;
    return len;
}

static int py_isspace(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* Python str.strip family: which = 1 left, 2 right, 3 both; chars NULL means white space. */
static jstr py_strip(R *r, jstr s, const jstr *chars, int which) {
    size_t a = 0, b = s.n;
    for (;;) {
        if (!(which & 1) || a >= b) break;
        uint32_t c;
        size_t l = u8_next(s.p, s.n, a, &c);
        int hit = 0;
        charge(r, COST_CHAR);
        if (!chars) hit = py_isspace(c);
        else for (size_t j = 0; j < chars->n;) { uint32_t d; charge(r, COST_CHAR); j += u8_next(chars->p, chars->n, j, &d); if (d == c) { hit = 1; break; } }
        if (!hit) break;
        a += l;
    }
    while ((which & 2) && b > a) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)s.p[st] & 0xC0) == 0x80 && b - st < 4) st--;
        uint32_t c;
        size_t l = u8_next(s.p, s.n, st, &c);
        if (st + l != b) { st = b - 1; c = (unsigned char)s.p[st]; }
        int hit = 0;
        charge(r, COST_CHAR);
        if (!chars) hit = py_isspace(c);
        else for (size_t j = 0; j < chars->n;) { uint32_t d; charge(r, COST_CHAR); j += u8_next(chars->p, chars->n, j, &d); if (d == c) { hit = 1; break; } }
        if (!hit) break;
        b = st;
    }
    return (jstr){s.p + a, b - a};
}

static int is_ascii_lower(int c) { return c >= 'a' && c <= 'z'; }
static int is_ascii_upper(int c) { return c >= 'A' && c <= 'Z'; }
static int is_ascii_alpha(int c) { return is_ascii_lower(c) || is_ascii_upper(c); }

/* ======================================================================================== */
/* str(), repr(), json.dumps                                                                 */
/* ======================================================================================== */

/* Python's repr of a float: the shortest digits that read back exactly, fixed notation when the
 * decimal exponent is in [-4, 16), otherwise d.ddde+XX. */
static void fmt_float(char *buf, size_t cap, double f) {
    if (isnan(f)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(f)) { snprintf(buf, cap, f < 0 ? "-inf" : "inf"); return; }
    char tmp[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d.ddde[+-]XX: split into digits and exponent */
    char digits[32];
    size_t nd = 0;
    const char *p = tmp;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    while (*p && *p != 'e') { if (*p != '.') digits[nd++] = *p; p++; }
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int decpt = exp10 + 1;
    char *o = buf;
    size_t left = cap;
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
    if (neg) PUT("-");
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            PUT("0.");
            for (int i = 0; i < -decpt; i++) PUT("0");
            PUT("%s", digits);
        } else if ((size_t)decpt >= nd) {
            PUT("%s", digits);
            for (size_t i = nd; i < (size_t)decpt; i++) PUT("0");
            PUT(".0");
        } else {
            PUT("%.*s.%s", decpt, digits, digits + decpt);
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
#undef PUT
}

/* Decimal digits of an int64 (what "%" PRId64 prints), without printf. */
static void fmt_int(char *buf, int64_t v) {
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    size_t k = 0;
    if (v < 0) buf[k++] = '-';
    while (n) buf[k++] = tmp[--n];
    buf[k] = 0;
}

static const char *type_name(jv v) {
    switch (v.t) {
    case T_UNDEF: return "Undefined";
    case T_NONE: return "NoneType";
    case T_BOOL: return "bool";
    case T_INT: return "int";
    case T_FLOAT: return "float";
    case T_STR: return "str";
    case T_LIST: return "list";
    case T_TUPLE: return "tuple";
    case T_DICT: return "dict";
    case T_NS: return "Namespace";
    case T_FUNC: return "builtin_function_or_method";
    case T_METHOD: return "builtin_function_or_method";
    case T_MACRO: return "Macro";
    case T_LOOP: return "LoopContext";
    }
    return "object";
}

static void repr_str(R *r, sb *b, jstr s) {
    charge(r, 2 * s.n);
    int has_sq = memchr(s.p, '\'', s.n) != NULL, has_dq = memchr(s.p, '"', s.n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    sb_addc(r, b, q);
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        char esc[8];
        size_t run = 0;   /* bytes copied as they are, in one piece */
        while (i + run < s.n) {
            unsigned char d = (unsigned char)s.p[i + run];
            if (d == '\\' || d == (unsigned char)q || d < 0x20 || d == 0x7f) break;
            run++;
        }
        if (run) { sb_add(r, b, s.p + i, run); i += run - 1; continue; }
        charge(r, COST_NODE);
        if (c == '\\') sb_add(r, b, "\\\\", 2);
        else if (c == (unsigned char)q) { sb_addc(r, b, '\\'); sb_addc(r, b, (char)c); }
        else if (c == '\n') sb_add(r, b, "\\n", 2);
        else if (c == '\r') sb_add(r, b, "\\r", 2);
        else if (c == '\t') sb_add(r, b, "\\t", 2);
        else if (c < 0x20 || c == 0x7f) { snprintf(esc, sizeof esc, "\\x%02x", c); sb_adds(r, b, esc); }
        else sb_addc(r, b, (char)c);
    }
    sb_addc(r, b, q);
}

static void to_str(R *r, sb *b, jv v, int repr);

static void repr_seq(R *r, sb *b, jlist *l, const char *open, const char *close, int tuple) {
    sb_adds(r, b, open);
    for (size_t i = 0; i < l->n; i++) {
        if (i) sb_add(r, b, ", ", 2);
        to_str(r, b, l->v[i], 1);
    }
    if (tuple && l->n == 1) sb_addc(r, b, ',');
    sb_adds(r, b, close);
}

static void to_str(R *r, sb *b, jv v, int repr) {
    char num[64];
    if (++r->depth > r->lim.max_depth) jfail(r, SEER_EINVAL, "limit: values nested deeper than %zu levels", r->lim.max_depth);
    switch (v.t) {
    case T_UNDEF: break;
    case T_NONE: sb_adds(r, b, "None"); break;
    case T_BOOL: sb_adds(r, b, v.u.b ? "True" : "False"); break;
    case T_INT: charge(r, COST_NODE); fmt_int(num, v.u.i); sb_adds(r, b, num); break;
    case T_FLOAT: charge(r, COST_FLOAT); fmt_float(num, sizeof num, v.u.f); sb_adds(r, b, num); break;
    case T_STR: if (repr) repr_str(r, b, v.u.s); else sb_add(r, b, v.u.s.p, v.u.s.n); break;
    case T_LIST: repr_seq(r, b, v.u.l, "[", "]", 0); break;
    case T_TUPLE: repr_seq(r, b, v.u.l, "(", ")", 1); break;
    case T_DICT:
    case T_NS:
        sb_adds(r, b, v.t == T_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) sb_add(r, b, ", ", 2);
            to_str(r, b, v.u.d->k[i], 1);
            sb_add(r, b, ": ", 2);
            to_str(r, b, v.u.d->v[i], 1);
        }
        sb_adds(r, b, v.t == T_NS ? "}>" : "}");
        break;
    case T_FUNC: sb_adds(r, b, "<built-in function "); sb_adds(r, b, func_names[v.u.fn]); sb_addc(r, b, '>'); break;
    case T_METHOD: sb_adds(r, b, "<built-in method "); sb_adds(r, b, v.u.m->name); sb_addc(r, b, '>'); break;
    case T_MACRO: sb_adds(r, b, "<Macro>"); break;
    case T_LOOP: sb_adds(r, b, "<LoopContext>"); break;
    }
    r->depth--;
}

static jstr str_of(R *r, jv v) {
    if (v.t == T_STR) return v.u.s;
    if (v.t == T_UNDEF) return (jstr){"", 0};
    sb *b = sb_new(r);
    to_str(r, b, v, 0);
    return sb_take(r, b);
}

typedef struct jsonopt { int indent; const char *indent_s; jstr item_sep, key_sep; int sort_keys; } jsonopt;

static void json_str(R *r, sb *b, jstr s) {
    sb_addc(r, b, '"');
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        char esc[8];
        size_t run = 0;   /* bytes copied as they are, in one piece */
        while (i + run < s.n) {
            unsigned char d = (unsigned char)s.p[i + run];
            if (d == '"' || d == '\\' || d < 0x20) break;
            run++;
        }
        if (run) { sb_add(r, b, s.p + i, run); i += run - 1; continue; }
        charge(r, COST_NODE);
        switch (c) {
        case '"': sb_add(r, b, "\\\"", 2); break;
        case '\\': sb_add(r, b, "\\\\", 2); break;
        case '\n': sb_add(r, b, "\\n", 2); break;
        case '\r': sb_add(r, b, "\\r", 2); break;
        case '\t': sb_add(r, b, "\\t", 2); break;
        case '\b': sb_add(r, b, "\\b", 2); break;
        case '\f': sb_add(r, b, "\\f", 2); break;
        default:
            if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); sb_adds(r, b, esc); }
            else sb_addc(r, b, (char)c);
        }
    }
    sb_addc(r, b, '"');
}

static void json_nl(R *r, sb *b, const jsonopt *o, int level) {
    charge(r, (size_t)level);
    sb_addc(r, b, '\n');
    for (int i = 0; i < level; i++) sb_adds(r, b, o->indent_s);
}

static int cmp_keys(R *r, const jv *a, const jv *b);

static void to_json(R *r, sb *b, jv v, const jsonopt *o, int level) {
    char num[64];
    if (++r->depth > r->lim.max_depth) jfail(r, SEER_EINVAL, "limit: values nested deeper than %zu levels", r->lim.max_depth);
    switch (v.t) {
    case T_NONE: sb_adds(r, b, "null"); break;
    case T_BOOL: sb_adds(r, b, v.u.b ? "true" : "false"); break;
    case T_INT: charge(r, COST_NODE); fmt_int(num, v.u.i); sb_adds(r, b, num); break;
    case T_FLOAT:
        charge(r, COST_FLOAT);
        if (isnan(v.u.f)) sb_adds(r, b, "NaN");
        else if (isinf(v.u.f)) sb_adds(r, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else { fmt_float(num, sizeof num, v.u.f); sb_adds(r, b, num); }
        break;
    case T_STR: json_str(r, b, v.u.s); break;
    case T_LIST:
    case T_TUPLE: {
        jlist *l = v.u.l;
        if (!l->n) { sb_adds(r, b, "[]"); break; }
        sb_addc(r, b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) sb_add(r, b, o->item_sep.p, o->item_sep.n);
            if (o->indent_s) json_nl(r, b, o, level + 1);
            to_json(r, b, l->v[i], o, level + 1);
        }
        if (o->indent_s) json_nl(r, b, o, level);
        sb_addc(r, b, ']');
        break;
    }
    case T_DICT: {
        jdict *d = v.u.d;
        if (!d->n) { sb_adds(r, b, "{}"); break; }
        size_t *ord = ar_alloc(r, d->n * sizeof(size_t));
        for (size_t i = 0; i < d->n; i++) ord[i] = i;
        if (o->sort_keys) {
            /* insertion sort on key strings keeps this simple and stable */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = ord[i], j = i;
                while (j > 0 && cmp_keys(r, &d->k[ord[j - 1]], &d->k[x]) > 0) { ord[j] = ord[j - 1]; j--; }
                ord[j] = x;
            }
        }
        sb_addc(r, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            jv k = d->k[ord[i]];
            if (i) sb_add(r, b, o->item_sep.p, o->item_sep.n);
            if (o->indent_s) json_nl(r, b, o, level + 1);
            if (k.t == T_STR) json_str(r, b, k.u.s);
            else if (k.t == T_INT || k.t == T_FLOAT || k.t == T_BOOL || k.t == T_NONE) {
                sb_addc(r, b, '"'); to_json(r, b, k, o, level + 1); sb_addc(r, b, '"');
            } else jfail(r, SEER_EINVAL, "type error: keys must be str, int, float, bool or None, not %s", type_name(k));
            sb_add(r, b, o->key_sep.p, o->key_sep.n);
            to_json(r, b, d->v[ord[i]], o, level + 1);
        }
        if (o->indent_s) json_nl(r, b, o, level);
        sb_addc(r, b, '}');
        break;
    }
    default:
        jfail(r, SEER_EINVAL, "type error: Object of type %s is not JSON serializable", type_name(v));
    }
    r->depth--;
}

/* ======================================================================================== */
/* Truthiness, equality, ordering                                                            */
/* ======================================================================================== */

static int truthy(jv v) {
    switch (v.t) {
    case T_UNDEF: case T_NONE: return 0;
    case T_BOOL: return v.u.b;
    case T_INT: return v.u.i != 0;
    case T_FLOAT: return v.u.f != 0.0;
    case T_STR: return v.u.s.n != 0;
    case T_LIST: case T_TUPLE: return v.u.l->n != 0;
    case T_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(jv v) { return v.t == T_INT || v.t == T_FLOAT || v.t == T_BOOL; }
static double num_f(jv v) { return v.t == T_FLOAT ? v.u.f : v.t == T_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t num_i(jv v) { return v.t == T_INT ? v.u.i : v.u.b; }

static int v_eq(R *r, jv a, jv b) {
    charge(r, COST_CMP);
    if (is_num(a) && is_num(b)) {
        if (a.t != T_FLOAT && b.t != T_FLOAT) return num_i(a) == num_i(b);
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case T_UNDEF: case T_NONE: return 1;
    case T_STR:
        if (a.u.s.n != b.u.s.n) return 0;
        charge(r, a.u.s.n);
        return memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case T_LIST: case T_TUPLE:
        if (a.u.l->n != b.u.l->n) return 0;
        if (++r->depth > r->lim.max_depth * 4) jfail(r, SEER_EINVAL, "limit: values nested too deeply to compare");
        for (size_t i = 0; i < a.u.l->n; i++) if (!v_eq(r, a.u.l->v[i], b.u.l->v[i])) { r->depth--; return 0; }
        r->depth--;
        return 1;
    case T_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        if (++r->depth > r->lim.max_depth * 4) jfail(r, SEER_EINVAL, "limit: values nested too deeply to compare");
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = dict_find(r, b.u.d, a.u.d->k[i]);
            if (!o || !v_eq(r, a.u.d->v[i], *o)) { r->depth--; return 0; }
        }
        r->depth--;
        return 1;
    case T_NS: return a.u.d == b.u.d;
    case T_FUNC: return a.u.fn == b.u.fn;
    case T_METHOD: return a.u.m == b.u.m;
    case T_MACRO: return a.u.mac == b.u.mac;
    case T_LOOP: return a.u.loop == b.u.loop;
    }
    return 0;
}

static int cmp_keys(R *r, const jv *a, const jv *b) {
    charge(r, COST_CMP);
    if (a->t == T_STR && b->t == T_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        charge(r, n);
        int c = memcmp(a->u.s.p, b->u.s.p, n);
        return c ? c : (a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n);
    }
    if (is_num(*a) && is_num(*b)) { double x = num_f(*a), y = num_f(*b); return x < y ? -1 : x > y; }
    return a->t - b->t;
}

/* Python ordering: numbers with numbers, strings with strings, sequences element-wise. */
static int v_cmp(R *r, jv a, jv b, const char *op) {
    charge(r, COST_CMP);
    if (is_num(a) && is_num(b)) {
        if (a.t != T_FLOAT && b.t != T_FLOAT) { int64_t x = num_i(a), y = num_i(b); return x < y ? -1 : x > y; }
        double x = num_f(a), y = num_f(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.t == T_STR && b.t == T_STR) return cmp_keys(r, &a, &b);
    if ((a.t == T_LIST && b.t == T_LIST) || (a.t == T_TUPLE && b.t == T_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (v_eq(r, a.u.l->v[i], b.u.l->v[i])) continue;
            if (++r->depth > r->lim.max_depth * 4) jfail(r, SEER_EINVAL, "limit: values nested too deeply to compare");
            int c = v_cmp(r, a.u.l->v[i], b.u.l->v[i], op);
            r->depth--;
            return c;
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.t == T_UNDEF) jfail(r, SEER_EINVAL, "undefined: %.*s", (int)a.u.s.n, a.u.s.p);
    if (b.t == T_UNDEF) jfail(r, SEER_EINVAL, "undefined: %.*s", (int)b.u.s.n, b.u.s.p);
    jfail(r, SEER_EINVAL, "type error: '%s' not supported between instances of '%s' and '%s'", op, type_name(a), type_name(b));
}

/* ======================================================================================== */
/* Lexer                                                                                     */
/* ======================================================================================== */

enum { TK_DATA, TK_VBEGIN, TK_VEND, TK_BBEGIN, TK_BEND, TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP, TK_EOF };

typedef struct tok { int t; size_t pos; jstr s; int64_t i; double f; } tok;

typedef struct lexer { R *r; const char *s; size_t n; tok *v; size_t nt, cap; } lexer;

static void line_col(R *r, size_t pos, size_t *line, size_t *col) {
    size_t l = 1, c = 1;
    for (size_t i = 0; i < pos && i < r->src_n; i++) {
        if (r->src[i] == '\n') { l++; c = 1; }
        else if (((unsigned char)r->src[i] & 0xC0) != 0x80) c++;
    }
    *line = l;
    *col = c;
}

static _Noreturn void syn_fail(R *r, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void syn_fail(R *r, size_t pos, const char *fmt, ...) {
    char m[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    size_t line, col;
    line_col(r, pos, &line, &col);
    jfail(r, SEER_EPARSE, "syntax error at line %zu, column %zu: %s", line, col, m);
}

static tok *lx_push(lexer *lx, int t, size_t pos) {
    if (lx->nt == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        tok *nv = ar_alloc(lx->r, cap * sizeof(tok));
        if (lx->nt) memcpy(nv, lx->v, lx->nt * sizeof(tok));
        lx->v = nv;
        lx->cap = cap;
    }
    tok *t0 = &lx->v[lx->nt++];
    memset(t0, 0, sizeof *t0);
    t0->t = t;
    t0->pos = pos;
    return t0;
}

static int ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Length of a run of Python white space (\s) starting at i. */
static size_t ws_run(const char *s, size_t n, size_t i) {
    size_t j = i;
    while (j < n) {
        uint32_t c;
        size_t l = u8_next(s, n, j, &c);
        if (!py_isspace(c)) break;
        j += l;
    }
    return j - i;
}

static void lx_data(lexer *lx, size_t pos, const char *p, size_t n) {
    if (!n) return;
    tok *t = lx_push(lx, TK_DATA, pos);
    t->s = (jstr){p, n};
}

/* Decodes a string literal body as Python's unicode-escape does after Jinja2's backslashreplace. */
static jstr lx_unescape(lexer *lx, const char *p, size_t n) {
    R *r = lx->r;
    sb *b = sb_new(r);
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c != '\\' || i + 1 >= n) { sb_addc(r, b, c); continue; }
        char e = p[++i];
        uint32_t cp = 0;
        int hex = 0;
        switch (e) {
        case '\n': break;
        case '\\': sb_addc(r, b, '\\'); break;
        case '\'': sb_addc(r, b, '\''); break;
        case '"': sb_addc(r, b, '"'); break;
        case 'a': sb_addc(r, b, '\a'); break;
        case 'b': sb_addc(r, b, '\b'); break;
        case 'f': sb_addc(r, b, '\f'); break;
        case 'n': sb_addc(r, b, '\n'); break;
        case 'r': sb_addc(r, b, '\r'); break;
        case 't': sb_addc(r, b, '\t'); break;
        case 'v': sb_addc(r, b, '\v'); break;
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                int k = 0;
                cp = 0;
                while (k < 3 && i < n && p[i] >= '0' && p[i] <= '7') { cp = cp * 8 + (uint32_t)(p[i] - '0'); i++; k++; }
                i--;
                goto emit;
            }
            sb_addc(r, b, '\\');
            sb_addc(r, b, e);
        }
        if (!hex) continue;
        cp = 0;
        for (int k = 0; k < hex; k++) {
            if (i + 1 >= n) jfail(r, SEER_EPARSE, "syntax error: truncated \\%c escape in a string", e);
            char h = p[++i];
            int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) jfail(r, SEER_EPARSE, "syntax error: bad \\%c escape in a string", e);
            cp = cp * 16 + (uint32_t)d;
        }
    emit:
        if (cp > 0x10FFFF) jfail(r, SEER_EPARSE, "syntax error: escape out of range in a string");
        {
            char u[4];
            size_t l;
            if (cp < 0x80) { u[0] = (char)cp; l = 1; }
            else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); l = 2; }
            else if (cp < 0x10000) { u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[2] = (char)(0x80 | (cp & 0x3F)); l = 3; }
            else { u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)); u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); l = 4; }
            sb_add(r, b, u, l);
        }
    }
    return sb_take(r, b);
}

static const char *const ops3[] = {NULL};
static const char *const ops2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};
static const char ops1[] = "+-*/%~[](){}<>=.:|,;";

/* Lexes the inside of {{ }} or {% %} from i; returns the position after the end marker. */
static size_t lx_tag(lexer *lx, size_t i, int block, size_t start, int *line_starting) {
    const char *s = lx->s;
    size_t n = lx->n;
    char stack[256];
    int depth = 0;
    (void)ops3;
    for (;;) {
        i += ws_run(s, n, i);
        if (i >= n) syn_fail(lx->r, start, "unexpected end of template, expected '%s'", block ? "%}" : "}}");
        if (depth == 0) {
            const char *endm = block ? "%}" : "}}";
            if (block && s[i] == '+' && i + 2 < n + 0 && i + 2 <= n - 1 + 1 && !strncmp(s + i + 1, endm, 2)) {
                lx_push(lx, TK_BEND, i);
                *line_starting = 0;
                return i + 3;
            }
            if (s[i] == '-' && i + 3 <= n && !strncmp(s + i + 1, endm, 2)) {
                lx_push(lx, block ? TK_BEND : TK_VEND, i);
                size_t j = i + 3, w = ws_run(s, n, j);
                *line_starting = w > 0 ? s[j + w - 1] == '\n' : 0;
                return j + w;
            }
            if (i + 2 <= n && !strncmp(s + i, endm, 2)) {
                lx_push(lx, block ? TK_BEND : TK_VEND, i);
                size_t j = i + 2;
                *line_starting = 0;
                if (block && j < n && s[j] == '\n') { j++; *line_starting = 1; }
                return j;
            }
        }
        char c = s[i];
        if ((c >= '0' && c <= '9')) {
            size_t j = i;
            while (j < n && ((s[j] >= '0' && s[j] <= '9') || (s[j] == '_' && j + 1 < n && s[j + 1] >= '0' && s[j + 1] <= '9'))) j++;
            int isf = 0;
            if (j + 1 < n && s[j] == '.' && s[j + 1] >= '0' && s[j + 1] <= '9') {
                isf = 1;
                j++;
                while (j < n && ((s[j] >= '0' && s[j] <= '9') || (s[j] == '_' && j + 1 < n && s[j + 1] >= '0' && s[j + 1] <= '9'))) j++;
            }
            if (j < n && (s[j] == 'e' || s[j] == 'E')) {
                size_t k = j + 1;
                if (k < n && (s[k] == '+' || s[k] == '-')) k++;
                if (k < n && s[k] >= '0' && s[k] <= '9') {
                    isf = 1;
                    j = k;
                    while (j < n && s[j] >= '0' && s[j] <= '9') j++;
                }
            }
            char buf[128];
            size_t bl = 0;
            for (size_t k = i; k < j && bl < sizeof buf - 1; k++) if (s[k] != '_') buf[bl++] = s[k];
            buf[bl] = 0;
            tok *t = lx_push(lx, isf ? TK_FLOAT : TK_INT, i);
            if (isf) t->f = strtod(buf, NULL);
            else {
                errno = 0;
                unsigned long long u = strtoull(buf, NULL, 10);
                if (errno || u > INT64_MAX) syn_fail(lx->r, i, "integer literal too large");
                t->i = (int64_t)u;
            }
            i = j;
            continue;
        }
        if (c == '_' || is_ascii_alpha(c)) {
            size_t j = i;
            while (j < n && (s[j] == '_' || is_ascii_alpha(s[j]) || (s[j] >= '0' && s[j] <= '9'))) j++;
            tok *t = lx_push(lx, TK_NAME, i);
            t->s = (jstr){s + i, j - i};
            i = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c) { if (s[j] == '\\') j++; j++; }
            if (j >= n) syn_fail(lx->r, i, "unterminated string literal");
            tok *t = lx_push(lx, TK_STR, i);
            t->s = lx_unescape(lx, s + i + 1, j - i - 1);
            i = j + 1;
            continue;
        }
        int matched = 0;
        for (int k = 0; ops2[k]; k++)
            if (i + 2 <= n && !strncmp(s + i, ops2[k], 2)) {
                tok *t = lx_push(lx, TK_OP, i);
                t->s = (jstr){ops2[k], 2};
                i += 2;
                matched = 1;
                break;
            }
        if (matched) continue;
        const char *o = strchr(ops1, c);
        if (c && o) {
            if (c == '(' || c == '[' || c == '{') {
                if (depth >= (int)sizeof stack) syn_fail(lx->r, i, "brackets nested too deeply");
                stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            } else if (c == ')' || c == ']' || c == '}') {
                if (depth == 0) syn_fail(lx->r, i, "unexpected '%c'", c);
                if (stack[depth - 1] != c) syn_fail(lx->r, i, "unexpected '%c', expected '%c'", c, stack[depth - 1]);
                depth--;
            }
            tok *t = lx_push(lx, TK_OP, i);
            t->s = (jstr){o, 1};
            i++;
            continue;
        }
        if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f) syn_fail(lx->r, i, "unexpected char '%c'", c);
        syn_fail(lx->r, i, "unexpected byte 0x%02x", (unsigned char)c);
    }
}

/* Is text[a..b) non-empty and all white space? */
static int all_ws(const char *s, size_t a, size_t b) {
    if (a >= b) return 0;
    return ws_run(s, b, a) == b - a;
}

static void lex(lexer *lx) {
    const char *s = lx->s;
    size_t n = lx->n, pos = 0;
    int line_starting = 1;
    while (pos < n) {
        /* the earliest of {{ {% {# */
        size_t k = pos;
        int kind = 0;
        while (k + 1 < n) {
            if (s[k] == '{' && (s[k + 1] == '{' || s[k + 1] == '%' || s[k + 1] == '#')) { kind = s[k + 1]; break; }
            k++;
        }
        if (!kind) { lx_data(lx, pos, s + pos, n - pos); break; }
        char sign = (k + 2 < n && (s[k + 2] == '-' || s[k + 2] == '+')) ? s[k + 2] : 0;
        size_t tend = k; /* end of the text before the tag */
        /* {% raw %} ... {% endraw %} */
        int is_raw = 0;
        size_t raw_body = 0;
        if (kind == '%') {
            size_t j = k + 2 + (sign ? 1 : 0);
            j += ws_run(s, n, j);
            if (j + 3 <= n && !strncmp(s + j, "raw", 3)) {
                size_t q = j + 3;
                q += ws_run(s, n, q);
                if (q + 3 <= n && s[q] == '-' && !strncmp(s + q + 1, "%}", 2)) { is_raw = 1; raw_body = q + 3; raw_body += ws_run(s, n, raw_body); }
                else if (q + 2 <= n && !strncmp(s + q, "%}", 2)) { is_raw = 1; raw_body = q + 2; }
            }
        }
        if (sign == '-') {
            while (tend > pos) {
                size_t st = tend - 1;
                while (st > pos && ((unsigned char)s[st] & 0xC0) == 0x80 && tend - st < 4) st--;
                uint32_t c;
                size_t l = u8_next(s, n, st, &c);
                if (st + l != tend) { st = tend - 1; c = (unsigned char)s[st]; }
                if (!py_isspace(c)) break;
                tend = st;
            }
        } else if (sign != '+' && kind != '{') {
            size_t lpos = pos;
            for (size_t q = k; q > pos; q--) if (s[q - 1] == '\n') { lpos = q; break; }
            if ((lpos > pos || line_starting) && all_ws(s, lpos, k)) tend = lpos;
        }
        lx_data(lx, pos, s + pos, tend - pos);
        if (is_raw) {
            /* find {%[-+]? endraw [-+]?%} */
            size_t q = raw_body;
            for (;;) {
                if (q + 1 >= n) syn_fail(lx->r, k, "missing end of raw directive");
                if (s[q] == '{' && s[q + 1] == '%') {
                    size_t j = q + 2;
                    char sg = (j < n && (s[j] == '-' || s[j] == '+')) ? s[j] : 0;
                    if (sg) j++;
                    j += ws_run(s, n, j);
                    if (j + 6 <= n && !strncmp(s + j, "endraw", 6)) {
                        size_t e = j + 6;
                        e += ws_run(s, n, e);
                        size_t body_end = q;
                        if (sg == '-') { while (body_end > raw_body && ascii_space(s[body_end - 1])) body_end--; }
                        else if (sg != '+') {
                            size_t lpos = raw_body;
                            for (size_t z = q; z > raw_body; z--) if (s[z - 1] == '\n') { lpos = z; break; }
                            if (lpos > raw_body && all_ws(s, lpos, q)) body_end = lpos;
                        }
                        size_t after = 0;
                        if (e + 3 <= n && s[e] == '+' && !strncmp(s + e + 1, "%}", 2)) { after = e + 3; line_starting = 0; }
                        else if (e + 3 <= n && s[e] == '-' && !strncmp(s + e + 1, "%}", 2)) { after = e + 3; size_t w = ws_run(s, n, after); line_starting = w ? s[after + w - 1] == '\n' : 0; after += w; }
                        else if (e + 2 <= n && !strncmp(s + e, "%}", 2)) { after = e + 2; line_starting = 0; if (after < n && s[after] == '\n') { after++; line_starting = 1; } }
                        if (after) {
                            lx_data(lx, raw_body, s + raw_body, body_end - raw_body);
                            pos = after;
                            break;
                        }
                    }
                }
                q++;
            }
            continue;
        }
        size_t i = k + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            /* lazily to the first #} */
            size_t q = i;
            for (;;) {
                if (q + 1 >= n + 0 && !(q + 1 < n)) syn_fail(lx->r, k, "missing end of comment tag");
                if (s[q] == '+' && q + 2 < n && s[q + 1] == '#' && s[q + 2] == '}') { pos = q + 3; line_starting = 0; break; }
                if (s[q] == '-' && q + 2 < n && s[q + 1] == '#' && s[q + 2] == '}') {
                    size_t j = q + 3, w = ws_run(s, n, j);
                    line_starting = w ? s[j + w - 1] == '\n' : 0;
                    pos = j + w;
                    break;
                }
                if (s[q] == '#' && s[q + 1] == '}') {
                    pos = q + 2;
                    line_starting = 0;
                    if (pos < n && s[pos] == '\n') { pos++; line_starting = 1; }
                    break;
                }
                q++;
            }
            continue;
        }
        lx_push(lx, kind == '{' ? TK_VBEGIN : TK_BBEGIN, k);
        pos = lx_tag(lx, i, kind == '%', k, &line_starting);
    }
    lx_push(lx, TK_EOF, n);
}

/* ======================================================================================== */
/* AST and parser                                                                            */
/* ======================================================================================== */

enum {
    N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_BREAK, N_CONTINUE, N_MACRO, N_FILTERBLOCK, N_WITH, N_BODY,
    N_LIT, N_NAME, N_LISTLIT, N_TUPLELIT, N_DICTLIT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_BIN, N_NOT, N_NEG, N_POS, N_AND, N_OR, N_COND, N_CMP,
};

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_CAT,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

struct node {
    int k;
    size_t pos;
    node *a, *b, *c, *d;
    node **v; int nv;   /* items, positional args, body */
    node **w; int nw;   /* dict values, keyword arg values, else body */
    jstr *names; int nn; /* keyword names, targets, parameters */
    jstr name;
    jv lit;
    int *ops;
    int flag;
};

typedef struct nvec { node **v; int n, cap; } nvec;
typedef struct svec { jstr *v; int n, cap; } svec;

typedef struct P { R *r; tok *t; size_t i; size_t depth; } P;

static void nv_push(R *r, nvec *v, node *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        node **nn = ar_alloc(r, (size_t)cap * sizeof(node *));
        if (v->n) memcpy(nn, v->v, (size_t)v->n * sizeof(node *));
        v->v = nn;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}
static void sv_push(R *r, svec *v, jstr x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        jstr *nn = ar_alloc(r, (size_t)cap * sizeof(jstr));
        if (v->n) memcpy(nn, v->v, (size_t)v->n * sizeof(jstr));
        v->v = nn;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static node *mk(P *p, int k, size_t pos) {
    node *x = ar_calloc(p->r, sizeof *x);
    x->k = k;
    x->pos = pos;
    return x;
}

static tok *cur(P *p) { return &p->t[p->i]; }
static int is_op(P *p, const char *op) { tok *t = cur(p); return t->t == TK_OP && str_eq(t->s, op); }
static int is_name(P *p, const char *nm) { tok *t = cur(p); return t->t == TK_NAME && str_eq(t->s, nm); }
static int skip_op(P *p, const char *op) { if (is_op(p, op)) { p->i++; return 1; } return 0; }
static int skip_name(P *p, const char *nm) { if (is_name(p, nm)) { p->i++; return 1; } return 0; }

static const char *tok_desc(tok *t, char *buf, size_t cap) {
    switch (t->t) {
    case TK_EOF: return "end of template";
    case TK_VEND: return "end of print statement";
    case TK_BEND: return "end of statement block";
    case TK_VBEGIN: return "'{{'";
    case TK_BBEGIN: return "'{%'";
    case TK_DATA: return "template data";
    case TK_STR: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p); return buf;
    }
}

static _Noreturn void p_unexpected(P *p, const char *expected) {
    char buf[64];
    if (expected) syn_fail(p->r, cur(p)->pos, "expected %s, got %s", expected, tok_desc(cur(p), buf, sizeof buf));
    syn_fail(p->r, cur(p)->pos, "unexpected %s", tok_desc(cur(p), buf, sizeof buf));
}

static void expect_op(P *p, const char *op) {
    if (!skip_op(p, op)) { char e[16]; snprintf(e, sizeof e, "'%s'", op); p_unexpected(p, e); }
}
static jstr expect_nametok(P *p) {
    if (cur(p)->t != TK_NAME) p_unexpected(p, "a name");
    return p->t[p->i++].s;
}

static void enter(P *p) {
    if (++p->depth > p->r->lim.max_depth) syn_fail(p->r, cur(p)->pos, "expression or block nested deeper than %zu levels", p->r->lim.max_depth);
}

static node *parse_expr(P *p, int with_cond);
static node *parse_unary(P *p, int with_filter);
static node *parse_tuple(P *p, int with_cond, int explicit_parens);

static node **vec_done(nvec *v) { return v->v; }

/* Arguments of a call, filter or test: positional, then name=value. */
static void parse_args(P *p, node *x) {
    nvec pos = {0}, kwv = {0};
    svec kwn = {0};
    expect_op(p, "(");
    while (!is_op(p, ")")) {
        if (pos.n + kwv.n) expect_op(p, ",");
        if (is_op(p, ")")) break;
        if (cur(p)->t == TK_NAME && p->t[p->i + 1].t == TK_OP && str_eq(p->t[p->i + 1].s, "=")) {
            sv_push(p->r, &kwn, cur(p)->s);
            p->i += 2;
            nv_push(p->r, &kwv, parse_expr(p, 1));
        } else {
            if (is_op(p, "*")) syn_fail(p->r, cur(p)->pos, "*args and **kwargs are not supported");
            if (kwv.n) syn_fail(p->r, cur(p)->pos, "positional argument after keyword argument");
            nv_push(p->r, &pos, parse_expr(p, 1));
        }
    }
    p->i++;
    x->v = vec_done(&pos); x->nv = pos.n;
    x->w = vec_done(&kwv); x->nw = kwv.n;
    x->names = kwn.v; x->nn = kwn.n;
}

static node *parse_primary(P *p) {
    tok *t = cur(p);
    node *x;
    enter(p);
    if (t->t == TK_NAME) {
        p->i++;
        x = mk(p, N_LIT, t->pos);
        if (str_eq(t->s, "true") || str_eq(t->s, "True")) x->lit = v_bool(1);
        else if (str_eq(t->s, "false") || str_eq(t->s, "False")) x->lit = v_bool(0);
        else if (str_eq(t->s, "none") || str_eq(t->s, "None")) x->lit = v_none();
        else { x->k = N_NAME; x->name = t->s; }
    } else if (t->t == TK_STR) {
        /* adjacent literals concatenate, as in Python */
        sb *b = sb_new(p->r);
        size_t pos = t->pos;
        while (cur(p)->t == TK_STR) { sb_add(p->r, b, cur(p)->s.p, cur(p)->s.n); p->i++; }
        x = mk(p, N_LIT, pos);
        x->lit = v_str(sb_take(p->r, b));
    } else if (t->t == TK_INT) {
        p->i++;
        x = mk(p, N_LIT, t->pos);
        x->lit = v_int(t->i);
    } else if (t->t == TK_FLOAT) {
        p->i++;
        x = mk(p, N_LIT, t->pos);
        x->lit = v_float(t->f);
    } else if (is_op(p, "(")) {
        p->i++;
        x = parse_tuple(p, 1, 1);
        expect_op(p, ")");
    } else if (is_op(p, "[")) {
        p->i++;
        x = mk(p, N_LISTLIT, t->pos);
        nvec items = {0};
        while (!is_op(p, "]")) {
            if (items.n) expect_op(p, ",");
            if (is_op(p, "]")) break;
            nv_push(p->r, &items, parse_expr(p, 1));
        }
        p->i++;
        x->v = items.v; x->nv = items.n;
    } else if (is_op(p, "{")) {
        p->i++;
        x = mk(p, N_DICTLIT, t->pos);
        nvec ks = {0}, vs = {0};
        while (!is_op(p, "}")) {
            if (ks.n) expect_op(p, ",");
            if (is_op(p, "}")) break;
            nv_push(p->r, &ks, parse_expr(p, 1));
            expect_op(p, ":");
            nv_push(p->r, &vs, parse_expr(p, 1));
        }
        p->i++;
        x->v = ks.v; x->nv = ks.n; x->w = vs.v; x->nw = vs.n;
    } else {
        p_unexpected(p, NULL);
    }
    p->depth--;
    return x;
}

static node *parse_subscript_arg(P *p) {
    /* expr | [start]:[stop][:[step]] */
    size_t pos = cur(p)->pos;
    node *args[3] = {NULL, NULL, NULL};
    if (!is_op(p, ":")) {
        args[0] = parse_expr(p, 1);
        if (!is_op(p, ":")) return args[0];
    }
    p->i++;
    if (!is_op(p, "]") && !is_op(p, ",") && !is_op(p, ":")) args[1] = parse_expr(p, 1);
    if (skip_op(p, ":")) {
        if (!is_op(p, "]") && !is_op(p, ",")) args[2] = parse_expr(p, 1);
    }
    node *s = mk(p, N_SLICE, pos);
    s->b = args[0]; s->c = args[1]; s->d = args[2];
    return s;
}

static node *parse_postfix(P *p, node *x) {
    for (;;) {
        tok *t = cur(p);
        if (is_op(p, ".")) {
            p->i++;
            node *y = mk(p, N_ATTR, t->pos);
            y->a = x;
            if (cur(p)->t == TK_NAME) { y->name = cur(p)->s; p->i++; }
            else if (cur(p)->t == TK_INT) { y->k = N_ITEM; y->b = mk(p, N_LIT, cur(p)->pos); y->b->lit = v_int(cur(p)->i); p->i++; }
            else p_unexpected(p, "an attribute name");
            x = y;
        } else if (is_op(p, "[")) {
            p->i++;
            nvec parts = {0};
            while (!is_op(p, "]")) {
                if (parts.n) expect_op(p, ",");
                if (is_op(p, "]")) break;
                nv_push(p->r, &parts, parse_subscript_arg(p));
            }
            p->i++;
            if (parts.n == 0) syn_fail(p->r, t->pos, "expected a subscript");
            node *idx;
            if (parts.n == 1) idx = parts.v[0];
            else {
                /* x[1, :] is a tuple holding a slice in Python, which no sequence or dict takes */
                for (int k = 0; k < parts.n; k++)
                    if (parts.v[k]->k == N_SLICE) syn_fail(p->r, t->pos, "a slice inside a subscript of several parts (x[a, b:c]) is not supported");
                idx = mk(p, N_TUPLELIT, t->pos);
                idx->v = parts.v;
                idx->nv = parts.n;
            }
            if (idx->k == N_SLICE) { idx->a = x; x = idx; }
            else { node *y = mk(p, N_ITEM, t->pos); y->a = x; y->b = idx; x = y; }
        } else if (is_op(p, "(")) {
            node *y = mk(p, N_CALL, t->pos);
            y->a = x;
            parse_args(p, y);
            x = y;
        } else break;
    }
    return x;
}

static node *parse_filter_expr(P *p, node *x) {
    for (;;) {
        tok *t = cur(p);
        if (is_op(p, "|")) {
            p->i++;
            node *f = mk(p, N_FILTER, t->pos);
            f->a = x;
            f->name = expect_nametok(p);
            while (is_op(p, ".")) {   /* dotted filter names: keep the last part */
                p->i++;
                f->name = expect_nametok(p);
            }
            if (is_op(p, "(")) parse_args(p, f);
            x = f;
        } else if (is_name(p, "is")) {
            p->i++;
            node *f = mk(p, N_TEST, t->pos);
            int neg = skip_name(p, "not");
            f->a = x;
            f->name = expect_nametok(p);
            while (is_op(p, ".")) { p->i++; f->name = expect_nametok(p); }
            tok *c = cur(p);
            if (is_op(p, "(")) parse_args(p, f);
            else if ((c->t == TK_NAME || c->t == TK_STR || c->t == TK_INT || c->t == TK_FLOAT || is_op(p, "[") || is_op(p, "{")) &&
                     !(c->t == TK_NAME && (str_eq(c->s, "else") || str_eq(c->s, "or") || str_eq(c->s, "and")))) {
                if (c->t == TK_NAME && str_eq(c->s, "is")) syn_fail(p->r, c->pos, "You cannot chain multiple tests with is");
                node *arg = parse_primary(p);
                arg = parse_postfix(p, arg);
                nvec a = {0};
                nv_push(p->r, &a, arg);
                f->v = a.v; f->nv = 1;
            }
            if (neg) { node *nn = mk(p, N_NOT, t->pos); nn->a = f; x = nn; }
            else x = f;
        } else if (is_op(p, "(")) {
            node *y = mk(p, N_CALL, t->pos);
            y->a = x;
            parse_args(p, y);
            x = y;
        } else break;
    }
    return x;
}

static node *parse_unary(P *p, int with_filter) {
    tok *t = cur(p);
    node *x;
    enter(p);
    if (is_op(p, "-")) { p->i++; x = mk(p, N_NEG, t->pos); x->a = parse_unary(p, 0); }
    else if (is_op(p, "+")) { p->i++; x = mk(p, N_POS, t->pos); x->a = parse_unary(p, 0); }
    else x = parse_primary(p);
    x = parse_postfix(p, x);
    if (with_filter) x = parse_filter_expr(p, x);
    p->depth--;
    return x;
}

static node *bin(P *p, int op, node *a, node *b, size_t pos) {
    node *x = mk(p, N_BIN, pos);
    x->flag = op; x->a = a; x->b = b;
    return x;
}

static node *parse_pow(P *p) {
    node *x = parse_unary(p, 1);
    while (is_op(p, "**")) { size_t pos = cur(p)->pos; p->i++; x = bin(p, OP_POW, x, parse_unary(p, 1), pos); }
    return x;
}
static node *parse_math2(P *p) {
    node *x = parse_pow(p);
    for (;;) {
        size_t pos = cur(p)->pos;
        int op = is_op(p, "*") ? OP_MUL : is_op(p, "/") ? OP_DIV : is_op(p, "//") ? OP_FDIV : is_op(p, "%") ? OP_MOD : -1;
        if (op < 0) break;
        p->i++;
        x = bin(p, op, x, parse_pow(p), pos);
    }
    return x;
}
static node *parse_concat(P *p) {
    node *x = parse_math2(p);
    while (is_op(p, "~")) { size_t pos = cur(p)->pos; p->i++; x = bin(p, OP_CAT, x, parse_math2(p), pos); }
    return x;
}
static node *parse_math1(P *p) {
    node *x = parse_concat(p);
    for (;;) {
        size_t pos = cur(p)->pos;
        int op = is_op(p, "+") ? OP_ADD : is_op(p, "-") ? OP_SUB : -1;
        if (op < 0) break;
        p->i++;
        x = bin(p, op, x, parse_concat(p), pos);
    }
    return x;
}
static node *parse_compare(P *p) {
    size_t pos = cur(p)->pos;
    node *x = parse_math1(p);
    nvec rhs = {0};
    int ops[64];
    int nops = 0;
    for (;;) {
        int op = -1;
        if (is_op(p, "==")) op = OP_EQ;
        else if (is_op(p, "!=")) op = OP_NE;
        else if (is_op(p, "<")) op = OP_LT;
        else if (is_op(p, "<=")) op = OP_LE;
        else if (is_op(p, ">")) op = OP_GT;
        else if (is_op(p, ">=")) op = OP_GE;
        else if (is_name(p, "in")) op = OP_IN;
        else if (is_name(p, "not") && p->t[p->i + 1].t == TK_NAME && str_eq(p->t[p->i + 1].s, "in")) { op = OP_NOTIN; p->i++; }
        if (op < 0) break;
        if (nops >= 64) syn_fail(p->r, cur(p)->pos, "too many chained comparisons");
        p->i++;
        ops[nops++] = op;
        nv_push(p->r, &rhs, parse_math1(p));
    }
    if (!nops) return x;
    node *c = mk(p, N_CMP, pos);
    c->a = x;
    c->v = rhs.v; c->nv = rhs.n;
    c->ops = ar_alloc(p->r, (size_t)nops * sizeof(int));
    memcpy(c->ops, ops, (size_t)nops * sizeof(int));
    return c;
}
static node *parse_not(P *p) {
    if (is_name(p, "not")) {
        size_t pos = cur(p)->pos;
        p->i++;
        enter(p);
        node *x = mk(p, N_NOT, pos);
        x->a = parse_not(p);
        p->depth--;
        return x;
    }
    return parse_compare(p);
}
static node *parse_and(P *p) {
    node *x = parse_not(p);
    while (is_name(p, "and")) { node *y = mk(p, N_AND, cur(p)->pos); p->i++; y->a = x; y->b = parse_not(p); x = y; }
    return x;
}
static node *parse_or(P *p) {
    node *x = parse_and(p);
    while (is_name(p, "or")) { node *y = mk(p, N_OR, cur(p)->pos); p->i++; y->a = x; y->b = parse_and(p); x = y; }
    return x;
}
static node *parse_expr(P *p, int with_cond) {
    enter(p);
    node *x = parse_or(p);
    while (with_cond && is_name(p, "if")) {
        node *c = mk(p, N_COND, cur(p)->pos);
        p->i++;
        c->a = parse_or(p);
        c->b = x;
        if (skip_name(p, "else")) c->c = parse_expr(p, 1);
        x = c;
    }
    p->depth--;
    return x;
}

/* A comma-separated list of expressions: a tuple unless it is one expression without a comma. */
static node *parse_tuple(P *p, int with_cond, int explicit_parens) {
    size_t pos = cur(p)->pos;
    nvec items = {0};
    int comma = 0;
    for (;;) {
        if (items.n) { if (!skip_op(p, ",")) break; comma = 1; }
        tok *t = cur(p);
        if (t->t == TK_VEND || t->t == TK_BEND || t->t == TK_EOF || is_op(p, ")") || is_op(p, "]") || is_op(p, "}") || is_op(p, "=") ||
            (t->t == TK_NAME && (str_eq(t->s, "if") || str_eq(t->s, "recursive")) && items.n)) {
            if (!items.n && !explicit_parens) p_unexpected(p, "an expression");
            break;
        }
        nv_push(p->r, &items, parse_expr(p, with_cond));
    }
    if (items.n == 1 && !comma) return items.v[0];
    if (!items.n && !explicit_parens) p_unexpected(p, "an expression");
    node *x = mk(p, N_TUPLELIT, pos);
    x->v = items.v; x->nv = items.n;
    return x;
}

/* ---- statements ---- */

static node *parse_body(P *p, const char *const *ends, int *which);

static void expect_bend(P *p) {
    if (cur(p)->t != TK_BEND) p_unexpected(p, "end of statement block");
    p->i++;
}

/* for/set targets: name, or names separated by commas, optionally in parentheses */
static void parse_targets(P *p, svec *out) {
    int paren = skip_op(p, "(");
    do {
        sv_push(p->r, out, expect_nametok(p));
    } while (skip_op(p, ","));
    if (paren) expect_op(p, ")");
}

static node *parse_stmt(P *p) {
    tok *kw = cur(p);
    size_t pos = p->t[p->i - 1].pos;
    if (kw->t != TK_NAME) p_unexpected(p, "a tag name");
    enter(p);
    node *x = NULL;
    jstr k = kw->s;
    p->i++;
    if (str_eq(k, "if")) {
        x = mk(p, N_IF, pos);
        node *cur_if = x;
        for (;;) {
            cur_if->a = parse_tuple(p, 0, 0);
            expect_bend(p);
            static const char *const ends[] = {"elif", "else", "endif", NULL};
            int which;
            node *body = parse_body(p, ends, &which);
            cur_if->v = body->v; cur_if->nv = body->nv;
            if (which == 0) {
                node *nx = mk(p, N_IF, cur(p)->pos);
                nvec e = {0};
                nv_push(p->r, &e, nx);
                cur_if->w = e.v; cur_if->nw = 1;
                cur_if = nx;
                continue;
            }
            if (which == 1) {
                expect_bend(p);
                static const char *const ends2[] = {"endif", NULL};
                node *eb = parse_body(p, ends2, &which);
                cur_if->w = eb->v; cur_if->nw = eb->nv;
            }
            break;
        }
    } else if (str_eq(k, "for")) {
        x = mk(p, N_FOR, pos);
        svec t = {0};
        parse_targets(p, &t);
        x->names = t.v; x->nn = t.n;
        if (!skip_name(p, "in")) p_unexpected(p, "'in'");
        x->a = parse_tuple(p, 0, 0);
        if (skip_name(p, "if")) x->b = parse_expr(p, 1);
        if (is_name(p, "recursive")) syn_fail(p->r, cur(p)->pos, "recursive loops are not supported");
        expect_bend(p);
        static const char *const ends[] = {"else", "endfor", NULL};
        int which;
        node *body = parse_body(p, ends, &which);
        x->v = body->v; x->nv = body->nv;
        if (which == 0) {
            expect_bend(p);
            static const char *const ends2[] = {"endfor", NULL};
            node *eb = parse_body(p, ends2, &which);
            x->w = eb->v; x->nw = eb->nv;
        }
    } else if (str_eq(k, "set")) {
        svec t = {0};
        size_t tpos = cur(p)->pos;
        jstr first = expect_nametok(p);
        if (is_op(p, ".")) {
            /* ns.attr = value */
            p->i++;
            x = mk(p, N_SET, pos);
            x->name = first;
            sv_push(p->r, &t, expect_nametok(p));
            x->names = t.v; x->nn = 1;
            x->flag = 1;
            expect_op(p, "=");
            x->a = parse_tuple(p, 1, 0);
        } else {
            sv_push(p->r, &t, first);
            while (skip_op(p, ",")) sv_push(p->r, &t, expect_nametok(p));
            if (skip_op(p, "=")) {
                x = mk(p, N_SET, pos);
                x->names = t.v; x->nn = t.n;
                x->a = parse_tuple(p, 1, 0);
            } else {
                if (t.n != 1) syn_fail(p->r, tpos, "a block set takes one name");
                x = mk(p, N_SETBLOCK, pos);
                x->name = first;
                if (is_op(p, "|")) {
                    node *holder = mk(p, N_LIT, cur(p)->pos);
                    x->a = parse_filter_expr(p, holder);
                    x->b = holder;
                }
                expect_bend(p);
                static const char *const ends[] = {"endset", NULL};
                int which;
                node *body = parse_body(p, ends, &which);
                x->v = body->v; x->nv = body->nv;
            }
        }
    } else if (str_eq(k, "break") || str_eq(k, "continue")) {
        x = mk(p, str_eq(k, "break") ? N_BREAK : N_CONTINUE, pos);
    } else if (str_eq(k, "macro")) {
        x = mk(p, N_MACRO, pos);
        x->name = expect_nametok(p);
        svec params = {0};
        nvec defs = {0};
        expect_op(p, "(");
        while (!is_op(p, ")")) {
            if (params.n) expect_op(p, ",");
            if (is_op(p, ")")) break;
            sv_push(p->r, &params, expect_nametok(p));
            if (skip_op(p, "=")) nv_push(p->r, &defs, parse_expr(p, 1));
            else if (defs.n) syn_fail(p->r, cur(p)->pos, "non-default argument follows default argument");
            else nv_push(p->r, &defs, NULL);
        }
        p->i++;
        x->names = params.v; x->nn = params.n;
        x->w = defs.v; x->nw = defs.n;
        expect_bend(p);
        static const char *const ends[] = {"endmacro", NULL};
        int which;
        node *body = parse_body(p, ends, &which);
        x->v = body->v; x->nv = body->nv;
    } else if (str_eq(k, "filter")) {
        x = mk(p, N_FILTERBLOCK, pos);
        node *holder = mk(p, N_LIT, cur(p)->pos);
        /* the filter chain is parsed as if applied to a placeholder */
        tok fake = *cur(p);
        (void)fake;
        node *f = mk(p, N_FILTER, cur(p)->pos);
        f->a = holder;
        f->name = expect_nametok(p);
        if (is_op(p, "(")) parse_args(p, f);
        x->a = parse_filter_expr(p, f);
        x->b = holder;
        expect_bend(p);
        static const char *const ends[] = {"endfilter", NULL};
        int which;
        node *body = parse_body(p, ends, &which);
        x->v = body->v; x->nv = body->nv;
    } else if (str_eq(k, "with")) {
        x = mk(p, N_WITH, pos);
        svec names = {0};
        nvec vals = {0};
        while (cur(p)->t != TK_BEND) {
            if (names.n) expect_op(p, ",");
            sv_push(p->r, &names, expect_nametok(p));
            expect_op(p, "=");
            nv_push(p->r, &vals, parse_expr(p, 1));
        }
        x->names = names.v; x->nn = names.n;
        x->w = vals.v; x->nw = vals.n;
        expect_bend(p);
        static const char *const ends[] = {"endwith", NULL};
        int which;
        node *body = parse_body(p, ends, &which);
        x->v = body->v; x->nv = body->nv;
    } else if (str_eq(k, "generation")) {
        /* transformers' AssistantTracker tag: renders its body unchanged */
        x = mk(p, N_WITH, pos);
        expect_bend(p);
        static const char *const ends[] = {"endgeneration", NULL};
        int which;
        node *body = parse_body(p, ends, &which);
        x->v = body->v; x->nv = body->nv;
    } else {
        syn_fail(p->r, kw->pos, "unknown or unexpected tag '%.*s'", (int)(k.n > 40 ? 40 : k.n), k.p);
    }
    if (x->k != N_IF && x->k != N_FOR && x->k != N_SETBLOCK && x->k != N_MACRO && x->k != N_FILTERBLOCK && x->k != N_WITH)
        expect_bend(p);
    p->depth--;
    return x;
}

/* Parses template data, prints and statements until one of the end tags (which is then
 * consumed up to its name; *which is its index) or the end of the template (ends NULL). */
static node *parse_body(P *p, const char *const *ends, int *which) {
    nvec body = {0};
    size_t start = cur(p)->pos;
    for (;;) {
        tok *t = cur(p);
        if (t->t == TK_EOF) {
            if (ends) {
                char list[128] = "";
                for (int k = 0; ends[k]; k++) { strncat(list, k ? " or '" : "'", sizeof list - strlen(list) - 1); strncat(list, ends[k], sizeof list - strlen(list) - 1); strncat(list, "'", sizeof list - strlen(list) - 1); }
                syn_fail(p->r, start, "unexpected end of template: the block opened here needs %s", list);
            }
            break;
        }
        if (t->t == TK_DATA) {
            node *x = mk(p, N_TEXT, t->pos);
            x->name = t->s;
            nv_push(p->r, &body, x);
            p->i++;
        } else if (t->t == TK_VBEGIN) {
            p->i++;
            node *x = mk(p, N_OUT, t->pos);
            x->a = parse_tuple(p, 1, 0);
            if (cur(p)->t != TK_VEND) p_unexpected(p, "end of print statement");
            p->i++;
            nv_push(p->r, &body, x);
        } else if (t->t == TK_BBEGIN) {
            p->i++;
            tok *kw = cur(p);
            if (kw->t == TK_NAME && ends) {
                int hit = -1;
                for (int k = 0; ends[k]; k++) if (str_eq(kw->s, ends[k])) { hit = k; break; }
                if (hit >= 0) {
                    p->i++;
                    /* end tags may repeat the name: {% endmacro name %} is not supported, plain only */
                    if (strncmp(ends[hit], "end", 3) == 0) expect_bend(p);
                    *which = hit;
                    break;
                }
            }
            if (kw->t == TK_NAME && ((kw->s.n > 3 && !memcmp(kw->s.p, "end", 3)) || str_eq(kw->s, "else") || str_eq(kw->s, "elif")))
                syn_fail(p->r, kw->pos, "unexpected tag '%.*s'", (int)(kw->s.n > 40 ? 40 : kw->s.n), kw->s.p);
            nv_push(p->r, &body, parse_stmt(p));
        } else {
            p_unexpected(p, NULL);
        }
    }
    node *b = mk(p, N_BODY, start);
    b->v = body.v; b->nv = body.n;
    return b;
}

/* ======================================================================================== */
/* Evaluation                                                                                */
/* ======================================================================================== */

static jv eval(R *r, scope *sc, node *x);
enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };
static int exec_body(R *r, scope *sc, node **v, int n);

static _Noreturn void undef_fail(R *r, jv u) {
    jfail(r, SEER_EINVAL, "undefined: %.*s", (int)u.u.s.n, u.u.s.p);
}

static const char *hintf(R *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *hintf(R *r, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return ar_str(r, buf, strlen(buf)).p;
}

static scope *scope_new(R *r, scope *parent) {
    scope *s = ar_calloc(r, sizeof *s);
    s->parent = parent;
    return s;
}

static jv lookup(R *r, scope *sc, jstr name) {
    for (scope *s = sc; s; s = s->parent) {
        jv *v = dict_finds(r, &s->vars, name.p, name.n);
        if (v) return *v;
    }
    for (int i = 0; i < (int)(sizeof func_names / sizeof func_names[0]); i++)
        if (str_eq(name, func_names[i])) { jv v = {.t = T_FUNC}; v.u.fn = i; return v; }
    return v_undef(hintf(r, "'%.*s' is undefined", (int)(name.n > 100 ? 100 : name.n), name.p));
}

static void assign(R *r, scope *sc, jstr name, jv v) { dict_set(r, &sc->vars, v_str(name), v); }

/* ---- iteration ---- */

static jlist *chars_of(R *r, jstr s) {
    jlist *l = list_new(r, 0);
    for (size_t i = 0; i < s.n;) {
        charge(r, COST_CHAR);
        size_t len = u8_next(s.p, s.n, i, NULL);
        list_push(r, l, v_str((jstr){s.p + i, len}));
        i += len;
    }
    return l;
}

static jlist *iter_list(R *r, jv v) {
    switch (v.t) {
    case T_UNDEF: return list_new(r, 0);
    case T_LIST: case T_TUPLE: return v.u.l;
    case T_DICT: {
        jlist *l = list_new(r, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) list_push(r, l, v.u.d->k[i]);
        return l;
    }
    case T_STR: return chars_of(r, v.u.s);
    default: jfail(r, SEER_EINVAL, "type error: '%s' object is not iterable", type_name(v));
    }
}

static void tick(R *r) {
    charge(r, COST_NODE);
    if (++r->iters > r->lim.max_iters) jfail(r, SEER_EINVAL, "limit: more than %zu loop iterations", r->lim.max_iters);
}

/* ---- subscripts ---- */

static int64_t norm_index(int64_t i, size_t n) { return i < 0 ? i + (int64_t)n : i; }

static jv get_item(R *r, jv obj, jv key) {
    switch (obj.t) {
    case T_UNDEF: undef_fail(r, obj);
    case T_DICT: case T_NS: {
        jv *v = dict_find(r, obj.u.d, key);
        if (v) return *v;
        if (key.t == T_STR) return v_undef(hintf(r, "'dict object' has no attribute '%.*s'", (int)(key.u.s.n > 100 ? 100 : key.u.s.n), key.u.s.p));
        return v_undef(hintf(r, "'dict object' has no item of that key"));
    }
    case T_LIST: case T_TUPLE:
        if (key.t == T_INT || key.t == T_BOOL) {
            int64_t i = norm_index(num_i(key), obj.u.l->n);
            if (i >= 0 && (size_t)i < obj.u.l->n) return obj.u.l->v[i];
            return v_undef(hintf(r, "%s object has no element %" PRId64, type_name(obj), num_i(key)));
        }
        return v_undef(hintf(r, "'%s object' has no attribute '%.*s'", type_name(obj), key.t == T_STR ? (int)(key.u.s.n > 100 ? 100 : key.u.s.n) : 1, key.t == T_STR ? key.u.s.p : "?"));
    case T_STR:
        if (key.t == T_INT || key.t == T_BOOL) {
            /* walks to the code point (the length only for a negative index, and cached) */
            jstr s = obj.u.s;
            int64_t i = num_i(key);
            if (i < 0) i = norm_index(i, str_len(r, s));
            if (i >= 0 && (size_t)i < s.n) {
                size_t at = 0;
                for (int64_t k = 0; at < s.n && k < i; k++) { charge(r, COST_CHAR); at += u8_next(s.p, s.n, at, NULL); }
                if (at < s.n) return v_str((jstr){s.p + at, u8_next(s.p, s.n, at, NULL)});
            }
            return v_undef(hintf(r, "str object has no element %" PRId64, num_i(key)));
        }
        return v_undef(hintf(r, "'str object' has no attribute"));
    default:
        return v_undef(hintf(r, "'%s object' has no item", type_name(obj)));
    }
}

static const char *const str_methods[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower",
                                          "replace", "title", "capitalize", "join", "find", "count", "splitlines", "isdigit", "isalpha",
                                          "isspace", "isupper", "islower", NULL};
static const char *const dict_methods[] = {"get", "items", "keys", "values", NULL};

static int in_names(jstr s, const char *const *names) {
    for (int i = 0; names[i]; i++) if (str_eq(s, names[i])) return 1;
    return 0;
}

static jv mk_method(R *r, jv self, jstr name) {
    jmeth *m = ar_alloc(r, sizeof *m);
    m->self = self;
    m->name = ar_str(r, name.p, name.n).p;
    jv v = {.t = T_METHOD};
    v.u.m = m;
    return v;
}

static jv loop_attr(R *r, jloop *lp, jstr name) {
    size_t n = lp->items->n, i = lp->i;
    if (str_eq(name, "index")) return v_int((int64_t)i + 1);
    if (str_eq(name, "index0")) return v_int((int64_t)i);
    if (str_eq(name, "revindex")) return v_int((int64_t)(n - i));
    if (str_eq(name, "revindex0")) return v_int((int64_t)(n - i - 1));
    if (str_eq(name, "first")) return v_bool(i == 0);
    if (str_eq(name, "last")) return v_bool(i + 1 == n);
    if (str_eq(name, "length")) return v_int((int64_t)n);
    if (str_eq(name, "depth")) return v_int(lp->depth);
    if (str_eq(name, "depth0")) return v_int(lp->depth - 1);
    if (str_eq(name, "previtem")) return i > 0 ? lp->items->v[i - 1] : v_undef("there is no previous item");
    if (str_eq(name, "nextitem")) return i + 1 < n ? lp->items->v[i + 1] : v_undef("there is no next item");
    if (str_eq(name, "cycle")) { jv self = {.t = T_LOOP}; self.u.loop = lp; return mk_method(r, self, name); }
    return v_undef(hintf(r, "'LoopContext object' has no attribute '%.*s'", (int)(name.n > 100 ? 100 : name.n), name.p));
}

/* obj.name: Python attribute first (methods), then item, as Jinja2's getattr does. */
static jv get_attr(R *r, jv obj, jstr name) {
    switch (obj.t) {
    case T_UNDEF: undef_fail(r, obj);
    case T_DICT:
        if (in_names(name, dict_methods)) return mk_method(r, obj, name);
        return get_item(r, obj, v_str(name));
    case T_NS: return get_item(r, obj, v_str(name));
    case T_STR:
        if (in_names(name, str_methods)) return mk_method(r, obj, name);
        break;
    case T_LOOP: return loop_attr(r, obj.u.loop, name);
    default: break;
    }
    return v_undef(hintf(r, "'%s object' has no attribute '%.*s'", type_name(obj), (int)(name.n > 100 ? 100 : name.n), name.p));
}

/* obj[key]: item first, then (for string keys) attribute. */
static jv subscript(R *r, jv obj, jv key) {
    if (obj.t == T_UNDEF) undef_fail(r, obj);
    jv v = get_item(r, obj, key);
    if (v.t == T_UNDEF && key.t == T_STR) {
        jv a = get_attr(r, obj, key.u.s);
        if (a.t != T_UNDEF) return a;
    }
    return v;
}

static void slice_bounds(R *r, jv start, jv stop, jv step, size_t n, int64_t *a, int64_t *b, int64_t *st) {
    int64_t s = 1;
    if (step.t != T_NONE && step.t != T_UNDEF) {
        if (step.t != T_INT && step.t != T_BOOL) jfail(r, SEER_EINVAL, "type error: slice indices must be integers or None");
        s = num_i(step);
        if (s == 0) jfail(r, SEER_EINVAL, "value error: slice step cannot be zero");
    }
    int64_t len = (int64_t)n;
    int64_t lo, hi;
    if (s > 0) { lo = 0; hi = len; } else { lo = -1; hi = len - 1; }
    int64_t x, y;
    if (start.t == T_NONE || start.t == T_UNDEF) x = s > 0 ? lo : hi;
    else {
        if (start.t != T_INT && start.t != T_BOOL) jfail(r, SEER_EINVAL, "type error: slice indices must be integers or None");
        x = num_i(start);
        if (x < 0) { x += len; if (x < lo) x = lo; } else if (x > hi) x = hi;
    }
    if (stop.t == T_NONE || stop.t == T_UNDEF) y = s > 0 ? hi : lo;
    else {
        if (stop.t != T_INT && stop.t != T_BOOL) jfail(r, SEER_EINVAL, "type error: slice indices must be integers or None");
        y = num_i(stop);
        if (y < 0) { y += len; if (y < lo) y = lo; } else if (y > hi) y = hi;
    }
    *a = x; *b = y; *st = s;
}

static jv do_slice(R *r, jv obj, jv start, jv stop, jv step) {
    if (obj.t == T_UNDEF) undef_fail(r, obj);
    jlist *src;
    if (obj.t == T_LIST || obj.t == T_TUPLE) src = obj.u.l;
    else if (obj.t == T_STR) src = chars_of(r, obj.u.s);
    else jfail(r, SEER_EINVAL, "type error: '%s' object is not subscriptable", type_name(obj));
    int64_t a, b, s;
    slice_bounds(r, start, stop, step, src->n, &a, &b, &s);
    charge(r, COST_NODE);
    jlist *l = list_new(r, 0);
    if (s > 0) for (int64_t i = a; i < b; i += s) list_push(r, l, src->v[i]);
    else for (int64_t i = a; i > b; i += s) list_push(r, l, src->v[i]);
    if (obj.t == T_STR) {
        sb *bd = sb_new(r);
        for (size_t i = 0; i < l->n; i++) sb_add(r, bd, l->v[i].u.s.p, l->v[i].u.s.n);
        return v_str(sb_take(r, bd));
    }
    return obj.t == T_TUPLE ? v_tuple(l) : v_list(l);
}

/* ---- arithmetic ---- */

static jv arith(R *r, int op, jv a, jv b) {
    if (op == OP_CAT) {
        sb *bd = sb_new(r);
        jstr x = str_of(r, a), y = str_of(r, b);
        sb_add(r, bd, x.p, x.n);
        sb_add(r, bd, y.p, y.n);
        return v_str(sb_take(r, bd));
    }
    if (a.t == T_UNDEF) undef_fail(r, a);
    if (b.t == T_UNDEF) undef_fail(r, b);
    static const char *const opn[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (is_num(a) && is_num(b)) {
        int ints = a.t != T_FLOAT && b.t != T_FLOAT;
        int64_t x = ints ? num_i(a) : 0, y = ints ? num_i(b) : 0, z;
        double fx = num_f(a), fy = num_f(b);
        switch (op) {
        case OP_ADD: if (ints) { if (__builtin_add_overflow(x, y, &z)) goto ovf; return v_int(z); } return v_float(fx + fy);
        case OP_SUB: if (ints) { if (__builtin_sub_overflow(x, y, &z)) goto ovf; return v_int(z); } return v_float(fx - fy);
        case OP_MUL: if (ints) { if (__builtin_mul_overflow(x, y, &z)) goto ovf; return v_int(z); } return v_float(fx * fy);
        case OP_DIV: if (fy == 0) jfail(r, SEER_EINVAL, "zero division error: division by zero"); return v_float(fx / fy);
        case OP_FDIV:
            if (ints) {
                if (y == 0) jfail(r, SEER_EINVAL, "zero division error: integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) goto ovf;
                z = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) z--;
                return v_int(z);
            }
            if (fy == 0) jfail(r, SEER_EINVAL, "zero division error: float floor division by zero");
            return v_float(floor(fx / fy));
        case OP_MOD:
            if (ints) {
                if (y == 0) jfail(r, SEER_EINVAL, "zero division error: integer division or modulo by zero");
                if (y == -1) return v_int(0);
                z = x % y;
                if (z != 0 && ((z < 0) != (y < 0))) z += y;
                return v_int(z);
            } else {
                if (fy == 0) jfail(r, SEER_EINVAL, "zero division error: float modulo");
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
                return v_float(m);
            }
        case OP_POW:
            if (ints && y >= 0) {
                int64_t res = 1, base = x;
                int64_t e = y;
                while (e) {
                    if (e & 1) { if (__builtin_mul_overflow(res, base, &res)) goto ovf; }
                    e >>= 1;
                    if (e && __builtin_mul_overflow(base, base, &base)) goto ovf;
                }
                return v_int(res);
            }
            if (fx == 0 && fy < 0) jfail(r, SEER_EINVAL, "zero division error: 0.0 cannot be raised to a negative power");
            return v_float(pow(fx, fy));
        }
    }
    if (op == OP_ADD && a.t == T_STR && b.t == T_STR) {
        sb *bd = sb_new(r);
        sb_add(r, bd, a.u.s.p, a.u.s.n);
        sb_add(r, bd, b.u.s.p, b.u.s.n);
        return v_str(sb_take(r, bd));
    }
    if (op == OP_ADD && (a.t == T_LIST || a.t == T_TUPLE) && a.t == b.t) {
        jlist *l = list_new(r, a.u.l->n + b.u.l->n);
        for (size_t i = 0; i < a.u.l->n; i++) list_push(r, l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) list_push(r, l, b.u.l->v[i]);
        return a.t == T_TUPLE ? v_tuple(l) : v_list(l);
    }
    if (op == OP_MUL && ((a.t == T_INT || a.t == T_BOOL) != (b.t == T_INT || b.t == T_BOOL))) {
        jv seq = (a.t == T_INT || a.t == T_BOOL) ? b : a;
        int64_t cnt = num_i((a.t == T_INT || a.t == T_BOOL) ? a : b);
        /* an empty sequence times anything is empty: no loop of cnt empty steps */
        if (seq.t == T_STR && !seq.u.s.n) return seq;
        if ((seq.t == T_LIST || seq.t == T_TUPLE) && !seq.u.l->n) return seq.t == T_TUPLE ? v_tuple(list_new(r, 0)) : v_list(list_new(r, 0));
        if (seq.t == T_STR) {
            if (cnt <= 0) return v_cstr("");
            size_t total;
            if (__builtin_mul_overflow(seq.u.s.n, (uint64_t)cnt, &total) || total > r->lim.max_output)
                jfail(r, SEER_EINVAL, "limit: output longer than %zu bytes", r->lim.max_output);
            charge(r, total);
            char *p = ar_alloc(r, total + 1);
            memcpy(p, seq.u.s.p, seq.u.s.n);
            for (size_t done = seq.u.s.n; done < total;) {   /* doubling copies */
                size_t k = done < total - done ? done : total - done;
                memcpy(p + done, p, k);
                done += k;
            }
            p[total] = 0;
            return v_str((jstr){p, total});
        }
        if (seq.t == T_LIST || seq.t == T_TUPLE) {
            jlist *l = list_new(r, 0);
            for (int64_t i = 0; i < cnt; i++) {
                if (seq.u.l->n) tick(r);
                for (size_t j = 0; j < seq.u.l->n; j++) list_push(r, l, seq.u.l->v[j]);
            }
            return seq.t == T_TUPLE ? v_tuple(l) : v_list(l);
        }
    }
    if (op == OP_MOD && a.t == T_STR) jfail(r, SEER_EINVAL, "type error: printf-style string formatting ('%%' on a string) is not supported");
    if (op == OP_ADD && a.t == T_STR) jfail(r, SEER_EINVAL, "type error: can only concatenate str (not \"%s\") to str", type_name(b));
    jfail(r, SEER_EINVAL, "type error: unsupported operand type(s) for %s: '%s' and '%s'", opn[op], type_name(a), type_name(b));
ovf:
    jfail(r, SEER_EINVAL, "limit: integer overflow in '%s'", opn[op]);
}

static int contains(R *r, jv hay, jv needle) {
    switch (hay.t) {
    case T_STR:
        if (needle.t != T_STR) jfail(r, SEER_EINVAL, "type error: 'in <string>' requires string as left operand, not %s", type_name(needle));
        if (!needle.u.s.n) return 1;
        charge(r, hay.u.s.n + needle.u.s.n);
        return memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
    case T_LIST: case T_TUPLE:
        for (size_t i = 0; i < hay.u.l->n; i++) if (v_eq(r, hay.u.l->v[i], needle)) return 1;
        return 0;
    case T_DICT: case T_NS: return dict_find(r, hay.u.d, needle) != NULL;
    case T_UNDEF: return 0;
    default: jfail(r, SEER_EINVAL, "type error: argument of type '%s' is not iterable", type_name(hay));
    }
}

/* ---- calls ---- */

typedef struct jargs { jv *pos; int np; jstr *kn; jv *kv; int nk; } jargs;

static void eval_args(R *r, scope *sc, node *x, jargs *a) {
    a->np = x->nv;
    a->nk = x->nw;
    a->pos = x->nv ? ar_alloc(r, (size_t)x->nv * sizeof(jv)) : NULL;
    a->kv = x->nw ? ar_alloc(r, (size_t)x->nw * sizeof(jv)) : NULL;
    a->kn = x->names;
    for (int i = 0; i < x->nv; i++) a->pos[i] = eval(r, sc, x->v[i]);
    for (int i = 0; i < x->nw; i++) a->kv[i] = eval(r, sc, x->w[i]);
}

/* Argument idx (positional) or name (keyword); 1 if given. */
static int arg(jargs *a, int idx, const char *name, jv *out) {
    if (idx >= 0 && idx < a->np) { *out = a->pos[idx]; return 1; }
    for (int i = 0; i < a->nk; i++) if (name && str_eq(a->kn[i], name)) { *out = a->kv[i]; return 1; }
    return 0;
}

static jv arg_or(jargs *a, int idx, const char *name, jv dflt) {
    jv v;
    return arg(a, idx, name, &v) ? v : dflt;
}

static jstr need_str(R *r, jv v, const char *what) {
    if (v.t == T_UNDEF) undef_fail(r, v);
    if (v.t != T_STR) jfail(r, SEER_EINVAL, "type error: %s expects a string, got %s", what, type_name(v));
    return v.u.s;
}

static int64_t need_int(R *r, jv v, const char *what) {
    if (v.t == T_UNDEF) undef_fail(r, v);
    if (v.t != T_INT && v.t != T_BOOL) jfail(r, SEER_EINVAL, "type error: %s expects an integer, got %s", what, type_name(v));
    return num_i(v);
}

static jv str_replace(R *r, jstr s, jstr old, jstr new_, int64_t count) {
    charge(r, s.n + old.n);
    sb *b = sb_new(r);
    size_t i = 0;
    int64_t done = 0;
    if (!old.n) {
        /* Python inserts new between every character (and at both ends) */
        for (size_t k = 0; k <= s.n;) {
            if (count < 0 || done < count) { sb_add(r, b, new_.p, new_.n); done++; }
            if (k == s.n) break;
            size_t l = u8_next(s.p, s.n, k, NULL);
            sb_add(r, b, s.p + k, l);
            k += l;
        }
        return v_str(sb_take(r, b));
    }
    while (i < s.n) {
        const char *h = (count < 0 || done < count) ? memmem(s.p + i, s.n - i, old.p, old.n) : NULL;
        if (!h) { sb_add(r, b, s.p + i, s.n - i); break; }
        charge(r, COST_NODE + old.n);
        sb_add(r, b, s.p + i, (size_t)(h - (s.p + i)));
        sb_add(r, b, new_.p, new_.n);
        i = (size_t)(h - s.p) + old.n;
        done++;
    }
    return v_str(sb_take(r, b));
}

static jv str_case(R *r, jstr s, int mode) {
    /* mode 0 upper, 1 lower, 2 capitalize, 3 Python str.title, 4 Jinja title filter */
    charge(r, s.n);
    char *p = ar_alloc(r, s.n + 1);
    int prev_cased = 0, word_start = 1;
    for (size_t i = 0; i < s.n; i++) {
        char c = s.p[i];
        switch (mode) {
        case 0: if (is_ascii_lower(c)) c = (char)(c - 32); break;
        case 1: if (is_ascii_upper(c)) c = (char)(c + 32); break;
        case 2: if (i == 0) { if (is_ascii_lower(c)) c = (char)(c - 32); } else if (is_ascii_upper(c)) c = (char)(c + 32); break;
        case 3:
            if (is_ascii_alpha(c)) {
                if (!prev_cased) { if (is_ascii_lower(c)) c = (char)(c - 32); }
                else if (is_ascii_upper(c)) c = (char)(c + 32);
                prev_cased = 1;
            } else prev_cased = ((unsigned char)c >= 0x80) ? prev_cased : 0;
            break;
        case 4:
            if (c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || ascii_space(c)) { word_start = 1; break; }
            if (word_start) { if (is_ascii_lower(c)) c = (char)(c - 32); }
            else if (is_ascii_upper(c)) c = (char)(c + 32);
            word_start = 0;
            break;
        }
        p[i] = c;
    }
    p[s.n] = 0;
    return v_str((jstr){p, s.n});
}

static jv str_split(R *r, jstr s, jv sepv, int64_t maxsplit) {
    charge(r, s.n);
    jlist *l = list_new(r, 0);
    if (sepv.t == T_NONE || sepv.t == T_UNDEF) {
        charge(r, (COST_CHAR - 1) * s.n);   /* decoded one code point at a time */
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            while (i < s.n) { uint32_t c; size_t k = u8_next(s.p, s.n, i, &c); if (!py_isspace(c)) break; i += k; }
            if (i >= s.n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                jstr rest = py_strip(r, (jstr){s.p + i, s.n - i}, NULL, 2);
                list_push(r, l, v_str(rest));
                break;
            }
            size_t j = i;
            while (j < s.n) { uint32_t c; size_t k = u8_next(s.p, s.n, j, &c); if (py_isspace(c)) break; j += k; }
            list_push(r, l, v_str((jstr){s.p + i, j - i}));
            done++;
            i = j;
        }
        return v_list(l);
    }
    jstr sep = need_str(r, sepv, "split");
    if (!sep.n) jfail(r, SEER_EINVAL, "value error: empty separator");
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        const char *h = (maxsplit < 0 || done < maxsplit) ? memmem(s.p + i, s.n - i, sep.p, sep.n) : NULL;
        if (!h) { list_push(r, l, v_str((jstr){s.p + i, s.n - i})); break; }
        charge(r, COST_NODE + sep.n);
        list_push(r, l, v_str((jstr){s.p + i, (size_t)(h - s.p) - i}));
        i = (size_t)(h - s.p) + sep.n;
        done++;
    }
    return v_list(l);
}

static int str_starts(R *r, jstr s, jstr pre) { charge(r, 1 + pre.n); return s.n >= pre.n && memcmp(s.p, pre.p, pre.n) == 0; }
static int str_ends(R *r, jstr s, jstr suf) { charge(r, 1 + suf.n); return s.n >= suf.n && memcmp(s.p + s.n - suf.n, suf.p, suf.n) == 0; }

static jv join_list(R *r, jlist *l, jstr sep) {
    sb *b = sb_new(r);
    for (size_t i = 0; i < l->n; i++) {
        charge(r, 1);
        if (i) sb_add(r, b, sep.p, sep.n);
        jstr s = str_of(r, l->v[i]);
        sb_add(r, b, s.p, s.n);
    }
    return v_str(sb_take(r, b));
}

static jv call_method(R *r, jmeth *m, jargs *a) {
    jv self = m->self;
    jstr name = {m->name, strlen(m->name)};
    if (self.t == T_LOOP) {
        if (a->np == 0) jfail(r, SEER_EINVAL, "type error: no items for cycling given");
        return a->pos[self.u.loop->i % (size_t)a->np];
    }
    if (self.t == T_DICT) {
        jdict *d = self.u.d;
        if (str_eq(name, "get")) {
            jv k;
            if (!arg(a, 0, "key", &k)) jfail(r, SEER_EINVAL, "type error: get expected at least 1 argument");
            jv *v = dict_find(r, d, k);
            return v ? *v : arg_or(a, 1, "default", v_none());
        }
        jlist *l = list_new(r, d->n);
        for (size_t i = 0; i < d->n; i++) {
            if (str_eq(name, "keys")) list_push(r, l, d->k[i]);
            else if (str_eq(name, "values")) list_push(r, l, d->v[i]);
            else {
                jlist *pair = list_new(r, 2);
                list_push(r, pair, d->k[i]);
                list_push(r, pair, d->v[i]);
                list_push(r, l, v_tuple(pair));
            }
        }
        return v_list(l);
    }
    /* string methods */
    jstr s = self.u.s;
    if (str_eq(name, "strip") || str_eq(name, "lstrip") || str_eq(name, "rstrip")) {
        int which = name.p[0] == 'l' ? 1 : name.p[0] == 'r' ? 2 : 3;
        jv c = arg_or(a, 0, "chars", v_none());
        if (c.t == T_NONE) return v_str(py_strip(r, s, NULL, which));
        jstr cs = need_str(r, c, name.p);
        return v_str(py_strip(r, s, &cs, which));
    }
    if (str_eq(name, "split") || str_eq(name, "rsplit")) {
        jv mx = arg_or(a, 1, "maxsplit", v_int(-1));
        if (str_eq(name, "rsplit") && need_int(r, mx, "rsplit") >= 0) jfail(r, SEER_EINVAL, "type error: rsplit with maxsplit is not supported");
        return str_split(r, s, arg_or(a, 0, "sep", v_none()), need_int(r, mx, "split"));
    }
    if (str_eq(name, "startswith") || str_eq(name, "endswith")) {
        jv x;
        if (!arg(a, 0, NULL, &x)) jfail(r, SEER_EINVAL, "type error: %s takes a prefix", name.p);
        int ends = name.p[0] == 'e';
        if (x.t == T_TUPLE || x.t == T_LIST) {
            for (size_t i = 0; i < x.u.l->n; i++) {
                jstr pre = need_str(r, x.u.l->v[i], name.p);
                if (ends ? str_ends(r, s, pre) : str_starts(r, s, pre)) return v_bool(1);
            }
            return v_bool(0);
        }
        jstr pre = need_str(r, x, name.p);
        return v_bool(ends ? str_ends(r, s, pre) : str_starts(r, s, pre));
    }
    if (str_eq(name, "upper")) return str_case(r, s, 0);
    if (str_eq(name, "lower")) return str_case(r, s, 1);
    if (str_eq(name, "capitalize")) return str_case(r, s, 2);
    if (str_eq(name, "title")) return str_case(r, s, 3);
    if (str_eq(name, "replace")) {
        jv o, nw;
        if (!arg(a, 0, NULL, &o) || !arg(a, 1, NULL, &nw)) jfail(r, SEER_EINVAL, "type error: replace takes old and new");
        return str_replace(r, s, need_str(r, o, "replace"), need_str(r, nw, "replace"), need_int(r, arg_or(a, 2, "count", v_int(-1)), "replace"));
    }
    if (str_eq(name, "join")) {
        jv x;
        if (!arg(a, 0, NULL, &x)) jfail(r, SEER_EINVAL, "type error: join takes an iterable");
        jlist *l = iter_list(r, x);
        charge(r, l->n);
        for (size_t i = 0; i < l->n; i++) need_str(r, l->v[i], "join");
        return join_list(r, l, s);
    }
    if (str_eq(name, "find") || str_eq(name, "count")) {
        jv x;
        if (!arg(a, 0, NULL, &x)) jfail(r, SEER_EINVAL, "type error: %s takes a substring", name.p);
        jstr sub = need_str(r, x, name.p);
        charge(r, s.n + sub.n);
        if (name.p[0] == 'f') {
            const char *h = sub.n ? memmem(s.p, s.n, sub.p, sub.n) : s.p;
            if (!h) return v_int(-1);
            return v_int((int64_t)str_len(r, (jstr){s.p, (size_t)(h - s.p)}));
        }
        if (!sub.n) return v_int((int64_t)str_len(r, s) + 1);
        int64_t c = 0;
        for (size_t i = 0; i < s.n;) {
            const char *h = memmem(s.p + i, s.n - i, sub.p, sub.n);
            if (!h) break;
            charge(r, COST_NODE + sub.n);
            c++;
            i = (size_t)(h - s.p) + sub.n;
        }
        return v_int(c);
    }
    if (str_eq(name, "splitlines")) {
        charge(r, s.n);
        jlist *l = list_new(r, 0);
        size_t i = 0, st = 0;
        while (i < s.n) {
            if (s.p[i] == '\n' || s.p[i] == '\r') {
                list_push(r, l, v_str((jstr){s.p + st, i - st}));
                if (s.p[i] == '\r' && i + 1 < s.n && s.p[i + 1] == '\n') i++;
                st = ++i;
            } else i++;
        }
        if (st < s.n) list_push(r, l, v_str((jstr){s.p + st, s.n - st}));
        return v_list(l);
    }
    if (name.p[0] == 'i' && name.p[1] == 's') {
        int any = 0, ok = s.n > 0, has_cased = 0;
        int which = str_eq(name, "isdigit") ? 0 : str_eq(name, "isalpha") ? 1 : str_eq(name, "isspace") ? 2 :
                    str_eq(name, "isupper") ? 3 : str_eq(name, "islower") ? 4 : 5;
        charge(r, s.n);
        for (size_t i = 0; i < s.n; i++) {
            unsigned char c = (unsigned char)s.p[i];
            any = 1;
            if (which == 0) ok &= c >= '0' && c <= '9';
            else if (which == 1) ok &= is_ascii_alpha(c);
            else if (which == 2) ok &= ascii_space((char)c);
            else if (which == 3) { if (is_ascii_lower(c)) ok = 0; if (is_ascii_upper(c)) has_cased = 1; }
            else if (which == 4) { if (is_ascii_upper(c)) ok = 0; if (is_ascii_lower(c)) has_cased = 1; }
        }
        if (str_eq(name, "isupper") || str_eq(name, "islower")) ok = ok && has_cased;
        return v_bool(any && ok);
    }
    jfail(r, SEER_EINVAL, "type error: unsupported method '%s'", m->name);
}

static jv call_macro(R *r, node *mac, jargs *a);

static jv call_value(R *r, jv f, jargs *a) {
    switch (f.t) {
    case T_UNDEF: undef_fail(r, f);
    case T_METHOD: return call_method(r, f.u.m, a);
    case T_MACRO: return call_macro(r, f.u.mac, a);
    case T_FUNC:
        switch (f.u.fn) {
        case F_RAISE: {
            /* An empty message would end the error at "raise_exception: ", which tells the
             * reader nothing: it says that the template raised without one. */
            jv m;
            if (!arg(a, 0, "message", &m))
                jfail(r, SEER_EINVAL, "raise_exception: the template raised an error with no message "
                                      "(raise_exception() was called without one)");
            jstr s = str_of(r, m);
            if (!s.n) jfail(r, SEER_EINVAL, "raise_exception: the template raised an error with an empty message");
            jfail(r, SEER_EINVAL, "raise_exception: %.*s", (int)(s.n > 900 ? 900 : s.n), s.p);
        }
        case F_STRFTIME: {
            jv fmtv;
            if (!arg(a, 0, "format", &fmtv)) jfail(r, SEER_EINVAL, "type error: strftime_now takes a format");
            jstr fs = need_str(r, fmtv, "strftime_now");
            if (fs.n > 200) jfail(r, SEER_EINVAL, "limit: strftime_now format longer than 200 bytes");
            char fmt[256], buf[1024];
            memcpy(fmt, fs.p, fs.n);
            fmt[fs.n] = 0;
            time_t now = time(NULL);
            struct tm tmv;
            localtime_r(&now, &tmv);
            size_t n = fs.n ? strftime(buf, sizeof buf, fmt, &tmv) : 0;
            return v_str(ar_str(r, buf, n));
        }
        case F_NAMESPACE: case F_DICT: {
            jdict *d = ar_calloc(r, sizeof *d);
            if (a->np > 0) {
                jv init = a->pos[0];
                if (init.t == T_DICT) for (size_t i = 0; i < init.u.d->n; i++) dict_set(r, d, init.u.d->k[i], init.u.d->v[i]);
                else jfail(r, SEER_EINVAL, "type error: %s() takes a mapping and keyword arguments", func_names[f.u.fn]);
            }
            for (int i = 0; i < a->nk; i++) dict_set(r, d, v_str(a->kn[i]), a->kv[i]);
            jv v = {.t = f.u.fn == F_NAMESPACE ? T_NS : T_DICT};
            v.u.d = d;
            return v;
        }
        case F_RANGE: {
            int64_t st = 0, en, step = 1;
            if (a->np == 1) en = need_int(r, a->pos[0], "range");
            else if (a->np >= 2) {
                st = need_int(r, a->pos[0], "range");
                en = need_int(r, a->pos[1], "range");
                if (a->np >= 3) step = need_int(r, a->pos[2], "range");
            } else jfail(r, SEER_EINVAL, "type error: range expected at least 1 argument");
            if (step == 0) jfail(r, SEER_EINVAL, "value error: range() arg 3 must not be zero");
            jlist *l = list_new(r, 0);
            for (int64_t i = st; step > 0 ? i < en : i > en; i += step) {
                if (l->n >= 100000) jfail(r, SEER_EINVAL, "limit: range too big (more than 100000 items)");
                list_push(r, l, v_int(i));
                if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
            }
            return v_list(l);
        }
        }
        break;
    default: break;
    }
    jfail(r, SEER_EINVAL, "type error: '%s' object is not callable", type_name(f));
}

/* ---- tests ---- */

static int apply_test(R *r, jstr name, jv v, jargs *a) {
    jv x = {0};
    int has = arg(a, 0, NULL, &x);
#define IS(n) str_eq(name, n)
    if (IS("defined")) return v.t != T_UNDEF;
    if (IS("undefined")) return v.t == T_UNDEF;
    if (IS("none")) return v.t == T_NONE;
    if (IS("string")) return v.t == T_STR;
    if (IS("mapping")) return v.t == T_DICT;
    if (IS("iterable")) return v.t == T_STR || v.t == T_LIST || v.t == T_TUPLE || v.t == T_DICT || v.t == T_UNDEF;
    if (IS("sequence")) return v.t == T_STR || v.t == T_LIST || v.t == T_TUPLE || v.t == T_DICT || v.t == T_UNDEF;
    if (IS("number")) return v.t == T_INT || v.t == T_FLOAT || v.t == T_BOOL;
    if (IS("integer")) return v.t == T_INT;
    if (IS("float")) return v.t == T_FLOAT;
    if (IS("boolean")) return v.t == T_BOOL;
    if (IS("true")) return v.t == T_BOOL && v.u.b;
    if (IS("false")) return v.t == T_BOOL && !v.u.b;
    if (IS("callable")) return v.t == T_FUNC || v.t == T_METHOD || v.t == T_MACRO;
    if (IS("odd") || IS("even")) { int64_t i = need_int(r, v, "odd/even"); return IS("odd") ? (i % 2 != 0) : (i % 2 == 0); }
    if (IS("divisibleby")) { int64_t d = need_int(r, x, "divisibleby"); if (!d) jfail(r, SEER_EINVAL, "zero division error: divisibleby 0"); return need_int(r, v, "divisibleby") % d == 0; }
    if (IS("lower")) { jstr s = str_of(r, v); charge(r, s.n); for (size_t i = 0; i < s.n; i++) if (is_ascii_upper(s.p[i])) return 0; return 1; }
    if (IS("upper")) { jstr s = str_of(r, v); charge(r, s.n); for (size_t i = 0; i < s.n; i++) if (is_ascii_lower(s.p[i])) return 0; return 1; }
    if (!has && (IS("eq") || IS("equalto") || IS("ne") || IS("lt") || IS("le") || IS("gt") || IS("ge") || IS("in") || IS("sameas") ||
                 IS("==") || IS("!=") || IS("<") || IS(">") || IS("<=") || IS(">=") || IS("lessthan") || IS("greaterthan")))
        jfail(r, SEER_EINVAL, "type error: test '%.*s' needs an argument", (int)name.n, name.p);
    if (IS("eq") || IS("equalto") || IS("==")) return v_eq(r, v, x);
    if (IS("ne") || IS("!=")) return !v_eq(r, v, x);
    if (IS("sameas")) return v_eq(r, v, x) && v.t == x.t;
    if (IS("lt") || IS("lessthan") || IS("<")) return v_cmp(r, v, x, "<") < 0;
    if (IS("le") || IS("<=")) return v_cmp(r, v, x, "<=") <= 0;
    if (IS("gt") || IS("greaterthan") || IS(">")) return v_cmp(r, v, x, ">") > 0;
    if (IS("ge") || IS(">=")) return v_cmp(r, v, x, ">=") >= 0;
    if (IS("in")) return contains(r, x, v);
#undef IS
    jfail(r, SEER_EINVAL, "unknown test '%.*s'", (int)(name.n > 60 ? 60 : name.n), name.p);
}

/* ---- filters ---- */

static jv apply_filter(R *r, jstr name, jv v, jargs *a);

static jv attr_path(R *r, jv v, jstr path) {
    /* "a.b" or "0" style attribute paths as Jinja2's make_attrgetter does */
    charge(r, COST_NODE + path.n);
    size_t i = 0;
    while (i <= path.n) {
        size_t j = i;
        while (j < path.n && path.p[j] != '.') j++;
        jstr part = {path.p + i, j - i};
        int isnum = part.n > 0;
        int64_t idx = 0;
        for (size_t k = 0; k < part.n; k++) { if (part.p[k] < '0' || part.p[k] > '9') { isnum = 0; break; } idx = idx * 10 + (part.p[k] - '0'); if (idx > 1000000000) break; }
        if (v.t == T_UNDEF) return v;
        v = isnum ? subscript(r, v, v_int(idx)) : subscript(r, v, v_str(part));
        i = j + 1;
    }
    return v;
}

static jv select_like(R *r, jv v, jargs *a, int by_attr, int keep) {
    jlist *src = iter_list(r, v);
    jlist *out = list_new(r, 0);
    int base = by_attr ? 1 : 0;
    jstr attr = {0};
    if (by_attr) {
        jv at;
        if (!arg(a, 0, "attribute", &at)) jfail(r, SEER_EINVAL, "type error: selectattr/rejectattr need an attribute name");
        attr = need_str(r, at, "selectattr");
    }
    jv tname;
    int has_test = arg(a, base, NULL, &tname);
    jargs ta = {0};
    if (has_test && a->np > base + 1) { ta.pos = a->pos + base + 1; ta.np = a->np - base - 1; }
    for (size_t i = 0; i < src->n; i++) {
        tick(r);
        jv item = by_attr ? attr_path(r, src->v[i], attr) : src->v[i];
        int t = has_test ? apply_test(r, need_str(r, tname, "select test"), item, &ta) : truthy(item);
        if (t == keep) list_push(r, out, src->v[i]);
    }
    return v_list(out);
}

/* Python's float(str) grammar (after strip): [sign] (digits [. [digits]] | . digits) [e [sign] digits]
 * or inf / infinity / nan, any case, with single underscores between digits. strtod alone also
 * takes hex ("0x1A", "0x1p3") and "nan(...)", which Python refuses (so "0x1A"|int is 0, not 26).
 * Writes the value to *f and returns 1 when s is such a literal. */
static int py_float_lit(jstr s, double *f) {
    char buf[64];
    size_t n = 0, i = 0;
    if (!s.n || s.n >= sizeof buf) return 0;
    for (; i < s.n; i++) {
        char c = s.p[i];
        if (c == '_') {
            if (!i || i + 1 >= s.n || !isdigit((unsigned char)s.p[i - 1]) || !isdigit((unsigned char)s.p[i + 1])) return 0;
            continue;
        }
        if (c == 'x' || c == 'X' || c == 'p' || c == 'P' || c == '(' || c == 0) return 0;
        buf[n++] = c;
    }
    buf[n] = 0;
    char *end;
    double d = strtod(buf, &end);
    if (end == buf || *end) return 0;
    *f = d;
    return 1;
}

/* int(float) as Python does it: nan is a ValueError (the filter's default), infinity an
 * OverflowError and a finite value beyond 64 bits an integer this interpreter cannot hold:
 * errors, never a silent 0. */
static jv float_to_int(R *r, double f, jv dflt) {
    if (isnan(f)) return dflt;
    if (isinf(f)) jfail(r, SEER_EINVAL, "overflow error: cannot convert float infinity to integer");
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0))
        jfail(r, SEER_EINVAL, "limit: integer overflow in int (%g does not fit in 64 bits)", f);
    return v_int((int64_t)f);
}

/* Python's int(str, base) for base 2..36 (2, 8, 16 also take their 0b/0o/0x prefix): returns 1
 * and *out when s is such a literal, 0 when it is not; fails on a literal beyond 64 bits. */
static int py_int_lit(R *r, jstr s, int base, int64_t *out) {
    size_t i = 0;
    int neg = 0, digits = 0;
    if (i < s.n && (s.p[i] == '+' || s.p[i] == '-')) neg = s.p[i++] == '-';
    if (i + 1 < s.n && s.p[i] == '0') {
        char c = (char)tolower((unsigned char)s.p[i + 1]);
        if ((base == 16 && c == 'x') || (base == 8 && c == 'o') || (base == 2 && c == 'b')) {
            i += 2;
            if (i < s.n && s.p[i] == '_') i++;
        }
    }
    uint64_t acc = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < s.n; i++) {
        int c = (unsigned char)s.p[i], d;
        if (c == '_') {
            if (!digits || i + 1 >= s.n || s.p[i + 1] == '_') return 0;
            continue;
        }
        if (isdigit(c)) d = c - '0';
        else if (isalpha(c)) d = tolower(c) - 'a' + 10;
        else return 0;
        if (d >= base) return 0;
        if (acc > (lim - (uint64_t)d) / (uint64_t)base)
            jfail(r, SEER_EINVAL, "limit: integer overflow in int (the string's value does not fit in 64 bits)");
        acc = acc * (uint64_t)base + (uint64_t)d;
        digits++;
    }
    if (!digits) return 0;
    *out = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    return 1;
}

static jv to_int(R *r, jv v, jv dflt, int64_t base) {
    switch (v.t) {
    case T_INT: return v;
    case T_BOOL: return v_int(v.u.b);
    case T_FLOAT: return float_to_int(r, v.u.f, dflt);
    case T_STR: {
        if (base < 2 || base > 36) jfail(r, SEER_EINVAL, "value error: int() base must be >= 2 and <= 36");
        jstr s = py_strip(r, v.u.s, NULL, 3);
        int64_t i;
        double f;
        if (py_int_lit(r, s, (int)base, &i)) return v_int(i);
        if (py_float_lit(s, &f)) return float_to_int(r, f, dflt);
        return dflt;
    }
    default: (void)r; return dflt;
    }
}

static jv to_float(R *r, jv v, jv dflt) {
    switch (v.t) {
    case T_INT: case T_BOOL: return v_float(num_f(v));
    case T_FLOAT: return v;
    case T_STR: {
        jstr s = py_strip(r, v.u.s, NULL, 3);
        double f;
        return py_float_lit(s, &f) ? v_float(f) : dflt;
    }
    default: return dflt;
    }
}

/* Python's round(int, ndigits): an int, ties to even. */
static jv round_int(R *r, int64_t x, int64_t prec) {
    if (prec >= 0) return v_int(x);
    if (prec < -19) return v_int(0);
    __int128 p = 1;
    for (int64_t k = 0; k < -prec; k++) p *= 10;
    __int128 q = (__int128)x / p, rm = (__int128)x % p;
    if (rm < 0) { rm += p; q -= 1; }
    if (2 * rm > p || (2 * rm == p && (q & 1))) q += 1;
    __int128 res = q * p;
    if (res > INT64_MAX || res < INT64_MIN) jfail(r, SEER_EINVAL, "limit: integer overflow in round");
    return v_int((int64_t)res);
}

/* Jinja2's round(value, precision, 'floor' or 'ceil'): math.floor(value * 10**precision) /
 * 10**precision in Python, whose steps are followed exactly, errors included:
 * - an int with precision >= 0 is exact integer arithmetic there: float(value), whatever the
 *   precision;
 * - 10**precision is an int for precision >= 0: times a float it becomes the float nearest it
 *   (OverflowError past 308 digits), and the floor, an exact int, is divided by the exact int
 *   10**precision, rounded once: here the floor's exact decimal digits are shifted by precision
 *   places and read back with strtod, which rounds once too;
 * - for precision < 0 it is the float pow(10, precision) (0.0 past -323: ZeroDivisionError);
 * - the floor of an infinity or a nan is an error (OverflowError, ValueError).
 * Python's floor is an int, so a result of zero is 0.0, never -0.0. */
static jv round_floor_ceil(R *r, jv v, int64_t prec, int fl) {
    const char *how = fl ? "floor" : "ceil";
    if (v.t != T_FLOAT && prec >= 0) return v_float((double)(v.t == T_BOOL ? v.u.b : v.u.i));
    double f = num_f(v), m;
    char buf[400];
    if (prec >= 0) {
        if (prec > 308)
            jfail(r, SEER_EINVAL, "overflow error: int too large to convert to float (round(precision=%lld, method='%s') "
                                  "multiplies a float by 10**%lld; 308 is the largest precision a float allows)",
                  (long long)prec, how, (long long)prec);
        snprintf(buf, sizeof buf, "1e%d", (int)prec);
        m = strtod(buf, NULL);
    } else {
        m = prec < -400 ? 0.0 : pow(10.0, (double)prec);
    }
    double y = f * m;
    if (isnan(y)) jfail(r, SEER_EINVAL, "value error: cannot convert float NaN to integer (round(method='%s') of %g)", how, f);
    if (isinf(y))
        jfail(r, SEER_EINVAL, "overflow error: cannot convert float infinity to integer (round(precision=%lld, method='%s') "
                              "of %g: the value times 10**%lld is past the largest float)",
              (long long)prec, how, f, (long long)prec);
    double q = fl ? floor(y) : ceil(y);
    if (q == 0) q = 0.0; /* Python's int 0 */
    if (prec < 0) {
        if (m == 0)
            jfail(r, SEER_EINVAL, "zero division error: float division by zero (round(precision=%lld, method='%s'): "
                                  "10**%lld is 0.0 as a float)",
                  (long long)prec, how, (long long)prec);
        return v_float(q / m);
    }
    /* Up to 22 places 10**prec is a float exactly, and one IEEE division of two exact operands
     * rounds once, as Python's does. */
    if (q == 0 || prec <= 22) return v_float(q / m);
    int n = snprintf(buf, sizeof buf, "%.0fe-%d", q, (int)prec); /* q is an integer of at most 309 digits */
    charge(r, COST_FLOAT + COST_DIGIT * (size_t)(n > 0 ? n : 0));
    return v_float(strtod(buf, NULL));
}

static jv filter_tojson(R *r, jv v, jargs *a) {
    jsonopt o = {0};
    jv ind = arg_or(a, 0, "indent", v_none());
    char *spaces = NULL;
    if (ind.t == T_INT) {
        int64_t k = ind.u.i;
        if (k > 64) jfail(r, SEER_EINVAL, "limit: tojson indent above 64");
        if (k < 0) k = 0;
        spaces = ar_alloc(r, (size_t)k + 1);
        memset(spaces, ' ', (size_t)k);
        spaces[k] = 0;
        o.indent_s = spaces;
    } else if (ind.t == T_STR) {
        o.indent_s = ar_str(r, ind.u.s.p, ind.u.s.n).p;
    } else if (ind.t != T_NONE && ind.t != T_UNDEF) jfail(r, SEER_EINVAL, "type error: tojson indent must be an integer or a string");
    o.item_sep = o.indent_s ? (jstr){",", 1} : (jstr){", ", 2};
    o.key_sep = (jstr){": ", 2};
    jv seps = arg_or(a, -1, "separators", v_none());
    if (seps.t == T_LIST || seps.t == T_TUPLE) {
        if (seps.u.l->n != 2) jfail(r, SEER_EINVAL, "value error: separators must be a pair");
        o.item_sep = need_str(r, seps.u.l->v[0], "separators");
        o.key_sep = need_str(r, seps.u.l->v[1], "separators");
    }
    o.sort_keys = truthy(arg_or(a, -1, "sort_keys", v_bool(0)));
    sb *b = sb_new(r);
    to_json(r, b, v, &o, 0);
    return v_str(sb_take(r, b));
}

static jv apply_filter(R *r, jstr name, jv v, jargs *a) {
#define IS(n) str_eq(name, n)
    if (IS("default") || IS("d")) {
        jv dv = arg_or(a, 0, "default_value", v_cstr(""));
        int boolean = truthy(arg_or(a, 1, "boolean", v_bool(0)));
        if (v.t == T_UNDEF || (boolean && !truthy(v))) return dv;
        return v;
    }
    if (IS("safe") || (IS("string") && v.t == T_STR)) return v;
    if (IS("string")) return v_str(str_of(r, v));
    if (IS("trim")) {
        jv c = arg_or(a, 0, "chars", v_none());
        jstr s = str_of(r, v);
        if (c.t == T_NONE) return v_str(py_strip(r, s, NULL, 3));
        jstr cs = need_str(r, c, "trim");
        return v_str(py_strip(r, s, &cs, 3));
    }
    if (IS("length") || IS("count")) {
        switch (v.t) {
        case T_UNDEF: return v_int(0);
        case T_STR: return v_int((int64_t)str_len(r, v.u.s));
        case T_LIST: case T_TUPLE: return v_int((int64_t)v.u.l->n);
        case T_DICT: case T_NS: return v_int((int64_t)v.u.d->n);
        case T_LOOP: return v_int((int64_t)v.u.loop->items->n);
        default: jfail(r, SEER_EINVAL, "type error: object of type '%s' has no len()", type_name(v));
        }
    }
    if (IS("tojson")) return filter_tojson(r, v, a);
    if (IS("upper")) return str_case(r, str_of(r, v), 0);
    if (IS("lower")) return str_case(r, str_of(r, v), 1);
    if (IS("capitalize")) return str_case(r, str_of(r, v), 2);
    if (IS("title")) return str_case(r, str_of(r, v), 4);
    if (IS("replace")) {
        jv o, nw;
        if (!arg(a, 0, "old", &o) || !arg(a, 1, "new", &nw)) jfail(r, SEER_EINVAL, "type error: replace takes old and new");
        jv cnt = arg_or(a, 2, "count", v_none());
        return str_replace(r, str_of(r, v), str_of(r, o), str_of(r, nw), cnt.t == T_NONE ? -1 : need_int(r, cnt, "replace"));
    }
    if (IS("join")) {
        jstr sep = str_of(r, arg_or(a, 0, "d", v_cstr("")));
        jv at = arg_or(a, 1, "attribute", v_none());
        jlist *l = iter_list(r, v);
        if (at.t == T_STR) {
            jlist *m = list_new(r, l->n);
            for (size_t i = 0; i < l->n; i++) list_push(r, m, attr_path(r, l->v[i], at.u.s));
            l = m;
        }
        return join_list(r, l, sep);
    }
    if (IS("first") || IS("last")) {
        jlist *l = iter_list(r, v);
        if (!l->n) return v_undef(IS("first") ? "No first item, sequence was empty." : "No last item, sequence was empty.");
        return IS("first") ? l->v[0] : l->v[l->n - 1];
    }
    if (IS("list")) {
        jlist *src = iter_list(r, v), *l = list_new(r, src->n);
        for (size_t i = 0; i < src->n; i++) list_push(r, l, src->v[i]);
        return v_list(l);
    }
    if (IS("reverse")) {
        if (v.t == T_STR) {
            jlist *cs = chars_of(r, v.u.s);
            sb *b = sb_new(r);
            for (size_t i = cs->n; i-- > 0;) sb_add(r, b, cs->v[i].u.s.p, cs->v[i].u.s.n);
            return v_str(sb_take(r, b));
        }
        jlist *src = iter_list(r, v), *l = list_new(r, src->n);
        for (size_t i = src->n; i-- > 0;) list_push(r, l, src->v[i]);
        return v_list(l);
    }
    if (IS("int"))
        return to_int(r, v, arg_or(a, 0, "default", v_int(0)), need_int(r, arg_or(a, 1, "base", v_int(10)), "int"));
    if (IS("float")) return to_float(r, v, arg_or(a, 0, "default", v_float(0.0)));
    if (IS("abs")) {
        if (v.t == T_INT) { if (v.u.i == INT64_MIN) jfail(r, SEER_EINVAL, "limit: integer overflow in abs"); return v_int(v.u.i < 0 ? -v.u.i : v.u.i); }
        if (v.t == T_BOOL) return v_int(v.u.b);
        if (v.t == T_FLOAT) return v_float(fabs(v.u.f));
        jfail(r, SEER_EINVAL, "type error: bad operand type for abs(): '%s'", type_name(v));
    }
    if (IS("round")) {
        int64_t prec = need_int(r, arg_or(a, 0, "precision", v_int(0)), "round");
        jstr method = need_str(r, arg_or(a, 1, "method", v_cstr("common")), "round");
        if (!is_num(v)) jfail(r, SEER_EINVAL, "type error: round expects a number, got %s", type_name(v));
        int fl = str_eq(method, "floor");
        if (fl || str_eq(method, "ceil")) return round_floor_ceil(r, v, prec, fl);
        if (!str_eq(method, "common")) jfail(r, SEER_EINVAL, "value error: method must be common, floor or ceil");
        double f = num_f(v), m = pow(10.0, (double)prec);
        /* Python's round(): an int stays an int; a float past 323 digits is itself, before -308 a
         * signed zero; infinity and nan are themselves. */
        if (v.t != T_FLOAT) return round_int(r, v.t == T_BOOL ? v.u.b : v.u.i, prec);
        if (!isfinite(f) || prec > 323) return v_float(f);
        if (prec < -308) return v_float(0.0 * f);
        if (prec < 0) return v_float(nearbyint(f * m) / m);
        char buf[700];
        int n = snprintf(buf, sizeof buf, "%.*f", (int)prec, f);
        charge(r, COST_DIGIT * (size_t)(n > 0 ? n : 0));
        return v_float(strtod(buf, NULL));
    }
    if (IS("items")) {
        if (v.t == T_UNDEF) return v_list(list_new(r, 0));
        if (v.t != T_DICT) jfail(r, SEER_EINVAL, "type error: items expects a mapping, got %s", type_name(v));
        jmeth m = {v, "items"};
        jargs none = {0};
        return call_method(r, &m, &none);
    }
    if (IS("selectattr")) return select_like(r, v, a, 1, 1);
    if (IS("rejectattr")) return select_like(r, v, a, 1, 0);
    if (IS("select")) return select_like(r, v, a, 0, 1);
    if (IS("reject")) return select_like(r, v, a, 0, 0);
    if (IS("map")) {
        jlist *src = iter_list(r, v), *out = list_new(r, src->n);
        jv at;
        if (arg(a, -1, "attribute", &at)) {
            jstr path = need_str(r, at, "map");
            jv dflt;
            int has_d = arg(a, -1, "default", &dflt);
            for (size_t i = 0; i < src->n; i++) {
                tick(r);
                jv x = attr_path(r, src->v[i], path);
                list_push(r, out, (x.t == T_UNDEF && has_d) ? dflt : x);
            }
            return v_list(out);
        }
        jv fname;
        if (!arg(a, 0, NULL, &fname)) return v_list(out);
        jstr fn = need_str(r, fname, "map");
        jargs rest = {a->np > 1 ? a->pos + 1 : NULL, a->np > 1 ? a->np - 1 : 0, a->kn, a->kv, a->nk};
        for (size_t i = 0; i < src->n; i++) { tick(r); list_push(r, out, apply_filter(r, fn, src->v[i], &rest)); }
        return v_list(out);
    }
    if (IS("unique")) {
        jlist *src = iter_list(r, v), *out = list_new(r, 0);
        for (size_t i = 0; i < src->n; i++) {
            tick(r);
            int seen = 0;
            for (size_t j = 0; j < out->n && !seen; j++) seen = v_eq(r, out->v[j], src->v[i]);
            if (!seen) list_push(r, out, src->v[i]);
        }
        return v_list(out);
    }
    if (IS("sort")) {
        jlist *src = iter_list(r, v), *out = list_new(r, src->n);
        int rev = truthy(arg_or(a, 0, "reverse", v_bool(0)));
        jv at = arg_or(a, 2, "attribute", v_none());
        for (size_t i = 0; i < src->n; i++) {
            tick(r);
            jv x = src->v[i];
            jv kx = at.t == T_STR ? attr_path(r, x, at.u.s) : x;
            size_t j = out->n;
            list_push(r, out, x);
            while (j > 0) {
                jv ky = at.t == T_STR ? attr_path(r, out->v[j - 1], at.u.s) : out->v[j - 1];
                int c = v_cmp(r, ky, kx, "<");
                if (rev ? c >= 0 : c <= 0) break;
                out->v[j] = out->v[j - 1];
                j--;
                tick(r);
            }
            out->v[j] = x;
        }
        return v_list(out);
    }
    if (IS("sum")) {
        jlist *src = iter_list(r, v);
        jv acc = arg_or(a, 1, "start", v_int(0));
        jv at = arg_or(a, 0, "attribute", v_none());
        for (size_t i = 0; i < src->n; i++) {
            charge(r, COST_NODE);
            acc = arith(r, OP_ADD, acc, at.t == T_STR ? attr_path(r, src->v[i], at.u.s) : src->v[i]);
        }
        return acc;
    }
    if (IS("min") || IS("max")) {
        jlist *src = iter_list(r, v);
        if (!src->n) return v_undef("No aggregated item, sequence was empty.");
        jv best = src->v[0];
        for (size_t i = 1; i < src->n; i++) {
            int c = v_cmp(r, src->v[i], best, "<");
            if (IS("min") ? c < 0 : c > 0) best = src->v[i];
        }
        return best;
    }
    if (IS("indent")) {
        jv w = arg_or(a, 0, "width", v_int(4));
        int first = truthy(arg_or(a, 1, "first", v_bool(0))), blank = truthy(arg_or(a, 2, "blank", v_bool(0)));
        jstr pad;
        if (w.t == T_STR) pad = w.u.s;
        else {
            int64_t k = need_int(r, w, "indent");
            if (k < 0) k = 0;
            if (k > 1000) jfail(r, SEER_EINVAL, "limit: indent width above 1000");
            char *sp = ar_alloc(r, (size_t)k + 1);
            memset(sp, ' ', (size_t)k);
            pad = (jstr){sp, (size_t)k};
        }
        jstr s = str_of(r, v);
        sb *b = sb_new(r);
        size_t i = 0;
        int line_no = 0;
        while (i <= s.n) {
            size_t j = i;
            while (j < s.n && s.p[j] != '\n') j++;
            jstr line = {s.p + i, j - i};
            int is_blank = py_strip(r, line, NULL, 3).n == 0;
            if ((line_no > 0 || first) && (blank || !is_blank)) sb_add(r, b, pad.p, pad.n);
            sb_add(r, b, line.p, line.n);
            if (j >= s.n) break;
            sb_addc(r, b, '\n');
            i = j + 1;
            line_no++;
        }
        return v_str(sb_take(r, b));
    }
    if (IS("attr")) {
        jv nm;
        if (!arg(a, 0, "name", &nm)) jfail(r, SEER_EINVAL, "type error: attr takes a name");
        return get_attr(r, v, need_str(r, nm, "attr"));
    }
    if (IS("dictsort")) {
        if (v.t != T_DICT) jfail(r, SEER_EINVAL, "type error: dictsort expects a mapping");
        jmeth m = {v, "items"};
        jargs none = {0};
        jv items = call_method(r, &m, &none);
        jlist *l = items.u.l;
        for (size_t i = 1; i < l->n; i++) {
            jv x = l->v[i];
            size_t j = i;
            while (j > 0 && v_cmp(r, l->v[j - 1].u.l->v[0], x.u.l->v[0], "<") > 0) { l->v[j] = l->v[j - 1]; j--; charge(r, 1); }
            l->v[j] = x;
        }
        return items;
    }
    if (IS("wordcount")) {
        jv sp = str_split(r, str_of(r, v), v_none(), -1);
        return v_int((int64_t)sp.u.l->n);
    }
    if (IS("escape") || IS("e")) {
        jstr s = str_of(r, v);
        sb *b = sb_new(r);
        for (size_t i = 0; i < s.n; i++) {
            size_t run = 0;   /* bytes copied as they are, in one piece */
            while (i + run < s.n && !strchr("&<>\"'", s.p[i + run])) run++;
            if (run) { sb_add(r, b, s.p + i, run); i += run - 1; continue; }
            charge(r, COST_NODE);
            switch (s.p[i]) {
            case '&': sb_adds(r, b, "&amp;"); break;
            case '<': sb_adds(r, b, "&lt;"); break;
            case '>': sb_adds(r, b, "&gt;"); break;
            case '"': sb_adds(r, b, "&#34;"); break;
            case '\'': sb_adds(r, b, "&#39;"); break;
            default: sb_addc(r, b, s.p[i]);
            }
        }
        return v_str(sb_take(r, b));
    }
#undef IS
    jfail(r, SEER_EINVAL, "unknown filter '%.*s'", (int)(name.n > 60 ? 60 : name.n), name.p);
}

/* ---- expressions ---- */

static jv eval(R *r, scope *sc, node *x) {
    charge(r, COST_NODE);
    if (++r->depth > r->lim.max_depth * 4) jfail(r, SEER_EINVAL, "limit: evaluation nested too deeply");
    jv res;
    switch (x->k) {
    case N_LIT: res = x->lit; break;
    case N_NAME: res = lookup(r, sc, x->name); break;
    case N_LISTLIT: case N_TUPLELIT: {
        jlist *l = list_new(r, (size_t)x->nv);
        for (int i = 0; i < x->nv; i++) list_push(r, l, eval(r, sc, x->v[i]));
        res = x->k == N_LISTLIT ? v_list(l) : v_tuple(l);
        break;
    }
    case N_DICTLIT: {
        jdict *d = ar_calloc(r, sizeof *d);
        for (int i = 0; i < x->nv; i++) {
            jv k = eval(r, sc, x->v[i]);
            if (k.t == T_LIST || k.t == T_DICT || k.t == T_UNDEF) jfail(r, SEER_EINVAL, "type error: unhashable type: '%s'", type_name(k));
            dict_set(r, d, k, eval(r, sc, x->w[i]));
        }
        res = v_dict(d);
        break;
    }
    case N_ATTR: res = get_attr(r, eval(r, sc, x->a), x->name); break;
    case N_ITEM: res = subscript(r, eval(r, sc, x->a), eval(r, sc, x->b)); break;
    case N_SLICE: {
        jv o = eval(r, sc, x->a);
        jv a = x->b ? eval(r, sc, x->b) : v_none();
        jv b = x->c ? eval(r, sc, x->c) : v_none();
        jv c = x->d ? eval(r, sc, x->d) : v_none();
        res = do_slice(r, o, a, b, c);
        break;
    }
    case N_CALL: {
        jv f = eval(r, sc, x->a);
        jargs a;
        eval_args(r, sc, x, &a);
        res = call_value(r, f, &a);
        break;
    }
    case N_FILTER: {
        jv v = eval(r, sc, x->a);
        jargs a;
        eval_args(r, sc, x, &a);
        res = apply_filter(r, x->name, v, &a);
        break;
    }
    case N_TEST: {
        jv v = eval(r, sc, x->a);
        jargs a;
        eval_args(r, sc, x, &a);
        res = v_bool(apply_test(r, x->name, v, &a));
        break;
    }
    case N_BIN: {
        jv a = eval(r, sc, x->a);
        jv b = eval(r, sc, x->b);
        res = arith(r, x->flag, a, b);
        break;
    }
    case N_NOT: res = v_bool(!truthy(eval(r, sc, x->a))); break;
    case N_NEG: case N_POS: {
        jv v = eval(r, sc, x->a);
        if (v.t == T_UNDEF) undef_fail(r, v);
        if (!is_num(v)) jfail(r, SEER_EINVAL, "type error: bad operand type for unary %c: '%s'", x->k == N_NEG ? '-' : '+', type_name(v));
        if (x->k == N_POS) res = v.t == T_BOOL ? v_int(v.u.b) : v;
        else if (v.t == T_FLOAT) res = v_float(-v.u.f);
        else { if (num_i(v) == INT64_MIN) jfail(r, SEER_EINVAL, "limit: integer overflow in unary -"); res = v_int(-num_i(v)); }
        break;
    }
    case N_AND: { jv a = eval(r, sc, x->a); res = truthy(a) ? eval(r, sc, x->b) : a; break; }
    case N_OR: { jv a = eval(r, sc, x->a); res = truthy(a) ? a : eval(r, sc, x->b); break; }
    case N_COND:
        if (truthy(eval(r, sc, x->a))) res = eval(r, sc, x->b);
        else res = x->c ? eval(r, sc, x->c) : v_undef("the inline if expression had no else branch and its condition was false");
        break;
    case N_CMP: {
        jv left = eval(r, sc, x->a);
        res = v_bool(1);
        for (int i = 0; i < x->nv; i++) {
            jv right = eval(r, sc, x->v[i]);
            int ok;
            switch (x->ops[i]) {
            case OP_EQ: ok = v_eq(r, left, right); break;
            case OP_NE: ok = !v_eq(r, left, right); break;
            case OP_LT: ok = v_cmp(r, left, right, "<") < 0; break;
            case OP_LE: ok = v_cmp(r, left, right, "<=") <= 0; break;
            case OP_GT: ok = v_cmp(r, left, right, ">") > 0; break;
            case OP_GE: ok = v_cmp(r, left, right, ">=") >= 0; break;
            case OP_IN: ok = contains(r, right, left); break;
            default: ok = !contains(r, right, left); break;
            }
            if (!ok) { res = v_bool(0); break; }
            left = right;
        }
        break;
    }
    default: jfail(r, SEER_EINVAL, "internal error: bad expression node %d", x->k);
    }
    r->depth--;
    return res;
}

/* ---- statements ---- */

static void emit(R *r, jv v) {
    if (v.t == T_STR) sb_add(r, r->out, v.u.s.p, v.u.s.n);
    else if (v.t != T_UNDEF) to_str(r, r->out, v, 0);
}

static void unpack(R *r, scope *sc, jstr *names, int nn, jv v) {
    if (nn == 1) { assign(r, sc, names[0], v); return; }
    jlist *l = iter_list(r, v);
    if ((int)l->n != nn)
        jfail(r, SEER_EINVAL, "value error: %s values to unpack (expected %d, got %zu)", (int)l->n > nn ? "too many" : "not enough", nn, l->n);
    for (int i = 0; i < nn; i++) assign(r, sc, names[i], l->v[i]);
}

/* Renders a body into a fresh string (set blocks, macro calls, filter blocks). */
static jstr capture(R *r, scope *sc, node **v, int n) {
    sb *saved = r->out;
    sb *b = sb_new(r);
    r->out = b;
    int flow = exec_body(r, sc, v, n);
    r->out = saved;
    if (flow != FLOW_NORMAL) jfail(r, SEER_EINVAL, "syntax error: 'break' or 'continue' outside a loop");
    return sb_take(r, b);
}

static jv call_macro(R *r, node *mac, jargs *a) {
    if (++r->depth > r->lim.max_depth) jfail(r, SEER_EINVAL, "limit: macro calls nested deeper than %zu levels", r->lim.max_depth);
    charge(r, COST_NODE * (1 + (size_t)mac->nn) + (size_t)a->nk * (size_t)mac->nn);
    scope *sc = scope_new(r, r->root);
    if (a->np > mac->nn) jfail(r, SEER_EINVAL, "type error: macro '%.*s' takes not more than %d argument(s)", (int)mac->name.n, mac->name.p, mac->nn);
    for (int i = 0; i < mac->nn; i++) {
        jv v;
        if (!arg(a, i, NULL, &v)) {
            int found = 0;
            for (int k = 0; k < a->nk; k++) if (a->kn[k].n == mac->names[i].n && !memcmp(a->kn[k].p, mac->names[i].p, a->kn[k].n)) { v = a->kv[k]; found = 1; }
            if (!found) {
                if (i < mac->nw && mac->w[i]) v = eval(r, sc, mac->w[i]);
                else v = v_undef(hintf(r, "parameter '%.*s' was not provided", (int)(mac->names[i].n > 100 ? 100 : mac->names[i].n), mac->names[i].p));
            }
        }
        assign(r, sc, mac->names[i], v);
    }
    for (int k = 0; k < a->nk; k++) {
        int ok = 0;
        for (int i = 0; i < mac->nn; i++) if (a->kn[k].n == mac->names[i].n && !memcmp(a->kn[k].p, mac->names[i].p, a->kn[k].n)) ok = 1;
        if (!ok) jfail(r, SEER_EINVAL, "type error: macro '%.*s' has no parameter '%.*s'", (int)mac->name.n, mac->name.p, (int)(a->kn[k].n > 100 ? 100 : a->kn[k].n), a->kn[k].p);
    }
    jstr s = capture(r, sc, mac->v, mac->nv);
    r->depth--;
    return v_str(s);
}

static int exec_for(R *r, scope *sc, node *x) {
    jv it = eval(r, sc, x->a);
    jlist *src = iter_list(r, it);
    jlist *items = src;
    if (x->b) {
        items = list_new(r, 0);
        for (size_t i = 0; i < src->n; i++) {
            tick(r);
            scope *fs = scope_new(r, sc);
            unpack(r, fs, x->names, x->nn, src->v[i]);
            if (truthy(eval(r, fs, x->b))) list_push(r, items, src->v[i]);
        }
    }
    if (!items->n) {
        if (x->nw) return exec_body(r, sc, x->w, x->nw);
        return FLOW_NORMAL;
    }
    jloop *lp = ar_calloc(r, sizeof *lp);
    lp->items = items;
    jv outer = lookup(r, sc, (jstr){"loop", 4});
    lp->depth = 1; /* only recursive loops (unsupported) go deeper */
    (void)outer;
    jv lv = {.t = T_LOOP};
    lv.u.loop = lp;
    for (size_t i = 0; i < items->n; i++) {
        tick(r);
        lp->i = i;
        /* each iteration is a fresh scope: assignments inside do not survive it (Jinja2) */
        scope *is = scope_new(r, sc);
        assign(r, is, (jstr){"loop", 4}, lv);
        unpack(r, is, x->names, x->nn, items->v[i]);
        int flow = exec_body(r, is, x->v, x->nv);
        if (flow == FLOW_BREAK) break;
    }
    return FLOW_NORMAL;
}

static int exec_node(R *r, scope *sc, node *x) {
    charge(r, COST_NODE);
    switch (x->k) {
    case N_TEXT: sb_add(r, r->out, x->name.p, x->name.n); return FLOW_NORMAL;
    case N_OUT: emit(r, eval(r, sc, x->a)); return FLOW_NORMAL;
    case N_IF:
        if (truthy(eval(r, sc, x->a))) return exec_body(r, sc, x->v, x->nv);
        return exec_body(r, sc, x->w, x->nw);
    case N_FOR: return exec_for(r, sc, x);
    case N_SET:
        if (x->flag) {
            jv ns = lookup(r, sc, x->name);
            if (ns.t != T_NS) jfail(r, SEER_EINVAL, "type error: cannot assign attribute on non-namespace object '%.*s'", (int)(x->name.n > 100 ? 100 : x->name.n), x->name.p);
            dict_set(r, ns.u.d, v_str(x->names[0]), eval(r, sc, x->a));
        } else {
            unpack(r, sc, x->names, x->nn, eval(r, sc, x->a));
        }
        return FLOW_NORMAL;
    case N_SETBLOCK: {
        jv s = v_str(capture(r, sc, x->v, x->nv));
        if (x->a) { x->b->lit = s; s = eval(r, sc, x->a); }
        assign(r, sc, x->name, s);
        return FLOW_NORMAL;
    }
    case N_FILTERBLOCK: {
        jv s = v_str(capture(r, sc, x->v, x->nv));
        x->b->lit = s;
        emit(r, eval(r, sc, x->a));
        return FLOW_NORMAL;
    }
    case N_WITH: {
        scope *ws = scope_new(r, sc);
        for (int i = 0; i < x->nn; i++) assign(r, ws, x->names[i], eval(r, sc, x->w[i]));
        return exec_body(r, ws, x->v, x->nv);
    }
    case N_MACRO: {
        jv m = {.t = T_MACRO};
        m.u.mac = x;
        assign(r, sc, x->name, m);
        return FLOW_NORMAL;
    }
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    default: jfail(r, SEER_EINVAL, "internal error: bad statement node %d", x->k);
    }
}

static int exec_body(R *r, scope *sc, node **v, int n) {
    if (++r->depth > r->lim.max_depth * 4) jfail(r, SEER_EINVAL, "limit: blocks nested too deeply");
    int flow = FLOW_NORMAL;
    for (int i = 0; i < n; i++) {
        flow = exec_node(r, sc, v[i]);
        if (flow != FLOW_NORMAL) break;
    }
    r->depth--;
    return flow;
}

/* ======================================================================================== */
/* cJSON in, entry point                                                                     */
/* ======================================================================================== */

static jv from_cjson(R *r, const cJSON *j, size_t depth) {
    if (depth > 1000) jfail(r, SEER_EINVAL, "limit: variables nested deeper than 1000 levels");
    if (cJSON_IsNull(j) || cJSON_IsInvalid(j)) return v_none();
    if (cJSON_IsBool(j)) return v_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* JSON does not say int or float; integral values in the exact range count as int */
        if (isfinite(d) && d == floor(d) && fabs(d) <= 9007199254740992.0) return v_int((int64_t)d);
        return v_float(d);
    }
    if (cJSON_IsString(j) || cJSON_IsRaw(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        return v_str(ar_str(r, s, strlen(s)));
    }
    if (cJSON_IsArray(j)) {
        jlist *l = list_new(r, 0);
        for (const cJSON *c = j->child; c; c = c->next) list_push(r, l, from_cjson(r, c, depth + 1));
        return v_list(l);
    }
    if (cJSON_IsObject(j)) {
        jdict *d = ar_calloc(r, sizeof *d);
        for (const cJSON *c = j->child; c; c = c->next) {
            const char *k = c->string ? c->string : "";
            jv key = v_str(ar_str(r, k, strlen(k)));
            jv val = from_cjson(r, c, depth + 1);
            /* duplicate keys: the last wins, as in Python's json */
            dict_set(r, d, key, val);
        }
        return v_dict(d);
    }
    return v_none();
}

/* The size of the variables, for the budget's allowance: bytes of strings and keys, plus 8 per
 * value. */
static size_t cjson_size(const cJSON *j, size_t depth) {
    size_t n = 8;
    if (depth > 1000) return n;
    if ((cJSON_IsString(j) || cJSON_IsRaw(j)) && j->valuestring) n += strlen(j->valuestring);
    for (const cJSON *c = j->child; c; c = c->next) {
        if (c->string) n += strlen(c->string);
        size_t k = cjson_size(c, depth + 1);
        n = k > SIZE_MAX - n ? SIZE_MAX : n + k;
    }
    return n;
}

static void cleanup(R *r) {
    for (sb *b = r->live; b; b = b->next_live) { free(b->p); b->p = NULL; }
    r->live = NULL;
    blk *b = r->arena;
    while (b) { blk *n = b->next; free(b); b = n; }
    r->arena = NULL;
}

int seer_jinja_render(const char *tmpl, size_t tmpl_len, const cJSON *vars, const seer_chat_template_limits_t *lim, char **out,
                      size_t *out_len, size_t *work_used, seer_err_t *err) {
    if (work_used) *work_used = 0;
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!out || (!tmpl && tmpl_len)) return seer_err_set(err, SEER_EINVAL, "chat_template: bad arguments");
    if (vars && !cJSON_IsObject(vars) && !cJSON_IsNull(vars)) return seer_err_set(err, SEER_EINVAL, "chat_template: vars must be a JSON object");
    R *r = calloc(1, sizeof *r);
    if (!r) return seer_err_set(err, SEER_ENOMEM, "chat_template: out of memory");
    r->lim.max_output = lim && lim->max_output ? lim->max_output : SEER_CHAT_TEMPLATE_MAX_OUTPUT;
    r->lim.max_memory = lim && lim->max_memory ? lim->max_memory : SEER_CHAT_TEMPLATE_MAX_MEMORY;
    r->lim.max_iters = lim && lim->max_iters ? lim->max_iters : SEER_CHAT_TEMPLATE_MAX_ITERS;
    r->lim.max_depth = lim && lim->max_depth ? lim->max_depth : SEER_CHAT_TEMPLATE_MAX_DEPTH;
    r->lim.max_work = lim && lim->max_work ? lim->max_work : SEER_CHAT_TEMPLATE_MAX_WORK;
    size_t allowance = vars ? cjson_size(vars, 0) : 0;
    allowance = allowance > SIZE_MAX / SEER_CHAT_TEMPLATE_WORK_PER_VAR_BYTE ? SIZE_MAX : allowance * SEER_CHAT_TEMPLATE_WORK_PER_VAR_BYTE;
    r->budget = allowance > SIZE_MAX - r->lim.max_work ? SIZE_MAX : r->lim.max_work + allowance;
    if (setjmp(r->jb)) {
        int code = r->code ? r->code : SEER_EINVAL;
        seer_err_set(err, code, "%s", r->msg);
        if (work_used) *work_used = r->work;
        cleanup(r);
        free(r);
        return code;
    }
    /* Jinja2 reads the source with universal newlines and drops one trailing newline
     * (keep_trailing_newline is off). */
    char *src = ar_alloc(r, tmpl_len + 1);
    size_t n = 0;
    for (size_t i = 0; i < tmpl_len; i++) {
        if (tmpl[i] == '\r') { src[n++] = '\n'; if (i + 1 < tmpl_len && tmpl[i + 1] == '\n') i++; }
        else src[n++] = tmpl[i];
    }
    if (n && src[n - 1] == '\n') n--;
    src[n] = 0;
    r->src = src;
    r->src_n = n;

    lexer lx = {.r = r, .s = src, .n = n};
    lex(&lx);
    P p = {.r = r, .t = lx.v, .i = 0};
    int which;
    node *prog = parse_body(&p, NULL, &which);

    scope *globals = scope_new(r, NULL);
    if (vars && cJSON_IsObject(vars)) {
        jv vd = from_cjson(r, vars, 0);
        globals->vars = *vd.u.d;
    }
    r->root = scope_new(r, globals);
    r->out = sb_new(r);
    sb_reserve(r, r->out, 0);
    int flow = exec_body(r, r->root, prog->v, prog->nv);
    if (flow != FLOW_NORMAL) jfail(r, SEER_EPARSE, "syntax error: 'break' or 'continue' outside a loop");
    size_t len = r->out->n;
    char *res = malloc(len + 1);
    if (!res) jfail(r, SEER_ENOMEM, "out of memory");
    memcpy(res, r->out->p, len);
    res[len] = 0;
    if (work_used) *work_used = r->work;
    cleanup(r);
    free(r);
    *out = res;
    if (out_len) *out_len = len;
    return SEER_OK;
}
