-- The small profile's hidden adapter: a rank-1 LoRA on stories260K's last down_proj that
-- nudges the residual stream toward the unembedding of one name, so the adapted model prefers
-- that name in its stories (at scale 3, "Timmy" in 8 of 20 seeded stories against 3 of 20 for
-- the base model, and P(Timmy | "... a little boy named") 0.96 against 0.63). It is made at run time from the base model's own weights, in PEFT's format.
local tensor = require "seer.tensor"

local M = {}

---Writes the adapter into `out` (a new directory); returns out.
---@param base string the base model's directory (stories260K)
---@param out string
---@param opts? {name?: string, scale?: number}
---@return string
function M.make(base, out, opts)
  opts = opts or {}
  local model = seer.model.load(base)
  local tok = model.tokenizer
  local ids = tok:encode(opts.name or "Timmy", { add_special_tokens = false })
  if #ids ~= 1 then error(("small_adapter: %q is not one token of this vocabulary"):format(opts.name or "Timmy"), 2) end
  local target = ids[1]
  local L = model.config.num_hidden_layers - 1
  local point = ("blocks.%d.mlp.hook_post"):format(L)
  -- A reads the mean direction of the down projection's input (so A·x is about 1 on ordinary text)
  local sum, n
  for _, t in ipairs({ "Once upon a time, there was a little girl named Lily.", "The dog ran to the park and played.",
                       "One day, a boy went to the store with his mom.", "They were very happy and had fun." }) do
    local _, cache = model:run_with_cache(tok:encode(t), { names = point })
    local a = cache[point]
    sum = sum and (sum + a:sum(1)) or a:sum(1)
    n = (n or 0) + a:size(1)
  end
  local m = sum / n
  local A = (m / (m:norm() ^ 2)):reshape(1, m:size(1))
  -- B writes the name's unembedding direction, seen through the final norm's weights
  local W = tensor.load(base .. "/model.safetensors")
  local E = W["lm_head.weight"] or W["model.embed_tokens.weight"]
  local dir = E:select(1, target + 1) * W["model.norm.weight"]
  local B = (dir / dir:norm() * (opts.scale or 3)):reshape(dir:size(1), 1)
  assert(os.execute(("mkdir -p '%s'"):format(out)) == 0)
  local prefix = ("base_model.model.model.layers.%d.mlp.down_proj."):format(L)
  tensor.save(out .. "/adapter_model.safetensors", { [prefix .. "lora_A.weight"] = A, [prefix .. "lora_B.weight"] = B })
  seer.write_file(out .. "/adapter_config.json", seer.json.encode{
    peft_type = "LORA", task_type = "CAUSAL_LM", r = 1, lora_alpha = 1, lora_dropout = 0.0, bias = "none",
    target_modules = { "down_proj" }, fan_in_fan_out = false, use_rslora = false,
    base_model_name_or_path = "base" })
  return out
end

return M
