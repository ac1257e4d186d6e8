--- toolkit.openai_client: an OpenAI-compatible chat client on seer.http, for experiments that
--- talk to API models (OpenRouter, OpenAI, a local vLLM / llama.cpp / `transformers serve`).
--- Its shape follows the OpenAI SDK the reference's experiments use:
---
--- ```lua
--- local OA = require "toolkit.openai_client"
--- local client = OA.new{ provider = "openrouter" }          -- key from OPENROUTER_API_KEY
--- local r = client.chat.completions.create{ model = "moonshotai/kimi-k2-0905",
---   messages = { { role = "user", content = "Hello" } }, max_tokens = 200 }
--- print(r.choices[1].message.content, r.usage.total_tokens)
--- local text, resp = client:complete("moonshotai/kimi-k2-0905", "Hello")   -- the text, then the response
--- print(text)   -- (print(client:complete(...)) would print the response table's address too)
--- client.chat.completions.create{ model = ..., messages = ..., stream = function(delta) io.write(delta) end }
--- ```
--- `OA.new{base_url = "http://127.0.0.1:8000/v1", api_key = "..."}` for any other server.
--- Requests retry on 429/5xx and transient failures (seer.http), time out (`timeout`, default
--- 120 s), and an HTTP error raises with the server's message. The key is sent only in the
--- Authorization header and appears in no error message.
local http = require "seer.http"
local json = require "seer.json"

local M = {}

M.PROVIDERS = {
  openrouter = { base_url = "https://openrouter.ai/api/v1", key_env = "OPENROUTER_API_KEY" },
  openai = { base_url = "https://api.openai.com/v1", key_env = "OPENAI_API_KEY" },
  gemini = { base_url = "https://generativelanguage.googleapis.com/v1beta/openai", key_env = "GEMINI_API_KEY" },
}

local Client = {}
Client.__index = Client

local function server_message(r)
  local ok, doc = pcall(json.decode, r.body)
  if ok and type(doc) == "table" and type(doc.error) == "table" and doc.error.message then return tostring(doc.error.message) end
  if ok and type(doc) == "table" and type(doc.error) == "string" then return doc.error end
  return r.body:sub(1, 300)
end

---A client. Fields: provider ("openrouter", "openai", "gemini") or base_url; api_key (default:
---the provider's variable; none for a local server), timeout (s), retries, headers.
---@param opts {provider?: string, base_url?: string, api_key?: string, timeout?: number, retries?: integer, headers?: table<string, string>}
function M.new(opts)
  opts = opts or {}
  for k in pairs(opts) do
    if not ({ provider = true, base_url = true, api_key = true, timeout = true, retries = true, headers = true })[k] then
      error(("openai_client.new: unknown option %q (options: api_key, base_url, headers, provider, retries, timeout)"):format(tostring(k)), 2)
    end
  end
  local p = opts.provider and M.PROVIDERS[opts.provider]
  if opts.provider and not p then
    error(("openai_client.new: unknown provider %q (openrouter, openai, gemini; or give base_url)"):format(opts.provider), 2)
  end
  local base = opts.base_url or (p and p.base_url)
  if type(base) ~= "string" then error("openai_client.new: give provider or base_url", 2) end
  local key = opts.api_key
  if key == nil and p then
    key = os.getenv(p.key_env)
    if key == nil or key == "" then
      error(("openai_client.new: %s is not set; export it (in a sandbox, list it in SandboxConfig.secrets) or pass api_key"):format(p.key_env), 2)
    end
  end
  local self = setmetatable({ base_url = base:gsub("/+$", ""), api_key = key, timeout = opts.timeout or 120,
                              retries = opts.retries, extra_headers = opts.headers or {} }, Client)
  self.chat = { completions = { create = function(params) return self:_create(params) end } }
  return self
end

function Client:_headers()
  local h = {}
  for k, v in pairs(self.extra_headers) do h[k] = v end
  if self.api_key then h.Authorization = "Bearer " .. self.api_key end
  return h
end

---POST /chat/completions. `params` is the request body (model, messages, temperature,
---max_tokens, tools, ...); `stream` may be a function receiving each text delta, in which case
---the streamed answer is assembled into the same response shape.
function Client:_create(params)
  if type(params) ~= "table" or type(params.model) ~= "string" or type(params.messages) ~= "table" then
    error("chat.completions.create{model = ..., messages = {...}}: model and messages are required", 3)
  end
  local body = {}
  for k, v in pairs(params) do body[k] = v end
  local url = self.base_url .. "/chat/completions"
  local on_delta = type(params.stream) == "function" and params.stream or nil
  if params.stream ~= nil and not on_delta and params.stream ~= false then
    error("chat.completions.create: stream must be a function (it receives each text delta) or false", 3)
  end
  if not on_delta then
    body.stream = nil
    local r = http.request{ url = url, method = "POST", json = body, headers = self:_headers(), timeout = self.timeout,
                            retries = self.retries }
    if not r.ok then error(("openai_client: %s: HTTP %d: %s"):format(r.url_shown, r.status, server_message(r)), 3) end
    return r:json()
  end
  body.stream = true
  local text, finish, usage, model, id = {}, nil, nil, nil, nil
  http.sse(url, { method = "POST", json = body, headers = self:_headers(), timeout = self.timeout, retries = self.retries },
    function(ev)
      if ev.data == "[DONE]" then return true end
      local ok, chunk = pcall(json.decode, ev.data)
      if not ok or type(chunk) ~= "table" then return end
      model, id = chunk.model or model, chunk.id or id
      if type(chunk.usage) == "table" then usage = chunk.usage end
      local c = type(chunk.choices) == "table" and chunk.choices[1]
      if type(c) == "table" then
        local d = type(c.delta) == "table" and c.delta.content
        if type(d) == "string" and d ~= "" then text[#text + 1] = d; on_delta(d) end
        if type(c.finish_reason) == "string" then finish = c.finish_reason end
      end
    end)
  return { id = id, model = model, usage = usage or json.null,
           choices = { { index = 0, finish_reason = finish or json.null,
                         message = { role = "assistant", content = table.concat(text) } } } }
end

---The answer's text, and the whole response as a second value: `prompt` is a string (one user
---message) or a message list.
---@param model string
---@param prompt string|table
---@param opts? table more request fields (temperature, max_tokens, ...)
---@return string text, table response
function Client:complete(model, prompt, opts)
  local messages = type(prompt) == "string" and { { role = "user", content = prompt } } or prompt
  local params = { model = model, messages = messages }
  for k, v in pairs(opts or {}) do params[k] = v end
  local r = self:_create(params)
  local c = type(r.choices) == "table" and r.choices[1]
  local text = type(c) == "table" and type(c.message) == "table" and c.message.content
  if type(text) ~= "string" then error("openai_client: the answer has no choices[1].message.content: " .. json.encode(r):sub(1, 300), 2) end
  return text, r
end

return M
