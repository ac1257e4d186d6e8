--- toolkit.steering_hook: activation steering. Adds `strength * vector` to the output of decoder
--- block `layer_idx` (hook point `blocks.{layer_idx}.hook_resid_post`) at every absolute position
--- >= `start_pos`, in every forward pass and at every generation step, generated tokens
--- included (position 0 = the first token, BOS; a negative start_pos counts back from the end of
--- the prompt). The addition is seer's built-in `I.add` intervention, so it runs in C with no Lua
--- call per token.
---
--- `steering_hook` is scoped (like the reference's `with steering_hook(...)`): the hook exists
--- while `fn` runs and is removed when it returns or raises. `add_steering_hook` is persistent
--- and returns a handle with `:remove()`.
---
--- ```lua
--- local steer = require "toolkit.steering_hook"
--- local text = steer.steering_hook(model, 2, vec, 4.0, 0, function()
---   return model:generate("Once upon a time", { max_new_tokens = 40 }).text
--- end)
--- steer.steering_hook(model, 2, vec, function() ... end)   -- strength 1, start_pos 0
--- local h = steer.add_steering_hook(model, 2, vec, 4.0)    -- until h:remove()
--- ```
local P = require "toolkit.prompts"
local tensor = require "seer.tensor"

local M = {}

---The hook point steering_hook writes to.
---@param layer_idx integer 0-based (negative: from the last layer)
---@param model? seer.Model used to resolve a negative layer
---@return string
function M.hook_name(layer_idx, model)
  if model then layer_idx = P.layer(model, layer_idx, "steering_hook") end
  return ("blocks.%d.hook_resid_post"):format(layer_idx)
end

local function check_vector(model, vector, where)
  if type(vector) == "table" then vector = tensor.from(vector) end
  if not tensor.is_tensor(vector) then error(where .. ": vector must be a tensor (or a list of numbers), got " .. type(vector), 3) end
  local d = model.config.hidden_size
  if vector:dim() ~= 1 or vector:size(1) ~= d then
    local shape = table.concat(vector:size(), ", ")
    error(("%s: vector must have shape [%d] (d_model), got [%s]"):format(where, d, shape), 3)
  end
  return vector
end

local function intervention(model, layer_idx, vector, strength, start_pos, where)
  local I = require "seer.interventions"
  strength = strength or 1.0
  start_pos = start_pos or 0
  if type(strength) ~= "number" then error(where .. ": strength must be a number, got " .. type(strength), 3) end
  if strength ~= strength or strength == math.huge or strength == -math.huge then
    error(where .. ": strength must be a finite number, got " .. tostring(strength), 3)
  end
  if type(start_pos) ~= "number" or start_pos ~= math.floor(start_pos) then
    error(where .. ": start_pos must be an integer (0-based absolute position), got " .. tostring(start_pos), 3)
  end
  local name = M.hook_name(P.layer(model, layer_idx, where))
  return name, I.add(check_vector(model, vector, where), { strength = strength, from = start_pos })
end

-- The hook for a public function: what is wrong with its arguments (the layer, the vector, the
-- strength, here or in the checks it calls) is raised at the line that called that function.
local checked_intervention = P.guard(intervention, 1)

-- The parameters after the model, in order; each may also be given in a table as the last
-- argument (the reference's keywords: `create_steering_hook(model, layer_idx=20,
-- vector=v, strength=2.0)` is `steering_hook(model, {layer_idx = 20, vector = v, strength = 2.0}, fn)`).
local NAMES = { "layer_idx", "vector", "strength", "start_pos" }

-- layer_idx, vector, strength, start_pos from the arguments after the model (args, n of them),
-- and the function to run when `with_fn`: the last argument given, so strength and start_pos
-- may be left out before it.
local function arguments(where, with_fn, n, args)
  local fn
  if with_fn then
    local last = n
    while last > 0 and args[last] == nil do last = last - 1 end
    if type(args[last]) ~= "function" then
      error(where .. ": the last argument must be the function to run while steering (use add_steering_hook for a persistent hook)", 0)
    end
    fn, n = args[last], last - 1
  end
  while n > 0 and args[n] == nil do n = n - 1 end
  if n > #NAMES then
    error(("%s: too many arguments: after the model come layer_idx, vector, strength, start_pos%s"):format(where,
      with_fn and " and the function" or ""), 0)
  end
  local given = {}
  for i = 1, n do given[i] = args[i] end
  local v = P.keywords(where, NAMES, given, nil, { lists = { vector = true } })
  return v[1], v[2], v[3], v[4], fn
end
local checked_arguments = P.guard(arguments, 1)

---Runs fn with the steering hook in place and returns what fn returns; the hook is removed
---when fn returns or raises (the error is re-raised). strength and start_pos may be left out:
---`steering_hook(model, layer, vec, fn)`, `steering_hook(model, layer, vec, 2.0, fn)`. The
---arguments after the model may also be given as a table before fn, as the reference's
---keywords: `steering_hook(model, {layer_idx = 2, vector = vec, strength = 2.0}, fn)`,
---`steering_hook(model, 2, vec, {strength = 2.0, start_pos = 1}, fn)`.
---@param model seer.Model
---@param layer_idx integer|table 0-based layer whose output is steered (or the options table)
---@param vector seer.Tensor|number[]|table [d_model] (or the options table)
---@param strength? number|table|function default 1.0
---@param start_pos? integer|table|function first absolute position steered (default 0)
---@param fn? function what to run while steering
---@return any ... fn's results
function M.steering_hook(model, layer_idx, vector, strength, start_pos, fn, ...)
  local where = "steering_hook"
  layer_idx, vector, strength, start_pos, fn = checked_arguments(where, true, 5 + select("#", ...),
    { layer_idx, vector, strength, start_pos, fn, ... })
  P.need(model, "with_hooks", where)
  local name, hook = checked_intervention(model, layer_idx, vector, strength, start_pos, where)
  return model:with_hooks({ { name, hook } }, fn)
end

---Adds the steering hook until `handle:remove()` (or `model:reset_hooks()`). The arguments
---after the model may also be given as a table in the last argument (`{layer_idx = 2,
---vector = vec, strength = 4.0}`), as for steering_hook.
---@param model seer.Model
---@param layer_idx integer|table
---@param vector seer.Tensor|number[]|table [d_model]
---@param strength? number|table default 1.0
---@param start_pos? integer|table default 0
---@return table handle with :remove()
function M.add_steering_hook(model, layer_idx, vector, strength, start_pos, ...)
  local where = "add_steering_hook"
  layer_idx, vector, strength, start_pos = checked_arguments(where, false, 4 + select("#", ...),
    { layer_idx, vector, strength, start_pos, ... })
  P.need(model, "add_hook", where)
  local name, hook = checked_intervention(model, layer_idx, vector, strength, start_pos, where)
  return model:add_hook(name, hook)
end

---The reference's name for the scoped form (`create_steering_hook`); same arguments as
---steering_hook.
M.create_steering_hook = M.steering_hook

-- steering_sweep's own options (besides generate_response's: seed, top_p, stop, chat, ...)
local SWEEP_OPTS = { start_pos = true, samples = true, max_new_tokens = true, temperature = true, max_batch = true,
  chat_template = true, texts = true }

---Every prompt at every steering strength (and `samples` seeds), generated in one batched run:
---model:generate_batch, one pass over the weights per step for the whole sweep, each sequence
---with its own strength. `texts[s][p]` is exactly (bit for bit, the same tokens) what
---`steering_hook(model, layer_idx, vector, strengths[s], start_pos, function() return
---generate_response(model, tokenizer, prompts[p], max_new_tokens, temperature, opts) end)`
---returns, with `opts.seed` the same for every strength and prompt (common random numbers: a
---difference between strengths is the steering's, not the sampler's). With `samples = n`,
---`texts[s][p]` is a list of n texts, sample k seeded `seed + k - 1`. A sweep steering from the
---first new token on (start_pos past the prompt, as `-1` is not) computes each prompt once for
---all its strengths (generate_batch's shared prompts).
---
---```lua
---local texts = steer.steering_sweep(model, nil, { "I think that", "The weather" }, 6, vec,
---  { -4, 0, 4, 8 }, { max_new_tokens = 40, temperature = 0, start_pos = 0 })
---print(texts[3][1])   -- strength 4, first prompt
---```
---@param model seer.Model
---@param tokenizer? seer.Tokenizer nil: model.tokenizer
---@param prompts toolkit.Input[] strings, message lists or token ids (generate_response's rules)
---@param layer_idx integer 0-based layer whose output is steered
---@param vector seer.Tensor|number[] [d_model]
---@param strengths number[] one run of every prompt per strength (0: unsteered, the control)
---@param opts? toolkit.GenerateOpts|{start_pos?: integer, samples?: integer, max_new_tokens?: integer, temperature?: number, max_batch?: integer, texts?: boolean} start_pos default 0; samples default 1; max_new_tokens default 256 and temperature 0.7 (generate_response's); max_batch: sequences at a time (default 16); texts = false: no decoding, only the ids (a model without a tokenizer, token-id prompts)
---@return table|nil texts texts[s][p]: a string, or with samples > 1 a list of strings (nil with texts = false)
---@return table ids the new token ids, indexed as texts
function M.steering_sweep(model, tokenizer, prompts, layer_idx, vector, strengths, opts)
  local where = "steering_sweep"
  local G = require "toolkit.generate_response"
  P.need(model, "generate_batch", where)
  if type(prompts) ~= "table" or P.is_messages(prompts) or type(prompts[1]) == "number" or tensor.is_tensor(prompts) then
    error(where .. ": prompts must be a list of prompts (each a string, a message list or token ids)", 2)
  end
  if P.check_list(where, prompts, "prompt") == 0 then error(where .. ": prompts is empty", 2) end
  if type(strengths) ~= "table" or tensor.is_tensor(strengths) then
    error(where .. ": strengths must be a list of numbers, got " .. (tensor.is_tensor(strengths) and "a tensor" or type(strengths)), 2)
  end
  if P.check_list(where, strengths, "strength") == 0 then error(where .. ": strengths is empty", 2) end
  if opts ~= nil and type(opts) ~= "table" then error(where .. ": opts must be a table, got " .. type(opts), 2) end
  local gen, own = G.split_opts(opts, where, SWEEP_OPTS)
  if gen.stream then error(where .. ": stream is not supported (the sweep's sequences run together)", 2) end
  local checks = require "seer.checks"
  if own.texts ~= nil and type(own.texts) ~= "boolean" then error(where .. ": texts must be a boolean", 2) end
  local decode = own.texts ~= false
  local samples = own.samples or 1
  checks.whole(where, "samples", samples, 1, 2 ^ 20, 1, true)
  checks.whole(where, "max_new_tokens", own.max_new_tokens, 0, 2 ^ 31 - 1, 1, true)
  local seed = gen.seed or 0
  if type(seed) ~= "number" or seed ~= math.floor(seed) or seed < 0 then error(where .. ": seed must be a non-negative integer", 2) end
  -- one intervention per strength (each checked: a strength that is not a finite number is named)
  local hooks = {}
  for s, strength in ipairs(strengths) do
    if type(strength) ~= "number" then error(("%s: strength %d is a %s, not a number"):format(where, s, type(strength)), 2) end
    local name, hook = checked_intervention(model, layer_idx, vector, strength, own.start_pos, where)
    hooks[s] = { { name, hook } }
  end
  local ids = {}
  for p, prompt in ipairs(prompts) do
    ids[p] = G.prompt_ids(model, tokenizer, prompt, own.chat, own.chat_template, ("%s: prompt %d"):format(where, p))
  end
  -- sequence order: strength, then prompt, then sample
  local list, per = {}, {}
  for s = 1, #strengths do
    for p = 1, #prompts do
      for k = 1, samples do
        list[#list + 1] = ids[p]
        per[#list] = { seed = seed + k - 1, hooks = hooks[s] }
      end
    end
  end
  local o = { per_sequence = per, max_batch = own.max_batch }
  for k, v in pairs(gen) do if k ~= "seed" then o[k] = v end end
  o.max_new_tokens = own.max_new_tokens or 256
  o.temperature = own.temperature or 0.7
  local ok, outs = pcall(model.generate_batch, model, list, o)
  if not ok then
    -- generate_batch names a sequence of the batch (per_sequence[k], prompt k, sequence k): say
    -- which strength, prompt and sample that is
    local msg = tostring(outs)
    local k = tonumber(msg:match("per_sequence%[(%d+)%]") or msg:match("[Ss]equence (%d+)") or msg:match("prompt (%d+)"))
    if k and k >= 1 and k <= #list then
      local s_, rest = math.floor((k - 1) / (#prompts * samples)) + 1, (k - 1) % (#prompts * samples)
      local p_, j = math.floor(rest / samples) + 1, rest % samples + 1
      msg = ("strength %d (%s), prompt %d%s: %s"):format(s_, tostring(strengths[s_]), p_,
        samples > 1 and (", sample " .. j) or "", msg)
    end
    error(where .. ": " .. msg, 2)
  end
  local texts, out_ids, i = {}, {}, 0
  for s = 1, #strengths do
    texts[s], out_ids[s] = {}, {}
    for p = 1, #prompts do
      local ts, is = {}, {}
      for k = 1, samples do
        i = i + 1
        ts[k], is[k] = decode and G.decode(model, tokenizer, outs[i].ids, o.stop) or nil, outs[i].ids
      end
      if samples == 1 then texts[s][p], out_ids[s][p] = ts[1], is[1]
      else texts[s][p], out_ids[s][p] = ts, is end
    end
  end
  return decode and texts or nil, out_ids
end
M.steering_sweep = P.guard(M.steering_sweep)

return M
