--- toolkit.extract_activations: residual-stream activations of a prompt at a layer and position.
--- The activation of layer `layer_idx` is the output of decoder block `layer_idx`, i.e. the hook
--- point `blocks.{layer_idx}.hook_resid_post` = Hugging Face `hidden_states[layer_idx + 1]` (for
--- the last layer, the output before the final norm, which transformers' last entry has applied).
--- Layers and positions are 0-based names (position 0 = the first token, BOS; -1 = the last
--- token; negative layers count from the last layer too). A chat (`{{role = ..., content = ...}}`)
--- is rendered with the chat template plus the generation prompt; a string is encoded as is
--- with BOS (see toolkit.prompts). Hooks that are active (`model:with_hooks`) apply. The
--- reference's keyword arguments are a table in the last argument:
--- `extract_activation(model, tok, text, {layer_idx = 15, position = -1})`.
---
--- ```lua
--- local ex = require "toolkit.extract_activations"
--- local v = ex.extract_activation(model, tokenizer, "I love dogs.", 2)          -- [d_model], last token
--- local b = ex.extract_activations(model, tokenizer, { "a dog", "a cat" }, 2)   -- [2, d_model]
--- local l = ex.extract_layers(model, tokenizer, "I love dogs.")                  -- [layers, d_model]
--- ```
local P = require "toolkit.prompts"
local tensor = require "seer.tensor"

-- A seer model (its run_with_cache takes lists and stop_at_layer): activations come from a pass
-- that stops after the deepest layer asked for (no later block, no unembedding: the same bits),
-- and a list of inputs runs in batches of BATCH (one pass over the weights for each, every
-- input's rows the bits it gets alone).
local BATCH = 16
local function seer_model(model)
  return getmetatable(model) == require("seer.model").Model
end
local function deepest(layers)
  local d = layers[1]
  for _, l in ipairs(layers) do d = math.max(d, l) end
  return d
end

local M = {}

---Residual-stream tensors after the given (0-based, checked) layers for one token sequence:
---a table layer -> [n, d_model], or -> [d_model] at one position when `position` is given
---(0-based, negative from the end; only that row is kept). Uses model:run_with_cache when the
---model has it (active hooks apply), else model:forward(ids, {hidden_states = true}).
---@param model seer.Model
---@param ids integer[]
---@param layers integer[] 0-based layer numbers
---@param position? integer
---@return table<integer, seer.Tensor>
function M.residuals(model, ids, layers, position)
  local out = {}
  if position ~= nil then P.row(position, #ids, "extract_activations") end
  if type(model.run_with_cache) == "function" then
    local names = {}
    for i, l in ipairs(layers) do names[i] = ("blocks.%d.hook_resid_post"):format(l) end
    local _, cache = model:run_with_cache(ids, { names = names, positions = position and { position } or nil,
      stop_at_layer = seer_model(model) and deepest(layers) + 1 or nil })
    for i, l in ipairs(layers) do
      out[l] = position and cache[names[i]]:select(1, 1) or cache[names[i]]
    end
  else
    local _, hidden = model:forward(ids, { hidden_states = true })
    -- hidden[1] is the embedding output, hidden[l + 2] the residual after layer l, except the
    -- last entry, which is after the final norm (as transformers' output_hidden_states)
    for _, l in ipairs(layers) do
      if l + 2 >= #hidden then
        error(("extract_activations: layer %d (the last) needs model:run_with_cache: hidden_states has it only after the final norm"):format(l), 4)
      end
      out[l] = position and hidden[l + 2]:select(1, P.row(position, #ids)) or hidden[l + 2]
    end
  end
  return out
end

-- The parameters after the input that may also be given as a table in the last argument
-- (the reference's keywords: `extract_activation(model, tok, text, {layer_idx = 15})`).
local LAYER_POSITION = { "layer_idx", "position" }
M.LAYER_POSITION = LAYER_POSITION

local function all_layers(model)
  local t = {}
  for l = 0, model.config.num_hidden_layers - 1 do t[#t + 1] = l end
  return t
end

local function check_layers(model, layers, where)
  if layers == nil then return all_layers(model) end
  if type(layers) == "number" then layers = { layers } end
  if type(layers) ~= "table" then
    error(("%s: layers must be a 0-based layer number or a list of them, got %s"):format(where, type(layers)), 3)
  end
  local t = {}
  for i, l in ipairs(layers) do t[i] = P.layer(model, l, where) end
  if #t == 0 then error(where .. ": the list of layers is empty", 3) end
  return t
end

---The residual stream after block layer_idx at one position: a [d_model] f32 tensor (a copy).
---@param model seer.Model
---@param tokenizer? seer.Tokenizer nil: model.tokenizer
---@param input toolkit.Input text, a message list, or token ids
---@param layer_idx integer|{layer_idx?: integer, position?: integer} 0-based layer (negative: from the last layer); or the reference's keywords as a table
---@param position? integer|{position?: integer} 0-based token position, negative from the end (default -1, the last token)
---@return seer.Tensor activation [d_model]
function M.extract_activation(model, tokenizer, input, layer_idx, position)
  local v = P.keywords("extract_activation", LAYER_POSITION, { layer_idx, position })
  return M._one(model, tokenizer, input, v[1], v[2], "extract_activation")
end

-- One input's activation; errors name `where` (the public function the user called:
-- extract_activations, mean_difference, refusal_direction...) and `label`, which input of a list.
function M._one(model, tokenizer, input, layer_idx, position, where, label)
  local l = P.layer(model, layer_idx, where)
  local named = label and (where .. ": " .. label) or where
  local ids = P.encode(model, tokenizer, input, nil, named)
  position = position or -1
  P.row(position, #ids, named)
  return M.residuals(model, ids, { l }, position)[l]:clone()
end

-- 'input 2 ("The cat sat...")': which entry of a list, for an error (noun: "input %d").
local function label_of(noun, i, input)
  local label = noun:format(i)
  if type(input) == "string" then
    local s = input:gsub("%s+", " ")
    if #s > 40 then s = s:sub(1, 37) .. "..." end
    return ("%s (%q)"):format(label, s)
  end
  return label
end

-- One activation per input, stacked ([batch, d_model]); errors name `where` and the input
-- (noun "harmful prompt %d": "harmful prompt 3").
function M._stack(model, tokenizer, inputs, layer_idx, position, where, noun)
  local rows = {}
  if not seer_model(model) then
    for i, input in ipairs(inputs) do
      rows[i] = M._one(model, tokenizer, input, layer_idx, position, where, label_of(noun or "input %d", i, input))
    end
    return tensor.stack(rows)
  end
  -- every input encoded and checked before the first pass, so a bad one late in the list fails
  -- before any work
  local l = P.layer(model, layer_idx, where)
  position = position or -1
  local ids = {}
  for i, input in ipairs(inputs) do
    local label = label_of(noun or "input %d", i, input)
    ids[i] = P.encode(model, tokenizer, input, nil, where .. ": " .. label)
    P.row(position, #ids[i], where .. ": " .. label)
  end
  local name = ("blocks.%d.hook_resid_post"):format(l)
  for first = 1, #ids, BATCH do
    local chunk = {}
    for i = first, math.min(first + BATCH - 1, #ids) do chunk[#chunk + 1] = ids[i] end
    local _, cache = model:run_with_cache(chunk, { names = { name }, positions = { position }, stop_at_layer = l + 1 })
    local t = cache[name] -- [#chunk, 1, d_model]
    for k = 1, #chunk do rows[first + k - 1] = t:select(1, k):select(1, 1):clone() end
  end
  return tensor.stack(rows)
end

---The reference's `get_layer_activations(model, tokenizer, text, layer)`: the output of decoder
---layer `layer` at the last token, which is `extract_activation(model, tokenizer, text, layer)`.
---`layer` may also be given as `{layer = 20}` (the reference's keyword; any other name is refused).
---@param model seer.Model
---@param tokenizer? seer.Tokenizer
---@param input toolkit.Input
---@param layer integer|{layer: integer}
---@return seer.Tensor activation [d_model]
function M.get_layer_activations(model, tokenizer, input, layer)
  layer = P.keywords("get_layer_activations", { "layer" }, { layer })[1]
  if type(layer) ~= "number" then
    error("get_layer_activations(model, tokenizer, text, layer): layer must be a 0-based layer number", 2)
  end
  return M.extract_activation(model, tokenizer, input, layer, -1)
end

---One activation per input, stacked: a [batch, d_model] tensor. Each input runs on its own
---(exact: no padding), and position counts within each input (-1 = each input's last token).
---@param model seer.Model
---@param tokenizer? seer.Tokenizer
---@param inputs toolkit.Input[] texts, message lists or id lists
---@param layer_idx integer|{layer_idx?: integer, position?: integer} or the keywords as a table
---@param position? integer|{position?: integer} default -1
---@return seer.Tensor activations [batch, d_model]
function M.extract_activations(model, tokenizer, inputs, layer_idx, position)
  if type(inputs) ~= "table" or #inputs == 0 or P.is_messages(inputs) then
    error("extract_activations: expected a non-empty list of inputs (texts, message lists or id lists)", 2)
  end
  P.check_list("extract_activations", inputs, "input")
  local v = P.keywords("extract_activations", LAYER_POSITION, { layer_idx, position })
  return M._stack(model, tokenizer, inputs, v[1], v[2], "extract_activations", "input %d")
end

---The residual stream after several layers at one position: a [#layers, d_model] tensor, row i
---for layers[i]. layers: a list of 0-based layers, one layer, or nil for every layer (then row
---i is layer i - 1).
---@param model seer.Model
---@param tokenizer? seer.Tokenizer
---@param input toolkit.Input
---@param layers? integer[]|integer|{layers?: integer[]|integer, position?: integer} or the keywords as a table (one with names)
---@param position? integer|{position?: integer} default -1
---@return seer.Tensor activations [#layers, d_model]
function M.extract_layers(model, tokenizer, input, layers, position)
  local where = "extract_layers"
  local v = P.keywords(where, { "layers", "position" }, { layers, position }, nil, { lists = { layers = true } })
  layers, position = v[1], v[2]
  local ls = check_layers(model, layers, where)
  local ids = P.encode(model, tokenizer, input, nil, where)
  position = position or -1
  P.row(position, #ids, where)
  local res = M.residuals(model, ids, ls, position)
  local rows = {}
  for i, l in ipairs(ls) do rows[i] = res[l] end
  return tensor.stack(rows)
end

-- argument errors raised inside seer name the caller's line (toolkit.prompts.guard)
for _, k in ipairs({ "residuals", "extract_activation", "get_layer_activations", "extract_activations", "extract_layers" }) do M[k] = P.guard(M[k]) end

return M
