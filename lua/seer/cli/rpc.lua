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
                          the watchdog's "control_endpoint" and its pid
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
  local rc
  if o.workers > 1 and not o.worker then rc = server.serve_pool(o)
  else rc = server.serve(o) end
  io.stdout:flush()
  io.stderr:flush()
  os.exit(rc, true) -- close the state: __gc frees what C holds (sockets, the watchdog, models)
end

function M.main(cmd, ...)
  if cmd == nil or cmd == "-h" or cmd == "--help" or cmd == "help" then
    print(USAGE)
    return
  end
  if cmd == "serve" then return serve({ ... }) end
  usage_error(("unknown command %q (serve)"):format(tostring(cmd)))
end

return M
