-- seer.workspace skills (Skill, Skill.from_dir, Library.from_skill_dir, skill_dirs, where they
-- install) and seer.local_session.create_local_session with a scoped library.
local T = require "testing"
local ws = require "seer.workspace"

local root = require("seer.core.host").lua_dir():gsub("/lua$", "")
local skill_dir = root .. "/tests/fixtures/rpc/skills/steering-hook"

T.test("workspace: Skill.from_dir reads SKILL.md and the files beside it", function()
  local s = ws.Skill.from_dir(skill_dir)
  T.eq(s.name, "steering-hook")
  T.eq(s.description, "Add a steering vector to the residual stream during generation.")
  T.ok(s.files["SKILL.md"])
  T.ok(s.files["code.lua"])
  T.eq(s.files["examples/use.lua"], "print('example')\n")
  T.raises(function() ws.Skill.from_dir(root .. "/tests/fixtures/rpc") end, "has no SKILL.md")
  local made = ws.Skill{ name = "notes", description = "Notes for the agent" }
  T.eq(made.files["SKILL.md"], "---\nname: notes\ndescription: Notes for the agent\n---\n")
  T.raises(function() ws.Skill{ name = "x" } end, "give a description")
  T.raises(function() ws.Skill{ name = "../x", description = "d" } end, "skill name")
end)

T.test("workspace: Library.from_skill_dir requires the skill's code under its name", function()
  local lib = ws.Library.from_skill_dir(skill_dir)
  T.eq(lib.name, "steering_hook")
  T.eq(lib.files["steering_hook.lua"], "--- steering helpers (test fixture)\nlocal M = {}\nfunction M.strength(x) return 2 * x end\nreturn M\n")
  T.contains(lib.docs, "# Steering hook")
  T.eq(ws.Library.from_skill_dir(skill_dir, { name = "steer" }).name, "steer")
end)

T.test("workspace: Library.from_file refuses a Python (or any non-.lua) file and says how to get a Lua one", function()
  local dir = T.tmpdir()
  seer.write_file(dir .. "/helpers.py", "def f(x):\n    return x\n")
  seer.write_file(dir .. "/steering_hook.py", "import torch\n")
  seer.write_file(dir .. "/notes.txt", "return {}\n")
  -- the reference's own helper file: not installed as a module named "helpers.py"
  local ok, err = pcall(ws.Library.from_file, dir .. "/helpers.py")
  T.ok(not ok, "a .py file was taken as a library")
  T.contains(err, "helpers.py is a Python file; seer libraries are Lua modules")
  T.contains(err, "port it to a Lua module")
  -- the seeds' Library.from_file(toolkit / "steering_hook.py"): the toolkit's Lua module
  T.raises(function() ws.Library.from_file(dir .. "/steering_hook.py") end, 'require "toolkit.steering_hook"', true)
  -- a Lua version beside it is named
  seer.write_file(dir .. "/helpers.lua", "return {}\n")
  T.raises(function() ws.Library.from_file(dir .. "/helpers.py", "h") end, ('Library.from_file("%s/helpers.lua")'):format(dir), true)
  T.raises(function() ws.Library.from_file(dir .. "/notes.txt") end, "is not a Lua file (its name does not end in .lua)", true)
  T.eq(ws.Library.from_file(dir .. "/helpers.lua").name, "helpers")
  -- a Python package and a skill whose code is Python are named as such
  os.execute(("mkdir -p '%s/pkg' '%s/sk'"):format(dir, dir))
  seer.write_file(dir .. "/pkg/__init__.py", "")
  T.raises(function() ws.Library.from_directory(dir .. "/pkg") end, "it holds __init__.py: a Python package", true)
  seer.write_file(dir .. "/sk/SKILL.md", "---\nname: sk\ndescription: d\n---\n")
  seer.write_file(dir .. "/sk/code.py", "x = 1\n")
  T.raises(function() ws.Library.from_skill_dir(dir .. "/sk") end, "its code.py is Python", true)
end)

--- Scales a steering strength.
--- Doubles it, as the fixture skill does.
local function double_strength(x)
  return 2 * x
end

