-- seer.mcp.client against real MCP servers written with the official Python SDK
-- (tests/fixtures/mcp/sdk_server.py, run with .venv-test/bin/python), over stdio and over
-- streamable HTTP (SSE replies, and JSON replies with --json-response): tools, arguments,
-- images, tool errors, timeouts, crashes, clashing names, progress and logging.
local T = require "testing"
local mcp = require "seer.mcp.client"
local process = require "seer.process"
local host = require "seer.core.host"

local root = seer.script_dir() .. "/../.."
local python = root .. "/.venv-test/bin/python"
local fixture = root .. "/tests/fixtures/mcp/sdk_server.py"

local function have_sdk()
  return os.execute("'" .. python .. "' -c 'import mcp' >/dev/null 2>&1") == 0
end
local sdk = have_sdk()
local function need_sdk()
  if not sdk then T.skip("no MCP SDK (.venv-test); run make setup") end
end

local function stdio(name, extra)
  local args = { fixture, "--name", name }
  for _, a in ipairs(extra or {}) do args[#args + 1] = a end
  return { type = "stdio", command = python, args = args }
end

-- HTTP servers run as our children for the whole file; their ports come through a file.
local dir = T.tmpdir()
local web = {}
local function start_http(name, extra)
  local port_file = dir .. "/" .. name .. ".port"
  local argv = { python, fixture, "--name", name, "--http", "0", "--port-file", port_file }
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  web[name] = { child = process.spawn { argv = argv, stderr = dir .. "/" .. name .. ".stderr" }, port_file = port_file }
end
local function http_url(name)
  local w = web[name]
  local deadline = process.now_ms() + 20000
  while not w.port do
    local f = io.open(w.port_file)
    if f then w.port = f:read("*a"); f:close() end
    if not w.port then
      local alive, how = w.child:alive()
      if not alive then error("the HTTP fixture " .. name .. " " .. how .. ": " .. (seer.read_file(dir .. "/" .. name .. ".stderr") or "")) end
      if process.now_ms() > deadline then error("the HTTP fixture " .. name .. " did not start in 20 s") end
      process.sleep_ms(20)
    end
  end
  return "http://127.0.0.1:" .. w.port .. "/mcp"
end

-- One client with two stdio servers and two HTTP servers, shared by the tests below.
local client
local function shared()
  need_sdk()
  if not client then
    client = mcp.connect({
      alpha = stdio("alpha"),
      beta = stdio("beta", { "--only", "shared,echo" }),
      web = { type = "http", url = http_url("web") },
      plain = { type = "streamable-http", url = http_url("plain"), headers = { ["X-Test"] = "1" } },
    }, { timeout = 10, connect_timeout = 30 })
  end
  return client
end

if sdk then
  start_http("web", { "--only", "echo,add,image,fail,sleep,progress,big,log" })
  start_http("plain", { "--only", "echo,add", "--json-response" })
end

local function by_name(tools)
  local t = {}
  for _, x in ipairs(tools) do t[x.qualified_name] = x end
  return t
end

T.test("mcp client: tools of all servers, names qualified only where they clash", function()
  local c = shared()
  local tools = by_name(c:tools())
  -- alpha, beta and web all have echo; alpha and beta have shared; web and plain have add
  T.ok(tools["alpha__echo"] and tools["beta__echo"] and tools["web__echo"] and tools["plain__echo"])
  T.ok(tools["alpha__shared"] and tools["beta__shared"])
  T.ok(tools["crash"], "a tool only one server has keeps its name")
  T.eq(tools["crash"].server, "alpha")
  T.eq(tools["crash"].name, "crash")
  T.eq(tools["web__add"].server, "web")
  local add = tools["alpha__add"]
  T.eq(add.description, "Adds two integers.")
  T.eq(add.input_schema.type, "object")
  T.eq(add.input_schema.properties.a.type, "integer")
  T.eq(add.input_schema.required, { "a", "b" })
  local servers = c:servers()
  T.eq(#servers, 4)
  for _, s in ipairs(servers) do
    T.eq(s.protocol_version, "2025-11-25", s.name)
    T.eq(s.server_info.name, s.name)
  end
end)

T.test("mcp client: calls with arguments over stdio and HTTP (SSE and JSON replies)", function()
  local c = shared()
  for _, name in ipairs { "alpha__add", "web__add", "plain__add" } do
    local r = c:call(name, { a = 20, b = 22 })
    T.eq(r.isError, false, name)
    T.eq(r.content[1].type, "text")
    T.eq(r.content[1].text, "42", name)
    T.eq(r.structuredContent.result, 42, name)
  end
  T.eq(c:call_tool("beta", "echo", { text = "héllo\nworld" }).content[1].text, "héllo\nworld")
  T.eq(c:call("alpha__shared").content[1].text, "alpha")
  T.eq(c:call("beta__shared").content[1].text, "beta")
  T.raises(function() c:call("shared") end, "several servers have a tool 'shared'", true)
  T.raises(function() c:call("nope") end, "mcp: no tool 'nope'", true)
end)

T.test("mcp client: wrong arguments and unknown tools are tool errors, unknown methods errors", function()
  local c = shared()
  T.eq(c:call("alpha__add", { a = "not a number", b = 1 }).isError, true)
  -- This SDK answers an unknown tool with an isError result (others use JSON-RPC -32602).
  local r = c:call_tool("alpha", "no_such_tool", {})
  T.eq(r.isError, true)
  T.contains(r.content[1].text, "no_such_tool")
  T.raises(function() c:request("web", "no/such/method") end,
    "mcp server 'web': no/such/method failed: Method not found (JSON-RPC error -32601)", true)
  T.eq(type(c:request("alpha", "resources/list").resources), "table")
end)

T.test("mcp client: image content", function()
  local c = shared()
  for _, name in ipairs { "alpha__image", "web__image" } do
    local r = c:call(name)
    local block = r.content[1]
    T.eq(block.type, "image")
    T.eq(block.mimeType, "image/png")
    T.eq(block.data:sub(1, 12), "iVBORw0KGgoA", "base64 of the PNG signature")
  end
end)

T.test("mcp client: a failing tool is a result with isError", function()
  local c = shared()
  for _, name in ipairs { "alpha__fail", "web__fail" } do
    local r = c:call(name, { message = "the cell raised" })
    T.eq(r.isError, true, name)
    T.contains(r.content[1].text, "the cell raised")
  end
end)

T.test("mcp client: a call past its timeout is cancelled and the client stays usable", function()
  local c = shared()
  for _, server in ipairs { "alpha", "web" } do
    local t0 = host.now()
    local msg = T.raises(function() c:call_tool(server, "sleep", { seconds = 5 }, { timeout = 0.4 }) end)
    T.contains(msg, "mcp server '" .. server .. "': tools/call 'sleep' timed out after 0.4 s")
    T.ok(host.now() - t0 < 2.5, "took " .. (host.now() - t0) .. " s")
    T.eq(c:call_tool(server, "echo", { text = "still here" }).content[1].text, "still here")
  end
end)

T.test("mcp client: progress notifications reach on_progress", function()
  local c = shared()
  for _, name in ipairs { "alpha__progress", "web__progress" } do
    local seen = {}
    local r = c:call(name, { steps = 3 }, {
      on_progress = function(p, total, message, server) seen[#seen + 1] = { p, total, message, server } end,
    })
    T.eq(r.content[1].text, "done 3")
    local server = name:match("^(%w+)__")
    T.eq(seen, { { 1, 3, "step 1", server }, { 2, 3, "step 2", server }, { 3, 3, "step 3", server } }, name)
  end
  -- An error in the handler cancels the call and surfaces.
  T.raises(function()
    c:call("alpha__progress", { steps = 3 }, { on_progress = function() error("enough") end })
  end, "on_progress handler failed.*enough")
  T.eq(c:call("alpha__echo", { text = "ok" }).content[1].text, "ok")
end)

T.test("mcp client: logging notifications are queued", function()
  local c = shared()
  c:notifications()
  T.eq(c:call("alpha__log", { text = "from alpha" }).content[1].text, "logged")
  T.eq(c:call("web__log", { text = "from web" }).content[1].text, "logged")
  local got = {}
  for _, n in ipairs(c:notifications()) do
    if n.method == "notifications/message" then got[n.server] = n.params.data end
  end
  T.eq(got, { alpha = "from alpha", web = "from web" })
end)

T.test("mcp client: large results and ping", function()
  local c = shared()
  for _, name in ipairs { "alpha__big", "web__big" } do
    T.eq(#c:call(name, { n = 4000000 }).content[1].text, 4000000, name)
  end
  local big = string.rep("z", 2000000)
  T.eq(#c:call("alpha__echo", { text = big }).content[1].text, 2000000)
  T.ok(c:ping() < 2)
  T.eq(c:request("web", "ping"), {})
end)

T.test("mcp client: a server that crashes mid-call is an error with its status and stderr", function()
  need_sdk()
  local c = mcp.connect({ crashy = stdio("crashy"), calm = stdio("calm", { "--only", "echo" }) }, { timeout = 10 })
  local msg = T.raises(function() c:call("crash", { code = 3 }) end)
  T.contains(msg, "mcp server 'crashy': tools/call 'crash': the server exited with status 3")
  T.contains(msg, "fixture: about to crash on purpose")
  msg = T.raises(function() c:call("crashy__echo", { text = "x" }) end)
  T.contains(msg, "mcp server 'crashy'")
  T.contains(msg, "exited with status 3")
  T.eq(c:call("calm__echo", { text = "fine" }).content[1].text, "fine")
  local dead = {}
  for _, s in ipairs(c:servers()) do dead[s.name] = s.dead ~= nil end
  T.eq(dead, { crashy = true, calm = false })
  c:close()
  c:close()
  T.raises(function() c:tools() end, "the client is closed", true)
end)

T.test("mcp client: an HTTP server that restarted (404 for the session) gets a new session, once", function()
  need_sdk()
  start_http("restart", { "--only", "echo" })
  local url = http_url("restart")
  local port = web.restart.port
  local c = mcp.connect({ r = { type = "http", url = url } }, { timeout = 10, connect_timeout = 30 })
  T.eq(c:call("echo", { text = "one" }).content[1].text, "one")
  web.restart.child:stop(500)
  -- the same port, a new server process that never saw the session
  local port_file = dir .. "/restart2.port"
  local child = process.spawn{ argv = { python, fixture, "--name", "restart", "--only", "echo", "--http", port,
                                        "--port-file", port_file }, stderr = dir .. "/restart2.stderr" }
  local deadline = process.now_ms() + 20000
  while not io.open(port_file) and process.now_ms() < deadline do process.sleep_ms(20) end
  T.eq(c:call("echo", { text = "two" }).content[1].text, "two")
  c:close()
  child:stop(500)
end)

T.test("mcp client: configuration and option errors", function()
  T.raises(function() mcp.connect({ s = { type = "sse", url = "http://127.0.0.1:1/sse" } }) end,
    "mcp server 's': type 'sse'", true)
  T.raises(function() mcp.connect({ s = { type = "ws" } }) end,
    "mcp server 's': unknown type 'ws' (valid types: stdio, http, streamable-http)", true)
  T.raises(function() mcp.connect({ s = { command = "/nonexistent/x" } }) end,
    "mcp server 's': cannot start '/nonexistent/x'", true)
  T.raises(function() mcp.connect({}, { timout = 3 }) end, "unknown option 'timout'", true)
  T.raises(function() mcp.connect({}, { stderr = "loud" }) end, "stderr must be", true)
  T.raises(function() mcp.connect({ s = { url = "http://127.0.0.1:1/mcp" } }, { connect_timeout = 2 }) end,
    "mcp server 's': initialize: POST http://127.0.0.1:1/mcp", true)
  local c = mcp.connect({})
  T.eq(c:tools(), {})
  c:close()
end)

T.test("mcp client: close shuts every server down", function()
  need_sdk()
  local c = shared()
  local pids = {}
  for _, s in ipairs(c:servers()) do if s.pid then pids[#pids + 1] = s.pid end end
  T.eq(#pids, 2)
  local t0 = host.now()
  c:close()
  client = nil
  T.ok(host.now() - t0 < 2.5, "close took " .. (host.now() - t0) .. " s")
  for _, pid in ipairs(pids) do
    T.ok(os.execute("kill -0 " .. pid .. " 2>/dev/null") ~= 0, "server " .. pid .. " still runs")
  end
  for _, w in pairs(web) do w.child:stop(2000) end
end)

-- Issue 18, class 5: a server (which may be a sandbox's) that answers tools/call with content
-- blocks of the wrong shape and text that is not UTF-8. Written by hand (the SDK would not send
-- this): JSON-RPC lines on stdio.
T.test("mcp client: malformed content blocks and non-UTF-8 text from a hostile server", function()
  local script = [[
local json = require "seer.json"
while true do
  local line = io.read("*l")
  if not line then break end
  local m = json.decode(line)
  local function reply(result) io.write(json.encode({ jsonrpc = "2.0", id = m.id, result = result }), "\n") io.flush() end
  if m.method == "initialize" then
    reply({ protocolVersion = m.params.protocolVersion, capabilities = { tools = {} }, serverInfo = { name = "evil", version = "1" } })
  elseif m.method == "tools/list" then
    reply({ tools = { { name = "evil", inputSchema = { type = "object" } } } })
  elseif m.method == "tools/call" then
    -- raw text: a number, a block without type, a text block whose text is a table, bad UTF-8
    io.write('{"jsonrpc":"2.0","id":' .. m.id .. ',"result":{"content":[5,{"x":1},{"type":"text","text":{"a":1}},' ..
      '{"type":"text","text":"bad \255\254 bytes"}],"isError":"no"}}\n')
    io.flush()
  end
end
]]
  local c = mcp.connect({ evil = { type = "stdio", command = host.exe_path and host.exe_path() or require("seer.jupyter").seer_binary(),
                                   args = { "-e", script } } })
  local r = c:call("evil", {})
  T.eq(#r.content, 4)
  for i = 1, 3 do
    T.eq(r.content[i].type, "text")
    T.contains(r.content[i].text, "malformed content block")
  end
  T.eq(r.content[4].text, "bad \239\191\189\239\191\189 bytes")
  T.eq(r.isError, false)
  c:close()
end)

-- An HTTP MCP server (plain Python, no SDK) that answers tools/list with an SSE stream whose
-- first message is a batch of N pings, and counts the client's answers: how many arrived and
-- how many were in flight at once (each answer is held DELAY seconds). A "stats" request
-- returns the counts.
local FLOOD = [[
import json, sys, threading, time, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
N, DELAY, PORT_FILE = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
lock = threading.Lock()
st = {"active": 0, "max_active": 0, "answers": 0}
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def reply(self, status, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        if body is not None: self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_POST(self):
        m = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        method = m.get("method") if isinstance(m, dict) else None
        if method is None:  # the client's answer to one of our pings
            with lock:
                st["active"] += 1
                st["max_active"] = max(st["max_active"], st["active"])
            time.sleep(DELAY)
            with lock:
                st["active"] -= 1
                st["answers"] += 1
            return self.reply(202)
        if method == "initialize":
            return self.reply(200, {"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": "2025-06-18",
                              "capabilities": {"tools": {}}, "serverInfo": {"name": "flood", "version": "1"}}})
        if method.startswith("notifications/"):
            return self.reply(202)
        if method == "stats":
            with lock:
                return self.reply(200, {"jsonrpc": "2.0", "id": m["id"], "result": dict(st)})
        if method == "tools/list":
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            batch = [{"jsonrpc": "2.0", "id": "p%d" % i, "method": "ping"} for i in range(N)]
            self.wfile.write(b"data: " + json.dumps(batch).encode() + b"\n\n")
            self.wfile.flush()
            time.sleep(0.3)
            self.wfile.write(b"data: " + json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {"tools": []}}).encode() + b"\n\n")
            self.wfile.flush()
            self.close_connection = True
            return
        return self.reply(200, {"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "no"}})
class S(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 4096
s = S(("127.0.0.1", 0), H)
open(PORT_FILE + ".tmp", "w").write(str(s.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
s.serve_forever()
]]

local function flood_server(n, delay)
  local d = T.tmpdir()
  seer.write_file(d .. "/flood.py", FLOOD)
  local child = process.spawn{ argv = { "/usr/bin/python3", d .. "/flood.py", tostring(n), tostring(delay), d .. "/port" },
                               stderr = d .. "/stderr" }
  local deadline = process.now_ms() + 10000
  while true do
    local f = io.open(d .. "/port")
    if f then
      local port = f:read("*a")
      f:close()
      return "http://127.0.0.1:" .. port .. "/mcp", child
    end
    if process.now_ms() > deadline then
      child:stop(200)
      error("the flood server did not start: " .. (seer.read_file(d .. "/stderr") or ""))
    end
    process.sleep_ms(20)
  end
end

-- stats once the answers stop coming
local function settled_stats(c, want)
  local deadline = process.now_ms() + 10000
  local s
  repeat
    s = c:request("flood", "stats")
    if s.answers >= want then break end
    process.sleep_ms(50)
  until process.now_ms() > deadline
  return s
end

T.test("mcp client: a server's batch of requests is answered a few POSTs at a time, not one connection each", function()
  local url, child = flood_server(200, 0.02)
  local ok, err = pcall(function()
    local c = mcp.connect({ flood = { type = "http", url = url } }, { timeout = 10, connect_timeout = 10 })
    local s = settled_stats(c, 200)
    T.eq(s.answers, 200)
    T.ok(s.max_active <= 4, ("%d answers were in flight at once"):format(s.max_active))
    c:close()
  end)
  child:stop(200)
  if not ok then error(err, 0) end
end)

T.test("mcp client: requests past the queue go unanswered, with a warning", function()
  local url, child = flood_server(3000, 0)
  local ok, err = pcall(function()
    local warnings = {}
    local c = mcp.connect({ flood = { type = "http", url = url } }, { timeout = 10, connect_timeout = 10,
      on_warning = function(server, text) warnings[#warnings + 1] = server .. ": " .. text end })
    local s = settled_stats(c, 1024)
    process.sleep_ms(200)
    s = c:request("flood", "stats")
    T.eq(s.answers, 1024)
    T.ok(s.max_active <= 4, ("%d answers were in flight at once"):format(s.max_active))
    local all = table.concat(warnings, "\n")
    T.contains(all, "flood: it sent more than 1028 requests at once: answers beyond that are not sent")
    T.contains(all, "1976 of its requests went unanswered")
    c:close()
  end)
  child:stop(200)
  if not ok then error(err, 0) end
end)

T.test("mcp client: max_result_bytes cuts a response as it streams in; what the whole response said is kept; the next call works", function()
  -- a stdio server that writes results the way the TypeScript SDK does (result first, the id
  -- last): a text of args.size bytes, an image, structuredContent and isError = true after them
  local script = [[
local json = require "seer.json"
while true do
  local line = io.read("*l")
  if not line then break end
  local m = json.decode(line)
  local function reply(result) io.write(json.encode({ jsonrpc = "2.0", id = m.id, result = result }), "\n") io.flush() end
  if m.method == "initialize" then
    reply({ protocolVersion = m.params.protocolVersion, capabilities = { tools = {} }, serverInfo = { name = "big", version = "1" } })
  elseif m.method == "tools/list" then
    reply({ tools = { { name = "big", inputSchema = { type = "object" } } } })
  elseif m.method == "tools/call" and m.params.arguments.size then
    local n = m.params.arguments.size
    io.write('{"result":{"content":[{"type":"text","text":"', string.rep("x", n), '"},{"type":"image","data":"',
      string.rep("A", 1000), '","mimeType":"image/png"}],"structuredContent":{"t":"', string.rep("s", n),
      '"},"isError":true},"jsonrpc":"2.0","id":', m.id, '}\n')
    io.flush()
  elseif m.method == "tools/call" then
    -- a server's own seer_cut means nothing
    reply({ content = { { type = "text", text = "small" } }, seer_cut = { message_bytes = 1 } })
  end
end
]]
  local exe = host.exe_path and host.exe_path() or require("seer.jupyter").seer_binary()
  local cfg = { big = { type = "stdio", command = exe, args = { "-e", script } } }
  local c = mcp.connect(cfg, { max_result_bytes = 100000 })
  local r = c:call("big", { size = 20000000 })
  T.eq(#r.content, 2, "the text, cut, and the note (the image after the cut is not there)")
  T.ok(#r.content[1].text > 90000 and #r.content[1].text <= 100000, "kept " .. #r.content[1].text)
  T.eq(r.content[1].text, string.rep("x", #r.content[1].text))
  T.contains(r.content[2].text, "only its first")
  T.contains(r.content[2].text, "(max_result_bytes = 100000) and the rest was skipped")
  T.eq(r.isError, true, "isError, which came after the cut")
  T.eq(r.structuredContent, nil)
  T.eq(r.seer_cut.max_result_bytes, 100000)
  T.eq(r.seer_cut.content_bytes, 20001000)
  T.ok(r.seer_cut.message_bytes > 40000000, tostring(r.seer_cut.message_bytes))
  T.ok(r.seer_cut.read_bytes <= 100000, tostring(r.seer_cut.read_bytes))
  r = c:call("big", {})
  T.eq(r.content[1].text, "small")
  T.eq(r.seer_cut, nil)
  -- a tools/call sent as a plain request is cut the same way
  r = c:request("big", "tools/call", { name = "big", arguments = { size = 1000000 } })
  T.eq(r.seer_cut.content_bytes, 1001000)
  T.contains(r.content[#r.content].text, "(max_result_bytes = 100000)")
  c:close()
  -- without the option the bound is mcp.MAX_RESULT_BYTES, 16 MiB (there was none below the 64 MiB
  -- of any message: a 20 MB response was held whole, and copied on its way to Lua)
  T.eq(mcp.MAX_RESULT_BYTES, 16 * 1024 * 1024)
  c = mcp.connect(cfg)
  r = c:call("big", { size = 3000000 })
  T.eq(#r.content[1].text, 3000000)
  T.eq(#r.structuredContent.t, 3000000)
  T.eq(r.seer_cut, nil)
  r = c:call("big", { size = 10000000 })
  T.eq(r.seer_cut and r.seer_cut.max_result_bytes, 16 * 1024 * 1024, "a 20 MB response is cut at the default")
  T.eq(#r.content, 3, "the text, the image and the note")
  T.eq(#r.content[1].text, 10000000)
  T.eq(r.content[2].type, "image")
  T.contains(r.content[3].text, "(max_result_bytes = 16777216) and the rest was skipped; structuredContent was left out]")
  T.eq(r.structuredContent, nil)
  T.eq(r.isError, true)
  T.ok(r.seer_cut.read_bytes <= 16 * 1024 * 1024, tostring(r.seer_cut.read_bytes))
  T.ok(r.seer_cut.message_bytes > 20000000, tostring(r.seer_cut.message_bytes))
  c:close()
  -- an explicit bound of 64 MiB reads a response whole again, up to the 64 MiB of any message
  c = mcp.connect(cfg, { max_result_bytes = 64 * 1024 * 1024 })
  r = c:call("big", { size = 10000000 })
  T.eq(r.seer_cut, nil)
  T.eq(#r.content[1].text, 10000000)
  T.eq(#r.structuredContent.t, 10000000)
  c:close()
  T.raises(function() mcp.connect({}, { max_result_bytes = 100 }) end, "max_result_bytes must be a whole number >= 4096", true)
end)

-- A stdio server (seer -e) whose tools/call answers with the raw line in the file its argument
-- names ("ID" where the request's id goes) and that, for {size = n}, sends n bytes of text.
local RAW_SERVER = [[
local json = require "seer.json"
local path = ...
local raw = path ~= "" and io.open(path, "rb"):read("*a") or ""
while true do
  local line = io.read("*l")
  if not line then break end
  local m = json.decode(line)
  local function reply(result) io.write(json.encode({ jsonrpc = "2.0", id = m.id, result = result }), "\n") io.flush() end
  if m.method == "initialize" then
    reply({ protocolVersion = m.params.protocolVersion, capabilities = { tools = {} }, serverInfo = { name = "raw", version = "1" } })
  elseif m.method == "tools/list" then
    reply({ tools = { { name = "raw", inputSchema = { type = "object" } } } })
  elseif m.method == "tools/call" and m.params.arguments.size then
    local chunk = string.rep("x", 1048576)
    io.write('{"jsonrpc":"2.0","id":', m.id, ',"result":{"content":[{"type":"text","text":"')
    for _ = 1, m.params.arguments.size / #chunk do io.write(chunk) end
    io.write('"}],"isError":false}}\n')
    io.flush()
  elseif m.method == "tools/call" then
    io.write((raw:gsub("ID", tostring(m.id))), "\n")
    io.flush()
  end
end
]]
local function seer_exe() return host.exe_path and host.exe_path() or require("seer.jupyter").seer_binary() end

T.test("mcp client: a result reaches Lua as json.decode gives it: marks, null, numbers, bad UTF-8 in keys and values", function()
  local json = require "seer.json"
  local raw = '{"jsonrpc":"2.0","id":ID,"result":{"content":[{"type":"text","text":"ok \255"}],"structuredContent":{'
    .. '"empty_a":[],"empty_o":{},"nul":null,"t":true,"f":false,"big":9007199254740993,"neg0":-0,"huge":1e999,'
    .. '"frac":0.1,"int":42,"sum":0.30000000000000004,"bad\255key":"v\254","emb":"a\\u0000b","esc":"\\u00e9\\n\\"","dup":1,"dup":2,'
    .. '"nest":[[[{"k":[null,[],{}]}]]],"cut":"\195"}}}'
  local file = T.tmpdir() .. "/raw.json"
  seer.write_file(file, raw)
  local c = mcp.connect({ raw = { type = "stdio", command = seer_exe(), args = { "-e", RAW_SERVER, file } } })
  local r = c:call("raw", {})
  T.eq(r.content[1].text, "ok \239\191\189")
  local s = r.structuredContent
  T.ok(json.is_object(r), "the result is marked an object")
  T.ok(json.is_array(r.content), "content is marked an array")
  T.ok(json.is_array(s.empty_a) and next(s.empty_a) == nil, "[] stays an array")
  T.ok(json.is_object(s.empty_o) and next(s.empty_o) == nil, "{} stays an object")
  T.eq(json.encode(s.empty_a) .. json.encode(s.empty_o), "[]{}")
  T.ok(s.nul == json.null, "null is json.null")
  T.eq({ s.t, s.f, s.frac, s.int }, { true, false, 0.1, 42 })
  -- the double the server's digits name; the text cJSON printed had 15 digits whenever they came
  -- within 2 ulp, so these arrived as 9007199254740990 and 0.3
  T.eq(s.big, 9007199254740992)
  T.eq(s.sum, 0.1 + 0.2)
  T.ok(s.sum ~= 0.3)
  T.ok(s.neg0 == 0 and 1 / s.neg0 < 0, "-0 is -0, as json.decode reads it")
  T.ok(s.huge == json.null, "1e999 (inf to cJSON) is null, as cJSON printed it")
  T.eq(s["bad\239\191\189key"], "v\239\191\189")
  T.eq(s["bad\255key"], nil)
  T.eq(s.emb, "a", "a string ends at \\u0000, as cJSON printed it")
  T.eq(s.esc, "\195\169\n\"")
  T.eq(s.dup, 2, "the last of a repeated key")
  local k = s.nest[1][1][1].k
  T.ok(json.is_array(s.nest[1][1]) and json.is_object(s.nest[1][1][1]), "nested marks")
  T.ok(k[1] == json.null and json.is_array(k[2]) and json.is_object(k[3]) and #k == 3, "null, [] and {} in a list")
  T.eq(s.cut, "\239\191\189")
  -- servers() and tools() come the same way
  T.eq(c:servers()[1].name, "raw")
  T.ok(json.is_object(c:tools()[1].input_schema))
  c:close()
end)

-- The result crosses into Lua once (the cJSON tree straight to Lua values): a process that gets
-- a 30 MiB response cut at 8 MiB grows by about twice the bound. It printed the tree as text,
-- copied the text into Lua and decoded it through a tree of its own: about 4 times the bound.
T.test("mcp client: a cut result costs the process about twice max_result_bytes, not four times", function()
  local dir = T.tmpdir()
  seer.write_file(dir .. "/server.lua", RAW_SERVER)
  seer.write_file(dir .. "/run.lua", [[
local mcp = require "seer.mcp.client"
local exe, server, size = arg[1], arg[2], tonumber(arg[3])
local c = mcp.connect({ raw = { type = "stdio", command = exe, args = { server, "" } } }, { max_result_bytes = 8 * 1048576 })
local r = c:call("raw", { size = size })
local kept = #r.content[1].text
c:close()
local st = io.open("/proc/self/status"):read("*a")
print(kept, st:match("VmHWM:%s*(%d+)"))
]])
  local function run(size)
    local p = io.popen(("'%s' '%s/run.lua' '%s' '%s/server.lua' %d 2>&1"):format(seer_exe(), dir, seer_exe(), dir, size))
    local out = p:read("*a")
    p:close()
    local kept, hwm = out:match("^(%d+)%s+(%d+)")
    T.ok(kept, out)
    return tonumber(kept), tonumber(hwm) / 1024
  end
  local _, base = run(0)
  local kept, peak = run(30 * 1048576)
  T.ok(kept > 8 * 1048576 - 4096 and kept <= 8 * 1048576, "kept " .. kept)
  -- AddressSanitizer's allocator (redzones, quarantine) changes what a peak means
  if os.execute(("grep -q __asan_init '%s'"):format(seer_exe())) == 0 then
    T.skip("the peak is not meaningful in an AddressSanitizer build (`make asan`)")
  end
  -- measured: 16 MiB over a small call's peak (32 MiB before)
  T.ok(peak - base < 24, ("a 30 MiB response cut at 8 MiB: peak %.1f MiB, %.1f MiB over a small call's %.1f"):format(peak, peak - base, base))
end)
