-- forward / run_with_hooks with start_at_layer (TransformerLens's): the input is the residual
-- entering block L, and only blocks L .. on, the final norm and the unembedding run. Given the
-- residual a whole pass had there, every logit must be that pass's, bit for bit, on every
-- architecture and at every L; hooks of the blocks it runs apply, earlier ones and the embedding
-- hooks never run; a batch equals each alone; bad requests are errors naming the fix.
-- toolkit.activation_patching.patch_sweep begins each layer's batch there (test_model_batch.lua
-- checks it against whole patched passes).
local T = require "testing"
local I = require "seer.interventions"
local tensor = seer.tensor

local pdir = seer.script_dir() .. "/../parity/models"
local names = {}
for _, e in ipairs(require("seer.core.host").list_dir(pdir)) do names[#names + 1] = e end
table.sort(names)
assert(#names >= 20, "the parity models are missing from " .. pdir)

local function maxdiff(a, b) return (a - b):abs():max() end
-- 0 when a and b hold the same values, -inf entries (masked attention scores) included
local function differ(a, b) return (a:clamp(-3e38, 3e38) - b:clamp(-3e38, 3e38)):abs():max() end
local function seq(n, k, vocab)
  local s = {}
  for i = 1, n do s[i] = (i * 7 + k * 13) % (vocab - 1) + 1 end
  return s
end

-- the residual entering block L of a whole pass over ids (L = num_layers: after the last block)
local function resid_at(m, ids, L)
  local nl = m.config.num_hidden_layers
  local name = L < nl and ("blocks.%d.hook_resid_pre"):format(L) or ("blocks.%d.hook_resid_post"):format(nl - 1)
  local _, cache = m:run_with_cache(ids, { names = { name } })
  return cache[name]
end

T.test("every architecture, every block: the logits from the residual entering it are the whole pass's, bit for bit", function()
  for _, name in ipairs(names) do
    local m = seer.model.load(pdir .. "/" .. name, { tokenizer = false })
    local nl, V = m.config.num_hidden_layers, m.config.vocab_size
    -- 5 tokens (the per-token kernels) and 21 (attention's GEMM path)
    for _, n in ipairs({ 5, 21 }) do
      local ids = seq(n, n, V)
      local full = m:forward(ids)
      for L = 0, nl do
        T.eq(maxdiff(m:forward(resid_at(m, ids, L), { start_at_layer = L }), full), 0, ("%s, %d tokens, start_at_layer %d"):format(name, n, L))
      end
      T.eq(maxdiff(m:forward(resid_at(m, ids, nl - 1), { start_at_layer = -1 }), full), 0, name .. ": start_at_layer -1")
    end
  end
end)

T.test("a batch of residuals of different lengths equals each alone; per-sequence patches", function()
  local m = seer.model.load(pdir .. "/llama", { tokenizer = false })
  local V, L = m.config.vocab_size, 1
  local a, b = seq(9, 1, V), seq(4, 2, V)
  local ra, rb = resid_at(m, a, L), resid_at(m, b, L)
  local lg, mask = m:forward({ ra, rb }, { start_at_layer = L })
  T.eq(lg:size(1), 2)
  T.eq(lg:size(2), 9)
  T.eq(maxdiff(lg:select(1, 1), m:forward(a)), 0, "sequence 1")
  T.eq(maxdiff(lg:select(1, 2):narrow(1, 6, 4), m:forward(b)), 0, "sequence 2, left-padded")
  T.eq(mask[2][5], 0)
  T.eq(mask[2][6], 1)
  -- run_with_hooks per_sequence: each patch from block L equals the whole pass with it
  tensor.manual_seed(4)
  local v = tensor.randn(m.config.hidden_size) * 3
  local per = {
    [1] = { { "blocks.1.hook_resid_pre", I.add(v, { positions = { 2 } }) } },
    [2] = { { "blocks.2.hook_mlp_out", I.scale(0.5) } },
  }
  local got = m:run_with_hooks({ ra, ra, rb }, { per_sequence = per, start_at_layer = L })
  for k, ids in ipairs({ a, a, b }) do
    local want = m:run_with_hooks(ids, { fwd_hooks = per[k] or {} })
    T.eq(maxdiff(got:select(1, k):narrow(1, 9 - #ids + 1, #ids), want), 0, "patched sequence " .. k)
  end
  T.ok(maxdiff(got:select(1, 1), got:select(1, 3)) > 0, "the patches changed the logits (else this checks little)")
end)

T.test("hooks: the blocks it runs and ln_final apply; earlier blocks and the embeddings never run", function()
  local m = seer.model.load(pdir .. "/llama", { tokenizer = false })
  local ids = seq(7, 3, m.config.vocab_size)
  local r = resid_at(m, ids, 2)
  local seen = {}
  local function count(name) return { name, function() seen[name] = (seen[name] or 0) + 1 end } end
  m:run_with_hooks(r, { start_at_layer = 2, fwd_hooks = {
    count("hook_embed"), count("blocks.0.hook_resid_post"), count("blocks.1.attn.hook_pattern"),
    count("blocks.2.hook_resid_pre"), count("blocks.2.attn.hook_q"), count("ln_final.hook_normalized") } })
  T.eq(seen["hook_embed"], nil, "hook_embed")
  T.eq(seen["blocks.0.hook_resid_post"], nil, "an earlier block")
  T.eq(seen["blocks.1.attn.hook_pattern"], nil, "an earlier block's pattern")
  T.eq(seen["blocks.2.hook_resid_pre"], 1, "the first block it runs: its resid_pre sees the given residual")
  T.eq(seen["blocks.2.attn.hook_q"], 1)
  T.eq(seen["ln_final.hook_normalized"], 1)
end)

T.test("start_at_layer: errors name the problem and the fix", function()
  local m = seer.model.load(pdir .. "/llama", { tokenizer = false })
  local nl, d = m.config.num_hidden_layers, m.config.hidden_size
  local r = resid_at(m, seq(5, 1, m.config.vocab_size), 1)
  T.raises(function() m:forward(r, { start_at_layer = nl + 1 }) end, ("start_at_layer must be a whole number from %d to %d"):format(-nl, nl), true)
  T.raises(function() m:forward(r, { start_at_layer = 0.5 }) end, "start_at_layer must be a whole number", true)
  T.raises(function() m:forward({ 1, 2, 3 }, { start_at_layer = 1 }) end, ("a [n, %d] tensor or a list of them"):format(d), true)
  T.raises(function() m:forward(tensor.zeros(3, d + 1), { start_at_layer = 1 }) end, ("the residual is a tensor of shape [3, %d]"):format(d + 1), true)
  T.raises(function() m:forward({ r, tensor.zeros(2) }, { start_at_layer = 1 }) end, "residual 2 is a tensor of shape [2]", true)
  T.raises(function() m:forward(r, { start_at_layer = 1, hidden_states = true }) end, "cannot be asked together", true)
  local padded = m:run_with_cache({ seq(3, 1, m.config.vocab_size), seq(2, 2, m.config.vocab_size) }, { names = {}, stop_at_layer = 1 })
  T.raises(function() m:forward(padded, { start_at_layer = 1 }) end, "a batch is a list of [n, " .. d .. "] residuals", true)
  T.raises(function() m:run_with_hooks(r, { start_at_layer = 1, per_sequence = {} }) end, "per_sequence needs a list", true)
  -- the core refuses a residual that is not [n, hidden_size] f32 even if the Lua layer is bypassed
  T.raises(function() m._c:forward({ 0, 0, 0 }, false, nil, nil, nil, 1, tensor.zeros(2, d)) end, "contiguous f32 tensor [3, " .. d .. "]", true)
  T.raises(function() m._c:forward({ 0, 0 }, false, nil, nil, nil, 1, nil) end, "contiguous f32 tensor", true)
  T.raises(function() m._c:forward({ 0, 0, 0, 0, 0 }, false, nil, nil, 0, 1, r) end, "stop_at_layer 0 is before start_at_layer 1", true)
  -- a bf16 residual is widened (exactly) first
  local lg = m:forward(r:to("bf16"), { start_at_layer = 1 })
  T.eq(maxdiff(lg, m:forward(r:to("bf16"):to("f32"), { start_at_layer = 1 })), 0)
end)

T.test("run_with_cache from a block: the points it reaches are the whole pass's, the rest absent; with stop_at_layer; a batch", function()
  for _, name in ipairs({ "llama", "gpt2", "gemma2", "gpt_neox" }) do
    local m = seer.model.load(pdir .. "/" .. name, { tokenizer = false })
    local V, nl = m.config.vocab_size, m.config.num_hidden_layers
    local ids = seq(9, 4, V)
    local full, fc = m:run_with_cache(ids)
    local L = 1
    local lg, c = m:run_with_cache(resid_at(m, ids, L), { start_at_layer = L })
    T.eq(maxdiff(lg, full), 0, name .. ": logits")
    local n_checked = 0
    for _, hn in ipairs(m:hook_names()) do
      local b = hn:match("^blocks%.(%d+)%.")
      if (b and tonumber(b) >= L) or hn:find("^ln_final") then
        T.eq(differ(c[hn], fc[hn]), 0, name .. ": " .. hn)
        n_checked = n_checked + 1
      else
        T.raises(function() return c[hn] end, "the pass began at block 1", true)
      end
    end
    T.ok(n_checked > 10, name .. ": points compared")
    -- from block 1 to block nl - 1: the residual entering it in place of the logits
    local r, c2 = m:run_with_cache(resid_at(m, ids, L), { start_at_layer = L, stop_at_layer = nl - 1, names = "hook_resid_post$" })
    T.eq(maxdiff(r, fc[("blocks.%d.hook_resid_pre"):format(nl - 1)]), 0, name .. ": start and stop")
    T.eq(maxdiff(c2[("blocks.%d.hook_resid_post"):format(L)], fc[("blocks.%d.hook_resid_post"):format(L)]), 0)
    T.raises(function() m:run_with_cache(resid_at(m, ids, 2), { start_at_layer = 2, stop_at_layer = 1 }) end, "stop_at_layer (1) is before start_at_layer (2)", true)
    -- a batch of two residuals of different lengths: each its own cache, left-padded
    local ids2 = seq(4, 5, V)
    local bl, bc = m:run_with_cache({ resid_at(m, ids, L), resid_at(m, ids2, L) }, { start_at_layer = L, names = "hook_resid_post$" })
    local _, c_two = m:run_with_cache(ids2, { names = "hook_resid_post$" })
    local last = ("blocks.%d.hook_resid_post"):format(nl - 1)
    T.eq(maxdiff(bc[last]:select(1, 2):narrow(1, 6, 4), c_two[last]), 0, name .. ": batch, sequence 2")
    T.eq(maxdiff(bl:select(1, 1), full), 0, name .. ": batch, sequence 1's logits")
  end
end)
