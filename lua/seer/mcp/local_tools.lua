--- seer.mcp.local_tools: the tools of `seer mcp local`, an agent's working folder on this
--- machine (a local session: create_local_session). run_lua runs Lua in a fresh seer process
--- whose working directory is the workspace and whose module path holds the workspace's
--- libraries (scoped libraries included: they call their sandbox over RPC); read_file,
--- write_file and list_files work inside the workspace folder only (safe_fs: no link followed,
--- no path outside); run_command (a shell) exists only when the session opted in. None of this
--- is sandboxed: it runs as the researcher, with this machine's network.
---@class seermcp.local_tools
local M = {}

local process = require "seer.process"
local safe_fs = require "seer.safe_fs"

M.DEFAULT_TIMEOUT = 600
M.DEFAULT_MAX_OUTPUT = 100000

M.INSTRUCTIONS = [[Tools for a working folder on the researcher's machine (NOT sandboxed). run_lua runs Lua with
seer's modules and the workspace's libraries (require "<library name>"); read_file, write_file and
list_files work on files inside the workspace folder (relative paths).]]

-- Runs argv with stdin, cwd = dir; output to a private temporary file (bounded when read);
-- yields to the server's loop while it runs; killed at the timeout or when the call is cancelled.
local function run(srv, ctx, argv, stdin, dir, timeout, max_output)
  local tmp = process.mkdtemp("/tmp/seer-local-tool-")
  local out = tmp .. "/out"
  local input
  if stdin then
    input = tmp .. "/in"
    local f = assert(io.open(input, "wb"))
    f:write(stdin)
    f:close()
  end
  local cmd = { "/bin/sh", "-c", 'exec "$@" < "$SEER_TOOL_IN" > "$SEER_TOOL_OUT" 2>&1', "sh" }
  for _, a in ipairs(argv) do cmd[#cmd + 1] = a end
  local child = process.spawn{ argv = cmd, cwd = dir, stdout = "null", stderr = "null",
                               env = { SEER_TOOL_IN = input or "/dev/null", SEER_TOOL_OUT = out } }
  local cancelled = false
  if ctx and ctx.on_cancel then ctx:on_cancel(function() cancelled = true child:kill(9) end) end
  local deadline = process.now_ms() + timeout * 1000
  local timed_out = false
  while child:alive() do
    if process.now_ms() > deadline then timed_out = true child:kill(9) break end
    if srv.sleep then srv:sleep(20) else process.sleep_ms(20) end
  end
  child:wait(2000)
  local f = io.open(out, "rb")
  local text = f and f:read(max_output + 1) or ""
  local more = f and f:seek("end") or 0
  if f then f:close() end
  os.execute(("rm -rf '%s'"):format(tmp))
  if #text > max_output then text = text:sub(1, max_output) .. ("\n[... %d more bytes not shown]"):format(more - max_output) end
  if timed_out then return text .. "\n[killed: the command ran past its timeout]" end
  if cancelled then return text .. "\n[cancelled]" end
  return text .. ("\n[exit code %s]"):format(tostring(child.exit_code or ("signal " .. tostring(child.exit_signal))))
end

-- A path the agent gave, as a path relative to the workspace: relative paths as they are,
-- absolute ones only inside the workspace; ".." is refused (safe_fs refuses it too).
local function rel_path(dir, p)
  if type(p) ~= "string" or p == "" then return "" end
  if p:sub(1, 1) == "/" then
    if p == dir then return "" end
    if p:sub(1, #dir + 1) ~= dir .. "/" then
      error(("%s is outside the workspace (%s); use a path relative to it"):format(p, dir), 0)
    end
    p = p:sub(#dir + 2)
  end
  return (p:gsub("^%./", ""):gsub("/+$", ""))
end

---Adds the local tools to an MCP server.
---@param srv table seer.mcp.server instance
---@param opts {workspace: string, shell?: boolean, max_output?: integer}
function M.install(srv, opts)
  local dir = opts.workspace
  local max_output = opts.max_output or M.DEFAULT_MAX_OUTPUT
  local root = safe_fs.root(dir, "the local session's workspace")
  local seer_bin = require("seer.jupyter").seer_binary()
  local timeout_prop = { type = "number", minimum = 1, maximum = 86400,
                         description = ("Seconds before it is killed (default %d)."):format(M.DEFAULT_TIMEOUT) }
  local rw = { readOnlyHint = false, destructiveHint = true, openWorldHint = true }

  srv:add_tool{
    name = "run_lua", title = "Run Lua (on this machine, NOT sandboxed)",
    description = "Run Lua in a fresh seer process whose working directory is the workspace; its libraries are "
      .. "require-able by name. Returns what it prints and its exit code. Runs on the researcher's machine, NOT sandboxed.",
    inputSchema = { type = "object", additionalProperties = false, required = { "code" },
                    properties = { code = { type = "string", description = "Lua source." }, timeout = timeout_prop } },
    annotations = rw,
    run = function(ctx, a)
      local prelude = ("package.path = %q .. package.path\n"):format(dir .. "/?.lua;" .. dir .. "/?/init.lua;")
      return run(srv, ctx, { seer_bin, "-" }, prelude .. a.code, dir, a.timeout or M.DEFAULT_TIMEOUT, max_output)
    end,
  }
  if opts.shell then
    srv:add_tool{
      name = "run_command", title = "Run a shell command (on this machine, NOT sandboxed)",
      description = "Run a shell command (/bin/sh -c) in the workspace folder and return its output and exit code. "
        .. "Runs on the researcher's machine as the researcher, NOT sandboxed.",
      inputSchema = { type = "object", additionalProperties = false, required = { "command" },
                      properties = { command = { type = "string", description = "The command line." }, timeout = timeout_prop } },
      annotations = rw,
      run = function(ctx, a)
        return run(srv, ctx, { "/bin/sh", "-c", a.command }, nil, dir, a.timeout or M.DEFAULT_TIMEOUT, max_output)
      end,
    }
  end
  srv:add_tool{
    name = "read_file", title = "Read a file of the workspace",
    description = "Read a text file inside the workspace folder (a relative path).",
    inputSchema = { type = "object", additionalProperties = false, required = { "path" }, properties = { path = { type = "string" } } },
    annotations = { readOnlyHint = true, openWorldHint = false },
    run = function(_, a)
      local rel = rel_path(dir, a.path)
      local data = safe_fs.must(root:read(rel, { max = 64 * 1024 * 1024 }))
      if data:find("%z") then error(("%s is a binary file (%d bytes)"):format(a.path, #data), 0) end
      if #data > max_output then
        return data:sub(1, max_output) .. ("\n[... %d more bytes]"):format(#data - max_output)
      end
      return data
    end,
  }
  srv:add_tool{
    name = "write_file", title = "Write a file of the workspace",
    description = "Write a text file inside the workspace folder (a relative path; parents are created).",
    inputSchema = { type = "object", additionalProperties = false, required = { "path", "content" },
                    properties = { path = { type = "string" }, content = { type = "string" } } },
    annotations = { readOnlyHint = false, destructiveHint = true, openWorldHint = false },
    run = function(_, a)
      local rel = rel_path(dir, a.path)
      if rel == "" then error("write_file needs a file name", 0) end
      safe_fs.must(root:write(rel, a.content, { mkdirs = true }))
      return ("wrote %d bytes to %s"):format(#a.content, rel)
    end,
  }
  srv:add_tool{
    name = "list_files", title = "List a folder of the workspace",
    description = "List a folder inside the workspace (default: the workspace): type, size and name per line.",
    inputSchema = { type = "object", additionalProperties = false, properties = { path = { type = "string" } } },
    annotations = { readOnlyHint = true, openWorldHint = false },
    run = function(_, a)
      local rel = rel_path(dir, a.path)
      local entries = safe_fs.must(root:list(rel))
      local lines = { (rel == "" and "." or rel) .. ":" }
      for _, e in ipairs(entries) do
        lines[#lines + 1] = ("%-4s %10s  %s%s"):format(e.type, e.type == "dir" and "-" or tostring(math.floor(e.size or 0)),
          e.name, e.type == "dir" and "/" or "")
      end
      if #entries == 0 then lines[#lines + 1] = "(empty)" end
      return table.concat(lines, "\n")
    end,
  }
end

return M
