-- The attack suite, class 2 (docs/security.md): the host following paths the sandbox controls.
-- Code inside plants a symlink, a fifo or a swap in a folder the host also reads or writes (the
-- workspace, the run folder, the log folder, an output folder inside the workspace), then the
-- check triggers the host operation that would follow it: workspace:install of a library, a
-- skill, a file or a directory, sandbox:logs and `seer sandbox logs`, a snapshot and a restore,
-- the RPC connection file and uploads, the notebook writer, the notebook server's exit-file
-- check, the state folder's removal. Each asserts the host canary is unchanged and nothing of
-- it reached the sandbox; each plant is verified from the host (so a broken probe cannot
-- pass), and controls show the same host operation works when nothing is planted.
local T = require "testing"
local A = require "attack"
local ws = require "seer.workspace"
local safe_fs = require "seer.safe_fs"
local S = require "seer.sandbox"
local env = require "seer.environment"
local process = require "seer.process"

local first = A.count() -- attempts other attack files registered before this one
local C = A.canary_dir
local SECRET = A.canary_files["secret.txt"]:gsub("\n$", "")

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function tag(v) return (v:gsub("[^%w]", "-")) end

-- A plant as a shell script and as Lua (ffi symlink/mkfifo), from a list of steps:
-- {"rm", p}, {"mkdir", p}, {"link", target, p}, {"fifo", p}, {"write", p, text}; prints PLANTED.
local function plant_sh(steps)
  local out = {}
  for _, s in ipairs(steps) do
    if s[1] == "rm" then out[#out + 1] = "rm -rf " .. q(s[2])
    elseif s[1] == "mkdir" then out[#out + 1] = "mkdir -p " .. q(s[2])
    elseif s[1] == "link" then out[#out + 1] = "ln -s " .. q(s[2]) .. " " .. q(s[3])
    elseif s[1] == "fifo" then out[#out + 1] = "mkfifo " .. q(s[2])
    elseif s[1] == "write" then out[#out + 1] = "printf %s " .. q(s[3]) .. " > " .. q(s[2]) end
  end
  out[#out + 1] = "echo PLANTED"
  return table.concat(out, " && ")
end

local function plant_lua(steps)
  local out = { [[local ffi = require "ffi"
pcall(ffi.cdef, "int symlink(const char *t, const char *p); int mkfifo(const char *p, unsigned m);")
local function ok(rc, what) if rc ~= 0 then error(what .. " failed, errno " .. ffi.errno()) end end]] }
  for _, s in ipairs(steps) do
    if s[1] == "rm" then out[#out + 1] = ("os.execute(%q)"):format("rm -rf " .. q(s[2]))
    elseif s[1] == "mkdir" then out[#out + 1] = ("os.execute(%q)"):format("mkdir -p " .. q(s[2]))
    elseif s[1] == "link" then out[#out + 1] = ("ok(ffi.C.symlink(%q, %q), 'symlink')"):format(s[2], s[3])
    elseif s[1] == "fifo" then out[#out + 1] = ("ok(ffi.C.mkfifo(%q, 420), 'mkfifo')"):format(s[2])
    elseif s[1] == "write" then out[#out + 1] = ("do local f = assert(io.open(%q, 'wb')) f:write(%q) f:close() end"):format(s[2], s[3]) end
  end
  out[#out + 1] = "print('PLANTED')"
  return table.concat(out, "\n")
end

-- sh and lua payload functions for a plant whose steps depend on the vector's tag.
local function plant(steps_of)
  return function(v) return plant_sh(steps_of(tag(v))) end, function(v) return plant_lua(steps_of(tag(v))) end
end

local function host_type(path) local st = safe_fs.lstat(path) return st and st.type end

-- The plant took effect: out says so and the host sees the planted thing.
local function planted(out, path, kind)
  T.contains(out, "PLANTED", "the plant ran")
  T.eq(host_type(path), kind, "the host sees the planted " .. kind .. " at " .. path)
end

local function no_secret(text, what)
  T.ok(not tostring(text):find(SECRET, 1, true), what .. ": the host secret leaked: " .. tostring(text):sub(1, 300))
end

local function wsdir(r) return r.sandbox.workspace_dir end

local function rm_host(root, rel) root:remove_tree(rel) end

---------------------------------------------------------------------------------------------
-- workspace:install

do
  local sh, lua = plant(function(t) return { { "rm", "/workspace/evillib-" .. t }, { "link", C, "/workspace/evillib-" .. t } } end)
  A.attack{ name = "workspace:install of a library through a planted directory symlink", class = 2, sh = sh, lua = lua,
    check = function(out, v, _)
      local r = A.rig()
      planted(out, wsdir(r) .. "/evillib-" .. tag(v), "link")
      local lib = ws.Library{ name = "evillib", files = { ["evillib-" .. tag(v) .. "/pwned.lua"] = "return 'pwned'" } }
      T.raises(function() ws.Workspace{ libraries = { lib } }:install(wsdir(r)) end, "refusing to follow a symlink planted in the workspace", true)
      -- control: the same library installs into a folder without the link
      local ctl = T.tmpdir()
      ws.Workspace{ libraries = { lib } }:install(ctl)
      T.eq(host_type(ctl .. "/evillib-" .. tag(v) .. "/pwned.lua"), "file", "control: the library installs without the link")
    end,
    teardown = function(v, r) rm_host(safe_fs.root(wsdir(r)), "evillib-" .. tag(v)) end }
end

do
  local sh, lua = plant(function() return { { "rm", "/workspace/.claude" }, { "link", C, "/workspace/.claude" } } end)
  A.attack{ name = "workspace:install of a skill through a planted .claude symlink", class = 2, sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      planted(out, wsdir(r) .. "/.claude", "link")
      local sk = ws.Skill{ name = "evil-" .. tag(v), description = "writes into the host" }
      T.raises(function() ws.Workspace{ skills = { sk } }:install(wsdir(r)) end, "refusing to follow a symlink", true)
      local ctl = T.tmpdir()
      ws.Workspace{ skills = { sk } }:install(ctl)
      T.eq(host_type(ctl .. "/.claude/skills/evil-" .. tag(v) .. "/SKILL.md"), "file", "control: the skill installs without the link")
    end,
    teardown = function(_, r) rm_host(safe_fs.root(wsdir(r)), ".claude") end }
end

do
  local sh, lua = plant(function(t) return { { "rm", "/workspace/evilmod_" .. t .. ".lua" }, { "link", C .. "/notes.md", "/workspace/evilmod_" .. t .. ".lua" } } end)
  A.attack{ name = "workspace:install of a library file pre-planted as a symlink to a host file", class = 2, sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      local name = "evilmod_" .. tag(v):gsub("-", "_")
      local p = wsdir(r) .. "/evilmod_" .. tag(v) .. ".lua"
      planted(out, p, "link")
      local lib = ws.Library{ name = "x", files = { ["evilmod_" .. tag(v) .. ".lua"] = "return '" .. name .. "'" } }
      ws.Workspace{ libraries = { lib } }:install(wsdir(r))
      -- the link was replaced by the library's file, not written through
      T.eq(host_type(p), "file", "the planted link is replaced by a regular file")
      T.eq(r.sandbox:read_file("evilmod_" .. tag(v) .. ".lua"), "return '" .. name .. "'")
    end,
    teardown = function(v, r) safe_fs.root(wsdir(r)):unlink("evilmod_" .. tag(v) .. ".lua") end }
end

do
  local sh, lua = plant(function(t) return { { "rm", "/workspace/data-" .. t }, { "link", C, "/workspace/data-" .. t } } end)
  A.attack{ name = "workspace local_dirs and local_files copied through a planted symlink", class = 2, sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      planted(out, wsdir(r) .. "/data-" .. tag(v), "link")
      local src = T.tmpdir()
      local f = assert(io.open(src .. "/prompts.json", "wb")) f:write("[]") f:close()
      T.raises(function() ws.Workspace{ local_dirs = { { src, "data-" .. tag(v) } } }:install(wsdir(r)) end, "refusing to follow a symlink", true)
      T.raises(function() ws.Workspace{ local_files = { { src .. "/prompts.json", "data-" .. tag(v) .. "/p.json" } } }:install(wsdir(r)) end,
        "refusing to follow a symlink", true)
      T.raises(function() ws.Workspace{ local_files = { { src .. "/prompts.json", C .. "/p.json" } } }:install(wsdir(r)) end,
        "outside the workspace", true)
      local ctl = T.tmpdir()
      ws.Workspace{ local_dirs = { { src, "data-" .. tag(v) } } }:install(ctl)
      T.eq(host_type(ctl .. "/data-" .. tag(v) .. "/prompts.json"), "file", "control: the directory copies without the link")
    end,
    teardown = function(v, r) rm_host(safe_fs.root(wsdir(r)), "data-" .. tag(v)) end }
end

-- A directory and a symlink swapped in a loop while the host installs: whatever the timing,
-- nothing lands in the canary.
A.attack{ name = "TOCTOU: a workspace directory swapped with a symlink in a loop during install", class = 2,
  vectors = { "exec/sh", "kernel/sh" },
  sh = function(v)
    local d = "/workspace/race-" .. tag(v)
    return ("(end=$(( $(date +%%s) + 30 )); while [ $(date +%%s) -lt $end ]; do for i in 1 2 3 4 5 6 7 8 9 10; do "
      .. "rm -rf %s; mkdir %s; rm -rf %s; ln -s %s %s; done; done) >/dev/null 2>&1 </dev/null & echo $! > /tmp/race-%s.pid; echo PLANTED")
      :format(q(d), q(d), q(d), q(C), q(d), tag(v))
  end,
  check = function(out, v)
    local r = A.rig()
    T.contains(out, "PLANTED")
    local lib = ws.Library{ name = "race", files = { ["race-" .. tag(v) .. "/m.lua"] = "return 1" } }
    local refused, landed = 0, 0
    local t0 = process.now_ms()
    while process.now_ms() - t0 < 4000 do
      local ok, err = pcall(ws.Workspace{ libraries = { lib } }.install, ws.Workspace{ libraries = { lib } }, wsdir(r))
      if ok then landed = landed + 1
      else
        refused = refused + 1
        local e = tostring(err):lower()
        T.ok(e:find("symlink", 1, true) or e:find("no such file", 1, true) or e:find("not a directory", 1, true)
          or e:find("directory not empty", 1, true), "a refusal names its reason: " .. tostring(err))
      end
    end
    T.ok(refused > 0, ("the swap loop was live: %d installs refused, %d landed"):format(refused, landed))
  end,
  teardown = function(v)
    A.exec_sh(("kill $(cat /tmp/race-%s.pid) 2>/dev/null; sleep 0.2; rm -rf /workspace/race-%s"):format(tag(v), tag(v)))
  end }

---------------------------------------------------------------------------------------------
-- logs

do
  -- sandbox.log moved aside and replaced by a link to the host secret
  local function steps(t)
    return "mv /var/log/seer/sandbox.log /var/log/seer/sandbox.log.real && printf 'control line " .. t .. "\\n' > /var/log/seer/ctl-" .. t
      .. ".log && ln -s " .. q(C .. "/secret.txt") .. " /var/log/seer/sandbox.log && echo PLANTED"
  end
  local sh = function(v) return steps(tag(v)) end
  local lua = function(v) return ("os.execute(%q) print('PLANTED')"):format(steps(tag(v))) end
  A.attack{ name = "sandbox:logs through sandbox.log replaced by a symlink to a host file", class = 2, sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      planted(out, r.sandbox.log_dir .. "/sandbox.log", "link")
      local text = r.sandbox:logs(50)
      no_secret(text, "sandbox:logs")
      T.eq(text, "", "a log that is a link reads as empty")
      T.contains(r.sandbox:logs(5, "ctl-" .. tag(v)), "control line " .. tag(v), "control: a real log file is read")
      -- the sandbox's death message quotes sandbox.log too: same reader
      T.raises(function() r.sandbox:logs(5, "../../secret") end, "not a service name", true)
    end,
    teardown = function(v, r)
      local logs = safe_fs.root(r.sandbox.log_dir)
      logs:unlink("sandbox.log")
      logs:rename("sandbox.log.real", "sandbox.log")
      logs:unlink("ctl-" .. tag(v) .. ".log")
    end }
end

do
  local sh, lua = plant(function(t) return { { "rm", "/var/log/seer/fifo-" .. t .. ".log" }, { "fifo", "/var/log/seer/fifo-" .. t .. ".log" } } end)
  A.attack{ name = "sandbox:logs of a service log that is a fifo does not block the host", class = 2, sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      planted(out, r.sandbox.log_dir .. "/fifo-" .. tag(v) .. ".log", "fifo")
      local t0 = process.now_ms()
      local text = r.sandbox:logs(20, "fifo-" .. tag(v))
      T.ok(process.now_ms() - t0 < 2000, "logs returned at once")
      T.eq(text, "")
    end,
    teardown = function(v, r) safe_fs.root(r.sandbox.log_dir):unlink("fifo-" .. tag(v) .. ".log") end }
end

do
  local sh, lua = plant(function(t) return { { "rm", "/var/log/seer/cli-" .. t .. ".log" }, { "link", C .. "/secret.txt", "/var/log/seer/cli-" .. t .. ".log" } } end)
  A.attack{ name = "seer sandbox logs (the CLI) through a planted symlink", class = 2, sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      planted(out, r.sandbox.log_dir .. "/cli-" .. tag(v) .. ".log", "link")
      local seer_bin = require("seer.jupyter").seer_binary()
      local p = io.popen(("%s sandbox logs %s --service cli-%s 2>&1; echo rc=$?"):format(q(seer_bin), q(r.sandbox.sandbox_id), tag(v)))
      local text = p:read("*a")
      p:close()
      no_secret(text, "seer sandbox logs")
      T.contains(text, "refusing to follow a symlink", "the CLI says why")
      T.contains(text, "rc=1")
      -- control: the sandbox's own log reads through the CLI
      p = io.popen(("%s sandbox logs %s -n 3 2>&1; echo rc=$?"):format(q(seer_bin), q(r.sandbox.sandbox_id)))
      text = p:read("*a")
      p:close()
      T.contains(text, "rc=0", "control: seer sandbox logs works")
    end,
    teardown = function(v, r) safe_fs.root(r.sandbox.log_dir):unlink("cli-" .. tag(v) .. ".log") end }
end

---------------------------------------------------------------------------------------------
-- snapshots and restores

local function snapshot_files(id)
  local archive = S.snapshot_root() .. "/" .. id .. "/workspace.tar.gz"
  local p = io.popen("tar -xzOf " .. q(archive) .. " 2>/dev/null")
  local contents = p:read("*a")
  p:close()
  p = io.popen("tar -tvzf " .. q(archive) .. " 2>&1")
  local listing = p:read("*a")
  p:close()
  return contents, listing
end

do
  local sh, lua = plant(function(t)
    local d = "/workspace/snap-" .. t
    return { { "rm", d }, { "mkdir", d }, { "link", C .. "/secret.txt", d .. "/secret-link" }, { "link", C, d .. "/dir-link" },
             { "write", d .. "/ctl.txt", "control " .. t } }
  end)
  A.attack{ name = "a snapshot of a workspace holding symlinks to host files archives the links, not the files", class = 2,
    sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      planted(out, wsdir(r) .. "/snap-" .. tag(v) .. "/secret-link", "link")
      local id = r.sandbox:snapshot("attack " .. tag(v))
      local contents, listing = snapshot_files(id)
      safe_fs.root(S.snapshot_root()):remove_tree(id)
      T.contains(contents, "control " .. tag(v), "control: the workspace's files are archived")
      no_secret(contents, "the snapshot archive")
      T.ok(listing:find("\nl[^\n]*secret%-link %-> ") or listing:find("^l[^\n]*secret%-link %-> "), "the link is archived as a link:\n" .. listing)
    end,
    teardown = function(v, r) rm_host(safe_fs.root(wsdir(r)), "snap-" .. tag(v)) end }
end

do
  local sh, lua = plant(function(t) return { { "rm", "/workspace/snapfifo-" .. t }, { "fifo", "/workspace/snapfifo-" .. t } } end)
  A.attack{ name = "a snapshot of a workspace holding a fifo does not block the host", class = 2, sh = sh, lua = lua,
    timeout = 60,
    check = function(out, v)
      local r = A.rig()
      planted(out, wsdir(r) .. "/snapfifo-" .. tag(v), "fifo")
      local t0 = process.now_ms()
      local id = r.sandbox:snapshot("fifo " .. tag(v))
      T.ok(process.now_ms() - t0 < 20000, "the snapshot finished")
      local _, listing = snapshot_files(id)
      safe_fs.root(S.snapshot_root()):remove_tree(id)
      T.ok(listing:find("\np[^\n]*snapfifo") or listing:find("^p[^\n]*snapfifo"), "the fifo is archived as a fifo:\n" .. listing)
    end,
    teardown = function(v, r) safe_fs.root(wsdir(r)):unlink("snapfifo-" .. tag(v)) end }
end

-- A crafted archive: a symlink to the canary, then a file through that symlink, a member with
-- '..', and an absolute member naming the canary. Restored, it may only land inside.
A.attack{ name = "restoring a crafted snapshot archive (link then file through it, '..', absolute names)", class = 2,
  vectors = { "exec/sh", "kernel/sh" }, timeout = 60,
  sh = function(v)
    local t = tag(v)
    return table.concat({
      "set -e", "rm -rf /tmp/craft && mkdir -p /tmp/craft/sub && cd /tmp/craft",
      "ln -s " .. q(C) .. " esc", "tar -cf ../c.tar esc", "rm esc && mkdir esc && echo pwned > esc/pwned-" .. t .. ".txt",
      "tar -rf ../c.tar esc/pwned-" .. t .. ".txt", "echo ok > ok.txt && tar -rf ../c.tar ok.txt",
      "echo dotdot > ../dotdot-" .. t .. ".txt && (cd sub && tar -rf ../../c.tar -P ../../dotdot-" .. t .. ".txt)",
      "mkdir -p " .. q(C) .. " && echo abs > " .. q(C .. "/abs-" .. t .. ".txt") .. " && tar -rf ../c.tar -P " .. q(C .. "/abs-" .. t .. ".txt"),
      "gzip -c ../c.tar > /workspace/crafted-" .. t .. ".tar.gz", "echo PLANTED" }, "\n")
  end,
  check = function(out, v)
    local r = A.rig()
    T.contains(out, "PLANTED")
    -- the crafted archive becomes a snapshot on the host (as if the sandbox had got it there)
    local id = "crafted-" .. tag(v) .. "-" .. tostring(os.time())
    local snaps = safe_fs.root(S.snapshot_root())
    safe_fs.must(snaps:mkdirs(id))
    local data = safe_fs.must(safe_fs.root(wsdir(r)):read("crafted-" .. tag(v) .. ".tar.gz", { max = 1048576 }))
    safe_fs.must(snaps:write(id .. "/workspace.tar.gz", data))
    safe_fs.must(snaps:write(id .. "/snapshot.json", require("seer.json").encode{ id = id, description = "crafted" }))
    local ok, s2 = pcall(S.from_snapshot, id, env.SandboxConfig{ limits = { memory = "1G", processes = 128 }, timeout = 300 }, { name = "restore" })
    if ok then
      -- what the archive held landed inside the new sandbox, nowhere else
      T.eq(s2:read_file("ok.txt"), "ok\n", "control: the archive's plain file is restored")
      s2:terminate()
    else
      T.contains(tostring(s2), "cannot restore snapshot", "a refused restore says so")
    end
    snaps:remove_tree(id)
    for _, n in ipairs({ "pwned-", "abs-", "dotdot-" }) do
      T.eq(host_type(C .. "/" .. n .. tag(v) .. ".txt"), nil, "nothing of the archive reached the host canary: " .. n)
    end
    T.eq(host_type(S.snapshot_root() .. "/dotdot-" .. tag(v) .. ".txt"), nil)
  end,
  teardown = function(v, r) safe_fs.root(wsdir(r)):unlink("crafted-" .. tag(v) .. ".tar.gz") end }

---------------------------------------------------------------------------------------------
-- the run folder: RPC connection files, uploads, exit files

do
  local sh, lua = plant(function(t)
    return { { "mkdir", "/run/seer/rpc" }, { "rm", "/run/seer/rpc/conn-" .. t .. ".json" }, { "link", C .. "/secret.txt", "/run/seer/rpc/conn-" .. t .. ".json" } }
  end)
  A.attack{ name = "an RPC connection file replaced by a symlink to a host file", class = 2, sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      local path = r.sandbox.run_dir .. "/rpc/conn-" .. tag(v) .. ".json"
      planted(out, path, "link")
      local ok, err = pcall(require("seer.rpc").connect, path, { root = safe_fs.root(r.sandbox.run_dir, "the sandbox's run folder"), wait_endpoint_s = 1 })
      T.ok(not ok, "connect refuses")
      T.contains(tostring(err), "refusing to follow a symlink planted in the sandbox's run folder")
      no_secret(err, "the connect error")
    end,
    teardown = function(v, r) safe_fs.root(r.sandbox.run_dir):unlink("rpc/conn-" .. tag(v) .. ".json") end }
end

do
  local sh, lua = plant(function(t)
    local body = ('{"key": "k", "signature_scheme": "hmac-sha256", "endpoint": "ipc://%s/evil.sock", "pid": 1}'):format(C)
    return { { "mkdir", "/run/seer/rpc" }, { "rm", "/run/seer/rpc/sock-" .. t .. ".json" }, { "write", "/run/seer/rpc/sock-" .. t .. ".json", body } }
  end)
  A.attack{ name = "an RPC connection file naming a unix socket outside the run folder", class = 2, sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      local path = r.sandbox.run_dir .. "/rpc/sock-" .. tag(v) .. ".json"
      planted(out, path, "file")
      local ok, err = pcall(require("seer.rpc").connect, path, { root = safe_fs.root(r.sandbox.run_dir, "the sandbox's run folder"), wait_endpoint_s = 1 })
      T.ok(not ok, "connect refuses")
      T.contains(tostring(err), "which is not a socket in", "it names why")
    end,
    teardown = function(v, r) safe_fs.root(r.sandbox.run_dir):unlink("rpc/sock-" .. tag(v) .. ".json") end }
end

do
  -- upload_file writes into the workspace (the interfaces' working directory); serve copies the
  -- interface into the run folder's rpc/
  local sh, lua = plant(function(t)
    return { { "rm", "/run/seer/rpc" }, { "link", C, "/run/seer/rpc" },
             { "rm", "/workspace/updir-" .. t }, { "link", C, "/workspace/updir-" .. t },
             { "rm", "/workspace/upfile-" .. t .. ".lua" }, { "link", C .. "/secret.txt", "/workspace/upfile-" .. t .. ".lua" } }
  end)
  A.attack{ name = "scoped upload_file and serve's interface copy through planted symlinks (workspace folder and file, run folder's rpc/)",
    class = 2, sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      local t = tag(v)
      planted(out, r.sandbox.run_dir .. "/rpc", "link")
      planted(out, wsdir(r) .. "/updir-" .. t, "link")
      planted(out, wsdir(r) .. "/upfile-" .. t .. ".lua", "link")
      local scoped = setmetatable({ sandbox = r.sandbox, servers = {} }, require("seer.scoped").ScopedSandboxClass)
      local src = T.tmpdir() .. "/iface.lua"
      local f = assert(io.open(src, "wb")) f:write("return {}") f:close()
      T.raises(function() scoped:upload_file(src, "updir-" .. t .. "/up.lua") end, "refusing to follow a symlink", true)
      T.raises(function() scoped:upload_file(src, "../escape.lua") end, "has a '..' component", true)
      T.raises(function() scoped:_copy_interface(src, "up_" .. t:gsub("-", "_")) end, "refusing to follow a symlink", true)
      -- a link at the name itself is replaced, not written through (the canary check after this
      -- sees the host's secret unchanged)
      T.eq(scoped:upload_file(src, "upfile-" .. t .. ".lua"), "/workspace/upfile-" .. t .. ".lua")
      T.eq(host_type(wsdir(r) .. "/upfile-" .. t .. ".lua"), "file", "the link was replaced by the upload")
      -- control: with rpc/ a real folder again, the interface copy lands there
      local run = safe_fs.root(r.sandbox.run_dir)
      run:unlink("rpc")
      local dest = scoped:_copy_interface(src, "up_" .. t:gsub("-", "_"))
      T.eq(host_type(dest), "file", "control: the copy works without the link")
      run:unlink("rpc/up_" .. t:gsub("-", "_") .. ".lua")
    end,
    teardown = function(v, r)
      local run = safe_fs.root(r.sandbox.run_dir)
      if host_type(r.sandbox.run_dir .. "/rpc") == "link" then run:unlink("rpc") end
      run:mkdirs("rpc")
      local w = safe_fs.root(wsdir(r))
      for _, n in ipairs({ "updir-" .. tag(v), "upfile-" .. tag(v) .. ".lua" }) do w:remove_tree(n) end
    end }
end

-- The notebook server polls a sandboxed kernel's exit file in the run folder; a fifo there
-- would block its read (and every session on the server) forever.
A.attack{ name = "a fifo planted as the kernel's exit file does not block the notebook server", class = 2,
  sh = function(_, r)
    local p = "/run/seer/services/kernel-" .. r.session.session_id .. "-1.exit"
    return plant_sh{ { "mkdir", "/run/seer/services" }, { "rm", p }, { "fifo", p } }
  end,
  lua = function(_, r)
    local p = "/run/seer/services/kernel-" .. r.session.session_id .. "-1.exit"
    return plant_lua{ { "mkdir", "/run/seer/services" }, { "rm", p }, { "fifo", p } }
  end,
  check = function(out, _, _)
    local r = A.rig()
    planted(out, r.sandbox.run_dir .. "/services/kernel-" .. r.session.session_id .. "-1.exit", "fifo")
    local text = A.kernel_lua("return 6 * 7", 30)
    T.contains(text, "42", "the session still answers")
  end,
  teardown = function(_, r) safe_fs.root(r.sandbox.run_dir):unlink("services/kernel-" .. r.session.session_id .. "-1.exit") end }

---------------------------------------------------------------------------------------------
-- the notebook writer, with its output folder inside the workspace

local nb2
local function notebook_in_workspace(r)
  if not nb2 then
    nb2 = require("seer.execution").create_notebook_session(r.sandbox, nil,
      { name = "paths", output_dir = r.sandbox.workspace_dir .. "/nb-out" })
  end
  return nb2
end

A.attack{ name = "the notebook saved into an output folder in the workspace with the .ipynb pre-planted as a symlink", class = 2,
  sh = function(_, r)
    local name = notebook_in_workspace(r).notebook_path:match("([^/]+)$")
    return plant_sh{ { "rm", "/workspace/nb-out/" .. name }, { "link", C .. "/notes.md", "/workspace/nb-out/" .. name } }
  end,
  lua = function(_, r)
    local name = notebook_in_workspace(r).notebook_path:match("([^/]+)$")
    return plant_lua{ { "rm", "/workspace/nb-out/" .. name }, { "link", C .. "/notes.md", "/workspace/nb-out/" .. name } }
  end,
  check = function(out)
    local r = A.rig()
    local s = notebook_in_workspace(r)
    planted(out, s.notebook_path, "link")
    local res = s:exec("return 'saved " .. tostring(os.time()) .. "'", { raise = false, timeout = 60 })
    T.ok(not res.error, "the cell ran")
    T.eq(host_type(s.notebook_path), "file", "the link was replaced by the notebook, not written through")
    local text = safe_fs.must(safe_fs.root(r.sandbox.workspace_dir):read("nb-out/" .. s.notebook_path:match("([^/]+)$"), { max = 4194304 }))
    T.contains(text, '"cells"', "the notebook was saved")
  end }

A.attack{ name = "the notebook's output folder in the workspace replaced by a symlink", class = 2,
  sh = function() return "mv /workspace/nb-out /workspace/nb-out.real && ln -s " .. q(C) .. " /workspace/nb-out && echo PLANTED" end,
  lua = function() return ("os.execute(%q) print('PLANTED')"):format("mv /workspace/nb-out /workspace/nb-out.real && ln -s " .. q(C) .. " /workspace/nb-out") end,
  setup = function(_, r) notebook_in_workspace(r) end,
  check = function(out)
    local r = A.rig()
    local s = notebook_in_workspace(r)
    planted(out, r.sandbox.workspace_dir .. "/nb-out", "link")
    local res = s:exec("return 'through a link'", { raise = false, timeout = 60 })
    T.ok(not res.error, "the server and the session stay up: " .. tostring(res.error and res.error.evalue))
    -- the rig asserts no .ipynb appeared in the canary
  end,
  teardown = function(_, r)
    local w = safe_fs.root(r.sandbox.workspace_dir)
    if host_type(r.sandbox.workspace_dir .. "/nb-out") == "link" then w:unlink("nb-out") end
    w:rename("nb-out.real", "nb-out")
  end }

do
  local sh, lua = plant(function(t) return { { "rm", "/workspace/nb-pre-" .. t }, { "link", C, "/workspace/nb-pre-" .. t } } end)
  A.attack{ name = "a notebook session whose output folder in the workspace was planted as a symlink beforehand", class = 2,
    sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      planted(out, r.sandbox.workspace_dir .. "/nb-pre-" .. tag(v), "link")
      T.raises(function()
        require("seer.execution").create_notebook_session(r.sandbox, nil, { name = "pre", output_dir = r.sandbox.workspace_dir .. "/nb-pre-" .. tag(v) })
      end, "refusing to follow a symlink", true)
    end,
    teardown = function(v, r) safe_fs.root(r.sandbox.workspace_dir):unlink("nb-pre-" .. tag(v)) end }
end

do
  local sh, lua = plant(function(t)
    return { { "mkdir", "/workspace/nb-resume" }, { "rm", "/workspace/nb-resume/fifo-" .. t .. ".ipynb" }, { "fifo", "/workspace/nb-resume/fifo-" .. t .. ".ipynb" },
             { "rm", "/workspace/nb-resume/link-" .. t .. ".ipynb" }, { "link", C .. "/notes.md", "/workspace/nb-resume/link-" .. t .. ".ipynb" } }
  end)
  A.attack{ name = "resuming or continuing a notebook in the workspace that is a fifo or a symlink", class = 2, sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      local dir = r.sandbox.workspace_dir .. "/nb-resume/"
      planted(out, dir .. "fifo-" .. tag(v) .. ".ipynb", "fifo")
      local t0 = process.now_ms()
      T.raises(function() require("seer.notebook").load(dir .. "fifo-" .. tag(v) .. ".ipynb") end, "not a regular file", true)
      T.ok(process.now_ms() - t0 < 2000, "the load returned at once")
      local ok, err = pcall(require("seer.notebook").load, dir .. "link-" .. tag(v) .. ".ipynb")
      T.ok(not ok, "the link is not loaded")
      T.contains(tostring(err), "refusing to follow a symlink")
      no_secret(err, "the load error")
    end,
    teardown = function(_, r) safe_fs.root(r.sandbox.workspace_dir):remove_tree("nb-resume") end }
end

---------------------------------------------------------------------------------------------
-- host-side read_file/write_file and the state folder's removal

do
  local sh, lua = plant(function(t)
    return { { "rm", "/workspace/rf-" .. t }, { "link", C .. "/secret.txt", "/workspace/rf-" .. t },
             { "rm", "/workspace/wf-" .. t }, { "link", C, "/workspace/wf-" .. t } }
  end)
  A.attack{ name = "sandbox:read_file/write_file/list_files through planted symlinks stay inside", class = 2, sh = sh, lua = lua,
    check = function(out, v)
      local r = A.rig()
      planted(out, wsdir(r) .. "/rf-" .. tag(v), "link")
      local ok, data = pcall(r.sandbox.read_file, r.sandbox, "rf-" .. tag(v))
      no_secret(ok and data or tostring(data), "read_file")
      pcall(r.sandbox.write_file, r.sandbox, "wf-" .. tag(v) .. "/pwned.txt", "pwned")
      local lok, entries = pcall(r.sandbox.list_files, r.sandbox, "wf-" .. tag(v))
      if lok then for _, e in ipairs(entries or {}) do T.ok(e.name ~= "secret.txt", "list_files listed the host canary") end end
      -- control: a real file reads back
      r.sandbox:write_file("ctl-" .. tag(v) .. ".txt", "control")
      T.eq(r.sandbox:read_file("ctl-" .. tag(v) .. ".txt"), "control")
    end,
    teardown = function(v, r)
      local w = safe_fs.root(wsdir(r))
      for _, n in ipairs({ "rf-", "wf-", "ctl-" }) do w:remove_tree(n .. tag(v) .. (n == "ctl-" and ".txt" or "")) end
    end }
end

A.attack{ name = "removing the state folder at terminate with links planted in workspace, run and log folders", class = 2,
  vectors = { "exec/sh" }, rig = { name = "paths-teardown", opts = { session = false } },
  sh = table.concat({
    "ln -s " .. q(C) .. " /workspace/host-dir", "ln -s " .. q(C .. "/secret.txt") .. " /workspace/host-file",
    "mkdir -p /workspace/locked/deeper && ln -s " .. q(C) .. " /workspace/locked/deeper/l && chmod 0 /workspace/locked",
    "ln -s " .. q(C) .. " /run/seer/host-dir", "ln -s " .. q(C) .. " /var/log/seer/host-dir",
    "d=/workspace/deep; for i in $(seq 1 100); do d=$d/d; done; mkdir -p $d && ln -s " .. q(C) .. " $d/l",
    "echo PLANTED" }, " && "),
  check = function(out, _)
    local r = A.rig("paths-teardown", nil, { session = false })
    T.contains(out, "PLANTED")
    T.eq(host_type(r.sandbox.workspace_dir .. "/host-dir"), "link")
    local state = r.sandbox.state_dir
    r.sandbox:terminate()
    T.eq(host_type(state), nil, "the state folder is gone")
  end }

T.test("attack suite, class 2: the attempts registered", function()
  T.ok(A.count() - first >= 12, "at least 12 class-2 attempts: " .. (A.count() - first))
  if nb2 then pcall(nb2.terminate, nb2) end
  A.close()
end)
