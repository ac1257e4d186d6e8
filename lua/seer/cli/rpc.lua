--- `seer rpc`: serve a scoped interface file over signed RPC (docs/rpc.md).
local M = {}

local USAGE = [[
usage: seer rpc serve INTERFACE.lua --connection-file FILE [--workers N] [--models JSON]
                      [--timeout SECONDS] [--name NAME] [--log FILE] [--die-with-parent] [--verbose]

Loads INTERFACE.lua (with the injected names expose, get_model_path and list_configured_models)
and answers signed RPC requests (seer.rpc, `seer mcp rpc`) until it is told to shut down.

  --connection-file FILE  JSON with "key" (the HMAC key; required) and "endpoint"
                          ("ipc:///path/x.sock" or "tcp://127.0.0.1:PORT"; a missing endpoint
                          or port * picks one); the server writes back the endpoints it bound,
                          the watchdog's "control_endpoint" and its pid, and removes the file
                          when it ends, however it ends (stale ones of dead servers are swept
                          at start)
  --workers N             N worker processes, each with its own copy of the interface (and of
                          its models), so N calls run at once; default 1: calls run one at a
                          time (models are not reentrant)
  --models JSON           model id -> local path ({"google/gemma-2-2b": "/models/..."} or
                          [{"name": ..., "path": ...}]) for get_model_path
  --timeout SECONDS       default per-call deadline (a request may set its own)
  --name NAME             the name used in logs and in the hello reply
  --log FILE              append stdout and stderr (the interface's prints too) to FILE
  --die-with-parent       exit when the process that started this one exits
  --verbose               log every call, not only failures]]

local function usage_error(msg)
  io.stderr:write("seer rpc: ", msg, "\n", USAGE, "\n")
  io.stderr:flush()
  os.exit(2)
end

local function redirect_output(path)
  local ffi = require "ffi"
  pcall(ffi.cdef, [[
    int open(const char *path, int flags, unsigned mode);
    int dup2(int a, int b);
    int close(int fd);
  ]])
  io.stdout:flush()
  io.stderr:flush()
  local fd = ffi.C.open(path, 1 + 64 + 1024 --[[O_WRONLY|O_CREAT|O_APPEND]], tonumber("600", 8))
  if fd < 0 then usage_error(("cannot open the log file %s"):format(path)) end
  ffi.C.dup2(fd, 1)
  ffi.C.dup2(fd, 2)
  ffi.C.close(fd)
  io.stdout:setvbuf("line")
end

local function parse_models(text)
  local json = require "seer.json"
  local ok, v = pcall(json.decode, text)
  if not ok then usage_error("--models must be JSON: " .. tostring(v)) end
  local models = {}
  if json.is_array(v) then
    for i, m in ipairs(v) do
      if type(m) ~= "table" or type(m.name) ~= "string" or type(m.path) ~= "string" then
        usage_error(("--models[%d] must be {\"name\": ..., \"path\": ...}"):format(i))
      end
      models[m.name] = m.path
    end
  elseif type(v) == "table" then
    for k, p in pairs(v) do
      if type(p) ~= "string" then usage_error(("--models: the path of %s must be a string"):format(k)) end
      models[k] = p
    end
  else
    usage_error("--models must be a JSON object or array")
  end
  return models
end


---------------------------------------------------------------------------------------------
-- The connection file's lifetime. It holds the HMAC key, so it must not outlive the server:
--   normal end and errors: removed before the process exits (serve below);
--   SIGTERM, SIGINT, SIGHUP, SIGKILL, a crash: a reaper child (/bin/sh, signals ignored) holds
--     the read end of a pipe whose only write end is this process's; when this process ends,
--     however it ends, the reaper reads EOF and removes the file;
--   a reaper killed too (kill -9 of the whole group): the next `seer rpc serve` or
--     seer.rpc.start sweeps stale files (M.sweep_stale): only regular files of this user, in
--     this user's seer-rpc-* folders, whose recorded server pid is gone.
-- Workers of a pool (--worker) share the broker's file and never remove it.

local ffi = require "ffi"
pcall(ffi.cdef, [[
int seer_crpc_kill(int pid, int sig) asm("kill");
int seer_crpc_pipe2(int fds[2], int flags) asm("pipe2");
int seer_crpc_close(int fd) asm("close");
int seer_crpc_open(const char *path, int flags, int mode) asm("open");
long seer_crpc_read(int fd, void *buf, unsigned long n) asm("read");
int seer_crpc_unlink(const char *path) asm("unlink");
unsigned seer_crpc_getuid(void) asm("getuid");
int seer_crpc_statx(int dirfd, const char *path, int flags, unsigned mask, void *buf) asm("statx");
]])
local FC = ffi.C
local O_RDONLY, O_NOFOLLOW, O_CLOEXEC = 0, 131072, 524288
local AT_FDCWD, AT_SYMLINK_NOFOLLOW = -100, 256
local ESRCH = 3

-- lstat through statx, whose layout is the same on every architecture: {uid, mode, nlink} or nil.
local function lstat(path)
  local buf = ffi.new("uint8_t[256]")
  if FC.seer_crpc_statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, 0x7ff, buf) ~= 0 then return nil end
  local u32 = ffi.cast("uint32_t *", buf)
  return { nlink = u32[4], uid = u32[5], mode = ffi.cast("uint16_t *", buf + 28)[0] }
