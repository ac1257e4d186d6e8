-- `seer serve`: stories260K behind the OpenAI-compatible endpoint, driven by toolkit.openai_client
-- (seer.http) and by raw sockets for the hostile cases: answers equal in-process generation,
-- streaming, stop strings, the token, and bounded, timed requests (the context, idle peers, Host
-- and Origin headers, the stop-string caps).
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

-- fn(info) against a server of its own, stopped even when fn fails (a stalled one is killed).
local function own_server(extra, fn)
  local child, i = serve(extra)
  local ok, err = pcall(fn, i)
  child:stop(1000)
  if not ok then error(err, 0) end
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
  T.eq(st, 400); T.contains(msg, "temperature must be a number from 0 to 2")
  st, msg = err("/completions", '{"prompt": "x", "max_tokens": 2, "temperature": 1e999}')
  T.eq(st, 400); T.contains(msg, "temperature must be a number from 0 to 2")
  st, msg = err("/chat/completions", json.encode{ messages = { { role = "user", content = "x" } }, max_tokens = 2, top_p = 3 })
  T.eq(st, 400); T.contains(msg, "top_p must be a number from 0 to 1")
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

-- The in-process model the answers are compared with (loaded once).
local local_model
local function lm()
  local_model = local_model or seer.model.load(stories)
  return local_model
end
local function errq(path, body)
  local r = require("seer.http").post(plain().url .. path, type(body) == "string" and body or json.encode(body), { retries = 0 })
  local okj, d = pcall(json.decode, r.body)
  return r.status, okj and type(d) == "table" and type(d.error) == "table" and d.error.message or r.body
end

