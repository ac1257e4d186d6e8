--- `seer mcp`: MCP servers for agents (docs/mcp.md). `seer mcp notebook` serves the notebook
--- tools over stdio (default) or streamable HTTP; `seer mcp rpc` serves the functions of a
--- scoped interface (`seer rpc serve`) as tools; `seer mcp cli` serves a shell and files in a
--- running sandbox (run_command, run_lua, read_file, write_file, list_files).
local M = {}

local USAGE = [[
usage: seer mcp notebook [--session-id ID] [--jupyter-url URL] [--output-dir DIR] [--max-output CHARS]
                         [--http HOST:PORT [--token T] [--allow-origin ORIGIN]...]
       seer mcp cli --sandbox ID [--max-output CHARS] [--http HOST:PORT [--token T] [--allow-origin ORIGIN]...]
       seer mcp local --workspace DIR [--shell] [--max-output CHARS]
       seer mcp rpc --connection-file FILE [--name NAME] [--timeout SECONDS]
                    [--http HOST:PORT [--token T] [--allow-origin ORIGIN]...]

Serves MCP (protocol 2025-06-18 and 2025-11-25) on stdin/stdout by default: one JSON-RPC
message per line; logs go to stderr. The notebook tools: start_new_session, attach_to_session,
start_session_resume_notebook, start_session_continue_notebook, execute_code, edit_cell,
add_markdown, read_notebook, interrupt, restart_kernel, shutdown_session. It ends at the end
of stdin or on SIGTERM (Ctrl-C too), shutting down the sessions it started.

  --session-id ID, --jupyter-url URL  attach to this session at start (SEER_SESSION_ID,
                                      SEER_NOTEBOOK_URL; a local session's mcp_config sets both)
  --output-dir DIR     where new notebooks go (SEER_NOTEBOOK_OUTPUT_DIR; default ./outputs)

Without a sandboxed session, start_new_session and the resume/continue tools start kernels
on this machine, NOT sandboxed. A sandboxed session's mcp_config binds the server to its
sandbox instead (SEER_SESSION_ID, SEER_NOTEBOOK_ENDPOINT, SEER_NOTEBOOK_SCOPE_KEY; environment
only): every tool then reaches that sandbox alone, and so does a --jupyter-url whose session
is sandboxed.
  --max-output CHARS   text returned per cell before it is cut (default 20000; the notebook
                       keeps everything)
  --http HOST:PORT     serve streamable HTTP at http://HOST:PORT/mcp instead of stdio
                       (port 0 picks one; the URL is printed on stderr)
  --token T            the bearer token HTTP clients must send (SEER_MCP_TOKEN; generated and
                       printed on stderr when unset)
  --allow-origin O     a browser Origin allowed besides the server's own (repeatable)

seer mcp local: a local session's working folder, on this machine (NOT sandboxed): run_lua
(a fresh seer process in DIR with its libraries require-able), read_file, write_file and
list_files inside DIR only, and run_command with --shell (create_local_session{shell = true}).

seer mcp rpc: one tool per function a scoped interface exposes (`seer rpc serve`; seer.rpc's
serve(..., {expose_as = "mcp"}) gives the entry that starts it), input schemas from the
interface's LuaCATS annotations.
  --connection-file FILE  the RPC server's connection file (SEER_RPC_CONNECTION_FILE); read without
                          following links, its endpoint must be beside it or on loopback.
                          SEER_RPC_ENDPOINT + SEER_RPC_KEY (environment) replace the file
  --name NAME             the server name agents see (default: the name the server was started
                          with, `seer rpc serve --name`, else "rpc")
  --timeout SECONDS       per-call deadline enforced by the RPC server (default: none)]]

local function usage_error(msg)
  io.stderr:write("seer mcp: ", msg, "\n", USAGE, "\n")
  io.stderr:flush()
  os.exit(2)
end

-- The HTTP options every server takes: --http HOST:PORT split, --token/--allow-origin only with it.
local function check_http_options(o)
  if o.token == "" then o.token = nil end
  -- SEER_MCP_TOKEN is for HTTP servers: a stdio server started where it is set ignores it
  -- (only an explicit --token without --http is a mistake worth an error)
  if o.http and not o.token and o.token_env and o.token_env ~= "" then o.token = o.token_env end
  o.token_env = nil
  if o.http then
    local host, port = o.http:match("^%[?([^%]]*)%]?:(%d+)$")
    if not host or host == "" or tonumber(port) > 65535 then usage_error("--http needs HOST:PORT, e.g. 127.0.0.1:8765") end
    if o.token and #o.token < 16 then
      usage_error(("--token must be at least 16 characters (got %d); leave it out to get a random one"):format(#o.token))
    end
    o.http_host, o.http_port = host, tonumber(port)
  elseif o.token or #o.allow_origins > 0 then
    usage_error("--token and --allow-origin only apply with --http")
  end
  return o
end

local function parse_notebook_args(args)
  local o = { session_id = os.getenv("SEER_SESSION_ID"), jupyter_url = os.getenv("SEER_NOTEBOOK_URL"),
              output_dir = os.getenv("SEER_NOTEBOOK_OUTPUT_DIR"), token_env = os.getenv("SEER_MCP_TOKEN"),
              allow_origins = {} }
  for a, value in require("seer.cli.args").options(args, usage_error) do
    if a == "--session-id" then o.session_id = value()
    elseif a == "--jupyter-url" then o.jupyter_url = value()
    elseif a == "--output-dir" then o.output_dir, o.output_dir_flag = value(), true
    elseif a == "--max-output" then
      o.max_output = tonumber(value())
      if not o.max_output or o.max_output < 1 or o.max_output ~= math.floor(o.max_output) then
        usage_error("--max-output needs a positive whole number of characters")
      end
    elseif a == "--http" then o.http = value()
    elseif a == "--token" then o.token = value()
    elseif a == "--allow-origin" then o.allow_origins[#o.allow_origins + 1] = value()
    elseif a == "-h" or a == "--help" then print(USAGE) os.exit(0)
    else usage_error("unknown option " .. a) end
  end
  for _, k in ipairs{ "session_id", "jupyter_url", "output_dir", "token" } do
    if o[k] == "" then o[k] = nil end
  end
  -- A sandbox binding comes from the environment only: the key never shows in a process list.
  local endpoint, key = os.getenv("SEER_NOTEBOOK_ENDPOINT"), os.getenv("SEER_NOTEBOOK_SCOPE_KEY")
  if endpoint == "" then endpoint = nil end
  if key == "" then key = nil end
  if endpoint or key then
    if not (endpoint and key) then
      usage_error("a sandbox binding needs both SEER_NOTEBOOK_ENDPOINT and SEER_NOTEBOOK_SCOPE_KEY (a sandboxed session's mcp_config sets them)")
    end
    if not o.session_id then usage_error("a sandbox binding needs the session id too (SEER_SESSION_ID or --session-id)") end
    if o.jupyter_url then
      usage_error("give a sandbox binding (SEER_NOTEBOOK_ENDPOINT, SEER_NOTEBOOK_SCOPE_KEY) or a jupyter_url, not both")
    end
    o.scope = { endpoint = endpoint, key = key }
    if o.output_dir_flag then
      usage_error("--output-dir does not apply to a sandbox-bound server: its notebooks go to its session's output directory")
    end
    o.output_dir = nil -- SEER_NOTEBOOK_OUTPUT_DIR inherited from elsewhere: notebooks go where the session's go
    return check_http_options(o)
  end
  if (o.session_id == nil) ~= (o.jupyter_url == nil) then
    usage_error(o.session_id and "a session id needs its jupyter_url too (--jupyter-url or SEER_NOTEBOOK_URL)"
                or "a jupyter_url needs the session id too (--session-id or SEER_SESSION_ID)")
  end
  check_http_options(o)
  if o.output_dir then
    local core = require "seer.core.host"
    o.output_dir = o.output_dir:sub(1, 1) == "/" and o.output_dir or (core.cwd() .. "/" .. o.output_dir)
  end
  return o
end

---Builds the notebook MCP server (not yet serving).
---@param o table parsed options
function M.notebook_server(o)
  local server = require "seer.mcp.server"
  local tools = require "seer.mcp.notebook_tools"
  local srv = server.new{ name = "seer-notebook", title = "seer notebook", version = require("seer").version,
                          instructions = tools.INSTRUCTIONS }
  tools.install(srv, o)
  return srv
end

local ffi = require "ffi"
pcall(ffi.cdef, "unsigned int alarm(unsigned int seconds);")

-- Whether SIGTERM started the end: its handler (seer.core.sigterm) sets an alarm, the grace
-- after which the process ends whatever it is doing; seer sets no other. Cancels it: called
-- once the server has shut down, just before exiting.
local function stopped_by_sigterm()
  return ffi.C.alarm(0) > 0
end

local function notebook(args)
  local o = parse_notebook_args(args)
  -- SIGTERM (what MCP clients, timeout(1) and systemd stop a server with) ends the server as
  -- the end of stdin does: the sessions it started are shut down, their notebooks saved with a
  -- running cell's output so far; sessions it attached keep running. It interrupts the running
  -- code as Ctrl-C does; a second SIGTERM, or 15 s without an end, ends the process at once.
  -- (By default SIGTERM ended only this process: kernels it had started on an experiment's or a
  -- sandbox's notebook server ran on.)
  pcall(function() require("seer.core.sigterm").term_as_interrupt() end)
  local function ended(err)
    local term = stopped_by_sigterm()
    io.stderr:write(("seer mcp: %s; the sessions it started are shut down\n"):format(term and "stopped by SIGTERM" or "interrupted"))
    io.stderr:flush()
    os.exit(term and 143 or 130)
  end
  local ok, srv = pcall(M.notebook_server, o)
  if not ok then
    if tostring(srv):match("interrupted$") then ended() end
    error(srv, 0)
  end
  local err
  ok, err = pcall(function()
    if o.http then
      require("seer.mcp.http_server").serve(srv, { host = o.http_host, port = o.http_port, token = o.token,
                                                   allow_origins = o.allow_origins })
    else
      srv:serve_stdio()
    end
  end)
  if not ok then
    -- Ctrl-C or SIGTERM: the loop has already ended the sessions this server started.
    if tostring(err):match("interrupted$") then ended() end
    error(err, 0)
  end
  -- an interrupt that a tool call caught stopped the loop (seer.mcp.notebook_tools), which has
  -- shut the sessions down as well
  if srv.interrupted then ended() end
end


local function parse_rpc_args(args)
  local o = { connection_file = os.getenv("SEER_RPC_CONNECTION_FILE"), token_env = os.getenv("SEER_MCP_TOKEN"),
              allow_origins = {} }
  for a, value in require("seer.cli.args").options(args, usage_error) do
    if a == "--connection-file" then o.connection_file = value()
    elseif a == "--name" then o.name = value()
    elseif a == "--timeout" then
      o.timeout = tonumber(value())
      if not o.timeout or o.timeout <= 0 then usage_error("--timeout needs a positive number of seconds") end
    elseif a == "--http" then o.http = value()
    elseif a == "--token" then o.token = value()
    elseif a == "--allow-origin" then o.allow_origins[#o.allow_origins + 1] = value()
    elseif a == "-h" or a == "--help" then print(USAGE) os.exit(0)
    else usage_error("unknown option " .. a) end
  end
  -- SEER_RPC_ENDPOINT + SEER_RPC_KEY (environment only) say where the server is without a file
  -- the sandbox could rewrite.
  o.endpoint, o.key = os.getenv("SEER_RPC_ENDPOINT"), os.getenv("SEER_RPC_KEY")
  o.control_endpoint = os.getenv("SEER_RPC_CONTROL_ENDPOINT") -- optional: where cancellations go
  if o.control_endpoint and not o.control_endpoint:match("^ipc://") and not o.control_endpoint:match("^tcp://") then
    usage_error("SEER_RPC_CONTROL_ENDPOINT must be ipc://... or tcp://...")
  end
  if o.endpoint == "" then o.endpoint = nil end
  if o.key == "" then o.key = nil end
  if (o.endpoint == nil) ~= (o.key == nil) then usage_error("SEER_RPC_ENDPOINT and SEER_RPC_KEY go together") end
  if o.endpoint then
    if not (o.endpoint:match("^ipc://") or o.endpoint:match("^tcp://")) then usage_error("SEER_RPC_ENDPOINT must be ipc://... or tcp://...") end
    return check_http_options(o)
  end
  if not o.connection_file or o.connection_file == "" then
    usage_error("rpc needs --connection-file FILE (the file seer rpc serve was started with) or SEER_RPC_ENDPOINT and SEER_RPC_KEY")
  end
  if o.connection_file:sub(1, 1) ~= "/" then o.connection_file = require("seer.core.host").cwd() .. "/" .. o.connection_file end
  return check_http_options(o)
end

---Builds the RPC tools' MCP server (connected to the RPC server, not yet serving).
---@param o table parsed options
function M.rpc_server(o)
  local server = require "seer.mcp.server"
  local srv = server.new{ name = o.name or "seer-rpc", title = "seer rpc", version = require("seer").version }
  require("seer.mcp.rpc_tools").install(srv, o)
  return srv
end

-- Builds a server with build(o) (an error there is one line and exit 1), then serves it on
-- stdio or, with --http, streamable HTTP, until EOF or Ctrl-C (exit 130).
local function run_server(what, build, o)
  local ok, srv = pcall(build, o)
  if not ok then
    io.stderr:write("seer mcp ", what, ": ", tostring(srv), "\n")
    io.stderr:flush()
    os.exit(1)
  end
  local sok, err = pcall(function()
    if o.http then
      require("seer.mcp.http_server").serve(srv, { host = o.http_host, port = o.http_port, token = o.token,
                                                   allow_origins = o.allow_origins })
    else
      srv:serve_stdio()
    end
  end)
  if not sok then
    if tostring(err):match("interrupted$") then os.exit(130) end
    error(err, 0)
  end
end

local function rpc(args) return run_server("rpc", M.rpc_server, parse_rpc_args(args)) end

local function parse_cli_args(args)
  local o = { allow_origins = {}, token_env = os.getenv("SEER_MCP_TOKEN") }
  for a, value in require("seer.cli.args").options(args, usage_error) do
    if a == "--sandbox" then o.sandbox_id = value()
    elseif a == "--max-output" then
      o.max_output = tonumber(value())
      if not o.max_output or o.max_output < 100 then usage_error("--max-output needs a number of characters (at least 100)") end
    elseif a == "--http" then o.http = value()
    elseif a == "--token" then o.token = value()
    elseif a == "--allow-origin" then o.allow_origins[#o.allow_origins + 1] = value()
    elseif a == "-h" or a == "--help" then print(USAGE) os.exit(0)
    else usage_error("unknown option " .. a) end
  end
  o.sandbox_id = o.sandbox_id or os.getenv("SEER_SANDBOX_ID")
  if not o.sandbox_id or o.sandbox_id == "" then
    usage_error("cli needs --sandbox ID (a running sandbox: seer sandbox list; a CLI session's mcp_config sets it)")
  end
  return check_http_options(o)
end

---Builds the CLI tools' MCP server for a running sandbox (not yet serving).
---@param o table parsed options
function M.cli_server(o)
  local server = require "seer.mcp.server"
  local tools = require "seer.mcp.cli_tools"
  -- The sandbox must be there now: a wrong id is an error at start, not at the first call.
  require("seer.sandbox").connect_id(o.sandbox_id):close()
  local srv = server.new{ name = "seer-cli", title = "seer cli (sandbox " .. o.sandbox_id .. ")",
                          version = require("seer").version, instructions = tools.INSTRUCTIONS }
  tools.install(srv, o)
  return srv
end

local function cli(args) return run_server("cli", M.cli_server, parse_cli_args(args)) end

local function parse_local_args(args)
  local o = { allow_origins = {}, token_env = os.getenv("SEER_MCP_TOKEN") }
  for a, value in require("seer.cli.args").options(args, usage_error) do
    if a == "--workspace" then o.workspace = value()
    elseif a == "--shell" then o.shell = true
    elseif a == "--max-output" then
      o.max_output = tonumber(value())
      if not o.max_output or o.max_output < 100 then usage_error("--max-output needs a number of characters (at least 100)") end
    elseif a == "-h" or a == "--help" then print(USAGE) os.exit(0)
    else usage_error("unknown option " .. a) end
  end
  if not o.workspace or o.workspace == "" then usage_error("local needs --workspace DIR (a local session's mcp_config sets it)") end
  local real = require("seer.core.host").realpath(o.workspace)
  if not real then usage_error(o.workspace .. " is not a folder") end
  o.workspace = real
  return o
end

---Builds the local session's MCP server (not yet serving).
---@param o table parsed options
function M.local_server(o)
  local server = require "seer.mcp.server"
  local tools = require "seer.mcp.local_tools"
  local srv = server.new{ name = "seer-local", title = "seer local workspace " .. o.workspace,
                          version = require("seer").version, instructions = tools.INSTRUCTIONS }
  tools.install(srv, o)
  return srv
end

function M.main(cmd, ...)
  if cmd == nil then -- no subcommand: a usage error (exit 2), as for any other missing argument
    io.stderr:write(USAGE, "\n")
    os.exit(2)
  end
  if cmd == "-h" or cmd == "--help" or cmd == "help" then
    print(USAGE)
    return
  end
  if cmd == "notebook" then return notebook({ ... }) end
  if cmd == "cli" then return cli({ ... }) end
  if cmd == "local" then return run_server("local", M.local_server, parse_local_args({ ... })) end
  if cmd == "rpc" then return rpc({ ... }) end
  usage_error(("unknown server %q (notebook, cli, local or rpc)"):format(tostring(cmd)))
end

return M
