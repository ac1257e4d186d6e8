-- An agent's loop: N samples of one prompt, one model:generate call each (as the introspection
-- and auditing notebooks write them), with the model's prompt cache (Model:prompt_cache) and
-- without it, alternating, in one process. Prints each round's wall time and new tokens/s, and
-- checks that both ways gave the same tokens.
-- Usage: seer tests/bench/prompt_loop.lua MODEL THREADS PROMPT_LEN NEW N [ROUNDS]
-- SEER_BENCH_PRECISION=fast as batch_seer.lua.
local path, threads, plen, new, N = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5])
local rounds = tonumber(arg[6] or "2")
if not (path and threads and plen and new and N and rounds) then
  io.stderr:write("usage: seer tests/bench/prompt_loop.lua MODEL THREADS PROMPT_LEN NEW N [ROUNDS]\n")
  os.exit(2)
end
local prec = os.getenv("SEER_BENCH_PRECISION")
local model = seer.model.load(path, { threads = threads, tokenizer = false, precision = prec ~= "" and prec or nil })
local vocab = model.config.vocab_size
local core = require "seer.core.model"
local function run(budget, salt)
  model:prompt_cache(0) -- empty: every round starts without the prompt
  model:prompt_cache(budget)
  local p = { 1 }
  for j = 1, plen - 1 do p[j + 1] = (salt * 7919 + j * 104729) % (vocab - 3) + 3 end
  local taken0 = core.shared_prefills()
  local t = seer.now()
  local out = {}
  for seed = 1, N do
    out[seed] = table.concat(model:generate(p, { max_new_tokens = new, min_new_tokens = new, temperature = 0.8, seed = seed }).ids, ",")
  end
  return seer.now() - t, core.shared_prefills() - taken0, table.concat(out, ";")
end
model:generate({ 1, 2, 3 }, { max_new_tokens = 2 }) -- warm-up
for r = 1, rounds do
  local t_on, taken, a = run(256 * 1024 * 1024, r)
  local t_off, _, b = run(0, r)
  assert(a == b, "the prompt cache changed a generated token")
  print(("round %d: %d samples of a %d-token prompt, %d new each: cache %.2f s (%.1f new tok/s, %d prompts taken), none %.2f s (%.1f new tok/s): %.2fx")
    :format(r, N, plen, new, t_on, N * new / t_on, taken, t_off, N * new / t_off, t_off / t_on))
end
