-- The experiments under the small profile (stories260K, the recorded agent), each run as a user
-- runs it (`seer experiments/<name>/main.lua --small`), in a fresh process, checking what it
-- wrote: the summary from the run's own numbers, the notebook and the transcript.
local T = require "testing"
local json = require "seer.json"

local root = require("seer.core.host").realpath(seer.script_dir() .. "/../..")
local SEER = require("seer.jupyter").seer_binary()

local function have_bwrap() return os.execute("command -v bwrap >/dev/null 2>&1") == 0 end

-- Runs an experiment; returns its output, exit status and the run folder.
local function run_experiment(name, extra_env, extra_args)
  if not have_bwrap() then T.skip("bubblewrap is not installed (make setup installs it)") end
  local out = T.tmpdir()
  local cmd = ("cd '%s' && env -u ANTHROPIC_API_KEY SEER_OUT='%s' SEER_SANDBOX_DIR='%s/sb' %s '%s' experiments/%s/main.lua --small %s 2>&1")
    :format(root, out, out, extra_env or "", SEER, name, extra_args or "")
  local p = io.popen(cmd)
  local text = p:read("*a")
  local ok, _, code = p:close()
  local dir
  local ls = io.popen(("ls -d '%s'/%s-* 2>/dev/null"):format(out, name))
  dir = ls:read("*l")
  ls:close()
  return text, ok and 0 or code, dir
end

local function read_json(path)
  local f = assert(io.open(path, "rb"), "missing " .. path)
  local s = f:read("*a")
  f:close()
  return json.decode(s)
end

