--- seer.execution: sessions (names as the reference). A notebook session is a Lua kernel with
--- the sandbox's models preloaded, a live .ipynb notebook in the output directory, a live view
--- at `jupyter_url`, and an `mcp_config` that gives an agent the notebook tools.
---
--- The session talks to seer's notebook server (`seer notebook serve`, one per experiment
--- process, started on first use and ended with it) over signed ZMQ requests; the server owns
--- the kernels and the notebooks (docs/notebook.md). Until sandboxes exist the kernel runs as a
--- local process; nothing in the kernel depends on where it runs.
---@class seerexecution
local M = {}

local net = require "seer.net"
local json = require "seer.json"
local process = require "seer.process"
local jupyter = require "seer.jupyter"
local core = require "seer.core.host"

local REQUEST_TIMEOUT_MS = 60000

---------------------------------------------------------------------------------------------
-- the notebook server of this process

local server -- {child, sock, key, token, endpoint}

local function start_server()
  if server and server.child:alive() then return server end
  local key, token = net.new_key(), net.new_key():sub(1, 48)
  local child = process.spawn{
    argv = { jupyter.seer_binary(), "notebook", "serve" },
    env = { SEER_NOTEBOOK_KEY = key, SEER_NOTEBOOK_TOKEN = token, SEER_DIE_WITH_PARENT = "1" },
    stdout = "pipe", stderr = "inherit",
  }
  local line, why = child:read_line(15000)
  if not line then
    child:stop(500)
    error(("the notebook server did not start (%s; %s)"):format(why, child:describe_exit()), 0)
  end
  local ok, info = pcall(json.decode, line)
  if not ok or type(info) ~= "table" or not info.endpoint then
    child:stop(500)
    error("the notebook server printed an unexpected first line: " .. line, 0)
  end
  local sock = net.socket("dealer", key)
  sock:connect(info.endpoint)
  server = { child = child, sock = sock, key = key, token = token, endpoint = info.endpoint, url = info.url,
             session = net.uuid(), sessions = 0 }
  return server
end

-- Sends a request and waits for its reply; `output` messages that arrive first go to on_output.
local function request(msg_type, content, opts)
  opts = opts or {}
  local srv = start_server()
  local header = net.header(msg_type .. "_request", srv.session)
  srv.sock:send{ header = header, parent_header = {}, metadata = {}, content = content or {} }
  local deadline = opts.timeout_ms and (process.now_ms() + opts.timeout_ms) or nil
  while true do
    local msg = srv.sock:recv(100)
    if msg then
      if msg.parent_header.msg_id == header.msg_id then
        if msg.header.msg_type == "output" then
          if opts.on_output then opts.on_output(msg.content) end
        else
          return msg.content
        end
      end
    else
      local alive, how = srv.child:alive()
      if not alive then
        server = nil
        error(("the notebook server %s while handling %s; its log is on this process's stderr"):format(how, msg_type), 0)
      end
      if deadline and process.now_ms() > deadline then
        error(("the notebook server did not answer %s within %d ms"):format(msg_type, opts.timeout_ms), 0)
      end
    end
  end
end

local function check(reply, what)
  if reply.status == "error" then error(("%s: %s: %s"):format(what, reply.ename, reply.evalue), 3) end
  return reply
end

---------------------------------------------------------------------------------------------
-- NotebookSession

