--- seer.mcp.notebook_tools: the notebook tools of `seer mcp notebook`, with the reference's names
--- and parameters (start_new_session, attach_to_session, start_session_resume_notebook,
--- start_session_continue_notebook, execute_code, edit_cell, add_markdown, shutdown_session)
--- plus read_notebook, interrupt and restart_kernel. Cells: read_notebook numbers all cells
--- (markdown included); edit_cell's cell_index counts code cells, as the reference's does, and
--- every code cell's header and execute_code's result name it. Sessions are
--- seer.execution notebook sessions: started here
--- (a notebook server child of this process) or attached to another process's server (an
--- experiment's session, from its jupyter_url).
---
--- What a cell's outputs become (docs/mcp.md): streams and the text/plain of results and
--- displays -> text; an error -> its name, message and traceback (ANSI codes stripped) as a
--- normal result (isError false); image/png -> MCP image content, downscaled to at most 512 px.
---@class seermcp.notebook_tools
local M = {}

local ffi = require "ffi"
local json = require "seer.json"
local execution = require "seer.execution"
local notebook = require "seer.notebook"

M.IMAGE_MAX_SIDE = 512
M.MAX_IMAGES = 16 -- per tool result; more are mentioned in text
-- Every image is decoded on the host to shrink it, in time linear in the pixels its header
-- claims, and a small file can claim many (1 MB of 16-bit RGBA zeros claims 2^27 pixels: 3 s).
-- An image claiming more than IMAGE_MAX_PIXELS (png.DISPLAY_MAX_PIXELS, 2^25 = 33.6 million:
-- 8K UHD, a 30-megapixel photo; at most 0.75 s) is not decoded, and the images of one result that
-- need shrinking claim at most IMAGE_RESULT_PIXELS together (2^26: two at the limit, eight 4K
-- UHD ones, sixteen 1080p ones; at most 1.5 s). Past either a line of text names the image's
-- claimed size instead, and the notebook keeps the image as the kernel sent it (docs/mcp.md,
-- "Images").
M.IMAGE_MAX_PIXELS = 2 ^ 25
M.IMAGE_RESULT_PIXELS = 2 ^ 26
-- A cell's source from the agent (execute_code, edit_cell, add_markdown): every cell is saved in
-- the notebook and sent in every live snapshot, and sources count against no output limit (five
-- cells of a 32 MiB comment grew a notebook to 160 MiB). Data belongs in a file the kernel reads.
M.MAX_CELL_SOURCE = 1024 * 1024

---------------------------------------------------------------------------------------------
-- base64 (notebook outputs carry PNGs as base64, and so does MCP image content)

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local enc_tab = ffi.new("uint8_t[64]", B64)
local dec_tab = ffi.new("int16_t[256]")
for i = 0, 255 do dec_tab[i] = -1 end
for i = 1, 64 do dec_tab[B64:byte(i)] = i - 1 end

local function b64encode(s)
  local n = #s
  local src = ffi.cast("const uint8_t *", s)
  local out = ffi.new("uint8_t[?]", math.floor((n + 2) / 3) * 4 + 1)
  local o = 0
  for i = 0, n - 1, 3 do
    local a, b, c = src[i], i + 1 < n and src[i + 1] or 0, i + 2 < n and src[i + 2] or 0
    local v = a * 65536 + b * 256 + c
    out[o] = enc_tab[bit.rshift(v, 18)]
    out[o + 1] = enc_tab[bit.band(bit.rshift(v, 12), 63)]
    out[o + 2] = i + 1 < n and enc_tab[bit.band(bit.rshift(v, 6), 63)] or 61
    out[o + 3] = i + 2 < n and enc_tab[bit.band(v, 63)] or 61
    o = o + 4
  end
  return ffi.string(out, o)
end
M.b64encode = b64encode

-- Decodes base64, ignoring white space (nbformat may wrap it); nil and why on bad input.
local function b64decode(s)
  local n = #s
  local src = ffi.cast("const uint8_t *", s)
  local out = ffi.new("uint8_t[?]", math.floor(n * 3 / 4) + 3)
  local o, acc, bits, pad = 0, 0, 0, 0
  for i = 0, n - 1 do
    local ch = src[i]
    if ch == 61 then
      pad = pad + 1
    elseif ch ~= 10 and ch ~= 13 and ch ~= 32 and ch ~= 9 then
      local d = dec_tab[ch]
      if d < 0 or pad > 0 then return nil, ("not base64 (byte %d)"):format(i) end
      acc = bit.bor(bit.lshift(bit.band(acc, 0xFFFF), 6), d)
      bits = bits + 6
      if bits >= 8 then
        bits = bits - 8
        out[o] = bit.band(bit.rshift(acc, bits), 255)
        o = o + 1
      end
    end
  end
  return ffi.string(out, o)
end
M.b64decode = b64decode

---------------------------------------------------------------------------------------------
-- outputs -> MCP content

local function strip_ansi(s)
  s = s:gsub("\27%[[%d;?]*[%a@]", ""):gsub("\27%][^\7\27]*\7", ""):gsub("\27%][^\27]*\27\\", ""):gsub("\27[()][%w]", "")
  return s
end
M.strip_ansi = strip_ansi

local function join(v)
  if v == nil or v == json.null then return "" end
  return notebook.join(v)
end

local function millions(n)
  return ("%.1f million"):format(n / 1e6)
end

---The size an image output's PNG header claims (its IHDR: signature, chunk type and CRC checked),
---read from the first 48 bytes without decoding the rest of the base64 or any pixel; nil when it
---has no readable header.
---@return integer? width
---@return integer? height
local function image_claim(b64)
  local s = join(b64)
  local size = require("seer.core.png").size
  local ok, w, h = pcall(size, b64decode(s:sub(1, 64)) or "")
  if not ok and s:sub(1, 64):find("%s") then -- base64 wrapped early: decode it all
    ok, w, h = pcall(size, b64decode(s) or "")
  end
  if ok then return w, h end
end
M.image_claim = image_claim

---The text in place of an image that claims w x h pixels when that is over max_pixels.
function M.image_too_large(w, h, max_pixels)
  return ("[image not shown: %d x %d pixels claimed, more than the %s an image shown here may have; it stays in the notebook]\n")
    :format(w, h, millions(max_pixels))
end

