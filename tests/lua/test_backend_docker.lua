-- The docker backend against a real docker daemon: the test starts its own dockerd (Debian's
-- docker.io; private socket and data root, vfs storage, no iptables), imports a root
-- filesystem made on this machine as the base image (no registry is reachable), and the backend
-- builds its image from a generated Containerfile on top. Then: exec, a notebook session on
-- stories260K in the container, what the container may do (no --privileged), terminate
-- removing the container, the timeout, and a container removed from outside (reported).
local T = require "testing"
local env = require "seer.environment"
local exec = require "seer.execution"
local process = require "seer.process"
local seer = require "seer"
local C = require "container_fixture"

local here = seer.script_dir()
local stories = here .. "/../fixtures/models/stories260K"
local root = T.tmpdir()
T.private_sandbox_dirs(root)
local sh, exists = C.sh, C.exists

local BASE = "seer-test-rootfs:1"
local host
local function base()
  if host then return host end
  if os.execute("command -v bwrap >/dev/null 2>&1") ~= 0 then T.skip("bubblewrap is not installed (make setup installs it)") end
  local h = C.dockerd(root)
  local ok, out = sh(("docker --host %s import %s %s"):format(h, C.rootfs_tar(root), BASE))
  T.ok(ok, out)
  local okr, o2 = sh(("docker --host %s run --rm --network none %s /bin/sh -c true"):format(h, BASE))
  if not okr then T.skip("docker cannot run even a trivial container on this machine: " .. o2:gsub("%s+$", ""):sub(1, 300)) end
  host = h
  return h
end

local function config(t)
  local h = base()
  t = t or {}
  t.backend = "docker"
  t.docker = { base_image = BASE, host = h }
  if t.execution_mode == nil then t.execution_mode = "cli" end
  return env.SandboxConfig(t)
end

local function containers()
  local _, out = sh(("docker --host %s ps -a --format '{{.Names}}'"):format(host))
  return out
end

---------------------------------------------------------------------------------------------

T.test("docker config is checked before anything runs", function()
  T.raises(function() env.SandboxConfig{ backend = "docker" } end, "docker.base_image is required")
  T.raises(function() env.SandboxConfig{ backend = "docker", docker = { base_image = "--privileged" } } end, "not a plain name")
  T.raises(function() env.SandboxConfig{ backend = "docker", docker = { base_image = "a", imag = "b" } } end, "unknown field imag; valid fields: base_image")
  T.raises(function() env.SandboxConfig{ backend = "docker", docker = { base_image = "a", host = "-H evil" } } end, "not a daemon address")
  T.raises(function() env.SandboxConfig{ backend = "docker", docker = { base_image = "a", runtime = "runc --x" } } end, "not a plain name")
  T.raises(function() env.SandboxConfig{ docker = { base_image = "a" } } end, 'docker is for backend = "docker"')
  T.raises(function() env.SandboxConfig{ backend = "docker", podman = { base_image = "a" } } end, 'podman is for backend = "podman"')
  -- no daemon answers: said before any container is made
  local c = env.SandboxConfig{ backend = "docker", execution_mode = "cli", docker = { base_image = "x:1", host = "unix://" .. root .. "/none.sock" } }
  T.raises(function() env.Sandbox(c):start{ name = "nodaemon" } end, "no docker daemon answers at unix://")
end)

T.test("GPUs map to each engine's own flags (recorded by a stand-in engine program: there is no GPU here)", function()
  -- a stand-in for the engine: says every image exists, records the run's arguments, refuses it
  local fake = root .. "/fake-engine"
  local rec = root .. "/fake-engine.args"
  local f = assert(io.open(fake, "w"))
  f:write(("#!/bin/sh\ncase \"$*\" in *' run '*|run*) printf '%%s\\n' \"$@\" > %s; echo 'no GPU here' >&2; exit 125;; esac\nexit 0\n"):format(rec))
  f:close()
  os.execute("chmod 755 " .. fake)
  local function args_of(t)
    os.remove(rec)
    local c = env.SandboxConfig(t)
    T.raises(function() env.Sandbox(c):start{ name = "gpu" } end, "")
    local rf = io.open(rec)
    local text = rf and rf:read("*a") or ""
    if rf then rf:close() end
    return "\n" .. text
  end
  local a = args_of{ backend = "docker", execution_mode = "cli", gpu = "H100", gpu_count = 2, docker = { base_image = "x:1", docker = fake } }
  T.contains(a, "\n--gpus\n2\n")
  a = args_of{ backend = "docker", execution_mode = "cli", gpu = "H100", docker = { base_image = "x:1", docker = fake, gpus = "device=1,3", runtime = "runsc" } }
  T.contains(a, "\n--gpus\ndevice=1,3\n")
  T.contains(a, "\n--runtime\nrunsc\n")
  a = args_of{ backend = "docker", execution_mode = "cli", docker = { base_image = "x:1", docker = fake } }
  T.ok(not a:find("--gpus", 1, true), "no GPU asked, none given")
  a = args_of{ backend = "podman", execution_mode = "cli", gpu = "A100", gpu_count = 2, podman = { base_image = "x:1", podman = fake } }
  T.contains(a, "\n--device\nnvidia.com/gpu=0\n--device\nnvidia.com/gpu=1\n")
  a = args_of{ backend = "podman", execution_mode = "cli", gpu = "A100", podman = { base_image = "x:1", podman = fake, gpus = "nvidia.com/gpu=all" } }
  T.contains(a, "\n--device\nnvidia.com/gpu=all\n")
  -- and never --privileged
  T.ok(not a:find("--privileged", 1, true))
end)

