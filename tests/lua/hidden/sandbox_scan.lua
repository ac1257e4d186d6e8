-- Runs inside a sandbox (test_attack_hidden.lua sends it to `seer -` with FRAGS_HEX defined
-- before it): reads everything this process can read and reports where a fragment of a hidden
-- model's id or host path appears.
--   * the file tree from /: every name, every symlink's target, and the content of every
--     regular file (up to 64 MiB each) except under /usr (9 GB of the host's system files,
--     mounted unchanged in every sandbox: names only);
--   * /proc: for every process (and self, thread-self): every file directly in /proc/PID
--     (cmdline, environ, maps, smaps, mountinfo, mounts, mountstats, status, stat, ...), the
--     links cwd, root, exe, fd/*, map_files/*, ns/*, task/*/ files, and the readable memory of
--     every other process (/proc/PID/mem, through its maps); the top-level /proc files;
--   * this process's environment.
-- The fragments come hex-encoded (the script's own text is in sandboxd's memory and our
-- stdin) and are decoded only into this process's memory, which is not scanned.
-- Prints "scanned N files, M bytes" and one "LEAK where: what" line per finding.
local sb = require "seer.core.sandbox"
local ffi = require "ffi"
pcall(ffi.cdef, "long readlink(const char *path, char *buf, unsigned long size); int getpid(void);")

local frags = {}
for hex in FRAGS_HEX:gmatch("[^,]+") do
  frags[#frags + 1] = hex:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end):lower()
end
local folded = {}
for i, f in ipairs(frags) do folded[i] = f:gsub("[^%w]", "") end

local leaks, files, bytes = {}, 0, 0
local function leak(where, what) leaks[#leaks + 1] = "LEAK " .. where .. ": " .. what end

-- raw (lowercased) and letters-and-digits-only comparisons, as fixtures.find does
local function check(where, text, raw_only)
  if not text or text == "" then return end
  bytes = bytes + #text
  local low = text:lower()
  for i, f in ipairs(frags) do
    local a = low:find(f, 1, true)
    if a then
      return leak(where, ("fragment %d near %q"):format(i, text:sub(math.max(1, a - 40), a - 1) .. "<F>" .. text:sub(a + #f, a + #f + 20)))
    end
  end
  if raw_only then return end
  local fl = low:gsub("[^%w]", "")
  for i, f in ipairs(folded) do
    if #f >= 4 and fl:find(f, 1, true) then return leak(where, ("fragment %d (letters and digits)"):format(i)) end
  end
end

local buf = ffi.new("char[4096]")
local function readlink(p)
  local n = ffi.C.readlink(p, buf, 4096)
  if n > 0 then return ffi.string(buf, n) end
end

local function slurp(p, max)
  local f = io.open(p, "rb")
  if not f then return nil end
  local ok, t = pcall(f.read, f, max or (64 * 1048576))
  f:close()
  return ok and t or nil
end

-- the file tree
local SKIP_TREE = { ["/proc"] = true, ["/sys"] = true }
local function walk(dir, content)
  for _, e in ipairs(sb.listdir(dir) or {}) do
    local p = (dir == "/" and "" or dir) .. "/" .. e.name
    check("name " .. p, p)
    if e.type == "link" then
      check("link " .. p, readlink(p) or "")
    elseif e.type == "dir" then
      if not SKIP_TREE[p] then walk(p, content and p ~= "/usr") end
    elseif e.type == "file" and content then
      local t = slurp(p)
      if t then files = files + 1; check("file " .. p, t) end
    end
  end
end
walk("/", true)

-- /proc
local self = tostring(ffi.C.getpid())
local NO_READ = { mem = true, pagemap = true, clear_refs = true, kpagecount = true, kpageflags = true,
                  kcore = true, kmsg = true, ["sysrq-trigger"] = true }
local function proc_dir(d, depth)
  for _, e in ipairs(sb.listdir(d) or {}) do
    local p = d .. "/" .. e.name
    if e.type == "link" then
      check("link " .. p, readlink(p) or "")
    elseif e.type == "file" and not NO_READ[e.name] then
      local t = slurp(p, 4 * 1048576)
      if t then files = files + 1; check("proc " .. p, t) end
    elseif e.type == "dir" and depth > 0 and e.name ~= "net" then
      proc_dir(p, depth - 1)
    end
  end
end

local function scan_mem(pid)
  local maps = slurp("/proc/" .. pid .. "/maps")
  local f = io.open("/proc/" .. pid .. "/mem", "rb")
  if not maps or not f then if f then f:close() end return end
  local total = 0
  for a, b, perm, rest in maps:gmatch("(%x+)%-(%x+) (%S+)[^\n]-([^\n]*)\n") do
    local lo, hi = tonumber(a, 16), tonumber(b, 16)
    if perm:sub(1, 1) == "r" and not rest:find("%[vvar") and not rest:find("%[vsyscall") then
      local n = math.min(hi - lo, 64 * 1048576)
      if total + n <= 512 * 1048576 and f:seek("set", lo) then
        local ok, d = pcall(f.read, f, n)
        if ok and d then total = total + #d; check(("mem of %s at %x"):format(pid, lo), d, true) end
      end
    end
  end
  f:close()
  files = files + 1
end

for _, e in ipairs(sb.listdir("/proc") or {}) do
  local p = "/proc/" .. e.name
  if e.name:match("^%d+$") or e.name == "self" or e.name == "thread-self" then
    local d = (e.type == "link") and ("/proc/" .. (readlink(p) or e.name)) or p
    check("link " .. p, readlink(p) or "")
    proc_dir(d, 2) -- fd/, map_files/, ns/, attr/, fdinfo/, task/<tid>/
    if e.name:match("^%d+$") and e.name ~= self then scan_mem(e.name) end
  elseif e.type == "file" and not NO_READ[e.name] then
    local t = slurp(p, 4 * 1048576)
    if t then files = files + 1; check("proc " .. p, t) end
  elseif e.type == "link" then
    check("link " .. p, readlink(p) or "")
  end
end

-- the environment
for _, kv in ipairs(sb.environ()) do check("environment", kv) end

print(("scanned %d files, %d bytes"):format(files, bytes))
for _, l in ipairs(leaks) do print(l) end