---An image block for PNG bytes (base64 text in nbformat), downscaled to max_side; or nil and why.
---An image claiming more than max_pixels (default IMAGE_MAX_PIXELS) is not decoded: nil, the text
---to show in its place (image_too_large), and "too large".
local function image_block(b64, max_side, max_pixels)
  max_pixels = max_pixels or M.IMAGE_MAX_PIXELS
  local w, h = image_claim(b64)
  if w and w * h > max_pixels then return nil, M.image_too_large(w, h, max_pixels), "too large" end
  local bytes, why = b64decode(join(b64))
  if not bytes then return nil, why end
  local png = require "seer.core.png"
  -- png.fit checks the claim again, from the same header, before it decodes a row
  local ok, out, ow, oh = pcall(png.fit, bytes, max_side, math.max(1, math.min(math.floor(max_pixels), png.MAX_PIXELS)))
  if not ok then return nil, (tostring(out):gsub("^png%.fit: ", "")) end
  return { type = "image", data = out == bytes and join(b64):gsub("%s", "") or b64encode(out), mimeType = "image/png" }, ow, oh
end
M.image_block = image_block

-- The kernel names a cell's code "[cell N]" in errors and tracebacks, N its execution count
-- (the "[N]" Jupyter shows). The agent numbers cells by position (read_notebook's "## cell 3",
-- edit_cell's code-cell cell_index), so what it reads calls the execution count a run:
-- "[run 3]:2:", and read_notebook's header "## cell 3 (code cell 2: edit_cell cell_index=2, run 3,
-- ...)". A "[cell 3]" in an error would name neither.
local function runs_not_cells(s)
  return (s:gsub("%[cell (%d+)%]", "[run %1]"))
end
M.runs_not_cells = runs_not_cells

