-- seer.harness against a hostile provider and hostile MCP servers (docs/harness.md, "Limits on a
-- response", "Usage and token_limit", "Tool lists and tool results"): usage that is not a count
-- of tokens (negative, fractional, huge, a string, infinite once added up) makes a turn's usage
-- unknown, never a negative or infinite cost, and token_limit counts an estimate for it; a run
-- always ends its transcript with a result; bytes that are not UTF-8 anywhere in a stream are
-- repaired, not fatal; an event line past max_response_bytes fails once with its reason; an
-- MCP server's tool list and tool results are bounded. The provider is a Python server written
-- by the test that plays scripted response bodies; the MCP server is a Python stdio script.
local T = require "testing"
local h = require "seer.harness"
local process = require "seer.process"
local json = seer.json

local MiB = 1024 * 1024

local function of_type(events, t)
  local out = {}
  for _, e in ipairs(events) do if e.type == t then out[#out + 1] = e end end
  return out
end

-- Every line of the transcript is a whole JSON event; returns the events and the file's size.
local function whole_transcript(path)
  local text = assert(seer.read_file(path))
  T.eq(text:sub(-1), "\n", "the transcript ends with a whole line")
  local ev = {}
  for l in text:gmatch("([^\n]*)\n") do
    local ok, v = pcall(json.decode, l)
    T.ok(ok and type(v) == "table" and v.type, "a transcript line is not a JSON event: " .. l:sub(1, 100))
    ev[#ev + 1] = v
  end
  return ev, #text
end

-- The scripted provider: request i gets the body in resp-<i> (the last one for later requests)
-- as an event stream; each request's body is saved as req-<i>.
local PROVIDER = [[
import os, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
DIR, PORT_FILE = sys.argv[1], sys.argv[2]
lock, count = threading.Lock(), [0]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        with lock:
            count[0] += 1
            i = count[0]
        open(os.path.join(DIR, "req-%d" % i), "wb").write(body)
        n = len([f for f in os.listdir(DIR) if f.startswith("resp-")])
        data = open(os.path.join(DIR, "resp-%d" % min(i, n)), "rb").read()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
open(PORT_FILE + ".tmp", "w").write(str(s.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
s.serve_forever()
]]

local function start_provider(bodies)
  local dir = T.tmpdir()
  seer.write_file(dir .. "/provider.py", PROVIDER)
  for i, b in ipairs(bodies) do seer.write_file(dir .. "/resp-" .. i, b) end
  local child = process.spawn{ argv = { "/usr/bin/python3", dir .. "/provider.py", dir, dir .. "/port" },
                               stdout = "null", stderr = dir .. "/stderr" }
  local deadline = process.now_ms() + 10000
  while true do
    local f = io.open(dir .. "/port")
    if f then
      local port = f:read("*a")
      f:close()
      return "http://127.0.0.1:" .. port, child, dir
    end
    if process.now_ms() > deadline then
      child:stop(200)
      error("the scripted provider did not start: " .. (seer.read_file(dir .. "/stderr") or ""))
    end
    process.sleep_ms(20)
  end
end

-- SSE events from {event name or false, table}; a string "@K@" in a table becomes raw[K] as
-- it is (numbers JSON cannot come from Lua, bytes that are not UTF-8).
local function sse(events, raw)
  local parts = {}
  for _, e in ipairs(events) do
    local d = json.encode(e[2])
    d = d:gsub('"@(%w+)@"', function(k) return assert(raw[k], k) end)
    parts[#parts + 1] = (e[1] and ("event: " .. e[1] .. "\n") or "") .. "data: " .. d .. "\n\n"
  end
  return table.concat(parts)
end

-- An Anthropic response: text (o.text) or one call of the tool echo (o.tool = its input JSON).
local function anthropic(o, raw)
  o = o or {}
  local ev = { { "message_start", { type = "message_start", message = { id = o.id or "msg_1", role = "assistant",
    model = o.model or "claude-sonnet-4-5", content = json.array{},
    usage = o.usage or { input_tokens = 1000, output_tokens = 1 } } } } }
  if o.tool then
    ev[#ev + 1] = { "content_block_start", { type = "content_block_start", index = 0, content_block = {
      type = "tool_use", id = o.tool_id or "toolu_1", name = o.tool_name or "echo", input = json.object{} } } }
    ev[#ev + 1] = { "content_block_delta", { type = "content_block_delta", index = 0,
      delta = { type = "input_json_delta", partial_json = o.tool } } }
  else
    ev[#ev + 1] = { "content_block_start", { type = "content_block_start", index = 0,
      content_block = { type = "text", text = "" } } }
    ev[#ev + 1] = { "content_block_delta", { type = "content_block_delta", index = 0,
      delta = { type = "text_delta", text = o.text or "hello" } } }
  end
  ev[#ev + 1] = { "content_block_stop", { type = "content_block_stop", index = 0 } }
  ev[#ev + 1] = { "message_delta", { type = "message_delta", delta = { stop_reason = o.stop or (o.tool and "tool_use" or "end_turn") },
    usage = o.usage_delta or { output_tokens = 10 } } }
  ev[#ev + 1] = { "message_stop", { type = "message_stop" } }
  return sse(ev, raw)
end

-- An OpenAI chat completion stream: text "hi", then o.usage.
local function openai(usage, raw)
  return sse({
    { false, { id = "c", model = "gpt-4.1", choices = { { index = 0, delta = { content = "hi" }, finish_reason = json.null } } } },
    { false, { id = "c", model = "gpt-4.1", choices = { { index = 0, delta = json.object{}, finish_reason = "stop" } } } },
    { false, { id = "c", model = "gpt-4.1", choices = json.array{}, usage = usage } },
  }, raw) .. "data: [DONE]\n\n"
end

local echo_tool = { name = "echo", description = "Echoes.",
                    input_schema = { type = "object", properties = { text = { type = "string" } } },
                    fn = function(i) return "echo:" .. tostring(i.text) end }

-- Runs an agent against the scripted bodies; returns ok, the result or error, the transcript's
-- events, the provider's folder (its req-<i> files) and the agent.
local function run(bodies, o)
  o = o or {}
  local url, child, dir = start_provider(bodies)
  local res = { pcall(function()
    local opts = { base_url = url .. (o.provider == "openai" and "/v1" or ""), provider = o.provider or "claude",
                   model = o.provider == "openai" and "gpt-4.1" or "claude-sonnet-4-5", api_key = "sk-test-hostile-123",
                   output_dir = T.tmpdir(), max_turns = 1, max_retries = 0, retry_base = 0.01, tools = { echo_tool } }
    for k, v in pairs(o.opts or {}) do opts[k] = v end
    local a = h.run_agent(opts)
    local ok, r = pcall(a.run, a)
    return ok, r, (whole_transcript(a.transcript_path)), dir, a
  end) }
  child:stop(200)
  if not res[1] then error(res[2], 0) end
  return res[2], res[3], res[4], res[5], res[6]
end

-- No number in the usage, usage and result events is negative, fractional or infinite.
local function sane_numbers(ev)
  local function walk(v, where)
    if type(v) == "number" then
      T.ok(v >= 0 and v < 2 ^ 60, where .. " = " .. tostring(v))
    elseif type(v) == "table" then
      for k, x in pairs(v) do walk(x, where .. "." .. tostring(k)) end
    end
  end
  for _, e in ipairs(ev) do
    if e.type == "usage" or e.type == "result" then
      walk(e.usage, e.type .. ".usage")
      walk(e.total, e.type .. ".total")
      walk(e.cost_usd, e.type .. ".cost_usd")
      walk(e.total_cost_usd, e.type .. ".total_cost_usd")
    end
  end
end

---------------------------------------------------------------------------------------------
-- usage

T.test("usage that is not a count (negative, fractional, a string) is unknown: no negative cost, a note", function()
  local cases = {
    { "openai negative", "openai", openai({ prompt_tokens = -5000000000, completion_tokens = -100000000,
                                            prompt_tokens_details = { cached_tokens = 0 } }), "input_tokens = -5000000000" },
    { "openai string", "openai", openai({ prompt_tokens = "5000", completion_tokens = 3 }), 'input_tokens = "5000"' },
    { "openai cached > prompt", "openai", openai({ prompt_tokens = 10, completion_tokens = 3,
                                                   prompt_tokens_details = { cached_tokens = 50 } }), "cached_tokens is more" },
    { "anthropic negative", "claude", anthropic{ usage = { input_tokens = -4000000000, output_tokens = 1,
                                                           cache_read_input_tokens = -1e9 },
                                                 usage_delta = { output_tokens = -77 } }, "input_tokens = -4000000000" },
    { "anthropic fractional", "claude", anthropic{ usage = { input_tokens = 2.5, output_tokens = 1 } }, "input_tokens = 2.5" },
    { "anthropic huge", "claude", anthropic({ usage = { input_tokens = "@B@", output_tokens = 1 } }, { B = "1e300" }), "1e+300" },
  }
  for _, c in ipairs(cases) do
    local name = c[1]
    local ok, r, ev = run({ c[3] }, { provider = c[2] })
    T.ok(ok, name .. ": " .. tostring(r))
    T.eq(r.reason, "end_turn", name)
    T.eq(r.cost_usd, json.null, name)
    T.eq(r.usage_unknown_turns, 1, name)
    T.ok(r.estimated_tokens and r.estimated_tokens >= 8192, name .. ": estimate " .. tostring(r.estimated_tokens))
    local u = of_type(ev, "usage")[1]
    T.eq(u.usage_known, false, name)
    T.eq(u.cost_usd, json.null, name)
    T.eq(u.total_cost_usd, json.null, name)
    T.contains(u.note, "is not a count of tokens", name)
    T.contains(u.note, c[4], name)
    T.eq(u.usage, { input_tokens = 0, output_tokens = 0, cache_creation_input_tokens = 0, cache_read_input_tokens = 0 }, name)
    sane_numbers(ev)
    -- the transcript's reader says unknown, not "in 0, out 0"
    T.ok(type(r.transcript) == "string", name .. ": the result names its transcript")
    do
      local buf = {}
      require("seer.cli.transcript").view(r.transcript, false, { write = function(_, ...) for _, x in ipairs({ ... }) do buf[#buf + 1] = x end end })
      local text = table.concat(buf)
      T.contains(text, "(usage unknown: ", name)
      T.ok(not text:find("(in 0, out 0", 1, true), name .. ": " .. text)
    end
  end
end)

T.test("valid usage is counted and priced as before; a null count from a later event does not erase an earlier one", function()
  local ok, r = run({ openai({ prompt_tokens = 100, completion_tokens = 20, prompt_tokens_details = { cached_tokens = 40 } }) },
                    { provider = "openai" })
  T.ok(ok, tostring(r))
  T.eq(r.usage, { input_tokens = 60, output_tokens = 20, cache_creation_input_tokens = 0, cache_read_input_tokens = 40 })
  T.near(r.cost_usd, (60 * 2 + 20 * 8 + 40 * 0.5) / 1e6, 1e-12)
  T.eq(r.usage_unknown_turns, nil)
  T.eq(r.estimated_tokens, nil)
  local ok2, r2 = run({ anthropic{ usage = { input_tokens = 1000, output_tokens = 1 },
                                   usage_delta = { output_tokens = 10, input_tokens = json.null } } })
  T.ok(ok2, tostring(r2))
  T.eq(r2.usage.input_tokens, 1000)
  T.near(r2.cost_usd, (1000 * 3 + 10 * 15) / 1e6, 1e-12)
end)

T.test("token_limit is not switched off by a turn whose usage is not a count: it counts an estimate and stops", function()
  local tool_turn = function(input_tokens)
    return anthropic({ tool = '{"text":"x"}', usage = { input_tokens = "@I@", output_tokens = 1 } }, { I = input_tokens })
  end
  -- control: valid usage of 1010 tokens a turn stops after 3 turns at 2500
  local ok, r, ev = run({ tool_turn("1000") }, { opts = { max_turns = 8, token_limit = 2500 } })
  T.ok(ok, tostring(r))
  T.eq(r.reason, "token_limit")
  T.eq(r.turns, 3)
  -- a turn that says -1e12 input tokens made the run go to max_turns, 8 turns
  ok, r, ev = run({ tool_turn("-1000000000000"), tool_turn("1000") }, { opts = { max_turns = 8, token_limit = 2500 } })
  T.ok(ok, tostring(r))
  T.eq(r.reason, "token_limit")
  T.eq(r.turns, 1, "the estimate of the unknown turn (request bytes + max_tokens) is past the limit")
  T.contains(of_type(ev, "usage")[1].note, "token_limit counts an upper estimate")
  sane_numbers(ev)
  -- a server that sends no usage at all: the same
  ok, r = run({ anthropic{ tool = '{"text":"x"}', usage = json.object{}, usage_delta = json.object{} } },
              { opts = { max_turns = 8, token_limit = 6000, max_tokens = 1000 } })
  T.ok(ok, tostring(r))
  T.eq(r.reason, "token_limit")
  T.ok(r.turns >= 2 and r.turns < 8, "turns: " .. r.turns)
end)

T.test("usage that adds up to infinity: the run ends with a result line and no infinite cost", function()
  local ok, r, ev = run({ anthropic({ usage = { input_tokens = "@B@", output_tokens = "@B@" }, usage_delta = { output_tokens = "@B@" } },
                                    { B = "1.7e308" }) })
  T.ok(ok, tostring(r))
  T.eq(ev[#ev].type, "result")
  T.eq(ev[#ev].cost_usd, json.null)
  T.eq(ev[#ev].text, "hello")
  sane_numbers(ev)
end)

T.test("a run that fails inside writes error then result, even when the result cannot be encoded", function()
  -- an error raised inside the loop (here by on_message) fails the run
  local ok, r, ev = run({ anthropic{ tool = '{"text":"x"}' } }, { opts = { max_turns = 3,
    on_message = function(m) if m.type == "tool_call" then error("on_message broke", 0) end end } })
  T.ok(not ok, "the run succeeded")
  T.contains(tostring(r), "on_message broke")
  T.eq(ev[#ev].type, "result")
  T.eq(ev[#ev].reason, "error")
  T.eq(ev[#ev - 1].type, "error")
  T.eq(ev[#ev - 1].message, "on_message broke")
  -- the encoding of last resort: a value JSON has no form for becomes one it has
  local v = h._encodable({ a = math.huge, b = "ok\255", c = { [1] = 1, [3] = 3 }, d = print, e = json.array{} }, 0)
  T.eq(json.encode(v), '{"a":null,"b":"ok\u{FFFD}","c":{"1":1,"3":3},"d":"[function]","e":[]}')
end)

---------------------------------------------------------------------------------------------
-- bytes that are not UTF-8

T.test("a byte that is not UTF-8 in any string of the stream is repaired (U+FFFD), not fatal", function()
  local BAD = "\255\254\195" -- two invalid bytes and a cut sequence
  local cases = {
    { "id", anthropic({ id = "@X@" }, { X = '"m' .. BAD .. '"' }) },
    { "model", anthropic({ model = "@X@" }, { X = '"claude-sonnet-4-5' .. BAD .. '"' }) },
    { "text", anthropic({ text = "@X@" }, { X = '"hi' .. BAD .. '"' }), function(r) T.eq(r.text, "hi\u{FFFD}\u{FFFD}\u{FFFD}") end },
    { "stop", anthropic({ stop = "@X@" }, { X = '"end_turn' .. BAD .. '"' }) },
    { "tool id", anthropic({ tool = '{"text":"x"}', tool_id = "@X@" }, { X = '"toolu' .. BAD .. '"' }) },
    { "tool name", anthropic({ tool = '{"text":"x"}', tool_name = "@X@" }, { X = '"echo' .. BAD .. '"' }) },
    { "tool input", anthropic({ tool = "@X@" }, { X = '"{\\"text\\":\\"x' .. BAD .. '\\"}"' }) },
  }
  for _, c in ipairs(cases) do
    local ok, r, ev = run({ c[2], anthropic() }, { opts = { max_turns = 2 } })
    T.ok(ok, c[1] .. ": " .. tostring(r))
    T.eq(#of_type(ev, "error"), 0, c[1])
    T.eq(#of_type(ev, "assistant") >= 1, true, c[1])
    if c[3] then c[3](r) end
  end
end)

---------------------------------------------------------------------------------------------
-- an event line past max_response_bytes

T.test("an event line longer than max_response_bytes fails once with that reason (it was retried as a cut stream)", function()
  local body = "event: message_start\ndata: " .. ("a"):rep(3 * MiB)
  local ok, err, ev = run({ body }, { opts = { max_response_bytes = MiB, max_retries = 2 } })
  T.ok(not ok, "the run succeeded")
  T.contains(tostring(err), "an event line longer than 1048576 bytes (max_response_bytes)")
  T.contains(tostring(err), "is not retried")
  T.eq(#of_type(ev, "retry"), 0)
  T.eq(of_type(ev, "error")[1].attempts, 1)
  T.eq(ev[#ev].type, "result")
end)

---------------------------------------------------------------------------------------------
-- MCP servers: tool lists and tool results

-- A stdio MCP server. MODE pages: endless tools/list pages of PER tools with DESC-byte
-- descriptions; big: echo returns SIZE bytes of text, repeated as structuredContent; image: an
-- image of SIZE bytes of base64 and a line of text.
local MCP = [[
import json, sys
MODE, PER, DESC, SIZE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def send(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()
page = 0
for line in sys.stdin:
    m = json.loads(line)
    mid, meth = m.get("id"), m.get("method")
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
              "serverInfo": {"name": "h", "version": "1"}}})
    elif meth == "tools/list":
        page += 1
        if MODE == "pages":
            tools = [{"name": "t%d_%d" % (page, i), "description": "d" * DESC, "inputSchema": {"type": "object"}}
                     for i in range(PER)]
            send({"jsonrpc": "2.0", "id": mid, "result": {"nextCursor": str(page), "tools": tools}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [{"name": "echo", "description": "e",
                  "inputSchema": {"type": "object"}}]}})
    elif meth == "tools/call":
        if MODE == "big":
            t = "B" * SIZE
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": t}],
                  "structuredContent": {"text": t}, "isError": False}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "a plot:"},
                  {"type": "image", "mimeType": "image/png", "data": "A" * SIZE}], "isError": False}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
]]

local function mcp_config(mode, per, desc, size)
  -- (the agents that use it have no Lua tools: the server's tool is echo too)
  local dir = T.tmpdir()
  seer.write_file(dir .. "/mcp.py", MCP)
  return { h = { command = "/usr/bin/python3", args = { dir .. "/mcp.py", mode, tostring(per or 0), tostring(desc or 0),
                                                        tostring(size or 0) } } }
end

T.test("an MCP server whose tool list passes max_tools_bytes or max_tools is refused at once, naming the limit", function()
  local mcp = require "seer.mcp.client"
  -- endless pages of big tools: 2.2 GB in 15 s; endless pages of small ones: 1000 pages
  for _, c in ipairs{ { 1000, 10000, "max_tools_bytes" }, { 1, 50 * MiB, "max_tools_bytes" }, { 10, 10, "max_tools" } } do
    local t0 = seer.now()
    local ok, err = pcall(mcp.connect, mcp_config("pages", c[1], c[2]), { connect_timeout = 5 })
    T.ok(not ok, "connected")
    T.contains(tostring(err), "mcp server 'h': tools/list:")
    T.contains(tostring(err), "(" .. c[3] .. "): it is refused")
    T.ok(seer.now() - t0 < 4, "took " .. (seer.now() - t0) .. " s")
  end
  -- the limits from Lua: a smaller max_tools refuses what the default takes; a bad value is named
  local okc, errc = pcall(mcp.connect, mcp_config("pages", 5, 10), { connect_timeout = 5, max_tools = 3 })
  T.ok(not okc, "a list past max_tools = 3 connected")
  T.contains(tostring(errc), "(max_tools): it is refused")
  T.raises(function() mcp.connect({}, { max_tools_bytes = 0 }) end, "max_tools_bytes must be a whole number >= 1", true)
  -- in an agent: the run fails with error and result in the transcript, none of the tools in it
  local ok, err, ev = run({ anthropic() }, { opts = { mcp_config = mcp_config("pages", 1000, 10000), connect_timeout = 5 } })
  T.ok(not ok, "the run succeeded")
  T.contains(tostring(err), "max_tools_bytes")
  T.eq(ev[#ev].type, "result")
  T.eq(ev[#ev - 1].type, "error")
  T.contains(ev[#ev - 1].message, "max_tools_bytes")
end)

T.test("a tool result past max_tool_result_bytes is cut for the model and the transcript, with a note", function()
  local calls = anthropic{ tool = '{"text":"x"}' }
  local size = 300000
  local ok, r, ev, dir = run({ calls, anthropic() }, { opts = { mcp_config = mcp_config("big", 0, 0, size), max_turns = 3, tools = {},
                                                                 max_tool_result_bytes = 100000 } })
  T.ok(ok, tostring(r))
  T.eq(r.reason, "end_turn")
  local tr = of_type(ev, "tool_result")[1]
  T.eq(#tr.content, 2)
  T.ok(#tr.content[1].text <= 100000, "kept " .. #tr.content[1].text)
  T.ok(#tr.content[1].text > 90000, "kept " .. #tr.content[1].text)
  T.contains(tr.content[2].text, ("[cut: this tool result is %d bytes; the first %d are shown"):format(size, #tr.content[1].text))
  T.contains(tr.content[2].text, "(max_tool_result_bytes = 100000)")
  T.eq(tr.cut_bytes, size - #tr.content[1].text)
  T.eq(tr.structured, nil, "the structured result that repeats the text is not recorded too")
  T.ok(tr.structured_omitted_bytes > size, tostring(tr.structured_omitted_bytes))
  -- what the model got in the next request
  local req = json.decode(seer.read_file(dir .. "/req-2"))
  local sent = req.messages[#req.messages].content[1]
  T.eq(sent.type, "tool_result")
  T.eq(sent.content[1].text, tr.content[1].text)
  T.contains(sent.content[2].text, "[cut: this tool result is")
  T.eq(of_type(ev, "run_start")[1].limits.max_tool_result_bytes, 100000)
  -- an image that does not fit is left out; a small result with its structured part is whole
  ok, r, ev = run({ calls, anthropic() }, { opts = { mcp_config = mcp_config("image", 0, 0, 200000), max_turns = 3, tools = {},
                                                      max_tool_result_bytes = 100000 } })
  T.ok(ok, tostring(r))
  tr = of_type(ev, "tool_result")[1]
  T.eq(tr.content[1].text, "a plot:")
  T.contains(tr.content[2].text, "1 image(s) left out")
  ok, r, ev = run({ calls, anthropic() }, { opts = { mcp_config = mcp_config("big", 0, 0, 1000), max_turns = 3, tools = {} } })
  T.ok(ok, tostring(r))
  tr = of_type(ev, "tool_result")[1]
  T.eq(#tr.content, 1)
  T.eq(#tr.content[1].text, 1000)
  T.eq(#tr.structured.text, 1000)
  T.eq(tr.cut_bytes, nil)
  T.raises(function() h.run_agent{ provider = "replay", replay = {}, max_tool_result_bytes = 0 } end,
    "option 'max_tool_result_bytes' must be more than 0")
end)

T.test("30 MiB tool results for 6 turns under the default cap: memory and the transcript stay bounded", function()
  local dir = T.tmpdir()
  local url, child, pdir = start_provider({ anthropic{ tool = '{"text":"x"}' } })
  local ok, err = pcall(function()
    -- a process of its own, so that VmHWM is this run's peak
    seer.write_file(dir .. "/run.lua", ([[
local h = require "seer.harness"
local ok, r = pcall(function()
  return h.run_agent{ base_url = %q, api_key = "sk-test-hostile-123", output_dir = %q, max_turns = 6, max_retries = 0,
                      mcp_config = %s }:run()
end)
local hwm
for l in io.lines("/proc/self/status") do hwm = hwm or l:match("^VmHWM:%%s+(%%d+)") end
print("ok=" .. tostring(ok) .. " hwm_kib=" .. hwm .. " reason=" .. tostring(ok and r.reason or r) .. " tr=" .. tostring(ok and r.transcript))
]]):format(url, dir .. "/out", ("{ h = { command = '/usr/bin/python3', args = { %q, 'big', '0', '0', '%d' } } }")
      :format(mcp_config("big").h.args[1], 30 * MiB)))
    local bin = os.getenv("SEER") or (seer.script_dir() .. "/../../seer")
    local p = io.popen(("'%s' '%s/run.lua' 2>&1"):format(bin, dir))
    local out = p:read("*a")
    p:close()
    T.contains(out, "ok=true", out)
    T.contains(out, "reason=max_turns", out)
    local hwm = tonumber(out:match("hwm_kib=(%d+)"))
    T.ok(hwm and hwm < 500 * 1024, "peak memory " .. tostring(hwm) .. " KiB (936 MB before the cap)")
    local _, size = whole_transcript(out:match("tr=(%S+)"))
    T.ok(size < 30 * MiB, "the transcript has " .. size .. " bytes (157 MB before the cap)")
  end)
  child:stop(200)
  if not ok then error(err, 0) end
end)

-- A hostile MCP server whose results are SIZE bytes of text, over stdio (written the way the
-- TypeScript SDK writes a response: result first, the id last), or streamable HTTP with a JSON
-- body or an event stream (chunked); a call with {small = true} gets "ok".
local BIGMCP = [[
import json, sys, os
MODE, SIZE = sys.argv[1], int(sys.argv[2])
def answer(m):
    mid, meth = m.get("id"), m.get("method")
    if meth == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "big", "version": "1"}}
    elif meth == "tools/list":
        r = {"tools": [{"name": "echo", "description": "e", "inputSchema": {"type": "object"}}]}
    elif meth == "tools/call":
        small = (m.get("params") or {}).get("arguments", {}).get("small")
        r = {"content": [{"type": "text", "text": "ok" if small else "B" * SIZE}], "isError": False}
    elif mid is not None:
        r = {}
    else:
        return None
    return json.dumps({"result": r, "jsonrpc": "2.0", "id": mid})
if MODE == "stdio":
    for line in sys.stdin:
        a = answer(json.loads(line))
        if a is not None:
            sys.stdout.write(a + "\n")
            sys.stdout.flush()
    sys.exit(0)
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_DELETE(self):
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def do_POST(self):
        a = answer(json.loads(self.rfile.read(int(self.headers.get("content-length") or 0))))
        if a is None:
            self.send_response(202); self.send_header("content-length", "0"); self.end_headers()
            return
        data = (b"data: " + a.encode() + b"\n\n") if MODE == "sse" else a.encode()
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream" if MODE == "sse" else "application/json")
            self.send_header("mcp-session-id", "s1")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for i in range(0, len(data), 1 << 20):
                c = data[i:i + (1 << 20)]
                self.wfile.write(b"%x\r\n" % len(c) + c + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
open(sys.argv[3] + ".tmp", "w").write(str(s.server_address[1]))
os.rename(sys.argv[3] + ".tmp", sys.argv[3])
s.serve_forever()
]]

-- The MCP configuration for BIGMCP in MODE (stdio, json, sse), and the HTTP server's process.
local function big_mcp(mode, size)
  local d = T.tmpdir()
  seer.write_file(d .. "/big.py", BIGMCP)
  if mode == "stdio" then
    return { big = { command = "/usr/bin/python3", args = { d .. "/big.py", "stdio", tostring(size) } } }
  end
  local child = process.spawn{ argv = { "/usr/bin/python3", d .. "/big.py", mode, tostring(size), d .. "/port" },
                               stdout = "null", stderr = d .. "/stderr" }
  local deadline = process.now_ms() + 10000
  while not io.open(d .. "/port") do
    if process.now_ms() > deadline then
      child:stop(200)
      error("the MCP server did not start: " .. (seer.read_file(d .. "/stderr") or ""))
    end
    process.sleep_ms(20)
  end
  return { big = { type = "http", url = "http://127.0.0.1:" .. seer.read_file(d .. "/port") .. "/mcp" } }, child
end

for _, mode in ipairs{ "stdio", "json", "sse" } do
T.test(("a 40 MiB tool result is cut as it streams in (%s): the host holds about twice max_tool_result_bytes, the model gets the cut with a note, the next call works")
  :format(mode == "stdio" and "stdio" or mode == "json" and "HTTP, a JSON body" or "HTTP, an event stream"), function()
  local size = 40 * MiB
  do
    local dir = T.tmpdir()
    local url, child, pdir = start_provider({ anthropic{ tool = '{"x":1}' }, anthropic{ tool = '{"small":true}', tool_id = "toolu_2" },
                                              anthropic() })
    local cfg, server = big_mcp(mode, size)
    local ok, err = pcall(function()
      -- a process of its own, so that VmHWM is this run's peak (the MCP server's memory is not in it)
      seer.write_file(dir .. "/run.lua", ([[
local h = require "seer.harness"
local json = require "seer.json"
local ok, r = pcall(function()
  return h.run_agent{ base_url = %q, api_key = "sk-test-hostile-123", output_dir = %q, max_turns = 4, max_retries = 0,
                      max_tool_result_bytes = %d, mcp_config = json.decode(%q) }:run()
end)
local hwm
for l in io.lines("/proc/self/status") do hwm = hwm or l:match("^VmHWM:%%s+(%%d+)") end
print("ok=" .. tostring(ok) .. " hwm_kib=" .. hwm .. " reason=" .. tostring(ok and r.reason or r) .. " tr=" .. tostring(ok and r.transcript))
]]):format(url, dir .. "/out", MiB, json.encode(cfg)))
      local bin = os.getenv("SEER") or (seer.script_dir() .. "/../../seer")
      local p = io.popen(("'%s' '%s/run.lua' 2>&1"):format(bin, dir))
      local out = p:read("*a")
      p:close()
      T.contains(out, "ok=true", out)
      T.contains(out, "reason=end_turn", out)
      local hwm = tonumber(out:match("hwm_kib=(%d+)"))
      -- the client holds 3 MiB of the 40 (2 x 1 MiB + 1 MiB); it held all of it and more before
      T.ok(hwm and hwm < 80 * 1024, mode .. ": peak memory " .. tostring(hwm) .. " KiB (178 MB over stdio, 137 MB over HTTP before)")
      local ev = whole_transcript(out:match("tr=(%S+)"))
      local tr = of_type(ev, "tool_result")
      T.eq(#tr, 2)
      T.eq(tr[1].is_error, false)
      T.ok(#tr[1].content[1].text > MiB - 100 and #tr[1].content[1].text <= MiB, mode .. ": kept " .. #tr[1].content[1].text)
      T.contains(tr[1].content[2].text, ("[cut: this tool result is %d bytes; the first %d are shown"):format(size, #tr[1].content[1].text))
      T.contains(tr[1].content[2].text, "(max_tool_result_bytes = 1048576; the server's response was ")
      T.contains(tr[1].content[2].text, "bytes, of which only the first ")
      T.eq(tr[1].cut_bytes, size - #tr[1].content[1].text)
      T.eq(tr[2].content[1].text, "ok", mode .. ": the next call on the same session")
      -- what the model got
      local req = json.decode(seer.read_file(pdir .. "/req-2"))
      T.eq(req.messages[#req.messages].content[1].content[2].text, tr[1].content[2].text)
    end)
    child:stop(200)
    if server then server:stop(200) end
    if not ok then error(err, 0) end
  end
end)
end
