-- Tests of seer.plot (lua/seer/plot.lua) and seer.core.png from Lua: every plot kind decodes
-- to a PNG of the requested size; pixel checks that fail when drawing goes wrong (where a
-- rising line's ink is, the title's text, bar and histogram heights, colormap order, legend,
-- notes for NaN); tensors and tables give the same bytes; the image object; error messages.
local T = require "testing"
local plot = require "seer.plot"
local png = require "seer.core.png"
local tensor = require "seer.tensor"

local BLUE = plot.palette[1]
local ORANGE = plot.palette[2]

-- A decoded image with pixel access (0-based x, y) and counting helpers.
local function decode(img)
  T.eq(png.size(img.png), img.width)
  local d = png.decode(img.png)
  T.eq(d.channels, 3)
  T.eq(#d.pixels, d.width * d.height * 3)
  local px = d.pixels
  function d.at(x, y)
    local i = (y * d.width + x) * 3 + 1
    return px:byte(i, i + 2)
  end
  -- how many pixels in [x0, x1) x [y0, y1) satisfy pred(r, g, b)
  function d.count(x0, y0, x1, y1, pred)
    local n = 0
    for y = y0, y1 - 1 do
      for x = x0, x1 - 1 do
        if pred(d.at(x, y)) then n = n + 1 end
      end
    end
    return n
  end
  return d
end

local function near_color(c, tol)
  tol = tol or 40
  return function(r, g, b)
    return math.abs(r - c[1]) + math.abs(g - c[2]) + math.abs(b - c[3]) <= tol
  end
end

local function dark(r, g, b) return r < 80 and g < 80 and b < 80 end

T.test("plot: every kind gives a PNG of the requested size", function()
  local imgs = {
    plot.line { y = { 1, 2, 3 } },
    plot.scatter { x = { 1, 2, 3 }, y = { 3, 1, 2 }, width = 300, height = 200 },
    plot.bar { labels = { "a", "b" }, values = { 3, 5 }, width = 800, height = 600 },
    plot.hist { values = { 1, 2, 2, 3, 3, 3 }, width = 100, height = 100 },
    plot.heatmap { matrix = { { 1, 2 }, { 3, 4 } }, width = 401, height = 333 },
  }
  local want = { { 640, 400 }, { 300, 200 }, { 800, 600 }, { 100, 100 }, { 401, 333 } }
  for k, img in ipairs(imgs) do
    T.ok(plot.is_image(img))
    T.eq({ img.width, img.height }, want[k], "image " .. k)
    T.eq(img.png:sub(1, 8), "\137PNG\r\n\26\n")
    local d = decode(img)
    T.eq({ d.width, d.height }, want[k], "decoded image " .. k)
  end
end)

T.test("plot.line: a rising series is drawn from lower left to upper right", function()
  local d = decode(plot.line { y = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 } })
  local w, h = d.width, d.height
  local blue = near_color(BLUE)
  local lower_left = d.count(0, math.floor(h * 0.6), math.floor(w * 0.4), h, blue)
  local upper_right = d.count(math.floor(w * 0.6), 0, w, math.floor(h * 0.4), blue)
  local upper_left = d.count(0, 0, math.floor(w * 0.4), math.floor(h * 0.4), blue)
  local lower_right = d.count(math.floor(w * 0.6), math.floor(h * 0.6), w, h, blue)
  T.ok(lower_left > 100, "line ink lower left: " .. lower_left)
  T.ok(upper_right > 100, "line ink upper right: " .. upper_right)
  T.eq(upper_left, 0, "no line ink upper left")
  T.eq(lower_right, 0, "no line ink lower right")

  -- and a falling one the other way round
  d = decode(plot.line { y = { 9, 8, 7, 6, 5, 4, 3, 2, 1, 0 } })
  T.ok(d.count(0, 0, math.floor(w * 0.4), math.floor(h * 0.4), blue) > 100)
  T.eq(d.count(0, math.floor(h * 0.6), math.floor(w * 0.4), h, blue), 0)
end)

