-- Runs inside the scoped sandbox: only the functions on `expose` are reachable over RPC.
-- `expose`, `get_model_path` and `list_configured_models` are injected.
local M = require "seer.model"

-- The one configured model (a {name = path} map; the reference's interface names its id).
local name = next(list_configured_models())
local path = get_model_path(name)
local model = M.load(path)
local tokenizer = model.tokenizer

---Get basic model information.
---@return {num_layers: integer, hidden_size: integer, vocab_size: integer}
function expose.get_model_info()
  local c = model.config
  return { num_layers = c.num_hidden_layers, hidden_size = c.hidden_size, vocab_size = c.vocab_size }
end

---Get a text embedding: the mean over tokens of the final normalized hidden state.
---@param text string the text to embed
---@return {embedding: number[], tokens: integer}
function expose.get_embedding(text)
  local ids = tokenizer:encode(text)
  local _, cache = model:run_with_cache(ids, { names = { "ln_final.hook_normalized" } })
  return { embedding = cache["ln_final.hook_normalized"]:mean(1):totable(), tokens = #ids }
end

local function private_helper() end -- not exposed: unreachable over RPC
