--- seer.backends.ssh: a sandbox on another machine, reached with OpenSSH (docs/backends.md).
--- The remote host runs an ordinary local sandbox (bubblewrap + sandboxd) started by
--- `seer sandbox remote-start`, the command of one ssh session that owns it: when the session
--- ends, however it ends, the remote sandbox is terminated, and its `timeout` is enforced by the
--- remote keeper. This machine reaches sandboxd and the notebook kernels through unix sockets
--- that ssh forwards (one ControlMaster connection), so every request is signed with the
--- sandbox's key and carried inside the encrypted, authenticated SSH channel.
---
--- Three roles, all in this file:
---   the handle side  (`start`, `teardown`, ...): called by seer.sandbox for backend = "ssh";
---   the link         (`seer sandbox ssh-link`): a child of the script that owns the ssh
---                    connection, relays sandboxd's socket and forwards kernel sockets;
---   the remote side  (`seer sandbox remote-start`): runs on the remote host.
---@class seerbackends.ssh
local M = {}

local json = require "seer.json"
local net = require "seer.net"
local process = require "seer.process"
local sb = require "seer.core.sandbox"
local core = require "seer.core.host"
local safe_fs = require "seer.safe_fs"
-- What the link decodes of the remote side (replies, events): counted before anything is built
-- (a 60 MB reply of tiny values took the link to 3 GB)
local REMOTE_JSON = { max_values = 1000000 }

---SandboxConfig.ssh (docs/backends.md).
---@class seerbackends.ssh.Config
---@field host string host name, address or a Host alias of your ssh config
---@field port? integer
---@field user? string
---@field identity_file? string private key (IdentitiesOnly)
---@field known_hosts? string known_hosts file; with it, the host key must be in it (StrictHostKeyChecking=yes)
---@field config_file? string an ssh_config to use instead of ~/.ssh/config
---@field remote_dir? string where seer is copied on the host (default .cache/seer/remote, under the remote home)
---@field remote_state_dir? string the remote sandboxes' state folder (default the remote user's)
---@field connect_timeout? number seconds (default 15)
---@field keepalive? number seconds between keepalives; 3 missed ones end the connection (default 5)
---@field start_timeout? number seconds the remote sandbox may take to start (default 300)

---The fields of SandboxConfig.ssh and their Lua types.
M.FIELDS = {
  host = "string", port = "number", user = "string", identity_file = "string", known_hosts = "string",
  config_file = "string", remote_dir = "string", remote_state_dir = "string", connect_timeout = "number",
  keepalive = "number", start_timeout = "number",
}

local DEFAULT_REMOTE_DIR = ".cache/seer/remote"
local SANDBOX_RUN = "/run/seer"
local MAX_LINE = 65536          -- the most the host reads of one line from the remote side
local NEED_COPY = 97            -- remote-start's wrapper exits with this when seer is missing there

---------------------------------------------------------------------------------------------
-- configuration

local function sorted(t)
  local k = {}
  for name in pairs(t) do k[#k + 1] = name end
  table.sort(k)
  return k
end

---What every backend's check_config does first: t must be a table (else `example` says how it
---looks), each name one of fields, each value of its Lua type. Returns a copy of t, or nil and
---what is wrong ("<kind>: unknown field x; valid fields: ...", "<kind>.x must be a string, ...").
---@param kind string the SandboxConfig field ("ssh", "slurm", ...)
---@param t any
---@param fields table<string, string> name -> Lua type
---@param example string
---@return table|nil copy, string|nil why
function M.check_fields(kind, t, fields, example)
  if type(t) ~= "table" then return nil, ("%s must be a table: %s"):format(kind, example) end
  for k, v in pairs(t) do
    local want = fields[k]
    if not want then return nil, ("%s: unknown field %s; valid fields: %s"):format(kind, tostring(k), table.concat(sorted(fields), ", ")) end
    if type(v) ~= want then return nil, ("%s.%s must be a %s, not a %s"):format(kind, k, want, type(v)) end
  end
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

---A progress line on a terminal ("seer: ..."); nothing otherwise.
---@param text string
function M.say(text)
  -- the text carries what a remote side said (a scheduler's reasons, a container's progress):
  -- shown, never obeyed as terminal commands
  if require("ffi").C.isatty(2) == 1 then io.stderr:write("seer: ", require("seer.terminal").safe(tostring(text)), "\n") end
end

-- A path for ssh's own options: non-empty, no newline, not an option.
local function plain_path(v) return #v > 0 and #v < 4096 and not v:find("[%c]") and v:sub(1, 1) ~= "-" end

