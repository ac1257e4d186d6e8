--- seer.notebook: nbformat 4.5 notebooks as the notebook server keeps them. Cells carry
--- `metadata.execution_status` (pending, running, complete, error); saving goes through a
--- temporary file and a rename, so a crash leaves the previous notebook, never half of one.
--- Files are named `{YYYY-MM-DD-HH-MM}_{name or "Notebook"}[_{n}].ipynb` as in the reference
--- (n counts up to 64, then is random: see unique_path).
---@class seernotebook
local M = {}

local json = require "seer.json"
local core = require "seer.core.host"

local Notebook = {}
Notebook.__index = Notebook

-- Cell ids must be unique within a notebook, including notebooks continued from others, so
-- they come from OpenSSL's random source (seer.net.uuid), not from math.random's fixed seed.
local function new_cell_id()
  return (require("seer.net").uuid():gsub("-", ""):sub(1, 16))
end

---Multi-line strings as nbformat stores them: a list of lines, each keeping its newline.
local function to_lines(s)
  local out = json.array()
  for line in s:gmatch("[^\n]*\n?") do
    if line ~= "" then out[#out + 1] = line end
  end
  return out
end
M.to_lines = to_lines

---Joins an nbformat multi-line string (a string or a list of lines).
---@param v string|string[]|nil
---@return string
function M.join(v)
  if v == nil then return "" end
  if type(v) == "string" then return v end
  return table.concat(v)
end

local function sanitize_name(name)
  name = tostring(name or "Notebook"):gsub("[^%w%-_.]+", "_"):gsub("^[._]+", "")
  if name == "" then name = "Notebook" end
  return name:sub(1, 100)
end

---The path for a new notebook in dir, following the reference's naming; never an existing file.
---@param dir string
---@param name? string experiment name (default "Notebook")
---@param time? integer seconds since the epoch (default now)
---@return string
-- The name is reserved by creating the file exclusively (safe_fs: no link anywhere on the path,
-- the content complete when it appears, nothing at the name replaced), so two servers (two
-- experiment processes writing one folder) never pick the same file, and a link or fifo planted
-- at a name only makes it taken. The reservation is an empty, valid notebook until the first
-- save replaces it.
local EMPTY = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n'

-- How the reasons safe_fs gives read without their paths: the folder may lie in a sandbox's
-- workspace, and these errors reach the sandbox's own clients (a scope's start_session), which
-- are told no host path.
local REASONS = {
  symlink = "a symbolic link is on the folder's path",
  notdir = "a part of the folder's path is not a directory",
  notfound = "the folder does not exist",
  outside = "the folder's path crosses a mount point",
  notregular = "something other than a file is at that name",
  invalid = "the name is not a valid path",
}

-- Creates file in dir exclusively: true, or false when anything is at the name. Other failures
-- raise naming the file (not the folder) and the reason.
local function reserve(dir, file)
  local ok, msg, code = require("seer.safe_fs").write_nofollow(dir .. "/" .. file, EMPTY, { exclusive = true, what = "the notebook folder" })
  if ok then return true end
  if code == "exists" then return false end
  -- an I/O error ends with the system's reason ("Permission denied"); its path is dropped
  local why = REASONS[code] or tostring(msg):match(": ([^:/]+)$") or "cannot write there"
  error(("cannot create the notebook %s in the notebook folder: %s"):format(file, why), 0)
end

-- Names tried in order (`_1` ... `_64`) before random numbers. Each try is a few system calls;
-- a sandbox that can write the output folder could plant `_1` ... `_100000` (trying them in turn
-- held the notebook server, and every session on it, for 6 s a start), so past this the numbers
-- are random (2^31 of them: a planted folder cannot cover them) and a name costs at most
-- 1 + SEQUENTIAL_TRIES + RANDOM_TRIES attempts, however many files the folder holds.
local SEQUENTIAL_TRIES = 64
local RANDOM_TRIES = 16
M.NAME_TRIES = 1 + SEQUENTIAL_TRIES + RANDOM_TRIES

-- A random number in [SEQUENTIAL_TRIES + 1, 2^31) from OpenSSL's random source (seer.net.uuid).
local function random_suffix()
  local hex = require("seer.net").uuid():gsub("-", ""):sub(1, 8)
  return SEQUENTIAL_TRIES + 1 + (tonumber(hex, 16) % (2 ^ 31 - SEQUENTIAL_TRIES - 1))
