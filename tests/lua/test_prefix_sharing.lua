-- Prompts that share a beginning (a system prompt, the preamble before an injection) compute it
-- once (engine/model/lua_model.c, prefix_donor): a prompt takes the KV rows of another's first
-- positions, in whole blocks of 64, and runs its rest with the kernels its whole prompt's pass
-- would take there (seer_batch_seq_t.paths). What it takes and computes must be exactly what it
-- computes alone: the prompt logits are compared bit for bit with the prompt computed alone, the
-- generations token for token, and the number of positions taken (core.shared_prefills' second
-- value) is checked against the rule, worked out here from the lengths alone, so a change that
-- stops sharing fails as surely as one that shares wrongly.
local T = require "testing"
local I = require "seer.interventions"
local check = require "batch_check"
local core = require "seer.core.model"
local tensor = seer.tensor

local here = seer.script_dir()
local pdir = here .. "/../parity/models"
local stories = here .. "/../fixtures/models/stories260K"

local function join(t) return table.concat(t, ",") end

local load = check.load_uncached

-- fn's result and how many prompt positions were taken as shared beginnings while it ran
local function rows_taken(fn)
  local _, r0 = core.shared_prefills()
  local r = fn()
  local _, r1 = core.shared_prefills()
  return r1 - r0, r
end