end
local S_IFMT, S_IFREG, S_IFDIR = 0xF000, 0x8000, 0x4000

-- The text of a regular file, read without following a link; nil otherwise.
local function read_nofollow(path, max)
  local fd = FC.seer_crpc_open(path, O_RDONLY + O_NOFOLLOW + O_CLOEXEC, 0)
  if fd < 0 then return nil end
  local buf = ffi.new("char[?]", max)
  local n = FC.seer_crpc_read(fd, buf, max)
  FC.seer_crpc_close(fd)
  if n < 0 then return nil end
  return ffi.string(buf, n)
end

local function pid_gone(pid)
  if type(pid) ~= "number" or pid < 2 or pid ~= math.floor(pid) or pid > 4194304 then return false end
  return FC.seer_crpc_kill(pid, 0) ~= 0 and ffi.errno() == ESRCH
end

---Removes stale RPC connection files under parent (default /tmp): in each of this user's
---seer-rpc-* folders (real folders, not links), each *.json regular file of this user whose
---"pid" (the server that wrote it) no longer runs. Never follows a link, never touches a file
---of another user or one whose server may still run. Returns the paths removed.
---@param parent? string
---@return string[]
function M.sweep_stale(parent)
  parent = parent or "/tmp"
  local removed = {}
  local ok, entries = pcall(require("seer.core.sandbox").listdir, parent)
  if not ok or type(entries) ~= "table" then return removed end
  local uid = FC.seer_crpc_getuid()
  for _, d in ipairs(entries) do
    local dir = parent .. "/" .. d.name
    local ds = d.name:match("^seer%-rpc%-") and lstat(dir)
    if ds and bit.band(ds.mode, S_IFMT) == S_IFDIR and ds.uid == uid then
      local ok2, files = pcall(require("seer.core.sandbox").listdir, dir)
      for _, e in ipairs(ok2 and files or {}) do
        local path = dir .. "/" .. e.name
        local fs = e.name:match("%.json$") and lstat(path)
        if fs and bit.band(fs.mode, S_IFMT) == S_IFREG and fs.uid == uid and fs.nlink == 1 then
          local text = read_nofollow(path, 65536)
          local okj, info = pcall(require("seer.json").decode, text or "")
          if okj and type(info) == "table" and info.key ~= nil and pid_gone(info.pid) then
            if FC.seer_crpc_unlink(path) == 0 then removed[#removed + 1] = path end
          end
        end
      end
    end
  end
  return removed
end

-- Starts the reaper; returns its pid or nil (then only the sweep covers a kill).
local function start_reaper(path)
  require "seer.process" -- declares posix_spawn and its file actions
  local C = ffi.C
  local p = ffi.new("int[2]")
  if FC.seer_crpc_pipe2(p, O_CLOEXEC) ~= 0 then return nil end
  local fa = ffi.new("seer_spawn_fa_t")
  C.posix_spawn_file_actions_init(fa)
  C.posix_spawn_file_actions_adddup2(fa, p[0], 0) -- dup2 clears CLOEXEC: the reaper's stdin
  local argv = { "/bin/sh", "-c", 'trap "" INT HUP TERM; cat >/dev/null; rm -f -- "$1"', "seer-rpc-reaper", path }
  local cargv = ffi.new("char *[?]", #argv + 1)
  local keep = {}
  for i, a in ipairs(argv) do keep[i] = ffi.new("char[?]", #a + 1, a); cargv[i - 1] = keep[i] end
  local pid = ffi.new("pid_t[1]")
  local rc = C.posix_spawnp(pid, "/bin/sh", fa, nil, cargv, C.environ)
  C.posix_spawn_file_actions_destroy(fa)
  FC.seer_crpc_close(p[0])
  if rc ~= 0 then FC.seer_crpc_close(p[1]); return nil end
  -- p[1] stays open (close-on-exec, so no child of ours holds it) until this process ends.
  M._reaper_fd = p[1]
  return pid[0]
end

local function remove_connection_file(path)
  if path then FC.seer_crpc_unlink(path) end
end

local function serve(args)
  local o = { workers = 1 }
  for a, value in require("seer.cli.args").options(args, usage_error) do
    if a == "--connection-file" then o.connection_file = value()
    elseif a == "--workers" then
      o.workers = tonumber(value())
      if not o.workers or o.workers < 1 or o.workers ~= math.floor(o.workers) then usage_error("--workers needs a whole number >= 1") end
    elseif a == "--models" then o.models = parse_models(value())
    elseif a == "--timeout" then
      local t = tonumber(value())
      if not t or t <= 0 then usage_error("--timeout needs a positive number of seconds") end
      o.timeout_ms = t * 1000
    elseif a == "--name" then o.name = value()
    elseif a == "--log" then o.log = value()
    elseif a == "--die-with-parent" then o.die_with_parent = true
    elseif a == "--verbose" then o.verbose = true
    elseif a == "--worker" then o.worker = value() -- internal: a pool's worker, with the broker's endpoint
    elseif a == "--worker-slot" then o.worker_slot = tonumber(value()) -- internal
    elseif a == "-h" or a == "--help" then print(USAGE) os.exit(0)
    elseif a:sub(1, 1) == "-" then usage_error("unknown option " .. a)
    elseif not o.interface then o.interface = a
    else usage_error("unexpected argument " .. a) end
  end
  if not o.interface then usage_error("serve needs the interface file") end
  if not o.connection_file then usage_error("serve needs --connection-file FILE") end
  local f = io.open(o.interface, "rb")
  if not f then usage_error(("cannot read the interface file %s"):format(o.interface)) end
  f:close()
  if o.log then redirect_output(o.log) end
  if o.die_with_parent then require("seer.process").die_with_parent() end
  local server = require "seer.rpc.server"
  local owned = not o.worker and o.connection_file or nil -- the broker's file is the broker's
  if owned then
    local dir = o.connection_file:match("^(.*)/[^/]*$") or "."
    local parent = dir:match("^(.*)/[^/]*$") or "."
    M.sweep_stale(parent)
    if parent ~= "/tmp" then M.sweep_stale("/tmp") end
    start_reaper(o.connection_file)
  end
  local ok, rc = xpcall(function()
    if o.workers > 1 and not o.worker then return server.serve_pool(o) end
    return server.serve(o)
  end, debug.traceback)
  remove_connection_file(owned)
  if not ok then error(rc, 0) end
  io.stdout:flush()
  io.stderr:flush()
  os.exit(rc, true) -- close the state: __gc frees what C holds (sockets, the watchdog, models)
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
  if cmd == "serve" then return serve({ ... }) end
  usage_error(("unknown command %q (serve)"):format(tostring(cmd)))
end

return M
