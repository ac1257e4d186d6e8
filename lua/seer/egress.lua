--- seer.egress: network access for a sandbox by allow-list (`SandboxConfig.network = {allow =
--- {"openrouter.ai", "*.anthropic.com"}}`). The sandbox keeps its own network namespace (only
--- `lo`); two relays connect it to the world through a unix socket in its run folder:
---
---   agent code ── HTTPS_PROXY=http://127.0.0.1:3128 ──> forward (inside, a sandboxd service)
---       ── unix socket <run>/egress.sock ──> filter (on the host) ──> allowed host:port
---
--- The filter (host side) reads one proxy request per connection: `CONNECT host:port` (HTTPS,
--- end to end encrypted: the filter sees only the name) or a plain-HTTP absolute-URI request.
--- The requested host is validated strictly first (`M.host`: a DNS name of [a-z0-9-] labels,
--- a canonical dotted-quad IPv4 address, or a bracketed IPv6 literal; anything else, NUL and
--- control bytes, `%`, `@`, numeric forms such as 2130706433 or 0x7f.1, gets 400), and so is
--- the port (digits, 1-65535). That one normalized value is what is matched, resolved and
--- connected to. It connects only when the name is on the list (exact, or a subdomain for
--- "*.name"; IPv4 entries and CIDR ranges match addresses) and the port is allowed (443 and 80
--- unless the entry names ports: "host:8443"), and, for a name resolved by DNS, only when the
--- address is not internal (loopback, link-local, RFC 1918, 0/8, 100.64/10, multicast, this
--- host's own addresses) unless an IPv4/CIDR entry names it: a listed public name cannot be
--- pointed at the host's services (DNS rebinding). Everything else gets 403 and a line in the
--- log; the log is bounded (first refusals of each request, bursts of 100 lines then 5 a second,
--- hosts cut to 256 bytes and escaped, no individual lines past 16 MiB). Names are resolved by the filter,
--- never by the sandbox; `resolve` maps names to addresses (the researcher's explicit pins:
--- tests point an allowed name at loopback). The sandbox can send nothing but proxy requests: it
--- has no route of its own. Connections are capped (count, head size and time, idle time); a
--- relay's buffers are bounded (backpressure: a side is not read while the other has 1 MiB
--- pending). IPv4 only: IPv6 literals are never connected.
---@class seeregress
local M = {}

local ffi = require "ffi"
local sock = require "seer.sock"
local process = require "seer.process"

local MAX_CONNS, MAX_HEAD, HEAD_MS, IDLE_MS, MAX_PENDING = 64, 8192, 10000, 300000, 1024 * 1024
-- the log: size cap, lines a second (sustained), burst, repeats of one request, distinct
-- requests remembered, host bytes quoted
local LOG_MAX, LOG_RATE, LOG_BURST, LOG_REPEAT, LOG_KEYS, LOG_HOST = 16 * 1024 * 1024, 5, 100, 3, 4096, 256

pcall(ffi.cdef, [[
struct seer_egress_ifaddrs { struct seer_egress_ifaddrs *ifa_next; char *ifa_name; unsigned int ifa_flags;
  void *ifa_addr; void *ifa_netmask; void *ifa_ifu; void *ifa_data; };
int seer_egress_getifaddrs(struct seer_egress_ifaddrs **ifap) asm("getifaddrs");
void seer_egress_freeifaddrs(struct seer_egress_ifaddrs *ifa) asm("freeifaddrs");
]])

