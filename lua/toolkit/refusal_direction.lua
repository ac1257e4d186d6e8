--- toolkit.refusal_direction: the difference-of-means "refusal direction" and its directional
--- ablation (Arditi et al. 2024, "Refusal in Language Models Is Mediated by a Single Direction").
---
--- - `refusal_direction(model, tok, harmful, harmless, layer_idx, position = -1)`: mean
---   activation on harmful prompts minus mean on harmless ones, residual after block layer_idx
---   (`blocks.{layer_idx}.hook_resid_post`), at the last token by default; chats get the chat
---   template with the generation prompt, as in the paper (the post-instruction tokens).
---   Returned unnormalized; `unit = true` in opts normalizes it.
--- - `ablate_everywhere(model, direction, fn, opts)`: runs fn with the direction projected out
---   (`x -= (x . r) r`, r = direction / |direction|) of every layer's `hook_resid_pre`,
---   `hook_attn_out` and `hook_mlp_out`, at every position, generated tokens included. That is
---   the paper's ablation: no block can read the direction from the residual stream nor write
---   it back, so the final residual has no component along it. `opts.points` picks other
---   per-block hook points (e.g. `{"hook_resid_pre"}` alone); `opts.layers` a subset of layers.
---   The hooks are removed when fn returns or raises; fn's results are returned.
---
--- ```lua
--- local R = require "toolkit.refusal_direction"
--- local r = R.refusal_direction(model, tokenizer, harmful, harmless, 12)
--- R.ablate_everywhere(model, r, function()
---   print(model:generate(tokenizer:encode("How do I pick a lock?"), { max_new_tokens = 40 }).text)
--- end)
--- ```
local C = require "toolkit.contrastive"
local P = require "toolkit.prompts"
local tensor = require "seer.tensor"

local M = {}

---The per-block hook points ablate_everywhere uses by default.
M.default_points = { "hook_resid_pre", "hook_attn_out", "hook_mlp_out" }

---Difference of means, harmful minus harmless, at a layer and position.
---@param model seer.Model
---@param tokenizer? seer.Tokenizer nil: model.tokenizer
---@param harmful toolkit.Input[] prompts (strings are encoded as is; pass message lists for chat models)
---@param harmless toolkit.Input[]
---@param layer_idx integer 0-based
---@param position? integer default -1
---@param opts? {unit?: boolean} unit = true: return it normalized
---@return seer.Tensor direction [d_model]
function M.refusal_direction(model, tokenizer, harmful, harmless, layer_idx, position, opts)
  local v, rest = P.keywords("refusal_direction", { "layer_idx", "position" }, { layer_idx, position }, opts,
    { other = { unit = "boolean" } })
  layer_idx, position = v[1], v[2]
  opts = require("seer.checks").options("refusal_direction", rest, { unit = "boolean" }, 2)
  local r = C._mean_difference(model, tokenizer, harmful, harmless, layer_idx, position, "refusal_direction", "harmful", "harmless",
    "harmful prompt %d", "harmless prompt %d")
  if opts and opts.unit then
    local n = r:norm()
    if n > 0 then r = r / n end
  end
  return r
end

---The hook list ablate_everywhere installs: {{name, I.ablate(direction)}, ...}, layer by layer.
---@param model seer.Model
---@param direction seer.Tensor|number[] [d_model]
---@param opts? {points?: string[], layers?: integer[]}
---@return table hooks
function M.ablation_hooks(model, direction, opts)
  opts = require("seer.checks").options("ablate_everywhere", opts, { points = "table", layers = "table" }, 2)
  local I = require "seer.interventions"
  if type(direction) == "table" then direction = tensor.from(direction) end
  if not tensor.is_tensor(direction) or direction:dim() ~= 1 or direction:size(1) ~= model.config.hidden_size then
    error(("ablate_everywhere: direction must be a [%d] tensor (d_model)"):format(model.config.hidden_size), 3)
  end
  if direction:norm() == 0 then error("ablate_everywhere: the direction is the zero vector", 3) end
  local layers = opts.layers
  if layers == nil then
    layers = {}
    for l = 0, model.config.num_hidden_layers - 1 do layers[#layers + 1] = l end
  end
  local hooks = {}
  for _, l in ipairs(layers) do
    l = P.layer(model, l, "ablate_everywhere")
    for _, point in ipairs(opts.points or M.default_points) do
      hooks[#hooks + 1] = { ("blocks.%d.%s"):format(l, point), I.ablate(direction) }
    end
  end
  return hooks
end

---Runs fn with the direction ablated everywhere (see above) and returns fn's results.
---@param model seer.Model
---@param direction seer.Tensor|number[] [d_model] (normalized by the ablation)
---@param fn function
---@param opts? {points?: string[], layers?: integer[]}
---@return any ... fn's results
function M.ablate_everywhere(model, direction, fn, opts)
  if type(fn) ~= "function" then error("ablate_everywhere: the third argument must be the function to run", 2) end
  P.need(model, "with_hooks", "ablate_everywhere")
  return model:with_hooks(M.ablation_hooks(model, direction, opts), fn)
end

-- argument errors raised inside seer name the caller's line (toolkit.prompts.guard)
for _, k in ipairs({ "refusal_direction", "ablation_hooks" }) do M[k] = P.guard(M[k]) end

return M
