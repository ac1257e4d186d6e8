-- seer.environment: SandboxConfig, ModelConfig, RepoConfig and ExecutionMode validation,
-- defaults, printing, and the configs written by the examples in ../shared/examples.
local T = require "testing"
local env = require "seer.environment"

local SC, MC, RC, EM = env.SandboxConfig, env.ModelConfig, env.RepoConfig, env.ExecutionMode

local function raises(fn, text) return T.raises(fn, text, true) end

-- defaults ---------------------------------------------------------------------------------

T.test("SandboxConfig defaults", function()
  local c = SC{}
  T.eq(c.gpu, nil)
  T.eq(c.gpu_count, 0)
  T.eq(c.execution_mode, EM.NOTEBOOK)
  T.eq(c.execution_mode, "notebook")
  T.eq(c.models, {})
  T.eq(c.system_packages, {})
  T.eq(c.secrets, {})
  T.eq(c.repos, {})
  T.eq(c.env, {})
  T.eq(c.timeout, 3600)
  T.eq(c.local_files, {})
  T.eq(c.local_dirs, {})
  T.eq(c.debug, false)
  T.eq(c.backend, "local")
  T.eq(c.network, "none")
  T.eq(tostring(SC()), tostring(c))
  T.eq(SC{ gpu = "H100" }.gpu_count, 1)
  T.eq(SC{ gpu = "H100", gpu_count = 2 }.gpu_count, 2)
end)

T.test("ModelConfig and RepoConfig defaults", function()
  local m = MC{ name = "google/gemma-2-9b-it" }
  T.eq(m.name, "google/gemma-2-9b-it")
  T.eq(m.var_name, "model")
  T.eq(m.hidden, false)
  T.eq(m.is_peft, false)
  T.eq(m.base_model, nil)
  T.eq(m.revision, nil)
  T.eq(MC("google/gemma-2-2b").name, "google/gemma-2-2b")
  local r = RC{ url = "anthropics/circuits" }
  T.eq(r.url, "anthropics/circuits")
  T.eq(r.install, false)
  T.eq(r.dockerfile, nil)
  T.eq(RC("owner/repo").url, "owner/repo")
end)

T.test("ExecutionMode values and strings", function()
  T.eq(EM.NOTEBOOK, "notebook")
  T.eq(EM.CLI, "cli")
  T.eq(SC{ execution_mode = EM.CLI }.execution_mode, "cli")
  T.eq(SC{ execution_mode = "cli" }.execution_mode, "cli")
  T.eq(SC{ execution_mode = "notebook" }.execution_mode, "notebook")
  raises(function() return EM.SCOPED end, "ExecutionMode has no member SCOPED; use ExecutionMode.NOTEBOOK or ExecutionMode.CLI")
  raises(function() SC{ execution_mode = "batch" } end,
    'SandboxConfig.execution_mode must be ExecutionMode.NOTEBOOK or ExecutionMode.CLI (or "notebook"/"cli"), not "batch"')
  raises(function() SC{ execution_mode = 1 } end, "SandboxConfig.execution_mode must be a string, not a number")
end)

-- unknown fields and types -----------------------------------------------------------------

T.test("unknown fields list the valid ones", function()
  raises(function() SC{ gpus = "H100" } end,
    "SandboxConfig: unknown field gpus; valid fields: backend, debug, docker, env, execution_mode, gpu, gpu_count, kubernetes, limits, local_dirs, local_files, models, network, podman, repos, secrets, slurm, ssh, system_packages, timeout")
  raises(function() MC{ name = "x", dtype = "bf16" } end,
    "ModelConfig: dtype is not a ModelConfig field (model loading is handled by the sandbox); valid fields: base_model, hidden, is_peft, name, precision, revision, var_name")
  raises(function() MC{ name = "x", varname = "m" } end,
    "ModelConfig: unknown field varname; valid fields: base_model, hidden, is_peft, name, precision, revision, var_name")
  raises(function() RC{ url = "a/b", branch = "main" } end,
    "RepoConfig: unknown field branch; valid fields: dockerfile, install, url")
  raises(function() SC{ python_packages = { "torch" } } end,
    "SandboxConfig: python_packages is not a field: seer sandboxes run Lua, not Python")
  raises(function() SC{ models = { { name = "x", quantization = "4bit" } } } end,
    "SandboxConfig.models[1]: quantization is not a ModelConfig field")
end)

