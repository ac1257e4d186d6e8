-- Introspection (the reference's experiment 4): can a model detect which concept is injected
-- into its activations? A notebook session in a sandbox with the model preloaded and the
-- steering libraries in the workspace; an agent builds concept vectors at ~70% depth, runs
-- injection and control trials and scores them. This script then reads the agent's numbers
-- from the kernel and writes the run's summary.
--
--   seer experiments/introspection/main.lua            -- gemma-3-27b-it on an H100, Claude
--   seer experiments/introspection/main.lua --small    -- stories260K, a recorded agent (offline, seconds);
--                                                      -- Claude instead when ANTHROPIC_API_KEY is set
local seer = require "seer"
local env, ws, exec = seer.environment, seer.workspace, seer.execution
local X = require "seer.experiment"

local here = seer.script_dir()
local run = X.run{ name = "introspection", dir = here }

local config = run.small and env.SandboxConfig{
  execution_mode = env.ExecutionMode.NOTEBOOK,
  models = { env.ModelConfig{ name = X.small_model() } },
  limits = { memory = "2G", processes = 256 },
  timeout = 900,
} or env.SandboxConfig{
  gpu = "H100",                                  -- larger model, more VRAM
  execution_mode = env.ExecutionMode.NOTEBOOK,
  models = { env.ModelConfig{ name = "google/gemma-3-27b-it" } },
}

-- Terminated on every exit path: at the end, on an error, or when this script is killed.
local sandbox = env.Sandbox(config):start{ name = "introspection" }
local workspace = ws.Workspace{ libraries = {
  ws.Library.from_file(seer.toolkit_dir .. "/steering_hook.lua"),
  ws.Library.from_file(seer.toolkit_dir .. "/extract_activations.lua"),
} }
local session = exec.create_notebook_session(sandbox, workspace, { name = "introspection", output_dir = run.out_dir })

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
    max_turns = 60,
    on_message = X.printer(run, "agent"),
  })
  -- The agent's own numbers, as it left them in the kernel.
  local res = X.kernel_results(session, "introspection_results", result, { "injection", "control" })
  local function rate(a) return a.n > 0 and a.hit / a.n or 0 end
  local lines = {
    "# Introspection: summary", "",
    ("Model: %s; layer %s of %s; strengths %s; agent: %s, %s after %d turns."):format(
      run.small and "stories260K" or "gemma-3-27b-it", tostring(res.layer), tostring(res.n_layers),
      table.concat(res.strengths or {}, ", "), X.agent_label(run, result), result.reason, result.turns or 0), "",
    "| trials | n | concept named | rate |", "|---|---|---|---|",
    ("| injection | %d | %d | %.1f%% |"):format(res.injection.n, res.injection.hit, 100 * rate(res.injection)),
    ("| control | %d | %d | %.1f%% |"):format(res.control.n, res.control.hit, 100 * rate(res.control)), "",
    ("Identification under injection %s the control rate (%.1f%% vs %.1f%%)."):format(
      rate(res.injection) > rate(res.control) and "exceeds" or "does not exceed",
      100 * rate(res.injection), 100 * rate(res.control)), "",
    "Notebook: " .. session.notebook_path, "Transcript: " .. tostring(result.transcript),
    "Live view: " .. tostring(session.jupyter_url), "",
  }
  X.summary(run, { results = res, agent = X.agent_record(run, result),
                   notebook = session.notebook_path }, table.concat(lines, "\n"))
end)
session:terminate()
sandbox:terminate()
if not ok then X.fail(run, err) end  -- the ledger and a summary marked failed or interrupted
