--- seer.mcp.server: the core of seer's MCP servers (JSON-RPC 2.0, MCP lifecycles 2025-06-18 and
--- 2025-11-25). It knows the protocol and nothing of notebooks: a server is a name, a version,
--- instructions and a list of tools, each one table (name, title, description, inputSchema,
--- annotations, run). Transports (stdio here, streamable HTTP in seer.mcp.http_server) feed it
--- messages and give it a `send` function per message.
---
--- One event loop, no threads: every tools/call runs in a coroutine (a task). A task that waits
--- for something (a notebook server's reply) yields to the loop with what it waits on, so the
--- loop keeps reading the transport while cells run: pings are answered, cancellations interrupt
--- the cell, progress notifications go out. File descriptors (stdin, the HTTP queue) and ZMQ
--- sockets are polled together with seer.net.poll.
---
--- ```lua
--- local server = require "seer.mcp.server"
--- local srv = server.new{ name = "demo", version = "1.0", instructions = "..." }
--- srv:add_tool{ name = "add", description = "Adds two numbers",
---   inputSchema = { type = "object", properties = { a = { type = "number" }, b = { type = "number" } },
---                   required = { "a", "b" } },
---   run = function(ctx, args) return tostring(args.a + args.b) end }
--- srv:serve_stdio()
--- ```
---@class seermcp.server
local M = {}

local ffi = require "ffi"
local json = require "seer.json"
local net = require "seer.net"

M.PROTOCOL_VERSIONS = { "2025-06-18", "2025-11-25" } -- oldest first; the last is the latest
M.LATEST_PROTOCOL_VERSION = M.PROTOCOL_VERSIONS[#M.PROTOCOL_VERSIONS]
M.MAX_LINE = 16 * 1024 * 1024
-- JSON values one message may hold (arrays, objects, strings, numbers...), counted before any is
-- built: a 16 MiB line of `[],[],...` is 8 million values, ~50 bytes each once decoded (0.8 GB).
-- A real tool call holds a few hundred.
M.MAX_VALUES = 1000000

-- JSON-RPC 2.0 error codes
M.PARSE_ERROR, M.INVALID_REQUEST, M.METHOD_NOT_FOUND, M.INVALID_PARAMS, M.INTERNAL_ERROR =
  -32700, -32600, -32601, -32602, -32603

local PROGRESS_INTERVAL_MS = 1000

local supported = {}
for _, v in ipairs(M.PROTOCOL_VERSIONS) do supported[v] = true end

local function now_ms()
  return require("seer.core.host").now() * 1000
end

ffi.cdef [[
void *seer_mcp_signal(int sig, void *handler) asm("signal");
long seer_mcp_read(int fd, void *buf, size_t n) asm("read");
]]

---------------------------------------------------------------------------------------------
-- helpers

local function short(s, n)
  s = tostring(s)
  n = n or 300
  if #s <= n then return s end
  return s:sub(1, n) .. ("... (%d more bytes)"):format(#s - n)
end

-- Replaces every byte that is not part of valid UTF-8 with U+FFFD, so any text can be sent.
local function valid_utf8(s)
  local out, i, n, start = {}, 1, #s, 1
  while i <= n do
    local c = s:byte(i)
    local len = c < 0x80 and 1 or (c >= 0xC2 and c <= 0xDF) and 2 or (c >= 0xE0 and c <= 0xEF) and 3
                or (c >= 0xF0 and c <= 0xF4) and 4 or 0
    local ok = len > 0 and i + len - 1 <= n
    if ok and len > 1 then
      for k = 1, len - 1 do
        local b = s:byte(i + k)
        if b < 0x80 or b > 0xBF then ok = false break end
      end
      if ok then
        local b1 = s:byte(i + 1)
        if (c == 0xE0 and b1 < 0xA0) or (c == 0xED and b1 > 0x9F) or (c == 0xF0 and b1 < 0x90) or (c == 0xF4 and b1 > 0x8F) then
          ok = false
        end
      end
    end
    if ok then
      i = i + len
    else
      out[#out + 1] = s:sub(start, i - 1)
      out[#out + 1] = "\239\191\189"
      i = i + 1
      start = i
    end
  end
  if start == 1 then return s end
  out[#out + 1] = s:sub(start)
  return table.concat(out)
end
M.valid_utf8 = valid_utf8

local function sanitize(v, depth)
  depth = depth or 0
  if type(v) == "string" then return (valid_utf8(v):gsub("%z", "\\0")) end
  if type(v) ~= "table" or depth > 200 then return v end
  local t = json.is_array(v) and json.array() or (json.is_object(v) and json.object() or {})
  for k, x in pairs(v) do t[type(k) == "string" and sanitize(k, depth + 1) or k] = sanitize(x, depth + 1) end
  return t
end

-- JSON text of a message; text that cannot be encoded as is (invalid UTF-8 from a kernel or an
-- error message) is repaired rather than lost.
local function encode(msg)
  local ok, text = pcall(json.encode, msg)
  if ok then return text end
  ok, text = pcall(json.encode, sanitize(msg))
  if ok then return text end
  return json.encode{ jsonrpc = "2.0", id = msg.id or json.null,
                      error = { code = M.INTERNAL_ERROR, message = "internal error: cannot encode the answer: " .. valid_utf8(short(text)) } }
end
M.encode = encode

local function rpc_error(id, code, message, data)
  local e = { code = code, message = message }
  if data ~= nil then e.data = data end
  return { jsonrpc = "2.0", id = id == nil and json.null or id, error = e }
end

local function rpc_result(id, result)
  return { jsonrpc = "2.0", id = id, result = result }
end

local function id_key(id)
  return type(id) .. ":" .. tostring(id)
end

local function type_of(v)
  if v == json.null then return "null" end
  if type(v) == "table" then return json.is_array(v) and "array" or "object" end
  if type(v) == "number" then
    if v ~= v then return "NaN" end
    if math.abs(v) == math.huge then return "an infinite number" end
    if v == math.floor(v) then
      -- what a JSON integer past 2^53 is really worth: not exactly representable
      if math.abs(v) >= 2 ^ 53 then return ("%.17g, an integer too large to be exact"):format(v) end
      return "integer"
    end
  end
  return type(v)
end

---------------------------------------------------------------------------------------------
-- JSON Schema (the subset tools use: type, properties, required, additionalProperties, enum,
-- minimum, maximum, maxLength (bytes), items)

local function type_ok(v, t)
  if t == "string" then return type(v) == "string"
  elseif t == "integer" then return type(v) == "number" and v == math.floor(v) and math.abs(v) < 2 ^ 53
  elseif t == "number" then return type(v) == "number" and v == v and math.abs(v) ~= math.huge
  elseif t == "boolean" then return type(v) == "boolean"
  elseif t == "null" then return v == json.null
  elseif t == "array" then return type(v) == "table" and (json.is_array(v) or (next(v) == nil and not json.is_object(v)))
  elseif t == "object" then return type(v) == "table" and not json.is_array(v)
  end
  return true
end

-- nil when v fits the schema, else a message naming the parameter at `path`.
local function check_value(v, schema, path)
  if type(schema) ~= "table" then return nil end
  local t = schema.type
  if t then
    local types = type(t) == "table" and t or { t }
    local ok = false
    for _, x in ipairs(types) do if type_ok(v, x) then ok = true break end end
    if not ok then
      if type(v) == "number" and #types == 1 and types[1] == "integer" and v == math.floor(v) then
        return ("%s must be an integer between -2^53 and 2^53 (got %s)"):format(path, type_of(v))
      end
      return ("%s must be %s (got %s)"):format(path, table.concat(types, " or "), type_of(v))
    end
  end
  if schema.enum then
    local ok = false
    for _, x in ipairs(schema.enum) do if x == v then ok = true break end end
    if not ok then
      local names = {}
      for _, x in ipairs(schema.enum) do names[#names + 1] = json.encode(x) end
      return ("%s must be one of %s"):format(path, table.concat(names, ", "))
    end
  end
  if type(v) == "string" and schema.maxLength and #v > schema.maxLength then
    -- counted in bytes, an upper bound of the characters JSON Schema counts
    return ("%s is %d bytes, over its limit of %d"):format(path, #v, schema.maxLength)
  end
  if type(v) == "number" then
    if schema.minimum and v < schema.minimum then return ("%s must be at least %s"):format(path, schema.minimum) end
    if schema.maximum and v > schema.maximum then return ("%s must be at most %s"):format(path, schema.maximum) end
  end
  if type(v) == "table" and v ~= json.null then
    if type_ok(v, "object") and schema.properties then
      for _, name in ipairs(schema.required or {}) do
        if v[name] == nil then return ("%s is missing the required parameter %q"):format(path, name) end
      end
      for k, x in pairs(v) do
        local ps = schema.properties[k]
        if ps then
          local err = check_value(x, ps, ("parameter %q"):format(k))
          if err then return err end
        elseif schema.additionalProperties == false then
          local names = {}
          for n in pairs(schema.properties) do names[#names + 1] = n end
          table.sort(names)
          return ("unknown parameter %q (parameters: %s)"):format(tostring(k), table.concat(names, ", "))
        end
      end
    elseif schema.items and type_ok(v, "array") then
      for i, x in ipairs(v) do
        local err = check_value(x, schema.items, ("%s[%d]"):format(path, i - 1))
        if err then return err end
      end
    end
  end
end
M.check_value = check_value

-- A schema as it goes on the wire: empty property sets stay objects, required stays an array.
local function wire_schema(s)
  if type(s) ~= "table" then return s end
  local out = json.is_array(s) and json.array() or {}
  for k, v in pairs(s) do
    if k == "properties" then
      local p = json.object()
      for name, ps in pairs(v) do p[name] = wire_schema(ps) end
      out[k] = p
    elseif k == "required" or k == "enum" then
      local a = json.array()
      for i, x in ipairs(v) do a[i] = x end
      out[k] = a
    else
      out[k] = wire_schema(v)
    end
  end
  return out
end

---------------------------------------------------------------------------------------------
-- the server

local Server = {}
Server.__index = Server

---@class seermcp.server_opts
---@field name string serverInfo.name
---@field version string serverInfo.version
---@field title? string serverInfo.title
---@field instructions? string sent in the initialize result
---@field log? fun(line: string) where log lines go (default: stderr, prefixed "seer mcp: ")

---A new server with no tools.
---@param opts seermcp.server_opts
function M.new(opts)
  assert(type(opts) == "table" and type(opts.name) == "string" and type(opts.version) == "string",
    "mcp.server.new: opts.name and opts.version must be strings")
  local self = setmetatable({ name = opts.name, version = opts.version, title = opts.title,
                              instructions = opts.instructions, tools = {}, tool_list = {},
                              tasks = {}, task_of = setmetatable({}, { __mode = "k" }), sources = {},
                              exit_hooks = {}, sessions = {}, stopping = false }, Server)
  self.log_line = opts.log or function(line) io.stderr:write("seer mcp: ", require("seer.terminal").safe(line), "\n") end
  return self
end

function Server:log(fmt, ...)
  local ok, line = pcall(string.format, fmt, ...)
  self.log_line(ok and line or tostring(fmt))
end

---Declares a tool. `run(ctx, args)` returns a string (one text block), a CallToolResult-shaped
---table (`{content = {...}, structuredContent?, isError?}`) or any other table (sent as JSON
---text and as structuredContent). An error it raises becomes `isError: true` with its message.
---@param def {name: string, title?: string, description: string, inputSchema: table, outputSchema?: table, annotations?: table, run: fun(ctx: table, args: table): any}
function Server:add_tool(def)
  assert(type(def) == "table", "add_tool: the tool must be a table")
  assert(type(def.name) == "string" and def.name:match("^[%w_.-]+$"), "add_tool: name must be letters, digits, _ . -")
  assert(type(def.description) == "string", "add_tool: " .. def.name .. " needs a description")
  assert(type(def.inputSchema) == "table" and def.inputSchema.type == "object",
    "add_tool: " .. def.name .. ": inputSchema must be a JSON Schema with type = \"object\"")
  assert(type(def.run) == "function", "add_tool: " .. def.name .. " needs a run function")
  assert(not self.tools[def.name], "add_tool: a tool named " .. def.name .. " exists already")
  self.tools[def.name] = def
  self.tool_list[#self.tool_list + 1] = def
end

---Runs fn() when the server stops (EOF on stdin, or stop()).
function Server:on_exit(fn)
  self.exit_hooks[#self.exit_hooks + 1] = fn
end

---A protocol session: one per stdio connection, one per Mcp-Session-Id over HTTP.
function Server:new_session(id)
  local sess = { id = id, initialized = false, inflight = {}, created = now_ms() }
  self.sessions[sess] = true
  return sess
end

---Ends a protocol session: its running tool calls are cancelled (their cells interrupted).
function Server:close_session(sess)
  for _, ctx in pairs(sess.inflight) do self:cancel(ctx, "the session ended") end
  self.sessions[sess] = nil
end

---------------------------------------------------------------------------------------------
-- tasks

---Runs fn(task) in a coroutine now, until it first waits; the loop resumes it later.
function Server:spawn(fn)
  local t = {}
  t.co = coroutine.create(function() return fn(t) end)
  self.tasks[#self.tasks + 1] = t
  self.task_of[t.co] = t
  self:_resume(t)
  return t
end

function Server:_resume(t)
  t.wait, t.woken = nil, false
  local ok, w = coroutine.resume(t.co)
  if coroutine.status(t.co) == "dead" then
    t.done = true
    for i, x in ipairs(self.tasks) do if x == t then table.remove(self.tasks, i) break end end
    if not ok then
      -- Ctrl-C raises "interrupted" in whatever code runs, a task included: it belongs to the
      -- loop (which ends the server), not to the task that happened to be running.
      if tostring(w):match("interrupted$") then error(w, 0) end
      self:log("a task failed: %s", debug.traceback(t.co, tostring(w)))
    end
  else
    t.wait = type(w) == "table" and w or {}
  end
end

---The wait function for seer.execution.set_waiter: inside a task it yields to the loop until
---sock is readable, ready() holds or timeout_ms passed; outside one it blocks on the socket.
function Server:waiter()
  return function(sock, timeout_ms, ready)
    local co = coroutine.running()
    if co and self.task_of[co] then
      coroutine.yield{ sock = sock, deadline = now_ms() + timeout_ms, ready = ready }
    elseif not ready() then
      net.poll({ sock }, timeout_ms)
    end
  end
end

---Inside a task: lets the loop run for ms milliseconds.
function Server:sleep(ms)
  local co = coroutine.running()
  if co and self.task_of[co] then coroutine.yield{ deadline = now_ms() + ms }
  else require("seer.process").sleep_ms(ms) end
end

---Watches a file descriptor: on_readable() runs when it is readable. Returns a handle for
---remove_source.
function Server:add_source(fd, on_readable)
  local s = { fd = fd, on_readable = on_readable }
  self.sources[#self.sources + 1] = s
  return s
end

function Server:remove_source(s)
  for i, x in ipairs(self.sources) do if x == s then table.remove(self.sources, i) return end end
end

local function copy(list)
  local c = {}
  for i, v in ipairs(list) do c[i] = v end
  return c
end

-- One turn of the loop: resume the tasks that can go on, wait (at most max_ms) for input on
-- the sources and the sockets tasks wait on, send progress ticks.
function Server:step(max_ms)
  for _ = 1, 100 do
    local any = false
    for _, t in ipairs(copy(self.tasks)) do
      local w = t.wait
      if not t.done and w and (t.woken or (w.ready and w.ready()) or (w.deadline and now_ms() >= w.deadline)
                              or (not w.sock and not w.deadline)) then
        self:_resume(t)
        any = true
      end
    end
    if not any then break end
  end
  local now = now_ms()
  local timeout = max_ms
  local items, owners = {}, {}
  for _, s in ipairs(self.sources) do
    items[#items + 1] = s.fd
    owners[#items] = s
  end
  local seen = {}
  for _, t in ipairs(self.tasks) do
    local w = t.wait
    if w then
      if w.deadline then timeout = math.min(timeout, math.max(0, w.deadline - now)) end
      if w.sock and not seen[w.sock] then
        seen[w.sock] = true
        items[#items + 1] = w.sock
        owners[#items] = w.sock
      end
    end
  end
  if self.next_tick then timeout = math.min(timeout, math.max(0, self.next_tick - now)) end
  local ready
  if #items == 0 then -- nothing to watch: just let the time pass
    if timeout > 0 then require("seer.process").sleep_ms(math.ceil(timeout)) end
    ready = {}
  else
    ready = net.poll(items, math.ceil(timeout))
  end
  for _, k in ipairs(ready) do
    local o = owners[k]
    if type(o) == "table" and o.on_readable then
      local ok, err = xpcall(o.on_readable, debug.traceback)
      if not ok then self:log("error while reading input: %s", err) end
    else
      for _, t in ipairs(self.tasks) do if t.wait and t.wait.sock == o then t.woken = true end end
    end
  end
  self:progress_ticks()
end

---Runs the loop until stop() (or the transport ends), then runs the exit hooks.
function Server:run()
  local ok, err = pcall(function()
    while not self.stopping do self:step(1000) end
  end)
  self:shutdown()
  if not ok then error(err, 0) end -- Ctrl-C ("interrupted") after the sessions were ended
end

function Server:stop()
  self.stopping = true
end

function Server:shutdown()
  if self.shut_down then return end
  self.shut_down = true
  for sess in pairs(self.sessions) do
    for _, ctx in pairs(sess.inflight) do self:cancel(ctx, "the server is stopping") end
  end
  -- Give cancellations (cell interrupts) a moment to reach the notebook server.
  local deadline = now_ms() + 2000
  while #self.tasks > 0 and now_ms() < deadline do
    local pending = false
    for _, t in ipairs(self.tasks) do if t.background then pending = true end end
    if not pending then break end
    self:step(50)
  end
  for _, fn in ipairs(self.exit_hooks) do
    local ok, err = xpcall(fn, debug.traceback)
    if not ok then self:log("while stopping: %s", err) end
  end
end

---------------------------------------------------------------------------------------------
-- tool calls

local Ctx = {}
Ctx.__index = Ctx

---Sends a progress notification when the call carried _meta.progressToken (else nothing).
---@param message? string
---@param total? number
function Ctx:progress(message, total)
  if not self.progress_token or self.cancelled or self.finished then return end
  self.progress_count = self.progress_count + 1
  self.next_tick = now_ms() + PROGRESS_INTERVAL_MS
  self.send{ jsonrpc = "2.0", method = "notifications/progress",
             params = { progressToken = self.progress_token, progress = self.progress_count, total = total,
                        message = message } }
end

---Registers fn to run (in its own task) when the client cancels this call.
function Ctx:on_cancel(fn)
  self.cancel_hooks[#self.cancel_hooks + 1] = fn
end

function Server:progress_ticks()
  local now = now_ms()
  self.next_tick = nil
  for sess in pairs(self.sessions) do
    for _, ctx in pairs(sess.inflight) do
      if ctx.progress_token then
        if now >= ctx.next_tick then
          ctx:progress(("running for %d s"):format(math.floor((now - ctx.started) / 1000 + 0.5)))
        end
        self.next_tick = math.min(self.next_tick or math.huge, ctx.next_tick)
      end
    end
  end
end

function Server:cancel(ctx, reason)
  if ctx.cancelled or ctx.finished then return end
  ctx.cancelled = true
  ctx.session.inflight[ctx.key] = nil
  self:log("tool call %s (%s) cancelled: %s", tostring(ctx.request_id), ctx.tool.name, reason or "by the client")
  for _, fn in ipairs(ctx.cancel_hooks) do
    local t = self:spawn(function()
      local ok, err = xpcall(fn, debug.traceback)
      if not ok then self:log("cancelling %s: %s", ctx.tool.name, err) end
    end)
    t.background = true
  end
end

local function normalize_result(res)
  if type(res) == "string" then
    return { content = json.array{ { type = "text", text = res } }, isError = false }
  end
  if type(res) ~= "table" then
    return { content = json.array{ { type = "text", text = res == nil and "" or tostring(res) } }, isError = false }
  end
  if res.content then
    local c = json.array()
    for i, b in ipairs(res.content) do c[i] = b end
    local out = { content = c, isError = res.isError and true or false, structuredContent = res.structuredContent }
    return out
  end
  return { content = json.array{ { type = "text", text = json.encode(res) } }, structuredContent = res, isError = false }
end

function Server:call_tool(sess, id, params, send)
  if type(params.name) ~= "string" then
    return send(rpc_error(id, M.INVALID_PARAMS, "tools/call: params.name must be a string (the tool's name)"))
  end
  local tool = self.tools[params.name]
  if not tool then
    local names = {}
    for _, t in ipairs(self.tool_list) do names[#names + 1] = t.name end
    return send(rpc_error(id, M.INVALID_PARAMS, ("unknown tool %q; tools: %s"):format(short(params.name, 100), table.concat(names, ", "))))
  end
  local args = params.arguments
  if args == nil or args == json.null then args = json.object() end
  if type(args) ~= "table" or json.is_array(args) then
    return send(rpc_error(id, M.INVALID_PARAMS, ("tools/call %s: arguments must be an object (got %s)"):format(tool.name, type_of(args))))
  end
  -- optional parameters sent as null count as absent
  for k, v in pairs(args) do
    if v == json.null and not (tool.inputSchema.required and (function()
      for _, r in ipairs(tool.inputSchema.required) do if r == k then return true end end
    end)()) then args[k] = nil end
  end
  local err = check_value(args, tool.inputSchema, "arguments")
  if err then
    return send(rpc_error(id, M.INVALID_PARAMS, ("invalid arguments for tool %s: %s"):format(tool.name, err)))
  end
  local key = id_key(id)
  if sess.inflight[key] then
    return send(rpc_error(id, M.INVALID_REQUEST, ("request id %s is already in use by a running call"):format(tostring(id))))
  end
  local meta = type(params._meta) == "table" and params._meta or {}
  local token = meta.progressToken
  if type(token) ~= "string" and type(token) ~= "number" then token = nil end
  local ctx = setmetatable({ server = self, session = sess, request_id = id, key = key, tool = tool, send = send,
                             progress_token = token, progress_count = 0, started = now_ms(),
                             next_tick = now_ms() + PROGRESS_INTERVAL_MS, cancel_hooks = {} }, Ctx)
  sess.inflight[key] = ctx
  if token then self.next_tick = math.min(self.next_tick or math.huge, ctx.next_tick) end
  self:spawn(function()
    local ok, res = xpcall(tool.run, function(e)
      if type(e) ~= "string" then e = tostring(e) end
      return { msg = e, tb = debug.traceback(e, 2) }
    end, ctx, args)
    ctx.finished = true
    if sess.inflight[key] == ctx then sess.inflight[key] = nil end
    if ctx.cancelled then return end -- a cancelled request gets no answer
    if ok then
      send(rpc_result(id, normalize_result(res)))
    else
      -- Unexpected failures (a position in seer's own code) are logged with their traceback.
      if res.msg:match("^[%w_/.-]+%.lua:%d+:") then self:log("tool %s failed: %s", tool.name, res.tb) end
      send(rpc_result(id, { content = json.array{ { type = "text", text = res.msg } }, isError = true }))
    end
  end)
end

---------------------------------------------------------------------------------------------
-- messages

local methods = {}

function methods.initialize(self, sess, id, params, send)
  if sess.initialized then
    return send(rpc_error(id, M.INVALID_REQUEST, "initialize: this session is already initialized"))
  end
  if type(params.protocolVersion) ~= "string" then
    return send(rpc_error(id, M.INVALID_PARAMS, "initialize: params.protocolVersion must be a string"))
  end
  local version = supported[params.protocolVersion] and params.protocolVersion or M.LATEST_PROTOCOL_VERSION
  sess.initialized, sess.protocol_version = true, version
  sess.client_info = type(params.clientInfo) == "table" and params.clientInfo or nil
  local info = { name = self.name, version = self.version, title = self.title }
  send(rpc_result(id, { protocolVersion = version, capabilities = { tools = { listChanged = false } },
                        serverInfo = info, instructions = self.instructions }))
end

function methods.ping(self, sess, id, params, send)
  send(rpc_result(id, json.object()))
end

function methods.tools_list(self, sess, id, params, send)
  local list = json.array()
  for _, t in ipairs(self.tool_list) do
    list[#list + 1] = { name = t.name, title = t.title, description = t.description,
                        inputSchema = wire_schema(t.inputSchema), outputSchema = t.outputSchema and wire_schema(t.outputSchema),
                        annotations = t.annotations }
  end
  send(rpc_result(id, { tools = list }))
end

function methods.tools_call(self, sess, id, params, send)
  self:call_tool(sess, id, params, send)
end

local method_names = { ["initialize"] = "initialize", ["ping"] = "ping", ["tools/list"] = "tools_list",
                       ["tools/call"] = "tools_call" }

---Whether method is one this server answers.
function M.known_method(method)
  return method_names[method] ~= nil
end

function Server:notification(sess, method, params)
  if method == "notifications/initialized" then
    sess.client_ready = true
  elseif method == "notifications/cancelled" then
    local rid = params.requestId
    local ctx = (type(rid) == "string" or type(rid) == "number") and sess.inflight[id_key(rid)]
    if ctx then self:cancel(ctx, type(params.reason) == "string" and params.reason or nil) end
  end
  -- other notifications (progress, roots changed, ...) need nothing from this server
end

---Handles one decoded JSON-RPC message; send(msg) delivers what answers it (the response and
---any notifications about the request, such as progress).
function Server:handle_message(sess, msg, send)
  if type(msg) ~= "table" or msg == json.null then
    return send(rpc_error(nil, M.INVALID_REQUEST, ("invalid request: a JSON-RPC message is an object, not %s"):format(type_of(msg))))
  end
  if json.is_array(msg) then
    return send(rpc_error(nil, M.INVALID_REQUEST, "invalid request: batches are not supported (MCP 2025-06-18 removed JSON-RPC batching); send one message at a time"))
  end
  local id = msg.id
  if id ~= nil and type(id) ~= "string" and type(id) ~= "number" then
    return send(rpc_error(nil, M.INVALID_REQUEST, ("invalid request: id must be a string or a number (got %s)"):format(type_of(id))))
  end
  if msg.jsonrpc ~= "2.0" then
    return send(rpc_error(id, M.INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"'))
  end
  local method = msg.method
  if method == nil then
    if id ~= nil and (msg.result ~= nil or msg.error ~= nil) then
      self:log("ignoring a response (id %s): this server sends no requests", tostring(id))
      return
    end
    return send(rpc_error(id, M.INVALID_REQUEST, 'invalid request: "method" is missing'))
  end
  if type(method) ~= "string" then
    return send(rpc_error(id, M.INVALID_REQUEST, ('invalid request: "method" must be a string (got %s)'):format(type_of(method))))
  end
  local params = msg.params
  if params == nil or params == json.null then params = json.object() end
  if id == nil then
    if type(params) == "table" and not json.is_array(params) then self:notification(sess, method, params) end
    return
  end
  local h = method_names[method]
  if not h then
    return send(rpc_error(id, M.METHOD_NOT_FOUND, ("method not found: %s (this server answers initialize, ping, tools/list, tools/call)")
      :format(short(method, 100))))
  end
  if type(params) ~= "table" or json.is_array(params) then
    return send(rpc_error(id, M.INVALID_PARAMS, ("%s: params must be an object (got %s)"):format(method, type_of(params))))
  end
  if not sess.initialized and method ~= "initialize" and method ~= "ping" then
    return send(rpc_error(id, M.INVALID_REQUEST, ("%s before initialize: the client must send initialize first"):format(method)))
  end
  local ok, err = xpcall(methods[h], debug.traceback, self, sess, id, params, send)
  if not ok then
    self:log("%s failed: %s", method, err)
    send(rpc_error(id, M.INTERNAL_ERROR, "internal error: " .. valid_utf8(short(tostring(err):match("^[^\n]*"), 500))))
  end
end

---Decodes one message from a peer with the value cap (M.MAX_VALUES): true and the value, or
---false and why (the error names the limit).
---@param text string
---@return boolean ok, any value_or_error
function M.decode(text)
  local ok, msg = pcall(json.decode, text, { max_values = M.MAX_VALUES })
  if not ok and tostring(msg):find("values", 1, true) then
    msg = ("the message holds more than %d JSON values (the limit of this server)"):format(M.MAX_VALUES)
  end
  return ok, msg
end

---Handles one line of text (stdio) or one request body (HTTP).
function Server:handle_text(sess, text, send)
  local ok, msg = M.decode(text)
  if not ok then
    return send(rpc_error(nil, M.PARSE_ERROR, "parse error: " .. valid_utf8(short(tostring(msg):gsub("^json%.decode: ", ""), 300))))
  end
  self:handle_message(sess, msg, send)
end

---------------------------------------------------------------------------------------------
-- stdio transport

-- Splits a byte stream into lines of at most `limit` bytes; a longer line is dropped up to its
-- newline and reported with its length.
local function line_reader(limit, on_line, on_overflow)
  local r = { parts = {}, size = 0, discarding = false, dropped = 0 }
  function r.feed(chunk)
    local pos = 1
    while true do
      local nl = chunk:find("\n", pos, true)
      if not nl then
        local rest = #chunk - pos + 1
        if rest > 0 then
          if r.discarding then
            r.dropped = r.dropped + rest
          elseif r.size + rest > limit then
            r.discarding, r.dropped, r.parts, r.size = true, r.size + rest, {}, 0
          else
            r.parts[#r.parts + 1] = pos == 1 and chunk or chunk:sub(pos)
            r.size = r.size + rest
          end
        end
        return
      end
      local len = nl - pos
      if r.discarding then
        local n = r.dropped + len
        r.discarding, r.dropped = false, 0
        on_overflow(n)
      elseif r.size + len > limit then
        local n = r.size + len
        r.parts, r.size = {}, 0
        on_overflow(n)
      else
        local line = chunk:sub(pos, nl - 1)
        if #r.parts > 0 then
          r.parts[#r.parts + 1] = line
          line = table.concat(r.parts)
          r.parts, r.size = {}, 0
        end
        on_line(line)
      end
      pos = nl + 1
    end
  end
  function r.finish()
    if r.discarding then on_overflow(r.dropped)
    elseif #r.parts > 0 then on_line(table.concat(r.parts)) end
    r.parts, r.size, r.discarding = {}, 0, false
  end
  return r
end
M.line_reader = line_reader

---Serves MCP on stdin/stdout until stdin ends: one JSON-RPC message per line each way; stdout
---carries nothing else (logs go to stderr).
---@param opts? {max_line?: integer}
function Server:serve_stdio(opts)
  opts = opts or {}
  local limit = opts.max_line or M.MAX_LINE
  ffi.C.seer_mcp_signal(13 --[[SIGPIPE]], ffi.cast("void *", 1) --[[SIG_IGN]])
  local sess = self:new_session("stdio")
  local out = io.stdout
  local function send(msg)
    if self.stdout_closed then return end
    local ok, err = out:write(encode(msg), "\n")
    if ok then ok, err = out:flush() end
    if not ok then
      self.stdout_closed = true
      self:log("cannot write to stdout (%s); stopping", tostring(err))
      self:stop()
    end
  end
  local function on_line(line)
    if line:sub(-1) == "\r" then line = line:sub(1, -2) end
    if line:match("^%s*$") then return end
    self:handle_text(sess, line, send)
  end
  local function on_overflow(n)
    send(rpc_error(nil, M.INVALID_REQUEST, ("invalid request: the message is %d bytes; a line may hold at most %d bytes (16 MiB)")
      :format(n, limit)))
  end
  local reader = line_reader(limit, on_line, on_overflow)
  local bufsize = 1024 * 1024
  local buf = ffi.new("char[?]", bufsize)
  local src
  src = self:add_source(0, function()
    local n = tonumber(ffi.C.seer_mcp_read(0, buf, bufsize))
    if n > 0 then
      reader.feed(ffi.string(buf, n))
    elseif n == 0 or (ffi.errno() ~= 4 --[[EINTR]] and ffi.errno() ~= 11 --[[EAGAIN]]) then
      reader.finish()
      self:remove_source(src)
      self:stop()
    end
  end)
  self:run()
  self:close_session(sess)
end

return M
