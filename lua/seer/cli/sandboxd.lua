--- `seer sandboxd`: the daemon inside a sandbox. It answers signed requests (the Jupyter
--- framing of seer.net) on one ROUTER socket: exec commands and Lua, read and write files,
--- list and create directories, start and stop services (kernels, RPC servers) and hand out
--- their logs. Nothing here knows where the sandbox runs: the same daemon serves a local
--- bubblewrap sandbox through a unix socket and, later, remote backends over TCP.
---
--- Requests are `<op>_request` messages whose reply is `<op>_reply` with `status = "ok"` or
--- `status = "error", ename, evalue`. Binary payloads (file contents) travel as buffers.
--- Execs run concurrently; each has a deadline and output caps (docs/sandbox.md).
local M = {}

local net = require "seer.net"
local json = require "seer.json"
local core = require "seer.core.host"
local sb = require "seer.core.sandbox"
local process = require "seer.process"

local USAGE = "usage: seer sandboxd --connection-file FILE"
local DEFAULT_CAP = 1024 * 1024          -- bytes kept per stream of an exec unless told otherwise
local MAX_CAP = 64 * 1024 * 1024
local LOG_DIR = os.getenv("SEER_SANDBOX_LOG_DIR") or "/var/log/seer"
local RUN_DIR = os.getenv("SEER_SANDBOX_RUN_DIR") or "/run/seer"

local function log(fmt, ...)
  io.stderr:write(os.date("!%Y-%m-%dT%H:%M:%SZ "), "sandboxd: ", fmt:format(...), "\n")
  io.stderr:flush()
end

local Daemon = {}
Daemon.__index = Daemon

function Daemon:reply(req, content, buffers)
  content.status = content.status or "ok"
  local msg = { idents = req.idents, header = net.header(req.header.msg_type:gsub("_request$", "") .. "_reply", self.id),
                parent_header = req.header, metadata = {}, content = content, buffers = buffers }
  local ok, err = pcall(self.sock.send, self.sock, msg)
  if not ok then
    -- A reply that cannot be encoded still gets an answer, so no client waits forever.
    log("reply to %s failed: %s", req.header.msg_type, tostring(err))
    msg.content, msg.buffers = { status = "error", ename = "InternalError", evalue = tostring(err) }, nil
    pcall(self.sock.send, self.sock, msg)
  end
end

function Daemon:fail(req, ename, evalue)
  self:reply(req, { status = "error", ename = ename, evalue = evalue })
end

---------------------------------------------------------------------------------------------
-- files

local function parent_of(path) return path:match("^(.*)/[^/]+$") end

local function resolve(path)
  if type(path) ~= "string" or path == "" then return nil end
  if path:sub(1, 1) ~= "/" then path = "/workspace/" .. path end
  return path
end

local function mkdir_p(path)
  local ok, err = pcall(process.mkdir_p, path)
  if not ok then return nil, tostring(err) end
  return true
end

-- Files are opened without ever blocking sandboxd's one loop: code in the sandbox can plant a
-- fifo, a socket or a device at any path it can write, and a blocking open or read of it would
-- wedge every request of every client (docs/sandbox.md, "sandboxd protocol"). Reads open with
-- O_NONBLOCK, check the descriptor with statx and read regular files only, at most max_bytes;
-- writes create a fresh temporary file (O_EXCL, so nothing planted is opened) and rename it.
-- Links resolve in the sandbox's own view (sandboxd sees what the code in it sees).
local ffi = require "ffi"
local bit = require "bit"
ffi.cdef [[
int seer_sbd_open(const char *path, int flags, int mode) asm("open");
int seer_sbd_close(int fd) asm("close");
long seer_sbd_read(int fd, void *buf, size_t n) asm("read");
long seer_sbd_write(int fd, const void *buf, size_t n) asm("write");
long seer_sbd_lseek(int fd, long off, int whence) asm("lseek");
int seer_sbd_fchmod(int fd, unsigned mode) asm("fchmod");
long seer_sbd_syscall(long n, int dirfd, const char *path, int flags, unsigned mask, void *buf) asm("syscall");
char *seer_sbd_strerror(int e) asm("strerror");
]]
local O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOCTTY, O_NONBLOCK, O_CLOEXEC = 0, 1, 0x40, 0x80, 0x100, 0x800, 0x80000
local AT_EMPTY_PATH, STATX_TYPE, STATX_SIZE = 0x1000, 0x1, 0x200
local SYS_STATX = ({ x64 = 332, arm64 = 291 })[ffi.arch]
local EINTR, EAGAIN = 4, 11
local S_IFMT = 0xF000
local KINDS = { [0x1000] = "a fifo", [0xC000] = "a socket", [0x2000] = "a character device", [0x6000] = "a block device",
                [0x4000] = "a directory", [0xA000] = "a symlink" }
