--- seer.serve: a model behind an OpenAI-compatible HTTP endpoint (`seer serve MODEL`), so
--- experiments written for API models (OpenRouter targets, black-box audits, checkpoint diffs)
--- can run against a local seer model, and so any OpenAI client can talk to one.
---
---   POST /v1/chat/completions   {model, messages, max_tokens, temperature, top_p, seed, stop, stream}
---   POST /v1/completions        {model, prompt, ...}
---   GET  /v1/models
---
--- One request at a time (the model is not reentrant), on loopback by default; with a token,
--- every request must carry `Authorization: Bearer <token>`. Everything a client sends is
--- bounded: the request head (16 KiB), the body (4 MiB), the time to send them (10 s), and
--- max_tokens. Errors come back in OpenAI's shape. docs/serve.md.
---@class seerserve
local M = {}

local json = require "seer.json"
local process = require "seer.process"
local sock = require "seer.sock"

local MAX_HEAD, MAX_BODY, READ_MS = 16384, 4 * 1024 * 1024, 10000

local STATUS = { [200] = "OK", [400] = "Bad Request", [401] = "Unauthorized", [404] = "Not Found",
                 [405] = "Method Not Allowed", [408] = "Request Timeout", [413] = "Payload Too Large",
                 [431] = "Request Header Fields Too Large", [500] = "Internal Server Error" }

local function send_all(fd, s) return sock.send_all(fd, s, 10000) end

