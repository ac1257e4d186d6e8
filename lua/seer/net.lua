--- seer.net: signed multipart messages in the Jupyter wire format over ZMQ (the plumbing under
--- the kernel, the notebook server and seer.execution). Signing, framing and sockets are C
--- (engine/net, the module seer.core.net); this file turns message tables into JSON and back.
---
--- A message is `{idents?, header, parent_header, metadata, content, buffers?}`. Tables are
--- JSON-encoded with seer.json (an empty table becomes `{}`), then signed with HMAC-SHA256 over
--- header, parent header, metadata and content, keyed with the connection key (an empty key
--- means no signature). A received message whose signature does not verify is dropped with a
--- line on stderr and never returned.
---
--- ```lua
--- local net = require "seer.net"
--- local key = net.new_key()
--- local srv = net.socket("router", key)
--- local ep = srv:bind("tcp://127.0.0.1:*")
--- local cli = net.socket("dealer", key); cli:connect(ep)
--- cli:send({ header = net.header("ping", "s1"), parent_header = {}, metadata = {}, content = { n = 1 } })
--- local msg = srv:recv(1000)   -- msg.idents routes the reply back: srv:send{idents = msg.idents, ...}
--- ```
---@class seernet
---@field protocol_version string the Jupyter protocol version the headers carry ("5.3")
local M = {}

local C = require "seer.core.net"
local json = require "seer.json"

M.protocol_version = C.protocol_version

---@class seernet.header
---@field msg_id string
---@field session string
---@field username string
---@field date string ISO 8601 UTC with microseconds, e.g. "2024-05-01T12:00:00.123456Z"
---@field msg_type string
---@field version string "5.3"

---@class seernet.message
---@field idents? string[] routing ids (router sockets: where the message came from / goes to)
---@field header seernet.header|table
---@field parent_header table
---@field metadata table
---@field content table
---@field buffers? string[] binary frames after the content

---@class seernet.socket
---@field private _s userdata
local Socket = {}
Socket.__index = Socket

---A new key: 64 hex characters (32 bytes from OpenSSL's RAND_bytes).
---@return string
function M.new_key()
  return C.new_key()
end

---A random version 4 UUID, e.g. "1b4e28ba-2fa1-41d2-883f-0016d3cca427".
---@return string
function M.uuid()
  return C.uuid()
end

local username = os.getenv("USER") or os.getenv("LOGNAME") or "seer"

---A fresh message header.
---@param msg_type string e.g. "execute_request"
---@param session string the sender's session id (net.uuid() once per client)
---@param user? string defaults to $USER
---@return seernet.header
function M.header(msg_type, session, user)
  if type(msg_type) ~= "string" then error("net.header: msg_type must be a string", 2) end
  if type(session) ~= "string" then error("net.header: session must be a string", 2) end
  return json.decode(C.header(msg_type, session, user or username))
end

local kinds = { router = true, dealer = true, pub = true, sub = true, rep = true, req = true }

---A ZMQ socket that signs what it sends and verifies what it receives with key.
---@param kind "router"|"dealer"|"pub"|"sub"|"rep"|"req"
---@param key? string the connection key ("" or nil: no signatures)
---@return seernet.socket
function M.socket(kind, key)
  if not kinds[kind] then
    error(("net.socket: unknown kind %s (router, dealer, pub, sub, rep or req)"):format(tostring(kind)), 2)
  end
  if key ~= nil and type(key) ~= "string" then error("net.socket: key must be a string", 2) end
  return setmetatable({ _s = C.socket(kind, key or ""), kind = kind }, Socket)
end

---Binds to an endpoint; "tcp://127.0.0.1:*" picks a free port.
---@param endpoint string
---@return string endpoint the endpoint actually bound, e.g. "tcp://127.0.0.1:41234"
---@return integer? port for tcp endpoints
function Socket:bind(endpoint)
  return self._s:bind(endpoint)
end

---@param endpoint string e.g. "tcp://127.0.0.1:5555"
function Socket:connect(endpoint)
  self._s:connect(endpoint)
end

---Sub sockets: receive messages whose first frame starts with prefix ("" = everything).
---@param prefix? string
function Socket:subscribe(prefix)
  self._s:subscribe(prefix or "")
end

local function encode(v, what)
  if v == nil then return "{}" end
  if type(v) == "string" then return v end -- already JSON text
  if type(v) ~= "table" then error(("net: message %s must be a table, got %s"):format(what, type(v)), 3) end
  local ok, text = pcall(json.encode, v)
  if not ok then error(("net: message %s: %s"):format(what, text), 3) end
  return text
end

---Sends a signed message. header, parent_header, metadata and content are tables (JSON-encoded
---here; an already encoded JSON string is sent as is).
---@param msg seernet.message
function Socket:send(msg)
  if type(msg) ~= "table" then error("socket:send: msg must be a table", 2) end
  if msg.header == nil then error("socket:send: msg.header is missing (net.header(msg_type, session))", 2) end
  self._s:send(msg.idents, encode(msg.header, "header"), encode(msg.parent_header, "parent_header"),
    encode(msg.metadata, "metadata"), encode(msg.content, "content"), msg.buffers)
end

---Receives the next message whose signature verifies.
---@param timeout_ms? integer -1 or nil: wait forever; 0: only what is already queued
---@return seernet.message|nil msg
---@return string? why "timeout" when nothing came in time
function Socket:recv(timeout_ms)
  local idents, h, p, md, c, buffers = self._s:recv(timeout_ms or -1)
  if not idents then return nil, h end
  local ok, msg = pcall(function()
    return { idents = idents, header = json.decode(h), parent_header = json.decode(p), metadata = json.decode(md),
      content = json.decode(c), buffers = buffers }
  end)
  if not ok then error("socket:recv: a signed message carries invalid JSON: " .. tostring(msg), 2) end
  return msg
end

---Sends raw frames (no delimiter, no signature): heartbeats and other plain traffic.
---@param frames string[]
function Socket:send_frames(frames)
  self._s:send_frames(frames)
end

---Receives one raw multipart message as a list of frames.
---@param timeout_ms? integer
---@return string[]|nil frames
---@return string? why "timeout"
function Socket:recv_frames(timeout_ms)
  return self._s:recv_frames(timeout_ms or -1)
end

---Closes the socket now (linger 0: unsent messages are dropped). The garbage collector closes
---sockets that were not closed.
function Socket:close()
  self._s:close()
end

function Socket:__tostring()
  return tostring(self._s)
end

---Waits until some of the sockets (or raw file descriptors) are readable.
---@param list (seernet.socket|integer)[]
---@param timeout_ms? integer -1 or nil: forever
---@return integer[] indices the readable entries' positions in list ({} on timeout)
function M.poll(list, timeout_ms)
  if type(list) ~= "table" then error("net.poll: list must be a table of sockets or file descriptors", 2) end
  local raw = {}
  for i, v in ipairs(list) do
    if type(v) == "number" then raw[i] = v
    elseif type(v) == "table" and getmetatable(v) == Socket then raw[i] = v._s
    else error(("net.poll: entry %d is a %s, not a socket or a file descriptor"):format(i, type(v)), 2) end
  end
  return C.poll(raw, timeout_ms or -1)
end

---How many messages this process dropped for a bad signature or a broken layout.
---@return integer
function M.dropped()
  return C.dropped()
end

return M
