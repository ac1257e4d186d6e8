-- The attack suite, classes 6 (exhaustion of the HTTP servers) and 8 (secrets on disk):
-- docs/security.md, docs/live_view.md ("Limits"), docs/mcp.md ("HTTP: limits").
--
-- Real peers throughout: a real `seer notebook serve` (the live view, and its ZMQ request
-- socket) and a real `seer mcp notebook --http`, each its own process so its memory can be
-- measured; connections from this process (host tests) and from inside a bubblewrap sandbox
-- with network = "host" (a default sandbox has no network at all, so nothing inside one can
-- reach these servers), through exec (`seer -e`) and a notebook kernel cell. The attacks' Lua
-- uses raw sockets through LuaJIT's ffi, as agent code can.
local T = require "testing"
local A = require "attack"
local process = require "seer.process"
local json = seer.json

-- The floods hold over a thousand sockets: raise this process's descriptor limit (inherited by
-- the servers, the sandbox and its kernel) where the hard limit allows, as on a default Debian
-- with a soft limit of 1024.
local FD_LIMIT = 0
do
  local ffi = require "ffi"
  pcall(ffi.cdef, "struct seer_atk_rlimit { unsigned long cur, max; };")
  pcall(ffi.cdef, 'int seer_atk_getrlimit(int, struct seer_atk_rlimit *) asm("getrlimit");')
  pcall(ffi.cdef, 'int seer_atk_setrlimit(int, const struct seer_atk_rlimit *) asm("setrlimit");')
  local rl = ffi.new("struct seer_atk_rlimit")
  if ffi.C.seer_atk_getrlimit(7, rl) == 0 and rl.cur < 8192 then -- RLIMIT_NOFILE
    rl.cur = rl.max < 8192 and rl.max or 8192
    ffi.C.seer_atk_setrlimit(7, rl)
  end
  if ffi.C.seer_atk_getrlimit(7, rl) == 0 then FD_LIMIT = tonumber(rl.cur) end
end
local function need_fds(n)
  if FD_LIMIT < n then
    T.skip(("this flood needs %d file descriptors and the hard limit (ulimit -Hn) is %d"):format(n, FD_LIMIT))
  end
end

local SEER = require("seer.jupyter").seer_binary()
local HEAD_MS = 5000 -- SEER_HTTP_GATE_HEAD_MS
local PER_ADDR = 256 -- SEER_HTTP_GATE_MAX_PER_ADDR
local AUTHORIZED_MAX = 128 -- SEER_HTTP_AUTHORIZED_MAX

