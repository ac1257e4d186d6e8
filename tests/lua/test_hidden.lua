-- Hidden models (seer.model.load(path, {hidden = true})): the model's id appears nowhere that
-- code running beside it can read. The search itself runs in a fresh seer process
-- (hidden/scan.lua), so this test's own locals cannot be what it finds; a control run without
-- hidden = true must find the leak, so the search is known to work.
local T = require "testing"

local src = seer.script_dir() .. "/../fixtures/models/stories260K"
local scan = seer.script_dir() .. "/hidden/scan.lua"

local function run_scan(hidden)
  local dir = T.tmpdir()
  local secret = "Qx7-secret-org--sneaky-model-" .. tostring(os.time() % 100000)
  local model_dir = dir .. "/models--" .. secret
  assert(os.execute(("mkdir -p '%s' && cp -r '%s'/. '%s'/"):format(model_dir, src, model_dir)) == 0)
  -- tokenizer_config.json carries the id like real checkpoints do (name_or_path)
  local tc = model_dir .. "/tokenizer_config.json"
  local cfg = {}
  local f = io.open(tc, "rb")
  if f then cfg = seer.json.decode(f:read("*a")) f:close() end
  cfg.name_or_path = "org/" .. secret
  seer.write_file(tc, seer.json.encode(cfg))
  local script = scan
  if not hidden then -- mapped, as a hidden model's weights never are, so the maps leak is there to find
    script = dir .. "/scan_plain.lua"
    seer.write_file(script, (seer.read_file(scan):gsub("hidden = true", "hidden = false, weights = 'mapped'")))
  end
  local pf = dir .. "/p"
  seer.write_file(pf, model_dir .. "\n" .. secret .. "\n")
  local bin = require("seer.core.host").realpath(arg[-1]) or arg[-1]
  local p = io.popen(("cd / && '%s' '%s' '%s' 2>&1"):format(bin, script, pf))
  local out = p:read("*a")
  p:close()
  return out
end

T.test("a hidden model's id appears nowhere the kernel-side Lua can read", function()
  local out = run_scan(true)
  T.eq(out, "clean\n")
end)

T.test("control: the same search finds the id of a model that is not hidden", function()
  local out = run_scan(false)
  T.contains(out, "/proc/self/maps")
  T.contains(out, "model.id")
end)

T.test("hidden load errors do not name the directory", function()
  local dir = T.tmpdir() .. "/models--org--Zsecret-thing"
  os.execute(("mkdir -p '%s' && echo '{\"model_type\": \"llama\"}' > '%s/config.json'"):format(dir, dir))
  local msg = T.raises(function() seer.model.load(dir, { hidden = true }) end)
  T.ok(not msg:find("Zsecret", 1, true), msg)
  local msg2 = T.raises(function() seer.model.load("org/Zsecret-thing2", { hidden = true }) end)
  T.ok(not msg2:find("Zsecret", 1, true), msg2)
end)

---------------------------------------------------------------------------------------------
-- What the sandbox does for hidden models on the host (lua/seer/sandbox.lua): the fragment
-- matcher, which fragments name a model, and the staged copy (test_attack_hidden.lua runs the
-- whole thing in real sandboxes).
local S = require "seer.sandbox"
local sbc = require "seer.core.sandbox"
local env = require "seer.environment"

T.test("find_fragment compares letters and digits only, case-folded, \\u escapes decoded in JSON", function()
  local a, b, i = sbc.find_fragment("path /x/Org--Secret_Model/y", { "nope1", "orgsecretmodel" })
  T.eq({ a, b, i }, { 9, 25, 2 })
  T.eq(("path /x/Org--Secret_Model/y"):sub(a, b), "Org--Secret_Model")
  T.eq(sbc.find_fragment("ORG SECRET model", { "orgsecretmodel" }), 1)
  -- in JSON mode an escaped letter is the letter
  local text = [["name": "\u004frg-secret-model"]]
  a, b = sbc.find_fragment(text, { "orgsecretmodel" }, 1, true)
  T.eq(text:sub(a, b), [[\u004frg-secret-model]])
  T.eq(sbc.find_fragment(text, { "orgsecretmodel" }), nil) -- not in plain mode
  T.eq(sbc.find_fragment("org secret", { "orgsecretmodel" }), nil)
  T.eq({ sbc.find_fragment("ab ab", { "ab" }, 2) }, { 4, 5, 1 })
  T.eq(sbc.find_fragment("", { "ab" }), nil)
end)

