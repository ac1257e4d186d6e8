--- seer.rpc.wire: what crosses the RPC connection, shared by the server (seer.rpc.server) and
--- the clients (seer.rpc, seer.mcp.rpc_tools). Messages are signed Jupyter-format multipart
--- messages (seer.core.net); values are JSON with binary frames for tensors and large or binary
--- strings:
---   tensor  -> {"$tensor": i, "dtype": "f32", "shape": [2, 3]}   (frame i: contiguous raw bytes)
---   string  -> {"$bytes": i}   when it is 64 KiB or longer, or not valid UTF-8 / holds NUL bytes
--- Everything else must be JSON data; anything that is not (a function, a userdata, a cycle, a
--- table mixing array and string keys, NaN) is an error naming the field ("result.rows[3].fn").
local M = {}

local ffi = require "ffi"
local json = require "seer.json"
local net = require "seer.core.net"

M.BIG_STRING = 64 * 1024
M.PROTOCOL = "seer-rpc/1"

local ok_tensor, tensor = pcall(require, "seer.tensor")
local is_tensor = ok_tensor and tensor.is_tensor or function() return false end

local jarray, jobject, is_array, is_object, null = json.array, json.object, json.is_array, json.is_object, json.null
local json_encode = json.encode
local format, find = string.format, string.find

-- A string JSON can carry: valid UTF-8 without NUL bytes.
local function json_safe(s)
  if not s:find("[\128-\255%z]") then return true end
  if s:find("%z") then return false end
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    if c < 0x80 then i = i + 1
    else
      local len = (c >= 0xC2 and c <= 0xDF) and 2 or (c >= 0xE0 and c <= 0xEF) and 3 or (c >= 0xF0 and c <= 0xF4) and 4 or 0
      if len == 0 or i + len - 1 > n then return false end
      for k = 1, len - 1 do
        local b = s:byte(i + k)
        if b < 0x80 or b > 0xBF then return false end
      end
      local b1 = s:byte(i + 1)
      if (c == 0xE0 and b1 < 0xA0) or (c == 0xED and b1 > 0x9F) or (c == 0xF0 and b1 < 0x90) or (c == 0xF4 and b1 > 0x8F) then
        return false
      end
      i = i + len
    end
  end
  return true
end
M.json_safe = json_safe

local function tensor_bytes(t)
  local c = t:contiguous()
  local n = c:numel() * c:element_size()
  if n == 0 then return "" end
  return ffi.string(c:data_ptr(), n)
end

local function child(path, k)
  if type(k) == "number" then
    if k % 1 == 0 and k > -2^53 and k < 2^53 then return ("%s[%d]"):format(path, k) end
    return ("%s[%s]"):format(path, tostring(k))
  end
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return path .. "." .. k end
  if type(k) == "string" then return ("%s[%q]"):format(path, k) end
  return ("%s[%s]"):format(path, tostring(k))
end

local function bad(path, what)
  error(("%s %s; an RPC value must be JSON data (nil, booleans, numbers, strings, tables of them) or tensors"):format(path, what), 0)
end

