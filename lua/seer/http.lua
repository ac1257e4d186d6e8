--- seer.http: an HTTP(S) client for scripts and notebooks (libcurl, loaded on first use):
--- requests with timeouts, bounded responses, retries with backoff (Retry-After honoured),
--- JSON helpers and streaming, including server-sent events. Ctrl-C (or a kernel interrupt)
--- stops a request at once. docs/http.md.
---
---   local http = require "seer.http"
---   local r = http.get("https://example.org/data.json", { timeout = 10 })
---   if r.ok then print(r:json().name) end
---   local out = http.post_json("https://api.example.org/v1/x", { q = 1 }, { headers = { Authorization = "Bearer " .. key } })
---   http.sse("https://host/stream", { method = "POST", json = body }, function(ev) print(ev.data) end)
---
--- Inside a sandbox the network is off unless SandboxConfig.network allows it.
---@class seerhttp
local M = {}

local core = require "seer.core.httpc"
local json = require "seer.json"

local RETRY_STATUS = { [408] = true, [409] = true, [429] = true, [500] = true, [502] = true, [503] = true, [504] = true }

---@class seerhttp.Response
---@field status integer
---@field ok boolean status 200..299
---@field headers table<string, string> names lowercased; repeated headers joined with ", "
---@field body string
---@field seconds number the last attempt's time
---@field attempts integer
---@field url string
local Response = {}
Response.__index = Response