T.test("hidden_fragments: the id, the host path's own parts and the names the files give; not generic parts", function()
  local dir = T.tmpdir() .. "/data/acme-private/sneaky-llama-7b"
  os.execute(("mkdir -p '%s'"):format(dir))
  seer.write_file(dir .. "/config.json", seer.json.encode{ model_type = "llama", architectures = { "LlamaForCausalLM" },
    _name_or_path = "upstream-org/upstream-base" })
  seer.write_file(dir .. "/README.md", "---\nlicense: mit\nbase_model:\n- first-base-org/first-base\n---\n# card\n")
  local frags = S.hidden_fragments({ { name = "hub-org/hub-name", host = dir,
    files = { { name = "config.json", real = dir .. "/config.json" },
              { name = "model.safetensors", real = "/cache/models--x--y/blobs/abc123def456" } } } }, { "/tmp" })
  local set = {}
  for _, f in ipairs(frags) do set[f] = true end
  for _, want in ipairs({ "huborg", "hubname", "modelshuborghubname", "acmeprivate", "sneakyllama7b", "upstreamorg",
                          "upstreambase", "firstbaseorg", "firstbase", "abc123def456", "modelsxy" }) do
    T.ok(set[want], "missing fragment " .. want .. " in " .. table.concat(frags, ","))
  end
  for _, not_want in ipairs({ "data", "models", "blobs", "cache", "llama", "configjson", "modelsafetensors", "tmp" }) do
    T.ok(not set[not_want], "a generic part is a fragment: " .. not_want)
  end
  -- a fragment inside the architecture's names is no secret (and cleaning it would break the config)
  local q = T.tmpdir() .. "/qwen-copy"
  os.execute(("mkdir -p '%s'"):format(q))
  seer.write_file(q .. "/config.json", seer.json.encode{ model_type = "qwen2", architectures = { "Qwen2ForCausalLM" } })
  local qf = S.hidden_fragments({ { name = "Qwen/Qwen2.5-7B-Instruct", host = q, files = {} } }, { "/tmp" })
  local qs = table.concat(qf, ",")
  T.ok(not qs:find("^qwen,") and not qs:find(",qwen,") and not qs:find(",qwen$"), qs)
  T.ok(qs:find("qwen257binstruct", 1, true), qs)
end)

-- A fake sandbox with just what _stage_hidden uses.
local function stager(state)
  local s = S.Sandbox(env.SandboxConfig{})
  s.state_dir, s.stage_dirs = state, {}
  return s
end