-- Converts v into JSON-ready data, moving tensors and big strings into bufs.
local function pack(v, path, bufs, seen)
  local tv = type(v)
  if tv == "string" then
    if #v >= M.BIG_STRING or not json_safe(v) then
      bufs[#bufs + 1] = v
      return { ["$bytes"] = #bufs - 1 }
    end
    return v
  elseif tv == "number" then
    if v ~= v or v == math.huge or v == -math.huge then bad(path, "is " .. tostring(v) .. " (JSON has no NaN or infinity)") end
    return v
  elseif tv == "boolean" or v == nil or v == null then
    return v
  elseif tv == "table" then
    if seen[v] then bad(path, "is a cycle (a table that contains itself)") end
    seen[v] = true
    local out
    -- Classify the keys first, so that every shape of table that is not JSON gets the message
    -- for what is actually wrong with it (a hole, mixed keys, a key no JSON value has).
    local count, nints, maxi = 0, 0, 0
    local skey, okey
    for k in pairs(v) do
      count = count + 1
      local tk = type(k)
      if tk == "string" then
        skey = skey or k
      elseif tk == "number" and k >= 1 and k % 1 == 0 and k < 2^53 then
        nints = nints + 1
        if k > maxi then maxi = k end
      elseif okey == nil then
        okey = k
      end
    end
    if okey ~= nil then
      if type(okey) == "number" then
        bad(child(path, okey), "has a number key that is not an array index (an array's keys are the whole numbers 1..n, an object's keys are strings)")
      end
      bad(child(path, okey), ("has a %s key (an array's keys are the whole numbers 1..n, an object's keys are strings)"):format(type(okey)))
    end
    if skey ~= nil and (nints > 0 or is_array(v)) then
      bad(path, ("mixes array items%s and string keys (%s): a table is either an array 1..n or an object with string keys"):format(
        nints > 0 and " (" .. child(path, maxi) .. ")" or " (it is a json.array)", child(path, skey)))
    end
    if nints > 0 or is_array(v) then
      if maxi ~= nints then
        local i = 1
        while v[i] ~= nil do i = i + 1 end
        bad(child(path, i), ("is a hole in an array (use json.null, or string keys for a sparse table); the array's last item is %s"):format(child(path, maxi)))
      end
      out = jarray()
      for i = 1, maxi do out[i] = pack(v[i], child(path, i), bufs, seen) end
    elseif count == 0 then
      out = jobject()
    else
      out = jobject()
      for k, x in pairs(v) do
        if k == "$tensor" or k == "$bytes" then bad(child(path, k), "uses a key reserved for binary frames") end
        if not json_safe(k) then bad(path, "has a key that is not valid UTF-8") end
        out[k] = pack(x, child(path, k), bufs, seen)
      end
    end
    seen[v] = nil
    return out
  elseif is_tensor(v) then
    bufs[#bufs + 1] = tensor_bytes(v)
    return { ["$tensor"] = #bufs - 1, dtype = v:dtype(), shape = jarray(v:size()) }
  end
  bad(path, "is a " .. (tv == "userdata" and "userdata" or tv == "cdata" and "cdata (an FFI value)" or tv))
end

---JSON text of v, with binary frames appended to bufs. Raises "PATH is a function; ..." for
---values that cannot travel.
---@param v any
---@param path string how the value is named in errors ("result", "args[2]")
---@param bufs string[]
---@return string json
function M.encode(v, path, bufs)
  -- Scalars (most arguments and results) without building a table for the encoder.
  local tv = type(v)
  if tv == "number" then
    if v ~= v or v == math.huge or v == -math.huge then bad(path, "is " .. tostring(v) .. " (JSON has no NaN or infinity)") end
    if v % 1 == 0 and v > -2^53 and v < 2^53 and (v ~= 0 or 1 / v > 0) then return format("%d", v) end
    return json_encode(v)
  elseif tv == "string" and #v < 256 and not find(v, '[%c"\\\128-\255]') then
    return '"' .. v .. '"'
  elseif tv == "boolean" or (tv == "string" and #v < M.BIG_STRING and json_safe(v)) then
    return json_encode(v)
  end
  local packed = pack(v, path, bufs, {})
  local ok, text = pcall(json.encode, packed)
  if not ok then error(path .. ": " .. tostring(text):gsub("^json%.encode: ", ""), 0) end
  return text
end

M.MAX_DIMS = 16

-- A tensor from a {"$tensor", dtype, shape} spec and its frame. The spec comes from the peer:
-- the dtype, the shape (at most MAX_DIMS non-negative integers) and the frame's length must
-- agree before anything is allocated, so an absurd shape costs nothing.
local SIZES = { f32 = 4, f16 = 2, bf16 = 2, f64 = 8, i32 = 4, i64 = 8, u8 = 1, bool = 1 }
local function tensor_from(spec, bytes)
  if not ok_tensor then error("rpc: a tensor came back but this process has no seer.tensor", 0) end
  local esize = type(spec.dtype) == "string" and SIZES[spec.dtype]
  if not esize then error(("rpc: a tensor with dtype %s, which is not one seer knows"):format(tostring(spec.dtype)):sub(1, 200), 0) end
  if type(spec.shape) ~= "table" or #spec.shape > M.MAX_DIMS then
    error(("rpc: a tensor's shape must be an array of at most %d sizes"):format(M.MAX_DIMS), 0)
  end
  local shape, numel = {}, 1
  for i, d in ipairs(spec.shape) do
    if type(d) ~= "number" or d ~= math.floor(d) or d < 0 or d > 2^40 then
      error(("rpc: a tensor's shape[%d] is not a size (a non-negative integer)"):format(i), 0)
    end
    shape[i] = d
    numel = numel * d
  end
  if numel * esize ~= #bytes then
    error(("rpc: a %s tensor of shape [%s] needs %.0f bytes but its frame has %d"):format(spec.dtype,
      table.concat(shape, ", "), numel * esize, #bytes), 0)
  end
  local t = tensor.zeros(#shape > 0 and shape or { 1 }, { dtype = spec.dtype })
  if #shape == 0 then t = t:view({}) end
  local n = t:numel() * t:element_size()
  if n ~= #bytes then
    error(("rpc: a %s tensor of shape [%s] needs %d bytes but its frame has %d"):format(spec.dtype,
      table.concat(shape, ", "), n, #bytes), 0)
  end
  if n > 0 then ffi.copy(t:data_ptr(), bytes, n) end
  return t
end

-- Replaces placeholders by the values in bufs (0-based indices); top-level null stays null.
local function frame_index(i)
  if type(i) ~= "number" or i ~= math.floor(i) or i < 0 then error("rpc: a $bytes/$tensor index is not a non-negative integer", 0) end
  return i
end

local function unpack(v, bufs)
  if type(v) ~= "table" then return v end
  local b, t = v["$bytes"], v["$tensor"]
  if b ~= nil then b = frame_index(b) end
  if t ~= nil then t = frame_index(t) end
  if b ~= nil and is_object(v) then
    local s = bufs[b + 1]
    if s == nil then error(("rpc: the value refers to binary frame %d, which the message does not have"):format(b), 0) end
    return s
  end
  if t ~= nil and is_object(v) then
    local s = bufs[t + 1]
    if s == nil then error(("rpc: the value refers to binary frame %d, which the message does not have"):format(t), 0) end
    return tensor_from(v, s)
  end
  for k, x in pairs(v) do
    if type(x) == "table" then v[k] = unpack(x, bufs) end
  end
  return v
end

---Turns decoded JSON back into values (tensors and strings from frames).
---@param v any
---@param bufs string[]|nil
function M.decode_value(v, bufs)
  if bufs == nil or #bufs == 0 then return v end
  return unpack(v, bufs)
end

-- ---- headers ---------------------------------------------------------------------------------

ffi.cdef [[
struct seer_rpc_timespec { long tv_sec; long tv_nsec; };
int seer_rpc_clock_gettime(int clk, struct seer_rpc_timespec *ts) asm("clock_gettime");
int seer_rpc_open(const char *path, int flags, unsigned mode) asm("open");
long seer_rpc_write(int fd, const void *buf, size_t n) asm("write");
int seer_rpc_close(int fd) asm("close");
char *strerror(int errnum);
]]
local ts = ffi.new("struct seer_rpc_timespec")
local last_sec, last_prefix = -1, ""

-- ISO 8601 UTC with microseconds, as Jupyter headers carry.
local function iso_now()
  ffi.C.seer_rpc_clock_gettime(0 --[[CLOCK_REALTIME]], ts)
  local sec = tonumber(ts.tv_sec)
  if sec ~= last_sec then last_sec, last_prefix = sec, os.date("!%Y-%m-%dT%H:%M:%S", sec) end
  return ("%s.%06dZ"):format(last_prefix, math.floor(tonumber(ts.tv_nsec) / 1000)), sec
end
M.iso_now = iso_now

---A header maker for one sender: msg ids are the session id and a counter (unique, cheap).
---@return fun(msg_type: string): string, string header JSON text and its msg_id
function M.header_maker()
  local session = net.uuid()
  local n = 0
  local user = json.encode(os.getenv("USER") or "seer")
  return function(msg_type)
    n = n + 1
    local id = session .. "-" .. n
    return ('{"date":"%s","msg_id":"%s","msg_type":"%s","session":"%s","username":%s,"version":"5.3"}'):format(
      iso_now(), id, msg_type, session, user), id
  end, session
end

-- Seconds since the epoch of a header date ("2024-05-01T12:00:00.123456Z"), nil if unreadable.
local epoch_base
function M.date_seconds(date)
  if type(date) ~= "string" then return nil end
  local y, mo, d, h, mi, s = date:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)")
  if not y then return nil end
  if not epoch_base then
    -- os.time reads a local time: measure the offset once
    local t0 = os.time()
    epoch_base = t0 - os.time(os.date("!*t", t0))
  end
  return os.time{ year = tonumber(y), month = tonumber(mo), day = tonumber(d), hour = tonumber(h), min = tonumber(mi),
                  sec = tonumber(s), isdst = false } + epoch_base
end

-- ---- connection files ------------------------------------------------------------------------

---Reads a connection file: {endpoint, control_endpoint, key, signature_scheme, transport, name}.
---@param path string
---@return table
function M.read_connection(path)
  local f, err = io.open(path, "rb")
  if not f then error(("rpc: cannot read the connection file %s: %s"):format(path, err), 0) end
  local text = f:read("*a")
  f:close()
  return M.decode_connection(text, path)
end

---A connection file's text, decoded and checked (a JSON object with a key and, if any, the
---hmac-sha256 scheme); errors name path.
---@param text string
---@param path string
---@return table
function M.decode_connection(text, path)
  local ok, info = pcall(json.decode, text)
  if not ok or type(info) ~= "table" then
    error(("rpc: the connection file %s is not a JSON object: %s"):format(path, tostring(info)), 0)
  end
  if type(info.key) ~= "string" or info.key == "" then
    error(("rpc: the connection file %s has no key; RPC needs an HMAC key (seer.rpc makes one)"):format(path), 0)
  end
  if info.signature_scheme ~= nil and info.signature_scheme ~= "hmac-sha256" then
    error(("rpc: the connection file %s asks for signature scheme %s; only hmac-sha256 is supported"):format(path,
      tostring(info.signature_scheme)), 0)
  end
  return info
end

---Writes a connection file atomically, created with mode 0600 (it holds the key: there is no
---moment at which another user could read it).
---@param path string
---@param info table
function M.write_connection(path, info)
  local text = json.pretty(info) .. "\n"
  local tmp = ("%s.tmp%d"):format(path, math.random(1e9))
  local fd = ffi.C.seer_rpc_open(tmp, 1 + 64 + 512 + 524288 --[[O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC]], tonumber("600", 8))
  if fd < 0 then error(("rpc: cannot write the connection file %s: %s"):format(path, ffi.string(ffi.C.strerror(ffi.errno()))), 0) end
  local n = ffi.C.seer_rpc_write(fd, text, #text)
  ffi.C.seer_rpc_close(fd)
  if n ~= #text or not os.rename(tmp, path) then
    os.remove(tmp)
    error(("rpc: cannot write the connection file %s"):format(path), 0)
  end
end

return M
