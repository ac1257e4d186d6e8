-- seer's MCP client against the official MCP SDK's own client (Python), measured in the same
-- run against the same fixture server (tests/fixtures/mcp/sdk_server.py): connect (start +
-- initialize + tools/list), tools/call round trip of a tiny tool, and a 4 MB result, over stdio
-- and streamable HTTP. Run: ./seer tests/bench/mcp_client.lua [N]   (needs make setup)
local mcp = require "seer.mcp.client"
local process = require "seer.process"

local root = seer.script_dir() .. "/../.."
local python = root .. "/.venv-test/bin/python"
local fixture = root .. "/tests/fixtures/mcp/sdk_server.py"
local n = tonumber(arg[1]) or 300
if os.execute("'" .. python .. "' -c 'import mcp' >/dev/null 2>&1") ~= 0 then
  print("skipped: no MCP SDK (.venv-test); run make setup")
  return
end

local dir = process.mkdtemp("/tmp/seer-mcp-bench-")
local port_file = dir .. "/port"
local server = process.spawn { argv = { python, fixture, "--name", "bench", "--http", "0", "--port-file", port_file },
  stderr = "null" }
local port
for _ = 1, 1000 do
  local f = io.open(port_file)
  if f then port = f:read("*a"); f:close(); break end
  process.sleep_ms(20)
end
assert(port, "the HTTP fixture did not start")
local url = "http://127.0.0.1:" .. port .. "/mcp"

local function measure(cfg)
  local t0 = seer.now()
  local c = mcp.connect({ bench = cfg })
  local connect = seer.now() - t0
  c:call("add", { a = 1, b = 2 })
  t0 = seer.now()
  for i = 1, n do c:call("add", { a = i, b = 2 }) end
  local rt = (seer.now() - t0) / n
  t0 = seer.now()
  assert(#c:call("big", { n = 4000000 }).content[1].text == 4000000)
  local big = seer.now() - t0
  c:close()
  return connect * 1000, rt * 1000, big * 1000
end

local ours = {
  stdio = { measure { type = "stdio", command = python, args = { fixture, "--name", "bench" } } },
  http = { measure { type = "http", url = url } },
}
local p = io.popen(("'%s' '%s/tests/bench/mcp_client_peer.py' '%s' '%s' %d '%s'"):format(python, root, python, fixture, n, url))
local peer = {}
for line in p:lines() do
  local kind, a, b, c, v = line:match("^(%S+) (%S+) (%S+) (%S+) (%S+)$")
  if kind then peer[kind] = { tonumber(a), tonumber(b), tonumber(c), version = v } end
end
p:close()
server:stop(2000)
os.execute("rm -rf '" .. dir .. "'")

print(("== MCP client: seer vs the MCP Python SDK client (%d calls; same SDK server)"):format(n))
print(("  protocol: seer %s; the SDK client negotiated %s (stdio) and %s (http)"):format(mcp.PROTOCOL_VERSION,
  peer.stdio and peer.stdio.version or "?", peer.http and peer.http.version or "?"))
for _, kind in ipairs { "stdio", "http" } do
  local o, q = ours[kind], peer[kind]
  local names = { "connect (start, initialize, tools/list)", "tools/call round trip", "4 MB tools/call result" }
  for i, what in ipairs(names) do
    if q then
      print(("  %-5s %-40s seer %8.3f ms   sdk %8.3f ms   (sdk/seer %.2f)"):format(kind, what, o[i], q[i], q[i] / o[i]))
    else
      print(("  %-5s %-40s seer %8.3f ms   (the SDK client failed)"):format(kind, what, o[i]))
    end
  end
end
