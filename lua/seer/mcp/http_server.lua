--- seer.mcp.http_server: MCP's streamable HTTP transport for a seer.mcp.server. One endpoint,
--- `/mcp`: POST carries one JSON-RPC message (answered with JSON, or with server-sent events
--- when the client accepts them and the call reports progress), GET opens an event stream for
--- server notifications, DELETE ends a session. `Mcp-Session-Id` is issued on initialize and
--- required after; `Origin` is checked (absent, the server's own, or one allowed with
--- --allow-origin); every request needs `Authorization: Bearer <token>`. HTTP itself runs in C
--- (engine/mcp/http_transport.c, seer.core.mcphttp): requests wait there in a queue whose
--- eventfd the server's loop polls with its other inputs.
local M = {}

local json = require "seer.json"
local net = require "seer.net"
local server = require "seer.mcp.server"

local MAX_SESSIONS = 256

local supported = {}
for _, v in ipairs(server.PROTOCOL_VERSIONS) do supported[v] = true end

-- Compares two strings in a time that does not depend on where they differ.
local function same_secret(a, b)
  if type(a) ~= "string" or #a ~= #b then return false end
  local diff = 0
  for i = 1, #a do diff = bit.bor(diff, bit.bxor(a:byte(i), b:byte(i))) end
  return diff == 0
end

local function normalize_origin(o)
  return (o:lower():gsub("/+$", ""))
end

