--- seer.sock: the few plain-socket calls seer's small servers need (seer serve, the sandbox
--- egress proxy): TCP and unix listeners, connects with a timeout, poll, bounded sends. IPv4
--- only. Every fd is close-on-exec and non-blocking; errors come back as (nil, message).
local ffi = require "ffi"
require "seer.process" -- declares struct seer_pollfd and poll()

local M = {}

pcall(ffi.cdef, [[
struct seer_sockaddr_in { unsigned short sin_family; unsigned short sin_port; unsigned int sin_addr; char zero[8]; };
struct seer_sockaddr_un { unsigned short sun_family; char sun_path[108]; };
int socket(int domain, int type, int protocol);
int bind(int fd, const void *addr, unsigned int len);
int listen(int fd, int backlog);
int accept4(int fd, void *addr, unsigned int *len, int flags);
int connect(int fd, const void *addr, unsigned int len);
int getsockname(int fd, void *addr, unsigned int *len);
int getsockopt(int fd, int level, int name, void *val, unsigned int *len);
int setsockopt(int fd, int level, int name, const void *val, unsigned int len);
long recv(int fd, void *buf, size_t n, int flags);
long send(int fd, const void *buf, size_t n, int flags);
int close(int fd);
int shutdown(int fd, int how);
int inet_pton(int af, const char *src, void *dst);
const char *inet_ntop(int af, const void *src, char *dst, unsigned int size);
unsigned short htons(unsigned short x);
unsigned short ntohs(unsigned short x);
char *strerror(int errnum);
]])
pcall(ffi.cdef, [[
struct seer_sock_addrinfo { int ai_flags, ai_family, ai_socktype, ai_protocol; unsigned int ai_addrlen;
  void *ai_addr; char *ai_canonname; struct seer_sock_addrinfo *ai_next; };
int seer_sock_getaddrinfo(const char *node, const char *service, const struct seer_sock_addrinfo *hints,
                          struct seer_sock_addrinfo **res) asm("getaddrinfo");
void seer_sock_freeaddrinfo(struct seer_sock_addrinfo *res) asm("freeaddrinfo");
]])
local C = ffi.C

local AF_UNIX, AF_INET, SOCK_STREAM, SOCK_CLOEXEC, SOCK_NONBLOCK = 1, 2, 1, 0x80000, 0x800
local SOL_SOCKET, SO_REUSEADDR, SO_ERROR = 1, 2, 4
M.POLLIN, M.POLLOUT, M.POLLERR, M.POLLHUP = 1, 4, 8, 16
local MSG_NOSIGNAL = 0x4000
local EAGAIN, EINPROGRESS = 11, 115

local function errmsg(what)
  local e = ffi.errno()
  return ("%s: %s"):format(what, ffi.string(C.strerror(e))), e
end

local function new_socket(family)
  local fd = C.socket(family, bit.bor(SOCK_STREAM, SOCK_CLOEXEC, SOCK_NONBLOCK), 0)
  if fd < 0 then return nil, errmsg("socket") end
  return fd
end

-- C stops a string at its first NUL: "127.0.0.1\0.example.com" would reach 127.0.0.1. Every
-- host, address and path handed to C goes through this first.
local function nul_free(s)
  return type(s) == "string" and not s:find("%z")
end

local function inet(host, port)
  if not nul_free(host) then return nil end
  local sa = ffi.new("struct seer_sockaddr_in")
  sa.sin_family = AF_INET
  sa.sin_port = C.htons(port)
  if C.inet_pton(AF_INET, host, ffi.cast("char *", sa) + 4) ~= 1 then return nil end
  return sa
end

---A listening TCP socket on host:port (port 0: any free one). Returns fd, port.
---@return integer|nil fd, integer|string port_or_error
function M.listen_tcp(host, port, backlog)
  local sa = inet(host, port or 0)
  if not sa then return nil, ("%s is not an IPv4 address"):format(host) end
  local fd, err = new_socket(AF_INET)
  if not fd then return nil, err end
  local one = ffi.new("int[1]", 1)
  C.setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, one, 4)
  if C.bind(fd, sa, ffi.sizeof(sa)) ~= 0 or C.listen(fd, backlog or 64) ~= 0 then
    local m = errmsg(("listen on %s:%d"):format(host, port or 0))
    C.close(fd)
    return nil, m
  end
  local len = ffi.new("unsigned int[1]", ffi.sizeof(sa))
  C.getsockname(fd, sa, len)
  return fd, C.ntohs(sa.sin_port)
end

local function unix_addr(path)
  if not nul_free(path) or #path >= 108 then return nil end
  local sa = ffi.new("struct seer_sockaddr_un")
  sa.sun_family = AF_UNIX
  ffi.copy(sa.sun_path, path)
  return sa
end

---A listening unix socket at path (which must not exist).
function M.listen_unix(path, backlog)
  local sa = unix_addr(path)
  if not sa then return nil, "socket path too long (108 bytes): " .. path end
  local fd, err = new_socket(AF_UNIX)
  if not fd then return nil, err end
  if C.bind(fd, sa, ffi.sizeof(sa)) ~= 0 or C.listen(fd, backlog or 64) ~= 0 then
    local m = errmsg("listen on " .. path)
    C.close(fd)
    return nil, m
  end
  return fd
end

