-- Images shown to an agent cost bounded time (docs/mcp.md, "What a cell's outputs become";
-- docs/security.md, "Images shown to an agent"). `seer mcp notebook` shrinks every image/png
-- output of a cell with png.fit, whose time is linear in the pixels the PNG's header claims, and
-- a 16 KB file of one-bit zeros claims 2^27 (0.64 s to fit; 3 s for 1 MB of 16-bit RGBA), 16
-- images a result. An image claiming more than png.DISPLAY_MAX_PIXELS (2^25) is not decoded (a
-- line of text names its size), and the images of one result claim at most 2^26 together.
local T = require "testing"
local png = require "seer.core.png"
local tools = require "seer.mcp.notebook_tools"
local jupyter = require "seer.jupyter"
local json = seer.json

local now = seer.now

-- Solid black PNGs (zero samples; one-bit gray unless {w, h, interlace, depth, colour type} say
-- otherwise) claiming w x h pixels, written by Python's zlib (level 9: 2^27 one-bit pixels in
-- 16 KB), plain or Adam7, each named <w>x<h>_<interlace>[_<depth>_<ctype>].png in dir.
local function bombs(dir, list)
  seer.write_file(dir .. "/gen.py", [[
import struct, sys, zlib
def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
for spec in sys.argv[2:]:
    W, H, interlace, depth, ctype = (list(map(int, spec.split(','))) + [1, 0])[:5]
    spp = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    z = zlib.compressobj(9)
    parts = []
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)] if interlace else [(0, 0, 1, 1)]
    for x0, y0, dx, dy in passes:
        w, h = (W - x0 + dx - 1) // dx, (H - y0 + dy - 1) // dy
        if w <= 0 or h <= 0: continue
        row = b'\0' * (1 + (w * spp * depth + 7) // 8)
        block = row * 64
        for _ in range(h // 64): parts.append(z.compress(block))
        for _ in range(h % 64): parts.append(z.compress(row))
    parts.append(z.flush())
    ihdr = struct.pack('>IIBBBBB', W, H, depth, ctype, 0, 0, interlace)
    data = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr) + chunk(b'IDAT', b''.join(parts)) + chunk(b'IEND', b'')
    kind = '' if (depth, ctype) == (1, 0) else '_%d_%d' % (depth, ctype)
    open('%s/%dx%d_%d%s.png' % (sys.argv[1], W, H, interlace, kind), 'wb').write(data)
]])
  local args, files = {}, {}
  for i, b in ipairs(list) do
    args[i] = table.concat(b, ",")
    files[i] = ("%s/%dx%d_%d%s.png"):format(dir, b[1], b[2], b[3], (b[4] and not (b[4] == 1 and b[5] == 0)) and ("_%d_%d"):format(b[4], b[5]) or "")
  end
  local ok, out = T.sh(("/usr/bin/python3 '%s/gen.py' '%s' %s"):format(dir, dir, table.concat(args, " ")))
  T.ok(ok, out)
  return files
end

