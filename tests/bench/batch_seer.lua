-- seer side of `make bench`'s batched decode: greedy decode of B different 5-token prompts at
-- once (model:generate_batch, one batched forward pass per step). Decode throughput over the
-- batch, timed from the first new token to the last as llamacpp_peer.py and batch_peer.py time
-- theirs: B * (N - 1) / (the time from the first step's last-layer hook to the N-th's), best of
-- BENCH_REPEAT. (Until 2026-12-01 it was the time for N new tokens less the fastest of three
-- runs for 1, two runs that could fall in different minutes of this VM, whose read rate moved
-- 33-64 GB/s between probes seconds apart; docs/bench-history.md.) The hook only stamps the time,
-- one Lua call per sequence and step (make bench's "Lua function at every layer" row, 36 such
-- calls a step on the 0.5B model, read +0.2% of decode time on 2026-12-01). A pass with a
-- function hook neither takes from nor gives to the prompt cache.
-- Prints one line per batch size: B tok_s.
-- Usage: seer tests/bench/batch_seer.lua MODEL THREADS N B1 [B2 ...]   (N >= 2)
-- BATCH_PROMPT_LEN=N: prompts of N tokens (default 5).
-- SEER_BENCH_PRECISION=fast: bf16 weights against activations rounded to bf16 (precision = "fast")
local path, threads, n = arg[1], tonumber(arg[2]), tonumber(arg[3])
if not n or n < 2 then
  io.stderr:write("batch_seer.lua: N (new tokens per sequence) must be 2 or more: decode is timed from the first new token to the last\n")
  os.exit(2)
end
local model = seer.model.load(path, { threads = threads, tokenizer = false,
                                      precision = os.getenv("SEER_BENCH_PRECISION") ~= "" and os.getenv("SEER_BENCH_PRECISION") or nil })
-- The model's prompt cache off (Model:prompt_cache): with it, a run took from the cache the
-- prompts an earlier run had computed and skipped their prefill, which the subtraction this
-- script then timed with took off the decode time: batch 16 of the 0.5B model read 199 tok/s
-- against 140 without the cache (bf16, Zen 4 VM, 2026-12-01; every make bench run from 2026-11-30
-- 06:00 until this fix printed its batch 4 and 16 figures high). Off, every run does the same work.
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
-- generate_batch of b prompts and `new` (>= 2) tokens each; returns the time from the first
-- step's last-layer hook to the last step's (new - 1 steps)
local function run(b, new)
  local stamps, calls = {}, 0
  local outs
  model:with_hooks({ { "blocks.-1.hook_resid_post", function()
    if calls % b == 0 then stamps[#stamps + 1] = seer.now() end -- each step's first sequence
    calls = calls + 1
  end } }, function()
    outs = model:generate_batch(prompts(b), { max_new_tokens = new, min_new_tokens = new, progress = false })
  end)
  for i = 1, b do assert(#outs[i].ids == new, "a sequence stopped early") end
  assert(#stamps == new, ("batch_seer: %d steps stamped, %d asked"):format(#stamps, new))
  return stamps[new] - stamps[1]
end
run(2, 2) -- warm-up: pages the weights in
for k = 4, #arg do
  local b = tonumber(arg[k])
  local best = math.huge
  for _ = 1, tonumber(os.getenv("BENCH_REPEAT") or "1") do best = math.min(best, run(b, n)) end
  check_taken()
  print(("%d %.1f"):format(b, b * (n - 1) / best))
end
