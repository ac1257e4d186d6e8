-- A steering sweep, as experiments run one: N prompts of PROMPT_LEN tokens, each generated at
-- S strengths (0 among them, the control), NEW new tokens each, steered at the middle layer
-- from position FROM on (0: the whole prompt; PROMPT_LEN: from the first new token, where the
-- sweep computes each prompt once for all strengths). toolkit.steering_hook.steering_sweep (one
-- generate_batch) against the loop a researcher writes (steering_hook around generate, per
-- strength and prompt), alternating, in one process; checks that both gave the same tokens.
-- Usage: seer tests/bench/steering_sweep.lua MODEL THREADS N PROMPT_LEN NEW S FROM [ROUNDS]
local path, threads, N, plen, new, S, from = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5]),
  tonumber(arg[6]), tonumber(arg[7])
local rounds = tonumber(arg[8] or "2")
if not (path and threads and N and plen and new and S and from and rounds) then
  io.stderr:write("usage: seer tests/bench/steering_sweep.lua MODEL THREADS N PROMPT_LEN NEW S FROM [ROUNDS]\n")
  os.exit(2)
end
local prec = os.getenv("SEER_BENCH_PRECISION")
local model = seer.model.load(path, { threads = threads, tokenizer = false, precision = prec ~= "" and prec or nil })
local ST = require "toolkit.steering_hook"
local vocab, D, L = model.config.vocab_size, model.config.hidden_size, model.config.num_hidden_layers
local layer = math.floor(L / 2)
local vec = seer.tensor.randn(D, { seed = 5 }) * 0.05
local prompts, strengths = {}, {}
for i = 1, N do
  local p = { 1 }
  for j = 1, plen - 1 do p[j + 1] = (i * 31337 + j * 104729) % (vocab - 3) + 3 end
  prompts[i] = p
end
for s = 1, S do strengths[s] = (s - 1) * 2 - (S - 1) end -- symmetric around 0, 0 included when S is odd
local opts = { max_new_tokens = new, min_new_tokens = new, temperature = 0.7, seed = 3, start_pos = from, texts = false }
model:generate(prompts[1], { max_new_tokens = 2 }) -- warm-up: pages the weights in
for r = 1, rounds do
  model:prompt_cache(0) -- each way starts without the other's prompts
  model:prompt_cache(256 * 1024 * 1024)
  local t = seer.now()
  local _, ids = ST.steering_sweep(model, nil, prompts, layer, vec, strengths, opts)
  local t_sweep = seer.now() - t
  model:prompt_cache(0)
  model:prompt_cache(256 * 1024 * 1024)
  t = seer.now()
  for s, strength in ipairs(strengths) do
    for p, prompt in ipairs(prompts) do
      local got = ST.steering_hook(model, layer, vec, strength, from, function()
        return model:generate(prompt, { max_new_tokens = new, min_new_tokens = new, temperature = 0.7, seed = 3 }).ids
      end)
      if table.concat(got, ",") ~= table.concat(ids[s][p], ",") then
        error(("strength %g, prompt %d: the sweep's tokens differ from the loop's"):format(strength, p))
      end
    end
  end
  local t_loop = seer.now() - t
  local total = N * S * new
  print(("round %d: %d prompts of %d tokens x %d strengths, %d new each, steered from position %d: sweep %.2f s (%.1f new tok/s), loop %.2f s (%.1f): %.2fx")
    :format(r, N, plen, S, new, from, t_sweep, total / t_sweep, t_loop, total / t_loop, t_loop / t_sweep))
end
