/* Unit tests of engine/png: encode -> decode round trips for every channel count; decoding of
 * PNGs written by two other encoders (a reference writer in this file, with stored deflate
 * blocks, every colour type, bit depth, filter type and Adam7; and a fixture made with Python's
 * zlib); corrupt, truncated and oversized input; the header peek; fit sizes and the exact
 * box-filter averages. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "png/png.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define LEAK_CHECK() cr_assert(__lsan_do_recoverable_leak_check() == 0)
#else
#define LEAK_CHECK() ((void)0)
#endif

/* ---- a reference PNG writer, independent of libpng ---------------------------------------- */

typedef struct {
    unsigned char *p;
    size_t n, cap;
} buf_t;

static void buf_put(buf_t *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void buf_be32(buf_t *b, uint32_t v) {
    unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8), (unsigned char)v};
    buf_put(b, x, 4);
}

static uint32_t ref_crc(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xedb88320u : c >> 1;
    }
    return ~c;
}

static void put_chunk(buf_t *b, const char *type, const unsigned char *d, size_t n) {
    buf_be32(b, (uint32_t)n);
    size_t at = b->n;
    buf_put(b, type, 4);
    buf_put(b, d, n);
    buf_be32(b, ref_crc(b->p + at, n + 4));
}

/* A zlib stream (RFC 1950) of stored deflate blocks (RFC 1951 BTYPE=00): valid input for any
 * inflater, written without zlib. */
static void zlib_stored(buf_t *out, const unsigned char *d, size_t n) {
    const unsigned char hdr[2] = {0x78, 0x01};
    buf_put(out, hdr, 2);
    size_t off = 0;
    do {
        size_t k = n - off > 65535 ? 65535 : n - off;
        unsigned char bh[5] = {(unsigned char)(off + k == n), (unsigned char)(k & 255), (unsigned char)(k >> 8),
                               (unsigned char)(~k & 255), (unsigned char)((~k >> 8) & 255)};
        buf_put(out, bh, 5);
        buf_put(out, d + off, k);
        off += k;
    } while (off < n);
    uint32_t a = 1, s = 0;
    for (size_t i = 0; i < n; i++) {
        a = (a + d[i]) % 65521;
        s = (s + a) % 65521;
    }
    buf_be32(out, s << 16 | a);
}

typedef struct {
    unsigned w, h;
    int depth, ctype, interlace;
    const uint16_t *samples; /* h * w * samples_per_pixel, raw values at the file's bit depth */
    const unsigned char *plte;
    int nplte; /* palette entries (RGB triples) */
    const unsigned char *trns;
    int ntrns; /* tRNS chunk bytes */
} ref_t;

static int spp(int ctype) { return ctype == 0 ? 1 : ctype == 2 ? 3 : ctype == 3 ? 1 : ctype == 4 ? 2 : 4; }

static int paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
}

/* Writes r as a PNG; rows cycle through the five filter types so the decoder's unfiltering of
 * each is exercised, in both plain and Adam7 layouts. */
