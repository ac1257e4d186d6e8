-- Class 3 of the attack suite (docs/security.md): nothing readable inside a sandbox names a
-- hidden model. The fixtures (hidden/fixtures.lua) plant the secret id everywhere a checkpoint
-- carries it (model card, NOTICE, LICENSE, notes, JSON name fields and free text, a \u-escaped
-- copy, the chat template, the safetensors __metadata__, the host path) in a local folder and in
-- a Hugging Face cache, each with a LoRA adapter. Then:
--   * the scan: inside a real sandbox with a notebook kernel that has the model loaded,
--     hidden/sandbox_scan.lua reads every file, every /proc entry of every process (and their
--     memory) and the environment, for every fragment of the id and of the host paths; for
--     both layouts, with and without the adapter; the same scan with hidden = false must find
--     the id (the scan works);
--   * attempts through the rig (attack.lua), each asserting the id stays unreadable, most with
--     a control on a sandbox where the same models are not hidden.
local T = require "testing"
local A = require "attack"
local F = require "hidden.fixtures"
local env = require "seer.environment"
local json = require "seer.json"
local ffi = require "ffi"
pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite); int unsetenv(const char *name);")

local here = seer.script_dir()
local root = A.root
local ids = F.ids()
local loc = F.local_layout(A.stories, root .. "/local", ids)
local hf_home = root .. "/hfhome"
local cache = F.cache_layout(A.stories, hf_home, ids)
local FRAGS = F.fragments(ids, cache.blobs)
local ORG_NAME, ORG_ADAPTER = ids.org .. "/" .. ids.name, ids.org .. "/" .. ids.adapter

-- the host's hub settings for this file (restored by the last test)
local saved = { HF_HOME = os.getenv("HF_HOME"), HF_HUB_CACHE = os.getenv("HF_HUB_CACHE"), HF_HUB_OFFLINE = os.getenv("HF_HUB_OFFLINE") }
ffi.C.setenv("HF_HOME", hf_home, 1)
ffi.C.unsetenv("HF_HUB_CACHE")
ffi.C.setenv("HF_HUB_OFFLINE", "1", 1)
ffi.C.setenv("SEER_SANDBOX_DIR", root .. "/sb", 1)
ffi.C.setenv("SEER_CACHE_DIR", root .. "/cache", 1)

local function have_bwrap() return os.execute("command -v bwrap >/dev/null 2>&1") == 0 end

local function assert_clean(text, what)
  local hit = F.find(text or "", FRAGS)
  T.ok(not hit, ("%s: the hidden model's id is readable: %s"):format(what, tostring(hit)))
end

local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end

local LAYOUTS = {
  ["local folder"] = function(hidden)
    return { env.ModelConfig{ name = loc.model, hidden = hidden } }
  end,
  ["local folder with an adapter"] = function(hidden)
    return { env.ModelConfig{ name = loc.adapter, is_peft = true, base_model = loc.model, hidden = hidden } }
  end,
  ["HF cache"] = function(hidden)
    return { env.ModelConfig{ name = ORG_NAME, hidden = hidden } }
  end,
  ["HF cache with an adapter"] = function(hidden)
    return { env.ModelConfig{ name = ORG_ADAPTER, is_peft = true, base_model = ORG_NAME, hidden = hidden } }
  end,
}

