-- Scoped sandbox intro (the reference's experiment 2): the agent gets only the functions of
-- interface.lua, served from the sandbox over signed RPC; the model stays inside. This script
-- calls them as a library too, and gives them to the agent as MCP tools.
--
--   seer experiments/scoped-sandbox-intro/main.lua           -- gemma-2-9b on a GPU, Claude
--   seer experiments/scoped-sandbox-intro/main.lua --small   -- stories260K, a recorded agent (offline)
local seer = require "seer"
local env, ws, exec = seer.environment, seer.workspace, seer.execution
local X = require "seer.experiment"
local terminal = require "seer.terminal" -- what the agent and the sandbox write, without terminal commands

local here = seer.script_dir()
local run = X.run{ name = "scoped-sandbox-intro", dir = here }

local scoped = env.ScopedSandbox(env.SandboxConfig{
  gpu = not run.small and "A100" or nil,
  models = { env.ModelConfig{ name = run.small and X.small_model() or "google/gemma-2-9b" } },
  limits = run.small and { memory = "2G", processes = 256 } or nil,
}):start{ name = "scoped-intro" }

local ok, err = pcall(function()
  -- The same interface as a library (for this script and the local session's workspace) and as
  -- MCP tools (for the agent).
  local model_tools = scoped:serve(here .. "/interface.lua", { expose_as = "library", name = "model_tools" })
  local tools_mcp = scoped:serve(here .. "/interface.lua", { expose_as = "mcp", name = "model_tools" })
  local session = exec.create_local_session(ws.Workspace{ libraries = { model_tools } }, run.out_dir .. "/workspace", "scoped-example")

  -- As the agent would: the library is a module in the session's workspace.
  package.path = session.workspace_dir .. "/?.lua;" .. package.path
  local info = require("model_tools").get_model_info()
  print(terminal.safe(seer.json.encode{ model_info = info, library = session.workspace_dir .. "/model_tools.lua" }))

  local mcp_config = {}
  for k, v in pairs(session.mcp_config) do mcp_config[k] = v end
  for k, v in pairs(tools_mcp) do mcp_config[k] = v end
  local show_text = terminal.stream()
  local result = X.agent(run, {
    prompt = X.prompt(nil, run.task),
    mcp_config = mcp_config,
    sandbox = scoped,
    on_message = function(m)
      if m.type == "text_delta" then show_text(m.text)
      elseif m.type == "tool_call" then
        show_text(nil)
        io.write(terminal.safe(("\n[tool] %s %s\n"):format(tostring(m.name), seer.json.encode(m.input))))
      end
    end,
  })
  show_text(nil)
  print()
  X.summary(run, { model_info = info, agent = X.agent_record(run, result) },
    table.concat({ "# Scoped sandbox intro: summary", "",
      ("Model: %d layers, hidden size %d, vocabulary %d (from get_model_info over RPC)."):format(
        info.num_layers, info.hidden_size, info.vocab_size),
      ("Agent: %s, %s after %d turns."):format(X.agent_label(run, result), result.reason, result.turns or 0), "",
      "Final answer: " .. tostring(result.text or ""), "", "Transcript: " .. tostring(result.transcript), "" }, "\n"))
end)
scoped:terminate()
if not ok then X.fail(run, err) end  -- the ledger and a summary marked failed or interrupted
