--- seer.egress: network access for a sandbox by allow-list (`SandboxConfig.network = {allow =
--- {"openrouter.ai", "*.anthropic.com"}}`). The sandbox keeps its own network namespace (only
--- `lo`); two relays connect it to the world through a unix socket in its run folder:
---
---   agent code ── HTTPS_PROXY=http://127.0.0.1:3128 ──> forward (inside, a sandboxd service)
---       ── unix socket <run>/egress.sock ──> filter (on the host) ──> allowed host:port
---
--- The filter (host side) reads one proxy request per connection: `CONNECT host:port` (HTTPS,
--- end to end encrypted: the filter sees only the name) or a plain-HTTP absolute-URI request, and
--- connects only when the name is on the list (exact, or a subdomain for "*.name") and the port
--- is allowed (443 and 80 unless the entry names ports: "host:8443"). Everything else gets 403
--- and a line in the log. Names are resolved by the filter, never by the sandbox; `resolve`
--- maps names to addresses (tests point an allowed name at loopback). The sandbox can send
--- nothing but proxy requests: it has no route of its own. Connections are capped (count, head
--- size and time, idle time); a relay's buffers are bounded (backpressure: a side is not read
--- while the other has 1 MiB pending).
---@class seeregress
local M = {}

local sock = require "seer.sock"
local process = require "seer.process"

local MAX_CONNS, MAX_HEAD, HEAD_MS, IDLE_MS, MAX_PENDING = 64, 8192, 10000, 300000, 1024 * 1024

