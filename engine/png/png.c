/* PNG encode and decode with libpng's classic API over memory buffers, the IHDR size peek, and
 * the area-averaging downscale behind seer_png_fit. libpng reports errors by longjmp: each
 * setjmp sits in a small *_run function whose state lives in a context owned by its caller, so
 * nothing the error path needs is an automatic variable changed after setjmp. */
#include "png.h"

#include <png.h> /* libpng's header: angle brackets skip this folder, so ours never shadows it */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void seer_png_image_free(seer_png_image_t *img) {
    if (!img) return;
    free(img->pixels);
    img->pixels = NULL;
}

static int check_dims(unsigned w, unsigned h, const char *what, seer_err_t *err) {
    if (w == 0 || h == 0) return seer_err_set(err, SEER_EINVAL, "%s is %ux%u pixels; both sides must be at least 1", what, w, h);
    if (w > SEER_PNG_MAX_SIDE || h > SEER_PNG_MAX_SIDE || (uint64_t)w * h > SEER_PNG_MAX_PIXELS)
        return seer_err_set(err, SEER_EINVAL,
                            "%s is %ux%u pixels; seer handles images of at most %u pixels per side and %u pixels in all",
                            what, w, h, SEER_PNG_MAX_SIDE, SEER_PNG_MAX_PIXELS);
    return SEER_OK;
}

/* fit's time is linear in the pixels the header claims (libpng inflates and unfilters every row,
 * fit sums it), so a caller bounds it with max_pixels, checked against the IHDR before a row is
 * read. */
static int check_claim(unsigned w, unsigned h, unsigned max_pixels, seer_err_t *err) {
    if ((uint64_t)w * h <= max_pixels) return SEER_OK;
    return seer_err_set(err, SEER_EINVAL,
                        "the PNG claims %ux%u pixels (%llu), more than the %u this fit allows (max_pixels); not decoded", w,
                        h, (unsigned long long)w * h, max_pixels);
}

/* libpng's own warnings (an sRGB profile it dislikes, an unknown chunk) go to stderr by
 * default; a library must not write to the user's terminal, and none of them stops a decode. */
static void on_png_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

/* ---- encode ---------------------------------------------------------------------------------- */

typedef struct encoder {
    char msg[256];
    unsigned char *buf;
    size_t len, cap;
} encoder_t;

static void enc_on_error(png_structp png, png_const_charp msg) {
    encoder_t *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void enc_write(png_structp png, png_bytep data, size_t n) {
    encoder_t *e = png_get_io_ptr(png);
    if (n > e->cap - e->len) {
        size_t cap = e->cap ? e->cap : 4096;
        while (cap - e->len < n) {
            if (cap > SIZE_MAX / 2) png_error(png, "PNG output too large");
            cap *= 2;
        }
        unsigned char *nb = realloc(e->buf, cap);
        if (!nb) png_error(png, "out of memory");
        e->buf = nb;
        e->cap = cap;
    }
    memcpy(e->buf + e->len, data, n);
    e->len += n;
}

static void enc_flush(png_structp png) { (void)png; }

static int encode_run(png_structp png, png_infop info, const unsigned char *pixels, unsigned w, unsigned h,
                      unsigned channels) {
    static const int color_types[] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                                      PNG_COLOR_TYPE_RGB_ALPHA};
    if (setjmp(png_jmpbuf(png))) return -1;
    png_set_IHDR(png, info, w, h, 8, color_types[channels], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    /* Tuned for what seer encodes most, plots (flat colours, long runs): without row filters
     * and at zlib level 3 a 640x400 RGB plot encodes in about 2 ms instead of 13 ms with
     * libpng's defaults (adaptive filters, level 6), for files about a third larger (24 KB
     * against 18 KB for a 1000-point line plot). Photos passed through fit grow more, which
     * costs bytes, not pixels. */
    png_set_filter(png, 0, PNG_FILTER_NONE);
    png_set_compression_level(png, 3);
    png_write_info(png, info);
    size_t stride = (size_t)w * channels;
    for (unsigned y = 0; y < h; y++) png_write_row(png, pixels + (size_t)y * stride);
    png_write_end(png, NULL);
    return 0;
}

int seer_png_encode(const unsigned char *pixels, unsigned width, unsigned height, unsigned channels,
                    unsigned char **out, size_t *out_len, seer_err_t *err) {
    *out = NULL;
    *out_len = 0;
    if (channels < 1 || channels > 4)
        return seer_err_set(err, SEER_EINVAL, "channels is %u; it must be 1 (gray), 2 (gray+alpha), 3 (RGB) or 4 (RGBA)",
                            channels);
    int rc = check_dims(width, height, "the image", err);
    if (rc < 0) return rc;
    if (!pixels) return seer_err_set(err, SEER_EINVAL, "no pixels to encode");

    encoder_t e = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &e, enc_on_error, on_png_warning);
    if (!png) return seer_err_set(err, SEER_ENOMEM, "out of memory creating a PNG encoder");
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return seer_err_set(err, SEER_ENOMEM, "out of memory creating a PNG encoder");
    }
    png_set_write_fn(png, &e, enc_write, enc_flush);
    rc = encode_run(png, info, pixels, width, height, channels);
    png_destroy_write_struct(&png, &info);
    if (rc < 0) {
        free(e.buf);
        return seer_err_set(err, strstr(e.msg, "memory") ? SEER_ENOMEM : SEER_EINVAL, "cannot encode PNG: %s", e.msg);
    }
    *out = e.buf;
    *out_len = e.len;
    return SEER_OK;
}

