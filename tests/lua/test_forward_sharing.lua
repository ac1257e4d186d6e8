-- run_with_hooks / forward over a list whose sequences have the same tokens share what their hooks
-- compute alike (engine/model/lua_model.c, forward_shared): a sequence whose hooks do the same to
-- every position as an earlier one's takes its logits; one whose hooks first differ at block L
-- (a sweep of strengths or patches at block L) runs from a block S <= L on the residual an earlier
-- one saved entering S. Each sequence's logits are compared bit for bit with the sequence run
-- alone, its captures value for value, and what each took is checked against the counts worked
-- out by hand, so a change that stops sharing fails as surely as one that shares wrongly.
local T = require "testing"
local I = require "seer.interventions"
local check = require "batch_check"
local core = require "seer.core.model"
local tensor = seer.tensor

local here = seer.script_dir()
local pdir = here .. "/../parity/models"
local stories = here .. "/../fixtures/models/stories260K"
local ids = check.ids

local same_values = check.same_values

-- what the call took: whole sequences, (position, block) pairs
local function taken(fn)
  local w0, _, b0 = core.shared_prefills()
  local r = { fn() }
  local w1, _, b1 = core.shared_prefills()
  return w1 - w0, b1 - b0, unpack(r)
end

-- logits of sequence b of a left-padded batch (inputs of one length here)
local function row(lg, b) return lg:select(1, b) end

-- The case on a model of 3 or more blocks, n tokens: hook lists built fresh for each call
-- (captures are per run), with the captures by sequence; then how many take block 0 and how
-- many another's logits.
local function case(m, n)
  local D = m.config.hidden_size
  tensor.manual_seed(21)
  local v, w = tensor.randn(D) * 2, tensor.randn(D) * 2
  local same = I.add(v, { strength = 1.5 }) -- one object in two hook sets: those share everything
  return function()
    local caps = {}
    local function cap(i, point)
      caps[i] = I.capture()
      return { point, caps[i] }
    end
    local hooks = {
      -- 1 steers block 2: it computes and its takers differ at blocks 1 and 2; the most is saved
      -- by a residual entering block 1 (five takers x 1 block against two x 2)
      { { "blocks.2.hook_resid_pre", same } },
      -- 2 steers block 2 another way and records after it: takes 1 block
      { { "blocks.2.hook_resid_pre", I.add(v, { strength = -2 }) }, cap(2, "blocks.2.hook_resid_post") },
      -- 3 has no hooks: takes 1 block
      false,
      -- 4 differs from 1 at block 1's output: takes 1 block
      { { "blocks.1.hook_resid_post", I.add(w, { strength = 2 }) }, cap(4, "blocks.2.hook_resid_post") },
      -- 5 differs at block 1's start and records in block 1: takes 1 block
      { { "blocks.1.hook_resid_pre", I.add(w, { strength = -1 }) }, cap(5, "blocks.1.hook_resid_post") },
      -- 6 changes the embeddings: nothing to take
      { { "hook_embed", I.add(w, { strength = 0.5 }) } },
      -- 7 records in block 0: its own pass
      { cap(7, "blocks.0.hook_resid_post"), { "blocks.2.hook_resid_pre", I.add(v, { strength = 3 }) } },
      -- 8 has 1's very intervention: takes 1's logits
      { { "blocks.2.hook_resid_pre", same } },
      -- 9 steers block 1 at the last position only: takes 1 block
      { { "blocks.1.hook_resid_pre", I.add(v, { strength = 2, positions = { -1 } }) } },
    }
    return hooks, caps
  end, 5, 1
end

local function check_case(m, label, n, seed)
  local p = ids(m.config.vocab_size, n, seed)
  local make, takers, wholes = case(m, n)
  local hooks, caps = make()
  local inputs, per = {}, {}
  for i, h in ipairs(hooks) do inputs[i] = p per[i] = h or nil end
  local w, b, lg = taken(function() return m:run_with_hooks(inputs, { per_sequence = per }) end)
  T.eq(w, wholes, label .. ": sequences taking another's logits")
  T.eq(b, takers * 1 * n, label .. ": (position, block) pairs taken: five takers of block 0")
  local hooks2, caps2 = make()
  for i, h in ipairs(hooks2) do
    local alone = m:run_with_hooks(p, { fwd_hooks = h or {} })
    same_values(row(lg, i), alone, ("%s: sequence %d's logits"):format(label, i))
    if caps[i] then same_values(caps[i]:tensor(), caps2[i]:tensor(), ("%s: sequence %d's capture"):format(label, i)) end
  end
  -- the steering changed the logits (else this checks little)
  T.ok((row(lg, 1) - row(lg, 3)):abs():max() > 1e-3, label .. ": steering changes the logits")
