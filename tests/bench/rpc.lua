-- make bench: seer's scoped-sandbox RPC round trip (p50/p99 of a small call, throughput of a
-- 1 MB argument) against a bare libzmq REQ/REP round trip (the floor) in this run, and against
-- the reference's stdlib HTTP RPC server when SEER_REFERENCE_RPC names its rpc_server.py
-- (tests/bench/rpc_reference.py drives it the way its generated client does). N small calls
-- (default 2000), M 1 MB calls (default 50). Over ipc it also measures a pool of two workers
-- (`seer rpc serve --workers 2`), whose calls go through the broker: one more hop.
local rpc = require "seer.rpc"
local process = require "seer.process"
local ffi = require "ffi"
ffi.cdef [[
void *zmq_ctx_new(void); void *zmq_socket(void *, int); int zmq_connect(void *, const char *);
int zmq_send(void *, const void *, size_t, int); int zmq_recv(void *, void *, size_t, int);
int zmq_close(void *);
]]
local Z = ffi.C
local now = seer.now
local N = tonumber(os.getenv("RPC_N")) or 2000
local M = tonumber(os.getenv("RPC_M")) or 50
local here = seer.script_dir()
local MB = string.rep("0123456789abcdef", 65536)

local function pct(ts, p)
  table.sort(ts)
  return ts[math.max(1, math.floor(#ts * p + 0.5))]
end

-- Small calls of several peers interleaved in rounds, so that the load of this shared machine
-- falls on all of them alike; then each peer's 1 MB calls.
local function measure(peers)
  for _, p in ipairs(peers) do
    p.ts = {}
    for _ = 1, 200 do p.small() end -- warm up (connections, JIT)
  end
  local rounds = 20
  for _ = 1, rounds do
    for _, p in ipairs(peers) do
      for _ = 1, math.ceil(N / rounds) do
        local t = now()
        p.small()
        p.ts[#p.ts + 1] = (now() - t) * 1e6
      end
    end
  end
  for _, p in ipairs(peers) do
    p.big()
    local t = now()
    for _ = 1, M do p.big() end
    p.mbps = M * #MB / 1e6 / (now() - t)
    p.p50, p.p99 = pct(p.ts, 0.5), pct(p.ts, 0.99)
  end
end

local function floor_peer(ep)
  local child = process.spawn{ argv = { require("seer.jupyter").seer_binary(), here .. "/rpc_floor.lua", ep }, stderr = "inherit" }
  local s = Z.zmq_socket(Z.zmq_ctx_new(), 3 --[[ZMQ_REQ]])
  assert(Z.zmq_connect(s, ep) == 0)
  local buf = ffi.new("char[64]")
  local msg = string.rep("x", 100) -- about the size of a small call's content
  return {
    small = function() Z.zmq_send(s, msg, #msg, 0); Z.zmq_recv(s, buf, 64, 0) end,
    big = function() Z.zmq_send(s, MB, #MB, 0); Z.zmq_recv(s, buf, 64, 0) end,
    close = function() Z.zmq_close(s); child:kill(9); child:wait(2000) end, -- SIGTERM would print "interrupted"
  }
end

local rows = {}
local function row(name, p50, p99, mbps)
  rows[#rows + 1] = { name, p50, p99, mbps }
  print(("  %-34s p50 %7.1f us  p99 %7.1f us   1 MB: %8.1f MB/s (%6.2f ms/call)"):format(name, p50, p99, mbps, #MB / 1e6 / mbps * 1000))
  io.stdout:flush()
end

local function seer_peer(srv)
  local c = srv.client
  assert(c:call("size", MB) == #MB)
  return { small = function() return c:call("ping", 1) end, big = function() return c:call("size", MB) end }
end

local results = {}
for _, transport in ipairs{ "ipc", "tcp" } do
  local srv = rpc.serve_local(here .. "/rpc_interface.lua", { transport = transport, name = "bench" })
  local dir = process.mkdtemp("/tmp/seer-rpc-bench-")
  local ep = transport == "ipc" and ("ipc://" .. dir .. "/floor.sock") or "tcp://127.0.0.1:" .. (40000 + process.getpid() % 20000)
  local seer_p = seer_peer(srv)
  local floor_p = floor_peer(ep)
  -- over ipc, also a pool of two workers (`--workers 2`): one more hop, through the broker
  local pool = transport == "ipc" and rpc.serve_local(here .. "/rpc_interface.lua", { name = "bench_pool", workers = 2 })
  local pool_p = pool and seer_peer(pool) or nil
  measure{ seer_p, floor_p, pool_p }
  srv:close()
  if pool then pool:close() end
  floor_p.close()
  os.execute("rm -rf '" .. dir .. "'")
  row("seer rpc (" .. transport .. ")", seer_p.p50, seer_p.p99, seer_p.mbps)
  row("bare libzmq REQ/REP (" .. transport .. ")", floor_p.p50, floor_p.p99, floor_p.mbps)
  results[transport] = seer_p
  print(("  %-34s p50 %.2fx the floor (target <= 1.5x)"):format("", seer_p.p50 / floor_p.p50))
  if pool_p then row("seer rpc (ipc), 2 workers", pool_p.p50, pool_p.p99, pool_p.mbps) end
end

local ref = os.getenv("SEER_REFERENCE_RPC")
if not ref or ref == "" then
  print("  reference: skipped (set SEER_REFERENCE_RPC to the reference's src/environment/utils/rpc_server.py)")
else
  local cmd = ("/usr/bin/python3 %q --server %q --n %d --m %d"):format(here .. "/rpc_reference.py", ref, N, M)
  local out = io.popen(cmd .. " 2>&1"):read("*a")
  local ok, r = pcall(seer.json.decode, out:match("[^\n]*$") ~= "" and out:match("[^\n]*$") or (out:match("([^\n]+)\n*$") or ""))
  if not ok or type(r) ~= "table" or not r.p50 then
    print("  reference: FAILED: " .. out:gsub("\n", "\n    "))
  else
    row("reference HTTP (new request per call)", r.p50, r.p99, r.mbps)
    local s = results.tcp
    print(("  seer (tcp) vs reference: p50 %.3fx (target <= 0.2x), 1 MB throughput %.1fx (target >= 10x)")
      :format(s.p50 / r.p50, s.mbps / r.mbps))
    s = results.ipc
    print(("  seer (ipc) vs reference: p50 %.3fx, 1 MB throughput %.1fx"):format(s.p50 / r.p50, s.mbps / r.mbps))
  end
end
