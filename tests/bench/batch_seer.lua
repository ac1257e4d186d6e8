-- seer side of `make bench`'s batched decode: greedy decode of B different 5-token prompts at
-- once (model:generate_batch, one batched forward pass per step). Decode throughput over the
-- batch excludes the prefill: (B * (N - 1)) / (time for N new tokens - time for 1), best of
-- BENCH_REPEAT, the time for 1 new token the fastest of three runs (a pause of the VM in that one
-- run would be taken off the N-token run's time as if it were decode time; a pause only lengthens
-- a run, so the fastest of three errs low, not high). Prints one line per batch size: B tok_s.
-- Usage: seer tests/bench/batch_seer.lua MODEL THREADS N B1 [B2 ...]
-- BATCH_PROMPT_LEN=N: prompts of N tokens (default 5).
-- SEER_BENCH_PRECISION=fast: bf16 weights against activations rounded to bf16 (precision = "fast")
local path, threads, n = arg[1], tonumber(arg[2]), tonumber(arg[3])
local model = seer.model.load(path, { threads = threads, tokenizer = false,
                                      precision = os.getenv("SEER_BENCH_PRECISION") ~= "" and os.getenv("SEER_BENCH_PRECISION") or nil })
-- The model's prompt cache off (Model:prompt_cache): with it, the N-token run took from the cache
-- the prompts the 1-token run before it had computed and skipped their prefill, which the
-- subtraction above then took off the decode time: batch 16 of the 0.5B model read 199 tok/s
-- against 140 without the cache (bf16, Zen 4 VM, 2026-12-01; every make bench run from 2026-11-30
-- 06:00 until this fix printed its batch 4 and 16 figures high).
model:prompt_cache(0)
local check_taken = require("taken_guard")() -- fails the run if a timed run takes from a cache
local vocab = model.config.vocab_size
-- BATCH_PROMPT_LEN (default 5): each prompt's length (the context the decode steps attend over)
local plen = tonumber(os.getenv("BATCH_PROMPT_LEN") or "5")
local function prompts(b)
  local p = {}
  for i = 1, b do
    p[i] = { 1 }
    for j = 1, plen - 1 do p[i][j + 1] = (i * 7919 + j * 104729) % (vocab - 3) + 3 end
  end
  return p
end
local function run(b, new)
  local t = seer.now()
  local outs = model:generate_batch(prompts(b), { max_new_tokens = new, min_new_tokens = new, progress = false })
  local dt = seer.now() - t
  for i = 1, b do assert(#outs[i].ids == new, "a sequence stopped early") end
  return dt
end
run(2, 2) -- warm-up: pages the weights in
for k = 4, #arg do
  local b = tonumber(arg[k])
  local best = math.huge
  for _ = 1, tonumber(os.getenv("BENCH_REPEAT") or "1") do
    local one = math.min(run(b, 1), run(b, 1), run(b, 1))
    local full = run(b, n)
    best = math.min(best, full - one)
  end
  check_taken()
  print(("%d %.1f"):format(b, b * (n - 1) / best))
end
