-- The kernel-channel fuzz target (issue 18, class 5): a real bubblewrap sandbox with two notebook
-- sessions on one notebook server, a bystander and a hostile one. A cell of the hostile session
-- exec()s its kernel into tests/fuzz/kernel_peer.lua (same pid: sandboxd sees nothing), which
-- takes over the kernel's endpoints and key and sends N malformed messages on the channels the
-- host reads, answering the host's requests correctly in between. Meanwhile the bystander runs
-- cells and each one must give the right output; the server's memory is sampled throughout.
--   make fuzz-kernel [FUZZ_KERNEL_N=100000]        the full run
--   tests/lua/test_fuzz_kernel.lua                 a short one in make test
local M = {}

local env = require "seer.environment"
local execution = require "seer.execution"
local process = require "seer.process"
local ffi = require "ffi"
pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite); int getpid(void);")

local here = (seer.script_dir and seer.script_dir()) or "tests/fuzz"

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- The notebook server this process started: the `seer notebook serve` child of this pid.
local function server_pid()
  local me = tostring(ffi.C.getpid())
  local p = io.popen("ls /proc")
  for name in p:lines() do
    if name:match("^%d+$") then
      local cmd = read("/proc/" .. name .. "/cmdline") or ""
      local st = read("/proc/" .. name .. "/stat") or ""
      local ppid = st:match("^%d+ %b() %S+ (%d+)")
      if ppid == me and cmd:find("notebook\0serve", 1, true) then p:close() return tonumber(name) end
    end
  end
  p:close()
end

local function rss_kb(pid)
  local s = read("/proc/" .. pid .. "/status") or ""
  return tonumber(s:match("VmRSS:%s*(%d+)")) or 0
end

