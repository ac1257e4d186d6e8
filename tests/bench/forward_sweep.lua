-- A sweep of steering strengths scored on logits, as a researcher writes one without generating:
-- one prompt of PROMPT_LEN tokens, K strengths steering the middle layer's residual at every
-- position. run_with_hooks over the list (per_sequence: one pass over the weights for all; the
-- sequences share the blocks below the steered one) against the same call with share_prompts =
-- false (every sequence computed from the embeddings); and a loop of single run_with_hooks calls
-- (each after the first runs from the residual the first kept in the prompt cache) against the
-- loop with share_prompts = false; alternating, in one process; checks that every way gave the
-- same logits, bit for bit. Prints the best time of the rounds for each way.
-- Usage: seer tests/bench/forward_sweep.lua MODEL THREADS PROMPT_LEN K [ROUNDS]
local path, threads, plen, K = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local rounds = tonumber(arg[5] or "2")
if not (path and threads and plen and K and rounds) then
  io.stderr:write("usage: seer tests/bench/forward_sweep.lua MODEL THREADS PROMPT_LEN K [ROUNDS]\n")
  os.exit(2)
end
local I = require "seer.interventions"
local model = seer.model.load(path, { threads = threads, tokenizer = false })
local vocab, D, L = model.config.vocab_size, model.config.hidden_size, model.config.num_hidden_layers
local layer = math.floor(L / 2)
local vec = seer.tensor.randn(D, { seed = 5 }) * 0.05
local p = { 1 }
for j = 1, plen - 1 do p[j + 1] = (j * 104729) % (vocab - 3) + 3 end
local inputs, per = {}, {}
for k = 1, K do
  inputs[k] = p
  per[k] = { { ("blocks.%d.hook_resid_pre"):format(layer), I.add(vec, { strength = (k - 1) * 2 - (K - 1) }) } }
end
model:forward({ 1, 2, 3 }) -- warm-up: pages the weights in
-- the loop: one run_with_hooks call per strength (through the model's prompt cache, or not)
local function loop(share)
  local out = {}
  for k = 1, K do out[k] = model:run_with_hooks(p, { fwd_hooks = per[k], share_prompts = share }) end
  return out
end
local best, out, lout = { [true] = math.huge, [false] = math.huge }, {}, {}
local lbest = { [true] = math.huge, [false] = math.huge }
for _ = 1, rounds do
  for _, share in ipairs({ false, true }) do
    local t = seer.now()
    out[share] = model:run_with_hooks(inputs, { per_sequence = per, share_prompts = share })
    best[share] = math.min(best[share], seer.now() - t)
    model:prompt_cache(0) -- each round's loop from an empty cache
    model:prompt_cache(256 * 1024 * 1024)
    t = seer.now()
    lout[share] = loop(share)
    lbest[share] = math.min(lbest[share], seer.now() - t)
  end
end
local diff = (out[true] - out[false]):abs():max()
for k = 1, K do
  diff = math.max(diff, (lout[true][k] - lout[false][k]):abs():max(), (lout[true][k] - out[false]:select(1, k)):abs():max())
end
if diff ~= 0 then
  io.stderr:write(("forward_sweep: the shared sweep's logits differ from the unshared by %g\n"):format(diff))
  os.exit(1)
end
print(("%d strengths at block %d of %d, a %d-token prompt, one run_with_hooks over the list: every sequence computed %.2f s, the blocks below shared %.2f s (%.2fx)")
  :format(K, layer, L, plen, best[false], best[true], best[false] / best[true]))
print(("the same as a loop of run_with_hooks calls: share_prompts = false %.2f s, through the prompt cache %.2f s (%.2fx); all logits identical")
  :format(lbest[false], lbest[true], lbest[false] / lbest[true]))
