--- `seer hub download ID [--revision R] [--include GLOB]...`: fetches a model repository into
--- the Hugging Face cache (shared with the Python tools) and prints its snapshot directory, so
--- `seer.model.load(ID)` and `seer model info ID` find it offline afterwards.
local M = {}

local USAGE = [[
usage: seer hub download REPO_ID [--revision REV] [--include GLOB]... [--cache-dir DIR]

Downloads what a model needs (config, weights, tokenizer files; --include replaces that list)
into $HF_HOME/hub and prints the snapshot directory. HF_ENDPOINT, HF_TOKEN and
HF_HUB_OFFLINE=1 are honoured.]]

function M.main(cmd, ...)
  if cmd == nil or cmd == "-h" or cmd == "--help" or cmd == "help" then
    print(USAGE)
    return
  end
  if cmd ~= "download" then
    io.stderr:write(("seer hub: unknown command %q\n%s\n"):format(cmd, USAGE))
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
        io.stderr:write(("seer hub download: %s needs a value\n%s\n"):format(a, USAGE))
        os.exit(2)
      end
      return args[i]
    end
    if a == "--revision" then opts.revision = value()
    elseif a == "--include" then include = include or {}; include[#include + 1] = value()
    elseif a == "--cache-dir" then opts.cache_dir = value()
    elseif a:sub(1, 1) == "-" or repo then
      io.stderr:write(("seer hub download: unexpected argument %s\n%s\n"):format(a, USAGE))
      os.exit(2)
    else repo = a end
    i = i + 1
  end
  if not repo then
    io.stderr:write("seer hub download: REPO_ID is missing (e.g. google/gemma-2-2b-it)\n" .. USAGE .. "\n")
    os.exit(2)
  end
  opts.allow_patterns = include
  print(require("seer.hub").download(repo, opts))
end

return M
