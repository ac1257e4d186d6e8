-- make bench: notebook sessions end to end (seer.execution -> seer notebook serve -> seer kernel):
-- time to create a session (notebook server + kernel + first notebook write) and the round trip
-- of session:exec("1+1"), which writes the .ipynb atomically after every cell.
local exec = require "seer.execution"
local process = require "seer.process"
local N = tonumber(os.getenv("N_EXEC") or "300")
local dir = process.mkdtemp("/tmp/seer-bench-notebook-")

local t0 = process.now_ms()
local s = exec.create_local_notebook_session(nil, { name = "bench", output_dir = dir })
local t_create = process.now_ms() - t0
local function percentile(xs, p)
  table.sort(xs)
  return xs[math.max(1, math.ceil(#xs * p))]
end
local visible, hidden = {}, {}
for _ = 1, 20 do s:exec("1+1") end
for i = 1, N do
  local a = process.now_ms()
  s:exec("1+1")
  visible[i] = process.now_ms() - a
  a = process.now_ms()
  s:exec("1+1", { hidden = true })
  hidden[i] = process.now_ms() - a
end
s:terminate()
os.execute("rm -rf '" .. dir .. "'")
print(("  session created (server + kernel + notebook)  %7.1f ms"):format(t_create))
print(("  session:exec('1+1'), a notebook cell          p50 %.2f ms  p90 %.2f ms  (%d runs; the cell grows the .ipynb, rewritten atomically each time)")
  :format(percentile(visible, 0.5), percentile(visible, 0.9), N))
print(("  session:exec('1+1', {hidden = true})          p50 %.2f ms  p90 %.2f ms")
  :format(percentile(hidden, 0.5), percentile(hidden, 0.9)))
