-- Per-step timing of batched decode: model:generate_batch with each batched step (core.step_batch)
-- timed, the first (which holds the prefill) left out; prints the median and the fastest step per
-- batch size. Steady against this VM's noise where batch_seer.lua's (all - first) subtraction of two
-- long runs is not (a 128-token prompt's prefill is most of either run).
-- Usage: seer tests/bench/batch_steps.lua MODEL THREADS NEW B1 [B2 ...]
-- BATCH_PROMPT_LEN=N: prompts of N tokens (default 5); SEER_BENCH_PRECISION=fast as batch_seer.lua.
local core = require("seer.core.model")
local orig = core.step_batch
local times = {}
core.step_batch = function(g)
  local t = seer.now()
  local a, b = orig(g)
  times[#times + 1] = seer.now() - t
  return a, b
end
local path, threads, n = arg[1], tonumber(arg[2]), tonumber(arg[3])
if not (path and threads and n and n >= 3 and tonumber(arg[4])) then
  io.stderr:write("usage: seer tests/bench/batch_steps.lua MODEL THREADS NEW(>=3) B1 [B2 ...]\n")
  os.exit(2)
end
local model = seer.model.load(path, { threads = threads, tokenizer = false, precision = os.getenv("SEER_BENCH_PRECISION") ~= "" and os.getenv("SEER_BENCH_PRECISION") or nil })
-- each run computes its prompts, so that the step left out is the one that holds the prefill (the
-- prompt cache would give the warm-up's prompts to the runs after it: Model:prompt_cache)
model:prompt_cache(0)
local vocab = model.config.vocab_size
local plen = tonumber(os.getenv("BATCH_PROMPT_LEN") or "5")
local function prompts(b)
  local p = {}
  for i = 1, b do p[i] = { 1 } for j = 1, plen - 1 do p[i][j + 1] = (i * 7919 + j * 104729) % (vocab - 3) + 3 end end
  return p
end
model:generate_batch(prompts(2), { max_new_tokens = 2, min_new_tokens = 2, progress = false })
for k = 4, #arg do
  local b = tonumber(arg[k])
  times = {}
  model:generate_batch(prompts(b), { max_new_tokens = n, min_new_tokens = n, progress = false })
  local st = {}
  for i = 2, #times do st[#st + 1] = times[i] end
  table.sort(st)
  local med = st[math.floor((#st + 1) / 2)]
  print(("%d steps %d median %.2f ms min %.2f ms -> %.1f tok/s (median), %.1f (min)"):format(b, #st, med * 1e3, st[1] * 1e3, b / med, b / st[1]))
end