---The text of one output as the agent reads it ("" when it has none): streams, the text of
---results and displays, an error's traceback; an image/png output is a placeholder line here
---(outputs_to_content sends it as an image instead).
---@param o table an nbformat output
---@return string
function M.output_text(o)
  local t = o.output_type
  if t == "stream" then return strip_ansi(join(o.text)) end
  if t == "error" then
    local tb = {}
    for _, l in ipairs(type(o.traceback) == "table" and o.traceback or {}) do tb[#tb + 1] = runs_not_cells(strip_ansi(join(l))) end
    local head = ("%s: %s"):format(join(o.ename), runs_not_cells(strip_ansi(join(o.evalue))))
    -- Lua tracebacks start with "ename: evalue" already; others get it in front.
    if #tb == 0 or not tb[1]:find(join(o.ename), 1, true) then table.insert(tb, 1, head) end
    return table.concat(tb, "\n") .. "\n"
  end
  if type(o.data) ~= "table" then return "" end
  local d = o.data
  if d["image/png"] then
    return "[image" .. (d["text/plain"] and (": " .. join(d["text/plain"])) or "") .. "]\n"
  elseif d["text/plain"] then
    return strip_ansi(join(d["text/plain"])) .. "\n"
  elseif d["text/markdown"] then
    return join(d["text/markdown"]) .. "\n"
  elseif d["application/json"] then
    local ok, s = pcall(json.encode, d["application/json"])
    return (ok and s or "[application/json output]") .. "\n"
  end
  local kinds = {}
  for k in pairs(d) do kinds[#kinds + 1] = k end
  table.sort(kinds)
  return "[output of type " .. table.concat(kinds, ", ") .. "]\n"
end

---MCP content blocks for nbformat outputs, in order: adjacent text joined into one block.
---@param outputs table[]
---Images: at most max_images (MAX_IMAGES), each claiming at most max_pixels (IMAGE_MAX_PIXELS),
---those to shrink (a side over max_side) together at most result_pixels (IMAGE_RESULT_PIXELS), as
---their headers claim; past a limit an image is not decoded and a line of text says why.
---@param opts? {max_side?: integer, max_images?: integer, max_pixels?: number, result_pixels?: number, images?: boolean} images = false: a placeholder line instead
---@return table content
function M.outputs_to_content(outputs, opts)
  opts = opts or {}
  local content, text, images = json.array(), {}, 0
  local max_pixels = opts.max_pixels or M.IMAGE_MAX_PIXELS
  local budget = opts.result_pixels or M.IMAGE_RESULT_PIXELS
  local max_side = opts.max_side or M.IMAGE_MAX_SIDE
  local claimed = 0 -- pixels the images of this result decoded to shrink them claimed
  local function flush()
    if #text > 0 then
      content[#content + 1] = { type = "text", text = table.concat(text) }
      text = {}
    end
  end
  local function add_text(s)
    if s ~= "" then text[#text + 1] = s end
  end
  for _, o in ipairs(outputs or {}) do
    local d = type(o.data) == "table" and o.data
    if d and d["image/png"] and opts.images ~= false and o.output_type ~= "stream" and o.output_type ~= "error" then
      images = images + 1
      if images > (opts.max_images or M.MAX_IMAGES) then
        add_text("[image not shown: more than " .. (opts.max_images or M.MAX_IMAGES) .. " images in one result]\n")
      else
        local w, h = image_claim(d["image/png"])
        if w and w * h > max_pixels then
          add_text(M.image_too_large(w, h, max_pixels))
        elseif w and (w > max_side or h > max_side) and claimed + w * h > budget then
          add_text(("[image not shown: %d x %d pixels claimed; this result's images before it claim %s, and one result shows %s at most; it stays in the notebook]\n")
            :format(w, h, millions(claimed), millions(budget)))
        else
          -- counted before it is decoded (a file that fails halfway has cost its time too); one
          -- that already fits max_side is not (16 of them cost at most 16 x 512 x 512 pixels)
          if w and (w > max_side or h > max_side) then claimed = claimed + w * h end
          local block, w_or_why = image_block(d["image/png"], max_side, max_pixels)
          if block then
            flush()
            content[#content + 1] = block
          else
            add_text("[an image/png output that cannot be shown: " .. tostring(w_or_why) .. "]\n")
          end
        end
      end
    else
      local s = M.output_text(o)
      -- an error starts on a line of its own
      if o.output_type == "error" and #text > 0 and not text[#text]:match("\n$") then s = "\n" .. s end
      add_text(s)
    end
  end
  flush()
  if #content == 0 then content[1] = { type = "text", text = "(no output)" } end
  return content
end

---------------------------------------------------------------------------------------------
-- read_notebook's text: every cell numbered as edit_cell takes it, long parts cut to their head
-- and tail with a line saying what was left out and how to read it, a cell's error always shown.

-- The largest k <= n at which s can be cut without splitting a UTF-8 character.
local function utf8_floor(s, n)
  if n >= #s then return #s end
  if n <= 0 then return 0 end
  while n > 0 do
    local b = s:byte(n + 1)
    if b < 0x80 or b >= 0xC0 then break end
    n = n - 1
  end
  return n
end

-- The smallest k >= n at which s can be cut without splitting a UTF-8 character.
local function utf8_ceil(s, n)
  if n <= 0 then return 0 end
  while n < #s do
    local b = s:byte(n + 1)
    if b < 0x80 or b >= 0xC0 then break end
    n = n + 1
  end
  return math.min(n, #s)
end

-- Cuts fall between lines when a line ends within this many bytes of where they would be.
local LINE_SLACK = 256

-- n moved back to just after a newline, when one is at most LINE_SLACK bytes before it.
local function line_floor(s, n)
  if n >= #s or n <= 0 then return n end
  local from = math.max(1, n - LINE_SLACK + 1)
  local p = s:sub(from, n):match(".*\n()")
  return p and (from + p - 2) or n
end

-- n moved on to just after a newline, when one is at most LINE_SLACK bytes after it.
local function line_ceil(s, n)
  if n >= #s or n <= 0 then return n end
  local p = s:find("\n", n + 1, true)
  return (p and p <= n + LINE_SLACK) and p or n
end

-- s whole when it holds at most keep bytes; else its head and its tail (keep bytes together)
-- around note(from, to, total), which says what is left out: bytes from..to (0-based, end
-- excluded) of total. Returns the text and the kept ranges {{0, from}, {to, total}}.
local function head_tail(s, keep, note)
  if #s <= keep then return s, { { 0, #s } } end
  local h = line_floor(s, utf8_floor(s, math.floor(keep / 2)))
  local t = line_ceil(s, utf8_ceil(s, #s - (keep - h)))
  local head = s:sub(1, h)
  return head .. ((h > 0 and head:sub(-1) ~= "\n") and "\n" or "") .. note(h, t, #s) .. s:sub(t + 1), { { 0, h }, { t, #s } }
end

-- A code cell's outputs as one text, as the agent reads them, and where its errors are in it
-- ({from, to, text}, byte offsets).
local function cell_output_text(outputs)
  local parts, n, errs = {}, 0, {}
  for _, o in ipairs(type(outputs) == "table" and outputs or {}) do
    local piece = M.output_text(o)
    if o.output_type == "error" and n > 0 and parts[#parts]:sub(-1) ~= "\n" then piece = "\n" .. piece end
    if piece ~= "" then
      if o.output_type == "error" then errs[#errs + 1] = { from = n, to = n + #piece, text = piece } end
      parts[#parts + 1] = piece
      n = n + #piece
    end
  end
  return table.concat(parts), errs
end

M.ERROR_KEEP = 4000 -- bytes of an error shown again after a cut that hid it

-- The cell's errors that the kept ranges do not show whole, each at most ERROR_KEEP bytes.
local function hidden_errors(errs, kept)
  local out = {}
  for _, e in ipairs(errs) do
    local shown = false
    for _, r in ipairs(kept) do if e.from >= r[1] and e.to <= r[2] then shown = true end end
    if not shown then
      local text = head_tail(e.text, M.ERROR_KEEP, function(_, _, total)
        return ("[... the error is %d characters; its head and tail are shown ...]\n"):format(total)
      end)
      out[#out + 1] = "-- the cell's error (in the part of the output not shown above):\n" .. text
    end
  end
  return out
end

-- A cell's header: its number among all cells (read_notebook's start) and, for a code cell, its
-- number among code cells, which is edit_cell's cell_index (the reference's numbering).
local function cell_head(c, n, k)
  if c.cell_type ~= "code" then return ("## cell %d (%s)"):format(n, tostring(c.cell_type)) end
  local md = type(c.metadata) == "table" and c.metadata or {}
  local ec = c.execution_count
  return ("## cell %d (code cell %s: edit_cell cell_index=%s, %s, %s)"):format(n, tostring(k or "?"), tostring(k or "?"),
    (ec ~= nil and ec ~= json.null) and ("run " .. tostring(ec)) or "not run", tostring(md.execution_status or "pending"))
end

---The text read_notebook answers for cells `r.cells` (from read_notebook's reply) that start at
---number `start`: at most about `budget` bytes. A cell whose output is longer shows its head
---and tail with a line that says what was left out and how to page through it (output_offset);
---its errors are always shown; cells that do not fit are named with the start that reads them.
---@return string text, integer shown how many cells the text shows
function M.render_cells(r, start, budget)
  local cells = r.cells
  local parts
  if #cells > 0 then
    parts = { ("Notebook %s: cells %d-%d of %d"):format(tostring(r.notebook_path), start, start + #cells - 1, r.total) }
  elseif r.total == 0 then
    return ("Notebook %s: no cells yet (it is empty)."):format(tostring(r.notebook_path)), 0
  else
    -- a start past the end: say so, and where the cells are
    return ("Notebook %s: no cells from %d on: the notebook has %d cell%s (0 to %d); give a start from 0 to %d.")
      :format(tostring(r.notebook_path), start, r.total, r.total == 1 and "" or "s", r.total - 1, r.total - 1), 0
  end
  local single = #cells == 1
  local src_keep = math.floor(budget / (single and 2 or 4))
  local used, shown = #parts[1], 0
  local k = type(r.code_before) == "number" and r.code_before or nil
  for i, c in ipairs(cells) do
    local n = start + i - 1
    local piece = { cell_head(c, n, c.cell_type == "code" and k or nil) }
    if c.cell_type == "code" and k then k = k + 1 end
    local src = join(c.source)
    piece[#piece + 1] = head_tail(src, src_keep, function(from, to, total)
      return ("[... %d characters of this cell's source not shown (%d to %d of %d) ...]\n"):format(to - from, from, to, total)
    end)
    if c.cell_type == "code" and type(c.outputs) == "table" and #c.outputs > 0 then
      local text, errs = cell_output_text(c.outputs)
      local out_keep = single and math.max(budget - math.min(#src, src_keep), 1000) or math.floor(budget / 4)
      local kept_text, kept = head_tail(text, out_keep, function(from, to, total)
        return ("[... %d characters of this cell's output not shown (characters %d to %d of %d); read them with read_notebook(session_id, start=%d, output_offset=%d), a page at a time ...]\n")
          :format(to - from, from, to, total, n, from)
      end)
      piece[#piece + 1] = "-- outputs:"
      piece[#piece + 1] = kept_text
      for _, e in ipairs(hidden_errors(errs, kept)) do piece[#piece + 1] = e end
    end
    local t = table.concat(piece, "\n")
    if shown > 0 and used + #t > budget then
      parts[#parts + 1] = ("[cells %d-%d not shown: one answer holds about %d characters; read them with read_notebook(session_id, start=%d)]")
        :format(n, start + #cells - 1, budget, n)
      break
    end
    parts[#parts + 1] = t
    used, shown = used + #t + 1, shown + 1
  end
  if shown < #cells then parts[1] = ("Notebook %s: cells %d-%d of %d"):format(tostring(r.notebook_path), start, start + shown - 1, r.total) end
  return table.concat(parts, "\n"), shown
end

---One page of a code cell's output: at most `budget` bytes from byte `offset`, with where it
---is and where the next page starts; the cell's errors are shown even when the page misses them.
---@return string text, table structured
function M.render_output_page(r, start, offset, budget)
  local c = r.cells[1]
  if not c then
    local text = M.render_cells(r, start, budget)
    return text, { notebook_path = r.notebook_path, total = r.total, start = start, count = 0 }
  end
  if c.cell_type ~= "code" then
    error(("cell %d is a %s cell: it has no output (output_offset pages through a code cell's output; read_notebook without it shows this cell)")
      :format(start, tostring(c.cell_type)), 0)
  end
  local text, errs = cell_output_text(c.outputs)
  if offset > #text then
    error(("output_offset %d is past the end of cell %d's output, which has %d characters"):format(offset, start, #text), 0)
  end
  local from = utf8_ceil(text, offset)
  local to = utf8_floor(text, from + budget)
  if to < #text and line_floor(text, to) > from then to = line_floor(text, to) end
  if to <= from and from < #text then to = utf8_ceil(text, from + 1) end
  local parts = { ("Notebook %s: %s; its output, characters %d to %d of %d:"):format(tostring(r.notebook_path), (cell_head(c, start, type(r.code_before) == "number" and r.code_before or nil):gsub("^## ", "")), from, to, #text) }
  parts[#parts + 1] = text:sub(from + 1, to)
  if to < #text then
    parts[#parts + 1] = ("[characters %d to %d of %d shown; the next page: read_notebook(session_id, start=%d, output_offset=%d)]"):format(from, to, #text, start, to)
  else
    parts[#parts + 1] = ("[the end of cell %d's output (%d characters)]"):format(start, #text)
  end
  for _, e in ipairs(hidden_errors(errs, { { from, to } })) do parts[#parts + 1] = e end
  return table.concat(parts, "\n"), { notebook_path = r.notebook_path, total = r.total, start = start, count = 1,
    output_offset = from, output_end = to, output_chars = #text, next_output_offset = to < #text and to or json.null }
end

---------------------------------------------------------------------------------------------
-- the tools

-- What the tools reach (docs/mcp.md, "Sandbox-bound servers"):
--   "sandbox"  bound to one sandbox's scope on a notebook server (a sandboxed session's
--              mcp_config: SEER_NOTEBOOK_ENDPOINT + SEER_NOTEBOOK_SCOPE_KEY, or a preset
--              session that turned out to be sandboxed): new sessions start in that sandbox,
--              notebooks are named inside its output directory, attach reaches its sessions.
--   "host"     no sandbox: new sessions are kernels on this machine (an explicit opt-in: a
--              local session's mcp_config, or seer mcp notebook started by hand).
--   "pending"  a preset session given by jupyter_url that could not be reached yet: nothing
--              starts until it is known whether it is sandboxed.
M.NOT_SANDBOXED = "NOT sandboxed: the kernel runs on this machine as your user, with your files and network."

---Adds the notebook tools to an MCP server.
---@param srv table a seer.mcp.server
---@param opts {output_dir?: string, max_output?: integer, session_id?: string, jupyter_url?: string, notebook_dir?: string, scope?: {endpoint: string, key: string}}
---@return table state {sessions = {[id] = session}, mode = "sandbox"|"host"|"pending", sandbox_id?: string}
function M.install(srv, opts)
  opts = opts or {}
  local sessions, owned, order = {}, {}, {}
  local state = { sessions = sessions }
  local preset_error
  local binding -- seer.execution SandboxBinding in "sandbox" mode

  execution.set_waiter(srv:waiter())

  local function remember(s, is_owned)
    if not sessions[s.session_id] then order[#order + 1] = s.session_id end
    sessions[s.session_id] = s
    owned[s.session_id] = is_owned or nil
  end

  -- Binds to a sandbox's scope; from then on no tool reaches anything outside it.
  local function bind(endpoint, key, sandbox_id)
    binding = execution.bind_sandbox(endpoint, key)
    state.mode, state.sandbox_id = "sandbox", sandbox_id
  end

  -- The preset session given by jupyter_url (main key). A sandboxed one binds this server to
  -- its sandbox, and the main connection is not used for anything else.
  local function attach_preset_url()
    local s = execution.attach_notebook_session(opts.jupyter_url, opts.session_id)
    if s.sandbox_id then
      local cred = execution.scope_credential(s)
      bind(cred.endpoint, cred.key, cred.sandbox_id)
      s = binding:attach(opts.session_id)
    else
      state.mode = "host"
    end
    remember(s, false)
    return s
  end

  local function attach_preset()
    if binding then
      local s = binding:attach(opts.session_id)
      state.sandbox_id = s.sandbox_id or state.sandbox_id
      remember(s, false)
      return s
    end
    return attach_preset_url()
  end

  -- The mode is settled before the tools are described: the preset session is attached now
  -- (a failure is logged and retried on use).
  if opts.scope then
    bind(opts.scope.endpoint, opts.scope.key, nil)
  elseif opts.session_id and opts.jupyter_url then
    state.mode = "pending"
  else
    state.mode = "host"
  end
  if opts.session_id and (binding or opts.jupyter_url) then
    local ok, err = pcall(attach_preset)
    if not ok then
      preset_error = tostring(err)
      srv:log("cannot attach to session %s: %s", opts.session_id, preset_error)
    end
  end

  if state.mode == "sandbox" then
    srv.instructions = M.INSTRUCTIONS .. "\nThis server is bound to one sandbox: new sessions start inside it with its models"
      .. " preloaded, notebooks are named by file name in its output directory, and only its sessions can be attached."
  else
    srv.instructions = M.INSTRUCTIONS .. "\nSessions that start_* tools start here are " .. M.NOT_SANDBOXED
  end
  if opts.session_id and not preset_error then
    -- The agent is told where it is: the session it was given, already started.
    srv.instructions = srv.instructions .. ("\nYour session is already started: session_id %q. Use it with execute_code, "
      .. "add_markdown and the other tools; do not start a new session unless the task asks for one."):format(opts.session_id)
  end

  -- Tools that start kernels on this machine run only in "host" mode; "pending" first tries
  -- to learn what the preset session is.
  local function host_allowed()
    if state.mode == "pending" then
      local ok, r = pcall(attach_preset)
      if not ok then preset_error = tostring(r) end
    end
    if state.mode == "host" then return true end
    if state.mode == "pending" then
      error(("this server was given session %s, which cannot be reached (%s); it starts no kernel until it knows whether that session is sandboxed")
        :format(tostring(opts.session_id), tostring(preset_error)), 0)
    end
    return false
  end

  local function session(id)
    local s = sessions[id]
    if s then return s end
    -- The preset session (mcp_config) is attached again if attaching at start failed.
    if id == opts.session_id and (binding or opts.jupyter_url) then
      local ok, r = pcall(attach_preset)
      if ok then return r end
      preset_error = tostring(r)
    end
    local ids = {}
    for _, k in ipairs(order) do if sessions[k] then ids[#ids + 1] = k end end
    error(("unknown session_id %q%s; sessions: %s. Start one with start_new_session (or attach_to_session)")
      :format(tostring(id), (id == opts.session_id and preset_error) and (" (attaching to it failed: " .. preset_error .. ")") or "",
              #ids > 0 and table.concat(ids, ", ") or "none"), 0)
  end

  -- A session started by resume or continue whose kernel died while its cells were re-run
  -- (info.kernel_died from the notebook server): what happened and the way on, in tool names.
  local function replay_death(s, info)
    local kd = type(info.kernel_died) == "table" and info.kernel_died or {}
    local n = type(kd.cell_number) == "number" and kd.cell_number or nil
    local ci = type(kd.cell_index) == "number" and kd.cell_index or nil
    local where = n and ((kd.while_running ~= false) and ("while re-running cell %d"):format(n)
                         or ("before cell %d ran"):format(n)) or "while its cells were re-run"
    local reason = type(info.dead_reason) == "string" and info.dead_reason or type(kd.reason) == "string" and kd.reason or "died"
    return ("The kernel DIED %s (the kernel %s)%s; the session has no kernel now, and execute_code answers KernelDied. "
      .. "The notebook keeps its cells and their outputs. To go on: restart_kernel(session_id=%q) starts a new kernel "
      .. "(start-up code only: the re-run cells' variables are gone), then fix %s and re-run the cells you need.")
      :format(where, reason,
              type(kd.cells_not_run) == "number" and kd.cells_not_run > 0 and ("; %d cell%s after it did not run"):format(kd.cells_not_run, kd.cells_not_run == 1 and "" or "s") or "",
              s.session_id, (n and ci) and ("cell %d with edit_cell(session_id=%q, cell_index=%d, code=...)"):format(n, s.session_id, ci) or "the cell that killed it with edit_cell")
  end

  local function started(s, status, extra, info)
    local r = { session_id = s.session_id, notebook_path = s.notebook_path, status = status }
    for k, v in pairs(extra or {}) do r[k] = v end
    local lines = { ("Session %s %s. Notebook: %s"):format(s.session_id, status, tostring(s.notebook_path)) }
    if extra and extra.cells_run then
      lines[#lines + 1] = ("Re-ran %d code cells (%d failed); read_notebook shows them."):format(extra.cells_run, extra.cells_failed or 0)
    end
    if info and info.state == "dead" then
      -- a replay that killed the kernel: the session exists, but nothing runs until a restart
      r.state, r.dead_reason = "dead", type(info.dead_reason) == "string" and info.dead_reason or json.null
      if type(info.kernel_died) == "table" then r.kernel_died = info.kernel_died end
      lines[#lines + 1] = replay_death(s, info)
    else
      lines[#lines + 1] = "Run code with execute_code(session_id, code)."
    end
    return { content = { { type = "text", text = table.concat(lines, "\n") } }, structuredContent = r }
  end

  -- What the notebook server and seer.execution advise, in this server's tool names: the agent
  -- has no session:restart() and no "end session X first", it has restart_kernel and
  -- shutdown_session.
  local function agent_words(msg, sid)
    if type(msg) ~= "string" then return msg end
    -- a refusal the notebook server answered, raised by seer.execution with its position and
    -- the Lua API's name in front ("...notebook_tools.lua:842: session:interrupt: KernelDied: ..."):
    -- the agent gets the refusal itself
    local rest = msg:match("^[^\n]-%.lua:%d+: (.*)$")
    if rest and rest:match("^[%w_.:]+: %u[%w]*: ") then msg = rest end
    msg = msg:gsub("^[%w_]+:[%w_]+: (%u[%w]*: )", "%1"):gsub("^[%w_]+_notebook: (%u[%w]*: )", "%1")
    local id = sid and ("session_id=%q"):format(sid) or "session_id"
    msg = msg:gsub("restart the session to go on", function()
      return ("call restart_kernel(%s) to go on: a new kernel with the start-up code run again (variables from earlier cells are gone; the notebook keeps its cells)"):format(id)
    end):gsub("call session:restart%(%) to go on %(a new kernel%)", function()
      return ("call restart_kernel(%s) to go on: a new kernel with the start-up code run again (variables from earlier cells are gone; the notebook keeps its cells)"):format(id)
    end)
    -- NotebookInUse (start_session_resume_notebook), the holder dead or alive
    msg = msg:gsub("Restart session (%w+) to go on in it %(a new kernel; the notebook keeps its cells%), or end session %w+ first and resume again to re%-run its cells; continue_notebook %(start_session with continue%) re%-runs it under a new name",
      function(h)
        return ("To go on: restart_kernel(session_id=%q) gives that session a new kernel (the notebook keeps its cells; re-run what you need with edit_cell), "
          .. "or shutdown_session(session_id=%q) and then start_session_resume_notebook again re-runs all its cells; start_session_continue_notebook re-runs it under a new name"):format(h, h)
      end)
    msg = msg:gsub("Use continue_notebook %(start_session with continue%), which re%-runs it under a new name, or end session (%w+) first",
      function(h)
        return ("Use start_session_continue_notebook, which re-runs it under a new name, or shutdown_session(session_id=%q) first"):format(h)
      end)
    return msg
  end

  local function exec_opts(ctx)
    local o = { max_output = opts.max_output }
    if ctx.progress_token then
      local n = 0
      o.on_output = function(out)
        n = n + 1
        local kind = out.output_type == "stream" and (out.name or "stream") or out.output_type
        ctx:progress(("output %d (%s)"):format(n, tostring(kind)))
      end
    end
    return o
  end

  local function value(v) if v == json.null then return nil end return v end

  -- Runs an execute or edit_cell request on the notebook server (what session:exec and
  -- session:edit_cell send, with the cell named by its number among all cells: cell_number,
  -- the one numbering the agent sees). A dead kernel is a cell result (KernelDied), as for a
  -- cell whose kernel died under it; other refusals (IndexError, ...) are tool errors.
  local function cell_request(s, op, content, o)
    content.session_id = s.session_id
    content.max_output = o.max_output
    content.stream = o.on_output and true or false
    local reply = s:_request(op, content, { on_output = o.on_output })
    if reply.status == "error" then
      if reply.ename == "KernelDied" then
        local e = { output_type = "error", ename = "KernelDied", evalue = tostring(reply.evalue), traceback = json.array() }
        return { outputs = { e }, result = "error", error = { ename = e.ename, evalue = e.evalue } }
      end
      error(("%s: %s"):format(tostring(reply.ename), tostring(reply.evalue)), 0)
    end
    if type(reply.notebook_path) == "string" then s.notebook_path = reply.notebook_path end
    local r = { outputs = type(reply.outputs) == "table" and reply.outputs or {}, execution_count = value(reply.execution_count),
                cell_index = value(reply.cell_index), cell_number = value(reply.cell_number), truncated = reply.truncated == true,
                result = reply.result,
                dropped = value(reply.dropped), save_error = value(reply.save_error) }
    if reply.result ~= "ok" then
      local err = type(reply.error) == "table" and reply.error or {}
      r.error = { ename = tostring(value(err.ename) or "Error"), evalue = tostring(value(err.evalue) or "") }
    end
    return r
  end

  local function cell_result(s, r)
    -- the server's advice in tool names, in the outputs the agent reads and in the error field
    local outputs = {}
    for i, o in ipairs(r.outputs or {}) do
      if o.output_type == "error" and type(o.evalue) == "string" and o.ename == "KernelDied" then
        local c = {}
        for k, v in pairs(o) do c[k] = v end
        c.evalue = agent_words(o.evalue, s.session_id)
        o = c
      end
      outputs[i] = o
    end
    local content = M.outputs_to_content(outputs)
    if r.truncated and r.cell_number then
      -- the cut text says the notebook keeps it all: here is how to read it
      local hint = ("[read_notebook(session_id, start=%d, output_offset=0) pages through all that the notebook kept of this cell's output]\n"):format(r.cell_number)
      local last = content[#content]
      if last and last.type == "text" then last.text = last.text .. (last.text:match("\n$") and "" or "\n") .. hint
      else content[#content + 1] = { type = "text", text = hint } end
    end
    local sc = { session_id = s.session_id, execution_count = r.execution_count or json.null,
                 cell_index = r.cell_index or json.null, cell_number = r.cell_number or json.null,
                 status = r.result == "ok" and "ok" or "error",
                 truncated = r.truncated and true or false }
    if r.error then
      sc.error = { ename = r.error.ename, evalue = agent_words(runs_not_cells(tostring(r.error.evalue)), s.session_id) }
    end
    -- what the notebook server did not keep past the cell's output limits (the record is also
    -- the last line of the text), and a save that failed
    if r.dropped then sc.dropped = r.dropped end
    if r.save_error then sc.save_error = r.save_error end
    return { content = content, structuredContent = sc }
  end

  -- Runs a cell for a tool call. A session runs its cells in order, so the first of its calls
  -- in flight is the one running: cancelling it interrupts the kernel; cancelling a call whose
  -- cell still waits only drops its answer (the notebook server has no way to unqueue a cell).
  local in_flight = {} -- session_id -> list of ctx, oldest first
  local function running(s, ctx, run)
    local q = in_flight[s.session_id] or {}
    in_flight[s.session_id] = q
    q[#q + 1] = ctx
    ctx:on_cancel(function()
      if q[1] == ctx then s:interrupt() end
    end)
    local ok, r = pcall(run, exec_opts(ctx))
    for i, c in ipairs(q) do if c == ctx then table.remove(q, i) break end end
    if not ok then error(r, 0) end
    return cell_result(s, r)
  end

  -- A notebook of the bound sandbox's output directory, by file name (the notebook server
  -- checks it again and opens it without following links).
  local function name_arg(p)
    local name, why = require("seer.cli.notebook").notebook_name(p)
    if not name then
      error(("notebook_path: %s (this server is bound to sandbox %s: notebooks are named by file name in its session's output directory, as start_* results give them)")
        :format(why, tostring(state.sandbox_id or "of this session")), 0)
    end
    return name
  end

  local function path_arg(p)
    local core = require "seer.core.host"
    local real = core.realpath(p)
    if not real then error(("notebook_path %q does not exist (paths are relative to %s)"):format(p, core.cwd()), 0) end
    if not real:match("%.ipynb$") then error(("notebook_path %q is not an .ipynb notebook"):format(p), 0) end
    return real
  end

  local session_id = { type = "string", description = "The session_id a start_* or attach_to_session call returned." }
  local ro = { readOnlyHint = true, destructiveHint = false, idempotentHint = true, openWorldHint = false }
  local rw = { readOnlyHint = false, destructiveHint = false, idempotentHint = false, openWorldHint = false }

  local tools = {
    {
      name = "start_new_session", title = "Start a new notebook session",
      description = state.mode == "sandbox"
        and "Start a new Lua kernel inside this session's sandbox, like the session you were given: same sandbox, same workspace, the same models preloaded, with an empty notebook in the same output directory. Returns session_id and the notebook's name."
        or ("Start a new Lua kernel with an empty notebook (saved as {date}_{experiment_name}.ipynb in the output directory). Returns session_id and notebook_path. " .. M.NOT_SANDBOXED),
      inputSchema = { type = "object", additionalProperties = false,
                      properties = { experiment_name = { type = "string", description = "Name for the notebook (default \"Notebook\")." } } },
      annotations = rw,
      run = function(ctx, a)
        local s
        if host_allowed() then
          s = execution.create_local_notebook_session(nil, { name = a.experiment_name, output_dir = opts.output_dir })
        else
          s = binding:start_session{ like = state.like or opts.session_id, name = a.experiment_name }
        end
        remember(s, true)
        return started(s, "started")
      end,
    },
    {
      name = "attach_to_session", title = "Attach to a running notebook session",
      description = state.mode == "sandbox"
        and "Attach to another running session of this sandbox by its session_id (sessions of other sandboxes and of the host are not reachable from here; jupyter_url is not needed)."
        or "Attach to a session that another process started (an experiment's notebook session), from its session_id and jupyter_url.",
      inputSchema = { type = "object", additionalProperties = false,
                      required = state.mode == "sandbox" and { "session_id" } or { "session_id", "jupyter_url" },
                      properties = { session_id = { type = "string", description = "The session's id." },
                                     jupyter_url = { type = "string", description = state.mode == "sandbox"
                                                     and "Not used: this server reaches only its sandbox's sessions."
                                                     or "The session's jupyter_url (http://HOST:PORT/notebooks/ID?token=T)." },
                                     notebook_dir = { type = "string", description = "Accepted for compatibility; the notebook server reports the notebook's path." } } },
      annotations = rw,
      run = function(ctx, a)
        local s
        if binding or not host_allowed() then
          s = binding:attach(a.session_id)
        else
          if type(a.jupyter_url) ~= "string" then error("attach_to_session needs the session's jupyter_url", 0) end
          s = execution.attach_notebook_session(a.jupyter_url, a.session_id)
          if s.sandbox_id then
            -- A sandboxed session binds this server to its sandbox, as --jupyter-url does at
            -- start: from here on start_* tools start kernels in that sandbox, never on this
            -- machine (an agent given a plain `seer mcp notebook` to attach to a sandboxed
            -- session would otherwise get an unsandboxed kernel, without its models, from
            -- start_new_session). A server that already reaches kernels outside that sandbox
            -- cannot be bound: it would reach both.
            local outside = {}
            for _, id in ipairs(order) do
              local o = sessions[id]
              if o and o.sandbox_id ~= s.sandbox_id then outside[#outside + 1] = id end
            end
            if #outside > 0 then
              error(("session %s is sandboxed (sandbox %s), and this server already has sessions outside that sandbox (%s); a server reaches one sandbox or this machine, not both: "
                .. "start another `seer mcp notebook` for it (the session's mcp_config, or --session-id and --jupyter-url)")
                :format(a.session_id, s.sandbox_id, table.concat(outside, ", ")), 0)
            end
            local cred = execution.scope_credential(s)
            bind(cred.endpoint, cred.key, cred.sandbox_id)
            s = binding:attach(a.session_id)
            state.like = a.session_id
            remember(s, false)
            local r = started(s, "attached")
            r.content[1].text = r.content[1].text .. ("\nThis server is now bound to sandbox %s: start_new_session and the other start_* tools start kernels inside it, like this session (its models preloaded), and only its sessions can be attached.")
              :format(s.sandbox_id or cred.sandbox_id)
            r.structuredContent.bound_sandbox = cred.sandbox_id
            return r
          end
        end
        remember(s, false)
        return started(s, "attached")
      end,
    },
    {
      name = "start_session_resume_notebook", title = "Start Session - Resume Notebook",
      description = state.mode == "sandbox"
        and "Start a new session in this sandbox by resuming a notebook of its output directory in place (name it by file name, e.g. 2025-01-31-10-00_probe.ipynb): the models are preloaded, every code cell is re-run and the file is updated with the new outputs."
        or ("Start a new session by resuming an existing notebook in place: every code cell is re-run to restore the kernel state and the file is updated with the new outputs. " .. M.NOT_SANDBOXED),
      inputSchema = { type = "object", additionalProperties = false, required = { "notebook_path" },
                      properties = { notebook_path = { type = "string", description = state.mode == "sandbox"
                                                       and "The notebook's file name in the session's output directory."
                                                       or "Path to the existing .ipynb notebook." } } },
      annotations = rw,
      run = function(ctx, a)
        local s, info
        if host_allowed() then
          s, info = execution.resume_notebook(path_arg(a.notebook_path))
        else
          s, info = binding:start_session{ like = state.like or opts.session_id, resume = name_arg(a.notebook_path) }
        end
        remember(s, true)
        return started(s, "resumed", { cells_run = info.cells_run or 0, cells_failed = info.cells_failed or 0 }, info)
      end,
    },
    {
      name = "start_session_continue_notebook", title = "Start Session - Continue Notebook",
      description = state.mode == "sandbox"
        and "Start a new session in this sandbox that continues a notebook of its output directory (name it by file name): its cells are copied into a new notebook there and re-run with the models preloaded; the original is unchanged."
        or ("Start a session that continues an existing notebook: its cells are copied into a new notebook (beside the original) and re-run; the original is unchanged. " .. M.NOT_SANDBOXED),
      inputSchema = { type = "object", additionalProperties = false, required = { "notebook_path" },
                      properties = { notebook_path = { type = "string", description = state.mode == "sandbox"
                                                       and "The notebook's file name in the session's output directory."
                                                       or "Path to the existing .ipynb notebook." },
                                     experiment_name = { type = "string", description = "Name for the new notebook (default: the original's)." } } },
      annotations = rw,
      run = function(ctx, a)
        local s, info
        if host_allowed() then
          s, info = execution.continue_notebook(path_arg(a.notebook_path), { name = a.experiment_name })
        else
          s, info = binding:start_session{ like = state.like or opts.session_id, ["continue"] = name_arg(a.notebook_path), name = a.experiment_name }
        end
        remember(s, true)
        return started(s, "continued", { cells_run = info.cells_run or 0, cells_failed = info.cells_failed or 0 }, info)
      end,
    },
    {
      name = "execute_code", title = "Execute code",
      description = "Append a code cell (Lua, seer's kernel) to the notebook, run it and return its outputs: printed text, results, errors with their traceback, and images. Cancelling the call interrupts the cell.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id", "code" },
                      properties = { session_id = session_id, code = { type = "string", maxLength = M.MAX_CELL_SOURCE, description = "Lua code to run (at most 1 MiB: data goes in a file the code reads)." } } },
      annotations = rw,
      run = function(ctx, a)
        local s = session(a.session_id)
        return running(s, ctx, function(o) return cell_request(s, "execute", { code = a.code, hidden = false }, o) end)
      end,
    },
    {
      name = "edit_cell", title = "Edit and re-run a cell",
      description = "Replace the source of a code cell, clear its outputs and run it again. cell_index counts code cells only (0, 1, 2, ... in order; markdown cells are not counted; negative numbers count from the end, -1 the last code cell): read_notebook's header shows it (\"## cell 3 (code cell 2: edit_cell cell_index=2, ...)\") and execute_code returns it. Default: the last code cell.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id", "code" },
                      properties = { session_id = session_id, code = { type = "string", maxLength = M.MAX_CELL_SOURCE, description = "The cell's new code (at most 1 MiB)." },
                                     cell_index = { type = "integer", description = "The code cell's index among code cells (0-based; negative from the end), as read_notebook's header shows it (\"code cell 2: edit_cell cell_index=2\"). Default: -1, the last code cell." } } },
      annotations = rw,
      run = function(ctx, a)
        local s = session(a.session_id)
        -- cell_number: the number read_notebook shows; without one, the last code cell
        local target = { cell_index = a.cell_index ~= nil and a.cell_index or -1 }
        target.code = a.code
        return running(s, ctx, function(o) return cell_request(s, "edit_cell", target, o) end)
      end,
    },
    {
      name = "add_markdown", title = "Add a markdown cell",
      description = "Append a markdown cell to the notebook (notes, findings). Returns its cell_number.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id", "content" },
                      properties = { session_id = session_id, content = { type = "string", maxLength = M.MAX_CELL_SOURCE, description = "Markdown text (at most 1 MiB)." } } },
      annotations = rw,
      run = function(ctx, a)
        local n = session(a.session_id):add_markdown(a.content)
        return { content = { { type = "text", text = json.encode{ cell_number = n } } }, structuredContent = { cell_number = n } }
      end,
    },
    {
      name = "read_notebook", title = "Read the notebook",
      description = "The notebook's cells as text: each under a header \"## cell N (...)\" with N its number among all cells (0-based, markdown included: start counts these), a code cell's header also naming its code-cell index, the cell_index edit_cell takes (\"code cell 2: edit_cell cell_index=2\"), then its source and outputs (images are mentioned, not sent). `limit` cells from `start`. A long output shows its head and tail and says how much is left out between them; page through it with output_offset (and start = that cell). A cell's error is always shown.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id" },
                      properties = { session_id = session_id,
                                     start = { type = "integer", minimum = 0, description = "First cell (its number, 0-based; default 0)." },
                                     limit = { type = "integer", minimum = 1, description = "How many cells (default all)." },
                                     output_offset = { type = "integer", minimum = 0, description = "Page through the output of cell `start` from this character on (the cut line gives it); limit is ignored." } } },
      annotations = ro,
      run = function(ctx, a)
        local s = session(a.session_id)
        local start = a.start or 0
        -- one answer holds about twice --max-output characters
        local budget = 2 * (opts.max_output or 20000)
        if a.output_offset ~= nil then
          local r = s:read_notebook(start, 1)
          local text, sc = M.render_output_page(r, start, a.output_offset, budget)
          return { content = { { type = "text", text = text } }, structuredContent = sc }
        end
        local r = s:read_notebook(a.start, a.limit)
        local text, shown = M.render_cells(r, start, budget)
        local sc = { notebook_path = r.notebook_path, total = r.total, start = start, count = shown }
        if shown < #r.cells then sc.next_start = start + shown end
        return { content = { { type = "text", text = text } }, structuredContent = sc }
      end,
    },
    {
      name = "restart_kernel", title = "Restart a session's kernel",
      description = "Give a session a new kernel: after its kernel died (execute_code answers KernelDied), or to start over with a clean state. The session's start-up code runs again (its preloaded models are loaded again); every variable from earlier cells is gone. The notebook keeps its cells and outputs: re-run the ones you need with edit_cell. A cell running now is stopped.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id" },
                      properties = { session_id = session_id } },
      annotations = { readOnlyHint = false, destructiveHint = true, idempotentHint = false, openWorldHint = false },
      run = function(ctx, a)
        local s = session(a.session_id)
        local info = s:restart()
        local r = { session_id = s.session_id, state = info.state, notebook_path = info.notebook_path or s.notebook_path,
                    status = "restarted" }
        return { content = { { type = "text", text = ("Session %s has a new kernel (state: %s); its start-up code ran again. Variables from earlier cells are gone; the notebook keeps its cells (read_notebook shows them, edit_cell re-runs one). Run code with execute_code(session_id, code).")
                   :format(s.session_id, tostring(info.state)) } }, structuredContent = r }
      end,
    },
    {
      name = "interrupt", title = "Interrupt the running cell",
      description = "Interrupt the cell that is running in a session (if any); the session stays usable.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id" },
                      properties = { session_id = session_id } },
      annotations = { readOnlyHint = false, destructiveHint = false, idempotentHint = true, openWorldHint = false },
      run = function(ctx, a)
        session(a.session_id):interrupt()
        return "Interrupt sent to session " .. a.session_id .. "."
      end,
    },
    {
      name = "shutdown_session", title = "Shut down a session",
      description = "Shut down a session's kernel (its state is lost; the notebook file stays). Only do this when told to.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id" },
                      properties = { session_id = session_id } },
      annotations = { readOnlyHint = false, destructiveHint = true, idempotentHint = true, openWorldHint = false },
      run = function(ctx, a)
        local s = session(a.session_id)
        s:terminate()
        sessions[a.session_id], owned[a.session_id] = nil, nil
        return ("Session %s shut down; the notebook stays at %s"):format(a.session_id, tostring(s.notebook_path))
      end,
    },
  }
  for _, t in ipairs(tools) do
    -- a refusal's advice in this server's tool names (restart_kernel, shutdown_session, ...)
    local run = t.run
    t.run = function(ctx, a)
      local ok, r = pcall(run, ctx, a)
      if not ok then
        if tostring(r):match("interrupted$") then
          -- Ctrl-C or SIGTERM (seer mcp notebook) landed in this call, whose error would only
          -- answer it: the server stops as it does at the end of stdin, its sessions shut down
          srv.interrupted = true
          srv:stop()
          error(r, 0)
        end
        error(agent_words(r, type(a) == "table" and type(a.session_id) == "string" and a.session_id or nil), 0)
      end
      return r
    end
    srv:add_tool(t)
  end

  -- Sessions this process started end with it; attached ones belong to their experiment.
  srv:on_exit(function()
    for _, id in ipairs(order) do
      if sessions[id] and owned[id] then pcall(sessions[id].terminate, sessions[id]) end
    end
  end)

  return state
end

M.INSTRUCTIONS = [[
Tools for a Lua notebook (seer's kernel) whose cells run one after another in one kernel.
Start with start_new_session (or use the session_id you were given), then execute_code to run
Lua and see its printed output, results, errors and images; edit_cell fixes a cell in place;
add_markdown records findings; read_notebook shows what is there. read_notebook numbers all
cells ("## cell 3", its start and add_markdown's cell_number count markdown cells too); edit_cell's
cell_index counts code cells only, and each code cell's header names it ("## cell 3 (code cell 2:
edit_cell cell_index=2, ...)"), as does execute_code's result. "[run 3]" in an error is the
kernel's run 3, its execution count, not a cell number. Variables persist between cells. Long outputs are cut
(the notebook keeps everything; read_notebook pages through a cell's output with
output_offset). Cancelling execute_code, or calling interrupt, stops a running cell. If the
kernel dies (KernelDied), restart_kernel gives the session a new one.]]

return M
