-- The attack suite's shared rig (docs/security.md): one real bubblewrap sandbox with
-- stories260K mounted and a notebook kernel inside it, and `A.attack{...}`, which registers
-- one attempt and runs it through every vector that applies:
--   exec/sh     sandbox:exec of a shell script
--   exec/lua    sandbox:exec of `seer -e` with the attempt's Lua (ffi, os.execute, io all open)
--   kernel/lua  the same Lua as a cell of the notebook kernel running in the sandbox
--   kernel/sh   the shell script run by os.execute from a kernel cell
-- After each vector the attempt's `check(out, vector)` asserts that it failed, and the rig
-- asserts that the host is unchanged: the canary folder (a host folder the researcher owns,
-- never mounted) keeps its files and gets no new ones. Where a control is meaningful (the same
-- probe succeeding on the host or with the defence absent, so a broken probe cannot pass as a
-- defence), it is a separate T.test beside the attempt. A kernel cell's output is cut at 20,000
-- characters: probes with more to say write it to /workspace and the check reads it there.
--
-- Usage, in tests/lua/test_attack_<area>.lua:
--   local A = require "attack"
--   A.attack{ name = "...", class = 3, sh = "cat /proc/1/cmdline", lua = "...",
--             check = function(out, vector) T.ok(not out:find(A.canary_dir, 1, true)) end }
local T = require "testing"
local env = require "seer.environment"
local ffi = require "ffi"

local M = {}

local here = seer.script_dir and seer.script_dir() or "."
M.stories = (require("seer.core.host").realpath(here .. "/../fixtures/models/stories260K")
             or (here .. "/../fixtures/models/stories260K"))

pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")

-- The rig's folder lives as long as this process (T.tmpdir's folders go after each test file,
-- and the attack files share one rig): removed when the script ends, by seer.exit's handlers
-- (tests/lua/run.lua ends with os.exit, which runs them before the Lua state closes). Until
-- 2026-12-01 this was a finalizer run while the state closed, and two `make attack` runs in
-- sixteen spun there for good after their last test: gdb put the main thread in LuaJIT's
-- interpreter inside that finalizer, in close() at the line that removed each rig from the table
-- its loop walked, the loop's frame holding values of run.lua's frames (the state being torn
-- down under it). Not understood further; the cleanup now runs while the state is whole, and
-- close() no longer changes the table it walks.
local root = require("seer.process").mkdtemp("/tmp/seer-attack-")
M.root = root
require("seer.exit").on_exit(function()
  M.close()
  os.execute(("chmod -R u+rwX '%s' 2>/dev/null; rm -rf '%s'"):format(root, root))
end)
-- The canary: host files an attacker would like to read or change.
M.canary_dir = root .. "/host-canary"
os.execute(("mkdir -p '%s'"):format(M.canary_dir))
M.canary_files = {
  ["secret.txt"] = "host secret " .. tostring(os.time()) .. "\n",
  ["notes.md"] = "# the researcher's notes\n",
}
for name, text in pairs(M.canary_files) do
  local f = assert(io.open(M.canary_dir .. "/" .. name, "wb"))
  f:write(text)
  f:close()
end

local function have_bwrap()
  return os.execute("command -v bwrap >/dev/null 2>&1") == 0
end

---Asserts the canary folder holds exactly its files, unchanged.
function M.assert_host_unchanged(what)
  local seen = {}
  for _, e in ipairs(require("seer.core.sandbox").listdir(M.canary_dir) or {}) do
    seen[e.name] = true
    T.ok(M.canary_files[e.name] ~= nil, ("%s: a new file appeared on the host: %s/%s"):format(what, M.canary_dir, e.name))
  end
  for name, text in pairs(M.canary_files) do
    T.ok(seen[name], ("%s: host file %s was removed"):format(what, name))
    local f = io.open(M.canary_dir .. "/" .. name, "rb")
    local got = f and f:read("*a")
    if f then f:close() end
    T.eq(got, text, what .. ": host file " .. name .. " changed")
  end
end

local rigs = {} -- name -> {sandbox, session}

---A started sandbox with a notebook session inside, made once per name and shared by the
---attempts that name it. `config` is merged over the default SandboxConfig fields (stories260K,
---2G, 256 processes); `session = false` starts no notebook session. Skipped without bubblewrap.
---@param name? string default "attack"
---@param config? table
---@param opts? {session?: boolean, workspace?: table}
---@return {sandbox: table, session: table?}
function M.rig(name, config, opts)
  name = name or "attack"
  if rigs[name] then return rigs[name] end
  if not have_bwrap() then T.skip("bubblewrap is not installed (make setup installs it)") end
  ffi.C.setenv("SEER_SANDBOX_DIR", root .. "/sb", 1)
  ffi.C.setenv("SEER_CACHE_DIR", root .. "/cache", 1)
  local c = { models = { env.ModelConfig{ name = M.stories } }, limits = { memory = "2G", processes = 256 }, timeout = 1800 }
  for k, v in pairs(config or {}) do c[k] = v end
  local sandbox = env.Sandbox(env.SandboxConfig(c)):start{ name = name }
  local session
  if not opts or opts.session ~= false then
    session = require("seer.execution").create_notebook_session(sandbox, opts and opts.workspace,
      { name = name, output_dir = root .. "/outputs/" .. name })
  end
  rigs[name] = { sandbox = sandbox, session = session, name = name }
  return rigs[name]
