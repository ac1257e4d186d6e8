--- seer.sandbox: the local sandbox. `Sandbox(config):start()` runs `seer sandboxd` under
--- bubblewrap — new user, pid, ipc, uts, mount and (unless network = "host") network
--- namespaces, all capabilities dropped, system directories read-only, a writable /workspace, a
--- private /tmp, models read-only under /models — inside cgroup limits on memory and processes,
--- with a wall-time limit enforced from outside. The sandbox dies with the script that started
--- it, however the script ends. Requests go to sandboxd as signed messages over a unix socket
--- (docs/sandbox.md).
---
---   local env = require "seer.environment"
---   local sandbox = env.Sandbox(env.SandboxConfig{ models = { "org/model" } }):start()
---   print(sandbox:exec("ls /models"))
---   sandbox:terminate()
---@class seersandbox
local M = {}

local ffi = require "ffi"
local net = require "seer.net"
local json = require "seer.json"
local core = require "seer.core.host"
local sb = require "seer.core.sandbox"
local process = require "seer.process"
local safe_fs = require "seer.safe_fs"

pcall(ffi.cdef, [[
  unsigned getuid(void);
  int chmod(const char *path, unsigned mode);
]])

local SANDBOX_RUN = "/run/seer"
local SANDBOX_LOGS = "/var/log/seer"
local SANDBOX_SEER = "/opt/seer/bin/seer"
local SANDBOX_LUA = "/opt/seer/lua"

---------------------------------------------------------------------------------------------
-- small helpers

local function is_dir(path)
  return path and sb.listdir(path) ~= nil
end

-- Whether path exists, without opening it (a fifo there must not block the host).
local function exists(path)
  return path ~= nil and safe_fs.lstat(path) ~= nil
end

local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- Every host-side file operation on a folder the sandbox can write (workspace, run, logs) or
-- on the state folder that holds them goes through seer.safe_fs: resolved beneath a root with
-- no symlink followed, regular files only, bounded reads, atomic writes (docs/sandbox.md).
-- The port of the egress forwarder inside a sandbox with a network allow-list (its own network
-- namespace: nothing else listens there).
local EGRESS_PORT = 3128

local WHAT = { workspace = "the sandbox's workspace", run = "the sandbox's run folder",
               logs = "the sandbox's log folder", state = "the sandbox state folder",
               snapshots = "the snapshot folder" }

-- Writes root/rel atomically, mode 0600 (a link planted at rel is replaced, not followed).
local function write_private(root, rel, text)
  safe_fs.must(root:write(rel, text, { mode = tonumber("600", 8) }))
end

-- A JSON file beneath root (at most 1 MiB), or nil when it is missing or not JSON.
local function read_json(root, rel)
  local text = root:read(rel, { max = 1048576 })
  if not text then return nil end
  local ok, v = pcall(json.decode, text)
  return ok and v or nil
end

