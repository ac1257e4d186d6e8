-- seer.safe_fs, the Lua side of engine/sandbox/safe_fs.c (tests/unit/test_safe_fs.c has the C
-- cases and the race): the wrapper's results and codes, the whole-path helpers the notebook
-- writer uses, and copy_in. Links and fifos are planted on this machine (no sandbox needed).
local T = require "testing"
local fs = require "seer.safe_fs"
local ffi = require "ffi"
pcall(ffi.cdef, "int symlink(const char *t, const char *p); int mkfifo(const char *p, unsigned m);")

local function setup()
  local base = T.tmpdir()
  os.execute(("mkdir -p '%s/root' '%s/outside' && printf secret > '%s/outside/s.txt'"):format(base, base, base))
  return base, base .. "/root", base .. "/outside"
end

local function outside_files(dir)
  local names = {}
  for _, e in ipairs(require("seer.core.sandbox").listdir(dir)) do names[#names + 1] = e.name end
  table.sort(names)
  return table.concat(names, ",")
end

T.test("safe_fs: results, codes and messages through openat2 and the walk", function()
  for _, walk in ipairs({ false, true }) do
    local _, root, out = setup()
    local r = fs.root(root, "the sandbox's workspace", { walk = walk })
    T.ok(r:write("a/b.txt", "hi", { mkdirs = true }))
    T.eq(r:read("a/b.txt"), "hi")
    T.eq(r:stat("a").type, "dir")
    T.eq(#r:list("a"), 1)
    T.eq(ffi.C.symlink(out, root .. "/lib"), 0)
    local v, msg, code = r:write("lib/x.lua", "pwned", { mkdirs = true })
    T.eq(v, nil)
    T.eq(code, "symlink")
    T.contains(msg, "refusing to follow a symlink planted in the sandbox's workspace: " .. root .. "/lib")
    T.eq(select(3, r:read("../outside/s.txt")), "outside")
    T.eq(ffi.C.mkfifo(root .. "/f", 420), 0)
    T.eq(select(3, r:read("f")), "notregular")
    T.eq(select(3, r:read("missing")), "notfound")
    T.ok(r:write("big", ("x"):rep(5000)))
    T.eq(select(3, r:read("big", { max = 100 })), "toobig")
    T.eq(#r:read("big", { max = 100, tail = true }), 100)
    T.raises(function() fs.must(r:read("lib/s.txt")) end, "refusing to follow a symlink", true)
    T.raises(function() r:read("a\0b") end, "NUL byte", true)
    T.ok(r:remove_tree(""))
    T.eq(#r:list(""), 0)
    T.eq(outside_files(out), "s.txt")
  end
end)

T.test("safe_fs: write_nofollow, mkdirs_nofollow and lstat refuse links anywhere on a whole path", function()
  local _, root, out = setup()
  T.ok(fs.mkdirs_nofollow(root .. "/nb/out"))
  T.ok(fs.write_nofollow(root .. "/nb/out/x.ipynb", "{}"))
  T.eq(fs.lstat(root .. "/nb/out/x.ipynb").type, "file")
  T.eq(ffi.C.symlink(out, root .. "/nb/link"), 0)
  local ok, msg = fs.write_nofollow(root .. "/nb/link/y.ipynb", "{}")
  T.eq(ok, nil)
  T.contains(msg, "refusing to follow a symlink")
  T.eq(fs.mkdirs_nofollow(root .. "/nb/link/sub"), nil)
  T.eq(fs.lstat(root .. "/nb/link").type, "link")
  T.eq(ffi.C.mkfifo(root .. "/nb/fifo", 420), 0)
  T.eq(fs.lstat(root .. "/nb/fifo").type, "fifo", "lstat does not open (a fifo would block)")
  T.eq(outside_files(out), "s.txt")
end)

T.test("safe_fs: copy_in streams a host file in atomically and replaces a planted link", function()
  local base, root, out = setup()
  local src = base .. "/src.bin"
  local data = {}
  for i = 1, 300000 do data[i] = string.char(i % 256) end
  data = table.concat(data)
  local f = assert(io.open(src, "wb")) f:write(data) f:close()
  T.eq(ffi.C.symlink(out .. "/s.txt", root .. "/dest.bin"), 0)
  local r = fs.root(root)
  T.ok(r:copy_in("dest.bin", src, { mode = tonumber("600", 8) }))
  T.eq(r:stat("dest.bin").type, "file")
  T.eq(r:stat("dest.bin").mode, tonumber("600", 8))
  T.eq(r:read("dest.bin", { max = 1e6 }), data)
  local h = assert(io.open(out .. "/s.txt", "rb"))
  T.eq(h:read("*a"), "secret", "the link's target is untouched")
  h:close()
  T.eq(select(3, r:copy_in("x", base .. "/missing")), "notfound")
end)