local function finish_connect(fd, what, timeout_ms)
  if not M.wait(fd, M.POLLOUT, timeout_ms) then C.close(fd) return nil, what .. ": timed out" end
  local e, len = ffi.new("int[1]"), ffi.new("unsigned int[1]", 4)
  C.getsockopt(fd, SOL_SOCKET, SO_ERROR, e, len)
  if e[0] ~= 0 then
    C.close(fd)
    return nil, ("%s: %s"):format(what, ffi.string(C.strerror(e[0])))
  end
  return fd
end

---Connects to ip:port (an IPv4 address) within timeout_ms.
function M.connect_tcp(ip, port, timeout_ms)
  if not nul_free(ip) then return nil, "connect: the address is not a string or contains a NUL byte" end
  local sa = inet(ip, port)
  if not sa then return nil, ip .. " is not an IPv4 address" end
  local fd, err = new_socket(AF_INET)
  if not fd then return nil, err end
  if C.connect(fd, sa, ffi.sizeof(sa)) ~= 0 and ffi.errno() ~= EINPROGRESS then
    local m = errmsg(("connect %s:%d"):format(ip, port))
    C.close(fd)
    return nil, m
  end
  return finish_connect(fd, ("connect %s:%d"):format(ip, port), timeout_ms or 10000)
end

---Connects to a unix socket.
function M.connect_unix(path, timeout_ms)
  if not nul_free(path) then return nil, "connect: the socket path is not a string or contains a NUL byte" end
  local sa = unix_addr(path)
  if not sa then return nil, "socket path too long: " .. path end
  local fd, err = new_socket(AF_UNIX)
  if not fd then return nil, err end
  if C.connect(fd, sa, ffi.sizeof(sa)) ~= 0 and ffi.errno() ~= EINPROGRESS and ffi.errno() ~= EAGAIN then
    local m = errmsg("connect " .. path)
    C.close(fd)
    return nil, m
  end
  return finish_connect(fd, "connect " .. path, timeout_ms or 5000)
end

---The first IPv4 address of a host name (getaddrinfo), or nil and why (a name with a NUL byte is
---refused: C would resolve only what comes before it).
function M.resolve(host)
  if not nul_free(host) then return nil, "cannot resolve: the host name is not a string or contains a NUL byte" end
  if #host > 253 then return nil, "cannot resolve: the host name is longer than 253 bytes" end
  if inet(host, 0) then return host end
  local hints = ffi.new("struct seer_sock_addrinfo")
  hints.ai_family = AF_INET
  hints.ai_socktype = SOCK_STREAM
  local res = ffi.new("struct seer_sock_addrinfo *[1]")
  if C.seer_sock_getaddrinfo(host, nil, hints, res) ~= 0 or res[0] == nil then return nil, "cannot resolve " .. host end
  local buf = ffi.new("char[64]")
  C.inet_ntop(AF_INET, ffi.cast("char *", res[0].ai_addr) + 4, buf, 64)
  C.seer_sock_freeaddrinfo(res[0])
  return ffi.string(buf)
end

---Accepts a connection (non-blocking, close-on-exec), or nil.
function M.accept(fd)
  local c = C.accept4(fd, nil, nil, bit.bor(SOCK_CLOEXEC, SOCK_NONBLOCK))
  if c < 0 then return nil end
  return c
end

---Waits until fd has any of events, up to timeout_ms; true when it has.
function M.wait(fd, events, timeout_ms)
  local p = ffi.new("struct seer_pollfd[1]")
  p[0].fd, p[0].events = fd, events
  return C.poll(p, 1, math.floor(timeout_ms)) > 0
end

---poll over a list of {fd, events}; returns the revents per entry (same order).
function M.poll(list, timeout_ms)
  local n = #list
  local p = ffi.new("struct seer_pollfd[?]", math.max(n, 1))
  for i, e in ipairs(list) do p[i - 1].fd, p[i - 1].events = e[1], e[2] end
  C.poll(p, n, math.floor(timeout_ms))
  local out = {}
  for i = 1, n do out[i] = p[i - 1].revents end
  return out
end

local rbuf = ffi.new("char[65536]")
---Reads what is there (up to max bytes): a string, "" at end of stream, or nil when nothing is ready.
function M.recv(fd, max)
  local n = C.recv(fd, rbuf, math.min(max or 65536, 65536), 0)
  if n > 0 then return ffi.string(rbuf, n) end
  if n == 0 then return "" end
  if ffi.errno() == EAGAIN then return nil end
  return ""
end

---Sends what the socket takes now: the number of bytes sent (0 when it would block), or nil
---when the peer is gone.
function M.send_some(fd, s)
  local n = C.send(fd, s, #s, MSG_NOSIGNAL)
  if n >= 0 then return tonumber(n) end
  if ffi.errno() == EAGAIN then return 0 end
  return nil
end

---Sends all of s within timeout_ms; false when the peer is gone or too slow.
function M.send_all(fd, s, timeout_ms)
  local off = 0
  local deadline = require("seer.process").now_ms() + (timeout_ms or 10000)
  while off < #s do
    local n = C.send(fd, ffi.cast("const char *", s) + off, #s - off, MSG_NOSIGNAL)
    if n > 0 then off = off + n
    elseif ffi.errno() ~= EAGAIN then return false
    else
      local left = deadline - require("seer.process").now_ms()
      if left <= 0 or not M.wait(fd, M.POLLOUT, left) then return false end
    end
  end
  return true
end

function M.close(fd) if fd and fd >= 0 then C.close(fd) end end
function M.shutdown_write(fd) C.shutdown(fd, 1) end

return M
