--- seer.environment: the declarative sandbox configuration (names as the reference):
--- `SandboxConfig{...}`, `ModelConfig{...}`, `RepoConfig{...}` and `ExecutionMode`.
--- Constructors take one table and check it: an unknown field, a wrong type or an impossible
--- combination is an error that says what to write instead. A config is a record: its fields
--- are plain values (lists are plain Lua lists), it cannot gain new fields, and `tostring`
--- shows it (secrets by name only; hidden model ids as `<hidden>`).
---
---   local env = require "seer.environment"
---   local config = env.SandboxConfig{
---     gpu = "A100",
---     execution_mode = env.ExecutionMode.NOTEBOOK,
---     models = { env.ModelConfig{ name = "google/gemma-2-9b-it" } },
---     secrets = { "HF_TOKEN" },
---   }
---
--- `env.Sandbox(config):start()` starts one (seer.sandbox, docs/sandbox.md).
---@class seerenvironment
local M = {}

---------------------------------------------------------------------------------------------
-- helpers

-- Validation errors are raised as {seer_env_error = msg} and re-raised by the public
-- constructor at the caller's level, so the message points at the user's line.
local function fail(fmt, ...)
  error({ seer_env_error = select("#", ...) > 0 and fmt:format(...) or fmt }, 0)
end

local function guarded(fn)
  return function(t)
    local ok, res = pcall(fn, t)
    if ok then return res end
    if type(res) == "table" and res.seer_env_error then error(res.seer_env_error, 2) end
    error(res, 0)
  end
end

local KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or
  repeat return then true until while]]):gmatch("%a+") do KEYWORDS[w] = true end

