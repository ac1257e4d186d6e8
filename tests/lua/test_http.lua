-- seer.http and toolkit.openai_client against a local HTTP server (tests/fixtures/http/fake_server.py,
-- Python's standard library): JSON, statuses, retries with Retry-After, timeouts, size caps,
-- server-sent events, streaming, bad input, and an OpenAI-compatible chat endpoint.
local T = require "testing"
local http = require "seer.http"
local process = require "seer.process"

local server, base
local function start()
  if server then return end
  server = process.spawn{ argv = { "/usr/bin/python3", seer.script_dir() .. "/../fixtures/http/fake_server.py" },
                          stdout = "pipe", stderr = "inherit" }
  local port = server:read_line(10000)
  assert(port and port:match("^%d+$"), "the fake server did not start")
  base = "http://127.0.0.1:" .. port
end

T.test("GET and POST JSON; headers go out, the response's headers come back lowercased", function()
  start()
  local r = http.get(base .. "/json")
  T.eq(r.status, 200)
  T.ok(r.ok)
  T.eq(r.headers["content-type"], "application/json")
  T.eq(r:json().method, "GET")
  local doc = http.post_json(base .. "/json", { a = 1 }, { headers = { Authorization = "Bearer k" } })
  T.eq(doc.body, '{"a":1}')
  T.eq(doc.auth, "Bearer k")
  T.eq(doc.ctype, "application/json")
  T.eq(http.post(base .. "/json", "raw text"):json().body, "raw text")
  T.eq(http.request{ url = base .. "/json", method = "delete" }:json().method, "DELETE")
end)

T.test("a non-2xx status is a response; raise_for_status and the JSON helpers raise with the server's words", function()
  start()
  local r = http.get(base .. "/status/404", { retries = 0 })
  T.eq(r.status, 404)
  T.ok(not r.ok)
  T.raises(function() r:raise_for_status() end, "GET " .. base .. "/status/404: HTTP 404: {\"error\"", true)
  T.raises(function() http.get_json(base .. "/status/401") end, "HTTP 401", true)
  T.raises(function() http.get(base .. "/big/10"):json() end, "the response is not JSON", true)
end)

T.test("retries: 503 with Retry-After, then success; exhausted retries return the last answer", function()
  start()
  local r = http.get(base .. "/flaky/2/a", { backoff = 0.01 })
  T.eq(r.status, 200)
  T.eq(r.attempts, 3)
  T.eq(r:json().attempts, 3)
  local r2 = http.get(base .. "/flaky/5/b", { retries = 1, backoff = 0.01 })
  T.eq(r2.status, 503)
  T.eq(r2.attempts, 2)
  local r3 = http.get(base .. "/flaky/1/c", { retries = 0 })
  T.eq(r3.status, 503)
end)

T.test("transport failures name the method, the URL without its query or credentials, and the cause", function()
  local msg = T.raises(function() http.get("http://user:pw@127.0.0.1:1/x?key=SECRET", { retries = 1, backoff = 0.01 }) end)
  T.contains(msg, "GET http://127.0.0.1:1/x failed: Couldn't connect to server")
  T.contains(msg, "(after 2 attempts)")
  T.ok(not msg:find("SECRET", 1, true) and not msg:find("pw", 1, true), msg)
  T.raises(function() http.get("ftp://example.org/") end, "is not an http:// or https:// URL", true)
  T.raises(function() http.get("file:///etc/passwd") end, "is not an http:// or https:// URL", true)
end)

T.test("timeouts: a slow server and a stalled body end within the timeout", function()
  start()
  local t0 = process.now_ms()
  T.raises(function() http.get(base .. "/slow/5", { timeout = 0.5, retries = 0 }) end, "timed out", true)
  T.raises(function() http.get(base .. "/slow/5", { retries = 0 / 0 }) end, "retries must be 0..20", true) -- NaN used to mean no retries, silently
  T.raises(function() http.get(base .. "/stall", { timeout = 0.5, retries = 0 }) end, "raise timeout if the server is slow", true)
  T.ok(process.now_ms() - t0 < 3000, "the timeouts took " .. (process.now_ms() - t0) .. " ms")
  T.eq(http.get(base .. "/slow/0.1", { timeout = 5 }):json().slept, 0.1)
end)

T.test("size caps: a body past max_bytes and a flood of headers fail with a message, memory stays bounded", function()
  start()
  T.eq(#http.get(base .. "/big/100000").body, 100000)
  T.raises(function() http.get(base .. "/big/2000000", { max_bytes = 1000000 }) end, "larger than max_bytes (1000000)", true)
  T.raises(function() http.get(base .. "/headers/4000") end, "headers are larger than", true)
end)

T.test("streaming: chunks as they arrive, and stopping early", function()
  start()
  local got = {}
  local r = http.get(base .. "/big/300000", { stream = function(c) got[#got + 1] = c end })
  T.eq(r.body, "")
  T.eq(#table.concat(got), 300000)
  local n = 0
  http.get(base .. "/big/300000", { stream = function(c) n = n + #c return true end })
  T.ok(n > 0 and n < 300000, "stopped after " .. n .. " bytes")
  T.raises(function() http.get(base .. "/big/10", { stream = function() error("boom in the callback") end }) end, "boom in the callback", true)
end)

T.test("server-sent events: split events, multi-line data, comments, ids; an unfinished last event is dropped", function()
  start()
  local evs = {}
  http.sse(base .. "/sse", {}, function(ev) evs[#evs + 1] = ev end)
  T.eq(#evs, 3)
  T.eq(evs[1].data, "one")
  T.eq(evs[1].event, "message")
  T.eq(evs[2].event, "split")
  T.eq(evs[2].data, "two\nlines")
  T.eq(evs[3].data, "three")
  T.eq(evs[3].id, "7")
  T.raises(function() http.sse(base .. "/status/500", { retries = 0 }, function() end) end, "HTTP 500", true)
end)

T.test("bad input gets a clear error, not a Lua internal", function()
  T.raises(function() http.request{ url = "http://x/", timeuot = 3 } end, 'unknown option "timeuot"', true)
  T.raises(function() http.request{ url = 42 } end, "url must be a string", true)
  T.raises(function() http.request{ url = "http://x/", body = "a", json = {} } end, "give body or json, not both", true)
  T.raises(function() http.request{ url = "http://x/", headers = { ["X-A"] = "v\r\nInjected: 1" } } end, "header injection refused", true)
  T.raises(function() http.request{ url = "http://x/", method = "GET /x HTTP/1.1\r\n" } end, "is not an HTTP method", true)
end)

T.test("toolkit.openai_client: chat.completions.create, complete, streaming, errors that keep the key out", function()
  start()
  local OA = require "toolkit.openai_client"
  local client = OA.new{ base_url = base .. "/v1", api_key = "sk-test-123" }
  local r = client.chat.completions.create{ model = "m1", messages = { { role = "user", content = "hi there" } } }
  T.eq(r.choices[1].message.content, "echo: hi there")
  T.eq(r.usage.total_tokens, 6)
  T.eq((client:complete("m1", "ping")), "echo: ping")
  local deltas = {}
  local s = client.chat.completions.create{ model = "m1", messages = { { role = "user", content = "streamed answer" } },
                                            stream = function(d) deltas[#deltas + 1] = d end }
  T.eq(#deltas, 3)
  T.eq(s.choices[1].message.content, "echo: streamed answer")
  T.eq(s.choices[1].finish_reason, "stop")
  T.eq(s.usage.total_tokens, 6)
  local bad = OA.new{ base_url = base .. "/v1", api_key = "sk-wrong-key-777" }
  local msg = T.raises(function() bad:complete("m1", "x") end, "HTTP 401: invalid api key", true)
  T.ok(not msg:find("sk-wrong-key-777", 1, true), msg)
  T.raises(function() OA.new{ provider = "nope" } end, 'unknown provider "nope"', true)
  T.raises(function() client.chat.completions.create{ messages = {} } end, "model and messages are required", true)
end)

T.test("toolkit.openai_client: a provider without its key says which variable to set", function()
  local OA = require "toolkit.openai_client"
  local ffi = require "ffi"
  pcall(ffi.cdef, "int unsetenv(const char *name);")
  ffi.C.unsetenv("OPENROUTER_API_KEY")
  T.raises(function() OA.new{ provider = "openrouter" } end, "OPENROUTER_API_KEY is not set", true)
end)

T.test("Ctrl-C stops a request at once (exit 130), however long its timeout", function()
  start()
  local SEER = require("seer.jupyter").seer_binary()
  local child = process.spawn{ argv = { SEER, "-e", ("require('seer.http').get(%q, { timeout = 60 })"):format(base .. "/slow/20") },
                               stdout = "null", stderr = "null" }
  process.sleep_ms(400)
  local t0 = process.now_ms()
  child:kill(2)
  T.ok(child:wait(3000), "seer did not end after SIGINT")
  T.ok(process.now_ms() - t0 < 1500, "ending took " .. (process.now_ms() - t0) .. " ms")
  T.eq(child.exit_code, 130)
end)

T.test("harness: a server that sends no usage leaves it unknown, not 0, and token_limit says so", function()
  start()
  local events = {}
  local r = require("seer.harness").run_agent{ provider = "local", base_url = base .. "/nousage/v1", api_key = "k", model = "m",
    prompt = "p", user_message = "hello", token_limit = 100000, output_dir = T.tmpdir(), max_turns = 1,
    on_message = function(m) events[#events + 1] = m end }:run()
  T.eq(r.reason, "end_turn")
  T.eq(r.text, "echo: hello")
  T.eq(r.usage_unknown_turns, 1)
  T.eq(r.cost_usd, require("seer.json").null)
  local u
  for _, e in ipairs(events) do if e.type == "usage" then u = e end end
  T.eq(u.usage_known, false)
  T.contains(u.note, "the server sent no usage for this turn")
  T.contains(u.note, "token_limit counts an upper estimate") -- never nothing (docs/harness.md)
  T.ok(r.estimated_tokens >= 8192, "the estimate counts max_tokens: " .. tostring(r.estimated_tokens))
  local r2 = require("seer.harness").run_agent{ provider = "local", base_url = base .. "/v1", api_key = "k", model = "m",
    prompt = "p", user_message = "hello", output_dir = T.tmpdir(), max_turns = 1 }:run()
  T.eq(r2.usage_unknown_turns, nil)
  T.eq(r2.usage.input_tokens, 3)
end)

T.test("stop the fake server", function()
  if server then server:stop(500) end
end)
