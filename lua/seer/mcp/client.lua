--- seer.mcp.client: talk to MCP servers (any that speak MCP over stdio or streamable HTTP).
--- The protocol lives in C (engine/mcp/, the module seer.core.mcp); this file turns JSON into
--- Lua tables and back and documents the API.
---
---   local mcp = require "seer.mcp.client"
---   local c = mcp.connect({
---     notebook = { type = "stdio", command = "seer", args = { "mcp", "notebook" } },
---     search   = { type = "http", url = "http://127.0.0.1:8000/mcp", headers = { Authorization = "Bearer ..." } },
---   }, { timeout = 30 })
---   for _, t in ipairs(c:tools()) do print(t.qualified_name, t.description) end
---   local r = c:call("execute_code", { code = "print(1)" }, { timeout = 120 })
---   print(r.isError, r.content[1].text)
---   c:close()
---
--- Tool names: a tool keeps its own name unless another server has a tool of the same name;
--- then both become "<server>__<tool>". Qualified names use only [A-Za-z0-9_-] (other
--- characters become '_') and at most 64 bytes, so they can go to an LLM API as they are.
--- "<server>__<tool>" is accepted by call() for every tool, clash or not.
---
--- Errors are Lua errors whose message starts with "mcp server '<name>':" when a server is
--- to blame: it could not start, did not answer in time (the request is then cancelled with
--- notifications/cancelled and the client stays usable), exited (the message gives its exit
--- status and the end of its stderr), or answered with a JSON-RPC error. A tool that fails
--- is not an error: its result has isError = true. Ctrl-C while waiting cancels the request
--- and raises "interrupted".
---
--- A client belongs to one thread (one Lua state); nothing in it is shared with other clients.
---@class seermcp
local M = {}

local core = require "seer.core.mcp"
local json = require "seer.json"

M.PROTOCOL_VERSION = core.PROTOCOL_VERSION