end

local MODELS = check.SHARING_MODELS

T.test("every architecture, both GEMM settings: logits taken and blocks shared give each sequence its own bits", function()
  for _, name in ipairs(MODELS) do
    local m = check.load_uncached(pdir .. "/" .. name, { tokenizer = false })
    check_case(m, name, 40, 1)
    check.at_gemm_min(16, function() check_case(m, name .. " (GEMM from 16)", 40, 2) end)
  end
end)

T.test("precision = fast on a bf16 model: the same bits as alone", function()
  check_case(check.load_uncached(check.bf16_llama(3), { precision = "fast", tokenizer = false }), "bf16 llama, fast", 40, 3)
end)

-- stories260K: 5 blocks, a real trained model
local function steer(v, b, s) return { { ("blocks.%d.hook_resid_pre"):format(b), I.add(v, { strength = s }) } } end

T.test("a layer sweep: one residual saved where it serves most; sequences that differ lower compute", function()
  local m = check.load_uncached(stories)
  local V, D = m.config.vocab_size, m.config.hidden_size
  local p = ids(V, 30, 9)
  tensor.manual_seed(6)
  local v = tensor.randn(D)
  -- 1 computes; the others differ from it at blocks 1, 2, 3, 4, 4, 4: a residual entering block 3
  -- serves four of them (12 blocks; block 4 would serve three, 12 too: the lower wins), so the
  -- ones steered at blocks 1 and 2 compute their own
  local per = { false, steer(v, 1, 1), steer(v, 2, 1), steer(v, 3, 1), steer(v, 4, 1), steer(v, 4, 2), steer(v, 4, 3) }
  local inputs = {}
  for i = 1, #per do inputs[i] = p end
  for i = 1, #per do per[i] = per[i] or nil end
  local w, b, lg = taken(function() return m:run_with_hooks(inputs, { per_sequence = per }) end)
  T.eq(w, 0, "no sequence has another's hooks")
  T.eq(b, 4 * 3 * 30, "four takers of blocks 0-2")
  for i = 1, #inputs do
    same_values(row(lg, i), m:run_with_hooks(p, { fwd_hooks = per[i] or {} }), "sequence " .. i)
  end
end)

