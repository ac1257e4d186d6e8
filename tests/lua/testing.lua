-- The small test library used by tests/lua/*.lua and run by `seer tests/lua/run.lua`.
-- A test file registers cases with T.test(name, fn); the runner calls them in order, each in
-- its own xpcall, and a failing assertion reports the test's file:line, not this file's.
local M = {}

local cases = {}

---Register a test case.
---@param name string
---@param fn fun()
function M.test(name, fn)
  assert(type(name) == "string" and type(fn) == "function", "T.test(name, fn)")
  local info = debug.getinfo(2, "Sl")
  cases[#cases + 1] = { name = name, fn = fn, where = info.short_src .. ":" .. info.currentline }
end

---Skip the running test with a reason (it is reported as skipped, never as passed).
---@param reason string
function M.skip(reason)
  error({ seer_test_skip = reason }, 0)
end

---Take the registered cases (the runner calls this after loading a file).
function M._take()
  local c = cases
  cases = {}
  return c
end

local function fail(msg, level)
  error(msg, (level or 1) + 2)
end

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "table" then
    local ok, pretty = pcall(require, "seer.pretty")
    if ok then return pretty.format(v, { depth = 4 }) end
  end
  return tostring(v)
end

-- Deep equality on plain values and tables (metatables ignored); returns false and the path
-- of the first difference.
local function deep_eq(a, b, path, seen)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then
    if type(a) == "number" and type(b) == "number" and a ~= a and b ~= b then return true end
    return false, path
  end
  seen = seen or {}
  if seen[a] == b then return true end
  seen[a] = b
  for k, v in pairs(a) do
    local ok, where = deep_eq(v, b[k], path .. "[" .. show(k) .. "]", seen)
    if not ok then return false, where end
  end
  for k in pairs(b) do
    if a[k] == nil then return false, path .. "[" .. show(k) .. "]" end
  end
  return true
end
M.deep_eq = deep_eq

---Assert deep equality.
function M.eq(actual, expected, msg)
  local ok, where = deep_eq(actual, expected, "")
  if not ok then
    fail(string.format("%sexpected %s, got %s%s", msg and (msg .. ": ") or "", show(expected), show(actual),
      where ~= "" and ("  (first difference at " .. where .. ")") or ""))
  end
end

---Assert inequality.
function M.ne(actual, unexpected, msg)
  if deep_eq(actual, unexpected, "") then
    fail(string.format("%sexpected a value other than %s", msg and (msg .. ": ") or "", show(unexpected)))
  end
end

---Assert that a value is truthy.
function M.ok(v, msg)
  if not v then fail(msg or ("expected a true value, got " .. show(v))) end
  return v
end

---Assert |a - b| <= tol (default 1e-6 relative to max(1, |b|)).
function M.near(a, b, tol, msg)
  tol = tol or 1e-6
  if type(a) ~= "number" or type(b) ~= "number" or math.abs(a - b) > tol * math.max(1, math.abs(b)) then
    fail(string.format("%sexpected %s within %g, got %s", msg and (msg .. ": ") or "", show(b), tol, show(a)))
  end
end

---Assert that fn(...) raises an error whose message matches the Lua pattern (plain find if
---plain is true). Returns the message.
function M.raises(fn, pattern, plain)
  local ok, err = pcall(fn)
  if ok then fail("expected an error" .. (pattern and (" matching " .. show(pattern)) or "") .. ", got none") end
  local msg = tostring(err)
  if pattern and not msg:find(pattern, 1, plain) then
    fail(string.format("error %s does not match %s", show(msg), show(pattern)))
  end
  return msg
end

---Assert that s contains needle (plain).
---fn raises an error that names a line of `file` (the caller's line, not one inside seer) and
---contains want. fn must not end in a tail call, which leaves no line to name.
function M.refused_at(file, fn, want)
  local ok, err = pcall(fn)
  M.ok(not ok, "raised: " .. want)
  M.eq(tostring(err):match("^([^%s:]+):%d+: "), file, tostring(err))
  M.ok(tostring(err):find(want, 1, true), ("wanted %q in: %s"):format(want, tostring(err)))
end

function M.contains(s, needle, msg)
  if type(s) ~= "string" or not s:find(needle, 1, true) then
    fail(string.format("%sexpected %s to contain %s", msg and (msg .. ": ") or "", show(s), show(needle)))
  end
end

---A fresh temporary directory, removed by the runner after the current file.
function M.tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -m 700 '" .. p .. "'") == 0, "cannot create a temporary directory " .. p)
  M._tmpdirs = M._tmpdirs or {}
  M._tmpdirs[#M._tmpdirs + 1] = p
  return p
end

local ffi = require "ffi"
pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite); int unsetenv(const char *name);")

---Sets (or, with nil, removes) an environment variable of this process; seer reads these at
---each use, so it covers what the test file starts afterwards.
function M.setenv(name, value)
  if value == nil then ffi.C.unsetenv(name) else ffi.C.setenv(name, value, 1) end
end

---Sandboxes and caches of this test file go under root (SEER_SANDBOX_DIR = root/sb,
---SEER_CACHE_DIR = root/cache).
function M.private_sandbox_dirs(root)
  M.setenv("SEER_SANDBOX_DIR", root .. "/sb")
  M.setenv("SEER_CACHE_DIR", root .. "/cache")
end

---Runs a shell command (LuaJIT's popen:close() does not give the status, so the shell prints
---it): whether it exited 0, and its output (stdout and stderr together).
---@param cmd string
---@return boolean ok, string output
function M.sh(cmd)
  local p = io.popen("(" .. cmd .. ") 2>&1; echo \"seer-rc=$?\"")
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("seer%-rc=(%d+)\n?$"))
  return rc == 0, (out:gsub("seer%-rc=%d+\n?$", ""))
end

---Calls s:exec(cmd or "true", exec_opts) every `every_ms` (100) until it fails or ms pass:
---the error text, or nil when it never failed, and how long it took. For tests of how a
---sandbox ends (timeout, a lost connection, a cancelled job).
---@param s table a started Sandbox
---@param ms number
---@param opts? {every_ms?: number, cmd?: string, exec?: table}
---@return string|nil err, number took_ms
function M.exec_until_fails(s, ms, opts)
  opts = opts or {}
  local now = require("seer.process").now_ms
  local t0 = now()
  local ok, err
  repeat
    ok, err = pcall(s.exec, s, opts.cmd or "true", opts.exec)
    if ok then require("seer.process").sleep_ms(opts.every_ms or 100) end
  until not ok or now() - t0 > ms
  return (not ok) and tostring(err) or nil, now() - t0
end

---Whether a path exists (not following a final link).
function M.exists(path) return require("seer.safe_fs").lstat(path) ~= nil end

---A small deterministic random stream for fuzz cases (Park-Miller; the cases must not depend on
---LuaJIT's math.random): r.int(a, b) inclusive, r.chance(p), r.pick(list).
function M.rng(seed)
  local s = seed % 2147483647
  if s <= 0 then s = s + 2147483646 end
  local r = {}
  function r.int(a, b)
    s = (s * 48271) % 2147483647
    return a + s % (b - a + 1)
  end
  function r.chance(p) return r.int(0, 999999) < p * 1000000 end
  function r.pick(t) return t[r.int(1, #t)] end
  return r
end

return M
