-- seer.exit: the work done when a script ends runs once, before the Lua state closes (no
-- finalizer has run yet, the state is whole), on every way a script ends that leaves the
-- process alive to do it: a normal end, an uncaught error, os.exit, SIGTERM.
local T = require "testing"
local process = require "seer.process"

local SEER = require("seer.jupyter").seer_binary()
local dir = process.mkdtemp("/tmp/seer-test-exit-")

-- Runs code as a script in a child seer; returns what its handlers wrote, its exit status and
-- its stderr.
local n = 0
local function run(code, opts)
  opts = opts or {}
  n = n + 1
  local script = ("%s/s%d.lua"):format(dir, n)
  local out = ("%s/out%d"):format(dir, n)
  local prelude = ([[
local OUT = %q
local log = {}
local function note(s) log[#log + 1] = s end
-- a finalizer that runs when the state closes: the handlers must all have run before it
FINALIZED = false
GUARD = newproxy(true)
getmetatable(GUARD).__gc = function() FINALIZED = true end
]]):format(out)
  seer.write_file(script, prelude .. code)
  local errf = out .. ".stderr"
  local child = process.spawn{ argv = { SEER, script }, stdout = "pipe", stderr = errf }
  if opts.before_wait then opts.before_wait(child) end
  local ok = child:wait(30000)
  if not ok then child:kill(9) end
  child:stop(0)
  T.ok(ok, "the script did not end within 30 s")
  local function slurp(p)
    local f = io.open(p)
    local text = f and f:read("*a") or ""
    if f then f:close() end
    return text
  end
  return slurp(out), child.exit_code, slurp(errf)
end

-- What each handler writes: run inside it, so it also proves the state can still do real work
-- (require a module not loaded yet, run a coroutine, catch an error).
local HANDLER = [[
require("seer.exit").on_exit(function(how)
  local json = require "seer.json" -- not loaded by the script: require works
  local co = coroutine.wrap(function() coroutine.yield(1) end)
  local caught = not pcall(error, "x")
  local f = assert(io.open(OUT, "a"))
  f:write(json.encode{ tag = %q, error = how.error, exit_code = how.exit_code, finalized = FINALIZED,
                       co = co(), caught = caught }, "\n")
  f:close()
end)
-- and one made after seer.exit loaded: finalizers run newest first, so whichever order the
-- state would close in, one of the two guards' finalizers would run before a handler run then
LATE = LATE or {}
LATE[#LATE + 1] = newproxy(true)
getmetatable(LATE[#LATE]).__gc = function() FINALIZED = true end
]]

local function records(text)
  local json = require "seer.json"
  local t = {}
  for line in text:gmatch("[^\n]+") do t[#t + 1] = json.decode(line) end
  return t
end

-- Runs a script with one handler ("h"), checks its exit status and that the handler ran once;
-- returns its record and the script's stderr.
local function run_one(code, status, opts)
  local text, got, err = run(HANDLER:format("h") .. code, opts)
  if status == "nonzero" then T.ne(got, 0) else T.eq(got, status) end
  local r = records(text)
  T.eq(#r, 1, text)
  return r[1], err
end

T.test("exit: a normal end runs the handlers once, last registered first, before any finalizer", function()
  local text, code = run(HANDLER:format("first") .. HANDLER:format("second"))
  T.eq(code, 0)
  local r = records(text)
  T.eq(#r, 2, text)
  T.eq(r[1].tag, "second")
  T.eq(r[2].tag, "first")
  for _, x in ipairs(r) do
    T.eq(x.finalized, false, "a finalizer ran before the handlers")
    T.eq(x.error, nil)
    T.eq(x.exit_code, nil)
    T.eq(x.co, 1)
    T.eq(x.caught, true)
  end
end)

T.test("exit: an uncaught error reaches the handlers as its first line", function()
  local r, err = run_one("error('the boom\\nsecond line')\n", 1)
  T.contains(err, "the boom")
  T.contains(r.error, "the boom")
  T.ok(not r.error:find("second line", 1, true), r.error)
  T.eq(r.finalized, false)
end)

T.test("exit: os.exit runs the handlers with its code (finalizers are skipped)", function()
  local r = run_one("os.exit(3)\n", 3)
  T.eq(r.exit_code, 3)
  T.eq(r.error, nil)
  -- os.exit(code, true) closes the state too: the handlers still run once, before it
  r = run_one("os.exit(true, true)\n", 0)
  T.eq(r.exit_code, true)
  T.eq(r.finalized, false)
end)

T.test("exit: a handler that fails does not stop the others", function()
  local text, code = run(HANDLER:format("kept") .. "require('seer.exit').on_exit(function() error('handler fails') end)\n")
  T.eq(code, 0)
  local r = records(text)
  T.eq(#r, 1, text)
  T.eq(r[1].tag, "kept")
end)

T.test("exit: SIGTERM ends the script as an interrupt and the handlers run", function()
  local r = run_one([[
io.stdout:write("ready\n"); io.stdout:flush()
require("seer.core.sigterm").term_as_interrupt()
while true do require("seer.process").sleep_ms(50) end
]], "nonzero", { before_wait = function(child)
    T.eq(child:read_line(20000), "ready")
    child:kill(15)
  end })
  T.eq(r.error, "interrupted")
end)

T.test("exit: on_exit takes only functions", function()
  local msg = T.raises(function() require("seer.exit").on_exit("not a function") end)
  T.contains(msg, "takes a function")
end)

T.test("exit: cleanup", function()
  os.execute(("rm -rf '%s'"):format(dir))
end)