T.test("other tokens or lengths share nothing; a batch of groups shares within each", function()
  local m = check.load_uncached(stories)
  local V, D = m.config.vocab_size, m.config.hidden_size
  tensor.manual_seed(7)
  local v = tensor.randn(D)
  local p = ids(V, 30, 3)
  local q = { unpack(p) }
  q[30] = (q[30] % (V - 3)) + 3 -- the last token differs
  local r = { unpack(p, 1, 29) }
  local inputs = { p, q, r, q, p, r }
  local per = {}
  for i = 1, #inputs do per[i] = steer(v, 3, i) end
  local w, b, lg, mask = taken(function() return m:run_with_hooks(inputs, { per_sequence = per }) end)
  T.eq(w, 0, "nothing whole")
  T.eq(b, 3 * 30 + 3 * 30 + 3 * 29, "the second of each group takes blocks 0-2")
  for i, s in ipairs(inputs) do
    local alone = m:run_with_hooks(s, { fwd_hooks = per[i] })
    same_values(row(lg, i):narrow(1, lg:size(2) - #s + 1, #s), alone, "sequence " .. i)
  end
  T.eq(mask[3][1], 0, "the shorter sequences stay left-padded")
end)

T.test("what turns sharing off: share_prompts = false, a function hook, a capture on every sequence or on two", function()
  local m = check.load_uncached(stories)
  local V, D = m.config.vocab_size, m.config.hidden_size
  tensor.manual_seed(8)
  local v = tensor.randn(D)
  local p = ids(V, 20, 4)
  local inputs = { p, p, p }
  local function per3() return { steer(v, 3, 1), steer(v, 3, 2), steer(v, 3, 3) } end
  local w, b, base = taken(function() return m:run_with_hooks(inputs, { per_sequence = per3() }) end)
  T.eq(b, 2 * 3 * 20, "shared when nothing forbids it")
  local function none(label, fn, all_first)
    local w2, b2, lg = taken(fn)
    T.eq(w2 + b2, 0, label .. ": nothing shared")
    for i = 1, 3 do same_values(row(lg, i), row(base, all_first and 1 or i), label .. ": sequence " .. i) end
  end
  none("share_prompts = false", function() return m:run_with_hooks(inputs, { per_sequence = per3(), share_prompts = false }) end)
  local calls = {}
  none("a function hook on one sequence", function()
    local per = per3()
    table.insert(per[2], { "blocks.4.hook_resid_post", function(x, hook) calls[#calls + 1] = hook.batch; return nil end })
    return m:run_with_hooks(inputs, { per_sequence = per })
  end)
  T.eq(table.concat(calls, ","), "2", "the function ran once, for its sequence")
  local cap = I.capture()
  none("a capture in fwd_hooks (every sequence's)", function()
    return m:run_with_hooks(inputs, { per_sequence = per3(), fwd_hooks = { { "blocks.4.hook_resid_post", cap } } })
  end)
  T.eq(cap:tensor():size(1), 3 * 20, "the capture saw every sequence's rows")
  local two = I.capture()
  none("one capture on two sequences", function()
    local per = per3()
    table.insert(per[1], { "blocks.4.hook_resid_post", two })
    table.insert(per[3], { "blocks.4.hook_resid_post", two })
    return m:run_with_hooks(inputs, { per_sequence = per })
  end)
  none("forward(list, {share_prompts = false}) under with_hooks", function()
    return m:with_hooks(steer(v, 3, 1), function() return m:forward(inputs, { share_prompts = false }) end)
  end, true)
  -- model:forward(list) under an active hook: every sequence has the same hooks, so the second
  -- and third take the first's logits
  local w3, b3, lg = taken(function() return m:with_hooks(steer(v, 3, 1), function() return m:forward(inputs) end) end)
  T.eq(w3, 2, "forward(list) under with_hooks: two take the first's logits")
  T.eq(b3, 0, "and no blocks")
  for i = 1, 3 do same_values(row(lg, i), row(base, 1), "forward(list): sequence " .. i) end
  T.raises(function() m:forward(inputs, { share_prompts = 1 }) end, "share_prompts", true)
end)

T.test("an intervention below the shared blocks counts every sequence's rows (iv:hits, the unused check)", function()
  local m = check.load_uncached(stories)
  local V, D = m.config.vocab_size, m.config.hidden_size
  local p = ids(V, 30, 5)
  tensor.manual_seed(9)
  local v = tensor.randn(D)
  local base = I.add(v, { strength = 0.25, positions = { 0, 1, 2 } }) -- in every set: the same below block 3
  local per = {}
  for i, s in ipairs({ 1, -1, 3 }) do per[i] = { { "blocks.0.hook_resid_post", base }, steer(v, 3, s)[1] } end
  local inputs = { p, p, p }
  local _, b = taken(function() return m:run_with_hooks(inputs, { per_sequence = per }) end)
  T.eq(b, 2 * 3 * 30, "two take blocks 0-2")
  T.eq(base:hits(), 9, "3 positions for each of the 3 sequences")
  -- a taker's own intervention below its shared blocks, one it shares with its donor only:
  -- counted though the taker never ran it
  local two = I.add(v, { strength = 0.5, positions = { 4 } })
  local per2 = { { { "blocks.1.hook_resid_pre", two }, steer(v, 3, 1)[1] }, { { "blocks.1.hook_resid_pre", two }, steer(v, 3, 2)[1] } }
  local _, b2 = taken(function() return m:run_with_hooks({ p, p }, { per_sequence = per2 }) end)
  T.eq(b2, 3 * 30, "the second takes blocks 0-2")
  T.eq(two:hits(), 2, "one position for each of the two")
end)

T.test("a sweep of patches at one block (activation patching by hand) shares the blocks below it", function()
  local m = check.load_uncached(stories)
  local V = m.config.vocab_size
  local clean, corrupt = ids(V, 12, 10), ids(V, 12, 11)
  local _, cache = m:run_with_cache(clean, { names = { "blocks.2.hook_resid_pre" } })
  local saved = cache["blocks.2.hook_resid_pre"]
  local inputs, per = {}, {}
  for j = 1, 12 do
    inputs[j] = corrupt
    per[j] = { { "blocks.2.hook_resid_pre", I.replace(saved, { positions = { j - 1 } }) } }
  end
  local _, b, lg = taken(function() return m:run_with_hooks(inputs, { per_sequence = per }) end)
  T.eq(b, 11 * 2 * 12, "eleven take blocks 0-1")
  local AP = require "toolkit.activation_patching"
  local grid = AP.patch_sweep(m, clean, corrupt, function(l) return l[{ -1, 10 }] - l[{ -1, 20 }] end,
    { layers = { 2 }, progress = false })
  for j = 1, 12 do
    local l = row(lg, j)
    T.eq(l[{ -1, 10 }] - l[{ -1, 20 }], grid[{ 1, j }], "position " .. (j - 1) .. " as patch_sweep gives it")
    same_values(l, m:run_with_hooks(corrupt, { fwd_hooks = per[j] }), "position " .. (j - 1))
  end
end)

-- A loop of single calls through the model's prompt cache: a call on the same tokens runs from
-- the residual an earlier call kept at the first block its hooks acted on, where the new call's
-- hooks act on nothing before it. On a model of 3 blocks: the calls, the blocks each takes, and
-- the prompt cache's entries after each.
local function loop_case(m, D)
  tensor.manual_seed(31)
  local v = tensor.randn(D) * 2
  local calls = {}
  return function()
    local caps = {}
    local specs = { -- {hooks, blocks taken, entries after}
      { { { "blocks.2.hook_resid_pre", I.add(v, { strength = 1 }) } }, 0, 1 }, -- computes, keeps block 2
      { { { "blocks.2.hook_resid_pre", I.add(v, { strength = 2 }) } }, 2, 1 },
      { { { "blocks.1.hook_resid_pre", I.add(v, { strength = 1 }) } }, 0, 2 }, -- acts lower: computes, keeps block 1
      { { { "blocks.2.hook_resid_post", I.add(v, { strength = -1 }) } }, 2, 2 }, -- the most blocks: 2
      { { { "blocks.1.hook_resid_post", I.capture() }, { "blocks.2.hook_resid_pre", I.add(v, { strength = 3 }) } }, 1, 2 },
      { { { "hook_embed", I.add(v, { strength = 0.1 }) } }, 0, 2 },
      { { { "blocks.2.hook_resid_pre", function() calls[#calls + 1] = true end } }, 2, 2 },
      { {}, 2, 2 }, -- no hooks: every block alike, the most an entry gives
      { { { "blocks.2.hook_resid_pre", I.add(v, { strength = 2, positions = { -1 } }) } }, 2, 2 },
    }
    caps[5] = specs[5][1][1][2]
    return specs, caps, calls
  end
end

local function check_loop(m, ref, label, n, seed)
  local p = ids(m.config.vocab_size, n, seed)
  m:prompt_cache(0)
  m:prompt_cache(256 * 1024 * 1024)
  local make = loop_case(m, m.config.hidden_size)
  local specs, caps, calls = make()
  local got = {}
  for i, s in ipairs(specs) do
    local _, b, lg = taken(function() return m:run_with_hooks(p, { fwd_hooks = s[1] }) end)
    T.eq(b, s[2] * n, ("%s: call %d takes %d blocks"):format(label, i, s[2]))
    T.eq(m:prompt_cache().entries, s[3], ("%s: entries after call %d"):format(label, i))
    got[i] = lg
  end
  T.eq(#calls, 1, label .. ": the function hook ran once")
  local specs2, caps2 = make()
  for i, s in ipairs(specs2) do
    same_values(got[i], ref:run_with_hooks(p, { fwd_hooks = s[1] }), ("%s: call %d's logits"):format(label, i))
    if caps[i] then same_values(caps[i]:tensor(), caps2[i]:tensor(), ("%s: call %d's capture"):format(label, i)) end
  end
  T.ok((got[1] - got[2]):abs():max() > 1e-3, label .. ": steering changes the logits")
end

T.test("every architecture, both GEMM settings: a loop of calls through the prompt cache gives each call its own bits", function()
  for _, name in ipairs(MODELS) do
    local m = seer.model.load(pdir .. "/" .. name, { tokenizer = false })
    local ref = check.load_uncached(pdir .. "/" .. name, { tokenizer = false })
    check_loop(m, ref, name, 40, 1)
    check.at_gemm_min(16, function() check_loop(m, ref, name .. " (GEMM from 16)", 40, 2) end)
  end
end)

T.test("the prompt cache's forward entries: another model state, other tokens, budget 0 and share_prompts = false take nothing", function()
  local m = seer.model.load(stories)
  local ref = check.load_uncached(stories)
  local V, D = m.config.vocab_size, m.config.hidden_size
  tensor.manual_seed(32)
  local v = tensor.randn(D)
  local p = ids(V, 25, 12)
  local q = { unpack(p) }
  q[25] = (q[25] % (V - 3)) + 3
  local before = m:prompt_cache().bytes
  local _, b = taken(function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 3, 1) }) end)
  T.eq(b, 0, "the first call computes")
  local grew = m:prompt_cache().bytes - before
  T.ok(grew >= 4 * 25 * (D + 1) and grew <= 4 * 25 * (D + 1) + 256, "the residual and the tokens counted in the cache's bytes: " .. grew)
  local function none(label, fn, want)
    local _, b2, lg = taken(fn)
    T.eq(b2, 0, label .. ": nothing taken")
    same_values(lg, want, label)
  end
  none("other tokens", function() return m:run_with_hooks(q, { fwd_hooks = steer(v, 3, 2) }) end,
    ref:run_with_hooks(q, { fwd_hooks = steer(v, 3, 2) }))
  none("share_prompts = false", function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 3, 2), share_prompts = false }) end,
    ref:run_with_hooks(p, { fwd_hooks = steer(v, 3, 2) }))
  check.at_gemm_min(16, function()
    none("another GEMM threshold", function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 3, 2) }) end,
      ref:run_with_hooks(p, { fwd_hooks = steer(v, 3, 2) }))
  end)
  -- every move of the threshold is a new model state: the entries of before serve no one (the
  -- call under the threshold dropped them), so the next call computes, and the one after takes
  local _, b3 = taken(function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 3, 4) }) end)
  T.eq(b3, 0, "the threshold back: a new state, the call computes")
  local _, b4 = taken(function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 3, 4.5) }) end)
  T.eq(b4, 3 * 25, "and the next takes its residual")
  -- an intervention's filter changed (the model state moves): the entries serve no one
  local f = I.add(v, { strength = 1 })
  local h = m:add_hook("blocks.4.hook_resid_post", f)
  local _, b5 = taken(function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 3, 5) }) end)
  T.eq(b5, 3 * 25, "a hook attached above the kept block changes nothing below it")
  f:filter({ positions = { 1 } })
  local with_f = steer(v, 3, 6)
  with_f[2] = { "blocks.4.hook_resid_post", f }
  none("after a filter change", function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 3, 6) }) end,
    ref:run_with_hooks(p, { fwd_hooks = with_f }))
  h:remove()
  m:prompt_cache(0)
  T.eq(m:prompt_cache().entries, 0, "budget 0 drops every entry")
  none("budget 0", function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 3, 6) }) end,
    ref:run_with_hooks(p, { fwd_hooks = steer(v, 3, 6) }))
  T.eq(m:prompt_cache().entries, 0, "budget 0 keeps nothing")
