-- A battery of prompts run as one generate_batch, then run again (another seed, another
-- temperature: what an agent does when it re-runs a cell), with the model's prompt cache
-- (Model:prompt_cache: the first run's prompts kept) and without it, alternating, in one process.
-- Times the second run; checks that both ways gave the same tokens.
-- Usage: seer tests/bench/battery_again.lua MODEL THREADS N PROMPT_LEN NEW [ROUNDS]
-- SEER_BENCH_PRECISION=fast as batch_seer.lua.
local path, threads, N, plen, new = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5])
local rounds = tonumber(arg[6] or "2")
if not (path and threads and N and plen and new and rounds) then
  io.stderr:write("usage: seer tests/bench/battery_again.lua MODEL THREADS N PROMPT_LEN NEW [ROUNDS]\n")
  os.exit(2)
end
local prec = os.getenv("SEER_BENCH_PRECISION")
local model = seer.model.load(path, { threads = threads, tokenizer = false, precision = prec ~= "" and prec or nil })
local vocab = model.config.vocab_size
local core = require "seer.core.model"
local function battery(salt)
  local ps = {}
  for i = 1, N do
    local p = { 1 }
    for j = 1, plen - 1 do p[j + 1] = (salt * 7919 + i * 31337 + j * 104729) % (vocab - 3) + 3 end
    ps[i] = p
  end
  return ps
end
local function run(budget, salt)
  model:prompt_cache(0) -- empty: every round starts without the battery
  model:prompt_cache(budget)
  local ps = battery(salt)
  model:generate_batch(ps, { max_new_tokens = new, min_new_tokens = new, temperature = 0.7, seed = 1, progress = false })
  local taken0 = core.shared_prefills()
  local t = seer.now()
  local outs = model:generate_batch(ps, { max_new_tokens = new, min_new_tokens = new, temperature = 1.0, seed = 2, progress = false })
  local dt = seer.now() - t
  local out = {}
  for i = 1, N do out[i] = table.concat(outs[i].ids, ",") end
  return dt, core.shared_prefills() - taken0, table.concat(out, ";")
end
model:generate({ 1, 2, 3 }, { max_new_tokens = 2 }) -- warm-up
for r = 1, rounds do
  local t_on, taken, a = run(256 * 1024 * 1024, r)
  local t_off, _, b = run(0, r)
  assert(a == b, "the prompt cache changed a generated token")
  print(("round %d: a battery of %d prompts of %d tokens run again, %d new each: cache %.2f s (%.1f new tok/s, %d prompts taken), none %.2f s (%.1f new tok/s): %.2fx")
    :format(r, N, plen, new, t_on, N * new / t_on, taken, t_off, N * new / t_off, t_off / t_on))
end
