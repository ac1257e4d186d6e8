/* seer.core.png: the Lua face of engine/png. Pixels travel as Lua strings (row-major, 8-bit,
 * no padding), so plots built in LuaJIT ffi buffers and files read with seer.read_file pass
 * through without conversion. Errors name the function and the argument to fix. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>

#include "png.h"

/* An integer argument in [lo, hi], or a Lua error that names it and shows what was given. */
static unsigned check_uint(lua_State *L, int idx, const char *fn, const char *name, unsigned lo, unsigned hi) {
    if (lua_type(L, idx) != LUA_TNUMBER)
        luaL_error(L, "%s: %s must be an integer from %u to %u (got %s)", fn, name, lo, hi, luaL_typename(L, idx));
    lua_Number v = lua_tonumber(L, idx);
    if (!(v >= lo && v <= hi) || v != floor(v))
        luaL_error(L, "%s: %s must be an integer from %u to %u (got %s)", fn, name, lo, hi, lua_tostring(L, idx));
    return (unsigned)v;
}

static const char *check_bytes(lua_State *L, int idx, const char *fn, const char *name, size_t *len) {
    if (lua_type(L, idx) != LUA_TSTRING)
        luaL_error(L, "%s: %s must be a string of bytes (got %s)", fn, name, luaL_typename(L, idx));
    return lua_tolstring(L, idx, len);
}

/* png.encode(width, height, channels, pixels) -> PNG bytes */
static int l_encode(lua_State *L) {
    const char *fn = "png.encode";
    unsigned w = check_uint(L, 1, fn, "width", 1, SEER_PNG_MAX_SIDE);
    unsigned h = check_uint(L, 2, fn, "height", 1, SEER_PNG_MAX_SIDE);
    unsigned ch = check_uint(L, 3, fn, "channels (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA)", 1, 4);
    size_t n;
    const char *px = check_bytes(L, 4, fn, "pixels", &n);
    size_t want = (size_t)w * h * ch;
    if (n != want)
        return luaL_error(L, "%s: pixels has %d bytes; a %dx%d image with %d channels needs %d (width * height * channels)",
                          fn, (int)n, (int)w, (int)h, (int)ch, (int)want);
    unsigned char *out;
    size_t out_len;
    seer_err_t err;
    if (seer_png_encode((const unsigned char *)px, w, h, ch, &out, &out_len, &err) < 0)
        return luaL_error(L, "%s: %s", fn, err.msg);
    lua_pushlstring(L, (const char *)out, out_len);
    free(out);
    return 1;
}

/* png.decode(bytes) -> {width, height, channels, pixels} */
static int l_decode(lua_State *L) {
    size_t n;
    const char *data = check_bytes(L, 1, "png.decode", "bytes", &n);
    seer_png_image_t img;
    seer_err_t err;
    if (seer_png_decode(data, n, &img, &err) < 0) return luaL_error(L, "png.decode: %s", err.msg);
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)img.width);
    lua_setfield(L, -2, "width");
    lua_pushinteger(L, (lua_Integer)img.height);
    lua_setfield(L, -2, "height");
    lua_pushinteger(L, (lua_Integer)img.channels);
    lua_setfield(L, -2, "channels");
    lua_pushlstring(L, (const char *)img.pixels, (size_t)img.width * img.height * img.channels);
    seer_png_image_free(&img);
    lua_setfield(L, -2, "pixels");
    return 1;
}

/* png.fit(bytes, max_side[, max_pixels]) -> bytes, width, height (the same string when it already
 * fits). max_pixels bounds the time: a header claiming more is refused before a row is decoded.
 * Its default is png.DISPLAY_MAX_PIXELS (2^25), the bound of every image shown (the notebook
 * tools, plot's image:fit); a caller that means to take longer passes up to png.MAX_PIXELS. */
static int l_fit(lua_State *L) {
    size_t n;
    const char *data = check_bytes(L, 1, "png.fit", "bytes", &n);
    unsigned max_side = check_uint(L, 2, "png.fit", "max_side", 1, SEER_PNG_MAX_SIDE);
    int dflt = lua_isnoneornil(L, 3);
    unsigned max_pixels = dflt ? SEER_PNG_DISPLAY_MAX_PIXELS
                               : check_uint(L, 3, "png.fit", "max_pixels", 1, SEER_PNG_MAX_PIXELS);
    unsigned char *out;
    size_t out_len;
    unsigned w, h;
    seer_err_t err;
    if (seer_png_fit(data, n, max_side, max_pixels, &out, &out_len, &w, &h, &err) < 0) {
        if (dflt && (uint64_t)w * h > max_pixels)
            return luaL_error(L, "png.fit: %s (the default for images to show, png.DISPLAY_MAX_PIXELS: fit's time is "
                                 "linear in the pixels claimed; pass max_pixels, at most png.MAX_PIXELS = %u, to fit a "
                                 "larger one)",
                              err.msg, SEER_PNG_MAX_PIXELS);
        return luaL_error(L, "png.fit: %s", err.msg);
    }
    if (out) {
        lua_pushlstring(L, (const char *)out, out_len);
        free(out);
    } else {
        lua_pushvalue(L, 1);
    }
    lua_pushinteger(L, (lua_Integer)w);
    lua_pushinteger(L, (lua_Integer)h);
    return 3;
}

/* png.size(bytes) -> width, height (from the header alone) */
static int l_size(lua_State *L) {
    size_t n;
    const char *data = check_bytes(L, 1, "png.size", "bytes", &n);
    unsigned w, h;
    seer_err_t err;
    if (seer_png_size(data, n, &w, &h, &err) < 0) return luaL_error(L, "png.size: %s", err.msg);
    lua_pushinteger(L, (lua_Integer)w);
    lua_pushinteger(L, (lua_Integer)h);
    return 2;
}

int seer_png_luaopen(lua_State *L) {
    static const luaL_Reg funcs[] = {
        {"encode", l_encode}, {"decode", l_decode}, {"fit", l_fit}, {"size", l_size}, {NULL, NULL},
    };
    lua_newtable(L);
    luaL_register(L, NULL, funcs);
    lua_pushinteger(L, SEER_PNG_MAX_SIDE);
    lua_setfield(L, -2, "MAX_SIDE");
    lua_pushinteger(L, SEER_PNG_MAX_PIXELS);
    lua_setfield(L, -2, "MAX_PIXELS");
    lua_pushinteger(L, SEER_PNG_DISPLAY_MAX_PIXELS);
    lua_setfield(L, -2, "DISPLAY_MAX_PIXELS");
    return 1;
}