-- Starts a sandbox with the models and a notebook kernel that loads them, checks the model
-- works in the kernel, runs the scan inside; returns the scan's output and the host-side
-- texts (model_info_text, the notebook, the logs).
local function scan(models, name)
  if not have_bwrap() then T.skip("bubblewrap is not installed (make setup installs it)") end
  local sandbox = env.Sandbox(env.SandboxConfig{ models = models, limits = { memory = "2G", processes = 256 }, timeout = 900 })
    :start{ name = name }
  local ok, res = pcall(function()
    local session = require("seer.execution").create_notebook_session(sandbox, nil,
      { name = name, output_dir = root .. "/outputs/" .. name })
    local r = session:exec([[print(#model:generate("Once upon a time", { max_new_tokens = 4, temperature = 0 }).ids, model.adapter ~= nil)]],
      { raise = false, timeout = 120 })
    local works = r.text or ""
    local code = ("FRAGS_HEX = %q\n"):format(table.concat((function()
      local t = {}
      for i, f in ipairs(FRAGS) do t[i] = hex(f) end
      return t
    end)(), ",")) .. seer.read_file(here .. "/hidden/sandbox_scan.lua")
    local out, er = sandbox:exec_lua(code, { timeout = 600, max_output = 8 * 1048576 })
    local nb = ""
    local f = session.notebook_path and io.open(session.notebook_path, "rb")
    if f then nb = f:read("*a"); f:close() end
    local host = { info = session.model_info_text or "", notebook = nb, mcp = json.encode(session.mcp_config or {}) }
    session:terminate()
    host.logs = sandbox:logs(500)
    return { out = out, exit = er.exit_code, works = works, host = host, is_peft = models[1].is_peft }
  end)
  sandbox:terminate()
  if not ok then error(res, 0) end
  return res
end

local layout_names = { "local folder", "local folder with an adapter", "HF cache", "HF cache with an adapter" }
for _, layout in ipairs(layout_names) do
  T.test("scan: a hidden model (" .. layout .. ") is named by nothing readable in the sandbox", function()
    local r = scan(LAYOUTS[layout](true), "scan")
    -- the model loaded from the staged files and works (with its adapter)
    T.contains(r.works, "4\t" .. tostring(r.is_peft == true), "the hidden model does not work in the kernel")
    T.eq(r.exit, 0, r.out)
    local files = tonumber(r.out:match("scanned (%d+) files"))
    T.ok(files and files > 500, "the scan read too little to mean anything:\n" .. r.out:sub(1, 2000))
    T.ok(not r.out:find("LEAK", 1, true), "leaks inside the sandbox:\n" .. r.out:sub(1, 6000))
    assert_clean(r.host.info, "session.model_info_text")
    assert_clean(r.host.notebook, "the notebook file")
    assert_clean(r.host.mcp, "session.mcp_config")
    assert_clean(r.host.logs, "sandbox:logs()")
  end)
end

T.test("scan control: the same scan finds the id when the models are not hidden", function()
  for _, layout in ipairs({ "local folder with an adapter", "HF cache with an adapter" }) do
    local r = scan(LAYOUTS[layout](false), "scanctl")
    T.contains(r.works, "4\ttrue")
    T.contains(r.out, "LEAK name /models/", layout .. ": the scan misses the mount names")
    T.ok(r.out:find("LEAK proc /proc/%d+/mountinfo") or r.out:find("LEAK proc /proc/self/mountinfo"), layout .. ": the scan misses the mount table")
    T.ok(r.out:find("LEAK file /models/[^\n]*README") or layout:find("HF") and r.out:find("LEAK file /models/"), layout .. ": the scan misses file contents")
    T.ok(r.out:find("LEAK proc /proc/%d+/environ"), layout .. ": the scan misses the environment")
  end
end)

---------------------------------------------------------------------------------------------
-- attempts through the rig: one sandbox with both layouts hidden (the cache's adapter as
-- `model`, the local folder as `model2`), and a control sandbox with the same models visible

local function rig_config(hidden)
  return { models = {
    env.ModelConfig{ name = ORG_ADAPTER, is_peft = true, base_model = ORG_NAME, hidden = hidden },
    env.ModelConfig{ name = loc.model, var_name = "model2", hidden = hidden },
  -- The control's visible models are mapped from their files (SEER_WEIGHTS), so /proc/*/maps and
  -- map_files have the path to find; read into memory, as visible CPU models are by default, they
  -- would not (a hidden model always is).
  }, env = not hidden and { SEER_WEIGHTS = "mapped" } or nil }
end
local RIG = { name = "hidden", config = rig_config(true) }
local CONTROL = { name = "hidden-control", config = rig_config(false) }

-- What the payloads print is made plain text (control bytes and non-ASCII become "?"): the
-- probes look for ASCII names, and raw memory or binary files in a cell's output are another
-- class's test (a NUL in kernel output is class 5). It also goes whole to /workspace/.probe.out,
-- which the check reads from the host: a notebook cell's output is cut at 20,000 characters.
local PROBE_OUT = "/workspace/.probe.out"
local SAFE_LUA = [[
do
  -- (a kernel keeps what a cell changes: wrap the originals once, reopen the file per run)
  __probe_orig = __probe_orig or { io.write, print }
  local w, p = __probe_orig[1], __probe_orig[2]
  if __probe_log then pcall(__probe_log.close, __probe_log) end
  local log = io.open("/workspace/.probe.out", "wb")
  __probe_log = log
  local function safe(s) return (tostring(s):gsub("[%z\1-\8\11-\31\127-\255]", "?")) end
  io.write = function(...)
    local t = { ... }
    for i = 1, select("#", ...) do t[i] = safe(t[i]) end
    if log then log:write(unpack(t)) log:flush() end
    return w(unpack(t))
  end
  print = function(...)
    local n = select("#", ...)
    local t = { ... }
    for i = 1, n do t[i] = safe(t[i]) end
    if log then log:write(table.concat(t, "\t", 1, n), "\n") log:flush() end
    return p(unpack(t, 1, n))
  end
end
]]
local function safe_sh(sh) return "( " .. sh .. " ) 2>&1 | tr -c '[:print:]\\n\\t' '?' | tee " .. PROBE_OUT end

-- The whole of what a probe printed (the cell's output may be cut; the file is not).
local function probe_output(out, r)
  local path = r.sandbox.workspace_dir .. "/.probe.out"
  local f = io.open(path, "rb")
  if not f then return out end
  local all = f:read("*a")
  f:close()
  os.remove(path)
  return out .. "\n" .. all
end

local count = 0
local function hattack(a)
  count = count + 1
  if a.lua then a.lua = SAFE_LUA .. a.lua end
  if a.sh then a.sh = safe_sh(a.sh) end
  A.attack{
    name = a.name, class = 3, sh = a.sh, lua = a.lua, vectors = a.vectors, timeout = a.timeout or 120, rig = RIG,
    check = function(out, vector, res)
      out = probe_output(out, A.rig(RIG.name, RIG.config))
      assert_clean(out, a.name .. " via " .. vector)
      local expect = a.expect or {}
      if a.expect_on and not a.expect_on[vector] then expect = {} end
      for _, e in ipairs(expect) do
        T.contains(out, e, a.name .. " via " .. vector .. ": the probe did not run as meant")
      end
      if a.check then a.check(out, vector, res) end
    end,
  }
  if a.control ~= false then
    T.test("control: " .. a.name .. " finds the id of models that are not hidden", function()
      local r = A.rig(CONTROL.name, CONTROL.config)
      local v = (a.vectors or {})[1] or (a.lua and "exec/lua" or "exec/sh")
      local fn = ({ ["exec/sh"] = A.exec_sh, ["exec/lua"] = A.exec_lua, ["kernel/lua"] = A.kernel_lua, ["kernel/sh"] = A.kernel_sh })[v]
      local out = probe_output(fn(v:find("sh$") and a.sh or a.lua, a.timeout or 120, r), r)
      T.ok(F.find(out, FRAGS), a.name .. ": the probe (" .. v .. ") does not see the id even when nothing hides it:\n" .. out:sub(1, 1500))
    end)
  end
end

-- Lua helpers the payloads share (prepended to each Lua payload)
local LIB = [[
local sb = require "seer.core.sandbox"
local ffi = require "ffi"
pcall(ffi.cdef, "long readlink(const char *path, char *buf, unsigned long size);")
local function slurp(p, max) local f = io.open(p, "rb") if not f then return "" end local ok, t = pcall(f.read, f, max or 4194304) f:close() return ok and t or "" end
local lbuf = ffi.new("char[4096]")
local function readlink(p) local n = ffi.C.readlink(p, lbuf, 4096) return n > 0 and ffi.string(lbuf, n) or nil end
local function pids() local t = {} for _, e in ipairs(sb.listdir("/proc") or {}) do if e.name:match("^%d+$") then t[#t + 1] = e.name end end return t end
local function files_under(dir, acc) acc = acc or {} for _, e in ipairs(sb.listdir(dir) or {}) do local p = dir .. "/" .. e.name
  if e.type == "dir" then files_under(p, acc) elseif e.type == "file" or e.type == "link" then acc[#acc + 1] = p end end return acc end
]]
local function lua(code) return LIB .. code end

hattack{
  name = "pid 1's command line (sandboxd, bwrap before) and every process's command line",
  sh = [[for p in /proc/[0-9]*; do printf '%s: ' "$p"; tr '\0' ' ' < "$p/cmdline"; echo; done]],
  lua = lua [[for _, p in ipairs(pids()) do print(p, (slurp("/proc/" .. p .. "/cmdline"):gsub("%z", " "))) end]],
  expect = { "/opt/seer/bin/seer sandboxd --connection-file" },
  control = false, -- bwrap's options go through --args for every sandbox, hidden models or not
  check = function(out) T.ok(not out:find("--ro-bind", 1, true), "bwrap's mount options are on its command line:\n" .. out) end,
}

T.test("control: pid 1's command line shows the mounts' host paths when bwrap gets its options on the command line", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed") end
  -- what seer did before --args: the same probe, in a bubblewrap started the plain way
  local cmd = ("bwrap --unshare-all --unshare-user --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin "
    .. "--symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --ro-bind '%s' /models/m-x -- "
    .. "/bin/sh -c \"tr '\\\\0' ' ' < /proc/1/cmdline\" 2>&1"):format(loc.model)
  local p = io.popen(cmd)
  local out = p:read("*a")
  p:close()
  T.contains(out, "bwrap")
  T.ok(F.find(out, FRAGS), "the probe does not see bwrap's options on its command line:\n" .. out)
end)

hattack{
  name = "the mount table (mountinfo, mounts, mountstats of self and pid 1)",
  sh = [[cat /proc/self/mountinfo /proc/1/mountinfo /proc/self/mounts /proc/self/mountstats /proc/mounts]],
  lua = lua [[for _, p in ipairs({ "self/mountinfo", "1/mountinfo", "self/mounts", "self/mountstats", "mounts" }) do io.write(slurp("/proc/" .. p)) end]],
  expect = { "/models/" },
}

hattack{
  name = "links of every process: fd, map_files, cwd, root, exe",
  sh = [[ls -l /proc/[0-9]*/fd/ /proc/[0-9]*/map_files/ /proc/[0-9]*/cwd /proc/[0-9]*/root /proc/[0-9]*/exe 2>&1]],
  lua = lua [[for _, p in ipairs(pids()) do
    for _, sub in ipairs({ "fd", "map_files" }) do
      for _, e in ipairs(sb.listdir("/proc/" .. p .. "/" .. sub) or {}) do print(p, sub, readlink("/proc/" .. p .. "/" .. sub .. "/" .. e.name)) end
    end
    for _, l in ipairs({ "cwd", "root", "exe" }) do print(p, l, readlink("/proc/" .. p .. "/" .. l)) end
  end]],
  expect = { "/opt/seer/bin/seer" },
}

hattack{
  name = "memory maps, smaps and environment of every process",
  sh = [[env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'; cat /proc/[0-9]*/maps /proc/[0-9]*/smaps 2>/dev/null | grep -v ' kB$']],
  lua = lua [[for _, kv in ipairs(sb.environ()) do print(kv) end
    for _, p in ipairs(pids()) do io.write((slurp("/proc/" .. p .. "/environ"):gsub("%z", "\n")), slurp("/proc/" .. p .. "/maps"),
      (slurp("/proc/" .. p .. "/smaps"):gsub("[^\n]* kB\n", ""))) end]],
  expect = { "/opt/seer/bin/seer", "SEER_SANDBOX_ID=" },
}

hattack{
  name = "every other process's memory (/proc/PID/mem) searched for names and paths",
  vectors = { "exec/lua", "kernel/lua" },
  timeout = 300,
  lua = lua [[
    local me = tostring(require("seer.process").getpid())
    local seen, out = {}, {}
    for _, p in ipairs(pids()) do
      if p ~= me then
        local maps, f = slurp("/proc/" .. p .. "/maps"), io.open("/proc/" .. p .. "/mem", "rb")
        if f then
          for a, b, perm in maps:gmatch("(%x+)%-(%x+) (%S+)") do
            local lo, n = tonumber(a, 16), math.min(tonumber(b, 16) - tonumber(a, 16), 67108864)
            if perm:sub(1, 1) == "r" and f:seek("set", lo) then
              local ok, d = pcall(f.read, f, n)
              if ok and d then
                for s in d:gmatch("[%w%._/%-:]+") do
                  if #s >= 8 and #s < 300 and not seen[s] and (s:find("models", 1, true) or s:find("name_or_path", 1, true)
                     or s:find("huggingface", 1, true) or s:find("snapshots", 1, true) or s:find("base_model", 1, true)) then
                    seen[s] = true
                    out[#out + 1] = p .. ": " .. s
                  end
                end
              end
            end
          end
          f:close()
        end
      end
    end
    print(#out .. " strings")
    print(table.concat(out, "\n"):sub(1, 900000))]],
  -- From exec/lua the kernel's memory (which holds its model's path) is readable: the probe must
  -- see /models/m-. From the kernel itself the only other long-lived process is sandboxd, which
  -- is not dumpable (class 4), so there is nothing to read.
  expect = { "/models/m-" },
  expect_on = { ["exec/lua"] = true },
}

hattack{
  name = "grep -r over /models and every readable tree for id-like strings",
  sh = [[ls -laR /models; grep -r -a -i -o -E '.{0,60}(name_or_path|models--|huggingface|base_model|_commit_hash|model_id|snapshots|license).{0,100}' /models /workspace /tmp /run /var/log /etc /opt 2>/dev/null | head -2000]],
  expect = { "config.json", "model.safetensors" },
}

hattack{
  name = "every file in the model folders, read whole (cards, licenses, notes, JSON, templates)",
  sh = [[find /models -type f | sort; for f in $(find /models -type f ! -name '*.safetensors' ! -name tokenizer.json) $(find /models -name tokenizer.json); do echo "== $f"; cat "$f"; echo; done | head -c 900000]],
  expect = { "tokenizer_config.json", "\"model_type\"" },
}

hattack{
  name = "safetensors headers and their __metadata__",
  lua = lua [[
    for _, p in ipairs(files_under("/models")) do
      if p:match("%.safetensors$") then
        local f = io.open(p, "rb")
        local b = f:read(8)
        local n = 0
        for i = 8, 1, -1 do n = n * 256 + b:byte(i) end
        print(p, n, f:read(n))
        f:close()
        local _, meta = require("seer.tensor").load(p)
        print("metadata", require("seer.json").encode(meta or {}))
      end
    end]],
  expect = { "\"dtype\"", "metadata" },
}

hattack{
  name = "every JSON file decoded (\\u escapes undone, duplicate keys resolved)",
  lua = lua [[
    local json = require "seer.json"
    for _, p in ipairs(files_under("/models")) do
      if p:match("%.json$") then
        local ok, doc = pcall(json.decode, slurp(p, 64 * 1048576))
        if ok and type(doc) == "table" then
          if type(doc.model) == "table" then doc.model.vocab, doc.model.merges = nil, nil end
          print(p, json.encode(doc))
        else print(p, "not JSON", tostring(doc)) end
      end
    end]],
  expect = { "model_type", "adapter_config.json" },
}

hattack{
  name = "the kernel's model and tokenizer objects, every field",
  vectors = { "kernel/lua" },
  lua = [[
    local json = require "seer.json"
    local function dump(name, v)
      local ok, s = pcall(json.encode, v)
      print(name, tostring(v), ok and s or "")
    end
    for _, var in ipairs({ "model", "model2" }) do
      local m = _G[var]
      print(var, tostring(m), m.id, m.path, m.device, m.hidden)
      dump(var .. ".config", m.config)
      dump(var .. "._c:config()", m._c:config())
      dump(var .. ".adapter", m.adapter)
      local t = m.tokenizer
      print(var .. ".tokenizer", tostring(t), t.path, t.chat_template)
      dump(var .. ".tokenizer.config", t.config)
      for k, v in pairs(t) do if type(v) == "string" then print("tokenizer." .. k, v) end end
      for k, v in pairs(m) do if type(v) == "string" then print(var .. "." .. k, v) end end
    end
    print(tostring(tokenizer), tostring(model2_tokenizer))]],
  expect = { "num_hidden_layers", "<hidden>" },
}

hattack{
  name = "the whole Lua heap of the kernel (registry, globals, package.loaded, upvalues, metatables)",
  vectors = { "kernel/lua" },
  lua = [[
    local seen, strings = {}, {}
    local function walk(v, depth)
      local t = type(v)
      if t == "string" then
        if #v >= 4 and #v <= 4096 and not seen[v] then seen[v] = true strings[#strings + 1] = v end
        return
      end
      if (t ~= "table" and t ~= "function" and t ~= "userdata" and t ~= "thread") or seen[v] or depth > 80 then return end
      seen[v] = true
      if t == "table" then
        for k, x in next, v do walk(k, depth + 1) walk(x, depth + 1) end
      elseif t == "function" then
        for i = 1, 255 do local n, x = debug.getupvalue(v, i) if not n then break end walk(x, depth + 1) end
        walk(debug.getfenv(v), depth + 1)
        local info = debug.getinfo(v, "S")
        if info then walk(info.source, depth + 1) end
      elseif t == "userdata" then
        walk(debug.getfenv(v), depth + 1)
      end
      walk(debug.getmetatable(v), depth + 1)
    end
    walk(debug.getregistry(), 0) walk(_G, 0) walk(getfenv(1), 0) walk(package.loaded, 0)
    for level = 1, 20 do
      local info = debug.getinfo(level, "f")
      if not info then break end
      walk(info.func, 0)
      for i = 1, 200 do local n, v = debug.getlocal(level, i) if not n then break end walk(v, 0) end
    end
    local out = table.concat(strings, "\n")
    print(#strings .. " strings")
    print(out:sub(1, 900000))]],
  expect = { "strings", "num_hidden_layers" },
}

hattack{
  name = "error messages of bad loads (a missing file, a file, a wrong dtype, a wrong adapter, a bad tokenizer)",
  lua = lua [[
    local M, Tk = require "seer.model", require "seer.tokenizer"
    for _, e in ipairs(sb.listdir("/models") or {}) do
      local d = "/models/" .. e.name
      for _, try in ipairs({
        function() return M.load(d .. "/nope") end,
        function() return M.load(d .. "/config.json") end,
        function() return M.load(d, { dtype = "bf16" }) end,
        function() return M.load(d, { hidden = true, dtype = "bf16" }) end,
        function() return Tk.load(d .. "/nope") end,
        function() local m = M.load(d) return m:load_adapter(d) end,
        function() local m = M.load(d) return m:forward({ 99999 }) end,
      }) do
        local ok, err = pcall(try)
        print(d, ok, tostring(err))
      end
    end]],
  expect = { "/models/m-" },
}

hattack{
  name = "the hidden model loaded again without hidden = true, and its adapter",
  lua = lua [[
    local M = require "seer.model"
    local json = require "seer.json"
    for _, e in ipairs(sb.listdir("/models") or {}) do
      local d = "/models/" .. e.name
      local ok, m = pcall(M.load, d)
      if ok then
        print(d, tostring(m), m.id, m.path, json.encode(m.config))
        if m.tokenizer then print(json.encode(m.tokenizer.config), m.tokenizer.chat_template) end
        for _, a in ipairs(sb.listdir("/models") or {}) do
          local ok2, err = pcall(m.load_adapter, m, "/models/" .. a.name)
          print("adapter", a.name, ok2, tostring(err), json.encode(m.adapter or {}))
        end
      else
        print(d, "not a model:", tostring(m))
      end
    end]],
  expect = { "\"model_type\":\"llama\"", "adapter" },
}

hattack{
  name = "the chat template, raw and rendered",
  vectors = { "kernel/lua" },
  lua = [[
    for _, t in ipairs({ tokenizer, model2_tokenizer }) do
      print(t.chat_template)
      print(t:apply_chat_template({ { role = "user", content = "hello there" } }, { add_generation_prompt = false, tokenize = false }))
    end]],
  expect = { "hello there", "{%" },
}

hattack{
  name = "the sandbox's own logs and what the kernel's services wrote",
  sh = [[ls -la /var/log/seer; cat /var/log/seer/* 2>/dev/null | tail -c 400000; cat /run/seer/*.json 2>/dev/null]],
  expect = { "total" },
  control = false, -- no log names a model, hidden or not
  check = function()
    local r = A.rig(RIG.name, RIG.config)
    assert_clean(r.sandbox:logs(1000), "sandbox:logs()")
    for _, e in ipairs(require("seer.core.sandbox").listdir(r.sandbox.log_dir) or {}) do
      local svc = e.name:match("^(.*)%.log$")
      if svc then assert_clean(r.sandbox:logs(1000, svc), "sandbox:logs(n, " .. svc .. ")") end
    end
  end,
}

hattack{
  name = "status, stat, comm, cgroup, limits, sched and task files of every process",
  sh = [[for p in /proc/[0-9]* /proc/self; do cat $p/status $p/stat $p/comm $p/cgroup $p/limits $p/sched $p/wchan $p/personality $p/task/*/comm $p/task/*/stat 2>/dev/null; done]],
  expect = { "Uid:" },
  control = false, -- none of these name a model, hidden or not
}

hattack{
  name = "notebook files, the session's description and the MCP config, inside and on the host",
  vectors = { "kernel/lua", "kernel/sh" },
  lua = [[print(io.popen("find / -xdev -name '*.ipynb' 2>/dev/null"):read("*a")) print("cells ran")]],
  sh = [[find / -name '*.ipynb' -not -path '/proc/*' 2>/dev/null; echo cells ran]],
  expect = { "cells ran" },
  control = false, -- the loading cells stay out of the notebook for visible models too
  check = function()
    local r = A.rig(RIG.name, RIG.config)
    local f = io.open(r.session.notebook_path, "rb")
    T.ok(f, "no notebook at " .. tostring(r.session.notebook_path))
    local nb = f:read("*a")
    f:close()
    T.contains(nb, "cells ran")
    assert_clean(nb, "the notebook file")
    assert_clean(r.session.model_info_text, "session.model_info_text")
    T.contains(r.session.model_info_text, "<hidden>")
    assert_clean(json.encode(r.session.mcp_config), "session.mcp_config")
  end,
}

T.test("class 3 has at least 12 distinct attempts", function()
  T.ok(count >= 12, "only " .. count .. " attempts")
end)

---------------------------------------------------------------------------------------------
-- the staging itself

T.test("staging: a hidden model's mount is one opaque directory of hard links and cleaned copies, removed at terminate", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed") end
  local blob = require("seer.core.host").realpath(cache.model_snapshot .. "/tokenizer.json")
  local function links() return tonumber(io.popen("stat -c %h '" .. blob .. "'"):read("*l")) end
  local before = links()
  local s = env.Sandbox(env.SandboxConfig{ models = LAYOUTS["HF cache with an adapter"](true) }):start{ name = "stage" }
  local dirs = {}
  local out = s:exec("grep ' /models/' /proc/self/mountinfo | awk '{print $4, $5}'; ls /models/*")
  for src in out:gmatch("(%S+) /models/m%-%x+\n") do dirs[#dirs + 1] = src end
  T.eq(#dirs, 2, out) -- one mount per model (the adapter and its base)
  local listing = out:match("\n(/models/.*)$") or out
  T.ok(not out:find("README", 1, true) and not out:find("NOTICE", 1, true) and not out:find("LICENSE", 1, true)
    and not out:find("notes.txt", 1, true) and not out:find("tokenizer.model", 1, true) and not out:find("original", 1, true), listing)
  T.contains(out, "adapter_model.safetensors")
  T.contains(out, "model.safetensors")
  -- the staged files are where the sandbox's state is; the host paths of the sources are not named
  for _, d in ipairs(dirs) do
    T.ok(d:sub(1, #s.state_dir) == s.state_dir, d)
    assert_clean(d, "the staging directory's path")
  end
  -- a hard link, not a copy: the staged tokenizer.json is the cache's blob (other sandboxes
  -- of this file may hold links of their own)
  T.eq(links(), before + 1, "the blob should have one more link while the sandbox runs")
  s:terminate()
  T.eq(links(), before, "the staged link outlived the sandbox")
end)

T.test("staging: on another file system than the state, it goes where a hard link works and is removed, also when the owner is killed", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed") end
  local shm = "/dev/shm"
  if not require("seer.core.sandbox").listdir(shm) then T.skip("no /dev/shm to put the state on another file system") end
  local state = shm .. "/seer-hidden-test-" .. tostring(os.time())
  ffi.C.setenv("SEER_SANDBOX_DIR", state, 1)
  local ok, err = pcall(function()
    -- remains of a sandbox killed with its keeper (-9 both): swept by the next start
    local stale = root .. "/cache/hidden-stage/OLDxyz"
    os.execute(("mkdir -p '%s' && echo x > '%s/config.json' && echo '%s/gone-sandbox' > '%s.owner' && touch -d '2 hours ago' '%s.owner'")
      :format(stale, stale, state, stale, stale))
    local s = env.Sandbox(env.SandboxConfig{ models = LAYOUTS["local folder"](true) }):start{ name = "xfs" }
    T.eq(require("seer.core.sandbox").listdir(stale), nil, "stale staging was not swept")
    T.ok(not io.open(stale .. ".owner"), "a stale owner file was not swept")
    local out = s:exec("grep ' /models/' /proc/self/mountinfo | awk '{print $4}'")
    local src = out:match("(%S+)")
    T.ok(src and src:find(root .. "/cache/hidden-stage/", 1, true) == 1, "staged in seer's cache (same file system as the model): " .. out)
    assert_clean(src, "the staging path")
    T.ok(require("seer.core.sandbox").listdir(src) ~= nil, "the staging directory exists on the host")
    T.contains(s:exec_lua("print(require('seer.model').load('" .. s.model_handles[1].path .. "', { hidden = true }).config.num_hidden_layers)"), "5")
    s:terminate()
    T.eq(require("seer.core.sandbox").listdir(src), nil, "the staging directory outlived terminate()")
    -- the owner killed with -9: the keeper removes the staging directory
    local script = root .. "/owner.lua"
    seer.write_file(script, ([[
      local env = require "seer.environment"
      local s = env.Sandbox(env.SandboxConfig{ models = { env.ModelConfig{ name = %q, hidden = true } } }):start{ name = "killed" }
      print(s:exec("grep ' /models/' /proc/self/mountinfo | awk '{print $4}'"))
      io.stdout:flush()
      while true do require("seer.process").sleep_ms(100) end]]):format(loc.model))
    local bin = require("seer.core.host").realpath(arg[-1]) or arg[-1]
    local p = io.popen(("'%s' '%s' & echo $!; sleep 0"):format(bin, script))
    local pid = p:read("*l")
    local staged = p:read("*l")
    T.ok(staged and staged:find("/hidden-stage/", 1, true), tostring(staged))
    os.execute("kill -9 " .. pid)
    p:close()
    local gone = false
    -- the keeper first kills the tree and empties the cgroups (up to 3 s), then removes: on a
    -- loaded machine that takes a while
    for _ = 1, 300 do
      if not require("seer.core.sandbox").listdir(staged) then gone = true break end
      require("seer.process").sleep_ms(50)
    end
    T.ok(gone, "the keeper left the staging directory of a killed owner: " .. staged)
  end)
  ffi.C.setenv("SEER_SANDBOX_DIR", root .. "/sb", 1)
  os.execute("rm -rf '" .. state .. "'")
  if not ok then error(err, 0) end
end)

T.test("staging: a tensor whose name holds the id is refused with a clear message", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed") end
  local d = root .. "/named-tensor/" .. ids.name
  os.execute(("mkdir -p '%s' && cp '%s'/*.json '%s'/"):format(d, A.stories, d))
  local tensor = require "seer.tensor"
  local t = tensor.load(A.stories .. "/model.safetensors", { copy = true })
  t["extra." .. ids.name] = tensor.zeros(1)
  tensor.save(d .. "/model.safetensors", t)
  local msg = T.raises(function() env.Sandbox(env.SandboxConfig{ models = { env.ModelConfig{ name = d, hidden = true } } }):start{ name = "refuse" } end,
    "a tensor name in the hidden model's model.safetensors names the model", true)
  T.contains(msg, "rename the tensor or do not hide the model")
end)

T.test("staging: a small byte tensor that spells the id is refused; a .safetensors that is not one is left out", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed") end
  local tensor = require "seer.tensor"
  local d = root .. "/byte-tensor/" .. ids.name
  os.execute(("mkdir -p '%s' && cp '%s'/*.json '%s'/"):format(d, A.stories, d))
  local t = tensor.load(A.stories .. "/model.safetensors", { copy = true })
  local bytes = {}
  for i = 1, #ORG_NAME do bytes[i] = ORG_NAME:byte(i) end
  t["extra.note"] = tensor.from(bytes, "u8")
  tensor.save(d .. "/model.safetensors", t)
  T.raises(function() env.Sandbox(env.SandboxConfig{ models = { env.ModelConfig{ name = d, hidden = true } } }):start{ name = "bytes" } end,
    "the bytes of a tensor in the hidden model's model.safetensors spell the model's name", true)
  -- a text file dressed as weights
  local d2 = root .. "/fake-weights/" .. ids.name
  os.execute(("mkdir -p '%s' && cp '%s'/*.json '%s/model.safetensors' '%s'/"):format(d2, A.stories, A.stories, d2))
  seer.write_file(d2 .. "/notes.safetensors", "this is " .. ORG_NAME .. "\n")
  local s = env.Sandbox(env.SandboxConfig{ models = { env.ModelConfig{ name = d2, hidden = true } } }):start{ name = "fake" }
  local out = s:exec("ls /models/*/; cat /models/*/* | grep -a -c -i " .. ids.org .. " || true")
  s:terminate()
  T.ok(not out:find("notes.safetensors", 1, true), out)
  T.contains(out, "model.safetensors")
  T.contains(out, "\n0\n")
end)

T.test("staging: a hidden model's file that links out of its folder is refused, never copied or linked into the sandbox", function()
  -- a model folder written by a sandbox (an agent's "fine-tuned model" in its workspace), then
  -- hidden into another sandbox: staging resolved every link, so tokenizer.json -> a host secret
  -- was hard-linked or copied into the second sandbox's mount
  if not have_bwrap() then T.skip("bubblewrap is not installed") end
  local d = root .. "/planted/" .. ids.name
  local secret = root .. "/planted/host-secret.txt"
  os.execute(("mkdir -p '%s' && cp '%s'/*.json '%s/model.safetensors' '%s'/ && rm '%s/tokenizer.json'"):format(d, A.stories, A.stories, d, d))
  seer.write_file(secret, "HOST-ONLY-SECRET-4411\n")
  os.execute(("ln -s '%s' '%s/tokenizer.json'"):format(secret, d))
  local msg = T.raises(function()
    env.Sandbox(env.SandboxConfig{ models = { env.ModelConfig{ name = d, hidden = true } } }):start{ name = "lnk1" }
  end, "tokenizer.json is a symbolic link that leads out of its model folder", true)
  T.contains(msg, "SEER_MODEL_FOLLOW_LINKS=1")
  local hits = io.popen(("grep -rl HOST-ONLY-SECRET-4411 '%s/sb' '%s/cache' 2>/dev/null | head -3"):format(root, root)):read("*a")
  T.eq(hits, "", "the secret was staged")
  -- a link inside the folder is followed (the HF cache's links into blobs/ are covered above)
  os.execute(("rm '%s/tokenizer.json' && cp '%s/tokenizer.json' '%s/tok.real' && ln -s tok.real '%s/tokenizer.json'"):format(d, A.stories, d, d))
  local s = env.Sandbox(env.SandboxConfig{ models = { env.ModelConfig{ name = d, hidden = true } } }):start{ name = "lnk2" }
  local out = s:exec("ls /models/*/")
  s:terminate()
  T.contains(out, "tokenizer.json")
end)

-- The model folder changed between the check of its files and their staging. A folder a sandbox
-- can write (an agent's model in its workspace) hidden into a second sandbox: staging checked
-- each file's links (the folder, or the cache's models--org--name), then hard-linked or copied
-- it by path, so a file swapped meanwhile for a link to a host file, or a directory on the way
-- (the folder itself, the cache's blobs/) for a link to a host folder, put that host file into
-- the second sandbox's mount. Staging now opens each file once and links or copies that
-- descriptor. The change is made from the stager's _stage_bases, which _stage_hidden calls
-- after every kept file was checked and before any is linked or copied (the real staging code
-- around it; the bases are the state folder, so the copies stay inside the test's folders).
local S = require "seer.sandbox"
local sbc = require "seer.core.sandbox"
local SWAP_SECRET = string.rep("HOST-ONLY-SECRET-7731\n", 4096) -- longer than any header a copy patches
local SWAP_KEEP = { "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                    "special_tokens_map.json", "model.safetensors" }

local function sh(cmd) T.ok(os.execute(cmd) == 0, cmd) end

-- A model folder of stories260K's kept files: a local folder at base/qz5-org/qz5-net, or a
-- Hugging Face cache under base/hub (snapshot files linking into blobs/). Returns the folder
-- to stage, the id, and the blobs folder (cache).
local function swap_model(base, layout)
  if layout == "local" then
    local d = base .. "/qz5-org/qz5-net"
    sh(("mkdir -p '%s'"):format(d))
    for _, f in ipairs(SWAP_KEEP) do sh(("cp '%s/%s' '%s/'"):format(A.stories, f, d)) end
    return d, "qz5-org/qz5-net"
  end
  local repo = base .. "/hub/models--qz5-org--qz5-net"
  local snap = repo .. "/snapshots/5e1f0c2a9b7d"
  sh(("mkdir -p '%s/blobs' '%s'"):format(repo, snap))
  for i, f in ipairs(SWAP_KEEP) do
    local blob = ("%040x"):format(i * 7919)
    sh(("cp '%s/%s' '%s/blobs/%s' && ln -s '../../blobs/%s' '%s/%s'"):format(A.stories, f, repo, blob, blob, snap, f))
  end
  return snap, "qz5-org/qz5-net", repo .. "/blobs"
end

-- Stages `host` with `change` made between the check and the staging; what _stage_hidden
-- returned (pcall's results). frags: the fragments (default: hidden_fragments of the folder now).
local function stage_changed(host, id, state, change, frags)
  local s = S.Sandbox(env.SandboxConfig{})
  s.state_dir, s.stage_dirs = state, {}
  frags = frags or S.hidden_fragments({ { name = id, host = host, files = {} } }, { root, state })
  local changed = false
  s._stage_bases = function(self)
    change()
    changed = true
    return { self.state_dir .. "/hidden" }
  end
  local fds = #sbc.listdir("/proc/self/fd")
  local res = { pcall(s._stage_hidden, s, host, frags) }
  T.ok(changed or not res[1], "the change was not made: the stager never chose a staging directory")
  T.eq(#sbc.listdir("/proc/self/fd"), fds, "staging left descriptors open")
  return unpack(res, 1, 3)
end

-- The staged folder holds the checked files, each a regular file with its original bytes, and
-- nothing of the host's secret.
local function check_staged(dir, report, copies)
  local names = {}
  for _, e in ipairs(sbc.listdir(dir) or {}) do
    names[#names + 1] = e.name
    T.eq(e.type, "file", e.name .. " was staged as a " .. tostring(e.type) .. ", not the file that was checked")
    local text = seer.read_file(dir .. "/" .. e.name)
    T.ok(not text:find("HOST-ONLY-SECRET-7731", 1, true), e.name .. ": a host file was staged into the sandbox's mount")
    T.ok(text == seer.read_file(A.stories .. "/" .. e.name), e.name .. " is not the file that was checked")
  end
  table.sort(names)
  local want = { unpack(SWAP_KEEP) }
  table.sort(want)
  T.eq(names, want)
  if copies then T.eq(report.copied, #SWAP_KEEP, "every file should be a copy (another file system)")
  else T.eq(report.linked, #SWAP_KEEP, "every file should be a hard link") end
end

-- hard links: model and staging on one file system; copies: the model on /dev/shm (tmpfs)
local SWAP_CHANGES = {
  ["each kept file swapped for a link to a host file"] = { "local", function(host, secrets)
    for _, f in ipairs(SWAP_KEEP) do
      sh(("mv '%s/%s' '%s/%s.was' && ln -s '%s/secret' '%s/%s'"):format(host, f, host, f, secrets, host, f))
    end
  end },
  ["the model folder itself swapped for a link to a host folder holding the same names"] = { "local", function(host, secrets)
    sh(("mv '%s' '%s.was' && ln -s '%s' '%s'"):format(host, host, secrets, host))
  end },
  ["the cache's blobs/ swapped for a link to a host folder holding the blobs' names"] = { "cache", function(_, secrets, blobs)
    sh(("mv '%s' '%s.was' && ln -s '%s' '%s'"):format(blobs, blobs, secrets, blobs))
  end },
}
for _, how in ipairs({ "hard link", "copy" }) do
  for _, what in ipairs({ "each kept file swapped for a link to a host file",
                          "the model folder itself swapped for a link to a host folder holding the same names",
                          "the cache's blobs/ swapped for a link to a host folder holding the blobs' names" }) do
    T.test(("staging (%s): %s after the check stages the file that was checked, never the host's"):format(how, what), function()
      local layout, change = SWAP_CHANGES[what][1], SWAP_CHANGES[what][2]
      local base = root .. "/swap"
      if how == "copy" then
        if not sbc.listdir("/dev/shm") then T.skip("no /dev/shm: a model on another file system than the state") end
        base = "/dev/shm/seer-swap-test-" .. require("seer.core.host").getpid()
      end
      sh(("rm -rf '%s' && mkdir -p '%s/secrets'"):format(base, base))
      local ok, err = pcall(function()
        local host, id, blobs = swap_model(base .. "/m", layout)
        -- the host's secret under every name the change could lead to
        local secrets = base .. "/secrets"
        seer.write_file(secrets .. "/secret", SWAP_SECRET)
        for _, f in ipairs(SWAP_KEEP) do seer.write_file(secrets .. "/" .. f, SWAP_SECRET) end
        for _, e in ipairs(sbc.listdir(blobs or base) or {}) do
          if e.type == "file" then seer.write_file(secrets .. "/" .. e.name, SWAP_SECRET) end
        end
        local state = root .. "/swap-state"
        sh(("rm -rf '%s' && mkdir -p '%s'"):format(state, state))
        local okd, dir, report = stage_changed(host, id, state, function() change(host, secrets, blobs) end)
        T.ok(okd, "staging failed: " .. tostring(dir))
        check_staged(dir, report, how == "copy")
      end)
      os.execute(("rm -rf '%s' '%s/swap-state'"):format(base, root))
      if not ok then error(err, 0) end
    end)
  end
end

-- A hidden model that lies in a sandbox's folder (an agent's model in its workspace, hidden into
-- a second sandbox): a hard link would be the inode the first sandbox can still rewrite, a live
-- channel into the second one (the id included) after every check. Such files are copied, and
-- each copy checked again.
local function in_sandbox_root(fn)
  local sbroot = root .. "/sbroot"
  local saved = os.getenv("SEER_SANDBOX_DIR")
  sh(("rm -rf '%s' && mkdir -p '%s/agent-1a2b3c/workspace'"):format(sbroot, sbroot))
  T.setenv("SEER_SANDBOX_DIR", sbroot)
  local ok, err = pcall(fn, sbroot .. "/agent-1a2b3c/workspace")
  T.setenv("SEER_SANDBOX_DIR", saved)
  os.execute(("rm -rf '%s' '%s/swap-state'"):format(sbroot, root))
  if not ok then error(err, 0) end
end
local NAMING = '{"note": "qz5-org/qz5-net"}'

T.test("staging: a hidden model in a sandbox's folder is copied, never hard-linked; rewritten afterwards, the staged copies do not change", function()
  in_sandbox_root(function(ws)
    local host, id = swap_model(ws .. "/m", "local")
    local state = root .. "/swap-state"
    sh(("rm -rf '%s' && mkdir -p '%s'"):format(state, state))
    local okd, dir, report = stage_changed(host, id, state, function() end)
    T.ok(okd, tostring(dir))
    check_staged(dir, report, true)
    T.eq(report.linked, 0)
    -- the first sandbox rewrites a kept file in place (the same inode) to name the model
    local f = assert(io.open(host .. "/special_tokens_map.json", "r+b"))
    f:write(NAMING)
    f:close()
    T.eq(seer.read_file(dir .. "/special_tokens_map.json"), seer.read_file(A.stories .. "/special_tokens_map.json"),
      "a write to the model in the sandbox's folder reached the staged file")
  end)
end)

T.test("staging: a hidden model's file in a sandbox's folder rewritten to name the model between the check and the copy is refused", function()
  in_sandbox_root(function(ws)
    local host, id = swap_model(ws .. "/m", "local")
    local state = root .. "/swap-state"
    sh(("rm -rf '%s' && mkdir -p '%s'"):format(state, state))
    local function rewrite()
      -- the same inode, the same size (a file that shrank is refused as such)
      local size = #seer.read_file(host .. "/special_tokens_map.json")
      local f = assert(io.open(host .. "/special_tokens_map.json", "wb"))
      f:write(NAMING .. string.rep(" ", math.max(0, size - #NAMING)))
      f:close()
    end
    local okd, msg = stage_changed(host, id, state, rewrite)
    T.ok(not okd, "a file rewritten after its check to name the model was staged")
    T.contains(tostring(msg), "the hidden model's special_tokens_map.json changed while it was staged (it lies in a sandbox's folder")
    -- the control: the same model outside any sandbox's folder is hard-linked, so the same
    -- rewrite shows through the staged file (why a sandbox's folder must not be linked)
    local outside = root .. "/outside"
    sh(("rm -rf '%s'"):format(outside))
    local host2 = swap_model(outside, "local")
    sh(("rm -rf '%s' && mkdir -p '%s'"):format(state, state))
    local ok2, dir2, report2 = stage_changed(host2, id, state, function() end)
    T.ok(ok2, tostring(dir2))
    T.eq(report2.linked, #SWAP_KEEP)
    local f = assert(io.open(host2 .. "/special_tokens_map.json", "r+b"))
    f:write(NAMING)
    f:close()
    T.contains(seer.read_file(dir2 .. "/special_tokens_map.json"), "qz5-org/qz5-net", "the control: a hard link did not show the rewrite")
    os.execute(("rm -rf '%s'"):format(outside))
  end)
end)

T.test("staging: a staging place whose path leads to a folder named after the model is passed over (the mount table shows where it leads)", function()
  local base = root .. "/stagebase"
  sh(("rm -rf '%s' '%s/swapm' && mkdir -p '%s/qz5-org-cache'"):format(base, root, base))
  sh(("ln -s '%s/qz5-org-cache' '%s/plain-cache'"):format(base, base))
  local host, id = swap_model(root .. "/swapm", "local")
  local state = root .. "/swap-state"
  sh(("rm -rf '%s' && mkdir -p '%s'"):format(state, state))
  local s = S.Sandbox(env.SandboxConfig{})
  s.state_dir, s.stage_dirs = state, {}
  local frags = S.hidden_fragments({ { name = id, host = host, files = {} } }, { root, state })
  s._stage_bases = function() return { base .. "/plain-cache" } end
  local ok, dir = pcall(s._stage_hidden, s, host, frags)
  T.ok(ok, tostring(dir))
  local real = require("seer.core.host").realpath(dir)
  T.ok(not real:find("qz5", 1, true), "the staging directory leads to a path naming the model: " .. real)
  T.eq(dir:sub(1, #state + 1), state .. "/", "the fallback beside the sandbox's state was not taken: " .. dir)
  s:_unstage_hidden()
  os.execute(("rm -rf '%s' '%s' '%s/swapm'"):format(base, state, root))
end)

T.test("a folder or visible model in another sandbox's folder is not mounted beside a hidden model (that sandbox could write the id there later)", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed") end
  in_sandbox_root(function(ws)
    sh(("mkdir -p '%s/notes' '%s/pubnet' && cp '%s/config.json' '%s/tokenizer.json' '%s/model.safetensors' '%s/pubnet/'"):format(
      ws, ws, A.stories, A.stories, A.stories, ws))
    T.raises(function() env.Sandbox(env.SandboxConfig{ models = LAYOUTS["local folder"](true), local_dirs = { { ws .. "/notes", "/data" } } })
      :start{ name = "ok" } end, "SandboxConfig.local_dirs[1] lies in a sandbox's folder", true)
    T.raises(function() env.Sandbox(env.SandboxConfig{ models = { LAYOUTS["local folder"](true)[1],
      env.ModelConfig{ name = ws .. "/pubnet", var_name = "pub" } } }):start{ name = "ok" } end,
      "the visible model mounted at /models/pubnet (from " .. ws .. "/pubnet) lies in a sandbox's folder", true)
    -- the control: without a hidden model, the same mounts start
    local s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli", local_dirs = { { ws .. "/notes", "/data" } },
      models = { env.ModelConfig{ name = ws .. "/pubnet", var_name = "pub" } } }):start{ name = "ok" }
    local out = s:exec("ls /data /models/pubnet | tr '\\n' ' '")
    s:terminate()
    T.contains(out, "config.json")
  end)
end)

T.test("staging (copy): a file that shrank after the check is refused, not staged short", function()
  if not sbc.listdir("/dev/shm") then T.skip("no /dev/shm: a model on another file system than the state") end
  local base = "/dev/shm/seer-swap-test-" .. require("seer.core.host").getpid()
  sh(("rm -rf '%s'"):format(base))
  local ok, err = pcall(function()
    local host, id = swap_model(base .. "/m", "local")
    local state = root .. "/swap-state"
    sh(("rm -rf '%s' && mkdir -p '%s'"):format(state, state))
    local okd, msg = stage_changed(host, id, state, function() sh(("truncate -s 4096 '%s/model.safetensors'"):format(host)) end)
    T.ok(not okd, "a file cut short after its check was staged")
    T.contains(tostring(msg), "the hidden model's model.safetensors shrank while it was staged (it held 1044992 bytes when it was checked)")
  end)
  os.execute(("rm -rf '%s' '%s/swap-state'"):format(base, root))
  if not ok then error(err, 0) end
end)

T.test("staging (copy): a safetensors whose cleaned header is longer is the new header and then the data, byte for byte", function()
  -- 1E5 is re-encoded 100000: the cleaned header outgrows the old one, and the data moves
  local base = root .. "/longer"
  local d = base .. "/qz5-org/qz5-net"
  sh(("rm -rf '%s' && mkdir -p '%s' && cp '%s/config.json' '%s/'"):format(base, d, A.stories, d))
  local ts = {}
  for i = 1, 20 do ts[i] = ('"w%d":{"dtype":"F32","shape":[1E0],"data_offsets":[1E5,1E5]}'):format(i) end
  local h = '{"__metadata__":{"source":"qz5-org/qz5-net"},' .. table.concat(ts, ",") .. "}"
  local data = {}
  for i = 1, 70000 do data[i] = string.char(i % 251) end
  data = table.concat(data)
  local function le64(n)
    local b = {}
    for i = 1, 8 do b[i] = string.char(n % 256); n = math.floor(n / 256) end
    return table.concat(b)
  end
  seer.write_file(d .. "/model.safetensors", le64(#h) .. h .. data)
  local state = root .. "/swap-state"
  sh(("rm -rf '%s' && mkdir -p '%s'"):format(state, state))
  local ok, dir, report = stage_changed(d, "qz5-org/qz5-net", state, function() end)
  T.ok(ok, tostring(dir))
  T.eq(report.cleaned, 1)
  local t = seer.read_file(dir .. "/model.safetensors")
  local n = 0
  for i = 8, 1, -1 do n = n * 256 + t:byte(i) end
  T.ok(n > #h, "the cleaned header should be the longer one here")
  local doc = json.decode(t:sub(9, 8 + n))
  T.eq(doc.w7.data_offsets, { 100000, 100000 })
  T.ok(not t:sub(9, 8 + n):find("qz5", 1, true), t:sub(9, 8 + n))
  T.ok(t:sub(9 + n) == data, "the data after the header changed")
  os.execute(("rm -rf '%s' '%s' '%s/swapm'"):format(base, state, root))
end)

T.test("staging: a link planted before staging through a directory link out of the cache is refused; a fifo is left out", function()
  local base = root .. "/planted-dir"
  sh(("rm -rf '%s' && mkdir -p '%s/secrets'"):format(base, base))
  local snap, id, blobs = swap_model(base .. "/m", "cache")
  for _, e in ipairs(sbc.listdir(blobs)) do seer.write_file(base .. "/secrets/" .. e.name, SWAP_SECRET) end
  sh(("mv '%s' '%s.was' && ln -s '%s/secrets' '%s'"):format(blobs, blobs, base, blobs))
  local state = root .. "/swap-state"
  sh(("rm -rf '%s' && mkdir -p '%s'"):format(state, state))
  local okd, msg = stage_changed(snap, id, state, function() end)
  T.ok(not okd, "a link whose blobs/ leads out of the cache was staged")
  T.contains(tostring(msg), "is a symbolic link that leads out of its model folder")
  -- a fifo named like a kept file is left out, never opened (nothing writes it: an open for
  -- reading would wait forever); the fragments are worked out with the fifos there
  -- (hidden_fragments reads the folder's .json files as staging does: it waited on one when it
  -- opened them by path; test_attack_models.lua has the rest of that class)
  sh(("rm '%s' && mv '%s.was' '%s' && rm '%s/config.json' && mkfifo '%s/config.json'"):format(blobs, blobs, blobs, snap, snap))
  sh(("mkfifo '%s/generation_config.json.fifo' && rm '%s/generation_config.json' && ln -s generation_config.json.fifo '%s/generation_config.json'")
    :format(snap, snap, snap))
  local ok2, dir, report = stage_changed(snap, id, state, function() end)
  T.ok(ok2, tostring(dir))
  T.eq(report.left_out, 3) -- the fifo, the link to the other fifo, the fifo itself under its own name
  T.ok(not io.open(dir .. "/config.json", "rb") and not io.open(dir .. "/generation_config.json", "rb"), "a fifo was staged")
  os.execute(("rm -rf '%s' '%s' '%s/swapm'"):format(base, state, root))
end)

T.test("a sandbox name, environment variable or mounted path that holds the id is refused", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed") end
  local models = LAYOUTS["HF cache"](true)
  T.raises(function() env.Sandbox(env.SandboxConfig{ models = models }):start{ name = ids.org } end,
    "the sandbox's directory holds part of a hidden model's id, and code in the sandbox can read it; choose another sandbox name", true)
  T.raises(function() env.Sandbox(env.SandboxConfig{ models = models, env = { WHICH = ORG_NAME } }):start{ name = "ok" } end,
    "the environment variable WHICH holds part of a hidden model's id", true)
  T.raises(function() env.Sandbox(env.SandboxConfig{ models = models, local_files = { { A.stories .. "/LICENSE", "/workspace/" .. ids.name .. ".txt" } } })
    :start{ name = "ok" } end, "SandboxConfig.local_files[1]'s path in the sandbox", true)
  T.raises(function() env.Sandbox(env.SandboxConfig{ models = models, local_dirs = { { hf_home, "/data" } } }):start{ name = "ok" } end,
    "SandboxConfig.local_dirs[1] is or holds a hidden model's files", true)
  -- a visible model beside the hidden one that names it: a hub model of the same org (its mount
  -- /models/<org>--..., its source in the mount table, its MODEL_<ORG>_..._PATH), and a local
  -- folder beside the hidden one (its source path holds the org's folder)
  local pub = hf_home .. "/hub/models--" .. ids.org .. "--zqpubnet"
  local rev = ("%040x"):format(0xbeef)
  T.ok(os.execute(("mkdir -p '%s/refs' '%s/snapshots/%s' && printf %s > '%s/refs/main' && cp '%s/config.json' '%s/tokenizer.json' "
    .. "'%s/model.safetensors' '%s/snapshots/%s/'"):format(pub, pub, rev, rev, pub, A.stories, A.stories, A.stories, pub, rev)) == 0)
  local beside = { LAYOUTS["HF cache"](true)[1], env.ModelConfig{ name = ids.org .. "/zqpubnet", var_name = "pub" } }
  T.raises(function() env.Sandbox(env.SandboxConfig{ models = beside }):start{ name = "ok" } end,
    "the visible model mounted at /models/", true)
  local sibling = loc.model:match("^(.*)/[^/]+$") .. "/zqpubnet"
  T.ok(os.execute(("mkdir -p '%s' && cp '%s/config.json' '%s/tokenizer.json' '%s/model.safetensors' '%s/'"):format(
    sibling, A.stories, A.stories, A.stories, sibling)) == 0)
  beside = { LAYOUTS["local folder"](true)[1], env.ModelConfig{ name = sibling, var_name = "pub" } }
  T.raises(function() env.Sandbox(env.SandboxConfig{ models = beside }):start{ name = "ok" } end,
    "the visible model mounted at /models/zqpubnet (from " .. sibling, true)
  os.execute(("rm -rf '%s' '%s'"):format(pub, sibling))
  -- a mounted file linked to one of the model's: its path there (in the sandbox's mount table)
  -- names the model, and it is the model's file
  os.execute(("ln -sf '%s/config.json' '%s/innocent.json'"):format(loc.model, root))
  T.raises(function() env.Sandbox(env.SandboxConfig{ models = LAYOUTS["local folder"](true),
    local_files = { { root .. "/innocent.json", "/workspace/c.json" } } }):start{ name = "ok" } end,
    "SandboxConfig.local_files[1] (where its path leads) holds part of a hidden model's id", true)
  -- an innocent-looking mounted folder that is a link to one whose path names the model: the
  -- sandbox's /proc/self/mountinfo shows where a mount comes from (the check looked only at the
  -- path as written)
  os.execute(("mkdir -p '%s/%s-notes' && ln -sfn '%s/%s-notes' '%s/plain-dir'"):format(root, ids.org, root, ids.org, root))
  T.raises(function() env.Sandbox(env.SandboxConfig{ models = models, local_dirs = { { root .. "/plain-dir", "/data" } } })
    :start{ name = "ok" } end, "SandboxConfig.local_dirs[1] (where its path leads) holds part of a hidden model's id", true)
  -- nothing of a refused start stays behind
  local left = {}
  for _, e in ipairs(require("seer.core.sandbox").listdir(root .. "/sb") or {}) do
    if not e.name:match("^hidden") then left[#left + 1] = e.name end
  end
  T.eq(left, {}, "refused starts left directories")
end)

T.test("cleanup: the rigs end and the hub settings are restored", function()
  A.close()
  -- every key, the unset ones too (pairs() skips a nil value: HF_HUB_OFFLINE=1 outlived this
  -- file and the hub tests after it in the same process saw an offline hub)
  for _, k in ipairs({ "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE" }) do
    local v = saved[k]
    if v then ffi.C.setenv(k, v, 1) else ffi.C.unsetenv(k) end
  end
end)
