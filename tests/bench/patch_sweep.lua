-- toolkit.activation_patching.patch_sweep on a real-sized model: every (layer, position) patch of
-- hook_resid_pre, one batch per layer. Now each layer's batch begins at its block
-- (start_at_layer, from the corrupt run's residual there); before, every patched run was a whole
-- pass from the embeddings (the same batches, run here as the old code ran them). Checks the two
-- grids are equal and prints both times.
-- Usage: seer tests/bench/patch_sweep.lua MODEL THREADS PROMPT_LEN [LAYER_STEP]
local path, threads, n, step = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4] or "1")
if not (path and threads and n and step) then
  io.stderr:write("usage: seer tests/bench/patch_sweep.lua MODEL THREADS PROMPT_LEN [LAYER_STEP]\n")
  os.exit(2)
end
local AP = require "toolkit.activation_patching"
local I = require "seer.interventions"
local m = seer.model.load(path, { threads = threads, tokenizer = false })
local V = m.config.vocab_size
local clean, corrupt = { 1 }, { 1 }
for j = 2, n do
  clean[j] = (j * 104729) % (V - 3) + 3
  corrupt[j] = j == 3 and (clean[j] + 7) % (V - 3) + 3 or clean[j]
end
local layers = {}
for l = 0, m.config.num_hidden_layers - 1, step do layers[#layers + 1] = l end
local metric = function(l) return l[{ -1, 10 }] - l[{ -1, 20 }] end
local t0 = seer.now()
local grid = AP.patch_sweep(m, clean, corrupt, metric, { layers = layers, progress = false })
local t_now = seer.now() - t0
-- before: the same batches as whole passes
t0 = seer.now()
local names = {}
for i, l in ipairs(layers) do names[i] = ("blocks.%d.hook_resid_pre"):format(l) end
local _, cache = m:run_with_cache(clean, { names = names })
m:forward(corrupt)
local worst = 0
for i, name in ipairs(names) do
  local inputs, per = {}, {}
  for j = 1, n do
    inputs[j] = corrupt
    per[j] = { { name, I.replace(cache[name], { positions = { j - 1 } }) } }
  end
  -- share_prompts = false: whole passes (shared, these sequences would share the blocks below
  -- the patched one, as patch_sweep does by hand)
  local logits = m:run_with_hooks(inputs, { per_sequence = per, share_prompts = false })
  for j = 1, n do worst = math.max(worst, math.abs(metric(logits:select(1, j)) - grid[{ i, j }])) end
end
local t_before = seer.now() - t0
print(("patch_sweep, %d layers x %d positions (%d-token prompts): %.2f s now (each batch from its block), %.2f s with whole passes: %.2fx; max difference %g")
  :format(#layers, n, n, t_now, t_before, t_before / t_now, worst))
