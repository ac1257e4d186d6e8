-- Parity with Hugging Face transformers (eager attention, fp32) on random-weight tiny models
-- of every architecture: the residual stream after the embeddings and after every layer, and
-- the logits, within 1e-4 max abs. The models and goldens are in tests/parity/models (made by
-- tests/parity/generate.py); SEER_PARITY_DIR points elsewhere (make parity regenerates them
-- live). An architecture seer does not implement yet is reported as skipped. Each model runs
-- twice: at this CPU's thresholds for the linear layers' GEMM path (its 20 tokens take the
-- per-token kernels where the blocked kernel is faster, engine/model/kernels.c) and with that
-- threshold forced to 16 tokens (core.gemm_min_tokens), so OpenBLAS's path is checked as well.
local T = require "testing"
local tensor = require "seer.tensor"

local dir = os.getenv("SEER_PARITY_DIR") or (seer.script_dir() .. "/../parity/models")
local names = {}
local p = io.popen("ls '" .. dir .. "' 2>/dev/null")
for n in p:lines() do
  local f = io.open(dir .. "/" .. n .. "/config.json")
  if f then
    f:close()
    names[#names + 1] = n
  end
end
p:close()

local supported = {}
for n in seer.model.supported():gmatch("[%w_]+") do supported[n] = true end

local function max_abs_diff(a, b)
  return (a - b):abs():max()
end

T.test("parity models are present", function()
  T.ok(#names >= 10, "expected the parity models in " .. dir .. ", found " .. #names)
end)

local core = require "seer.core.model"
for _, setting in ipairs({ { 0, "" }, { 16, " [linear GEMM from 16 tokens]" } }) do
for _, name in ipairs(names) do
  T.test("parity: " .. name .. setting[2], function()
    local prev = core.gemm_min_tokens(setting[1])
    local ok, err = pcall(function()
      local cfg = seer.json.decode(seer.read_file(dir .. "/" .. name .. "/config.json"))
      if not supported[cfg.model_type] then
        T.skip(("model_type %s is not implemented yet (supported: %s)"):format(cfg.model_type, seer.model.supported()))
      end
      local golden = tensor.load(dir .. "/" .. name .. "/golden.safetensors")
      local model = seer.model.load(dir .. "/" .. name, { tokenizer = false })
      local ids = golden.tokens:totable()
      local logits, hidden = model:forward(ids, { hidden_states = true })
      if cfg.text_config then cfg = cfg.text_config end -- a multimodal config: its text model
      local nl = cfg.num_hidden_layers or cfg.n_layer
      for i = 0, nl - 1 do
        local want = golden["hidden." .. i]
        local d = max_abs_diff(hidden[i + 1], want)
        T.ok(d <= 1e-4, ("%s: residual %d differs by %g"):format(name, i, d))
      end
      -- the last entry is transformers' output_hidden_states[-1]: the last layer's output after the
      -- final norm (it was the residual before it, which transformers never returns there)
      local d = max_abs_diff(hidden[nl + 1], golden["hidden_states.last"])
      T.ok(d <= 1e-4, ("%s: hidden_states[-1] differs from transformers' by %g"):format(name, d))
      local d = max_abs_diff(logits, golden.logits)
      T.ok(d <= 1e-4, ("%s: logits differ by %g"):format(name, d))
      if os.getenv("SEER_PARITY_VERBOSE") then io.stderr:write(("parity %-22s logits max abs diff %.3g\n"):format(name, d)) end
    end)
    core.gemm_min_tokens(prev)
    if not ok then error(err, 0) end
  end)
end
end