end)

T.test("the prompt cache holds generations and forward entries together: a forward call takes a generation's kept residual", function()
  local m = seer.model.load(stories)
  local ref = check.load_uncached(stories)
  tensor.manual_seed(33)
  local v = tensor.randn(m.config.hidden_size)
  local p = "Once upon a time there was a little girl"
  local ids_p = m.tokenizer:encode(p)
  local n = #ids_p
  local g1 = m:with_hooks(steer(v, 3, 1), function() return m:generate(p, { max_new_tokens = 4 }) end)
  T.eq(m:prompt_cache().entries, 1, "the generation's entry")
  local _, b1, lg1 = taken(function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 3, 2) }) end)
  T.eq(b1, 3 * n, "a forward call takes blocks 0-2 from the generation's kept residual")
  same_values(lg1, ref:run_with_hooks(p, { fwd_hooks = steer(v, 3, 2) }), "its logits")
  T.eq(m:prompt_cache().entries, 1, "and keeps nothing (its first hooked block is the generation's)")
  local _, b2 = taken(function() return m:with_hooks(steer(v, 3, 3), function() return m:generate(p, { max_new_tokens = 4 }) end) end)
  T.eq(b2, 3 * n, "a generation takes the blocks of the generation's entry")
  local _, b3 = taken(function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 4, 4) }) end)
  T.eq(b3, 3 * n, "a forward call steering block 4 takes blocks 0-2")
  T.eq(m:prompt_cache().entries, 3, "three entries: the two generations (one that took blocks keeps its prompt) and that call's (block 4)")
  local _, b4 = taken(function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 4, 5) }) end)
  T.eq(b4, 4 * n, "the next at block 4 takes blocks 0-3 from that call's entry")
  local a = ref:with_hooks(steer(v, 3, 1), function() return ref:generate(p, { max_new_tokens = 4 }) end)
  T.eq(table.concat(g1.ids, ","), table.concat(a.ids, ","), "the generation's tokens")
  -- under another GEMM threshold (another model state) the generations' residuals serve no one
  check.at_gemm_min(16, function()
    local _, b7, lg7 = taken(function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 3, 6) }) end)
    T.eq(b7, 0, "another model state: nothing taken from the generations")
    same_values(lg7, ref:run_with_hooks(p, { fwd_hooks = steer(v, 3, 6) }), "its logits")
  end)
  -- a generation that saved its residual for a taker keeps it at the taker's block, with a hook
  -- of both below it (the same object): a forward call with that hook takes it, and the hook's
  -- rows below count as if the call had run them
  m:prompt_cache(0)
  m:prompt_cache(256 * 1024 * 1024)
  local base = I.add(v, { strength = 0.5, positions = { 0, 1, 2 } })
  local function with_base(b, s)
    local h = steer(v, b, s)
    h[2] = { "blocks.1.hook_resid_pre", base }
    return h
  end
  m:generate_batch({ p, p }, { max_new_tokens = 3, per_sequence = { { hooks = with_base(3, 1) }, { hooks = with_base(3, -1) } } })
  local _, b5, lg5 = taken(function() return m:run_with_hooks(p, { fwd_hooks = with_base(3, 2) }) end)
  T.eq(b5, 3 * n, "blocks 0-2 taken past the shared hook at block 1")
  T.eq(base:hits(), 3, "the hook's 3 positions counted for the call")
  same_values(lg5, ref:run_with_hooks(p, { fwd_hooks = with_base(3, 2) }), "its logits")
  local _, b6, lg6 = taken(function() return m:run_with_hooks(p, { fwd_hooks = steer(v, 3, 2) }) end)
  T.eq(b6, 0, "without the hook at block 1: nothing taken (every kept residual has been through it)")
  same_values(lg6, ref:run_with_hooks(p, { fwd_hooks = steer(v, 3, 2) }), "its logits")
