--- seer.hub: download model repositories from the Hugging Face hub into the cache layout the
--- Python tools share ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub:
--- models--{org}--{name}/{blobs,snapshots,refs}), so `seer.model.load("org/name")` and
--- transformers both find what was fetched. The transfers live in C (engine/hub/, the module
--- seer.core.hub); see docs/hub.md.
---
---   local hub = require "seer.hub"
---   local dir = hub.download("HuggingFaceTB/SmolLM2-135M")   -- snapshots/<commit>
---   local m = require("seer.model").load("HuggingFaceTB/SmolLM2-135M")
---
--- Environment: HF_TOKEN (bearer token, never printed), HF_ENDPOINT (default
--- https://huggingface.co), HF_HUB_OFFLINE=1 (no network: the cache or an error),
--- SEER_HUB_MAX_WORKERS (files fetched at once when max_workers is not given; default 4),
--- SEER_HUB_TIME_FLOOR / SEER_HUB_MIN_RATE (a file's time: 300 s plus 1 s per 16384 bytes;
--- `seer hub download --time-floor / --min-rate`).
--- Errors name the repo, the file and the HTTP status with what to do (401/403: set HF_TOKEN or
--- accept the model's licence; 404: check the id and revision). Ctrl-C raises "interrupted";
--- a partial file is resumed by the next download. The hub is outside input: a file is written
--- only up to its declared size, the file list is capped and its names checked (docs/hub.md,
--- "Limits").
---@class seerhub
local M = {}

local core = require "seer.core.hub"

---The patterns used when allow_patterns is not given: the files a model or adapter needs.
---@type string[]
M.DEFAULT_ALLOW = core.DEFAULT_ALLOW

---@class seerhub.download_opts
---@field revision? string branch, tag or commit (default "main")
---@field allow_patterns? string[] globs over file names ('*' also matches '/'); default: M.DEFAULT_ALLOW
---@field token? string overrides HF_TOKEN
---@field endpoint? string overrides HF_ENDPOINT
---@field cache_dir? string the hub cache directory (what HF_HUB_CACHE names)
---@field progress? boolean one progress line for all files on stderr (default: when stderr is a terminal)
---@field max_workers? integer files fetched at once, 1..64 (default: SEER_HUB_MAX_WORKERS, else 4)
---@field time_floor? number seconds a file may take, plus 1 s per min_rate bytes (default: SEER_HUB_TIME_FLOOR or 300)
---@field min_rate? number slowest average bytes/s a file may arrive at (default: SEER_HUB_MIN_RATE or 16384)

local function check(fn, id, opts, allowed)
  if type(id) ~= "string" then error("seer.hub." .. fn .. ": expected a repo id (\"org/name\"), got " .. type(id), 3) end
  if opts == nil then return {} end
  if type(opts) ~= "table" then error("seer.hub." .. fn .. ": options must be a table, got " .. type(opts), 3) end
  for k in pairs(opts) do
    if not allowed[k] then
      local names = {}
      for n in pairs(allowed) do names[#names + 1] = n end
      table.sort(names)
      error(("seer.hub.%s: unknown option '%s' (options: %s)"):format(fn, tostring(k), table.concat(names, ", ")), 3)
    end
  end
  return opts
end

local DOWNLOAD_OPTS = { revision = true, allow_patterns = true, token = true, endpoint = true, cache_dir = true,
  progress = true, max_workers = true, time_floor = true, min_rate = true }
local CACHED_OPTS = { revision = true, cache_dir = true }

---Downloads the repo's files (those matching allow_patterns) at the revision into the cache,
---max_workers of them at once; files already there are not fetched again.
---@param repo_id string "org/name"
---@param opts? seerhub.download_opts
---@return string snapshot_dir the snapshots/<commit> directory (a model directory)
function M.download(repo_id, opts)
  opts = check("download", repo_id, opts, DOWNLOAD_OPTS)
  local w = opts.max_workers
  if w ~= nil and (type(w) ~= "number" or w % 1 ~= 0 or w < 1 or w > 64) then
    error("seer.hub.download: max_workers must be a whole number from 1 to 64, got " .. tostring(w), 2)
  end
  for _, k in ipairs{ "time_floor", "min_rate" } do
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or not (v > 0 and v <= 1e15)) then
      error("seer.hub.download: " .. k .. " must be a number above 0, got " .. tostring(v), 2)
    end
  end
  local ok, res = pcall(core.download, repo_id, opts)
  if not ok then error(res, 2) end
  return res
end

---The cached snapshot directory of the repo at the revision, without touching the network. The
---cache is read as the download writes it, from the cache directory down without following a
---link: a ref or folder that is a link, a FIFO or anything but what it should be raises an error
---naming it (remove it), never followed or waited on. The snapshot's files are links into
---../../blobs and are not vouched for: open them confined, as seer.model.load does (docs/hub.md).
---@param repo_id string "org/name"
---@param opts? {revision?: string, cache_dir?: string}
---@return string|nil snapshot_dir nil when the revision is not in the cache
function M.cached(repo_id, opts)
  opts = check("cached", repo_id, opts, CACHED_OPTS)
  local ok, res = pcall(core.cached, repo_id, opts)
  if not ok then error(res, 2) end
  return res
end

---The hub cache directory in use (cache_dir, else HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub).
---@param cache_dir? string
---@return string
function M.cache_dir(cache_dir)
  return core.cache_dir(cache_dir)
end

return M
