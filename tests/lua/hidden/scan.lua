-- Run by test_hidden.lua in its own seer process: the "system" loads a hidden model from a path
-- read from a file (then deleted), forgets the path, and the "agent" side searches everything
-- it can reach for the secret: every string reachable from globals and the registry (through
-- tables, metatables, function upvalues and environments), what model and tokenizer methods
-- return, error messages, and the process's /proc views (mappings, open descriptors, environment,
-- command line). Prints one line per leak and "clean" when there is none.
local f = assert(io.open(arg[1], "rb"))
local path, secret = f:read("*l"), f:read("*l")
f:close()
os.remove(arg[1])

do
  local preload = load("local p = ...; model = require('seer.model').load(p, { hidden = true }); tokenizer = model.tokenizer")
  preload(path)
end
path = nil
collectgarbage()
collectgarbage()

local leaks = {}
local function leak(where, s) leaks[#leaks + 1] = where .. ": " .. tostring(s):sub(1, 200) end
local function check(where, s)
  if type(s) == "string" and s:find(secret, 1, true) then leak(where, s) end
end

local seen = {}
local function walk(v, where, depth)
  local t = type(v)
  if t == "string" then return check(where, v) end
  if (t ~= "table" and t ~= "function" and t ~= "userdata") or seen[v] or depth > 60 then return end
  seen[v] = true
  if t == "table" then
    for k, x in next, v do
      walk(k, where .. "<key>", depth + 1)
      walk(x, where .. "." .. tostring(k), depth + 1)
    end
  elseif t == "function" then
    for i = 1, 255 do
      local n, x = debug.getupvalue(v, i)
      if not n then break end
      walk(x, where .. "^" .. n, depth + 1)
    end
    walk(debug.getfenv(v), where .. "<env>", depth + 1)
  end
  if t == "userdata" then walk(debug.getfenv(v), where .. "<uenv>", depth + 1) end
  walk(debug.getmetatable(v), where .. "<mt>", depth + 1)
end
walk(_G, "_G", 0)
walk(debug.getregistry(), "registry", 0)

check("tostring(model)", tostring(model))
check("tostring(tokenizer)", tostring(tokenizer))
walk(model._c:config(), "core config", 0)
check("model.id", model.id)
local ok, e = pcall(model.forward, model, { 99999 })
check("forward error", tostring(e))
ok, e = pcall(model.load_adapter, model, "/nonexistent")
check("adapter error", tostring(e))

local function slurp(p)
  local h = io.open(p, "rb")
  if not h then return "" end
  local s = h:read("*a")
  h:close()
  return s
end
check("/proc/self/maps", slurp("/proc/self/maps"))
check("/proc/self/environ", slurp("/proc/self/environ"))
check("/proc/self/cmdline", slurp("/proc/self/cmdline"))
local ffi = require "ffi"
ffi.cdef [[ long readlink(const char *path, char *buf, unsigned long size); ]]
local buf = ffi.new("char[4096]")
local fds = io.popen("ls /proc/self/fd 2>/dev/null") -- the child's own fds do not matter; list ours via a glob
local list = {}
for i = 0, 255 do list[#list + 1] = tostring(i) end
if fds then fds:close() end
for _, fd in ipairs(list) do
  local n = ffi.C.readlink("/proc/self/fd/" .. fd, buf, 4096)
  if n > 0 then check("/proc/self/fd/" .. fd, ffi.string(buf, n)) end
end

-- The model still works.
local out = model:generate("Once upon a time", { max_new_tokens = 5 })
if #out.ids ~= 5 then leak("generate", "produced " .. #out.ids .. " tokens") end
if #leaks == 0 then print("clean") else for _, l in ipairs(leaks) do print(l) end end
