-- Sequences with the same prompt whose hooks differ only from some block on (a steering sweep
-- over the whole prompt: every strength steers block L) compute the blocks below it once
-- (engine/model/lua_model.c, block_donor): one sequence saves the residual entering block L, the
-- others copy its keys and values of blocks 0 .. L-1 and run their prompt from block L
-- (seer_batch_seq_t.cached_below). What a sequence takes and computes must be exactly what it
-- computes alone: its prompt logits are compared bit for bit with the prompt computed alone, its
-- tokens token for token, and captures after the steered block (prompt rows, and the decode rows,
-- which read the copied keys and values) value for value. How many blocks each sequence took
-- (took_prompt's fourth value) is checked against the rule worked out by hand for the case, so a
-- change that stops sharing fails as surely as one that shares wrongly.
local T = require "testing"
local I = require "seer.interventions"
local check = require "batch_check"
local core = require "seer.core.model"
local tensor = seer.tensor

local here = seer.script_dir()
local pdir = here .. "/../parity/models"
local stories = here .. "/../fixtures/models/stories260K"

local function join(t) return table.concat(t, ",") end

local ids = check.ids

local same_values = check.same_values

-- A generator of `new` sampled tokens that may give and take (the C interface generate uses),
-- made under `hooks` (a with_hooks list, or nil).
local function gen(m, p, hooks, seed, new)
  local function make()
    return m._c:generator(p, { max_new_tokens = new, temperature = 0.9, seed = seed, share_prompt = true, hooks = m:_hook_list() })
  end
  return hooks and m:with_hooks(hooks, make) or make()
end

-- runs a list of generators to the end, one step_batch per token; their tokens
local function run(gens, new)
  local out = {}
  for i = 1, #gens do out[i] = {} end
  for _ = 1, new do
    local got = core.step_batch(gens)
    for i = 1, #gens do if got[i] then out[i][#out[i] + 1] = got[i] end end
  end
  return out
end

-- The case on a model of 3 or more blocks: hook lists built fresh for each call (captures are
-- per run), the blocks each takes by the rule, and which capture each has.
local function case(m, n)
  local D = m.config.hidden_size
  tensor.manual_seed(21)
  local v, w = tensor.randn(D) * 2, tensor.randn(D) * 2
  local same = I.add(v, { strength = 1.5 }) -- one object in two hook sets: those share the whole prompt
  return function()
    local caps = {}
    local function cap(i, point)
      caps[i] = I.capture()
      return { point, caps[i] }
    end
    local hooks = {
      -- 1 steers block 2 from its start: it computes its prompt and gives blocks 0-1
      { { "blocks.2.hook_resid_pre", same } },
      -- 2 steers block 2 another way, and records after it: takes 2 blocks
      { { "blocks.2.hook_resid_pre", I.add(v, { strength = -2 }) }, cap(2, "blocks.2.hook_resid_post") },
      -- 3 has no hooks: takes 2 blocks
      false,
      -- 4 differs in block 1 (its resid_post): 1 gives only block 2's start, so 4 computes its prompt
      { { "blocks.1.hook_resid_post", I.add(w, { strength = 2 }) }, cap(4, "blocks.2.hook_resid_post") },
      -- 5 differs from 1 in block 1 and from 4 in block 1 (its start): takes block 0 from 4
      { { "blocks.1.hook_resid_pre", I.add(w, { strength = -1 }) }, cap(5, "blocks.1.hook_resid_post") },
      -- 6 changes the embeddings: nothing to take
      { { "hook_embed", I.add(w, { strength = 0.5 }) } },
      -- 7 records in block 0: its own pass, from the embeddings
      { cap(7, "blocks.0.hook_resid_post"), { "blocks.2.hook_resid_pre", I.add(v, { strength = 3 }) } },
      -- 8 has 1's very intervention: takes 1's whole prompt (prompt_donor)
      { { "blocks.2.hook_resid_pre", same } },
      -- 9 steers only past the prompt: its prompt is 3's (unsteered), taken whole after 3 ran
      { { "blocks.2.hook_resid_pre", I.add(v, { strength = 4, from = n }) } },
      -- 10 steers block 1 at the prompt's last position only: takes block 0 from 4 (4 saves it)
      { { "blocks.1.hook_resid_pre", I.add(v, { strength = 2, positions = { -1 } }) } },
    }
    return hooks, caps
  end, { 0, 2, 2, 0, 1, 0, 0, 0, 0, 1 }, { [8] = true, [9] = true }
end

local function check_case(m, label, n, seed)
  local vocab = m.config.vocab_size
  local p = ids(vocab, n, seed)
  local make, want, whole = case(m, n)
  local new = 5
  local hooks, caps = make()
  local gens = {}
  for i, h in ipairs(hooks) do gens[i] = gen(m, p, h or nil, 40 + i, new) end
  local w0, _, b0 = core.shared_prefills()
  local out = run(gens, new)
  local w1, _, b1 = core.shared_prefills()
  local blocks, wholes = 0, 0
  for i = 1, #gens do
    local took, _, _, tb = gens[i]:took_prompt()
    T.eq(tb, want[i], ("%s: sequence %d takes %d blocks"):format(label, i, want[i]))
    T.eq(took, whole[i] or false, ("%s: sequence %d %s the whole prompt"):format(label, i, whole[i] and "takes" or "does not take"))
    blocks = blocks + want[i] * n
    if whole[i] then wholes = wholes + 1 end
  end
  T.eq(b1 - b0, blocks, label .. ": (position, block) pairs taken in all")
  T.eq(w1 - w0, wholes, label .. ": whole prompts taken")
  -- each alone, under fresh hooks of the same kinds (captures are per run)
  local hooks2, caps2 = make()
  for i, h in ipairs(hooks2) do
    local g = gen(m, p, h or nil, 40 + i, new)
    local alone = run({ g }, new)[1]
    T.eq(join(out[i]), join(alone), ("%s: sequence %d's tokens"):format(label, i))
    local a, b = gens[i]:prompt_logits(), g:prompt_logits()
    same_values(a, b, ("%s: sequence %d's prompt logits"):format(label, i))
    if caps[i] then
      T.eq(#caps[i]:positions(), n + new - 1, label .. ": a capture saw the prompt and every step")
      same_values(caps[i]:tensor(), caps2[i]:tensor(), ("%s: sequence %d's capture"):format(label, i))
    end
  end
  local differ = 0
  for i = 2, #out do if join(out[i]) ~= join(out[3]) then differ = differ + 1 end end
  T.ok(differ >= 5, label .. ": the interventions changed the continuations (else this checks little)")
end

local MODELS = check.SHARING_MODELS

T.test("every architecture, both GEMM settings: the blocks taken and the rest computed give each sequence's own bits", function()
  for _, name in ipairs(MODELS) do
    local m = check.load_uncached(pdir .. "/" .. name, { tokenizer = false })
    check_case(m, name, 40, 1)
    check.at_gemm_min(16, function() check_case(m, name .. " (GEMM from 16)", 40, 2) end)
  end
end)

T.test("precision = fast on a bf16 model (a bf16 KV cache where the bf16 units run): the same bits as alone", function()
  check_case(check.load_uncached(check.bf16_llama(3), { precision = "fast", tokenizer = false }), "bf16 llama, fast", 40, 3)
end)

-- stories260K: 5 blocks, a real trained model; a sweep as toolkit.steering_hook.steering_sweep runs it
T.test("stories260K: steering_sweep over the whole prompt takes the blocks below the steered one", function()
  local m = check.load_uncached(stories)
  local ST = require "toolkit.steering_hook"
  tensor.manual_seed(4)
  local vec = tensor.randn(m.config.hidden_size)
  local prompts = { "Once upon a time there was a little girl", "The dog ran to the park and" }
  local strengths = { -4, 0, 4, 8 }
  local w0, _, b0 = core.shared_prefills()
  local texts = ST.steering_sweep(m, m.tokenizer, prompts, 3, vec, strengths, { max_new_tokens = 12, samples = 2 })
  local w1, _, b1 = core.shared_prefills()
  -- each prompt: its first sequence (the first strength's first sample) computes it; the other
  -- strengths' first samples take blocks 0-2 (they steer block 3's output) and compute the rest;
  -- every second sample has its first sample's hooks and takes that prompt whole
  local want = 0
  for _, p in ipairs(prompts) do want = want + 3 * 3 * #m.tokenizer:encode(p) end
  T.eq(b1 - b0, want, "blocks 0-2 of every prompt computed once")
  T.eq(w1 - w0, 8, "each second sample takes its first sample's prompt")
  for si, s in ipairs(strengths) do
    for pi, p in ipairs(prompts) do
      for k = 1, 2 do
        local alone = ST.steering_hook(m, 3, vec, s, 0, function()
          return require("toolkit.generate_response").generate_response(m, m.tokenizer, p,
            { max_tokens = 12, temperature = 0.7, seed = k - 1 })
        end)
        T.eq(texts[si][pi][k], alone, ("strength %s, prompt %d, sample %d"):format(s, pi, k))
      end
    end
  end
end)

T.test("a donor gives one block count: a later sequence that differs lower computes its own prompt", function()
  local m = check.load_uncached(stories)
  local V, D = m.config.vocab_size, m.config.hidden_size
  local p = ids(V, 30, 9)
  tensor.manual_seed(6)
  local v = tensor.randn(D)
  local function at(b, s) return { { ("blocks.%d.hook_resid_pre"):format(b), I.add(v, { strength = s }) } } end
  -- 1 computes; 2 takes 4 blocks (1 saves block 4); 3 differs from 1 at block 2: 1 saves 4, so 3
  -- computes; 4 differs from 1 at 4 and from 3 at 2: takes 4 from 1; 5 takes 2 from 3
  local gens = { gen(m, p, at(4, 1), 1, 3), gen(m, p, at(4, 2), 2, 3), gen(m, p, at(2, 1), 3, 3), gen(m, p, nil, 4, 3),
    gen(m, p, at(3, 1), 5, 3) }
  local out = run(gens, 3)
  local got = {}
  for i, g in ipairs(gens) do got[i] = select(4, g:took_prompt()) end
  T.eq(join(got), "0,4,0,4,2", "blocks taken")
  local hs = { at(4, 1), at(4, 2), at(2, 1), false, at(3, 1) }
  for i, h in ipairs(hs) do
    local g = gen(m, p, h or nil, i, 3)
    T.eq(join(run({ g }, 3)[1]), join(out[i]), "sequence " .. i)
    same_values(gens[i]:prompt_logits(), g:prompt_logits(), "sequence " .. i .. "'s prompt logits")
  end
end)

T.test("share_prompts = false takes no blocks; sequences of other lengths or tokens take none", function()
  local m = check.load_uncached(stories)
  local V, D = m.config.vocab_size, m.config.hidden_size
  tensor.manual_seed(6)
  local v = tensor.randn(D)
  local p = ids(V, 30, 3)
  local q = { unpack(p) }
  q[30] = (q[30] % (V - 3)) + 3 -- the last token differs
  local per = {}
  local prompts = { p, p, q, { unpack(p, 1, 29) } }
  for i = 1, #prompts do per[i] = { hooks = { { "blocks.3.hook_resid_pre", I.add(v, { strength = i }) } } } end
  local _, _, b0 = core.shared_prefills()
  local outs = m:generate_batch(prompts, { max_new_tokens = 4, per_sequence = per, share_prompts = false })
  local _, _, b1 = core.shared_prefills()
  T.eq(b1 - b0, 0, "share_prompts = false: nothing taken")
  local outs2 = m:generate_batch(prompts, { max_new_tokens = 4, per_sequence = per })
  local _, _, b2 = core.shared_prefills()
  T.eq(b2 - b1, 30 * 3, "only the second prompt takes (3 blocks of 30 positions)")
  for i = 1, #prompts do T.eq(join(outs[i].ids), join(outs2[i].ids), "sequence " .. i) end
end)

T.test("an intervention below the shared blocks counts the rows of every sequence, as if each ran them (iv:hits)", function()
  local m = check.load_uncached(stories)
  local V, D = m.config.vocab_size, m.config.hidden_size
  local p = ids(V, 30, 5)
  tensor.manual_seed(8)
  local v = tensor.randn(D)
  local base = I.add(v, { strength = 0.25, positions = { 0, 1, 2 } }) -- one object in both sets: the same below block 3
  local gens = {}
  for i, s in ipairs({ 1, -1, 3 }) do
    gens[i] = gen(m, p, { { "blocks.0.hook_resid_post", base }, { "blocks.3.hook_resid_pre", I.add(v, { strength = s }) } }, i, 2)
  end
  base:hits(true)
  run(gens, 2)
  T.eq(select(4, gens[2]:took_prompt()), 3, "the second takes blocks 0-2")
  T.eq(base:hits(), 9, "3 positions for each of the 3 sequences")
end)

-- strengths x one prompt, each steering block 3 from its start (distinct interventions)
local function steered(v, strengths)
  local hooks = {}
  for i, s in ipairs(strengths) do hooks[i] = { { "blocks.3.hook_resid_pre", I.add(v, { strength = s }) } } end
  return hooks
end

T.test("continuous batching: a sequence joining later takes the blocks from a running or finished one of its prompt", function()
  local m = check.load_uncached(stories)
  tensor.manual_seed(12)
  local v = tensor.randn(m.config.hidden_size)
  local hooks = steered(v, { -2, -1, 1, 2, 3 })
  local p = "Once upon a time there was a big red ball"
  local n = #m.tokenizer:encode(p)
  for _, width in ipairs({ 2, 1 }) do
    local prompts, per = {}, {}
    for i = 1, #hooks do prompts[i] = p per[i] = { seed = i, hooks = hooks[i] } end
    local _, _, b0 = core.shared_prefills()
    local outs = m:generate_batch(prompts, { max_new_tokens = 6, temperature = 0.8, per_sequence = per, max_batch = width })
    local _, _, b1 = core.shared_prefills()
    T.eq(b1 - b0, 4 * 3 * n, ("max_batch %d: every sequence after the first takes blocks 0-2"):format(width))
    for i = 1, #hooks do
      local alone = m:with_hooks(hooks[i], function() return m:generate(p, { max_new_tokens = 6, temperature = 0.8, seed = i }) end)
      T.eq(join(outs[i].ids), join(alone.ids), ("max_batch %d: sequence %d"):format(width, i))
    end
  end
end)

T.test("prompt cache: a loop of generate calls steering the whole prompt computes the blocks below the steered one once", function()
  local m = seer.model.load(stories) -- with its prompt cache
  local ref = check.load_uncached(stories)
  tensor.manual_seed(13)
  local v = tensor.randn(m.config.hidden_size)
  local hooks = steered(v, { 0.5, 1, 2, 4 })
  local p = "The little dog found a bone in the garden"
  local n = #m.tokenizer:encode(p)
  local _, _, b0 = core.shared_prefills()
  local got = {}
  for i, h in ipairs(hooks) do
    got[i] = m:with_hooks(h, function() return m:generate(p, { max_new_tokens = 8, temperature = 0.7, seed = 3 }) end)
  end
  local _, _, b1 = core.shared_prefills()
  T.eq(b1 - b0, 3 * 3 * n, "the calls after the first take blocks 0-2 from the cache")
  for i, h in ipairs(hooks) do
    local alone = ref:with_hooks(h, function() return ref:generate(p, { max_new_tokens = 8, temperature = 0.7, seed = 3 }) end)
    T.eq(join(got[i].ids), join(alone.ids), "call " .. i)
  end
  local differ = 0
  for i = 2, #got do if join(got[i].ids) ~= join(got[1].ids) then differ = differ + 1 end end
  T.ok(differ >= 2, "the strengths changed the continuations (else this checks little)")
  -- the GEMM threshold moved since the entries were computed: their blocks are not taken
  local h = steered(v, { 8 })[1]
  check.at_gemm_min(16, function()
    local _, _, c0 = core.shared_prefills()
    local a = m:with_hooks(h, function() return m:generate(p, { max_new_tokens = 8, temperature = 0.7, seed = 3 }) end)
    local _, _, c1 = core.shared_prefills()
    T.eq(c1 - c0, 0, "another model state: nothing taken")
    local b = ref:with_hooks(h, function() return ref:generate(p, { max_new_tokens = 8, temperature = 0.7, seed = 3 }) end)
    T.eq(join(a.ids), join(b.ids), "another model state: the call's own bits")
  end)
end)

T.test("hooks that differ only at the final norm: every block taken, the final norm and the head computed", function()
  local m = check.load_uncached(stories)
  local v = tensor.randn(m.config.hidden_size, { seed = 3 })
  local p = "Once upon a time there was"
  local n, per = #m.tokenizer:encode(p), {}
  for i = 1, 3 do per[i] = { seed = i, hooks = { { "ln_final.hook_normalized", I.add(v, { strength = i }) } } } end
  local _, _, b0 = core.shared_prefills()
  local outs = m:generate_batch({ p, p, p }, { max_new_tokens = 5, temperature = 0.8, per_sequence = per })
  local _, _, b1 = core.shared_prefills()
  T.eq(b1 - b0, 2 * m.config.num_hidden_layers * n, "two takers of every block")
  for i = 1, 3 do
    local a = m:with_hooks(per[i].hooks, function() return m:generate(p, { max_new_tokens = 5, temperature = 0.8, seed = i }) end)
    T.eq(join(outs[i].ids), join(a.ids), "sequence " .. i)
  end
end)

T.test("generate_batch: each sequence's own capture above the steered block shares the blocks below; a shared capture shares nothing", function()
  local m = check.load_uncached(stories)
  tensor.manual_seed(14)
  local v = tensor.randn(m.config.hidden_size)
  local p = "Once upon a time there was a little cat"
  local n = #m.tokenizer:encode(p)
  local strengths = { -2, 1, 3 }
  local function batch(caps)
    local prompts, per = {}, {}
    for i, s in ipairs(strengths) do
      prompts[i] = p
      per[i] = { seed = i, hooks = { { "blocks.3.hook_resid_pre", I.add(v, { strength = s }) }, { "blocks.4.hook_resid_post", caps[i] } } }
    end
    local _, _, b0 = core.shared_prefills()
    local outs = m:generate_batch(prompts, { max_new_tokens = 5, temperature = 0.8, per_sequence = per })
    local _, _, b1 = core.shared_prefills()
    return b1 - b0, outs, per
  end
  local own = { I.capture(), I.capture(), I.capture() }
  local taken, outs, per = batch(own)
  T.eq(taken, 2 * 3 * n, "own captures: the second and third take blocks 0-2")
  for i = 1, #strengths do
    local c = I.capture()
    local h = { per[i].hooks[1], { "blocks.4.hook_resid_post", c } }
    local alone = m:with_hooks(h, function() return m:generate(p, { max_new_tokens = 5, temperature = 0.8, seed = i }) end)
    T.eq(join(outs[i].ids), join(alone.ids), "sequence " .. i)
    same_values(own[i]:tensor(), c:tensor(), "sequence " .. i .. "'s capture")
  end
  local one = I.capture()
  taken = batch({ one, one, I.capture() })
  T.eq(taken, 0, "a capture on two sequences: nothing shared")
  local seen = {}
  for _, ch in ipairs(one:chunks()) do if ch.positions[1] == 0 then seen[#seen + 1] = ch.batch end end
  T.eq(join(seen), "1,2", "the shared capture sees both prompts in the batch's order")
end)
