--- seer.jupyter: a Jupyter client for seer's own use (the notebook server talks to kernels
--- through it). It starts a kernel as a local process with a fresh connection file and key, or
--- connects to an existing connection file, and speaks the signed protocol over seer.net. It
--- is event-driven: the owner polls `client:sockets()` and feeds readable ones to `client:pump`.
---@class seerjupyter
local M = {}

local net = require "seer.net"
local json = require "seer.json"
local core = require "seer.core.host"
local process = require "seer.process"

local Client = {}
Client.__index = Client

---The largest message a kernel may send (all frames): 64 MiB. Larger ones never reach the host's
---memory whole (docs/kernel.md).
M.MAX_MESSAGE_BYTES = 64 * 1024 * 1024
---How many messages from one kernel socket may wait in the host's queue (ZMQ's receive
---high-water mark): the host holds at most QUEUE * MAX_MESSAGE_BYTES per socket for a kernel.
M.QUEUE = 16

---Path of the running seer binary (children are started with the same one).
---@return string
function M.seer_binary()
  local ffi = require "ffi"
  pcall(ffi.cdef, "long readlink(const char *path, char *buf, size_t n);")
  local buf = ffi.new("char[4096]")
  local n = ffi.C.readlink("/proc/self/exe", buf, 4095)
  if n <= 0 then error("cannot find the seer binary (/proc/self/exe)") end
  -- A binary rebuilt while this process runs shows as "PATH (deleted)"; PATH holds the new one.
  return (ffi.string(buf, n):gsub(" %(deleted%)$", ""))
end

