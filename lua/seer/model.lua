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

---The most stop token ids `generate` takes beside the model's end-of-sequence ids (the engine
---holds those and 32 more: engine/model/lua_model.c).
M.MAX_STOP_IDS = 32

---@class seer.Model
---@field config table config.json's fields with transformers' names (num_hidden_layers, hidden_size, ...), plus dtype, num_parameters, weight_bytes, decode_bytes and decode_parameters (what one decode step reads of the weights: every tensor the model uses once, one row of an embedding table that is not also the LM head; what a decode read bound divides by), weights ("memory" or "mapped": where the weights live), amx_packed_matrices (how many bf16 matrices were put into the AMX tile layout at load: in memory, on a CPU with AMX; 0 otherwise; docs/model.md), kv_cache_dtype ("f32", or "bf16" on a GPU and with precision = "fast" where it applies), gemm_min_tokens (a CPU model: from this many tokens a prompt's prefill runs its linear layers as GEMMs; shorter prompts run the per-token kernel and share one pass over the weights in a batch; math.huge where no count does), path
---@field tokenizer? table the tokenizer found beside the weights (nil when the directory has none)
---@field path string the model directory
---@field id string what was passed to load
---@field device string "cpu" or "cuda:N": where the forward pass runs (a "cuda" request falls back to "cpu" when there is no GPU)
---@field precision "exact"|"fast" how bf16 weights meet activations (seer.model.load's precision)
local Model = {}
Model.__index = Model

local function fail(msg, level) error(msg, (level or 1) + 1) end

-- Errors name the line that called the public method: `deeper` counts the frames between
-- check_opts's caller and that method (0 when the method calls it itself).
local function check_opts(where, opts, valid, deeper)
  local level = 3 + (deeper or 0)
  if opts == nil then return {} end
  if type(opts) ~= "table" then fail(("%s: options must be a table, got %s"):format(where, type(opts)), level) end
  if valid.fwd_hooks and opts[1] ~= nil and opts.fwd_hooks == nil then
    fail(("%s: the hooks go in fwd_hooks: %s(input, { fwd_hooks = { { name, hook }, ... } })"):format(where, where), level)
  end
  local checked = require("seer.checks").options(where, opts, valid, level) -- not a tail call: the level counts this frame
  return checked
end

local function is_dir(p)
  local ok, core_host = pcall(require, "seer.core.host")
  if not ok then return false end
  return core_host.realpath(p .. "/.") ~= nil
end

-- From stat, nothing opened: a FIFO planted in a model folder or the cache is not waited on
-- (io.open of one blocked until a writer came). What is not a regular file is refused where
-- the file is read (the loader, the tokenizer), naming it.
local function file_exists(p)
  local k = require("seer.core.tokenizer").kind(p)
  return k ~= nil and k ~= "dir"
end

-- A hub id ("org/name") resolved in the Hugging Face cache layout: $HF_HOME/hub (default
-- ~/.cache/huggingface/hub)/models--org--name/snapshots/<refs/main>.
local function resolve_cached(id, revision)
  local home = os.getenv("HF_HOME") or ((os.getenv("HOME") or "") .. "/.cache/huggingface")
  local hub = os.getenv("HF_HUB_CACHE") or (home .. "/hub")
  local repo = hub .. "/models--" .. id:gsub("/", "--")
  -- the hub's own offline lookup: the ref read through descriptors (a FIFO planted as
  -- refs/main hung the load, and the ref's text was used as a path: `../../../elsewhere`
  -- loaded another folder), no link followed below the cache; a hostile cache raises
  local ok, snap = pcall(require("seer.hub").cached, id, { revision = revision })
  if not ok then fail(("seer.model.load: %s"):format(tostring(snap)), 3) end
  if snap and file_exists(snap .. "/config.json") then return snap end
  return nil, repo
end

-- precision = "fast" where it changes nothing says so on stderr, once per reason per process: a
-- researcher who asked for speed should not believe they have it.
local fast_noted = {}
local function fast_note(m)
  local why
  if m.device ~= "cpu" then
    why = ("the model runs on %s, whose kernels have no fast precision"):format(m.device)
  elseif m.config.dtype ~= "bf16" then
    why = ("its weights are %s (fast rounds activations to meet bf16 weights)"):format(m.config.dtype)
  else
    local kind, cpu_why = core.fast_kind()
    if not kind then why = cpu_why end
  end
  if why and not fast_noted[why] then
    fast_noted[why] = true
    io.stderr:write(('seer: precision = "fast" changes nothing here: %s; the model computes what "exact" does\n'):format(why))
  end
end

---Loads a model.
---@param path_or_id string a model directory, or a hub id ("org/name") already in the Hugging Face cache
---With `hidden = true` the model's id and directory are kept from code running beside it:
---model.id and tostring(model) say "<hidden>", model.path and config.path are absent, the
---weights are read into memory (no file mapping or descriptor names the directory), the
---tokenizer's path and name fields are scrubbed, and errors say "<hidden>" instead of the path.
---`precision` is "exact" (the default: bf16 weights meet f32 activations without rounding them,
---within the 1e-4 parity bar) or "fast" (bf16 weights meet activations rounded to bf16 as in
---torch's bf16 matmul: on AMX, or AVX512_BF16 on AMD CPUs, in every step, batches included, a
---sequence getting the same bits alone or batched; elsewhere the same as "exact"; docs/model.md
---has the measured error and speed).
---`weights` says where a CPU model's weights live: "memory" (read in, on transparent huge pages:
---decode streams every weight each step and reads them faster so) or "mapped" (mapped from the
---files: nothing is read at load, and processes loading the same files share them). Left out,
---they are read in when the model runs on the CPU and its files take at most half the available
---memory, else mapped (one line on stderr says so); the environment variable SEER_WEIGHTS
---("memory" or "mapped") changes that default. `model.config.weights` says which happened.
---@param opts? {device?: string, dtype?: string, threads?: integer, revision?: string, tokenizer?: boolean, hidden?: boolean, precision?: "exact"|"fast", weights?: "memory"|"mapped"}
---@return seer.Model
function M.load(path_or_id, opts)
  if type(path_or_id) ~= "string" then fail("seer.model.load: expected a path or hub id, got " .. type(path_or_id), 2) end
  opts = check_opts("seer.model.load", opts,
    { device = "string", dtype = "string", threads = "number", revision = "string", tokenizer = "boolean", hidden = "boolean",
      precision = "string", weights = "string" })
  if opts.precision ~= nil and opts.precision ~= "exact" and opts.precision ~= "fast" then
    fail(("seer.model.load: precision '%s' is not known; use \"exact\" (the default) or \"fast\""):format(opts.precision), 2)
  end
  if opts.weights ~= nil and opts.weights ~= "memory" and opts.weights ~= "mapped" then
    fail(("seer.model.load: weights '%s' is not known; use \"memory\" (read in) or \"mapped\" (mapped from the files), or leave it out")
      :format(opts.weights), 2)
  end
  local env_weights = os.getenv("SEER_WEIGHTS")
  if opts.weights == nil and env_weights and env_weights ~= "" then
    if env_weights ~= "memory" and env_weights ~= "mapped" then
      fail(("seer.model.load: SEER_WEIGHTS='%s' is not known; set it to \"memory\" or \"mapped\", or unset it"):format(env_weights), 2)
    end
    opts = setmetatable({ weights = env_weights }, { __index = opts })
  end
  if opts.hidden then
    local ok, m = pcall(M._load, path_or_id, opts)
    if ok then return m end
    local msg = tostring(m)
    local function scrub(s, what)
      if what and #what > 0 then s = s:gsub(what:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"), "<hidden>") end
      return s
    end
    msg = scrub(scrub(msg, path_or_id), path_or_id:gsub("/", "--"))
    fail(msg, 2)
  end
  return M._load(path_or_id, opts)
end

-- Hidden models: every string field of a tokenizer (its path, tokenizer_config.json's
-- name_or_path...) that names the model becomes "<hidden>".
local function scrub_tokenizer(tok, needles)
  local seen = {}
  local function walk(t)
    if seen[t] then return end
    seen[t] = true
    for k, v in pairs(t) do
      if type(v) == "string" then
        for _, n in ipairs(needles) do
          if #n > 0 and v:find(n, 1, true) then t[k] = "<hidden>" break end
        end
      elseif type(v) == "table" then
        walk(v)
      end
    end
  end
  walk(tok)
  tok.path = "<hidden>"
  if type(tok.config) == "table" then
    tok.config.name_or_path, tok.config._name_or_path, tok.config.tokenizer_file = nil, nil, nil
  end
end

function M._load(path_or_id, opts)
  local device = opts.device or "cpu"
  if device ~= "cpu" and device ~= "cuda" and not device:match("^cuda:%d+$") then
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
  local ok, c = pcall(core.load, dir, opts.threads or 0, opts.hidden == true, device, opts.precision == "fast", opts.weights)
  if not ok then fail(c, 2) end
  -- Without a driver or GPU the model stays on the CPU (the C side said why, once).
  device = c:device()
  local m = setmetatable({ _c = c, path = dir, id = path_or_id, device = device, precision = opts.precision or "exact" },
    Model)
  if m.id:find("/%.%.?/") then m.id = dir end -- show a clean path rather than a/b/../c
  m.config = c:config()
  if opts.dtype and opts.dtype ~= m.config.dtype then
    fail(("seer.model.load: dtype '%s' requested but the weights are %s; converting at load time is not supported yet, load without dtype")
      :format(opts.dtype, m.config.dtype), 2)
  end
  if opts.precision == "fast" then fast_note(m) end
  if opts.tokenizer ~= false and file_exists(dir .. "/tokenizer.json") then
    local tok_ok, T = pcall(require, "seer.tokenizer")
    if tok_ok then m.tokenizer = T.load(dir) end
  end
  if opts.hidden then
    m.id, m.path, m.config.path, m.hidden = "<hidden>", nil, nil, true
    if m.tokenizer then
      scrub_tokenizer(m.tokenizer, { dir, path_or_id, (path_or_id:gsub("/", "--")) })
    end
  end
  return m