end

---A new notebook path in dir, reserved atomically: `<date>_<name>.ipynb`, or with `_1`, `_2`,
---... `_64` when taken (by a file, a link or anything else, here or by another process), then
---`_<random number>`. Errors name the file, never the folder (a host path).
function M.unique_path(dir, name, time)
  local base = os.date("%Y-%m-%d-%H-%M", time or os.time()) .. "_" .. sanitize_name(name)
  local file = base .. ".ipynb"
  if reserve(dir, file) then return dir .. "/" .. file end
  for n = 1, SEQUENTIAL_TRIES do
    file = ("%s_%d.ipynb"):format(base, n)
    if reserve(dir, file) then return dir .. "/" .. file end
  end
  for _ = 1, RANDOM_TRIES do
    file = ("%s_%d.ipynb"):format(base, random_suffix())
    if reserve(dir, file) then return dir .. "/" .. file end
  end
  error(("no free notebook name for %s in the notebook folder: %d names tried, all taken"):format(base, M.NAME_TRIES), 0)
end

---@class seernotebook.opts
---@field path string where save() writes
---@field language_info? table from the kernel's kernel_info reply
---@field kernelspec? table {name, display_name, language}
---@field metadata? table extra notebook metadata (kept under metadata.seer)

---A new, empty notebook.
---@param opts seernotebook.opts
---@return seernotebook.notebook
function M.new(opts)
  assert(type(opts) == "table" and type(opts.path) == "string", "notebook.new: opts.path (string) is required")
  local doc = {
    nbformat = 4,
    nbformat_minor = 5,
    metadata = {
      kernelspec = opts.kernelspec or { name = "seer", display_name = "Lua (seer)", language = "lua" },
      language_info = opts.language_info or { name = "lua", file_extension = ".lua", mimetype = "text/x-lua" },
      seer = opts.metadata or {},
    },
    cells = json.array(),
  }
  doc.metadata.seer.path = opts.path
  return setmetatable({ path = opts.path, doc = doc, version = 0 }, Notebook)
end

-- The most JSON values a notebook may hold when it is loaded (arrays, objects, strings and
-- keys, numbers, literals; opts.max_values of load raises it). Decoded, a value costs tens of
-- bytes: a file of "[0,0,0,..." (two bytes a value) took about 42 times its size in memory, so
-- a notebook a sandbox wrote could take the host's notebook server down. 4 million values is
-- some 350 MB at most; a notebook seer writes holds one string per line of a small output and
-- one per piece of a large one, far fewer.
M.MAX_VALUES = 4000000

