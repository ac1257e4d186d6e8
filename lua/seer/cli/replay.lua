--- `seer replay TRANSCRIPT`: re-runs a recorded investigation. The experiment that wrote the
--- transcript (named by the summary.json beside it, or --experiment DIR) runs again from scratch
--- with the recorded agent's turns replayed against its fresh, live tools (SEER_REPLAY, read by
--- seer.experiment); then every tool call's result is compared with the recorded one, call by
--- call. seer's numerics do not depend on the thread count, so a faithful replay is identical;
--- anything else is shown as a diff. Exit status: 0 all identical, 1 a divergence, 2 bad usage.
local json = require "seer.json"
local process = require "seer.process"
local core = require "seer.core.host"

local M = {}
local safe = require("seer.terminal").safe

local USAGE = [[
usage: seer replay TRANSCRIPT [--experiment DIR] [--keep] [-- ARGS...]

Re-runs the experiment that recorded TRANSCRIPT (an agent transcript, JSONL) with the recorded
agent replayed against fresh live tools, and compares every tool result with the recorded one.
The experiment and its arguments come from the summary.json beside the transcript; --experiment
DIR (a folder with main.lua) and ARGS after -- override them. --keep keeps the replay's run
folder (printed). Exit status 0: every result identical; 1: a divergence.]]

local function usage_error(msg)
  io.stderr:write("seer replay: ", msg, "\n", USAGE, "\n")
  os.exit(2)
end

