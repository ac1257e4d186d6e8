-- One sequence's decode, greedy against sampled (temperature 0.7, seeded), alternating in one
-- process: what sampling costs per token beside the forward pass (sample.c sorts the
-- vocabulary per token). Prints the best of ROUNDS for each.
-- Usage: seer tests/bench/sampled_decode.lua MODEL THREADS NEW [ROUNDS]
local path, threads, new = arg[1], tonumber(arg[2]), tonumber(arg[3])
local rounds = tonumber(arg[4] or "3")
if not (path and threads and new and rounds) then
  io.stderr:write("usage: seer tests/bench/sampled_decode.lua MODEL THREADS NEW [ROUNDS]\n")
  os.exit(2)
end
local model = seer.model.load(path, { threads = threads, tokenizer = false })
-- each timed call computes its prompt (the prompt cache would give every call after the warm-up the
-- prompt's rows and logits: Model:prompt_cache)
model:prompt_cache(0)
local vocab = model.config.vocab_size
local p = { 1 }
for j = 1, 19 do p[j + 1] = (31337 + j * 104729) % (vocab - 3) + 3 end
model:generate(p, { max_new_tokens = 4 }) -- warm-up: pages the weights in
local best = {}
for _ = 1, rounds do
  for _, t in ipairs({ 0, 0.7 }) do
    local s = seer.now()
    model:generate(p, { max_new_tokens = new, min_new_tokens = new, temperature = t, seed = 1 })
    best[t] = math.max(best[t] or 0, new / (seer.now() - s))
  end
end
print(("vocabulary %d, %d new tokens, best of %d: greedy %.1f tok/s, sampled %.1f tok/s (%.2fx greedy)")
  :format(vocab, new, rounds, best[0], best[0.7], best[0.7] / best[0]))
