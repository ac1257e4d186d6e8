-- Scoped sandboxes: an interface on stories260K served inside a real sandbox (bubblewrap, the
-- model mounted read-only) and reached from the host as a library, as MCP tools through seer's
-- MCP client, as a prompt and as a skill. The interface's code runs inside the sandbox: it
-- sees the sandbox's file system, not the host's.
local T = require "testing"
local env = require "seer.environment"
local exec = require "seer.execution"
local ws = require "seer.workspace"
local process = require "seer.process"

local here = seer.script_dir()
local stories = require("seer.core.host").realpath(here .. "/../fixtures/models/stories260K")
local fixtures = here .. "/../fixtures/rpc/"
local SEER = require("seer.jupyter").seer_binary()

local root = T.tmpdir()
local ffi = require "ffi"
pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
ffi.C.setenv("SEER_SANDBOX_DIR", root .. "/sb", 1)

local scoped
local function get()
  if os.execute("command -v bwrap >/dev/null 2>&1") ~= 0 then T.skip("bubblewrap is not installed (make setup installs it)") end
  if not scoped then
    scoped = env.ScopedSandbox(env.SandboxConfig{ execution_mode = "cli", models = { env.ModelConfig{ name = stories } } })
      :start{ name = "scoped" }
  end
  return scoped
end

