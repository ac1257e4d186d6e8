-- bf16 weights in the AMX tile layout (engine/model/model.c, pack_for_amx): on a CPU that runs
-- bf16 on AMX, a model read into memory has its layers' matrices and LM head rewritten in place
-- into tiles at load; a mapped model keeps them as rows. Both must compute the same bits: every
-- check below loads one checkpoint both ways and compares logits bit for bit (prefill at
-- lengths on both sides of the kernels' thresholds, decode, a batch, both precisions), with a
-- tied LM head (the embeddings are never packed), Gemma's layers, with fused q/k/v and gate/up rows (each view
-- packed in its own bytes, or left as rows when it is not 32-row aligned), and with a LoRA
-- adapter merged into packed weights and applied unmerged. Where the CPU has no AMX nothing is
-- packed and the checks compare rows with rows (still run: the count must be 0 there).
local T = require "testing"
local check = require "batch_check"
local tensor = seer.tensor

local amx = require("seer.core.model").fast_kind() == "AMX"

local function join(t) return table.concat(t, ",") end

local function seq(n, k)
  local s = {}
  for i = 1, n do s[i] = (i * 7 + k * 13) % 93 + 3 end
  return s
end

-- A bf16 checkpoint made here: model_type, the config's extra fields, and the tensors, with
-- H = 64, I = 128, 2 layers, vocab 96; `kv` rows of k and v (32 or 16).
local function checkpoint(opts)
  local d = T.tmpdir()
  local H, I, L, V, kv = 64, 128, 2, 96, opts.kv or 32
  local cfg = {
    architectures = { opts.arch or "LlamaForCausalLM" }, model_type = opts.model_type or "llama", hidden_size = H,
    intermediate_size = I, num_hidden_layers = L, num_attention_heads = 4, num_key_value_heads = math.floor(kv / 16),
    head_dim = 16, vocab_size = V, max_position_embeddings = 512, rms_norm_eps = 1e-5, rope_theta = 10000.0,
    tie_word_embeddings = opts.tied or false, bos_token_id = 1, eos_token_id = 2, torch_dtype = "bfloat16",
    hidden_act = "silu" }
  if opts.gemma then
    cfg.hidden_activation, cfg.hidden_act, cfg.tie_word_embeddings = "gelu_pytorch_tanh", "gelu_pytorch_tanh", true
  end
  seer.write_file(d .. "/config.json", seer.json.encode(cfg))
  tensor.manual_seed(opts.seed or 5)
  local w = {}
  local function mat(r, c) return (tensor.randn(r, c) * 0.2):to("bf16") end
  local function norm(n) return (tensor.randn(n) * 0.1 + 1):to("bf16") end
  w["model.embed_tokens.weight"] = mat(V, H)
  for l = 0, L - 1 do
    local p = "model.layers." .. l .. "."
    w[p .. "input_layernorm.weight"] = norm(H)
    w[p .. "post_attention_layernorm.weight"] = norm(H)
    w[p .. "self_attn.o_proj.weight"] = mat(H, H)
    w[p .. "mlp.down_proj.weight"] = mat(H, I)
    if opts.fused then
      w[p .. "self_attn.qkv_proj.weight"] = mat(H + 2 * kv, H)
      w[p .. "mlp.gate_up_proj.weight"] = mat(2 * I, H)
    else
      w[p .. "self_attn.q_proj.weight"] = mat(H, H)
      w[p .. "self_attn.k_proj.weight"] = mat(kv, H)
      w[p .. "self_attn.v_proj.weight"] = mat(kv, H)
      w[p .. "mlp.gate_proj.weight"] = mat(I, H)
      w[p .. "mlp.up_proj.weight"] = mat(I, H)
    end
  end
  w["model.norm.weight"] = norm(H)
  if not opts.tied then w["lm_head.weight"] = mat(V, H) end
  tensor.save(d .. "/model.safetensors", w, { format = "pt" })
  return d
end

