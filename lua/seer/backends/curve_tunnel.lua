--- seer.backends.curve_tunnel: one CURVE-encrypted, CURVE-authenticated ZMQ connection that
--- carries what the ssh backend gets from an SSH connection (docs/backends.md, Kubernetes):
---
---   * remote-start's stdin, stdout and stderr (the link's protocol, unchanged), and
---   * unix-socket forwards: a local socket here whose connections are carried, byte for byte,
---     to a unix socket in the remote sandbox's run folder (sandboxd's, the kernels').
---
--- The far side (`seer sandbox curve-serve`, in the Pod) binds TCP as a CURVE server whose ZAP
--- handler accepts only the client public key generated for this sandbox: every other key and
--- every client without CURVE is refused in the handshake, so nothing listens unauthenticated.
--- This side (`client_run`, in the Kubernetes transport process) connects as that client. The
--- tunnel moves bytes: the messages inside stay HMAC-signed end to end with the sandbox's key,
--- which the tunnel never needs. What it buffers is bounded (frame size, high-water marks,
--- a cap per connection, a cap on connections).
---
--- Frames on the tunnel (all strings): {"in", data} {"eof"} {"ping"} (host to Pod),
--- {"out", data} {"err", data} {"exit", code} {"pong"} (Pod to host), and both ways
--- {"conn", id, remote_path} (host to Pod only), {"data", id, bytes}, {"close", id}.
---@class seerbackends.curve_tunnel
local M = {}

local net = require "seer.net"
local cnet = require "seer.core.net"
local json = require "seer.json"
local process = require "seer.process"
local sb = require "seer.core.sandbox"
local ffi = require "ffi"

M.MAX_FRAME = 1048576          -- the largest frame either end accepts (ZMQ_MAXMSGSIZE)
M.HWM = 1000                   -- messages ZMQ queues each way on the tunnel
M.MAX_CONNS = 256              -- forwarded connections open at once
M.MAX_PENDING = 8 * 1048576    -- bytes held for one connection whose reader is slow
M.PING_MS = 1000               -- the host's keepalive
M.LOST_MS = 15000              -- no frame for this long: the other side is gone
M.DEFAULT_PORT = 7766

pcall(ffi.cdef, "long read(int fd, void *buf, unsigned long n);")
pcall(ffi.cdef, "long write(int fd, const void *buf, unsigned long n);")
pcall(ffi.cdef, "int chmod(const char *path, unsigned mode);")

local function read_fd(fd, n)
  local buf = ffi.new("char[?]", n)
  local got = ffi.C.read(fd, buf, n)
  if got == 0 then return nil end
  if got < 0 then return "" end
  return ffi.string(buf, got)
end