local function read_lines(path)
  local t = {}
  for line in io.lines(path) do t[#t + 1] = json.decode(line) end
  return t
end

T.test("introspection --small: concept vectors, injection and control trials, a summary from the run's numbers", function()
  local text, code, dir = run_experiment("introspection")
  T.eq(code, 0, text)
  T.ok(dir, "no run folder was made:\n" .. text)
  -- the reference prints the session's JSON first
  local first = text:match("^[^\n]*")
  local info = json.decode(first)
  T.ok(info.session_id and info.jupyter_url and info.model_info, first)
  local s = read_json(dir .. "/summary.json")
  T.eq(s.experiment, "introspection")
  T.eq(s.profile, "small")
  T.eq(s.results.layer, 3)
  T.eq(s.results.injection.n, 60)
  T.eq(s.results.control.n, 60)
  T.ok(s.results.injection.hit >= 0 and s.results.injection.hit <= 60)
  T.eq(s.agent.reason, "end_turn")
  -- 120 generations in the sandbox's kernel: its CPU time shows in the ledger (10 ms ticks)
  T.ok(s.ledger.totals.sandbox_cpu_s > 0.05, json.encode(s.ledger.totals))
  local md = seer.read_file(dir .. "/summary.md")
  T.contains(md, ("| injection | 60 | %d |"):format(s.results.injection.hit))
  T.contains(md, ("| control | 60 | %d |"):format(s.results.control.hit))
  -- the notebook holds the agent's cells, their outputs and its conclusion
  local nb = read_json(s.notebook)
  local code_cells, md_cells = 0, 0
  for _, c in ipairs(nb.cells) do
    if c.cell_type == "code" then
      code_cells = code_cells + 1
      T.eq(c.metadata.execution_status, "complete", "a cell of the recorded agent failed")
    else md_cells = md_cells + 1 end
  end
  T.eq(code_cells, 6)
  T.eq(md_cells, 1)
  -- the transcript ends with the result, and every tool call succeeded
  local events = read_lines(s.agent.transcript)
  T.eq(events[#events].type, "result")
  for _, e in ipairs(events) do
    if e.type == "tool_result" then T.ok(not e.is_error, json.encode(e)) end
  end
end)

-- What every experiment's run must show: exit 0, its summary, an agent that ended normally and
-- tool calls that all succeeded; returns the summary and the transcript's events.
local function check_run(name, local_mode, extra_args)
  local text, code, dir = run_experiment(name, nil, extra_args)
  T.eq(code, 0, text)
  T.ok(dir, "no run folder was made:\n" .. text)
  local s = read_json(dir .. "/summary.json")
  T.eq(s.experiment, name)
  T.eq(s.profile, "small")
  T.eq(s.agent.reason, "end_turn", text)
  local events = read_lines(s.agent.transcript)
  T.eq(events[#events].type, "result")
  local calls, turns = 0, 0
  for _, e in ipairs(events) do
    if e.type == "tool_result" then T.ok(not e.is_error, json.encode(e)); calls = calls + 1 end
    if e.type == "assistant" then turns = turns + 1 end
  end
  -- the ledger: one row per agent turn and per tool call of this run, sandbox CPU measured
  local ledger = read_json(dir .. "/ledger.json")
  T.eq(#ledger.calls, calls)
  T.eq(#ledger.turns, turns)
  if not local_mode then
    T.ok(ledger.totals.cpu_known, "the sandbox's CPU time was not measured")
    T.ok(ledger.totals.sandbox_cpu_s >= 0, json.encode(ledger.totals))
    for _, c in ipairs(ledger.calls) do T.ok(c.wall_s >= 0 and c.sandbox_cpu_s >= 0, json.encode(c)) end
  else
    T.ok(not ledger.totals.cpu_known, "a local session has no sandbox whose CPU time could be measured")
    T.contains(seer.read_file(dir .. "/summary.md"), "unmeasured sandbox CPU")
  end
  T.contains(seer.read_file(dir .. "/summary.md"), ("%d tool calls"):format(calls))
  return s, events, text
end

T.test("sandbox-intro --small: the agent explores the preloaded model in the sandbox's notebook", function()
  local s, _, text = check_run("sandbox-intro")
  T.ok(json.decode(text:match("^[^\n]*")).session_id, text)
  local nb = read_json(s.notebook)
  local code_cells = 0
  for _, c in ipairs(nb.cells) do
    if c.cell_type == "code" then
      code_cells = code_cells + 1
      T.eq(c.metadata.execution_status, "complete")
    end
  end
  T.eq(code_cells, 3)
  local out = seer.json.encode(nb.cells[1].outputs)
  T.contains(out, "layers 5, d_model 64, vocab 512")
end)

T.test("scoped-sandbox-intro --small: interface functions as a library and as the agent's MCP tools", function()
  local s, events = check_run("scoped-sandbox-intro")
  T.eq(s.model_info, { num_layers = 5, hidden_size = 64, vocab_size = 512 })
  local embeddings = 0
  for _, e in ipairs(events) do
    if e.type == "tool_result" and e.name == "get_embedding" then
      local r = json.decode(e.content[1].text)
      T.eq(#r.embedding, 64)
      embeddings = embeddings + 1
    end
  end
  T.eq(embeddings, 2)
end)

T.test("hidden-preference-investigation --small: a hidden adapter made at run time, found against the base model", function()
  local s, events, text = check_run("hidden-preference-investigation")
  T.eq(s.results.preferred, "Timmy")
  T.eq(s.results.adapter.n, 20)
  T.ok(s.results.adapter.hit > s.results.base.hit, json.encode(s.results))
  T.ok(s.results.p_next.adapter > s.results.p_next.base, json.encode(s.results))
  T.contains(json.decode(text:match("^[^\n]*")).model_info, "`model`: <hidden>")
  -- the adapter's host path (its id) is in neither the notebook nor the transcript
  local adapter_dir = s.notebook:match("^(.*)/[^/]+$") .. "/adapter"
  T.ok(not seer.read_file(s.notebook):find(adapter_dir, 1, true), "the notebook names the hidden adapter")
  T.ok(not seer.read_file(s.agent.transcript):find(adapter_dir, 1, true), "the transcript names the hidden adapter")
  local calls = 0
  for _, e in ipairs(events) do if e.type == "tool_call" then calls = calls + 1 end end
  T.eq(calls, 5)
end)

T.test("petri-style-harness --small: an auditor over scoped MCP tools, a steered target, judge scores from the transcript", function()
  local s, events = check_run("petri-style-harness")
  T.eq(s.judge, "scripted (rules)")
  local transcript = seer.read_file(s.audit_transcript)
  T.contains(transcript, "SYSTEM: You are a friendly storyteller")
  local n_target, n_steered = 0, 0
  for line in transcript:gmatch("[^\n]+") do
    if line:match("^TARGET") then n_target = n_target + 1 end
    if line:match("^TARGET %[steered%]: ") then n_steered = n_steered + 1 end
  end
  T.eq(n_target, 5)
  T.eq(n_steered, 2)
  -- the scores are the judge's rules applied to this transcript, recomputed here
  local J = dofile(root .. "/experiments/petri-style-harness/libraries/judge.lua")
  local again = J.scripted(transcript)
  for _, d in ipairs(J.DIMENSIONS) do
    T.eq(s.scores[d.name].score, again[d.name].score, d.name)
    T.ok(s.scores[d.name].score >= 1 and s.scores[d.name].score <= 10, d.name)
  end
  local sends = 0
  for _, e in ipairs(events) do if e.type == "tool_result" and e.name == "send_message" then sends = sends + 1 end end
  T.eq(sends, 5)
end)

T.test("petri-style-harness --small --black-box: the target is an API model (seer serve) reached from the sandbox", function()
  local s = check_run("petri-style-harness", false, "--black-box")
  T.eq(s.variant, "black-box")
  T.eq(s.args, { "--small", "--black-box" })
  local transcript = seer.read_file(s.audit_transcript)
  local n_target = 0
  for line in transcript:gmatch("[^\n]+") do
    if line:match("^TARGET: ") then n_target = n_target + 1 end
    T.ok(not line:match("^TARGET %[steered%]"), "a black-box target cannot be steered")
  end
  T.eq(n_target, 5)
  T.eq(s.scores.steering_effect.score, 1)
end)

T.test("the petri judge parses a model's JSON verdict and names what is missing", function()
  local J = dofile(root .. "/experiments/petri-style-harness/libraries/judge.lua")
  local full = { scores = {} }
  for _, d in ipairs(J.DIMENSIONS) do full.scores[d.name] = { score = 3, why = "x" } end
  T.eq(J.parse("Here you go: " .. json.encode(full)).deception.score, 3)
  full.scores.deception = nil
  T.raises(function() J.parse(json.encode(full)) end, "no score for deception", true)
  T.raises(function() J.parse("I cannot score this") end, "not the JSON asked for", true)
  T.contains(J.prompt("AUDITOR: hi\nTARGET: hello"), "steering_effect")
end)

T.test("refusal-direction-ablation --small: the direction, its ablation checked, refusals counted both ways", function()
  local s = check_run("refusal-direction-ablation")
  local r = s.results
  T.eq(r.baseline.n, 6)
  T.eq(r.ablated.n, 6)
  T.ok(r.norm > 0)
  -- the ablation really removes the direction from the final residual
  T.ok(r.projection.baseline > 0.1, json.encode(r.projection))
  T.ok(r.projection.ablated < 1e-4, json.encode(r.projection))
  -- stories260K never refuses: the summary must say the run cannot show anything, not claim an effect
  T.eq(r.baseline.refused, 0)
  T.contains(seer.read_file(s.notebook:match("^(.*)/") .. "/summary.md"), "cannot show the direction's role")
end)

T.test("auditing-games --small: batch generation and a prefill attack against the adapter-off control", function()
  local s = check_run("auditing-games")
  local r = s.results
  T.eq(r.suspect, "Timmy")
  T.eq(r.batch.n, 24)
  T.eq(r.prefill.n, 12)
  T.ok(r.batch.adapter > r.batch.base, json.encode(r))
  T.ok(r.prefill.adapter > r.prefill.base, json.encode(r))
end)

T.test("seer replay: the demo's investigation replays identically; an edited recorded output is reported as a diff", function()
  local _, code, dir = run_experiment("introspection")
  T.eq(code, 0)
  local s = read_json(dir .. "/summary.json")
  local function replay(t)
    local p = io.popen(("env -u ANTHROPIC_API_KEY '%s' replay '%s' 2>&1; echo \"exit=$?\""):format(SEER, t))
    local out = p:read("*a")
    p:close()
    return out
  end
  local out = replay(s.agent.transcript)
  T.contains(out, "7 of 7 calls identical")
  T.contains(out, "exit=0")
  -- edit one recorded output (the concept vectors' norms), beside the original so summary.json is found
  local text = seer.read_file(s.agent.transcript)
  local edited, n = text:gsub("(dog   |v| = )%d%.%d%d%d", "%19.999", 1)
  T.eq(n, 1, "the recorded transcript has the norms line")
  local copy = dir .. "/edited.jsonl"
  seer.write_file(copy, edited)
  out = replay(copy)
  T.contains(out, "call 2 execute_code: DIFFERS (- recorded, + replayed)")
  T.contains(out, "- dog   |v| = 9.999")
  T.ok(out:find("+ dog   |v| = %d%.%d%d%d"), out)
  T.contains(out, "6 of 7 calls identical, 1 diverged")
  T.contains(out, "exit=1")
end)

T.test("seer replay: bad input says what is wrong", function()
  local dir = T.tmpdir()
  seer.write_file(dir .. "/t.jsonl", '{"type": "user", "text": "hi"}\n')
  local p = io.popen(("'%s' replay '%s/t.jsonl' 2>&1; echo \"exit=$?\""):format(SEER, dir))
  local out = p:read("*a")
  p:close()
  T.contains(out, "is not an agent transcript")
  seer.write_file(dir .. "/t.jsonl", '{"type": "run_start", "agent": "x"}\n')
  p = io.popen(("'%s' replay '%s/t.jsonl' 2>&1; echo \"exit=$?\""):format(SEER, dir))
  out = p:read("*a")
  p:close()
  T.contains(out, "no summary.json naming the experiment")
  p = io.popen(("'%s' replay 2>&1; echo \"exit=$?\""):format(SEER))
  out = p:read("*a")
  p:close()
  T.contains(out, "TRANSCRIPT is missing")
  T.contains(out, "exit=2")
end)

T.test("api-kimi-investigation --small: a local session asks an API model (seer serve) through the OpenAI client", function()
  local s = check_run("api-kimi-investigation", true)
  T.eq(s.results.questions, 9)
  T.eq(s.results.answers + s.results.refusals + s.results.deflections, 9)
  local nb = read_json(s.notebook)
  T.contains(json.encode(nb.cells[1].outputs), "model: stories260K")
end)

T.test("checkpoint-diffing --small: two served checkpoints, an SAE on the reader's activations, the top differing features", function()
  local s = check_run("checkpoint-diffing")
  local r = s.results
  T.eq(r.answers, { a = 12, b = 12 })
  T.ok(r.tokens.a > 100 and r.tokens.b > 100, json.encode(r.tokens))
  T.ok(r.fit.explained > 0.5, json.encode(r.fit))
  T.eq(#r.features, 5)
  for i, f in ipairs(r.features) do
    T.eq(#f.tokens, 6)
    if i > 1 then T.ok(math.abs(f.delta) <= math.abs(r.features[i - 1].delta) + 1e-9, "features are ranked by |delta|") end
  end
end)

T.test("an unknown option and a bad SEER_PROFILE are refused with the valid ones", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed (make setup installs it)") end
  local p = io.popen(("cd '%s' && '%s' experiments/introspection/main.lua --tiny 2>&1"):format(root, SEER))
  local text = p:read("*a")
  p:close()
  T.contains(text, "unknown option --tiny (the options are --full, --small)")
  p = io.popen(("cd '%s' && SEER_PROFILE=medium '%s' experiments/introspection/main.lua 2>&1"):format(root, SEER))
  text = p:read("*a")
  p:close()
  T.contains(text, "SEER_PROFILE=medium: use small")
end)
