-- Attack suite, classes 5 and 7 (docs/security.md): hostile messages from inside a sandbox and
-- replays. The kernel is agent code's: a cell reaches the kernel's own signed publish (through
-- the upvalues of `display`) and sends whatever it likes on iopub with the kernel's real key.
-- Every attempt runs on its own rig (a sandbox with a notebook session) with a bystander session
-- on the same notebook server, and asserts the server and the bystander survive unchanged.
local T = require "testing"
local A = require "attack"
local json = require "seer.json"

local RIG = { name = "msgs" }

local bystander
local function get_bystander(r)
  if not bystander then
    bystander = require("seer.execution").create_notebook_session(r.sandbox, nil,
      { name = "bystander", output_dir = A.root .. "/outputs/bystander" })
    bystander:exec("n = 0")
  end
  return bystander
end

-- The bystander still runs cells and gets the right output; the server answers for both.
local function assert_bystander(r, what)
  local b = get_bystander(r)
  local res = b:exec("n = n + 1; print('ok ' .. (n * 2))", { raise = false, timeout = 60 })
  T.ok(not res.error, what .. ": the bystander's cell failed: " .. tostring(res.error and res.error.evalue))
  T.ok(res.text:match("^ok %d+\n$"), what .. ": the bystander printed " .. tostring(res.text))
  T.eq(b:info().bad_messages, 0, what .. ": the bystander saw dropped messages")
  T.eq(r.session:info().state ~= nil, true)
end

-- The hostile session's notebook on the host is still valid JSON (nothing broken was saved).
local function assert_notebook_ok(r, what)
  local path = r.session:info().notebook_path
  local f = assert(io.open(path, "rb"))
  local text = f:read("*a")
  f:close()
  local ok, doc = pcall(json.decode, text)
  T.ok(ok and type(doc) == "table" and doc.cells, what .. ": the notebook is not valid JSON: " .. tostring(doc))
end

-- Lua prelude for a cell: `pub(msg_type, content_text)` is the kernel's own C publish.
local PRELUDE = [[
local function upv(f, want)
  for i = 1, 80 do
    local n, v = debug.getupvalue(f, i)
    if not n then return nil end
    if n == want then return v end
  end
end
local dd = upv(display.markdown, "display_data")
local publish = upv(dd, "publish")
local K = upv(publish, "C")
local pub = K.publish
]]

local function kernel_attack(a)
  a.rig = RIG
  a.vectors = a.vectors or { "kernel/lua" }
  a.lua = PRELUDE .. a.lua
  local check = a.check
  a.check = function(out, vector, res)
    check(out, vector, res)
    local r = A.rig(RIG.name)
    assert_bystander(r, a.name)
    assert_notebook_ok(r, a.name)
  end
  A.attack(a)
end

-- Control: the probe reaches the host at all (a well-formed message through the same route
-- shows up as output), so the attempts below cannot pass because the route is broken.
kernel_attack{
  name = "control: a well-formed stream through the kernel's raw publish reaches the host", class = 5,
  lua = [[pub("stream", '{"name":"stdout","text":"raw route works\\n"}') io.write("")]],
  check = function(out) T.contains(out, "raw route works") end,
}

kernel_attack{
  name = "iopub content that is not JSON, or JSON that is not an object", class = 5,
  lua = [[
pub("stream", '{"name":"stdout","text":"unterminated')
pub("stream", '[1,2,3]')
pub("stream", 'null')
pub("display_data", '\0\1\2')
print("after")]],
  check = function(out)
    T.contains(out, "after")
    T.contains(out, "dropped 4 malformed messages")
    T.ok(not out:find("unterminated"), "the broken stream was used")
  end,
}

kernel_attack{
  name = "fields of the wrong type: stream name and text, error traceback, execution_count", class = 5,
  lua = [[
pub("stream", '{"name":5,"text":{"a":1}}')
pub("stream", '{"name":"stdout","text":["x"]}')
pub("error", '{"ename":{},"evalue":1,"traceback":"not an array"}')
pub("execute_result", '{"execution_count":1e308,"data":{"text/plain":"big count"},"metadata":{}}')
pub("execute_result", '{"execution_count":-1,"data":{"text/plain":"negative count"},"metadata":{}}')
pub("execute_input", '{"execution_count":"seven","code":"x"}')
print("typed")]],
  check = function(out)
    T.contains(out, "typed")
    T.contains(out, "dropped 6 malformed messages")
    T.ok(not out:find("big count") and not out:find("negative count"), "a result with an absurd count was used")
  end,
}

