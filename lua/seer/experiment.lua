--- seer.experiment: what every experiments/<name>/main.lua shares. The profile (the reference's
--- models and agents, or the small offline profile: stories260K and a recorded agent), the
--- prompt an agent is given (model info, the API primer, the research methodology, the task),
--- a run folder for outputs, and the run's summary.
---
---   local X = require "seer.experiment"
---   local run = X.run{ name = "introspection", dir = seer.script_dir() }   -- reads --small / SEER_PROFILE
---   local models = run.small and { ... stories260K ... } or { ... gemma ... }
---   local prompt = X.prompt(session, run.task)
---   local agent = X.agent(run, { prompt = prompt, mcp_config = session.mcp_config })
---   local chat = X.agent_interactive(run, { prompt = prompt, mcp_config = ..., user_message = "..." })
---@class seerexperiment
local M = {}

local core = require "seer.core.host"
local json = require "seer.json"
local process = require "seer.process"

local PROMPTS = core.lua_dir() .. "/seer/prompts"
local unfinished_at_exit = {} -- the runs of this process (M.run), for the exit's M._write_failure

---Sets an environment variable of this process (the sessions it starts see it where they are
---told to pass it on).
---@param name string
---@param value string
function M.setenv(name, value)
  local ffi = require "ffi"
  pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
  if ffi.C.setenv(name, value, 1) ~= 0 then error("setenv " .. name .. " failed", 2) end
end