---Bytes as printable ASCII: at most max bytes of s, anything outside 0x20-0x7e (and `\`) as \xHH.
local function escape(s, max)
  s = tostring(s)
  local cut = max and #s > max
  local t = (cut and s:sub(1, max) or s):gsub("[%z\1-\31\\\127-\255]", function(c) return ("\\x%02x"):format(c:byte()) end)
  if cut then t = t .. ("...(%d bytes)"):format(#s) end
  return t
end
M.escape = escape

local function describe_byte(c)
  if c == "\0" then return "a NUL byte" end
  if c:byte() < 32 or c:byte() > 126 then return ("the byte 0x%02x"):format(c:byte()) end
  return ("%q"):format(c)
end

---A canonical dotted-quad IPv4 address (four decimal parts 0-255, no leading zeros), or nil.
local function ipv4(s)
  local a, b, c, d = s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  if not a then return nil end
  local n = 0
  for _, x in ipairs({ a, b, c, d }) do
    if #x > 3 or (#x > 1 and x:sub(1, 1) == "0") or tonumber(x) > 255 then return nil end
    n = n * 256 + tonumber(x)
  end
  return s, n
end

---Validates and normalizes a requested host: a DNS name (labels of [A-Za-z0-9-], 1-63 bytes, no
---hyphen at either end, 253 bytes in all, one trailing dot dropped, lower-cased), a canonical
---dotted-quad IPv4 address, or a bracketed IPv6 literal (canonical form, brackets kept). Returns
---host, kind ("name"|"ipv4"|"ipv6"), or nil and the reason.
---@return string|nil host, string kind_or_reason
function M.host(s)
  if type(s) ~= "string" then return nil, "not a string" end
  if s == "" then return nil, "empty" end
  if #s > 300 then return nil, ("%d bytes long (a name has at most 253)"):format(#s) end
  local bad = s:match("[^A-Za-z0-9%.%-%[%]:]")
  if bad then return nil, ("contains %s (a host is a DNS name, an IPv4 address a.b.c.d or [IPv6])"):format(describe_byte(bad)) end
  if s:sub(1, 1) == "[" then
    local inner = s:match("^%[([%x:%.]+)%]$")
    if not inner then return nil, "not a bracketed IPv6 literal" end
    local b = ffi.new("unsigned char[16]")
    if ffi.C.inet_pton(10, inner, b) ~= 1 then return nil, "not a valid IPv6 address" end
    local zero10 = true
    for i = 0, 9 do if b[i] ~= 0 then zero10 = false end end
    local nat64 = b[0] == 0 and b[1] == 0x64 and b[2] == 0xff and b[3] == 0x9b
    for i = 4, 11 do if b[i] ~= 0 then nat64 = false end end
    if (zero10 and ((b[10] == 0xff and b[11] == 0xff) or (b[10] == 0 and b[11] == 0 and (b[12] ~= 0 or b[13] ~= 0)))) or nat64 then
      return nil, "an IPv6 address embedding an IPv4 one (IPv4-mapped or similar): use the IPv4 address"
    end
    local buf = ffi.new("char[64]")
    ffi.C.inet_ntop(10, b, buf, 64)
    return "[" .. ffi.string(buf) .. "]", "ipv6"
  end
  if s:find("[%[%]:]") then return nil, "contains ':' or brackets outside an [IPv6] literal" end
  s = s:lower():gsub("%.$", "")
  if s == "" then return nil, "empty" end
  if #s > 253 then return nil, ("%d bytes long (a name has at most 253)"):format(#s) end
  local last
  for label in (s .. "."):gmatch("([^%.]*)%.") do
    if label == "" then return nil, "has an empty label (\"..\" or a leading dot)" end
    if #label > 63 then return nil, "has a label longer than 63 bytes" end
    if label:sub(1, 1) == "-" or label:sub(-1) == "-" then return nil, "has a label starting or ending with '-'" end
    last = label
  end
  -- A numeric last label is an address, never a name (no top-level domain is numeric): only the
  -- canonical a.b.c.d form is accepted, not what inet_aton also reads (2130706433, 127.1,
  -- 0x7f.0.0.1, 017.0.0.1).
  if last:match("^%d+$") or last:match("^0x%x*$") then
    if ipv4(s) then return s, "ipv4" end
    return nil, "is not a canonical IPv4 address (write a.b.c.d in decimal, no leading zeros)"
  end
  return s, "name"
end

---Validates a port: 1-5 decimal digits, 1-65535. Returns the number, or nil and the reason.
function M.port(s)
  if type(s) == "number" then s = tostring(s) end
  if type(s) ~= "string" or not s:match("^%d%d?%d?%d?%d?$") or tonumber(s) < 1 or tonumber(s) > 65535 then
    return nil, "the port must be a number from 1 to 65535"
  end
  return tonumber(s)
end

-- Address ranges a resolved name may not point at unless the allow-list names the address.
local INTERNAL = {
  { "0.0.0.0", 8, "\"this network\"" }, { "10.0.0.0", 8, "private (RFC 1918)" }, { "100.64.0.0", 10, "shared (RFC 6598)" },
  { "127.0.0.0", 8, "loopback" }, { "169.254.0.0", 16, "link-local" }, { "172.16.0.0", 12, "private (RFC 1918)" },
  { "192.168.0.0", 16, "private (RFC 1918)" }, { "224.0.0.0", 4, "multicast" }, { "240.0.0.0", 4, "reserved" },
}
for _, r in ipairs(INTERNAL) do local _, n = ipv4(r[1]); r.net = n end

local function in_range(n, net, bits) local d = 2 ^ (32 - bits) return math.floor(n / d) == math.floor(net / d) end

local own_cache, own_t = nil, -1e9
-- This host's own IPv4 addresses (getifaddrs), refreshed every 10 s.
local function own_addresses()
  local now = process.now_ms()
  if own_cache and now - own_t < 10000 then return own_cache end
  local set = {}
  local p = ffi.new("struct seer_egress_ifaddrs *[1]")
  if ffi.C.seer_egress_getifaddrs(p) == 0 then
    local it = p[0]
    while it ~= nil do
      if it.ifa_addr ~= nil and ffi.cast("unsigned short *", it.ifa_addr)[0] == 2 then
        local b = ffi.cast("unsigned char *", it.ifa_addr) + 4
        set[("%d.%d.%d.%d"):format(b[0], b[1], b[2], b[3])] = true
      end
      it = it.ifa_next
    end
    ffi.C.seer_egress_freeifaddrs(p[0])
  end
  own_cache, own_t = set, now
  return set
end

---What kind of internal address a canonical IPv4 address is ("loopback", ...), or nil when public.
function M.internal(ip)
  local _, n = ipv4(ip)
  if not n then return "not an IPv4 address" end
  for _, r in ipairs(INTERNAL) do if in_range(n, r.net, r[2]) then return r[3] end end
  if own_addresses()[ip] then return "this host's own" end
  return nil
end

local function bad_entry(i, e, why)
  error(("network.allow[%d] = %s is not a host name%s (examples: \"openrouter.ai\", \"*.anthropic.com\", \"host:8443\", \"10.0.0.5\", \"10.1.0.0/16:8080\")")
    :format(i, ("%q"):format(escape(e, LOG_HOST)), why and (": " .. why) or ""), 4)
end

---Parses and checks an allow-list; returns a matcher fn(host, port) -> ok (the host is validated
---and normalized with M.host first: anything malformed never matches), and ip_ok(ip, port) ->
---ok, true when an IPv4 or CIDR entry names that address; or raises naming the bad entry.
---Entries: "name", "*.name" (subdomains of name at any depth, not name itself), "a.b.c.d",
---"a.b.c.d/bits", each optionally with ":port" (default: 443 and 80).
---@param list string[]
---@return fun(host: string, port: integer): boolean, fun(ip: string, port: integer): boolean
function M.matcher(list)
  if type(list) ~= "table" or #list == 0 then error("network.allow must be a non-empty list of host names", 3) end
  local rules = {}
  for i, e in ipairs(list) do
    if type(e) ~= "string" then error(("network.allow[%d] must be a string"):format(i), 3) end
    local spec, port = e, nil
    local h, ps = e:match("^([^:]*):([^:]*)$")
    if h then
      spec = h
      local why
      port, why = M.port(ps)
      if not port then bad_entry(i, e, why) end
    elseif e:find(":") then bad_entry(i, e, "IPv6 entries are not supported (the proxy connects over IPv4)") end
    local r = { port = port }
    local net, bits = spec:match("^(.*)/(%d%d?)$")
    if net then
      local ok, n = ipv4(net)
      if not ok or tonumber(bits) > 32 then bad_entry(i, e, "a range is a.b.c.d/0-32") end
      r.kind, r.net, r.bits = "ip", n, tonumber(bits)
    else
      local wild = spec:match("^%*%.(.*)$")
      local name, kind = M.host(wild or spec)
      if not name then bad_entry(i, e, kind) end
      if kind == "ipv6" then bad_entry(i, e, "IPv6 entries are not supported (the proxy connects over IPv4)") end
      if kind == "ipv4" then
        if wild then bad_entry(i, e, "\"*.\" goes with a name, not an address") end
        local _, n = ipv4(name)
        r.kind, r.net, r.bits = "ip", n, 32
      else
        r.kind, r.name, r.wild = wild and "wild" or "name", name, wild ~= nil
      end
    end
    rules[#rules + 1] = r
  end
  local function port_ok(r, p) return (r.port and p == r.port) or (not r.port and (p == 443 or p == 80)) end
  local function ip_ok(ip, p)
    local _, n = ipv4(ip)
    if not n then return false end
    for _, r in ipairs(rules) do
      if r.kind == "ip" and in_range(n, r.net, r.bits) and port_ok(r, p) then return true end
    end
    return false
  end
  return function(h, p)
    local host, kind = M.host(h)
    if not host or type(p) ~= "number" or p ~= math.floor(p) or p < 1 or p > 65535 then return false end
    if kind == "ipv4" then return ip_ok(host, p) end
    if kind ~= "name" then return false end
    for _, r in ipairs(rules) do
      local name_ok = (r.kind == "name" and host == r.name)
        or (r.kind == "wild" and #host > #r.name + 1 and host:sub(-(#r.name + 1)) == "." .. r.name)
      if name_ok and port_ok(r, p) then return true end
    end
    return false
  end, ip_ok
end

-- The log, bounded: the first LOG_REPEAT lines of each request (key), at most LOG_BURST lines at
-- once and LOG_RATE a second after that (a token bucket), and no individual lines past max bytes
-- (then one summary line a minute at most, up to 64 KiB more). Lines not written are counted and
-- the count added to the next line written (at most once a second).
local function logger(path, max)
  if not path then return function() end end
  max = max or LOG_MAX
  local size = 0
  local f0 = io.open(path, "rb")
  if f0 then size = f0:seek("end") or 0 f0:close() end
  local seen, nseen, tokens, t_tokens, suppressed, last_note = {}, 0, LOG_BURST, process.now_ms(), 0, -1e9
  local capped, extra, last_summary, counts, since = false, 0, -1e9, { allowed = 0, refused = 0, failed = 0 }, 0
  local function write(msg)
    local line = os.date("!%Y-%m-%dT%H:%M:%SZ ") .. msg .. "\n"
    local f = io.open(path, "ab")
    if f then f:write(line) f:close() end
    return #line
  end
  return function(kind, key, msg)
    counts[kind] = (counts[kind] or 0) + 1
    local now = process.now_ms()
    if capped then
      since = since + 1
      if now - last_summary >= 60000 and extra < 65536 then
        last_summary = now
        extra = extra + write(("summary: %d allowed, %d refused, %d failed so far; %d events since egress.log reached its cap (%d bytes)")
          :format(counts.allowed, counts.refused, counts.failed, since, max))
      end
      return
    end
    if key then
      local n = seen[key]
      if not n then
        nseen = nseen + 1
        if nseen > LOG_KEYS then seen, nseen = {}, 1 end
      end
      seen[key] = (n or 0) + 1
      if seen[key] > LOG_REPEAT then suppressed = suppressed + 1 return end
    end
    tokens, t_tokens = math.min(LOG_BURST, tokens + (now - t_tokens) * LOG_RATE / 1000), now
    if tokens < 1 then suppressed = suppressed + 1 return end
    tokens = tokens - 1
    if suppressed > 0 and now - last_note >= 1000 then
      msg = msg .. (" (and %d lines not written before it: repeats of a request after its first %d, or over %d lines a second)")
        :format(suppressed, LOG_REPEAT, LOG_RATE)
      suppressed, last_note = 0, now
    end
    if size + #msg + 200 > max then
      capped, last_summary = true, now
      size = size + write(("egress.log reached its cap (%d bytes): no further individual lines; a summary a minute at most; the filter still refuses what is not allowed"):format(max))
      return
    end
    size = size + write(msg)
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
      -- a side that ended is not read again (what it sent still goes on)
      list[#list + 1] = { p.a, bit.bor(#p.pb < MAX_PENDING and not p.eof_a and sock.POLLIN or 0, #p.pa > 0 and sock.POLLOUT or 0) }
      list[#list + 1] = { p.b, bit.bor(#p.pa < MAX_PENDING and not p.eof_b and sock.POLLIN or 0, #p.pb > 0 and sock.POLLOUT or 0) }
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
      -- The end of one side's stream is passed on once what it sent has gone: a server that
      -- closes right after its response (Connection: close) had the pending tail of that
      -- response cut off when both sides were closed at once.
      local function pump(from, r, into, eof)
        if not p[eof] and bit.band(r, bit.bor(sock.POLLIN, sock.POLLHUP, sock.POLLERR)) ~= 0 then
          local got = sock.recv(from)
          if got == "" then p[eof] = true elseif got then p[into] = p[into] .. got; p.t = now end
        end
      end
      pump(p.a, ra, "pb", "eof_a")
      pump(p.b, rb, "pa", "eof_b")
      -- Non-blocking: what a socket does not take now stays pending (and stops reading the
      -- other side past MAX_PENDING), so one slow peer never stalls the others.
      for _, side in ipairs({ { p.a, "pa" }, { p.b, "pb" } }) do
        if #p[side[2]] > 0 then
          local n = sock.send_some(side[1], p[side[2]])
          if not n then closed = true else p[side[2]] = p[side[2]]:sub(n + 1) end
        end
      end
      -- the client ended its side: the server gets the end once the request has gone
      if p.eof_a and not p.shut_b and #p.pb == 0 then sock.shutdown_write(p.b); p.shut_b = true end
      -- the server ended: done once all of its answer reached the client
      if p.eof_b and #p.pa == 0 then closed = true end
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

-- Splits a proxy request target into raw host and port strings (not yet validated) and, for
-- plain HTTP, the origin-form rest ("/path?query"); or nil and the reason.
local function split_target(method, target)
  local authority, rest
  if method == "CONNECT" then
    authority = target
  else
    authority = target:match("^[hH][tT][tT][pP]://([^/]*)")
    if not authority then return nil, "CONNECT host:port or an http:// URL was expected" end
    rest = target:sub(#"http://" + #authority + 1)
    if rest == "" then rest = "/" end
    if rest:sub(1, 1) ~= "/" then return nil, "the URL's path must start with '/'" end
  end
  local host, port
  if authority:sub(1, 1) == "[" then
    host, port = authority:match("^(%[[^%]]*%])(.*)$")
    if not host then return nil, "an unterminated [IPv6] literal" end
  else
    host, port = authority:match("^([^:]*)(.*)$")
  end
  if port == "" then
    if method == "CONNECT" then return nil, "CONNECT needs host:port" end
    port = ":80"
  end
  if port:sub(1, 1) ~= ":" then return nil, "unexpected bytes after the host" end
  return host, port:sub(2), rest
end

---The host-side filter: accepts proxy requests on a unix socket and connects allowed ones.
---@param opts {socket: string, allow: string[], log?: string, log_max?: integer, resolve?: table<string, string>, stop?: fun(): boolean, on_ready?: fun()}
function M.filter(opts)
  local allowed, ip_ok = M.matcher(opts.allow)
  -- the researcher's pins, by normalized name: the address they name is trusted as listed
  local pins = {}
  for name, ip in pairs(opts.resolve or {}) do
    local h = M.host(name)
    if not h or not ipv4(tostring(ip)) then
      error(("egress filter: network.resolve maps host names to IPv4 addresses a.b.c.d, not %s = %s")
        :format(escape(name, LOG_HOST), escape(ip, LOG_HOST)), 2)
    end
    pins[h] = ip
  end
  local log = logger(opts.log, opts.log_max)
  local lfd, err = sock.listen_unix(opts.socket)
  if not lfd then error("egress filter: " .. err, 2) end
  if opts.on_ready then opts.on_ready() end
  local function on_accept(fd, head)
    local first = head:match("^([^\r\n]*)")
    local method, target = first:match("^(%u+) (%S+) HTTP/1%.[01]$")
    if not method then
      log("refused", "not a proxy request", "refused: not a proxy request")
      reply(fd, "400 Bad Request", "seer sandbox: a proxy request was expected\n")
      return
    end
    local function refuse(status, what, why, key)
      log("refused", key or (method .. " " .. what), ("refused %s %s: %s"):format(method, what, why))
      reply(fd, status, ("seer sandbox: %s %s\n"):format(what, why))
    end
    local rhost, rport, rest = split_target(method, target)
    if not rhost then return refuse("400 Bad Request", escape(target, LOG_HOST), rport) end
    local host, kind = M.host(rhost)
    if not host then return refuse("400 Bad Request", "host " .. escape(rhost, LOG_HOST), kind) end
    local port, perr = M.port(rport)
    if not port then return refuse("400 Bad Request", ("%s:%s"):format(host, escape(rport, 16)), perr) end
    if rest and rest:find("[%z\1-\31\127]") then return refuse("400 Bad Request", ("%s:%d"):format(host, port), "the URL contains control bytes") end
    -- from here on `host` (normalized) is the one value matched, resolved and connected to
    local hp = ("%s:%d"):format(host, port)
    if not allowed(host, port) then
      local why = kind == "ipv6" and "not in network.allow; IPv6 literals are not supported (IPv4 only)" or "not in network.allow"
      log("refused", method .. " " .. hp, ("refused %s %s (%s)"):format(method, hp, why))
      reply(fd, "403 Forbidden", ("seer sandbox: %s is not in SandboxConfig.network.allow%s\n")
        :format(hp, kind == "ipv6" and " (IPv6 literals are not supported: IPv4 only)" or ""))
      return
    end
    local ip = kind == "ipv4" and host or pins[host]
    if not ip then
      local why
      ip, why = sock.resolve(host)
      if not ip then
        log("failed", "resolve " .. host, "failed " .. host .. ": " .. escape(why, 512))
        reply(fd, "502 Bad Gateway", escape(why, 512) .. "\n")
        return
      end
      -- a listed name resolved by DNS may not lead to the host's own or internal services
      -- (DNS rebinding) unless the allow-list names that address or its range
      local internal = M.internal(ip)
      if internal and not ip_ok(ip, port) then
        return refuse("403 Forbidden", hp, ("resolves to %s, a %s address; list that address (\"%s:%d\") or its range in network.allow to allow it")
          :format(ip, internal, ip, port))
      end
    end
    local up, cerr = sock.connect_tcp(ip, port, 10000)
    if not up then
      log("failed", "connect " .. hp, ("failed %s: %s"):format(hp, escape(cerr, 512)))
      reply(fd, "502 Bad Gateway", escape(cerr, 512) .. "\n")
      return
    end
    log("allowed", nil, ("allowed %s %s%s"):format(method, hp, ip ~= host and (" (" .. ip .. ")") or ""))
    local p = { a = fd, b = up, pa = "", pb = "" }
    if method == "CONNECT" then
      p.pa = "HTTP/1.1 200 Connection established\r\n\r\n"
      -- bytes the client sent after its CONNECT head (a TLS hello sent early) go upstream
      p.pb = head:match("\r\n\r\n(.*)$") or ""
    else
      -- origin-form request line for the server; the head's fields checked and rewritten: the
      -- Host field must name the URL's host (a Host for another site reached the allowed
      -- server's virtual hosts), and the connection closes after this one request (a keep-alive
      -- second request for another host went to the same server unchecked)
      local fields, body = head:sub(#first + 1):match("^(.-\r\n)\r\n(.*)$")
      if not fields then fields, body = "\r\n", "" end
      local out = { method .. " " .. rest .. " HTTP/1.1" }
      local want = host .. ":" .. port
      for line in fields:gmatch("\r\n([^\r\n]*)") do
        local k, v = line:match("^([^:%s]+):[ \t]*(.-)[ \t]*$")
        local lk = k and k:lower()
        if lk == "host" then
          local hv = v:lower():gsub("%.?:", ":"):gsub("%.$", "")
          if hv ~= want and not (port == 80 and hv == host) then
            sock.close(up)
            return refuse("400 Bad Request", hp, ("the Host field names %s, the URL names %s; they must agree")
              :format(escape(v, LOG_HOST), hp))
          end
        elseif lk ~= "connection" and lk ~= "proxy-connection" and lk ~= "keep-alive" and k then
          out[#out + 1] = line
        end
      end
      out[#out + 1] = "Host: " .. (port == 80 and host or want)
      out[#out + 1] = "Connection: close"
      p.pb = table.concat(out, "\r\n") .. "\r\n\r\n" .. body
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
