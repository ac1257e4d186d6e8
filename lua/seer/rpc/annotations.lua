--- seer.rpc.annotations: an exposed function's description and parameter schema, read from the
--- LuaCATS comment above its definition (`---` lines: free text, `---@param name type text`,
--- `---@return type [name] text`). Parameter names come from the function itself; a parameter
--- without `---@param` is reported as a warning and has no type (any JSON value), never a
--- silent string.
local M = {}

local json = require "seer.json"

local function trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end

-- Splits a type expression at top-level occurrences of sep (outside <>, (), {}, []).
local function split_top(s, sep)
  local parts, depth, start = {}, 0, 1
  for i = 1, #s do
    local c = s:sub(i, i)
    if c == "<" or c == "(" or c == "{" or c == "[" then depth = depth + 1
    elseif c == ">" or c == ")" or c == "}" or c == "]" then depth = depth - 1
    elseif c == sep and depth == 0 then
      parts[#parts + 1] = trim(s:sub(start, i - 1))
      start = i + 1
    end
  end
  parts[#parts + 1] = trim(s:sub(start))
  return parts
end

-- Reads one type expression at the start of s; returns it and the rest of the line.
local function read_type(s)
  s = s:gsub("^%s+", "")
  local depth, i, n = 0, 1, #s
  local in_str
  while i <= n do
    local c = s:sub(i, i)
    if in_str then
      if c == in_str then in_str = nil end
    elseif c == '"' or c == "'" then in_str = c
    elseif c == "<" or c == "(" or c == "{" or c == "[" then depth = depth + 1
    elseif c == ">" or c == ")" or c == "}" or c == "]" then depth = depth - 1
    elseif c:match("%s") and depth == 0 then
      -- "string | nil" and "fun(): x" keep going across spaces around | and :
      local rest = s:sub(i):match("^%s*([|:,])")
      if not rest and s:sub(i - 1, i - 1) ~= "|" and s:sub(i - 1, i - 1) ~= "," then break end
    end
    i = i + 1
  end
  return trim(s:sub(1, i - 1)), trim(s:sub(i))
end
M.read_type = read_type

local simple = {
  string = { type = "string" }, number = { type = "number" }, integer = { type = "integer" },
  boolean = { type = "boolean" }, ["nil"] = { type = "null" }, null = { type = "null" },
  table = { type = { "object", "array" } }, any = {}, unknown = {},
}

---JSON Schema for a LuaCATS type, and whether the type admits nil (optional).
---@param t string
---@return table schema
---@return boolean optional
function M.schema(t)
  t = trim(t or "")
  local optional = false
  if t:sub(-1) == "?" then optional, t = true, trim(t:sub(1, -2)) end
  if t:match("^%b()$") then t = trim(t:sub(2, -2)) end
  local alts = split_top(t, "|")
  if #alts > 1 then
    local schemas, enum = {}, {}
    local all_literals = true
    for _, a in ipairs(alts) do
      if a == "nil" then optional = true
      else
        local lit = a:match('^"(.*)"$') or a:match("^'(.*)'$")
        if lit then enum[#enum + 1] = lit else all_literals = false end
        local s, o = M.schema(a)
        if o then optional = true end
        schemas[#schemas + 1] = s
      end
    end
    if #schemas == 1 then return schemas[1], optional end
    if all_literals then return { type = "string", enum = enum }, optional end
    local types, plain = {}, true
    for _, s in ipairs(schemas) do
      if type(s.type) == "string" and next(s, next(s)) == nil then types[#types + 1] = s.type else plain = false end
    end
    if plain then return { type = types }, optional end
    return { anyOf = schemas }, optional
  end
  if simple[t] then
    local c = {}
    for k, v in pairs(simple[t]) do c[k] = v end
    return c, optional
  end
  local lit = t:match('^"(.*)"$') or t:match("^'(.*)'$")
  if lit then return { type = "string", enum = { lit } }, optional end
  if t:match("%[%]$") then
    return { type = "array", items = (M.schema(t:sub(1, -3))) }, optional
  end
  local k, v = t:match("^table%s*<(.-),(.*)>$")
  if k then return { type = "object", additionalProperties = (M.schema(v)) }, optional end
  if t:match("^%b{}$") then
    local body = trim(t:sub(2, -2))
    local props, required = {}, {}
    for _, field in ipairs(split_top(body, ",")) do
      local name, q, ft = field:match("^([%a_][%w_]*)(%??)%s*:%s*(.+)$")
      if name then
        local s, o = M.schema(ft)
        props[name] = s
        if q ~= "?" and not o then required[#required + 1] = name end
      end
    end
    local s = { type = "object", properties = props }
    if #required > 0 then s.required = required end
    return s, optional
  end
  if t:match("^fun%(") then return { description = "a function (cannot be sent over RPC)" }, optional end
  -- a class name (seer.Tensor, ...): nothing JSON can check
  if t:lower():match("tensor") then
    return { description = "a tensor (from Lua: a seer.tensor; as JSON: nested arrays of numbers)" }, optional
  end
  return { description = "a " .. t }, optional
end

---The `---` comment block that ends right above line `line` of lines.
---@param lines string[]
---@param line integer
---@return string[]
function M.doc_block(lines, line)
  local docs = {}
  local i = line - 1
  while i >= 1 and lines[i]:match("^%s*%-%-%-") do
    table.insert(docs, 1, (lines[i]:gsub("^%s*%-%-%- ?", "")))
    i = i - 1
  end
  return docs
end

---Parses a doc block: description text, @param and @return entries.
---@param docs string[]
---@return {description: string, params: table<string, {type: string, text: string}>, param_order: string[], returns: {type: string, name?: string, text: string}[]}
function M.parse(docs)
  local text, params, order, returns = {}, {}, {}, {}
  for _, d in ipairs(docs) do
    local tag, rest = d:match("^@(%w+)%s*(.*)$")
    if tag == "param" then
      local name, after = rest:match("^([%a_][%w_]*%??)%s+(.*)$")
      if not name then name, after = rest:match("^(%.%.%.)%s*(.*)$") end
      if name then
        local ty, desc = read_type(after)
        local opt = name:sub(-1) == "?"
        name = name:gsub("%?$", "")
        params[name] = { type = opt and (ty .. "?") or ty, text = desc }
        order[#order + 1] = name
      end
    elseif tag == "return" then
      local ty, desc = read_type(rest)
      returns[#returns + 1] = { type = ty, text = (desc:gsub("^#%s*", "")) }
    elseif not tag then
      text[#text + 1] = d
    end
  end
  return { description = trim(table.concat(text, "\n")), params = params, param_order = order, returns = returns }
end

-- Parameter names of a Lua function, and whether it takes `...`.
local function param_names(fn)
  local names = {}
  local info = debug.getinfo(fn, "u")
  for i = 1, info.nparams or 64 do
    local p = debug.getlocal(fn, i)
    if not p then break end
    names[#names + 1] = p
  end
  return names, info.isvararg
end
M.param_names = param_names

---The description of an exposed function for clients: name, description, params (each with
---name, type, schema, optional, description), returns, input_schema (JSON Schema object),
---signature, and warnings for what the annotations leave out.
---@param name string
---@param fn function
---@param lines string[]|nil the source file's lines
---@param line integer|nil the line the comment block sits above
---@return table spec
function M.describe(name, fn, lines, line)
  local docs = (lines and line) and M.doc_block(lines, line) or {}
  local p = M.parse(docs)
  local names, vararg = param_names(fn)
  local spec = { name = name, description = p.description, params = json.array(), returns = json.array(),
                 warnings = json.array(), vararg = vararg or nil }
  local props, required = json.object(), json.array()
  local sig = {}
  local known = {}
  for _, pname in ipairs(names) do
    known[pname] = true
    local a = p.params[pname]
    local entry = { name = pname }
    if a then
      local s, opt = M.schema(a.type)
      entry.type, entry.schema, entry.optional, entry.description = a.type:gsub("%?$", ""), s, opt, a.text
      if a.text ~= "" then s.description = s.description and (a.text .. " (" .. s.description .. ")") or a.text end
      props[pname] = s
      if not opt then required[#required + 1] = pname end
      sig[#sig + 1] = pname .. (opt and "?" or "") .. ": " .. entry.type
    else
      entry.type, entry.schema, entry.optional = "any", json.object(), false
      props[pname] = json.object()
      required[#required + 1] = pname
      sig[#sig + 1] = pname
      spec.warnings[#spec.warnings + 1] = ("%s: parameter %s has no ---@param annotation, so its type is unknown (any JSON value); add `---@param %s TYPE description`"):format(name, pname, pname)
    end
    spec.params[#spec.params + 1] = entry
  end
  for _, pname in ipairs(p.param_order) do
    if not known[pname] and pname ~= "..." then
      spec.warnings[#spec.warnings + 1] = ("%s: ---@param %s names no parameter of the function (its parameters: %s)"):format(
        name, pname, #names > 0 and table.concat(names, ", ") or "none")
    end
  end
  if vararg then sig[#sig + 1] = "..." end
  for _, r in ipairs(p.returns) do spec.returns[#spec.returns + 1] = r end
  if p.description == "" then
    spec.warnings[#spec.warnings + 1] = ("%s: no description; write a --- comment above the function saying what it does"):format(name)
  end
  local ret = {}
  for _, r in ipairs(p.returns) do ret[#ret + 1] = r.type end
  spec.signature = ("%s(%s)%s"):format(name, table.concat(sig, ", "), #ret > 0 and (" -> " .. table.concat(ret, ", ")) or "")
  spec.input_schema = { type = "object", properties = props, required = required, additionalProperties = vararg and nil or false }
  if #required == 0 then spec.input_schema.required = nil end
  return spec
end

return M
