-- A hostile ZMTP peer for the tests of seer.net's connection guard (engine/net/guard.c): it binds
-- a unix socket as a kernel, sandboxd or RPC server in a sandbox would, and speaks ZMTP 3 itself
-- (libzmq will not send an unfinished multipart message; a peer writing bytes can).
--   seer tests/lua/zmtp_peer.lua PATH MODE N SIZE
-- MODE "flood": after the greeting, N frames of SIZE bytes, all with the MORE flag (one message
-- that never ends); "command": one command frame of SIZE bytes; "zmtp2": a ZMTP 2.0 greeting.
-- It waits for the client to send something first when MODE ends in "-after" (a request), then
-- sends; it prints "sent K" when done or cut, and exits when the client goes away. MODE
-- "client-flood" connects to PATH (a socket that binds) instead of binding it. "complete": N
-- whole messages of SIZE bytes, each sent within 3 s or the peer stops. "fill-close": whole
-- messages until the receiver stops taking them for 1 s, then it closes the connection.
-- "overflow": a frame with MORE, then one whose size is 2^64 - 1.
local sock = require "seer.sock"
local process = require "seer.process"
local path, mode, n, size = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4])
local fd
if mode:find("^client%-") then
  -- the other way round: a peer that connects to a socket that binds
  mode = mode:sub(8)
  fd = assert(sock.connect_unix(path, 5000))
  io.stdout:write("connected\n") io.stdout:flush()
else
  os.remove(path)
  local l = assert(sock.listen_unix(path, 4))
  io.stdout:write("listening\n") io.stdout:flush()
  local ok_wait = sock.wait(l, 1, 20000)
  if not ok_wait then os.exit(3) end
  fd = sock.accept(l)
end
local function u64(v)
  local t = {}
  for i = 7, 0, -1 do t[#t + 1] = string.char(math.floor(v / 2 ^ (8 * i)) % 256) end
  return table.concat(t)
end
local function u32(v) return u64(v):sub(5) end
local function prop(k, v) return string.char(#k) .. k .. u32(#v) .. v end
local major = mode == "zmtp2" and 1 or 3
local greet = "\255" .. ("\0"):rep(8) .. "\127" .. string.char(major, 0) .. "NULL" .. ("\0"):rep(16) .. "\0" .. ("\0"):rep(31)
if not sock.send_all(fd, greet, 5000) then os.exit(4) end
local ready = "\5READY" .. prop("Socket-Type", "ROUTER") .. prop("Identity", "")
sock.send_all(fd, "\4" .. string.char(#ready) .. ready, 5000)
-- ZMTP: no message before the handshake is done, so read the client's greeting and READY first
-- (libzmq drops a peer whose message comes while it still expects READY)
local inbuf = ""
local function need(n)
  local deadline = process.now_ms() + 20000
  while #inbuf < n do
    if process.now_ms() > deadline then os.exit(5) end
    if sock.wait(fd, 1, 200) then
      local s = sock.recv(fd, 65536)
      if s == "" then os.exit(0) end
      inbuf = inbuf .. (s or "")
    end
  end
end
need(64 + 2)
local rsize = inbuf:byte(66)
need(64 + 2 + rsize)
inbuf = inbuf:sub(64 + 2 + rsize + 1)
if mode:find("%-after$") then need(1) end -- a message from the client (a request) first
local sent = 0
if mode:find("^flood") then
  local frame = "\3" .. u64(size) .. ("x"):rep(size)
  for _ = 1, n do
    if not sock.send_all(fd, frame, 10000) then break end
    sent = sent + 1
  end
elseif mode == "complete" then
  -- N whole single-frame messages of SIZE bytes (unsigned: they are dropped when read, but
  -- libzmq queues them first, up to the receiver's high-water mark)
  local frame = "\2" .. u64(size) .. ("m"):rep(size)
  for _ = 1, n do
    if not sock.send_all(fd, frame, 3000) then break end
    sent = sent + 1
  end
elseif mode == "overflow" then
  -- a 2-byte frame with MORE, then a frame that claims 2^64 - 1 bytes: the message's sum wraps
  -- past 2^64 to 1 byte unless the guard checks before it adds
  sock.send_all(fd, "\1\2ab" .. "\2" .. ("\255"):rep(8) .. ("z"):rep(4096), 5000)
  sent = 1
elseif mode == "fill-close" then
  -- whole messages until the receiver takes no more for 1 s (its queue and the guard's buffer
  -- full), then the connection closed: the hangup comes while the guard has no room to read
  local frame = "\2" .. u64(size) .. ("f"):rep(size)
  for _ = 1, n do
    if not sock.send_all(fd, frame, 1000) then break end
    sent = sent + 1
  end
  io.stdout:write(("sent %d\n"):format(sent)) io.stdout:flush()
  sock.close(fd)
  process.sleep_ms(20000)
  os.exit(0)
elseif mode == "command" then
  sock.send_all(fd, "\6" .. u64(size) .. ("c"):rep(size), 10000)
  sent = 1
end
io.stdout:write(("sent %d\n"):format(sent)) io.stdout:flush()
-- hold the connection until the client closes it (or 20 s)
local deadline = process.now_ms() + 20000
while process.now_ms() < deadline do
  if sock.wait(fd, 1, 200) then
    local s = sock.recv(fd, 65536)
    if s == "" or s == nil then break end
  end
end