-- The cell that turns the kernel into the peer: it finds its own request's msg_id (the header
-- the kernel's handler got) and the connection file (the kernel's -f argument), then execs.
local function exec_cell(peer_code, n, seed)
  return ([[
local ffi = require "ffi"
pcall(ffi.cdef, "int execv(const char *p, char *const argv[]); int setenv(const char *n, const char *v, int o);")
local id
for level = 1, 60 do
  if not debug.getinfo(level, "f") then break end
  for i = 1, 12 do
    local name, v = debug.getlocal(level, i)
    if not name then break end
    if type(v) == "string" and v:find('"msg_type":"execute_request"', 1, true) then id = v:match('"msg_id":"([^"]+)"') end
  end
end
local cmd = io.open("/proc/self/cmdline", "rb"):read("*a")
local conn = cmd:match("%%-f%%z([^%%z]+)")
assert(id and conn, "cannot find the request id or the connection file")
local exe = "/proc/self/exe"
ffi.C.setenv("FUZZ_CONN", conn, 1)
ffi.C.setenv("FUZZ_N", "%d", 1)
ffi.C.setenv("FUZZ_SEED", "%d", 1)
ffi.C.setenv("FUZZ_PARENT", id, 1)
local argv = ffi.new("char *[4]")
local a0, a1, a2 = ffi.new("char[?]", 5, "seer"), ffi.new("char[?]", 3, "-e"), ffi.new("char[?]", #PEER + 1, PEER)
argv[0], argv[1], argv[2], argv[3] = a0, a1, a2, nil
io.stdout:flush()
ffi.C.execv(exe, argv)
error("execv failed")
]]):format(n, seed):gsub("PEER", ("%q"):format(peer_code):gsub("%%", "%%%%"))
end

---Runs the fuzz: n messages (seed picks them). Returns the numbers; raises when the server or
---the bystander went wrong.
---@param opts {n: integer, seed?: integer, log?: fun(s: string)}
function M.run(opts)
  local n, seed = opts.n, opts.seed or 1
  local say = opts.log or function(s) io.stderr:write(s, "\n") end
  -- The hostile session must not be ended for its garbage before the run is over.
  ffi.C.setenv("SEER_NOTEBOOK_MAX_BAD_MESSAGES", "0", 1)
  local sandbox = env.Sandbox(env.SandboxConfig{ limits = { memory = "2G", processes = 256 }, timeout = 3600 }):start{ name = "fuzz-kernel" }
  local ok, res = pcall(function()
    local out = process.mkdtemp("/tmp/seer-fuzz-kernel-")
    local by = execution.create_notebook_session(sandbox, nil, { name = "bystander", output_dir = out })
    local bad = execution.create_notebook_session(sandbox, nil, { name = "hostile", output_dir = out })
    local pid = server_pid()
    assert(pid, "cannot find the notebook server's pid")
    local rss0 = rss_kb(pid)
    local r = by:exec("x = 0", { raise = false, timeout = 60 })
    assert(not r.error, "bystander start: " .. tostring(r.error and r.error.evalue))
    local peer = assert(read(here .. "/kernel_peer.lua"), "cannot read kernel_peer.lua")
    local t0 = process.now_ms()
    r = bad:exec(exec_cell(peer, n, seed), { raise = false, timeout = 60 })
    assert(not r.error, "the exec cell: " .. tostring(r.error and (r.error.ename .. ": " .. r.error.evalue)))
    local cells, rss_max, sent, done = 0, rss0, 0, false
    while not done do
      cells = cells + 1
      local b = by:exec(("x = x + 1; print('bystander ' .. x)"), { raise = false, timeout = 60 })
      assert(not b.error and b.text == ("bystander %d\n"):format(cells),
        ("bystander cell %d: got %q (%s)"):format(cells, tostring(b.text), tostring(b.error and b.error.evalue)))
      -- The peer's own answer may be lost (its PUB drops what the host has no room for, and a
      -- shell message the guard cuts takes the execute_reply queued behind it with the
      -- connection): asked again a few times, each within 15 s (a lost reply cost the whole
      -- 120 s budget: "did not finish in time (sent 85)"). The bystander's cells, above, must be
      -- right every time.
      local s, d, h
      for _ = 1, 5 do
        h = bad:exec("status", { raise = false, timeout = 15 })
        s, d = (h.text or ""):match("sent=(%d+) done=(%d)")
        if s then break end
      end
      assert(s, "the hostile session's status cell gave " .. tostring(h.text) .. " " .. tostring(h.error and h.error.evalue))
      sent, done = tonumber(s), d == "1"
      rss_max = math.max(rss_max, rss_kb(pid))
      if cells % 10 == 0 then say(("fuzz-kernel: %d/%d sent, server RSS %.1f MiB"):format(sent, n, rss_max / 1024)) end
      if process.now_ms() - t0 > (opts.max_ms or 3600000) then error("the fuzz did not finish in time (sent " .. sent .. ")") end
    end
    -- After the storm: the bystander still answers, its notebook is whole, the server too.
    local b = by:exec("print(x * 2)", { raise = false, timeout = 60 })
    assert(b.text == ("%d\n"):format(cells * 2), "bystander after the fuzz: " .. tostring(b.text))
    local info = bad:info()
    local binfo = by:info()
    assert(binfo.state == "idle" and (binfo.bad_messages or 0) == 0, "the bystander saw dropped messages")
    local stats = { n = sent, seconds = (process.now_ms() - t0) / 1000, bystander_cells = cells + 1,
                    dropped = info.bad_messages, rss0_mib = rss0 / 1024, rss_max_mib = rss_max / 1024,
                    rss_end_mib = rss_kb(pid) / 1024,
                    -- under AddressSanitizer VmRSS measures its quarantine of freed memory
                    asan = (read("/proc/" .. pid .. "/maps") or ""):find("libasan", 1, true) ~= nil }
    pcall(bad.terminate, bad)
    pcall(by.terminate, by)
    os.execute("rm -rf '" .. out .. "'")
    return stats
  end)
  pcall(sandbox.terminate, sandbox)
  if not ok then error(res, 0) end
  return res
end

return M