T.test("plot.line: the line is 1-2 px thick and anti-aliased", function()
  -- a horizontal line across the middle: in each column, solid pixels span at most 3 rows and
  -- partially covered pixels (between the colour and white) exist along a sloped line
  local d = decode(plot.line { y = { 1, 1 }, ylim = { 0, 2 }, markers = false, grid = false })
  local x = math.floor(d.width / 2)
  local solid = 0
  for y = 0, d.height - 1 do
    if near_color(BLUE, 20)(d.at(x, y)) then solid = solid + 1 end
  end
  T.ok(solid >= 1 and solid <= 3, "solid rows in the middle column: " .. solid)
  d = decode(plot.line { y = { 0, 1 }, markers = false, grid = false })
  local partial = d.count(0, 0, d.width, d.height, function(r, g, b)
    return b > r + 30 and r > BLUE[1] + 40 and r < 235 -- blue-ish but lighter than the line colour
  end)
  T.ok(partial > 50, "anti-aliased edge pixels: " .. partial)
end)

T.test("plot: the title region has text only when there is a title", function()
  local with = decode(plot.line { y = { 1, 2 }, title = "probe accuracy by layer" })
  local without = decode(plot.line { y = { 1, 2 } })
  local w = with.width
  local ink_with = with.count(math.floor(w * 0.25), 0, math.floor(w * 0.75), 28, dark)
  local ink_without = without.count(math.floor(w * 0.25), 0, math.floor(w * 0.75), 28, dark)
  T.ok(ink_with > 150, "title ink: " .. ink_with)
  T.eq(ink_without, 0)
  -- a longer title has more ink
  local longer = decode(plot.line { y = { 1, 2 }, title = "probe accuracy by layer, mean of 5 seeds" })
  T.ok(longer.count(0, 0, w, 28, dark) > ink_with)
end)

T.test("plot: axis labels and tick labels are drawn", function()
  local bare = decode(plot.line { y = { 1, 2 } })
  local labelled = decode(plot.line { y = { 1, 2 }, xlabel = "layer", ylabel = "accuracy" })
  local h = bare.height
  local function frame_x(d)
    for x = 0, d.width - 1 do
      local r, g, b = d.at(x, math.floor(h / 2))
      if r == 90 and g == 90 and b == 90 then return x end
    end
  end
  -- the turned y label takes a column of its own: the plot area moves right by its height
  -- plus a gap, and the label's ink is centred on the plot's middle
  T.eq(frame_x(labelled) - frame_x(bare), 9 + 8)
  T.ok(labelled.count(8, math.floor(h / 2) - 30, 17, math.floor(h / 2) + 20, dark) > 40)
  -- the x label adds a line of text below the tick labels: the frame's bottom moves up
  local function frame_bottom(d)
    local x = frame_x(d) + 10
    for y = h - 1, 0, -1 do
      local r, g, b = d.at(x, y)
      if r == 90 and g == 90 and b == 90 then return y end
    end
  end
  T.eq(frame_bottom(bare) - frame_bottom(labelled), 9 + 6)
  T.eq(bare.count(0, frame_bottom(bare) + 21, bare.width, h, dark), 0)
  T.ok(labelled.count(0, frame_bottom(labelled) + 21, labelled.width, h, dark) > 40)
  -- tick labels: ink left of the plot area in the middle rows
  T.ok(bare.count(0, 40, frame_x(bare) - 4, h - 40, dark) > 50)
end)

