-- Attention patterns captured at every layer (run_with_cache with names = "hook_pattern"), one
-- layer's, and every hook_resid_post, against a plain forward of the same prompt, in one process:
-- score and pattern hooks move a layer's attention onto the hooked path, which materializes its
-- [head, pos, k] scores. Prints each round's times.
-- Usage: seer tests/bench/pattern_capture.lua MODEL THREADS N [ROUNDS]
local path, threads, n = arg[1], tonumber(arg[2]), tonumber(arg[3])
local rounds = tonumber(arg[4] or "2")
if not (path and threads and n and rounds) then
  io.stderr:write("usage: seer tests/bench/pattern_capture.lua MODEL THREADS N [ROUNDS]\n")
  os.exit(2)
end
local m = seer.model.load(path, { threads = threads, tokenizer = false })
-- every call computes its whole pass: through the prompt cache, a later round's plain forward
-- and one layer's capture would take the blocks below that layer from this round's
m:prompt_cache(0)
local ids = { 1 }
for i = 2, n do ids[i] = (i * 7919) % (m.config.vocab_size - 3) + 3 end
m:forward({ 1, 2, 3 }) -- warm-up: pages the weights in
local function time(f)
  local s = seer.now()
  f()
  return seer.now() - s
end
local mid = math.floor(m.config.num_hidden_layers / 2)
for r = 1, rounds do
  local a = time(function() m:forward(ids) end)
  local b = time(function() m:run_with_cache(ids, { names = "hook_pattern" }) end)
  local c = time(function() m:run_with_cache(ids, { names = ("blocks.%d.attn.hook_pattern"):format(mid) }) end)
  local d = time(function() m:run_with_cache(ids, { names = "hook_resid_post" }) end)
  print(("round %d, %d tokens: forward %.2f s; patterns of every layer %.2f s (%.2fx); layer %d's pattern %.2f s; every hook_resid_post %.2f s")
    :format(r, n, a, b, b / a, mid, c, d))
end
