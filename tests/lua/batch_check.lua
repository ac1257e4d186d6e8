-- Shared by the batched-generation tests (test_model_batch.lua on the CPU, test_cuda_batch.lua on
-- a GPU): each sequence of a batch generated with per-sequence hooks against the same sequence
-- generated alone with the same hooks, and the unhooked ones against a batch without hooks.
local T = require "testing"
local tensor = require "seer.tensor"

local M = {}

local function join(t) return table.concat(t, ",") end

---@param m table the model
---@param name string for the messages
---@param seqs integer[][] the prompts
---@param outs table generate_batch's results with the hooks
---@param plain table generate_batch's results without them
---@param hooks table<integer, table> the hook list of each hooked sequence
---@param opts fun(i: integer): table generate's options for sequence i alone
function M.against_alone(m, name, seqs, outs, plain, hooks, opts)
  local changed = 0
  for i, s in ipairs(seqs) do
    local alone
    if hooks[i] then
      alone = m:with_hooks(hooks[i], function() return m:generate(s, opts(i)) end)
    else
      alone = m:generate(s, opts(i))
    end
    T.eq(join(outs[i].ids), join(alone.ids), ("%s: sequence %d"):format(name, i))
    if join(outs[i].ids) ~= join(plain[i].ids) then changed = changed + 1 end
    if not hooks[i] then T.eq(join(outs[i].ids), join(plain[i].ids), name .. ": an unhooked sequence is untouched") end
  end
  T.ok(changed >= 2, name .. ": the interventions changed at least two continuations (else this test checks nothing)")
end

-- Tensors a and b (of the batch, and of the sequence alone) hold the same values, element for
-- element, bit for bit; msg names them.
function M.same_values(a, b, msg)
  T.ok(a ~= nil and b ~= nil, msg .. ": both present")
  local function flat(t, out)
    for _, v in ipairs(t) do
      if type(v) == "table" then flat(v, out) else out[#out + 1] = v end
    end
    return out
  end
  local fx, fy = flat(a:totable(), {}), flat(b:totable(), {})
  T.eq(#fx, #fy, msg .. ": sizes")
  local bad = 0
  for i = 1, #fx do if fx[i] ~= fy[i] then bad = bad + 1 end end
  T.eq(bad, 0, msg .. ": values differing from the sequence alone")
end

-- The parity models the sharing tests run on: every architecture, bf16 checkpoints, biases
M.SHARING_MODELS = { "llama", "llama_bf16", "mistral", "qwen2", "qwen3_bf16", "gemma", "gemma2", "gemma3", "gpt2", "gpt_neox",
  "olmo2", "granite", "phi3", "llama_tied_bias", "llama_mlp_bias" }

-- n deterministic token ids in [3, vocab): a stream per seed
function M.ids(vocab, n, seed)
  local out, x = {}, seed * 7919 + 17
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    out[i] = 3 + x % (vocab - 3)
  end
  return out
end

-- fn() with the linear layers' GEMM threshold at n (core.gemm_min_tokens; 0: this CPU's), put back
-- after, whatever fn does
function M.at_gemm_min(n, fn)
  local core = require "seer.core.model"
  local prev = core.gemm_min_tokens(n)
  local ok, err = pcall(fn)
  core.gemm_min_tokens(prev)
  if not ok then error(err, 0) end
end

-- A model without its prompt cache (Model:prompt_cache): the generations alone that the sharing
-- tests compare against would fill it, and a batch would take from it, so the counts of prompts
-- and positions taken would depend on the order of the checks.
function M.load_uncached(dir, opts)
  local m = seer.model.load(dir, opts)
  m:prompt_cache(0)
  return m
end

-- A bf16 llama (2 layers, or `layers`) made at test time with every width a multiple of 32 (the parity models' 48 and 100
-- never reach the bf16 units: AMX, or precision = "fast"'s kernel and bf16 KV cache); its directory.
function M.bf16_llama(layers)
  local d = T.tmpdir()
  local H, I, L, V = 64, 128, layers or 2, 96
  seer.write_file(d .. "/config.json", seer.json.encode({
    architectures = { "LlamaForCausalLM" }, model_type = "llama", hidden_size = H, intermediate_size = I,
    num_hidden_layers = L, num_attention_heads = 4, num_key_value_heads = 2, head_dim = 16, vocab_size = V,
    max_position_embeddings = 512, rms_norm_eps = 1e-5, rope_theta = 10000.0, tie_word_embeddings = false,
    bos_token_id = 1, eos_token_id = 2, torch_dtype = "bfloat16", hidden_act = "silu" }))
  tensor.manual_seed(11)
  local w = {}
  local function mat(name, r, c) w[name] = (tensor.randn(r, c) * 0.2):to("bf16") end
  local function norm(name, n) w[name] = (tensor.randn(n) * 0.1 + 1):to("bf16") end
  mat("model.embed_tokens.weight", V, H)
  for l = 0, L - 1 do
    local p = "model.layers." .. l .. "."
    norm(p .. "input_layernorm.weight", H)
    mat(p .. "self_attn.q_proj.weight", H, H)
    mat(p .. "self_attn.k_proj.weight", 32, H)
    mat(p .. "self_attn.v_proj.weight", 32, H)
    mat(p .. "self_attn.o_proj.weight", H, H)
    norm(p .. "post_attention_layernorm.weight", H)
    mat(p .. "mlp.gate_proj.weight", I, H)
    mat(p .. "mlp.up_proj.weight", I, H)
    mat(p .. "mlp.down_proj.weight", H, I)
  end
  norm("model.norm.weight", H)
  mat("lm_head.weight", V, H)
  tensor.save(d .. "/model.safetensors", w, { format = "pt" })
  return d
end

return M
