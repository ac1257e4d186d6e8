--- seer.rpc.server: `seer rpc serve INTERFACE.lua`. Loads an interface file (with the injected
--- names expose, get_model_path and list_configured_models) and answers signed RPC requests on
--- a ZMQ ROUTER socket: hello (the exposed functions with their docs and schemas, or the load
--- error), call, shutdown. Calls run one at a time on the main thread (models are not
--- reentrant); a watchdog thread (seer.core.rpc) interrupts a call that is cancelled or runs past
--- its deadline. Messages go through a seer.core.rpc channel, which serves plain calls itself
--- (engine/rpc). With workers > 1 this process is a broker (engine/rpc/broker.c) in front of
--- worker processes, each of which loads the interface (serve_pool; docs/rpc.md).
local M = {}

local C = require "seer.core.net"
local json = require "seer.json"
local wire = require "seer.rpc.wire"
local annotations = require "seer.rpc.annotations"

local now = require("seer.core.host").now

-- ---- logging -----------------------------------------------------------------------------------

local log_name = "seer rpc"
local function log(fmt, ...)
  local ok, line = pcall(string.format, fmt, ...)
  io.stderr:write(("%s [%s] %s\n"):format(os.date("!%Y-%m-%dT%H:%M:%SZ"), log_name, ok and line or tostring(fmt)))
  io.stderr:flush()
end
M.log = log

-- ---- loading the interface ---------------------------------------------------------------------

