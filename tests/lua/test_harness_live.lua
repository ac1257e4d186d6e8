-- The harness against the real Anthropic API: a short agent with one Lua tool. Opt-in: it runs
-- only with ANTHROPIC_API_KEY set and SEER_LIVE_TESTS=1 (it costs a fraction of a cent), never
-- in CI. SEER_LIVE_MODEL picks the model (default claude-haiku-4-5).
local T = require "testing"
local h = require "seer.harness"

T.test("live: a real agent calls a tool and answers", function()
  if not os.getenv("ANTHROPIC_API_KEY") or os.getenv("SEER_LIVE_TESTS") ~= "1" then
    T.skip("live test: set ANTHROPIC_API_KEY and SEER_LIVE_TESTS=1 to run it")
  end
  local calls = 0
  local agent = h.run_agent{
    prompt = "You are terse. Use the add tool for arithmetic.",
    user_message = "What is 1234 + 4321? Use the tool, then answer with the number only.",
    model = os.getenv("SEER_LIVE_MODEL") or "claude-haiku-4-5",
    max_turns = 4, max_tokens = 300, time_limit = 120, output_dir = T.tmpdir(),
    tools = { { name = "add", description = "Adds two integers.",
                input_schema = { type = "object", properties = { a = { type = "integer" }, b = { type = "integer" } },
                                 required = { "a", "b" } },
                fn = function(i) calls = calls + 1; return tostring(i.a + i.b) end } },
  }
  local r = agent:run()
  T.eq(r.reason, "end_turn")
  T.ok(calls >= 1, "the model did not call the tool")
  T.contains(r.text, "5555")
  T.ok(type(r.cost_usd) == "number" and r.cost_usd > 0, "cost")
  local text = seer.read_file(r.transcript)
  T.ok(not text:find(os.getenv("ANTHROPIC_API_KEY"), 1, true), "the key reached the transcript")
  print(("  live: %d turns, %d in / %d out tokens, $%.5f, %.1f s"):format(r.turns, r.usage.input_tokens,
    r.usage.output_tokens, r.cost_usd, r.duration_s))
end)
