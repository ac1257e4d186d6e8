-- make bench: time from Sandbox(config):start() to a sandbox answering exec (models excluded),
-- exec round trips and terminate, beside the floor measured in the same run: bubblewrap alone
-- starting /bin/true with the same namespaces. The reference documents ~30 s (Modal) and ~5 s
-- (its local mode) of start-up; those are its own figures, not measured here.
-- usage: seer tests/bench/sandbox.lua [N]
local env = require "seer.environment"
local sb = require "seer.core.sandbox"
local process = require "seer.process"
local N = tonumber(arg and arg[1]) or 20

local function pct(t, p)
  table.sort(t)
  return t[math.max(1, math.ceil(#t * p))]
end

local function bwrap_floor()
  local p = assert(sb.spawn{ argv = { "bwrap", "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
    "--cap-drop", "ALL", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev",
    "--tmpfs", "/tmp", "/bin/true" } })
  while not p:poll() do process.sleep_ms(0.2) end
  p:close()
end

local floor, start, first, rt, term = {}, {}, {}, {}, {}
for _ = 1, N do
  local t0 = process.now_ms(); bwrap_floor(); floor[#floor + 1] = process.now_ms() - t0
end
local config = env.SandboxConfig{ execution_mode = "cli" }
for _ = 1, N do
  local t0 = process.now_ms()
  local s = env.Sandbox(config):start()
  local t1 = process.now_ms()
  s:exec("true")
  local t2 = process.now_ms()
  for _ = 1, 10 do
    local a = process.now_ms(); s:exec("true"); rt[#rt + 1] = process.now_ms() - a
  end
  local t3 = process.now_ms()
  s:terminate()
  start[#start + 1], first[#first + 1], term[#term + 1] = t1 - t0, t2 - t0, process.now_ms() - t3
end
print(("== sandbox start-up (%d starts; p50 / p90 ms)"):format(N))
print(("  bwrap /bin/true (floor)         %7.1f / %7.1f"):format(pct(floor, 0.5), pct(floor, 0.9)))
print(("  start() until sandboxd answers  %7.1f / %7.1f"):format(pct(start, 0.5), pct(start, 0.9)))
print(("  start() until first exec done   %7.1f / %7.1f   (target <= 100; reference: ~5000 local, ~30000 Modal, documented)"):format(pct(first, 0.5), pct(first, 0.9)))
print(("  exec('true') round trip         %7.1f / %7.1f"):format(pct(rt, 0.5), pct(rt, 0.9)))
print(("  terminate()                     %7.1f / %7.1f"):format(pct(term, 0.5), pct(term, 0.9)))