---Reads an existing notebook (to resume or continue it). Raises naming the file and the
---problem when it is not an nbformat 4 notebook, is larger than 1 GiB, or holds more than
---`opts.max_values` JSON values (default `notebook.MAX_VALUES`, 4 million).
---@param path string
---@param opts? {max_values?: integer}
---@return seernotebook.notebook
function M.load(path, opts)
  local max_values = opts and opts.max_values or M.MAX_VALUES
  -- regular files only (a fifo would block), bounded, the final name not followed: notebooks
  -- may lie in a sandbox's workspace (seer.safe_fs)
  local dir, base = tostring(path):match("^(.*)/([^/]+)$")
  local text, rerr = require("seer.safe_fs").root(dir and (dir ~= "" and dir or "/") or ".", "the notebook's folder")
    :read(base or path, { max = 1024 * 1024 * 1024 })
  if not text then error(("cannot read notebook %s: %s"):format(path, rerr), 2) end
  local okd, doc = pcall(json.decode, text, { max_values = max_values })
  if not okd and tostring(doc):find("more than max_values", 1, true) then
    error(("cannot load notebook %s: %s; notebook.load(path, {max_values = N}) loads a larger one"):format(path, doc), 2)
  end
  if not okd then error(("%s is not a notebook (invalid JSON): %s"):format(path, doc), 2) end
  if type(doc) ~= "table" or doc.nbformat ~= 4 or type(doc.cells) ~= "table" then
    error(("%s is not an nbformat 4 notebook (no nbformat = 4 and cells list)"):format(path), 2)
  end
  -- The file may come from a sandbox's workspace: every field seer reads is checked here, so a
  -- malformed notebook is refused by name instead of failing later inside a save or a rerun.
  local function bad(what) error(("%s is not a valid notebook: %s"):format(path, what), 3) end
  local ok_list, list_err = pcall(require("seer.checks").list, "cells", doc.cells, "cell")
  if not ok_list then bad(tostring(list_err):gsub("^cells: ", "")) end
  if doc.metadata ~= nil and type(doc.metadata) ~= "table" then bad("metadata is not an object") end
  local function text_ok(v) -- an nbformat multi-line string: a string or a list of strings
    if type(v) == "string" then return true end
    if type(v) ~= "table" or v == json.null then return false end
    for k, line in pairs(v) do -- (a JSON array has no holes: a null element is json.null, not a string)
      if type(k) ~= "number" or type(line) ~= "string" then return false end
    end
    return true
  end
  for i, c in ipairs(doc.cells) do
    if type(c) ~= "table" then bad(("cell %d is a %s, not an object"):format(i, type(c))) end
    if c.cell_type ~= "code" and c.cell_type ~= "markdown" and c.cell_type ~= "raw" then
      bad(("cell %d has cell_type %s (code, markdown or raw)"):format(i, tostring(c.cell_type)))
    end
    if c.source ~= nil and not text_ok(c.source) then bad(("cell %d: source is not a string or a list of strings"):format(i)) end
    if c.metadata ~= nil and type(c.metadata) ~= "table" then bad(("cell %d: metadata is not an object"):format(i)) end
    if c.id ~= nil and type(c.id) ~= "string" then bad(("cell %d: id is not a string"):format(i)) end
    if c.cell_type == "code" and c.outputs ~= nil then
      if type(c.outputs) ~= "table" then bad(("cell %d: outputs is not a list"):format(i)) end
      for j, o in pairs(c.outputs) do
        if type(j) ~= "number" or type(o) ~= "table" or type(o.output_type) ~= "string" then
          bad(("cell %d: output %s is not an object with an output_type"):format(i, tostring(j)))
        end
        if o.output_type == "stream" and o.text ~= nil and not text_ok(o.text) then
          bad(("cell %d: output %d's text is not a string or a list of strings"):format(i, j))
        end
      end
    end
  end
  doc.nbformat_minor = math.max(5, tonumber(doc.nbformat_minor) or 5)
  doc.metadata = doc.metadata or {}
  for _, c in ipairs(doc.cells) do
    if not c.id then c.id = new_cell_id() end
    c.metadata = c.metadata or {}
    if c.attachments == json.null then c.attachments = nil end
  end
  return setmetatable({ path = path, doc = doc, version = 0 }, Notebook)
end

---@class seernotebook.notebook
---@field path string
---@field doc table the nbformat document
---@field version integer bumped on every change (the live view publishes on change)

---Marks a change (for the live view) without saving. Give the cell that changed: a cell's JSON
---is kept between writes until it changes, so a notebook of many finished cells is written
---without encoding them again.
---@param cell? table
function Notebook:touch(cell)
  self.version = self.version + 1
  self._read_cache = nil
  if cell then
    cell._v = (cell._v or 0) + 1
    cell._json_live, cell._json_pretty, cell._json_plain = nil, nil, nil -- stale now
  end
end

