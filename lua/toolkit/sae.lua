--- toolkit.sae: sparse autoencoders on residual-stream activations: train a small one, load a
--- published one (SAELens-style safetensors: W_enc [d, m], b_enc [m], W_dec [m, d], b_dec [d]),
--- encode, decode, and find the features that differ most between two sets of activations
--- (checkpoint diffing, behaviour diffs).
---
--- ```lua
--- local SAE = require "toolkit.sae"
--- local sae = SAE.train(acts, { features = 256, l1 = 3e-3, steps = 400, seed = 0 })   -- acts [n, d]
--- local z = sae:encode(acts)                    -- [n, m], sparse, non-negative
--- print(sae:stats(acts))                        -- {mse, explained, l0, dead}
--- sae:save("sae.safetensors"); local again = SAE.load("sae.safetensors")
--- for _, f in ipairs(SAE.diff(sae, acts_a, acts_b, 10)) do print(f.feature, f.mean_a, f.mean_b) end
--- ```
--- Training is plain Adam on squared error + l1 * sum|z| over activations scaled to a mean norm
--- of sqrt(d_model), with the decoder's rows kept at unit norm (so the l1 penalty cannot be dodged
--- by shrinking codes); gradients are written out by hand (one layer each way); the scale is
--- folded back into the weights. Seeded: the same inputs and seed give the same SAE. On
--- stories260K (1,260 layer-3 activations, 256 features, the defaults) it explains 92% of the
--- variance with about 8 active features per token, in ~3.5 s.
local tensor = require "seer.tensor"

local M = {}

local SAE = {}
SAE.__index = SAE

local function check_acts(x, where, d)
  if not tensor.is_tensor(x) or x:dim() ~= 2 then error(where .. ": activations must be a [n, d_model] tensor", 3) end
  if d and x:size(2) ~= d then error(("%s: activations have width %d, the SAE %d"):format(where, x:size(2), d), 3) end
  return x:float():contiguous()
end

-- The activations for encode: [n, d] or one [d] vector (returned as [1, d], and whether it was 1-d).
local function encode_input(self, x, where)
  if not tensor.is_tensor(x) or (x:dim() ~= 1 and x:dim() ~= 2) then
    error(("%s: activations must be a [n, d_model] tensor or one [d_model] vector, got %s"):format(
      where, tensor.is_tensor(x) and ("a %d-d tensor"):format(x:dim()) or type(x)), 3)
  end
  local one = x:dim() == 1
  local w = x:size(x:dim())
  if w ~= self.d then
    error(("%s: activations have width %d, the SAE %d (it expects d_model = %d: W_enc is [%d, %d], d_model x features%s)")
      :format(where, w, self.d, self.d, self.d, self.m,
        w == self.m and "; these look like feature codes: did you mean sae:decode? If the encoder was stored [features, d_model] as torch.nn.Linear stores it, load with transpose_enc = true"
          or "; an encoder stored [features, d_model], as torch.nn.Linear stores it, loads with SAE.load(path, {transpose_enc = true})"), 3)
  end
  if one then x = x:reshape(1, w) end
  return x:float():contiguous(), one
end

local function unit_rows(w)
  local n = w:norm(2, 2, true):clamp(1e-8)
  return w / n
end