end

---Names of the supported architectures (config.json model_type).
---@return string
function M.supported() return core.supported() end

---@class seer.ConfigField
---@field kind "used"|"inert"|"refused" used by seer; cannot change an eval-mode forward pass; refused unless `ok`
---@field ok? string the accepted values as JSON text, "|"-separated (refused fields)
---@field bad? string a value that is refused (refused fields)
---@field why? string what the refusal says

---Every config.json field seer knows for a model_type ("gemma3": a Gemma 3 multimodal config),
---classified. Fields outside it are named in a note on stderr at load; a refused field with a
---value seer does not implement fails the load, naming the field.
---@param model_type string
---@return table<string, seer.ConfigField>|nil fields nil for a model_type seer does not support
function M.config_fields(model_type) return core.config_fields(model_type) end

---@class seer.GpuDevice
---@field index integer the N of "cuda:N"
---@field name string
---@field compute_capability string "9.0"
---@field memory_bytes number
---@field free_bytes number 0 when it could not be read
---@field sm_count integer
---@field bandwidth_gbs number the theoretical memory bandwidth from the memory clock and bus width

---The CUDA GPUs this process can use, and when there are none, the reason (no driver, no GPU,
---a driver too old for CUDA 13).
---@return seer.GpuDevice[] devices
---@return string? why
function M.devices() return core.devices() end

local check_list = require("seer.checks").list -- (where, list, what, level): no holes

-- The token ids of a prompt (a string, a list of ids or a tensor of ids), each checked (an integer
-- in the vocabulary; a chat message list named as such) before anything runs; errors name the
-- line `level` frames above to_ids's caller (default: the caller of the method that calls
-- to_ids), and a sequence of a list by its number (noun "sequence 2").
local function to_ids(self, input, where, level, noun)
  level = level or 3
  local ids
  if type(input) == "string" then
    if not self.tokenizer then fail(where .. ": a text prompt needs a tokenizer, and this model directory has none; pass token ids", level) end
    ids = self.tokenizer:encode(input, { add_special_tokens = true })
  elseif type(input) == "table" then
    ids = input
  elseif type(input) == "userdata" and type(input.totable) == "function" then
    ids = input:totable() -- a tensor of ids
  else
    fail(where .. ": expected token ids (a table) or a string, got " .. type(input), level)
  end
  if #ids == 0 then fail(("%s: %s has no tokens"):format(where, noun or "the input"), level) end
  local who = noun and noun:find("^sequence") and (where .. ": " .. noun) or where
  for i = 1, #ids do
    local v = ids[i]
    if type(v) == "table" and (v.role ~= nil or v.content ~= nil) then
      fail(("%s: the prompt is a list of chat messages; render it first: " ..
            "model.tokenizer:apply_chat_template(messages, { add_generation_prompt = true }) (or toolkit.generate_response)"):format(who), level)
    end
    if type(v) ~= "number" or v ~= math.floor(v) then
      fail(("%s: token ids must be integers; element %d is %s"):format(who, i, type(v) == "number" and tostring(v) or ("a " .. type(v))), level)
    end
    if v < 0 or v >= self.config.vocab_size then
      -- positions count from 0, as in the C check and transformers' position_ids
      fail(("%s: token id %d at position %d is outside the vocabulary [0, %d)"):format(who, v, i - 1, self.config.vocab_size), level)
    end
  end
  return ids
end

