-- `seer serve`: stories260K behind the OpenAI-compatible endpoint, driven by toolkit.openai_client
-- (seer.http) and by raw sockets for the hostile cases: answers equal in-process generation,
-- streaming, stop strings, the token, and bounded, timed requests.
local T = require "testing"
local process = require "seer.process"
local json = require "seer.json"

local stories = require("seer.core.host").realpath(seer.script_dir() .. "/../fixtures/models/stories260K")
local SEER = require("seer.jupyter").seer_binary()

local function serve(extra)
  local argv = { SEER, "serve", stories, "--name", "stories", "--read-timeout", "1" }
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  local child = process.spawn{ argv = argv, stdout = "pipe", stderr = "null" }
  local line = child:read_line(15000)
  assert(line, "seer serve printed nothing: " .. child:describe_exit())
  local info = json.decode(line)
  return child, info
end

local srv, info
local function plain()
  if not srv then srv, info = serve() end
  return info
end

T.test("chat completions equal in-process greedy generation, with usage; /v1/models lists the model", function()
  local i = plain()
  local OA = require "toolkit.openai_client"
  local client = OA.new{ base_url = i.url }
  local r = client.chat.completions.create{ model = "stories", messages = { { role = "user", content = "Tell me a story" } },
                                            max_tokens = 30, temperature = 0 }
  local m = seer.model.load(stories)
  local want = m:generate("User: Tell me a story\nAssistant:", { max_new_tokens = 30 })
  T.eq(r.choices[1].message.content, want.text)
  T.eq(r.choices[1].finish_reason, "length")
  T.eq(r.usage.completion_tokens, 30)
  T.eq(r.usage.prompt_tokens, #want.prompt_ids)
  T.eq(r.model, "stories")
  local models = require("seer.http").get_json(i.url .. "/models")
  T.eq(models.data[1].id, "stories")
end)

T.test("completions: streamed pieces add up to the plain answer; a stop string ends it", function()
  local i = plain()
  local OA = require "toolkit.openai_client"
  local client = OA.new{ base_url = i.url }
  local http = require "seer.http"
  local plain_r = http.post_json(i.url .. "/completions", { prompt = "Once upon a time", max_tokens = 25, seed = 3, temperature = 0.8 })
  local pieces = {}
  http.sse(i.url .. "/completions", { method = "POST", json = { prompt = "Once upon a time", max_tokens = 25, seed = 3, temperature = 0.8, stream = true } },
    function(ev) if ev.data ~= "[DONE]" then pieces[#pieces + 1] = json.decode(ev.data).choices[1].text end end)
  T.eq(table.concat(pieces), plain_r.choices[1].text)
  local stopped = http.post_json(i.url .. "/completions", { prompt = "Once upon a time", max_tokens = 40, stop = "." })
  T.ok(not stopped.choices[1].text:find(".", 1, true), stopped.choices[1].text)
  T.eq(stopped.choices[1].finish_reason, "stop")
  local deltas = {}
  local s = client.chat.completions.create{ model = "stories", messages = { { role = "user", content = "Hi" } }, max_tokens = 12,
                                            stream = function(d) deltas[#deltas + 1] = d end }
  T.eq(s.choices[1].message.content, table.concat(deltas))
  T.eq(s.usage.completion_tokens, 12)
end)

T.test("bad requests get OpenAI-shaped errors", function()
  local i = plain()
  local http = require "seer.http"
  local function err(path, body)
    local r = http.post(i.url .. path, body, { retries = 0 })
    return r.status, (pcall(json.decode, r.body)) and json.decode(r.body).error.message or r.body
  end
  local st, msg = err("/chat/completions", json.encode{ model = "gpt-4", messages = { { role = "user", content = "x" } } })
  T.eq(st, 404); T.contains(msg, 'model "gpt-4" is not served here')
  st, msg = err("/chat/completions", "{not json")
  T.eq(st, 400); T.contains(msg, "not JSON")
  st, msg = err("/chat/completions", json.encode{ messages = {} })
  T.eq(st, 400); T.contains(msg, "messages must be a non-empty list")
  st, msg = err("/chat/completions", json.encode{ messages = { { role = "user", content = 5 } } })
  T.eq(st, 400); T.contains(msg, "messages[0] needs a role and a string content")
  st, msg = err("/completions", json.encode{ prompt = "x", max_tokens = 100000 })
  T.eq(st, 400); T.contains(msg, "max_tokens is at most 1024")
  -- sampling numbers outside their ranges are the client's error (400), not the server's (500)
  st, msg = err("/completions", json.encode{ prompt = "x", max_tokens = 2, temperature = -1 })
  T.eq(st, 400); T.contains(msg, "temperature must be from 0 to 2")
  st, msg = err("/completions", '{"prompt": "x", "max_tokens": 2, "temperature": 1e999}')
  T.eq(st, 400); T.contains(msg, "temperature must be from 0 to 2")
  st, msg = err("/chat/completions", json.encode{ messages = { { role = "user", content = "x" } }, max_tokens = 2, top_p = 3 })
  T.eq(st, 400); T.contains(msg, "top_p must be from 0 to 1")
  st, msg = err("/completions", json.encode{ prompt = "x", max_tokens = 2, seed = 1.5 })
  T.eq(st, 400); T.contains(msg, "seed must be an integer")
  st, msg = err("/completions", '{"prompt": "x", "max_tokens": 2, "seed": 1e300}')
  T.eq(st, 400); T.contains(msg, "seed must be an integer")
  -- fields that would change the answer and that this server does not do are refused by name
  -- (n = 3 answered with one choice, logprobs = true without logprobs)
  local chat_x = { { role = "user", content = "x" } }
  for _, c in ipairs({
    { { n = 2 }, "n must be 1 on this server" },
    { { logprobs = true }, "logprobs are not supported" },
    { { top_logprobs = 3 }, "top_logprobs are not supported" },
    { { tools = { { type = "function", ["function"] = { name = "f" } } } }, "tools (function calling) are not supported" },
    { { tool_choice = "auto" }, "tool_choice is not supported" },
    { { response_format = { type = "json_object" } }, "response_format other than" },
    { { presence_penalty = 0.5 }, "presence_penalty is not supported by this server (only 0)" },
    { { logit_bias = { ["50"] = 10 } }, "logit_bias is not supported" },
  }) do
    local body = { messages = chat_x, max_tokens = 2 }
    for k, v in pairs(c[1]) do body[k] = v end
    st, msg = err("/chat/completions", json.encode(body))
    T.eq(st, 400, c[2]); T.contains(msg, c[2])
  end
  st, msg = err("/completions", json.encode{ prompt = "x", max_tokens = 2, echo = true })
  T.eq(st, 400); T.contains(msg, "echo is not supported")
  -- their neutral values are taken, as OpenAI's clients send them
  local ok_r = http.post_json(i.url .. "/chat/completions", { messages = chat_x, max_tokens = 2, n = 1, logprobs = false,
    presence_penalty = 0, frequency_penalty = 0, tools = json.array(), response_format = { type = "text" } })
  T.eq(ok_r.usage.completion_tokens, 2)
  -- content as a list of text parts is joined with newlines; other part types are refused
  local parts = http.post_json(i.url .. "/chat/completions", { messages = { { role = "user",
    content = { { type = "text", text = "Tell me" }, { type = "text", text = "a story" } } } }, max_tokens = 20, temperature = 0 })
  local joined = http.post_json(i.url .. "/chat/completions", { messages = { { role = "user", content = "Tell me\na story" } },
    max_tokens = 20, temperature = 0 })
  T.eq(parts.choices[1].message.content, joined.choices[1].message.content)
  T.eq(parts.usage.prompt_tokens, joined.usage.prompt_tokens)
  st, msg = err("/chat/completions", json.encode{ messages = { { role = "user", content = { { type = "image_url", image_url = { url = "x" } } } } } })
  T.eq(st, 400); T.contains(msg, "messages[0] content[0] is a part of type image_url; this server takes text parts only")
  st, msg = err("/embeddings", "{}")
  T.eq(st, 404); T.contains(msg, "no route /v1/embeddings")
  st = err("/completions", string.rep("x", 5 * 1024 * 1024))
  T.eq(st, 413)
end)

-- A raw TCP client for what an HTTP library would not send.
local sock = require "seer.sock"
local function raw(port, data, wait_ms)
  local fd = assert(sock.connect_tcp("127.0.0.1", port, 3000))
  if data ~= "" then sock.send_all(fd, data) end
  local t0 = process.now_ms()
  local got = ""
  while process.now_ms() - t0 < (wait_ms or 5000) do
    if sock.wait(fd, sock.POLLIN, 100) then
      local c = sock.recv(fd)
      if c == "" then break end
      got = got .. (c or "")
    end
  end
  sock.close(fd)
  return got, process.now_ms() - t0
end

T.test("a client that never finishes its request is cut off at the read timeout; the next one is served", function()
  local i = plain()
  local got, ms = raw(i.port, "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro")
  T.contains(got, "HTTP/1.1 408")
  T.ok(ms < 3000, "took " .. ms .. " ms")
  got = raw(i.port, "GET /v1/models HTTP/1.1\r\n" .. string.rep("X-Pad: " .. string.rep("a", 100) .. "\r\n", 200) .. "\r\n")
  T.contains(got, "HTTP/1.1 431")
  got = raw(i.port, "BREW /coffee HTCPCP/1.0\r\n\r\n")
  T.contains(got, "HTTP/1.1 400")
  T.eq(require("seer.http").get_json(i.url .. "/models").data[1].id, "stories")
end)

T.test("with a token, requests without it (or with a wrong one) are refused", function()
  local child, i = serve({ "--token", "s3cret-token" })
  local http = require "seer.http"
  T.eq(http.get(i.url .. "/models", { retries = 0 }).status, 401)
  T.eq(http.get(i.url .. "/models", { retries = 0, headers = { Authorization = "Bearer s3cret-tokeX" } }).status, 401)
  T.eq(http.get(i.url .. "/models", { headers = { Authorization = "Bearer s3cret-token" } }).status, 200)
  child:stop(1000)
end)

T.test("bad usage: beyond loopback without a token, a missing model, an unknown flag", function()
  local function run(args)
    local p = io.popen(("'%s' serve %s 2>&1; echo \"exit=$?\""):format(SEER, args))
    local out = p:read("*a")
    p:close()
    return out
  end
  local out = run("'" .. stories .. "' --host 0.0.0.0")
  T.contains(out, "without a token lets anyone on the network use the model")
  T.contains(out, "exit=2")
  T.contains(run(""), "MODEL is missing")
  T.contains(run("x --bogus"), "unknown option --bogus")
end)

T.test("Ctrl-C ends seer serve", function()
  if not srv then return end
  srv:kill(2)
  T.ok(srv:wait(3000), "seer serve did not end on SIGINT")
  T.eq(srv.exit_code, 130)
end)