M.DEFAULT_READ = 64 * 1024 * 1024       -- read_file's max_bytes unless told otherwise
M.MAX_READ = 4 * 1024 * 1024 * 1024     -- and the most it may be told
M.DEFAULT_LIST = 100000                 -- entries a list reply holds unless told otherwise
M.MAX_LOG = 1024 * 1024                 -- bytes of a log a logs reply holds

local function errstr() return ffi.string(ffi.C.seer_sbd_strerror(ffi.errno())) end

local statx_buf = ffi.new("uint8_t[256]")
-- The type (S_IFMT bits) and size of an open descriptor.
local function fstat(fd)
  if not SYS_STATX then return nil, "statx: unknown architecture " .. ffi.arch end
  ffi.fill(statx_buf, 256)
  if ffi.C.seer_sbd_syscall(SYS_STATX, fd, "", AT_EMPTY_PATH, STATX_TYPE + STATX_SIZE, statx_buf) ~= 0 then
    return nil, errstr()
  end
  local mode = ffi.cast("uint16_t *", statx_buf + 28)[0]
  local size = tonumber(ffi.cast("uint64_t *", statx_buf + 40)[0])
  return bit.band(mode, S_IFMT), size
end

---Opens a regular file for reading without blocking: fd and size, or nil and why ("notfound"
---when it does not exist).
local function open_regular(path)
  local fd = ffi.C.seer_sbd_open(path, O_RDONLY + O_NONBLOCK + O_NOCTTY + O_CLOEXEC, 0)
  if fd < 0 then
    local e = ffi.errno()
    return nil, ("cannot open %s: %s"):format(path, errstr()), e == 2 and "notfound" or "io"
  end
  local kind, size = fstat(fd)
  if not kind then
    ffi.C.seer_sbd_close(fd)
    return nil, ("cannot stat %s: %s"):format(path, size), "io"
  end
  if kind ~= 0x8000 then
    ffi.C.seer_sbd_close(fd)
    return nil, ("%s is %s, not a regular file"):format(path, KINDS[kind] or "a special file"), "notregular"
  end
  return fd, size
end
M.open_regular = open_regular

