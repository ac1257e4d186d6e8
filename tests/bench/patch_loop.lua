-- Activation patching as a loop a researcher writes: toolkit.activation_patching.patch at every
-- position of a PROMPT_LEN-token prompt at blocks.LAYER.hook_resid_pre, one call per position
-- (each a run_with_cache of the clean prompt and a run_with_hooks of the corrupt one). Through
-- the model's prompt cache (each call after the first runs both from the residuals the first
-- kept entering the patched block) against prompt_cache(0), alternating, in one process; checks
-- both loops gave the same values. Prints the best time of the rounds for each.
-- Usage: seer tests/bench/patch_loop.lua MODEL THREADS PROMPT_LEN LAYER [ROUNDS]
local path, threads, n, layer = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local rounds = tonumber(arg[5] or "2")
if not (path and threads and n and layer and rounds) then
  io.stderr:write("usage: seer tests/bench/patch_loop.lua MODEL THREADS PROMPT_LEN LAYER [ROUNDS]\n")
  os.exit(2)
end
local AP = require "toolkit.activation_patching"
local m = seer.model.load(path, { threads = threads, tokenizer = false })
local V, L = m.config.vocab_size, m.config.num_hidden_layers
local clean, corrupt = { 1 }, { 1 }
for j = 2, n do
  clean[j] = (j * 104729) % (V - 3) + 3
  corrupt[j] = j == 3 and (clean[j] + 7) % (V - 3) + 3 or clean[j]
end
local metric = function(l) return l[{ -1, 10 }] - l[{ -1, 20 }] end
local point = ("blocks.%d.hook_resid_pre"):format(layer)
m:forward({ 1, 2, 3 }) -- warm-up: pages the weights in
local best, vals = { [true] = math.huge, [false] = math.huge }, {}
for _ = 1, rounds do
  for _, cached in ipairs({ false, true }) do
    m:prompt_cache(0) -- each loop from an empty cache
    if cached then m:prompt_cache(256 * 1024 * 1024) end
    local t = seer.now()
    local v = {}
    for pos = 0, n - 1 do v[#v + 1] = AP.patch(m, clean, corrupt, point, { pos }, metric) end
    best[cached] = math.min(best[cached], seer.now() - t)
    vals[cached] = v
  end
end
for i = 1, n do
  if vals[true][i] ~= vals[false][i] then
    io.stderr:write(("patch_loop: position %d: %.9g through the prompt cache, %.9g without\n"):format(i - 1, vals[true][i], vals[false][i]))
    os.exit(1)
  end
end
print(("%d patch calls at %s of %d blocks, %d-token prompts: without the prompt cache %.2f s, through it %.2f s (%.2fx; the same values)")
  :format(n, point, L, n, best[false], best[true], best[false] / best[true]))
