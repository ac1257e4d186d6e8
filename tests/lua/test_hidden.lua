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
  if not hidden then
    script = dir .. "/scan_plain.lua"
    seer.write_file(script, (seer.read_file(scan):gsub("hidden = true", "hidden = false")))
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