-- The connection file holds the key, so it is created 0600 from the start (no window in which
-- another user could read it), then renamed into place.
local function write_private(path, text)
  local ffi = require "ffi"
  pcall(ffi.cdef, [[
    int open(const char *path, int flags, unsigned mode);
    long write(int fd, const void *buf, size_t n);
    int rename(const char *a, const char *b);
    int unlink(const char *path);
  ]])
  local tmp = path .. ".tmp"
  local fd = ffi.C.open(tmp, 1 + 64 + 512 + 524288 --[[O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC]], tonumber("600", 8))
  if fd < 0 then error(("cannot write %s: %s"):format(tmp, ffi.string(ffi.C.strerror(ffi.errno())))) end
  local n = ffi.C.write(fd, text, #text)
  ffi.C.close(fd)
  if n ~= #text or ffi.C.rename(tmp, path) ~= 0 then
    ffi.C.unlink(tmp)
    error("cannot write " .. path)
  end
end

---Writes a connection file (mode 0600: it holds the key) and returns its table. Its ports are 0:
---the kernel binds ports the OS picks and writes them back into the file (see wait_for_ports).
---Choosing ports here and closing them before the kernel binds would race with every other
---process on the machine: under load another kernel, or a connecting socket's source port, takes
---one, and the client ends up talking to a stranger or to itself.
---@param path string
---@return table info
function M.write_connection_file(path)
  local info = { transport = "tcp", ip = "127.0.0.1", shell_port = 0, iopub_port = 0, stdin_port = 0,
                 control_port = 0, hb_port = 0, signature_scheme = "hmac-sha256", key = net.new_key(),
                 kernel_name = "seer" }
  write_private(path, json.encode(info, { indent = 2 }))
  return info
end

local PORT_NAMES = { "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port" }

---Waits until the kernel started on a port-0 connection file has bound its sockets and written
---their ports back (it renames the new file into place, so a read never sees half of it).
---Returns the connection table, or nil and why (the kernel exited, or timeout_ms passed).
---@param path string
---@param child table the kernel's process handle
---@param timeout_ms integer
---@return table|nil info, string|nil why
function M.wait_for_ports(path, child, timeout_ms)
  local deadline = process.now_ms() + timeout_ms
  local pause = 1
  while true do
    local f = io.open(path, "rb")
    local text = f and f:read("*a")
    if f then f:close() end
    local ok, info = pcall(json.decode, text or "")
    if ok and type(info) == "table" then
      local all = true
      for _, k in ipairs(PORT_NAMES) do
        if type(info[k]) ~= "number" or info[k] <= 0 then all = false end
      end
      if all then return info end
    end
    local alive, how = child:alive()
    if not alive then return nil, "the kernel " .. how .. " before binding its sockets" end
    if process.now_ms() >= deadline then
      return nil, ("the kernel did not bind its sockets within %d ms"):format(timeout_ms)
    end
    process.sleep_ms(pause)
    pause = math.min(pause * 2, 20)
  end
end

---@class seerjupyter.start_opts
---@field runtime_dir string where the connection file goes
---@field cwd? string the kernel's working directory
---@field env? table<string, string> extra environment for the kernel
---@field log? string file that receives the kernel's stdout and stderr
---@field timeout_ms? integer how long the kernel may take to bind its sockets (default 20000)

---Starts `seer kernel` as a child process and connects to it once it has bound its sockets.
---Raises an error (naming the log when there is one) if the kernel exits or does not bind in time.
---@param opts seerjupyter.start_opts
---@return seerjupyter.client
function M.start_local(opts)
  local conn = ("%s/kernel-%s.json"):format(opts.runtime_dir, net.uuid())
  M.write_connection_file(conn)
  -- dies with this process (PR_SET_PDEATHSIG), and any Jupyter-style watch names this process too
  local env = { SEER_KERNEL_DIE_WITH_PARENT = "1", JPY_PARENT_PID = tostring(process.getpid()) }
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local child = process.spawn{ argv = { M.seer_binary(), "kernel", "-f", conn }, cwd = opts.cwd, env = env,
                               stdout = opts.log or "null", stderr = opts.log or "inherit" }
  local info, why = M.wait_for_ports(conn, child, opts.timeout_ms or 20000)
  if not info then
    child:stop(0)
    os.remove(conn)
    error("the kernel did not start: " .. why .. (opts.log and (" (its log: " .. opts.log .. ")") or ""), 0)
  end
  local c = M.connect(info)
  c.process, c.connection_file = child, conn
  return c
end

---Connects to a kernel described by a connection table (or a connection file path).
---@param info table|string
---@return seerjupyter.client
function M.connect(info)
  if type(info) == "string" then info = json.decode(core.read_file(info)) end
  local key = info.key or ""
  local function ep(port)
    -- Jupyter's ipc transport names sockets "<ip>-<port>" (jupyter_client does the same)
    if info.transport == "ipc" then return ("ipc://%s-%d"):format(info.ip, port) end
    return ("%s://%s:%d"):format(info.transport or "tcp", info.ip or "127.0.0.1", port)
  end
  local self = setmetatable({ info = info, session = net.uuid() }, Client)
  -- Nothing a kernel sends may cost more than max_bytes to receive (a bigger frame disconnects
  -- it), and at most rcvhwm messages wait here: past that the kernel's side holds its backlog.
  local lim = { max_bytes = M.MAX_MESSAGE_BYTES, max_frames = 80, rcvhwm = M.QUEUE }
  self.shell = net.socket("dealer", key, lim); self.shell:connect(ep(info.shell_port))
  self.control = net.socket("dealer", key, lim); self.control:connect(ep(info.control_port))
  self.stdin = net.socket("dealer", key, lim); self.stdin:connect(ep(info.stdin_port))
  self.iopub = net.socket("sub", key, lim); self.iopub:subscribe(""); self.iopub:connect(ep(info.iopub_port))
  return self
end

---The sockets to poll, in the order pump() expects their indices.
---@return table[]
function Client:sockets()
  return { self.shell, self.iopub, self.control, self.stdin }
end

---Sends a request on "shell" or "control"; returns the msg_id replies will carry.
---@param channel "shell"|"control"
---@param msg_type string
---@param content table
---@return string msg_id
function Client:send(channel, msg_type, content)
  local header = net.header(msg_type, self.session)
  self[channel]:send{ header = header, parent_header = {}, metadata = {}, content = content or {} }
  return header.msg_id
end

---------------------------------------------------------------------------------------------
-- what a kernel may send
--
-- A kernel may be hostile (agent code runs in it, inside a sandbox): every message is checked
-- field by field before anyone uses it. seer.net has already checked the signature, the layout,
-- the size, replays, and that the four parts are JSON objects (cJSON bounds the nesting at 1000,
-- the text is valid UTF-8 once decoded). What is checked here: the msg_type is one a kernel sends
-- on that channel, every field the host reads has its type and a bounded length, mime bundles
-- hold strings or JSON values, counts are sane integers, and no part nests deeper than MAX_DEPTH
-- or holds more than MAX_NODES values. A message that fails is dropped (socket:note_dropped).

M.MAX_DEPTH = 32        -- nesting of any part
M.MAX_NODES = 200000    -- values in one message
M.MAX_ID = 256          -- bytes of a msg_id, session, display_id, mime type, stream name...
M.MAX_TRACEBACK = 10000 -- lines of an error's traceback

local KNOWN = {
  shell = { execute_reply = true, kernel_info_reply = true, complete_reply = true, inspect_reply = true,
            history_reply = true, is_complete_reply = true, comm_info_reply = true, shutdown_reply = true,
            interrupt_reply = true },
  control = { shutdown_reply = true, interrupt_reply = true, kernel_info_reply = true, debug_reply = true,
              usage_reply = true },
  iopub = { status = true, stream = true, display_data = true, update_display_data = true, execute_input = true,
            execute_result = true, error = true, clear_output = true, comm_open = true, comm_msg = true,
            comm_close = true, debug_event = true, shutdown_reply = true },
  stdin = { input_request = true },
}
M.KNOWN_MSG_TYPES = KNOWN

local is_array = json.is_array

-- nil when v nests no deeper than MAX_DEPTH and holds at most `budget.n` values, else why.
local function shape_ok(v, depth, budget)
  if type(v) ~= "table" then return nil end
  if depth > M.MAX_DEPTH then return ("nests deeper than %d levels"):format(M.MAX_DEPTH) end
  for _, x in pairs(v) do
    budget.n = budget.n - 1
    if budget.n < 0 then return ("holds more than %d values"):format(M.MAX_NODES) end
    if type(x) == "table" then
      local why = shape_ok(x, depth + 1, budget)
      if why then return why end
    end
  end
  return nil
end

local function short_string(v) return type(v) == "string" and #v <= M.MAX_ID end
local function is_object(v) return type(v) == "table" and not is_array(v) end
local function count_ok(v) return type(v) == "number" and v == math.floor(v) and v >= 0 and v < 2^31 end

-- A mime bundle: {mime = string | JSON value}; JSON values only for JSON mime types.
local function bundle_ok(d, what)
  if d == nil then return nil end
  if not is_object(d) then return what .. " is not an object" end
  for k, v in pairs(d) do
    if not short_string(k) then return what .. " has a mime type longer than " .. M.MAX_ID .. " bytes" end
    if type(v) ~= "string" then
      if not (type(v) == "table" and (k == "application/json" or k:match("%+json$"))) then
        return ("%s[%q] is a %s; a mime bundle holds strings (JSON values only for JSON mime types)")
          :format(what, k, type(v))
      end
    end
  end
  return nil
end

local function strings_ok(list, what)
  if list == nil then return nil end
  if type(list) ~= "table" or (next(list) ~= nil and not is_array(list)) then return what .. " is not an array" end
  if #list > M.MAX_TRACEBACK then return ("%s has more than %d lines"):format(what, M.MAX_TRACEBACK) end
  for i = 1, #list do
    if type(list[i]) ~= "string" then return ("%s[%d] is not a string"):format(what, i) end
  end
  return nil
end

local content_checks = {}
function content_checks.status(c)
  if not short_string(c.execution_state) then return "content.execution_state is not a short string" end
end
function content_checks.stream(c)
  if c.name ~= "stdout" and c.name ~= "stderr" then return "content.name is not stdout or stderr" end
  if type(c.text) ~= "string" then return "content.text is not a string" end
end
local function display_check(c)
  if c.data == nil then return "content.data is missing" end
  local why = bundle_ok(c.data, "content.data")
  if why then return why end
  if c.metadata ~= nil and not is_object(c.metadata) then return "content.metadata is not an object" end
  if c.transient ~= nil then
    if not is_object(c.transient) then return "content.transient is not an object" end
    if c.transient.display_id ~= nil and not short_string(c.transient.display_id) then
      return "content.transient.display_id is not a short string"
    end
  end
end
content_checks.display_data = display_check
content_checks.update_display_data = display_check
function content_checks.execute_result(c)
  if not count_ok(c.execution_count) then return "content.execution_count is not a sane integer" end
  return display_check(c)
end
function content_checks.execute_input(c)
  if c.execution_count ~= nil and not count_ok(c.execution_count) then return "content.execution_count is not a sane integer" end
  if c.code ~= nil and type(c.code) ~= "string" then return "content.code is not a string" end
end
function content_checks.error(c)
  if type(c.ename) ~= "string" or #c.ename > 4096 then return "content.ename is not a string (at most 4096 bytes)" end
  if type(c.evalue) ~= "string" then return "content.evalue is not a string" end
  return strings_ok(c.traceback, "content.traceback")
end
function content_checks.clear_output(c)
  if c.wait ~= nil and type(c.wait) ~= "boolean" then return "content.wait is not a boolean" end
end
function content_checks.execute_reply(c)
  if c.status ~= "ok" and c.status ~= "error" and c.status ~= "aborted" then return "content.status is not ok, error or aborted" end
  if c.execution_count ~= nil and c.execution_count ~= json.null and not count_ok(c.execution_count) then
    return "content.execution_count is not a sane integer"
  end
  if c.ename ~= nil and type(c.ename) ~= "string" then return "content.ename is not a string" end
  if c.evalue ~= nil and type(c.evalue) ~= "string" then return "content.evalue is not a string" end
  return strings_ok(c.traceback, "content.traceback")
end
function content_checks.kernel_info_reply(c)
  if c.language_info ~= nil then
    if not is_object(c.language_info) then return "content.language_info is not an object" end
    for k, v in pairs(c.language_info) do
      if type(v) ~= "string" and not (k == "codemirror_mode" and (type(v) == "table" or type(v) == "string")) then
        if type(v) ~= "number" and type(v) ~= "boolean" then return ("content.language_info.%s is a %s"):format(k, type(v)) end
      end
      if type(v) == "string" and #v > 4096 then return ("content.language_info.%s is longer than 4096 bytes"):format(k) end
    end
  end
end

---Checks a message received from a kernel on channel (already a JSON-object message from
---seer.net). Returns nil when it may be used, else why it must be dropped.
---@param msg table
---@param channel "shell"|"iopub"|"control"|"stdin"
---@return string|nil why
function M.check_message(msg, channel)
  local h, p = msg.header, msg.parent_header
  local t = h.msg_type
  if not short_string(t) then return "header.msg_type is not a short string" end
  if not KNOWN[channel][t] then return ("msg_type %q is not one a kernel sends on %s"):format(t, channel) end
  if not short_string(h.msg_id) then return "header.msg_id is not a short string" end
  if p.msg_id ~= nil and not short_string(p.msg_id) then return "parent_header.msg_id is not a short string" end
  if msg.buffers and #msg.buffers > 64 then return "more than 64 buffers" end
  local budget = { n = M.MAX_NODES }
  for _, part in ipairs({ h, p, msg.metadata, msg.content }) do
    local why = shape_ok(part, 1, budget)
    if why then return "a part " .. why end
  end
  local check = content_checks[t]
  local why = check and check(msg.content)
  if why then return t .. ": " .. why end
  return nil
end

---Reads whatever is ready on socket i (an index into sockets()) and returns the messages that
---pass check_message, each tagged with `channel`; the others are dropped and counted on the
---socket (see bad_messages). At most `max` messages are read in one call (default 1000), so one
---kernel flooding its sockets cannot hold the caller's loop.
---@param i integer
---@param max? integer
---@return table[]
function Client:pump(i, max)
  local names = { "shell", "iopub", "control", "stdin" }
  local s = self:sockets()[i]
  local out = {}
  for _ = 1, max or 1000 do
    local msg = s:recv(0)
    if not msg then break end
    local why = M.check_message(msg, names[i])
    if why then
      s:note_dropped(("from the kernel on %s: %s"):format(names[i], why))
    else
      msg.channel = names[i]
      out[#out + 1] = msg
    end
  end
  return out
end

---How many messages this client dropped from its kernel (bad signatures, replays, limits,
---fields), and why the last one was.
---@return integer count, string|nil why
function Client:bad_messages()
  local n, why = 0, nil
  for _, s in ipairs(self:sockets()) do
    local k, w = s:dropped()
    if k > 0 then n, why = n + k, w end
  end
  return n, why
end

---Blocking helper for simple uses (tests, start-up): waits up to timeout_ms for a message that
---satisfies pred on any channel; other messages are handed to `other` (or dropped).
---@param pred fun(msg: table): boolean
---@param timeout_ms integer
---@param other? fun(msg: table)
---@return table|nil
function Client:wait_for(pred, timeout_ms, other)
  local deadline = process.now_ms() + timeout_ms
  while true do
    local left = deadline - process.now_ms()
    if left <= 0 then return nil end
    local ready = net.poll(self:sockets(), math.min(left, 100))
    for _, i in ipairs(ready) do
      for _, msg in ipairs(self:pump(i)) do
        if pred(msg) then return msg end
        if other then other(msg) end
      end
    end
    if self.process and not self.process:alive() then return nil end
  end
end

---Asks for kernel_info until the kernel answers on shell AND its iopub messages reach us: a
---SUB socket only receives once its subscription has reached the kernel ("slow joiner"), so
---until iopub carries the busy/idle of our own request, outputs could be lost. Returns the
---reply content, or nil and why.
---@param timeout_ms integer
---@return table|nil content, string|nil why
function Client:kernel_info(timeout_ms)
  local deadline = process.now_ms() + timeout_ms
  local reply
  local window = 50 -- short first tries: a subscription usually lands within milliseconds
  while process.now_ms() < deadline do
    local id = self:send("shell", "kernel_info_request", {})
    local got_iopub = false
    local m = self:wait_for(function(msg)
      if msg.parent_header.msg_id ~= id then return false end
      if msg.channel == "iopub" then got_iopub = true end
      if msg.channel == "shell" then reply = msg.content end
      return reply ~= nil and got_iopub
    end, math.max(1, math.min(window, deadline - process.now_ms())))
    if m then return reply end
    window = math.min(window * 2, 1000)
    if self.process then
      local alive, how = self.process:alive()
      if not alive then return nil, "the kernel " .. how .. " before answering" end
    end
  end
  if reply then return nil, ("the kernel answered on shell but its iopub messages did not arrive within %d ms"):format(timeout_ms) end
  return nil, ("the kernel did not answer kernel_info within %d ms"):format(timeout_ms)
end

---Whether the kernel process still runs (always true for kernels seer did not start).
---@return boolean alive, string|nil how
function Client:alive()
  if self.remote then return self.remote.alive() end
  if not self.process then return true end
  return self.process:alive()
end

---Stops the kernel now (SIGTERM, then SIGKILL after grace_ms; a kernel in a sandbox is
---stopped by its sandboxd).
---@param grace_ms? integer
function Client:stop(grace_ms)
  if self.remote then self.remote.stop()
  elseif self.process then self.process:stop(grace_ms or 1000) end
end

---Closes the sockets; stops the kernel if this client started it (shutdown request, then
---signals if it does not leave in time).
function Client:close()
  if self.remote then
    local alive = self.remote.alive()
    if alive then pcall(function() self:send("control", "shutdown_request", { restart = false }) end) end
    for _, sock in ipairs(self:sockets()) do sock:close() end
    if alive then self.remote.stop() end
    return
  end
  if self.process and self.process:alive() then
    pcall(function() self:send("control", "shutdown_request", { restart = false }) end)
    if not self.process:wait(1500) then self.process:stop(1000) end
  end
  for _, s in ipairs(self:sockets()) do s:close() end
  if self.process then self.process:stop(0) end
  if self.connection_file then os.remove(self.connection_file) end
end

return M
