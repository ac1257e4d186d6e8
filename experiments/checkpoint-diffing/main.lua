-- Checkpoint diffing (the reference's experiment 5): two versions of a model answer the same
-- prompts through an API; an agent encodes the answers with a reader model and a sparse
-- autoencoder and finds the features that differ. API keys go into the sandbox as secrets; the
-- run may take long (timeout).
--
--   seer experiments/checkpoint-diffing/main.lua          -- Gemini 2.0 vs 2.5 Flash on OpenRouter, Llama 3.1 8B as the reader, Claude
--   seer experiments/checkpoint-diffing/main.lua --small  -- stories260K vs stories260K + an adapter (each behind seer serve), stories260K reads
local seer = require "seer"
local env, ws, exec = seer.environment, seer.workspace, seer.execution
local X = require "seer.experiment"

local here = seer.script_dir()
local run = X.run{ name = "checkpoint-diffing", dir = here }

local servers, config = {}, nil
if run.small then
  -- The two "checkpoints": the base model and the base with the small profile's adapter.
  local base = X.small_model()
  local adapter = X.small_adapter(base, run.out_dir .. "/adapter")
  local urls = {}
  for which, extra in pairs({ a = {}, b = { "--adapter", adapter } }) do
    local argv = { require("seer.jupyter").seer_binary(), "serve", base, "--name", "checkpoint-" .. which }
    for _, e in ipairs(extra) do argv[#argv + 1] = e end
    local s = require("seer.process").spawn{ argv = argv, stdout = "pipe", stderr = "null", die_with_parent = true }
    servers[#servers + 1] = s
    local line = s:read_line(15000)
    if not line then error("seer serve did not start: " .. s:describe_exit(), 0) end
    urls[which] = seer.json.decode(line).url
  end
  config = env.SandboxConfig{
    execution_mode = env.ExecutionMode.NOTEBOOK,
    models = { env.ModelConfig{ name = base } },
    network = "host",                               -- to reach the two local servers
    env = { CHECKPOINT_A_URL = urls.a, CHECKPOINT_A_MODEL = "checkpoint-a", CHECKPOINT_B_URL = urls.b, CHECKPOINT_B_MODEL = "checkpoint-b" },
    limits = { memory = "2G", processes = 256 },
    timeout = 900,
  }
else
  config = env.SandboxConfig{
    gpu = "A100",
    execution_mode = env.ExecutionMode.NOTEBOOK,
    models = { env.ModelConfig{ name = "meta-llama/Llama-3.1-8B-Instruct" } },
    secrets = { "OPENROUTER_API_KEY", "HF_TOKEN" },
    network = "host",                               -- OpenRouter (an allow-list once sandboxes take one)
    timeout = 7200,                                 -- SAE work is slow: 2 hours
  }
end

local ok, err = pcall(function()
  local sandbox = env.Sandbox(config):start{ name = "checkpoint-diffing" }
  local workspace = ws.Workspace{ libraries = {
    ws.Library.from_file(here .. "/checkpoints.lua"),
    ws.Library.from_file(seer.toolkit_dir .. "/sae.lua"),
  } }
  local session = exec.create_notebook_session(sandbox, workspace, { name = "checkpoint-diffing", output_dir = run.out_dir })
  -- model_info comes from the model's files: shown without terminal commands
  print(require("seer.terminal").safe(seer.json.encode{ session_id = session.session_id, jupyter_url = session.jupyter_url, model_info = session.model_info_text }))
  local result = X.agent(run, { prompt = X.prompt(session, workspace:get_library_docs() .. "\n\n" .. run.task),
                                mcp_config = session.mcp_config, sandbox = sandbox, max_turns = 80,
                                on_message = X.printer(run, "agent") })
  local res = X.kernel_results(session, "diff_results", result, { "answers", "features", "fit" })
  local rows = { "| feature | delta (B - A) | fires on A / B | top tokens |", "|---|---|---|---|" }
  for _, f in ipairs(res.features) do
    rows[#rows + 1] = ("| %d | %+.3f | %.1f%% / %.1f%% | %s |"):format(f.feature, f.delta, 100 * (f.freq_a or 0), 100 * (f.freq_b or 0),
      table.concat(f.tokens or {}, " "):gsub("|", "/"))
  end
  X.summary(run, { results = res, agent = X.agent_record(run, result), notebook = session.notebook_path },
    table.concat({ "# Checkpoint diffing: summary", "",
      ("%d answers from each checkpoint, %d / %d tokens; the SAE explains %.1f%% of the variance with %.1f active features per token."):format(
        res.answers.a, res.tokens.a, res.tokens.b, 100 * res.fit.explained, res.fit.l0), "",
      table.concat(rows, "\n"), "",
      ("Agent: %s, %s after %d turns."):format(X.agent_label(run, result), result.reason, result.turns or 0),
      "Notebook: " .. session.notebook_path, "Transcript: " .. tostring(result.transcript), "" }, "\n"))
  session:terminate()
  sandbox:terminate()
end)
for _, s in ipairs(servers) do s:stop(1000) end
if not ok then X.fail(run, err) end  -- the ledger and a summary marked failed or interrupted
