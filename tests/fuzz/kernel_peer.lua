-- A hostile kernel for `make fuzz-kernel` (tests/fuzz/kernel_fuzz.lua). A cell of a real
-- sandboxed kernel exec()s into this script (same pid, so sandboxd sees no exit); it binds the
-- kernel's own ipc endpoints with the kernel's key, the host reconnects to it, and it sends
-- FUZZ_N malformed messages on iopub and shell: valid signatures over garbage, bad signatures,
-- wrong frame counts, oversized messages, deep JSON, wrong types, replays, invalid UTF-8,
-- unknown types, replies for other msg_ids, interleaved with correct answers to the host's
-- execute requests (so the hostile session's own cells still finish). A cell whose code is
-- "status" is answered with a stream "sent=<n> done=<0|1>".
-- Environment: FUZZ_CONN (the connection file), FUZZ_N, FUZZ_SEED, FUZZ_PARENT (the msg_id of
-- the cell that exec'd, answered first).
local net = require "seer.net"
local json = require "seer.json"
local C = require "seer.core.net"

local info = json.decode(io.open(os.getenv("FUZZ_CONN"), "rb"):read("*a"))
local N = tonumber(os.getenv("FUZZ_N")) or 100000
math.randomseed(tonumber(os.getenv("FUZZ_SEED")) or 1)
local key = info.key
local function ep(port) return ("ipc://%s-%d"):format(info.ip, port) end

-- DEALERs bound where the kernel's ROUTERs were: the host's DEALERs talk to them without
-- routing ids, and a reply can go out before the host has sent anything.
local shell = net.socket("dealer", key); shell:bind(ep(info.shell_port))
local control = net.socket("dealer", key); control:bind(ep(info.control_port))
local stdin = net.socket("dealer", key); stdin:bind(ep(info.stdin_port))
local iopub = net.socket("pub", key); iopub:bind(ep(info.iopub_port))
local hb = net.socket("rep", ""); hb:bind(ep(info.hb_port))
-- Frames seer.net would not build (bad signatures, wrong layouts) go out with send_frames,
-- which sends them as they are.
local session = net.uuid()
local sent, parent, count = 0, os.getenv("FUZZ_PARENT"), 0

local function hdr(t) return net.header(t, session) end
local function send(sock, t, content, par, extra)
  local m = { header = hdr(t), parent_header = par and { msg_id = par } or {}, metadata = {}, content = content }
  if extra then for k, v in pairs(extra) do m[k] = v end end
  sock:send(m)
  return m
end

local function rbytes(n)
  local t = {}
  for i = 1, n do t[i] = string.char(math.random(0, 255)) end
  return table.concat(t)
end
local function sign(...) return C.sign(key, ...) end
local DELIM = "<IDS|MSG>"

local running -- msg_id of the host's cell this peer is answering now
local last_signed -- frames of a message sent before, for replays

local function pick(t) return t[math.random(#t)] end
local junk_values = { 5, -1, 1e300, "x", true, json.null, {}, { 1, 2 }, { a = { b = {} } }, string.rep("A", 70000) }
local types = { "status", "stream", "display_data", "update_display_data", "execute_input", "execute_result", "error",
                "clear_output", "execute_reply", "kernel_info_reply", "input_request", "comm_msg", "nonsense_type",
                string.rep("t", 300) }

-- One malformed message; returns the socket kind it went on.
local function fuzz_one()
  local par = (math.random() < 0.7 and running) or (math.random() < 0.5 and net.uuid()) or nil
  local k = math.random(1, 16)
  local sock = math.random() < 0.8 and iopub or shell
  if k == 1 then -- valid signature over garbage parts
    local parts = { rbytes(math.random(0, 40)), rbytes(math.random(0, 40)), "{}", rbytes(math.random(0, 200)) }
    sock:send_frames({ DELIM, sign(parts[1], parts[2], parts[3], parts[4]), parts[1], parts[2], parts[3], parts[4] })
  elseif k == 2 then -- parts that are JSON but not objects
    local h = pick({ "[]", "5", '"s"', "null", json.encode(hdr("stream")) })
    local c = pick({ "[1,2]", "true", "{}", '{"name":"stdout","text":"x"}' })
    local p = pick({ "{}", "[]", json.encode({ msg_id = par or "x" }) })
    sock:send_frames({ DELIM, sign(h, p, "{}", c), h, p, "{}", c })
  elseif k == 3 then -- bad signatures
    local h, c = json.encode(hdr("stream")), json.encode({ name = "stdout", text = "forged" })
    local sig = pick({ rbytes(64), string.rep("0", 64), "", sign(h, "{}", "{}", c):sub(1, 63), sign(h, "{}", "{}", "{}") })
    sock:send_frames({ DELIM, sig, h, json.encode({ msg_id = par or "" }), "{}", c })
  elseif k == 4 then -- wrong frame counts
    local h = json.encode(hdr("status"))
    local choice = math.random(1, 4)
    if choice == 1 then sock:send_frames({ h })
    elseif choice == 2 then sock:send_frames({ DELIM, sign(h, "{}", "{}"), h, "{}", "{}" })
    elseif choice == 3 then
      local f = { DELIM, sign(h, "{}", "{}", "{}"), h, "{}", "{}", "{}" }
      for i = 1, 200 do f[#f + 1] = "b" .. i end
      sock:send_frames(f)
    else sock:send_frames({ "id1", "id2", rbytes(9) }) end
  elseif k == 5 then -- deep JSON
    local d = math.random(40, 1200)
    local c = '{"data":' .. string.rep('{"a":', d) .. "1" .. string.rep("}", d) .. "}"
    local h = json.encode(hdr(pick({ "display_data", "stream", "execute_result" })))
    local p = json.encode({ msg_id = par or "" })
    sock:send_frames({ DELIM, sign(h, p, "{}", c), h, p, "{}", c })
  elseif k == 6 then -- wrong types in the fields the host reads
    local t = pick(types)
    local c = {}
    for _, f in ipairs({ "name", "text", "data", "metadata", "transient", "execution_count", "execution_state", "ename",
                         "evalue", "traceback", "wait", "status", "code", "language_info" }) do
      if math.random() < 0.5 then c[f] = pick(junk_values) end
    end
    send(sock, t, c, par)
  elseif k == 7 then -- mime bundles with values that are not strings
    send(iopub, pick({ "display_data", "execute_result", "update_display_data" }),
      { data = { ["text/plain"] = pick({ 5, true, { 1 }, json.null }), ["image/png"] = pick({ {}, 3 }) }, metadata = {},
        execution_count = pick({ 1, -5, 2^40, 0.5 }), transient = { display_id = pick({ 5, "d", {} }) } }, par)
  elseif k == 8 then -- a replay of a message sent before (same frames, same signature)
    if last_signed then sock:send_frames(last_signed) else send(iopub, "status", { execution_state = "busy" }, par) end
  elseif k == 9 then -- invalid UTF-8 inside strings of otherwise good JSON
    local h, p = json.encode(hdr("stream")), json.encode({ msg_id = par or "" })
    local c = '{"name":"stdout","text":"bad \255\254 utf8 \192\175 ' .. rbytes(8):gsub('[%z"\\%c]', "") .. '"}'
    sock:send_frames({ DELIM, sign(h, p, "{}", c), h, p, "{}", c })
    last_signed = { DELIM, sign(h, p, "{}", c), h, p, "{}", c }
  elseif k == 10 then -- oversized: many frames that together pass the message limit
    if math.random() < 0.02 then
      local big = string.rep("x", 30 * 1024 * 1024)
      local h = json.encode(hdr("stream"))
      sock:send_frames({ DELIM, sign(h, "{}", "{}", "{}"), h, "{}", "{}", "{}", big, big, big })
    else
      send(iopub, "stream", { name = "stdout", text = string.rep("y", math.random(1, 5000)) }, net.uuid())
    end
  elseif k == 11 then -- replies and statuses for msg_ids that are not the running cell's
    send(pick({ shell, iopub }), pick({ "execute_reply", "status" }),
      { status = "ok", execution_state = "idle", execution_count = 3 }, net.uuid())
  elseif k == 12 then -- a header with fields of the wrong type
    local h = json.encode({ msg_id = pick({ 5, {}, string.rep("i", 1000) }), msg_type = pick({ 5, {}, "stream" }) })
    local c = json.encode({ name = "stdout", text = "z" })
    sock:send_frames({ DELIM, sign(h, "{}", "{}", c), h, "{}", "{}", c })
  elseif k == 13 then -- control and stdin channels too
    send(pick({ control, stdin }), pick({ "shutdown_reply", "input_request", "execute_reply", "bogus" }),
      { prompt = pick(junk_values), status = pick(junk_values) }, par)
  elseif k == 14 then -- a huge count of keys (bounded by the node budget)
    local c = { data = {} }
    for i = 1, math.random(1, 3000) do c.data["k" .. i] = "v" end
    send(iopub, "display_data", c, par)
  elseif k == 15 then -- NUL bytes and escapes
    local h, p = json.encode(hdr("error")), json.encode({ msg_id = par or "" })
    local c = '{"ename":"E\\u0000","evalue":"\\ud800","traceback":["a",1,null]}'
    sock:send_frames({ DELIM, sign(h, p, "{}", c), h, p, "{}", c })
  else -- a good-looking message (accepted when its parent is the running cell)
    send(iopub, "stream", { name = pick({ "stdout", "stderr" }), text = "noise " .. sent .. "\n" }, net.uuid())
  end
  sent = sent + 1
end

-- The last request answered: its reply may be lost (a shell message the guard cuts takes the
-- reply queued behind it), and the host then times the cell out and interrupts; a kernel ends
-- an interrupted cell with an error reply and idle, so the peer sends those again (a host that
-- had the reply ignores them), else the host stops the kernel and every later cell fails.
local last_answered

-- A correct answer to an execute request (with garbage in between when still fuzzing).
local function answer(id, code)
  count = count + 1
  running = id
  send(iopub, "status", { execution_state = "busy" }, id)
  send(iopub, "execute_input", { code = code, execution_count = count }, id)
  if sent < N then for _ = 1, 20 do fuzz_one() end end
  -- PUB drops what a slow subscriber has no room for: let the host drain before the messages
  -- that end the cell, so losing them is not the fuzz's doing.
  net.poll({}, 200)
  local text = code == "status" and ("sent=%d done=%d\n"):format(sent, sent >= N and 1 or 0) or ("peer ran: %s\n"):format(code)
  send(iopub, "stream", { name = "stdout", text = text }, id)
  if sent < N then for _ = 1, 20 do fuzz_one() end end
  net.poll({}, 50)
  send(shell, "execute_reply", { status = "ok", execution_count = count, user_expressions = {} }, id)
  send(iopub, "status", { execution_state = "idle" }, id)
  running = nil
  last_answered = id
end

-- The cell that exec'd is answered first (the host waits for it); its idle is sent again until
-- the host's SUB has reconnected and the next request shows the cell is done.
local first_done = false
local t_last = 0
while true do
  local ready = net.poll({ shell, control, hb, stdin }, 10)
  for _, i in ipairs(ready) do
    if i == 1 then
      local m = shell:recv(0)
      if m and m.header.msg_type == "execute_request" then
        first_done = true
        answer(m.header.msg_id, tostring(m.content.code))
      elseif m and m.header.msg_type == "kernel_info_request" then
        send(shell, "kernel_info_reply", { status = "ok", protocol_version = "5.3",
          language_info = { name = "lua" } }, m.header.msg_id)
        send(iopub, "status", { execution_state = "idle" }, m.header.msg_id)
      end
    elseif i == 2 then
      local m = control:recv(0)
      if m and m.header.msg_type == "shutdown_request" then os.exit(0) end
      if m then
        send(control, "interrupt_reply", { status = "ok" }, m.header.msg_id)
        if last_answered then
          send(shell, "execute_reply", { status = "error", ename = "KeyboardInterrupt", evalue = "", traceback = {},
                                         execution_count = count }, last_answered)
          send(iopub, "status", { execution_state = "idle" }, last_answered)
        end
      end
    elseif i == 3 then
      local f = hb:recv_frames(0)
      if f then hb:send_frames(f) end
    else
      stdin:recv(0)
    end
  end
  local now = C.now_ms()
  if not first_done and parent and now - t_last > 100 then
    t_last = now
    send(shell, "execute_reply", { status = "ok", execution_count = 1 }, parent)
    send(iopub, "status", { execution_state = "idle" }, parent)
  end
  if first_done and sent < N then
    for _ = 1, 25 do if sent < N then fuzz_one() end end
  end
end