local function respond(fd, status, body, ctype, extra)
  local head = { ("HTTP/1.1 %d %s"):format(status, STATUS[status] or "Error"),
                 "Content-Type: " .. (ctype or "application/json"), "Content-Length: " .. #body, "Connection: close" }
  for _, h in ipairs(extra or {}) do head[#head + 1] = h end
  return send_all(fd, table.concat(head, "\r\n") .. "\r\n\r\n" .. body)
end

local function api_error(fd, status, message, kind)
  respond(fd, status, json.encode{ error = { message = message, type = kind or "invalid_request_error" } })
end

-- Reads one request within READ_MS: (method, path, headers, body) or (nil, status, message).
local function read_request(fd, read_ms)
  local deadline = process.now_ms() + (read_ms or READ_MS)
  local data = ""
  local head_end
  local function more()
    local left = deadline - process.now_ms()
    if left <= 0 or not sock.wait(fd, sock.POLLIN, left) then return nil, 408, "the request did not arrive in time" end
    local got = sock.recv(fd)
    if got == "" then return nil, 400, "the connection closed mid-request" end
    if got then data = data .. got end
    return true
  end
  while true do
    head_end = data:find("\r\n\r\n", 1, true)
    if head_end then break end
    if #data > MAX_HEAD then return nil, 431, "the request head is larger than 16 KiB" end
    local ok, st, msg = more()
    if not ok then return nil, st, msg end
  end
  if head_end > MAX_HEAD then return nil, 431, "the request head is larger than 16 KiB" end
  local head = data:sub(1, head_end - 1)
  local method, path = head:match("^(%u+) (%S+) HTTP/1%.[01]\r?\n?")
  if not method then return nil, 400, "not an HTTP/1.x request" end
  local headers = {}
  for line in head:gmatch("\r\n([^\r\n]*)") do
    local k, v = line:match("^([^:]+):%s*(.-)%s*$")
    if k then headers[k:lower()] = v end
  end
  if headers["transfer-encoding"] then return nil, 400, "chunked request bodies are not supported; send Content-Length" end
  local len = tonumber(headers["content-length"] or "0")
  if not len or len < 0 or len ~= math.floor(len) then return nil, 400, "bad Content-Length" end
  if len > MAX_BODY then return nil, 413, "the request body is larger than 4 MiB" end
  local body = data:sub(head_end + 4)
  while #body < len do
    local before = #data
    local ok, st, msg = more()
    if not ok then return nil, st, msg end
    body = body .. data:sub(before + 1)
  end
  return method, path, headers, body:sub(1, len)
end

-- Constant-time comparison, so the token cannot be guessed byte by byte from response times.
local function same(a, b)
  if type(a) ~= "string" or #a ~= #b then return false end
  local d = 0
  for i = 1, #a do d = bit.bor(d, bit.bxor(a:byte(i), b:byte(i))) end
  return d == 0
end

local function render(model, messages)
  local tok = model.tokenizer
  if tok.chat_template then
    return tok:apply_chat_template(messages, { add_generation_prompt = true, tokenize = false })
  end
  -- No chat template (a base model): a plain dialogue the model continues.
  local parts = {}
  for _, m in ipairs(messages) do
    local who = m.role == "assistant" and "Assistant" or m.role == "system" and "System" or "User"
    parts[#parts + 1] = who .. ": " .. m.content
  end
  parts[#parts + 1] = "Assistant:"
  return table.concat(parts, "\n")
end

local function check_params(p, max_tokens_cap)
  if type(p) ~= "table" then return "the body must be a JSON object" end
  if p.max_tokens ~= nil and (type(p.max_tokens) ~= "number" or p.max_tokens < 1 or p.max_tokens ~= math.floor(p.max_tokens)) then
    return "max_tokens must be a positive integer"
  end
  if (p.max_tokens or 0) > max_tokens_cap then return ("max_tokens is at most %d on this server"):format(max_tokens_cap) end
  for _, k in ipairs({ "temperature", "top_p", "seed" }) do
    if p[k] ~= nil and p[k] ~= json.null and type(p[k]) ~= "number" then return k .. " must be a number" end
  end
  -- the ranges OpenAI's API documents (a number past them is a 400 here, not a failed generation)
  local t, tp, sd = p.temperature, p.top_p, p.seed
  if type(t) == "number" and not (t >= 0 and t <= 2) then return "temperature must be from 0 to 2" end
  if type(tp) == "number" and not (tp >= 0 and tp <= 1) then return "top_p must be from 0 to 1" end
  if type(sd) == "number" and not (sd >= -2 ^ 53 and sd <= 2 ^ 53 and sd == math.floor(sd)) then
    return "seed must be an integer (at most 2^53 in magnitude)"
  end
  if p.stop ~= nil and p.stop ~= json.null and type(p.stop) ~= "string" and type(p.stop) ~= "table" then return "stop must be a string or a list of strings" end
  -- Fields of OpenAI's API that change what comes back and that this server does not do: a 400
  -- naming them, never a silent answer to a different question (n = 3 returned one choice,
  -- logprobs = true none)
  local function set(v) return v ~= nil and v ~= json.null end
  if set(p.n) and p.n ~= 1 then return "n must be 1 on this server (one choice per request; send n requests with different seeds)" end
  if set(p.best_of) and p.best_of ~= 1 then return "best_of must be 1 on this server" end
  if set(p.logprobs) and p.logprobs ~= false and p.logprobs ~= 0 then return "logprobs are not supported by this server" end
  if set(p.top_logprobs) and p.top_logprobs ~= 0 then return "top_logprobs are not supported by this server" end
  if set(p.echo) and p.echo ~= false then return "echo is not supported by this server" end
  if set(p.suffix) then return "suffix is not supported by this server" end
  if set(p.tools) and (type(p.tools) ~= "table" or #p.tools > 0) then return "tools (function calling) are not supported by this server" end
  if set(p.tool_choice) and p.tool_choice ~= "none" then return "tool_choice is not supported by this server (no tools)" end
  if set(p.functions) or set(p.function_call) then return "functions are not supported by this server" end
  if set(p.logit_bias) and (type(p.logit_bias) ~= "table" or next(p.logit_bias) ~= nil) then return "logit_bias is not supported by this server" end
  if set(p.response_format) and not (type(p.response_format) == "table" and p.response_format.type == "text") then
    return "response_format other than {type = \"text\"} is not supported by this server"
  end
  for _, k in ipairs({ "presence_penalty", "frequency_penalty" }) do
    if set(p[k]) and p[k] ~= 0 then return k .. " is not supported by this server (only 0)" end
  end
  return nil
end

-- A message's content: a string, or OpenAI's list of content parts, of which this server takes
-- text parts (joined with newlines, as vLLM does). Returns the text, or nil and why not.
local function content_text(c)
  if type(c) == "string" then return c end
  if type(c) ~= "table" or c == json.null or #c == 0 then return nil, "needs a role and a string content (or a list of text parts)" end
  local parts = {}
  for j, part in ipairs(c) do
    if type(part) ~= "table" or part.type ~= "text" or type(part.text) ~= "string" then
      local ty = type(part) == "table" and tostring(part.type) or type(part)
      return nil, ("content[%d] is a part of type %s; this server takes text parts only ({type = \"text\", text = ...})"):format(j - 1, ty)
    end
    parts[j] = part.text
  end
  return table.concat(parts, "\n")
end

local function gen_opts(p, default_tokens)
  local o = { max_new_tokens = p.max_tokens or default_tokens }
  if type(p.temperature) == "number" then o.temperature = p.temperature end
  if type(p.top_p) == "number" then o.top_p = p.top_p end
  if type(p.seed) == "number" then o.seed = p.seed end
  return o
end

local function stops_of(p)
  if type(p.stop) == "string" then return p.stop ~= "" and { p.stop } or {} end -- "" stops nothing (generate refuses it)
  if type(p.stop) == "table" then
    local t = {}
    for _, s in ipairs(p.stop) do if type(s) == "string" and s ~= "" then t[#t + 1] = s end end
    return t
  end
  return {}
end

-- Generates; returns text, finish_reason, prompt tokens, completion tokens. on_piece streams
-- (generate holds back text that may be the start of a stop string).
local function generate(model, text, p, default_tokens, on_piece)
  local o = gen_opts(p, default_tokens)
  local stops = stops_of(p)
  if #stops > 0 then o.stop = stops end
  if on_piece then o.stream = function(piece) if piece and piece ~= "" then on_piece(piece) end end end
  local r = model:generate(text, o)
  local n_out = #r.ids
  return r.text or "", n_out >= o.max_new_tokens and "length" or "stop", #r.prompt_ids, n_out
end

---@class seerserve.Options
---@field model seer.Model
---@field name? string the model id clients use (default: the model directory's name)
---@field host? string default 127.0.0.1
---@field port? integer 0 (default) picks a free port
---@field token? string required as a Bearer token when set
---@field max_tokens? integer the cap on max_tokens (default 1024)
---@field default_tokens? integer max_tokens when a request gives none (default 256)
---@field on_ready? fun(info: {url: string, port: integer, host: string})
---@field max_requests? integer stop after this many (tests)
---@field read_timeout? number seconds a client has to send its request (default 10)

---Serves until interrupted (Ctrl-C) or max_requests.
---@param opts seerserve.Options
function M.serve(opts)
  local model = opts.model
  local name = opts.name or "seer-model"
  local host = opts.host or "127.0.0.1"
  local cap = opts.max_tokens or 1024
  local default_tokens = math.min(opts.default_tokens or 256, cap)
  local rt = opts.read_timeout
  if rt ~= nil and not (type(rt) == "number" and rt > 0 and rt <= 86400) then
    error(("seer serve: read_timeout must be a number of seconds from 0 (exclusive) to 86400, got %s"):format(tostring(rt)), 2)
  end
  local fd, port = sock.listen_tcp(host, opts.port or 0)
  if not fd then
    error(("seer serve: cannot listen on %s:%d (%s); use 127.0.0.1, or 0.0.0.0 for every interface"):format(host, opts.port or 0, port), 2)
  end
  local info = { url = ("http://%s:%d/v1"):format(host, port), port = port, host = host }
  if opts.on_ready then opts.on_ready(info) end
  local served = 0
  local ok, err = pcall(function()
    while not opts.max_requests or served < opts.max_requests do
      if sock.wait(fd, sock.POLLIN, 1000) then
        local c = sock.accept(fd)
        if c then
          served = served + 1
          local okh, herr = pcall(M._handle, c, model, name, opts.token, cap, default_tokens,
                                  rt and math.ceil(rt * 1000))
          if not okh then
            if tostring(herr):match("interrupted$") then sock.close(c); error(herr, 0) end
            pcall(api_error, c, 500, "internal error: " .. tostring(herr):sub(1, 300), "server_error")
          end
          sock.close(c)
        end
      end
    end
  end)
  sock.close(fd)
  if not ok then error(err, 0) end
end

-- After answering a request that was not read to its end (a body over the limit, a bad head):
-- stop sending and read what the client still sends, discarding it, for up to LINGER_MS or
-- LINGER_BYTES, so that a client still writing its body gets to read the answer instead of a
-- reset connection ("lingering close", as HTTP servers do). Nothing is kept.
local LINGER_MS, LINGER_BYTES = 2000, 64 * 1024 * 1024
local function linger(fd)
  sock.shutdown_write(fd)
  local deadline, total = process.now_ms() + LINGER_MS, 0
  while total < LINGER_BYTES do
    local left = deadline - process.now_ms()
    if left <= 0 or not sock.wait(fd, sock.POLLIN, left) then return end
    local got = sock.recv(fd)
    if got == "" then return end -- the client closed
    total = total + #(got or "")
  end
end

function M._handle(fd, model, name, token, cap, default_tokens, read_ms)
  local method, path, headers, body = read_request(fd, read_ms)
  if not method then
    api_error(fd, path, headers)
    -- a client sending more than the limits is likely still sending: let it read the answer
    if path == 413 or path == 431 then linger(fd) end
    return
  end
  if token and not same((headers.authorization or ""):match("^Bearer (.+)$"), token) then
    return api_error(fd, 401, "a valid Authorization: Bearer token is required", "authentication_error")
  end
  path = path:gsub("%?.*$", "")
  if path == "/v1/models" then
    if method ~= "GET" then return api_error(fd, 405, "use GET") end
    return respond(fd, 200, json.encode{ object = "list", data = { { id = name, object = "model", owned_by = "seer" } } })
  end
  local chat = path == "/v1/chat/completions"
  if not chat and path ~= "/v1/completions" then return api_error(fd, 404, "no route " .. path .. " (this server has /v1/chat/completions, /v1/completions, /v1/models)") end
  if method ~= "POST" then return api_error(fd, 405, "use POST") end
  local okj, p = pcall(json.decode, body)
  if not okj then return api_error(fd, 400, "the body is not JSON") end
  local bad = check_params(p, cap)
  if bad then return api_error(fd, 400, bad) end
  if p.model ~= nil and p.model ~= name then return api_error(fd, 404, ("model %q is not served here (this server has %q)"):format(tostring(p.model), name)) end
  local text
  if chat then
    if type(p.messages) ~= "table" or #p.messages == 0 then return api_error(fd, 400, "messages must be a non-empty list") end
    local msgs = {}
    for i, m in ipairs(p.messages) do
      if type(m) ~= "table" or type(m.role) ~= "string" then
        return api_error(fd, 400, ("messages[%d] needs a role and a string content"):format(i - 1))
      end
      local c, why = content_text(m.content)
      if not c then return api_error(fd, 400, ("messages[%d] %s"):format(i - 1, why)) end
      msgs[i] = { role = m.role, content = c }
    end
    local okr, r = pcall(render, model, msgs)
    if not okr then return api_error(fd, 400, "the chat template failed: " .. tostring(r):sub(1, 200)) end
    text = r
  else
    if type(p.prompt) ~= "string" then return api_error(fd, 400, "prompt must be a string") end
    text = p.prompt
  end
  local id = ("seer-%x%x"):format(os.time(), math.random(0, 0xffffff))
  local created = os.time()
  local object = chat and "chat.completion" or "text_completion"
  if p.stream == true then
    if not send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n") then return end
    local function event(choice, usage)
      local chunk = { id = id, object = object .. ".chunk", created = created, model = name, choices = { choice }, usage = usage }
      send_all(fd, "data: " .. json.encode(chunk) .. "\n\n")
    end
    local _, finish, np, nc = generate(model, text, p, default_tokens, function(piece)
      event(chat and { index = 0, delta = { content = piece } } or { index = 0, text = piece })
    end)
    event(chat and { index = 0, delta = json.object(), finish_reason = finish } or { index = 0, text = "", finish_reason = finish },
          { prompt_tokens = np, completion_tokens = nc, total_tokens = np + nc })
    send_all(fd, "data: [DONE]\n\n")
    return
  end
  local out, finish, np, nc = generate(model, text, p, default_tokens)
  local choice = chat and { index = 0, finish_reason = finish, message = { role = "assistant", content = out } }
                      or { index = 0, finish_reason = finish, text = out }
  return respond(fd, 200, json.encode{ id = id, object = object, created = created, model = name, choices = { choice },
                                       usage = { prompt_tokens = np, completion_tokens = nc, total_tokens = np + nc } })
end

return M