T.test("sampling fields of vLLM / OpenRouter are implemented: answers equal in-process generation with the same options", function()
  local i = plain()
  local http = require "seer.http"
  local m = lm()
  local prompt = "Once upon a time"
  local function served(extra)
    local body = { prompt = prompt, max_tokens = 30 }
    for k, v in pairs(extra) do body[k] = v end
    return http.post_json(i.url .. "/completions", body).choices[1]
  end
  local greedy = m:generate(prompt, { max_new_tokens = 30 }).text
  -- repetition_penalty was ignored: the answer was plain greedy's, byte for byte
  local rp = served{ repetition_penalty = 5.0 }
  T.eq(rp.text, m:generate(prompt, { max_new_tokens = 30, repetition_penalty = 5.0 }).text)
  T.ne(rp.text, greedy, "repetition_penalty = 5 changes stories260K's greedy answer")
  for _, o in ipairs({
    { top_k = 3, temperature = 1, seed = 7 }, { min_p = 0.2, temperature = 1, seed = 7 },
    { top_p = 0.5, temperature = 1.5, seed = 11 }, { top_k = 2, top_p = 0.9, min_p = 0.05, repetition_penalty = 1.3, temperature = 0.9, seed = 5 },
  }) do
    local want = { max_new_tokens = 30 }
    for k, v in pairs(o) do want[k] = v end
    T.eq(served(o).text, m:generate(prompt, want).text, json.encode(o))
  end
  -- top_k 0 and -1 (vLLM's "off") are no limit
  T.eq(served{ top_k = -1, temperature = 1, seed = 7 }.text, m:generate(prompt, { max_new_tokens = 30, temperature = 1, seed = 7 }).text)
  T.eq(served{ top_k = 0, temperature = 1, seed = 7 }.text, m:generate(prompt, { max_new_tokens = 30, temperature = 1, seed = 7 }).text)
  -- max_completion_tokens is max_tokens' newer name
  local r = http.post_json(i.url .. "/chat/completions", { messages = { { role = "user", content = "Hi" } }, max_completion_tokens = 7 })
  T.eq(r.usage.completion_tokens, 7)
  T.eq(r.choices[1].finish_reason, "length")
  -- stop_token_ids end the answer at a token (kept in the text, as vLLM); min_tokens holds them off
  local ids = m:generate(prompt, { max_new_tokens = 30 }).ids
  local at -- a token that first comes third
  for k = 3, #ids do
    local seen = false
    for j = 1, k - 1 do seen = seen or ids[j] == ids[k] end
    if not seen then at = k break end
  end
  assert(at, "no token of the greedy answer comes first after the second")
  local st = served{ stop_token_ids = { ids[at] } }
  T.eq(st.finish_reason, "stop")
  T.eq(st.text, m.tokenizer:decode({ unpack(ids, 1, at) }, { skip_special_tokens = true }))
  local held = http.post_json(i.url .. "/completions", { prompt = prompt, max_tokens = 30, stop_token_ids = { ids[at] }, min_tokens = at + 3 })
  T.eq(held.choices[1].text, m:generate(prompt, { max_new_tokens = 30, stop = { ids[at] }, min_new_tokens = at + 3 }).text)
  T.ok(held.usage.completion_tokens > at, "min_tokens held the stop token off")
  -- fields that cannot change the answer, and the neutral values of vLLM's switches
  local h = http.post_json(i.url .. "/completions", { prompt = prompt, max_tokens = 30, user = "tester", ignore_eos = false,
    skip_special_tokens = true, include_stop_str_in_output = false, stream = false, top_k = json.null, logprobs = json.null })
  T.eq(h.choices[1].text, greedy)
end)

T.test("finish_reason is stop when a stop string or stop token ends the answer on the last token max_tokens allows", function()
  local i = plain()
  local http = require "seer.http"
  local m = lm()
  local prompt = "Once upon a time"
  -- the greedy answer token by token; k: a token whose text first appears with it
  local pieces, ids, text_before = {}, {}, {}
  for id, piece in m:generate_iter(prompt, { max_new_tokens = 40 }) do ids[#ids + 1] = id; pieces[#pieces + 1] = piece end
  local k, stop
  local so_far = ""
  for j, piece in ipairs(pieces) do
    text_before[j] = so_far
    local s = piece:match("^%s*(.-)%s*$")
    if j >= 3 and #s >= 2 and not so_far:find(s, 1, true) and (so_far .. piece):find(s, 1, true) then k, stop = j, s break end
    so_far = so_far .. piece
  end
  assert(k, "no token of the greedy answer brings new text")
  local function completion(extra)
    local body = { prompt = prompt, max_tokens = k }
    for key, v in pairs(extra) do body[key] = v end
    return http.post_json(i.url .. "/completions", body)
  end
  T.eq(completion{}.choices[1].finish_reason, "length") -- max_tokens alone ended it
  local r = completion{ stop = stop }
  T.eq(r.usage.completion_tokens, k)
  T.eq(r.choices[1].finish_reason, "stop", "a stop string on the last allowed token was reported as length")
  T.eq(r.choices[1].text, (text_before[k] .. pieces[k]):sub(1, (text_before[k] .. pieces[k]):find(stop, 1, true) - 1))
  T.eq(completion{ stop = { "zzzz-never", stop } }.choices[1].finish_reason, "stop")
  T.eq(completion{ stop_token_ids = { ids[k] } }.choices[1].finish_reason, "stop")
  T.eq(completion{ stop = stop, max_tokens = k + 5 }.choices[1].finish_reason, "stop")
  -- streamed, the last chunk says the same
  local finish, streamed = nil, {}
  http.sse(i.url .. "/completions", { method = "POST", json = { prompt = prompt, max_tokens = k, stop = stop, stream = true } },
    function(ev)
      if ev.data == "[DONE]" then return end
      local ch = json.decode(ev.data).choices[1]
      streamed[#streamed + 1] = ch.text
      finish = ch.finish_reason or finish
    end)
  T.eq(finish, "stop")
  T.eq(table.concat(streamed), r.choices[1].text, "the streamed pieces add up to the answer, without the stop string")
  -- chat: the same rule
  local chat_ids = m:generate("User: Hi\nAssistant:", { max_new_tokens = 10 }).ids
  local c = http.post_json(i.url .. "/chat/completions", { messages = { { role = "user", content = "Hi" } }, max_tokens = 10,
    stop_token_ids = { chat_ids[10] } })
  T.eq(c.choices[1].finish_reason, "stop")
  T.eq(c.usage.completion_tokens, #m:generate("User: Hi\nAssistant:", { max_new_tokens = 10, stop = { chat_ids[10] } }).ids)
end)

T.test("every other request field is a 400 naming it and saying what to do; bad values of implemented fields too", function()
  plain()
  local chat_x = { { role = "user", content = "x" } }
  local function chat(extra)
    local body = { messages = chat_x, max_tokens = 2 }
    for k, v in pairs(extra) do body[k] = v end
    return errq("/chat/completions", body)
  end
  local function completion(extra)
    local body = { prompt = "x", max_tokens = 2 }
    for k, v in pairs(extra) do body[k] = v end
    return errq("/completions", body)
  end
  -- bogus_field was answered as if absent
  local st, msg = completion{ bogus_field = 5 }
  T.eq(st, 400)
  T.contains(msg, 'unknown field "bogus_field": this server does not implement it')
  T.contains(msg, "remove it (the fields it takes: model, prompt, max_tokens")
  st, msg = chat{ typical_p = 0.5, length_penalty = 1, bogus = json.null }
  T.eq(st, 400)
  T.contains(msg, 'unknown fields "bogus", "length_penalty", "typical_p"')
  T.contains(msg, "model, messages, max_tokens")
  st, msg = errq("/completions", { messages = chat_x })
  T.eq(st, 400); T.contains(msg, "messages is a field of /v1/chat/completions; /v1/completions takes prompt")
  st, msg = errq("/chat/completions", { prompt = "x" })
  T.eq(st, 400); T.contains(msg, "prompt is a field of /v1/completions; /v1/chat/completions takes messages")
  st, msg = errq("/completions", "[1, 2]")
  T.eq(st, 400); T.contains(msg, "the body must be a JSON object")
  for _, c in ipairs({
    { { top_k = 1.5 }, "top_k must be an integer >= 1, or 0 or -1 for no limit, got 1.5" },
    { { top_k = -2 }, "top_k must be an integer" },
    { { min_p = 2 }, "min_p must be a number from 0 to 1" },
    { { repetition_penalty = 0 }, "repetition_penalty must be a number > 0" },
    { { repetition_penalty = "5" }, "repetition_penalty must be a number" },
    { { min_tokens = -1 }, "min_tokens must be an integer >= 0" },
    { { min_tokens = 3 }, "min_tokens (3) is more than max_tokens (2)" },
    { { min_tokens = 1, stop = "." }, "min_tokens with stop strings is not supported" },
    { { max_completion_tokens = 3 }, "max_tokens and max_completion_tokens differ" },
    { { stop = { ".", 5 } }, "stop[1] must be a string, got 5 (token ids go in stop_token_ids)" },
    { { stop = 5 }, "stop must be a string or a list of strings" },
    { { stop_token_ids = { 1e9 } }, "stop_token_ids[0] must be a token id from 0 to" },
    { { stream = "yes" }, "stream must be true or false" },
    { { stream_options = { continuous_usage_stats = true } }, "stream_options.continuous_usage_stats is not supported" },
    { { presence_penalty = 0.5 }, "presence_penalty is not supported by this server (only 0); repetition_penalty (> 1) is the penalty it has" },
    { { frequency_penalty = 1 }, "frequency_penalty is not supported by this server (only 0)" },
    { { n = 2 }, "n must be 1 on this server" },
    { { ignore_eos = true }, "ignore_eos is not supported by this server" },
    { { skip_special_tokens = false }, "skip_special_tokens is not supported by this server" },
    { { include_stop_str_in_output = true }, "include_stop_str_in_output is not supported" },
    { { logprobs = 0 }, "logprobs are not supported by this server (only false)" },
    { { model = 5 }, "model must be a string" },
  }) do
    st, msg = chat(c[1])
    T.eq(st, 400, c[2]); T.contains(msg, c[2])
  end
  -- a message is a role and a content: other fields would not reach the prompt
  st, msg = errq("/chat/completions", { messages = { { role = "user", content = "x", name = "bob" } } })
  T.eq(st, 400); T.contains(msg, "messages[0].name is not supported by this server")
  st, msg = errq("/chat/completions", { messages = { { role = "tool", content = "x" } } })
  T.eq(st, 400); T.contains(msg, 'messages[0].role is "tool"; this model has no chat template, so the roles are system, user and assistant')
  -- empty ones are taken (a client replaying an answer sends them)
  local http = require "seer.http"
  local r = http.post_json(plain().url .. "/chat/completions", { messages = { { role = "user", content = "x", name = json.null },
    { role = "assistant", content = "y", tool_calls = json.array(), refusal = json.null } }, max_tokens = 2,
    stream_options = { include_usage = true }, model = json.null })
  T.eq(r.usage.completion_tokens, 2)
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
  own_server({ "--token", "s3cret-token" }, function(i)
    local http = require "seer.http"
    T.eq(http.get(i.url .. "/models", { retries = 0 }).status, 401)
    T.eq(http.get(i.url .. "/models", { retries = 0, headers = { Authorization = "Bearer s3cret-tokeX" } }).status, 401)
    T.eq(http.get(i.url .. "/models", { headers = { Authorization = "Bearer s3cret-token" } }).status, 200)
    -- refused at the end of the head: a body announced and never sent costs no wait (was 408 after the read timeout)
    -- the fastest of up to three tries: one stall of this VM (single ones of ~0.5 s seen) is not
    -- the server waiting for the body, which every try would show
    local best = math.huge
    for _ = 1, 3 do
      local got, ms = raw(i.port, "POST /v1/completions HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n", 3000)
      T.contains(got, "HTTP/1.1 401")
      best = math.min(best, ms)
      if best < 500 then break end
    end
    T.ok(best < 500, "took " .. best .. " ms")
  end)
end)

-- A raw request's status, error message (or decoded body) and head.
local function answer(got)
  local st = tonumber(got:match("^HTTP/1%.1 (%d+)"))
  local head, body = got:match("^(.-)\r\n\r\n(.*)$")
  local okj, d = pcall(json.decode, body or "")
  local msg = okj and type(d) == "table" and type(d.error) == "table" and d.error.message or nil
  return st, msg or (okj and d) or body, head or ""
end
local function post(path, body, headers)
  local b = json.encode(body)
  return ("POST %s HTTP/1.1\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"):format(path, headers or "", #b, b)
end

T.test("a prompt past the model's context is a 400 naming the lengths, at once, even at 4 MiB", function()
  local i = plain()
  local m = lm()
  local long = ("Once upon a time "):rep(150)
  local n = #m.tokenizer:encode(long, { add_special_tokens = true })
  T.ok(n > 512, "the long prompt has " .. n .. " tokens, more than stories260K's 512 positions")
  -- was answered: all of it prefilled past the 512 positions (61,682 tokens took 60 s)
  local st, msg = errq("/completions", { prompt = long, max_tokens = 10 })
  T.eq(st, 400)
  T.contains(msg, ("This model's maximum context length is 512 tokens. However, you requested %d tokens (%d in the prompt, 10 in the completion)"):format(n + 10, n))
  st, msg = errq("/chat/completions", { messages = { { role = "user", content = long } } })
  T.eq(st, 400); T.contains(msg, "This model's maximum context length is 512 tokens"); T.contains(msg, "in the messages, 1 in the completion")
  -- a prompt that fits with max_tokens over what is left: a 400; without max_tokens the answer
  -- gets what is left
  local fits = ("Once upon a time "):rep(100)
  local nf = #m.tokenizer:encode(fits, { add_special_tokens = true })
  assert(nf < 500 and nf + 256 > 512, nf)
  st, msg = errq("/completions", { prompt = fits, max_tokens = 200 })
  T.eq(st, 400); T.contains(msg, ("(%d in the prompt, 200 in the completion)"):format(nf))
  local r = require("seer.http").post_json(i.url .. "/completions", { prompt = fits, min_tokens = 512 - nf })
  T.eq(r.usage.prompt_tokens, nf)
  T.eq(r.usage.completion_tokens, 512 - nf)
  T.eq(r.choices[1].finish_reason, "length")
  -- a 4 MiB prompt is refused before it is tokenized (on its own server: the old one stalled for hours)
  own_server({}, function(own)
    local huge = ("Once upon a time "):rep(240000)
    local got, ms = raw(own.port, post("/v1/completions", { prompt = huge, max_tokens = 1 }), 5000)
    st, msg = answer(got)
    T.eq(st, 400, got:sub(1, 200))
    T.contains(msg, "This model's maximum context length is 512 tokens. However, the prompt is 4080000 bytes")
    T.ok(ms < 1000, "took " .. ms .. " ms")
  end)
end)

T.test("peers that connect and send nothing (or part of a head) hold no one up; past the cap the oldest waiting goes", function()
  -- the default read timeout: each idle socket held the server 10 s
  own_server({ "--read-timeout", "10" }, function(own)
    local idle = {}
    for k = 1, 5 do idle[k] = assert(sock.connect_tcp("127.0.0.1", own.port, 3000)) end
    sock.send_all(idle[5], "GET /v1/mod")
    local got, ms = raw(own.port, "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:" .. own.port .. "\r\n\r\n", 3000)
    T.contains(got, "HTTP/1.1 200")
    T.ok(ms < 1000, "a bystander waited " .. ms .. " ms behind 5 idle connections")
    got, ms = raw(own.port, post("/v1/completions", { prompt = "Once upon a time", max_tokens = 5 }), 3000)
    T.eq(answer(got), 200)
    T.ok(ms < 1000, "took " .. ms .. " ms")
    -- 64 waiting connections per address: the oldest waiting one is closed (503) for a new one
    local more = {}
    for k = 1, 64 do more[k] = assert(sock.connect_tcp("127.0.0.1", own.port, 3000)) end
    got, ms = raw(own.port, "GET /v1/models HTTP/1.1\r\n\r\n", 3000)
    T.contains(got, "HTTP/1.1 200"); T.ok(ms < 1000, "took " .. ms .. " ms")
    local function read_all(fd, wait_ms)
      local t0, out = process.now_ms(), ""
      while process.now_ms() - t0 < wait_ms do
        if sock.wait(fd, sock.POLLIN, 50) then
          local c = sock.recv(fd)
          if c == "" then break end
          out = out .. (c or "")
        end
      end
      return out, process.now_ms() - t0
    end
    T.contains(read_all(idle[1], 1000), "HTTP/1.1 503")
    for _, fd in ipairs(more) do sock.close(fd) end
    -- the whole head within 5 s of the accept (a total: was the 10 s read timeout, reset by nothing)
    local t0 = process.now_ms()
    local fd = assert(sock.connect_tcp("127.0.0.1", own.port, 3000))
    for _ = 1, 4 do sock.send_all(fd, "G"); process.sleep_ms(500) end
    local out = read_all(fd, 4000)
    local waited = process.now_ms() - t0
    T.contains(out, "HTTP/1.1 408")
    T.ok(waited > 4500 and waited < 6000, "cut off after " .. waited .. " ms")
    sock.close(fd)
    for _, f in ipairs(idle) do sock.close(f) end
  end)
end)

T.test("a web page's requests are refused: a foreign Host (DNS rebinding) or Origin (cross-site) is a 403", function()
  local i = plain()
  local port = i.port
  local body = { prompt = "Once upon a time", max_tokens = 3 }
  -- a cross-site "simple" POST after DNS rebinding: was answered 200
  local st, msg = answer(raw(port, post("/v1/completions", body, ("Host: rebind.attacker.example:%d\r\nOrigin: http://rebind.attacker.example:%d\r\n"):format(port, port))))
  T.eq(st, 403)
  T.contains(msg, ('Host "rebind.attacker.example:%d" does not name this server'):format(port))
  st, msg = answer(raw(port, "GET /v1/models HTTP/1.1\r\nHost: rebind.attacker.example\r\n\r\n"))
  T.eq(st, 403)
  st, msg = answer(raw(port, post("/v1/completions", body, ("Host: 127.0.0.1:%d\r\nOrigin: http://evil.example\r\n"):format(port))))
  T.eq(st, 403)
  T.contains(msg, 'Origin "http://evil.example" is not this server\'s')
  T.eq(answer(raw(port, post("/v1/completions", body, ("Host: 127.0.0.1:%d\r\nOrigin: null\r\n"):format(port)))), 403)
  T.eq(answer(raw(port, post("/v1/completions", body, ("Host: localhost:%d\r\nHost: evil.example\r\n"):format(port)))), 400)
  -- its own names and origin, and clients that send no Origin (or no Host) are served
  T.eq(answer(raw(port, post("/v1/completions", body, ("Host: 127.0.0.1:%d\r\n"):format(port)))), 200)
  T.eq(answer(raw(port, post("/v1/completions", body, ("Host: LocalHost:%d\r\nOrigin: http://localhost:%d\r\n"):format(port, port)))), 200)
  T.eq(answer(raw(port, post("/v1/completions", body))), 200)
  -- --allow-origin: that page's requests are taken, with CORS headers and a preflight
  own_server({ "--allow-origin", "http://app.example:3000", "--allow-host", "proxy.example" }, function(own)
    local o = "Origin: http://app.example:3000\r\n"
    local got = raw(own.port, post("/v1/completions", body, ("Host: 127.0.0.1:%d\r\n"):format(own.port) .. o))
    local st2, _, head = answer(got)
    T.eq(st2, 200); T.contains(head, "Access-Control-Allow-Origin: http://app.example:3000")
    st2, _, head = answer(raw(own.port, ("OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%sAccess-Control-Request-Method: POST\r\n\r\n"):format(own.port, o)))
    T.eq(st2, 204); T.contains(head, "Access-Control-Allow-Headers: Authorization, Content-Type")
    T.eq(answer(raw(own.port, post("/v1/completions", body, "Origin: http://other.example\r\n"))), 403)
    T.eq(answer(raw(own.port, post("/v1/completions", body, ("Host: proxy.example:%d\r\n"):format(own.port)))), 200)
    T.eq(answer(raw(own.port, post("/v1/completions", body, "Host: other.example\r\n"))), 403)
  end)
end)

T.test("stop strings are capped: at most 32, of at most 128 bytes (100,000 took 17 s)", function()
  plain()
  local many = {}
  for k = 1, 33 do many[k] = ("zz%d"):format(k) end
  local st, msg = errq("/completions", { prompt = "x", max_tokens = 2, stop = many })
  T.eq(st, 400); T.contains(msg, "stop has 33 strings; this server takes at most 32 stop strings (of at most 128 bytes each)")
  st, msg = errq("/completions", { prompt = "x", max_tokens = 2, stop = { "a", ("z"):rep(129) } })
  T.eq(st, 400); T.contains(msg, "stop[1] is 129 bytes; a stop string is at most 128 bytes on this server")
  st, msg = errq("/completions", { prompt = "x", max_tokens = 2, stop = ("z"):rep(129) })
  T.eq(st, 400); T.contains(msg, "stop is 129 bytes")
  many[33] = nil
  many[1] = ("z"):rep(128)
  local r = require("seer.http").post_json(plain().url .. "/completions", { prompt = "Once upon a time", max_tokens = 5, stop = many })
  T.eq(r.usage.completion_tokens, 5)
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

T.test("headers are parsed strictly: a space before the colon, a bare LF or a Content-Length not of digits is a 400", function()
  -- each was read leniently: "Host : evil.com" skipped the Host check, "+13" was a length of 13
  local i = plain()
  local host = "Host: 127.0.0.1:" .. i.port .. "\r\n"
  local body = '{"model":"x"}'
  for _, req in ipairs({
    "GET /v1/models HTTP/1.1\r\nHost : evil.com\r\n\r\n",
    "GET /v1/models HTTP/1.1\r\n" .. host .. "X: y\nOrigin: http://evil.com\r\n\r\n",
    "POST /v1/completions HTTP/1.1\r\n" .. host .. "Content-Length: +13\r\n\r\n" .. body,
    "POST /v1/completions HTTP/1.1\r\n" .. host .. "Content-Length: 0x0d\r\n\r\n" .. body,
    "POST /v1/completions HTTP/1.1\r\n" .. host .. "Transfer-Encoding : chunked\r\n\r\n",
  }) do
    local got = raw(i.port, req, 3000)
    T.ok(got:match("^HTTP/1%.1 400"), ("%q -> %s"):format(req, got:sub(1, 60)))
  end
  T.ok(raw(i.port, "GET /v1/models HTTP/1.1\r\n" .. host .. "\r\n", 3000):match("^HTTP/1%.1 200"), "a plain request")
end)

T.test("Ctrl-C ends seer serve", function()
  if not srv then return end
  srv:kill(2)
  T.ok(srv:wait(3000), "seer serve did not end on SIGINT")
  T.eq(srv.exit_code, 130)
end)

T.test("seer.serve.serve: a misspelt option is an error naming the valid ones", function()
  T.raises(function() require("seer.serve").serve{ model = {}, prot = 0 } end, "serve: unknown option 'prot'; valid options:", true)
end)
