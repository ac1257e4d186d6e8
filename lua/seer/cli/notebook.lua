--- `seer notebook serve`: seer's notebook server (see docs/notebook.md). It starts kernels,
--- keeps one nbformat notebook per session, saves it when a cell finishes, publishes every
--- change to the live view, and answers signed requests from sessions and `seer mcp notebook`.
--- One event loop, no threads in Lua: the kernels' sockets and the request socket are polled
--- together, and each execution is a small state machine driven by the kernel's messages.
local net = require "seer.net"
local json = require "seer.json"
local jupyter = require "seer.jupyter"
local notebook = require "seer.notebook"
local process = require "seer.process"
local core = require "seer.core.host"

local M = {}

-- Ctrl-C raises "interrupted" in whatever code runs; the pcalls that keep one request's or one
-- session's error from ending the server must not swallow it.
local function reraise_interrupt(err)
  if tostring(err):match("interrupted$") then error(err, 0) end
end
local save_nofollow -- Notebook:save without following links (below, with the scopes)
local cell_position -- a cell's index among code cells and number among all cells (with Server:finish)

-- What a fork by save_nofollow is told as (file names only for a sandbox's client).
local function fork_note(f, names_only)
  local function show(p) return names_only and (p:match("([^/]+)$") or p) or p end
  return ("the notebook %s was changed on disk by someone else since this session last saved it (another session or process writes it); it was not overwritten, and this session's notebook is saved as %s from now on (with every cell)")
    :format(show(f.old), show(f.new))
end

local sweep_temporaries -- removes what saves killed midway left (below)
local new_kept, new_dropped -- a cell's counts against the output limits (below, with the limits)

local USAGE = [[
usage: seer notebook serve [--output-dir DIR] [--host HOST] [--port PORT] [--max-output CHARS]
                           [--max-stream-bytes N] [--max-displays N] [--max-display-bytes N]
                           [--max-cell-display-bytes N] [--max-session-output-bytes N]

Per-cell output limits (docs/notebook.md, "Output limits"): stdout and stderr together
(default 64 MiB), display outputs (10000), bytes of one display output such as an image
(16 MiB), bytes of all display outputs (256 MiB); and bytes of all outputs a session keeps
across its cells (1 GiB). Past a limit the notebook, the caller and this server's log get a
truncation record. SEER_NOTEBOOK_MAX_STREAM_BYTES, ..._MAX_DISPLAYS, ..._MAX_DISPLAY_BYTES,
..._MAX_CELL_DISPLAY_BYTES and ..._MAX_SESSION_OUTPUT_BYTES set the defaults.

Environment: SEER_NOTEBOOK_KEY (request signing key) and SEER_NOTEBOOK_TOKEN (live view
token) are generated when unset; SEER_DIE_WITH_PARENT=1 ends the server with its parent.
When ready it prints one JSON line: {"endpoint", "url", "pid"}.]]

local DEFAULT_MAX_OUTPUT = 20000
-- What one request may be, on the main socket and the scopes' (ZMQ_MAXMSGSIZE: a frame over it
-- disconnects the peer before it is held whole), and how many may wait per peer. The largest
-- request is an execute's code; 64 MiB is far above any cell.
M.REQUEST_LIMITS = { max_bytes = 64 * 1024 * 1024, max_frames = 64, rcvhwm = 256 }
local PUBLISH_INTERVAL_MS = 40
local LIVE_MAX_TEXT = 512 * 1024

-- Per-cell output limits: what the server keeps of one cell's outputs (the notebook, the reply,
-- the live view). A kernel is hostile and a cell may print without end: past a limit outputs are
-- counted, not kept, so the server's memory and time follow what it keeps.
local function env_limit(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  local n = tonumber(v)
  if not n or n < 0 or n ~= math.floor(n) then
    error(("%s=%s: a limit is a whole number (bytes or a count)"):format(name, v), 0)
  end
  return n
end
local LIMIT_FIELDS = { "max_stream_bytes", "max_displays", "max_display_bytes", "max_cell_display_bytes",
                       "max_session_output_bytes" }
local function default_limits()
  return {
    max_stream_bytes = env_limit("SEER_NOTEBOOK_MAX_STREAM_BYTES", 64 * 1024 * 1024),
    max_displays = env_limit("SEER_NOTEBOOK_MAX_DISPLAYS", 10000),
    max_display_bytes = env_limit("SEER_NOTEBOOK_MAX_DISPLAY_BYTES", 16 * 1024 * 1024),
    max_cell_display_bytes = env_limit("SEER_NOTEBOOK_MAX_CELL_DISPLAY_BYTES", 256 * 1024 * 1024),
    -- All the outputs one session's notebook keeps, across its cells (stream and display and
    -- error bytes as the per-cell limits count them): without it a kernel that fills cell after
    -- cell grows this server and the notebook file without bound. 1 GiB is the largest notebook
    -- seer loads again (notebook.load, to resume or continue it).
    max_session_output_bytes = env_limit("SEER_NOTEBOOK_MAX_SESSION_OUTPUT_BYTES", 1024 * 1024 * 1024),
  }
end
M.default_limits = default_limits
-- Sizes as the truncation record and the log say them.
local function mib(n)
  if n >= 1024 * 1024 then return ("%.1f MiB"):format(n / (1024 * 1024)) end
  if n >= 1024 then return ("%.1f KiB"):format(n / 1024) end
  return ("%d bytes"):format(n)
end
M.mib = mib
-- How long a cell that ran past its timeout gets to stop after the interrupt before its kernel
-- is stopped (the cell may catch the interrupt, or sit in C code that never checks it).
local INTERRUPT_GRACE_MS = env_limit("SEER_NOTEBOOK_INTERRUPT_GRACE_MS", 10000)
-- Outputs streamed to a caller go in batches at most this often (one ZMQ message each), so a
-- flood of small outputs cannot fill the caller's queue, where ZMQ would drop the reply.
local STREAM_BATCH_MS = 50

local Server = {}
Server.__index = Server

-- Lines can quote a kernel (what it sent, why a message was refused): shown, not obeyed, on a
-- terminal (seer.terminal).
local function log(fmt, ...)
  io.stderr:write(require("seer.terminal").safe(("seer notebook: " .. fmt):format(...)), "\n")
end
-- Routine events (a session started or ended) only with SEER_NOTEBOOK_VERBOSE=1; failures always.
local verbose = os.getenv("SEER_NOTEBOOK_VERBOSE") == "1"
local function debug_log(...)
  if verbose then log(...) end
end

---------------------------------------------------------------------------------------------
-- outputs

-- A kernel iopub message as an nbformat output (nil for messages that are not outputs).
local function to_output(msg)
  local t, c = msg.header.msg_type, msg.content
  if t == "stream" then
    return { output_type = "stream", name = c.name, text = c.text }
  elseif t == "display_data" then
    return { output_type = "display_data", data = c.data or {}, metadata = c.metadata or {} }
  elseif t == "execute_result" then
    return { output_type = "execute_result", execution_count = c.execution_count, data = c.data or {},
             metadata = c.metadata or {} }
  elseif t == "error" then
    local tb = json.array()
    for i, l in ipairs(c.traceback or {}) do tb[i] = l end
    return { output_type = "error", ename = c.ename or "Error", evalue = c.evalue or "", traceback = tb }
  end
end