---Parses and checks an allow-list; returns a matcher fn(host, port) -> ok, or raises naming the bad entry.
---@param list string[]
---@return fun(host: string, port: integer): boolean
function M.matcher(list)
  if type(list) ~= "table" or #list == 0 then error("network.allow must be a non-empty list of host names", 3) end
  local rules = {}
  for i, e in ipairs(list) do
    if type(e) ~= "string" then error(("network.allow[%d] must be a string"):format(i), 3) end
    local host, port = e:lower():match("^([%w%.%-%*]+):(%d+)$")
    if not host then host = e:lower() end
    local wild = host:match("^%*%.(.+)$")
    local name = wild or host
    if not name:match("^[%w%-]+[%w%.%-]*$") or name:find("%.%.") or name:find("%*") then
      error(("network.allow[%d] = %q is not a host name (examples: \"openrouter.ai\", \"*.anthropic.com\", \"host:8443\")"):format(i, e), 3)
    end
    rules[#rules + 1] = { name = name, wild = wild ~= nil, port = tonumber(port) }
  end
  return function(h, p)
    h = h:lower():gsub("%.$", "")
    for _, r in ipairs(rules) do
      local name_ok = (not r.wild and h == r.name) or (r.wild and h:sub(-(#r.name + 1)) == "." .. r.name)
      local port_ok = r.port and p == r.port or (not r.port and (p == 443 or p == 80))
      if name_ok and port_ok then return true end
    end
    return false
  end
end

local function log_line(log, msg)
  if not log then return end
  local f = io.open(log, "ab")
  if f then
    f:write(os.date("!%Y-%m-%dT%H:%M:%SZ "), msg, "\n")
    f:close()
  end
end

-- A relay loop over connection pairs: each pair {a, b, pa = pending for a, pb = pending for b,
-- t = last activity}. `on_new(fd)` turns an accepted fd into a pair (or closes it).
local function run_loop(listen_fd, on_accept, should_stop)
  local pairs_ = {}
  local heads = {} -- accepted connections still sending their request head: {fd, data, t0}
  while not should_stop() do
    local list = { { listen_fd, sock.POLLIN } }
    for _, h in ipairs(heads) do list[#list + 1] = { h.fd, sock.POLLIN } end
    for _, p in ipairs(pairs_) do
      list[#list + 1] = { p.a, bit.bor(#p.pb < MAX_PENDING and sock.POLLIN or 0, #p.pa > 0 and sock.POLLOUT or 0) }
      list[#list + 1] = { p.b, bit.bor(#p.pa < MAX_PENDING and sock.POLLIN or 0, #p.pb > 0 and sock.POLLOUT or 0) }
    end
    local rev = sock.poll(list, 500)
    local now = process.now_ms()
    -- Connections accepted or paired in this round join the lists after it (their poll results
    -- come next round).
    local new_heads, new_pairs = {}, {}
    if bit.band(rev[1], sock.POLLIN) ~= 0 then
      local c = sock.accept(listen_fd)
      if c then
        if #heads + #pairs_ >= MAX_CONNS then sock.close(c)
        else new_heads[1] = { fd = c, data = "", t0 = now } end
      end
    end
    local k = 2
    local keep = {}
    for _, h in ipairs(heads) do
      local r = rev[k]; k = k + 1
      local done = false
      if bit.band(r, bit.bor(sock.POLLIN, sock.POLLHUP, sock.POLLERR)) ~= 0 then
        local got = sock.recv(h.fd, MAX_HEAD)
        if got == "" then sock.close(h.fd); done = true
        elseif got then h.data = h.data .. got end
      end
      if not done then
        if h.data:find("\r\n\r\n", 1, true) or #h.data > MAX_HEAD or now - h.t0 > HEAD_MS then
          local p = on_accept(h.fd, h.data)
          if p then p.t = now; new_pairs[#new_pairs + 1] = p end
        else keep[#keep + 1] = h end
      end
    end
    for _, h in ipairs(new_heads) do keep[#keep + 1] = h end
    heads = keep
    local alive = {}
    for _, p in ipairs(pairs_) do
      local ra, rb = rev[k], rev[k + 1]
      k = k + 2
      local closed = false
      local function pump(from, r, into)
        if bit.band(r, bit.bor(sock.POLLIN, sock.POLLHUP, sock.POLLERR)) ~= 0 then
          local got = sock.recv(from)
          if got == "" then closed = true elseif got then p[into] = p[into] .. got; p.t = now end
        end
      end
      pump(p.a, ra, "pb")
      pump(p.b, rb, "pa")
      -- Non-blocking: what a socket does not take now stays pending (and stops reading the
      -- other side past MAX_PENDING), so one slow peer never stalls the others.
      for _, side in ipairs({ { p.a, "pa" }, { p.b, "pb" } }) do
        if #p[side[2]] > 0 then
          local n = sock.send_some(side[1], p[side[2]])
          if not n then closed = true else p[side[2]] = p[side[2]]:sub(n + 1) end
        end
      end
      if closed or now - p.t > IDLE_MS then sock.close(p.a); sock.close(p.b)
      else alive[#alive + 1] = p end
    end
    for _, p in ipairs(new_pairs) do alive[#alive + 1] = p end
    pairs_ = alive
  end
  for _, h in ipairs(heads) do sock.close(h.fd) end
  for _, p in ipairs(pairs_) do sock.close(p.a); sock.close(p.b) end
end

local function reply(fd, status, text)
  sock.send_all(fd, ("HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s")
    :format(status, #text, text), 2000)
  sock.close(fd)
end

---The host-side filter: accepts proxy requests on a unix socket and connects allowed ones.
---@param opts {socket: string, allow: string[], log?: string, resolve?: table<string, string>, stop?: fun(): boolean, on_ready?: fun()}
function M.filter(opts)
  local allowed = M.matcher(opts.allow)
  local lfd, err = sock.listen_unix(opts.socket)
  if not lfd then error("egress filter: " .. err, 2) end
  if opts.on_ready then opts.on_ready() end
  local function on_accept(fd, head)
    local first = head:match("^([^\r\n]*)")
    local method, target = first:match("^(%u+) (%S+) HTTP/1%.[01]$")
    if not method then reply(fd, "400 Bad Request", "a proxy request was expected\n") log_line(opts.log, "refused: not a proxy request") return end
    local host, port, rest
    if method == "CONNECT" then
      host, port = target:match("^%[?([^%]]+)%]?:(%d+)$")
    else
      local h = target:match("^http://([^/]+)")
      if h then
        host, port = h:match("^([^:]+):(%d+)$")
        if not host then host, port = h, "80" end
        rest = target:match("^http://[^/]+(/.*)$") or "/"
      end
    end
    port = tonumber(port)
    if not host or not port then reply(fd, "400 Bad Request", "CONNECT host:port or an http:// URL was expected\n") return end
    if not allowed(host, port) then
      log_line(opts.log, ("refused %s %s:%d (not in network.allow)"):format(method, host, port))
      reply(fd, "403 Forbidden", ("seer sandbox: %s:%d is not in SandboxConfig.network.allow\n"):format(host, port))
      return
    end
    local ip = opts.resolve and opts.resolve[host:lower()] or nil
    if not ip then
      local why
      ip, why = sock.resolve(host)
      if not ip then reply(fd, "502 Bad Gateway", why .. "\n") log_line(opts.log, "failed " .. host .. ": " .. why) return end
    end
    local up, cerr = sock.connect_tcp(ip, port, 10000)
    if not up then reply(fd, "502 Bad Gateway", cerr .. "\n") log_line(opts.log, ("failed %s:%d: %s"):format(host, port, cerr)) return end
    log_line(opts.log, ("allowed %s %s:%d"):format(method, host, port))
    local p = { a = fd, b = up, pa = "", pb = "" }
    if method == "CONNECT" then
      p.pa = "HTTP/1.1 200 Connection established\r\n\r\n"
      -- bytes the client sent after its CONNECT head (a TLS hello sent early) go upstream
      p.pb = head:match("\r\n\r\n(.*)$") or ""
    else
      -- origin-form request line for the server; the rest of the head and any body as sent
      p.pb = method .. " " .. rest .. " HTTP/1.1" .. head:sub(#first + 1)
    end
    return p
  end
  run_loop(lfd, on_accept, opts.stop or function() return false end)
  sock.close(lfd)
end

---The in-sandbox forwarder: a TCP listener on 127.0.0.1:port whose connections are relayed to
---the filter's unix socket, byte for byte.
---@param opts {port: integer, socket: string, stop?: fun(): boolean, on_ready?: fun(port: integer)}
function M.forward(opts)
  local lfd, port = sock.listen_tcp("127.0.0.1", opts.port or 0)
  if not lfd then error("egress forward: " .. tostring(port), 2) end
  if opts.on_ready then opts.on_ready(port) end
  run_loop(lfd, function(fd, head)
    local up = sock.connect_unix(opts.socket, 5000)
    if not up then reply(fd, "502 Bad Gateway", "the sandbox's egress filter is not running\n") return end
    return { a = fd, b = up, pa = "", pb = head }
  end, opts.stop or function() return false end)
  sock.close(lfd)
end

return M
