-- Tests of seer.json (engine/json/json.c through lua/seer/json.lua): encoding rules and exact
-- output, number formatting, marks, __tojson, every error message, decoding, error offsets.
-- Expected texts are written from the spec (and agree with Python's json module with
-- sort_keys=True, ensure_ascii=False), not copied from this implementation's output.
local T = require "testing"
local json = require "seer.json"

local function compact(v) return json.encode(v) end

-- encode: values and layout ---------------------------------------------------------------

T.test("json: encode scalars", function()
  T.eq(compact(nil), "null")
  T.eq(compact(json.null), "null")
  T.eq(compact(true), "true")
  T.eq(compact(false), "false")
  T.eq(compact(0), "0")
  T.eq(compact(1), "1")
  T.eq(compact(-7), "-7")
  T.eq(compact(""), '""')
  T.eq(compact("hi"), '"hi"')
end)

T.test("json: compact output has no spaces and sorted keys", function()
  T.eq(compact({ b = 1, a = { c = true, b = false }, A = json.null }), '{"A":null,"a":{"b":false,"c":true},"b":1}')
  T.eq(compact({ 1, 2, 3 }), "[1,2,3]")
  T.eq(compact({ { 1 }, { x = { "y" } } }), '[[1],{"x":["y"]}]')
end)

T.test("json: keys sort in byte order", function()
  T.eq(compact({ b = 1, a = 2, B = 3, ["é"] = 4, [""] = 5, ab = 6 }), '{"":5,"B":3,"a":2,"ab":6,"b":1,"é":4}')
  -- the same value built in another insertion order gives the same text
  local t = {}
  for _, k in ipairs({ "z", "m", "a", "q", "b" }) do t[k] = k end
  T.eq(compact(t), '{"a":"a","b":"b","m":"m","q":"q","z":"z"}')
end)

T.test("json: string escapes", function()
  T.eq(compact("\n\t\\\"\1"), [["\n\t\\\"\u0001"]])
  T.eq(compact("\b\f\r\31"), [["\b\f\r\u001f"]])
  -- UTF-8, DEL and "/" are written as they are
  T.eq(compact("é€😀\127/"), '"é€😀\127/"')
end)

T.test("json: pretty output, exact text", function()
  local v = { name = "x", list = { 1, { a = true } }, empty = {} }
  local want = table.concat({
    "{",
    '  "empty": {},',
    '  "list": [',
    "    1,",
    "    {",
    '      "a": true',
    "    }",
    "  ],",
    '  "name": "x"',
    "}",
  }, "\n")
  T.eq(json.pretty(v), want)
  T.eq(json.encode(v, { indent = 2 }), want)
end)

T.test("json: indent 4 and indent 0", function()
  T.eq(json.encode({ a = { 1, { 2, {} } }, b = "é" }, { indent = 4 }),
    '{\n    "a": [\n        1,\n        [\n            2,\n            {}\n        ]\n    ],\n    "b": "é"\n}')
  T.eq(json.encode({ 1, { 2, {} } }, { indent = 0 }), "[\n1,\n[\n2,\n{}\n]\n]")
  T.eq(json.pretty({}), "{}")
  T.eq(json.pretty(json.array()), "[]")
  T.eq(json.pretty(5), "5")
end)

T.test("json: empty tables follow the empty option unless marked", function()
  T.eq(compact({}), "{}")
  T.eq(json.encode({}, { empty = "object" }), "{}")
  T.eq(json.encode({}, { empty = "array" }), "[]")
  T.eq(json.encode({ a = {} }, { empty = "array" }), '{"a":[]}')
  T.eq(json.encode(json.object(), { empty = "array" }), "{}")
  T.eq(json.encode(json.array(), { empty = "object" }), "[]")
  T.eq(json.pretty({ a = { b = {} } }, { indent = 4, empty = "array" }), '{\n    "a": {\n        "b": []\n    }\n}')
end)

-- numbers -----------------------------------------------------------------------------------

