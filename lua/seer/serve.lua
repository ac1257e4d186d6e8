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
--- One generation at a time (the model is not reentrant), while requests still arriving are
--- read side by side, so an idle or slow peer holds no one up. On loopback by default; with a
--- token, every request must carry `Authorization: Bearer <token>`; the Host must name this
--- server and an Origin must be its own (a web page's requests are refused). Everything a client
--- sends is bounded: the request head (16 KiB, in 5 s), the body (4 MiB, in 10 s), the prompt
--- (the model's context, with max_tokens), the stop strings (32 of 128 bytes), and the
--- connections waiting to send (256, 64 per address). Errors come back in OpenAI's shape.
--- docs/serve.md.
---@class seerserve
local M = {}

local json = require "seer.json"
local process = require "seer.process"
local sock = require "seer.sock"

local MAX_HEAD, MAX_BODY, READ_MS = 16384, 4 * 1024 * 1024, 10000
-- Connections are read side by side (poll), so a peer that connects and sends nothing, or
-- sends a byte at a time, holds no one up: a request is answered once its head and body are
-- in, in the order they completed. The head must arrive within HEAD_MS of the accept (a total,
-- so a trickled head is cut off like an idle one; read_timeout when shorter), head and body
-- within read_timeout. At most MAX_WAITING connections wait for their request (MAX_PER_ADDR
-- from one address); past a cap the oldest waiting one is closed (503), so a fresh request,
-- which sends its head at once, always gets in (the live view's gate does the same:
-- engine/net/http.c). Complete requests queue for the model, at most MAX_QUEUED; past that
-- new connections stay in the listen queue.
local HEAD_MS, MAX_WAITING, MAX_PER_ADDR, MAX_QUEUED = 5000, 256, 64, 256
-- Stop strings are looked for after every token, each against the text so far and its tail
-- (model.lua's iterate: quadratic in a stop string's length): 100,000 of them took 17 s,
-- 64 of 1 KiB 17 s for 1024 tokens of stories260K (0.25 s without). 32 of 128 bytes: 0.5 s.
local MAX_STOPS, MAX_STOP_BYTES = 32, 128
-- Stop token ids: the engine takes the model's end-of-sequence ids and seer.model.MAX_STOP_IDS
-- (32) more; a request with more is a 400 here, before it is queued.
local MAX_STOP_IDS = require("seer.model").MAX_STOP_IDS

local STATUS = { [200] = "OK", [204] = "No Content", [400] = "Bad Request", [401] = "Unauthorized",
                 [403] = "Forbidden", [404] = "Not Found", [405] = "Method Not Allowed", [408] = "Request Timeout",
                 [413] = "Payload Too Large", [431] = "Request Header Fields Too Large", [500] = "Internal Server Error",
                 [503] = "Service Unavailable" }

local function send_all(fd, s) return sock.send_all(fd, s, 10000) end

local function respond(fd, status, body, ctype, extra)
  local head = { ("HTTP/1.1 %d %s"):format(status, STATUS[status] or "Error"),
                 "Content-Type: " .. (ctype or "application/json"), "Content-Length: " .. #body, "Connection: close" }
  for _, h in ipairs(extra or {}) do head[#head + 1] = h end
  return send_all(fd, table.concat(head, "\r\n") .. "\r\n\r\n" .. body)
end

-- A message as valid UTF-8: it may quote what a client sent (a path of raw bytes, a key cut
-- short in the middle of a character), which json.encode refuses; every byte that does not
-- start a well-formed character becomes U+FFFD, the standard replacement, as in the harness's
-- and the kernel's text from peers (a 500 "cannot encode" instead of the 4xx is what this prevents).
local utf8_fix = require("seer.core.net").utf8_fix

local function error_body(message, kind)
  return json.encode{ error = { message = utf8_fix(tostring(message)), type = kind or "invalid_request_error" } }
end

local function api_error(fd, status, message, kind, extra)
  respond(fd, status, error_body(message, kind), nil, extra)
end

-- A request head (without its blank line): method, path, headers (names lowercased), or nil,
-- status, message.
local function parse_head(head)
  local method, path = head:match("^(%u+) (%S+) HTTP/1%.[01]\r?\n?")
  if not method then return nil, 400, "not an HTTP/1.x request" end
  local headers = {}
  -- Lines end in CRLF; a bare LF, a name with spaces before its colon or a line without one is
  -- refused (RFC 9112), not read one way here and another by whoever relays the request.
  if head:gsub("\r\n", ""):find("[\r\n]") then return nil, 400, "header lines must end in CRLF, not a bare LF or CR" end
  for line in head:gmatch("\r\n([^\r\n]*)") do
    local k, v = line:match("^([!#$%%&'*+%-.^_`|~%w]+):[ \t]*(.-)[ \t]*$")
    if not k then return nil, 400, "a malformed header line (a name of token characters, then a colon, is required)" end
    if k then
      k = k:lower()
      -- two Host or Origin headers: which one a check saw and which one a proxy used could differ
      if headers[k] and (k == "host" or k == "origin" or k == "content-length" or k == "authorization") then
        return nil, 400, ("more than one %s header"):format(k)
      end
      headers[k] = v
    end
  end
  return method, path, headers
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
      local function long(s, what)
        if #s > MAX_STOP_BYTES then
          return ("%s is %d bytes; a stop string is at most %d bytes on this server"):format(what, #s, MAX_STOP_BYTES)
        end
      end
      if type(v) == "string" then return long(v, "stop") end
      if not json.is_array(v) and not empty(v) then return "stop must be a string or a list of strings" end
      if #v > MAX_STOPS then
        return ("stop has %d strings; this server takes at most %d stop strings (of at most %d bytes each)"):format(#v, MAX_STOPS, MAX_STOP_BYTES)
      end
      for i, s in ipairs(v) do
        if type(s) ~= "string" then
          return ("stop[%d] must be a string, got %s (token ids go in stop_token_ids)"):format(i - 1, shown(s))
        end
        local bad = long(s, ("stop[%d]"):format(i - 1))
        if bad then return bad end
      end
    end },
  { "stop_token_ids", function(v, _, ctx)
      if not json.is_array(v) and not empty(v) then return "stop_token_ids must be a list of token ids" end
      if #v > MAX_STOP_IDS then
        return ("stop_token_ids has %d ids; this server takes at most %d"):format(#v, MAX_STOP_IDS)
      end
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
-- prompt: the text, or its token ids (counted against the context already); max_new: the
-- max_new_tokens that fits the context when the request gave none.
local function generate(model, prompt, p, default_tokens, on_piece, max_new)
  local o = gen_opts(p, default_tokens)
  if max_new then o.max_new_tokens = max_new end
  if on_piece then o.stream = function(piece) if piece and piece ~= "" then on_piece(piece) end end end
  local r = model:generate(prompt, o)
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
---@field name? string the model id clients use (default "seer-model"; `seer serve` gives the model directory's name)
---@field host? string default 127.0.0.1
---@field port? integer 0 (default) picks a free port
---@field token? string required as a Bearer token when set
---@field max_tokens? integer the cap on max_tokens (default 1024)
---@field default_tokens? integer max_tokens when a request gives none (default 256)
---@field on_ready? fun(info: {url: string, port: integer, host: string})
---@field max_requests? integer stop after this many (tests)
---@field read_timeout? number seconds a client has to send its request (default 10)
---@field allow_hosts? string[] Host values taken besides this server's own address ("name" or "name:port"; "*" any)
---@field allow_origins? string[] browser origins taken besides the server's own ("http://app.example:3000"; "*" any)

-- ---- who may ask ---------------------------------------------------------------------------
-- A web page the researcher opens can send requests to loopback: a "simple" cross-site POST
-- (text/plain body) needs no preflight, and after DNS rebinding the page's own name points at
-- 127.0.0.1. Its requests carry the page's Host (rebinding) or Origin (cross-site), so only
-- Host values naming this server's address are taken, and only its own Origin.
local function hostport(h) -- a Host value lowercased, with the default port made explicit
  h = h:lower()
  if not h:match(":%d+$") then h = h .. ":80" end
  return h
end

local function access_policy(host, port, allow_hosts, allow_origins)
  local names, any_host, origins, any_origin = {}, host == "0.0.0.0", {}, false
  local function add(h) names[hostport(h)] = true end
  add(("%s:%d"):format(host, port))
  if host:match("^127%.") then
    for _, h in ipairs({ "127.0.0.1", "localhost", "[::1]" }) do add(("%s:%d"):format(h, port)) end
  end
  for _, h in ipairs(allow_hosts or {}) do
    if h == "*" then any_host = true
    elseif h:match(":%d+$") then add(h)
    else add(("%s:%d"):format(h, port)) end
  end
  for _, o in ipairs(allow_origins or {}) do
    if o == "*" then any_origin = true else origins[o:lower():gsub("/+$", "")] = true end
  end
  -- nil when headers may pass, else status and message; plus the CORS headers of an answer
  return function(headers)
    local h = headers.host
    if h and not any_host and not names[hostport(h)] then
      return 403, ("Host %s does not name this server (it serves %s:%d; a browser page sends another Host after DNS rebinding); "
        .. "use the server's address, or start it with --allow-host NAME"):format(shown(h), host, port)
    end
    local o = headers.origin
    if o then
      local lo = o:lower()
      local own = lo:match("^http://([^/]+)$")
      local same = own and (names[hostport(own)] or (h and hostport(own) == hostport(h)))
      if same then return nil end
      if any_origin or origins[lo] then
        return nil, nil, { "Access-Control-Allow-Origin: " .. o, "Vary: Origin" }
      end
      return 403, ("Origin %s is not this server's: requests from web pages of other sites are refused "
        .. "(start the server with --allow-origin ORIGIN to take them)"):format(shown(o))
    end
    return nil
  end
end

-- Constant-time check of `Authorization: Bearer <token>`.
local function authorized(headers, token)
  return not token or same((headers.authorization or ""):match("^Bearer (.+)$"), token)
end

-- ---- the context ----------------------------------------------------------------------------
-- A prompt over the model's context is a 400 before any of it runs (prefill is quadratic: 61,682
-- tokens took 60 s, 4 MiB ~4 hours). Tokenizing costs ~0.25 s per MiB, so a text that cannot fit
-- is refused before tokenizing: no token's text is longer than the longest token string (its
-- bytes, as stored, at least those it stands for), so a text over context x that x 4 (room for
-- a normalizer that composes characters, as NFC does jamo 3:1) has more tokens than the context.
local function longest_token(tok, vocab)
  local n, id = 1, 0
  while true do
    local t = tok:id_to_token(id)
    if t then n = math.max(n, #t) elseif id >= vocab then break end -- added tokens may follow the model's vocabulary
    id = id + 1
  end
  return n
end

local function over_context(ctx, np, nc, chat)
  return ("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the %s, %d in the completion). "
    .. "Please reduce the length of the %s or completion."):format(ctx, np + nc, np, chat and "messages" or "prompt", nc,
    chat and "messages" or "prompt")
end

local function too_long_text(ctx, bytes, limit, chat)
  return ("This model's maximum context length is %d tokens. However, the %s is %d bytes, more than %d tokens can hold "
    .. "(at most %d bytes here). Please reduce the length of the %s."):format(ctx, chat and "conversation" or "prompt", bytes,
    ctx, limit, chat and "messages" or "prompt")
end

---Serves until interrupted (Ctrl-C) or max_requests.
---@param opts seerserve.Options
function M.serve(opts)
  -- a misspelt option is an error, not a server without it (the rest of the API refuses them)
  opts = require("seer.checks").options("serve", opts, { model = "any", name = "string", host = "string", port = "number",
    token = "string", max_tokens = "number", default_tokens = "number", on_ready = "function", max_requests = "number",
    read_timeout = "number", allow_hosts = "table", allow_origins = "table" }, 2)
  local model = opts.model
  local name = opts.name or "seer-model"
  local host = opts.host or "127.0.0.1"
  local cap = opts.max_tokens or 1024
  local default_tokens = math.min(opts.default_tokens or 256, cap)
  local rt = opts.read_timeout
  if rt ~= nil and not (type(rt) == "number" and rt > 0 and rt <= 86400) then
    error(("seer serve: read_timeout must be a number of seconds from 0 (exclusive) to 86400, got %s"):format(tostring(rt)), 2)
  end
  local read_ms = rt and math.ceil(rt * 1000) or READ_MS
  local head_ms = math.min(HEAD_MS, read_ms)
  local fd, port = sock.listen_tcp(host, opts.port or 0)
  if not fd then
    error(("seer serve: cannot listen on %s:%d (%s); use 127.0.0.1, or 0.0.0.0 for every interface"):format(host, opts.port or 0, port), 2)
  end
  local ctx = {
    model = model, name = name, token = opts.token, cap = cap, default_tokens = default_tokens,
    access = access_policy(host, port, opts.allow_hosts, opts.allow_origins),
    context = model.config.max_position_embeddings,
    token_bytes = model.tokenizer and longest_token(model.tokenizer, model.config.vocab_size) or nil,
  }
  local info = { url = ("http://%s:%d/v1"):format(host, port), port = port, host = host }
  if opts.on_ready then opts.on_ready(info) end

  local conns, queue = {}, {} -- connections being read (or lingering); complete requests, oldest first
  local served = 0
  local now = process.now_ms

  local function drop(c)
    sock.close(c.fd)
    for k, x in ipairs(conns) do if x == c then table.remove(conns, k) break end end
  end
  -- After refusing a request that may still be arriving (a body over the limit, an oversized
  -- head, a refused token or origin): stop sending and read what the client still sends,
  -- discarding it, for up to LINGER_MS or LINGER_BYTES, so that a client still writing gets to
  -- read the answer instead of a reset connection ("lingering close", as HTTP servers do).
  local LINGER_MS, LINGER_BYTES = 2000, 64 * 1024 * 1024
  local function refuse(c, status, message, extra, linger)
    served = served + 1
    pcall(api_error, c.fd, status, message, status == 401 and "authentication_error" or nil, extra)
    if linger then
      sock.shutdown_write(c.fd)
      c.state, c.deadline, c.buf, c.chunks, c.got = "linger", now() + LINGER_MS, nil, nil, 0
    else
      drop(c)
    end
  end
  local function complete(c, body)
    c.body, c.state, c.buf, c.chunks = body, "queued", nil, nil
    for k, x in ipairs(conns) do if x == c then table.remove(conns, k) break end end
    queue[#queue + 1] = c
  end
  -- the head is in: checks that need no body, then the body's length
  local function on_head(c, head, rest)
    local method, path, headers = parse_head(head)
    if not method then return refuse(c, path, headers, nil, true) end
    local st, msg, cors = ctx.access(headers)
    if st then return refuse(c, st, msg, nil, true) end
    if method == "OPTIONS" then -- a CORS preflight (only an allowed origin gets this far)
      served = served + 1
      pcall(respond, c.fd, 204, "", "text/plain", { "Access-Control-Allow-Methods: GET, POST, OPTIONS",
        "Access-Control-Allow-Headers: Authorization, Content-Type", "Access-Control-Max-Age: 600", unpack(cors or {}) })
      sock.shutdown_write(c.fd)
      c.state, c.deadline, c.buf, c.got = "linger", now() + LINGER_MS, nil, 0
      return
    end
    if not authorized(headers, ctx.token) then
      return refuse(c, 401, "a valid Authorization: Bearer token is required", cors, true)
    end
    if headers["transfer-encoding"] then
      return refuse(c, 400, "chunked request bodies are not supported; send Content-Length", cors, true)
    end
    local cl = headers["content-length"] or "0"
    local len = cl:match("^%d+$") and #cl <= 12 and tonumber(cl) or nil
    if not len then return refuse(c, 400, "bad Content-Length (digits only)", cors, true) end
    if len > MAX_BODY then return refuse(c, 413, "the request body is larger than 4 MiB", cors, true) end
    c.method, c.path, c.headers, c.cors, c.need = method, path, headers, cors, len
    if #rest >= len then return complete(c, rest:sub(1, len)) end
    c.state, c.buf, c.chunks, c.got = "body", nil, { rest }, #rest
    c.deadline = c.t0 + read_ms
  end
  -- reads what a connection has sent (a few reads, so one fast sender cannot keep the loop)
  local function on_readable(c)
    for _ = 1, 16 do
      local got = sock.recv(c.fd)
      if got == nil then return end
      if got == "" then -- the peer closed its side
        if c.state == "linger" then return drop(c) end
        return refuse(c, 400, "the connection closed mid-request")
      end
      if c.state == "linger" then
        c.got = c.got + #got
        if c.got >= LINGER_BYTES then return drop(c) end
      elseif c.state == "head" then
        local from = math.max(1, #c.buf - 2)
        c.buf = c.buf .. got
        local e = c.buf:find("\r\n\r\n", from, true)
        if (e and e > MAX_HEAD) or (not e and #c.buf > MAX_HEAD) then
          return refuse(c, 431, "the request head is larger than 16 KiB", nil, true)
        end
        if e then return on_head(c, c.buf:sub(1, e - 1), c.buf:sub(e + 4)) end
      else -- body
        c.chunks[#c.chunks + 1] = got
        c.got = c.got + #got
        if c.got >= c.need then return complete(c, table.concat(c.chunks):sub(1, c.need)) end
      end
    end
  end

  -- the peer's IPv4 address, for the per-address cap
  local ffi = require "ffi"
  pcall(ffi.cdef, "int getpeername(int fd, void *addr, unsigned int *len);")
  local sa, salen = ffi.new("struct seer_sockaddr_in"), ffi.new("unsigned int[1]")
  local function peer(cfd)
    salen[0] = ffi.sizeof(sa)
    if ffi.C.getpeername(cfd, sa, salen) ~= 0 then return 0 end
    return tonumber(sa.sin_addr)
  end
  -- Makes room for one more connection from addr: closes the oldest lingering one, else the
  -- oldest waiting one (503), of addr when it is at its cap, else of all when they are.
  local function make_room(addr)
    local n, of_addr = #conns, 0
    for _, c in ipairs(conns) do if c.addr == addr then of_addr = of_addr + 1 end end
    local scope
    if of_addr >= MAX_PER_ADDR then scope = addr elseif n >= MAX_WAITING then scope = false else return end
    local victim
    for _, want in ipairs({ "linger", "wait" }) do
      for _, c in ipairs(conns) do
        if (scope == false or c.addr == scope) and (c.state == "linger") == (want == "linger") then victim = c break end
      end
      if victim then break end
    end
    if not victim then return end
    if victim.state ~= "linger" then -- best effort, never blocking
      local b = error_body("too many connections are waiting to send their request; this one waited longest", "server_error")
      sock.send_some(victim.fd, ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
        .. "Connection: close\r\n\r\n%s"):format(#b, b))
    end
    drop(victim)
  end

  local accept_paused_until = 0
  local function step()
    -- wait for the listener and the connections being read, at most until the nearest deadline
    local list = {}
    local listening = #queue < MAX_QUEUED and now() >= accept_paused_until
    if listening then list[1] = { fd, sock.POLLIN } end
    local t = now()
    local timeout = #queue > 0 and 0 or 1000
    for _, c in ipairs(conns) do
      list[#list + 1] = { c.fd, sock.POLLIN }
      timeout = math.min(timeout, math.max(0, c.deadline - t))
    end
    if not listening and #queue == 0 then timeout = math.min(timeout, math.max(0, accept_paused_until - t)) end
    local rev = sock.poll(list, timeout)
    local off = listening and 1 or 0
    local ready = {}
    for k = 1, #conns do if rev[k + off] ~= 0 then ready[#ready + 1] = conns[k] end end
    for _, c in ipairs(ready) do on_readable(c) end
    -- deadlines
    t = now()
    for k = #conns, 1, -1 do
      local c = conns[k]
      if c and c.deadline <= t then
        if c.state == "linger" then drop(c)
        else refuse(c, 408, "the request did not arrive in time") end
      end
    end
    -- new connections (after the ones already here had their turn)
    if listening and rev[1] ~= 0 then
      local accepted = 0
      for _ = 1, 64 do
        local cfd = sock.accept(fd)
        if not cfd then break end
        accepted = accepted + 1
        local addr = peer(cfd)
        make_room(addr)
        local c = { fd = cfd, addr = addr, t0 = now(), state = "head", buf = "" }
        c.deadline = c.t0 + head_ms
        conns[#conns + 1] = c
      end
      -- readable but nothing accepted (out of descriptors): try again shortly, not in a spin
      if accepted == 0 then accept_paused_until = now() + 50 end
    end
    -- one complete request; the time it takes does not count against those still arriving
    local c = table.remove(queue, 1)
    if c then
      local t0 = now()
      served = served + 1
      local okh, herr = pcall(M._answer, c, ctx)
      if not okh then
        if tostring(herr):match("interrupted$") then sock.close(c.fd); error(herr, 0) end
        pcall(api_error, c.fd, 500, "internal error: " .. tostring(herr):sub(1, 300), "server_error")
      end
      sock.close(c.fd)
      local spent = now() - t0
      for _, w in ipairs(conns) do if w.state ~= "linger" then w.t0, w.deadline = w.t0 + spent, w.deadline + spent end end
    end
  end

  local ok, err = pcall(function()
    while not opts.max_requests or served < opts.max_requests do step() end
  end)
  for _, c in ipairs(conns) do sock.close(c.fd) end
  for _, c in ipairs(queue) do sock.close(c.fd) end
  sock.close(fd)
  if not ok then error(err, 0) end
end

-- One complete request (c: fd, method, path, headers, body, cors).
function M._answer(c, ctx)
  local fd, method, path, body, cors = c.fd, c.method, c.path, c.body, c.cors
  local model, name, cap, default_tokens = ctx.model, ctx.name, ctx.cap, ctx.default_tokens
  local function fail(status, message, kind) return api_error(fd, status, message, kind, cors) end
  local function ok(json_body) return respond(fd, 200, json_body, nil, cors) end
  path = path:gsub("%?.*$", "")
  if path == "/v1/models" then
    if method ~= "GET" then return fail(405, "use GET") end
    return ok(json.encode{ object = "list", data = { { id = name, object = "model", owned_by = "seer" } } })
  end
  local chat = path == "/v1/chat/completions"
  if not chat and path ~= "/v1/completions" then return fail(404, "no route " .. path .. " (this server has /v1/chat/completions, /v1/completions, /v1/models)") end
  if method ~= "POST" then return fail(405, "use POST") end
  local okj, p = pcall(json.decode, body)
  if not okj then -- the decoder's reason (nesting too deep, not UTF-8, where), printable ASCII only
    local why = tostring(p):gsub("^json%.decode: ", ""):gsub("[^\32-\126]", "?"):sub(1, 200)
    return fail(400, "the body is not JSON: " .. why)
  end
  local bad = check_params(p, { cap = cap, default_tokens = default_tokens, vocab = model.config.vocab_size, chat = chat })
  if bad then return fail(400, bad) end
  if set(p.model) and p.model ~= name then return fail(404, ("model %q is not served here (this server has %q)"):format(tostring(p.model), name)) end
  local context, tok = ctx.context, model.tokenizer
  local byte_limit = ctx.token_bytes and context * ctx.token_bytes * 4
  local text
  if chat then
    if not json.is_array(p.messages) or #p.messages == 0 then return fail(400, "messages must be a non-empty list") end
    local msgs = {}
    local templated = tok and tok.chat_template
    local bytes = 0
    for i, m in ipairs(p.messages) do
      if not json.is_object(m) or type(m.role) ~= "string" then
        return fail(400, ("messages[%d] needs a role and a string content"):format(i - 1))
      end
      -- a message's other fields (name, tool_calls, ...) would not reach the prompt: taken only
      -- empty (null, false, "", [] or {}, as a client replaying an answer sends them)
      for k, v in pairs(m) do
        if k ~= "role" and k ~= "content" and set(v) and v ~= false and v ~= "" and not empty(v) then
          return fail(400, ("messages[%d].%s is not supported by this server (a message is a role and a content; "
            .. "the prompt would not show %s): remove it, or put it in the content"):format(i - 1, tostring(k):sub(1, 60), tostring(k):sub(1, 60)))
        end
      end
      if not templated and m.role ~= "system" and m.role ~= "user" and m.role ~= "assistant" then
        return fail(400, ("messages[%d].role is %s; this model has no chat template, so the roles are system, user and assistant")
          :format(i - 1, shown(m.role)))
      end
      local ct, why = content_text(m.content)
      if not ct then return fail(400, ("messages[%d] %s"):format(i - 1, why)) end
      msgs[i] = { role = m.role, content = ct }
      bytes = bytes + #ct
    end
    -- the contents alone cannot fit: refused before the template renders them
    if byte_limit and bytes > byte_limit then return fail(400, too_long_text(context, bytes, byte_limit, true)) end
    local okr, r = pcall(render, model, msgs)
    if not okr then return fail(400, "the chat template failed: " .. tostring(r):sub(1, 200)) end
    text = r
  else
    if type(p.prompt) ~= "string" then return fail(400, "prompt must be a string") end
    text = p.prompt
  end
  -- the prompt and the completion within the context (as vLLM: a 400 saying by how much);
  -- without max_tokens the completion gets what is left, up to the default
  local prompt, max_new = text, nil
  if tok then
    if #text > byte_limit then return fail(400, too_long_text(context, #text, byte_limit, chat)) end
    local ids = tok:encode(text, { add_special_tokens = true })
    if #ids == 0 then return fail(400, "the prompt has no tokens") end
    local asked = set(p.max_tokens) and p.max_tokens or set(p.max_completion_tokens) and p.max_completion_tokens or nil
    local want = asked or math.max(set(p.min_tokens) and p.min_tokens or 0, 1)
    if #ids + want > context then return fail(400, over_context(context, #ids, want, chat)) end
    if not asked then max_new = math.min(default_tokens, context - #ids) end
    prompt = ids
  end
  -- A client that closed its connection gets no answer: its generation stops at the next token
  -- (before any when it is gone already), instead of running to max_tokens while the clients
  -- queued behind it wait (40 abandoned requests of 500 tokens held the next one 3 s).
  local gone = {}
  local function alive()
    if sock.wait(fd, sock.POLLIN, 0) then
      local got = sock.recv(fd) -- "" at end of stream (or an error); bytes past the body are dropped
      if got == "" then error(gone, 0) end
    end
  end
  if not pcall(alive) then return end
  local id = ("seer-%x%x"):format(os.time(), math.random(0, 0xffffff))
  local created = os.time()
  local object = chat and "chat.completion" or "text_completion"
  if p.stream == true then
    local head = { "HTTP/1.1 200 OK", "Content-Type: text/event-stream", "Cache-Control: no-cache", "Connection: close" }
    for _, h in ipairs(cors or {}) do head[#head + 1] = h end
    if not send_all(fd, table.concat(head, "\r\n") .. "\r\n\r\n") then return end
    -- a client that stops reading ends the answer (not 10 s per piece it does not read)
    local function event(choice, usage)
      local chunk = { id = id, object = object .. ".chunk", created = created, model = name, choices = { choice }, usage = usage }
      if not send_all(fd, "data: " .. json.encode(chunk) .. "\n\n") then error(gone, 0) end
    end
    local okg, _, finish, np, nc = pcall(generate, model, prompt, p, default_tokens, function(piece)
      alive()
      event(chat and { index = 0, delta = { content = piece } } or { index = 0, text = piece })
    end, max_new)
    if not okg then
      if _ == gone then return end
      error(_, 0)
    end
    if not pcall(event, chat and { index = 0, delta = json.object(), finish_reason = finish } or { index = 0, text = "", finish_reason = finish },
          { prompt_tokens = np, completion_tokens = nc, total_tokens = np + nc }) then return end
    send_all(fd, "data: [DONE]\n\n")
    return
  end
  local okg, out, finish, np, nc = pcall(generate, model, prompt, p, default_tokens, alive, max_new)
  if not okg then
    if out == gone then return end
    error(out, 0)
  end
  local choice = chat and { index = 0, finish_reason = finish, message = { role = "assistant", content = out } }
                      or { index = 0, finish_reason = finish, text = out }
  return ok(json.encode{ id = id, object = object, created = created, model = name, choices = { choice },
                         usage = { prompt_tokens = np, completion_tokens = nc, total_tokens = np + nc } })
end

return M
