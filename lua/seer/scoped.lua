--- seer.scoped: `ScopedSandbox` (names as the reference). A scoped sandbox is a sandbox whose
--- agent-facing surface is only the functions an interface file exposes: `scoped:serve(file)`
--- runs `seer rpc serve` inside the sandbox (as a sandboxd service) and returns a Library, an
--- mcp_config entry, a prompt or a Skill for the agent's side (docs/rpc.md, docs/sandbox.md).
---
---   local scoped = env.ScopedSandbox(env.SandboxConfig{ models = { "org/model" } }):start()
---   local lib = scoped:serve(here .. "/interface.lua", { expose_as = "library", name = "model_tools" })
---   local session = exec.create_local_session(ws.Workspace{ libraries = { lib } }, "/tmp/work", "agent")
---@class seerscoped
local M = {}

local S = require "seer.sandbox"
local json = require "seer.json"
local process = require "seer.process"

---@class seerscoped.ScopedSandbox
---@field sandbox seersandbox.Sandbox the sandbox the interfaces run in
---@field sandbox_id string|nil
local Scoped = {}
M.ScopedSandboxClass = Scoped

-- Everything a Sandbox has (exec, write_file, model_handles, ...) is reachable on the scoped one.
-- A typo of a method of either (scoped:serv) names the nearest instead of "attempt to call a nil
-- value"; the sandbox's own messages (a reference name it lacks) name the caller's line.
Scoped.__index = function(self, k)
  local v = rawget(Scoped, k)
  if v ~= nil then return v end
  local sb = rawget(self, "sandbox")
  local ok, x = pcall(function() return sb and sb[k] end)
  if not ok then error((tostring(x):gsub("^[^\n]-:%d+: ", "", 1)), 2) end
  if type(x) == "function" then return function(_, ...) return x(sb, ...) end end
  if x == nil and type(k) == "string" and not k:find("^_") and #k >= 3 then
    local names, seen = S.method_names(), {}
    for _, n in ipairs(names) do seen[n] = true end
    for n, f in pairs(Scoped) do
      if type(n) == "string" and type(f) == "function" and not n:find("^_") and not seen[n] then names[#names + 1] = n end
    end
    table.sort(names)
    local near = S.nearest_name(k, names)
    if near then
      error(("ScopedSandbox has no method '%s' (did you mean '%s'?); methods: %s"):format(k, near, table.concat(names, ", ")), 2)
    end
  end
  return x
end

---A scoped sandbox for the config (not started): `env.ScopedSandbox(config)`.
M.ScopedSandbox = setmetatable({}, {
  __call = function(_, config)
    local ok, sb = pcall(S.Sandbox, config)
    if not ok then error(sb, 2) end
    return setmetatable({ sandbox = sb, servers = {} }, Scoped)
  end,
})

---Starts the sandbox (as Sandbox:start). Returns self.
---@param opts? {name?: string, workspace?: seerworkspace.Workspace}|string as Sandbox:start (a workspace goes into the scoped sandbox's /workspace)
---@return seerscoped.ScopedSandbox
function Scoped:start(opts)
  local ok, err = pcall(self.sandbox.start, self.sandbox, opts)
  if not ok then error(err, 2) end
  return self
end

local function basename(p) return p:match("([^/]+)$") end

-- The sandbox's run folder as a safe_fs root: code inside can change it, so the host's files
-- there (uploads, connection files, logs, exit files) are written and read beneath it with no
-- link followed (seer.safe_fs).
function Scoped:_run_root()
  return require("seer.safe_fs").root(self.sandbox.run_dir, "the sandbox's run folder")
end

-- Where interfaces and uploaded files go: a directory on both sides of the sandbox at the same
-- path (the sandbox's run directory), on the interfaces' package.path.
function Scoped:_dir()
  local ok, err = self:_run_root():mkdirs("rpc")
  if not ok then error(err, 0) end
  return self.sandbox.run_dir .. "/rpc"
end

---Copies a file from this machine next to the interfaces, so an interface can `require` it or
---open it by name. Returns its path inside the sandbox.
---@param path string
---@param name? string the name inside (default: the file's name)
---@return string
function Scoped:upload_file(path, name)
  if not self.sandbox.sandbox_id then error("upload_file: start the scoped sandbox first", 2) end
  if type(path) ~= "string" then error("upload_file(path, name): path must be a file on this machine", 2) end
  name = name or basename(path)
  if type(name) ~= "string" or not name:match("^[%w_.-]+$") or name:match("^%.") then
    error(("upload_file: the name %q must be a file name (letters, digits, '_', '-', '.'; no '/')"):format(tostring(name)), 2)
  end
  local dest = self:_dir() .. "/" .. name
  local ok, err = self:_run_root():copy_in("rpc/" .. name, path)
  if not ok then error(("upload_file: %s"):format(err), 2) end
  return dest
end

-- seer.rpc's spawn for this sandbox: the server runs as a sandboxd service.
function Scoped:_spawn(iface_copy)
  local sb = self.sandbox
  return function(argv, env, info)
    local a = {}
    for i, v in ipairs(argv) do a[i] = v end
    a[1] = "/opt/seer/bin/seer"
    for i, v in ipairs(a) do if v == info.interface then a[i] = iface_copy end end
    local svc = "rpc-" .. basename(info.connection_file):gsub("%.json$", "")
    local r = sb:start_service(svc, a, { env = env })
    local run = self:_run_root()
    local function ended()
      -- written by sandboxd inside: read bounded, never through a link or from a fifo
      local text = run:read("services/" .. svc .. ".exit", { max = 65536 })
      if text then
        local ok, st = pcall(json.decode, text)
        return true, ok and type(st) == "table" and type(st.how) == "string" and st.how or "exited"
      end
      local alive, why = sb:_alive()
      if not alive then return true, why end
      return false
    end
    return {
      pid = r.pid,
      kill = function(sig)
        if not ended() then pcall(sb.client.request, sb.client, "stop_service", { name = svc, signal = sig }, { timeout_ms = 2000 }) end
      end,
      wait = function(timeout_ms)
        local deadline = process.now_ms() + (timeout_ms or 0)
        while true do
          local done, how = ended()
          if done or process.now_ms() >= deadline then return done, how end
          process.sleep_ms(10)
        end
      end,
    }
  end
end

---Serves an interface file inside the sandbox. expose_as: "library" (default: a Library whose
---Lua module calls the functions), "mcp" (an mcp_config entry running `seer mcp rpc`), "prompt"
---(the text listing signatures and docs) or "skill" (a Skill). Serving the same file twice
---under different names works. The interface gets `get_model_path(name)` for the sandbox's
---models.
---@param file string the interface.lua on this machine
---@param opts? {expose_as?: "library"|"mcp"|"prompt"|"skill", name?: string, workers?: integer, timeout?: number, load_timeout?: number, env?: table<string,string>}
---@return any exposed, seerrpc.Server server
function Scoped:serve(file, opts)
  opts = opts or {}
  if not self.sandbox.sandbox_id then error("serve: start the scoped sandbox first (env.ScopedSandbox(config):start())", 2) end
  local rpc = require "seer.rpc"
  local name = opts.name or (basename(file) or "interface"):gsub("%.lua$", "")
  -- hidden models: the interface runs inside, so it must not name them (nor may its options);
  -- it gets them as <hidden> (Sandbox:model_paths_inside)
  local fh = io.open(file, "rb")
  if fh then
    local text = fh:read(64 * 1024 * 1024) or ""
    fh:close()
    local okh, herr = pcall(self.sandbox.refuse_hidden_names, self.sandbox, text, "the interface file " .. file)
    if not okh then error("serve: " .. tostring(herr), 2) end
  end
  for k, v in pairs(opts.env or {}) do
    local okh, herr = pcall(self.sandbox.refuse_hidden_names, self.sandbox, tostring(k) .. "=" .. tostring(v), "serve's env." .. tostring(k))
    if not okh then error("serve: " .. tostring(herr), 2) end
  end
  local ok_copy, copy = pcall(self.upload_file, self, file, name .. ".lua")
  if not ok_copy then error(copy, 2) end
  local o = { expose_as = opts.expose_as, name = name, workers = opts.workers, timeout = opts.timeout, load_timeout = opts.load_timeout,
              env = opts.env, connection_dir = self:_dir(), connection_root = self:_run_root(), models = self.sandbox:model_paths_inside(),
              spawn = self:_spawn(copy) }
  local ok, exposed, srv = pcall(rpc.serve, file, o)
  if not ok then error(exposed, 2) end
  srv.sandbox_id = self.sandbox.sandbox_id
  self.servers[#self.servers + 1] = srv
  return exposed, srv
end

---The last n lines of the RPC servers' logs (all of them, or the one named).
---@param n? integer default 50
---@param name? string
---@return string
function Scoped:show_rpc_logs(n, name)
  local parts = {}
  for _, srv in ipairs(self.servers) do
    if not name or srv.name == name then
      parts[#parts + 1] = ("== %s\n%s"):format(srv.name, srv:logs(n or 50))
    end
  end
  local text = table.concat(parts, "\n")
  print(text)
  return text
end

---Stops the servers and the sandbox (as Sandbox:terminate).
---@param opts? {save_snapshot?: boolean, snapshot_description?: string}
---@return string|nil snapshot_id
function Scoped:terminate(opts)
  for _, srv in ipairs(self.servers) do pcall(srv.close, srv) end
  self.servers = {}
  return self.sandbox:terminate(opts)
end

return M
