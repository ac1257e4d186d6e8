--- toolkit.logit_lens: what each layer's residual stream would predict if it were the last one.
--- The residual after block l (`blocks.{l}.hook_resid_post`, or another point given as
--- `opts.point`) at one position goes through the model's own final norm and unembedding
--- (`model:unembed`), and the top-k tokens of its softmax are returned per layer. At the last
--- layer this is exactly the model's own next-token distribution.
---
--- ```lua
--- local LL = require "toolkit.logit_lens"
--- for _, r in ipairs(LL.logit_lens(model, tokenizer, "Once upon a time", { k = 3 })) do
---   print(r.layer, table.concat(r.tokens, " | "), r.probs[1])
--- end
--- ```
local P = require "toolkit.prompts"

local M = {}

---@class toolkit.LensRow
---@field layer integer 0-based layer
---@field ids integer[] top-k token ids (0-based), most likely first
---@field tokens string[] each id decoded on its own
---@field probs number[] their probabilities under the lens
---@field logits seer.Tensor the lens logits at the position, [vocab]

---Top-k lens predictions per layer at one position.
---@param model seer.Model
---@param tokenizer? seer.Tokenizer nil: model.tokenizer (without one, tokens are not filled in)
---@param input toolkit.Input text, a message list or token ids
---@param opts? {layers?: integer[], position?: integer, k?: integer, point?: string} layers default all; position default -1; k default 5; point default "hook_resid_post"
---@return toolkit.LensRow[] rows one per layer, in the order of opts.layers
function M.logit_lens(model, tokenizer, input, opts)
  local where = "logit_lens"
  opts = require("seer.checks").options(where, opts, { layers = "any", position = "number", k = "number", point = "any" }, 2)
  P.need(model, "run_with_cache", where)
  P.need(model, "unembed", where)
  local tok = tokenizer or model.tokenizer
  local ids = P.encode(model, tok, input, nil, where)
  local row = P.row(opts.position or -1, #ids, where)
  local k = opts.k or 5
  require("seer.checks").whole(where, "k", k, 1, 2 ^ 31, 2) -- the top tokens per layer
  local point = opts.point or "hook_resid_post"
  if type(point) ~= "string" then error(where .. ": point must be a hook point name such as \"hook_resid_post\", got " .. type(point), 2) end
  local layers = {}
  if opts.layers ~= nil then
    if type(opts.layers) ~= "table" or #opts.layers == 0 then
      error(where .. ": layers must be a non-empty list of 0-based layers (leave it out for every layer)", 2)
    end
    for i, l in ipairs(opts.layers) do layers[i] = P.layer(model, l, where) end
  else
    for l = 0, model.config.num_hidden_layers - 1 do layers[#layers + 1] = l end
  end
  local names = {}
  for i, l in ipairs(layers) do names[i] = ("blocks.%d.%s"):format(l, point) end
  local _, cache = model:run_with_cache(ids, { names = names })
  local rows = {}
  for i, l in ipairs(layers) do
    local act = cache[names[i]]
    if act == nil then error(where .. ": no hook point " .. names[i], 2) end
    local logits = model:unembed(act:select(1, row):contiguous())
    local probs, top = logits:softmax():topk(math.min(k, logits:size(1)))
    local r = { layer = l, ids = top:totable(), probs = probs:totable(), logits = logits, tokens = {} }
    if tok then
      for j, id in ipairs(r.ids) do r.tokens[j] = tok:decode({ id }) end
    end
    rows[i] = r
  end
  return rows
end

-- argument errors raised inside seer name the caller's line (toolkit.prompts.guard)
for _, k in ipairs({ "logit_lens" }) do M[k] = P.guard(M[k]) end

return M
