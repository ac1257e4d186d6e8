-- seer.rpc end to end: `seer rpc serve` on stories260K called from Lua (model info, embedding as
-- a list and as a tensor frame, generation), the library/prompt/skill outputs, errors with the
-- remote traceback, unserializable results naming the field, binary arguments, timeouts and
-- cancellation, load errors and crashes reported at once, forged and unsigned requests, and
-- unexposed names out of reach.
local T = require "testing"
local rpc = require "seer.rpc"
local json = require "seer.json"
local net = require "seer.net"
local wire = require "seer.rpc.wire"

local root = require("seer.core.host").lua_dir():gsub("/lua$", "")
local fixtures = root .. "/tests/fixtures/rpc/"
local models = { stories260K = root .. "/tests/fixtures/models/stories260K" }

local iface, misc
local function iface_server()
  iface = iface or rpc.serve_local(fixtures .. "interface.lua", { models = models, name = "model_tools" })
  return iface
end
local function misc_server()
  misc = misc or rpc.serve_local(fixtures .. "misc.lua", { transport = "tcp" })
  return misc
end

T.test("rpc: stories260K interface called from Lua", function()
  local s = iface_server()
  local info = s:call("get_model_info")
  T.eq(info.num_layers, 5)
  T.eq(info.hidden_size, 64)
  T.eq(info.vocab_size, 512)
  -- state persists between calls (the file ran once)
  T.eq(s:call("get_model_info").calls, info.calls + 1)
  local e = s:call("get_embedding", "Once upon a time")
  T.eq(e.dims, 64)
  T.eq(#e.embedding, 64)
  -- the same embedding as a tensor travels as a binary frame and matches the list
  local t = s:call("get_embedding", "Once upon a time", true)
  T.ok(seer.tensor.is_tensor(t))
  T.eq(t:size(1), 64)
  T.eq(t:dtype(), "f32")
  for i = 1, 64 do T.near(t[i], e.embedding[i], 1e-6) end
  -- generation agrees with the model loaded here
  local m = seer.model.load(models.stories260K)
  T.eq(s:call("generate", "Once upon a time", 8), m:generate("Once upon a time", { max_new_tokens = 8, temperature = 0 }).text)
  T.eq(s:call_kw("generate", { prompt = "Once upon a time", max_new_tokens = 8 }),
       m:generate("Once upon a time", { max_new_tokens = 8, temperature = 0 }).text)
  T.eq(s:call("show_models"), { stories260K = models.stories260K })
end)

T.test("rpc: functions, schemas and docs from the LuaCATS annotations", function()
  local s = iface_server()
  local names = {}
  for _, f in ipairs(s:functions()) do names[#names + 1] = f.name end
  T.eq(names, { "get_model_info", "get_embedding", "generate", "show_models" })
  local emb = s:functions()[2]
  T.eq(emb.description, "The mean of the last layer's hidden states over the tokens of text.")
  T.eq(emb.signature, "get_embedding(text: string, as_tensor?: boolean) -> table")
  T.eq(emb.input_schema.properties.text, { type = "string", description = "the text to embed" })
  T.eq(emb.input_schema.required, { "text" })
  T.eq(emb.input_schema.additionalProperties, false)
  T.eq(#emb.warnings, 0)
  T.eq(s:functions()[3].input_schema.properties.max_new_tokens.type, "integer")
  -- missing annotations are warnings, and the parameter has no made-up type
  local m = misc_server()
  local und
  for _, f in ipairs(m:functions()) do if f.name == "undocumented" then und = f end end
  T.eq(und.input_schema.properties.x, {})
  T.contains(table.concat(und.warnings, "\n"), "parameter x has no ---@param annotation")
  T.contains(table.concat(und.warnings, "\n"), "no description")
  T.contains(m:logs(), "warning: undocumented: parameter x has no ---@param")
end)

T.test("rpc: library, prompt and skill outputs", function()
  local s = iface_server()
  local prompt = s:prompt()
  T.contains(prompt, "## model_tools")
  T.contains(prompt, "### model_tools.get_embedding(text: string, as_tensor?: boolean) -> table")
  T.contains(prompt, "- `text` (string): the text to embed")
  T.contains(prompt, "Greedy continuation of a prompt.")
  local lib = s:library()
  T.eq(getmetatable(lib), seer.workspace.Library)
  T.eq(lib.name, "model_tools")
  local code = lib.files["model_tools.lua"]
  T.contains(code, "---The mean of the last layer's hidden states over the tokens of text.")
  T.contains(code, "---@param text string the text to embed")
  T.contains(code, "function M.get_embedding(text, as_tensor)")
  -- the module works: install it and require it in a fresh process
  local dir = T.tmpdir()
  lib:install(dir)
  local out = io.popen(("cd '%s' && '%s' -e 'local t = require \"model_tools\"; print(t.get_model_info().hidden_size, t.generate(\"Once\", 4))' 2>&1")
    :format(dir, require("seer.jupyter").seer_binary())):read("*a")
  T.contains(out, "64\t")
  local ws = seer.workspace.Workspace{ libraries = { lib } }
  T.contains(ws:get_library_docs(), "# Available Libraries\n\n## model_tools\n\n")
  T.contains(ws:get_library_docs(), "get_model_info() -> table")
  local skill = s:skill()
  T.eq(getmetatable(skill), seer.workspace.Skill)
  T.contains(skill.files["SKILL.md"], "---\nname: model_tools\ndescription: Functions get_model_info, get_embedding, generate, show_models")
  T.contains(skill.files["SKILL.md"], "### model_tools.generate(prompt: string, max_new_tokens?: integer) -> string")
  T.ok(skill.files["model_tools.lua"])
  local mcp = s:mcp_config()
  T.eq(mcp.model_tools.type, "stdio")
  T.eq({ mcp.model_tools.args[1], mcp.model_tools.args[2] }, { "mcp", "rpc" })
end)

T.test("rpc: serve() by expose_as, twice under different names", function()
  local lib, s1 = rpc.serve(fixtures .. "misc.lua", { expose_as = "library", name = "tools_a" })
  local text, s2 = rpc.serve(fixtures .. "misc.lua", { expose_as = "prompt", name = "tools_b" })
  local cfg, s3 = rpc.serve(fixtures .. "misc.lua", { expose_as = "mcp", name = "tools_c" })
  local skill, s4 = rpc.serve(fixtures .. "misc.lua", { expose_as = "skill", name = "tools_d" })
  T.eq(lib.name, "tools_a")
  T.contains(text, "## tools_b")
  T.ok(cfg.tools_c)
  T.eq(skill.name, "tools_d")
  T.eq(s1:call("add", 1, 2), 3)
  T.eq(s2:call("add", 3, 4), 7)
  T.ne(s1.connection_file, s2.connection_file)
  T.raises(function() rpc.serve(fixtures .. "misc.lua", { expose_as = "notebook" }) end, 'expose_as must be "library"')
  for _, s in ipairs{ s1, s2, s3, s4 } do s:close() end
end)

T.test("rpc: errors carry the remote traceback; unserializable results name the field", function()
  local s = misc_server()
  local msg = T.raises(function() s:call("fail", "x") end, "boom: x")
  T.contains(msg, "remote traceback:")
  T.contains(msg, "misc.lua:")
  T.contains(msg, "in function 'inner'")
  T.ok(not msg:find("seer/rpc/server.lua", 1, true), "the server's own frames are not in the remote traceback:\n" .. msg)
  msg = T.raises(function() s:call("unserializable") end, "cannot be sent")
  T.contains(msg, "result.rows[2].fn is a function")
  T.raises(function() s:call("nope") end, 'no exposed function "nope"')
  T.raises(function() s:call_kw("add", { a = 1, c = 2 }) end, 'add has no parameter "c"')
  -- the server keeps serving after errors
  T.eq(s:call("add", 2, 3), 5)
end)

T.test("rpc wire: every shape of table that is not JSON names its problem", function()
  local function err(v) return T.raises(function() wire.encode(v, "result", {}) end) end
  local cases = {
    { { 1, nil, 3 }, "result[2] is a hole in an array (use json.null" },
    { { a = { 1, nil, 3 } }, "result.a[2] is a hole in an array" },
    { { [3] = 1 }, "result[1] is a hole in an array" },
    { { [1] = 1, [1e15] = 2 }, "result[2] is a hole in an array" },
    { { 1, 2, x = 3 }, "result mixes array items (result[2]) and string keys (result.x)" },
    { { [1.5] = 1 }, "result[1.5] has a number key that is not an array index" },
    { { [0] = 1, 2 }, "result[0] has a number key that is not an array index" },
    { { [-1] = "a" }, "result[-1] has a number key that is not an array index" },
    { { x = 1, [true] = 2 }, "result[true] has a boolean key" },
  }
  for _, c in ipairs(cases) do
    local msg = err(c[1])
    T.contains(msg, c[2])
    T.ok(not msg:find("in a table with string keys", 1, true), msg)
  end
  -- the good shapes still pass
  T.eq(wire.encode({ 1, json.null, 3 }, "result", {}), "[1,null,3]")
  T.eq(wire.encode(json.array{}, "result", {}), "[]")
  T.eq(wire.encode({}, "result", {}), "{}")
  T.eq(json.decode(wire.encode({ a = { 1, 2 }, b = "x" }, "result", {})).a[2], 2)
end)

T.test("rpc: values round trip: nil holes, multiple results, binary strings, tensors, 1 MB", function()
  local s = misc_server()
  local a, b, c = s:call("echo", 1, nil, "three")
  T.eq({ a, b, c }, { 1, nil, "three" })
  T.eq(s:call("echo", { x = { 1, 2, { y = true } }, s = "é" }), { x = { 1, 2, { y = true } }, s = "é" })
  local bin = "\0\1\2\255binary"
  T.eq(s:call("echo", bin), bin)
  local big = string.rep("abcdefgh", 128 * 1024)
  T.eq(s:call("len", big), #big)
  T.eq(s:call("echo", big), big)
  local t = seer.tensor.arange(0, 12):view(3, 4)
  T.eq(s:call("tensor_sum", t), 66)
  local back = s:call("echo", { t = t:to("bf16") })
  T.eq(back.t:dtype(), "bf16")
  T.eq(back.t:size(), { 3, 4 })
  T.eq(back.t:float():totable(), t:totable())
  -- scalars take the C fast path both ways; each must come back as it went
  for _, v in ipairs{ 0, -1, 0.1, 1 / 3, 2^53 + 2, -2^63, 1e300, -1e-300, "", "plain", 'quote " and \\ backslash',
                      "line\nbreak\ttab", "é ü 中文 😀", "\1\31", true, false } do
    T.eq(s:call("echo", v), v, ("echo of %q"):format(tostring(v)))
  end
  T.eq(1 / s:call("echo", -0), -math.huge, "-0 keeps its sign")
  T.eq(s:call("echo"), nil)
  T.eq(s:call("echo", nil), nil)
  T.eq(s:call("add", 2^52, 1), 2^52 + 1)
  T.raises(function() s:call("echo", { f = print }) end, "args%[1%]%.f is a function")
  T.raises(function() s:call("echo", 0 / 0) end, "JSON has no NaN")
end)

T.test("rpc: per-call timeout and cancellation interrupt the call; the server goes on", function()
  local s = misc_server()
  local t0 = seer.now()
  local reply = s.client:invoke("spin", { 30 }, 1, nil, { timeout = 0.3 })
  T.eq(reply.ok, false)
  T.eq(reply.kind, "timeout")
  T.contains(reply.error, "spin timed out after 300 ms")
  T.ok(seer.now() - t0 < 5, "the timeout took " .. (seer.now() - t0))
  local id = s.client:send_call("spin", { 30 }, 1)
  require("seer.process").sleep_ms(100)
  s.client:cancel(id)
  local content = s.client:wait_reply(id, 5000)
  T.eq(content.kind, "cancelled")
  T.eq(s:call("add", 1, 1), 2)
end)

T.test("rpc: a client by connection file (no process of its own) fails a call in flight when the server is killed", function()
  local s = rpc.serve_local(fixtures .. "misc.lua", { name = "doomed" })
  s:call("add", 1, 1) -- loaded
  local c = rpc.connect(s.connection_file, { name = "doomed" }) -- as seer mcp rpc connects: no process
  local id = c:send_call("spin", { 30 }, 1)
  require("seer.process").sleep_ms(300)
  s.proc.kill(9)
  local t0 = seer.now()
  local ok, err = pcall(c.wait_reply, c, id, 20000)
  T.ok(not ok, "the wait raises")
  T.contains(tostring(err), "the doomed server has ended while running spin")
  T.ok(seer.now() - t0 < 6, ("it took %.1f s (it waited for ever: there was no per-call timeout)"):format(seer.now() - t0))
  c:close()
  pcall(s.close, s)
end)

T.test("rpc: a load error and a crash are reported at once, with the error", function()
  local t0 = seer.now()
  local msg = T.raises(function() rpc.serve_local(fixtures .. "broken.lua") end, "failed to load")
  T.contains(msg, "cannot load the model: weights are missing")
  T.contains(msg, "in function 'load_model'")
  msg = T.raises(function() rpc.serve_local(fixtures .. "crash.lua") end, "killed by SIGKILL")
  T.ok(seer.now() - t0 < 10, "took " .. (seer.now() - t0) .. " s")
end)

T.test("rpc: forged and unsigned requests are dropped; only exposed functions are reachable", function()
  local s = misc_server()
  local info = wire.read_connection(s.connection_file)
  local function try(key, content, signed_key)
    local sock = require("seer.core.net").socket("dealer", key)
    sock:connect(info.endpoint)
    local h = wire.header_maker()("rpc_call_request")
    sock:send(nil, h, "{}", "{}", content, nil)
    local idents, _, _, _, c = sock:recv(1500)
    sock:close()
    return idents and json.decode(c)
  end
  local dropped = net.dropped()
  T.eq(try("", '{"fn":"add","args":[1,2]}'), nil, "unsigned")
  T.eq(try(net.new_key(), '{"fn":"add","args":[1,2]}'), nil, "wrong key")
  T.eq(try(info.key, '{"fn":"add","args":[1,2]}').result, 3, "the right key works")
  for _, name in ipairs{ "not_exposed", "hidden_value", "expose", "get_model_path", "print", "os", "_G", "__index" } do
    local r = try(info.key, json.encode{ fn = name })
    T.eq(r.ok, false, name)
    T.eq(r.kind, "not_found", name)
  end
  -- a replayed signed message is dropped
  local sock = require("seer.core.net").socket("dealer", info.key)
  sock:connect(info.endpoint)
  local h = wire.header_maker()("rpc_call_request")
  sock:send(nil, h, "{}", "{}", '{"fn":"add","args":[1,2]}', nil)
  T.ok(sock:recv(2000))
  sock:send(nil, h, "{}", "{}", '{"fn":"add","args":[5,5]}', nil)
  T.eq(sock:recv(800), nil, "replay answered")
  sock:close()
  T.contains(s:logs(), "a replayed msg_id")
  T.ok(net.dropped() >= dropped, "drop counter")
end)

T.test("rpc: signed but absurd requests get an error and the server goes on (issue 18, class 5)", function()
  local s = misc_server()
  local info = wire.read_connection(s.connection_file)
  local sock = require("seer.core.net").socket("dealer", info.key)
  sock:connect(info.endpoint)
  local mk = wire.header_maker()
  local function ask(content, bufs)
    sock:send(nil, mk("rpc_call_request"), "{}", "{}", content, bufs)
    local idents, _, _, _, c = sock:recv(5000)
    T.ok(idents, "the server answered " .. content:sub(1, 60))
    return json.decode(c)
  end
  local deep = string.rep("[", 900) .. string.rep("]", 900)
  local cases = {
    { '{"fn":"add","args":[1,2],"nargs":1000000000}', "nargs must be an integer from 0 to 200" },
    { '{"fn":"add","args":[' .. string.rep("1,", 5000) .. '1]}', "at most 200 arguments" },
    { '{"fn":"add","args":[1,2],"nargs":-3}', "nargs must be" },
    { '{"fn":"add","args":[1,2],"nargs":"x"}', "nargs must be" },
    { '{"fn":"echo","args":[' .. deep .. ']}', nil },
    { '{"fn":"echo","args":[{"$tensor":0,"dtype":"f32","shape":[1000000000,1000000000]}]}', "needs", { "abcd" } },
    { '{"fn":"echo","args":[{"$tensor":0,"dtype":"f32","shape":' .. string.rep("[", 50) .. string.rep("]", 50) .. '}]}', "shape", { "abcd" } },
    { '{"fn":"echo","args":[{"$tensor":0,"dtype":"evil","shape":[1]}]}', "dtype", { "abcd" } },
    { '{"fn":"echo","args":[{"$bytes":0.5}]}', "index", { "abcd" } },
    { '{"fn":"echo","args":[{"$bytes":99}]}', "binary frame 99", { "abcd" } },
    { '{"fn":"add","kwargs":[1,2]}', nil },
    -- a deadline C would cast to an integer: 1e300 is undefined behaviour there (the C fast path
    -- hands it to Lua, which answers bad_request), and a string or a negative number is no deadline
    { '{"fn":"add","args":[1,2],"timeout_ms":1e300}', "timeout_ms must be a number of milliseconds from 0 (none) to 1e15" },
    { '{"fn":"add","args":[1,2],"timeout_ms":-5}', "timeout_ms must be a number of milliseconds" },
    { '{"fn":"add","args":[1,2],"timeout_ms":"500"}', "got 500" },
    { '{"fn":"add","kwargs":{"a":1,"b":2},"timeout_ms":1e300}', "timeout_ms must be a number of milliseconds" },
  }
  for _, case in ipairs(cases) do
    local r = ask(case[1], case[3])
    if case[2] then
      T.eq(r.ok, false, case[1]:sub(1, 80))
      T.contains(r.error, case[2])
    end
    T.eq(ask('{"fn":"add","args":[2,3]}').result, 5, "the server still works after " .. case[1]:sub(1, 60))
  end
  -- a byte-identical replay (same header, same content, same signature) is refused by the
  -- shared MAC history before the server's msg_id guard even sees it
  local h = mk("rpc_call_request")
  sock:send(nil, h, "{}", "{}", '{"fn":"add","args":[1,1]}', nil)
  T.ok(sock:recv(2000), "the first one is answered")
  sock:send(nil, h, "{}", "{}", '{"fn":"add","args":[1,1]}', nil)
  T.eq(sock:recv(800), nil, "the replay is not answered")
  T.contains(s:logs(), "a replay (a signature accepted before)")
  sock:close()
  T.eq(s:call("add", 1, 1), 2)
end)

-- Two calls sent at once, each sleeping `secs`: how long until both answered, and the pids.
local function overlap(s, secs)
  local t0 = seer.now()
  local ids = { s.client:send_call("nap", { secs }, 1), s.client:send_call("nap", { secs }, 1) }
  local pids = {}
  for i, id in ipairs(ids) do
    local c = s.client:wait_reply(id, 10000)
    T.ok(c and c.ok, "nap answered")
    pids[i] = c.result
  end
  return seer.now() - t0, pids
end

T.test("rpc: calls are serialized by default; --workers 2 runs two at once", function()
  local one = rpc.serve_local(fixtures .. "pool.lua", { name = "pool_one" })
  local took1, pids1 = overlap(one, 0.4)
  T.ok(took1 >= 0.78, ("one worker: two 0.4 s naps took %.2f s, expected them one after the other"):format(took1))
  T.eq(pids1[1], pids1[2])
  T.eq(one.client.spec.workers, 1)
  one:close()
  local two = rpc.serve_local(fixtures .. "pool.lua", { name = "pool_two", workers = 2 })
  T.eq(two.client.spec.workers, 2)
  T.eq(#two:functions(), 4)
  local took2, pids2 = overlap(two, 0.4)
  T.ok(took2 < 0.7, ("two workers: two 0.4 s naps took %.2f s, expected them side by side"):format(took2))
  T.ne(pids2[1], pids2[2], "two worker processes")
  T.ne(pids2[1], two.proc.pid, "calls run in the workers, not in the broker")
  -- plain and general calls, errors with their traceback, through the broker
  T.eq(two:call("pid") ~= nil, true)
  T.raises(function() two:call("nope") end, 'no exposed function "nope"')
  T.raises(function() two:call_kw("nap", { seconds = 0, x = 1 }) end, 'nap has no parameter "x"')
  -- cancellation and deadlines per call, under the pool
  local id = two.client:send_call("spin", { 30 }, 1)
  require("seer.process").sleep_ms(100)
  two.client:cancel(id)
  local c = two.client:wait_reply(id, 5000)
  T.eq(c.kind, "cancelled")
  local r = two.client:invoke("spin", { 30 }, 1, nil, { timeout = 0.3 })
  T.eq(r.kind, "timeout")
  T.contains(r.error, "spin timed out after 300 ms")
  -- a call still queued (both workers busy) is cancelled without running
  local busy = { two.client:send_call("nap", { 0.5 }, 1), two.client:send_call("nap", { 0.5 }, 1) }
  local queued = two.client:send_call("nap", { 0.5 }, 1)
  require("seer.process").sleep_ms(100)
  two.client:cancel(queued)
  c = two.client:wait_reply(queued, 5000)
  T.eq(c.kind, "cancelled")
  T.contains(c.error, "nap was cancelled before it started")
  for _, b in ipairs(busy) do T.ok(two.client:wait_reply(b, 5000).ok) end
  -- a worker that dies in a call: that call fails at once, saying how; a new worker takes over
  local t0 = seer.now()
  local crashed = two.client:invoke("crash", {}, 0)
  T.eq(crashed.ok, false)
  T.eq(crashed.kind, "crashed")
  T.contains(crashed.error, "crash: the worker process running it")
  T.contains(crashed.error, "was killed by SIGKILL")
  T.ok(seer.now() - t0 < 5, "the crash was reported after " .. (seer.now() - t0) .. " s")
  T.raises(function() two:call("crash") end, "killed by SIGKILL")
  T.eq(type(two:call("pid")), "number")
  local deadline = seer.now() + 10
  local took3
  repeat took3 = overlap(two, 0.3) until took3 < 0.55 or seer.now() > deadline
  T.ok(took3 < 0.55, ("after the crash, two 0.3 s naps took %.2f s: the worker was not replaced"):format(took3))
  T.contains(two:logs(), "worker")
  T.contains(two:logs(), "replaced")
  two:close()
  T.ok(two.proc.wait(0), "the broker ended")
end)

T.test("rpc: a pool whose interface fails to load reports it at once", function()
  local t0 = seer.now()
  local msg = T.raises(function() rpc.serve_local(fixtures .. "broken.lua", { workers = 2 }) end, "failed to load")
  T.contains(msg, "cannot load the model: weights are missing")
  T.contains(msg, "in function 'load_model'")
  msg = T.raises(function() rpc.serve_local(fixtures .. "crash.lua", { workers = 2 }) end, "killed by SIGKILL")
  T.contains(msg, "while loading the interface")
  T.ok(seer.now() - t0 < 10, "took " .. (seer.now() - t0) .. " s")
end)

T.test("rpc: a server that answers with a message past max_reply_bytes is cut; the call fails saying so, and the host stays small", function()
  -- a hostile scoped server (it runs in the sandbox and speaks ZMTP itself): after the request
  -- it sends one message that never ends, 1 MiB frames with MORE (tests/lua/zmtp_peer.lua)
  local process = require "seer.process"
  local dir = process.mkdtemp("/tmp/seer-test-rpc-guard-")
  local path = dir .. "/rpc.sock"
  local p = process.spawn{ argv = { require("seer.jupyter").seer_binary(), root .. "/tests/lua/zmtp_peer.lua", path,
                                    "flood-after", "300", tostring(1024 * 1024) }, stdout = "pipe" }
  T.eq(p:read_line(10000), "listening")
  local function rss()
    for l in io.lines("/proc/self/status") do
      local v = l:match("^VmRSS:%s+(%d+)")
      if v then return tonumber(v) * 1024 end
    end
  end
  local before = rss()
  T.raises(function() rpc.connect({ endpoint = "ipc://" .. path, key = "k" }, { max_reply_bytes = 10 }) end,
    "max_reply_bytes must be an integer from 1024")
  local c = rpc.connect({ endpoint = "ipc://" .. path, key = "k" }, { name = "evil", max_reply_bytes = 4 * 1024 * 1024 })
  local t0 = seer.now()
  local msg = T.raises(function() c:invoke("get_model_info", nil, 0, nil, { timeout = 20 }) end, "the reply to get_model_info was lost")
  T.contains(msg, "a message of more than 4194304 bytes")
  T.contains(msg, "max_reply_bytes")
  T.ok(seer.now() - t0 < 5, ("the call failed after %.1f s"):format(seer.now() - t0))
  local sent = tonumber((p:read_line(10000) or ""):match("^sent (%d+)$"))
  T.ok(sent and sent < 300, ("the server got %s frames of 1 MiB through"):format(tostring(sent)))
  T.ok(rss() - before < 64 * 1024 * 1024, ("the host grew by %.0f MiB"):format((rss() - before) / 1048576))
  c.nsock:close()
  p:kill(9)
  p:wait(2000)
  os.execute("rm -rf " .. dir)
end)

T.test("rpc: a connection file's socket beneath the run folder is reached with no link followed on the way (a folder swapped for a link)", function()
  local net = require "seer.net"
  local run = T.tmpdir()
  local hostonly = T.tmpdir()
  os.execute(("mkdir -p '%s/rpc/real' && chmod 700 '%s'"):format(run, hostonly))
  local key = ("ab"):rep(16)
  -- a host-only service, and a real server in the run folder, both listening
  local secret = net.socket("router", key)
  secret:bind("ipc://" .. hostonly .. "/s.sock")
  local real = net.socket("router", key)
  real:bind("ipc://" .. run .. "/rpc/real/s.sock")
  -- what code in the sandbox can do in its run folder: a folder that is a link to the host's
  os.execute(("ln -s '%s' '%s/rpc/evil'"):format(hostonly, run))
  local root = require("seer.safe_fs").root(run, "the sandbox's run folder")
  local function conn(ep)
    seer.write_file(run .. "/rpc/x.json", json.encode{ key = key, signature_scheme = "hmac-sha256", transport = "ipc",
      endpoint = "ipc://" .. ep, name = "x", pid = require("seer.process").getpid() })
    return run .. "/rpc/x.json"
  end
  local ok, err = pcall(rpc.connect, conn(run .. "/rpc/evil/s.sock"), { root = root, name = "scoped" })
  T.ok(not ok, "a link in a folder of the path is refused")
  T.contains(tostring(err), "evil on the way is a link or not a folder; not followed")
  T.eq({ secret:recv(300) }, { nil, "timeout" })
  -- a real subfolder works; swapping it for a link afterwards does not redirect a reconnect
  local c = rpc.connect(conn(run .. "/rpc/real/s.sock"), { root = root, name = "scoped" })
  c:send_call("f", { "first" })
  T.ok(real:recv(5000), "the real server gets the call")
  os.execute(("mv '%s/rpc/real' '%s/rpc/moved' && ln -s '%s' '%s/rpc/real'"):format(run, run, hostonly, run))
  real:close() -- the server goes away: the client reconnects by the path it was given
  require("seer.process").sleep_ms(600)
  pcall(c.send_call, c, "f", { "second" })
  T.eq({ secret:recv(1500) }, { nil, "timeout" }, "the host-only service gets nothing")
  c:close()
  secret:close()
end)

T.test("rpc: a killed process's connection-file copy (it holds a key) is swept by the next one; planted names are left alone", function()
  local process = require "seer.process"
  local c = process.spawn{ argv = { "true" } }
  c:wait(5000)
  local dead_pid = c.pid -- ended, and reaped
  local dead = ("/tmp/seer-rpclib-%d-abcdef"):format(dead_pid)
  local live = ("/tmp/seer-rpclib-%d-abcdef"):format(process.getpid())
  local other = ("/tmp/seer-rpclib-%d-otheruser"):format(dead_pid)
  local planted = { "/tmp/seer-rpclib-0-x", "/tmp/seer-rpclib-99999999999999999999-x" }
  for _, d in ipairs({ dead, live, other, planted[1], planted[2] }) do
    os.execute(("mkdir -p '%s' && echo '{\"key\":\"k\"}' > '%s/x.json'"):format(d, d))
  end
  os.execute(("chown -R 65534 '%s' 2>/dev/null"):format(other)) -- another user's (when run as root)
  local ok, err = pcall(rpc._sweep_rpclib_dirs)
  T.ok(ok, "a planted name that is no pid does not make the sweep fail: " .. tostring(err))
  T.eq(io.open(dead .. "/x.json"), nil, "the dead process's copy is removed")
  T.ok(io.open(live .. "/x.json"), "a live process's copy is kept")
  T.ok(io.open(planted[1] .. "/x.json") and io.open(planted[2] .. "/x.json"), "names that are no pid are left alone")
  local is_root = io.popen("id -u"):read("*l") == "0"
  if is_root then T.ok(io.open(other .. "/x.json"), "another user's folder is left alone") end
  for _, d in ipairs({ live, other, planted[1], planted[2] }) do os.execute("rm -rf '" .. d .. "'") end
end)

T.test("rpc: close stops the servers", function()
  for _, s in ipairs{ iface, misc } do
    if s then
      s:close()
      T.ok(s.proc.wait(0), "the server process ended")
    end
  end
  iface, misc = nil, nil
end)
