-- N prompts with one beginning of SYS tokens (a system prompt, a preamble) and their own Q tokens
-- after it, NEW new tokens each, in one generate_batch call: the beginning shared (the default)
-- and computed by every prompt (share_prompts = false), alternating, in one process. With
-- INJECT=1 each prompt also carries its own vector added from position SYS on (an introspection
-- trial's shape: the rows before the injection are alike). Prints each round's wall time, new
-- tokens/s and the prompt positions taken, and checks that both ways gave the same tokens. With
-- LOOP=1 the prompts run as a loop of generate calls instead, with the model's prompt cache
-- (which gives the beginning to each call after the first) against the cache off.
-- Usage: seer tests/bench/shared_prefix.lua MODEL THREADS SYS Q N NEW [ROUNDS]
-- SEER_BENCH_PRECISION=fast as batch_seer.lua.
local path, threads, sys, q, N, new = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5]), tonumber(arg[6])
local rounds = tonumber(arg[7] or "2")
if not (path and threads and sys and q and N and new and rounds) then
  io.stderr:write("usage: seer tests/bench/shared_prefix.lua MODEL THREADS SYS Q N NEW [ROUNDS]\n")
  os.exit(2)
end
local prec = os.getenv("SEER_BENCH_PRECISION")
local inject, loop = os.getenv("INJECT") == "1", os.getenv("LOOP") == "1"
local model = seer.model.load(path, { threads = threads, tokenizer = false, precision = prec ~= "" and prec or nil })
model:prompt_cache(0) -- every round computes its beginning once at most
local vocab, D = model.config.vocab_size, model.config.hidden_size
local core = require "seer.core.model"
local I = require "seer.interventions"
local prompts, per = {}, nil
for i = 1, N do
  local p = { 1 }
  for j = 1, sys - 1 do p[#p + 1] = (j * 104729) % (vocab - 3) + 3 end
  for j = 1, q do p[#p + 1] = (i * 7919 + j * 15485863) % (vocab - 3) + 3 end
  prompts[i] = p
end
if inject then
  seer.tensor.manual_seed(1)
  per = {}
  local layer = math.floor(model.config.num_hidden_layers * 0.7)
  for i = 1, N do
    per[i] = { hooks = { { ("blocks.%d.hook_resid_post"):format(layer), I.add(seer.tensor.randn(D) * 0.5, { from = sys }) } } }
  end
end
local function run(share)
  local _, r0 = core.shared_prefills()
  local t = seer.now()
  local out
  local opts = { max_new_tokens = new, min_new_tokens = new, temperature = 0.8, seed = 3 }
  if loop then
    model:prompt_cache(0) -- empty, then on or off
    model:prompt_cache(share and 256 * 1024 * 1024 or 0)
    out = {}
    for i, p in ipairs(prompts) do
      local function one() return model:generate(p, opts) end
      out[i] = per and model:with_hooks(per[i].hooks, one) or one()
    end
  else
    opts.per_sequence, opts.share_prompts, opts.progress = per, share, false
    out = model:generate_batch(prompts, opts)
  end
  local dt = seer.now() - t
  local _, r1 = core.shared_prefills()
  local s = {}
  for i, o in ipairs(out) do s[i] = table.concat(o.ids, ",") end
  return dt, r1 - r0, table.concat(s, ";")
end
model:generate({ 1, 2, 3 }, { max_new_tokens = 2 }) -- warm-up
for r = 1, rounds do
  local t_on, rows, a = run(true)
  local t_off, _, b = run(false)
  assert(a == b, "sharing the beginning changed a generated token")
  print(("round %d: %d prompts of %d + %d tokens%s, %d new each%s: shared %.2f s (%.1f new tok/s, %d positions taken), each its own %.2f s (%.1f new tok/s): %.2fx")
    :format(r, N, sys, q, inject and " (an injection from the beginning's end)" or "", new,
      loop and ", a loop of generate calls" or ", one generate_batch", t_on, N * new / t_on, rows,
      t_off, N * new / t_off, t_off / t_on))
end
