/* The MCP client's message reader: a server's message arrives in pieces (a stdio line split
 * over reads, the data lines of an SSE event, an HTTP body in chunks), and the reader keeps its
 * bytes only up to a bound while a small JSON scanner runs over every byte. So a message past
 * the bound costs no more memory than the bound, whatever the server sends, and the client
 * still knows what it was: its id and method (an id may come last: the TypeScript SDK writes
 * {"result":...,"jsonrpc":"2.0","id":N}), and for a tool result, where the cut fell, whether
 * result.isError was set and how many bytes its content's text and data had.
 *
 * While a tools/call with max_result_bytes is awaited, the bound (s->keep, s->cut_ok) counts
 * the bytes kept and MCP_READER_VALUE_COST for each JSON value begun, so a message of a million
 * tiny values ("[0,0,0,...]", 40 bytes of cJSON nodes for every 2 of text) is as bounded as one
 * long string. Past it the message is cut: the bytes read so far are made valid JSON again (an
 * open string closed where no escape or UTF-8 character is split, an unfinished key or scalar
 * dropped, the open containers closed) and the rest of the message is scanned and thrown away
 * as it streams. Any other message past MCP_READER_MAX_VALUES values is not read at all (the
 * awaited request fails; the connection stays in step), and any message past max_message_bytes
 * is an error (the caller breaks the connection, as before).
 *
 * The scanner accepts everything cJSON accepts (it is laxer about numbers and literals), so a
 * message it finds malformed is kept only for the warning's excerpt. */
#include <stdlib.h>
#include <string.h>

#include "client_private.h"

enum { ST_START, ST_VALUE, ST_ARR_FIRST, ST_OBJ_FIRST, ST_KEY, ST_COLON, ST_AFTER, ST_STR, ST_SCALAR, ST_DONE, ST_BAD };

#define BAD_KEEP 256                /* bytes kept of a message that is not JSON, for the warning */
#define SHRINK_ABOVE ((size_t)1 << 20) /* a buffer grown past this is freed after its message */

static int is_obj(const mcp_reader_t *r, int d) {
    return (r->nest[d >> 3] >> (d & 7)) & 1;
}

static void set_obj(mcp_reader_t *r, int d, int obj) {
    if (obj)
        r->nest[d >> 3] |= (unsigned char)(1u << (d & 7));
    else
        r->nest[d >> 3] &= (unsigned char)~(1u << (d & 7));
}

static int key_is(const mcp_reader_t *r, int d, const char *k) {
    return d < MCP_READER_KEYS && is_obj(r, d) && strcmp(r->key[d], k) == 0;
}

/* Inside the object result of a message object (depth 2). */
static int in_result(const mcp_reader_t *r) {
    return r->top_object && r->depth >= 2 && key_is(r, 1, "result") && is_obj(r, 2);
}

/* A string that is the text or data of a block of result.content. */
static int in_block_payload(const mcp_reader_t *r) {
    return r->depth == 4 && in_result(r) && key_is(r, 2, "content") && !is_obj(r, 3) &&
           (key_is(r, 4, "text") || key_is(r, 4, "data"));
}

static int is_scalar_char(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '+' ||
           c == '.';
}

