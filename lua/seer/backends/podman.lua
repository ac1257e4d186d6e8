--- seer.backends.podman: a sandbox in a container on this machine (docs/backends.md). The
--- image is built from a generated Containerfile: a base image you name (a root filesystem with
--- the libraries seer needs and bubblewrap), seer and the Lua tree, tagged by their hash. The
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
---@field podman? string the podman (or docker) program (default "podman")
---@field runtime? string OCI runtime (--runtime), e.g. "runc" where crun cannot run
---@field gpus? string CDI device for GPUs (e.g. "nvidia.com/gpu=all"); default from SandboxConfig.gpu: nvidia.com/gpu=all
---@field start_timeout? number seconds for the container's sandbox to start (default 300)

M.FIELDS = { base_image = "string", podman = "string", runtime = "string", gpus = "string", start_timeout = "number" }

local function sorted(t)
  local k = {}
  for name in pairs(t) do k[#k + 1] = name end
  table.sort(k)
  return k
end

---Checks SandboxConfig.podman; returns the normalized table, or nil and what is wrong.
---@param t any
---@return table|nil podman, string|nil why
function M.check_config(t)
  if type(t) ~= "table" then return nil, 'podman must be a table: podman = {base_image = "localhost/my-rootfs:1"}' end
  for k, v in pairs(t) do
    local want = M.FIELDS[k]
    if not want then return nil, ("podman: unknown field %s; valid fields: %s"):format(tostring(k), table.concat(sorted(M.FIELDS), ", ")) end
    if type(v) ~= want then return nil, ("podman.%s must be a %s, not a %s"):format(k, want, type(v)) end
  end
  local p = {}
  for k, v in pairs(t) do p[k] = v end
  if not p.base_image then return nil, 'podman.base_image is required (an image with bubblewrap and seer\'s libraries, e.g. "debian:12" with them installed)' end
  for _, k in ipairs({ "base_image", "runtime", "gpus" }) do
    if p[k] and (not p[k]:match("^[%w][%w._:/@=+-]*$") or #p[k] > 255) then return nil, ("podman.%s %q is not a plain name"):format(k, p[k]) end
  end
  if p.podman and (p.podman:find("%c") or p.podman == "" or p.podman:sub(1, 1) == "-") then return nil, "podman.podman is not a program" end
  if p.start_timeout and p.start_timeout <= 0 then return nil, "podman.start_timeout must be a positive number of seconds" end
  p.podman = p.podman or "podman"
  p.start_timeout = p.start_timeout or 300
  return p
end

local function say(text)
  if require("ffi").C.isatty(2) == 1 then io.stderr:write("seer: ", text, "\n") end
end

-- `podman [--runtime R] args...`
local function pod(p, args)
  local a = { p.podman }
  if p.runtime then a[#a + 1] = "--runtime"; a[#a + 1] = p.runtime end
  for _, x in ipairs(args) do a[#a + 1] = x end
  return a
end

-- The image: base + seer + the Lua tree, tagged by the bundle's hash and the base's name, built
-- once (podman build with a generated Containerfile).
local function ensure_image(p)
  local b = ssh._bundle()
  local tag_hash = b.hash:sub(1, 16) .. (p.base_image:gsub("[^%w]", ""):sub(1, 24))
  local tag = "localhost/seer-sandbox:" .. tag_hash:lower()
  local code = ssh._run(pod(p, { "image", "exists", tag }), { timeout_ms = 60000 })
  if code == 0 then return tag end
  if code == nil then error(("SandboxConfig{backend = \"podman\"}: %s is not installed (Debian: apt-get install podman)"):format(p.podman), 0) end
  local ctx = process.mkdtemp("/tmp/seer-image-")
  local ok, err = pcall(function()
    local c2, _, e2 = ssh._run({ "/bin/sh", "-c", b.tar_cmd .. " | tar -x -C " .. "'" .. ctx .. "'" })
    if c2 ~= 0 then error("unpacking seer for the image failed: " .. tostring(e2), 0) end
    local f = assert(io.open(ctx .. "/Containerfile", "w"))
    -- seer finds its Lua tree beside the binary (lua/)
    f:write(("FROM %s\nCOPY seer /opt/seer/bin/seer\nCOPY lua /opt/seer/bin/lua\n"):format(p.base_image))
    f:close()
    say(("building the image %s from %s"):format(tag, p.base_image))
    local c3, out, e3 = ssh._run(pod(p, { "build", "--quiet", "--tag", tag, "--file", ctx .. "/Containerfile", ctx }), { timeout_ms = 1800000 })
    if c3 ~= 0 then error(("podman build failed (exit %s): %s"):format(tostring(c3), ((e3 or "") .. (out or "")):sub(-3000)), 0) end
  end)
  ssh._run({ "rm", "-rf", "--", ctx })
  if not ok then error("SandboxConfig{backend = \"podman\"}: " .. tostring(err), 0) end
  return tag
end

-- The container's limits: ulimits no higher than this process's (a container runtime refuses to
-- raise them), processes as the sandbox's limit.
local function ulimits(c)
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

---Builds the image when needed, runs the container, and connects (through the ssh backend's
---link, with `podman run -i` as its transport).
---@param self table the seer.sandbox Sandbox (config.backend == "podman")
---@param opts {name?: string}
function M.start(self, opts)
  local c = self.config
  local p = c.podman
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
  self.container = { name = cid, podman = p }
  local argv = pod(p, { "run", "--interactive", "--rm", "--name", cid,
    -- bubblewrap inside needs to make namespaces and mount /proc: the container is packaging,
    -- the sandbox inside it is the isolation (docs/backends.md, Containers)
    "--privileged",
    "--network", c.network == "host" and "host" or "none",
    "--env", "SEER_SANDBOX_DIR=/seer-state", "--volume", shared .. ":/seer-state" })
  for _, x in ipairs(ulimits(c)) do argv[#argv + 1] = x end
  -- models that are local folders are mounted read-only at the same path
  for _, m in ipairs(c.models) do
    for _, name in ipairs({ m.name, m.base_model }) do
      local real = type(name) == "string" and core.realpath(name)
      local st = real and safe_fs.lstat(real)
      if st and st.type == "dir" then argv[#argv + 1] = "--volume"; argv[#argv + 1] = real .. ":" .. real .. ":ro" end
    end
  end
  if c.gpu then argv[#argv + 1] = "--device"; argv[#argv + 1] = p.gpus or "nvidia.com/gpu=all" end
  argv[#argv + 1] = "--entrypoint"
  argv[#argv + 1] = "/opt/seer/bin/seer"
  argv[#argv + 1] = tag
  argv[#argv + 1] = "sandbox"
  argv[#argv + 1] = "remote-start"
  local sshf = ssh.check_config({ host = "podman", start_timeout = p.start_timeout })
  local ok, err = pcall(ssh.start, self, opts, {
    ssh = sshf, id = id, real_model_paths = true,
    transport = { argv = argv, map = { "/seer-state", shared }, label = "the podman container " .. cid },
    on_end = pod(p, { "rm", "--force", "--ignore", cid }),
  })
  if not ok then error(err, 0) end
  self.remote.host = "container " .. cid
  return self
end

function M.ended(self) return ssh.ended(self) end

---Stops the sandbox and the container (seer.sandbox then removes the local state folder).
---@param self table
function M.teardown(self)
  if self.link then ssh.teardown(self) end
  local k = self.container
  if k then ssh._run(pod(k.podman, { "rm", "--force", "--ignore", k.name }), { timeout_ms = 30000 }) end
end

M.sync_workspace = ssh.sync_workspace

return M