-- What a caller gets back: the outputs in order, their text cut to a total budget of max_chars
-- with a marker that says what was cut. Once the budget is spent the outputs after it are not
-- listed, only counted in one marker where they began; errors (cut short) and the outputs in
-- `always` (the cell's truncation record) come back whatever the budget. The notebook keeps
-- everything the server kept.
local function truncate_outputs(outputs, max_chars, always)
  local budget, truncated = max_chars, false
  local function marked(s, keep, total)
    -- do not split a UTF-8 sequence
    while keep > 0 and keep < #s and s:byte(keep + 1) >= 0x80 and s:byte(keep + 1) < 0xC0 do keep = keep - 1 end
    budget, truncated = 0, true
    return s:sub(1, keep) .. ("\n[output truncated: %d more characters not shown; the notebook keeps all of it]\n"):format(total - keep)
  end
  local function cut(s)
    s = notebook.join(s)
    if #s <= budget then budget = budget - #s; return s end
    return marked(s, math.max(budget, 0), #s)
  end
  -- Consecutive pieces of one stream are one output, as in the notebook; only what fits the
  -- budget is joined.
  local function cut_stream(pieces)
    local total = 0
    for _, p in ipairs(pieces) do total = total + #p end
    if total <= budget then budget = budget - total; return table.concat(pieces) end
    local head, n = {}, 0
    for _, p in ipairs(pieces) do
      if n >= budget then break end
      head[#head + 1] = p:sub(1, budget - n + 1) -- one byte more: marked() checks the boundary
      n = n + #head[#head]
    end
    return marked(table.concat(head), math.max(budget, 0), total)
  end
  local out, skipped, marker = json.array(), 0, nil
  local i = 1
  while i <= #outputs do
    local o = outputs[i]
    if always and always[o] then
      out[#out + 1] = o
    elseif budget <= 0 and o.output_type ~= "error" then
      skipped, truncated = skipped + 1, true
      if not marker then
        marker = { output_type = "stream", name = "stdout" }
        out[#out + 1] = marker
      end
      -- the rest of a stream's pieces are the same output
      while o.output_type == "stream" and outputs[i + 1] and outputs[i + 1].output_type == "stream"
            and outputs[i + 1].name == o.name and not (always and always[outputs[i + 1]]) do i = i + 1 end
    elseif o.output_type == "stream" then
      local pieces = { notebook.join(o.text) }
      while outputs[i + 1] and outputs[i + 1].output_type == "stream" and outputs[i + 1].name == o.name
            and not (always and always[outputs[i + 1]]) do
        i = i + 1
        pieces[#pieces + 1] = notebook.join(outputs[i].text)
      end
      out[#out + 1] = { output_type = "stream", name = o.name, text = cut_stream(pieces) }
    else
      local saved
      if budget <= 0 then saved, budget = budget, 2000 end -- an error after the budget: its own, small
      local c = {}
      for k, v in pairs(o) do c[k] = v end
      if o.output_type == "error" then
        c.evalue = cut(o.evalue)
        local tb = json.array()
        for j, l in ipairs(o.traceback or {}) do
          if budget <= 0 then break end
          tb[j] = cut(l)
        end
        c.traceback = tb
      elseif o.data then
        local d = {}
        for mime, v in pairs(o.data) do
          if mime:match("^text/") or mime == "application/json" then d[mime] = type(v) == "string" and cut(v) or v
          else d[mime] = v end
        end
        c.data = d
      end
      out[#out + 1] = c
      if saved then budget = 0 end
    end
    i = i + 1
  end
  if marker then
    marker.text = ("[output truncated: %d more output%s not shown; the notebook keeps %s]\n")
      :format(skipped, skipped == 1 and "" or "s", skipped == 1 and "it" or "them")
  end
  return out, truncated
end
M.truncate_outputs = truncate_outputs

---------------------------------------------------------------------------------------------
-- sessions and executions

function Server:reply(req, content)
  content.status = content.status or "ok"
  if req.scope then content = self:scoped_view(req.scope, content) end
  self:send_to(req, { idents = req.idents, header = net.header(req.header.msg_type:gsub("_request$", "") .. "_reply", self.id),
                      parent_header = req.header, metadata = {}, content = content })
end

-- A request is answered on the socket it came in on: the main one, or its sandbox scope's.
function Server:send_to(req, msg)
  local sock = req.scope and req.scope.sock or self.api
  sock:send(msg)
end

-- An error's text for a scope's client (a sandbox): a host path in it is cut to its last part
-- (the sandbox is told file names, never where the host keeps them).
local function scrub_paths(text)
  return (text:gsub("(/[^%s'\"`:;,()%[%]{}]+)", function(p)
    if p:match("^/[^/]*/?$") then return p end -- "/" or one part: not a revealing path
    return p:match("([^/]+)/*$") or p
  end))
end
M.scrub_paths = scrub_paths

function Server:reply_error(req, ename, evalue)
  if req.scope and type(evalue) == "string" then evalue = scrub_paths(evalue) end
  self:reply(req, { status = "error", ename = ename, evalue = evalue })
end

function Server:publish(s, now)
  if not self.http then return end
  if s.published == s.nb.version then return end
  -- A large notebook costs more to publish (the live view parses each snapshot): the interval
  -- grows with that cost, so at most a fifth of the server's time goes to the live view, and a
  -- publish asked for at once (a cell's start and end) waits its turn too once it costs more
  -- than 20 ms, or a notebook of many outputs would make every cell pay two of them.
  if now and (s.publish_cost or 0) > 20 then now = false end
  if not now and process.now_ms() - (s.published_at or 0) < math.max(PUBLISH_INTERVAL_MS, 4 * (s.publish_cost or 0)) then
    s.publish_pending = true
    return
  end
  local t0 = process.now_ms()
  -- A browser shows a stream's head and tail (LIVE_MAX_TEXT), the file has all of it.
  local snapshot = s.nb:to_json(false, LIVE_MAX_TEXT)
  self.http:publish(s.id, snapshot)
  -- a large snapshot (and its pieces) is garbage at once: collected now, not once the heap has
  -- grown by the GC's pause
  if #snapshot > 16 * 1048576 then snapshot = nil; collectgarbage() end
  s.published, s.published_at, s.publish_pending = s.nb.version, process.now_ms(), false
  s.publish_cost = s.published_at - t0
end

function Server:session_info(s)
  return { session_id = s.id, name = s.name, notebook_path = s.nb.path, jupyter_url = self:jupyter_url(s.id),
           kernel_pid = s.kernel and ((s.kernel.process and s.kernel.process.pid) or (s.kernel.remote and s.kernel.remote.pid)) or json.null,
           state = s.starting and "starting" or s.dead and "dead" or (s.running and "busy" or "idle"),
           dead_reason = (not s.starting and s.dead) or json.null,
           bad_messages = s.kernel and s.kernel:bad_messages() or s.bad_seen or 0,
           truncations = s.truncations or json.null, save_failures = s.save_failures or 0,
           last_save_error = (s.save_failures or 0) > 0 and s.last_save_error or json.null,
           kept_output_bytes = s.output_total and s.output_total.bytes or 0,
           sandbox_id = s.scope or json.null }
end

function Server:jupyter_url(id)
  if not self.http then return json.null end
  return ("http://%s:%d/notebooks/%s?token=%s"):format(self.host, self.http.port, id, self.token)
end

---Checks a kernel connection that sandboxd (inside the sandbox) sent: ipc endpoints under the
---sandbox's run folder, a key, small integer ports. Returns nil when it may be used, else why.
---@param info any
---@param sandbox_run string
---@return string|nil
function M.check_connection(info, sandbox_run)
  if type(info) ~= "table" then return "connection is not an object" end
  if info.transport ~= "ipc" then return "transport is not ipc" end
  if type(info.ip) ~= "string" or #info.ip > 200 or info.ip:sub(1, #sandbox_run + 1) ~= sandbox_run .. "/" then
    return "ip is not a path under the sandbox's run folder"
  end
  local rest = info.ip:sub(#sandbox_run + 2)
  if rest == "" or not rest:match("^[%w._-]+$") or rest:find("^%.") then return "ip names no plain file in the run folder" end
  if type(info.key) ~= "string" or #info.key < 16 or #info.key > 256 then return "key is not a string of 16 to 256 bytes" end
  for _, k in ipairs({ "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port" }) do
    local v = info[k]
    if type(v) ~= "number" or v ~= math.floor(v) or v < 0 or v > 65535 then return k .. " is not an integer 0..65535" end
  end
  return nil
end

-- A kernel that keeps sending what the checks drop is ended after this many (0: never); the
-- session gets the reason (SEER_NOTEBOOK_MAX_BAD_MESSAGES).
local MAX_BAD = tonumber(os.getenv("SEER_NOTEBOOK_MAX_BAD_MESSAGES") or "") or 10000
-- After execute_reply, how long the kernel's idle status may take before the cell ends anyway
-- (a kernel whose output channel died, or that never sends it, cannot hold a cell forever).
local IDLE_GRACE_MS = 5000

-- The connection to a kernel that sandboxd started, from its reply. The reply comes from inside
-- the sandbox, so only the key and the ports are taken from it: the transport is ipc and the
-- sockets are the ones named for this kernel in the sandbox's run directory (its host side).
-- Anything else (tcp to a host of the sandbox's choosing, a path outside the run directory)
-- would make this server connect where the sandbox says.
local function kernel_connection(r, L, name)
  local c = type(r) == "table" and r.connection
  local function bad(why) error(("sandbox %s: sandboxd's start_kernel reply is not valid: %s"):format(tostring(L.sandbox_id), why), 0) end
  if type(c) ~= "table" then bad("no connection") end
  if c.transport ~= "ipc" then bad("transport is not ipc") end
  local why = M.check_connection(c, L.sandbox_run)
  if why then bad(why) end
  if c.ip ~= L.sandbox_run .. "/" .. name then bad("the sockets are not the ones asked for") end
  if type(c.key) ~= "string" or #c.key < 16 or #c.key > 1024 then bad("no usable key") end
  local info = { transport = "ipc", ip = L.host_run .. "/" .. name, key = c.key, signature_scheme = "hmac-sha256" }
  for _, p in ipairs{ "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port" } do
    local v = c[p]
    local optional = p == "hb_port"
    if (v ~= nil or not optional) and (type(v) ~= "number" or v ~= math.floor(v) or v < 1 or v > 65535) then
      bad(p .. " is not a port number")
    end
    info[p] = v
  end
  return info
end

---------------------------------------------------------------------------------------------
-- kernel starts
--
-- Starting a kernel waits on what a sandbox controls: sandboxd's answer (its socket lies in the
-- sandbox's run folder, where code inside can put a silent impostor in its place) and the new
-- kernel's first answer (a sandbox busy to its limits answers late). A start therefore runs as a
-- coroutine that the loop resumes when one of its sockets is readable or its wait is over; other
-- sessions' requests and outputs go on meanwhile, and only what needs this kernel (the
-- start_session or restart reply, the session's queue) waits for it.

local SANDBOXD_TIMEOUT_MS = 15000 -- sandboxd's answer to start_kernel
local KERNEL_INFO_TIMEOUT_MS = 20000 -- the new kernel's first kernel_info_reply
-- A sandboxd reply to this server is a few hundred bytes (start_kernel, stop_service): nothing
-- bigger is held, and at most a few wait.
local SANDBOXD_LIMITS = { max_bytes = 1024 * 1024, max_frames = 64, rcvhwm = 16 }
-- A sandboxd client of a session that ended is closed this long after its last message went, so
-- that message (stop_service) is delivered first (ZMQ drops what is unsent on close).
local SANDBOXD_LINGER_MS = 3000

-- Inside a start: gives the loop back until one of socks is readable or ms have passed.
local function start_wait(socks, ms)
  coroutine.yield(socks, ms)
end

-- The client this server uses for a sandbox's sandboxd: requests are sent without waiting, and a
-- start reads its reply from the loop (sandboxd_take). Replies are signed with the sandbox's key
-- (which code inside the sandbox does not hold) and checked as seer.sandbox's client does.
local function sandboxd_client(L)
  local sock = net.socket("dealer", L.key, SANDBOXD_LIMITS)
  sock:connect(L.endpoint)
  return { sock = sock, session = net.uuid(), endpoint = L.endpoint, key = L.key, dropped = 0, sandbox_id = L.sandbox_id }
end

local function sandboxd_send(cl, op, content)
  local h = net.header(op .. "_request", cl.session)
  cl.sock:send{ header = h, parent_header = {}, metadata = {}, content = content or {} }
  cl.sent_at = process.now_ms()
  return h.msg_id
end

local function sandboxd_bad(r) return require("seer.sandbox").sandboxd_reply_problem(r) end

-- The reply to request `id` if it has come (other replies are read and dropped). Raises at
-- once when something on the socket failed the signature or the checks: only sandboxd holds
-- the key, so the socket in the run folder is not sandboxd's (or sandboxd is broken), and no
-- answer will come from it.
local function sandboxd_take(cl, id)
  local found
  for _ = 1, 64 do
    local r = cl.sock:recv(0)
    if not r then break end
    local why = sandboxd_bad(r)
    if why then cl.sock:note_dropped("a reply from sandboxd: " .. why)
    elseif r.parent_header.msg_id == id then found = r end
  end
  local n, why = cl.sock:dropped()
  if n > cl.dropped then
    cl.dropped = n
    if not found then
      error(("sandbox %s: what answered on sandboxd's socket is not sandboxd (%s); the socket in the sandbox's run folder was replaced or sandboxd is broken")
        :format(tostring(cl.sandbox_id), tostring(why)), 0)
    end
  end
  return found
end

-- Closes a sandboxd client once what it sent last has had time to go.
function Server:retire_sandboxd(cl)
  if not cl then return end
  self.retired = self.retired or {}
  self.retired[#self.retired + 1] = { cl = cl, at = (cl.sent_at or 0) + SANDBOXD_LINGER_MS }
end

function Server:close_retired(now, all)
  local keep = {}
  for _, r in ipairs(self.retired or {}) do
    if all or now >= r.at then pcall(r.cl.sock.close, r.cl.sock) else keep[#keep + 1] = r end
  end
  self.retired = keep
end

-- Asks for kernel_info until the kernel answers on shell AND its iopub messages reach this
-- server (a SUB socket receives only once its subscription has reached the kernel), as
-- seer.jupyter's Client:kernel_info, but waiting through the loop. Returns the reply content,
-- or nil and why.
local function kernel_handshake(c, timeout_ms)
  local deadline = process.now_ms() + timeout_ms
  local reply
  local window = 50 -- short first tries: a subscription usually lands within milliseconds
  while process.now_ms() < deadline do
    local id = c:send("shell", "kernel_info_request", {})
    local got_iopub = false
    local until_ms = math.min(deadline, process.now_ms() + window)
    while true do
      for i = 1, #c:sockets() do
        for _, msg in ipairs(c:pump(i, 200)) do
          if msg.parent_header.msg_id == id then
            if msg.channel == "iopub" then got_iopub = true end
            if msg.channel == "shell" then reply = msg.content end
          end
        end
      end
      if reply ~= nil and got_iopub then return reply end
      local alive, how = c:alive()
      if not alive then return nil, "the kernel " .. tostring(how) .. " before answering" end
      local left = until_ms - process.now_ms()
      if left <= 0 then break end
      start_wait(c:sockets(), math.min(left, 100))
    end
    window = math.min(window * 2, 1000)
  end
  if reply then return nil, ("the kernel answered on shell but its iopub messages did not arrive within %d ms"):format(timeout_ms) end
  return nil, ("the kernel did not answer kernel_info within %d ms"):format(timeout_ms)
end

-- A kernel inside a sandbox: its sandboxd starts it with ipc endpoints in the sandbox's run
-- directory, which this server reaches through the host side of that directory. Runs inside a
-- start (st): every wait goes back to the loop.
function Server:start_sandbox_kernel(s, st)
  local L = s.sandbox
  local function exists(p) local f = io.open(p, "rb"); if f then f:close() return true end return false end
  local function sandbox_alive()
    if not exists(L.state_dir .. "/sandbox.json") or exists(L.state_dir .. "/status.json") then
      return false, "ended with its sandbox " .. tostring(L.sandbox_id)
    end
    return true
  end
  local alive, why = sandbox_alive()
  if not alive then error(why, 0) end
  -- one client per session: a restart asks the sandboxd its first start reached
  local cl = s.sandboxd
  if not cl or cl.endpoint ~= L.endpoint or cl.key ~= L.key then
    self:retire_sandboxd(cl)
    cl = sandboxd_client(L)
    s.sandboxd = cl
  end
  s.kernel_starts = (s.kernel_starts or 0) + 1
  local name = ("kernel-%s-%d"):format(s.id, s.kernel_starts)
  cl.dropped = cl.sock:dropped() -- what this start's wait finds dropped is new
  local id = sandboxd_send(cl, "start_kernel", { name = name, env = s.kernel_env, cwd = s.workspace_dir })
  -- from here a cancelled start stops what sandboxd may still start
  st.stop = function() pcall(sandboxd_send, cl, "stop_service", { name = name }) end
  local deadline = process.now_ms() + SANDBOXD_TIMEOUT_MS
  local reply
  while true do
    reply = sandboxd_take(cl, id)
    if reply then break end
    alive, why = sandbox_alive()
    if not alive then error(why, 0) end
    local left = deadline - process.now_ms()
    if left <= 0 then error(("sandbox start_kernel: no answer from sandboxd within %d ms"):format(SANDBOXD_TIMEOUT_MS), 0) end
    start_wait({ cl.sock }, math.min(left, 100))
  end
  local r = reply.content
  if r.status == "error" then
    error(("sandbox start_kernel: %s: %s"):format(tostring(r.ename), tostring(r.evalue)), 0)
  end
  local info = kernel_connection(r, L, name)
  local c = jupyter.connect(info)
  c.remote = {
    pid = type(r.pid) == "number" and r.pid or nil,
    alive = function()
      -- the run folder is the sandbox's: read bounded with no link followed, never a fifo
      local text = require("seer.safe_fs").root(L.host_run, "the sandbox's run folder"):read("services/" .. name .. ".exit", { max = 65536 })
      if text then
        local ok, st2 = pcall(json.decode, text)
        return false, ok and type(st2) == "table" and type(st2.how) == "string" and st2.how or "exited"
      end
      -- No notice (sandboxd could not write it: a full disk; or the sandbox's keeper was
      -- killed with everything in it): every channel's socket refusing connects for 3 s means
      -- nothing listens there any more. A cell waited for its timeout (300 s), the run then
      -- recorded as completed.
      local down = math.huge
      for _, k in ipairs({ "shell", "control", "stdin", "iopub" }) do
        local so = c[k]
        if so and so._s then down = math.min(down, so._s:endpoint_down_ms()) end
      end
      if down ~= math.huge and down > 3000 then
        return false, ("ended (its sockets have refused connections for %.0f s; no exit notice came)"):format(down / 1000)
      end
      return sandbox_alive()
    end,
    -- sent, not waited for: a sandboxd that does not answer cannot hold this server
    stop = function() pcall(sandboxd_send, cl, "stop_service", { name = name }) end,
  }
  s.kernel_log = L.log_dir .. "/" .. name .. ".log"
  return c
end

-- The body of a start (inside its coroutine): the kernel, then its first answer. Returns the
-- kernel_info reply; s.kernel is the new kernel.
function Server:start_kernel(s, st)
  local c
  local ok, err = pcall(function()
    if s.sandbox then c = self:start_sandbox_kernel(s, st)
    else
      -- a kernel on this host: started here (it binds within milliseconds), answered through the loop
      c = jupyter.start_local{ runtime_dir = self.runtime_dir, cwd = s.workspace_dir, env = s.kernel_env, log = s.kernel_log }
    end
    st.client = c
    local info, why = kernel_handshake(c, KERNEL_INFO_TIMEOUT_MS)
    if not info then
      error("the kernel did not start: " .. why .. (s.kernel_log and (" (its log: " .. s.kernel_log .. ")") or ""), 0)
    end
    return info
  end)
  if not ok then
    st.client = nil
    if c then pcall(c.close, c) end
    error(err, 0)
  end
  local info = err
  -- The connection file holds the kernel's key; the kernel has read it and this server keeps
  -- the connection in memory, so it does not stay on disk for a crash to leave behind.
  if c.connection_file then os.remove(c.connection_file); c.connection_file = nil end
  st.client = nil
  s.kernel, s.dead = c, nil
  s.nb.doc.metadata.language_info = info.language_info or s.nb.doc.metadata.language_info
  return info
end

-- Starts the kernel of session s; done(ok, info_or_error) is called once it answered or
-- failed (from the loop, or from here when it fails at once). s.starting is the start meanwhile.
function Server:begin_start(s, done)
  local st = { s = s, done = done, socks = {}, wake = 0 }
  st.co = coroutine.create(function() return self:start_kernel(s, st) end)
  self.starts = self.starts or {}
  self.starts[st] = true
  s.starting = st
  self:step_start(st)
  return st
end

-- Resumes a start; when it has finished, hands the result to its done.
function Server:step_start(st)
  if not self.starts[st] then return end
  st.ready = false
  local ok, a, b = coroutine.resume(st.co)
  if coroutine.status(st.co) ~= "dead" then
    st.socks, st.wake = a or {}, process.now_ms() + (b or 0)
    return
  end
  self.starts[st] = nil
  if st.s.starting == st then st.s.starting = nil end
  if not ok then reraise_interrupt(a) end
  local dok, derr = pcall(st.done, ok, a)
  if not dok then
    reraise_interrupt(derr)
    log("session %s: after its kernel start: %s", st.s.id, tostring(derr))
  end
end

-- Abandons a start (its session ended, or the server): what it started is stopped; done is
-- called with `why` when given (the server is shutting down: the request waiting is answered).
function Server:cancel_start(st, why)
  if not (self.starts and self.starts[st]) then return end
  self.starts[st] = nil
  if st.s.starting == st then st.s.starting = nil end
  if st.client then pcall(st.client.close, st.client)
  elseif st.stop then st.stop() end
  if why then
    local ok, err = pcall(st.done, false, why)
    if not ok then reraise_interrupt(err) end
  end
end

-- The server's default output folder (--output-dir, "outputs" of its working directory), made
-- the first time a session goes there.
function Server:output_dir()
  if not self.output_dir_made then
    local d = self.default_output_dir or "outputs"
    process.mkdir_p(d)
    self.output_dir_made = core.realpath(d) or d
  end
  return self.output_dir_made
end

-- Starts a session. `c` is the request's content, or (for a sandbox-bound client) the content
-- the server built from the session it starts like; then c.load reads the notebook to resume or
-- continue without following links, and c.init is the start-up code replayed before anything
-- else (models, libraries, init code), as restart replays it.
function Server:new_session(req, c)
  c = c or req.content
  local load = type(c.load) == "function" and c.load or notebook.load
  local id = net.uuid():sub(1, 8)
  self.pending_ids = self.pending_ids or {} -- sessions whose kernel is starting
  while self.sessions[id] or self.pending_ids[id] do id = net.uuid():sub(1, 8) end
  -- A continued notebook goes beside its original unless told otherwise.
  local dir = c.notebook_dir or (c["continue"] and c["continue"]:match("^(.*)/[^/]*$")) or self:output_dir()
  -- no link followed on the way: the folder may lie in a sandbox's workspace (callers realpath it)
  local mk_ok, mk_err = require("seer.safe_fs").mkdirs_nofollow(dir)
  if not mk_ok then error(mk_err, 0) end
  self.swept = self.swept or {}
  if not self.swept[dir] then
    self.swept[dir] = true
    pcall(sweep_temporaries, dir)
  end
  local nb, rerun
  if c.resume then
    -- A notebook one of this server's live sessions holds is not resumed: both would save the
    -- same file, and whichever saved last would wipe the other's cells.
    local holder = self:session_holding(c.resume, c.disk_id)
    if holder then
      -- a scope (a sandbox) is told the file's name only, never the host path
      local shown = req.scope and (c.resume:match("([^/]+)$") or c.resume) or c.resume
      if holder.dead and not holder.starting then
        -- its kernel is gone, but the session still holds the file (a restart goes on writing it)
        return self:reply_error(req, "NotebookInUse", ("start_session: resume: %s is the notebook of session %s on this server, whose kernel %s; the session still holds it (a restart of session %s goes on writing it). Restart session %s to go on in it (a new kernel; the notebook keeps its cells), or end session %s first and resume again to re-run its cells; continue_notebook (start_session with continue) re-runs it under a new name")
          :format(shown, holder.id, tostring(holder.dead), holder.id, holder.id, holder.id))
      end
      return self:reply_error(req, "NotebookInUse", ("start_session: resume: %s is the notebook of live session %s on this server; resuming it would make two sessions overwrite one file. Use continue_notebook (start_session with continue), which re-runs it under a new name, or end session %s first")
        :format(shown, holder.id, holder.id))
    end
    nb = load(c.resume)
    -- what was read: a save that finds another file there does not overwrite it (save_nofollow)
    nb._disk_id = c.disk_id or M.file_identity(c.resume)
    rerun = true
  elseif c["continue"] then
    local src = load(c["continue"])
    local base = c.name or (c["continue"]:match("([^/]+)%.ipynb$") or "Notebook"):gsub("^%d+%-%d+%-%d+%-%d+%-%d+_", "")
    nb = notebook.new{ path = notebook.unique_path(dir, base) }
    nb._disk_id = M.file_identity(nb.path)
    nb.doc.cells = src.doc.cells
    nb.doc.metadata.seer.continued_from = c["continue"]
    rerun = true
  else
    nb = notebook.new{ path = notebook.unique_path(dir, c.name) }
    nb._disk_id = M.file_identity(nb.path) -- the reservation (an empty notebook)
  end
  nb.doc.metadata.seer = nb.doc.metadata.seer or {}
  nb.doc.metadata.seer.path, nb.doc.metadata.seer.session_id = nb.path, id
  -- the sandbox whose kernel writes it: a scope of that sandbox may resume or continue it, no
  -- other (a notebook of the researcher's host sessions holds what no sandbox may read)
  local owner = type(c.sandbox) == "table" and type(c.sandbox.sandbox_id) == "string" and c.sandbox.sandbox_id or nil
  nb.doc.metadata.seer.sandbox_id = owner or json.null
  if owner then
    self.sandbox_notebooks = self.sandbox_notebooks or {}
    local list = self.sandbox_notebooks[owner] or {}
    self.sandbox_notebooks[owner] = list
    list[nb.path:match("([^/]+)$")] = true
  end
  -- The output folder may be one the sandbox can write (inside /workspace): saves never follow
  -- a link there (a folder swapped for a link would send them anywhere on the host).
  nb.save = save_nofollow
  local s = { id = id, name = c.name or "Notebook", nb = nb, queue = {}, init = {}, workspace_dir = c.workspace_dir,
              kernel_env = c.kernel_env, sandbox = c.sandbox, kernel_log = self.runtime_dir .. "/kernel-" .. id .. ".log",
              cell_timeout = tonumber(c.cell_timeout) }
  for _, code in ipairs(type(c.init) == "table" and c.init or {}) do s.init[#s.init + 1] = code end
  if s.sandbox then self:scope_for(s.sandbox) end -- a bad launcher fails before a kernel starts
  -- The kernel starts through the loop (begin_start); the session exists, and start_session is
  -- answered, once it has.
  self.pending_ids[id] = s -- (session_holding looks at these too)
  self:begin_start(s, function(ok, err)
    self.pending_ids[id] = nil
    if ok then ok, err = pcall(self.session_started, self, req, s, dir, rerun) end
    if not ok then
      reraise_interrupt(err)
      if not self.sessions[id] then self:retire_sandboxd(s.sandboxd); s.sandboxd = nil end
      log("request start_session%s failed: %s", req.scope and (" from sandbox " .. req.scope.id) or "", tostring(err))
      self:reply_error(req, "ServerError", tostring(err))
    end
  end)
end

-- The rest of new_session once the kernel has answered: the session joins the server (and its
-- sandbox's scope), its notebook is saved, and its start-up code and the cells of a resumed or
-- continued notebook run before start_session is answered.
function Server:session_started(req, s, dir, rerun)
  local id, nb = s.id, s.nb
  self.sessions[id] = s
  if s.sandbox then self:scope_add_session(s, dir) end
  local saved, serr = pcall(nb.save, nb)
  if saved and serr then log("session %s: %s", id, fork_note(serr)) end
  if not saved then
    -- No notebook, no session: the kernel just started goes too.
    self:drop_session(s, "was shut down")
    error(("cannot write the notebook: %s"):format(tostring(serr)), 0)
  end
  self:publish(s, true)
  debug_log("session %s: notebook %s, kernel pid %s", id, nb.path, tostring(s.kernel.process and s.kernel.process.pid or s.kernel.remote.pid))
  -- The start-up code first (hidden), then every code cell of a resumed or continued notebook
  -- in place; the answer comes once all have run.
  local steps = {}
  for _, code in ipairs(s.init) do steps[#steps + 1] = { code = code, hidden = true, init = true } end
  local cells = rerun and nb:code_cells() or {}
  for _, cell in ipairs(cells) do
    nb:reset_cell(cell)
    steps[#steps + 1] = { code = notebook.join(cell.source), cell = cell }
  end
  local died_in -- the re-run cell whose run the kernel died in
  local function answer()
    local info = self:session_info(s)
    if rerun then info.cells_run, info.cells_failed = #cells, 0 end
    if died_in then
      -- the kernel died during the re-run: which cell it died in, and how many never ran
      local index, number = cell_position(nb, died_in.cell)
      info.kernel_died = { cell_number = number or json.null, cell_index = index or json.null, while_running = died_in.ran,
                           cells_not_run = died_in.not_run,
                           reason = s.dead or json.null }
    end
    return info
  end
  if #steps == 0 then return self:reply(req, self:started_reply(req, s, answer())) end
  local pending, errors, init_failed = #steps, 0, nil
  -- resume/continue: each re-run cell may be given a timeout (a cell that loops for ever held
  -- the start, and the caller, for ever)
  local cell_timeout = s.cell_timeout
  if cell_timeout and not (cell_timeout > 0 and cell_timeout < math.huge) then cell_timeout = nil end
  for k, st in ipairs(steps) do
    self:enqueue(s, { code = st.code, hidden = st.hidden, cell = st.cell, timeout = st.cell and cell_timeout or nil, on_done = function(e)
      if e.result ~= "ok" and st.cell and not died_in and s.dead and e.error and e.error.ename == "KernelDied" then
        local ran = tostring(e.error.evalue):find("while this cell was running", 1, true) ~= nil
        died_in = { cell = st.cell, not_run = #steps - k + (ran and 0 or 1), ran = ran }
      end
      if e.result ~= "ok" then
        if st.init then
          local r = e.error or e.reply or {}
          init_failed = init_failed or ("%s: %s"):format(tostring(r.ename or "Error"), tostring(r.evalue or ""))
        else
          errors = errors + 1
        end
      end
      pending = pending - 1
      if pending > 0 then return end
      if init_failed then
        self:drop_session(s, "was shut down")
        return self:reply_error(req, "StartError", "the session's start-up code (models, libraries, init code) failed: " .. init_failed)
      end
      local info = answer()
      if rerun then info.cells_failed = errors end
      self:reply(req, self:started_reply(req, s, info))
    end })
  end
end

-- The live (or starting) session whose notebook is `path` (the same name, the same real path,
-- or the same file: device and inode), or nil.
function Server:session_holding(path, disk_id)
  local real = core.realpath(path) or path
  local id = disk_id or M.file_identity(real)
  local file = id and id:match("^[^:]*:[^:]*")
  local function holds(s)
    local p = s and s.nb and s.nb.path
    if not p then return false end
    if p == path or p == real or (core.realpath(p) or p) == real then return true end
    local sid = s.nb._disk_id
    return file ~= nil and sid ~= nil and sid:match("^[^:]*:[^:]*") == file
  end
  for _, s in pairs(self.sessions) do if holds(s) then return s end end
  for _, s in pairs(self.pending_ids or {}) do if type(s) == "table" and holds(s) then return s end end
  return nil
end

-- Notebook:save for this server's notebooks (write_nofollow is defined with the scopes below).
-- Before it writes, it checks that the file on disk is still the one this session last wrote
-- (or read, or reserved): device, inode, size and modification time. When another writer has
-- changed it since (a second process resumed the same notebook), that file is left as it is and
-- this session's notebook goes to a new name beside it (as continue_notebook names a fork), so
-- neither writer's cells are lost. Returns nil, or {old, new} (the paths) when it forked.
save_nofollow = function(nb)
  local note
  if nb._disk_id then
    local now = M.file_identity(nb.path)
    if now and now ~= nb._disk_id then
      local old = nb.path
      local dir, file = old:match("^(.*)/([^/]+)$")
      local base = (file:match("^(.+)%.ipynb$") or file):gsub("^%d+%-%d+%-%d+%-%d+%-%d+_", "")
      local new = notebook.unique_path(dir, base)
      nb.path = new
      nb._disk_id = M.file_identity(new)
      nb.doc.metadata.seer = type(nb.doc.metadata.seer) == "table" and nb.doc.metadata.seer or {}
      nb.doc.metadata.seer.path, nb.doc.metadata.seer.forked_from = new, old
      note = { old = old, new = new }
    end
  end
  -- written piece by piece (a large stream output is encoded a piece at a time)
  nb._disk_id = M.write_nofollow(nb.path, function(emit)
    nb:write_json(emit, true)
    emit("\n")
  end)
  return note
end

-- Ends a session and forgets it (its notebook stays on disk).
-- When a session ends, the log sums up what its cells did not keep.
local function log_totals(s)
  local t = s.truncations
  if t then
    log("session %s ended: %d cell%s truncated at the output limits (not kept: %s of stream, %d display outputs, %d oversized outputs replaced, %d error outputs shortened or dropped, %d messages the kernel could not deliver, %d outputs (%s) past the session's total)",
        s.id, t.cells, t.cells == 1 and "" or "s", mib(t.stream_bytes), t.displays, t.oversized, t.errors or 0, t.kernel_undelivered,
        t.session_outputs or 0, mib(t.session_bytes or 0))
  end
end

function Server:drop_session(s, how)
  if s.starting then
    -- a restart under way: what it started is stopped, what waited for it fails
    self:cancel_start(s.starting)
    s.dead = how
    self:fail_executions(s, how)
  end
  if not s.dead then self:on_kernel_death(s, how) end
  self:retire_sandboxd(s.sandboxd)
  s.sandboxd = nil
  log_totals(s)
  self.sessions[s.id] = nil
  if self.http then self.http:remove(s.id) end
end

function Server:enqueue(s, e)
  e.outputs = json.array()
  e.displays = {}
  e.limits = e.limits or self.limits
  e.kept, e.dropped = new_kept(), new_dropped()
  -- the session's total of kept output: a notebook cell's outputs stay, a hidden execution's go
  -- with its reply
  if e.cell then
    s.output_total = s.output_total or { bytes = 0 }
    e.total = s.output_total
  end
  e.sizes = setmetatable({}, { __mode = "k" }) -- kept display output -> the bytes it was counted as
  e.pending_stream = json.array()
  s.queue[#s.queue + 1] = e
  if e.cell then self:publish(s) end
end

-- Starts the next queued execution of a session when its kernel is free.
function Server:pump_queue(s)
  if s.running or s.dead or s.starting or #s.queue == 0 then return end
  local e = table.remove(s.queue, 1)
  s.running = e
  e.msg_id = s.kernel:send("shell", "execute_request", { code = e.code, silent = false, store_history = not e.hidden,
                                                         user_expressions = {}, allow_stdin = false, stop_on_error = false })
  e.started = process.now_ms()
  e.bad_start = s.kernel:bad_messages()
  if e.timeout then e.deadline = e.started + e.timeout * 1000 end
  if e.cell then
    e.cell.metadata.execution_status = "running"
    s.nb:touch(e.cell)
    self:publish(s, true)
  end
end

-- A kernel past MAX_BAD dropped messages is ended, with the reason as its death.
function Server:check_bad(s)
  if s.dead or not s.kernel then return end
  local n, why = s.kernel:bad_messages()
  s.bad_seen = n
  if MAX_BAD > 0 and n >= MAX_BAD then
    log("session %s: the kernel sent %d malformed messages (the last: %s); stopping it", s.id, n, tostring(why))
    s.kernel:stop(0)
    self:on_kernel_death(s, ("was stopped by the notebook server: it sent %d malformed messages (the last: %s)"):format(n, tostring(why)))
  end
end

-- The cell that was running while its kernel sent messages that were dropped ends with a line
-- that says how many and why the last one was: the session sees it, nobody else does.
local function note_bad(s, e)
  if not s.kernel or e.bad_start == nil then return end
  local n, why = s.kernel:bad_messages()
  local new = n - e.bad_start
  if new <= 0 then return end
  local o = { output_type = "stream", name = "stderr",
              text = ("[seer] dropped %d malformed message%s from this session's kernel (the last: %s); the kernel may be compromised or broken\n")
                :format(new, new == 1 and "" or "s", tostring(why)) }
  e.outputs[#e.outputs + 1] = o
  if e.cell then s.nb:add_output(e.cell, o) end
end

---------------------------------------------------------------------------------------------
-- output limits and the truncation record (docs/notebook.md, "Output limits")

-- What keeping a value costs this server, in bytes: the length of its strings plus an overhead
-- for every value (a Lua string, table slot or hash node costs tens of bytes), so a bundle of
-- 200,000 empty strings counts as megabytes, not zero. Every part of an output the server keeps
-- is counted: data, metadata, an error's name, text and traceback lines.
local VALUE_OVERHEAD = 32
local function kept_bytes(v)
  local t = type(v)
  if t == "string" then return #v + VALUE_OVERHEAD end
  if t ~= "table" then return VALUE_OVERHEAD end
  local n = VALUE_OVERHEAD
  for k, x in pairs(v) do n = n + kept_bytes(k) + kept_bytes(x) end
  return n
end
M.kept_bytes = kept_bytes

-- An error output over its share is kept shortened: its name, the start of its text and its
-- first and last traceback lines (each cut), so the cell still shows what went wrong.
local ERROR_TEXT_KEEP, ERROR_LINES_KEEP, ERROR_LINE_KEEP = 4096, 10, 1024
-- How many shortened errors a cell keeps once its display and error bytes are spent (a cell
-- that filled its displays still shows the error it ended with; bounded: ~40 KiB each).
local SHORT_ERRORS_PAST_CAP = 10

-- The first n bytes of s, not splitting a UTF-8 sequence.
local function head_bytes(s, n)
  if #s <= n then return s end
  while n > 0 and s:byte(n + 1) >= 0x80 and s:byte(n + 1) < 0xC0 do n = n - 1 end
  return s:sub(1, n)
end

local function shorten_error(o, share)
  local function line(l)
    if #l <= ERROR_LINE_KEEP then return l end
    local h = head_bytes(l, ERROR_LINE_KEEP)
    return h .. ("... [%s more not kept]"):format(mib(#l - #h))
  end
  local tb, lines = json.array(), o.traceback or {}
  if #lines <= 2 * ERROR_LINES_KEEP then
    for i = 1, #lines do tb[i] = line(lines[i]) end
  else
    for i = 1, ERROR_LINES_KEEP do tb[#tb + 1] = line(lines[i]) end
    tb[#tb + 1] = ("[seer] %d traceback lines not kept"):format(#lines - 2 * ERROR_LINES_KEEP)
    for i = #lines - ERROR_LINES_KEEP + 1, #lines do tb[#tb + 1] = line(lines[i]) end
  end
  local ev = o.evalue or ""
  if #ev > ERROR_TEXT_KEEP then
    local h = head_bytes(ev, ERROR_TEXT_KEEP)
    ev = h .. ("\n[seer] %s more of this error's text not kept (an output keeps at most %s)"):format(mib(#ev - #h), mib(share))
  end
  return { output_type = "error", ename = o.ename, evalue = ev, traceback = tb }
end

-- Decides what of output o (from a kernel message) a cell keeps under its limits: o itself, a
-- shorter o (a stream cut at the limit, an error shortened), a notice in its place (a display
-- output over the per-output size), or nil (past a limit: counted in e.dropped). Display and
-- error outputs share the cell's byte budget (max_cell_display_bytes); each is counted whole
-- (kept_bytes), metadata included, and e.sizes remembers what each kept one was counted as, for
-- update_display_data.
-- What the session's total (max_session_output_bytes) has room for, and counting against it (and
-- the cell's share of it, given back when the cell's outputs are cleared or it runs again).
local function session_room(e)
  if not e.total then return math.huge end
  return (e.limits.max_session_output_bytes or math.huge) - e.total.bytes
end
local function count_total(e, n)
  if not e.total then return end
  e.total.bytes = e.total.bytes + n
  if e.cell then e.cell._kept_bytes = (e.cell._kept_bytes or 0) + n end
end
local function drop_session(drop, n)
  drop.session_outputs, drop.session_bytes = (drop.session_outputs or 0) + 1, (drop.session_bytes or 0) + n
end

local function keep_output(e, o)
  local L, kept, drop = e.limits, e.kept, e.dropped
  if o.output_type == "stream" then
    local n = #o.text
    local cell_room, sroom = L.max_stream_bytes - kept.stream_bytes, session_room(e)
    local room = math.min(cell_room, sroom)
    if n <= room then kept.stream_bytes = kept.stream_bytes + n; count_total(e, n) return o end
    local by_session = sroom < cell_room
    if not by_session then drop.stream_messages = drop.stream_messages + 1 end
    if room <= 0 then
      if by_session then drop_session(drop, n) else drop.stream_bytes = drop.stream_bytes + n end
      return nil
    end
    local keep = room
    while keep > 0 and o.text:byte(keep + 1) >= 0x80 and o.text:byte(keep + 1) < 0xC0 do keep = keep - 1 end
    if by_session then
      drop_session(drop, n - keep)
      kept.stream_bytes = kept.stream_bytes + keep
    else
      drop.stream_bytes = drop.stream_bytes + n - keep
      kept.stream_bytes = L.max_stream_bytes -- full: what follows is dropped
    end
    count_total(e, keep)
    if keep == 0 then return nil end
    return { output_type = "stream", name = o.name, text = o.text:sub(1, keep) }
  elseif o.output_type == "display_data" or o.output_type == "execute_result" then
    if kept.displays >= L.max_displays then
      drop.displays = drop.displays + 1
      return nil
    end
    local n = kept_bytes(o)
    if n > L.max_display_bytes then
      drop.oversized = drop.oversized + 1
      local kinds = {}
      for k in pairs(o.data) do kinds[#kinds + 1] = k end
      table.sort(kinds)
      local what = table.concat(kinds, ", ")
      if #what > 1024 then what = head_bytes(what, 1024) .. ", ..." end
      local notice = { output_type = o.output_type, execution_count = o.execution_count, metadata = {},
                       data = { ["text/plain"] = ("[seer] a %s output of %s (%s%s) was not kept: one output may hold at most %s"):format(
                         o.output_type, mib(n), what, next(o.metadata or {}) ~= nil and ", with metadata" or "", mib(L.max_display_bytes)) } }
      local m = kept_bytes(notice)
      if m > session_room(e) then drop_session(drop, m) return nil end
      kept.displays, kept.display_bytes = kept.displays + 1, kept.display_bytes + m
      count_total(e, m)
      e.sizes[notice] = m
      return notice
    end
    if kept.display_bytes + n > L.max_cell_display_bytes then
      drop.displays, drop.display_bytes = drop.displays + 1, drop.display_bytes + n
      return nil
    end
    if n > session_room(e) then drop_session(drop, n) return nil end
    kept.displays, kept.display_bytes = kept.displays + 1, kept.display_bytes + n
    count_total(e, n)
    e.sizes[o] = n
    return o
  elseif o.output_type == "error" then
    if kept.errors >= L.max_displays then
      drop.errors = drop.errors + 1
      drop.error_bytes = drop.error_bytes + kept_bytes(o)
      return nil
    end
    local n = kept_bytes(o)
    if n <= L.max_display_bytes and kept.display_bytes + n <= L.max_cell_display_bytes and n <= session_room(e) then
      kept.errors, kept.display_bytes = kept.errors + 1, kept.display_bytes + n
      count_total(e, n)
      return o
    end
    local short = shorten_error(o, math.min(L.max_display_bytes, L.max_cell_display_bytes))
    local m = kept_bytes(short)
    -- past the cell's bytes or the session's total, a cell still keeps a few errors shortened
    -- (bounded: SHORT_ERRORS_PAST_CAP of ~40 KiB), so it shows the error it ended with
    local past = kept.display_bytes + m > L.max_cell_display_bytes or m > session_room(e)
    if past and kept.short_errors >= SHORT_ERRORS_PAST_CAP then
      drop.errors = drop.errors + 1
      drop.error_bytes = drop.error_bytes + n
      return nil
    end
    if past then kept.short_errors = kept.short_errors + 1 end
    kept.errors, kept.display_bytes = kept.errors + 1, kept.display_bytes + m
    count_total(e, m)
    drop.errors_shortened = drop.errors_shortened + 1
    drop.error_bytes = drop.error_bytes + math.max(0, n - m)
    return short
  end
  return nil -- nothing else is an output (to_output makes only the kinds above)
end
M.keep_output = keep_output

-- A fresh e.kept / e.dropped (enqueue; clear_output starts the counts again).
new_kept = function()
  return { stream_bytes = 0, displays = 0, display_bytes = 0, errors = 0, short_errors = 0 }
end
new_dropped = function()
  return { stream_bytes = 0, stream_messages = 0, displays = 0, display_bytes = 0, oversized = 0, updates = 0,
           kernel_undelivered = 0, errors = 0, errors_shortened = 0, error_bytes = 0, session_outputs = 0, session_bytes = 0 }
end
M.new_kept, M.new_dropped = new_kept, new_dropped

-- update_display_data: the display's new data and metadata replace the old ones when the new
-- size fits the per-output limit and the cell's budget with the old size given back; else the
-- update is dropped (counted).
local function apply_update(e, o, content)
  local L, kept = e.limits, e.kept
  local new = { output_type = o.output_type, execution_count = o.execution_count, data = content.data or {},
                metadata = content.metadata or {} }
  local n = kept_bytes(new)
  local old = e.sizes[o] or 0
  if n > L.max_display_bytes or kept.display_bytes - old + n > L.max_cell_display_bytes or n - old > session_room(e) then
    e.dropped.updates = e.dropped.updates + 1
    return false
  end
  o.data, o.metadata = new.data, new.metadata
  kept.display_bytes = kept.display_bytes - old + n
  count_total(e, n - old)
  e.sizes[o] = n
  return true
end
M.apply_update = apply_update

-- The record of what a cell did not keep, as one line of text (nil when nothing was dropped).
local function truncation_text(e)
  local d, L, parts = e.dropped, e.limits, {}
  if d.stream_bytes > 0 then
    parts[#parts + 1] = ("%s of stdout/stderr in %d message%s (a cell keeps %s)"):format(
      mib(d.stream_bytes), d.stream_messages, d.stream_messages == 1 and "" or "s", mib(L.max_stream_bytes))
  end
  if d.displays > 0 then
    parts[#parts + 1] = ("%d display output%s (a cell keeps %d, at most %s in all)"):format(
      d.displays, d.displays == 1 and "" or "s", L.max_displays, mib(L.max_cell_display_bytes))
  end
  if d.oversized > 0 then
    parts[#parts + 1] = ("%d display output%s over %s each, replaced by a notice"):format(
      d.oversized, d.oversized == 1 and "" or "s", mib(L.max_display_bytes))
  end
  if d.updates > 0 then
    parts[#parts + 1] = ("%d update_display_data not applied (over %s, or past the cell's %s of display and error outputs)"):format(
      d.updates, mib(L.max_display_bytes), mib(L.max_cell_display_bytes))
  end
  if (d.errors_shortened or 0) > 0 then
    parts[#parts + 1] = ("%d error output%s shortened to the name, the start of the text and the first and last traceback lines (one output keeps at most %s, a cell %s of display and error outputs)"):format(
      d.errors_shortened, d.errors_shortened == 1 and "" or "s", mib(L.max_display_bytes), mib(L.max_cell_display_bytes))
  end
  if (d.errors or 0) > 0 then
    parts[#parts + 1] = ("%d error output%s (a cell keeps %d)"):format(d.errors, d.errors == 1 and "" or "s", L.max_displays)
  end
  if (d.error_bytes or 0) > 0 then
    parts[#parts + 1] = ("%s of error outputs in all"):format(mib(d.error_bytes))
  end
  if (d.session_outputs or 0) > 0 then
    parts[#parts + 1] = ("%s in %d output%s past the session's total (a session keeps %s of outputs across its cells)"):format(
      mib(d.session_bytes or 0), d.session_outputs, d.session_outputs == 1 and "" or "s", mib(L.max_session_output_bytes or 0))
  end
  if d.kernel_undelivered > 0 then
    parts[#parts + 1] = ("%d message%s the kernel could not deliver (its output channel was not read for its wait)"):format(
      d.kernel_undelivered, d.kernel_undelivered == 1 and "" or "s")
  end
  if #parts == 0 then return nil end
  return "[seer] output truncated: not kept: " .. table.concat(parts, "; ")
         .. ". Limits: docs/notebook.md, \"Output limits\" (seer notebook serve --max-stream-bytes, --max-displays, ..., --max-session-output-bytes)\n"
end
M.truncation_text = truncation_text

-- Adds the truncation record to a cell that dropped outputs: a stderr line at its end (in the
-- notebook, the reply and the log) and metadata.seer_truncated in the notebook's cell.
function Server:record_truncation(s, e)
  local text = truncation_text(e)
  if not text then return end
  local o = { output_type = "stream", name = "stderr", text = text }
  e.outputs[#e.outputs + 1] = o
  e.record = o
  local d = {}
  for k, v in pairs(e.dropped) do d[k] = v end
  e.dropped_record = d
  if e.cell then
    local last = e.cell.outputs[#e.cell.outputs]
    if last and last.output_type == "stream" and last.name == "stderr" and not notebook.join(last.text):match("\n$") then
      o = { output_type = "stream", name = "stderr", text = "\n" .. text }
    end
    s.nb:add_output(e.cell, o)
    e.cell.metadata.seer_truncated = d
    s.nb:touch(e.cell)
  end
  local t = s.truncations or { cells = 0, stream_bytes = 0, displays = 0, oversized = 0, kernel_undelivered = 0, errors = 0 }
  s.truncations = t
  t.cells, t.stream_bytes, t.displays = t.cells + 1, t.stream_bytes + d.stream_bytes, t.displays + d.displays
  t.oversized, t.kernel_undelivered = t.oversized + d.oversized, t.kernel_undelivered + d.kernel_undelivered
  t.errors = t.errors + d.errors + d.errors_shortened
  t.session_outputs, t.session_bytes = (t.session_outputs or 0) + d.session_outputs, (t.session_bytes or 0) + d.session_bytes
  log("session %s: cell %s %s", s.id, e.cell and ("[" .. tostring(e.cell.execution_count) .. "]") or "(hidden)", text:gsub("\n$", ""))
end

-- Sends the outputs waiting for a streaming caller as one `output` message.
function Server:flush_stream(e)
  if not e.pending_stream or #e.pending_stream == 0 then return end
  local batch = e.pending_stream
  e.pending_stream, e.streamed_at = json.array(), process.now_ms()
  self:send_to(e.req, { idents = e.req.idents, header = net.header("output", self.id), parent_header = e.req.header,
                        metadata = {}, content = { outputs = batch } })
end

-- Where a cell is: its 0-based index among code cells and its 0-based number among all cells
-- (nil, nil when it is no longer in the notebook).
cell_position = function(nb, cell)
  local code = 0
  for i, c in ipairs(nb.doc.cells) do
    if c == cell then return code, i - 1 end
    if c.cell_type == "code" then code = code + 1 end
  end
  return nil, nil
end

function Server:finish(s, e)
  s.running = nil
  note_bad(s, e)
  local md = e.reply_metadata
  if type(md) == "table" and type(md.seer_iopub_dropped) == "number" and md.seer_iopub_dropped > 0 then
    e.dropped.kernel_undelivered = e.dropped.kernel_undelivered + math.floor(md.seer_iopub_dropped)
  end
  self:record_truncation(s, e)
  if e.stream and e.req then
    if e.record then e.pending_stream[#e.pending_stream + 1] = e.record end
    -- (the save error line is in the reply's outputs only)
    self:flush_stream(e)
  end
  local r = e.reply or {}
  e.result = r.status or "error"
  if e.cell then
    if r.execution_count then e.cell.execution_count = r.execution_count end
    e.cell.metadata.execution_status = (e.result == "ok") and "complete" or "error"
    s.nb:touch(e.cell)
    local ok, err = pcall(s.nb.save, s.nb)
    if ok and err then -- saved, under a new name: someone else changed the file (save_nofollow)
      e.save_warning = fork_note(err, e.req and e.req.scope and true)
      log("session %s: %s", s.id, fork_note(err))
    end
    -- what the save encoded, piece by piece, is garbage now: collected at once after a cell that
    -- kept much; after other cells the incremental collector takes it (a full collection after
    -- every cell is a pass over the whole heap per cell: `x = 1` on a 200-cell notebook, three
    -- interleaved pairs, 33.5-38.2 ms a cell against 23.9-37.6 ms this way; noisy on the VM)
    if (e.cell._kept_bytes or 0) > 16 * 1048576 then collectgarbage() end
    if not ok then
      reraise_interrupt(err)
      e.save_error = tostring(err)
      s.save_failures = (s.save_failures or 0) + 1
      s.last_save_error = e.save_error
      log("session %s: cannot save %s: %s (the previous file is kept; the next save that works writes everything)",
          s.id, s.nb.path, e.save_error)
    elseif s.save_failures and s.save_failures > 0 then
      log("session %s: saved %s again after %d failed save%s", s.id, s.nb.path, s.save_failures, s.save_failures == 1 and "" or "s")
      s.save_failures = 0
    end
    self:publish(s, true)
  end
  if e.on_done then e.on_done(e) end
  if e.req then
    local outs, truncated = truncate_outputs(e.outputs, e.max_output or self.max_output, e.record and { [e.record] = true })
    if e.save_error then
      -- the caller hears of it in the outputs it reads too, not only in a field it may not check
      outs[#outs + 1] = { output_type = "stream", name = "stderr",
                          text = ("[seer] the notebook could not be saved: %s; the previous file is kept and the next save that works writes everything\n"):format(e.save_error) }
    end
    if e.save_warning then
      outs[#outs + 1] = { output_type = "stream", name = "stderr", text = ("[seer] %s\n"):format(e.save_warning) }
    end
    local content = { result = e.result, execution_count = r.execution_count or json.null, outputs = outs,
                      truncated = truncated or e.record ~= nil, dropped = e.dropped_record or json.null,
                      save_error = e.save_error or json.null, save_warning = e.save_warning or json.null,
                      notebook_path = s.nb.path }
    if e.cell then
      -- cell_index counts code cells (the Lua API's session:edit_cell); cell_number counts all
      -- cells, as read_notebook and add_markdown do (the MCP tools show both)
      content.cell_index, content.cell_number = cell_position(s.nb, e.cell)
    end
    if e.result ~= "ok" then
      content.error = e.error or { ename = r.ename or "Error", evalue = r.evalue or "", traceback = r.traceback or json.array() }
      if e.timed_out then
        content.error.ename = "TimeoutError"
        content.error.evalue = e.timeout_killed
          and ("the cell ran past its timeout of %g s and did not stop within %g s of the interrupt, so its kernel was stopped; restart the session to go on"):format(e.timeout, INTERRUPT_GRACE_MS / 1000)
          or ("the cell ran past its timeout of %g s and was interrupted"):format(e.timeout)
      end
    end
    self:reply(e.req, content)
  end
end

-- clear_output: what is cleared is no longer kept; the cell's limits count from here and the
-- session's total gets its bytes back.
local function clear_now(self, s, e)
  e.outputs = json.array()
  e.displays = {}
  e.kept = new_kept()
  if e.cell then
    if e.total then count_total(e, -(e.cell._kept_bytes or 0)) end
    s.nb:clear_outputs(e.cell, false)
  end
end

function Server:on_kernel_message(s, msg)
  local e = s.running
  local parent = msg.parent_header and msg.parent_header.msg_id
  if not e or parent ~= e.msg_id then return end
  local t = msg.header.msg_type
  if msg.channel == "shell" and t == "execute_reply" then
    e.reply, e.reply_metadata = msg.content, msg.metadata
  elseif msg.channel == "iopub" then
    if t == "status" then
      if msg.content.execution_state == "idle" then e.idle = true end
    elseif t == "execute_input" then
      if e.cell then e.cell.execution_count = msg.content.execution_count; s.nb:touch(e.cell) end
    elseif t == "clear_output" then
      if msg.content.wait then
        -- Jupyter's wait: the outputs go when the next one comes, and are shown (and kept, and
        -- counted) until then; a cell that ends on it keeps them (counting them as freed here
        -- let a kernel send 7 MiB + clear(wait) per cell past the session's cap for ever)
        e.clear_wait = true
        if e.cell then s.nb:clear_outputs(e.cell, true) end
      else
        clear_now(self, s, e)
      end
    elseif t == "update_display_data" then
      local id = msg.content.transient and msg.content.transient.display_id
      local o = id and e.displays[id]
      if o and apply_update(e, o, msg.content) and e.cell then s.nb:touch(e.cell) end
    else
      local o = to_output(msg)
      if o and e.clear_wait then e.clear_wait = nil; clear_now(self, s, e) end
      o = o and keep_output(e, o)
      if o then
        local id = msg.content.transient and msg.content.transient.display_id
        if id then e.displays[id] = o end
        e.outputs[#e.outputs + 1] = o
        if e.cell then s.nb:add_output(e.cell, o) end
        if e.stream and e.req then
          e.pending_stream = e.pending_stream or json.array()
          e.pending_stream[#e.pending_stream + 1] = o
          if process.now_ms() - (e.streamed_at or 0) >= STREAM_BATCH_MS then self:flush_stream(e) end
        end
      end
    end
  end
  if e.reply and e.idle then self:finish(s, e) end
  self:publish(s)
end

-- The kernel process ended: every cell it was running or had queued ends with an error that
-- says so, the notebook is saved, and the session waits for a restart.
function Server:on_kernel_death(s, how)
  s.dead = how
  local routine = how == "was shut down" or how == "was restarted" or how == "was shut down with the notebook server"
  ;(routine and debug_log or log)("session %s: the kernel %s", s.id, how)
  self:fail_executions(s, how)
  s.kernel:close()
end

-- Every cell a session was running or had queued ends with an error saying its kernel `how`.
function Server:fail_executions(s, how)
  local victims, was_running = {}, s.running
  if s.running then victims[1] = s.running end
  for _, e in ipairs(s.queue) do victims[#victims + 1] = e end
  s.running, s.queue = nil, {}
  -- what the caller can do next: a restart has already given the session a new kernel, and a
  -- session that was shut down is gone; any other death waits for a restart
  local next_step = how == "was restarted" and " (the session goes on with a new kernel)"
                    or (how == "was shut down" or how == "was shut down with the notebook server") and ""
                    or "; restart the session to go on"
  for _, e in ipairs(victims) do
    local ev = (e == was_running and "the kernel %s while this cell was running%s"
                or "the kernel %s before this cell ran%s"):format(how, next_step)
    e.error = { ename = "KernelDied", evalue = ev, traceback = json.array() }
    e.reply = { status = "error" }
    local o = { output_type = "error", ename = "KernelDied", evalue = ev, traceback = json.array() }
    e.outputs[#e.outputs + 1] = o
    if e.cell then s.nb:add_output(e.cell, o) end
    self:finish(s, e)
  end
end

local handlers = {} -- request type -> function(server, req); filled in below

---------------------------------------------------------------------------------------------
-- sandbox scopes (docs/notebook.md, "Sandbox-bound clients")
--
-- Sessions whose kernel runs in a sandbox belong to that sandbox's scope. A scope has its own
-- request socket and signing key; the key goes only to the client that started the session
-- (the experiment, over the main socket), which hands it to the agent's MCP server in the
-- session's mcp_config. A request that arrives on a scope's socket can only reach that
-- scope's sessions, and start sessions in that sandbox exactly like one of them: it never
-- names a launcher, a kernel environment, a working directory or an output directory, and
-- it reaches notebooks only by file name inside its sessions' output directory, opened without
-- following links. The key is the binding: an agent controls a tool's arguments, never the
-- MCP server's environment, and a forged argument cannot turn a scope request into a main one.

local ffi = require "ffi"
pcall(ffi.cdef, [[
struct seer_open_how { uint64_t flags; uint64_t mode; uint64_t resolve; };
struct seer_statx_ts { int64_t tv_sec; uint32_t tv_nsec; int32_t reserved; };
struct seer_statx {
  uint32_t stx_mask, stx_blksize; uint64_t stx_attributes; uint32_t stx_nlink, stx_uid, stx_gid;
  uint16_t stx_mode, spare0; uint64_t stx_ino, stx_size, stx_blocks, stx_attributes_mask;
  struct seer_statx_ts stx_atime, stx_btime, stx_ctime, stx_mtime;
  uint32_t stx_rdev_major, stx_rdev_minor, stx_dev_major, stx_dev_minor; uint64_t spare2[14];
};
]])
pcall(ffi.cdef, [[
long syscall(long number, ...);
int openat(int dirfd, const char *pathname, int flags, ...);
int close(int fd);
long read(int fd, void *buf, size_t count);
int statx(int dirfd, const char *pathname, int flags, unsigned int mask, struct seer_statx *buf) __asm__("statx");
char *strerror(int errnum);
long write(int fd, const void *buf, size_t count);
int fsync(int fd);
int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
int unlinkat(int dirfd, const char *pathname, int flags);
]])

local SYS_openat2 = 437 -- the same number on every Linux architecture
local O_RDONLY, O_NONBLOCK, O_DIRECTORY, O_NOFOLLOW, O_CLOEXEC = 0, 0x800, 0x10000, 0x20000, 0x80000
local O_WRONLY, O_CREAT, O_EXCL = 0x1, 0x40, 0x80
local RESOLVE_NO_XDEV, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x01, 0x02, 0x04, 0x08
local AT_FDCWD, AT_EMPTY_PATH, STATX_TYPE, STATX_SIZE = -100, 0x1000, 0x1, 0x200
local S_IFMT, S_IFREG = 0xF000, 0x8000
local ENOSYS = 38
local MAX_NOTEBOOK_BYTES = 256 * 1024 * 1024

local function errno_text() return ffi.string(ffi.C.strerror(ffi.errno())) end

local STATX_BASIC, AT_SYMLINK_NOFOLLOW_ = 0x7ff, 0x100
-- A file as saves tell it apart: "dev:ino:size:mtime" (a writer that renames a new file over it
-- changes the inode, one that writes in place the size or the time).
local function identity_of(st)
  return ("%d.%d:%s:%s:%d.%09d"):format(st.stx_dev_major, st.stx_dev_minor, tostring(st.stx_ino):gsub("U?LL$", ""),
    tostring(st.stx_size):gsub("U?LL$", ""), tonumber(st.stx_mtime.tv_sec), st.stx_mtime.tv_nsec)
end

-- Opens dir/name for reading, following no symbolic link anywhere in the path: dir is a real
-- path the host resolved when the session started, so a link in it now was planted. Returns
-- an fd, or nil and why. openat2 does it in one call; kernels before 5.6 walk the components
-- with O_NOFOLLOW (the same guarantee, one open per component).
local function open_dir_nofollow(dir)
  local how = ffi.new("struct seer_open_how")
  how.flags = bit.bor(O_RDONLY, O_DIRECTORY, O_CLOEXEC)
  how.resolve = bit.bor(RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS)
  local dfd = tonumber(ffi.C.syscall(SYS_openat2, ffi.cast("int", AT_FDCWD), dir, how, ffi.cast("size_t", ffi.sizeof(how))))
  if dfd < 0 and ffi.errno() == ENOSYS then
    dfd = ffi.C.openat(AT_FDCWD, "/", bit.bor(O_RDONLY, O_DIRECTORY, O_CLOEXEC))
    for part in dir:gmatch("[^/]+") do
      if dfd < 0 then break end
      local nfd = ffi.C.openat(dfd, part, bit.bor(O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_CLOEXEC))
      ffi.C.close(dfd)
      dfd = nfd
    end
  end
  if dfd < 0 then return nil, ("the folder %s cannot be opened without following links: %s"):format(dir, errno_text()) end
  return dfd
end

-- The identity (identity_of) of the file at path, no link followed; nil when there is none.
function M.file_identity(path)
  local dir, name = tostring(path):match("^(.*)/([^/]+)$")
  if not dir or dir == "" then return nil end
  local dfd = open_dir_nofollow(dir)
  if not dfd then return nil end
  local st = ffi.new("struct seer_statx")
  local r = ffi.C.statx(dfd, name, AT_SYMLINK_NOFOLLOW_, STATX_BASIC, st)
  ffi.C.close(dfd)
  if r ~= 0 then return nil end
  return identity_of(st)
end

local function open_nofollow(dir, name)
  local dfd, derr = open_dir_nofollow(dir)
  if not dfd then return nil, derr end
  -- O_NONBLOCK: a FIFO planted under the name must not block the server on open.
  local fd = ffi.C.openat(dfd, name, bit.bor(O_RDONLY, O_NOFOLLOW, O_NONBLOCK, O_CLOEXEC))
  local why = fd < 0 and errno_text()
  ffi.C.close(dfd)
  if fd < 0 then return nil, why end
  return fd
end

-- Writes dir/name atomically without following a link anywhere: the folder is opened as in
-- open_nofollow, the text goes to a new temporary file in it (O_EXCL | O_NOFOLLOW), then
-- renameat replaces dir/name, which replaces a link planted there instead of writing through
-- it. `text` is a string, a list of strings, or a function(emit) that hands the text to emit
-- piece by piece. Raises naming the
-- file and the reason; the temporary file is removed on every way out (an error, Ctrl-C), and
-- one left by a process killed mid-save is swept when a session next starts there
-- (sweep_temporaries): its name, `<name>.tmp-<pid>-<random>`, says whose it was.
local function write_nofollow(path, text)
  local dir, name = path:match("^(.*)/([^/]+)$")
  if not dir or dir == "" then error(("cannot save %s: not an absolute path"):format(path), 0) end
  local dfd, why = open_dir_nofollow(dir)
  if not dfd then error(why, 0) end
  local tmp = ("%s.tmp-%d-%s"):format(name, process.getpid(), net.uuid():sub(1, 8))
  local fd = ffi.C.openat(dfd, tmp, bit.bor(O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_CLOEXEC), ffi.cast("int", 420))
  if fd < 0 then
    why = errno_text()
    ffi.C.close(dfd)
    error(("writing %s: %s"):format(path, why), 0)
  end
  local renamed, written_id = false, nil
  local ok, err = pcall(function()
    -- small writes are gathered into 1 MiB before they reach the file
    local pending, pending_n = {}, 0
    local function write_all(piece)
      local off, n = 0, #piece
      local buf = ffi.cast("const char *", piece)
      while off < n do
        local w = tonumber(ffi.C.write(fd, buf + off, n - off))
        if w < 0 then
          if ffi.errno() ~= 4 then error(errno_text(), 0) end -- EINTR: again
        else
          off = off + w
        end
      end
    end
    local function emit(piece)
      if #piece >= 1048576 then -- a large piece (an encoded image) goes out as it is: no copy
        write_all(table.concat(pending))
        pending, pending_n = {}, 0
        return write_all(piece)
      end
      pending[#pending + 1] = piece
      pending_n = pending_n + #piece
      if pending_n >= 1048576 then
        write_all(table.concat(pending))
        pending, pending_n = {}, 0
      end
    end
    if type(text) == "function" then text(emit)
    elseif type(text) == "table" then for _, piece in ipairs(text) do emit(piece) end
    else emit(text) end
    write_all(table.concat(pending))
    if ffi.C.fsync(fd) ~= 0 then error(errno_text(), 0) end
    -- what this file is, as the next save checks it is still there (save_nofollow)
    local st = ffi.new("struct seer_statx")
    if ffi.C.statx(fd, "", AT_EMPTY_PATH, STATX_BASIC, st) == 0 then written_id = identity_of(st) end
    local c = ffi.C.close(fd)
    fd = -1
    if c ~= 0 then error(errno_text(), 0) end
    if ffi.C.renameat(dfd, tmp, dfd, name) ~= 0 then error(errno_text(), 0) end
    renamed = true
  end)
  if fd >= 0 then ffi.C.close(fd) end
  if not renamed then ffi.C.unlinkat(dfd, tmp, 0) end
  ffi.C.close(dfd)
  if not ok then
    reraise_interrupt(err)
    error(("writing %s: %s"):format(path, tostring(err)), 0)
  end
  return written_id
end
M.write_nofollow = write_nofollow

pcall(ffi.cdef, "int kill(int pid, int sig);")
local AT_SYMLINK_NOFOLLOW, STATX_MTIME = 0x100, 0x40

-- Removes the temporary files a save killed midway left in dir (kill -9, a power cut): this
-- server's `<name>.ipynb.tmp-<pid>-<random>` and seer.safe_fs's `.seer-tmp-<pid>-...`, once the
-- process named in them is gone and they are a minute old; the older `<name>.ipynb.tmp-<random>`
-- after an hour. Regular files only, no link followed. Returns how many were removed.
sweep_temporaries = function(dir)
  local dfd = open_dir_nofollow(dir)
  if not dfd then return 0 end
  local ok, list = pcall(require("seer.core.sandbox").listdir, dir)
  local removed, now = 0, os.time()
  local st = ffi.new("struct seer_statx")
  for _, ent in ipairs(ok and list or {}) do
    local name = ent.name
    local pid = name:match("^.+%.ipynb%.tmp%-(%d+)%-%x+$") or name:match("^%.seer%-tmp%-(%d+)%-")
    local old_style = not pid and name:match("^.+%.ipynb%.tmp%-%x+$")
    if (pid or old_style)
       and ffi.C.statx(dfd, name, AT_SYMLINK_NOFOLLOW, bit.bor(STATX_TYPE, STATX_MTIME), st) == 0
       and bit.band(st.stx_mode, S_IFMT) == S_IFREG then
      local age = now - tonumber(st.stx_mtime.tv_sec)
      local stale
      if pid then
        local dead = ffi.C.kill(tonumber(pid), 0) ~= 0 and ffi.errno() == 3 -- ESRCH
        stale = dead and age > 60
      else
        stale = age > 3600
      end
      if stale and ffi.C.unlinkat(dfd, name, 0) == 0 then removed = removed + 1 end
    end
  end
  ffi.C.close(dfd)
  if removed > 0 then log("removed %d temporary file%s left by an interrupted save in %s", removed, removed == 1 and "" or "s", dir) end
  return removed
end
M.sweep_temporaries = sweep_temporaries

-- The text of a regular file opened by open_nofollow (closes fd); nil and why otherwise.
local function read_regular(fd)
  local st = ffi.new("struct seer_statx")
  if ffi.C.statx(fd, "", AT_EMPTY_PATH, STATX_BASIC, st) ~= 0 then
    local why = errno_text()
    ffi.C.close(fd)
    return nil, why
  end
  if bit.band(st.stx_mode, S_IFMT) ~= S_IFREG then ffi.C.close(fd) return nil, "not a regular file" end
  if st.stx_size > MAX_NOTEBOOK_BYTES then ffi.C.close(fd) return nil, "larger than 256 MiB" end
  local parts, buf = {}, ffi.new("uint8_t[65536]")
  local total = 0
  while true do
    local n = tonumber(ffi.C.read(fd, buf, 65536))
    if n < 0 then local why = errno_text() ffi.C.close(fd) return nil, why end
    if n == 0 then break end
    total = total + n
    if total > MAX_NOTEBOOK_BYTES then ffi.C.close(fd) return nil, "larger than 256 MiB" end
    parts[#parts + 1] = ffi.string(buf, n)
  end
  ffi.C.close(fd)
  return table.concat(parts), identity_of(st)
end
M.open_nofollow, M.read_regular = open_nofollow, read_regular

-- A notebook named by a sandbox-bound client: one file name, nothing that walks out of the
-- directory. Returns the name (".ipynb" added when missing) or nil and why.
local function notebook_name(name)
  if type(name) ~= "string" or name == "" then return nil, "a notebook name (a string) is needed" end
  if name:find("/", 1, true) or name:find("%z") or name:find("\\", 1, true) then
    return nil, ("%q is a path; name a notebook of the session's output directory by its file name only"):format(name)
  end
  if name:sub(1, 1) == "." then return nil, ("%q starts with a dot; notebook names do not"):format(name) end
  if #name > 255 then return nil, "the name is longer than 255 bytes" end
  if not name:match("%.ipynb$") then name = name .. ".ipynb" end
  return name
end
M.notebook_name = notebook_name

-- The .ipynb files of a directory (names only, regular files only), for error messages.
local function notebooks_in(dir)
  local names = {}
  local ok, list = pcall(require("seer.core.sandbox").listdir, dir)
  for _, e in ipairs(ok and list or {}) do
    if e.type == "file" and e.name:match("%.ipynb$") then names[#names + 1] = e.name end
  end
  table.sort(names)
  return names
end

-- The scope of a sandbox, made on first use: a request socket with its own key. Only the main
-- socket's clients (the experiment) reach this, through start_session with a launcher.
function Server:scope_for(launcher)
  local id = type(launcher) == "table" and launcher.sandbox_id
  if type(id) ~= "string" or not id:match("^[%w._-]+$") then
    error("start_session: content.sandbox needs the launcher of a started sandbox (sandbox:kernel_launcher())", 0)
  end
  self.scopes = self.scopes or {}
  local sc = self.scopes[id]
  if not sc then
    local key = net.new_key()
    local sock = net.socket("router", key, M.REQUEST_LIMITS)
    -- As the main request socket: a unix socket in the 0700 runtime folder on a loopback host
    -- (ZMQ buffers a whole frame from any peer before its signature can be checked, so a TCP
    -- port let any local process make this server hold it). Named by a counter, never by the
    -- sandbox's id: nothing the launcher says reaches the path.
    self.scope_count = (self.scope_count or 0) + 1
    local ipc = ("ipc://%s/scope-%d.sock"):format(self.runtime_dir, self.scope_count)
    local endpoint
    if self.ipc_requests and #ipc - 6 <= 100 then endpoint = sock:bind(ipc)
    else endpoint = sock:bind(("tcp://%s:*"):format(self.host)) end
    sc = { id = id, key = key, sock = sock, endpoint = endpoint, templates = {}, order = {} }
    self.scopes[id] = sc
    debug_log("scope %s: requests at %s", id, endpoint)
  end
  sc.launcher = launcher
  return sc
end

-- A session started with a launcher joins its sandbox's scope; what it was started with is kept
-- as the template that sandbox-bound clients start new sessions like (its init list is shared,
-- so start-up code recorded later is part of it too). Templates outlive their sessions.
function Server:scope_add_session(s, dir)
  local sc = self:scope_for(s.sandbox)
  s.scope = sc.id
  sc.templates[s.id] = { notebook_dir = dir, workspace_dir = s.workspace_dir, kernel_env = s.kernel_env, init = s.init }
  sc.order[#sc.order + 1] = s.id
end

-- What start_session answers: the session, plus the scope's credential for the main socket's
-- client of a sandboxed session (the experiment puts it in the session's mcp_config).
function Server:started_reply(req, s, info)
  if s.scope and not req.scope then
    local sc = self.scopes[s.scope]
    info.scope = { sandbox_id = sc.id, endpoint = sc.endpoint, key = sc.key }
  end
  return info
end

-- What a scope's client sees of a reply: no live-view URL (its token opens the main socket's
-- key) and notebooks by file name, never by host path.
function Server:scoped_view(sc, content)
  local out = {}
  for k, v in pairs(content) do out[k] = v end
  if out.jupyter_url ~= nil then out.jupyter_url = json.null end
  if type(out.notebook_path) == "string" then out.notebook_path = out.notebook_path:match("([^/]+)$") end
  if type(out.sessions) == "table" then
    local list = json.array()
    for i, e in ipairs(out.sessions) do list[i] = self:scoped_view(sc, e) end
    out.sessions = list
  end
  out.sandbox_id = sc.id
  return out
end

-- Requests a scope's client may send; everything else is refused naming the reason.
local SCOPED = { start_session = true, execute = true, edit_cell = true, add_markdown = true, read_notebook = true,
                 interrupt = true, restart = true, shutdown_session = true, session_info = true,
                 list_sessions = true, scope_info = true }
local SCOPED_START_FIELDS = { name = true, like = true, resume = true, ["continue"] = true }

-- A request from a scope's socket. Reached only from Server:handle, with req.scope set by the
-- socket the request arrived on (never by anything in the request).
function Server:handle_scoped(req, t)
  local sc = req.scope
  if not SCOPED[t] then
    return self:reply_error(req, "NotAllowed", ("%s is not available to a client bound to sandbox %s"):format(t, sc.id))
  end
  if t == "execute" and req.content.init then
    return self:reply_error(req, "NotAllowed", "a sandbox-bound client cannot add start-up code (execute with init)")
  end
  if t == "start_session" then return self:scoped_start_session(req) end
  if t == "scope_info" then
    local ids = json.array()
    for _, id in ipairs(sc.order) do if self.sessions[id] then ids[#ids + 1] = id end end
    return self:reply(req, { session_ids = ids })
  end
  return handlers[t](self, req)
end

-- start_session from a scope's client: a new kernel in the same sandbox, started like one of
-- the scope's sessions (content.like, default the first); resume/continue name a notebook of
-- that session's output directory.
function Server:scoped_start_session(req)
  local sc, c = req.scope, req.content
  for k in pairs(c) do
    if not SCOPED_START_FIELDS[k] then
      return self:reply_error(req, "NotAllowed", ("start_session: a client bound to sandbox %s cannot set %s; its sessions start like one of the sandbox's own (fields: like, name, resume, continue)")
        :format(sc.id, tostring(k)))
    end
  end
  if c.name ~= nil and type(c.name) ~= "string" then return self:reply_error(req, "ValueError", "start_session: name must be a string") end
  local like = c.like or sc.order[1]
  local tpl = type(like) == "string" and sc.templates[like]
  if not tpl then
    return self:reply_error(req, "SessionNotFound", ("start_session: no session %q in sandbox %s to start like"):format(tostring(like), sc.id))
  end
  local content = { name = c.name, notebook_dir = tpl.notebook_dir, workspace_dir = tpl.workspace_dir,
                    kernel_env = tpl.kernel_env, sandbox = sc.launcher, init = tpl.init }
  for _, field in ipairs{ "resume", "continue" } do
    if c[field] ~= nil then
      if content.resume or content["continue"] then
        return self:reply_error(req, "ValueError", "start_session: give resume or continue, not both")
      end
      local name, why = notebook_name(c[field])
      if not name then return self:reply_error(req, "ValueError", ("start_session: %s: %s"):format(field, why)) end
      local dir = tpl.notebook_dir
      local fd, err = open_nofollow(dir, name)
      local text, disk_id
      if fd then text, err = read_regular(fd) end
      if text then disk_id, err = err, nil end
      -- the notebooks this sandbox's sessions wrote there (the folder may hold the researcher's
      -- host sessions' and other sandboxes' notebooks: their names are not listed either)
      local function ours()
        local have, mine = notebooks_in(dir), (self.sandbox_notebooks or {})[sc.id] or {}
        local out = {}
        for _, n in ipairs(have) do if mine[n] then out[#out + 1] = n end end
        return #out > 0 and table.concat(out, ", ") or "none"
      end
      if not text then
        return self:reply_error(req, "NotebookNotFound", ("%s: cannot open notebook %s of the session's output directory (%s); this sandbox's notebooks there: %s")
          :format(field, name, err, ours()))
      end
      content[field] = dir .. "/" .. name
      if field == "resume" then content.disk_id = disk_id end
      -- The session reads the bytes read above, never the path again.
      content.load = function(path)
        local ok, doc = pcall(json.decode, text)
        if not ok or type(doc) ~= "table" or doc.nbformat ~= 4 or type(doc.cells) ~= "table" then
          error(("%s is not an nbformat 4 notebook"):format(name), 0)
        end
        local nb = notebook.new{ path = path }
        doc.metadata = type(doc.metadata) == "table" and doc.metadata or {}
        doc.metadata.seer = type(doc.metadata.seer) == "table" and doc.metadata.seer or {}
        -- only a notebook a session of this sandbox wrote (its metadata says so: in a folder the
        -- sandbox cannot write, it cannot forge that; in one it can, it reads everything anyway)
        if doc.metadata.seer.sandbox_id ~= sc.id then
          error(("%s was not written by a session of this sandbox (%s); this sandbox's notebooks there: %s. A notebook of another "
            .. "sandbox or of the host is resumed by the researcher (seer.execution.resume_notebook), not from inside"):format(name, sc.id, ours()), 0)
        end
        doc.nbformat_minor = math.max(5, tonumber(doc.nbformat_minor) or 5)
        for _, cell in ipairs(doc.cells) do
          if type(cell) ~= "table" then error(("%s has a cell that is not an object"):format(name), 0) end
          cell.metadata = type(cell.metadata) == "table" and cell.metadata or {}
          if type(cell.id) ~= "string" then cell.id = net.uuid():sub(1, 8) end
          if cell.attachments == json.null then cell.attachments = nil end
        end
        nb.doc = doc
        return nb
      end
    end
  end
  self:new_session(req, content)
end

---------------------------------------------------------------------------------------------
-- requests

function handlers.start_session(self, req)
  self:new_session(req)
end

-- The session a request names. A scope's client finds only its sandbox's sessions, and the
-- answer for any other id is the same as for one that does not exist.
local function session_of(self, req)
  local id = req.content.session_id
  local s = type(id) == "string" and self.sessions[id]
  local sc = req.scope
  if s and sc and s.scope ~= sc.id then s = nil end
  if not s then
    local ids = {}
    for k, x in pairs(self.sessions) do if not sc or x.scope == sc.id then ids[#ids + 1] = k end end
    table.sort(ids)
    self:reply_error(req, "SessionNotFound", ("no session %q %s (sessions: %s)")
      :format(tostring(id), sc and ("in sandbox " .. sc.id) or "on this notebook server",
              #ids > 0 and table.concat(ids, ", ") or "none"))
    return nil
  end
  return s
end

-- can_wait: the request queues behind a restart under way (execute, edit_cell); others are
-- refused while the kernel starts.
local function check_alive(self, req, s, can_wait)
  if s.starting then
    if can_wait then return true end
    self:reply_error(req, "KernelStarting", ("the kernel of session %s is starting (a restart is under way); try again once it has answered"):format(s.id))
    return false
  end
  if s.dead then
    self:reply_error(req, "KernelDied", ("the kernel of session %s %s; restart the session to go on"):format(s.id, s.dead))
    return false
  end
  return true
end

-- content.timeout (seconds, > 0) and content.max_output (characters, >= 0) of an execute or
-- edit_cell request: the numbers, or nil and why. A string, a negative number or one that is
-- not finite is refused rather than read as "no timeout" or "show nothing".
local function cell_numbers(c, op)
  local t, m = c.timeout, c.max_output
  if t ~= nil and not (type(t) == "number" and t > 0 and t < math.huge) then
    return nil, nil, ("%s: content.timeout must be a positive number of seconds, got %s"):format(op, tostring(t))
  end
  if m ~= nil and not (type(m) == "number" and m >= 0 and m < 2 ^ 53 and m == math.floor(m)) then
    return nil, nil, ("%s: content.max_output must be a whole number of characters >= 0, got %s"):format(op, tostring(m))
  end
  return t, m
end

-- The limits of one request: the server's, or lower ones the request asks for (content.limits);
-- a request cannot raise them (a sandbox-bound client is the agent's). nil and why when bad.
function Server:request_limits(c)
  if c.limits == nil then return self.limits end
  if type(c.limits) ~= "table" then return nil, "content.limits must be an object" end
  local out = {}
  for _, k in ipairs(LIMIT_FIELDS) do out[k] = self.limits[k] end
  for k, v in pairs(c.limits) do
    if self.limits[k] == nil then
      return nil, ("content.limits.%s is not a limit (limits: %s)"):format(tostring(k), table.concat(LIMIT_FIELDS, ", "))
    end
    if type(v) ~= "number" or v < 0 or v ~= math.floor(v) then return nil, ("content.limits.%s must be a whole number"):format(k) end
    out[k] = math.min(v, self.limits[k])
  end
  return out
end

function handlers.execute(self, req)
  local s = session_of(self, req)
  if not s or not check_alive(self, req, s, true) then return end
  local c = req.content
  if type(c.code) ~= "string" then return self:reply_error(req, "ValueError", "execute: content.code must be a string") end
  local limits, why = self:request_limits(c)
  if not limits then return self:reply_error(req, "ValueError", "execute: " .. why) end
  local timeout, max_output, bad = cell_numbers(c, "execute")
  if bad then return self:reply_error(req, "ValueError", bad) end
  local e = { code = c.code, hidden = c.hidden and true or false, req = req, timeout = timeout,
              max_output = max_output, stream = c.stream and true or false, limits = limits }
  if not e.hidden then e.cell = s.nb:add_code(c.code) end
  if c.init then s.init[#s.init + 1] = c.code end
  self:enqueue(s, e)
end

-- The cell an edit_cell request names, or nil, ename, evalue. content.cell_number counts all
-- cells, 0-based as read_notebook and add_markdown number them (negative: from the end); the
-- cell must be a code cell: a number that names a markdown cell is refused, never taken to
-- mean another cell. content.cell_index counts code cells only (the Lua API's session:edit_cell;
-- negative from the end; default -1, the last code cell).
local function edit_target(nb, c)
  if c.cell_number ~= nil then
    if c.cell_index ~= nil then return nil, "ValueError", "edit_cell: give cell_number or cell_index, not both" end
    local n = c.cell_number
    if type(n) ~= "number" or n ~= math.floor(n) or math.abs(n) > 2 ^ 31 then
      return nil, "ValueError", ("edit_cell: content.cell_number must be a whole number, got %s"):format(tostring(n):sub(1, 40))
    end
    local cells = nb.doc.cells
    local i = n < 0 and #cells + n or n -- 0-based
    if #cells == 0 then
      return nil, "IndexError", ("there is no cell %d: the notebook has no cells yet"):format(n)
    end
    if i < 0 or i >= #cells then
      return nil, "IndexError", ("cell %d is out of range: the notebook has %d cell%s (0..%d as read_notebook numbers them, or -1..-%d from the end)")
        :format(n, #cells, #cells == 1 and "" or "s", #cells - 1, #cells)
    end
    local cell = cells[i + 1]
    if cell.cell_type ~= "code" then
      local before, after
      for k, x in ipairs(cells) do
        if x.cell_type == "code" then
          if k - 1 < i then before = k - 1 elseif not after then after = k - 1 end
        end
      end
      local near = {}
      if before then near[#near + 1] = ("cell %d before it"):format(before) end
      if after then near[#near + 1] = ("cell %d after it"):format(after) end
      return nil, "ValueError", ("cell %d%s is a %s cell, not a code cell; edit_cell edits code cells only and changed nothing (%s)")
        :format(i, n < 0 and (" (" .. n .. " from the end)") or "", tostring(cell.cell_type),
                #near > 0 and ("the nearest code cells: " .. table.concat(near, ", ")) or "the notebook has no code cells")
    end
    return cell
  end
  local cells = nb:code_cells()
  local idx = math.floor(tonumber(c.cell_index) or -1)
  local cell = cells[idx < 0 and #cells + idx + 1 or idx + 1]
  if cell then return cell end
  if #cells == 0 then
    return nil, "IndexError", ("cell_index %d: the notebook has no code cells yet (run code first)"):format(idx)
  end
  return nil, "IndexError", ("cell_index %d is out of range: the notebook has %d code cells (0..%d, or -1..-%d)")
    :format(idx, #cells, #cells - 1, #cells)
end

function handlers.edit_cell(self, req)
  local s = session_of(self, req)
  if not s or not check_alive(self, req, s, true) then return end
  local c = req.content
  local cell, ename, evalue = edit_target(s.nb, c)
  if not cell then return self:reply_error(req, ename, evalue) end
  if type(c.code) ~= "string" then return self:reply_error(req, "ValueError", "edit_cell: content.code must be a string") end
  local limits, why = self:request_limits(c)
  if not limits then return self:reply_error(req, "ValueError", "edit_cell: " .. why) end
  local timeout, max_output, bad = cell_numbers(c, "edit_cell")
  if bad then return self:reply_error(req, "ValueError", bad) end
  s.nb:reset_cell(cell, c.code)
  -- its old outputs are gone: the session's total gets them back
  if s.output_total then s.output_total.bytes = s.output_total.bytes - (cell._kept_bytes or 0) end
  cell._kept_bytes = 0
  cell.metadata.seer_truncated = nil
  s.nb:touch(cell)
  self:enqueue(s, { code = c.code, cell = cell, req = req, timeout = timeout, max_output = max_output,
                    stream = c.stream and true or false, limits = limits })
end

function handlers.add_markdown(self, req)
  local s = session_of(self, req)
  if not s then return end
  if type(req.content.content) ~= "string" then
    return self:reply_error(req, "ValueError", "add_markdown: content.content must be a string")
  end
  local n = s.nb:add_markdown(req.content.content)
  local note = s.nb:save()
  if note then log("session %s: %s", s.id, fork_note(note)) end
  self:publish(s, true)
  self:reply(req, { cell_number = n })
end

function handlers.read_notebook(self, req)
  local s = session_of(self, req)
  if not s then return end
  local start = math.max(0, math.floor(tonumber(req.content.start) or 0))
  local limit = math.floor(tonumber(req.content.limit) or 1e9)
  -- The cells as the file has them (notebook.clean_cell: no private fields, stream text as
  -- lines or pieces), built once per version of the notebook and sharing its strings: a loop of
  -- read_notebook on a large notebook costs each call its reply, not an encoding and a decoding
  -- of the whole notebook.
  local rc = s.nb._read_cache -- (dropped by every change: Notebook:touch)
  if not rc or rc.version ~= s.nb.version or rc.n ~= #s.nb.doc.cells then
    local all = {}
    for i, c in ipairs(s.nb.doc.cells) do all[i] = notebook.clean_cell(c) end
    rc = { version = s.nb.version, n = #s.nb.doc.cells, cells = all }
    s.nb._read_cache = rc
  end
  local cells = json.array()
  for i = start + 1, math.min(#rc.cells, start + limit) do cells[#cells + 1] = rc.cells[i] end
  -- how many code cells come before start: a reader numbers code cells as edit_cell does
  local code_before = 0
  for i = 1, math.min(start, #rc.cells) do if rc.cells[i].cell_type == "code" then code_before = code_before + 1 end end
  self:reply(req, { cells = cells, total = #rc.cells, notebook_path = s.nb.path, code_before = code_before })
end

function handlers.interrupt(self, req)
  local s = session_of(self, req)
  if not s or not check_alive(self, req, s) then return end
  s.kernel:send("control", "interrupt_request", {})
  self:reply(req, {})
end

function handlers.restart(self, req)
  local s = session_of(self, req)
  if not s then return end
  if s.starting then
    return self:reply_error(req, "KernelStarting", ("session %s is already restarting"):format(s.id))
  end
  if not s.dead then
    -- A live kernel is stopped first; what it was running ends as if it had died.
    s.kernel:stop(1000)
    self:on_kernel_death(s, "was restarted")
  end
  -- The start-up (models, libraries, init code) runs again before restart answers, so the
  -- caller finds the session as it was created, or an error saying which step failed. It is
  -- queued now, ahead of cells sent while the kernel starts (they wait for it).
  local pending, failed, answered = #s.init, nil, false
  for _, code in ipairs(s.init) do
    self:enqueue(s, { code = code, hidden = true, on_done = function(e)
      pending = pending - 1
      if e.result ~= "ok" and not failed then
        local r = e.error or e.reply or {}
        failed = ("%s: %s"):format(r.ename or "Error", r.evalue or "")
      end
      if pending == 0 and not answered then
        answered = true
        if failed then self:reply_error(req, "RestartError", "the session's start-up code failed after the restart: " .. failed)
        else self:reply(req, self:session_info(s)) end
      end
    end })
  end
  self:begin_start(s, function(ok, err)
    if not ok then
      answered = true
      self:reply_error(req, "KernelStartError", tostring(err))
      s.dead = "could not be restarted: " .. tostring(err)
      self:fail_executions(s, s.dead)
      return
    end
    if pending == 0 and not answered then
      answered = true
      self:reply(req, self:session_info(s))
    end
    self:pump_queue(s)
  end)
end

function handlers.shutdown_session(self, req)
  local s = session_of(self, req)
  if not s then return end
  self:drop_session(s, "was shut down")
  self:reply(req, { notebook_path = s.nb.path })
end

function handlers.list_sessions(self, req)
  local list = json.array()
  for _, s in pairs(self.sessions) do
    if not req.scope or s.scope == req.scope.id then list[#list + 1] = self:session_info(s) end
  end
  table.sort(list, function(a, b) return a.session_id < b.session_id end)
  self:reply(req, { sessions = list })
end

-- The scope credential of a sandboxed session, for a main-socket client that holds the
-- session some other way (seer mcp notebook given its jupyter_url binds itself with it).
function handlers.scope_credential(self, req)
  local s = session_of(self, req)
  if not s then return end
  if not s.scope then return self:reply(req, { sandbox_id = json.null }) end
  self:reply(req, self:started_reply(req, s, { sandbox_id = s.scope }).scope)
end

function handlers.session_info(self, req)
  local s = session_of(self, req)
  if s then self:reply(req, self:session_info(s)) end
end

function handlers.shutdown(self, req)
  self:reply(req, {})
  self.stopping = true
end

function Server:handle(req)
  if type(req.header.msg_type) ~= "string" or #req.header.msg_type > 64 or type(req.content) ~= "table" then
    return self.api:note_dropped("a request whose header.msg_type is not a short string")
  end
  local t = req.header.msg_type:gsub("_request$", "")
  if req.scope then
    local ok, err = pcall(self.handle_scoped, self, req, t)
    if not ok then
      log("request %s from sandbox %s failed: %s", t, req.scope.id, err)
      self:reply_error(req, "ServerError", tostring(err))
    end
    return
  end
  local h = handlers[t]
  if not h then
    local names = {}
    for k in pairs(handlers) do names[#names + 1] = k end
    table.sort(names)
    return self:reply_error(req, "UnknownRequest", ("unknown request %q; requests: %s"):format(t, table.concat(names, ", ")))
  end
  local ok, err = pcall(h, self, req)
  if not ok then
    reraise_interrupt(err)
    log("request %s failed: %s", t, err)
    self:reply_error(req, "ServerError", tostring(err))
  end
end

---------------------------------------------------------------------------------------------
-- the loop

-- Requests queued on a scope's socket; req.scope says where each came from.
function Server:drain_scope(sc)
  while true do
    local req = sc.sock:recv(0)
    if not req then break end
    req.scope = sc
    self:handle(req)
  end
end

-- Hands what is ready on socket i of a session's kernel to on_kernel_message. A message that
-- passed the checks but still breaks the handler costs only its session: counted as malformed,
-- never an error out of the loop.
function Server:pump_kernel(s, i)
  for _, msg in ipairs(s.kernel:pump(i)) do
    local ok, err = pcall(self.on_kernel_message, self, s, msg)
    if not ok then
      reraise_interrupt(err)
      s.kernel:sockets()[i]:note_dropped("the notebook server could not use it: " .. tostring(err):sub(1, 200))
    end
  end
end

-- A kernel that ended by itself sends the output written just before (os.exit, a crash) on its
-- way out, and those messages can reach this process after the poll that preceded the check
-- that found the process gone: they are read, until the kernel's sockets have been quiet for
-- DEATH_QUIET_MS (at most DEATH_DRAIN_MS in all), before the death is recorded, so the cell
-- keeps that output.
local DEATH_QUIET_MS, DEATH_DRAIN_MS = 10, 200
function Server:drain_dead_kernel(s)
  local deadline = process.now_ms() + DEATH_DRAIN_MS
  while not s.dead do
    local left = deadline - process.now_ms()
    if left <= 0 then break end
    local ready = net.poll(s.kernel:sockets(), math.min(left, DEATH_QUIET_MS))
    if #ready == 0 then break end
    for _, i in ipairs(ready) do self:pump_kernel(s, i) end
    self:check_bad(s)
  end
end

function Server:run()
  -- Ctrl-C (or an error) ends the loop; the kernels and sockets are shut down either way.
  local ok, err = pcall(function()
    while not self.stopping do
      local items, owners = { self.api }, { false }
      for _, sc in pairs(self.scopes or {}) do
        items[#items + 1] = sc.sock
        owners[#owners + 1] = { scope = sc }
      end
      for _, s in pairs(self.sessions) do
        if not s.dead then
          for i, sock in ipairs(s.kernel:sockets()) do
            items[#items + 1] = sock
            owners[#owners + 1] = { s, i }
          end
        end
      end
      -- kernel starts under way: the sockets each waits on
      local timeout = 20
      for st in pairs(self.starts or {}) do
        for _, sock in ipairs(st.socks) do
          items[#items + 1] = sock
          owners[#owners + 1] = { start = st }
        end
        timeout = math.max(0, math.min(timeout, st.wake - process.now_ms()))
      end
      local ready = net.poll(items, timeout)
      for _, k in ipairs(ready) do
        if k == 1 then
          while true do
            local req = self.api:recv(0)
            if not req then break end
            req.scope = nil -- the main socket: never a scope, whatever the message holds
            self:handle(req)
          end
        elseif owners[k].scope then
          self:drain_scope(owners[k].scope)
        elseif owners[k].start then
          owners[k].start.ready = true
        else
          local s, i = owners[k][1], owners[k][2]
          if not s.dead then
            self:pump_kernel(s, i)
            self:check_bad(s)
          end
        end
      end
      local now = process.now_ms()
      local due = {}
      for st in pairs(self.starts or {}) do
        if st.ready or now >= st.wake then due[#due + 1] = st end
      end
      for _, st in ipairs(due) do self:step_start(st) end
      for _, s in pairs(self.sessions) do
        local ok, err = pcall(self.tend, self, s, now)
        if not ok then reraise_interrupt(err) log("session %s: %s", s.id, tostring(err)) end
      end
      if self.retired and #self.retired > 0 then self:close_retired(now) end
    end
  end)
  for st in pairs(self.starts or {}) do self:cancel_start(st, "the notebook server shut down while the kernel was starting") end
  for _, s in pairs(self.sessions) do
    if s.dead then self:fail_executions(s, "was shut down with the notebook server")
    else self:on_kernel_death(s, "was shut down with the notebook server") end
    log_totals(s)
    self:retire_sandboxd(s.sandboxd)
  end
  -- what was sent last (stop_service) gets a moment to go before the sockets close
  if self.retired and #self.retired > 0 then
    local last = 0
    for _, r in ipairs(self.retired) do last = math.max(last, r.at) end
    process.sleep_ms(math.max(0, math.min(200, last - process.now_ms())))
    self:close_retired(0, true)
  end
  if self.http then self.http:close() end
  for _, sc in pairs(self.scopes or {}) do sc.sock:close() end
  self.api:close()
  os.execute("rm -rf '" .. self.runtime_dir .. "'")
  if not ok then error(err, 0) end
end

-- The timed work of one session between polls: its kernel's death, cells whose idle never
-- came, deadlines, the queue, the live view. An error here is that session's, logged.
function Server:tend(s, now)
  if s.sandboxd and not s.starting then
    -- replies to stop_service: read and forgotten (bounded per call)
    for _ = 1, 16 do if not s.sandboxd.sock:recv(0) then break end end
  end
  if not s.dead then
    local alive, how = s.kernel:alive()
    if not alive then
      self:drain_dead_kernel(s)
      if not s.dead then self:on_kernel_death(s, how) end
    end
  end
  local e = s.running
  if e and e.reply and not e.idle then
    e.reply_at = e.reply_at or now
    if now - e.reply_at > IDLE_GRACE_MS then
      e.idle = true
      local o = { output_type = "stream", name = "stderr",
                  text = ("[seer] the kernel answered but sent no idle status within %d ms; outputs may be missing\n"):format(IDLE_GRACE_MS) }
      e.outputs[#e.outputs + 1] = o
      if e.cell then s.nb:add_output(e.cell, o) end
      self:finish(s, e)
    end
  end
  e = s.running
  if e and e.deadline and now > e.deadline and not e.timed_out then
    e.timed_out, e.interrupted_at = true, now
    s.kernel:send("control", "interrupt_request", {})
  elseif e and e.timed_out and not s.dead and now - e.interrupted_at > INTERRUPT_GRACE_MS then
    -- The cell caught the interrupt, or is in code that never checks it: the timeout still ends
    -- it, and a kernel still busy with it cannot run anything else.
    e.timeout_killed = true
    log("session %s: a cell ran past its timeout of %g s and did not stop within %d ms of the interrupt; stopping its kernel",
        s.id, e.timeout, INTERRUPT_GRACE_MS)
    s.kernel:stop(0)
    self:on_kernel_death(s, ("was stopped: a cell ran past its timeout of %g s and did not stop within %g s of the interrupt")
      :format(e.timeout, INTERRUPT_GRACE_MS / 1000))
  end
  e = s.running
  if e and e.pending_stream and #e.pending_stream > 0 and now - (e.streamed_at or 0) >= STREAM_BATCH_MS then
    self:flush_stream(e)
  end
  self:pump_queue(s)
  if s.publish_pending then self:publish(s) end
end

---------------------------------------------------------------------------------------------

-- A mistake on the command line: the message and the usage on stderr, exit status 2 (no
-- traceback: nothing went wrong inside seer).
local function usage_error(msg)
  io.stderr:write("seer notebook serve: ", msg, "\n", USAGE, "\n")
  io.stderr:flush()
  os.exit(2)
end

local function parse_args(args)
  local o = { output_dir = "outputs", host = "127.0.0.1", port = 0, max_output = DEFAULT_MAX_OUTPUT, limits = default_limits() }
  local i = 1
  while i <= #args do
    local a = args[i]
    local function value()
      i = i + 1
      if args[i] == nil then usage_error(a .. " needs a value") end
      return args[i]
    end
    if a == "--output-dir" then o.output_dir = value()
    elseif a == "--host" then o.host = value()
    elseif a == "--port" then
      local v = tonumber(value())
      if not v or v ~= math.floor(v) or v < 0 or v > 65535 then
        usage_error("--port needs a port number from 0 to 65535 (0 picks a free one)")
      end
      o.port = v
    elseif a == "--max-output" then
      local v = tonumber(value())
      if not v or v ~= math.floor(v) or v < 0 or v > 2^53 then
        usage_error("--max-output needs a whole number of characters >= 0")
      end
      o.max_output = v
    elseif a:match("^%-%-max%-") and o.limits[a:sub(3):gsub("%-", "_")] then
      local v = tonumber(value())
      if not v or v < 0 or v ~= math.floor(v) then usage_error(a .. " needs a whole number") end
      o.limits[a:sub(3):gsub("%-", "_")] = v
    elseif a == "-h" or a == "--help" then print(USAGE); os.exit(0)
    else usage_error("unknown option " .. a) end
    i = i + 1
  end
  return o
end

-- Runtime folders (/tmp/seer-notebook-XXXXXX) of notebook servers that were killed where they
-- stood (their script was killed with -9, the machine's OOM killer): this user's, older than a
-- minute, whose request socket nobody listens on any more (not among the listening unix
-- sockets of /proc/net/unix). Removed with no link followed.
local function sweep_stale_runtimes()
  local sb = require "seer.core.sandbox"
  local ok, entries = pcall(sb.listdir, "/tmp")
  if not ok or type(entries) ~= "table" then return end
  local ffi = require "ffi"
  pcall(ffi.cdef, "unsigned getuid(void);")
  local uid = ffi.C.getuid()
  local listening
  local now = os.time()
  for _, e in ipairs(entries) do
    if e.type == "dir" and e.name:match("^seer%-notebook%-%w+$") and e.uid == uid and e.mtime and now - e.mtime > 60 then
      if not listening then
        listening = {}
        local f = io.open("/proc/net/unix", "rb")
        if not f then return end
        for line in f:lines() do
          local flags, path = line:match("^%x+: %x+ %x+ (%x+) %x+ %x+ +%d+ (/.*)$")
          if flags and bit.band(tonumber(flags, 16), 0x10000) ~= 0 then listening[path] = true end
        end
        f:close()
      end
      if not listening["/tmp/" .. e.name .. "/api.sock"] then
        require("seer.safe_fs").root("/tmp", "the temporary folder"):remove_tree(e.name)
      end
    end
  end
end

function M.serve(opts)
  -- Most of what this server holds is large strings (outputs) and what it receives and drops is
  -- garbage at once: a shorter pause keeps the peak near what it keeps (GC cycles are cheap here).
  collectgarbage("setpause", 120)
  if os.getenv("SEER_DIE_WITH_PARENT") == "1" then process.die_with_parent() end
  -- SIGTERM ends the server as Ctrl-C does: notebooks saved, a running cell's output kept and
  -- the cell marked, kernels stopped (a second SIGTERM ends it at once)
  pcall(function() require("seer.core.sigterm").term_as_interrupt() end)
  local self = setmetatable({ sessions = {}, id = net.uuid(), host = opts.host, max_output = opts.max_output,
                              limits = opts.limits or default_limits(),
                              key = os.getenv("SEER_NOTEBOOK_KEY") or net.new_key(),
                              token = os.getenv("SEER_NOTEBOOK_TOKEN") or net.new_key():sub(1, 48) }, Server)
  -- The default output folder is made when a session first uses it (new_session), not here: a
  -- server whose sessions all name their own folder leaves no empty ./outputs behind.
  self.default_output_dir = opts.output_dir
  -- what servers killed with -9 left (sweep_stale_runtimes), before this one makes its own
  pcall(sweep_stale_runtimes)
  self.runtime_dir = process.mkdtemp("/tmp/seer-notebook-")
  self.api = net.socket("router", self.key, M.REQUEST_LIMITS)
  -- On a loopback host the request socket is a unix socket in the 0700 runtime folder, not a
  -- TCP port: ZMQ reads (and buffers) whole frames from any peer before a signature can be
  -- checked, so a TCP port would let any local process (another user, a sandbox with
  -- network = "host") make this server hold gigabytes. Only this user reaches the folder.
  -- A server for other machines (--host 0.0.0.0 or an address) keeps TCP (docs/live_view.md).
  local loopback = opts.host == "127.0.0.1" or opts.host == "localhost" or opts.host == "::1"
  self.ipc_requests = loopback -- the scopes' request sockets too (scope_for)
  local ipc = "ipc://" .. self.runtime_dir .. "/api.sock"
  if loopback and #ipc - 6 <= 100 then self.endpoint = self.api:bind(ipc)
  else self.endpoint = self.api:bind(("tcp://%s:*"):format(opts.host)) end
  local ok, http = pcall(require, "seer.core.http")
  if ok then
    self.http = http.serve{ host = opts.host, port = opts.port, token = self.token,
                            info = json.encode{ endpoint = self.endpoint, key = self.key, server = "seer notebook" } }
  else
    log("no live view in this build (%s)", http)
  end
  io.stdout:write(json.encode{ endpoint = self.endpoint, pid = process.getpid(),
                               url = self.http and ("http://%s:%d/?token=%s"):format(opts.host, self.http.port, self.token) or json.null },
                  "\n")
  io.stdout:flush()
  self:run()
end

function M.main(cmd, ...)
  if cmd == nil then -- no subcommand: a usage error (exit 2), as for any other missing argument
    io.stderr:write(USAGE, "\n")
    os.exit(2)
  end
  if cmd == "-h" or cmd == "--help" or cmd == "help" then
    print(USAGE)
    return
  end
  if cmd ~= "serve" then usage_error(("unknown command %q"):format(tostring(cmd))) end
  M.serve(parse_args({ ... }))
end

return M