T.test("workspace: Skill.from_function makes a skill of a Lua function's source and its --- docs", function()
  local s = ws.Skill.from_function(double_strength)
  T.eq(s.name, "double_strength")
  T.eq(s.description, "Scales a steering strength.")
  T.eq(s.files["double_strength.lua"], "local function double_strength(x)\n  return 2 * x\nend\n")
  local fm, body = ws.front_matter(s.files["SKILL.md"])
  T.eq(fm.name, "double_strength")
  T.eq(fm.description, "Scales a steering strength.")
  T.contains(body, "Doubles it, as the fixture skill does.")
  T.contains(body, "```lua\nlocal function double_strength(x)\n  return 2 * x\nend\n```")
  -- it installs as any skill does
  local dir = T.tmpdir()
  ws.Workspace{ skills = { s } }:install(dir)
  T.eq(seer.read_file(dir .. "/.claude/skills/double_strength/double_strength.lua"), s.files["double_strength.lua"])
  -- name and description as options; a function from a string of code
  local f = load("local M = {}\nM.probe = function(x)\n  return x\nend\nreturn M.probe")()
  local p = ws.Skill.from_function(f, { description = "The identity." })
  T.eq(p.name, "probe")
  T.eq(p.files["probe.lua"], "M.probe = function(x)\n  return x\nend\n")
  -- what cannot make a skill says what to pass
  T.raises(function() ws.Skill.from_function(print) end, "a C function has no Lua source", true)
  T.raises(function() ws.Skill.from_function(function() end) end, "has no name in its source; give {name = ...}", true)
  T.raises(function() ws.Skill.from_function(load("return function(x) return x end", "=typed")()) end, "whose source Lua did not keep", true)
  T.raises(function() ws.Skill.from_function(f) end, "probe has no description: give {description = ...}", true)
  T.raises(function() ws.Skill.from_function("f") end, "fn must be a Lua function, not a string", true)
  T.raises(function() ws.Skill.from_function(f, { desc = "x" }) end, 'unknown option "desc"', true)
end)

T.test("workspace: skills and skill_dirs install under .claude/skills; docs in the reference's format", function()
  local dir = T.tmpdir()
  local w = ws.Workspace{ skills = { ws.Skill{ name = "notes", description = "Notes" } }, skill_dirs = { skill_dir },
                          libraries = { ws.Library.from_code("helpers", "--- Helper functions.\nreturn {}"),
                                        ws.Library.from_code("bare", "return {}") } }
  T.eq(#w.skills, 2)
  w:install(dir)
  T.eq(seer.read_file(dir .. "/.claude/skills/notes/SKILL.md"), "---\nname: notes\ndescription: Notes\n---\n")
  T.ok(seer.read_file(dir .. "/.claude/skills/steering-hook/examples/use.lua"))
  T.eq(seer.read_file(dir .. "/helpers.lua"), "--- Helper functions.\nreturn {}")
  T.eq(w:get_library_docs(), "# Available Libraries\n\n## helpers\n\nHelper functions.\n\n## bare\n\nAvailable via: `require \"bare\"`\n")
  T.raises(function() ws.Workspace{ skills = { {} } } end, "is not a Skill")
  T.raises(function() ws.Workspace{ skill_dirs = { "/nonexistent" } } end, "skill_dirs%[1%]")
  -- one Library where a list is meant gave a workspace without it; two of one name installed over
  -- each other; a NUL in a file name was cut by the C side
  local a, b = ws.Library.from_code("same", "return 1"), ws.Library.from_code("same", "return 2")
  T.raises(function() ws.Workspace{ libraries = a } end, "Workspace.libraries must be a list: libraries = { x }", true)
  T.raises(function() ws.Workspace{ libraries = { [1] = a, [3] = b } } end, "Workspace.libraries: entry 2 is missing", true)
  T.raises(function() ws.Workspace{ libraries = { a, b } } end, 'Workspace.libraries[1] and [2] are both named "same"', true)
  T.raises(function() ws.Workspace{ skills = { ws.Skill{ name = "n", description = "d" }, ws.Skill{ name = "n", description = "e" } } } end,
           'two skills are named "n"', true)
  T.raises(function() ws.Workspace{ local_files = { "a", "b" } } end, "local_files[1] must be {local_path, workspace_path}", true)
  for _, bad in ipairs({ "a\0b.lua", "", "dir/", "a\nb.lua" }) do
    T.raises(function() ws.Library.new{ name = "x", files = { [bad] = "return 1" } } end, "files must map relative paths", true)
  end
end)

T.test("local session: the agent's directory gets the scoped library, callable from a fresh seer", function()
  local rpc = require "seer.rpc"
  local lib, srv = rpc.serve(root .. "/tests/fixtures/rpc/misc.lua", { expose_as = "library", name = "scoped_tools" })
  local dir = T.tmpdir() .. "/work"
  local create = require("seer.local_session").create_local_session
  local s = create(ws.Workspace{ libraries = { lib } }, dir, "scoped-example")
  T.eq(s.name, "scoped-example")
  T.eq(s.workspace_dir, require("seer.core.host").realpath(dir))
  T.eq(s.mcp_config.workspace.args, { "mcp", "local", "--workspace", s.workspace_dir })
  T.contains(s.library_docs, "## scoped_tools")
  local out = io.popen(("cd '%s' && '%s' -e 'print(require(\"scoped_tools\").add(20, 22))' 2>&1")
    :format(dir, require("seer.jupyter").seer_binary())):read("*a")
  T.eq(out, "42\n")
  local s2 = create{ workspace = ws.Workspace{}, workspace_dir = dir .. "2" }
  T.eq(s2.name, "local")
  T.raises(function() create(ws.Workspace{}, nil) end, "workspace_dir must be")
  srv:close()
end)
