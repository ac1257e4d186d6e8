--- seer.checks: argument checks shared by seer's modules and the toolkit.
local M = {}

---Checks that `list` is a list without holes (only keys 1..n, none missing): ipairs and # stop
---at a hole, so what follows it would be dropped without a word. Raises "<where>: <what> 2 is
---missing (the list has a hole before <what> 3)", or "<where>: <what>s must be a list; it has a
---key x", at `level` as error() counts it from the caller (1: the caller itself).
---@param where string
---@param list table
---@param what string what one entry is called ("prompt", "sequence", "input")
---@param level? integer default 1
---@return integer n the list's length
function M.list(where, list, what, level)
  level = (level or 1) + 1
  local n = 0
  for k in pairs(list) do
    if type(k) ~= "number" or k < 1 or k ~= math.floor(k) then
      error(("%s: %ss must be a list; it has a key %s"):format(where, what, tostring(k)), level)
    end
    if k > n then n = k end
  end
  for i = 1, n do
    if list[i] == nil then error(("%s: %s %d is missing (the list has a hole before %s %d)"):format(where, what, i, what, n), level) end
  end
  return n
end

---Checks an options table by name: nil gives {}, anything but a table is refused, an unknown
---key raises "<where>: unknown option 'k'; valid options: a, b, c" (a misspelt option would
---otherwise leave the default it meant to change), and a value of the wrong type "<where>:
---option 'k' must be a <type>, got <type>". `valid` maps each option to its Lua type name, or
---"any". `level` as error() counts it from the caller (1: the caller itself).
---@param where string
---@param opts any
---@param valid table<string, string>
---@param level? integer default 1
---@return table opts
function M.options(where, opts, valid, level)
  level = (level or 1) + 1
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(("%s: options must be a table, got %s"):format(where, type(opts)), level) end
  for k in pairs(opts) do
    if valid[k] == nil then
      local names = {}
      for n in pairs(valid) do names[#names + 1] = n end
      table.sort(names)
      error(("%s: unknown option '%s'; valid options: %s"):format(where, tostring(k), table.concat(names, ", ")), level)
    end
  end
  for k, v in pairs(opts) do
    local want = valid[k]
    if want ~= "any" and type(v) ~= want then
      error(("%s: option '%s' must be a %s, got %s"):format(where, k, want, type(v)), level)
    end
  end
  return opts
end

---Checks that `v` is a whole number from `lo` to `hi` (a count, an index, a seed): a fraction,
---NaN, an infinity or a value out of range raises "<where>: <name> must be a whole number from
---<lo>, got <v>" (with " to <hi>" when `show_hi`), at `level` as error() counts it from the
---caller (1: the caller itself). nil passes (an option left out).
---@param where string
---@param name string how the message names the value ("k", "option 'steps'")
---@param v any
---@param lo number
---@param hi number
---@param level? integer default 1
---@param show_hi? boolean say the upper bound in the message
function M.whole(where, name, v, lo, hi, level, show_hi)
  if v == nil then return end
  if not (type(v) == "number" and v == math.floor(v) and v >= lo and v <= hi) then
    error(("%s: %s must be a whole number from %s%s, got %s"):format(where, name, ("%.0f"):format(lo),
      show_hi and (" to %.0f"):format(hi) or "", tostring(v)), (level or 1) + 1)
  end
end

-- seer's own Lua tree (lua/), to tell its error positions from the user's
local LUA_ROOT = (debug.getinfo(1, "S").source:match("^@(.*/)seer/[^/]*$"))

---Wraps a public function whose errors about its arguments arise in the functions it calls
---(the checks of seer.model, seer.interventions, toolkit functions, C constructors): such an error
---is raised again at the line that called the public function, without the position inside
---seer. Errors positioned anywhere else (a hook or callback of the caller's) pass unchanged.
---`deeper` (default 0): frames between the wrapped function's caller and the public function
---(1 for a helper the public function calls).
---@generic F: function
---@param f F
---@param deeper? integer
---@return F
function M.guard(f, deeper)
  local level = 2 + (deeper or 0)
  local function pack(...) return { n = select("#", ...), ... } end
  return function(...)
    local res = pack(pcall(f, ...))
    if res[1] then return unpack(res, 2, res.n) end
    local err = res[2]
    if type(err) == "string" and not err:match("^[^%s:]+:%d+: ") then error(err, level) end -- no position: the caller's
    if type(err) == "string" then
      local file, rest = err:match("^([^%s:]+):%d+: (.*)$")
      if file and ((LUA_ROOT and file:sub(1, #LUA_ROOT) == LUA_ROOT) or ("/" .. file):find("/lua/seer/", 1, true)
          or ("/" .. file):find("/lua/toolkit/", 1, true)) then
        error(rest, level) -- the line that called the public function
      end
    end
    error(err, 0)
  end
end

return M
