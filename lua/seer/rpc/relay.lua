--- seer.rpc.relay: a scoped library used from a notebook session in *another* sandbox.
---
--- A scoped sandbox (A) serves an interface over seer RPC on unix sockets in its run folder.
--- A notebook kernel in a second sandbox (B) cannot reach them: B's mount namespace has no path
--- to A's run folder, and B's network (if any) is not A's. The relay is a host process that
--- listens at a socket in B's run folder (which B sees at the same path) and carries the bytes
--- of each connection made there, unchanged, to a connection of its own to A's socket:
---
---   kernel in B ── DEALER ──> [B's run]/rpc-relay/<name>.sock (relay) ── bytes ──> A's RPC server
---
--- Every message is still signed end to end with the RPC server's key (the relay never holds
--- a key it could sign with: it does not parse messages or sign; the kernel in B gets the key in
--- a connection file written 0600 into B's run folder, exactly as a local session's library does
--- on the host). What installing the library grants B is what the library is: calls to A's
--- served functions. Both sides are hostile to the relay, and it queues nothing: it is seer.net's
--- byte relay (the connection guard, engine/net/guard.c), which reads from one side only while the
--- other takes what it read, so it holds at most 512 KiB per connection and carries at most 256
--- connections at once (past that a new one is closed at once): at most 128 MiB however A and B
--- behave. A's side is also read as ZMTP and cut past a 64 MiB message. (Until 2026-12-01 the
--- relay was a pair of ZMQ sockets, which queued 16 whole messages of up to 64 MiB per connection
--- of B's: 8 connections of B's, sending 32 MiB messages while A did not read, took it to 4.4 GB.)
--- It never follows a path either sandbox controls: its socket is made beneath B's run folder and
--- A's socket is reached beneath A's run folder, with no link there followed (seer.net.relay's
--- listen_beneath and beneath). It ends when that sandbox is terminated, or with the process that
--- started it (for a detached sandbox: with the sandbox, seer.sidecar).
---@class seerrpcrelay
local M = {}

local json = require "seer.json"
local process = require "seer.process"
local safe_fs = require "seer.safe_fs"

local MAX_FRAME = 64 * 1024 * 1024

local relays = {} -- [sandbox_id .. "/" .. name] -> {child, conn_path}

---Runs the relay (in its own process: `seer -e 'require("seer.rpc.relay").run()'`, the spec in
---SEER_RPC_RELAY). Prints "ready" once every socket listens, then carries connections until
---it is stopped (the guard's thread does the work; this one reports refusals to the log).
function M.run()
  local raw = os.getenv("SEER_RPC_RELAY")
  if not raw then error("seer.rpc.relay: no spec (it is started by seer.rpc.relay.bridge)", 0) end
  local spec = json.decode(raw)
  if spec.die_with_parent then process.die_with_parent() end
  local net = require "seer.net"
  local held = {}
  for _, p in ipairs(spec.pairs) do
    local path = type(p.front) == "string" and p.front:match("^ipc://(/.+)$")
    if not path then error("seer.rpc.relay: a front endpoint must be an ipc:// path: " .. tostring(p.front), 0) end
    -- B writes its run folder (listen_beneath) and A its own (beneath): neither can make the
    -- relay create, remove or reach a socket elsewhere through a link
    local back_beneath = spec.back_beneath and p.back:match("^ipc://") and spec.back_beneath or nil
    held[#held + 1] = { name = path, relay = net.relay(path, p.back, { max_bytes = MAX_FRAME, listen_beneath = spec.beneath,
                                                                       beneath = back_beneath }), cuts = 0 }
  end
  io.stdout:write("ready\n")
  io.stdout:flush()
  while true do
    process.sleep_ms(1000)
    for _, h in ipairs(held) do
      local n, why = h.relay:cuts()
      if n > h.cuts then
        io.stderr:write(("seer rpc relay: %s: %d refused or cut (the last: %s)\n"):format(h.name, n - h.cuts, tostring(why)))
        h.cuts = n
      end
    end
  end
end

local function short_id() return require("seer.net").new_key():sub(1, 8) end

