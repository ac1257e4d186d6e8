-- Refusal direction ablation (Arditi et al. 2024, "Refusal in Language Models Is Mediated by a
-- Single Direction"): an agent computes the difference-of-means direction between harmful and
-- harmless requests, ablates it from every layer, and compares refusal rates, checking that the
-- ablation really removes the direction.
--
--   seer experiments/refusal-direction-ablation/main.lua          -- gemma-2-2b-it on a GPU, Claude
--   seer experiments/refusal-direction-ablation/main.lua --small  -- stories260K (which never refuses), a scripted agent
local seer = require "seer"
local env, ws, exec = seer.environment, seer.workspace, seer.execution
local X = require "seer.experiment"

local here = seer.script_dir()
local run = X.run{ name = "refusal-direction-ablation", dir = here }

local sandbox = env.Sandbox(env.SandboxConfig{
  gpu = not run.small and "A100" or nil,
  execution_mode = env.ExecutionMode.NOTEBOOK,
  models = { env.ModelConfig{ name = run.small and X.small_model() or "google/gemma-2-2b-it" } },
  limits = run.small and { memory = "2G", processes = 256 } or nil,
}):start{ name = "refusal" }
local workspace = ws.Workspace{ libraries = { ws.Library.from_file(seer.toolkit_dir .. "/refusal_direction.lua") } }
local session = exec.create_notebook_session(sandbox, workspace, { name = "refusal", output_dir = run.out_dir })

-- model_info comes from the model's files: shown without terminal commands
print(require("seer.terminal").safe(seer.json.encode{ session_id = session.session_id, jupyter_url = session.jupyter_url, model_info = session.model_info_text }))

local ok, err = pcall(function()
  local result = X.agent(run, {
    prompt = X.prompt(session, workspace:get_library_docs() .. "\n\n" .. run.task),
    mcp_config = session.mcp_config,
    sandbox = sandbox,
    max_turns = 60,
    on_message = X.printer(run, "agent"),
  })
  local res = X.kernel_results(session, "refusal_results", result, { "baseline", "ablated", "projection" })
  X.summary(run, { results = res, agent = X.agent_record(run, result),
                   notebook = session.notebook_path },
    table.concat({ "# Refusal direction ablation: summary", "",
      ("Layer %s of %s; |r| = %.3f."):format(tostring(res.layer), tostring(res.n_layers), tonumber(res.norm) or 0), "",
      "| harmful prompts | n | refused |", "|---|---|---|",
      ("| baseline | %d | %d |"):format(res.baseline.n, res.baseline.refused),
      ("| direction ablated | %d | %d |"):format(res.ablated.n, res.ablated.refused), "",
      ("Largest |residual . r| at the last layer: %.4g baseline, %.3g ablated."):format(res.projection.baseline, res.projection.ablated),
      res.baseline.refused == 0 and "The model did not refuse at baseline, so this run cannot show the direction's role in refusal." or "",
      "", ("Agent: %s, %s after %d turns."):format(X.agent_label(run, result), result.reason, result.turns or 0),
      "Notebook: " .. session.notebook_path, "Transcript: " .. tostring(result.transcript), "" }, "\n"))
end)
session:terminate()
sandbox:terminate()
if not ok then X.fail(run, err) end  -- the ledger and a summary marked failed or interrupted
