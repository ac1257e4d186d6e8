--- seer.workspace: what a session installs where its code runs (names as the reference):
--- libraries that cells can `require`, skills agents can read, local files and directories,
--- and code to run at start-up. `Workspace{...}` validates its fields; `workspace:get_library_docs()` is the text
--- that goes into an agent's prompt.
---@class seerworkspace
local M = {}

local core = require "seer.core.host"
local safe_fs = require "seer.safe_fs"

-- Installing writes into a folder the sandbox may have written first (its /workspace): every
-- write goes through seer.safe_fs beneath that folder, so a directory replaced by a symlink, a
-- file replaced by a link or a fifo, or a swap in between, is refused or replaced and never
-- followed onto the host (docs/workspace.md).
local function as_root(dir)
  if type(dir) == "table" and getmetatable(dir) == safe_fs.Root then return dir end
  if type(dir) ~= "string" or dir == "" then error("install(dir): dir must be a directory path", 3) end
  require("seer.process").mkdir_p(dir)
  return safe_fs.root(dir, "the workspace")
end

local function put(root, rel, content, mode)
  local ok, err = root:write(rel, content, { mkdirs = true, mode = mode })
  if not ok then error(("installing the workspace: %s"):format(err), 0) end
end

---------------------------------------------------------------------------------------------
-- Library

---@class seerworkspace.Library
---@field name string the name cells `require`
---@field files table<string, string> relative path -> content (e.g. {["steer.lua"] = "..."})
---@field docs string the module's documentation ("" when it has none)
local Library = {}
Library.__index = Library
Library.__name = "Library"
M.Library = Library

