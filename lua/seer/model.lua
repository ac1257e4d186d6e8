--- seer.model: Hugging Face causal language models on the CPU. `load` takes a model directory
--- (config.json + safetensors) or a hub id already in the Hugging Face cache, maps the weights
--- without copying them, and attaches the directory's tokenizer when it has one.
---
--- ```lua
--- local model = seer.model.load("tests/fixtures/models/stories260K")
--- local out = model:generate("Once upon a time", { max_new_tokens = 40 })
--- print(out.text)
--- local logits = model:forward(model.tokenizer:encode("Once upon a time")) -- [5, 512] tensor
--- ```
local core = require "seer.core.model"

local M = {}

---@class seer.Model
---@field config table config.json's fields with transformers' names (num_hidden_layers, hidden_size, ...), plus dtype, num_parameters, weight_bytes, path
---@field tokenizer? table the tokenizer found beside the weights (nil when the directory has none)
---@field path string the model directory
---@field id string what was passed to load
---@field device string "cpu"
local Model = {}
Model.__index = Model

local function fail(msg, level) error(msg, (level or 1) + 1) end

local function check_opts(where, opts, valid)
  if opts == nil then return {} end
  if type(opts) ~= "table" then fail(("%s: options must be a table, got %s"):format(where, type(opts)), 3) end
  for k in pairs(opts) do
    if valid[k] == nil then
      local names = {}
      for n in pairs(valid) do names[#names + 1] = n end
      table.sort(names)
      fail(("%s: unknown option '%s'; valid options: %s"):format(where, tostring(k), table.concat(names, ", ")), 3)
    end
  end
  for k, v in pairs(opts) do
    local want = valid[k]
    if want ~= "any" and type(v) ~= want then
      fail(("%s: option '%s' must be a %s, got %s"):format(where, k, want, type(v)), 3)
    end
  end
  return opts
end

local function is_dir(p)
  local ok, core_host = pcall(require, "seer.core.host")
  if not ok then return false end
  return core_host.realpath(p .. "/.") ~= nil
end

local function file_exists(p)
  local f = io.open(p, "rb")
  if f then f:close() return true end
  return false
end

-- A hub id ("org/name") resolved in the Hugging Face cache layout: $HF_HOME/hub (default
-- ~/.cache/huggingface/hub)/models--org--name/snapshots/<refs/main>.
local function resolve_cached(id, revision)
  local home = os.getenv("HF_HOME") or ((os.getenv("HOME") or "") .. "/.cache/huggingface")
  local hub = os.getenv("HF_HUB_CACHE") or (home .. "/hub")
  local repo = hub .. "/models--" .. id:gsub("/", "--")
  local rev = revision or "main"
  local f = io.open(repo .. "/refs/" .. rev, "rb")
  local commit = rev
  if f then
    commit = f:read("*l")
    f:close()
  end
  local snap = repo .. "/snapshots/" .. commit
  if file_exists(snap .. "/config.json") then return snap end
  return nil, repo
end

---Loads a model.
---@param path_or_id string a model directory, or a hub id ("org/name") already in the Hugging Face cache
---@param opts? {device?: string, dtype?: string, threads?: integer, revision?: string, tokenizer?: boolean}
---@return seer.Model
function M.load(path_or_id, opts)
  if type(path_or_id) ~= "string" then fail("seer.model.load: expected a path or hub id, got " .. type(path_or_id), 2) end
  opts = check_opts("seer.model.load", opts,
    { device = "string", dtype = "string", threads = "number", revision = "string", tokenizer = "boolean" })
  local device = opts.device or "cpu"
  if device:match("^cuda") then
    io.stderr:write("seer: the CUDA backend is not part of this build; running on the CPU\n")
    device = "cpu"
  elseif device ~= "cpu" then
    fail(("seer.model.load: unknown device '%s'; devices are \"cpu\", \"cuda\", \"cuda:N\""):format(device), 2)
  end
  local dir = path_or_id
  if not is_dir(dir) then
    local snap, repo = nil, nil
    if path_or_id:match("^[%w%-_.]+/[%w%-_.]+$") then snap, repo = resolve_cached(path_or_id, opts.revision) end
    if not snap then
      fail(("seer.model.load: %s is not a model directory%s; download it first (or pass a directory with config.json)")
        :format(path_or_id, repo and (" and not in the Hugging Face cache (" .. repo .. ")") or ""), 2)
    end
    dir = snap
  end
  dir = require("seer.core.host").realpath(dir) or dir
  local ok, c = pcall(core.load, dir, opts.threads or 0)
  if not ok then fail(c, 2) end
  local m = setmetatable({ _c = c, path = dir, id = path_or_id, device = device }, Model)
  if m.id:find("/%.%.?/") then m.id = dir end -- show a clean path rather than a/b/../c
  m.config = c:config()
  if opts.dtype and opts.dtype ~= m.config.dtype then
    fail(("seer.model.load: dtype '%s' requested but the weights are %s; converting at load time is not supported yet, load without dtype")
      :format(opts.dtype, m.config.dtype), 2)
  end
  if opts.tokenizer ~= false and file_exists(dir .. "/tokenizer.json") then
    local tok_ok, T = pcall(require, "seer.tokenizer")
    if tok_ok then m.tokenizer = T.load(dir) end
  end
  return m
end

---Names of the supported architectures (config.json model_type).
---@return string
function M.supported() return core.supported() end

local function to_ids(self, input, where)
  if type(input) == "string" then
    if not self.tokenizer then fail(where .. ": a text prompt needs a tokenizer, and this model directory has none; pass token ids", 3) end
    return self.tokenizer:encode(input, { add_special_tokens = true })
  end
  if type(input) == "table" then return input end
  if type(input) == "userdata" and type(input.totable) == "function" then return input:totable() end -- a tensor of ids
  fail(where .. ": expected token ids (a table) or a string, got " .. type(input), 3)
end

---Logits of every position for one sequence: a [n, vocab] f32 tensor. A list of sequences
---runs each one and returns a [batch, longest, vocab] tensor, left-padded (pad rows are 0),
---plus the attention mask as a Lua table of 0/1 rows. With `{hidden_states = true}` (one
---sequence) also returns the residual stream: hidden[1] the embeddings, hidden[i + 1] the
---residual after layer i - 1 (Lua indices; layer numbers are 0-based names), each [n, d_model].
---@param ids integer[]|integer[][]|string
---@param opts? {hidden_states?: boolean}
---@return any logits, table? mask_or_hidden
function Model:forward(ids, opts)
  opts = check_opts("forward", opts, { hidden_states = "boolean" })
  if opts.hidden_states then
    if type(ids) == "table" and type(ids[1]) == "table" then fail("forward: hidden_states works on one sequence at a time", 2) end
    return self._c:forward(to_ids(self, ids, "forward"), true)
  end
  if type(ids) == "table" and type(ids[1]) == "table" then
    local T = require "seer.tensor"
    local longest = 0
    for _, s in ipairs(ids) do longest = math.max(longest, #s) end
    local out = T.zeros(#ids, longest, self.config.vocab_size)
    local mask = {}
    for b, s in ipairs(ids) do
      local row = {}
      local pad = longest - #s
      for i = 1, longest do row[i] = i > pad and 1 or 0 end
      mask[b] = row
      if #s > 0 then
        local l = self._c:forward(s)
        out:select(1, b):narrow(1, pad + 1, #s):copy_(l)
      end
    end
    return out, mask
  end
  return self._c:forward(to_ids(self, ids, "forward"))
end

local gen_valid = {
  max_new_tokens = "number", min_new_tokens = "number", temperature = "number", top_k = "number", top_p = "number", min_p = "number",
  repetition_penalty = "number", seed = "number", stop = "any", stream = "function",
}

local function prepare(self, input, opts, where)
  opts = check_opts(where, opts, gen_valid)
  local ids = to_ids(self, input, where)
  if #ids == 0 then fail(where .. ": the prompt has no tokens", 3) end
  local stop_ids, stop_strings = {}, {}
  for _, id in ipairs(self.config.eos_token_ids) do stop_ids[#stop_ids + 1] = id end
  local stop = opts.stop
  if type(stop) == "string" or type(stop) == "number" then stop = { stop } end
  if stop ~= nil and type(stop) ~= "table" then fail(where .. ": stop must be a string, a token id or a list of them", 3) end
  for _, s in ipairs(stop or {}) do
    if type(s) == "number" then stop_ids[#stop_ids + 1] = s
    elseif type(s) == "string" then stop_strings[#stop_strings + 1] = s
    else fail(where .. ": stop entries must be strings or token ids", 3) end
  end
  if #stop_strings > 0 and not self.tokenizer then fail(where .. ": stop strings need a tokenizer", 3) end
  local n = opts.max_new_tokens or 20
  if n < 0 or n ~= math.floor(n) then fail(where .. ": max_new_tokens must be a non-negative integer", 3) end
  local t = opts.temperature or 0
  if t < 0 then fail(where .. ": temperature must be >= 0 (0 = greedy)", 3) end
  local g = self._c:generator(ids, {
    max_new_tokens = n, min_new_tokens = opts.min_new_tokens, temperature = t, top_k = opts.top_k, top_p = opts.top_p, min_p = opts.min_p,
    repetition_penalty = opts.repetition_penalty, seed = opts.seed, stop_ids = stop_ids,
  })
  return g, ids, stop_strings, opts
end

-- The token loop shared by generate_iter and generate: ids from the C generator, text decoded
-- incrementally (held back while it ends inside a multi-byte character), stop strings.
local function iterate(self, g, stop_strings)
  local tok = self.tokenizer
  local new, text = {}, ""
  local finished = false
  return function()
    if finished then return nil end
    local id = g:next()
    if not id then finished = true return nil end
    new[#new + 1] = id
    local piece
    if tok then
      local full = tok:decode(new, { skip_special_tokens = true })
      if full:sub(-3) == "\239\191\189" then -- U+FFFD: an incomplete UTF-8 sequence so far
        piece = ""
      else
        piece = full:sub(#text + 1)
        text = full
      end
      for _, s in ipairs(stop_strings) do
        if text:find(s, 1, true) then finished = true end
      end
    end
    return id, piece
  end
end

---Generates token by token: `for id, piece in model:generate_iter(prompt, opts) do ... end`.
---piece is the newly decoded text (empty while a multi-byte character is incomplete; nil
---without a tokenizer). Options as in generate.
---@return fun(): integer?, string?
function Model:generate_iter(input, opts)
  local g, _, stop_strings = prepare(self, input, opts, "generate_iter")
  return iterate(self, g, stop_strings)
end

---Generates a continuation. input: token ids or text (encoded with the model's tokenizer,
---special tokens added). Stops at max_new_tokens (default 20), at an end-of-sequence token of
---generation_config.json (not before min_new_tokens), or at a `stop` string/id. temperature 0
---(default) is greedy; a seed
---gives the same tokens whatever the thread count. `stream = function(piece, id)` is called as
---tokens arrive.
---@param input integer[]|string
---@param opts? {max_new_tokens?: integer, min_new_tokens?: integer, temperature?: number, top_k?: integer, top_p?: number, min_p?: number, repetition_penalty?: number, seed?: integer, stop?: string|integer|(string|integer)[], stream?: fun(piece: string?, id: integer)}
---@return {ids: integer[], text: string?, prompt_ids: integer[]}
function Model:generate(input, opts)
  local g, prompt_ids, stop_strings, o = prepare(self, input, opts, "generate")
  local ids = {}
  for id, piece in iterate(self, g, stop_strings) do
    ids[#ids + 1] = id
    if o.stream then o.stream(piece, id) end
  end
  local text
  if self.tokenizer then
    text = self.tokenizer:decode(ids, { skip_special_tokens = true })
    for _, s in ipairs(stop_strings) do
      local at = text:find(s, 1, true)
      if at then text = text:sub(1, at - 1) end
    end
  end
  return { ids = ids, text = text, prompt_ids = prompt_ids }
end

---Loads a LoRA adapter in PEFT format (a directory with adapter_config.json and
---adapter_model.safetensors) onto this model. `merge = true` folds it into the weights (the
---adapted weights are copied into memory; set_adapter cannot switch it off); otherwise it is
---kept separate and switchable with set_adapter, and starts enabled.
---@param path string adapter directory
---@param opts? {merge?: boolean}
function Model:load_adapter(path, opts)
  if type(path) ~= "string" then fail("load_adapter: expected an adapter directory, got " .. type(path), 2) end
  opts = check_opts("load_adapter", opts, { merge = "boolean" })
  local ok, e = pcall(self._c.load_adapter, self._c, path, opts.merge == true)
  if not ok then fail(e, 2) end
  self.adapter = { path = path, merged = opts.merge == true, enabled = true }
end

---Switches a separately kept (unmerged) LoRA adapter on or off.
---@param enabled boolean
function Model:set_adapter(enabled)
  if type(enabled) ~= "boolean" then fail("set_adapter: expected true or false, got " .. type(enabled), 2) end
  local ok, e = pcall(self._c.set_adapter, self._c, enabled)
  if not ok then fail(e, 2) end
  self.adapter.enabled = enabled
end

function Model:__tostring()
  local c = self.config
  local params = tostring(math.floor(c.num_parameters)):reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "")
  return ("Model(%s: %d layers, d_model %d, %d heads (%d kv, head_dim %d), vocab %d, %s, %s, %s params) %s")
    :format(c.model_type, c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
      c.head_dim, c.vocab_size, c.dtype, self.device, params, self.id)
end

return M
