-- Batched forward and generation (seer_model_forward_batch, model:generate_batch): every
-- sequence of a batch must get exactly what it gets alone, for every architecture (the parity
-- models, whose single-sequence forward test_parity.lua checks against transformers, and the
-- trained stories260K): prefill (lengths on both sides of the GEMM thresholds), decode,
-- hooks and captures, per-sequence interventions, and sequences finishing at different steps
-- or joining while others run (max_batch). Bit for bit: the batched kernels compute each row
-- the way the single-sequence ones do (engine/model/batch.c).
local T = require "testing"
local I = require "seer.interventions"
local check = require "batch_check"
local tensor = seer.tensor

local pdir = seer.script_dir() .. "/../parity/models"
local stories = seer.script_dir() .. "/../fixtures/models/stories260K"

local function maxdiff(a, b) return (a - b):abs():max() end
local core = require "seer.core.model"
-- From how many tokens a sequence alone runs its linear layers as GEMMs (then a batch runs it
-- alone too): 16 on some CPUs, 96 (f32) and 128 (bf16) where the per-token kernel is the blocked
-- one (engine/model/kernels.c, seer_k_linear_gemm_min). Attention's GEMM path starts at 16
-- everywhere. The parity models take 64 positions, so the checks below run twice: at this
-- CPU's thresholds and with the linear one forced to 16 (core.gemm_min_tokens), where 17 and
-- 21 take every GEMM path alone.
local SETTINGS = { { 0, "" }, { 16, " [linear GEMM from 16 tokens]" } }
local at_gemm_min = check.at_gemm_min
local function join(t) return table.concat(t, ",") end
-- seqs as one batched forward and one generate_batch (max_batch 4: later ones join) against each
-- alone, bit for bit; `label` names the case in a failure
local function batched_equals_alone(m, seqs, label, new)
  local logits = m:forward(seqs)
  local longest = logits:size(2)
  for i, s in ipairs(seqs) do
    T.eq(maxdiff(logits:select(1, i):narrow(1, longest - #s + 1, #s), m:forward(s)), 0, label .. ": sequence " .. i)
  end
  local outs = m:generate_batch(seqs, { max_new_tokens = new or 5, max_batch = 4 })
  for i, s in ipairs(seqs) do
    T.eq(join(outs[i].ids), join(m:generate(s, { max_new_tokens = new or 5 }).ids), label .. ": generated, sequence " .. i)
  end
end

-- Every parity model directory (each architecture and its bf16 / rope / layout variants).
local names = {}
for _, e in ipairs(require("seer.core.host").list_dir(pdir)) do names[#names + 1] = e end
table.sort(names)
assert(#names >= 20, "the parity models are missing from " .. pdir)

-- Lengths 1 .. 21: 17 and 21 take attention's GEMM path alone (>= 16 tokens), and the linear
-- layers' with the threshold forced to 16; the others the per-token kernels; a batch mixes both.
local function prompts(vocab)
  local function seq(n, k)
    local s = {}
    for i = 1, n do s[i] = (i * 7 + k * 13) % (vocab - 1) + 1 end
    return s
  end
  return { seq(5, 1), seq(1, 2), seq(17, 3), seq(3, 4), seq(21, 5), seq(9, 6) }
end

for _, setting in ipairs(SETTINGS) do
for _, name in ipairs(names) do
  T.test("batched forward == each sequence alone, bit for bit: " .. name .. setting[2], function() at_gemm_min(setting[1], function()
    local m = seer.model.load(pdir .. "/" .. name, { tokenizer = false })
    local seqs = prompts(m.config.vocab_size)
    local logits, mask = m:forward(seqs)
    local longest = logits:size(2)
    for i, s in ipairs(seqs) do
      local alone = m:forward(s)
      T.eq(maxdiff(logits:select(1, i):narrow(1, longest - #s + 1, #s), alone), 0, name .. ": sequence " .. i)
      T.eq(mask[i][longest], 1)
      T.eq(mask[i][1], #s == longest and 1 or 0)
    end
  end) end)

  T.test("generate_batch == generate alone (different lengths, finishing at different steps, joining): " .. name .. setting[2], function() at_gemm_min(setting[1], function()
    local m = seer.model.load(pdir .. "/" .. name, { tokenizer = false })
    local seqs = prompts(m.config.vocab_size)
    local per = { [2] = { max_new_tokens = 3 }, [3] = { temperature = 0.9, seed = 4, top_p = 0.8 },
      [5] = { max_new_tokens = 1 }, [6] = { temperature = 1.2, seed = 9, repetition_penalty = 1.3 } }
    for _, width in ipairs({ 6, 2 }) do -- all at once; two at a time (the next joins as one finishes)
      local outs = m:generate_batch(seqs, { max_new_tokens = 7, max_batch = width, per_sequence = per })
      for i, s in ipairs(seqs) do
        local o = { max_new_tokens = 7 }
        for k, v in pairs(per[i] or {}) do o[k] = v end
        local alone = m:generate(s, o)
        T.eq(join(outs[i].ids), join(alone.ids), ("%s: sequence %d, max_batch %d"):format(name, i, width))
        T.eq(join(outs[i].prompt_ids), join(s))
      end
    end
  end) end)
end
end

-- precision = "fast" on bf16 weights: on AMD CPUs with AVX512_BF16 every linear layer, decode steps
-- and batches included, runs VDPBF16PS on activations rounded to bf16 (kernels_x86.c), whose
-- every (row, token) output is the same chain whatever the token count; so a sequence still gets
-- in a batch exactly what it gets alone. Elsewhere fast computes what the default does.
for _, name in ipairs(names) do
  if name:find("_bf16$") then
    T.test("precision = \"fast\": batched forward and generation == each sequence alone: " .. name, function()
      local m = seer.model.load(pdir .. "/" .. name, { tokenizer = false, precision = "fast" })
      local seqs = prompts(m.config.vocab_size)
      batched_equals_alone(m, seqs, name)
      -- (SEER_NO_AVX512 and SEER_NO_AVX2, set, turn those kernels off: kernels_x86.c)
      local exact = seer.model.load(pdir .. "/" .. name, { tokenizer = false })
      if require("seer.core.model").fast_kind() then
        -- the fast kernels ran (a decode step's logits differ from the default precision's)
        T.ok(maxdiff(exact:forward(seqs[2]), m:forward(seqs[2])) > 0, name .. ": fast computed what exact does")
      else
        -- no fast kernels here (no bf16 unit, or Intel's VDPBF16PS without AMX): the same bits as exact
        T.eq(maxdiff(exact:forward(seqs[2]), m:forward(seqs[2])), 0, name .. ": fast differs from exact where it has no kernels")
      end
    end)
  end
end

T.test("per-sequence interventions: each sequence of a batch carries its own (add, ablate, scale, a Lua function, none)", function()
  for _, name in ipairs({ "llama", "gemma2", "gpt2", "gpt_neox", "qwen3" }) do
    local m = seer.model.load(pdir .. "/" .. name, { tokenizer = false })
    local d, L = m.config.hidden_size, m.config.num_hidden_layers
    tensor.manual_seed(7)
    local v1, v2 = tensor.randn(d) * 3, tensor.randn(d)
    local seqs = prompts(m.config.vocab_size)
    local seen = {}
    local hooks = {
      [1] = { { "blocks.0.hook_resid_post", I.add(v1, { strength = 2 }) } },
      [3] = { { ("blocks.%d.hook_resid_pre"):format(L - 1), I.ablate(v2) } },
      [4] = { { "blocks.0.attn.hook_z", I.scale(0.5, { heads = { 0 } }) } },
      [5] = { { "blocks.0.hook_mlp_out", function(act, hook)
        seen[#seen + 1] = hook.batch
        return act * 1.5
      end } },
      [6] = { { "blocks.0.hook_resid_post", I.add(v2, { strength = 4, from = 3 }) } },
    }
    local per = {}
    for i, h in pairs(hooks) do per[i] = { hooks = h } end
    local outs = m:generate_batch(seqs, { max_new_tokens = 6, per_sequence = per })
    local batched_seen = seen
    seen = {}
    local plain = m:generate_batch(seqs, { max_new_tokens = 6 })
    check.against_alone(m, name, seqs, outs, plain, hooks, function() return { max_new_tokens = 6 } end)
    for _, b in ipairs(batched_seen) do T.eq(b, 5, name .. ": hook.batch is the prompt's number") end
    T.eq(#batched_seen, 6, name .. ": the Lua hook ran at every step of its sequence only")
  end
end)

T.test("run_with_cache on a list: per-sequence caches equal each sequence's own, patterns included", function()
  for _, name in ipairs({ "llama", "gemma3", "gpt2", "phi3" }) do
    local m = seer.model.load(pdir .. "/" .. name, { tokenizer = false })
    local seqs = prompts(m.config.vocab_size)
    local want = { "hook_resid_post$", "blocks.1.attn.hook_pattern", "blocks.0.attn.hook_q", "ln_final.hook_normalized" }
    local logits, cache = m:run_with_cache(seqs, { names = want })
    local longest = logits:size(2)
    for i, s in ipairs(seqs) do
      local l1, c1 = m:run_with_cache(s, { names = want })
      local pad = longest - #s
      T.eq(maxdiff(logits:select(1, i):narrow(1, pad + 1, #s), l1), 0, name .. ": logits " .. i)
      for hname, t in pairs(c1) do
        local got = cache[hname]:select(1, i)
        if hname:find("hook_pattern$") then got = got:narrow(2, pad + 1, #s):narrow(3, pad + 1, #s)
        else got = got:narrow(1, pad + 1, #s) end
        T.eq(maxdiff(got, t), 0, ("%s: %s of sequence %d"):format(name, hname, i))
      end
    end
  end
end)

T.test("stories260K: batched generation with text prompts, stop strings and sampling equals generating alone", function()
  local m = seer.model.load(stories)
  local texts = { "Once upon a time", "The little dog", "Lily and Tom went to the park. They", "One day" }
  local opts = { max_new_tokens = 40, temperature = 0.8, seed = 3, stop = "." }
  local outs = m:generate_batch(texts, opts)
  for i, t in ipairs(texts) do
    local alone = m:generate(t, opts)
    T.eq(join(outs[i].ids), join(alone.ids), "prompt " .. i)
    T.eq(outs[i].text, alone.text)
  end
  local greedy = m:generate_batch(texts, { max_new_tokens = 30, max_batch = 3 })
  for i, t in ipairs(texts) do T.eq(greedy[i].text, m:generate(t, { max_new_tokens = 30 }).text, "greedy " .. i) end
end)

T.test("stories260K: prompts on both sides of this CPU's linear GEMM threshold (config.gemm_min_tokens), batched == alone", function()
  local m = seer.model.load(stories, { tokenizer = false })
  local g = m.config.gemm_min_tokens
  T.ok(g >= 16, "gemm_min_tokens " .. tostring(g))
  local function seq(n, k)
    local s = {}
    for i = 1, n do s[i] = (i * 37 + k * 11) % 500 + 3 end
    return s
  end
  -- g + 1 runs its GEMMs alone; g - 1, 30 and 3 share the per-token kernel's pass
  batched_equals_alone(m, { seq(g - 1, 1), seq(g + 1, 2), seq(30, 3), seq(3, 4), seq(7, 5) }, "stories260K", 6)
end)

-- A bf16 llama whose every width is a multiple of 32 (the parity models' 48 and 100 are not), so
-- the bf16 units take every layer where the CPU has them: AMX (either precision), and precision
-- = "fast" on AVX512_BF16 without AMX, pack every sequence of a batch, however long, into one
-- pass (no GEMM path to keep alone: config.gemm_min_tokens is math.huge); elsewhere the default
-- precision takes its GEMM path from config.gemm_min_tokens tokens. Either way a sequence gets
-- what it gets alone.
local bf16_llama = check.bf16_llama

T.test("bf16 widths of 32: batched == alone in both precisions, long and short sequences (the fast kernel packs them all)", function()
  local dir = bf16_llama()
  for _, precision in ipairs({ "exact", "fast" }) do
    local m = seer.model.load(dir, { tokenizer = false, precision = precision })
    local g = m.config.gemm_min_tokens
    local long = g < 400 and g + 2 or 150
    local function seq(n, k)
      local s = {}
      for i = 1, n do s[i] = (i * 7 + k * 13) % 93 + 3 end
      return s
    end
    batched_equals_alone(m, { seq(1, 1), seq(5, 2), seq(17, 3), seq(40, 4), seq(long, 5), seq(3, 6) }, precision)
    local kind = require("seer.core.model").fast_kind()
    if kind == "AMX" or (precision == "fast" and kind == "AVX512_BF16") then
      T.eq(g, math.huge, precision .. " on " .. kind .. ": no count takes a GEMM path")
    else
      T.ok(g >= 16 and g < math.huge, precision .. ": gemm_min_tokens " .. tostring(g))
    end
  end
end)

T.test("a failing hook in one sequence fails the batched call and leaves the model usable", function()
  local m = seer.model.load(pdir .. "/llama", { tokenizer = false })
  local seqs = prompts(m.config.vocab_size)
  T.raises(function()
    m:generate_batch(seqs, { max_new_tokens = 4, per_sequence = { [2] = { hooks = { { "blocks.0.hook_resid_post", function() error("boom") end } } } } })
  end, "boom")
  local outs = m:generate_batch(seqs, { max_new_tokens = 4 })
  T.eq(join(outs[1].ids), join(m:generate(seqs[1], { max_new_tokens = 4 }).ids))
end)

T.test("generate_batch: bad arguments are errors naming the problem", function()
  local m = seer.model.load(pdir .. "/llama", { tokenizer = false })
  T.raises(function() m:generate_batch({ 1, 2, 3 }) end, "expected a list of prompts")
  T.raises(function() m:generate_batch({ { 1, 2 } }, { max_batch = 0 }) end, "max_batch must be a positive integer")
  T.raises(function() m:generate_batch({ { 1, 2 } }, { per_sequence = { [3] = {} } }) end, "keys must be prompt numbers 1..1")
  T.raises(function() m:generate_batch({ { 1, 2 }, {} }) end, "prompt 2: the prompt has no tokens")
  T.raises(function() m:generate_batch({ { 1, 2 } }, { per_sequence = { { hooks = { { "nope", I.capture() } } } } }) end,
    "no hook point matches 'nope'")
  T.raises(function() m:generate_batch({ { 1, 2 } }, { stream = print }) end, "stream is not supported")
  T.eq(#m:generate_batch({}), 0)
end)

-- A pattern or scores hook on one sequence moves that sequence to the hooked attention path; the
-- batch's one other sequence, long enough for attention's GEMM path, ran the per-token kernel
-- (other bits than alone) when it was left as the only plain sequence. Found by
-- tests/lua/test_fuzz_batch.lua.
T.test("a pattern hook on one sequence of a batch leaves the other sequences' bits alone (one plain sequence left, or several)", function()
  for _, name in ipairs({ "llama", "gemma2", "gpt_neox" }) do
    local m = seer.model.load(pdir .. "/" .. name, { tokenizer = false })
    local vocab = m.config.vocab_size
    local seqs = {}
    for i, n in ipairs({ 40, 33, 9 }) do
      seqs[i] = {}
      for j = 1, n do seqs[i][j] = (i * 131 + j * 17) % (vocab - 3) + 3 end
    end
    local hook = { { "blocks.0.attn.hook_pattern", I.scale(1, { heads = { 0 } }) } }
    for _, list in ipairs({ { seqs[1], seqs[2] }, { seqs[1], seqs[2], seqs[3] } }) do
      local out = m:run_with_hooks(list, { per_sequence = { [1] = hook } })
      local longest = out:size(2)
      for i = 2, #list do
        local n = #list[i]
        T.eq(maxdiff(out:select(1, i):narrow(1, longest - n + 1, n), m:forward(list[i])), 0,
          ("%s: sequence %d of %d (%d tokens) beside a hooked one"):format(name, i, #list, n))
      end
      local n1 = #list[1]
      T.eq(maxdiff(out:select(1, 1):narrow(1, longest - n1 + 1, n1), m:run_with_hooks(list[1], { fwd_hooks = hook })), 0,
        name .. ": the hooked sequence")
    end
  end
end)

T.test("run_with_hooks per_sequence and toolkit patch_sweep (one batch per layer) equal the runs alone, exactly", function()
  local AP = require "toolkit.activation_patching"
  local m = seer.model.load(stories)
  local clean = m.tokenizer:encode("The dog ran to the park")
  local corrupt = m.tokenizer:encode("The cat ran to the park")
  local _, cache = m:run_with_cache(clean, { names = { "blocks.2.hook_resid_pre" } })
  local saved = cache["blocks.2.hook_resid_pre"]
  local inputs, per = {}, {}
  for j = 1, #corrupt do
    inputs[j] = corrupt
    per[j] = { { "blocks.2.hook_resid_pre", I.replace(saved, { positions = { j - 1 } }) } }
  end
  local batched = m:run_with_hooks(inputs, { per_sequence = per })
  local differ = 0
  for j = 1, #corrupt do
    local alone = m:run_with_hooks(corrupt, { fwd_hooks = per[j] })
    T.eq(maxdiff(batched:select(1, j), alone), 0, "patched position " .. (j - 1))
    if maxdiff(alone, m:forward(corrupt)) > 0 then differ = differ + 1 end
  end
  T.ok(differ >= 2, "the patches change the logits (else the comparison checks nothing)")
  local metric = function(l) return l[{ -1, 10 }] - l[{ -1, 20 }] end
  local grid = AP.patch_sweep(m, clean, corrupt, metric, { layers = { 1, 3 } })
  for i, l in ipairs({ 1, 3 }) do
    for j = 1, #corrupt do
      local want = AP.patch(m, clean, corrupt, ("blocks.%d.hook_resid_pre"):format(l), { j - 1 }, metric)
      T.eq(grid[{ i, j }], want, ("layer %d position %d"):format(l, j - 1))
    end
  end
  -- an active hook at a swept layer's hook_resid_pre: the residual captured there has had it, and
  -- a pass beginning at that block applied it a second time (other bits than the patch alone;
  -- found by tests/lua/test_fuzz_batch.lua): that layer runs whole passes
  tensor.manual_seed(2)
  local dir = tensor.randn(m.config.hidden_size)
  m:with_hooks({ { "blocks.1.hook_resid_pre", I.ablate(dir) }, { "blocks.3.hook_resid_pre", I.add(dir * 0.3) } }, function()
    local g = AP.patch_sweep(m, clean, corrupt, metric, { layers = { 1, 2, 3 }, point = "hook_mlp_out" })
    for i, l in ipairs({ 1, 2, 3 }) do
      for j = 1, #corrupt do
        local want = AP.patch(m, clean, corrupt, ("blocks.%d.hook_mlp_out"):format(l), { j - 1 }, metric)
        T.eq(g[{ i, j }], want, ("with an active hook: layer %d position %d"):format(l, j - 1))
      end
    end
  end)
  T.raises(function() m:run_with_hooks(corrupt, { per_sequence = {} }) end, "per_sequence needs a list of sequences")
  T.raises(function() m:run_with_hooks(inputs, { per_sequence = { [99] = {} } }) end, "keys must be sequence numbers")
end)