end

-- A shell script as one argument of `sh -c`, quoted for Lua's os.execute.
local function lua_string(s) return ("%q"):format(s) end

---Runs `sh` in the sandbox through exec; returns stdout..stderr.
function M.exec_sh(sh, timeout, rig)
  local r = rig or M.rig()
  local out, res = r.sandbox:exec({ "/bin/sh", "-c", sh }, { timeout = timeout or 60 })
  return out or "", res
end

---Runs Lua in the sandbox through exec (`seer -e`); returns stdout..stderr.
function M.exec_lua(code, timeout, rig)
  local r = rig or M.rig()
  local out, res = r.sandbox:exec({ "/opt/seer/bin/seer", "-e", code }, { timeout = timeout or 60 })
  return out or "", res
end

---Runs Lua as a kernel cell; returns the cell's text, with an error as "ename: evalue".
function M.kernel_lua(code, timeout, rig)
  local r = rig or M.rig()
  local res = r.session:exec(code, { raise = false, timeout = timeout or 60 })
  local text = res.text or ""
  if res.error then text = text .. (res.error.ename or "") .. ": " .. (res.error.evalue or "") end
  return text, res
end

---Runs a shell script from a kernel cell (through io.popen, so its output comes back).
function M.kernel_sh(sh, timeout, rig)
  return M.kernel_lua(("local p = io.popen(%s .. ' 2>&1') local o = p:read('*a') p:close() io.write(o)")
    :format(lua_string(sh)), timeout, rig)
end

local count = 0
local registered = {} -- {name, class, file} of every attempt, for the suite's totals

---Registers one attempt. Fields: name, class (1..8, docs/security.md), sh and/or lua (payloads;
---lua runs through exec/lua and kernel/lua, sh through exec/sh and kernel/sh), check(out,
---vector, res) asserting the attempt failed, optional setup(vector, rig) / teardown(vector, rig)
---on the host, vectors (a list, to restrict which run), and rig = {name, config, opts} for a
---sandbox other than the default one (see M.rig). sh/lua may be functions(vector, rig) -> string.
function M.attack(a)
  assert(type(a.name) == "string" and type(a.check) == "function", "attack{name, check, sh|lua}")
  assert(a.sh or a.lua, "attack " .. a.name .. ": needs sh or lua")
  count = count + 1
  local src = debug.getinfo(2, "S").short_src:match("([^/]+)$")
  registered[#registered + 1] = { name = a.name, class = a.class, file = src }
  local vectors = {}
  local allowed
  if a.vectors then allowed = {} for _, v in ipairs(a.vectors) do allowed[v] = true end end
  local function want(v) return not allowed or allowed[v] end
  local function payload(p, v, r) if type(p) == "function" then return p(v, r) end return p end
  local function get_rig() if a.rig then return M.rig(a.rig.name, a.rig.config, a.rig.opts) end return M.rig() end
  local function vec(v, p, fn) vectors[#vectors + 1] = { v, function(r) return fn(payload(p, v, r), a.timeout, r) end } end
  if a.sh and want("exec/sh") then vec("exec/sh", a.sh, M.exec_sh) end
  if a.lua and want("exec/lua") then vec("exec/lua", a.lua, M.exec_lua) end
  if a.lua and want("kernel/lua") then vec("kernel/lua", a.lua, M.kernel_lua) end
  if a.sh and want("kernel/sh") then vec("kernel/sh", a.sh, M.kernel_sh) end
  T.test(("attack %d (class %s): %s"):format(count, tostring(a.class or "?"), a.name), function()
    local r = get_rig()
    for _, v in ipairs(vectors) do
      if a.setup then a.setup(v[1], r) end
      local ok, err = pcall(function()
        local out, res = v[2](r)
        a.check(out, v[1], res)
        M.assert_host_unchanged(a.name .. " via " .. v[1])
      end)
      if a.teardown then a.teardown(v[1], r) end
      if not ok then error(("[%s] %s"):format(v[1], tostring(err)), 0) end
    end
  end)
end

---How many attempts this process registered (the suite asserts the total).
function M.count() return count end

---Every attempt registered in this process: {name, class, file}.
function M.registered() return registered end

---Ends the rig (call from the last test of a file; the Lua state's end would do it too).
function M.close()
  local all = rigs
  rigs = {}
  for _, r in pairs(all) do
    if r.session then pcall(r.session.terminate, r.session) end
    pcall(r.sandbox.terminate, r.sandbox)
  end
end

return M
