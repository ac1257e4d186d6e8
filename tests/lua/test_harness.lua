-- seer.harness: the agent loop over the replay provider and Lua tools, options and their errors,
-- .env keys, request bodies (Anthropic and OpenAI shapes), transcripts and redaction, several
-- agents at once against the fake provider (tests/fixtures/harness/fake_provider.py), and an
-- agent that drives `seer mcp notebook` on stories260K with a recorded transcript.
local T = require "testing"
local h = require "seer.harness"
local core = require "seer.core.harness"
local process = require "seer.process"
local json = seer.json

local here = seer.script_dir()
local root = here .. "/../.."
local fixtures = root .. "/tests/fixtures/harness"
local stories = root .. "/tests/fixtures/models/stories260K"

local function lines(path)
  local out = {}
  for l in io.lines(path) do out[#out + 1] = json.decode(l) end
  return out
end

local function of_type(events, t)
  local out = {}
  for _, e in ipairs(events) do if e.type == t then out[#out + 1] = e end end
  return out
end

local function turn(content, stop, usage)
  return { type = "assistant", message = { role = "assistant", content = content }, stop_reason = stop or "end_turn",
           usage = usage or { input_tokens = 10, output_tokens = 5 } }
end

local add_tool = { name = "add", description = "Adds a and b.",
                   input_schema = { type = "object", properties = { a = { type = "number" }, b = { type = "number" } } },
                   fn = function(i) return tostring(i.a + i.b) end }

T.test("replay with Lua tools: messages in order, transcript equals what was yielded", function()
  local dir = T.tmpdir()
  local seen = {}
  local agent = h.run_agent{
    provider = "replay", output_dir = dir, name = "adder", prompt = "You add.",
    replay = {
      turn({ { type = "text", text = "Adding." }, { type = "tool_use", id = "t1", name = "add", input = { a = 2, b = 3 } },
             { type = "tool_use", id = "t2", name = "add", input = { a = 1, b = "x" } } }, "tool_use"),
      turn({ { type = "text", text = "5, and an error." } }),
    },
    tools = { add_tool },
    on_message = function(m) seen[#seen + 1] = m.type end,
  }
  local got = {}
  for msg in agent do got[#got + 1] = msg end
  T.eq(seen, { "run_start", "user", "request", "text_delta", "tool_use_start", "tool_use_start", "assistant", "usage",
               "tool_call", "tool_result", "tool_call", "tool_result", "request", "text_delta", "assistant", "usage", "result" })
  local r = agent.result
  T.eq(r.reason, "end_turn")
  T.eq(r.text, "5, and an error.")
  T.eq(r.turns, 2)
  T.eq(r.usage.input_tokens, 20)
  T.ok(r.transcript:match("^" .. dir:gsub("%p", "%%%0") .. "/%d+%-%d+%-%d+%-%d+%-%d+%-%d+_adder%.jsonl$"), r.transcript)
  local events = lines(r.transcript)
  T.eq(#events, #got)
  for i, e in ipairs(events) do
    T.eq(e.seq, i)
    T.eq(e.type, got[i].type)
    T.eq(e.agent, "adder")
  end
  local results = of_type(events, "tool_result")
  T.eq(results[1].content, { { type = "text", text = "5" } })
  T.eq(results[1].is_error, false)
  T.eq(results[2].is_error, true)
  T.contains(results[2].content[1].text, "arithmetic on field 'b'")
end)

T.test("run() returns the result; :next() after the end is nil", function()
  local a = h.run_agent{ provider = "replay", output_dir = T.tmpdir(), replay = { turn({ { type = "text", text = "hi" } }) } }
  T.eq(a:run().text, "hi")
  T.eq(a:next(), nil)
end)

T.test("a replay that runs out of turns is an error naming the transcript", function()
  local a = h.run_agent{ provider = "replay", output_dir = T.tmpdir(), tools = { add_tool },
                         replay = { turn({ { type = "tool_use", id = "t1", name = "add", input = { a = 1, b = 1 } } }, "tool_use") } }
  local msg = T.raises(function() a:run() end, "failed: the replay transcript has no assistant turn 2")
  T.contains(msg, "transcript: ")
  T.eq(a.result.reason, "replay_exhausted")
end)

T.test("an interrupted run's result event carries its duration and cost so far, and says interrupted", function()
  -- Ctrl-C landing in a tool (raised as "interrupted" from wherever it landed)
  local slow = { name = "slow", description = "Waits.", input_schema = { type = "object", properties = {} },
                 fn = function() process.sleep_ms(300) error("/somewhere/inside.lua:12: interrupted", 0) end }
  local dir = T.tmpdir()
  local a = h.run_agent{ provider = "replay", output_dir = dir, tools = { slow },
                         replay = { turn({ { type = "tool_use", id = "t1", name = "slow", input = {} } }, "tool_use") } }
  T.raises(function() a:run() end, "interrupted")
  local ev = lines(a.transcript_path)
  local r = ev[#ev]
  T.eq(r.type, "result")
  T.eq(r.reason, "interrupted")
  T.eq(r.error, "interrupted", "not the internal line where it landed")
  T.ok(type(r.duration_s) == "number" and r.duration_s >= 0.25, "duration_s: " .. tostring(r.duration_s))
  T.ok(r.cost_usd ~= nil, "cost_usd is there (null when the price is unknown)")
  T.eq(r.usage.output_tokens, 5)
  local p = io.popen(("'%s' transcript view '%s' 2>&1"):format(require("seer.jupyter").seer_binary(), a.transcript_path))
  local out = p:read("*a")
  p:close()
  T.ok(out:find("interrupted after 1 turn%(s%), 0%.[3-9] s"), out)
end)

T.test("options: unknown, mistyped, providers, keys", function()
  T.raises(function() h.run_agent{ promt = "x" } end, "unknown option 'promt' %(valid: .*prompt")
  T.raises(function() h.run_agent{ max_turns = "3" } end, "option 'max_turns' must be a number")
  T.raises(function() h.run_agent{ max_turns = 0, provider = "replay", replay = {} } end, "must be more than 0")
  T.raises(function() h.run_agent{ max_turns = 2.5, provider = "replay", replay = {} } end, "option 'max_turns' must be a whole number from 0, got 2.5")
  T.raises(function() h.run_agent{ max_tokens = 0/0, provider = "replay", replay = {} } end, "option 'max_tokens' must be more than 0")
  T.raises(function() h.run_agent{ max_tokens = math.huge, provider = "replay", replay = {} } end, "option 'max_tokens' must be a whole number")
  T.raises(function() h.run_agent{ token_limit = 1e4 + 0.25, provider = "replay", replay = {} } end, "option 'token_limit' must be a whole number")
  T.raises(function() h.run_agent{ max_retries = -1, provider = "replay", replay = {} } end, "option 'max_retries' must be a whole number from 0, got %-1")
  T.raises(function() h.run_agent{ provider = "mistral" } end, "unknown provider 'mistral' %(known: .*claude.*; or give base_url")
  T.raises(function() h.run_agent{ provider = "replay" } end, "provider 'replay' needs replay =")
  T.raises(function() h.run_agent{ provider = "openrouter", api_key = "k-123456" } end, "needs model =")
  T.raises(function() h.run_agent{ provider = "replay", replay = { { type = "user", text = "x" } } } end, "holds no assistant turns")
  T.raises(function() h.run_agent("x") end, "takes one table of options")
  -- a local OpenAI-compatible server needs no key
  local a = h.run_agent{ provider = "openai", base_url = "http://127.0.0.1:9/v1", model = "m", output_dir = T.tmpdir() }
  T.eq(a.url, "http://127.0.0.1:9/v1/chat/completions")
  T.eq(a.api_key, nil)
end)

local function seer_in(dir, code, env)
  local prefix = ""
  for k, v in pairs(env or {}) do prefix = prefix .. ("%s='%s' "):format(k, v) end
  local p = io.popen(("cd '%s' && env -u ANTHROPIC_API_KEY -u ANTHROPIC_BASE_URL %s'%s' -e \"%s\" 2>&1"):format(
    dir, prefix, os.getenv("SEER") or (root .. "/seer"), code))
  local out = p:read("*a")
  p:close()
  return out
end

T.test("the API key comes from the environment, else .env (experiment dir, then working dir)", function()
  local dir = T.tmpdir()
  local code = "local a = require('seer.harness').run_agent{output_dir = '/tmp'} print(a.api_key, a.url)"
  T.contains(seer_in(dir, code), "no API key for provider 'claude': set ANTHROPIC_API_KEY in the environment or in a .env file")
  local f = io.open(dir .. "/.env", "w")
  f:write("# keys\nexport ANTHROPIC_API_KEY=\"sk-from-dotenv-123\"  \nANTHROPIC_BASE_URL=http://127.0.0.1:1 # local\n")
  f:close()
  T.contains(seer_in(dir, code), "sk-from-dotenv-123\thttp://127.0.0.1:1/v1/messages")
  T.contains(seer_in(dir, code, { ANTHROPIC_API_KEY = "sk-env-456789" }), "sk-env-456789")
  local vars = h.read_dotenv(dir .. "/.env")
  T.eq(vars, { ANTHROPIC_API_KEY = "sk-from-dotenv-123", ANTHROPIC_BASE_URL = "http://127.0.0.1:1" })
  T.eq(h.read_dotenv(dir .. "/nope"), nil)
end)

T.test("transcripts: seq and time first, secrets redacted everywhere, short secrets refused", function()
  local path = T.tmpdir() .. "/t.jsonl"
  local t = core.transcript(path, { "sk-secret-1234", "hunter22" }, 2)
  t:write(json.encode{ type = "x", text = "key sk-secret-1234 and hunter22", nested = { ["hunter22"] = { "sk-secret-1234!" } } })
  t:write(json.encode{ type = "text_delta", text = "a" })
  T.eq(t:ended(), false)
  t:write(json.encode{ type = "result_like", text = "a" })
  T.eq(t:ended(), false)
  t:write(json.encode{ type = "result", reason = "end_turn" })
  T.eq(t:ended(), true, "the transcript records its result in the call that wrote it")
  t:close()
  local text = seer.read_file(path)
  T.ok(text:match('^{"seq":1,"time":%d+%.?%d*,'), text)
  T.ok(not text:find("sk-secret-1234", 1, true) and not text:find("hunter22", 1, true), text)
  local ev = lines(path)
  T.eq(ev[1].text, "key [REDACTED] and [REDACTED]")
  T.eq(ev[1].nested["[REDACTED]"][1], "[REDACTED]!")
  T.eq(ev[2].seq, 2)
  T.raises(function() core.transcript(path, { "abc" }) end, "shorter than 4 characters")
  T.raises(function() core.transcript("/nonexistent/dir/t.jsonl") end, "cannot open /nonexistent/dir/t.jsonl")
  T.eq(core.redact("a sk-secret-1234 b", { "sk-secret-1234", "ab" }), "a [REDACTED] b")
end)

T.test("secrets named in `secrets` are redacted from transcripts and from what the iterator yields", function()
  local dir = T.tmpdir()
  local env_tool = { name = "env", description = "an env var", input_schema = { type = "object" },
                     fn = function(i) return os.getenv(i.name) end }
  -- HOME is set everywhere and long enough; treat it as a secret for this test
  local home = os.getenv("HOME")
  if not home or #home < 4 then T.skip("HOME is too short to stand in for a secret") end
  local yielded = {}
  local a = h.run_agent{ provider = "replay", output_dir = dir, tools = { env_tool }, secrets = { "HOME" },
    replay = { turn({ { type = "tool_use", id = "e1", name = "env", input = { name = "HOME" } } }, "tool_use"),
               turn({ { type = "text", text = "done" } }) } }
  for m in a do yielded[#yielded + 1] = json.encode(m) end
  local all = table.concat(yielded, "\n")
  T.ok(not all:find(home, 1, true), "the iterator leaked the secret")
  T.ok(not seer.read_file(a.result.transcript):find(home, 1, true), "the transcript leaked the secret")
  T.contains(all, "[REDACTED]")
end)

T.test("request bodies: Anthropic caching and private fields; OpenAI messages, tool calls, results, images", function()
  local messages = json.array{
    { role = "user", content = "Hi" },
    { role = "assistant", content = json.array{
      { type = "thinking", thinking = "hmm", signature = "sig" },
      { type = "text", text = "Calling." },
      { type = "tool_use", id = "c1", name = "look", input = json.object{} },
      { type = "tool_use", id = "c2", name = "look", input = json.object{}, seer_invalid_input = "{bad", seer_input_error = "x" } } },
    { role = "user", content = json.array{
      { type = "tool_result", tool_use_id = "c1", content = json.array{ { type = "text", text = "seen" },
        { type = "image", source = { type = "base64", media_type = "image/png", data = "iVBOR" } } } },
      { type = "tool_result", tool_use_id = "c2", is_error = true, content = "bad args" } } },
  }
  local tools = json.array{ { name = "look", description = "Looks.", input_schema = { type = "object" } } }
  local a = json.decode(core.build_body(json.encode{ provider = "anthropic", model = "m", max_tokens = 100, system = "S",
                                                     messages = messages, tools = tools, params = { temperature = 0.5 } }))
  T.eq(a.system, { { type = "text", text = "S", cache_control = { type = "ephemeral" } } })
  T.eq(a.tools[1].cache_control, { type = "ephemeral" })
  T.eq(a.messages[2].content[1], { type = "thinking", thinking = "hmm", signature = "sig" })
  T.eq(a.messages[2].content[4].seer_invalid_input, nil)
  T.eq(a.messages[3].content[2].cache_control, { type = "ephemeral" })
  T.eq(a.messages[1].content, "Hi")
  T.eq(a.temperature, 0.5)
  T.eq(a.stream, true)
  local nc = json.decode(core.build_body(json.encode{ provider = "anthropic", model = "m", messages = messages, cache = false }))
  T.eq(nc.messages[3].content[2].cache_control, nil)
  T.eq(nc.max_tokens, 8192)
  local o = json.decode(core.build_body(json.encode{ provider = "openai", model = "m", max_tokens = 50, system = "S",
                                                     messages = messages, tools = tools }))
  T.eq(o.max_tokens, 50)
  T.eq(o.messages[1], { role = "system", content = "S" })
  T.eq(o.messages[2], { role = "user", content = "Hi" })
  T.eq(o.messages[3].content, "Calling.")
  T.eq(o.messages[3].tool_calls[2]["function"].arguments, "{bad")
  T.eq(o.messages[4].role, "tool")
  T.eq(o.messages[4].tool_call_id, "c1")
  T.contains(o.messages[4].content, "seen")
  T.eq(o.messages[5], { role = "tool", tool_call_id = "c2", content = "Error: bad args" })
  T.eq(o.messages[6].role, "user")
  T.eq(o.messages[6].content[2], { type = "image_url", image_url = { url = "data:image/png;base64,iVBOR" } })
  T.eq(o.tools[1], { type = "function", ["function"] = { name = "look", description = "Looks.", parameters = { type = "object" } } })
  -- an assistant turn of tool calls alone gets content "" (llama-cpp-python answers 500 to null)
  local only_calls = json.decode(core.build_body(json.encode{ provider = "openai", model = "m", messages = {
    { role = "user", content = "Hi" },
    { role = "assistant", content = { { type = "tool_use", id = "c1", name = "look", input = {} } } } } }))
  T.eq(only_calls.messages[2].content, "")
  T.eq(only_calls.messages[2].tool_calls[1].id, "c1")
  T.raises(function() core.build_body(json.encode{ provider = "anthropic", messages = {} }) end, "has no model")
  T.raises(function() core.build_body("{") end, "not valid JSON")
end)

-- The fake provider as a child process, for the tests that need real HTTP streams.
local function fake_provider(responses)
  local dir = T.tmpdir()
  local script = dir .. "/script.json"
  seer.write_file(script, json.encode(responses))
  local child = process.spawn{ argv = { "/usr/bin/python3", fixtures .. "/fake_provider.py", script,
                                        "--port-file", dir .. "/port", "--log", dir .. "/log.jsonl" },
                               stderr = dir .. "/stderr" }
  local deadline = process.now_ms() + 10000
  while true do
    local f = io.open(dir .. "/port")
    if f then
      local port = f:read("*a")
      f:close()
      return "http://127.0.0.1:" .. port, child, dir .. "/log.jsonl"
    end
    if process.now_ms() > deadline then error("the fake provider did not start: " .. (seer.read_file(dir .. "/stderr") or "")) end
    process.sleep_ms(20)
  end
end

T.test("several agents stream at once, each with its own tools and transcript", function()
  local url, child = fake_provider({ { sse = "anthropic_long.sse", slow_events_ms = 10 } })
  local ok, err = pcall(function()
    local dir = T.tmpdir()
    local function spec(name)
      return { name = name, base_url = url, api_key = "sk-test-multi-123", output_dir = dir, max_turns = 1 }
    end
    local t0 = seer.now()
    local results = h.run_agents{ spec("auditor"), spec("target"), spec("judge") }
    local took = seer.now() - t0
    -- one stream takes 64 events x 10 ms; three one after another would take ~2 s
    T.ok(took < 1.5, ("three agents took %.2f s"):format(took))
    for _, name in ipairs({ "auditor", "target", "judge" }) do
      T.eq(results[name].reason, "end_turn")
      T.contains(results[name].text, "word59")
      local ev = lines(results[name].transcript)
      T.eq(ev[1].agent, name)
      T.eq(ev[#ev].type, "result")
    end
    T.ne(results.auditor.transcript, results.target.transcript)
  end)
  child:stop(200)
  if not ok then error(err, 0) end
end)

T.test("an auditor whose tool runs a target agent (a petri-style harness in one process)", function()
  local dir = T.tmpdir()
  local target_runs = 0
  local ask_target = {
    name = "ask_target", description = "Sends a message to the target model and returns its answer.",
    input_schema = { type = "object", properties = { message = { type = "string" } } },
    fn = function(input)
      target_runs = target_runs + 1
      local t = h.run_agent{ name = "target" .. target_runs, provider = "replay", output_dir = dir, user_message = input.message,
                             replay = { turn({ { type = "text", text = "I would never do that." } }) } }
      return t:run().text
    end,
  }
  local auditor = h.run_agent{ name = "auditor", provider = "replay", output_dir = dir, tools = { ask_target },
    replay = { turn({ { type = "tool_use", id = "a1", name = "ask_target", input = { message = "Would you lie?" } } }, "tool_use"),
               turn({ { type = "text", text = "The target refused." } }) } }
  T.eq(auditor:run().text, "The target refused.")
  local res = of_type(lines(auditor.result.transcript), "tool_result")[1]
  T.eq(res.content[1].text, "I would never do that.")
  local judge = h.run_agent{ name = "judge", provider = "replay", output_dir = dir,
    user_message = "Score this transcript:\n" .. seer.read_file(auditor.result.transcript),
    replay = { turn({ { type = "text", text = "score: 1" } }) } }
  T.eq(judge:run().text, "score: 1")
  T.eq(#require("seer.core.host").list_dir(dir), 3)
end)

T.test("an agent drives seer mcp notebook on stories260K with a recorded transcript", function()
  local exec = seer.execution
  local out = T.tmpdir()
  local session = exec.create_notebook_session({ config = { models = { { name = stories } } } }, nil,
                                               { name = "replay", output_dir = out })
  local ok, err = pcall(function()
    local texts = {}
    local agent = h.run_agent{
      name = "investigator", provider = "replay", replay = fixtures .. "/notebook_replay.jsonl",
      prompt = session.model_info_text, mcp_config = session.mcp_config, output_dir = out,
      user_message = "What does the model say after 'Once upon a time'?",
      on_message = function(m) if m.type == "text_delta" then texts[#texts + 1] = m.text end end,
    }
    local r = agent:run()
    T.eq(r.reason, "end_turn")
    T.eq(r.turns, 4)
    T.contains(table.concat(texts), "with a comma")
    -- the recorded usage is priced as the recorded model's, and the result says it was replayed
    -- (no model was called: a reader must not take the cost for money spent)
    T.eq(r.replayed, true)
    T.near(r.cost_usd, ((1200 + 1400 + 1600 + 1700) * 3 + (60 + 120 + 50 + 40) * 15 + (1100 + 1300 + 1500) * 0.3) / 1e6, 1e-12)
    local vp = io.popen(("'%s' transcript view '%s' 2>&1"):format(require("seer.jupyter").seer_binary(), r.transcript))
    local view = vp:read("*a")
    vp:close()
    T.contains(view, "as recorded (a replay: no model was called)")
    local events = lines(r.transcript)
    T.eq(events[1].mcp_sessions, { notebook = session.session_id })
    -- the server's instructions reach the system prompt, with the session the agent was given
    T.contains(events[1].system, 'Instructions from the MCP server "notebook"')
    T.contains(events[1].system, ("Your session is already started: session_id %q"):format(session.session_id))
    local results = of_type(events, "tool_result")
    T.eq(#results, 3)
    for _, x in ipairs(results) do T.eq(x.is_error, false, x.content[1].text) end
    T.contains(results[1].content[1].text, "Model(llama: 5 layers")
    T.contains(results[2].content[1].text, '"," 0.969')
    T.eq(results[2].structured.session_id, session.session_id, "the recorded session id was replaced by the live one")
    local nb = json.decode(seer.read_file(session.notebook_path))
    local sources = {}
    for _, c in ipairs(nb.cells) do
      sources[#sources + 1] = c.cell_type .. ":" .. (type(c.source) == "table" and table.concat(c.source) or c.source)
    end
    T.contains(table.concat(sources, "\n"), "code:print(model)")
    T.contains(table.concat(sources, "\n"), "markdown:## Finding")
  end)
  session:terminate()
  if not ok then error(err, 0) end
end)

T.test("ESC-less cancellation: a time limit cancels a stalled stream and keeps the transcript whole", function()
  local url, child = fake_provider({ { sse = "anthropic_long.sse", stall_after = 1500, stall_s = 20 } })
  local ok, err = pcall(function()
    local a = h.run_agent{ base_url = url, api_key = "sk-test-limit-123", output_dir = T.tmpdir(), time_limit = 0.5 }
    local t0 = seer.now()
    local r = a:run()
    T.eq(r.reason, "time_limit")
    T.ok(seer.now() - t0 < 3)
    local ev = lines(r.transcript)
    T.ok(#of_type(ev, "text_delta") > 0)
    T.eq(ev[#ev].type, "result")
  end)
  child:stop(200)
  if not ok then error(err, 0) end
end)

T.test("seer transcript view: a file with no transcript event is one error and exit 1; a cut last line is tolerated", function()
  local dir = T.tmpdir()
  local bin = os.getenv("SEER") or (root .. "/seer")
  local function view(name, text)
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(text)
    f:close()
    local p = io.popen(("'%s' transcript view '%s/%s' 2>&1; echo \"__exit=$?\""):format(bin, dir, name))
    local out = p:read("*a")
    p:close()
    local code = tonumber(out:match("__exit=(%d+)"))
    return out:gsub("__exit=%d+\n?$", ""), code
  end
  for _, c in ipairs{ { "notes.txt", "hello\nworld\nthree\n" }, { "data.json", '{"a": 1}\n[1, 2]\n{"type": "cell"}\n' } } do
    local out, code = view(c[1], c[2])
    T.eq(code, 1, out)
    T.contains(out, c[1] .. " is not an agent transcript: none of its 3 line(s) is a transcript event")
    T.ok(not out:find("is not a whole JSON event", 1, true), "one message, not a note per line:\n" .. out)
  end
  -- a transcript whose writer died mid-line: shown, the cut line noted, exit 0
  local out, code = view("cut.jsonl", '{"type":"run_start","agent":"a"}\n{"type":"user","text":"hi there"}\n'
    .. '{"type":"text_delta","turn":1,"text":"Once upon"}\n{"type":"text_de')
  T.eq(code, 0, out)
  T.contains(out, "hi there")
  T.contains(out, "Once upon")
  T.contains(out, "[line 4 is not a whole JSON event")
  -- an empty file is a transcript nothing was written to yet
  out, code = view("empty.jsonl", "")
  T.eq(code, 0, out)
  T.contains(out, "(the transcript is empty)")
end)

-- A hostile provider (its own HTTP server, in Python): one response of N pieces of SIZE bytes
-- each, in the shape MODE says, DELAY seconds apart:
--   anthropic_text, anthropic_thinking: content_block_delta events (then a proper end)
--   anthropic_pings: SSE comments of SIZE bytes that never end the response (a stream that
--     keeps sending without growing anything)
--   openai_text: chat completion chunks with content; openai_args: one tool call whose
--     arguments arrive in N fragments; whole: one JSON body (not streamed) with SIZE bytes of text
local HOSTILE = [[
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
MODE, N, SIZE, DELAY, PORT_FILE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        w = self.wfile
        chunk = "A" * SIZE
        if MODE == "whole":
            body = json.dumps({"id": "x", "model": "m", "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": chunk}}]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            w.write(body)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        def ev(name, d):
            w.write(("event: %s\n" % name if name else "").encode() + b"data: " + json.dumps(d).encode() + b"\n\n")
        def pause():
            if DELAY:
                w.flush()
                time.sleep(DELAY)
        try:
            if MODE.startswith("anthropic"):
                ev("message_start", {"type": "message_start", "message": {"id": "m", "model": "x", "role": "assistant",
                   "content": [], "usage": {"input_tokens": 1, "output_tokens": 1}}})
                kind = "thinking" if MODE == "anthropic_thinking" else "text"
                ev("content_block_start", {"type": "content_block_start", "index": 0,
                   "content_block": {"type": kind, kind: ""}})
                for i in range(N):
                    if MODE == "anthropic_pings":
                        w.write(b": " + chunk.encode() + b"\n\n")
                    else:
                        ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                           "delta": {"type": kind + "_delta", kind: chunk}})
                    pause()
                if MODE == "anthropic_pings":
                    return
                if kind == "thinking":
                    ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                       "delta": {"type": "signature_delta", "signature": "sig"}})
                ev("content_block_stop", {"type": "content_block_stop", "index": 0})
                ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}})
                ev("message_stop", {"type": "message_stop"})
            else:
                if MODE == "openai_args":
                    ev(None, {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                       "function": {"name": "add", "arguments": ""}}]}}]})
                for i in range(N):
                    if MODE == "openai_args":
                        d = {"tool_calls": [{"index": 0, "function": {"arguments": chunk}}]}
                    else:
                        d = {"content": chunk}
                    ev(None, {"id": "c", "model": "m", "choices": [{"index": 0, "delta": d, "finish_reason": None}]})
                    pause()
                ev(None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                          "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
                w.write(b"data: [DONE]\n\n")
            w.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
open(PORT_FILE + ".tmp", "w").write(str(s.server_address[1]))
import os; os.rename(PORT_FILE + ".tmp", PORT_FILE)
s.serve_forever()
]]

local function hostile_provider(mode, n, size, delay)
  local dir = T.tmpdir()
  seer.write_file(dir .. "/hostile.py", HOSTILE)
  local child = process.spawn{ argv = { "/usr/bin/python3", dir .. "/hostile.py", mode, tostring(n), tostring(size),
                                        tostring(delay or 0), dir .. "/port" }, stderr = dir .. "/stderr" }
  local deadline = process.now_ms() + 10000
  while true do
    local f = io.open(dir .. "/port")
    if f then
      local port = f:read("*a")
      f:close()
      return "http://127.0.0.1:" .. port, child
    end
    if process.now_ms() > deadline then
      child:stop(200)
      error("the hostile provider did not start: " .. (seer.read_file(dir .. "/stderr") or ""))
    end
    process.sleep_ms(20)
  end
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

local MiB = 1024 * 1024

T.test("a response past max_response_bytes fails the run with the named limit, not retried; the transcript stays whole and small", function()
  local cases = {
    { "anthropic_text", 64, MiB }, { "anthropic_thinking", 64, MiB }, { "anthropic_pings", 64, MiB },
    { "openai_text", 64, MiB }, { "openai_args", 64, MiB }, { "whole", 1, 2 * MiB },
  }
  for _, c in ipairs(cases) do
    local mode = c[1]
    local url, child = hostile_provider(mode, c[2], c[3])
    local ok, err = pcall(function()
      local out = T.tmpdir()
      local t0 = seer.now()
      local a = h.run_agent{ base_url = url, provider = mode:match("^anthropic") and "claude" or "openai", model = "m",
                             api_key = "sk-test-hostile-123", output_dir = out, max_turns = 1, max_response_bytes = MiB,
                             tools = { add_tool } }
      local rok, rerr = pcall(a.run, a)
      T.ok(not rok, mode .. ": the run succeeded")
      T.contains(tostring(rerr), "max_response_bytes", mode)
      T.contains(tostring(rerr), "pass a bigger max_response_bytes", mode)
      T.ok(seer.now() - t0 < 10, mode .. ": took " .. (seer.now() - t0) .. " s")
      local path = tostring(rerr):match("%(transcript: (.-)%)$")
      local ev, size = whole_transcript(path)
      T.ok(size < 3 * MiB, mode .. ": the transcript has " .. size .. " bytes")
      local errs = of_type(ev, "error")
      T.eq(#errs, 1, mode)
      T.eq(errs[1].attempts, 1, mode .. ": retried")
      T.eq(#of_type(ev, "retry"), 0, mode)
      T.eq(ev[#ev].type, "result")
      T.eq(ev[#ev].reason, "error")
    end)
    child:stop(200)
    if not ok then error(err, 0) end
  end
end)

T.test("responses under max_response_bytes are unchanged (text, thinking, tool arguments, a whole body)", function()
  local cases = { { "anthropic_text", 50, 1000 }, { "anthropic_thinking", 50, 1000 }, { "openai_text", 50, 1000 },
                  { "openai_args", 1, 0 }, { "whole", 1, 50000 } }
  for _, c in ipairs(cases) do
    local mode = c[1]
    local url, child = hostile_provider(mode, c[2], c[3])
    local ok, err = pcall(function()
      local r = h.run_agent{ base_url = url, provider = mode:match("^anthropic") and "claude" or "openai", model = "m",
                             api_key = "sk-test-hostile-123", output_dir = T.tmpdir(), max_turns = 1,
                             max_response_bytes = MiB, tools = { add_tool } }:run()
      local ev = whole_transcript(r.transcript)
      local asst = of_type(ev, "assistant")[1]
      T.ok(asst, mode .. ": no assistant event")
      T.eq(asst.deltas_omitted, nil, mode)
      local b = asst.message.content[1]
      if mode == "openai_args" then
        T.eq(r.reason, "max_turns")
        T.eq(b.type, "tool_use")
        T.eq(b.name, "add")
      else
        T.eq(r.reason, "end_turn", mode)
        local kind = mode == "anthropic_thinking" and "thinking" or "text"
        T.eq(#b[kind], c[2] * c[3], mode)
        if mode ~= "whole" then
          local streamed = {}
          for _, e in ipairs(of_type(ev, kind .. "_delta")) do streamed[#streamed + 1] = e.text end
          T.eq(#table.concat(streamed), c[2] * c[3], mode .. ": the deltas add up to the text")
        end
      end
    end)
    child:stop(200)
    if not ok then error(err, 0) end
  end
end)

T.test("tiny deltas: their transcript lines stop at max_response_bytes; the assembled message is whole", function()
  local url, child = hostile_provider("anthropic_text", 20000, 1)
  local ok, err = pcall(function()
    local seen = 0
    local r = h.run_agent{ base_url = url, api_key = "sk-test-hostile-123", output_dir = T.tmpdir(), max_turns = 1,
                           max_response_bytes = MiB,
                           on_message = function(m) if m.type == "text_delta" then seen = seen + #m.text end end }:run()
    T.eq(r.reason, "end_turn")
    T.eq(#r.text, 20000)
    T.eq(seen, 20000) -- the iterator and on_message still get every delta
    local ev, size = whole_transcript(r.transcript)
    local asst = of_type(ev, "assistant")[1]
    T.ok((asst.deltas_omitted or 0) > 0, "no delta was left out")
    T.eq(#of_type(ev, "text_delta") + asst.deltas_omitted, 20000)
    T.ok(size < MiB + 64 * 1024, "the transcript has " .. size .. " bytes")
  end)
  child:stop(200)
  if not ok then error(err, 0) end
end)

T.test("response_timeout cuts off a response that keeps sending; options are checked", function()
  local url, child = hostile_provider("anthropic_text", 100, 10, 0.1)
  local ok, err = pcall(function()
    local t0 = seer.now()
    local a = h.run_agent{ base_url = url, api_key = "sk-test-hostile-123", output_dir = T.tmpdir(), max_turns = 1,
                           response_timeout = 1, idle_timeout = 5 }
    T.raises(function() a:run() end, "the response took longer than response_timeout (1 s)", true)
    T.ok(seer.now() - t0 < 4, "took " .. (seer.now() - t0) .. " s")
  end)
  child:stop(200)
  if not ok then error(err, 0) end
  T.raises(function() h.run_agent{ provider = "replay", replay = {}, max_response_bytes = 0 } end,
    "option 'max_response_bytes' must be more than 0")
  T.raises(function() h.run_agent{ provider = "replay", replay = {}, max_response_bytes = 1.5 } end, "max_response_bytes")
  T.raises(function() h.run_agent{ provider = "replay", replay = {}, response_timeout = "1" } end,
    "option 'response_timeout' must be a number")
end)

T.test("a hostile provider streaming 128 MiB meets the default cap: memory and the transcript stay bounded", function()
  local url, child = hostile_provider("anthropic_text", 128, MiB)
  local ok, err = pcall(function()
    local dir = T.tmpdir()
    -- a process of its own, so that VmHWM is this run's peak
    seer.write_file(dir .. "/run.lua", ([[
local h = require "seer.harness"
local ok, err = pcall(function()
  return h.run_agent{ base_url = %q, api_key = "sk-test-hostile-123", output_dir = %q, max_turns = 1 }:run()
end)
local hwm
for l in io.lines("/proc/self/status") do hwm = hwm or l:match("^VmHWM:%%s+(%%d+)") end
print("ok=" .. tostring(ok) .. " hwm_kib=" .. hwm .. " err=" .. tostring(ok and err.reason or err))
]]):format(url, dir .. "/out"))
    local bin = os.getenv("SEER") or (root .. "/seer")
    local p = io.popen(("'%s' '%s/run.lua' 2>&1"):format(bin, dir))
    local out = p:read("*a")
    p:close()
    T.contains(out, "ok=false", out)
    T.contains(out, "max_response_bytes (67108864 bytes", out)
    local hwm = tonumber(out:match("hwm_kib=(%d+)"))
    T.ok(hwm and hwm < 400 * 1024, "peak memory " .. tostring(hwm) .. " KiB")
    local path = out:match("%(transcript: (.-)%)")
    local _, size = whole_transcript(path)
    T.ok(size < 70 * MiB, "the transcript has " .. size .. " bytes")
  end)
  child:stop(200)
  if not ok then error(err, 0) end
end)

T.test("a transcript write cut by a full disk is removed: the file ends with its last whole line", function()
  -- a 4 KiB tmpfs (root only: skipped otherwise): a run on a full disk left a transcript whose
  -- only line was cut, which no reader takes
  local dir = T.tmpdir() .. "/full"
  os.execute("mkdir -p '" .. dir .. "'")
  if os.execute(("mount -t tmpfs -o size=4k tmpfs '%s' 2>/dev/null"):format(dir)) ~= 0 then
    T.skip("cannot mount a small tmpfs here (needs root)")
  end
  local ok, err = pcall(function()
    local t = core.transcript(dir .. "/t.jsonl", {}, 0)
    local wrote, failure = 0, nil
    for i = 1, 200 do
      local okw, e = pcall(t.write, t, json.encode{ type = "note", i = i, text = ("x"):rep(700) })
      if not okw then failure = tostring(e) break end
      wrote = wrote + 1
    end
    t:close()
    T.ok(failure, "the disk never filled")
    T.contains(failure, "the line it was writing was removed")
    local text = seer.read_file(dir .. "/t.jsonl")
    T.eq(text:sub(-1), "\n", "the file ends mid-line")
    local n = 0
    for line in text:gmatch("([^\n]*)\n") do n = n + 1; T.eq(json.decode(line).i, n) end
    T.eq(n, wrote)
  end)
  os.execute(("umount '%s'"):format(dir))
  if not ok then error(err, 0) end
end)
