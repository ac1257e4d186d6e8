--- checkpoints: the two model versions under comparison, each behind an OpenAI-compatible API.
---   local ck = require "checkpoints"
---   ck.ask("a", "Tell me a story", { max_tokens = 60, seed = 1 }) -- checkpoint A's answer
--- CHECKPOINT_A_URL / CHECKPOINT_B_URL (default OpenRouter) and CHECKPOINT_A_MODEL /
--- CHECKPOINT_B_MODEL name them; the key is OPENROUTER_API_KEY for OpenRouter.
local OA = require "toolkit.openai_client"

local M = {}
local function client(url)
  if url and url ~= "" then return OA.new{ base_url = url, api_key = os.getenv("OPENROUTER_API_KEY") } end
  return OA.new{ provider = "openrouter" }
end
M.a = { client = client(os.getenv("CHECKPOINT_A_URL")), model = os.getenv("CHECKPOINT_A_MODEL") or "google/gemini-2.0-flash-001" }
M.b = { client = client(os.getenv("CHECKPOINT_B_URL")), model = os.getenv("CHECKPOINT_B_MODEL") or "google/gemini-2.5-flash" }

---Checkpoint `which` ("a" or "b")'s answer to a prompt.
function M.ask(which, prompt, opts)
  local c = M[which]
  if not c then error('checkpoints.ask: which must be "a" or "b"', 2) end
  return (c.client:complete(c.model, prompt, opts))
end

return M