T.test("plot.line: several series get distinct colours and a legend", function()
  local img = plot.line { series = { { y = { 0, 1, 2 }, label = "train" }, { y = { 2, 1, 0 }, label = "test" } } }
  local d = decode(img)
  local n_blue = d.count(0, 0, d.width, d.height, near_color(BLUE, 30))
  local n_orange = d.count(0, 0, d.width, d.height, near_color(ORANGE, 30))
  T.ok(n_blue > 200 and n_orange > 200, ("blue %d orange %d"):format(n_blue, n_orange))
  local border = function(r, g, b) return r == 200 and g == 200 and b == 200 end
  T.ok(d.count(0, 0, d.width, d.height, border) > 100, "legend box")
  local off = decode(plot.line { series = { { y = { 0, 1, 2 }, label = "train" }, { y = { 2, 1, 0 } } }, legend = false })
  T.eq(off.count(0, 0, off.width, off.height, border), 0)
  -- a single unlabelled series has no legend; a labelled one has
  local one = decode(plot.line { y = { 0, 1, 2 } })
  T.eq(one.count(0, 0, one.width, one.height, border), 0)
  local named = decode(plot.line { y = { 0, 1, 2 }, label = "acc" })
  T.ok(named.count(0, 0, named.width, named.height, border) > 100)
  -- colours can be chosen
  local red = decode(plot.line { y = { 0, 1 }, color = "#ff0000" })
  T.ok(red.count(0, 0, red.width, red.height, near_color({ 255, 0, 0 }, 10)) > 100)
  T.eq(red.count(0, 0, red.width, red.height, near_color(BLUE, 30)), 0)
end)

T.test("plot.line: NaN and inf points are skipped with a note", function()
  local img = plot.line { y = { 1, 0 / 0, 3, math.huge, 5 } }
  T.eq(img.notes, { "2 non-finite points skipped (y[2], y[4])" })
  local d = decode(img)
  local note_ink = function(r, g, b) return r > 130 and g < 90 and b < 60 end
  T.ok(d.count(0, d.height - 16, d.width, d.height, note_ink) > 50, "the note is drawn")
  local clean = plot.line { y = { 1, 2, 3 } }
  T.eq(clean.notes, nil)
  local cd = decode(clean)
  T.eq(cd.count(0, 0, cd.width, cd.height, note_ink), 0)
  -- a non-finite x counts too, and is named as x
  T.eq(plot.scatter { x = { 1, 0 / 0, 3 }, y = { 1, 2, 3 } }.notes, { "1 non-finite point skipped (x[2])" })
  T.raises(function() plot.line { y = { 0 / 0, math.huge } } end, "y has no finite values", true)
  -- NaN fails every comparison, so a range check written as `x < lo or x > hi` let it through
  T.raises(function() plot.line { y = { 1, 2 }, linewidth = 0 / 0 } end, "linewidth must be a number of pixels in (0, 20] (got the number (nan))", true)
  T.raises(function() plot.scatter { y = { 1, 2 }, size = 0 / 0 } end, "size must be a marker radius in pixels in (0, 50]", true)
  T.raises(function() plot.line { y = { 1, 2 }, color = { 0 / 0, 0, 0 } } end, "color must be \"#rrggbb\" or {r, g, b} with components 0-255", true)
end)

T.test("plot.scatter: dots where the points are", function()
  local d = decode(plot.scatter { x = { 0, 10 }, y = { 0, 10 }, size = 5 })
  local w, h = d.width, d.height
  local blue = near_color(BLUE)
  -- two dots: lower left and upper right; nothing in between (no connecting line)
  T.ok(d.count(0, math.floor(h / 2), math.floor(w / 2), h, blue) > 40)
  T.ok(d.count(math.floor(w / 2), 0, w, math.floor(h / 2), blue) > 40)
  T.eq(d.count(math.floor(w * 0.3), math.floor(h * 0.3), math.floor(w * 0.7), math.floor(h * 0.7), blue), 0)
end)

T.test("plot.bar: heights and signs follow the values", function()
  local d = decode(plot.bar { labels = { "up", "down" }, values = { 2, -1 }, grid = false })
  local w, h = d.width, d.height
  local blue = near_color(BLUE, 10)
  local function column(x)
    local top, bottom, n = nil, nil, 0
    for y = 0, h - 1 do
      if blue(d.at(x, y)) then
        top = top or y
        bottom = y
        n = n + 1
      end
    end
    return n, top, bottom
  end
  local n1, top1, bottom1 = column(math.floor(w * 0.3))
  local n2, top2 = column(math.floor(w * 0.75))
  T.ok(n1 > 0 and n2 > 0, "both bars drawn")
  T.near(n1 / n2, 2, 0.05, "bar heights 2 : 1")
  -- the positive bar ends where the negative one starts (the zero line)
  T.ok(math.abs(top2 - bottom1) <= 2, ("zero line: %d vs %d"):format(bottom1, top2))
  T.ok(top1 < top2)
end)