T.test("wrong types name the field and the expected type", function()
  raises(function() SC{ gpu = true } end, "SandboxConfig.gpu must be a string, not a boolean")
  raises(function() SC{ timeout = "1h" } end, "SandboxConfig.timeout must be a number, not a string")
  raises(function() SC{ debug = 1 } end, "SandboxConfig.debug must be a boolean, not a number")
  raises(function() SC{ models = "google/gemma-2-9b" } end, "SandboxConfig.models must be a table, not a string")
  raises(function() SC{ env = { A = 1 } } end, 'SandboxConfig.env.A must be a string, not a number (write env = {A = "..."})')
  raises(function() SC{ env = { A = "x\0y" } } end, "SandboxConfig.env.A contains a NUL byte")
  raises(function() SC{ env = { ["1A"] = "x" } } end,
    "SandboxConfig.env keys must be environment variable names (letters, digits, _), not 1A")
  raises(function() MC{ name = "x", hidden = "yes" } end, "ModelConfig.hidden must be a boolean, not a string")
  raises(function() MC{ name = 7 } end, "ModelConfig.name must be a string, not a number")
  -- the reference's shape: install is a shell command
  T.eq(RC{ url = "a/b", install = "pip install -e ." }.install, "pip install -e .")
  T.eq(tostring(RC{ url = "a/b", install = "make" }), 'RepoConfig{url = "a/b", install = "make"}')
  raises(function() RC{ url = "a/b", install = "  " } end, "RepoConfig.install must be a shell command")
  raises(function() RC{ url = "a/b", install = 1 } end, "RepoConfig.install must be a boolean or string, not a number")
  raises(function() SC{ models = { 42 } } end,
    "SandboxConfig.models[1] must be a ModelConfig, a table of ModelConfig fields or a model id string, not a number")
  raises(function() SC{ repos = { true } } end,
    "SandboxConfig.repos[1] must be a RepoConfig, a table of RepoConfig fields or a url string, not a boolean")
  raises(function() SC("H100") end, "SandboxConfig takes one table of fields (SandboxConfig{...}), not a string")
  raises(function() MC{} end, 'ModelConfig needs a name: ModelConfig{name = "google/gemma-2-9b-it"}')
  raises(function() RC{} end, 'RepoConfig needs a url: RepoConfig{url = "owner/repo"} or a full git URL')
end)

T.test("errors point at the caller's line", function()
  local line = debug.getinfo(1, "l").currentline + 1
  local ok, err = pcall(function() SC{ gpu = 1 } end)
  T.eq(ok, false)
  T.contains(err, "test_environment.lua:" .. line .. ": SandboxConfig.gpu must be a string")
end)

-- models -----------------------------------------------------------------------------------

T.test("PEFT adapter needs base_model, base_model needs is_peft", function()
  raises(function() MC{ name = "user/adapter", is_peft = true } end,
    'ModelConfig "user/adapter" is a PEFT adapter (is_peft = true): add base_model = "<base model id>"')
  raises(function() MC{ name = "user/adapter", is_peft = true, hidden = true } end,
    'ModelConfig <hidden> is a PEFT adapter (is_peft = true): add base_model = "<base model id>"')
  raises(function() SC{ models = { { name = "user/adapter", is_peft = true } } } end,
    'SandboxConfig.models[1] "user/adapter" is a PEFT adapter (is_peft = true): add base_model = "<base model id>"')
  raises(function() MC{ name = "m", base_model = "b" } end,
    "ModelConfig: base_model is only for PEFT adapters; add is_peft = true or remove base_model")
  local m = MC{ name = "user/adapter", is_peft = true, base_model = "google/gemma-2-9b-it", revision = "v2" }
  T.eq(m.base_model, "google/gemma-2-9b-it")
  T.eq(m.revision, "v2")
  T.eq(m.precision, nil)
  T.eq(MC{ name = "m", precision = "fast" }.precision, "fast")
  T.eq(tostring(MC{ name = "m", precision = "fast" }), 'ModelConfig{name = "m", var_name = "model", precision = "fast"}')
  raises(function() MC{ name = "m", precision = "bf16" } end,
    'ModelConfig.precision "bf16" is not known; use "exact" (the default) or "fast" (bf16 weights meet activations rounded to bf16)')
  raises(function() MC{ name = "m", precision = true } end, "ModelConfig.precision")
end)

