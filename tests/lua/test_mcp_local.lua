-- `seer mcp local`: a local session's tools through a real MCP client (seer.mcp.client, stdio):
-- run_lua with the workspace's libraries, files inside the workspace only (no link, no `..`,
-- no absolute path outside), and a shell only when the session opted in.
local T = require "testing"
local W = require "seer.workspace"
local exec = require "seer.execution"
local mcp = require "seer.mcp.client"

local function text(r)
  local t = {}
  for _, b in ipairs(r.content or {}) do if b.type == "text" then t[#t + 1] = b.text end end
  return table.concat(t, "\n"), r.isError
end

local dir = T.tmpdir()
local outside = T.tmpdir()
seer.write_file(outside .. "/secret.txt", "host secret\n")

T.test("a local session's mcp_config serves run_lua with its libraries, and files inside the workspace", function()
  local s = exec.create_local_session(W.Workspace{ libraries = { W.Library.from_code("local_lib", "return { v = 41 }") } },
                                      dir .. "/ws", "local-tools")
  T.eq(s.mcp_config.workspace.args[2], "local")
  local c = mcp.connect(s.mcp_config, { timeout = 30 })
  local ok, err = pcall(function()
    local names = {}
    for _, t in ipairs(c:tools()) do names[#names + 1] = t.name end
    table.sort(names)
    T.eq(names, { "list_files", "read_file", "run_lua", "write_file" }, "no shell unless asked for")
    for _, t in ipairs(c:tools()) do if t.name == "run_lua" then T.contains(t.description, "NOT sandboxed") end end
    local out = text(c:call("run_lua", { code = "print(require('local_lib').v + 1)" }))
    T.contains(out, "42")
    T.contains(out, "[exit code 0]")
    T.contains(text(c:call("write_file", { path = "notes/a.txt", content = "hello" })), "wrote 5 bytes")
    T.eq(seer.read_file(dir .. "/ws/notes/a.txt"), "hello")
    T.eq((text(c:call("read_file", { path = "notes/a.txt" }))), "hello")
    T.eq((text(c:call("read_file", { path = s.workspace_dir .. "/notes/a.txt" }))), "hello")
    T.contains(text(c:call("list_files", { path = "notes" })), "a.txt")
    -- outside the workspace: refused, whatever the spelling
    local o, bad = text(c:call("read_file", { path = outside .. "/secret.txt" }))
    T.ok(bad and o:find("outside the workspace", 1, true), o)
    o, bad = text(c:call("read_file", { path = "../" .. outside:match("[^/]+$") .. "/secret.txt" }))
    T.ok(bad and not o:find("host secret", 1, true), o)
    os.execute(("ln -s '%s/secret.txt' '%s/ws/link.txt'"):format(outside, dir))
    o, bad = text(c:call("read_file", { path = "link.txt" }))
    T.ok(bad and o:find("symlink", 1, true), o)
    o, bad = text(c:call("write_file", { path = "link.txt", content = "overwritten" }))
    T.eq(seer.read_file(outside .. "/secret.txt"), "host secret\n", "a write went through the link")
    -- a run that outlives its timeout is killed
    o = text(c:call("run_lua", { code = "while true do end", timeout = 1 }))
    T.contains(o, "[killed: the command ran past its timeout]")
  end)
  c:close()
  if not ok then error(err, 0) end
end)

T.test("shell = true adds run_command, run in the workspace", function()
  local s = exec.create_local_session{ workspace = W.Workspace{}, workspace_dir = dir .. "/ws2", name = "shell", shell = true }
  local c = mcp.connect(s.mcp_config, { timeout = 30 })
  local ok, err = pcall(function()
    local out = text(c:call("run_command", { command = "pwd; echo hi >&2" }))
    T.contains(out, s.workspace_dir)
    T.contains(out, "hi")
  end)
  c:close()
  if not ok then error(err, 0) end
  T.raises(function() exec.create_local_session{ workspace = W.Workspace{}, workspace_dir = dir, shel = true } end, 'unknown field "shel"', true)
end)

T.test("SEER_MCP_TOKEN in the environment does not stop stdio servers (it is for --http); --token without --http still does", function()
  local SEER = require("seer.jupyter").seer_binary()
  for _, args in ipairs({ { "mcp", "notebook", "--output-dir", dir .. "/nb" }, { "mcp", "local", "--workspace", dir .. "/ws3" } }) do
    os.execute("mkdir -p '" .. dir .. "/ws3'")
    local c = mcp.connect({ srv = { type = "stdio", command = SEER, args = args, env = { SEER_MCP_TOKEN = "set-for-http" } } },
                          { timeout = 30 })
    local ok, err = pcall(function() T.ok(#c:tools() > 0, table.concat(args, " ")) end)
    c:close()
    if not ok then error(err, 0) end
  end
  local out = io.popen(("'%s' mcp notebook --token abc </dev/null 2>&1"):format(SEER)):read("*a")
  T.contains(out, "--token and --allow-origin only apply with --http")
end)
