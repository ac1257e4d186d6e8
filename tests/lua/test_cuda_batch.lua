-- Batched generation on a GPU model, through the Lua API a researcher uses (model:generate_batch,
-- per-sequence hooks): each sequence gets the tokens it gets alone on the same model. On the GPU
-- a decode step of the batch is one pass over the weights (seer_gpu_forward_batch, docs/cuda.md
-- "Batches"), whose linear layers compute each row as the sequence alone does, so greedy tokens
-- agree exactly. Skips without a GPU; SEER_TEST_DEVICE=cpu runs the same checks on the CPU (how
-- the test itself is checked on machines without one). tests/unit/test_cuda_gpu.c holds the
-- logits to 1e-4 of the largest; this test holds the tokens.
local T = require "testing"
local I = require "seer.interventions"
local check = require "batch_check"
local tensor = seer.tensor

local pdir = seer.script_dir() .. "/../parity/models"
local device = os.getenv("SEER_TEST_DEVICE") or "cuda"

local function need_device()
  if device ~= "cuda" then return end
  local devs, why = seer.model.devices()
  if #devs == 0 then T.skip("no GPU (" .. tostring(why) .. ")") end
end

-- Prompts of different lengths (the first step runs them one at a time; every later step of the
-- sequences still running is one batched pass).
local function prompts(vocab, count)
  local out = {}
  for k = 1, count do
    local s = {}
    for i = 1, 2 + 3 * k do s[i] = (i * 7 + k * 13) % (vocab - 1) + 1 end
    out[k] = s
  end
  return out
end

for _, name in ipairs({ "llama", "gemma2", "qwen3" }) do
  T.test("generate_batch on " .. device .. " == generate alone, with per-sequence hooks: " .. name, function()
    need_device()
    local m = seer.model.load(pdir .. "/" .. name, { tokenizer = false, device = device })
    T.eq(m.device, device == "cuda" and "cuda:0" or "cpu")
    local d = m.config.hidden_size
    tensor.manual_seed(11)
    local v = tensor.randn(d) * 3
    local seqs = prompts(m.config.vocab_size, 10) -- past the GEMV's 8 tokens per pass
    local calls = 0
    local hooks = {
      [1] = { { "blocks.0.hook_resid_post", I.add(v, { strength = 2 }) } },
      [4] = { { "blocks.1.hook_mlp_out", function(act)
        calls = calls + 1
        return act * 1.5
      end } },
      [7] = { { "blocks.0.hook_resid_mid", I.add(v, { strength = -1 }) } },
    }
    local per = { [2] = { max_new_tokens = 3 } }
    for i, h in pairs(hooks) do per[i] = { hooks = h } end
    local outs = m:generate_batch(seqs, { max_new_tokens = 6, per_sequence = per })
    T.eq(calls, 6, name .. ": the Lua hook ran once per step of its own sequence")
    local plain = m:generate_batch(seqs, { max_new_tokens = 6, per_sequence = { [2] = { max_new_tokens = 3 } } })
    check.against_alone(m, name, seqs, outs, plain, hooks,
      function(i) return { max_new_tokens = i == 2 and 3 or 6 } end)
  end)
end
