-- The local sandbox, for real: bubblewrap namespaces, cgroup limits, sandboxd over its signed
-- unix socket. The isolation suite tries to break out from inside; every attempt must fail,
-- and each has a control that shows the same probe succeeds where it should (so a broken
-- probe cannot pass as isolation). Sandboxes here get a private SEER_SANDBOX_DIR and
-- SEER_CACHE_DIR.
local T = require "testing"
local env = require "seer.environment"
local S = require "seer.sandbox"
local sb = require "seer.core.sandbox"
local process = require "seer.process"
local net = require "seer.net"

local here = seer.script_dir()
local stories = here .. "/../fixtures/models/stories260K"
local SEER = require("seer.jupyter").seer_binary()

local function have_bwrap()
  return os.execute("command -v bwrap >/dev/null 2>&1") == 0
end

local root = T.tmpdir()
local state_root = root .. "/sb"
local cache_root = root .. "/cache"
-- seer.sandbox reads these at each start, so setting them here covers this file's sandboxes.
local ffi = require "ffi"
pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
ffi.C.setenv("SEER_SANDBOX_DIR", state_root, 1)
ffi.C.setenv("SEER_CACHE_DIR", cache_root, 1)

local function start(t, name)
  if not have_bwrap() then T.skip("bubblewrap is not installed (make setup installs it)") end
  t = t or {}
  if t.execution_mode == nil then t.execution_mode = "cli" end
  return env.Sandbox(env.SandboxConfig(t)):start{ name = name }
end

