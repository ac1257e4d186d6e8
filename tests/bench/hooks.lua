-- make bench: the cost of hooks on a forward pass, measured in one process against the same
-- forward with no hooks: every block's hook_resid_post captured (run_with_cache), a built-in
-- add at one layer, the same add at every layer, and a Lua function hook at every layer.
-- Usage: seer tests/bench/hooks.lua MODEL_DIR PREFILL_TOKENS DECODE_TOKENS
-- Prints one line per case: name, prefill ms, decode ms/token, overhead % against no hooks.
local dir, prefill, decode = arg[1], tonumber(arg[2] or 128), tonumber(arg[3] or 32)
local I = require "seer.interventions"
local model = seer.model.load(dir)
local V, D, L = model.config.vocab_size, model.config.hidden_size, model.config.num_hidden_layers
local ids = {}
for i = 1, prefill do ids[i] = (i * 7919) % V end
local mid = math.floor(L / 2)
local vec = seer.tensor.randn(D) * 0.01

local function best(reps, fn)
  local b = math.huge
  for _ = 1, reps do
    local t0 = seer.now()
    fn()
    b = math.min(b, seer.now() - t0)
  end
  return b
end

local every_add, every_fn = {}, {}
for l = 0, L - 1 do
  every_add[#every_add + 1] = { ("blocks.%d.hook_resid_post"):format(l), I.add(vec) }
  every_fn[#every_fn + 1] = { ("blocks.%d.hook_resid_post"):format(l), function() end }
end
local cases = {
  { "no hooks", nil },
  { "capture resid_post (all layers)", "cache" },
  { "add at one layer", { { ("blocks.%d.hook_resid_post"):format(mid), I.add(vec) } } },
  { "add at every layer", every_add },
  { "Lua function at every layer", every_fn },
}
local reps = tonumber(os.getenv("HOOK_REPS") or 5)
local base_p, base_d
for _, c in ipairs(cases) do
  local name, hooks = c[1], c[2]
  local p, d
  local function run_prefill()
    if hooks == "cache" then model:run_with_cache(ids, { names = "hook_resid_post$" })
    else model:forward(ids) end
  end
  local function run_decode()
    if hooks == "cache" then
      local caps = {}
      for l = 0, L - 1 do caps[#caps + 1] = { ("blocks.%d.hook_resid_post"):format(l), I.capture() } end
      model:with_hooks(caps, function() model:generate({ ids[1] }, { max_new_tokens = decode }) end)
    else
      model:generate({ ids[1] }, { max_new_tokens = decode })
    end
  end
  if hooks == nil or hooks == "cache" then
    p, d = best(reps, run_prefill), best(reps, run_decode)
  else
    model:with_hooks(hooks, function() p, d = best(reps, run_prefill), best(reps, run_decode) end)
  end
  d = d / decode
  base_p, base_d = base_p or p, base_d or d
  print(("%-34s prefill %8.2f ms (%+5.1f%%)   decode %7.3f ms/tok (%+5.1f%%)"):format(name, p * 1e3, (p / base_p - 1) * 100,
    d * 1e3, (d / base_d - 1) * 100))
end
