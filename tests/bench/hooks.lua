-- make bench: the cost of hooks on a forward pass, measured in one process against the same
-- forward with no hooks: every block's hook_resid_post captured (run_with_cache), a built-in
-- add at one layer, the same add at every layer, and a Lua function hook at every layer.
-- Usage: seer tests/bench/hooks.lua MODEL_DIR PREFILL_TOKENS DECODE_TOKENS
-- Prints one line per case: name, prefill ms, decode ms/token, overhead % against no hooks
-- (HOOK_REPS rounds, default 5).
local dir, prefill, decode = arg[1], tonumber(arg[2] or 128), tonumber(arg[3] or 32)
local I = require "seer.interventions"
local model = seer.model.load(dir)
-- Every case computes its whole pass: with the prompt cache on, a forward of the same tokens
-- takes what an earlier one kept (the plain forward its logits, one add the blocks below it),
-- which would make the hooks look dearer than they are.
model:prompt_cache(0)
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
-- Robust to a busy machine: the cases run interleaved, one prefill and one decode each per round
-- (so a slow minute hits every case alike), and a case's overhead is the median over rounds of
-- its time over the no-hooks time of the same round; p25..p75 of those ratios give the spread.
local reps = tonumber(os.getenv("HOOK_REPS") or 5)
local function measure(hooks)
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
  local function both() p, d = best(1, run_prefill), best(1, run_decode) end
  if hooks == nil or hooks == "cache" then both() else model:with_hooks(hooks, both) end
  return p, d / decode
end
local function quantile(xs, q)
  local s = {}
  for i, v in ipairs(xs) do s[i] = v end
  table.sort(s)
  local pos = 1 + (#s - 1) * q
  local lo = math.floor(pos)
  return s[lo] + (s[math.min(lo + 1, #s)] - s[lo]) * (pos - lo)
end
measure(nil) -- warm-up
local P, Dt = {}, {}
for ci = 1, #cases do P[ci], Dt[ci] = {}, {} end
for r = 1, reps do
  for ci, c in ipairs(cases) do P[ci][r], Dt[ci][r] = measure(c[2]) end
end
print(("(%d interleaved rounds; median time, median overhead against no hooks in the same round [p25..p75])"):format(reps))
for ci, c in ipairs(cases) do
  local rp, rd = {}, {}
  for r = 1, reps do
    rp[r] = (P[ci][r] / P[1][r] - 1) * 100
    rd[r] = (Dt[ci][r] / Dt[1][r] - 1) * 100
  end
  print(("%-34s prefill %8.2f ms (%+5.1f%% [%+.1f..%+.1f])   decode %7.3f ms/tok (%+5.1f%% [%+.1f..%+.1f])"):format(c[1],
    quantile(P[ci], 0.5) * 1e3, quantile(rp, 0.5), quantile(rp, 0.25), quantile(rp, 0.75),
    quantile(Dt[ci], 0.5) * 1e3, quantile(rd, 0.5), quantile(rd, 0.25), quantile(rd, 0.75)))
end
