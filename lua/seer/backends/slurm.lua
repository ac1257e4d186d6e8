--- seer.backends.slurm: a sandbox in a Slurm job (docs/backends.md). `start()` submits a job
--- that holds the allocation (resources from the config, the time limit from `timeout`), waits
--- while it is queued (saying why, on a terminal, and in `sandbox.queue_history`), then reaches
--- the job's node with the ssh backend and runs remote-start as a step of the job
--- (`srun --jobid=N --overlap`), so the sandbox lives in the job's allocation (its CPUs, memory,
--- GPUs) and Slurm's limits apply to it. `terminate` cancels the job; a job that fails, is
--- cancelled or preempted is reported with Slurm's state and reason.
---
--- sbatch, squeue, scontrol and scancel run on this machine (a login node, or any machine with
--- the Slurm client configured); the nodes need sshd (docs/backends.md, SSH) and srun.
---@class seerbackends.slurm
local M = {}

local ssh = require "seer.backends.ssh"
local process = require "seer.process"
local sb = require "seer.core.sandbox"
local core = require "seer.core.host"

---SandboxConfig.slurm (docs/backends.md).
---@class seerbackends.slurm.Config
---@field partition? string
---@field account? string
---@field qos? string
---@field constraint? string
---@field cpus? integer --cpus-per-task
---@field mem? string --mem, e.g. "16G"
---@field gres? string --gres as written; default from SandboxConfig.gpu/gpu_count: gpu:<gpu, lower case>:<gpu_count>
---@field job_name? string default seer-<sandbox name>
---@field slurm_conf? string SLURM_CONF for the Slurm commands here and srun on the node
---@field queue_timeout? number seconds to wait in the queue before giving up (default 86400)
---@field time? integer the job's --time in minutes (default: the sandbox's timeout in minutes, rounded up, plus one)
---@field ssh? table how to reach the nodes: the ssh backend's fields without host (port, user, identity_file, known_hosts, ...)

M.FIELDS = {
  partition = "string", account = "string", qos = "string", constraint = "string", cpus = "number", mem = "string",
  gres = "string", job_name = "string", slurm_conf = "string", queue_timeout = "number", ssh = "table", time = "number",
}


-- Values that reach sbatch's command line (never a shell): plain words, never an option.
local function plain(v) return #v > 0 and #v <= 200 and v:match("^[%w][%w._:,=+/@%-]*$") ~= nil end

---Checks SandboxConfig.slurm; returns the normalized table, or nil and what is wrong.
---@param t any
---@return table|nil slurm, string|nil why
function M.check_config(t)
  local s, why = ssh.check_fields("slurm", t, M.FIELDS, 'slurm = {partition = "gpu", ssh = {user = "me"}}')
  if not s then return nil, why end
  for _, k in ipairs({ "partition", "account", "qos", "constraint", "mem", "gres", "job_name" }) do
    if s[k] and not plain(s[k]) then return nil, ("slurm.%s %q is not a plain value (letters, digits, . _ : , = + / @ -)"):format(k, s[k]) end
  end
  if s.cpus and (s.cpus ~= math.floor(s.cpus) or s.cpus < 1) then return nil, "slurm.cpus must be a positive integer" end
  if s.time and (s.time ~= math.floor(s.time) or s.time < 1) then return nil, "slurm.time must be a positive whole number of minutes" end
  if s.queue_timeout and s.queue_timeout <= 0 then return nil, "slurm.queue_timeout must be a positive number of seconds" end
  if s.slurm_conf and (s.slurm_conf:find("%c") or s.slurm_conf == "") then return nil, "slurm.slurm_conf is not a path" end
  local sshf = {}
  for k, v in pairs(s.ssh or {}) do sshf[k] = v end
  if sshf.host ~= nil then return nil, "slurm.ssh.host: the node is Slurm's to choose; leave host out" end
  sshf.host = "node"
  local checked, why = ssh.check_config(sshf)
  if not checked then return nil, "slurm." .. why end
  checked.host = nil
  s.ssh = checked
  s.queue_timeout = s.queue_timeout or 86400
  return s
