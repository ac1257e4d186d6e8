-- seer.model.load's precision option: "exact" (the default: bf16 weights meet f32 activations
-- without rounding them; the AMX prefill kernel splits them into three exact bf16 pieces) and
-- "fast" (activations rounded to bf16, as torch's bf16 matmul: AMX prefill, and every step with
-- AVX512_BF16, where test_model_batch.lua checks that batching changes no bit). On a CPU with
-- neither both compute the same; the parity bar of the default on bf16 checkpoints is
-- test_parity.lua's (the *_bf16 models). docs/model.md has the measured error of "fast".
local T = require "testing"
local tensor = require "seer.tensor"

local dir = seer.script_dir() .. "/../parity/models"

T.test("precision: exact by default, fast on request, anything else refused", function()
  local m = seer.model.load(dir .. "/llama_bf16", { tokenizer = false })
  T.eq(m.precision, "exact")
  local f = seer.model.load(dir .. "/llama_bf16", { tokenizer = false, precision = "fast" })
  T.eq(f.precision, "fast")
  T.raises(function() seer.model.load(dir .. "/llama_bf16", { tokenizer = false, precision = "half" }) end,
    "precision 'half' is not known; use \"exact\" (the default) or \"fast\"", true)
  T.raises(function() seer.model.load(dir .. "/llama_bf16", { tokenizer = false, precision = 1 }) end, "precision", true)
end)

T.test("precision: both modes stay near the fp32 golden; exact within the parity bar", function()
  for _, name in ipairs({ "llama_bf16", "qwen2_bf16", "gemma3_bf16" }) do
    local g = tensor.load(dir .. "/" .. name .. "/golden.safetensors")
    local ids = g.tokens:totable()
    local exact = seer.model.load(dir .. "/" .. name, { tokenizer = false }):forward(ids)
    local fast = seer.model.load(dir .. "/" .. name, { tokenizer = false, precision = "fast" }):forward(ids)
    T.ok((exact - g.logits):abs():max() <= 1e-4, name .. ": exact within 1e-4")
    -- fast rounds activations to bf16 (measured 2.4e-2 .. 8.6e-2 on these models on AMX, 3.4e-2 ..
    -- 7.8e-2 with AVX512_BF16)
    T.ok((fast - g.logits):abs():max() <= 0.25, name .. ": fast near the golden")
  end
end)

T.test("precision: fast keeps a bf16 KV cache where it changes the linear layers, f32 elsewhere", function()
  local exact = seer.model.load(dir .. "/llama_bf16", { tokenizer = false })
  local fast = seer.model.load(dir .. "/llama_bf16", { tokenizer = false, precision = "fast" })
  local fast32 = seer.model.load(dir .. "/llama", { tokenizer = false, precision = "fast" })
  T.eq(exact.config.kv_cache_dtype, "f32")
  T.eq(fast32.config.kv_cache_dtype, "f32", "f32 weights: fast changes nothing, the cache included")
  T.eq(fast.config.kv_cache_dtype, require("seer.core.model").fast_kind() and "bf16" or "f32")
  -- the hooked attention path (a pattern captured: scores and weighted sums one head at a time)
  -- reads the bf16 cache with the bits the kernel gets from it: capturing changes no logit
  local g = tensor.load(dir .. "/llama_bf16/golden.safetensors")
  local ids = g.tokens:totable()
  while #ids > 12 do ids[#ids] = nil end -- the per-token kernel (under 16 tokens)
  local plain = fast:forward(ids)
  local hooked, cache = fast:run_with_cache(ids, { names = "attn.hook_pattern" })
  T.ok(next(cache) ~= nil, "patterns captured")
  T.eq((plain - hooked):abs():max(), 0)
  -- and generation over the cache stays near exact's (the cache rounds keys and values once)
  local a = exact:forward(ids)
  T.ok((plain - a):abs():max() <= 0.25, "fast near exact")
end)

T.test("precision: a fast model's forward does not leave its mode set for the next model's", function()
  -- seer_k_fast_bf16 is set for the duration of a forward pass and restored after it
  local fast = seer.model.load(dir .. "/llama_bf16", { tokenizer = false, precision = "fast" })
  local exact = seer.model.load(dir .. "/llama_bf16", { tokenizer = false })
  local g = tensor.load(dir .. "/llama_bf16/golden.safetensors")
  local ids = g.tokens:totable()
  local before = exact:forward(ids)
  fast:forward(ids)
  local after = exact:forward(ids)
  T.eq((before - after):abs():max(), 0)
end)

T.test("precision: fast where it changes nothing says so once on stderr (f32 weights; a CPU without AMX or AVX512_BF16)", function()
  local seer_bin = require("seer.jupyter").seer_binary()
  local script = ([[local d = %q
seer.model.load(d .. "/llama", { tokenizer = false, precision = "fast" })
seer.model.load(d .. "/qwen2", { tokenizer = false, precision = "fast" })
seer.model.load(d .. "/llama_bf16", { tokenizer = false })
io.stderr:write("loaded\n")]]):format(dir)
  local f = os.tmpname()
  local h = io.open(f, "w")
  h:write(script)
  h:close()
  local p = io.popen(("'%s' %s 2>&1"):format(seer_bin, f))
  local out = p:read("*a")
  p:close()
  os.remove(f)
  local note = 'seer: precision = "fast" changes nothing here: its weights are f32 (fast rounds activations to meet bf16 weights); the model computes what "exact" does\n'
  T.eq(out, note .. "loaded\n", "one note for two f32 models, none for the default precision")
  -- on bf16 weights the note depends on the CPU: none where fast has kernels
  local p2 = io.popen(("'%s' -e %q 2>&1"):format(seer_bin, ("seer.model.load(%q, { tokenizer = false, precision = 'fast' })"):format(dir .. "/llama_bf16")))
  local out2 = p2:read("*a")
  p2:close()
  local kind, why = require("seer.core.model").fast_kind()
  if kind then
    T.eq(out2, "", "fast has kernels here (" .. kind .. "): no note")
  else
    -- the reason is the CPU's: no bf16 unit at all, or VDPBF16PS at half the FMA rate (Intel without AMX)
    local has_bf16 = (io.open("/proc/cpuinfo") and io.open("/proc/cpuinfo"):read("*a") or ""):find("avx512_bf16", 1, true)
    local expect = has_bf16 and "this CPU's VDPBF16PS makes half the products a cycle its f32 FMAs do (an Intel CPU without AMX; SEER_FAST_DPBF16=1 runs it anyway)"
                   or "this CPU has neither AMX nor AVX512_BF16"
    T.eq(why, expect)
    T.eq(out2, 'seer: precision = "fast" changes nothing here: ' .. expect .. '; the model computes what "exact" does\n')
  end
end)
