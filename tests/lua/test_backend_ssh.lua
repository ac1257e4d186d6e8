-- The ssh backend against a real OpenSSH server: the test starts Debian's sshd on loopback (a
-- high port, its own host key, an authorized_keys with a key made here, as the user running the
-- test) and runs sandboxes "on" it: exec and files, a notebook session on stories260K, a kernel
-- that dies, terminate, a dropped connection (the ssh client killed, then the server's side),
-- the remote timeout, and a recording of the TCP stream that must not show what was sent.
-- Remote state goes to a folder of this test, so "nothing left" is checked by listing it and
-- the processes of the machine.
local T = require "testing"
local env = require "seer.environment"
local exec = require "seer.execution"
local sb = require "seer.core.sandbox"
local process = require "seer.process"
local seer = require "seer"

local here = seer.script_dir()
local stories = here .. "/../fixtures/models/stories260K"
local SSHD = "/usr/sbin/sshd"

local root = T.tmpdir()
T.private_sandbox_dirs(root)

local fixture = require "sshd_fixture"
local function sshd() return fixture.start(root) end
local sh = T.sh
local function exists(p) return require("seer.safe_fs").lstat(p) ~= nil end

local RSTATE = root .. "/remote-state"
local RDIR = root .. "/remote-seer"

local function ssh_fields(extra)
  local s = sshd()
  local t = { host = "127.0.0.1", port = s.port, identity_file = s.dir .. "/client_key", known_hosts = s.dir .. "/known_hosts",
              remote_dir = RDIR, remote_state_dir = RSTATE, keepalive = 1 }
  for k, v in pairs(extra or {}) do if v == false then t[k] = nil else t[k] = v end end
  return t
end

local function start(t, name)
  t = t or {}
  t.backend = "ssh"
  t.ssh = t.ssh or ssh_fields()
  if t.execution_mode == nil then t.execution_mode = "cli" end
  return env.Sandbox(env.SandboxConfig(t)):start{ name = name }
end

local procs_with = fixture.procs_with
local function wait_gone(rid, ms) return fixture.wait_gone(RSTATE, rid, ms) end

local function cmdline(pid)
  local f = io.open("/proc/" .. pid .. "/cmdline", "rb")
  local t = f and f:read("*a") or ""
  if f then f:close() end
  return t
end

-- The ssh master of a sandbox: the ssh process running with its control socket.
local function ssh_master(s)
  for _, e in ipairs(sb.listdir("/proc")) do
    if e.name:match("^%d+$") then
      local c = cmdline(e.name)
      if c:match("^ssh%z") and c:find(s.state_dir .. "/ssh.ctl", 1, true) and c:find("%z%-M%z") then return tonumber(e.name) end
    end
  end
end

---------------------------------------------------------------------------------------------

T.test("ssh config is checked before anything runs", function()
  T.raises(function() env.SandboxConfig{ backend = "ssh" } end, "needs ssh = {host")
  T.raises(function() env.SandboxConfig{ backend = "ssh", ssh = { host = "-oProxyCommand=x" } } end, "is not a host name")
  T.raises(function() env.SandboxConfig{ backend = "ssh", ssh = { host = "h", user = "a b" } } end, "is not a user name")
  T.raises(function() env.SandboxConfig{ backend = "ssh", ssh = { host = "h", port = 70000 } } end, "1..65535")
  T.raises(function() env.SandboxConfig{ backend = "ssh", ssh = { host = "h", hots = 1 } } end, "unknown field hots; valid fields: config_file")
  T.raises(function() env.SandboxConfig{ backend = "ssh", ssh = { host = "h", remote_dir = "a/../b" } } end, "plain path")
  T.raises(function() env.SandboxConfig{ ssh = { host = "h" } } end, 'ssh is for backend = "ssh"')
  T.raises(function() env.SandboxConfig{ backend = "modal" } end, "not available yet")
  local c = env.SandboxConfig{ backend = "ssh", ssh = { host = "gpu1.lab", user = "me", port = 2222 } }
  T.eq(c.ssh.remote_dir, ".cache/seer/remote")
  T.contains(tostring(c), 'ssh = {connect_timeout = 15, host = "gpu1.lab"')
  -- the remote side's first line is checked field by field
  local B = require "seer.backends.ssh"
  local good = { ready = true, id = "x-1", key = ("a"):rep(32), run_dir = "/tmp/s/x-1/run", models = { { path = "/models/m" } } }
  T.ok(B.check_ready(seer.json.encode(good)))
  for field, bad in pairs({ id = "../x", key = "short", run_dir = "/tmp/../etc", models = { { path = "/etc/passwd" } } }) do
    local t = {}
    for k, v in pairs(good) do t[k] = v end
    t[field] = bad
    local ok, why = B.check_ready(seer.json.encode(t))
    T.ok(not ok and why, field .. " " .. tostring(why))
  end
  T.ok(not B.check_ready(("x"):rep(70000)))
  T.contains(select(2, B.check_ready('{"error":"no bwrap"}')), "did not start: no bwrap")
end)

T.test("an unreachable host or an unknown host key fails start() with ssh's reason", function()
  local s = sshd()
  T.raises(function() start{ ssh = ssh_fields{ port = s.port == 65000 and 65001 or 65000, connect_timeout = 3 } } end, "ssh to 127.0.0.1 failed")
  local empty = root .. "/empty_known_hosts"
  io.open(empty, "w"):close()
  T.raises(function() start{ ssh = ssh_fields{ known_hosts = empty } } end, "Host key verification failed")
  T.eq(#(sb.listdir(root .. "/sb") or {}), 0, "a failed start leaves no local folder")
end)

T.test("a notebook session on stories260K runs in an ssh sandbox; terminate leaves nothing there", function()
  local t0 = process.now_ms()
  local s = start({ execution_mode = "notebook", models = { env.ModelConfig{ name = stories } }, timeout = 300 }, "nb")
  local out, r = s:exec("echo hello; id -u; ls /models")
  io.write(("  (ssh: start() to the first answered exec %.0f ms here)\n"):format(process.now_ms() - t0))
  T.eq(r.exit_code, 0)
  T.eq(out, "hello\n65534\nstories260K\n")
  local rid = s.remote.id
  T.ok(exists(RSTATE .. "/" .. rid), "the remote sandbox's state is in the remote state folder")
  T.eq(#procs_with("SEER_SANDBOX_ID=" .. rid) > 0, true, "the remote sandbox's processes run")
  -- files go through sandboxd, binary safe
  local bytes = {}
  for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
  local blob = table.concat(bytes):rep(64)
  s:write_file("data/blob.bin", blob)
  T.eq(s:read_file("data/blob.bin"), blob)
  local names = {}
  for _, e in ipairs(s:list_files("/workspace/data")) do names[#names + 1] = e.name end
  T.eq(table.concat(names, ","), "blob.bin")
  T.contains(s:logs(20), "sandboxd: listening")
  -- the session: the kernel runs in the remote sandbox, its sockets forwarded over ssh
  local W = require "seer.workspace"
  local lib = W.Library.from_code("remote_helpers", "return { answer = function() return 42 end }")
  local session = exec.create_notebook_session(s, W.Workspace{ libraries = { lib } }, { output_dir = root .. "/nb" })
  T.contains(session.model_info_text, "`model`")
  -- a Workspace library installed for the session reached the remote /workspace
  T.eq(session:exec("print(require('remote_helpers').answer())").text, "42\n")
  local res = session:exec("print(model:generate('Once upon a time', { max_new_tokens = 6 }).text); print(os.getenv('SEER_SANDBOX_ID'))")
  local m = require("seer.model").load(stories)
  T.eq(res.text, m:generate("Once upon a time", { max_new_tokens = 6 }).text .. "\n" .. rid .. "\n")
  T.ok(exists(session.notebook_path), "the notebook is written on this machine")
  -- the live view and the agent's MCP server are this machine's notebook server, as locally
  T.ok(s.jupyter_url and s.jupyter_url:match("^http://127%.0%.0%.1:%d+/"), tostring(s.jupyter_url))
  T.eq(session.sandbox_id, s.sandbox_id)
  T.ok(session.mcp_config.notebook.env.SEER_NOTEBOOK_SCOPE_KEY, "a sandbox-scoped MCP config")
  -- a kernel killed in the remote sandbox is noticed; restart brings the model back
  T.raises(function() session:exec("os.execute('kill -9 0')") end, "KernelDied")
  session:restart()
  T.eq(session:exec("print(model ~= nil)").text, "true\n")
  session:terminate()
  local state_dir = s.state_dir
  s:terminate()
  T.ok(wait_gone(rid, 3000))
  T.ok(not exists(state_dir), "the local folder is removed")
  T.raises(function() s:exec("true") end, "terminated")
end)

T.test("start{workspace} uploads the workspace to the remote /workspace", function()
  local W = require "seer.workspace"
  local s = env.Sandbox(env.SandboxConfig{ backend = "ssh", ssh = ssh_fields(), execution_mode = "cli", timeout = 300 })
  s:start{ name = "ws", workspace = W.Workspace{ libraries = { W.Library.from_code("lib_a", "return 7") } } }
  T.eq(s:exec("lua_a=$(cat lib_a.lua); echo $lua_a"), "return 7\n")
  -- a CLI session's workspace: installed into the mirror by seer.execution, then used by
  -- another process (seer mcp cli) that connects by id
  local cli = exec.create_cli_session(s, W.Workspace{ libraries = { W.Library.from_code("lib_b", "return 8") } })
  T.eq(cli.sandbox_id, s.sandbox_id)
  local c = require("seer.sandbox").connect_id(s.sandbox_id)
  local r, bufs = c:request("exec", { argv = "cat lib_b.lua" }, { timeout_ms = 10000 })
  T.eq(r.exit_code, 0)
  T.eq(bufs[1], "return 8")
  c:close()
  s:terminate()
end)

T.test("time to a remote sandbox answering exec (seer already there), exec round trip, terminate", function()
  local t0 = process.now_ms()
  local s = start({ timeout = 300 }, "timing")
  T.eq(s:exec("echo up"), "up\n")
  local first = process.now_ms() - t0
  local n, t1 = 30, process.now_ms()
  for _ = 1, n do s:exec({ "true" }) end
  local rtt = (process.now_ms() - t1) / n
  local t2 = process.now_ms()
  s:terminate()
  local term = process.now_ms() - t2
  -- the same with a local sandbox, in the same run
  local l0 = process.now_ms()
  local l = env.Sandbox(env.SandboxConfig{ execution_mode = "cli", timeout = 300 }):start{ name = "local" }
  l:exec("echo up")
  local lfirst = process.now_ms() - l0
  local l1 = process.now_ms()
  for _ = 1, n do l:exec({ "true" }) end
  local lrtt = (process.now_ms() - l1) / n
  l:terminate()
  io.write(("  (ssh, loopback: start() to the first answered exec %.0f ms (local sandbox: %.0f ms); exec round trip %.1f ms (local: %.1f ms); terminate %.0f ms)\n")
    :format(first, lfirst, rtt, lrtt, term))
end)

T.test("a remote exec killed by the memory limit is flagged; stats() are the remote cgroup's", function()
  local s = start({ timeout = 300, limits = { memory = "128M" } }, "oom")
  T.eq(s:exec("echo up"), "up\n")
  local deadline = process.now_ms() + 5000
  while s:stats().memory_limit == nil and process.now_ms() < deadline do process.sleep_ms(50) end
  local st = s:stats()
  if st.oom_kills == nil or st.oom_kills < 0 then
    s:terminate()
    T.skip("the remote side (this machine) has no memory cgroup to count OOM kills")
  end
  T.eq(st.memory_limit, 128 * 1048576)
  T.eq(st.oom_kills, 0)
  local out, r = s:exec_lua("local t = {} for i = 1, 4000 do t[i] = string.rep('x', 1048576) .. i end print('survived')",
    { timeout = 60 })
  T.ne(r.exit_code, 0)
  T.ok(not out:find("survived", 1, true))
  T.eq(r.out_of_memory, true)
  T.contains(out, "memory limit (128 MiB)")
  T.ok(s:stats().oom_kills >= 1, "stats() shows the kill")
  T.ok(s:stats().memory_peak > 64 * 1048576, "stats() shows the peak")
  -- a SIGKILL that is not the memory limit is not flagged
  local _, r2 = s:exec("kill -9 $$")
  T.eq(r2.signal, 9)
  T.eq(r2.out_of_memory, false)
  -- what the far side sends is filtered: unknown names and non-numbers are dropped
  local ssh = require "seer.backends.ssh"
  local c = ssh.clean_stats({ oom_kills = 2, memory_peak = "x", evil = 1, pids_current = 0 / 0, memory_limit = 2 ^ 70 })
  T.eq(c.oom_kills, 2)
  T.eq(c.memory_peak, nil); T.eq(c.evil, nil); T.eq(c.pids_current, nil); T.eq(c.memory_limit, nil)
  s:terminate()
end)

T.test("the link bounds what a hostile remote side can make it do: .exit files, JSON values, stats rewrites", function()
  -- no sshd needed: the link's handlers on a state folder of our own, fed what a remote sends
  local ssh = require "seer.backends.ssh"
  local json = require "seer.json"
  local dir = T.tmpdir()
  os.execute(("mkdir -p '%s/run'"):format(dir))
  local link = setmetatable({ state_dir = dir, exited = {} }, ssh._Link)
  -- 1000 new stopped services a reply, for ever: at most MAX_EXITED files in all (it wrote 1000 a second)
  for r = 1, 12 do
    local list = {}
    for i = 1, 1000 do list[i] = { name = ("svc-%d-%d"):format(r, i), running = false } end
    link:mirror_services(json.encode{ services = list })
  end
  local p = io.popen(("ls '%s/run/services' | wc -l"):format(dir))
  local n = tonumber(p:read("*a"))
  p:close()
  T.eq(n, ssh.MAX_EXITED, "the .exit files stop at the bound")
  -- a reply of millions of tiny values is not decoded (a 60 MB one took the link to 3 GB)
  local before = collectgarbage("count")
  link.exited, link.n_exited = {}, 0
  link:mirror_services('{"services":[' .. string.rep("0,", 2000000) .. '0]}')
  T.ok(collectgarbage("count") - before < 64 * 1024, "decoding it would have built 2 million values")
  -- stats lines in a loop: at most 5 rewrites a second (it was one per line: 5,600 a second)
  for i = 1, 2000 do link:write_stats({ oom_kills = i }) end
  local st = json.decode(seer.read_file(dir .. "/stats.json"))
  T.ok(st.seq <= 2, "stats.json was rewritten " .. st.seq .. " times for 2000 lines in a moment")
end)

T.test("several ssh sandboxes start at once (seer.backends.start_all)", function()
  local n = 3
  local t0 = process.now_ms()
  local seq = {}
  for i = 1, n do seq[i] = start({ timeout = 300 }, "seq" .. i) end
  local t_seq = process.now_ms() - t0
  for _, s in ipairs(seq) do s:terminate() end
  local list = {}
  for i = 1, n do list[i] = env.Sandbox(env.SandboxConfig{ backend = "ssh", ssh = ssh_fields(), execution_mode = "cli", timeout = 300 }) end
  t0 = process.now_ms()
  require("seer.backends").start_all(list, { name = "par" })
  local t_par = process.now_ms() - t0
  local ids = {}
  for i, s in ipairs(list) do
    T.eq(s:exec("echo " .. i), i .. "\n")
    T.ok(s.sandbox_id:match("^par%-" .. i .. "%-"), s.sandbox_id)
    ids[s.remote.id] = true
  end
  local distinct = 0
  for _ in pairs(ids) do distinct = distinct + 1 end
  T.eq(distinct, n)
  io.write(("  (ssh, loopback: %d sandboxes one after another %.0f ms, together %.0f ms)\n"):format(n, t_seq, t_par))
  for _, s in ipairs(list) do s:terminate() end
  -- one that cannot start takes the others down and says which
  local bad = { env.Sandbox(env.SandboxConfig{ backend = "ssh", ssh = ssh_fields(), execution_mode = "cli" }),
                env.Sandbox(env.SandboxConfig{ backend = "ssh", ssh = ssh_fields{ port = 1, connect_timeout = 2 }, execution_mode = "cli" }) }
  T.raises(function() require("seer.backends").start_all(bad) end, "start_all: sandboxes%[2%]: .*ssh to 127.0.0.1 failed")
  T.ok(bad[1].stopped, "the one that started was terminated")
end)

T.test("a script killed with -9 takes its remote sandbox with it", function()
  local s0 = sshd()
  local script = root .. "/owner.lua"
  local f = assert(io.open(script, "w"))
  f:write(([[
local env = require "seer.environment"
local s = env.Sandbox(env.SandboxConfig{ backend = "ssh", execution_mode = "cli", timeout = 300,
  ssh = { host = "127.0.0.1", port = %d, identity_file = %q, known_hosts = %q, remote_dir = %q, remote_state_dir = %q } })
s:start{ name = "orphan" }
io.stdout:write(s.remote.id, " ", s.state_dir, "\n")
io.stdout:flush()
while true do require("seer.process").sleep_ms(1000) end
]]):format(s0.port, s0.dir .. "/client_key", s0.dir .. "/known_hosts", RDIR, RSTATE))
  f:close()
  local p = process.spawn{ argv = { require("seer.jupyter").seer_binary(), script }, stdout = "pipe" }
  local line = p:read_line(30000)
  T.ok(line, "the script started its sandbox")
  local rid, state_dir = line:match("^(%S+) (%S+)$")
  T.ok(exists(RSTATE .. "/" .. rid))
  p:kill(process.SIGKILL)
  p:wait(2000)
  T.ok(wait_gone(rid, 15000))
  local deadline = process.now_ms() + 5000
  while exists(state_dir) and process.now_ms() < deadline do process.sleep_ms(50) end
  T.ok(not exists(state_dir), "the link removed the local folder of a script that is gone")
end)

T.test("seer sandbox list and terminate ID work for an ssh sandbox from another process", function()
  local s = start({ timeout = 300 }, "byid")
  local rid = s.remote.id
  local found
  for _, x in ipairs(require("seer.sandbox").list()) do if x.id == s.sandbox_id then found = x end end
  T.ok(found and found.running, "seer sandbox list shows it")
  local ok, out = sh(("SEER_SANDBOX_DIR=%s %s sandbox terminate %s"):format(root .. "/sb", require("seer.jupyter").seer_binary(), s.sandbox_id))
  T.ok(ok, out)
  T.contains(out, "terminated " .. s.sandbox_id)
  T.ok(wait_gone(rid, 10000))
  local okx, err = pcall(s.exec, s, "true")
  T.ok(not okx)
  T.contains(tostring(err), "has ended")
  s:terminate()
end)

T.test("a hostile remote side: a bad ready line, an endless line, and junk are refused", function()
  sshd()
  -- a fake seer where the real one would be: the remote side is whatever that host runs
  local hash = require("seer.backends.ssh")._bundle().hash
  local fake_dir = root .. "/fake-remote"
  process.mkdir_p(fake_dir .. "/" .. hash)
  local function fake(script)
    local f = assert(io.open(fake_dir .. "/" .. hash .. "/seer", "w"))
    f:write("#!/bin/sh\nread line\n" .. script .. "\n")
    f:close()
    os.execute("chmod 755 " .. fake_dir .. "/" .. hash .. "/seer")
  end
  local function try()
    local ok, err = pcall(function() return start({ ssh = ssh_fields{ remote_dir = fake_dir } }, "hostile") end)
    T.ok(not ok, "start() refused it")
    return tostring(err)
  end
  fake([[echo '{"ready":true,"id":"x-1","key":"aaaaaaaaaaaaaaaaaaaa","run_dir":"/tmp/../etc/x/run"}'; sleep 5]])
  T.contains(try(), "run_dir is not a plain absolute path")
  fake([[echo '{"ready":true,"id":"x-1","key":"aaaaaaaaaaaaaaaaaaaa","run_dir":"/tmp/x/run","models":[{"path":"/etc/shadow"}]}'; sleep 5]])
  T.contains(try(), "is not a path under /models")
  -- a line without end: the link keeps at most 64 KiB of it
  fake([[head -c 50000000 /dev/zero | tr '\0' 'a'; sleep 5]])
  local t0 = process.now_ms()
  T.contains(try(), "answered something unusable")
  T.ok(process.now_ms() - t0 < 30000, "refused without reading it all")
  fake([[echo '{"error":"no bubblewrap here"}']])
  T.contains(try(), "did not start: no bubblewrap here")
  fake([[exit 3]])
  T.contains(try(), "exited with 3")
  T.eq(#(sb.listdir(root .. "/sb") or {}), 0, "no local folder is left behind")
end)

T.test("a dropped connection is reported and ends the remote sandbox", function()
  local s = start({ timeout = 300 }, "drop")
  T.eq(s:exec("echo up"), "up\n")
  local rid = s.remote.id
  local pid = ssh_master(s)
  T.ok(pid, "found the ssh client")
  sb.kill(pid, sb.SIGKILL)
  local err = T.exec_until_fails(s, 10000, { every_ms = 50 })
  T.ok(err, "exec fails after the connection is gone")
  T.contains(tostring(err), "the ssh connection to 127.0.0.1 was lost")
  T.ok(wait_gone(rid, 10000))
  s:terminate()

  -- the server's side of the connection dies (sshd's session process)
  s = start({ timeout = 300 }, "drop2")
  rid = s.remote.id
  T.eq(s:exec("echo up"), "up\n")
  -- the session process of this connection is the parent of remote-start, which the remote
  -- keeper's environment names
  local keeper = procs_with("SEER_SANDBOX_DIR=" .. RSTATE)
  local sshd_child
  for _, p in ipairs(keeper) do
    local f = io.open("/proc/" .. p .. "/stat")
    local ppid = f and tonumber(f:read("*a"):match("^%d+ %b() %S+ (%d+)"))
    if f then f:close() end
    if ppid and cmdline(ppid):match("^sshd") then sshd_child = ppid end
  end
  T.ok(sshd_child, "found sshd's session process")
  sb.kill(sshd_child, sb.SIGKILL)
  err = T.exec_until_fails(s, 15000, { every_ms = 50 })
  T.ok(err, "exec fails after sshd's side is gone")
  T.contains(tostring(err), "has ended")
  T.ok(wait_gone(rid, 10000))
  s:terminate()
end)

T.test("a connection that goes silent is noticed by keepalives; the remote ends when its side does", function()
  -- sshd's session process stopped (SIGSTOP): the TCP connection stays open but nothing answers,
  -- as in a network partition
  local s = start({ timeout = 300 }, "silent")
  local rid = s.remote.id
  T.eq(s:exec("echo up"), "up\n")
  local session_pid
  for _, p in ipairs(procs_with("SEER_SANDBOX_DIR=" .. RSTATE)) do
    local f = io.open("/proc/" .. p .. "/stat")
    local ppid = f and tonumber(f:read("*a"):match("^%d+ %b() %S+ (%d+)"))
    if f then f:close() end
    if ppid and cmdline(ppid):match("^sshd") then session_pid = ppid end
  end
  T.ok(session_pid, "found sshd's session process")
  sb.kill(session_pid, 19) -- SIGSTOP
  local t0 = process.now_ms()
  local deadline = t0 + 20000
  local ok, err
  repeat
    ok, err = pcall(s.exec, s, "true", { timeout = 1 })
    if ok then process.sleep_ms(100) end
  until not ok or process.now_ms() > deadline
  local took = process.now_ms() - t0
  sb.kill(session_pid, 18) -- SIGCONT: the server's side now sees its client gone
  T.ok(not ok, "exec fails once keepalives go unanswered")
  T.contains(tostring(err), "the ssh connection to 127.0.0.1 was lost")
  io.write(("  (keepalive = 1 s: the silent connection was declared lost after %.1f s)\n"):format(took / 1000))
  T.ok(took < 15000, "noticed within a few keepalive intervals")
  T.ok(wait_gone(rid, 15000))
  s:terminate()
end)

T.test("the remote timeout ends the sandbox and says so", function()
  local s = start({ timeout = 2 }, "short")
  local rid = s.remote.id
  T.eq(s:exec("echo up"), "up\n")
  local err = T.exec_until_fails(s, 15000)
  T.ok(err, "exec fails after the timeout")
  T.contains(tostring(err), "timeout of 2 s passed")
  T.ok(wait_gone(rid, 10000))
  s:terminate()
end)

T.test("the TCP stream to the ssh server shows none of what was sent (recorded by a proxy)", function()
  local s0 = sshd()
  local rec = root .. "/rec"
  process.mkdir_p(rec)
  -- ProxyCommand relays ssh's bytes to the server and appends both directions to files.
  local proxy = root .. "/proxy.py"
  local f = assert(io.open(proxy, "w"))
  f:write([[
import os, socket, sys, threading
host, port, rec = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((host, port))
def up():
    with open(rec + "/up.bin", "ab") as out:
        while True:
            d = os.read(0, 65536)
            if not d: break
            out.write(d); out.flush(); s.sendall(d)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
with open(rec + "/down.bin", "ab") as out:
    while True:
        d = s.recv(65536)
        if not d: break
        out.write(d); out.flush(); os.write(1, d)
]])
  f:close()
  local cfg = root .. "/ssh_config"
  f = assert(io.open(cfg, "w"))
  f:write(("Host recorded\n  HostName 127.0.0.1\n  Port %d\n  HostKeyAlias [127.0.0.1]:%d\n  ProxyCommand /usr/bin/python3 %s %%h %%p %s\n")
    :format(s0.port, s0.port, proxy, rec))
  f:close()
  if not exists("/usr/bin/python3") then T.skip("/usr/bin/python3 is needed for the recording proxy") end
  local s = start({ timeout = 300, ssh = ssh_fields{ host = "recorded", config_file = cfg, port = false } }, "rec")
  local marker = "PLAINTEXT-MARKER-" .. ("0123456789abcdef"):rep(4)
  s:write_file("m.txt", marker:rep(100))
  T.eq(s:read_file("m.txt"), marker:rep(100))
  local out = s:exec("cat m.txt | head -c 200; echo " .. marker)
  T.contains(out, marker)
  s:terminate()
  local up = io.open(rec .. "/up.bin", "rb"):read("*a")
  local down = io.open(rec .. "/down.bin", "rb"):read("*a")
  T.ok(#up > 10000 and #down > 10000, ("the proxy saw the traffic (%d bytes up, %d down)"):format(#up, #down))
  T.ok(down:find("SSH-2.0-OpenSSH", 1, true), "control: the recording holds the server's clear-text banner")
  T.ok(not up:find("PLAINTEXT-MARKER", 1, true) and not down:find("PLAINTEXT-MARKER", 1, true), "no payload in clear text")
  T.ok(not up:find("sandboxd", 1, true) and not down:find("exec_request", 1, true), "no protocol text in clear text")
end)

T.test("across a real (virtual) network: a session in another network namespace; a partition is noticed here and ends the sandbox there", function()
  local far = fixture.start_netns(root)
  local fields = { host = far.host, port = far.port, identity_file = far.dir .. "/client_key", known_hosts = far.dir .. "/known_hosts",
                   remote_dir = RDIR, remote_state_dir = RSTATE, keepalive = 1 }
  local s = env.Sandbox(env.SandboxConfig{ backend = "ssh", ssh = fields, execution_mode = "notebook", timeout = 300,
                                           models = { env.ModelConfig{ name = stories } } }):start{ name = "far" }
  local rid = s.remote.id
  -- the remote sandbox runs in the other namespace: the processes of its sandbox share the far
  -- sshd's network namespace's parent chain, not ours (the sandbox itself has its own, inside)
  local _, ours = sh("readlink /proc/self/ns/net")
  local _, sshd_ns = sh("readlink /proc/" .. far.proc.pid .. "/ns/net")
  T.ok(sshd_ns ~= ours, "the far sshd is in another network namespace")
  local found
  for _, pid in ipairs(procs_with("SEER_SANDBOX_ID=" .. rid)) do
    local _, n = sh("readlink /proc/" .. pid .. "/ns/net")
    if n == sshd_ns then found = pid end
    T.ok(n ~= ours, "no process of the remote sandbox is in this namespace")
  end
  T.ok(found, "the remote keeper is in the far namespace")
  local session = exec.create_notebook_session(s, nil, { output_dir = root .. "/nb-far" })
  local res = session:exec("print(model:generate('Once upon a time', { max_new_tokens = 6 }).text)")
  local m = require("seer.model").load(stories)
  T.eq(res.text, m:generate("Once upon a time", { max_new_tokens = 6 }).text .. "\n")
  -- the wire goes down: keepalives go unanswered, the call fails, and the far side's own
  -- keepalives end the remote sandbox there
  far.link(false)
  local t0 = process.now_ms()
  local ok, err
  repeat
    ok, err = pcall(s.exec, s, "true", { timeout = 1 })
    if ok then process.sleep_ms(100) end
  until not ok or process.now_ms() - t0 > 20000
  local took = process.now_ms() - t0
  T.ok(not ok, "exec fails once the network is gone")
  T.contains(tostring(err), "was lost")
  io.write(("  (a real partition (veth down), keepalive = 1 s: noticed after %.1f s)\n"):format(took / 1000))
  -- still partitioned: the far side misses the link's heartbeat and ends the sandbox there by
  -- itself (its sshd would not notice the lost client for hours)
  local t1 = process.now_ms()
  T.ok(wait_gone(rid, 20000))
  io.write(("  (the far side ended the sandbox %.1f s after the partition was noticed here)\n"):format((process.now_ms() - t1) / 1000))
  pcall(session.terminate, session)
  s:terminate()
  far.link(true)
  fixture.stop_netns()
end)

T.test("stop sshd", function() fixture.stop(); fixture.stop_netns() end)
