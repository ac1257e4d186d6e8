--- seer.cli.args: the option walk the `seer` subcommands share. `--name value` and
--- `--name=value` both work; value() takes the option's value, and a missing one is reported
--- through on_error (which does not return).
local M = {}

---Iterates over the arguments: `for a, value in options(argv, usage_error) do ... end`.
---@param argv string[]
---@param on_error fun(msg: string)
---@return fun(): string?, fun(): string
function M.options(argv, on_error)
  local i = 0
  return function()
    i = i + 1
    local a = argv[i]
    if a == nil then return nil end
    local name, inline = a:match("^(%-%-[%w-]+)=(.*)$")
    if name then a = name end
    local function value()
      if inline then
        local v = inline
        inline = nil
        return v
      end
      i = i + 1
      if argv[i] == nil then on_error(a .. " needs a value") end
      return argv[i]
    end
    return a, value
  end
end

return M
