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

int seer_png_fit(const void *data, size_t len, unsigned max_side, unsigned char **out, size_t *out_len,
                 unsigned *width, unsigned *height, seer_err_t *err) {
    *out = NULL;
    *out_len = 0;
    *width = *height = 0;
    if (max_side < 1) return seer_err_set(err, SEER_EINVAL, "max_side is 0; it must be at least 1");
    seer_png_image_t img;
    int rc = seer_png_decode(data, len, &img, err);
    if (rc < 0) return rc;
    unsigned dw, dh;
    seer_png_fit_size(img.width, img.height, max_side, &dw, &dh);
    if (dw == img.width && dh == img.height) {
        seer_png_image_free(&img);
        *width = dw;
        *height = dh;
        return SEER_OK;
    }
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
