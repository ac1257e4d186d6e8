-- The reference's workflows and shapes that join the pieces (issue 20): detached sandboxes seen
-- from Lua (start{detach = true}, Sandbox.attach), execution_mode's meaning, session:setup,
-- the GPU fallback a user meets on a machine without one, and debug = true. The whole
-- setup-then-attach flow with a separate MCP client is tests/integration/test_detached.py.
local T = require "testing"
local env = require "seer.environment"
local ws = require "seer.workspace"
local exec = require "seer.execution"
local S = require "seer.sandbox"
local sb = require "seer.core.sandbox"
local process = require "seer.process"

local here = seer.script_dir()
local stories = here .. "/../fixtures/models/stories260K"

local root = T.tmpdir()
T.private_sandbox_dirs(root)

local function need_bwrap()
  if os.execute("command -v bwrap >/dev/null 2>&1") ~= 0 then T.skip("bubblewrap is not installed (make setup installs it)") end
end

local function exists(p) return sb.lstat and sb.lstat(p) ~= nil or (io.open(p, "rb") ~= nil) end
local function is_dir(p) return os.execute("test -d '" .. p .. "'") == 0 end

T.test("start{detach = true}: the sandbox outlives its handle's script, Sandbox.attach reaches it, terminate ends it", function()
  need_bwrap()
  T.raises(function() env.Sandbox(env.SandboxConfig{ execution_mode = "cli" }):start{ detach = "yes" } end,
    "detach is true or false")
  T.raises(function() env.Sandbox(env.SandboxConfig{ backend = "ssh", ssh = { host = "gpu1" } }):start{ detach = true } end,
    "not available for backend = \"ssh\" yet", true)
  -- a child script starts it and exits
  local script = root .. "/setup.lua"
  local f = assert(io.open(script, "w"))
  f:write([[
local env = require "seer.environment"
local s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli", timeout = 120 }):start{ name = "bg", detach = true }
s:write_file("note.txt", "left by the setup script")
print(s.sandbox_id)
]])
  f:close()
  local child = process.spawn{ argv = { require("seer.jupyter").seer_binary(), script }, stdout = "pipe", stderr = "inherit" }
  local id = child:read_line(30000)
  T.ok(id and id:match("^bg%-%x+$"), tostring(id))
  T.ok(child:wait(10000), "the setup script exits")
  local listed
  for _, s in ipairs(S.list()) do if s.id == id then listed = s end end
  T.ok(listed and listed.detached and listed.running, "seer sandbox list shows it running, detached")
  local h = env.Sandbox.attach(id)
  T.eq(h:read_file("note.txt"), "left by the setup script")
  local out = h:exec("echo $((6 * 7))")
  T.eq(out, "42\n")
  T.eq(h.config.timeout, 120)
  h:terminate()
  T.ok(not is_dir(root .. "/sb/" .. id), "the keeper removed the state folder")
  T.raises(function() env.Sandbox.attach(id) end, "no running sandbox " .. id, true)
  T.raises(function() h:exec("true") end, "terminated")
end)

T.test("execution_mode: a CLI sandbox refuses notebook sessions with the way out; NOTEBOOK starts the live view", function()
  need_bwrap()
  local s = env.Sandbox(env.SandboxConfig{ execution_mode = env.ExecutionMode.CLI }):start{ name = "cli-mode" }
  T.eq(s.jupyter_url, nil)
  T.raises(function() exec.create_notebook_session(s, nil, { output_dir = root .. "/nb" }) end,
    "execution_mode = ExecutionMode.CLI")
  local cli = exec.create_cli_session(s, nil, { name = "sh" })
  local out = cli:exec_shell("echo ok")
  T.eq(out, "ok\n")
  -- session:setup on a CLI session installs into the sandbox's workspace
  cli:setup(ws.Workspace{ libraries = { ws.Library.from_code("greet", "return { hi = function() return 'hi' end }") } })
  T.eq(select(1, cli:exec_lua("print(dofile('/workspace/greet.lua').hi())")), "hi\n")
  s:terminate()
end)

T.test("session:setup(workspace): libraries become require-able and custom_init_code runs, and both survive restart", function()
  local s = exec.create_local_notebook_session(nil, { name = "setup", output_dir = root .. "/nb" })
  T.raises(function() s:setup("nope") end, "workspace must be a seer.workspace Workspace")
  s:setup(ws.Workspace{
    libraries = { ws.Library.from_code("helpers", "return { twice = function(x) return 2 * x end }") },
    custom_init_code = "SETUP_RAN = (SETUP_RAN or 0) + 1",
  })
  T.eq(s:exec("print(require('helpers').twice(21), SETUP_RAN)").text, "42\t1\n")
  s:restart()
  T.eq(s:exec("print(require('helpers').twice(5), SETUP_RAN)").text, "10\t1\n")
  -- a failing init says which part failed
  T.raises(function() s:setup(ws.Workspace{ custom_init_code = "error('boom')" }) end, "custom_init_code failed")
  s:terminate()
end)

