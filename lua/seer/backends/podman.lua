--- seer.backends.podman: a sandbox in a container on this machine (docs/backends.md), run by
--- podman or by docker (seer.backends.docker is this module's docker flavour). The image is
--- built from a generated Containerfile: a base image you name (a root filesystem with the
--- libraries seer needs and bubblewrap), seer and the Lua tree, tagged by their hash. The
--- container's command is `seer sandbox remote-start` (its stdin and stdout are the protocol the
--- ssh backend speaks over ssh), so inside it an ordinary local sandbox runs — bubblewrap,
--- seccomp, sandboxd — with the container as packaging. Its state folder is a volume of this
--- machine: sandboxd's and the kernels' unix sockets are reached there, no network involved.
---@class seerbackends.podman
local M = {}

local ssh = require "seer.backends.ssh"
local process = require "seer.process"
local core = require "seer.core.host"
local safe_fs = require "seer.safe_fs"

---SandboxConfig.podman (docs/backends.md).
---@class seerbackends.podman.Config
---@field base_image string the image seer is added to (needs bubblewrap, a shell, tar, and seer's shared libraries)
---@field podman? string the podman program (default "podman")
---@field runtime? string OCI runtime (--runtime), e.g. "runc" where crun cannot run
---@field gpus? string CDI device for GPUs (e.g. "nvidia.com/gpu=all"); default from SandboxConfig.gpu / gpu_count
---@field start_timeout? number seconds for the container's sandbox to start (default 300)

---SandboxConfig.docker (docs/backends.md).
---@class seerbackends.docker.Config
---@field base_image string the image seer is added to (needs bubblewrap, a shell, tar, and seer's shared libraries)
---@field docker? string the docker program (default "docker")
---@field host? string the daemon's socket (`docker --host`, e.g. "unix:///run/user/1000/docker.sock"); default DOCKER_HOST or docker's own default
---@field runtime? string OCI runtime (--runtime), e.g. "runsc" (gVisor) or "runc"
---@field gpus? string `docker run --gpus` value (e.g. "all", "device=0,1"); default from SandboxConfig.gpu / gpu_count
---@field start_timeout? number seconds for the container's sandbox to start (default 300)

-- What differs between the two engines. Both run the container without --privileged where they
-- can: the sandbox inside needs user namespaces, mount and its own seccomp filter, which the
-- engines' default seccomp profile and masked /proc paths refuse (docs/backends.md, Containers).
local FLAVOURS = {
  podman = {
    fields = { base_image = "string", podman = "string", runtime = "string", gpus = "string", start_timeout = "number" },
    example = 'podman = {base_image = "localhost/my-rootfs:1"}',
    image_exists = function(tag) return { "image", "exists", tag } end,
    rm = function(name) return { "rm", "--force", "--ignore", name } end,
    gpu_args = function(p, c)
      if p.gpus then return { "--device", p.gpus } end
      if c.gpu_count and c.gpu_count > 0 then
        local a = {}
        for i = 0, c.gpu_count - 1 do a[#a + 1] = "--device"; a[#a + 1] = "nvidia.com/gpu=" .. i end
        return a
      end
      return { "--device", "nvidia.com/gpu=all" }
    end,
    install = "apt-get install podman",
  },
  docker = {
    fields = { base_image = "string", docker = "string", host = "string", runtime = "string", gpus = "string", start_timeout = "number" },
    example = 'docker = {base_image = "my-rootfs:1"}',
    image_exists = function(tag) return { "image", "inspect", "--format", "{{.Id}}", tag } end,
    rm = function(name) return { "rm", "--force", name } end,
    gpu_args = function(p, c)
      if p.gpus then return { "--gpus", p.gpus } end
      if c.gpu_count and c.gpu_count > 0 then return { "--gpus", tostring(math.floor(c.gpu_count)) } end
      return { "--gpus", "all" }
    end,
    install = "apt-get install docker.io, and a running dockerd",
  },
}


-- The container's isolation options: what the sandbox inside needs, and no more. Not
-- --privileged: that hands the container every capability and the host's devices (and docker
-- refuses it outright where the host lacks a capability, as this machine lacks SYS_RESOURCE).
-- seccomp=unconfined: the engine's default profile refuses the unshare and mount calls
-- bubblewrap makes; sandboxd installs its own, stricter filter inside. systempaths=unconfined:
-- the engine masks parts of /proc, and a kernel refuses a new /proc mount over a masked one.
-- apparmor=unconfined, label=disable: where those LSMs confine containers, the same.
-- Capabilities: SETUID, SETGID and SETFCAP to map the sandbox's user (65534) in bubblewrap's
-- user namespace; KILL to signal its processes; DAC_OVERRIDE, FOWNER and CHOWN for the keeper
-- to manage (and remove) files the sandbox's user made. No SYS_ADMIN, no NET_ADMIN.
local ISOLATION = { "--security-opt", "seccomp=unconfined", "--security-opt", "systempaths=unconfined",
                    "--security-opt", "apparmor=unconfined", "--security-opt", "label=disable",
                    "--cap-drop", "ALL", "--cap-add", "SETUID", "--cap-add", "SETGID", "--cap-add", "SETFCAP",
                    "--cap-add", "KILL", "--cap-add", "DAC_OVERRIDE", "--cap-add", "FOWNER", "--cap-add", "CHOWN" }
M.ISOLATION = ISOLATION

---Makes the backend module of one engine ("podman" or "docker").
---@param kind "podman"|"docker"
---@return table
function M.flavour(kind)
  local F = assert(FLAVOURS[kind], kind)
  local B = { FIELDS = F.fields, kind = kind }
  local label = ('SandboxConfig{backend = "%s"}'):format(kind)

  ---Checks SandboxConfig.<kind>; returns the normalized table, or nil and what is wrong.
  function B.check_config(t)
    local p, why = ssh.check_fields(kind, t, F.fields, F.example)
    if not p then return nil, why end
    if not p.base_image then
      return nil, ("%s.base_image is required (an image with bubblewrap and seer's libraries, e.g. \"debian:12\" with them installed)"):format(kind)
    end
    for _, k in ipairs({ "base_image", "runtime", "gpus" }) do
      if p[k] and (not p[k]:match("^[%w][%w._:/@=+,-]*$") or #p[k] > 255) then return nil, ("%s.%s %q is not a plain name"):format(kind, k, p[k]) end
    end
    if p.host and (not p.host:match("^[%w+]+://[%w._:/@%[%]-]+$") or #p.host > 1024) then
      return nil, ("%s.host %q is not a daemon address (unix:///path/docker.sock, tcp://host:2376, ssh://user@host)"):format(kind, p.host)
    end
    if p[kind] and (p[kind]:find("%c") or p[kind] == "" or p[kind]:sub(1, 1) == "-") then return nil, ("%s.%s is not a program"):format(kind, kind) end
    if p.start_timeout and p.start_timeout <= 0 then return nil, ("%s.start_timeout must be a positive number of seconds"):format(kind) end
    p[kind] = p[kind] or kind
    p.start_timeout = p.start_timeout or 300
    return p
  end

  -- `<engine> [--host H] [--runtime R] args...` (--runtime is podman's global option; docker's
  -- is a `run` option, added there)
  local function cmd(p, args)
    local a = { p[kind] }
    if p.host then a[#a + 1] = "--host"; a[#a + 1] = p.host end
    if kind == "podman" and p.runtime then a[#a + 1] = "--runtime"; a[#a + 1] = p.runtime end
    for _, x in ipairs(args) do a[#a + 1] = x end
    return a
  end
  B._cmd = cmd

  -- The image: base + seer + the Lua tree, tagged by the bundle's hash and the base's name, built
  -- once (<engine> build with a generated Containerfile).
  local function ensure_image(p)
    local b = ssh._bundle()
    local tag_hash = b.hash:sub(1, 16) .. (p.base_image:gsub("[^%w]", ""):sub(1, 24))
    local tag = (kind == "podman" and "localhost/" or "") .. "seer-sandbox:" .. tag_hash:lower()
    local code, _, e0 = ssh._run(cmd(p, F.image_exists(tag)), { timeout_ms = 60000 })
    if code == 0 then return tag end
    if code == nil then error(("%s: %s is not installed (Debian: %s)"):format(label, p[kind], F.install), 0) end
    if kind == "docker" and (e0 or ""):find("Cannot connect to the Docker daemon", 1, true) then
      error(("%s: no docker daemon answers%s: %s (start dockerd, or set docker.host)"):format(label,
        p.host and (" at " .. p.host) or "", (e0 or ""):gsub("%s+$", ""):sub(1, 300)), 0)
    end
    local ctx = process.mkdtemp("/tmp/seer-image-")
    local ok, err = pcall(function()
      local c2, _, e2 = ssh._run({ "/bin/sh", "-c", b.tar_cmd .. " | tar -x -C " .. "'" .. ctx .. "'" })
      if c2 ~= 0 then error("unpacking seer for the image failed: " .. tostring(e2), 0) end
      local f = assert(io.open(ctx .. "/Containerfile", "w"))
      -- seer finds its Lua tree beside the binary (lua/)
      f:write(("FROM %s\nCOPY seer /opt/seer/bin/seer\nCOPY lua /opt/seer/bin/lua\n"):format(p.base_image))
      f:close()
      ssh.say(("building the image %s from %s"):format(tag, p.base_image))
      local c3, out, e3 = ssh._run(cmd(p, { "build", "--quiet", "--tag", tag, "--file", ctx .. "/Containerfile", ctx }), { timeout_ms = 1800000 })
      if c3 ~= 0 then error(("%s build failed (exit %s): %s"):format(kind, tostring(c3), ((e3 or "") .. (out or "")):sub(-3000)), 0) end
    end)
    ssh._run({ "rm", "-rf", "--", ctx })
    if not ok then error(label .. ": " .. tostring(err), 0) end
    return tag
  end

  ---Builds the image when needed, runs the container, and connects (through the ssh backend's
  ---link, with `<engine> run -i` as its transport).
  ---@param self table the seer.sandbox Sandbox (config.backend == kind)
  ---@param opts {name?: string}
  function B.start(self, opts)
    local c = self.config
    local p = c[kind]
    local tag = ensure_image(p)
    -- The container's state folder is a folder of the sandbox's own local state folder, so it
    -- goes with it (terminate, or the link when the script is gone).
    local S = require "seer.sandbox"
    local name = (opts.name or "sandbox"):gsub("[^%w_.-]", "-"):gsub("^[.-]+", ""):sub(1, 40)
    local id = (name ~= "" and name or "sandbox") .. "-" .. require("seer.net").new_key():gsub("[^%x]", ""):sub(1, 6)
    local cid = "seer-" .. id
    local shared = S.state_root() .. "/" .. id .. "/c"
    process.mkdir_p(shared)
    require("ffi").C.chmod(S.state_root() .. "/" .. id, tonumber("700", 8))
    self.container = { name = cid, engine = p, kind = kind }
    local argv = cmd(p, { "run", "--interactive", "--rm", "--name", cid,
      "--network", c.network == "host" and "host" or "none",
      "--env", "SEER_SANDBOX_DIR=/seer-state", "--volume", shared .. ":/seer-state" })
    if kind == "docker" and p.runtime then argv[#argv + 1] = "--runtime"; argv[#argv + 1] = p.runtime end
    for _, x in ipairs(ISOLATION) do argv[#argv + 1] = x end
    for _, x in ipairs(M.ulimits(c)) do argv[#argv + 1] = x end
    -- models that are local folders are mounted read-only at the same path
    for _, m in ipairs(c.models) do
      for _, mname in ipairs({ m.name, m.base_model }) do
        local real = type(mname) == "string" and core.realpath(mname)
        local st = real and safe_fs.lstat(real)
        if st and st.type == "dir" then argv[#argv + 1] = "--volume"; argv[#argv + 1] = real .. ":" .. real .. ":ro" end
      end
    end
    if c.gpu then for _, x in ipairs(F.gpu_args(p, c)) do argv[#argv + 1] = x end end
    for _, x in ipairs({ "--entrypoint", "/opt/seer/bin/seer", tag, "sandbox", "remote-start" }) do argv[#argv + 1] = x end
    local sshf = ssh.check_config({ host = kind, start_timeout = p.start_timeout })
    local ok, err = pcall(ssh.start, self, opts, {
      ssh = sshf, id = id, real_model_paths = true,
      transport = { argv = argv, map = { "/seer-state", shared }, label = ("the %s container %s"):format(kind, cid) },
      on_end = cmd(p, F.rm(cid)),
    })
    if not ok then error(err, 0) end
    self.remote.host = "container " .. cid
    return self
  end

  function B.ended(self) return ssh.ended(self) end

  ---Stops the sandbox and the container (seer.sandbox then removes the local state folder).
  ---@param self table
  function B.teardown(self)
    if self.link then ssh.teardown(self) end
    local k = self.container
    if k then ssh._run(cmd(k.engine, F.rm(k.name)), { timeout_ms = 30000 }) end
  end

  B.sync_workspace = ssh.sync_workspace
  return B
end

-- The container's limits: ulimits no higher than this process's (a container runtime refuses to
-- raise them), processes as the sandbox's limit.
function M.ulimits(c)
  local nofile = 65536
  local f = io.open("/proc/self/limits")
  if f then
    local text = f:read("*a")
    f:close()
    local soft = tonumber(text:match("Max open files%s+(%d+)"))
    if soft then nofile = math.min(nofile, soft) end
  end
  local nproc = math.floor(c.limits.processes or 4096)
  return { "--ulimit", ("nofile=%d:%d"):format(nofile, nofile), "--ulimit", ("nproc=%d:%d"):format(nproc, nproc) }
end

local P = M.flavour("podman")
for k, v in pairs(P) do M[k] = v end
return M
