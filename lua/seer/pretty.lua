--- seer.pretty: readable text for any Lua value, used by the REPL (and the notebook kernel)
--- to show results. Tables print with sorted keys, short ones on one line, nested ones
--- indented, cut at a depth and item limit; cycles print as <cycle>; a value with
--- __tostring (tensors, models) prints through it.
---@class seerpretty
local M = {}

---@class seerpretty.opts
---@field depth? integer how many table levels to expand (default 3)
---@field max_items? integer entries shown per table before "..." (default 50)
---@field width? integer line width that decides one-line vs indented (default 80)
---@field indent? string indentation unit (default two spaces)

local defaults = { depth = 3, max_items = 50, width = 80, indent = "  " }

local keywords = {}
for w in ("and break do else elseif end false for function goto if in local nil not or repeat return then true until while"):gmatch("%a+") do
  keywords[w] = true
end

local function quote(s)
  -- %q leaves C1 controls written in UTF-8 (U+0080-U+009F: 8-bit CSI and OSC, commands to
  -- some terminals) as they are; they are written as decimal escapes like the other controls
  return (string.format("%q", s):gsub("\\\n", "\\n"):gsub("\r", "\\r"):gsub("%z", "\\0")
    :gsub("\194([\128-\159])", function(b) return "\\194\\" .. b:byte() end))
end

local function key_text(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") and not keywords[k] then return k end
  if type(k) == "string" then return "[" .. quote(k) .. "]" end
  return "[" .. tostring(k) .. "]"
end

local type_order = { number = 1, string = 2, boolean = 3 }

local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return (type_order[ta] or 9) < (type_order[tb] or 9) or
      ((type_order[ta] or 9) == (type_order[tb] or 9) and ta < tb) end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

local function scalar(v)
  local t = type(v)
  if t == "string" then return quote(v) end
  if t == "number" then
    if v ~= v then return "nan" end
    if v == math.huge then return "inf" end
    if v == -math.huge then return "-inf" end
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
    return string.format("%.14g", v)
  end
  if t == "table" or t == "userdata" then
    local mt = getmetatable(v)
    if type(mt) == "table" and mt.__tostring then
      local ok, s = pcall(tostring, v)
      if ok then return s end
    end
  end
  if t ~= "table" then return tostring(v) end
  return nil
end

local function format(v, o, level, seen, pad)
  local s = scalar(v)
  if s then return s end
  if seen[v] then return "<cycle>" end
  if level >= o.depth then return "{...}" end
  local n = #v
  local keys = {}
  for k in pairs(v) do
    if not (type(k) == "number" and k >= 1 and k <= n and k == math.floor(k)) then keys[#keys + 1] = k end
  end
  if n == 0 and #keys == 0 then return "{}" end
  table.sort(keys, key_less)
  seen[v] = true
  local items, shown, total = {}, 0, n + #keys
  local inner = pad .. o.indent
  for i = 1, n do
    if shown >= o.max_items then break end
    items[#items + 1] = format(v[i], o, level + 1, seen, inner)
    shown = shown + 1
  end
  for _, k in ipairs(keys) do
    if shown >= o.max_items then break end
    items[#items + 1] = key_text(k) .. " = " .. format(v[k], o, level + 1, seen, inner)
    shown = shown + 1
  end
  seen[v] = nil
  if shown < total then items[#items + 1] = ("... (%d more)"):format(total - shown) end
  local one = "{ " .. table.concat(items, ", ") .. " }"
  if #one + #pad <= o.width and not one:find("\n", 1, true) then return one end
  return "{\n" .. inner .. table.concat(items, ",\n" .. inner) .. "\n" .. pad .. "}"
end

---Formats a value as readable Lua-like text.
---@param v any
---@param opts? seerpretty.opts
---@return string
function M.format(v, opts)
  local o = defaults
  if opts then
    o = {}
    for k, d in pairs(defaults) do
      if opts[k] == nil then o[k] = d else o[k] = opts[k] end
    end
    for k in pairs(opts) do
      if defaults[k] == nil then
        local valid = {}
        for dk in pairs(defaults) do valid[#valid + 1] = dk end
        table.sort(valid)
        error(("seer.pretty.format: unknown option '%s'; valid options: %s"):format(tostring(k), table.concat(valid, ", ")), 2)
      end
    end
  end
  return format(v, o, 0, {}, "")
end

---Prints each value formatted, tab-separated, as the REPL shows results.
function M.repl_print(...)
  local n = select("#", ...)
  if n == 0 then return end
  local parts = {}
  for i = 1, n do parts[i] = M.format((select(i, ...))) end
  io.write(table.concat(parts, "\t"), "\n")
end

return M