local function read_lines(path)
  local f = io.open(path, "rb")
  if not f then return {} end
  local text = f:read("*a")
  f:close()
  local lines = {}
  for l in (text .. "\n"):gmatch("(.-)\r?\n") do lines[#lines + 1] = l end
  return lines
end

-- The name a function is defined under, read from its definition line.
local function name_from_line(line)
  if not line then return nil end
  local n = line:match("function%s+([%w_%.:]+)%s*%(") or line:match("([%w_]+)%s*=%s*function%s*%(")
  if not n then return nil end
  return n:match("([%w_]+)$")
end

---@class seerrpc.models
---Model names -> local paths: `--models '{"google/gemma-2-2b": "/models/..."}'` (or a list of
---{name, path}). Each also reaches the interface as MODEL_<NAME>_PATH in the environment.

local function model_env_name(id)
  return "MODEL_" .. id:upper():gsub("[/%-]", "_") .. "_PATH"
end

---Loads an interface file. Returns the interface (functions by name, in exposure order, with
---their specs and warnings) or raises the load error with its traceback.
---@param path string
---@param opts? {models?: table<string, string>}
---@return table iface
function M.load_interface(path, opts)
  opts = opts or {}
  local models = opts.models or {}
  local lines = read_lines(path)
  local source = "@" .. path
  local registered, order = {}, {}
  local pending_globals = {}
  local env = setmetatable({}, { __index = _G })

  local function register(name, fn, level)
    if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
      error(("expose: the name %s must be an identifier (letters, digits, _)"):format(tostring(name)), level + 1)
    end
    if type(fn) ~= "function" then
      error(("expose: %s is a %s, not a function"):format(name, type(fn)), level + 1)
    end
    if registered[name] then error(("expose: %s is exposed twice"):format(name), level + 1) end
    registered[name] = fn
    order[#order + 1] = name
  end

  -- expose(fn) | expose("name", fn) | expose("name") (a global of the interface, looked up once
  -- the file has run) | function expose.name(...) end
  local expose = setmetatable({}, {
    __call = function(_, a, b)
      if type(a) == "function" and b == nil then
        local info = debug.getinfo(a, "S")
        local name = info.source == source and name_from_line(lines[info.linedefined])
        if not name then
          error("expose(fn): cannot tell the function's name from its definition; write expose(\"name\", fn)", 2)
        end
        register(name, a, 2)
        return a
      elseif type(a) == "string" and b == nil then
        pending_globals[#pending_globals + 1] = a
        order[#order + 1] = a
        return
      end
      register(a, b, 2)
      return b
    end,
    __newindex = function(_, name, fn) register(name, fn, 2) end,
    __index = function(_, name) return registered[name] end,
  })
  env.expose = expose
  env.get_model_path = function(name)
    if type(name) ~= "string" then error("get_model_path(name): name must be a model id string", 2) end
    local p = models[name] or os.getenv(model_env_name(name))
    if not p then
      local names = {}
      for k in pairs(models) do names[#names + 1] = k end
      table.sort(names)
      error(("get_model_path: no model %q is configured (configured: %s)"):format(name,
        #names > 0 and table.concat(names, ", ") or "none"), 2)
    end
    return p
  end
  env.list_configured_models = function()
    local t = json.object()
    for k, v in pairs(models) do t[k] = v end
    return t
  end

  local dir = path:match("^(.*)/[^/]*$") or "."
  package.path = dir .. "/?.lua;" .. dir .. "/?/init.lua;" .. package.path
  local chunk, err = loadfile(path)
  if not chunk then error(err, 0) end
  setfenv(chunk, env)
  local ok, e = xpcall(chunk, function(m) return debug.traceback(tostring(m), 2) end)
  if not ok then error(e, 0) end
  for _, name in ipairs(pending_globals) do
    local fn = rawget(env, name)
    if type(fn) ~= "function" then
      error(("expose(%q): the interface defines no global function %s (define `function %s(...)` or use expose(%q, fn))")
        :format(name, name, name, name), 0)
    end
    registered[name] = fn
  end
  local iface = { functions = {}, order = {}, warnings = {}, path = path }
  for _, name in ipairs(order) do
    local fn = registered[name]
    if fn and not iface.functions[name] then
      local info = debug.getinfo(fn, "S")
      local spec = annotations.describe(name, fn, info.source == source and lines or nil, info.linedefined)
      iface.functions[name] = { fn = fn, spec = spec }
      iface.order[#iface.order + 1] = name
      for _, w in ipairs(spec.warnings) do iface.warnings[#iface.warnings + 1] = w end
    end
  end
  if #iface.order == 0 then
    iface.warnings[#iface.warnings + 1] = "the interface exposes no function (mark them with expose)"
  end
  return iface
end

-- ---- calls -------------------------------------------------------------------------------------

local unpack = unpack or table.unpack
local function pack(...) return { n = select("#", ...), ... } end

-- The traceback of an error inside the interface, without the server's own frames.
local function remote_traceback(msg)
  local tb = debug.traceback(tostring(msg), 2)
  local cut = tb:find("\n%s*%[C%]: in function 'xpcall'")
  if cut then tb = tb:sub(1, cut - 1) end
  return tb
end

-- The most arguments a call may pass (positional and by name together): a request is signed but
-- may still be absurd (a client inside a sandbox is not trusted), and every argument costs a
-- stack slot here.
M.MAX_ARGS = 200

local function arg_list(entry, args, kwargs, nargs)
  local list, n = {}, 0
  if nargs ~= nil and (type(nargs) ~= "number" or nargs ~= math.floor(nargs) or nargs < 0 or nargs > M.MAX_ARGS) then
    error(("nargs must be an integer from 0 to %d"):format(M.MAX_ARGS), 0)
  end
  if kwargs ~= nil and type(kwargs) ~= "table" then error("kwargs must be an object", 0) end
  if args ~= nil then
    if type(args) ~= "table" then error("args must be an array", 0) end
    if #args > M.MAX_ARGS then error(("a call passes at most %d arguments; this one passes %d"):format(M.MAX_ARGS, #args), 0) end
    n = nargs or #args
    for i = 1, n do
      local v = args[i]
      if v == json.null then v = nil end
      list[i] = v
    end
  end
  if kwargs ~= nil and type(kwargs) == "table" and next(kwargs) ~= nil then
    local pos = {}
    for i, p in ipairs(entry.spec.params) do pos[p.name] = i end
    for k, v in pairs(kwargs) do
      local i = pos[k]
      if not i then
        local names = {}
        for _, p in ipairs(entry.spec.params) do names[#names + 1] = p.name end
        error(("%s has no parameter %q (its parameters: %s)"):format(entry.spec.name, tostring(k),
          #names > 0 and table.concat(names, ", ") or "none"), 0)
      end
      if i <= n and list[i] ~= nil then
        error(("%s: parameter %s is given both by position and by name"):format(entry.spec.name, k), 0)
      end
      if v == json.null then v = nil end
      list[i] = v
      if i > n then n = i end
      if n > M.MAX_ARGS then error(("a call passes at most %d arguments"):format(M.MAX_ARGS), 0) end
    end
  end
  return list, n
end

local function decode_args(entry, content, bufs)
  local args = wire.decode_value(content.args, bufs)
  local kwargs = wire.decode_value(content.kwargs, bufs)
  return arg_list(entry, args, kwargs, content.nargs)
end

local function fail(id, kind, msg, tb)
  return json.encode{ id = id, ok = false, kind = kind, error = msg, traceback = tb }, nil
end

-- The reply content of a call that returned res[2..n] (res[1] is xpcall's true).
local function results_text(id, res, out)
  local nres = res.n - 1
  if nres <= 1 then
    return ('{"id":"%s","ok":true,"result":%s}'):format(id, wire.encode(res[2], "result", out))
  end
  local parts = {}
  for i = 1, nres do parts[i] = wire.encode(res[i + 1], ("result[%d]"):format(i), out) end
  return ('{"id":"%s","ok":true,"result":%s,"results":[%s]}'):format(id, parts[1], table.concat(parts, ","))
end

-- The reply to a call that ended: res = {n, ok, results... | error}; reason = the watchdog's
-- ("timeout", "cancelled") when it interrupted the call.
local function ended(state, id, name, res, reason, timeout, ms)
  local wd = state.wd
  if not res[1] then
    local msg = tostring(res[2])
    if reason and msg:find("interrupted") then
      if wd then wd:ack() end
      local what = reason == "timeout" and ("timed out after %d ms"):format(math.floor(timeout or 0))
                   or "was cancelled by the client"
      log("call %s %s", name, what)
      return fail(id, reason, ("%s %s"):format(name, what), msg)
    end
    log("call %s failed after %.1f ms: %s", name, ms, msg:match("^[^\n]*"))
    local first = msg:match("^(.-)\nstack traceback:") or msg
    return fail(id, "error", first, msg)
  end
  if reason and wd then wd:ack() end
  local out = {}
  local ok2, text = pcall(results_text, id, res, out)
  if not ok2 then
    log("call %s: the result cannot be sent: %s", name, tostring(text))
    return fail(id, "serialize", ("the result of %s cannot be sent: %s"):format(name, tostring(text)))
  end
  if state.verbose then log("call %s ok in %.2f ms", name, ms) end
  return text, #out > 0 and out or nil
end

local function cancelled_before_start(id, name)
  return fail(id, "cancelled", ("%s was cancelled before it started"):format(name))
end

-- Runs one call; returns the reply content text and its binary frames.
local function run_call(state, id, content, bufs)
  local iface, wd = state.iface, state.wd
  local name = content.fn
  if type(name) ~= "string" then return fail(id, "bad_request", "the request has no function name (fn)") end
  local entry = iface.functions[name]
  if not entry then
    return fail(id, "not_found", ("no exposed function %q (exposed: %s)"):format(name,
      #iface.order > 0 and table.concat(iface.order, ", ") or "none"))
  end
  local ok, list, n = pcall(decode_args, entry, content, bufs)
  if not ok then return fail(id, "bad_request", ("%s: %s"):format(name, tostring(list))) end
  local timeout = state.timeout_ms
  if content.timeout_ms ~= nil then
    timeout = content.timeout_ms
    if type(timeout) ~= "number" or not (timeout >= 0 and timeout <= 1e15) then
      return fail(id, "bad_request", ("%s: timeout_ms must be a number of milliseconds from 0 (none) to 1e15, got %s"):format(name, tostring(timeout)))
    end
  end
  local t0 = now()
  if wd and wd:begin(id, timeout or 0) == "cancelled" then return cancelled_before_start(id, name) end
  local res = pack(xpcall(entry.fn, remote_traceback, unpack(list, 1, n)))
  local reason = wd and wd:finish()
  return ended(state, id, name, res, reason, timeout, (now() - t0) * 1000)
end

local function pass(...) return ... end

-- Plain calls (scalar arguments, an exposed function) run from the channel's recv, in C; it
-- calls these for what is not plain on the way out (engine/rpc/lua_channel.c).
local function fast_path(state)
  local functions = {}
  for name, f in pairs(state.iface.functions) do functions[name] = f.fn end
  return {
    functions = functions,
    watchdog = state.wd,
    timeout_ms = state.timeout_ms,
    -- not a tail call of xpcall, so that its frame (where remote_traceback cuts) keeps its name
    invoke = function(fn, ...) return pass(xpcall(fn, remote_traceback, ...)) end,
    on_error = function(id, name, err, reason, timeout, ms)
      if reason == "cancelled_before_start" then return (cancelled_before_start(id, name)) end
      return (ended(state, id, name, { n = 2, false, err }, reason, timeout, ms))
    end,
    encode = function(id, name, ...)
      return ended(state, id, name, pack(true, ...), nil, nil, 0)
    end,
  }
end
M.run_call = run_call

local function hello_content(state)
  local specs = json.array()
  if state.iface then
    for i, name in ipairs(state.iface.order) do specs[i] = state.iface.functions[name].spec end
  end
  local c = { id = state.reply_id, protocol = wire.PROTOCOL, name = state.name, pid = require("seer.process").getpid(), workers = state.workers }
  if state.load_error then
    c.status, c.error, c.traceback = "error", state.load_error:match("^(.-)\nstack traceback:") or state.load_error,
      state.load_error
  else
    c.status, c.functions, c.warnings = "ok", specs, json.array(state.iface.warnings)
  end
  return json.encode(c)
end

-- ---- the loop ----------------------------------------------------------------------------------

-- Unsigned and badly signed messages never get here, nor replays (a msg_id seen in the last 10
-- minutes, a date more than 5 minutes off): the channel (engine/rpc/wire.c) drops and logs them.

local function error_text(id, kind, msg, tb) return (fail(id, kind, msg, tb)) end

-- The reply to one request: reply type, content text, buffers.
local function handle(state, mt, id, c, bufs)
  if mt == "rpc_call_request" then
    if state.load_error then
      return "rpc_call_reply", error_text(id, "load_error",
        "the interface failed to load: " .. (state.load_error:match("^[^\n]*") or ""), state.load_error)
    end
    local cok, content = pcall(json.decode, c)
    if not cok or type(content) ~= "table" then
      return "rpc_call_reply", error_text(id, "bad_request", "the request content is not a JSON object")
    end
    local rok, text, out = pcall(run_call, state, id, content, bufs)
    if not rok then
      log("a call request failed before it ran: %s", tostring(text))
      return "rpc_call_reply", error_text(id, "bad_request", tostring(text))
    end
    return "rpc_call_reply", text, out
  elseif mt == "rpc_hello_request" then
    state.reply_id = id
    return "rpc_hello_reply", hello_content(state)
  elseif mt == "rpc_shutdown_request" then
    return "rpc_shutdown_reply", '{"ok":true}'
  end
  return "rpc_error_reply", error_text(id, "bad_request", "unknown message type " .. tostring(mt))
end

local function load(state, opts)
  local t0 = now()
  local lok, iface = pcall(M.load_interface, opts.interface, { models = opts.models })
  if lok then
    state.iface = iface
    log("loaded in %.1f ms; exposed: %s", (now() - t0) * 1000, table.concat(iface.order, ", "))
    for _, wmsg in ipairs(iface.warnings) do log("warning: %s", wmsg) end
  else
    state.load_error = tostring(iface)
    log("loading %s failed: %s", opts.interface, state.load_error)
  end
end

-- Answers requests on ch until a shutdown request (or, after a load error, idle_exit seconds
-- without one).
local function loop(state, ch, opts)
  local wd = state.wd
  local last_activity = now()
  local idle_exit = opts.idle_exit_s or 10
  while true do
    local rok, mt, id, c, bufs = pcall(ch.recv, ch, state.load_error and 500 or -1)
    if not rok then
      if tostring(mt):find("interrupted") and wd and wd:unhandled() then
        wd:ack() -- our own interrupt, after its call had ended
      else
        log("stopping: %s", tostring(mt))
        break
      end
    elseif mt == nil then
      if state.load_error and now() - last_activity > idle_exit then
        log("exiting after the load error")
        break
      end
    else
      last_activity = now()
      local hok, reply_type, text, out = pcall(handle, state, mt, id, c, bufs)
      if not hok then
        log("a request could not be handled: %s", tostring(reply_type))
        reply_type, text, out = "rpc_error_reply", error_text(id, "bad_request", tostring(reply_type)), nil
      end
      local sok, serr = pcall(ch.reply, ch, reply_type, text, out)
      if not sok then log("cannot send the reply: %s", tostring(serr)) end
      if mt == "rpc_shutdown_request" then log("shutdown requested") break end
    end
  end
end

---Serves until shutdown. opts: interface, connection_file, models, timeout_ms, name, verbose,
---idle_exit_s (after a load error); worker (the backend endpoint of a pool's broker) and
---worker_slot make this process one of a pool's workers (docs/rpc.md).
function M.serve(opts)
  log_name = "seer rpc " .. (opts.name or opts.interface:match("([^/]+)$"))
  if opts.worker then log_name = log_name .. "[w" .. tostring(opts.worker_slot or "?") .. "]" end
  local info = wire.read_connection(opts.connection_file)
  local key = info.key
  local rpc_core = require "seer.core.rpc"
  local sock, ch, bound
  if opts.worker then
    -- Behind the broker, which has checked signatures, replays and dates already: a call may
    -- wait in its queue longer than the date window.
    sock = C.socket("dealer", key)
    sock:connect(opts.worker)
    ch = rpc_core.channel(sock, { role = "server", name = log_name })
  else
    sock = C.socket("router", key)
    local ep = info.endpoint or "tcp://127.0.0.1:*"
    local ok
    ok, bound = pcall(sock.bind, sock, ep)
    if not ok then error(("seer rpc: cannot bind %s: %s"):format(ep, tostring(bound)), 0) end
    ch = rpc_core.channel(sock, { role = "server", replay_guard = true, name = log_name })
  end
  local wd, ctl
  local ctl_ep = opts.worker and M.worker_control_endpoint(info, opts.worker_slot)
    or info.control_endpoint or ((info.endpoint or ""):match("^ipc://") and (info.endpoint .. ".ctl")) or "tcp://127.0.0.1:*"
  local ok2, w, cbound = pcall(rpc_core.watchdog, ctl_ep, key)
  if ok2 then wd, ctl = w, cbound
  else log("no watchdog (calls cannot be cancelled or timed out): %s", tostring(w)) end
  if not opts.worker and (bound ~= info.endpoint or ctl ~= info.control_endpoint or info.pid == nil) then
    info.endpoint, info.control_endpoint, info.pid = bound, ctl, require("seer.process").getpid()
    wire.write_connection(opts.connection_file, info)
  end
  local state = { name = opts.name, workers = opts.workers or 1, timeout_ms = opts.timeout_ms, wd = wd,
                  verbose = opts.verbose }
  if opts.worker then
    log("worker of %s (control %s), loading %s", opts.worker, tostring(ctl), opts.interface)
  else
    log("listening on %s (control %s), loading %s", bound, tostring(ctl), opts.interface)
  end
  load(state, opts)
  if state.iface and not opts.verbose then ch:fast(fast_path(state)) end
  if opts.worker then
    -- Tell the broker: the hello content it answers with, and where cancels for our calls go.
    local c = json.decode(hello_content(state))
    c.control_endpoint, c.slot, c.pid = ctl, opts.worker_slot, require("seer.process").getpid()
    ch:send("rpc_worker_ready", json.encode(c))
  end
  loop(state, ch, opts)
  if wd then wd:stop() end
  sock:close()
  return state.load_error and 1 or 0
end

---`seer rpc serve --workers N`: a broker (engine/rpc/broker.c) in front of N worker processes,
---each `seer rpc serve --worker BACKEND` loading the interface. opts as serve, plus workers and
---argv_base (the seer binary); returns the exit status.
function M.serve_pool(opts)
  log_name = "seer rpc " .. (opts.name or opts.interface:match("([^/]+)$"))
  local info = wire.read_connection(opts.connection_file)
  local ep = info.endpoint or "tcp://127.0.0.1:*"
  local ctl_ep = info.control_endpoint or (ep:match("^ipc://") and (ep .. ".ctl")) or "tcp://127.0.0.1:*"
  local back_ep = (ep:match("^ipc://") and #ep + 8 - 6 <= 100) and (ep .. ".workers") or "tcp://127.0.0.1:*"
  local ok, pool = pcall(require("seer.core.rpc").pool, { frontend = ep, control = ctl_ep, backend = back_ep, key = info.key,
    name = log_name, workers = opts.workers, idle_exit_s = opts.idle_exit_s or 10 })
  if not ok then error("seer rpc: " .. tostring(pool), 0) end
  local bound, ctl, back = pool:endpoints()
  info.endpoint, info.control_endpoint, info.pid, info.workers = bound, ctl, require("seer.process").getpid(), opts.workers
  wire.write_connection(opts.connection_file, info)
  local argv = { require("seer.jupyter").seer_binary(), "rpc", "serve", opts.interface, "--connection-file",
                 opts.connection_file, "--worker", back, "--die-with-parent" }
  if opts.name then argv[#argv + 1] = "--name"; argv[#argv + 1] = opts.name end
  if opts.models and next(opts.models) then
    local m = json.object()
    for k, v in pairs(opts.models) do m[k] = v end
    argv[#argv + 1] = "--models"; argv[#argv + 1] = json.encode(m)
  end
  if opts.timeout_ms then argv[#argv + 1] = "--timeout"; argv[#argv + 1] = tostring(opts.timeout_ms / 1000) end
  if opts.verbose then argv[#argv + 1] = "--verbose" end
  local rc = pool:run(argv)
  pool:close()
  return rc
end

-- Where worker slot k's watchdog listens: beside the server's ipc socket, else a free tcp port.
function M.worker_control_endpoint(info, slot)
  local ep = info.endpoint or ""
  local path = ep:match("^ipc://(.*)$")
  if path and #path + 12 <= 100 then return ("ipc://%s.w%d.ctl"):format(path, slot or 0) end
  return "tcp://127.0.0.1:*"
end

return M
