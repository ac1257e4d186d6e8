--- seer.local_session: `create_local_session` (the reference's name; seer.execution re-exports
--- it): the agent works on the host, in workspace_dir, and reaches the model only through the
--- functions a scoped sandbox serves (libraries made by seer.rpc / ScopedSandbox:serve). The
--- workspace is installed there: libraries as modules `seer -e 'require "name"'` finds from that
--- directory, skills under .claude/skills/<name>/ where Claude Code discovers them, local files
--- and directories at their workspace paths.
---
--- ```lua
--- local lib = scoped:serve("interface.lua", { expose_as = "library", name = "model_tools" })
--- local session = create_local_session(Workspace{ libraries = { lib } }, "./workspace", "scoped-example")
--- -- session.mcp_config: `seer mcp local` on that folder (run_lua with the libraries, files)
--- ```
--- The agent's tools are `seer mcp local`'s: run_lua (a fresh seer process in the workspace,
--- its libraries require-able), read_file / write_file / list_files inside the workspace, and a
--- shell (run_command) only with `shell = true`. They run on this machine, NOT sandboxed.
local M = {}


---@class seerexecution.LocalSession
---@field name string
---@field workspace_dir string absolute path
---@field workspace seerworkspace.Workspace
---@field mcp_config table {workspace = `seer mcp local --workspace DIR`}: run_lua, read_file, write_file, list_files (and run_command with shell = true); NOT sandboxed
---@field model_info_text string "" (no models are loaded on the host)
---@field library_docs string the workspace's get_library_docs()
local LocalSession = {}
LocalSession.__index = LocalSession
LocalSession.__name = "LocalSession"

---A local session: installs workspace into workspace_dir and returns its description.
---Call as create_local_session(workspace, workspace_dir, name) or with one table
---{workspace, workspace_dir, name, shell}.
---@param workspace seerworkspace.Workspace|{workspace: seerworkspace.Workspace, workspace_dir: string, name?: string, shell?: boolean}
---@param workspace_dir? string
---@param name? string default "local"
---@return seerexecution.LocalSession
function M.create_local_session(workspace, workspace_dir, name)
  local ws = require "seer.workspace"
  local shell
  if type(workspace) == "table" and getmetatable(workspace) == nil and workspace_dir == nil then
    local t = workspace
    for k in pairs(t) do
      if k ~= "workspace" and k ~= "workspace_dir" and k ~= "name" and k ~= "shell" then
        error(("create_local_session: unknown field %q; fields: name, shell, workspace, workspace_dir"):format(tostring(k)), 2)
      end
    end
    workspace, workspace_dir, name, shell = t.workspace, t.workspace_dir, t.name, t.shell
  end
  workspace = workspace or ws.Workspace{}
  if type(workspace) ~= "table" or getmetatable(workspace) == nil or workspace.get_library_docs == nil then
    error("create_local_session: workspace must be a seer.workspace Workspace (Workspace{libraries = {...}})", 2)
  end
  if type(workspace_dir) ~= "string" or workspace_dir == "" then
    error("create_local_session: workspace_dir must be the directory the agent works in (it is created)", 2)
  end
  name = name or "local"
  if type(name) ~= "string" then error("create_local_session: name must be a string", 2) end
  local core = require "seer.core.host"
  if workspace_dir:sub(1, 1) ~= "/" then workspace_dir = core.cwd() .. "/" .. workspace_dir end
  require("seer.process").mkdir_p(workspace_dir)
  workspace_dir = core.realpath(workspace_dir) or workspace_dir
  workspace:install(workspace_dir)
  local args = { "mcp", "local", "--workspace", workspace_dir }
  if shell then args[#args + 1] = "--shell" end
  local mcp_config = { workspace = { type = "stdio", command = require("seer.jupyter").seer_binary(), args = args } }
  return setmetatable({ name = name, workspace_dir = workspace_dir, workspace_path = workspace_dir, workspace = workspace,
                        mcp_config = mcp_config, model_info_text = "", library_docs = workspace:get_library_docs() }, LocalSession)
end

---Nothing runs on the session's behalf; scoped servers are stopped by their sandbox.
function LocalSession:terminate() end

return M