kernel_attack{
  name = "display_data whose mime values are not strings", class = 5,
  lua = [[
pub("display_data", '{"data":{"text/plain":5},"metadata":{}}')
pub("display_data", '{"data":{"text/html":{"nested":true}},"metadata":{}}')
pub("display_data", '{"data":[1,2],"metadata":{}}')
pub("display_data", '{"data":{"text/plain":"fine"},"metadata":7}')
pub("update_display_data", '{"data":{"text/plain":"u"},"metadata":{},"transient":{"display_id":{}}}')
pub("display_data", '{"data":{"application/json":{"ok":1},"text/plain":"json bundle"},"metadata":{}}')
print("mime")]],
  check = function(out, _, res)
    T.contains(out, "mime")
    T.contains(out, "json bundle") -- a JSON value under a JSON mime type is allowed
    T.contains(out, "dropped 5 malformed messages")
    for _, o in ipairs(res.outputs or {}) do
      for k, v in pairs(o.data or {}) do
        T.ok(type(v) == "string" or k == "application/json", "a non-string mime value reached the notebook: " .. k)
      end
    end
  end,
}

kernel_attack{
  name = "text that is not UTF-8 in display_data and stream", class = 5,
  lua = [[
pub("display_data", '{"data":{"text/plain":"bad \255\254 bytes"},"metadata":{}}')
pub("stream", '{"name":"stdout","text":"overlong \192\175 and lone \237\160\128\\n"}')
print("utf8")]],
  check = function(out)
    T.contains(out, "utf8")
    -- accepted with U+FFFD in place of each bad byte; the host's notebook and replies stay UTF-8
    T.contains(out, "bad \239\191\189\239\191\189 bytes")
    T.contains(out, "overlong \239\191\189\239\191\189 and lone")
    T.ok(pcall(json.encode, out), "the output is not valid UTF-8")
  end,
}

kernel_attack{
  name = "deep JSON: 40 levels (past the host's limit) and 5000 levels (past the parser's)", class = 5,
  lua = [[
local function deep(n) return string.rep('{"a":', n) .. "1" .. string.rep("}", n) end
pub("display_data", '{"data":{"application/json":' .. deep(40) .. '},"metadata":{}}')
pub("display_data", '{"data":{"application/json":' .. deep(5000) .. '},"metadata":{}}')
pub("display_data", '{"data":{"text/plain":"x"},"metadata":' .. string.rep("[", 100000) .. string.rep("]", 100000) .. '}')
print("deep")]],
  check = function(out)
    T.contains(out, "deep")
    T.contains(out, "dropped 3 malformed messages")
  end,
}

kernel_attack{
  name = "forged replies: unknown msg_types, execute_reply on iopub, status for other msg_ids", class = 5,
  lua = [[
pub("execute_reply", '{"status":"ok","execution_count":99}')
pub("totally_unknown", '{}')
pub("input_request", '{"prompt":"x"}')
pub(string.rep("t", 1000), '{}')
pub("status", '{"execution_state":{"idle":true}}')
print("forged")]],
  check = function(out, _, res)
    T.contains(out, "forged")
    -- (a 1000-byte msg_type may not even leave the kernel: at least the other four are dropped)
    T.ok(tonumber(out:match("dropped (%d+) malformed messages") or 0) >= 4, "not all forged messages were dropped")
    T.ok(res.execution_count ~= 99, "a forged execute_reply on iopub set the count")
  end,
}

