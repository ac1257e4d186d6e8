-- API investigation in local mode (the reference's api-kimi-investigation, main_local.py): a
-- notebook session on this machine (no sandbox, no GPU) with an OpenAI-compatible client in the
-- workspace; an agent probes an API model's behaviour on a sensitive topic.
--
--   seer experiments/api-kimi-investigation/main.lua          -- moonshotai/kimi-k2-0905 on OpenRouter (OPENROUTER_API_KEY), Claude
--   seer experiments/api-kimi-investigation/main.lua --small  -- stories260K behind `seer serve`, a scripted agent
local seer = require "seer"
local ws, exec = seer.workspace, seer.execution
local X = require "seer.experiment"

local here = seer.script_dir()
local run = X.run{ name = "api-kimi-investigation", dir = here }

-- The small profile's "API model": stories260K behind seer's OpenAI-compatible endpoint.
local server
if run.small then
  local process = require "seer.process"
  server = process.spawn{ argv = { require("seer.jupyter").seer_binary(), "serve", X.small_model(), "--name", "stories260K" },
                          stdout = "pipe", stderr = "null", die_with_parent = true } -- ends with this script, even killed
  local line = server:read_line(15000)
  if not line then error("seer serve did not start: " .. server:describe_exit(), 0) end
  local info = seer.json.decode(line)
  X.setenv("OPENROUTER_BASE_URL", info.url)
  X.setenv("OPENROUTER_MODEL", "stories260K")
end

local workspace = ws.Workspace{ libraries = { ws.Library.from_file(here .. "/openrouter_client.lua") } }
-- Local session: the kernel runs here. OPENROUTER_API_KEY reaches it only because it is listed
-- (the notebook server keeps LLM keys from kernels); the small profile's server needs none.
local session = exec.create_local_notebook_session(workspace, { name = "kimi-investigation", output_dir = run.out_dir,
  secrets = not run.small and { "OPENROUTER_API_KEY" } or nil })

local ok, err = pcall(function()
  local result = X.agent(run, { prompt = X.prompt(session, run.task), mcp_config = session.mcp_config,
                                max_turns = 60, on_message = X.printer(run, "agent") })
  local res = X.kernel_results(session, "api_results", result)
  X.summary(run, { results = res, agent = X.agent_record(run, result), notebook = session.notebook_path },
    table.concat({ "# API investigation: summary", "",
      ("%d questions: %d answered, %d refused, %d deflected, as the agent classified them%s."):format(res.questions or 0,
        res.answers or 0, res.refusals or 0, res.deflections or 0,
        type(res.method) == "string" and (" (" .. res.method .. ")") or ""), "",
      ("Agent: %s, %s after %d turns."):format(X.agent_label(run, result), result.reason, result.turns or 0),
      "Notebook: " .. session.notebook_path, "Transcript: " .. tostring(result.transcript), "" }, "\n"))
end)
session:terminate()
if server then server:stop(1000) end
if not ok then X.fail(run, err) end  -- the ledger and a summary marked failed or interrupted
