-- Attack suite, class 6 (docs/security.md): a scoped library of another sandbox, installed into
-- this one, is reached through a relay: a host process listening at a socket in this sandbox's
-- run folder (seer.rpc.relay). Agent code here floods that socket while the scoped sandbox's
-- server does not read (stopped here with SIGSTOP: a long call, or a hostile server): 300
-- connections held at once, then eight ZMQ sockets sending 16 MiB messages as fast as the relay
-- takes them. The relay must stay small (it queues nothing: at most 512 KiB per connection, 256
-- connections), close what passes its cap, and carry calls again once the server reads.
-- Control: the ZMQ relay it replaced (two sockets, 16 whole messages queued per connection) grew
-- by 1884 MiB under this payload through exec/lua (this file with relay.lua of 95f8c76, the
-- engine of this change), and failed the check below.
local T = require "testing"
local A = require "attack"
local env = require "seer.environment"
local json = require "seer.json"
local process = require "seer.process"
local safe_fs = require "seer.safe_fs"
local ffi = require "ffi"
pcall(ffi.cdef, "int kill(int pid, int sig);")

local SIGSTOP, SIGCONT = 19, 18
local fixtures = seer.script_dir() .. "/../fixtures/rpc/"

-- a file's bytes, or nil when it cannot be read (a process that has just ended)
local function slurp(path)
  local ok, s = pcall(seer.read_file, path)
  return ok and s or nil
end