T.test("var_name must be a Lua identifier and not a keyword", function()
  raises(function() MC{ name = "m", var_name = "model-a" } end,
    'ModelConfig.var_name "model-a" is not a Lua identifier (letters, digits and _, not starting with a digit); e.g. var_name = "model_a"')
  raises(function() MC{ name = "m", var_name = "2model" } end, 'ModelConfig.var_name "2model" is not a Lua identifier')
  raises(function() MC{ name = "m", var_name = "" } end, 'ModelConfig.var_name "" is not a Lua identifier')
  raises(function() MC{ name = "m", var_name = "end" } end,
    'ModelConfig.var_name "end" is a Lua keyword; choose another name, e.g. var_name = "end_model"')
  raises(function() MC{ name = "m", var_name = "goto" } end, 'ModelConfig.var_name "goto" is a Lua keyword')
  T.eq(MC{ name = "m", var_name = "_m2" }.var_name, "_m2")
end)

T.test("models: duplicates and tokenizer names", function()
  raises(function() SC{ models = { "a/x", "b/y" } } end,
    'SandboxConfig.models[1] and models[2] both use var_name = "model"; give each model its own var_name (e.g. var_name = "model_b")')
  raises(function() SC{ models = { MC{ name = "a", var_name = "g" }, { name = "b", var_name = "g" } } } end,
    'SandboxConfig.models[1] and models[2] both use var_name = "g"')
  raises(function() SC{ models = { "a/x", { name = "b/y", var_name = "tokenizer" } } } end,
    'SandboxConfig.models[2] uses var_name = "tokenizer", which is the tokenizer variable of models[1]; choose another var_name')
  raises(function() SC{ models = MC{ name = "a" } } end,
    "SandboxConfig.models must be a list of models: models = { ModelConfig{...} }")
  raises(function() SC{ models = { "a", x = "b" } } end, "SandboxConfig.models must be a list ({a, b, ...}), but it has the key x")
  local c = SC{ models = { "a/x", { name = "b/y", var_name = "b" }, MC{ name = "c/z", var_name = "c" } } }
  T.eq(#c.models, 3)
  for i, m in ipairs(c.models) do T.eq(getmetatable(m), env.ModelConfigClass, "models[" .. i .. "]") end
  T.eq({ c.models[1].var_name, c.models[2].var_name, c.models[3].var_name }, { "model", "b", "c" })
end)

-- GPU, network, backend --------------------------------------------------------------------

T.test("gpu_count is a positive integer and needs a gpu", function()
  raises(function() SC{ gpu_count = 2 } end,
    'SandboxConfig: gpu_count = 2 needs a gpu; add gpu = "H100" (the GPU type you want) or remove gpu_count')
  raises(function() SC{ gpu = "A100", gpu_count = 0 } end, "SandboxConfig.gpu_count must be a positive integer, not 0")
  raises(function() SC{ gpu = "A100", gpu_count = 1.5 } end, "SandboxConfig.gpu_count must be a positive integer, not 1.5")
  raises(function() SC{ gpu = "A100", gpu_count = -1 } end, "SandboxConfig.gpu_count must be a positive integer, not -1")
  raises(function() SC{ gpu = "" } end, 'SandboxConfig.gpu must name a GPU (e.g. gpu = "H100"); leave it out for no GPU')
end)

T.test("network is none, host or an allow-list", function()
  T.eq(SC{ network = "host" }.network, "host")
  T.eq(SC{ network = "none" }.network, "none")
  T.eq(SC{ network = { allow = { "openrouter.ai", "*.anthropic.com", "h.example:8443" } } }.network.allow[2], "*.anthropic.com")
  raises(function() SC{ network = "bridge" } end,
    'SandboxConfig.network must be "none" (no network, the default), "host" (the host\'s network) or {allow = {...}} (HTTP(S) to listed hosts only), not "bridge"')
  raises(function() SC{ network = true } end, "SandboxConfig.network must be a string or table, not a boolean")
  raises(function() SC{ network = { allow = {} } } end, "network.allow must be a non-empty list of host names")
  raises(function() SC{ network = { allow = { "evil.com/x" } } } end, 'network.allow[1] = "evil.com/x" is not a host name')
  raises(function() SC{ network = { allow = { "a.b" }, resolve = { ["a.b"] = "localhost" } } } end,
    "network.resolve must map host names to IPv4 addresses")
  raises(function() SC{ network = { allw = { "a.b" } } } end, 'SandboxConfig.network: unknown field "allw"')
end)

T.test("backend: local, ssh, slurm, podman, docker, kubernetes; planned ones are not available yet", function()
  T.eq(SC{ backend = "local" }.backend, "local")
  for _, b in ipairs({ "modal" }) do
    raises(function() SC{ backend = b } end,
      ('SandboxConfig.backend "%s" is not available yet; the available backends are: docker, kubernetes, local, podman, slurm, ssh (write backend = "local" or leave it out)'):format(b))
  end
  raises(function() SC{ backend = "lxc" } end,
    'SandboxConfig.backend "lxc" is unknown; the available backends are: docker, kubernetes, local, podman, slurm, ssh (write backend = "local" or leave it out)')
  -- each backend's own fields are checked there (tests/lua/test_backend_*.lua)
  raises(function() SC{ backend = "ssh" } end, 'needs ssh = {host')
  T.eq(SC{ backend = "slurm" }.slurm.queue_timeout, 86400)
  raises(function() SC{ backend = "podman" } end, 'podman.base_image is required')
  raises(function() SC{ backend = "docker" } end, 'docker.base_image is required')
end)

-- secrets, env, files, repos, timeout ------------------------------------------------------

T.test("secrets are environment variable names, never echoed", function()
  T.eq(SC{ secrets = { "HF_TOKEN", "OPENAI_API_KEY" } }.secrets, { "HF_TOKEN", "OPENAI_API_KEY" })
  local msg = raises(function() SC{ secrets = { "HF_TOKEN", "hf-AbCdSeCrEt123" } } end,
    'SandboxConfig.secrets[2] must be the name of an environment variable (e.g. secrets = {"HF_TOKEN"}), not its value; set the value in your environment (export HF_TOKEN=...)')
  T.ok(not msg:find("SeCrEt", 1, true), "the rejected value is not in the message")
  msg = raises(function() SC{ secrets = { "HF_TOKEN=hf_SeCrEt" } } end, "SandboxConfig.secrets[1] must be the name")
  T.ok(not msg:find("SeCrEt", 1, true))
  raises(function() SC{ secrets = { 5 } } end, "SandboxConfig.secrets[1] must be the name of an environment variable")
  raises(function() SC{ secrets = "HF_TOKEN" } end, "SandboxConfig.secrets must be a table, not a string")
end)

T.test("tostring shows secrets by name only and hides hidden model ids", function()
  local old = os.getenv("HF_TOKEN")
  local c = SC{ gpu = "A100", secrets = { "HF_TOKEN" }, env = { CUSTOM = "v" },
    models = { { name = "secret-org/adapter", base_model = "google/gemma-2-9b-it", is_peft = true, hidden = true } } }
  local s = tostring(c)
  T.contains(s, 'secrets = {"HF_TOKEN"}')
  T.ok(not s:find("secret-org", 1, true), "hidden model id printed: " .. s)
  if old and #old > 0 then T.ok(not s:find(old, 1, true), "secret value printed") end
  T.eq(s, 'SandboxConfig{gpu = "A100", gpu_count = 1, execution_mode = ExecutionMode.NOTEBOOK, models = {ModelConfig{name = <hidden>, var_name = "model", hidden = true, is_peft = true, base_model = "google/gemma-2-9b-it"}}, secrets = {"HF_TOKEN"}, env = {CUSTOM = "v"}, timeout = 3600, backend = "local", network = "none"}')
  T.eq(tostring(MC{ name = "a/b", revision = "main" }), 'ModelConfig{name = "a/b", var_name = "model", revision = "main"}')
  T.eq(tostring(RC{ url = "a/b", install = true, dockerfile = "Dockerfile" }), 'RepoConfig{url = "a/b", dockerfile = "Dockerfile", install = true}')
end)

T.test("local_files and local_dirs are {local_path, sandbox_path} lists", function()
  local c = SC{ local_files = { { "data.json", "/workspace/data.json" } },
    local_dirs = { { local_path = "./probes", sandbox_path = "/workspace/probes" } } }
  T.eq(c.local_files, { { "data.json", "/workspace/data.json" } })
  T.eq(c.local_dirs, { { "./probes", "/workspace/probes" } })
  raises(function() SC{ local_files = { "data.json" } } end,
    "SandboxConfig.local_files[1] must be {local_path, sandbox_path} (two non-empty strings)")
  raises(function() SC{ local_dirs = { { "a" } } } end,
    "SandboxConfig.local_dirs[1] must be {local_path, sandbox_path} (two non-empty strings)")
  raises(function() SC{ local_dirs = { { "a", "" } } } end, "SandboxConfig.local_dirs[1] must be {local_path, sandbox_path}")
end)

T.test("repos, system_packages and timeout", function()
  local c = SC{ repos = { RC{ url = "anthropics/circuits", install = true }, { url = "https://example.org/x.git" }, "o/r" },
    system_packages = { "git", "libgomp1" }, timeout = 7200 }
  T.eq(#c.repos, 3)
  T.eq(c.repos[1].install, true)
  T.eq(c.repos[2].url, "https://example.org/x.git")
  T.eq(getmetatable(c.repos[3]), env.RepoConfigClass)
  T.eq(c.system_packages, { "git", "libgomp1" })
  T.eq(c.timeout, 7200)
  raises(function() SC{ repos = RC{ url = "a/b" } } end, "SandboxConfig.repos must be a list of repos: repos = { RepoConfig{...} }")
  raises(function() SC{ repos = { { url = "a/b", pip = true } } } end,
    "SandboxConfig.repos[1]: unknown field pip; valid fields: dockerfile, install, url")
  raises(function() SC{ system_packages = { "git; rm -rf /" } } end,
    'SandboxConfig.system_packages[1] must be a package name string (e.g. "git")')
  raises(function() SC{ timeout = 0 } end, "SandboxConfig.timeout must be a positive number of seconds, not 0")
  raises(function() SC{ timeout = -5 } end, "SandboxConfig.timeout must be a positive number of seconds, not -5")
  raises(function() SC{ timeout = math.huge } end, "SandboxConfig.timeout must be a positive number of seconds")
end)

-- records ----------------------------------------------------------------------------------

T.test("configs are records: no new fields, the input table is not kept", function()
  local input = { gpu = "A100", models = { "a/b" } }
  local c = SC(input)
  raises(function() c.gpu_cont = 2 end, "SandboxConfig is immutable: cannot set gpu_cont; make a new SandboxConfig{...} instead")
  local m = MC{ name = "a" }
  raises(function() m.base_model = "b" end, "ModelConfig is immutable: cannot set base_model")
  input.models[2] = "c/d"
  T.eq(#c.models, 1)
  T.ok(SC(c) == c, "a SandboxConfig passes through")
  T.ok(MC(m) == m, "a ModelConfig passes through")
  -- what create_notebook_session reads: a plain list of tables with name/var_name/...
  local n = 0
  for _, mm in ipairs(c.models) do n = n + 1; T.eq(type(mm), "table"); T.eq(mm.name, "a/b") end
  T.eq(n, 1)
end)

T.test("limits: sizes, counts and what to write instead", function()
  local c = env.SandboxConfig{ limits = { memory = "512M", processes = 64, cpu_seconds = 2.5, open_files = 1024 } }
  T.eq(c.limits, { memory = 512 * 1024 * 1024, processes = 64, cpu_seconds = 2.5, open_files = 1024 })
  T.eq(env.SandboxConfig{ limits = { memory = "8g" } }.limits.memory, 8 * 1024 ^ 3)
  T.eq(env.SandboxConfig{ limits = { memory = 2 ^ 30 } }.limits.memory, 2 ^ 30)
  T.eq(env.SandboxConfig{}.limits, {})
  T.contains(tostring(c), "limits = {cpu_seconds = 2.5, memory = 536870912, open_files = 1024, processes = 64}")
  raises(function() env.SandboxConfig{ limits = { memory = "lots" } } end, 'write e.g. memory = "512M"')
  raises(function() env.SandboxConfig{ limits = { memory = "1M" } } end, "at least 16M")
  raises(function() env.SandboxConfig{ limits = { processes = 2 } } end, "processes must be at least 8")
  raises(function() env.SandboxConfig{ limits = { processes = 1.5 } } end, "processes must be a positive integer")
  raises(function() env.SandboxConfig{ limits = { ram = 1 } } end, "unknown field ram; valid fields: cpu_seconds, disk, memory, open_files, processes, shm, tmp")
end)

T.test("limits: tmp, shm and disk are sizes; tmpfs sizes leave the processes a quarter of memory", function()
  local c = env.SandboxConfig{ limits = { memory = "1G", tmp = "256M", shm = "64M", disk = "2G" } }
  T.eq(c.limits, { memory = 2 ^ 30, tmp = 256 * 2 ^ 20, shm = 64 * 2 ^ 20, disk = 2 * 2 ^ 30 })
  T.eq(env.SandboxConfig{ limits = { disk = 2 ^ 26 } }.limits.disk, 2 ^ 26)
  raises(function() env.SandboxConfig{ limits = { disk = "lots" } } end, 'limits.disk "lots" is not a size; write e.g. disk = "512M"')
  raises(function() env.SandboxConfig{ limits = { disk = "1M" } } end, "limits.disk must be at least 16M")
  raises(function() env.SandboxConfig{ limits = { tmp = 100 } } end, "limits.tmp must be at least 1M")
  -- 700M + the default shm (128M) is more than 75% of 1G
  raises(function() env.SandboxConfig{ limits = { memory = "1G", tmp = "700M" } } end,
    "tmp (700 MiB) + shm (128 MiB) must stay within 75% of memory (1024 MiB)")
  raises(function() env.SandboxConfig{ limits = { memory = "1G", shm = "800M" } } end, "lower tmp/shm or raise memory")
  -- at the limit is fine
  T.eq(env.SandboxConfig{ limits = { memory = "1G", tmp = "640M", shm = "128M" } }.limits.tmp, 640 * 2 ^ 20)
end)

T.test("module: model_env_name, Sandbox", function()
  T.eq(env.model_env_name("google/gemma-2-9b-it"), "MODEL_GOOGLE_GEMMA_2_9B_IT_PATH")
  T.eq(env.model_env_name("bcywinski/gemma-2-9b-it-user-female"), "MODEL_BCYWINSKI_GEMMA_2_9B_IT_USER_FEMALE_PATH")
  T.eq(env.model_env_name("gpt2"), "MODEL_GPT2_PATH")
  raises(function() env.model_env_name(nil) end, "model_env_name(id): id must be a model id string, not a nil")
  T.eq(env.Sandbox, require("seer.sandbox").Sandbox)
  T.eq(type(env.Sandbox.from_snapshot), "function")
  raises(function() env.Sandbox({ gpus = 1 }) end, "SandboxConfig: unknown field gpus")
  raises(function() return env.SandboxConf end, "seer.environment has no field SandboxConf; fields: ")
  T.eq(require("seer").environment, env)
end)

-- the examples' configs (../shared/examples/*/main.lua) ------------------------------------

T.test("examples: sandbox-intro config", function()
  local config = env.SandboxConfig{
    gpu = "A100",
    execution_mode = env.ExecutionMode.NOTEBOOK,
    models = { env.ModelConfig{ name = "google/gemma-2-2b-it" } },
  }
  T.eq(config.gpu, "A100")
  T.eq(config.models[1].var_name, "model")
  T.eq(config.network, "none")
end)

T.test("examples: hidden-preference config", function()
  local config = env.SandboxConfig{
    gpu = "A100",
    execution_mode = env.ExecutionMode.NOTEBOOK,
    models = { env.ModelConfig{
      name = "bcywinski/gemma-2-9b-it-user-female",
      base_model = "google/gemma-2-9b-it",
      is_peft = true,
      hidden = true,
    } },
    secrets = { "HF_TOKEN" },
  }
  T.eq(config.models[1].is_peft, true)
  T.eq(config.models[1].hidden, true)
  T.eq(config.secrets, { "HF_TOKEN" })
  T.ok(not tostring(config):find("bcywinski", 1, true))
end)

T.test("examples: scoped-sandbox-intro config", function()
  local config = env.SandboxConfig{
    gpu = "A100",
    models = { env.ModelConfig{ name = "google/gemma-2-9b" } },
    secrets = { "HF_TOKEN" },
  }
  T.eq(config.execution_mode, "notebook")
  T.eq(config.models[1].name, "google/gemma-2-9b")
end)

T.test("examples: the reference's documented configs", function()
  local c = SC{ gpu = "A100", gpu_count = 2, models = { MC{ name = "meta-llama/Llama-3-70b-hf" } } }
  T.eq(c.gpu_count, 2)
  c = SC{
    gpu = "A100", execution_mode = EM.NOTEBOOK,
    models = { MC{ name = "google/gemma-2-9b-it" } },
    system_packages = { "git" }, secrets = { "HF_TOKEN", "OPENAI_API_KEY" },
    env = { CUSTOM_VAR = "value" }, timeout = 7200,
  }
  T.eq(c.env.CUSTOM_VAR, "value")
  c = SC{ models = { MC{ name = "google/gemma-2-9b-it", var_name = "model_a" }, MC{ name = "meta-llama/Llama-2-7b-hf", var_name = "model_b" } },
    repos = { RC{ url = "anthropics/circuits", install = true } } }
  T.eq(#c.models, 2)
end)