T.test("plot.hist: bin counts set the bar heights", function()
  local d = decode(plot.hist { values = { 1, 1, 1, 1, 2 }, bins = 2, grid = false })
  local w, h = d.width, d.height
  local blue = near_color(BLUE, 10)
  local function height(x) return d.count(x, 0, x + 1, h, blue) end
  local a, b = height(math.floor(w * 0.3)), height(math.floor(w * 0.8))
  T.ok(b > 0)
  T.near(a / b, 4, 0.05, "4 values in the first bin, 1 in the second")
  -- range: values outside are skipped with a note
  local img = plot.hist { values = { 1, 2, 3, 10 }, range = { 0, 5 } }
  T.eq(img.notes, { "1 value outside range skipped" })
end)

-- Runs of one colour along the middle row of a heatmap (cells are wider than 20 px; the
-- colorbar is 14 px wide, so it is not one of them).
local function cell_runs(d)
  local y = math.floor(d.height / 2)
  local runs, cur, len = {}, nil, 0
  local function flush()
    if cur and len > 20 and not (cur[1] == 255 and cur[2] == 255 and cur[3] == 255) then runs[#runs + 1] = cur end
  end
  for x = 0, d.width - 1 do
    local r, g, b = d.at(x, y)
    if cur and cur[1] == r and cur[2] == g and cur[3] == b then
      len = len + 1
    else
      flush()
      cur, len = { r, g, b }, 1
    end
  end
  flush()
  return runs
end

T.test("plot.heatmap: cell colours follow the colormap", function()
  local runs = cell_runs(decode(plot.heatmap { matrix = { { 0, 1, 2, 3, 4 } } }))
  T.eq(#runs, 5)
  T.eq(runs[1], { 0x44, 0x01, 0x54 }) -- viridis' ends
  T.eq(runs[5], { 0xfd, 0xe7, 0x25 })
  for k = 2, 5 do T.ok(runs[k][2] > runs[k - 1][2], "viridis green rises with the value") end
  -- the order is the data's, not the position's
  local rev = cell_runs(decode(plot.heatmap { matrix = { { 4, 3, 2, 1, 0 } } }))
  T.eq(rev[1], runs[5])
  T.eq(rev[5], runs[1])

  local div = cell_runs(decode(plot.heatmap { matrix = { { -2, 0, 2 } }, colormap = "rdbu" }))
  T.eq(#div, 3)
  T.ok(div[1][1] > div[1][3] + 50, "negative is red")
  T.ok(div[2][1] > 240 and div[2][2] > 240 and div[2][3] > 240, "zero is near white")
  T.ok(div[3][3] > div[3][1] + 50, "positive is blue")
  -- centred at 0: a small positive value stays pale even when it is the maximum's opposite
  local skew = cell_runs(decode(plot.heatmap { matrix = { { -10, 1 } }, colormap = "rdbu" }))
  T.ok(skew[2][1] > 200 and skew[2][3] > 200, "1 on a +-10 scale is pale")
  -- vmin/vmax clamp
  local clamped = cell_runs(decode(plot.heatmap { matrix = { { 0, 5, 10 } }, vmin = 4, vmax = 6 }))
  T.eq(clamped[1], runs[1])
  T.eq(clamped[3], runs[5])
end)

T.test("plot.heatmap: NaN cells are grey and noted; labels and cell text", function()
  local img = plot.heatmap { matrix = { { 1, 0 / 0 }, { 3, 4 } } }
  T.eq(img.notes, { "1 non-finite cell shown grey ([1][2])" })
  local plain = decode(plot.heatmap { matrix = { { 1, 2 }, { 3, 4 } }, colorbar = false })
  local text = decode(plot.heatmap { matrix = { { 1, 2 }, { 3, 4 } }, colorbar = false, cell_labels = true })
  local differs = 0
  for y = 0, plain.height - 1, 2 do
    for x = 0, plain.width - 1, 2 do
      local a, b, c = plain.at(x, y)
      local p, q, r = text.at(x, y)
      if a ~= p or b ~= q or c ~= r then differs = differs + 1 end
    end
  end
  T.ok(differs > 10, "cell labels drawn: " .. differs)
  -- token labels on both axes, long ones turned upright
  local toks = { "<s>", "The", "Eiffel", "Tower", "is", "in", "Paris" }
  local m = {}
  for i = 1, 7 do
    m[i] = {}
    for j = 1, 7 do m[i][j] = j <= i and 1 / i or 0 end
  end
  local d = decode(plot.heatmap { matrix = m, row_labels = toks, col_labels = toks, title = "attention" })
  T.ok(d.count(0, 40, 40, d.height - 60, dark) > 100, "row labels")
end)

T.test("plot: tensors and tables give identical PNG bytes", function()
  local ys = { 0.5, 0.25, 1, 2, -3, 0.125 }
  local xs = { 0, 1, 2, 4, 8, 16 }
  T.eq(plot.line { x = tensor.from(xs), y = tensor.from(ys), title = "t" }.png, plot.line { x = xs, y = ys, title = "t" }.png)
  T.eq(plot.scatter { x = tensor.from(xs), y = ys }.png, plot.scatter { x = xs, y = ys }.png)
  T.eq(plot.bar { values = tensor.from(ys) }.png, plot.bar { values = ys }.png)
  T.eq(plot.hist { values = tensor.from(ys), bins = 4 }.png, plot.hist { values = ys, bins = 4 }.png)
  local m = { { 1, 2, 3 }, { 4, 5, 6.5 } }
  T.eq(plot.heatmap { matrix = tensor.from(m) }.png, plot.heatmap { matrix = m }.png)
  T.eq(plot.heatmap { matrix = { tensor.from(m[1]), tensor.from(m[2]) } }.png, plot.heatmap { matrix = m }.png)
  -- a different value gives different bytes (the comparison can fail)
  T.ne(plot.heatmap { matrix = { { 1, 2, 3 }, { 4, 5, 7 } } }.png, plot.heatmap { matrix = m }.png)
  -- a view (strided) works as well as a contiguous tensor
  local t2 = tensor.from({ { 1, 4 }, { 2, 5 }, { 3, 6.5 } }):t()
  T.eq(plot.heatmap { matrix = t2 }.png, plot.heatmap { matrix = m }.png)
end)

T.test("plot: the image object", function()
  local img = plot.line { y = { 1, 2 } }
  T.eq(tostring(img), "<image 640x400 png>")
  T.eq(tostring(plot.bar { values = { 1 }, width = 200, height = 150 }), "<image 200x150 png>")
  local dir = T.tmpdir()
  T.eq(img:save(dir .. "/a.png"), img)
  T.eq(seer.read_file(dir .. "/a.png"), img.png)
  T.raises(function() img:save(dir .. "/no/such/dir/a.png") end, "no/such/dir")
  T.raises(function() img:save(42) end, "path must be a string", true)
  local small = img:fit(320)
  T.eq({ small.width, small.height }, { 320, 200 })
  T.eq({ png.size(small.png) }, { 320, 200 })
  T.eq(img:fit(640), img)
  local wrapped = plot.image(img.png)
  T.eq(tostring(wrapped), "<image 640x400 png>")
  T.raises(function() plot.image("not a png") end, "plot.image: not a PNG image", true)
end)

T.test("plot: errors name the argument and the fix", function()
  local function err(fn, pattern) return T.raises(fn, pattern, true) end
  local msg = err(function() plot.line { x = { 1, 2, 3 }, y = { 1, 2, 3, 4 } } end,
    "plot.line: x has 3 values but y has 4; pass x and y of the same length")
  T.contains(msg, "test_plot.lua") -- reported at the caller's line
  err(function() plot.line { y = {} } end, "plot.line: y is empty; pass at least one value")
  err(function() plot.line { y = { 1, "2", 3 } } end, 'plot.line: y[2] is a string ("2"); y must hold only numbers')
  err(function() plot.line {} end, "plot.line: needs y")
  err(function() plot.line { y = { 1 }, titel = "x" } end, "plot.line: unknown option 'titel'; valid options:")
  err(function() plot.line { { 1, 2 } } end, "plot.line: got a positional value; name it")
  err(function() plot.line({ 1, 2, 3 }) end, "plot.line: got a positional value")
  err(function() plot.line(tensor.from({ 1, 2 })) end, "plot.line: takes one table of options")
  err(function() plot.line { y = tensor.zeros(2, 2) } end, "plot.line: y must be 1-D; got a tensor of shape [2,2]")
  err(function() plot.line { y = { 1 }, x = { 1 }, series = { { y = { 1 } } } } end, "pass either y (and x) or series")
  err(function() plot.line { series = { { y = { 1, 2 }, x = { 1 } } } } end,
    "plot.line: series[1].x has 1 values but series[1].y has 2")
  err(function() plot.line { series = { { y = { 1 }, lable = "a" } } } end, "series[1] has unknown field 'lable'")
  err(function() plot.line { y = { 1 }, width = 10 } end, "plot.line: width must be an integer number of pixels from 100 to 4096")
  err(function() plot.line { y = { 1 }, color = "blue" } end, 'plot.line: color must be "#rrggbb" or {r, g, b}')
  err(function() plot.line { y = { 1 }, ylim = { 2, 1 } } end, "plot.line: ylim must be {low, high}")
  err(function() plot.scatter { x = { 1, 2 }, y = { 1 } } end, "plot.scatter: x has 2 values but y has 1")
  err(function() plot.bar { labels = { "a" }, values = { 1, 2 } } end, "plot.bar: labels has 1 entries but values has 2")
  err(function() plot.bar { labels = { "a" } } end, "plot.bar: needs values")
  err(function() plot.hist { values = { 1 }, bins = 0 } end, "plot.hist: bins must be an integer from 1 to 1000")
  err(function() plot.heatmap { matrix = { 1, 2, 3 } } end, "plot.heatmap: matrix must be a list of rows")
  err(function() plot.heatmap { matrix = { { 1, 2 }, { 3 } } } end,
    "plot.heatmap: matrix rows differ in length: matrix[1] has 2 values, matrix[2] has 1")
  err(function() plot.heatmap { matrix = tensor.from({ 1, 2 }) } end,
    "plot.heatmap: matrix must be 2-D; got a tensor of shape [2] (use t:view(1, -1) for a single row)")
  err(function() plot.heatmap { matrix = tensor.zeros(2, 2, 2) } end, "matrix must be 2-D; got a tensor of shape [2,2,2]")
  err(function() plot.heatmap { matrix = {} } end, "plot.heatmap: matrix is empty")
  err(function() plot.heatmap { matrix = { { 1 } }, colormap = "jet" } end, 'colormap must be "viridis" or "rdbu"')
  err(function() plot.heatmap { matrix = { { 1, 2 } }, col_labels = { "a" } } end,
    "plot.heatmap: col_labels has 1 entries but the matrix has 2; pass one label per column")
end)

T.test("seer.core.png from Lua: round trip, fit, size, errors", function()
  local px = "\255\0\0\0\255\0\0\0\255\255\255\255"
  local bytes = png.encode(2, 2, 3, px)
  T.eq({ png.size(bytes) }, { 2, 2 })
  local d = png.decode(bytes)
  T.eq({ d.width, d.height, d.channels, d.pixels }, { 2, 2, 3, px })
  local ga = png.decode(png.encode(1, 2, 2, "\10\20\30\40"))
  T.eq({ ga.channels, ga.pixels }, { 4, "\10\10\10\20\30\30\30\40" })
  local big = plot.heatmap { matrix = { { 0, 1 } }, width = 1024, height = 512 }
  local out, w, h = png.fit(big.png, 512)
  T.eq({ w, h }, { 512, 256 })
  T.eq({ png.size(out) }, { 512, 256 })
  local same, w2, h2 = png.fit(out, 512)
  T.ok(same == out and w2 == 512 and h2 == 256)
  T.raises(function() png.encode(2, 2, 3, "abc") end, "png.encode: pixels has 3 bytes; a 2x2 image with 3 channels needs 12", true)
  T.raises(function() png.encode(0, 2, 3, "") end, "png.encode: width must be an integer from 1 to", true)
  T.raises(function() png.encode(2, 2, 5, "") end, "png.encode: channels", true)
  T.raises(function() png.decode("GIF89a") end, "png.decode: not a PNG image", true)
  T.raises(function() png.decode(bytes:sub(1, #bytes - 5)) end, "png.decode: truncated PNG", true)
  T.raises(function() png.decode({}) end, "png.decode: bytes must be a string", true)
  T.raises(function() png.fit(bytes, 0) end, "png.fit: max_side must be an integer from 1", true)
  T.raises(function() png.size("x") end, "png.size: not a PNG image", true)
end)

-- A "decompression bomb": a 16 KB PNG of 11585 x 11585 one-bit pixels (2^27, the most seer
-- decodes) inflates to 400 MB of RGB. png.fit (what an agent's displayed images go through) used
-- to decode it whole: 405 MB and 1 s for a 512-px answer, 16 images a tool result. It now reads a
-- row at a time (Adam7 a pass at a time) and keeps only sums for the output, also when the image
-- already fits (then nothing but one row is kept).
T.test("png.fit of a decompression bomb holds one row and the output, not the image", function()
  local dir = T.tmpdir()
  seer.write_file(dir .. "/bomb.py", [[
import struct, sys, zlib
def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
n = 11585
for interlace in (0, 1):
    z = zlib.compressobj(9)
    parts = []
    # Adam7 passes: (x0, y0, dx, dy); a plain image is one pass of every pixel
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)] if interlace else [(0, 0, 1, 1)]
    for x0, y0, dx, dy in passes:
        w, h = (n - x0 + dx - 1) // dx, (n - y0 + dy - 1) // dy
        row = b'\0' * (1 + (w + 7) // 8)
        for _ in range(h):
            parts.append(z.compress(row))
    parts.append(z.flush())
    ihdr = struct.pack('>IIBBBBB', n, n, 1, 0, 0, 0, interlace)
    data = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr) + chunk(b'IDAT', b''.join(parts)) + chunk(b'IEND', b'')
    open('%s/bomb%d.png' % (sys.argv[1], interlace), 'wb').write(data)
]])
  local ok, out = T.sh(("/usr/bin/python3 '%s/bomb.py' '%s'"):format(dir, dir))
  T.ok(ok, out)
  local SEER = require("seer.jupyter").seer_binary()
  for _, case in ipairs { { "bomb0.png", 512 }, { "bomb1.png", 512 }, { "bomb0.png", 32768 } } do
    local file = dir .. "/" .. case[1]
    T.ok(#seer.read_file(file) < 64 * 1024, "the bomb is small")
    local code = ([[local png = require "seer.core.png"
local f = io.open(%q, "rb"); local b = f:read("*a"); f:close()
local out, w, h = png.fit(b, %d, png.MAX_PIXELS)
local st = io.open("/proc/self/status"):read("*a")
print(w, h, #out, st:match("VmHWM:%%s*(%%d+) kB"))]]):format(file, case[2])
    local ok2, res = T.sh(("'%s' -e '%s'"):format(SEER, code:gsub("'", "'\\''")))
    T.ok(ok2, res)
    local w, h, _, hwm_kb = res:match("^(%d+)\t(%d+)\t(%d+)\t(%d+)")
    T.eq({ tonumber(w), tonumber(h) }, case[2] == 512 and { 512, 512 } or { 11585, 11585 }, res)
    -- the process's whole peak (LuaJIT, seer's modules, the 16 KB file): about 12 MB; before, 405 MB
    T.ok(tonumber(hwm_kb) < 64 * 1024, ("%s fit to %d: peak %s kB"):format(case[1], case[2], tostring(hwm_kb)))
  end
end)