end

local function env_of(s) return s.slurm_conf and { SLURM_CONF = s.slurm_conf } or nil end

-- Runs a Slurm command here: code, stdout, stderr.
local function slurm(s, argv, timeout_ms)
  local full = argv
  if s.slurm_conf then full = { "env", "SLURM_CONF=" .. s.slurm_conf }; for _, a in ipairs(argv) do full[#full + 1] = a end end
  local code, out, err = ssh._run(full, { timeout_ms = timeout_ms or 30000 })
  if code == nil then
    error(("%s: cannot run it (%s); the slurm backend needs the Slurm client commands on this machine (Debian: slurm-client)"):format(argv[1], tostring(err)), 0)
  end
  return code, out, err
end

---The job's state, reason and node list as squeue and scontrol say (nil when Slurm has
---forgotten it).
---@param s table SandboxConfig.slurm
---@param job string
---@return {state: string, reason: string, nodes: string}|nil
function M.job_state(s, job)
  local code, out = slurm(s, { "squeue", "-h", "-j", job, "-o", "%T|%r|%N" })
  local st, reason, nodes = (code == 0 and out or ""):match("^([%w_]+)|([^|\n]*)|([^|\n]*)")
  if st then return { state = st, reason = reason, nodes = nodes } end
  -- finished jobs leave squeue; scontrol remembers them for MinJobAge
  code, out = slurm(s, { "scontrol", "show", "job", "-o", job })
  if code ~= 0 then return nil end
  st = out:match("JobState=([%w_]+)")
  if not st then return nil end
  return { state = st, reason = out:match("Reason=(%S+)") or "None", nodes = out:match(" NodeList=(%S+)") or "",
           exit = out:match("ExitCode=(%S+)") }
end

local say = ssh.say

