-- A real OpenSSH server on loopback for the remote backends' tests (not a test file itself):
-- Debian's sshd on a random high port with its own host key and an authorized_keys holding a
-- key made here, run as the user running the tests. `start(dir)` returns {proc, port, dir} or
-- skips the test when sshd or bubblewrap is missing.
local T = require "testing"
local process = require "seer.process"
local sb = require "seer.core.sandbox"
local ffi = require "ffi"
pcall(ffi.cdef, "unsigned getuid(void);")
local M = {}
local SSHD = "/usr/sbin/sshd"

-- Runs a shell command: whether it exited 0, and its output (stdout and stderr).
local function sh(cmd)
  local p = io.popen("(" .. cmd .. ") 2>&1; echo \"seer-rc=$?\"")
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("seer%-rc=(%d+)\n?$"))
  return rc == 0, (out:gsub("seer%-rc=%d+\n?$", ""))
end

local function exists(p) return require("seer.safe_fs").lstat(p) ~= nil end

-- One sshd for the whole file, started on first use.
-- argv run so that it is killed when this test process ends, however it ends (a filtered or
-- failed run never reaches the test that stops it): setpriv --pdeathsig.
function M.with_parent(argv)
  if not exists("/usr/bin/setpriv") then return argv end
  local a = { "/usr/bin/setpriv", "--pdeathsig", "KILL", "--" }
  for _, x in ipairs(argv) do a[#a + 1] = x end
  return a
end

local server
function M.start(root)
  if server then return server end
  if not exists(SSHD) then T.skip("openssh-server is not installed (make setup installs it: apt-get install openssh-server)") end
  if os.execute("command -v bwrap >/dev/null 2>&1") ~= 0 then T.skip("bubblewrap is not installed (make setup installs it)") end
  local d = root .. "/ssh"
  process.mkdir_p(d)
  assert(sh(("ssh-keygen -q -t ed25519 -N '' -f %s/host_key && ssh-keygen -q -t ed25519 -N '' -f %s/client_key && cp %s/client_key.pub %s/authorized_keys"):format(d, d, d, d)))
  if ffi.C.getuid() == 0 then process.mkdir_p("/run/sshd") end -- privilege separation's empty folder
  local port
  for _ = 1, 20 do
    port = 20000 + math.random(0, 30000)
    local f = assert(io.open(d .. "/sshd_config", "w"))
    f:write(([[
Port %d
ListenAddress 127.0.0.1
HostKey %s/host_key
AuthorizedKeysFile %s/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
PidFile %s/sshd.pid
AllowStreamLocalForwarding yes
AllowTcpForwarding local
X11Forwarding no
PrintMotd no
]]):format(port, d, d, d))
    f:close()
    local p = process.spawn{ argv = M.with_parent({ SSHD, "-D", "-e", "-f", d .. "/sshd_config" }), stdout = d .. "/sshd.log", stderr = d .. "/sshd.log" }
    local deadline = process.now_ms() + 5000
    local up = false
    while process.now_ms() < deadline and p:alive() do
      local f2 = io.open(d .. "/sshd.log")
      local log = f2 and f2:read("*a") or ""
      if f2 then f2:close() end
      if log:find("Server listening", 1, true) then up = true; break end
      process.sleep_ms(20)
    end
    if up then
      local hk = io.open(d .. "/host_key.pub"):read("*a")
      local kh = assert(io.open(d .. "/known_hosts", "w"))
      kh:write(("[127.0.0.1]:%d %s"):format(port, hk))
      kh:close()
      server = { proc = p, port = port, dir = d }
      break
    end
    p:stop(500)
  end
  if not server then error("could not start sshd on loopback; its log:\n" .. (io.open(d .. "/sshd.log"):read("*a"))) end
  return server
end


function M.stop() if server then server.proc:stop(1000); server = nil end end

-- pids of processes whose environment holds `marker` (the remote keeper, bwrap and everything
-- in the sandbox carry SEER_SANDBOX_DIR or SEER_SANDBOX_ID).
function M.procs_with(marker, marker2)
  local found = {}
  for _, e in ipairs(sb.listdir("/proc")) do
    if e.name:match("^%d+$") then
      local f = io.open("/proc/" .. e.name .. "/environ", "rb")
      local text = f and f:read("*a")
      if f then f:close() end
      if text and text:find(marker, 1, true) and (not marker2 or text:find(marker2, 1, true)) then found[#found + 1] = tonumber(e.name) end
    end
  end
  return found
end

-- Waits until nothing of remote sandbox rid is left in rstate and among the processes.
function M.wait_gone(rstate, rid, ms)
  local deadline = process.now_ms() + (ms or 10000)
  local names, pids
  repeat
    names, pids = {}, M.procs_with("SEER_SANDBOX_ID=" .. rid)
    for _, e in ipairs(sb.listdir(rstate) or {}) do if e.name == rid then names[#names + 1] = e.name end end
    if #names == 0 and #pids == 0 then return true end
    process.sleep_ms(50)
  until process.now_ms() > deadline
  return false, ("left on the remote: folders {%s}, processes {%s}"):format(table.concat(names, ","), table.concat(pids, ","))
end

return M