T.test("json: integers print without a decimal point", function()
  T.eq(compact(2 ^ 53), "9007199254740992")
  T.eq(compact(-(2 ^ 53)), "-9007199254740992")
  T.eq(compact(2 ^ 60), "1152921504606846976")
  T.eq(compact(123456789012), "123456789012")
  T.eq(compact(1e15), "1000000000000000")
  T.eq(compact(3.0), "3")
end)

T.test("json: other numbers print the shortest text that reads back exactly", function()
  T.eq(compact(0.1), "0.1")
  T.eq(compact(0.1 + 0.2), "0.30000000000000004") -- cJSON's own printer would say 0.3
  T.eq(compact(1 / 3), "0.3333333333333333")
  T.eq(compact(1e300), "1e+300")
  T.eq(compact(-1.5e-7), "-1.5e-07")
  T.eq(compact(-0.0), "-0")
  T.eq(compact(2.5), "2.5")
end)

T.test("json: numbers keep printf's shortest-of-%.15g/%.16g/%.17g spelling", function()
  -- exact halfway cases round to even, as glibc's printf does
  T.eq(compact(2 ^ -25), "2.9802322387695312e-08")
  T.eq(compact(130502.80297851562), "130502.80297851562")
  T.eq(compact(2053525664009017.2), "2053525664009017.2")
  -- where %g switches notation, and the ends of the range
  T.eq(compact(1e-4), "0.0001")
  T.eq(compact(1e-5), "1e-05")
  T.eq(compact(0.000123), "0.000123")
  T.eq(compact(-0.000001), "-1e-06")
  T.eq(compact(999999999999999.9), "999999999999999.9")
  T.eq(compact(1e15 + 0.5), "1000000000000000.5")
  T.eq(compact(0.1 + 0.7), "0.7999999999999999")
  T.eq(compact(2 ^ 63), "9.223372036854776e+18")
  T.eq(compact(1e23), "1e+23")
  T.eq(compact(5e-324), "4.94065645841247e-324")
  T.eq(compact(1.7976931348623157e308), "1.7976931348623157e+308")
  T.eq(compact(12345.678e-20), "1.2345678e-16")
end)

T.test("json: numbers round-trip", function()
  for _, x in ipairs({ 0, 1, -1, 2 ^ 53, -(2 ^ 53), 2 ^ 63 - 1024, 1e300, -1e300, 0.1, 0.1 + 0.2, 1 / 3, 2.5e-308,
    4.9406564584124654e-324, 1.7976931348623157e308, 123.456, -987654.321 }) do
    local back = json.decode(json.encode(x))
    T.ok(back == x, string.format("%.17g came back as %.17g", x, back))
  end
  local z = json.decode(json.encode(-0.0))
  T.eq(1 / z, -math.huge, "negative zero keeps its sign")
  T.eq(1 / json.decode("0"), math.huge)
end)

T.test("json: NaN and infinities are errors naming the path", function()
  T.raises(function() json.encode({ x = 0 / 0 }) end, "json.encode: cannot encode NaN at $.x (JSON has no NaN/Infinity)", true)
  T.raises(function() json.encode({ a = { 1, math.huge } }) end, "json.encode: cannot encode inf at $.a[2] (JSON has no NaN/Infinity)", true)
  T.raises(function() json.encode(-math.huge) end, "json.encode: cannot encode -inf at $ (JSON has no NaN/Infinity)", true)
end)

-- tables that are not arrays or objects -------------------------------------------------------

T.test("json: a hole in an array is an error naming the key", function()
  T.raises(function() json.encode({ a = { b = { 1, 2, [4] = 4 } } }) end,
    "json.encode: cannot encode table at $.a.b: key 4 breaks the array 1..2 (use json.null for holes)", true)
  T.raises(function() json.encode({ 1, nil, 3 }) end, "key 3 breaks the array 1..1 (use json.null for holes)", true)
  T.raises(function() json.encode({ [2] = "x" }) end,
    "json.encode: cannot encode table at $: key 2 breaks the array: there is no key 1 (use json.null for holes)", true)
  -- the fix the message suggests works
  T.eq(compact({ 1, json.null, 3 }), "[1,null,3]")
end)