local function read_events(path)
  local f, why = io.open(path, "rb")
  if not f then error(("cannot read %s (%s)"):format(path, why), 0) end
  local probe, read_err = f:read(0) -- a folder opens, and fails at the first read
  if not probe and read_err then f:close() error(("cannot read %s (%s)"):format(path, read_err), 0) end
  local events = {}
  local n = 0
  for line in f:lines() do
    n = n + 1
    if line:match("%S") then
      local ok, ev = pcall(json.decode, line)
      if not ok or type(ev) ~= "table" then
        f:close()
        error(("%s:%d is not a JSON event (a transcript holds one JSON object per line)"):format(path, n), 0)
      end
      events[#events + 1] = ev
    end
  end
  f:close()
  return events
end

-- The last n bytes of a file ("" when it cannot be read).
local function tail(path, n)
  local f = io.open(path, "rb")
  if not f then return "" end
  local size = f:seek("end") or 0
  f:seek("set", math.max(0, size - n))
  local text = f:read(n) or ""
  f:close()
  return text
end

-- The text of a tool result, as the agent saw it.
local function result_text(ev)
  local parts = {}
  for _, c in ipairs(type(ev.content) == "table" and ev.content or {}) do
    if type(c) == "table" then
      if c.type == "text" then parts[#parts + 1] = tostring(c.text)
      else parts[#parts + 1] = json.encode(c) end
    end
  end
  return table.concat(parts, "\n") .. (ev.is_error and "\n[is_error]" or "")
end

-- The recorded calls, in order: {id, name, input, text}.
local function calls_of(events)
  local calls, by_id = {}, {}
  for _, ev in ipairs(events) do
    if ev.type == "tool_call" and ev.id then
      local c = { id = ev.id, name = ev.name, input = ev.input }
      calls[#calls + 1] = c
      by_id[ev.id] = c
    elseif ev.type == "tool_result" and ev.id and by_id[ev.id] then
      by_id[ev.id].text = result_text(ev)
    end
  end
  return calls, by_id
end

local function lines_of(s)
  local t = {}
  for l in (s .. "\n"):gmatch("(.-)\n") do t[#t + 1] = l end
  if t[#t] == "" then t[#t] = nil end
  return t
end

---A unified-style line diff of a and b (LCS; inputs past 2000 lines are compared in full but
---shown only around the first difference).
---@param a string
---@param b string
---@return string
function M.diff(a, b)
  local x, y = lines_of(a), lines_of(b)
  local n, m = #x, #y
  if n * m > 4e6 then
    local i = 1
    while i <= math.min(n, m) and x[i] == y[i] do i = i + 1 end
    return ("(long outputs: first difference at line %d)\n- %s\n+ %s"):format(i, tostring(x[i]), tostring(y[i]))
  end
  local L = {}
  for i = n + 1, 1, -1 do
    L[i] = {}
    for j = m + 1, 1, -1 do
      if i > n or j > m then L[i][j] = 0
      elseif x[i] == y[j] then L[i][j] = L[i + 1][j + 1] + 1
      else L[i][j] = math.max(L[i + 1][j], L[i][j + 1]) end
    end
  end
  local out, i, j = {}, 1, 1
  while i <= n or j <= m do
    if i <= n and j <= m and x[i] == y[j] then out[#out + 1] = "  " .. x[i]; i = i + 1; j = j + 1
    elseif j <= m and (i > n or L[i][j + 1] >= L[i + 1][j]) then out[#out + 1] = "+ " .. y[j]; j = j + 1
    else out[#out + 1] = "- " .. x[i]; i = i + 1 end
  end
  return table.concat(out, "\n")
end

---Compares the calls of two transcripts; returns the report's lines and the number of divergences.
---@param recorded table[] events
---@param replayed table[] events
---@return string[] lines, integer divergences
function M.compare(recorded, replayed)
  local rec = calls_of(recorded)
  local _, rep_by_id = calls_of(replayed)
  local lines, bad = {}, 0
  for i, c in ipairs(rec) do
    local r = rep_by_id[c.id]
    local label = ("call %d %s"):format(i, tostring(c.name))
    if not r or r.text == nil then
      bad = bad + 1
      lines[#lines + 1] = label .. ": not replayed (the replay ended before it)"
    elseif c.text == nil then
      bad = bad + 1
      lines[#lines + 1] = label .. ": the recording has no result for it"
    elseif r.text == c.text then
      lines[#lines + 1] = label .. ": identical"
    else
      bad = bad + 1
      lines[#lines + 1] = label .. ": DIFFERS (- recorded, + replayed)\n" .. M.diff(c.text, r.text)
    end
  end
  return lines, bad
end

-- Failures past the arguments (an unreadable transcript, a missing experiment) are one line on
-- stderr and exit status 1, without a traceback.
function M.main(...)
  local ok, err = pcall(M._main, ...)
  if not ok then
    io.stderr:write("seer replay: ", safe(tostring(err)), "\n")
    os.exit(1)
  end
end

-- seer's own experiments folder (beside the binary, as in the source tree), real path; nil if none.
local function experiments_root()
  local bin = require("seer.jupyter").seer_binary()
  return core.realpath((bin:match("^(.*)/[^/]*$") or ".") .. "/experiments")
end

-- The real path of dir when it is one of seer's own experiments (a folder directly in
-- experiments_root()), else nil.
local function bundled_experiment(dir)
  local root, real = experiments_root(), core.realpath(dir)
  if not root or not real then return nil end
  local name = real:sub(#root + 2)
  if real:sub(1, #root + 1) == root .. "/" and name:match("^[%w_.-]+$") and not name:match("^%.") then return real end
  return nil
end

function M._main(...)
  local args = { ... }
  local transcript, exp_dir, keep, extra = nil, nil, false, nil
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "-h" or a == "--help" or a == "help" then print(USAGE) return
    elseif a == "--keep" then keep = true
    elseif a == "--experiment" then i = i + 1; exp_dir = args[i] or usage_error("--experiment needs a folder")
    elseif a == "--" then extra = {}; for k = i + 1, #args do extra[#extra + 1] = args[k] end; break
    elseif a:sub(1, 1) == "-" then usage_error("unknown option " .. a)
    elseif transcript then usage_error("unexpected argument " .. a)
    else transcript = a end
    i = i + 1
  end
  if not transcript then usage_error("TRANSCRIPT is missing") end
  local recorded = read_events(transcript)
  if not recorded[1] or recorded[1].type ~= "run_start" then
    error(transcript .. " is not an agent transcript (its first event is not run_start)", 0)
  end
  local run_args = extra
  if not exp_dir or not run_args then
    local dir = transcript:match("^(.*)/[^/]*$") or "."
    local f = io.open(dir .. "/summary.json", "rb")
    local ok, summary = pcall(json.decode, f and f:read("*a") or "null")
    if f then f:close() end
    if not ok then
      error(("the summary.json beside %s is not JSON (%s); say which experiment with --experiment DIR and its arguments after --")
        :format(transcript, tostring(summary):gsub("^json%.decode: ", "")), 0)
    end
    if not exp_dir then
      exp_dir = type(summary) == "table" and summary.dir
      if type(exp_dir) ~= "string" then
        error(("no summary.json naming the experiment beside %s; say which with --experiment DIR"):format(transcript), 0)
      end
      -- A run's files may come from anyone (a downloaded run): the folder its summary.json
      -- names runs as this user, so only one of seer's own experiments is taken from there
      -- (a summary naming "." ran the download's own main.lua). Another is named by the user.
      local own = bundled_experiment(exp_dir)
      if not own then
        error(("the summary.json beside %s names the experiment folder %s, which is not one of seer's own experiments (%s); "
          .. "seer replay runs a folder a run's files name only then. To replay it with that folder's code, which runs as you, "
          .. "name it yourself: seer replay %s --experiment DIR"):format(transcript, exp_dir, experiments_root() or "none found",
          transcript), 0)
      end
      exp_dir = own
    end
    run_args = run_args or (type(summary) == "table" and type(summary.args) == "table" and summary.args) or {}
  end
  local main = exp_dir .. "/main.lua"
  if not io.open(main, "rb") then error(("%s has no main.lua"):format(safe(exp_dir)), 0) end
  local out = process.mkdtemp("/tmp/seer-replay-")
  local argv = { require("seer.jupyter").seer_binary(), main }
  for _, a in ipairs(run_args) do argv[#argv + 1] = a end
  local calls = calls_of(recorded)
  io.stderr:write(("seer replay: re-running %s with %d recorded tool calls replayed...\n"):format(safe(exp_dir), #calls))
  -- The run's output goes to files (it was read into memory, all of it, and a run silent for ten
  -- minutes, a slow agent turn, was taken for ended); the experiment's own limits bound the run.
  local child = process.spawn{ argv = argv, stdout = out .. "/stdout.log", stderr = out .. "/stderr.log",
                               env = { SEER_REPLAY = core.realpath(transcript) or transcript, SEER_OUT = out } }
  child:wait(math.huge)
  local code = child:describe_exit()
  local new_transcript
  local ls = io.popen(("ls '%s'/*/summary.json 2>/dev/null"):format(out))
  local sp = ls:read("*l")
  ls:close()
  if sp then
    local f = io.open(sp, "rb")
    local s = json.decode(f:read("*a"))
    f:close()
    new_transcript = type(s.agent) == "table" and s.agent.transcript
  end
  if not new_transcript then
    io.stderr:write(("seer replay: the experiment ended (%s) without a summary; the end of its output:\n%s\n%s"):format(
      tostring(code), safe(tail(out .. "/stdout.log", 4000)), safe(tail(out .. "/stderr.log", 4000))))
    if not keep then os.execute(("rm -rf '%s'"):format(out)) end
    os.exit(1)
  end
  local lines, bad = M.compare(recorded, read_events(new_transcript))
  for _, l in ipairs(lines) do print(safe(l)) end -- they quote tool results: a sandbox's output
  print(("%d of %d calls identical%s"):format(#calls - bad, #calls, bad > 0 and (", " .. bad .. " diverged") or ""))
  if keep then print("replay run: " .. out) else os.execute(("rm -rf '%s'"):format(out)) end
  if bad > 0 then os.exit(1) end
end

return M
