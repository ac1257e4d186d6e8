/* A JSON syntax check that builds nothing: RFC 8259 exactly (what a browser's JSON.parse
 * accepts, with strings also well-formed UTF-8), at memory speed, for text that is only passed
 * on (the live view's notebook snapshots, checked at every publish). cJSON builds a tree of one
 * allocation per value, which cost ~90 ms for a 1.5 MB notebook; this walks the bytes once.
 * Optionally it hands back the raw text of one string value at a key path (object keys from
 * the top, e.g. metadata.seer.path), so the caller can read a field without a tree. */
#include <string.h>

#include "json.h"

typedef struct {
    const char *s;
    size_t n, i;
    const char *const *path; /* key path to capture (may be NULL) */
    size_t path_n;
    const char *cap;          /* the captured string's text between its quotes, or NULL */
    size_t cap_n;
} jp_t;

static void ws(jp_t *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}

static int hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* at '"': to just past the closing quote; *body, *body_n: the text between the quotes */
static int str(jp_t *p, const char **body, size_t *body_n) {
    size_t start = ++p->i;
    const unsigned char *s = (const unsigned char *)p->s;
    while (p->i < p->n) {
        unsigned char c = s[p->i];
        if (c == '"') {
            if (body) { *body = p->s + start; *body_n = p->i - start; }
            p->i++;
            return 0;
        }
        if (c < 0x20) return -1;
        if (c == '\\') {
            if (++p->i >= p->n) return -1;
            char e = (char)s[p->i];
            if (e == 'u') {
                if (p->i + 4 >= p->n || !hex(p->s[p->i + 1]) || !hex(p->s[p->i + 2]) || !hex(p->s[p->i + 3]) ||
                    !hex(p->s[p->i + 4]))
                    return -1;
                p->i += 5;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p->i++;
            } else {
                return -1;
            }
        } else {
            p->i++;
        }
    }
    return -1;
}

static int digits(jp_t *p) {
    size_t st = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    return p->i > st ? 0 : -1;
}

static int number(jp_t *p) {
    if (p->s[p->i] == '-') p->i++;
    if (p->i >= p->n) return -1;
    if (p->s[p->i] == '0') p->i++;
    else if (digits(p) != 0) return -1;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (digits(p) != 0) return -1;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (digits(p) != 0) return -1;
    }
    return 0;
}

static int lit(jp_t *p, const char *w, size_t n) {
    if (p->n - p->i < n || memcmp(p->s + p->i, w, n) != 0) return -1;
    p->i += n;
    return 0;
}

/* on: how many keys of the capture path led here, or (size_t)-1 off the path */
static int value(jp_t *p, int depth, size_t on) {
    if (depth > SEER_JSON_MAX_DEPTH) return -1;
    ws(p);
    if (p->i >= p->n) return -1;
    char c = p->s[p->i];
    if (c == '{') {
        p->i++;
        ws(p);
        if (p->i < p->n && p->s[p->i] == '}') { p->i++; return 0; }
        for (;;) {
            ws(p);
            if (p->i >= p->n || p->s[p->i] != '"') return -1;
            const char *k;
            size_t kn;
            if (str(p, &k, &kn) != 0) return -1;
            ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') return -1;
            p->i++;
            size_t next = 0;
            if (p->path && on < p->path_n && strlen(p->path[on]) == kn &&
                memcmp(p->path[on], k, kn) == 0)
                next = on + 1;
            if (next && next == p->path_n) {
                ws(p);
                if (p->i < p->n && p->s[p->i] == '"') {
                    const char *b;
                    size_t bn;
                    if (str(p, &b, &bn) != 0) return -1;
                    p->cap = b;
                    p->cap_n = bn;
                } else if (value(p, depth + 1, 0) != 0) {
                    return -1;
                }
            } else if (value(p, depth + 1, next ? next : (size_t)-1) != 0) {
                return -1;
            }
            ws(p);
            if (p->i >= p->n) return -1;
            if (p->s[p->i] == ',') { p->i++; continue; }
            if (p->s[p->i] == '}') { p->i++; return 0; }
            return -1;
        }
    }
    if (c == '[') {
        p->i++;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ']') { p->i++; return 0; }
        for (;;) {
            if (value(p, depth + 1, (size_t)-1) != 0) return -1;
            ws(p);
            if (p->i >= p->n) return -1;
            if (p->s[p->i] == ',') { p->i++; continue; }
            if (p->s[p->i] == ']') { p->i++; return 0; }
            return -1;
        }
    }
    if (c == '"') return str(p, NULL, NULL);
    if (c == 't') return lit(p, "true", 4);
    if (c == 'f') return lit(p, "false", 5);
    if (c == 'n') return lit(p, "null", 4);
    if (c == '-' || (c >= '0' && c <= '9')) return number(p);
    return -1;
}

int seer_json_check(const char *s, size_t n, size_t *bad_offset, const char *const *path, size_t path_n,
                    const char **cap, size_t *cap_n) {
    size_t bad;
    if (cap) { *cap = NULL; *cap_n = 0; }
    if (!seer_utf8_validate(s, n, &bad)) {
        if (bad_offset) *bad_offset = bad;
        return -1;
    }
    jp_t p = { s, n, 0, path, path_n, NULL, 0 };
    if (value(&p, 1, 0) != 0) {
        if (bad_offset) *bad_offset = p.i < n ? p.i : n;
        return -1;
    }
    ws(&p);
    if (p.i < n) {
        if (bad_offset) *bad_offset = p.i;
        return -2;
    }
    if (cap) { *cap = p.cap; *cap_n = p.cap_n; }
    return 0;
}
