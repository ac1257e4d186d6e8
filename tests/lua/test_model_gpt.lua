-- GPT-2 and GPT-NeoX beyond the parity goldens (test_parity.lua): the KV cache (greedy
-- token-by-token generation equals the argmax of one full forward), GPT-2's learned position
-- table as a hard limit, checkpoints without the "transformer." prefix, bf16/f16 weights
-- (including GPT-2's transposed Conv1D weights) and the missing-tensor errors.
local T = require "testing"
local tensor = require "seer.tensor"

local dir = seer.script_dir() .. "/../parity/models"

-- 0-based argmax, lowest id on ties, skipping the ids in skip (stop tokens suppressed by
-- min_new_tokens).
local function argmax(row, skip)
  local best, bi = -math.huge, nil
  for i, v in ipairs(row) do
    if v > best and not skip[i - 1] then best, bi = v, i - 1 end
  end
  return bi
end

local function copy_config(src, dst, edit)
  local cfg = seer.json.decode(seer.read_file(src .. "/config.json"))
  if edit then edit(cfg) end
  local f = assert(io.open(dst .. "/config.json", "w"))
  f:write(seer.json.encode(cfg))
  f:close()
end

local function max_diff(a, b) return (a - b):abs():max() end

for _, name in ipairs { "gpt2", "gpt_neox" } do
  local mdir = dir .. "/" .. name
  local golden = tensor.load(mdir .. "/golden.safetensors")
  local tokens = golden.tokens:totable()

  T.test(name .. ": greedy generation with the KV cache equals the argmax of a full forward", function()
    local model = seer.model.load(mdir, { tokenizer = false })
    local prompt = { tokens[1], tokens[2], tokens[3], tokens[4], tokens[5] }
    -- min_new_tokens keeps a stop token from ending the run early; it is masked, so the
    -- full forward's argmax skips it too.
    local ids = model:generate(prompt, { max_new_tokens = 30, min_new_tokens = 30 }).ids
    T.eq(#ids, 30)
    local stops = {}
    for _, id in ipairs(model.config.eos_token_ids) do stops[id] = true end
    local seq = {}
    for _, id in ipairs(prompt) do seq[#seq + 1] = id end
    for i = 1, #ids - 1 do seq[#seq + 1] = ids[i] end
    local rows = model:forward(seq):totable()
    for j = 1, #ids do
      T.eq(argmax(rows[#prompt + j - 1], stops), ids[j], ("%s: token %d of the continuation"):format(name, j))
    end
  end)

  T.test(name .. ": a missing layer is reported with every missing tensor", function()
    local tmp = T.tmpdir()
    copy_config(mdir, tmp, function(c)
      if c.n_layer then c.n_layer = 4 else c.num_hidden_layers = 4 end
    end)
    assert(os.execute(("cp '%s/model.safetensors' '%s/model.safetensors'"):format(mdir, tmp)) == 0) -- a link out of the folder is refused
    local msg = T.raises(function() seer.model.load(tmp, { tokenizer = false }) end, "the checkpoint lacks tensors", true)
    if name == "gpt2" then
      T.contains(msg, "transformer.h.3.ln_1.weight")
      T.contains(msg, "transformer.h.3.mlp.c_proj.bias")
    else
      T.contains(msg, "gpt_neox.layers.3.input_layernorm.weight")
      T.contains(msg, "gpt_neox.layers.3.mlp.dense_4h_to_h.bias")
    end
  end)

  T.test(name .. ": bf16 and f16 weights match f32 weights holding the same values", function()
    local weights = tensor.load(mdir .. "/model.safetensors")
    for _, dt in ipairs { "bf16", "f16" } do
      local low, widened = {}, {}
      for k, v in pairs(weights) do
        low[k] = v:to(dt)
        widened[k] = low[k]:to("f32")
      end
      local a, b = T.tmpdir(), T.tmpdir()
      copy_config(mdir, a)
      copy_config(mdir, b)
      tensor.save(a .. "/model.safetensors", low, { format = "pt" })
      tensor.save(b .. "/model.safetensors", widened, { format = "pt" })
      local ma = seer.model.load(a, { tokenizer = false })
      local mb = seer.model.load(b, { tokenizer = false })
      T.eq(ma.config.dtype, dt)
      local d = max_diff(ma:forward(tokens), mb:forward(tokens))
      T.ok(d <= 1e-4, ("%s %s: logits differ by %g"):format(name, dt, d))
    end
  end)
end

T.test("gpt2: positions beyond n_positions are an error, not a read past wpe", function()
  local model = seer.model.load(dir .. "/gpt2", { tokenizer = false })
  local long = {}
  for i = 1, 65 do long[i] = 3 + i % 90 end
  T.raises(function() model:forward(long) end, "exceed gpt2's learned position table", true)
  local sixty = { unpack(long, 1, 60) }
  T.eq(model:forward(sixty):size(1), 60)
  T.raises(function() model:generate(sixty, { max_new_tokens = 10, min_new_tokens = 10 }) end,
    "max_position_embeddings = 64", true)
  -- Exactly up to the last position is fine.
  T.eq(#model:generate(sixty, { max_new_tokens = 4, min_new_tokens = 4 }).ids, 4)
end)

T.test("gpt_neox: rotary positions go past max_position_embeddings", function()
  local model = seer.model.load(dir .. "/gpt_neox", { tokenizer = false })
  local long = {}
  for i = 1, 70 do long[i] = 3 + i % 90 end
  T.eq(model:forward(long):size(1), 70)
end)

T.test("gpt2: a checkpoint without the transformer. prefix and with lm_head.weight stored", function()
  local weights = tensor.load(dir .. "/gpt2/model.safetensors")
  local renamed = {}
  for k, v in pairs(weights) do renamed[(k:gsub("^transformer%.", ""))] = v end
  renamed["lm_head.weight"] = weights["transformer.wte.weight"]
  local tmp = T.tmpdir()
  copy_config(dir .. "/gpt2", tmp)
  tensor.save(tmp .. "/model.safetensors", renamed, { format = "pt" })
  local golden = tensor.load(dir .. "/gpt2/golden.safetensors")
  local model = seer.model.load(tmp, { tokenizer = false })
  local d = max_diff(model:forward(golden.tokens:totable()), golden.logits)
  T.ok(d <= 1e-4, "logits differ by " .. d)
end)