-- The same checkpoint in memory (packed where AMX runs bf16) and mapped (rows), both precisions:
-- logits of prompts of several lengths, a greedy generation and a batch, bit for bit.
local function same_both_ways(dir, want_packed, label)
  for _, precision in ipairs({ "exact", "fast" }) do
    local mem = check.load_uncached(dir, { tokenizer = false, weights = "memory", precision = precision })
    local map = check.load_uncached(dir, { tokenizer = false, weights = "mapped", precision = precision })
    T.eq(mem.config.amx_packed_matrices, amx and want_packed or 0, label .. ": matrices packed in memory")
    T.eq(map.config.amx_packed_matrices, 0, label .. ": a mapped model is never packed")
    for _, n in ipairs({ 1, 2, 16, 17, 32, 33, 100, 170, 300 }) do
      local a, b = mem:forward(seq(n, n)), map:forward(seq(n, n))
      T.eq((a - b):abs():max(), 0, ("%s, %s, %d tokens: memory and mapped logits"):format(label, precision, n))
    end
    local ga = mem:generate(seq(5, 1), { max_new_tokens = 12, min_new_tokens = 12 })
    local gb = map:generate(seq(5, 1), { max_new_tokens = 12, min_new_tokens = 12 })
    T.eq(join(ga.ids), join(gb.ids), label .. ", " .. precision .. ": a generation")
    local prompts = { seq(3, 2), seq(40, 3), seq(9, 4) }
    local ba = mem:generate_batch(prompts, { max_new_tokens = 6 })
    local bb = map:generate_batch(prompts, { max_new_tokens = 6 })
    for i = 1, #prompts do T.eq(join(ba[i].ids), join(bb[i].ids), label .. ", " .. precision .. ": batch prompt " .. i) end
  end
end

T.test("separate matrices: every layer matrix and the LM head packed, the same bits as rows", function()
  same_both_ways(checkpoint({}), 2 * 7 + 1, "llama")
end)

T.test("Gemma's layers (its own layer structs) packed; its tied LM head stays rows", function()
  same_both_ways(checkpoint({ gemma = true, tied = true, model_type = "gemma", arch = "GemmaForCausalLM" }), 2 * 7,
    "gemma")
end)

T.test("a tied LM head is the embeddings and stays rows; the layers are packed", function()
  same_both_ways(checkpoint({ tied = true }), 2 * 7, "tied")
end)

T.test("fused q/k/v and gate/up rows (phi3): each view packed in its own bytes", function()
  same_both_ways(checkpoint({ fused = true, model_type = "phi3", arch = "Phi3ForCausalLM" }), 2 * 7 + 1, "phi3 fused")
end)

T.test("fused rows whose k and v views are 16 rows: q packed, k and v left as rows, a call of mixed layouts", function()
  same_both_ways(checkpoint({ fused = true, kv = 16, model_type = "phi3", arch = "Phi3ForCausalLM" }), 2 * 5 + 1,
    "phi3 kv 16")
end)

-- A PEFT adapter on q_proj and down_proj written here (r = 4).
local function adapter(base)
  local d = T.tmpdir() .. "/adapter"
  os.execute("mkdir -p '" .. d .. "'")
  seer.write_file(d .. "/adapter_config.json", seer.json.encode({
    peft_type = "LORA", r = 4, lora_alpha = 8, target_modules = { "q_proj", "down_proj" },
    base_model_name_or_path = base, fan_in_fan_out = false, bias = "none" }))
  tensor.manual_seed(9)
  local t = {}
  for l = 0, 1 do
    local p = "base_model.model.model.layers." .. l .. "."
    t[p .. "self_attn.q_proj.lora_A.weight"] = tensor.randn(4, 64) * 0.1
    t[p .. "self_attn.q_proj.lora_B.weight"] = tensor.randn(64, 4) * 0.1
    t[p .. "mlp.down_proj.lora_A.weight"] = tensor.randn(4, 128) * 0.1
    t[p .. "mlp.down_proj.lora_B.weight"] = tensor.randn(64, 4) * 0.1
  end
  tensor.save(d .. "/adapter_model.safetensors", t)
  return d
end

T.test("a LoRA adapter merged into packed weights, and unmerged over them: the same bits as over rows", function()
  local dir = checkpoint({ seed = 7 })
  local ad = adapter(dir)
  for _, merge in ipairs({ true, false }) do
    local mem = check.load_uncached(dir, { tokenizer = false, weights = "memory" })
    local map = check.load_uncached(dir, { tokenizer = false, weights = "mapped" })
    local before = mem:forward(seq(20, 1))
    mem:load_adapter(ad, { merge = merge })
    map:load_adapter(ad, { merge = merge })
    for _, n in ipairs({ 1, 20, 150 }) do
      local a, b = mem:forward(seq(n, 1)), map:forward(seq(n, 1))
      T.eq((a - b):abs():max(), 0, ("merge %s, %d tokens: memory and mapped logits"):format(tostring(merge), n))
    end
    T.ok((mem:forward(seq(20, 1)) - before):abs():max() > 1e-3, "the adapter changed the logits")
    if merge then
      -- the merged matrices are f32 rows now: q and down of both layers
      T.eq(mem.config.amx_packed_matrices, amx and 15 or 0, "the count is what the load packed")
    end
  end
end)
