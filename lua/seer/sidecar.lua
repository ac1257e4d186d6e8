--- seer.sidecar: host processes that belong to a detached sandbox (its notebook server, its
--- egress filter). A sandbox started with `start{detach = true}` outlives the script that
--- started it; so must the host processes it needs, and they must end when it ends.
---
--- Each sidecar runs under a small supervisor (`seer -e` running `supervise`):
---
---   script ── spawn ──> supervisor (own session) ── spawn ──> the process (dies with the supervisor)
---
--- The supervisor leaves the script's session (no terminal's SIGHUP or Ctrl-C reaches it),
--- relays the process's first stdout line (its "ready" line) to the script and then reads and
--- drops whatever else it prints, and watches the sandbox's keeper (pid and start time, so a
--- reused pid is not mistaken for it). When the keeper is gone (terminate, timeout), it asks the
--- process to stop (a signed `shutdown` request for a notebook server, else SIGTERM), waits,
--- kills what is left and removes the process's runtime folder; when the process itself ends,
--- the supervisor ends too. The supervisor's spec reaches it through its environment
--- (readable by this user only), never its command line, since it may hold a key.
---@class seersidecar
local M = {}

local ffi = require "ffi"
local json = require "seer.json"
local process = require "seer.process"

pcall(ffi.cdef, [[ int setsid(void); int dup2(int, int); int open(const char *, int, ...); int close(int); ]])

---@class seersidecar.spec
---@field argv string[] the process
---@field what? string what it is, for messages ("the notebook server")
---@field env? table<string, string|false> added to (false: removed from) its environment
---@field log string its stderr (appended); the supervisor's own notes go there too
---@field keeper_pid integer the sandbox's keeper
---@field keeper_start integer the keeper's start time (seer.core.sandbox.start_time)
---@field ready_timeout_ms? integer how long to wait for its first line (default 15000)
---@field notebook_server_key? string a notebook server (`seer notebook serve`) with this key: it is stopped with a
---signed shutdown request to the endpoint its first line names, and its runtime folder is removed once it ended

local SPEC_VAR = "SEER_SIDECAR_SPEC"

---Starts a sidecar for a detached sandbox. Returns the supervisor (a process.child) and the
---process's first stdout line.
---@param spec seersidecar.spec
---@return seerprocess.child supervisor, string first_line
function M.start(spec)
  assert(type(spec.argv) == "table" and type(spec.log) == "string" and type(spec.keeper_pid) == "number",
    "sidecar.start: argv, log and keeper_pid are required")
  local sup, line = process.start_helper{ code = 'require("seer.sidecar").supervise()', env = { [SPEC_VAR] = json.encode(spec) },
    log = spec.log, ready_timeout_ms = (spec.ready_timeout_ms or 15000) + 2000, what = spec.what or spec.argv[1] }
  return sup, line
end

local function note(fmt, ...)
  io.stderr:write(("[%s] seer sidecar: "):format(os.date("!%Y-%m-%dT%H:%M:%SZ")), require("seer.terminal").safe(fmt:format(...)), "\n")
  io.stderr:flush()
end

-- Whether the keeper (pid + start time) still runs.
local function keeper_alive(spec)
  local sb = require "seer.core.sandbox"
  return sb.alive(spec.keeper_pid) and sb.start_time(spec.keeper_pid) == spec.keeper_start
end

-- A signed shutdown request to a notebook server; true when it answered.
local function shutdown_server(s)
  local net = require "seer.net"
  local ok, res = pcall(function()
    local sock = net.socket("dealer", s.key)
    sock:connect(s.endpoint)
    local header = net.header("shutdown_request", net.uuid())
    sock:send{ header = header, parent_header = {}, metadata = {}, content = {} }
    local deadline = process.now_ms() + 3000
    while process.now_ms() < deadline do
      net.poll({ sock }, 100)
      local msg = sock:recv(0)
      if msg then sock:close(); return true end
    end
    sock:close()
    return false
  end)
  return ok and res
end

---The supervisor's main loop (run as `seer -e 'require("seer.sidecar").supervise()'`).
function M.supervise()
  local raw = os.getenv(SPEC_VAR)
  if not raw then error("seer.sidecar.supervise: no spec (it is started by seer.sidecar.start)", 0) end
  local spec = json.decode(raw)
  ffi.C.setsid()
  local env = {}
  for k, v in pairs(spec.env or {}) do env[k] = v end
  env[SPEC_VAR] = false
  local child = process.spawn{ argv = spec.argv, env = env, stdout = "pipe", stderr = spec.log }
  local line, why = child:read_line(spec.ready_timeout_ms or 15000)
  if not line then
    note("%s did not print its first line (%s; %s)", spec.argv[1], why, child:describe_exit())
    child:stop(500)
    os.exit(1)
  end
  -- a notebook server's first line names its request socket, in its runtime folder
  local shutdown, runtime_dir
  if spec.notebook_server_key then
    local ok, info = pcall(json.decode, line)
    local ep = ok and type(info) == "table" and info.endpoint
    if type(ep) == "string" then
      shutdown = { endpoint = ep, key = spec.notebook_server_key }
      runtime_dir = ep:match("^ipc://(/tmp/seer%-notebook%-%w+)/api%.sock$")
    end
  end
  io.stdout:write(line, "\n")
  io.stdout:flush()
  -- The script may exit now: nothing more is written to its pipe.
  local null = ffi.C.open("/dev/null", 1 --[[O_WRONLY]])
  if null >= 0 then ffi.C.dup2(null, 1); ffi.C.close(null) end
  while true do
    -- Drains (and drops) what the process prints, waiting up to 200 ms.
    local l, w = child:read_line(200)
    if not l and w == "eof" then process.sleep_ms(200) end
    if not child:alive() then
      note("%s ended (%s) while its sandbox runs", spec.argv[1], child:describe_exit())
      break
    end
    if not keeper_alive(spec) then
      local asked = shutdown and shutdown_server(shutdown)
      if not asked then child:kill(process.SIGTERM) end
      if not child:wait(5000) then child:kill(process.SIGKILL); child:wait(2000) end
      break
    end
  end
  -- the server removes its runtime folder when it stops cleanly; not when it was killed
  if runtime_dir then os.execute("rm -rf -- '" .. runtime_dir .. "'") end
  os.exit(0)
end

return M
