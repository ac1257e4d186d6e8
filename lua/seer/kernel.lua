--- seer.kernel: the interpreter behind `seer kernel` (the Jupyter kernel for Lua). The C side
--- (engine/kernel/kernel.c) owns the sockets, signatures, threads and status messages; it calls
--- the handler returned by `attach` with (msg_type, content JSON, header JSON) and sends back the
--- JSON text it returns as the reply's content.
---
--- Cell semantics:
---  * globals persist between cells, and so do top-level `local` declarations: `local a, b = ...`
---    at depth 0 runs as `a, b = ...` and `local function f` as `function f`, stored in the
---    notebook's own environment (reads fall through to _G; `local table = {}` in a cell does
---    not replace the library for modules). Locals inside functions and blocks are untouched.
---  * the value of the last expression is the result (`x = 1\nx + 1` shows 2, and a last line
---    `model:hook_names()` shows the list); a trailing `;` suppresses it, as in IPython.
---  * print, io.write, io.stdout:write, io.stderr:write stream to the notebook as they happen
---    (kernel.c coalesces writes for 5 ms; io.stdout:flush() sends at once, and what was written
---    before os.exit or a crash is sent before the process ends: kernel.c's "last words");
---    io.read asks the notebook for input.
---  * `display` shows rich output (markdown, html, images, tables, json); `?name` or `name?`
---    pages the documentation of name, `help(value)` prints it.
local json = require "seer.json"
local pretty = require "seer.pretty"

local M = {}

---@class seerkernel.transport the functions kernel.c hands to attach
---@field publish fun(msg_type: string, content_json: string)
---@field stream fun(name: "stdout"|"stderr", text: string)
---@field flush fun()
---@field input fun(prompt: string, password: boolean): string?, string?
---@field run fun(fn: function, ...): boolean, ...
---@field take_interrupt fun(): boolean
---@field b64 fun(bytes: string): string
---@field session fun(): string

---@type seerkernel.transport
local C

local array = json.array
local HIST_SESSION = 1

local execution_count = 0
-- History: every stored input, as IPython keeps them (hist_input[line]; execution counts and
-- history lines advance together, so the index is the line number, and repeated inputs share one
-- interned string), and the text/plain results of the last OUTPUT_KEEP lines only, so a kernel
-- that runs for days does not hold every result it ever printed.
local hist_input = {}
local hist_output = {} ---@type table<integer, string>
local OUTPUT_KEEP = 200
local request ---@type table? the execute request being run (allow_stdin)

-- ---- the cell environment ----------------------------------------------------------------------
-- Top-level locals live in env itself; every other global read falls through to _G and every
-- assignment to an undeclared name goes to _G, so modules and cells share globals as usual.
local declared = {}
local env = setmetatable({}, {
  __index = _G,
  __newindex = function(t, k, v)
    if declared[k] then rawset(t, k, v) else _G[k] = v end
  end,
})
M.env = env

-- ---- a small Lua lexer ---------------------------------------------------------------------------
-- Enough of Lua's lexical grammar to find tokens outside strings and comments, so the rewriting
-- of top-level locals, the last-line split and the indentation of incomplete code never look
-- inside a string or a comment.

local keywords = {}
for w in ("and break do else elseif end false for function goto if in local nil not or repeat return then true until while"):gmatch("%a+") do
  keywords[w] = true
end

---@class seerkernel.token
---@field kind "name"|"keyword"|"string"|"number"|"op"|"comment"
---@field s integer first byte
---@field e integer last byte
---@field text string
---@field open? boolean an unterminated string or comment

---@param src string
---@return seerkernel.token[]
local function lex(src)
  local toks, i, n = {}, 1, #src
  local function add(kind, s, e, open)
    toks[#toks + 1] = { kind = kind, s = s, e = e, text = src:sub(s, e), open = open }
  end
  while i <= n do
    local ws = src:match("^%s+", i)
    if ws then
      i = i + #ws
    else
      local c = src:sub(i, i)
      if src:sub(i, i + 1) == "--" then
        local eq = src:match("^%[(=*)%[", i + 2)
        if eq then
          local close = "]" .. eq .. "]"
          local _, e = src:find(close, i + 4 + #eq, true)
          if e then add("comment", i, e) i = e + 1 else add("comment", i, n, true) i = n + 1 end
        else
          local e = src:find("\n", i, true) or n + 1
          add("comment", i, e - 1)
          i = e
        end
      elseif c == '"' or c == "'" then
        local j = i + 1
        local closed = false
        while j <= n do
          local d = src:sub(j, j)
          if d == "\\" then j = j + 2
          elseif d == c then closed = true break
          elseif d == "\n" then break
          else j = j + 1 end
        end
        if closed then add("string", i, j) i = j + 1 else add("string", i, math.min(j, n), true) i = math.min(j, n) + 1 end
      elseif c == "[" and src:match("^%[=*%[", i) then
        local eq = src:match("^%[(=*)%[", i)
        local _, e = src:find("]" .. eq .. "]", i + 2 + #eq, true)
        if e then add("string", i, e) i = e + 1 else add("string", i, n, true) i = n + 1 end
      elseif c:match("[%a_]") then
        local w = src:match("^[%w_]+", i)
        add(keywords[w] and "keyword" or "name", i, i + #w - 1)
        i = i + #w
      elseif c:match("%d") or (c == "." and src:sub(i + 1, i + 1):match("%d")) then
        local j = i
        local hex = src:match("^0[xX]", i)
        while j <= n do
          local d = src:sub(j, j)
          if not d:match("[%w%.]") then break end
          j = j + 1
          local expo = (hex and d:match("[pP]")) or (not hex and d:match("[eE]"))
          if expo and src:sub(j, j):match("[+-]") then j = j + 1 end
        end
        add("number", i, j - 1)
        i = j
      else
        local three, two = src:sub(i, i + 2), src:sub(i, i + 1)
        if three == "..." then add("op", i, i + 2) i = i + 3
        elseif two == "==" or two == "~=" or two == "<=" or two == ">=" or two == ".." or two == "::" then add("op", i, i + 1) i = i + 2
        else add("op", i, i) i = i + 1 end
      end
    end
  end
  return toks
end
M._lex = lex

local openers = { ["function"] = true, ["do"] = true, ["if"] = true, ["repeat"] = true }
local closers = { ["end"] = true, ["until"] = true }

---Block depth after the tokens (function/do/if/repeat open, end/until close).
local function block_depth(toks, upto)
  local d = 0
  for i = 1, upto or #toks do
    local t = toks[i]
    if t.kind == "keyword" then
      if openers[t.text] then d = d + 1 elseif closers[t.text] then d = d - 1 end
    end
  end
  return d
end

---Rewrites top-level local declarations into assignments (see the file's header).
---@param src string
---@return string src, string[] names the declared names
local function rewrite_locals(src)
  local toks = lex(src)
  local edits, names = {}, {}
  local depth = 0
  local code = {} -- tokens without comments
  for _, t in ipairs(toks) do if t.kind ~= "comment" then code[#code + 1] = t end end
  local i = 1
  while i <= #code do
    local t = code[i]
    if t.kind == "keyword" then
      if t.text == "local" and depth == 0 then
        local nx = code[i + 1]
        if nx and nx.kind == "keyword" and nx.text == "function" then
          edits[#edits + 1] = { s = t.s, e = t.e, text = "" }
          local nm = code[i + 2]
          if nm and nm.kind == "name" then names[#names + 1] = nm.text end
        elseif nx and nx.kind == "name" then
          local j, last = i + 1, nil
          while code[j] and code[j].kind == "name" do
            names[#names + 1] = code[j].text
            last = code[j]
            if code[j + 1] and code[j + 1].text == "," and code[j + 2] and code[j + 2].kind == "name" then
              j = j + 2
            else
              j = j + 1
              break
            end
          end
          edits[#edits + 1] = { s = t.s, e = t.e, text = "" }
          if not (code[j] and code[j].text == "=") then
            edits[#edits + 1] = { s = last.e + 1, e = last.e, text = " = nil" }
          end
        end
      elseif openers[t.text] then
        depth = depth + 1
      elseif closers[t.text] then
        depth = depth - 1
      end
    end
    i = i + 1
  end
  if #edits == 0 then return src, names end
  local out, pos = {}, 1
  for _, e in ipairs(edits) do
    out[#out + 1] = src:sub(pos, e.s - 1)
    out[#out + 1] = e.text
    pos = e.e + 1
  end
  out[#out + 1] = src:sub(pos)
  return table.concat(out), names
end
M._rewrite_locals = rewrite_locals

---The code before the last line that holds code, and that line (to the end), when the line
---starts outside any token and block; nil otherwise.
local function split_last_line(src, toks)
  local last
  for i = #toks, 1, -1 do
    if toks[i].kind ~= "comment" then last = i break end
  end
  if not last then return nil end
  local s = toks[last].s
  local line_start = 1
  for p = s - 1, 1, -1 do
    if src:byte(p) == 10 then line_start = p + 1 break end
  end
  if line_start == 1 then return nil end
  local first -- first token that starts on or after line_start
  for i = 1, #toks do
    local t = toks[i]
    if t.s < line_start and t.e >= line_start then return nil end -- a multi-line token crosses it
    if t.s >= line_start then first = i break end
  end
  if not first or block_depth(toks, first - 1) ~= 0 then return nil end
  return src:sub(1, line_start - 1), src:sub(line_start)
end

local RET_OPEN, RET_CLOSE = "return (function(...) return ... end)(", "\n)"

-- Compiles rewritten cell source: an expression list, else statements whose last line may be
-- the result (see compile).
local function compile_src(src, name)
  -- The value of an expression cell passes through an identity function rather than being
  -- returned directly: `return f()` is a tail call, which would drop the cell's frame (and
  -- "[cell 3]:1:") from error messages and tracebacks.
  local f = loadstring(RET_OPEN .. src .. RET_CLOSE, name)
  if f then return f end
  local whole, err = loadstring(src, name)
  local head, last = split_last_line(src, lex(src))
  -- The last line becomes the result when the rest compiles and either the whole cell does not
  -- (`x = 1\nx + 1`) or the line is a statement by itself (a call), so splitting cannot change
  -- what the cell means.
  if last and loadstring(head, name) and loadstring(RET_OPEN .. last .. RET_CLOSE, name)
      and (not whole or loadstring(last, name)) then
    local g = loadstring(head .. RET_OPEN .. last .. RET_CLOSE, name)
    if g then return g end
  end
  return whole, err
end

---Compiles a cell. Returns the function (or nil and the syntax error), the declared names, and
---whether the cell ends in `;` (then its value is not shown, as in IPython).
---@param code string
---@param chunkname string
---@return function? fn, string? err, string[] names, boolean quiet
local function compile(code, chunkname)
  local src, names = rewrite_locals(code)
  local quiet = false
  local toks = lex(src)
  for i = #toks, 1, -1 do
    local t = toks[i]
    if t.kind ~= "comment" then
      if t.kind == "op" and t.text == ";" then
        quiet = true
        src = src:sub(1, t.s - 1) .. " " .. src:sub(t.e + 1)
      end
      break
    end
  end
  local fn, err = compile_src(src, "=" .. chunkname)
  return fn, err, names, quiet
end
M._compile = compile

-- ---- messages ------------------------------------------------------------------------------------

local function pack(...)
  return { n = select("#", ...), ... }
end

-- The largest message the kernel sends (SEER_KERNEL_MAX_MESSAGE_BYTES, default 48 MiB): seer's
-- notebook server takes messages of at most 64 MiB and disconnects a peer that sends a bigger
-- one, which would end every later output of the session. A bigger display is replaced by a
-- notice that says so; stream text is sent in pieces (the transport does that).
local MAX_MESSAGE = tonumber(os.getenv("SEER_KERNEL_MAX_MESSAGE_BYTES") or "") or 48 * 1024 * 1024
local MAX_ERROR_TEXT = 1024 * 1024 -- an error's evalue and each traceback line

local function too_big_notice(what, n)
  return ("[seer kernel] a %s of %.1f MiB was not sent: the kernel sends messages of at most %.1f MiB (SEER_KERNEL_MAX_MESSAGE_BYTES)")
    :format(what, n / 1048576, MAX_MESSAGE / 1048576)
end

-- Every string in a result, a display or an error, with bytes that are not UTF-8 replaced by
-- U+FFFD (as stream text is): `return "ok\255"` or `error("x\255y")` keeps its value instead of
-- failing the strict JSON encoding and losing the cell's output. Only what needs it is copied.
local utf8_fix = (function()
  local ok, net = pcall(require, "seer.core.net")
  return ok and net.utf8_fix or nil
end)()
local function fix_strings(v, depth)
  local t = type(v)
  if t == "string" then return utf8_fix and utf8_fix(v) or v end
  if t ~= "table" or depth > 64 or getmetatable(v) ~= nil and not json.is_array(v) then return v end
  local out
  for k, x in pairs(v) do
    local fk, fx = fix_strings(k, depth + 1), fix_strings(x, depth + 1)
    if fk ~= k or fx ~= x then
      if not out then
        out = {}
        for k2, x2 in pairs(v) do out[k2] = x2 end
        if json.is_array(v) then out = array(out) end
      end
      if fk ~= k then out[k] = nil end
      out[fk] = fx
    end
  end
  return out or v
end

local FIXED_TYPES = { execute_result = true, display_data = true, update_display_data = true, error = true }

local function publish(msg_type, content)
  if FIXED_TYPES[msg_type] then content = fix_strings(content, 0) end
  local text = json.encode(content)
  if #text > MAX_MESSAGE then
    local notice = too_big_notice(msg_type .. " message", #text)
    if content.data ~= nil then
      text = json.encode({ data = { ["text/plain"] = notice }, metadata = {}, transient = content.transient or {},
                           execution_count = content.execution_count })
    else
      msg_type, text = "stream", json.encode({ name = "stderr", text = notice .. "\n" })
    end
  end
  C.publish(msg_type, text)
end

-- An error message cut to MAX_ERROR_TEXT bytes (a cell may raise a string of any size).
local function cap_error_text(s)
  if #s <= MAX_ERROR_TEXT then return s end
  return s:sub(1, MAX_ERROR_TEXT) .. ("... [%d more bytes not shown]"):format(#s - MAX_ERROR_TEXT)
end

local function text_of(...)
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do parts[i] = pretty.format((select(i, ...))) end
  return table.concat(parts, "\t")
end

-- ---- output and input ----------------------------------------------------------------------------

local function write_args(name, fname, ...)
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do
    local v = select(i, ...)
    local t = type(v)
    if t == "string" then parts[i] = v
    elseif t == "number" then parts[i] = ("%.14g"):format(v)
    else error(("bad argument #%d to '%s' (string expected, got %s)"):format(i, fname, t), 3) end
  end
  C.stream(name, table.concat(parts))
end

local notebook_files = setmetatable({}, { __mode = "k" })

local function make_file(name)
  local f = {}
  local methods = {}
  function methods.write(self, ...)
    write_args(name, "write", ...)
    return self
  end
  function methods.flush() C.flush() return true end
  function methods.setvbuf() return true end
  function methods.close() return nil, "cannot close the notebook's " .. name end
  function methods.seek() return nil, "cannot seek the notebook's " .. name end
  function methods.read() return nil, "the notebook's " .. name .. " is not readable" end
  function methods.lines() error("the notebook's " .. name .. " is not readable", 2) end
  setmetatable(f, { __index = methods, __tostring = function() return "file (notebook " .. name .. ")" end })
  notebook_files[f] = true
  return f
end

local function read_line(prompt)
  if not request or not request.allow_stdin then
    error("io.read: this client does not accept input (the execute request has allow_stdin = false)", 3)
  end
  local v, why = C.input(prompt or "", false)
  if not v then error(why or "interrupted", 0) end
  return v
end

---Reads from the notebook user (an input_request on the stdin channel). Formats as io.read:
---"*l"/"l" a line (the default), "*L"/"L" with "\n", "*n"/"n" a number, "*a"/"a" the text, or a
---byte count.
local function stdin_read(_, ...)
  local fmts = { ... }
  if #fmts == 0 then fmts[1] = "*l" end
  local out = {}
  for i, f in ipairs(fmts) do
    local line = read_line("")
    if type(f) == "number" then out[i] = line:sub(1, f)
    else
      local k = tostring(f):gsub("^%*", ""):sub(1, 1)
      if k == "l" or k == "a" then out[i] = line
      elseif k == "L" then out[i] = line .. "\n"
      elseif k == "n" then out[i] = tonumber(line)
      else error(("bad argument #%d to 'read' (invalid format)"):format(i), 2) end
    end
  end
  return unpack(out, 1, #fmts)
end

local stdin = setmetatable({}, {
  __index = {
    read = stdin_read,
    lines = function(self) return function() return stdin_read(self, "*l") end end,
    close = function() return nil, "cannot close the notebook's stdin" end,
  },
  __tostring = function() return "file (notebook stdin)" end,
})

local function install_io()
  _G.print = function(...)
    local n = select("#", ...)
    local parts = {}
    for i = 1, n do parts[i] = tostring((select(i, ...))) end
    C.stream("stdout", table.concat(parts, "\t") .. "\n")
  end
  local out, err = make_file("stdout"), make_file("stderr")
  io.stdout, io.stderr, io.stdin = out, err, stdin
  io.write = function(...)
    write_args("stdout", "write", ...)
    return out
  end
  io.read = function(...) return stdin_read(stdin, ...) end
  ---Text typed by the notebook user, after showing prompt (like Python's input()).
  ---@param prompt? string
  ---@return string
  _G.input = function(prompt)
    C.flush()
    return read_line(prompt and tostring(prompt) or "")
  end
end

-- ---- display ----------------------------------------------------------------------------------------

local function html_escape(s)
  return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

local function png_size(png)
  if #png < 24 or png:sub(1, 8) ~= "\137PNG\r\n\26\n" then return nil end
  local function u32(p)
    local a, b, c, d = png:byte(p, p + 3)
    return ((a * 256 + b) * 256 + c) * 256 + d
  end
  return u32(17), u32(21)
end

---The PNG bytes of an image argument: PNG bytes, a path to a .png file, or a table with a png field.
local function png_bytes(img, fname)
  if type(img) == "table" and type(img.png) == "string" then img = img.png end
  if type(img) ~= "string" then
    error(("%s: expected PNG bytes, a path to a .png file or a table with a png field, got %s"):format(fname, type(img)), 3)
  end
  if img:sub(1, 4) == "\137PNG" then return img end
  local f = io.open(img, "rb")
  if not f then error(("%s: %s is neither PNG data nor a readable file"):format(fname, #img > 80 and "the string" or img), 3) end
  local data = f:read("*a")
  f:close()
  if data:sub(1, 4) ~= "\137PNG" then error(("%s: %s is not a PNG file"):format(fname, img), 3) end
  return data
end

local function image_bundle(img, opts, fname)
  local png = png_bytes(img, fname)
  local w, h = png_size(png)
  local md = {}
  if opts then
    if opts.width ~= nil then md.width = opts.width end
    if opts.height ~= nil then md.height = opts.height end
  end
  local title = type(img) == "table" and type(img.title) == "string" and img.title or nil
  local alt = ("<image %sx%s%s>"):format(w or "?", h or "?", title and (" " .. title) or "")
  local metadata = next(md) and { ["image/png"] = md } or {}
  return { ["image/png"] = C.b64(png), ["text/plain"] = alt }, metadata
end

local function is_image(v)
  return (type(v) == "string" and v:sub(1, 4) == "\137PNG") or (type(v) == "table" and type(v.png) == "string")
end

local function display_data(data, metadata)
  publish("display_data", { data = data, metadata = metadata or {}, transient = {} })
end

local function cell_text(v)
  if v == nil then return "" end
  if type(v) == "string" then return v end
  return pretty.format(v)
end

local function table_bundle(rows, opts, fname)
  if type(rows) ~= "table" then error(fname .. ": rows must be a list of rows (lists or tables)", 3) end
  opts = opts or {}
  local header = opts.header
  if header ~= nil and type(header) ~= "table" then error(fname .. ": opts.header must be a list of column names", 3) end
  local keyed = rows[1] ~= nil and type(rows[1]) == "table" and rows[1][1] == nil and next(rows[1]) ~= nil
  if keyed and not header then
    local seen, cols = {}, {}
    for _, r in ipairs(rows) do
      for k in pairs(r) do if not seen[k] then seen[k] = true cols[#cols + 1] = k end end
    end
    table.sort(cols, function(a, b) return tostring(a) < tostring(b) end)
    header = cols
  end
  local grid = {}
  for i, r in ipairs(rows) do
    if type(r) ~= "table" then error(("%s: row %d is a %s, not a table"):format(fname, i, type(r)), 3) end
    local line = {}
    if keyed then
      for j, k in ipairs(header) do line[j] = cell_text(r[k]) end
    else
      local n = #r
      if header then n = math.max(n, #header) end
      for j = 1, n do line[j] = cell_text(r[j]) end
    end
    grid[i] = line
  end
  local h = {}
  h[#h + 1] = "<table>"
  if header then
    h[#h + 1] = "<thead><tr>"
    for _, c in ipairs(header) do h[#h + 1] = "<th>" .. html_escape(c) .. "</th>" end
    h[#h + 1] = "</tr></thead>"
  end
  h[#h + 1] = "<tbody>"
  for _, line in ipairs(grid) do
    h[#h + 1] = "<tr>"
    for _, c in ipairs(line) do h[#h + 1] = "<td>" .. html_escape(c) .. "</td>" end
    h[#h + 1] = "</tr>"
  end
  h[#h + 1] = "</tbody></table>"
  -- text/plain: aligned columns, for clients (and agents) that read text only
  local widths, all = {}, {}
  if header then
    local hl = {}
    for j, c in ipairs(header) do hl[j] = tostring(c) end
    all[1] = hl
  end
  for _, line in ipairs(grid) do all[#all + 1] = line end
  for _, line in ipairs(all) do
    for j, c in ipairs(line) do
      local w = #(c:gsub("[\128-\191]", ""))
      if w > (widths[j] or 0) then widths[j] = w end
    end
  end
  local t = {}
  for i, line in ipairs(all) do
    local cells = {}
    for j, c in ipairs(line) do
      local pad = (widths[j] or 0) - #(c:gsub("[\128-\191]", ""))
      cells[j] = c .. (" "):rep(pad)
    end
    t[#t + 1] = (table.concat(cells, "  "):gsub("%s+$", ""))
    if i == 1 and header then
      local rule = {}
      for j = 1, #line do rule[j] = ("-"):rep(widths[j] or 0) end
      t[#t + 1] = table.concat(rule, "  ")
    end
  end
  return { ["text/html"] = table.concat(h), ["text/plain"] = table.concat(t, "\n") }
end

---Rich output in the notebook. `display(v)` picks the form from the value: PNG bytes or a table
---with a `png` field (what seer.plot returns) as an image, anything else as text.
---@class seerkernel.display
local display = {}

---Shows Markdown.
---@param s string
function display.markdown(s)
  if type(s) ~= "string" then error("display.markdown: expected a string, got " .. type(s), 2) end
  display_data({ ["text/markdown"] = s, ["text/plain"] = s })
end

---Shows HTML.
---@param s string
function display.html(s)
  if type(s) ~= "string" then error("display.html: expected a string, got " .. type(s), 2) end
  display_data({ ["text/html"] = s, ["text/plain"] = (s:gsub("<[^>]*>", "")) })
end

---Shows plain text (tostring of anything else).
---@param s any
function display.text(s)
  display_data({ ["text/plain"] = type(s) == "string" and s or pretty.format(s) })
end

---Shows a PNG image: PNG bytes (starting with "\137PNG"), a path to a .png file, or a table with
---a `png` field (seer.plot's figures).
---@param img string|{png: string}
---@param opts? {width?: integer, height?: integer} display size in pixels
function display.image(img, opts)
  if opts ~= nil and type(opts) ~= "table" then error("display.image: opts must be a table {width?, height?}", 2) end
  local data, md = image_bundle(img, opts, "display.image")
  display_data(data, md)
end

---Shows rows as a table (HTML, and aligned text). Rows are lists, or tables keyed by column name.
---@param rows table[]
---@param opts? {header?: string[]}
function display.table(rows, opts)
  display_data(table_bundle(rows, opts, "display.table"))
end

---Shows a value as JSON (collapsible in JupyterLab).
---@param v any
function display.json(v)
  local ok, text = pcall(json.pretty, v)
  if not ok then error("display.json: " .. tostring(text), 2) end
  display_data({ ["application/json"] = v, ["text/plain"] = text })
end

---Clears the cell's output; with `{wait = true}` only when the next output arrives (no flicker).
---@param opts? {wait?: boolean}
function display.clear(opts)
  C.flush()
  publish("clear_output", { wait = type(opts) == "table" and opts.wait == true })
end

---The mime bundle for a value shown as a result.
local function bundle_of(...)
  if select("#", ...) == 1 and is_image((...)) then return image_bundle((...), nil, "display") end
  return { ["text/plain"] = text_of(...) }, {}
end

setmetatable(display, {
  __call = function(_, v, opts)
    if is_image(v) then return display.image(v, opts) end
    display_data({ ["text/plain"] = type(v) == "string" and v or pretty.format(v) })
  end,
})
M.display = display

-- ---- names: resolving and listing -----------------------------------------------------------------

local function announced(mt, k)
  local list = rawget(mt, "__complete")
  if type(list) ~= "table" then return false end
  for _, n in ipairs(list) do if n == k then return true end end
  return false
end

---v[k] without running user code, except to load a field a table announces in __complete
---(seer's lazily loaded modules).
local function field(v, k)
  if type(v) == "table" then
    local x = rawget(v, k)
    if x ~= nil then return x end
  end
  local obj, mt = v, debug.getmetatable(v)
  for _ = 1, 8 do
    if type(mt) ~= "table" then return nil end
    local idx = rawget(mt, "__index")
    if type(idx) == "table" then
      local x = rawget(idx, k)
      if x ~= nil then return x end
      obj, mt = idx, debug.getmetatable(idx)
    elseif type(idx) == "function" then
      if announced(mt, k) then
        local ok, x = pcall(idx, obj, k)
        if ok then return x end
      end
      return nil
    else
      return nil
    end
  end
end

local function lookup(name)
  local parts = {}
  for p in name:gmatch("[^%.:]+") do parts[#parts + 1] = p end
  if #parts == 0 then return nil end
  local v = rawget(env, parts[1])
  if v == nil then v = rawget(_G, parts[1]) end
  for i = 2, #parts do
    if v == nil then return nil end
    v = field(v, parts[i])
  end
  return v
end

local function collect(v, word, methods_only, out, depth)
  if depth > 6 then return end
  local function add(k, x)
    if type(k) == "string" and k:sub(1, #word) == word and k:match("^[%a_][%w_]*$") and not keywords[k]
        and (not methods_only or type(x) == "function") then
      out[k] = true
    end
  end
  if type(v) == "table" then
    for k, x in next, v do add(k, x) end
  end
  local mt = debug.getmetatable(v)
  if type(mt) == "table" then
    local list = rawget(mt, "__complete")
    if type(list) == "table" and not methods_only then
      for _, k in ipairs(list) do
        if type(k) == "string" and k:sub(1, #word) == word and k:match("^[%a_][%w_]*$") then out[k] = true end
      end
    end
    local idx = rawget(mt, "__index")
    if type(idx) == "table" then collect(idx, word, methods_only, out, depth + 1) end
  end
end

-- ---- code points and bytes -------------------------------------------------------------------------

local function cp_to_byte(s, cp)
  local i, count, n = 1, 0, #s
  while count < cp and i <= n do
    local c = s:byte(i)
    i = i + (c >= 0xF0 and 4 or c >= 0xE0 and 3 or c >= 0xC0 and 2 or 1)
    count = count + 1
  end
  return math.min(i - 1, n)
end

local function byte_to_cp(s, b)
  local _, cont = s:sub(1, b):gsub("[\128-\191]", "")
  return b - cont
end
M._cp_to_byte, M._byte_to_cp = cp_to_byte, byte_to_cp

local function cursor_bytes(code, cursor_pos)
  if type(cursor_pos) ~= "number" then return #code end
  return cp_to_byte(code, math.max(0, math.floor(cursor_pos)))
end

-- ---- requests ----------------------------------------------------------------------------------------

local handlers = {}

local function kernel_info()
  local version = jit and jit.version and jit.version:match("LuaJIT%s+(%S+)") or _VERSION
  local seer_version = require("seer.core.host").version()
  return {
    status = "ok",
    protocol_version = "5.3",
    implementation = "seer",
    implementation_version = seer_version,
    language_info = {
      name = "lua",
      version = version,
      mimetype = "text/x-lua",
      file_extension = ".lua",
      pygments_lexer = "lua",
      codemirror_mode = "lua",
    },
    banner = ("seer %s kernel, %s. Top-level locals persist between cells; the last expression is the result; display(...) shows rich output; ?name shows documentation."):format(
      seer_version, jit and jit.version or _VERSION),
    help_links = array({
      { text = "Lua 5.1 reference manual", url = "https://www.lua.org/manual/5.1/" },
      { text = "LuaJIT extensions", url = "https://luajit.org/extensions.html" },
    }),
    debugger = false,
  }
end
handlers.kernel_info_request = function() return kernel_info() end

-- Errors: the message without its traceback, and the traceback without the kernel's own frames.
local function split_error(msg)
  msg = tostring(msg)
  local text, tb = msg:match("^(.-)\nstack traceback:\n(.*)$")
  if not text then return msg, {} end
  local frames = {}
  for line in tb:gmatch("[^\n]+") do
    local l = line:gsub("^%s+", "")
    -- Below the cell's frame everything is the kernel calling it.
    if l:find("in function 'run'", 1, true) or l:find("seer/kernel.lua", 1, true) then
      -- the C function C.run runs the cell under (it keeps the error's every byte)
      if frames[#frames] and frames[#frames]:match("^  %[C%]: at 0x%x+$") then frames[#frames] = nil end
      break
    end
    if not (l:find("in function <[cell", 1, true) and l:find(":0>", 1, true)) then frames[#frames + 1] = "  " .. l end
  end
  return text, frames
end

local function strip_position(msg)
  return (msg:gsub("^[^\n]-:%d+: ", "", 1))
end

local function error_content(ename, evalue, frames)
  evalue = cap_error_text(evalue)
  local tb = { ename .. ": " .. evalue }
  if frames and #frames > 0 then
    tb[#tb + 1] = "stack traceback:"
    for _, f in ipairs(frames) do tb[#tb + 1] = cap_error_text(f) end
  end
  return { ename = ename, evalue = evalue, traceback = array(tb) }
end

---Runs a compiled cell; returns true, n, results... or false, error content.
local function run_cell(fn)
  setfenv(fn, env)
  local res = pack(C.run(fn))
  if res[1] then return true, res end
  local text, frames = split_error(res[2])
  local interrupted = res[3] or strip_position(text) == "interrupted"
  if interrupted then
    return false, error_content("Interrupted", "interrupted", frames)
  end
  return false, error_content("LuaError", text, frames)
end

local function page_text(name, detail)
  local v = lookup(name)
  if v == nil then return nil end
  return M.describe(v, name, detail)
end

local function user_expressions(exprs)
  local out = {}
  if type(exprs) ~= "table" then return out end
  for k, expr in pairs(exprs) do
    if type(expr) == "string" then
      local f, err = loadstring("return " .. expr, "=[user expression]")
      if not f then
        out[k] = { status = "error", ename = "SyntaxError", evalue = err, traceback = array({ err }) }
      else
        setfenv(f, env)
        local res = pack(C.run(f))
        if res[1] then
          out[k] = { status = "ok", data = { ["text/plain"] = text_of(unpack(res, 2, res.n)) }, metadata = {} }
        else
          local text = split_error(res[2])
          out[k] = { status = "error", ename = res[3] and "Interrupted" or "LuaError", evalue = text, traceback = array({ text }) }
        end
      end
    end
  end
  return out
end

local function execute(content)
  local code = content.code
  if type(code) ~= "string" then
    return { status = "error", ename = "KernelError", evalue = "execute_request: code must be a string", traceback = array() }
  end
  local silent = content.silent == true
  local store = content.store_history ~= false and not silent
  if store then execution_count = execution_count + 1 end
  local count = execution_count
  if not silent then publish("execute_input", { code = code, execution_count = count }) end
  request = { allow_stdin = content.allow_stdin == true }
  local chunkname = store and ("[cell %d]"):format(count) or "[cell]"
  local reply, stop
  local payload = array()
  local output_text

  local page = code:match("^%s*%?%??%s*([%a_][%w_%.:]*)%s*$") or code:match("^%s*([%a_][%w_%.:]*)%s*%?%??%s*$")
  if page then
    local text = page_text(page, code:find("??", 1, true) and 1 or 0) or ("%s: not found"):format(page)
    payload[1] = { source = "page", data = { ["text/plain"] = text }, start = 0 }
    reply = { status = "ok", execution_count = count, payload = payload, user_expressions = {} }
  else
    local fn, err, names, quiet = compile(code, chunkname)
    if not fn then
      local e = fix_strings(error_content("SyntaxError", err, nil), 0)
      if not silent then publish("error", e) end
      reply = { status = "error", execution_count = count, ename = e.ename, evalue = e.evalue, traceback = e.traceback }
      stop = true
    else
      for _, n in ipairs(names) do declared[n] = true end
      local ok, res = run_cell(fn)
      C.flush()
      if ok then
        local n = res.n
        -- `io.write(...)` as the last line returns the notebook's stdout; showing that file
        -- after the text it just wrote is noise, so a lone notebook file is no result.
        if n == 2 and getmetatable(res[2]) and notebook_files[res[2]] then n = 1 end
        if n > 1 and not silent and not quiet then
          local data, md = bundle_of(unpack(res, 2, n))
          output_text = data["text/plain"]
          publish("execute_result", { execution_count = count, data = data, metadata = md })
        end
        reply = { status = "ok", execution_count = count, payload = payload,
          user_expressions = user_expressions(content.user_expressions) }
      else
        res = fix_strings(res, 0) -- (the reply carries the error too)
        if not silent then publish("error", res) end
        reply = { status = "error", execution_count = count, ename = res.ename, evalue = res.evalue,
          traceback = res.traceback }
        stop = true
      end
    end
  end
  request = nil
  if store then
    hist_input[count] = code
    hist_output[count] = output_text
    hist_output[count - OUTPUT_KEEP] = nil
  end
  return reply, stop and content.stop_on_error ~= false
end
handlers.execute_request = execute

-- complete_request: globals, cell locals and keywords; fields after "."; methods after ":".
handlers.complete_request = function(content)
  local code = type(content.code) == "string" and content.code or ""
  local bpos = cursor_bytes(code, content.cursor_pos)
  local before = code:sub(1, bpos)
  local chain = before:match("[%a_][%w_%.:]*$") or ""
  -- a number such as 1.5 is not a name chain
  if chain ~= "" and before:sub(1, #before - #chain):match("[%d%.]$") then chain = "" end
  local out = {}
  local word = chain
  local sep_at = chain:find("[%.:][%w_]*$")
  if sep_at then
    word = chain:sub(sep_at + 1)
    local base = chain:sub(1, sep_at - 1)
    local v = lookup(base)
    if v ~= nil then collect(v, word, chain:sub(sep_at, sep_at) == ":", out, 0) end
  else
    word = before:match("[%a_][%w_]*$") or ""
    for k in pairs(keywords) do if k:sub(1, #word) == word then out[k] = true end end
    collect(env, word, false, out, 0)
  end
  local matches = {}
  for k in pairs(out) do matches[#matches + 1] = k end
  table.sort(matches)
  return {
    status = "ok",
    matches = array(matches),
    cursor_start = byte_to_cp(code, bpos - #word),
    cursor_end = byte_to_cp(code, bpos),
    metadata = {},
  }
end

-- ---- documentation ------------------------------------------------------------------------------------

local file_cache = setmetatable({}, { __mode = "k" })

local function source_lines(source)
  if type(source) ~= "string" then return nil end
  local text
  if source:sub(1, 1) == "@" then
    local path = source:sub(2)
    local f = io.open(path, "rb")
    if not f then return nil end
    text = f:read("*a")
    f:close()
  elseif source:sub(1, 1) == "=" then
    -- a function defined in a cell: its code is in the history ("=[cell N]" is line N)
    local line = tonumber(source:match("^=%[cell (%d+)%]$"))
    text = line and hist_input[line]
  end
  if not text then return nil end
  local lines = {}
  for l in (text .. "\n"):gmatch("(.-)\r?\n") do lines[#lines + 1] = l end
  return lines
end

local function doc_block(lines, line)
  local docs = {}
  local i = line - 1
  while i >= 1 and lines[i]:match("^%s*%-%-%-") do
    table.insert(docs, 1, (lines[i]:gsub("^%s*%-%-%- ?", "")))
    i = i - 1
  end
  return docs
end

---Documentation text for a value: for a Lua function its signature and the `---` LuaCATS
---comment above its definition (and with detail >= 1 its source); otherwise seer.pretty's view.
---@param v any
---@param name? string
---@param detail? integer
---@return string
function M.describe(v, name, detail)
  name = name or tostring(v)
  local out = {}
  if type(v) == "function" then
    local info = debug.getinfo(v, "S")
    if info.what == "C" then
      out[#out + 1] = name .. ": built-in function (C)"
    else
      local lines = source_lines(info.source)
      local where = ("%s:%d"):format(info.short_src, info.linedefined)
      if lines and lines[info.linedefined] then
        out[#out + 1] = (lines[info.linedefined]:gsub("^%s+", ""))
        local docs = doc_block(lines, info.linedefined)
        if #docs > 0 then
          out[#out + 1] = ""
          for _, d in ipairs(docs) do out[#out + 1] = d end
        end
        out[#out + 1] = ""
        out[#out + 1] = "defined at " .. where
        if (detail or 0) >= 1 then
          out[#out + 1] = ""
          for i = info.linedefined, math.min(info.lastlinedefined, #lines) do out[#out + 1] = lines[i] end
        end
      else
        local params = {}
        for i = 1, 64 do
          local p = debug.getlocal(v, i)
          if not p then break end
          params[#params + 1] = p
        end
        out[#out + 1] = ("function %s(%s)"):format(name, table.concat(params, ", "))
        out[#out + 1] = "defined at " .. where
      end
    end
  else
    out[#out + 1] = ("%s: %s"):format(name, type(v))
    local text = pretty.format(v, { depth = 2, max_items = 40 })
    if #text > 6000 then text = text:sub(1, 6000) .. "\n..." end
    out[#out + 1] = text
    -- methods of an object (its class through __index)
    local mt = debug.getmetatable(v)
    local idx = type(mt) == "table" and rawget(mt, "__index")
    if type(idx) == "table" and idx ~= v then
      local methods = {}
      for k, x in next, idx do
        if type(k) == "string" and type(x) == "function" and not k:match("^_") then methods[#methods + 1] = k end
      end
      table.sort(methods)
      if #methods > 0 then out[#out + 1] = "methods: " .. table.concat(methods, ", ") end
    end
  end
  return table.concat(out, "\n")
end

handlers.inspect_request = function(content)
  local code = type(content.code) == "string" and content.code or ""
  local bpos = cursor_bytes(code, content.cursor_pos)
  local left = code:sub(1, bpos):match("[%a_][%w_%.:]*$") or ""
  local right = code:sub(bpos + 1):match("^[%w_]*") or ""
  local name = (left .. right):gsub("[%.:]$", "")
  if name == "" then
    -- the cursor right after "f(" or "f(a, ": the function being called
    local depth, i = 0, bpos
    while i >= 1 do
      local c = code:sub(i, i)
      if c == ")" then depth = depth + 1
      elseif c == "(" then
        if depth == 0 then name = code:sub(1, i - 1):match("([%a_][%w_%.:]*)%s*$") or "" break end
        depth = depth - 1
      end
      i = i - 1
    end
  end
  local detail = tonumber(content.detail_level) or 0
  local text = name ~= "" and page_text(name, detail) or nil
  if not text then return { status = "ok", found = false, data = {}, metadata = {} } end
  return { status = "ok", found = true, data = { ["text/plain"] = text }, metadata = {} }
end

-- ---- is_complete ----------------------------------------------------------------------------------------

-- More input can fix an error only when it is at the end of the text; an unfinished short string
-- cannot be fixed by another line (strings do not span lines).
local function at_eof(err)
  return type(err) == "string" and err:sub(-7) == "'<eof>'" and not err:find("unfinished string", 1, true)
end

handlers.is_complete_request = function(content)
  local code = type(content.code) == "string" and content.code or ""
  if code:match("^%s*$") then return { status = "complete" } end
  if code:match("^%s*%?") or code:match("%?%s*$") then return { status = "complete" } end
  if compile(code, "[is_complete]") then return { status = "complete" } end
  local src = rewrite_locals(code)
  local _, e1 = loadstring(src, "=[is_complete]")
  local _, e2 = loadstring("return " .. src, "=[is_complete]")
  if at_eof(e1) or at_eof(e2) then
    local depth = math.max(0, block_depth(lex(src)))
    return { status = "incomplete", indent = ("  "):rep(depth) }
  end
  return { status = "invalid" }
end

-- ---- history ----------------------------------------------------------------------------------------------

local function glob_to_pattern(g)
  local p = { "^" }
  local i = 1
  while i <= #g do
    local c = g:sub(i, i)
    if c == "*" then p[#p + 1] = ".*"
    elseif c == "?" then p[#p + 1] = "."
    elseif c == "[" then
      local j = g:find("]", i + 1, true)
      if j then
        local set = g:sub(i + 1, j - 1):gsub("^!", "^"):gsub("%%", "%%%%")
        p[#p + 1] = "[" .. set .. "]"
        i = j
      else
        p[#p + 1] = "%["
      end
    else
      p[#p + 1] = c:gsub("%W", "%%%0")
    end
    i = i + 1
  end
  p[#p + 1] = "$"
  return table.concat(p)
end
M._glob_to_pattern = glob_to_pattern

handlers.history_request = function(content)
  local output, kind = content.output == true, content.hist_access_type
  local function entry(i)
    if output then
      return array({ HIST_SESSION, i, array({ hist_input[i], hist_output[i] or json.null }) })
    end
    return array({ HIST_SESSION, i, hist_input[i] })
  end
  local list, total = {}, #hist_input
  if kind == "tail" then
    local n = tonumber(content.n) or 10
    for i = math.max(1, total - n + 1), total do list[#list + 1] = entry(i) end
  elseif kind == "range" then
    local session = tonumber(content.session) or 0
    if session == 0 or session == HIST_SESSION then
      local start = tonumber(content.start) or 1
      local stop = tonumber(content.stop)
      for i = math.max(1, start), math.min(total, (stop or total + 1) - 1) do list[#list + 1] = entry(i) end
    end
  elseif kind == "search" then
    local pat = glob_to_pattern(type(content.pattern) == "string" and content.pattern or "*")
    local matched, seen = {}, {}
    for i = total, 1, -1 do
      local input = hist_input[i]
      if input:match(pat) and not (content.unique and seen[input]) then
        seen[input] = true
        matched[#matched + 1] = i
      end
    end
    local n = tonumber(content.n)
    local last = n and math.min(n, #matched) or #matched
    for j = last, 1, -1 do list[#list + 1] = entry(matched[j]) end
  else
    return { status = "error", ename = "ValueError", evalue = "hist_access_type must be tail, range or search",
      traceback = array() }
  end
  return { status = "ok", history = array(list) }
end

-- ---- comms: none are offered ----------------------------------------------------------------------------

handlers.comm_info_request = function() return { status = "ok", comms = {} } end
handlers.comm_open = function(content)
  publish("comm_close", { comm_id = content.comm_id or "", data = {} })
  return nil
end
handlers.comm_msg = function() return nil end
handlers.comm_close = function() return nil end

---help(v): prints the documentation of a value (see `?name` for a name).
---@param v any
local function help(v)
  print(M.describe(v))
end

---Connects the interpreter to kernel.c's transport and returns the request handler
---`handle(msg_type, content_json, header_json) -> reply_json|nil, abort_queue`.
---@param transport seerkernel.transport
---@return function
function M.attach(transport)
  C = transport
  install_io()
  _G.display = display
  _G.help = help
  return function(msg_type, content_json, _)
    local h = handlers[msg_type]
    if not h then return nil end
    local ok, content = pcall(json.decode, content_json)
    if not ok or type(content) ~= "table" then
      local why = ok and "request content is not a JSON object" or ("request content: " .. tostring(content))
      return json.encode({ status = "error", ename = "KernelError", evalue = why, traceback = array({ why }) })
    end
    local reply, stop = h(content)
    if reply == nil then return nil end
    local eok, text = pcall(json.encode, reply)
    if not eok then text = json.encode(fix_strings(reply, 0)) end -- bytes that are not UTF-8: U+FFFD
    if #text > MAX_MESSAGE then
      local why = too_big_notice(msg_type:gsub("_request$", "_reply"), #text)
      text = json.encode({ status = "error", ename = "KernelError", evalue = why, traceback = array({ why }),
                           execution_count = reply.execution_count })
    end
    return text, stop
  end
end

return M
