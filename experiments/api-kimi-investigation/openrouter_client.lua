--- openrouter_client: the investigated model behind an OpenAI-compatible API, as the reference's
--- openrouter_client.py. `client` is a toolkit.openai_client; `model` the id to ask for.
---   local oc = require "openrouter_client"
---   local text = oc.client:complete(oc.model, "Hello")   -- (a second value is the response table)
---   print(text)
--- OPENROUTER_BASE_URL / OPENROUTER_MODEL point it at another server and model (the small
--- profile's `seer serve`); otherwise it is OpenRouter with OPENROUTER_API_KEY.
local OA = require "toolkit.openai_client"

local M = {}
local base = os.getenv("OPENROUTER_BASE_URL")
if base and base ~= "" then
  M.client = OA.new{ base_url = base, api_key = os.getenv("OPENROUTER_API_KEY") }
else
  M.client = OA.new{ provider = "openrouter" }
end
M.model = os.getenv("OPENROUTER_MODEL") or "moonshotai/kimi-k2-0905"
return M
