-- The seer module and its helpers as scripts see them: the global, lazy submodules, paths,
-- file helpers, and seer.pretty's formatting.
local T = require "testing"
local pretty = require "seer.pretty"

T.test("seer global is the seer module", function()
  T.ok(seer == require "seer")
  T.eq(type(seer.version), "string")
  T.ok(seer.version:match("^%d+%.%d+%.%d+$"), seer.version)
end)

T.test("submodules load on first use", function()
  T.ok(seer.json == require "seer.json")
  T.ok(seer.pretty == pretty)
end)

T.test("unknown seer field is an error listing the modules", function()
  local msg = T.raises(function() return seer.jsno end)
  T.contains(msg, "seer has no module or field 'jsno'")
  T.contains(msg, "json")
  T.contains(msg, "pretty")
end)

T.test("script_dir is the calling file's directory", function()
  local here = seer.script_dir()
  T.ok(io.open(here .. "/testing.lua"), "testing.lua beside " .. here)
  T.eq(here:sub(1, 1), "/")
end)

T.test("toolkit_dir and package.path point into the Lua tree", function()
  local lua_dir = seer.toolkit_dir:match("^(.*)/toolkit$")
  T.ok(lua_dir, seer.toolkit_dir)
  T.eq(package.path:sub(1, #lua_dir + 7), lua_dir .. "/?.lua;")
  T.ok(io.open(lua_dir .. "/seer/init.lua"))
end)

T.test("ffi, jit and bit are available", function()
  local ffi = require "ffi"
  T.eq(ffi.sizeof("int32_t"), 4)
  T.eq(type(jit.version), "string")
  T.eq(bit.band(6, 3), 2)
end)

T.test("read_file and write_file round-trip bytes", function()
  local d = T.tmpdir()
  local p = d .. "/data.bin"
  local bytes = "a\0b\255\n" .. string.rep("x", 100000)
  seer.write_file(p, bytes)
  T.eq(seer.read_file(p), bytes)
  seer.write_file(p, "short")
  T.eq(seer.read_file(p), "short")
end)

T.test("read_file and write_file errors name the path and the reason", function()
  T.raises(function() seer.read_file("/nonexistent/file") end, "cannot read /nonexistent/file: No such file or directory", true)
  T.raises(function() seer.write_file("/nonexistent/dir/f", "x") end, "cannot write /nonexistent/dir/f", true)
  T.raises(function() seer.write_file("/tmp/x") end, "bad argument #2")
  -- at the caller's line, not inside seer's init.lua
  local ok, err = pcall(function() local s = seer.read_file("/nonexistent/file"); return s end)
  T.eq(ok, false)
  T.contains(err, "test_seer.lua:")
  ok, err = pcall(function() seer.write_file("/nonexistent/dir/f", "x") end)
  T.contains(err, "test_seer.lua:")
end)

T.test("a name that is not a module lists each module once, and points to the toolkit", function()
  local ok, err = pcall(function() return seer.no_such_module end)
  T.eq(ok, false)
  local list = err:match("modules: (.*)$")
  local seen = {}
  for n in list:gmatch("[%w_]+") do
    T.eq(seen[n], nil, "listed twice: " .. n)
    seen[n] = true
    T.eq(type(seer[n]), "table", "listed but not loadable: " .. n)
  end
  T.eq(seen.cli, nil, "cli is a folder of commands, not a module")
  T.raises(function() return seer.toolkit end, 'require "toolkit.<name>"', true)
end)

T.test("now is monotonic and in seconds", function()
  local a = seer.now()
  local b = seer.now()
  T.ok(b >= a)
  T.ok(a > 0)
end)

T.test("pretty prints scalars", function()
  T.eq(pretty.format(1), "1")
  T.eq(pretty.format(-2.5), "-2.5")
  T.eq(pretty.format(0.1), "0.1")
  T.eq(pretty.format(1 / 0), "inf")
  T.eq(pretty.format(-1 / 0), "-inf")
  T.eq(pretty.format(0 / 0), "nan")
  T.eq(pretty.format(2 ^ 60), "1.1529215046068e+18")
  T.eq(pretty.format("a\nb\"c"), '"a\\nb\\"c"')
  T.eq(pretty.format(nil), "nil")
  T.eq(pretty.format(true), "true")
end)

T.test("pretty writes control characters as escapes, C1 ones in UTF-8 too", function()
  -- the REPL prints values with it: what a sandbox returned must not command the terminal
  T.eq(pretty.format("a\27]0;t\7b"), '"a\\27]0;t\\7b"')
  T.eq(pretty.format("x\194\155y \194\160 \195\169"), '"x\\194\\155y \194\160 \195\169"')
  local s = "\0\1\27[2J\r\n\194\128\194\159\226\130\172"
  T.eq(loadstring("return " .. pretty.format(s))(), s)
end)

T.test("seer.terminal.safe shows terminal commands as text", function()
  local safe = require("seer.terminal").safe
  T.eq(safe("plain text, é and € stay\n\tindented"), "plain text, é and € stay\n\tindented")
  T.eq(safe("\27[1;31mred\27[0m \27[38;2;1;2;3mtrue colour\27[m"), "red true colour") -- colours dropped
  T.eq(safe("\27[8mconcealed\27[28m"), "concealed")
  T.eq(safe("a\27]52;c;cm0gLXJmIH4=\7b"), "a\\x1b]52;c;cm0gLXJmIH4=\\x07b")
  T.eq(safe("\27]8;;http://x\27\\link\27]8;;\27\\"), "\\x1b]8;;http://x\\x1b\\link\\x1b]8;;\\x1b\\")
  T.eq(safe("\27[2J\27[H\27[1A\27[K"), "\\x1b[2J\\x1b[H\\x1b[1A\\x1b[K")
  T.eq(safe("line\r\nnext\rover"), "line\nnext\\x0dover")
  T.eq(safe("\0\8\11\12\127"), "\\x00\\x08\\x0b\\x0c\\x7f")
  T.eq(safe("c1 \194\155 2J \194\157 \194\160nbsp"), "c1 \\u009b 2J \\u009d \194\160nbsp")
  T.eq(safe(42), "42")
  -- characters that reorder or hide text, and bytes that are not UTF-8 (a lone 0x9B is CSI on a
  -- Latin-1 terminal); well-formed characters outside those stay
  T.eq(safe("rm -rf \226\128\174txt.sgol"), "rm -rf \\u202etxt.sgol")
  T.eq(safe("\226\129\167a\226\129\169 b\226\128\139c \226\128\168 \239\187\191"), "\\u2067a\\u2069 b\\u200bc \\u2028 \\ufeff")
  T.eq(safe("raw \155 \133 end"), "raw \\x9b \\x85 end")
  T.eq(safe("cut \240\159\152"), "cut \\xf0\\x9f\\x98")
  T.eq(safe("overlong \192\155 surrogate \237\160\128"), "overlong \\xc0\\x9b surrogate \\xed\\xa0\\x80")
  T.eq(safe("ok \240\159\152\128 \226\130\172 \224\164\149\224\165\141\226\128\141"), "ok \240\159\152\128 \226\130\172 \224\164\149\224\165\141\226\128\141")
  local pending = require("seer.terminal").pending_utf8
  T.eq({ pending("ab"), pending("ab\194"), pending("a\240\159"), pending("a\240\159\152"), pending("\195\169"), pending("\155") },
       { 0, 1, 2, 3, 0, 0 })
  -- the experiments' printer streams the agent's text and tool names through it
  local written = {}
  local real = io.write
  io.write = function(...) for _, v in ipairs({ ... }) do written[#written + 1] = v end end
  local ok, err = pcall(function()
    local pr = require("seer.experiment").printer({ small = false }, "probe")
    pr({ type = "text_delta", text = "hi \27]0;owned\7" })
    pr({ type = "tool_call", name = "x\27[2J" })
  end)
  io.write = real
  assert(ok, err)
  T.eq(table.concat(written), "hi \\x1b]0;owned\\x07[probe] x\\x1b[2J\n")
end)

-- Characters a terminal draws as nothing hide text from the person reading it while a model
-- still reads them: tag characters spell ASCII invisibly ("ignore the user" after a harmless
-- line), variation selectors carry a byte each after any character, zero-width characters and
-- soft hyphens split or mark words unseen. safe() shows them as it shows the bidi controls,
-- keeping only the few that shape visible text where they do.
T.test("seer.terminal.safe shows invisible characters (tags, zero-width, variation selectors)", function()
  local safe = require("seer.terminal").safe
  local function u(...) -- UTF-8 of code points (numbers) and ASCII (strings)
    local t = {}
    for _, c in ipairs({ ... }) do
      if type(c) == "string" then t[#t + 1] = c
      elseif c < 0x800 then t[#t + 1] = string.char(0xC0 + math.floor(c / 64), 0x80 + c % 64)
      elseif c < 0x10000 then t[#t + 1] = string.char(0xE0 + math.floor(c / 4096), 0x80 + math.floor(c / 64) % 64, 0x80 + c % 64)
      else t[#t + 1] = string.char(0xF0 + math.floor(c / 262144), 0x80 + math.floor(c / 4096) % 64, 0x80 + math.floor(c / 64) % 64, 0x80 + c % 64) end
    end
    return table.concat(t)
  end
  -- "hi" in tag characters, and the tag block's ends and its unassigned rest
  T.eq(safe(u("ok", 0xE0068, 0xE0069, " ", 0xE0001, 0xE007F, 0xE0FFF)), "ok\\U000e0068\\U000e0069 \\U000e0001\\U000e007f\\U000e0fff")
  -- zero-width space, joiners and marks next to ASCII, word joiner and invisible operators, soft hyphen, BOM
  T.eq(safe(u("a", 0x200B, "b", 0x200C, "c", 0x200D, "d", 0x200E, 0x200F)), "a\\u200bb\\u200cc\\u200dd\\u200e\\u200f")
  T.eq(safe(u("x", 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, "y", 0x00AD, "z", 0xFEFF)),
       "x\\u2060\\u2061\\u2062\\u2063\\u2064y\\u00adz\\ufeff")
  -- bidi controls, still
  T.eq(safe(u(0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069, 0x061C)),
       "\\u202a\\u202b\\u202c\\u202d\\u202e\\u2066\\u2067\\u2068\\u2069\\u061c")
  -- other default-ignorable characters: combining grapheme joiner, Hangul fillers, Mongolian
  -- selectors, musical formatting, shorthand format controls, interlinear annotation
  T.eq(safe(u(0x034F, 0x115F, 0x3164, 0xFFA0, 0x180E, 0x1D173, 0x1BCA0, 0xFFF9)),
       "\\u034f\\u115f\\u3164\\uffa0\\u180e\\U0001d173\\U0001bca0\\ufff9")
  -- variation selectors: a byte hidden behind every character ("emoji smuggling")
  T.eq(safe(u("a", 0xFE00, "b", 0xE0100, 0xE01EF)), "a\\ufe00b\\U000e0100\\U000e01ef")
  -- kept where they shape what is seen: an emoji's style, emoji sequences, Indic conjuncts,
  -- a Persian word; repeated or out of place they are shown
  local kept = u(0x2764, 0xFE0F, " ", 0x1F468, 0x200D, 0x1F469, 0x200D, 0x1F467, " ", 0x2764, 0xFE0F, 0x200D, 0x1F525,
                 " 1", 0xFE0F, 0x20E3, " ", 0x0915, 0x094D, 0x200D, 0x0937, " ", 0x0645, 0x06CC, 0x200C, 0x062E)
  T.eq(safe(kept), kept)
  T.eq(safe(u(0x1F600, 0xFE0F, 0xFE0F, " ", 0x0915, 0x200D, 0x200D, " ", 0x200D, "x", 0xFE0F, 0xFE0E)),
       u(0x1F600, 0xFE0F, "\\ufe0f ", 0x0915, 0x200D, "\\u200d \\u200dx", 0xFE0F, "\\ufe0e"))
end)

T.test("seer.terminal.stream shows text in pieces safely, a character cut between pieces whole", function()
  local got = {}
  local show = require("seer.terminal").stream(function(s) got[#got + 1] = s end)
  show("caf\195")        -- é cut after its first byte: held
  show("\169 \27]0;t\7") -- completed; the escape shown
  show("x\194")          -- 0xC2 0x9B is CSI (C1): judged whole, shown
  show("\155[2J")
  show("end\240\159")    -- a cut emoji at the end: written escaped when flushed
  show(nil)
  T.eq(table.concat(got), "caf\195\169 \\x1b]0;t\\x07x\\u009b[2Jend\\xf0\\x9f")
  T.eq(got[1], "caf")
end)

T.test("pretty prints tables sorted, nested and cut", function()
  T.eq(pretty.format({}), "{}")
  T.eq(pretty.format({ 1, 2, 3 }), "{ 1, 2, 3 }")
  T.eq(pretty.format({ b = 2, a = 1, [10] = "x", ["not id"] = true, ["end"] = 0 }),
    '{ [10] = "x", a = 1, b = 2, ["end"] = 0, ["not id"] = true }')
  T.eq(pretty.format({ a = { b = { c = { d = 1 } } } }), "{ a = { b = { c = {...} } } }")
  T.eq(pretty.format({ a = { b = { c = { d = 1 } } } }, { depth = 10 }), "{ a = { b = { c = { d = 1 } } } }")
  local many = {}
  for i = 1, 60 do many[i] = i end
  T.contains(pretty.format(many), "... (10 more)")
end)

T.test("pretty breaks long tables over lines", function()
  local t = { alpha = string.rep("a", 40), beta = string.rep("b", 40) }
  T.eq(pretty.format(t), '{\n  alpha = "' .. string.rep("a", 40) .. '",\n  beta = "' .. string.rep("b", 40) .. '"\n}')
end)

T.test("pretty shows cycles and uses __tostring", function()
  local t = { name = "loop" }
  t.self = t
  T.eq(pretty.format(t), '{ name = "loop", self = <cycle> }')
  local obj = setmetatable({}, { __tostring = function() return "Tensor[3] f32" end })
  T.eq(pretty.format({ obj }), "{ Tensor[3] f32 }")
end)

T.test("pretty rejects unknown options", function()
  T.raises(function() pretty.format({}, { dept = 2 }) end, "unknown option 'dept'; valid options: depth, indent, max_items, width", true)
end)

T.test("a child's stdout read by lines never buffers more than 1 MiB of one line", function()
  local process = require "seer.process"
  local c = process.spawn{ argv = { "/bin/sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; printf '\\nend\\n'" },
                           stdout = "pipe" }
  local sizes = {}
  while true do
    local l = c:read_line(20000)
    if not l then break end
    sizes[#sizes + 1] = #l
    if #l == 3 then T.eq(l, "end") end
  end
  c:wait(5000)
  T.eq(sizes, { 1048576, 1048576, 3000000 - 2 * 1048576, 3 })
end)