---Makes a scoped library's RPC server reachable from inside `sandbox` (a started Sandbox):
---starts a relay (once per sandbox and library) and writes a connection file into the
---sandbox's run folder. Returns the connection file's path (the same inside and on the host).
---@param server table a seer.rpc Server (its client's validated connection info is used)
---@param sandbox table a started seer.sandbox Sandbox
---@return string connection_file
function M.bridge(server, sandbox)
  local key = sandbox.sandbox_id .. "/" .. server.name
  local have = relays[key]
  if have and have.child:alive() then return have.conn_path end
  local info = server.client and server.client.info
  if type(info) ~= "table" or type(info.endpoint) ~= "string" or type(info.key) ~= "string" then
    error(("the scoped library %s has no running server to reach from sandbox %s"):format(server.name, sandbox.sandbox_id), 0)
  end
  local run = safe_fs.root(sandbox.run_dir, "the sandbox's run folder")
  safe_fs.must(run:mkdirs("rpc-relay"))
  local base = server.name .. "-" .. short_id()
  local dir = sandbox.run_dir .. "/rpc-relay"
  local pairs_list = { { front = "ipc://" .. dir .. "/" .. base .. ".sock", back = info.endpoint } }
  local conn = { key = info.key, signature_scheme = "hmac-sha256", transport = "ipc", name = server.name,
                 endpoint = pairs_list[1].front, pid = info.pid }
  if type(info.control_endpoint) == "string" then
    pairs_list[2] = { front = "ipc://" .. dir .. "/" .. base .. "-ctl.sock", back = info.control_endpoint }
    conn.control_endpoint = pairs_list[2].front
  end
  for _, p in ipairs(pairs_list) do
    if #p.front - 6 > 100 then
      error(("the sandbox folder %s is too deep for unix sockets; set SEER_SANDBOX_DIR to a shorter path"):format(sandbox.state_dir), 0)
    end
  end
  -- the server's own folder (A's run folder) when its client reached it beneath one
  local back_root = server.client.root and server.client.root.path or nil
  local spec = json.encode{ pairs = pairs_list, die_with_parent = not sandbox.detached, beneath = sandbox.run_dir,
                            back_beneath = back_root }
  local argv = { require("seer.jupyter").seer_binary(), "-e", 'require("seer.rpc.relay").run()' }
  local child, line
  if sandbox.detached then
    child, line = require("seer.sidecar").start{ argv = argv, env = { SEER_RPC_RELAY = spec },
      log = sandbox.state_dir .. "/rpc-relay.log", keeper_pid = sandbox.keeper_pid, keeper_start = sandbox.keeper_start,
      ready_timeout_ms = 10000, what = "the RPC relay for " .. server.name }
  else
    child, line = process.start_helper{ code = argv[3], env = { SEER_RPC_RELAY = spec }, log = sandbox.state_dir .. "/rpc-relay.log",
      ready_timeout_ms = 10000, what = "the RPC relay for " .. server.name }
  end
  if line ~= "ready" then
    child:stop(500)
    error(("the RPC relay for %s into sandbox %s did not start (%s)"):format(server.name, sandbox.sandbox_id, child:describe_exit()), 0)
  end
  local rel = "rpc-relay/" .. base .. ".json"
  safe_fs.must(run:write(rel, json.encode(conn) .. "\n", { mode = tonumber("600", 8) }))
  relays[key] = { child = child, conn_path = sandbox.run_dir .. "/" .. rel }
  return relays[key].conn_path
end

---Stops the relays into a sandbox (called when it is terminated).
---@param sandbox_id string
function M.stop_for(sandbox_id)
  for key, r in pairs(relays) do
    if key:sub(1, #sandbox_id + 1) == sandbox_id .. "/" then
      pcall(r.child.stop, r.child, 500)
      relays[key] = nil
    end
  end
end

---A copy of `workspace` for installing into `sandbox`: each scoped library (Server:library) of
---another sandbox is rebuilt to reach its server through a relay (M.bridge). Other libraries
---are kept as they are. Returns the workspace itself when it has no scoped library.
---@param workspace table a seer.workspace Workspace
---@param sandbox table a started Sandbox
---@return table workspace
function M.for_sandbox(workspace, sandbox)
  local changed, libs = false, {}
  for i, lib in ipairs(workspace.libraries or {}) do
    local r = rawget(lib, "rpc")
    if type(r) == "table" and r.server and r.server.sandbox_id ~= sandbox.sandbox_id then
      local rpc = require "seer.rpc"
      local conn = M.bridge(r.server, sandbox)
      local fns = r.server:functions()
      local ws = require "seer.workspace"
      libs[i] = ws.Library{ name = lib.name, files = { [lib.name .. ".lua"] = rpc.client_code(lib.name, fns, conn) },
                            docs = lib.docs }
      changed = true
    else
      libs[i] = lib
    end
  end
  if not changed then return workspace end
  local copy = {}
  for k, v in pairs(workspace) do copy[k] = v end
  copy.libraries = libs
  return setmetatable(copy, getmetatable(workspace))
end

return M