-- A header that claims w x h RGB pixels, with 16 bytes of image data: only a check of the header
-- can say anything but "truncated" about it.
local function claim_only(w, h)
  local function be32(v) return string.char(bit.band(bit.rshift(v, 24), 255), bit.band(bit.rshift(v, 16), 255), bit.band(bit.rshift(v, 8), 255), bit.band(v, 255)) end
  local function crc(s)
    local c = 0xffffffff
    for i = 1, #s do
      c = bit.bxor(c, s:byte(i))
      for _ = 1, 8 do c = bit.band(c, 1) ~= 0 and bit.bxor(bit.rshift(c, 1), 0xedb88320) or bit.rshift(c, 1) end
    end
    return bit.bnot(c) % 2 ^ 32
  end
  local function chunk(t, d) return be32(#d) .. t .. d .. be32(crc(t .. d)) end
  local z = "\120\1\1\16\0\239\255" .. ("\0"):rep(16) .. be32(16) -- stored block of 16 zeros
  return "\137PNG\r\n\26\n" .. chunk("IHDR", be32(w) .. be32(h) .. "\8\2\0\0\0") .. chunk("IDAT", z) .. chunk("IEND", "")
end

local function image_output(bytes, alt)
  return { output_type = "display_data", data = { ["image/png"] = tools.b64encode(bytes), ["text/plain"] = alt or "<image>" }, metadata = {} }
end

T.test("png.fit's max_pixels: a claim over it is refused from the header at once; an image at it still fits", function()
  local dir = T.tmpdir()
  local f = bombs(dir, { { 11585, 11585, 0 }, { 11585, 11585, 1 }, { 8192, 4096, 0 }, { 8192, 4096, 1 }, { 8192, 4097, 0 } })
  for i, file in ipairs(f) do
    local b = seer.read_file(file)
    if i ~= 3 and i ~= 4 then
      -- the fastest of up to three tries: a stall of this VM is not a decode, which every try
      -- would show
      local ok, err, dt = nil, nil, math.huge
      for _ = 1, 3 do
        local t0 = now()
        ok, err = pcall(png.fit, b, 512, 2 ^ 25)
        dt = math.min(dt, now() - t0)
        if ok or dt < 0.05 then break end
      end
      T.ok(not ok, file .. " was decoded")
      T.contains(tostring(err), i == 5 and "png.fit: the PNG claims 8192x4097 pixels (33562624), more than the 33554432 this fit allows (max_pixels); not decoded"
                                or "png.fit: the PNG claims 11585x11585 pixels (134212225), more than the 33554432")
      T.ok(dt < 0.05, ("%s: the refusal took %.3f s"):format(file, dt))
    else
      -- exactly 2^25 pixels: shown, in a fraction of a second (about 0.2 s)
      local t0 = now()
      local out, w, h = png.fit(b, 512, 2 ^ 25)
      local dt = now() - t0
      T.eq({ w, h }, { 512, 256 })
      T.eq({ png.size(out) }, { 512, 256 })
      T.ok(dt < 2, ("%s: %.2f s"):format(file, dt))
    end
  end
  -- without max_pixels the limit is the display limit too (it was the decode limit, 2^27, for
  -- every caller but the notebook tools): the error says so and how to go past it
  local ok, err = pcall(png.fit, seer.read_file(f[5]), 512)
  T.ok(not ok, "a claim over 2^25 was decoded without max_pixels")
  T.contains(tostring(err), "png.fit: the PNG claims 8192x4097 pixels (33562624), more than the 33554432 this fit allows (max_pixels); not decoded"
    .. " (the default for images to show, png.DISPLAY_MAX_PIXELS: fit's time is linear in the pixels claimed; pass max_pixels, at most png.MAX_PIXELS = 134217728, to fit a larger one)")
  local _, w, h = png.fit(seer.read_file(f[5]), 512, png.MAX_PIXELS)
  T.eq({ w, h }, { 512, 256 })
  _, w, h = png.fit(seer.read_file(f[3]), 512)
  T.eq({ w, h }, { 512, 256 }, "exactly 2^25 fits by default")
  T.raises(function() png.fit(seer.read_file(f[5]), 512, 0) end, "png.fit: max_pixels must be an integer from 1 to 134217728", true)
  T.raises(function() png.fit(claim_only(20, 10), 512, 199) end, "20x10 pixels (200), more than the 199", true)
  T.eq(png.DISPLAY_MAX_PIXELS, 2 ^ 25)
end)

T.test("plot's image:fit has the display limit by default: a claim over 2^25 is an error naming it, at once", function()
  local plot = require "seer.plot"
  local f = bombs(T.tmpdir(), { { 8192, 4097, 0 }, { 11585, 11585, 1 }, { 8192, 4096, 0 } })
  for i = 1, 2 do
    local img = plot.image(seer.read_file(f[i]))
    local t0 = now()
    local ok, err = pcall(img.fit, img, 512)
    T.ok(not ok, f[i] .. " was decoded")
    T.ok(now() - t0 < 0.05, ("%s: the refusal took %.3f s"):format(f[i], now() - t0))
    T.contains(tostring(err), i == 1 and "image:fit: the PNG claims 8192x4097 pixels (33562624), more than the 33554432 this fit allows"
                              or "image:fit: the PNG claims 11585x11585 pixels (134212225), more than the 33554432 this fit allows")
    T.contains(tostring(err), "pass max_pixels, at most png.MAX_PIXELS = 134217728, to fit a larger one")
  end
  local small = plot.image(seer.read_file(f[1])):fit(512, png.MAX_PIXELS)
  T.eq({ small.width, small.height }, { 512, 256 })
  small = plot.image(seer.read_file(f[3])):fit(512)
  T.eq({ small.width, small.height }, { 512, 256 })
  T.raises(function() plot.image(seer.read_file(f[3])):fit(512, 0) end, "image:fit: max_pixels must be an integer from 1 to 134217728", true)
  -- a plot's own images are at most 4096x4096 (2^24): always under the default
  local big = plot.heatmap { matrix = { { 0, 1 } }, width = 4096, height = 4096 }
  T.eq({ big:fit(512).width, big:fit(512).height }, { 512, 512 })
end)

T.test("mcp notebook images: one over the display limit becomes a line of text naming its size, in milliseconds; the rest are shown", function()
  local dir = T.tmpdir()
  local f = bombs(dir, { { 11585, 11585, 0 }, { 11585, 11585, 1 } })
  local bomb, bomb7 = seer.read_file(f[1]), seer.read_file(f[2])
  local small = png.encode(20, 10, 3, ("\10\20\30"):rep(200))
  local big = png.encode(1000, 250, 3, ("\10\20\30"):rep(1000 * 250))
  local outputs = { { output_type = "stream", name = "stdout", text = "before\n" } }
  -- 16 images a result: 14 bombs of 2^27 pixels (0.64 s each to fit: 9 s a result before), a
  -- header claiming 40000 x 40000 (past the decode limit too), a plot to shrink and a small one
  for i = 1, 13 do outputs[#outputs + 1] = image_output(i % 2 == 0 and bomb7 or bomb) end
  outputs[#outputs + 1] = image_output(claim_only(40000, 40000))
  outputs[#outputs + 1] = image_output(big)
  outputs[#outputs + 1] = image_output(small)
  outputs[#outputs + 1] = { output_type = "stream", name = "stdout", text = "after\n" }
  local t0 = now()
  local c = tools.outputs_to_content(outputs)
  local dt = now() - t0
  T.ok(dt < 0.5, ("the result took %.2f s"):format(dt))
  local kinds = {}
  for i, b in ipairs(c) do kinds[i] = b.type end
  T.eq(kinds, { "text", "image", "image", "text" })
  local note = "[image not shown: 11585 x 11585 pixels claimed, more than the 33.6 million an image shown here may have; it stays in the notebook]\n"
  T.eq(c[1].text, "before\n" .. note:rep(13)
    .. "[image not shown: 40000 x 40000 pixels claimed, more than the 33.6 million an image shown here may have; it stays in the notebook]\n")
  T.eq(c[2].type, "image")
  T.eq({ png.size(tools.b64decode(c[2].data)) }, { 512, 128 })
  T.eq(c[3], { type = "image", data = tools.b64encode(small), mimeType = "image/png" })
  T.eq(c[4], { type = "text", text = "after\n" })
  -- image_block says the same on its own, without decoding
  local block, why, kind = tools.image_block(tools.b64encode(bomb), 512)
  T.eq({ block, why, kind }, { nil, note, "too large" })
  -- an image that cannot be decoded still says why, as before
  c = tools.outputs_to_content({ image_output(claim_only(100, 100)) })
  T.contains(c[1].text, "[an image/png output that cannot be shown: ")
end)

T.test("mcp notebook images: the images of one result claim at most IMAGE_RESULT_PIXELS together; small ones always go", function()
  local dir = T.tmpdir()
  local f = bombs(dir, { { 8192, 4096, 0 }, { 8192, 4096, 1 } })
  local at_limit = { seer.read_file(f[1]), seer.read_file(f[2]) }
  local small = png.encode(20, 10, 3, ("\10\20\30"):rep(200))
  local outputs = {}
  -- 8 images of 2^25 pixels each (0.2 s each; 16-bit RGBA ones 0.75 s): 2 fit the result's budget
  for i = 1, 8 do outputs[#outputs + 1] = image_output(at_limit[i % 2 + 1]) end
  outputs[#outputs + 1] = image_output(small)
  local t0 = now()
  local c = tools.outputs_to_content(outputs)
  local dt = now() - t0
  T.ok(dt < 2, ("the result took %.2f s"):format(dt))
  local kinds = {}
  for i, b in ipairs(c) do kinds[i] = b.type end
  T.eq(kinds, { "image", "image", "text", "image" })
  T.eq({ png.size(tools.b64decode(c[1].data)) }, { 512, 256 })
  T.eq(c[3].text, ("[image not shown: 8192 x 4096 pixels claimed; this result's images before it claim 67.1 million, and one result shows 67.1 million at most; it stays in the notebook]\n"):rep(6))
  T.eq(c[4].data, tools.b64encode(small))
  T.eq(tools.IMAGE_RESULT_PIXELS, 2 ^ 26)
end)

-- Through the real server: a cell displays the bombs; execute_code answers at once with the
-- notes, the cell's other outputs and its status, and the notebook keeps every image as it was.
T.test("seer mcp notebook: a cell's image bombs become notes in the result, fast; the notebook keeps them", function()
  local dir = T.tmpdir()
  local f = bombs(dir, { { 11585, 11585, 0 }, { 11585, 11585, 1 } })
  local mcp = require "seer.mcp.client"
  local c = mcp.connect({ notebook = { type = "stdio", command = jupyter.seer_binary(), args = { "mcp", "notebook", "--output-dir", dir } } }, { timeout = 60 })
  local st = c:call("start_new_session", { experiment_name = "bombs" })
  T.ok(not st.isError, json.encode(st))
  local sid, path = st.structuredContent.session_id, st.structuredContent.notebook_path
  T.ok(not c:call("execute_code", { session_id = sid, code = "x = 1" }).isError) -- the kernel is warm
  local code = ([[
local png = require "seer.core.png"
for i = 1, 15 do display.image(i %% 2 == 0 and %q or %q) end
display.image(png.encode(20, 10, 3, ("\10\20\30"):rep(200)))
print("done")]]):format(f[2], f[1])
  local t0 = now()
  local r = c:call("execute_code", { session_id = sid, code = code })
  local dt = now() - t0
  T.ok(not r.isError, json.encode(r))
  T.eq(r.structuredContent.status, "ok")
  -- 15 images of 2^27 pixels took the server 10 s to shrink; now no pixel of them is decoded
  T.ok(dt < 3, ("execute_code took %.2f s"):format(dt))
  local kinds = {}
  for i, b in ipairs(r.content) do kinds[i] = b.type end
  T.eq(kinds, { "text", "image", "text" }, json.encode(r.content))
  T.eq(r.content[1].text, ("[image not shown: 11585 x 11585 pixels claimed, more than the 33.6 million an image shown here may have; it stays in the notebook]\n"):rep(15))
  T.eq({ png.size(tools.b64decode(r.content[2].data)) }, { 20, 10 })
  T.eq(r.content[3].text, "done\n")
  -- the notebook holds each image as the kernel sent it
  local doc = json.decode(seer.read_file(path))
  local cell = doc.cells[#doc.cells]
  local n = 0
  for _, o in ipairs(cell.outputs) do
    if o.data and o.data["image/png"] then
      n = n + 1
      local bytes = tools.b64decode(type(o.data["image/png"]) == "table" and table.concat(o.data["image/png"]) or o.data["image/png"])
      if n <= 15 then T.eq(bytes, seer.read_file(n % 2 == 0 and f[2] or f[1]), "image " .. n) end
    end
  end
  T.eq(n, 16)
  c:call("shutdown_session", { session_id = sid })
  c:close()
end)

-- The measurement behind the limits (docs/mcp.md, "Images"), run on demand:
--   SEER_PNG_BENCH=1 ./seer tests/lua/run.lua tests/lua/test_png_display.lua
-- For each claim (2^20 ... 2^27 pixels) and kind (1-bit gray, 8-bit RGB, 8-bit RGBA, 16-bit RGBA;
-- plain and Adam7), the seconds png.fit(bytes, 512) takes (best of 2), and with the display limit;
-- then one tool result of 16 such images, as outputs_to_content makes it.
T.test("bench: png.fit's time by claimed pixels, and a 16-image result's", function()
  if not os.getenv("SEER_PNG_BENCH") then T.skip("set SEER_PNG_BENCH=1 to measure") end
  local dir = T.tmpdir()
  local kinds = { { 1, 0 }, { 8, 2 }, { 8, 6 }, { 16, 6 } }
  local list = {}
  for _, p in ipairs { 20, 23, 25, 27 } do
    local n = math.floor(math.sqrt(2 ^ p))
    for _, k in ipairs(kinds) do
      for il = 0, 1 do list[#list + 1] = { n, n, il, k[1], k[2] } end
    end
  end
  local files = bombs(dir, list)
  local function best(fn)
    local b = math.huge
    for _ = 1, 2 do
      local t0 = now()
      fn()
      b = math.min(b, now() - t0)
    end
    return b
  end
  io.write(("\n%-24s %9s %12s %14s %16s\n"):format("file", "bytes", "fit (s)", "fit 2^25 (s)", "16 in a result"))
  for _, f in ipairs(files) do
    local b = seer.read_file(f)
    local t_all = best(function() png.fit(b, 512, png.MAX_PIXELS) end)
    local t_lim = best(function() pcall(png.fit, b, 512, png.DISPLAY_MAX_PIXELS) end)
    local outs = {}
    for i = 1, 16 do outs[i] = image_output(b) end
    local shown = 0
    local t_res = best(function()
      shown = 0
      for _, x in ipairs(tools.outputs_to_content(outs)) do if x.type == "image" then shown = shown + 1 end end
    end)
    io.write(("%-24s %9d %12.3f %14.3f %9.2f s, %2d shown\n"):format(f:match("[^/]*$"), #b, t_all, t_lim, t_res, shown))
  end
end)