---Codes for activations x [n, d] (or one [d] vector -> [m]): f((x - b_dec) W_enc + b_enc), [n, m],
---where b_dec is subtracted only when `apply_b_dec_to_input` (SAELens's option; see SAE.load) and f
---is ReLU, or JumpReLU when the SAE has a `threshold` (relu(pre) where pre > threshold, else 0, as
---SAELens and Gemma Scope compute it).
function SAE:encode(x)
  local one
  x, one = encode_input(self, x, "sae:encode")
  if self.apply_b_dec_to_input then x = x - self.b_dec end
  local pre = x:matmul(self.W_enc) + self.b_enc
  local z = pre:relu()
  if self.threshold then z = z * pre:gt(self.threshold):float() end
  if one then z = z:reshape(self.m) end
  return z
end

---Reconstructions from codes z [n, m] (or one [m] vector -> [d]): z W_dec + b_dec, [n, d].
function SAE:decode(z)
  if not tensor.is_tensor(z) or (z:dim() ~= 1 and z:dim() ~= 2) then
    error(("sae:decode: codes must be a [n, features] tensor or one [features] vector, got %s"):format(
      tensor.is_tensor(z) and ("a %d-d tensor"):format(z:dim()) or type(z)), 2)
  end
  local w = z:size(z:dim())
  if w ~= self.m then
    error(("sae:decode: codes have width %d, the SAE has %d features (W_dec is [%d, %d], features x d_model%s)")
      :format(w, self.m, self.m, self.d,
        w == self.d and "; these look like activations: did you mean sae:encode? If the decoder was stored [d_model, features] as torch.nn.Linear stores it, load with transpose_dec = true"
          or "; a decoder stored [d_model, features], as torch.nn.Linear stores it, loads with SAE.load(path, {transpose_dec = true})"), 2)
  end
  if z:dim() == 1 then return (z:float():reshape(1, w):matmul(self.W_dec) + self.b_dec):reshape(self.d) end
  return z:float():matmul(self.W_dec) + self.b_dec
end

---How well the SAE fits x: mse, explained (1 - mse / variance), l0 (mean active features per
---row), dead (features never active on x).
function SAE:stats(x)
  x = check_acts(x, "sae:stats", self.d)
  local z = self:encode(x)
  local e = self:decode(z) - x
  local mse = (e * e):mean()
  local centered = x - x:mean(1, true)
  local var = (centered * centered):mean()
  local active = z:gt(0):float()
  local per_feature = active:sum(1)
  local dead = 0
  for i = 1, self.m do if per_feature[i] == 0 then dead = dead + 1 end end
  return { mse = mse, explained = 1 - mse / math.max(var, 1e-12), l0 = active:sum() / x:size(1), dead = dead }
end

---Saves as safetensors (W_enc, b_enc, W_dec, b_dec, and threshold for a JumpReLU SAE) with the
---training settings and apply_b_dec_to_input as metadata, so SAE.load gives back the same encoder.
function SAE:save(path)
  local t = { W_enc = self.W_enc, b_enc = self.b_enc, W_dec = self.W_dec, b_dec = self.b_dec, threshold = self.threshold }
  tensor.save(path, t, { format = "seer-sae", d_model = tostring(self.d), features = tostring(self.m),
                         apply_b_dec_to_input = tostring(self.apply_b_dec_to_input == true) })
end

local LOAD_OPTIONS = { "W_enc", "b_enc", "W_dec", "b_dec", "threshold", "transpose_enc", "transpose_dec", "apply_b_dec_to_input" }

-- A SAELens cfg.json beside the weights (SAELens saves a folder of sae_weights.safetensors +
-- cfg.json), decoded, or nil.
local function read_cfg(path)
  local dir = path:match("^(.*)/[^/]*$") or "."
  local cfg_path = dir .. "/cfg.json"
  local f = io.open(cfg_path, "r")
  if not f then return nil end
  local text = f:read("*a")
  f:close()
  local ok, cfg = pcall(require("seer.json").decode, text)
  if not ok or type(cfg) ~= "table" then
    error(("toolkit.sae.load: %s is not valid JSON (%s); fix or move it, or pass apply_b_dec_to_input explicitly")
      :format(cfg_path, tostring(cfg)), 3)
  end
  return cfg, cfg_path
end

---Loads an SAE from safetensors with W_enc [d, m], b_enc [m], W_dec [m, d], b_dec [d] and, for a
---JumpReLU SAE (SAELens `jumprelu`, Gemma Scope), threshold [m] (the SAELens names; `opts` maps
---other names: {W_enc = "encoder.weight", ...}, with `transpose_enc` / `transpose_dec` for
---[m, d] encoders or [d, m] decoders as torch.nn.Linear stores them).
---`apply_b_dec_to_input` (subtract b_dec from the input before encoding, SAELens's option) comes
---from the option when given, else from a SAELens cfg.json next to the file, else the default
---for the format: false for an SAE saved by sae:save (seer-sae metadata: as trained), false for a
---file with a threshold (Gemma Scope's JumpReLU encodes x directly), false when the tensors are
---under mapped names (torch.nn.Linear encoders), and true (SAELens's default) for a file with the
---SAELens names. `sae.apply_b_dec_to_input` and `sae.threshold` say what was loaded.
---@param path string
---@param opts? {W_enc?: string, b_enc?: string, W_dec?: string, b_dec?: string, threshold?: string, transpose_enc?: boolean, transpose_dec?: boolean, apply_b_dec_to_input?: boolean}
function M.load(path, opts)
  if type(path) ~= "string" then error("toolkit.sae.load: expected a path to a .safetensors file, got " .. type(path), 2) end
  opts = opts or {}
  if type(opts) ~= "table" then error("toolkit.sae.load: options must be a table, got " .. type(opts), 2) end
  local valid = {}
  for _, k in ipairs(LOAD_OPTIONS) do valid[k] = true end
  for k, v in pairs(opts) do
    if not valid[k] then
      error(("toolkit.sae.load: unknown option '%s'; valid options: %s"):format(tostring(k), table.concat(LOAD_OPTIONS, ", ")), 2)
    end
    local boolean = k == "transpose_enc" or k == "transpose_dec" or k == "apply_b_dec_to_input"
    if boolean and type(v) ~= "boolean" then
      error(("toolkit.sae.load: option '%s' must be true or false, got %s"):format(k, tostring(v)), 2)
    elseif not boolean and type(v) ~= "string" then
      error(("toolkit.sae.load: option '%s' must be the name of a tensor in the file, got %s"):format(k, tostring(v)), 2)
    end
  end
  local ok, t, meta = pcall(tensor.load, path)
  if not ok then error(("toolkit.sae.load: %s"):format(tostring(t):gsub("^[^\n]-:%d+: ", "")), 2) end
  meta = meta or {}
  local function get(k, optional)
    local v = t[opts[k] or k]
    if not v and k == "threshold" and not opts.threshold and t.log_threshold then
      return t.log_threshold:float():exp():contiguous() -- SAELens training checkpoints keep log(threshold)
    end
    if not v then
      if optional then return nil end
      local have = {}
      for n in pairs(t) do have[#have + 1] = n end
      table.sort(have)
      error(("toolkit.sae.load: %s has no tensor %q (it has: %s); pass names = {%s = \"...\"}"):format(
        path, opts[k] or k, table.concat(have, ", "), k), 3)
    end
    return v:float():contiguous()
  end
  local W_enc, W_dec = get("W_enc"), get("W_dec")
  if opts.transpose_enc then W_enc = W_enc:t():contiguous() end
  if opts.transpose_dec then W_dec = W_dec:t():contiguous() end
  local b_enc, b_dec = get("b_enc"), get("b_dec")
  local threshold = get("threshold", true)
  local function dims(x) return table.concat(x:size(), ", ") end
  if W_enc:dim() ~= 2 or W_dec:dim() ~= 2 then
    error(("toolkit.sae.load: %s: W_enc and W_dec must be matrices (W_enc [%s], W_dec [%s])"):format(path, dims(W_enc), dims(W_dec)), 2)
  end
  local d, m = W_enc:size(1), W_enc:size(2)
  if W_dec:size(1) ~= m or W_dec:size(2) ~= d or b_enc:dim() ~= 1 or b_enc:size(1) ~= m or b_dec:dim() ~= 1 or b_dec:size(1) ~= d
     or (threshold and (threshold:dim() ~= 1 or threshold:size(1) ~= m)) then
    error(("toolkit.sae.load: %s: shapes do not fit an SAE (W_enc [%d, %d], W_dec [%s], b_enc [%s], b_dec [%s]%s); an SAE "
      .. "has W_enc [d_model, features], W_dec [features, d_model], b_enc and threshold [features], b_dec [d_model]; "
      .. "weights stored as torch.nn.Linear stores them ([out, in]) load with transpose_enc = true / transpose_dec = true"):format(
      path, d, m, dims(W_dec), dims(b_enc), dims(b_dec), threshold and (", threshold [" .. dims(threshold) .. "]") or ""), 2)
  end
  -- apply_b_dec_to_input: the option, a SAELens cfg.json beside the file, or the format's default
  local apply = opts.apply_b_dec_to_input
  local cfg, cfg_path = read_cfg(path)
  if cfg then
    local arch = cfg.architecture
    if arch ~= nil and arch ~= "standard" and arch ~= "jumprelu" then
      error(("toolkit.sae.load: %s says architecture %q; toolkit.sae encodes 'standard' (ReLU) and 'jumprelu' SAEs only"):format(
        cfg_path, tostring(arch)), 2)
    end
    if arch == "jumprelu" and not threshold then
      error(("toolkit.sae.load: %s says architecture 'jumprelu' but %s has no threshold tensor (pass threshold = \"<name>\")"):format(
        cfg_path, path), 2)
    end
    local norm = cfg.normalize_activations
    if norm ~= nil and norm ~= "none" and norm ~= false then
      error(("toolkit.sae.load: %s says normalize_activations = %q; toolkit.sae does not rescale inputs, so its codes would "
        .. "not be this SAE's (normalize the activations yourself and move cfg.json aside)"):format(cfg_path, tostring(norm)), 2)
    end
    if apply == nil and cfg.apply_b_dec_to_input ~= nil then
      if type(cfg.apply_b_dec_to_input) ~= "boolean" then
        error(("toolkit.sae.load: %s: apply_b_dec_to_input must be true or false, got %s"):format(cfg_path, tostring(cfg.apply_b_dec_to_input)), 2)
      end
      apply = cfg.apply_b_dec_to_input
    end
  end
  if apply == nil then
    if meta.format == "seer-sae" then apply = meta.apply_b_dec_to_input == "true"
    elseif threshold then apply = false                                -- Gemma Scope's JumpReLU
    elseif opts.W_enc or opts.b_enc or opts.W_dec or opts.b_dec then apply = false -- nn.Linear layouts
    else apply = true end                                              -- SAELens's default
  end
  return setmetatable({ W_enc = W_enc, b_enc = b_enc, W_dec = W_dec, b_dec = b_dec, threshold = threshold, d = d, m = m,
                        apply_b_dec_to_input = apply }, SAE)
end

---Trains an SAE on activations x [n, d].
---@param x seer.Tensor
---@param opts? {features?: integer, l1?: number, steps?: integer, lr?: number, batch?: integer, seed?: integer, on_step?: fun(step: integer, loss: number), progress?: boolean} defaults: 4 x d features, l1 1, 400 steps, lr 0.01, batch 256, seed 0; progress: a step/loss line on a terminal (false: never)
function M.train(x, opts)
  opts = opts or {}
  x = check_acts(x, "sae.train")
  local n, d = x:size(1), x:size(2)
  if type(opts) ~= "table" then error("sae.train: options must be a table, got " .. type(opts), 2) end
  local VALID = { features = true, l1 = true, steps = true, lr = true, batch = true, seed = true, on_step = true, progress = true }
  for k in pairs(opts) do
    if not VALID[k] then
      error(("sae.train: unknown option '%s'; valid options: batch, features, l1, lr, on_step, progress, seed, steps"):format(tostring(k)), 2)
    end
  end
  -- every option checked by name before any work: a NaN learning rate or l1 trained an SAE of
  -- NaNs without a word, a fractional feature count failed deep inside randn
  local function whole(k, lo) require("seer.checks").whole("sae.train", ("option '%s'"):format(k), opts[k], lo, 2 ^ 31, 3) end
  local function real(k, lo, strict)
    local v = opts[k]
    if v ~= nil and not (type(v) == "number" and v < math.huge and (v > lo or (not strict and v == lo))) then
      error(("sae.train: option '%s' must be a finite number %s %s, got %s"):format(k, strict and ">" or ">=", lo, tostring(v)), 3)
    end
  end
  whole("features", 1); whole("steps", 1); whole("batch", 1); whole("seed", 0)
  real("lr", 0, true); real("l1", 0, false)
  if opts.on_step ~= nil and type(opts.on_step) ~= "function" then error("sae.train: option 'on_step' must be a function", 2) end
  if opts.progress ~= nil and type(opts.progress) ~= "boolean" then error("sae.train: option 'progress' must be a boolean", 2) end
  if n < 1 then error("sae.train: the activations have no rows", 2) end
  local total = x:abs():sum()
  if not (total < math.huge) then error("sae.train: the activations hold NaN or infinite values", 2) end
  local m = opts.features or 4 * d
  local l1, steps, lr = opts.l1 or 1, opts.steps or 400, opts.lr or 1e-2
  local batch = math.min(opts.batch or 256, n)
  local seed = opts.seed or 0
  -- Train on activations scaled to a mean row norm of sqrt(d) (as SAELens does), so the l1
  -- default fits any model; the scale is folded back into the weights at the end.
  local scale = x:norm(2, 2):mean() / math.sqrt(d)
  if scale <= 0 then error("sae.train: the activations are all zero", 2) end
  x = x / scale
  local W_dec = unit_rows(tensor.randn({ m, d }, { seed = seed }))
  local p = { W_enc = W_dec:t():contiguous(), b_enc = tensor.zeros(m), W_dec = W_dec, b_dec = x:mean(1) }
  local adam = {}
  for k, v in pairs(p) do adam[k] = { m = tensor.zeros(v:size()), v = tensor.zeros(v:size()) } end
  local b1, b2, eps = 0.9, 0.999, 1e-8
  -- the rows once in a seeded shuffled order; batches are consecutive slices of it (wrapping)
  local _, order = tensor.rand({ n }, { seed = seed + 1 }):topk(n, 1, true)
  local rows = {}
  for i, r in ipairs(order:totable()) do rows[i] = x:select(1, r + 1) end
  local xs = tensor.stack(rows)
  local nb = math.floor(n / batch)
  local loss
  local bar = require("seer.progress").new("sae.train", opts.progress)
  for step = 1, steps do
    local xb = xs:narrow(1, ((step - 1) % nb) * batch + 1, batch)
    local pre = xb:matmul(p.W_enc) + p.b_enc
    local z = pre:relu()
    local e = z:matmul(p.W_dec) + p.b_dec - xb
    loss = (e * e):sum() / batch + l1 * z:sum() / batch
    local dxh = e * (2 / batch)
    local g = {}
    g.W_dec = z:t():matmul(dxh)
    g.b_dec = dxh:sum(1)
    local dz = dxh:matmul(p.W_dec:t()) + (l1 / batch)
    local dpre = dz * pre:gt(0):float()
    g.W_enc = xb:t():matmul(dpre)
    g.b_enc = dpre:sum(1)
    local c1, c2 = 1 - b1 ^ step, 1 - b2 ^ step
    for k, v in pairs(p) do
      local a = adam[k]
      a.m:mul_(b1):add_(g[k] * (1 - b1))
      a.v:mul_(b2):add_(g[k] * g[k] * (1 - b2))
      v:sub_((a.m / c1) / ((a.v / c2):sqrt() + eps) * lr)
    end
    p.W_dec = unit_rows(p.W_dec)
    if opts.on_step then opts.on_step(step, loss) end
    -- training a wide SAE takes minutes on a CPU: a progress line on a terminal
    bar:update("step %d/%d, loss %.4g", step, steps, loss)
  end
  bar:finish("step %d/%d, loss %.4g", steps, steps, loss)
  local sae = setmetatable({ W_enc = p.W_enc / scale, b_enc = p.b_enc, W_dec = p.W_dec * scale, b_dec = p.b_dec * scale,
                             d = d, m = m, scale = scale, apply_b_dec_to_input = false }, SAE)
  sae.final_loss = loss
  return sae
end

---The features whose mean activation differs most between activations a [n1, d] and b [n2, d]:
---a list of {feature (0-based), mean_a, mean_b, delta = mean_b - mean_a, freq_a, freq_b}
---sorted by |delta|, the k largest.
local function check_k(where, k) require("seer.checks").whole(where, "k", k, 1, 2 ^ 31, 3) end

function M.diff(sae, a, b, k)
  check_k("sae.diff", k)
  local za, zb = sae:encode(a), sae:encode(b)
  local ma, mb = za:mean(1), zb:mean(1)
  local fa, fb = za:gt(0):float():mean(1), zb:gt(0):float():mean(1)
  local delta = mb - ma
  local _, top = delta:abs():topk(math.min(k or 10, sae.m))
  local out = {}
  for _, f in ipairs(top:totable()) do
    out[#out + 1] = { feature = f, mean_a = ma[f + 1], mean_b = mb[f + 1], delta = delta[f + 1], freq_a = fa[f + 1], freq_b = fb[f + 1] }
  end
  return out
end

---The rows of x (with their labels, e.g. tokens) on which a feature fires most: {label, value}.
function M.top_activations(sae, x, labels, feature, k)
  check_k("sae.top_activations", k)
  if not (type(feature) == "number" and feature == math.floor(feature) and feature >= 0 and feature < sae.m) then
    error(("sae.top_activations: feature must be a 0-based feature index from 0 to %d, got %s"):format(sae.m - 1, tostring(feature)), 2)
  end
  local z = sae:encode(x):select(2, feature + 1)
  local vals, idx = z:topk(math.min(k or 5, z:size(1)))
  local out = {}
  local vt = vals:totable()
  for i, r in ipairs(idx:totable()) do out[i] = { label = labels and labels[r + 1] or r, value = vt[i] } end
  return out
end

return M
