--- seer.mcp.http_get: a small HTTP/1.1 GET client (plain http only) with a deadline, on
--- LuaJIT's ffi and POSIX sockets. seer mcp notebook uses it to find a notebook server from a
--- session's jupyter_url (`GET /api/info?token=T` answers `{endpoint, key}`, docs/live_view.md)
--- and to check that a server it attached to still answers.
---
--- ```lua
--- local http_get = require "seer.mcp.http_get"
--- local res, err = http_get.get("http://127.0.0.1:8888/api/info?token=T", { timeout_ms = 3000 })
--- -- res = {status = 200, headers = {["content-type"] = "application/json"}, body = "..."}; nil, "why" on failure
--- ```
---@class seermcp.http_get
local M = {}

local ffi = require "ffi"
require "seer.process" -- declares poll, read, close, strerror and struct seer_pollfd
local C = ffi.C

-- Every name is prefixed and redirected with asm(), so no other module's declarations of the
-- same libc functions can clash with these.
ffi.cdef [[
struct seer_hg_addrinfo {
  int ai_flags; int ai_family; int ai_socktype; int ai_protocol;
  unsigned ai_addrlen; void *ai_addr; char *ai_canonname; struct seer_hg_addrinfo *ai_next;
};
int seer_hg_getaddrinfo(const char *node, const char *service, const struct seer_hg_addrinfo *hints,
                        struct seer_hg_addrinfo **res) asm("getaddrinfo");
void seer_hg_freeaddrinfo(struct seer_hg_addrinfo *res) asm("freeaddrinfo");
const char *seer_hg_gai_strerror(int errcode) asm("gai_strerror");
int seer_hg_socket(int domain, int type, int protocol) asm("socket");
int seer_hg_connect(int fd, const void *addr, unsigned len) asm("connect");
int seer_hg_getsockopt(int fd, int level, int name, void *val, unsigned *len) asm("getsockopt");
long seer_hg_send(int fd, const void *buf, size_t n, int flags) asm("send");
]]

local SOCK_STREAM, SOCK_NONBLOCK, SOCK_CLOEXEC = 1, 2048, 524288
local SOL_SOCKET, SO_ERROR = 1, 4
local MSG_NOSIGNAL = 0x4000
local POLLIN, POLLOUT = 1, 4
local EINTR, EAGAIN, EINPROGRESS = 4, 11, 115
local MAX_BODY = 16 * 1024 * 1024

local function now_ms()
  return require("seer.core.host").now() * 1000
end

local function errno_msg(e)
  return ffi.string(C.strerror(e or ffi.errno()))
end

