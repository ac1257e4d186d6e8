-- The offline demo, end to end in one script: JSON, a real model (load, stream a story,
-- next-token distribution, the residual stream per layer), a sandbox with a notebook session
-- inside it (steering with a hook, a plot), and an agent replaying a recorded investigation
-- against the live notebook tools over MCP.
local seer = require "seer"
local json = seer.json
-- What the model, the sandbox, its kernel and the agent write reaches this terminal through
-- safe (or stream, for text in pieces): no escape sequence in it becomes a terminal command
-- (docs/security.md, "Terminals").
local terminal = require "seer.terminal"
local safe = terminal.safe

local here = seer.script_dir()
-- the command line as every experiment reads it: --help, and a usage error (status 2) for
-- anything else (the demo has no profiles or flags of its own)
require("seer.experiment").parse_args{ name = "hello", dir = here, profiles = false }
local task = seer.read_file(here .. "/task.md")

print("== seer " .. seer.version .. " on " .. jit.version .. " (" .. jit.os .. "/" .. jit.arch .. ")")
print("task: " .. task:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", ""))

-- A record of the kind experiments write: nested, with explicit empty arrays and nulls.
local record = {
  experiment = "hello",
  engine = { seer = seer.version, luajit = jit.version, jit = jit.status() },
  layers = { 0, 4, 8 },
  notes = json.array({}),
  missing = json.null,
}
local text = json.encode(record, { indent = 2 })
print("\n== record as JSON")
print(text)
local back = json.decode(text)
assert(back.experiment == "hello" and back.layers[3] == 8 and back.missing == json.null)
assert(json.encode(back) == json.encode(record), "JSON round trip changed the record")

-- Time encode + decode of a larger payload: 20k rows of mixed values.
local rows = {}
for i = 1, 20000 do
  rows[i] = { id = i, token = "tok" .. i, logit = math.sin(i) * 10, top = { i % 7, i % 11, i % 13 } }
end
local t0 = seer.now()
local big = json.encode(rows)
local t1 = seer.now()
local parsed = json.decode(big)
local t2 = seer.now()
assert(#parsed == #rows and parsed[12345].token == "tok12345")
print(("\n== %d rows, %.1f MB of JSON: encode %.1f ms, decode %.1f ms"):format(
  #rows, #big / 1e6, (t1 - t0) * 1000, (t2 - t1) * 1000))

-- A real model: the 260K-parameter TinyStories Llama that ships with the tests.
local model_dir = require("seer.core.host").realpath(seer.script_dir() .. "/../../tests/fixtures/models/stories260K")
local model = seer.model.load(model_dir)
local tok = model.tokenizer
print(safe("\n== " .. tostring(model)))
local prompt = "Once upon a time"
io.write("\n== greedy continuation, streamed\n" .. prompt)
local t_gen = seer.now()
local show = terminal.stream()
local story = model:generate(prompt, { max_new_tokens = 60, stream = show })
show(nil)
print(("\n[%d tokens in %.1f ms]"):format(#story.ids, (seer.now() - t_gen) * 1000))

-- What the model expects next, and how the residual stream grows layer by layer.
local ids = tok:encode(prompt)
-- (the residual stream from the hook points: forward's hidden_states, as transformers', has the
-- final norm applied to its last entry)
local logits, cache = model:run_with_cache(ids, { names = function(n)
  return n == "blocks.0.hook_resid_pre" or n:match("hook_resid_post$") ~= nil
end })
local probs = logits:select(1, -1):softmax()
local values, indices = probs:topk(5)
print("\n== next-token distribution after \"" .. prompt .. "\"")
for i = 1, 5 do
  print(safe(("  %-12q %.3f"):format(tok:decode({ indices[i] }), values[i])))
end
print("\n== residual-stream norm at the last position, per layer")
print(("  %-10s %7.3f"):format("embed", cache["blocks.0.hook_resid_pre"]:select(1, -1):norm()))
for l = 0, model.config.num_hidden_layers - 1 do
  print(("  %-10s %7.3f"):format("layer " .. l, cache[("blocks.%d.hook_resid_post"):format(l)]:select(1, -1):norm()))
end

local out_dir = os.getenv("SEER_OUT") or "/tmp"

-- A sandbox, as agent code gets one: bubblewrap namespaces (no network, read-only system,
-- a private /workspace), cgroup limits, the model mounted read-only under /models; it dies
-- with this script whatever happens. Then a notebook session whose kernel runs inside it.
print("\n== a sandbox (bubblewrap) and a notebook session inside it, with the model preloaded")
local exec = seer.execution
local env = seer.environment
local config = env.SandboxConfig{
  execution_mode = env.ExecutionMode.NOTEBOOK,
  models = { env.ModelConfig{ name = model_dir } },
  limits = { memory = "2G", processes = 256 },
  timeout = 600,
}
local t_sb = seer.now()
local sandbox = env.Sandbox(config):start{ name = "hello" }
print(("sandbox %s started in %.1f ms"):format(sandbox.sandbox_id, (seer.now() - t_sb) * 1000))
io.write(safe((sandbox:exec("echo \"inside: uid $(id -u), host $(hostname), models: $(ls /models)\"; "
  .. "cat /etc/shadow 2>&1 | head -1; touch /usr/x 2>&1 | head -1"))))
local session = exec.create_notebook_session(sandbox, nil,
  { name = "hello", output_dir = out_dir .. "/seer-hello-notebooks" })
print(safe(session.model_info_text))
local cells = {
  "print(model)",
  "local ex = require 'toolkit.extract_activations'\n"
    .. "local a = ex.extract_activation(model, tokenizer, 'The dog ran to the park.', 3)\n"
    .. "local b = ex.extract_activation(model, tokenizer, 'The cat sat on the mat.', 3)\n"
    .. "vec = a - b\nvec:norm()",
  "local I = require 'seer.interventions'\n"
    .. "model:with_hooks({ { 'blocks.3.hook_resid_post', I.add(vec, { strength = 4 }) } }, function()\n"
    .. "  print(model:generate('Once upon a time', { max_new_tokens = 30 }).text)\nend)",
  "display.image(require('seer.plot').line{ y = { 1, 3, 2, 5 }, title = 'a plot for the notebook' })",
}
for i, code in ipairs(cells) do
  local r = session:exec(code)
  io.write(("[cell %d] "):format(i), r.text == "" and "(display output)\n" or safe(r.text))
end
-- An agent on the same notebook: the replay provider plays a recorded investigation's
-- assistant turns against the live notebook tools (an MCP server), so this runs offline;
-- provider = "claude" with ANTHROPIC_API_KEY set runs a real one (docs/harness.md).
print("\n== an agent (replayed) working in the notebook through MCP")
local show_text = terminal.stream()
local run = seer.harness.run_agent{
  provider = "replay", replay = here .. "/agent_replay.jsonl", name = "hello-agent",
  mcp_config = session.mcp_config, output_dir = out_dir .. "/seer-hello-transcripts",
  on_message = function(m)
    if m.type == "text_delta" then show_text(m.text)
    elseif m.type == "tool_call" then show_text(nil) io.write(safe("\n  [tool] " .. tostring(m.name) .. " " .. seer.json.encode(m.input) .. "\n"))
    elseif m.type == "tool_result" then
      local t = m.content and m.content[1] and m.content[1].text or ""
      io.write("  [result] ", safe((tostring(t):gsub("\n+$", ""):gsub("\n", "\n           "))), "\n")
    end
  end,
}:run()
show_text(nil)
print(safe(("\n[agent: %s after %d turns; transcript %s]"):format(tostring(run.reason), run.turns or 0, tostring(run.transcript))))
print("notebook:  " .. session.notebook_path)
print("live view: " .. session.jupyter_url)
if os.getenv("SEER_DEMO_WATCH") then
  io.write("(the live view stays up until you press Enter) ")
  io.read("*l")
end
session:terminate()
sandbox:terminate()

-- Results are written atomically next to the script's outputs.
local out = out_dir .. "/seer-hello-result.json"
seer.write_file(out, json.encode({ ok = true, rows = #rows, bytes = #big, story = prompt .. story.text }, { indent = 2 }) .. "\n")
print("\nwrote " .. out)
