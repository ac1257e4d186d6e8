-- Attack suite, class 4 (the kernel's attack surface) and class 6 (exhaustion through files):
-- from inside a real bubblewrap sandbox (exec/sh, exec/lua, a notebook kernel's Lua cell and
-- its shell) agent code tries the syscalls a container escape or a host attack starts with,
-- and tries to take the sandbox down by filling its in-memory and on-disk file systems. Each
-- attempt asserts the exact failure (EPERM from the seccomp filter, ENOSYS for clone3, ENOSPC
-- for a full file system) and that the sandbox still answers afterwards. The controls run the
-- same probes on the host in a `seer -e` process twice: without the filter (the probe works or
-- fails differently) and with the filter installed by the same C function sandboxd uses
-- (EPERM), so neither a broken probe nor bubblewrap's namespaces can pass for the filter.
local T = require "testing"
local A = require "attack"
local ffi = require "ffi"
local sb = require "seer.core.sandbox"
local bit = require "bit"

local SEER = require("seer.jupyter").seer_binary()

pcall(ffi.cdef, [[
  long syscall(long n, long a, long b, long c, long d, long e, long f);
  int *__errno_location(void);
  unsigned geteuid(void);
]])

local IS_ROOT = ffi.C.geteuid() == 0
local X86_64 = ffi.arch == "x64" and ffi.os == "Linux"

-- The rig: 1 GiB of memory (so /tmp is 256 MiB and /dev/shm 128 MiB), and as root a 96 MiB
-- limits.disk (which an unprivileged user cannot have: see the test of the refusal below).
local RIG = { name = "seccomp", config = { limits = { memory = "1G", processes = 256, disk = IS_ROOT and "96M" or nil } } }

---------------------------------------------------------------------------------------------
-- A key in this process's session keyring, made before the rig starts (so the sandbox would
-- inherit it, were its session keyring not replaced). Possessor-only permissions: only a
-- process that has it in its keyrings can read it.
local KEY_DESC = "seer-attack-canary-" .. tostring(os.time())
local KEY_PAYLOAD = "host-keyring-secret-" .. tostring(math.random(1e9))
local host_key
do
  local r = ffi.C.syscall(248 --[[add_key]], ffi.cast("long", ffi.cast("const char *", "user")),
    ffi.cast("long", ffi.cast("const char *", KEY_DESC)), ffi.cast("long", ffi.cast("const char *", KEY_PAYLOAD)),
    #KEY_PAYLOAD, -3 --[[KEY_SPEC_SESSION_KEYRING]], 0)
  if r > 0 then
    host_key = tonumber(r)
    ffi.C.syscall(250 --[[keyctl]], 5 --[[KEYCTL_SETPERM]], host_key, 0x3f000000 --[[KEY_POS_ALL]], 0, 0, 0)
  end
end

---------------------------------------------------------------------------------------------
-- probes

-- Lua (exec/lua, kernel/lua, host controls): probe(name, nr, args...) prints
-- "PROBE name r=<result> errno=<errno>".
local LUA_PRELUDE = [[
local ffi = require "ffi"
pcall(ffi.cdef, [=[
  long syscall(long n, long a, long b, long c, long d, long e, long f);
  int *__errno_location(void);
  void *mmap(void *addr, size_t len, int prot, int flags, int fd, long off);
  void _exit(int code);
]=])
local function L(x)
  if type(x) == "string" then return ffi.cast("long", ffi.cast("const char *", x)) end
  if type(x) == "cdata" then return ffi.cast("long", ffi.cast("intptr_t", x)) end
  return ffi.cast("long", x or 0)
end
function sc(n, a, b, c, d, e, f)
  ffi.C.__errno_location()[0] = 0
  local r = ffi.C.syscall(n, L(a), L(b), L(c), L(d), L(e), L(f))
  return tonumber(r), r < 0 and ffi.C.__errno_location()[0] or 0
end
function probe(name, n, ...)
  local r, e = sc(n, ...)
  print(("PROBE %s r=%d errno=%d"):format(name, r, e))
  return r, e
end
]]

-- Python through the shell (exec/sh, kernel/sh): the same probe with ctypes.
local function py(body)
  return "exec 2>&1\n/usr/bin/python3 -c '\nimport ctypes, os\n"
    .. "libc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
    .. "def probe(name, n, *args):\n"
    .. "    a = [ctypes.c_long(x) if isinstance(x, int) else x for x in args]\n"
    .. "    ctypes.set_errno(0)\n"
    .. "    r = libc.syscall(ctypes.c_long(n), *a)\n"
    .. "    print(\"PROBE %s r=%d errno=%d\" % (name, r, ctypes.get_errno() if r < 0 else 0), flush=True)\n"
    .. body .. "\n'\n"
end

local EPERM, ENOSYS, ENOSPC = 1, 38, 28

local function expect(out, name, errno)
  T.contains(out, ("PROBE %s r=-1 errno=%d"):format(name, errno), "probe " .. name)
end

-- The sandbox answers after the attempt (a full file system or a denied call took nothing down).
local function alive()
  local r = A.rig(RIG.name, RIG.config)
  local out = A.exec_sh("echo alive-$((20+22))", 30, r)
  T.contains(out, "alive-42", "the sandbox still answers")
  local st = r.sandbox:stats()
  if st.oom_kills then T.eq(st.oom_kills, 0, "nothing in the sandbox was killed by the memory limit") end
end

-- Registers an attempt on this file's rig; `expects` = {{name, errno}, ...} checked in every vector.
local function attempt(a)
  a.class = a.class or 4
  a.rig = RIG
  local expects, extra = a.expects, a.check
  a.check = function(out, vector, res)
    for _, e in ipairs(expects or {}) do expect(out, e[1], e[2]) end
    if extra then extra(out, vector, res) end
    alive()
  end
  if a.lua then a.lua = LUA_PRELUDE .. a.lua end
  A.attack(a)
end

-- Runs Lua on the host in a fresh `seer -e` process, with or without the sandbox's filter.
local function host_lua(code, filtered)
  local pre = filtered and "assert(require('seer.core.sandbox').seccomp_install())\n" or ""
  local path = A.root .. "/control-" .. tostring(math.random(1e9)) .. ".lua"
  local f = assert(io.open(path, "wb"))
  f:write(pre, LUA_PRELUDE, code)
  f:close()
  local p = io.popen(("'%s' '%s' 2>&1"):format(SEER, path))
  local out = p:read("*a")
  p:close()
  os.remove(path)
  return out
end

local function probe_result(out, name)
  local r, e = out:match("PROBE " .. name:gsub("%p", "%%%0") .. " r=(%-?%d+) errno=(%d+)")
  return tonumber(r), tonumber(e)
end

if not X86_64 then
  T.test("seccomp attack suite", function() T.skip("the seccomp filter and these probes are x86_64 only") end)
  return
end

---------------------------------------------------------------------------------------------
-- class 4: the kernel's attack surface

-- A sandbox started by root runs as a user mapped to the host's root, and sysctl files check
-- only their owner: with /proc/sys writable, core_pattern = "|cmd" and a crash ran cmd as host root.
attempt{
  -- each setting is written with the value it has (a refused write changes nothing; one that
  -- gets through changes nothing either, so this check cannot harm the host it runs on)
  name = "write host kernel settings through /proc/sys (core_pattern, hostname, panic) and /proc/sysrq-trigger",
  sh = "exec 2>&1\ncat /proc/sys/kernel/core_pattern >/dev/null && echo SYSCTL-READABLE\n"
    .. "for f in kernel/core_pattern kernel/hostname kernel/panic; do\n"
    .. "  v=$(cat /proc/sys/$f)\n"
    .. "  if (printf '%s\\n' \"$v\" > /proc/sys/$f) 2>/dev/null; then echo \"WROTE $f\"; else echo \"refused $f\"; fi\ndone\n"
    .. "if [ -w /proc/sysrq-trigger ] && (: > /proc/sysrq-trigger) 2>/dev/null; then echo 'WROTE sysrq'; else echo 'refused sysrq'; fi\n",
  lua = [[
local ok = io.open("/proc/sys/kernel/core_pattern", "r")
if ok then ok:close() print("SYSCTL-READABLE") end
for _, f in ipairs({ "kernel/core_pattern", "kernel/hostname", "kernel/panic" }) do
  local r = io.open("/proc/sys/" .. f, "r")
  local v = r and r:read("*a") or ""
  if r then r:close() end
  local h = io.open("/proc/sys/" .. f, "w")
  local wrote = h and h:write(v) and h:close()
  print((wrote and "WROTE " or "refused ") .. f)
end
]],
  check = function(out)
    T.contains(out, "SYSCTL-READABLE", "the sandbox still reads its settings")
    T.ok(not out:find("WROTE"), "a host kernel setting was written from inside: " .. out)
    T.contains(out, "refused kernel/core_pattern")
  end,
}

attempt{
  name = "every process in the sandbox runs under the filter with no_new_privs",
  sh = "exec 2>&1\ngrep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; sh -c 'grep -E \"^Seccomp:\" /proc/self/status'",
  lua = [[for l in io.lines("/proc/self/status") do if l:match("^Seccomp") or l:match("^NoNewPrivs") then print(l) end end]],
  check = function(out)
    T.ok(out:match("Seccomp:%s+2"), "seccomp mode 2 (filter): " .. out)
    T.ok(out:match("NoNewPrivs:%s+1"), "no_new_privs: " .. out)
    T.ok(not out:match("Seccomp:%s+0"), "a process without the filter: " .. out)
  end,
}

attempt{
  name = "find a process inside without the filter (pid 1 included) and write its memory through /proc/PID/mem",
  sh = "exec 2>&1\nfor p in /proc/[0-9]*; do echo \"PROC $p $(grep '^Seccomp:' $p/status | tr -d '\\t')\"; done\n"
    .. "head -c 1 /proc/1/mem; echo pid1-mem-rc=$?\n"
    .. "/usr/bin/python3 -c 'open(\"/proc/1/mem\", \"r+b\"); print(\"PID1 MEM WRITABLE\")'\n",
  lua = [[
for _, e in ipairs(require("seer.core.sandbox").listdir("/proc")) do
  local f = e.name:match("^%d+$") and io.open("/proc/" .. e.name .. "/status")
  if f then
    local st = f:read("*a") f:close()
    print("PROC /proc/" .. e.name .. " Seccomp:" .. (st:match("Seccomp:%s*(%d)") or "?"))
  end
end
local m, err = io.open("/proc/1/mem", "r+b")
print(m and "PID1 MEM WRITABLE" or ("pid1 mem: " .. tostring(err)))
]],
  check = function(out)
    local n = 0
    for line in out:gmatch("PROC [^\n]*") do
      n = n + 1
      -- a process that ended between the listing and the read shows nothing
      T.ok(line:match("Seccomp:2$") or line:match("Seccomp:%??$"), "a process without the filter: " .. line)
    end
    T.ok(n >= 2, "the probe listed the sandbox's processes: " .. out)
    T.contains(out, "PROC /proc/1 Seccomp:2", "pid 1 (sandboxd) runs under the filter")
    T.ok(not out:find("PID1 MEM WRITABLE", 1, true), "pid 1's memory is writable: " .. out)
  end,
}

attempt{
  name = "read the host's session keyring (keyctl, request_key, add_key, /proc/keys)",
  sh = py(([[
probe("keyctl_read", 250, 11, %d, 0, 0)
probe("keyctl_session", 250, 0, -3, 0)
probe("request_key", 249, b"user", b"%s", None, 0)
probe("add_key", 248, b"user", b"planted", b"x", 1, -3)
]]):format(host_key or 1, KEY_DESC)) .. "cat /proc/keys /proc/key-users; echo keys-done\n",
  lua = ([[
local buf = ffi.new("char[256]")
probe("keyctl_read", 250, 11, %d, buf, 256)
probe("keyctl_session", 250, 0, -3, 0)
probe("request_key", 249, "user", %q, 0, 0)
probe("add_key", 248, "user", "planted", "x", 1, -3)
local f = io.open("/proc/keys") print("proc_keys", f and f:read("*a") or "unreadable")
]]):format(host_key or 1, KEY_DESC),
  expects = { { "keyctl_read", EPERM }, { "keyctl_session", EPERM }, { "request_key", EPERM }, { "add_key", EPERM } },
  check = function(out)
    T.ok(not out:find(KEY_DESC, 1, true), "the host key's description is visible inside")
    T.ok(not out:find(KEY_PAYLOAD, 1, true), "the host key's payload is readable inside")
    T.ok(not out:find("keyring   _", 1, true) and not out:find(" perm ", 1, true), "/proc/keys lists keys inside: " .. out)
  end,
}

attempt{
  name = "new namespaces: unshare -U/-m/-n/-p, raw unshare, clone with CLONE_NEW*, clone3, setns",
  sh = "exec 2>&1\nfor f in -U -m -n -p -i -u -C -T -r; do unshare $f true; echo \"unshare $f rc=$?\"; done\n"
    .. py([[
probe("unshare_user", 272, 0x10000000)
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
probe("setns", 308, fd, 0)
]]),
  lua = [[
probe("unshare_user", 272, 0x10000000)
probe("unshare_mount", 272, 0x00020000)
probe("unshare_net", 272, 0x40000000)
probe("unshare_time", 272, 0x00000080)
-- clone(CLONE_NEWUSER | SIGCHLD): were it allowed, the child leaves at once
local r = probe("clone_newuser", 56, 0x10000000 + 17, 0, 0, 0, 0)
if r == 0 then ffi.C._exit(0) end
r = probe("clone_newpid", 56, 0x20000000 + 17, 0, 0, 0, 0)
if r == 0 then ffi.C._exit(0) end
local args = ffi.new("uint64_t[11]") args[0] = 0x10000000 args[4] = 17
r = probe("clone3", 435, args, 88)
if r == 0 then ffi.C._exit(0) end
local fd = io.open("/proc/self/ns/net") and sc(2, "/proc/self/ns/net", 0)
probe("setns", 308, fd, 0)
]],
  check = function(out, vector)
    if vector:match("sh$") then
      for _, f in ipairs({ "-U", "-m", "-n", "-p", "-i", "-u", "-C", "-T", "-r" }) do
        T.contains(out, "unshare " .. f .. " rc=1", "unshare " .. f)
      end
      T.contains(out, "unshare failed: Operation not permitted")
      expect(out, "unshare_user", EPERM)
      expect(out, "setns", EPERM)
    else
      for _, n in ipairs({ "unshare_user", "unshare_mount", "unshare_net", "unshare_time", "clone_newuser", "clone_newpid", "setns" }) do
        expect(out, n, EPERM)
      end
      expect(out, "clone3", ENOSYS)
    end
  end,
}

attempt{
  name = "mount a file system (mount, umount2, pivot_root, chroot)",
  sh = py([[
os.makedirs("/tmp/m", exist_ok=True)
probe("mount", 165, b"none", b"/tmp/m", b"tmpfs", 0, None)
probe("bind", 165, b"/", b"/tmp/m", None, 4096, None)
probe("umount2", 166, b"/workspace", 2)
probe("pivot_root", 155, b"/tmp", b"/tmp/m")
probe("chroot", 161, b"/tmp")
]]),
  lua = [[
os.execute("mkdir -p /tmp/m")
probe("mount", 165, "none", "/tmp/m", "tmpfs", 0, 0)
probe("bind", 165, "/", "/tmp/m", 0, 4096, 0)
probe("umount2", 166, "/workspace", 2)
probe("pivot_root", 155, "/tmp", "/tmp/m")
probe("chroot", 161, "/tmp")
]],
  expects = { { "mount", EPERM }, { "bind", EPERM }, { "umount2", EPERM }, { "pivot_root", EPERM }, { "chroot", EPERM } },
}

attempt{
  name = "the new mount API (fsopen, fsconfig, fsmount, fspick, open_tree, move_mount, mount_setattr)",
  lua = [[
probe("fsopen", 430, "tmpfs", 0)
probe("fsconfig", 431, 3, 6, 0, 0, 0)
probe("fsmount", 432, 3, 0, 0)
probe("fspick", 433, -100, "/workspace", 0)
probe("open_tree", 428, -100, "/", 1)
probe("move_mount", 429, 3, "", -100, "/tmp", 4)
probe("mount_setattr", 442, -100, "/workspace", 0, 0, 0)
]],
  expects = { { "fsopen", EPERM }, { "fsconfig", EPERM }, { "fsmount", EPERM }, { "fspick", EPERM },
              { "open_tree", EPERM }, { "move_mount", EPERM }, { "mount_setattr", EPERM } },
}

-- A one-instruction socket filter (return 0), the simplest BPF_PROG_LOAD there is.
local BPF_LOAD = [[
local insns = ffi.new("uint64_t[2]")
insns[0] = 0x00000000000000b7ULL -- mov r0, 0
insns[1] = 0x0000000000000095ULL -- exit
local attr = ffi.new("uint8_t[128]")
local a32 = ffi.cast("uint32_t *", attr)
a32[0] = 1 -- BPF_PROG_TYPE_SOCKET_FILTER
a32[1] = 2 -- insn_cnt
ffi.cast("uint64_t *", attr + 8)[0] = ffi.cast("uintptr_t", insns)
ffi.cast("uint64_t *", attr + 16)[0] = ffi.cast("uintptr_t", ffi.cast("const char *", "GPL"))
probe("bpf_prog_load", 321, 5, attr, 128)
probe("bpf_map_create", 321, 0, attr, 128)
]]

attempt{
  name = "load a BPF program (bpf BPF_PROG_LOAD, BPF_MAP_CREATE)",
  lua = BPF_LOAD,
  expects = { { "bpf_prog_load", EPERM }, { "bpf_map_create", EPERM } },
}

local UFFD_IOURING_PERF = [[
probe("userfaultfd", 323, 1) -- UFFD_USER_MODE_ONLY
local params = ffi.new("uint8_t[120]")
probe("io_uring_setup", 425, 8, params)
probe("io_uring_enter", 426, 0, 1, 0, 0, 0, 0)
probe("io_uring_register", 427, 0, 0, 0, 0)
local pattr = ffi.new("uint32_t[32]")
pattr[0] = 1 -- PERF_TYPE_SOFTWARE
pattr[1] = 128 -- size
probe("perf_event_open", 298, pattr, 0, -1, -1, 0)
]]

attempt{
  name = "userfaultfd, io_uring and perf events (the usual kernel exploit primitives)",
  lua = UFFD_IOURING_PERF,
  sh = py([[
probe("userfaultfd", 323, 1)
probe("io_uring_setup", 425, 8, ctypes.create_string_buffer(120))
probe("perf_event_open", 298, ctypes.create_string_buffer(b"\x01\x00\x00\x00\x80" + b"\x00" * 123), 0, -1, -1, 0)
]]),
  check = function(out)
    for _, n in ipairs({ "userfaultfd", "io_uring_setup", "perf_event_open" }) do expect(out, n, EPERM) end
  end,
}

attempt{
  name = "ptrace sandboxd (pid 1), read another process's memory (process_vm_readv/writev, /proc/PID/mem of sandboxd), kcmp, pidfd_getfd",
  lua = [[
local p = io.popen("sleep 30 & echo $!")
local pid = tonumber(p:read("*l"))
-- sandboxd, the one trusted process inside, is not dumpable: the kernel refuses to attach
probe("ptrace_attach_pid1", 101, 16, 1, 0, 0)
probe("ptrace_seize_pid1", 101, 0x4206, 1, 0, 0)
-- a sibling (as untrusted as the tracer, and filtered too) may be traced, as under Docker:
-- LeakSanitizer and debuggers need it, and since Linux 4.8 a tracer cannot use its tracee to
-- get around the filter
local r = probe("ptrace_attach_sibling", 101, 16, pid, 0, 0)
if r == 0 then sc(61, pid, 0, 0, 0) probe("ptrace_detach_sibling", 101, 17, pid, 0, 0) end
local buf = ffi.new("char[64]")
local iov = ffi.new("uint64_t[2]") iov[0] = ffi.cast("uintptr_t", buf) iov[1] = 64
probe("process_vm_readv", 310, pid, iov, 1, iov, 1, 0)
probe("process_vm_writev", 311, pid, iov, 1, iov, 1, 0)
probe("kcmp", 312, pid, pid, 0, 0, 0)
probe("pidfd_getfd", 438, 0, 0, 0)
os.execute("kill " .. pid)
-- sandboxd holds the sandbox's key in memory; it is not dumpable, so its /proc files are closed
for _, e in ipairs(require("seer.core.sandbox").listdir("/proc")) do
  local f = e.name:match("^%d+$") and io.open("/proc/" .. e.name .. "/cmdline")
  local cmd = f and f:read("*a") or "" if f then f:close() end
  if cmd:match("^[^%z]*/seer%zsandboxd%z") then
    local m, err = io.open("/proc/" .. e.name .. "/mem", "rb")
    print("sandboxd_mem", m and "OPEN" or err)
    local env, err2 = io.open("/proc/" .. e.name .. "/environ", "rb")
    print("sandboxd_environ", env and (env:read("*a") or "EMPTY") ~= "" and "READ" or tostring(err2))
  end
end
]],
  expects = { { "ptrace_attach_pid1", EPERM }, { "ptrace_seize_pid1", EPERM },
              { "process_vm_readv", EPERM }, { "process_vm_writev", EPERM }, { "kcmp", EPERM }, { "pidfd_getfd", EPERM } },
  check = function(out)
    T.contains(out, "PROBE ptrace_attach_sibling r=0 errno=0", "control: ptrace itself works on a sibling")
    T.contains(out, "sandboxd_mem", "sandboxd was found")
    T.ok(not out:find("sandboxd_mem OPEN", 1, true) and not out:find("sandboxd_mem\tOPEN", 1, true), "sandboxd's memory opened: " .. out)
    T.ok(not out:find("sandboxd_environ\tREAD", 1, true), "sandboxd's environment read: " .. out)
  end,
}

-- int 0x80 from 64-bit code: the i386 ABI (getpid is 20 there), and the x32 ABI (bit 30).
local COMPAT = [[
local code = ffi.cast("uint8_t *", ffi.C.mmap(nil, 4096, 7, 0x22, -1, 0))
local bytes = { 0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3 } -- mov eax, 20; int 0x80; ret
for i, b in ipairs(bytes) do code[i - 1] = b end
local r = ffi.cast("int (*)(void)", code)()
print(("PROBE int80_getpid r=%d errno=%d"):format(r < 0 and -1 or r, r < 0 and -r or 0))
probe("x32_getpid", 0x40000000 + 39)
probe("x32_open", 0x40000000 + 2, "/etc/passwd", 0)
print("native_getpid", sc(39))
]]

attempt{
  name = "32-bit and x32 system calls (int 0x80 with i386 numbers, x32-flagged numbers)",
  lua = COMPAT,
  sh = py([[
import mmap
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
r = ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
print("PROBE int80_getpid r=%d errno=%d" % (-1 if r < 0 else r, -r if r < 0 else 0), flush=True)
probe("x32_getpid", 0x40000000 + 39)
]]),
  expects = { { "int80_getpid", EPERM }, { "x32_getpid", EPERM } },
  check = function(out, vector)
    if vector:match("lua$") then
      expect(out, "x32_open", EPERM)
      T.ok(out:match("native_getpid\t%d+\t0"), "the native ABI still works: " .. out)
    end
  end,
}

attempt{
  name = "load or replace the kernel (init_module, finit_module, delete_module, kexec_load, kexec_file_load, reboot)",
  lua = [[
probe("init_module", 175, "\127ELF", 4, "")
probe("finit_module", 313, 0, "", 0)
probe("delete_module", 176, "ext4", 0x800)
probe("kexec_load", 246, 0, 0, 0, 0)
probe("kexec_file_load", 320, 0, 0, 0, "", 4)
probe("reboot", 169, 0xfee1dead, 0x28121969, 0x4321fedc, 0)
]],
  expects = { { "init_module", EPERM }, { "finit_module", EPERM }, { "delete_module", EPERM }, { "kexec_load", EPERM },
              { "kexec_file_load", EPERM }, { "reboot", EPERM } },
}

attempt{
  name = "change the clock (clock_settime, settimeofday, adjtimex, clock_adjtime)",
  lua = [[
local ts = ffi.new("int64_t[2]") ts[0] = os.time()
probe("clock_settime", 227, 0, ts)
probe("settimeofday", 164, ts, 0)
local tx = ffi.new("uint8_t[208]")
ffi.cast("uint32_t *", tx)[0] = 0x0001 -- ADJ_OFFSET
probe("adjtimex", 159, tx)
probe("clock_adjtime", 305, 0, tx)
]],
  sh = "exec 2>&1\ndate -s '2001-01-01' ; echo date-rc=$?\n" .. py([[probe("settimeofday", 164, ctypes.create_string_buffer(16), None)]]),
  check = function(out, vector)
    if vector:match("lua$") then
      for _, n in ipairs({ "clock_settime", "settimeofday", "adjtimex", "clock_adjtime" }) do expect(out, n, EPERM) end
    else
      T.contains(out, "date-rc=1")
      expect(out, "settimeofday", EPERM)
    end
  end,
}

attempt{
  name = "the rest of the privileged list (swapon, acct, quotactl, syslog, vhangup, iopl, ioperm, uselib, ustat, sysfs, _sysctl, lookup_dcookie, nfsservctl, modify_ldt, name_to_handle_at, open_by_handle_at, fanotify_init, sethostname, NUMA policy)",
  lua = [[
local fh = ffi.new("uint8_t[136]") ffi.cast("uint32_t *", fh)[0] = 128
local mid = ffi.new("int[1]")
local list = {
  { "swapon", 167, "/workspace/swap", 0 }, { "swapoff", 168, "/workspace/swap" }, { "acct", 163, "/tmp/acct" },
  { "quotactl", 179, 0x800002, "/dev/null", 0, 0 }, { "quotactl_fd", 443, 0, 0, 0, 0 }, { "syslog", 103, 3, fh, 100 },
  { "vhangup", 153 }, { "iopl", 172, 3 }, { "ioperm", 173, 0x80, 1, 1 }, { "uselib", 134, "/lib/x86_64-linux-gnu/libc.so.6" },
  { "ustat", 136, 0, fh }, { "sysfs", 139, 3 }, { "_sysctl", 156, fh }, { "lookup_dcookie", 212, 0, fh, 64 },
  { "nfsservctl", 180, 0, 0, 0 }, { "modify_ldt", 154, 0, fh, 16 },
  { "name_to_handle_at", 303, -100, "/etc/passwd", fh, mid, 0 }, { "open_by_handle_at", 304, -100, fh, 0 },
  { "fanotify_init", 300, 0, 0 }, { "sethostname", 170, "host", 4 }, { "setdomainname", 171, "host", 4 },
  { "mbind", 237, 0, 0, 0, 0, 0, 0 }, { "set_mempolicy", 238, 0, 0, 0 }, { "migrate_pages", 256, 0, 0, 0, 0 },
  { "move_pages", 279, 0, 0, 0, 0, 0, 0 }, { "process_madvise", 440, 0, 0, 0, 0, 0 }, { "listmount", 458, 0, 0, 0, 0 },
  { "statmount", 457, 0, 0, 0, 0 }, { "personality_noaslr", 135, 0x0040000 }, { "personality_linux32", 135, 0x0008 },
}
for _, c in ipairs(list) do probe(unpack(c)) end
probe("personality_query", 135, 0xffffffff)
]],
  check = function(out)
    for _, n in ipairs({ "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup", "iopl", "ioperm", "uselib",
                         "ustat", "sysfs", "_sysctl", "lookup_dcookie", "nfsservctl", "modify_ldt", "name_to_handle_at",
                         "open_by_handle_at", "fanotify_init", "sethostname", "setdomainname", "mbind", "set_mempolicy",
                         "migrate_pages", "move_pages", "process_madvise", "listmount", "statmount", "personality_noaslr",
                         "personality_linux32" }) do
      expect(out, n, EPERM)
    end
    T.contains(out, "PROBE personality_query r=0 errno=0", "querying the persona is allowed")
  end,
}

attempt{
  name = "rare socket families (AF_ALG, AF_VSOCK, AF_PACKET, AF_KEY, AF_TIPC) and terminal injection (TIOCSTI)",
  lua = [[
probe("af_alg", 41, 38, 5, 0)
probe("af_vsock", 41, 40, 1, 0)
probe("af_packet", 41, 17, 3, 0)
probe("af_key", 41, 15, 3, 2)
probe("af_tipc", 41, 30, 2, 0)
probe("socketpair_tipc", 53, 30, 5, 0, ffi.new("int[2]"))
local c = ffi.new("char[1]", "x")
probe("tiocsti", 16, 0, 0x5412, c)
local r = probe("af_unix", 41, 1, 1, 0)
if r >= 0 then sc(3, r) end
r = probe("af_inet", 41, 2, 1, 0)
if r >= 0 then sc(3, r) end
]],
  expects = { { "af_alg", EPERM }, { "af_vsock", EPERM }, { "af_packet", EPERM }, { "af_key", EPERM }, { "af_tipc", EPERM },
              { "socketpair_tipc", EPERM }, { "tiocsti", EPERM } },
  check = function(out)
    T.ok(out:match("PROBE af_unix r=%d+ errno=0"), "AF_UNIX sockets still work: " .. out)
    T.ok(out:match("PROBE af_inet r=%d+ errno=0"), "AF_INET sockets still work: " .. out)
  end,
}

attempt{
  name = "syscalls newer than the filter's table get ENOSYS, so a newer libc falls back",
  lua = [[
probe("future_500", 500)
probe("future_1000", 1000)
probe("negative", -1)
]],
  expects = { { "future_500", ENOSYS }, { "future_1000", ENOSYS }, { "negative", EPERM } },
}

-- Setuid and setgid files. The sandbox's user is mapped to the uid that started seer, so as
-- root every file it makes in the workspace (a host folder) is owned by host root: a probe ran
-- `cp /bin/sh x; chmod 4755 x` and left -rwsr-xr-x root on the host, for anyone who runs it or
-- copies it with its mode. The filter refuses S_ISUID and S_ISGID in every call that sets a
-- mode (chmod, fchmod, fchmodat, fchmodat2; open, openat, creat with O_CREAT or O_TMPFILE;
-- mknod, mknodat), answers openat2 (whose mode is in memory) with ENOSYS, and the kernel
-- refuses file capabilities (nothing inside has CAP_SETFCAP). Each vector works in its own
-- folder of the workspace; the check looks at the workspace from the host.
local SETID_PROBES = [[
local function O(s) return tonumber(s, 8) end
sc(83, dir, O"755")
local function p(n) return dir .. "/" .. n end
for _, n in ipairs({ "rootsh", "plain" }) do local f = assert(io.open(p(n), "wb")) f:write("#!/bin/sh\n") f:close() end
probe("chmod_4755", 90, p"rootsh", O"4755")
probe("chmod_2755", 90, p"rootsh", O"2755")
local fd = sc(2, p"plain", 0)
probe("fchmod_6755", 91, fd, O"6755")
probe("fchmodat_4755", 268, -100, p"plain", O"4755")
probe("fchmodat2_2755", 452, -100, p"plain", O"2755", 0)
probe("open_creat_4755", 2, p"o1", O"101", O"4755")
probe("openat_creat_2755", 257, -100, p"o2", O"101", O"2755")
probe("openat_tmpfile_4755", 257, -100, dir, O"20200001", O"4755")
probe("creat_6755", 85, p"c1", O"6755")
probe("mknod_reg_4755", 133, p"n1", O"104755", 0)
probe("mknodat_reg_2755", 259, -100, p"n2", O"102755", 0)
local how = ffi.new("uint64_t[3]", O"101", O"4755", 0) -- struct open_how {flags, mode, resolve}
probe("openat2_creat_4755", 437, -100, p"o3", how, 24)
-- a version 2 file capability (CAP_SETUID, effective): the kernel wants CAP_SETFCAP for it
local cap = ffi.new("uint32_t[5]", 0x02000001, 0x80, 0, 0, 0)
probe("setxattr_capability", 188, p"plain", "security.capability", cap, 20, 0)
-- controls: ordinary modes still work
probe("chmod_0755", 90, p"rootsh", O"755")
probe("fchmod_0755", 91, fd, O"755")
probe("fchmodat_0644", 268, -100, p"plain", O"644")
probe("openat_creat_0755", 257, -100, p"ok", O"101", O"755")
probe("mknod_reg_0644", 133, p"n3", O"100644", 0)
probe("mkdir_6777", 83, p"md", O"6777")
probe("setxattr_user", 188, p"plain", "user.seer", "1", 1, 0)
sc(3, fd)
local st = io.popen("stat -c 'MODE %a %n' " .. dir .. "/*")
io.write(st:read("*a"))
st:close()
]]

-- The calls that would set a bit, with the answer each gets (the filter's EPERM; openat2 ENOSYS;
-- the capability: the kernel's EPERM).
local SETID_REFUSED = {
  { "chmod_4755", EPERM }, { "chmod_2755", EPERM }, { "fchmod_6755", EPERM }, { "fchmodat_4755", EPERM },
  { "fchmodat2_2755", EPERM }, { "open_creat_4755", EPERM }, { "openat_creat_2755", EPERM },
  { "openat_tmpfile_4755", EPERM }, { "creat_6755", EPERM }, { "mknod_reg_4755", EPERM },
  { "mknodat_reg_2755", EPERM }, { "openat2_creat_4755", ENOSYS },
}
local SETID_SH_REFUSED = {
  { "fchmod_4755", EPERM }, { "fchmodat_2755", EPERM }, { "fchmodat2_6755", EPERM }, { "open_creat_4755", EPERM },
  { "openat_creat_2755", EPERM }, { "openat_tmpfile_4755", EPERM }, { "creat_4755", EPERM },
  { "mknod_reg_4755", EPERM }, { "mknodat_reg_2755", EPERM }, { "openat2_creat_4755", ENOSYS },
  { "setxattr_capability", EPERM },
}

-- Fails on any file of the workspace (seen from the host) or any MODE line with S_ISUID/S_ISGID.
local function no_setid_anywhere(out)
  for mode, name in out:gmatch("MODE (%d+) (%S+)") do
    T.eq(bit.band(tonumber(mode, 8), tonumber("6000", 8)), 0, ("%s has mode %s inside"):format(name, mode))
  end
  local ws = A.rig(RIG.name, RIG.config).sandbox.workspace_dir
  local p = io.popen(("find '%s' -mindepth 1 -perm /6000 -printf '%%m %%u %%p\\n' 2>&1"):format(ws))
  local found = p:read("*a")
  p:close()
  T.eq(found, "", "setuid or setgid files the sandbox left in its workspace, as the host sees them")
end

attempt{
  name = "leave a setuid or setgid file on the host (chmod 4755/2755/u+s/g+s, install -m 4755, open/creat/mknod/O_TMPFILE/openat2 with S_ISUID, fchmod(at)(2), setcap)",
  sh = "exec 2>&1\nd=$(mktemp -d /workspace/setid-XXXXXX) && cd \"$d\" || exit 1\n"
    .. "cp /bin/true rootsh && : > plain && echo copied\n"
    .. "for m in 4755 2755 6755 u+s g+s; do chmod $m rootsh; echo \"chmod $m rc=$?\"; done\n"
    .. "mkdir sgdir && chmod g+s sgdir; echo \"chmod g+s dir rc=$?\"\n"
    .. "install -m 4755 /bin/true inst; echo \"install -m 4755 rc=$?\"\n"
    .. "/usr/sbin/setcap cap_setuid+ep rootsh; echo \"setcap rc=$?\"\n"
    .. "chmod 755 rootsh; echo \"chmod 755 rc=$?\"\n"
    .. py([[
import struct
S_IFREG = 0o100000
fd = os.open("plain", os.O_RDONLY)
probe("fchmod_4755", 91, fd, 0o4755)
probe("fchmodat_2755", 268, -100, b"plain", 0o2755)
probe("fchmodat2_6755", 452, -100, b"plain", 0o6755, 0)
probe("open_creat_4755", 2, b"o1", os.O_CREAT | os.O_WRONLY, 0o4755)
probe("openat_creat_2755", 257, -100, b"o2", os.O_CREAT | os.O_WRONLY, 0o2755)
probe("openat_tmpfile_4755", 257, -100, b".", os.O_TMPFILE | os.O_WRONLY, 0o4755)
probe("creat_4755", 85, b"c1", 0o4755)
probe("mknod_reg_4755", 133, b"n1", S_IFREG | 0o4755, 0)
probe("mknodat_reg_2755", 259, -100, b"n2", S_IFREG | 0o2755, 0)
how = ctypes.create_string_buffer(struct.pack("<QQQ", os.O_CREAT | os.O_WRONLY, 0o4755, 0))
probe("openat2_creat_4755", 437, -100, b"o3", how, 24)
cap = struct.pack("<IIIII", 0x02000001, 0x80, 0, 0, 0)
probe("setxattr_capability", 188, b"plain", b"security.capability", cap, len(cap), 0)
probe("fchmod_0755", 91, fd, 0o755)
probe("fchmodat_0644", 268, -100, b"plain", 0o644)
probe("openat_creat_0755", 257, -100, b"ok", os.O_CREAT | os.O_WRONLY, 0o755)
probe("mknod_reg_0644", 133, b"n3", S_IFREG | 0o644, 0)
probe("mkdir_6777", 83, b"md", 0o6777)
probe("setxattr_user", 188, b"plain", b"user.seer", b"1", 1, 0)
]]) .. "stat -c 'MODE %a %n' *\n",
  lua = "local dir = ('/workspace/setid-lua-%d'):format(sc(39))\n" .. SETID_PROBES,
  teardown = function(_, r) r.sandbox:exec({ "/bin/sh", "-c", "rm -rf /workspace/setid-*" }, { timeout = 30 }) end,
  check = function(out, vector)
    local sh = vector:match("sh$")
    for _, e in ipairs(sh and SETID_SH_REFUSED or SETID_REFUSED) do expect(out, e[1], e[2]) end
    if sh then
      T.contains(out, "copied")
      for _, m in ipairs({ "4755", "2755", "6755", "u+s", "g+s" }) do T.contains(out, "chmod " .. m .. " rc=1") end
      T.contains(out, "chmod g+s dir rc=1")
      T.contains(out, "install -m 4755 rc=1")
      T.ok(out:find("setcap rc=", 1, true) and not out:find("setcap rc=0", 1, true), "setcap: " .. out)
      T.contains(out, "chmod 755 rc=0", "an ordinary chmod still works")
    else
      expect(out, "setxattr_capability", EPERM)
      T.contains(out, "PROBE chmod_0755 r=0 errno=0")
    end
    for _, n in ipairs({ "fchmod_0755", "fchmodat_0644", "mknod_reg_0644", "mkdir_6777" }) do
      T.contains(out, "PROBE " .. n .. " r=0 errno=0", "an ordinary mode still works")
    end
    T.ok(out:match("PROBE openat_creat_0755 r=%d+ errno=0"), "an ordinary O_CREAT still works: " .. out)
    -- user.* attributes are allowed (EOPNOTSUPP where the file system has none)
    T.ok(out:match("PROBE setxattr_user r=0 errno=0") or out:match("PROBE setxattr_user r=%-1 errno=95"),
         "setxattr user.*: " .. out)
    T.ok(out:match("MODE 755 [^\n]*rootsh"), "the chmod 755 control shows: " .. out)
    T.ok(out:match("MODE %d+ [^\n]*md\n"), "mkdir made its folder: " .. out)
    no_setid_anywhere(out)
  end,
}

-- What the set-id refusal must leave working: ordinary modes through cp, install, chmod, tar,
-- Python and pip (run by the control test below, in the rig's workspace).
local ORDINARY_FILE_WORK = [[exec 2>&1
d=$(mktemp -d /workspace/legit-XXXXXX) && cd "$d" || exit 1
mkdir -p src/sub && printf 'hi\n' > src/a.txt && cp /bin/true src/tool && chmod 755 src/tool && chmod 700 src/sub && echo made-ok
cp -a src copy-a && cp -p src/tool tool-p && cp -r src copy-r && echo cp-ok
install -m 755 /bin/true inst && install -d -m 750 idir && echo install-ok
mkdir -p -m 775 mdir && chmod -R u+rwX,go+rX copy-r && chmod 1777 mdir && chmod 644 src/a.txt && chmod 755 . && echo chmod-ok
tar -cf a.tar src && mkdir x xp && tar -xf a.tar -C x && tar -xpf a.tar -C xp && echo tar-ok
/usr/bin/python3 - <<'PY'
import os, shutil, tarfile, io, zipfile, subprocess, sys
open("p.txt", "w").write("x"); os.chmod("p.txt", 0o755); shutil.copy2("p.txt", "p2.txt"); shutil.copytree("src", "src-py")
print("python-ok")
# an archive with a setuid member, extracted as tar does by default for a user that is not root
t = tarfile.open("suid.tar", "w")
ti = tarfile.TarInfo("suidfile"); data = b"#!/bin/sh\n"; ti.size = len(data); ti.mode = 0o4755
t.addfile(ti, io.BytesIO(data)); t.close()
with zipfile.ZipFile("demo-0.1-py3-none-any.whl", "w") as z:
    z.writestr("demo/__init__.py", "X = 1\n")
    s = zipfile.ZipInfo("demo-0.1.data/scripts/demo-tool"); s.external_attr = 0o100755 << 16
    z.writestr(s, "#!python\nprint('tool')\n")
    z.writestr("demo-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 0.1\n")
    z.writestr("demo-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: x\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("demo-0.1.dist-info/RECORD", "")
r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-cache-dir",
                    "--disable-pip-version-check", "--target", "pipt", "demo-0.1-py3-none-any.whl"], capture_output=True, text=True)
print("pip rc=%d %s" % (r.returncode, r.stderr[-600:]))
r = subprocess.run([sys.executable, "-m", "venv", "--without-pip", "venv"], capture_output=True, text=True)
print("venv rc=%d %s" % (r.returncode, r.stderr[-600:]))
PY
mkdir xs && tar -xf suid.tar -C xs; echo "tar-suid rc=$?"
venv/bin/python -c 'print("venv-python-ok")'
PYTHONPATH=pipt pipt/bin/demo-tool
stat -c 'MODE %a %n' x/src/tool xp/src/tool xp/src/sub inst idir mdir copy-a/tool copy-a/sub tool-p p2.txt xs/suidfile pipt/bin/demo-tool
cd / && rm -rf "$d" && echo cleaned
]]

---------------------------------------------------------------------------------------------
-- class 6: exhaustion through files

-- Fills a path with 1 MiB writes until the kernel says no; prints the error and the size reached.
local function fill_lua(path)
  return ([[
local f = assert(io.open(%q, "wb"))
local chunk = string.rep("x", 1048576)
local n, err = 0
while n < 4096 do
  local ok, e = f:write(chunk)
  if ok then ok, e = f:flush() end
  if not ok then err = e break end
  n = n + 1
end
f:close()
os.remove(%q)
print("FILL", n, "MiB", tostring(err))
]]):format(path, path)
end

local function fill_sh(path)
  return ("exec 2>&1\ndd if=/dev/zero of=%s bs=1M count=4096; echo dd-rc=$?; rm -f %s\n"):format(path, path)
end

local function fill_check(max_mib)
  return function(out, vector)
    T.contains(out, "No space left on device", "the writer gets ENOSPC")
    if vector:match("lua$") then
      local n = tonumber(out:match("FILL\t(%d+)"))
      T.ok(n and n <= max_mib, ("wrote %s MiB, more than the %d MiB the file system has"):format(tostring(n), max_mib))
    else
      T.contains(out, "dd-rc=1")
    end
  end
end

attempt{
  class = 6,
  name = "fill /tmp: ENOSPC at its size (25% of memory), not an out-of-memory kill of the sandbox",
  sh = fill_sh("/tmp/fill"), lua = fill_lua("/tmp/fill"), timeout = 120,
  check = fill_check(256),
}

attempt{
  class = 6,
  name = "fill /dev/shm: ENOSPC at its size (12.5% of memory); /dev itself is read-only",
  sh = fill_sh("/dev/shm/fill") .. "echo x > /dev/fill; echo devw-rc=$?\n", lua = fill_lua("/dev/shm/fill"), timeout = 120,
  check = function(out, vector)
    fill_check(128)(out, vector)
    if vector:match("sh$") then
      T.contains(out, "devw-rc=")
      T.ok(out:match("Read%-only file system"), "/dev is read-only: " .. out)
    end
  end,
}

if IS_ROOT then
  attempt{
    class = 6,
    name = "fill the workspace past limits.disk: ENOSPC, the host's disk untouched",
    sh = fill_sh("/workspace/fill"), lua = fill_lua("/workspace/fill"), timeout = 120,
    check = fill_check(96),
  }
  attempt{
    class = 6,
    name = "fill /run/seer and /var/log/seer (host-visible, same limits.disk budget): ENOSPC",
    sh = fill_sh("/run/seer/fill") .. fill_sh("/var/log/seer/fill"),
    check = function(out)
      local _, n = out:gsub("No space left on device", "")
      T.ok(n >= 2, "both writers get ENOSPC: " .. out)
    end,
    vectors = { "exec/sh", "kernel/sh" }, timeout = 120,
  }
end

---------------------------------------------------------------------------------------------
-- controls: the same probes on the host, without and with the filter

T.test("control: the probes work (or fail differently) on the host without the filter, and get EPERM with it", function()
  local code = BPF_LOAD .. UFFD_IOURING_PERF .. [[
probe("mount_badptr", 165, 0, ffi.cast("void *", 1), 0, 0, 0)
probe("clock_settime_badptr", 227, 0, ffi.cast("void *", 1))
probe("name_to_handle_at_badptr", 303, -100, ffi.cast("void *", 1), 0, 0, 0)
probe("socket_alg", 41, 38, 5, 0)
probe("personality_noaslr", 135, 0x0040000)
probe("x32_getpid", 0x40000000 + 39)
probe("clone3_null", 435, 0, 0)
]]
  local plain, filtered = host_lua(code, false), host_lua(code, true)
  local names = { "bpf_prog_load", "bpf_map_create", "userfaultfd", "io_uring_setup", "perf_event_open", "mount_badptr",
                  "clock_settime_badptr", "name_to_handle_at_badptr", "socket_alg", "personality_noaslr", "x32_getpid" }
  local differs = 0
  for _, n in ipairs(names) do
    local r, e = probe_result(filtered, n)
    T.eq({ r, e }, { -1, EPERM }, "with the filter on the host: " .. n .. "\n" .. filtered)
    local pr, pe = probe_result(plain, n)
    T.ok(pr ~= nil, "the plain probe ran: " .. n .. "\n" .. plain)
    if not (pr == -1 and pe == EPERM) then differs = differs + 1 end
  end
  T.eq({ probe_result(filtered, "clone3_null") }, { -1, ENOSYS })
  T.ne({ probe_result(plain, "clone3_null") }, { -1, ENOSYS }, "plain clone3 reaches the kernel")
  -- Without the filter the kernel looks at the arguments (EFAULT for a bad pointer) or does the
  -- work; every one of these differs from the filter's EPERM on a normal kernel, even unprivileged.
  for _, n in ipairs({ "mount_badptr", "clock_settime_badptr", "name_to_handle_at_badptr", "x32_getpid",
                       "personality_noaslr" }) do
    local pr, pe = probe_result(plain, n)
    T.ok(not (pr == -1 and pe == EPERM), ("%s without the filter: r=%s errno=%s"):format(n, tostring(pr), tostring(pe)))
  end
  T.ok(differs >= 8, ("only %d of %d probes behave differently without the filter:\n%s"):format(differs, #names, plain))
end)

T.test("control: the set-id probes set the bits on the host without the filter, and get EPERM (openat2: ENOSYS) with it", function()
  local base = A.root .. "/setid-control"
  local function run(filtered)
    local dir = base .. (filtered and "/filtered" or "/plain")
    os.execute(("mkdir -p '%s'"):format(base))
    local out = host_lua(("local dir = %q\n"):format(dir) .. SETID_PROBES, filtered)
    local p = io.popen(("find '%s' -mindepth 1 -perm /6000 -printf '%%f\n' | sort"):format(dir))
    local setid = p:read("*a")
    p:close()
    return out, setid
  end
  local plain, plain_setid = run(false)
  local filtered, filtered_setid = run(true)
  os.execute(("rm -rf '%s'"):format(base))
  -- without the filter every probe does what it asks: a file with the bit (or, for O_TMPFILE,
  -- an unnamed one: a descriptor)
  for _, e in ipairs(SETID_REFUSED) do
    local r, errno = probe_result(plain, e[1])
    -- a kernel older than the call (fchmodat2: 6.6, openat2: 5.6) says ENOSYS
    local too_old = r == -1 and errno == ENOSYS and (e[1]:match("^fchmodat2") or e[1]:match("^openat2"))
    T.ok(too_old or (r and r >= 0 and errno == 0),
         ("%s without the filter: r=%s errno=%s\n%s"):format(e[1], tostring(r), tostring(errno), plain))
  end
  for _, f in ipairs({ "c1", "n1", "n2", "o1", "o2" }) do
    T.ok(plain_setid:find(f .. "\n", 1, true), ("without the filter %s has the bit: %s"):format(f, plain_setid))
  end
  -- root holds CAP_SETFCAP on the host: the capability probe is well formed, so the sandbox's
  -- EPERM is the kernel refusing a process without it
  if IS_ROOT then T.contains(plain, "PROBE setxattr_capability r=0 errno=0") end
  for _, e in ipairs(SETID_REFUSED) do
    T.eq({ probe_result(filtered, e[1]) }, { -1, e[2] }, "with the filter on the host: " .. e[1] .. "\n" .. filtered)
  end
  T.eq(filtered_setid, "", "with the filter no file has a set-id bit")
  for _, n in ipairs({ "chmod_0755", "fchmod_0755", "fchmodat_0644", "mknod_reg_0644", "mkdir_6777" }) do
    T.contains(filtered, "PROBE " .. n .. " r=0 errno=0", "ordinary modes with the filter")
  end
end)

T.test("control: ordinary file work runs under the filter (cp -a/-p, install, chmod, tar -x, Python, pip, venv)", function()
  local r = A.rig(RIG.name, RIG.config)
  local out = A.exec_sh(ORDINARY_FILE_WORK, 120, r)
  for _, s in ipairs({ "made-ok", "cp-ok", "install-ok", "chmod-ok", "tar-ok", "python-ok", "pip rc=0", "venv rc=0",
                       "tar-suid rc=0", "venv-python-ok", "\ntool\n", "cleaned" }) do
    T.contains(out, s, "an ordinary operation failed")
  end
  for _, m in ipairs({ "755 x/src/tool", "755 xp/src/tool", "700 xp/src/sub", "755 inst", "750 idir", "1777 mdir",
                       "755 copy-a/tool", "700 copy-a/sub", "755 tool-p", "755 p2.txt", "755 pipt/bin/demo-tool",
                       -- tar gives a member's set-id bits only with -p (then: EPERM, and tar says so)
                       "755 xs/suidfile" }) do
    T.contains(out, "MODE " .. m, "modes as asked")
  end
end)

T.test("control: int 0x80 reaches the i386 ABI on the host without the filter", function()
  local plain, filtered = host_lua(COMPAT, false), host_lua(COMPAT, true)
  local r = probe_result(plain, "int80_getpid")
  if r == -1 then T.skip("this kernel has no i386 emulation (IA32_EMULATION off): int 0x80 fails anyway") end
  T.ok(r and r > 0, "int 0x80 getpid returned the pid on the host: " .. plain)
  T.eq({ probe_result(filtered, "int80_getpid") }, { -1, EPERM }, filtered)
end)

T.test("control: the host key is readable by a process holding the session keyring, not after a fresh one", function()
  if not host_key then T.skip("this process could not add a key to its session keyring") end
  local code = ([[
local buf = ffi.new("char[256]")
local r = probe("keyctl_read", 250, 11, %d, buf, 256)
if r > 0 then print("PAYLOAD " .. ffi.string(buf, r)) end
]]):format(host_key)
  T.contains(host_lua(code, false), "PAYLOAD " .. KEY_PAYLOAD, "the probe reads the key where the keyring is shared")
  local fresh = host_lua("assert(require('seer.core.sandbox').keyring_new_session())\n" .. code, false)
  T.ok(not fresh:find(KEY_PAYLOAD, 1, true), "readable after joining a fresh session keyring: " .. fresh)
  local r, e = probe_result(fresh, "keyctl_read")
  T.eq(r, -1)
  T.ok(e == 13 or e == 126, "EACCES or ENOKEY without possession, not " .. tostring(e))
end)

T.test("control: the filter leaves the sandbox's own work running (threads, fork/exec, git, python, sockets, AMX permission)", function()
  local r = A.rig(RIG.name, RIG.config)
  local out = A.exec_sh([[exec 2>&1
git init -q /tmp/g && cd /tmp/g && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && echo git-ok
/usr/bin/python3 -c 'import threading, multiprocessing, socket; t = threading.Thread(target=print, args=("thread-ok",)); t.start(); t.join(); print("shm-ok" if multiprocessing.Lock() else ""); s = socket.socket(socket.AF_INET6); print("inet6-ok")'
]], 60, r)
  T.contains(out, "git-ok")
  T.contains(out, "thread-ok")
  T.contains(out, "shm-ok")
  T.contains(out, "inet6-ok")
  -- arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): the AMX kernels ask for it; on a CPU
  -- without AMX the kernel says EINVAL/EOPNOTSUPP, never the filter's EPERM.
  local amx = A.exec_lua(LUA_PRELUDE .. [[
probe("arch_prctl_amx", 158, 0x1023, 18)
local t = require("seer.tensor")
local a = t.randn({64, 64})
print("matmul", a:matmul(a):size(1))
]], 60, r)
  T.ok(not amx:find("PROBE arch_prctl_amx r=-1 errno=1\n", 1, true), "arch_prctl(ARCH_REQ_XCOMP_PERM) denied: " .. amx)
  T.contains(amx, "matmul\t64")
end)

T.test("sandboxd is pid 1 and reaps orphaned processes (no zombies pile up)", function()
  local r = A.rig(RIG.name, RIG.config)
  for _ = 1, 5 do A.exec_sh("setsid sh -c 'sleep 0.2' >/dev/null 2>&1 < /dev/null &", 10, r) end
  local process = require "seer.process"
  local out
  local deadline = process.now_ms() + 8000
  repeat
    process.sleep_ms(300)
    out = A.exec_sh("grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l; grep -c . /proc/1/cmdline >/dev/null; tr '\\0' ' ' < /proc/1/cmdline", 10, r)
  until out:match("^0\n") or process.now_ms() > deadline
  T.ok(out:match("^0\n"), "zombies left: " .. out)
  T.contains(out, "sandboxd", "pid 1 is sandboxd")
end)

if IS_ROOT then
  T.test("limits.disk: a script killed with -9 leaves no mounted image, no image file, no state directory", function()
    local process = require "seer.process"
    local dirs = A.root .. "/killed"
    local script = dirs .. "/owner.lua"
    os.execute("mkdir -p " .. dirs)
    local f = assert(io.open(script, "wb"))
    f:write([[
local env = require "seer.environment"
local s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli", limits = { disk = "32M" } }):start{ name = "diskowner" }
s:exec("head -c 1000000 /dev/zero > /workspace/data")
print(s.state_dir .. " " .. s.disk_image); io.stdout:flush()
require("seer.process").sleep_ms(60000)
]])
    f:close()
    local child = process.spawn{ argv = { SEER, script }, stdout = "pipe", stderr = "null",
                                 env = { SEER_SANDBOX_DIR = dirs .. "/sb", SEER_CACHE_DIR = dirs .. "/cache" } }
    local line = child:read_line(30000)
    local dir, img = (line or ""):match("^(%S+) (%S+)$")
    T.ok(dir and img, "the script did not start its sandbox: " .. tostring(line))
    local function mounted() return io.open("/proc/self/mountinfo"):read("*a"):find(dir, 1, true) ~= nil end
    T.ok(mounted(), "control: the image is mounted while the sandbox runs")
    T.ok(io.open(img, "rb") ~= nil, "control: the image file exists")
    child:kill(9)
    child:wait(10000)
    local deadline = process.now_ms() + 10000
    while process.now_ms() < deadline and (mounted() or sb.listdir(dir) or io.open(img, "rb")) do process.sleep_ms(20) end
    T.ok(not mounted(), "the image is still mounted at " .. dir)
    T.ok(sb.listdir(dir) == nil, "the state directory is left behind")
    T.ok(io.open(img, "rb") == nil, "the image file is left behind: " .. img)
  end)
end

if not IS_ROOT then
  T.test("limits.disk without root: start() refuses with the reason, never runs without the limit", function()
    local env = require "seer.environment"
    local ok, err = pcall(function()
      return env.Sandbox(env.SandboxConfig{ limits = { disk = "64M" }, execution_mode = "cli" }):start{ name = "nodisk" }
    end)
    T.eq(ok, false)
    T.contains(tostring(err), "limits.disk needs root")
  end)
end

T.test("seccomp attack suite: the rig ends cleanly", function()
  local r = A.rig(RIG.name, RIG.config)
  local dir = r.sandbox.state_dir
  if r.session then pcall(r.session.terminate, r.session) end
  r.sandbox:terminate()
  local mounts = io.open("/proc/self/mountinfo"):read("*a")
  T.ok(not mounts:find(dir, 1, true), "limits.disk's image is still mounted at " .. dir)
  T.ok(sb.listdir(dir) == nil, "the state directory is gone")
end)