/* ---- decode ---------------------------------------------------------------------------------- */

typedef struct decoder {
    char msg[256];
    const unsigned char *data;
    size_t len, pos;
    int truncated;
    seer_png_image_t img;
    seer_err_t *err;
    int rc; /* set (with err) for refusals of ours, as opposed to libpng's errors */
} decoder_t;

static void dec_on_error(png_structp png, png_const_charp msg) {
    decoder_t *d = png_get_error_ptr(png);
    snprintf(d->msg, sizeof d->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void dec_read(png_structp png, png_bytep out, size_t n) {
    decoder_t *d = png_get_io_ptr(png);
    if (n > d->len - d->pos) {
        d->truncated = 1;
        png_error(png, "unexpected end of data");
    }
    memcpy(out, d->data + d->pos, n);
    d->pos += n;
}

static int decode_run(png_structp png, png_infop info, decoder_t *d) {
    if (setjmp(png_jmpbuf(png))) return -1;
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    d->rc = check_dims(w, h, "the PNG", d->err);
    if (d->rc < 0) return -1;

    /* Everything becomes 8-bit RGB or RGBA: palettes, low bit depths and tRNS expand, 16-bit
     * samples scale with rounding (not truncation), gray copies into R, G and B. */
    png_set_expand(png);
    png_set_scale_16(png);
    png_set_gray_to_rgb(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    unsigned channels = png_get_channels(png, info);
    size_t stride = (size_t)w * channels;
    if ((channels != 3 && channels != 4) || png_get_rowbytes(png, info) != stride)
        png_error(png, "unexpected row layout after expansion");

    d->img.pixels = malloc(stride * h);
    if (!d->img.pixels) {
        d->rc = seer_err_set(d->err, SEER_ENOMEM, "out of memory decoding a %ux%u PNG", (unsigned)w, (unsigned)h);
        return -1;
    }
    d->img.width = w;
    d->img.height = h;
    d->img.channels = channels;
    /* Row by row, pass by pass: libpng merges each Adam7 pass into the rows already there, so no
     * array of row pointers is needed. */
    for (int p = 0; p < passes; p++)
        for (png_uint_32 y = 0; y < h; y++) png_read_row(png, d->img.pixels + (size_t)y * stride, NULL);
    /* Reads up to IEND so that a file cut after its image data, or with a bad CRC in a later
     * critical chunk, is reported rather than half-accepted. */
    png_read_end(png, NULL);
    return 0;
}

int seer_png_decode(const void *data, size_t len, seer_png_image_t *img, seer_err_t *err) {
    memset(img, 0, sizeof *img);
    if (!data || len < 8) return seer_err_set(err, SEER_EPARSE, "not a PNG image: %zu bytes, shorter than the 8-byte PNG signature", data ? len : 0);
    if (png_sig_cmp((png_const_bytep)data, 0, 8) != 0)
        return seer_err_set(err, SEER_EPARSE, "not a PNG image: the first 8 bytes are not the PNG signature");

    decoder_t d = {.data = data, .len = len, .err = err};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &d, dec_on_error, on_png_warning);
    if (!png) return seer_err_set(err, SEER_ENOMEM, "out of memory creating a PNG decoder");
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return seer_err_set(err, SEER_ENOMEM, "out of memory creating a PNG decoder");
    }
    png_set_read_fn(png, &d, dec_read);
    /* Our own check_dims gives the clearer message; libpng's stricter default user limit
     * (1000000 per side) would otherwise answer first with its own wording. */
    png_set_user_limits(png, 0x7fffffffu, 0x7fffffffu);
    int rc = decode_run(png, info, &d);
    png_destroy_read_struct(&png, &info, NULL);
    if (rc < 0) {
        seer_png_image_free(&d.img);
        if (d.rc < 0) return d.rc;
        if (d.truncated)
            return seer_err_set(err, SEER_EPARSE, "truncated PNG: the data ends after %zu bytes, before the image and its IEND chunk are complete", len);
        return seer_err_set(err, SEER_EPARSE, "corrupt PNG: %s", d.msg);
    }
    *img = d.img;
    return SEER_OK;
}

/* ---- size from the header ---------------------------------------------------------------------- */

/* The PNG chunk CRC (ISO 3309, reflected 0xEDB88320). Bitwise: it only ever sees IHDR's 17
 * bytes, and zlib's crc32 is not linked into seer directly. */
static uint32_t crc32_bytes(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int seer_png_size(const void *data, size_t len, unsigned *width, unsigned *height, seer_err_t *err) {
    const unsigned char *p = data;
    *width = *height = 0;
    if (!p || len < 8 || png_sig_cmp(p, 0, 8) != 0)
        return seer_err_set(err, SEER_EPARSE, "not a PNG image: the first 8 bytes are not the PNG signature");
    if (len < 33) return seer_err_set(err, SEER_EPARSE, "truncated PNG: %zu bytes end before the IHDR header does", len);
    if (be32(p + 8) != 13 || memcmp(p + 12, "IHDR", 4) != 0)
        return seer_err_set(err, SEER_EPARSE, "corrupt PNG: the first chunk is not a 13-byte IHDR");
    if (crc32_bytes(p + 12, 17) != be32(p + 29)) return seer_err_set(err, SEER_EPARSE, "corrupt PNG: IHDR CRC mismatch");
    uint32_t w = be32(p + 16), h = be32(p + 20);
    if (w == 0 || h == 0 || w > 0x7fffffffu || h > 0x7fffffffu)
        return seer_err_set(err, SEER_EPARSE, "corrupt PNG: IHDR says %ux%u pixels", (unsigned)w, (unsigned)h);
    *width = w;
    *height = h;
    return SEER_OK;
}

/* ---- resize and fit ---------------------------------------------------------------------------- */

void seer_png_fit_size(unsigned width, unsigned height, unsigned max_side, unsigned *out_w, unsigned *out_h) {
    if (max_side == 0) max_side = 1;
    *out_w = width;
    *out_h = height;
    if (width <= max_side && height <= max_side) return;
    unsigned long_side = width >= height ? width : height, short_side = width >= height ? height : width;
    uint64_t s = ((uint64_t)short_side * max_side + long_side / 2) / long_side;
    if (s == 0) s = 1;
    if (width >= height) {
        *out_w = max_side;
        *out_h = (unsigned)s;
    } else {
        *out_w = (unsigned)s;
        *out_h = max_side;
    }
}

int seer_png_resize(const unsigned char *src, unsigned sw, unsigned sh, unsigned ch, unsigned char *dst, unsigned dw,
                    unsigned dh, seer_err_t *err) {
    if (ch < 1 || ch > 4) return seer_err_set(err, SEER_EINVAL, "channels is %u; it must be 1 to 4", ch);
    int rc = check_dims(sw, sh, "the source image", err);
    if (rc < 0) return rc;
    rc = check_dims(dw, dh, "the resized image", err);
    if (rc < 0) return rc;
    if (!src || !dst) return seer_err_set(err, SEER_EINVAL, "resize needs source and destination pixels");

    /* Exact integer weights: along x, source column i spans [i*dw, (i+1)*dw) and output column
     * x spans [x*sw, (x+1)*sw), so each overlap is an integer and an output pixel's weights sum
     * to sw*sh; the only rounding is the final division. Sums stay below 2^27 * 255 * 255. */
    uint64_t *acc = calloc((size_t)dw * ch, sizeof *acc);
    if (!acc) return seer_err_set(err, SEER_ENOMEM, "out of memory resizing to %ux%u", dw, dh);
    const int alpha = (ch == 2 || ch == 4) ? (int)ch - 1 : -1;
    const uint64_t total = (uint64_t)sw * sh;
    const size_t sstride = (size_t)sw * ch;

    for (unsigned oy = 0; oy < dh; oy++) {
        memset(acc, 0, (size_t)dw * ch * sizeof *acc);
        uint64_t y0 = (uint64_t)oy * sh, y1 = y0 + sh;
        for (uint64_t sy = y0 / dh; sy <= (y1 - 1) / dh; sy++) {
            uint64_t lo = sy * dh > y0 ? sy * dh : y0, hi = (sy + 1) * dh < y1 ? (sy + 1) * dh : y1;
            uint64_t wy = hi - lo;
            const unsigned char *row = src + sy * sstride;
            for (unsigned ox = 0; ox < dw; ox++) {
                uint64_t x0 = (uint64_t)ox * sw, x1 = x0 + sw;
                uint64_t *a = acc + (size_t)ox * ch;
                for (uint64_t sx = x0 / dw; sx <= (x1 - 1) / dw; sx++) {
                    uint64_t l = sx * dw > x0 ? sx * dw : x0, r = (sx + 1) * dw < x1 ? (sx + 1) * dw : x1;
                    uint64_t w = (r - l) * wy;
                    const unsigned char *px = row + sx * ch;
                    if (alpha < 0) {
                        for (unsigned c = 0; c < ch; c++) a[c] += w * px[c];
                    } else {
                        uint64_t wa = w * px[alpha];
                        a[alpha] += wa;
                        for (int c = 0; c < alpha; c++) a[c] += wa * px[c];
                    }
                }
            }
        }
        unsigned char *out = dst + (size_t)oy * dw * ch;
        for (unsigned ox = 0; ox < dw; ox++) {
            const uint64_t *a = acc + (size_t)ox * ch;
            unsigned char *o = out + (size_t)ox * ch;
            if (alpha < 0) {
                for (unsigned c = 0; c < ch; c++) o[c] = (unsigned char)((a[c] + total / 2) / total);
            } else {
                uint64_t wa = a[alpha];
                o[alpha] = (unsigned char)((wa + total / 2) / total);
                for (int c = 0; c < alpha; c++) o[c] = wa ? (unsigned char)((a[c] + wa / 2) / wa) : 0;
            }
        }
    }
    free(acc);
    return SEER_OK;
}

/* ---- fit: decode and downscale row by row ------------------------------------------------------ */

/* seer_png_fit never holds the source image. Rows are read one at a time into a single buffer and
 * summed into the output rows they cover, with the exact integer weights of seer_png_resize (the
 * sums are the same integers, added in another order, so the result is bit for bit the same).
 * A file that inflates to 2^27 pixels (a 16 KB "decompression bomb") used to cost 400-540 MB of
 * pixels for a 512-px answer; now it costs one source row, two output rows of sums and the
 * output. The work stays linear in the source's pixels, which check_dims bounds. */
typedef struct fitter {
    unsigned sw, sh, dw, dh, ch;
    int alpha;             /* index of the alpha channel, -1 without one */
    uint64_t *hrow;        /* dw * ch: one source row summed along x */
    uint64_t *acc;         /* nrows * dw * ch: output rows being summed; row oy in slot oy % nrows */
    unsigned nrows;        /* 2 when rows come in order; dh for Adam7, whose passes revisit rows */
    unsigned next_out;     /* the first output row not yet written */
    unsigned char *out;    /* dw * dh * ch: the result */
} fitter_t;

static void fit_add(uint64_t *h, const unsigned char *px, uint64_t w, unsigned ch, int alpha) {
    if (alpha < 0) {
        for (unsigned c = 0; c < ch; c++) h[c] += w * px[c];
    } else {
        uint64_t wa = w * px[alpha];
        h[alpha] += wa;
        for (int c = 0; c < alpha; c++) h[c] += wa * px[c];
    }
}

/* Writes output row oy from its sums (seer_png_resize's final division) and clears its slot. */
static void fit_finish_row(fitter_t *f, unsigned oy) {
    uint64_t *a0 = f->acc + (size_t)(oy % f->nrows) * f->dw * f->ch;
    const uint64_t total = (uint64_t)f->sw * f->sh;
    unsigned char *out = f->out + (size_t)oy * f->dw * f->ch;
    for (unsigned ox = 0; ox < f->dw; ox++) {
        const uint64_t *a = a0 + (size_t)ox * f->ch;
        unsigned char *o = out + (size_t)ox * f->ch;
        if (f->alpha < 0) {
            for (unsigned c = 0; c < f->ch; c++) o[c] = (unsigned char)((a[c] + total / 2) / total);
        } else {
            uint64_t wa = a[f->alpha];
            o[f->alpha] = (unsigned char)((wa + total / 2) / total);
            for (int c = 0; c < f->alpha; c++) o[c] = wa ? (unsigned char)((a[c] + wa / 2) / wa) : 0;
        }
    }
    memset(a0, 0, (size_t)f->dw * f->ch * sizeof *a0);
}

/* Adds one source row: ncols pixels at x = x0, x0 + xstep, ... of source row y. A source pixel
 * spans [x*dw, (x+1)*dw) and output column ox spans [ox*sw, (ox+1)*sw); as dw <= sw a pixel
 * meets at most two columns, and likewise a row at most two output rows. */
static void fit_add_row(fitter_t *f, const unsigned char *row, unsigned ncols, unsigned y, unsigned x0, unsigned xstep) {
    const unsigned ch = f->ch;
    memset(f->hrow, 0, (size_t)f->dw * ch * sizeof *f->hrow);
    uint64_t pos = (uint64_t)x0 * f->dw, step = (uint64_t)xstep * f->dw;
    uint64_t ox = pos / f->sw, edge = (ox + 1) * f->sw;
    for (unsigned i = 0; i < ncols; i++, pos += step) {
        while (edge <= pos) ox++, edge += f->sw;
        const unsigned char *px = row + (size_t)i * ch;
        uint64_t end = pos + f->dw;
        if (end <= edge) {
            fit_add(f->hrow + ox * ch, px, f->dw, ch, f->alpha);
        } else {
            fit_add(f->hrow + ox * ch, px, edge - pos, ch, f->alpha);
            fit_add(f->hrow + (ox + 1) * ch, px, end - edge, ch, f->alpha);
        }
    }
    uint64_t y0 = (uint64_t)y * f->dh, y1 = y0 + f->dh;
    unsigned oy = (unsigned)(y0 / f->sh);
    uint64_t yedge = (uint64_t)(oy + 1) * f->sh;
    const size_t n = (size_t)f->dw * ch;
    uint64_t *a = f->acc + (size_t)(oy % f->nrows) * n;
    if (y1 <= yedge) {
        for (size_t k = 0; k < n; k++) a[k] += f->dh * f->hrow[k];
    } else {
        uint64_t *b = f->acc + (size_t)((oy + 1) % f->nrows) * n, wa = yedge - y0, wb = y1 - yedge;
        for (size_t k = 0; k < n; k++) a[k] += wa * f->hrow[k], b[k] += wb * f->hrow[k];
    }
}

typedef struct fit_ctx {
    decoder_t d;
    unsigned max_side, max_pixels;
    unsigned char *row;
    fitter_t f;
    int fits; /* the image already fits: rows are read (checked) and dropped */
} fit_ctx_t;

static int fit_run(png_structp png, png_infop info, fit_ctx_t *x) {
    if (setjmp(png_jmpbuf(png))) return -1;
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    x->d.rc = check_dims(w, h, "the PNG", x->d.err);
    if (x->d.rc < 0) return -1;
    x->d.rc = check_claim(w, h, x->max_pixels, x->d.err); /* seer_png_fit checked it already: the same IHDR */
    if (x->d.rc < 0) return -1;
    png_set_expand(png);
    png_set_scale_16(png);
    png_set_gray_to_rgb(png);
    /* No png_set_interlace_handling: each Adam7 pass then arrives as its own smaller image, whose
     * pixels are added where they belong, so no full-size buffer is needed to merge passes. */
    const int interlaced = png_get_interlace_type(png, info) != PNG_INTERLACE_NONE;
    png_read_update_info(png, info);
    unsigned channels = png_get_channels(png, info);
    size_t stride = (size_t)w * channels;
    if ((channels != 3 && channels != 4) || png_get_rowbytes(png, info) != stride)
        png_error(png, "unexpected row layout after expansion");
    fitter_t *f = &x->f;
    seer_png_fit_size(w, h, x->max_side, &f->dw, &f->dh);
    f->sw = w, f->sh = h, f->ch = channels, f->alpha = channels == 4 ? 3 : -1;
    x->fits = f->dw == w && f->dh == h;
    x->row = malloc(stride);
    if (!x->row) goto nomem;
    if (!x->fits) {
        f->nrows = interlaced ? f->dh : 2;
        f->hrow = malloc((size_t)f->dw * channels * sizeof *f->hrow);
        f->acc = calloc((size_t)f->nrows * f->dw * channels, sizeof *f->acc);
        f->out = malloc((size_t)f->dw * f->dh * channels);
        if (!f->hrow || !f->acc || !f->out) goto nomem;
    }
    for (int p = 0; p < (interlaced ? 7 : 1); p++) {
        unsigned cols = interlaced ? PNG_PASS_COLS(w, p) : w, rows = interlaced ? PNG_PASS_ROWS(h, p) : h;
        if (cols == 0 || rows == 0) continue; /* libpng skips empty passes too */
        unsigned x0 = interlaced ? PNG_PASS_START_COL(p) : 0, xstep = interlaced ? PNG_PASS_COL_OFFSET(p) : 1;
        unsigned y0 = interlaced ? PNG_PASS_START_ROW(p) : 0, ystep = interlaced ? PNG_PASS_ROW_OFFSET(p) : 1;
        for (unsigned r = 0; r < rows; r++) {
            png_read_row(png, x->row, NULL);
            if (x->fits) continue;
            unsigned y = y0 + r * ystep;
            if (!interlaced) /* rows above this one's first output row are complete */
                for (unsigned first = (unsigned)((uint64_t)y * f->dh / f->sh); f->next_out < first; f->next_out++)
                    fit_finish_row(f, f->next_out);
            fit_add_row(f, x->row, cols, y, x0, xstep);
        }
    }
    /* as seer_png_decode: a file cut after its image data, or with a bad CRC later, is an error */
    png_read_end(png, NULL);
    if (!x->fits)
        for (; f->next_out < f->dh; f->next_out++) fit_finish_row(f, f->next_out);
    return 0;
nomem:
    x->d.rc = seer_err_set(x->d.err, SEER_ENOMEM, "out of memory fitting a %ux%u PNG into %ux%u", (unsigned)w, (unsigned)h,
                           f->dw, f->dh);
    return -1;
}

int seer_png_fit(const void *data, size_t len, unsigned max_side, unsigned max_pixels, unsigned char **out,
                 size_t *out_len, unsigned *width, unsigned *height, seer_err_t *err) {
    *out = NULL;
    *out_len = 0;
    *width = *height = 0;
    if (max_side < 1) return seer_err_set(err, SEER_EINVAL, "max_side is 0; it must be at least 1");
    if (max_pixels == 0 || max_pixels > SEER_PNG_MAX_PIXELS) max_pixels = SEER_PNG_MAX_PIXELS;
    /* The claim is refused from the IHDR alone, before libpng reads a byte past it: a refusal costs
     * microseconds whatever the file claims. A file whose IHDR seer_png_size cannot read goes on to
     * libpng, which gives the reason (and fit_run checks the claim again after png_read_info). */
    unsigned w, h, dw, dh;
    int sized = seer_png_size(data, len, &w, &h, err) == SEER_OK;
    if (sized && max_pixels < SEER_PNG_MAX_PIXELS && (uint64_t)w * h > max_pixels) {
        *width = w;
        *height = h;
        return check_claim(w, h, max_pixels, err);
    }
    /* An Adam7 file revisits every output row in each pass, so its sums are kept for the whole
     * output (8 bytes a sample). When that is more than the decoded source itself (an output of
     * more than an eighth of the source's pixels), decoding it whole and resizing costs less. */
    if (sized && ((const unsigned char *)data)[28] != 0) {
        seer_png_fit_size(w, h, max_side, &dw, &dh);
        if ((dw != w || dh != h) && (uint64_t)dw * dh * 8 > (uint64_t)w * h) {
            seer_png_image_t img;
            int rc = seer_png_decode(data, len, &img, err);
            if (rc < 0) return rc;
            unsigned char *px = malloc((size_t)dw * dh * img.channels);
            if (!px) {
                seer_png_image_free(&img);
                return seer_err_set(err, SEER_ENOMEM, "out of memory resizing to %ux%u", dw, dh);
            }
            rc = seer_png_resize(img.pixels, img.width, img.height, img.channels, px, dw, dh, err);
            if (rc == SEER_OK) rc = seer_png_encode(px, dw, dh, img.channels, out, out_len, err);
            free(px);
            seer_png_image_free(&img);
            if (rc < 0) return rc;
            *width = dw;
            *height = dh;
            return SEER_OK;
        }
    }
    if (!data || len < 8) return seer_err_set(err, SEER_EPARSE, "not a PNG image: %zu bytes, shorter than the 8-byte PNG signature", data ? len : 0);
    if (png_sig_cmp((png_const_bytep)data, 0, 8) != 0)
        return seer_err_set(err, SEER_EPARSE, "not a PNG image: the first 8 bytes are not the PNG signature");
    fit_ctx_t x = {.d = {.data = data, .len = len, .err = err}, .max_side = max_side, .max_pixels = max_pixels};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &x.d, dec_on_error, on_png_warning);
    if (!png) return seer_err_set(err, SEER_ENOMEM, "out of memory creating a PNG decoder");
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return seer_err_set(err, SEER_ENOMEM, "out of memory creating a PNG decoder");
    }
    png_set_read_fn(png, &x.d, dec_read);
    png_set_user_limits(png, 0x7fffffffu, 0x7fffffffu);
    int rc = fit_run(png, info, &x);
    png_destroy_read_struct(&png, &info, NULL);
    free(x.row);
    free(x.f.hrow);
    free(x.f.acc);
    if (rc < 0) {
        free(x.f.out);
        if (x.d.rc < 0) return x.d.rc;
        if (x.d.truncated)
            return seer_err_set(err, SEER_EPARSE, "truncated PNG: the data ends after %zu bytes, before the image and its IEND chunk are complete", len);
        return seer_err_set(err, SEER_EPARSE, "corrupt PNG: %s", x.d.msg);
    }
    if (!x.fits) {
        rc = seer_png_encode(x.f.out, x.f.dw, x.f.dh, x.f.ch, out, out_len, err);
        free(x.f.out);
        if (rc < 0) return rc;
    }
    *width = x.f.dw;
    *height = x.f.dh;
    return SEER_OK;
}
