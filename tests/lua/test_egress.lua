-- seer.egress: the allow-list filter and the forwarder, relaying real HTTP through a proxy chain
-- (seer.http -> forward -> unix socket -> filter -> tests/fixtures/http/fake_server.py), each
-- relay in its own seer process as in a sandbox.
local T = require "testing"
local E = require "seer.egress"
local process = require "seer.process"
local json = require "seer.json"

T.test("allow-list matching: exact names, *.subdomains, ports; malformed entries refused", function()
  local m = E.matcher{ "openrouter.ai", "*.anthropic.com", "data.example.org:8443" }
  T.ok(m("openrouter.ai", 443)); T.ok(m("OpenRouter.AI.", 80))
  T.ok(not m("openrouter.ai", 22), "port 22 is not allowed by default")
  T.ok(not m("evil-openrouter.ai", 443)); T.ok(not m("openrouter.ai.evil.com", 443))
  T.ok(m("api.anthropic.com", 443)); T.ok(not m("anthropic.com", 443), "*.x does not cover x itself")
  T.ok(not m("api.anthropic.com.evil.com", 443))
  T.ok(m("data.example.org", 8443)); T.ok(not m("data.example.org", 443))
  T.raises(function() E.matcher{} end, "non-empty list", true)
  T.raises(function() E.matcher{ "a/b" } end, "is not a host name", true)
  T.raises(function() E.matcher{ "*.*.com" } end, "is not a host name", true)
  T.raises(function() E.matcher{ 5 } end, "must be a string", true)
end)

local dir = T.tmpdir()
local SEER = require("seer.jupyter").seer_binary()
local fake, fake_port, filter, forward, proxy_port

local function setup()
  if forward then return end
  fake = process.spawn{ argv = { "/usr/bin/python3", seer.script_dir() .. "/../fixtures/http/fake_server.py" }, stdout = "pipe", stderr = "null" }
  fake_port = tonumber(fake:read_line(10000))
  local sockpath = dir .. "/egress.sock"
  -- "api.allowed.test" resolves to the fake server only through the filter's own map
  filter = process.spawn{ argv = { SEER, "-e", ([[require("seer.egress").filter{ socket = %q, log = %q,
      allow = { "api.allowed.test:%d", "*.wild.test:%d" },
      resolve = { ["api.allowed.test"] = "127.0.0.1", ["x.wild.test"] = "127.0.0.1", ["blocked.test"] = "127.0.0.1" },
      on_ready = function() print("ready") io.stdout:flush() end }]]):format(sockpath, dir .. "/egress.log", fake_port, fake_port) },
    stdout = "pipe", stderr = "inherit" }
  assert(filter:read_line(10000) == "ready", "the filter did not start")
  forward = process.spawn{ argv = { SEER, "-e", ([[require("seer.egress").forward{ port = 0, socket = %q,
      on_ready = function(p) print(p) io.stdout:flush() end }]]):format(sockpath) }, stdout = "pipe", stderr = "inherit" }
  proxy_port = tonumber(forward:read_line(10000))
  assert(proxy_port, "the forwarder did not start")
end

