--- seer.plot: small plots rendered to PNG inside the process: line, scatter, bar, hist and
--- heatmap. Pixels are drawn into a LuaJIT ffi byte buffer and encoded by seer.core.png (libpng),
--- so a plot takes milliseconds and needs no Python, no fonts on disk and no display. Every
--- function takes one table of options and returns an image {png = <bytes>, width, height} with
--- :save(path); tostring(img) is "<image 640x400 png>". Data may be Lua tables or seer tensors.
---
---   local plot = require "seer.plot"
---   plot.line{ x = {0, 4, 8}, y = {0.1, 0.4, 0.9}, title = "probe accuracy by layer" }:save("acc.png")
---@class seerplot
local M = {}

local ffi = require "ffi"
local bit = require "bit"
local corepng = require "seer.core.png"

local floor, ceil, abs, max, min, sqrt = math.floor, math.ceil, math.abs, math.max, math.min, math.sqrt
local huge = math.huge
local band, rshift = bit.band, bit.rshift

-- ---- errors -------------------------------------------------------------------------------
-- Checks deep inside the renderer raise a PlotError; the public entry point re-raises it as
-- "plot.<fn>: message" at the caller's line, so users see their own line, not this file's.

local PlotError = {}
local function fail(fmt, ...)
  error(setmetatable({ msg = fmt:format(...) }, PlotError), 0)
end

