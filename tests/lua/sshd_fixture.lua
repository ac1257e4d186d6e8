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

local sh = T.sh

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

-- sshd with its config in d, listening on listen:port, started through prefix (argv before
-- sshd: a network namespace's `ip netns exec NS`). Returns the process once it listens, or nil.
local function launch(d, listen, port, prefix)
  local f = assert(io.open(d .. "/sshd_config", "w"))
  f:write(([[
Port %d
ListenAddress %s
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
]]):format(port, listen, d, d, d))
  f:close()
  local argv = {}
  for _, x in ipairs(prefix or {}) do argv[#argv + 1] = x end
  for _, x in ipairs({ SSHD, "-D", "-e", "-f", d .. "/sshd_config" }) do argv[#argv + 1] = x end
  local p = process.spawn{ argv = M.with_parent(argv), stdout = d .. "/sshd.log", stderr = d .. "/sshd.log" }
  local deadline = process.now_ms() + 5000
  while process.now_ms() < deadline and p:alive() do
    local f2 = io.open(d .. "/sshd.log")
    local log = f2 and f2:read("*a") or ""
    if f2 then f2:close() end
    if log:find("Server listening", 1, true) then
      local hk = io.open(d .. "/host_key.pub"):read("*a")
      local kh = assert(io.open(d .. "/known_hosts", "w"))
      kh:write(port == 22 and ("%s %s"):format(listen, hk) or ("[%s]:%d %s"):format(listen, port, hk))
      kh:close()
      return p
    end
    process.sleep_ms(20)
  end
  p:stop(500)
  return nil
end

local function keys(d)
  process.mkdir_p(d)
  assert(sh(("ssh-keygen -q -t ed25519 -N '' -f %s/host_key && ssh-keygen -q -t ed25519 -N '' -f %s/client_key && cp %s/client_key.pub %s/authorized_keys"):format(d, d, d, d)))
  if ffi.C.getuid() == 0 then process.mkdir_p("/run/sshd") end -- privilege separation's empty folder
end

local server
function M.start(root)
  if server then return server end
  if not exists(SSHD) then T.skip("openssh-server is not installed (make setup installs it: apt-get install openssh-server)") end
  if os.execute("command -v bwrap >/dev/null 2>&1") ~= 0 then T.skip("bubblewrap is not installed (make setup installs it)") end
  local d = root .. "/ssh"
  keys(d)
  for _ = 1, 20 do
    local port = 20000 + math.random(0, 30000)
    local p = launch(d, "127.0.0.1", port)
    if p then server = { proc = p, port = port, dir = d, host = "127.0.0.1" }; break end
  end
  if not server then error("could not start sshd on loopback; its log:\n" .. (io.open(d .. "/sshd.log"):read("*a"))) end
  return server
end

-- A second host on a real (virtual) network: a network namespace joined to this one by a veth
-- pair (10.<a>.<b>.1 here, .2 there), with sshd listening on port 22 of the far address. The
-- far side shares this machine's files and users (only the network is its own), so the remote
-- sandbox runs there as it would on another machine and every byte between the two crosses
-- the veth. `link(false)` takes the wire down (a partition), `link(true)` brings it back.
-- Needs root and iproute2; skips otherwise.
local far
function M.start_netns(root)
  if far then return far end
  if not exists(SSHD) then T.skip("openssh-server is not installed (make setup installs it: apt-get install openssh-server)") end
  if ffi.C.getuid() ~= 0 or not exists("/usr/sbin/ip") and not exists("/sbin/ip") then
    T.skip("a network namespace needs root and iproute2 (ip)")
  end
  local key = require("seer.net").new_key():gsub("[^%x]", "")
  local tag = key:sub(1, 4)
  local ns, vh, vn = "seer-t-" .. tag, "sv" .. tag .. "h", "sv" .. tag .. "n"
  local a, b = 16 + tonumber(key:sub(5, 5), 16), tonumber(key:sub(6, 7), 16)
  local here_ip, far_ip = ("10.%d.%d.1"):format(a, b), ("10.%d.%d.2"):format(a, b)
  local ok, out = sh(table.concat({
    "ip netns add " .. ns,
    ("ip link add %s type veth peer name %s"):format(vh, vn),
    ("ip link set %s netns %s"):format(vn, ns),
    ("ip addr add %s/30 dev %s"):format(here_ip, vh), ("ip link set %s up"):format(vh),
    ("ip -n %s addr add %s/30 dev %s"):format(ns, far_ip, vn), ("ip -n %s link set %s up"):format(ns, vn),
    ("ip -n %s link set lo up"):format(ns),
  }, " && "))
  if not ok then
    sh("ip netns del " .. ns .. "; ip link del " .. vh)
    T.skip("cannot make a network namespace here: " .. out:gsub("%s+$", ""):sub(1, 300))
  end
  local d = root .. "/ssh-far"
  keys(d)
  local p = launch(d, far_ip, 22, { "ip", "netns", "exec", ns })
  if not p then
    local log = io.open(d .. "/sshd.log"):read("*a")
    sh("ip netns del " .. ns .. "; ip link del " .. vh)
    error("could not start sshd in the network namespace; its log:\n" .. log)
  end
  far = { proc = p, port = 22, dir = d, host = far_ip, ns = ns, veth = vh }
  function far.link(up) return sh(("ip link set %s %s"):format(vh, up and "up" or "down")) end
  return far
end

function M.stop_netns()
  if not far then return end
  far.proc:stop(1000)
  sh("ip netns del " .. far.ns .. "; ip link del " .. far.veth .. " 2>/dev/null")
  far = nil
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
