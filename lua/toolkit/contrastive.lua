--- toolkit.contrastive: contrast (steering) vectors from two sets of prompts, read at one layer
--- and position with toolkit.extract_activations (the residual after block `layer_idx`,
--- position -1 = each prompt's last token by default).
---
--- - `mean_difference`: mean(positive activations) - mean(negative activations); the sets may
---   differ in size. Not normalized: its norm is the size of the shift between the sets.
--- - `first_principal_component`: the top principal component of the paired differences
---   `pos[i] - neg[i]` (centered, as PCA does; `opts.center = false` for the uncentered second
---   moment), unit norm, its sign chosen so it points along the mean difference. Computed by
---   power iteration on `D^T D` without forming the d x d matrix. Also returns the fraction of
---   variance it explains. Centered, it needs at least two pairs with different differences;
---   otherwise the result is the zero vector (explained 0).
--- - `principal_component(diffs)`: the same on a `[n, d]` tensor you already have.
---
--- ```lua
--- local C = require "toolkit.contrastive"
--- local vec = C.mean_difference(model, tokenizer, { "The dog barked." }, { "The cat meowed." }, 2)
--- local pc, explained = C.first_principal_component(model, tokenizer, pos, neg, 2, -1)
--- ```
local EX = require "toolkit.extract_activations"
local tensor = require "seer.tensor"

local P = require "toolkit.prompts"
local M = {}

-- principal_component's options (first_principal_component passes them on)
local PC_OPTS = { center = "boolean", iterations = "number", tolerance = "number" }

local function check_list(v, name, where)
  if type(v) ~= "table" or #v == 0 then error(("%s: %s must be a non-empty list of prompts"):format(where, name), 3) end
end

---mean(activations of pos_prompts) - mean(activations of neg_prompts) at a layer and position.
---@param model seer.Model
---@param tokenizer? seer.Tokenizer nil: model.tokenizer
---@param pos_prompts toolkit.Input[] texts, message lists or id lists
---@param neg_prompts toolkit.Input[]
---@param layer_idx integer 0-based
---@param position? integer 0-based, negative from the end (default -1)
---@return seer.Tensor vector [d_model]
function M.mean_difference(model, tokenizer, pos_prompts, neg_prompts, layer_idx, position)
  local v = P.keywords("mean_difference", EX.LAYER_POSITION, { layer_idx, position })
  return M._mean_difference(model, tokenizer, pos_prompts, neg_prompts, v[1], v[2], "mean_difference",
    "pos_prompts", "neg_prompts", "pos_prompts[%d]", "neg_prompts[%d]")
end

-- mean_difference for a caller that names itself and its lists in errors (refusal_direction:
-- "harmful", "harmless"), instead of extract_activation's name.
function M._mean_difference(model, tokenizer, pos_prompts, neg_prompts, layer_idx, position, where, pos_name, neg_name, pos_noun, neg_noun)
  check_list(pos_prompts, pos_name, where)
  check_list(neg_prompts, neg_name, where)
  P.check_list(where, pos_prompts, pos_name .. " entry")
  P.check_list(where, neg_prompts, neg_name .. " entry")
  local a = EX._stack(model, tokenizer, pos_prompts, layer_idx, position, where, pos_noun)
  local b = EX._stack(model, tokenizer, neg_prompts, layer_idx, position, where, neg_noun)
  return a:mean(1) - b:mean(1)
end

---The top principal component of the rows of diffs ([n, d]), unit norm, with its sign chosen
---so that it has a non-negative dot product with the mean row. A zero vector (and 0 explained)
---when the rows have no variance.
---@param diffs seer.Tensor [n, d]
---@param opts? {center?: boolean, iterations?: integer, tolerance?: number} center (default true) subtracts the mean row first
---@return seer.Tensor pc [d]
---@return number explained fraction of the total variance along pc (0..1)
---@return number eigenvalue the variance along pc (sum of squares / n)
function M.principal_component(diffs, opts)
  opts = require("seer.checks").options("principal_component", opts, PC_OPTS, 2)
  if not tensor.is_tensor(diffs) or diffs:dim() ~= 2 then error("principal_component: diffs must be a [n, d] tensor", 2) end
  local it, tl = opts.iterations, opts.tolerance
  require("seer.checks").whole("principal_component", "iterations", it, 1, 2 ^ 31, 2)
  if tl ~= nil and not (type(tl) == "number" and tl >= 0 and tl < math.huge) then
    error("principal_component: tolerance must be a finite number >= 0, got " .. tostring(tl), 2)
  end
  local n, d = diffs:size(1), diffs:size(2)
  if n < 1 then error("principal_component: diffs has no rows", 2) end
  local mean = diffs:mean(1)
  local X = diffs:float()
  if opts.center ~= false then X = X - mean end
  local total = (X * X):sum() / n
  -- NaN or infinity in the rows is an error (it was a zero vector, read as "no variance")
  if not (total < math.huge) then error("principal_component: diffs hold NaN or infinite values", 2) end
  if total <= 0 then return tensor.zeros(d), 0, 0 end
  -- A start vector with a component along almost any direction: the mean plus a fixed
  -- irrational-stepped pattern (deterministic, so results are reproducible).
  local start = {}
  for j = 1, d do start[j] = math.sin(j * 1.618034 + 0.5) end
  local v = tensor.from(start)
  local mnorm = mean:norm()
  if mnorm > 0 then v = v / v:norm() + mean / mnorm end
  v = v / v:norm()
  local iters, tol = opts.iterations or 1000, opts.tolerance or 1e-7
  local Xt = X:t():contiguous()
  local lambda = 0
  for _ = 1, iters do
    local w = Xt:matmul(X:matmul(v))
    local wn = w:norm()
    if wn == 0 then return tensor.zeros(d), 0, 0 end
    w = w / wn
    lambda = wn / n
    local delta = (w - v):norm()
    v = w
    if delta < tol then break end
  end
  if v:dot(mean) < 0 then v = -v end
  return v, math.min(1, lambda / total), lambda
end

---The top principal component of the paired differences pos[i] - neg[i] at a layer and
---position (the lists must have the same length), unit norm, pointing along the mean difference.
---@param model seer.Model
---@param tokenizer? seer.Tokenizer
---@param pos_prompts toolkit.Input[]
---@param neg_prompts toolkit.Input[] same length as pos_prompts
---@param layer_idx integer 0-based
---@param position? integer default -1
---@param opts? {center?: boolean, iterations?: integer, tolerance?: number}
---@return seer.Tensor pc [d_model]
---@return number explained fraction of the variance of the differences along pc
function M.first_principal_component(model, tokenizer, pos_prompts, neg_prompts, layer_idx, position, opts)
  local v, rest = P.keywords("first_principal_component", EX.LAYER_POSITION, { layer_idx, position }, opts,
    { other = PC_OPTS })
  layer_idx, position, opts = v[1], v[2], rest
  check_list(pos_prompts, "pos_prompts", "first_principal_component")
  check_list(neg_prompts, "neg_prompts", "first_principal_component")
  if #pos_prompts ~= #neg_prompts then
    error(("first_principal_component: the prompts are paired, so both lists need the same length (got %d and %d)")
      :format(#pos_prompts, #neg_prompts), 2)
  end
  local where = "first_principal_component"
  local a = EX._stack(model, tokenizer, pos_prompts, layer_idx, position, where, "pos_prompts[%d]")
  local b = EX._stack(model, tokenizer, neg_prompts, layer_idx, position, where, "neg_prompts[%d]")
  local pc, explained = M.principal_component(a - b, opts)
  return pc, explained
end

-- argument errors raised inside seer name the caller's line (toolkit.prompts.guard)
for _, k in ipairs({ "mean_difference", "first_principal_component", "principal_component" }) do M[k] = P.guard(M[k]) end

return M