static int hex(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

void mcp_rd_reset(mcp_reader_t *r) {
    mcp_buf_t b = r->buf;
    b.len = 0;
    if (b.cap > SHRINK_ABOVE) mcp_buf_free(&b);
    memset(r, 0, sizeof *r);
    r->buf = b;
    r->is_error = -1;
}

void mcp_rd_free(mcp_reader_t *r) {
    mcp_buf_free(&r->buf);
    mcp_rd_reset(r);
}

/* Grows toward the bound without overshooting it much (mcp_buf_add doubles). */
static int keep_bytes(mcp_reader_t *r, const char *p, size_t n, size_t bound) {
    if (!n) return 0;
    mcp_buf_t *b = &r->buf;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        size_t most = bound + 64;
        if (cap > most && b->len + n + 1 <= most) cap = most;
        char *d = realloc(b->data, cap);
        if (!d) return SEER_ENOMEM;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

static void capture(char *dst, size_t *len, size_t max, unsigned char c, int *state) {
    if (*len < max)
        dst[(*len)++] = (char)c;
    else
        *state = -1;
}

/* A byte of the key being read (kept for the first levels; a key too long to be one the
 * client looks for matches nothing). */
static void key_char(mcp_reader_t *r, unsigned char c) {
    if (r->depth >= MCP_READER_KEYS) return;
    char *k = r->key[r->depth];
    if (r->key_len < MCP_READER_KEY_MAX) {
        k[r->key_len++] = (char)c;
        k[r->key_len] = 0;
    } else {
        k[0] = 1;
    }
}

/* ---- events of the scanner ---------------------------------------------------------------- */

static void value_begins(mcp_reader_t *r, unsigned char c) {
    int d = r->depth;
    int container = c == '{' || c == '[';
    r->charge += MCP_READER_VALUE_COST;
    r->values++;
    if (d == 0) {
        r->top_object = c == '{';
        r->top = c;
        return;
    }
    if (d == 1 && r->top_object) {
        if (key_is(r, 1, "id")) {
            r->id_len = 0;
            r->id_state = container ? -1 : 1;
        } else if (key_is(r, 1, "method")) {
            r->has_method = 1;
        } else if (key_is(r, 1, "result")) {
            r->has_result = 1;
        } else if (key_is(r, 1, "error")) {
            r->has_error = 1;
        }
    } else if (d == 2 && in_result(r) && key_is(r, 2, "isError") && !container) {
        r->is_error_capture = 1;
        r->scal_len = 0;
    }
}

static void value_ends(mcp_reader_t *r, size_t after) {
    int d = r->depth;
    if (d == 1 && r->id_state == 1) r->id_state = 2;
    if (d == 2 && r->is_error_capture) {
        r->is_error_capture = 0;
        r->scal[r->scal_len < sizeof r->scal ? r->scal_len : sizeof r->scal - 1] = 0;
        r->is_error = strcmp(r->scal, "true") == 0;
    }
    if (d == 2 && !r->over && in_result(r) && key_is(r, 2, "structuredContent")) r->structured_done = 1;
    if (!r->over) r->safe = after;
    /* A message that is a bare word is a line of text far more often than JSON ("Server v1
     * starting..."): what follows is kept for the warning. */
    r->st = d > 0 ? ST_AFTER : (r->top == '{' || r->top == '[' || r->top == '"') ? ST_DONE : ST_BAD;
}

/* The first byte that cannot be kept is at the end of buf: the kept prefix becomes valid JSON. */
static void cut(mcp_reader_t *r) {
    r->over = 1;
    r->read_bytes = r->buf.len;
    if (!r->top_object || r->depth == 0) {
        r->buf.len = 0;
        return;
    }
    r->cut_in_block = r->depth >= 4 && in_result(r) && key_is(r, 2, "content") && !is_obj(r, 3);
    char *b = r->buf.data;
    if (r->st == ST_STR && !r->str_key) {
        size_t end = r->esc ? r->esc_at : r->u_left ? r->u_at : r->buf.len;
        if (r->hi_end && r->hi_end == end) end -= 6; /* a high surrogate without its pair */
        /* not inside a UTF-8 character */
        size_t k = 0;
        while (k < 3 && end - k > r->str_start && ((unsigned char)b[end - 1 - k] & 0xC0) == 0x80) k++;
        if (end - k > r->str_start) {
            unsigned char lead = (unsigned char)b[end - 1 - k];
            size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
            if (lead >= 0x80 && need > k + 1) end -= k + 1;
        }
        r->buf.len = end;
        b[r->buf.len++] = '"'; /* room: what was dropped is at least as long */
    } else {
        r->buf.len = r->safe;
    }
    /* the closers: the buffer may need to grow by depth bytes */
    for (int d = r->depth; d >= 1; d--) {
        char c = is_obj(r, d) ? '}' : ']';
        if (keep_bytes(r, &c, 1, r->buf.len + (size_t)d + 1) < 0) {
            r->buf.len = 0; /* out of memory: nothing usable */
            return;
        }
    }
}

/* ---- feeding ---------------------------------------------------------------------------------- */

int mcp_rd_feed(mcp_server_t *s, mcp_reader_t *r, const char *p, size_t n) {
    size_t max = s->opts->max_message_bytes;
    size_t keep = s->cut_ok && s->keep && s->keep < max ? s->keep : max;
    if (!r->started) {
        mcp_rd_reset(r);
        r->started = 1;
    }
    if (n > max - r->total) return SEER_EPARSE;
    const unsigned char *u = (const unsigned char *)p;
    size_t base = r->total; /* the message's offset of p[0] */
    r->total += n;
    size_t seg = 0;         /* p[seg, i) is kept but not yet copied */
#define FLUSH(upto)                                                                              \
    do {                                                                                         \
        if (!r->over && (upto) > seg && keep_bytes(r, p + seg, (upto)-seg, keep) < 0) goto oom; \
        seg = (upto);                                                                            \
    } while (0)
    size_t i = 0;
    while (i < n) {
        if (r->st == ST_DONE) { /* what follows the value is not kept (cJSON would ignore it) */
            FLUSH(i);
            break;
        }
        if (r->st == ST_BAD) {
            FLUSH(i);
            if (!r->over) {
                if (r->buf.len > BAD_KEEP) r->buf.len = BAD_KEEP;
                size_t room = BAD_KEEP - r->buf.len, take = n - i < room ? n - i : room;
                if (keep_bytes(r, p + i, take, keep) < 0) goto oom;
            }
            seg = n;
            break;
        }
        unsigned char c = u[i];
        size_t off = base + i;
        if (r->st == ST_SCALAR && !is_scalar_char(c)) {
            value_ends(r, off); /* c is looked at again in the new state */
            continue;
        }
        /* A run of plain bytes in a string is taken at once. */
        if (r->st == ST_STR && !r->esc && !r->u_left && c != '"' && c != '\\') {
            size_t j = i + 1;
            while (j < n && u[j] != '"' && u[j] != '\\') j++;
            size_t run = j - i;
            if (s->cut_ok && !r->over && r->charge + run > keep) {
                run = keep > r->charge ? keep - r->charge : 0;
                if (run == 0) {
                    FLUSH(i);
                    cut(r);
                    continue;
                }
            }
            if (!r->over) r->charge += run;
            if (r->str_key) {
                for (size_t k = i; k < i + run; k++) key_char(r, u[k]);
            } else {
                if (r->depth == 1 && r->id_state == 1)
                    for (size_t k = i; k < i + run; k++) capture(r->id, &r->id_len, 64, u[k], &r->id_state);
                if (in_block_payload(r)) r->content_bytes += run;
            }
            r->hi_end = 0;
            i += run;
            continue;
        }
        /* Every other byte: one at a time. */
        int ws = c <= 0x20;
        int begins = !ws && (r->st == ST_START || r->st == ST_VALUE || (r->st == ST_ARR_FIRST && c != ']'));
        if (r->st == ST_START && off < 3 && c == (unsigned char)"\xEF\xBB\xBF"[off]) ws = 1, begins = 0; /* a BOM */
        size_t cost = 1 + (begins ? MCP_READER_VALUE_COST : 0);
        if (s->cut_ok && !r->over && r->charge + cost > keep) {
            FLUSH(i);
            cut(r);
        }
        if (begins && !r->over && r->values >= MCP_READER_MAX_VALUES) { /* not read at all */
            FLUSH(i);
            r->over = r->refused = 1;
            r->read_bytes = r->buf.len;
            r->buf.len = 0;
        }
        if (!r->over) r->charge += 1; /* value_begins adds the value's cost */
        i++;
        switch (r->st) {
        case ST_STR:
            /* As cJSON finds a string's end: a backslash takes the next byte along, whatever it
             * is. Apart from that, a \uXXXX is followed for where a cut may fall (cJSON reads a
             * bad digit as 0). */
            if (r->esc) {
                r->esc = 0;
                if (c == 'u') {
                    r->u_left = 4;
                    r->u_at = r->esc_at;
                    r->uhex = 0;
                } else {
                    r->hi_end = 0;
                }
            } else if (c == '\\') {
                r->esc = 1;
                r->esc_at = off;
                r->u_left = 0;
            } else if (c == '"') {
                if (r->str_key) {
                    r->st = ST_COLON;
                    break;
                }
                if (r->depth == 1 && r->id_state == 1) capture(r->id, &r->id_len, 64, c, &r->id_state);
                value_ends(r, off + 1);
                break;
            } else if (r->u_left) {
                int h = hex(c);
                r->uhex = h < 0 ? 0x10000 : r->uhex * 16 + (unsigned)h;
                if (--r->u_left == 0) r->hi_end = r->uhex >= 0xD800 && r->uhex <= 0xDBFF ? off + 1 : 0;
            }
            if (r->str_key) {
                key_char(r, c);
            } else {
                if (r->depth == 1 && r->id_state == 1) capture(r->id, &r->id_len, 64, c, &r->id_state);
                if (in_block_payload(r)) r->content_bytes++;
            }
            break;
        case ST_SCALAR:
            if (r->depth == 1 && r->id_state == 1) capture(r->id, &r->id_len, 64, c, &r->id_state);
            if (r->is_error_capture && r->scal_len < sizeof r->scal - 1) r->scal[r->scal_len++] = (char)c;
            break;
        case ST_START:
        case ST_VALUE:
        case ST_ARR_FIRST:
            if (ws) break;
            if (c == ']' && r->st == ST_ARR_FIRST) {
                r->depth--;
                value_ends(r, off + 1);
                break;
            }
            if (c == '{' || c == '[') {
                value_begins(r, c);
                if (r->depth + 1 > MCP_READER_NEST_MAX) {
                    r->st = ST_BAD;
                    break;
                }
                r->depth++;
                set_obj(r, r->depth, c == '{');
                if (r->depth < MCP_READER_KEYS) r->key[r->depth][0] = 0;
                r->st = c == '{' ? ST_OBJ_FIRST : ST_ARR_FIRST;
                if (!r->over) r->safe = off + 1;
            } else if (c == '"') {
                value_begins(r, c);
                if (r->depth == 1 && r->id_state == 1) capture(r->id, &r->id_len, 64, c, &r->id_state);
                r->st = ST_STR;
                r->str_key = 0;
                r->esc = 0;
                r->u_left = 0;
                r->hi_end = 0;
                r->str_start = off + 1;
            } else if (is_scalar_char(c)) {
                value_begins(r, c);
                if (r->depth == 1 && r->id_state == 1) capture(r->id, &r->id_len, 64, c, &r->id_state);
                if (r->is_error_capture) r->scal[r->scal_len++] = (char)c;
                r->st = ST_SCALAR;
            } else {
                r->st = ST_BAD;
            }
            break;
        case ST_OBJ_FIRST:
        case ST_KEY:
            if (ws) break;
            if (c == '}' && r->st == ST_OBJ_FIRST) {
                r->depth--;
                value_ends(r, off + 1);
            } else if (c == '"') {
                r->st = ST_STR;
                r->str_key = 1;
                r->esc = 0;
                r->u_left = 0;
                r->key_len = 0;
                if (r->depth < MCP_READER_KEYS) r->key[r->depth][0] = 0;
            } else {
                r->st = ST_BAD;
            }
            break;
        case ST_COLON:
            if (ws) break;
            r->st = c == ':' ? ST_VALUE : ST_BAD;
            break;
        case ST_AFTER:
            if (ws) break;
            if (c == ',') {
                r->st = is_obj(r, r->depth) ? ST_KEY : ST_VALUE;
            } else if ((c == '}' && is_obj(r, r->depth)) || (c == ']' && !is_obj(r, r->depth))) {
                r->depth--;
                value_ends(r, off + 1);
            } else {
                r->st = ST_BAD;
            }
            break;
        default:
            break;
        }
    }
    FLUSH(i < n ? i : n);
#undef FLUSH
    return 0;
oom:
    /* Out of memory keeping it: the message is dropped (seen as not JSON). */
    r->st = ST_BAD;
    r->buf.len = 0;
    return 0;
}

/* ---- the end of a message --------------------------------------------------------------------- */

void mcp_rd_end(mcp_server_t *s, mcp_reader_t *r) {
    if (!r->started) return;
    if (!r->over) {
        mcp_dispatch_text(s, r->buf.data ? r->buf.data : "", r->buf.len);
    } else if (r->refused) {
        mcp_dispatch_refused(s, r);
    } else if (!r->top_object || r->st != ST_DONE || !r->buf.len) {
        mcp_warn(s, "ignoring a message of %zu bytes that is not one whole JSON-RPC object: only %zu bytes of a "
                    "message are read while a tool call is awaited (max_result_bytes)",
                 r->total, s->keep);
    } else {
        cJSON *m = cJSON_ParseWithLength(r->buf.data, r->buf.len);
        if (!m)
            mcp_warn(s, "ignoring a message of %zu bytes: its first %zu bytes could not be read as JSON", r->total,
                     r->read_bytes);
        else
            mcp_dispatch_cut(s, m, r);
    }
    mcp_rd_reset(r);
}
