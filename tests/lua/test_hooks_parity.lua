-- Hooked forward passes against Hugging Face transformers with equivalent torch hooks, on the
-- parity models: steering additions, directional ablation, activation patching, zeroed and
-- scaled heads, scaled MLP activations, and a capture of every hook point of layer 1, all within
-- 1e-4 max abs. The cases are tests/parity/hooks_cases.json (seer hook names and intervention
-- parameters); the goldens are <model>/hooks.safetensors beside the parity models, made by
-- tests/parity/hooks_goldens.py (SEER_PARITY_DIR points elsewhere: make parity regenerates them).
-- SEER_PARITY_VERBOSE=1 prints the max abs differences of every case.
local T = require "testing"
local tensor = require "seer.tensor"

local here = seer.script_dir()
local dir = os.getenv("SEER_PARITY_DIR") or (here .. "/../parity/models")
local spec = seer.json.decode(seer.read_file(here .. "/../parity/hooks_cases.json"))
local TOL = spec.tolerance

-- Every architecture's base parity model. The variants (bf16 checkpoints, llama_mlp_bias,
-- gemma3_softcap, the Gemma 3 multimodal layouts) run the same forward code with the same hook
-- points, and their forward parity is test_parity.lua's.
local function is_variant(n)
  return n:match("_bf16$") or n == "llama_mlp_bias" or n == "gemma3_softcap" or n:match("^gemma3_multimodal")
    or n == "qwen2_yarn" or n == "llama_dynamic" or n == "granite" or n == "olmo2" or n:match("^phi3") -- granite, olmo2, phi3: the Llama decoder's hook points
