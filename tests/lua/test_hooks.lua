-- Hook semantics beyond the transformers parity cases (test_hooks_parity.lua): positions during
-- generation (from p onward including generated tokens, only while the prompt is processed),
-- scoping and removal, Lua function hooks, attention scores/patterns, batches, and the errors a
-- researcher can hit. Runs on the real stories260K model and the tiny parity models.
local T = require "testing"
local I = require "seer.interventions"
local tensor = seer.tensor

local root = seer.script_dir() .. "/../fixtures/models/stories260K"
local model = seer.model.load(root)
local ids = model.tokenizer:encode("Once upon a time there was a little dog")
local n = #ids

local function maxdiff(a, b) return (a - b):abs():max() end

T.test("hook_names: TransformerLens names in forward order for every layer", function()
  local names = model:hook_names()
  T.eq(names[1], "hook_embed")
  T.eq(names[2], "blocks.0.hook_resid_pre")
  T.eq(names[#names], "ln_final.hook_normalized")
  T.eq(#names, 2 + 5 * 15)
  local set = {}
  for _, nm in ipairs(names) do set[nm] = true end
  for _, p in ipairs({ "ln1.hook_normalized", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_attn_scores",
    "attn.hook_pattern", "attn.hook_z", "hook_attn_out", "hook_resid_mid", "ln2.hook_normalized", "mlp.hook_pre",
    "mlp.hook_post", "hook_mlp_out", "hook_resid_post" }) do
    T.ok(set["blocks.4." .. p], "blocks.4." .. p)
  end
  T.ok(not set["hook_pos_embed"], "llama has no learned positions")
end)

T.test("run_with_cache: residuals equal hidden_states, shapes per docs/hooks.md, unembed of the last residual is the logits", function()
  local logits, cache = model:run_with_cache(ids, { names = { "hook_resid_post$", "blocks.1.attn.hook_[qkz]$", "blocks.1.attn.hook_pattern", "mlp.hook_post" } })
  local _, hidden = model:forward(ids, { hidden_states = true })
  for l = 0, 3 do T.eq(maxdiff(cache[("blocks.%d.hook_resid_post"):format(l)], hidden[l + 2]), 0) end
  -- hidden_states' last entry is after the final norm (as transformers'); the last resid_post is before it
  T.ok(maxdiff(cache["blocks.4.hook_resid_post"], hidden[6]) > 0.1)
  local q, k, z = cache["blocks.1.attn.hook_q"], cache["blocks.1.attn.hook_k"], cache["blocks.1.attn.hook_z"]
  T.eq({ q:size(1), q:size(2), q:size(3) }, { n, 8, 8 })
  T.eq({ k:size(1), k:size(2), k:size(3) }, { n, 4, 8 })
  T.eq({ z:size(1), z:size(2), z:size(3) }, { n, 8, 8 })
  local pat = cache["blocks.1.attn.hook_pattern"]
  T.eq({ pat:size(1), pat:size(2), pat:size(3) }, { 8, n, n })
  T.near(pat:sum(3):min(), 1, 1e-5)
  T.eq(pat[1][1][2], 0) -- causal: position 0 sees only itself
  T.eq(cache["blocks.2.mlp.hook_post"]:size(2), model.config.intermediate_size)
  T.ok(maxdiff(model:unembed(cache["blocks.4.hook_resid_post"]), logits) < 1e-5)
  T.raises(function() return cache["blocks.1.attn.hook_v"] end, "was not cached")
end)

T.test("run_with_cache positions keep only those rows (negative from the end)", function()
  local _, cache = model:run_with_cache(ids, { names = "blocks.3.hook_resid_post", positions = { 0, -1 } })
  local _, full = model:run_with_cache(ids, { names = "blocks.3.hook_resid_post" })
  local t, f = cache["blocks.3.hook_resid_post"], full["blocks.3.hook_resid_post"]
  T.eq(t:size(1), 2)
  T.eq(maxdiff(t:select(1, 1), f:select(1, 1)), 0)
  T.eq(maxdiff(t:select(1, 2), f:select(1, n)), 0)
end)

T.test("run_with_hooks refuses an intervention whose positions select nothing (it was a silent no-op)", function()
  local base = model:forward(ids)
  local R = "blocks.1.hook_resid_post"
  for _, o in ipairs({ { positions = { n + 5 } }, { positions = { -(n + 5) } }, { from = n + 1 }, { from = -2, to = 1 } }) do
    T.raises(function() model:run_with_hooks(ids, { fwd_hooks = { { R, I.add(tensor.ones(64), o) } } }) end,
             "run_with_hooks: the add at blocks.1.hook_resid_post selected no position of the input", true)
  end
  T.raises(function() model:run_with_hooks(ids, { fwd_hooks = { { R, I.scale(0, { positions = { 99 } }) } } }) end, "the scale at", true)
  -- one position inside is enough; no filter, or a function hook, is never refused
  T.ok(maxdiff(model:run_with_hooks(ids, { fwd_hooks = { { R, I.add(tensor.ones(64), { positions = { -1, n + 5 } }) } } }), base) > 0)
  model:run_with_hooks(ids, { fwd_hooks = { { R, I.add(tensor.zeros(64)) }, { R, function() end } } })
  -- a batch: per-sequence hooks are judged on their own sequence; shared ones on any
  local short = { ids[1], ids[2] }
  T.raises(function() model:run_with_hooks({ ids, short }, { per_sequence = { [2] = { { R, I.add(tensor.ones(64), { positions = { 3 } }) } } } }) end,
           "selected no position", true)
  model:run_with_hooks({ ids, short }, { fwd_hooks = { { R, I.add(tensor.ones(64), { positions = { 3 } }) } } })
end)

T.test("run_with_cache positions: rows in the order given, repeats kept, a position outside the input refused", function()
  local R, P = "blocks.2.hook_resid_post", "blocks.1.attn.hook_pattern"
  local _, full = model:run_with_cache(ids, { names = { R, P } })
  local f, fp = full[R], full[P]
  -- {-1, 0} came back as {0, -1}, {3, 1} as {1, 3}, {1, 1} as one row
  for _, want in ipairs({ { -1, 0 }, { 3, 1 }, { 1, 1, 4 } }) do
    local _, c = model:run_with_cache(ids, { names = { R, P }, positions = want })
    T.eq(c[R]:size(1), #want)
    T.eq(c[P]:size(2), #want)
    for k, p in ipairs(want) do
      local row = (p < 0 and n + p or p) + 1
      T.eq(maxdiff(c[R]:select(1, k), f:select(1, row)), 0)
      T.eq(maxdiff(c[P]:select(2, k), fp:select(2, row)), 0)
    end
  end
  -- a batch: each sequence's rows in the order given, negative from its own end
  local a, b = { ids[1], ids[2], ids[3] }, ids
  local _, cb = model:run_with_cache({ a, b }, { names = R, positions = { -1, 0 } })
  local _, ca = model:run_with_cache(a, { names = R })
  T.eq(maxdiff(cb[R]:select(1, 1):select(1, 1), ca[R]:select(1, 3)), 0)
  T.eq(maxdiff(cb[R]:select(1, 2):select(1, 1), f:select(1, n)), 0)
  -- a position past the end was dropped without a word
  T.raises(function() model:run_with_cache(ids, { names = R, positions = { 1, n } }) end,
           ("run_with_cache: positions[2] = %d is outside the input's %d tokens"):format(n, n), true)
  T.raises(function() model:run_with_cache({ a, b }, { names = R, positions = { -4 } }) end,
           "positions[1] = -4 is outside sequence 1's 3 tokens", true)
end)

T.test("add with from = p changes only positions >= p; hooks compose in order", function()
  local base = model:forward(ids)
  local v = tensor.randn(64)
  local l = model:run_with_hooks(ids, { fwd_hooks = { { "blocks.2.hook_resid_post", I.add(v, { strength = 3, from = 4 }) } } })
  for p = 1, 4 do T.eq(maxdiff(l:select(1, p), base:select(1, p)), 0, "position " .. (p - 1)) end
  T.ok(maxdiff(l:select(1, 5), base:select(1, 5)) > 1e-3)
  -- add then ablate the same direction = no change along it at that point
  local _, c = model:run_with_cache(ids, { names = "blocks.2.hook_resid_post" })
  local dir = v / v:norm()
  model:with_hooks({ { "blocks.2.hook_resid_post", I.add(v, { strength = 5 }) }, { "blocks.2.hook_resid_post", I.ablate(dir) } }, function()
    local _, c2 = model:run_with_cache(ids, { names = "blocks.2.hook_resid_post" })
    local r = c2["blocks.2.hook_resid_post"]
    T.ok((r:matmul(dir)):abs():max() < 1e-4, "no component along the ablated direction")
    local orig = c["blocks.2.hook_resid_post"]
    local proj = orig - orig:matmul(dir):reshape(n, 1) * dir:reshape(1, 64)
    T.ok(maxdiff(r, proj) < 1e-4, "add then ablate = ablate of the original")
  end)
end)

T.test("generation: from = p steers generated tokens too; only_prompt never touches them", function()
  local v = tensor.randn(64)
  local seen = {}
  local spy = function(act, hook) seen[#seen + 1] = { hook.pos, act:size(1) } end
  local steer = I.add(v, { strength = 6, from = n - 1 })
  local cap = I.capture()
  model:with_hooks({ { "blocks.2.hook_resid_post", steer }, { "blocks.2.hook_resid_post", spy }, { "blocks.2.hook_resid_post", cap } }, function()
    model:generate(ids, { max_new_tokens = 4 })
  end)
  T.eq(seen, { { 0, n }, { n, 1 }, { n + 1, 1 }, { n + 2, 1 } })
  local want = {}
  for p = 0, n + 2 do want[#want + 1] = p end -- the prompt, then one row per fed-back token
  T.eq(cap:positions(), want)
  -- Unsteered capture to compare each position
  local plain = I.capture()
  model:with_hooks({ { "blocks.2.hook_resid_post", plain } }, function() model:generate(ids, { max_new_tokens = 4 }) end)
  local a, b = cap:tensor(), plain:tensor()
  T.eq(maxdiff(a:narrow(1, 1, n - 1), b:narrow(1, 1, n - 1)), 0)
  -- from n-1 on (the last prompt token and every generated token) the residual carries 6 v
  T.ok(maxdiff(a:select(1, n) - b:select(1, n), v * 6) < 1e-4)
  -- only_prompt: captures just before and after the add on the same point differ by 6 v on
  -- the prompt rows and not at all on generated rows
  local before, after = I.capture(), I.capture()
  model:with_hooks({ { "blocks.0.hook_resid_post", before }, { "blocks.0.hook_resid_post", I.add(v, { strength = 6, only_prompt = true }) },
    { "blocks.0.hook_resid_post", after } }, function()
    model:generate(ids, { max_new_tokens = 3 })
  end)
  local d = after:tensor() - before:tensor()
  T.eq(d:size(1), n + 2)
  T.ok(maxdiff(d:narrow(1, 1, n), (v * 6):reshape(1, 64)) < 1e-4)
  T.eq(d:narrow(1, n + 1, 2):abs():max(), 0)
end)

T.test("with_hooks removes hooks after an error; add_hook persists until removed; reset_hooks", function()
  local base = model:forward(ids)
  local v = tensor.randn(64)
  T.raises(function()
    model:with_hooks({ { "blocks.1.hook_resid_post", I.add(v) } }, function() error("boom") end)
  end, "boom")
  T.eq(maxdiff(model:forward(ids), base), 0)
  local h = model:add_hook("blocks.1.hook_resid_post", I.add(v))
  T.ok(maxdiff(model:forward(ids), base) > 1e-3)
  h:remove()
  T.eq(maxdiff(model:forward(ids), base), 0)
  model:add_hook("blocks.1.hook_resid_post", I.add(v))
  model:reset_hooks()
  T.eq(maxdiff(model:forward(ids), base), 0)
end)

T.test("Lua function hooks: in-place edits, returned replacements, kept tensors stay valid, errors name the hook", function()
  local base = model:forward(ids)
  local zeroed = model:run_with_hooks(ids, { fwd_hooks = { { "blocks.4.hook_resid_post", function(act) act:mul_(0) end } } })
  local zero_res = model:unembed(tensor.zeros(n, 64))
  T.ok(maxdiff(zeroed, zero_res) < 1e-5)
  local repl = model:run_with_hooks(ids, { fwd_hooks = { { "blocks.4.hook_resid_post", function(act) return tensor.zeros(act:size(1), 64) end } } })
  T.ok(maxdiff(repl, zero_res) < 1e-5)
  local kept
  model:run_with_hooks(ids, { fwd_hooks = { { "blocks.0.hook_resid_post", function(act) kept = act end } } })
  collectgarbage()
  model:forward(ids) -- reuses the freed buffers
  local _, c = model:run_with_cache(ids, { names = "blocks.0.hook_resid_post" })
  T.eq(maxdiff(kept, c["blocks.0.hook_resid_post"]), 0)
  T.raises(function()
    model:run_with_hooks(ids, { fwd_hooks = { { "blocks.3.mlp.hook_post", function() error("bad hook") end } } })
  end, "blocks.3.mlp.hook_post: .*bad hook")
  T.raises(function()
    model:run_with_hooks(ids, { fwd_hooks = { { "blocks.3.hook_resid_post", function() return 42 end } } })
  end, "return a tensor")
  T.raises(function()
    model:run_with_hooks(ids, { fwd_hooks = { { "blocks.3.hook_resid_post", function() return tensor.zeros(3) end } } })
  end, "does not fit")
  T.eq(maxdiff(model:forward(ids), base), 0, "the model is unchanged after failing hooks")
end)

T.test("NaN written into the queries reaches the pattern and the logits, as in eager PyTorch", function()
  -- The vectorised exp clamped its input with x as the first operand of MINPS/MAXPS, which
  -- return the second when either is NaN: exp(NaN) became exp(88), a softmax over NaN scores
  -- came out as numbers, and a prompt of 5 tokens gave finite logits from NaN queries.
  local nan = { { "blocks.0.attn.hook_q", function(x) return x * (0 / 0) end } }
  for _, text in ipairs({ "Once upon a time", "Once upon a time there was a little girl named Lily who liked to play" }) do
    local p = model.tokenizer:encode(text)
    local logits = model:run_with_hooks(p, { fwd_hooks = nan })
    T.eq(logits:ne(logits):sum(), logits:numel(), text)
    model:with_hooks(nan, function()
      local _, c = model:run_with_cache(p, { names = "blocks.0.attn.hook_pattern" })
      local pat = c["blocks.0.attn.hook_pattern"]
      -- every entry a query attends to is NaN (the masked ones are written as 0)
      local heads = pat:size(1)
      T.eq(pat:ne(pat):sum(), heads * #p * (#p + 1) / 2, text)
    end)
  end
end)

T.test("a failing hook during generation ends it with the error and leaves the model usable", function()
  local calls = 0
  T.raises(function()
    model:with_hooks({ { "blocks.1.hook_resid_post", function() calls = calls + 1 if calls == 2 then error("step 2") end end } }, function()
      model:generate(ids, { max_new_tokens = 5 })
    end)
  end, "step 2")
  T.eq(model:generate(ids, { max_new_tokens = 5 }).ids, model:generate(ids, { max_new_tokens = 5 }).ids)
end)

T.test("zero_heads on attn.hook_z equals zeroing those heads' pattern rows", function()
  local a = model:run_with_hooks(ids, { fwd_hooks = { { "blocks.1.attn.hook_z", I.zero_heads({ 1, 6 }) } } })
  local b = model:run_with_hooks(ids, { fwd_hooks = { { "blocks.1.attn.hook_pattern", I.scale(0, { heads = { 1, 6 } }) } } })
  T.ok(maxdiff(a, b) < 1e-5)
  T.ok(maxdiff(a, model:forward(ids)) > 1e-4)
  -- scores: a large negative score for key 0 moves attention off BOS
  local _, c = model:with_hooks({ { "blocks.1.attn.hook_attn_scores", function(s) s:select(3, 1):fill_(-1e9) end } }, function()
    return model:run_with_cache(ids, { names = "blocks.1.attn.hook_pattern" })
  end)
  local p = c["blocks.1.attn.hook_pattern"]
  T.ok(p:select(3, 1):narrow(2, 2, n - 1):abs():max() < 1e-6)
end)

T.test("replace patches positions from a saved cache; position-limited replace leaves others alone", function()
  local other = model.tokenizer:encode("Once upon a time there was a big cat")
  T.eq(#other, n)
  local _, clean = model:run_with_cache(other, { names = { "blocks.2.hook_resid_post", "blocks.4.hook_resid_post" } })
  local saved = clean["blocks.2.hook_resid_post"]
  local all = model:run_with_hooks(ids, { fwd_hooks = { { "blocks.2.hook_resid_post", I.replace(saved) } } })
  T.ok(maxdiff(all, model:forward(other)) < 1e-5, "patching every position reproduces the clean run")
  -- at the last layer a patched position reaches the logits of that position only
  local part = model:run_with_hooks(ids, { fwd_hooks = { { "blocks.4.hook_resid_post", I.replace(clean["blocks.4.hook_resid_post"], { positions = { -1 } }) } } })
  local base = model:forward(ids)
  T.eq(maxdiff(part:narrow(1, 1, n - 1), base:narrow(1, 1, n - 1)), 0)
  T.ok(maxdiff(part:select(1, n), model:forward(other):select(1, n)) < 1e-5)
  T.raises(function()
    model:generate(ids, { max_new_tokens = 2 })
    model:with_hooks({ { "blocks.2.hook_resid_post", I.replace(saved) } }, function() model:generate(ids, { max_new_tokens = 2 }) end)
  end, "limit the replace")
end)

T.test("batches: per-sequence hooks (hook.batch), caches left-padded like the logits", function()
  local a, b = model.tokenizer:encode("Once upon a time"), ids
  local batches = {}
  local logits, cache = model:run_with_cache({ a, b }, { names = { "blocks.0.hook_resid_post", "blocks.0.attn.hook_pattern" } })
  local r = cache["blocks.0.hook_resid_post"]
  T.eq({ r:size(1), r:size(2), r:size(3) }, { 2, n, 64 })
  local _, ca = model:run_with_cache(a, { names = "blocks.0.hook_resid_post" })
  local pad = n - #a
  T.eq(maxdiff(r:select(1, 1):narrow(1, pad + 1, #a), ca["blocks.0.hook_resid_post"]), 0)
  T.eq(r:select(1, 1):narrow(1, 1, pad):abs():max(), 0)
  local p = cache["blocks.0.attn.hook_pattern"]
  T.eq({ p:size(1), p:size(2), p:size(3), p:size(4) }, { 2, 8, n, n })
  T.eq(logits:size(2), n)
  model:run_with_hooks({ a, b }, { fwd_hooks = { { "hook_embed", function(act, h) batches[#batches + 1] = { h.batch, act:size(1) } end } } })
  T.eq(batches, { { 1, #a }, { 2, n } })
end)

T.test("bad hooks give errors that say what to write", function()
  T.raises(function() model:run_with_hooks(ids, { fwd_hooks = { { "blocks.9.hook_resid_post", I.add(tensor.zeros(64)) } } }) end,
    "no hook point matches 'blocks.9.hook_resid_post'")
  T.raises(function() model:run_with_hooks(ids, { fwd_hooks = { { "blocks.1.hook_resid_post", I.add(tensor.ones(10)) } } }) end,
    "add vector has 10 elements but each position has 64")
  T.raises(function() model:run_with_hooks(ids, { fwd_hooks = { { "blocks.1.hook_resid_post", I.scale(0, { heads = { 1 } }) } } }) end,
    "heads option needs a per%-head point")
  T.raises(function() model:run_with_hooks(ids, { fwd_hooks = { { "blocks.1.attn.hook_pattern", I.add(tensor.ones(9)) } } }) end,
    "attention scores and patterns are %[head, pos, k%]")
  T.raises(function() model:run_with_hooks(ids, { fwd_hooks = { { "blocks.1.attn.hook_z", I.zero_heads({ 8 }) } } }) end,
    "head 8 does not exist")
  T.raises(function() model:run_with_hooks(ids, { fwd_hooks = { { "blocks.1.hook_resid_post", 3 } } }) end, "a hook must be a function")
  T.raises(function() model:run_with_hooks(ids, { { "blocks.1.hook_resid_post", I.scale(2) } }) end,
           "run_with_hooks: the hooks go in fwd_hooks: run_with_hooks%(input, { fwd_hooks = ")
  T.raises(function() I.ablate(tensor.zeros(64)) end, "zero vector")
  T.raises(function() I.add(tensor.zeros(64), { strenght = 2 }) end, "unknown option 'strenght'")
  T.raises(function() I.add({ 1, 2, 0 / 0 }) end, "must be finite")
  -- ranges that select nothing, positions and heads that are not indices: refused where written
  local here = "test_hooks%.lua:%d+: "
  T.raises(function() I.add(tensor.ones(64), { from = 3, to = 1 }) end, here .. "add: to %(1%) must be past from %(3%)")
  T.raises(function() I.capture({ from = -1, to = -4 }) end, "capture: to %(%-4%) must be past from %(%-1%)")
  T.raises(function() I.scale(2, { to = 0 }) end, "scale: to = 0 selects no position")
  T.raises(function() I.add(tensor.ones(64), { from = 2^60 }) end, here .. "add: from must be an integer position, got")
  T.raises(function() I.ablate(tensor.ones(64), { positions = { 1, 2^62 } }) end, "ablate: positions%[2%] must be an integer position, got 4.61")
  T.raises(function() I.add(tensor.ones(64), { positions = { [1] = 0, [3] = 2 } }) end, "positions must be a list %(it has the key 3%)")
  T.raises(function() I.zero_heads({ 0, 1.5 }) end, here .. "zero_heads: heads%[2%] must be a 0%-based head index, got 1.5")
  T.raises(function() I.scale(0, { heads = { -1 } }) end, "scale: heads%[1%] must be a 0%-based head index, got %-1")
  -- a mixed-sign range depends on the prompt's length and is taken: the last two prompt positions
  -- and everything after (from = -2, to = 100) changes exactly positions n-2 and n-1 here
  local base = model:forward(ids)
  local got = model:run_with_hooks(ids, { fwd_hooks = { { "blocks.0.hook_resid_post", I.add(tensor.ones(64), { from = -2, to = 100 }) } } })
  T.eq(maxdiff(got:narrow(1, 1, n - 2), base:narrow(1, 1, n - 2)), 0)
  T.ok(maxdiff(got:narrow(1, n - 1, 2), base:narrow(1, n - 1, 2)) > 0)
  T.raises(function() model:run_with_cache(ids, { names = "blocks.1.hook_resid_post", positions = { 50 } }) end, "positions[1] = 50 is outside the input's " .. n .. " tokens", true)
end)

T.test("hook names: blocks.-1 is the last layer, '.' is a literal dot, patterns need pattern characters", function()
  local last = "blocks.4.hook_resid_post"
  -- "blocks.-1.hook_resid_post" was the lazy Lua pattern ".-" and selected blocks.1's point, silently
  local _, c = model:run_with_cache(ids, { names = "blocks.-1.hook_resid_post" })
  local got = {}
  for k in pairs(c) do got[#got + 1] = k end
  T.eq(got, { last })
  local _, full = model:run_with_cache(ids, { names = last })
  T.eq(maxdiff(c[last], full[last]), 0)
  local _, c5 = model:run_with_cache(ids, { names = "blocks.-5.hook_resid_pre" })
  T.ok(rawget(c5, "blocks.0.hook_resid_pre") ~= nil, "blocks.-5 is layer 0 of 5")
  -- steering at blocks.-1 is steering the last layer, not layer 1
  local v = tensor.randn(64)
  local neg = model:run_with_hooks(ids, { fwd_hooks = { { "blocks.-1.hook_resid_post", I.add(v, { strength = 3 }) } } })
  local l4 = model:run_with_hooks(ids, { fwd_hooks = { { last, I.add(v, { strength = 3 }) } } })
  T.eq(maxdiff(neg, l4), 0)
  local out = model:with_hooks({ { "blocks.-1.hook_resid_post", I.add(v, { strength = 3 }) } }, function()
    return model:generate(ids, { max_new_tokens = 5 }).ids
  end)
  local want = model:with_hooks({ { last, I.add(v, { strength = 3 }) } }, function() return model:generate(ids, { max_new_tokens = 5 }).ids end)
  T.eq(out, want)
  -- a negative layer inside a pattern; layers past the model are errors that say the range
  local _, cq = model:run_with_cache(ids, { names = "blocks.-1.attn.hook_[qk]$" })
  T.ok(rawget(cq, "blocks.4.attn.hook_q") and rawget(cq, "blocks.4.attn.hook_k") and not rawget(cq, "blocks.1.attn.hook_q"))
  T.raises(function() model:run_with_cache(ids, { names = "blocks.-6.hook_resid_post" }) end,
    "layer -6 is outside the model, which has 5 layers (0..4, or -1..-5 from the end)", true)
  T.raises(function() model:add_hook("blocks.-0.hook_resid_post", I.capture()) end, "layer -0 is not a layer counted from the end", true)
  -- a plain selector matches whole dot-separated parts, '.' literally: "blocks.1" is layer 1's points,
  -- "mlp.hook_post" every layer's; a near miss is an error naming the closest hook names
  local _, c1 = model:run_with_cache(ids, { names = "blocks.1" })
  local n1 = 0
  for k in pairs(c1) do n1 = n1 + 1; T.ok(k:find("^blocks%.1%."), k) end
  T.eq(n1, 15)
  local _, cm = model:run_with_cache(ids, { names = "mlp.hook_post" })
  for l = 0, 4 do T.ok(rawget(cm, ("blocks.%d.mlp.hook_post"):format(l)), "mlp.hook_post at layer " .. l) end
  T.raises(function() model:run_with_cache(ids, { names = "blocks.1.hook_resid_pots" }) end,
    "no hook point matches 'blocks.1.hook_resid_pots'. Closest hook names: blocks.1.hook_resid_post", true)
  T.raises(function() model:run_with_cache(ids, { names = "blocksX1.hook_resid_post" }) end, "no hook point matches", true)
  T.raises(function() model:run_with_cache(ids, { names = "resid_post" }) end, "Closest hook names: blocks.0.hook_resid_post", true)
  -- documented patterns keep working (docs/hooks.md, Selecting hook points)
  local _, cp = model:run_with_cache(ids, { names = "hook_resid_post$" })
  for l = 0, 4 do T.ok(rawget(cp, ("blocks.%d.hook_resid_post"):format(l))) end
  local _, cr = model:run_with_cache(ids, { names = "blocks%.[1-2]%.hook_resid_pre" })
  T.ok(rawget(cr, "blocks.1.hook_resid_pre") and rawget(cr, "blocks.2.hook_resid_pre") and not rawget(cr, "blocks.3.hook_resid_pre"))
  T.raises(function() model:run_with_cache(ids, { names = "blocks%.9%.hook_resid_pre" }) end, "(read as a Lua pattern)", true)
end)

T.test("generate, generate_iter and generate_batch refuse an intervention whose positions are never reached", function()
  local v = tensor.ones(64)
  local p3 = { ids[1], ids[2], ids[3] }
  local R = "blocks.0.hook_resid_post"
  local function gen(iv, o)
    return model:with_hooks({ { R, iv } }, function() return model:generate(p3, o or { max_new_tokens = 3 }) end)
  end
  -- positions = {-100} on a 3-token prompt and {100} with max_new_tokens = 3 were silent no-ops
  T.raises(function() gen(I.add(v, { positions = { -100 } })) end,
    "generate: the add at blocks.0.hook_resid_post selected no position during the generation (the prompt's 3 tokens are positions 0..2", true)
  T.raises(function() gen(I.add(v, { positions = { 100 } })) end, "generated tokens ran through position 4", true)
  -- the last position a generation of 3 tokens feeds back is 3 + 3 - 2 = 4: 4 is reached, 5 is not
  gen(I.add(v, { positions = { 4 } }))
  T.raises(function() gen(I.scale(2, { from = 5 })) end, "the scale at blocks.0.hook_resid_post selected no position", true)
  T.raises(function() gen(I.capture({ positions = { 7 } })) end, "the capture at", true)
  -- unrestricted and function hooks are never refused; nothing generated is nothing judged
  gen(I.add(v)); gen(function() end)
  gen(I.add(v, { positions = { 100 } }), { max_new_tokens = 0 })
  T.raises(function()
    model:with_hooks({ { R, I.add(v, { positions = { 100 } }) } }, function()
      for _ in model:generate_iter(p3, { max_new_tokens = 3 }) do end
    end)
  end, "generate_iter: the add at blocks.0.hook_resid_post selected no position", true)
  -- generate_batch: a sequence's own hooks are judged on it, the active ones on any sequence
  T.raises(function()
    model:generate_batch({ ids, p3 }, { max_new_tokens = 3, per_sequence = { [2] = { hooks = { { R, I.add(v, { positions = { -100 } }) } } } } })
  end, "generate_batch: the add at blocks.0.hook_resid_post (per_sequence[2].hooks) selected no position during the generation (prompt 2: the prompt's 3 tokens", true)
  T.raises(function()
    model:with_hooks({ { R, I.add(v, { positions = { 100 } }) } }, function() return model:generate_batch({ ids, p3 }, { max_new_tokens = 3 }) end)
  end, "(active on every sequence) selected no position during the generation (in no sequence of the batch", true)
  -- position n (past p3's end) is reached by the longer prompt alone: taken
  model:with_hooks({ { R, I.add(v, { positions = { n } }) } }, function() return model:generate_batch({ ids, p3 }, { max_new_tokens = 3 }) end)
end)

-- iv:hits() reset the count on every read (it took its own first result for the reset flag), so
-- an intervention reused after a generation that was never judged (a generate_iter left
-- part-way) started the next judgement from the old count, the next run brought it back to the
-- same number, and a generation that did reach the position was refused. Found by
-- tests/lua/test_fuzz_batch.lua.
T.test("iv:hits() counts on until hits(true); an intervention reused after an abandoned generate_iter is judged on its own run", function()
  local v = tensor.ones(64)
  local p3 = { ids[1], ids[2], ids[3] }
  local iv = I.add(v, { positions = { 1 } })
  model:with_hooks({ { "blocks.0.hook_resid_post", iv } }, function()
    local f = model:generate_iter(p3, { max_new_tokens = 3 })
    f() -- the prompt ran: position 1 selected once; the rest is never asked for
    T.eq(iv:hits(), 1)
    T.eq(iv:hits(), 1, "reading the count leaves it")
    model:generate(p3, { max_new_tokens = 3 }) -- reached position 1 again: no error
    T.eq(iv:hits(), 2)
    local before, restricted = iv:hits(true)
    T.eq(before, 2)
    T.eq(restricted, true)
    T.eq(iv:hits(), 0, "hits(true) resets after reading")
  end)
  local un = I.add(v)
  model:with_hooks({ { "blocks.0.hook_resid_post", un } }, function() model:generate(p3, { max_new_tokens = 2 }) end)
  T.eq(select(2, un:hits()), false, "an intervention without positions is not restricted")
end)

T.test("generate_batch refuses per_sequence[i].stream (it was accepted and never called)", function()
  local called = 0
  T.raises(function()
    model:generate_batch({ "Hi", "Yo" }, { max_new_tokens = 3, per_sequence = { [2] = { stream = function() called = called + 1 end } } })
  end, "generate_batch: per_sequence[2].stream is not supported", true)
  T.eq(called, 0)
  T.raises(function() model:generate_batch({ "Hi", "Yo" }, { max_new_tokens = 3, stream = function() end }) end, "stream is not supported", true)
end)

T.test("hook points exist on every architecture (gpt2 has hook_pos_embed; parallel GPT-NeoX has no resid_mid)", function()
  local dir = seer.script_dir() .. "/../parity/models/"
  local g = seer.model.load(dir .. "gpt2")
  local set = {}
  for _, nm in ipairs(g:hook_names()) do set[nm] = true end
  T.ok(set["hook_pos_embed"] and set["blocks.2.hook_resid_mid"])
  local x = seer.model.load(dir .. "gpt_neox")
  set = {}
  for _, nm in ipairs(x:hook_names()) do set[nm] = true end
  T.ok(not set["blocks.0.hook_resid_mid"] and set["blocks.0.hook_attn_out"])
  for _, name in ipairs({ "llama", "gemma2", "gemma3", "qwen3", "mistral", "gpt2", "gpt_neox" }) do
    local m = seer.model.load(dir .. name)
    local seq = { 1, 5, 9, 13, 17, 21, 25, 29 }
    local logits, cache = m:run_with_cache(seq)
    T.eq(#m:hook_names(), (function() local k = 0 for _ in pairs(cache) do end for _ in ipairs(m:hook_names()) do k = k + 1 end return k end)())
    T.ok(maxdiff(m:unembed(cache[("blocks.%d.hook_resid_post"):format(m.config.num_hidden_layers - 1)]), logits) < 1e-4, name)
    T.ok(maxdiff(logits, m:forward(seq)) == 0, name .. ": capturing everything changes nothing")
  end
end)

T.test("intervention constructors' errors name the caller's line (the C checks included)", function()
  local here = debug.getinfo(1, "S").short_src
  local cases = {
    function() local r = I.ablate(tensor.zeros(3)) return r end,          -- the zero vector (C)
    function() local r = I.add({}) return r end,                           -- empty (C)
    function() local r = I.ablate({ 0 / 0, 1 }) return r end,              -- not finite (C)
    function() local r = I.add(tensor.ones(3), { strength = "x" }) return r end,
    function() local r = I.scale("x") return r end,
    function() local r = I.zero_heads({ -1 }) return r end,
    function() local r = I.replace(5) return r end,
  }
  for i, f in ipairs(cases) do
    local ok, err = pcall(f)
    T.ok(not ok, "case " .. i .. " raised")
    T.eq(tostring(err):match("^(.-):%d+: "), here, ("case %d: %s"):format(i, tostring(err)))
  end
end)

-- The hooked attention path (score and pattern hooks) runs its rows on the model's threads
-- (engine/model/hooks_glue.c, seer_fwd_attention): the patterns, the scores a hook changed and
-- the logits after them are the same bits at every thread count.
T.test("score and pattern hooks give the same bits at 1, 2 and 3 threads", function()
  local long = model.tokenizer:encode(("Once upon a time there was a little dog who liked to run in the park. "):rep(4))
  local out = {}
  for _, threads in ipairs({ 1, 2, 3 }) do
    local m = seer.model.load(root, { threads = threads })
    local logits, cache = m:with_hooks({ { "blocks.1.attn.hook_attn_scores", I.scale(0.5, { heads = { 1 } }) } }, function()
      return m:run_with_cache(long, { names = { "blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern", "blocks.1.attn.hook_attn_scores" } })
    end)
    out[threads] = { logits, cache }
  end
  for _, threads in ipairs({ 2, 3 }) do
    T.eq(maxdiff(out[threads][1], out[1][1]), 0, threads .. " threads: logits")
    for _, name in ipairs({ "blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern" }) do
      T.eq(maxdiff(out[threads][2][name], out[1][2][name]), 0, threads .. " threads: " .. name)
    end
    -- masked scores are -inf in every run: compare where they are finite, and that the rest are -inf alike
    local a, b = out[threads][2]["blocks.1.attn.hook_attn_scores"]:totable(), out[1][2]["blocks.1.attn.hook_attn_scores"]:totable()
    local same = true
    for h = 1, #a do for q = 1, #a[h] do for k = 1, #a[h][q] do if a[h][q][k] ~= b[h][q][k] then same = false end end end end
    T.ok(same, threads .. " threads: the scores")
  end
  T.ok(maxdiff(out[1][1], model:forward(long)) > 0, "the score hook changed the logits (else this checks little)")
end)

T.test("a capture's count() and read(): one copy of the rows for the tensor and its positions", function()
  local cap = I.capture({ positions = { 1, 3 } })
  T.eq(cap:count(), 0)
  model:run_with_hooks(ids, { fwd_hooks = { { "blocks.2.hook_resid_post", cap } } })
  model:run_with_hooks(ids, { fwd_hooks = { { "blocks.2.hook_resid_post", cap } } })
  T.eq(cap:count(), 2, "two forward calls, two chunks")
  local t, pos = cap:read()
  T.eq(maxdiff(t, cap:tensor()), 0)
  T.eq(pos, cap:positions())
  T.eq(pos, { 1, 3, 1, 3 })
  -- each read is a copy of its own: writing into one leaves the capture and the next read alone
  local before = cap:tensor():clone()
  t:fill_(7)
  T.eq(maxdiff(cap:tensor(), before), 0)
  T.eq(maxdiff(cap:read(), before), 0)
  local _, c = model:run_with_cache(ids, { names = "blocks.2.hook_resid_post", positions = { 3, 1 } })
  T.eq(maxdiff(c["blocks.2.hook_resid_post"], tensor.cat({ before:narrow(1, 2, 1), before:narrow(1, 1, 1) }, 1)), 0,
    "run_with_cache reads each capture once, in the positions' order")
  T.eq(I.add(tensor.zeros(model.config.hidden_size)):count(), 0, "not a capture: no chunks")
  cap:clear()
  T.eq(cap:count(), 0)
  T.raises(function() cap:read() end, "nothing was captured")
end)