-- The last n lines of root/rel (read from its last 64 KiB; "" when it cannot be read: a link,
-- a fifo or a missing file is never opened).
local function tail(root, rel, n)
  local text = root:read(rel, { max = 65536, tail = true })
  if not text then return "" end
  local lines = {}
  for l in text:gmatch("[^\n]+") do lines[#lines + 1] = l end
  return table.concat(lines, "\n", math.max(1, #lines - (n or 20) + 1))
end

-- The sandbox's roots (each a folder on the host; see WHAT).
local function roots(self)
  if not self._roots then
    self._roots = {
      workspace = safe_fs.root(self.workspace_dir, WHAT.workspace),
      run = safe_fs.root(self.run_dir, WHAT.run),
      logs = safe_fs.root(self.log_dir, WHAT.logs),
      state = safe_fs.root(self.state_dir, WHAT.state),
    }
  end
  return self._roots
end

local function find_on_path(name)
  for dir in (os.getenv("PATH") or "/usr/bin:/bin"):gmatch("[^:]+") do
    local p = dir .. "/" .. name
    if exists(p) then return p end
  end
end

local function seer_read(path)
  local f = assert(io.open(path, "rb"))
  local t = f:read("*a")
  f:close()
  return t
end

local function random_hex(n)
  return (net.new_key():gsub("[^%x]", "")):sub(1, n)
end

-- Runs a program on the host and waits: code, stdout, stderr.
local function run_host(argv, opts)
  opts = opts or {}
  local p, err = sb.spawn{ argv = argv, cwd = opts.cwd, env = opts.env }
  if not p then return nil, "", err end
  local out, errs = {}, {}
  local t0 = process.now_ms()
  local st, exited_at
  while true do
    local o, e = p:fds()
    local fds = {}
    if o >= 0 then fds[#fds + 1] = o end
    if e >= 0 then fds[#fds + 1] = e end
    if #fds > 0 then net.poll(fds, st and 5 or 50) else process.sleep_ms(1) end
    for _, which in ipairs({ "out", "err" }) do
      local acc = which == "out" and out or errs
      local d = p:read(which)
      while d and d ~= "" do acc[#acc + 1] = d; d = p:read(which) end
    end
    if not st then
      st = p:poll()
      if st then exited_at = process.now_ms() end
    end
    -- done when it ended and its pipes closed (or a background child holds them: 100 ms grace)
    if st and (#fds == 0 or process.now_ms() - exited_at > 100) then
      p:close()
      return st.code, table.concat(out), table.concat(errs)
    end
    if not st and opts.timeout_ms and process.now_ms() - t0 > opts.timeout_ms then p:kill(sb.SIGKILL) end
  end
end

local notes_said = {}
local function say_once(text)
  if notes_said[text] then return end
  notes_said[text] = true
  io.stderr:write("seer: ", require("seer.terminal").safe(text), "\n")
end

---------------------------------------------------------------------------------------------
-- where things live

---The directory holding one subdirectory per running sandbox: $SEER_SANDBOX_DIR, else
---$XDG_RUNTIME_DIR/seer/sandboxes, else /tmp/seer-<uid>/sandboxes. Short on purpose: unix
---socket paths inside it must stay under 108 bytes.
---@return string
function M.state_root()
  local d = os.getenv("SEER_SANDBOX_DIR")
  if not d or d == "" then
    local rt = os.getenv("XDG_RUNTIME_DIR")
    d = (rt and rt ~= "" and rt .. "/seer/sandboxes") or ("/tmp/seer-" .. ffi.C.getuid() .. "/sandboxes")
  end
  process.mkdir_p(d)
  ffi.C.chmod(d, tonumber("700", 8))
  return d
end

---Where snapshots are kept: $SEER_CACHE_DIR/snapshots, else $XDG_CACHE_HOME/seer/snapshots,
---else ~/.cache/seer/snapshots.
---@return string
function M.snapshot_root()
  local base = os.getenv("SEER_CACHE_DIR")
  if not base or base == "" then
    local x = os.getenv("XDG_CACHE_HOME")
    base = (x and x ~= "" and x .. "/seer") or ((os.getenv("HOME") or "/tmp") .. "/.cache/seer")
  end
  local d = base .. "/snapshots"
  process.mkdir_p(d)
  return d
end

-- The text of a small /proc file, or "" when it cannot be read.
local function proc_text(path)
  local f = io.open(path)
  if not f then return "" end
  local text = f:read("*a") or ""
  f:close()
  return text
end

local function mem_total()
  local kb = proc_text("/proc/meminfo"):match("MemTotal:%s*(%d+)")
  return kb and tonumber(kb) * 1024
end

-- This process's hard limit on open files (`ulimit -Hn`; nil when unlimited or unreadable): a
-- sandbox cannot be given more without a privilege seer does not have.
local function nofile_hard()
  local hard = proc_text("/proc/self/limits"):match("Max open files%s+%S+%s+(%S+)")
  return hard and tonumber(hard)
end

---The NVIDIA device nodes of this machine ({} without a GPU).
---@return string[] gpus /dev/nvidia0, /dev/nvidia1, ...
---@return string[] control /dev/nvidiactl, /dev/nvidia-uvm, ...
function M.gpu_devices()
  local gpus, control = {}, {}
  for _, e in ipairs(sb.listdir("/dev") or {}) do
    if e.name:match("^nvidia%d+$") then gpus[#gpus + 1] = "/dev/" .. e.name
    elseif e.name:match("^nvidia") and e.type ~= "dir" then control[#control + 1] = "/dev/" .. e.name end
  end
  table.sort(gpus, function(a, b) return tonumber(a:match("%d+$")) < tonumber(b:match("%d+$")) end)
  table.sort(control)
  if not exists("/dev/nvidiactl") then return {}, {} end
  return gpus, control
end

---------------------------------------------------------------------------------------------
-- the sandboxd client (also used by the notebook server to start kernels in a sandbox)

local Client = {}
Client.__index = Client

-- Limits of the host's side of the protocol (docs/sandbox.md, "sandboxd protocol").
M.REQUEST_TIMEOUT_MS = 60000          -- a file op, a service start: sandboxd answers in milliseconds
M.EXEC_MARGIN_MS = 60000              -- past an exec's own timeout
M.READ_MAX_BYTES = 64 * 1048576       -- sandbox:read_file's max_bytes unless told
M.READ_MAX_LIMIT = 256 * 1048576      -- and the most it may be told (bigger files: in parts, with offset)
-- What sandboxd (inside: hostile) can make the host hold: one reply of at most the largest read
-- plus its JSON, all frames together (the connection guard cuts a peer past it), and at most two
-- waiting, so about 0.8 GiB. An impostor at sandboxd's socket that sent complete 200 MB messages
-- took a host process that attached to the sandbox to 6 GB (libzmq's default queue is 1,000).
M.SANDBOXD_MAX_REPLY = M.READ_MAX_LIMIT + 1048576
local SANDBOXD_QUEUE = 2
M.LIST_MAX_ENTRIES = 100000           -- entries sandbox:list_files returns at most
M.MAX_REPLY_VALUES = 1000000          -- JSON values in one part of a reply (a full list: ~900k)

-- How a request waits for its reply; an MCP server installs one that yields to its loop so
-- several tool calls (coroutines) can wait on the same sandbox at once.
local function default_wait(sock, timeout_ms, ready)
  if ready() then return end
  net.poll({ sock }, timeout_ms)
end
local wait = default_wait

---Installs how sandbox requests wait (nil restores blocking), as seer.execution.set_waiter.
---@param fn? fun(sock: seernet.socket, timeout_ms: integer, ready: fun(): boolean)
function M.set_waiter(fn) wait = fn or default_wait end

---What is wrong with a reply from sandboxd (nil when nothing): seer.net has checked the
---signature, replays, the layout and that the parts are JSON objects; this, that it is a reply
---with a parent msg_id and a status/ename/evalue of the right types. Shared with the notebook
---server's own sandboxd client (seer.cli.notebook).
---@param r table a received message
---@return string|nil why
function M.sandboxd_reply_problem(r)
  local h, p, c = r.header, r.parent_header, r.content
  if type(h.msg_type) ~= "string" or #h.msg_type > 64 or not h.msg_type:match("_reply$") then return "not a *_reply" end
  if type(p.msg_id) ~= "string" or #p.msg_id > 256 then return "no parent msg_id" end
  if c.status ~= nil and c.status ~= "ok" and c.status ~= "error" then return "content.status is not ok or error" end
  if c.status == "error" and (type(c.ename) ~= "string" or (c.evalue ~= nil and type(c.evalue) ~= "string")) then
    return "an error reply without a string ename and evalue"
  end
  return nil
end

---Connects to a sandboxd.
---@param info {endpoint: string, key: string, id?: string, alive?: fun(): boolean, string?}
---@return table client with :request(op, content, opts)
function M.connect(info)
  local self = setmetatable({ info = info, session = net.uuid(), alive = info.alive, inbox = {} }, Client)
  -- sandboxd runs inside the sandbox, so its replies are checked before anyone reads them:
  -- seer.net has checked the signature, replays, the layout and that the parts are JSON
  -- objects; here, that it is a reply with a parent msg_id and a status/ename/evalue of the
  -- right types. Anything else is dropped and counted on the socket, never an error here.
  local sock = net.socket("dealer", info.key, { max_bytes = M.SANDBOXD_MAX_REPLY, max_frames = 1024, rcvhwm = SANDBOXD_QUEUE })
  sock:connect(info.endpoint)
  local bad = M.sandboxd_reply_problem
  -- The check rides on this socket's own recv (an instance field over seer.net's method), so
  -- the socket stays a seer.net socket for net.poll and the waiters. The parts are decoded
  -- here with a cap on their values (M.MAX_REPLY_VALUES): a reply of millions of tiny JSON
  -- values would cost the host tens of bytes each once decoded.
  local raw = sock._s
  local function part(text, what)
    local dopts = { max_values = M.MAX_REPLY_VALUES }
    local ok, v = pcall(json.decode, text, dopts)
    if not ok then
      local fixed = net.utf8_fix(text)
      if fixed ~= text then ok, v = pcall(json.decode, fixed, dopts) end
      if not ok then return nil, ("its %s is not JSON or too large (%s)"):format(what, tostring(v):sub(1, 120)) end
    end
    if type(v) ~= "table" or json.is_array(v) then return nil, ("its %s is not a JSON object"):format(what) end
    return v
  end
  sock.recv = function(so, timeout_ms)
    timeout_ms = timeout_ms or -1
    local deadline = timeout_ms > 0 and (process.now_ms() + timeout_ms) or nil
    while true do
      local left = timeout_ms
      if deadline then left = math.max(0, deadline - process.now_ms()) end
      local idents, h, p, md, c, buffers = raw:recv(left)
      if not idents then return nil, h end
      local header, why = part(h, "header")
      local parent, metadata, content
      if header then parent, why = part(p, "parent header") end
      if parent then metadata, why = part(md, "metadata") end
      if metadata then content, why = part(c, "content") end
      local r = content and { idents = idents, header = header, parent_header = parent, metadata = metadata,
                              content = content, buffers = buffers }
      local b = r and bad(r) or why
      if not b then return r end
      so:note_dropped("a reply from sandboxd: " .. b)
      if timeout_ms == 0 then return nil, "timeout" end
    end
  end
  self.sock = sock
  return self
end

-- Moves the replies queued on the socket into the inboxes of the requests they answer.
function Client:pump()
  while true do
    local r = self.sock:recv(0)
    if not r then return end
    -- one reply per request: more replies to the same request (a hostile sandboxd) are dropped
    local box = r.parent_header and self.inbox[r.parent_header.msg_id]
    if box and #box == 0 then box[1] = r end
  end
end

---How long a request waits for sandboxd's answer unless told (ms): an exec its own timeout
---plus M.EXEC_MARGIN_MS (none without a timeout: a command may run as long as it likes);
---anything else M.REQUEST_TIMEOUT_MS, plus a second per 16 MiB it carries or asks for. sandboxd
---never blocks on a file (a fifo planted in the sandbox is refused), so this only fires when
---it is wedged or gone; the researcher's script gets an error instead of waiting forever.
---@param op string
---@param content table
---@param opts table
---@return integer|nil ms
function M.request_timeout_ms(op, content, opts)
  if op == "exec" then
    local t = tonumber(content.timeout)
    return t and t > 0 and math.floor(t * 1000) + M.EXEC_MARGIN_MS or nil
  end
  local bytes = 0
  for _, b in ipairs(opts.buffers or {}) do bytes = bytes + #b end
  if op == "read_file" then bytes = bytes + (tonumber(content.max_bytes) or M.READ_MAX_BYTES) end
  return M.REQUEST_TIMEOUT_MS + math.floor(bytes / (16 * 1048576)) * 1000
end

---Sends `<op>_request` and waits for its reply. opts: timeout_ms (nil: M.request_timeout_ms;
---false: no limit), buffers, no_raise (return the error reply instead of raising). Raises when
---the sandbox has ended, and when no answer came in time (naming the operation and sandbox).
function Client:request(op, content, opts)
  opts = opts or {}
  content = content or {}
  local msg = { header = net.header(op .. "_request", self.session), parent_header = {}, metadata = {},
                content = content, buffers = opts.buffers }
  local id = msg.header.msg_id
  local box = {}
  self.inbox[id] = box
  self.sock:send(msg)
  if opts.on_sent then opts.on_sent(id) end
  local timeout_ms = opts.timeout_ms
  if timeout_ms == nil then timeout_ms = M.request_timeout_ms(op, content, opts) end
  if timeout_ms == false then timeout_ms = nil end
  local deadline = timeout_ms and process.now_ms() + timeout_ms
  local ready = function() return #box > 0 end
  local ok, res, bufs = pcall(function()
    while true do
      self:pump()
      local r = table.remove(box, 1)
      if r then
        if r.content.status == "error" and not opts.no_raise then
          error(("sandbox %s: %s: %s"):format(op, tostring(r.content.ename), tostring(r.content.evalue)), 0)
        end
        return r.content, r.buffers
      end
      if self.alive then
        local alive, why = self.alive()
        if not alive then error(why, 0) end
      end
      if core.interrupted() then error("interrupted", 0) end
      if deadline and process.now_ms() >= deadline then
        error(("sandbox %s: no answer from sandboxd%s within %d ms (it is wedged or gone)")
          :format(op, self.info.id and (" of sandbox " .. tostring(self.info.id)) or "", timeout_ms), 0)
      end
      local w = 100
      if deadline then w = math.max(0, math.min(w, deadline - process.now_ms())) end
      wait(self.sock, w, ready)
    end
  end)
  self.inbox[id] = nil
  if not ok then
    if res == "interrupted" or (type(res) == "string" and (res:match("cancelled") or res:match("no answer from sandboxd"))) then
      self:cancel(id)
    end
    error(res, 0)
  end
  return res, bufs
end

---Asks sandboxd to stop the exec started by the request with this msg_id.
function Client:cancel(msg_id)
  pcall(function()
    self.sock:send{ header = net.header("cancel_request", self.session), parent_header = {}, metadata = {},
                    content = { msg_id = msg_id } }
  end)
end

function Client:close()
  if self.sock then self.sock:close(); self.sock = nil end
end

---------------------------------------------------------------------------------------------
-- Sandbox

---@class seersandbox.Sandbox
---@field config seerenvironment.SandboxConfig
---@field sandbox_id string|nil set by start()
---@field jupyter_url string|nil the notebook server's live view (notebook mode)
---@field model_handles seersandbox.ModelHandle[]
---@field repo_handles seersandbox.RepoHandle[]
---@field workspace_dir string|nil the host directory that is /workspace inside
local Sandbox = {}
M.SandboxClass = Sandbox

-- The reference's Sandbox names that seer does not have, with what to use instead: reading one
-- (sandbox:exec_python(...), sandbox.code_server_url) is an error saying so, not a bare
-- "attempt to call method 'exec_python' (a nil value)".
local REFERENCE_NAMES = {
  exec_python = "sandbox:exec_python is the reference's (it ran Python); seer sandboxes run Lua: use "
    .. "sandbox:exec_lua(code) (a fresh seer process in the sandbox), or sandbox:exec{\"python3\", \"-c\", code} "
    .. "where the sandbox has a python3",
  code_server_url = "sandbox.code_server_url is the reference's (VS Code in the browser); seer runs no code-server: "
    .. "SandboxConfig{debug = true} keeps the sandbox's state folder on this machine to open with any editor, "
    .. "and sandbox.workspace_dir is /workspace's host side",
  modal_sandbox = "sandbox.modal_sandbox is the reference's raw Modal object; a seer sandbox is not a Modal sandbox: "
    .. "use its methods (exec, exec_lua, read_file, write_file, list_files, logs, stats)",
}

-- Fields a sandbox may leave unset (reading them gives nil, never the typo error below).
local FIELDS = {}
for k in ("config sandbox_id jupyter_url model_handles repo_handles workspace_dir state_dir client run_dir keeper_pid "
  .. "stage_dirs cgroup sock keeper_status gpu_nodes disk_image log_dir link egress_filter stopped seer_binary key "
  .. "keeper_start detached lua_dir limits disk_mounted restore_from inbox session sandboxd_pid owner_pid "
  .. "notebook_server name created attached alive start_ms link_status env pass_fds bwrap local_mounts"):gmatch("%S+") do FIELDS[k] = true end

local function distance(a, b)
  if math.abs(#a - #b) > 2 then return 3 end
  local prev, prev2 = {}, nil
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a:byte(i) == b:byte(j) and 0 or 1))
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        cur[j] = math.min(cur[j], prev2[j - 2] + 1) -- a swap of two letters (exce) is one edit
      end
    end
    prev2, prev = prev, cur
  end
  return prev[#b]
end

local function method_names()
  local names = {}
  for k, v in pairs(Sandbox) do
    if type(k) == "string" and type(v) == "function" and not k:find("^_") then names[#names + 1] = k end
  end
  table.sort(names)
  return names
end

---The name in names that k is a likely typo of (an edit or two away, case aside), or nil.
---@param k string
---@param names string[]
---@return string|nil
function M.nearest_name(k, names)
  local lk = k:lower()
  for _, n in ipairs(names) do
    if lk == n or distance(lk, n) <= (#n <= 4 and 1 or 2) then return n end
  end
  return nil
end
M.method_names = method_names

-- A key a sandbox does not have: a reference name says what to use instead; a near miss of a
-- method's name (a typo: exce, write_files, terminat) says which methods there are; anything
-- else reads as nil, as for any table (code may probe optional fields).
Sandbox.__index = function(_, k)
  local v = rawget(Sandbox, k)
  if v ~= nil then return v end
  if type(k) ~= "string" then return nil end
  if REFERENCE_NAMES[k] then error(REFERENCE_NAMES[k], 2) end
  if FIELDS[k] or k:find("^_") or #k < 3 then return nil end
  local names = method_names()
  local near = M.nearest_name(k, names)
  if near then
    error(("Sandbox has no method '%s' (did you mean '%s'?); methods: %s"):format(k, near, table.concat(names, ", ")), 2)
  end
  return nil
end

---@class seersandbox.ModelHandle
---@field name string the model id (as configured)
---@field var_name string
---@field path string where the model is inside the sandbox (/models/...)
---@field host_path string where it is on this machine
---@field hidden boolean
---@field is_peft boolean
---@field base_model? string
---@field revision? string
---@field env_var? string MODEL_<ID>_PATH (not for hidden models)

---@class seersandbox.RepoHandle
---@field url string
---@field name string
---@field path string /workspace/<name>
---@field host_path string

-- Sandboxes this process started and has not terminated; terminated when the script ends
-- (seer.exit: normally, by an error, Ctrl-C or os.exit; the keeper takes care of every other
-- way the process can end). A snapshot is walked: each terminate removes its sandbox from live.
local live = {}
require("seer.exit").on_exit(function()
  local all = {}
  for s in pairs(live) do all[#all + 1] = s end
  for _, s in ipairs(all) do pcall(s.terminate, s) end
end)

local function new_sandbox(config, level)
  local env = require "seer.environment"
  local ok, c = pcall(env.SandboxConfig, config or {})
  if not ok then error(c, level + 1) end
  return setmetatable({ config = c, model_handles = {}, repo_handles = {} }, Sandbox)
end

---A sandbox for the config (not started yet): `env.Sandbox(config)`; also
---`env.Sandbox.from_snapshot(id, config)`.
M.Sandbox = setmetatable({}, {
  __call = function(_, config) return new_sandbox(config, 2) end,
  __tostring = function() return "seer.sandbox.Sandbox" end,
})

function Sandbox:__tostring()
  return ("Sandbox(%s)"):format(self.sandbox_id and (self.sandbox_id .. (self.stopped and ", terminated" or ", running"))
    or "not started")
end

-- A plain copy of a config (two levels deep), for JSON.
local function config_table(c)
  local t = {}
  for k, v in pairs(c) do
    if type(v) == "table" then
      local copy = {}
      for kk, vv in pairs(v) do
        if type(vv) == "table" then
          local inner = {}
          for a, b in pairs(vv) do inner[a] = b end
          copy[kk] = inner
        else copy[kk] = vv end
      end
      t[k] = copy
    else t[k] = v end
  end
  return t
end

local function sanitize(s)
  return (s:gsub("[^%w._-]", "-"):gsub("^[-.]+", ""):sub(1, 40))
end

---------------------------------------------------------------------------------------------
-- Hidden models. Nothing the sandbox can read may name a hidden model: not its files (model
-- cards, licenses, the JSON files' name fields, the safetensors metadata), not the paths its
-- files are mounted from (the mount table shows each bind mount's source path), not bwrap's
-- command line. So a hidden model is staged: the files seer needs to load it are hard-linked
-- (or, when no hard link is possible, copied) under an opaque name into a directory on the
-- same file system whose path holds nothing of the model, files that carry a name are written
-- there as cleaned copies, everything else is left out, and that directory is mounted.

pcall(ffi.cdef, [[
  int isatty(int fd);
]])
pcall(ffi.cdef, [[
  char *strerror(int errnum);
]])
-- engine/sandbox/stage.c: the model's files are opened once, confined, and linked or copied
-- through those descriptors (see "Staging" below)
pcall(ffi.cdef, [[
  int seer_stage_open_dir(const char *path, char *real, size_t real_size);
  int seer_stage_open_file(int dirfd, const char *name, const char *root0, const char *root1, long long *size,
                           char *real, size_t real_size);
  int seer_stage_link(int fd, const char *dst);
  int seer_stage_create(const char *dst);
  int seer_stage_clone(int out, int in, long long n);
  long long seer_stage_copy(int in, long long in_off, int out, long long out_off, long long n);
  long long seer_stage_pread(int fd, void *buf, long long n, long long off);
  long long seer_stage_pwrite(int fd, const void *buf, long long n, long long off);
  int seer_stage_close(int fd);
]])

pcall(ffi.cdef, [[
  int seer_stage_open_subdir(int dirfd, const char *name);
]])
pcall(ffi.cdef, [[
  int seer_stage_open_path(const char *path, int dir, char *real, size_t real_size);
]])

---------------------------------------------------------------------------------------------
-- Reading a model folder. The files of a model folder are not trusted (docs/security.md): the
-- folder may be one a sandbox wrote (an agent's model in its workspace, hidden into or mounted
-- in a second sandbox). Everything the host reads of one while it prepares a sandbox (the
-- fragments of a hidden model's id, the staging below, the files of a visible cache snapshot it
-- mounts one by one) goes through the descriptors of engine/sandbox/stage.c: the folder opened
-- once, each file opened through it (O_PATH first: a FIFO is never waited on, a device never
-- opened), regular files only, a link only when what the kernel reached lies inside the folder
-- (link_roots: the loader's rule), and never more than a stated number of bytes.

local C = ffi.C
local STAGE_ENOTREG, STAGE_EOUTSIDE, STAGE_ESHORT = -1000, -1001, -1002
local ENOENT, ENOTDIR, ELOOP, EMFILE, ENFILE = 2, 20, 40, 24, 23

local function errstr(rc) return ffi.string(C.strerror(-tonumber(rc))) end

-- n bytes of the file open at fd from off (fewer at its end), or nil and the reason.
local function fd_read(fd, n, off)
  if n <= 0 then return "" end
  local buf = ffi.new("uint8_t[?]", n)
  local got = tonumber(C.seer_stage_pread(fd, buf, n, off))
  if got < 0 then return nil, errstr(got) end
  return ffi.string(buf, got)
end

-- Where a link in the model folder may lead (the model loader's rule,
-- engine/tensor/safetensors.c), from `real`, the canonical path of the folder as it was opened:
-- the folder itself and, for a Hugging Face cache snapshot (.../models--org--name/snapshots/<rev>),
-- the repository folder, whose snapshots link into its blobs/. Nothing when
-- SEER_MODEL_FOLLOW_LINKS=1 (a folder the researcher assembled).
local function link_roots(real)
  if os.getenv("SEER_MODEL_FOLLOW_LINKS") == "1" then return nil end
  local roots = { real }
  local repo = real:match("^(.*/models%-%-[^/]+)/snapshots/[^/]+$") or real:match("^(.*/models%-%-[^/]+)/snapshots$")
  if repo then roots[2] = repo end
  return roots
end

-- The model folder `host` opened (O_PATH, its own links followed: the folder as configured)
-- once: its descriptor, which its files are opened through and listed from, and its canonical
-- path as the kernel resolved it; or nil and why.
local function open_folder(host)
  local real = ffi.new("char[?]", 4096)
  local fd = C.seer_stage_open_dir(host, real, 4096)
  if fd < 0 then return nil, errstr(fd) end
  return fd, ffi.string(real)
end

-- The file `name` of the folder open at dirfd, opened for reading (seer_stage_open_file: a link
-- only when it stays within `roots`, regular files only, nothing waited on): {fd, size, real},
-- or nil and the code (STAGE_EOUTSIDE, STAGE_ENOTREG, -errno).
local function open_in(dirfd, name, roots)
  local size, real = ffi.new("long long[1]"), ffi.new("char[?]", 4096)
  local fd = C.seer_stage_open_file(dirfd, name, roots and roots[1], roots and roots[2], size, real, 4096)
  if fd < 0 then return nil, fd end
  return { fd = fd, size = tonumber(size[0]), real = ffi.string(real) }
end

-- The entries of a model folder (a path, or "/proc/self/fd/N" of one opened), at most
-- M.MODEL_MAX_ENTRIES: a folder a sandbox wrote could hold millions, each a Lua table on the host.
-- A folder that cannot be listed is empty here, as before; one that holds more is an error.
---The most entries seer lists in a model folder it prepares a sandbox with.
M.MODEL_MAX_ENTRIES = 100000
local function list_model(path, shown)
  local max = M.MODEL_MAX_ENTRIES
  local entries, err = sb.listdir(path, max)
  if not entries and tostring(err):find("entries$") then
    error(("the model folder %s holds more than %d entries; seer does not list a model folder that large "
      .. "(a model needs a few dozen files: move the rest out of the folder)"):format(shown, max), 0)
  end
  return entries or {}
end

-- The file `name` of the folder open at dirfd read whole when it holds at most max bytes (with
-- prefix: its first max bytes, whatever its size), through open_in; nil for a file that is not
-- there, not a regular file, a link out of `roots`, larger, or unreadable (read only where such
-- a file may be passed over: what needs the file opens it itself and says why it cannot).
local function read_small(dirfd, name, roots, max, prefix)
  local f = open_in(dirfd, name, roots)
  if not f then return nil end
  local text = nil
  if f.size <= max or prefix then text = fd_read(f.fd, math.min(f.size, max), 0) end
  C.seer_stage_close(f.fd)
  return text
end

-- What hidden_fragments reads of a model folder's files: each JSON file of at most
-- FRAGMENT_MAX_JSON (a larger one is passed over: the files that name a model, its config,
-- adapter config and tokenizer config, hold a few KiB), and a README's first FRAGMENT_MAX_README
-- bytes (its front matter).
local FRAGMENT_MAX_JSON = 4 * 1048576
local FRAGMENT_MAX_README = 65536

-- What a hidden model keeps: what seer (or transformers) reads to load it. Everything else —
-- README.md, NOTICE, LICENSE, notes, tokenizer.model, pickles, sub-folders — stays out.
local HIDDEN_KEEP = {
  ["config.json"] = true, ["generation_config.json"] = true, ["tokenizer.json"] = true,
  ["tokenizer_config.json"] = true, ["special_tokens_map.json"] = true, ["added_tokens.json"] = true,
  ["vocab.json"] = true, ["merges.txt"] = true, ["chat_template.jinja"] = true, ["chat_template.json"] = true,
  ["adapter_config.json"] = true,
}
local function hidden_keeps(name)
  return HIDDEN_KEEP[name] or name:match("%.safetensors$") ~= nil or name:match("%.safetensors%.index%.json$") ~= nil
end

-- The most JSON values decoding a hidden model's file may meet (counted before anything is
-- built: the files are hostile, and "[],[],..." takes some 25 times its size once decoded).
local function json_limit(name)
  if name:match("%.safetensors$") then return json.MODEL_MAX_VALUES.safetensors_header end
  if name == "tokenizer.json" or name == "vocab.json" then return json.MODEL_MAX_VALUES.tokenizer end
  return json.MODEL_MAX_VALUES.config
end

-- JSON fields that name where a model came from; their values go whatever they hold.
local NAME_KEYS = {
  _name_or_path = true, name_or_path = true, base_model_name_or_path = true, model_name = true,
  _commit_hash = true, tokenizer_file = true, special_tokens_map_file = true, model_id = true,
  repo_id = true, base_model = true, hub_model_id = true, finetuned_from = true,
}

-- Path components too common to tell anything about a model.
local GENERIC = {
  "home", "root", "tmp", "temp", "var", "data", "mnt", "media", "srv", "opt", "usr", "local", "share",
  "work", "workspace", "models", "model", "checkpoints", "checkpoint", "ckpt", "weights", "cache",
  "huggingface", "hub", "snapshots", "blobs", "refs", "main", "seer", "sandboxes", "users", "scratch",
  "shared", "storage", "projects", "project", "experiments", "runs", "outputs", "hidden", "downloads",
  "files", "adapter", "adapters", "lora", "peft", "base",
}

local HIDDEN = "<hidden>"

-- A name as find_fragment compares names: letters and digits, lower case.
local function fold(s) return (s:lower():gsub("[^%w]", "")) end

-- s with every occurrence of a fragment replaced by <hidden>.
local function clean_text(s, frags, json_escapes)
  local out, i = {}, 1
  while true do
    local a, b = sb.find_fragment(s, frags, i, json_escapes)
    if not a then break end
    out[#out + 1] = s:sub(i, a - 1)
    out[#out + 1] = HIDDEN
    i = b + 1
  end
  if i == 1 then return s end
  out[#out + 1] = s:sub(i)
  return table.concat(out)
end

---The fragments that could name the hidden models: each id's org and name (and the cache's
---models--org--name), the revision, and every component of their host paths (folders, the
---cache's snapshot and blob names), less components every path here shares (GENERIC, and the
---folders of `generic_paths`: seer's own, whose paths the sandbox sees anyway), less what the
---architecture itself says (a folder called "llama" is not a secret when model_type is).
---@param models {name: string, revision?: string, host: string, files: {name: string, real: string}[]}[]
---@param generic_paths string[]
---@return string[] folded fragments (at least 4 characters, with a letter)
function M.hidden_fragments(models, generic_paths)
  local generic, shared = {}, {}
  for _, g in ipairs(GENERIC) do generic[g] = true end
  for _, p in ipairs(generic_paths) do
    for c in p:gmatch("[^/]+") do shared[fold(c)] = true end
  end
  local out, seen = {}, {}
  -- a part of a host path is no secret when seer's own folders share it; a part of the id
  -- always is (and a seer folder that holds one is refused: Sandbox:_prepare_models)
  local function add(s, from_path)
    if type(s) ~= "string" then return end
    local f = fold(s)
    if #f < 4 or not f:find("%a") or generic[f] or (from_path and shared[f]) or seen[f] then return end
    seen[f] = true
    out[#out + 1] = f
  end
  local function add_path(p) for c in p:gmatch("[^/]+") do add(c, true) end end
  local structural, filenames = {}, {}
  for _, m in ipairs(models) do
    local org, name = m.name:match("^([%w._-]+)/([%w._-]+)$")
    if org then
      add(org); add(name); add(m.name); add("models--" .. org .. "--" .. name)
    end
    add(m.revision)
    add_path(m.host)
    for _, f in ipairs(m.files) do
      -- where the file really is (a cache blob, a folder elsewhere); its own name when that
      -- is not the name it has in the model folder (a blob's hash)
      local dir, base = f.real:match("^(.*)/([^/]*)$")
      add_path(dir or "")
      if base and base ~= f.name then add(base, true) end
    end
    -- the names the files themselves give: a local folder's config.json says which hub id it
    -- is a copy of, an adapter names its base, a model card's front matter its base model
    local function add_named(v)
      if type(v) ~= "string" then return end
      local o, n = v:match("^([%w._-]+)/([%w._-]+)$")
      if o then add(o); add(n); add(v); add("models--" .. o .. "--" .. n)
      else add_path(v) end
    end
    -- a file's own name is not a secret (and a fragment equal to it would rename the file)
    for _, f in ipairs(m.files) do if hidden_keeps(f.name) then filenames[fold(f.name)] = true end end
    -- the folder's files are read as "Reading a model folder" above says: a FIFO or device is
    -- passed over, never waited on, a link out of the folder never followed, nothing read past
    -- its limit (a notes.json that is a FIFO hung start(), one linked to /dev/zero was read
    -- until memory ran out)
    local dirfd, real = open_folder(m.host)
    local roots = dirfd and link_roots(real)
    local function read_cfg(text, file)
      local ok, cfg = pcall(json.decode, text, { max_values = json_limit(file) })
      if not ok or type(cfg) ~= "table" then return end
      if file == "config.json" or file == "tokenizer_config.json" then
        if type(cfg.model_type) == "string" then structural[fold(cfg.model_type)] = true end
        if type(cfg.tokenizer_class) == "string" then structural[fold(cfg.tokenizer_class)] = true end
        if type(cfg.architectures) == "table" then
          for _, a in ipairs(cfg.architectures) do if type(a) == "string" then structural[fold(a)] = true end end
        end
      end
      if not json.is_array(cfg) then
        for k in pairs(NAME_KEYS) do add_named(cfg[k]) end
      end
    end
    local ok, err = pcall(function()
      for _, e in ipairs(dirfd and list_model("/proc/self/fd/" .. dirfd, m.host) or {}) do
        if e.type ~= "dir" and e.name:match("%.json$") then
          local text = read_small(dirfd, e.name, roots, FRAGMENT_MAX_JSON)
          if text then read_cfg(text, e.name) end
        elseif e.type ~= "dir" and e.name:lower() == "readme.md" then
          local text = read_small(dirfd, e.name, roots, FRAGMENT_MAX_README, true) or ""
          local front = text:match("^%-%-%-\n(.-)\n%-%-%-") or ""
          local list = false
          for line in (front .. "\n"):gmatch("([^\n]*)\n") do
            local key, val = line:match("^([%w_]+):%s*(.-)%s*$")
            if key then
              list = (key == "base_model" or key == "model_name") and val == ""
              if key == "base_model" or key == "model_name" then add_named(val) end
            elseif list then
              add_named(line:match("^%s*%-%s*(%S+)"))
            end
          end
        end
      end
    end)
    if dirfd then C.seer_stage_close(dirfd) end
    if not ok then error(err, 0) end
  end
  -- what the architecture says is no secret: a fragment inside model_type or an architecture
  -- name ("qwen" of Qwen/..., model_type qwen2) would otherwise clean the config unloadable
  local kept = {}
  for _, f in ipairs(out) do
    local inside = structural[f] or filenames[f]
    for st in pairs(structural) do if st:find(f, 1, true) then inside = true break end end
    if not inside then kept[#kept + 1] = f end
  end
  return kept
end

-- Tokens are the model: a vocabulary entry that happens to hold a fragment is kept as it is
-- (changing it would change what the model reads and writes).
-- The same for special tokens (bos_token, additional_special_tokens, the post-processor's
-- templates): they must stay equal to their vocabulary entries.
local function token_place(file, where, key)
  if file == "tokenizer.json" then
    return where:match("^model%.vocab") ~= nil or where:match("^model%.merges") ~= nil
      or where:match("^post_processor") ~= nil or (where == "added_tokens[]" and key == "content")
  elseif file == "vocab.json" or file == "added_tokens.json" then
    return where == ""
  elseif file == "tokenizer_config.json" or file == "special_tokens_map.json" then
    return (where:match("^added_tokens_decoder%.[^.]+$") ~= nil and key == "content")
      or (type(key) == "string" and key:match("_token$") ~= nil) or where:match("_tokens?$") ~= nil
      or where:match("_tokens?%[%]$") ~= nil
  end
  return false
end

-- A decoded JSON document cleaned in place: name fields become <hidden>, fragments in other
-- strings and keys are replaced (tokens excepted).
local function clean_json(doc, frags, file)
  local function walk(t, where)
    if json.is_array(t) then
      for i = 1, #t do
        local x = t[i]
        if type(x) == "string" then
          if not token_place(file, where .. "[]", nil) then t[i] = clean_text(x, frags) end
        elseif type(x) == "table" then walk(x, where .. "[]") end
      end
      return
    end
    local renames = {}
    for k, x in pairs(t) do
      local here = where == "" and tostring(k) or (where .. "." .. tostring(k))
      if NAME_KEYS[k] and type(x) == "string" then
        t[k] = HIDDEN
      elseif type(x) == "string" then
        if not token_place(file, where, k) then t[k] = clean_text(x, frags) end
      elseif type(x) == "table" then
        walk(x, here)
      end
      if type(k) == "string" and not token_place(file, where, nil) then
        local nk = clean_text(k, frags)
        if nk ~= k then renames[k] = nk end
      end
    end
    for k, nk in pairs(renames) do t[nk], t[k] = t[k], nil end
  end
  walk(doc, "")
  return doc
end

local function le64(n)
  local b = {}
  for i = 1, 8 do b[i] = string.char(n % 256); n = math.floor(n / 256) end
  return table.concat(b)
end

local function read_le64(s)
  local n = 0
  for i = 8, 1, -1 do n = n * 256 + s:byte(i) end
  return n
end

---------------------------------------------------------------------------------------------
-- Staging: each kept file of the model folder is opened once (open_kept), confined to the
-- folder, and everything after goes through that descriptor: its size (fstat), what planning
-- reads (the safetensors header, a JSON or text file to clean), the hard link (linkat of
-- /proc/self/fd/N) or the copy. The folder may be one a sandbox can write (an agent's model in
-- its workspace, hidden into a second sandbox): a file checked by path and then linked or copied
-- by path could meanwhile have become a link to a host file, or a directory on the way a link to
-- a host folder, and the host would have staged that file into the second sandbox.

-- (C, the STAGE_E* codes, errstr, fd_read and link_roots: "Reading a model folder" above)
-- The most a JSON or text file of a hidden model may hold to be read for cleaning: the largest
-- the loaders read (tokenizer.json, engine/tokenizer/tokenizer.h SEER_TOKENIZER_MAX_FILE).
local STAGE_MAX_TEXT = 256 * 1048576

-- The whole of a kept text file (its size as checked), bounded.
local function read_kept(file, shown)
  if file.size > STAGE_MAX_TEXT then
    error(("the hidden model's %s holds %d bytes, more than the %d MiB seer reads of a model's JSON or text file; "
      .. "remove the file or do not hide the model"):format(shown, file.size, STAGE_MAX_TEXT / 1048576), 0)
  end
  local text, why = fd_read(file.fd, file.size, 0)
  if not text then error(("cannot read the hidden model's %s: %s"):format(shown, why), 0) end
  return text
end

-- Copies the planned file p (open at p.fd) into the new file dst: a reflink where the file system
-- can, else the kernel's copy (copy_file_range), with a progress line on a terminal; only when
-- no hard link is possible or a file must be changed. p.header (st_patch): the cleaned header
-- over the old one, or, when it is longer, the new header and then the data after the old one.
-- As many bytes as were checked (p.size): a file that shrank meanwhile is an error.
local function shrank(p)
  error(("the hidden model's %s shrank while it was staged (it held %d bytes when it was checked); "
    .. "nothing may write the model folder while a sandbox starts with it"):format(p.name, p.size), 0)
end

local function copy_file(p, dst)
  local out = C.seer_stage_create(dst)
  if out < 0 then error(("cannot copy a hidden model's file for the sandbox: %s: %s"):format(dst, errstr(out)), 0) end
  local ok, err = pcall(function()
    local from, to, n = 0, 0, p.size
    if p.header and #p.header > p.old_n then
      local head = le64(#p.header) .. p.header
      local rc = tonumber(C.seer_stage_pwrite(out, head, #head, 0))
      if rc < 0 then error(("cannot copy a hidden model's file for the sandbox: %s: %s"):format(dst, errstr(rc)), 0) end
      from, to, n = 8 + p.old_n, #head, p.size - 8 - p.old_n
    else
      local rc = C.seer_stage_clone(out, p.fd, p.size)
      if rc == 0 then n = 0 elseif rc == STAGE_ESHORT then shrank(p) end
    end
    local tty = C.isatty(2) == 1
    local t0, shown, done = process.now_ms(), false, 0
    while done < n do
      local want = math.min(n - done, 64 * 1048576)
      local rc = tonumber(C.seer_stage_copy(p.fd, from + done, out, to + done, want))
      if rc == STAGE_ESHORT then
        shrank(p)
      elseif rc < 0 then
        error(("cannot copy a hidden model's file for the sandbox: %s"):format(errstr(rc)), 0)
      end
      done = done + rc
      if tty and p.size > 64 * 1048576 and process.now_ms() - t0 > 1000 then
        io.stderr:write(("\rseer: copying a hidden model's file for the sandbox (no hard link possible): %d / %d MiB")
          :format(math.floor(done / 1048576), math.floor(n / 1048576)))
        shown = true
      end
    end
    if shown then io.stderr:write("\n") end
    if p.header and #p.header <= p.old_n then
      local head = p.header .. string.rep(" ", p.old_n - #p.header)
      local rc = tonumber(C.seer_stage_pwrite(out, head, #head, 8))
      if rc < 0 then error(("cannot copy a hidden model's file for the sandbox: %s: %s"):format(dst, errstr(rc)), 0) end
    end
  end)
  local rc = C.seer_stage_close(out)
  if not ok then error(err, 0) end
  if rc ~= 0 then error(("cannot copy a hidden model's file for the sandbox: %s: %s"):format(dst, errstr(rc)), 0) end
end

-- The header of a safetensors file open at fd: its length and text.
local function st_header(fd, size)
  if size < 8 then return nil end
  local b = fd_read(fd, 8, 0)
  if not b or #b < 8 then return nil end
  local n = read_le64(b)
  if n > 100 * 1048576 or 8 + n > size then return nil end
  local h = fd_read(fd, n, 8)
  if not h or #h ~= n then return nil end
  return n, h
end

-- What becomes of one kept file of a hidden model (`file`: open_kept, its descriptor, size and
-- real path; everything is read through the descriptor): linked as it is, written cleaned, or
-- copied with a cleaned safetensors header; nil when it is left out (a .safetensors file that
-- is not one). Raises when the file cannot be served without showing the name.
local function plan_hidden_file(name, file, frags)
  local p = { name = clean_text(name, frags), fd = file.fd, real = file.real, size = file.size, op = "link" }
  if name:match("%.safetensors$") then
    local n, h = st_header(file.fd, file.size)
    local okh, doc = false, nil
    if n then okh, doc = pcall(json.decode, h, { max_values = json_limit(name) }) end
    if not okh and tostring(doc):find("more than max_values", 1, true) then
      error(("the hidden model's %s: its safetensors header: %s"):format(p.name, tostring(doc)), 0)
    end
    if not okh or type(doc) ~= "table" then return nil end -- not a safetensors file: left out
    -- bytes that are text: a small U8/I8 tensor can spell a name
    for k, t in pairs(doc) do
      if k ~= "__metadata__" and type(t) == "table" and (t.dtype == "U8" or t.dtype == "I8" or t.dtype == "BOOL")
         and type(t.data_offsets) == "table" and tonumber(t.data_offsets[1]) and tonumber(t.data_offsets[2]) then
        local a, b = tonumber(t.data_offsets[1]), tonumber(t.data_offsets[2])
        if a >= 0 and b > a and b - a <= 1048576 then
          local bytes = fd_read(file.fd, b - a, 8 + n + a)
          if bytes and sb.find_fragment(bytes, frags) then
            error(("the bytes of a tensor in the hidden model's %s spell the model's name; remove the tensor or do not hide the model")
              :format(p.name), 0)
          end
        end
      end
    end
    -- doc is the header decoded above, not yet changed: cleaned from it, with no second tree
    if sb.find_fragment(h, frags, 1, true) then
      for k in pairs(doc) do
        if k ~= "__metadata__" and sb.find_fragment(k, frags) then
          error(("a tensor name in the hidden model's %s names the model, and tensor names cannot change without "
            .. "breaking the model; rename the tensor or do not hide the model"):format(p.name), 0)
        end
      end
      local meta = type(doc.__metadata__) == "table" and doc.__metadata__ or {}
      local kept = json.object({})
      for k, v in pairs(meta) do
        if type(v) == "string" and not NAME_KEYS[k] and not sb.find_fragment(k, frags) and not sb.find_fragment(v, frags) then
          kept[k] = v
        end
      end
      doc.__metadata__ = kept
      local text = json.encode(doc)
      if sb.find_fragment(text, frags, 1, true) then
        error(("the hidden model's %s: its safetensors header still names the model after cleaning; do not hide the model"):format(p.name), 0)
      end
      p.op, p.header, p.old_n = "st_patch", text, n
    end
  elseif name:match("%.json$") then
    local raw = read_kept(file, p.name)
    local named = false
    for k in pairs(NAME_KEYS) do
      if raw:find('"' .. k .. '"', 1, true) then named = true break end
    end
    local holds = sb.find_fragment(raw, frags, 1, true)
    if named or holds then
      local ok, doc = pcall(json.decode, raw, { max_values = json_limit(name) })
      if not ok and tostring(doc):find("more than max_values", 1, true) then
        error(("the hidden model's %s: %s"):format(p.name, tostring(doc)), 0)
      end
      if ok and type(doc) == "table" then
        p.op, p.text = "write", json.encode(clean_json(doc, frags, name), { indent = 2 })
      elseif holds then
        error(("the hidden model's %s names the model but is not JSON seer can read to clean it; fix the file or do not hide the model")
          :format(p.name), 0)
      end
    end
  else
    -- text: chat_template.jinja, merges.txt (whose lines are tokens, except the # comments)
    local raw = read_kept(file, p.name)
    if sb.find_fragment(raw, frags) then
      if name == "merges.txt" then
        p.text = raw:gsub("([^\n]*)", function(line)
          if line:sub(1, 1) == "#" then return clean_text(line, frags) end
          return line
        end)
      else
        p.text = clean_text(raw, frags)
      end
      p.op = "write"
    end
  end
  return p
end

-- The model folder `host`, opened (O_PATH) once: its descriptor, which every file of it is
-- opened through and listed from, and its canonical path as the kernel resolved it.
local function open_model_dir(host)
  local fd, real = open_folder(host)
  if not fd then error(("cannot open the hidden model's folder %s: %s"):format(host, real), 0) end
  return fd, real
end

-- The file `name` of the model folder open at dirfd, opened for reading once: {fd, size, real}
-- (the descriptor, its size and canonical path when opened), or nil for anything that is not a
-- regular file (a directory, fifo, socket, device, a link to nothing). A link is followed, and
-- then what the kernel reached must lie inside the model folder (`roots`: link_roots); one that
-- leads out is an error: the files of a model folder are not trusted, and a hidden model's
-- files are copied or hard-linked into the sandbox's mount (tokenizer.json -> ~/.ssh/id_rsa
-- would hand that file to the sandbox). The check is on the file the kernel opened, and the
-- descriptor is what gets linked or copied: a swap after it changes nothing.
local function open_kept(dirfd, host, name, roots)
  local size, real = ffi.new("long long[1]"), ffi.new("char[?]", 4096)
  local fd = C.seer_stage_open_file(dirfd, name, roots and roots[1], roots and roots[2], size, real, 4096)
  if fd == -EMFILE then -- the soft open-file limit raised as far as the hard one allows, once
    sb.raise_nofile(1048576)
    fd = C.seer_stage_open_file(dirfd, name, roots and roots[1], roots and roots[2], size, real, 4096)
  end
  if fd >= 0 then return { fd = fd, size = tonumber(size[0]), real = ffi.string(real) } end
  if fd == STAGE_EOUTSIDE then
    error(("%s/%s is a symbolic link that leads out of its model folder; the files of a model folder are not "
      .. "trusted, so seer does not stage it into a sandbox (copy the file into the folder, or set "
      .. "SEER_MODEL_FOLLOW_LINKS=1 for a folder you assembled yourself)"):format(host, name), 0)
  end
  if fd == STAGE_ENOTREG or fd == -ENOENT or fd == -ENOTDIR or fd == -ELOOP then return nil end
  if fd == -EMFILE or fd == -ENFILE then
    error(("cannot open %s/%s: %s; a hidden model's files are held open while they are staged, and this folder "
      .. "has more than the open-files limit allows (raise it: ulimit -n)"):format(host, name, errstr(fd)), 0)
  end
  error(("cannot open the hidden model's file %s/%s: %s"):format(host, name, errstr(fd)), 0)
end

local function write_file(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- Where a hidden model's staging directory may go, best first: beside the sandbox's state
-- (removed with it), seer's cache, the hub cache, the root of the file system that holds the
-- files. A hard link needs the same file system; a place whose path holds a fragment is never
-- used.
function Sandbox:_stage_bases(src)
  local bases = { self.state_dir .. "/hidden" }
  local cache = os.getenv("SEER_CACHE_DIR")
  if not cache or cache == "" then
    local x = os.getenv("XDG_CACHE_HOME")
    cache = (x and x ~= "" and x .. "/seer") or ((os.getenv("HOME") or "/tmp") .. "/.cache/seer")
  end
  bases[#bases + 1] = cache .. "/hidden-stage"
  local okh, hubdir = pcall(function() return require("seer.hub").cache_dir() end)
  if okh and hubdir then bases[#bases + 1] = (core.realpath(hubdir) or hubdir) .. "/.seer-hidden-stage" end
  -- the mount point of src's file system: the longest mount point that is a prefix of it
  local best = nil
  local f = io.open("/proc/self/mountinfo", "rb")
  if f and src then
    for line in f:lines() do
      local mp = line:match("^%S+ %S+ %S+ %S+ (%S+)")
      if mp then
        mp = mp:gsub("\\(%d%d%d)", function(o) return string.char(tonumber(o, 8)) end)
        if (src:sub(1, #mp + 1) == mp .. "/" or mp == "/") and (not best or #mp > #best) then best = mp end
      end
    end
  end
  if f then f:close() end
  if best then bases[#bases + 1] = (best == "/" and "" or best) .. "/.seer-hidden-stage-" .. ffi.C.getuid() end
  return bases
end

-- Removes staging directories whose sandbox has gone: its state directory was removed, or its
-- keeper is not running (both killed with -9). Only after a minute, so a sandbox that another
-- process is starting right now (owner file written, keeper not yet) keeps its files.
local function sweep_stage(base)
  local now = os.time()
  for _, e in ipairs(sb.listdir(base) or {}) do
    local id = e.name:match("^(.+)%.owner$")
    if id and e.type == "file" and e.mtime and now - e.mtime > 60 then
      local f = io.open(base .. "/" .. e.name, "rb")
      local state = f and f:read("*l")
      if f then f:close() end
      local okr, sroot = pcall(safe_fs.root, state, "a sandbox's state folder")
      local info = state and okr and read_json(sroot, "sandbox.json")
      local running = info and info.keeper_pid and sb.alive(info.keeper_pid) and sb.start_time(info.keeper_pid) == info.keeper_start
      if state and not running then run_host({ "rm", "-rf", "--", base .. "/" .. id, base .. "/" .. e.name }) end
    elseif e.type == "dir" and not exists(base .. "/" .. e.name .. ".owner") and e.mtime and now - e.mtime > 3600 then
      run_host({ "rm", "-rf", "--", base .. "/" .. e.name })
    end
  end
end

-- A file that lies in a sandbox's folder (M.state_root(): every workspace) can be rewritten by
-- that sandbox at any time: it is copied, not hard-linked (the link would be the same inode,
-- a live channel into the second sandbox for whatever the first writes, the id included), and
-- the copy, which nothing else can write, is checked again as the original was: a copy that
-- would now need cleaning, or is refused, was changed between the check and the copy.
local function in_sandbox_folder(real)
  local sroot = core.realpath(M.state_root())
  return sroot ~= nil and real ~= nil and (real == sroot or real:sub(1, #sroot + 1) == sroot .. "/")
end

local function verify_staged(dir, p, frags)
  local dirfd, why = open_folder(dir)
  if not dirfd then error(("cannot check the staged copy of the hidden model's %s: %s"):format(p.name, why), 0) end
  local file, code = open_in(dirfd, p.name, nil)
  C.seer_stage_close(dirfd)
  if not file then error(("cannot check the staged copy of the hidden model's %s: %s"):format(p.name, errstr(code)), 0) end
  local ok, q = pcall(plan_hidden_file, p.name, file, frags)
  C.seer_stage_close(file.fd)
  if not ok or not q or q.op ~= "link" then
    error(("the hidden model's %s changed while it was staged (it lies in a sandbox's folder, %s, which that sandbox can "
      .. "write): stop what writes it, or copy the model out of the sandbox's folder first"):format(p.name, M.state_root()), 0)
  end
end

-- Links, copies and writes the planned files (each p.fd open) into a new staging directory.
local function stage_plan(self, plan, left_out, frags)
  -- the staging directory goes where the largest file to link can be hard-linked (or, when
  -- every big file is a changed copy, where a copy can be a reflink)
  local probe
  for _, p in ipairs(plan) do
    if p.op ~= "write" and (not probe or (p.op == "link") ~= (probe.op == "link") and p.op == "link"
                            or (p.op == probe.op and p.size > probe.size)) then
      probe = p
    end
  end
  local dir
  for _, base in ipairs(self:_stage_bases(probe and probe.real)) do
    local in_state = base:sub(1, #self.state_dir + 1) == self.state_dir .. "/"
    if not in_state then sweep_stage(base) end
    if not sb.find_fragment(base, frags) then
      local okb = pcall(process.mkdir_p, base)
      -- the mount table inside shows the staging directory where its path leads, not as written
      if okb and sb.find_fragment(core.realpath(base) or base, frags) then okb = false end
      if okb then
        local okd, d = pcall(process.mkdtemp, base .. "/")
        if okd then
          local linked = not probe or C.seer_stage_link(probe.fd, d .. "/.probe") == 0
          os.remove(d .. "/.probe")
          if linked then
            dir = d
            if not in_state then
              write_file(d .. ".owner", self.state_dir .. "\n")
              self.stage_dirs[#self.stage_dirs + 1] = d
              self.stage_dirs[#self.stage_dirs + 1] = d .. ".owner"
            end
            break
          end
          run_host({ "rm", "-rf", "--", d })
        end
      end
    end
  end
  if not dir then
    -- no hard link anywhere: copies, beside the sandbox's state
    process.mkdir_p(self.state_dir .. "/hidden")
    dir = process.mkdtemp(self.state_dir .. "/hidden/")
  end
  local report = { linked = 0, copied = 0, cleaned = 0, left_out = left_out, dir = dir }
  for _, p in ipairs(plan) do
    local dst = dir .. "/" .. p.name
    if p.op == "write" then
      write_file(dst, p.text)
      report.cleaned = report.cleaned + 1
    elseif p.op == "link" and not p.from_sandbox then
      -- the inode that was checked (linkat of its descriptor), else a copy read from it
      if C.seer_stage_link(p.fd, dst) ~= 0 then
        copy_file(p, dst)
        report.copied = report.copied + 1
      else
        report.linked = report.linked + 1
      end
    elseif p.op == "link" then
      -- in a sandbox's folder: a copy (a hard link would be the inode that sandbox can rewrite)
      copy_file(p, dst)
      report.copied = report.copied + 1
    else -- st_patch: a copy whose header is the cleaned one
      copy_file(p, dst)
      report.cleaned = report.cleaned + 1
    end
    if p.from_sandbox then verify_staged(dir, p, frags) end
  end
  return dir, report
end

---Stages one hidden model (a folder on this machine: a local folder or a cache snapshot) and
---returns the directory to mount. See the comment above, and "Staging" above copy_file: the
---folder and each kept file are opened once and staged through those descriptors.
---@param host string
---@param frags string[]
---@return string dir, table report {linked, copied, cleaned, left_out}
function Sandbox:_stage_hidden(host, frags)
  local held = {} -- every descriptor opened here, closed however this ends
  local ok, dir, report = pcall(function()
    local dirfd, real = open_model_dir(host)
    held[#held + 1] = dirfd
    local plan, left_out, roots = {}, 0, link_roots(real)
    -- listed through the descriptor: the folder that was opened, whatever its path leads to now
    for _, e in ipairs(list_model("/proc/self/fd/" .. dirfd, host)) do
      local file = nil
      if e.type ~= "dir" and hidden_keeps(e.name) then file = open_kept(dirfd, host, e.name, roots) end
      if file then held[#held + 1] = file.fd end
      local planned = file and plan_hidden_file(e.name, file, frags)
      if planned then
        planned.from_sandbox = planned.op ~= "write" and in_sandbox_folder(file.real)
        plan[#plan + 1] = planned
      else
        left_out = left_out + 1
        if file then -- left out: not held to the end
          C.seer_stage_close(file.fd)
          held[#held] = nil
        end
      end
    end
    return stage_plan(self, plan, left_out, frags)
  end)
  for _, fd in ipairs(held) do C.seer_stage_close(fd) end
  if not ok then error(dir, 0) end
  return dir, report
end

-- Removes the staging directories outside the state directory (teardown; the keeper removes
-- them when the owner dies).
function Sandbox:_unstage_hidden()
  if self.stage_dirs and #self.stage_dirs > 0 then
    local argv = { "rm", "-rf", "--" }
    for _, d in ipairs(self.stage_dirs) do argv[#argv + 1] = d end
    run_host(argv)
    self.stage_dirs = {}
  end
end

-- Whether this bwrap mounts from a descriptor (`--ro-bind-fd`), asked once per binary
-- (SEER_BWRAP_BIND_FD=0 takes the path fallback whatever bwrap can do).
local bind_fd_support = {}
local function bwrap_binds_fds(bwrap)
  if os.getenv("SEER_BWRAP_BIND_FD") == "0" then return false end
  bwrap = bwrap or find_on_path("bwrap")
  if not bwrap then return false end
  if bind_fd_support[bwrap] == nil then
    local code, out = run_host({ bwrap, "--help" }, { timeout_ms = 10000 })
    bind_fd_support[bwrap] = code == 0 and out:find("--ro-bind-fd", 1, true) ~= nil
  end
  return bind_fd_support[bwrap]
end

-- The descriptors bwrap will mount from (handed to the keeper, which gives them to bwrap as fds
-- 4, 5, ...), made once per start: a list, or nil where bwrap cannot mount from a descriptor
-- (said once; everything is then mounted by path).
function Sandbox:_pass_list()
  if self.pass_fds == nil then
    self.pass_fds = bwrap_binds_fds(self.bwrap) and {} or false
    if not self.pass_fds then
      say_once((os.getenv("SEER_BWRAP_BIND_FD") == "0" and "SEER_BWRAP_BIND_FD=0"
          or "this bubblewrap has no --ro-bind-fd (0.10 and later, or Debian 12's 0.8.0-2+deb12u1, have it)")
        .. ": visible models and local_files / local_dirs are mounted by path, so one rewritten while a sandbox starts "
        .. "is not covered")
    end
  end
  return self.pass_fds or nil
end

-- SandboxConfig.local_files and local_dirs, each opened once (its links followed: the path as
-- configured) before the hidden-model checks look at what it is, and mounted from that
-- descriptor: {real = canonical path, bind = bwrap's three arguments} per entry, by field.
function Sandbox:_open_local_mounts()
  if self.local_mounts then return self.local_mounts end
  local pass = self:_pass_list()
  local lm = { local_files = {}, local_dirs = {} }
  self.local_mounts = lm
  for _, field in ipairs({ "local_files", "local_dirs" }) do
    local dir = field == "local_dirs"
    for i, p in ipairs(self.config[field]) do
      local real = ffi.new("char[?]", 4096)
      local fd = C.seer_stage_open_path(p[1], dir and 1 or 0, real, 4096)
      if fd < 0 then
        error(("SandboxConfig.%s[%d]: %s is not a %s on this machine"):format(field, i, p[1], dir and "directory" or "file"), 0)
      end
      local e = { real = ffi.string(real) }
      if pass then
        pass[#pass + 1] = fd
        e.bind = { "--ro-bind-fd", tostring(3 + #pass), p[2] }
      else
        C.seer_stage_close(fd)
        e.bind = { "--ro-bind", e.real, p[2] }
      end
      lm[field][i] = e
    end
  end
  return lm
end

-- Closes the descriptors mount_snapshot held for the keeper (it has its own copies once
-- started; on a failed start nothing needs them).
function Sandbox:_close_passed()
  for _, fd in ipairs(self.pass_fds or {}) do C.seer_stage_close(fd) end
  self.pass_fds, self.local_mounts = nil, nil
end

-- The most folders deep mount_snapshot goes into a snapshot (a Hugging Face repository's files
-- are a few folders deep at most).
local SNAPSHOT_MAX_DEPTH = 32

-- The bwrap arguments that mount a visible model's Hugging Face cache snapshot `host` at
-- `mount`, each file at its own name: the cache's links into ../../blobs would not resolve
-- inside, and the cache layout would show the id. What is mounted is the file each link leads to
-- on the host, so each is opened as the loader would open it ("Reading a model folder"): a link
-- must stay inside the repository folder models--org--name (a snapshot file linked to a host
-- file, ~/.ssh/id_rsa, would put that file in the sandbox; one linked to a host folder, that
-- folder); what is not a regular file (a FIFO, a device, a link to a folder) is left out; a
-- sub-folder is walked only when it is a folder itself, not a link to one. Each file is mounted
-- from the descriptor it was checked through (`--ro-bind-fd`; the descriptor joins `pass`, the
-- list handed to the keeper, which gives them to bwrap as fds 4, 5, ...): bwrap compares what
-- it mounted with the descriptor and stops on a difference, so a cache rewritten between the
-- check and the mount mounts nothing else. A bwrap without `--ro-bind-fd` (before 0.10, or
-- 0.8 without Debian 12's backport) gets the file's canonical path as the kernel opened it
-- (`pass` nil), and a rewrite in that window is not covered (said once).
local function mount_snapshot(binds, host, mount, pass)
  local held = {}
  local ok, err = pcall(function()
    local top, real = open_folder(host)
    if not top then error(("cannot open the model folder %s: %s"):format(host, real), 0) end
    held[#held + 1] = top
    local roots = link_roots(real)
    local function walk(dirfd, shown, rel, depth)
      if depth > SNAPSHOT_MAX_DEPTH then
        error(("%s is more than %d folders deep; seer does not mount a model folder nested that deep"):format(shown, SNAPSHOT_MAX_DEPTH), 0)
      end
      for _, e in ipairs(list_model("/proc/self/fd/" .. dirfd, shown)) do
        if e.type == "dir" then
          local sub = C.seer_stage_open_subdir(dirfd, e.name)
          if sub >= 0 then
            held[#held + 1] = sub
            walk(sub, shown .. "/" .. e.name, rel .. e.name .. "/", depth + 1)
            C.seer_stage_close(sub)
            held[#held] = nil
          end
        else
          local f, code = open_in(dirfd, e.name, roots)
          if not f and code == -EMFILE and pass and sb.raise_nofile(4 * #pass + 1024) then
            f, code = open_in(dirfd, e.name, roots) -- the soft limit was raised towards the hard one
          end
          if f and pass then
            pass[#pass + 1] = f.fd -- closed by Sandbox:_close_passed once the keeper has its copies
            binds[#binds + 1] = { "--ro-bind-fd", tostring(3 + #pass), mount .. "/" .. rel .. e.name }
          elseif f then
            C.seer_stage_close(f.fd)
            binds[#binds + 1] = { "--ro-bind", f.real, mount .. "/" .. rel .. e.name }
          elseif code == STAGE_EOUTSIDE then
            error(("%s/%s is a symbolic link that leads out of its model folder; the files of a model folder are not "
              .. "trusted, so seer does not mount it into a sandbox (copy the file into the folder, or set "
              .. "SEER_MODEL_FOLLOW_LINKS=1 for a folder you assembled yourself)"):format(shown, e.name), 0)
          elseif code == -EMFILE or code == -ENFILE then
            error(("cannot open the model's file %s/%s to mount it into the sandbox: %s (each file of a cached model is held "
              .. "open until the sandbox has mounted it; %d are open for this sandbox: raise the open-file limit, ulimit -n)")
              :format(shown, e.name, errstr(code), pass and #pass or 0), 0)
          elseif code ~= STAGE_ENOTREG and code ~= -ENOENT and code ~= -ENOTDIR and code ~= -ELOOP then
            error(("cannot open the model's file %s/%s to mount it into the sandbox: %s"):format(shown, e.name, errstr(code)), 0)
          end
        end
      end
    end
    walk(top, host, "", 0)
  end)
  for _, fd in ipairs(held) do C.seer_stage_close(fd) end
  if not ok then error(err, 0) end
end

-- Models: where each is on the host, and the bwrap arguments that mount it read-only. A hidden
-- model (and a hidden adapter's base) is staged first (Sandbox:_stage_hidden) and mounted as one
-- directory under an opaque name.
function Sandbox:_prepare_models(binds, env)
  local hub = require "seer.hub"
  -- local_files and local_dirs first: what the hidden-model checks below see is what is mounted
  self:_open_local_mounts()
  local used = {}
  local function mount_name(name, hidden)
    if hidden then return "m-" .. random_hex(10) end
    local base = name:match("^[%w._-]+/[%w._-]+$") and name:gsub("/", "--") or sanitize(name:match("([^/]+)/*$") or name)
    local n, i = base, 1
    while used[n] do i = i + 1; n = base .. "-" .. i end
    used[n] = true
    return n
  end
  local function resolve(name, revision)
    local real = core.realpath(name)
    if real and is_dir(real) then return real, "dir" end
    if name:match("^[%./~]") then
      error(("SandboxConfig.models: %s is not a directory (a local model path must exist; a hub id looks like \"org/name\")"):format(name), 0)
    end
    local snap = hub.cached(name, { revision = revision })
    if not snap then snap = hub.download(name, { revision = revision }) end
    return snap, "hub"
  end
  local resolved = {}
  local function where(name, revision)
    local key = name .. "\0" .. (revision or "")
    if not resolved[key] then resolved[key] = { resolve(name, revision) } end
    return resolved[key][1], resolved[key][2]
  end

  -- What could name the hidden models, from all of them at once (an adapter's files may name
  -- its base and the other way round).
  local hidden = {}
  local function note_hidden(name, revision)
    local host = where(name, revision)
    local files = {}
    for _, e in ipairs(list_model(host, host)) do
      files[#files + 1] = { name = e.name, real = core.realpath(host .. "/" .. e.name) or (host .. "/" .. e.name) }
    end
    hidden[#hidden + 1] = { name = name, revision = revision, host = host, files = files }
  end
  for _, m in ipairs(self.config.models) do
    if m.hidden then
      note_hidden(m.name, m.revision)
      if m.is_peft then note_hidden(m.base_model) end
    end
  end
  self.stage_dirs = {}
  local frags = {}
  if #hidden > 0 then
    local okh, hubdir = pcall(hub.cache_dir)
    local generic = { M.state_root(), self.state_dir, self.lua_dir, self.seer_binary, os.getenv("HOME") or "",
                      okh and hubdir or "", M.snapshot_root() }
    frags = M.hidden_fragments(hidden, generic)
    self.hidden_frags = frags
    -- paths the sandbox sees (its state directory, in /proc/self/mountinfo and
    -- SEER_SANDBOX_ID; seer's own folders; mounted files) must not name a hidden model
    local visible = {
      { self.state_dir, "the sandbox's directory", "choose another sandbox name (start{name = ...}) or SEER_SANDBOX_DIR" },
      -- where it leads: the mount table inside shows a mount's source as the kernel resolved it
      { core.realpath(self.state_dir), "the sandbox's directory (where its path leads)", "set SEER_SANDBOX_DIR elsewhere" },
      { self.lua_dir, "seer's Lua folder", "install seer elsewhere" },
      { self.seer_binary, "the seer binary", "install seer elsewhere" },
    }
    local lm = self:_open_local_mounts()
    for _, field in ipairs({ "local_files", "local_dirs" }) do
      for i, p in ipairs(self.config[field]) do
        visible[#visible + 1] = { p[1], ("SandboxConfig.%s[%d]"):format(field, i), "mount it from another path" }
        visible[#visible + 1] = { lm[field][i].real, ("SandboxConfig.%s[%d] (where its path leads)"):format(field, i),
                                  "mount it from another path" }
        visible[#visible + 1] = { p[2], ("SandboxConfig.%s[%d]'s path in the sandbox"):format(field, i), "choose another path" }
      end
    end
    for k, v in pairs(env) do
      visible[#visible + 1] = { k .. "=" .. tostring(v), "the environment variable " .. k, "remove it from SandboxConfig.env" }
    end
    for _, v in ipairs(visible) do
      if v[1] and sb.find_fragment(v[1], frags) then
        error(("%s holds part of a hidden model's id, and code in the sandbox can read it; %s"):format(v[2], v[3]), 0)
      end
    end
    -- a mounted folder that holds a hidden model's files would show them under their names,
    -- a mounted file that is one of them its uncleaned text
    local mounted = {}
    for i, e in ipairs(lm.local_dirs) do mounted[#mounted + 1] = { e.real, ("SandboxConfig.local_dirs[%d]"):format(i) } end
    for i, e in ipairs(lm.local_files) do mounted[#mounted + 1] = { e.real, ("SandboxConfig.local_files[%d]"):format(i) } end
    for _, mp in ipairs(mounted) do
      -- a folder another sandbox can write (its workspace) is a live channel into this one, past
      -- every check made here: whatever that sandbox writes there later (the id) shows up inside
      if in_sandbox_folder(mp[1]) then
        error(("%s lies in a sandbox's folder (%s), which that sandbox can write while this one runs with a hidden "
          .. "model: copy it out of the sandbox's folder first"):format(mp[2], M.state_root()), 0)
      end
      local real = mp[1]
      if real then
        for _, m in ipairs(hidden) do
          local paths = { core.realpath(m.host) or m.host }
          for _, f in ipairs(m.files) do paths[#paths + 1] = f.real end
          for _, hp in ipairs(paths) do
            if hp == real or hp:sub(1, #real + 1) == real .. "/" or real == "/" then
              error(("%s is or holds a hidden model's files, which code in the sandbox could read there as they are; "
                .. "mount something that does not hold them"):format(mp[2]), 0)
            end
          end
        end
      end
    end
  end

  local hidden_mounts, first_bind = {}, #binds + 1
  local function add(name, revision, hidden_model)
    local host, kind = where(name, revision)
    local mount = "/models/" .. mount_name(name, hidden_model)
    if hidden_model then
      binds[#binds + 1] = { "--ro-bind", (self:_stage_hidden(host, frags)), mount }
      hidden_mounts[mount] = true
      return host, mount
    end
    -- visible models are mounted from descriptors where bwrap can (mount_snapshot)
    local pass = self:_pass_list()
    if kind == "dir" and pass then
      -- the folder as it was when opened, once: a path component swapped for a link afterwards
      -- does not change what is mounted
      local fd, err = open_folder(host)
      if not fd then error(("cannot open the model folder %s to mount it into the sandbox: %s"):format(host, err), 0) end
      pass[#pass + 1] = fd
      binds[#binds + 1] = { "--ro-bind-fd", tostring(3 + #pass), mount }
    elseif kind == "dir" then
      binds[#binds + 1] = { "--ro-bind", host, mount }
    else
      mount_snapshot(binds, host, mount, pass)
    end
    return host, mount
  end
  local handles = {}
  for _, m in ipairs(self.config.models) do
    local h = { name = m.name, var_name = m.var_name, hidden = m.hidden, is_peft = m.is_peft,
                base_model = m.base_model, revision = m.revision }
    h.host_path, h.path = add(m.name, m.revision, m.hidden)
    if m.is_peft then
      -- A PEFT adapter brings its base model.
      h.base_host_path, h.base_path = add(m.base_model, nil, m.hidden)
    end
    if not m.hidden then
      -- MODEL_<ID>_PATH as the reference names it; a local directory goes by its base name.
      local function var_of(name)
        if name:match("^[%./~]") or is_dir(name) then
          return "MODEL_" .. (name:match("([^/]+)/*$") or name):upper():gsub("[^%w]", "_") .. "_PATH"
        end
        return require("seer.environment").model_env_name(name)
      end
      h.env_var = var_of(m.name)
      env[h.env_var] = h.path
      if m.is_peft then env[var_of(m.base_model)] = h.base_path end
    end
    handles[#handles + 1] = h
  end
  self.model_handles = handles
  if #hidden > 0 then
    -- a visible model beside a hidden one must not name it either: its mount's name, where it
    -- is mounted from (the sandbox's /proc/self/mountinfo shows the source as the kernel
    -- resolved it) and its MODEL_*_PATH variable (hidden "acme/secret" beside visible
    -- "acme/public" showed "acme" in all three)
    local pass = self.pass_fds or {}
    for i = first_bind, #binds do
      local b = binds[i]
      local top = b[3]:match("^(/models/[^/]+)") or b[3]
      if not hidden_mounts[top] then
        local src = b[1] == "--ro-bind-fd" and pass[tonumber(b[2]) - 3] and core.realpath("/proc/self/fd/" .. pass[tonumber(b[2]) - 3])
          or core.realpath(b[2]) or b[2]
        if in_sandbox_folder(src) then
          error(("the visible model mounted at %s (from %s) lies in a sandbox's folder, which that sandbox can write while "
            .. "this one runs with a hidden model (a live channel past the hidden-model checks): copy it out of the "
            .. "sandbox's folder first"):format(top, src), 0)
        end
        if sb.find_fragment(b[3], frags) or sb.find_fragment(src, frags) then
          error(("the visible model mounted at %s (from %s) holds part of a hidden model's id in its name or path, and code in "
            .. "the sandbox can read both (the mount, and its source in /proc/self/mountinfo); hide that model too, or "
            .. "copy it to a path that names nothing of the hidden one"):format(top, src), 0)
        end
      end
    end
    for _, h in ipairs(handles) do
      if not h.hidden and h.env_var and sb.find_fragment(h.env_var, frags) then
        error(("the visible model %s's variable %s holds part of a hidden model's id, and code in the sandbox can read it; "
          .. "hide that model too, or use a copy of it in a folder whose name holds nothing of the hidden one"):format(h.path, h.env_var), 0)
      end
    end
  end
end

local function repo_url(url)
  if url:match("^[%w._-]+/[%w._-]+$") and not exists(url) then return "https://github.com/" .. url .. ".git" end
  return url
end

function Sandbox:_prepare_repos()
  local handles = {}
  for i, r in ipairs(self.config.repos) do
    if r.dockerfile then
      error(("SandboxConfig.repos[%d] (%s): dockerfile builds need a container backend; the local backend shares "
        .. "this machine's /usr, so install what the Dockerfile installs on this machine and remove dockerfile"):format(i, r.url), 0)
    end
    local url = repo_url(r.url)
    local name = sanitize((url:match("([^/:]+)/*$") or ("repo" .. i)):gsub("%.git$", ""))
    local dest = self.workspace_dir .. "/" .. name
    -- The workspace is new and nothing has run in the sandbox yet (a snapshot is restored
    -- later, inside it), so nothing can be planted on the way; two repos of one name fail here.
    if roots(self).workspace:exists(name) then
      error(("SandboxConfig.repos[%d]: /workspace/%s exists already (two repos with the name %s?)"):format(i, name, name), 0)
    end
    local code, _, err = run_host({ "git", "clone", "--quiet", "--depth", "1", url, dest },
                                  { env = { GIT_TERMINAL_PROMPT = "0", PATH = os.getenv("PATH") or "/usr/bin:/bin",
                                            HOME = os.getenv("HOME") or "/tmp" }, timeout_ms = 600000 })
    if code ~= 0 then
      error(("SandboxConfig.repos[%d]: git clone %s failed%s:\n%s"):format(i, url,
        code and (" (exit " .. code .. ")") or "", err ~= "" and err or "(no output)"), 0)
    end
    handles[#handles + 1] = { url = r.url, name = name, path = "/workspace/" .. name, host_path = dest,
                              install = r.install }
  end
  self.repo_handles = handles
end

-- A network allow-list (SandboxConfig.network = {allow = ...}, seer.egress): the filter runs
-- on the host, as a child of this process, listening on <run>/egress.sock; its log is
-- <state>/egress.log, which the sandbox cannot reach. It dies with this process and is stopped
-- at terminate.
function Sandbox:_start_egress_filter()
  local n = self.config.network
  local code = ([[require("seer.process").die_with_parent()
require("seer.egress").filter{ socket = %q, log = %q, allow = seer.json.decode(%q), resolve = seer.json.decode(%q),
  on_ready = function() io.stdout:write("ready\n") io.stdout:flush() end }]]):format(
    self.run_dir .. "/egress.sock", self.state_dir .. "/egress.log", json.encode(n.allow),
    json.encode(n.resolve or json.object()))
  local argv = { require("seer.jupyter").seer_binary(), "-e", code }
  local line
  if self.detached then
    -- outlives this script with the sandbox, and ends with it (seer.sidecar)
    self.egress_filter, line = require("seer.sidecar").start{
      argv = argv, log = self.state_dir .. "/egress.log", keeper_pid = self.keeper_pid, keeper_start = self.keeper_start,
      ready_timeout_ms = 10000, what = "the sandbox's egress filter" }
  else
    self.egress_filter = process.spawn{ argv = argv, stdout = "pipe", stderr = self.state_dir .. "/egress.log" }
    line = self.egress_filter:read_line(10000)
  end
  if line ~= "ready" then
    error(("the sandbox's egress filter did not start (%s); its log:\n%s"):format(self.egress_filter:describe_exit(),
      tail(roots(self).state, "egress.log")), 0)
  end
end

-- The forwarder inside: a sandboxd service listening on 127.0.0.1:EGRESS_PORT of the sandbox's
-- own network namespace; start() returns once it listens.
function Sandbox:_start_egress_forward()
  local code = ([[require("seer.egress").forward{ port = %d, socket = %q,
  on_ready = function() local f = io.open(%q, "wb") f:write("ready") f:close() end }]]):format(
    EGRESS_PORT, SANDBOX_RUN .. "/egress.sock", SANDBOX_RUN .. "/egress.ready")
  self.client:request("start_service", { name = "egress", argv = json.array({ SANDBOX_SEER, "-e", code }) })
  local deadline = process.now_ms() + 10000
  while not roots(self).run:stat("egress.ready") do
    if process.now_ms() > deadline then
      error(("the sandbox's egress forwarder did not start; its log:\n%s"):format(tail(roots(self).logs, "egress.log")), 0)
    end
    process.sleep_ms(5)
  end
end

-- bubblewrap's arguments for this sandbox.
function Sandbox:_bwrap_argv(bwrap, binds)
  local c = self.config
  local a = { bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534",
              "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--hostname", "sandbox",
              -- sandboxd is pid 1 itself: bubblewrap's own init would be a process inside the
              -- sandbox without the seccomp filter, whose memory (/proc/1/mem) the code in the
              -- sandbox could write (docs/sandbox.md, "System calls").
              "--as-pid-1" }
  if c.network == "host" then a[#a + 1] = "--share-net" end
  local function add(...) for _, v in ipairs({ ... }) do a[#a + 1] = v end end
  add("--ro-bind", "/usr", "/usr")
  -- /bin, /lib, ... as they are on the host: symlinks into /usr (merged /usr) or directories.
  for _, d in ipairs({ "bin", "sbin", "lib", "lib32", "lib64", "libx32" }) do
    local p = "/" .. d
    local target = core.realpath(p)
    if target then
      if target == p then add("--ro-bind", p, p)
      elseif target:sub(1, 5) == "/usr/" then add("--symlink", target:sub(2), p) end
    end
  end
  -- Only the parts of /etc that programs need; not the host's users, keys or secrets.
  for _, e in ipairs({ "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
                       "ssl", "ca-certificates", "ca-certificates.conf", "mime.types", "protocols", "services",
                       "bash.bashrc", "profile", "inputrc", "gai.conf", "os-release", "debian_version",
                       "host.conf" }) do
    add("--ro-bind-try", "/etc/" .. e, "/etc/" .. e)
  end
  if c.network == "host" then
    add("--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf", "--ro-bind-try", "/etc/hosts", "/etc/hosts")
  end
  add("--ro-bind", self.run_dir .. "/passwd", "/etc/passwd", "--ro-bind", self.run_dir .. "/group", "/etc/group")
  add("--proc", "/proc", "--dev", "/dev")
  -- /proc files that show the host's keys (descriptions of the researcher's keyring entries)
  -- and host-wide scheduler and timer state are masked, as Docker masks them.
  local in_proc = {}
  for _, e in ipairs(sb.listdir("/proc") or {}) do in_proc[e.name] = true end
  for _, f in ipairs({ "keys", "key-users", "timer_list", "sched_debug", "latency_stats", "kcore" }) do
    if in_proc[f] then add("--ro-bind", "/dev/null", "/proc/" .. f) end
  end
  -- Host-wide kernel settings are read-only, as Docker makes them. Sysctl files check only
  -- their owner, and a sandbox started by root runs as a user mapped to the host's root: with
  -- /proc/sys writable, code inside set kernel.core_pattern to a pipe, crashed a process, and
  -- the host's kernel ran the command as root (also kernel.panic, vm.drop_caches, hostname...).
  -- The host's /proc/sys is bound (read-only, recursively): its files are global, and net.*
  -- answers for the reader's network namespace, so the sandbox reads its own values.
  for _, f in ipairs({ "sys", "sysrq-trigger", "irq", "bus", "fs" }) do
    if in_proc[f] then add("--ro-bind", "/proc/" .. f, "/proc/" .. f) end
  end
  -- Every writable in-memory file system has a size below the memory limit (their pages are
  -- charged to the sandbox's memory cgroup), so filling one gives the writer ENOSPC instead of
  -- killing the sandbox: /tmp and /dev/shm get their own tmpfs (limits.tmp, limits.shm), and
  -- /dev itself is made read-only below once its nodes are in place.
  local lim = self.limits or self:_limits()
  add("--size", tostring(lim.shm), "--tmpfs", "/dev/shm")
  add("--size", tostring(lim.tmp), "--tmpfs", "/tmp")
  add("--bind", self.workspace_dir, "/workspace")
  add("--bind", self.run_dir, SANDBOX_RUN)
  -- The run directory also at its host path, so files that name sockets (RPC connection
  -- files, written by one side and read by the other) hold paths valid on both sides.
  add("--bind", self.run_dir, self.run_dir)
  add("--bind", self.log_dir, SANDBOX_LOGS)
  add("--ro-bind", self.seer_binary, SANDBOX_SEER)
  add("--ro-bind", self.lua_dir, SANDBOX_LUA)
  for _, b in ipairs(binds) do add(b[1], b[2], b[3]) end
  -- opened once, checked (Sandbox:_prepare_models) and mounted from those descriptors
  local lm = self:_open_local_mounts()
  for _, field in ipairs({ "local_files", "local_dirs" }) do
    for i = 1, #c[field] do add(unpack(lm[field][i].bind)) end
  end
  for _, d in ipairs(self.gpu_nodes or {}) do add("--dev-bind", d, d) end
  if self.gpu_nodes and #self.gpu_nodes > 0 then add("--ro-bind-try", "/sys", "/sys") end
  -- /dev (bubblewrap's unsized tmpfs holding the device nodes) and the root (a tmpfs holding
  -- the mount points) become read-only; the mounts inside them keep their own modes.
  add("--remount-ro", "/dev")
  add("--remount-ro", "/")
  add("--chdir", "/workspace", "--", SANDBOX_SEER, "sandboxd", "--connection-file", SANDBOX_RUN .. "/sandboxd.json")
  return a
end

function Sandbox:_environment()
  local c = self.config
  local e = {
    PATH = "/opt/seer/bin:/usr/local/bin:/usr/bin:/bin", HOME = "/workspace", USER = "sandbox", LOGNAME = "sandbox",
    LANG = "C.UTF-8", TMPDIR = "/tmp", SEER_LUA_DIR = SANDBOX_LUA, SEER_SANDBOX_ID = self.sandbox_id,
    SEER_HISTORY = "", HF_HUB_OFFLINE = "1", TERM = "dumb",
  }
  if c.network == "host" then e.HF_HUB_OFFLINE = nil end
  if type(c.network) == "table" then
    -- An allow-list: HTTP(S) through the in-sandbox forwarder to the host's filter (seer.egress).
    local proxy = "http://127.0.0.1:" .. EGRESS_PORT
    e.HTTPS_PROXY, e.https_proxy, e.HTTP_PROXY, e.http_proxy = proxy, proxy, proxy, proxy
    e.NO_PROXY, e.no_proxy = "localhost,127.0.0.1,::1", "localhost,127.0.0.1,::1"
  end
  for k, v in pairs(c.env) do e[k] = v end
  for _, name in ipairs(c.secrets) do
    local v = os.getenv(name)
    if v == nil then
      error(("SandboxConfig.secrets lists %s, but it is not set in this environment; export %s=... (or put it in .env) before starting the sandbox")
        :format(name, name), 0)
    end
    e[name] = v
  end
  return e
end

-- The limits as applied: memory, processes, cpu_seconds, open_files, the sizes of the
-- in-memory file systems (tmp, shm) and disk (nil: none). /tmp and /dev/shm default to 25% and
-- 12.5% of the memory limit, so with both full the processes keep at least 62.5% of it;
-- explicit sizes are checked against the limit by SandboxConfig (seer.environment).
function Sandbox:_limits()
  local l = self.config.limits or {}
  local total = mem_total() or (8 * 1024 ^ 3)
  local memory = l.memory or math.floor(total * 0.9)
  local mib = 1024 * 1024
  local function share(frac) return math.max(mib, math.floor(memory * frac / mib) * mib) end
  -- open files: 65536 by default, or this process's hard limit when that is lower (the default
  -- used to be asked for regardless; the kernel refused it and the sandbox kept the lower limit
  -- while seer reported 65536). An explicit value above the hard limit is refused here.
  local hard = nofile_hard()
  if l.open_files and hard and l.open_files > hard then
    error(("SandboxConfig.limits.open_files = %d is above this machine's hard limit of %d open files " ..
           "(ulimit -Hn); ask for at most %d, or raise the hard limit (limits.conf, systemd LimitNOFILE)"):format(
           l.open_files, hard, hard), 0)
  end
  local open_files = l.open_files or (hard and math.min(65536, hard) or 65536)
  local r = {
    memory = memory, memory_set = l.memory ~= nil,
    processes = l.processes or 4096, processes_set = l.processes ~= nil,
    cpu_seconds = l.cpu_seconds, open_files = open_files,
    tmp = l.tmp or share(0.25), shm = l.shm or share(0.125), disk = l.disk,
  }
  -- Explicit tmp/shm against the default memory limit (SandboxConfig checks them against an
  -- explicit one).
  local ok, err = pcall(require("seer.environment").check_tmpfs_sizes, r.memory, r.tmp, r.shm, "SandboxConfig.limits")
  if not ok then error(type(err) == "table" and err.seer_env_error or err, 0) end
  return r
end

-- limits.disk: the sandbox's writable host storage (the state directory, which holds
-- /workspace, /run/seer and /var/log/seer) becomes an ext4 file system of exactly that size,
-- an image file (allocated in full) mounted on it through a loop device. A writer inside gets
-- ENOSPC when it is full and the host's disk is never touched beyond the image. Mounting needs
-- root (CAP_SYS_ADMIN on the host); without it start() fails with the reason rather than run
-- without the limit the config asked for. Unmounted by _teardown, or by the keeper when the
-- owner died.
function Sandbox:_mount_disk(limits)
  if not limits.disk then return end
  pcall(ffi.cdef, "unsigned geteuid(void);")
  if ffi.C.geteuid() ~= 0 then
    error(("SandboxConfig.limits.disk needs root: seer enforces it with a size-limited file system mounted through a "
      .. "loop device, which an unprivileged user (uid %d) cannot mount; remove limits.disk (the workspace is then "
      .. "bounded only by the host's disk) or start the sandbox as root"):format(ffi.C.geteuid()), 0)
  end
  for _, tool in ipairs({ "mkfs.ext4", "mount", "umount" }) do
    if not find_on_path(tool) and not exists("/usr/sbin/" .. tool) and not exists("/sbin/" .. tool) then
      error(("SandboxConfig.limits.disk needs %s (e2fsprogs / mount packages) on this machine"):format(tool), 0)
    end
  end
  -- The image lives beside the snapshots (a disk-backed cache, where the state root may be a
  -- tmpfs such as $XDG_RUNTIME_DIR), and its blocks are allocated up front: the sandbox gets
  -- the whole size or start() says the host's disk lacks it, never an I/O error halfway.
  local img_dir = M.snapshot_root():gsub("/snapshots$", "") .. "/disks"
  process.mkdir_p(img_dir)
  local img = img_dir .. "/" .. self.sandbox_id .. ".disk"
  local path = "/usr/sbin:/sbin:" .. (os.getenv("PATH") or "/usr/bin:/bin")
  local function run(argv, what)
    local code, out, err = run_host(argv, { env = { PATH = path, LANG = "C" }, timeout_ms = 60000 })
    if code ~= 0 then
      error(("SandboxConfig.limits.disk: %s failed (exit %s): %s"):format(what, tostring(code), (err ~= "" and err or out)), 0)
    end
  end
  process.mkdir_p(self.state_dir)
  local f = assert(io.open(img, "wb"))
  f:close()
  self.disk_image = img
  run({ "fallocate", "-l", tostring(math.floor(limits.disk)), img }, "reserving the image on the host's disk")
  run({ "mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", img }, "mkfs.ext4")
  run({ "mount", "-o", "loop,nosuid,nodev", img, self.state_dir }, "mounting the image")
  self.disk_mounted = true
  os.remove(self.state_dir .. "/lost+found")
end

function Sandbox:_unmount_disk()
  if self.disk_mounted then
    run_host({ "umount", "-l", self.state_dir }, { env = { PATH = "/usr/sbin:/sbin:/usr/bin:/bin" } })
    self.disk_mounted = false
  end
  if self.disk_image then
    if not self.config.debug then os.remove(self.disk_image) end
    self.disk_image = nil
  end
end

-- Raises the sandbox's end as an error when the keeper has gone: (ok, why).
function Sandbox:_alive()
  if self.stopped then return false, ("sandbox %s was terminated"):format(self.sandbox_id) end
  if self.link then -- a remote backend (seer.backends.*): its link process knows
    local why = require("seer.backends." .. self.config.backend).ended(self)
    return why == nil, why
  end
  if self.attached then
    -- a handle from Sandbox.attach: the keeper is another process's child
    if sb.alive(self.keeper_pid) and sb.start_time(self.keeper_pid) == self.keeper_start then return true end
    local s = read_json(roots(self).state, "status.json") or {}
    if s.how == "timeout" then
      return false, ("the sandbox %s was stopped: its timeout of %s s passed (SandboxConfig.timeout)"):format(self.sandbox_id,
        tostring(self.config.timeout))
    end
    return false, ("the sandbox %s has ended%s"):format(self.sandbox_id, s.how and (" (" .. s.how .. ")") or "")
  end
  if not self.keeper_status then
    local st = sb.waitpid(self.keeper_pid)
    if st == nil then return true end
    self.keeper_status = st or { code = -1 }
  end
  local s = read_json(roots(self).state, "status.json") or {}
  local why
  if s.how == "timeout" then
    why = ("the sandbox %s was stopped: its timeout of %s s passed (SandboxConfig.timeout)"):format(self.sandbox_id, tostring(self.config.timeout))
  elseif s.how == "terminated" then
    why = ("the sandbox %s was terminated from outside (seer sandbox terminate)"):format(self.sandbox_id)
  else
    why = ("the sandbox %s has ended (%s); its log:\n%s"):format(self.sandbox_id,
      s.how and (s.how .. (s.signal and s.signal ~= 0 and (", signal " .. s.signal) or "") .. ", code " .. tostring(s.code)) or "keeper gone",
      tail(roots(self).logs, "sandbox.log", 20))
    if why:find("Can't find source path /proc/self/fd/", 1, true) or why:find("Race condition binding dirfd", 1, true) then
      why = why .. "\n(a file of a cached model, or a model folder or local_files / local_dirs entry, was replaced or removed "
        .. "after seer checked it and before bubblewrap mounted it; the sandbox gets only what seer checked, so it did not "
        .. "start: start it again, and look for what rewrites it meanwhile)"
    end
  end
  return false, why
end

---Starts the sandbox: models are fetched (hub cache or download), repos cloned, then sandboxd
---starts under bubblewrap and the repos' install commands run inside. Returns self.
---
---With `detach = true` the sandbox outlives this script: it keeps running (with its notebook
---server and kernels) until its `timeout` passes or it is terminated (`sandbox:terminate()`,
---`seer sandbox terminate ID`, or `Sandbox.attach(id):terminate()` from another script).
---@param opts? {name?: string, workspace?: seerworkspace.Workspace, detach?: boolean}|string a name, and a Workspace installed into /workspace
---@return seersandbox.Sandbox
function Sandbox:start(opts)
  opts = opts or {}
  if type(opts) == "string" then opts = { name = opts } end
  -- the reference's positional start(workspace)
  if type(opts) == "table" and getmetatable(opts) ~= nil and type(opts.install) == "function" then opts = { workspace = opts } end
  if type(opts) ~= "table" then error(("start(opts): opts is {name = ..., workspace = ...} or a name, not a %s"):format(type(opts)), 2) end
  for k in pairs(opts) do
    if k ~= "name" and k ~= "workspace" and k ~= "detach" then
      error(("start: unknown option %q (options: name, workspace, detach)"):format(tostring(k)), 2)
    end
  end
  if opts.detach ~= nil and type(opts.detach) ~= "boolean" then
    error(("start{detach = ...}: detach is true or false, not a %s"):format(type(opts.detach)), 2)
  end
  if opts.workspace ~= nil and (type(opts.workspace) ~= "table" or type(opts.workspace.install) ~= "function") then
    error("start{workspace = ...}: workspace must be a seer.workspace Workspace", 2)
  end
  if opts.detach and self.config.backend ~= "local" then
    -- the remote sandbox is owned by a link process of this script: it ends when the script does
    error(("start{detach = true}: not available for backend = %q yet; detached sandboxes are local (docs/sandbox.md)")
      :format(self.config.backend), 2)
  end
  if self.restore_from and self.config.backend ~= "local" then
    error(("from_snapshot: not available for backend = %q yet (docs/backends.md)"):format(self.config.backend), 2)
  end
  if self.sandbox_id then error(("sandbox %s was already started"):format(self.sandbox_id), 2) end
  local ok, err = pcall(self._start, self, opts)
  -- The reference's start(workspace): its libraries, skills and files go into /workspace.
  if ok and opts.workspace then ok, err = pcall(opts.workspace.install, opts.workspace, self.workspace_dir) end
  if ok and opts.workspace and self.link then -- a remote backend: the mirror goes to /workspace
    ok, err = pcall(require("seer.backends." .. self.config.backend).sync_workspace, self)
  end
  if not ok then
    -- Nothing of a half-started sandbox stays behind.
    pcall(self._teardown, self)
    error(err, 2)
  end
  -- A detached sandbox is not ended when this script's Lua state closes: only its timeout or a
  -- terminate ends it.
  if self.detached then live[self] = nil end
  return self
end

function Sandbox:_start(opts)
  local t0 = process.now_ms()
  local c = self.config
  if c.backend ~= "local" then live[self] = true; return require("seer.backends." .. c.backend).start(self, opts) end
  local bwrap = find_on_path("bwrap")
  if not bwrap then
    error("bubblewrap (bwrap) is not installed; the local sandbox needs it: run `make setup` (or apt-get install bubblewrap)", 0)
  end
  self.bwrap = bwrap
  -- GPUs
  if c.gpu then
    local gpus, control = M.gpu_devices()
    if #gpus == 0 then
      if os.getenv("SEER_GPU_FALLBACK") == "cpu" then
        say_once(("SandboxConfig.gpu = %q but this machine has no NVIDIA GPU; running on the CPU (SEER_GPU_FALLBACK=cpu)"):format(c.gpu))
      else
        error(("SandboxConfig.gpu = %q, but this machine has no NVIDIA GPU (no /dev/nvidiactl). Remove gpu to run on the CPU, "
          .. "or set SEER_GPU_FALLBACK=cpu to run GPU configs on the CPU anyway"):format(c.gpu), 0)
      end
    elseif #gpus < c.gpu_count then
      error(("SandboxConfig.gpu_count = %d, but this machine has %d GPU%s; lower gpu_count"):format(c.gpu_count, #gpus, #gpus == 1 and "" or "s"), 0)
    else
      self.gpu_nodes = {}
      for i = 1, c.gpu_count do self.gpu_nodes[#self.gpu_nodes + 1] = gpus[i] end
      for _, d in ipairs(control) do self.gpu_nodes[#self.gpu_nodes + 1] = d end
    end
  end
  for i, p in ipairs(c.system_packages) do
    local code = run_host({ "dpkg-query", "-W", "-f=${Status}", p })
    if code ~= 0 then
      error(("SandboxConfig.system_packages[%d]: %s is not installed on this machine; the local sandbox shares the host's /usr, "
        .. "so install it here (apt-get install %s)"):format(i, p, p), 0)
    end
  end

  self.sandbox_id = sanitize(opts.name or "sandbox") .. "-" .. random_hex(6)
  self.name = opts.name
  self.detached = opts.detach == true
  self.state_dir = M.state_root() .. "/" .. self.sandbox_id
  self.workspace_dir = self.state_dir .. "/workspace"
  self.run_dir = self.state_dir .. "/run"
  self.log_dir = self.state_dir .. "/logs"
  local limits = self:_limits()
  self.limits = limits
  self:_mount_disk(limits)
  for _, d in ipairs({ self.workspace_dir, self.run_dir, self.log_dir }) do process.mkdir_p(d) end
  ffi.C.chmod(self.state_dir, tonumber("700", 8))
  if #(self.run_dir .. "/kernel-xxxxxxxx-5") > 100 then
    error(("the sandbox directory %s is too deep for unix sockets (108 bytes); set SEER_SANDBOX_DIR to a shorter path"):format(self.state_dir), 0)
  end
  self._roots = nil
  self.seer_binary = require("seer.jupyter").seer_binary()
  self.lua_dir = core.realpath(core.lua_dir()) or core.lua_dir()
  write_private(roots(self).run, "passwd", "sandbox:x:65534:65534:sandbox:/workspace:/bin/sh\n")
  write_private(roots(self).run, "group", "sandbox:x:65534:\n")

  local env = self:_environment()
  local binds = {}
  self:_prepare_models(binds, env)
  self:_prepare_repos()

  local cgroup, notes = sb.cgroup_create(self.sandbox_id, limits.memory, limits.processes)
  self.cgroup = cgroup
  local rl = { cpu_seconds = limits.cpu_seconds, open_files = limits.open_files }
  if not cgroup.memory and limits.memory_set then
    rl.address_space = limits.memory
    say_once("no usable memory cgroup (" .. notes:gsub("\n$", ""):gsub("\n", "; ") .. "); the memory limit is applied per process (RLIMIT_AS)")
  end
  if not cgroup.pids and limits.processes_set then
    rl.processes = limits.processes
    say_once("no usable pids cgroup; the process limit is RLIMIT_NPROC, which counts all processes of your user")
  end

  self.key = net.new_key()
  write_private(roots(self).run, "sandboxd.json", json.encode{
    endpoint = "ipc://" .. SANDBOX_RUN .. "/sandboxd.sock", key = self.key, sandbox_id = self.sandbox_id,
    seer = SANDBOX_SEER, log = SANDBOX_LOGS .. "/sandbox.log" })
  local envl = {}
  for k, v in pairs(env) do envl[k] = v end
  self.env = env
  -- bubblewrap's options reach it through fd 3 (--args 3), not its command line: it is pid 1 in
  -- the sandbox, and /proc/1/cmdline would show every host path it mounts.
  local full = self:_bwrap_argv(bwrap, binds)
  local fd_args, command, seen_sep = {}, { full[1], "--args", "3", "--" }, false
  for i = 2, #full do
    if seen_sep then command[#command + 1] = full[i]
    elseif full[i] == "--" then seen_sep = true
    else fd_args[#fd_args + 1] = full[i] end
  end
  assert(seen_sep and #command > 4, "Sandbox:_bwrap_argv must end with -- and the command")
  -- the keeper copies the descriptors to pass once more before handing them over
  if self.pass_fds and #self.pass_fds > 0 then sb.raise_nofile(4 * #self.pass_fds + 1024) end
  self.keeper_pid = sb.keeper_start{
    argv = command, fd_args = fd_args, env = envl, log = self.log_dir .. "/sandbox.log",
    status = self.state_dir .. "/status.json", state_dir = not c.debug and self.state_dir or nil,
    remove_dirs = not c.debug and self.stage_dirs or nil, pass_fds = self.pass_fds or nil,
    cgroup = cgroup, rlimits = rl, timeout_ms = math.floor(c.timeout * 1000),
    disk_image = self.disk_image, detach = self.detached,
  }
  self:_close_passed()
  self.keeper_start = sb.start_time(self.keeper_pid)
  live[self] = true
  -- the filter's socket is in the run folder, which the sandbox reaches once sandboxd is up
  if type(c.network) == "table" then self:_start_egress_filter() end
  self.created, self.owner_pid = os.time(), process.getpid()
  self:_write_info()
  local info = { endpoint = "ipc://" .. self.run_dir .. "/sandboxd.sock" }
  -- The key, for this user's other processes (seer mcp cli); the state directory itself is not
  -- mounted in the sandbox, and the file is 0600.
  write_private(roots(self).state, "sandboxd.key", self.key)

  self.client = M.connect{ id = self.sandbox_id, endpoint = info.endpoint, key = self.key,
                           alive = function() return self:_alive() end }
  -- sandboxd is up when it answers; a sandbox that dies on the way says why.
  local deadline = process.now_ms() + 30000
  while true do
    local okp, r = pcall(self.client.request, self.client, "ping", {}, { timeout_ms = 200 })
    if okp then self.sandboxd_pid = r.pid; break end
    if not tostring(r):match("no answer") then error(r, 0) end
    if process.now_ms() > deadline then
      error(("the sandbox %s did not answer within 30 s; its log:\n%s"):format(self.sandbox_id, tail(roots(self).logs, "sandbox.log")), 0)
    end
  end
  if type(c.network) == "table" then self:_start_egress_forward() end
  if self.restore_from then self:_restore(self.restore_from) end
  self:_write_info() -- with the handles (Sandbox.attach rebuilds a handle from it)
  self.start_ms = process.now_ms() - t0

  for _, r in ipairs(self.repo_handles) do
    local cmd = r.install
    if cmd == true then
      local st = roots(self).workspace:stat(r.name .. "/install.sh")
      if not st or st.type ~= "file" then
        error(("RepoConfig{url = %q, install = true}: the repo has no install.sh; write the command instead, e.g. install = \"make\""):format(r.url), 0)
      end
      cmd = "sh ./install.sh"
    end
    if type(cmd) == "string" then
      local out, res = self:exec(cmd, { cwd = r.path })
      if res.exit_code ~= 0 then
        error(("installing %s in the sandbox failed (`%s` exited with %s):\n%s"):format(r.url, cmd, tostring(res.exit_code), out), 0)
      end
    end
  end
  if c.execution_mode == "notebook" then
    local okx, url = pcall(function() return require("seer.execution").server_url(self) end)
    if okx then self.jupyter_url = url end
  end
  return self
end

-- sandbox.json: what `seer sandbox list` shows and what Sandbox.attach(id) rebuilds a handle
-- from (in the state folder, which the sandbox cannot reach; 0600).
function Sandbox:_write_info(extra)
  local c = self.config
  local info = {
    id = self.sandbox_id, name = self.name, keeper_pid = self.keeper_pid, keeper_start = self.keeper_start,
    owner_pid = self.owner_pid or process.getpid(), created = self.created or os.time(), state_dir = self.state_dir,
    cgroup = self.cgroup, endpoint = "ipc://" .. self.run_dir .. "/sandboxd.sock", timeout = c.timeout, network = c.network,
    models = #c.models, config = tostring(c), detached = self.detached, settings = config_table(c),
    model_handles = self.model_handles, repo_handles = self.repo_handles, sandboxd_pid = self.sandboxd_pid,
    notebook_server = self.notebook_server,
  }
  for k, v in pairs(extra or {}) do info[k] = v end
  write_private(roots(self).state, "sandbox.json", json.encode(info, { indent = 2 }))
end

-- Unpacks a snapshot's workspace. The archive is copied into the run folder and extracted
-- by tar inside the sandbox, as the sandbox's user: whatever an archive holds (links, '..' or
-- absolute names, links followed by files through them) can only land where the sandbox's own
-- code could write anyway, never on the host.
function Sandbox:_restore(id)
  local src = M.snapshot_root() .. "/" .. id .. "/workspace.tar.gz"
  local rel = "restore-" .. random_hex(8) .. ".tar.gz"
  local ok, err = roots(self).run:copy_in(rel, src, { mode = tonumber("600", 8) })
  if not ok then error(("cannot restore snapshot %s: %s"):format(id, err), 0) end
  local out, res = self:exec({ "tar", "--extract", "--gzip", "--no-same-owner", "--file", SANDBOX_RUN .. "/" .. rel,
                               "--directory", "/workspace" }, { timeout = 3600, max_output = 65536 })
  roots(self).run:unlink(rel)
  if res.exit_code ~= 0 then error(("cannot restore snapshot %s: tar exited with %s:\n%s"):format(id, tostring(res.exit_code), out), 0) end
end

-- Stops everything this sandbox is: sandboxd, the keeper, the cgroups, the state directory.
function Sandbox:_teardown()
  live[self] = nil
  self:_close_passed()
  if self.config.backend ~= "local" then -- a remote backend: stop the remote sandbox (and its job, link) first
    require("seer.backends." .. self.config.backend).teardown(self)
    self.keeper_status = self.keeper_status or self.link_status or { code = -1 }
  end
  if self.client then
    pcall(self.client.request, self.client, "shutdown", {}, { timeout_ms = 300 })
    self.client:close()
    self.client = nil
  end
  if self.attached then
    -- not our child: signal it (pid and start time checked) and wait for it to be gone; being
    -- detached, it removes the state folder itself
    local function ours() return sb.alive(self.keeper_pid) and sb.start_time(self.keeper_pid) == self.keeper_start end
    if ours() then
      sb.kill(self.keeper_pid, sb.SIGTERM)
      local deadline = process.now_ms() + 5000
      while ours() and process.now_ms() < deadline do process.sleep_ms(5) end
      if ours() then sb.kill(self.keeper_pid, sb.SIGKILL) end
      deadline = process.now_ms() + 5000
      while ours() and process.now_ms() < deadline do process.sleep_ms(5) end
    end
    self.keeper_status = { code = -1 }
  elseif self.keeper_pid and not self.keeper_status then
    sb.kill(self.keeper_pid, sb.SIGTERM)
    local deadline = process.now_ms() + 5000
    while true do
      local st = sb.waitpid(self.keeper_pid)
      if st ~= nil then self.keeper_status = st or { code = -1 }; break end
      if process.now_ms() > deadline then
        sb.kill(self.keeper_pid, sb.SIGKILL)
        -- bounded too: a keeper in an uninterruptible sleep is left unreaped, not waited for
        local kill_deadline = process.now_ms() + 2000
        while sb.waitpid(self.keeper_pid) == nil and process.now_ms() < kill_deadline do process.sleep_ms(2) end
        self.keeper_status = { code = -1 }
        break
      end
      process.sleep_ms(2)
    end
  end
  if self.cgroup then sb.cgroup_destroy(self.cgroup, 3000) end
  if self.egress_filter then
    self.egress_filter:stop(500)
    self.egress_filter = nil
  end
  -- relays of scoped libraries into this sandbox (seer.rpc.relay), when any were started
  local relay = package.loaded["seer.rpc.relay"]
  if relay and self.sandbox_id then relay.stop_for(self.sandbox_id) end
  if not self.config.debug then self:_unstage_hidden() end
  if self.state_dir and exists(self.state_dir) then
    if self.config.debug then
      io.stderr:write(("seer: sandbox %s kept for debugging in %s\n"):format(self.sandbox_id, self.state_dir))
    else
      -- Never following a link the sandbox left in its workspace, run or log folder.
      local parent, id = self.state_dir:match("^(.*)/([^/]+)$")
      local ok, err = safe_fs.root(parent, WHAT.state):remove_tree(id)
      if not ok then io.stderr:write(("seer: removing the sandbox folder %s: %s\n"):format(self.state_dir, err)) end
    end
  end
  if self.disk_image and self.config.debug and self.disk_mounted then
    io.stderr:write(("seer: limits.disk: %s stays mounted for debugging; `umount %s` and remove %s when done\n")
      :format(self.state_dir, self.state_dir, self.disk_image))
  elseif self.disk_image then
    -- limits.disk: the state directory is a mounted image; unmount it, then remove what it hid.
    self:_unmount_disk()
    if not self.config.debug then run_host({ "rm", "-rf", "--", self.state_dir }) end
  end
  self.stopped = true
end

function Sandbox:_check()
  if not self.sandbox_id then error("the sandbox is not started; call sandbox:start() first", 3) end
  local ok, why = self:_alive()
  if not ok then error(why, 3) end
end

---@class seersandbox.ExecResult
---@field stdout string
---@field stderr string
---@field exit_code integer 124 after a timeout, 128+N after signal N
---@field signal? integer
---@field timed_out boolean
---@field truncated boolean output beyond max_output was dropped (stdout_bytes/stderr_bytes count all of it)
---@field out_of_memory boolean the sandbox's memory limit killed it
---@field elapsed_ms number
---@field ok boolean exit_code == 0

---Runs a command in the sandbox (a string runs under /bin/sh -c; a list is argv). Returns the
---output (stdout then stderr) and the details. A non-zero exit is not an error.
---@param cmd string|string[]
---@param opts? {timeout?: number, env?: table<string,string>, cwd?: string, max_output?: integer, stdin?: string}
---@return string output, seersandbox.ExecResult result
function Sandbox:exec(cmd, opts)
  self:_check()
  if type(opts) == "number" then opts = { timeout = opts } end
  opts = require("seer.checks").options("sandbox:exec", opts,
    { timeout = "number", env = "table", cwd = "string", max_output = "number", stdin = "string" }, 2)
  if type(cmd) ~= "string" and type(cmd) ~= "table" then
    error("sandbox:exec(cmd): cmd must be a string (a shell command) or a list of arguments", 2)
  end
  -- the out-of-memory flag: the memory cgroup's oom_kill count before and after (for a remote
  -- sandbox, as its link last reported it; docs/backends.md)
  local before
  if self.link then before = require("seer.backends.ssh").stats(self).oom_kills or 0
  else before = self.cgroup and self.cgroup.memory and sb.cgroup_stats(self.cgroup).oom_kills end
  local r, buffers = self.client:request("exec", { argv = type(cmd) == "table" and json.array(cmd) or cmd, timeout = opts.timeout,
                                          env = opts.env, cwd = opts.cwd, max_output = opts.max_output,
                                          stdin = opts.stdin })
  r.status = nil
  r.stdout, r.stderr = buffers and buffers[1] or "", buffers and buffers[2] or ""
  r.ok = r.exit_code == 0
  r.out_of_memory = false
  if r.signal == 9 and not r.timed_out and before and before >= 0 then
    local after
    if self.link then
      -- the remote side reports a change within ~0.2 s; wait a little longer for it
      local deadline = process.now_ms() + 1000
      repeat
        after = require("seer.backends.ssh").stats(self).oom_kills
        if after and after > before then break end
        process.sleep_ms(50)
      until process.now_ms() > deadline
    else after = sb.cgroup_stats(self.cgroup).oom_kills end
    if after and after > before then
      r.out_of_memory = true
      local limit = (self.limits and self.limits.memory) or self:stats().memory_limit or 0
      r.stderr = r.stderr .. ("\n[seer] killed: the sandbox's memory limit (%d MiB) was reached\n"):format(math.floor(limit / 1048576))
    end
  end
  if r.timed_out then
    r.stderr = r.stderr .. ("\n[seer] killed: the command ran past its timeout of %s s\n"):format(tostring(opts.timeout))
  end
  return r.stdout .. r.stderr, r
end

---Runs Lua in a fresh seer process in the sandbox (the code arrives on stdin).
---@param code string
---@param opts? {timeout?: number, env?: table<string,string>, cwd?: string, max_output?: integer}
---@return string output, seersandbox.ExecResult result
function Sandbox:exec_lua(code, opts)
  if type(code) ~= "string" then error("sandbox:exec_lua(code): code must be a string of Lua", 2) end
  opts = require("seer.checks").options("sandbox:exec_lua", opts, { timeout = "number", env = "table", cwd = "string", max_output = "number" }, 2)
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.stdin = code
  return self:exec({ SANDBOX_SEER, "-" }, o)
end

---Writes a file in the sandbox (relative paths are under /workspace; parents are created;
---binary safe; written to a temporary name and renamed).
---@param path string
---@param content string
function Sandbox:write_file(path, content)
  self:_check()
  if type(path) ~= "string" or type(content) ~= "string" then
    error("sandbox:write_file(path, content): both must be strings", 2)
  end
  self.client:request("write_file", { path = path }, { buffers = { content } })
end

---Reads a file from the sandbox (binary safe). Only a regular file is read: a fifo, socket or
---device there is an error (sandboxd never blocks on one). A file over opts.max_bytes (default
---64 MiB) is an error naming its size, unless opts.truncate (then its first max_bytes bytes);
---opts.offset starts further in. The second result: {bytes, size, truncated}.
---@param path string
---@param opts? {max_bytes?: integer, offset?: integer, truncate?: boolean, timeout?: number}
---@return string data, table info
function Sandbox:read_file(path, opts)
  self:_check()
  if type(path) ~= "string" then error("sandbox:read_file(path, opts): path must be a string", 2) end
  opts = require("seer.checks").options("sandbox:read_file", opts,
    { max_bytes = "number", offset = "number", truncate = "boolean", timeout = "number" }, 2)
  local max = opts.max_bytes or M.READ_MAX_BYTES
  if max < 0 or max ~= math.floor(max) then error("sandbox:read_file: max_bytes must be an integer >= 0", 2) end
  if max > M.READ_MAX_LIMIT then
    error(("sandbox:read_file: max_bytes can be at most %d (256 MiB); read a bigger file in parts with opts.offset"):format(M.READ_MAX_LIMIT), 2)
  end
  local r, buffers = self.client:request("read_file", { path = path, max_bytes = max, offset = opts.offset,
                                                        truncate = opts.truncate or nil },
                                         { timeout_ms = opts.timeout and math.floor(opts.timeout * 1000) or nil })
  local data = buffers and buffers[1] or ""
  -- sandboxd is inside: it may send more than was asked for, which is not kept
  if #data > max then data = data:sub(1, max) end
  return data, { bytes = #data, size = tonumber(r.size) or #data, truncated = r.truncated == true }
end

---Creates a directory (and its parents) in the sandbox.
---@param path string
function Sandbox:ensure_dir(path)
  self:_check()
  self.client:request("ensure_dir", { path = path })
end

---Lists a directory in the sandbox: {name, type, size, mtime} entries sorted by name, at most
---opts.max_entries (default and most: 100,000; the first by name). The second result:
---{total, truncated}.
---@param path? string default /workspace
---@param opts? {max_entries?: integer}
---@return table[] entries, table info
function Sandbox:list_files(path, opts)
  self:_check()
  opts = require("seer.checks").options("sandbox:list_files", opts, { max_entries = "number" }, 2)
  local max = math.min(opts.max_entries or M.LIST_MAX_ENTRIES, M.LIST_MAX_ENTRIES)
  local r = self.client:request("list", { path = path, max_entries = max })
  local entries = type(r.entries) == "table" and r.entries or {}
  local total = tonumber(r.total) or #entries
  for i = #entries, max + 1, -1 do entries[i] = nil end
  return entries, { total = total, truncated = r.truncated == true or total > #entries }
end

---The recent lines of the sandbox's log, or of one of its services (a kernel, an RPC server).
---@param n? integer lines (default 50)
---@param service? string
---@return string
function Sandbox:logs(n, service)
  if type(n) == "table" then -- the reference's keywords: logs{lines = 100, service = "kernel-1"}
    if service ~= nil then error("sandbox:logs(n, service) or sandbox:logs{lines = ..., service = ...}: not both", 2) end
    for k in pairs(n) do
      if k ~= "lines" and k ~= "service" then error(("sandbox:logs: unknown option '%s'; valid options: lines, service"):format(tostring(k)), 2) end
    end
    n, service = n.lines, n.service
  end
  if n ~= nil and not (type(n) == "number" and n == math.floor(n) and n >= 1 and n <= 2 ^ 31 - 1) then
    error(("sandbox:logs: lines must be a whole number >= 1, got %s"):format(type(n) == "number" and tostring(n) or "a " .. type(n)), 2)
  end
  if self.stopped or not self.log_dir then return "" end
  if service ~= nil and (type(service) ~= "string" or not service:match("^[%w_.-]+$") or service:match("^%.")) then
    error(("sandbox:logs(n, service): %q is not a service name (letters, digits, '_', '-', '.')"):format(tostring(service)), 2)
  end
  if self.link then -- remote: sandboxd reads its logs (bounded text)
    local ok, r = pcall(self.client.request, self.client, "logs", { name = service, lines = n or 50 }, { timeout_ms = 10000 })
    return ok and type(r.text) == "string" and r.text:sub(-1048576) or ""
  end
  local logs = roots(self).logs
  if service ~= nil and not logs:stat(service .. ".log") then
    -- a misspelt service gave "" as if it had printed nothing
    local names = {}
    for _, e in ipairs(logs:list("", { max = 1000 }) or {}) do
      local nm = e.type == "file" and e.name:match("^(.+)%.log$")
      if nm and nm ~= "sandbox" then names[#names + 1] = nm end
    end
    error(("sandbox:logs: no log of a service %q in this sandbox; services with logs: %s"):format(service,
      #names > 0 and table.concat(names, ", ") or "none yet"), 2)
  end
  return tail(logs, (service or "sandbox") .. ".log", n or 50)
end

---cgroup figures: memory_limit, memory_peak, oom_kills, pids_current, pids_max_hits (-1 where
---the cgroup does not count it). A remote sandbox's are those its far side last reported (they
---follow a change within about 0.2 s), plus `seq`, the number of reports; {} before the first or
---where the far side has no cgroups.
---@return table
function Sandbox:stats()
  if self.link then return require("seer.backends.ssh").stats(self) end
  return self.cgroup and sb.cgroup_stats(self.cgroup) or {}
end

---The path inside the sandbox of a configured model.
---@param name string the ModelConfig name
---@param revision? string
---@return string
function Sandbox:model_path(name, revision)
  for _, h in ipairs(self.model_handles) do
    if h.name == name and (revision == nil or h.revision == revision) then return h.path end
    if h.is_peft and h.base_model == name then return h.base_path end
  end
  local names = {}
  for _, h in ipairs(self.model_handles) do names[#names + 1] = h.hidden and "<hidden>" or h.name end
  error(("model %s is not in this sandbox (configured: %s); add it to SandboxConfig.models"):format(name,
    #names > 0 and table.concat(names, ", ") or "none"), 2)
end

---Name -> path inside the sandbox, for every configured model (and PEFT bases).
---@return table<string, string>
function Sandbox:model_paths()
  local t = {}
  for _, h in ipairs(self.model_handles) do
    t[h.name] = h.path
    if h.base_model then t[h.base_model] = h.base_path end
    -- a local directory is also known by its base name (as its MODEL_<NAME>_PATH is)
    if not h.hidden and (h.name:match("^[%./~]") or is_dir(h.name)) then t[h.name:match("([^/]+)/*$")] = h.path end
  end
  return t
end

---Name -> path inside the sandbox as code inside may see it: a hidden model (and a hidden
---adapter's base) is `<hidden>` (`<hidden 2>`, ... when there are several), never its id or its
---host path (docs/security.md, class 3). What a scoped sandbox's RPC server is configured with.
---@return table<string, string>
function Sandbox:model_paths_inside()
  local t, n = {}, 0
  local function hidden_key()
    n = n + 1
    return n == 1 and "<hidden>" or ("<hidden %d>"):format(n)
  end
  for _, h in ipairs(self.model_handles) do
    if h.hidden then
      t[hidden_key()] = h.path
      if h.base_model then t[hidden_key()] = h.base_path end
    else
      t[h.name] = h.path
      if h.base_model then t[h.base_model] = h.base_path end
      if h.name:match("^[%./~]") or is_dir(h.name) then t[h.name:match("([^/]+)/*$")] = h.path end
    end
  end
  return t
end

---Raises when text names a hidden model of this sandbox (part of its id, revision or host
---paths), saying what: for what the host is about to put inside (an interface file, options).
---@param text string
---@param what string
function Sandbox:refuse_hidden_names(text, what)
  if self.hidden_frags and #self.hidden_frags > 0 and type(text) == "string" and sb.find_fragment(text, self.hidden_frags, 1, true) then
    error(("%s names a hidden model of this sandbox (part of its id or of its host path), and code in the sandbox could read it; "
      .. "refer to it as get_model_path(\"<hidden>\") or next(list_configured_models()) instead"):format(what), 0)
  end
end

---What the notebook server needs to start kernels in this sandbox.
---@return table
function Sandbox:kernel_launcher()
  self:_check()
  return { endpoint = "ipc://" .. self.run_dir .. "/sandboxd.sock", key = self.key, host_run = self.run_dir,
           sandbox_run = SANDBOX_RUN, state_dir = self.state_dir, sandbox_id = self.sandbox_id,
           log_dir = self.log_dir }
end

---Starts a long-running process in the sandbox (an RPC server, ...); its output goes to the
---service's log (sandbox:logs(n, name)).
---@param name string
---@param argv string[]
---@param opts? {env?: table<string,string>, cwd?: string}
---@return table {name, pid, log}
function Sandbox:start_service(name, argv, opts)
  self:_check()
  opts = require("seer.checks").options("sandbox:start_service", opts, { env = "table", cwd = "string" }, 2)
  return self.client:request("start_service", { name = name, argv = json.array(argv), env = opts.env, cwd = opts.cwd })
end

---Stops a service started with start_service.
---@param name string
function Sandbox:stop_service(name)
  self:_check()
  self.client:request("stop_service", { name = name })
end

---Host path of a file the sandbox sees under /run/seer (sockets of services).
---@param sandbox_path string
---@return string
function Sandbox:host_run_path(sandbox_path)
  if sandbox_path:sub(1, #SANDBOX_RUN) ~= SANDBOX_RUN then
    error(("%s is not under %s"):format(sandbox_path, SANDBOX_RUN), 2)
  end
  return self.run_dir .. sandbox_path:sub(#SANDBOX_RUN + 1)
end


---Archives the workspace and the config under the snapshot directory; returns the id.
---@param description? string
---@return string snapshot_id
-- Stops every process of the sandbox (SIGSTOP, by its pids or memory cgroup's list, until no new
-- one appears) so a snapshot archives one moment of the workspace: a process writing as tar
-- reads made tar fail ("file changed as we read it"), and with it the snapshot and a
-- terminate{save_snapshot}. Returns the function that continues them, or nil when the sandbox
-- has no cgroup to list its processes (the snapshot then takes what tar reads, with a warning).
local function pause_all(self)
  local cg = self.cgroup
  local dir = cg and ((cg.pids and cg.pids ~= "" and cg.pids) or (cg.memory and cg.memory ~= "" and cg.memory))
  if not dir then return nil end
  local stopped = {}
  for _ = 1, 50 do
    local f = io.open(dir .. "/cgroup.procs", "r")
    if not f then break end
    local new = 0
    for line in f:lines() do
      local pid = tonumber(line)
      if pid and pid > 1 and not stopped[pid] then
        sb.kill(pid, sb.SIGSTOP)
        stopped[pid] = true
        new = new + 1
      end
    end
    f:close()
    if new == 0 then break end
  end
  return function() for pid in pairs(stopped) do sb.kill(pid, sb.SIGCONT) end end
end

function Sandbox:snapshot(description)
  self:_check()
  if self.link then error(("snapshot: not available for backend = %q yet (docs/backends.md)"):format(self.config.backend), 2) end
  local id = os.date("!%Y%m%d-%H%M%S") .. "-" .. random_hex(6)
  local dir = M.snapshot_root() .. "/" .. id
  local tmp = dir .. ".tmp"
  process.mkdir_p(tmp)
  -- GNU tar stores links as links (no --dereference), opens what it archives with O_NOFOLLOW |
  -- O_NONBLOCK and walks directories by descriptor, so a link or fifo planted in the workspace
  -- is archived as what it is and nothing outside the workspace is read; --one-file-system
  -- keeps it on the workspace's file system.
  -- --sparse: a file with holes (truncate -s 4G, no disk used) is archived by its data, not
  -- read as gigabytes of zeros (a 4 GiB one took 35 s of host CPU; 16 TiB would take hours).
  -- The sandbox's processes are stopped meanwhile (pause_all), so nothing changes under tar.
  local resume = pause_all(self)
  -- --mode=ug-s: no set-id bit goes into a snapshot, whatever is in the workspace (the filter
  -- refuses them inside; a file the host put there, or one from before, is archived without)
  local ok, code, _, err = pcall(run_host, { "tar", "--create", "--gzip", "--sparse", "--one-file-system", "--no-acls",
                                             "--no-xattrs", "--mode=ug-s", "--file", tmp .. "/workspace.tar.gz", "--directory",
                                             self.workspace_dir, "." })
  if resume then resume() end
  if not ok then
    run_host({ "rm", "-rf", tmp })
    error(code, 0)
  end
  -- GNU tar's status 1: some file changed while it was read (a process of a sandbox it could not
  -- stop); the archive is whole, that file as tar found it. Kept, with the warning recorded.
  local warnings
  if code == 1 then
    warnings = tostring(err):sub(1, 4000)
    io.stderr:write(("seer: snapshot of %s: %s\n"):format(self.sandbox_id, require("seer.terminal").safe(warnings:gsub("\n+$", ""))))
  elseif code ~= 0 then
    run_host({ "rm", "-rf", tmp })
    error(("snapshot of %s failed: %s"):format(self.sandbox_id, err), 2)
  end
  local f = assert(io.open(tmp .. "/snapshot.json", "w"))
  f:write(json.encode({ id = id, description = description or "", sandbox_id = self.sandbox_id, created = os.time(),
                        config = config_table(self.config), warnings = warnings }, { indent = 2 }))
  f:close()
  assert(os.rename(tmp, dir))
  return id
end

---A new sandbox whose workspace is the snapshot's (started). config defaults to the
---snapshot's own.
---@param snapshot_id string
---@param config? seerenvironment.SandboxConfig
---@param opts? {name?: string}
---@return seersandbox.Sandbox
function M.from_snapshot(snapshot_id, config, opts)
  if type(snapshot_id) ~= "string" or not snapshot_id:match("^[%w._-]+$") then
    error("Sandbox.from_snapshot(id, config): id must be a snapshot id returned by sandbox:snapshot()", 2)
  end
  local meta = read_json(safe_fs.root(M.snapshot_root(), WHAT.snapshots), snapshot_id .. "/snapshot.json")
  if not meta then
    error(("no snapshot %s in %s (seer sandbox snapshots lists them)"):format(snapshot_id, M.snapshot_root()), 2)
  end
  local s
  if config then s = new_sandbox(config, 2)
  else
    local c = meta.config or {}
    c.gpu_count = c.gpu and c.gpu_count or nil
    s = new_sandbox(c, 2)
  end
  s.restore_from = snapshot_id
  local ok, err = pcall(s.start, s, opts)
  if not ok then error(err, 2) end
  return s
end
Sandbox.from_snapshot = M.from_snapshot
M.Sandbox.from_snapshot = M.from_snapshot

---Snapshots on the disk: {id, description, created, sandbox_id} newest first.
---@return table[]
function M.snapshots()
  local list = {}
  local root = safe_fs.root(M.snapshot_root(), WHAT.snapshots)
  for _, e in ipairs(root:list("") or {}) do
    local meta = e.type == "dir" and read_json(root, e.name .. "/snapshot.json")
    if meta then list[#list + 1] = { id = meta.id, description = meta.description, created = meta.created, sandbox_id = meta.sandbox_id } end
  end
  table.sort(list, function(a, b) return a.id > b.id end)
  return list
end

---Stops the sandbox and everything in it. With save_snapshot, the workspace is archived first
---and the snapshot id is returned. Safe to call twice.
---The reference's positional form works too: `terminate(true, "description")`.
---@param opts? {save_snapshot?: boolean, snapshot_description?: string}|boolean
---@param description? string with a positional save_snapshot
---@return string|nil snapshot_id
function Sandbox:terminate(opts, description)
  if type(opts) == "boolean" then opts = { save_snapshot = opts, snapshot_description = description }
  elseif description ~= nil then error("terminate(save_snapshot, description) or terminate{...}: not both", 2) end
  opts = opts or {}
  if type(opts) ~= "table" then error(("terminate: opts is {save_snapshot, snapshot_description} or a boolean, not a %s"):format(type(opts)), 2) end
  for k in pairs(opts) do
    if k ~= "save_snapshot" and k ~= "snapshot_description" then
      -- a misspelt option would terminate without the snapshot asked for
      error(("terminate: unknown option '%s'; valid options: save_snapshot, snapshot_description"):format(tostring(k)), 2)
    end
  end
  if self.stopped or not self.sandbox_id then return nil end
  local snap
  if opts.save_snapshot then
    local ok, r = pcall(self.snapshot, self, opts.snapshot_description)
    if not ok then
      -- nothing is lost: the sandbox runs on, so its workspace can be saved another way
      error(("terminate: %s; the sandbox is still running (terminate() without save_snapshot stops it)"):format(tostring(r)), 2)
    end
    snap = r
  end
  self:_teardown()
  return snap
end

---------------------------------------------------------------------------------------------
-- sandboxes on this machine (for `seer sandbox`)

-- The state root of this user's sandboxes, as a safe_fs root.
local function state_root_fs() return safe_fs.root(M.state_root(), WHAT.state) end

local function state_of(root, id)
  if type(id) ~= "string" or not id:match("^[%w_.-]+$") or id:match("^%.") then return nil end
  local info = read_json(root, id .. "/sandbox.json")
  if type(info) ~= "table" then return nil end
  local alive = type(info.keeper_pid) == "number" and sb.alive(info.keeper_pid) and sb.start_time(info.keeper_pid) == info.keeper_start
  info.running = alive and true or false
  info.status = read_json(root, id .. "/status.json")
  return info
end

---The sandboxes of this user: running ones, and the remains of ended ones (swept).
---@return table[] {id, name, keeper_pid, owner_pid, created, running, state_dir}
function M.list()
  local root = state_root_fs()
  local out = {}
  for _, e in ipairs(root:list("") or {}) do
    if e.type == "dir" then
      local info = state_of(root, e.name)
      if info and info.running then
        out[#out + 1] = info
      elseif info or (e.mtime and os.time() - e.mtime > 60) then
        -- The keeper is gone (killed with -9): only directories and empty cgroups remain.
        if info and info.cgroup then sb.cgroup_destroy(info.cgroup, 1000) end
        root:remove_tree(e.name) -- links inside are removed, never followed
      end
    end
  end
  table.sort(out, function(a, b) return a.created < b.created end)
  return out
end

---Terminates a sandbox by id (from any process of the same user).
---@param id string
---@return boolean found
function M.terminate_id(id)
  local info = state_of(state_root_fs(), id)
  if not info then return false end
  if info.running then
    sb.kill(info.keeper_pid, sb.SIGTERM)
    local deadline = process.now_ms() + 5000
    while sb.alive(info.keeper_pid) and process.now_ms() < deadline do process.sleep_ms(5) end
    if sb.alive(info.keeper_pid) then sb.kill(info.keeper_pid, sb.SIGKILL) end
  end
  if info.cgroup then sb.cgroup_destroy(info.cgroup, 3000) end
  return true
end

---A handle on a running sandbox by id, from any process of the same user: what
---`start{detach = true}` left running (a setup script that has exited). It works like the
---handle `start()` returned: exec, files, sessions (create_notebook_session uses the sandbox's
---own notebook server), terminate. Its `jupyter_url` is the sandbox's notebook server's, when it
---has one.
---@param id string a sandbox id (sandbox.sandbox_id; `seer sandbox list` shows them)
---@return seersandbox.Sandbox
function M.attach(id)
  if type(id) ~= "string" or id == "" then error("Sandbox.attach(id): id must be a sandbox id (seer sandbox list shows them)", 2) end
  local root = state_root_fs()
  local info = state_of(root, id)
  if not info or not info.running then
    error(("Sandbox.attach: no running sandbox %s (seer sandbox list shows the running ones)"):format(id), 2)
  end
  if type(info.backend) == "string" and info.backend ~= "local" then
    error(("Sandbox.attach: sandbox %s runs on backend %q, owned by the script that started it; attach reaches local sandboxes "
      .. "(seer sandbox terminate %s ends it)"):format(id, info.backend, id), 2)
  end
  if type(info.settings) ~= "table" or type(info.state_dir) ~= "string" then
    error(("Sandbox.attach: sandbox %s was started by an older seer; terminate it (seer sandbox terminate %s) and start it again"):format(id, id), 2)
  end
  if info.state_dir ~= M.state_root() .. "/" .. id then
    error(("Sandbox.attach: sandbox %s's record names another folder (%s)"):format(id, tostring(info.state_dir)), 2)
  end
  local key, kerr = root:read(id .. "/sandboxd.key", { max = 4096 })
  if not key then error(("Sandbox.attach: cannot read the key of sandbox %s: %s"):format(id, kerr), 2) end
  local settings = info.settings
  settings.gpu_count = settings.gpu and settings.gpu_count or nil
  local okc, c = pcall(require("seer.environment").SandboxConfig, settings)
  if not okc then error(("Sandbox.attach: sandbox %s's recorded config does not load: %s"):format(id, c), 2) end
  local self = setmetatable({ config = c, sandbox_id = id, name = info.name ~= json.null and info.name or nil,
                              state_dir = info.state_dir, workspace_dir = info.state_dir .. "/workspace",
                              run_dir = info.state_dir .. "/run", log_dir = info.state_dir .. "/logs",
                              keeper_pid = info.keeper_pid, keeper_start = info.keeper_start, key = key,
                              detached = info.detached == true, attached = true, created = info.created,
                              owner_pid = info.owner_pid, sandboxd_pid = info.sandboxd_pid,
                              cgroup = type(info.cgroup) == "table" and info.cgroup or nil,
                              model_handles = type(info.model_handles) == "table" and info.model_handles or {},
                              repo_handles = type(info.repo_handles) == "table" and info.repo_handles or {},
                              notebook_server = type(info.notebook_server) == "table" and info.notebook_server or nil },
                            Sandbox)
  self.seer_binary = require("seer.jupyter").seer_binary()
  self.client = M.connect{ id = self.sandbox_id, endpoint = "ipc://" .. self.run_dir .. "/sandboxd.sock", key = key,
                           alive = function() return self:_alive() end }
  if self.notebook_server then
    local okx, url = pcall(function() return require("seer.execution").server_url(self) end)
    if okx then self.jupyter_url = url end
  end
  return self
end
Sandbox.attach = M.attach
M.Sandbox.attach = M.attach

---Connects to a running sandbox's sandboxd by id (from any process of the same user).
---@param id string
---@return table client
function M.connect_id(id)
  local root = state_root_fs()
  local info = state_of(root, id)
  if not info or not info.running then
    error(("no running sandbox %s (seer sandbox list shows the running ones)"):format(id), 2)
  end
  local key, kerr = root:read(id .. "/sandboxd.key", { max = 4096 })
  if not key then error(("cannot read the key of sandbox %s: %s"):format(id, kerr), 2) end
  return M.connect{ id = id, endpoint = info.endpoint, key = key, alive = function()
    if not root:exists(id .. "/sandbox.json") or root:exists(id .. "/status.json") then
      return false, ("the sandbox %s has ended"):format(id)
    end
    return true
  end }
end

---The log of a sandbox by id (or of one of its services).
---@param id string
---@param service? string
---@return string|nil path
function M.log_path(id, service)
  local root, rel = M.log_file(id, service)
  return root and (root.path .. "/" .. rel) or nil
end

---The log of a sandbox by id as a safe_fs root (the sandbox's log folder) and the file's name
---in it; nil when there is none. Read it with root:read(rel, {tail = true, max = ...}): the
---sandbox writes that folder, so it is never opened through a link or as a fifo.
---@param id string
---@param service? string
---@return seersafe_fs.Root|nil root, string|nil rel
function M.log_file(id, service)
  if type(id) ~= "string" or not id:match("^[%w_.-]+$") or id:match("^%.") then return nil end
  if service ~= nil and (not service:match("^[%w_.-]+$") or service:match("^%.")) then return nil end
  local dir = M.state_root() .. "/" .. id .. "/logs"
  local st = state_root_fs():stat(id .. "/logs")
  if not st or st.type ~= "dir" then return nil end
  local root = safe_fs.root(dir, WHAT.logs)
  local rel = (service or "sandbox") .. ".log"
  if not root:exists(rel) then return nil end
  return root, rel
end

M.shell_quote = shell_quote
M.config_table = config_table
return M
