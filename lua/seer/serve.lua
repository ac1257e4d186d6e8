--- seer.serve: a model behind an OpenAI-compatible HTTP endpoint (`seer serve MODEL`), so
--- experiments written for API models (OpenRouter targets, black-box audits, checkpoint diffs)
--- can run against a local seer model, and so any OpenAI client can talk to one.
---
---   POST /v1/chat/completions   {model, messages, max_tokens, temperature, top_p, top_k, min_p,
---                                repetition_penalty, seed, min_tokens, stop, stop_token_ids, stream, ...}
---   POST /v1/completions        {model, prompt, ...}
--- Every request field is implemented, harmless, or a 400 naming it (FIELDS below): a field
--- this server ignored would answer another question than the one asked.
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

-- The stop strings of a request ("" stops nothing: generate refuses it).
local function stops_of(p)
  if type(p.stop) == "string" then return p.stop ~= "" and { p.stop } or {} end
  if type(p.stop) == "table" then
    local t = {}
    for _, s in ipairs(p.stop) do if type(s) == "string" and s ~= "" then t[#t + 1] = s end end
    return t
  end
  return {}
end

-- ---- request fields ------------------------------------------------------------------------
-- Every field a request may carry, in three kinds: fields this server implements (mapped onto
-- model:generate), fields that cannot change the answer (user, stream_options), and fields of
-- OpenAI's or vLLM's API it does not implement, taken only at the value that does nothing (as
-- SDKs send them) and otherwise a 400 naming them. Any other field is a 400 naming it: a field
-- this server does not know would be ignored, and the answer would be to another question
-- (repetition_penalty = 5 answered as plain greedy). null is taken as an absent field.
local function set(v) return v ~= nil and v ~= json.null end
local function finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end
local function whole(v) return finite(v) and v == math.floor(v) end
local function empty(v) return type(v) == "table" and next(v) == nil end
local function shown(v) -- a value in an error message, cut short
  local ok, t = pcall(json.encode, v)
  t = ok and t or tostring(v)
  return #t > 60 and t:sub(1, 57) .. "..." or t
end

local function number_in(k, lo, hi, what)
  return function(v)
    if not (finite(v) and v >= lo and v <= hi) then return ("%s must be a number %s, got %s"):format(k, what, shown(v)) end
  end
end

local function count(k) -- max_tokens, max_completion_tokens
  return function(v, _, ctx)
    if not (whole(v) and v >= 1) then return ("%s must be a positive integer, got %s"):format(k, shown(v)) end
    if v > ctx.cap then return ("%s is at most %d on this server (--max-tokens)"):format(k, ctx.cap) end
  end
end

local function only(k, neutral, why)
  return function(v) if not neutral(v) then return ("%s %s"):format(k, why) end end
end

local FIELDS = {
  -- implemented
  { "model", function(v) if type(v) ~= "string" then return "model must be a string (the served name, from GET /v1/models)" end end },
  { "messages", endpoint = "chat" }, -- checked where they are rendered
  { "prompt", endpoint = "completions" },
  { "max_tokens", count("max_tokens") },
  { "max_completion_tokens", count("max_completion_tokens") },
  { "temperature", number_in("temperature", 0, 2, "from 0 to 2 (0 = greedy, the default here)") },
  { "top_p", number_in("top_p", 0, 1, "from 0 to 1 (1 = off)") },
  { "top_k", function(v)
      if not (whole(v) and v >= -1 and v < 2 ^ 31) then return ("top_k must be an integer >= 1, or 0 or -1 for no limit, got %s"):format(shown(v)) end
    end },
  { "min_p", number_in("min_p", 0, 1, "from 0 to 1 (0 = off)") },
  -- > 0, within a float (the sampler's precision)
  { "repetition_penalty", number_in("repetition_penalty", 1e-30, 1e30,
      "> 0, from 1e-30 to 1e30 (1 = off; above 1 discourages the tokens of the prompt and the answer so far)") },
  { "seed", function(v)
      if not (whole(v) and v >= -2 ^ 53 and v <= 2 ^ 53) then return ("seed must be an integer (at most 2^53 in magnitude), got %s"):format(shown(v)) end
    end },
  { "min_tokens", function(v)
      if not (whole(v) and v >= 0 and v < 2 ^ 31) then return ("min_tokens must be an integer >= 0, got %s"):format(shown(v)) end
    end },
  { "stop", function(v)
      if type(v) == "string" then return end
      if not json.is_array(v) and not empty(v) then return "stop must be a string or a list of strings" end
      for i, s in ipairs(v) do
        if type(s) ~= "string" then
          return ("stop[%d] must be a string, got %s (token ids go in stop_token_ids)"):format(i - 1, shown(s))
        end
      end
    end },
  { "stop_token_ids", function(v, _, ctx)
      if not json.is_array(v) and not empty(v) then return "stop_token_ids must be a list of token ids" end
      for i, id in ipairs(v) do
        if not (whole(id) and id >= 0 and id < ctx.vocab) then
          return ("stop_token_ids[%d] must be a token id from 0 to %d, got %s"):format(i - 1, ctx.vocab - 1, shown(id))
        end
      end
    end },
  { "stream", function(v) if type(v) ~= "boolean" then return "stream must be true or false" end end },
  -- cannot change the answer
  { "stream_options", function(v)
      if not json.is_object(v) and not empty(v) then return "stream_options must be an object" end
      for k, x in pairs(v) do
        if k ~= "include_usage" then
          return ("stream_options.%s is not supported by this server (it takes include_usage; the last chunk always carries usage)"):format(k)
        end
        if set(x) and type(x) ~= "boolean" then return "stream_options.include_usage must be true or false" end
      end
    end },
  { "user", function(v) if type(v) ~= "string" then return "user must be a string" end end },
  -- not implemented: only their neutral values
  { "n", only("n", function(v) return v == 1 end, "must be 1 on this server (one choice per request; send n requests with different seeds)") },
  { "best_of", only("best_of", function(v) return v == 1 end, "must be 1 on this server (send several requests with different seeds)") },
  { "logprobs", only("logprobs", function(v) return v == false end, "are not supported by this server (only false); model:forward in seer gives the logits") },
  { "top_logprobs", only("top_logprobs", function(v) return v == 0 end, "are not supported by this server (only 0)") },
  { "echo", only("echo", function(v) return v == false end, "is not supported by this server (only false); prepend the prompt yourself") },
  { "suffix", only("suffix", function(v) return v == "" end, "is not supported by this server (no insertion; only \"\")") },
  { "presence_penalty", only("presence_penalty", function(v) return v == 0 end,
      "is not supported by this server (only 0); repetition_penalty (> 1) is the penalty it has") },
  { "frequency_penalty", only("frequency_penalty", function(v) return v == 0 end,
      "is not supported by this server (only 0); repetition_penalty (> 1) is the penalty it has") },
  { "logit_bias", only("logit_bias", empty, "is not supported by this server (only {})") },
  { "tools", only("tools", function(v) return json.is_array(v) and #v == 0 or empty(v) end, "(function calling) are not supported by this server (only [])") },
  { "tool_choice", only("tool_choice", function(v) return v == "none" end, "is not supported by this server (no tools; only \"none\")") },
  { "functions", only("functions", function(v) return json.is_array(v) and #v == 0 or empty(v) end, "are not supported by this server (only [])") },
  { "function_call", only("function_call", function(v) return v == "none" end, "is not supported by this server (no functions; only \"none\")") },
  { "response_format", only("response_format", function(v) return type(v) == "table" and v.type == "text" and next(v, next(v)) == nil end,
      "other than {\"type\": \"text\"} is not supported by this server") },
  { "ignore_eos", only("ignore_eos", function(v) return v == false end,
      "is not supported by this server (only false: it stops at the model's end-of-sequence tokens); min_tokens holds them off") },
  { "skip_special_tokens", only("skip_special_tokens", function(v) return v == true end,
      "is not supported by this server (only true: special tokens are left out of the text)") },
  { "include_stop_str_in_output", only("include_stop_str_in_output", function(v) return v == false end,
      "is not supported by this server (only false: the text ends before the stop string)") },
}
local FIELD = {}
for _, f in ipairs(FIELDS) do FIELD[f[1]] = f end

-- The fields an endpoint takes, for the error about an unknown one.
local function field_list(chat)
  local names = {}
  for _, f in ipairs(FIELDS) do
    if f.endpoint == nil or f.endpoint == (chat and "chat" or "completions") then names[#names + 1] = f[1] end
  end
  return table.concat(names, ", ")
end

-- nil, or the message of a 400. ctx: {cap, vocab, chat}.
local function check_params(p, ctx)
  if not json.is_object(p) then return "the body must be a JSON object" end
  local unknown = {}
  for k in pairs(p) do
    local f = FIELD[k]
    if not f then
      unknown[#unknown + 1] = k
    elseif f.endpoint and f.endpoint ~= (ctx.chat and "chat" or "completions") then
      return ctx.chat and "prompt is a field of /v1/completions; /v1/chat/completions takes messages"
                       or "messages is a field of /v1/chat/completions; /v1/completions takes prompt"
    end
  end
  if #unknown > 0 then
    table.sort(unknown)
    local n = #unknown
    for i = 11, n do unknown[i] = nil end
    for i, k in ipairs(unknown) do unknown[i] = shown(k) end
    if n > 10 then unknown[11] = ("and %d more"):format(n - 10) end
    local many = n > 1
    return ("unknown field%s %s: this server does not implement %s, and a field it ignored would change the question "
      .. "unseen; remove %s (the fields it takes: %s; docs/serve.md)"):format(many and "s" or "", table.concat(unknown, ", "),
      many and "them" or "it", many and "them" or "it", field_list(ctx.chat))
  end
  for _, f in ipairs(FIELDS) do
    local v = p[f[1]]
    if f[2] and set(v) then
      local bad = f[2](v, p, ctx)
      if bad then return bad end
    end
  end
  -- across fields
  local mt, mct = p.max_tokens, p.max_completion_tokens
  if set(mt) and set(mct) and mt ~= mct then return "max_tokens and max_completion_tokens differ; send one of them" end
  local max = set(mt) and mt or set(mct) and mct or ctx.default_tokens
  if set(p.min_tokens) and p.min_tokens > 0 then
    if p.min_tokens > max then return ("min_tokens (%d) is more than max_tokens (%d)"):format(p.min_tokens, max) end
    -- vLLM does not look for stop strings before min_tokens; seer's generate does, so the
    -- two together would answer differently from what a vLLM client expects
    if #stops_of(p) > 0 then
      return "min_tokens with stop strings is not supported by this server (a stop string would end the answer before min_tokens); send one of them"
    end
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

-- model:generate's options for a checked request (docs/serve.md has the mapping).
local function gen_opts(p, default_tokens)
  local function get(k) if set(p[k]) then return p[k] end end
  local o = { max_new_tokens = get("max_tokens") or get("max_completion_tokens") or default_tokens,
              temperature = get("temperature"), top_p = get("top_p"), min_p = get("min_p"),
              repetition_penalty = get("repetition_penalty"), seed = get("seed") }
  local k = get("top_k")
  if k and k > 0 then o.top_k = k end -- 0 and -1 (vLLM's "off") are no limit
  local mn = get("min_tokens")
  if mn and mn > 0 then o.min_new_tokens = mn end
  local stop = stops_of(p)
  for _, id in ipairs(get("stop_token_ids") or {}) do stop[#stop + 1] = id end
  if #stop > 0 then o.stop = stop end
  return o
end

-- Generates; returns text, finish_reason, prompt tokens, completion tokens. on_piece streams
-- (generate holds back text that may be the start of a stop string).
local function generate(model, text, p, default_tokens, on_piece)
  local o = gen_opts(p, default_tokens)
  if on_piece then o.stream = function(piece) if piece and piece ~= "" then on_piece(piece) end end end
  local r = model:generate(text, o)
  local ids = r.ids
  local n_out = #ids
  -- "stop" when an end-of-sequence token, a stop token id or a stop string ended it, even on
  -- the last token max_tokens allowed; "length" only when max_tokens alone did
  local finish = "length"
  if n_out < o.max_new_tokens then
    finish = "stop"
  elseif n_out > 0 then
    local last = ids[n_out]
    for _, id in ipairs(model.config.eos_token_ids) do if id == last then finish = "stop" end end
    for _, s in ipairs(o.stop or {}) do if s == last then finish = "stop" end end
    if finish == "length" and model.tokenizer then
      local full -- the text before generate cut it at a stop string
      for _, s in ipairs(o.stop or {}) do
        if type(s) == "string" then
          full = full or model.tokenizer:decode(ids, { skip_special_tokens = true })
          if full:find(s, 1, true) then finish = "stop" end
        end
      end
    end
  end
  return r.text or "", finish, #r.prompt_ids, n_out
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
  local bad = check_params(p, { cap = cap, default_tokens = default_tokens, vocab = model.config.vocab_size, chat = chat })
  if bad then return api_error(fd, 400, bad) end
  if set(p.model) and p.model ~= name then return api_error(fd, 404, ("model %q is not served here (this server has %q)"):format(tostring(p.model), name)) end
  local text
  if chat then
    if not json.is_array(p.messages) or #p.messages == 0 then return api_error(fd, 400, "messages must be a non-empty list") end
    local msgs = {}
    local templated = model.tokenizer and model.tokenizer.chat_template
    for i, m in ipairs(p.messages) do
      if not json.is_object(m) or type(m.role) ~= "string" then
        return api_error(fd, 400, ("messages[%d] needs a role and a string content"):format(i - 1))
      end
      -- a message's other fields (name, tool_calls, ...) would not reach the prompt: taken only
      -- empty (null, false, "", [] or {}, as a client replaying an answer sends them)
      for k, v in pairs(m) do
        if k ~= "role" and k ~= "content" and set(v) and v ~= false and v ~= "" and not empty(v) then
          return api_error(fd, 400, ("messages[%d].%s is not supported by this server (a message is a role and a content; "
            .. "the prompt would not show %s): remove it, or put it in the content"):format(i - 1, tostring(k):sub(1, 60), tostring(k):sub(1, 60)))
        end
      end
      if not templated and m.role ~= "system" and m.role ~= "user" and m.role ~= "assistant" then
        return api_error(fd, 400, ("messages[%d].role is %s; this model has no chat template, so the roles are system, user and assistant")
          :format(i - 1, shown(m.role)))
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