---@class seerexecution.NotebookSession
---@field session_id string
---@field jupyter_url string live view of the notebook (with its token; treat it as a secret)
---@field notebook_path string the .ipynb file, rewritten as cells finish
---@field model_info_text string the preloaded models, in the reference's format ("" without models)
---@field mcp_config table `{notebook = {type = "stdio", command, args, env}}` for an agent's MCP client
---@field sandbox? table the sandbox the session runs in (nil for local sessions)
---@field workspace_dir string where libraries were installed (the kernel's working directory)
local Session = {}
Session.__index = Session
Session.__name = "NotebookSession"

---@class seerexecution.exec_result
---@field outputs table[] nbformat outputs (stream, display_data, execute_result, error)
---@field text string the text of the outputs joined (streams and text/plain results)
---@field execution_count integer|nil
---@field cell_index integer|nil 0-based index among code cells (nil for hidden executions)
---@field truncated boolean true when outputs were cut to the output limit (the notebook has all)

---Runs code in the kernel. With `hidden = true` no notebook cell is created. A kernel error is
---raised as the Lua error "ename: evalue" (the cell and its traceback are in the notebook).
---`timeout` (seconds) interrupts a cell that runs too long.
---@param code string
---@param opts? {hidden?: boolean, timeout?: number, max_output?: integer, on_output?: fun(output: table)}
---@return seerexecution.exec_result
function Session:exec(code, opts)
  if type(self) ~= "table" or getmetatable(self) ~= Session then
    error("exec: call it as session:exec(code, opts)", 2)
  end
  if type(code) ~= "string" then error("session:exec: code must be a string", 2) end
  opts = opts or {}
  local r = check(request("execute", { session_id = self.session_id, code = code, hidden = opts.hidden or false,
                                       timeout = opts.timeout, max_output = opts.max_output,
                                       stream = opts.on_output and true or false },
                          { on_output = opts.on_output }), "session:exec")
  local text = {}
  for _, o in ipairs(r.outputs or {}) do
    if o.output_type == "stream" then text[#text + 1] = o.text
    elseif o.data and o.data["text/plain"] then text[#text + 1] = o.data["text/plain"] .. "\n" end
  end
  local res = { outputs = r.outputs, text = table.concat(text), execution_count = r.execution_count ~= json.null and r.execution_count or nil,
                cell_index = r.cell_index, truncated = r.truncated }
  if r.result ~= "ok" then
    local e = r.error or {}
    error(("%s: %s"):format(e.ename or "Error", e.evalue or ""), 0)
  end
  return res
end

---Runs a Lua file's contents as one cell.
---@param path string
---@param opts? {hidden?: boolean, timeout?: number}
---@return seerexecution.exec_result
function Session:exec_file(path, opts)
  local ok, code = pcall(core.read_file, path)
  if not ok then error("session:exec_file: " .. code, 2) end
  return self:exec(code, opts)
end

---Appends a markdown cell; returns its 0-based cell number.
---@param text string
---@return integer
function Session:add_markdown(text)
  if type(text) ~= "string" then error("session:add_markdown: text must be a string", 2) end
  return check(request("add_markdown", { session_id = self.session_id, content = text }), "session:add_markdown").cell_number
end

---Re-runs a code cell with new source (index among code cells, 0-based; negative from the end).
---@param code string
---@param cell_index? integer default -1 (the last code cell)
---@return seerexecution.exec_result
function Session:edit_cell(code, cell_index)
  local r = check(request("edit_cell", { session_id = self.session_id, code = code, cell_index = cell_index or -1 }),
                  "session:edit_cell")
  return { outputs = r.outputs, execution_count = r.execution_count, cell_index = r.cell_index, result = r.result, error = r.error }
end

---Interrupts the running cell (if any).
function Session:interrupt()
  check(request("interrupt", { session_id = self.session_id }, { timeout_ms = REQUEST_TIMEOUT_MS }), "session:interrupt")
end

---Starts a fresh kernel (after a crash, or to reset state) and replays the hidden start-up
---(model loading, init code). The notebook keeps its cells.
function Session:restart()
  check(request("restart", { session_id = self.session_id }), "session:restart")
end

---The session's state: "idle", "busy" or "dead" (with dead_reason), the kernel's pid.
---@return table
function Session:info()
  return check(request("session_info", { session_id = self.session_id }, { timeout_ms = REQUEST_TIMEOUT_MS }), "session:info")
end

---Stops the kernel; the notebook stays on disk. The notebook server ends with the last session.
function Session:terminate()
  if self.terminated then return end
  self.terminated = true
  if not server then return end
  pcall(request, "shutdown_session", { session_id = self.session_id }, { timeout_ms = REQUEST_TIMEOUT_MS })
  server.sessions = server.sessions - 1
  if server.sessions <= 0 then
    pcall(request, "shutdown", {}, { timeout_ms = 5000 })
    server.child:wait(3000)
    server.child:stop(500)
    server.sock:close()
    server = nil
  end
end

---------------------------------------------------------------------------------------------
-- model preloading

local function tokenizer_var(var_name)
  return var_name == "model" and "tokenizer" or (var_name .. "_tokenizer")
end

---The reference's description of the preloaded models ("" without models).
---@param models table[] ModelConfig-like tables {name, var_name?, hidden?}
---@return string
function M.model_info_text(models)
  if not models or #models == 0 then return "" end
  local lines = { "### Pre-loaded Models", "The following models are already loaded in the kernel:" }
  for _, m in ipairs(models) do
    local var = m.var_name or "model"
    lines[#lines + 1] = ("- `%s`: %s"):format(var, m.hidden and "<hidden>" or m.name)
    lines[#lines + 1] = ("- `%s`: Tokenizer"):format(tokenizer_var(var))
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = "**Do NOT reload these models - they are already available.**"
  return table.concat(lines, "\n")
end

-- The Lua that loads one model into the kernel. The path appears only in this hidden code.
local function load_code(m, path_of)
  local var = m.var_name or "model"
  local opts = ("{ hidden = %s }"):format(m.hidden and "true" or "false")
  local lines = {}
  if m.is_peft then
    lines[#lines + 1] = ("%s = require('seer.model').load(%q, %s)"):format(var, path_of(m.base_model), opts)
    lines[#lines + 1] = ("%s:load_adapter(%q)"):format(var, path_of(m.name, m.revision))
  else
    lines[#lines + 1] = ("%s = require('seer.model').load(%q, %s)"):format(var, path_of(m.name, m.revision), opts)
  end
  lines[#lines + 1] = ("%s = %s.tokenizer or error('no tokenizer beside the model %s')"):format(
    tokenizer_var(var), var, m.hidden and "<hidden>" or m.name)
  return table.concat(lines, "\n")
end

---------------------------------------------------------------------------------------------
-- creating sessions

local function default_output_dir()
  return (core.cwd() .. "/outputs")
end

local function create(workspace, opts, models, sandbox)
  opts = opts or {}
  workspace = workspace or require("seer.workspace").Workspace{}
  local output_dir = opts.output_dir or opts.notebook_dir or default_output_dir()
  process.mkdir_p(output_dir)
  output_dir = core.realpath(output_dir) or output_dir
  local workspace_dir = opts.workspace_dir or process.mkdtemp("/tmp/seer-workspace-")
  process.mkdir_p(workspace_dir)
  workspace:install(workspace_dir)
  local r = check(request("start_session", { name = opts.name, notebook_dir = output_dir, workspace_dir = workspace_dir }),
                  "create_notebook_session")
  server.sessions = server.sessions + 1
  local s = setmetatable({ session_id = r.session_id, jupyter_url = r.jupyter_url, notebook_path = r.notebook_path,
                           workspace_dir = workspace_dir, output_dir = output_dir, sandbox = sandbox,
                           model_info_text = "" }, Session)
  local function init(code, hidden)
    local rr = check(request("execute", { session_id = s.session_id, code = code, hidden = hidden, init = true }),
                     "create_notebook_session")
    if rr.result ~= "ok" then
      local e = rr.error or {}
      s:terminate()
      error(("create_notebook_session: setting up the kernel failed: %s: %s"):format(e.ename, e.evalue), 3)
    end
  end
  -- Libraries are `require`-able by their names: the workspace joins package.path.
  init(("package.path = %q .. package.path"):format(workspace_dir .. "/?.lua;" .. workspace_dir .. "/?/init.lua;"), true)
  if models and #models > 0 and workspace.preload_models then
    local path_of = (sandbox and sandbox.model_path) and function(name, rev) return sandbox:model_path(name, rev) end
                    -- A local directory is passed as an absolute path (the kernel runs in the
                    -- workspace directory); anything else is a hub id for the model cache.
                    or function(name) return core.realpath(name) or name end
    for _, m in ipairs(models) do init(load_code(m, path_of), workspace.hidden_model_loading or m.hidden) end
    s.model_info_text = M.model_info_text(models)
  end
  if workspace.custom_init_code ~= "" then init(workspace.custom_init_code, true) end
  s.mcp_config = {
    notebook = { type = "stdio", command = jupyter.seer_binary(), args = { "mcp", "notebook" },
                 env = { SEER_NOTEBOOK_URL = s.jupyter_url ~= json.null and s.jupyter_url or "",
                         SEER_SESSION_ID = s.session_id, SEER_NOTEBOOK_OUTPUT_DIR = output_dir } },
  }
  return s
end

---A notebook session in a sandbox, with the sandbox's models preloaded under their var_name
---(tokenizers as `tokenizer` for `model`, else `{var_name}_tokenizer`).
---
---Until the sandbox subsystem exists, `sandbox` is any table whose `config.models` lists
---ModelConfig-like tables `{name, var_name?, hidden?, is_peft?, base_model?, revision?}` (an
---optional `sandbox:model_path(name, revision)` maps ids to directories); the kernel runs as a
---local process.
---@param sandbox table
---@param workspace? seerworkspace.Workspace
---@param opts? {name?: string, notebook_dir?: string, output_dir?: string, workspace_dir?: string}
---@return seerexecution.NotebookSession
function M.create_notebook_session(sandbox, workspace, opts)
  if type(sandbox) ~= "table" or type(sandbox.config) ~= "table" then
    error("create_notebook_session(sandbox, workspace, opts): sandbox must be a started Sandbox (with .config)", 2)
  end
  local models = sandbox.config.models or {}
  for i, m in ipairs(models) do
    if type(m) ~= "table" or type(m.name) ~= "string" then
      error(("create_notebook_session: sandbox.config.models[%d] needs a name"):format(i), 2)
    end
    if m.is_peft and type(m.base_model) ~= "string" then
      error(("create_notebook_session: model %s is a PEFT adapter (is_peft = true) but has no base_model"):format(m.name), 2)
    end
  end
  return create(workspace, opts, models, sandbox)
end

---A notebook session with its kernel on this machine and no sandbox (models are loaded by the
---notebook's own code; model_info_text is "").
---@param workspace? seerworkspace.Workspace
---@param opts? {name?: string, output_dir?: string, workspace_dir?: string}
---@return seerexecution.NotebookSession
function M.create_local_notebook_session(workspace, opts)
  return create(workspace, opts, nil, nil)
end

---Resumes an existing notebook: a new session re-runs its cells in place.
---@param path string
---@param opts? {workspace?: seerworkspace.Workspace}
---@return seerexecution.NotebookSession, table info (cells_run, cells_failed)
function M.resume_notebook(path, opts)
  opts = opts or {}
  local r = check(request("start_session", { resume = core.realpath(path) or path }), "resume_notebook")
  server.sessions = server.sessions + 1
  return setmetatable({ session_id = r.session_id, jupyter_url = r.jupyter_url, notebook_path = r.notebook_path,
                        model_info_text = "" }, Session), r
end

---Continues an existing notebook: its cells are copied into a new notebook and re-run.
---@param path string
---@param opts? {name?: string, output_dir?: string}
---@return seerexecution.NotebookSession, table info (cells_run, cells_failed)
function M.continue_notebook(path, opts)
  opts = opts or {}
  local r = check(request("start_session", { ["continue"] = core.realpath(path) or path, name = opts.name,
                                             notebook_dir = opts.output_dir }), "continue_notebook")
  server.sessions = server.sessions + 1
  return setmetatable({ session_id = r.session_id, jupyter_url = r.jupyter_url, notebook_path = r.notebook_path,
                        model_info_text = "" }, Session), r
end

return M
