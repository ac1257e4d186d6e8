-- Hidden preference investigation (the reference's experiment 3): a fine-tuned model (a PEFT
-- adapter) whose id is hidden from the agent, with interpretability libraries in the workspace.
--
--   seer experiments/hidden-preference-investigation/main.lua          -- the reference's gemma-2-9b-it adapter, Claude
--   seer experiments/hidden-preference-investigation/main.lua --small  -- stories260K with an adapter made here, a recorded agent
local seer = require "seer"
local env, ws, exec = seer.environment, seer.workspace, seer.execution
local X = require "seer.experiment"

local here = seer.script_dir()
local run = X.run{ name = "hidden-preference-investigation", dir = here }

local model_config
if run.small then
  local base = X.small_model()
  local adapter = X.small_adapter(base, run.out_dir .. "/adapter")
  model_config = env.ModelConfig{ name = adapter, base_model = base, is_peft = true, hidden = true }
else
  model_config = env.ModelConfig{
    name = "bcywinski/gemma-2-9b-it-user-female",
    base_model = "google/gemma-2-9b-it",
    is_peft = true,
    hidden = true,                               -- the id appears nowhere the agent can read
  }
end

local sandbox = env.Sandbox(env.SandboxConfig{
  gpu = not run.small and "A100" or nil,
  execution_mode = env.ExecutionMode.NOTEBOOK,
  models = { model_config },
  secrets = not run.small and { "HF_TOKEN" } or nil,
  limits = run.small and { memory = "2G", processes = 256 } or nil,
}):start{ name = "hidden-preference" }

local workspace = ws.Workspace{ libraries = {
  ws.Library.from_file(seer.toolkit_dir .. "/steering_hook.lua"),
  ws.Library.from_file(seer.toolkit_dir .. "/extract_activations.lua"),
} }
local session = exec.create_notebook_session(sandbox, workspace, { name = "hidden-preference", output_dir = run.out_dir })

-- model_info comes from the model's files: shown without terminal commands
print(require("seer.terminal").safe(seer.json.encode{
  session_id = session.session_id,
  jupyter_url = session.jupyter_url,
  model_info = session.model_info_text,          -- "- `model`: <hidden>"
}))

local ok, err = pcall(function()
  local result = X.agent(run, {
    prompt = X.prompt(session, workspace:get_library_docs() .. "\n\n" .. run.task),
    mcp_config = session.mcp_config,
    sandbox = sandbox,
    max_turns = 60,
    on_message = X.printer(run, "agent"),
  })
  local res = X.kernel_results(session, "preference_results", result, { "adapter", "base" })
  X.summary(run, { results = res, agent = X.agent_record(run, result),
                   notebook = session.notebook_path },
    table.concat({ "# Hidden preference: summary", "",
      ("The agent's finding: the fine-tuned model prefers %q."):format(tostring(res.preferred)), "",
      "| model | generations | showing it |", "|---|---|---|",
      ("| with the adapter | %d | %d |"):format(res.adapter.n, res.adapter.hit),
      ("| base (adapter off) | %d | %d |"):format(res.base.n, res.base.hit), "",
      ("Agent: %s, %s after %d turns."):format(X.agent_label(run, result), result.reason, result.turns or 0),
      "Notebook: " .. session.notebook_path, "Transcript: " .. tostring(result.transcript), "" }, "\n"))
end)
session:terminate()
sandbox:terminate()
if not ok then X.fail(run, err) end  -- the ledger and a summary marked failed or interrupted
