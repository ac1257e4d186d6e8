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

---@class seernet.socket_opts
---@field max_bytes? integer a message larger than this (all frames together) disconnects the peer that sends it (the connection guard, on connects) or is dropped unread (binds; a single frame larger than this disconnects there: ZMQ_MAXMSGSIZE). Default 1 GiB
---@field max_frames? integer a message with more frames is refused as max_bytes says (default 4096)
---@field rcvhwm? integer how many received messages ZMQ may queue here before it stops reading from the peer (default 1000); with max_bytes it bounds what a peer can make this process hold
---@field guard? boolean default true when any limit is given: ipc:// and tcp:// connects go through the connection guard (engine/net/guard.c), which enforces max_bytes and max_frames on the peer's ZMTP stream before libzmq holds it (libzmq keeps every frame of an unfinished multipart message) and follows no link at an ipc path; false connects directly

---A ZMQ socket that signs what it sends and verifies what it receives with key. What it
---receives is checked before anyone sees it: the signature, the layout, opts' limits, replays
---(a signature accepted before), and that the four parts are JSON objects; what fails is
---dropped, logged (at most 10 lines a second) and counted (socket:dropped()).
---@param kind "router"|"dealer"|"pub"|"sub"|"rep"|"req"
---@param key? string the connection key ("" or nil: no signatures)
---@param opts? seernet.socket_opts
---@return seernet.socket
function M.socket(kind, key, opts)
  if not kinds[kind] then
    error(("net.socket: unknown kind %s (router, dealer, pub, sub, rep or req)"):format(tostring(kind)), 2)
  end
  if key ~= nil and type(key) ~= "string" then error("net.socket: key must be a string", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("net.socket: opts must be a table {max_bytes, max_frames}", 2) end
  return setmetatable({ _s = C.socket(kind, key or "", opts), kind = kind }, Socket)
end

---A raw ZMQ socket (no signatures, no Jupyter layout): the userdata of seer.core.net with
---`send_raw(frames, dontwait) -> ok`, `recv_frames(timeout_ms) -> frames|nil`, `setopt(name, v)`,
---`curve_server(secret, client_public)`, `curve_client(server_public, public, secret)`,
---`curve_refused()`, `writable()`, `bind`, `connect`, `close`. It can go in net.poll's list.
---Used by the CURVE tunnel (seer.backends.curve_tunnel), which carries other sockets' bytes.
---@param kind "router"|"dealer"|"stream"
---@param opts? seernet.socket_opts
---@return userdata
function M.raw_socket(kind, opts)
  if kind ~= "router" and kind ~= "dealer" and kind ~= "stream" then
    error(("net.raw_socket: unknown kind %s (router, dealer or stream)"):format(tostring(kind)), 2)
  end
  return C.socket(kind, "", opts)
end

---A relay through the connection guard (engine/net/guard.c): listens at `listen_path` (a unix
---socket; what was there is replaced) and connects each connection made there to `endpoint`
---(ipc:// or tcp://) as a guarded connect does: a link at the endpoint's path is refused, not
---followed, and the endpoint's side is read as ZMTP and cut past `opts` limits (default 1 GiB a
---message, 4096 frames). For a host folder that must offer a socket that lives in a folder
---another side controls (a container's shared folder); without `opts.listen_beneath`,
---`listen_path` itself must lie in a folder only this side controls (a link there is followed).
---@param listen_path string
---@param endpoint string
---`opts.beneath`: a folder the endpoint's path lies beneath whose contents the other side can
---change (the container's shared folder): no link below it is followed, on any connect.
---`opts.listen_beneath`: a folder `listen_path` lies beneath whose contents another side can
---change (a sandbox's run folder): the socket is made there with no link below it followed (a
---stale socket or link at its name is replaced, anything else refused) and is left there when
---the relay closes. The relay holds at most 512 KiB per connection (256 connections at once; past
---that a new one is closed at once): nothing is queued beyond what each side reads.
---@param opts? {max_bytes?: integer, max_frames?: integer, beneath?: string, listen_beneath?: string}
---@return {close: fun(self), cuts: fun(self): integer, string|nil}
function M.relay(listen_path, endpoint, opts) return C.relay(listen_path, endpoint, opts) end

---Whether this libzmq has CURVE (built with libsodium).
---@return boolean
function M.has_curve() return C.has_curve() end

---A new CURVE key pair, Z85 text (40 characters each). Raises when libzmq lacks CURVE.
---@return string public, string secret
function M.curve_keypair() return C.curve_keypair() end

---The public key of a CURVE secret key (Z85).
---@param secret string
---@return string
function M.curve_public(secret) return C.curve_public(secret) end

---Binds to an endpoint; "tcp://127.0.0.1:*" picks a free port. `beneath` (a socket with
---limits, an ipc:// endpoint): a folder the path lies beneath whose contents another side can
---change (a sandbox's run folder); the folder itself is trusted, and no link below it is
---followed: the socket is made through a descriptor of its folder, opened with no link
---followed, so a folder on the way that is a link is an error and nothing is created elsewhere.
---@param endpoint string
---@param beneath? string
---@return string endpoint the endpoint actually bound, e.g. "tcp://127.0.0.1:41234"
---@return integer? port for tcp endpoints
function Socket:bind(endpoint, beneath)
  return self._s:bind(endpoint, beneath)
end

---Connects to an endpoint. `beneath` (a socket with limits, an ipc:// endpoint): a folder the
---path lies beneath whose contents another side can change (a sandbox's run folder); the
---folder itself is trusted, and no link below it is followed: a folder on the way that is a
---link is an error now, and the socket's folder is held, so reconnects cannot be redirected.
---@param endpoint string e.g. "tcp://127.0.0.1:5555"
---@param beneath? string
function Socket:connect(endpoint, beneath)
  self._s:connect(endpoint, beneath)
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

local decode, is_array, utf8_fix = json.decode, json.is_array, C.utf8_fix

-- A part as a JSON object, or nil and why. Bytes that are not UTF-8 become U+FFFD first: a peer's
-- bad bytes in a string cost it that character, not the whole message.
local function object_of(text, what)
  local ok, v = pcall(decode, text)
  if not ok then
    local fixed = utf8_fix(text)
    if fixed ~= text then ok, v = pcall(decode, fixed) end
    if not ok then return nil, ("its %s is not JSON (%s)"):format(what, tostring(v):sub(1, 120)) end
  end
  if type(v) ~= "table" or is_array(v) then return nil, ("its %s is a JSON %s, not an object"):format(what, type(v) == "table" and "array" or type(v)) end
  return v
end

---Receives the next message whose signature verifies, seen for the first time, whose header,
---parent header, metadata and content are JSON objects. Messages that fail are dropped and
---counted (socket:dropped()); the wait goes on.
---@param timeout_ms? integer -1 or nil: wait forever; 0: only what is already queued
---@return seernet.message|nil msg
---@return string? why "timeout" when nothing came in time
function Socket:recv(timeout_ms)
  timeout_ms = timeout_ms or -1
  local deadline = timeout_ms > 0 and (C.now_ms() + timeout_ms) or nil
  while true do
    local left = timeout_ms
    if deadline then left = math.max(0, deadline - C.now_ms()) end
    local idents, h, p, md, c, buffers = self._s:recv(left)
    if not idents then return nil, h end
    local header, why = object_of(h, "header")
    local parent, metadata, content
    if header then parent, why = object_of(p, "parent header") end
    if parent then metadata, why = object_of(md, "metadata") end
    if metadata then content, why = object_of(c, "content") end
    if content then
      return { idents = idents, header = header, parent_header = parent, metadata = metadata, content = content,
               buffers = buffers }
    end
    self._s:note_dropped("a signed message: " .. why)
  end
end

---How many messages this socket dropped (bad signature or layout, over its limits, a replay,
---parts that are not JSON objects, or refused by its owner with note_dropped), and why the last
---one was.
---@return integer count
---@return string? why
function Socket:dropped()
  return self._s:dropped()
end

---Counts and logs one more dropped message on this socket (for owners that check fields).
---@param why string
function Socket:note_dropped(why)
  self._s:note_dropped(why)
end

---Bytes this socket's replay history holds (bounded: at most 2 MiB).
---@return integer
function Socket:history_bytes()
  return self._s:history_bytes()
end

---s with every byte that is not part of well-formed UTF-8 replaced by U+FFFD.
---@param s string
---@return string
function M.utf8_fix(s)
  return utf8_fix(s)
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
    elseif type(v) == "userdata" then raw[i] = v -- a raw socket (net.raw_socket)
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
