--- seer.rpc.server: `seer rpc serve INTERFACE.lua`. Loads an interface file (with the injected
--- names expose, get_model_path and list_configured_models) and answers signed RPC requests on
--- a ZMQ ROUTER socket: hello (the exposed functions with their docs and schemas, or the load
--- error), call, shutdown. Calls run one at a time on the main thread (models are not
--- reentrant); a watchdog thread (seer.core.rpc) interrupts a call that is cancelled or runs past
--- its deadline. With workers > 1 this process is a broker in front of worker processes, each
--- of which loads the interface (docs/rpc.md).
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

local function arg_list(entry, args, kwargs, nargs)
  local list, n = {}, 0
  if args ~= nil then
    if type(args) ~= "table" then error("args must be an array", 0) end
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
    end
  end
  return list, n
end

-- Runs one call; returns the reply content text and its binary frames.
local function run_call(state, id, content, bufs)
  local iface, wd = state.iface, state.wd
  local name = content.fn
  local function fail(kind, msg, tb)
    local t = { id = id, ok = false, kind = kind, error = msg, traceback = tb }
    return json.encode(t), nil
  end
  if type(name) ~= "string" then return fail("bad_request", "the request has no function name (fn)") end
  local entry = iface.functions[name]
  if not entry then
    return fail("not_found", ("no exposed function %q (exposed: %s)"):format(name,
      #iface.order > 0 and table.concat(iface.order, ", ") or "none"))
  end
  local ok, list, n = pcall(function()
    local args = wire.decode_value(content.args, bufs)
    local kwargs = wire.decode_value(content.kwargs, bufs)
    return arg_list(entry, args, kwargs, content.nargs)
  end)
  if not ok then return fail("bad_request", ("%s: %s"):format(name, tostring(list))) end
  local timeout = tonumber(content.timeout_ms) or state.timeout_ms
  local t0 = now()
  if wd and wd:begin(id, timeout or 0) == "cancelled" then
    return fail("cancelled", ("%s was cancelled before it started"):format(name))
  end
  local res = pack(xpcall(entry.fn, remote_traceback, unpack(list, 1, n)))
  local reason = wd and wd:finish()
  local ms = (now() - t0) * 1000
  if not res[1] then
    local msg = tostring(res[2])
    if reason and msg:find("interrupted") then
      state.handled = (wd and wd:fired()) or 0
      local what = reason == "timeout" and ("timed out after %d ms"):format(math.floor(timeout or 0))
                   or "was cancelled by the client"
      log("call %s %s", name, what)
      return fail(reason, ("%s %s"):format(name, what), msg)
    end
    log("call %s failed after %.1f ms: %s", name, ms, msg:match("^[^\n]*"))
    local first = msg:match("^(.-)\nstack traceback:") or msg
    return fail("error", first, msg)
  end
  if reason then state.handled = (wd and wd:fired()) or 0 end
  local out = {}
  local nres = res.n - 1 -- results after the ok flag
  local ok2, text = pcall(function()
    if nres <= 1 then
      return ('{"id":"%s","ok":true,"result":%s}'):format(id, wire.encode(res[2], "result", out))
    end
    local parts = {}
    for i = 1, nres do parts[i] = wire.encode(res[i + 1], ("result[%d]"):format(i), out) end
    return ('{"id":"%s","ok":true,"result":%s,"results":[%s]}'):format(id, parts[1], table.concat(parts, ","))
  end)
  if not ok2 then
    log("call %s: the result cannot be sent: %s", name, tostring(text))
    return fail("serialize", ("the result of %s cannot be sent: %s"):format(name, tostring(text)))
  end
  if state.verbose then log("call %s ok in %.2f ms", name, ms) end
  return text, #out > 0 and out or nil
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

local REPLAY_WINDOW_S = 600

-- Accepts each msg_id once and only messages dated within the window (replayed captures of a
-- signed message are dropped). ISO 8601 UTC dates of one format compare as strings.
local function replay_guard()
  local cur, old, rotated = {}, {}, now()
  local lo, hi, bounds_at = "", "", -1
  return function(hdr)
    local id = hdr.msg_id
    if type(id) ~= "string" or not id:match("^[%w%-_.:]+$") or #id > 100 then return false, "a bad msg_id" end
    local t = now()
    if t - rotated > REPLAY_WINDOW_S then old, cur, rotated = cur, {}, t end
    if cur[id] or old[id] then return false, "a replayed msg_id" end
    local sec = os.time()
    if sec ~= bounds_at then
      bounds_at = sec
      lo = os.date("!%Y-%m-%dT%H:%M:%S", sec - REPLAY_WINDOW_S / 2)
      hi = os.date("!%Y-%m-%dT%H:%M:%S", sec + REPLAY_WINDOW_S / 2)
    end
    local date = hdr.date
    if type(date) ~= "string" or not date:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d") or date < lo or date > hi then
      return false, "a date outside the accepted window"
    end
    cur[id] = true
    return true
  end
end

---Serves until shutdown. opts: interface, connection_file, models, workers, timeout_ms, name,
---verbose, idle_exit_s (after a load error).
function M.serve(opts)
  log_name = "seer rpc " .. (opts.name or opts.interface:match("([^/]+)$"))
  local info = wire.read_connection(opts.connection_file)
  local key = info.key
  local sock = C.socket("router", key)
  local ep = info.endpoint or "tcp://127.0.0.1:*"
  local ok, bound = pcall(sock.bind, sock, ep)
  if not ok then error(("seer rpc: cannot bind %s: %s"):format(ep, tostring(bound)), 0) end
  local wd, ctl
  local ctl_ep = info.control_endpoint or (ep:match("^ipc://") and (ep .. ".ctl")) or "tcp://127.0.0.1:*"
  local ok2, w, cbound = pcall(require("seer.core.rpc").watchdog, ctl_ep, key)
  if ok2 then wd, ctl = w, cbound
  else log("no watchdog (calls cannot be cancelled or timed out): %s", tostring(w)) end
  if bound ~= info.endpoint or ctl ~= info.control_endpoint or info.pid == nil then
    info.endpoint, info.control_endpoint, info.pid = bound, ctl, require("seer.process").getpid()
    wire.write_connection(opts.connection_file, info)
  end
  local state = { name = opts.name, workers = opts.workers or 1, timeout_ms = opts.timeout_ms, wd = wd, handled = 0,
                  verbose = opts.verbose }
  log("listening on %s (control %s), loading %s", bound, tostring(ctl), opts.interface)
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
  local make_header = wire.header_maker()
  local accept = replay_guard()
  local last_activity = now()
  local idle_exit = opts.idle_exit_s or 10
  while true do
    local rok, idents, h, _, _, c, bufs = pcall(sock.recv, sock, state.load_error and 500 or -1)
    if not rok then
      if tostring(idents):find("interrupted") and wd and wd:fired() > state.handled then
        state.handled = wd:fired() -- our own interrupt, after its call had ended
      else
        log("stopping: %s", tostring(idents))
        break
      end
    elseif idents == nil then
      if state.load_error and now() - last_activity > idle_exit then
        log("exiting after the load error")
        break
      end
    else
      last_activity = now()
      local dok, hdr = pcall(json.decode, h)
      local good, why = false, "an unreadable header"
      if dok and type(hdr) == "table" then good, why = accept(hdr) end
      if not good then
        log("dropped a signed message with %s", why)
      else
        local mt = hdr.msg_type
        local reply_type, text, out
        if mt == "rpc_hello_request" then
          state.reply_id = hdr.msg_id
          reply_type, text = "rpc_hello_reply", hello_content(state)
        elseif mt == "rpc_call_request" then
          reply_type = "rpc_call_reply"
          if state.load_error then
            text = json.encode{ id = hdr.msg_id, ok = false, kind = "load_error",
                                error = "the interface failed to load: " .. (state.load_error:match("^[^\n]*") or ""),
                                traceback = state.load_error }
          else
            local cok, content = pcall(json.decode, c)
            if not cok or type(content) ~= "table" then
              text = json.encode{ id = hdr.msg_id, ok = false, kind = "bad_request", error = "the request content is not a JSON object" }
            else
              text, out = run_call(state, hdr.msg_id, content, bufs)
            end
          end
        elseif mt == "rpc_shutdown_request" then
          reply_type, text = "rpc_shutdown_reply", json.encode{ ok = true }
        else
          reply_type, text = "rpc_error_reply", json.encode{ id = hdr.msg_id, ok = false, kind = "bad_request",
                                                           error = "unknown message type " .. tostring(mt) }
        end
        local sok, serr = pcall(sock.send, sock, idents, (make_header(reply_type)), h, "{}", text, out)
        if not sok then log("cannot send the reply: %s", tostring(serr)) end
        if mt == "rpc_shutdown_request" then log("shutdown requested") break end
      end
    end
  end
  if wd then wd:stop() end
  sock:close()
  return state.load_error and 1 or 0
end

return M