T.test("gpu on a machine without one: the error names the fallback, and SEER_GPU_FALLBACK=cpu runs it on the CPU", function()
  need_bwrap()
  if #S.gpu_devices() > 0 then T.skip("this machine has a GPU") end
  T.raises(function() env.Sandbox(env.SandboxConfig{ gpu = "A100", execution_mode = "cli" }):start{ name = "gpu" } end,
    "SEER_GPU_FALLBACK=cpu")
  T.setenv("SEER_GPU_FALLBACK", "cpu")
  local ok, s = pcall(function() return env.Sandbox(env.SandboxConfig{ gpu = "A100", execution_mode = "cli" }):start{ name = "gpu" } end)
  T.setenv("SEER_GPU_FALLBACK", "")
  T.ok(ok, tostring(s))
  T.eq(s:exec("echo cpu"), "cpu\n")
  s:terminate()
end)

T.test("debug = true keeps the sandbox's folder after terminate and says where", function()
  need_bwrap()
  local s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli", debug = true }):start{ name = "dbg" }
  s:write_file("kept.txt", "still here")
  local dir = s.state_dir
  s:terminate()
  local f = io.open(dir .. "/workspace/kept.txt", "rb")
  T.ok(f, "debug keeps " .. dir)
  T.eq(f:read("*a"), "still here")
  f:close()
  os.execute("rm -rf '" .. dir .. "'")
end)

T.test("a script that ends without terminating its sessions (or with an error) leaves no notebook-server folder; stale ones are swept", function()
  local script = root .. "/leave.lua"
  local f = assert(io.open(script, "w"))
  f:write(([[
local s = seer.execution.create_local_notebook_session(nil, { output_dir = %q })
print(s:exec("print(6 * 7)").text:gsub("\n", ""), seer.execution._server_endpoint())
io.stdout:flush()
if arg[1] == "err" then error("ends with an error") end
]]):format(root .. "/leave-nb"))
  f:close()
  for _, how in ipairs({ "ok", "err" }) do
    local p = io.popen(("'%s' '%s' %s 2>/dev/null"):format(require("seer.jupyter").seer_binary(), script, how))
    local line = p:read("*l")
    p:close()
    local answer, ep = line:match("^(%S+)%s+(%S+)$")
    T.eq(answer, "42")
    local dir = ep:match("^ipc://(/tmp/seer%-notebook%-%w+)/api%.sock$")
    T.ok(dir, ep)
    T.ok(not is_dir(dir), how .. ": " .. dir .. " is left")
  end
  -- a folder a killed server left (no listener, older than a minute) goes at the next start;
  -- one whose server listens stays
  local stale = process.mkdtemp("/tmp/seer-notebook-")
  seer.write_file(stale .. "/kernel-x.log", "left")
  os.execute(("touch -d '2 minutes ago' '%s'"):format(stale))
  -- the sweep runs when a server starts: in a process of its own (this test process's server
  -- may be running already, left by an earlier test, and then nothing starts here), while this
  -- process's server listens
  local s = exec.create_local_notebook_session(nil, { output_dir = root .. "/leave-nb" })
  local mine = exec._server_endpoint():match("^ipc://(.*)/api%.sock$")
  local p = io.popen(("'%s' -e %q 2>&1"):format(require("seer.jupyter").seer_binary(),
    ("local s = seer.execution.create_local_notebook_session(nil, { output_dir = %q }) s:terminate() print('started')"):format(root .. "/leave-nb")))
  local started = p:read("*a")
  p:close()
  T.contains(started, "started")
  T.ok(not is_dir(stale), "the stale folder was swept")
  T.ok(is_dir(mine), "the running server's folder stays")
  s:terminate()
end)

T.test("writing to a child that closed its stdin is EPIPE, not a SIGPIPE that kills the writer (sandboxd is pid 1)", function()
  local p = sb.spawn{ argv = { "/bin/sh", "-c", "exec 0<&-; sleep 0.3" }, stdin = true }
  process.sleep_ms(100)
  local n, err = p:write(string.rep("x", 200000))
  T.eq(n, nil)
  T.eq(err, "EPIPE")
  p:close()
end)