T.test("a notebook session on stories260K runs in a docker container built here; terminate removes it", function()
  local t0 = process.now_ms()
  local s = env.Sandbox(config{ execution_mode = "notebook", models = { env.ModelConfig{ name = stories } }, timeout = 300 })
    :start{ name = "docknb" }
  T.eq(s:exec("echo up; id -u; ls /models"), "up\n65534\nstories260K\n")
  io.write(("  (docker: start() to the first answered exec %.0f ms, image build included when it was new)\n"):format(process.now_ms() - t0))
  local cid = s.container.name
  T.contains(containers(), cid)
  -- the container is not privileged: no capability beyond the list the backend names
  local _, inspect = sh(("docker --host %s inspect --format '{{.HostConfig.Privileged}} {{.HostConfig.CapDrop}}' %s"):format(host, cid))
  T.contains(inspect, "false [ALL]")
  local W = require "seer.workspace"
  local session = exec.create_notebook_session(s, W.Workspace{ libraries = { W.Library.from_code("dock_lib", "return 7") } },
    { output_dir = root .. "/nb" })
  local res = session:exec("print(model:generate('Once upon a time', { max_new_tokens = 6 }).text); print(require('dock_lib'))")
  local m = require("seer.model").load(stories)
  T.eq(res.text, m:generate("Once upon a time", { max_new_tokens = 6 }).text .. "\n7\n")
  session:terminate()
  local state_dir = s.state_dir
  s:terminate()
  T.ok(not containers():find(cid, 1, true), "the container is gone")
  T.ok(not exists(state_dir), "the local state folder (and the container's state in it) is gone")
  t0 = process.now_ms()
  s = env.Sandbox(config{ timeout = 300 }):start{ name = "dockagain" }
  T.eq(s:exec("echo again"), "again\n")
  io.write(("  (docker: start() to the first answered exec with the image built %.0f ms)\n"):format(process.now_ms() - t0))
  s:terminate()
end)

T.test("the docker container's sandbox keeps its own walls: its user, seccomp, loopback only, no state volume", function()
  local s = env.Sandbox(config{ timeout = 300 }):start{ name = "dockwalls" }
  -- the sandbox inside the container has its own user, filter and network: seccomp in filter
  -- mode with no_new_privs, only loopback, and of the container's state volume (sandboxd's
  -- keys and state, at /seer-state in the container) only its own run folder
  local status = s:exec("cat /proc/self/status")
  T.ok(status:find("\nSeccomp:%s+2\n") and status:find("\nNoNewPrivs:%s+1\n"), status)
  T.ok(status:find("\nUid:%s+65534%s"), status)
  local net = s:exec("cat /proc/net/dev")
  T.ok(not net:find("eth0", 1, true) and net:find("lo:", 1, true), net)
  -- (the sandbox's own run folder is bound at its path there, as locally; nothing beside it)
  local listing = s:exec("ls -a /seer-state/*/")
  T.eq(listing, ".\n..\nrun\n")
  s:terminate()
end)

T.test("several docker sandboxes start at once (seer.backends.start_all)", function()
  local t0 = process.now_ms()
  local list = {}
  for i = 1, 3 do list[i] = env.Sandbox(config{ timeout = 300 }) end
  require("seer.backends").start_all(list, { name = "dockmany" })
  for i, s in ipairs(list) do T.eq(s:exec("echo " .. i), i .. "\n") end
  local together = process.now_ms() - t0
  local names = {}
  for _, s in ipairs(list) do names[#names + 1] = s.container.name; s:terminate() end
  local ps = containers()
  for _, n in ipairs(names) do T.ok(not ps:find(n, 1, true), n .. " removed") end
  io.write(("  (docker: 3 sandboxes started together, each answering exec: %.0f ms)\n"):format(together))
end)

T.test("the timeout ends the container's sandbox; a container removed from outside is reported", function()
  C.timeout_and_removal(config, containers, function(name) sh(("docker --host %s rm --force %s"):format(host, name)) end, "dock")
end)

T.test("stop the test's docker daemon", function() C.stop_dockerd() end)