end)

T.test("run_with_cache through the prompt cache: a loop of toolkit patch calls computes the blocks below the patched one once", function()
  local m = seer.model.load(stories)
  local ref = check.load_uncached(stories)
  local V = m.config.vocab_size
  local clean, corrupt = ids(V, 14, 20), ids(V, 14, 21)
  local AP = require "toolkit.activation_patching"
  local function metric(l) return l[{ -1, 10 }] - l[{ -1, 20 }] end
  local _, b = taken(function()
    for pos = 0, 13 do
      local v = AP.patch(m, clean, corrupt, "blocks.3.hook_resid_pre", { pos }, metric)
      T.eq(v, AP.patch(ref, clean, corrupt, "blocks.3.hook_resid_pre", { pos }, metric), "position " .. pos)
    end
  end)
  -- each call after the first: the clean run (a capture at block 3) and the corrupt run (a
  -- replace at block 3) take blocks 0-2 from the first call's entries
  T.eq(b, 13 * 2 * 3 * 14, "blocks 0-2 of both runs computed once")
  -- the cache's values: a capture at a later block, taking from the entries, against alone
  local _, b2, lg, cache = taken(function() return m:run_with_cache(clean, { names = { "blocks.4.hook_resid_post", "blocks.3.hook_mlp_out" } }) end)
  T.eq(b2, 3 * 14, "a cache from block 3 takes blocks 0-2")
  local lg2, cache2 = ref:run_with_cache(clean, { names = { "blocks.4.hook_resid_post", "blocks.3.hook_mlp_out" } })
  same_values(lg, lg2, "logits")
  same_values(cache["blocks.4.hook_resid_post"], cache2["blocks.4.hook_resid_post"], "blocks.4.hook_resid_post")
  same_values(cache["blocks.3.hook_mlp_out"], cache2["blocks.3.hook_mlp_out"], "blocks.3.hook_mlp_out")
  -- every point cached (the default) begins at the embeddings: nothing taken, nothing kept
  local before = m:prompt_cache().entries
  local _, b3 = taken(function() return m:run_with_cache(clean) end)
  T.eq(b3, 0, "a cache of every point takes nothing")
  T.eq(m:prompt_cache().entries, before, "and keeps nothing")
  local _, b4 = taken(function() return m:run_with_cache(clean, { names = { "blocks.4.hook_resid_post" }, share_prompts = false }) end)
  T.eq(b4, 0, "share_prompts = false takes nothing")
end)
