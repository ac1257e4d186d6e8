-- The slurm backend against a real single-node Slurm: the test starts Debian's slurmctld and
-- slurmd on loopback (its own slurm.conf, ports, state and spool folders; auth/none, which is
-- only acceptable because nothing leaves loopback) and the shared sshd fixture as the node's
-- sshd. It runs a notebook session on stories260K in a job, a job that waits in the queue
-- behind another (the reason is reported), terminate cancelling the job, the sandbox's timeout
-- ending it, a job cancelled from outside and a job preempted by a higher-priority partition
-- (each reported with Slurm's state), and sbatch refusing a bad partition.
local T = require "testing"
local env = require "seer.environment"
local exec = require "seer.execution"
local sb = require "seer.core.sandbox"
local process = require "seer.process"
local seer = require "seer"
local fixture = require "sshd_fixture"

local here = seer.script_dir()
local stories = here .. "/../fixtures/models/stories260K"
local root = T.tmpdir()
local ffi = require "ffi"
pcall(ffi.cdef, "unsigned getuid(void);")
T.private_sandbox_dirs(root)

local RSTATE = root .. "/remote-state"
local RDIR = root .. "/remote-seer"

local function exists(p) return require("seer.safe_fs").lstat(p) ~= nil end
local sh = T.sh

local cluster
local function slurm_up()
  if cluster then return cluster end
  for _, bin in ipairs({ "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch", "/usr/bin/srun" }) do
    if not exists(bin) then T.skip(bin .. " is not installed (make setup installs slurmctld, slurmd and slurm-client)") end
  end
  if ffi.C.getuid() ~= 0 then T.skip("the test's Slurm needs root (slurmd starts job steps as their users)") end
  local s = fixture.start(root)
  local d = root .. "/slurm"
  process.mkdir_p(d .. "/state")
  process.mkdir_p(d .. "/spool")
  local host = (select(2, sh("hostname -s")) or ""):gsub("%s+$", "")
  local mem = 1024
  local f = io.open("/proc/meminfo")
  if f then mem = math.floor(tonumber(f:read("*a"):match("MemTotal:%s*(%d+)")) / 1024 / 2); f:close() end
  local port = 27000 + math.random(0, 3000) * 2
  local conf = d .. "/slurm.conf"
  f = assert(io.open(conf, "w"))
  f:write(([[
ClusterName=seertest
SlurmctldHost=%s(127.0.0.1)
SlurmctldPort=%d
SlurmdPort=%d
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%s/state
SlurmdSpoolDir=%s/spool
SlurmctldPidFile=%s/slurmctld.pid
SlurmdPidFile=%s/slurmd.pid
SlurmctldLogFile=%s/slurmctld.log
SlurmdLogFile=%s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
KillWait=2
NodeName=seernode NodeAddr=127.0.0.1 CPUs=2 RealMemory=%d State=UNKNOWN
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=debug Nodes=seernode Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=seernode MaxTime=INFINITE State=UP PriorityTier=2
]]):format(host, port, port + 1, d, d, d, d, d, d, mem))
  f:close()
  local ctld = process.spawn{ argv = fixture.with_parent({ "/usr/sbin/slurmctld", "-D", "-c", "-f", conf }), stdout = d .. "/ctld.out", stderr = d .. "/ctld.out" }
  local slurmd = process.spawn{ argv = fixture.with_parent({ "/usr/sbin/slurmd", "-D", "-N", "seernode", "-f", conf }), stdout = d .. "/d.out", stderr = d .. "/d.out" }
  cluster = { conf = conf, dir = d, ctld = ctld, slurmd = slurmd, ssh = s }
  local deadline = process.now_ms() + 20000
  while true do
    local _, out = sh("SLURM_CONF=" .. conf .. " sinfo -h -N -o '%N %t'")
    if out:match("seernode idle") then break end
    if process.now_ms() > deadline or not ctld:alive() or not slurmd:alive() then
      local _, log = sh("tail -20 " .. d .. "/slurmctld.log " .. d .. "/slurmd.log " .. d .. "/ctld.out " .. d .. "/d.out")
      error("the test's Slurm did not come up: " .. out .. "\n" .. log)
    end
    process.sleep_ms(200)
  end
  return cluster
end

local function squeue(jobs)
  local _, out = sh(("SLURM_CONF=%s squeue -h -o '%%i %%T %%r'%s"):format(slurm_up().conf, jobs and (" -j " .. jobs) or ""))
  return out
end

local function config(t)
  local c = slurm_up()
  t = t or {}
  t.backend = "slurm"
  local sl = t.slurm or {}
  sl.slurm_conf = c.conf
  sl.ssh = { port = c.ssh.port, identity_file = c.ssh.dir .. "/client_key", known_hosts = c.ssh.dir .. "/known_hosts",
             remote_dir = RDIR, remote_state_dir = RSTATE, keepalive = 1 }
  t.slurm = sl
  if t.execution_mode == nil then t.execution_mode = "cli" end
  return env.SandboxConfig(t)
end

local function job_state(job)
  local _, out = sh(("SLURM_CONF=%s scontrol show job -o %s"):format(slurm_up().conf, job))
  return out:match("JobState=(%S+)"), out:match("Reason=(%S+)")
end

---------------------------------------------------------------------------------------------

T.test("slurm config is checked before anything runs", function()
  T.raises(function() env.SandboxConfig{ backend = "slurm", slurm = { partition = "--wrap=x" } } end, "not a plain value")
  T.raises(function() env.SandboxConfig{ backend = "slurm", slurm = { cpu = 2 } } end, "unknown field cpu; valid fields: account")
  T.raises(function() env.SandboxConfig{ backend = "slurm", slurm = { ssh = { host = "n1" } } } end, "the node is Slurm's to choose")
  T.raises(function() env.SandboxConfig{ backend = "slurm", slurm = { ssh = { port = 0 } } } end, "slurm.ssh.port")
  T.raises(function() env.SandboxConfig{ slurm = {} } end, 'slurm is for backend = "slurm"')
  local c = env.SandboxConfig{ backend = "slurm", gpu = "A100", gpu_count = 2, slurm = { partition = "gpu", account = "lab", cpus = 8, mem = "64G" } }
  T.contains(tostring(c), 'slurm = {account = "lab", cpus = 8, mem = "64G", partition = "gpu", queue_timeout = 86400}')
end)

T.test("a notebook session on stories260K runs in a job that first waits in the queue; terminate cancels it", function()
  local c = slurm_up()
  -- a job that takes both CPUs, so the sandbox's job waits for Resources until it is cancelled
  local _, blocker = sh(("SLURM_CONF=%s sbatch --parsable -c 2 --output=/dev/null --wrap 'sleep 300'"):format(c.conf))
  blocker = blocker:match("(%d+)")
  T.ok(blocker, "the blocking job was submitted")
  local deadline = process.now_ms() + 10000
  while not squeue(blocker):match("RUNNING") and process.now_ms() < deadline do process.sleep_ms(100) end
  os.execute(("(sleep 3; SLURM_CONF=%s scancel %s) >/dev/null 2>&1 &"):format(c.conf, blocker))
  local t0 = process.now_ms()
  local s = env.Sandbox(config{ execution_mode = "notebook", models = { env.ModelConfig{ name = stories } }, timeout = 300,
                                slurm = { cpus = 1 } }):start{ name = "slurmnb" }
  local waited = process.now_ms() - t0
  T.ok(waited >= 2500, ("start() waited for the blocking job (%d ms)"):format(waited))
  T.contains(table.concat(s.queue_history, ","), "Resources")
  local job = s.slurm_job
  T.eq(squeue(job):match("RUNNING") ~= nil, true)
  T.eq(s:exec("echo up"), "up\n")
  local rid = s.remote.id
  -- remote-start runs as a step of the job (srun sets SLURM_JOB_ID for it)
  T.ok(#fixture.procs_with("SLURM_JOB_ID=" .. job .. "\0", "SEER_SANDBOX_DIR=" .. RSTATE) > 0, "the sandbox's keeper runs in the job")
  local session = exec.create_notebook_session(s, require("seer.workspace").Workspace{}, { output_dir = root .. "/nb" })
  local res = session:exec("print(model:generate('Once upon a time', { max_new_tokens = 6 }).text)")
  local m = require("seer.model").load(stories)
  T.eq(res.text, m:generate("Once upon a time", { max_new_tokens = 6 }).text .. "\n")
  session:terminate()
  s:terminate()
  T.ok(fixture.wait_gone(RSTATE, rid, 5000))
  local state = job_state(job)
  T.ok(state == "CANCELLED" or state == "COMPLETED", "the job ended: " .. tostring(state))
  T.eq(squeue(job):match("RUNNING"), nil)
end)

T.test("the sandbox's timeout ends it, and its job with it", function()
  local t0 = process.now_ms()
  local s = env.Sandbox(config{ timeout = 2 }):start{ name = "slurmshort" }
  local job, rid = s.slurm_job, s.remote.id
  T.eq(s:exec("echo up"), "up\n")
  io.write(("  (slurm, loopback: start() with sbatch, an idle node and seer already there, to the first answered exec %.0f ms)\n")
    :format(process.now_ms() - t0))
  local err = T.exec_until_fails(s, 15000)
  T.ok(err, "exec fails after the timeout")
  T.contains(tostring(err), "timeout of 2 s passed")
  T.contains(tostring(err), "(Slurm job " .. job .. ": ")
  T.ok(fixture.wait_gone(RSTATE, rid, 10000))
  -- the link cancelled the job without terminate() being called
  local deadline = process.now_ms() + 10000
  local state = job_state(job)
  while state == "RUNNING" and process.now_ms() < deadline do process.sleep_ms(100); state = job_state(job) end
  T.ok(state ~= "RUNNING", "the job is no longer running: " .. tostring(state))
  s:terminate()
end)

T.test("a job cancelled from outside is reported with Slurm's state", function()
  local c = slurm_up()
  local s = env.Sandbox(config{ timeout = 300 }):start{ name = "slurmcancel" }
  local job, rid = s.slurm_job, s.remote.id
  T.eq(s:exec("echo up"), "up\n")
  sh(("SLURM_CONF=%s scancel %s"):format(c.conf, job))
  local err = T.exec_until_fails(s, 15000)
  T.ok(err, "exec fails once the job is cancelled")
  T.contains(tostring(err), "(Slurm job " .. job .. ": CANCELLED")
  -- Slurm kills every process of the step (the keeper too), so nothing runs; the state folder
  -- may stay on the node, and is swept there by `seer sandbox list`, as after a kill -9 locally
  local deadline2 = process.now_ms() + 10000
  while #fixture.procs_with("SEER_SANDBOX_ID=" .. rid) > 0 and process.now_ms() < deadline2 do process.sleep_ms(50) end
  T.eq(#fixture.procs_with("SEER_SANDBOX_ID=" .. rid), 0, "no process of the sandbox is left")
  local ok2, out = sh(("SEER_SANDBOX_DIR=%s %s sandbox list"):format(RSTATE, require("seer.jupyter").seer_binary()))
  T.ok(ok2, out)
  T.ok(fixture.wait_gone(RSTATE, rid, 1000))
  s:terminate()
end)

T.test("a job preempted by a higher-priority partition's job is reported with Slurm's state", function()
  local c = slurm_up()
  local s = env.Sandbox(config{ timeout = 300, slurm = { cpus = 2 } }):start{ name = "slurmpreempt" }
  local job, rid = s.slurm_job, s.remote.id
  T.eq(s:exec("echo up"), "up\n")
  -- a job of the urgent partition wants the whole node: Slurm preempts (PreemptMode=CANCEL) ours
  local okb, urgent = sh(("SLURM_CONF=%s sbatch --parsable -p urgent -c 2 -o /dev/null --wrap 'sleep 20'"):format(c.conf))
  T.ok(okb, urgent)
  urgent = urgent:match("(%d+)")
  local err = T.exec_until_fails(s, 30000)
  T.ok(err, "exec fails once the job is preempted")
  T.contains(tostring(err), "(Slurm job " .. job .. ": PREEMPTED")
  local deadline2 = process.now_ms() + 10000
  while #fixture.procs_with("SEER_SANDBOX_ID=" .. rid) > 0 and process.now_ms() < deadline2 do process.sleep_ms(50) end
  T.eq(#fixture.procs_with("SEER_SANDBOX_ID=" .. rid), 0, "no process of the sandbox is left")
  s:terminate()
  sh(("SLURM_CONF=%s scancel %s"):format(c.conf, urgent))
end)

T.test("Slurm's own time limit ends the job and the sandbox, and says so (long: make test-remote)", function()
  if os.getenv("SEER_TEST_LONG") ~= "1" then
    T.skip("takes 1-2 minutes (a one-minute job time limit); make test-remote runs it (SEER_TEST_LONG=1)")
  end
  local s = env.Sandbox(config{ timeout = 600, slurm = { time = 1 } }):start{ name = "slurmlimit" }
  local job, rid = s.slurm_job, s.remote.id
  T.eq(s:exec("echo up"), "up\n")
  local t0 = process.now_ms()
  local err = T.exec_until_fails(s, 180000, { every_ms = 500 })
  T.ok(err, "exec fails once the job's time limit passed")
  io.write(("  (the job's one-minute limit ended the sandbox after %.0f s)\n"):format((process.now_ms() - t0) / 1000))
  T.contains(tostring(err), "(Slurm job " .. job .. ": TIMEOUT")
  local d2 = process.now_ms() + 10000
  while #fixture.procs_with("SEER_SANDBOX_ID=" .. rid) > 0 and process.now_ms() < d2 do process.sleep_ms(50) end
  T.eq(#fixture.procs_with("SEER_SANDBOX_ID=" .. rid), 0, "no process of the sandbox is left")
  s:terminate()
end)

T.test("sbatch refusing the job fails start() with its message", function()
  slurm_up()
  T.raises(function() env.Sandbox(config{ slurm = { partition = "nosuch" } }):start() end, "sbatch refused the job")
  T.raises(function() env.Sandbox(config{ slurm = { partition = "nosuch" } }):start() end, "nvalid partition")
end)

T.test("stop slurm and sshd", function()
  if cluster then
    cluster.slurmd:stop(3000)
    cluster.ctld:stop(3000)
  end
  fixture.stop()
end)