---Checks SandboxConfig.ssh; returns the normalized table, or nil and what is wrong (the message
---starts with the field's name).
---@param t any
---@return table|nil ssh, string|nil why
function M.check_config(t)
  local s, why = M.check_fields("ssh", t, M.FIELDS, 'ssh = {host = "gpu1.lab.org", user = "me", identity_file = "~/.ssh/id_ed25519"}')
  if not s then return nil, why end
  if not s.host then return nil, 'ssh.host is required (a host name, an address or a Host alias of your ssh config)' end
  -- The host and user reach ssh's command line: letters, digits and . _ - : only, never an option.
  if not s.host:match("^[%w][%w._:-]*$") or #s.host > 253 then
    return nil, ("ssh.host %q is not a host name or address (letters, digits, '.', '-', '_', ':')"):format(s.host)
  end
  if s.user and (not s.user:match("^[%w_][%w._-]*$") or #s.user > 64) then
    return nil, ("ssh.user %q is not a user name"):format(s.user)
  end
  if s.port and (s.port ~= math.floor(s.port) or s.port < 1 or s.port > 65535) then
    return nil, ("ssh.port must be an integer 1..65535, not %s"):format(tostring(s.port))
  end
  for _, k in ipairs({ "identity_file", "known_hosts", "config_file" }) do
    if s[k] and not plain_path(s[k]) then return nil, ("ssh.%s %q is not a usable path"):format(k, s[k]) end
  end
  for _, k in ipairs({ "remote_dir", "remote_state_dir" }) do
    -- These go into a remote shell command (quoted), and remote_state_dir holds unix sockets.
    if s[k] and (not s[k]:match("^[%w._/~+-]+$") or s[k]:find("%.%.") or #s[k] > 200) then
      return nil, ("ssh.%s %q must be a plain path (letters, digits, '.', '_', '-', '/', '~'; no '..')"):format(k, s[k])
    end
  end
  for _, k in ipairs({ "connect_timeout", "keepalive", "start_timeout" }) do
    if s[k] and (s[k] <= 0 or s[k] ~= s[k] or s[k] == math.huge) then
      return nil, ("ssh.%s must be a positive number of seconds"):format(k)
    end
  end
  s.remote_dir = s.remote_dir or DEFAULT_REMOTE_DIR
  s.connect_timeout = s.connect_timeout or 15
  s.keepalive = s.keepalive or 5
  s.start_timeout = s.start_timeout or 300
  return s
end

-- ~ at the start of a host-side path is this user's home.
local function expand(p)
  if p and p:sub(1, 2) == "~/" then return (os.getenv("HOME") or "") .. p:sub(2) end
  return p
end

-- The ssh command line shared by every call: no prompts, the sandbox's keepalive, this
-- config's identity and known hosts.
local function ssh_argv(s, extra)
  local a = { "ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=" .. math.ceil(s.connect_timeout),
              "-o", "ServerAliveInterval=" .. math.ceil(s.keepalive), "-o", "ServerAliveCountMax=3",
              "-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindUnlink=yes", "-o", "LogLevel=ERROR" }
  if s.config_file then a[#a + 1] = "-F"; a[#a + 1] = expand(s.config_file) end
  if s.port then a[#a + 1] = "-p"; a[#a + 1] = tostring(math.floor(s.port)) end
  if s.user then a[#a + 1] = "-l"; a[#a + 1] = s.user end
  if s.identity_file then
    a[#a + 1] = "-i"; a[#a + 1] = expand(s.identity_file)
    a[#a + 1] = "-o"; a[#a + 1] = "IdentitiesOnly=yes"
  end
  if s.known_hosts then
    a[#a + 1] = "-o"; a[#a + 1] = "UserKnownHostsFile=" .. expand(s.known_hosts)
    a[#a + 1] = "-o"; a[#a + 1] = "StrictHostKeyChecking=yes"
  end
  for _, x in ipairs(extra or {}) do a[#a + 1] = x end
  return a
end
M.ssh_argv = ssh_argv

-- Writes to a child's stdin whose reader may be gone: SIGPIPE is blocked for the write and a
-- pending one taken back (as engine/mcp/client_stdio.c does), so a child that died makes the
-- write fail instead of killing this process. Returns bytes written, or nil.
pcall(require("ffi").cdef, [[
  typedef struct { unsigned long v[16]; } seer_ssh_sigset_t;
  int sigemptyset(seer_ssh_sigset_t *set);
  int sigaddset(seer_ssh_sigset_t *set, int sig);
  int sigpending(seer_ssh_sigset_t *set);
  int sigismember(const seer_ssh_sigset_t *set, int sig);
  int pthread_sigmask(int how, const seer_ssh_sigset_t *set, seer_ssh_sigset_t *old);
  int sigtimedwait(const seer_ssh_sigset_t *set, void *info, const void *timeout);
]])
local function pipe_write(p, data)
  local C = require("ffi").C
  local ffi = require "ffi"
  local set, old, pend = ffi.new("seer_ssh_sigset_t"), ffi.new("seer_ssh_sigset_t"), ffi.new("seer_ssh_sigset_t")
  C.sigemptyset(set)
  C.sigaddset(set, 13)
  C.sigpending(pend)
  local was_pending = C.sigismember(pend, 13) == 1
  C.pthread_sigmask(0 --[[SIG_BLOCK]], set, old)
  local ok, w = pcall(p.write, p, data)
  if not was_pending then
    C.sigpending(pend)
    if C.sigismember(pend, 13) == 1 then
      local zero = ffi.new("long[2]")
      C.sigtimedwait(set, nil, zero)
    end
  end
  C.pthread_sigmask(2 --[[SIG_SETMASK]], old, nil)
  if not ok then return nil end
  return w
end

M._pipe_write = pipe_write

local function shq(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

---------------------------------------------------------------------------------------------
-- small process helpers (sb.spawn: pipes for stdin, stdout and stderr)

-- Runs argv to its end; stdin is written first. Returns code, stdout, stderr (each bounded).
local function run(argv, opts)
  opts = opts or {}
  local p, err = sb.spawn{ argv = argv, stdin = opts.stdin ~= nil }
  if not p then return nil, "", err end
  local out, errs, nout, nerr = {}, {}, 0, 0
  local pending = opts.stdin
  local t0 = process.now_ms()
  local st, ended_at
  while true do
    if pending then
      if pending == "" then p:close_stdin(); pending = nil
      else
        local w = pipe_write(p, pending)
        if not w then pending = nil; p:close_stdin()
        else pending = pending:sub(w + 1) end
      end
    end
    local o, e = p:fds()
    local fds = {}
    if o >= 0 then fds[#fds + 1] = o end
    if e >= 0 then fds[#fds + 1] = e end
    if #fds > 0 then net.poll(fds, pending and 5 or (st and 5 or 50)) else process.sleep_ms(2) end
    for _, which in ipairs({ "out", "err" }) do
      local d = p:read(which)
      while d and d ~= "" do
        if which == "out" then
          if nout < (opts.max_output or 1048576) then out[#out + 1] = d; nout = nout + #d end
        elseif nerr < 65536 then errs[#errs + 1] = d; nerr = nerr + #d end
        d = p:read(which)
      end
    end
    if not st then st = p:poll(); if st then ended_at = process.now_ms() end end
    if st and (#fds == 0 or process.now_ms() - ended_at > 100) then
      p:close()
      return st.code, table.concat(out), table.concat(errs)
    end
    if not st and opts.timeout_ms and process.now_ms() - t0 > opts.timeout_ms then p:kill(sb.SIGKILL) end
  end
end

M._run = run
pcall(require("ffi").cdef, "int isatty(int fd);")
pcall(require("ffi").cdef, "int chmod(const char *path, unsigned mode);")
local function tty() return require("ffi").C.isatty(2) == 1 end

---------------------------------------------------------------------------------------------
-- what is copied to the remote host: the seer binary and the Lua tree, named by their hash

local bundle_cache
-- The seer binary and lua/ as one deterministic tar (sorted names, fixed owner and times), so
-- its sha256 names a version: `bundle().hash`, and `bundle().tar_cmd` (a shell command) writes it.
local function bundle()
  local exe = require("seer.jupyter").seer_binary()
  local lua_dir = core.realpath(core.lua_dir()) or core.lua_dir()
  local st = safe_fs.lstat(exe)
  local key = exe .. ":" .. tostring(st and st.mtime) .. ":" .. tostring(st and st.size)
  if bundle_cache and bundle_cache.key == key then return bundle_cache end
  local exe_dir, exe_name = exe:match("^(.*)/([^/]+)$")
  local lua_parent, lua_name = lua_dir:match("^(.*)/([^/]+)$")
  local argv = { "tar", "--create", "--file", "-", "--sort=name", "--mtime=@0", "--owner=0", "--group=0",
                 "--numeric-owner", "--mode=go-w", "--exclude=*.swp",
                 "--transform=s,^" .. exe_name:gsub("[^%w]", "\\%0") .. "$,seer,",
                 "--transform=s,^" .. lua_name:gsub("[^%w]", "\\%0") .. "/,lua/,",
                 "-C", exe_dir, exe_name, "-C", lua_parent, lua_name }
  local q = {}
  for i, a in ipairs(argv) do q[i] = shq(a) end
  local tar_cmd = table.concat(q, " ")
  local code, out, err = run({ "/bin/sh", "-c", tar_cmd .. " | sha256sum" })
  local hash = code == 0 and (err or "") == "" and out:match("^(%x+)")
  if not hash then error("ssh backend: cannot pack seer for the remote host: " .. tostring(err), 0) end
  local size = (st and st.size or 0)
  bundle_cache = { key = key, tar_cmd = tar_cmd, hash = hash:sub(1, 32), size = size }
  return bundle_cache
end
M._bundle = bundle

-- Copies the bundle to remote_dir/<hash> on the host (atomically: unpacked beside, renamed).
local function copy_bundle(s, b, say)
  local dir = s.remote_dir
  local final = dir .. "/" .. b.hash
  local script = table.concat({
    "set -e",
    "mkdir -p " .. shq(dir),
    "T=$(mktemp -d " .. shq(dir .. "/.incoming.XXXXXX") .. ")",
    'trap \'rm -rf "$T"\' EXIT',
    'tar -x -f - -C "$T"',
    'chmod 755 "$T"',
    'test -x "$T/seer"',
    'mv -T "$T" ' .. shq(final) .. ' 2>/dev/null || test -x ' .. shq(final .. "/seer"),
  }, "; ")
  say(("copying seer (%.1f MiB and its Lua tree) to %s:%s"):format(b.size / 1048576, s.host, final))
  local t0 = process.now_ms()
  local q = {}
  for i, a in ipairs(ssh_argv(s, { "--", s.host, script })) do q[i] = shq(a) end
  local code, _, err = run({ "/bin/sh", "-c", b.tar_cmd .. " | " .. table.concat(q, " ") }, { timeout_ms = 600000 })
  if code ~= 0 then
    error(("ssh backend: copying seer to %s failed (ssh exited with %s): %s"):format(s.host, tostring(code),
      (err or ""):gsub("%s+$", "")), 0)
  end
  say(("copied in %.1f s"):format((process.now_ms() - t0) / 1000))
end

---------------------------------------------------------------------------------------------
-- validating what the remote side says (it is as untrusted as the sandbox)

local function valid_remote_path(p)
  return type(p) == "string" and #p <= 200 and p:sub(1, 1) == "/" and p:match("^[%w._/+-]+$") and not p:find("%.%.")
    and not p:find("//")
end

---Checks remote-start's first line: returns the fields the host uses, or nil and why.
---@param line string
---@return table|nil info, string|nil why
function M.check_ready(line)
  if type(line) ~= "string" or #line > MAX_LINE then return nil, "the line is too long" end
  local ok, r = pcall(json.decode, line)
  if not ok or type(r) ~= "table" then return nil, "it is not a JSON object" end
  if r.error ~= nil then
    return nil, "the remote sandbox did not start: " .. (type(r.error) == "string" and r.error:sub(1, 4000) or "(no message)")
  end
  if r.ready ~= true then return nil, "it is not a ready line" end
  if type(r.id) ~= "string" or not r.id:match("^[%w_.-]+$") or r.id:sub(1, 1) == "." or #r.id > 100 then return nil, "id is not a sandbox id" end
  if type(r.key) ~= "string" or #r.key < 16 or #r.key > 256 or not r.key:match("^[%w-]+$") then return nil, "key is not a key" end
  if not valid_remote_path(r.run_dir) then return nil, "run_dir is not a plain absolute path" end
  if #(r.run_dir .. "/kernel-xxxxxxxx-10-5") > 104 then return nil, "run_dir is too long for unix sockets" end
  if r.pid ~= nil and (type(r.pid) ~= "number" or r.pid ~= math.floor(r.pid)) then return nil, "pid is not an integer" end
  local models = {}
  if r.models ~= nil then
    if type(r.models) ~= "table" or #r.models > 1000 then return nil, "models is not a list" end
    for i, m in ipairs(r.models) do
      if type(m) ~= "table" then return nil, "models[" .. i .. "] is not an object" end
      for _, k in ipairs({ "path", "base_path" }) do
        local v = m[k]
        if v ~= nil and (type(v) ~= "string" or #v > 200 or not v:match("^/models/[%w_.-]+$") or v:find("%.%.")) then
          return nil, ("models[%d].%s is not a path under /models"):format(i, k)
        end
      end
      if m.path == nil then return nil, ("models[%d] has no path"):format(i) end
      if m.env_var ~= nil and (type(m.env_var) ~= "string" or #m.env_var > 200 or not m.env_var:match("^[%w_]+$")) then
        return nil, ("models[%d].env_var is not a variable name"):format(i)
      end
      models[i] = { path = m.path, base_path = m.base_path, env_var = m.env_var }
    end
  end
  return { id = r.id, key = r.key, run_dir = r.run_dir, pid = r.pid, models = models }
end

---------------------------------------------------------------------------------------------
-- the workspace: a Workspace is installed (by seer.workspace, seer.execution) into a folder on
-- this machine, `sandbox.workspace_dir`; for a remote sandbox that folder is a mirror whose new
-- and changed files are uploaded to /workspace through sandboxd (at start{workspace}, and by
-- the link before each kernel starts). Only this machine writes the mirror.

pcall(require("ffi").cdef, "int access(const char *path, int mode);")

---Uploads what is new or changed in `dir` (size and mtime differ from `seen`) to /workspace.
---@param dir string the host-side mirror
---@param seen table<string, string> rel path -> "size:mtime" of what was uploaded (updated)
---@param request fun(op: string, content: table, data?: string) sends a request and waits for its reply (raises on error)
---@return integer files, integer bytes
function M.upload_workspace(dir, seen, request)
  local files, bytes = 0, 0
  local function walk(abs, rel, depth)
    if depth > 32 then return end
    for _, e in ipairs(sb.listdir(abs) or {}) do
      local a, r = abs .. "/" .. e.name, rel == "" and e.name or (rel .. "/" .. e.name)
      if e.type == "dir" then
        if not seen[r .. "/"] then request("ensure_dir", { path = "/workspace/" .. r }); seen[r .. "/"] = "dir" end
        walk(a, r, depth + 1)
      elseif e.type == "file" then
        local sig = tostring(e.size) .. ":" .. tostring(e.mtime)
        if seen[r] ~= sig then
          local f = io.open(a, "rb")
          local data = f and f:read("*a")
          if f then f:close() end
          if data then
            local x = require("ffi").C.access(a, 1) == 0
            request("write_file", { path = "/workspace/" .. r, mode = x and tonumber("755", 8) or tonumber("644", 8) }, data)
            seen[r] = sig
            files, bytes = files + 1, bytes + #data
          end
        end
      end
    end
  end
  walk(dir, "", 0)
  return files, bytes
end

---After start{workspace = ...}: uploads the mirror.
---@param self table a started ssh sandbox
function M.sync_workspace(self)
  self.uploaded = self.uploaded or {}
  M.upload_workspace(self.workspace_dir, self.uploaded, function(op, content, data)
    self.client:request(op, content, { buffers = data and { data } or nil, timeout_ms = 600000 })
  end)
end

---------------------------------------------------------------------------------------------
-- waiting: a start run by seer.backends.start_all (in a coroutine) hands the turn to the
-- other starts instead of blocking

M.parallel = setmetatable({}, { __mode = "k" })

---Waits until fd is readable or ms passed; inside a start_all coroutine, yields instead.
---@param fd integer (-1: no fd)
---@param ms integer
function M.wait_fd(fd, ms)
  local co = coroutine.running()
  if co and M.parallel[co] then
    if fd >= 0 then net.poll({ fd }, 0) end
    coroutine.yield()
    return
  end
  if fd >= 0 then net.poll({ fd }, ms) else process.sleep_ms(ms) end
end

---------------------------------------------------------------------------------------------
-- the handle side (in the script): seer.sandbox calls these for backend = "ssh"

-- The config the remote side gets: every field but backend and ssh, as plain JSON values.
local function remote_config(c)
  local t = require("seer.sandbox").config_table(c)
  -- the backend and every backend's own fields (the remote side runs a local sandbox)
  for _, k in ipairs({ "backend", "ssh", "slurm", "podman", "docker", "kubernetes" }) do t[k] = nil end
  if t.gpu == nil then t.gpu_count = nil end
  -- the notebook server runs here, not there
  t.execution_mode = "cli"
  for _, k in ipairs({ "models", "system_packages", "secrets", "repos", "local_files", "local_dirs" }) do
    if t[k] and #t[k] == 0 then t[k] = nil end
  end
  if t.env and next(t.env) == nil then t.env = nil end
  if t.limits and next(t.limits) == nil then t.limits = nil end
  return t
end

local function say_progress(text)
  -- the remote side's words (its seer, a container, srun): no terminal commands
  if tty() then io.stderr:write("seer: ", require("seer.terminal").safe(tostring(text)), "\n") end
end

---Starts the sandbox `self` (a seer.sandbox Sandbox whose config.backend is "ssh") on its host.
---Fills in the fields the rest of seer.sandbox uses: sandbox_id, state_dir, run_dir, log_dir,
---workspace_dir, key, client, keeper_pid (the link's pid).
---@param self table
---@param opts {name?: string}
---@param via? {ssh: table, wrap?: string[], env?: table<string, string>, on_end?: string[], transport?: {argv: string[], map: string[]}} another backend's
---way in: the ssh fields (host filled in), a command remote-start runs under (srun ...), variables for
---it, a command the link runs here when the sandbox has ended, however it ended (scancel), and a
---transport instead of ssh: the command that runs remote-start and {folder inside, folder here} of
---the state folder the remote side shares with this machine (podman)
function M.start(self, opts, via)
  local S = require "seer.sandbox"
  local c = self.config
  local s = via and via.ssh or c.ssh
  for _, k in ipairs({ "identity_file", "known_hosts", "config_file" }) do
    if s[k] then
      local st = safe_fs.lstat(core.realpath(expand(s[k])) or expand(s[k]))
      if not st or st.type ~= "file" then error(("SandboxConfig.ssh.%s: %s is not a file"):format(k, s[k]), 0) end
    end
  end
  if #c.secrets > 0 then
    -- The remote side reads secrets from its own environment; they are sent over the channel.
    for i, name in ipairs(c.secrets) do
      if os.getenv(name) == nil then
        error(("SandboxConfig.secrets[%d]: %s is not set in this environment"):format(i, name), 0)
      end
    end
  end
  local t0 = process.now_ms()
  local name = opts.name or "sandbox"
  local id = (name:gsub("[^%w_.-]", "-"):gsub("^[.-]+", ""):sub(1, 40))
  if id == "" then id = "sandbox" end
  id = id .. "-" .. (net.new_key():gsub("[^%x]", "")):sub(1, 6)
  if via and type(via.id) == "string" then id = via.id end
  self.sandbox_id = id
  self.name = opts.name
  self.state_dir = S.state_root() .. "/" .. id
  self.run_dir = self.state_dir .. "/run"
  self.log_dir = self.state_dir .. "/logs"
  self.workspace_dir = self.state_dir .. "/workspace"
  if #(self.run_dir .. "/kernel-xxxxxxxx-10-5") > 100 then
    error(("the sandbox directory %s is too deep for unix sockets (108 bytes); set SEER_SANDBOX_DIR to a shorter path"):format(self.state_dir), 0)
  end
  for _, d in ipairs({ self.run_dir, self.log_dir, self.workspace_dir }) do process.mkdir_p(d) end
  require("ffi").C.chmod(self.state_dir, tonumber("700", 8))

  local secrets = {}
  for _, n in ipairs(c.secrets) do secrets[n] = os.getenv(n) end
  local b = bundle()
  local rconfig = remote_config(c)
  if via and via.real_model_paths then
    -- the remote side sees this machine's files at the same real paths (a container's volumes)
    for _, m in ipairs(rconfig.models or {}) do
      for _, k in ipairs({ "name", "base_model" }) do
        local real = type(m[k]) == "string" and core.realpath(m[k])
        local st = real and safe_fs.lstat(real)
        if st and st.type == "dir" then m[k] = real end
      end
    end
  end
  local req = {
    ssh = s, id = id, state_dir = self.state_dir, hash = b.hash, name = opts.name,
    config = rconfig, secrets = secrets, owner_pid = process.getpid(),
    wrap = via and via.wrap, env = via and via.env, on_end = via and via.on_end, transport = via and via.transport,
    backend = c.backend,
  }
  local link, err = sb.spawn{ argv = { require("seer.jupyter").seer_binary(), "sandbox", "ssh-link" }, stdin = true }
  if not link then error("ssh backend: cannot start the link process: " .. tostring(err), 0) end
  self.link = link
  self.keeper_pid = link:pid()
  local line = json.encode(req) .. "\n"
  while #line > 0 do
    local w = pipe_write(link, line)
    if not w then error("ssh backend: the link process ended at once", 0) end
    line = line:sub(w + 1)
    if #line > 0 then process.sleep_ms(1) end
  end
  -- The link answers with progress lines, then one ready line (or an error).
  local buf = ""
  local deadline = process.now_ms() + (s.start_timeout + s.connect_timeout * 2 + 60) * 1000
  local ready
  while not ready do
    local o = link:fds()
    M.wait_fd(o, 100)
    local d = link:read("out")
    while d and d ~= "" do buf = buf .. d; d = link:read("out") end
    while true do
      local nl = buf:find("\n", 1, true)
      if not nl then break end
      local l = buf:sub(1, nl - 1)
      buf = buf:sub(nl + 1)
      local okj, msg = pcall(json.decode, l)
      if okj and type(msg) == "table" then
        if msg.progress then
          say_progress(tostring(msg.progress))
          -- what the start said while it waited (a queue's or a scheduler's reasons), bounded
          self.start_progress = self.start_progress or {}
          if #self.start_progress < 200 then self.start_progress[#self.start_progress + 1] = tostring(msg.progress):sub(1, 1000) end
          -- a copy in progress is not a hang: the wait starts again
          deadline = process.now_ms() + (s.start_timeout + s.connect_timeout * 2 + 600) * 1000
        elseif msg.error then error(tostring(msg.error), 0)
        elseif msg.ready then ready = msg end
      end
    end
    if #buf > MAX_LINE then error("ssh backend: the link process wrote a line that is too long", 0) end
    if not ready then
      local st = link:poll()
      if st and d == nil then
        local e = link:read("err") or ""
        error(("ssh backend: the link process ended (code %s) before the sandbox was ready%s"):format(tostring(st.code),
          e ~= "" and (": " .. e:sub(1, 2000)) or ""), 0)
      end
      if process.now_ms() > deadline then error(("ssh backend: %s did not get ready in time"):format(s.host), 0) end
      if core.interrupted() then error("interrupted", 0) end
    end
  end
  self.remote = { host = s.host, id = ready.remote_id, run_dir = ready.remote_run, ssh = s }
  -- Model handles: names from this config, paths inside the sandbox from the remote side
  -- (checked by the link: under /models, plain names).
  local handles = {}
  for i, m in ipairs(c.models) do
    local rm = type(ready.models) == "table" and ready.models[i] or {}
    handles[i] = { name = m.name, var_name = m.var_name, hidden = m.hidden, is_peft = m.is_peft, base_model = m.base_model,
                   revision = m.revision, path = rm.path, base_path = rm.base_path, env_var = rm.env_var }
    if type(handles[i].path) ~= "string" then error(("ssh backend: the remote side gave no path for models[%d]"):format(i), 0) end
  end
  self.model_handles = handles
  self.key = ready.key
  self.limits = {}
  local endpoint = "ipc://" .. self.run_dir .. "/sandboxd.sock"
  self.client = S.connect{ endpoint = endpoint, key = self.key, alive = function() return self:_alive() end }
  local r = self.client:request("ping", {}, { timeout_ms = 30000 })
  self.sandboxd_pid = r.pid
  self.start_ms = process.now_ms() - t0
  if c.execution_mode == "notebook" then
    local okx, url = pcall(function() return require("seer.execution").server_url() end)
    if okx then self.jupyter_url = url end
  end
  return self
end

---The remote sandbox's cgroup figures as last reported (see Link:write_stats), with `seq`
---counting the reports; {} before the first.
---@param self table
---@return table
function M.stats(self)
  local root = safe_fs.root(self.state_dir, "the sandbox state folder")
  local ok, t = pcall(json.decode, root:read("stats.json", { max = 4096 }) or "")
  local c = ok and M.clean_stats(t) or {}
  if ok and type(t) == "table" and type(t.seq) == "number" then c.seq = t.seq end
  return c
end

---Why a started ssh sandbox is no longer usable, or nil while it is.
---@param self table
---@return string|nil
function M.ended(self)
  local st = self.link_status
  if not st then
    st = self.link:poll()
    if st then self.link_status = st end
  end
  local root = safe_fs.root(self.state_dir, "the sandbox state folder")
  local text = root:read("status.json", { max = 65536 })
  local ok, s = pcall(json.decode, text or "")
  if ok and type(s) == "table" and type(s.why) == "string" then
    return ("the sandbox %s on %s has ended: %s"):format(self.sandbox_id, self.remote and self.remote.host or "?", s.why)
  end
  if st then
    return ("the sandbox %s on %s has ended: its ssh link %s (seer sandbox terminate, or killed)"):format(self.sandbox_id,
      self.remote and self.remote.host or "?",
      (st.signal and st.signal ~= 0) and ("was killed by signal " .. st.signal) or ("exited with code " .. tostring(st.code)))
  end
  return nil
end

---Stops the remote sandbox and waits (bounded) until the link reports it gone.
---@param self table
function M.teardown(self)
  if self.client then self.client:close(); self.client = nil end
  local link = self.link
  if link and not self.link_status then
    pipe_write(link, "terminate\n")
    link:close_stdin()
    local deadline = process.now_ms() + 20000
    while true do
      local st = link:poll()
      if st then self.link_status = st; break end
      if process.now_ms() > deadline then link:kill(sb.SIGKILL); self.link_status = { code = -1 }; break end
      local o = link:fds()
      if o >= 0 then net.poll({ o }, 20); local d = link:read("out"); while d and d ~= "" do d = link:read("out") end
      else process.sleep_ms(10) end
    end
  end
  if link then link:close() end
end

---------------------------------------------------------------------------------------------
-- the link: `seer sandbox ssh-link` (a child of the script; reads its request on stdin)

local Link = {}
Link.__index = Link

local function emit(t)
  io.stdout:write(json.encode(t), "\n")
  io.stdout:flush()
end

function Link:log(fmt, ...)
  local f = io.open(self.state_dir .. "/logs/sandbox.log", "a")
  if f then f:write(os.date("!%Y-%m-%dT%H:%M:%SZ "), "ssh-link: ", fmt:format(...), "\n"); f:close() end
end

-- Reads from the ssh master's stdout and stderr (bounded); returns complete stdout lines.
function Link:pump_ssh()
  local p = self.ssh
  local lines = {}
  -- Reading stops at MAX_LINE bytes without a newline (the line is refused) and at 1 MiB a
  -- call, so a remote side that writes without end costs bounded memory and time.
  local budget = 1048576
  for _, which in ipairs({ "out", "err" }) do
    local d = p:read(which)
    while d and d ~= "" do
      budget = budget - #d
      if which == "out" then
        -- one scan by index, then one copy of the rest (copying the rest after every newline
        -- cost a chunk of bare newlines ~64K copies of up to 32 KiB each)
        local buf, pos = self.out .. d, 1
        while true do
          local nl = buf:find("\n", pos, true)
          if not nl then break end
          if #lines < 1000 then lines[#lines + 1] = buf:sub(pos, nl - 1) end
          pos = nl + 1
        end
        self.out = pos > 1 and buf:sub(pos) or buf
        if #self.out > MAX_LINE then self.out = ""; lines[#lines + 1] = "{\"overlong\":true}" end
      elseif #self.err < 65536 then self.err = self.err .. d end
      if budget <= 0 then break end
      d = p:read(which)
    end
  end
  return lines
end

function Link:ssh_write(text)
  while #text > 0 do
    local w = pipe_write(self.ssh, text)
    if not w then return false end
    text = text:sub(w + 1)
    if #text > 0 then process.sleep_ms(1) end
  end
  return true
end

-- Starts the master connection running remote-start; returns the exit code when it ended at
-- once (NEED_COPY: seer is not there yet), else nil once the ready line came.
function Link:connect()
  local s = self.req.ssh
  local prefix = s.remote_state_dir and ("SEER_SANDBOX_DIR=" .. shq(s.remote_state_dir) .. " ") or ""
  -- another backend's wrapper (srun into a Slurm job's allocation) and its variables
  for k, v in pairs(type(self.req.env) == "table" and self.req.env or {}) do
    if type(k) == "string" and k:match("^[%a_][%w_]*$") and type(v) == "string" then prefix = prefix .. k .. "=" .. shq(v) .. " " end
  end
  if type(self.req.wrap) == "table" then
    local q = {}
    for i, a in ipairs(self.req.wrap) do q[i] = shq(tostring(a)) end
    self.wrap_cmd = table.concat(q, " ")
  end
  local dir = s.remote_dir .. "/" .. self.req.hash
  local cmd = ("test -x %s || exit %d; %sexec %s%s sandbox remote-start"):format(shq(dir .. "/seer"), NEED_COPY, prefix,
    self.wrap_cmd and (self.wrap_cmd .. " ") or "", shq(dir .. "/seer"))
  self.ctl = self.state_dir .. "/ssh.ctl"
  local argv = ssh_argv(s, { "-M", "-S", self.ctl, "-o", "ControlPersist=no", "--", s.host, cmd })
  local t = self.req.transport
  if type(t) == "table" and type(t.argv) == "table" then
    -- another backend's transport (podman run -i ... seer sandbox remote-start): the same
    -- stdin/stdout protocol, no ssh, seer already in the image
    argv = {}
    for i, a in ipairs(t.argv) do argv[i] = tostring(a) end
  end
  local p, err = sb.spawn{ argv = argv, stdin = true }
  if not p then error("cannot run ssh: " .. tostring(err), 0) end
  self.ssh, self.out, self.err = p, "", ""
  local rc = self.req.config
  -- heartbeat_s: the link writes "ping" that often; the far side ends the sandbox when the
  -- pings stop (a partition that the far sshd would not notice for hours)
  local start = { config = rc, name = self.req.name, secrets = self.req.secrets, heartbeat_s = s.keepalive }
  self:ssh_write(json.encode(start) .. "\n")
  local deadline = process.now_ms() + (s.start_timeout + s.connect_timeout) * 1000
  while true do
    local o, e = p:fds()
    local fds = {}
    if o >= 0 then fds[#fds + 1] = o end
    if e >= 0 then fds[#fds + 1] = e end
    if #fds > 0 then net.poll(fds, 100) else process.sleep_ms(20) end
    for _, l in ipairs(self:pump_ssh()) do
      local ok, r = pcall(json.decode, l)
      if ok and type(r) == "table" and r.progress then emit({ progress = ("%s: %s"):format(s.host, tostring(r.progress):sub(1, 300)) })
      else
        local info, why = M.check_ready(l)
        if not info then error(("the remote helper on %s answered something unusable: %s"):format(s.host, why), 0) end
        return info
      end
    end
    local st = p:poll()
    if st then
      for _ = 1, 20 do self:pump_ssh(); process.sleep_ms(5) end
      if st.code == NEED_COPY then return nil, NEED_COPY end
      local e = self.err:gsub("%s+$", "")
      local t = self.req.transport
      local what = type(t) == "table" and type(t.label) == "string" and t.label or ("ssh to " .. s.host)
      error(("%s failed (%s exited with %s)%s"):format(what, type(t) == "table" and tostring(t.argv[1]) or "ssh", tostring(st.code),
        e ~= "" and (": " .. e:sub(1, 4000)) or ""), 0)
    end
    if process.now_ms() > deadline then
      p:kill(sb.SIGKILL)
      error(("the sandbox on %s did not start within %d s (ssh.start_timeout)"):format(s.host, s.start_timeout), 0)
    end
  end
end

-- Forwards a local unix socket to a remote one through the master connection.
function Link:forward(local_path, remote_path)
  local s = self.req.ssh
  local t = self.req.transport
  if type(t) == "table" and type(t.map) == "table" then
    -- The remote folder is a volume of this machine (a container's state folder, which the
    -- container writes): a relay here to the socket's path there, as a local sandbox's sockets
    -- are reached in its run folder. Not a symbolic link: whoever connected through one would
    -- follow whatever the container put at the path (a link to a socket of the host).
    local inside, here = t.map[1], t.map[2]
    if type(inside) ~= "string" or type(here) ~= "string" or remote_path:sub(1, #inside + 1) ~= inside .. "/"
       or remote_path:find("/../", 1, true) or remote_path:sub(-3) == "/.." then
      return nil, "the socket " .. remote_path .. " is not in the shared folder"
    end
    -- beneath the shared folder: no link the container planted in a folder on the way (its run
    -- folder swapped for a link to a host folder) is followed, on any connect
    local okr, relay = pcall(net.relay, local_path, "ipc://" .. here .. remote_path:sub(#inside + 1), { beneath = here })
    if not okr then return nil, tostring(relay) end
    self.relays = self.relays or {}
    self.relays[#self.relays + 1] = relay
    self.forwards[#self.forwards + 1] = local_path
    return true
  end
  if type(t) == "table" and type(t.tunnel) == "table" then
    -- a CURVE tunnel (the kubernetes backend): the transport process binds local_path and
    -- carries its connections to remote_path (seer.backends.curve_tunnel)
    local okf, ferr = require("seer.backends.curve_tunnel").request_forward(t.tunnel.ctl, t.tunnel.key, local_path, remote_path)
    if not okf then return nil, ferr end
    self.forwards[#self.forwards + 1] = local_path
    return true
  end
  local code, _, err = run(ssh_argv(s, { "-S", self.ctl, "-O", "forward", "-L", local_path .. ":" .. remote_path, "--", s.host }),
    { timeout_ms = 15000 })
  if code ~= 0 then return nil, (err or ""):gsub("%s+$", "") end
  self.forwards[#self.forwards + 1] = local_path
  return true
end

-- Checks a start_kernel reply from the remote sandboxd and forwards its sockets. Returns nil or
-- why the reply must not pass.
function Link:forward_kernel(name, content)
  local ok, c = pcall(json.decode, content, REMOTE_JSON)
  if not ok or type(c) ~= "table" then return "the reply is not JSON" end
  if c.status ~= "ok" then return nil end
  local conn = c.connection
  if type(conn) ~= "table" or conn.ip ~= SANDBOX_RUN .. "/" .. name then return "the sockets are not the ones asked for" end
  local ports = {}
  for _, k in ipairs({ "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port" }) do
    local v = conn[k]
    if v ~= nil then
      if type(v) ~= "number" or v ~= math.floor(v) or v < 1 or v > 65535 then return k .. " is not a port number" end
      ports[#ports + 1] = v
    end
  end
  for _, port in ipairs(ports) do
    local sock = ("%s-%d"):format(name, port)
    local okf, err = self:forward(self.state_dir .. "/run/" .. sock, self.remote_run .. "/" .. sock)
    if not okf then return "forwarding the kernel's socket failed: " .. err end
  end
  return nil
end

local function valid_name(n) return type(n) == "string" and #n <= 100 and n:match("^[%w_.-]+$") and n:sub(1, 1) ~= "." end

-- A services reply (the link's own poll): writes run/services/<name>.exit for each service that
-- ended, which is how the notebook server notices a kernel that died. At most 1000 names a reply
-- and MAX_EXITED in all: a remote listing 1000 new names a second wrote 1000 files a second.
M.MAX_EXITED = 10000
function Link:mirror_services(content)
  local ok, c = pcall(json.decode, content, REMOTE_JSON)
  if not ok or type(c) ~= "table" or type(c.services) ~= "table" then return end
  local root = safe_fs.root(self.state_dir .. "/run", "the sandbox's run folder")
  self.n_exited = self.n_exited or 0
  for i, sv in ipairs(c.services) do
    if i > 1000 or self.n_exited >= M.MAX_EXITED then break end
    if type(sv) == "table" and valid_name(sv.name) and sv.running == false and not self.exited[sv.name] then
      self.exited[sv.name] = true
      self.n_exited = self.n_exited + 1
      root:mkdirs("services")
      root:write("services/" .. sv.name .. ".exit", json.encode({ how = "exited", code = type(sv.exit_code) == "number" and sv.exit_code or nil }))
    end
  end
end

function Link:write_status(how, why)
  if self.status_written then return end
  self.status_written = true
  local root = safe_fs.root(self.state_dir, "the sandbox state folder")
  root:write("status.json", json.encode({ how = how, why = why }), { mode = tonumber("600", 8) })
  self:log("%s: %s", how, why)
end

-- The remote sandbox's cgroup figures, as the remote side reported them: only the known names,
-- each a finite number, written (0600, atomically) to <state>/stats.json, where the handle's
-- stats() reads them. Anything else the remote side sends is dropped.
M.STATS_FIELDS = { memory_limit = true, memory_peak = true, memory_failcnt = true, oom_kills = true,
                   pids_max_hits = true, pids_current = true }
function M.clean_stats(t)
  if type(t) ~= "table" then return nil end
  local c = {}
  for k in pairs(M.STATS_FIELDS) do
    local v = rawget(t, k)
    if type(v) == "number" and v == v and v > -2 and v < 2 ^ 62 then c[k] = v end
  end
  return c
end

function Link:write_stats(t)
  -- at most 5 writes a second: every stats line was an atomic rewrite (a remote printing them
  -- in a loop cost the link 61% of a core and the disk 5,600 rewrites a second); the last
  -- figures of a burst are kept and written on a later pass of the link's loop
  local now = process.now_ms()
  if self.stats_at and now - self.stats_at < 200 then self.stats_pending = t return end
  self.stats_at, self.stats_pending = now, nil
  local c = M.clean_stats(t)
  if not c then return end
  self.stats_seq = (self.stats_seq or 0) + 1
  c.seq = self.stats_seq
  local root = safe_fs.root(self.state_dir, "the sandbox state folder")
  pcall(root.write, root, "stats.json", json.encode(c), { mode = tonumber("600", 8) })
end

-- The relay between the local socket (this machine's clients) and the forwarded sandboxd
-- socket. Messages pass byte for byte (both sides verify and sign with the sandbox's key); only
-- start_kernel replies are looked into, to forward the kernel's sockets before the client
-- connects to them.
function Link:relay_loop()
  local key = self.key
  local router = net.socket("router", key, { max_frames = 1024 })
  router:bind("ipc://" .. self.state_dir .. "/run/sandboxd.sock")
  -- the remote sandboxd's side: a reply as large as a local sandboxd client takes (257 MiB) and a
  -- few at a time (it had libzmq's default of 1 GiB and 1000 queued)
  local dealer = net.socket("dealer", key, { max_frames = 1024, max_bytes = require("seer.sandbox").SANDBOXD_MAX_REPLY, rcvhwm = 4 })
  dealer:connect("ipc://" .. self.state_dir .. "/run/.sandboxd-remote.sock")
  local routes, nroutes, kernels = {}, 0, {}
  local own = {}
  local session = net.uuid()
  local sync_failed
  -- A reply from the remote sandboxd: to the link's own request, or routed to its client.
  local function on_reply(h, p, md, c, bufs)
    local okp, parent = pcall(json.decode, p, REMOTE_JSON)
    if self.debug then self:log("<- %s", tostring(okp and type(parent) == "table" and parent.msg_type)) end
    local pid = okp and type(parent) == "table" and parent.msg_id
    if type(pid) == "string" and own[pid] then
      local kind = own[pid]
      own[pid] = nil
      if kind == "services" then self:mirror_services(c)
      else
        local okc, cc = pcall(json.decode, c, REMOTE_JSON)
        if not okc or type(cc) ~= "table" or cc.status ~= "ok" then sync_failed = okc and type(cc) == "table" and tostring(cc.evalue) or "a bad reply" end
      end
    elseif type(pid) == "string" and routes[pid] then
      local kname = kernels[pid]
      if kname ~= nil then
        kernels[pid] = nil
        local why = "start_kernel needs a plain name"
        if kname then why = self:forward_kernel(kname, c) end
        if why then
          self:log("start_kernel %s refused: %s", tostring(kname), why)
          c = json.encode({ status = "error", ename = "RemoteError", evalue = "ssh backend: " .. why })
          bufs = nil
        end
      end
      router._s:send(routes[pid], h, p, md, c, bufs)
      routes[pid] = nil
      nroutes = nroutes - 1
    end
  end
  -- The link's own request, waited for (other replies are routed meanwhile).
  local function own_request(op, content, data)
    local hdr = net.header(op .. "_request", session)
    own[hdr.msg_id] = op
    sync_failed = nil
    dealer:send({ header = hdr, parent_header = {}, metadata = {}, content = content, buffers = data and { data } or nil })
    local deadline = process.now_ms() + 120000
    while own[hdr.msg_id] do
      if process.now_ms() > deadline then own[hdr.msg_id] = nil; error(op .. ": no answer from sandboxd", 0) end
      local idents, h, p, md, c, bufs = dealer._s:recv(200)
      if idents then on_reply(h, p, md, c, bufs) end
      if self.ssh:poll() then error("the connection ended", 0) end
    end
    if sync_failed then error(op .. ": " .. sync_failed, 0) end
  end
  local next_poll, next_ping = 0, 0
  local stdin_buf = ""
  local terminating
  while true do
    local fds = { router, dealer }
    local o = self.ssh:fds()
    if o >= 0 then fds[#fds + 1] = o end
    if not self.stdin_closed then fds[#fds + 1] = 0 end
    local ready = net.poll(fds, 200)
    local stdin_ready = false
    for _, i in ipairs(ready) do if fds[i] == 0 then stdin_ready = true end end
    -- requests from this machine
    for _ = 1, 256 do
      local idents, h, p, md, c, bufs = router._s:recv(0)
      if not idents then break end
      local okh, hdr = pcall(json.decode, h)
      if okh and type(hdr) == "table" and type(hdr.msg_id) == "string" then
        if nroutes > 100000 then routes, nroutes = {}, 0 end
        routes[hdr.msg_id] = idents
        nroutes = nroutes + 1
        if hdr.msg_type == "start_kernel_request" then
          local okc, cc = pcall(json.decode, c)
          kernels[hdr.msg_id] = okc and type(cc) == "table" and valid_name(cc.name) and cc.name or false
        end
        -- What seer.execution installed into the mirror (a notebook or CLI session's
        -- workspace) reaches /workspace before the next request, which may use it (a scan of
        -- the mirror's few entries per request; only changed files are sent).
        do
          local oku, uerr = pcall(M.upload_workspace, self.state_dir .. "/workspace", self.uploaded, own_request)
          if not oku then self:log("uploading the workspace failed: %s", tostring(uerr)) end
        end
        if self.debug then self:log("-> %s", tostring(hdr.msg_type)) end
        dealer._s:send(nil, h, p, md, c, bufs)
      end
    end
    -- replies from the remote sandboxd
    for _ = 1, 256 do
      local idents, h, p, md, c, bufs = dealer._s:recv(0)
      if not idents then break end
      on_reply(h, p, md, c, bufs)
    end
    -- the heartbeat the far side watches (one small write; skipped when the pipe is full)
    if process.now_ms() >= next_ping then
      next_ping = process.now_ms() + self.req.ssh.keepalive * 1000
      pipe_write(self.ssh, "ping\n")
    end
    -- the link's own poll of services (kernel exits)
    if process.now_ms() >= next_poll then
      next_poll = process.now_ms() + 1000
      local hdr = net.header("services_request", session)
      own[hdr.msg_id] = "services"
      dealer:send({ header = hdr, parent_header = {}, metadata = {}, content = {} })
    end
    -- the script: "terminate", or its end (EOF)
    if not self.stdin_closed and stdin_ready then
      local got = M._read_stdin()
      if got == nil then self.stdin_closed = true; terminating = terminating or "the script ended"
      else
        stdin_buf = stdin_buf .. got
        if stdin_buf:find("terminate\n", 1, true) then terminating = "terminated by the script" end
        if #stdin_buf > 4096 then stdin_buf = "" end
      end
    end
    if terminating then
      router:close(); dealer:close()
      return "terminate", terminating
    end
    -- the remote side: events, or its end
    for _, l in ipairs(self:pump_ssh()) do
      local ok, ev = pcall(json.decode, l, REMOTE_JSON)
      if ok and type(ev) == "table" and ev.event == "stats" then self:write_stats(ev.stats)
      elseif ok and type(ev) == "table" and ev.event == "ended" then
        self.remote_end = type(ev.why) == "string" and ev.why:sub(1, 4000) or "the remote sandbox ended"
        self.remote_how = type(ev.how) == "string" and ev.how:sub(1, 64) or nil
      end
    end
    -- the last figures of a burst that write_stats held back
    if self.stats_pending and process.now_ms() - (self.stats_at or 0) >= 200 then self:write_stats(self.stats_pending) end
    local st = self.ssh:poll()
    if st then
      router:close(); dealer:close()
      return "ended", st
    end
  end
end

local ffi = require "ffi"
pcall(ffi.cdef, "long read(int fd, void *buf, unsigned long n);")
-- What is on stdin now ("" when nothing), or nil at its end.
function M._read_stdin()
  local buf = ffi.new("char[4096]")
  local n = ffi.C.read(0, buf, 4096)
  if n == 0 then return nil end
  if n < 0 then return "" end
  return ffi.string(buf, n)
end

function Link:cleanup()
  if self.ssh then
    if not self.ssh:poll() then
      -- Closing the session's stdin tells remote-start to terminate; wait for it to say so.
      self:ssh_write("terminate\n")
      self.ssh:close_stdin()
      local deadline = process.now_ms() + 15000
      while not self.ssh:poll() and process.now_ms() < deadline do
        local o = self.ssh:fds()
        if o >= 0 then net.poll({ o }, 50) else process.sleep_ms(20) end
        self:pump_ssh()
      end
      if not self.ssh:poll() then self:log("the remote side did not end within 15 s; closing the connection"); self.ssh:kill(sb.SIGKILL) end
    end
    self.ssh:close()
  end
  for _, r in ipairs(self.relays or {}) do r:close() end
  for _, f in ipairs(self.forwards or {}) do os.remove(f) end
  os.remove(self.state_dir .. "/ssh.ctl")
  -- another backend's last word, run here however the sandbox ended (scancel of its job)
  if type(self.req.on_end) == "table" and #self.req.on_end > 0 and not self.on_end_done then
    self.on_end_done = true
    local argv = {}
    for i, a in ipairs(self.req.on_end) do argv[i] = tostring(a) end
    local code, _, err = run(argv, { timeout_ms = 30000 })
    if code ~= 0 then self:log("%s failed: %s", argv[1], tostring(err)) end
  end
end

local function link_main()
  -- the request: one JSON line on stdin
  local line = io.stdin:read("*l")
  local ok, req = pcall(json.decode, line or "")
  if not ok or type(req) ~= "table" or type(req.state_dir) ~= "string" or type(req.ssh) ~= "table" then
    emit({ error = "ssh-link: no usable request on stdin (this command is started by Sandbox:start, not by hand)" })
    return 2
  end
  local s, why = M.check_config(req.ssh)
  if not s then emit({ error = "ssh-link: " .. why }); return 2 end
  req.ssh = s
  local self = setmetatable({ req = req, state_dir = req.state_dir, forwards = {}, exited = {}, uploaded = {},
                              debug = os.getenv("SEER_SSH_DEBUG") == "1" }, Link)
  local okc, err = pcall(function()
    local info, code = self:connect()
    if not info and code == NEED_COPY then
      copy_bundle(s, bundle(), function(t) emit({ progress = t }) end)
      self.ssh:close()
      info, code = self:connect()
    end
    if not info then error(("seer could not be started on %s after copying it (exit %s)"):format(s.host, tostring(code)), 0) end
    if info and bundle().hash ~= req.hash then self:log("note: the local seer changed while starting") end
    self.remote_run, self.key, self.remote_id, self.models = info.run_dir, info.key, info.id, info.models
    local okf, ferr = self:forward(self.state_dir .. "/run/.sandboxd-remote.sock", info.run_dir .. "/sandboxd.sock")
    if not okf then error(("forwarding sandboxd's socket from %s failed: %s"):format(s.host, ferr), 0) end
    self:log("connected to %s: remote sandbox %s (run folder %s)", s.host, info.id, info.run_dir)
  end)
  if not okc then
    emit({ error = ("SandboxConfig{backend = %q}: %s"):format(type(req.backend) == "string" and req.backend or "ssh", tostring(err)) })
    self:cleanup()
    return 1
  end
  local sj = safe_fs.root(self.state_dir, "the sandbox state folder")
  sj:write("sandbox.json", json.encode({
    id = req.id, backend = type(req.backend) == "string" and req.backend or "ssh", host = s.host, remote_id = self.remote_id, remote_run = self.remote_run,
    keeper_pid = process.getpid(), keeper_start = sb.start_time(process.getpid()), owner_pid = req.owner_pid,
    created = os.time(), state_dir = self.state_dir, endpoint = "ipc://" .. self.state_dir .. "/run/sandboxd.sock",
    timeout = req.config.timeout,
  }), { mode = tonumber("600", 8) })
  sj:write("sandboxd.key", self.key, { mode = tonumber("600", 8) })
  emit({ ready = true, key = self.key, remote_id = self.remote_id, remote_run = self.remote_run, models = json.array(self.models) })
  local okr, how, detail = pcall(self.relay_loop, self)
  if not okr then
    -- a fault of the link itself: said in status.json and its log, and the remote ended
    self:write_status("link_failed", "the ssh link failed: " .. tostring(how))
    self:cleanup()
    return 1
  end
  if how == "terminate" then
    self:cleanup()
    self:write_status("terminated", detail)
  else
    for _ = 1, 10 do
      for _, l in ipairs(self:pump_ssh()) do
        local okj, ev = pcall(json.decode, l)
        if okj and type(ev) == "table" and ev.event == "ended" and type(ev.why) == "string" then self.remote_end = ev.why:sub(1, 4000) end
      end
      process.sleep_ms(5)
    end
    if self.remote_end then
      self:write_status("ended", self.remote_end)
    else
      local e = self.err:gsub("%s+$", "")
      local t = req.transport
      if type(t) == "table" and type(t.label) == "string" then
        -- another backend's transport (the kubernetes tunnel): its own words
        self:write_status("connection_lost", ("the connection to %s was lost (its transport exited with %s%s)"):format(t.label,
          tostring(detail.code), e ~= "" and (": " .. e:sub(1, 1000)) or ""))
      else
        self:write_status("connection_lost", ("the ssh connection to %s was lost (ssh exited with %s%s)"):format(s.host,
          tostring(detail.code), e ~= "" and (": " .. e:sub(1, 1000)) or ""))
      end
    end
    self:cleanup()
  end
  -- Nobody is left to remove the local folder when the script has gone.
  if req.owner_pid and not sb.alive(req.owner_pid) then
    local parent, id = self.state_dir:match("^(.*)/([^/]+)$")
    safe_fs.root(parent, "the sandbox state folder"):remove_tree(id)
  end
  return 0
end

---------------------------------------------------------------------------------------------
-- the remote side: `seer sandbox remote-start` (the command of the ssh session)

local function remote_main()
  local function out(t) io.stdout:write(json.encode(t), "\n"); io.stdout:flush() end
  local line = io.stdin:read("*l")
  local ok, req = pcall(json.decode, line or "")
  if not ok or type(req) ~= "table" or type(req.config) ~= "table" then
    out({ error = "remote-start: no usable request on stdin (this command is run by the ssh backend, not by hand)" })
    return 2
  end
  -- Secrets travel in the request (inside the SSH channel) and reach the sandbox by name.
  pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
  if type(req.secrets) == "table" then
    for k, v in pairs(req.secrets) do
      if type(k) == "string" and k:match("^[%a_][%w_]*$") and type(v) == "string" then ffi.C.setenv(k, v, 1) end
    end
  end
  local env = require "seer.environment"
  local sandbox
  local okc, err = pcall(function()
    local c = req.config
    c.backend = "local"
    sandbox = env.Sandbox(env.SandboxConfig(c))
    sandbox:start{ name = type(req.name) == "string" and req.name or nil }
  end)
  if not okc then out({ error = tostring(err) }); return 1 end
  local models = {}
  for i, h in ipairs(sandbox.model_handles) do
    models[i] = { path = h.path, base_path = h.base_path, env_var = h.env_var }
  end
  out({ ready = true, id = sandbox.sandbox_id, key = sandbox.key, run_dir = sandbox.run_dir, pid = sandbox.sandboxd_pid,
        models = json.array(models) })
  -- Until the host says terminate, its connection ends (EOF), or the sandbox ends by itself.
  -- Meanwhile the sandbox's cgroup figures go to the host whenever they change (the host's
  -- stats() and its out-of-memory flag on exec read them; docs/backends.md).
  local last_stats
  -- The host's link pings every heartbeat_s; three missed (plus slack) mean the connection is
  -- gone even if this side's sshd has not noticed (a partition): the sandbox ends here.
  local hb = tonumber(req.heartbeat_s)
  if hb and (hb ~= hb or hb < 0.1 or hb > 3600) then hb = nil end
  local heard = process.now_ms()
  while true do
    local got = ""
    if #net.poll({ 0 }, 200) > 0 then got = M._read_stdin() end
    if got and got ~= "" then heard = process.now_ms() end
    if hb and process.now_ms() - heard > (3 * hb + 2) * 1000 then
      local why = ("the host's link went silent for %.0f s (a lost connection); the sandbox ended"):format((process.now_ms() - heard) / 1000)
      sandbox:terminate()
      out({ event = "ended", how = "ended", why = why })
      return 0
    end
    local st = sandbox:stats()
    local enc = json.encode(st)
    if next(st) and enc ~= last_stats then last_stats = enc; out({ event = "stats", stats = st }) end
    if got == nil or (got and got:find("terminate", 1, true)) then
      sandbox:terminate()
      out({ event = "ended", how = "terminated", why = "terminated" })
      return 0
    end
    local alive, why = sandbox:_alive()
    if not alive then
      out({ event = "ended", how = "ended", why = why })
      sandbox:terminate()
      return 0
    end
  end
end

---`seer sandbox ssh-link` and `seer sandbox remote-start` (started by the backend, not by hand).
---@param which "ssh-link"|"remote-start"
---@return integer exit code
function M.main(which)
  if which == "ssh-link" then return link_main() end
  return remote_main()
end

M._Link = Link -- for tests: the link's reply handlers on a table of one's own
return M
