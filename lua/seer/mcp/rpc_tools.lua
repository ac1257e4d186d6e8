--- seer.mcp.rpc_tools: the functions of a served scoped interface (`seer rpc serve`) as MCP
--- tools, for `seer mcp rpc`. One tool per exposed function: its name, its description (the
--- doc comment and the signature), its input schema from the LuaCATS annotations. A call is
--- sent with named arguments over the signed RPC connection; the task waits on the RPC socket
--- through the MCP server's loop, so pings and cancellations go on while it runs, and an MCP
--- cancellation cancels the remote call.
local M = {}

local json = require "seer.json"
local rpc = require "seer.rpc"

local tensor_ok, tensor = pcall(require, "seer.tensor")

-- Values for JSON: tensors become nested lists, binary strings a note.
local function plain(v, depth)
  depth = depth or 0
  if tensor_ok and tensor.is_tensor(v) then return v:totable() end
  if type(v) == "string" and not require("seer.rpc.wire").json_safe(v) then
    return ("<%d bytes of binary data>"):format(#v)
  end
  if type(v) ~= "table" or depth > 100 then return v end
  local out = json.is_array(v) and json.array() or (json.is_object(v) and json.object() or {})
  for k, x in pairs(v) do out[k] = plain(x, depth + 1) end
  return out
end

local function tool_result(content, bufs)
  local values = { rpc.results_of(content, bufs) }
  local n = content.results and #content.results or 1
  local v
  if n > 1 then
    v = json.array()
    for i = 1, n do v[i] = values[i] == nil and json.null or plain(values[i]) end
  else
    v = plain(values[1])
  end
  if v == nil or v == json.null then return { content = { { type = "text", text = "null" } } } end
  if type(v) == "string" then return { content = { { type = "text", text = v } } } end
  local text = json.encode(v)
  local res = { content = { { type = "text", text = text } } }
  if type(v) == "table" and not json.is_array(v) and next(v) ~= nil then res.structuredContent = v end
  return res
end

-- The connection file, read without following any link: a scoped sandbox's RPC files live in
-- its run directory, which the sandbox can write, so a link planted there would make this host
-- process read a file of the sandbox's choosing (another sandbox's key, a host secret in an
-- error message). Its content is checked before use and never quoted in an error.
local function read_connection(path)
  local nb = require "seer.cli.notebook"
  local dir, base = path:match("^(.*)/([^/]+)$")
  if not dir then error(("rpc: the connection file %s must be an absolute path"):format(path), 0) end
  if dir == "" then dir = "/" end
  local fd, why = nb.open_nofollow(dir, base)
  local text
  if fd then text, why = nb.read_regular(fd) end
  if not text then
    error(("rpc: cannot read the connection file %s without following links: %s"):format(path, tostring(why)), 0)
  end
  local ok, info = pcall(json.decode, text, { max_values = 10000 })
  if not ok or type(info) ~= "table" then error(("rpc: the connection file %s is not a JSON object"):format(path), 0) end
  if type(info.key) ~= "string" or info.key == "" then error(("rpc: the connection file %s has no key"):format(path), 0) end
  if type(info.endpoint) ~= "string" or not (info.endpoint:match("^ipc://") or info.endpoint:match("^tcp://")) then
    error(("rpc: the connection file %s has no ipc:// or tcp:// endpoint"):format(path), 0)
  end
  -- The file is the sandbox's to rewrite: an endpoint of its choosing would make this host
  -- connect (and resolve names) where the sandbox says, a way out of a sandbox without network.
  -- So: a unix socket beside the connection file, or a literal loopback address; anything else
  -- goes through SEER_RPC_ENDPOINT (the MCP entry's environment, which the host writes).
  local sock_path = info.endpoint:match("^ipc://(.*)$")
  local tcp_host = info.endpoint:match("^tcp://([^:]+):%d+$") or info.endpoint:match("^tcp://%[([^%]]+)%]:%d+$")
  if sock_path then
    if sock_path:match("^(.*)/[^/]+$") ~= dir or sock_path:find("/../", 1, true) then
      error(("rpc: the connection file %s names a socket outside its own folder"):format(path), 0)
    end
  elseif tcp_host ~= "127.0.0.1" and tcp_host ~= "::1" then
    error(("rpc: the connection file %s names an endpoint that is not on this machine's loopback; pass a remote endpoint in SEER_RPC_ENDPOINT and SEER_RPC_KEY instead"):format(path), 0)
  end
  if info.endpoint:find("*", 1, true) then
    error(("rpc: the server of %s has not bound its endpoint yet (is it running? seer rpc serve writes it when ready)"):format(path), 0)
  end
  if info.signature_scheme ~= nil and info.signature_scheme ~= "hmac-sha256" then
    error(("rpc: the connection file %s asks for an unsupported signature scheme"):format(path), 0)
  end
  return info
end
M.read_connection = read_connection

---Connects to the server and adds one tool per exposed function to srv.
---@param srv table a seer.mcp.server
---@param o {connection_file?: string, endpoint?: string, key?: string, control_endpoint?: string, name?: string, timeout?: number, load_timeout?: number}
---@return table client the seer.rpc client
function M.install(srv, o)
  -- Endpoint and key from the environment (what the host knows) when given; else the file.
  local info
  if o.endpoint and o.key then
    info = { endpoint = o.endpoint, key = o.key, signature_scheme = "hmac-sha256", transport = o.endpoint:match("^(%a+)://"),
             control_endpoint = o.control_endpoint }
  else
    info = read_connection(o.connection_file)
  end
  local client = rpc.connect(info, { name = o.name })
  local spec = client:hello(o.load_timeout or 600)
  local name = o.name or spec.name or "rpc"
  srv.instructions = rpc.prompt_text(name, spec.functions)
  local wait = srv:waiter()
  for _, f in ipairs(spec.functions) do
    local desc = f.description ~= "" and f.description or ("(no description) " .. f.signature)
    srv:add_tool{
      name = f.name,
      title = f.signature,
      description = desc .. "\n\nSignature: " .. f.signature,
      inputSchema = f.input_schema,
      run = function(ctx, args)
        local kwargs = {}
        for k, v in pairs(args) do kwargs[k] = v end
        local id = client:send_call(f.name, nil, 0, kwargs, { timeout = o.timeout })
        ctx:on_cancel(function() client:cancel(id) end)
        local content, bufs
        while true do
          -- Take whatever replies have arrived (other tasks' too) off the socket.
          local got = client.pending[id]
          if got then
            client.pending[id] = nil
            content, bufs = got[1], got[2]
            break
          end
          local c, b = client:_recv(0)
          if c then
            if c.id == id then content, bufs = c, b break end
            if c.id ~= nil then client.pending[c.id] = { c, b } end
          else
            client:_check_alive("while running " .. f.name)
            wait(client.nsock, 1000, function() return client.pending[id] ~= nil end)
          end
        end
        client.inflight[id] = nil
        if not content.ok then
          local msg = ("%s failed: %s"):format(f.name, tostring(content.error))
          if content.traceback and content.traceback ~= json.null then
            msg = msg .. "\n\nremote traceback:\n" .. content.traceback
          end
          return { content = { { type = "text", text = msg } }, isError = true }
        end
        return tool_result(content, bufs)
      end,
    }
  end
  srv:on_exit(function() client:close() end)
  return client
end

return M