T.test("json: mixed keys are an error", function()
  T.raises(function() json.encode({ list = { 1, x = 2 } }) end,
    'json.encode: cannot encode table at $.list: mixed key types (number 1 and string "x")', true)
end)

T.test("json: keys that are neither strings nor array indices", function()
  local function bad(t, key)
    local msg = T.raises(function() json.encode({ k = t }) end, "json.encode: cannot encode table at $.k: key ", true)
    T.contains(msg, "key " .. key .. " is neither a string (object key) nor an integer >= 1 (array index)")
  end
  bad({ [true] = 1 }, "true")
  bad({ [1.5] = 1 }, "1.5")
  bad({ [0] = 1 }, "0")
  bad({ [-1] = 1 }, "-1")
  bad({ [{}] = 1 }, "of type table")
end)

T.test("json: paths use brackets for keys that are not identifiers, 1-based indices", function()
  T.raises(function() json.encode({ ["a b"] = { x = 0 / 0 } }) end, 'cannot encode NaN at $["a b"].x', true)
  T.raises(function() json.encode({ { 1 }, { 2, { y = 0 / 0 } } }) end, "cannot encode NaN at $[2][2].y", true)
  T.raises(function() json.encode({ ['q"k'] = 0 / 0 }) end, [=[cannot encode NaN at $["q\"k"]]=], true)
end)

