-- The floor for tests/bench/rpc.lua: a bare libzmq REP echo server (no signing, no JSON), driven
-- through LuaJIT's FFI so the only cost is libzmq's. arg[1] = the endpoint to bind.
local ffi = require "ffi"
ffi.cdef [[
void *zmq_ctx_new(void); void *zmq_socket(void *, int); int zmq_bind(void *, const char *);
int zmq_send(void *, const void *, size_t, int); int zmq_recv(void *, void *, size_t, int);
]]
local Z = ffi.C
local s = Z.zmq_socket(Z.zmq_ctx_new(), 4 --[[ZMQ_REP]])
assert(Z.zmq_bind(s, arg[1]) == 0, "cannot bind " .. arg[1])
require("seer.process").die_with_parent()
local cap = 4 * 1024 * 1024
local buf = ffi.new("char[?]", cap)
while true do
  local n = Z.zmq_recv(s, buf, cap, 0)
  if n >= 0 then Z.zmq_send(s, buf, math.min(n, 8), 0) end
end