---Absolute path of stories260K (the small profile's model), from the seer tree.
---@return string
function M.small_model()
  local candidates = { core.lua_dir() .. "/../tests/fixtures/models/stories260K",
                       core.lua_dir() .. "/../../shared/models/stories260K" }
  for _, c in ipairs(candidates) do
    local real = core.realpath(c)
    if real then return real end
  end
  error("the small profile needs stories260K (tests/fixtures/models/stories260K in a seer checkout); "
    .. "this seer tree has none: run from a clone of the repository", 2)
end

---The small profile's hidden adapter: a rank-1 LoRA on stories260K's last down_proj that nudges
---the residual stream toward the unembedding of one name (default "Timmy"), so the adapted model
---prefers it (at scale 3: in 8 of 20 seeded stories against 3 of 20 for the base model, and
---P(Timmy | "... a little boy named") 0.96 against 0.63). Made from the base model's own weights,
---in PEFT's format. Writes the adapter into `out` (a new directory); returns out.
---@param base string the base model's directory (stories260K)
---@param out string
---@param opts? {name?: string, scale?: number}
---@return string
function M.small_adapter(base, out, opts)
  local tensor = require "seer.tensor"
  local seer = require "seer"
  opts = opts or {}
  local model = seer.model.load(base)
  local tok = model.tokenizer
  local ids = tok:encode(opts.name or "Timmy", { add_special_tokens = false })
  if #ids ~= 1 then error(("small_adapter: %q is not one token of this vocabulary"):format(opts.name or "Timmy"), 2) end
  local target = ids[1]
  local L = model.config.num_hidden_layers - 1
  local point = ("blocks.%d.mlp.hook_post"):format(L)
  -- A reads the mean direction of the down projection's input (so A·x is about 1 on ordinary text)
  local sum, n
  for _, t in ipairs({ "Once upon a time, there was a little girl named Lily.", "The dog ran to the park and played.",
                       "One day, a boy went to the store with his mom.", "They were very happy and had fun." }) do
    local _, cache = model:run_with_cache(tok:encode(t), { names = point })
    local a = cache[point]
    sum = sum and (sum + a:sum(1)) or a:sum(1)
    n = (n or 0) + a:size(1)
  end
  local m = sum / n
  local A = (m / (m:norm() ^ 2)):reshape(1, m:size(1))
  -- B writes the name's unembedding direction, seen through the final norm's weights
  local W = tensor.load(base .. "/model.safetensors")
  local E = W["lm_head.weight"] or W["model.embed_tokens.weight"]
  local dir = E:select(1, target + 1) * W["model.norm.weight"]
  local B = (dir / dir:norm() * (opts.scale or 3)):reshape(dir:size(1), 1)
  assert(os.execute(("mkdir -p '%s'"):format(out)) == 0)
  local prefix = ("base_model.model.model.layers.%d.mlp.down_proj."):format(L)
  tensor.save(out .. "/adapter_model.safetensors", { [prefix .. "lora_A.weight"] = A, [prefix .. "lora_B.weight"] = B })
  seer.write_file(out .. "/adapter_config.json", seer.json.encode{
    peft_type = "LORA", task_type = "CAUSAL_LM", r = 1, lora_alpha = 1, lora_dropout = 0.0, bias = "none",
    target_modules = { "down_proj" }, fan_in_fan_out = false, use_rslora = false,
    base_model_name_or_path = "base" })
  return out
end


---@class seerexperiment.Run
---@field name string
---@field dir string the experiment's folder
---@field small boolean the small offline profile
---@field provider string "claude", "replay", ...
---@field replay? string the recorded agent (small profile without an API key, or SEER_REPLAY)
---@field replay_agent? string under `seer replay`: the name of the agent whose turns are replayed
---@field user_turns? string[]|false an interactive agent's scripted follow-ups (M.user_turns); false: the terminal
---@field user_turns_source? string the file they came from
---@field args string[] the script's arguments
---@field flags table<string, boolean> the experiment's own flags that were given (without "--")
---@field out_dir string this run's folder: <root>/<name>-<time>-<pid>, root being out_root, else $SEER_OUT, else ./outputs
---@field task string task.md's text
---@field t0 number
---@field ledger? {turns: table[], calls: table[]} the ledger so far (the agents' on_message fills it; ledger.json)
---@field agent_runs? table[] each agent run of M.agent / M.agent_interactive: provider, model, its ledger rows
---@field finished? boolean summary.json is written: by M.summary, or for a failure by M.fail / M.agent

---The command line of an experiment's script, as every experiment reads it: `--help` (or `-h`)
---prints the usage, the experiment's own flags and the first paragraph of its task.md, and exits 0;
---an unknown option, a stray argument or a bad SEER_PROFILE is a usage error (the message and the
---usage on stderr, status 2, no traceback). M.run calls it; a script that needs no run folder (the
---hello demo) calls it alone, with `profiles = false` when --small / --full mean nothing to it.
---@param opts {name: string, dir: string, args?: string[], flags?: string[], profiles?: boolean}
---@return "small"|"full"|nil profile, table<string, boolean> flags the given flags, without "--"
function M.parse_args(opts)
  assert(type(opts) == "table" and type(opts.name) == "string" and type(opts.dir) == "string",
    "seer.experiment.parse_args{name, dir}")
  local profiles = opts.profiles ~= false
  local profile = profiles and os.getenv("SEER_PROFILE") or nil
  local flags, allowed = {}, profiles and { ["--small"] = true, ["--full"] = true } or {}
  for _, f in ipairs(opts.flags or {}) do allowed[f] = true end
  local names = {}
  for f in pairs(allowed) do names[#names + 1] = f end
  table.sort(names)
  local script = (arg and arg[0]) or (opts.dir .. "/main.lua")
  -- the script's command line: --help prints the usage; a mistake is a usage error (status 2,
  -- no traceback), as for seer's own commands
  local function usage(to, msg)
    local own = {}
    for _, f in ipairs(opts.flags or {}) do own[#own + 1] = " [" .. f .. "]" end
    to:write(msg and (msg .. "\n") or "", ("usage: seer %s%s%s\n"):format(script, profiles and " [--small | --full]" or "", table.concat(own)))
    if msg then return end
    local f = io.open(opts.dir .. "/task.md", "rb")
    local task = f and f:read("*a") or ""
    if f then f:close() end
    if profiles then
      to:write("\n  --full    the reference's models and a Claude agent (ANTHROPIC_API_KEY); the default\n",
        "  --small   stories260K and the scripted agent in replay/small.jsonl: offline, in seconds\n",
        "            (Claude on the small model when ANTHROPIC_API_KEY is set); SEER_PROFILE=small|full\n",
        "  Outputs: ./outputs/", opts.name, "-<time>-<pid>; SEER_OUT=DIR puts the run folder in DIR instead\n",
        "            (DIR/", opts.name, "-<time>-<pid>). docs/experiments.md.\n")
    end
    local first = task:match("^%s*(.-)\n%s*\n") or task
    if first ~= "" then to:write("\nThe task (task.md):\n", first:gsub("\n*$", ""), "\n") end
  end
  local valid = #names > 0 and ("the options are " .. table.concat(names, ", ")) or "it takes no options but --help"
  local given -- the profile flag seen first: --small and --full together are a usage error (the last one won)
  for _, a in ipairs(opts.args or arg or {}) do
    if profiles and (a == "--small" or a == "--full") then
      if given and given ~= a then
        usage(io.stderr, ("%s: %s and %s exclude each other; give one"):format(opts.name, given, a))
        os.exit(2)
      end
      given, profile = a, a:sub(3)
    elseif allowed[a] then flags[a:sub(3)] = true
    elseif a == "--help" or a == "-h" then usage(io.stdout) os.exit(0)
    elseif a:match("^%-") then
      usage(io.stderr, ("%s: unknown option %s (%s)"):format(opts.name, a, valid))
      os.exit(2)
    else
      usage(io.stderr, ("%s: unexpected argument %q (%s)"):format(opts.name, a, valid))
      os.exit(2)
    end
  end
  if profile ~= nil and profile ~= "small" and profile ~= "full" then
    usage(io.stderr, ("SEER_PROFILE=%s: use small (stories260K, a recorded agent) or full (the reference's models)"):format(profile))
    os.exit(2)
  end
  return profile, flags
end

---Parses the profile from the script's arguments (`--small`, `--full`, and the experiment's own
---`flags`, e.g. {"--black-box"}, set in run.flags without the dashes) and SEER_PROFILE
---("small" | "full"), and makes the run folder, `<root>/<name>-<time>-<pid>` (root: `out_root`,
---else `$SEER_OUT`, else ./outputs); a run folder still empty when the script ends (its sandbox
---failed to start, say) is removed then, a non-empty one never. In the small profile the agent is the recorded
---one in `<dir>/replay/small.jsonl` unless ANTHROPIC_API_KEY is set (then Claude works on the
---small model).
---@param opts {name: string, dir: string, args?: string[], out_root?: string, flags?: string[]}
---@return seerexperiment.Run
function M.run(opts)
  assert(type(opts) == "table" and type(opts.name) == "string" and type(opts.dir) == "string",
    "seer.experiment.run{name, dir}")
  require("seer.checks").options("seer.experiment.run", opts,
    { name = "string", dir = "string", args = "table", out_root = "string", flags = "table" }, 2)
  local profile, flags = M.parse_args(opts)
  -- `seer replay` of a transcript without a summary.json (so without the recorded arguments): a
  -- transcript whose agent was a small profile's scripted one (its run_start names
  -- <experiment>/replay/small*.jsonl) is replayed in the small profile unless a profile was given
  -- (it ran the full profile's models against the small profile's recorded turns)
  local replay_env = os.getenv("SEER_REPLAY")
  local recorded_start
  if replay_env and replay_env ~= "" then
    local f = io.open(replay_env, "rb")
    local ok, ev = pcall(json.decode, f and f:read("*l") or "")
    if f then f:close() end
    if ok and type(ev) == "table" and ev.type == "run_start" then recorded_start = ev end
    local scripted = recorded_start and type(recorded_start.replay) == "string"
      and recorded_start.replay:match("/replay/small[^/]*%.jsonl$") ~= nil
    if profile == nil and scripted then
      profile = "small"
      io.stderr:write(("%s: the transcript's agent is the small profile's scripted one (%s): replaying with --small\n")
        :format(opts.name, recorded_start.replay))
    end
  end
  local r = { name = opts.name, dir = core.realpath(opts.dir) or opts.dir, small = profile == "small", t0 = process.now_ms(),
              flags = flags }
  local f = io.open(opts.dir .. "/task.md", "rb")
  r.task = f and f:read("*a") or ""
  if f then f:close() end
  local key = os.getenv("ANTHROPIC_API_KEY")
  local replay = os.getenv("SEER_REPLAY")
  r.args = {}
  for _, a in ipairs(opts.args or arg or {}) do r.args[#r.args + 1] = a end
  if replay and replay ~= "" then
    -- `seer replay`: the recorded agent's turns again, against this fresh run's live tools.
    local f = io.open(replay, "rb")
    if not f then error(("SEER_REPLAY=%s: no such transcript"):format(replay), 2) end
    local first = f:read("*l")
    f:close()
    local ok, ev = pcall(json.decode, first or "")
    if not ok or type(ev) ~= "table" or ev.type ~= "run_start" then
      error(("SEER_REPLAY=%s: not an agent transcript (its first line is not a run_start event)"):format(replay), 2)
    end
    r.provider, r.replay, r.replay_agent = "replay", replay, ev.agent
    r.replay_start = ev
  elseif r.small and (key == nil or key == "") then
    r.provider = "replay"
    r.replay = opts.dir .. "/replay/small.jsonl"
    if not io.open(r.replay, "rb") then
      error(("%s: the small profile's recorded agent %s is missing"):format(opts.name, r.replay), 2)
    end
  else
    r.provider = "claude"
  end
  local root = opts.out_root or os.getenv("SEER_OUT") or (core.cwd() .. "/outputs")
  r.out_dir = ("%s/%s-%s-%s"):format(root, opts.name, os.date("!%Y%m%dT%H%M%S"), tostring(process.getpid()))
  process.mkdir_p(r.out_dir)
  M._remove_if_empty_at_exit(r.out_dir)
  unfinished_at_exit[#unfinished_at_exit + 1] = r
  return r
end


-- When the script ends, however it ends (seer.exit: a normal end, an uncaught error or Ctrl-C,
-- os.exit): run folders that nothing was written into are removed (a run that fails before its
-- first output, its sandbox's GPU check or a missing key, leaves no empty folder behind; rmdir
-- refuses a folder that is not empty, and anything that is not a folder, so a run's outputs are
-- never touched); runs that ended without M.summary get their ledger and a summary that says so
-- (M._write_failure), with the error the script ended with, or "failed" for os.exit with a code
-- other than 0 or true, else "incomplete"; a summary that M.summary was writing when an interrupt
-- cut it is written again.
local empty_at_exit = {}
require("seer.exit").on_exit(function(how)
  for _, r in ipairs(unfinished_at_exit) do
    if r.finished then -- nothing to do
    elseif r.pending_summary then pcall(M._write_summary_files, r) -- M.summary was cut short
    elseif how.exit_code ~= nil then
      local code = how.exit_code
      local failed = code ~= true and code ~= 0
      pcall(M._write_failure, r, failed and ("the script called os.exit(%s)"):format(tostring(code)) or nil)
    else
      pcall(M._write_failure, r, how.error) -- the error the script ended with (its first line), if any
    end
  end
  for _, dir in ipairs(empty_at_exit) do M._remove_if_empty(dir) end
end)

---Removes dir if it is an empty folder (rmdir); anything else is left as it is.
---@param dir string
---@return boolean removed
function M._remove_if_empty(dir)
  local ffi = require "ffi"
  pcall(ffi.cdef, "int rmdir(const char *pathname);")
  return ffi.C.rmdir(dir) == 0
end

function M._remove_if_empty_at_exit(dir)
  empty_at_exit[#empty_at_exit + 1] = dir
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then error("missing " .. path, 2) end
  local s = f:read("*a")
  f:close()
  return s
end

---The prompt an agent gets: the session's model info and where it works, the API primer, the
---research methodology, then the task (a few thousand tokens in all).
---@param session table a notebook session (session_id, model_info_text)
---@param task string
---@return string
function M.prompt(session, task)
  local parts = {}
  if session then
    parts[#parts + 1] = ("You work in the notebook session `%s` (already started: use this session_id with the "
      .. "notebook tools; do not start a new session)."):format(session.session_id)
    if session.model_info_text and session.model_info_text ~= "" then parts[#parts + 1] = session.model_info_text end
  end
  parts[#parts + 1] = read(PROMPTS .. "/api_primer.md")
  parts[#parts + 1] = read(PROMPTS .. "/research_methodology.md")
  parts[#parts + 1] = "# Your task\n\n" .. task
  return table.concat(parts, "\n\n")
end

-- CPU seconds (user + system, children reaped included) of the processes now in a sandbox's
-- memory cgroup; nil without a cgroup. Sampled around each tool call for the ledger.
local CLK_TCK = 100
local function sandbox_cpu_s(sandbox)
  local cg = sandbox and sandbox.cgroup and sandbox.cgroup.memory
  if type(cg) ~= "string" then return nil end
  local f = io.open(cg .. "/cgroup.procs", "rb")
  if not f then return nil end
  local total = 0
  for pid in f:lines() do
    if pid:match("^%d+$") then
      local st = io.open("/proc/" .. pid .. "/stat", "rb")
      local line = st and st:read(4096)
      if st then st:close() end
      -- fields after the ")" that closes the command name: utime is the 12th, stime, cutime, cstime follow
      local rest = line and line:match("%) (.*)$")
      if rest then
        local v, i = {}, 0
        for w in rest:gmatch("%S+") do
          i = i + 1
          if i >= 12 and i <= 15 then v[#v + 1] = tonumber(w) or 0 end
          if i > 15 then break end
        end
        for _, x in ipairs(v) do total = total + x end
      end
    end
  end
  f:close()
  return total / CLK_TCK
end

-- The ledger's one rule for dollars, the same for every experiment, for its turns, its agent
-- records (M.agent_record) and its totals; "$0.0000" is a cost known to be nothing, "unknown" a
-- cost nobody knows, and the two never mix:
-- - a live turn (a request sent to a provider) costs what the harness priced its usage at; it is
--   unpriced (cost_usd null, with the reason in `unpriced`) when the model has no price, the
--   provider's usage for it is unknown, or the response was cut off before its usage came (an
--   interruption, an error after the request went out, a limit, the run's end), since the provider
--   may bill what it generated. A request the provider refused with an HTTP error status before
--   any output costs nothing and has no row.
-- - a replayed turn (provider "replay": a small profile's scripted agent, or `seer replay` of a
--   recording) sends no request: it cost $0, known, whatever model the recording names; what the
--   recorded usage would cost at that model's price is recorded_cost_usd, never added in.
-- - a total is a sum only when every part is known; otherwise it is null (cost_known false), with
--   the sum of the known parts as a lower bound (cost_at_least_usd) and how many parts are
--   unpriced and why (M.combine_costs, M.cost_text).

-- A cost the harness gave: a finite number from 0 up, else nil.
local function dollars_of(v)
  if type(v) == "number" and v == v and v >= 0 and v < math.huge then return v end
  return nil
end

-- Fills a ledger row's cost from the harness's usage event m, for the agent run A.
local function turn_cost(row, A, m)
  local c = dollars_of(m.cost_usd)
  row.usage_known = m.usage_known ~= false
  row.replayed = A.replayed == true
  if A.replayed then
    row.cost_usd = 0
    row.recorded_cost_usd = c or json.null
    return
  end
  local cut = A.open and A.open.cut_attempts
  if c and not cut then
    row.cost_usd = c
    return
  end
  row.cost_usd = json.null
  row.cost_at_least_usd = c or 0
  if cut then
    row.unpriced = ("%d attempt%s of a request cut off and retried: what the provider billed for %s is unknown")
      :format(cut, cut == 1 and "" or "s", cut == 1 and "it" or "them")
  elseif m.usage_known == false then
    row.unpriced = "the provider's usage for a turn is unknown"
  elseif m.price_known == false then
    row.unpriced = ("no price for the model %s (seer.harness.prices)"):format(tostring(A.model or "?"))
  else
    row.unpriced = "the price table gave no finite cost"
  end
end

-- Ends the agent run A's live request that got no usage: a row with an unknown cost, unless the
-- provider refused it (an HTTP error status before any output: nothing was generated).
local function close_request(A, L)
  local q = A.open
  A.open = nil
  if not q or not L then return end
  local status = tonumber(q.status)
  if status and status >= 400 and not q.streamed and not q.cut_attempts then return end
  local row = { agent = A.agent, turn = q.turn, model = A.model or json.null, input_tokens = 0, output_tokens = 0,
    cache_read_tokens = 0, cache_write_tokens = 0, wall_s = json.null, usage_known = false, replayed = false,
    cost_usd = json.null, cost_at_least_usd = 0,
    unpriced = ("a response ended (%s) before the provider reported its usage: what it billed is unknown")
      :format(q.ended or "the run ended") }
  A.rows[#A.rows + 1] = row
  L.turns[#L.turns + 1] = row
end

---Combines costs by the ledger's rule: `parts` are ledger turns (or anything with `cost_usd`: a
---number, or null / nil when unknown; `cost_at_least_usd`, a lower bound for an unknown one;
---`unpriced`, why it is unknown; `replayed`). A part that is not a known number is never read as 0:
---the total is then null, and cost_at_least_usd the sum of what is known.
---@param parts table[]
---@return {cost_usd: number|userdata, cost_known: boolean, cost_at_least_usd: number, turns: integer, unpriced_turns: integer, replayed_turns: integer, unpriced: string[]}
function M.combine_costs(parts)
  local c = { turns = #parts, cost_at_least_usd = 0, unpriced_turns = 0, replayed_turns = 0 }
  local why, seen = {}, {}
  for _, p in ipairs(parts) do
    if p.replayed == true then c.replayed_turns = c.replayed_turns + 1 end
    local v = dollars_of(p.cost_usd)
    if v then
      c.cost_at_least_usd = c.cost_at_least_usd + v
    else
      c.unpriced_turns = c.unpriced_turns + 1
      c.cost_at_least_usd = c.cost_at_least_usd + (dollars_of(p.cost_at_least_usd) or 0)
      local w = type(p.unpriced) == "string" and p.unpriced or "its cost is unknown"
      if not seen[w] then seen[w], why[#why + 1] = true, w end
    end
  end
  c.cost_known = c.unpriced_turns == 0
  c.cost_usd = c.cost_known and c.cost_at_least_usd or json.null
  c.unpriced = json.array(why)
  return c
end

-- Dollars as summary.md shows them: 4 decimals; a known cost under half a hundredth of a cent is
-- "<$0.0001", so that "$0.0000" is only ever nothing.
local function dollars_text(x)
  if x > 0 and x < 0.00005 then return "<$0.0001" end
  return ("$%.4f"):format(x)
end

---How summary.md states a combined cost (M.combine_costs): "$0.0123"; "$0.0000 (all 8 turns
---replayed: no model was called)"; "cost unknown (5 of 5 agent turns unpriced: no price for the
---model x (seer.harness.prices))"; "at least $0.0123 (2 of 5 agent turns unpriced: ...)".
---@param c table
---@return string
function M.cost_text(c)
  if c.cost_known then
    local s = dollars_text(c.cost_usd)
    if c.replayed_turns > 0 then
      s = s .. (c.replayed_turns == c.turns and (" (all %d turns replayed: no model was called)"):format(c.turns)
        or (" (%d of %d turns replayed: no model was called for them)"):format(c.replayed_turns, c.turns))
    end
    return s
  end
  local reasons = {}
  for i, w in ipairs(c.unpriced or {}) do
    if i > 2 then reasons[#reasons + 1] = "..." break end
    reasons[#reasons + 1] = w
  end
  return ("%s (%d of %d agent turns unpriced: %s)"):format(
    c.cost_at_least_usd > 0 and ("at least " .. dollars_text(c.cost_at_least_usd)) or "cost unknown",
    c.unpriced_turns, c.turns, table.concat(reasons, "; "))
end

---Runs the agent of this run (Claude, or the recorded one) and returns its result event.
---`opts` are run_agent's (prompt, mcp_config, on_message, ...); provider, replay, name and
---output_dir come from the run. `opts.sandbox` (not passed on) is the sandbox whose CPU time the
---ledger charges to each tool call. Every agent of a run adds to the run's ledger: its provider
---and model; tokens, dollars (by the rule above M.combine_costs) and wall time per turn; wall and
---sandbox CPU time per tool call.
---@param run seerexperiment.Run
---@param opts table
---@return table result
function M.agent(run, opts)
  local o = M._agent_opts(run, opts)
  local ok, r = pcall(function() return require("seer.harness").run_agent(o):run() end)
  if not ok then
    -- the agent failed or Ctrl-C: the ledger so far and a summary saying so, before the cleanup
    pcall(M._write_failure, run, r)
    error(r, 0)
  end
  return r
end

---run_agent's options for an agent of this run (used by M.agent and M.agent_interactive): provider
---and replay from the run, the transcript in the run folder, and an on_message that fills the
---run's ledger (then calls opts.on_message).
---@param run seerexperiment.Run
---@param opts table run_agent's options, plus `sandbox` (whose CPU time the ledger charges)
---@return table
function M._agent_opts(run, opts)
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  local sandbox = o.sandbox
  o.sandbox = nil
  o.name = o.name or run.name
  if run.replay_agent then
    -- Under `seer replay` only the recorded agent is replayed; the others run as they would.
    if o.name == run.replay_agent then
      o.provider, o.replay = "replay", run.replay
      run.replayed_agent_started = true
    elseif o.provider == nil and not run.replayed_agent_started then
      -- the first agent is not the recorded one: the transcript came from another experiment (it
      -- used to fall back to Claude and fail with "no API key for provider 'claude'")
      local st = run.replay_start or {}
      local from = type(st.replay) == "string" and st.replay:match("^(.*)/replay/[^/]*$")
      error(("seer replay: this experiment's agents do not match the transcript's: %s (%s) starts the agent '%s', but the "
        .. "transcript %s records the agent '%s'%s; replay it with the experiment that recorded it (--experiment DIR; "
        .. "the summary.json beside a run's transcript names it)"):format(run.name, run.dir, tostring(o.name), run.replay,
        tostring(run.replay_agent), from and (", whose scripted turns came from " .. from) or ""), 0)
    end
  else
    o.provider = o.provider or run.provider
    if o.provider == "replay" then o.replay = o.replay or run.replay end
  end
  o.output_dir = o.output_dir or run.out_dir
  run.ledger = run.ledger or { turns = {}, calls = {} }
  local L = run.ledger
  -- this agent run, as the ledger and M.agent_record see it: its provider and model (from its
  -- run_start), whether it is replayed, and the live request whose usage has not come yet
  local A = { agent = o.name, provider = o.provider, replayed = o.provider == "replay", rows = {} }
  run.agent_runs = run.agent_runs or {}
  run.agent_runs[#run.agent_runs + 1] = A
  local t_request, open_calls = nil, {}
  local user_fn = o.on_message
  o.on_message = function(m)
    local now = process.now_ms()
    if m.type == "run_start" then
      A.provider = type(m.provider) == "string" and m.provider or A.provider
      A.model = type(m.model) == "string" and m.model or nil
      A.replayed = A.provider == "replay"
    elseif m.type == "request" then
      t_request, A.turn_model = now, nil
      close_request(A, L)
      if not A.replayed then A.open = { turn = m.turn, streamed = false } end
    elseif (m.type == "text_delta" or m.type == "thinking_delta" or m.type == "tool_use_start") and A.open then
      A.open.streamed = true
    elseif m.type == "retry" and A.open then
      -- the failed attempt's output was dropped, but what the provider generated for it may be billed
      if A.open.streamed then A.open.cut_attempts = (A.open.cut_attempts or 0) + 1 end
      A.open.streamed = false
    elseif m.type == "error" and A.open then
      A.open.status = m.status
      A.open.ended = "an error"
    elseif m.type == "interrupted" and A.open and m.during == "response" then
      A.open.ended = "interrupted"
    elseif m.type == "assistant" then
      A.turn_model = type(m.model) == "string" and m.model or nil
    elseif m.type == "usage" then
      local u = m.usage or {}
      local row = { agent = o.name, turn = m.turn, model = A.turn_model or A.model or json.null,
        input_tokens = u.input_tokens or 0, output_tokens = u.output_tokens or 0,
        cache_read_tokens = u.cache_read_input_tokens or 0, cache_write_tokens = u.cache_creation_input_tokens or 0,
        wall_s = t_request and (now - t_request) / 1000 or json.null }
      turn_cost(row, A, m)
      A.open = nil
      A.rows[#A.rows + 1] = row
      L.turns[#L.turns + 1] = row
    elseif m.type == "tool_call" and m.id then
      open_calls[m.id] = { t = now, cpu = sandbox_cpu_s(sandbox) }
    elseif m.type == "tool_result" and m.id and open_calls[m.id] then
      local c = open_calls[m.id]
      open_calls[m.id] = nil
      local cpu = sandbox_cpu_s(sandbox)
      L.calls[#L.calls + 1] = { agent = o.name, turn = m.turn, tool = m.name, is_error = m.is_error or false,
        wall_s = (now - c.t) / 1000, sandbox_cpu_s = (cpu and c.cpu) and math.max(0, cpu - c.cpu) or json.null }
    elseif m.type == "result" then
      if A.open and not A.open.ended then A.open.ended = tostring(m.reason) end
      close_request(A, L)
      A.transcript = m.transcript
    end
    if user_fn then return user_fn(m) end
  end
  return o
end

-- The lines of a user-turns file: one message a line, blank lines skipped, up to /quit (or
-- exit, quit: what ends the chat in the terminal) or the end of the file.
local function read_user_turns(path, what)
  local f, why = io.open(path, "rb")
  if not f then
    error(("%s: cannot read the user's turns %s (%s); give a text file with one message a line"):format(what, path, why), 0)
  end
  local lines = {}
  for line in f:lines() do
    line = line:gsub("\r$", "")
    local t = line:match("^%s*(.-)%s*$")
    if t == "/quit" or t == "exit" or t == "quit" then break end
    if t ~= "" then lines[#lines + 1] = line end
  end
  f:close()
  return lines
end

-- The user messages of a recorded transcript after the first (which the experiment sends itself).
local function recorded_user_turns(path)
  local lines, first = {}, true
  for line in io.lines(path) do
    local ok, ev = pcall(json.decode, line)
    if ok and type(ev) == "table" and ev.type == "user" and type(ev.text) == "string" then
      if first then first = false else lines[#lines + 1] = ev.text end
    end
  end
  return lines
end

---Where the user's follow-ups of an interactive agent come from: SEER_USER_TURNS (a file, one
---message a line), else under `seer replay` the recorded user messages, else in the small profile
---with the scripted agent `<dir>/replay/small_user.txt`; nil: the terminal (or stdin). Read once
---per run (call it early to refuse a bad file before anything starts).
---@param run seerexperiment.Run
---@return string[]|nil lines, string|nil source
function M.user_turns(run)
  if run.user_turns == nil then
    local lines, source = false, nil
    local env_turns = os.getenv("SEER_USER_TURNS")
    if env_turns and env_turns ~= "" then
      lines, source = read_user_turns(env_turns, "SEER_USER_TURNS=" .. env_turns), env_turns
    elseif run.replay_agent then
      lines, source = recorded_user_turns(run.replay), run.replay
    elseif run.small and run.provider == "replay" then
      source = run.dir .. "/replay/small_user.txt"
      lines = read_user_turns(source, run.name)
    end
    run.user_turns, run.user_turns_source = lines, source
  end
  if not run.user_turns then return nil end
  return run.user_turns, run.user_turns_source
end

-- The chat as markdown: each user message, then the agent's text and tool calls.
local function chat_markdown(run, entries)
  local out = { ("# %s: the conversation"):format(run.name), "" }
  for _, e in ipairs(entries) do
    if e.who == "user" then out[#out + 1] = "**user:** " .. e.text .. "\n"
    elseif e.who == "tool" then out[#out + 1] = "- tool call: `" .. e.text .. "`\n"
    elseif e.who == "note" then out[#out + 1] = "_" .. e.text .. "_\n"
    else out[#out + 1] = "**agent:** " .. e.text .. "\n" end
  end
  return table.concat(out, "\n") .. "\n"
end

---Runs the agent of this run as a chat (harness.run_agent_interactive): `opts.user_message` first,
---then the user's follow-ups until /quit, exit, quit or the end of the input (Ctrl-D); ESC
---interrupts a response. The follow-ups come from M.user_turns(run) when it names a source (they are
---echoed after the prompt), else from the terminal. Fills the ledger as M.agent does, and rewrites
---`<out_dir>/conversation.md` (atomically) after every user message and every response, so the
---chat so far is on disk whatever ends it. Returns the result event (reason "user_exit" when the
---user ended it).
---@param run seerexperiment.Run
---@param opts table run_agent's options
---@return table result, string conversation_path
function M.agent_interactive(run, opts)
  local seer = require "seer"
  local lines, source = M.user_turns(run)
  local o = M._agent_opts(run, opts)
  local chat_path = run.out_dir .. "/conversation.md"
  local entries, first = {}, true
  local echo = lines ~= nil or not require("seer.core.harness").isatty(0)
  local warned = false
  local function save()
    -- a disk that refuses the file must not end the chat: the transcript has every event anyway
    local ok, err = pcall(seer.write_file, chat_path, chat_markdown(run, entries))
    if not ok and not warned then
      warned = true
      io.stderr:write(("seer: cannot save the conversation to %s (%s); the transcript keeps it\n"):format(chat_path, tostring(err)))
    end
  end
  local ledger_fn = o.on_message
  o.on_message = function(m)
    if m.type == "user" then
      entries[#entries + 1] = { who = "user", text = m.text }
      -- the harness printed "> " before reading a follow-up; the first message was never typed
      if first then io.write("> ", m.text, "\n") elseif echo then io.write(m.text, "\n") end
      first = false
      save()
    elseif m.type == "assistant" then
      local text = {}
      for _, b in ipairs(m.message and m.message.content or {}) do
        if b.type == "text" and b.text ~= "" then text[#text + 1] = b.text end
      end
      if #text > 0 then entries[#entries + 1] = { who = "agent", text = table.concat(text, "\n") } end
      for _, b in ipairs(m.message and m.message.content or {}) do
        if b.type == "tool_use" then entries[#entries + 1] = { who = "tool", text = tostring(b.name) } end
      end
      save()
    elseif m.type == "interrupted" then
      entries[#entries + 1] = { who = "note", text = "(the user interrupted the " .. tostring(m.during) .. ")" }
      save()
    elseif m.type == "result" then
      entries[#entries + 1] = { who = "note", text = ("(the chat ended: %s)"):format(tostring(m.reason)) }
      save()
    end
    return ledger_fn(m)
  end
  local h = require "seer.harness"
  if not echo then io.write("(a chat: ESC interrupts the agent's response; exit, quit or Ctrl-D ends the chat)\n") end
  local tmp, saved
  if lines then
    -- the harness reads follow-ups with io.read: give it the scripted lines as its input
    tmp = assert(io.tmpfile())
    for _, l in ipairs(lines) do tmp:write(l, "\n") end
    tmp:seek("set")
    saved = io.input()
    io.input(tmp)
  end
  local ok, r = pcall(h.run_agent_interactive, o)
  if tmp then
    io.input(saved)
    tmp:close()
  end
  if not ok then
    -- Ctrl-C or a failure: the harness ended the transcript; the conversation says so too
    local why = tostring(r):match("interrupted$") and "interrupted" or ("error: " .. tostring(r):match("^[^\n]*"))
    entries[#entries + 1] = { who = "note", text = "(the chat ended: " .. why .. ")" }
    save()
    pcall(M._write_failure, run, r)
    error(r, 0)
  end
  r.user_turns = source
  return r, chat_path
end

---An on_message printer: "[label] tool" for each tool call, and the agent's text as it
---streams (not in the small profile, whose scripted agent's notes are in the transcript).
---@param run seerexperiment.Run
---@param label? string default "agent"
---@return fun(m: table)
function M.printer(run, label)
  label = label or "agent"
  local safe = require("seer.terminal").safe -- the model's text, without terminal commands
  return function(m)
    if m.type == "tool_call" then io.write(safe(("[%s] %s\n"):format(label, m.name)))
    elseif m.type == "text_delta" and not run.small then io.write(safe(m.text))
    elseif m.type == "assistant" and not run.small then io.write("\n") end
  end
end

-- The agent run (of M._agent_opts) that gave this result event: the one whose transcript it
-- names, else the latest of its agent's name; nil for an agent the run's ledger never saw.
local function agent_run_of(run, result)
  local runs = run.agent_runs or {}
  for i = #runs, 1, -1 do
    if result.transcript ~= nil and runs[i].transcript == result.transcript then return runs[i] end
  end
  for i = #runs, 1, -1 do
    if runs[i].agent == result.agent then return runs[i] end
  end
  return nil
end

-- What the ledger says of one agent run: its provider and model, and its cost by the ledger's rule.
local function agent_costs(A)
  local c = M.combine_costs(A.rows)
  return { agent = A.agent, provider = A.provider or json.null, model = A.model or json.null, replayed = A.replayed,
           turns = #A.rows, cost_usd = c.cost_usd, cost_known = c.cost_known, cost_at_least_usd = c.cost_at_least_usd,
           unpriced_turns = c.unpriced_turns, unpriced = c.unpriced, transcript = A.transcript or json.null }
end

---What summary.json records of an agent's run, the same for every experiment: provider and model
---(a replayed agent: provider "replay" and the model its recording names, "scripted" for a small
---profile's scripted agent), replayed, reason, turns, usage (the harness's: a replayed agent's is
---the recording's), the cost by the ledger's rule (cost_usd, null when unknown; cost_known;
---cost_at_least_usd; unpriced_turns and why; a replayed agent's is 0, what its recording's usage
---would cost being recorded_cost_usd) and the transcript. `extra` adds fields (a role).
---@param run seerexperiment.Run
---@param result table the agent's result event
---@param extra? table
---@return table
function M.agent_record(run, result, extra)
  local A = agent_run_of(run, result)
  local rec
  if A then
    rec = agent_costs(A)
    if A.replayed then rec.recorded_cost_usd = dollars_of(result.cost_usd) or json.null end
  else
    -- an agent run without seer.experiment.agent: the ledger has no rows for it
    rec = { provider = run.provider, model = json.null, cost_usd = json.null, cost_known = false, cost_at_least_usd = 0,
            unpriced = json.array{ "the agent did not run through seer.experiment.agent: the run's ledger has no record of it" } }
  end
  rec.agent = nil
  rec.reason, rec.turns, rec.usage, rec.transcript = result.reason, result.turns, result.usage, result.transcript
  for k, v in pairs(extra or {}) do rec[k] = v end
  return rec
end

---The agent as a summary.md names it: "claude-sonnet-4-5 (claude)", "scripted (replayed)".
---@param run seerexperiment.Run
---@param result table the agent's result event
---@return string
function M.agent_label(run, result)
  local A = agent_run_of(run, result)
  if not A then return tostring(run.provider) end
  if A.replayed then return ("%s (replayed)"):format(A.model or "a recorded agent") end
  return A.model and ("%s (%s)"):format(A.model, tostring(A.provider)) or tostring(A.provider)
end

---The table an agent left in a global of the kernel (as its task asked), decoded; an error
---naming the notebook when it is missing or not a table with the `required` fields.
---@param session table a notebook session
---@param global string the global's name
---@param result table the agent's result event
---@param required? string[] fields that must be tables
---@return table
function M.kernel_results(session, global, result, required)
  assert(global:match("^[%a_][%w_]*$"), "kernel_results: not a Lua name: " .. tostring(global))
  local r = session:exec(("print(seer.json.encode(%s or seer.json.null))"):format(global), { hidden = true })
  local text = (r.text or ""):gsub("%s+$", "")
  local ok, res = pcall(json.decode, text)
  local missing = not ok or type(res) ~= "table"
  for _, f in ipairs(required or {}) do
    if not missing and type(res[f]) ~= "table" then missing = true end
  end
  if missing then
    error(("the agent ended (%s) without leaving %s%s in the kernel; see %s"):format(tostring(result.reason), global,
      required and #required > 0 and (" (with " .. table.concat(required, ", ") .. ")") or "", session.notebook_path), 0)
  end
  return res
end

-- The run's ledger as ledger.json holds it (agents, turns, calls, totals) and its totals. A live
-- request still waiting for its usage (the run ended under it) is closed first: its cost is unknown.
local function ledger_of(run)
  for _, A in ipairs(run.agent_runs or {}) do close_request(A, run.ledger) end
  local L = run.ledger or { turns = {}, calls = {} }
  local cost = M.combine_costs(L.turns)
  local tot = { turns = #L.turns, input_tokens = 0, output_tokens = 0, cost_usd = cost.cost_usd, cost_known = cost.cost_known,
                cost_at_least_usd = cost.cost_at_least_usd, unpriced_turns = cost.unpriced_turns, unpriced = cost.unpriced,
                replayed_turns = cost.replayed_turns, agent_wall_s = 0,
                calls = #L.calls, call_wall_s = 0, sandbox_cpu_s = 0, cpu_known = #L.calls > 0 }
  tot.usage_unknown_turns = 0
  for _, t in ipairs(L.turns) do
    if t.usage_known == false then tot.usage_unknown_turns = tot.usage_unknown_turns + 1 end
    tot.input_tokens = tot.input_tokens + t.input_tokens + t.cache_read_tokens + t.cache_write_tokens
    tot.output_tokens = tot.output_tokens + t.output_tokens
    if type(t.wall_s) == "number" then tot.agent_wall_s = tot.agent_wall_s + t.wall_s end
  end
  for _, c in ipairs(L.calls) do
    tot.call_wall_s = tot.call_wall_s + c.wall_s
    if type(c.sandbox_cpu_s) == "number" then tot.sandbox_cpu_s = tot.sandbox_cpu_s + c.sandbox_cpu_s else tot.cpu_known = false end
  end
  local agents = {}
  for _, A in ipairs(run.agent_runs or {}) do agents[#agents + 1] = agent_costs(A) end
  return { agents = json.array(agents), turns = json.array(L.turns), calls = json.array(L.calls), totals = tot }, tot
end
M._ledger = ledger_of -- for the tests: ledger.json's table, and its totals

-- Writes ledger.json (atomically); fills summary's experiment, profile, dir, args, wall_s and
-- ledger; returns the ledger's line for summary.md.
local function write_ledger(run, summary)
  local seer = require "seer"
  summary.experiment = run.name
  summary.profile = run.small and "small" or "full"
  summary.dir = run.dir
  summary.args = run.args
  summary.wall_s = (process.now_ms() - run.t0) / 1000
  local ledger, tot = ledger_of(run)
  seer.write_file(run.out_dir .. "/ledger.json", json.encode(ledger, { indent = 2 }) .. "\n")
  summary.ledger = { file = run.out_dir .. "/ledger.json", totals = tot }
  -- a turn whose usage is unknown counts 0 tokens: the sums are then lower bounds, and say so
  local tokens = ("%d input and %d output tokens"):format(tot.input_tokens, tot.output_tokens)
  if tot.usage_unknown_turns > 0 then
    tokens = ("at least %s (usage unknown for %d of %d turns)"):format(tokens, tot.usage_unknown_turns, tot.turns)
  end
  return ("\nLedger: %d agent turns, %s, %s; model time %.1f s; "
    .. "%d tool calls, %.2f s wall, %s sandbox CPU; whole run %.1f s (%s).\n"):format(
    tot.turns, tokens, M.cost_text(tot),
    tot.agent_wall_s, tot.calls, tot.call_wall_s, tot.cpu_known and ("%.2f s"):format(tot.sandbox_cpu_s) or "unmeasured",
    summary.wall_s, run.out_dir .. "/ledger.json")
end

-- Writes the summary M.summary made (run.pending_summary), each file atomically.
local function write_summary_files(run)
  local seer = require "seer"
  seer.write_file(run.out_dir .. "/summary.json", run.pending_summary.json)
  seer.write_file(run.out_dir .. "/summary.md", run.pending_summary.markdown)
end
M._write_summary_files = write_summary_files

---Writes summary.json and summary.md into the run folder (atomically) and prints the markdown.
---summary.json gets `status = "completed"` (unless the experiment set a status; "failed", with
---`error` and `problems`, when a notebook server of the run ended under it), the
---experiment, profile, folder, arguments, wall time and the ledger's totals; ledger.json the
---ledger (see M._agent_opts).
---@param run seerexperiment.Run
---@param summary table JSON-able
---@param markdown string
function M.summary(run, summary, markdown)
  summary.status = summary.status or "completed"
  -- A notebook server of this run that ended under it (killed, crashed): the agent's tool calls
  -- after that failed, so what it concluded is not a completed run's, whatever it says.
  local ended = require("seer.execution").server_failures(run.t0)
  if #ended > 0 then
    local L = run.ledger or { calls = {} }
    local errors = 0
    for _, c in ipairs(L.calls) do if c.is_error then errors = errors + 1 end end
    summary.problems = json.array(ended)
    if summary.status == "completed" then
      summary.status = "failed"
      summary.error = ("%s during the run; %d of its %d tool calls failed, so the agent worked without its notebook "
        .. "from then on"):format(ended[1], errors, #L.calls)
      markdown = ("**Status: failed.** %s.\n\n"):format(summary.error) .. markdown
      io.stderr:write(("seer.experiment: %s: the run is marked failed (%s)\n"):format(run.name, ended[1]))
    end
  end
  -- a notebook whose latest save failed (a full disk): the results stand, the file lags
  local unsaved = require("seer.execution").notebook_problems(run.t0)
  if #unsaved > 0 then
    summary.problems = summary.problems or json.array()
    for _, p in ipairs(unsaved) do summary.problems[#summary.problems + 1] = p end
    markdown = markdown .. "\n**Notebook incomplete:** " .. table.concat(unsaved, "; ") .. ".\n"
    io.stderr:write(("seer.experiment: %s: %s\n"):format(run.name, unsaved[1]))
  end
  markdown = markdown .. write_ledger(run, summary)
  -- Kept before the files are written: an interrupt between the two writes (or between them and
  -- `finished`) leaves the exit's finalizer this summary to write again, not a failure's to put
  -- over a completed run's summary.json.
  run.pending_summary = { json = json.encode(summary, { indent = 2 }) .. "\n", markdown = markdown }
  write_summary_files(run)
  run.finished = true
  io.write(require("seer.terminal").safe(markdown)) -- it quotes the agents: no terminal commands
  return summary
end

-- The first line of an error (what a status line shows); the whole message goes in summary.json.
local function first_line(err) return (tostring(err):match("^[^\n]*")) end

---Writes what a run that ended without its summary leaves: ledger.json (the turns and calls so
---far) and summary.json / summary.md with `status` "interrupted" (Ctrl-C), "failed" (err is the
---error) or "incomplete" (err nil: the script ended without M.summary and without an error), the
---error, and the run folder's files. Nothing is written into an empty run folder (it is removed
---at exit). Atomic writes; a note on stderr.
---@param run seerexperiment.Run
---@param err any the error the run ended with, or nil
function M._write_failure(run, err)
  local seer = require "seer"
  local ok_list, names = pcall(core.list_dir, run.out_dir)
  if not ok_list or #names == 0 then return end
  local files = {}
  for _, n in ipairs(names) do
    if not n:match("^%.") and n ~= "summary.json" and n ~= "summary.md" and n ~= "ledger.json" then files[#files + 1] = n end
  end
  table.sort(files)
  local status = err == nil and "incomplete" or first_line(err):match("interrupted$") and "interrupted" or "failed"
  local message = err ~= nil and tostring(err)
    or "the script ended without writing its summary (seer.experiment.summary) and without an error"
  if #message > 8000 then message = message:sub(1, 8000) .. "\n[... cut: " .. (#message - 8000) .. " more bytes]" end
  local summary = { status = status, error = message, files = json.array(files) }
  local line = write_ledger(run, summary)
  local md = { ("# %s: %s"):format(run.name, status), "",
    ("The run ended before its summary: %s"):format(err ~= nil and first_line(err) or message), "",
    "Run folder: " .. run.out_dir }
  for _, f in ipairs(files) do md[#md + 1] = "- " .. f end
  seer.write_file(run.out_dir .. "/summary.json", json.encode(summary, { indent = 2 }) .. "\n")
  seer.write_file(run.out_dir .. "/summary.md", table.concat(md, "\n") .. "\n" .. line)
  if err ~= nil then run.finished = true end
  if run.failure_noted ~= message then
    run.failure_noted = message
    io.stderr:write(("seer.experiment: the run %s; its ledger and summary so far are in %s\n"):format(
      status == "interrupted" and "was interrupted" or status == "failed" and "failed" or "ended without its summary",
      run.out_dir))
  end
end

---For a main.lua's error path: writes the run's ledger and a summary marked "failed" (or
---"interrupted" after Ctrl-C) with the error (see M._write_failure), then raises err again.
---`if not ok then X.fail(run, err) end` after the script's cleanup. Runs that end without it
---(an error outside the script's pcall) get the same at exit, with the first line of the error
---the script ended with ("incomplete" when it ended without one).
---@param run seerexperiment.Run
---@param err any
function M.fail(run, err)
  local ok, why = pcall(M._write_failure, run, err)
  if not ok then io.stderr:write("seer.experiment: cannot write the run's summary: ", tostring(why), "\n") end
  error(err, 0)
end

return M