---The body decoded as JSON (an error names the URL and shows the start of the body).
---@return any
function Response:json()
  local ok, v = pcall(json.decode, self.body)
  if not ok then
    error(("seer.http: %s: the response is not JSON (HTTP %d, %d bytes): %s"):format(self.url_shown, self.status,
      #self.body, self.body:sub(1, 200)), 2)
  end
  return v
end

---Raises unless the status is 2xx: "HTTP 404 Not Found" with the start of the body.
---@return seerhttp.Response self
function Response:raise_for_status()
  if not self.ok then
    error(("seer.http: %s %s: HTTP %d%s"):format(self.method, self.url_shown, self.status,
      self.body ~= "" and (": " .. self.body:sub(1, 300)) or ""), 2)
  end
  return self
end

local function shown(url)
  return (url:gsub("^(%a+://)[^/@]*@", "%1"):gsub("[?#].*$", ""))
end

local function parse_headers(raw)
  local h = {}
  for line in raw:gmatch("[^\r\n]+") do
    local k, v = line:match("^([^:%s]+):%s*(.-)%s*$")
    if k then
      k = k:lower()
      h[k] = h[k] and (h[k] .. ", " .. v) or v
    end
  end
  return h
end

local OPTS = { url = true, method = true, headers = true, body = true, json = true, timeout = true, connect_timeout = true,
               retries = true, max_bytes = true, stream = true, follow_redirects = true, proxy = true, backoff = true, tls = true }

local function check_opts(o, where)
  if type(o) ~= "table" then error(("seer.http.%s: options must be a table"):format(where), 3) end
  for k in pairs(o) do
    if not OPTS[k] then
      local names = {}
      for n in pairs(OPTS) do names[#names + 1] = n end
      table.sort(names)
      error(("seer.http.%s: unknown option %q (options: %s)"):format(where, tostring(k), table.concat(names, ", ")), 3)
    end
  end
end

local function sleep_s(s)
  require("seer.process").sleep_ms(math.floor(s * 1000))
end

---@class seerhttp.Options
---@field url string http:// or https://
---@field method? string default GET (POST when there is a body)
---@field headers? table<string, string> name -> value
---@field body? string the request body
---@field json? any encoded as the body, with Content-Type: application/json
---@field timeout? number seconds for each attempt (default 60; 0: none)
---@field connect_timeout? number seconds (default 30)
---@field retries? integer retries after a transient failure or HTTP 408/409/429/5xx (default 2)
---@field backoff? number the first wait in seconds (default 0.5; doubles, at most 8)
---@field max_bytes? integer the response body's cap (default 64 MiB)
---@field stream? fun(chunk: string): boolean? receives the body as it arrives (return true to stop); the body is then not kept
---@field follow_redirects? boolean GET and HEAD only (default true)
---@field proxy? string a proxy URL
---@field tls? {ca_pem?: string, cert_pem?: string, key_pem?: string} PEM text: the CA the server's certificate must chain to (instead of the system store), a client certificate and its key (mutual TLS)

---One request. Returns the response whatever its status; raises when no response came after
---the retries (the message names the method, the URL without its query, and the cause).
---@param opts seerhttp.Options
---@return seerhttp.Response
function M.request(opts)
  check_opts(opts, "request")
  if type(opts.url) ~= "string" then error("seer.http.request: url must be a string", 2) end
  local headers = {}
  local body = opts.body
  if opts.json ~= nil then
    if body ~= nil then error("seer.http.request: give body or json, not both", 2) end
    body = json.encode(opts.json)
    headers[#headers + 1] = "Content-Type: application/json"
  end
  if body ~= nil and type(body) ~= "string" then error("seer.http.request: body must be a string (or use json =)", 2) end
  for k, v in pairs(opts.headers or {}) do
    if type(k) ~= "string" or (type(v) ~= "string" and type(v) ~= "number") then
      error("seer.http.request: headers must map names to strings", 2)
    end
    headers[#headers + 1] = k .. ": " .. tostring(v)
  end
  local method = opts.method and opts.method:upper() or (body and "POST" or "GET")
  local timeout = opts.timeout == nil and 60 or opts.timeout
  local retries = opts.retries == nil and 2 or opts.retries
  if type(retries) ~= "number" or not (retries >= 0 and retries <= 20) then error("seer.http.request: retries must be 0..20", 2) end
  local wait = opts.backoff or 0.5
  local received = false
  local on_chunk
  if opts.stream then
    if type(opts.stream) ~= "function" then error("seer.http.request: stream must be a function", 2) end
    on_chunk = function(c) received = true return opts.stream(c) end
  end
  local req = { url = opts.url, method = method, headers = headers, body = body,
                timeout_ms = math.floor(timeout * 1000), connect_timeout_ms = opts.connect_timeout and math.floor(opts.connect_timeout * 1000) or nil,
                max_bytes = opts.max_bytes, follow_redirects = opts.follow_redirects, proxy = opts.proxy, on_chunk = on_chunk }
  if opts.tls ~= nil then
    if type(opts.tls) ~= "table" then error("seer.http.request: tls must be a table {ca_pem?, cert_pem?, key_pem?}", 2) end
    for k, v in pairs(opts.tls) do
      if (k ~= "ca_pem" and k ~= "cert_pem" and k ~= "key_pem") or type(v) ~= "string" then
        error(("seer.http.request: tls.%s is not ca_pem, cert_pem or key_pem (PEM text)"):format(tostring(k)), 2)
      end
    end
    req.ca_pem, req.cert_pem, req.key_pem = opts.tls.ca_pem, opts.tls.cert_pem, opts.tls.key_pem
  end
  local attempt = 0
  while true do
    attempt = attempt + 1
    local status, raw, rbody, secs = core.request(req)
    -- A stream that already delivered data cannot be replayed: no retry after that.
    local can_retry = attempt <= retries and not received
    if status then
      local r = setmetatable({ status = status, ok = status >= 200 and status < 300, headers = parse_headers(raw),
                               body = rbody, seconds = secs, attempts = attempt, url = opts.url,
                               url_shown = shown(opts.url), method = method }, Response)
      if not (RETRY_STATUS[status] and can_retry) then return r end
      local ra = tonumber(r.headers["retry-after"] or "")
      sleep_s(math.min(ra and math.max(ra, 0) or wait, 60))
    else
      local msg, transient = raw, rbody
      if not (transient and can_retry) then
        error(msg .. (attempt > 1 and (" (after %d attempts)"):format(attempt) or ""), 2)
      end
      sleep_s(wait)
    end
    wait = math.min(wait * 2, 8)
  end
end

local function with(url, opts, extra)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  for k, v in pairs(extra) do o[k] = v end
  o.url = url
  return o
end

---GET url.
---@param url string
---@param opts? seerhttp.Options
---@return seerhttp.Response
function M.get(url, opts)
  return M.request(with(url, opts, { method = "GET" }))
end

---POST a string body.
---@param url string
---@param body string
---@param opts? seerhttp.Options
---@return seerhttp.Response
function M.post(url, body, opts)
  return M.request(with(url, opts, { method = "POST", body = body }))
end

---GET url and decode its JSON; raises on a non-2xx status.
---@param url string
---@param opts? seerhttp.Options
---@return any
function M.get_json(url, opts)
  return M.request(with(url, opts, { method = "GET" })):raise_for_status():json()
end

---POST a value as JSON and decode the JSON answer; raises on a non-2xx status.
---@param url string
---@param value any
---@param opts? seerhttp.Options
---@return any
function M.post_json(url, value, opts)
  return M.request(with(url, opts, { method = "POST", json = value })):raise_for_status():json()
end

---Server-sent events: calls on_event({event, data, id}) for each event as it arrives (data
---lines joined with "\n"; return true to stop). Returns the response (its body empty).
---Raises on a non-2xx status.
---@param url string
---@param opts? seerhttp.Options
---@param on_event fun(ev: {event: string, data: string, id?: string}): boolean?
---@return seerhttp.Response
function M.sse(url, opts, on_event)
  if type(on_event) ~= "function" then error("seer.http.sse(url, opts, on_event): on_event must be a function", 2) end
  local buf, ev, data = "", {}, {}
  local stop = false
  local status_body = {}
  local function dispatch()
    if #data > 0 then
      if on_event({ event = ev.event or "message", data = table.concat(data, "\n"), id = ev.id }) then stop = true end
    end
    ev, data = {}, {}
  end
  local o = with(url, opts, {})
  o.stream = function(chunk)
    status_body[#status_body + 1] = #table.concat(status_body) < 4096 and chunk or nil
    buf = buf .. chunk
    while not stop do
      local line, rest = buf:match("^(.-)\r?\n(.*)$")
      if not line then break end
      buf = rest
      if line == "" then dispatch()
      elseif line:sub(1, 1) ~= ":" then
        local field, value = line:match("^([^:]*):? ?(.*)$")
        if field == "data" then data[#data + 1] = value
        elseif field == "event" then ev.event = value
        elseif field == "id" then ev.id = value end
      end
    end
    return stop
  end
  local r = M.request(o)
  if not r.ok then
    r.body = table.concat(status_body)
    r:raise_for_status()
  end
  -- An event cut off by the end of the stream (no blank line after it) is not dispatched (the
  -- SSE spec's rule).
  return r
end

return M
