-- Where a CPU model's weights live (seer.model.load's `weights` option, engine/model/model.c
-- open_shards): read into memory on transparent huge pages by default, or mapped from the files.
-- The checks read the process's own /proc/self/maps and smaps, so they see what the kernel set
-- up, not what seer says it did.
local T = require "testing"
local tensor = require "seer.tensor"

local root = seer.script_dir() .. "/../fixtures/models/stories260K"
local ids = { 1, 403, 407, 261, 119, 35, 288, 87 }

-- The mappings of this process: { {path = string|nil, kb = Size in kB, flags = "rd mr ..."}, ... }
local function mappings()
  local out, cur = {}, nil
  for line in io.lines("/proc/self/smaps") do
    local lo, hi, rest = line:match("^(%x+)%-(%x+) %S+ %S+ %S+ %S+%s*(.*)$")
    if lo then
      cur = { path = rest ~= "" and rest or nil }
      out[#out + 1] = cur
    elseif cur then
      local kb = line:match("^Size:%s+(%d+) kB")
      if kb then cur.kb = tonumber(kb) end
      local fl = line:match("^VmFlags:%s*(.*)$")
      if fl then cur.flags = " " .. fl .. " " end
    end
  end
  return out
end

local function count(pred)
  local n = 0
  for _, m in ipairs(mappings()) do if pred(m) then n = n + 1 end end
  return n
end

local function file_kb(path)
  local f = assert(io.open(path, "rb"))
  local n = f:seek("end")
  f:close()
  return math.ceil(n / 4096) * 4
end

local function copy_model()
  local d = T.tmpdir() .. "/m"
  assert(os.execute(("mkdir -p '%s' && cp '%s'/config.json '%s'/model.safetensors '%s'/"):format(d, root, root, d)) == 0)
  return d
end

T.test("by default a CPU model's weights are read into anonymous memory marked for huge pages", function()
  local d = copy_model()
  local st = d .. "/model.safetensors"
  -- a size of its own (models other tests loaded in this process may be freed at any time)
  local w = tensor.load(st)
  w["pad.unused"] = tensor.zeros(12345)
  tensor.save(st, w)
  local kb = file_kb(st)
  local function huge(m) return not m.path and m.kb == kb and m.flags and m.flags:find(" hg ", 1, true) ~= nil end
  collectgarbage()
  collectgarbage()
  local before = count(huge)
  local m = seer.model.load(d, { tokenizer = false })
  T.eq(m.config.weights, "memory")
  T.eq(count(function(x) return x.path == st end), 0, "the file is not mapped")
  T.eq(count(huge), before + 1, "one anonymous mapping of the file's size, with MADV_HUGEPAGE (VmFlags hg)")
  m = nil
  collectgarbage()
  collectgarbage()
  T.eq(count(huge), before, "freed with the model")
end)

T.test("weights = \"mapped\" maps the file; both give the same logits", function()
  local d = copy_model()
  local st = d .. "/model.safetensors"
  local mapped = seer.model.load(d, { tokenizer = false, weights = "mapped" })
  T.eq(mapped.config.weights, "mapped")
  T.ok(count(function(x) return x.path == st end) >= 1, "the file is mapped")
  local mem = seer.model.load(d, { tokenizer = false, weights = "memory" })
  T.eq(mem.config.weights, "memory")
  T.eq((mapped:forward(ids) - mem:forward(ids)):abs():max(), 0)
end)

T.test("a model read into memory is out of reach of later changes to its files", function()
  local d = copy_model()
  local m = seer.model.load(d, { tokenizer = false })
  local before = m:forward(ids)
  -- A mapped model would take SIGBUS on its next read of a truncated file (the whole process
  -- dies); one read in keeps working and gives the same bits.
  local f = assert(io.open(d .. "/model.safetensors", "wb"))
  f:close()
  T.eq((m:forward(ids) - before):abs():max(), 0)
end)

T.test("SEER_WEIGHTS sets the default; an option given wins; a bad value is named", function()
  local script = T.tmpdir() .. "/w.lua"
  seer.write_file(script, ("local m = seer.model.load(%q, { tokenizer = false }) io.write(m.config.weights, ' ') "
    .. "m = seer.model.load(%q, { tokenizer = false, weights = 'memory' }) io.write(m.config.weights, ' ') "
    .. "m = seer.model.load(%q, { tokenizer = false, hidden = true }) io.write(m.config.weights, '\\n')"):format(root, root, root))
  local function run(v)
    local p = io.popen(("SEER_WEIGHTS=%s '%s' '%s' 2>&1"):format(v, arg[-1], script))
    local out = p:read("*a")
    p:close()
    return out
  end
  T.eq(run("mapped"), "mapped memory memory\n")
  T.eq(run("memory"), "memory memory memory\n")
  T.contains(run("huge"), "SEER_WEIGHTS='huge' is not known; set it to \"memory\" or \"mapped\", or unset it")
end)

T.test("a shard that is a FIFO is refused, not waited on, in both modes", function()
  local d = copy_model()
  assert(os.execute(("mkfifo '%s/shard-2.safetensors'"):format(d)) == 0)
  local all = tensor.load(root .. "/model.safetensors")
  tensor.save(d .. "/shard-1.safetensors", all)
  os.remove(d .. "/model.safetensors")
  local wm = {}
  for name in pairs(all) do wm[name] = "shard-1.safetensors" end
  wm["lm_head.extra"] = "shard-2.safetensors"
  seer.write_file(d .. "/model.safetensors.index.json", seer.json.encode({ weight_map = wm }))
  for _, w in ipairs({ "memory", "mapped" }) do
    T.raises(function() seer.model.load(d, { tokenizer = false, weights = w }) end, "shard-2.safetensors: not a regular file", true)
  end
end)

T.test("weights names its values when given another", function()
  T.raises(function() seer.model.load(root, { tokenizer = false, weights = "huge" }) end,
    "weights 'huge' is not known; use \"memory\"", true)
  T.raises(function() seer.model.load(root, { tokenizer = false, weights = 1 }) end, "weights", true)
end)

-- The default falls back to mapping when the weights would take more than half of what the
-- process's memory cgroup leaves. The child seer runs in a v1 or v2 memory cgroup made for the
-- test with a limit just above what it uses, on a model padded to 33 MiB.
local function make_cgroup(limit_bytes)
  local name = "seer-test-weights-" .. tostring(os.time()) .. "-" .. tostring(math.random(1e6))
  for _, c in ipairs({
    { dir = "/sys/fs/cgroup/memory/" .. name, limit = "memory.limit_in_bytes" },
    { dir = "/sys/fs/cgroup/" .. name, limit = "memory.max" },
  }) do
    if os.execute(("mkdir '%s' 2>/dev/null"):format(c.dir)) == 0 then
      local f = io.open(c.dir .. "/" .. c.limit, "w")
      if f and f:write(tostring(limit_bytes)) and f:close() then return c.dir end
      if f then pcall(f.close, f) end
      os.execute(("rmdir '%s' 2>/dev/null"):format(c.dir))
    end
  end
  return nil
end

T.test("without room for a copy the weights are mapped, and one line says so", function()
  local d = copy_model()
  local w = tensor.load(d .. "/model.safetensors")
  w["pad.unused"] = tensor.zeros(8 * 1024 * 1024) -- 32 MiB the loader never reads
  tensor.save(d .. "/model.safetensors", w)
  -- 56 MiB: room for the seer process (under 10 MiB) and one copy of the 33 MiB of weights, not
  -- for twice them.
  local cg = make_cgroup(56 * 1024 * 1024)
  if not cg then return T.skip("no writable memory cgroup (v1 or v2) to limit a child process in") end
  local script = T.tmpdir() .. "/w.lua"
  seer.write_file(script, ("local m = seer.model.load(%q, { tokenizer = false }) io.write(m.config.weights, '\\n') "
    .. "m = seer.model.load(%q, { tokenizer = false, weights = 'memory' }) io.write(m.config.weights, '\\n')"):format(d, d))
  local p = io.popen(("sh -c 'echo $$ > %s/cgroup.procs && exec \"$0\" \"$1\"' '%s' '%s' 2>&1"):format(cg, arg[-1], script))
  local out = p:read("*a")
  p:close()
  os.execute(("rmdir '%s' 2>/dev/null"):format(cg))
  T.contains(out, "seer: the weights (0.03 GiB) are mapped from their files, not read into memory")
  T.contains(out, "weights = \"memory\" reads them in anyway")
  T.contains(out, "\nmapped\nmemory\n")
end)

---------------------------------------------------------------------------------------------
-- The JSON of a model folder is hostile (docs/security.md): values are counted before cJSON
-- builds a tree (seer_json_count_values), so a file of millions of tiny values ("[],[],...",
-- some 27 bytes of memory per byte of text once parsed) is refused at the cost of reading it.

-- Runs code in a fresh seer process; its output, then its peak memory in MiB (VmHWM) and seconds.
local function child_peak(code)
  local script = T.tmpdir() .. "/child.lua"
  seer.write_file(script, code .. [[

local hwm = tonumber(seer.read_file("/proc/self/status"):match("VmHWM:%s*(%d+)"))
io.write(("\npeak_kib %d\n"):format(hwm))]])
  local t0 = seer.now()
  local p = io.popen(("'%s' '%s' 2>&1"):format(arg[-1], script))
  local out = p:read("*a")
  p:close()
  local secs = seer.now() - t0
  return out, tonumber(out:match("peak_kib (%d+)") or "0") / 1024, secs
end

-- A JSON array text of n empty arrays: 3 bytes a value.
local function empties(n) return "[" .. string.rep("[],", n - 1) .. "[]]" end

T.test("a safetensors header of 5 million tiny values is refused before it is parsed, naming the file, count and limit", function()
  local d = T.tmpdir() .. "/m"
  assert(os.execute(("mkdir -p '%s' && cp '%s'/config.json '%s'/"):format(d, root, d)) == 0)
  local h = '{"__metadata__":{"format":"pt"},"junk":' .. empties(5000000) .. "}"
  local b = {}
  for i = 0, 7 do b[#b + 1] = string.char(math.floor(#h / 256 ^ i) % 256) end
  seer.write_file(d .. "/model.safetensors", table.concat(b) .. h)
  local out, peak, secs = child_peak(([[
local ok, e = pcall(seer.model.load, %q, { tokenizer = false })
print(ok, e)
ok, e = pcall(require("seer.tensor").load, %q)
print(ok, e)]]):format(d, d .. "/model.safetensors"))
  print(("    15 MiB header of 5M values: refused in %.2f s, child peak %.0f MiB"):format(secs, peak))
  local _, n = out:gsub("model%.safetensors: header holds 5000007 JSON values, more than the 4000000 allowed", "")
  T.eq(n, 2, out)
  -- parsed, the 5 million nodes took 400+ MiB; refused, the process holds the file (15 MiB)
  T.ok(peak > 0 and peak < 120, ("the child peaked at %.0f MiB"):format(peak))
end)

T.test("config.json and model.safetensors.index.json of 3 million values are refused before they are parsed", function()
  local d = T.tmpdir() .. "/m"
  assert(os.execute(("mkdir -p '%s' && cp '%s'/config.json '%s'/model.safetensors '%s'/"):format(d, root, root, d)) == 0)
  local good_config = seer.read_file(d .. "/config.json")
  seer.write_file(d .. "/config.json", (good_config:gsub("^%s*{", '{"junk":' .. empties(3000000) .. ",")))
  local out, peak, secs = child_peak(("local ok, e = pcall(seer.model.load, %q, { tokenizer = false }) print(ok, e)"):format(d))
  print(("    9 MiB config.json of 3M values: refused in %.2f s, child peak %.0f MiB"):format(secs, peak))
  T.contains(out, "config.json: holds 3000054 JSON values, more than the 1000000 allowed for a config file")
  T.ok(peak > 0 and peak < 100, ("the child peaked at %.0f MiB"):format(peak))
  -- the index of a sharded model goes through the same reader
  seer.write_file(d .. "/config.json", good_config)
  seer.write_file(d .. "/model.safetensors.index.json", '{"weight_map":{"x":"model.safetensors"},"junk":' .. empties(3000000) .. "}")
  T.raises(function() seer.model.load(d, { tokenizer = false }) end,
    "model.safetensors.index.json: holds 3000007 JSON values, more than the 1000000 allowed for a config file", true)
  os.remove(d .. "/model.safetensors.index.json")
  T.ok(seer.model.load(d, { tokenizer = false }), "the real files load")
end)