T.test("json: objects with many keys, and many keys at many levels", function()
  local t, parts = {}, {}
  for i = 1, 3000 do
    local k = ("k%04d"):format(i)
    t[k] = i
    parts[i] = ('"%s":%d'):format(k, i)
  end
  T.eq(compact(t), "{" .. table.concat(parts, ",") .. "}")
  local root = {}
  local cur = root
  for _ = 1, 300 do
    for k = 1, 9 do cur["x" .. k] = k end
    cur.next = {}
    cur = cur.next
  end
  local text = compact(root)
  T.eq(#text, 300 * (#'{"next":' + #'"x1":1,' * 9 + #"}") + #"{}")
  T.eq(json.decode(text), root)
end)

T.test("json: cycles are errors", function()
  local t = {}
  t.a = { b = t }
  T.raises(function() json.encode(t) end, "json.encode: cycle at $.a.b (the table at $ contains itself)", true)
  local u = { 1 }
  u[2] = u
  T.raises(function() json.encode({ x = u }) end, "json.encode: cycle at $.x[2] (the table at $.x contains itself)", true)
  -- the same table twice side by side is not a cycle
  local s = { 1 }
  T.eq(compact({ x = s, y = s }), '{"x":[1],"y":[1]}')
end)

T.test("json: values JSON cannot hold are errors", function()
  T.raises(function() json.encode({ f = print }) end, "json.encode: cannot encode function at $.f (", true)
  T.raises(function() json.encode({ co = coroutine.create(function() end) }) end, "cannot encode thread at $.co", true)
  T.raises(function() json.encode({ u = newproxy(true) }) end, "cannot encode userdata at $.u", true)
  local msg = T.raises(function() json.encode({ u = newproxy(false) }) end, "cannot encode userdata at $.u", true)
  T.contains(msg, "__tojson")
  local ffi = require "ffi"
  T.raises(function() json.encode({ c = ffi.new("int[1]") }) end, "cannot encode cdata at $.c", true)
end)

T.test("json: nesting deeper than 1000 levels is an error", function()
  local function nest(n)
    local root = {}
    local cur = root
    for _ = 2, n do
      cur[1] = {}
      cur = cur[1]
    end
    return root
  end
  T.eq(#compact(nest(1000)), 2000)
  local msg = T.raises(function() json.encode(nest(1001)) end, "json.encode: nesting deeper than 1000 levels at $[1][1]", true)
  T.ok(#msg < 400, "the path in the message is shortened")
  local o = {}
  local cur = o
  for _ = 1, 999 do
    cur.k = {}
    cur = cur.k
  end
  T.eq(#compact(o), 999 * 6 + 2) -- 999 times {"k": and }, around the innermost {}
end)

T.test("json: strings must be UTF-8", function()
  T.raises(function() json.encode({ s = "ab\255" }) end,
    "json.encode: cannot encode string at $.s: it is not valid UTF-8 (at byte 2 of the string)", true)
  T.raises(function() json.encode({ "ok", "\192\128" }) end, "cannot encode string at $[2]: it is not valid UTF-8 (at byte 0", true)
  T.raises(function() json.encode({ ["k\255x"] = 1 }) end, [[key "k\xFFx" is not valid UTF-8 (at byte 1 of the key)]], true)
end)

T.test("json: NUL bytes round-trip as \\u0000 in values and keys, nested and at the top level", function()
  T.eq(json.encode("a\0b"), [["a\u0000b"]])
  T.eq(json.decode([["\u0000"]]), "\0")
  T.eq(json.decode([["a\u0000b\u0000"]]), "a\0b\0")
  local v = { ["k\0x"] = "a\0b", list = { "\0", "x\0\0y\u{1F600}\0", "" }, ["\0"] = { ["\0\0"] = "\0" } }
  local back = json.decode(json.encode(v))
  T.eq(back["k\0x"], "a\0b")
  T.eq(back.list[1], "\0")
  T.eq(back.list[2], "x\0\0y\u{1F600}\0")
  T.eq(back.list[3], "")
  T.eq(back["\0"]["\0\0"], "\0")
  -- escapes of every length around the NUL: the decoded length is worked out from the text
  T.eq(json.decode([[["\u00e9\u0000\ud83d\ude00\n\u0000\u4e2d", "plain", {"\u0000k": 1}] ]]),
    { "\u{e9}\0\u{1F600}\n\0\u{4e2d}", "plain", { ["\0k"] = 1 } })
  -- a top-level array with a NUL takes the whole-tree path; without one, the element-wise path
  T.eq(#json.decode('["\\u0000", "\\\\u0000"]')[2], 6) -- "\\u0000" is a backslash and "u0000"
  T.eq(json.decode('["\\u0000", "\\\\u0000"]')[1], "\0")
end)

-- __tojson ------------------------------------------------------------------------------------

T.test("json: __tojson on tables and userdata", function()
  local mt = { __tojson = function(self) return { kind = "point", xy = { self.x, self.y } } end }
  T.eq(compact({ p = setmetatable({ x = 1, y = 2 }, mt) }), '{"p":{"kind":"point","xy":[1,2]}}')
  local ud = newproxy(true)
  getmetatable(ud).__tojson = function() return "U" end
  T.eq(compact({ ud, ud }), '["U","U"]')
  -- the result may itself use __tojson
  local inner = setmetatable({}, { __tojson = function() return 7 end })
  T.eq(compact(setmetatable({}, { __tojson = function() return inner end })), "7")
end)

T.test("json: __tojson errors", function()
  local boom = setmetatable({}, { __tojson = function() error("boom") end })
  local msg = T.raises(function() json.encode({ x = { boom } }) end, "json.encode: __tojson failed at $.x[1]: ", true)
  T.contains(msg, "boom")
  local selfish = setmetatable({}, { __tojson = function(s) return s end })
  T.raises(function() json.encode({ x = selfish }) end, "at $.x: its __tojson returned the value itself", true)
  local loop
  loop = setmetatable({}, { __tojson = function() return { loop } end })
  T.raises(function() json.encode(loop) end, "json.encode: cycle at $[1]", true)
  local endless
  endless = { __tojson = function() return setmetatable({}, endless) end }
  T.raises(function() json.encode(setmetatable({}, endless)) end, "nesting deeper than 1000 levels", true)
end)

-- marks -----------------------------------------------------------------------------------------

T.test("json: array and object marks", function()
  local t = {}
  T.ok(json.array(t) == t, "array returns its argument")
  T.ok(json.is_array(t) and not json.is_object(t))
  T.ok(json.object(t) == t and json.is_object(t) and not json.is_array(t), "a mark can be changed")
  T.ok(json.is_array(json.array()), "no argument: a new marked table")
  T.ok(not json.is_array({}) and not json.is_object({}) and not json.is_array("x") and not json.is_object(nil))
  T.eq(getmetatable(json.array()), getmetatable(json.array()), "one metatable per kind")
  T.eq(compact(json.array({ 1, 2 })), "[1,2]")
  T.eq(compact(json.object({ a = 1 })), '{"a":1}')
  T.raises(function() json.encode(json.array({ a = 1 })) end, 'cannot encode table at $: string key "a" in a table marked json.array', true)
  T.raises(function() json.encode(json.object({ 1 })) end, "cannot encode table at $: key 1 in a table marked json.object", true)
  T.raises(function() json.array(setmetatable({}, {})) end, "the table already has a metatable", true)
  T.raises(function() json.object("x") end, "bad argument #1 to 'object' (table expected, got string)", true)
end)

T.test("json: decoded arrays and objects keep their kind through encode", function()
  T.eq(compact(json.decode("[]")), "[]")
  T.eq(compact(json.decode("{}")), "{}")
  T.eq(json.encode(json.decode("{}"), { empty = "array" }), "{}")
  T.eq(compact(json.decode('{"a":{},"b":[],"c":[{}]}')), '{"a":{},"b":[],"c":[{}]}')
  local d = json.decode('{"list":[1],"obj":{"k":1}}')
  T.ok(json.is_object(d) and json.is_array(d.list) and json.is_object(d.obj))
end)

-- json.null -------------------------------------------------------------------------------------

T.test("json: null sentinel", function()
  T.eq(tostring(json.null), "json.null")
  T.eq(type(json.null), "userdata")
  T.ok(json.decode("null") == json.null)
  T.ok(json.decode("[null]")[1] == json.null)
  T.ok(require("seer.core.json").null == json.null)
  T.eq(json.decode("[null,1]", { null = false }), { false, 1 })
  T.eq(json.decode('{"a":null}', { null = "N" }).a, "N")
end)

-- decode ----------------------------------------------------------------------------------------

T.test("json: decode values", function()
  T.eq(json.decode('{"a":[1,2.5,-3e2,true,false,"s"],"b":{"c":{}}}'), { a = { 1, 2.5, -300, true, false, "s" }, b = { c = {} } })
  T.eq(json.decode("  42  "), 42)
  T.eq(json.decode('"x"'), "x")
  T.eq(json.decode("true"), true)
  T.eq(json.decode(" \t\r\n[ 1 , 2 ]\n"), { 1, 2 })
end)

T.test("json: duplicate keys, last wins", function()
  T.eq(json.decode('{"a":1,"a":2}'), { a = 2 })
end)

T.test("json: escapes and unicode decode to UTF-8", function()
  T.eq(json.decode([["\n\t\\\"\u0001\/\b\f\r"]]), "\n\t\\\"\1/\b\f\r")
  T.eq(json.decode([["\u00e9\u20AC"]]), "é€")
  T.eq(json.decode([["\ud83d\ude00"]]), "\240\159\152\128")
  T.eq(json.decode('"😀"'), "😀")
end)

T.test("json: bad escapes are errors", function()
  T.raises(function() json.decode([["\ud800"]]) end, "json.decode: invalid JSON at byte 1 (line 1, column 2): unpaired UTF-16 surrogate", true)
  T.raises(function() json.decode([=[["\udc00"]]=]) end, "at byte 2 (line 1, column 3): unpaired UTF-16 surrogate", true)
  T.raises(function() json.decode([["\ud800\u0041"]]) end, "unpaired UTF-16 surrogate", true)
  T.raises(function() json.decode([["\uzzzz"]]) end, "\\u needs 4 hex digits", true)
  T.raises(function() json.decode([["\x"]]) end, "at byte 1 (line 1, column 2): invalid escape", true)
  T.raises(function() json.decode('"a\tb"') end, "at byte 2 (line 1, column 3): control character inside a string", true)
end)

T.test("json: round trips", function()
  local values = {
    { a = { 1, 2, { b = { c = "deep" } } }, list = { true, false, json.null }, n = -12.5 },
    { "\n\t\\\"\1", "é€😀", "", "/" },
    { [1] = { x = {} }, [2] = json.array() },
    { big = 2 ^ 53, small = 1e-300, zero = 0, tenth = 0.1, huge = 1e300 },
  }
  for i, v in ipairs(values) do
    T.eq(json.decode(json.encode(v)), v, "value " .. i)
    T.eq(json.decode(json.pretty(v)), v, "pretty value " .. i)
    T.eq(json.encode(json.decode(json.encode(v))), json.encode(v), "text " .. i)
  end
end)

T.test("json: decode error gives byte, line, column and excerpt", function()
  T.raises(function() json.decode("[1, 2, x]") end, "json.decode: invalid JSON at byte 7 (line 1, column 8): near 'x]'", true)
  -- byte 19 is the "t" of tru: "{\n" is 2 bytes, '  "a": 1,\n' 10 more, '  "b": ' 7 more
  local text = '{\n  "a": 1,\n  "b": tru\n}'
  T.eq(text:sub(20, 22), "tru")
  T.raises(function() json.decode(text) end, "json.decode: invalid JSON at byte 19 (line 3, column 8): near 'tru'", true)
  T.raises(function() json.decode('{"a" 1}') end, "at byte 5 (line 1, column 6): near '1}'", true)
  T.raises(function() json.decode("[1,]") end, "at byte 3 (line 1, column 4): near ']'", true)
  -- columns count characters, bytes count bytes
  T.raises(function() json.decode('["é", x]') end, "at byte 7 (line 1, column 7): near 'x]'", true)
end)

T.test("json: trailing garbage, empty input, truncated input", function()
  T.raises(function() json.decode("[1] x") end, "json.decode: invalid JSON at byte 4 (line 1, column 5): unexpected text after the JSON value, near 'x'", true)
  T.raises(function() json.decode("1 2") end, "at byte 2 (line 1, column 3): unexpected text after the JSON value", true)
  T.raises(function() json.decode("") end, "json.decode: empty input", true)
  T.raises(function() json.decode(" \n\t ") end, "json.decode: empty input", true)
  T.raises(function() json.decode("[1,2") end, "the input ends before the [ at byte 0 is closed", true)
  T.raises(function() json.decode('{"a":"abc') end, "the input ends inside the string that starts at byte 5", true)
end)

T.test("json: NUL bytes in the input are errors, not the end of the text", function()
  T.raises(function() json.decode("[1]\0") end, "json.decode: invalid JSON at byte 3 (line 1, column 4): control character outside a string", true)
  T.raises(function() json.decode("[1,\0 2]") end, "at byte 3 (line 1, column 4): control character outside a string", true)
  T.raises(function() json.decode('"a\0b"') end, "at byte 2 (line 1, column 3): control character inside a string", true)
end)

T.test("json: input must be UTF-8", function()
  T.raises(function() json.decode('{"a":\n"x\255"}') end, "json.decode: input is not valid UTF-8 at byte 8 (line 2, column 3)", true)
  T.raises(function() json.decode('"\237\160\128"') end, "input is not valid UTF-8 at byte 1", true)
  T.eq(json.decode("\239\187\191[1]"), { 1 }, "a byte order mark is skipped")
end)

T.test("json: numbers outside the JSON grammar are errors", function()
  T.raises(function() json.decode("[01]") end, "at byte 1 (line 1, column 2): leading zero in a number", true)
  T.raises(function() json.decode("1.") end, "at byte 0 (line 1, column 1): malformed number", true)
  T.raises(function() json.decode("-") end, "malformed number", true)
  T.raises(function() json.decode("[-Infinity]") end, "at byte 1 (line 1, column 2): malformed number", true)
  T.raises(function() json.decode("NaN") end, "json.decode: invalid JSON at byte 0", true)
  T.raises(function() json.decode(".5") end, "json.decode: invalid JSON at byte 0", true)
  T.raises(function() json.decode("0." .. string.rep("1", 70)) end, "number longer than 63 characters", true)
  T.eq(json.decode("1e400"), math.huge)
  T.eq(json.decode("-1E-2"), -0.01)
end)

T.test("json: a top-level array decodes as a whole, errors at the same place", function()
  local rows, parts = {}, {}
  for i = 1, 500 do
    rows[i] = { id = i, name = "n" .. i, tags = { "a", i % 3 == 0 and json.null or "b" }, empty = {} }
    parts[i] = ('{"empty":{},"id":%d,"name":"n%d","tags":["a",%s]}'):format(i, i, i % 3 == 0 and "null" or '"b"')
  end
  local text = "[" .. table.concat(parts, ",") .. "]"
  local back = json.decode(" " .. text .. "\n")
  T.eq(#back, 500)
  T.ok(json.is_array(back) and json.is_object(back[1]) and json.is_object(back[1].empty))
  T.eq(compact(back), text)
  T.eq(compact(json.decode(" [ {\"k\": \"v\"} , [] ,{} ] ")), '[{"k":"v"},[],{}]')
  T.raises(function() json.decode('[{"a":1},{"a":tru}]') end, "json.decode: invalid JSON at byte 14 (line 1, column 15): near 'tru}]'", true)
  T.raises(function() json.decode("[1,2]]") end, "at byte 5 (line 1, column 6): unexpected text after the JSON value, near ']'", true)
  T.raises(function() json.decode("[1 2]") end, "at byte 3 (line 1, column 4): near '2]'", true)
  T.raises(function() json.decode("[1,,2]") end, "at byte 3 (line 1, column 4): near ',2]'", true)
  T.raises(function() json.decode('[{"a":[1,2,{"b":01}]}]') end, "at byte 16 (line 1, column 17): leading zero in a number", true)
  T.raises(function() json.decode("[[1],[2],[3") end, "(the input ends before the [ at byte 9 is closed)", true)
end)

T.test("json: decode nesting limit", function()
  local ok900 = json.decode(string.rep("[", 900) .. string.rep("]", 900))
  T.ok(json.is_array(ok900))
  T.eq(#json.encode(json.decode(string.rep("[", 1000) .. string.rep("]", 1000))), 2000)
  T.raises(function() json.decode(string.rep("[", 1001) .. string.rep("]", 1001)) end,
    "json.decode: invalid JSON at byte 1000 (line 1, column 1001): nesting deeper than 1000 levels", true)
end)

-- arguments ---------------------------------------------------------------------------------------

T.test("json: wrong arguments", function()
  T.raises(function() json.encode() end, "bad argument #1 to 'encode'", true)
  T.raises(function() json.decode(5) end, "bad argument #1 to 'decode' (string expected, got number)", true)
  T.raises(function() json.decode() end, "bad argument #1 to 'decode'", true)
  T.raises(function() json.encode(1, "x") end, "bad argument #2 to 'encode' (table expected, got string)", true)
  T.raises(function() json.encode(1, { indnet = 2 }) end, "bad argument #2 to 'encode' (unknown option 'indnet'", true)
  T.raises(function() json.encode(1, { indent = -1 }) end, "indent must be an integer from 0 to 64", true)
  T.raises(function() json.encode(1, { indent = 1.5 }) end, "indent must be an integer", true)
  T.raises(function() json.encode(1, { empty = "list" }) end, 'empty must be "object" or "array"', true)
  T.raises(function() json.pretty(1, { x = 1 }) end, "bad argument #2 to 'pretty' (unknown option 'x'", true)
  T.raises(function() json.decode("1", { nul = 1 }) end, "bad argument #2 to 'decode' (unknown option 'nul'", true)
  T.raises(function() json.decode("1", { max_values = -1 }) end, "max_values must be a whole number >= 0", true)
end)

T.test("json.decode max_values: counted before anything is built", function()
  local text = '[0, -1.5e3, "s", true, false, null, {"k": [[]]}]' -- 11 values, keys counted
  T.eq(#json.decode(text, { max_values = 11 }), 7)
  T.raises(function() json.decode(text, { max_values = 10 }) end, "the text holds 11 values, more than max_values = 10", true)
  -- letters inside strings are not literals; escaped quotes do not start strings
  T.eq(json.decode('["true \\" null", "n"]', { max_values = 3 })[2], "n")
  T.raises(function() json.decode("[" .. string.rep("0,", 999) .. "0]", { max_values = 1000 }) end, "holds 1001 values", true)
end)