-- The leading comment block of a Lua module (`---`/`--` lines or a `--[[ ]]` block).
local function leading_docs(code)
  local long = code:match("^%s*%-%-%[(=*)%[")
  if long then
    local body = code:match("^%s*%-%-%[" .. long .. "%[\n?(.-)%]" .. long .. "%]")
    return body and body:match("^%s*(.-)%s*$") or ""
  end
  local lines = {}
  for line in (code .. "\n"):gmatch("([^\n]*)\n") do
    local text = line:match("^%s*%-%-%-?%s?(.*)$")
    if not text or line:match("^%s*%-%-%-?@") then
      if #lines > 0 or not text then break end
    else
      lines[#lines + 1] = text
    end
  end
  return table.concat(lines, "\n"):gsub("%s+$", "")
end
M.leading_docs = leading_docs

local function check_name(name, what)
  if type(name) ~= "string" or not name:match("^[%a_][%w_%.]*$") then
    error(("%s: the library name %q must be a valid Lua module name (letters, digits, _ and .)"):format(what, tostring(name)), 3)
  end
end

-- The name option of the from_* constructors: {name = ...}, or the name itself (the reference
-- passes it positionally: Library.from_file(path, "name")).
local function name_opt(opts, what)
  if opts == nil then return nil end
  if type(opts) == "string" then return opts end
  if type(opts) ~= "table" then
    error(("%s: the second argument is the library's name (a string) or {name = ...}, not a %s"):format(what, type(opts)), 3)
  end
  for k in pairs(opts) do
    if k ~= "name" then error(("%s: unknown option %q (the only option is name)"):format(what, tostring(k)), 3) end
  end
  return opts.name
end

---True when the library is one Lua file (from_file, from_code), false for a package.
---@return boolean
function Library:is_single_file()
  local n = 0
  for _ in pairs(self.files) do n = n + 1 end
  return n == 1
end

---The library's documentation as the agent's prompt shows it: a heading with the name to
---`require`, then its docs (or a line saying it has none).
---@return string
function Library:get_prompt_docs()
  local docs = self.docs ~= "" and self.docs or "(no documentation in the module)"
  return ("## Library `%s`\nUse it with `local %s = require \"%s\"`.\n\n%s"):format(self.name,
    self.name:gsub("%.", "_"), self.name, docs)
end

---A library from explicit files: `Library{name = "tools", files = {["tools.lua"] = code}, docs = "..."}`.
---@param t {name: string, files: table<string, string>, docs?: string}
---@return seerworkspace.Library
function Library.new(t)
  check_name(t.name, "Library")
  if type(t.files) ~= "table" or next(t.files) == nil then
    error("Library: files must be a table of relative path -> content with at least one file", 2)
  end
  for path, content in pairs(t.files) do
    -- no NUL or control characters either: the C side cuts a path at NUL ("a\0b.lua" wrote "a")
    if type(path) ~= "string" or path == "" or path:match("^/") or path:match("/$") or path:match("%.%.")
        or path:match("%c") or type(content) ~= "string" then
      error(("Library %s: files must map relative paths without '..' to strings (bad entry %q)"):format(t.name, tostring(path)), 2)
    end
  end
  return setmetatable({ name = t.name, files = t.files, docs = t.docs or "" }, Library)
end
setmetatable(Library, { __call = function(_, t) return Library.new(t) end })

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- How to get a Lua version of the Python file `path` (the reference's libraries are Python):
-- a .lua file beside it, seer's toolkit module of the same name, or porting it.
local function port_hint(path)
  local base = path:match("([^/]+)%.py$") or path:match("([^/]+)$")
  local beside = path:gsub("%.py$", "") .. ".lua"
  if path:match("%.py$") and exists(beside) then
    return ("a Lua version is beside it: Library.from_file(%q)"):format(beside)
  end
  local mod = base and base:gsub("%.py$", "")
  if mod and mod:match("^[%a_][%w_]*$") and exists(core.lua_dir() .. "/toolkit/" .. mod .. ".lua") then
    return ("seer's toolkit has it in Lua: cells `require \"toolkit.%s\"` directly (no library needed; docs/toolkit.md)"):format(mod)
  end
  local port = "port it to a Lua module (a .lua file returning a table of functions; docs/workspace.md) "
    .. "and pass that file, or use Library.from_code(name, code)"
  if path:match("%.py$") then return port end
  return "if it holds Lua code, give it a name ending in .lua; otherwise " .. port
end

---A library from one Lua file (a path ending in `.lua`); `name` defaults to the file's name
---without `.lua`. Any other file is refused: seer libraries are Lua modules the sandbox's Lua
---kernel `require`s (a Python file, the reference's kind, is refused with the way to a Lua version).
---@param path string
---@param opts? {name?: string}|string the name, as a table field or (the reference's way) itself
---@return seerworkspace.Library
function Library.from_file(path, opts)
  if type(path) ~= "string" then error("Library.from_file(path, name): path must be a string", 2) end
  local given = name_opt(opts, "Library.from_file")
  if not path:match("%.lua$") then
    local what = path:match("%.py$") and "is a Python file" or "is not a Lua file (its name does not end in .lua)"
    error(("Library.from_file: %s %s; seer libraries are Lua modules that the notebook's Lua kernel "
      .. "requires, so %s"):format(path, what, port_hint(path)), 2)
  end
  local ok, code = pcall(core.read_file, path)
  if not ok then error(("Library.from_file: %s"):format(code), 2) end
  local name = given or path:match("([^/]+)%.lua$")
  check_name(name, "Library.from_file")
  return setmetatable({ name = name, files = { [name:gsub("%.", "/") .. ".lua"] = code }, docs = leading_docs(code) }, Library)
end

---A library from a directory holding init.lua (a package) and its other .lua files.
---@param path string
---@param opts? {name?: string}
---@return seerworkspace.Library
function Library.from_directory(path, opts)
  if type(path) ~= "string" then error("Library.from_directory(path, name): path must be a string", 2) end
  local given = name_opt(opts, "Library.from_directory")
  path = path:gsub("/+$", "")
  local init = path .. "/init.lua"
  local ok, code = pcall(core.read_file, init)
  if not ok then
    local py = exists(path .. "/__init__.py") and "; it holds __init__.py: a Python package, which seer's Lua kernel cannot load (port its modules to Lua)" or ""
    error(("Library.from_directory: %s has no init.lua (a library directory is a Lua package: init.lua plus modules)%s"):format(path, py), 2)
  end
  local name = given or path:match("([^/]+)$")
  check_name(name, "Library.from_directory")
  local files = {}
  local function walk(dir, rel)
    for _, f in ipairs(core.list_dir(dir)) do
      local full, r = dir .. "/" .. f, (rel == "" and f or rel .. "/" .. f)
      local fh = io.open(full .. "/.", "r")
      if fh then fh:close(); walk(full, r)
      elseif f:match("%.lua$") then files[name .. "/" .. r] = core.read_file(full) end
    end
  end
  walk(path, "")
  return setmetatable({ name = name, files = files, docs = leading_docs(code) }, Library)
end

---A library from a string of Lua code.
---@param name string
---@param code string
---@return seerworkspace.Library
function Library.from_code(name, code)
  check_name(name, "Library.from_code")
  if type(code) ~= "string" then error("Library.from_code: code must be a string", 2) end
  return setmetatable({ name = name, files = { [name:gsub("%.", "/") .. ".lua"] = code }, docs = leading_docs(code) }, Library)
end

---Writes the library's files under dir (creating directories); no link under dir is followed.
---@param dir string|seersafe_fs.Root
function Library:install(dir)
  local root = as_root(dir)
  for rel, content in pairs(self.files) do put(root, rel, content) end
end

---------------------------------------------------------------------------------------------
-- Skill

---A skill: a directory with SKILL.md (YAML front matter `name`, `description`, then
---instructions) and any supporting files, which agents such as Claude Code discover and read.
---@class seerworkspace.Skill
---@field name string
---@field description string
---@field files table<string, string> relative path -> content; SKILL.md among them
local Skill = {}
Skill.__index = Skill
Skill.__name = "Skill"
M.Skill = Skill

-- The front matter of a SKILL.md: a table of its `key: value` lines, and the body after it.
local function front_matter(md)
  local head, body = md:match("^%-%-%-\r?\n(.-)\r?\n%-%-%-\r?\n?(.*)$")
  if not head then return {}, md end
  local t = {}
  for line in (head .. "\n"):gmatch("([^\n]*)\n") do
    local k, v = line:match("^([%w_-]+):%s*(.-)%s*$")
    if k then t[k] = (v:gsub('^"(.*)"$', "%1"):gsub("^'(.*)'$", "%1")) end
  end
  return t, body
end
M.front_matter = front_matter

local function check_skill_name(name, what)
  if type(name) ~= "string" or not name:match("^[%w][%w_.-]*$") then
    error(("%s: the skill name %q must be letters, digits, '_', '-' or '.'"):format(what, tostring(name)), 3)
  end
end

---A skill from explicit files: `Skill{name = "x", description = "...", files = {["SKILL.md"] = ...}}`.
---Without SKILL.md in files, one is written from name and description.
---@param t {name: string, description?: string, files?: table<string, string>}
---@return seerworkspace.Skill
function Skill.new(t)
  if type(t) ~= "table" then error("Skill{name = ..., description = ..., files = {...}}", 2) end
  check_skill_name(t.name, "Skill")
  local files = {}
  for path, content in pairs(t.files or {}) do
    if type(path) ~= "string" or path:match("^/") or path:match("%.%.") or type(content) ~= "string" then
      error(("Skill %s: files must map relative paths without '..' to strings (bad entry %q)"):format(t.name, tostring(path)), 2)
    end
    files[path] = content
  end
  local description = t.description
  if files["SKILL.md"] then
    local fm = front_matter(files["SKILL.md"])
    description = description or fm.description
  else
    if type(description) ~= "string" or description == "" then
      error(("Skill %s: give a description (or a SKILL.md in files)"):format(t.name), 2)
    end
    files["SKILL.md"] = ("---\nname: %s\ndescription: %s\n---\n"):format(t.name, description:gsub("\n", " "))
  end
  return setmetatable({ name = t.name, description = description or "", files = files }, Skill)
end
setmetatable(Skill, { __call = function(_, t) return Skill.new(t) end })

local function read_tree(path, files, rel)
  for _, f in ipairs(core.list_dir(path)) do
    local full, r = path .. "/" .. f, (rel == "" and f or rel .. "/" .. f)
    local fh = io.open(full .. "/.", "r")
    if fh then fh:close(); read_tree(full, files, r)
    else files[r] = core.read_file(full) end
  end
end

---A skill from a directory holding SKILL.md (and whatever else it needs). The name is the
---front matter's `name`, else the directory's name.
---@param path string
---@return seerworkspace.Skill
function Skill.from_dir(path)
  if type(path) ~= "string" then error("Skill.from_dir(path): path must be a string", 2) end
  path = path:gsub("/+$", "")
  local ok, md = pcall(core.read_file, path .. "/SKILL.md")
  if not ok then error(("Skill.from_dir: %s has no SKILL.md (a skill directory holds SKILL.md with name and description)"):format(path), 2) end
  local fm = front_matter(md)
  local name = fm.name or path:match("([^/]+)$")
  check_skill_name(name, "Skill.from_dir")
  local files = {}
  read_tree(path, files, "")
  return setmetatable({ name = name, description = fm.description or "", files = files }, Skill)
end

---Writes the skill under dir/<name>/ and returns that directory; no link under dir is
---followed. prefix (a relative path) puts it under dir/prefix/<name>/.
---@param dir string|seersafe_fs.Root
---@param prefix? string
---@return string
function Skill:install(dir, prefix)
  local root = as_root(dir)
  local base = (prefix and prefix ~= "" and (prefix .. "/") or "") .. self.name
  for rel, content in pairs(self.files) do put(root, base .. "/" .. rel, content) end
  return root.path .. "/" .. base
end

---A library from a skill directory: SKILL.md is its documentation and its code is the Lua
---module in the directory (`code.lua`, `<name>.lua` or `init.lua`, as the reference loads
---code.py), required under the skill's name.
---@param path string
---@param opts? {name?: string}
---@return seerworkspace.Library
function Library.from_skill_dir(path, opts)
  local given = name_opt(opts, "Library.from_skill_dir")
  local ok, skill = pcall(Skill.from_dir, path)
  if not ok then error((tostring(skill):gsub("Skill%.from_dir", "Library.from_skill_dir")), 2) end
  local name = given or skill.name:gsub("[-.]", "_")
  check_name(name, "Library.from_skill_dir")
  local code
  for _, f in ipairs{ "code.lua", skill.name .. ".lua", name .. ".lua", "init.lua" } do
    if skill.files[f] then code = skill.files[f] break end
  end
  if not code then
    local py = skill.files["code.py"] and "; its code.py is Python, which seer's Lua kernel cannot load: port it to code.lua" or ""
    error(("Library.from_skill_dir: %s has no Lua code (code.lua, %s.lua or init.lua beside SKILL.md)%s"):format(path, skill.name, py), 2)
  end
  local _, body = front_matter(skill.files["SKILL.md"])
  return setmetatable({ name = name, files = { [name:gsub("%.", "/") .. ".lua"] = code },
                        docs = (body:gsub("^%s+", ""):gsub("%s+$", "")) }, Library)
end

-- The lines first..last of a text.
local function line_range(text, first, last)
  local out, i = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    i = i + 1
    if i > last then break end
    if i >= first then out[#out + 1] = line end
  end
  return out
end

---A skill from a Lua function (the reference's `Skill.from_function(fn)` for an `@expose`d
---function): its source (read with debug.getinfo from the file or string it was loaded from)
---becomes `<name>.lua` and a code block in SKILL.md; the description is opts.description, else
---the first line of the `---` comment right above the function; the name is opts.name, else the
---name in `function NAME(`, `local function NAME(` or `NAME = function(`. A C function, a
---function whose source was not kept (loaded from a chunk named "=..."), or one without a
---description is an error saying what to pass. The agent reads the skill: it shows how the
---function works; it is not called through the skill (serve an interface.lua with
---`expose_as = "skill"` for that).
---@param fn function
---@param opts? {name?: string, description?: string}
---@return seerworkspace.Skill
function Skill.from_function(fn, opts)
  local what = "Skill.from_function(fn, {name, description})"
  if type(fn) ~= "function" then error(what .. ": fn must be a Lua function, not a " .. type(fn), 2) end
  if opts ~= nil and type(opts) ~= "table" then error(what .. ": the second argument is a table of options", 2) end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "name" and k ~= "description" then
      error(("Skill.from_function: unknown option %q (the options are name, description)"):format(tostring(k)), 2)
    end
  end
  local info = debug.getinfo(fn, "S")
  if info.what == "C" then
    error("Skill.from_function: a C function has no Lua source to show the agent; pass a function written in Lua, or write the skill with Skill{name, description, files} or Skill.from_dir", 2)
  end
  if info.linedefined == 0 then
    error("Skill.from_function: fn is a whole chunk (a loaded file or string), not a function in it; pass the function itself", 2)
  end
  local text
  local src = info.source
  if src:sub(1, 1) == "@" then
    local ok, t = pcall(core.read_file, src:sub(2))
    if not ok then error(("Skill.from_function: the function's file %s cannot be read (%s)"):format(src:sub(2), tostring(t)), 2) end
    text = t
  elseif src:sub(1, 1) == "=" then
    error(("Skill.from_function: the function was loaded from %s, whose source Lua did not keep; load it from a file or a string, or write the skill with Skill{name, description, files}"):format(src:sub(2)), 2)
  else
    text = src
  end
  local lines = line_range(text, info.linedefined, info.lastlinedefined)
  local head = lines[1] or ""
  local name = opts.name or head:match("function%s+[%w_.:]-([%a_][%w_]*)%s*%(")
    or head:match("([%a_][%w_]*)%s*=%s*function%s*%(")
  if not name then
    error(("Skill.from_function: the function at %s:%d has no name in its source; give {name = ...}"):format(info.short_src, info.linedefined), 2)
  end
  check_skill_name(name, "Skill.from_function")
  -- the comment right above the function: its docs
  local above, docs = line_range(text, 1, info.linedefined - 1), {}
  for i = #above, 1, -1 do
    local l = above[i]:match("^%s*%-%-%-?%s?(.*)$")
    if not l then break end
    if not l:match("^@") then table.insert(docs, 1, l) end
  end
  local doc = table.concat(docs, "\n"):gsub("^%s+", ""):gsub("%s+$", "")
  local description = opts.description or doc:match("^[^\n]+")
  if type(description) ~= "string" or description == "" then
    error(("Skill.from_function: %s has no description: give {description = ...} or put a --- comment above the function"):format(name), 2)
  end
  -- the source's own indentation, less what all its lines share
  local indent
  for _, l in ipairs(lines) do
    if l:match("%S") then
      local w = #l:match("^%s*")
      indent = indent and math.min(indent, w) or w
    end
  end
  for i, l in ipairs(lines) do lines[i] = l:sub((indent or 0) + 1) end
  local code = table.concat(lines, "\n") .. "\n"
  local md = { ("---\nname: %s\ndescription: %s\n---\n"):format(name, (description:gsub("\n", " "))),
    ("# %s\n"):format(name) }
  if doc ~= "" then md[#md + 1] = doc .. "\n" end
  md[#md + 1] = ("The function (`%s.lua`, from %s:%d):\n\n```lua\n%s```\n"):format(name, info.short_src, info.linedefined, code)
  return setmetatable({ name = name, description = description,
                        files = { ["SKILL.md"] = table.concat(md, "\n"), [name .. ".lua"] = code } }, Skill)
end

---------------------------------------------------------------------------------------------
-- Workspace

local FIELDS = {
  libraries = "table", skills = "table", skill_dirs = "table", local_files = "table", local_dirs = "table",
  custom_init_code = "string", preload_models = "boolean", hidden_model_loading = "boolean",
}

---@class seerworkspace.Workspace
---@field libraries seerworkspace.Library[]
---@field skills seerworkspace.Skill[] the skills, those read from skill_dirs included
---@field skill_dirs string[]
---@field local_files {[1]: string, [2]: string}[] (local path, path in the workspace)
---@field local_dirs {[1]: string, [2]: string}[]
---@field custom_init_code string Lua run in the kernel after the models load
---@field preload_models boolean load the sandbox's models into the kernel (default true)
---@field hidden_model_loading boolean keep the loading cells out of the notebook (default true)
local Workspace = {}
Workspace.__index = Workspace
Workspace.__name = "Workspace"

---@param t? table
---@return seerworkspace.Workspace
function M.Workspace(t)
  t = t or {}
  local names = {}
  for k in pairs(FIELDS) do names[#names + 1] = k end
  table.sort(names)
  for k, v in pairs(t) do
    if not FIELDS[k] then
      error(("Workspace: unknown field %q; fields: %s"):format(tostring(k), table.concat(names, ", ")), 2)
    end
    if type(v) ~= FIELDS[k] then error(("Workspace.%s must be a %s, not a %s"):format(k, FIELDS[k], type(v)), 2) end
  end
  -- the list fields are lists: one Library given as `libraries` had no 1..n entries, so the
  -- workspace had no library and said nothing
  local checks = require "seer.checks"
  for _, f in ipairs({ "libraries", "skills", "skill_dirs", "local_files", "local_dirs" }) do
    local v = t[f]
    if v ~= nil then
      if getmetatable(v) == Library or getmetatable(v) == Skill then
        error(("Workspace.%s must be a list: %s = { x }, not %s = x"):format(f, f, f), 2)
      end
      checks.list("Workspace." .. f, v, "entry", 2)
    end
  end
  local seen = {}
  for i, lib in ipairs(t.libraries or {}) do
    if getmetatable(lib) ~= Library then
      error(("Workspace.libraries[%d] is not a Library; make one with Library.from_file, from_directory or from_code"):format(i), 2)
    end
    -- two libraries of one name install over each other
    if seen[lib.name] then error(("Workspace.libraries[%d] and [%d] are both named %q"):format(seen[lib.name], i, lib.name), 2) end
    seen[lib.name] = i
  end
  for i, sk in ipairs(t.skills or {}) do
    if getmetatable(sk) ~= Skill then
      error(("Workspace.skills[%d] is not a Skill; make one with Skill.from_dir or Skill{...}"):format(i), 2)
    end
  end
  local skills = {}
  for _, sk in ipairs(t.skills or {}) do skills[#skills + 1] = sk end
  for i, d in ipairs(t.skill_dirs or {}) do
    if type(d) ~= "string" then error(("Workspace.skill_dirs[%d] must be a path"):format(i), 2) end
    local ok, sk = pcall(Skill.from_dir, d)
    if not ok then error(("Workspace.skill_dirs[%d]: %s"):format(i, tostring(sk):gsub("^Skill%.from_dir: ", "")), 2) end
    skills[#skills + 1] = sk
  end
  local seen_skill = {}
  for _, sk in ipairs(skills) do
    if seen_skill[sk.name] then error(("Workspace: two skills are named %q (skills and skill_dirs together)"):format(sk.name), 2) end
    seen_skill[sk.name] = true
  end
  for _, f in ipairs({ "local_files", "local_dirs" }) do
    for i, pair in ipairs(t[f] or {}) do
      if type(pair) ~= "table" or type(pair[1]) ~= "string" or type(pair[2]) ~= "string" then
        error(("Workspace.%s[%d] must be {local_path, workspace_path}"):format(f, i), 2)
      end
    end
  end
  local w = { libraries = t.libraries or {}, local_files = t.local_files or {}, local_dirs = t.local_dirs or {},
              custom_init_code = t.custom_init_code or "", skills = skills, skill_dirs = t.skill_dirs or {} }
  w.preload_models = t.preload_models ~= false
  w.hidden_model_loading = t.hidden_model_loading ~= false
  return setmetatable(w, Workspace)
end

---The libraries' documentation for an agent's prompt, in the reference's format.
---@return string
function Workspace:get_library_docs()
  if #self.libraries == 0 then return "" end
  local parts = { "# Available Libraries\n" }
  for _, lib in ipairs(self.libraries) do
    local docs = lib.docs ~= "" and lib.docs or ('Available via: `require "%s"`'):format(lib.name)
    parts[#parts + 1] = ("## %s\n\n%s\n"):format(lib.name, docs)
  end
  return table.concat(parts, "\n")
end

M.SKILLS_DIR = ".claude/skills"

pcall(require("ffi").cdef, "int access(const char *path, int mode);")

-- The path in the workspace of a local_files/local_dirs destination: relative, or absolute
-- under the workspace (its host path, or /workspace/... as the sandbox sees it).
local function dest_rel(root, p, what, i)
  if not p:match("^/") then return p end
  local rel = root:rel(p) or (p:match("^/workspace/(.+)$"))
  if not rel then
    error(("Workspace.%s[%d]: %s is outside the workspace; give a path relative to it (or under /workspace/)"):format(what, i, p), 0)
  end
  return rel
end

-- Copies the host directory src (the researcher's: read normally, links in it followed, as
-- its content is what is meant) to rel beneath root, keeping the executable bit.
local function copy_dir(root, src, rel, depth)
  if depth > 64 then error(("Workspace.local_dirs: %s is nested more than 64 levels (a link cycle?)"):format(src), 0) end
  local ok, err = root:mkdirs(rel)
  if not ok then error(("installing the workspace: %s"):format(err), 0) end
  local entries, lerr = require("seer.core.sandbox").listdir(src)
  if not entries then error(("Workspace.local_dirs: cannot read %s: %s"):format(src, lerr), 0) end
  for _, e in ipairs(entries) do
    local from, to = src .. "/" .. e.name, (rel == "" and e.name or rel .. "/" .. e.name)
    local kind = e.type
    if kind == "link" then
      local real = core.realpath(from)
      local st = real and safe_fs.lstat(real)
      kind = st and st.type or "broken"
      from = real or from
    end
    if kind == "dir" then copy_dir(root, from, to, depth + 1)
    elseif kind == "file" then
      local exec = require("ffi").C.access(from, 1) == 0
      local cok, cerr = root:copy_in(to, from, { mode = exec and tonumber("755", 8) or tonumber("644", 8) })
      if not cok then error(("installing the workspace: %s"):format(cerr), 0) end
    end -- broken links, fifos, sockets and devices of the source are not copied
  end
end

---Installs libraries (requireable from dir), skills (under dir/.claude/skills/<name>/, where
---Claude Code and other agents discover project skills) and local files/directories under dir.
---Everything is written beneath dir without following any link there (a sandbox's workspace
---is the sandbox's to change); local_files/local_dirs destinations are relative to dir (or
---absolute under it, or under /workspace/).
---@param dir string|seersafe_fs.Root
function Workspace:install(dir)
  local root = as_root(dir)
  for _, lib in ipairs(self.libraries) do lib:install(root) end
  for _, sk in ipairs(self.skills) do sk:install(root, M.SKILLS_DIR) end
  for i, pair in ipairs(self.local_files) do
    local rel = dest_rel(root, pair[2], "local_files", i)
    local exec = require("ffi").C.access(pair[1], 1) == 0
    local ok, err = root:copy_in(rel, pair[1], { mkdirs = true, mode = exec and tonumber("755", 8) or tonumber("644", 8) })
    if not ok then error(("Workspace.local_files[%d]: %s"):format(i, err), 0) end
  end
  for i, pair in ipairs(self.local_dirs) do
    local st = safe_fs.lstat(core.realpath(pair[1]) or pair[1])
    if not st or st.type ~= "dir" then error(("Workspace.local_dirs[%d]: %s is not a directory"):format(i, pair[1]), 0) end
    copy_dir(root, core.realpath(pair[1]), dest_rel(root, pair[2], "local_dirs", i), 0)
  end
end

return M
