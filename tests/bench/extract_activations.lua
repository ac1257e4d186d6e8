-- Activation extraction as contrastive directions and concept vectors use it:
-- toolkit.extract_activations over N prompts of 19-30 tokens at layer L (its pass stops after
-- layer L, prompts in batches of 16), against the plain way, one whole run_with_cache per
-- prompt; prints both times, the ratio, and the largest difference between the two (0: the
-- same bits). Usage: seer tests/bench/extract_activations.lua MODEL LAYER N [THREADS (default 2)]
local EX = require "toolkit.extract_activations"
local L, N = tonumber(arg[2]), tonumber(arg[3])
if not (arg[1] and L and N) then
  io.stderr:write("usage: seer tests/bench/extract_activations.lua MODEL LAYER N\n")
  os.exit(2)
end
local m = seer.model.load(arg[1], { threads = tonumber(arg[4]) or 2, tokenizer = false })
local V = m.config.vocab_size
local prompts = {}
for i = 1, N do local p = { 1 } for j = 1, 18 + i % 12 do p[#p + 1] = (i * 7919 + j * 104729) % (V - 3) + 3 end prompts[i] = p end
EX.extract_activations(m, nil, { prompts[1] }, L)
local t = seer.now()
local a = EX.extract_activations(m, nil, prompts, L)
local dt = seer.now() - t
-- the old way: one full run_with_cache per prompt
local t2 = seer.now()
local rows = {}
for i, p in ipairs(prompts) do
  local ids = p
  local _, c = m:run_with_cache(ids, { names = { ("blocks.%d.hook_resid_post"):format(L) }, positions = { -1 } })
  rows[i] = c[("blocks.%d.hook_resid_post"):format(L)]:select(1, 1):clone()
end
local dt2 = seer.now() - t2
local b = seer.tensor.stack(rows)
print(("%d prompts, layer %d: %.2f s (batched, stopped) vs %.2f s (one full pass each): %.2fx; max diff %g"):format(N, L, dt, dt2, dt2 / dt, (a - b):abs():max()))