---Logits of every position for one sequence: a [n, vocab] f32 tensor. A list of sequences
---runs as one batch (one pass over the weights; each sequence's logits bit-identical to it
---alone) and returns a [batch, longest, vocab] tensor, left-padded (pad rows are 0), plus the
---attention mask as a Lua table of 0/1 rows. With `{hidden_states = true}` (one
---sequence) also returns what transformers' `output_hidden_states` does: hidden[1] the
---embeddings, hidden[i + 1] the residual after layer i - 1 (Lua indices; layer numbers are
---0-based names), each [n, d_model], except the last entry, the last layer's output after the
---final norm (so `hidden[#hidden]` is HF's `hidden_states[-1]`); the residual before that norm is
---`blocks.{L-1}.hook_resid_post` (run_with_cache).
---`{start_at_layer = L}` (TransformerLens's): the input is the residual stream entering block
---L (`blocks.L.hook_resid_pre`), a `[n, d_model]` tensor or a list of them (a batch), and only
---blocks L .. on, the final norm and the unembedding run (L = num_hidden_layers: only those; a
---negative L counts from the end); the hooks of the blocks it runs and ln_final run, the
---embedding hooks do not. Given the residual a whole pass had there, the logits are that pass's,
---bit for bit (a CPU model only). A list shares what its sequences compute alike as
---`run_with_hooks` does (`share_prompts = false`: every sequence computed).
---@param ids integer[]|integer[][]|string|seer.Tensor|seer.Tensor[]
---@param opts? {hidden_states?: boolean, start_at_layer?: integer, share_prompts?: boolean}
---@return any logits, table? mask_or_hidden
function Model:forward(ids, opts)
  return self:_forward(ids, opts)
end

local function shape_of(t)
  local d = {}
  for i = 1, t:dim() do d[i] = t:size(i) end
  return "[" .. table.concat(d, ", ") .. "]"
end

-- start_at_layer's checks: the block (negative from the end) and the residual rows, one tensor or
-- a list of them; returns the block, the f32 contiguous tensors, whether it was a list, and a
-- placeholder token list (zeros, never read) of each residual's length
local function start_inputs(self, input, L, where, level)
  local nl, d = self.config.num_hidden_layers, self.config.hidden_size
  if L ~= math.floor(L) or L < -nl or L > nl then
    fail(("%s: start_at_layer must be a whole number from %d to %d (negative: from the end), got %s"):format(where, -nl, nl, tostring(L)), level + 1)
  end
  if L < 0 then L = L + nl end
  if self.device ~= "cpu" then
    fail(("%s: start_at_layer runs on a CPU model; this one is on %s"):format(where, self.device), level + 1)
  end
  local T = require "seer.tensor"
  if input == nil then
    fail(("%s: with start_at_layer the input is the residual entering block %d: a [n, %d] tensor or a list of them; got nil")
      :format(where, L, d), level + 1)
  end
  local list = type(input) == "table" and not T.is_tensor(input)
  local items = list and input or { input }
  if list then check_list(where, input, "residual", level + 1) end
  local out = {}
  for b, t in ipairs(items) do
    local what = list and ("residual %d"):format(b) or "the residual"
    if T.is_tensor(t) and t:dim() == 3 and not list then
      fail(("%s: with start_at_layer a batch is a list of [n, %d] residuals, not a %s tensor (a left-padded batch's rows "
        .. "include its pads: pass resid:select(1, b):narrow(1, pad + 1, n_b) for each sequence b)"):format(where, d, shape_of(t)), level + 1)
    end
    if not T.is_tensor(t) or t:dim() ~= 2 or t:size(2) ~= d or t:size(1) < 1 then
      fail(("%s: with start_at_layer the input is the residual entering block %d: a [n, %d] tensor or a list of them; %s is %s")
        :format(where, L, d, what, T.is_tensor(t) and ("a tensor of shape " .. shape_of(t)) or type(t)), level + 1)
    end
    out[b] = (t:dtype() == "f32" and t or t:to("f32")):contiguous()
  end
  local ids = {}
  for b, r in ipairs(out) do
    ids[b] = {}
    for k = 1, r:size(1) do ids[b][k] = 0 end
  end
  return L, out, list, ids
end

-- Whether the sequences of one call may share what they compute alike (C then compares their
-- hook sets point by point): not when a function hook is attached anywhere, nor a capture on
-- every sequence (the model's hooks, `model_hooks`) or on two (`extras[i]`, sequence i's own
-- entries; holes allowed): their calls across sequences would come in another order. A capture
-- of one sequence's own sees only that sequence, in its order.
local function shareable(model_hooks, extras, count)
  local owner = {}
  local function pure(list, seq)
    for _, e in ipairs(list or {}) do
      local kind = e[2]:kind()
      if kind == "function" then return false end
      if kind == "capture" then
        if not seq or (owner[e[2]] and owner[e[2]] ~= seq) then return false end
        owner[e[2]] = seq
      end
    end
    return true
  end
  if not pure(model_hooks) then return false end
  for i = 1, count do
    if not pure(extras[i], i) then return false end
  end
  return true
end

-- forward with per_seq[b], extra hook entries for sequence b of a list (run_with_hooks).
function Model:_forward(ids, opts, per_seq)
  opts = check_opts("forward", opts, { hidden_states = "boolean", start_at_layer = "number", share_prompts = "boolean" })
  local hooks = self:_hook_list()
  if opts.start_at_layer ~= nil then
    if opts.hidden_states then fail("forward: start_at_layer and hidden_states cannot be asked together", 2) end
    local L, rs, list, seqs = start_inputs(self, ids, opts.start_at_layer, "forward", 2)
    if not list then
      if per_seq and per_seq[1] then hooks = self:_hook_list(per_seq[1]) end
      return self._c:forward(seqs[1], false, hooks, nil, nil, L, rs[1])
    end
    local T = require "seer.tensor"
    local per, longest = {}, 0
    for b in ipairs(rs) do
      longest = math.max(longest, #seqs[b])
      per[b] = per_seq and per_seq[b] and self:_hook_list(per_seq[b]) or hooks
    end
    local res = self._c:forward_batch(seqs, (hooks or per_seq) and per or nil, nil, nil, L, rs)
    local out, mask = T.zeros(#seqs, longest, self.config.vocab_size), {}
    for b, sq in ipairs(seqs) do
      out:select(1, b):narrow(1, longest - #sq + 1, #sq):copy_(res[b])
      local row, pad = {}, longest - #sq
      for i = 1, longest do row[i] = i > pad and 1 or 0 end
      mask[b] = row
    end
    return out, mask
  end
  if opts.hidden_states then
    if type(ids) == "table" and type(ids[1]) == "table" then fail("forward: hidden_states works on one sequence at a time", 2) end
    return self._c:forward(to_ids(self, ids, "forward"), true, hooks)
  end
  if type(ids) == "table" and type(ids[1]) == "table" then
    check_list("forward", ids, "sequence", 2) -- forward tail-calls _forward, so its caller is one level up
    local T = require "seer.tensor"
    local longest = 0
    local per = {}
    for b, s in ipairs(ids) do
      if type(s) ~= "table" then fail(("forward: sequence %d is a %s; a batch is a list of token-id lists"):format(b, type(s)), 2) end
      -- an empty sequence is a mistake upstream (as in run_with_cache and generate), not a row of
      -- zero logits
      if #s == 0 then fail(("forward: sequence %d has no tokens"):format(b), 2) end
      longest = math.max(longest, #s)
      per[b] = per_seq and per_seq[b] and self:_hook_list(per_seq[b]) or hooks
    end
    local out = T.zeros(#ids, longest, self.config.vocab_size)
    local mask = {}
    for b, s in ipairs(ids) do
      local row = {}
      local pad = longest - #s
      for i = 1, longest do row[i] = i > pad and 1 or 0 end
      mask[b] = row
    end
    -- one batched pass over the weights; each sequence's logits as it alone gives them (the C
    -- numbers the sequences 1..n for hook.batch)
    local share = opts.share_prompts ~= false and self.device == "cpu" and shareable(self._hooks, per_seq or {}, #ids)
    local res = self._c:forward_batch(ids, (hooks or per_seq) and per or nil, nil, nil, nil, nil, share)
    for b, l in ipairs(res) do out:select(1, b):narrow(1, longest - #ids[b] + 1, #ids[b]):copy_(l) end
    return out, mask
  end
  return self:_forward_cached(to_ids(self, ids, "forward"), hooks, nil, opts.share_prompts)
end

local gen_valid = {
  max_new_tokens = "number", min_new_tokens = "number", temperature = "number", top_k = "number", top_p = "number", min_p = "number",
  repetition_penalty = "number", seed = "number", stop = "any", stream = "function",
}

-- Numeric generation options, checked before anything runs (the C generator checks them again):
-- a NaN, an infinity or a fraction where a count is meant is refused with its name, never cast.
local gen_counts = { max_new_tokens = true, min_new_tokens = true, top_k = true, seed = true }
local gen_ranges = { -- option -> lo, hi, how the error says the range
  temperature = { 0, math.huge, ">= 0 (0 = greedy)" }, top_p = { 0, 1, "from 0 to 1 (1 = off)" },
  min_p = { 0, 1, "from 0 to 1 (0 = off)" }, repetition_penalty = { 0, math.huge, "> 0 (1 = off)" },
}
local function check_gen_numbers(where, opts, level)
  for k, v in pairs(opts) do
    if k == "seed" then
      if not (v == math.floor(v) and v >= -2 ^ 53 and v <= 2 ^ 53) then
        fail(("%s: seed must be a whole number of at most 2^53 in magnitude, got %s"):format(where, tostring(v)), level + 1)
      end
    elseif gen_counts[k] then
      require("seer.checks").whole(where, k, v, 0, 2 ^ 31 - 1, level + 1, true)
    elseif gen_ranges[k] then
      local r = gen_ranges[k]
      local bad = v ~= v or v == math.huge or v == -math.huge or v < r[1] or v > r[2]
      if k == "repetition_penalty" and v == 0 then bad = true end
      if bad then fail(("%s: %s must be a finite number %s, got %s"):format(where, k, r[3], tostring(v)), level + 1) end
    end
  end
end

-- Everything about one prompt and its options that can be wrong, without running anything:
-- the token ids, the stop list, the numbers. generate_batch runs it over every prompt before
-- the first step, so a bad prompt late in a list fails before any work (and no result) is lost.
local function validate(self, input, opts, where, level)
  opts = check_opts(where, opts, gen_valid, level - 1)
  local ids = to_ids(self, input, where, level + 2, "the prompt")
  check_gen_numbers(where, opts, level + 1)
  local stop_ids, stop_strings = {}, {}
  for _, id in ipairs(self.config.eos_token_ids) do stop_ids[#stop_ids + 1] = id end
  local stop = opts.stop
  if type(stop) == "string" or type(stop) == "number" then stop = { stop } end
  if stop ~= nil and type(stop) ~= "table" then fail(where .. ": stop must be a string, a token id or a list of them", level + 1) end
  if stop then require("seer.checks").list(where .. ": stop", stop, "entry", level + 1) end
  for _, s in ipairs(stop or {}) do
    if type(s) == "number" then
      if s ~= math.floor(s) then
        fail(("%s: stop token ids must be whole numbers, got %s"):format(where, tostring(s)), level + 1)
      elseif s < 0 or s >= self.config.vocab_size then
        fail(("%s: stop token id %s is outside the vocabulary [0, %d)"):format(where, tostring(s), self.config.vocab_size), level + 1)
      end
      stop_ids[#stop_ids + 1] = s
    elseif type(s) == "string" then
      -- "" is found at once: the generation would end before its first token
      if s == "" then fail(where .. ": a stop string must not be empty", level + 1) end
      stop_strings[#stop_strings + 1] = s
    else fail(where .. ": stop entries must be strings or token ids", level + 1) end
  end
  if #stop_strings > 0 and not self.tokenizer then fail(where .. ": stop strings need a tokenizer", level + 1) end
  -- the engine keeps the model's end-of-sequence ids and MAX_STOP_IDS more (lua_model.c); more
  -- would be dropped unseen, the generation answered as if they had not been given
  if #stop_ids - #self.config.eos_token_ids > M.MAX_STOP_IDS then
    fail(("%s: at most %d stop token ids, got %d"):format(where, M.MAX_STOP_IDS, #stop_ids - #self.config.eos_token_ids), level + 1)
  end
  return opts, ids, stop_ids, stop_strings
end

-- The built-in interventions of a hook list whose positions, from/to or only_prompt restrict
-- them, each once, with the hook point it is at and its hit count now (iv:hits() counts the rows
-- its filter selected). After a generation, one whose count did not move selected no position:
-- a silent no-op (I.add(vec, {positions = {-100}}) on a 3-token prompt, positions = {100} with
-- max_new_tokens = 3), reported by check_reached as run_with_hooks reports its own.
local function watch_positions(list, watch, note, seq)
  watch = watch or { seen = {} }
  for _, e in ipairs(list or {}) do
    local iv = e[2]
    if not watch.seen[iv] and iv:kind() ~= "function" then
      watch.seen[iv] = true
      local hits, restricted = iv:hits()
      if restricted then watch[#watch + 1] = { iv = iv, name = e[1], start = hits, note = note, seq = seq } end
    end
  end
  return watch
end

-- span: what the generation ran through, for the message (a string, or a function of the watch
-- entry returning a string, or nil to skip that entry: a sequence that generated nothing ran nothing).
local function check_reached(watch, where, span, level)
  for _, w in ipairs(watch or {}) do
    local what = span
    if type(span) == "function" then what = span(w) end
    -- (a count below the start was reset by a run_with_hooks in between: not judged)
    if what and w.iv:hits() == w.start then
      fail(("%s: the %s at %s%s selected no position during the generation (%s); its positions, from/to or only_prompt "
        .. "match none of them. Positions are absolute and 0-based (0 = the first prompt token), negative ones count back "
        .. "from the end of the prompt (-1 = its last token); a generated token's position is reached only if a token "
        .. "is generated after it"):format(where, w.iv:kind(), w.name, w.note or "", what), level + 1)
    end
  end
end

-- What a generation of a prompt of n tokens that produced `new` tokens ran through: the last
-- generated token is never fed back.
local function span_text(n, new)
  local last = n + new - 2
  return ("the prompt's %d tokens are positions 0..%d (-1..-%d from its end)%s"):format(n, n - 1, n,
    new > 1 and (", generated tokens ran through position %d"):format(last) or ", no generated token was fed back")
end

-- ---- the prompt cache (Model:prompt_cache) ----------------------------------------------------
-- Entries {g = generator, bytes} (a generation's prompt) and {f = forward_keep, bytes} (the
-- residual a forward call kept, l_forward): generations take from generations; forward calls
-- from both (a generation's kept residual; a forward entry holds no keys and values to give).
-- Finished generators shrunk to their prompt (g:keep_prompt: the prompt's KV rows and logits),
-- most recently used first (an entry a generation takes its prompt or beginning from moves to the
-- front), at most PROMPT_CACHE_ENTRIES and `budget` bytes: the least recently used go first. A
-- later generation whose prompt and hooks match one (the C side decides: prompt_donor) takes it
-- instead of computing it.
-- 32: a loop over up to 32 prompts (seeds outside, prompts inside) still finds each; comparing a
-- new prompt with an entry costs a length compare, then a memcmp
local PROMPT_CACHE_ENTRIES = 32
local PROMPT_CACHE_DEFAULT = 256 * 1024 * 1024

local function pcache(self)
  local pc = self._pcache
  if not pc then
    pc = { list = {}, bytes = 0, budget = self.device == "cpu" and PROMPT_CACHE_DEFAULT or 0 }
    self._pcache = pc
  end
  return pc
end

-- the cached donors as a list of generators (nil when there are none); the entries forward
-- calls kept (e.f, below) are not generators
local function pcache_donors(self)
  local pc = self._pcache
  if not pc or #pc.list == 0 then return nil end
  local out = {}
  for _, e in ipairs(pc.list) do out[#out + 1] = e.g end
  return #out > 0 and out or nil
end

-- the residuals forward calls and generations kept (C: l_forward's donors), nil when there are
-- none
function Model:_forward_donors()
  local pc = self._pcache
  if not pc or #pc.list == 0 then return nil end
  local out = {}
  for _, e in ipairs(pc.list) do out[#out + 1] = e.f or e.g end
  return #out > 0 and out or nil
end

-- the entry holding generator or kept residual `d` moves to the front
function Model:_pcache_use(d)
  local pc = self._pcache
  if not (d and pc) then return end
  for k, e in ipairs(pc.list) do
    if e.g == d or e.f == d then
      if k > 1 then table.insert(pc.list, 1, table.remove(pc.list, k)) end
      return
    end
  end
end

-- entries computed under another model state serve no one: dropped, and the bytes counted again
local function pcache_prune(pc)
  local keep = {}
  pc.bytes = 0
  for _, e in ipairs(pc.list) do
    local fresh
    if e.g then fresh = e.g:prompt_fresh() else fresh = select(3, e.f:info()) end
    if fresh then keep[#keep + 1] = e pc.bytes = pc.bytes + e.bytes end
  end
  pc.list = keep
end

-- a new entry at the front ({g = generator} or {f = kept residual}, its bytes), then the least
-- recently used go while there are too many or too many bytes
local function pcache_insert(pc, e)
  if e.bytes > pc.budget then return end
  table.insert(pc.list, 1, e)
  pc.bytes = pc.bytes + e.bytes
  while #pc.list > PROMPT_CACHE_ENTRIES or pc.bytes > pc.budget do
    pc.bytes = pc.bytes - table.remove(pc.list).bytes
  end
end

-- One sequence's whole forward pass (its logits) through the prompt cache: it runs from a
-- residual an earlier call on these tokens kept, where its hooks act on nothing before it, and
-- keeps its own (l_forward's donors and keep): a loop over steering strengths or patches at one
-- block computes the blocks below it once. share = false, a GPU model or budget 0: a plain pass.
-- b: the sequence's index for hook functions (hook.batch).
function Model:_forward_cached(ids, hooks, b, share)
  local pc = pcache(self)
  if share == false or self.device ~= "cpu" or pc.budget <= 0 then return (self._c:forward(ids, false, hooks, b)) end
  local donors = self:_forward_donors()
  local logits, kept, at = self._c:forward(ids, false, hooks, b, nil, nil, nil, donors, true)
  if at then self:_pcache_use(donors[at]) end
  if kept then
    pcache_prune(pc)
    pcache_insert(pc, { f = kept, bytes = (kept:info()) })
  end
  return logits
end

-- g has just run its first step with `list` (next's donors or step_batch's generators): if it
-- took its prompt or beginning from a cache entry (took_prompt's third value: the donor's index
-- in that list), the entry moves to the front
local function pcache_touch(self, g, list)
  local _, _, at = g:took_prompt()
  self:_pcache_use(at and list and list[at])
end

-- g has finished: keep its prompt unless it took it from another or cannot give it; entries
-- computed under another model state (an adapter switched, ...) can serve no one and go first
local function pcache_remember(self, g)
  local pc = pcache(self)
  if pc.budget <= 0 or g:took_prompt() then return end
  pcache_prune(pc)
  local bytes = g:keep_prompt()
  if bytes then pcache_insert(pc, { g = g, bytes = bytes }) end
end

---The model's prompt cache: the prompts of recent `generate`, `generate_iter` and `generate_batch`
---calls (at most 32, the least recently used dropped first), each kept as its KV cache rows and
---logits, so that a later call, or a `generate_batch` sequence, whose prompt tokens are the same
---and whose hooks do the same to them takes them instead of computing the prompt again: sampling
---one prompt n times in a loop computes it once, and a battery run again computes none.
---An entry also gives its first positions (blocks of 64) to a prompt that begins as it does.
---A `forward` / `run_with_hooks` / `run_with_cache` call on one sequence keeps the residual
---entering the first block its hooks act on, and a later such call on its tokens with no hook
---before that block runs from there, or from the residual a generation of its tokens kept where
---their hooks agree below it (a loop of strengths steering one layer computes the blocks below it
---once).
---The results are the same bits (docs/model.md, *Batches*). `budget` sets the most bytes it
---holds (0: off, and what it holds is dropped); the default is 256 MiB on a CPU model; a GPU
---model has none. Returns what it holds.
---@param budget? integer
---@return {entries: integer, bytes: integer, budget: integer}
function Model:prompt_cache(budget)
  local pc = pcache(self)
  if budget ~= nil then
    if type(budget) ~= "number" or budget < 0 or budget ~= math.floor(budget) then
      fail("prompt_cache: budget must be a whole number of bytes (0: off)", 2)
    end
    if budget > 0 and self.device ~= "cpu" then
      fail(("prompt_cache: a model on %s has no prompt cache (its KV caches live on the device)"):format(self.device), 2)
    end
    pc.budget = budget
    while #pc.list > 0 and pc.bytes > budget do pc.bytes = pc.bytes - table.remove(pc.list).bytes end
  end
  return { entries = #pc.list, bytes = pc.bytes, budget = pc.budget }
end

local function prepare(self, input, opts, where, extra_hooks, batch, share_prompt)
  local ids, stop_ids, stop_strings
  opts, ids, stop_ids, stop_strings = validate(self, input, opts, where, 3)
  local n = opts.max_new_tokens or 20
  local t = opts.temperature or 0
  local hooks = self:_hook_list(extra_hooks)
  local watch = watch_positions(hooks) -- the counts before anything runs
  local g = self._c:generator(ids, {
    max_new_tokens = n, min_new_tokens = opts.min_new_tokens, temperature = t, top_k = opts.top_k, top_p = opts.top_p, min_p = opts.min_p,
    repetition_penalty = opts.repetition_penalty, seed = opts.seed, stop_ids = stop_ids, hooks = hooks,
    batch = batch, share_prompt = share_prompt or (batch == nil and pcache(self).budget > 0) or nil,
  })
  return g, ids, stop_strings, opts, watch
end

-- The token loop shared by generate_iter and generate: ids from the C generator, text decoded
-- incrementally (held back while it ends inside a multi-byte character), stop strings.
-- text up to where the first stop string found in it begins (the earliest of all of them), and
-- whether one was found: generate, generate_iter's pieces and generate_batch end texts alike.
local function cut_at_stop(text, stop_strings)
  local cut
  for _, s in ipairs(stop_strings) do
    local at = text:find(s, 1, true)
    if at and (not cut or at < cut) then cut = at end
  end
  if cut then return text:sub(1, cut - 1), true end
  return text, false
end

-- Token by token: (id, piece), piece the text that is final: a stop string ends the text where
-- it begins, and while the text ends with the start of a stop string ("Li" of "Lily") that tail
-- is held back until the next tokens show whether the stop string follows, so the pieces add up
-- to generate's text (they used to include the stop string); the last token's piece hands out
-- whatever is left.
-- check: {watch, where, n} to judge the interventions when the tokens run out (generate_iter;
-- generate judges them itself after its loop).
local function iterate(self, g, stop_strings, check)
  local tok = self.tokenizer
  local new, text, sent = {}, "", 0 -- text decoded so far (whole characters); sent: its bytes handed out
  local finished = false
  local function held(s) -- the longest tail of s that begins some stop string
    local keep = 0
    for _, st in ipairs(stop_strings) do
      for k = math.min(#st - 1, #s), keep + 1, -1 do
        if s:sub(-k) == st:sub(1, k) then keep = k break end
      end
    end
    return keep
  end
  local judged, first, kept = false, true, false
  return function()
    local donors = first and not finished and pcache_donors(self) or nil
    local id = not finished and g:next(donors)
    if first then pcache_touch(self, g, donors) end
    first = false
    if not id then
      if not kept then kept = true pcache_remember(self, g) end
      finished = true
      if check and not judged then
        judged = true
        if #new > 0 then check_reached(check.watch, check.where, span_text(check.n, #new), 2) end
      end
      return nil
    end
    new[#new + 1] = id
    local piece
    if tok then
      local last = g:ended()
      local full = tok:decode(new, { skip_special_tokens = true })
      -- U+FFFD at the end: an incomplete UTF-8 sequence so far (kept as it is on the last token)
      if last or full:sub(-3) ~= "\239\191\189" then text = full end
      local cut
      text, cut = cut_at_stop(text, stop_strings)
      local upto = #text
      if cut then
        finished = true
        g:finish()
      elseif not last then
        upto = #text - held(text)
      end
      if upto < sent then upto = sent end
      piece = text:sub(sent + 1, upto)
      sent = upto
    end
    return id, piece
  end
end

---Generates token by token: `for id, piece in model:generate_iter(prompt, opts) do ... end`.
---piece is the newly decoded text (empty while a multi-byte character is incomplete; nil
---without a tokenizer). Options as in generate.
---@return fun(): integer?, string?
function Model:generate_iter(input, opts)
  local g, ids, stop_strings, _, watch = prepare(self, input, opts, "generate_iter")
  return iterate(self, g, stop_strings, { watch = watch, where = "generate_iter", n = #ids })
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
  local g, prompt_ids, stop_strings, o, watch = prepare(self, input, opts, "generate")
  local ids = {}
  for id, piece in iterate(self, g, stop_strings) do
    ids[#ids + 1] = id
    if o.stream then o.stream(piece, id) end
  end
  -- an intervention whose positions the generation never reached did nothing: an error, as in
  -- run_with_hooks (after the generation: whether a position is reached can depend on when it stops)
  if #ids > 0 then check_reached(watch, "generate", span_text(#prompt_ids, #ids), 2) end
  local text
  if self.tokenizer then
    text = cut_at_stop(self.tokenizer:decode(ids, { skip_special_tokens = true }), stop_strings)
  end
  return { ids = ids, text = text, prompt_ids = prompt_ids }
end

-- ---- hooks (docs/hooks.md) --------------------------------------------------------------------

local function hooks_core() return require "seer.core.hooks" end
local function pack(...) return { n = select("#", ...), ... } end
local function interventions() return require "seer.interventions" end

---Every hook point name of this model, in the order a forward pass reaches them.
---@return string[]
function Model:hook_names()
  if not self._hook_names then
    self._hook_names = hooks_core().names(self.config.num_hidden_layers, self._c:hook_mask())
    self._hook_set = {}
    for _, n in ipairs(self._hook_names) do self._hook_set[n] = true end
  end
  local out = {}
  for i, n in ipairs(self._hook_names) do out[i] = n end
  return out
end

-- Edit distance (for "did you mean" lists of hook names).
local function edit_distance(a, b)
  local prev, cur = {}, {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    cur[0] = i
    local ai = a:byte(i)
    for j = 1, #b do
      local c = prev[j - 1] + (ai == b:byte(j) and 0 or 1)
      if prev[j] + 1 < c then c = prev[j] + 1 end
      if cur[j - 1] + 1 < c then c = cur[j - 1] + 1 end
      cur[j] = c
    end
    prev, cur = cur, prev
  end
  return prev[#b]
end

-- The hook names closest to s (at most k), for error messages.
local function close_names(all, s, k)
  local scored = {}
  for i, n in ipairs(all) do
    -- names that contain s come first ("hook_resid" -> the resid points)
    scored[i] = { n = n, d = edit_distance(s, n) - (n:find(s, 1, true) and 1000 or 0), i = i }
  end
  table.sort(scored, function(x, y) if x.d ~= y.d then return x.d < y.d end return x.i < y.i end)
  local out = {}
  for i = 1, math.min(k, #scored) do out[i] = scored[i].n end
  return out
end

-- Lua pattern magic other than '.': a hook name (letters, digits, '_', '.') has none, so a name
-- without it is never read as a pattern ("blocks.-1.x" used to be the lazy pattern ".-" and
-- selected blocks.1).
local PATTERN_MAGIC = "[%^%$%(%)%%%[%]%*%+%-%?]"

-- Does the plain selector s occur in the hook name n as whole dot-separated parts ("hook_resid_post"
-- and "mlp.hook_post" in blocks.3.mlp.hook_post, "blocks.1" in blocks.1.*, not in blocks.10.*)?
local function plain_match(n, s)
  if s == "" then return false end -- find("", from) never fails in Lua 5.1 (from is clamped): no loop
  local from = 1
  while true do
    local a, b = n:find(s, from, true)
    if not a then return false end
    if (a == 1 or n:sub(a - 1, a - 1) == ".") and (b == #n or n:sub(b + 1, b + 1) == ".") then return true end
    from = a + 1
  end
end

-- A name, a selector, a list of them or a predicate -> the matching hook names, in forward order
-- (docs/hooks.md, *Selecting hook points*):
-- - an exact hook name is that point;
-- - "blocks.-K.<rest>" counts layers from the end, as Python's (and the toolkit's) layer -1 does:
--   blocks.-1.hook_resid_post is the last layer's; a layer outside the model is an error;
-- - a name with Lua pattern magic other than '.' (^$()%[]*+-?) is a Lua pattern matched against
--   every name ("hook_resid_post$", "blocks%.1[0-5]%.hook_resid_pre");
-- - any other name (letters, digits, '_', '.') selects the names it occurs in as whole
--   dot-separated parts: "hook_resid_post" (every layer's), "attn.hook_pattern", "blocks.2"
--   (every point of layer 2, not of layer 20); '.' is a literal dot.
-- Anything that matches nothing is an error that names the closest hook names.
local function match_names(self, spec, where, level)
  self:hook_names()
  local all, set = self._hook_names, self._hook_set
  local layers = self.config.num_hidden_layers
  local picked, out = {}, {}
  local function nothing(s, why) -- its errors: level + 3
    fail(("%s: no hook point matches '%s'%s. Closest hook names: %s. Names are hook_embed, blocks.{0..%d}.<point> "
      .. "(blocks.-1.<point> is the last layer's), ln_final.hook_normalized; points: hook_resid_pre, ln1.hook_normalized, "
      .. "attn.hook_q/k/v, attn.hook_attn_scores, attn.hook_pattern, attn.hook_z, hook_attn_out, hook_resid_mid, "
      .. "ln2.hook_normalized, mlp.hook_pre, mlp.hook_post, hook_mlp_out, hook_resid_post (model:hook_names() lists "
      .. "this model's; a name with Lua pattern characters such as '$' or '%%.' is a pattern: \"hook_resid_post$\")")
      :format(where, s, why or "", table.concat(close_names(all, s, 4), ", "), layers - 1), level + 3)
  end
  local function add_one(s) -- its errors: level + 2 (this function is one more frame)
    if type(s) ~= "string" then
      fail(("%s: hook names must be strings or Lua patterns, got %s"):format(where, type(s)), level + 2)
    end
    if s == "" then -- (it matched everywhere and nowhere: plain_match looped on it forever)
      fail(("%s: an empty hook name selects nothing; name a hook point (\"blocks.0.hook_resid_post\"), a part of one (\"hook_resid_post\") or a Lua pattern"):format(where), level + 2)
    end
    if set[s] then
      picked[s] = true
      return
    end
    -- Python-style negative layer: blocks.-1.<rest> is the last layer's
    local neg, rest = s:match("^blocks%.%-(%d+)(%..*)$")
    if not neg then neg, rest = s:match("^blocks%.%-(%d+)()$") end
    if neg then
      local k = tonumber(neg)
      if k < 1 then
        fail(("%s: '%s': layer -%s is not a layer counted from the end (-1 is the last layer, %d)")
          :format(where, s, neg, layers - 1), level + 2)
      end
      if k > layers then
        fail(("%s: '%s': layer -%s is outside the model, which has %d layers (0..%d, or -1..-%d from the end)")
          :format(where, s, neg, layers, layers - 1, layers), level + 2)
      end
      local resolved = ("blocks.%d%s"):format(layers - k, type(rest) == "string" and rest or "")
      if set[resolved] then
        picked[resolved] = true
        return
      end
      s = resolved -- a selector or pattern over the resolved layer's points
    end
    local layer = s:match("^blocks%.(%d+)%.") or s:match("^blocks%.(%d+)$")
    if layer and tonumber(layer) >= layers and not s:find(PATTERN_MAGIC) then
      nothing(s, (": layer %s does not exist (this model has layers 0..%d; -1 is the last)"):format(layer, layers - 1))
    end
    if s:find(PATTERN_MAGIC) then
      local ok, found = pcall(function()
        local any = false
        for _, n in ipairs(all) do
          if n:find(s) then picked[n] = true any = true end
        end
        return any
      end)
      if not ok then
        fail(("%s: '%s' is not a hook name and not a valid Lua pattern (%s)"):format(where, s, tostring(found):gsub("^[^\n]-:%d+: ", "")), level + 2)
      end
      if not found then nothing(s, " (read as a Lua pattern)") end
      return
    end
    local any = false
    for _, n in ipairs(all) do
      if plain_match(n, s) then picked[n] = true any = true end
    end
    if not any then nothing(s) end
  end
  if type(spec) == "function" then
    for _, n in ipairs(all) do
      if spec(n) then picked[n] = true end
    end
  elseif type(spec) == "table" then
    for _, s in ipairs(spec) do add_one(s) end
  else
    add_one(spec)
  end
  for _, n in ipairs(all) do
    if picked[n] then out[#out + 1] = n end
  end
  return out
end

local function to_iv(hook, where, level)
  if type(hook) == "function" then return interventions().fn(hook) end
  if type(hook) == "userdata" and interventions().is_intervention(hook) then return hook end
  fail(("%s: a hook must be a function fn(act, hook) or an intervention from seer.interventions, got %s")
    :format(where, type(hook)), level + 1)
end

-- {{name_or_pattern, hook}, ...} -> entries {name, iv} for every matching hook point.
local function compile_hooks(self, hooks, where, level)
  if type(hooks) ~= "table" then fail(where .. ": hooks must be a list of {name_or_pattern, hook} pairs", level + 1) end
  local entries = {}
  for i, h in ipairs(hooks) do
    if type(h) ~= "table" or h[1] == nil or h[2] == nil then
      fail(("%s: hook %d must be a {name_or_pattern, hook} pair"):format(where, i), level + 1)
    end
    local iv = to_iv(h[2], where, level + 1)
    for _, n in ipairs(match_names(self, h[1], where, level + 1)) do entries[#entries + 1] = { n, iv } end
  end
  return entries
end

function Model:_hook_list(extra)
  local active = self._hooks
  if (not active or #active == 0) and not extra then return nil end
  local list = {}
  for _, e in ipairs(active or {}) do list[#list + 1] = e end
  for _, e in ipairs(extra or {}) do list[#list + 1] = e end
  return list
end

local function attach(self, entries)
  self._hooks = self._hooks or {}
  for _, e in ipairs(entries) do self._hooks[#self._hooks + 1] = e end
end

local function detach(self, entries)
  local drop = {}
  for _, e in ipairs(entries) do drop[e] = true end
  local keep = {}
  for _, e in ipairs(self._hooks or {}) do
    if not drop[e] then keep[#keep + 1] = e end
  end
  self._hooks = keep
end

---Generates continuations of many prompts at once: every step runs all unfinished sequences
---in one batched forward pass (one read of the weights for the whole batch), and each
---sequence finishes on its own (max_new_tokens, a stop token or a stop string). At most
---`max_batch` (default 16) sequences run at a time and the next prompt joins as soon as one
---finishes (continuous batching). Result i is exactly `model:generate(prompts[i], opts_i)`:
---the same tokens, bit for bit, where opts_i is opts with `per_sequence[i]` laid over it
---(`seed`, sampling options, `max_new_tokens`, `stop`, and `hooks`, a list of
---{name_or_pattern, hook} pairs for this sequence only, applied after the model's active
---hooks). Lua hook functions see `hook.batch = i`. Default seed: opts.seed for every sequence.
---Prompts that repeat (the same tokens, and hooks that do the same to them, none a capture or a
---function: n samples of one prompt, a battery run several times, a sweep of steering
---strengths from the first new token) compute their prompt once on a CPU model:
---the others take its KV cache and logits, the same bits they would compute. Prompts that share
---a beginning of 64 tokens or more (a system prompt, a preamble; hooks that act only after it:
---an injection from a later position) take its KV rows in whole blocks of 64 and compute the
---rest, again the bits they would compute alone (docs/model.md, *Shared beginnings*).
---`share_prompts = false` computes every prompt, as does a batch with a capture or function
---hook; otherwise repeats join next to each other.
---@param prompts (integer[]|string)[]
---@param opts? {max_new_tokens?: integer, min_new_tokens?: integer, temperature?: number, top_k?: integer, top_p?: number, min_p?: number, repetition_penalty?: number, seed?: integer, stop?: string|integer|(string|integer)[], max_batch?: integer, per_sequence?: table<integer, {max_new_tokens?: integer, min_new_tokens?: integer, temperature?: number, top_k?: integer, top_p?: number, min_p?: number, repetition_penalty?: number, seed?: integer, stop?: string|integer|(string|integer)[], hooks?: table}>, progress?: boolean, share_prompts?: boolean}
---@return {ids: integer[], text: string?, prompt_ids: integer[]}[]
function Model:generate_batch(prompts, opts)
  local where = "generate_batch"
  if type(prompts) ~= "table" or (#prompts > 0 and type(prompts[1]) == "number") then
    fail(where .. ": expected a list of prompts (each token ids or a string)", 2)
  end
  check_list(where, prompts, "prompt", 2)
  opts = opts or {}
  if type(opts) ~= "table" then fail(where .. ": opts must be a table", 2) end
  local shared, per_seq, max_batch, progress = {}, opts.per_sequence, opts.max_batch, opts.progress
  local share_prompts = opts.share_prompts
  for k, v in pairs(opts) do
    if k ~= "per_sequence" and k ~= "max_batch" and k ~= "progress" and k ~= "share_prompts" then shared[k] = v end
  end
  if share_prompts ~= nil and type(share_prompts) ~= "boolean" then fail(where .. ": share_prompts must be a boolean", 2) end
  if shared.stream then fail(where .. ": stream is not supported; use generate_iter per prompt", 2) end
  if per_seq ~= nil and type(per_seq) ~= "table" then fail(where .. ": per_sequence must be a table indexed by prompt number", 2) end
  if max_batch ~= nil and (type(max_batch) ~= "number" or max_batch < 1 or max_batch ~= math.floor(max_batch)) then
    fail(where .. ": max_batch must be a positive integer", 2)
  end
  for k in pairs(per_seq or {}) do
    if type(k) ~= "number" or k < 1 or k > #prompts or k ~= math.floor(k) then
      fail(("%s: per_sequence has an entry %s; its keys must be prompt numbers 1..%d"):format(where, tostring(k), #prompts), 2)
    end
  end
  -- Every prompt, its options and its hooks are checked (and text prompts tokenized) before the
  -- first step, so a bad prompt late in the list fails before any work; each sequence's
  -- generator (its KV cache) is made when it joins.
  local plan = {}
  for i = 1, #prompts do
    local o = {}
    for k, v in pairs(shared) do o[k] = v end
    local extra
    local mine = per_seq and per_seq[i]
    if mine ~= nil and type(mine) ~= "table" then fail(("%s: per_sequence[%d] must be a table of options"):format(where, i), 2) end
    for k, v in pairs(mine or {}) do
      if k == "stream" then
        -- it was validated as a generate option and then never called
        fail(("%s: per_sequence[%d].stream is not supported (generate_batch does not stream); use generate_iter per prompt"):format(where, i), 2)
      elseif k == "hooks" then extra = compile_hooks(self, v, ("%s: per_sequence[%d].hooks"):format(where, i), 2)
      else o[k] = v end
    end
    local ok, err_or_opts, ids = pcall(validate, self, prompts[i], o, ("%s: prompt %d"):format(where, i), 1)
    if not ok then fail(err_or_opts, 2) end
    plan[i] = { o = o, extra = extra, ids = ids }
  end
  -- Repeated prompts: each sequence whose prompt (tokens) occurs more than once asks the C step
  -- to share it (step_batch gives a later one the cache and logits of an earlier one with the
  -- same tokens and hooks). Repeats join next to each other, and the last joined sequence of a
  -- group stays in the step's list as a donor until its group has joined. Not when a function
  -- hook is attached anywhere, nor a capture on every sequence (the model's hooks) or on two:
  -- their calls across sequences would come in another order. A capture of one sequence's own
  -- sees only that sequence, in its order; C shares no rows it records, only the blocks below it.
  local order, key, left, count = {}, {}, {}, {}
  local cached -- the model's prompt cache (Model:prompt_cache), for prompts computed before this call
  for i = 1, #prompts do order[i] = i end
  if share_prompts ~= false then
    local first, members, extras = {}, {}, {}
    for i = 1, #prompts do extras[i] = plan[i].extra end
    if shareable(self._hooks, extras, #prompts) then
      for i = 1, #prompts do
        local k = table.concat(plan[i].ids, ",")
        key[i] = k
        count[k] = (count[k] or 0) + 1
        if not members[k] then members[k] = {} first[#first + 1] = k end
        table.insert(members[k], i)
      end
      for k, c in pairs(count) do left[k] = c end
      cached = pcache_donors(self)
      -- grouped, so that at most one group has members both joined and waiting (one kept donor)
      order = {}
      for _, k in ipairs(first) do
        for _, i in ipairs(members[k]) do order[#order + 1] = i end
      end
    end
  end
  -- donors[k]: a generator of group k, prefilled, kept in the step's list while members of the
  -- group have yet to join; newest[k]: the group's latest joiner, the donor after its step;
  -- last_done: the latest finished sequence's generator, kept in the list while prompts have yet
  -- to join, so that a prompt joining after every sequence with its beginning has finished can
  -- still take it (one kept cache at most)
  local donors, newest, last_done = {}, {}, nil
  local function make(i)
    local p = plan[i]
    plan[i] = nil
    local k = key[i]
    local share = k ~= nil -- any prompt may give or take a repeat or a shared beginning
    local ok, g, ids, stop_strings = pcall(prepare, self, p.ids, p.o, ("%s: prompt %d"):format(where, i), p.extra, i, share or nil)
    if not ok then fail(g, 3) end
    if share then
      left[k] = left[k] - 1
      newest[k] = g
    end
    return { g = g, i = i, prompt_ids = ids, stop_strings = stop_strings, new = {}, text = "", first = true }
  end
  -- interventions whose positions no step reaches are reported after the batch (check_reached):
  -- the model's active hooks (they apply to every sequence) and each sequence's own
  local watch = watch_positions(self:_hook_list(), nil, " (active on every sequence)")
  for i = 1, #prompts do
    if plan[i].extra then watch_positions(plan[i].extra, watch, (" (per_sequence[%d].hooks)"):format(i), i) end
  end
  local results, active, nexti = {}, {}, 1
  -- 16 at a time by default: past that a CPU decode step is compute-bound (no faster per
  -- token), and every running sequence holds a KV cache
  local width = max_batch or 16
  local tok = self.tokenizer
  -- a progress line on a terminal for long batches (progress = false: never)
  local done_count = 0
  local bar = require("seer.progress").new(where, progress ~= false and #prompts > 1)
  while nexti <= #prompts or #active > 0 do
    while #active < width and nexti <= #prompts do
      active[#active + 1] = make(order[nexti])
      nexti = nexti + 1
    end
    local gens, listed = {}, {}
    for k, a in ipairs(active) do gens[k] = a.g listed[a.g] = true end
    for _, g in pairs(donors) do -- a finished donor still gives its prompt (its results are ignored)
      if not listed[g] then gens[#gens + 1] = g listed[g] = true end
    end
    for _, g in ipairs(cached or {}) do
      if not listed[g] then gens[#gens + 1] = g listed[g] = true end
    end
    if last_done and not listed[last_done] then gens[#gens + 1] = last_done end
    local ids, ended = core.step_batch(gens)
    for _, a in ipairs(active) do -- a cache entry a sequence took from on joining moves to the front
      if a.first then
        a.first = nil
        if cached then pcache_touch(self, a.g, gens) end
      end
    end
    for k, g in pairs(newest) do donors[k] = left[k] > 0 and g or nil end
    newest = {}
    local keep = {}
    for k, a in ipairs(active) do
      local id = ids[k]
      local finished = id == false or ended[k]
      if id then
        a.new[#a.new + 1] = id
        if tok and #a.stop_strings > 0 then
          local full = tok:decode(a.new, { skip_special_tokens = true })
          for _, s in ipairs(a.stop_strings) do
            if full:find(s, 1, true) then finished = true a.g:finish() end
          end
        end
      end
      if finished then
        local text
        if tok then
          text = cut_at_stop(tok:decode(a.new, { skip_special_tokens = true }), a.stop_strings)
        end
        results[a.i] = { ids = a.new, text = text, prompt_ids = a.prompt_ids }
        done_count = done_count + 1
        if key[a.i] then
          last_done = a.g
          -- kept in the prompt cache as generate's are, for later calls (a battery run again)
          pcache_remember(self, a.g)
        end
      else
        keep[#keep + 1] = a
      end
    end
    active = keep
    if nexti > #prompts then last_done = nil end
    bar:update("%d/%d done", done_count, #prompts)
  end
  bar:finish("%d/%d done", done_count, #prompts)
  check_reached(watch, where, function(w)
    if w.seq then
      local r = results[w.seq]
      if #r.ids == 0 then return nil end
      return ("prompt %d: %s"):format(w.seq, span_text(#r.prompt_ids, #r.ids))
    end
    local lo, hi, any = math.huge, 0, false
    for _, r in ipairs(results) do
      lo, hi = math.min(lo, #r.prompt_ids), math.max(hi, #r.prompt_ids)
      any = any or #r.ids > 0
    end
    if not any then return nil end
    return ("in no sequence of the batch: its prompts have %d to %d tokens"):format(lo, hi)
  end, 2)
  return results
end

---Runs fn with hooks attached to every forward pass and generation inside it; they are removed
---when fn returns or raises. Returns fn's results.
---@param hooks {[1]: string|string[], [2]: seer.Intervention|fun(act: seer.Tensor, hook: table): seer.Tensor?}[]
---@param fn fun(): ...
---@return ...
function Model:with_hooks(hooks, fn)
  if type(fn) ~= "function" then fail("with_hooks: the second argument must be a function", 2) end
  local entries = compile_hooks(self, hooks, "with_hooks", 2)
  attach(self, entries)
  local res = pack(pcall(fn))
  detach(self, entries)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end

---Attaches a hook until handle:remove() or model:reset_hooks().
---@param name_or_pattern string|string[]
---@param hook seer.Intervention|fun(act: seer.Tensor, hook: table): seer.Tensor?
---@return {remove: fun(self)}
function Model:add_hook(name_or_pattern, hook)
  local entries = compile_hooks(self, { { name_or_pattern, hook } }, "add_hook", 2)
  attach(self, entries)
  local model = self
  return { remove = function() detach(model, entries) end }
end

---Removes every hook (persistent ones and those of enclosing with_hooks calls).
function Model:reset_hooks() self._hooks = {} end

---Logits with hooks for this call only. For a list of sequences (run as one batch),
---`per_sequence[b]` is a further hook list for sequence b alone (a sweep of interventions in
---one pass over the weights; each sequence's logits are what it gives alone with its hooks).
---`start_at_layer = L`: the input is the residual entering block L, a `[n, d_model]` tensor or a
---list of them (see `forward`); only blocks L .. on run (a patch at block L needs nothing before
---it computed again).
---Sequences of a list with the same tokens share what their hooks compute alike (a CPU model):
---one whose hooks do the same to every position as an earlier one's takes its logits; one whose
---hooks first differ at block L (a sweep of strengths or positions steered or patched there)
---starts at a block up to L from the residual the earlier one saved there. The logits are the
---bits each sequence gives alone. Not when a function hook is attached anywhere, nor a capture on
---every sequence (`fwd_hooks`, the model's hooks) or on two; `share_prompts = false` turns it off.
---@param input integer[]|integer[][]|string|seer.Tensor|seer.Tensor[]
---@param opts {fwd_hooks?: table, per_sequence?: table<integer, table>, start_at_layer?: integer, share_prompts?: boolean}
---@return seer.Tensor logits, table? mask
function Model:run_with_hooks(input, opts)
  opts = check_opts("run_with_hooks", opts, { fwd_hooks = "table", per_sequence = "table", start_at_layer = "number", share_prompts = "boolean" })
  local entries = compile_hooks(self, opts.fwd_hooks or {}, "run_with_hooks", 2)
  local per
  local start = opts.start_at_layer
  local T = require "seer.tensor"
  -- a list: of token-id lists, or with start_at_layer of residual tensors
  local is_list = type(input) == "table" and (type(input[1]) == "table" or (start ~= nil and not T.is_tensor(input)))
  if opts.per_sequence then
    if not is_list then
      fail("run_with_hooks: per_sequence needs a list of sequences", 2)
    end
    per = {}
    for b, h in pairs(opts.per_sequence) do
      if type(b) ~= "number" or b < 1 or b > #input or b ~= math.floor(b) then
        fail(("run_with_hooks: per_sequence has an entry %s; its keys must be sequence numbers 1..%d"):format(tostring(b), #input), 2)
      end
      per[b] = compile_hooks(self, h, ("run_with_hooks: per_sequence[%d]"):format(b), 2)
    end
  end
  -- one sequence's ids are checked here, where an error can name the caller's line (inside the
  -- pcall below it could not)
  if start ~= nil then
    start_inputs(self, input, start, "run_with_hooks", 2) -- checked here, where an error can name the caller's line
  elseif not is_list then
    input = to_ids(self, input, "run_with_hooks")
  end
  -- the interventions made for this call, counted while it runs (below)
  local mine, order = {}, {}
  local function note(list)
    for _, e in ipairs(list) do
      if not mine[e[2]] then mine[e[2]] = e[1]; order[#order + 1] = e[2] end
    end
  end
  note(entries)
  for _, list in pairs(per or {}) do note(list) end
  for _, iv in ipairs(order) do iv:hits(true) end
  attach(self, entries)
  local res = { pcall(self._forward, self, input, { start_at_layer = start, share_prompts = opts.share_prompts }, per) }
  detach(self, entries)
  if not res[1] then error(res[2], 0) end
  -- An intervention of this call whose positions, from/to or only_prompt select no position of
  -- the input did nothing: an error, not a silent no-op (add at positions {10} of a 5-token
  -- input, or -10: negative positions count back from the end of the prompt).
  for _, iv in ipairs(order) do
    local hits, restricted = iv:hits()
    if restricted and hits == 0 and iv:kind() ~= "function" then
      fail(("run_with_hooks: the %s at %s selected no position of the input (its positions, from/to or only_prompt match none; "
        .. "positions are 0-based, negative ones count back from the end of the prompt)"):format(iv:kind(), mine[iv]), 2)
    end
  end
  return res[2], res[3]
end

local function cache_table(names, why)
  local known = {}
  for _, n in ipairs(names) do known[n] = true end
  return setmetatable({}, {
    __index = function(_, k)
      error(("cache: '%s' was not cached%s; cached names: %s"):format(tostring(k), why and (" " .. why) or "",
        table.concat(names, ", ")), 2)
    end,
  })
end

---Logits and a cache of activations: cache[name] is a tensor (`[pos, ...]` for one sequence,
---`[batch, longest, ...]` left-padded with zeros for a list of sequences, which runs as one
---batch with per-sequence captures; patterns and scores
---`[head, pos, k]` / `[batch, head, longest, longest]`). `names`: a name, a pattern, a list of
---them or a predicate (default: every hook point); `positions`: keep only these positions
---(0-based, negative from the end). `stop_at_layer` (TransformerLens's): run the embeddings and
---blocks 0 .. L-1 only, and return the residual stream entering block L (`blocks.L.hook_resid_pre`;
---L = num_hidden_layers: after the last block, before the final norm) in place of the logits,
---`[pos, d_model]` or `[batch, longest, d_model]`; negative L counts from the end. The cache then
---holds only the points the pass reaches (a name past them is left out; reading it is an error
---saying so). Every value is what the whole pass gives, bit for bit; on a CPU the rest of the
---model and the unembedding are not computed (a 20-layer extraction from a 40-layer model costs
---about half), on a GPU the whole pass runs. `start_at_layer = L`: the input is the residual
---entering block L, a `[n, d_model]` tensor or a list of them (see `forward`); the cache holds
---the points of blocks L .. on and ln_final (with `stop_at_layer` too, those in between).
---One sequence without `stop_at_layer` or `start_at_layer` runs through the prompt cache as
---`forward` does: it keeps the residual entering the first block it captures at or its hooks
---act on, and runs from one an earlier call on its tokens kept below its first captured or hooked
---block (`share_prompts = false`: never); the cache's values and the logits are the same bits.
---@param input integer[]|integer[][]|string|seer.Tensor|seer.Tensor[]
---@param opts? {names?: string|string[]|fun(name: string): boolean, positions?: integer[], stop_at_layer?: integer, start_at_layer?: integer, share_prompts?: boolean}
---@return seer.Tensor logits_or_resid, table<string, seer.Tensor> cache
function Model:run_with_cache(input, opts)
  opts = check_opts("run_with_cache", opts, { names = "any", positions = "table", stop_at_layer = "number", start_at_layer = "number", share_prompts = "boolean" })
  local names = match_names(self, opts.names or function() return true end, "run_with_cache", 2)
  local nl = self.config.num_hidden_layers
  local stop = opts.stop_at_layer
  -- start_at_layer: the input is the residual entering that block (one tensor or a list), the
  -- token ids placeholders (never read); the points before the block are never reached
  local start, resids, res_list, placeholders
  if opts.start_at_layer ~= nil then
    start, resids, res_list, placeholders = start_inputs(self, input, opts.start_at_layer, "run_with_cache", 2)
    local kept = {}
    for _, n in ipairs(names) do
      local b = n:match("^blocks%.(%d+)%.")
      if (b and tonumber(b) >= start) or n:find("^ln_final") then kept[#kept + 1] = n end
    end
    names = kept
    input = res_list and placeholders or placeholders[1]
  end
  local resid_name
  if stop ~= nil then
    if stop ~= math.floor(stop) or stop < -nl or stop > nl then
      fail(("run_with_cache: stop_at_layer must be a whole number from %d to %d (negative: from the end), got %s")
        :format(-nl, nl, tostring(stop)), 2)
    end
    if stop < 0 then stop = stop + nl end
    if start and stop < start then
      fail(("run_with_cache: stop_at_layer (%d) is before start_at_layer (%d)"):format(stop, start), 2)
    end
    local kept = {}
    for _, n in ipairs(names) do
      local b, rest = n:match("^blocks%.(%d+)%.(.+)$")
      local reached
      if b then reached = tonumber(b) < stop or (tonumber(b) == stop and rest == "hook_resid_pre")
      else reached = not n:find("^ln_final") end
      if reached then kept[#kept + 1] = n end
    end
    names = kept
    resid_name = stop < nl and ("blocks.%d.hook_resid_pre"):format(stop) or ("blocks.%d.hook_resid_post"):format(nl - 1)
  end
  local I = interventions()
  local function captures()
    local caps, extra = {}, {}
    for i, n in ipairs(names) do
      caps[i] = I.capture(opts.positions and { positions = opts.positions } or nil)
      extra[i] = { n, caps[i] }
    end
    if resid_name then -- the residual returned in place of the logits: every position
      caps.resid = I.capture()
      extra[#extra + 1] = { resid_name, caps.resid }
    end
    return caps, extra
  end
  -- The rows of `positions` in the order given, repeats included: a capture keeps each
  -- position once, in the forward's order, so {-1, 0} came back as {0, -1} and {1, 1} as one
  -- row. Every position must be inside the input (a position past its end used to be dropped
  -- without a word).
  -- (checked before the forward runs; errors name run_with_cache's caller)
  local function rows_for(ids, what)
    if not opts.positions then return nil end
    local n, rows = #ids, {}
    for k, p in pairs(opts.positions) do
      if type(k) ~= "number" or k < 1 or k > #opts.positions or k ~= math.floor(k) then
        fail(("run_with_cache: positions must be a list of positions (it has the key %s)"):format(tostring(k)), 3)
      end
      if type(p) ~= "number" or p ~= math.floor(p) or not (math.abs(p) <= 2 ^ 53) then
        fail(("run_with_cache: positions[%d] must be an integer position (0-based, negative from the end), got %s")
          :format(k, tostring(p)), 3)
      end
    end
    for k, p in ipairs(opts.positions) do
      local at = p < 0 and n + p or p
      if at < 0 or at >= n then
        fail(("run_with_cache: positions[%d] = %d is outside %s's %d tokens (0..%d, or -1..-%d from the end)")
          :format(k, p, what, n, n - 1, n), 3)
      end
      rows[k] = at
    end
    return rows
  end
  local function in_order(t, got, want, dim)
    local row, same = {}, #got == #want
    for r, p in ipairs(got) do row[p] = r end
    for k, p in ipairs(want) do if got[k] ~= p then same = false end end
    if same then return t end
    local parts = {}
    for k, p in ipairs(want) do parts[k] = t:narrow(dim, row[p], 1) end
    return require("seer.tensor").cat(parts, dim)
  end
  local function collect(caps, ids, want)
    local out = {}
    for i, n in ipairs(names) do
      if caps[i]:count() == 0 then
        fail(("run_with_cache: nothing was captured at %s (are the positions inside the %d-token input?)"):format(n, #ids), 4)
      end
      local t, got = caps[i]:read() -- one copy of the captured rows (chunks() copies at each call)
      if want then
        local head_major = n:find("hook_pattern$") or n:find("hook_attn_scores$")
        t = in_order(t, got, want, head_major and 2 or 1)
      end
      out[n] = t
    end
    return out
  end
  local function run_one(ids, b, want)
    local caps, extra = captures()
    local logits
    if stop or start then
      logits = self._c:forward(ids, false, self:_hook_list(extra), b, stop, start, resids and resids[b])
    else -- through the prompt cache, as forward: the captures' block or the hooks' first bounds what it takes
      logits = self:_forward_cached(ids, self:_hook_list(extra), b, opts.share_prompts)
    end
    if resid_name then logits = caps.resid:tensor() end
    return logits, collect(caps, ids, want)
  end
  -- Every sequence of a list in one batched pass, each with its own captures.
  local function run_all(seqs, wants)
    local caps, hooks = {}, {}
    for b = 1, #seqs do
      local extra
      caps[b], extra = captures()
      hooks[b] = self:_hook_list(extra)
    end
    local logits = self._c:forward_batch(seqs, hooks, nil, stop, start, resids)
    if resid_name then
      logits = {}
      for b = 1, #seqs do logits[b] = caps[b].resid:tensor() end
    end
    local per = {}
    for b, s in ipairs(seqs) do per[b] = collect(caps[b], s, wants[b]) end
    return logits, per
  end
  local why = stop and ("(the pass stopped where block %d begins: stop_at_layer = %d)"):format(stop, stop)
  if start then
    why = ("(the pass began at block %d: start_at_layer = %d%s)"):format(start, start, why and (", and " .. why:sub(2, -2)) or "")
  end
  local cache = cache_table(names, why)
  if type(input) == "table" and type(input[1]) == "table" then
    check_list("run_with_cache", input, "sequence", 2)
    local T = require "seer.tensor"
    local seqs, wants, longest = {}, {}, 0
    for b, s in ipairs(input) do
      seqs[b] = to_ids(self, s, "run_with_cache", 3, ("sequence %d"):format(b))
      wants[b] = rows_for(seqs[b], ("sequence %d"):format(b))
      longest = math.max(longest, #seqs[b])
    end
    local logits = T.zeros(#seqs, longest, resid_name and self.config.hidden_size or self.config.vocab_size)
    local ls, per = run_all(seqs, wants)
    for b, s in ipairs(seqs) do logits:select(1, b):narrow(1, longest - #s + 1, #s):copy_(ls[b]) end
    for _, n in ipairs(names) do
      local first = per[1][n]
      local head_major = n:find("hook_pattern$") or n:find("hook_attn_scores$")
      local shape = { #seqs }
      for d = 1, first:dim() do shape[d + 1] = first:size(d) end
      if head_major then
        if not opts.positions then shape[3] = longest end
        shape[4] = longest
      elseif not opts.positions then
        shape[2] = longest
      end
      local t = T.zeros(unpack(shape))
      for b, s in ipairs(seqs) do
        local src, pad = per[b][n], longest - #s
        local dst = t:select(1, b)
        if head_major then
          if not opts.positions then dst = dst:narrow(2, pad + 1, #s) end
          dst = dst:narrow(3, pad + 1, #s)
        elseif not opts.positions then
          dst = dst:narrow(1, pad + 1, #s)
        end
        dst:copy_(src)
      end
      rawset(cache, n, t)
    end
    return logits, cache
  end
  local ids = to_ids(self, input, "run_with_cache")
  local logits, c = run_one(ids, 1, rows_for(ids, "the input"))
  for n, t in pairs(c) do rawset(cache, n, t) end
  return logits, cache
end

---The logit lens: final norm + unembedding (+ Gemma 2's final soft-cap) of residual-stream
---vectors. resid: [..., d_model]; returns [..., vocab] logits.
---@param resid seer.Tensor
---@return seer.Tensor
function Model:unembed(resid)
  local T = require "seer.tensor"
  if not T.is_tensor(resid) then fail("unembed: expected a [..., d_model] tensor, got " .. type(resid), 2) end
  local ok, r = pcall(self._c.unembed, self._c, resid)
  if not ok then fail(r, 2) end
  return r
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
  if not ok then
    if self.hidden then e = tostring(e):gsub(path:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"), "<hidden>") end
    fail(e, 2)
  end
  self.adapter = { path = self.hidden and "<hidden>" or path, merged = opts.merge == true, enabled = true }
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

-- the class, so a caller can tell a seer model from another object with the same methods
M.Model = Model

return M
