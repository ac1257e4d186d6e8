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
  -- the reference's positional start(workspace): a Workspace where the options table goes
  if type(opts) == "table" and type(opts.install) == "function" then opts = { workspace = opts } end
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

-- Where the interfaces go: a directory on both sides of the sandbox at the same path (the
-- sandbox's run directory), on the interfaces' package.path.
function Scoped:_dir()
  local ok, err = self:_run_root():mkdirs("rpc")
  if not ok then error(err, 0) end
  return self.sandbox.run_dir .. "/rpc"
end

-- The interfaces' working directory inside the sandbox (sandboxd's default, given explicitly to
-- their services): where upload_file puts files, so an interface opens them by name.
local WORKDIR = "/workspace"
M.WORKDIR = WORKDIR

-- An upload's name: a relative path below the working directory, checked before anything is
-- written (safe_fs refuses `..` and links too; this says what is wrong in the caller's terms).
local function check_upload_name(name)
  local function bad(why)
    error(("upload_file: the name %q %s; give a relative path such as \"helper.lua\" or \"data/prompts.txt\""):format(tostring(name), why), 0)
  end
  if type(name) ~= "string" then bad("must be a string, got a " .. type(name)) end
  if name == "" then bad("is empty") end
  if name:find("%c") then bad("holds a control character") end
  if name:sub(1, 1) == "/" then bad(("is absolute (uploads go below %s, the interface's working directory)"):format(WORKDIR)) end
  for part in (name .. "/"):gmatch("([^/]*)/") do
    if part == ".." then bad("has a '..' component") end
    if part == "." then bad("has a '.' component") end
    if part == "" then bad("has an empty component ('//' or a trailing '/')") end
    if #part > 255 then bad("has a component longer than 255 bytes") end
  end
end

---Copies a file from this machine into the scoped sandbox's /workspace, the working directory
---the interfaces run in (the reference puts it "in /root/ alongside interface.py", its working
---directory): an interface opens it by its name (`io.open("helper.txt")`) and requires a Lua
---module by its name (`./?.lua` is on its package.path). Before or after `serve`, as in the
---reference. Written on the host with seer.safe_fs (no link the sandbox planted is followed;
---a file already there is replaced). Returns its path inside the sandbox.
---@param path string the file on this machine
---@param name? string|{name?: string} the name inside, a relative path ("data/prompts.txt"; default: the file's name)
---@return string path inside the sandbox (/workspace/NAME)
function Scoped:upload_file(path, name)
  if type(name) == "table" then
    for k in pairs(name) do
      if k ~= "name" then error(("upload_file: unknown option '%s'; valid options: name"):format(tostring(k)), 2) end
    end
    name = name.name
  end
  if not self.sandbox.sandbox_id then error("upload_file: start the scoped sandbox first", 2) end
  if type(path) ~= "string" then error(("upload_file(path, name): path must be a file on this machine, got a %s"):format(type(path)), 2) end
  if name == nil then name = basename(path) end
  local ok, err = pcall(check_upload_name, name)
  if not ok then error(err, 2) end
  local root = require("seer.safe_fs").root(self.sandbox.workspace_dir, "the sandbox's workspace")
  local cok, cerr = root:copy_in(name, path, { mkdirs = true })
  if not cok then error(("upload_file: %s"):format(cerr), 2) end
  return WORKDIR .. "/" .. name
end

-- Copies the interface file next to the other interfaces (rpc/NAME.lua in the run folder).
function Scoped:_copy_interface(file, name)
  local dest = self:_dir() .. "/" .. name .. ".lua"
  local ok, err = self:_run_root():copy_in("rpc/" .. name .. ".lua", file)
  if not ok then error(("serve: %s"):format(err), 0) end
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
    local r = sb:start_service(svc, a, { env = env, cwd = WORKDIR })
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

-- serve's options: each with its Lua type (seer.checks.options).
local SERVE_OPTS = { expose_as = "string", name = "string", workers = "number", timeout = "number", load_timeout = "number",
                     env = "table", verbose = "boolean", max_reply_bytes = "number" }
local EXPOSE_AS = { library = true, mcp = true, prompt = true, skill = true }

-- serve's options from its arguments after the file: a table (the reference's keywords), or the
-- reference's positional expose_as and name. Everything checked before anything starts.
local function serve_opts(a, b, extra)
  local checks = require "seer.checks"
  local opts
  if type(a) == "string" then
    if b ~= nil and type(b) ~= "string" then
      error(("serve(file, expose_as, name): name must be a string, got a %s (or give the options as one table: serve(file, {expose_as = ..., name = ...}))"):format(type(b)), 0)
    end
    if extra then error("serve(file, expose_as, name): too many arguments; give the options as one table: serve(file, {expose_as = ..., name = ..., workers = ...})", 0) end
    opts = { expose_as = a, name = b }
  else
    if b ~= nil or extra then error("serve(file, opts): one options table, e.g. serve(file, {expose_as = \"mcp\", name = \"tools\"})", 0) end
    opts = checks.options("serve", a, SERVE_OPTS, 2) -- level 2: no position (serve adds its caller's)
  end
  if opts.expose_as ~= nil and not EXPOSE_AS[opts.expose_as] then
    error(("serve: expose_as must be \"library\", \"mcp\", \"prompt\" or \"skill\", not %q"):format(opts.expose_as), 0)
  end
  if opts.name ~= nil and not opts.name:match("^[%a_][%w_]*$") then
    error(("serve: the name %q must be a Lua identifier (it becomes a module name and MCP server name)"):format(opts.name), 0)
  end
  checks.whole("serve", "option 'workers'", opts.workers, 1, 2 ^ 31 - 1, 2)
  for _, k in ipairs({ "timeout", "load_timeout" }) do
    local v = opts[k]
    if v ~= nil and not (v > 0 and v < math.huge) then
      error(("serve: option '%s' must be a number of seconds > 0, got %s"):format(k, tostring(v)), 0)
    end
  end
  for k, v in pairs(opts.env or {}) do
    if type(k) ~= "string" or type(v) ~= "string" then
      error(("serve: option 'env' maps names to strings; env[%s] is a %s"):format(tostring(k), type(v)), 0)
    end
  end
  return opts
end

---Serves an interface file inside the sandbox. expose_as: "library" (default: a Library whose
---Lua module calls the functions), "mcp" (an mcp_config entry running `seer mcp rpc`), "prompt"
---(the text listing signatures and docs) or "skill" (a Skill). Serving the same file twice
---under different names works. The interface gets `get_model_path(name)` for the sandbox's
---models; it runs with /workspace as its working directory (where upload_file puts files).
---The reference's positional form works too: `serve(file, "mcp", "tools")`. An unknown option
---or a value of the wrong kind is an error naming it, before anything starts.
---@param file string the interface.lua on this machine
---@param opts? {expose_as?: "library"|"mcp"|"prompt"|"skill", name?: string, workers?: integer, timeout?: number, load_timeout?: number, env?: table<string,string>, verbose?: boolean, max_reply_bytes?: integer}|"library"|"mcp"|"prompt"|"skill"
---@param name? string with a positional expose_as: the name
---@return any exposed, seerrpc.Server server
function Scoped:serve(file, opts, name, ...)
  local okp, perr = pcall(serve_opts, opts, name, select("#", ...) > 0)
  if not okp then error(perr, 2) end
  opts = perr
  if not self.sandbox.sandbox_id then error("serve: start the scoped sandbox first (env.ScopedSandbox(config):start())", 2) end
  if type(file) ~= "string" then error(("serve(file, opts): file must be the interface's path on this machine, got a %s"):format(type(file)), 2) end
  local rpc = require "seer.rpc"
  name = opts.name or (basename(file) or "interface"):gsub("%.lua$", "")
  if not name:match("^[%a_][%w_]*$") then
    error(("serve: the name %q (from the file's name) must be a Lua identifier; give one: serve(file, {name = \"tools\"})"):format(name), 2)
  end
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
  local ok_copy, copy = pcall(self._copy_interface, self, file, name)
  if not ok_copy then error(copy, 2) end
  local o = { expose_as = opts.expose_as, name = name, workers = opts.workers, timeout = opts.timeout, load_timeout = opts.load_timeout,
              env = opts.env, verbose = opts.verbose, max_reply_bytes = opts.max_reply_bytes,
              connection_dir = self:_dir(), connection_root = self:_run_root(), models = self.sandbox:model_paths_inside(),
              spawn = self:_spawn(copy) }
  local ok, exposed, srv = pcall(rpc.serve, file, o)
  if not ok then error(exposed, 2) end
  srv.sandbox_id = self.sandbox.sandbox_id
  self.servers[#self.servers + 1] = srv
  return exposed, srv
end

---Prints and returns the last lines of the RPC servers' logs (all of them, or the one named).
---The reference's `show_rpc_logs(lines=100)` is `show_rpc_logs{lines = 100}`; positionally
---`show_rpc_logs(100, "tools")`.
---@param lines? integer|{lines?: integer, name?: string} default 50
---@param name? string a server's name (serve's `name`)
---@return string
function Scoped:show_rpc_logs(lines, name)
  local where = "show_rpc_logs"
  if type(lines) == "table" then
    if name ~= nil then error(where .. "(lines, name) or show_rpc_logs{lines = ..., name = ...}: not both", 2) end
    -- called by pcall, its error carries no position: raised at the caller's line
    local ok, o = pcall(require("seer.checks").options, where, lines, { lines = "any", name = "any" }, 1)
    if not ok then error(o, 2) end
    lines, name = o.lines, o.name
  end
  if lines ~= nil and not (type(lines) == "number" and lines == math.floor(lines) and lines >= 1 and lines <= 2 ^ 31 - 1) then
    error(("%s: lines must be a whole number of lines >= 1, got %s"):format(where, type(lines) == "number" and tostring(lines) or "a " .. type(lines)), 2)
  end
  if name ~= nil then
    local names = {}
    for _, srv in ipairs(self.servers) do
      if srv.name == name then names = nil break end
      names[#names + 1] = srv.name
    end
    if names then
      error(("%s: no RPC server named %s; servers: %s"):format(where, type(name) == "string" and ("'" .. name .. "'") or ("(a " .. type(name) .. ")"),
        #names > 0 and table.concat(names, ", ") or "none (serve one first)"), 2)
    end
  end
  local parts = {}
  for _, srv in ipairs(self.servers) do
    if not name or srv.name == name then
      parts[#parts + 1] = ("== %s\n%s"):format(srv.name, srv:logs(lines or 50))
    end
  end
  local text = table.concat(parts, "\n")
  print(text)
  return text
end

---Stops the servers and the sandbox (as Sandbox:terminate). The options also positionally, as
---the reference's `terminate(save_snapshot, snapshot_description)`.
---@param opts? {save_snapshot?: boolean, snapshot_description?: string}|boolean
---@param description? string with a positional save_snapshot
---@return string|nil snapshot_id
function Scoped:terminate(opts, description)
  if type(opts) == "boolean" then
    if description ~= nil and type(description) ~= "string" then
      error(("terminate(save_snapshot, snapshot_description): snapshot_description must be a string, got a %s"):format(type(description)), 2)
    end
    opts = { save_snapshot = opts, snapshot_description = description }
  elseif description ~= nil then
    error("terminate(opts): one options table, e.g. terminate{save_snapshot = true, snapshot_description = \"...\"}", 2)
  else
    local ok, o = pcall(require("seer.checks").options, "terminate", opts, { save_snapshot = "boolean", snapshot_description = "string" }, 1)
    if not ok then error(o, 2) end
    opts = o
  end
  for _, srv in ipairs(self.servers) do pcall(srv.close, srv) end
  self.servers = {}
  local ok, r = pcall(self.sandbox.terminate, self.sandbox, opts)
  if not ok then error(r, 2) end
  return r
end

return M