-- Host processes whose command line holds every one of `parts` (NUL-separated arguments).
local function pids_with(parts)
  local found = {}
  for _, e in ipairs(require("seer.core.sandbox").listdir("/proc")) do
    local cmd = e.name:match("^%d+$") and slurp("/proc/" .. e.name .. "/cmdline")
    local all = cmd ~= nil
    for _, p in ipairs(parts) do all = all and cmd:find(p, 1, true) ~= nil end
    if all then found[#found + 1] = tonumber(e.name) end
  end
  return found
end

local function rss_kib(pid) return tonumber((slurp("/proc/" .. pid .. "/status") or ""):match("VmRSS:%s*(%d+)")) end
local function nfds(pid)
  local n = 0
  for _ in pairs(require("seer.core.sandbox").listdir("/proc/" .. pid .. "/fd") or {}) do n = n + 1 end
  return n
end
local function alive(pid)
  local st = slurp("/proc/" .. pid .. "/stat")
  return st ~= nil and not st:match("^%d+ %b() [ZX]")
end

-- The scoped sandbox, its server, and the relay into the rig's sandbox (made once).
local S
local function relay_state(r)
  if S then return S end
  S = {}
  S.scoped = env.ScopedSandbox(env.SandboxConfig{ execution_mode = "cli", models = { env.ModelConfig{ name = A.stories } } })
    :start{ name = "relay-scoped" }
  local _, srv = S.scoped:serve(fixtures .. "interface.lua", { expose_as = "library", name = "relayed" })
  S.srv = srv
  local conn_path = require("seer.rpc.relay").bridge(srv, r.sandbox)
  -- read now, before agent code runs: the sandbox can rewrite its run folder
  S.conn = json.decode(assert(slurp(conn_path)))
  S.sock = assert(S.conn.endpoint:match("^ipc://(.+)$"))
  local sock_name = S.sock:match("([^/]+)$")
  local relays = {}
  for _, pid in ipairs(pids_with{ "seer.rpc.relay" }) do
    if (slurp("/proc/" .. pid .. "/environ") or ""):find(sock_name, 1, true) then relays[#relays + 1] = pid end
  end
  T.eq(#relays, 1, "the relay's process on the host")
  S.relay_pid = relays[1]
  local servers = pids_with{ "rpc\0serve\0", srv.connection_file }
  T.ok(#servers >= 1, "the scoped server's process on the host")
  S.server_pids = servers
  return S
end

local function signal_server(sig)
  for _, pid in ipairs(S and S.server_pids or {}) do ffi.C.kill(pid, sig) end
end

local PAYLOAD = [==[
local ffi = require "ffi"
for _, d in ipairs{ 'int seer_rl_socket(int, int, int) asm("socket");',
                    'int seer_rl_connect(int, const void *, unsigned) asm("connect");',
                    'long seer_rl_recv(int, void *, unsigned long, int) asm("recv");',
                    'int seer_rl_close(int) asm("close");' } do pcall(ffi.cdef, d) end
local C = ffi.C
local sa = ffi.new("uint8_t[110]")
sa[0] = 1
ffi.copy(sa + 2, P)
-- 1. 300 connections at once, held
local fds, refused = {}, 0
for _ = 1, 300 do
  local fd = C.seer_rl_socket(1, 1 + 0x80000, 0)
  if fd >= 0 and C.seer_rl_connect(fd, sa, 110) == 0 then fds[#fds + 1] = fd
  else refused = refused + 1; if fd >= 0 then C.seer_rl_close(fd) end end
end
local t0 = seer.now()
while seer.now() - t0 < 1.5 do end
local closed, buf = 0, ffi.new("char[1]")
for _, fd in ipairs(fds) do
  if C.seer_rl_recv(fd, buf, 1, 0x40) == 0 then closed = closed + 1 end -- MSG_DONTWAIT: 0 is the end
end
for _, fd in ipairs(fds) do C.seer_rl_close(fd) end
-- 2. eight ZMQ sockets sending whole 16 MiB messages for 6 s
local net = require "seer.net"
local body = string.rep("x", 16 * 1024 * 1024)
local socks = {}
for i = 1, 8 do
  socks[i] = net.raw_socket("dealer", {})
  socks[i]:setopt("sndhwm", 2)
  socks[i]:connect("ipc://" .. P)
end
local sent, t1 = 0, seer.now()
while seer.now() - t1 < 6 do
  local any = false
  for _, s in ipairs(socks) do
    if s:send_raw({ body }, true) then sent, any = sent + 1, true end
  end
  if not any then require("seer.process").sleep_ms(5) end
end
for _, s in ipairs(socks) do s:close() end
print(("RELAYFLOOD connected=%d refused=%d closed_by_relay=%d zmq_messages=%d"):format(#fds, refused, closed, sent))
]==]

A.attack{ name = "a flood at the RPC relay's socket (300 connections, then 16 MiB messages) while the far server does not read",
  class = 6, vectors = { "exec/lua", "kernel/lua" }, timeout = 120,
  lua = function(_, r)
    return ("local P = %q\n"):format(relay_state(r).sock) .. PAYLOAD
  end,
  setup = function(_, r)
    local s = relay_state(r)
    s.rss0, s.fds0 = rss_kib(s.relay_pid), nfds(s.relay_pid)
    signal_server(SIGSTOP)
  end,
  teardown = function() signal_server(SIGCONT) end,
  check = function(out, vector, res)
    local s = S
    local connected, closed, msgs = out:match("RELAYFLOOD connected=(%d+) refused=%d+ closed_by_relay=(%d+) zmq_messages=(%d+)")
    T.ok(connected, "the payload did not run: " .. out:sub(1, 2000))
    connected, closed, msgs = tonumber(connected), tonumber(closed), tonumber(msgs)
    T.ok(msgs >= 8, "the flood sent no message through the relay's socket: " .. out)
    T.ok(alive(s.relay_pid), "the relay died under the flood")
    local grown = (rss_kib(s.relay_pid) or 0) - s.rss0
    print(("    %s: %d connections held (%d closed by the relay), %d messages of 16 MiB queued; the relay grew by %d MiB"):format(
      vector, connected, closed, msgs, math.floor(grown / 1024)))
    T.ok(grown < 160 * 1024, ("the relay grew by %d MiB (at most 128 MiB of buffers)"):format(math.floor(grown / 1024)))
    T.ok(connected - closed <= 256, ("the relay carried %d connections at once (the cap is 256)"):format(connected - closed))
    -- the server reads again: a call goes through the relay, and the flood's connections are gone
    signal_server(SIGCONT)
    local rpc = require "seer.rpc"
    local c = rpc.connect(S.conn, { root = safe_fs.root(require("attack").rig().sandbox.run_dir, "the rig's run folder") })
    local ok, info = pcall(c.call_kw, c, "get_model_info", {}, { timeout = 30 })
    T.ok(ok and type(info) == "table" and info.num_layers == 5, "a call through the relay after the flood: " .. tostring(info))
    c:close()
    local deadline = seer.now() + 10
    while nfds(s.relay_pid) > s.fds0 + 2 and seer.now() < deadline do process.sleep_ms(50) end
    T.ok(nfds(s.relay_pid) <= s.fds0 + 2, ("the relay still holds %d descriptors (%d before the flood)"):format(nfds(s.relay_pid), s.fds0))
  end }

T.test("relay attack suite: the scoped sandbox closes", function()
  signal_server(SIGCONT)
  if S and S.scoped then S.scoped:terminate() end
  S = nil
end)