T.test("an allowed name is reached through the chain; plain HTTP and a wildcard too", function()
  setup()
  local http = require "seer.http"
  local proxy = "http://127.0.0.1:" .. proxy_port
  local r = http.get(("http://api.allowed.test:%d/json"):format(fake_port), { proxy = proxy, retries = 0 })
  T.eq(r.status, 200)
  T.eq(r:json().hello, "world")
  local p = http.post_json(("http://x.wild.test:%d/json"):format(fake_port), { k = 1 }, { proxy = proxy, retries = 0 })
  T.eq(p.body, '{"k":1}')
  -- a streamed body larger than the relay's pending cap arrives whole (backpressure, no loss)
  local big = http.get(("http://api.allowed.test:%d/big/3000000"):format(fake_port), { proxy = proxy, retries = 0 })
  T.eq(#big.body, 3000000)
end)

T.test("names and ports not on the list get 403 and a log line; the sandbox's own DNS is never used", function()
  setup()
  local http = require "seer.http"
  local proxy = "http://127.0.0.1:" .. proxy_port
  local r = http.get(("http://blocked.test:%d/json"):format(fake_port), { proxy = proxy, retries = 0 })
  T.eq(r.status, 403)
  T.contains(r.body, "blocked.test:" .. fake_port .. " is not in SandboxConfig.network.allow")
  T.eq(http.get("http://api.allowed.test:22/json", { proxy = proxy, retries = 0 }).status, 403)
  -- HTTPS: the CONNECT is refused before any byte of TLS
  local msg = T.raises(function() http.get("https://evil.example.com/", { proxy = proxy, retries = 0 }) end)
  T.contains(msg, "seer.http: GET https://evil.example.com/ failed")
  local log = seer.read_file(dir .. "/egress.log")
  T.contains(log, ("refused GET blocked.test:%d (not in network.allow)"):format(fake_port))
  T.contains(log, "refused CONNECT evil.example.com:443 (not in network.allow)")
  T.contains(log, ("allowed GET api.allowed.test:%d"):format(fake_port))
end)

T.test("garbage and silent clients cost the relays nothing lasting; others are still served", function()
  setup()
  local sock = require "seer.sock"
  local fds = {}
  for i = 1, 20 do fds[i] = sock.connect_tcp("127.0.0.1", proxy_port, 2000) end
  local g = assert(sock.connect_tcp("127.0.0.1", proxy_port, 2000))
  sock.send_all(g, "NOT A PROXY REQUEST\r\n\r\n")
  T.ok(sock.wait(g, sock.POLLIN, 3000))
  T.contains(sock.recv(g) or "", "400 Bad Request")
  sock.close(g)
  local r = require("seer.http").get(("http://api.allowed.test:%d/json"):format(fake_port),
    { proxy = "http://127.0.0.1:" .. proxy_port, retries = 0, timeout = 5 })
  T.eq(r.status, 200)
  for _, fd in ipairs(fds) do sock.close(fd) end
end)

T.test("a sandbox with network = {allow = ...}: listed names through the proxy, the rest refused and logged, no other route", function()
  if os.execute("command -v bwrap >/dev/null 2>&1") ~= 0 then T.skip("bubblewrap is not installed (make setup installs it)") end
  setup()
  local env = require "seer.environment"
  local sbdir = T.tmpdir()
  pcall(require("ffi").cdef, "int setenv(const char *name, const char *value, int overwrite);")
  require("ffi").C.setenv("SEER_SANDBOX_DIR", sbdir, 1)
  local sandbox = env.Sandbox(env.SandboxConfig{
    network = { allow = { "api.allowed.test:" .. fake_port }, resolve = { ["api.allowed.test"] = "127.0.0.1" } },
    limits = { memory = "1G", processes = 128 }, timeout = 300,
  }):start{ name = "egress" }
  local ok, err = pcall(function()
    local code = ([[local http = require "seer.http"
local r = http.get("http://api.allowed.test:%d/json", { retries = 0, timeout = 10 })
print("allowed", r.status, r:json().hello)
local b = http.get("http://blocked.test:%d/json", { retries = 0, timeout = 10 })
print("blocked", b.status)
local okd, e = pcall(http.get, "http://127.0.0.1:%d/json", { retries = 0, timeout = 3, proxy = "" })
print("direct", okd and "reached" or "refused")
local OA = require "toolkit.openai_client"
local c = OA.new{ base_url = "http://api.allowed.test:%d/v1", api_key = "sk-test-123" }
print("chat", c:complete("m", "through the proxy"))]]):format(fake_port, fake_port, fake_port, fake_port)
    local out = sandbox:exec({ "/opt/seer/bin/seer", "-e", code }, { timeout = 60 })
    T.contains(out, "allowed\t200\tworld")
    T.contains(out, "blocked\t403")
    T.contains(out, "direct\trefused")
    T.contains(out, "chat\techo: through the proxy")
    -- the same from a notebook kernel in the sandbox
    local session = require("seer.execution").create_notebook_session(sandbox, nil, { name = "egress", output_dir = sbdir .. "/nb" })
    local r = session:exec(("print(require('seer.http').get('http://api.allowed.test:%d/json', { retries = 0 }).status)"):format(fake_port))
    T.eq(r.text, "200\n")
    session:terminate()
    local log = seer.read_file(sandbox.state_dir .. "/egress.log")
    T.contains(log, ("refused GET blocked.test:%d (not in network.allow)"):format(fake_port))
    T.contains(log, ("allowed GET api.allowed.test:%d"):format(fake_port))
  end)
  sandbox:terminate()
  if not ok then error(err, 0) end
end)

T.test("stop the relays", function()
  for _, c in ipairs({ forward, filter, fake }) do if c then c:stop(500) end end
end)
