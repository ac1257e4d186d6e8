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

-- Hostile requests straight to a filter's unix socket (what <run>/egress.sock receives from a
-- sandbox), with a host-only canary service on the host's loopback that must never be reached.
local sock = require "seer.sock"
local canary, canary_port, canary_hits

local function canary_setup()
  if canary then return end
  canary_hits = dir .. "/canary.hits"
  canary = process.spawn{ argv = { "/usr/bin/python3", "-c", [[
import os, socket, sys, threading, time
parent = os.getppid()
def orphaned():  # ends with the test run, even one filtered past "stop the relays"
    while os.getppid() == parent: time.sleep(0.5)
    os._exit(0)
threading.Thread(target=orphaned, daemon=True).start()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 0)); s.listen(64)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    open(sys.argv[1], "a").write("hit\n")
    try: c.sendall(b"HOST-ONLY-CANARY\n")
    except OSError: pass
    c.close()
]], canary_hits }, stdout = "pipe", stderr = "inherit" }
  canary_port = tonumber(canary:read_line(10000))
  assert(canary_port, "the canary did not start")
end

local function hits()
  local f = io.open(canary_hits, "rb")
  if not f then return 0 end
  local n = select(2, f:read("*a"):gsub("\n", ""))
  f:close()
  return n
end

local nfilters = 0
-- A filter of its own (allow list, extra fields in Lua syntax); returns the child, its socket and log.
local function start_filter(allow, extra)
  nfilters = nfilters + 1
  local sockpath, logpath = ("%s/f%d.sock"):format(dir, nfilters), ("%s/f%d.log"):format(dir, nfilters)
  local p = process.spawn{ argv = { SEER, "-e", ([[require("seer.egress").filter{ socket = %q, log = %q,
      allow = seer.json.decode(%q), %s on_ready = function() print("ready") io.stdout:flush() end }]])
      :format(sockpath, logpath, json.encode(allow), extra or "") }, stdout = "pipe", stderr = "inherit" }
  assert(p:read_line(10000) == "ready", "the filter did not start")
  return p, sockpath, logpath
end

-- Sends raw bytes as one proxy connection; returns all that comes back before the close (3 s at most).
local function ask(sockpath, raw)
  local fd = assert(sock.connect_unix(sockpath, 2000))
  sock.send_all(fd, raw, 2000)
  local out, deadline = "", process.now_ms() + 3000
  while process.now_ms() < deadline do
    if sock.wait(fd, sock.POLLIN, 200) then
      local g = sock.recv(fd)
      if g == "" then break elseif g then out = out .. g end
    end
  end
  sock.close(fd)
  return out
end

