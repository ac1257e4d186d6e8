--- seer.rpc: scoped-sandbox RPC from the host's side. Start `seer rpc serve interface.lua` (here
--- or, through a pluggable spawn function, inside a sandbox), connect to it, call the functions
--- it exposes, and turn it into what an agent uses: a Library (a Lua client module mirroring
--- the functions and their docs), an MCP server entry (`seer mcp rpc`), a prompt text or a Skill.
--- Requests and replies are signed Jupyter-format messages over ZMQ (docs/rpc.md).
---
--- ```lua
--- local rpc = require "seer.rpc"
--- local srv = rpc.serve_local("interface.lua", { models = { ["stories260K"] = "/models/stories260K" } })
--- print(srv:call("get_model_info").hidden_size)
--- local lib = srv:library("model_tools")          -- seer.workspace Library
--- srv:close()
--- ```
---@class seerrpc
local M = {}

local C = require "seer.core.net"
local json = require "seer.json"
local wire = require "seer.rpc.wire"
local process = require "seer.process"
local rpc_core = require "seer.core.rpc"

local now = require("seer.core.host").now
local unpack = unpack or table.unpack

local function seer_binary() return require("seer.jupyter").seer_binary() end

-- File operations on the connection folder go through seer.safe_fs: a scoped sandbox's
-- folder is in its run folder, which code inside can change (a link planted for the log or the
-- connection file is refused, never followed; reads are bounded). root is a safe_fs root the
-- path lies beneath (the sandbox's run folder), else the path's own directory is the root.
local safe_fs = require "seer.safe_fs"
local sweep_rpclib_dirs -- below
local function beneath(path, root)
  local rel = root and root:rel(path)
  if rel then return root, rel end
  local dir, base = path:match("^(.*)/([^/]+)$")
  return safe_fs.root(dir and dir ~= "" and dir or (dir and "/" or "."), "the RPC connection folder"), base or path
end

-- Reads a connection file (bounded, no link followed) with wire.read_connection's checks.
local function read_connection(path, root)
  local r, rel = beneath(path, root)
  local text, err = r:read(rel, { max = 65536 })
  if not text then error(("rpc: cannot read the connection file %s: %s"):format(path, err), 0) end
  local info = wire.decode_connection(text, path)
  if root then
    -- Written by the server's side: the sockets it names must be in the same folder (a unix
    -- socket elsewhere on the host, or another machine, is not the server this host started).
    for _, k in ipairs({ "endpoint", "control_endpoint" }) do
      local e = info[k]
      if e ~= nil and e ~= json.null then
        local sock = type(e) == "string" and e:match("^ipc://(.+)$")
        local ok = sock and not sock:find("..", 1, true) and root:rel(sock) ~= nil
          or (type(e) == "string" and (e:match("^tcp://127%.0%.0%.1:%d+$") or e:find("*", 1, true)))
        if not ok then
          error(("rpc: the connection file %s names the %s %s, which is not a socket in %s; refusing to connect"):format(
            path, k, tostring(e), root.path), 0)
        end
      end
    end
  end
  return info
end