local function sorted_keys(t)
  local names = {}
  for k in pairs(t) do names[#names + 1] = k end
  table.sort(names)
  return names
end

local function typename(v)
  local mt = getmetatable(v)
  if type(mt) == "table" and type(mt.__name) == "string" then return mt.__name end
  return type(v)
end

-- Checks that `t` is a table with only the fields in `spec` (field -> Lua type), each of the
-- right type; `hints` maps known wrong field names to what to write instead.
local function check_fields(what, t, spec, hints)
  if type(t) ~= "table" then
    fail("%s takes one table of fields (%s{...}), not a %s", what, what, typename(t))
  end
  for k, v in pairs(t) do
    if spec[k] == nil then
      if hints and hints[k] then fail("%s: %s", what, hints[k]) end
      fail("%s: unknown field %s; valid fields: %s", what,
        type(k) == "string" and k or ("[" .. tostring(k) .. "]"), table.concat(sorted_keys(spec), ", "))
    end
    if type(v) ~= spec[k] and not ("|" .. spec[k] .. "|"):find("|" .. type(v) .. "|", 1, true) then
      fail("%s.%s must be a %s, not a %s", what, k, (spec[k]:gsub("|", " or ")), typename(v))
    end
  end
end

-- A plain list: keys 1..n only.
local function check_list(what, v)
  local n = #v
  for k in pairs(v) do
    if type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 then
      fail("%s must be a list ({a, b, ...}), but it has the key %s", what, tostring(k))
    end
  end
end

local function is_env_name(s)
  return type(s) == "string" and s:match("^[%a_][%w_]*$") ~= nil
end

-- Records: fields stored raw (so pairs/ipairs/json see them), no new fields afterwards.
local function record_mt(name)
  local mt = { __name = name }
  mt.__index = mt
  mt.__newindex = function(_, k)
    error(("%s is immutable: cannot set %s; make a new %s{...} instead"):format(name, tostring(k), name), 2)
  end
  return mt
end

local function q(s) return ("%q"):format(s) end

local function show_list(list, show)
  local parts = {}
  for i, v in ipairs(list) do parts[i] = show(v) end
  return "{" .. table.concat(parts, ", ") .. "}"
end

---------------------------------------------------------------------------------------------
-- ExecutionMode

---@alias seerenvironment.ExecutionModeValue "notebook"|"cli"

---`ExecutionMode.NOTEBOOK` (a Jupyter-protocol notebook the agent drives) or
---`ExecutionMode.CLI` (the agent works in a shell). The values are the strings "notebook"
---and "cli", which configs also accept directly.
---@class seerenvironment.ExecutionMode
---@field NOTEBOOK "notebook"
---@field CLI "cli"
M.ExecutionMode = setmetatable({}, {
  __index = function(_, k)
    if k == "NOTEBOOK" then return "notebook" elseif k == "CLI" then return "cli" end
    error(("ExecutionMode has no member %s; use ExecutionMode.NOTEBOOK or ExecutionMode.CLI"):format(tostring(k)), 2)
  end,
  __newindex = function() error("ExecutionMode is read-only", 2) end,
  __tostring = function() return "ExecutionMode{NOTEBOOK, CLI}" end,
})

local MODES = { notebook = "notebook", cli = "cli" }

---------------------------------------------------------------------------------------------
-- ModelConfig

---A model for the sandbox to provide (loaded into notebook sessions as `var_name`).
---@class seerenvironment.ModelConfig
---@field name string Hugging Face model id, e.g. "google/gemma-2-9b-it" (required)
---@field var_name string variable name in notebook sessions (default "model")
---@field hidden boolean hide the id from the agent (default false)
---@field is_peft boolean `name` is a PEFT/LoRA adapter (default false); needs base_model
---@field base_model? string the adapter's base model id (only with is_peft = true)
---@field revision? string branch, tag or commit (default: the hub's default branch)
---@field precision? "exact"|"fast" how bf16 weights meet activations in the sessions (seer.model.load's precision; default "exact")
local ModelConfig = record_mt("ModelConfig")
M.ModelConfigClass = ModelConfig

local MODEL_FIELDS = {
  name = "string", var_name = "string", hidden = "boolean", is_peft = "boolean",
  base_model = "string", revision = "string", precision = "string",
}
local MODEL_HINTS = {}
for _, k in ipairs({ "load_kwargs", "dtype", "device_map", "quantization", "torch_dtype" }) do
  MODEL_HINTS[k] = k .. " is not a ModelConfig field (model loading is handled by the sandbox); valid fields: "
    .. table.concat(sorted_keys(MODEL_FIELDS), ", ")
end

local function make_model(t, what)
  what = what or "ModelConfig"
  if type(t) == "string" then t = { name = t } end
  if getmetatable(t) == ModelConfig then return t end
  check_fields(what, t, MODEL_FIELDS, MODEL_HINTS)
  if t.name == nil or t.name == "" then
    fail('%s needs a name: ModelConfig{name = "google/gemma-2-9b-it"}', what)
  end
  local var_name = t.var_name or "model"
  if not var_name:match("^[%a_][%w_]*$") then
    fail("%s.var_name %s is not a Lua identifier (letters, digits and _, not starting with a digit); e.g. var_name = \"model_a\"",
      what, q(var_name))
  end
  if KEYWORDS[var_name] then
    fail("%s.var_name %s is a Lua keyword; choose another name, e.g. var_name = \"%s_model\"", what, q(var_name), var_name)
  end
  if t.is_peft and not t.base_model then
    fail('%s %s is a PEFT adapter (is_peft = true): add base_model = "<base model id>"', what, t.hidden and "<hidden>" or q(t.name))
  end
  if t.base_model and not t.is_peft then
    fail("%s: base_model is only for PEFT adapters; add is_peft = true or remove base_model", what)
  end
  if t.base_model == "" then fail("%s.base_model must be a model id, not an empty string", what) end
  if t.revision == "" then fail("%s.revision must be a branch, tag or commit, not an empty string", what) end
  if t.precision ~= nil and t.precision ~= "exact" and t.precision ~= "fast" then
    fail('%s.precision %s is not known; use "exact" (the default) or "fast" (bf16 weights meet activations rounded to bf16)',
      what, q(t.precision))
  end
  return setmetatable({
    name = t.name, var_name = var_name, hidden = t.hidden or false, is_peft = t.is_peft or false,
    base_model = t.base_model, revision = t.revision, precision = t.precision,
  }, ModelConfig)
end

function ModelConfig.__tostring(m)
  local parts = { "name = " .. (m.hidden and "<hidden>" or q(m.name)), "var_name = " .. q(m.var_name) }
  if m.hidden then parts[#parts + 1] = "hidden = true" end
  if m.is_peft then parts[#parts + 1] = "is_peft = true" end
  if m.base_model then parts[#parts + 1] = "base_model = " .. q(m.base_model) end
  if m.revision then parts[#parts + 1] = "revision = " .. q(m.revision) end
  if m.precision then parts[#parts + 1] = "precision = " .. q(m.precision) end
  return "ModelConfig{" .. table.concat(parts, ", ") .. "}"
end

---A model for a sandbox: `ModelConfig{name = "google/gemma-2-9b-it", var_name = "gemma"}`
---(a plain string is the same as `{name = string}`).
---@param t {name: string, var_name?: string, hidden?: boolean, is_peft?: boolean, base_model?: string, revision?: string, precision?: "exact"|"fast"}|string
---@return seerenvironment.ModelConfig
M.ModelConfig = guarded(function(t) return make_model(t) end)

---------------------------------------------------------------------------------------------
-- RepoConfig

---A git repository cloned on the host and mounted in the sandbox.
---@class seerenvironment.RepoConfig
---@field url string "owner/repo" (GitHub) or a full git URL (required)
---@field dockerfile? string path of a Dockerfile inside the repo
---@field install boolean|string run an install step inside the sandbox after cloning: a shell command (the reference's "pip install -e ."), or true for the repo's install.sh (default false)
local RepoConfig = record_mt("RepoConfig")
M.RepoConfigClass = RepoConfig

local REPO_FIELDS = { url = "string", dockerfile = "string", install = "boolean|string" }

local function make_repo(t, what)
  what = what or "RepoConfig"
  if type(t) == "string" then t = { url = t } end
  if getmetatable(t) == RepoConfig then return t end
  check_fields(what, t, REPO_FIELDS)
  if t.url == nil or t.url == "" then
    fail('%s needs a url: RepoConfig{url = "owner/repo"} or a full git URL', what)
  end
  if t.dockerfile == "" then fail("%s.dockerfile must be a path inside the repo, not an empty string", what) end
  if type(t.install) == "string" and not t.install:match("%S") then
    fail('%s.install must be a shell command (e.g. install = "make") or true for the repo\'s install.sh, not an empty string', what)
  end
  return setmetatable({ url = t.url, dockerfile = t.dockerfile, install = t.install or false }, RepoConfig)
end

function RepoConfig.__tostring(r)
  local parts = { "url = " .. q(r.url) }
  if r.dockerfile then parts[#parts + 1] = "dockerfile = " .. q(r.dockerfile) end
  if r.install == true then parts[#parts + 1] = "install = true"
  elseif r.install then parts[#parts + 1] = "install = " .. q(r.install) end
  return "RepoConfig{" .. table.concat(parts, ", ") .. "}"
end

---A repository for a sandbox: `RepoConfig{url = "owner/repo", install = "make"}` (or
---`install = true` for the repo's install.sh).
---@param t {url: string, dockerfile?: string, install?: boolean|string}|string
---@return seerenvironment.RepoConfig
M.RepoConfig = guarded(function(t) return make_repo(t) end)

---------------------------------------------------------------------------------------------
-- SandboxConfig

---Everything a sandbox is made of.
---@class seerenvironment.SandboxConfig
---@field gpu? string GPU type ("H100", "A100", ...); nil = no GPU
---@field gpu_count integer number of GPUs: 1 by default with a gpu, 0 without
---@field execution_mode seerenvironment.ExecutionModeValue "notebook" (default) or "cli"
---@field models seerenvironment.ModelConfig[] models to provide
---@field system_packages string[] system packages the sandbox needs
---@field secrets string[] names of environment variables passed from this environment
---@field repos seerenvironment.RepoConfig[] repositories to clone and mount
---@field env table<string, string> environment variables set in the sandbox
---@field timeout number wall-clock limit in seconds (default 3600)
---@field local_files {[1]: string, [2]: string}[] {local_path, sandbox_path} files to mount
---@field local_dirs {[1]: string, [2]: string}[] {local_path, sandbox_path} directories to mount
---@field debug boolean debugging aids (default false)
---@field backend "local"|"ssh"|"slurm"|"podman"|"docker"|"kubernetes" where the sandbox runs (default "local"; docs/backends.md)
---@field podman? seerbackends.podman.Config the podman backend's fields (backend = "podman")
---@field docker? seerbackends.docker.Config the docker backend's fields (backend = "docker")
---@field ssh? seerbackends.ssh.Config the ssh backend's fields (backend = "ssh")
---@field slurm? seerbackends.slurm.Config the slurm backend's fields (backend = "slurm")
---@field kubernetes? seerbackends.kubernetes.Config the kubernetes backend's fields (backend = "kubernetes")
---@field network "none"|"host"|{allow: string[], resolve?: table<string, string>} network access: none (the default), the host's network, or HTTP(S) to listed host names only through seer's egress proxy (docs/sandbox.md)
---@field limits seerenvironment.Limits resource limits of the whole sandbox
---Resource limits of a sandbox (the whole process tree).
---@class seerenvironment.Limits
---@field memory? integer|string bytes, or "512M", "8G" (default: 90% of this machine's memory)
---@field processes? integer most processes and threads at once (default 4096)
---@field cpu_seconds? number CPU time per process (default: none)
---@field open_files? integer open files per process (default 65536)
---@field tmp? integer|string size of /tmp, a tmpfs charged to memory (default 25% of memory); tmp + shm stay within 75% of memory
---@field shm? integer|string size of /dev/shm, a tmpfs charged to memory (default 12.5% of memory)
---@field disk? integer|string size of the sandbox's writable host storage (/workspace, /run/seer, /var/log/seer): a filesystem image of this size, mounted on the host (needs root; without root, start() refuses rather than ignore it). Default: no limit

local SandboxConfig = record_mt("SandboxConfig")
M.SandboxConfigClass = SandboxConfig

local SANDBOX_FIELDS = {
  gpu = "string", gpu_count = "number", execution_mode = "string", models = "table",
  system_packages = "table", secrets = "table", repos = "table", env = "table", timeout = "number",
  local_files = "table", local_dirs = "table", debug = "boolean", backend = "string", network = "string|table",
  limits = "table", ssh = "table", slurm = "table", podman = "table", docker = "table", kubernetes = "table",
}
local VALID_SANDBOX = table.concat(sorted_keys(SANDBOX_FIELDS), ", ")
local SANDBOX_HINTS = {
  python_packages = "python_packages is not a field: seer sandboxes run Lua, not Python; put Lua code in a "
    .. "Workspace library (seer.workspace) and system packages in system_packages; valid fields: " .. VALID_SANDBOX,
}

local BACKENDS = { ["local"] = true, ssh = true, slurm = true, podman = true, docker = true, kubernetes = true }
local PLANNED_BACKENDS = { modal = true }

local function check_pairs(what, list, second)
  check_list(what, list)
  local out = {}
  for i, p in ipairs(list) do
    local a, b
    if type(p) == "table" then
      a, b = p[1] or p.local_path, p[2] or p.sandbox_path
    end
    if type(a) ~= "string" or type(b) ~= "string" or a == "" or b == "" then
      fail("%s[%d] must be {local_path, %s} (two non-empty strings)", what, i, second)
    end
    out[i] = { a, b }
  end
  return out
end

local LIMIT_FIELDS = { memory = true, processes = true, cpu_seconds = true, open_files = true, tmp = true, shm = true,
                       disk = true }
local SIZE_FIELDS = { memory = 16 * 1024 * 1024, tmp = 1024 * 1024, shm = 1024 * 1024, disk = 16 * 1024 * 1024 }
local UNITS = { [""] = 1, K = 1024, M = 1024 ^ 2, G = 1024 ^ 3, T = 1024 ^ 4 }

---Checks a limits table; memory sizes like "512M" become bytes.
---@param t table
---@param what? string
---@return table
function M.parse_limits(t, what)
  what = what or "limits"
  local out = {}
  for k, v in pairs(t) do
    if not LIMIT_FIELDS[k] then
      fail("%s: unknown field %s; valid fields: cpu_seconds, disk, memory, open_files, processes, shm, tmp", what, tostring(k))
    end
    if SIZE_FIELDS[k] then
      local n = v
      local min = SIZE_FIELDS[k]
      if type(v) == "string" then
        local num, unit = v:upper():match("^%s*([%d%.]+)%s*([KMGT]?)I?B?%s*$")
        n = num and tonumber(num) and tonumber(num) * UNITS[unit] or nil
        if not n then fail('%s.%s %s is not a size; write e.g. %s = "512M" or "8G" (or a number of bytes)', what, k, q(v), k) end
      end
      if type(n) ~= "number" or n < min or n ~= n or n == math.huge then
        fail('%s.%s must be at least %dM (e.g. %s = "4G"), not %s', what, k, math.floor(min / (1024 * 1024)), k, tostring(v))
      end
      out[k] = math.floor(n)
    else
      if type(v) ~= "number" or v <= 0 or v ~= v or v == math.huge or (k ~= "cpu_seconds" and v % 1 ~= 0) then
        fail("%s.%s must be a positive %s, not %s", what, k, k == "cpu_seconds" and "number" or "integer", tostring(v))
      end
      if k == "processes" and v < 8 then fail("%s.processes must be at least 8 (sandboxd and a shell need a few)", what) end
      if k == "open_files" and v < 64 then fail("%s.open_files must be at least 64 (sandboxd and the kernel need a few dozen)", what) end
      out[k] = v
    end
  end
  if out.memory then M.check_tmpfs_sizes(out.memory, out.tmp, out.shm, what) end
  return out
end

---Checks that /tmp and /dev/shm (tmpfs, charged to the memory limit) leave the processes at
---least a quarter of it: a full tmpfs must give its writer ENOSPC, not kill the sandbox.
---@param memory integer bytes
---@param tmp? integer
---@param shm? integer
---@param what? string
function M.check_tmpfs_sizes(memory, tmp, shm, what)
  what = what or "limits"
  local mib = 1024 * 1024
  local t = tmp or math.max(mib, math.floor(memory * 0.25 / mib) * mib)
  local sh = shm or math.max(mib, math.floor(memory * 0.125 / mib) * mib)
  if t + sh > memory * 0.75 then
    fail("%s: tmp (%d MiB) + shm (%d MiB) must stay within 75%% of memory (%d MiB): both are tmpfs charged to the "
      .. "sandbox's memory, and a full one must give ENOSPC, not an out-of-memory kill; lower tmp/shm or raise memory",
      what, math.floor(t / mib), math.floor(sh / mib), math.floor(memory / mib))
  end
end

local function make_sandbox(t)
  local what = "SandboxConfig"
  if type(t) == "table" and getmetatable(t) == SandboxConfig then return t end
  check_fields(what, t, SANDBOX_FIELDS, SANDBOX_HINTS)
  local c = {}

  -- gpu
  if t.gpu == "" then fail('SandboxConfig.gpu must name a GPU (e.g. gpu = "H100"); leave it out for no GPU') end
  c.gpu = t.gpu
  if t.gpu_count ~= nil then
    if t.gpu_count < 1 or t.gpu_count % 1 ~= 0 then
      fail("SandboxConfig.gpu_count must be a positive integer, not %s", tostring(t.gpu_count))
    end
    if t.gpu == nil then
      fail('SandboxConfig: gpu_count = %d needs a gpu; add gpu = "H100" (the GPU type you want) or remove gpu_count', t.gpu_count)
    end
  end
  c.gpu_count = t.gpu and (t.gpu_count or 1) or 0

  -- execution_mode
  local mode = t.execution_mode or "notebook"
  if not MODES[mode:lower()] then
    fail("SandboxConfig.execution_mode must be ExecutionMode.NOTEBOOK or ExecutionMode.CLI (or \"notebook\"/\"cli\"), not %s", q(mode))
  end
  c.execution_mode = MODES[mode:lower()]

  -- models
  c.models = {}
  if t.models then
    if getmetatable(t.models) == ModelConfig or t.models.name ~= nil then
      fail("SandboxConfig.models must be a list of models: models = { ModelConfig{...} }")
    end
    check_list("SandboxConfig.models", t.models)
    local by_var, tokenizer_of = {}, {}
    for i, m in ipairs(t.models) do
      local w = ("SandboxConfig.models[%d]"):format(i)
      if type(m) ~= "table" and type(m) ~= "string" then
        fail("%s must be a ModelConfig, a table of ModelConfig fields or a model id string, not a %s", w, typename(m))
      end
      local mc = make_model(m, w)
      if by_var[mc.var_name] then
        fail('SandboxConfig.models[%d] and models[%d] both use var_name = %s; give each model its own var_name (e.g. var_name = "model_b")',
          by_var[mc.var_name], i, q(mc.var_name))
      end
      by_var[mc.var_name] = i
      tokenizer_of[mc.var_name == "model" and "tokenizer" or (mc.var_name .. "_tokenizer")] = i
      c.models[i] = mc
    end
    for name, i in pairs(tokenizer_of) do
      if by_var[name] then
        fail("SandboxConfig.models[%d] uses var_name = %s, which is the tokenizer variable of models[%d]; choose another var_name",
          by_var[name], q(name), i)
      end
    end
  end

  -- system_packages
  c.system_packages = {}
  if t.system_packages then
    check_list("SandboxConfig.system_packages", t.system_packages)
    for i, p in ipairs(t.system_packages) do
      if type(p) ~= "string" or not p:match("^[%w][%w%.%+%-:]*$") then
        fail("SandboxConfig.system_packages[%d] must be a package name string (e.g. \"git\")", i)
      end
      c.system_packages[i] = p
    end
  end

  -- secrets: names only; a bad entry is never echoed (it may be the secret itself)
  c.secrets = {}
  if t.secrets then
    check_list("SandboxConfig.secrets", t.secrets)
    for i, s in ipairs(t.secrets) do
      if not is_env_name(s) then
        fail('SandboxConfig.secrets[%d] must be the name of an environment variable (e.g. secrets = {"HF_TOKEN"}), not its value; set the value in your environment (export HF_TOKEN=...)', i)
      end
      c.secrets[i] = s
    end
  end

  -- repos
  c.repos = {}
  if t.repos then
    if getmetatable(t.repos) == RepoConfig or t.repos.url ~= nil then
      fail("SandboxConfig.repos must be a list of repos: repos = { RepoConfig{...} }")
    end
    check_list("SandboxConfig.repos", t.repos)
    for i, r in ipairs(t.repos) do
      local w = ("SandboxConfig.repos[%d]"):format(i)
      if type(r) ~= "table" and type(r) ~= "string" then
        fail("%s must be a RepoConfig, a table of RepoConfig fields or a url string, not a %s", w, typename(r))
      end
      c.repos[i] = make_repo(r, w)
    end
  end

  -- env
  c.env = {}
  if t.env then
    for k, v in pairs(t.env) do
      if not is_env_name(k) then
        fail("SandboxConfig.env keys must be environment variable names (letters, digits, _), not %s", tostring(k))
      end
      if type(v) ~= "string" then
        fail("SandboxConfig.env.%s must be a string, not a %s (write env = {%s = \"...\"})", k, typename(v), k)
      end
      -- an environment string ends at NUL: the process would see only what comes before it
      if v:find("\0", 1, true) then fail("SandboxConfig.env.%s contains a NUL byte, which no environment variable can hold", k) end
      c.env[k] = v
    end
  end

  -- timeout
  c.timeout = t.timeout or 3600
  if c.timeout <= 0 or c.timeout ~= c.timeout or c.timeout == math.huge then
    fail("SandboxConfig.timeout must be a positive number of seconds, not %s", tostring(c.timeout))
  end

  c.local_files = t.local_files and check_pairs("SandboxConfig.local_files", t.local_files, "sandbox_path") or {}
  c.local_dirs = t.local_dirs and check_pairs("SandboxConfig.local_dirs", t.local_dirs, "sandbox_path") or {}
  c.debug = t.debug or false

  -- backend
  c.backend = t.backend or "local"
  if not BACKENDS[c.backend] then
    if PLANNED_BACKENDS[c.backend] then
      fail('SandboxConfig.backend %s is not available yet; the available backends are: %s (write backend = "local" or leave it out)',
        q(c.backend), table.concat(sorted_keys(BACKENDS), ", "))
    end
    fail('SandboxConfig.backend %s is unknown; the available backends are: %s (write backend = "local" or leave it out)',
      q(c.backend), table.concat(sorted_keys(BACKENDS), ", "))
  end
  -- each remote backend's own fields (seer.backends.<name>.check_config; docs/backends.md)
  for _, b in ipairs({ "ssh", "podman", "docker", "slurm", "kubernetes" }) do
    if c.backend == b then
      if b == "ssh" and t.ssh == nil then
        fail('SandboxConfig{backend = "ssh"} needs ssh = {host = "...", user = "...", identity_file = "..."}')
      end
      if b == "kubernetes" and t.kubernetes == nil then
        fail('SandboxConfig{backend = "kubernetes"} needs kubernetes = {image = "...", namespace = "..."}')
      end
      local v, why = require("seer.backends." .. b).check_config(t[b] or {})
      if not v then fail("SandboxConfig.%s", why) end
      c[b] = v
    elseif t[b] ~= nil then
      fail('SandboxConfig.%s is for backend = "%s"; add backend = "%s" or remove %s%s', b, b, b, b,
        b == "ssh" and " (a Slurm job's nodes are reached with slurm.ssh)" or "")
    end
  end

  -- network
  c.network = t.network or "none"
  if type(c.network) == "table" then
    local n = c.network
    for k in pairs(n) do
      if k ~= "allow" and k ~= "resolve" then
        fail("SandboxConfig.network: unknown field %s; an allow-list is {allow = {\"host.name\", \"*.domain\", \"host:port\"}, resolve = {name = \"ip\"}}", q(tostring(k)))
      end
    end
    local ok, err = pcall(require("seer.egress").matcher, n.allow)
    if not ok then fail("SandboxConfig.%s", tostring(err):gsub("^.-network%.", "network.")) end
    if n.resolve ~= nil then
      if type(n.resolve) ~= "table" then fail("SandboxConfig.network.resolve must map host names to IPv4 addresses") end
      for name, ip in pairs(n.resolve) do
        if type(name) ~= "string" or type(ip) ~= "string" or not ip:match("^%d+%.%d+%.%d+%.%d+$") then
          fail("SandboxConfig.network.resolve must map host names to IPv4 addresses (%s = %s)", q(tostring(name)), q(tostring(ip)))
        end
      end
    end
    c.network = { allow = n.allow, resolve = n.resolve }
  elseif c.network ~= "none" and c.network ~= "host" then
    fail('SandboxConfig.network must be "none" (no network, the default), "host" (the host\'s network) or {allow = {...}} (HTTP(S) to listed hosts only), not %s', q(c.network))
  end

  c.limits = M.parse_limits(t.limits or {}, "SandboxConfig.limits")
  return setmetatable(c, SandboxConfig)
end

function SandboxConfig.__tostring(c)
  local parts = {}
  if c.gpu then parts[#parts + 1] = "gpu = " .. q(c.gpu); parts[#parts + 1] = "gpu_count = " .. c.gpu_count end
  parts[#parts + 1] = "execution_mode = ExecutionMode." .. c.execution_mode:upper()
  if #c.models > 0 then parts[#parts + 1] = "models = " .. show_list(c.models, tostring) end
  if #c.system_packages > 0 then parts[#parts + 1] = "system_packages = " .. show_list(c.system_packages, q) end
  if #c.secrets > 0 then parts[#parts + 1] = "secrets = " .. show_list(c.secrets, q) end
  if #c.repos > 0 then parts[#parts + 1] = "repos = " .. show_list(c.repos, tostring) end
  local keys = sorted_keys(c.env)
  if #keys > 0 then
    local e = {}
    for i, k in ipairs(keys) do e[i] = k .. " = " .. q(c.env[k]) end
    parts[#parts + 1] = "env = {" .. table.concat(e, ", ") .. "}"
  end
  parts[#parts + 1] = "timeout = " .. tostring(c.timeout)
  local function pair(p) return "{" .. q(p[1]) .. ", " .. q(p[2]) .. "}" end
  if #c.local_files > 0 then parts[#parts + 1] = "local_files = " .. show_list(c.local_files, pair) end
  if #c.local_dirs > 0 then parts[#parts + 1] = "local_dirs = " .. show_list(c.local_dirs, pair) end
  if c.debug then parts[#parts + 1] = "debug = true" end
  parts[#parts + 1] = "backend = " .. q(c.backend)
  for _, b in ipairs({ "ssh", "podman", "docker" }) do
    if c[b] then
      local sk, e = sorted_keys(c[b]), {}
      for i, k in ipairs(sk) do e[i] = k .. " = " .. (type(c[b][k]) == "string" and q(c[b][k]) or tostring(c[b][k])) end
      parts[#parts + 1] = b .. " = {" .. table.concat(e, ", ") .. "}"
    end
  end
  if c.kubernetes then
    local sk, e = sorted_keys(c.kubernetes), {}
    for _, k in ipairs(sk) do
      if type(c.kubernetes[k]) ~= "table" then e[#e + 1] = k .. " = " .. (type(c.kubernetes[k]) == "string" and q(c.kubernetes[k]) or tostring(c.kubernetes[k])) end
    end
    parts[#parts + 1] = "kubernetes = {" .. table.concat(e, ", ") .. "}"
  end
  if c.slurm then
    local sk, e = sorted_keys(c.slurm), {}
    for _, k in ipairs(sk) do
      if type(c.slurm[k]) ~= "table" then e[#e + 1] = k .. " = " .. (type(c.slurm[k]) == "string" and q(c.slurm[k]) or tostring(c.slurm[k])) end
    end
    parts[#parts + 1] = "slurm = {" .. table.concat(e, ", ") .. "}"
  end
  parts[#parts + 1] = "network = " .. (type(c.network) == "table" and ("{allow = {" .. table.concat(c.network.allow, ", ") .. "}}") or q(c.network))
  local lk = sorted_keys(c.limits)
  if #lk > 0 then
    local l = {}
    for i, k in ipairs(lk) do l[i] = k .. " = " .. tostring(c.limits[k]) end
    parts[#parts + 1] = "limits = {" .. table.concat(l, ", ") .. "}"
  end
  return "SandboxConfig{" .. table.concat(parts, ", ") .. "}"
end

---A sandbox configuration. Defaults: no GPU, execution_mode NOTEBOOK, timeout 3600,
---backend "local", network "none", empty lists. Model entries may be ModelConfig values,
---plain tables of ModelConfig fields or model id strings; repo entries likewise.
---@param t? {gpu?: string, gpu_count?: integer, execution_mode?: seerenvironment.ExecutionModeValue, models?: (seerenvironment.ModelConfig|table|string)[], system_packages?: string[], secrets?: string[], repos?: (seerenvironment.RepoConfig|table|string)[], env?: table<string, string>, timeout?: number, local_files?: string[][], local_dirs?: string[][], debug?: boolean, backend?: "local", network?: "none"|"host"|{allow: string[], resolve?: table<string, string>}}
---@return seerenvironment.SandboxConfig
M.SandboxConfig = guarded(function(t) return make_sandbox(t or {}) end)

---------------------------------------------------------------------------------------------
-- model paths

---The environment variable that carries a model's path inside a sandbox:
---`model_env_name("google/gemma-2-9b-it")` is "MODEL_GOOGLE_GEMMA_2_9B_IT_PATH".
---@param id string model id
---@return string
function M.model_env_name(id)
  if type(id) ~= "string" or id == "" then
    error(("model_env_name(id): id must be a model id string, not a %s"):format(typename(id)), 2)
  end
  return "MODEL_" .. id:upper():gsub("[/%-]", "_") .. "_PATH"
end

return setmetatable(M, {
  __index = function(_, k)
    if k == "Sandbox" then return require("seer.sandbox").Sandbox end
    if k == "ScopedSandbox" then
      local ok, mod = pcall(require, "seer.scoped")
      if ok then return mod.ScopedSandbox end
      error("ScopedSandbox: seer.scoped failed to load (is the Lua tree complete? SEER_LUA_DIR): " .. tostring(mod), 2)
    end
    error(("seer.environment has no field %s; fields: %s"):format(tostring(k), table.concat(sorted_keys(M), ", ")), 2)
  end,
})