---A server entry of the configuration (the shape Claude Code, Claude Desktop and other agents use).
---@class seermcp.server_config
---@field type? "stdio"|"http"|"streamable-http" default: stdio when command is set, http when url is
---@field command? string stdio: the program (looked up on PATH)
---@field args? string[] stdio: its arguments
---@field env? table<string, string> stdio: added to seer's environment
---@field cwd? string stdio: its working directory
---@field url? string http: the MCP endpoint (http:// or https://)
---@field headers? table<string, string> http: extra headers on every request (e.g. Authorization)

---@class seermcp.connect_opts
---@field timeout? number seconds each request may take unless the call says otherwise (default 60)
---@field connect_timeout? number seconds for starting, initializing and listing the tools of all servers (default 30)
---@field stderr? "capture"|"tee" stdio servers' stderr: kept for error messages (default), or also copied to seer's stderr as "[server] line"
---@field on_notification? fun(server: string, method: string, params: table|nil) server notifications (logging, list changes); without it the last 100 are kept for c:notifications()
---@field on_warning? fun(server: string, text: string) non-fatal oddities (non-JSON lines on stdout); default: printed to stderr
---@field max_tools? integer a server listing more tools is refused (default 1000)
---@field max_tools_bytes? integer a server whose tool list (names, descriptions, schemas) takes more bytes is refused (default 4 MiB)
---@field max_result_bytes? integer the most the client holds of a tool call's response: its bytes, and 16 more for each JSON value (default M.MAX_RESULT_BYTES, 16 MiB). A response past it is cut as it streams in: the result is what was read (a text cut at a character; a block or structuredContent the cut went through left out; isError as the whole response says), with a last text block and seer_cut saying so. The harness sets it from max_tool_result_bytes. At least 4096; 64 MiB or more reads every response whole up to the 64 MiB any message may have (the behaviour before there was a default).

---@class seermcp.tool
---@field server string the server's name in the configuration
---@field name string the tool's own name on that server
---@field qualified_name string unique across the client's servers; what call() takes
---@field title? string
---@field description? string
---@field input_schema table JSON Schema of the arguments
---@field output_schema? table
---@field annotations? table

---@class seermcp.result
---@field content table[] content blocks: {type = "text", text}, {type = "image", data (base64), mimeType}, ...
---@field structuredContent? table
---@field isError boolean true when the tool itself failed (the text says why)
---@field seer_cut? {message_bytes: integer, read_bytes: integer, content_bytes: integer, max_result_bytes: integer} set (by the client, never by the server) when the response was past max_result_bytes and was cut: its size, the bytes read, the bytes of every block's text and data in the whole response; the last content block is the client's note saying so

---@class seermcp.call_opts
---@field timeout? number seconds (default: the client's timeout)
---@field on_progress? fun(progress: number, total: number|nil, message: string|nil, server: string) the call's notifications/progress; an error in it cancels the call

---@class seermcp.client
---@field private _c userdata
---@field private _queue table[]
local Client = {}
Client.__index = Client

local MAX_QUEUED = 100

---The default max_result_bytes: 16 MiB of a tool call's response held at most, whatever the
---server sends (a hostile one could make the client hold 64 MiB, the most of any message, and
---the copies on the way to Lua; the result in Lua costs about twice the bytes kept). Real results
---are far smaller: 4 MB of text with its structuredContent, or a 3 MB image in base64, is 8 MiB.
---The harness passes its own bound (harness.result_message_bound: 9 MiB at its defaults).
M.MAX_RESULT_BYTES = 16 * 1024 * 1024
-- JSON values in one decoded notification's params (results are bounded in C: the reader
-- refuses a message of more, and a tool call's response is cut at max_result_bytes, which
-- charges 16 bytes a value); a server's reply of millions of tiny values would cost the host
-- tens of bytes each
M.MAX_VALUES = 4000000

-- What a server sends is the server's: cJSON does not check that its strings are UTF-8, so
-- bytes that are not become U+FFFD instead of failing the whole result (results go into
-- transcripts and notebooks, which must be UTF-8). Results (tools, call, request, servers) come
-- from seer.core.mcp as Lua tables already, made from the client's cJSON tree with the same
-- fix and the same values json.decode gives (engine/mcp/lua_mcp.c, push_tree): no JSON text is
-- printed and read again. Notifications' params come as text and are decoded here. Nesting is
-- bounded by cJSON (1000 levels) and size by max_message.
local utf8_fix = require("seer.core.net").utf8_fix
local function decode(text)
  if text == nil then return nil end
  return json.decode(utf8_fix(text), { max_values = M.MAX_VALUES })
end

local function encode_args(args, what)
  if args == nil then return nil end
  if type(args) ~= "table" then error(("mcp: %s must be a table (got %s)"):format(what, type(args)), 3) end
  if next(args) == nil then return "{}" end
  return json.encode(args)
end

---Starts (stdio) or reaches (http) every server of config, initializes them in parallel and
---lists their tools. config maps server names to entries; a {mcpServers = {...}} wrapper (the
---shape of Claude Desktop's file) is accepted too. Fails naming the server when any fails.
---@param config table<string, seermcp.server_config>
---@param opts? seermcp.connect_opts
---@return seermcp.client
function M.connect(config, opts)
  if type(config) ~= "table" then error("mcp.connect: the configuration must be a table of server name -> server", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("mcp.connect: the options must be a table", 2) end
  opts = opts or {}
  local valid = { timeout = true, connect_timeout = true, stderr = true, on_notification = true, on_warning = true,
                  max_tools = true, max_tools_bytes = true, max_result_bytes = true }
  for k in pairs(opts) do
    if not valid[k] then
      error(("mcp.connect: unknown option '%s' (valid: connect_timeout, max_result_bytes, max_tools, max_tools_bytes, on_notification, on_warning, stderr, timeout)")
        :format(tostring(k)), 2)
    end
  end
  local self = setmetatable({ _queue = {} }, Client)
  local user_cb = opts.on_notification
  local function on_notification(server, method, params)
    local p = decode(params)
    if user_cb then return user_cb(server, method, p) end
    local q = self._queue
    q[#q + 1] = { server = server, method = method, params = p }
    if #q > MAX_QUEUED then table.remove(q, 1) end
  end
  self._c = core.connect(json.encode(next(config) == nil and json.object({}) or config), {
    timeout = opts.timeout, connect_timeout = opts.connect_timeout, stderr = opts.stderr,
    on_notification = on_notification, on_warning = opts.on_warning,
    max_tools = opts.max_tools, max_tools_bytes = opts.max_tools_bytes,
    max_result_bytes = opts.max_result_bytes or M.MAX_RESULT_BYTES,
  })
  return self
end

---All tools of all servers (re-listed first for servers that announced a change).
---@return seermcp.tool[]
function Client:tools()
  return self._c:tools()
end

---Calls a tool by its qualified name (or "<server>__<tool>", or a name only one server has).
---@param name string
---@param args? table the tool's arguments
---@param opts? seermcp.call_opts
---@return seermcp.result
function Client:call(name, args, opts)
  opts = opts or {}
  return self._c:call(name, encode_args(args, "the arguments"), opts.timeout, opts.on_progress)
end

---Calls a tool of one server by the tool's own name.
---@param server string
---@param tool string
---@param args? table
---@param opts? seermcp.call_opts
---@return seermcp.result
function Client:call_tool(server, tool, args, opts)
  opts = opts or {}
  return self._c:call_tool(server, tool, encode_args(args, "the arguments"), opts.timeout, opts.on_progress)
end

---Any other request to one server (resources/list, prompts/get, ...); returns its result.
---@param server string
---@param method string
---@param params? table
---@param opts? {timeout?: number}
---@return table
function Client:request(server, method, params, opts)
  opts = opts or {}
  return self._c:request(server, method, encode_args(params, "params"), opts.timeout)
end

---Pings one server (or every server) and returns the round trip in seconds (the slowest).
---@param server? string
---@param opts? {timeout?: number}
---@return number
function Client:ping(server, opts)
  local host = require "seer.core.host"
  local names = {}
  if server then names[1] = server else for _, s in ipairs(self:servers()) do names[#names + 1] = s.name end end
  local worst = 0
  for _, n in ipairs(names) do
    local t0 = host.now()
    self:request(n, "ping", nil, opts)
    worst = math.max(worst, host.now() - t0)
  end
  return worst
end

---The servers: name, transport, negotiated protocol_version, server_info, capabilities,
---instructions, pid (stdio, while it runs) and dead (why it can no longer be used).
---@return table[]
function Client:servers()
  return self._c:servers()
end

---The notifications kept since the last call (only without an on_notification handler).
---@return {server: string, method: string, params: table|nil}[]
function Client:notifications()
  local q = self._queue
  self._queue = {}
  return q
end

---Shuts every server down (stdio: stdin closed, then SIGTERM and SIGKILL after a grace period
---of 2 s; http: the session is deleted). Safe to repeat; garbage collection does it too.
function Client:close()
  self._c:close()
end

function Client:__tostring()
  return tostring(self._c)
end

return M
