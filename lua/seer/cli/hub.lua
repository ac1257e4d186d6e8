--- `seer hub download ID [--revision R] [--include GLOB]... [--max-workers N] [--time-floor S]
--- [--min-rate B]`: fetches a model
--- repository into the Hugging Face cache (shared with the Python tools), several files at once,
--- and prints its snapshot directory, so `seer.model.load(ID)` and `seer model info ID` find it
--- offline afterwards.
local M = {}

-- Every message goes through terminal.safe: an error can quote what the hub sent (a file name
-- with an escape sequence must not reach the terminal as one).
local safe = require("seer.terminal").safe

local USAGE = [[
usage: seer hub download REPO_ID [--revision REV] [--include GLOB]... [--cache-dir DIR]
                         [--max-workers N] [--time-floor SECONDS] [--min-rate BYTES_PER_S]

Downloads what a model needs (config, weights, tokenizer files; --include replaces that list)
into $HF_HOME/hub and prints the snapshot directory. --max-workers sets how many files are
fetched at once (1 to 64; default $SEER_HUB_MAX_WORKERS, else 4). A file may take
--time-floor seconds plus 1 s per --min-rate bytes left to fetch in one run (numbers above 0;
default $SEER_HUB_TIME_FLOOR, else 300, and $SEER_HUB_MIN_RATE, else 16384); past that the
download stops and the next run resumes it: lower --min-rate for a slow link. HF_ENDPOINT,
HF_TOKEN and HF_HUB_OFFLINE=1 are honoured.]]

function M.main(cmd, ...)
  if cmd == nil then -- no subcommand: a usage error (exit 2), as for any other missing argument
    io.stderr:write(USAGE, "\n")
    os.exit(2)
  end
  if cmd == "-h" or cmd == "--help" or cmd == "help" then
    print(USAGE)
    return
  end
  if cmd ~= "download" then
    io.stderr:write(safe(("seer hub: unknown command %q"):format(cmd)), "\n", USAGE, "\n")
    os.exit(2)
  end
  local args = { ... }
  local repo, opts, include = nil, {}, nil
  local i = 1
  while i <= #args do
    local a = args[i]
    local function value()
      i = i + 1
      if args[i] == nil then
        io.stderr:write(safe(("seer hub download: %s needs a value"):format(a)), "\n", USAGE, "\n")
        os.exit(2)
      end
      return args[i]
    end
    if a == "-h" or a == "--help" then
      print(USAGE)
      return
    elseif a == "--revision" then opts.revision = value()
    elseif a == "--include" then include = include or {}; include[#include + 1] = value()
    elseif a == "--cache-dir" then opts.cache_dir = value()
    elseif a == "--max-workers" then
      local v = value()
      local n = tonumber(v)
      if not n or n % 1 ~= 0 or n < 1 or n > 64 then
        io.stderr:write(safe(("seer hub download: --max-workers needs a whole number from 1 to 64, got %s"):format(v)), "\n")
        os.exit(2)
      end
      opts.max_workers = n
    elseif a == "--time-floor" or a == "--min-rate" then
      -- the same bounds as the options and the variables (hub.c, resolve_time): above 0, at most 1e15
      local v = value()
      local n = tonumber(v)
      if not n or not (n > 0 and n <= 1e15) then
        io.stderr:write(safe(("seer hub download: %s needs %s above 0, got %s"):format(a,
          a == "--time-floor" and "a number of seconds" or "a number of bytes per second", v)), "\n")
        os.exit(2)
      end
      opts[a == "--time-floor" and "time_floor" or "min_rate"] = n
    elseif a:sub(1, 1) == "-" or repo then
      io.stderr:write(safe(("seer hub download: unexpected argument %s"):format(a)), "\n", USAGE, "\n")
      os.exit(2)
    else repo = a end
    i = i + 1
  end
  if not repo then
    io.stderr:write("seer hub download: REPO_ID is missing (e.g. google/gemma-2-2b-it)\n" .. USAGE .. "\n")
    os.exit(2)
  end
  opts.allow_patterns = include
  -- a refused id, no network, a file that failed: one line and exit status 1, no traceback
  local ok, dir = pcall(require("seer.hub").download, repo, opts)
  if not ok then
    io.stderr:write("seer hub download: ", safe((tostring(dir):gsub("^[^\n:]*:%d+: ", ""):gsub("^hub: ", ""))), "\n")
    os.exit(1)
  end
  print(dir)
end

return M