---Submits the job, waits for it to run, and starts the sandbox in it.
---@param self table the seer.sandbox Sandbox (config.backend == "slurm")
---@param opts {name?: string}
function M.start(self, opts)
  local c = self.config
  local s = c.slurm
  local name = s.job_name or ("seer-" .. ((opts.name or "sandbox"):gsub("[^%w_.-]", "-")))
  -- The job holds the allocation; the sandbox is a step in it (srun --overlap below). Its
  -- time limit is the sandbox's timeout in whole minutes, plus one for start and teardown; the
  -- sandbox's own keeper ends it at `timeout` to the second.
  local minutes = s.time or (math.ceil(c.timeout / 60) + 1)
  local argv = { "sbatch", "--parsable", "--job-name=" .. name, "--time=" .. minutes, "--nodes=1", "--ntasks=1",
                 "--output=/dev/null", "--error=/dev/null" }
  if s.partition then argv[#argv + 1] = "--partition=" .. s.partition end
  if s.account then argv[#argv + 1] = "--account=" .. s.account end
  if s.qos then argv[#argv + 1] = "--qos=" .. s.qos end
  if s.constraint then argv[#argv + 1] = "--constraint=" .. s.constraint end
  if s.cpus then argv[#argv + 1] = "--cpus-per-task=" .. math.floor(s.cpus) end
  if s.mem then argv[#argv + 1] = "--mem=" .. s.mem end
  local gres = s.gres or (c.gpu and ("gpu:%s:%d"):format(c.gpu:lower():gsub("[^%w_.-]", ""), c.gpu_count))
  if gres then argv[#argv + 1] = "--gres=" .. gres end
  argv[#argv + 1] = "--wrap=exec sleep " .. (minutes * 60 + 60)
  local code, out, err = slurm(s, argv)
  local job = code == 0 and out:match("^(%d+)")
  if not job then
    error(("SandboxConfig{backend = \"slurm\"}: sbatch refused the job (exit %s): %s"):format(tostring(code),
      ((err or "") .. (out or "")):gsub("%s+$", ""):sub(1, 2000)), 0)
  end
  self.slurm_job = job
  self.queue_history = {}
  -- Queued: say why whenever the reason changes.
  local deadline = process.now_ms() + s.queue_timeout * 1000
  local last, node
  while true do
    local st = M.job_state(s, job)
    if not st then error(("Slurm job %s vanished from the queue (squeue and scontrol no longer know it)"):format(job), 0) end
    if st.state == "RUNNING" then node = st.nodes; break end
    if st.state == "PENDING" or st.state == "CONFIGURING" then
      local line = ("Slurm job %s is %s (%s)"):format(job, st.state:lower(), st.reason)
      if line ~= last then
        last = line
        self.queue_history[#self.queue_history + 1] = st.reason
        say(line)
      end
    else
      error(("Slurm job %s ended before it ran: %s (reason: %s)"):format(job, st.state, st.reason), 0)
    end
    if process.now_ms() > deadline then
      slurm(s, { "scancel", job })
      error(("Slurm job %s waited %d s in the queue (%s); cancelled (slurm.queue_timeout)"):format(job, s.queue_timeout, st.reason), 0)
    end
    if core.interrupted() then slurm(s, { "scancel", job }); error("interrupted", 0) end
    ssh.wait_fd(-1, 500)
  end
  -- The node's address as Slurm knows it.
  local code2, nout = slurm(s, { "scontrol", "show", "node", "-o", node })
  local addr = code2 == 0 and nout:match("NodeAddr=(%S+)") or node
  if not addr:match("^[%w][%w._:-]*$") or #addr > 253 then error(("Slurm node %q has no usable address"):format(node), 0) end
  local sshf = {}
  for k, v in pairs(s.ssh) do sshf[k] = v end
  sshf.host = addr
  say(("Slurm job %s runs on %s; starting the sandbox there"):format(job, node))
  -- The link cancels the job when the sandbox ends, however it ends (terminate, the script's
  -- death, the timeout, a lost connection), so no allocation outlives its sandbox.
  local cancel = { "scancel", job }
  if s.slurm_conf then cancel = { "env", "SLURM_CONF=" .. s.slurm_conf, "scancel", job } end
  ssh.start(self, opts, { ssh = sshf, env = env_of(s), on_end = cancel,
                         wrap = { "srun", "--jobid=" .. job, "--overlap", "--nodes=1", "--ntasks=1", "--quiet" } })
  self.remote.slurm_job = job
  return self
end

---Why the sandbox is no longer usable (with the job's state), or nil while it is.
---@param self table
---@return string|nil
function M.ended(self)
  local why = ssh.ended(self)
  if why and self.slurm_job and not self.slurm_said then
    local ok, st = pcall(M.job_state, self.config.slurm, self.slurm_job)
    -- the step can end before the job does (preemption, scancel): a job still RUNNING or
    -- COMPLETING gets up to 5 s to reach the state that says why
    local deadline = process.now_ms() + 5000
    while ok and st and (st.state == "COMPLETING" or st.state == "RUNNING") and process.now_ms() < deadline do
      process.sleep_ms(200)
      ok, st = pcall(M.job_state, self.config.slurm, self.slurm_job)
    end
    if ok and st then
      self.slurm_said = (" (Slurm job %s: %s, reason %s)"):format(self.slurm_job, st.state, st.reason)
    end
  end
  return why and (why .. (self.slurm_said or "")) or nil
end

---Stops the sandbox, then cancels the job and waits (bounded) until Slurm has let it go.
---@param self table
function M.teardown(self)
  if self.link then ssh.teardown(self) end
  local s, job = self.config.slurm, self.slurm_job
  if not job then return end
  pcall(slurm, s, { "scancel", job })
  local deadline = process.now_ms() + 10000
  while process.now_ms() < deadline do
    local ok, st = pcall(M.job_state, s, job)
    if not ok or not st or (st.state ~= "RUNNING" and st.state ~= "PENDING" and st.state ~= "COMPLETING" and st.state ~= "CONFIGURING") then break end
    process.sleep_ms(100)
  end
end

M.sync_workspace = ssh.sync_workspace

return M
