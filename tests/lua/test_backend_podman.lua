-- The podman backend against real podman: the test makes a root filesystem on this machine
-- (container_fixture.lua: seer's shared libraries, bubblewrap, a shell and a few tools, copied
-- with their ldd closure; no registry is reachable), imports it as the base image, and the backend builds its
-- image from a generated Containerfile on top. Then: exec, a notebook session on stories260K in
-- the container, terminate removing the container, the timeout, and a container killed from
-- outside (reported).
local T = require "testing"
local env = require "seer.environment"
local exec = require "seer.execution"
local process = require "seer.process"
local seer = require "seer"

local here = seer.script_dir()
local stories = here .. "/../fixtures/models/stories260K"
local root = T.tmpdir()
T.private_sandbox_dirs(root)

local C = require "container_fixture"
local sh, exists = C.sh, C.exists

local BASE = "localhost/seer-test-rootfs:1"
local base_ready, runtime
-- The base image: a root filesystem of this machine's binaries and their libraries.
local function base()
  if base_ready then return runtime end
  if not exists("/usr/bin/podman") then T.skip("podman is not installed (make setup installs it)") end
  local ok, out = sh(("podman import %s %s"):format(C.rootfs_tar(root), BASE))
  T.ok(ok, out)
  -- crun refuses hosts with hybrid cgroups (as here); runc runs there
  local okr = sh(("podman run --rm --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 %s /bin/sh -c true"):format(BASE))
  if not okr then
    local okc, o2 = sh(("podman --runtime runc run --rm --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 %s /bin/sh -c true"):format(BASE))
    if not okc then
      -- the machine, not seer: say exactly why and skip (the backend itself fails loudly the same way)
      T.skip("podman cannot run even a trivial container on this machine (crun, then runc): " .. o2:gsub("%s+$", ""):sub(1, 300))
    end
    runtime = "runc"
  end
  base_ready = true
  return runtime
end

local function config(t)
  local rt = base()
  t = t or {}
  t.backend = "podman"
  t.podman = { base_image = BASE, runtime = rt }
  if t.execution_mode == nil then t.execution_mode = "cli" end
  return env.SandboxConfig(t)
end

local function containers()
  local _, out = sh("podman ps -a --format '{{.Names}}'")
  return out
end

---------------------------------------------------------------------------------------------

T.test("podman config is checked before anything runs", function()
  T.raises(function() env.SandboxConfig{ backend = "podman" } end, "podman.base_image is required")
  T.raises(function() env.SandboxConfig{ backend = "podman", podman = { base_image = "--privileged" } } end, "not a plain name")
  T.raises(function() env.SandboxConfig{ backend = "podman", podman = { base_image = "a", imag = "b" } } end, "unknown field imag; valid fields: base_image")
  T.raises(function() env.SandboxConfig{ podman = { base_image = "a" } } end, 'podman is for backend = "podman"')
end)

T.test("a notebook session on stories260K runs in a container built here; terminate removes it", function()
  local t0 = process.now_ms()
  local s = env.Sandbox(config{ execution_mode = "notebook", models = { env.ModelConfig{ name = stories } }, timeout = 300 })
    :start{ name = "podnb" }
  T.eq(s:exec("echo up; id -u; ls /models"), "up\n65534\nstories260K\n")
  io.write(("  (podman: start() to the first answered exec %.0f ms, image build included when it was new)\n"):format(process.now_ms() - t0))
  local cid = s.container.name
  T.contains(containers(), cid)
  -- not privileged: every capability dropped but the few the backend names
  local _, inspect = sh(("podman inspect --format '{{.HostConfig.Privileged}} {{.EffectiveCaps}}' %s"):format(cid))
  T.eq(inspect, "false [CAP_CHOWN CAP_DAC_OVERRIDE CAP_FOWNER CAP_KILL CAP_SETFCAP CAP_SETGID CAP_SETUID]\n")
  local W = require "seer.workspace"
  local session = exec.create_notebook_session(s, W.Workspace{ libraries = { W.Library.from_code("pod_lib", "return 5") } },
    { output_dir = root .. "/nb" })
  local res = session:exec("print(model:generate('Once upon a time', { max_new_tokens = 6 }).text); print(require('pod_lib'))")
  local m = require("seer.model").load(stories)
  T.eq(res.text, m:generate("Once upon a time", { max_new_tokens = 6 }).text .. "\n5\n")
  T.raises(function() session:exec("os.execute('kill -9 0')") end, "KernelDied")
  session:terminate()
  local state_dir = s.state_dir
  s:terminate()
  T.ok(not containers():find(cid, 1, true), "the container is gone")
  T.ok(not exists(state_dir), "the local state folder (and the container's state in it) is gone")
  -- a second start reuses the image
  t0 = process.now_ms()
  s = env.Sandbox(config{ timeout = 300 }):start{ name = "podagain" }
  T.eq(s:exec("echo again"), "again\n")
  io.write(("  (podman: start() to the first answered exec with the image built %.0f ms)\n"):format(process.now_ms() - t0))
  s:terminate()
end)

T.test("the timeout ends the container's sandbox; a container removed from outside is reported", function()
  C.timeout_and_removal(config, containers, function(name) sh("podman rm --force " .. name) end, "pod")
end)

T.test("remove the test's images", function()
  if not base_ready then return end
  local _, out = sh("podman images --format '{{.Repository}}:{{.Tag}}'")
  for img in out:gmatch("[^\n]+") do
    if img:match("^localhost/seer%-sandbox:.*seertestrootfs1$") then sh("podman rmi --force " .. img) end
  end
  sh("podman rmi --force " .. BASE)
end)
