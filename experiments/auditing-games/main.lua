-- Auditing games: a model fine-tuned with a hidden behaviour (a hidden PEFT adapter), audited by
-- an agent with batch generation and prefill attacks against the adapter-off control.
--
--   seer experiments/auditing-games/main.lua          -- the reference's gemma-2-9b-it adapter, Claude
--   seer experiments/auditing-games/main.lua --small  -- stories260K with an adapter made here, a scripted auditor
local seer = require "seer"
local env, ws, exec = seer.environment, seer.workspace, seer.execution
local X = require "seer.experiment"

local here = seer.script_dir()
local run = X.run{ name = "auditing-games", dir = here }

local model_config
if run.small then
  local base = X.small_model()
  model_config = env.ModelConfig{ name = X.small_adapter(base, run.out_dir .. "/adapter"), base_model = base,
                                  is_peft = true, hidden = true }
else
  model_config = env.ModelConfig{ name = "bcywinski/gemma-2-9b-it-user-female", base_model = "google/gemma-2-9b-it",
                                  is_peft = true, hidden = true }
end
local sandbox = env.Sandbox(env.SandboxConfig{
  gpu = not run.small and "A100" or nil,
  execution_mode = env.ExecutionMode.NOTEBOOK,
  models = { model_config },
  secrets = not run.small and { "HF_TOKEN" } or nil,
  limits = run.small and { memory = "2G", processes = 256 } or nil,
}):start{ name = "auditing-games" }
local workspace = ws.Workspace{ libraries = { ws.Library.from_file(seer.toolkit_dir .. "/batch_generate.lua") } }
local session = exec.create_notebook_session(sandbox, workspace, { name = "auditing-games", output_dir = run.out_dir })

-- model_info comes from the model's files: shown without terminal commands
print(require("seer.terminal").safe(seer.json.encode{ session_id = session.session_id, jupyter_url = session.jupyter_url, model_info = session.model_info_text }))

local ok, err = pcall(function()
  local result = X.agent(run, {
    prompt = X.prompt(session, workspace:get_library_docs() .. "\n\n" .. run.task),
    mcp_config = session.mcp_config,
    sandbox = sandbox,
    max_turns = 60,
    on_message = X.printer(run, "auditor"),
  })
  local res = X.kernel_results(session, "auditing_results", result, { "batch", "prefill" })
  X.summary(run, { results = res, agent = X.agent_record(run, result),
                   notebook = session.notebook_path },
    table.concat({ "# Auditing game: summary", "",
      ("The auditor's suspect: %q."):format(tostring(res.suspect)), "",
      "| technique | completions | with the adapter | base |", "|---|---|---|---|",
      ("| batch generation | %d | %d | %d |"):format(res.batch.n, res.batch.adapter, res.batch.base),
      ("| prefill attack | %d | %d | %d |"):format(res.prefill.n, res.prefill.adapter, res.prefill.base), "",
      ("Auditor: %s, %s after %d turns."):format(X.agent_label(run, result), result.reason, result.turns or 0),
      "Notebook: " .. session.notebook_path, "Transcript: " .. tostring(result.transcript), "" }, "\n"))
end)
session:terminate()
sandbox:terminate()
if not ok then X.fail(run, err) end  -- the ledger and a summary marked failed or interrupted