local function describe(v)
  local t = type(v)
  if t == "string" then return ("a string (%q)"):format(#v > 20 and (v:sub(1, 20) .. "...") or v) end
  if t == "nil" then return "nil" end
  if t == "boolean" or t == "number" then return ("%s (%s)"):format(t == "number" and "the number" or "a boolean", tostring(v)) end
  return "a " .. t
end

local tensor_mod
local function is_tensor(v)
  if type(v) ~= "userdata" then return false end
  if tensor_mod == nil then
    local ok, t = pcall(require, "seer.tensor")
    tensor_mod = ok and t or false
  end
  return tensor_mod and tensor_mod.is_tensor(v) or false
end

local function shape_of(t)
  return "[" .. table.concat(t:size(), ",") .. "]"
end

-- ---- the font -------------------------------------------------------------------------------
-- A 5x7 ASCII font with two descender rows (cell 6x11), drawn for seer in the style of the
-- classic 5x7 LCD/terminal fonts; it is original to this file and carries seer's licence. Each
-- glyph lists its rows top-down, '#' = ink; rows not listed are blank. Anything outside
-- printable ASCII (a UTF-8 character counts once) is drawn as a small box.

local GLYPH_SRC = {
  [" "] = {},
  ["!"] = { "..#..", "..#..", "..#..", "..#..", "..#..", ".....", "..#.." },
  ['"'] = { ".#.#.", ".#.#.", ".#.#." },
  ["#"] = { ".#.#.", ".#.#.", "#####", ".#.#.", "#####", ".#.#.", ".#.#." },
  ["$"] = { "..#..", ".####", "#.#..", ".###.", "..#.#", "####.", "..#.." },
  ["%"] = { "##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##" },
  ["&"] = { ".##..", "#..#.", "#.#..", ".#...", "#.#.#", "#..#.", ".##.#" },
  ["'"] = { "..#..", "..#..", ".#..." },
  ["("] = { "...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#." },
  [")"] = { ".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..." },
  ["*"] = { ".....", "..#..", "#.#.#", ".###.", "#.#.#", "..#..", "....." },
  ["+"] = { ".....", "..#..", "..#..", "#####", "..#..", "..#..", "....." },
  [","] = { ".....", ".....", ".....", ".....", ".....", "..#..", "..#..", ".#..." },
  ["-"] = { ".....", ".....", ".....", "####.", ".....", ".....", "....." },
  ["."] = { ".....", ".....", ".....", ".....", ".....", ".##..", ".##.." },
  ["/"] = { ".....", "....#", "...#.", "..#..", ".#...", "#....", "....." },
  ["0"] = { ".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###." },
  ["1"] = { "..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###." },
  ["2"] = { ".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####" },
  ["3"] = { "#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###." },
  ["4"] = { "...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#." },
  ["5"] = { "#####", "#....", "####.", "....#", "....#", "#...#", ".###." },
  ["6"] = { "..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###." },
  ["7"] = { "#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..." },
  ["8"] = { ".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###." },
  ["9"] = { ".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.." },
  [":"] = { ".....", ".##..", ".##..", ".....", ".##..", ".##..", "....." },
  [";"] = { ".....", ".##..", ".##..", ".....", ".##..", "..#..", ".#..." },
  ["<"] = { "...#.", "..#..", ".#...", "#....", ".#...", "..#..", "...#." },
  ["="] = { ".....", ".....", "#####", ".....", "#####", ".....", "....." },
  [">"] = { ".#...", "..#..", "...#.", "....#", "...#.", "..#..", ".#..." },
  ["?"] = { ".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.." },
  ["@"] = { ".###.", "#...#", "....#", ".##.#", "#.#.#", "#.#.#", ".###." },
  ["A"] = { ".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#" },
  ["B"] = { "####.", "#...#", "#...#", "####.", "#...#", "#...#", "####." },
  ["C"] = { ".###.", "#...#", "#....", "#....", "#....", "#...#", ".###." },
  ["D"] = { "###..", "#..#.", "#...#", "#...#", "#...#", "#..#.", "###.." },
  ["E"] = { "#####", "#....", "#....", "####.", "#....", "#....", "#####" },
  ["F"] = { "#####", "#....", "#....", "####.", "#....", "#....", "#...." },
  ["G"] = { ".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####" },
  ["H"] = { "#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#" },
  ["I"] = { ".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###." },
  ["J"] = { "..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.." },
  ["K"] = { "#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#" },
  ["L"] = { "#....", "#....", "#....", "#....", "#....", "#....", "#####" },
  ["M"] = { "#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#" },
  ["N"] = { "#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#" },
  ["O"] = { ".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###." },
  ["P"] = { "####.", "#...#", "#...#", "####.", "#....", "#....", "#...." },
  ["Q"] = { ".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#" },
  ["R"] = { "####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#" },
  ["S"] = { ".####", "#....", "#....", ".###.", "....#", "....#", "####." },
  ["T"] = { "#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.." },
  ["U"] = { "#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###." },
  ["V"] = { "#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.." },
  ["W"] = { "#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#." },
  ["X"] = { "#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#" },
  ["Y"] = { "#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.." },
  ["Z"] = { "#####", "....#", "...#.", "..#..", ".#...", "#....", "#####" },
  ["["] = { ".###.", ".#...", ".#...", ".#...", ".#...", ".#...", ".###." },
  ["\\"] = { ".....", "#....", ".#...", "..#..", "...#.", "....#", "....." },
  ["]"] = { ".###.", "...#.", "...#.", "...#.", "...#.", "...#.", ".###." },
  ["^"] = { "..#..", ".#.#.", "#...#" },
  ["_"] = { ".....", ".....", ".....", ".....", ".....", ".....", ".....", "#####" },
  ["`"] = { ".#...", "..#..", "...#." },
  ["a"] = { ".....", ".....", ".###.", "....#", ".####", "#...#", ".####" },
  ["b"] = { "#....", "#....", "#.##.", "##..#", "#...#", "#...#", "####." },
  ["c"] = { ".....", ".....", ".###.", "#....", "#....", "#...#", ".###." },
  ["d"] = { "....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####" },
  ["e"] = { ".....", ".....", ".###.", "#...#", "#####", "#....", ".###." },
  ["f"] = { "..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..." },
  ["g"] = { ".....", ".....", ".####", "#...#", "#...#", "#...#", ".####", "....#", ".###." },
  ["h"] = { "#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#" },
  ["i"] = { "..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###." },
  ["j"] = { "...#.", ".....", "..##.", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.." },
  ["k"] = { "#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#." },
  ["l"] = { ".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###." },
  ["m"] = { ".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#" },
  ["n"] = { ".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#" },
  ["o"] = { ".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###." },
  ["p"] = { ".....", ".....", "####.", "#...#", "#...#", "#...#", "####.", "#....", "#...." },
  ["q"] = { ".....", ".....", ".####", "#...#", "#...#", "#...#", ".####", "....#", "....#" },
  ["r"] = { ".....", ".....", "#.##.", "##..#", "#....", "#....", "#...." },
  ["s"] = { ".....", ".....", ".####", "#....", ".###.", "....#", "####." },
  ["t"] = { ".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##." },
  ["u"] = { ".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#" },
  ["v"] = { ".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.." },
  ["w"] = { ".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#." },
  ["x"] = { ".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#" },
  ["y"] = { ".....", ".....", "#...#", "#...#", "#...#", "#...#", ".####", "....#", ".###." },
  ["z"] = { ".....", ".....", "#####", "...#.", "..#..", ".#...", "#####" },
  ["{"] = { "...##", "..#..", "..#..", ".#...", "..#..", "..#..", "...##" },
  ["|"] = { "..#..", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.." },
  ["}"] = { "##...", "..#..", "..#..", "...#.", "..#..", "..#..", "##..." },
  ["~"] = { ".....", ".....", ".#...", "#.#.#", "...#.", ".....", "....." },
}
local BOX_SRC = { ".....", "#####", "#...#", "#...#", "#...#", "#...#", "#####" }

local GLYPH_W, GLYPH_H = 5, 9 -- ink box (7 rows above the baseline, 2 below)
local ADV = 6                   -- advance per character at scale 1
local LINE_H = 11

-- Each glyph becomes 9 row bitmasks, bit 4 = leftmost column.
local function compile_glyph(rows)
  local g = {}
  for r = 1, GLYPH_H do
    local s, bits = rows[r] or ".....", 0
    for c = 1, GLYPH_W do
      if s:sub(c, c) == "#" then bits = bits + 2 ^ (GLYPH_W - c) end
    end
    g[r] = bits
  end
  return g
end

local GLYPHS = {}
for ch, rows in pairs(GLYPH_SRC) do GLYPHS[ch:byte()] = compile_glyph(rows) end
local BOX = compile_glyph(BOX_SRC)

-- A string as a list of glyphs: one per UTF-8 sequence; tabs and newlines become spaces.
local function glyphs_of(s)
  s = tostring(s)
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = s:byte(i)
    local len = c < 0x80 and 1 or c >= 0xF0 and 4 or c >= 0xE0 and 3 or c >= 0xC0 and 2 or 1
    if c == 9 or c == 10 or c == 13 then c = 32 end
    out[#out + 1] = (len == 1 and GLYPHS[c]) or BOX
    i = i + len
  end
  return out
end

local function text_width(gl, scale)
  scale = scale or 1
  if #gl == 0 then return 0 end
  return (#gl * ADV - 1) * scale
end

-- The longest prefix of gl that fits in maxw pixels, ending in ".." when cut.
local function fit_text(gl, maxw, scale)
  if text_width(gl, scale) <= maxw then return gl end
  local out = {}
  local dot = GLYPHS[46]
  for i = 1, #gl do
    if text_width(out, scale) + (ADV * 3) * (scale or 1) > maxw then break end
    out[i] = gl[i]
  end
  if #out == 0 then return {} end
  out[#out + 1] = dot
  out[#out + 1] = dot
  return out
end

-- ---- the canvas -----------------------------------------------------------------------------
-- RGB bytes, row-major, origin top-left. Coordinates of shapes are continuous pixels: pixel
-- (i, j) covers [i, i+1) x [j, j+1).

local function new_canvas(w, h)
  local buf = ffi.new("uint8_t[?]", w * h * 3)
  ffi.fill(buf, w * h * 3, 255)
  return { w = w, h = h, buf = buf }
end

local function fill_rect(cv, x, y, w, h, c)
  local x0, y0 = max(0, floor(x)), max(0, floor(y))
  local x1, y1 = min(cv.w, floor(x + w)), min(cv.h, floor(y + h))
  local buf, cw = cv.buf, cv.w
  local r, g, b = c[1], c[2], c[3]
  for yy = y0, y1 - 1 do
    local i = (yy * cw + x0) * 3
    for _ = x0, x1 - 1 do
      buf[i], buf[i + 1], buf[i + 2] = r, g, b
      i = i + 3
    end
  end
end

local function blend(cv, x, y, c, a)
  if x < 0 or y < 0 or x >= cv.w or y >= cv.h then return end
  local buf, i = cv.buf, (y * cv.w + x) * 3
  local r, g, b = buf[i], buf[i + 1], buf[i + 2]
  buf[i] = r + (c[1] - r) * a + 0.5
  buf[i + 1] = g + (c[2] - g) * a + 0.5
  buf[i + 2] = b + (c[3] - b) * a + 0.5
end

-- Text with its top-left ink corner at (x, y). bold strikes every column twice.
local function draw_text(cv, x, y, gl, c, scale, bold)
  scale = scale or 1
  x, y = floor(x), floor(y)
  for k = 1, #gl do
    local g = gl[k]
    local gx = x + (k - 1) * ADV * scale
    for r = 1, GLYPH_H do
      local bits = g[r]
      if bits ~= 0 then
        for col = 0, GLYPH_W - 1 do
          if band(bits, rshift(16, col)) ~= 0 then
            fill_rect(cv, gx + col * scale, y + (r - 1) * scale, scale + (bold and 1 or 0), scale, c)
          end
        end
      end
    end
  end
end

-- Text turned 90 degrees counter-clockwise, read bottom to top: it starts at y and grows
-- upward, with the tops of the letters facing left and the ink starting at column x.
local function draw_text_up(cv, x, y, gl, c)
  x, y = floor(x), floor(y)
  for k = 1, #gl do
    local g = gl[k]
    local off = (k - 1) * ADV
    for r = 1, GLYPH_H do
      local bits = g[r]
      if bits ~= 0 then
        for col = 0, GLYPH_W - 1 do
          if band(bits, rshift(16, col)) ~= 0 then fill_rect(cv, x + r - 1, y - off - col - 1, 1, 1, c) end
        end
      end
    end
  end
end

-- ---- anti-aliased shapes through a coverage mask ------------------------------------------
-- A series is drawn into a float mask over the plot area (coverage = max over its segments
-- and markers), then composited once: where segments meet, the joint is not painted twice, so
-- lines keep an even colour and nothing is drawn outside the plot area.

local function new_mask(x, y, w, h)
  return { x = x, y = y, w = w, h = h, buf = ffi.new("float[?]", w * h), x0 = huge, y0 = huge, x1 = -1, y1 = -1 }
end

local function mask_touch(m, i0, j0, i1, j1)
  if i0 < m.x0 then m.x0 = i0 end
  if j0 < m.y0 then m.y0 = j0 end
  if i1 > m.x1 then m.x1 = i1 end
  if j1 > m.y1 then m.y1 = j1 end
end

-- Liang-Barsky: the part of segment a-b inside [lo, hi] on both axes, or nil.
local function clip(ax, ay, bx, by, xlo, ylo, xhi, yhi)
  local t0, t1 = 0, 1
  local dx, dy = bx - ax, by - ay
  local p = { -dx, dx, -dy, dy }
  local q = { ax - xlo, xhi - ax, ay - ylo, yhi - ay }
  for k = 1, 4 do
    if p[k] == 0 then
      if q[k] < 0 then return nil end
    else
      local t = q[k] / p[k]
      if p[k] < 0 then
        if t > t1 then return nil end
        if t > t0 then t0 = t end
      else
        if t < t0 then return nil end
        if t < t1 then t1 = t end
      end
    end
  end
  return ax + t0 * dx, ay + t0 * dy, ax + t1 * dx, ay + t1 * dy
end

-- A segment of half-width hw (pixels) from canvas point a to b, coverage from the exact
-- distance of each pixel centre to the segment.
local function mask_segment(m, ax, ay, bx, by, hw)
  ax, ay, bx, by = ax - m.x, ay - m.y, bx - m.x, by - m.y
  local reach = hw + 1
  ax, ay, bx, by = clip(ax, ay, bx, by, -reach, -reach, m.w + reach, m.h + reach)
  if not ax then return end
  local dx, dy = bx - ax, by - ay
  local len2 = dx * dx + dy * dy
  local buf, mw, mh = m.buf, m.w, m.h
  -- A band of half-width hw at slope <= 1 spans at most hw * sqrt(2) across the minor axis.
  local ext = hw * 1.5 + 1.5
  local xmajor = abs(dx) >= abs(dy)
  local a0, a1
  if xmajor then
    a0, a1 = max(0, floor(min(ax, bx) - reach)), min(mw - 1, ceil(max(ax, bx) + reach))
  else
    a0, a1 = max(0, floor(min(ay, by) - reach)), min(mh - 1, ceil(max(ay, by) + reach))
  end
  local lo_all, hi_all = huge, -1
  for a = a0, a1 do
    local ca = a + 0.5
    local cb
    if xmajor then
      local t = dx ~= 0 and (ca - ax) / dx or 0
      t = t < 0 and 0 or (t > 1 and 1 or t)
      cb = ay + t * dy
    else
      local t = dy ~= 0 and (ca - ay) / dy or 0
      t = t < 0 and 0 or (t > 1 and 1 or t)
      cb = ax + t * dx
    end
    local lim = xmajor and mh - 1 or mw - 1
    local b0, b1 = max(0, floor(cb - ext)), min(lim, ceil(cb + ext))
    if b0 < lo_all then lo_all = b0 end
    if b1 > hi_all then hi_all = b1 end
    for b = b0, b1 do
      local i, j = a, b
      if not xmajor then i, j = b, a end
      local px, py = i + 0.5 - ax, j + 0.5 - ay
      local u = len2 > 0 and (px * dx + py * dy) / len2 or 0
      u = u < 0 and 0 or (u > 1 and 1 or u)
      local ex, ey = px - u * dx, py - u * dy
      local cov = hw + 0.5 - sqrt(ex * ex + ey * ey)
      if cov > 0 then
        if cov > 1 then cov = 1 end
        local k = j * mw + i
        if cov > buf[k] then buf[k] = cov end
      end
    end
  end
  if a0 <= a1 and lo_all <= hi_all then
    if xmajor then mask_touch(m, a0, lo_all, a1, hi_all) else mask_touch(m, lo_all, a0, hi_all, a1) end
  end
end

local function mask_disc(m, cx, cy, r)
  cx, cy = cx - m.x, cy - m.y
  local i0, i1 = max(0, floor(cx - r - 1)), min(m.w - 1, ceil(cx + r + 1))
  local j0, j1 = max(0, floor(cy - r - 1)), min(m.h - 1, ceil(cy + r + 1))
  if i0 > i1 or j0 > j1 then return end
  local buf, mw = m.buf, m.w
  for j = j0, j1 do
    for i = i0, i1 do
      local ex, ey = i + 0.5 - cx, j + 0.5 - cy
      local cov = r + 0.5 - sqrt(ex * ex + ey * ey)
      if cov > 0 then
        if cov > 1 then cov = 1 end
        local k = j * mw + i
        if cov > buf[k] then buf[k] = cov end
      end
    end
  end
  mask_touch(m, i0, j0, i1, j1)
end

-- Paints colour c through the mask and clears it for the next series.
local function mask_flush(cv, m, c, alpha)
  alpha = alpha or 1
  local buf, mw = m.buf, m.w
  for j = m.y0, m.y1 do
    for i = m.x0, m.x1 do
      local k = j * mw + i
      local a = buf[k]
      if a > 0 then
        blend(cv, m.x + i, m.y + j, c, a * alpha)
        buf[k] = 0
      end
    end
  end
  m.x0, m.y0, m.x1, m.y1 = huge, huge, -1, -1
end

-- ---- colours --------------------------------------------------------------------------------

local INK = { 34, 34, 34 }
local FRAME = { 90, 90, 90 }
local GRID = { 233, 233, 233 }
local NOTE = { 170, 55, 30 }
local NAN_CELL = { 190, 190, 190 }
-- Tableau's ten categorical colours (matplotlib's default cycle): distinct and readable.
local PALETTE = {
  { 31, 119, 180 }, { 255, 127, 14 }, { 44, 160, 44 }, { 214, 39, 40 }, { 148, 103, 189 },
  { 140, 86, 75 }, { 227, 119, 194 }, { 127, 127, 127 }, { 188, 189, 34 }, { 23, 190, 207 },
}
M.palette = PALETTE

-- Colormap stops, interpolated linearly into 256 entries. viridis (perceptually uniform,
-- sequential; van der Walt & Smith, CC0) at 9 stops; RdBu (diverging) is ColorBrewer's 11-class
-- scheme: red for the low end, blue for the high end, near-white at the centre.
local CMAP_STOPS = {
  viridis = { "440154", "472d7b", "3b528b", "2c728e", "21918c", "28ae80", "5ec962", "addc30", "fde725" },
  rdbu = { "67001f", "b2182b", "d6604d", "f4a582", "fddbc7", "f7f7f7", "d1e5f0", "92c5de", "4393c3", "2166ac", "053061" },
}
local cmap_cache = {}
local function colormap(name)
  if cmap_cache[name] then return cmap_cache[name] end
  local stops = CMAP_STOPS[name]
  local rgb = {}
  for i, hex in ipairs(stops) do
    rgb[i] = { tonumber(hex:sub(1, 2), 16), tonumber(hex:sub(3, 4), 16), tonumber(hex:sub(5, 6), 16) }
  end
  local lut = {}
  for k = 0, 255 do
    local t = k / 255 * (#rgb - 1)
    local i = min(#rgb - 2, floor(t))
    local f = t - i
    local a, b = rgb[i + 1], rgb[i + 2]
    lut[k] = { floor(a[1] + (b[1] - a[1]) * f + 0.5), floor(a[2] + (b[2] - a[2]) * f + 0.5), floor(a[3] + (b[3] - a[3]) * f + 0.5) }
  end
  cmap_cache[name] = lut
  return lut
end

local function parse_color(arg, c)
  if type(c) == "string" then
    local r, g, b = c:match("^#(%x%x)(%x%x)(%x%x)$")
    if r then return { tonumber(r, 16), tonumber(g, 16), tonumber(b, 16) } end
  elseif type(c) == "table" and #c == 3 then
    local ok = true
    for k = 1, 3 do
      if type(c[k]) ~= "number" or not (c[k] >= 0 and c[k] <= 255) then ok = false end -- NaN fails too
    end
    if ok then return { floor(c[1] + 0.5), floor(c[2] + 0.5), floor(c[3] + 0.5) } end
  end
  fail('%s must be "#rrggbb" or {r, g, b} with components 0-255 (got %s)', arg, describe(c))
end

-- ---- input checking -----------------------------------------------------------------------

local function finite(v) return v == v and v ~= huge and v ~= -huge end

local function check_options(opts, allowed, example)
  if type(opts) ~= "table" or is_tensor(opts) then
    fail("takes one table of options, e.g. %s (got %s)", example, describe(opts))
  end
  for k in pairs(opts) do
    if type(k) ~= "string" or not allowed[k] then
      local names = {}
      for n in pairs(allowed) do names[#names + 1] = n end
      table.sort(names)
      if type(k) == "number" then
        fail("got a positional value; name it, e.g. %s; valid options: %s", example, table.concat(names, ", "))
      end
      fail("unknown option '%s'; valid options: %s", tostring(k), table.concat(names, ", "))
    end
  end
end

local function set_of(list)
  local s = {}
  for _, k in ipairs(list) do s[k] = true end
  return s
end

-- A list of numbers from a Lua list or a 1-D tensor (NaN and inf pass through).
local function numbers(arg, v)
  if is_tensor(v) then
    if v:dim() ~= 1 then
      fail("%s must be 1-D; got a tensor of shape %s (flatten it with t:view(-1) or pick a row with t:select(1, i))",
        arg, shape_of(v))
    end
    if v:numel() == 0 then fail("%s is empty; pass at least one value", arg) end
    return v:totable()
  end
  if type(v) ~= "table" then fail("%s must be a list of numbers or a 1-D tensor (got %s)", arg, describe(v)) end
  local n = #v
  if n == 0 and next(v) == nil then fail("%s is empty; pass at least one value", arg) end
  for i = 1, n do
    if type(v[i]) ~= "number" then fail("%s[%d] is %s; %s must hold only numbers", arg, i, describe(v[i]), arg) end
  end
  local count = 0
  for _ in pairs(v) do count = count + 1 end
  if count ~= n then fail("%s must be a list of numbers indexed 1..n without holes or named fields", arg) end
  return v
end

local function check_size(opts, w0, h0)
  local function one(name, v, def)
    if v == nil then return def end
    if type(v) ~= "number" or v ~= floor(v) or v < 100 or v > 4096 then
      fail("%s must be an integer number of pixels from 100 to 4096 (got %s)", name, describe(v))
    end
    return v
  end
  return one("width", opts.width, w0), one("height", opts.height, h0)
end

local function check_lim(name, v)
  if v == nil then return nil end
  if type(v) ~= "table" or type(v[1]) ~= "number" or type(v[2]) ~= "number" or not finite(v[1]) or not finite(v[2])
      or v[1] >= v[2] then
    fail("%s must be {low, high} with finite numbers, low < high (got %s)", name, describe(v))
  end
  return v
end

local function text_opt(opts, name)
  local v = opts[name]
  if v == nil then return nil end
  if type(v) ~= "string" and type(v) ~= "number" then fail("%s must be a string (got %s)", name, describe(v)) end
  return tostring(v)
end

-- "3 non-finite points skipped (y[2], y[5], y[9])"
local function skipped_note(count, what, where)
  if count == 0 then return nil end
  local shown = {}
  for k = 1, min(3, #where) do shown[k] = where[k] end
  return ("%d non-finite %s skipped (%s%s)"):format(count, count == 1 and what or (what .. "s"),
    table.concat(shown, ", "), #where > 3 and ", ..." or "")
end

-- ---- ticks ------------------------------------------------------------------------------------

-- Steps of 1, 2, 2.5 or 5 times a power of ten giving about `target` intervals over [lo, hi].
-- With integer set (x values that are layers or positions) the step is at least 1.
local function nice_ticks(lo, hi, target, integer)
  local span = hi - lo
  local raw = span / max(1, target)
  local mag = 10 ^ floor(math.log10(raw))
  local f = raw / mag
  local step = (f <= 1 and 1 or f <= 2 and 2 or f <= 2.5 and 2.5 or f <= 5 and 5 or 10) * mag
  if integer and step < 1 then step = 1 end
  if integer and step == 2.5 then step = 2 end
  local ticks = {}
  for k = ceil(lo / step - 1e-9), floor(hi / step + 1e-9) do
    local v = k * step
    if abs(v) < step * 1e-9 then v = 0 end
    ticks[#ticks + 1] = v
  end
  return ticks, step
end

-- The shortest labels that tell the ticks apart: fixed decimals for ordinary magnitudes, %g
-- (with exponents) for very large or very small ones.
local function tick_labels(ticks, step)
  local maxabs = 0
  for _, v in ipairs(ticks) do maxabs = max(maxabs, abs(v)) end
  local tol = step * 1e-6
  local function try(fmt)
    local out = {}
    for i, v in ipairs(ticks) do
      local s = fmt:format(v)
      if abs((tonumber(s) or huge) - v) > tol then return nil end
      if s:match("^%-0%.?0*$") then s = s:sub(2) end
      out[i] = s
    end
    return out
  end
  if maxabs < 1e6 and step >= 1e-4 then
    for d = 0, 10 do
      local out = try("%." .. d .. "f")
      if out then return out end
    end
  end
  for p = 1, 15 do
    local out = try("%." .. p .. "g")
    if out then return out end
  end
  local out = {}
  for i, v in ipairs(ticks) do out[i] = ("%.17g"):format(v) end
  return out
end

local function pad_range(lo, hi, frac)
  if lo == hi then
    local d = lo == 0 and 1 or abs(lo) * 0.1
    return lo - d, hi + d
  end
  local d = (hi - lo) * frac
  return lo - d, hi + d
end

-- ---- the image object -------------------------------------------------------------------

---@class seerimage
---@field png string the PNG file's bytes
---@field width integer
---@field height integer
---@field notes string[]|nil what the plot left out (non-finite points, values outside the range)
local Image = {}
Image.__index = Image
Image.__name = "seer.image"
Image.__tostring = function(self) return ("<image %dx%d png>"):format(self.width, self.height) end

---Writes the PNG to path atomically (temporary file, fsync, rename). Returns the image.
---@param path string
---@return seerimage
function Image:save(path)
  if type(path) ~= "string" then error("image:save: path must be a string (got " .. describe(path) .. ")", 2) end
  require("seer").write_file(path, self.png)
  return self
end

---The same picture shrunk (area averaging) so that neither side exceeds max_side; itself when
---it already fits. Its time is linear in the pixels the PNG's header claims, so an image claiming
---more than max_pixels (default png.DISPLAY_MAX_PIXELS, 2^25: an 8K frame, under a second) is
---refused from the header with an error naming its size; pass up to png.MAX_PIXELS (2^27) to
---fit a larger one (up to about 3 s).
---@param max_side integer
---@param max_pixels? integer
---@return seerimage
function Image:fit(max_side, max_pixels)
  local ok, bytes, w, h = pcall(corepng.fit, self.png, max_side, max_pixels)
  if not ok then error((tostring(bytes):gsub("^png%.fit", "image:fit")), 2) end
  if bytes == self.png then return self end
  return setmetatable({ png = bytes, width = w, height = h, notes = self.notes }, Image)
end

---Wraps PNG bytes (e.g. seer.read_file("x.png")) as an image; the size comes from the header.
---@param bytes string
---@return seerimage
function M.image(bytes)
  if type(bytes) ~= "string" then error("plot.image: bytes must be a string of PNG data (got " .. describe(bytes) .. ")", 2) end
  local ok, w, h = pcall(corepng.size, bytes)
  if not ok then error(tostring(w):gsub("^png%.size", "plot.image"), 2) end
  return setmetatable({ png = bytes, width = w, height = h }, Image)
end

---True for the images these functions return.
function M.is_image(v)
  return getmetatable(v) == Image
end

local function finish(cv, notes)
  local bytes = corepng.encode(cv.w, cv.h, 3, ffi.string(cv.buf, cv.w * cv.h * 3))
  return setmetatable({ png = bytes, width = cv.w, height = cv.h, notes = #notes > 0 and notes or nil }, Image)
end

-- ---- layout shared by the charts with axes ----------------------------------------------
-- Margins are measured from the text they hold: the title on top, tick labels and axis labels
-- left and below, notes at the very bottom.

local function draw_title(cv, title)
  if not title then return 12 end
  local gl = glyphs_of(title)
  local scale = text_width(gl, 2) <= cv.w - 16 and 2 or 1
  if scale == 1 then gl = fit_text(gl, cv.w - 16, 1) end
  draw_text(cv, (cv.w - text_width(gl, scale)) / 2, 8, gl, INK, scale, scale == 1)
  return 8 + GLYPH_H * scale + 8
end

local function draw_notes(cv, notes)
  for k, note in ipairs(notes) do
    local gl = fit_text(glyphs_of("note: " .. note), cv.w - 16, 1)
    draw_text(cv, 8, cv.h - 4 - (#notes - k + 1) * LINE_H, gl, NOTE)
  end
end

-- Legend box in the corner of the plot area that hides the least ink.
local function draw_legend(cv, area, entries)
  local rows = {}
  local lw = 0
  for k, e in ipairs(entries) do
    rows[k] = fit_text(glyphs_of(e.label), max(40, area.w / 2), 1)
    lw = max(lw, text_width(rows[k]))
  end
  local bw, bh = 8 + 20 + 6 + lw + 8, 6 + #entries * 13 + 3
  if bw > area.w - 8 or bh > area.h - 8 then return end
  local spots = {
    { area.x + area.w - bw - 6, area.y + 6 }, { area.x + 6, area.y + 6 },
    { area.x + area.w - bw - 6, area.y + area.h - bh - 6 }, { area.x + 6, area.y + area.h - bh - 6 },
  }
  local best, best_ink = spots[1], huge
  local buf, cw = cv.buf, cv.w
  for _, s in ipairs(spots) do
    local ink = 0
    for y = s[2], s[2] + bh - 1 do
      local i = (y * cw + s[1]) * 3
      for _ = 1, bw do
        if buf[i] < 200 or buf[i + 1] < 200 or buf[i + 2] < 200 then ink = ink + 1 end
        i = i + 3
      end
    end
    if ink < best_ink then best, best_ink = s, ink end
  end
  local x, y = best[1], best[2]
  fill_rect(cv, x, y, bw, bh, { 255, 255, 255 })
  fill_rect(cv, x, y, bw, 1, { 200, 200, 200 })
  fill_rect(cv, x, y + bh - 1, bw, 1, { 200, 200, 200 })
  fill_rect(cv, x, y, 1, bh, { 200, 200, 200 })
  fill_rect(cv, x + bw - 1, y, 1, bh, { 200, 200, 200 })
  for k, e in ipairs(entries) do
    local cy = y + 6 + (k - 1) * 13
    if e.kind == "line" then
      fill_rect(cv, x + 8, cy + 3, 20, 2, e.color)
    elseif e.kind == "marker" then
      local m = new_mask(x + 8, cy - 1, 20, 11)
      mask_disc(m, x + 18, cy + 4, 3)
      mask_flush(cv, m, e.color)
    else
      fill_rect(cv, x + 12, cy, 12, 8, e.color)
    end
    draw_text(cv, x + 8 + 20 + 6, cy, rows[k], INK)
  end
end

-- Renders a chart with a numeric y axis and either a numeric x axis (xlo, xhi) or categories
-- (xcats, a list of labels at 0 .. n-1). spec.draw(cv, X, Y, area) paints the data.
local function render_axes(opts, spec)
  local cv = new_canvas(spec.width, spec.height)
  local w, h = cv.w, cv.h
  local notes = spec.notes
  local title = text_opt(opts, "title")
  local xlabel, ylabel = text_opt(opts, "xlabel"), text_opt(opts, "ylabel")
  local top = draw_title(cv, title)
  local bottom = 5 + 4 + GLYPH_H + 6 + (xlabel and (GLYPH_H + 6) or 0) + #notes * LINE_H + 2
  local ph = h - top - bottom
  if ph < 30 then fail("height %d leaves no room for the plot; use height >= %d", h, top + bottom + 30) end

  local yticks, ystep = nice_ticks(spec.ylo, spec.yhi, max(2, floor(ph / 45)))
  local ylabels = tick_labels(yticks, ystep)
  local ylw = 0
  for k, s in ipairs(ylabels) do
    ylabels[k] = glyphs_of(s)
    ylw = max(ylw, text_width(ylabels[k]))
  end
  local left = 8 + (ylabel and (GLYPH_H + 8) or 0) + ylw + 5 + 4
  local right = 18
  local pw = w - left - right
  if pw < 30 then fail("width %d leaves no room for the plot; use width >= %d", w, left + right + 30) end
  local area = { x = left, y = top, w = pw, h = ph }

  local xlo, xhi, ylo, yhi = spec.xlo, spec.xhi, spec.ylo, spec.yhi
  local function X(v) return left + (v - xlo) / (xhi - xlo) * pw end
  local function Y(v) return top + (yhi - v) / (yhi - ylo) * ph end

  -- x ticks: numeric ticks thinned until their labels do not collide; categories every k-th
  local xticks, xlabels = {}, {}
  if spec.xcats then
    local n = #spec.xcats
    local slot = pw / n
    local gls, widest = {}, 0
    for k = 1, n do
      -- long labels are cut to 12 characters; crowded ones are thinned below, not cut further
      gls[k] = fit_text(glyphs_of(spec.xcats[k]), ADV * 12, 1)
      widest = max(widest, text_width(gls[k]))
    end
    local every = max(1, ceil((widest + 6) / slot))
    for k = 1, n, every do
      xticks[#xticks + 1] = k - 1
      xlabels[#xlabels + 1] = gls[k]
    end
  else
    local target = max(2, floor(pw / 70))
    while true do
      local t, step = nice_ticks(xlo, xhi, target, spec.xinteger)
      local labels = tick_labels(t, step)
      local widest = 0
      for k, s in ipairs(labels) do
        labels[k] = glyphs_of(s)
        widest = max(widest, text_width(labels[k]))
      end
      local spacing = #t > 1 and (X(t[2]) - X(t[1])) or pw
      if widest + 10 <= spacing or target <= 2 then
        xticks, xlabels = t, labels
        break
      end
      target = target - 1
    end
  end

  -- grid, then data, then the frame and labels over them
  if opts.grid ~= false then
    for _, v in ipairs(yticks) do fill_rect(cv, left, floor(Y(v)), pw, 1, GRID) end
    if not spec.xcats then
      for _, v in ipairs(xticks) do fill_rect(cv, floor(X(v)), top, 1, ph, GRID) end
    end
  end
  spec.draw(cv, X, Y, area)
  if spec.baseline and spec.baseline > ylo and spec.baseline < yhi then
    fill_rect(cv, left, floor(Y(spec.baseline)), pw, 1, FRAME)
  end
  fill_rect(cv, left - 1, top - 1, pw + 2, 1, FRAME)
  fill_rect(cv, left - 1, top + ph, pw + 2, 1, FRAME)
  fill_rect(cv, left - 1, top - 1, 1, ph + 2, FRAME)
  fill_rect(cv, left + pw, top - 1, 1, ph + 2, FRAME)

  for k, v in ipairs(yticks) do
    local y = floor(Y(v))
    fill_rect(cv, left - 5, y, 4, 1, FRAME)
    draw_text(cv, left - 5 - 4 - text_width(ylabels[k]), y - 3, ylabels[k], INK)
  end
  for k, v in ipairs(xticks) do
    local x = floor(X(v))
    fill_rect(cv, x, top + ph + 1, 1, 4, FRAME)
    local tw = text_width(xlabels[k])
    local tx = min(max(x - floor(tw / 2), 2), w - 2 - tw)
    draw_text(cv, tx, top + ph + 5 + 4, xlabels[k], INK)
  end
  if xlabel then
    local gl = fit_text(glyphs_of(xlabel), pw, 1)
    draw_text(cv, left + (pw - text_width(gl)) / 2, top + ph + 5 + 4 + GLYPH_H + 6, gl, INK)
  end
  if ylabel then
    local gl = fit_text(glyphs_of(ylabel), ph, 1)
    draw_text_up(cv, 8, top + (ph + text_width(gl)) / 2, gl, INK)
  end
  if spec.legend and #spec.legend > 0 then draw_legend(cv, area, spec.legend) end
  draw_notes(cv, notes)
  return finish(cv, notes)
end

-- ---- line and scatter ---------------------------------------------------------------------

local XY_OPTS = { "x", "y", "series", "label", "color", "title", "xlabel", "ylabel", "width", "height", "legend",
  "xlim", "ylim", "grid" }
local SERIES_KEYS = set_of({ "x", "y", "label", "color" })

local function make_series(yname, y, xname, x, label, color, k)
  local ys = numbers(yname, y)
  local xs
  if x ~= nil then
    xs = numbers(xname, x)
    if #xs ~= #ys then
      fail("%s has %d values but %s has %d; pass %s and %s of the same length", xname, #xs, yname, #ys, xname, yname)
    end
  else
    xs = {}
    for i = 1, #ys do xs[i] = i - 1 end -- positions are 0-based, as layers and tokens are
  end
  local bad, where = 0, {}
  for i = 1, #ys do
    if not (finite(xs[i]) and finite(ys[i])) then
      bad = bad + 1
      if #where < 4 then where[#where + 1] = (finite(ys[i]) and xname or yname) .. "[" .. i .. "]" end
    end
  end
  if bad == #ys then fail("%s has no finite values (%d values, all NaN or infinite)", yname, #ys) end
  if label ~= nil and type(label) ~= "string" and type(label) ~= "number" then
    fail("the label of series %d must be a string (got %s)", k, describe(label))
  end
  return {
    x = xs, y = ys, n = #ys, bad = bad, where = where, label = label and tostring(label),
    color = color ~= nil and parse_color(k > 1 and ("series[" .. k .. "].color") or "color", color)
        or PALETTE[(k - 1) % #PALETTE + 1],
  }
end

local function gather_series(fn, opts)
  local list = {}
  if opts.series ~= nil then
    if opts.y ~= nil or opts.x ~= nil then fail("pass either y (and x) or series, not both") end
    local s = opts.series
    if type(s) ~= "table" or is_tensor(s) or #s == 0 then
      fail("series must be a non-empty list of {x = ..., y = ..., label = ...} tables (got %s)", describe(s))
    end
    for k, e in ipairs(s) do
      if type(e) ~= "table" or is_tensor(e) then
        fail("series[%d] must be a table {x = ..., y = ..., label = ...} (got %s)", k, describe(e))
      end
      for key in pairs(e) do
        if not SERIES_KEYS[key] then fail("series[%d] has unknown field '%s'; valid fields: color, label, x, y", k, tostring(key)) end
      end
      if e.y == nil then fail("series[%d] needs y (a list of numbers or a 1-D tensor)", k) end
      list[k] = make_series(("series[%d].y"):format(k), e.y, ("series[%d].x"):format(k), e.x, e.label, e.color, k)
    end
  else
    if opts.y == nil then
      fail("needs y (a list of numbers or a 1-D tensor), e.g. plot.%s{ y = {0.1, 0.4, 0.9} }, or series = {...}", fn)
    end
    list[1] = make_series("y", opts.y, "x", opts.x, opts.label, opts.color, 1)
  end
  return list
end

local function xy_chart(fn, opts, extra_opts, paint)
  local allowed = set_of(XY_OPTS)
  for _, k in ipairs(extra_opts) do allowed[k] = true end
  check_options(opts, allowed, ("plot.%s{ x = {0, 1, 2}, y = {0.1, 0.4, 0.9} }"):format(fn))
  local width, height = check_size(opts, 640, 400)
  local series = gather_series(fn, opts)
  local xlim, ylim = check_lim("xlim", opts.xlim), check_lim("ylim", opts.ylim)
  local xlo, xhi, ylo, yhi = huge, -huge, huge, -huge
  local notes, legend = {}, {}
  local xinteger = true
  for _, s in ipairs(series) do
    for i = 1, s.n do
      local x, y = s.x[i], s.y[i]
      if finite(x) and finite(y) then
        if x < xlo then xlo = x end
        if x > xhi then xhi = x end
        if y < ylo then ylo = y end
        if y > yhi then yhi = y end
        if x ~= floor(x) then xinteger = false end
      end
    end
    local note = skipped_note(s.bad, "point", s.where)
    if note then notes[#notes + 1] = note end
  end
  xlo, xhi = pad_range(xlo, xhi, 0.04)
  ylo, yhi = pad_range(ylo, yhi, 0.05)
  if xlim then xlo, xhi = xlim[1], xlim[2] end
  if ylim then ylo, yhi = ylim[1], ylim[2] end
  local show_legend = opts.legend
  if show_legend == nil then
    show_legend = #series > 1 or series[1].label ~= nil
  end
  if show_legend then
    for k, s in ipairs(series) do
      legend[k] = { label = s.label or (#series > 1 and ("series " .. k) or "y"), color = s.color, kind = fn == "line" and "line" or "marker" }
    end
  end
  return render_axes(opts, {
    width = width, height = height, xlo = xlo, xhi = xhi, ylo = ylo, yhi = yhi, notes = notes,
    legend = legend, xinteger = xinteger,
    draw = function(cv, X, Y, area)
      local m = new_mask(area.x, area.y, area.w, area.h)
      -- mapped coordinates are clamped so that absurd values (far outside xlim/ylim) stay
      -- finite; clipping then keeps only the visible part
      local function cx(v) return min(1e7, max(-1e7, X(v))) end
      local function cy(v) return min(1e7, max(-1e7, Y(v))) end
      for _, s in ipairs(series) do
        paint(m, s, cx, cy)
        mask_flush(cv, m, s.color)
      end
    end,
  })
end

---A line chart. `y` (and optionally `x`, default 0, 1, 2, ...) are lists of numbers or 1-D
---tensors; `series = {{x?, y, label?, color?}, ...}` draws several lines with a legend.
---NaN and infinite points break the line and are reported in a note.
---@param opts {x?: number[]|userdata, y?: number[]|userdata, series?: table[], label?: string, color?: string|integer[], title?: string, xlabel?: string, ylabel?: string, width?: integer, height?: integer, legend?: boolean, xlim?: number[], ylim?: number[], grid?: boolean, linewidth?: number, markers?: boolean}
---@return seerimage
function M.line(opts)
  return xy_chart("line", opts, { "linewidth", "markers" }, function(m, s, X, Y)
    local lw = opts.linewidth or 2
    if type(lw) ~= "number" or not (lw > 0 and lw <= 20) then fail("linewidth must be a number of pixels in (0, 20] (got %s)", describe(lw)) end
    local hw = lw / 2
    local markers = opts.markers
    if markers == nil then markers = s.n <= 30 end
    local xs, ys = s.x, s.y
    for i = 1, s.n do
      local ok = finite(xs[i]) and finite(ys[i])
      if ok then
        local nxt = i < s.n and finite(xs[i + 1]) and finite(ys[i + 1])
        local prv = i > 1 and finite(xs[i - 1]) and finite(ys[i - 1])
        if nxt then mask_segment(m, X(xs[i]), Y(ys[i]), X(xs[i + 1]), Y(ys[i + 1]), hw) end
        if markers then
          mask_disc(m, X(xs[i]), Y(ys[i]), hw + 2)
        elseif not nxt and not prv then
          mask_disc(m, X(xs[i]), Y(ys[i]), hw + 1) -- an isolated point would otherwise vanish
        end
      end
    end
  end)
end

---A scatter plot: the same arguments as plot.line, drawn as dots (`size` = radius in pixels, 3).
---@param opts {x?: number[]|userdata, y?: number[]|userdata, series?: table[], label?: string, color?: string|integer[], title?: string, xlabel?: string, ylabel?: string, width?: integer, height?: integer, legend?: boolean, xlim?: number[], ylim?: number[], grid?: boolean, size?: number}
---@return seerimage
function M.scatter(opts)
  return xy_chart("scatter", opts, { "size" }, function(m, s, X, Y)
    local r = opts.size or 3
    if type(r) ~= "number" or not (r > 0 and r <= 50) then fail("size must be a marker radius in pixels in (0, 50] (got %s)", describe(r)) end
    for i = 1, s.n do
      if finite(s.x[i]) and finite(s.y[i]) then mask_disc(m, X(s.x[i]), Y(s.y[i]), r) end
    end
  end)
end

-- ---- bar and hist -------------------------------------------------------------------------

local function bars_range(lo, hi)
  -- bars grow from 0, so 0 is always in view and only the far side gets padding
  lo, hi = min(lo, 0), max(hi, 0)
  if lo == 0 and hi == 0 then return 0, 1 end
  local pad = (hi - lo) * 0.05
  return lo < 0 and lo - pad or 0, hi > 0 and hi + pad or 0
end

---A bar chart: one bar per value, labelled below (labels default to 0, 1, 2, ...).
---@param opts {values: number[]|userdata, labels?: string[], color?: string|integer[], title?: string, xlabel?: string, ylabel?: string, width?: integer, height?: integer, ylim?: number[], grid?: boolean}
---@return seerimage
function M.bar(opts)
  check_options(opts, set_of({ "values", "labels", "color", "title", "xlabel", "ylabel", "width", "height", "ylim", "grid" }),
    'plot.bar{ labels = {"a", "b"}, values = {3, 5} }')
  local width, height = check_size(opts, 640, 400)
  if opts.values == nil then fail('needs values (a list of numbers or a 1-D tensor), e.g. plot.bar{ labels = {"a", "b"}, values = {3, 5} }') end
  local values = numbers("values", opts.values)
  local n = #values
  local labels = {}
  if opts.labels ~= nil then
    if type(opts.labels) ~= "table" or is_tensor(opts.labels) then fail("labels must be a list of strings (got %s)", describe(opts.labels)) end
    if #opts.labels ~= n then
      fail("labels has %d entries but values has %d; pass one label per value", #opts.labels, n)
    end
    for i = 1, n do
      local l = opts.labels[i]
      if type(l) ~= "string" and type(l) ~= "number" then fail("labels[%d] is %s; labels must be strings", i, describe(l)) end
      labels[i] = tostring(l)
    end
  else
    for i = 1, n do labels[i] = tostring(i - 1) end
  end
  local color = opts.color ~= nil and parse_color("color", opts.color) or PALETTE[1]
  local lo, hi, bad, where = huge, -huge, 0, {}
  for i = 1, n do
    local v = values[i]
    if finite(v) then
      lo, hi = min(lo, v), max(hi, v)
    else
      bad = bad + 1
      if #where < 4 then where[#where + 1] = "values[" .. i .. "]" end
    end
  end
  if bad == n then fail("values has no finite values (%d values, all NaN or infinite)", n) end
  local ylo, yhi = bars_range(lo, hi)
  local ylim = check_lim("ylim", opts.ylim)
  if ylim then ylo, yhi = ylim[1], ylim[2] end
  local notes = {}
  local note = skipped_note(bad, "value", where)
  if note then notes[1] = note end
  return render_axes(opts, {
    width = width, height = height, xlo = -0.5, xhi = n - 0.5, ylo = ylo, yhi = yhi, xcats = labels,
    notes = notes, baseline = 0,
    draw = function(cv, X, Y, area)
      local y0 = min(max(Y(0), area.y), area.y + area.h)
      for i = 1, n do
        local v = values[i]
        if finite(v) then
          local xa, xb = floor(X(i - 1 - 0.4) + 0.5), floor(X(i - 1 + 0.4) + 0.5)
          if xb <= xa then xb = xa + 1 end
          local yv = min(max(Y(v), area.y), area.y + area.h)
          local ya, yb = floor(min(yv, y0) + 0.5), floor(max(yv, y0) + 0.5)
          if yb == ya and v ~= 0 then yb = ya + 1 end
          fill_rect(cv, xa, ya, xb - xa, yb - ya, color)
        end
      end
    end,
  })
end

---A histogram of values in `bins` equal-width bins (default: the square root of the count,
---between 5 and 50) over `range` (default: min to max of the values).
---@param opts {values: number[]|userdata, bins?: integer, range?: number[], color?: string|integer[], title?: string, xlabel?: string, ylabel?: string, width?: integer, height?: integer, grid?: boolean}
---@return seerimage
function M.hist(opts)
  check_options(opts, set_of({ "values", "bins", "range", "color", "title", "xlabel", "ylabel", "width", "height", "grid" }),
    "plot.hist{ values = {1.2, 0.4, 2.2, 1.9}, bins = 10 }")
  local width, height = check_size(opts, 640, 400)
  if opts.values == nil then fail("needs values (a list of numbers or a 1-D tensor), e.g. plot.hist{ values = t, bins = 20 }") end
  local values = numbers("values", opts.values)
  local lo, hi, finite_n, bad, where = huge, -huge, 0, 0, {}
  for i, v in ipairs(values) do
    if finite(v) then
      lo, hi, finite_n = min(lo, v), max(hi, v), finite_n + 1
    else
      bad = bad + 1
      if #where < 4 then where[#where + 1] = "values[" .. i .. "]" end
    end
  end
  if finite_n == 0 then fail("values has no finite values (%d values, all NaN or infinite)", #values) end
  local range = check_lim("range", opts.range)
  if range then lo, hi = range[1], range[2] end
  if lo == hi then lo, hi = lo - 0.5, hi + 0.5 end
  local bins = opts.bins
  if bins == nil then
    bins = min(50, max(5, ceil(sqrt(finite_n))))
  elseif type(bins) ~= "number" or bins ~= floor(bins) or bins < 1 or bins > 1000 then
    fail("bins must be an integer from 1 to 1000 (got %s)", describe(bins))
  end
  local counts = {}
  for b = 1, bins do counts[b] = 0 end
  local outside = 0
  for _, v in ipairs(values) do
    if finite(v) then
      if v < lo or v > hi then
        outside = outside + 1
      else
        local b = floor((v - lo) / (hi - lo) * bins) + 1
        if b > bins then b = bins end -- the top edge belongs to the last bin, as in numpy
        counts[b] = counts[b] + 1
      end
    end
  end
  local top = 0
  for b = 1, bins do top = max(top, counts[b]) end
  local notes = {}
  local note = skipped_note(bad, "value", where)
  if note then notes[#notes + 1] = note end
  if outside > 0 then notes[#notes + 1] = ("%d value%s outside range skipped"):format(outside, outside == 1 and "" or "s") end
  local color = opts.color ~= nil and parse_color("color", opts.color) or PALETTE[1]
  local pad = (hi - lo) * 0.02
  local ylo, yhi = bars_range(0, top)
  return render_axes(opts, {
    width = width, height = height, xlo = lo - pad, xhi = hi + pad, ylo = ylo, yhi = yhi, notes = notes, baseline = 0,
    draw = function(cv, X, Y, area)
      local y0 = floor(Y(0) + 0.5)
      for b = 1, bins do
        if counts[b] > 0 then
          local xa = floor(X(lo + (b - 1) * (hi - lo) / bins) + 0.5)
          local xb = floor(X(lo + b * (hi - lo) / bins) + 0.5)
          if xb - xa >= 4 then xb = xb - 1 end -- a 1-px gap between bars that are wide enough
          if xb <= xa then xb = xa + 1 end
          local ya = floor(max(Y(counts[b]), area.y) + 0.5)
          fill_rect(cv, xa, ya, xb - xa, max(1, y0 - ya), color)
        end
      end
    end,
  })
end

-- ---- heatmap --------------------------------------------------------------------------------

local function matrix_of(v)
  if is_tensor(v) then
    if v:dim() ~= 2 then
      fail("matrix must be 2-D; got a tensor of shape %s%s", shape_of(v),
        v:dim() == 1 and " (use t:view(1, -1) for a single row)" or "")
    end
    if v:numel() == 0 then fail("matrix is empty (shape %s)", shape_of(v)) end
    return v:totable(), v:size(1), v:size(2)
  end
  if type(v) ~= "table" then fail("matrix must be a 2-D tensor or a list of rows (got %s)", describe(v)) end
  if #v == 0 then fail("matrix is empty; pass a 2-D tensor or a list of rows, e.g. {{1, 2}, {3, 4}}") end
  local rows, ncol = {}, nil
  for i = 1, #v do
    local r = v[i]
    if type(r) == "number" then
      fail("matrix must be a list of rows, e.g. {{1, 2}, {3, 4}}; matrix[%d] is a number (wrap a single row as {{...}})", i)
    end
    rows[i] = numbers(("matrix[%d]"):format(i), r)
    if ncol and #rows[i] ~= ncol then
      fail("matrix rows differ in length: matrix[1] has %d values, matrix[%d] has %d; every row needs the same length",
        ncol, i, #rows[i])
    end
    ncol = ncol or #rows[i]
  end
  return rows, #rows, ncol
end

-- Every how many rows or columns a label fits: 1, 2, 5, 10, 20, 50, ... so the labelled
-- indices are round numbers.
local function nice_every(k)
  local e = 1
  while e < k do
    if e * 2 >= k then return e * 2 end
    if e * 5 >= k then return e * 5 end
    e = e * 10
  end
  return e
end

local function label_list(name, v, n)
  if v == nil then return nil end
  if type(v) ~= "table" or is_tensor(v) then fail("%s must be a list of strings (got %s)", name, describe(v)) end
  if #v ~= n then fail("%s has %d entries but the matrix has %d; pass one label per %s", name, #v, n, name == "row_labels" and "row" or "column") end
  local out = {}
  for i = 1, n do
    if type(v[i]) ~= "string" and type(v[i]) ~= "number" then fail("%s[%d] is %s; labels must be strings", name, i, describe(v[i])) end
    out[i] = tostring(v[i])
  end
  return out
end

local function format_cell(v)
  if not finite(v) then return tostring(v) end
  local s = ("%.2g"):format(v)
  if abs(v) >= 1 and abs(v) < 1000 then s = ("%.3g"):format(v) end
  return s
end

---A heatmap of a matrix (2-D tensor or list of rows), row 1 at the top. colormap "viridis"
---(sequential, vmin..vmax default to the data's range) or "rdbu" (diverging: red below 0, blue
---above, white at 0, symmetric limits). cell_labels = true writes each value in its cell, or
---pass a list of rows of strings (e.g. logit-lens tokens). Non-finite cells are grey.
---@param opts {matrix: table|userdata, row_labels?: string[], col_labels?: string[], colormap?: "viridis"|"rdbu", vmin?: number, vmax?: number, cell_labels?: boolean|table, colorbar?: boolean, title?: string, xlabel?: string, ylabel?: string, width?: integer, height?: integer}
---@return seerimage
function M.heatmap(opts)
  check_options(opts, set_of({ "matrix", "row_labels", "col_labels", "colormap", "vmin", "vmax", "cell_labels", "colorbar",
    "title", "xlabel", "ylabel", "width", "height" }), "plot.heatmap{ matrix = {{1, 2}, {3, 4}} }")
  local width, height = check_size(opts, 640, 400)
  if opts.matrix == nil then fail("needs matrix (a 2-D tensor or a list of rows), e.g. plot.heatmap{ matrix = {{1, 2}, {3, 4}} }") end
  local rows, nr, nc = matrix_of(opts.matrix)
  local row_labels, col_labels = label_list("row_labels", opts.row_labels, nr), label_list("col_labels", opts.col_labels, nc)
  local cmap_name = opts.colormap or "viridis"
  if not CMAP_STOPS[cmap_name] then fail('colormap must be "viridis" or "rdbu" (got %s)', describe(cmap_name)) end
  for _, k in ipairs({ "vmin", "vmax" }) do
    if opts[k] ~= nil and (type(opts[k]) ~= "number" or not finite(opts[k])) then fail("%s must be a finite number (got %s)", k, describe(opts[k])) end
  end
  local cell_text
  if opts.cell_labels == true then
    cell_text = {}
    for i = 1, nr do
      cell_text[i] = {}
      for j = 1, nc do cell_text[i][j] = format_cell(rows[i][j]) end
    end
  elseif type(opts.cell_labels) == "table" then
    cell_text = opts.cell_labels
    if #cell_text ~= nr then fail("cell_labels has %d rows but the matrix has %d", #cell_text, nr) end
    for i = 1, nr do
      if type(cell_text[i]) ~= "table" or #cell_text[i] ~= nc then
        fail("cell_labels[%d] must be a list of %d strings, one per column", i, nc)
      end
    end
  elseif opts.cell_labels ~= nil and opts.cell_labels ~= false then
    fail("cell_labels must be true or a list of rows of strings (got %s)", describe(opts.cell_labels))
  end

  local lo, hi, bad, where = huge, -huge, 0, {}
  for i = 1, nr do
    for j = 1, nc do
      local v = rows[i][j]
      if finite(v) then
        lo, hi = min(lo, v), max(hi, v)
      else
        bad = bad + 1
        if #where < 4 then where[#where + 1] = ("[%d][%d]"):format(i, j) end
      end
    end
  end
  if bad == nr * nc then fail("matrix has no finite values (%d cells, all NaN or infinite)", nr * nc) end
  local vmin, vmax
  if cmap_name == "rdbu" then
    local m = max(abs(lo), abs(hi))
    if m == 0 then m = 1 end
    vmin, vmax = opts.vmin or -m, opts.vmax or m
  else
    vmin, vmax = opts.vmin or lo, opts.vmax or hi
    if vmin == vmax then vmin, vmax = vmin - 0.5, vmax + 0.5 end
  end
  if vmin >= vmax then fail("vmin (%s) must be below vmax (%s)", tostring(vmin), tostring(vmax)) end
  local lut = colormap(cmap_name)
  local function color_of(v)
    if not finite(v) then return NAN_CELL end
    local t = (v - vmin) / (vmax - vmin)
    t = t < 0 and 0 or (t > 1 and 1 or t)
    return lut[floor(t * 255 + 0.5)]
  end
  local notes = {}
  local note = skipped_note(bad, "cell", where)
  if note then notes[1] = note:gsub("skipped", "shown grey") end

  -- layout
  local cv = new_canvas(width, height)
  local title = text_opt(opts, "title")
  local xlabel, ylabel = text_opt(opts, "xlabel"), text_opt(opts, "ylabel")
  local top = draw_title(cv, title)
  local rl = {}
  local rlw = 0
  for i = 1, nr do
    rl[i] = fit_text(glyphs_of(row_labels and row_labels[i] or tostring(i - 1)), ADV * 20, 1)
    rlw = max(rlw, text_width(rl[i]))
  end
  local show_bar = opts.colorbar ~= false
  local bar_ticks, bar_step = nice_ticks(vmin, vmax, 5)
  local bar_labels = tick_labels(bar_ticks, bar_step)
  local blw = 0
  for k, s in ipairs(bar_labels) do
    bar_labels[k] = glyphs_of(s)
    blw = max(blw, text_width(bar_labels[k]))
  end
  local left = 8 + (ylabel and (GLYPH_H + 8) or 0) + rlw + 5 + 4
  local right = show_bar and (12 + 14 + 5 + 4 + blw + 8) or 16
  local pw = width - left - right
  if pw < 30 then fail("width %d leaves no room for the heatmap; use width >= %d", width, left + right + 30) end
  -- column labels: horizontal when each fits its cell, else turned to read upward
  local cl, clw = {}, 0
  for j = 1, nc do
    cl[j] = fit_text(glyphs_of(col_labels and col_labels[j] or tostring(j - 1)), ADV * 14, 1)
    clw = max(clw, text_width(cl[j]))
  end
  local slot = pw / nc
  local upright = clw + 4 > slot and (col_labels ~= nil)
  local col_every = nice_every(upright and (LINE_H + 1) / slot or (clw + 6) / slot)
  local label_h = upright and clw or GLYPH_H
  local bottom = 5 + 4 + label_h + 6 + (xlabel and (GLYPH_H + 6) or 0) + #notes * LINE_H + 2
  local ph = height - top - bottom
  if ph < 30 then fail("height %d leaves no room for the heatmap; use height >= %d", height, top + bottom + 30) end
  local row_every = nice_every((LINE_H + 2) / (ph / nr))

  -- cells: each pixel takes the colour of the cell its centre falls in
  local colcell = ffi.new("int32_t[?]", pw)
  for px = 0, pw - 1 do colcell[px] = min(nc - 1, floor((px + 0.5) * nc / pw)) end
  local cellrgb = ffi.new("uint8_t[?]", nr * nc * 3)
  for i = 1, nr do
    for j = 1, nc do
      local c = color_of(rows[i][j])
      local k = ((i - 1) * nc + (j - 1)) * 3
      cellrgb[k], cellrgb[k + 1], cellrgb[k + 2] = c[1], c[2], c[3]
    end
  end
  local buf = cv.buf
  for py = 0, ph - 1 do
    local r = min(nr - 1, floor((py + 0.5) * nr / ph))
    local o = ((top + py) * width + left) * 3
    local base = r * nc * 3
    for px = 0, pw - 1 do
      local k = base + colcell[px] * 3
      buf[o], buf[o + 1], buf[o + 2] = cellrgb[k], cellrgb[k + 1], cellrgb[k + 2]
      o = o + 3
    end
  end
  if cell_text then
    for i = 1, nr do
      local y0, y1 = top + floor((i - 1) * ph / nr), top + floor(i * ph / nr)
      if y1 - y0 >= GLYPH_H + 1 then
        for j = 1, nc do
          local x0, x1 = left + floor((j - 1) * pw / nc), left + floor(j * pw / nc)
          local gl = fit_text(glyphs_of(tostring(cell_text[i][j] or "")), x1 - x0 - 2, 1)
          if #gl > 0 then
            local c = color_of(rows[i][j])
            local lum = 0.299 * c[1] + 0.587 * c[2] + 0.114 * c[3]
            draw_text(cv, x0 + (x1 - x0 - text_width(gl)) / 2, y0 + (y1 - y0 - 7) / 2, gl,
              lum > 140 and INK or { 255, 255, 255 })
          end
        end
      end
    end
  end
  fill_rect(cv, left - 1, top - 1, pw + 2, 1, FRAME)
  fill_rect(cv, left - 1, top + ph, pw + 2, 1, FRAME)
  fill_rect(cv, left - 1, top - 1, 1, ph + 2, FRAME)
  fill_rect(cv, left + pw, top - 1, 1, ph + 2, FRAME)
  for i = 1, nr, row_every do
    local y = top + floor((i - 0.5) * ph / nr)
    fill_rect(cv, left - 5, y, 4, 1, FRAME)
    draw_text(cv, left - 9 - text_width(rl[i]), y - 3, rl[i], INK)
  end
  for j = 1, nc, col_every do
    local x = left + floor((j - 0.5) * pw / nc)
    fill_rect(cv, x, top + ph + 1, 1, 4, FRAME)
    if upright then
      draw_text_up(cv, x - 4, top + ph + 9 + text_width(cl[j]), cl[j], INK)
    else
      local tw = text_width(cl[j])
      draw_text(cv, min(max(x - floor(tw / 2), 2), width - 2 - tw), top + ph + 9, cl[j], INK)
    end
  end
  if xlabel then
    local gl = fit_text(glyphs_of(xlabel), pw, 1)
    draw_text(cv, left + (pw - text_width(gl)) / 2, top + ph + 9 + label_h + 6, gl, INK)
  end
  if ylabel then
    local gl = fit_text(glyphs_of(ylabel), ph, 1)
    draw_text_up(cv, 8, top + (ph + text_width(gl)) / 2, gl, INK)
  end
  if show_bar then
    local bx = left + pw + 12
    for py = 0, ph - 1 do
      local t = 1 - (py + 0.5) / ph
      fill_rect(cv, bx, top + py, 14, 1, lut[floor(t * 255 + 0.5)])
    end
    fill_rect(cv, bx - 1, top - 1, 16, 1, FRAME)
    fill_rect(cv, bx - 1, top + ph, 16, 1, FRAME)
    fill_rect(cv, bx - 1, top - 1, 1, ph + 2, FRAME)
    fill_rect(cv, bx + 14, top - 1, 1, ph + 2, FRAME)
    for k, v in ipairs(bar_ticks) do
      local y = floor(top + (vmax - v) / (vmax - vmin) * (ph - 1) + 0.5)
      fill_rect(cv, bx + 15, y, 4, 1, FRAME)
      draw_text(cv, bx + 15 + 4 + 4, y - 3, bar_labels[k], INK)
    end
  end
  draw_notes(cv, notes)
  return finish(cv, notes)
end

-- ---- entry points: errors at the caller's line --------------------------------------------

for _, name in ipairs({ "line", "scatter", "bar", "hist", "heatmap" }) do
  local impl = M[name]
  M[name] = function(opts)
    local ok, res = pcall(impl, opts)
    if ok then return res end
    if getmetatable(res) == PlotError then error("plot." .. name .. ": " .. res.msg, 2) end
    error(res, 0)
  end
end

return M
