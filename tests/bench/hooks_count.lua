-- The work hooks add, counted in instructions instead of seconds (run under
-- `valgrind --tool=callgrind` by tests/bench/hooks_instructions.sh): a VM's wall-time noise is
-- larger than the few percent the targets ask about, an instruction count is the same run after
-- run. Usage: seer tests/bench/hooks_count.lua MODEL_DIR prefill|decode none|load|add|capture
local I = require "seer.interventions"
local dir, phase, mode = arg[1], arg[2], arg[3]
local model = seer.model.load(dir)
model:prompt_cache(0) -- each forward computes its whole pass (a repeat would take an earlier one's blocks)
if mode == "load" then return end
local V, D, L = model.config.vocab_size, model.config.hidden_size, model.config.num_hidden_layers
local ids = {}
for i = 1, 128 do ids[i] = (i * 7919) % V end
local vec = seer.tensor.randn(D) * 0.01
local mid = math.floor(L / 2)
local function run()
  if phase == "prefill" then for _ = 1, 10 do model:forward(ids) end
  else for _ = 1, 4 do model:generate({ ids[1] }, { max_new_tokens = 64 }) end end
end
if mode == "none" then run()
elseif mode == "add" then model:with_hooks({ { ("blocks.%d.hook_resid_post"):format(mid), I.add(vec) } }, run)
elseif mode == "capture" and phase == "prefill" then
  -- what a user calls: run_with_cache, every hook_resid_post kept as a tensor
  for _ = 1, 10 do model:run_with_cache(ids, { names = "hook_resid_post$" }) end
elseif mode == "capture" then
  local caps = {}
  for l = 0, L - 1 do caps[#caps + 1] = { ("blocks.%d.hook_resid_post"):format(l), I.capture() } end
  model:with_hooks(caps, run)
else error("mode: none, load, add or capture") end