local ids = check.ids
local function cat(a, b)
  local out = {}
  for _, v in ipairs(a) do out[#out + 1] = v end
  for _, v in ipairs(b) do out[#out + 1] = v end
  return out
end
local function head(a, n) return { unpack(a, 1, n) } end

-- The rows the rule lets a prompt of lb tokens take from one of la tokens with `common` first
-- tokens alike: whole blocks of 64 under both lengths and under lb (its rest keeps a token), none
-- where a kernel crossing (attention's GEMM path from 16 tokens, the linear layers' from g) lies
-- between the two lengths; on the GEMM path (both from g on) only rows in whole sgemm tiles of
-- both calls (OpenBLAS's row period u, a property of this machine's library: core.blas_row_period).
local U = core.blas_row_period()
local function expect_rows(la, lb, common, g)
  local lo, hi = math.min(la, lb), math.max(la, lb)
  for _, t in ipairs({ 16, g }) do
    if lo < t and hi >= t then return 0 end
  end
  local n = math.min(common, lo, lb - 1)
  if lo >= g then n = U > 0 and math.min(n, lo - lo % U) or 0 end
  return n - n % 64
end

-- exact equality of two [vocab] tensors
local function same_bits(a, b, msg)
  T.ok(a ~= nil and b ~= nil, msg .. ": prompt logits kept")
  local x, y = a:totable(), b:totable()
  T.eq(#x, #y, msg .. ": sizes")
  local bad = 0
  for i = 1, #x do if x[i] ~= y[i] then bad = bad + 1 end end
  T.eq(bad, 0, msg .. ": logits differing from the prompt computed alone")
end

-- A generator of one new token that may give and take prompts (the C interface generate uses).
local function gen(m, p, hooks)
  return m._c:generator(p, { max_new_tokens = 1, share_prompt = true, hooks = hooks or m:_hook_list() })
end

-- the prompts of a case: a donor A (180 tokens: a 150-token beginning S and its own 30), and
-- takers with S or A cut at various lengths, across both kernel crossings and block boundaries
local function case_prompts(vocab)
  local S, A_rest = ids(vocab, 150, 1), ids(vocab, 30, 2)
  local A = cat(S, A_rest)
  return A, {
    { "S + 20", cat(S, ids(vocab, 20, 3)), 150 },
    { "S's first 70 + 20", cat(head(S, 70), ids(vocab, 20, 4)), 70 },
    { "A + 10", cat(A, ids(vocab, 10, 5)), 180 },
    { "A's first 130", head(A, 130), 130 },
    { "A's first 64", head(A, 64), 64 },
    { "A's first 65", head(A, 65), 65 },
    { "S's first 63 + 100", cat(head(S, 63), ids(vocab, 100, 6)), 63 },
    { "40 tokens of S", head(S, 40), 40 },
    { "another 200", ids(vocab, 200, 7), 0 },
    { "S's first 128 + 1", cat(head(S, 128), ids(vocab, 1, 8)), 128 },
    { "S + 80", cat(S, ids(vocab, 80, 9)), 150 },
  }
end

local function common_len(a, b)
  local n = 0
  while n < #a and n < #b and a[n + 1] == b[n + 1] do n = n + 1 end
  return n
end

-- Every taker in one step with the prefilled donor A: the rows each takes (checked against the
-- rule, in sum and one by one), and its prompt logits against the prompt computed alone. A
-- prompt of the step that takes nothing computes its whole prompt first, so a later one may take
-- from it instead (the most rows win).
local function check_case(m, label, g)
  local vocab = m.config.vocab_size
  local A, takers = case_prompts(vocab)
  local dA = gen(m, A)
  core.step_batch({ dA })
  local gens, want, whole = { dA }, 0, { A }
  for _, t in ipairs(takers) do gens[#gens + 1] = gen(m, t[2]) end
  local rows = rows_taken(function() return core.step_batch(gens) end)
  for k, t in ipairs(takers) do
    local e = 0
    for _, d in ipairs(whole) do e = math.max(e, expect_rows(#d, #t[2], common_len(d, t[2]), g)) end
    if e == 0 then whole[#whole + 1] = t[2] end
    want = want + e
    local _, took = gens[k + 1]:took_prompt()
    T.eq(took, e, ("%s: %s (%d tokens) takes %d rows"):format(label, t[1], #t[2], e))
    local alone = gen(m, t[2])
    core.step_batch({ alone })
    same_bits(gens[k + 1]:prompt_logits(), alone:prompt_logits(), ("%s: %s"):format(label, t[1]))
  end
  T.eq(rows, want, label .. ": rows taken in all")
  T.ok(want >= 3 * 64 or U == 0, label .. ": the case shares something (else it checks nothing)")
end

-- models whose positions reach 200 tokens (gpt2's learned table stops at 64)
local MODELS = { "llama", "llama_bf16", "mistral", "qwen2", "qwen3_bf16", "gemma", "gemma2", "gemma3", "gpt_neox",
  "olmo2", "granite", "phi3", "llama_tied_bias", "llama_mlp_bias" }

T.test("every architecture, both GEMM settings: a taken beginning and the computed rest give the prompt's own logits, bit for bit", function()
  for _, name in ipairs(MODELS) do
    local m = load(pdir .. "/" .. name)
    local g = m.config.gemm_min_tokens or 16
    if m.config.model_type == "phi3" then
      -- LongRoPE switches its factors by the pass's length: no beginning is shared
      local A, takers = case_prompts(m.config.vocab_size)
      local dA = gen(m, A)
      core.step_batch({ dA })
      local gens = { dA, gen(m, takers[1][2]) }
      T.eq(rows_taken(function() return core.step_batch(gens) end), 0, name .. ": LongRoPE shares no beginning")
    else
      check_case(m, name, g)
      -- (a model whose every matrix has one kernel for every count keeps math.huge: AMX's bf16)
      check.at_gemm_min(16, function() check_case(m, name .. " (GEMM from 16)", m._c:config().gemm_min_tokens or 16) end)
    end
  end
end)

T.test("precision = fast on a bf16 model (its kernel for every count, a bf16 KV cache): the same bits as alone", function()
  local m = load(check.bf16_llama(), { precision = "fast" })
  check_case(m, "bf16 llama, fast", m.config.gemm_min_tokens or 16)
  local e = load(check.bf16_llama())
  check_case(e, "bf16 llama, exact", e.config.gemm_min_tokens or 16)
end)

T.test("dynamic NTK rope: beginnings shared while both prompts stay within max_position_embeddings", function()
  local d = T.tmpdir()
  local src = pdir .. "/llama_dynamic"
  local cfg = seer.json.decode(seer.read_file(src .. "/config.json"))
  cfg.max_position_embeddings = 175 -- A (180) passes it: the base grows with the pass's length
  seer.write_file(d .. "/config.json", seer.json.encode(cfg))
  seer.write_file(d .. "/model.safetensors", seer.read_file(src .. "/model.safetensors"))
  local m = load(d)
  local vocab = m.config.vocab_size
  local A, takers = case_prompts(vocab)
  local dA = gen(m, A)
  core.step_batch({ dA })
  local gens = { dA, gen(m, takers[1][2]) } -- 170 tokens: A is past the limit, so its rows differ
  T.eq(rows_taken(function() return core.step_batch(gens) end), 0, "A past max_position_embeddings gives nothing")
  -- within the limit: a 170-token donor and a 160-token taker with 150 tokens alike
  local B = cat(head(A, 150), ids(vocab, 20, 11))
  local C = cat(head(A, 150), ids(vocab, 10, 12))
  local dB = gen(m, B)
  core.step_batch({ dB })
  local gC = gen(m, C)
  local want = expect_rows(#B, #C, 150, m.config.gemm_min_tokens or 16)
  T.ok(want == 128 or U == 0, "the case shares 128 rows where sgemm has a row period")
  T.eq(rows_taken(function() return core.step_batch({ dB, gC }) end), want, "both within the limit: 128 rows")
  local alone = gen(m, C)
  core.step_batch({ alone })
  same_bits(gC:prompt_logits(), alone:prompt_logits(), "dynamic rope within the limit")
end)

-- stories260K (a trained model: continuations that interventions visibly change)
local SYS = ("Once upon a time there was a little girl named Lily. She liked to play in the park with her dog. "):rep(5)
local QUESTIONS = { "One day", "The sun was hot and", "Lily saw a big", "Her mom said", "Then a bird", "At night the" }

-- the rows each battery prompt takes from another: their 147-token beginning (BOS included) on
-- the GEMM path (f32 from 96 tokens), 128 where OpenBLAS's row period leaves it whole tiles
local function battery_rows(m, prompts)
  local a, b = m.tokenizer:encode(prompts[1]), m.tokenizer:encode(prompts[2])
  return expect_rows(#a, #b, 147, m.config.gemm_min_tokens or 16)
end

local function battery(m)
  local p = {}
  for _, q in ipairs(QUESTIONS) do p[#p + 1] = SYS .. q end
  return p
end

T.test("generate_batch: a shared system prompt is computed once, every result is generate alone's", function()
  local m = load(stories)
  local prompts = battery(m)
  local n_sys = #m.tokenizer:encode(SYS) -- 147 with the BOS: 128 rows per taker
  T.eq(n_sys, 147, "the system prompt's length")
  for _, mb in ipairs({ 16, 3, 1 }) do
    local opts = { max_new_tokens = 16, temperature = 0.8, seed = 5, max_batch = mb }
    local rows, out = rows_taken(function() return m:generate_batch(prompts, opts) end)
    -- max_batch 1: each joins when the last has finished, kept in the step as a donor
    T.eq(rows, battery_rows(m, prompts) * (#prompts - 1), ("max_batch %d: rows taken"):format(mb))
    for i, p in ipairs(prompts) do
      local a = m:generate(p, { max_new_tokens = 16, temperature = 0.8, seed = 5 })
      T.eq(join(out[i].ids), join(a.ids), ("max_batch %d: prompt %d"):format(mb, i))
    end
  end
  -- share_prompts = false computes every prompt
  local rows = rows_taken(function() return m:generate_batch(prompts, { max_new_tokens = 4, share_prompts = false }) end)
  T.eq(rows, 0, "share_prompts = false")
end)

T.test("an injection from a later prompt position (introspection's shape): the rows before it are shared, results exact", function()
  local m = load(stories)
  local prompts = battery(m)
  local D = m.config.hidden_size
  tensor.manual_seed(3)
  -- a different vector per sequence from position 100 on: rows 0..63 are alike, 64..127 are not
  local per = {}
  for i = 1, #prompts do
    per[i] = { hooks = { { "blocks.2.hook_resid_post", I.add(tensor.randn(D) * 2, { from = 100 }) } } }
  end
  local opts = { max_new_tokens = 12, temperature = 0.8, seed = 9, per_sequence = per }
  local rows, out = rows_taken(function() return m:generate_batch(prompts, opts) end)
  T.eq(rows, math.min(64, battery_rows(m, prompts)) * (#prompts - 1), "64 rows per taker (the hooks differ from 100 on)")
  local changed = 0
  for i, p in ipairs(prompts) do
    local a = m:with_hooks(per[i].hooks, function() return m:generate(p, { max_new_tokens = 12, temperature = 0.8, seed = 9 }) end)
    local plain = m:generate(p, { max_new_tokens = 12, temperature = 0.8, seed = 9 })
    T.eq(join(out[i].ids), join(a.ids), ("prompt %d"):format(i))
    if join(a.ids) ~= join(plain.ids) then changed = changed + 1 end
  end
  T.ok(changed >= 2, "the injections changed continuations (else this checks nothing)")
  -- the same intervention object on every sequence, at a position counted back from each prompt's
  -- end: -60 lands on 87..101 (each prompt's own), so rows 64..127 differ between prompts
  local iv = I.add(tensor.randn(D) * 2, { positions = { -60 } })
  local r2, out2 = rows_taken(function()
    return m:with_hooks({ { "blocks.1.hook_resid_post", iv } }, function()
      return m:generate_batch(prompts, { max_new_tokens = 8 })
    end)
  end)
  T.eq(r2, math.min(64, battery_rows(m, prompts)) * (#prompts - 1), "a position counted from the end: 64 rows per taker")
  for i, p in ipairs(prompts) do
    local a = m:with_hooks({ { "blocks.1.hook_resid_post", iv } }, function() return m:generate(p, { max_new_tokens = 8 }) end)
    T.eq(join(out2[i].ids), join(a.ids), ("from the end: prompt %d"):format(i))
  end
end)

T.test("what keeps a beginning from being shared: a hook at the pattern, a capture, hooks on its rows that differ", function()
  local m = load(stories)
  local prompts = battery(m)
  local D = m.config.hidden_size
  -- a pattern hook, even one acting only past the beginning, moves every row onto the hooked path
  local pat = I.scale(0.5, { from = 140 })
  local r1, out1 = rows_taken(function()
    return m:with_hooks({ { "blocks.0.attn.hook_pattern", pat } }, function() return m:generate_batch(prompts, { max_new_tokens = 6 }) end)
  end)
  T.eq(r1, 0, "a pattern hook: nothing shared")
  for i, p in ipairs(prompts) do
    local a = m:with_hooks({ { "blocks.0.attn.hook_pattern", pat } }, function() return m:generate(p, { max_new_tokens = 6 }) end)
    T.eq(join(out1[i].ids), join(a.ids), ("pattern hook: prompt %d"):format(i))
  end
  -- a capture anywhere: the batch shares nothing (captures run per sequence)
  local cap = I.capture({ positions = { 3 } })
  local r2 = rows_taken(function()
    return m:with_hooks({ { "blocks.0.hook_resid_post", cap } }, function() return m:generate_batch(prompts, { max_new_tokens = 2 }) end)
  end)
  T.eq(r2, 0, "a capture: nothing shared")
  -- different interventions from position 10: the first block differs, nothing is shared
  tensor.manual_seed(4)
  local per = {}
  for i = 1, #prompts do per[i] = { hooks = { { "blocks.0.hook_resid_post", I.add(tensor.randn(D), { from = 10 }) } } } end
  local r3 = rows_taken(function() return m:generate_batch(prompts, { max_new_tokens = 2, per_sequence = per }) end)
  T.eq(r3, 0, "interventions differing from position 10: nothing shared")
  -- after a GEMM-threshold change the prefilled rows are another computation's
  local A = m.tokenizer:encode(SYS .. "One day")
  local dA = gen(m, A)
  core.step_batch({ dA })
  check.at_gemm_min(16, function()
    local g = gen(m, m.tokenizer:encode(SYS .. "Then a bird"))
    T.eq(rows_taken(function() return core.step_batch({ dA, g }) end), 0, "a donor from before a threshold change gives nothing")
  end)
end)

T.test("the prompt cache: a loop of generate calls over one system prompt takes its rows; interventions count as reached", function()
  local m = seer.model.load(stories)
  local prompts = battery(m)
  local rows, outs = rows_taken(function()
    local o = {}
    for i, p in ipairs(prompts) do o[i] = m:generate(p, { max_new_tokens = 10, temperature = 0.7, seed = i }) end
    return o
  end)
  T.eq(rows, battery_rows(m, prompts) * (#prompts - 1), "each call after the first takes 128 rows from the cache")
  T.ok(U == 0 or rows > 0, "the loop shares its system prompt")
  m:prompt_cache(0)
  for i, p in ipairs(prompts) do
    T.eq(join(outs[i].ids), join(m:generate(p, { max_new_tokens = 10, temperature = 0.7, seed = i }).ids), ("prompt %d"):format(i))
  end
  -- one intervention object reused across calls, on prompt positions only: every call counts it
  -- as reached (a taken prompt or beginning credits its hits), none raises "selected no position"
  m:prompt_cache(64 * 1024 * 1024)
  local D = m.config.hidden_size
  local iv = I.add(tensor.zeros(D), { positions = { 5 } })
  for r = 1, 3 do
    for _, p in ipairs({ prompts[1], prompts[2] }) do
      local ok, err = pcall(function()
        return m:with_hooks({ { "blocks.1.hook_resid_post", iv } }, function() return m:generate(p, { max_new_tokens = 3 }) end)
      end)
      T.ok(ok, ("round %d: %s"):format(r, tostring(err)))
    end
  end
end)

T.test("forward_batch's paths: refused where they cannot hold", function()
  local m = load(stories)
  local g = gen(m, m.tokenizer:encode(SYS))
  T.eq(select(2, g:took_prompt()), 0, "a fresh generator took nothing")
  T.raises(function() m:prompt_cache(-1) end, "whole number")
end)
