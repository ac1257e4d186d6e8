-- ScopedSandbox's methods called as the reference's users translate them: keyword arguments as
-- a table (`show_rpc_logs(lines=100)` -> `show_rpc_logs{lines = 100}`, which crashed in
-- seer.rpc with "attempt to perform arithmetic on a table value"), positional arguments
-- (`serve(file, "mcp", "tools")`, which served under the file's name), and files uploaded "in
-- /root/ alongside interface.py": the interface opens them by name from its working directory
-- (they were in the run folder, where io.open("helper.txt") did not find them). Bad values and
-- unknown names are errors naming the option and the valid ones, at the caller's line.
local T = require "testing"
local env = require "seer.environment"

local root = T.tmpdir()
T.private_sandbox_dirs(root)

local file = debug.getinfo(1, "S").short_src
local IFACE = root .. "/iface.lua"
seer.write_file(IFACE, [[
---Reads a file by a name relative to the working directory.
---@param name string
---@return table
function expose.read(name)
  local f = io.open(name, "rb")
  if not f then return { found = false, cwd = io.popen("pwd"):read("*l") } end
  local s = f:read("*a")
  f:close()
  return { found = true, text = s }
end

---Requires a module by name and calls its hello().
---@param mod string
---@return string
function expose.hello(mod) return require(mod).hello() end
]])
local HELPER = root .. "/helper.txt"
seer.write_file(HELPER, "helper content\n")
local MOD = root .. "/helpermod.lua"
seer.write_file(MOD, 'return { hello = function() return "hi from helpermod" end }\n')

local scoped
local function get()
  if os.execute("command -v bwrap >/dev/null 2>&1") ~= 0 then T.skip("bubblewrap is not installed (make setup installs it)") end
  if not scoped then scoped = env.ScopedSandbox(env.SandboxConfig{ execution_mode = "cli" }):start{ name = "scoped-args" } end
  return scoped
end

local function refused(fn, want) return T.refused_at(file, fn, want) end

T.test("scoped args: show_rpc_logs{lines = n} (the reference's keyword) and positional; bad values named", function()
  local s = get()
  s:serve(IFACE, { expose_as = "prompt", name = "logs_a" })
  s:serve(IFACE, { expose_as = "prompt", name = "logs_b" })
  local kw = s:show_rpc_logs{ lines = 1 }
  T.eq(kw, s:show_rpc_logs(1))
  T.contains(kw, "== logs_a\n")
  T.contains(kw, "== logs_b\n")
  T.eq(select(2, kw:gsub("\n", "\n")), 3, "one line per server: " .. kw)
  local one = s:show_rpc_logs{ lines = 10, name = "logs_b" }
  T.eq(one, s:show_rpc_logs(10, "logs_b"))
  T.ok(one:find("== logs_b", 1, true) and not one:find("logs_a", 1, true), one)
  T.contains(s:show_rpc_logs(), "loaded in")
  refused(function() local r = s:show_rpc_logs{ line = 10 }; return r end,
    "show_rpc_logs: unknown option 'line'; valid options: lines, name")
  refused(function() local r = s:show_rpc_logs{ lines = "ten" }; return r end, "show_rpc_logs: lines must be a whole number of lines >= 1, got a string")
  refused(function() local r = s:show_rpc_logs(0); return r end, "show_rpc_logs: lines must be a whole number of lines >= 1, got 0")
  refused(function() local r = s:show_rpc_logs{ lines = 5, name = "nope" }; return r end,
    "show_rpc_logs: no RPC server named 'nope'; servers: logs_a, logs_b")
end)

T.test("scoped args: an uploaded file is opened by name from the interface's working directory, before or after serve", function()
  local s = get()
  local up = s:upload_file(HELPER)
  local _, srv = s:serve(IFACE, { expose_as = "prompt", name = "files" })
  T.eq(srv:call("read", "helper.txt"), { found = true, text = "helper content\n" })
  T.eq(up, "/workspace/helper.txt")
  -- the reference uploads after serve: the file is there when a function opens it
  T.eq(s:upload_file(MOD), "/workspace/helpermod.lua")
  T.eq(srv:call("hello", "helpermod"), "hi from helpermod")
  -- another name, a folder below, the options-table form
  T.eq(s:upload_file(HELPER, "data/prompts.txt"), "/workspace/data/prompts.txt")
  T.eq(srv:call("read", "data/prompts.txt").text, "helper content\n")
  T.eq(s:upload_file(HELPER, { name = "other.txt" }), "/workspace/other.txt")
  T.eq(srv:call("read", "other.txt").text, "helper content\n")
  T.eq(s:read_file("/workspace/helper.txt"), "helper content\n")
end)

T.test("scoped args: upload_file refuses names outside the working directory and never follows the sandbox's links", function()
  local s = get()
  for _, c in ipairs({
    { "../escape.txt", "has a '..' component" }, { "a/../../b", "has a '..' component" },
    { "/etc/x", "is absolute" }, { "a\nb", "holds a control character" }, { "a\0b", "holds a control character" },
    { "a//b", "has an empty component" }, { "dir/", "has an empty component" }, { "", "is empty" },
    { "./x", "has a '.' component" },
  }) do
    refused(function() local r = s:upload_file(HELPER, c[1]); return r end, c[2])
  end
  refused(function() local r = s:upload_file(HELPER, { nmae = "x" }); return r end, "upload_file: unknown option 'nmae'; valid options: name")
  refused(function() local r = s:upload_file(HELPER, 5); return r end, "must be a string, got a number")
  -- links planted inside pointing at host paths (inside they point into the sandbox's own /tmp):
  -- a folder link on the way is refused, a link at the name is replaced, neither is written through
  local host_dir = root .. "/host-dir"
  os.execute("mkdir -p '" .. host_dir .. "'")
  local host_file = root .. "/host-file.txt"
  seer.write_file(host_file, "the host's own\n")
  local out, r = s:exec(("ln -s '%s' /workspace/evil && ln -s '%s' /workspace/victim.txt"):format(host_dir, host_file))
  T.eq(r.exit_code, 0, out)
  refused(function() local x = s:upload_file(HELPER, "evil/x.txt"); return x end, "symlink")
  T.ok(not T.exists(host_dir .. "/x.txt"), "nothing written through the folder link")
  T.eq(s:upload_file(HELPER, "victim.txt"), "/workspace/victim.txt")
  T.eq(seer.read_file(host_file), "the host's own\n")
  T.eq(s:read_file("/workspace/victim.txt"), "helper content\n")
end)

T.test("scoped args: serve(file, expose_as, name) positionally; its options checked by name before anything starts", function()
  local s = get()
  local n = #s.servers
  local prompt, srv = s:serve(IFACE, "prompt", "pos_tools")
  T.eq(srv.name, "pos_tools")
  T.contains(prompt, "## pos_tools")
  n = n + 1
  refused(function() local r = s:serve(IFACE, { expose_as = "prompt", nmae = "x" }); return r end,
    "serve: unknown option 'nmae'; valid options: env, expose_as, load_timeout, max_reply_bytes, name, timeout, verbose, workers")
  refused(function() local r = s:serve(IFACE, { workers = "2" }); return r end, "serve: option 'workers' must be a number, got string")
  refused(function() local r = s:serve(IFACE, { workers = 0 }); return r end, "serve: option 'workers' must be a whole number from 1, got 0")
  refused(function() local r = s:serve(IFACE, { timeout = -1 }); return r end, "serve: option 'timeout' must be a number of seconds > 0, got -1")
  refused(function() local r = s:serve(IFACE, { expose_as = "lib" }); return r end, 'serve: expose_as must be "library", "mcp", "prompt" or "skill", not "lib"')
  refused(function() local r = s:serve(IFACE, "prompt", { name = "x" }); return r end, "serve(file, expose_as, name): name must be a string, got a table")
  refused(function() local r = s:serve(IFACE, { name = "my-tools" }); return r end, 'serve: the name "my-tools" must be a Lua identifier')
  refused(function() local r = s:serve(IFACE, { env = { N = 1 } }); return r end, "serve: option 'env' maps names to strings; env[N] is a number")
  T.eq(#s.servers, n, "nothing started by the refused calls")
end)

T.test("scoped args: terminate's options checked before anything stops; positional save_snapshot", function()
  local s = get()
  refused(function() local r = s:terminate{ save_snaphot = true }; return r end,
    "terminate: unknown option 'save_snaphot'; valid options: save_snapshot, snapshot_description")
  refused(function() local r = s:terminate("now"); return r end, "terminate: options must be a table, got string")
  T.ok(#s.servers > 0, "the servers still run")
  local out = s:exec("echo alive")
  T.eq(out, "alive\n")
  local id = s:terminate(true, "args test")
  scoped = nil
  T.ok(type(id) == "string" and #id > 0, "a snapshot id: " .. tostring(id))
end)

T.test("sandbox args: Sandbox:logs{lines} and Sandbox:terminate(true) (the reference's forms) on a plain sandbox", function()
  get()
  local sb = env.Sandbox(env.SandboxConfig{ execution_mode = "cli" }):start{ name = "sandbox-args" }
  local ok, err = pcall(function()
    sb:exec("echo hi")
    T.eq(type(sb:logs{ lines = 5 }), "string")
    refused(function() local r = sb:logs{ line = 5 }; return r end, "sandbox:logs: unknown option 'line'; valid options: lines, service")
    refused(function() local r = sb:logs(0); return r end, "sandbox:logs: lines must be a whole number >= 1, got 0")
    refused(function() local r = sb:logs(2, "nope"); return r end, 'sandbox:logs: no log of a service "nope" in this sandbox')
    refused(function() local r = sb:terminate{ save_snaphot = true }; return r end,
      "terminate: unknown option 'save_snaphot'; valid options: save_snapshot, snapshot_description")
    T.eq(sb:exec("echo still"), "still\n")
    local id = sb:terminate(true, "plain args test")
    T.ok(type(id) == "string" and #id > 0, "a snapshot id: " .. tostring(id))
  end)
  pcall(sb.terminate, sb)
  if not ok then error(err, 0) end
end)

T.test("scoped args: start(workspace) positionally, as the reference's start(workspace)", function()
  get()
  local ws = require "seer.workspace"
  local other = env.ScopedSandbox(env.SandboxConfig{ execution_mode = "cli" })
  other:start(ws.Workspace{ libraries = { ws.Library.from_code("wslib", "return { x = 1 }") } })
  local ok, err = pcall(function()
    local _, srv = other:serve(IFACE, "prompt", "ws_tools")
    T.eq(srv:call("read", "wslib.lua"), { found = true, text = "return { x = 1 }" })
  end)
  other:terminate()
  if not ok then error(err, 0) end
end)

return T
