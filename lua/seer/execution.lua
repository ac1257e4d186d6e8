--- seer.execution: sessions (names as the reference). A notebook session is a Lua kernel with
--- the sandbox's models preloaded, a live .ipynb notebook in the output directory, a live view
--- at `jupyter_url`, and an `mcp_config` that gives an agent the notebook tools.
---
--- The session talks to seer's notebook server (`seer notebook serve`, one per experiment
--- process, started on first use and ended with it) over signed ZMQ requests; the server owns
--- the kernels and the notebooks (docs/notebook.md). With a started `env.Sandbox` the kernel
--- runs inside the sandbox; local notebook sessions run it as a local process.
---@class seerexecution
local M = {}

local net = require "seer.net"
local json = require "seer.json"
local process = require "seer.process"
local jupyter = require "seer.jupyter"
local core = require "seer.core.host"

local REQUEST_TIMEOUT_MS = 60000

---------------------------------------------------------------------------------------------
-- the notebook server of this process

local server -- this process's own server: {child, sock, key, token, endpoint, url, session, sessions, inbox}

-- Notebook servers this process found ended while it used them ({at_ms, what}): an experiment's
-- summary reads them (M.server_failures), so a run whose server died is not reported completed.
local server_deaths = {}
local tree_listing -- a folder's tree as a string (below, before create)
-- The sessions this process created, for M.notebook_problems (weak: a dropped session is gone)
local created_sessions = setmetatable({}, { __mode = "k" })
local function note_death(srv, what)
  if srv.death_noted then return end
  srv.death_noted = true
  server_deaths[#server_deaths + 1] = { at_ms = process.now_ms(), what = what }
end

-- Whether nothing listens at a server's request endpoint any more: a connect to its unix socket
-- (or loopback port) is refused or the socket file is gone. A live server accepts even while it
-- is busy, so a refusal is definite; anything else (a timeout, another host) is not taken as an
-- end. Cheap: one connect, closed at once. The path is the server's own runtime folder.
local function endpoint_gone(endpoint)
  local s = require "seer.sock"
  local fd, why
  local path = endpoint:match("^ipc://(.+)$")
  if path then
    fd, why = s.connect_unix(path, 1000)
  else
    local ip, port = endpoint:match("^tcp://(%d+%.%d+%.%d+%.%d+):(%d+)$")
    if not ip or ip == "0.0.0.0" then return false end
    fd, why = s.connect_tcp(ip, tonumber(port), 1000)
  end
  if fd then s.close(fd) return false end
  why = tostring(why)
  if why:find("refused", 1, true) or why:find("No such file", 1, true) then return true, why end
  return false
end

-- How a request waits for its reply. By default it blocks this process on the socket; a host
-- that runs several things at once (seer mcp notebook runs each tool call in a coroutine)
-- installs a waiter that yields instead. wait(sock, timeout_ms, ready) returns when sock may be
-- readable, ready() is true (a reply was already moved to this request's inbox by another
-- request), or timeout_ms passed.
local function default_wait(sock, timeout_ms, ready)
  if ready() then return end
  net.poll({ sock }, timeout_ms)
end
local wait = default_wait

---Installs how requests wait for replies (nil restores blocking). See default_wait above.
---@param fn? fun(sock: seernet.socket, timeout_ms: integer, ready: fun(): boolean)
function M.set_waiter(fn)
  wait = fn or default_wait
end

local function start_server()
  if server then
    local alive, how = server.child:alive()
    if alive then return server end
    note_death(server, ("the notebook server %s"):format(how))
  end
  local key, token = net.new_key(), net.new_key():sub(1, 48)
  local child = process.spawn{
    argv = { jupyter.seer_binary(), "notebook", "serve" },
    -- Kernels (and notebooks) never see the LLM keys of the experiment's process.
    env = { SEER_NOTEBOOK_KEY = key, SEER_NOTEBOOK_TOKEN = token, SEER_DIE_WITH_PARENT = "1",
            ANTHROPIC_API_KEY = false, OPENAI_API_KEY = false, OPENROUTER_API_KEY = false, GEMINI_API_KEY = false,
            GOOGLE_API_KEY = false },
    stdout = "pipe", stderr = "inherit",
    -- its own process group: a Ctrl-C on the terminal goes to the experiment, which decides
    -- (interrupt a cell, end the chat, or end and stop this server cleanly), not straight here
    pgroup = true,
  }
  local line, why = child:read_line(15000)
  if not line then
    child:stop(500)
    error(("the notebook server did not start (%s; %s)"):format(why, child:describe_exit()), 0)
  end
  local ok, info = pcall(json.decode, line)
  if not ok or type(info) ~= "table" or not info.endpoint then
    child:stop(500)
    error("the notebook server printed an unexpected first line: " .. line, 0)
  end
  local sock = net.socket("dealer", key)
  sock:connect(info.endpoint)
  server = { child = child, sock = sock, key = key, token = token, endpoint = info.endpoint, url = info.url,
             session = net.uuid(), sessions = 0, inbox = {}, owned = true }
  return server
end

-- The notebook server of a detached sandbox (start{detach = true}): its own server, run as a
-- sidecar of the sandbox (seer.sidecar), so it outlives this script and ends with the sandbox.
-- Its address and keys are kept in the sandbox's record (sandbox.json in the state folder,
-- 0600, out of the sandbox's reach), where Sandbox.attach(id) finds them in another process.
local sandbox_servers = {} -- sandbox_id -> server record

local function sandbox_server(sandbox)
  local srv = sandbox_servers[sandbox.sandbox_id]
  if srv and (not srv.child or srv.child:alive()) then return srv end
  local sb = require "seer.core.sandbox"
  local rec = sandbox.notebook_server
  if type(rec) == "table" and type(rec.endpoint) == "string" and type(rec.key) == "string" then
    local function up() return sb.alive(rec.pid) and sb.start_time(rec.pid) == rec.start end
    if up() then
      local sock = net.socket("dealer", rec.key)
      sock:connect(rec.endpoint)
      srv = { sock = sock, key = rec.key, token = rec.token, endpoint = rec.endpoint, url = rec.url, session = net.uuid(),
              inbox = {}, owned = false,
              probe = function() if up() then return true end return false, "its process has ended" end,
              gone = function() if up() then return false end return true, "its process has ended" end }
      sandbox_servers[sandbox.sandbox_id] = srv
      return srv
    end
  end
  local key, token = net.new_key(), net.new_key():sub(1, 48)
  local child, line = require("seer.sidecar").start{
    argv = { jupyter.seer_binary(), "notebook", "serve" }, what = "the sandbox's notebook server",
    env = { SEER_NOTEBOOK_KEY = key, SEER_NOTEBOOK_TOKEN = token, SEER_DIE_WITH_PARENT = "1",
            ANTHROPIC_API_KEY = false, OPENAI_API_KEY = false, OPENROUTER_API_KEY = false, GEMINI_API_KEY = false,
            GOOGLE_API_KEY = false },
    log = sandbox.state_dir .. "/notebook-server.log", keeper_pid = sandbox.keeper_pid, keeper_start = sandbox.keeper_start,
    notebook_server_key = key,
  }
  local ok, info = pcall(json.decode, line)
  if not ok or type(info) ~= "table" or type(info.endpoint) ~= "string" then
    child:stop(500)
    error("the sandbox's notebook server printed an unexpected first line: " .. line, 0)
  end
  local sock = net.socket("dealer", key)
  sock:connect(info.endpoint)
  local url = info.url ~= json.null and info.url or nil
  srv = { child = child, sock = sock, key = key, token = token, endpoint = info.endpoint, url = url, session = net.uuid(),
          inbox = {}, owned = false, log = sandbox.state_dir .. "/notebook-server.log" }
  sandbox_servers[sandbox.sandbox_id] = srv
  sandbox.notebook_server = { endpoint = info.endpoint, key = key, token = token, url = url, pid = child.pid,
                              start = sb.start_time(child.pid) }
  if type(sandbox._write_info) == "function" then sandbox:_write_info() end
  return srv
end

-- When the script ends with sessions still open (it never called terminate, or ended with an
-- error, Ctrl-C or os.exit), this process's notebook server is stopped cleanly (seer.exit):
-- kernels shut down, notebooks saved, its runtime folder removed. (Killed with -9, the server
-- gets SIGTERM from its death signal; the next server's start sweeps what that left.)
require("seer.exit").on_exit(function()
  local srv = server
  if not srv or not srv.child then return end
  pcall(function()
    if srv.child:alive() then
      local sock = net.socket("dealer", srv.key)
      sock:connect(srv.endpoint)
      sock:send{ header = net.header("shutdown_request", net.uuid()), parent_header = {}, metadata = {}, content = {} }
      if not srv.child:wait(5000) then srv.child:stop(500) end
      sock:close()
    end
  end)
end)
---The notebook servers this process used that have ended since `since_ms` (process.now_ms()
---time; default all): found ended by a request, or, for those it started, ended now. One line
---each ("the notebook server was killed by signal 9"); an empty list when none. An
---experiment's summary is marked failed when a server of its run ended (seer.experiment).
---@param since_ms? number
---@return string[]
function M.server_failures(since_ms)
  since_ms = since_ms or 0
  -- this process's own server runs until the process ends (a sandbox's server ends with the
  -- sandbox, so only a request finds that one ended)
  if server and not server.death_noted then
    local alive, how = server.child:alive()
    if not alive then note_death(server, ("the notebook server %s"):format(how)) end
  end
  local out = {}
  for _, d in ipairs(server_deaths) do
    if d.at_ms >= since_ms then out[#out + 1] = d.what end
  end
  return out
end

---Notebooks of this process's open sessions (created since `since_ms`) whose latest save
---failed, so the file on disk lacks the newest cells: one line each, naming the notebook and
---why. An experiment's summary lists them (seer.experiment).
---@param since_ms? number
---@return string[]
function M.notebook_problems(since_ms)
  local out = {}
  for s, t in pairs(created_sessions) do
    if t >= (since_ms or 0) and not s.terminated then
      local ok, info = pcall(s.info, s)
      if ok and type(info) == "table" and (tonumber(info.save_failures) or 0) > 0 then
        out[#out + 1] = ("the notebook %s could not be saved (%d failed save%s: %s); the file on disk lacks the newest cells"):format(
          tostring(s.notebook_path), info.save_failures, info.save_failures == 1 and "" or "s",
          type(info.last_save_error) == "string" and info.last_save_error or "see the server's log")
      end
    end
  end
  table.sort(out)
  return out
end

-- for tests: this process's server's request endpoint (its runtime folder holds the socket)
function M._server_endpoint() return server and server.endpoint end

---The URL of the notebook server's live view (starting the server when it is not running):
---this process's own, or, for a detached sandbox, the sandbox's.
---@param sandbox? table a started Sandbox
---@return string|nil
function M.server_url(sandbox)
  local srv = (type(sandbox) == "table" and sandbox.detached) and sandbox_server(sandbox) or start_server()
  return srv.url ~= json.null and srv.url or nil
end

-- Moves every message queued on the server's socket into the inbox of the request it answers
-- (several requests may be in flight when requests run in coroutines). Messages that answer
-- no pending request (a request given up after a timeout) are dropped.
local function pump(srv)
  while true do
    local ok, msg = pcall(srv.sock.recv, srv.sock, 0)
    if not ok then
      io.stderr:write("seer.execution: ", require("seer.terminal").safe(msg), "\n")
    elseif not msg then
      return
    else
      local id = type(msg.parent_header) == "table" and msg.parent_header.msg_id
      local box = id and srv.inbox[id]
      if box then box[#box + 1] = msg end
    end
  end
end

-- Sends a request to a notebook server (this process's own, or one a session attached to)
-- and waits for its reply; `output` messages that arrive first go to opts.on_output.
local function request_on(srv, msg_type, content, opts)
  opts = opts or {}
  local header = net.header(msg_type .. "_request", srv.session)
  local box = {}
  srv.inbox[header.msg_id] = box
  srv.sock:send{ header = header, parent_header = {}, metadata = {}, content = content or {} }
  local deadline = opts.timeout_ms and (process.now_ms() + opts.timeout_ms) or nil
  local ready = function() return #box > 0 end
  local ok, res = pcall(function()
    local quiet_since = process.now_ms()
    local gone_checked = quiet_since
    while true do
      pump(srv)
      while #box > 0 do
        local msg = table.remove(box, 1)
        quiet_since = process.now_ms()
        if msg.header.msg_type == "output" then
          -- a batch of outputs ({outputs = [...]}, in order); one output from older servers
          if opts.on_output then
            local list = type(msg.content.outputs) == "table" and msg.content.outputs or { msg.content }
            for _, o in ipairs(list) do opts.on_output(o) end
          end
        else
          return msg.content
        end
      end
      if srv.child then
        local alive, how = srv.child:alive()
        if not alive then
          if srv == server then server = nil end
          note_death(srv, ("the notebook server %s"):format(how))
          error(("the notebook server %s while handling %s; its log is %s"):format(how, msg_type,
            srv.log or "on this process's stderr"), 0)
        end
      else
        -- A server this process did not start: every second of silence, whether anything still
        -- listens at its endpoint (a refused connect is a definite end: the call fails at once,
        -- not after the probe's 12 s); every 10 s, whether it still answers.
        local now = process.now_ms()
        if srv.gone and now - gone_checked >= 1000 then
          gone_checked = now
          local gone, why = srv.gone()
          if gone then
            note_death(srv, ("the notebook server at %s ended (%s)"):format(srv.endpoint, why))
            error(("the notebook server at %s has ended (%s) while handling %s"):format(srv.endpoint, why, msg_type), 0)
          end
        end
        if srv.probe and now - quiet_since > 10000 then
          quiet_since = now
          local alive, why = srv.probe()
          if not alive then
            note_death(srv, ("the notebook server at %s stopped answering (%s)"):format(srv.endpoint, why))
            error(("the notebook server at %s stopped answering while handling %s (%s)"):format(srv.endpoint, msg_type, why), 0)
          end
        end
      end
      if deadline and process.now_ms() > deadline then
        error(("the notebook server did not answer %s within %d ms"):format(msg_type, opts.timeout_ms), 0)
      end
      wait(srv.sock, 100, ready)
    end
  end)
  srv.inbox[header.msg_id] = nil
  if not ok then error(res, 0) end
  return res
end

local function request(msg_type, content, opts)
  return request_on(start_server(), msg_type, content, opts)
end

local function check(reply, what)
  if reply.status == "error" then error(("%s: %s: %s"):format(what, reply.ename, reply.evalue), 3) end
  return reply
end

---------------------------------------------------------------------------------------------
-- NotebookSession

---@class seerexecution.NotebookSession
---@field session_id string
---@field jupyter_url string live view of the notebook (with its token; treat it as a secret)
---@field notebook_path string the .ipynb file, rewritten as cells finish
---@field model_info_text string the preloaded models, in the reference's format ("" without models)
---@field mcp_config table `{notebook = {type = "stdio", command, args, env}}` for an agent's MCP client
---@field sandbox? table the sandbox the session runs in (nil for local sessions)
---@field workspace_dir string where libraries were installed (the kernel's working directory)
---@field workspace_path string the workspace as the kernel sees it (/workspace in a sandbox; the reference's workspace_path)
local Session = {}
Session.__index = Session
Session.__name = "NotebookSession"

---@class seerexecution.exec_result
---@field outputs table[] nbformat outputs (stream, display_data, execute_result, error)
---@field text string the text of the outputs joined (streams and text/plain results)
---@field execution_count integer|nil
---@field cell_index integer|nil 0-based index among code cells (nil for hidden executions)
---@field truncated boolean true when outputs were cut: to max_output here (the notebook has all), or past the cell's output limits (dropped)
---@field dropped table|nil what the server did not keep past the cell's output limits (the notebook's truncation record): {stream_bytes, stream_messages, displays, display_bytes, oversized, updates, kernel_undelivered}
---@field save_error string|nil the notebook could not be saved after this cell (the previous file is kept)
---@field save_warning string|nil the notebook's file was changed by another writer, so this session saves under a new name from now on (notebook_path)
---@field notebook_path string|nil where the session's notebook is saved
---@field result "ok"|"error" "error" when the cell raised, timed out or its kernel died (only returned with raise = false)
---@field error {ename: string, evalue: string, traceback?: string[]}|nil what went wrong when result is "error" (ename "KernelDied": the kernel is gone, session:restart() starts a new one)

-- Requests of a session go to the server it lives on: this process's own, or the one it attached to.
function Session:_request(msg_type, content, opts)
  if self.terminated then
    return { status = "error", ename = "SessionTerminated",
             evalue = "this session was ended with session:terminate(); start a new one" }
  end
  if self._remote then return request_on(self._remote, msg_type, content, opts) end
  return request(msg_type, content, opts)
end

-- The text of nbformat outputs: streams and text/plain results.
local function outputs_text(outputs)
  local text = {}
  for _, o in ipairs(outputs or {}) do
    if o.output_type == "stream" then text[#text + 1] = o.text
    elseif o.data and o.data["text/plain"] then text[#text + 1] = o.data["text/plain"] .. "\n" end
  end
  return table.concat(text)
end

-- A dead kernel's error, in the Lua API's terms: the server says "restart the session".
local function kernel_died(e)
  if type(e) == "table" and e.ename == "KernelDied" and type(e.evalue) == "string" then
    e.evalue = e.evalue:gsub("restart the session to go on$", "call session:restart() to go on (a new kernel)")
  end
  return e
end

local function exec_result(r)
  return { outputs = r.outputs, text = outputs_text(r.outputs),
           execution_count = r.execution_count ~= json.null and r.execution_count or nil,
           cell_index = r.cell_index, truncated = r.truncated, result = r.result,
           dropped = r.dropped ~= json.null and r.dropped or nil,
           save_error = r.save_error ~= json.null and r.save_error or nil,
           save_warning = r.save_warning ~= json.null and r.save_warning or nil,
           notebook_path = type(r.notebook_path) == "string" and r.notebook_path or nil,
           error = r.result ~= "ok" and kernel_died(r.error or { ename = "Error", evalue = "" }) or nil }
end

---Runs code in the kernel. With `hidden = true` no notebook cell is created. A kernel error is
---raised as the Lua error "ename: evalue" (the cell and its traceback are in the notebook);
---with `raise = false` it is returned instead (`result = "error"`, `error = {ename, evalue,
---traceback}`); that includes a session whose kernel has died (`ename = "KernelDied"`, until
---session:restart()). `timeout` (seconds) interrupts a cell that runs too long (and stops the kernel
---when the cell ignores the interrupt). `limits` lowers the server's per-cell output limits for
---this cell ({max_stream_bytes, max_displays, max_display_bytes, max_cell_display_bytes}).
---@param code string
---@param opts? {hidden?: boolean, timeout?: number, max_output?: integer, on_output?: fun(output: table), raise?: boolean, limits?: table}
---@return seerexecution.exec_result
function Session:exec(code, opts)
  if type(self) ~= "table" or getmetatable(self) ~= Session then
    error("exec: call it as session:exec(code, opts)", 2)
  end
  if type(code) ~= "string" then error("session:exec: code must be a string", 2) end
  if opts ~= nil and type(opts) ~= "table" then
    error(("session:exec(code, opts): opts is a table such as {hidden = true, timeout = 60}, not a %s"):format(type(opts)), 2)
  end
  opts = require("seer.checks").options("session:exec", opts, { hidden = "boolean", timeout = "any", max_output = "any",
    on_output = "function", raise = "boolean", limits = "table" }, 2)
  local t, m = opts.timeout, opts.max_output
  if t ~= nil and not (type(t) == "number" and t > 0 and t < math.huge) then
    error(("session:exec: timeout must be a positive number of seconds, got %s"):format(tostring(t)), 2)
  end
  if m ~= nil and not (type(m) == "number" and m >= 0 and m < 2 ^ 53 and m == math.floor(m)) then
    error(("session:exec: max_output must be a whole number of characters >= 0, got %s"):format(tostring(m)), 2)
  end
  local reply = self:_request("execute", { session_id = self.session_id, code = code, hidden = opts.hidden or false,
                                          timeout = opts.timeout, max_output = opts.max_output, limits = opts.limits,
                                          stream = opts.on_output and true or false },
                             { on_output = opts.on_output })
  if reply.status == "error" and reply.ename == "KernelDied" then
    -- the kernel died before (a cell that killed it): the cell did not run; as a cell's own death
    local e = kernel_died({ ename = reply.ename, evalue = reply.evalue })
    if opts.raise ~= false then error(("session:exec: %s: %s"):format(e.ename, e.evalue), 2) end
    -- the server's own words in the outputs (what an MCP agent is shown), as for a cell it ran
    return { outputs = json.array({ { output_type = "error", ename = reply.ename, evalue = reply.evalue, traceback = json.array({}) } }),
             text = "", result = "error", truncated = false, error = e }
  end
  local r = check(reply, "session:exec")
  local res = exec_result(r)
  if res.notebook_path then self.notebook_path = res.notebook_path end
  if res.error and opts.raise ~= false then
    error(("%s: %s"):format(res.error.ename or "Error", res.error.evalue or ""), 0)
  end
  return res
end

---Runs a Lua file's contents as one cell.
---@param path string
---@param opts? {hidden?: boolean, timeout?: number}
---@return seerexecution.exec_result
function Session:exec_file(path, opts)
  local ok, code = pcall(core.read_file, path)
  if not ok then error("session:exec_file: " .. code, 2) end
  return self:exec(code, opts)
end

---Appends a markdown cell; returns its 0-based cell number among all cells (the number the
---MCP tool add_markdown answers as `{cell_number}`).
---@param text string
---@return integer cell_number
function Session:add_markdown(text)
  if type(text) ~= "string" then error("session:add_markdown: text must be a string", 2) end
  return check(self:_request("add_markdown", { session_id = self.session_id, content = text }), "session:add_markdown").cell_number
end

---Re-runs a code cell with new source (index among code cells, 0-based; negative from the end).
---A kernel error is returned (`result = "error"`, `error`), not raised.
---@param code string
---@param cell_index? integer default -1 (the last code cell)
---@param opts? {timeout?: number, max_output?: integer, on_output?: fun(output: table), raise?: boolean} raise = true: a cell's error is raised (default: returned, as before)
---@return seerexecution.exec_result
function Session:edit_cell(code, cell_index, opts)
  opts = require("seer.checks").options("session:edit_cell", opts,
    { timeout = "number", max_output = "number", on_output = "function", raise = "boolean" }, 2)
  local r = check(self:_request("edit_cell", { session_id = self.session_id, code = code, cell_index = cell_index or -1,
                                               timeout = opts.timeout, max_output = opts.max_output,
                                               stream = opts.on_output and true or false },
                                { on_output = opts.on_output }), "session:edit_cell")
  local res = exec_result(r)
  if res.notebook_path then self.notebook_path = res.notebook_path end
  if res.error and opts.raise then -- unlike exec, edit_cell returns a cell's error unless raise = true
    error(("%s: %s"):format(res.error.ename or "Error", res.error.evalue or ""), 2)
  end
  return res
end

---The notebook's cells (nbformat dicts), `limit` of them from the 0-based `start`.
---@param start? integer
---@param limit? integer
---@return table {cells, total, notebook_path}
function Session:read_notebook(start, limit)
  return check(self:_request("read_notebook", { session_id = self.session_id, start = start, limit = limit },
                             { timeout_ms = REQUEST_TIMEOUT_MS }), "session:read_notebook")
end

---Interrupts the running cell (if any).
function Session:interrupt()
  check(self:_request("interrupt", { session_id = self.session_id }, { timeout_ms = REQUEST_TIMEOUT_MS }), "session:interrupt")
end

---Starts a fresh kernel (after a crash, or to reset state) and replays the hidden start-up
---(model loading, init code). The notebook keeps its cells. Answers once the start-up has run
---again, with the new kernel's session info (as `session:info()`); a start-up step that fails
---is raised as an error naming it.
---@return seerexecution.session_info
function Session:restart()
  return check(self:_request("restart", { session_id = self.session_id }), "session:restart")
end

---@class seerexecution.session_info
---@field session_id string
---@field name string
---@field notebook_path string
---@field jupyter_url string|userdata the live view's URL, or json.null without one
---@field kernel_pid integer|userdata the kernel's process id (json.null when it has none)
---@field state "idle"|"busy"|"dead"
---@field dead_reason string|userdata why the kernel died (json.null while it lives)
---@field bad_messages integer kernel messages the server refused
---@field save_failures integer
---@field truncations table|userdata
---@field sandbox_id string|userdata

---The session's state: "idle", "busy" or "dead" (with dead_reason), the kernel's pid.
---@return seerexecution.session_info
function Session:info()
  return check(self:_request("session_info", { session_id = self.session_id }, { timeout_ms = REQUEST_TIMEOUT_MS }), "session:info")
end

---Installs a workspace into a running session (the reference's `session.setup(workspace)`): its
---libraries, skills and files go into the session's workspace folder, become `require`-able in
---the kernel, and its `custom_init_code` runs there (hidden from the notebook).
---@param workspace seerworkspace.Workspace
function Session:setup(workspace)
  if type(workspace) ~= "table" or type(workspace.install) ~= "function" then
    error("session:setup(workspace): workspace must be a seer.workspace Workspace", 2)
  end
  if self.terminated then error("session:setup: the session was terminated", 2) end
  if self.attached or not self.workspace_dir then
    error("session:setup: an attached session's workspace is the starting process's; install the workspace there", 2)
  end
  local root = self.sandbox and self.sandbox.workspace_dir == self.workspace_dir and self.workspace_dir or nil
  workspace:install(root or self.workspace_dir)
  local dir = self.workspace_path or self.workspace_dir
  local code = ("local p = %q\nif not package.path:find(p, 1, true) then package.path = p .. package.path end")
    :format(dir .. "/?.lua;" .. dir .. "/?/init.lua;")
  -- start-up code (init): replayed by restart() like the session's own
  local function init(c, what)
    local rr = check(self:_request("execute", { session_id = self.session_id, code = c, hidden = true, init = true },
                                   { timeout_ms = REQUEST_TIMEOUT_MS * 10 }), "session:setup")
    if rr.result ~= "ok" then
      local e = rr.error or {}
      error(("session:setup: %s failed: %s: %s"):format(what, tostring(e.ename), tostring(e.evalue)), 3)
    end
  end
  init(code, "adding the workspace to package.path")
  if workspace.custom_init_code and workspace.custom_init_code ~= "" then init(workspace.custom_init_code, "the workspace's custom_init_code") end
end

---Stops the kernel; the notebook stays on disk. This process's notebook server ends with its
---last session; a server the session attached to (attach_notebook_session) keeps running.
function Session:terminate()
  if self.terminated then return end
  self.terminated = true
  if self._tmp_workspace then
    -- after the kernel has stopped (below), whatever way this returns
    local tw = self._tmp_workspace
    local ok, err = pcall(function()
      self:_terminate_kernel()
    end)
    if tree_listing(tw.dir) == tw.listing then
      require("seer.safe_fs").root(tw.dir, "the session's workspace"):remove_tree("")
      local ffi = require "ffi"
      pcall(ffi.cdef, "int rmdir(const char *pathname);")
      ffi.C.rmdir(tw.dir)
    end
    if not ok then error(err, 0) end
    return
  end
  return self:_terminate_kernel()
end

function Session:_terminate_kernel()
  if self._remote then
    pcall(request_on, self._remote, "shutdown_session", { session_id = self.session_id }, { timeout_ms = REQUEST_TIMEOUT_MS })
    return
  end
  -- the server this session lives on (never a new one started just to stop a session); it may
  -- die while it answers, and then it is already forgotten
  local srv = server
  if not srv then return end
  pcall(request_on, srv, "shutdown_session", { session_id = self.session_id }, { timeout_ms = REQUEST_TIMEOUT_MS })
  if server ~= srv then return end
  srv.sessions = srv.sessions - 1
  if srv.sessions <= 0 then
    pcall(request_on, srv, "shutdown", {}, { timeout_ms = 5000 })
    srv.child:wait(3000)
    srv.child:stop(500)
    srv.sock:close()
    if server == srv then server = nil end
  end
end

---------------------------------------------------------------------------------------------
-- model preloading

local function tokenizer_var(var_name)
  return var_name == "model" and "tokenizer" or (var_name .. "_tokenizer")
end

---The reference's description of the preloaded models ("" without models).
---@param models table[] ModelConfig-like tables {name, var_name?, hidden?}
---@return string
function M.model_info_text(models)
  if not models or #models == 0 then return "" end
  local lines = { "### Pre-loaded Models", "The following models are already loaded in the kernel:" }
  for _, m in ipairs(models) do
    local var = m.var_name or "model"
    lines[#lines + 1] = ("- `%s`: %s"):format(var, m.hidden and "<hidden>" or m.name)
    lines[#lines + 1] = ("- `%s`: Tokenizer"):format(tokenizer_var(var))
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = "**Do NOT reload these models - they are already available.**"
  return table.concat(lines, "\n")
end

-- The Lua that loads one model into the kernel. The path appears only in this hidden code.
local function load_code(m, path_of)
  local var = m.var_name or "model"
  local opts = ("{ hidden = %s%s }"):format(m.hidden and "true" or "false",
    m.precision and (", precision = %q"):format(m.precision) or "")
  local lines = {}
  if m.is_peft then
    lines[#lines + 1] = ("%s = require('seer.model').load(%q, %s)"):format(var, path_of(m.base_model), opts)
    lines[#lines + 1] = ("%s:load_adapter(%q)"):format(var, path_of(m.name, m.revision))
  else
    lines[#lines + 1] = ("%s = require('seer.model').load(%q, %s)"):format(var, path_of(m.name, m.revision), opts)
  end
  lines[#lines + 1] = ("%s = %s.tokenizer or error('no tokenizer beside the model %s')"):format(
    tokenizer_var(var), var, m.hidden and "<hidden>" or m.name)
  return table.concat(lines, "\n")
end

---------------------------------------------------------------------------------------------
-- creating sessions

local function default_output_dir()
  return (core.cwd() .. "/outputs")
end

-- A folder's tree as one string (type, size, mtime and name of every entry, no link followed),
-- to see whether anything changed in it; nil past 10,000 entries or when it cannot be read.
tree_listing = function(dir)
  local root = require("seer.safe_fs").root(dir, "the session's workspace")
  local out, count = {}, 0
  local function walk(rel)
    local list = root:list(rel, { max = 10001 })
    if not list then return false end
    for _, e in ipairs(list) do
      count = count + 1
      if count > 10000 then return false end
      local path = rel == "" and e.name or (rel .. "/" .. e.name)
      out[#out + 1] = ("%s %s %s %s"):format(e.type, tostring(e.size), tostring(e.mtime), path)
      if e.type == "dir" and not walk(path) then return false end
    end
    return true
  end
  if not walk("") then return nil end
  return table.concat(out, "\n")
end

local function create(workspace, opts, models, sandbox)
  opts = opts or {}
  workspace = workspace or require("seer.workspace").Workspace{}
  local output_dir = opts.output_dir or opts.notebook_dir or default_output_dir()
  -- An output folder inside a sandbox's workspace is made beneath it with no link followed, and
  -- its real path must still be inside (a link swapped in before realpath would move it out).
  local inside = sandbox and type(sandbox.workspace_dir) == "string" and require("seer.safe_fs").root(sandbox.workspace_dir, "the sandbox's workspace")
  local rel = inside and inside:rel(output_dir)
  if rel then
    local ok, err = inside:mkdirs(rel)
    if not ok then error("create_notebook_session: output_dir: " .. err, 3) end
  else
    process.mkdir_p(output_dir)
  end
  output_dir = core.realpath(output_dir) or output_dir
  local real_ws = rel and core.realpath(sandbox.workspace_dir)
  if rel and (not real_ws or (output_dir ~= real_ws and output_dir:sub(1, #real_ws + 1) ~= real_ws .. "/")) then
    error(("create_notebook_session: output_dir %s left the sandbox's workspace (a link was planted on the way)"):format(output_dir), 3)
  end
  -- In a sandbox the kernel runs inside it: the workspace is the sandbox's /workspace (the
  -- host writes libraries into its host side) and sandboxd starts the kernel.
  local launcher, kernel_dir, workspace_dir, tmp_workspace
  if sandbox and type(sandbox.kernel_launcher) == "function" then
    launcher = sandbox:kernel_launcher()
    workspace_dir, kernel_dir = sandbox.workspace_dir, "/workspace"
  else
    workspace_dir = opts.workspace_dir or process.mkdtemp("/tmp/seer-workspace-")
    tmp_workspace = not opts.workspace_dir
    kernel_dir = workspace_dir
  end
  process.mkdir_p(workspace_dir)
  -- a scoped library of another sandbox reaches its server through a relay into this one
  if launcher then workspace = require("seer.rpc.relay").for_sandbox(workspace, sandbox) end
  workspace:install(workspace_dir)
  -- a folder made here for the session: removed at terminate when the kernel left nothing of its
  -- own in it (every api-kimi run left one in /tmp); what it wrote there is never deleted
  local tmp_listing = tmp_workspace and tree_listing(workspace_dir) or nil
  -- secrets: variables of this process the kernel gets exactly as listed (the notebook server
  -- itself runs without the LLM keys); a listed one that is not set is an error, as in
  -- SandboxConfig.secrets. A sandboxed kernel gets its sandbox's secrets from sandboxd.
  local kernel_env
  if opts.secrets ~= nil then
    if type(opts.secrets) ~= "table" then error("opts.secrets must be a list of environment variable names", 3) end
    kernel_env = {}
    for i, name in ipairs(opts.secrets) do
      if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
        error(("opts.secrets[%d] must be an environment variable name"):format(i), 3)
      end
      local v = os.getenv(name)
      if v == nil then
        error(("opts.secrets lists %s, but it is not set in this environment; export %s=... (or put it in .env) first"):format(name, name), 3)
      end
      kernel_env[name] = v
    end
  end
  -- A detached sandbox's sessions live on its own server (they outlive this script with it).
  local remote = sandbox and sandbox.detached and sandbox_server(sandbox) or nil
  local function req(t, c) if remote then return request_on(remote, t, c) end return request(t, c) end
  local r = check(req("start_session", { name = opts.name, notebook_dir = output_dir, workspace_dir = kernel_dir,
                                         sandbox = launcher, kernel_env = kernel_env }),
                  "create_notebook_session")
  if not remote then server.sessions = server.sessions + 1 end
  local s = setmetatable({ session_id = r.session_id, jupyter_url = r.jupyter_url, notebook_path = r.notebook_path,
                           workspace_dir = workspace_dir, workspace_path = kernel_dir, output_dir = output_dir, sandbox = sandbox,
                           model_info_text = "", _remote = remote,
                           _tmp_workspace = tmp_listing and { dir = workspace_dir, listing = tmp_listing } or nil }, Session)
  created_sessions[s] = process.now_ms()
  local function init(code, hidden)
    local rr = check(req("execute", { session_id = s.session_id, code = code, hidden = hidden, init = true }),
                     "create_notebook_session")
    if rr.result ~= "ok" then
      local e = rr.error or {}
      s:terminate()
      error(("create_notebook_session: setting up the kernel failed: %s: %s"):format(e.ename, e.evalue), 3)
    end
  end
  -- Libraries are `require`-able by their names: the workspace joins package.path.
  init(("package.path = %q .. package.path"):format(kernel_dir .. "/?.lua;" .. kernel_dir .. "/?/init.lua;"), true)
  if models and #models > 0 and workspace.preload_models then
    local path_of = (sandbox and sandbox.model_path) and function(name, rev) return sandbox:model_path(name, rev) end
                    -- A local directory is passed as an absolute path (the kernel runs in the
                    -- workspace directory); anything else is a hub id for the model cache.
                    or function(name) return core.realpath(name) or name end
    for _, m in ipairs(models) do init(load_code(m, path_of), workspace.hidden_model_loading or m.hidden) end
    s.model_info_text = M.model_info_text(models)
  end
  if workspace.custom_init_code ~= "" then init(workspace.custom_init_code, true) end
  if r.scope then
    -- A sandboxed session: the agent's MCP server gets the sandbox's scope (its own request
    -- socket and key on the notebook server), never the live view's token, so every tool it
    -- offers reaches only this sandbox (docs/mcp.md, "Sandbox-bound servers").
    s.sandbox_id = r.scope.sandbox_id
    s.mcp_config = {
      notebook = { type = "stdio", command = jupyter.seer_binary(), args = { "mcp", "notebook" },
                   env = { SEER_SESSION_ID = s.session_id, SEER_NOTEBOOK_ENDPOINT = r.scope.endpoint,
                           SEER_NOTEBOOK_SCOPE_KEY = r.scope.key } },
    }
  else
    s.mcp_config = {
      notebook = { type = "stdio", command = jupyter.seer_binary(), args = { "mcp", "notebook" },
                   env = { SEER_NOTEBOOK_URL = s.jupyter_url ~= json.null and s.jupyter_url or "",
                           SEER_SESSION_ID = s.session_id, SEER_NOTEBOOK_OUTPUT_DIR = output_dir } },
    }
  end
  return s
end

-- The reference's positional form: a session's name (and, for create_local_notebook_session,
-- its output_dir) given as plain arguments, `create_x(..., "name", "dir")`, instead of the
-- options table. Returns the options table; anything else is an error naming both forms.
local function positional_opts(fname, opts, output_dir, usage)
  if type(opts) == "string" then
    if output_dir ~= nil and type(output_dir) ~= "string" then
      error(("%s: output_dir (the argument after the name) must be a string, got %s; %s"):format(fname, type(output_dir), usage), 3)
    end
    return { name = opts, output_dir = output_dir }
  end
  if output_dir ~= nil then
    error(("%s: an output_dir argument goes with a name string before it, got %s then %s; %s"):format(
      fname, type(opts), type(output_dir), usage), 3)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(("%s: the argument after the workspace is a name string or an options table, got %s; %s"):format(fname, type(opts), usage), 3)
  end
  return opts
end

---A notebook session in a sandbox, with the sandbox's models preloaded under their var_name
---(tokenizers as `tokenizer` for `model`, else `{var_name}_tokenizer`).
---
---`sandbox` is a started `env.Sandbox`: the kernel runs inside it (sandboxd starts it), the
---workspace is its /workspace and models load from its /models. Any other table whose
---`config.models` lists ModelConfig-like tables `{name, var_name?, hidden?, is_peft?,
---base_model?, revision?}` (with an optional `model_path(name, revision)`) gives a kernel on
---this machine instead, with those models.
---
---The reference's `create_notebook_session(sandbox, workspace, name)` works too: a string in
---place of `opts` is the session's name.
---@param sandbox table
---@param workspace? seerworkspace.Workspace
---@param opts? string|{name?: string, notebook_dir?: string, output_dir?: string, workspace_dir?: string} a string is the name
---@return seerexecution.NotebookSession
local plain_table_noted
function M.create_notebook_session(sandbox, workspace, opts, extra)
  if type(sandbox) ~= "table" or type(sandbox.config) ~= "table" then
    error("create_notebook_session(sandbox, workspace, opts): sandbox must be a started Sandbox (with .config)", 2)
  end
  if extra ~= nil then
    error("create_notebook_session(sandbox, workspace, name_or_opts) takes 3 arguments; give output_dir as {name = ..., output_dir = ...}", 2)
  end
  opts = positional_opts("create_notebook_session", opts, nil,
    'use create_notebook_session(sandbox, workspace, "name") or (sandbox, workspace, {name = ..., output_dir = ...})')
  opts = require("seer.checks").options("create_notebook_session", opts,
    { name = "string", notebook_dir = "string", output_dir = "string", workspace_dir = "string" }, 2)
  -- execution_mode says what a sandbox is for: CLI gives a shell (create_cli_session) and no
  -- notebook server; NOTEBOOK starts the notebook server with the sandbox (jupyter_url).
  if type(sandbox.kernel_launcher) == "function" and sandbox.config.execution_mode == "cli" then
    error("create_notebook_session: this sandbox was configured with execution_mode = ExecutionMode.CLI (a shell, no "
      .. "notebook server); use create_cli_session, or set execution_mode = ExecutionMode.NOTEBOOK in its SandboxConfig", 2)
  end
  if type(sandbox.kernel_launcher) ~= "function" and not plain_table_noted then
    -- a table with config.models (what tests give): the kernel is a process of this machine
    plain_table_noted = true
    io.stderr:write("seer.execution: create_notebook_session was given a table that is not a started env.Sandbox: "
      .. "its kernel runs on this machine, NOT sandboxed (pass a started env.Sandbox, or use create_local_notebook_session)\n")
  end
  local models = sandbox.config.models or {}
  for i, m in ipairs(models) do
    if type(m) ~= "table" or type(m.name) ~= "string" then
      error(("create_notebook_session: sandbox.config.models[%d] needs a name"):format(i), 2)
    end
    if m.is_peft and type(m.base_model) ~= "string" then
      error(("create_notebook_session: model %s is a PEFT adapter (is_peft = true) but has no base_model"):format(m.name), 2)
    end
  end
  return create(workspace, opts, models, sandbox)
end

---A notebook session with its kernel on this machine and no sandbox (models are loaded by the
---notebook's own code; model_info_text is ""). The kernel is NOT sandboxed: it runs as this
---user with this machine's files and network, and so does every session its mcp_config's
---server starts (start_new_session there starts host kernels too).
---@param workspace? seerworkspace.Workspace
---`opts.secrets` lists variables of this process the kernel gets (API keys for API-driven
---experiments); nothing else of this process's secrets reaches it.
---@param opts? string|{name?: string, output_dir?: string, workspace_dir?: string, secrets?: string[]} a string is the name (the reference's positional form)
---@param output_dir? string with a name string: the reference's `create_local_notebook_session(workspace, name, output_dir)`
---@return seerexecution.NotebookSession
function M.create_local_notebook_session(workspace, opts, output_dir)
  -- The reference's keyword form: create_local_notebook_session{workspace = ..., name = ..., output_dir = ...}
  if type(workspace) == "table" and getmetatable(workspace) == nil and opts == nil then
    local t = workspace
    opts = {}
    for k, v in pairs(t) do
      if k == "workspace" then workspace = v
      elseif k == "name" or k == "output_dir" or k == "workspace_dir" or k == "secrets" or k == "notebook_dir" then opts[k] = v
      else
        error(("create_local_notebook_session: unknown field %q (fields: workspace, name, output_dir, workspace_dir, secrets)"):format(tostring(k)), 2)
      end
    end
    if workspace == t then workspace = nil end
  end
  if workspace ~= nil and (type(workspace) ~= "table" or type(workspace.install) ~= "function") then
    error("create_local_notebook_session(workspace, opts): workspace must be a seer.workspace Workspace (or nil)", 2)
  end
  opts = positional_opts("create_local_notebook_session", opts, output_dir,
    'use create_local_notebook_session(workspace, "name", "output_dir") or (workspace, {name = ..., output_dir = ...})')
  opts = require("seer.checks").options("create_local_notebook_session", opts,
    { name = "string", notebook_dir = "string", output_dir = "string", workspace_dir = "string", secrets = "table" }, 2)
  return create(workspace, opts, nil, nil)
end

-- cell_timeout: seconds each re-run cell may take (it is interrupted past them, as exec's timeout)
local function check_cell_timeout(fname, v)
  if v ~= nil and not (v > 0 and v < math.huge) then
    error(("%s: cell_timeout must be a number of seconds > 0, got %s"):format(fname, tostring(v)), 3)
  end
end

---Resumes an existing notebook: a new session re-runs its cells in place.
---@param path string
---@param opts? {cell_timeout?: number} seconds each re-run cell may take (past them it is interrupted, as exec's timeout; default none). A workspace is not applied to a resumed notebook: its cells run as they are
---@return seerexecution.NotebookSession, table info (cells_run, cells_failed)
function M.resume_notebook(path, opts)
  if type(opts) == "table" and opts.workspace ~= nil then
    error("resume_notebook: a workspace is not applied to a resumed notebook (its cells re-run as they are); "
      .. "to run them with a workspace, create_local_notebook_session(workspace) and exec the notebook's cells", 2)
  end
  opts = require("seer.checks").options("resume_notebook", opts, { cell_timeout = "number" }, 2)
  check_cell_timeout("resume_notebook", opts.cell_timeout)
  local r = check(request("start_session", { resume = core.realpath(path) or path, cell_timeout = opts.cell_timeout }), "resume_notebook")
  server.sessions = server.sessions + 1
  return setmetatable({ session_id = r.session_id, jupyter_url = r.jupyter_url, notebook_path = r.notebook_path,
                        model_info_text = "" }, Session), r
end

---Continues an existing notebook: its cells are copied into a new notebook and re-run.
---@param path string
---@param opts? {name?: string, output_dir?: string, cell_timeout?: number} cell_timeout as resume_notebook's
---@return seerexecution.NotebookSession, table info (cells_run, cells_failed)
function M.continue_notebook(path, opts)
  opts = require("seer.checks").options("continue_notebook", opts, { name = "string", output_dir = "string", cell_timeout = "number" }, 2)
  check_cell_timeout("continue_notebook", opts.cell_timeout)
  local r = check(request("start_session", { ["continue"] = core.realpath(path) or path, name = opts.name,
                                             notebook_dir = opts.output_dir, cell_timeout = opts.cell_timeout }), "continue_notebook")
  server.sessions = server.sessions + 1
  return setmetatable({ session_id = r.session_id, jupyter_url = r.jupyter_url, notebook_path = r.notebook_path,
                        model_info_text = "" }, Session), r
end

---------------------------------------------------------------------------------------------
-- attaching to a session of another process's notebook server

local attached = {} -- endpoint -> server record, shared by the sessions attached through it

-- The notebook server behind a jupyter_url: its live view answers GET /api/info (with the
-- URL's token) with the ZMQ endpoint and key of its request socket.
local function remote_server(jupyter_url, timeout_ms)
  local http_get = require "seer.mcp.http_get"
  local host, port, path = http_get.parse_url(jupyter_url)
  if not host then error("attach_notebook_session: jupyter_url: " .. port, 0) end
  local token = path:match("[?&]token=([^&#]+)")
  if not token then
    error("attach_notebook_session: jupyter_url has no ?token=...; use the session's jupyter_url exactly as it was given", 0)
  end
  local hosthdr = host:find(":", 1, true) and ("[" .. host .. "]") or host
  local info_url = ("http://%s:%d/api/info?token=%s"):format(hosthdr, port, token)
  local res, err = http_get.get(info_url, { timeout_ms = timeout_ms or 5000 })
  if not res then
    error(("attach_notebook_session: cannot reach the notebook server at %s:%d: %s (it ends with the script or the detached "
      .. "sandbox that started it: has that ended? `seer sandbox list` shows the running sandboxes)"):format(host, port, err), 0)
  end
  if res.status == 403 then
    error(("attach_notebook_session: the notebook server at %s:%d refused the token in jupyter_url"):format(host, port), 0)
  end
  local ok, info = pcall(json.decode, res.body)
  if res.status ~= 200 or not ok or type(info) ~= "table" or type(info.endpoint) ~= "string" or type(info.key) ~= "string" then
    error(("attach_notebook_session: %s:%d is not a seer notebook server (GET /api/info answered %d)"):format(host, port, res.status), 0)
  end
  -- A server that binds every interface reports it as such; reach it at the URL's host.
  local endpoint = info.endpoint:gsub("^tcp://0%.0%.0%.0:", "tcp://" .. hosthdr .. ":"):gsub("^tcp://%*:", "tcp://" .. hosthdr .. ":")
  local srv = attached[endpoint]
  if srv and srv.key == info.key then return srv end
  local sock = net.socket("dealer", info.key)
  sock:connect(endpoint)
  srv = { sock = sock, key = info.key, endpoint = endpoint, session = net.uuid(), inbox = {}, owned = false,
          gone = function() return endpoint_gone(endpoint) end,
          probe = function()
            local r, why = http_get.get(info_url, { timeout_ms = 2000 })
            if not r then return false, why end
            return true
          end }
  attached[endpoint] = srv
  return srv
end

---A session that lives on another process's notebook server (an experiment's session, from its
---`jupyter_url` and `session_id`, as a session's mcp_config passes them to seer mcp notebook).
---The returned session works like any other; terminate() shuts down its kernel but never the
---server, which belongs to the process that started it.
---@param jupyter_url string `http://HOST:PORT/notebooks/<id>?token=T`
---@param session_id string
---@param opts? {timeout_ms?: integer}
---@return seerexecution.NotebookSession
function M.attach_notebook_session(jupyter_url, session_id, opts)
  opts = require("seer.checks").options("attach_notebook_session", opts, { timeout_ms = "number" }, 2)
  if type(jupyter_url) ~= "string" or jupyter_url == "" then error("attach_notebook_session: jupyter_url must be a string", 2) end
  if type(session_id) ~= "string" or session_id == "" then error("attach_notebook_session: session_id must be a string", 2) end
  local srv = remote_server(jupyter_url, opts.timeout_ms)
  local r = request_on(srv, "session_info", { session_id = session_id }, { timeout_ms = opts.timeout_ms or 10000 })
  if r.status == "error" then error(("attach_notebook_session: %s: %s"):format(r.ename, r.evalue), 0) end
  return setmetatable({ session_id = session_id, jupyter_url = r.jupyter_url ~= json.null and r.jupyter_url or jupyter_url,
                        notebook_path = r.notebook_path, model_info_text = "", attached = true, _remote = srv,
                        sandbox_id = r.sandbox_id ~= json.null and r.sandbox_id or nil }, Session)
end

---The scope credential of an attached sandboxed session ({sandbox_id, endpoint, key}), or nil
---for a session on the host. Needs the main key (a session attached through its jupyter_url).
---@param session seerexecution.NotebookSession
---@return table|nil
function M.scope_credential(session)
  local r = session:_request("scope_credential", { session_id = session.session_id }, { timeout_ms = 10000 })
  if r.status == "error" then error(("scope_credential: %s: %s"):format(r.ename, r.evalue), 0) end
  if r.sandbox_id == nil or r.sandbox_id == json.null then return nil end
  return { sandbox_id = r.sandbox_id, endpoint = r.endpoint, key = r.key }
end

---The sessions on this process's notebook server (none when it is not running): session_info
---tables, with `sandbox_id` (json.null for a kernel on this machine).
---@return table[]
function M.list_sessions()
  if not server then return {} end
  return check(request("list_sessions", {}, { timeout_ms = REQUEST_TIMEOUT_MS }), "list_sessions").sessions
end

---------------------------------------------------------------------------------------------
-- sandbox-bound clients: a sandbox's scope on a notebook server (docs/notebook.md)

---A client bound to one sandbox's scope on a notebook server: every request goes to the
---scope's socket, signed with its key, so the server lets it reach only that sandbox's
---sessions and start sessions only in that sandbox, like one of them.
---@class seerexecution.SandboxBinding
---@field endpoint string
---@field sandbox_id string|nil known after info()
local Binding = {}
Binding.__index = Binding

local bindings = {} -- endpoint .. " " .. key -> server record

---Binds to a sandbox's scope: `endpoint` and `key` as a sandboxed session's mcp_config gives
---them (SEER_NOTEBOOK_ENDPOINT, SEER_NOTEBOOK_SCOPE_KEY).
---@param endpoint string
---@param key string
---@return seerexecution.SandboxBinding
function M.bind_sandbox(endpoint, key)
  if type(endpoint) ~= "string" or not endpoint:match("^tcp://") and not endpoint:match("^ipc://") then
    error("bind_sandbox: endpoint must be the scope's tcp:// or ipc:// endpoint (SEER_NOTEBOOK_ENDPOINT)", 2)
  end
  if type(key) ~= "string" or #key < 32 then
    error("bind_sandbox: key must be the scope's key (SEER_NOTEBOOK_SCOPE_KEY, 64 hex characters)", 2)
  end
  local id = endpoint .. " " .. key
  local srv = bindings[id]
  if not srv then
    local sock = net.socket("dealer", key)
    sock:connect(endpoint)
    srv = { sock = sock, key = key, endpoint = endpoint, session = net.uuid(), inbox = {}, owned = false,
            gone = function() return endpoint_gone(endpoint) end }
    -- A silent server is asked scope_info on a socket of its own; no answer in 2 s means it
    -- has ended (or the key is not this scope's: the server drops what it cannot verify).
    srv.probe = function()
      local p = net.socket("dealer", key)
      p:connect(endpoint)
      p:send{ header = net.header("scope_info_request", srv.session), parent_header = {}, metadata = {}, content = {} }
      local r = p:recv(2000)
      p:close()
      if not r then return false, "no answer to scope_info within 2 s" end
      return true
    end
    bindings[id] = srv
  end
  return setmetatable({ endpoint = endpoint, _srv = srv }, Binding)
end

local function scoped_session(b, r)
  return setmetatable({ session_id = r.session_id, notebook_path = r.notebook_path, sandbox_id = r.sandbox_id,
                        model_info_text = "", attached = true, _remote = b._srv }, Session)
end

---The scope's sandbox and its live sessions: {sandbox_id, session_ids}. Fails when the server
---does not answer within timeout_ms (default 10 s): it has ended, or the key is wrong.
---@param timeout_ms? integer
---@return table
function Binding:info(timeout_ms)
  local r = request_on(self._srv, "scope_info", {}, { timeout_ms = timeout_ms or 10000 })
  if r.status == "error" then error(("scope_info: %s: %s"):format(r.ename, r.evalue), 0) end
  self.sandbox_id = r.sandbox_id
  return r
end

---A session of this sandbox, by id (sessions of other sandboxes, or on the host, are not found).
---@param session_id string
---@param opts? {timeout_ms?: integer}
---@return seerexecution.NotebookSession
function Binding:attach(session_id, opts)
  if type(session_id) ~= "string" or session_id == "" then error("attach: session_id must be a string", 2) end
  opts = require("seer.checks").options("attach", opts, { timeout_ms = "number" }, 2)
  local r = request_on(self._srv, "session_info", { session_id = session_id }, { timeout_ms = opts.timeout_ms or 10000 })
  if r.status == "error" then error(("%s: %s"):format(r.ename, r.evalue), 0) end
  self.sandbox_id = r.sandbox_id
  return scoped_session(self, r)
end

---Starts a session in this sandbox, like the session `like` (same workspace, start-up code,
---models and output directory). `resume` / `continue` name a notebook of that output
---directory by its file name.
---@param opts {like: string, name?: string, resume?: string, continue?: string}
---@return seerexecution.NotebookSession, table info (cells_run, cells_failed when resuming)
function Binding:start_session(opts)
  local r = request_on(self._srv, "start_session", { like = opts.like, name = opts.name, resume = opts.resume,
                                                     ["continue"] = opts["continue"] })
  if r.status == "error" then error(("%s: %s"):format(r.ename, r.evalue), 0) end
  self.sandbox_id = r.sandbox_id
  return scoped_session(self, r), r
end

---------------------------------------------------------------------------------------------
-- CLI sessions

---@class seerexecution.CliSession
---@field name string
---@field session_id string unique per session (the reference's session_id)
---@field sandbox_id string
---@field workspace_dir string the host side of the sandbox's /workspace
---@field mcp_config table starts `seer mcp cli` on this sandbox (run_command, run_lua, read_file, write_file, list_files)
local CliSession = {}
CliSession.__index = CliSession

---Runs a shell command in the session's sandbox (as sandbox:exec).
---@param cmd string|string[]
---@param opts? table
---@return string output, table result
function CliSession:exec(cmd, opts) return self.sandbox:exec(cmd, opts) end

---The reference's name for running a shell command: the same as exec.
---@param cmd string|string[]
---@param opts? table
---@return string output, table result
function CliSession:exec_shell(cmd, opts) return self.sandbox:exec(cmd, opts) end

---Runs Lua in the session's sandbox (a fresh `seer -e` process; the reference's exec ran Python).
---@param code string
---@param opts? table
---@return string output, table result
function CliSession:exec_lua(code, opts) return self.sandbox:exec_lua(code, opts) end

---Ends the session (the sandbox stays: it is the caller's to terminate).
function CliSession:terminate() self.terminated = true end

---Installs a workspace into the session's sandbox (the reference's `session.setup(workspace)`).
---@param workspace seerworkspace.Workspace
function CliSession:setup(workspace)
  if type(workspace) ~= "table" or type(workspace.install) ~= "function" then
    error("session:setup(workspace): workspace must be a seer.workspace Workspace", 2)
  end
  workspace:install(self.sandbox.workspace_dir)
end

---A shell session in a sandbox for an agent: its `mcp_config` serves run_command, run_lua,
---read_file, write_file and list_files inside the sandbox (`seer mcp cli`). The workspace's
---libraries are installed in the sandbox's /workspace.
---@param sandbox seersandbox.Sandbox a started env.Sandbox
---@param workspace? seerworkspace.Workspace
---@param opts? string|{name?: string} a string is the name (the reference's `create_cli_session(sandbox, workspace, name)`)
---@return seerexecution.CliSession
function M.create_cli_session(sandbox, workspace, opts)
  if type(sandbox) ~= "table" or type(sandbox.kernel_launcher) ~= "function" or not sandbox.sandbox_id then
    error("create_cli_session(sandbox, workspace, opts): sandbox must be a started env.Sandbox (env.Sandbox(config):start())", 2)
  end
  opts = positional_opts("create_cli_session", opts, nil,
    'use create_cli_session(sandbox, workspace, "name") or (sandbox, workspace, {name = ...})')
  opts = require("seer.checks").options("create_cli_session", opts, { name = "string" }, 2)
  workspace = workspace or require("seer.workspace").Workspace{}
  workspace:install(sandbox.workspace_dir)
  local S = require "seer.sandbox"
  local name = opts.name or "cli"
  return setmetatable({
    name = name, session_id = name .. "-" .. net.new_key():sub(1, 8), sandbox = sandbox, sandbox_id = sandbox.sandbox_id,
    workspace_dir = sandbox.workspace_dir, workspace_path = "/workspace",
    mcp_config = { [name] = { type = "stdio", command = jupyter.seer_binary(), args = { "mcp", "cli", "--sandbox", sandbox.sandbox_id },
                              env = { SEER_SANDBOX_DIR = S.state_root() } } },
  }, CliSession)
end

---The agent works on this machine and calls scoped functions (libraries served by
---ScopedSandbox:serve): see seer.local_session.
---@param workspace seerworkspace.Workspace
---@param workspace_dir string
---@param name? string
---@return seerexecution.LocalSession
function M.create_local_session(workspace, workspace_dir, name)
  return require("seer.local_session").create_local_session(workspace, workspace_dir, name)
end

return M
