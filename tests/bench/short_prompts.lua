-- An experiment's shape of work: many short prompts, a few new tokens each, through
-- model:generate_batch with continuous batching (prefill of the joining prompts included, which
-- for short prompts is most of the time). Prints the wall time, new tokens/s over the whole
-- run, and the steps that took over 0.2 s (the prefills).
-- Usage: seer tests/bench/short_prompts.lua MODEL THREADS PROMPTS PROMPT_LEN NEW MAX_BATCH [REPEATS]
-- REPEATS R: PROMPTS / R distinct prompts, each R times, the repeats apart (a battery run R
-- times, or R samples of each prompt); generate_batch computes a repeated prompt once unless
-- SEER_BENCH_SHARE=0 (share_prompts = false). SEER_BENCH_PRECISION=fast as batch_seer.lua.
-- SEER_BENCH_TEMPERATURE=T samples at temperature T (seed 3) instead of greedy decoding.
local path, threads, N, plen, new, B = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5]), tonumber(arg[6])
local R = tonumber(arg[7] or "1")
if not (path and threads and N and plen and new and B and R and R >= 1 and N % R == 0) then
  io.stderr:write("usage: seer tests/bench/short_prompts.lua MODEL THREADS PROMPTS PROMPT_LEN NEW MAX_BATCH [REPEATS, dividing PROMPTS]\n")
  os.exit(2)
end
local prec = os.getenv("SEER_BENCH_PRECISION")
local model = seer.model.load(path, { threads = threads, tokenizer = false, precision = prec ~= "" and prec or nil })
local vocab = model.config.vocab_size
local ps = {}
for i = 1, N do
  local k = (i - 1) % (N / R) + 1 -- the distinct prompt this one repeats
  ps[i] = { 1 }
  for j = 1, plen - 1 do ps[i][j + 1] = (k * 7919 + j * 104729) % (vocab - 3) + 3 end
end
-- warm-up (pages the weights in) on prompts outside the set: the model's prompt cache keeps what a
-- call computed, and ps[1] and ps[2] here gave the timed call two prompts it did not compute
-- (so a share_prompts = false run, which takes none, was compared with one that took two free)
model:generate_batch({ { 1, 2, 3 }, { 1, 4, 5 } }, { max_new_tokens = 2, progress = false })
local core = require("seer.core.model")
local orig, slow = core.step_batch, {}
core.step_batch = function(g)
  local t = seer.now()
  local a, b = orig(g)
  local d = seer.now() - t
  if d > 0.2 then slow[#slow + 1] = ("%.0f"):format(d * 1e3) end
  return a, b
end
local share = os.getenv("SEER_BENCH_SHARE") ~= "0"
local shared0 = core.shared_prefills()
local t = seer.now()
local temp = tonumber(os.getenv("SEER_BENCH_TEMPERATURE") or "0")
model:generate_batch(ps, { max_new_tokens = new, min_new_tokens = new, max_batch = B, progress = false, share_prompts = share,
                           temperature = temp, seed = 3 })
local dt = seer.now() - t
core.step_batch = orig
print(("%d prompts of %d tokens (%d distinct), %d new each, max_batch %d: %.2f s, %.1f new tok/s, %d prompts taken; steps over 0.2 s: %s ms")
  :format(N, plen, N / R, new, B, dt, N * new / dt, core.shared_prefills() - shared0, #slow > 0 and table.concat(slow, ", ") or "none"))
