-- Runs Lua test files: seer tests/lua/run.lua [FILE...] (default: every test_*.lua beside
-- this file). SEER_TEST_FILTER=pattern runs only matching case names. Ends with the line
-- "lua: N passed, N failed" and exits 1 on any failure.
local here = seer.script_dir()
local T = require "testing"

local files = { ... }
if #files == 0 then
  local p = io.popen("ls '" .. here .. "'/test_*.lua 2>/dev/null")
  for line in p:lines() do files[#files + 1] = line end
  p:close()
end

local filter = os.getenv("SEER_TEST_FILTER")
local passed, failed, skipped = 0, 0, 0
local failures = {}

for _, file in ipairs(files) do
  local chunk, err = loadfile(file)
  if not chunk then
    failed = failed + 1
    failures[#failures + 1] = file .. ": cannot load: " .. err
    io.write("FAIL ", file, " (load)\n  ", err, "\n")
  else
    local ok, lerr = xpcall(chunk, debug.traceback)
    local cases = T._take()
    if not ok then
      failed = failed + 1
      failures[#failures + 1] = file .. ": " .. lerr
      io.write("FAIL ", file, " (top level)\n  ", lerr, "\n")
    end
    for _, c in ipairs(cases) do
      if not filter or c.name:find(filter) then
        local t0 = os.clock()
        local cok, cerr = xpcall(c.fn, function(e)
          if type(e) == "table" and e.seer_test_skip then return e end
          return debug.traceback(e, 2)
        end)
        local ms = (os.clock() - t0) * 1000
        if not cok and type(cerr) == "table" then
          skipped = skipped + 1
          io.write(string.format("skip %-60s %s\n", c.name, cerr.seer_test_skip))
        elseif cok then
          passed = passed + 1
          io.write(string.format("ok   %-60s %7.1f ms\n", c.name, ms))
        else
          failed = failed + 1
          failures[#failures + 1] = c.name .. " (" .. c.where .. ")"
          io.write("FAIL ", c.name, " (", c.where, ")\n  ", (tostring(cerr):gsub("\n", "\n  ")), "\n")
        end
      end
    end
    for _, d in ipairs(T._tmpdirs or {}) do os.execute("rm -rf '" .. d .. "'") end
    T._tmpdirs = nil
  end
  io.flush()
end

if #failures > 0 then
  io.write("\nfailed:\n")
  for _, f in ipairs(failures) do io.write("  ", f, "\n") end
end
io.write(string.format("lua: %d passed, %d failed%s\n", passed, failed,
  skipped > 0 and (", " .. skipped .. " skipped") or ""))
os.exit(failed == 0 and 0 or 1, true) -- close the state: userdata are freed, so LeakSanitizer sees real leaks only
