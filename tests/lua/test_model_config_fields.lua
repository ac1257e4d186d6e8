-- Nothing in a checkpoint's config.json is silently ignored: every attribute of transformers'
-- config class for each supported model_type (tests/parity/config_fields.json, written by
-- tests/parity/config_fields.py from the installed transformers) is used by seer, known to be
-- inert in an eval-mode forward pass, or refused; every refused field with a value seer does not
-- implement fails the load naming the field; a field seer does not know gets a note on stderr.
local T = require "testing"
local json = seer.json

local here = seer.script_dir()
local dir = here .. "/../parity/models"
-- SEER_CONFIG_FIELDS points at a list made live (make config-fields)
local golden = json.decode(seer.read_file(os.getenv("SEER_CONFIG_FIELDS") or (here .. "/../parity/config_fields.json")))

-- a parity model of each model_type, to load with an edited config.json
local parity_model = {
  llama = "llama", mistral = "mistral", qwen2 = "qwen2", qwen3 = "qwen3", gemma = "gemma", gemma2 = "gemma2",
  gemma3_text = "gemma3", gpt2 = "gpt2", gpt_neox = "gpt_neox", gemma3 = "gemma3_multimodal", granite = "granite", olmo2 = "olmo2", phi3 = "phi3",
}

local function variant(name, fn)
  local d = T.tmpdir()
  local cfg = json.decode(seer.read_file(dir .. "/" .. name .. "/config.json"))
  fn(cfg)
  seer.write_file(d .. "/config.json", json.encode(cfg))
  os.execute(("cp '%s/%s/model.safetensors' '%s/model.safetensors'"):format(dir, name, d)) -- a link out of the folder is refused
  return d
end