local function with_filter(allow, extra, fn)
  local f, sp, lp = start_filter(allow, extra)
  local ok, err = pcall(fn, sp, lp)
  f:stop(500)
  if not ok then error(err, 0) end
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
  canary_setup()
  local before = hits()
  local sandbox = env.Sandbox(env.SandboxConfig{
    network = { allow = { "api.allowed.test:" .. fake_port, "*.wild.test:" .. canary_port, "localhost:" .. canary_port },
      resolve = { ["api.allowed.test"] = "127.0.0.1" } },
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
    -- from inside: a NUL in the host, a numeric form and a listed name resolving to the host's
    -- loopback never reach the host-only canary
    local px = ([[local sock = require "seer.sock"
local port = tonumber(os.getenv("HTTPS_PROXY"):match(":(%%d+)/?$"))
for _, req in ipairs{ "CONNECT 127.0.0.1\0.wild.test:%d HTTP/1.1\r\n\r\n", "CONNECT localhost\0.wild.test:%d HTTP/1.1\r\n\r\n",
  "GET http://127.0.0.1\0.wild.test:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", "CONNECT 2130706433:%d HTTP/1.1\r\n\r\n",
  "CONNECT localhost:%d HTTP/1.1\r\n\r\n" } do
  local fd = assert(sock.connect_tcp("127.0.0.1", port, 3000))
  sock.send_all(fd, req, 3000)
  local got = ""
  for _ = 1, 30 do
    if sock.wait(fd, sock.POLLIN, 100) then local g = sock.recv(fd); if not g or g == "" then break end; got = got .. g end
  end
  sock.close(fd)
  print("probe", (got:match("^HTTP/1.1 (%%d+)") or "none") .. (got:find("CANARY", 1, true) and " REACHED" or ""))
end]]):format(canary_port, canary_port, canary_port, canary_port, canary_port)
    local pout = sandbox:exec({ "/opt/seer/bin/seer", "-e", px }, { timeout = 60 })
    T.eq(select(2, pout:gsub("probe\t400\n", "")), 4, pout)
    T.contains(pout, "probe\t403\n")
    T.ok(not pout:find("REACHED", 1, true), pout)
    T.eq(hits(), before, "the host-only canary was reached from the sandbox")
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

T.test("host validation: DNS names, canonical IPv4 and [IPv6] only; NUL, control bytes, %, @, numeric IPv4 forms refused", function()
  T.eq({ E.host("API.Example.COM.") }, { "api.example.com", "name" })
  T.eq({ E.host("127.0.0.1") }, { "127.0.0.1", "ipv4" })
  T.eq({ E.host("[2001:DB8::1]") }, { "[2001:db8::1]", "ipv6" })
  T.eq({ E.host("localhost") }, { "localhost", "name" })
  for _, h in ipairs({ "127.0.0.1\0.anthropic.com", "localhost\0", "a\1b.com", "a\rb.com", "a\127b.com", "a b.com", "a%2eb.com",
    "user@a.com", "a\\b.com", "a_b.com", "a..b.com", ".a.com", "a.com..", "-a.com", "a-.com", "a:b.com", "[a.com]", "[::1",
    "", ".", string.rep("a", 64) .. ".com", string.rep("abcdefghi.", 26) .. "com", "\195\169.com",
    -- what inet_aton (and so getaddrinfo) also reads as 127.0.0.1, and other non-canonical IPv4
    "2130706433", "0x7f000001", "0x7f.1", "0x7f.0.0.1", "017.0.0.1", "0177.0.0.01", "127.1", "127.0.1", "127.0.0.1.1", "256.0.0.1", "1.2.3.04", "a.0x7f",
    -- IPv4 dressed as IPv6
    "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]" }) do
    local n, why = E.host(h)
    T.eq(n, nil, ("%q must be refused"):format(h))
    T.ok(type(why) == "string" and #why > 0, "a reason")
  end
  T.contains(select(2, E.host("127.0.0.1\0.anthropic.com")), "NUL")
  T.contains(select(2, E.host("2130706433")), "canonical IPv4")
  T.contains(select(2, E.host("[::ffff:127.0.0.1]")), "IPv4-mapped")
  for _, p in ipairs({ "0", "65536", "99999", "+80", "-1", "80a", "", "000080", " 80", "0x50" }) do T.eq(E.port(p), nil, ("port %q"):format(p)) end
  T.eq(E.port("80"), 80); T.eq(E.port("65535"), 65535); T.eq(E.port("1"), 1)
  -- the second line of defence: C never sees a string with a NUL (it would stop there)
  local ip, why = sock.resolve("127.0.0.1\0.anthropic.com")
  T.eq(ip, nil); T.contains(why, "NUL")
  local fd, cerr = sock.connect_tcp("127.0.0.1\0.x", 80, 100)
  T.eq(fd, nil); T.contains(cerr, "NUL")
  T.eq(sock.connect_unix(dir .. "/x\0y", 100), nil)
end)

T.test("wildcards are exact: *.example.com is sub.example.com, never example.com, evil-example.com or tricks; entries checked", function()
  local m = E.matcher{ "*.example.com", "api.x.org:8443" }
  T.ok(m("sub.example.com", 443)); T.ok(m("a.b.example.com", 80)); T.ok(m("SUB.Example.Com.", 443))
  for _, h in ipairs({ "example.com", "evil-example.com", "xexample.com", "example.com.evil.com", ".example.com", "..example.com",
    "sub..example.com", "x\0.example.com", "127.0.0.1\0.example.com", "x.example.com\0", "x .example.com", "x%00.example.com" }) do
    T.ok(not m(h, 443), ("%q must not match *.example.com"):format(h))
  end
  T.ok(m("api.x.org", 8443)); T.ok(not m("api.x.org", 443)); T.ok(not m("api.x.org", 8443.5)); T.ok(not m("api.x.org", 0))
  -- addresses match only address entries: exactly, or in a listed range
  local ip_ok
  m, ip_ok = E.matcher{ "*.example.com", "10.9.0.0/16", "127.0.0.1:9000" }
  T.ok(m("10.9.3.4", 443)); T.ok(not m("10.10.3.4", 443)); T.ok(m("127.0.0.1", 9000)); T.ok(not m("127.0.0.1", 443))
  T.ok(not m("2130706433", 9000)); T.ok(not m("127.1", 9000)); T.ok(not m("[::ffff:127.0.0.1]", 9000))
  T.ok(ip_ok("10.9.255.255", 80)); T.ok(not ip_ok("127.0.0.2", 9000))
  for _, e in ipairs({ "127.1", "2130706433", "a.com\0", "a.com\0.b", "-a.com", "a_b.com", "a.com:0", "a.com:65536", "a.com:80x",
    "*.*.com", "*", "*.", "a.*.com", "[::1]", "::1", "10.0.0.0/33", "*.10.0.0.1", "a.com/8", string.rep("a", 64) .. ".com" }) do
    T.raises(function() E.matcher{ e } end, "is not a host name", true)
  end
  -- an entry's trailing dot and case do not matter
  T.ok(E.matcher{ "Example.COM." }("example.com", 443))
end)

T.test("a NUL byte in the host never reaches a host-only service: CONNECT and plain HTTP get 400", function()
  canary_setup()
  with_filter({ "*.anthropic.com", "*.anthropic.com:" .. canary_port }, nil, function(sp, lp)
    for _, req in ipairs({
      ("CONNECT 127.0.0.1\0.anthropic.com:%d HTTP/1.1\r\n\r\n"):format(canary_port),
      ("CONNECT localhost\0.anthropic.com:%d HTTP/1.1\r\n\r\n"):format(canary_port),
      "CONNECT 127.0.0.1\0.anthropic.com:80 HTTP/1.1\r\n\r\n",
      ("GET http://127.0.0.1\0.anthropic.com:%d/ HTTP/1.1\r\nHost: x\r\n\r\n"):format(canary_port),
      ("GET http://localhost\0.anthropic.com:%d/ HTTP/1.1\r\nHost: x\r\n\r\n"):format(canary_port),
    }) do
      local out = ask(sp, req)
      T.contains(out, "HTTP/1.1 400 Bad Request", ("%q"):format(req))
      T.contains(out, "NUL")
      T.ok(not out:find("CANARY", 1, true), "the host-only service was reached")
    end
    T.eq(hits(), 0, "the host-only service was reached")
    local log = seer.read_file(lp)
    T.contains(log, "refused CONNECT host 127.0.0.1\\x00.anthropic.com: contains a NUL byte")
    T.contains(log, "refused GET host localhost\\x00.anthropic.com: contains a NUL byte")
    T.ok(not log:find("allowed", 1, true)); T.ok(not log:find("%z"), "the log holds no raw NUL")
  end)
end)

T.test("malformed hosts and ports, numeric IPv4 forms and mapped IPv6 get 400 with a reason; nothing is reached", function()
  canary_setup()
  local cp = canary_port
  with_filter({ "*.anthropic.com", "*.anthropic.com:" .. cp }, nil, function(sp, lp)
    local function connect(t) return ("CONNECT %s HTTP/1.1\r\n\r\n"):format(t) end
    local function get(u) return ("GET %s HTTP/1.1\r\nHost: x\r\n\r\n"):format(u) end
    for _, c in ipairs({
      { connect(("2130706433:%d"):format(cp)), "canonical IPv4" }, { connect(("0x7f.1:%d"):format(cp)), "canonical IPv4" },
      { connect(("0x7f000001:%d"):format(cp)), "canonical IPv4" }, { connect(("017.0.0.1:%d"):format(cp)), "canonical IPv4" },
      { connect(("127.1:%d"):format(cp)), "canonical IPv4" }, { connect(("[::ffff:127.0.0.1]:%d"):format(cp)), "IPv4-mapped" },
      { connect(("x%%2e.anthropic.com:%d"):format(cp)), "contains \"%\"" }, { connect(("u@x.anthropic.com:%d"):format(cp)), "contains \"@\"" },
      { connect(("x\\.anthropic.com:%d"):format(cp)), "contains \"\\\\\"" }, { connect(("x\1.anthropic.com:%d"):format(cp)), "0x01" },
      { connect(("x\127.anthropic.com:%d"):format(cp)), "0x7f" }, { connect((".anthropic.com:%d"):format(cp)), "empty label" },
      { connect(("x..anthropic.com:%d"):format(cp)), "empty label" }, { connect(string.rep("a", 70) .. ".anthropic.com:443"), "63" },
      { connect("x.anthropic.com:0"), "1 to 65535" }, { connect("x.anthropic.com:65536"), "1 to 65535" },
      { connect("x.anthropic.com:+443"), "1 to 65535" }, { connect("x.anthropic.com:0000443"), "1 to 65535" },
      { connect("x.anthropic.com"), "host:port" }, { connect(("127.0.0.1:%d:x.anthropic.com"):format(cp)), "1 to 65535" },
      { get(("http://x.anthropic.com@127.0.0.1:%d/"):format(cp)), "contains \"@\"" },
      { get(("http://127.0.0.1:%d@x.anthropic.com/"):format(cp)), "1 to 65535" },
      { get(("http://2130706433:%d/"):format(cp)), "canonical IPv4" },
      { get(("http://x.anthropic.com:%d/a\1b"):format(cp)), "control bytes" },
    }) do
      local out = ask(sp, c[1])
      T.contains(out, "HTTP/1.1 400 Bad Request", ("%q"):format(c[1]))
      T.contains(out, c[2], ("%q"):format(c[1]))
    end
    -- IPv6 literals are well-formed but never connected (IPv4 only)
    T.contains(ask(sp, connect(("[::1]:%d"):format(cp))), "403 Forbidden")
    T.eq(hits(), 0, "the host-only service was reached")
    T.ok(not seer.read_file(lp):find("allowed", 1, true))
  end)
end)

T.test("a listed name that resolves to loopback is refused (DNS rebinding) unless the allow-list names the address", function()
  canary_setup()
  if sock.resolve("localhost") ~= "127.0.0.1" then T.skip("localhost does not resolve to 127.0.0.1 here") end
  local before = hits()
  -- "localhost" stands for a public name whose DNS answer points at the host
  with_filter({ "localhost:" .. canary_port, "*.localhost:" .. canary_port }, nil, function(sp, lp)
    for _, req in ipairs({ ("CONNECT localhost:%d HTTP/1.1\r\n\r\n"):format(canary_port),
      ("GET http://LocalHost.:%d/ HTTP/1.1\r\nHost: x\r\n\r\n"):format(canary_port) }) do
      local out = ask(sp, req)
      T.contains(out, "403 Forbidden", ("%q"):format(req))
      T.contains(out, "resolves to 127.0.0.1, a loopback address")
      T.ok(not out:find("CANARY", 1, true), "the host-only service was reached")
    end
    T.eq(hits(), before, "the host-only service was reached")
    T.contains(seer.read_file(lp), ("refused CONNECT localhost:%d: resolves to 127.0.0.1, a loopback address"):format(canary_port))
  end)
  -- listing the address (or its range) is the researcher's explicit consent
  for _, allow in ipairs({ { "localhost:" .. canary_port, "127.0.0.1:" .. canary_port }, { "localhost:" .. canary_port, "127.0.0.0/8:" .. canary_port } }) do
    with_filter(allow, nil, function(sp)
      T.contains(ask(sp, ("CONNECT localhost:%d HTTP/1.1\r\n\r\n"):format(canary_port)), "HOST-ONLY-CANARY")
      T.contains(ask(sp, ("CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n"):format(canary_port)), "HOST-ONLY-CANARY")
    end)
  end
  T.eq(hits(), before + 4)
  T.eq(E.internal("127.0.0.1"), "loopback"); T.eq(E.internal("169.254.169.254"), "link-local")
  T.eq(E.internal("10.1.2.3"), "private (RFC 1918)"); T.eq(E.internal("172.31.0.1"), "private (RFC 1918)")
  T.eq(E.internal("192.168.1.1"), "private (RFC 1918)"); T.eq(E.internal("0.0.0.0"), "\"this network\"")
  T.eq(E.internal("8.8.8.8"), nil); T.eq(E.internal("172.32.0.1"), nil)
end)

T.test("a flood of refused requests (5000, 8 KiB hosts) leaves egress.log under its cap, escaped and useful", function()
  local cap = 16384
  with_filter({ "allowed.example" }, ("log_max = %d,"):format(cap), function(sp, lp)
    local t0 = process.now_ms()
    for i = 1, 5000 do
      local host = (i % 2 == 0) and (string.rep("a", 8000) .. i .. ".com") or ("x\0\1\27[31m" .. i .. ".evil.com")
      local out = ask(sp, ("CONNECT %s:443 HTTP/1.1\r\n\r\n"):format(host))
      if i % 500 == 0 then T.ok(out:find("HTTP/1.1 40[03]") ~= nil, "refused: " .. out:sub(1, 80)) end
    end
    local ms = process.now_ms() - t0
    T.ok(ms < 120000, ("5000 requests took %d ms"):format(ms))
    local log = seer.read_file(lp)
    T.ok(#log <= cap + 1024, ("egress.log is %d bytes (cap %d)"):format(#log, cap))
    T.contains(log, "refused CONNECT host x\\x00\\x01\\x1b[31m1.evil.com: contains a NUL byte")
    T.contains(log, "refused CONNECT host " .. string.rep("a", 256) .. "...(8005 bytes)")
    T.contains(log, "egress.log reached its cap (16384 bytes)")
    for line in log:gmatch("[^\n]+") do T.ok(#line < 800, "a log line of " .. #line .. " bytes") end
    T.ok(not log:find("[%z\1-\9\11-\31\127-\255]"), "raw control bytes in the log")
    -- the filter still serves: a fresh refusal is answered
    T.contains(ask(sp, "CONNECT other.example:443 HTTP/1.1\r\n\r\n"), "403 Forbidden")
  end)
  -- without a low cap: the rate limit and per-request repeats keep lines few
  with_filter({ "allowed.example" }, nil, function(sp, lp)
    for _ = 1, 2000 do ask(sp, "CONNECT same.evil.com:443 HTTP/1.1\r\n\r\n") end
    local log = seer.read_file(lp)
    local n = select(2, log:gsub("refused CONNECT same.evil.com:443", ""))
    T.eq(n, 3, "only the first refusals of one request are written")
  end)
end)

T.test("plain HTTP: the Host field must name the URL's host, and one request per connection (Connection: close)", function()
  -- an upstream that records what reaches it (a listed name on shared virtual hosting: a Host for
  -- another site, or a keep-alive second request for one, went to it unchecked)
  local rec = dir .. "/upstream.log"
  local up = process.spawn{ argv = { "/usr/bin/python3", "-c", [[
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
CRLF2 = bytes([13, 10, 13, 10])
while True:
    c, _ = s.accept(); c.settimeout(1); data = b""
    try:
        while CRLF2 not in data:
            g = c.recv(65536)
            if not g: break
            data += g
    except Exception: pass
    open(sys.argv[1], "ab").write(data + b"=====")
    c.sendall(b"HTTP/1.1 200 OK" + CRLF2[:2] + b"Content-Length: 2" + CRLF2[:2] + b"Connection: close" + CRLF2 + b"ok"); c.close()
]], rec }, stdout = "pipe", stderr = "null" }
  local port = tonumber((up:read_line(5000)))
  local a = ("api.allowed.test:%d"):format(port)
  local ok, err = pcall(with_filter, { a }, ('resolve = { ["api.allowed.test"] = "127.0.0.1" },'), function(sp)
    local r = ask(sp, "GET http://" .. a .. "/x HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    T.ok(r:match("^HTTP/1%.1 400"), r)
    T.contains(r, "the Host field names evil.example")
    r = ask(sp, "GET http://" .. a .. "/1 HTTP/1.1\r\nHost: API.allowed.test.:" .. port .. "\r\nConnection: keep-alive\r\n\r\n"
      .. "GET http://evil.example/2 HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    T.ok(r:match("^HTTP/1%.1 200"), r)
    local seen = seer.read_file(rec)
    T.contains(seen, "Host: " .. a .. "\r\n")
    T.contains(seen, "Connection: close\r\n")
    T.ok(not seen:find("keep-alive", 1, true), "the client's keep-alive went upstream")
    T.ok(not seen:find("GET /x", 1, true), "the request with a foreign Host reached the server")
  end)
  up:stop(500)
  if not ok then error(err, 0) end
end)

T.test("a server that closes right after a large answer: the slow client still gets all of it", function()
  -- both sides were closed as soon as one ended, cutting off what was still pending for the client
  local up = process.spawn{ argv = { "/usr/bin/python3", "-c", [[
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 0)); s.listen(4)
print(s.getsockname()[1], flush=True)
CRLF = bytes([13, 10])
while True:
    c, _ = s.accept(); c.settimeout(2)
    try:
        c.recv(65536)
    except Exception: pass
    body = b"z" * 4000000
    c.sendall(b"HTTP/1.1 200 OK" + CRLF + b"Content-Length: " + str(len(body)).encode() + CRLF + b"Connection: close" + CRLF + CRLF + body)
    c.close()
]] }, stdout = "pipe", stderr = "null" }
  local port = tonumber((up:read_line(5000)))
  local a = ("api.allowed.test:%d"):format(port)
  local ok, err = pcall(with_filter, { a }, ('resolve = { ["api.allowed.test"] = "127.0.0.1" },'), function(sp)
    local fd = assert(sock.connect_unix(sp, 2000))
    sock.send_all(fd, "GET http://" .. a .. "/big HTTP/1.1\r\nHost: " .. a .. "\r\n\r\n", 2000)
    process.sleep_ms(800) -- the server has sent everything and closed; the relay holds the rest
    local got, deadline = {}, process.now_ms() + 10000
    local n = 0
    while process.now_ms() < deadline do
      if sock.wait(fd, sock.POLLIN, 200) then
        -- a slow reader: the relay's pending bytes for it outlive the server's end of stream
        local g = sock.recv(fd, 16384)
        if g == "" then break elseif g then got[#got + 1] = g; n = n + #g end
        process.sleep_ms(2)
      end
    end
    sock.close(fd)
    local text = table.concat(got)
    local body = text:match("\r\n\r\n(.*)$") or ""
    T.eq(#body, 4000000, "the client got the whole answer")
  end)
  up:stop(500)
  if not ok then error(err, 0) end
end)

T.test("stop the relays", function()
  for _, c in ipairs({ forward, filter, fake, canary }) do if c then c:stop(500) end end
end)
