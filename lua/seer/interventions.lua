--- seer.interventions: built-in hook interventions that run in C inside the forward pass (no
--- Lua call per token). Attach them with model:run_with_hooks, model:with_hooks or
--- model:add_hook (docs/hooks.md).
---
--- ```lua
--- local I = require "seer.interventions"
--- model:with_hooks({ { "blocks.3.hook_resid_post", I.add(vec, { strength = 4, from = 5 }) } }, function()
---   print(model:generate("Once upon a time", { max_new_tokens = 30 }).text)
--- end)
--- ```
---
--- Every constructor takes the position options: `positions` (a list), `from` (first position),
--- `to` (exclusive end), `only_prompt` (prompt positions only, never generated tokens).
--- Positions are absolute and 0-based (0 = the first token); negative ones count back from the
--- end of the prompt (-1 = its last token).
local H = require "seer.core.hooks"
local T = require "seer.tensor"

local M = {}

---@class seer.Intervention
---@field kind fun(self: seer.Intervention): string "add", "ablate", "scale", "replace", "capture" or "function"

---@class seer.Capture: seer.Intervention
---@field tensor fun(self: seer.Capture): seer.Tensor the captured rows, concatenated along positions ([pos, ...]; [head, pos, k] for one pattern call)
---@field positions fun(self: seer.Capture): integer[] absolute positions of the captured rows
---@field count fun(self: seer.Capture): integer the number of forward calls captured (chunks), without copying them
---@field read fun(self: seer.Capture): seer.Tensor, integer[] tensor() and positions() at once (each of the three copies the captured data: read() once for both)
---@field chunks fun(self: seer.Capture): {tensor: seer.Tensor, positions: integer[], name: string, batch: integer, head_major: boolean}[] one entry per forward call, each a new copy of what was captured
---@field clear fun(self: seer.Capture)

---@alias seer.PositionOpts {positions?: integer[], from?: integer, to?: integer, only_prompt?: boolean}

local function fail(msg) error(msg, 3) end
-- from a checker called by a constructor: the error names the line that called the constructor
local function fail_up(msg) error(msg, 4) end

-- The C constructor f(...) called from a public function: its errors (an empty or zero vector, a
-- non-finite element) name the line that called the public function, not this file.
local guard = require("seer.checks").guard
local function build(f, ...) return guard(f, 1)(...) end

