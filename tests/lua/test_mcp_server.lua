-- The MCP server core in process (no child processes): line splitting with the 16 MiB limit,
-- argument checking against tool schemas, the JSON-RPC answers, tool tasks that wait and get
-- cancelled, progress, and how notebook outputs become MCP content (text, errors, images).
local T = require "testing"
local json = require "seer.json"
local server = require "seer.mcp.server"
local tools = require "seer.mcp.notebook_tools"

-- Runs the server's loop for ms milliseconds.
local function run_for(srv, ms)
  local host = require "seer.core.host"
  local t0 = host.now()
  while (host.now() - t0) * 1000 < ms do srv:step(ms) end
end

local function new_server()
  local logs = {}
  local srv = server.new{ name = "t", version = "1", log = function(l) logs[#logs + 1] = l end }
  srv:add_tool{ name = "echo", description = "echo", annotations = { readOnlyHint = true },
    inputSchema = { type = "object", additionalProperties = false, required = { "text" },
                    properties = { text = { type = "string" }, n = { type = "integer", minimum = 0 },
                                   mode = { type = "string", enum = { "a", "b" } } } },
    run = function(ctx, a) return a.text .. (a.n and (" " .. a.n) or "") end }
  srv:add_tool{ name = "fail", description = "fails", inputSchema = { type = "object", properties = {} },
    run = function() error("it broke", 0) end }
  local released = false
  srv:add_tool{ name = "wait", description = "waits until released", inputSchema = { type = "object", properties = {} },
    run = function(ctx)
      ctx:on_cancel(function() released = "cancelled" end)
      while not released do srv:sleep(5) end
      return "released"
    end }
  local out = {}
  local sess = srv:new_session("test")
  local function send_text(text) srv:handle_text(sess, text, function(m) out[#out + 1] = json.decode(server.encode(m)) end) end
  local function req(id, method, params)
    send_text(json.encode{ jsonrpc = "2.0", id = id, method = method, params = params })
    return out[#out]
  end
  return { srv = srv, sess = sess, out = out, send_text = send_text, req = req, logs = logs,
           release = function() released = true end, released = function() return released end }
end

T.test("mcp: lines are split at newlines; an over-long one is dropped and reported", function()
  local lines, over = {}, {}
  local r = server.line_reader(10, function(l) lines[#lines + 1] = l end, function(n) over[#over + 1] = n end)
  r.feed("ab")
  r.feed("c\nde\n")
  r.feed("0123456789")      -- exactly the limit, no newline yet
  r.feed("\n")
  r.feed("0123456789abc")   -- over the limit: dropped up to its newline
  r.feed("def\nok\n")
  r.feed("01234567890\n")   -- over the limit within one chunk
  r.feed("tail")
  r.finish()
  T.eq(lines, { "abc", "de", "0123456789", "ok", "tail" })
  T.eq(over, { 16, 11 })
end)

T.test("mcp: a message of more JSON values than the limit is refused before it is built, naming the limit", function()
  local t = new_server()
  local n = 1000000 + 10 -- server.MAX_VALUES is 1 million
  local line = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add","arguments":{"junk":['
    .. ("[],"):rep(n - 1) .. '[]]}}}'
  local before = collectgarbage("count")
  t.send_text(line)
  local r = t.out[#t.out]
  T.eq(r.error and r.error.code, server.PARSE_ERROR, "answered: " .. json.encode(r):sub(1, 300))
  T.contains(r.error.message, "more than 1000000 JSON values")
  -- nothing of the million values was kept (a decoded one costs ~50 bytes: 50 MB)
  T.ok(collectgarbage("count") - before < 8 * 1024, ("%.0f KB more"):format(collectgarbage("count") - before))
  -- a real call (well under the limit) still works
  local ok = t.req(8, "tools/call", { name = "add", arguments = { a = 1, b = 2 } })
  T.ok(ok.result or ok.error, json.encode(ok))
end)

T.test("mcp: JSON-RPC answers: lifecycle, errors, tools", function()
  local t = new_server()
  T.eq(t.req(1, "tools/list").error.code, -32600)
  T.eq(t.req(2, "ping").result, json.object())
  local init = t.req(3, "initialize", { protocolVersion = "2025-11-25", capabilities = {} }).result
  T.eq(init.protocolVersion, "2025-11-25")
  T.eq(init.capabilities.tools.listChanged, false)
  T.eq(init.serverInfo, { name = "t", version = "1" })
  local list = t.req(4, "tools/list").result.tools
  T.eq(#list, 3)
  T.eq(list[1].name, "echo")
  T.eq(list[1].inputSchema.required, { "text" })
  T.eq(list[2].inputSchema.properties, json.object())
  T.eq(json.encode(list[2].inputSchema), '{"properties":{},"type":"object"}')
  T.eq(t.req(5, "tools/call", { name = "echo", arguments = { text = "hi", n = 2 } }).result,
       { content = { { type = "text", text = "hi 2" } }, isError = false })
  local function err(args, pattern)
    local e = t.req(6, "tools/call", { name = "echo", arguments = args }).error
    T.eq(e.code, -32602)
    T.contains(e.message, pattern)
  end
  err({}, 'missing the required parameter "text"')
  err({ text = 1 }, 'parameter "text" must be string (got integer)')
  err({ text = "x", n = -1 }, 'parameter "n" must be at least 0')
  err({ text = "x", n = 1.5 }, 'parameter "n" must be integer (got number)')
  err({ text = "x", mode = "c" }, 'parameter "mode" must be one of "a", "b"')
  err({ text = "x", other = true }, 'unknown parameter "other" (parameters: mode, n, text)')
  -- null for an optional parameter is the same as leaving it out
  t.send_text('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x","n":null}}}')
  T.eq(t.out[#t.out].result.content[1].text, "x")
  local r = t.req(8, "tools/call", { name = "fail" }).result
  T.eq(r.isError, true)
  T.eq(r.content[1].text, "it broke")
  T.eq(t.req(9, "tools/call", { name = "nope" }).error.code, -32602)
  T.eq(t.req(10, "nope/nope").error.code, -32601)
  t.send_text("{oops")
  T.eq(t.out[#t.out].error.code, -32700)
  T.eq(t.out[#t.out].id, json.null)
  t.send_text('"just a string"')
  T.eq(t.out[#t.out].error.code, -32600)
  local n = #t.out
  t.send_text('{"jsonrpc":"2.0","method":"notifications/unknown"}')
  t.send_text('{"jsonrpc":"2.0","id":99,"result":{}}') -- a response to nothing: ignored
  T.eq(#t.out, n)
end)

T.test("mcp: a tool that waits keeps the loop serving; cancellation runs its hook and drops the answer", function()
  local t = new_server()
  t.req(1, "initialize", { protocolVersion = "2025-06-18" })
  t.send_text(json.encode{ jsonrpc = "2.0", id = "w1", method = "tools/call",
                           params = { name = "wait", _meta = { progressToken = "p" } } })
  T.eq(#t.srv.tasks, 1)
  T.eq(t.req(2, "ping").result, json.object()) -- answered while the tool waits
  local n = #t.out
  t.send_text(json.encode{ jsonrpc = "2.0", method = "notifications/cancelled", params = { requestId = "w1" } })
  run_for(t.srv, 30)
  T.eq(t.released(), "cancelled")
  T.eq(#t.srv.tasks, 0)
  for i = n + 1, #t.out do T.ne(t.out[i].id, "w1") end
  -- not cancelled: the answer comes when the tool is done, after progress notifications
  t.send_text(json.encode{ jsonrpc = "2.0", id = "w2", method = "tools/call", params = { name = "wait" } })
  t.release()
  run_for(t.srv, 30)
  T.eq(t.out[#t.out].id, "w2")
  T.eq(t.out[#t.out].result.content[1].text, "released")
end)

T.test("mcp: progress ticks while a call with a progress token runs", function()
  local t = new_server()
  t.req(1, "initialize", { protocolVersion = "2025-06-18" })
  t.send_text(json.encode{ jsonrpc = "2.0", id = 5, method = "tools/call", params = { name = "wait", _meta = { progressToken = 7 } } })
  run_for(t.srv, 1200)
  t.release()
  run_for(t.srv, 30)
  local p = t.out[#t.out - 1]
  T.eq(p.method, "notifications/progress")
  T.eq(p.params.progressToken, 7)
  T.eq(p.params.progress, 1)
  T.eq(t.out[#t.out].id, 5)
end)

T.test("mcp: answers that are not valid UTF-8 are repaired, not lost", function()
  T.eq(server.valid_utf8("ok \xff\xfe é \xe2\x82"), "ok \239\191\189\239\191\189 é \239\191\189\239\191\189")
  local text = server.encode{ jsonrpc = "2.0", id = 1, result = { content = { { type = "text", text = "a\xffb" } } } }
  T.contains(text, 'a\239\191\189b')
end)

T.test("mcp notebook: outputs become text, errors and images", function()
  T.eq(tools.b64decode(tools.b64encode("")), "")
  for _, s in ipairs{ "a", "ab", "abc", "abcd", ("\0\255\128"):rep(100) } do T.eq(tools.b64decode(tools.b64encode(s)), s) end
  T.eq(tools.b64encode("hello!?"), "aGVsbG8hPw==")
  T.eq(tools.b64decode("aGVs\nbG8h\nPw=="), "hello!?")
  T.eq(tools.b64decode("a$b"), nil)
  local png = require "seer.core.png"
  local big = png.encode(1000, 250, 3, ("\10\20\30"):rep(1000 * 250))
  local small = png.encode(20, 10, 3, ("\10\20\30"):rep(200))
  local c = tools.outputs_to_content({
    { output_type = "stream", name = "stdout", text = { "a\n", "b\n" } },
    { output_type = "stream", name = "stderr", text = "\27[31mred\27[0m\n" },
    { output_type = "execute_result", data = { ["text/plain"] = "42" } },
    { output_type = "display_data", data = { ["image/png"] = tools.b64encode(big), ["text/plain"] = "<image>" } },
    { output_type = "display_data", data = { ["image/png"] = tools.b64encode(small) } },
    { output_type = "display_data", data = { ["image/png"] = "bm90IGEgcG5n" } },
    { output_type = "error", ename = "LuaError", evalue = "[cell 1]:1: boom",
      traceback = { "\27[1mLuaError: [cell 1]:1: boom\27[0m", "stack traceback:", "  [cell 1]:1: in main chunk" } },
    { output_type = "error", ename = "KernelDied", evalue = "the kernel died", traceback = {} },
  })
  T.eq(#c, 4)
  T.eq(c[1], { type = "text", text = "a\nb\nred\n42\n" })
  T.eq(c[2].type, "image")
  T.eq(c[2].mimeType, "image/png")
  local w, h = png.size(tools.b64decode(c[2].data))
  T.eq({ w, h }, { 512, 128 })
  T.eq(c[3].data, tools.b64encode(small)) -- small images are sent as they are
  T.contains(c[4].text, "[an image/png output that cannot be shown:")
  -- the kernel's "[cell N]" is an execution count: the agent reads it as a run, since its cell
  -- numbers are positions (edit_cell's cell_index)
  T.contains(c[4].text, "LuaError: [run 1]:1: boom\nstack traceback:\n  [run 1]:1: in main chunk\nKernelDied: the kernel died\n")
  T.eq(c[4].text:find("\27", 1, true), nil)
  T.eq(tools.outputs_to_content({}), { { type = "text", text = "(no output)" } })
  local placeholders = tools.outputs_to_content({ { output_type = "display_data", data = { ["image/png"] = "x", ["text/plain"] = "<image 640x400>" } } },
                                                { images = false })
  T.eq(placeholders[1].text, "[image: <image 640x400>]\n")
end)

T.test("arguments are checked as the tool's JSON schema says: null is not a string, ranges and huge integers say what is wrong", function()
  local S = require "seer.mcp.server"
  local json = require "seer.json"
  local sc = { type = "object", properties = { a = { type = "string" }, n = { type = "integer", minimum = 0, maximum = 10 } },
               required = { "a" }, additionalProperties = false }
  T.eq(S.check_value({ a = json.null }, sc, "args"), 'parameter "a" must be string (got null)')
  T.eq(S.check_value({ a = "x", n = 11 }, sc, "args"), 'parameter "n" must be at most 10')
  T.eq(S.check_value({ a = "x", n = -1 }, sc, "args"), 'parameter "n" must be at least 0')
  T.eq(S.check_value({ a = "x", n = 1.5 }, sc, "args"), 'parameter "n" must be integer (got number)')
  T.contains(S.check_value({ a = "x", n = 2 ^ 60 }, sc, "args"), "must be an integer between -2^53 and 2^53 (got 1.152921504606847e+18, an integer too large to be exact)")
  T.eq(S.check_value({ a = "x", b = 1 }, sc, "args"), 'unknown parameter "b" (parameters: a, n)')
  T.eq(S.check_value({ a = "x", n = 3 }, sc, "args"), nil)
  -- a string's length (the notebook tools' cell sources: 1 MiB)
  T.eq(S.check_value("abcd", { type = "string", maxLength = 3 }, "code"), "code is 4 bytes, over its limit of 3")
  local NT = require "seer.mcp.notebook_tools"
  T.eq(NT.MAX_CELL_SOURCE, 1024 * 1024)
end)