---Appends a code cell (pending) and returns it.
---@param source string
---@return table cell
function Notebook:add_code(source)
  local cell = { id = new_cell_id(), cell_type = "code", source = to_lines(source),
                 metadata = { execution_status = "pending" }, outputs = json.array(), execution_count = json.null }
  self.doc.cells[#self.doc.cells + 1] = cell
  self:touch(cell)
  return cell
end

---Appends a markdown cell; returns its 0-based index among all cells.
---@param text string
---@return integer
function Notebook:add_markdown(text)
  self.doc.cells[#self.doc.cells + 1] = { id = new_cell_id(), cell_type = "markdown", source = to_lines(text), metadata = {} }
  self:touch()
  return #self.doc.cells - 1
end

---The code cells in order.
---@return table[]
function Notebook:code_cells()
  local out = {}
  for _, c in ipairs(self.doc.cells) do
    if c.cell_type == "code" then out[#out + 1] = c end
  end
  return out
end

---Resets a code cell for a re-run (source replaced when given).
---@param cell table
---@param source? string
function Notebook:reset_cell(cell, source)
  if source then cell.source = to_lines(source) end
  cell.outputs = json.array()
  cell.execution_count = json.null
  cell.metadata.execution_status = "pending"
  self:touch(cell)
end

---Adds one output (an nbformat output table) to a cell, merging consecutive stream text of the
---same stream as Jupyter does, and honouring a pending clear_output(wait = true).
---@param cell table
---@param out table
function Notebook:add_output(cell, out)
  if cell._clear_pending then
    cell.outputs = json.array()
    cell._clear_pending = nil
  end
  local last = cell.outputs[#cell.outputs]
  if out.output_type == "stream" and last and last.output_type == "stream" and last.name == out.name then
    -- The merged text is kept as a list of pieces (an nbformat multi-line string) and joined
    -- when written: appending to one string would copy it every time (quadratic in the output).
    if type(last.text) ~= "table" then last.text = json.array{ last.text } end
    last.text[#last.text + 1] = M.join(out.text)
  elseif out.output_type == "stream" then
    -- A copy: later text is merged into it, and the caller's table (what an execute reply
    -- returns) must keep only its own text.
    cell.outputs[#cell.outputs + 1] = { output_type = "stream", name = out.name, text = out.text }
  else
    cell.outputs[#cell.outputs + 1] = out
  end
  self:touch(cell)
end

---clear_output: at once, or (wait = true) when the next output arrives.
---@param cell table
---@param wait boolean
function Notebook:clear_outputs(cell, wait)
  if wait then cell._clear_pending = true
  else cell.outputs = json.array(); cell._clear_pending = nil end
  self:touch(cell)
end

-- Stream text as stored: a list of lines as Jupyter writes it, or one string when it is large
-- (nbformat allows both): a line per Lua string would cost tens of bytes per short line.
local BIG_TEXT = 256 * 1024
local function text_size(v)
  if type(v) == "string" then return #v end
  local n = 0
  for _, p in ipairs(v or {}) do n = n + #p end
  return n
end

-- The first and last `keep` bytes of a multi-line string (a string or a list of pieces), with
-- a line between them that says how much was left out; without joining the whole text.
local function head_tail(v, keep, total)
  local parts = type(v) == "string" and { v } or v
  local head, n = {}, 0
  for _, p in ipairs(parts) do
    if n >= keep then break end
    head[#head + 1] = p:sub(1, keep - n)
    n = n + #head[#head]
  end
  local tail, m = {}, 0
  for i = #parts, 1, -1 do
    if m >= keep then break end
    local p = parts[i]
    local piece = #p <= keep - m and p or p:sub(#p - (keep - m) + 1)
    table.insert(tail, 1, piece)
    m = m + #piece
  end
  return table.concat(head) .. ("\n[live view: %d bytes not shown here; the notebook file has all of it]\n"):format(total - n - m)
         .. table.concat(tail)
end

local function disk_text(v, max_text, big)
  local n = text_size(v)
  if max_text and n > max_text then return head_tail(v, math.floor(max_text / 2), n) end
  -- a large text stays in the pieces it arrived in (a list of strings is a valid nbformat
  -- multi-line string): joining it would copy it once more. For a streamed save (big) it is
  -- a placeholder, its pieces encoded one at a time as the file is written.
  if n > BIG_TEXT then
    if big then
      big[#big + 1] = type(v) == "string" and { v } or v
      return ("%s-%d"):format(big.token, #big)
    end
    return v
  end
  return to_lines(M.join(v))
end

-- A non-stream output as written, when it holds strings over BIG_TEXT (a large image, an HTML
-- page, an error's text): a copy of its tables with each such string replaced by a placeholder
-- (in `big`, encoded on its own as the file is written), so that a cell's encoding is never a
-- second copy of what the cell keeps. The output itself when it holds none.
local function big_strings(v, big)
  if type(v) == "string" then
    if #v <= BIG_TEXT then return v end
    big[#big + 1] = { v, single = true }
    return ("%s-%d"):format(big.token, #big)
  end
  if type(v) ~= "table" or v == json.null then return v end
  local copy, changed = {}, false
  for k, x in pairs(v) do
    local y = big_strings(x, big)
    copy[k] = y
    if y ~= x then changed = true end
  end
  if not changed then return v end
  return setmetatable(copy, getmetatable(v))
end

-- The live view shows at most LIVE_MAX_OUTPUT_BYTES of display and error outputs in one
-- snapshot, the newest first; an older output past it is shown as a line saying so (the file has
-- it). A snapshot is held whole by the live view's server and by every browser that reads it:
-- without this bound a notebook of 1 GiB of outputs would be copied whole on every publish.
M.LIVE_MAX_OUTPUT_BYTES = 64 * 1024 * 1024
local STRING_OVERHEAD = 32
local function value_bytes(v)
  if type(v) == "string" then return #v + STRING_OVERHEAD end
  if type(v) ~= "table" then return STRING_OVERHEAD end
  local n = STRING_OVERHEAD
  for k, x in pairs(v) do n = n + value_bytes(k) + value_bytes(x) end
  return n
end
-- output -> {data, metadata, bytes}: an output's size, computed again when an update replaced
-- its data or metadata
local sizes = setmetatable({}, { __mode = "k" })
local function output_bytes(o)
  local c = sizes[o]
  if c and c.data == o.data and c.metadata == o.metadata and c.evalue == o.evalue then return c.n end
  local n = value_bytes(o.data) + value_bytes(o.metadata) + value_bytes(o.evalue) + value_bytes(o.traceback)
  sizes[o] = { data = o.data, metadata = o.metadata, evalue = o.evalue, n = n }
  return n
end
M.output_bytes = output_bytes

local function live_notice(o, n)
  local text = ("[live view: a %s output of %.1f MiB is not shown here (the live view shows the newest %d MiB of outputs); the notebook file has it]")
    :format(o.output_type, n / 1048576, math.floor(M.LIVE_MAX_OUTPUT_BYTES / 1048576))
  if o.output_type == "error" then
    return { output_type = "error", ename = o.ename, evalue = text, traceback = json.array() }
  end
  return { output_type = o.output_type, execution_count = o.execution_count, metadata = {}, data = { ["text/plain"] = text } }
end

-- For the live view: cell -> how many of its first outputs are shown as notices. Outputs are
-- counted from the newest back; once one does not fit the budget, it and every older one are
-- notices (a prefix of each cell, so that the count says which). A stream counts what the live
-- view shows of it (at most max_text): streams were left out, and a cell printing 250 pieces of
-- 256 KiB, stdout and stderr in turn, made 250 MiB snapshots.
local function live_hidden(cells, max_text)
  local hidden, used, full = {}, 0, false
  for i = #cells, 1, -1 do
    local c = cells[i]
    if full then hidden[c] = math.huge
    elseif c.cell_type == "code" and type(c.outputs) == "table" then
      for j = #c.outputs, 1, -1 do
        local o = c.outputs[j]
        if type(o) == "table" then
          local n = o.output_type == "stream" and (math.min(text_size(o.text), max_text or math.huge) + STRING_OVERHEAD)
                    or output_bytes(o)
          if used + n > M.LIVE_MAX_OUTPUT_BYTES then
            hidden[c], full = j, true
            break
          end
          used = used + n
        end
      end
    end
  end
  return hidden
end

-- One cell as written: private bookkeeping fields (leading underscore) never reach the file,
-- stream text as disk_text says, large strings of other outputs as placeholders (big_strings),
-- the first `hide` outputs (live view) as notices.
local function clean_cell(c, max_text, big, hide)
  local copy = {}
  for k, v in pairs(c) do
    if type(k) ~= "string" or k:sub(1, 1) ~= "_" then copy[k] = v end
  end
  if copy.cell_type == "code" then
    local outs = json.array()
    for j, o in ipairs(copy.outputs or {}) do
      if hide and j <= hide then
        outs[j] = o.output_type == "stream"
          and { output_type = "stream", name = o.name, text = ("[live view: %.1f MiB of %s not shown here (the live view shows the newest %d MiB of outputs); the notebook file has it]\n")
                  :format(text_size(o.text) / 1048576, tostring(o.name), math.floor(M.LIVE_MAX_OUTPUT_BYTES / 1048576)) }
          or live_notice(o, output_bytes(o))
      elseif o.output_type == "stream" then outs[j] = { output_type = "stream", name = o.name, text = disk_text(o.text, max_text, big) }
      elseif big then outs[j] = big_strings(o, big)
      else outs[j] = o end
    end
    copy.outputs = outs
  end
  return copy
end
M.clean_cell = clean_cell

-- What a cached encoding of a cell depends on beyond its own version (bumped by touch(cell)):
-- the fields the notebook server sets on the cell it runs.
local function cell_key(c)
  local m = type(c.metadata) == "table" and c.metadata or {}
  return ("%d|%s|%s|%s|%d|%d"):format(c._v or 0, tostring(m.execution_status), tostring(c.execution_count),
    m.seer_truncated and "t" or "", type(c.outputs) == "table" and #c.outputs or -1, type(c.source) == "table" and #c.source or -1)
end
local FINAL = { complete = true, error = true }

-- Emits a cell's text with its big-text placeholders replaced: a stream's list of pieces as an
-- array of them, each encoded on its own; a single large string encoded alone.
local function emit_with_big(emit, text, big)
  if #big == 0 then return emit(text) end
  local mark = '"' .. big.token .. "-"
  local pos = 1
  while true do
    local a, b = text:find(mark, pos, true)
    if not a then break end
    local digits = text:match("^(%d+)\"", b + 1)
    local entry = digits and big[tonumber(digits)]
    if not entry then -- (cannot happen: the token is this notebook's own random one)
      emit(text:sub(pos, b))
      pos = b + 1
    else
      emit(text:sub(pos, a - 1))
      if entry.single then
        emit(json.encode(entry[1]))
      else
        emit("[")
        for j, piece in ipairs(entry) do emit((j > 1 and ", " or "") .. json.encode(piece)) end
        emit("]")
      end
      pos = b + #digits + 2
    end
  end
  emit(text:sub(pos))
end

---The notebook as JSON text handed to `emit` piece by piece: a large stream output is encoded one
---piece at a time (writing a notebook costs little more memory than the notebook itself, not the
---several copies one json.encode of it would make), and a finished cell that has not changed
---since it was last encoded is not encoded again.
---@param emit fun(text: string)
---@param pretty? boolean
---@param max_text? integer as in to_json
function Notebook:write_json(emit, pretty, max_text)
  -- placeholders name this notebook's own random token, so a cell's cached text stays valid
  self._token = self._token or ("seer-big-text-" .. require("seer.net").uuid())
  local opts = pretty and { indent = 1 } or nil
  local slot = max_text and "_json_live" or (pretty and "_json_pretty" or "_json_plain")
  local nl = pretty and "\n" or ""
  local hidden = max_text and live_hidden(self.doc.cells, max_text) or {}
  emit("{" .. nl .. '"cells": [')
  for i, c in ipairs(self.doc.cells) do
    emit((i > 1 and "," or "") .. nl)
    local cached = c[slot]
    local key = cell_key(c)
    if max_text then key = key .. "|" .. tostring(hidden[c] or 0) end
    if not (cached and cached.key == key) then
      local big = { token = self._token }
      local text = json.encode(clean_cell(c, max_text, big, hidden[c]), opts)
      cached = { key = key, text = text, big = big }
      -- a cell's text holds placeholders for its large strings, not copies of them: caching it
      -- costs what its small parts do
      local m = type(c.metadata) == "table" and c.metadata or {}
      if c.cell_type ~= "code" or FINAL[m.execution_status] then c[slot] = cached end
    end
    emit_with_big(emit, cached.text, cached.big)
  end
  local d = self.doc
  emit(nl .. "]," .. nl .. '"metadata": ' .. json.encode(d.metadata, opts) .. "," .. nl
       .. '"nbformat": ' .. json.encode(d.nbformat) .. "," .. nl .. '"nbformat_minor": ' .. json.encode(d.nbformat_minor) .. nl .. "}")
end

---The notebook as JSON text (what is saved and what the live view shows).
---@param pretty? boolean indent one space per level, like Jupyter
---@param max_text? integer show at most this many bytes of each stream output (its head and
---its tail, with a line saying how much is left out): the live view's snapshot
---@return string
function Notebook:to_json(pretty, max_text)
  local parts = {}
  self:write_json(function(p) parts[#parts + 1] = p end, pretty, max_text)
  return table.concat(parts)
end

---Writes the notebook to its path atomically.
function Notebook:save()
  -- No link followed anywhere on the path (the output folder may lie in a sandbox's workspace)
  local ok, err = require("seer.safe_fs").write_nofollow(self.path, self:to_json(true) .. "\n", { what = "the notebook's folder" })
  if not ok then error(("saving the notebook: %s"):format(err), 0) end
end

return M
