/* PNG images in memory: encode 8-bit pixels, decode any PNG libpng reads into 8-bit RGB/RGBA,
 * read the size from the header, and downscale to fit a maximum side (what an agent is sent).
 * Plots (lua/seer/plot.lua) and the notebook's display.image go through this; seer.core.png is
 * the Lua binding (lua_png.c). No temporary files: everything is a buffer. */
#ifndef SEER_PNG_H
#define SEER_PNG_H

#include <stddef.h>

#include "../seer.h"

/* Images larger than this are refused before any pixel memory is allocated, so a header that
 * claims 100000x100000 cannot make a process allocate 40 GB. 32768 px per side covers every
 * plot and photo seer is meant to handle; 2^27 pixels is 512 MB of RGBA. */
#define SEER_PNG_MAX_SIDE 32768u
#define SEER_PNG_MAX_PIXELS (1u << 27)

/* The most pixels an image shown to an agent may claim (seer_png_fit's max_pixels for the
 * notebook MCP tools, and the default of the Lua png.fit, so plot's image:fit too): 2^25 = 33.6 million, an 8K UHD frame (7680x4320) or a 30-megapixel
 * photo. fit's time is linear in the pixels the header claims, whatever the file's size (260 KB
 * of 16-bit RGBA zeros claim 2^25): on this project's 2-core VM, fit to 512 px of a solid-colour
 * PNG takes 0.15 s (1-bit gray) to 0.75 s (16-bit RGBA) at 2^25, against 0.56-3.0 s at the decode
 * limit of 2^27 (docs/mcp.md, "Images", has the table and the command). */
#define SEER_PNG_DISPLAY_MAX_PIXELS (1u << 25)

/* Pixels are row-major, top row first, `channels` bytes per pixel, no row padding:
 * 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA. */
typedef struct seer_png_image {
    unsigned width, height, channels;
    unsigned char *pixels; /* width * height * channels bytes; free() it (or seer_png_image_free) */
} seer_png_image_t;

void seer_png_image_free(seer_png_image_t *img);

/* Encodes 8-bit pixels (channels 1-4) as a PNG. *out is malloc'ed and the caller frees it. */
int seer_png_encode(const unsigned char *pixels, unsigned width, unsigned height, unsigned channels,
                    unsigned char **out, size_t *out_len, seer_err_t *err);

/* Decodes a PNG of any colour type, bit depth and interlacing into 8-bit RGB (channels = 3) or
 * RGBA (channels = 4, when the file has an alpha channel or a tRNS chunk): palettes and gray are
 * expanded, 16-bit samples are scaled (v * 255 / 65535, rounded). Samples are taken as stored:
 * no gamma or colour-profile conversion. Corrupt, truncated or oversized input is an error. */
int seer_png_decode(const void *data, size_t len, seer_png_image_t *img, seer_err_t *err);

/* Width and height from the IHDR chunk alone (signature, chunk type and CRC are checked; the
 * rest of the file is not read). */
int seer_png_size(const void *data, size_t len, unsigned *width, unsigned *height, seer_err_t *err);

/* The size an image of width x height gets when its longer side is brought down to max_side,
 * aspect kept (the shorter side rounded, at least 1). Unchanged when it already fits. */
void seer_png_fit_size(unsigned width, unsigned height, unsigned max_side, unsigned *out_w, unsigned *out_h);

/* Area-averaging resize (a box filter): each output pixel is the mean of the source area it
 * covers, source pixels cut by the area's edge counting by the fraction inside. With an alpha
 * channel (2 or 4 channels) colours are averaged weighted by alpha, so fully transparent pixels
 * do not darken their neighbours. dst holds dst_w * dst_h * channels bytes. */
int seer_png_resize(const unsigned char *src, unsigned src_w, unsigned src_h, unsigned channels,
                    unsigned char *dst, unsigned dst_w, unsigned dst_h, seer_err_t *err);

/* Decodes data and, when its longer side exceeds max_side, downscales it to seer_png_fit_size
 * (the pixels of seer_png_resize, exactly) and re-encodes it into *out (malloc'ed, the caller
 * frees it). When it already fits, *out is NULL and *out_len 0: the caller's bytes are the
 * answer, unchanged (and known to decode). *width and *height are the result's size either way.
 * The source image is never held: rows are decoded one at a time and summed into the output, so
 * memory is about one source row plus 2-8x the output, whatever the file claims (a 16 KB file
 * can claim 2^27 pixels); time is linear in the source's pixels.
 * max_pixels bounds that time: a header (IHDR) claiming more than max_pixels pixels is refused
 * (SEER_EINVAL, the message naming the claim and the limit) before any row is decoded or any
 * pixel memory allocated, plain or Adam7, and *width and *height are then the claimed size. 0
 * (or more than SEER_PNG_MAX_PIXELS) means the decode limit, SEER_PNG_MAX_PIXELS; images shown to
 * an agent use SEER_PNG_DISPLAY_MAX_PIXELS (the Lua png.fit's default). */
int seer_png_fit(const void *data, size_t len, unsigned max_side, unsigned max_pixels, unsigned char **out,
                 size_t *out_len, unsigned *width, unsigned *height, seer_err_t *err);

/* package.preload["seer.core.png"] (lua_png.c): encode, decode, fit, size. */
struct lua_State;
int seer_png_luaopen(struct lua_State *L);

#endif
