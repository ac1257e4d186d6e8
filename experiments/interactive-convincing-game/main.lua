-- The convincing game, interactive (the reference's interactive-convincing-game): tell a model it
-- is another model (Qwen, GPT-4, Claude) and find out whether it believes it or plays a role. An
-- agent works in a notebook session with the model preloaded and the steering and activation
-- libraries in its workspace, and a person chats with it in the terminal: the agent starts on
-- Phase 1, then the person types follow-ups between its responses (ESC interrupts a response;
-- /quit, exit, quit or Ctrl-D ends the chat). This script then reads what the agent recorded in
-- the kernel and writes the run's summary.
--
--   seer experiments/interactive-convincing-game/main.lua          -- gemma-2-9b-it on an A100; you chat with Claude
--   seer experiments/interactive-convincing-game/main.lua --small  -- stories260K, a recorded agent and a scripted
--                                                                  -- user (replay/small_user.txt); offline, seconds
--   SEER_USER_TURNS=FILE seer .../main.lua                         -- your follow-ups from FILE, one a line, instead
--                                                                  -- of the terminal
local seer = require "seer"
local env, ws, exec = seer.environment, seer.workspace, seer.execution
local X = require "seer.experiment"

local here = seer.script_dir()
local run = X.run{ name = "interactive-convincing-game", dir = here }
X.user_turns(run) -- the follow-ups' file, if any, is read (or refused) before anything starts

local config = run.small and env.SandboxConfig{
  execution_mode = env.ExecutionMode.NOTEBOOK,
  models = { env.ModelConfig{ name = X.small_model() } },
  limits = { memory = "2G", processes = 256 },
  timeout = 900,
} or env.SandboxConfig{
  execution_mode = env.ExecutionMode.NOTEBOOK,
  gpu = "A100",
  models = { env.ModelConfig{ name = "google/gemma-2-9b-it" } },
}

-- Terminated on every exit path: at the end, on an error, or when this script is killed.
local sandbox = env.Sandbox(config):start{ name = "convincing-game" }
local workspace = ws.Workspace{ libraries = {
  ws.Library.from_file(seer.toolkit_dir .. "/steering_hook.lua"),
  ws.Library.from_file(seer.toolkit_dir .. "/extract_activations.lua"),
} }

local session
local ok, err = pcall(function()
  session = exec.create_notebook_session(sandbox, workspace, { name = "convincing-game", output_dir = run.out_dir })
  local task = run.task
  local prompt = X.prompt(session, workspace:get_library_docs() .. "\n\n" .. task
    .. "\n\nUse the notebook MCP server as your main execution environment.")

  local result, conversation = X.agent_interactive(run, {
    prompt = prompt,
    mcp_config = session.mcp_config,
    sandbox = sandbox,
    user_message = "Start with Phase 1: establish the convincing by prompting the model that it's Qwen. Keep me updated.",
    max_turns = 200,
  })

  print("\n✓ Jupyter: " .. tostring(session.jupyter_url))

  -- What the agent recorded, if it was asked to write up: a person may end the chat before, and
  -- then the summary says so.
  local got, res = pcall(X.kernel_results, session, "convincing_results", result, { "identities", "probes", "activations" })
  local users, responses = 0, 0
  for line in io.lines(result.transcript) do
    local e = seer.json.decode(line)
    if e.type == "user" then users = users + 1
    elseif e.type == "assistant" and e.stop_reason == "end_turn" then responses = responses + 1 end
  end
  local lines = {
    "# The convincing game: summary", "",
    ("Model: %s; agent: %s; the chat: %d user messages, %d responses, %d turns, ended by %s."):format(
      run.small and "stories260K" or "gemma-2-9b-it", X.agent_label(run, result), users, responses, result.turns or 0, result.reason), "",
  }
  if got then
    lines[#lines + 1] = "| identity | answers | name it under its prompt | name it with no prompt (control) |"
    lines[#lines + 1] = "|---|---|---|---|"
    local names = {}
    for name in pairs(res.identities) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      local c = res.identities[name]
      lines[#lines + 1] = ("| %s | %d | %d | %d |"):format(name, c.n, c.prompted, c.control)
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = ("Roleplay probes: the identity kept in %d of %d answers. Activations at layer %s: "
      .. "same identity %.4f, different identities %.4f (mean cosine)."):format(res.probes.kept, res.probes.n,
      tostring(res.activations.layer), res.activations.within, res.activations.between)
    lines[#lines + 1] = ""
    lines[#lines + 1] = "Verdict: " .. tostring(res.verdict)
  else
    lines[#lines + 1] = "No results: " .. tostring(res):match("^[^\n]*")
  end
  for _, l in ipairs({ "", "Notebook: " .. session.notebook_path, "Transcript: " .. tostring(result.transcript),
                       "Conversation: " .. conversation, "Live view: " .. tostring(session.jupyter_url), "" }) do
    lines[#lines + 1] = l
  end
  X.summary(run, { results = got and res or seer.json.null, no_results = not got and tostring(res):match("^[^\n]*") or nil, agent = X.agent_record(run, result),
                   chat = { user_messages = users, responses = responses, conversation = conversation,
                            user_turns = result.user_turns or "terminal" },
                   notebook = session.notebook_path }, table.concat(lines, "\n"))
end)
if session then session:terminate() end
sandbox:terminate()
if not ok then X.fail(run, err) end  -- the ledger and a summary marked failed or interrupted