static buf_t ref_png(const ref_t *r) {
    static const unsigned adam7[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                         {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
    static const unsigned plain[1][4] = {{0, 0, 1, 1}};
    const unsigned (*passes)[4] = r->interlace ? adam7 : plain;
    int npasses = r->interlace ? 7 : 1, s = spp(r->ctype), bits = s * r->depth, bpp = bits < 8 ? 1 : bits / 8;
    size_t maxrow = ((size_t)r->w * bits + 7) / 8;
    unsigned char *raw = calloc(maxrow + 1, 1), *prior = calloc(maxrow + 1, 1), *filt = calloc(maxrow + 1, 1);
    buf_t idat = {0};
    unsigned rowno = 0;
    for (int p = 0; p < npasses; p++) {
        unsigned x0 = passes[p][0], y0 = passes[p][1], dx = passes[p][2], dy = passes[p][3];
        unsigned pw = r->w > x0 ? (r->w - x0 + dx - 1) / dx : 0, ph = r->h > y0 ? (r->h - y0 + dy - 1) / dy : 0;
        if (pw == 0 || ph == 0) continue;
        size_t rb = ((size_t)pw * bits + 7) / 8;
        memset(prior, 0, maxrow + 1);
        for (unsigned j = 0; j < ph; j++) {
            unsigned y = y0 + j * dy;
            memset(raw, 0, maxrow + 1);
            size_t bitpos = 0;
            for (unsigned i = 0; i < pw; i++) {
                unsigned x = x0 + i * dx;
                for (int c = 0; c < s; c++) {
                    unsigned v = r->samples[((size_t)y * r->w + x) * s + c];
                    if (r->depth == 16) {
                        raw[bitpos / 8] = (unsigned char)(v >> 8);
                        raw[bitpos / 8 + 1] = (unsigned char)v;
                    } else if (r->depth == 8) {
                        raw[bitpos / 8] = (unsigned char)v;
                    } else {
                        raw[bitpos / 8] |= (unsigned char)(v << (8 - r->depth - bitpos % 8));
                    }
                    bitpos += r->depth;
                }
            }
            unsigned char type = (unsigned char)(rowno++ % 5);
            for (size_t i = 0; i < rb; i++) {
                int a = i >= (size_t)bpp ? raw[i - bpp] : 0, b = prior[i], c = i >= (size_t)bpp ? prior[i - bpp] : 0;
                int pred = type == 0 ? 0 : type == 1 ? a : type == 2 ? b : type == 3 ? (a + b) / 2 : paeth(a, b, c);
                filt[i] = (unsigned char)(raw[i] - pred);
            }
            buf_put(&idat, &type, 1);
            buf_put(&idat, filt, rb);
            memcpy(prior, raw, rb);
        }
    }
    buf_t z = {0}, out = {0};
    zlib_stored(&z, idat.p, idat.n);
    buf_put(&out, "\x89PNG\r\n\x1a\n", 8);
    unsigned char ihdr[13] = {(unsigned char)(r->w >> 24), (unsigned char)(r->w >> 16), (unsigned char)(r->w >> 8),
                              (unsigned char)r->w,         (unsigned char)(r->h >> 24), (unsigned char)(r->h >> 16),
                              (unsigned char)(r->h >> 8),  (unsigned char)r->h,         (unsigned char)r->depth,
                              (unsigned char)r->ctype,     0,                           0,
                              (unsigned char)r->interlace};
    put_chunk(&out, "IHDR", ihdr, 13);
    if (r->nplte) put_chunk(&out, "PLTE", r->plte, (size_t)r->nplte * 3);
    if (r->ntrns) put_chunk(&out, "tRNS", r->trns, (size_t)r->ntrns);
    /* Two IDAT chunks: a decoder must join them. */
    size_t half = z.n / 2;
    put_chunk(&out, "IDAT", z.p, half);
    put_chunk(&out, "IDAT", z.p + half, z.n - half);
    put_chunk(&out, "IEND", NULL, 0);
    free(raw);
    free(prior);
    free(filt);
    free(idat.p);
    free(z.p);
    return out;
}

/* What seer_png_decode must give for pixel (x, y) of r, as RGBA; *has_alpha says whether the
 * output has 4 channels. libpng scales 16-bit samples as (v * 255 + 32895) >> 16. */
static unsigned to8(unsigned v, int depth) {
    if (depth == 16) return (v * 255 + 32895) >> 16;
    return v * 255 / ((1u << depth) - 1);
}

static void ref_expect(const ref_t *r, unsigned x, unsigned y, unsigned char rgba[4], int *has_alpha) {
    int s = spp(r->ctype);
    const uint16_t *v = r->samples + ((size_t)y * r->w + x) * s;
    *has_alpha = r->ctype == 4 || r->ctype == 6 || r->ntrns > 0;
    rgba[3] = 255;
    switch (r->ctype) {
    case 0:
        rgba[0] = rgba[1] = rgba[2] = (unsigned char)to8(v[0], r->depth);
        if (r->ntrns && v[0] == (unsigned)(r->trns[0] << 8 | r->trns[1])) rgba[3] = 0;
        break;
    case 2:
        for (int c = 0; c < 3; c++) rgba[c] = (unsigned char)to8(v[c], r->depth);
        if (r->ntrns && v[0] == (unsigned)(r->trns[0] << 8 | r->trns[1]) &&
            v[1] == (unsigned)(r->trns[2] << 8 | r->trns[3]) && v[2] == (unsigned)(r->trns[4] << 8 | r->trns[5]))
            rgba[3] = 0;
        break;
    case 3:
        memcpy(rgba, r->plte + 3 * v[0], 3);
        if (v[0] < r->ntrns) rgba[3] = r->trns[v[0]];
        break;
    case 4:
        rgba[0] = rgba[1] = rgba[2] = (unsigned char)to8(v[0], r->depth);
        rgba[3] = (unsigned char)to8(v[1], r->depth);
        break;
    default:
        for (int c = 0; c < 4; c++) rgba[c] = (unsigned char)to8(v[c], r->depth);
    }
}

static uint32_t lcg(uint32_t *st) {
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

/* Builds, writes, decodes and checks one image of the given kind; returns how many pixels came
^ * out not fully opaque (so callers can see the tRNS cases really made some). */
static int check_ref(unsigned w, unsigned h, int depth, int ctype, int interlace, int with_trns) {
    int s = spp(ctype);
    uint16_t *samples = calloc((size_t)w * h * s, sizeof *samples);
    unsigned char plte[256 * 3], trns[256];
    int nplte = 0, ntrns = 0;
    uint32_t st = (uint32_t)(w * 131 + h * 7 + depth * 3 + ctype * 1000 + interlace);
    if (ctype == 3) {
        nplte = depth == 8 ? 200 : 1 << depth;
        for (int i = 0; i < nplte * 3; i++) plte[i] = (unsigned char)lcg(&st);
    }
    unsigned maxv = ctype == 3 ? (unsigned)nplte : 1u << depth;
    for (size_t i = 0; i < (size_t)w * h * s; i++) samples[i] = (uint16_t)(lcg(&st) % maxv);
    if (with_trns) {
        if (ctype == 3) {
            ntrns = nplte / 2 + 1; /* a partial tRNS: later entries stay opaque */
            for (int i = 0; i < ntrns; i++) trns[i] = (unsigned char)(i * 37);
        } else {
            /* the key colour is pixel (0, 0)'s, so at least one pixel turns transparent */
            ntrns = ctype == 0 ? 2 : 6;
            for (int c = 0; c < ntrns / 2; c++) {
                trns[2 * c] = (unsigned char)(samples[c] >> 8);
                trns[2 * c + 1] = (unsigned char)samples[c];
            }
        }
    }
    ref_t r = {w, h, depth, ctype, interlace, samples, plte, nplte, trns, ntrns};
    buf_t file = ref_png(&r);
    seer_png_image_t img;
    seer_err_t err;
    int rc = seer_png_decode(file.p, file.n, &img, &err);
    cr_assert_eq(rc, 0, "ctype %d depth %d interlace %d trns %d: %s", ctype, depth, interlace, with_trns, err.msg);
    cr_assert_eq(img.width, w);
    cr_assert_eq(img.height, h);
    int transparent = 0;
    for (unsigned y = 0; y < h; y++)
        for (unsigned x = 0; x < w; x++) {
            unsigned char want[4];
            int has_alpha;
            ref_expect(&r, x, y, want, &has_alpha);
            cr_assert_eq(img.channels, has_alpha ? 4u : 3u, "ctype %d depth %d trns %d", ctype, depth, with_trns);
            const unsigned char *got = img.pixels + ((size_t)y * w + x) * img.channels;
            for (unsigned c = 0; c < img.channels; c++)
                cr_assert_eq(got[c], want[c], "ctype %d depth %d interlace %d trns %d: pixel (%u,%u) channel %u: %u != %u",
                             ctype, depth, interlace, with_trns, x, y, c, got[c], want[c]);
            if (has_alpha && got[3] != 255) transparent++;
        }
    seer_png_image_free(&img);
    free(file.p);
    free(samples);
    return transparent;
}

/* ---- encode -> decode --------------------------------------------------------------------- */

static unsigned char *noise(size_t n, uint32_t seed) {
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)lcg(&seed);
    return p;
}

Test(png, round_trip_every_channel_count) {
    static const unsigned sizes[][2] = {{1, 1}, {7, 5}, {300, 2}, {2, 300}, {64, 64}};
    for (unsigned ch = 1; ch <= 4; ch++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            unsigned w = sizes[k][0], h = sizes[k][1];
            unsigned char *px = noise((size_t)w * h * ch, ch * 100 + (uint32_t)k);
            unsigned char *png;
            size_t len;
            seer_err_t err;
            cr_assert_eq(seer_png_encode(px, w, h, ch, &png, &len, &err), 0, "%s", err.msg);
            cr_assert(len > 8 && memcmp(png, "\x89PNG\r\n\x1a\n", 8) == 0);
            unsigned sw, sh;
            cr_assert_eq(seer_png_size(png, len, &sw, &sh, &err), 0, "%s", err.msg);
            cr_assert(sw == w && sh == h);
            seer_png_image_t img;
            cr_assert_eq(seer_png_decode(png, len, &img, &err), 0, "%s", err.msg);
            cr_assert_eq(img.width, w);
            cr_assert_eq(img.height, h);
            /* gray comes back as RGB with R = G = B, gray+alpha as RGBA */
            cr_assert_eq(img.channels, ch == 1 || ch == 3 ? 3u : 4u, "channels %u", ch);
            for (size_t i = 0; i < (size_t)w * h; i++) {
                const unsigned char *src = px + i * ch, *got = img.pixels + i * img.channels;
                unsigned char want[4];
                if (ch <= 2) {
                    want[0] = want[1] = want[2] = src[0];
                    want[3] = ch == 2 ? src[1] : 255;
                } else {
                    memcpy(want, src, ch);
                }
                cr_assert(memcmp(got, want, img.channels) == 0, "ch %u %ux%u pixel %zu differs", ch, w, h, i);
            }
            seer_png_image_free(&img);
            free(png);
            free(px);
        }
    LEAK_CHECK();
}

Test(png, encode_refuses_bad_arguments) {
    unsigned char px[16] = {0}, *png = (unsigned char *)1;
    size_t len = 1;
    seer_err_t err;
    cr_assert_eq(seer_png_encode(px, 2, 2, 0, &png, &len, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "channels is 0"), "%s", err.msg);
    cr_assert(png == NULL && len == 0);
    cr_assert_eq(seer_png_encode(px, 2, 2, 5, &png, &len, &err), SEER_EINVAL);
    cr_assert_eq(seer_png_encode(px, 0, 2, 3, &png, &len, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "0x2"), "%s", err.msg);
    cr_assert_eq(seer_png_encode(px, SEER_PNG_MAX_SIDE + 1, 1, 1, &png, &len, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "at most"), "%s", err.msg);
    /* within the side limit, over the pixel limit: refused before reading the pixels */
    cr_assert_eq(seer_png_encode(px, 20000, 20000, 1, &png, &len, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "at most"), "%s", err.msg);
}

/* ---- PNGs from other encoders -------------------------------------------------------------- */

Test(png, decodes_every_colour_type_depth_filter_and_interlace) {
    static const int kinds[][2] = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {0, 16}, {2, 8}, {2, 16}, {3, 1},
                                   {3, 2}, {3, 4}, {3, 8}, {4, 8}, {4, 16}, {6, 8}, {6, 16}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int interlace = 0; interlace <= 1; interlace++) {
            int ctype = kinds[k][0], depth = kinds[k][1];
            check_ref(13, 11, depth, ctype, interlace, 0);
            check_ref(1, 1, depth, ctype, interlace, 0); /* Adam7 with six empty passes */
            check_ref(3, 2, depth, ctype, interlace, 0);
            if (ctype == 0 || ctype == 2 || ctype == 3) {
                int t = check_ref(13, 11, depth, ctype, interlace, 1);
                cr_assert(t > 0, "ctype %d depth %d: the tRNS case made no pixel transparent", ctype, depth);
            }
        }
    LEAK_CHECK();
}

/* Made with /usr/bin/python3: zlib.compress(raw, 9) of a 3x2 8-bit RGB image whose first row
 * uses filter None and second row Paeth, a tEXt chunk, struct.pack for the chunk framing and
 * zlib.crc32 for the CRCs. Pixels: (255,0,0) (0,255,0) (0,0,255) / (10,20,30) (40,50,60) (70,80,90). */
static const unsigned char python_png[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x03, 0x00, 0x00, 0x00, 0x02, 0x08, 0x02, 0x00, 0x00, 0x00, 0x12, 0x16, 0xf1, 0x4d, 0x00, 0x00, 0x00, 0x23, 0x74,
    0x45, 0x58, 0x74, 0x43, 0x6f, 0x6d, 0x6d, 0x65, 0x6e, 0x74, 0x00, 0x6d, 0x61, 0x64, 0x65, 0x20, 0x62, 0x79, 0x20,
    0x70, 0x79, 0x74, 0x68, 0x6f, 0x6e, 0x33, 0x20, 0x7a, 0x6c, 0x69, 0x62, 0x2b, 0x73, 0x74, 0x72, 0x75, 0x63, 0x74,
    0xe7, 0xed, 0xa5, 0x3e, 0x00, 0x00, 0x00, 0x18, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xf8, 0xcf, 0xc0, 0xc0,
    0x00, 0xc6, 0x2c, 0xdc, 0x22, 0x72, 0x1a, 0xc6, 0x72, 0x72, 0x01, 0xd1, 0x00, 0x32, 0xa0, 0x04, 0x81, 0x59, 0x2c,
    0x99, 0x5b, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

Test(png, decodes_a_python_zlib_fixture) {
    static const unsigned char want[] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 40, 50, 60, 70, 80, 90};
    seer_png_image_t img;
    seer_err_t err;
    cr_assert_eq(seer_png_decode(python_png, sizeof python_png, &img, &err), 0, "%s", err.msg);
    cr_assert(img.width == 3 && img.height == 2 && img.channels == 3);
    cr_assert(memcmp(img.pixels, want, sizeof want) == 0);
    seer_png_image_free(&img);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static uint16_t g_small[13 * 11 * 3];

static buf_t small_ref(int interlace) {
    uint32_t st = 9;
    for (size_t i = 0; i < sizeof g_small / sizeof g_small[0]; i++) g_small[i] = (uint16_t)(lcg(&st) & 255);
    ref_t r = {13, 11, 8, 2, interlace, g_small, NULL, 0, NULL, 0};
    return ref_png(&r);
}

Test(png, every_truncation_is_an_error) {
    for (int interlace = 0; interlace <= 1; interlace++) {
        buf_t f = small_ref(interlace);
        for (size_t n = 0; n < f.n; n++) {
            unsigned char *copy = malloc(n ? n : 1); /* its own allocation, so ASan sees reads past n */
            memcpy(copy, f.p, n);
            seer_png_image_t img;
            seer_err_t err;
            int rc = seer_png_decode(copy, n, &img, &err);
            cr_assert(rc < 0, "a %zu-byte prefix of a %zu-byte PNG decoded", n, f.n);
            cr_assert(img.pixels == NULL);
            if (n >= 8) cr_assert(strstr(err.msg, "truncated PNG"), "prefix %zu: %s", n, err.msg);
            free(copy);
        }
        free(f.p);
    }
    LEAK_CHECK();
}

Test(png, every_flipped_byte_is_an_error_or_a_clean_decode) {
    buf_t f = small_ref(1);
    int failures = 0;
    for (size_t i = 0; i < f.n; i++) {
        unsigned char *copy = malloc(f.n);
        memcpy(copy, f.p, f.n);
        copy[i] ^= 0x5a;
        seer_png_image_t img;
        seer_err_t err;
        if (seer_png_decode(copy, f.n, &img, &err) < 0) {
            failures++;
            cr_assert(err.msg[0] != '\0' && img.pixels == NULL);
        } else {
            cr_assert(img.width == 13 && img.height == 11);
            seer_png_image_free(&img);
        }
        free(copy);
    }
    /* Only a few ancillary bytes (there are none here) may change silently: nearly every
     * flip must be caught by the signature, a CRC or zlib's Adler-32. */
    cr_assert(failures >= (int)f.n - 4, "%d of %zu flips were caught", failures, f.n);
    free(f.p);
    LEAK_CHECK();
}

Test(png, corrupt_input_messages) {
    seer_png_image_t img;
    seer_err_t err;
    cr_assert_eq(seer_png_decode("GIF89a....", 10, &img, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "not a PNG image"), "%s", err.msg);
    cr_assert_eq(seer_png_decode(NULL, 0, &img, &err), SEER_EPARSE);

    buf_t f = small_ref(0);
    /* A byte of image data changed: the IDAT CRC no longer matches. The first IDAT starts at
     * 8 (signature) + 25 (IHDR chunk) + 8 (length, type). */
    f.p[8 + 25 + 8 + 10] ^= 1;
    cr_assert_eq(seer_png_decode(f.p, f.n, &img, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "corrupt PNG") && strstr(err.msg, "CRC"), "%s", err.msg);
    f.p[8 + 25 + 8 + 10] ^= 1;

    /* An invalid filter type with a correct CRC: libpng's own complaint comes through. The
     * first filter byte follows the 2-byte zlib header and the 5-byte stored-block header. */
    size_t at = 8 + 25 + 8, idat_len = (size_t)f.p[at - 8] << 24 | f.p[at - 7] << 16 | f.p[at - 6] << 8 | f.p[at - 5];
    f.p[at + 7] = 9;
    uint32_t c = ref_crc(f.p + at - 4, idat_len + 4);
    f.p[at + idat_len] = (unsigned char)(c >> 24);
    f.p[at + idat_len + 1] = (unsigned char)(c >> 16);
    f.p[at + idat_len + 2] = (unsigned char)(c >> 8);
    f.p[at + idat_len + 3] = (unsigned char)c;
    cr_assert_eq(seer_png_decode(f.p, f.n, &img, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "corrupt PNG") && strstr(err.msg, "filter"), "%s", err.msg);
    free(f.p);
}

/* A file that claims w x h pixels and carries a few bytes of image data. */
static buf_t claims(uint32_t w, uint32_t h) {
    buf_t out = {0};
    buf_put(&out, "\x89PNG\r\n\x1a\n", 8);
    unsigned char ihdr[13] = {(unsigned char)(w >> 24), (unsigned char)(w >> 16), (unsigned char)(w >> 8), (unsigned char)w,
                              (unsigned char)(h >> 24), (unsigned char)(h >> 16), (unsigned char)(h >> 8), (unsigned char)h,
                              8, 2, 0, 0, 0};
    put_chunk(&out, "IHDR", ihdr, 13);
    buf_t z = {0};
    unsigned char row[16] = {0};
    zlib_stored(&z, row, sizeof row);
    put_chunk(&out, "IDAT", z.p, z.n);
    put_chunk(&out, "IEND", NULL, 0);
    free(z.p);
    return out;
}

Test(png, absurd_sizes_are_refused_before_allocating) {
    static const uint32_t cases[][2] = {{100000, 100000}, {SEER_PNG_MAX_SIDE + 1, 1}, {1, 40000}, {20000, 20000}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        buf_t f = claims(cases[k][0], cases[k][1]);
        seer_png_image_t img;
        seer_err_t err;
        cr_assert_eq(seer_png_decode(f.p, f.n, &img, &err), SEER_EINVAL, "%ux%u: %s", cases[k][0], cases[k][1], err.msg);
        cr_assert(strstr(err.msg, "at most"), "%s", err.msg);
        unsigned char *out;
        size_t len;
        unsigned w, h;
        cr_assert(seer_png_fit(f.p, f.n, 512, 0, &out, &len, &w, &h, &err) < 0);
        cr_assert(out == NULL);
        /* the header peek reports the claim; it allocates nothing */
        cr_assert_eq(seer_png_size(f.p, f.n, &w, &h, &err), 0, "%s", err.msg);
        cr_assert(w == cases[k][0] && h == cases[k][1]);
        free(f.p);
    }
    /* past PNG's own 2^31 - 1 limit: libpng's refusal, still an error */
    buf_t f = claims(0x80000000u, 1);
    seer_png_image_t img;
    seer_err_t err;
    cr_assert(seer_png_decode(f.p, f.n, &img, &err) < 0);
    unsigned w, h;
    cr_assert_eq(seer_png_size(f.p, f.n, &w, &h, &err), SEER_EPARSE);
    free(f.p);
}

Test(png, size_reads_only_the_header) {
    buf_t f = small_ref(0);
    unsigned w, h;
    seer_err_t err;
    cr_assert_eq(seer_png_size(f.p, 33, &w, &h, &err), 0, "%s", err.msg);
    cr_assert(w == 13 && h == 11);
    cr_assert_eq(seer_png_size(f.p, 32, &w, &h, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "truncated"), "%s", err.msg);
    f.p[20] ^= 1; /* a height byte: the IHDR CRC catches it */
    cr_assert_eq(seer_png_size(f.p, f.n, &w, &h, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "CRC"), "%s", err.msg);
    cr_assert_eq(seer_png_size("not a png at all, no, not at all!", 33, &w, &h, &err), SEER_EPARSE);
    cr_assert(strstr(err.msg, "signature"), "%s", err.msg);
    free(f.p);
}

/* ---- resize and fit ------------------------------------------------------------------------ */

Test(png, fit_size) {
    unsigned w, h;
    seer_png_fit_size(1000, 500, 512, &w, &h);
    cr_assert(w == 512 && h == 256, "%ux%u", w, h);
    seer_png_fit_size(500, 1000, 512, &w, &h);
    cr_assert(w == 256 && h == 512, "%ux%u", w, h);
    seer_png_fit_size(640, 400, 512, &w, &h);
    cr_assert(w == 512 && h == 320, "%ux%u", w, h);
    seer_png_fit_size(300, 200, 512, &w, &h);
    cr_assert(w == 300 && h == 200);
    seer_png_fit_size(512, 512, 512, &w, &h);
    cr_assert(w == 512 && h == 512);
    seer_png_fit_size(3, 1000, 100, &w, &h); /* 0.3 rounds to 0; a side is at least 1 */
    cr_assert(w == 1 && h == 100, "%ux%u", w, h);
    seer_png_fit_size(1001, 999, 10, &w, &h);
    cr_assert(w == 10 && h == 10, "%ux%u", w, h);
}

Test(png, resize_averages_areas_exactly) {
    seer_err_t err;
    /* a 4x4 checkerboard to 2x2: every output pixel averages two 0s and two 255s (127.5 -> 128) */
    unsigned char board[16], out4[4];
    for (int i = 0; i < 16; i++) board[i] = ((i % 4) + (i / 4)) % 2 ? 255 : 0;
    cr_assert_eq(seer_png_resize(board, 4, 4, 1, out4, 2, 2, &err), 0, "%s", err.msg);
    for (int i = 0; i < 4; i++) cr_assert_eq(out4[i], 128);

    /* 3 -> 2 columns: output 0 covers source [0, 1.5), output 1 covers [1.5, 3) */
    unsigned char row[3] = {0, 90, 180}, out2[2];
    cr_assert_eq(seer_png_resize(row, 3, 1, 1, out2, 2, 1, &err), 0);
    cr_assert_eq(out2[0], 30);  /* (0 * 1 + 90 * 0.5) / 1.5 */
    cr_assert_eq(out2[1], 150); /* (90 * 0.5 + 180 * 1) / 1.5 */

    /* the same along y, on RGB: channels average independently */
    unsigned char col[9] = {0, 10, 20, 90, 100, 110, 180, 190, 200}, outc[6];
    cr_assert_eq(seer_png_resize(col, 1, 3, 3, outc, 1, 2, &err), 0);
    static const unsigned char wantc[6] = {30, 40, 50, 150, 160, 170};
    cr_assert(memcmp(outc, wantc, 6) == 0, "%u %u %u / %u %u %u", outc[0], outc[1], outc[2], outc[3], outc[4], outc[5]);

    /* alpha weighting: a transparent blue pixel does not tint an opaque red one */
    unsigned char rgba[8] = {255, 0, 0, 255, 0, 0, 255, 0}, out1[4];
    cr_assert_eq(seer_png_resize(rgba, 2, 1, 4, out1, 1, 1, &err), 0);
    cr_assert(out1[0] == 255 && out1[1] == 0 && out1[2] == 0 && out1[3] == 128, "%u %u %u %u", out1[0], out1[1],
              out1[2], out1[3]);
    unsigned char clear[8] = {10, 20, 30, 0, 40, 50, 60, 0};
    cr_assert_eq(seer_png_resize(clear, 2, 1, 4, out1, 1, 1, &err), 0);
    cr_assert_eq(out1[3], 0);

    /* same size: a copy */
    unsigned char *px = noise(5 * 7 * 3, 3), same[5 * 7 * 3];
    cr_assert_eq(seer_png_resize(px, 5, 7, 3, same, 5, 7, &err), 0);
    cr_assert(memcmp(px, same, sizeof same) == 0);
    free(px);

    cr_assert_eq(seer_png_resize(row, 3, 1, 5, out2, 2, 1, &err), SEER_EINVAL);
    cr_assert_eq(seer_png_resize(row, 3, 1, 1, out2, 0, 1, &err), SEER_EINVAL);
}

Test(png, fit_downscales_and_keeps_small_images) {
    /* 1024x512: left half black, right half white, a 1-px red line at x = 511 */
    unsigned w = 1024, h = 512;
    unsigned char *px = malloc((size_t)w * h * 3);
    for (unsigned y = 0; y < h; y++)
        for (unsigned x = 0; x < w; x++) {
            unsigned char *p = px + ((size_t)y * w + x) * 3;
            unsigned char v = x < w / 2 ? 0 : 255;
            p[0] = p[1] = p[2] = v;
            if (x == 511) p[0] = 255, p[1] = p[2] = 0;
        }
    unsigned char *png, *out;
    size_t len, out_len;
    unsigned ow, oh;
    seer_err_t err;
    cr_assert_eq(seer_png_encode(px, w, h, 3, &png, &len, &err), 0, "%s", err.msg);
    cr_assert_eq(seer_png_fit(png, len, 512, 0, &out, &out_len, &ow, &oh, &err), 0, "%s", err.msg);
    cr_assert(out != NULL && ow == 512 && oh == 256, "%ux%u", ow, oh);
    seer_png_image_t img;
    cr_assert_eq(seer_png_decode(out, out_len, &img, &err), 0, "%s", err.msg);
    cr_assert(img.width == 512 && img.height == 256 && img.channels == 3);
    for (unsigned y = 0; y < 256; y += 51) {
        const unsigned char *r = img.pixels + (size_t)y * 512 * 3;
        cr_assert(r[0] == 0 && r[3 * 100] == 0 && r[3 * 511] == 255 && r[3 * 300 + 1] == 255);
        /* output column 255 covers source 510 (black) and 511 (red): (0 + 255) / 2, 0, 0 */
        cr_assert(r[3 * 255] == 128 && r[3 * 255 + 1] == 0 && r[3 * 255 + 2] == 0, "%u %u %u", r[3 * 255],
                  r[3 * 255 + 1], r[3 * 255 + 2]);
    }
    seer_png_image_free(&img);
    free(out);

    /* already within the limit: no new bytes, the size reported */
    cr_assert_eq(seer_png_fit(png, len, 1024, 0, &out, &out_len, &ow, &oh, &err), 0);
    cr_assert(out == NULL && out_len == 0 && ow == 1024 && oh == 512);
    cr_assert_eq(seer_png_fit(png, len, 0, 0, &out, &out_len, &ow, &oh, &err), SEER_EINVAL);
    /* a corrupt file is an error even when it would fit */
    png[len - 20] ^= 0xff;
    cr_assert(seer_png_fit(png, len, 4096, 0, &out, &out_len, &ow, &oh, &err) < 0);
    cr_assert(out == NULL);
    free(png);
    free(px);
    LEAK_CHECK();
}

Test(png, fit_keeps_alpha) {
    unsigned char px[4 * 4 * 4];
    for (int i = 0; i < 16; i++) {
        px[4 * i] = 0, px[4 * i + 1] = 200, px[4 * i + 2] = 0, px[4 * i + 3] = (unsigned char)(i < 8 ? 255 : 0);
    }
    unsigned char *png, *out;
    size_t len, out_len;
    unsigned ow, oh;
    seer_err_t err;
    cr_assert_eq(seer_png_encode(px, 4, 4, 4, &png, &len, &err), 0);
    cr_assert_eq(seer_png_fit(png, len, 2, 0, &out, &out_len, &ow, &oh, &err), 0, "%s", err.msg);
    seer_png_image_t img;
    cr_assert_eq(seer_png_decode(out, out_len, &img, &err), 0);
    cr_assert(img.width == 2 && img.height == 2 && img.channels == 4);
    static const unsigned char want[16] = {0, 200, 0, 255, 0, 200, 0, 255, 0, 0, 0, 0, 0, 0, 0, 0};
    cr_assert(memcmp(img.pixels, want, 16) == 0);
    seer_png_image_free(&img);
    free(out);
    free(png);
}

/* seer_png_fit decodes and downscales row by row (Adam7 pass by pass) without holding the source
 * image; its pixels must be exactly those of a whole decode followed by seer_png_resize, for every
 * colour type, bit depth, tRNS, interlacing, shape and target size, including the Adam7 case that
 * keeps sums for the whole output and the one that decodes whole (output over 1/8 of the source). */
static void check_fit_same_as_resize(unsigned w, unsigned h, int depth, int ctype, int interlace, int with_trns,
                                     const unsigned *sides, size_t nsides) {
    int s = spp(ctype);
    uint16_t *samples = calloc((size_t)w * h * s, sizeof *samples);
    unsigned char plte[256 * 3], trns[256] = {0};
    int nplte = 0, ntrns = 0;
    uint32_t st = (uint32_t)(w * 977 + h * 13 + depth * 5 + ctype * 101 + interlace * 7 + with_trns);
    if (ctype == 3) {
        nplte = depth == 8 ? 200 : 1 << depth;
        for (int i = 0; i < nplte * 3; i++) plte[i] = (unsigned char)lcg(&st);
    }
    unsigned maxv = ctype == 3 ? (unsigned)nplte : 1u << depth;
    for (size_t i = 0; i < (size_t)w * h * s; i++) samples[i] = (uint16_t)(lcg(&st) % maxv);
    if (with_trns) {
        if (ctype == 3) {
            ntrns = nplte / 2 + 1;
            for (int i = 0; i < ntrns; i++) trns[i] = (unsigned char)(i * 37);
        } else {
            ntrns = ctype == 0 ? 2 : 6;
            for (int c = 0; c < ntrns / 2; c++) {
                trns[2 * c] = (unsigned char)(samples[c] >> 8);
                trns[2 * c + 1] = (unsigned char)samples[c];
            }
        }
    }
    ref_t r = {w, h, depth, ctype, interlace, samples, plte, nplte, trns, ntrns};
    buf_t file = ref_png(&r);
    seer_png_image_t full;
    seer_err_t err;
    cr_assert_eq(seer_png_decode(file.p, file.n, &full, &err), 0, "%s", err.msg);
    for (size_t k = 0; k < nsides; k++) {
        unsigned dw, dh, ow, oh;
        seer_png_fit_size(w, h, sides[k], &dw, &dh);
        unsigned char *out;
        size_t out_len;
        int rc = seer_png_fit(file.p, file.n, sides[k], 0, &out, &out_len, &ow, &oh, &err);
        cr_assert_eq(rc, 0, "%ux%u ctype %d depth %d interlace %d trns %d max_side %u: %s", w, h, ctype, depth,
                     interlace, with_trns, sides[k], err.msg);
        cr_assert(ow == dw && oh == dh, "%ux%u -> %ux%u, want %ux%u", w, h, ow, oh, dw, dh);
        if (dw == w && dh == h) {
            cr_assert(out == NULL && out_len == 0);
            continue;
        }
        unsigned char *want = malloc((size_t)dw * dh * full.channels);
        cr_assert_eq(seer_png_resize(full.pixels, w, h, full.channels, want, dw, dh, &err), 0, "%s", err.msg);
        seer_png_image_t got;
        cr_assert_eq(seer_png_decode(out, out_len, &got, &err), 0, "%s", err.msg);
        cr_assert(got.width == dw && got.height == dh && got.channels == full.channels);
        for (size_t i = 0; i < (size_t)dw * dh * full.channels; i++)
            cr_assert_eq(got.pixels[i], want[i],
                         "%ux%u ctype %d depth %d interlace %d trns %d max_side %u: byte %zu is %u, resize gives %u", w, h,
                         ctype, depth, interlace, with_trns, sides[k], i, got.pixels[i], want[i]);
        seer_png_image_free(&got);
        free(want);
        free(out);
    }
    seer_png_image_free(&full);
    free(file.p);
    free(samples);
}

Test(png, fit_gives_the_pixels_of_a_whole_decode_and_resize) {
    static const unsigned shapes[][2] = {{67, 45}, {45, 67}, {13, 11}, {1, 1}, {200, 3}, {9, 130}, {64, 64}};
    static const unsigned sides[] = {1, 2, 5, 8, 12, 16, 33, 64, 100, 1000};
    static const int depths[7][6] = {{1, 2, 4, 8, 16, 0}, {0}, {8, 16, 0}, {1, 2, 4, 8, 0}, {8, 16, 0}, {0}, {8, 16, 0}};
    for (int ctype = 0; ctype <= 6; ctype++)
        for (int di = 0; depths[ctype][di]; di++)
            for (int interlace = 0; interlace <= 1; interlace++)
                for (int trns = 0; trns <= (ctype == 0 || ctype == 2 || ctype == 3); trns++)
                    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
                        check_fit_same_as_resize(shapes[k][0], shapes[k][1], depths[ctype][di], ctype, interlace, trns,
                                                 sides, sizeof sides / sizeof sides[0]);
    LEAK_CHECK();
}

/* ---- the display limit: fit's time is bounded by the pixels it may decode ---------------------- */

/* fit's time is linear in the pixels a header claims, and a small file can claim many: 2^27
 * pixels of 16-bit RGBA zeros are a 1 MB file that took 3 s to fit. max_pixels refuses a claim
 * over it from the IHDR, before a row is decoded. */

/* A valid PNG of w x h zero samples (filter 0, zero pixels: its raw data is all zero bytes), plain or
 * Adam7, written with stored deflate blocks (so a 2^25-pixel 1-bit image is 4 MB). */
static buf_t zero_png(uint32_t w, uint32_t h, int depth, int ctype, int interlace) {
    static const unsigned adam7[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                         {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
    const int bits = spp(ctype) * depth;
    size_t n = 0;
    for (int p = 0; p < (interlace ? 7 : 1); p++) {
        unsigned x0 = interlace ? adam7[p][0] : 0, y0 = interlace ? adam7[p][1] : 0;
        unsigned dx = interlace ? adam7[p][2] : 1, dy = interlace ? adam7[p][3] : 1;
        size_t pw = w > x0 ? (w - x0 + dx - 1) / dx : 0, ph = h > y0 ? (h - y0 + dy - 1) / dy : 0;
        if (pw && ph) n += ph * (1 + (pw * bits + 7) / 8);
    }
    unsigned char *raw = calloc(n, 1);
    cr_assert(raw);
    buf_t z = {0}, out = {0};
    zlib_stored(&z, raw, n);
    free(raw);
    buf_put(&out, "\x89PNG\r\n\x1a\n", 8);
    unsigned char ihdr[13] = {(unsigned char)(w >> 24), (unsigned char)(w >> 16), (unsigned char)(w >> 8), (unsigned char)w,
                              (unsigned char)(h >> 24), (unsigned char)(h >> 16), (unsigned char)(h >> 8), (unsigned char)h,
                              (unsigned char)depth, (unsigned char)ctype, 0, 0, (unsigned char)interlace};
    put_chunk(&out, "IHDR", ihdr, 13);
    if (ctype == 3) put_chunk(&out, "PLTE", (const unsigned char *)"\0\0\0", 3);
    put_chunk(&out, "IDAT", z.p, z.n);
    put_chunk(&out, "IEND", NULL, 0);
    free(z.p);
    return out;
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

Test(png, fit_refuses_a_claim_over_max_pixels_before_decoding_a_row) {
    cr_assert_eq(SEER_PNG_DISPLAY_MAX_PIXELS, 1u << 25);
    for (int interlace = 0; interlace <= 1; interlace++) {
        /* one row more than 8192 x 4096 = 2^25: a valid 4 MB file, refused in microseconds */
        buf_t f = zero_png(8192, 4097, 1, 0, interlace);
        unsigned char *out = (unsigned char *)1;
        size_t len = 1;
        unsigned w, h;
        seer_err_t err;
        double t0 = cpu_seconds();
        int rc = seer_png_fit(f.p, f.n, 512, SEER_PNG_DISPLAY_MAX_PIXELS, &out, &len, &w, &h, &err);
        double dt = cpu_seconds() - t0;
        cr_assert_eq(rc, SEER_EINVAL, "interlace %d: %d %s", interlace, rc, rc < 0 ? err.msg : "");
        cr_assert(strstr(err.msg, "the PNG claims 8192x4097 pixels (33562624), more than the 33554432 this fit allows"),
                  "%s", err.msg);
        cr_assert(out == NULL && len == 0);
        cr_assert(w == 8192 && h == 4097, "the refusal reports the claim: %ux%u", w, h);
        cr_assert(dt < 0.02, "interlace %d: the refusal took %.3f s of CPU", interlace, dt);
        /* the same file under the decode limit (0, or a max_pixels above it) is decoded: the limit is the caller's */
        cr_assert_eq(seer_png_fit(f.p, f.n, 512, 0, &out, &len, &w, &h, &err), 0, "%s", err.msg);
        cr_assert(out && w == 512 && h == 256, "%ux%u", w, h);
        free(out);
        cr_assert_eq(seer_png_fit(f.p, f.n, 512, 0xffffffffu, &out, &len, &w, &h, &err), 0, "%s", err.msg);
        free(out);
        free(f.p);
    }
    /* refused from the header alone: the claim's body is 16 bytes, which a decode would find truncated */
    static const uint32_t cases[][2] = {{40000, 40000}, {11586, 11586}, {5793, 5793}, {2, 3}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        buf_t f = claims(cases[k][0], cases[k][1]);
        unsigned char *out;
        size_t len;
        unsigned w, h;
        seer_err_t err;
        unsigned limit = k == 3 ? 5 : SEER_PNG_DISPLAY_MAX_PIXELS;
        cr_assert_eq(seer_png_fit(f.p, f.n, 512, limit, &out, &len, &w, &h, &err), SEER_EINVAL);
        cr_assert(strstr(err.msg, "this fit allows (max_pixels); not decoded"), "%ux%u: %s", cases[k][0], cases[k][1],
                  err.msg);
        cr_assert(w == cases[k][0] && h == cases[k][1] && out == NULL);
        free(f.p);
    }
    /* an image that already fits max_side is still refused: its rows would be decoded to check them */
    buf_t f = zero_png(20, 10, 8, 2, 0);
    unsigned char *out;
    size_t len;
    unsigned w, h;
    seer_err_t err;
    cr_assert_eq(seer_png_fit(f.p, f.n, 512, 199, &out, &len, &w, &h, &err), SEER_EINVAL);
    cr_assert(strstr(err.msg, "20x10 pixels (200), more than the 199"), "%s", err.msg);
    cr_assert_eq(seer_png_fit(f.p, f.n, 512, 200, &out, &len, &w, &h, &err), 0, "%s", err.msg);
    cr_assert(out == NULL && w == 20 && h == 10);
    free(f.p);
    LEAK_CHECK();
}

Test(png, fit_of_an_image_at_max_pixels_still_works_in_a_fraction_of_a_second) {
    /* exactly 2^25 pixels (8192 x 4096, the display limit), plain and Adam7: fit to 512 px, the
     * pixels of the solid image, in about 0.2 s of CPU (1-bit gray, a 4 MB file of stored blocks;
     * 16-bit RGBA, the slowest kind, takes 0.75 s) */
    static const int kinds[][2] = {{1, 0}};
    for (int interlace = 0; interlace <= 1; interlace++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            buf_t f = zero_png(8192, 4096, kinds[k][0], kinds[k][1], interlace);
            unsigned char *out;
            size_t len;
            unsigned w, h;
            seer_err_t err;
            double t0 = cpu_seconds();
            int rc = seer_png_fit(f.p, f.n, 512, SEER_PNG_DISPLAY_MAX_PIXELS, &out, &len, &w, &h, &err);
            double dt = cpu_seconds() - t0;
            cr_assert_eq(rc, 0, "depth %d ctype %d interlace %d: %s", kinds[k][0], kinds[k][1], interlace, err.msg);
            cr_assert(out && w == 512 && h == 256, "%ux%u", w, h);
            cr_assert(dt < 2.0, "depth %d ctype %d interlace %d: %.2f s", kinds[k][0], kinds[k][1], interlace, dt);
            seer_png_image_t img;
            cr_assert_eq(seer_png_decode(out, len, &img, &err), 0, "%s", err.msg);
            size_t nb = (size_t)512 * 256 * img.channels;
            for (size_t i = 0; i < nb; i++) cr_assert_eq(img.pixels[i], 0, "byte %zu", i);
            seer_png_image_free(&img);
            free(out);
            free(f.p);
        }
    LEAK_CHECK();
}