-- A URL for an error message: its query (which holds the token) left out, so an error that
-- ends up in a tool result or a log does not carry the secret.
local function shown(url)
  local base = url:match("^([^?#]*)") or url
  return base .. (#base < #url and "?..." or "")
end

---Splits an http URL into host, port and path (with its query).
---@param url string
---@return string|nil host, integer|string port_or_error, string|nil path
function M.parse_url(url)
  if type(url) ~= "string" then return nil, "the URL must be a string" end
  local scheme, rest = url:match("^(%a[%w+.-]*)://(.*)$")
  if not scheme then return nil, ("%q is not a URL (expected http://HOST:PORT/...)"):format(shown(url)) end
  if scheme:lower() ~= "http" then
    return nil, ("%s URLs are not supported here (only http://, as the notebook server serves)"):format(scheme)
  end
  local authority, path = rest:match("^([^/?#]*)(.*)$")
  path = path:gsub("#.*$", "")
  if path == "" then path = "/" elseif path:sub(1, 1) == "?" then path = "/" .. path end
  authority = authority:gsub("^.*@", "")
  local host, port = authority:match("^%[([^%]]+)%]:?(%d*)$")
  if not host then host, port = authority:match("^([^:]+):?(%d*)$") end
  if not host or host == "" then return nil, ("%q has no host"):format(shown(url)) end
  port = tonumber(port ~= "" and port or "80")
  if not port or port < 1 or port > 65535 then return nil, ("%q has an invalid port"):format(shown(url)) end
  return host, port, path
end

-- Waits until fd is ready for `events` or the deadline passes.
local function wait_fd(fd, events, deadline)
  local pfd = ffi.new("struct seer_pollfd[1]")
  while true do
    local left = math.floor(deadline - now_ms())
    if left <= 0 then return false end
    pfd[0].fd, pfd[0].events, pfd[0].revents = fd, events, 0
    local r = C.poll(pfd, 1, left)
    if r > 0 then return true end
    if r < 0 and ffi.errno() ~= EINTR then return false end
  end
end

local function connect(host, port, deadline)
  local hints = ffi.new("struct seer_hg_addrinfo")
  hints.ai_socktype = SOCK_STREAM
  local res = ffi.new("struct seer_hg_addrinfo *[1]")
  local rc = C.seer_hg_getaddrinfo(host, tostring(port), hints, res)
  if rc ~= 0 then return nil, ("cannot resolve %s: %s"):format(host, ffi.string(C.seer_hg_gai_strerror(rc))) end
  local last = "no address"
  local ai = res[0]
  while ai ~= nil do
    local fd = C.seer_hg_socket(ai.ai_family, SOCK_STREAM + SOCK_NONBLOCK + SOCK_CLOEXEC, 0)
    if fd >= 0 then
      local r = C.seer_hg_connect(fd, ai.ai_addr, ai.ai_addrlen)
      local ok = r == 0
      if not ok and ffi.errno() == EINPROGRESS then
        if wait_fd(fd, POLLOUT, deadline) then
          local err, len = ffi.new("int[1]"), ffi.new("unsigned[1]", 4)
          C.seer_hg_getsockopt(fd, SOL_SOCKET, SO_ERROR, err, len)
          if err[0] == 0 then ok = true else last = errno_msg(err[0]) end
        else
          last = "timed out"
        end
      elseif not ok then
        last = errno_msg()
      end
      if ok then C.seer_hg_freeaddrinfo(res[0]); return fd end
      C.close(fd)
    else
      last = errno_msg()
    end
    ai = ai.ai_next
  end
  C.seer_hg_freeaddrinfo(res[0])
  return nil, ("cannot connect to %s:%d: %s"):format(host, port, last)
end

local function dechunk(body)
  local out, pos = {}, 1
  while true do
    local size_hex, after = body:match("^(%x+)[^\r\n]*\r\n()", pos)
    if not size_hex then return nil end
    local size = tonumber(size_hex, 16)
    if size == 0 then return table.concat(out) end
    out[#out + 1] = body:sub(after, after + size - 1)
    pos = after + size + 2
  end
end

---GET url. Returns {status, headers (lower-cased names), body} or nil and why (cannot connect,
---timed out, malformed answer). A non-2xx status is an answer, not a failure.
---@param url string
---@param opts? {timeout_ms?: integer, headers?: table<string, string>}
---@return table|nil res, string|nil err
function M.get(url, opts)
  opts = opts or {}
  local host, port, path = M.parse_url(url)
  if not host then return nil, port end
  local deadline = now_ms() + (opts.timeout_ms or 5000)
  local fd, err = connect(host, port, deadline)
  if not fd then return nil, err end
  local ok, res, why = pcall(function()
    local hosthdr = host:find(":", 1, true) and ("[" .. host .. "]") or host
    local lines = { ("GET %s HTTP/1.1"):format(path), ("Host: %s:%d"):format(hosthdr, port), "Connection: close",
                    "Accept: application/json", "User-Agent: seer" }
    for k, v in pairs(opts.headers or {}) do lines[#lines + 1] = k .. ": " .. v end
    local req = table.concat(lines, "\r\n") .. "\r\n\r\n"
    local sent = 0
    while sent < #req do
      if not wait_fd(fd, POLLOUT, deadline) then return nil, "timed out sending the request to " .. host end
      local n = C.seer_hg_send(fd, ffi.cast("const char *", req) + sent, #req - sent, MSG_NOSIGNAL)
      if n < 0 then
        local e = ffi.errno()
        if e ~= EAGAIN and e ~= EINTR then return nil, "cannot send to " .. host .. ": " .. errno_msg(e) end
      else
        sent = sent + n
      end
    end
    local buf = ffi.new("char[65536]")
    local parts, total = {}, 0
    while true do
      if not wait_fd(fd, POLLIN, deadline) then return nil, ("no complete answer from %s:%d within the timeout"):format(host, port) end
      local n = C.read(fd, buf, 65536)
      if n == 0 then break end
      if n < 0 then
        local e = ffi.errno()
        if e ~= EAGAIN and e ~= EINTR then return nil, "cannot read from " .. host .. ": " .. errno_msg(e) end
      else
        parts[#parts + 1] = ffi.string(buf, n)
        total = total + n
        if total > MAX_BODY then return nil, "the answer is larger than 16 MiB" end
      end
    end
    local raw = table.concat(parts)
    local head, body = raw:match("^(.-)\r\n\r\n(.*)$")
    if not head then return nil, ("a malformed HTTP answer from %s:%d"):format(host, port) end
    local status = tonumber(head:match("^HTTP/%d%.%d (%d%d%d)"))
    if not status then return nil, ("a malformed HTTP status line from %s:%d"):format(host, port) end
    local headers = {}
    for name, value in head:gmatch("\r\n([^:\r\n]+):[ \t]*([^\r\n]*)") do headers[name:lower()] = value end
    if (headers["transfer-encoding"] or ""):lower():find("chunked", 1, true) then
      body = dechunk(body)
      if not body then return nil, ("a malformed chunked answer from %s:%d"):format(host, port) end
    elseif headers["content-length"] then
      local n = tonumber(headers["content-length"])
      if n and #body < n then return nil, ("the answer from %s:%d was cut short"):format(host, port) end
      if n then body = body:sub(1, n) end
    end
    return { status = status, headers = headers, body = body }
  end)
  C.close(fd)
  if not ok then return nil, tostring(res) end
  return res, why
end

return M
