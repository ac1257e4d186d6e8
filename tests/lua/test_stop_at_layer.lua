-- run_with_cache's stop_at_layer (TransformerLens's): the pass runs the embeddings and blocks
-- 0 .. L-1 and returns the residual entering block L in place of the logits. On every parity
-- architecture, every L, one sequence and a batch: the residual and every cached point equal the
-- whole pass's, bit for bit; points past the stop are not cached; nothing after the stop runs
-- (a hook there is never called); bad values are errors naming the range. And the toolkit's
-- extract_activations, which stops after its layer and batches its prompts, gives each prompt
-- exactly what one whole pass per prompt gives.
local T = require "testing"
local tensor = seer.tensor

local pdir = seer.script_dir() .. "/../parity/models"
local stories = seer.script_dir() .. "/../fixtures/models/stories260K"

local names = {}
for _, e in ipairs(require("seer.core.host").list_dir(pdir)) do names[#names + 1] = e end
table.sort(names)

-- attention scores hold -inf at masked keys (-inf - -inf is NaN): compared where finite, and
-- their -inf entries must coincide
local function same(a, b)
  local fa, fb = a:clone(), b:clone()
  local ta, tb = fa:totable(), fb:totable()
  local function walk(x, y)
    if type(x) == "table" then
      for i = 1, #x do
        local ok, why = walk(x[i], y[i])
        if not ok then return false, why end
      end
      return true
    end
    if x ~= y and not (x ~= x and y ~= y) then return false, ("%s ~= %s"):format(x, y) end
    return true
  end
  return walk(ta, tb)
end

local function ids_for(vocab, n, k)
  local s = {}
  for i = 1, n do s[i] = (i * 7 + k * 13) % (vocab - 3) + 3 end
  return s
end

for _, name in ipairs(names) do
  T.test("stop_at_layer: every layer's residual and cache equal the whole pass, bit for bit: " .. name, function()
    local m = seer.model.load(pdir .. "/" .. name, { tokenizer = false })
    local nl, d = m.config.num_hidden_layers, m.config.hidden_size
    local ids = ids_for(m.config.vocab_size, 19, 1)
    local _, full = m:run_with_cache(ids)
    for L = 0, nl do
      local r, c = m:run_with_cache(ids, { stop_at_layer = L })
      T.eq(r:size(1), #ids)
      T.eq(r:size(2), d)
      local want = L < nl and full[("blocks.%d.hook_resid_pre"):format(L)] or full[("blocks.%d.hook_resid_post"):format(nl - 1)]
      T.eq((r - want):abs():max(), 0, ("%s: the residual at stop %d"):format(name, L))
      local count = 0
      for hname, t in pairs(c) do
        count = count + 1
        local ok, why = same(t, full[hname])
        T.ok(ok, ("%s: stop %d: %s differs from the whole pass: %s"):format(name, L, hname, tostring(why)))
        local b = tonumber(hname:match("^blocks%.(%d+)%."))
        T.ok(not hname:find("^ln_final"), name .. ": the final norm is past every stop")
        if b then T.ok(b < L or (b == L and hname:find("hook_resid_pre$")), ("%s: stop %d cached %s"):format(name, L, hname)) end
      end
      T.ok(count > 0, name .. ": something was cached")
      if L < nl then
        T.raises(function() return c[("blocks.%d.hook_resid_post"):format(L)] end, "the pass stopped where block " .. L .. " begins", true)
      end
    end
    -- negative from the end; a batch of sequences of different lengths, left-padded like logits
    local r1 = m:run_with_cache(ids, { stop_at_layer = -1 })
    T.eq((r1 - full[("blocks.%d.hook_resid_pre"):format(nl - 1)]):abs():max(), 0)
    local seqs = { ids, ids_for(m.config.vocab_size, 4, 2), ids_for(m.config.vocab_size, 11, 3) }
    local rb, cb = m:run_with_cache(seqs, { stop_at_layer = 2, names = "hook_resid_pre$", positions = { -1 } })
    T.eq(rb:size(1), 3)
    T.eq(rb:size(2), #ids)
    for i, s in ipairs(seqs) do
      local ra, ca = m:run_with_cache(s, { stop_at_layer = 2, names = "hook_resid_pre$", positions = { -1 } })
      T.eq((rb:select(1, i):narrow(1, #ids - #s + 1, #s) - ra):abs():max(), 0, name .. ": batched residual " .. i)
      T.eq((cb["blocks.2.hook_resid_pre"]:select(1, i) - ca["blocks.2.hook_resid_pre"]):abs():max(), 0)
    end
  end)
end

T.test("stop_at_layer: nothing after the stop runs; the model works after; bad values are errors", function()
  local m = seer.model.load(pdir .. "/llama", { tokenizer = false })
  local ids = ids_for(m.config.vocab_size, 9, 4)
  local calls = 0
  local I = require "seer.interventions"
  local before = m:forward(ids)
  m:with_hooks({ { "blocks.2.hook_resid_post", function(act) calls = calls + 1 return act end },
                 { "ln_final.hook_normalized", function(act) calls = calls + 1 return act end } }, function()
    m:run_with_cache(ids, { stop_at_layer = 2 })
    m:run_with_cache({ ids, ids }, { stop_at_layer = 1 })
  end)
  T.eq(calls, 0, "a hook past the stop ran")
  T.eq((m:forward(ids) - before):abs():max(), 0, "the model is unchanged after a stopped pass")
  -- a hook before the stop runs and changes what the stop returns
  local vec = tensor.ones(m.config.hidden_size)
  local plain = m:run_with_cache(ids, { stop_at_layer = 2 })
  local steered = m:with_hooks({ { "blocks.0.hook_resid_post", I.add(vec) } }, function()
    return m:run_with_cache(ids, { stop_at_layer = 2 })
  end)
  T.ok((steered - plain):abs():max() > 0, "a hook before the stop took effect")
  local nl = m.config.num_hidden_layers
  T.raises(function() m:run_with_cache(ids, { stop_at_layer = nl + 1 }) end,
    ("stop_at_layer must be a whole number from %d to %d (negative: from the end), got %d"):format(-nl, nl, nl + 1), true)
  T.raises(function() m:run_with_cache(ids, { stop_at_layer = 1.5 }) end, "got 1.5", true)
  T.raises(function() m:run_with_cache(ids, { stop_at_layer = -nl - 1 }) end, "stop_at_layer must be a whole number", true)
  T.raises(function() m:run_with_cache(ids, { stop_at_layer = "2" }) end, "stop_at_layer", true)
end)

T.test("extract_activations (stopped, batched by 16) == one whole pass per prompt, bit for bit; errors before any pass", function()
  local EX = require "toolkit.extract_activations"
  local m = seer.model.load(stories)
  local g = m.config.gemm_min_tokens
  local prompts = {}
  for i = 1, 19 do prompts[i] = ("Once upon a time there was a little dog number %d."):format(i) end
  -- one past this CPU's GEMM threshold: it runs alone in its batch, the others share a pass
  local long = {}
  for i = 1, g + 4 do long[i] = (i * 37) % 500 + 3 end
  prompts[7] = long
  for _, L in ipairs({ 0, 2, m.config.num_hidden_layers - 1 }) do
    for _, pos in ipairs({ -1, 0, 3 }) do
      local got = EX.extract_activations(m, nil, prompts, L, pos)
      T.eq(got:size(1), #prompts)
      local name = ("blocks.%d.hook_resid_post"):format(L)
      for i, p in ipairs(prompts) do
        local ids = type(p) == "table" and p or m.tokenizer:encode(p)
        local _, c = m:run_with_cache(ids, { names = { name } })
        local want = c[name]:select(1, pos < 0 and #ids + pos + 1 or pos + 1)
        T.eq((got:select(1, i) - want):abs():max(), 0, ("layer %d position %d prompt %d"):format(L, pos, i))
      end
    end
  end
  local bad = { "Once upon a time there was a dog", "x" }
  T.raises(function() EX.extract_activations(m, nil, bad, 1, 5) end, "input 2", true)
end)
