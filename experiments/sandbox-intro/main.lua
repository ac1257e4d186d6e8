-- Sandbox intro (the reference's experiment 1): a sandbox with a model, a notebook session with
-- the model preloaded, and an agent that explores it over MCP.
--
--   seer experiments/sandbox-intro/main.lua           -- gemma-2-2b-it on a GPU, Claude
--   seer experiments/sandbox-intro/main.lua --small   -- stories260K, a recorded agent (offline)
local seer = require "seer"
local env, ws, exec = seer.environment, seer.workspace, seer.execution
local X = require "seer.experiment"

local here = seer.script_dir()
local run = X.run{ name = "sandbox-intro", dir = here }

local config = env.SandboxConfig{
  gpu = not run.small and "A100" or nil,
  execution_mode = env.ExecutionMode.NOTEBOOK,
  models = { env.ModelConfig{ name = run.small and X.small_model() or "google/gemma-2-2b-it" } },
  limits = run.small and { memory = "2G", processes = 256 } or nil,
}

local sandbox = env.Sandbox(config):start{ name = "sandbox-intro" }  -- terminated on every exit path
local workspace = ws.Workspace{ libraries = {} }
local session = exec.create_notebook_session(sandbox, workspace, { name = "sandbox-intro", output_dir = run.out_dir })

-- model_info comes from the model's files: shown without terminal commands
print(require("seer.terminal").safe(seer.json.encode{
  session_id = session.session_id,
  jupyter_url = session.jupyter_url,
  model_info = session.model_info_text,
}))

local ok, err = pcall(function()
  local result = X.agent(run, {
    prompt = X.prompt(session, run.task),
    mcp_config = session.mcp_config,
    sandbox = sandbox,
    on_message = X.printer(run, "agent"),
  })
  print()
  X.summary(run, { agent = X.agent_record(run, result),
                   notebook = session.notebook_path },
    table.concat({ "# Sandbox intro: summary", "",
      ("Agent: %s, %s after %d turns."):format(X.agent_label(run, result), result.reason, result.turns or 0), "",
      "Final answer: " .. tostring(result.text or ""), "",
      "Notebook: " .. session.notebook_path, "Transcript: " .. tostring(result.transcript), "" }, "\n"))
end)
session:terminate()
sandbox:terminate()
if not ok then X.fail(run, err) end  -- the ledger and a summary marked failed or interrupted