local function tail(path, n, root)
  if not path then return "" end
  local r, rel = beneath(path, root)
  local text = r:read(rel, { max = 65536, tail = true })
  if not text then return "" end
  local lines = {}
  for l in text:gmatch("[^\n]*") do if l ~= "" then lines[#lines + 1] = l end end
  local from = math.max(1, #lines - (n or 20) + 1)
  return table.concat(lines, "\n", from)
end
M.tail = tail

-- ---- the client --------------------------------------------------------------------------------

-- What a server (in a sandbox: hostile) can make this client hold. Every reply passes through
-- seer.net's connection guard (engine/net/guard.c), which disconnects a server whose message
-- passes max_reply_bytes or MAX_REPLY_FRAMES before libzmq keeps it; at most REPLY_QUEUE replies
-- wait here, so the client holds at most (REPLY_QUEUE + 1) x max_reply_bytes. A reply's JSON
-- part may hold at most MAX_REPLY_VALUES values (tensors travel as binary frames, not JSON).
M.MAX_REPLY_BYTES = 256 * 1024 * 1024
M.MAX_REPLY_FRAMES = 4096
M.MAX_REPLY_VALUES = 8 * 1000 * 1000
local REPLY_QUEUE = 8

local function decode_reply(text)
  return json.decode(text, { max_values = M.MAX_REPLY_VALUES })
end

---@class seerrpc.Client
---@field info table the connection info (endpoint, control_endpoint, key, ...)
---@field name string
---@field spec table|nil the hello reply (functions, warnings) once hello() ran
local Client = {}
Client.__index = Client
M.Client = Client

---@class seerrpc.connect_opts
---@field proc? seerrpc.proc the server process: its death ends waits at once, with its log
---@field log_file? string the server's log (quoted in errors)
---@field name? string
---@field wait_endpoint_s? number how long to wait for the server to write its endpoint (default 60)
---@field root? seersafe_fs.Root the folder the connection file and log lie beneath when the server's side can write it
---@field max_reply_bytes? integer the largest reply accepted, all frames together (default rpc.MAX_REPLY_BYTES, 256 MiB; at most 1 GiB): a server that sends more is disconnected and the calls waiting fail with an error saying so

---Connects to a server by its connection file (or the decoded table).
---@param conn string|table
---@param opts? seerrpc.connect_opts
---@return seerrpc.Client
function M.connect(conn, opts)
  opts = opts or {}
  local path = type(conn) == "string" and conn or nil
  local info = path and read_connection(path, opts.root) or conn
  local max_reply = opts.max_reply_bytes or M.MAX_REPLY_BYTES
  if type(max_reply) ~= "number" or max_reply < 1024 or max_reply > 1024 * 1024 * 1024 or max_reply % 1 ~= 0 then
    error(("rpc.connect: max_reply_bytes must be an integer from 1024 to 1073741824 (1 GiB), not %s"):format(tostring(max_reply)), 2)
  end
  local self = setmetatable({ info = info, path = path, proc = opts.proc, log_file = opts.log_file, root = opts.root,
                              name = opts.name or info.name or "rpc", pending = {}, inflight = {}, lost = {},
                              cuts_seen = 0, max_reply = max_reply }, Client)
  -- The server writes the endpoints it bound (a wildcard port, the control socket) into the file.
  local deadline = now() + (opts.wait_endpoint_s or 60)
  while path and (not info.endpoint or info.endpoint:find("*", 1, true) or not info.pid) do
    self:_check_alive("while starting")
    if now() > deadline then error(("rpc: %s: the server did not write its endpoint into %s in time"):format(self.name, path), 2) end
    process.sleep_ms(10)
    local ok, i2 = pcall(read_connection, path, opts.root)
    if ok then info = i2 end
  end
  self.info = info
  -- seer.net's wrapper, so MCP tasks can wait on it in seer.net.poll; calls go through a
  -- channel on the raw socket (engine/rpc/wire.c: headers, signatures and frames in C).
  self.nsock = require("seer.net").socket("dealer", info.key,
    { max_bytes = max_reply, max_frames = M.MAX_REPLY_FRAMES, rcvhwm = REPLY_QUEUE })
  self.sock = self.nsock._s
  -- a socket the server's side named in a folder it can write: no link on the way is followed
  local beneath = opts.root and type(info.endpoint) == "string" and info.endpoint:match("^ipc://") and opts.root.path or nil
  self.sock:connect(info.endpoint, beneath)
  self.ch = rpc_core.channel(self.sock, { role = "client" })
  return self
end

function Client:_check_alive(doing)
  local p = self.proc
  if not p then
    -- A server this client did not start (a connection file's, in a sandbox): ended when its
    -- socket has refused every connect for 2 s (a call in flight waited forever before).
    local down = self.nsock and self.nsock._s:endpoint_down_ms() or 0
    if down > 2000 then
      self.dead = "ended"
      error(("rpc: the %s server has ended %s: nothing has listened at its socket %s for %.1f s"):format(self.name,
        doing or "", tostring(self.info and self.info.endpoint), down / 1000), 0)
    end
    return
  end
  local ended, how = p.wait(0)
  if ended then
    self.dead = how or "exited"
    local logs = tail(self.log_file, 30, self.root)
    error(("rpc: the %s server %s %s%s"):format(self.name, self.dead, doing or "",
      logs ~= "" and (";\nits log ends with:\n" .. logs) or ""), 0)
  end
end

-- Receives one reply (any); returns content table, buffers, or nil on timeout. content.id is
-- the id of the request it answers (the msg_id of its parent header).
function Client:_recv(timeout_ms)
  local parent, c, bufs = self.ch:recv(timeout_ms)
  if parent == nil then return nil end
  local ok, content = pcall(decode_reply, c)
  if not ok or type(content) ~= "table" then
    -- signed by the server, so it answers parent: that call fails, saying why
    if not parent then return nil end
    return { id = parent, ok = false, kind = "bad_reply",
             error = ("the reply is not a JSON object the client accepts: %s"):format(
               ok and type(content) or tostring(content):gsub("^[^:]*:%d+: ", "")) }
  end
  if parent and content.id == nil then content.id = parent end
  return content, bufs
end

-- The connection guard disconnected the server (a reply past the limits): the replies of every
-- call in flight then are lost. Raises for call id when it was one of them.
function Client:_check_cut(id)
  local n, why = self.nsock:dropped()
  if n > self.cuts_seen then
    self.cuts_seen = n
    if why and why:find("disconnected", 1, true) then
      for k in pairs(self.inflight) do self.lost[k] = why end
      if id then self.lost[id] = why end
    end
  end
  local why_lost = id and self.lost[id]
  if why_lost then
    self.lost[id] = nil
    error(("rpc: %s: the reply to %s was lost: the server sent %s. If the reply is legitimate, connect with a larger max_reply_bytes (now %d; at most 1 GiB)")
      :format(self.name, tostring(self.inflight[id] or id), why_lost:gsub("; disconnected$", ""), self.max_reply), 0)
  end
end

---Waits for the reply to request id. Returns content, buffers; nil, "timeout" when timeout_ms
---passed (nil: wait forever). Raises when the server process died.
---@param id string
---@param timeout_ms? number
function Client:wait_reply(id, timeout_ms)
  local got = self.pending[id]
  if got then self.pending[id] = nil return got[1], got[2] end
  local deadline = timeout_ms and (now() + timeout_ms / 1000)
  while true do
    local slice = 250
    if deadline then slice = math.max(0, math.min(slice, math.floor((deadline - now()) * 1000))) end
    local content, bufs = self:_recv(slice)
    if content then
      if content.id == id then return content, bufs end
      if content.id ~= nil and self.inflight[content.id] then self.pending[content.id] = { content, bufs } end
    else
      self:_check_alive(self.inflight[id] and ("while running " .. tostring(self.inflight[id])) or "")
      self:_check_cut(id)
      if deadline and now() >= deadline then return nil, "timeout" end
    end
  end
end

local function sender(self, msg_type, content_text, bufs)
  return self.ch:send(msg_type, content_text, bufs)
end

---Sends the hello request and waits for the answer (the interface may still be loading its
---models). Raises with the remote traceback when the interface failed to load.
---@param timeout_s? number default 600
---@return table spec {functions, warnings, name, pid}
function Client:hello(timeout_s)
  local id = sender(self, "rpc_hello_request", "{}")
  self.inflight[id] = "hello"
  local content, why
  local ok, err = pcall(function() content, why = self:wait_reply(id, (timeout_s or 600) * 1000) end)
  self.inflight[id] = nil
  if not ok then error(err, 2) end
  if not content then
    error(("rpc: the %s server did not answer within %d s (is it still loading its models? see its log%s)")
      :format(self.name, timeout_s or 600, self.log_file and (" " .. self.log_file) or ""), 2)
  end
  if content.status ~= "ok" then
    error(("rpc: the %s interface failed to load: %s\nremote traceback:\n%s"):format(self.name,
      tostring(content.error), tostring(content.traceback)), 2)
  end
  self.spec = content
  self.by_name = {}
  for _, f in ipairs(content.functions) do self.by_name[f.name] = f end
  return content
end

---The exposed functions' descriptions (name, description, params, returns, signature,
---input_schema, warnings), in the order the interface exposed them.
---@return table[]
function Client:functions()
  if not self.spec then self:hello() end
  return self.spec.functions
end

---Sends a call without waiting; returns its id for wait_reply / cancel.
---@param name string
---@param args? any[] positional arguments
---@param nargs? integer how many (trailing nils count)
---@param kwargs? table<string, any> named arguments (mapped onto the function's parameters)
---@param opts? {timeout?: number} seconds; the server interrupts the call after it
---@return string id
local arg_names = setmetatable({}, { __index = function(t, i) local s = ("args[%d]"):format(i) t[i] = s return s end })

function Client:send_call(name, args, nargs, kwargs, opts)
  local bufs = {}
  local text = '{"fn":' .. wire.encode(name, "the function name", bufs)
  nargs = nargs or (args and #args) or 0
  if args and nargs > 0 then
    local list = {}
    for i = 1, nargs do
      local v = args[i]
      list[i] = v == nil and "null" or wire.encode(v, arg_names[i], bufs)
    end
    text = text .. ',"args":[' .. table.concat(list, ",") .. '],"nargs":' .. nargs
  end
  if kwargs and next(kwargs) ~= nil then
    text = text .. ',"kwargs":' .. wire.encode(kwargs, "kwargs", bufs)
  end
  if opts and opts.timeout then text = text .. ',"timeout_ms":' .. math.floor(opts.timeout * 1000) end
  local id = sender(self, "rpc_call_request", text .. "}", #bufs > 0 and bufs or nil)
  self.inflight[id] = name
  return id
end

---Asks the server to interrupt call id (or drop it if it has not started).
---@param id string
function Client:cancel(id)
  if not self.info.control_endpoint then return end
  if not self.ctl then
    self.ctl = C.socket("dealer", self.info.key, { max_bytes = 1024 * 1024, max_frames = 64, rcvhwm = 16 })
    local ce = self.info.control_endpoint
    self.ctl:connect(ce, self.root and type(ce) == "string" and ce:match("^ipc://") and self.root.path or nil)
    self.ctl_ch = rpc_core.channel(self.ctl, { role = "client" })
  end
  self.ctl_ch:send("rpc_cancel_request", json.encode{ call_id = id })
end

local function results_of(content, bufs)
  if content.results then
    local r = wire.decode_value(content.results, bufs)
    local n = #r
    for i = 1, n do if r[i] == json.null then r[i] = nil end end
    return unpack(r, 1, n)
  end
  local v = wire.decode_value(content.result, bufs)
  if v == json.null then return nil end
  return v
end

---Calls and waits; returns the reply table {ok, result | error, traceback, kind} and buffers
---instead of raising. opts.timeout (seconds) bounds the call on the server and the wait here.
---@return table reply
---@return string[]|nil buffers
function Client:invoke(name, args, nargs, kwargs, opts)
  local id = self:send_call(name, args, nargs, kwargs, opts)
  local timeout = opts and opts.timeout
  local ok, content, bufs = pcall(self.wait_reply, self, id, timeout and (timeout * 1000 + 5000))
  if not ok then
    self.inflight[id] = nil
    if tostring(content):find("interrupted") then pcall(self.cancel, self, id) end
    error(content, 0)
  end
  self.inflight[id] = nil
  if not content then
    pcall(self.cancel, self, id)
    return { ok = false, kind = "timeout", error = ("%s did not answer within %g s"):format(name, timeout) }
  end
  return content, bufs
end

local function raise(self, name, content)
  local msg = ("rpc: %s.%s: %s"):format(self.name, name, tostring(content.error))
  if content.traceback and content.traceback ~= json.null then msg = msg .. "\nremote traceback:\n" .. content.traceback end
  error(msg, 3)
end

---Calls an exposed function with positional arguments; returns its results or raises the
---remote error with the remote traceback appended.
---@param name string
---@return any ...
function Client:call(name, ...)
  local n = select("#", ...)
  -- Scalar arguments and a scalar result go through the channel in one step (engine/rpc).
  local st, a, c, bufs, c2, b2 = self.ch:call(name, 250, n, ...)
  if st then return a end
  local content
  if st == false then
    local ok, v = pcall(decode_reply, c)
    if not ok or type(v) ~= "table" then
      error(("rpc: %s.%s: the reply is not a JSON object: %s"):format(self.name, name, tostring(v)), 2)
    end
    content = v
  elseif a == nil then
    content, bufs = self:invoke(name, { ... }, n)
  else
    if c ~= nil then -- the reply to another request came first: keep it for its waiter
      local ok, v = pcall(decode_reply, bufs)
      if ok and type(v) == "table" and c and self.inflight[c] then self.pending[c] = { v, c2 } end
    end
    self.inflight[a] = name
    local ok, v, b = pcall(self.wait_reply, self, a)
    self.inflight[a] = nil
    if not ok then
      if tostring(v):find("interrupted") then pcall(self.cancel, self, a) end
      error(v, 0)
    end
    content, bufs = v, b
  end
  if not content.ok then raise(self, name, content) end
  return results_of(content, bufs)
end

---Calls with named arguments (as MCP tools and the reference's clients do).
---@param name string
---@param kwargs table<string, any>
---@param opts? {timeout?: number}
---@return any ...
function Client:call_kw(name, kwargs, opts)
  local content, bufs = self:invoke(name, nil, 0, kwargs, opts)
  if not content.ok then raise(self, name, content) end
  return results_of(content, bufs)
end

M.results_of = results_of

---Asks the server to exit (it answers first).
function Client:shutdown(timeout_ms)
  local id = sender(self, "rpc_shutdown_request", "{}")
  self.inflight[id] = "shutdown"
  pcall(self.wait_reply, self, id, timeout_ms or 2000)
  self.inflight[id] = nil
end

function Client:close()
  if self.sock then self.sock:close() self.sock, self.nsock, self.ch = nil, nil, nil end
  if self.ctl then self.ctl:close() self.ctl, self.ctl_ch = nil, nil end
end

-- ---- starting servers --------------------------------------------------------------------------

---@class seerrpc.proc
---@field pid? integer
---@field kill fun(sig?: integer) sends a signal (default SIGTERM)
---@field wait fun(timeout_ms: integer): boolean, string? true (and how it ended) once the process has ended; wait(0) only checks

---@alias seerrpc.spawn fun(argv: string[], env: table<string, string>, info: {interface: string, connection_file: string, log_file: string, connection_dir: string}): seerrpc.proc

---The default spawn: a child process of this one (killed when this process dies).
---@type seerrpc.spawn
function M.local_spawn(argv, env, info)
  local a = {}
  for i, v in ipairs(argv) do a[i] = v end
  a[#a + 1] = "--die-with-parent"
  local child = process.spawn{ argv = a, env = env, stdout = info.log_file, stderr = info.log_file }
  return {
    pid = child.pid,
    kill = function(sig) return child:kill(sig) end,
    wait = function(timeout_ms)
      if timeout_ms and timeout_ms > 0 then child:wait(timeout_ms) end
      local alive, how = child:alive()
      return not alive, how
    end,
  }
end

local function model_env_name(id)
  return "MODEL_" .. id:upper():gsub("[/%-]", "_") .. "_PATH"
end

---@class seerrpc.start_opts
---@field name? string the interface's name (default: the file name without .lua); a Lua module name
---@field spawn? seerrpc.spawn where the server runs (default: a local child process)
---@field connection_dir? string where the connection file, the ipc socket and the log go (default: a fresh private temp dir); must be reachable by both sides
---@field connection_root? seersafe_fs.Root a folder holding connection_dir that the server's side can write (a sandbox's run folder): files there are written and read through it, never through a link
---@field transport? "ipc"|"tcp" default "ipc" (a unix socket in connection_dir); "tcp" listens on 127.0.0.1
---@field ip? string tcp only: the address to listen on (default 127.0.0.1)
---@field models? table<string, string> model id -> path inside the server's file system
---@field workers? integer worker processes (default 1: calls are serialized)
---@field timeout? number default per-call deadline in seconds
---@field load_timeout? number how long to wait for the interface to load (seconds, default 600)
---@field env? table<string, string> extra environment for the server
---@field verbose? boolean log every call
---@field max_reply_bytes? integer the largest reply the host accepts (default rpc.MAX_REPLY_BYTES, 256 MiB; at most 1 GiB)

---@class seerrpc.Server
---@field name string
---@field file string the interface file
---@field connection_file string
---@field log_file string
---@field client seerrpc.Client
---@field proc seerrpc.proc
local Server = {}
Server.__index = Server
M.Server = Server

local used_names = {}

---Starts `seer rpc serve file` (through opts.spawn) and waits until the interface has loaded.
---Raises at once, with the load error and its traceback, when the interface fails to load or
---the process dies.
---@param file string
---@param opts? seerrpc.start_opts
---@return seerrpc.Server
function M.start(file, opts)
  opts = opts or {}
  if type(file) ~= "string" then error("rpc.start(file, opts): file must be the interface's path", 2) end
  local core = require "seer.core.host"
  local ok, real = pcall(core.realpath, file)
  if not ok or not real then error(("rpc: cannot find the interface file %s"):format(file), 2) end
  local name = opts.name or real:match("([^/]+)%.lua$") or "interface"
  if not name:match("^[%a_][%w_]*$") then
    error(("rpc: the name %q must be a Lua identifier (it becomes a module name and MCP server name)"):format(name), 2)
  end
  local dir = opts.connection_dir
  -- Key files of servers killed with their reaper (kill -9 of a group) go now (docs/rpc.md).
  pcall(require("seer.cli.rpc").sweep_stale, "/tmp")
  local root = opts.connection_root -- a safe_fs root holding dir (a sandbox's run folder)
  if dir and root and root:rel(dir) then safe_fs.must(root:mkdirs(root:rel(dir)))
  elseif dir then process.mkdir_p(dir) else dir = process.mkdtemp("/tmp/seer-rpc-") end
  -- Serving the same file twice needs distinct files: suffix the name's files when reused.
  local base = name
  local n = 1
  while used_names[dir .. "/" .. base] do n = n + 1; base = name .. "_" .. n end
  used_names[dir .. "/" .. base] = true
  local conn = dir .. "/" .. base .. ".json"
  local log_file = dir .. "/" .. base .. ".log"
  local transport = opts.transport or "ipc"
  local endpoint
  if transport == "ipc" then
    endpoint = "ipc://" .. dir .. "/" .. base .. ".sock"
    if #endpoint - 6 > 100 then transport, endpoint = "tcp", nil end -- unix socket paths are short
  elseif transport ~= "tcp" then
    error(("rpc: transport must be \"ipc\" or \"tcp\", not %s"):format(tostring(transport)), 2)
  end
  endpoint = endpoint or ("tcp://" .. (opts.ip or "127.0.0.1") .. ":*")
  local conn_info = { key = C.new_key(), signature_scheme = "hmac-sha256", transport = transport, endpoint = endpoint, name = name }
  if root and root:rel(conn) then
    -- 0600 from its creation, written atomically; a link planted at its name is replaced
    safe_fs.must(root:write(root:rel(conn), json.pretty(conn_info) .. "\n", { mode = tonumber("600", 8) }))
  else
    wire.write_connection(conn, conn_info)
  end
  local argv = { seer_binary(), "rpc", "serve", real, "--connection-file", conn, "--log", log_file, "--name", name }
  if opts.workers and opts.workers > 1 then argv[#argv + 1] = "--workers"; argv[#argv + 1] = tostring(opts.workers) end
  if opts.timeout then argv[#argv + 1] = "--timeout"; argv[#argv + 1] = tostring(opts.timeout) end
  if opts.verbose then argv[#argv + 1] = "--verbose" end
  local env = {}
  if opts.models and next(opts.models) then
    local m = json.object()
    for k, v in pairs(opts.models) do
      m[k] = v
      -- a hidden model ("<hidden>") gets no MODEL_*_PATH, as in a notebook session
      if not k:find("^<hidden") then env[model_env_name(k)] = v end
    end
    argv[#argv + 1] = "--models"
    argv[#argv + 1] = json.encode(m)
  end
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local spawn = opts.spawn or M.local_spawn
  local info = { interface = real, connection_file = conn, log_file = log_file, connection_dir = dir }
  local proc = spawn(argv, env, info)
  local self = setmetatable({ name = name, file = real, connection_file = conn, log_file = log_file, proc = proc,
                              connection_dir = dir, opts = opts, root = root }, Server)
  local cok, err = pcall(function()
    self.client = M.connect(conn, { proc = proc, log_file = log_file, name = name, root = root,
                                    max_reply_bytes = opts.max_reply_bytes })
    self.client:hello(opts.load_timeout or 600)
  end)
  if not cok then
    pcall(proc.kill, process.SIGKILL)
    error(err, 2)
  end
  for _, w in ipairs(self.client.spec.warnings) do io.stderr:write("seer rpc: ", name, ": warning: ", w, "\n") end
  return self
end

---Starts a server as a local child process (M.start with the default spawn).
---@param file string
---@param opts? seerrpc.start_opts
---@return seerrpc.Server
function M.serve_local(file, opts)
  opts = opts or {}
  opts.spawn = nil
  local ok, s = pcall(M.start, file, opts)
  if not ok then error(s, 2) end
  return s
end

---@return any ...
function Server:call(name, ...) return self.client:call(name, ...) end
function Server:call_kw(name, kwargs, opts) return self.client:call_kw(name, kwargs, opts) end
---@return table[]
function Server:functions() return self.client:functions() end

---The last n lines of the server's log (its stdout and stderr, the interface's prints included).
---@param n? integer default 100
---@return string
function Server:logs(n) return tail(self.log_file, n or 100, self.root) end

---Stops the server: a shutdown request, then SIGTERM, then SIGKILL.
function Server:close()
  if self.closed then return end
  self.closed = true
  if self.client then
    if not self.client.dead then pcall(self.client.shutdown, self.client, 2000) end
    self.client:close()
  end
  local ended = self.proc.wait(2000)
  if not ended then
    pcall(self.proc.kill, process.SIGTERM)
    if not self.proc.wait(2000) then pcall(self.proc.kill, process.SIGKILL) self.proc.wait(2000) end
  end
  -- The server removes its key file itself; this covers a server that never got that far.
  -- The folder (0700, from mkdtemp) stays for the log, which Server:logs may still read.
  os.remove(self.connection_file)
  if self.host_connection then
    os.remove(self.host_connection)
    os.remove(self.host_connection_dir)
  end
end

-- ---- what agents get ---------------------------------------------------------------------------

-- The connection file the clients handed out (library, skill, mcp_config) read. For a server
-- in a sandbox, the server's own file is in the sandbox's run folder, which code in the sandbox
-- can rewrite (another endpoint, another key) after the host checked it: clients in other
-- processes would follow. They get a copy instead, written from what this process already
-- validated, in a private host folder (0700, the file 0600), removed by close().
-- The copies of processes that ended without close() (kill -9) hold a key: removed by the next
-- process that makes one (folders named seer-rpclib-<pid>-*, this user's, whose pid has ended).
local swept_rpclib = false
sweep_rpclib_dirs = function()
  if swept_rpclib then return end
  swept_rpclib = true
  local sbc = require "seer.core.sandbox"
  local ok, entries = pcall(sbc.listdir, "/tmp") -- lstat of each entry: type and owner, no link followed
  if not ok or type(entries) ~= "table" then return end
  local ffi = require "ffi"
  pcall(ffi.cdef, "unsigned geteuid(void);")
  local uid = ffi.C.geteuid()
  local tmp = safe_fs.root("/tmp", "/tmp", { cross_mounts = true })
  for _, e in ipairs(entries) do
    local pid = tonumber(tostring(e.name):match("^seer%-rpclib%-(%d%d?%d?%d?%d?%d?%d?)%-%w+$") or "")
    -- a name anyone can plant: a pid that is no pid is skipped, and only this user's folders go
    if pid and pid >= 2 and pid ~= process.getpid() and e.type == "dir" and e.uid == uid then
      local okalive, alive = pcall(sbc.alive, pid)
      if okalive and not alive then tmp:remove_tree(e.name) end
    end
  end
end

M._sweep_rpclib_dirs = function() swept_rpclib = false return sweep_rpclib_dirs() end

function Server:client_connection_file()
  if not self.root then return self.connection_file end
  if self.host_connection then return self.host_connection end
  local info = self.client and self.client.info
  if type(info) ~= "table" then error(("rpc: %s has no validated connection to hand out"):format(self.name), 0) end
  local copy = {}
  for _, k in ipairs({ "key", "signature_scheme", "transport", "endpoint", "control_endpoint", "name", "pid" }) do
    if info[k] ~= nil and info[k] ~= json.null then copy[k] = info[k] end
  end
  sweep_rpclib_dirs()
  self.host_connection_dir = process.mkdtemp(("/tmp/seer-rpclib-%d-"):format(process.getpid()))
  self.host_connection = self.host_connection_dir .. "/" .. self.name .. ".json"
  wire.write_connection(self.host_connection, copy)
  return self.host_connection
end

local function doc_lines(f)
  local out = {}
  if f.description ~= "" then out[#out + 1] = f.description end
  for _, p in ipairs(f.params) do
    out[#out + 1] = ("@param %s%s %s%s"):format(p.name, p.optional and "?" or "", p.type,
      (p.description and p.description ~= "") and (" " .. p.description) or "")
  end
  for _, r in ipairs(f.returns) do
    out[#out + 1] = ("@return %s%s"):format(r.type, (r.text and r.text ~= "") and (" " .. r.text) or "")
  end
  return out
end

---The text listing the functions' signatures and docs (expose_as = "prompt").
---@param name string
---@param functions table[]
---@return string
function M.prompt_text(name, functions)
  local out = { ("## %s"):format(name), "",
    ("These functions run in a scoped sandbox; call them from Lua with `local %s = require \"%s\"` then `%s.fn(args)`:")
      :format(name, name, name), "" }
  for _, f in ipairs(functions) do
    out[#out + 1] = ("### %s.%s"):format(name, f.signature)
    out[#out + 1] = ""
    if f.description ~= "" then out[#out + 1] = f.description; out[#out + 1] = "" end
    local ps = {}
    for _, p in ipairs(f.params) do
      ps[#ps + 1] = ("- `%s` (%s%s)%s"):format(p.name, p.type, p.optional and ", optional" or "",
        (p.description and p.description ~= "") and (": " .. p.description) or "")
    end
    if #ps > 0 then
      out[#out + 1] = "Parameters:"
      for _, l in ipairs(ps) do out[#out + 1] = l end
      out[#out + 1] = ""
    end
    for _, r in ipairs(f.returns) do
      out[#out + 1] = ("Returns: %s%s"):format(r.type, (r.text and r.text ~= "") and (" - " .. r.text) or "")
      out[#out + 1] = ""
    end
  end
  return (table.concat(out, "\n"):gsub("\n+$", "")) .. "\n"
end

---The source of a Lua client module that mirrors the functions (with their docs as LuaCATS
---comments) and calls them over RPC through the connection file.
---@param name string module name
---@param functions table[]
---@param connection_file string
---@return string
function M.client_code(name, functions, connection_file)
  local env_var = "SEER_RPC_" .. name:upper() .. "_CONNECTION"
  local out = {
    ("--- %s: functions served over seer RPC from a scoped sandbox; each call runs there."):format(name),
    "---",
  }
  for _, f in ipairs(functions) do
    out[#out + 1] = ("--- - `%s`%s"):format(f.signature, f.description ~= "" and (": " .. f.description:match("^[^\n]*")) or "")
  end
  out[#out + 1] = ("--- Errors raised inside a function come back as Lua errors with the remote traceback.")
  out[#out + 1] = ""
  out[#out + 1] = "local M = {}"
  out[#out + 1] = ""
  out[#out + 1] = ("local connection_file = os.getenv(%q) or %q"):format(env_var, connection_file)
  out[#out + 1] = "local client"
  out[#out + 1] = "local function rpc()"
  out[#out + 1] = ("  if not client then client = require(\"seer.rpc\").connect(connection_file, { name = %q }) end"):format(name)
  out[#out + 1] = "  return client"
  out[#out + 1] = "end"
  out[#out + 1] = ""
  local names = {}
  for _, f in ipairs(functions) do
    names[#names + 1] = ("%q"):format(f.name)
    for _, l in ipairs(doc_lines(f)) do
      for line in (l .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = "---" .. line end
    end
    local params = {}
    for _, p in ipairs(f.params) do params[#params + 1] = p.name end
    if f.vararg then params[#params + 1] = "..." end
    local plist = table.concat(params, ", ")
    out[#out + 1] = ("function M.%s(%s)"):format(f.name, plist)
    out[#out + 1] = ("  return rpc():call(%q%s)"):format(f.name, plist ~= "" and (", " .. plist) or "")
    out[#out + 1] = "end"
    out[#out + 1] = ""
  end
  out[#out + 1] = "---The names of the functions this module calls."
  out[#out + 1] = ("M.functions = { %s }"):format(table.concat(names, ", "))
  out[#out + 1] = ""
  out[#out + 1] = "-- a name the server does not serve is an error naming the ones it does (as Python's AttributeError)"
  out[#out + 1] = "setmetatable(M, { __index = function(_, k)"
  out[#out + 1] = ("  error((\"%s has no function '%%s'; it serves: %%s\"):format(tostring(k), table.concat(M.functions, \", \")), 2)"):format(name)
  out[#out + 1] = "end })"
  out[#out + 1] = ""
  out[#out + 1] = "return M"
  return table.concat(out, "\n") .. "\n"
end

---A seer.workspace Library whose module mirrors the served functions (expose_as = "library").
---@param name? string module name (default: the server's name)
---@return seerworkspace.Library
function Server:library(name)
  name = name or self.name
  local ws = require "seer.workspace"
  local fns = self:functions()
  local code = M.client_code(name, fns, self:client_connection_file())
  local lib = ws.Library{ name = name, files = { [name .. ".lua"] = code }, docs = M.prompt_text(name, fns):gsub("^## [^\n]*\n\n", "") }
  -- installed into another sandbox (a notebook session there), the library is rebuilt to reach
  -- this server through a relay (seer.rpc.relay)
  rawset(lib, "rpc", { server = self })
  return lib
end

---The MCP server entry for agents (expose_as = "mcp"): `{[name] = {type = "stdio", command, args, env}}`
---running `seer mcp rpc` against this server.
---@param name? string
---@return table
function Server:mcp_config(name)
  name = name or self.name
  if self.root then
    -- a server in a sandbox: the endpoints and key this process validated, in the entry's
    -- environment (which the host writes), not a file the sandbox could rewrite
    local info = self.client.info
    return { [name] = { type = "stdio", command = seer_binary(), args = { "mcp", "rpc", "--name", name },
                        env = { SEER_RPC_ENDPOINT = info.endpoint, SEER_RPC_KEY = info.key,
                                SEER_RPC_CONTROL_ENDPOINT = type(info.control_endpoint) == "string" and info.control_endpoint or nil } } }
  end
  return { [name] = { type = "stdio", command = seer_binary(),
                      args = { "mcp", "rpc", "--connection-file", self.connection_file, "--name", name }, env = {} } }
end

---The prompt text (expose_as = "prompt").
---@param name? string
---@return string
function Server:prompt(name)
  return M.prompt_text(name or self.name, self:functions())
end

---A seer.workspace Skill (expose_as = "skill"): SKILL.md with the functions' docs, plus the
---client module.
---@param name? string
---@return seerworkspace.Skill
function Server:skill(name)
  name = name or self.name
  local ws = require "seer.workspace"
  local fns = self:functions()
  local names = {}
  for _, f in ipairs(fns) do names[#names + 1] = f.name end
  local description = ("Functions %s served from a scoped sandbox (%s); call them from Lua with require \"%s\".")
    :format(table.concat(names, ", "), self.file:match("([^/]+)$"), name)
  local md = table.concat({
    "---", "name: " .. name, "description: " .. description, "---", "",
    M.prompt_text(name, fns), "",
    "## How to call them", "",
    ("`%s.lua` beside this file is the client module. From this directory:"):format(name), "",
    "```sh",
    ("seer -e 'local %s = require \"%s\"; print(seer.json.encode(%s.%s()))'"):format(name, name, name, names[1] or "fn"),
    "```", "",
    "Errors raised inside a function come back as Lua errors with the remote traceback.", "",
  }, "\n")
  return ws.Skill{ name = name, description = description,
                   files = { ["SKILL.md"] = md, [name .. ".lua"] = M.client_code(name, fns, self:client_connection_file()) } }
end

local servers = {}

---Starts the interface and returns what expose_as asks for: "library" (default) a Library,
---"mcp" an mcp_config entry, "prompt" a text, "skill" a Skill; the running Server is the
---second value (close it when done; rpc.close_all() closes every server started here).
---@param file string
---@param opts? seerrpc.start_opts|{expose_as?: "library"|"mcp"|"prompt"|"skill"}
---@return any exposed
---@return seerrpc.Server server
function M.serve(file, opts)
  opts = opts or {}
  local expose_as = opts.expose_as or "library"
  local makers = { library = "library", mcp = "mcp_config", prompt = "prompt", skill = "skill" }
  if not makers[expose_as] then
    error(("rpc.serve: expose_as must be \"library\", \"mcp\", \"prompt\" or \"skill\", not %s"):format(tostring(expose_as)), 2)
  end
  local sopts = {}
  for k, v in pairs(opts) do if k ~= "expose_as" then sopts[k] = v end end
  local ok, srv = pcall(M.start, file, sopts)
  if not ok then error(srv, 2) end
  servers[#servers + 1] = srv
  return srv[makers[expose_as]](srv), srv
end

---Closes every server rpc.serve started.
function M.close_all()
  for i = #servers, 1, -1 do
    pcall(servers[i].close, servers[i])
    servers[i] = nil
  end
end

return M
