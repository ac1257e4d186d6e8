-- The container backends' test fixture (not a test file itself): a root filesystem made on this
-- machine (seer's shared libraries, bubblewrap, a shell and a few tools, copied with their ldd
-- closure; no registry is reachable here), as a tar an engine imports as the base image, and
-- a private docker daemon for test_backend_docker.lua.
local T = require "testing"
local process = require "seer.process"
local M = {}

M.exists, M.sh = T.exists, T.sh
local exists, sh = T.exists, T.sh

---The root filesystem as a tar under root; returns its path.
function M.rootfs_tar(root)
  local tar = root .. "/rootfs.tar"
  if exists(tar) then return tar end
  local r = root .. "/rootfs"
  local bins = { "/usr/bin/bwrap", "/bin/dash", "/bin/echo", "/bin/cat", "/bin/ls", "/bin/chmod", "/bin/mkdir", "/bin/rm",
                 "/usr/bin/id", "/bin/true", "/bin/sleep", "/usr/bin/env", "/bin/tar", "/bin/gzip", "/usr/bin/head", "/bin/kill",
                 require("seer.jupyter").seer_binary() }
  for _, d in ipairs({ "/bin", "/usr/bin", "/lib64", "/etc", "/tmp", "/proc", "/dev", "/sys", "/run", "/root" }) do process.mkdir_p(r .. d) end
  for _, b in ipairs(bins) do
    assert(sh(("cp -L %s %s/usr/bin/"):format(b, r)))
    local _, libs = sh("ldd " .. b)
    for lib in libs:gmatch("(/[^%s]+%.so[^%s]*)") do
      process.mkdir_p(r .. lib:match("^(.*)/"))
      if not exists(r .. lib) then assert(sh(("cp -L %s %s%s"):format(lib, r, lib))) end
    end
  end
  assert(sh(("ln -sf ../usr/bin/dash %s/bin/sh"):format(r)))
  local ok, out = sh(("tar -C %s -cf %s ."):format(r, tar))
  T.ok(ok, out)
  return tar
end

---A private docker daemon (its own socket, data root and exec root under dir; no iptables, no
---bridge, the vfs storage driver, which needs nothing of the host's filesystem), killed when
---this test process ends. Returns its address for `docker --host`, or skips with the reason.
function M.dockerd(dir)
  if M.docker_host then return M.docker_host end
  if not exists("/usr/sbin/dockerd") then T.skip("dockerd is not installed (make setup installs it: apt-get install docker.io)") end
  if not exists("/usr/bin/docker") and not exists("/usr/local/bin/docker") then T.skip("the docker CLI is not installed") end
  local ffi = require "ffi"
  pcall(ffi.cdef, "unsigned getuid(void);")
  if ffi.C.getuid() ~= 0 then T.skip("dockerd needs root here (rootless docker is not set up on this machine)") end
  local d = dir .. "/docker"
  process.mkdir_p(d)
  local sock = "unix://" .. d .. "/docker.sock"
  local argv = { "/usr/sbin/dockerd", "--host", sock, "--data-root", d .. "/data", "--exec-root", d .. "/exec",
                 "--pidfile", d .. "/docker.pid", "--iptables=false", "--ip6tables=false", "--bridge=none",
                 "--storage-driver=vfs" }
  local a = exists("/usr/bin/setpriv") and { "/usr/bin/setpriv", "--pdeathsig", "KILL", "--" } or {}
  for _, x in ipairs(argv) do a[#a + 1] = x end
  M.docker_proc = process.spawn{ argv = a, stdout = d .. "/dockerd.log", stderr = d .. "/dockerd.log" }
  local deadline = process.now_ms() + 30000
  while process.now_ms() < deadline do
    if sh("docker --host " .. sock .. " version --format '{{.Server.Version}}'") then
      M.docker_host, M.docker_dir = sock, d
      return sock
    end
    process.sleep_ms(200)
  end
  local _, log = sh("tail -5 " .. d .. "/dockerd.log")
  T.skip("dockerd did not start on this machine: " .. log:gsub("%s+$", ""):sub(-400))
end

---Stops the private daemon (its containers first) and removes its folder.
function M.stop_dockerd()
  if not M.docker_host then return end
  sh(("docker --host %s ps -aq | xargs -r docker --host %s rm -f"):format(M.docker_host, M.docker_host))
  M.docker_proc:stop(10000)
  sh("rm -rf " .. M.docker_dir)
  M.docker_host = nil
end

---The test both container backends run: the sandbox's timeout ends the sandbox and the
---container; a container removed from outside is reported. config(t) makes a SandboxConfig,
---containers() lists the engine's container names, remove(name) removes one from outside.
function M.timeout_and_removal(config, containers, remove, prefix)
  local s = require("seer.environment").Sandbox(config{ timeout = 2 }):start{ name = prefix .. "short" }
  local cid = s.container.name
  T.eq(s:exec("echo up"), "up\n")
  local err = T.exec_until_fails(s, 15000)
  T.ok(err, "exec fails after the timeout")
  T.contains(tostring(err), "timeout of 2 s passed")
  local deadline = process.now_ms() + 10000
  while containers():find(cid, 1, true) and process.now_ms() < deadline do process.sleep_ms(100) end
  T.ok(not containers():find(cid, 1, true), "the container ended with its sandbox")
  s:terminate()

  s = require("seer.environment").Sandbox(config{ timeout = 300 }):start{ name = prefix .. "kill" }
  cid = s.container.name
  T.eq(s:exec("echo up"), "up\n")
  remove(cid)
  err = T.exec_until_fails(s, 15000)
  T.ok(err, "exec fails once the container is gone")
  T.contains(tostring(err), "has ended")
  s:terminate()
  T.ok(not containers():find(cid, 1, true))
end

return M
