-- The attack suite as a whole (docs/security.md): when every tests/lua/test_attack_*.lua file
-- ran in this process (as `make test` and `make attack` run them), the suite holds at least 60
-- distinct attempts, every class of the threat model has some, and no two share a name.
local T = require "testing"
local A = require "attack"

local MIN_ATTEMPTS = 60
local CLASSES = 8

local function attack_files()
  local files = {}
  local p = io.popen("ls '" .. seer.script_dir() .. "'/test_attack_*.lua 2>/dev/null")
  for line in p:lines() do
    local f = line:match("([^/]+)$")
    if f ~= "test_attack_suite.lua" then files[#files + 1] = f end
  end
  p:close()
  return files
end

T.test("the attack suite: at least 60 distinct attempts covering every class", function()
  local by_file, by_class, names = {}, {}, {}
  for _, r in ipairs(A.registered()) do
    by_file[r.file] = (by_file[r.file] or 0) + 1
    if r.class then by_class[tonumber(r.class)] = (by_class[tonumber(r.class)] or 0) + 1 end
    T.ok(not names[r.name], "two attempts are named " .. r.name)
    names[r.name] = true
  end
  local missing = {}
  for _, f in ipairs(attack_files()) do
    if not by_file[f] then missing[#missing + 1] = f end
  end
  if #missing > 0 then
    T.skip("run with every attack file (make attack); not loaded here: " .. table.concat(missing, ", "))
  end
  local parts = {}
  for f, n in pairs(by_file) do parts[#parts + 1] = f .. " " .. n end
  table.sort(parts)
  print(("  the attack suite: %d attempts (%s)"):format(#A.registered(), table.concat(parts, ", ")))
  T.ok(#A.registered() >= MIN_ATTEMPTS, ("the suite has %d attempts; the floor is %d"):format(#A.registered(), MIN_ATTEMPTS))
  for c = 1, CLASSES do
    T.ok((by_class[c] or 0) > 0, ("no attempt covers class %d of docs/security.md"):format(c))
  end
  A.close()
end)
