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

-- `seer mcp cli` for a sandbox as a child fed raw lines (its stdout to a file), with its peak
-- memory (VmHWM) from /proc.
local function cli_child(sandbox_id)
  local SEER = require("seer.jupyter").seer_binary()
  local out = T.tmpdir() .. "/cli.out"
  local f = assert(io.popen(("exec '%s' mcp cli --sandbox %s > '%s' 2>&1"):format(SEER, sandbox_id, out), "w"))
  local c, seen, pid = {}, 0, nil
  local process = require "seer.process"
  for _ = 1, 200 do
    for _, e in ipairs(require("seer.core.sandbox").listdir("/proc")) do
      if e.name:match("^%d+$") then
        local cf = io.open("/proc/" .. e.name .. "/cmdline", "rb")
        local cmd = cf and cf:read("*a") or ""
        if cf then cf:close() end
        if cmd:find("mcp\0cli\0--sandbox\0" .. sandbox_id, 1, true) then pid = e.name end
      end
    end
    if pid then break end
    process.sleep_ms(20)
  end
  T.ok(pid, "no seer mcp cli process")
  function c.send(text) f:write(type(text) == "string" and text or seer.json.encode(text), "\n"); f:flush() end
  function c.recv(ms)
    local deadline = process.now_ms() + (ms or 30000)
    while process.now_ms() < deadline do
      local h = io.open(out, "rb")
      local all = h and h:read("*a") or ""
      if h then h:close() end
      local nl = all:find("\n", seen + 1, true)
      -- lines that are not JSON-RPC (stderr) are skipped
      while nl do
        local line = all:sub(seen + 1, nl - 1)
        seen = nl
        if line:sub(1, 1) == "{" then return seer.json.decode(line) end
        nl = all:find("\n", seen + 1, true)
      end
      process.sleep_ms(10)
    end
    return nil
  end
  function c.hwm_kb()
    local st = io.open("/proc/" .. pid .. "/status", "rb"):read("*a")
    return tonumber(st:match("VmHWM:%s*(%d+)"))
  end
  function c.call(id, name, args)
    c.send{ jsonrpc = "2.0", id = id, method = "tools/call", params = { name = name, arguments = args } }
  end
  function c.close() f:close() end
  c.send{ jsonrpc = "2.0", id = 1, method = "initialize",
          params = { protocolVersion = "2025-06-18", capabilities = {}, clientInfo = { name = "t", version = "1" } } }
  T.ok(c.recv(), "no answer to initialize")
  c.send{ jsonrpc = "2.0", method = "notifications/initialized" }
  return c
end

local function result_text(r)
  local t = {}
  for _, b in ipairs((r and r.result and r.result.content) or {}) do t[#t + 1] = b.text end
  return table.concat(t, "\n"), r and r.result and r.result.isError
end

T.test("seer mcp cli: read_file of a fifo is an error at once, a big file costs the server only what it shows, "
  .. "a line of millions of values is refused", function()
  if os.execute("command -v bwrap >/dev/null 2>&1") ~= 0 then T.skip("bubblewrap is not installed") end
  local env = require "seer.environment"
  local process = require "seer.process"
  local s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli" }):start{ name = "mcp-cli-limits" }
  local c
  local ok, err = pcall(function()
    c = cli_child(s.sandbox_id)
    -- a fifo the agent planted, with a writer after 3 s (so a read that blocked would end with "late")
    s:exec("mkfifo /workspace/f; head -c 200000000 /dev/zero | tr '\\0' a > /workspace/big.txt; "
      .. "setsid sh -c 'sleep 3; echo late > /workspace/f' </dev/null >/dev/null 2>&1 &")
    local t0 = process.now_ms()
    c.call(2, "read_file", { path = "f" })
    -- a bystander (the researcher's script) on the same sandbox meanwhile
    T.eq((s:exec("echo bystander", { timeout = 5 })), "bystander\n")
    local r = c.recv(10000)
    local text, is_err = result_text(r)
    T.ok(is_err, "read_file of a fifo answered: " .. text)
    T.contains(text, "/workspace/f is a fifo, not a regular file")
    T.ok(process.now_ms() - t0 < 2000, ("read_file of a fifo and the bystander took %d ms"):format(process.now_ms() - t0))
    -- a 200 MB file: the server receives what it shows (100,000 bytes), not the file
    local before = c.hwm_kb()
    c.call(3, "read_file", { path = "big.txt" })
    text = result_text(c.recv(60000))
    T.eq(text:sub(1, 100000), ("a"):rep(100000))
    T.contains(text, "[... 199900000 more bytes; read the rest with run_command")
    local grew = c.hwm_kb() - before
    T.ok(grew < 32 * 1024, ("the server grew by %d MB reading a 200 MB file"):format(math.floor(grew / 1024)))
    -- a 16 MiB line of [] values: refused by count before any is built
    before = c.hwm_kb()
    local n = math.floor((16 * 1024 * 1024 - 200) / 3)
    c.send('{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"x","junk":['
      .. ("[],"):rep(n - 1) .. '[]]}}}')
    r = c.recv(60000)
    T.ok(r and r.error, "the line was answered: " .. tostring(r and seer.json.encode(r):sub(1, 300)))
    T.contains(r.error.message, "more than 1000000 JSON values")
    grew = c.hwm_kb() - before
    T.ok(grew < 100 * 1024, ("the server grew by %d MB on a 16 MiB line"):format(math.floor(grew / 1024)))
  end)
  if c then c.close() end
  s:terminate()
  if not ok then error(err, 0) end
end)
