-- seer.net from Lua: sockets, bind on a free port, signed messages with JSON bodies (an empty
-- table is {}), routing ids, bad signatures dropped, raw frames, poll over sockets and file
-- descriptors, headers, keys and UUIDs, and the errors for misuse.
local T = require "testing"
local net = require "seer.net"
local json = require "seer.json"

T.test("net: keys, uuids and headers", function()
  local k1, k2 = net.new_key(), net.new_key()
  T.eq(#k1, 64)
  T.ok(k1:match("^%x+$"))
  T.ne(k1, k2)
  T.ok(net.uuid():match("^%x+%-%x+%-4%x+%-[89ab]%x+%-%x+$"))
  local h = net.header("execute_request", "sess")
  T.eq(h.msg_type, "execute_request")
  T.eq(h.session, "sess")
  T.eq(h.version, "5.3")
  T.ok(h.date:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%d%d%d%dZ$"), h.date)
  T.ok(h.msg_id:match("^%x+%-"))
  T.raises(function() net.header(1, "s") end, "msg_type must be a string")
end)

T.test("net: router/dealer round trip over tcp with JSON bodies", function()
  local key = net.new_key()
  local srv = net.socket("router", key)
  local ep, port = srv:bind("tcp://127.0.0.1:*")
  T.ok(ep:match("^tcp://127%.0%.0%.1:%d+$"), ep)
  T.eq(type(port), "number")
  local cli = net.socket("dealer", key)
  cli:connect(ep)
  cli:send({ header = net.header("ping", "c"), parent_header = {}, metadata = {}, content = { n = 1, empty = {}, list = { 1, 2 } },
    buffers = { "\0\1bin" } })
  local msg = srv:recv(5000)
  T.eq(msg.header.msg_type, "ping")
  T.eq(json.encode(msg.content), '{"empty":{},"list":[1,2],"n":1}')
  T.eq(json.encode(msg.parent_header), "{}")
  T.eq(msg.buffers, { "\0\1bin" })
  T.eq(#msg.idents, 1)
  srv:send({ idents = msg.idents, header = net.header("pong", "s"), parent_header = msg.header, content = { ok = true } })
  local r = cli:recv(5000)
  T.eq(r.header.msg_type, "pong")
  T.eq(r.parent_header.msg_id, msg.header.msg_id)
  T.eq(r.content.ok, true)
  T.eq({ srv:recv(0) }, { nil, "timeout" })
  srv:close()
  cli:close()
end)

T.test("net: bad signatures are dropped", function()
  local srv = net.socket("router", "right")
  local ep = srv:bind("tcp://127.0.0.1:*")
  local bad, good = net.socket("dealer", "wrong"), net.socket("dealer", "right")
  bad:connect(ep)
  good:connect(ep)
  local before = net.dropped()
  bad:send({ header = net.header("x", "b"), content = { forged = true } })
  T.eq({ srv:recv(300) }, { nil, "timeout" })
  T.eq(net.dropped(), before + 1)
  good:send({ header = net.header("x", "g"), content = { real = true } })
  T.eq(srv:recv(5000).content.real, true)
  for _, s in ipairs({ srv, bad, good }) do s:close() end
end)

T.test("net: raw frames, pub/sub, req/rep and poll", function()
  local rep, req = net.socket("rep"), net.socket("req")
  local ep = rep:bind("tcp://127.0.0.1:*")
  req:connect(ep)
  req:send_frames({ "ping", "" })
  T.eq(net.poll({ req, rep }, 5000), { 2 })
  T.eq(rep:recv_frames(1000), { "ping", "" })
  rep:send_frames({ "pong" })
  T.eq(req:recv_frames(5000), { "pong" })
  T.eq(net.poll({ rep }, 10), {})

  local pub, sub = net.socket("pub", "k"), net.socket("sub", "k")
  local pep = pub:bind("tcp://127.0.0.1:*")
  sub:connect(pep)
  sub:subscribe("")
  local got
  for _ = 1, 100 do -- a subscription takes a moment to reach the publisher
    pub:send({ idents = { "topic" }, header = net.header("status", "p"), content = { execution_state = "idle" } })
    got = sub:recv(20)
    if got then break end
  end
  T.ok(got, "no message through pub/sub")
  T.eq(got.idents, { "topic" })
  T.eq(got.content.execution_state, "idle")

  for _, s in ipairs({ rep, req, pub, sub }) do s:close() end
end)

T.test("net: poll on a raw file descriptor", function()
  local ffi = require "ffi"
  pcall(ffi.cdef, "int pipe(int fds[2]); long write(int fd, const void *buf, unsigned long n); int close(int fd);")
  local fds = ffi.new("int[2]")
  T.eq(ffi.C.pipe(fds), 0)
  local s = net.socket("router")
  s:bind("inproc://seer-test-poll-fd")
  T.eq(net.poll({ s, fds[0] }, 10), {})
  ffi.C.write(fds[1], "x", 1)
  T.eq(net.poll({ s, fds[0] }, 1000), { 2 })
  ffi.C.close(fds[0])
  ffi.C.close(fds[1])
  s:close()
end)

T.test("net: misuse gives errors that say what to do", function()
  T.raises(function() net.socket("pair") end, "unknown kind pair")
  local s = net.socket("dealer")
  T.raises(function() s:subscribe("") end, "subscribe needs a sub socket")
  T.raises(function() s:bind("tcp://127.0.0.1:notaport") end, "bind tcp://127.0.0.1:notaport")
  T.raises(function() s:send({ content = {} }) end, "msg.header is missing")
  T.raises(function() s:send({ header = {}, content = { f = print } }) end, "message content")
  T.raises(function() net.poll({ "x" }) end, "entry 1 is a string")
  -- limits and timeouts that C casts to integers: NaN and fractions are refused, not cast
  T.raises(function() net.socket("dealer", nil, { max_bytes = 0 / 0 }) end, "max_bytes must be 0..", true)
  T.raises(function() net.socket("dealer", nil, { rcvhwm = 0 / 0 }) end, "rcvhwm must be 0..1000000", true)
  T.raises(function() net.poll({ 1.5 }) end, "poll: file descriptor must be a whole number", true)
  T.raises(function() net.poll({}, 0 / 0) end, "poll: timeout must be a number of milliseconds", true)
  s:close()
  T.raises(function() s:send({ header = {} }) end, "closed")
  T.eq(tostring(s):match("closed") ~= nil, true)
end)

T.test("net: CURVE — the server accepts only its one client key; a wrong key and a plain client get nothing", function()
  T.eq(net.has_curve(), true, "Debian's libzmq5 is built with libsodium")
  local spub, ssec = net.curve_keypair()
  T.eq(#spub, 40)
  T.eq(#ssec, 40)
  T.eq(net.curve_public(ssec), spub)
  T.raises(function() net.curve_public("short") end, "not a CURVE secret key")
  local cpub, csec = net.curve_keypair()
  local srv = net.raw_socket("router")
  srv:curve_server(ssec, cpub)
  local ep = srv:bind("tcp://127.0.0.1:*")
  -- the right client: its frames arrive, and a reply goes back
  local good = net.raw_socket("dealer")
  good:curve_client(spub, cpub, csec)
  good:connect(ep)
  good:send_raw({ "hello" })
  local f = srv:recv_frames(5000)
  T.eq(f and f[2], "hello")
  srv:send_raw({ f[1], "back" })
  T.eq(good:recv_frames(5000)[1], "back")
  -- another key pair: refused in the handshake (ZAP), nothing delivered either way
  local wpub, wsec = net.curve_keypair()
  local wrong = net.raw_socket("dealer")
  wrong:curve_client(spub, wpub, wsec)
  wrong:connect(ep)
  wrong:send_raw({ "evil" }, true)
  T.eq(srv:recv_frames(700), nil, "a wrong client key gets nothing through")
  T.ok(srv:curve_refused() >= 1, "the ZAP handler refused it")
  -- the right client's public key with a wrong secret: the handshake fails too
  local forged = net.raw_socket("dealer")
  forged:curve_client(spub, cpub, wsec)
  forged:connect(ep)
  forged:send_raw({ "forged" }, true)
  T.eq(srv:recv_frames(700), nil, "a client that claims the key without its secret gets nothing")
  -- no CURVE at all (the NULL mechanism): nothing
  local plain = net.raw_socket("dealer")
  plain:connect(ep)
  plain:send_raw({ "plain" }, true)
  T.eq(srv:recv_frames(700), nil, "a plain client gets nothing")
  -- the good client still works
  good:send_raw({ "again" })
  T.eq(srv:recv_frames(5000)[2], "again")
  for _, s in ipairs({ good, wrong, forged, plain, srv }) do s:close() end
  T.raises(function() net.raw_socket("router"):curve_server("x", cpub) end, "not a CURVE key")
  T.raises(function() net.raw_socket("pub") end, "unknown kind")
end)

T.test("net: stream sockets carry a unix socket's bytes (what the CURVE tunnel forwards)", function()
  local dir = T.tmpdir()
  local st = net.raw_socket("stream")
  st:bind("ipc://" .. dir .. "/s.sock")
  local key = net.new_key()
  local d = net.socket("dealer", key)
  d:connect("ipc://" .. dir .. "/s.sock")
  d:send({ header = net.header("x", "s"), parent_header = {}, metadata = {}, content = {} })
  local first = st:recv_frames(3000)
  T.eq(first[2], "", "a new connection is announced with an empty frame")
  local greet = st:recv_frames(3000)
  T.eq(greet[1], first[1])
  T.eq(greet[2]:byte(1), 0xff, "then the ZMTP greeting, as raw bytes")
  st:close()
  d:close()
end)

-- ---- the connection guard (engine/net/guard.c) ------------------------------------------------
-- libzmq keeps every frame of a multipart message until its last arrives, whatever
-- ZMQ_MAXMSGSIZE and the high-water mark say; a peer that writes ZMTP itself sends frames with
-- MORE forever. A socket with limits connects through the guard, which cuts such a peer.
local process = require "seer.process"
local function vm(field)
  for l in io.lines("/proc/self/status") do
    local v = l:match("^" .. field .. ":%s+(%d+)")
    if v then return tonumber(v) * 1024 end
  end
end
local function peer(path, mode, n, size)
  local c = process.spawn{ argv = { require("seer.jupyter").seer_binary(), seer.script_dir() .. "/zmtp_peer.lua", path, mode, tostring(n), tostring(size) },
                           stdout = "pipe" }
  T.eq(c:read_line(10000), "listening")
  return c
end
local tmp = process.mkdtemp("/tmp/seer-test-guard-")

T.test("net: a peer that never ends its message is cut at max_bytes; the receiver stays small (guard)", function()
  local path = tmp .. "/flood.sock"
  -- 400 frames of 1 MiB with MORE: without the guard the receiver holds all 400 MiB
  local p = peer(path, "flood", 400, 1024 * 1024)
  local s = net.socket("dealer", "", { max_bytes = 4 * 1024 * 1024, rcvhwm = 4 })
  local before = vm("VmRSS")
  s:connect("ipc://" .. path)
  local line = p:read_line(20000)
  T.ok(line and line:match("^sent %d+$"), tostring(line))
  local sent = tonumber(line:match("%d+"))
  T.ok(sent < 400, ("the peer got %d frames of 1 MiB through; it should have been cut after about 4"):format(sent))
  local n, why = s:dropped()
  T.ok(n >= 1, "the cut is counted as a dropped message")
  T.ok(why:find("more than 4194304 bytes", 1, true), why)
  T.ok(vm("VmRSS") - before < 64 * 1024 * 1024, ("the receiver grew by %d MiB"):format((vm("VmRSS") - before) / 1048576))
  s:close()
  p:kill(9)
  p:wait(2000)
end)

T.test("net: the guard refuses a frame-count flood, oversized commands and old ZMTP, and follows no link at a socket path", function()
  local cases = {
    { "flood", 100000, 1, "more than 64 frames" },
    { "command", 1, 1024 * 1024, "a ZMTP command of 1048576 bytes" },
    { "zmtp2", 1, 1, "before version 3" },
    { "overflow", 1, 1, "a message of more than" },
  }
  for i, c in ipairs(cases) do
    local path = ("%s/c%d.sock"):format(tmp, i)
    local p = peer(path, c[1], c[2], c[3])
    local s = net.socket("dealer", "", { max_frames = 64 })
    s:connect("ipc://" .. path)
    local why
    for _ = 1, 100 do
      local n, w = s:dropped()
      if n > 0 then why = w break end
      process.sleep_ms(50)
    end
    T.ok(why and why:find(c[4], 1, true), c[1] .. ": " .. tostring(why))
    s:close()
    p:kill(9)
    p:wait(2000)
  end
  -- a link planted at the socket path (pointing at a socket that is listening) is not followed;
  -- the real path works
  local srv = net.socket("router", "k")
  srv:bind("ipc://" .. tmp .. "/real.sock")
  os.execute(("ln -s %s/real.sock %s/link.sock"):format(tmp, tmp))
  local via_link = net.socket("dealer", "k", { max_bytes = 65536 })
  via_link:connect("ipc://" .. tmp .. "/link.sock")
  via_link:send({ header = net.header("x", "l"), content = { via = "link" } })
  T.eq({ srv:recv(500) }, { nil, "timeout" })
  local n, why = via_link:dropped()
  T.ok(n >= 1 and why:find("a symbolic link); not followed", 1, true), tostring(why))
  local direct = net.socket("dealer", "k", { max_bytes = 65536 })
  direct:connect("ipc://" .. tmp .. "/real.sock")
  direct:send({ header = net.header("x", "d"), content = { via = "path" } })
  local got = srv:recv(5000)
  T.eq(got and got.content.via, "path")
  -- round trip through the guard, both ways, with a buffer bigger than the guard's
  local big = ("b"):rep(3 * 1024 * 1024)
  srv:send({ idents = got.idents, header = net.header("y", "s"), content = { n = 1 }, buffers = { big } })
  local direct2 = net.socket("dealer", "k", { max_bytes = 8 * 1024 * 1024 })
  direct2:connect("ipc://" .. tmp .. "/real.sock")
  direct2:send({ header = net.header("x", "d2"), content = {}, buffers = { big } })
  local got2 = srv:recv(5000)
  T.eq(got2 and #got2.buffers[1], #big)
  srv:send({ idents = got2.idents, header = net.header("y", "s"), content = { n = 2 }, buffers = { big } })
  local r = direct2:recv(5000)
  T.eq(r and r.content.n, 2)
  T.eq(r and r.buffers[1] == big, true)
  for _, x in ipairs({ srv, via_link, direct, direct2 }) do x:close() end
end)

T.test("net: the guard passes well-formed traffic of every size intact (its parser follows frames across reads)", function()
  local srv = net.socket("router", "k")
  srv:bind("ipc://" .. tmp .. "/many.sock")
  -- a receiver that queues little (rcvhwm 2) and reads only after the burst: the guard's buffer
  -- fills, drains in part and refills while its parser follows the frames
  local c = net.socket("dealer", "k", { max_bytes = 1024 * 1024, max_frames = 16, rcvhwm = 2 })
  c:connect("ipc://" .. tmp .. "/many.sock")
  c:send({ header = net.header("hello", "c"), content = {} })
  local hello = srv:recv(5000)
  -- sizes around the guard's 256 KiB buffer and ZMTP's 255-byte short-frame limit, in a burst
  local sizes, seed = {}, 12345
  for i = 1, 600 do
    seed = (seed * 1103515245 + 12345) % 2147483648
    local pick = seed % 6
    sizes[i] = ({ 0, 1, 254, 256, 70000, 262145 })[pick + 1] + (seed % 7)
  end
  local sent = 0
  for i, n in ipairs(sizes) do
    srv:send({ idents = hello.idents, header = net.header("m", "s"), content = { i = i }, buffers = { ("%d"):format(i):rep(1):sub(1, 1):rep(n) } })
    sent = sent + 1
  end
  local got = 0
  for i, n in ipairs(sizes) do
    local m = c:recv(10000)
    if not m or m.content.i ~= i or #m.buffers[1] ~= n then
      T.ok(false, ("message %d of %d (%d bytes) arrived as %s"):format(i, sent, n, m and (tostring(m.content.i) .. "/" .. #m.buffers[1]) or "nothing"))
    end
    got = got + 1
  end
  T.eq(got, #sizes)
  T.eq(c:dropped(), 0, "nothing dropped or cut")
  srv:close()
  c:close()
end)

T.test("net: a relay offers a socket of another side's folder without following a link put there", function()
  -- a container backend's shared folder (written by the container) holds its sockets; the host
  -- offers them in its own folder through net.relay instead of a symbolic link
  local shared = tmp .. "/shared"
  os.execute("mkdir -p " .. shared)
  local real = net.socket("router", "k")
  real:bind("ipc://" .. shared .. "/sandboxd.sock")
  local relay = net.relay(tmp .. "/offered.sock", "ipc://" .. shared .. "/sandboxd.sock")
  local c = net.socket("dealer", "k")
  c:connect("ipc://" .. tmp .. "/offered.sock")
  c:send({ header = net.header("x", "c"), content = { through = "relay" } })
  local m = real:recv(5000)
  T.eq(m and m.content.through, "relay")
  real:send({ idents = m.idents, header = net.header("y", "s"), content = { back = true } })
  T.eq((c:recv(5000) or {}).content.back, true)
  c:close()
  real:close()
  -- the other side swaps its socket for a link to a socket of the host: not followed
  local host_only = net.socket("router", "k")
  host_only:bind("ipc://" .. tmp .. "/host-only.sock")
  os.remove(shared .. "/sandboxd.sock")
  os.execute(("ln -s %s/host-only.sock %s/sandboxd.sock"):format(tmp, shared))
  local c2 = net.socket("dealer", "k")
  c2:connect("ipc://" .. tmp .. "/offered.sock")
  c2:send({ header = net.header("x", "c2"), content = { through = "link" } })
  T.eq({ host_only:recv(700) }, { nil, "timeout" })
  local n, why = relay:cuts()
  T.ok(n >= 1 and why:find("a symbolic link); not followed", 1, true), tostring(why))
  relay:close()
  for _, x in ipairs({ c2, host_only }) do x:close() end
end)

T.test("net: a relay beneath a shared folder follows no link in a folder on the way (a container's run folder swapped for a link)", function()
  local dir = process.mkdtemp("/tmp/seer-test-guard-")
  local shared, hostdir = dir .. "/shared", dir .. "/host"
  os.execute(("mkdir -p '%s/run' '%s'"):format(shared, hostdir))
  local host_only = net.socket("router", "k")
  host_only:bind("ipc://" .. hostdir .. "/sandboxd.sock")
  -- the run folder is already a link when the relay is made: refused at once
  os.execute(("rmdir '%s/run' && ln -s '%s' '%s/run'"):format(shared, hostdir, shared))
  local ok, err = pcall(net.relay, dir .. "/offered.sock", "ipc://" .. shared .. "/run/sandboxd.sock", { beneath = shared })
  T.ok(not ok, "a relay through a linked folder is refused")
  T.contains(tostring(err), "run on the way is a link or not a folder; not followed")
  -- made while the folder is real, then swapped: the next connects are refused, not followed
  os.execute(("rm '%s/run' && mkdir '%s/run'"):format(shared, shared))
  local real = net.socket("router", "k")
  real:bind("ipc://" .. shared .. "/run/sandboxd.sock")
  local relay = net.relay(dir .. "/offered.sock", "ipc://" .. shared .. "/run/sandboxd.sock", { beneath = shared })
  local c = net.socket("dealer", "k")
  c:connect("ipc://" .. dir .. "/offered.sock")
  c:send({ header = net.header("x", "c"), content = { n = 1 } })
  T.eq((real:recv(5000) or { content = {} }).content.n, 1, "the real socket is reached")
  c:close()
  real:close()
  os.execute(("mv '%s/run' '%s/old' && ln -s '%s' '%s/run'"):format(shared, shared, hostdir, shared))
  local c2 = net.socket("dealer", "k")
  c2:connect("ipc://" .. dir .. "/offered.sock")
  c2:send({ header = net.header("x", "c2"), content = { n = 2 } })
  T.eq({ host_only:recv(1000) }, { nil, "timeout" }, "the host-only socket got nothing")
  local n, why = relay:cuts()
  T.ok(n >= 1 and why:find("on the way is a link or not a folder", 1, true), tostring(why))
  relay:close()
  for _, x in ipairs({ c2, host_only }) do x:close() end
  os.execute("rm -rf '" .. dir .. "'")
end)

T.test("net: a bind beneath a sandbox's folder follows no link there (the RPC relay's socket in a run folder)", function()
  local process = require "seer.process"
  local dir = process.mkdtemp("/tmp/seer-test-guard-")
  local run, hostdir = dir .. "/run", dir .. "/host"
  os.execute(("mkdir -p '%s/rpc-relay' '%s'"):format(run, hostdir))
  local function listing(d)
    local p = io.popen("ls -A '" .. d .. "'") local t = p:read("*a") p:close() return t
  end
  -- the folder is real: bound through it, reached at its path
  local srv = net.socket("router", "k", { max_bytes = 1024 * 1024 })
  T.eq(srv:bind("ipc://" .. run .. "/rpc-relay/lib-1.sock", run), "ipc://" .. run .. "/rpc-relay/lib-1.sock")
  local c = net.socket("dealer", "k")
  c:connect("ipc://" .. run .. "/rpc-relay/lib-1.sock")
  c:send({ header = net.header("x", "c"), content = { n = 1 } })
  T.eq((srv:recv(5000) or { content = {} }).content.n, 1, "reached through the bound path")
  c:close()
  srv:close()
  -- the sandbox swaps its folder for a link to a host folder: refused, nothing made there
  os.execute(("mv '%s/rpc-relay' '%s/old' && ln -s '%s' '%s/rpc-relay'"):format(run, run, hostdir, run))
  local s2 = net.socket("router", "k", { max_bytes = 1024 * 1024 })
  local ok, err = pcall(s2.bind, s2, "ipc://" .. run .. "/rpc-relay/lib-2.sock", run)
  T.ok(not ok, "a bind through a linked folder is refused")
  T.contains(tostring(err), "rpc-relay on the way is a link or not a folder; not followed")
  T.eq(listing(hostdir), "", "nothing was created in the folder the link names")
  -- deeper: a folder above the socket's is the link
  T.eq(os.execute(("rm '%s/rpc-relay' && mkdir -p '%s/b' '%s/a' && ln -s '%s' '%s/a/up'"):format(run, hostdir, run, hostdir, run)), 0)
  ok, err = pcall(s2.bind, s2, "ipc://" .. run .. "/a/up/b/x.sock", run)
  T.ok(not ok and tostring(err):find("not followed", 1, true), tostring(err))
  T.eq(listing(hostdir .. "/b"), "")
  -- a link at the socket's own name is removed, not followed; its target is untouched
  os.execute(("mkdir '%s/rpc-relay' && echo keep > '%s/target' && ln -s '%s/target' '%s/rpc-relay/lib-3.sock'"):format(run, hostdir, hostdir, run))
  local s3 = net.socket("router", "k", { max_bytes = 1024 * 1024 })
  s3:bind("ipc://" .. run .. "/rpc-relay/lib-3.sock", run)
  T.eq(io.open(hostdir .. "/target"):read("*a"), "keep\n")
  local p = io.popen("stat -c %F '" .. run .. "/rpc-relay/lib-3.sock'") local kind = p:read("*l") p:close()
  T.eq(kind, "socket")
  -- a file that is not a socket at the name: refused, kept
  os.execute(("echo mine > '%s/rpc-relay/lib-4.sock'"):format(run))
  ok, err = pcall(s2.bind, s2, "ipc://" .. run .. "/rpc-relay/lib-4.sock", run)
  T.ok(not ok and tostring(err):find("not a socket is there", 1, true), tostring(err))
  T.eq(io.open(run .. "/rpc-relay/lib-4.sock"):read("*a"), "mine\n")
  -- misuse: not beneath the folder, '..' in the path, a socket without limits, tcp
  ok, err = pcall(s2.bind, s2, "ipc://" .. hostdir .. "/y.sock", run)
  T.ok(not ok and tostring(err):find("is not beneath", 1, true), tostring(err))
  ok, err = pcall(s2.bind, s2, "ipc://" .. run .. "/rpc-relay/../../host/z.sock", run)
  T.ok(not ok and tostring(err):find("'..'", 1, true), tostring(err))
  T.eq(listing(hostdir):find("z.sock", 1, true), nil)
  local plain = net.socket("router", "k")
  ok, err = pcall(plain.bind, plain, "ipc://" .. run .. "/rpc-relay/p.sock", run)
  T.ok(not ok and tostring(err):find("only a socket with limits", 1, true), tostring(err))
  ok, err = pcall(s2.bind, s2, "tcp://127.0.0.1:*", run)
  T.ok(not ok and tostring(err):find("only an ipc:// path", 1, true), tostring(err))
  for _, x in ipairs({ s2, s3, plain }) do x:close() end
  os.execute("rm -rf '" .. dir .. "'")
end)

T.test("net: a relay that listens beneath a sandbox's folder follows no link there, at its start or its close", function()
  local dir = process.mkdtemp("/tmp/seer-test-guard-")
  local run, hostdir, srvdir = dir .. "/run", dir .. "/host", dir .. "/srv"
  os.execute(("mkdir -p '%s/rpc-relay' '%s' '%s'"):format(run, hostdir, srvdir))
  local function listing(d)
    local p = io.popen("ls -A '" .. d .. "'") local t = p:read("*a") p:close() return t
  end
  local real = net.socket("router", "k")
  real:bind("ipc://" .. srvdir .. "/server.sock")
  local front = run .. "/rpc-relay/lib-1.sock"
  -- a link at the socket's name is replaced, not followed; its target is untouched
  os.execute(("echo keep > '%s/lib-1.sock' && ln -s '%s/lib-1.sock' '%s'"):format(hostdir, hostdir, front))
  local relay = net.relay(front, "ipc://" .. srvdir .. "/server.sock", { listen_beneath = run })
  T.eq(io.open(hostdir .. "/lib-1.sock"):read("*a"), "keep\n")
  local p = io.popen("stat -c %F '" .. front .. "'") local kind = p:read("*l") p:close()
  T.eq(kind, "socket")
  local c = net.socket("dealer", "k")
  c:connect("ipc://" .. front)
  c:send({ header = net.header("x", "c"), content = { n = 1 } })
  local m = real:recv(5000)
  T.eq(m and m.content.n, 1, "the server is reached through the relay")
  real:send({ idents = m.idents, header = net.header("y", "s"), content = { back = true } })
  T.eq((c:recv(5000) or { content = {} }).content.back, true, "the reply comes back")
  c:close()
  -- the sandbox swaps the folder for a link to a host folder holding a file of the socket's name:
  -- the relay's close removes nothing through it
  os.execute(("mv '%s/rpc-relay' '%s/old' && ln -s '%s' '%s/rpc-relay'"):format(run, run, hostdir, run))
  relay:close()
  process.sleep_ms(200) -- the guard's thread closes it
  T.eq(io.open(hostdir .. "/lib-1.sock"):read("*a"), "keep\n", "the close removed a file through the link")
  -- a relay made through the linked folder is refused, and makes nothing in the folder it names
  local ok, err = pcall(net.relay, run .. "/rpc-relay/lib-2.sock", "ipc://" .. srvdir .. "/server.sock", { listen_beneath = run })
  T.ok(not ok, "a relay listening through a linked folder is refused")
  T.contains(tostring(err), "rpc-relay on the way is a link or not a folder; not followed")
  T.eq(listing(hostdir), "lib-1.sock\n", "nothing was created in the folder the link names")
  -- something that is not a socket at the name: refused, kept
  os.execute(("rm '%s/rpc-relay' && mkdir '%s/rpc-relay' && echo mine > '%s/rpc-relay/lib-3.sock'"):format(run, run, run))
  ok, err = pcall(net.relay, run .. "/rpc-relay/lib-3.sock", "ipc://" .. srvdir .. "/server.sock", { listen_beneath = run })
  T.ok(not ok and tostring(err):find("not a socket is there", 1, true), tostring(err))
  T.eq(io.open(run .. "/rpc-relay/lib-3.sock"):read("*a"), "mine\n")
  -- a path not beneath the folder
  ok, err = pcall(net.relay, hostdir .. "/x.sock", "ipc://" .. srvdir .. "/server.sock", { listen_beneath = run })
  T.ok(not ok and tostring(err):find("is not beneath", 1, true), tostring(err))
  real:close()
  os.execute("rm -rf '" .. dir .. "'")
end)

T.test("net: the RPC relay's process binds beneath the sandbox's run folder (a swapped rpc-relay folder)", function()
  local process = require "seer.process"
  local dir = process.mkdtemp("/tmp/seer-test-guard-")
  local run, hostdir = dir .. "/run", dir .. "/host"
  os.execute(("mkdir -p '%s' '%s' && ln -s '%s' '%s/rpc-relay'"):format(run, hostdir, hostdir, run))
  local spec = json.encode{ pairs = { { front = "ipc://" .. run .. "/rpc-relay/lib-ab.sock", back = "ipc://" .. dir .. "/server.sock" } },
                            beneath = run }
  local ok, err = pcall(process.start_helper, { code = 'require("seer.rpc.relay").run()', env = { SEER_RPC_RELAY = spec },
                                                log = dir .. "/relay.log", ready_timeout_ms = 10000, what = "the relay" })
  T.ok(not ok, "the relay did not start through the link")
  T.contains(tostring(err), "the relay")
  local log = io.open(dir .. "/relay.log"):read("*a")
  T.contains(log, "rpc-relay on the way is a link or not a folder; not followed")
  local lp = io.popen("ls -A '" .. hostdir .. "'") local l = lp:read("*a") lp:close()
  T.eq(l, "", "the relay made no socket in the folder the link names")
  os.execute("rm -rf '" .. dir .. "'")
end)

T.test("net: a peer that hangs up while the guard's buffer is full does not make the guard spin", function()
  -- a socket that is not read for a while (the RPC client between calls): the peer fills what
  -- libzmq and the guard will hold, then closes; epoll reports the hangup whatever the mask
  local dir = process.mkdtemp("/tmp/seer-test-guard-")
  local path = dir .. "/fill.sock"
  local p = peer(path, "fill-close", 100000, 65536)
  local s = net.socket("dealer", "", { max_bytes = 4 * 1024 * 1024, rcvhwm = 4 })
  s:connect("ipc://" .. path)
  local line = p:read_line(30000)
  T.ok(line and line:match("^sent %d+$"), tostring(line))
  process.sleep_ms(300)
  local function cpu()
    local f = io.open("/proc/self/stat") local l = f:read("*a") f:close()
    local i, t = 0, 0
    for w in l:match("%) (.*)$"):gmatch("%S+") do i = i + 1 if i == 12 or i == 13 then t = t + tonumber(w) end end
    return t / 100
  end
  local c0 = cpu()
  process.sleep_ms(2000)
  local used = cpu() - c0
  T.ok(used < 0.5, ("this process used %.2f CPU seconds in 2 s while idle (the guard spun on the hangup)"):format(used))
  -- what the peer sent before it hung up is still delivered, in order
  local got = 0
  while s._s:recv_frames(200) do got = got + 1 end
  T.ok(got >= 1, "the messages sent before the hangup arrive")
  s:close()
  p:kill(9) p:wait(2000)
  os.execute("rm -rf " .. dir)
end)

-- Opens n connections to a unix socket path from another process and holds them until killed.
local function connector(path, n)
  local code = ([[local s = require "seer.sock"
local held = 0
for i = 1, %d do
  local fd = s.connect_unix(%q, 2000)
  if fd then held = held + 1 end
  if i %% 20 == 0 then require("seer.process").sleep_ms(2) end -- paced: not a burst the backlogs cut short
end
io.stdout:write("held ", held, "\n") io.stdout:flush()
require("seer.process").sleep_ms(120000)]]):format(n, path)
  return process.spawn{ argv = { require("seer.jupyter").seer_binary(), "-e", code }, stdout = "pipe" }
end
local function nfds(pid)
  local p = io.popen("ls /proc/" .. (pid or "self") .. "/fd | wc -l")
  local n = tonumber(p:read("*a"))
  p:close()
  return n
end

T.test("net: a guarded bind carries at most 256 peers; a connect loop cannot take this process's descriptors or spin its guard", function()
  local dir = process.mkdtemp("/tmp/seer-test-guard-")
  local path = dir .. "/many.sock"
  local srv = net.socket("router", "k", { max_bytes = 65536 })
  srv:bind("ipc://" .. path)
  local before = nfds()
  local c = connector(path, 700)
  T.ok((c:read_line(30000) or ""):match("^held %d+"), "the connector ran")
  process.sleep_ms(300)
  local grown = nfds() - before
  -- three descriptors per carried peer (its connection, the guard's and libzmq's ends)
  T.ok(grown <= 256 * 3 + 16, ("700 connections took %d descriptors here (at most 256 peers: 784)"):format(grown))
  local n, why = srv:dropped()
  T.ok(n >= 1 and why and why:find("256 connections at once", 1, true), ("dropped %s: %s; %d descriptors"):format(n, tostring(why), grown))
  c:kill(9)
  c:wait(2000)
  process.sleep_ms(300)
  -- the slots free when the peers go: a client gets through
  local cl = net.socket("dealer", "k")
  cl:connect("ipc://" .. path)
  cl:send({ header = net.header("x", "c"), content = { hi = 1 } })
  T.eq((srv:recv(5000) or { content = {} }).content.hi, 1)
  cl:close()
  srv:close()
  -- out of descriptors (a low limit): the guard's listener rests instead of spinning on accept.
  -- The victim needs no descriptor once the connector has taken them all: its modules are loaded
  -- before it says "bound", it waits for the go file with access(2) and reads its CPU time with
  -- os.clock (the process's, every thread's). It opened both with io.open before and loaded
  -- seer.process in its wait loop, which failed while no descriptor was free, so the victim
  -- waited past the test's 10 s or died whenever the guard held every one first (a CI run on a
  -- busy machine).
  local victim = process.spawn{ argv = { "sh", "-c", ([[ulimit -n 60; exec '%s' -e '
local net = require "seer.net"
local proc = require "seer.process"
local ffi = require "ffi"
ffi.cdef "int access(const char *path, int mode);"
local s = net.socket("router", "k", { max_bytes = 65536 })
s:bind("ipc://%s/low.sock")
io.stdout:write("bound\n") io.stdout:flush()
while ffi.C.access("%s/go", 0) ~= 0 do proc.sleep_ms(20) end
local c0 = os.clock() proc.sleep_ms(2000)
io.stdout:write("cpu ", string.format("%%.3f", os.clock() - c0), " dropped ", select(2, s:dropped()), "\n") io.stdout:flush()']]):format(
      require("seer.jupyter").seer_binary(), dir, dir) }, stdout = "pipe" }
  T.eq(victim:read_line(10000), "bound")
  local c2 = connector(dir .. "/low.sock", 200)
  T.ok((c2:read_line(30000) or ""):match("^held %d+"), "the connector ran")
  seer.write_file(dir .. "/go", "")
  local line = victim:read_line(10000) or ""
  local cpu = tonumber(line:match("^cpu ([%d.]+)"))
  T.ok(cpu and cpu < 0.5, "the victim spent " .. line .. " CPU seconds in 2 s (its guard spun on accept)")
  T.ok(line:find("out of descriptors", 1, true), line)
  c2:kill(9) c2:wait(2000)
  victim:kill(9) victim:wait(2000)
  os.execute("rm -rf " .. dir)
end)

T.test("net: a socket with limits that binds is guarded too: a connecting peer's endless message is cut, others go on", function()
  -- a host process that binds where a sandbox can connect (the RPC relay in a sandbox's run folder)
  local path = tmp .. "/bound.sock"
  local srv = net.socket("router", "k", { max_bytes = 4 * 1024 * 1024, rcvhwm = 4 })
  T.eq(srv:bind("ipc://" .. path), "ipc://" .. path)
  local before = vm("VmRSS")
  local p = process.spawn{ argv = { require("seer.jupyter").seer_binary(), seer.script_dir() .. "/zmtp_peer.lua", path,
                                    "client-flood", "400", tostring(1024 * 1024) }, stdout = "pipe" }
  T.eq(p:read_line(10000), "connected")
  local sent = tonumber((p:read_line(20000) or ""):match("^sent (%d+)$"))
  T.ok(sent and sent < 400, ("the peer got %s frames of 1 MiB through"):format(tostring(sent)))
  local n, why = srv:dropped()
  T.ok(n >= 1 and why:find("more than 4194304 bytes", 1, true), tostring(why))
  T.ok(vm("VmRSS") - before < 64 * 1024 * 1024, ("the server grew by %d MiB"):format((vm("VmRSS") - before) / 1048576))
  -- a well-behaved client still gets through, both ways
  local c = net.socket("dealer", "k")
  c:connect("ipc://" .. path)
  c:send({ header = net.header("x", "c"), content = { hi = 1 } })
  local m = srv:recv(5000)
  T.eq(m and m.content.hi, 1)
  srv:send({ idents = m.idents, header = net.header("y", "s"), content = { back = 2 } })
  T.eq((c:recv(5000) or {}).content.back, 2)
  -- tcp with a wildcard port: the endpoint returned is the real one
  local t = net.socket("router", "k", { max_bytes = 65536 })
  local ep, port = t:bind("tcp://127.0.0.1:*")
  T.ok(ep:match("^tcp://127%.0%.0%.1:%d+$") and port > 0, ep)
  local tc = net.socket("dealer", "k")
  tc:connect(ep)
  tc:send({ header = net.header("x", "t"), content = { tcp = true } })
  T.eq((t:recv(5000) or {}).content.tcp, true)
  for _, x in ipairs({ srv, c, t, tc }) do x:close() end
  p:kill(9)
  p:wait(2000)
  os.execute("rm -rf " .. tmp)
end)