-- Raw TCP from Lua (ffi, names redirected so they clash with no other declaration). The same
-- text runs here and, prepended to a payload, inside the sandbox.
local NETLIB = [==[
local ffi = require "ffi"
for _, d in ipairs{
  'int seer_atk_socket(int, int, int) asm("socket");',
  'int seer_atk_connect(int, const void *, unsigned) asm("connect");',
  'long seer_atk_send(int, const void *, unsigned long, int) asm("send");',
  'long seer_atk_recv(int, void *, unsigned long, int) asm("recv");',
  'int seer_atk_close(int) asm("close");',
  'struct seer_atk_pfd { int fd; short events; short revents; };',
  'int seer_atk_poll(struct seer_atk_pfd *, unsigned long, int) asm("poll");',
  'struct seer_atk_ts { long s; long ns; };',
  'int seer_atk_clock(int, struct seer_atk_ts *) asm("clock_gettime");',
  'int seer_atk_nanosleep(const struct seer_atk_ts *, void *) asm("nanosleep");',
} do pcall(ffi.cdef, d) end
local C = ffi.C
local N = {}
function N.now()
  local t = ffi.new("struct seer_atk_ts")
  C.seer_atk_clock(1, t)
  return tonumber(t.s) * 1000 + tonumber(t.ns) / 1e6
end
function N.sleep(ms)
  local t = ffi.new("struct seer_atk_ts", math.floor(ms / 1000), (ms % 1000) * 1e6)
  C.seer_atk_nanosleep(t, nil)
end
function N.connect(port)
  local fd = C.seer_atk_socket(2, 1 + 0x80000, 0)
  if fd < 0 then return nil, ffi.errno() end
  local sa = ffi.new("uint8_t[16]")
  sa[0] = 2
  sa[2], sa[3] = bit.rshift(port, 8), bit.band(port, 255)
  sa[4], sa[5], sa[6], sa[7] = 127, 0, 0, 1
  if C.seer_atk_connect(fd, sa, 16) ~= 0 then
    local e = ffi.errno()
    C.seer_atk_close(fd)
    return nil, e
  end
  return fd
end
function N.send(fd, s) return tonumber(C.seer_atk_send(fd, s, #s, 0x4000 + 0x40)) end
function N.close(fd) C.seer_atk_close(fd) end
-- Reads until a whole response (head and Content-Length body), the peer's close, or ms.
-- Returns status (or nil), the text, and whether the peer closed.
function N.response(fd, ms)
  local p = ffi.new("struct seer_atk_pfd[1]")
  p[0].fd, p[0].events = fd, 1
  local buf = ffi.new("char[65536]")
  local got, closed = {}, false
  local deadline = N.now() + ms
  while true do
    local text = table.concat(got)
    local he = text:find("\r\n\r\n", 1, true)
    if he then
      local cl = tonumber(text:sub(1, he):lower():match("content%-length:%s*(%d+)"))
      if cl and #text >= he + 3 + cl then break end
    end
    local left = deadline - N.now()
    if C.seer_atk_poll(p, 1, math.max(0, math.ceil(left))) <= 0 then break end
    local n = tonumber(C.seer_atk_recv(fd, buf, 65536, 0x40))
    if n == 0 then closed = true break end
    if n < 0 then
      local e = ffi.errno()
      if e ~= 11 and e ~= 4 then closed = true break end
    else
      got[#got + 1] = ffi.string(buf, n)
    end
  end
  local text = table.concat(got)
  return tonumber(text:match("^HTTP/1%.%d (%d%d%d)")), text, closed
end
-- One request on a new connection: status, milliseconds, text.
function N.request(port, req, ms)
  local t0 = N.now()
  local fd, e = N.connect(port)
  if not fd then return nil, N.now() - t0, "connect failed: errno " .. tostring(e) end
  N.send(fd, req)
  local st, text = N.response(fd, ms or 5000)
  N.close(fd)
  return st, N.now() - t0, text
end
]==]
local N = assert(loadstring(NETLIB .. "\nreturn N"))()

---------------------------------------------------------------------------------------------
-- the servers under attack

local servers_cache
local function servers()
  if servers_cache then return servers_cache end
  local dir = T.tmpdir()
  local s = { dir = dir, key = require("seer.net").new_key(), mcp_token = require("seer.net").new_key():sub(1, 40) }
  -- the notebook server: live view (HTTP) and its ZMQ request socket
  s.live_child = process.spawn{ argv = { SEER, "notebook", "serve", "--output-dir", dir .. "/nb" },
                                env = { SEER_NOTEBOOK_KEY = s.key }, stdout = "pipe", stderr = dir .. "/nb.log" }
  local line = s.live_child:read_line(30000)
  assert(line, "seer notebook serve printed nothing: " .. (seer.read_file(dir .. "/nb.log") or ""))
  local info = json.decode(line)
  s.endpoint, s.live_pid = info.endpoint, s.live_child.pid
  s.live_port = tonumber(info.url:match(":(%d+)/"))
  s.live_token = info.url:match("token=([%w_%-]+)")
  -- the MCP server over streamable HTTP
  s.mcp_child = process.spawn{ argv = { SEER, "mcp", "notebook", "--http", "127.0.0.1:0", "--token", s.mcp_token,
                                        "--output-dir", dir .. "/mcp" }, stdout = "null", stderr = dir .. "/mcp.log" }
  local deadline = process.now_ms() + 30000
  while process.now_ms() < deadline and not s.mcp_port do
    local log = seer.read_file(dir .. "/mcp.log") or ""
    s.mcp_port = tonumber(log:match("serving MCP %(streamable HTTP%) at http://127%.0%.0%.1:(%d+)/mcp"))
    if not s.mcp_port then process.sleep_ms(50) end
  end
  assert(s.mcp_port, "seer mcp notebook --http did not start: " .. (seer.read_file(dir .. "/mcp.log") or ""))
  s.mcp_pid = s.mcp_child.pid
  servers_cache = s
  return s
end

local function rss_kib(pid)
  local h = io.open("/proc/" .. pid .. "/status")
  local st = h and h:read("*a") or ""
  if h then h:close() end
  return tonumber(st:match("VmRSS:%s*(%d+)")) or 0
end

local function mode_of(path)
  local p = io.popen(("stat -c %%a '%s' 2>/dev/null"):format(path))
  local m = p:read("*l")
  p:close()
  return m
end

local function live_get(s, path, ms)
  return N.request(s.live_port, ("GET %s%stoken=%s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    :format(path, path:find("?", 1, true) and "&" or "?", s.live_token), ms)
end

local function mcp_post(s, body, sid, ms)
  return N.request(s.mcp_port, ("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
    .. "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n%sConnection: close\r\n"
    .. "Content-Length: %d\r\n\r\n%s"):format(s.mcp_token, sid and ("Mcp-Session-Id: " .. sid .. "\r\n") or "", #body, body), ms)
end

-- An MCP call as a client makes it: initialize, then ping in that session. Returns the two
-- statuses and times.
local function mcp_call(s)
  local st1, ms1, text = mcp_post(s, json.encode{ jsonrpc = "2.0", id = 1, method = "initialize", params = {
    protocolVersion = "2025-06-18", capabilities = {}, clientInfo = { name = "attack-test", version = "1" } } }, nil, 3000)
  local sid = text and text:match("[Mm]cp%-[Ss]ession%-[Ii]d:%s*([%w%-]+)")
  local st2, ms2 = mcp_post(s, json.encode{ jsonrpc = "2.0", id = 2, method = "ping" }, sid, 3000)
  return st1, ms1, st2, ms2
end

-- A signed request to the notebook server's ZMQ socket (what a session sends), answered?
local function zmq_answered(s, ms)
  local net = require "seer.net"
  local sock = net.socket("dealer", s.key)
  sock:connect(s.endpoint)
  local t0 = process.now_ms()
  sock:send{ header = net.header("list_sessions_request", net.uuid()), parent_header = {}, metadata = {}, content = {} }
  local reply
  while not reply and process.now_ms() - t0 < ms do
    net.poll({ sock }, 20)
    reply = sock:recv(0)
  end
  sock:close()
  return reply ~= nil, process.now_ms() - t0
end

---------------------------------------------------------------------------------------------
-- host-side measurements

T.test("500 idle connections, slowloris and unfinished bodies: an authenticated live-view request and an MCP call are answered within 1 s; memory stays bounded", function()
  need_fds(2048)
  local s = servers()
  T.eq((live_get(s, "/api/info")), 200, "live view before the flood")
  local st1, _, st2 = mcp_call(s)
  T.eq({ st1, st2 }, { 200, 200 }, "MCP before the flood")
  local rss0 = { live = rss_kib(s.live_pid), mcp = rss_kib(s.mcp_pid) }
  local held, slow = {}, {}
  local t_open = N.now()
  for _, port in ipairs{ s.live_port, s.mcp_port } do
    for _ = 1, 500 do held[#held + 1] = assert(N.connect(port)) end -- idle: not a byte
    for _ = 1, 50 do -- slowloris: a head that never ends
      local fd = assert(N.connect(port))
      N.send(fd, "GET /api/info HTTP/1.1\r\nHost: x\r\n")
      slow[#slow + 1] = { fd = fd, t0 = N.now() }
    end
    for _ = 1, 50 do -- a body announced and never sent, without the token
      local fd = assert(N.connect(port))
      N.send(fd, "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{")
      held[#held + 1] = fd
    end
  end
  -- with the token: bodies that never end hold MHD's threads (authenticated peers are trusted
  -- not to, but even they cannot take all of them in this test)
  for _ = 1, 20 do
    local fd = assert(N.connect(s.mcp_port))
    N.send(fd, ("POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
      .. "Content-Length: 1000000\r\n\r\n{\"a\":"):format(s.mcp_token))
    held[#held + 1] = fd
  end
  local opened_ms = N.now() - t_open
  local live_st, live_ms = live_get(s, "/api/info")
  local m1, m1_ms, m2, m2_ms = mcp_call(s)
  local zok, z_ms = zmq_answered(s, 1000)
  print(("    flood of %d connections opened in %.0f ms; live view %s in %.1f ms, MCP initialize %s in %.1f ms, ping %s in %.1f ms, notebook request answered in %.1f ms")
    :format(#held + #slow, opened_ms, tostring(live_st), live_ms, tostring(m1), m1_ms, tostring(m2), m2_ms, z_ms))
  T.eq(live_st, 200, "the live view answered the token holder")
  T.ok(live_ms < 1000, ("live view took %.0f ms"):format(live_ms))
  T.eq({ m1, m2 }, { 200, 200 }, "the MCP call was answered")
  T.ok(m1_ms < 1000 and m2_ms < 1000, ("MCP took %.0f + %.0f ms"):format(m1_ms, m2_ms))
  T.ok(zok and z_ms < 1000, "the notebook server's request socket answered in time")
  local rss1 = { live = rss_kib(s.live_pid), mcp = rss_kib(s.mcp_pid) }
  print(("    RSS: live view %d -> %d KiB, MCP %d -> %d KiB"):format(rss0.live, rss1.live, rss0.mcp, rss1.mcp))
  T.ok(rss1.live - rss0.live < 32 * 1024, "the live view's memory grew by more than 32 MiB")
  T.ok(rss1.mcp - rss0.mcp < 32 * 1024, "the MCP server's memory grew by more than 32 MiB")
  -- the slow heads keep trickling; the gate ends each within its deadline regardless
  local deadline = t_open + HEAD_MS + 1500
  local alive = #slow
  while alive > 0 and N.now() < deadline do
    alive = 0
    for _, c in ipairs(slow) do
      if not c.closed_at then
        local st, _, closed = N.response(c.fd, 0)
        if closed or st then c.closed_at, c.status = N.now(), st else N.send(c.fd, "X"); alive = alive + 1 end
      end
    end
    N.sleep(200)
  end
  T.eq(alive, 0, "slowloris connections outlived the head deadline")
  for _, c in ipairs(slow) do
    T.ok(c.status == 408 or c.status == 503, "a slow head was ended with " .. tostring(c.status))
    N.close(c.fd)
  end
  for _, fd in ipairs(held) do N.close(fd) end
end)

T.test("a slow head gets 408 at the deadline, however often it sends a byte (no eviction involved)", function()
  local s = servers()
  process.sleep_ms(300)
  local conns = {}
  for i = 1, 10 do
    local fd = assert(N.connect(i % 2 == 0 and s.live_port or s.mcp_port))
    N.send(fd, "GET / HTTP/1.1\r\n")
    conns[i] = { fd = fd, t0 = N.now() }
  end
  local done = 0
  while done < #conns and N.now() - conns[1].t0 < HEAD_MS + 2000 do
    for _, c in ipairs(conns) do
      if not c.life then
        local st, _, closed = N.response(c.fd, 0)
        if st or closed then c.life, c.status = N.now() - c.t0, st; done = done + 1 else N.send(c.fd, "a") end
      end
    end
    N.sleep(100)
  end
  for _, c in ipairs(conns) do
    T.eq(c.status, 408)
    T.ok(c.life and c.life >= HEAD_MS - 200 and c.life < HEAD_MS + 1500, ("lived %s ms"):format(tostring(c.life)))
    N.close(c.fd)
  end
end)

T.test("pending connections are capped per address: past the cap the oldest is closed (503), and a fresh request still gets through", function()
  local s = servers()
  local fds = {}
  for i = 1, PER_ADDR + 40 do fds[i] = assert(N.connect(s.live_port)) end
  local st_fresh, ms_fresh = live_get(s, "/api/info")
  local evicted = 0
  for i = 1, 40 do
    local st = N.response(fds[i], 1000)
    if st == 503 then evicted = evicted + 1 end
  end
  local newest = N.response(fds[#fds], 0)
  for _, fd in ipairs(fds) do N.close(fd) end
  T.ok(evicted >= 39, ("only %d of the 40 oldest were evicted"):format(evicted))
  T.eq(newest, nil, "the newest pending connection was closed instead of the oldest")
  T.eq(st_fresh, 200)
  T.ok(ms_fresh < 1000)
end)

T.test("control: with the token the same held connections do fill the server's pool (so it is the gate that keeps strangers out)", function()
  local s = servers()
  local streams, refused = {}, 0
  for i = 1, AUTHORIZED_MAX + 4 do
    local fd = assert(N.connect(s.live_port))
    N.send(fd, ("GET /api/notebooks/ctl%d/events?token=%s HTTP/1.1\r\nHost: x\r\n\r\n"):format(i, s.live_token))
    streams[#streams + 1] = fd
    N.sleep(2)
  end
  local started = 0
  N.sleep(300)
  for _, fd in ipairs(streams) do
    local _, text, closed = N.response(fd, 30)
    if text:find("retry: 1000", 1, true) then started = started + 1 elseif closed then refused = refused + 1 end
  end
  local st_full = live_get(s, "/api/info", 1000)
  for _, fd in ipairs(streams) do N.close(fd) end
  process.sleep_ms(1500) -- the server notices the closed streams (within a second)
  local st_after, ms_after = live_get(s, "/api/info")
  T.eq(started, AUTHORIZED_MAX, "event streams that started")
  T.ok(refused >= 4, "connections past the limit were not refused")
  T.ne(st_full, 200, "a full pool still answered: the probe does not fill it")
  T.eq(st_after, 200, "the server did not recover once the streams closed")
  T.ok(ms_after < 1000)
end)

T.test("oversized heads get 431 and cost nothing; wrong or missing tokens get 401/403 at the end of the head", function()
  local s = servers()
  local st = N.request(s.live_port, "GET /?token=" .. ("x"):rep(20000) .. " HTTP/1.1\r\n\r\n", 3000)
  T.eq(st, 431)
  st = N.request(s.mcp_port, "POST /mcp HTTP/1.1\r\nX-Big: " .. ("y"):rep(17000) .. "\r\n\r\n", 3000)
  T.eq(st, 431)
  T.eq((N.request(s.live_port, "GET /api/info?token=nope HTTP/1.1\r\n\r\n")), 403)
  local st2, _, text = N.request(s.mcp_port, "POST /mcp HTTP/1.1\r\nAuthorization: Bearer nope\r\nContent-Length: 5\r\n\r\n")
  T.eq(st2, 401)
  T.contains(text, "WWW-Authenticate: Bearer")
  T.contains(text, "unauthorized")
end)

T.test("seer mcp --http refuses a token shorter than 16 characters, naming the fix", function()
  local out = io.popen(("'%s' mcp notebook --http 127.0.0.1:0 --token short 2>&1"):format(SEER)):read("*a")
  T.contains(out, "at least 16 characters")
end)

---------------------------------------------------------------------------------------------
-- RPC connection files (their key) on every exit path

local IFACE = T.tmpdir() .. "/iface.lua"
do
  local f = assert(io.open(IFACE, "w"))
  f:write('---Adds.\n---@param a number\n---@param b number\nexpose("add", function(a, b) return a + b end)\n')
  f:close()
end

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() return true end
  return false
end

local function children_of(pid)
  local out = {}
  for _, e in ipairs(require("seer.core.sandbox").listdir("/proc") or {}) do
    if e.name:match("^%d+$") then
      local h = io.open("/proc/" .. e.name .. "/stat") -- a process may end while we look
      local st = h and h:read("*a")
      if h then h:close() end
      local ppid = st and st:match("^%d+ %b() %S (%d+)")
      if tonumber(ppid) == pid then out[#out + 1] = tonumber(e.name) end
    end
  end
  return out
end

local function started_server()
  local srv = require("seer.rpc").serve_local(IFACE)
  T.eq(srv:call("add", 2, 3), 5)
  local info = json.decode(seer.read_file(srv.connection_file))
  T.ok(type(info.key) == "string" and info.pid, "the connection file holds the key and the server's pid")
  return srv, info.pid
end

local function wait_gone(path, ms)
  local t0 = process.now_ms()
  while exists(path) and process.now_ms() - t0 < ms do process.sleep_ms(20) end
  return not exists(path)
end

T.test("rpc: the connection file is removed when the server ends normally, on SIGTERM, SIGINT, SIGHUP and SIGKILL", function()
  local srv = started_server()
  local conn = srv.connection_file
  srv:close()
  T.ok(not exists(conn), "normal end: the key file stayed")
  -- A signal this process ignores (SIGHUP under nohup) stays ignored in the server it starts, as
  -- nohup means: such a signal does not end the server, so it is not one to test here.
  local ignored = 0
  for line in io.lines("/proc/self/status") do
    local hex = line:match("^SigIgn:%s*(%x+)")
    if hex then ignored = tonumber(hex:sub(-8), 16) end
  end
  for _, sig in ipairs{ 15, 2, 1, 9 } do
    if bit.band(ignored, bit.lshift(1, sig - 1)) ~= 0 and sig ~= 2 then -- the host handles SIGINT itself
      print(("  signal %d is ignored in this process (nohup?), so in the server too: not tested"):format(sig))
      goto next
    end
    local s2, pid = started_server()
    T.eq(#children_of(pid) >= 1, true, "the server has its reaper")
    os.execute(("kill -%d %d"):format(sig, pid))
    T.ok(wait_gone(s2.connection_file, 3000), "signal " .. sig .. ": the key file stayed")
    s2.closed = true
    ::next::
  end
end)

T.test("rpc: the connection file is removed when the server fails (an interface that does not load)", function()
  local dir = T.tmpdir()
  local bad = dir .. "/bad.lua"
  local f = assert(io.open(bad, "w")) f:write("error('this interface does not load')\n") f:close()
  local ok = pcall(function() require("seer.rpc").start(bad, { connection_dir = dir, load_timeout = 20 }) end)
  T.ok(not ok, "a failing interface must raise")
  process.sleep_ms(500)
  T.ok(not exists(dir .. "/bad.json"), "the key file of a server whose interface failed stayed")
  -- the server of that start removed its own file; a server whose serve() raises does too
  local c2 = dir .. "/raise.json"
  require("seer.rpc.wire").write_connection(c2, { key = require("seer.net").new_key(), endpoint = "tcp://256.0.0.1:1" })
  local out = io.popen(("'%s' rpc serve '%s' --connection-file '%s' 2>&1"):format(SEER, IFACE, c2)):read("*a")
  T.contains(out, "cannot bind")
  T.ok(not exists(c2), "the key file of a server that failed to bind stayed")
end)

T.test("rpc: after kill -9 of the server and its reaper, the next start sweeps the stale key file, and only that", function()
  local s2, pid = started_server()
  local conn = s2.connection_file
  for _, c in ipairs(children_of(pid)) do os.execute("kill -9 " .. c) end
  os.execute("kill -9 " .. pid)
  s2.proc.wait(3000) -- reaped: a zombie still counts as running, and the sweep leaves its file
  process.sleep_ms(200)
  s2.closed = true
  T.ok(exists(conn), "precondition: the key file outlived a kill -9 of both")
  -- files the sweep must leave: a live server's, a link to a host file, another name
  local dir = T.tmpdir()
  local plant = process.mkdtemp("/tmp/seer-rpc-")
  local live = plant .. "/live.json"
  require("seer.rpc.wire").write_connection(live, { key = "k", pid = process.getpid() })
  local target = dir .. "/precious.json"
  require("seer.rpc.wire").write_connection(target, { key = "k", pid = 999999999 })
  os.execute(("ln -s '%s' '%s/link.json'"):format(target, plant))
  local s3 = require("seer.rpc").serve_local(IFACE) -- a new start sweeps
  s3:close()
  T.ok(not exists(conn), "the stale key file was not swept")
  T.ok(exists(live), "a live server's key file was removed")
  T.ok(exists(target), "the sweep followed a link")
  os.execute(("rm -rf '%s'"):format(plant))
end)

---------------------------------------------------------------------------------------------
-- attacks from inside a sandbox (network = "host": the only way to reach these servers)

local RIG = { name = "net", config = { network = "host" } }
local VECTORS = { "exec/lua", "kernel/lua" }

local function payload(body)
  return function()
    local s = servers()
    return NETLIB .. ("\nlocal LIVE, MCP = %d, %d\n"):format(s.live_port, s.mcp_port) .. body
  end
end

local function field(out, name)
  return tonumber(out:match(name .. "=(%-?[%d%.]+)"))
end

-- Measures, from the host while an attack runs, whether token holders are still served.
local PROBE = [==[
local s = ...
local function count(port)
  local n = 0
  for _, f in ipairs{ "/proc/net/tcp", "/proc/net/tcp6" } do
    local h = io.open(f)
    if h then
      for l in h:lines() do
        local rport, st = l:match("^%s*%d+: %x+:%x+ %x+:(%x+) (%x%x)")
        if rport and tonumber(rport, 16) == port and (st == "01" or st == "08") then n = n + 1 end
      end
      h:close()
    end
  end
  return n
end
local t0, seen = N.now(), 0
while N.now() - t0 < 90000 do
  seen = count(s.live_port) + count(s.mcp_port)
  if seen >= 600 then break end
  N.sleep(20)
end
local lst, lms = N.request(s.live_port, ("GET /api/info?token=%s HTTP/1.1\r\nHost: x\r\n\r\n"):format(s.live_token), 3000)
local body = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"p","version":"1"}}}'
local mst, mms = N.request(s.mcp_port, ("POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: %d\r\n\r\n%s"):format(s.mcp_token, #body, body), 3000)
io.write(("PROBE seen=%d live=%s live_ms=%.1f mcp=%s mcp_ms=%.1f\n"):format(seen, tostring(lst), lms, tostring(mst), mms))
]==]

local probe_child, probe_out
A.attack{ name = "HTTP flood: 900 idle connections to the live view and the MCP server", class = 6, rig = RIG,
  vectors = VECTORS, timeout = 120,
  setup = function()
    need_fds(2048)
    local s = servers()
    probe_out = T.tmpdir() .. "/probe.txt"
    local code = NETLIB .. ("\nlocal s = { live_port = %d, mcp_port = %d, live_token = %q, mcp_token = %q }\n")
      :format(s.live_port, s.mcp_port, s.live_token, s.mcp_token) .. PROBE:gsub("^local s = %.%.%.\n", "")
    probe_child = process.spawn{ argv = { SEER, "-e", code }, stdout = probe_out, stderr = probe_out }
  end,
  lua = payload [[
    local fds, opened = {}, 0
    for _, p in ipairs{ { LIVE, 500 }, { MCP, 400 } } do
      for _ = 1, p[2] do local fd = N.connect(p[1]) if fd then fds[#fds + 1] = fd opened = opened + 1 end end
    end
    local t0 = N.now()
    -- hold them past the gate's deadline; count what the server ended, and how
    local ended, answered200 = 0, 0
    local open = {}
    for i = 1, #fds do open[i] = true end
    while N.now() - t0 < 7000 and ended < #fds do
      for i, fd in ipairs(fds) do
        if open[i] then
          local st, _, closed = N.response(fd, 0)
          if st == 200 then answered200 = answered200 + 1 end
          if closed or st then open[i] = false ended = ended + 1 end
        end
      end
      N.sleep(100)
    end
    for _, fd in ipairs(fds) do N.close(fd) end
    print(("FLOOD opened=%d ended=%d ok200=%d"):format(opened, ended, answered200))
  ]],
  check = function(out)
    T.ok(probe_child:wait(60000), "the host prober did not finish")
    local p = seer.read_file(probe_out) or ""
    print("    " .. (p:match("PROBE[^\n]*") or p) .. " | " .. (out:match("FLOOD[^\n]*") or ""))
    T.eq(field(out, "opened"), 900, "the flood could not open its connections: " .. out)
    T.eq(field(out, "ended"), 900, "the server kept some unauthenticated connections past its deadline: " .. out)
    T.eq(field(out, "ok200"), 0)
    T.ok(field(p, "seen") and field(p, "seen") >= 600, "the prober never saw the flood: " .. p)
    T.eq(p:match("live=(%d+)"), "200", p)
    T.eq(p:match("mcp=(%d+)"), "200", p)
    T.ok(field(p, "live_ms") < 1000 and field(p, "mcp_ms") < 1000, "token holders waited over 1 s: " .. p)
  end }

A.attack{ name = "slowloris: request heads sent a byte at a time", class = 6, rig = RIG, vectors = VECTORS, timeout = 60,
  lua = payload [[
    local cs = {}
    for i = 1, 60 do
      local fd = N.connect(i % 2 == 0 and LIVE or MCP)
      if fd then N.send(fd, "G") cs[#cs + 1] = { fd = fd, t0 = N.now() } end
    end
    local req = "ET /api/info HTTP/1.1\r\nHost: x\r\nX-Pad: " .. ("p"):rep(10000)
    local maxlife, ended, s408, pos = 0, 0, 0, 1
    while ended < #cs and N.now() - cs[1].t0 < 9000 do
      for _, c in ipairs(cs) do
        if not c.done then
          local st, _, closed = N.response(c.fd, 0)
          if st or closed then
            c.done = true ended = ended + 1
            if st == 408 then s408 = s408 + 1 end
            maxlife = math.max(maxlife, N.now() - c.t0)
          else N.send(c.fd, req:sub(pos, pos)) end
        end
      end
      pos = pos + 1
      N.sleep(150)
    end
    for _, c in ipairs(cs) do N.close(c.fd) end
    print(("SLOW n=%d ended=%d s408=%d maxlife=%.0f"):format(#cs, ended, s408, maxlife))
  ]],
  check = function(out)
    T.eq(field(out, "n"), 60, out)
    T.eq(field(out, "ended"), 60, "a slow head outlived the deadline: " .. out)
    T.eq(field(out, "s408"), 60, out)
    T.ok(field(out, "maxlife") < HEAD_MS + 1500, out)
  end }

A.attack{ name = "a body announced and never sent, without a token", class = 6, rig = RIG, vectors = VECTORS, timeout = 60,
  lua = payload [[
    local fast, refused, fds = 0, 0, {}
    local t0 = N.now()
    for i = 1, 60 do
      fds[i] = N.connect(i % 2 == 0 and LIVE or MCP)
      N.send(fds[i], "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000000000\r\n\r\n{\"jsonrpc\":")
    end
    for i = 1, 60 do
      local st = N.response(fds[i], 4000)
      -- within 1.5 s: at once, or after the guessing tarpit's 1 s when earlier attempts used the budget
      if N.now() - t0 < 1500 then fast = fast + 1 end
      if st == 401 or st == 403 then refused = refused + 1 end
      N.close(fds[i])
    end
    print(("BODY refused=%d fast=%d"):format(refused, fast))
  ]],
  check = function(out)
    T.eq(field(out, "refused"), 60, "a request without the token was not refused at its head: " .. out)
    T.eq(field(out, "fast"), 60, "a refusal waited for the body: " .. out)
  end }

A.attack{ name = "oversized request heads (one 20 KB header; 1 MB of header bytes)", class = 6, rig = RIG, vectors = VECTORS, timeout = 60,
  lua = payload [[
    local st1 = N.request(LIVE, "GET /api/info HTTP/1.1\r\nX-A: " .. ("a"):rep(20000) .. "\r\n\r\n", 3000)
    local fd = N.connect(MCP)
    local sent, chunk = 0, "X-B: " .. ("b"):rep(4000) .. "\r\n"
    for _ = 1, 256 do local n = N.send(fd, chunk) if n and n > 0 then sent = sent + n else break end end
    local st2 = N.response(fd, 3000)
    N.close(fd)
    print(("BIG st1=%s st2=%s sent=%d"):format(tostring(st1), tostring(st2), sent))
  ]],
  check = function(out)
    T.eq(out:match("st1=(%w+)"), "431", out)
    T.eq(out:match("st2=(%w+)"), "431", out)
    local s = servers()
    T.eq((live_get(s, "/api/info")), 200)
  end }

A.attack{ name = "an oversized body without a token (64 MB to the MCP server)", class = 6, rig = RIG, vectors = VECTORS, timeout = 60,
  lua = payload [[
    local fd = N.connect(MCP)
    local total = 64 * 1024 * 1024
    N.send(fd, ("POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"):format(total))
    local chunk = ("z"):rep(65536)
    local sent, st = 0, nil
    local t0 = N.now()
    while sent < total and N.now() - t0 < 5000 do
      local n = N.send(fd, chunk)
      if n and n > 0 then sent = sent + n elseif n and n < 0 then N.sleep(5) end
      local closed
      st, _, closed = N.response(fd, 0)
      if st or closed then break end
    end
    st = st or N.response(fd, 2000)
    N.close(fd)
    print(("HUGE st=%s sent=%d"):format(tostring(st), sent))
  ]],
  check = function(out)
    T.eq(out:match("st=(%w+)"), "401", out)
    T.ok(field(out, "sent") < 16 * 1024 * 1024, "the server kept reading a stranger's body: " .. out)
  end }

A.attack{ name = "token guessing: 150 wrong tokens at once", class = 6, rig = RIG, vectors = VECTORS, timeout = 60,
  lua = payload [[
    local fds = {}
    for i = 1, 150 do
      local fd = N.connect(LIVE)
      N.send(fd, ("GET /api/info?token=guess%040d HTTP/1.1\r\nHost: x\r\n\r\n"):format(i))
      fds[i] = fd
    end
    local t0 = N.now()
    local quick, late, ok200, wrong = 0, 0, 0, 0
    for _, fd in ipairs(fds) do
      local st = N.response(fd, 4000)
      local ms = N.now() - t0
      if st == 200 then ok200 = ok200 + 1 elseif st == 403 then
        if ms < 700 then quick = quick + 1 else late = late + 1 end
      else wrong = wrong + 1 end
      N.close(fd)
    end
    print(("GUESS quick=%d late=%d ok200=%d other=%d"):format(quick, late, ok200, wrong))
  ]],
  check = function(out)
    T.eq(field(out, "ok200"), 0, out)
    T.ok(field(out, "quick") <= 100, "more than the failure budget was answered at once: " .. out)
    T.ok(field(out, "late") >= 50, "guesses past the budget were not slowed down: " .. out)
    local s = servers()
    local st, ms = live_get(s, "/api/info")
    T.eq(st, 200, "the right token was refused after the guessing")
    T.ok(ms < 1000)
  end }

local SMUGGLED = "lab-secret-" .. require("seer.net").new_key():sub(1, 24)
A.attack{ name = "a secret smuggled through a tool result (split across writes, JSON-escaped, percent-encoded)", class = 8,
  rig = RIG, vectors = VECTORS, timeout = 60,
  lua = ([[
    local s = %q
    io.write(s:sub(1, 9)) io.flush() io.write(s:sub(10), "\n")
    io.write(require("seer.json").encode({ v = s }), "\n")
    io.write((s:gsub("[^%%w]", function(c) return ("%%%%%%02X"):format(c:byte()) end)), "\n")
  ]]):format(SMUGGLED),
  check = function(out)
    T.contains(out, SMUGGLED, "the payload did not print the secret")
    -- the sandbox's output becomes a tool result of an agent on the host
    local h = require "seer.harness"
    local function run(secrets)
      local dir = T.tmpdir()
      local tool = { name = "run", description = "Runs code in the sandbox.", input_schema = { type = "object" },
                     fn = function() return out end }
      local turn = function(content, stop) return { type = "assistant", message = { role = "assistant", content = content },
        stop_reason = stop, usage = { input_tokens = 1, output_tokens = 1 } } end
      local a = h.run_agent{ provider = "replay", output_dir = dir, tools = { tool }, secrets = secrets,
        replay = { turn({ { type = "tool_use", id = "r1", name = "run", input = {} } }, "tool_use"),
                   turn({ { type = "text", text = "done" } }, "end_turn") } }
      a:run()
      return seer.read_file(a.result.transcript)
    end
    require("ffi").C.setenv("ATTACK_SMUGGLED", SMUGGLED, 1)
    local text = run({ "ATTACK_SMUGGLED" })
    T.ok(not text:find(SMUGGLED, 1, true), "the secret reached the transcript")
    T.ok(not text:find(SMUGGLED:gsub("%-", "%%2D"), 1, true), "the percent-encoded secret reached the transcript")
    T.contains(text, "[REDACTED]")
    -- control: undeclared, the same output does land in the transcript
    T.contains(run({}), SMUGGLED:sub(12))
  end }

A.attack{ name = "a stale RPC key file left by a killed server, and a planted link for the sweep", class = 8, rig = RIG,
  vectors = { "exec/sh", "kernel/sh" }, timeout = 90,
  sh = [[
    set -u
    S=/opt/seer/bin/seer
    D=$(mktemp -d /tmp/seer-rpc-XXXXXX)
    printf '---Adds.\n---@param a number\nexpose("one", function(a) return a end)\n' > $D/i.lua
    $S -e "require('seer.rpc.wire').write_connection('$D/c.json', { key = require('seer.net').new_key(), endpoint = 'ipc://$D/c.sock' })"
    $S rpc serve $D/i.lua --connection-file $D/c.json --log $D/log >/dev/null 2>&1 &
    P=$!
    i=0; while [ $i -lt 100 ] && ! grep -q '"pid"' $D/c.json 2>/dev/null; do sleep 0.1; i=$((i+1)); done
    for c in $(cat /proc/[0-9]*/stat 2>/dev/null | awk -v p=$P '$4 == p {print $1}'); do kill -9 $c; done
    kill -9 $P; sleep 0.3
    [ -f $D/c.json ] && echo "LEFT=yes" || echo "LEFT=no"
    E=$(mktemp -d /tmp/seer-rpc-XXXXXX)
    echo '{"key": "x", "pid": 999999}' > /tmp/precious.json
    ln -s /tmp/precious.json $E/evil.json
    $S -e "print('SWEPT=' .. #require('seer.cli.rpc').sweep_stale('/tmp'))"
    [ -f $D/c.json ] && echo "AFTER=yes" || echo "AFTER=no"
    [ -f /tmp/precious.json ] && echo "PRECIOUS=yes" || echo "PRECIOUS=no"
    rm -rf $D $E /tmp/precious.json
  ]],
  check = function(out)
    T.contains(out, "LEFT=yes", "precondition: a kill -9 of server and reaper leaves the file: " .. out)
    T.contains(out, "SWEPT=1", out)
    T.contains(out, "AFTER=no", out)
    T.contains(out, "PRECIOUS=yes", "the sweep followed a planted link: " .. out)
  end }

-- ZMTP 3.0 by hand: a NULL-mechanism greeting and READY, then one frame announcing `mb` MiB,
-- sent in full. ZMQ buffers a frame whole before the server can check any signature.
local ZMTP = [==[
function N.zmq_frame(fd, mb)
  N.send(fd, "\255" .. ("\0"):rep(8) .. "\127\3\0NULL" .. ("\0"):rep(16) .. "\0" .. ("\0"):rep(31))
  local ready = "\5READY\11Socket-Type\0\0\0\6DEALER"
  N.send(fd, "\4" .. string.char(#ready) .. ready)
  local size = mb * 1024 * 1024
  N.send(fd, "\2" .. string.char(0, 0, 0, 0, bit.band(bit.rshift(size, 24), 255), bit.band(bit.rshift(size, 16), 255),
                                 bit.band(bit.rshift(size, 8), 255), bit.band(size, 255)))
  local chunk, sent, t0 = ("A"):rep(1024 * 1024), 0, N.now()
  while sent < size - #chunk and N.now() - t0 < 20000 do
    local n = N.send(fd, chunk)
    if n and n > 0 then sent = sent + n else N.sleep(2) end
  end
  return sent
end
]==]
assert(loadstring(ZMTP))
local NZ = assert(loadstring(NETLIB .. ZMTP .. "\nreturn N"))()

T.test("the notebook server's request socket is a unix socket in a 0700 folder; control: over TCP an unauthenticated peer makes it hold a 60 MiB frame", function()
  local s = servers()
  local path = s.endpoint:match("^ipc://(.*)$")
  T.ok(path, "the request socket of a loopback server is not a unix socket: " .. s.endpoint)
  T.eq(mode_of(path:match("^(.*)/[^/]*$")), "700")
  -- control: the same server on a TCP port (any host but 127.0.0.1/localhost/::1 keeps TCP)
  local dir = T.tmpdir()
  local child = process.spawn{ argv = { SEER, "notebook", "serve", "--host", "127.0.0.2", "--output-dir", dir },
                               stdout = "pipe", stderr = dir .. "/log" }
  local line = child:read_line(30000)
  local ok, info = pcall(json.decode, line or "")
  if not ok or not info.endpoint then child:stop(500) T.skip("127.0.0.2 is not usable here: " .. tostring(line)) end
  T.ok(info.endpoint:match("^tcp://127%.0%.0%.2:%d+$"), info.endpoint)
  local port = tonumber(info.endpoint:match(":(%d+)$"))
  local before = rss_kib(child.pid)
  local fd = NZ.connect(port) -- NETLIB connects to 127.0.0.1; the server listens on 127.0.0.2
  T.eq(fd, nil, "precondition: 127.0.0.1 does not reach a server bound to 127.0.0.2")
  local ffi = require "ffi"
  local sfd = ffi.C.seer_atk_socket(2, 1, 0)
  local sa = ffi.new("uint8_t[16]")
  sa[0], sa[2], sa[3] = 2, bit.rshift(port, 8), bit.band(port, 255)
  sa[4], sa[5], sa[6], sa[7] = 127, 0, 0, 2
  T.eq(ffi.C.seer_atk_connect(sfd, sa, 16), 0)
  -- (under the 64 MiB a request may be: a bigger frame is refused at its header, on TCP too)
  local sent = NZ.zmq_frame(sfd, 60)
  process.sleep_ms(300)
  local grown = rss_kib(child.pid) - before
  ffi.C.seer_atk_close(sfd)
  child:stop(500)
  print(("    over TCP, a 60 MiB unsigned frame (%d MiB sent) grew the server by %d MiB"):format(math.floor(sent / 2^20), math.floor(grown / 1024)))
  T.ok(grown > 40 * 1024, "control: the probe did not make a TCP-bound server hold the frame")
end)

A.attack{ name = "the notebook server's request socket from inside: a huge unsigned ZMQ frame", class = 6,
  rig = RIG, vectors = VECTORS, timeout = 60,
  lua = function()
    local s = servers()
    local path = s.endpoint:match("^ipc://(.*)$") or "(tcp)"
    return NETLIB .. ZMTP .. ("\nlocal P = %q\n"):format(path) .. [[
      for _, d in ipairs{ 'int seer_atk_uconnect(int, const void *, unsigned) asm("connect");' } do pcall(ffi.cdef, d) end
      local fd = C.seer_atk_socket(1, 1, 0)
      local sa = ffi.new("uint8_t[110]")
      sa[0] = 1
      ffi.copy(sa + 2, P)
      local rc = C.seer_atk_uconnect(fd, sa, 110)
      local reached = rc == 0
      local sent = reached and N.zmq_frame(fd, 100) or 0
      print(("ZMQ reached=%s errno=%d sent=%d"):format(tostring(reached), reached and 0 or ffi.errno(), sent))
    ]]
  end,
  setup = function() servers().rss_before = rss_kib(servers().live_pid) end,
  check = function(out)
    T.contains(out, "reached=false", "the sandbox reached the host's request socket: " .. out)
    T.ok(rss_kib(servers().live_pid) - servers().rss_before < 32 * 1024, "the notebook server's memory grew")
    local ok, ms = zmq_answered(servers(), 1000)
    T.ok(ok and ms < 1000, "the notebook server did not answer its own user")
  end }

-- A sandbox's scope (its own request socket and key on the notebook server, handed to its MCP
-- server): on a loopback server a unix socket in the 0700 runtime folder, as the main socket.
-- Over TCP any local process (another user, a network = "host" sandbox) could connect without
-- a key and make the server hold whole frames.
local function rig_scope_endpoint()
  local r = A.rig(RIG.name, RIG.config)
  return r.session.mcp_config.notebook.env.SEER_NOTEBOOK_ENDPOINT, r.session.mcp_config.notebook.env.SEER_NOTEBOOK_SCOPE_KEY
end

-- The notebook server of this process (seer.execution's: `seer notebook serve` with no options).
local function own_notebook_server_pid()
  require("seer.execution").server_url() -- started if it was not
  local p = io.popen(("ps -o pid=,args= --ppid %d"):format(process.getpid()))
  local pid
  for l in p:lines() do
    local a, args = l:match("^%s*(%d+)%s+(.*)$")
    if args and args:match("notebook serve$") then pid = tonumber(a) end
  end
  p:close()
  return pid
end

-- TCP ports a process listens on (its sockets in /proc/PID/fd, matched in /proc/PID/net/tcp*).
local function listening_tcp_ports(pid)
  local inodes, ports = {}, {}
  local p = io.popen("ls -l /proc/" .. pid .. "/fd 2>/dev/null")
  for l in p:lines() do
    local ino = l:match("socket:%[(%d+)%]")
    if ino then inodes[ino] = true end
  end
  p:close()
  for _, f in ipairs{ "/proc/" .. pid .. "/net/tcp", "/proc/" .. pid .. "/net/tcp6" } do
    local h = io.open(f)
    for l in (h and h:lines() or function() end) do
      local port, st, ino = l:match("^%s*%d+: %x+:(%x+) %x+:%x+ (%x%x) %x+:%x+ %x+:%x+ %x+%s+%d+%s+%d+%s+(%d+)")
      if port and st == "0A" and inodes[ino] then ports[#ports + 1] = tonumber(port, 16) end
    end
    if h then h:close() end
  end
  table.sort(ports)
  return ports
end

-- An unsigned ZMTP frame announcing `mb` MiB to a unix socket, sent until the peer hangs up (or
-- 10 s). Returns the bytes that went.
local UFRAME = [==[
for _, d in ipairs{ 'int seer_atk_uconnect(int, const void *, unsigned) asm("connect");' } do pcall(ffi.cdef, d) end
function N.unix_frame(path, mb)
  local fd = C.seer_atk_socket(1, 1 + 0x80000, 0)
  local sa = ffi.new("uint8_t[110]")
  sa[0] = 1
  ffi.copy(sa + 2, path)
  if C.seer_atk_uconnect(fd, sa, 110) ~= 0 then local e = ffi.errno() C.seer_atk_close(fd) return nil, e end
  N.send(fd, "\255" .. ("\0"):rep(8) .. "\127\3\0NULL" .. ("\0"):rep(16) .. "\0" .. ("\0"):rep(31))
  local ready = "\5READY\11Socket-Type\0\0\0\6DEALER"
  N.send(fd, "\4" .. string.char(#ready) .. ready)
  local size = mb * 1024 * 1024
  N.send(fd, "\2" .. string.char(0, 0, 0, 0, bit.band(bit.rshift(size, 24), 255), bit.band(bit.rshift(size, 16), 255),
                                 bit.band(bit.rshift(size, 8), 255), bit.band(size, 255)))
  local chunk, sent, t0 = ("A"):rep(1024 * 1024), 0, N.now()
  while sent < size and N.now() - t0 < 10000 do
    local n = N.send(fd, chunk)
    if n and n > 0 then sent = sent + n
    elseif ffi.errno() == 11 or ffi.errno() == 4 then N.sleep(2)
    else break end
  end
  return sent, fd
end
]==]
local NU = assert(loadstring(NETLIB .. UFRAME .. "\nreturn N"))()

T.test("a sandbox's scope request socket is a unix socket in the server's 0700 folder; the server listens on no TCP port but its live view; frames over 64 MiB are refused", function()
  local ep, key = rig_scope_endpoint()
  local path = ep:match("^ipc://(.*)$")
  T.ok(path, "the scope's request socket of a loopback server is not a unix socket: " .. ep)
  local dir = path:match("^(.*)/[^/]*$")
  T.eq(mode_of(dir), "700")
  T.ok(path:match("/scope%-%d+%.sock$"), "named by a counter, not by the sandbox: " .. path)
  local pid = own_notebook_server_pid()
  T.ok(pid, "the notebook server of this process")
  local live = tonumber(require("seer.execution").server_url():match(":(%d+)/"))
  T.eq(listening_tcp_ports(pid), { live }, "the notebook server listens on TCP for its live view only")
  -- A peer that can reach the folder (this user) still cannot make the server hold a frame over
  -- the largest request: ZMQ hangs up at the frame's header.
  local before = rss_kib(pid)
  local fds = {}
  for _, target in ipairs{ path, dir .. "/api.sock", path } do
    local sent, fd = NU.unix_frame(target, 100)
    T.ok(sent, "connect to " .. target .. " failed: errno " .. tostring(fd))
    T.ok(sent < 64 * 1024 * 1024, ("%s took %d MiB of a 100 MiB frame"):format(target, math.floor(sent / 2^20)))
    fds[#fds + 1] = fd
  end
  process.sleep_ms(300)
  local grown = rss_kib(pid) - before
  for _, fd in ipairs(fds) do NU.close(fd) end
  print(("    three 100 MiB frames at the scope's and the main socket: the server grew by %d MiB"):format(math.floor(grown / 1024)))
  T.ok(grown < 32 * 1024, "the notebook server's memory grew")
  -- the scope still answers its key
  local net = require "seer.net"
  local sock = net.socket("dealer", key)
  sock:connect(ep)
  sock:send{ header = net.header("scope_info_request", net.uuid()), parent_header = {}, metadata = {}, content = {} }
  local reply = sock:recv(5000)
  sock:close()
  T.ok(reply and reply.content.status == "ok", "the scope answers its client")
end)

A.attack{ name = "a sandbox's scope request socket from inside (network = host): a huge unsigned ZMQ frame", class = 6,
  rig = RIG, vectors = VECTORS, timeout = 60,
  lua = function()
    local ep = rig_scope_endpoint()
    return NETLIB .. ZMTP .. UFRAME .. ("\nlocal EP = %q\n"):format(ep) .. [[
      local reached, sent = false, 0
      local port = tonumber(EP:match("^tcp://127%.0%.0%.1:(%d+)$"))
      if port then
        local fd = N.connect(port)
        if fd then reached, sent = true, N.zmq_frame(fd, 100) end
      else
        local n = N.unix_frame(EP:match("^ipc://(.*)$") or "/nonexistent", 100)
        if n then reached, sent = true, n end
      end
      print(("SCOPE reached=%s sent=%d"):format(tostring(reached), sent))
    ]]
  end,
  setup = function() servers().scope_rss = rss_kib(own_notebook_server_pid()) end,
  check = function(out)
    T.contains(out, "SCOPE reached=false", "the sandbox reached its scope's request socket without the key: " .. out)
    local grown = rss_kib(own_notebook_server_pid()) - servers().scope_rss
    T.ok(grown < 32 * 1024, ("the notebook server's memory grew by %d MiB"):format(math.floor(grown / 1024)))
  end }

-- Host secrets a sandbox must never see: an LLM key in the researcher's environment, the MCP
-- token, and the live view's token of the notebook server that runs the rig's session.
local HOST_LLM_KEY = "sk-ant-host-" .. require("seer.net").new_key():sub(1, 24)
local HOST_MCP_TOKEN = "mcp-host-" .. require("seer.net").new_key():sub(1, 24)
-- (set for this file only: the last test puts back what was there, so the files that run after
-- this one in the same process see the environment they started with)
local saved_env = { ANTHROPIC_API_KEY = os.getenv("ANTHROPIC_API_KEY") or false, SEER_MCP_TOKEN = os.getenv("SEER_MCP_TOKEN") or false }
require("ffi").C.setenv("ANTHROPIC_API_KEY", HOST_LLM_KEY, 1)
require("ffi").C.setenv("SEER_MCP_TOKEN", HOST_MCP_TOKEN, 1)
A.attack{ name = "read host keys and tokens from inside: environment, every process's environ and cmdline, /tmp", class = 8,
  rig = RIG, timeout = 60,
  sh = [[
    env
    for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null | tr '\0' '\n'; done
    grep -rsh -e sk-ant -e mcp-host -e token= /tmp /run 2>/dev/null | head -50
  ]],
  check = function(out)
    T.ok(#out > 100, "the probe read nothing: " .. out)
    T.ok(out:find("PATH=", 1, true), "control: the probe does see its own environment")
    T.ok(not out:find(HOST_LLM_KEY, 1, true), "the host's LLM key is readable inside")
    T.ok(not out:find(HOST_MCP_TOKEN, 1, true), "the host's MCP token is readable inside")
    local url = require("seer.execution").server_url()
    local token = url and url:match("token=([%w_%-]+)")
    T.ok(token, "the rig's notebook server has a live view")
    T.ok(not out:find(token, 1, true), "the live view's token is readable inside the sandbox")
  end }

T.test("key files: 0600 in folders only their owner can enter (RPC connection file, sandboxd.key); sandboxd.json gone once read", function()
  local srv = require("seer.rpc").serve_local(IFACE)
  T.eq(mode_of(srv.connection_file), "600")
  T.eq(mode_of(srv.connection_dir), "700")
  srv:close()
  local r = A.rig(RIG.name, RIG.config)
  local sd = r.sandbox.state_dir
  T.eq(mode_of(sd .. "/sandboxd.key"), "600")
  -- sandboxd removes its connection file once read (the key stays in its memory only)
  T.eq(mode_of(sd .. "/run/sandboxd.json"), nil, "sandboxd.json (the key) is still readable inside")
  T.eq(mode_of(require("seer.sandbox").state_root()), "700")
end)

T.test("at least 8 attack attempts in this file; the servers end cleanly", function()
  T.ok(A.count() >= 8, "attempts: " .. A.count())
  A.close()
  pcall(require("ffi").cdef, "int unsetenv(const char *name);")
  for k, v in pairs(saved_env) do
    if v then require("ffi").C.setenv(k, v, 1) else require("ffi").C.unsetenv(k) end
  end
  if servers_cache then
    servers_cache.mcp_child:kill(2)
    servers_cache.live_child:kill(15)
    T.ok(servers_cache.mcp_child:wait(10000), "the MCP server did not end on SIGINT")
    T.ok(servers_cache.live_child:wait(10000), "the notebook server did not end on SIGTERM")
    -- under `make asan` the servers are sanitized builds: nothing the attacks did may show there
    for _, log in ipairs{ "/mcp.log", "/nb.log" } do
      local text = seer.read_file(servers_cache.dir .. log) or ""
      for _, bad in ipairs{ "AddressSanitizer", "LeakSanitizer", "runtime error:" } do
        T.ok(not text:find(bad, 1, true), log .. " reports " .. bad .. ":\n" .. text:sub(-3000))
      end
    end
  end
end)