end
local names = {}
local p = io.popen("ls '" .. dir .. "' 2>/dev/null")
for n in p:lines() do
  local f = io.open(dir .. "/" .. n .. "/config.json")
  if f and not is_variant(n) then names[#names + 1] = n end
  if f then f:close() end
end
p:close()

local supported = {}
for n in seer.model.supported():gmatch("[%w_]+") do supported[n] = true end

local function list(t)
  if t == nil then return nil end
  local out = {}
  for i, v in ipairs(t) do out[i] = v end
  return out
end

local function shape(t)
  return "[" .. table.concat(t:size(), ", ") .. "]"
end

-- Compares got against want; a failure line goes into errs. Returns the max abs difference.
local function compare(errs, what, got, want)
  if got == nil then
    errs[#errs + 1] = what .. ": missing (want " .. shape(want) .. ")"
    return math.huge
  end
  if shape(got) ~= shape(want) then
    errs[#errs + 1] = ("%s: shape %s, want %s"):format(what, shape(got), shape(want))
    return math.huge
  end
  local d = (got - want):abs():max()
  if not (d <= TOL) then errs[#errs + 1] = ("%s: max abs diff %g"):format(what, d) end
  return d
end

local VERBOSE = os.getenv("SEER_PARITY_VERBOSE") -- print every case's max diffs, passing or not

local function finish(errs, diffs, label)
  if VERBOSE then io.write(("  %s: %s\n"):format(label, table.concat(diffs, ", "))) end
  if #errs > 0 then
    error(("%s (tolerance %g; max diffs: %s):\n  %s"):format(label, TOL, table.concat(diffs, ", "),
      table.concat(errs, "\n  ")), 0)
  end
end

-- One loaded model and its goldens per parity model, shared by that model's cases.
local loaded = {}
local function load(name)
  if loaded[name] then return loaded[name] end
  local cfg = seer.json.decode(seer.read_file(dir .. "/" .. name .. "/config.json"))
  if not supported[cfg.model_type] then
    T.skip(("model_type %s is not implemented yet (supported: %s)"):format(cfg.model_type, seer.model.supported()))
  end
  local path = dir .. "/" .. name .. "/hooks.safetensors"
  local f = io.open(path)
  T.ok(f, "no hook goldens at " .. path .. " (run tests/parity/hooks_goldens.py)")
  f:close()
  local m = {
    cfg = cfg,
    hooks = tensor.load(path),
    golden = tensor.load(dir .. "/" .. name .. "/golden.safetensors"),
    model = seer.model.load(dir .. "/" .. name, { tokenizer = false }),
  }
  m.ids = m.golden.tokens:totable()
  m.n_layers = cfg.num_hidden_layers or cfg.n_layer
  loaded[name] = m
  return m
end

local function interventions()
  local ok, I = pcall(require, "seer.interventions")
  T.ok(ok, "require 'seer.interventions' failed: " .. tostring(I))
  return I
end

-- The seer intervention for a case of hooks_cases.json (for a replace case, the clean run's cache
-- is checked against the golden too).
local function intervention(I, m, case, errs, diffs)
  local opts = { positions = list(case.positions), from = case.from, to = case.to }
  if case.kind == "add" then
    opts.strength = case.strength
    return I.add(m.hooks[case.vec]:clone():flatten(), opts) -- a per-head point's row is heads * d_head
  elseif case.kind == "ablate" then
    return I.ablate(m.hooks[case.dir]:clone(), opts)
  elseif case.kind == "replace" then
    local _, cache = m.model:run_with_cache(m.hooks[case.clean_ids]:totable(), { names = case.hook })
    local d = compare(errs, "clean run " .. case.hook, cache[case.hook], m.hooks[case.clean])
    diffs[#diffs + 1] = ("clean %.2g"):format(d)
    return I.replace(cache[case.hook], opts)
  elseif case.kind == "scale" then
    opts.heads = list(case.heads)
    return I.scale(case.factor, opts)
  elseif case.kind == "zero_heads" then
    return I.zero_heads(list(case.heads), opts)
  end
  error("unknown case kind " .. tostring(case.kind))
end

local function run_intervention_case(name, case)
  local m = load(name)
  local I = interventions()
  local errs, diffs = {}, {}
  local hooks = { { case.hook, intervention(I, m, case, errs, diffs) } }
  local what = ("%s case %s (%s %s)"):format(name, case.id, case.kind, case.hook)

  local logits = m.model:run_with_hooks(m.ids, { fwd_hooks = hooks })
  diffs[#diffs + 1] = ("logits %.2g"):format(compare(errs, "run_with_hooks logits", logits, m.hooks[case.id .. ".logits"]))

  if case.resid then
    local logits2, cache
    m.model:with_hooks(hooks, function()
      logits2, cache = m.model:run_with_cache(m.ids, { names = "hook_resid_post$" })
    end)
    compare(errs, "with_hooks + run_with_cache logits", logits2, m.hooks[case.id .. ".logits"])
    for i = 0, m.n_layers - 1 do
      local hname = ("blocks.%d.hook_resid_post"):format(i)
      local d = compare(errs, hname, cache[hname], m.hooks[("%s.resid.%d"):format(case.id, i)])
      diffs[#diffs + 1] = ("resid.%d %.2g"):format(i, d)
    end
  end

  -- the hooks are gone afterwards: a plain forward is the unhooked golden again
  local plain = m.model:forward(m.ids)
  compare(errs, "forward after the hooked runs (hooks left behind?)", plain, m.golden.logits)
  finish(errs, diffs, what)
end

local function run_capture_case(name, case)
  local m = load(name)
  interventions()
  local errs, diffs = {}, {}
  local want, absent = {}, {}
  for _, hname in ipairs(case.names) do
    if m.hooks[case.id .. "." .. hname] then want[#want + 1] = hname else absent[#absent + 1] = hname end
  end
  local logits, cache = m.model:run_with_cache(m.ids, { names = want })
  compare(errs, "run_with_cache logits", logits, m.golden.logits)
  for _, hname in ipairs(want) do
    local d = compare(errs, hname, cache[hname], m.hooks[case.id .. "." .. hname])
    diffs[#diffs + 1] = ("%s %.2g"):format(hname, d)
  end
  -- points transformers does not have for this architecture are not seer hook names either
  local have = {}
  for _, hname in ipairs(m.model:hook_names()) do have[hname] = true end
  for _, hname in ipairs(absent) do
    if have[hname] then errs[#errs + 1] = hname .. ": seer has this hook point, the architecture should not" end
  end
  finish(errs, diffs, ("%s case %s (capture)"):format(name, case.id))
end

T.test("hook parity models are present", function()
  T.ok(#names >= 10, "expected the parity models in " .. dir .. ", found " .. #names)
end)

for _, name in ipairs(names) do
  for _, case in ipairs(spec.cases) do
    T.test(("hooks parity: %s %s %s"):format(name, case.id, case.kind), function()
      if case.kind == "capture" then run_capture_case(name, case) else run_intervention_case(name, case) end
    end)
  end
end
