-- Repeated prompts in generate_batch compute their prompt once (engine/model/lua_model.c,
-- prompt_donor): a sequence whose prompt tokens and hooks are another's takes that one's KV
-- cache rows and prompt logits instead of running its prefill. What it takes must be exactly what
-- it would compute: every result here is checked against the sequence generated alone, and the
-- number of prefills taken (core.shared_prefills) is checked too, so a change that stops sharing
-- fails as surely as one that shares wrongly. Sharing must not happen where the prompt's
-- computation differs or leaves something behind: different interventions, a capture or a Lua
-- function hook, or a model state changed since the donor ran (an adapter switched, the GEMM
-- threshold moved, an intervention's filter changed).
local T = require "testing"
local I = require "seer.interventions"
local check = require "batch_check"
local core = require "seer.core.model"
local tensor = seer.tensor

local here = seer.script_dir()
local pdir = here .. "/../parity/models"
local stories = here .. "/../fixtures/models/stories260K"
local lora_dir = here .. "/../parity/lora"

local function join(t) return table.concat(t, ",") end

-- models without their prompt cache (tested at the end; batch_check.load_uncached says why)
local load = check.load_uncached

-- fn's results and how many prefills step_batch took from another generator while it ran
local function counting(fn)
  local c0 = core.shared_prefills()
  local r = fn()
  return core.shared_prefills() - c0, r
end

-- every output of a batch == generate alone with opts(i) (under hooks(i) when given), bit for bit
local function equals_alone(m, prompts, outs, opts, label, hooks)
  for i, p in ipairs(prompts) do
    local function alone() return m:generate(p, opts(i)) end
    local a = hooks and hooks(i) and m:with_hooks(hooks(i), alone) or alone()
    T.eq(join(outs[i].ids), join(a.ids), ("%s: sequence %d"):format(label, i))
  end
end

local at_gemm_min = check.at_gemm_min

-- 6 texts, each 4 times, the repeats apart (rep outer, as an experiment builds a battery)
local TEXTS = { "Once upon a time", "One day, a little", "There was a big dog", "Lily and Tom went to",
  "The sun was", "In the park, a girl named Sue found a ball and a hat" }
local function battery()
  local p = {}
  for _ = 1, 4 do for _, t in ipairs(TEXTS) do p[#p + 1] = t end end
  return p
end

T.test("stories260K: 6 prompts x 4, sampled, every max_batch: each result is generate alone's, 18 prefills taken", function()
  local m = load(stories)
  local prompts = battery()
  local per = {}
  for i = 1, #prompts do
    -- own seeds, so the repeats sample different continuations; min_new_tokens and a repetition
    -- penalty change the logits each step samples from (the prompt's must be taken before that)
    per[i] = { seed = 100 + i, min_new_tokens = i % 3 == 0 and 4 or nil, repetition_penalty = i % 4 == 0 and 1.3 or nil,
      max_new_tokens = 8 + i % 5 }
  end
  local function opts(i)
    local o = { temperature = 0.9, top_p = 0.95 }
    for k, v in pairs(per[i]) do o[k] = v end
    return o
  end
  for _, width in ipairs({ 24, 16, 5, 2, 1 }) do
    local n, outs = counting(function()
      return m:generate_batch(prompts, { temperature = 0.9, top_p = 0.95, per_sequence = per, max_batch = width })
    end)
    equals_alone(m, prompts, outs, opts, "max_batch " .. width)
    -- with max_batch 1 every donor has finished when its repeat joins: it stays in the step's list
    T.eq(n, 18, ("max_batch %d: prefills taken"):format(width))
    local distinct = {}
    for i = 1, 6 do distinct[join(outs[i].ids)] = true end
    for i = 7, 24 do distinct[join(outs[i].ids)] = true end
    local c = 0
    for _ in pairs(distinct) do c = c + 1 end
    T.ok(c >= 12, "the repeats sampled different continuations (else this checks little): " .. c)
  end
  local n, outs = counting(function()
    return m:generate_batch(prompts, { temperature = 0.9, top_p = 0.95, per_sequence = per, share_prompts = false })
  end)
  T.eq(n, 0, "share_prompts = false: every prompt computed")
  equals_alone(m, prompts, outs, opts, "share_prompts = false")
  T.raises(function() m:generate_batch(prompts, { share_prompts = 1 }) end, "share_prompts must be a boolean")
end)

T.test("what is taken is the prompt's logits before the donor's sampling changed them (repetition penalty, min_new_tokens)", function()
  local m = load(stories)
  local p = "Once upon a time, there was a little girl named Lily. Lily"
  -- the donor's penalty below 1 raises every prompt token (transformers' rule); greedy
  -- continuations tell a recipient that sampled from the raised logits
  local per = { [1] = { repetition_penalty = 0.05, min_new_tokens = 3 }, [2] = {}, [3] = { repetition_penalty = 0.05 } }
  for _, width in ipairs({ 3, 1 }) do
    local n, outs = counting(function() return m:generate_batch({ p, p, p }, { max_new_tokens = 6, per_sequence = per, max_batch = width }) end)
    T.eq(n, 2, "max_batch " .. width .. ": prefills taken")
    equals_alone(m, { p, p, p }, outs, function(i)
      local o = { max_new_tokens = 6 }
      for k, v in pairs(per[i]) do o[k] = v end
      return o
    end, "max_batch " .. width)
    T.ok(join(outs[1].ids) ~= join(outs[2].ids), "the penalty changed the continuation (else this checks little)")
  end
end)

T.test("toolkit.batch_generate on repeated conversations takes their prompts", function()
  local m = load(stories)
  local bg = require "toolkit.batch_generate"
  local convs = { "Once upon a time", "One day,", "Once upon a time", "One day,", "Once upon a time" }
  local n, texts = counting(function() return (bg.batch_generate(m, m.tokenizer, convs, 10, 0.8, 0.95, { seed = 3 })) end)
  T.eq(n, 3)
  for i, c in ipairs(convs) do
    local alone = bg.batch_generate(m, m.tokenizer, { c }, 10, 0.8, 0.95, { seed = 3 + i - 1 })
    T.eq(texts[i], alone[1], "conversation " .. i)
  end
end)

-- Every architecture, prompts on both sides of every GEMM threshold (17 and 21 tokens take
-- attention's GEMM path, and the linear layers' with the threshold at 16): the taken prompt is
-- what the sequence computes alone, whichever kernels computed it.
local names = {}
for _, e in ipairs(require("seer.core.host").list_dir(pdir)) do names[#names + 1] = e end
table.sort(names)
assert(#names >= 20, "the parity models are missing from " .. pdir)
local function seq(n, k, vocab)
  local s = {}
  for i = 1, n do s[i] = (i * 7 + k * 13) % (vocab - 1) + 1 end
  return s
end
for _, setting in ipairs({ { 0, "" }, { 16, " [linear GEMM from 16 tokens]" } }) do
  T.test("every architecture: repeated prompts of 1 to 21 tokens equal generate alone" .. setting[2], function()
    at_gemm_min(setting[1], function()
      for _, name in ipairs(names) do
        local m = load(pdir .. "/" .. name, { tokenizer = false })
        local V = m.config.vocab_size
        local base = { seq(5, 1, V), seq(1, 2, V), seq(17, 3, V), seq(21, 5, V) }
        local prompts = { base[1], base[2], base[3], base[1], base[4], base[3], base[2], base[4], base[3] }
        local per = {}
        for i = 1, #prompts do per[i] = { seed = i, max_new_tokens = 3 + i % 4 } end
        local function opts(i) return { temperature = 1.1, seed = i, max_new_tokens = 3 + i % 4 } end
        local n, outs = counting(function()
          return m:generate_batch(prompts, { temperature = 1.1, per_sequence = per, max_batch = 3 })
        end)
        equals_alone(m, prompts, outs, opts, name)
        T.eq(n, 5, name .. ": prefills taken")
      end
    end)
  end)
end

T.test("a bf16 KV cache (precision = \"fast\" where the bf16 units run) is taken as it is", function()
  local dir = check.bf16_llama()
  for _, precision in ipairs({ "exact", "fast" }) do
    local m = load(dir, { tokenizer = false, precision = precision })
    local prompts = { seq(40, 1, 93), seq(6, 2, 93), seq(40, 1, 93), seq(6, 2, 93), seq(40, 1, 93) }
    local function opts(i) return { temperature = 1.0, seed = i, max_new_tokens = 6 } end
    local per = {}
    for i = 1, #prompts do per[i] = { seed = i } end
    local n, outs = counting(function()
      return m:generate_batch(prompts, { temperature = 1.0, max_new_tokens = 6, per_sequence = per, max_batch = 2 })
    end)
    equals_alone(m, prompts, outs, opts, precision)
    T.eq(n, 3, precision .. ": prefills taken")
    if precision == "fast" and core.fast_kind() then T.eq(m.config.kv_cache_dtype, "bf16") end
  end
end)

T.test("hooks: the same pure interventions share, different ones, captures and functions do not", function()
  local m = load(pdir .. "/llama", { tokenizer = false })
  local d, V = m.config.hidden_size, m.config.vocab_size
  tensor.manual_seed(5)
  local v = tensor.randn(d) * 4
  local a, b = seq(9, 1, V), seq(13, 2, V)
  local prompts = { a, b, a, b, a }
  local function opts(i) return { temperature = 1.0, seed = i, max_new_tokens = 6 } end
  local per = {}
  for i = 1, #prompts do per[i] = { seed = i } end
  local go = { temperature = 1.0, max_new_tokens = 6, per_sequence = per }
  -- the model's hooks apply to every sequence: still the same computation for the repeats
  local steer = { { "blocks.1.hook_resid_post", I.add(v, { strength = 1 }) } }
  local n, outs = counting(function() return m:with_hooks(steer, function() return m:generate_batch(prompts, go) end) end)
  T.eq(n, 3, "model hooks (an add): prefills taken")
  equals_alone(m, prompts, outs, opts, "model hooks", function() return steer end)
  -- per-sequence: 1 and 5 carry the same intervention object, 3 another of the same kind
  local same = I.add(v, { strength = 2 })
  local own = {
    [1] = { { "blocks.0.hook_resid_post", same } },
    [3] = { { "blocks.0.hook_resid_post", I.add(v, { strength = -2 }) } },
    [5] = { { "blocks.0.hook_resid_post", same } },
  }
  local per2 = {}
  for i = 1, #prompts do per2[i] = { seed = i, hooks = own[i] } end
  n, outs = counting(function() return m:generate_batch(prompts, { temperature = 1.0, max_new_tokens = 6, per_sequence = per2 }) end)
  T.eq(n, 2, "per-sequence hooks: 5 takes 1's prompt, 4 takes 2's; 3 runs its own")
  equals_alone(m, prompts, outs, opts, "per-sequence hooks", function(i) return own[i] end)
  T.ok(join(outs[1].ids) ~= join(outs[3].ids), "the two strengths gave different continuations (else this checks little)")
  -- a capture records per sequence; a function runs per sequence: neither is skipped
  local cap = I.capture()
  n, outs = counting(function()
    return m:with_hooks({ { "blocks.0.hook_resid_post", cap } }, function() return m:generate_batch(prompts, go) end)
  end)
  T.eq(n, 0, "a capture: every prompt computed")
  local seen = {}
  for _, c in ipairs(cap:chunks()) do
    if c.positions[1] == 0 then seen[#seen + 1] = c.batch end
  end
  T.eq(join(seen), "1,2,3,4,5", "a capture sees every prompt, in the prompts' order")
  local calls = 0
  n = counting(function()
    return m:with_hooks({ { "blocks.0.hook_resid_post", function() calls = calls + 1 end } },
      function() return m:generate_batch(prompts, go) end)
  end)
  T.eq(n, 0, "a function hook: every prompt computed")
  T.ok(calls >= #prompts, "the function ran for every prompt")
end)

T.test("a steering sweep from the first new token shares the prompt; one that reaches into the prompt does not", function()
  local m = load(pdir .. "/llama", { tokenizer = false })
  local d, V = m.config.hidden_size, m.config.vocab_size
  tensor.manual_seed(9)
  local v = tensor.randn(d) * 3
  local p = seq(20, 6, V)
  local n = #p
  local function sweep(filter, point)
    local prompts, own, per = {}, {}, {}
    for i, s in ipairs({ 0, 1, 2, 4, 8, -4 }) do
      prompts[i] = p
      local o = { strength = not point and s or nil }
      for k, x in pairs(filter) do o[k] = x end
      if s ~= 0 then own[i] = { { point or "blocks.1.hook_resid_post", point and I.scale(1 + s / 10, o) or I.add(v, o) } } end
      per[i] = { seed = i, hooks = own[i] }
    end
    local cnt, outs = counting(function() return m:generate_batch(prompts, { temperature = 1.0, max_new_tokens = 6, per_sequence = per }) end)
    equals_alone(m, prompts, outs, function(i) return { temperature = 1.0, seed = i, max_new_tokens = 6 } end,
      "sweep " .. seer.json.encode(filter) .. (point or ""), function(i) return own[i] end)
    return cnt, outs
  end
  -- steering_hook(model, layer, v, s, #prompt, ...)'s add: positions >= n, none in the prompt
  local cnt, outs = sweep({ from = n })
  T.eq(cnt, 5, "from the first new token: every sequence takes the unsteered prompt")
  local differ = 0
  for i = 2, 6 do if join(outs[i].ids) ~= join(outs[1].ids) then differ = differ + 1 end end
  T.ok(differ >= 3, "the strengths changed the continuations (else this checks little)")
  T.eq((sweep({ positions = { n, n + 2 } })), 5, "positions past the prompt only")
  T.eq((sweep({ from = n - 1 })), 0, "from the last prompt token: every prompt computed")
  T.eq((sweep({ positions = { -1 } })), 0, "position -1 (the prompt's last): every prompt computed")
  T.eq((sweep({ only_prompt = true })), 0, "only_prompt: every prompt computed")
  -- a hook at the pattern moves the pass onto the hooked attention path even where it selects nothing
  T.eq((sweep({ from = n }, "blocks.0.attn.hook_pattern")), 0, "a pattern hook past the prompt: every prompt computed")
end)

T.test("a donor computed under another model state is not taken (GEMM threshold, intervention filter, adapter)", function()
  local m = load(pdir .. "/llama", { tokenizer = false })
  local V = m.config.vocab_size
  local p = seq(20, 4, V)
  local function gen(hooks) return m._c:generator(p, { max_new_tokens = 4, temperature = 0, share_prompt = true, hooks = hooks }) end
  local function first(g)
    local ids = core.step_batch({ g })
    return ids[1]
  end
  local ids
  -- positive control: the same state, a donor prefilled in an earlier step
  local g1 = gen()
  first(g1)
  local n = counting(function() return core.step_batch({ g1, gen() }) end)
  T.eq(n, 1, "same state: taken")
  -- the linear threshold moved (20 tokens now take the GEMM path: other bits)
  local alone_gemm
  at_gemm_min(16, function()
    n = counting(function() return core.step_batch({ g1, gen() }) end)
    alone_gemm = first(gen()) -- no donor in the list
  end)
  T.eq(n, 0, "the GEMM threshold moved since the donor ran: not taken")
  -- g1 was prefilled at the defaults; back at them it may give again
  n = counting(function() return core.step_batch({ g1, gen() }) end)
  T.eq(n, 0, "a threshold moved and back: the epoch moved twice, still not taken")
  T.ok(alone_gemm ~= nil)
  -- an attached intervention's filter changed after the donor ran
  local iv = I.add(tensor.randn(m.config.hidden_size) * 3, { strength = 1 })
  local hooks = { { "blocks.0.hook_resid_post", iv } }
  local h1 = gen(hooks)
  first(h1)
  n = counting(function() return core.step_batch({ h1, gen(hooks) }) end)
  T.eq(n, 1, "same hooks, same state: taken")
  iv:filter({ positions = { 0 } })
  local h3 = gen(hooks)
  n, ids = counting(function() return core.step_batch({ h1, h3 }) end)
  T.eq(n, 0, "the intervention's filter changed since the donor ran: not taken")
  T.eq(ids[2], m:with_hooks(hooks, function() return m:generate(p, { max_new_tokens = 4 }) end).ids[1],
    "the first token with the new filter, as alone")
  -- an adapter switched off after the donor ran with it
  local cases = {}
  for _, e in ipairs(require("seer.core.host").list_dir(lora_dir)) do
    local ok, cfg = pcall(function() return seer.json.decode(seer.read_file(lora_dir .. "/" .. e .. "/adapter_config.json")) end)
    if ok and cfg.base_model_name_or_path == "llama" then cases[#cases + 1] = e end
  end
  T.ok(#cases >= 1, "a LoRA case on the llama parity model")
  local lm = load(pdir .. "/llama", { tokenizer = false })
  lm:load_adapter(lora_dir .. "/" .. cases[1])
  local function lgen() return lm._c:generator(p, { max_new_tokens = 4, temperature = 0, share_prompt = true }) end
  local d1 = lgen()
  first(d1)
  lm:set_adapter(false)
  n, ids = counting(function() return core.step_batch({ d1, lgen() }) end)
  T.eq(n, 0, "the adapter switched off since the donor ran: not taken")
  T.eq(ids[2], lm:generate(p, { max_new_tokens = 4 }).ids[1], "the first token without the adapter, as alone")
  lm:set_adapter(true)
end)

-- ---- the model's prompt cache (Model:prompt_cache): generate and generate_iter keep their prompt

T.test("prompt cache: n samples of one prompt in a loop compute it once, with the bits of computing it each time", function()
  local m = seer.model.load(stories)
  T.eq(m:prompt_cache().budget, 256 * 1024 * 1024, "on by default on a CPU model")
  local p = "Once upon a time, there was a little girl named Lily. She"
  local function run()
    local outs = {}
    for seed = 1, 6 do outs[seed] = m:generate(p, { max_new_tokens = 12, temperature = 0.9, seed = seed }).ids end
    -- generate_iter takes it too
    local it = {}
    for id in m:generate_iter(p, { max_new_tokens = 12, temperature = 0.9, seed = 7 }) do it[#it + 1] = id end
    outs[7] = it
    return outs
  end
  local n, cached = counting(run)
  T.eq(n, 6, "the first computes the prompt, the other six take it")
  local st = m:prompt_cache()
  T.eq(st.entries, 1, "one entry: a generation that took its prompt adds none")
  local c = m.config
  local ids = m.tokenizer:encode(p)
  T.eq(st.bytes, 2 * c.num_hidden_layers * #ids * c.num_key_value_heads * (c.hidden_size / c.num_attention_heads) * 4 + 4 * c.vocab_size,
    "the entry holds the prompt's rows and logits, not the room for new tokens")
  m:prompt_cache(0)
  T.eq(m:prompt_cache().entries, 0, "budget 0 drops what it holds")
  local n2, computed = counting(run)
  T.eq(n2, 0, "off: every prompt computed")
  for i = 1, 7 do T.eq(join(cached[i]), join(computed[i]), "sample " .. i) end
  local distinct = {}
  for i = 1, 7 do distinct[join(computed[i])] = true end
  local k = 0
  for _ in pairs(distinct) do k = k + 1 end
  T.ok(k >= 5, "the seeds gave different samples (else this checks little)")
  T.raises(function() m:prompt_cache(-1) end, "budget must be a whole number of bytes")
  T.raises(function() m:prompt_cache("big") end, "budget must be a whole number of bytes")
end)

T.test("prompt cache: a steering sweep from the first new token, a batch after single calls, stop strings, eviction", function()
  local m = seer.model.load(stories)
  local steer = require "toolkit.steering_hook"
  local p = "One day, a little dog"
  local n_p = #m.tokenizer:encode(p)
  tensor.manual_seed(3)
  local v = tensor.randn(m.config.hidden_size) * 2
  local function sweep()
    local outs = {}
    for i, s in ipairs({ 0, 2, 4, 8 }) do
      outs[i] = steer.steering_hook(m, 3, v, s, n_p, function()
        return m:generate(p, { max_new_tokens = 10, temperature = 0.8, seed = i }).text end)
    end
    -- a batch after single calls: both prompts computed before, in the cache
    local b = m:generate_batch({ p, "Lily and Tom went to", p }, { max_new_tokens = 6, temperature = 0.8, seed = 5, progress = false })
    outs[5] = b[1].text .. "|" .. b[2].text .. "|" .. b[3].text
    return outs
  end
  m:generate("Lily and Tom went to", { max_new_tokens = 3 })
  local n, cached = counting(sweep)
  T.eq(n, 3 + 3, "the steered calls take the unsteered prompt; the batch takes all three prompts")
  m:prompt_cache(0)
  local n2, plain = counting(sweep)
  T.eq(n2, 1, "off: only the batch's repeat")
  for i = 1, 5 do T.eq(cached[i], plain[i], "output " .. i) end
  T.ok(plain[1] ~= plain[4], "the steering changed the text (else this checks little)")
  m:prompt_cache(256 * 1024 * 1024)
  -- a generation that a stop string ends is kept too
  m:generate("Once upon a time", { max_new_tokens = 30, stop = "." })
  T.eq(m:prompt_cache().entries, 1)
  -- an abandoned generate_iter is not kept
  local it = m:generate_iter("The sun was", { max_new_tokens = 5 })
  it()
  T.eq(m:prompt_cache().entries, 1)
  -- a generation whose prompt a capture or a function hook saw is not kept (none could take it)
  local cap = I.capture()
  m:with_hooks({ { "blocks.0.hook_resid_post", cap } }, function() return m:generate("A cat sat", { max_new_tokens = 2 }) end)
  m:with_hooks({ { "blocks.0.hook_resid_post", function() end } }, function() return m:generate("A cat sat", { max_new_tokens = 2 }) end)
  T.eq(m:prompt_cache().entries, 1)
  T.ok(#cap:chunks() > 0)
  -- at most 32 entries, most recently used first: a loop over 10 prompts finds each one on its second round
  for i = 1, 10 do m:generate("Tom had " .. i .. " apples", { max_new_tokens = 1 }) end
  n = counting(function()
    for i = 1, 10 do m:generate("Tom had " .. i .. " apples", { max_new_tokens = 1 }) end
  end)
  T.eq(n, 10, "a second round over 10 prompts takes all 10")
  for i = 11, 40 do m:generate("Tom had " .. i .. " apples", { max_new_tokens = 1 }) end
  T.eq(m:prompt_cache().entries, 32)
  n = counting(function() return m:generate("Tom had 40 apples", { max_new_tokens = 1 }) end)
  T.eq(n, 1, "the newest is kept")
  n = counting(function() return m:generate("Tom had 1 apples", { max_new_tokens = 1 }) end)
  T.eq(n, 0, "the least recently used was dropped")
  -- least recently used, not oldest: a prompt taken again and again stays while 40 others pass
  m:generate("Tom had 0 apples", { max_new_tokens = 1 })
  local hot = 0
  for i = 41, 80 do
    m:generate("Tom had " .. i .. " apples", { max_new_tokens = 1 })
    if i % 8 == 0 then hot = hot + counting(function() return m:generate("Tom had 0 apples", { max_new_tokens = 1 }) end) end
  end
  T.eq(hot, 5, "the prompt used every 8 calls is taken each time")
  n = counting(function() return m:generate("Tom had 41 apples", { max_new_tokens = 1 }) end)
  T.eq(n, 0, "one added 40 calls ago and never used since was dropped")
  -- a budget smaller than one entry keeps nothing
  m:prompt_cache(1000)
  T.eq(m:prompt_cache().entries, 0)
  m:generate("Tom had 1 apples", { max_new_tokens = 1 })
  T.eq(m:prompt_cache().entries, 0)
end)

T.test("prompt cache: generate_batch keeps its prompts too (a battery run again takes them all), moves what it takes to the front, and share_prompts = false keeps none", function()
  local m = seer.model.load(stories)
  local battery = { "Once upon a time", "One day, a dog", "Lily and Tom went to", "The sun was", "A big red ball" }
  local o = { max_new_tokens = 6, temperature = 0.9, seed = 4, progress = false }
  local n1, first = counting(function() return m:generate_batch(battery, o) end)
  T.eq(n1, 0)
  T.eq(m:prompt_cache().entries, #battery, "each finished sequence kept its prompt")
  local n2, again = counting(function() return m:generate_batch(battery, o) end)
  T.eq(n2, #battery, "the battery run again takes every prompt")
  T.eq(m:prompt_cache().entries, #battery, "a prompt taken whole adds no entry")
  for i = 1, #battery do T.eq(join(again[i].ids), join(first[i].ids), "prompt " .. i) end
  -- a loop of generate calls after the batch takes its prompts too, with the bits of computing them
  local ref = check.load_uncached(stories)
  local n3 = counting(function()
    for i, p in ipairs(battery) do
      T.eq(join(m:generate(p, { max_new_tokens = 4 }).ids), join(ref:generate(p, { max_new_tokens = 4 }).ids), "prompt " .. i .. " alone")
    end
  end)
  T.eq(n3, #battery, "each generate took its prompt from the batch's entries")
  -- what a batch takes moves to the front: one battery prompt reused by batches stays while 40
  -- single prompts pass
  m:prompt_cache(0)
  m:prompt_cache(256 * 1024 * 1024)
  m:generate_batch({ battery[1] }, o)
  local hot = 0
  for i = 1, 40 do
    m:generate("Tom had " .. i .. " apples", { max_new_tokens = 1 })
    if i % 8 == 0 then hot = hot + counting(function() return m:generate_batch({ battery[1], "Tom had 0 pears" .. i }, o) end) end
  end
  T.eq(hot, 5, "the battery prompt a batch takes every 8 calls is taken each time")
  -- share_prompts = false: nothing kept, nothing taken
  m:prompt_cache(0)
  m:prompt_cache(256 * 1024 * 1024)
  local n4 = counting(function() return m:generate_batch(battery, { max_new_tokens = 3, share_prompts = false, progress = false }) end)
  T.eq(n4, 0)
  T.eq(m:prompt_cache().entries, 0, "share_prompts = false keeps no prompt")
end)

T.test("prompt cache: an entry from before an adapter switch serves no one and is dropped", function()
  local cases = {}
  for _, e in ipairs(require("seer.core.host").list_dir(lora_dir)) do
    local ok, cfg = pcall(function() return seer.json.decode(seer.read_file(lora_dir .. "/" .. e .. "/adapter_config.json")) end)
    if ok and cfg.base_model_name_or_path == "llama" then cases[#cases + 1] = e end
  end
  local m = seer.model.load(pdir .. "/llama", { tokenizer = false })
  m:load_adapter(lora_dir .. "/" .. cases[1])
  local p = seq(12, 3, m.config.vocab_size)
  local on = m:generate(p, { max_new_tokens = 5 }).ids
  T.eq(m:prompt_cache().entries, 1)
  m:set_adapter(false)
  local n, off = counting(function() return m:generate(p, { max_new_tokens = 5 }).ids end)
  T.eq(n, 0, "not taken across the switch")
  T.eq(m:prompt_cache().entries, 1, "the stale entry dropped, the new one kept")
  m:prompt_cache(0)
  T.eq(join(off), join(m:generate(p, { max_new_tokens = 5 }).ids), "without the adapter, as computed")
  m:set_adapter(true)
  T.eq(join(on), join(m:generate(p, { max_new_tokens = 5 }).ids), "with it, as computed")
  T.ok(join(on) ~= join(off), "the adapter changed the tokens (else this checks little)")
end)