kernel_attack{
  name = "a flood of 8000 garbage messages from one cell", class = 5,
  lua = [[
for i = 1, 8000 do pub("stream", '{"name":' .. i .. '}') end
print("flooded")]],
  timeout = 120,
  check = function(out)
    -- iopub waits for the host instead of dropping (issue 19), so every garbage message arrives
    -- and is counted: 8000 keeps the session below SEER_NOTEBOOK_MAX_BAD_MESSAGES (10000) for
    -- the attacks after this one; past it is the test at the end of this file.
    T.contains(out, "dropped 8000 malformed messages")
    T.contains(out, "flooded", "the cell's own output after the flood arrives too")
  end,
}

-- Class 7: a process in the sandbox that has the kernel's key (its connection file is readable
-- there) sends a signed execute_request to the kernel, then the same frames again. The kernel
-- must run it once. The control (a fresh, re-signed request) runs, so the probe works.
A.attack{
  name = "a replayed signed execute_request to the kernel (key from its connection file)", class = 7,
  rig = RIG, vectors = { "exec/lua" },
  lua = [[
local net = require "seer.net"
local json = require "seer.json"
local conn
for pid in io.popen("ls /proc"):lines() do
  local f = io.open("/proc/" .. pid .. "/cmdline", "rb")
  local c = f and f:read("*a") or ""
  if f then f:close() end
  local file = c:match("kernel%z%-f%z([^%z]+)")
  if file then conn = file end
end
assert(conn, "no kernel found")
local info = json.decode(io.open(conn, "rb"):read("*a"))
local ep = ("ipc://%s-%d"):format(info.ip, info.shell_port)
-- each request that runs stores history, so its reply's execution_count is one more
local function request()
  return { header = net.header("execute_request", net.uuid()), parent_header = {}, metadata = {},
           content = { code = "x_replayed = (x_replayed or 0) + 1", silent = false, store_history = true,
                       user_expressions = {}, allow_stdin = false } }
end
-- raw frames, so the very same bytes (and signature) go out twice
local msg = request()
local h, c = json.encode(msg.header), json.encode(msg.content)
local sig = net.socket and require("seer.core.net").sign(info.key, h, "{}", "{}", c)
local raw = net.socket("dealer", "")
raw:connect(ep)
local frames = { "<IDS|MSG>", sig, h, "{}", "{}", c }
raw:send_frames(frames)
local signed = net.socket("dealer", info.key)
signed:connect(ep)
local function wait_reply(sock)
  local m = sock:recv(5000)
  return m
end
local first = raw:recv_frames(5000)
raw:send_frames(frames)           -- the replay
local second = raw:recv_frames(1500)
signed:send(request())            -- the control: a fresh request is run
local third = wait_reply(signed)
local c1 = first and json.decode(first[#first]).execution_count
local c3 = third and third.content.execution_count
print(("first=%s second=%s control=%s runs=%s"):format(tostring(first ~= nil), tostring(second ~= nil),
  tostring(third ~= nil), tostring(c1 and c3 and (c3 - c1 + 1))))
]],
  check = function(out)
    T.contains(out, "first=true")
    T.contains(out, "second=false") -- the replay was not answered
    T.contains(out, "control=true") -- a fresh request was
    T.contains(out, "runs=2")       -- first and control ran; the replay did not run in between
    assert_bystander(A.rig(RIG.name), "replay")
  end,
}

-- Class 5 against RPC: a `seer rpc serve` started inside the sandbox gets a signed call with 10^9
-- arguments (and other absurd ones); it answers an error and keeps serving.
A.attack{
  name = "an RPC request with 10^9 arguments, a billion-element tensor shape, 5000 args", class = 5,
  rig = RIG, vectors = { "exec/lua" }, timeout = 90,
  lua = [[
local net = require "seer.core.net"
local json = require "seer.json"
local wire = require "seer.rpc.wire"
local dir = "/tmp/rpc-" .. require("seer.net").uuid()
os.execute("mkdir -p " .. dir)
local fi = io.open(dir .. "/iface.lua", "w")
fi:write("---Adds.\n---@param a number\n---@param b number\nfunction add(a, b) return a + b end\nexpose(add)\n")
fi:close()
local key = require("seer.net").new_key()
wire.write_connection(dir .. "/conn.json", { key = key, endpoint = "ipc://" .. dir .. "/rpc", signature_scheme = "hmac-sha256" })
local p = io.popen("/opt/seer/bin/seer rpc serve " .. dir .. "/iface.lua --connection-file " .. dir .. "/conn.json > " .. dir .. "/log 2>&1 & echo $!")
local pid = p:read("*l"); p:close()
local info
for _ = 1, 100 do
  os.execute("sleep 0.1")
  local ok, i = pcall(wire.read_connection, dir .. "/conn.json")
  if ok and i.pid then info = i break end
end
assert(info, "the rpc server did not start")
local sock = net.socket("dealer", key)
sock:connect(info.endpoint)
local mk = wire.header_maker()
local function ask(content, bufs)
  sock:send(nil, mk("rpc_call_request"), "{}", "{}", content, bufs)
  local idents, _, _, _, c = sock:recv(10000)
  return idents and json.decode(c)
end
ask('{"fn":"add","args":[1,2]}')
local r1 = ask('{"fn":"add","args":[1,2],"nargs":1000000000}')
local r2 = ask('{"fn":"add","args":[{"$tensor":0,"dtype":"f32","shape":[100000,100000,100000]}]}', { "abcd" })
local r3 = ask('{"fn":"add","args":[' .. string.rep("1,", 5000) .. '1]}')
local r4 = ask('{"fn":"add","args":[20,22]}')
print(("r1=%s r2=%s r3=%s alive=%s"):format(r1 and r1.kind, r2 and r2.kind, r3 and r3.kind, r4 and tostring(r4.result)))
os.execute("kill " .. pid)
]],
  check = function(out)
    T.contains(out, "r1=bad_request")
    T.contains(out, "r2=bad_request")
    T.contains(out, "r3=bad_request")
    T.contains(out, "alive=42")
  end,
}

-- Outputs the per-cell limits once missed: error outputs (kept whole, uncounted) and display
-- metadata (not counted with the data). 18 x 16 MiB of each would have been 576 MiB kept in the
-- host server and its notebook; each is over the 16 MiB one output may hold, so errors are kept
-- shortened and displays become notices.
kernel_attack{
  name = "18 error outputs of 16 MiB text and 18 displays with 16 MiB of metadata", class = 5, timeout = 120,
  lua = [[
local json = require "seer.json"
local big = string.rep("E", 16 * 1048576)
for i = 1, 18 do pub("error", json.encode{ ename = "Big", evalue = big, traceback = { "first", big, "last" } }) end
big = string.rep("M", 16 * 1048576)
for i = 1, 18 do pub("display_data", json.encode{ data = { ["text/plain"] = "x" }, metadata = { pad = big }, transient = {} }) end
big = nil
collectgarbage()]],
  check = function(out)
    T.contains(out, "18 error outputs shortened to the name")
    T.contains(out, "18 display outputs over 16.0 MiB each, replaced by a notice")
    local r = A.rig(RIG.name)
    local f = assert(io.open(r.session:info().notebook_path, "rb"))
    local size = f:seek("end")
    f:close()
    T.ok(size < 16 * 1048576, ("the hostile session's notebook holds %.0f MiB"):format(size / 1048576))
  end,
}

-- Last, as it takes the hostile session's output channel down: one 100 MB frame on iopub. The
-- host refuses to buffer it (ZMQ disconnects the peer past 64 MiB); the cell still ends, with a
-- line saying the kernel's output went silent, and the bystander never notices.
kernel_attack{
  name = "a 100 MB stream frame on iopub", class = 5, timeout = 120,
  lua = [[
local big = '{"name":"stdout","text":"' .. string.rep("A", 100 * 1024 * 1024) .. '"}'
pub("stream", big)
big = nil
collectgarbage()
print("sent the frame")]],
  check = function(out, _, res)
    T.ok(not out:find("AAAAAAAAAA"), "the 100 MB text reached the host")
    T.ok(res ~= nil)
  end,
}

-- sandboxd runs inside the sandbox; one an agent took over (it can ptrace or replace its
-- children, and it holds the key) answers the host with whatever it likes. Played here by a
-- socket of this process with the key, answering seer.sandbox's client (the code the notebook
-- server uses): malformed and replayed replies are dropped and counted, the good reply gets
-- through, and a start_kernel connection that points outside the run folder is refused.
T.test("attack (class 5/7): a hostile sandboxd's malformed, replayed and path-escaping replies", function()
  local net = require "seer.net"
  local S = require "seer.sandbox"
  local nb = require "seer.cli.notebook"
  local key = net.new_key()
  local fake = net.socket("router", key)
  local ep = fake:bind("tcp://127.0.0.1:*")
  local client = S.connect{ endpoint = ep, key = key }
  local sandbox_run = "/run/seer"
  local last_good
  local function answer(replies)
    return function()
      local req = assert(fake:recv(5000), "the request did not arrive")
      for _, r in ipairs(replies) do
        if r == "replay" then fake:send_frames(last_good)
        else
          local content = r.content
          local h = r.header or net.header("start_kernel_reply", "fake")
          local p = r.parent or req.header
          if r.raw then
            local hj, pj = json.encode(h), json.encode(p)
            fake:send_frames({ req.idents[1], "<IDS|MSG>", require("seer.core.net").sign(key, hj, pj, "{}", r.raw),
                               hj, pj, "{}", r.raw })
          else
            fake:send{ idents = req.idents, header = h, parent_header = p, metadata = {}, content = content }
          end
        end
      end
    end
  end
  local good_conn = { transport = "ipc", ip = sandbox_run .. "/kernel-x", key = net.new_key(), shell_port = 1, iopub_port = 2,
                      stdin_port = 3, control_port = 4, hb_port = 5 }
  local bad = {
    { header = net.header("evil", "fake"), content = { status = "ok" } },                       -- not a reply
    { content = { status = 5 } },                                                               -- status of the wrong type
    { content = { status = "error", ename = { 1 }, evalue = "x" } },                            -- ename not a string
    { parent = { nothing = true }, content = { status = "ok" } },                               -- no parent msg_id
    { raw = "[1,2,3]" },                                                                        -- content not an object
    { raw = '{"status":"ok","text":"bad \255"' },                                              -- not JSON at all
  }
  -- First a good request, whose reply's frames are kept for the replay below.
  local frames_seen
  local plain_send_frames = fake.send_frames
  local r1 = client:request("start_kernel", { name = "k1" }, { timeout_ms = 5000, on_sent = function()
    local req = assert(fake:recv(5000))
    local h, p = json.encode(net.header("start_kernel_reply", "fake")), json.encode(req.header)
    local c = json.encode({ status = "ok", connection = good_conn })
    frames_seen = { req.idents[1], "<IDS|MSG>", require("seer.core.net").sign(key, h, p, "{}", c), h, p, "{}", c }
    plain_send_frames(fake, frames_seen)
  end })
  T.eq(r1.connection.ip, good_conn.ip)
  last_good = frames_seen
  local before = client.sock:dropped()
  local replies = {}
  for _, b in ipairs(bad) do replies[#replies + 1] = b end
  replies[#replies + 1] = "replay"
  replies[#replies + 1] = { content = { status = "ok", connection = { transport = "ipc", ip = sandbox_run .. "/../../home/x",
                                                                      key = good_conn.key, shell_port = 1, iopub_port = 2,
                                                                      stdin_port = 3, control_port = 4, hb_port = 5 } } }
  local r2 = client:request("start_kernel", { name = "k2" }, { timeout_ms = 5000, on_sent = answer(replies) })
  local dropped = client.sock:dropped() - before
  T.eq(dropped, #bad + 1, "every malformed reply and the replay were dropped")
  -- the reply that got through names a path outside the run folder: the notebook server refuses it
  T.contains(nb.check_connection(r2.connection, sandbox_run), "no plain file in the run folder")
  T.eq(nb.check_connection(good_conn, sandbox_run), nil)
  for _, c in ipairs({ 5, { transport = "tcp", ip = "127.0.0.1" }, { transport = "ipc", ip = "/etc/x" },
                       { transport = "ipc", ip = sandbox_run .. "/k", key = 5 },
                       { transport = "ipc", ip = sandbox_run .. "/k", key = good_conn.key, shell_port = 1e9 } }) do
    T.ok(nb.check_connection(c, sandbox_run) ~= nil, "accepted a bad connection")
  end
  client:close()
  fake:close()
end)

-- A kernel that keeps sending garbage is ended with a clear reason, and only its session is.
-- Its own notebook server (a child process with SEER_NOTEBOOK_MAX_BAD_MESSAGES=50) and local
-- kernels: the ending logic is the server's, whatever runs the kernel.
T.test("attack (class 5): a kernel past SEER_NOTEBOOK_MAX_BAD_MESSAGES is stopped; the bystander goes on", function()
  local dir = T.tmpdir()
  local script = dir .. "/flood.lua"
  local f = assert(io.open(script, "w"))
  f:write(([[
local ex = require "seer.execution"
local out = %q
local bad = ex.create_local_notebook_session(nil, { name = "flood", output_dir = out })
local by = ex.create_local_notebook_session(nil, { name = "by", output_dir = out })
local code = %q .. [==[
for i = 1, 300 do pub("stream", '{"name":' .. i .. '}') end
local t = os.time() while os.time() - t < 2 do end
print("still here")]==]
local r = bad:exec(code, { raise = false, timeout = 60 })
print("FLOOD", r.error and r.error.ename, r.error and r.error.evalue)
local info = bad:info()
print("STATE", info.state, info.dead_reason)
local b = by:exec("print(6 * 7)", { raise = false, timeout = 60 })
print("BYSTANDER", b.text)
bad:terminate() by:terminate()
]]):format(dir .. "/out", PRELUDE))
  f:close()
  local seer_bin = require("seer.jupyter").seer_binary()
  local p = io.popen(("SEER_NOTEBOOK_MAX_BAD_MESSAGES=50 SEER_LUA_DIR=%q %q %q 2>/dev/null"):format(
    os.getenv("SEER_LUA_DIR") or (seer.script_dir() .. "/../../lua"), seer_bin, script))
  local out = p:read("*a")
  p:close()
  T.contains(out, "FLOOD\tKernelDied")
  T.contains(out, "was stopped by the notebook server: it sent")
  T.contains(out, "STATE\tdead")
  T.contains(out, "BYSTANDER\t42")
  T.ok(not out:find("still here"), "the flooding kernel ran on")
end)

-- Agent code replaces sandboxd's socket in the run folder (writable inside) with an impostor,
-- then asks its scope for new sessions (what its MCP start_new_session does). The host's
-- request to "sandboxd" goes to the impostor. Silent, it must cost only that sandbox's starts
-- (each fails after sandboxd's timeout) while a bystander session on the same notebook server
-- runs cells at full speed; answering without the sandbox's key, it is found out at once.
local impostor_by
A.attack{
  name = "a silent impostor at /run/seer/sandboxd.sock, then new sessions asked of the scope, a bystander timed", class = 5,
  rig = { name = "msgs-impostor", config = { models = {} } }, vectors = { "exec/sh" }, timeout = 60,
  setup = function()
    impostor_by = require("seer.execution").create_local_notebook_session(nil, { name = "impostor-bystander", output_dir = A.root .. "/outputs/impostor-by" })
    impostor_by:exec("n = 0")
  end,
  sh = function(_, r)
    local fh = assert(io.open(r.sandbox.workspace_dir .. "/impostor.lua", "wb"))
    fh:write([[
local net, json = require "seer.net", require "seer.json"
os.remove("/run/seer/sandboxd.sock")
local s = net.raw_socket("router")
s:bind("ipc:///run/seer/sandboxd.sock")
print("IMPOSTOR-BOUND") io.stdout:flush()
local t0 = os.time()
while os.time() - t0 < 120 do
  local fr = s:recv_frames(200)
  local f = io.open("/workspace/impostor.mode")
  local mode = f and f:read("*l")
  if f then f:close() end
  -- silent, or a reply signed with a key that is not the sandbox's
  if fr and mode == "forge" and #fr >= 7 then
    s:send_raw({ fr[1], "<IDS|MSG>", string.rep("0", 64), json.encode(net.header("start_kernel_reply", "impostor")), fr[4], "{}",
                 '{"status":"ok"}' }, true)
  end
end]])
    fh:close()
    return "(/opt/seer/bin/seer /workspace/impostor.lua > /workspace/impostor.out 2>&1 &) ; sleep 1; cat /workspace/impostor.out"
  end,
  check = function(out)
    T.contains(out, "IMPOSTOR-BOUND", "the impostor holds the sandboxd socket path")
    local net, process = require "seer.net", require "seer.process"
    local r = A.rig("msgs-impostor")
    local env = r.session.mcp_config.notebook.env
    local sock = net.socket("dealer", env.SEER_NOTEBOOK_SCOPE_KEY)
    sock:connect(env.SEER_NOTEBOOK_ENDPOINT)
    local session = net.uuid()
    local function start()
      local h = net.header("start_session_request", session)
      sock:send{ header = h, parent_header = {}, metadata = {}, content = { like = r.session.session_id } }
      return h.msg_id
    end
    local pending, replies = {}, {}
    local function collect()
      while true do
        local m = sock:recv(0)
        if not m then return end
        local id = m.parent_header.msg_id
        if pending[id] then replies[#replies + 1] = { content = m.content, ms = process.now_ms() - pending[id] } pending[id] = nil end
      end
    end
    for _ = 1, 3 do pending[start()] = process.now_ms() end
    local worst, cells, t0, took = 0, 0, process.now_ms(), {}
    while #replies < 3 and process.now_ms() - t0 < 30000 do
      local t = process.now_ms()
      local res = impostor_by:exec("n = n + 1; print(n)", { raise = false, timeout = 60 })
      took[#took + 1] = process.now_ms() - t
      worst = math.max(worst, took[#took])
      cells = cells + 1
      T.eq(res.text, tostring(cells) .. "\n", "the bystander's cell " .. cells)
      collect()
      process.sleep_ms(100)
    end
    table.sort(took)
    local median = took[math.max(1, math.ceil(#took / 2))] or 0
    print(("    %d bystander cells while 3 starts waited on the impostor: median %d ms, the slowest %d ms"):format(cells, median, worst))
    -- Full speed is a few ms a cell, and the typical cell, not the slowest, carries the check:
    -- now and then one cell takes 0.5-1.2 s on this 2-vCPU VM (seen twice in some twenty runs;
    -- eight runs with every cell timed had their slowest at 7-64 ms), and `make attack` failed once
    -- on a 1000 ms bound on the slowest. A server that waited on the impostor in its loop slows
    -- every cell (a poll's slice at each turn) or blocks them for sandboxd's 15 s: the median and
    -- the 5 s bound on the slowest catch those.
    T.ok(median < 50, ("the median bystander cell took %d ms while the scope's starts waited on the impostor"):format(median))
    T.ok(worst < 5000, ("a bystander cell took %d ms while the scope's starts waited on the impostor"):format(worst))
    T.eq(#replies, 3, "every start_session was answered")
    for _, rep in ipairs(replies) do
      T.eq(rep.content.status, "error")
      T.contains(tostring(rep.content.evalue), "no answer from sandboxd within 15000 ms")
    end
    -- the sandbox's own session (its kernel's connection was made before) goes on
    T.eq(r.session:exec("print(6 * 7)").text, "42\n")
    -- an impostor that answers, without the sandbox's key: found out at once, not by timeout
    local mf = assert(io.open(r.sandbox.workspace_dir .. "/impostor.mode", "wb"))
    mf:write("forge\n")
    mf:close()
    local id = start()
    pending[id] = process.now_ms()
    local t = process.now_ms()
    while pending[id] and process.now_ms() - t < 20000 do net.poll({ sock }, 100) collect() end
    local last = replies[#replies]
    T.ok(not pending[id], "the start was answered")
    T.ok(last.ms < 3000, ("a forged reply was found out after %d ms"):format(last.ms))
    T.contains(tostring(last.content.evalue), "is not sandboxd")
    T.eq(impostor_by:exec("print(n)").text, tostring(cells) .. "\n")
    sock:close()
    impostor_by:terminate()
  end,
}

T.test("msgs attack suite: the rig closes", function()
  if bystander then pcall(bystander.terminate, bystander) end
  A.close()
end)
