--- seer: the user-facing Lua API. `require "seer"` (also the global `seer` in scripts, `-e`
--- chunks and the REPL) gives the modules as fields, loaded on first use, plus a few helpers.
--- Submodules that a later part of seer provides (model, tokenizer, environment, ...) appear
--- here as soon as their lua/seer/<name>.lua exists.
---@class seer
---@field version string seer's version, e.g. "0.1.0"
---@field toolkit_dir string absolute path of the toolkit (lua/toolkit), always on package.path as toolkit.*
---@field json seerjson JSON encode/decode (see seer.json)
---@field pretty seerpretty human-readable formatting of Lua values (see seer.pretty)
local core = require "seer.core.host"

local M = {}

M.version = core.version()
M.toolkit_dir = core.lua_dir() .. "/toolkit"

---The directory of the Lua file that calls this (like Python's `Path(__file__).parent`);
---the working directory when called from `-e`, stdin or the REPL.
---@return string
function M.script_dir()
  local src = debug.getinfo(2, "S").source
  if src:sub(1, 1) == "@" then
    local dir = src:sub(2):match("^(.*)/[^/]*$") or "."
    return core.realpath(dir) or dir
  end
  return core.cwd()
end

---The whole content of a file. Raises "cannot read PATH: reason" when it cannot.
---@param path string
---@return string
function M.read_file(path)
  return core.read_file(path) -- a tail call: errors name the caller's line
end

---Writes data to path atomically (temporary file in the same directory, fsync, rename): a
---crash leaves the old file or the new one, never half of one. Raises on failure.
---@param path string
---@param data string
function M.write_file(path, data)
  return core.write_file(path, data) -- a tail call: errors name the caller's line
end

---Seconds on a monotonic clock (for timing; not wall-clock time).
---@return number
function M.now()
  return core.now()
end

---True once the user has pressed Ctrl-C while the current code runs (for long Lua loops that
---want to stop cleanly; the interrupt is also raised as the error "interrupted").
---@return boolean
function M.interrupted()
  return core.interrupted()
end

-- Submodules load on first access; a name that is not a module is an error listing the ones
-- that are, so a typo does not surface later as "attempt to index a nil value".
local function module_names()
  local names, seen, dir = {}, {}, core.lua_dir() .. "/seer"
  for _, f in ipairs(core.list_dir(dir)) do
    -- NAME.lua, or a folder NAME with an init.lua (a folder of submodules alone, e.g. cli, is not one)
    local n = f:match("^([%w_]+)%.lua$")
    if not n and f:match("^[%w_]+$") then
      local g = io.open(dir .. "/" .. f .. "/init.lua", "r")
      if g then g:close(); n = f end
    end
    if n and n ~= "init" and not seen[n] then seen[n] = true; names[#names + 1] = n end
  end
  table.sort(names)
  return names
end

setmetatable(M, {
  -- The REPL's Tab completion offers these names before they are loaded.
  __complete = module_names(),
  __index = function(t, k)
    if type(k) ~= "string" then return nil end
    local path = core.lua_dir() .. "/seer/" .. k .. ".lua"
    local f = io.open(path, "r")
    if not f then
      f = io.open(core.lua_dir() .. "/seer/" .. k .. "/init.lua", "r")
    end
    if not f then
      local hint = ""
      if k == "toolkit" then hint = " (the toolkit is not part of seer's table: require \"toolkit.<name>\", docs/toolkit.md)" end
      error(("seer has no module or field '%s'%s; modules: %s"):format(k, hint, table.concat(module_names(), ", ")), 2)
    end
    f:close()
    local mod = require("seer." .. k)
    rawset(t, k, mod)
    return mod
  end,
})

return M
