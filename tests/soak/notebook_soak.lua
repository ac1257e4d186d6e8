-- make soak: the heavy versions of tests/lua/test_notebook_pipeline.lua (issue 19): 100,000
-- display messages in one cell and in 100 cells of 1000, and 1 GB of stdout in one cell, each
-- checked in the reply and the notebook file, with the notebook server's peak memory.
local T = require "testing"
local exec = require "seer.execution"
local process = require "seer.process"
local json = seer.json

local function server_kb(field)
  local me = process.getpid()
  for pid in io.popen("ls /proc"):lines() do
    if pid:match("^%d+$") then
      local f = io.open("/proc/" .. pid .. "/stat")
      local st = f and f:read("*a")
      if f then f:close() end
      local c = io.open("/proc/" .. pid .. "/cmdline")
      local cmd = c and c:read("*a") or ""
      if c then c:close() end
      if tonumber(st and st:match("^%d+ %b() %S+ (%d+)")) == me and cmd:find("notebook\0serve", 1, true) then
        local t = seer.read_file("/proc/" .. pid .. "/status")
        return tonumber(t:match(field .. ":%s*(%d+)"))
      end
    end
  end
end

T.test("1 GB of stdout in one cell: 64 MiB kept in order, the rest in the record; server memory follows what it keeps", function()
  local s = exec.create_local_notebook_session(nil, { output_dir = T.tmpdir(), name = "soak-1g" })
  local t0 = process.now_ms()
  local r = s:exec("local l = string.rep('x', 1013) .. '\\n'; for i = 1, 1024 * 1024 do io.write(('%09d '):format(i), l) end",
                   { timeout = 1200, raise = false })
  local secs = (process.now_ms() - t0) / 1000
  local hwm = server_kb("VmHWM")
  print(("    1 GiB in %.1f s (%.0f MB/s), notebook server peak RSS %d MiB"):format(secs, 1073.741824 / secs, math.floor(hwm / 1024)))
  T.eq(r.result, "ok")
  T.eq(r.dropped.stream_bytes, 1024 * 1048576 - 64 * 1048576)
  T.ok(hwm < 4 * 64 * 1024, ("the server's peak (%d MiB) stays within 4x what it keeps (64 MiB)"):format(math.floor(hwm / 1024)))
  local doc = json.decode(seer.read_file(s.notebook_path))
  local outs = doc.cells[1].outputs
  local text = type(outs[1].text) == "table" and table.concat(outs[1].text) or outs[1].text
  T.eq(#text, 64 * 1048576)
  T.eq(text:sub(1, 10), "000000001 ")
  T.eq(text:sub(1024 * 65535 + 1, 1024 * 65535 + 10), "000065536 ", "in order up to the limit")
  T.contains(table.concat(outs[2].text), "[seer] output truncated: not kept: 960.0 MiB of stdout/stderr")
  s:terminate()
end)

T.test("100,000 display messages in one cell and in 100 cells", function()
  local s = exec.create_local_notebook_session(nil, { output_dir = T.tmpdir(), name = "soak-displays" })
  local t0 = process.now_ms()
  local r = s:exec("for i = 1, 100000 do display.text(i) end", { timeout = 1200, raise = false, max_output = 10 ^ 9 })
  print(("    100,000 displays in one cell: %.1f s"):format((process.now_ms() - t0) / 1000))
  T.eq(r.dropped.displays, 90000, "past the 10000 per cell, counted")
  for i = 1, 10000 do if r.outputs[i].data["text/plain"] ~= tostring(i) then T.eq(r.outputs[i].data["text/plain"], tostring(i)) end end
  T.contains(r.outputs[10001].text, "90000 display outputs")
  t0 = process.now_ms()
  for c = 1, 100 do
    local rr = s:exec(("for i = 1, 1000 do display.text(%d + i) end"):format(c * 1000), { max_output = 10 ^ 9 })
    T.eq(#rr.outputs, 1000, "cell " .. c)
    T.eq(rr.outputs[1000].data["text/plain"], tostring(c * 1000 + 1000))
  end
  print(("    100 cells of 1000 displays: %.1f s"):format((process.now_ms() - t0) / 1000))
  local doc = json.decode(seer.read_file(s.notebook_path))
  T.eq(#doc.cells, 101)
  T.eq(#doc.cells[1].outputs, 10001)
  for c = 2, 101 do T.eq(#doc.cells[c].outputs, 1000, "notebook cell " .. c) end
  s:terminate()
end)
