--- toolkit.activation_patching: activation patching (causal tracing). Run the clean input and
--- cache an activation; run the corrupt input with that activation written back at some
--- positions (`I.replace`, in C); score the patched logits with a metric.
---
--- - `patch(model, clean, corrupt, hook_name, positions, metric)`: one patch; positions is a
---   list of 0-based positions, nil = all. A position p >= 0 patches clean's p onto corrupt's
---   p; a negative one counts from the end of each prompt on its own (-1: clean's last token
---   onto corrupt's last, whatever their lengths); a pair `{clean_pos, corrupt_pos}` maps one
---   clean position onto another corrupt one (either may be negative).
--- - `patch_sweep(model, clean, corrupt, metric, opts)`: every layer x every position of one
---   per-block hook point (default `hook_resid_pre`), one position at a time; a
---   `[#layers, #positions]` tensor of metric values, plus the clean and corrupt baselines.
--- - `logit_difference(good_id, bad_id, position = -1)`: the usual metric, logit of the right
---   token minus logit of the wrong one at a position.
--- Inputs are token ids or text (encoded with the model's tokenizer, BOS added). Clean and
--- corrupt inputs of different lengths need positions (all of them cannot be patched); a
--- patched position must exist in its prompt (an error names the position and the lengths).
---
--- ```lua
--- local AP = require "toolkit.activation_patching"
--- local metric = AP.logit_difference(tok:token_to_id("▁Mary"), tok:token_to_id("▁John"))
--- local v = AP.patch(model, clean, corrupt, "blocks.2.hook_resid_pre", { 3 }, metric)
--- local grid, info = AP.patch_sweep(model, clean, corrupt, metric)   -- [layers, positions]
--- ```
local P = require "toolkit.prompts"
local tensor = require "seer.tensor"

local M = {}

---A metric: logits[position][good_id] - logits[position][bad_id] (ids 0-based, as the tokenizer's).
---@param good_id integer
---@param bad_id integer
---@param position? integer 0-based, negative from the end (default -1)
---@return fun(logits: seer.Tensor): number
function M.logit_difference(good_id, bad_id, position)
  assert(type(good_id) == "number" and type(bad_id) == "number", "logit_difference(good_id, bad_id, position): ids must be numbers")
  return function(logits)
    local row = logits:select(1, P.row(position or -1, logits:size(1), "logit_difference"))
    return row[good_id + 1] - row[bad_id + 1]
  end
end

local function ids_of(model, input, where) return P.encode(model, nil, input, nil, where) end

-- The patch's {clean, corrupt} position pairs (0-based, non-negative): an integer p is p in
-- both prompts, each negative one resolved against its own prompt's length; a pair maps
-- explicitly. Errors name the position, the prompt and its length.
local function resolve(positions, n_clean, n_corrupt, where)
  if type(positions) ~= "table" then
    error(("%s: positions must be a list of positions (0-based, -1 = each prompt's last token) or {clean_pos, corrupt_pos} pairs, got %s"):format(where, type(positions)), 3)
  end
  local hint = n_clean ~= n_corrupt and "; between prompts of different lengths, negative positions count from each prompt's end and a {clean_pos, corrupt_pos} pair maps one onto another" or ""
  local function one(p, n, which, shown)
    if type(p) ~= "number" or p ~= math.floor(p) then
      error(("%s: position %s must be an integer (0 = first token, -1 = last) or a {clean_pos, corrupt_pos} pair"):format(where, shown), 4)
    end
    local r = p >= 0 and p or n + p
    if r < 0 or r >= n then
      error(("%s: position %s is outside the %s prompt of %d tokens (valid: 0..%d or -%d..-1)%s"):format(where, shown, which, n, n - 1, n, hint), 4)
    end
    return r
  end
  local out, seen = {}, {}
  for i, p in ipairs(positions) do
    local c, x
    if type(p) == "table" then
      if #p ~= 2 then error(("%s: positions[%d] must be a {clean_pos, corrupt_pos} pair"):format(where, i), 3) end
      c, x = one(p[1], n_clean, "clean", ("{%s, ...}"):format(tostring(p[1]))), one(p[2], n_corrupt, "corrupt", ("{..., %s}"):format(tostring(p[2])))
    else
      c, x = one(p, n_clean, "clean", tostring(p)), one(p, n_corrupt, "corrupt", tostring(p))
    end
    if seen[x] and seen[x] ~= c then
      error(("%s: corrupt position %d is patched from two clean positions (%d and %d)"):format(where, x, seen[x], c), 3)
    end
    seen[x] = c
    out[#out + 1] = { c, x }
  end
  if #out == 0 then error(where .. ": positions is empty; give at least one (or nil for every position)", 3) end
  return out
end

-- The intervention that writes the clean activation at each pair's clean position onto its
-- corrupt position (I.replace, in C): the saved rows as they are when the positions agree, else
-- re-ordered onto the corrupt positions.
local function patch_at(I, saved, hook_name, pairs_, where)
  local same, at, src, last = true, {}, {}, 0
  for i, pr in ipairs(pairs_) do
    same = same and pr[1] == pr[2]
    at[i], src[pr[2]] = pr[2], pr[1]
    last = math.max(last, pr[2])
  end
  if same then return I.replace(saved, { positions = at }) end
  if hook_name:match("hook_pattern$") or hook_name:match("hook_attn_scores$") then
    error(("%s: %s is [head, query, key]: its rows cannot move to other positions (their keys are the clean prompt's); "
      .. "patch it at positions that are the same in both prompts (non-negative ones), or patch hook_z"):format(where, hook_name), 3)
  end
  local rows = {}
  for q = 0, last do rows[q + 1] = saved:narrow(1, (src[q] or 0) + 1, 1) end -- rows not patched are never read
  return I.replace(tensor.cat(rows, 1), { positions = at })
end

local function score(metric, logits, where)
  local v = metric(logits)
  if type(v) ~= "number" then error(where .. ": metric(logits) must return a number, got " .. type(v), 3) end
  return v
end

---Patches the clean run's activation at hook_name into the corrupt run and scores it.
---@param model seer.Model
---@param clean_input string|integer[]
---@param corrupt_input string|integer[]
---@param hook_name string an exact hook name, e.g. "blocks.3.hook_resid_post"
---@param positions? (integer|integer[])[] 0-based positions to patch, negative ones from the end of each prompt, or {clean_pos, corrupt_pos} pairs (nil = every position; the prompts must then have one length)
---@param metric fun(logits: seer.Tensor): number logits of the patched corrupt run, [n, vocab]
---@return number value metric of the patched run
---@return seer.Tensor logits the patched run's logits
function M.patch(model, clean_input, corrupt_input, hook_name, positions, metric)
  local where = "patch"
  P.need(model, "run_with_cache", where)
  if type(hook_name) ~= "string" then error(where .. ": hook_name must be a hook name string", 2) end
  if type(metric) ~= "function" then error(where .. ": metric must be a function(logits) -> number", 2) end
  local I = require "seer.interventions"
  local clean, corrupt = ids_of(model, clean_input, where .. ": the clean input"), ids_of(model, corrupt_input, where .. ": the corrupt input")
  if not positions and #clean ~= #corrupt then
    error(("%s: clean (%d tokens) and corrupt (%d tokens) differ in length; pass positions"):format(where, #clean, #corrupt), 2)
  end
  local known = false
  for _, n in ipairs(model:hook_names()) do known = known or n == hook_name end
  if not known then error(where .. ": '" .. hook_name .. "' is not a hook name of this model (model:hook_names() lists them)", 2) end
  local _, cache = model:run_with_cache(clean, { names = { hook_name } })
  local saved = cache[hook_name]
  if saved == nil then error(where .. ": '" .. hook_name .. "' is not an exact hook name (see model:hook_names())", 2) end
  local iv = positions and patch_at(I, saved, hook_name, resolve(positions, #clean, #corrupt, where), where) or I.replace(saved)
  local logits = model:run_with_hooks(corrupt, { fwd_hooks = { { hook_name, iv } } })
  return score(metric, logits, where), logits
end

---Patches one per-block hook point at every (layer, position) pair, one pair per run.
---@param model seer.Model
---@param clean_input string|integer[]
---@param corrupt_input string|integer[]
---@param metric fun(logits: seer.Tensor): number
---@param opts? {point?: string, layers?: integer[], positions?: integer[], progress?: boolean} point: per-block hook name without "blocks.{i}." (default "hook_resid_pre"); layers: default all; positions: default 0..n-1 (the prompts must have one length), else as patch's (negative from the end of each prompt, or {clean_pos, corrupt_pos} pairs); progress: a layer line on a terminal (false: never)
---@return seer.Tensor results [#layers, #positions], results[i][j] the metric for layers[i], positions[j]
---@return {layers: integer[], positions: integer[], clean: number, corrupt: number} info the axes and the unpatched baselines
function M.patch_sweep(model, clean_input, corrupt_input, metric, opts)
  local where = "patch_sweep"
  opts = opts or {}
  if type(opts) ~= "table" then error(where .. ": options must be a table, got " .. type(opts), 2) end
  local valid = { point = "string", layers = "table", positions = "table", progress = "boolean" }
  for k, v in pairs(opts) do
    if not valid[k] then error(("%s: unknown option '%s'; valid options: layers, point, positions, progress"):format(where, tostring(k)), 2) end
    if type(v) ~= valid[k] then error(("%s: option '%s' must be a %s, got %s"):format(where, k, valid[k], type(v)), 2) end
  end
  P.need(model, "run_with_cache", where)
  if type(metric) ~= "function" then error(where .. ": metric must be a function(logits) -> number", 2) end
  local I = require "seer.interventions"
  local clean, corrupt = ids_of(model, clean_input, where .. ": the clean input"), ids_of(model, corrupt_input, where .. ": the corrupt input")
  local point = opts.point or "hook_resid_pre"
  local layers = {}
  if opts.layers then
    for i, l in ipairs(opts.layers) do layers[i] = P.layer(model, l, where) end
  else
    for l = 0, model.config.num_hidden_layers - 1 do layers[#layers + 1] = l end
  end
  local positions = opts.positions
  if not positions then
    if #clean ~= #corrupt then
      error(("%s: clean (%d tokens) and corrupt (%d tokens) differ in length; pass opts.positions"):format(where, #clean, #corrupt), 2)
    end
    positions = {}
    for p = 0, #corrupt - 1 do positions[#positions + 1] = p end
  end
  local pairs_ = resolve(positions, #clean, #corrupt, where)
  local names = {}
  for i, l in ipairs(layers) do names[i] = ("blocks.%d.%s"):format(l, point) end
  local clean_logits, cache = model:run_with_cache(clean, { names = names })
  -- the corrupt run's residual entering each patched block: a patch at block l changes nothing
  -- before it, so each layer's batch begins there (start_at_layer) instead of at the embeddings,
  -- with the bits a whole patched pass gives (a GPU model runs whole passes)
  -- An active hook at a block's hook_resid_pre (model:with_hooks, add_hook) has already acted on
  -- the residual captured there, and a pass beginning at that block applies it again (a second
  -- ablation moves the bits): that layer's batch runs whole passes. Found by
  -- tests/lua/test_fuzz_batch.lua.
  local starts, hooked = {}, {}
  for _, e in ipairs(type(model._hook_list) == "function" and model:_hook_list() or {}) do hooked[e[1]] = true end
  if model.device == "cpu" and model.run_with_hooks then
    for i, l in ipairs(layers) do
      local at = ("blocks.%d.hook_resid_pre"):format(l)
      if not hooked[at] then starts[i] = at end
    end
  end
  local start_names = {}
  for i = 1, #layers do start_names[#start_names + 1] = starts[i] end -- (starts may have holes)
  local corrupt_logits, corrupt_cache = model:run_with_cache(corrupt, { names = start_names })
  local info = {
    layers = layers, positions = positions,
    clean = score(metric, clean_logits, where),
    corrupt = score(metric, corrupt_logits, where),
  }
  local out = tensor.zeros(#layers, #positions)
  -- One batch per layer: a copy of the corrupt input per position, each with its own patch
  -- (model:run_with_hooks per_sequence; each run's logits are exactly those of running it alone).
  local n = #corrupt
  -- layers x positions forward passes: minutes for a real model on a CPU
  local bar = require("seer.progress").new(where, opts.progress)
  for i, name in ipairs(names) do
    bar:update("layer %d/%d (%d positions each)", i - 1, #names, #positions)
    local saved = cache[name]
    if saved == nil then error(where .. ": no hook point " .. name, 2) end
    local inputs, per = {}, {}
    local from = starts[i] and corrupt_cache[starts[i]]
    for j, pr in ipairs(pairs_) do
      inputs[j] = from or corrupt
      per[j] = { { name, patch_at(I, saved, name, { pr }, where) } }
    end
    local logits = model:run_with_hooks(inputs, { per_sequence = per, start_at_layer = from and layers[i] or nil })
    for j = 1, #positions do out[{ i, j }] = score(metric, logits:select(1, j):narrow(1, logits:size(2) - n + 1, n), where) end
  end
  bar:finish("layer %d/%d (%d positions each)", #names, #names, #positions)
  return out, info
end

-- argument errors raised inside seer name the caller's line (toolkit.prompts.guard)
for _, k in ipairs({ "patch", "patch_sweep" }) do M[k] = P.guard(M[k]) end

return M
