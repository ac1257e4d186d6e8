-- The Gemma family (gemma, gemma2, gemma3_text) on the random-weight parity models
-- (tests/parity/models): incremental decoding through the KV cache, past the sliding window,
-- gives the same tokens as full forwards; the config fields Gemma reads; missing tensors and
-- unsupported settings are clear errors. Logit/residual parity itself is in test_parity.lua.
local T = require "testing"
local json = seer.json

local dir = seer.script_dir() .. "/../parity/models"
local archs = { gemma = "gemma", gemma2 = "gemma2", gemma3 = "gemma3_text" }
local names = { "gemma", "gemma2", "gemma3" }

local function supported(model_type)
  for n in seer.model.supported():gmatch("[%w_]+") do
    if n == model_type then return true end
  end
  return false
end

-- Greedy choice from the last row, as generate makes it: stop tokens masked (min_new_tokens),
-- the repetition penalty (2: exact in f32 and in Lua's doubles) on every token of history,
-- then argmax (lowest id on ties).
local function greedy_last(logits, history, penalty, masked)
  local rows = logits:totable()
  local row = rows[#rows]
  for _, id in ipairs(masked or {}) do row[id + 1] = -math.huge end
  if penalty then
    local seen = {}
    for _, id in ipairs(history) do
      if not seen[id] then
        seen[id] = true
        local v = row[id + 1]
        row[id + 1] = v < 0 and v * penalty or v / penalty
      end
    end
  end
  local best, id = -math.huge, nil
  for i, v in ipairs(row) do
    if v > best then best, id = v, i - 1 end
  end
  return id
end

-- A copy of a parity model with config.json edited by fn.
local function variant(name, fn)
  local d = T.tmpdir()
  local cfg = json.decode(seer.read_file(dir .. "/" .. name .. "/config.json"))
  fn(cfg)
  seer.write_file(d .. "/config.json", json.encode(cfg))
  os.execute(("cp '%s/%s/model.safetensors' '%s/model.safetensors'"):format(dir, name, d)) -- a link out of the folder is refused
  return d
end

for _, name in ipairs(names) do
  T.test(name .. ": greedy decoding with the KV cache equals full forwards", function()
    if not supported(archs[name]) then T.skip(archs[name] .. " is not linked in") end
    local model = seer.model.load(dir .. "/" .. name, { tokenizer = false })
    T.eq(model.config.model_type, archs[name])
    -- A one-token prompt (every step is incremental) and a 13-token prompt (a batched prefill,
    -- then single steps); both run past the sliding window of 5. Random-weight models repeat
    -- themselves under plain greedy decoding, so a repetition penalty (and no early stop) also
    -- forces varied tokens.
    local varied = 0
    for _, prompt in ipairs({ { 1 }, { 1, 50, 7, 33, 90, 12, 64, 5, 41, 77, 23, 8, 60 } }) do
      for _, penalty in ipairs({ false, 2.0 }) do
        local out = model:generate(prompt, { max_new_tokens = 16, repetition_penalty = penalty or nil,
          min_new_tokens = penalty and 16 or nil })
        T.ok(#out.ids >= 1, "no tokens generated")
        local seq, distinct = {}, {}
        for i, id in ipairs(prompt) do seq[i] = id end
        for step, id in ipairs(out.ids) do
          T.eq(id, greedy_last(model:forward(seq), seq, penalty, penalty and model.config.eos_token_ids),
            ("%s: step %d (prompt of %d, penalty %s)"):format(name, step, #prompt, tostring(penalty)))
          seq[#seq + 1] = id
          if not distinct[id] then distinct[id], varied = true, varied + 1 end
        end
      end
    end
    T.ok(varied >= 12, "too few distinct tokens to test the cache: " .. varied)
  end)
end

T.test("gemma: a missing tensor is named in the error", function()
  if not supported("gemma") then T.skip("gemma is not linked in") end
  local d = variant("gemma", function(c) c.num_hidden_layers = 4 end)
  T.raises(function() seer.model.load(d, { tokenizer = false }) end,
    "lacks tensors that config.json requires: model.layers.3.input_layernorm.weight, model.layers.3.self_attn.q_proj.weight", true)
end)

T.test("gemma2/gemma3: missing sandwich and q/k norms are named", function()
  if not supported("gemma3_text") then T.skip("gemma3_text is not linked in") end
  local d = variant("gemma3", function(c) c.num_hidden_layers = 4; c.layer_types[4] = "full_attention" end)
  local msg = T.raises(function() seer.model.load(d, { tokenizer = false }) end, "lacks tensors")
  for _, t in ipairs({ "self_attn.q_norm", "self_attn.k_norm", "pre_feedforward_layernorm", "post_feedforward_layernorm" }) do
    T.contains(msg, "model.layers.3." .. t .. ".weight")
  end
end)

T.test("gemma2: layer_types of the wrong length or kind is an error", function()
  if not supported("gemma2") then T.skip("gemma2 is not linked in") end
  local d = variant("gemma2", function(c) c.layer_types = { "sliding_attention" } end)
  T.raises(function() seer.model.load(d, { tokenizer = false }) end, "\"layer_types\" must list 3 layer types", true)
  d = variant("gemma2", function(c) c.layer_types[2] = "chunked_attention" end)
  T.raises(function() seer.model.load(d, { tokenizer = false }) end, "layer_types[1] must be", true)
end)

T.test("gemma2: soft-capping and the sliding window change the logits", function()
  if not supported("gemma2") then T.skip("gemma2 is not linked in") end
  local ids = { 1, 50, 7, 33, 90, 12, 64, 5, 41, 77, 23, 8, 60 }
  local base = seer.model.load(dir .. "/gemma2", { tokenizer = false }):forward(ids)
  local function differs(edit)
    local m = seer.model.load(variant("gemma2", edit), { tokenizer = false })
    return (m:forward(ids) - base):abs():max() > 1e-3
  end
  T.ok(differs(function(c) c.attn_logit_softcapping = json.null end), "attention soft-capping has no effect")
  T.ok(differs(function(c) c.final_logit_softcapping = json.null end), "final soft-capping has no effect")
  T.ok(differs(function(c) c.layer_types = { "full_attention", "full_attention", "full_attention" } end),
    "the sliding window has no effect")
end)

T.test("gemma3: unsupported rope types and bidirectional attention are errors", function()
  if not supported("gemma3_text") then T.skip("gemma3_text is not linked in") end
  local d = variant("gemma3", function(c) c.rope_parameters.full_attention.rope_type = "yarn" end)
  T.raises(function() seer.model.load(d, { tokenizer = false }) end, "rope_type \"yarn\" for full_attention is not supported", true)
  d = variant("gemma3", function(c) c.use_bidirectional_attention = true end)
  T.raises(function() seer.model.load(d, { tokenizer = false }) end, "use_bidirectional_attention", true)
end)

T.test("gemma3: the per-layer-type RoPE bases are read from rope_parameters", function()
  if not supported("gemma3_text") then T.skip("gemma3_text is not linked in") end
  local ids = { 1, 50, 7, 33, 90, 12, 64, 5, 41, 77, 23, 8, 60 }
  local base = seer.model.load(dir .. "/gemma3", { tokenizer = false }):forward(ids)
  for _, lt in ipairs({ "full_attention", "sliding_attention" }) do
    local m = seer.model.load(variant("gemma3", function(c) c.rope_parameters[lt].rope_theta = 12345.0 end),
      { tokenizer = false })
    T.ok((m:forward(ids) - base):abs():max() > 1e-3, lt .. " rope_theta has no effect")
  end
end)
