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

---A library from one Lua file; `name` defaults to the file's name without `.lua`.
---@param path string
---@param opts? {name?: string}|string the name, as a table field or (the reference's way) itself
---@return seerworkspace.Library
function Library.from_file(path, opts)
  if type(path) ~= "string" then error("Library.from_file(path, name): path must be a string", 2) end
  local given = name_opt(opts, "Library.from_file")
  local ok, code = pcall(core.read_file, path)
  if not ok then error(("Library.from_file: %s"):format(code), 2) end
  local name = given or path:match("([^/]+)%.lua$") or path:match("([^/]+)$")
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
    error(("Library.from_directory: %s has no init.lua (a library directory is a Lua package: init.lua plus modules)"):format(path), 2)
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
    error(("Library.from_skill_dir: %s has no Lua code (code.lua, %s.lua or init.lua beside SKILL.md)"):format(path, skill.name), 2)
  end
  local _, body = front_matter(skill.files["SKILL.md"])
  return setmetatable({ name = name, files = { [name:gsub("%.", "/") .. ".lua"] = code },
                        docs = (body:gsub("^%s+", ""):gsub("%s+$", "")) }, Library)
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
