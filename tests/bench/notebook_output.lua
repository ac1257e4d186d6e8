-- make bench: cell output through kernel -> notebook server -> caller (session:exec), issue 19.
-- Prints stream throughput (MB/s) for one cell printing BENCH_NB_MB MiB (default 1024: past the
-- per-cell limit of 64 MiB, so the server receives it all and keeps 64 MiB), display messages/s
-- for one cell of BENCH_NB_DISPLAYS display.text calls (default 10000, the per-cell limit), and
-- the notebook server's peak resident memory (VmHWM) over the run. The peer, on the same output
-- in the same run, is tests/bench/notebook_output_peer.py (ipykernel driven by nbclient).
local exec = require "seer.execution"
local process = require "seer.process"
local MB = tonumber(os.getenv("BENCH_NB_MB") or "1024")
local ND = tonumber(os.getenv("BENCH_NB_DISPLAYS") or "10000")
local dir = process.mkdtemp("/tmp/seer-bench-nbout-")

local s = exec.create_local_notebook_session(nil, { name = "bench-output", output_dir = dir })
-- the notebook server is this process's child running `seer notebook serve`
local function server_pid()
  local me = process.getpid()
  for pid in io.popen("ls /proc"):lines() do
    if pid:match("^%d+$") then
      local f = io.open("/proc/" .. pid .. "/stat")
      local st = f and f:read("*a")
      if f then f:close() end
      local c = io.open("/proc/" .. pid .. "/cmdline")
      local cmd = c and c:read("*a") or ""
      if c then c:close() end
      if tonumber(st and st:match("^%d+ %b() %S+ (%d+)")) == me and cmd:find("notebook\0serve", 1, true) then return pid end
    end
  end
end
local pid = server_pid()
local function kb(field)
  local f = io.open("/proc/" .. pid .. "/status")
  local t = f:read("*a")
  f:close()
  return tonumber(t:match(field .. ":%s*(%d+)"))
end
local start_rss = kb("VmRSS")

local t0 = process.now_ms()
local r = s:exec(("local l = string.rep('x', 1013) .. '\\n'; for i = 1, %d * 1024 do io.write(('%%09d '):format(i), l) end"):format(MB),
                 { timeout = 3600, raise = false })
local t_stream = (process.now_ms() - t0) / 1000
local kept = MB * 1048576 - (r.dropped and r.dropped.stream_bytes or 0)
local hwm_stream = kb("VmHWM")

t0 = process.now_ms()
local rd = s:exec(("for i = 1, %d do display.text(i) end"):format(ND), { timeout = 3600, raise = false })
local t_disp = (process.now_ms() - t0) / 1000
local got = 0
for _, o in ipairs(rd.outputs) do if o.output_type == "display_data" then got = got + 1 end end
s:terminate()
os.execute("rm -rf '" .. dir .. "'")
print(("  seer: %d MiB of stdout in one cell     %6.1f s  %7.1f MB/s   kept %d MiB (the cell limit), notebook server peak RSS %d MiB (%d MiB at the start)")
  :format(MB, t_stream, MB * 1.048576 / t_stream, math.floor(kept / 1048576), math.floor(hwm_stream / 1024), math.floor(start_rss / 1024)))
print(("  seer: %d display messages in one cell  %6.2f s  %7.0f messages/s (reply lists %d within max_output; the notebook has all)")
  :format(ND, t_disp, ND / t_disp, got))
print(("SEER_NB %s %s %s %s"):format(MB * 1.048576 / t_stream, ND / t_disp, math.floor(hwm_stream / 1024), MB))