-- Reads at most max bytes of an open descriptor (from offset); the data and whether more was there.
local function read_fd(fd, max, offset)
  if offset and offset > 0 and ffi.C.seer_sbd_lseek(fd, offset, 0) < 0 then return nil, errstr() end
  local parts, n = {}, 0
  local chunk = math.min(max + 1, 4 * 1024 * 1024)
  local buf = ffi.new("uint8_t[?]", chunk)
  while n <= max do
    local want = math.min(chunk, max + 1 - n)
    local got = tonumber(ffi.C.seer_sbd_read(fd, buf, want))
    if got < 0 then
      local e = ffi.errno()
      if e ~= EINTR then return nil, errstr() end
    elseif got == 0 then
      break
    else
      parts[#parts + 1] = ffi.string(buf, got)
      n = n + got
    end
  end
  local data = table.concat(parts)
  if n > max then return data:sub(1, max), true end
  return data, false
end

---Reads a regular file without blocking on anything planted there: data, the file's size and
---whether more than max bytes were there; or nil, why and a code.
local function read_regular(path, max, offset)
  local fd, size, code = open_regular(path)
  if not fd then return nil, size, code end
  local data, more = read_fd(fd, max, offset)
  ffi.C.seer_sbd_close(fd)
  if not data then return nil, ("cannot read %s: %s"):format(path, more), "io" end
  return data, size, more
end
M.read_regular = read_regular

---Writes data to path through a fresh temporary file beside it (never opens what is at path,
---whatever was planted there) renamed into place; mode (e.g. 0600) when given.
local function write_atomic(path, data, mode)
  local tmp = ("%s.seer-tmp-%s"):format(path, net.uuid():sub(1, 8))
  local fd = ffi.C.seer_sbd_open(tmp, O_WRONLY + O_CREAT + O_EXCL + O_NONBLOCK + O_NOCTTY + O_CLOEXEC, tonumber(mode) or 438)
  if fd < 0 then return nil, ("cannot write %s: %s"):format(path, errstr()) end
  local off, err = 0, nil
  while off < #data do
    local n = tonumber(ffi.C.seer_sbd_write(fd, ffi.cast("const char *", data) + off, math.min(#data - off, 16 * 1024 * 1024)))
    if n < 0 then
      local e = ffi.errno()
      if e ~= EINTR and e ~= EAGAIN then err = errstr(); break end
    else
      off = off + n
    end
  end
  if not err and mode and ffi.C.seer_sbd_fchmod(fd, tonumber(mode)) ~= 0 then err = errstr() end
  ffi.C.seer_sbd_close(fd)
  if not err then
    local ok, rerr = os.rename(tmp, path)
    if ok then return true end
    err = tostring(rerr)
  end
  os.remove(tmp)
  return nil, ("cannot write %s: %s"):format(path, err)
end
M.write_atomic = write_atomic

local handlers = {}

function handlers.ping(self, req)
  self:reply(req, { pid = process.getpid(), started_ms = self.started_ms, id = self.sandbox_id })
end

function handlers.write_file(self, req)
  local path = resolve(req.content.path)
  local data = req.buffers and req.buffers[1] or req.content.text
  if not path then return self:fail(req, "ValueError", "write_file needs a path") end
  if type(data) ~= "string" then return self:fail(req, "ValueError", "write_file needs the content (a string)") end
  local mode = req.content.mode
  if mode ~= nil and (type(mode) ~= "number" or mode ~= math.floor(mode) or mode < 0 or mode > 4095) then
    return self:fail(req, "ValueError", "write_file: mode must be an integer in 0..0o7777")
  end
  local dir = parent_of(path)
  if dir and dir ~= "" then
    local ok, err = mkdir_p(dir)
    if not ok then return self:fail(req, "OSError", err) end
  end
  local ok, err = write_atomic(path, data, mode)
  if not ok then return self:fail(req, "OSError", err) end
  self:reply(req, { path = path, bytes = #data })
end

-- read_file: at most max_bytes (default 64 MiB) from offset; a file with more is an error
-- naming its size, unless truncate is set (then the first max_bytes come back, truncated = true).
function handlers.read_file(self, req)
  local c = req.content
  local path = resolve(c.path)
  if not path then return self:fail(req, "ValueError", "read_file needs a path") end
  local max = c.max_bytes == nil and M.DEFAULT_READ or tonumber(c.max_bytes)
  if not max or max ~= math.floor(max) or max < 0 or max > M.MAX_READ then
    return self:fail(req, "ValueError", ("read_file: max_bytes must be an integer in 0..%d"):format(M.MAX_READ))
  end
  local offset = c.offset == nil and 0 or tonumber(c.offset)
  if not offset or offset ~= math.floor(offset) or offset < 0 then
    return self:fail(req, "ValueError", "read_file: offset must be an integer >= 0")
  end
  local data, size, more = read_regular(path, max, offset)
  if not data then
    return self:fail(req, more == "notfound" and "FileNotFoundError" or more == "notregular" and "NotRegularFile" or "OSError", size)
  end
  if more and not c.truncate then
    return self:fail(req, "FileTooBig", ("%s is %d bytes, more than read_file's max_bytes of %d%s; pass a larger max_bytes, "
      .. "or read it in parts with offset and truncate = true (each part up to max_bytes)"):format(path, size, max,
      offset > 0 and (" from offset %d"):format(offset) or ""))
  end
  self:reply(req, { path = path, bytes = #data, size = size, offset = offset, truncated = more }, { data })
end

function handlers.ensure_dir(self, req)
  local path = resolve(req.content.path)
  if not path then return self:fail(req, "ValueError", "ensure_dir needs a path") end
  local ok, err = mkdir_p(path)
  if not ok then return self:fail(req, "OSError", err) end
  self:reply(req, { path = path })
end

function handlers.list(self, req)
  local path = resolve(req.content.path or "/workspace")
  local max = req.content.max_entries == nil and M.DEFAULT_LIST or tonumber(req.content.max_entries)
  if not max or max ~= math.floor(max) or max < 0 then
    return self:fail(req, "ValueError", "list: max_entries must be an integer >= 0")
  end
  local entries, err = sb.listdir(path)
  if not entries then return self:fail(req, "FileNotFoundError", err) end
  table.sort(entries, function(a, b) return a.name < b.name end)
  -- A directory the sandbox filled with millions of names is answered with the first
  -- max_entries of them (sorted) and the count, so the host decodes a bounded reply.
  local total = #entries
  if total > max then
    for i = total, max + 1, -1 do entries[i] = nil end
  end
  self:reply(req, { path = path, entries = json.array(entries), total = total, truncated = total > max })
end

---------------------------------------------------------------------------------------------
-- exec

-- The environment of a child: sandboxd's own (the sandbox's) plus the request's.
local function child_env(base, extra)
  if type(extra) ~= "table" or next(extra) == nil then return nil end
  local env = {}
  for k, v in pairs(base) do env[k] = v end
  for k, v in pairs(extra) do env[k] = tostring(v) end
  return env
end

function handlers.exec(self, req)
  local c = req.content
  local argv = c.argv
  if type(argv) == "string" then argv = { "/bin/sh", "-c", argv } end
  if type(argv) ~= "table" or #argv == 0 then
    return self:fail(req, "ValueError", "exec needs a command: a string (run by /bin/sh -c) or a list of arguments")
  end
  local cwd = c.cwd and resolve(c.cwd) or "/workspace"
  local p, err = sb.spawn{ argv = argv, env = child_env(self.env, c.env), cwd = cwd, stdin = c.stdin ~= nil,
                           rlimits = c.rlimits }
  if not p then return self:fail(req, "ExecError", err) end
  local cap = math.min(tonumber(c.max_output) or DEFAULT_CAP, MAX_CAP)
  local job = { req = req, proc = p, cap = cap, out = {}, err = {}, n = { out = 0, err = 0 }, truncated = {},
                t0 = process.now_ms(), stdin = c.stdin, stdin_off = 0 }
  if c.timeout and tonumber(c.timeout) and tonumber(c.timeout) > 0 then
    job.deadline = job.t0 + tonumber(c.timeout) * 1000
  end
  if job.stdin == nil then p:close_stdin() end
  self.jobs[#self.jobs + 1] = job
end

-- Moves what a job's pipes hold into its buffers (up to the cap; the rest is counted, not kept).
local function drain(job, which)
  while true do
    local data = job.proc:read(which, 65536)
    if data == nil then job[which .. "_eof"] = true; return end
    if data == "" then return end
    local room = job.cap - job.n[which]
    if room > 0 then
      local keep = #data <= room and data or data:sub(1, room)
      job[which][#job[which] + 1] = keep
    end
    if #data > room then job.truncated[which] = true end
    job.n[which] = job.n[which] + #data
  end
end

local function feed_stdin(job)
  if not job.stdin then return end
  while job.stdin_off < #job.stdin do
    local n = job.proc:write(job.stdin:sub(job.stdin_off + 1, job.stdin_off + 65536))
    if not n or n == 0 then
      if not n then job.stdin = nil; job.proc:close_stdin() end
      return
    end
    job.stdin_off = job.stdin_off + n
  end
  job.stdin = nil
  job.proc:close_stdin()
end

function Daemon:finish_job(job, status)
  drain(job, "out"); drain(job, "err")
  job.proc:close()
  -- Output is bytes (any program's), so it travels as two buffers, not inside the JSON.
  local c = {
    exit_code = status.code, signal = status.signal, timed_out = job.timed_out or false,
    cancelled = job.cancelled or false,
    stdout_bytes = job.n.out, stderr_bytes = job.n.err,
    truncated = (job.truncated.out or job.truncated.err) and true or false,
    elapsed_ms = process.now_ms() - job.t0,
  }
  self:reply(job.req, c, { table.concat(job.out), table.concat(job.err) })
end

function Daemon:pump_jobs(now)
  local keep = {}
  for _, job in ipairs(self.jobs) do
    feed_stdin(job)
    drain(job, "out"); drain(job, "err")
    if not job.status then
      job.status = job.proc:poll()
      if job.status then job.exited_at = now end
    end
    if not job.status and job.deadline and now >= job.deadline then
      job.timed_out = true
      job.proc:kill(sb.SIGKILL)
    end
    -- Done when the command has ended and its pipes are closed, or shortly after it ended
    -- when a background child still holds them open.
    local done = job.status and ((job.out_eof and job.err_eof) or now - job.exited_at > 50)
    if done then
      if job.timed_out then job.status = { code = 124, signal = job.status.signal } end
      self:finish_job(job, job.status)
    else
      keep[#keep + 1] = job
    end
  end
  self.jobs = keep
end

function handlers.cancel(self, req)
  local target = req.content.msg_id
  for _, job in ipairs(self.jobs) do
    if job.req.header.msg_id == target then
      job.cancelled = true
      job.proc:kill(sb.SIGKILL)
    end
  end
  self:reply(req, {})
end

---------------------------------------------------------------------------------------------
-- services: long-running processes (kernels, RPC servers) with a log file each

local function valid_name(s) return type(s) == "string" and s:match("^[%w][%w._-]*$") ~= nil and #s <= 64 end

function Daemon:start_service(name, argv, env, cwd)
  if self.services[name] and not self.services[name].status then
    return nil, ("a service named %s is already running"):format(name)
  end
  local logf = LOG_DIR .. "/" .. name .. ".log"
  os.remove(RUN_DIR .. "/services/" .. name .. ".exit")
  local p, err = sb.spawn{ argv = argv, env = child_env(self.env, env), cwd = cwd and resolve(cwd) or "/workspace",
                           output = logf }
  if not p then return nil, err end
  self.services[name] = { name = name, proc = p, log = logf, started = os.time(), argv = argv }
  log("service %s started (pid %d): %s", name, p:pid(), table.concat(argv, " "))
  return self.services[name]
end

function Daemon:pump_services()
  for name, s in pairs(self.services) do
    if not s.status then
      local st = s.proc:poll()
      if st then
        s.status = st
        local how = st.signal and ("killed by signal %d"):format(st.signal) or ("exited with code %d"):format(st.code)
        log("service %s %s", name, how)
        -- the run folder is writable from inside: written without opening what may be planted there
        local ok, err = write_atomic(RUN_DIR .. "/services/" .. name .. ".exit",
          json.encode{ code = st.code, signal = st.signal or json.null, how = how } .. "\n")
        if not ok then log("service %s: %s", name, err) end
      end
    end
  end
end

function handlers.start_service(self, req)
  local c = req.content
  if not valid_name(c.name) then return self:fail(req, "ValueError", "start_service needs a name (letters, digits, . _ -)") end
  if type(c.argv) ~= "table" or #c.argv == 0 then return self:fail(req, "ValueError", "start_service needs argv") end
  local s, err = self:start_service(c.name, c.argv, c.env, c.cwd)
  if not s then return self:fail(req, "ExecError", err) end
  self:reply(req, { name = c.name, pid = s.proc:pid(), log = s.log })
end

-- A kernel: a connection file with ipc endpoints in the run directory (which the host sees),
-- then `seer kernel -f` as a service.
function handlers.start_kernel(self, req)
  local c = req.content
  local name = c.name or ("kernel-" .. net.uuid():sub(1, 8))
  if not valid_name(name) then return self:fail(req, "ValueError", "start_kernel: bad name") end
  local info = { transport = "ipc", ip = RUN_DIR .. "/" .. name, shell_port = 1, iopub_port = 2, stdin_port = 3,
                 control_port = 4, hb_port = 5, signature_scheme = "hmac-sha256", key = net.new_key(),
                 kernel_name = "seer" }
  local file = RUN_DIR .. "/" .. name .. ".json"
  local okw, err = write_atomic(file, json.encode(info))
  if not okw then return self:fail(req, "OSError", err) end
  -- When sandboxd is the sandbox's pid 1 the pid namespace already ends the kernel with it,
  -- and a kernel whose parent is pid 1 would take itself for an orphan.
  local env = { SEER_KERNEL_DIE_WITH_PARENT = self.pid ~= 1 and "1" or nil }
  for k, v in pairs(c.env or {}) do env[k] = v end
  local s, serr = self:start_service(name, { self.seer, "kernel", "-f", file }, env, c.cwd)
  if not s then return self:fail(req, "ExecError", serr) end
  self:reply(req, { name = name, pid = s.proc:pid(), log = s.log, connection = info })
end

function handlers.stop_service(self, req)
  local s = self.services[req.content.name or ""]
  if not s then return self:fail(req, "KeyError", ("no service named %s"):format(tostring(req.content.name))) end
  if not s.status then s.proc:kill(tonumber(req.content.signal) or sb.SIGKILL) end
  self:reply(req, { name = s.name })
end

function handlers.services(self, req)
  local list = {}
  for name, s in pairs(self.services) do
    list[#list + 1] = { name = name, pid = s.proc:pid(), running = s.status == nil, log = s.log,
                        exit_code = s.status and s.status.code or json.null }
  end
  table.sort(list, function(a, b) return a.name < b.name end)
  self:reply(req, { services = json.array(list) })
end

-- The last `lines` lines of a service's log (or sandboxd's own when no name is given), from
-- byte `offset` on when given (for following a log).
function handlers.logs(self, req)
  local c = req.content
  local path = c.name and (LOG_DIR .. "/" .. c.name .. ".log") or self.own_log
  if c.name and not valid_name(c.name) then return self:fail(req, "ValueError", "logs: bad name") end
  -- the log folder is writable from inside: a fifo there is refused, never opened blocking
  local fd, size = nil, nil
  if path then fd, size = open_regular(path) end
  if not fd then return self:fail(req, "FileNotFoundError", ("no log for %s%s"):format(c.name or "sandboxd",
    size and (" (" .. size .. ")") or "")) end
  local from = tonumber(c.offset) or math.max(0, size - M.MAX_LOG)
  from = math.max(0, math.min(math.floor(from), size))
  local text = read_fd(fd, M.MAX_LOG, from) or ""
  ffi.C.seer_sbd_close(fd)
  local upto = from + #text
  if c.lines and not c.offset then
    local lines = {}
    for l in text:gmatch("[^\n]*\n?") do if l ~= "" then lines[#lines + 1] = l end end
    text = table.concat(lines, "", math.max(1, #lines - tonumber(c.lines) + 1))
  end
  self:reply(req, { text = text, offset = upto, size = size })
end

function handlers.shutdown(self, req)
  self:reply(req, {})
  self.stopping = true
end

---------------------------------------------------------------------------------------------

function Daemon:handle(req)
  -- seer.net has checked the signature, replays and that every part is a JSON object; a signed
  -- request with a header that is not a request is dropped, never an error out of the loop.
  if type(req.header.msg_type) ~= "string" or #req.header.msg_type > 64 then
    return self.sock:note_dropped("a request whose header.msg_type is not a short string")
  end
  local op = req.header.msg_type:match("^(.-)_request$")
  local h = op and handlers[op]
  if not h then
    return self:fail(req, "UnknownRequest", ("sandboxd does not know %s"):format(tostring(req.header.msg_type)))
  end
  local ok, err = pcall(h, self, req)
  if not ok then
    log("%s failed: %s", op, tostring(err))
    self:fail(req, "InternalError", tostring(err))
  end
end

function Daemon:run()
  while not self.stopping do
    local items = { self.sock }
    for _, job in ipairs(self.jobs) do
      local o, e, i = job.proc:fds()
      if o >= 0 and not job.out_eof then items[#items + 1] = o end
      if e >= 0 and not job.err_eof then items[#items + 1] = e end
    end
    local wait = #self.jobs > 0 and 5 or 50
    local ready = net.poll(items, wait)
    for _, k in ipairs(ready) do
      if k == 1 then
        while true do
          local req = self.sock:recv(0)
          if not req then break end
          local ok, err = pcall(self.handle, self, req)
          if not ok then log("a request could not be handled: %s", tostring(err)) end
        end
      end
    end
    self:pump_jobs(process.now_ms())
    self:pump_services()
    self:reap_orphans(process.now_ms())
  end
  for _, job in ipairs(self.jobs) do job.proc:kill(sb.SIGKILL) end
  for _, s in pairs(self.services) do if not s.status then s.proc:kill(sb.SIGKILL) end end
  self.sock:close()
end

-- sandboxd is the sandbox's pid 1 (bubblewrap --as-pid-1): processes whose parent ended are
-- re-parented to it, and it reaps them when they end (at most once a second), leaving its own
-- children to the code that waits for them.
function Daemon:reap_orphans(now)
  if self.pid ~= 1 or now - (self.reaped_at or 0) < 1000 then return end
  self.reaped_at = now
  local known = {}
  for _, job in ipairs(self.jobs) do known[job.proc:pid()] = true end
  for _, s in pairs(self.services) do if not s.status then known[s.proc:pid()] = true end end
  sb.reap_orphans(known)
end

function M.main(...)
  local args = { ... }
  local conn
  local i = 1
  while i <= #args do
    if args[i] == "--connection-file" then conn = args[i + 1]; i = i + 2
    elseif args[i] == "-h" or args[i] == "--help" then print(USAGE); return
    else
      io.stderr:write(("seer sandboxd: unknown option %s\n%s\n"):format(args[i], USAGE))
      os.exit(2)
    end
  end
  if not conn then
    io.stderr:write("seer sandboxd: --connection-file is required\n" .. USAGE .. "\n")
    os.exit(2)
  end
  -- Before anything else runs: a new empty session keyring (the host's keys are not possessed
  -- here), sandboxd not dumpable (its key cannot be read through /proc/PID/mem by the code it
  -- runs), then no_new_privs and the seccomp filter, which every process started from here
  -- inherits and none can remove (docs/sandbox.md, "System calls"). A sandbox without them
  -- does not start.
  for _, step in ipairs({ { "keyring_new_session" }, { "set_dumpable", false }, { "seccomp_install" } }) do
    local ok, why = sb[step[1]](step[2])
    if not ok then error(("seer sandboxd: %s failed: %s"):format(step[1], tostring(why)), 0) end
  end
  local ok, info = pcall(function() return json.decode(core.read_file(conn)) end)
  if not ok or type(info) ~= "table" or type(info.key) ~= "string" or type(info.endpoint) ~= "string" then
    error(("seer sandboxd: cannot read the connection file %s (%s)"):format(conn, tostring(info)), 0)
  end
  -- The key stays in memory only: code in the sandbox should not find it lying around.
  os.remove(conn)
  local self = setmetatable({ id = net.uuid(), jobs = {}, services = {}, started_ms = process.now_ms(), pid = process.getpid(),
                              sandbox_id = info.sandbox_id, seer = info.seer or "/opt/seer/bin/seer",
                              own_log = info.log }, Daemon)
  -- The environment children inherit: sandboxd's own, which the sandbox was started with.
  self.env = {}
  for _, kv in ipairs(sb.environ()) do
    local k, v = kv:match("^([^=]+)=(.*)$")
    if k then self.env[k] = v end
  end
  process.mkdir_p(RUN_DIR .. "/services")
  process.mkdir_p(LOG_DIR)
  self.sock = net.socket("router", info.key)
  self.sock:bind(info.endpoint)
  log("listening on %s", info.endpoint)
  self:run()
  log("shut down")
end

return M