local types = {}
for mt in pairs(golden.model_types) do types[#types + 1] = mt end
table.sort(types)

T.test("config_fields.json covers every supported model_type", function()
  for mt in seer.model.supported():gmatch("[%w_]+") do
    T.ok(golden.model_types[mt] ~= nil, mt .. " is supported but tests/parity/config_fields.json lacks it (rerun config_fields.py)")
  end
  T.ok(golden.model_types.gemma3 ~= nil, "the Gemma 3 multimodal config is listed")
  T.eq(seer.model.config_fields("no_such_arch"), nil)
end)

for _, mt in ipairs(types) do
  T.test("every transformers config attribute is handled, inert or refused: " .. mt, function()
    local known = seer.model.config_fields(mt)
    T.ok(known, "seer has no field table for " .. mt)
    local missing = {}
    for attr in pairs(golden.model_types[mt]) do
      if not known[attr] then missing[#missing + 1] = attr end
    end
    table.sort(missing)
    T.eq(missing, {}, mt .. ": transformers " .. golden.transformers_version .. " attributes seer does not classify")
  end)

  T.test("every refused field with an unimplemented value fails the load naming it: " .. mt, function()
    local name = parity_model[mt]
    local n = 0
    for field, f in pairs(seer.model.config_fields(mt)) do
      if f.kind == "refused" then
        n = n + 1
        T.ok(f.ok and f.bad and f.why, field .. ": a refused field says what is accepted, a bad value and why")
        -- a multimodal config: the text model's fields are in text_config
        local function where(cfg) return cfg.text_config or cfg end
        local d = variant(name, function(cfg) where(cfg)[field] = json.decode(f.bad) end)
        local ok, err = pcall(seer.model.load, d, { tokenizer = false })
        T.ok(not ok, ("%s: %s = %s loaded; it must be refused"):format(mt, field, f.bad))
        T.ok(tostring(err):find('"' .. field .. '"', 1, true), ("%s: the error names %s: %s"):format(mt, field, tostring(err)))
        -- control: an accepted value (the first listed) loads
        local good = f.ok:match("^[^|]+")
        local d2 = variant(name, function(cfg) where(cfg)[field] = json.decode(good) end)
        local ok2, err2 = pcall(seer.model.load, d2, { tokenizer = false })
        T.ok(ok2, ("%s: %s = %s is accepted, got %s"):format(mt, field, good, tostring(err2)))
      end
    end
    T.ok(n >= 3, mt .. ": expected the shared refusals at least (is_encoder_decoder, add_cross_attention, quantization_config)")
  end)
end

T.test("llama: hidden_act other than SiLU is refused, naming the field", function()
  local d = variant("llama", function(cfg) cfg.hidden_act = "gelu" end)
  T.raises(function() seer.model.load(d, { tokenizer = false }) end, '"hidden_act": "gelu" is not supported', true)
end)

T.test("llama: mlp_bias true without the bias tensors names them", function()
  local d = variant("llama", function(cfg) cfg.mlp_bias = true end)
  T.raises(function() seer.model.load(d, { tokenizer = false }) end, "model.layers.0.mlp.gate_proj.bias", true)
end)

T.test("llama: mlp_bias false on a checkpoint with MLP biases would drop them; true uses them (parity)", function()
  -- the parity model llama_mlp_bias has the biases; with the flag off they are not read, and
  -- the logits move by more than 1 (what seer once did silently with the flag on)
  local tensor = require "seer.tensor"
  local g = tensor.load(dir .. "/llama_mlp_bias/golden.safetensors")
  local ids = g.tokens:totable()
  local with = seer.model.load(dir .. "/llama_mlp_bias", { tokenizer = false }):forward(ids)
  local d = variant("llama_mlp_bias", function(cfg) cfg.mlp_bias = false end)
  local without = seer.model.load(d, { tokenizer = false }):forward(ids)
  T.ok((with - g.logits):abs():max() <= 1e-4, "with the biases: parity")
  T.ok((without - g.logits):abs():max() > 0.1, "without them: far off, so the parity test would catch a dropped bias")
end)

T.test("gemma3 multimodal: a text_config that leaves out the Gemma3TextConfig defaults loads the same model", function()
  -- transformers 4 writes a nested config as its difference from the defaults, so the hub's
  -- gemma-3-*-it configs omit vocab_size, heads, head_dim...: seer fills transformers' defaults
  local defaults = golden.model_types.gemma3_text
  local tensor = require "seer.tensor"
  local g = tensor.load(dir .. "/gemma3_multimodal/golden.safetensors")
  local removed = 0
  local d = variant("gemma3_multimodal", function(cfg)
    for k, v in pairs(cfg.text_config) do
      if defaults[k] ~= nil and json.encode(defaults[k]) == json.encode(v) and k ~= "model_type" then
        cfg.text_config[k] = nil
        removed = removed + 1
      end
    end
  end)
  T.ok(removed >= 5, "the parity config has fields at their default to leave out, got " .. removed)
  local logits = seer.model.load(d, { tokenizer = false }):forward(g.tokens:totable())
  T.ok((logits - g.logits):abs():max() <= 1e-4, "parity after leaving out the defaults")
  -- and a real hub config's shape: only the fields that differ, vocab_size included
  local d2 = variant("gemma3_multimodal", function(cfg)
    cfg.text_config = { hidden_size = 48, intermediate_size = 100, num_hidden_layers = 3, model_type = "gemma3_text" }
  end)
  T.raises(function() seer.model.load(d2, { tokenizer = false }) end, "has shape [97, 48], config.json implies [262208, 48]", true)
end)

T.test("gemma3 multimodal: a checkpoint without the language model is refused with both layouts named", function()
  local d = T.tmpdir()
  seer.write_file(d .. "/config.json", seer.read_file(dir .. "/gemma3_multimodal/config.json"))
  os.execute(("cp '%s/llama/model.safetensors' '%s/model.safetensors'"):format(dir, d))
  T.raises(function() seer.model.load(d, { tokenizer = false }) end,
    "neither model.language_model.embed_tokens.weight nor language_model.model.embed_tokens.weight", true)
end)

T.test("a config field seer does not know is named on stderr, not dropped in silence", function()
  local d = variant("llama", function(cfg)
    cfg.some_new_knob = 3
    cfg.another_one = true
  end)
  local p = io.popen(("'%s' -e \"seer.model.load('%s', {tokenizer = false}) print('loaded')\" 2>&1"):format(arg[-1], d))
  local out = p:read("*a")
  p:close()
  T.ok(out:find("loaded", 1, true), out)
  T.ok(out:find("2 fields seer does not know, ignored: ", 1, true), out)
  T.ok(out:find("some_new_knob", 1, true) and out:find("another_one", 1, true), out)
  -- control: the unedited model loads without a note
  p = io.popen(("'%s' -e \"seer.model.load('%s/llama', {tokenizer = false}) print('loaded')\" 2>&1"):format(arg[-1], dir))
  out = p:read("*a")
  p:close()
  T.eq(out, "loaded\n")
end)