local function check_opts(where, opts, extra)
  if opts == nil then return {} end
  if type(opts) ~= "table" then fail_up(("%s: options must be a table, got %s"):format(where, type(opts))) end
  local valid = { positions = "table", from = "number", to = "number", only_prompt = "boolean" }
  for k, v in pairs(extra or {}) do valid[k] = v end
  for k, v in pairs(opts) do
    if not valid[k] then
      local names = {}
      for n in pairs(valid) do names[#names + 1] = n end
      table.sort(names)
      fail_up(("%s: unknown option '%s'; valid options: %s"):format(where, tostring(k), table.concat(names, ", ")))
    end
    if type(v) ~= valid[k] then fail_up(("%s: option '%s' must be a %s, got %s"):format(where, k, valid[k], type(v))) end
  end
  for _, k in ipairs({ "from", "to" }) do
    if opts[k] and (opts[k] ~= math.floor(opts[k]) or not (math.abs(opts[k]) <= 2^53)) then
      fail_up(("%s: %s must be an integer position, got %s"):format(where, k, tostring(opts[k])))
    end
  end
  -- a range that can select no position is a mistake, not a no-op intervention: from/to of the
  -- same sign compare directly (negative ones count from the prompt's end); to = 0 ends before
  -- the first token
  local from, to = opts.from, opts.to
  if to == 0 then
    fail_up(("%s: to = 0 selects no position (to is the exclusive end; 0 is the first token)"):format(where))
  end
  if from and to and (from >= 0) == (to >= 0) and to <= from then
    fail_up(("%s: to (%s) must be past from (%s): the range selects no position"):format(where, tostring(to), tostring(from)))
  end
  if opts.positions then
    for i, p in pairs(opts.positions) do
      if type(i) ~= "number" or i < 1 or i > #opts.positions or i ~= math.floor(i) then
        fail_up(("%s: positions must be a list (it has the key %s)"):format(where, tostring(i)))
      end
      if type(p) ~= "number" or p ~= math.floor(p) or not (math.abs(p) <= 2^53) then
        fail_up(("%s: positions[%d] must be an integer position, got %s"):format(where, i, tostring(p)))
      end
    end
  end
  return opts
end

-- heads: a list of 0-based head indices (checked here so the message names the caller; the C
-- constructor checks again for callers of seer.core.hooks)
local function check_heads(where, heads)
  for i, h in pairs(heads) do
    if type(i) ~= "number" or i < 1 or i > #heads or i ~= math.floor(i) then
      fail_up(("%s: heads must be a list of 0-based head indices (it has the key %s)"):format(where, tostring(i)))
    end
    if type(h) ~= "number" or h ~= math.floor(h) or not (h >= 0 and h <= 65535) then
      fail_up(("%s: heads[%d] must be a 0-based head index, got %s"):format(where, i, tostring(h)))
    end
  end
  if #heads > 256 then fail_up(("%s: at most 256 heads (got %d)"):format(where, #heads)) end
end

local function with_filter(iv, opts)
  if opts.positions or opts.from or opts.to or opts.only_prompt then
    iv:filter({ positions = opts.positions, from = opts.from, to = opts.to, only_prompt = opts.only_prompt })
  end
  return iv
end

local function vector(where, v)
  if type(v) == "table" and not T.is_tensor(v) then
    local ok, t = pcall(T.from, v)
    if not ok then fail_up(where .. ": " .. tostring(t)) end
    v = t
  end
  if not T.is_tensor(v) then fail_up(("%s: expected a tensor or a list of numbers, got %s"):format(where, type(v))) end
  if v:dim() ~= 1 then fail_up(("%s: expected a 1-d vector, got a %d-d tensor"):format(where, v:dim())) end
  return v
end

---Adds `strength * vec` to each selected position (vec has the row's size: d_model for
---residual points, heads * d_head for q/k/v/z).
---@param vec seer.Tensor|number[]
---@param opts? {strength?: number, positions?: integer[], from?: integer, to?: integer, only_prompt?: boolean}
---@return seer.Intervention
function M.add(vec, opts)
  opts = check_opts("add", opts, { strength = "number" })
  local v = vector("add", vec)
  return with_filter(build(H.add, v, opts.strength or 1.0), opts)
end

---Projects a direction out of each selected position: x - (x . d) d with d = dir / |dir|.
---@param dir seer.Tensor|number[]
---@param opts? seer.PositionOpts
---@return seer.Intervention
function M.ablate(dir, opts)
  opts = check_opts("ablate", opts)
  return with_filter(build(H.ablate, vector("ablate", dir)), opts)
end

---Multiplies each selected position by `factor`; with `heads` (0-based) only those heads
---(q/k/v/z, attention scores and patterns).
---@param factor number
---@param opts? {heads?: integer[], positions?: integer[], from?: integer, to?: integer, only_prompt?: boolean}
---@return seer.Intervention
function M.scale(factor, opts)
  if type(factor) ~= "number" then fail("scale: the factor must be a number, got " .. type(factor)) end
  opts = check_opts("scale", opts, { heads = "table" })
  if opts.heads then check_heads("scale", opts.heads) end
  return with_filter(build(H.scale, factor, opts.heads), opts)
end

---Zeroes the listed heads (0-based) at a per-head point (attn.hook_z for head ablation).
---@param heads integer[]
---@param opts? seer.PositionOpts
---@return seer.Intervention
function M.zero_heads(heads, opts)
  if type(heads) ~= "table" then fail("zero_heads: expected a list of 0-based head indices, got " .. type(heads)) end
  check_heads("zero_heads", heads)
  opts = check_opts("zero_heads", opts)
  return with_filter(build(H.scale, 0, heads), opts)
end

---Replaces the activation at absolute position p by saved[p] (activation patching). saved is
---[pos, ...] as a cache tensor of the same point (or a single row [d] used at every selected
---position; [head, pos, k] for patterns).
---@param saved seer.Tensor
---@param opts? seer.PositionOpts
---@return seer.Intervention
function M.replace(saved, opts)
  if not T.is_tensor(saved) then fail("replace: expected the saved activation as a tensor, got " .. type(saved)) end
  opts = check_opts("replace", opts)
  return with_filter(build(H.replace, saved), opts)
end

---Records the activation at each selected position; read it back with cap:tensor().
---@param opts? seer.PositionOpts
---@return seer.Capture
function M.capture(opts)
  opts = check_opts("capture", opts)
  return with_filter(H.capture(), opts)
end

---Wraps a Lua function `fn(act, hook)` as an intervention (model hooks accept plain functions
---too). act is the activation tensor, writable in place; hook = {name, layer, pos (absolute
---position of the first row), batch (1-based), prompt_len}. Return a replacement or nil.
---@param fn fun(act: seer.Tensor, hook: {name: string, layer: integer, pos: integer, batch: integer, prompt_len: integer}): seer.Tensor?
---@return seer.Intervention
function M.fn(fn)
  if type(fn) ~= "function" then fail("fn: expected a function, got " .. type(fn)) end
  return H.fn(fn)
end

---True when v is an intervention.
function M.is_intervention(v)
  return type(v) == "userdata" and pcall(function() return v:kind() end) and true or false
end

-- Capture read-back, added to the intervention methods.
local methods = getmetatable(H.capture()).__index

-- cap:chunks() copies the captured data into new tensors at each call, so tensor() and
-- positions() are both made from one list by read().
local function chunks_tensor(chunks, level)
  if #chunks == 0 then error("capture: nothing was captured (the hook point did not run, or no position was selected)", level + 1) end
  if chunks[1].head_major then
    if #chunks > 1 then
      error(("capture: %d forward calls of %s were captured and their [head, pos, k] shapes differ; read them with cap:chunks()")
        :format(#chunks, chunks[1].name), level + 1)
    end
    return chunks[1].tensor
  end
  if #chunks == 1 then return chunks[1].tensor end
  local list = {}
  for i, c in ipairs(chunks) do list[i] = c.tensor end
  return T.cat(list, 1)
end

local function chunks_positions(chunks)
  local out = {}
  for _, c in ipairs(chunks) do
    for _, p in ipairs(c.positions) do out[#out + 1] = p end
  end
  return out
end

function methods:tensor() return chunks_tensor(self:chunks(), 2) end

function methods:positions() return chunks_positions(self:chunks()) end

function methods:read()
  local chunks = self:chunks()
  return chunks_tensor(chunks, 2), chunks_positions(chunks)
end

return M