---Serves srv over streamable HTTP until the process is stopped.
---@param srv table a seer.mcp.server with its tools
---@param opts {host?: string, port?: integer, token?: string, allow_origins?: string[]} token: at least 16 characters; nil generates one and logs it
function M.serve(srv, opts)
  opts = opts or {}
  local mcphttp = require "seer.core.mcphttp"
  local host = opts.host or "127.0.0.1"
  local token = opts.token
  local generated = not token
  if generated then token = net.new_key():sub(1, 48) end
  if type(token) ~= "string" or #token < 16 then
    error(("seer mcp --http: the token must be at least 16 characters (got %d); leave --token out to get a random one")
      :format(type(token) == "string" and #token or 0), 0)
  end
  -- The token goes to C too: a gate there answers requests without it before they cost a
  -- thread or a place in the queue (docs/mcp.md, "HTTP: limits").
  local h = mcphttp.serve{ host = host, port = opts.port or 0, max_body = server.MAX_LINE, token = token }
  local port = h.port
  local hosthdr = host:find(":", 1, true) and ("[" .. host .. "]") or host
  srv:log("serving MCP (streamable HTTP) at http://%s:%d/mcp", hosthdr, port)
  if generated then
    srv:log("bearer token (send 'Authorization: Bearer <token>'): %s", token)
  end
  if host ~= "127.0.0.1" and host ~= "localhost" and host ~= "::1" then
    srv:log("warning: listening on %s, not only on this machine; anyone who can reach it and has the token can run code", host)
  end
  local origins = {}
  for _, o in ipairs{ ("http://127.0.0.1:%d"):format(port), ("http://localhost:%d"):format(port),
                      ("http://[::1]:%d"):format(port), ("http://%s:%d"):format(hosthdr, port) } do
    origins[normalize_origin(o)] = true
  end
  for _, o in ipairs(opts.allow_origins or {}) do origins[normalize_origin(o)] = true end

  local sessions, nsessions = {}, 0

  local function reply(req, status, body, headers)
    headers = headers or {}
    headers["Cache-Control"] = "no-store"
    if body and not headers["Content-Type"] then headers["Content-Type"] = "application/json" end
    h:respond(req.id, status, headers, body or "")
  end

  local function reply_error(req, status, code, message, headers)
    reply(req, status, json.encode{ jsonrpc = "2.0", id = json.null, error = { code = code, message = message } }, headers)
  end

  local function end_session(id)
    local s = sessions[id]
    if not s then return end
    sessions[id] = nil
    nsessions = nsessions - 1
    for rid in pairs(s.streams) do h:finish(rid) end
    srv:close_session(s.sess)
  end

  local function session_of(req)
    local sid = req.headers["mcp-session-id"]
    if not sid then
      reply_error(req, 400, server.INVALID_REQUEST,
        "invalid request: the Mcp-Session-Id header is missing (send the one the initialize response gave)")
      return nil
    end
    local s = sessions[sid]
    if not s then
      reply_error(req, 404, server.INVALID_REQUEST, "unknown or ended MCP session: initialize a new one")
      return nil
    end
    local pv = req.headers["mcp-protocol-version"]
    if pv and not supported[pv] then
      reply_error(req, 400, server.INVALID_REQUEST, ("unsupported MCP-Protocol-Version %q (supported: %s)")
        :format(pv, table.concat(server.PROTOCOL_VERSIONS, ", ")))
      return nil
    end
    return s, sid
  end

  local function post(req)
    local ctype = (req.headers["content-type"] or ""):lower()
    if not ctype:find("application/json", 1, true) then
      return reply_error(req, 415, server.INVALID_REQUEST, "the body must be one JSON-RPC message with Content-Type: application/json")
    end
    local ok, msg = server.decode(req.body)
    if not ok then
      return reply_error(req, 400, server.PARSE_ERROR, "parse error: " .. server.valid_utf8(tostring(msg):gsub("^json%.decode: ", ""):sub(1, 300)))
    end
    local is_init = type(msg) == "table" and msg.method == "initialize" and msg.id ~= nil
    local s, sid
    if is_init then
      if nsessions >= MAX_SESSIONS then
        return reply_error(req, 503, server.INTERNAL_ERROR, ("too many MCP sessions (%d); end some with DELETE"):format(MAX_SESSIONS))
      end
      sid = net.uuid()
      s = { sess = srv:new_session(sid), streams = {} }
    else
      s, sid = session_of(req)
      if not s then return end
      s.last_used = os.time()
    end
    local accept = (req.headers["accept"] or ""):lower()
    local is_request = type(msg) == "table" and msg.id ~= nil and msg.method ~= nil
    local params = is_request and type(msg.params) == "table" and msg.params or {}
    local meta = type(params._meta) == "table" and params._meta or {}
    local streaming = is_request and msg.method == "tools/call" and meta.progressToken ~= nil
                      and accept:find("text/event-stream", 1, true) ~= nil
    local headers = { ["Mcp-Session-Id"] = sid }
    if streaming then
      headers["Content-Type"] = "text/event-stream"
      headers["Cache-Control"] = "no-store"
      if not h:stream(req.id, 200, headers) then return end
    end
    local answered = false
    srv:handle_message(s.sess, msg, function(m)
      if answered then return end
      local text = server.encode(m)
      local final = m.method == nil
      if streaming then
        h:send(req.id, "event: message\ndata: " .. text .. "\n\n")
        if final then
          answered = true
          h:finish(req.id)
        end
      elseif final then
        answered = true
        local code = m.error and m.error.code
        local status = (code == server.PARSE_ERROR or code == server.INVALID_REQUEST) and 400 or 200
        reply(req, status, text, headers)
      end
    end)
    if is_init then
      if s.sess.initialized then
        sessions[sid] = s
        nsessions = nsessions + 1
      else
        srv:close_session(s.sess)
      end
    end
    if not is_request and not answered then
      -- notifications and responses: accepted, nothing to say
      h:respond(req.id, 202, { ["Mcp-Session-Id"] = sid }, "")
    end
  end

  local function get(req)
    local s = session_of(req)
    if not s then return end
    if not (req.headers["accept"] or ""):lower():find("text/event-stream", 1, true) then
      return reply(req, 406, "GET /mcp opens an event stream: send Accept: text/event-stream\n", { ["Content-Type"] = "text/plain" })
    end
    -- This server sends no requests or notifications outside a call; the stream carries
    -- keepalives until the session ends.
    if h:stream(req.id, 200, { ["Content-Type"] = "text/event-stream", ["Cache-Control"] = "no-store" }) then
      s.streams[req.id] = true
    end
  end

  local function handle(req)
    local path = req.path:gsub("/+$", "")
    if path ~= "/mcp" then
      return reply(req, 404, "not found: the MCP endpoint is /mcp\n", { ["Content-Type"] = "text/plain" })
    end
    local origin = req.headers["origin"]
    if origin and not origins[normalize_origin(origin)] then
      srv:log("refused a request from Origin %s", origin:sub(1, 200))
      return reply_error(req, 403, server.INVALID_REQUEST, "forbidden: this Origin may not use this server (see --allow-origin)")
    end
    local auth = req.headers["authorization"] or ""
    local given = auth:match("^[Bb][Ee][Aa][Rr][Ee][Rr]%s+(%S+)%s*$")
    if not same_secret(given, token) then
      return reply_error(req, 401, server.INVALID_REQUEST,
        "unauthorized: send the server's token as 'Authorization: Bearer <token>'",
        { ["WWW-Authenticate"] = 'Bearer realm="seer mcp"' })
    end
    if req.method == "POST" then return post(req) end
    if req.method == "GET" then return get(req) end
    if req.method == "DELETE" then
      local _, sid = session_of(req)
      if sid then
        end_session(sid)
        reply(req, 200, nil)
      end
      return
    end
    reply(req, 405, "method not allowed: use POST, GET or DELETE\n", { ["Allow"] = "GET, POST, DELETE", ["Content-Type"] = "text/plain" })
  end

  srv:add_source(h.fd, function()
    while true do
      local req = h:next()
      if not req then break end
      local ok, err = xpcall(handle, debug.traceback, req)
      if not ok then
        srv:log("HTTP %s %s failed: %s", req.method, req.path, err)
        reply_error(req, 500, server.INTERNAL_ERROR, "internal error")
      end
    end
  end)
  srv:on_exit(function()
    for id in pairs(sessions) do end_session(id) end
    h:close()
  end)
  srv:run()
end

return M
