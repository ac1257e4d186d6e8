-- LoRA adapters (PEFT format): parity with peft + transformers (eager, fp32) on the tiny parity
-- models, unmerged (enabled, switched off and on again) and merged, within 1e-4 max abs; a
-- generation with the adapter; stacking; bf16; and the errors for bad adapters. The adapters and
-- goldens are in tests/parity/lora (made by tests/parity/lora_goldens.py); SEER_LORA_DIR and
-- SEER_PARITY_DIR point elsewhere (make parity regenerates them live).
local T = require "testing"
local tensor = require "seer.tensor"

local here = seer.script_dir()
local lora_dir = os.getenv("SEER_LORA_DIR") or (here .. "/../parity/lora")
local models_dir = os.getenv("SEER_PARITY_DIR") or (here .. "/../parity/models")
local TOL = 1e-4

local cases = {}
local p = io.popen("ls '" .. lora_dir .. "' 2>/dev/null")
for n in p:lines() do
  local f = io.open(lora_dir .. "/" .. n .. "/adapter_config.json")
  if f then
    f:close()
    cases[#cases + 1] = n
  end
end
p:close()

local function max_abs_diff(a, b) return (a - b):abs():max() end

local function case_info(name)
  local dir = lora_dir .. "/" .. name
  local cfg = seer.json.decode(seer.read_file(dir .. "/adapter_config.json"))
  local golden = tensor.load(dir .. "/golden.safetensors")
  return dir, models_dir .. "/" .. cfg.base_model_name_or_path, golden, cfg
end

local function load(path) return seer.model.load(path, { tokenizer = false }) end

local function sh(cmd) assert(os.execute(cmd) == 0, "command failed: " .. cmd) end

-- A copy of an adapter directory in a fresh temporary directory.
local function copy_adapter(src)
  local d = T.tmpdir() .. "/adapter"
  sh(("mkdir '%s' && cp '%s/adapter_config.json' '%s/adapter_model.safetensors' '%s/'"):format(d, src, src, d))
  return d
end

local function edit_config(dir, fn)
  local cfg = seer.json.decode(seer.read_file(dir .. "/adapter_config.json"))
  fn(cfg)
  seer.write_file(dir .. "/adapter_config.json", seer.json.encode(cfg))
end

-- Rewrites adapter_model.safetensors: fn gets a {name = tensor} table (copies) to change.
local function edit_tensors(dir, fn)
  local t = tensor.load(dir .. "/adapter_model.safetensors", { copy = true })
  fn(t)
  tensor.save(dir .. "/adapter_model.safetensors", t)
end

T.test("lora: goldens are present", function()
  T.ok(#cases >= 3, "expected the LoRA cases in " .. lora_dir .. ", found " .. #cases)
end)

for _, name in ipairs(cases) do
  T.test("lora parity: " .. name .. " unmerged, switched off and on", function()
    local dir, base, g = case_info(name)
    local ids = g.tokens:totable()
    local m = load(base)
    local base_logits = m:forward(ids)
    local d0 = max_abs_diff(base_logits, g["logits.disabled"])
    T.ok(d0 <= TOL, ("%s: base model vs peft's disabled adapter: %g"):format(name, d0))
    m:load_adapter(dir)
    T.eq(m.adapter, { path = dir, merged = false, enabled = true })
    local d = max_abs_diff(m:forward(ids), g["logits.enabled"])
    T.ok(d <= TOL, ("%s: adapter enabled differs from peft by %g"):format(name, d))
    -- the GEMM paths (OpenBLAS, LoRA's own included), which the 20 tokens take from 16 tokens on
    -- some CPUs and only from 96 or 128 on others (engine/model/kernels.c): forced here
    local core = require "seer.core.model"
    local prev = core.gemm_min_tokens(16)
    local gok, gd = pcall(function() return max_abs_diff(m:forward(ids), g["logits.enabled"]) end)
    core.gemm_min_tokens(prev)
    if not gok then error(gd, 0) end
    T.ok(gd <= TOL, ("%s: adapter enabled, GEMM path, differs from peft by %g"):format(name, gd))
    -- 15 tokens: below every GEMM threshold, so the per-token kernels run
    local short = {}
    for i = 1, 15 do short[i] = ids[i] end
    d = max_abs_diff(m:forward(short), g["logits.enabled"]:narrow(1, 1, 15))
    T.ok(d <= TOL, ("%s: adapter enabled, per-token path, differs from peft by %g"):format(name, d))
    m:set_adapter(false)
    local off = m:forward(ids)
    T.eq(max_abs_diff(off, base_logits), 0, name .. ": set_adapter(false) must be the base model exactly")
    d = max_abs_diff(off, g["logits.disabled"])
    T.ok(d <= TOL, ("%s: adapter disabled differs from peft by %g"):format(name, d))
    m:set_adapter(true)
    d = max_abs_diff(m:forward(ids), g["logits.enabled"])
    T.ok(d <= TOL, ("%s: adapter enabled again differs from peft by %g"):format(name, d))
    T.ok(max_abs_diff(g["logits.enabled"], g["logits.disabled"]) > 1, name .. ": the adapter should matter")
  end)

  T.test("lora parity: " .. name .. " merged", function()
    local dir, base, g = case_info(name)
    local ids = g.tokens:totable()
    local m = load(base)
    m:load_adapter(dir, { merge = true })
    T.eq(m.adapter, { path = dir, merged = true, enabled = true })
    local logits = m:forward(ids)
    local d = max_abs_diff(logits, g["logits.merged"])
    T.ok(d <= TOL, ("%s: merged differs from peft's merge_and_unload by %g"):format(name, d))
    d = max_abs_diff(logits, g["logits.enabled"])
    T.ok(d <= TOL, ("%s: merged differs from peft's unmerged adapter by %g"):format(name, d))
    T.raises(function() m:set_adapter(false) end, "was merged into the weights and cannot be switched", true)
  end)
end

T.test("lora: decoding with the KV cache matches the full forward (one-token path)", function()
  local dir, base, g = case_info("llama_all")
  local m = load(base)
  m:load_adapter(dir)
  local prompt = {}
  for i = 1, 5 do prompt[i] = g.tokens[i] end
  local opts = { max_new_tokens = 12, min_new_tokens = 12 } -- eos (2) is masked until 12 tokens
  local out = m:generate(prompt, opts)
  T.eq(#out.ids, 12)
  local seq = {}
  for _, id in ipairs(prompt) do seq[#seq + 1] = id end
  for _, id in ipairs(out.ids) do seq[#seq + 1] = id end
  local logits = m:forward(seq)
  for k, id in ipairs(out.ids) do
    local row = logits:select(1, #prompt + k - 1):clone()
    row[3] = -math.huge -- eos (id 2) is masked during generation
    T.eq(row:argmax(), id, "greedy token " .. k .. " with the adapter")
  end
  m:set_adapter(false)
  local plain = m:generate(prompt, opts)
  T.ne(plain.ids, out.ids, "the adapter should change the greedy continuation")
  m:set_adapter(true)
  T.eq(m:generate(prompt, opts).ids, out.ids, "switched back on")
end)

T.test("lora: an adapter loads on top of a merged one; merging twice stacks", function()
  local dir, base, g = case_info("llama_all")
  local ids = g.tokens:totable()
  local m = load(base)
  m:load_adapter(dir, { merge = true })
  m:load_adapter(dir) -- unmerged, on top of the merged weights
  local twice = m:forward(ids)
  T.ok(max_abs_diff(twice, g["logits.merged"]) > 1, "the second adapter should matter")
  m:set_adapter(false)
  local d = max_abs_diff(m:forward(ids), g["logits.merged"])
  T.ok(d <= TOL, ("merged + switched-off adapter vs peft's merge: %g"):format(d))
  local m2 = load(base)
  m2:load_adapter(dir, { merge = true })
  m2:load_adapter(dir, { merge = true })
  d = max_abs_diff(m2:forward(ids), twice)
  T.ok(d <= TOL, ("merged twice vs merged + unmerged: %g"):format(d))
  T.raises(function() m:load_adapter(dir) end, "an unmerged adapter (" .. dir .. ") is already loaded", true)
  T.raises(function() m:load_adapter(dir, { merge = true }) end, "is already loaded", true)
end)

T.test("lora: bf16 base weights and a bf16 adapter, merged = unmerged", function()
  local dir, base = case_info("llama_all")
  local tmp = T.tmpdir()
  local mdir = tmp .. "/model"
  sh(("mkdir '%s' && cp '%s/config.json' '%s/'"):format(mdir, base, mdir))
  local w = tensor.load(base .. "/model.safetensors")
  local wb = {}
  for k, t in pairs(w) do wb[k] = t:to("bf16") end
  tensor.save(mdir .. "/model.safetensors", wb)
  local adir = copy_adapter(dir)
  edit_tensors(adir, function(t) for k, v in pairs(t) do t[k] = v:to("bf16") end end)
  local ids = {}
  for i = 1, 20 do ids[i] = (i * 7) % 90 + 3 end
  local a, b = load(mdir), load(mdir)
  T.eq(a.config.dtype, "bf16")
  a:load_adapter(adir)
  b:load_adapter(adir, { merge = true })
  local la, lb = a:forward(ids), b:forward(ids)
  local d = max_abs_diff(la, lb)
  T.ok(d <= TOL, ("bf16: unmerged vs merged (f32 copy of bf16 W + delta): %g"):format(d))
  a:set_adapter(false)
  T.ok(max_abs_diff(a:forward(ids), la) > 1, "bf16: the adapter should matter")
end)

T.test("lora: a failed load leaves the model unchanged", function()
  local dir, base, g = case_info("llama_all")
  local ids = g.tokens:totable()
  local m = load(base)
  local before = m:forward(ids)
  local bad = copy_adapter(dir)
  -- Valid tensors first in file order, then a bad one: nothing may be attached.
  edit_tensors(bad, function(t)
    t["base_model.model.model.layers.2.mlp.up_proj.lora_A.weight"] = tensor.zeros(4, 47)
  end)
  T.raises(function() m:load_adapter(bad) end, "has shape [4, 47], expected [4, 48]", true)
  T.raises(function() m:load_adapter(bad, { merge = true }) end, "has shape [4, 47], expected [4, 48]", true)
  T.eq(max_abs_diff(m:forward(ids), before), 0)
  T.eq(m.adapter, nil)
  T.raises(function() m:set_adapter(true) end, "set_adapter: no adapter is loaded", true)
  m:load_adapter(dir) -- and a good one still loads afterwards
  T.ok(max_abs_diff(m:forward(ids), g["logits.enabled"]) <= TOL)
end)

T.test("lora: errors name the directory, file, tensor or field", function()
  local dir, base = case_info("llama_all")
  local m = load(base)
  local tmp = T.tmpdir()

  T.raises(function() m:load_adapter(tmp .. "/nope") end, "load_adapter: cannot open adapter directory " .. tmp .. "/nope", true)
  T.raises(function() m:load_adapter(dir .. "/adapter_config.json") end, "is not a directory", true)
  T.raises(function() m:load_adapter(tmp) end, tmp .. " has no adapter_config.json", true)
  T.raises(function() m:load_adapter(123) end, "expected an adapter directory", true)

  local d = copy_adapter(dir)
  sh("rm '" .. d .. "/adapter_model.safetensors'")
  T.raises(function() m:load_adapter(d) end, "has no adapter_model.safetensors", true)
  sh("touch '" .. d .. "/adapter_model.bin'")
  T.raises(function() m:load_adapter(d) end, "PyTorch pickles are not read", true)

  d = copy_adapter(dir)
  seer.write_file(d .. "/adapter_config.json", '{"peft_type": "LORA", "r": 4,')
  T.raises(function() m:load_adapter(d) end, d .. "/adapter_config.json: invalid JSON", true)

  d = copy_adapter(dir)
  seer.write_file(d .. "/adapter_model.safetensors", "not a safetensors file")
  T.raises(function() m:load_adapter(d) end, "load_adapter: " .. d .. "/adapter_model.safetensors", true)

  local function with_config(fn, pattern)
    local a = copy_adapter(dir)
    edit_config(a, fn)
    return T.raises(function() m:load_adapter(a) end, pattern, true)
  end
  with_config(function(c) c.peft_type = "IA3" end, 'peft_type "IA3" is not supported (supported: LORA)')
  with_config(function(c) c.peft_type = nil end, 'missing "peft_type"')
  with_config(function(c) c.r = 0 end, '"r" must be an integer')
  with_config(function(c) c.use_dora = true end, '"use_dora" is set: DoRA')
  with_config(function(c) c.fan_in_fan_out = true end, '"fan_in_fan_out" is set')
  with_config(function(c) c.bias = "all" end, '"bias" is all; only "none" is supported')
  with_config(function(c) c.modules_to_save = { "lm_head" } end, '"modules_to_save" is set')
  with_config(function(c) c.rank_pattern = { q_proj = 8 } end, '"rank_pattern" is set')
  with_config(function(c) c.alpha_pattern = { q_proj = 8 } end, '"alpha_pattern" is set')
  local msg = with_config(function(c) c.target_modules = { "q_proj", "embed_tokens" } end,
    'target module "embed_tokens" is not supported (supported: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)')
  T.contains(msg, "adapter_config.json")
  -- r in the config does not match the tensors
  with_config(function(c) c.r = 5 end, 'lora_A.weight" has shape [4, 48], expected [5, 48] (r = 5 from adapter_config.json')

  local function with_tensors(fn, pattern)
    local a = copy_adapter(dir)
    edit_tensors(a, fn)
    return T.raises(function() m:load_adapter(a) end, pattern, true)
  end
  local A0 = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
  local B0 = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
  msg = with_tensors(function(t) t[B0] = tensor.zeros(47, 4) end,
    'tensor "' .. B0 .. '" has shape [47, 4], expected [48, 4]')
  T.contains(msg, "adapter_model.safetensors")
  with_tensors(function(t) t[A0] = tensor.zeros(4, 48, 1) end, 'has shape [4, 48, 1], expected [4, 48]')
  with_tensors(function(t) t[B0] = nil end, 'tensor "' .. A0 .. '" has no matching ' .. B0)
  with_tensors(function(t)
    t["base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight"] = t[A0]
    t["base_model.model.model.layers.7.self_attn.q_proj.lora_B.weight"] = t[B0]
  end, 'is for layer 7, but the model has 3 layers')
  with_tensors(function(t)
    t["base_model.model.lm_head.lora_A.weight"] = tensor.zeros(4, 48)
    t["base_model.model.lm_head.lora_B.weight"] = tensor.zeros(97, 4)
  end, 'tensor "base_model.model.lm_head.lora_')
  with_tensors(function(t) t["base_model.model.model.embed_tokens.lora_embedding_A"] = tensor.zeros(4, 97) end,
    "embedding adapters (embed_tokens) are not supported")
  with_tensors(function(t) t["base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector"] = tensor.zeros(48) end,
    "DoRA magnitudes are not supported")
  with_tensors(function(t) t["base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight"] = tensor.zeros(4, 48) end,
    "this module is not supported")
  with_tensors(function(t) t["base_model.model.model.layers.0.mlp.q_proj.lora_A.weight"] = tensor.zeros(4, 48) end,
    "seer applies LoRA to q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj")
  with_tensors(function(t) t[A0] = t[A0]:to("i32") end, "has dtype I32; LoRA weights must be F32, BF16 or F16")
  with_tensors(function(t) for k in pairs(t) do t[k] = nil end t.x = tensor.zeros(1) end, "not a LoRA tensor seer knows")

  -- the model is untouched by all of these
  T.eq(m.adapter, nil)
  T.raises(function() m:set_adapter(true) end, "no adapter is loaded", true)
  T.raises(function() m:set_adapter("yes") end, "expected true or false", true)
end)

T.test("lora: architectures without LoRA support say which have it", function()
  local dir = case_info("llama_all")
  local m = load(models_dir .. "/gpt2")
  T.raises(function() m:load_adapter(dir) end,
    "LoRA adapters are supported on llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text models; this model is gpt2", true)
end)