local function write_all(fd, data)
  local off = 0
  while off < #data do
    local w = ffi.C.write(fd, ffi.cast("const char *", data) + off, #data - off)
    if w <= 0 then
      if ffi.errno() ~= 11 and ffi.errno() ~= 4 then return false end
      process.sleep_ms(1)
    else off = off + tonumber(w) end
  end
  return true
end

local function tunnel_socket(kind)
  if not net.has_curve() then
    error("curve tunnel: this libzmq was built without CURVE (zmq_has(\"curve\") is false); install a libzmq built with libsodium (Debian's libzmq5 is)", 0)
  end
  local s = net.raw_socket(kind, { max_bytes = M.MAX_FRAME, max_frames = 8 })
  s:setopt("maxmsgsize", M.MAX_FRAME)
  s:setopt("sndhwm", M.HWM)
  s:setopt("rcvhwm", M.HWM)
  s:setopt("heartbeat_ivl", 1000)
  s:setopt("heartbeat_timeout", 5000)
  s:setopt("heartbeat_ttl", 10000)
  s:setopt("handshake_ivl", 10000)
  return s
end

---A key in Z85 (as net.curve_keypair makes them), or nil.
---@param k any
---@return string|nil
function M.z85(k)
  if type(k) ~= "string" then return nil end
  k = k:gsub("%s+$", "")
  if #k ~= 40 or not k:match("^[%w%.%-:%+=%^!/%*%?&<>%(%)%[%]{}@%%%$#]+$") then return nil end
  return k
end

-- One forwarded connection's queue toward its local reader: sends what it can without
-- blocking; returns false when more than MAX_PENDING is waiting.
local function flush(conn)
  while #conn.pending > 0 do
    if not conn.ready then return true end
    local ok = conn.sock:send_raw({ conn.rid, conn.pending[1] }, true)
    if not ok then break end
    conn.queued = conn.queued - #conn.pending[1]
    table.remove(conn.pending, 1)
  end
  return conn.queued <= M.MAX_PENDING
end

local function queue(conn, data)
  conn.pending[#conn.pending + 1] = data
  conn.queued = conn.queued + #data
  return flush(conn)
end

---------------------------------------------------------------------------------------------
-- the far side: `seer sandbox curve-serve` (the Pod's command)

local function plain_name(n) return type(n) == "string" and #n <= 100 and n:match("^[%w_.-]+$") and n:sub(1, 1) ~= "." end

local function read_small(path, max)
  local f = io.open(path, "rb")
  if not f then return nil end
  local d = f:read(max + 1)
  f:close()
  if d and #d > max then return nil end
  return d
end

---The Pod side. Reads the server secret key and the one allowed client public key from the
---Secret's folder (files server_secret, client_public), binds tcp://0.0.0.0:port, runs
---`seer sandbox remote-start` with its stdio carried over the tunnel, and connects forwarded
---connections to unix sockets in that sandbox's run folder only. Ends when remote-start ends,
---when the host is silent for LOST_MS, or when no host connects within `wait_s`.
---@param opts {secret_dir: string, port?: integer, wait_s?: number}
---@return integer exit code
function M.serve(opts)
  local function die(msg) io.stderr:write("curve-serve: ", msg, "\n"); return 2 end
  local dir = opts.secret_dir
  if type(dir) ~= "string" or dir == "" then return die("--secret-dir is required") end
  local sec = M.z85(read_small(dir .. "/server_secret", 128))
  local cpub = M.z85(read_small(dir .. "/client_public", 128))
  if not sec or not cpub then return die(("%s must hold server_secret and client_public (CURVE keys, Z85)"):format(dir)) end
  local port = opts.port or M.DEFAULT_PORT
  local router = tunnel_socket("router")
  router:curve_server(sec, cpub)
  router:setopt("router_mandatory", 1)
  router:bind(("tcp://0.0.0.0:%d"):format(port))
  io.stderr:write(("curve-serve: listening on port %d (CURVE; one client key)\n"):format(port))
  local seer_bin = require("seer.jupyter").seer_binary()
  local rs, err = sb.spawn{ argv = { seer_bin, "sandbox", "remote-start" }, stdin = true }
  if not rs then return die("cannot start remote-start: " .. tostring(err)) end
  local pipe_write = require("seer.backends.ssh")._pipe_write
  local peer, last_heard = nil, process.now_ms()
  local started = process.now_ms()
  local wait_ms = (opts.wait_s or 600) * 1000
  local run_dir, outbuf = nil, ""
  local conns, nconns = {}, 0
  local stdin_open, inbuf = true, ""
  local exit_code
  -- What goes to the host waits here when ZMQ would block (the host is slow, or reconnecting);
  -- while anything waits, nothing more is read from the sandbox's side (flow control), so this
  -- holds little more than replies.
  local outq, outq_bytes = {}, 0
  local function flush_out()
    while outq[1] and peer do
      local f = { peer }
      for i, v in ipairs(outq[1]) do f[i + 1] = v end
      local okp, sent = pcall(router.send_raw, router, f, true)
      if not okp or not sent then break end
      for _, v in ipairs(outq[1]) do outq_bytes = outq_bytes - #v end
      table.remove(outq, 1)
    end
    return outq[1] == nil
  end
  local function to_host(frames)
    outq[#outq + 1] = frames
    for _, v in ipairs(frames) do outq_bytes = outq_bytes + #v end
    if outq_bytes > 64 * 1048576 then
      io.stderr:write("curve-serve: more than 64 MiB wait for the host; dropping them\n")
      outq, outq_bytes = {}, 0
    end
    return flush_out()
  end
  local function close_conn(id, tell)
    local c = conns[id]
    if not c then return end
    pcall(c.sock.send_raw, c.sock, { c.rid, "" }, true)
    c.sock:close()
    conns[id] = nil
    nconns = nconns - 1
    if tell then to_host({ "close", id }) end
  end
  while true do
    local list = { router }
    local o, e = rs:fds()
    if o >= 0 then list[#list + 1] = o end
    if e >= 0 then list[#list + 1] = e end
    local ids = {}
    for id, c in pairs(conns) do list[#list + 1] = c.sock; ids[#ids + 1] = id end
    net.poll(list, 100)
    -- from the host
    local host_backlog = false
    for _, c in pairs(conns) do if c.queued > M.MAX_PENDING then host_backlog = true end end
    for _ = 1, 512 do
      if host_backlog then break end
      local f = router:recv_frames(0)
      if not f then break end
      peer, last_heard = f[1], process.now_ms()
      local op = f[2]
      if op == "in" and f[3] then
        if stdin_open then
          inbuf = inbuf .. f[3]
          if #inbuf > 4 * 1048576 then inbuf = "" end
        end
      elseif op == "eof" then
        if stdin_open then rs:close_stdin(); stdin_open = false end
      elseif op == "ping" then to_host({ "pong" })
      elseif op == "conn" and f[3] and f[4] then
        local id, path = f[3], f[4]
        local dirp, name = path:match("^(.*)/([^/]+)$")
        if conns[id] or #id > 32 then
          to_host({ "close", id })
        elseif not run_dir or dirp ~= run_dir or not plain_name(name) or nconns >= M.MAX_CONNS then
          io.stderr:write(("curve-serve: refused a connection to %s (not a socket of this sandbox)\n"):format(path:sub(1, 200)))
          to_host({ "close", id })
        else
          local s = net.raw_socket("stream", { max_bytes = M.MAX_FRAME })
          s:setopt("sndhwm", M.HWM)
          s:setopt("rcvhwm", M.HWM)
          s:setopt("connect_routing_id", "r")
          s:connect("ipc://" .. path)
          conns[id] = { sock = s, rid = "r", pending = {}, queued = 0, ready = false }
          nconns = nconns + 1
        end
      elseif op == "data" and f[3] and f[4] then
        local c = conns[f[3]]
        if c then
          if not queue(c, f[4]) then host_backlog = true end
        end
      elseif op == "close" and f[3] then
        close_conn(f[3], false)
      end
    end
    if #inbuf > 0 and stdin_open then
      local w = pipe_write(rs, inbuf)
      if not w then stdin_open = false; inbuf = "" else inbuf = inbuf:sub(w + 1) end
    end
    -- from the sandbox's sockets
    for _, id in ipairs(ids) do
      local c = conns[id]
      for _ = 1, 64 do
        if not c or not flush_out() then break end
        local g = c.sock:recv_frames(0)
        if not g then break end
        if g[2] == "" or g[2] == nil then
          if not c.ready then c.ready = true; flush(c)
          else close_conn(id, true); c = nil end
        else
          to_host({ "data", id, g[2] })
        end
      end
      if c then flush(c) end
    end
    -- remote-start's output
    for _, which in ipairs({ "out", "err" }) do
      for _ = 1, 64 do
        if not flush_out() then break end
        local d = rs:read(which)
        if not d or d == "" then break end
        if which == "out" and not run_dir then
          outbuf = outbuf .. d
          local line = outbuf:match("^([^\n]*)\n")
          if line then
            local okj, r = pcall(json.decode, line)
            if okj and type(r) == "table" and r.ready == true and type(r.run_dir) == "string" and r.run_dir:match("^/[%w._/+-]+$")
              and not r.run_dir:find("%.%.") then
              run_dir = r.run_dir
            end
            outbuf = ""
          elseif #outbuf > 65536 then outbuf = "" end
        end
        to_host({ which, d })
      end
    end
    local st = rs:poll()
    if st and not exit_code then
      for _ = 1, 10 do
        for _, which in ipairs({ "out", "err" }) do
          local d = rs:read(which)
          while d and d ~= "" do to_host({ which, d }); d = rs:read(which) end
        end
        process.sleep_ms(5)
      end
      exit_code = st.code or 1
      to_host({ "exit", tostring(exit_code) })
      rs:close()
      for id in pairs(conns) do close_conn(id, false) end
      local until_ms = process.now_ms() + 2000
      while not flush_out() and process.now_ms() < until_ms do process.sleep_ms(10) end
      process.sleep_ms(300) -- ZMQ sends what is queued (the socket's linger is 0)
      router:close()
      return exit_code == 0 and 0 or 1
    end
    local now = process.now_ms()
    if (peer and now - last_heard > M.LOST_MS) or (not peer and now - started > wait_ms) then
      io.stderr:write(peer and "curve-serve: the host went silent; ending the sandbox\n" or "curve-serve: no host connected; ending\n")
      if stdin_open then rs:close_stdin(); stdin_open = false end
      peer = nil
      started = math.huge -- once: now wait for remote-start to end
      last_heard = math.huge
    end
  end
end

---------------------------------------------------------------------------------------------
-- this side: the client, inside the Kubernetes transport process

---Connects to the Pod's tunnel and carries stdin/stdout/stderr of this process to and from
---remote-start there; serves forward requests on a local signed REP socket (`ctl`:
---{local = path, remote = path} -> {ok} or {error}), each binding a local unix socket (0600) whose
---connections are carried to the remote path. Returns the remote-start's exit code, or raises
---when the connection is lost.
---@param o {endpoint: string, server_public: string, client_public: string, client_secret: string, ctl: string, ctl_key: string, connect_timeout_s?: number, check?: fun(): string|nil, check_ms?: integer}
---@return integer
function M.client_run(o)
  local dealer = tunnel_socket("dealer")
  dealer:curve_client(o.server_public, o.client_public, o.client_secret)
  dealer:connect(o.endpoint)
  local ctl = net.socket("rep", o.ctl_key, { max_bytes = 65536 })
  os.remove((o.ctl:gsub("^ipc://", "")))
  ctl:bind(o.ctl)
  ffi.C.chmod((o.ctl:gsub("^ipc://", "")), tonumber("600", 8))
  local listeners = {} -- {sock, remote, path, rids = {rid -> id}}
  local conns, nconns, next_id = {}, 0, 0
  local last_heard, next_ping = process.now_ms(), 0
  local next_check = process.now_ms() + (o.check_ms or 2000)
  local stdin_open = true
  local heard_once = false
  -- As on the Pod side: what ZMQ cannot take now waits here, and nothing more is read from this
  -- side's sources (stdin, local connections) until it has gone.
  local outq = {}
  local function flush_out()
    while outq[1] do
      if not dealer:send_raw(outq[1], true) then break end
      table.remove(outq, 1)
    end
    return outq[1] == nil
  end
  local function send(frames)
    outq[#outq + 1] = frames
    return flush_out()
  end
  local function close_local(id)
    local c = conns[id]
    if not c then return end
    pcall(c.sock.send_raw, c.sock, { c.rid, "" }, true)
    c.listener.rids[c.rid] = nil
    conns[id] = nil
    nconns = nconns - 1
  end
  local ok, res = pcall(function()
    while true do
      local list = { dealer, ctl }
      if stdin_open then list[#list + 1] = 0 end
      for _, l in ipairs(listeners) do list[#list + 1] = l.sock end
      local ready = net.poll(list, 100)
      local stdin_ready = false
      for _, i in ipairs(ready) do if list[i] == 0 then stdin_ready = true end end
      -- forward requests from the link
      local req = ctl:recv(0)
      if req then
        local c = req.content
        local lp, rp = type(c) == "table" and c["local"], type(c) == "table" and c.remote
        local reply
        if type(lp) ~= "string" or type(rp) ~= "string" or #lp > 107 or #rp > 200 or not rp:match("^/[%w._/+-]+$") then
          reply = { status = "error", evalue = "a forward needs a local and a remote socket path" }
        else
          local okb, berr = pcall(function()
            local s = net.raw_socket("stream", { max_bytes = M.MAX_FRAME })
            s:setopt("sndhwm", M.HWM)
            s:setopt("rcvhwm", M.HWM)
            os.remove(lp)
            s:bind("ipc://" .. lp)
            ffi.C.chmod(lp, tonumber("600", 8))
            listeners[#listeners + 1] = { sock = s, remote = rp, path = lp, rids = {} }
          end)
          reply = okb and { status = "ok" } or { status = "error", evalue = tostring(berr) }
        end
        ctl:send({ header = net.header("forward_reply", "tunnel"), parent_header = req.header, metadata = {}, content = reply })
      end
      -- the link's stdin -> remote-start
      if stdin_open and stdin_ready and flush_out() then
        local d = read_fd(0, 65536)
        if d == nil then stdin_open = false; send({ "eof" })
        elseif d ~= "" then send({ "in", d }) end
      end
      -- local connections -> the Pod (only while the tunnel takes more without blocking)
      for _, l in ipairs(listeners) do
        for _ = 1, 64 do
          if not flush_out() then break end
          local g = l.sock:recv_frames(0)
          if not g then break end
          local rid, data = g[1], g[2] or ""
          local id = l.rids[rid]
          if not id then
            if data == "" and nconns < M.MAX_CONNS then
              next_id = next_id + 1
              id = tostring(next_id)
              l.rids[rid] = id
              conns[id] = { sock = l.sock, rid = rid, listener = l, pending = {}, queued = 0, ready = true }
              nconns = nconns + 1
              send({ "conn", id, l.remote })
            else
              pcall(l.sock.send_raw, l.sock, { rid, "" }, true)
            end
          elseif data == "" then
            send({ "close", id })
            l.rids[rid] = nil
            conns[id] = nil
            nconns = nconns - 1
          else
            send({ "data", id, data })
          end
        end
      end
      -- the Pod -> local connections, stdout, stderr
      local backlog = false
      for _, c in pairs(conns) do if not flush(c) then backlog = true end end
      for _ = 1, 512 do
        if backlog then break end
        local f = dealer:recv_frames(0)
        if not f then break end
        last_heard, heard_once = process.now_ms(), true
        local op = f[1]
        if op == "out" and f[2] then if not write_all(1, f[2]) then error("the link stopped reading", 0) end
        elseif op == "err" and f[2] then write_all(2, f[2])
        elseif op == "exit" then return tonumber(f[2]) or 1
        elseif op == "data" and f[2] and f[3] then
          local c = conns[f[2]]
          if c and not queue(c, f[3]) then backlog = true end
        elseif op == "close" and f[2] then close_local(f[2]) end
      end
      local now = process.now_ms()
      if now >= next_ping then next_ping = now + M.PING_MS; dealer:send_raw({ "ping" }, true) end
      if o.check and now >= next_check then
        -- the caller's own look at the far side (the kubernetes transport asks the API server
        -- whether the Pod still runs): a reason ends the tunnel at once
        next_check = now + (o.check_ms or 2000)
        local okc, why = pcall(o.check)
        if okc and why then error(why, 0) end
      end
      if heard_once and now - last_heard > M.LOST_MS then
        error(("the CURVE connection to %s was lost (nothing heard for %d s)"):format(o.endpoint, math.floor(M.LOST_MS / 1000)), 0)
      end
      if not heard_once and now - last_heard > (o.connect_timeout_s or 60) * 1000 then
        error(("no answer from %s within %d s (the Pod's tunnel is not reachable from here, or it refused this key)")
          :format(o.endpoint, o.connect_timeout_s or 60), 0)
      end
    end
  end)
  for _, l in ipairs(listeners) do l.sock:close(); os.remove(l.path) end
  ctl:close()
  os.remove((o.ctl:gsub("^ipc://", "")))
  dealer:close()
  if not ok then error(res, 0) end
  return res
end

---Asks the tunnel (its ctl socket) to forward local_path to remote_path. Returns true, or nil and why.
---@param ctl string ipc endpoint
---@param key string its key
---@param local_path string
---@param remote_path string
---@return boolean|nil, string|nil
function M.request_forward(ctl, key, local_path, remote_path)
  local s = net.socket("req", key, { max_bytes = 65536 })
  s:connect(ctl)
  s:send({ header = net.header("forward_request", net.uuid()), parent_header = {}, metadata = {},
           content = { ["local"] = local_path, remote = remote_path } })
  local r = s:recv(15000)
  s:close()
  if not r then return nil, "the tunnel did not answer" end
  if type(r.content) ~= "table" or r.content.status ~= "ok" then
    return nil, type(r.content) == "table" and tostring(r.content.evalue) or "a bad reply"
  end
  return true
end

return M