-- Host processes whose command line contains `marker`.
local function host_procs(marker)
  local found = {}
  for _, e in ipairs(sb.listdir("/proc")) do
    if e.name:match("^%d+$") then
      local f = io.open("/proc/" .. e.name .. "/cmdline", "rb")
      if f then
        local cmd = (f:read("*a") or ""):gsub("%z", " ")
        f:close()
        if cmd:find(marker, 1, true) and not cmd:find("grep", 1, true) then found[#found + 1] = e.name .. ": " .. cmd end
      end
    end
  end
  return found
end

local function wait_until(pred, ms)
  local deadline = process.now_ms() + (ms or 3000)
  while process.now_ms() < deadline do
    if pred() then return true end
    process.sleep_ms(10)
  end
  return pred()
end

local function entries_of(dir)
  local names = {}
  for _, e in ipairs(sb.listdir(dir) or {}) do names[#names + 1] = e.name end
  return names
end

---------------------------------------------------------------------------------------------
-- basics

T.test("core: process ids, signals and limits from Lua are checked before they reach the kernel", function()
  -- 0 and negative pids mean process groups (kill(-1, ...) signals every process the user
  -- owns): refused before kill() or waitpid() sees them
  for _, pid in ipairs({ 0, -1, -42, 1.5, 0 / 0, 2 ^ 40 }) do
    T.raises(function() sb.kill(pid, 0) end, "kill: pid must be a whole number from 1 to 2147483647", true)
    T.raises(function() sb.waitpid(pid) end, "waitpid: pid must be a whole number from 1 to 2147483647", true)
    T.raises(function() sb.alive(pid) end, "alive: pid must be a whole number", true)
  end
  T.raises(function() sb.kill(process.getpid(), 1.5) end, "kill: signal must be a whole number from 0 to 64, got 1.5", true)
  T.eq(sb.kill(process.getpid(), 0), true, "signal 0 to ourselves: the process exists")
  T.raises(function() sb.spawn{ argv = { "/bin/true" }, rlimits = { open_files = 0 / 0 } } end,
    "'open_files' must be a whole number >= 0, got nan", true)
  T.raises(function() sb.spawn{ argv = { "/bin/true" }, rlimits = { cpu_seconds = -1 } } end,
    "'cpu_seconds' must be a finite number >= 0, got -1", true)
  -- a limit the kernel refuses (open files above the hard limit need a privilege) fails the
  -- spawn by name; it used to be ignored, and the process ran with the old limit
  local p0, perr = sb.spawn{ argv = { "/bin/true" }, rlimits = { open_files = 1e8 } }
  T.eq(p0, nil)
  T.contains(perr, "cannot set the resource limits for /bin/true: Operation not permitted")
  -- the same through the keeper (what starts a sandbox): its child stops with the reason in the
  -- log and status 127, instead of running the sandbox without the limit
  local kd = T.tmpdir()
  local kpid = sb.keeper_start{ argv = { "/bin/true" }, log = kd .. "/log", status = kd .. "/status", rlimits = { open_files = 1e8 } }
  local kst
  for _ = 1, 250 do
    kst = sb.waitpid(kpid)
    if kst then break end
    process.sleep_ms(20)
  end
  T.ok(kst, "the keeper ended")
  T.contains(seer.read_file(kd .. "/log"), "seer keeper: cannot set the sandbox's limit open_files (errno 1)")
  T.contains(seer.read_file(kd .. "/status"), '"code":127')
  -- a fractional CPU limit is rounded up, never down to 0 ("no limit"): a busy loop under 0.5 s
  -- of CPU time is stopped (SIGXCPU, then SIGKILL a second later)
  local p = assert(sb.spawn{ argv = { "/bin/sh", "-c", "while :; do :; done" }, rlimits = { cpu_seconds = 0.5 } })
  local t0, st = process.now_ms(), nil
  while not st and process.now_ms() - t0 < 10000 do
    st = p:poll()
    if not st then process.sleep_ms(50) end
  end
  if not st then p:kill(); p:close() end
  T.ok(st and st.signal, "the busy loop was stopped by a signal within 10 s (it ran on without a limit before)")
  p:close()
end)

T.test("open files: the default follows the hard limit, more than it is refused, what is asked for applies", function()
  local f = assert(io.open("/proc/self/limits"))
  local hard = tonumber(f:read("*a"):match("Max open files%s+%S+%s+(%S+)"))
  f:close()
  local s = start({ limits = { open_files = 1000 } }, "nofile")
  T.eq(select(2, s:exec("ulimit -n; ulimit -Hn")).stdout, "1000\n1000\n")
  s:terminate()
  local d = start({}, "nofile-default")
  -- 65536 unless the hard limit is lower (it was asked for regardless: the kernel refused it and
  -- the sandbox silently kept the hard limit)
  local want = hard and math.min(65536, hard) or 65536
  T.eq(select(2, d:exec("ulimit -n")).stdout, want .. "\n")
  d:terminate()
  if hard and hard < 2 ^ 30 then
    T.raises(function() start({ limits = { open_files = hard + 1 } }, "nofile-over") end,
      ("open_files = %d is above this machine's hard limit of %d open files"):format(hard + 1, hard), true)
  end
  T.raises(function() env.SandboxConfig{ limits = { open_files = 10 } } end, "open_files must be at least 64", true)
end)

T.test("start, exec, exec_lua, files and terminate", function()
  local s = start({ env = { GREETING = "hi" } }, "basics")
  T.ok(s.sandbox_id:match("^basics%-%x+$"), s.sandbox_id)
  local out, r = s:exec("echo $GREETING; id -u; pwd; echo oops >&2; exit 3")
  T.eq(r.stdout, "hi\n65534\n/workspace\n")
  T.eq(r.stderr, "oops\n")
  T.eq(r.exit_code, 3)
  T.eq(r.ok, false)
  T.eq(out, "hi\n65534\n/workspace\noops\n")
  local _, r2 = s:exec({ "printf", "%s|", "a b", "c" })
  T.eq(r2.stdout, "a b|c|")
  local lout = s:exec_lua("print(6 * 7, os.getenv('SEER_SANDBOX_ID'))")
  T.eq(lout, "42\t" .. s.sandbox_id .. "\n")
  local bin = "\0\1\2binary\255\n" .. string.rep("z", 100000)
  s:write_file("dir/sub/data.bin", bin)
  T.eq(s:read_file("/workspace/dir/sub/data.bin"), bin)
  T.eq(seer.read_file(s.workspace_dir .. "/dir/sub/data.bin"), bin) -- the host sees /workspace
  s:ensure_dir("a/b/c")
  local names = {}
  for _, e in ipairs(s:list_files("/workspace")) do names[#names + 1] = e.name .. ":" .. e.type end
  T.eq(names, { "a:dir", "dir:dir" })
  T.raises(function() s:read_file("nope.txt") end, "FileNotFoundError")
  local _, r3 = s:exec("sleep 10", { timeout = 0.3 })
  T.eq(r3.timed_out, true)
  T.eq(r3.exit_code, 124)
  T.ok(r3.elapsed_ms < 3000, r3.elapsed_ms)
  local _, r4 = s:exec("head -c 3000000 /dev/zero", { max_output = 1000 })
  -- a misspelt option is an error, not a command run without it
  T.raises(function() s:exec("sleep 10", { timout = 0.3 }) end,
    "sandbox:exec: unknown option 'timout'; valid options: cwd, env, max_output, stdin, timeout", true)
  T.raises(function() s:exec_lua("print(1)", { max_ouput = 5 }) end, "sandbox:exec_lua: unknown option 'max_ouput'", true)
  T.raises(function() s:start_service("svc", { "sleep", "1" }, { enviroment = {} }) end,
    "sandbox:start_service: unknown option 'enviroment'; valid options: cwd, env", true)
  T.eq(#r4.stdout, 1000)
  T.eq(r4.truncated, true)
  T.eq(r4.stdout_bytes, 3000000)
  local dir = s.state_dir
  s:terminate()
  T.eq(s:terminate(), nil) -- twice is fine
  T.ok(not io.open(dir .. "/sandbox.json"), "state directory removed")
  T.raises(function() s:exec("true") end, "terminated")
end)

T.test("sandboxd: a fifo or device planted inside is refused at once, reads are bounded, a bystander runs", function()
  local s = start({}, "plants")
  -- the agent's plants; a writer opens the fifo after 3 s, so a read that blocked would end
  -- then (with "late") instead of hanging this test
  s:exec("mkfifo /workspace/out.txt /var/log/seer/svc.log; ln -s /dev/zero /workspace/zero.txt; "
    .. "head -c 3000000 /dev/zero | tr '\\0' a > /workspace/big.txt; "
    .. "setsid sh -c 'sleep 3; echo late > /workspace/out.txt' </dev/null >/dev/null 2>&1 &")
  local t0 = process.now_ms()
  local ok, err = pcall(s.read_file, s, "out.txt")
  T.ok(not ok, "read_file of a fifo answered: " .. tostring(err))
  T.contains(err, "/workspace/out.txt is a fifo, not a regular file")
  T.ok(process.now_ms() - t0 < 2000, "read_file of a fifo took " .. (process.now_ms() - t0) .. " ms")
  local out = s:exec("echo bystander", { timeout = 5 })
  T.eq(out, "bystander\n")
  T.ok(process.now_ms() - t0 < 2500, "the bystander waited")
  T.raises(function() s:read_file("zero.txt") end, "/workspace/zero.txt is a character device, not a regular file", true)
  -- the log folder is writable inside too: sandboxd's logs op (remote sandboxes) refuses a fifo
  T.raises(function() s.client:request("logs", { name = "svc" }) end, "not a regular file", true)
  -- write_file replaces a fifo (a fresh file renamed over it), never opens it
  s:write_file("out.txt", "now a file")
  T.eq(s:read_file("out.txt"), "now a file")
  -- bounded: over max_bytes is an error naming the size, unless truncate; offset reads on
  T.raises(function() s:read_file("big.txt", { max_bytes = 1000000 }) end,
    "/workspace/big.txt is 3000000 bytes, more than read_file's max_bytes of 1000000", true)
  local d, info = s:read_file("big.txt", { max_bytes = 1000, truncate = true })
  T.eq(#d, 1000)
  T.eq(info.size, 3000000)
  T.eq(info.truncated, true)
  T.eq(#s:read_file("big.txt", { offset = 2999990 }), 10)
  T.eq(#s:read_file("big.txt"), 3000000)
  T.raises(function() s:read_file("big.txt", { max_byte = 1 }) end, "unknown option 'max_byte'", true)
  -- a directory of many names is listed up to max_entries, with the count
  s:exec("mkdir -p many && cd many && touch $(seq 1 300)")
  local entries, li = s:list_files("many", { max_entries = 100 })
  T.eq(#entries, 100)
  T.eq(li.total, 300)
  T.eq(li.truncated, true)
  s:terminate()
end)

T.test("a sandboxd that does not answer, or answers with millions of values, is an error naming the operation and sandbox", function()
  local key = net.new_key()
  local ep = "ipc://" .. root .. "/wedged.sock"
  local fake = net.socket("router", key)
  fake:bind(ep)
  local c = S.connect{ id = "wedged-1", endpoint = ep, key = key }
  local saved = S.REQUEST_TIMEOUT_MS
  S.REQUEST_TIMEOUT_MS = 300
  -- Without a deadline a request waits forever: this waiter gives up after 5 s so that the test
  -- fails instead. The fake answers list with a reply of 1.1 million values (3.3 MB).
  local t0, answered = process.now_ms(), 0
  S.set_waiter(function(sock, ms, ready)
    local req = fake:recv(0)
    if req and req.header.msg_type == "list_request" then
      answered = answered + 1
      fake:send{ idents = req.idents, header = net.header("list_reply", "fake"), parent_header = req.header, metadata = {},
                 content = '{"status":"ok","entries":[' .. ("[],"):rep(1100000) .. '[]]}' }
    end
    if process.now_ms() - t0 > 5000 then error("test: still waiting for sandboxd after 5 s", 0) end
    if not ready() then net.poll({ sock }, math.min(ms, 20)) end
  end)
  local ok1, err1 = pcall(c.request, c, "list", { path = "x" })
  local dropped = c.sock:dropped()
  t0 = process.now_ms()
  local ok2, err2 = pcall(c.request, c, "read_file", { path = "x", max_bytes = 10 })
  local elapsed = process.now_ms() - t0
  S.set_waiter(nil)
  S.REQUEST_TIMEOUT_MS = saved
  c:close()
  fake:close()
  T.eq(answered, 1)
  T.ok(not ok1, "a reply of 1.1 million values was taken")
  T.contains(err1, "list: no answer from sandboxd of sandbox wedged-1 within 300 ms")
  T.ok(dropped >= 1, "the reply was not counted as dropped")
  T.ok(not ok2, "read_file answered")
  T.contains(err2, "read_file: no answer from sandboxd of sandbox wedged-1 within 300 ms")
  T.ok(elapsed < 2000, elapsed)
  -- an exec waits for its own timeout plus a margin; one without a timeout waits as long as it runs
  T.eq(S.request_timeout_ms("exec", { timeout = 5 }, {}), 5000 + S.EXEC_MARGIN_MS)
  T.eq(S.request_timeout_ms("exec", {}, {}), nil)
  T.eq(S.request_timeout_ms("write_file", {}, { buffers = { ("x"):rep(32 * 1048576) } }), S.REQUEST_TIMEOUT_MS + 2000)
end)

T.test("concurrent execs run side by side", function()
  local s = start({}, "concurrent")
  -- A slow exec from another client does not hold up this one: sandboxd serves both.
  local other = S.connect{ endpoint = "ipc://" .. s.run_dir .. "/sandboxd.sock", key = s.key }
  other.sock:send{ header = net.header("exec_request", other.session), parent_header = {}, metadata = {},
                   content = { argv = "sleep 1; echo slow" } }
  local t0 = process.now_ms()
  local out = s:exec("echo fast")
  T.eq(out, "fast\n")
  T.ok(process.now_ms() - t0 < 700, "the fast exec waited for the slow one")
  local r = other.sock:recv(5000)
  T.eq(r.buffers[1], "slow\n")
  other:close()
  s:terminate()
end)

T.test("environment: env and listed secrets reach the sandbox, nothing else does", function()
  ffi.C.setenv("SEER_TEST_SECRET_A", "s3cret-a", 1)
  ffi.C.setenv("SEER_TEST_NOT_LISTED", "leak-me", 1)
  local s = start({ env = { FOO = "bar" }, secrets = { "SEER_TEST_SECRET_A" } }, "envs")
  local out = s:exec("env")
  T.contains(out, "FOO=bar")
  T.contains(out, "SEER_TEST_SECRET_A=s3cret-a")
  T.ok(not out:find("leak-me", 1, true), "an unlisted host variable reached the sandbox")
  T.ok(not out:find("SEER_SANDBOX_DIR", 1, true), "the host's SEER_SANDBOX_DIR reached the sandbox")
  s:terminate()
  T.raises(function() start({ secrets = { "SEER_TEST_SURELY_UNSET" } }) end, "SEER_TEST_SURELY_UNSET=")
end)

T.test("models are mounted read-only under /models with MODEL_<ID>_PATH; hidden ones under an opaque name", function()
  -- the hidden model is a copy whose config.json names it, as Hugging Face configs do
  local secret = root .. "/secret-org-model"
  os.execute(("cp -r %s %s"):format(S.shell_quote(stories), S.shell_quote(secret)))
  local cfg = seer.json.decode(seer.read_file(secret .. "/config.json"))
  cfg._name_or_path = "secret-org/secret-model"
  seer.write_file(secret .. "/config.json", seer.json.encode(cfg))
  seer.write_file(secret .. "/README.md", "# secret-org/secret-model\n")
  local s = start({ models = { env.ModelConfig{ name = stories },
                               env.ModelConfig{ name = secret, var_name = "secret_model", hidden = true } } }, "models")
  local h = s.model_handles
  T.eq(h[1].path, "/models/stories260K")
  T.eq(h[1].env_var, "MODEL_STORIES260K_PATH")
  T.ok(h[2].path:match("^/models/m%-%x+$"), h[2].path)
  T.eq(h[2].env_var, nil)
  T.eq(s:model_path(stories), "/models/stories260K")
  T.raises(function() s:model_path("org/other") end, "not in this sandbox")
  local out = s:exec("echo $MODEL_STORIES260K_PATH; ls /models/stories260K | sort | head -3; env | grep -c MODEL_")
  T.contains(out, "/models/stories260K\n")
  T.contains(out, "config.json")
  T.contains(out, "1\n") -- only the visible model has a variable
  -- nothing under the hidden model's mount names it (config.json is a cleaned copy)
  local _, hid = s:exec("grep -rl secret " .. h[2].path .. " ; ls " .. h[2].path .. "; env | grep -i secret")
  T.ok(not hid.stdout:find("secret", 1, true), hid.stdout)
  T.contains(hid.stdout, "config.json")
  T.contains(s:exec_lua("local m = require('seer.model').load('" .. h[2].path .. "', { hidden = true }) print(m.config.num_hidden_layers)"), "5")
  local _, w = s:exec("touch /models/stories260K/x")
  T.ne(w.exit_code, 0)
  -- the model loads inside the sandbox and generates what it does outside
  local lo = s:exec_lua([[
    local m = require("seer.model").load(os.getenv("MODEL_STORIES260K_PATH"))
    print(m:generate("Once upon a time", { max_new_tokens = 8, temperature = 0 }).text)]])
  local m = require("seer.model").load(stories)
  T.eq(lo, m:generate("Once upon a time", { max_new_tokens = 8, temperature = 0 }).text .. "\n")
  s:terminate()
end)

T.test("start{workspace = ...} installs the workspace into /workspace (the reference's shape); bad options are refused", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed (make setup installs it)") end
  local W = require "seer.workspace"
  local ws = W.Workspace{ libraries = { W.Library.from_code("started_lib", "return { v = 5 }") } }
  local s = env.ScopedSandbox(env.SandboxConfig{ execution_mode = "cli" }):start{ name = "ws-start", workspace = ws }
  T.contains((s:exec("cat /workspace/started_lib.lua")), "return { v = 5 }")
  s:terminate()
  T.raises(function() env.Sandbox(env.SandboxConfig{ execution_mode = "cli" }):start{ nmae = "x" } end, 'unknown option "nmae"', true)
  T.raises(function() env.Sandbox(env.SandboxConfig{ execution_mode = "cli" }):start{ workspace = {} } end, "workspace must be a seer.workspace Workspace", true)
end)

T.test("a CLI session: the reference's exec_shell, session_id and workspace_path; exec_lua runs Lua inside", function()
  local s = start({}, "cli-names")
  local cli = require("seer.execution").create_cli_session(s)
  T.ok(type(cli.session_id) == "string" and cli.session_id:match("^cli%-"), tostring(cli.session_id))
  T.ne(require("seer.execution").create_cli_session(s).session_id, cli.session_id)
  T.eq(cli.workspace_path, "/workspace")
  T.eq((cli:exec_shell("id -u")), "65534\n")
  T.eq((cli:exec_lua("print(1 + 1)")), "2\n")
  -- the reference's create_cli_session(sandbox, workspace, name): the name given positionally
  -- was ignored (every session was "cli")
  local named = require("seer.execution").create_cli_session(s, nil, "shell")
  T.ok(named.session_id:match("^shell%-"), named.session_id)
  T.eq(named.name, "shell")
  T.ok(named.mcp_config.shell ~= nil, "the mcp_config entry has the session's name")
  T.raises(function() require("seer.execution").create_cli_session(s, nil, 5) end,
    "create_cli_session: the argument after the workspace is a name string or an options table, got number", true)
  T.raises(function() require("seer.execution").create_cli_session(s, nil, { nmae = "x" }) end,
    "create_cli_session: unknown option 'nmae'", true)
  s:terminate()
end)

T.test("the reference's Sandbox names seer lacks say what to use; a misspelt method lists the methods", function()
  local sb = env.Sandbox(env.SandboxConfig{ execution_mode = "cli" })
  T.raises(function() return sb:exec_python("print(1)") end, "use sandbox:exec_lua(code)", true)
  T.raises(function() return sb.code_server_url end, "seer runs no code-server", true)
  T.raises(function() return sb.modal_sandbox end, "a seer sandbox is not a Modal sandbox", true)
  -- through a ScopedSandbox too (it passes unknown names on to its sandbox)
  T.raises(function() return env.ScopedSandbox(env.SandboxConfig{ execution_mode = "cli" }):exec_python("1") end,
    "use sandbox:exec_lua(code)", true)
  for typo, want in pairs{ exce = "exec", write_files = "write_file", terminat = "terminate", Exec = "exec", exec_lau = "exec_lua" } do
    local msg = T.raises(function() return sb[typo](sb) end, ("Sandbox has no method '%s' (did you mean '%s'?); methods: "):format(typo, want), true)
    T.contains(msg, "exec_lua, ")
    T.ok(not msg:find("_start", 1, true), "private methods are not listed: " .. msg)
  end
  -- a ScopedSandbox's own methods and its sandbox's, at the caller's line
  local sc = env.ScopedSandbox(env.SandboxConfig{ execution_mode = "cli" })
  local msg = T.raises(function() return sc:serv("x") end, "ScopedSandbox has no method 'serv' (did you mean 'serve'?)", true)
  T.contains(msg, "test_sandbox.lua:")
  T.ok(not msg:find("start, start,", 1, true) and not msg:find("terminate, terminate", 1, true), msg)
  T.contains(T.raises(function() return sc:exec_python("1") end, "use sandbox:exec_lua(code)", true), "test_sandbox.lua:")
  T.eq(sc.sandbox_id, nil)
  -- fields a sandbox may leave unset still read as nil (code probes them)
  for _, k in ipairs{ "sandbox_id", "jupyter_url", "detached", "stopped", "attached", "notebook_server", "alive", "install", "foo" } do
    T.eq(sb[k], nil, k)
  end
  T.eq(type(sb.exec), "function")
end)

T.test("repos are cloned on the host and installed inside; a failing install is an error", function()
  local repo = root .. "/repo-src"
  process.mkdir_p(repo)
  seer.write_file(repo .. "/install.sh", "echo installed > INSTALLED\n")
  seer.write_file(repo .. "/lib.lua", "return 7\n")
  T.ok(os.execute(("cd %s && git init -q && git add . && git -c user.email=t@t -c user.name=t commit -qm init"):format(repo)) == 0)
  local s = start({ repos = { env.RepoConfig{ url = repo, install = true } } }, "repos")
  T.eq(s.repo_handles[1].path, "/workspace/repo-src")
  T.eq(s:read_file("repo-src/INSTALLED"), "installed\n")
  s:terminate()
  -- the reference's shape: install as a command, run in the repo's folder inside the sandbox
  local s2 = start({ repos = { env.RepoConfig{ url = repo, install = "id -u > BY; pwd >> BY" } } }, "repos-cmd")
  T.eq(s2:read_file("repo-src/BY"), "65534\n/workspace/repo-src\n")
  s2:terminate()
  local before = #entries_of(state_root)
  seer.write_file(repo .. "/install.sh", "echo broken >&2; exit 4\n")
  os.execute(("cd %s && git -c user.email=t@t -c user.name=t commit -qam broken"):format(repo))
  T.raises(function() start({ repos = { env.RepoConfig{ url = repo, install = true } } }, "badrepo") end, "exited with 4")
  T.eq(#entries_of(state_root), before, "a failed start left its directory behind")
  T.raises(function() start({ repos = { env.RepoConfig{ url = root .. "/no-such-repo" } } }) end, "git clone")
end)

T.test("from_snapshot with repos: the snapshot's workspace wins over a fresh clone (the reference's shape)", function()
  local repo = root .. "/snap-repo"
  process.mkdir_p(repo)
  seer.write_file(repo .. "/lib.lua", "return 1\n")
  T.ok(os.execute(("cd %s && git init -q && git add . && git -c user.email=t@t -c user.name=t commit -qm init"):format(repo)) == 0)
  local cfg = { repos = { env.RepoConfig{ url = repo } } }
  local s = start(cfg, "snap-repo")
  s:write_file("snap-repo/extra.txt", "made in the first sandbox")
  local id = s:snapshot("with a repo")
  s:terminate()
  local again = env.Sandbox.from_snapshot(id, env.SandboxConfig{ repos = { env.RepoConfig{ url = repo } }, execution_mode = "cli" })
  T.eq(again:read_file("snap-repo/extra.txt"), "made in the first sandbox")
  T.eq(again:read_file("snap-repo/lib.lua"), "return 1\n")
  again:terminate()
end)

T.test("snapshot then restore gives the same workspace", function()
  local s = start({}, "snap")
  s:write_file("notes/a.txt", "alpha")
  s:write_file("b.bin", "\0\1\2")
  s:exec("mkdir -p empty/dir && ln -s notes/a.txt link")
  local id = s:snapshot("after setup")
  local s2 = S.from_snapshot(id, s.config)
  T.eq(s2:read_file("notes/a.txt"), "alpha")
  T.eq(s2:read_file("b.bin"), "\0\1\2")
  T.eq(s2:exec("readlink link; test -d empty/dir && echo dir"), "notes/a.txt\ndir\n")
  local found
  for _, e in ipairs(S.snapshots()) do if e.id == id then found = e end end
  T.eq(found.description, "after setup")
  local id2 = s2:terminate{ save_snapshot = true, snapshot_description = "final" }
  T.ok(id2 and id2 ~= id, "terminate{save_snapshot} returns a new id")
  local s3 = env.Sandbox.from_snapshot(id2)
  T.eq(s3:read_file("notes/a.txt"), "alpha")
  s3:terminate()
  s:terminate()
  T.raises(function() S.from_snapshot("no-such-snapshot") end, "no snapshot")
end)

T.test("snapshots: a sparse file by its data, a workspace being written to, terminate{save_snapshot}", function()
  local s = start({}, "snap2")
  -- a 4 GiB file of holes (no disk): tar read it as 4 GiB of zeros (35 s of host CPU)
  s:exec("truncate -s 4G sparse.bin && printf data > small.txt")
  local t0 = process.now_ms()
  local id = s:snapshot("sparse")
  T.ok(process.now_ms() - t0 < 10000, "a sparse snapshot took " .. (process.now_ms() - t0) .. " ms")
  local s2 = S.from_snapshot(id, s.config)
  T.eq(s2:exec("stat -c %s sparse.bin; du -k sparse.bin | cut -f1; cat small.txt"), "4294967296\n0\ndata")
  s2:terminate()
  -- a process appending all the time: tar said "file changed as we read it" and the snapshot,
  -- and terminate{save_snapshot}, failed, leaving the sandbox running
  s:write_file("results.txt", "kept\n")
  s:exec("(while true; do head -c 65536 /dev/zero >> grow.bin; done >/dev/null 2>&1 &); sleep 0.3")
  local id2 = s:terminate{ save_snapshot = true }
  T.ok(id2, "terminate{save_snapshot} gave a snapshot")
  T.raises(function() s:exec("true") end, "terminated")
  local s3 = S.from_snapshot(id2, s.config)
  T.eq(s3:read_file("results.txt"), "kept\n")
  s3:terminate()
end)

T.test("config errors: a GPU this machine lacks, missing packages, missing mounts", function()
  if #S.gpu_devices() == 0 then
    T.raises(function() start({ gpu = "H100" }) end, "no NVIDIA GPU")
  end
  T.raises(function() start({ system_packages = { "surely-not-a-package-xyz" } }) end, "not installed on this machine")
  T.raises(function() start({ local_dirs = { { root .. "/missing", "/data" } } }) end, "not a directory")
  T.raises(function() start({ models = { env.ModelConfig{ name = "./no/such/model" } } }) end, "not a directory")
end)

T.test("a sandboxed kernel whose exit notice cannot be written is still found dead (its sockets refuse), not waited on", function()
  local exec = require "seer.execution"
  local s = start({ execution_mode = "notebook" }, "nodeath")
  local session = exec.create_notebook_session(s, require("seer.workspace").Workspace{}, { output_dir = root .. "/nodeath-nb" })
  -- the next kernel's exit notice cannot be written: a folder sits where sandboxd writes it (as
  -- a full disk does: "cannot write /run/seer/services/kernel-....exit")
  local sid = session.session_id
  session:exec(("os.execute('mkdir -p /run/seer/services/kernel-%s-2.exit/x')"):format(sid))
  session:restart()
  local t0 = require("seer.process").now_ms()
  local r = session:exec("os.exit(3)", { raise = false, timeout = 60 })
  local took = (require("seer.process").now_ms() - t0) / 1000
  T.eq(r.result, "error")
  T.eq(r.error and r.error.ename, "KernelDied", r.error and r.error.evalue)
  T.ok(took < 15, ("the death was found after %.1f s (the cell waited for its timeout)"):format(took))
  session:terminate()
  s:terminate()
end)

T.test("a notebook session runs its kernel inside the sandbox, with the models preloaded", function()
  local exec = require "seer.execution"
  local s = start({ execution_mode = "notebook", models = { env.ModelConfig{ name = stories } } }, "nb")
  T.ok(s.jupyter_url and s.jupyter_url:match("^http://127%.0%.0%.1:%d+/"), tostring(s.jupyter_url))
  local out_dir = root .. "/notebooks"
  local session = exec.create_notebook_session(s, require("seer.workspace").Workspace{}, { output_dir = out_dir })
  T.contains(session.model_info_text, "`model`")
  local r = session:exec("print(model:generate('Once upon a time', { max_new_tokens = 6 }).text); "
    .. "print(os.getenv('SEER_SANDBOX_ID'), (io.open('" .. state_root .. "/x')), io.open('/workspace/w', 'w') ~= nil)")
  local m = require("seer.model").load(stories)
  T.eq(r.text, m:generate("Once upon a time", { max_new_tokens = 6 }).text .. "\n" .. s.sandbox_id .. "\tnil\ttrue\n")
  T.ok(io.open(s.workspace_dir .. "/w"), "the kernel's /workspace is the sandbox's")
  local nb = seer.json.decode(seer.read_file(session.notebook_path))
  T.eq(#nb.cells, 1)
  -- a kernel killed inside the sandbox is noticed, and restart brings the models back
  T.raises(function() session:exec("os.execute('kill -9 0')") end, "KernelDied")
  session:restart()
  T.eq(session:exec("print(model ~= nil)").text, "true\n")
  session:terminate()
  s:terminate()
end)

---------------------------------------------------------------------------------------------
-- the isolation suite: every attempt must fail from inside

T.test("isolation: host files outside the mounts cannot be read", function()
  local secret_dir = root .. "/host-secret"
  process.mkdir_p(secret_dir)
  seer.write_file(secret_dir .. "/key.txt", "TOPSECRET")
  local shared = root .. "/shared"
  process.mkdir_p(shared)
  seer.write_file(shared .. "/ok.txt", "visible")
  local s = start({ local_dirs = { { shared, "/data" } } }, "iso-read")
  -- control: a mounted directory is readable
  T.eq(s:exec("cat /data/ok.txt"), "visible")
  for _, p in ipairs({ secret_dir .. "/key.txt", "/etc/shadow", "/root/.bashrc", "/work", state_root }) do
    local out, r = s:exec({ "cat", p })
    T.ne(r.exit_code, 0, p .. " was readable")
    T.ok(not out:find("TOPSECRET", 1, true), p)
  end
  local _, r = s:exec("ls / | tr '\\n' ' '")
  T.eq(r.stdout, "bin data dev etc lib lib32 lib64 opt proc run sbin tmp usr var workspace ")
  s:terminate()
end)

T.test("isolation: nothing outside /workspace can be written", function()
  local s = start({}, "iso-write")
  T.eq(select(2, s:exec("echo x > /workspace/ok && cat /workspace/ok")).exit_code, 0) -- control
  for _, p in ipairs({ "/usr/evil", "/etc/evil", "/opt/seer/evil", "/opt/seer/lua/seer/init.lua", "/bin/evil",
                       "/run/evil", "/evil" }) do
    local _, r = s:exec({ "sh", "-c", "echo x > " .. p })
    T.ne(r.exit_code, 0, p .. " was writable")
  end
  -- /tmp is writable but private: the host's /tmp does not get the file
  local marker = "seer-tmp-probe-" .. net.uuid():sub(1, 8)
  T.eq(select(2, s:exec("echo x > /tmp/" .. marker)).exit_code, 0)
  T.ok(not io.open("/tmp/" .. marker), "the sandbox's /tmp is the host's /tmp")
  -- no capabilities: even as 'root' of its user namespace nothing can be mounted
  T.ne(select(2, s:exec("mount -t tmpfs none /workspace/m 2>&1; unshare -U true")).exit_code, 0)
  local _, caps = s:exec("grep CapEff /proc/self/status")
  T.contains(caps.stdout, "0000000000000000")
  s:terminate()
end)

T.test("isolation: network none cannot reach the host's loopback; network host can", function()
  local server = net.socket("rep", "")
  local _, port = server:bind("tcp://127.0.0.1:*")
  local probe = ("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected"):format(port)
  local s = start({}, "iso-net")
  local out, r = s:exec({ "bash", "-c", probe }, { timeout = 10 })
  T.ne(r.exit_code, 0)
  T.ok(not out:find("connected", 1, true))
  local _, ifs = s:exec("ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1")
  T.ok(not ifs.stdout:find("eth", 1, true), "a network interface besides lo: " .. ifs.stdout)
  s:terminate()
  local h = start({ network = "host" }, "net-control")
  T.contains(h:exec({ "bash", "-c", probe }, { timeout = 10 }), "connected") -- control
  h:terminate()
  server:close()
end)

T.test("isolation: host processes are invisible and unreachable", function()
  local s = start({}, "iso-pid")
  local me = process.getpid()
  local _, r = s:exec(("kill -0 %d"):format(me))
  T.ne(r.exit_code, 0)
  local _, ps = s:exec("ls /proc | grep -c '^[0-9]'")
  T.ok(tonumber(ps.stdout) <= 6, "the sandbox sees " .. ps.stdout .. " processes")
  local _, pid1 = s:exec("cat /proc/1/cmdline | tr '\\0' ' '")
  -- pid 1 is sandboxd itself (bubblewrap --as-pid-1), so every process inside runs under the
  -- seccomp filter (docs/sandbox.md, "System calls")
  T.contains(pid1.stdout, "/opt/seer/bin/seer sandboxd")
  T.eq(s:exec("hostname"), "sandbox\n")
  s:terminate()
end)

T.test("isolation: no process survives terminate", function()
  local s = start({}, "iso-leak")
  local marker = tostring(900000 + math.random(99999))
  s:exec(("setsid sh -c 'sleep %s' >/dev/null 2>&1 < /dev/null & nohup sleep %s >/dev/null 2>&1 &"):format(marker, marker))
  T.ok(wait_until(function() return #host_procs("sleep " .. marker) >= 2 end), "control: the sleepers run")
  local cg = s.cgroup
  s:terminate()
  T.ok(wait_until(function() return #host_procs("sleep " .. marker) == 0 end, 3000),
    "left running: " .. table.concat(host_procs("sleep " .. marker), "; "))
  T.ok(not cg.memory or not sb.listdir(cg.memory), "the memory cgroup was left behind")
  T.ok(not cg.pids or not sb.listdir(cg.pids), "the pids cgroup was left behind")
end)

T.test("isolation: a fork bomb is stopped by the process limit", function()
  local s = start({ limits = { processes = 64 } }, "iso-fork")
  local t0 = process.now_ms()
  -- The bomb's processes outlive the shell that started them, so the command spins on shell
  -- builtins (a fork could fail here) until its timeout kills its whole process group. Ending
  -- with `sleep 1` left the cgroup full of bomb processes on a slower machine, and the next
  -- exec could not fork.
  local _, r = s:exec("bomb() { bomb | bomb & }; bomb; while :; do :; done", { timeout = 2 })
  T.eq(r.exit_code, 124)
  T.ok(process.now_ms() - t0 < 9000, "the timeout did not stop the bomb")
  local st = s:stats()
  if st.pids_max_hits then
    T.ok(st.pids_max_hits > 0, "the pids limit was never hit")
  else
    T.contains(r.stderr, "fork")
  end
  -- the sandbox recovers once the group is gone (the kernel may take a moment to reap it)
  local out
  T.ok(wait_until(function()
    local ok, o = pcall(s.exec, s, "echo still here")
    out = ok and o or tostring(o)
    return ok
  end, 5000), "the sandbox did not recover: " .. tostring(out))
  T.eq(out, "still here\n")
  s:terminate()
end)

T.test("isolation: a memory bomb is stopped by the memory limit", function()
  local s = start({ limits = { memory = "128M" } }, "iso-mem")
  local out, r = s:exec_lua("local t = {} for i = 1, 4000 do t[i] = string.rep('x', 1048576) .. i end print('survived')",
    { timeout = 60 })
  T.ne(r.exit_code, 0)
  T.ok(not out:find("survived", 1, true))
  if s.cgroup.memory then
    T.eq(r.out_of_memory, true)
    T.contains(out, "memory limit (128 MiB)")
  end
  T.eq(s:exec("echo still here"), "still here\n")
  s:terminate()
end)

T.test("isolation: the timeout kills the whole sandbox on time", function()
  local s = start({ timeout = 1 }, "iso-timeout")
  local marker = tostring(800000 + math.random(99999))
  local t0 = process.now_ms()
  local ok, err = pcall(s.exec, s, ("setsid sleep %s & sleep %s"):format(marker, marker))
  local dt = process.now_ms() - t0
  T.eq(ok, false)
  T.contains(tostring(err), "timeout of 1 s passed")
  T.ok(dt < 2500, ("killed after %d ms"):format(dt))
  T.ok(wait_until(function() return #host_procs("sleep " .. marker) == 0 end, 2000), "processes outlived the timeout")
  s:terminate()
end)

---------------------------------------------------------------------------------------------
-- the sandbox dies with its script

local function run_script(code, wait_line)
  local path = root .. "/script-" .. net.uuid():sub(1, 6) .. ".lua"
  seer.write_file(path, code)
  local child = process.spawn{ argv = { SEER, path }, stdout = "pipe", stderr = "null",
                               env = { SEER_SANDBOX_DIR = state_root, SEER_CACHE_DIR = cache_root } }
  local line = wait_line and child:read_line(20000)
  return child, line
end

local START = [[
local env = require "seer.environment"
local s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli" }):start{ name = "owner" }
s:exec("setsid sleep %s >/dev/null 2>&1 < /dev/null &")
print(s.sandbox_id); io.stdout:flush()
]]

for _, case in ipairs({
  { "ends", "" },
  { "errors", "error('boom')" },
  { "calls os.exit", "os.exit(3)" },
  { "is killed", "require('seer.process').sleep_ms(60000)", true },
}) do
  T.test("no leaks: the sandbox dies when its script " .. case[1], function()
    if not have_bwrap() then T.skip("bubblewrap is not installed") end
    local marker = tostring(700000 + math.random(99999))
    local child, id = run_script(START:format(marker) .. case[2] .. "\n", true)
    T.ok(id and id:match("^owner%-"), "the script did not start its sandbox: " .. tostring(id))
    if case[3] then
      T.ok(wait_until(function() return #host_procs("sleep " .. marker) > 0 end), "control: the sleeper runs")
      child:kill(9)
    end
    child:wait(10000)
    T.ok(wait_until(function() return #host_procs("sleep " .. marker) == 0 end, 5000),
      "left running: " .. table.concat(host_procs("sleep " .. marker), "; "))
    T.ok(wait_until(function() return not sb.listdir(state_root .. "/" .. id) end, 10000),
      "state directory left behind: " .. table.concat(entries_of(state_root .. "/" .. id), " "))
  end)
end

---------------------------------------------------------------------------------------------
-- seer sandbox list / logs / terminate from another process

T.test("seer sandbox list, logs and terminate", function()
  local s = start({}, "cli")
  local function cli(...)
    local args = { SEER, "sandbox", ... }
    for i, a in ipairs(args) do args[i] = S.shell_quote(a) end
    local p = io.popen(("SEER_SANDBOX_DIR=%s %s 2>&1; echo \"rc=$?\""):format(S.shell_quote(state_root), table.concat(args, " ")))
    local out = p:read("*a")
    p:close()
    local code = tonumber(out:match("rc=(%d+)\n$"))
    return out:gsub("rc=%d+\n$", ""), code
  end
  local out = cli("list")
  T.contains(out, s.sandbox_id)
  T.contains(cli("logs", s.sandbox_id), "listening on")
  local _, code = cli("logs", "no-such-id")
  T.ne(code, 0)
  -- The log folder is the sandbox's to write: what it writes there reaches the terminal of
  -- whoever reads the logs. On a terminal its escape sequences are shown, not obeyed (here a
  -- clipboard write, a screen clear and a red colour); into a pipe the bytes go as written.
  s:exec([[printf 'before \033]52;c;cm0gLXJmIH4=\007 \033[2J\033[31mred\033[0m after\n' >> /var/log/seer/sandbox.log]])
  local raw = cli("logs", s.sandbox_id)
  T.contains(raw, "before \27]52;c;cm0gLXJmIH4=\7 \27[2J\27[31mred\27[0m after")
  local p = io.popen(("SEER_SANDBOX_DIR=%s script -qec %s /dev/null"):format(S.shell_quote(state_root),
    S.shell_quote(SEER .. " sandbox logs -n 3 " .. s.sandbox_id)))
  local shown = p:read("*a")
  p:close()
  T.contains(shown, "before \\x1b]52;c;cm0gLXJmIH4=\\x07 \\x1b[2J")
  T.contains(shown, "red after")
  T.ok(not shown:find("\27", 1, true), "an escape character reached the terminal: " .. shown)
  -- -f on a terminal: a C1 control written in two pieces (0xC2, then 0x9B: CSI) reached the
  -- terminal whole, each piece alone looking harmless; a lone 0x9B (CSI on a Latin-1
  -- terminal) and a bidi override likewise
  local f = io.popen(("SEER_SANDBOX_DIR=%s timeout 6 script -qfec %s /dev/null"):format(S.shell_quote(state_root),
    S.shell_quote(SEER .. " sandbox logs -n 1 -f " .. s.sandbox_id)))
  process.sleep_ms(1500)
  s:exec([[printf 'split \302' >> /var/log/seer/sandbox.log; sleep 1; printf '\2332J lone \233 bidi \342\200\256x end\n' >> /var/log/seer/sandbox.log]])
  local followed = f:read("*a")
  f:close()
  T.contains(followed, "split \\u009b2J lone \\x9b bidi \\u202ex end")
  T.ok(not followed:find("\194\155", 1, true) and not followed:find("\155", 1, true), "a CSI reached the terminal: " .. followed)
  -- usage errors: status 2 and the usage, no traceback
  for _, args in ipairs({ { "logs", s.sandbox_id, "-n", "0" }, { "logs", "a", "b" }, { "terminate", "--all", "x" },
                          { "list", "--x" }, { "nonsense" } }) do
    local text, c = cli(unpack(args))
    T.eq(c, 2, table.concat(args, " ") .. ": " .. text)
    T.contains(text, "usage: seer sandbox")
    T.ok(not text:find("traceback"), text)
  end
  out = cli("terminate", s.sandbox_id)
  T.contains(out, s.sandbox_id)
  T.raises(function() s:exec("true") end, "terminated from outside")
  T.ok(not cli("list"):find(s.sandbox_id, 1, true))
  s:terminate()
  local a, b = start({}, "all1"), start({}, "all2")
  cli("terminate", "--all")
  T.raises(function() a:exec("true") end, "terminated")
  T.raises(function() b:exec("true") end, "terminated")
  a:terminate(); b:terminate()
end)

T.test("an impostor at sandboxd's socket sending whole large messages cannot grow a host client past its queue", function()
  -- agent code can replace /run/seer/sandboxd.sock; every later attach / seer mcp cli connects to
  -- it. The client's socket had libzmq's default queue (1,000 messages of up to 1 GiB): 6 GB.
  local process = require "seer.process"
  local dir = T.tmpdir()
  local path = dir .. "/sandboxd.sock"
  local p = process.spawn{ argv = { require("seer.jupyter").seer_binary(), seer.script_dir() .. "/zmtp_peer.lua", path,
                                    "complete", "24", tostring(48 * 1048576) }, stdout = "pipe" }
  T.eq(p:read_line(10000), "listening")
  local function rss()
    for l in io.lines("/proc/self/status") do
      local v = l:match("^VmRSS:%s+(%d+)")
      if v then return tonumber(v) * 1024 end
    end
  end
  local before = rss()
  local c = S.connect{ endpoint = "ipc://" .. path, key = "k" }
  local line = p:read_line(20000) -- the impostor stops when a send waits 3 s (the queue is full)
  local sent = tonumber((line or ""):match("^sent (%d+)$"))
  local grown = rss() - before
  T.ok(sent and sent < 24, ("the impostor got all %s messages of 48 MiB in"):format(tostring(sent)))
  T.ok(grown < 400 * 1048576, ("the client grew by %d MiB"):format(math.floor(grown / 1048576)))
  pcall(function() c.sock:close() end)
  p:kill(9)
  p:wait(2000)
end)

return T