T.test("scoped: an interface served in the sandbox, used as a library from Lua", function()
  local s = get()
  T.ok(s.sandbox_id:match("^scoped%-"))
  local lib, srv = s:serve(fixtures .. "interface.lua", { expose_as = "library", name = "model_tools" })
  T.eq(lib.name, "model_tools")
  local info = srv:call("get_model_info")
  T.eq(info.num_layers, 5)
  T.eq(info.hidden_size, 64)
  local m = require("seer.model").load(stories)
  T.eq(srv:call("generate", "Once upon a time", 6), m:generate("Once upon a time", { max_new_tokens = 6, temperature = 0 }).text)
  -- the configured model is known inside by its sandbox path
  local models = srv:call("show_models")
  T.eq(models[stories], "/models/stories260K")
  -- the library module works from another process on the host (an agent's local session)
  local session = exec.create_local_session(ws.Workspace{ libraries = { lib } }, root .. "/work", "agent")
  T.eq(session.mcp_config.workspace.args, { "mcp", "local", "--workspace", session.workspace_dir })
  T.contains(session.library_docs or ws.Workspace{ libraries = { lib } }:get_library_docs(), "## model_tools")
  local out = io.popen(("cd '%s' && '%s' -e 'local t = require \"model_tools\"; print(t.get_embedding(\"a dog\").dims)' 2>&1")
    :format(session.workspace_dir, SEER)):read("*a")
  T.eq(out, "64\n")
end)

T.test("scoped: the interface runs inside the sandbox", function()
  local s = get()
  local probe = root .. "/probe.lua"
  seer.write_file(probe, [[
---Where am I?
---@return table
function expose.whereami()
  return { id = os.getenv("SEER_SANDBOX_ID"), shadow = io.open("/etc/shadow") ~= nil,
           host_file = io.open("]] .. here .. [[/test_scoped.lua") ~= nil, uid = io.popen("id -u"):read("*l") }
end
]])
  local _, srv = s:serve(probe, { expose_as = "prompt", name = "probe" })
  local r = srv:call("whereami")
  T.eq(r, { id = s.sandbox_id, shadow = false, host_file = false, uid = "65534" })
  local up = s:upload_file(probe, "data.txt")
  T.ok(up:match("/data%.txt$"))
  T.contains(s:show_rpc_logs(20, "probe"), "== probe")
end)

T.test("scoped: MCP tools through the MCP client, prompt and skill outputs", function()
  local s = get()
  local cfg = s:serve(fixtures .. "interface.lua", { expose_as = "mcp", name = "mcp_tools" })
  local mcp = require "seer.mcp.client"
  local c = mcp.connect(cfg, { timeout = 60 })
  local names = {}
  for _, t in ipairs(c:tools()) do names[#names + 1] = t.name end
  table.sort(names)
  T.eq(names, { "generate", "get_embedding", "get_model_info", "show_models" })
  local r = c:call("get_model_info", {})
  T.eq(r.isError, false)
  T.contains(r.content[1].text, '"hidden_size":64')
  local g = c:call("generate", { prompt = "Once upon a time", max_new_tokens = 4 })
  T.eq(g.isError, false)
  c:close()
  local prompt = s:serve(fixtures .. "interface.lua", { expose_as = "prompt", name = "prompt_tools" })
  T.contains(prompt, "### prompt_tools.generate(prompt: string, max_new_tokens?: integer) -> string")
  local skill = s:serve(fixtures .. "interface.lua", { expose_as = "skill", name = "skill_tools" })
  T.contains(skill.files["SKILL.md"], "name: skill_tools")
end)

T.test("scoped: the same library from a notebook session in a second sandbox (through a relay, signed end to end)", function()
  local s = get()
  local lib = s:serve(fixtures .. "interface.lua", { expose_as = "library", name = "cross_tools" })
  local other = env.Sandbox(env.SandboxConfig{ execution_mode = "notebook" }):start{ name = "consumer" }
  local ok, err = pcall(function()
    local session = exec.create_notebook_session(other, ws.Workspace{ libraries = { lib } },
                                                 { name = "cross", output_dir = root .. "/cross-nb" })
    -- the kernel runs in `other`: the scoped sandbox's run folder is not there, the relay's socket is
    local r = session:exec("local t = require('cross_tools'); local i = t.get_model_info()\n"
      .. "print(i.num_layers, i.hidden_size, io.open(" .. ("%q"):format(s.sandbox.run_dir .. "/rpc/cross_tools.json") .. ") == nil, os.getenv('SEER_SANDBOX_ID'))")
    T.eq(r.text, ("5\t64\ttrue\t%s\n"):format(other.sandbox_id))
    -- an error raised in the scoped sandbox comes back through the relay
    r = session:exec("print(pcall(require('cross_tools').generate, {}))", { raise = false })
    T.contains(r.text, "false")
    -- a forged message (wrong key) sent to the relay's socket gets no answer: the server checks
    -- signatures, the relay only forwards
    local probe = session:exec([[
local f = io.popen('ls ]] .. other.run_dir .. [[/rpc-relay/')
local names = f:read('*a') f:close()
local json = names:match('(cross_tools%-%w+%.json)')
local c = seer.json.decode(io.open(']] .. other.run_dir .. [[/rpc-relay/' .. json):read('*a'))
c.key = string.rep('x', 64)
local tmp = os.tmpname() local g = io.open(tmp, 'w') g:write(seer.json.encode(c)) g:close()
local client = require('seer.rpc').connect(tmp, { name = 'forged' })
local ok, e = pcall(client.hello, client, 2)
print(ok, e ~= nil)]], { raise = false })
    T.eq(probe.text, "false\ttrue\n")
    session:terminate()
  end)
  -- the relay into `other` ends with it
  local relays = {}
  for _, e in ipairs(require("seer.core.sandbox").listdir("/proc")) do
    local f = e.name:match("^%d+$") and io.open("/proc/" .. e.name .. "/cmdline", "rb")
    if f then
      local cmd = f:read("*a") or ""
      f:close()
      if cmd:find("seer.rpc.relay", 1, true) then relays[#relays + 1] = e.name end
    end
  end
  T.ok(#relays >= 1, "a relay runs while the consumer sandbox does")
  other:terminate()
  local alive = 0
  for _, pid in ipairs(relays) do
    local f = io.open("/proc/" .. pid .. "/stat", "rb")
    local st = f and f:read("*a") or ""
    if f then f:close() end
    if st ~= "" and not st:match("^%d+ %b() Z") then alive = alive + 1 end
  end
  T.eq(alive, 0, "the relay outlived the sandbox it served")
  if not ok then error(err, 0) end
end)

T.test("scoped: the sandbox rewriting its connection file does not move the host's clients (library, mcp_config)", function()
  local s = get()
  local lib, srv = s:serve(fixtures .. "interface.lua", { expose_as = "library", name = "pinned_tools" })
  local cfg = srv:mcp_config()
  -- code in the scoped sandbox replaces its server's connection file: another endpoint, another key
  local own = srv.connection_file
  local out, r = s:exec(("printf '%%s' '{\"key\":\"%s\",\"signature_scheme\":\"hmac-sha256\",\"transport\":\"tcp\",\"endpoint\":\"tcp://127.0.0.1:9\",\"pid\":1}' > %s.new && mv %s.new %s")
    :format(("k"):rep(64), own, own, own))
  T.eq(r.exit_code, 0, out)
  T.contains(seer.read_file(own), "tcp://127.0.0.1:9")
  -- what the host handed out is a private copy made from what it validated
  local copy = lib.files["pinned_tools.lua"]:match('or "(/tmp/seer%-rpclib%-[^"]+)"')
  T.ok(copy, "the library reads a private copy")
  T.eq(cfg.pinned_tools.args, { "mcp", "rpc", "--name", "pinned_tools" })
  T.eq(cfg.pinned_tools.env.SEER_RPC_ENDPOINT, "ipc://" .. own:gsub("%.json$", ".sock"))
  local mc = require("seer.mcp.client").connect(cfg, { timeout = 60 })
  local okc, errc = pcall(function()
    local r = mc:call("get_model_info", {})
    T.eq(r.isError, false)
    T.contains(r.content[1].text, '"num_layers":5')
  end)
  mc:close()
  if not okc then error(errc, 0) end
  local session = exec.create_local_session(ws.Workspace{ libraries = { lib } }, root .. "/work-pinned", "pinned")
  local res = io.popen(("cd '%s' && '%s' -e 'print(require(\"pinned_tools\").get_model_info().num_layers)' 2>&1")
    :format(session.workspace_dir, SEER)):read("*a")
  T.eq(res, "5\n")
  srv:close()
  T.ok(not io.open(copy), "close() removes the copy")
end)

T.test("scoped: terminate stops the servers with the sandbox", function()
  local s = get()
  local id = s.sandbox_id
  s:terminate()
  scoped = nil
  T.ok(not io.open(root .. "/sb/" .. id .. "/sandbox.json"))
  T.raises(function() s:exec("true") end, "terminated")
end)

return T