T.test("staging: shards named after the model are renamed with their index, names cleaned, metadata cleaned, the model unchanged", function()
  local tensor = require "seer.tensor"
  local root = T.tmpdir()
  local dir = root .. "/qz8-org/qz8-secret-net"
  os.execute(("mkdir -p '%s' && cp '%s'/*.json '%s'/ && cp '%s/tokenizer.model' '%s/LICENSE' '%s/'"):format(dir, src, dir, src, src, dir))
  local w = tensor.load(src .. "/model.safetensors", { copy = true })
  local names = {}
  for k in pairs(w) do names[#names + 1] = k end
  table.sort(names)
  local a, b, map = {}, {}, {}
  for i, k in ipairs(names) do
    local file = (i <= #names / 2 and "qz8-secret-net-00001-of-00002.safetensors" or "qz8-secret-net-00002-of-00002.safetensors")
    if i <= #names / 2 then a[k] = w[k] else b[k] = w[k] end
    map[k] = file
  end
  tensor.save(dir .. "/qz8-secret-net-00001-of-00002.safetensors", a, { format = "pt", source = "qz8-org/qz8-secret-net" })
  tensor.save(dir .. "/qz8-secret-net-00002-of-00002.safetensors", b, { format = "pt" })
  seer.write_file(dir .. "/model.safetensors.index.json", seer.json.encode{ metadata = { total_size = 1 }, weight_map = map })
  seer.write_file(dir .. "/chat_template.jinja", "{# for QZ8-ORG/qz8-secret-net #}{{ messages[0].content }}")
  local frags = S.hidden_fragments({ { name = dir, host = dir, files = {} } }, { root })
  local staged, report = stager(root .. "/state"):_stage_hidden(dir, frags)
  local listing = {}
  for _, e in ipairs(sbc.listdir(staged)) do listing[#listing + 1] = e.name end
  local all = table.concat(listing, " ")
  T.ok(not all:find("qz8", 1, true), all)
  T.ok(not all:find("LICENSE", 1, true) and not all:find("tokenizer.model", 1, true), all)
  T.contains(all, "<hidden>-00001-of-00002.safetensors")
  for _, e in ipairs(sbc.listdir(staged)) do
    local text = seer.read_file(staged .. "/" .. e.name)
    T.ok(not text:lower():find("qz8", 1, true), e.name .. " still names the model")
  end
  T.eq(report.left_out, 2)
  -- the staged model is the same model
  local m0 = seer.model.load(src)
  local m1 = seer.model.load(staged, { hidden = true })
  local ids = m0.tokenizer:encode("Once upon a time")
  T.ok((m0:forward(ids) - m1:forward(ids)):abs():max() == 0, "the staged model computes something else")
  T.eq(m1.tokenizer.chat_template, "{# for <hidden>/<hidden> #}{{ messages[0].content }}")
end)

-- The files of a model folder are hostile (docs/security.md): staging decodes a safetensors
-- header once (it was decoded twice, both trees alive, when the header named the model), and
-- every decode counts the values first, so millions of tiny values ("[],[],...", some 40 bytes
-- of memory per byte of text once decoded) are refused at the cost of reading the text. Run in
-- a fresh seer process, whose peak memory (VmHWM) is this test's alone.
local function stage_in_child(dir, root)
  local script = T.tmpdir() .. "/stage.lua"
  seer.write_file(script, ([[
local S, env = require "seer.sandbox", require "seer.environment"
local s = S.Sandbox(env.SandboxConfig{})
s.state_dir, s.stage_dirs = %q, {}
local frags = S.hidden_fragments({ { name = %q, host = %q, files = {} } }, { %q })
print(pcall(s._stage_hidden, s, %q, frags))
io.write(("peak_kib %%d\n"):format(tonumber(seer.read_file("/proc/self/status"):match("VmHWM:%%s*(%%d+)"))))
]]):format(root .. "/state", dir, dir, root, dir))
  local t0 = seer.now()
  local p = io.popen(("'%s' '%s' 2>&1"):format(arg[-1], script))
  local out = p:read("*a")
  p:close()
  return out, tonumber(out:match("peak_kib (%d+)") or "0") / 1024, seer.now() - t0
end

local function empties(n) return "[" .. string.rep("[],", n - 1) .. "[]]" end

T.test("staging: a safetensors header of 5 million tiny values is refused, naming the file, count and limit, in bounded memory", function()
  local root = T.tmpdir()
  local dir = root .. "/qz9-org/qz9-secret-net"
  os.execute(("mkdir -p '%s' && cp '%s'/*.json '%s'/"):format(dir, src, dir))
  local h = '{"__metadata__":{"format":"pt"},"junk":' .. empties(5000000) .. "}"
  local b = {}
  for i = 0, 7 do b[#b + 1] = string.char(math.floor(#h / 256 ^ i) % 256) end
  seer.write_file(dir .. "/model.safetensors", table.concat(b) .. h)
  local out, peak, secs = stage_in_child(dir, root)
  print(("    a 15 MiB header of 5M values: refused in %.2f s, child peak %.0f MiB"):format(secs, peak))
  T.contains(out, "false\tthe hidden model's model.safetensors: its safetensors header: json.decode: the text holds 5000007 "
    .. "values, more than max_values = 4000000")
  -- decoded, the 5 million values took 600+ MiB; refused, the process holds the header twice
  T.ok(peak > 0 and peak < 150, ("the child peaked at %.0f MiB"):format(peak))
end)

T.test("staging: a config that names the model and holds 1.5 million values is refused before it is decoded", function()
  local root = T.tmpdir()
  local dir = root .. "/qz9-org/qz9-secret-net"
  os.execute(("mkdir -p '%s' && cp '%s'/*.json '%s'/model.safetensors '%s'/"):format(dir, src, src, dir))
  seer.write_file(dir .. "/tokenizer_config.json", '{"name_or_path":"qz9-org/qz9-secret-net","junk":' .. empties(1500000) .. "}")
  local out, peak, secs = stage_in_child(dir, root)
  print(("    a 4.3 MiB tokenizer_config.json of 1.5M values: refused in %.2f s, child peak %.0f MiB"):format(secs, peak))
  T.contains(out, "false\tthe hidden model's tokenizer_config.json: json.decode: the text holds 1500005 values, more than "
    .. "max_values = 1000000")
  T.ok(peak > 0 and peak < 100, ("the child peaked at %.0f MiB"):format(peak))
end)

-- A ScopedSandbox's RPC server runs inside: it was configured with every model's real id (on its
-- command line, as MODEL_<ID>_PATH, and from list_configured_models()), so code inside read a
-- hidden model's id as soon as serve() ran. Hidden models are now "<hidden>" there.
T.test("a scoped sandbox serving a hidden model: the RPC server inside never sees its id; an interface naming it is refused", function()
  local env = require "seer.environment"
  local dir = T.tmpdir()
  local secret = "qz7-acme-lab-" .. tostring(os.time() % 100000)
  local mp = dir .. "/" .. secret .. "/wv3-sneaky-llm"
  assert(os.execute(("mkdir -p '%s' && cp -r '%s'/. '%s'/"):format(mp, src, mp)) == 0)
  local iface = dir .. "/iface.lua"
  seer.write_file(iface, [[
function expose.configured() local t = {} for k, v in pairs(list_configured_models()) do t[#t + 1] = k .. "=" .. v end return table.concat(t, ",") end
function expose.path() return get_model_path("<hidden>") end
]])
  local function scan(s)
    local out = s:exec([[for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; tr '\0' '\n' < $p/environ; done 2>/dev/null]])
    if type(out) == "table" then out = out.stdout end
    T.ok(type(out) == "string" and out:find("rpc serve", 1, true), "the scan sees the RPC server's command line")
    return out
  end
  for _, hidden in ipairs({ true, false }) do
    local s = env.ScopedSandbox(env.SandboxConfig{ execution_mode = "cli", models = { env.ModelConfig{ name = mp, hidden = hidden } } })
    s:start{ name = "scoped-hidden-" .. (hidden and "h" or "v") }
    local ok, err = pcall(function()
      local _, srv = s:serve(iface, { expose_as = "library", name = "tools" })
      local conf = srv:call("configured")
      local inside = scan(s)
      if hidden then
        T.ok(conf:match("^<hidden>=/models/m%-[%w]+$"), conf)
        T.ok(srv:call("path"):match("^/models/m%-"), "get_model_path(\"<hidden>\")")
        T.ok(not inside:find(secret, 1, true) and not inside:find("sneaky", 1, true), "the id is readable inside:\n" .. inside)
        T.ok(not inside:find("MODEL_", 1, true), "a MODEL_*_PATH variable inside")
        -- an interface that names the hidden model would put its id inside: refused
        local named = dir .. "/named.lua"
        seer.write_file(named, ('function expose.p() return get_model_path(%q) end\n'):format(mp))
        local msg = T.raises(function() s:serve(named, { name = "named" }) end, "names a hidden model of this sandbox")
        T.ok(not msg:find(secret, 1, true), "the refusal itself names the model")
      else
        -- control: a model that is not hidden is named, so the scan above can find an id
        T.contains(conf, mp)
        T.ok(inside:find(secret, 1, true), "the control scan did not find the visible model's id")
      end
    end)
    s:terminate()
    if not ok then error(err, 0) end
  end
end)
