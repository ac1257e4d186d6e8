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
