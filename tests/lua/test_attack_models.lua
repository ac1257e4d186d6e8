-- A model folder is hostile (docs/security.md): an agent may have written it in its workspace,
-- and it is later hidden into, or mounted in, a second sandbox. Everything the host reads of a
-- model folder while it prepares a sandbox (Sandbox:_prepare_models: the fragments of a hidden
-- model's id, the staging, the files of a visible cache snapshot it mounts one by one) is
-- confined to the folder (a link only when it stays inside, the loader's rule), refuses what is
-- not a regular file without waiting on it, and reads a bounded number of bytes. Before, the
-- fragments were read by path with io.open: a FIFO named notes.json hung Sandbox:start()
-- forever, notes.json -> /dev/zero was read until memory ran out, and a JSON file or README
-- linked to a host file was read; a visible cache snapshot's file linked to a host file or
-- folder had that host file or folder mounted into the sandbox.
local T = require "testing"
local env = require "seer.environment"
local S = require "seer.sandbox"
local sbc = require "seer.core.sandbox"

local here = seer.script_dir()
local stories = here .. "/../fixtures/models/stories260K"
local SEER = require("seer.core.host").realpath(arg[-1]) or arg[-1]
local root = T.tmpdir()
T.private_sandbox_dirs(root)

local function sh(cmd)
  local ok, out = T.sh(cmd)
  T.ok(ok, cmd .. "\n" .. out)
  return out
end
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- A fresh model folder, root/<tag>/zq4-org/zq4-net, with stories260K's kept files.
local function model_folder(tag)
  local d = root .. "/" .. tag .. "/zq4-org/zq4-net"
  sh(("rm -rf %s && mkdir -p %s && cp %s/*.json %s/model.safetensors %s/"):format(q(root .. "/" .. tag), q(d), q(stories), q(stories), q(d)))
  return d
end

-- Runs `code` in a fresh seer process killed after `timeout` seconds (with bounded: given at
-- most 2 GiB of address space, where the binary is not built with AddressSanitizer, which
-- reserves terabytes of it, so that a read without bound fails fast instead of taking the
-- machine's memory; not for a child that starts a sandbox, which would inherit the limit): its
-- exit status (137: killed at the timeout, still waiting) and output, with its peak memory.
local function child(code, timeout, bounded)
  local script = T.tmpdir() .. "/child.lua"
  seer.write_file(script, code .. [[

io.write(("peak_kib %d\n"):format(tonumber(seer.read_file("/proc/self/status"):match("VmHWM:%s*(%d+)"))))
]])
  local limit = bounded and ("grep -q __asan_init %s || ulimit -v 2097152; "):format(q(SEER)) or ""
  local p = io.popen(("(cd / && %s timeout -s KILL %d %s %s) 2>&1; echo \"child-rc=$?\""):format(limit, timeout, q(SEER), q(script)))
  local out = p:read("*a")
  p:close()
  return tonumber(out:match("child%-rc=(%d+)\n?$")), (out:gsub("child%-rc=%d+\n?$", ""))
end

local function fragments_in_child(dir, timeout)
  return child(([[
local S = require "seer.sandbox"
local t0 = seer.now()
local frags = S.hidden_fragments({ { name = "zq4-org/zq4-net", host = %q, files = {} } }, { %q })
io.write("frags ", table.concat(frags, ","), "\n")
io.write(("took %%.2f\n"):format(seer.now() - t0))
]]):format(dir, root), timeout or 20, true)
end

-- hidden_fragments: every file it reads is in the model folder, a regular file, bounded.
local HOSTILE = {
  { "a FIFO named notes.json", function(d) sh(("mkfifo %s/notes.json"):format(q(d))) end },
  { "a FIFO named README.md", function(d) sh(("mkfifo %s/README.md"):format(q(d))) end },
  { "a FIFO named config.json", function(d) sh(("rm %s/config.json && mkfifo %s/config.json"):format(q(d), q(d))) end },
  { "a link to a FIFO inside the folder", function(d)
    sh(("mkfifo %s/pipe && ln -s pipe %s/notes.json"):format(q(d), q(d)))
  end },
  { "notes.json -> /dev/zero", function(d) sh(("ln -s /dev/zero %s/notes.json"):format(q(d))) end },
  { "notes.json -> a 300 MiB file inside the folder", function(d)
    sh(("truncate -s 300M %s/big.bin && ln -s big.bin %s/notes.json"):format(q(d), q(d)))
  end },
}
for _, h in ipairs(HOSTILE) do
  T.test("hidden_fragments: " .. h[1] .. " is passed over, not waited on or read without bound", function()
    local d = model_folder("hostile")
    h[2](d)
    local rc, out = fragments_in_child(d)
    T.eq(rc, 0, "hidden_fragments did not return (137: still waiting at the timeout):\n" .. out)
    local frags = out:match("frags ([^\n]*)")
    T.ok(frags, out)
    T.contains(frags or "", "zq4org")
    T.contains(frags or "", "zq4net")
    local peak = tonumber(out:match("peak_kib (%d+)") or "0") / 1024
    print(("    %s: fragments in %s s, child peak %.0f MiB"):format(h[1], out:match("took (%S+)") or "?", peak))
    T.ok(peak > 0 and peak < 150, ("the child peaked at %.0f MiB: the file was read"):format(peak))
  end)
end

T.test("a model folder of more than MODEL_MAX_ENTRIES entries is refused naming the folder, not listed into the host's memory", function()
  -- an agent can fill a folder it wrote with millions of names; each was a Lua table on the host
  -- in the fragments, the staging and the listing of a hidden model's files. The limit is
  -- 100,000; lowered to 1,000 here (the same code) so the folder is quick to make.
  T.eq(S.MODEL_MAX_ENTRIES, 100000)
  local d = model_folder("many")
  sh(("cd %s && seq 1 1001 | sed 's/^/f/' | xargs touch"):format(q(d)))
  local function frags_child()
    return child(([[
local S = require "seer.sandbox"
S.MODEL_MAX_ENTRIES = 1000
local frags = S.hidden_fragments({ { name = "zq4-org/zq4-net", host = %q, files = {} } }, { %q })
io.write("frags ", table.concat(frags, ","), "\n")
]]):format(d, root), 20, true)
  end
  local rc, out = frags_child()
  T.eq(rc, 1, out) -- raised, not killed at the timeout
  T.contains(out, "the model folder " .. d .. " holds more than 1000 entries")
  T.ok(not out:find("frags ", 1, true), "listed anyway:\n" .. out:sub(1, 400))
  -- the staging refuses it too
  local saved = S.MODEL_MAX_ENTRIES
  S.MODEL_MAX_ENTRIES = 1000
  local s = S.Sandbox(env.SandboxConfig{})
  s.state_dir, s.stage_dirs = T.tmpdir(), {}
  s._stage_bases = function(self) return { self.state_dir .. "/hidden" } end
  local ok, err = pcall(s._stage_hidden, s, d, {})
  S.MODEL_MAX_ENTRIES = saved
  T.eq(ok, false)
  T.contains(tostring(err), "holds more than 1000 entries")
  -- at the limit it is listed
  sh(("cd %s && rm f1 f2 f3 f4 f5 f6 f7 f8 f9 f10 && test $(ls -A | wc -l) -le 1000"):format(q(d)))
  rc, out = frags_child()
  T.eq(rc, 0, out)
  T.contains(out, "frags ")
end)

T.test("hidden_fragments: a JSON file or README linked out of the folder is not read; one linked inside it is", function()
  local d = model_folder("outside")
  local host = root .. "/outside/host-files"
  sh(("mkdir -p %s"):format(q(host)))
  -- host files whose names fields the old code took into the fragments: what a folder's links
  -- can make the host read
  seer.write_file(host .. "/h.json", '{"_name_or_path": "hostonlyorg/hostonlyname"}')
  seer.write_file(host .. "/card.md", "---\nbase_model: hostcardorg/hostcardname\n---\n")
  sh(("ln -s %s/h.json %s/notes.json && ln -s %s/card.md %s/README.md"):format(q(host), q(d), q(host), q(d)))
  -- inside the folder: followed and read
  sh(("mkdir -p %s/sub && ln -s sub/inner.json %s/alias.json"):format(q(d), q(d)))
  seer.write_file(d .. "/sub/inner.json", '{"base_model_name_or_path": "insideorg/insidename"}')
  local frags = table.concat(S.hidden_fragments({ { name = "zq4-org/zq4-net", host = d, files = {} } }, { root }), ",")
  for _, f in ipairs({ "hostonlyorg", "hostonlyname", "hostcardorg", "hostcardname" }) do
    T.ok(not frags:find(f, 1, true), "a file linked out of the model folder was read: " .. f .. " in " .. frags)
  end
  T.contains(frags, "insideorg")
  T.contains(frags, "insidename")
  -- a folder that cannot be opened: only the id and the path, no error (staging says why)
  local none = S.hidden_fragments({ { name = "zq4-org/zq4-net", host = root .. "/no/such", files = {} } }, { root })
  T.contains(table.concat(none, ","), "zq4net")
  -- no descriptor left open
  local fds = #sbc.listdir("/proc/self/fd")
  S.hidden_fragments({ { name = "zq4-org/zq4-net", host = d, files = {} } }, { root })
  T.eq(#sbc.listdir("/proc/self/fd"), fds, "hidden_fragments left descriptors open")
end)

T.test("hidden_fragments: config.json still gives the architecture's names (a fragment inside them is kept out)", function()
  -- the structural read (config.json, tokenizer_config.json) goes through the same confined read
  local d = root .. "/arch/llama-shop/llama-secret"
  sh(("rm -rf %s && mkdir -p %s"):format(q(root .. "/arch"), q(d)))
  seer.write_file(d .. "/config.json", '{"model_type": "llamax", "architectures": ["LlamaxForCausalLM"]}')
  local frags = table.concat(S.hidden_fragments({ { name = "llamax-org/llamax", host = d, files = {} } }, { root }), ",")
  T.ok(not (("," .. frags .. ","):find(",llamax,", 1, true)), "a fragment inside model_type was kept: " .. frags)
  T.contains(frags, "llamaxorg")
  T.contains(frags, "llamasecret")
end)

---------------------------------------------------------------------------------------------
-- The whole preparation of a sandbox with a hostile hidden model (what Sandbox:start() does
-- before bubblewrap): the fragments and the staging, in a fresh process under a timeout.

T.test("_prepare_models: a hidden model folder with FIFOs and a link to /dev/zero prepares in bounded time and memory", function()
  local d = model_folder("prepare")
  sh(("mkfifo %s/notes.json %s/README.md && ln -s /dev/zero %s/zero.json && mkfifo %s/tokenizer_config.json.p")
    :format(q(d), q(d), q(d), q(d)))
  sh(("rm %s/tokenizer_config.json && ln -s tokenizer_config.json.p %s/tokenizer_config.json"):format(q(d), q(d)))
  local rc, out = child(([[
local S, env = require "seer.sandbox", require "seer.environment"
local s = S.Sandbox(env.SandboxConfig{ models = { env.ModelConfig{ name = %q, hidden = true } } })
s.state_dir, s.lua_dir, s.seer_binary = %q, %q, %q
local binds = {}
s:_prepare_models(binds, {})
local dir = binds[1][2]
local names = {}
for _, e in ipairs(require("seer.core.sandbox").listdir(dir)) do names[#names + 1] = e.name end
table.sort(names)
io.write("staged ", table.concat(names, " "), "\n")
s:_unstage_hidden()
]]):format(d, root .. "/st", require("seer.core.host").lua_dir(), SEER), 30, true)
  T.eq(rc, 0, "preparing the sandbox did not end (137: still waiting at the timeout):\n" .. out)
  -- what loads the model is staged; the FIFOs and the link out are not
  T.contains(out, "staged config.json generation_config.json model.safetensors special_tokens_map.json tokenizer.json\n")
end)

---------------------------------------------------------------------------------------------
-- A visible model from the Hugging Face cache is mounted file by file: what each snapshot
-- link leads to on the host. A link out of the repository folder would mount a host file (or
-- folder) into the sandbox.

local hf_home = root .. "/hf"
local function cache_model(tag)
  local repo = hf_home .. "/hub/models--zq5-org--" .. tag
  local snap = repo .. "/snapshots/" .. ("%040x"):format(0xabc)
  sh(("mkdir -p %s/blobs %s/refs %s/onnx"):format(q(repo), q(repo), q(snap)))
  seer.write_file(repo .. "/refs/main", ("%040x"):format(0xabc))
  local files = { "config.json", "tokenizer.json", "model.safetensors" }
  for i, f in ipairs(files) do
    local blob = ("%040x"):format(i * 7919)
    sh(("cp %s/%s %s/blobs/%s && ln -s ../../blobs/%s %s/%s"):format(q(stories), f, q(repo), blob, blob, q(snap), f))
  end
  seer.write_file(repo .. "/blobs/" .. ("%040x"):format(99), "onnx bytes")
  sh(("ln -s ../../../blobs/%s %s/onnx/model.onnx"):format(("%040x"):format(99), q(snap)))
  return repo, snap
end

-- Runs fn with this file's hub cache as the one seer reads, offline (follow:
-- SEER_MODEL_FOLLOW_LINKS=1), the variables it touches as they were afterwards: fn's results.
local CACHE_ENV = { "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "SEER_MODEL_FOLLOW_LINKS", "SEER_BWRAP_BIND_FD" }
local function with_cache_env(fn, follow)
  local saved = {}
  for _, k in ipairs(CACHE_ENV) do saved[k] = os.getenv(k) end
  T.setenv("HF_HOME", hf_home)
  T.setenv("HF_HUB_CACHE", nil)
  T.setenv("HF_HUB_OFFLINE", "1")
  T.setenv("SEER_MODEL_FOLLOW_LINKS", follow and "1" or nil)
  local res = { pcall(fn) }
  for _, k in ipairs(CACHE_ENV) do T.setenv(k, saved[k]) end
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, table.maxn(res))
end

-- _prepare_models of a sandbox with the visible cache model zq5-org/<tag> (follow:
-- SEER_MODEL_FOLLOW_LINKS=1): true and the binds, or false and the error.
local function prepare_visible(tag, follow)
  local binds, s = {}, nil
  local ok, err = with_cache_env(function()
    return pcall(function()
      s = S.Sandbox(env.SandboxConfig{ models = { env.ModelConfig{ name = "zq5-org/" .. tag } } })
      s:_prepare_models(binds, {})
    end)
  end, follow)
  -- what each bind mounts: a path, or (--ro-bind-fd N) the file the descriptor the keeper would
  -- hand bwrap as fd N is open on
  local m = {}
  if ok then
    for _, b in ipairs(binds) do
      if b[1] == "--ro-bind-fd" then
        T.ok(s.pass_fds, "a descriptor bind without descriptors to pass")
        local fd = s.pass_fds and s.pass_fds[tonumber(b[2]) - 3]
        T.ok(fd, "--ro-bind-fd " .. b[2] .. " names no descriptor held for the keeper")
        m[b[3]] = fd and require("seer.core.host").realpath("/proc/self/fd/" .. fd)
      else
        T.eq(b[1], "--ro-bind")
        m[b[3]] = b[2]
      end
    end
  end
  if s then s:_close_passed() end
  return ok, ok and m or err
end


T.test("visible cache snapshot: each file is mounted from its blob; a FIFO and a link to a folder are left out", function()
  local repo, snap = cache_model("plain")
  sh(("mkfifo %s/fifo.json && mkdir -p %s/outdir && ln -s ../../outdir %s/dirlink"):format(q(snap), q(repo), q(snap)))
  local ok, binds = prepare_visible("plain")
  T.ok(ok, tostring(binds))
  local m = (ok and binds or {})
  local mount = "/models/zq5-org--plain"
  local real = require("seer.core.host").realpath(repo)
  T.eq(m[mount .. "/config.json"], real .. "/blobs/" .. ("%040x"):format(7919))
  T.eq(m[mount .. "/model.safetensors"], real .. "/blobs/" .. ("%040x"):format(3 * 7919))
  T.eq(m[mount .. "/onnx/model.onnx"], real .. "/blobs/" .. ("%040x"):format(99))
  T.eq(m[mount .. "/fifo.json"], nil, "a FIFO was mounted")
  T.eq(m[mount .. "/dirlink"], nil, "a link to a folder was mounted")
  local n = 0
  for _ in pairs(m) do n = n + 1 end
  T.eq(n, 4)
end)

local secret = root .. "/host-secret"
sh(("mkdir -p %s/dir && echo HOST-ONLY > %s/id_rsa"):format(q(secret), q(secret)))

-- No bind's source is the host's secret folder or beneath it.
local function no_host_bind(binds, what)
  for mnt, src in pairs(binds) do
    T.ok(src:sub(1, #secret) ~= secret, ("%s: a host path was mounted into the sandbox: %s at %s"):format(what, src, mnt))
  end
end

T.test("visible cache snapshot: a file linked out of the repository folder is refused, never mounted", function()
  -- at the top of the snapshot and in a sub-folder
  for _, c in ipairs({ { "top", "notes.txt" }, { "nested", "onnx/extra.bin" } }) do
    local _, snap = cache_model(c[1])
    sh(("ln -s %s/id_rsa %s/%s"):format(q(secret), q(snap), c[2]))
    local ok, res = prepare_visible(c[1])
    if ok then no_host_bind(res, c[1]) end
    T.ok(not ok, c[1] .. ": a snapshot with a link out of its repository folder was mounted")
    T.contains(tostring(res), snap .. "/" .. c[2] .. " is a symbolic link that leads out of its model folder")
  end
end)

T.test("visible cache snapshot: a sub-folder linked to a host folder is neither walked nor mounted", function()
  local _, snap = cache_model("dirlink")
  sh(("ln -s %s %s/hostdir && ln -s %s/dir %s/onnx/hostdir2"):format(q(secret), q(snap), q(secret), q(snap)))
  local ok, binds = prepare_visible("dirlink")
  T.ok(ok, tostring(binds))
  no_host_bind(ok and binds or {}, "dirlink")
  T.ok((ok and binds or {})["/models/zq5-org--dirlink/config.json"], "the model's own files were not mounted")
end)

T.test("visible cache snapshot: with SEER_MODEL_FOLLOW_LINKS=1 (a folder you assembled) a link out is followed", function()
  local _, snap = cache_model("follow")
  sh(("ln -s %s/id_rsa %s/notes.txt"):format(q(secret), q(snap)))
  local ok, binds = prepare_visible("follow", true)
  T.ok(ok, tostring(binds))
  T.eq((ok and binds or {})["/models/zq5-org--follow/notes.txt"], require("seer.core.host").realpath(secret .. "/id_rsa"))
end)

---------------------------------------------------------------------------------------------
-- The same through Sandbox:start(), for real (bubblewrap).

local function have_bwrap() return os.execute("command -v bwrap >/dev/null 2>&1") == 0 end

T.test("start(): a hidden model folder holding FIFOs starts, and the model's files are there", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed (make setup installs it)") end
  local d = model_folder("start")
  sh(("mkfifo %s/notes.json %s/README.md && ln -s /dev/zero %s/zero.json"):format(q(d), q(d), q(d)))
  local rc, out = child(([[
local env = require "seer.environment"
local s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli", models = { env.ModelConfig{ name = %q, hidden = true } } })
  :start{ name = "fifo" }
local ok, res = pcall(s.exec, s, "ls /models/*/ | sort | tr '\n' ' '")
s:terminate()
io.write("listing ", tostring(res), "\n")
]]):format(d), 60)
  T.eq(rc, 0, "start() did not end (137: still waiting at the timeout):\n" .. out)
  T.contains(out, "listing config.json generation_config.json model.safetensors special_tokens_map.json tokenizer.json tokenizer_config.json \n")
end)

T.test("start(): a visible cache model whose snapshot links a host file is refused; the file is not readable inside", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed (make setup installs it)") end
  local _, snap = cache_model("started")
  sh(("ln -s %s/id_rsa %s/notes.txt"):format(q(secret), q(snap)))
  local inside
  local ok, err = with_cache_env(function()
    return pcall(function()
      local s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli", models = { env.ModelConfig{ name = "zq5-org/started" } } })
        :start{ name = "linked" }
      inside = s:exec("cat /models/zq5-org--started/notes.txt 2>&1; true")
      s:terminate()
    end)
  end)
  T.ok(not (inside or ""):find("HOST-ONLY", 1, true), "a host file was readable in the sandbox: " .. tostring(inside))
  T.ok(not ok, "a snapshot linking a host file was mounted")
  T.contains(tostring(err), snap .. "/notes.txt is a symbolic link that leads out of its model folder")
end)

T.test("start(): a visible cache model is mounted from the descriptors it was checked through; a blob swapped after the check is never what the sandbox gets", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed (make setup installs it)") end
  local repo, snap = cache_model("swapped")
  sh(("ln -s ../../blobs/notes %s/notes.txt"):format(q(snap)))
  -- Starts the sandbox, running `swap` (a shell command, in the repository folder) once the
  -- snapshot has been checked (right after _prepare_models, before the keeper starts bwrap):
  -- true and what notes.txt reads inside, or false and start()'s error.
  local function start_swapped(by_fd, swap)
    T.setenv("SEER_BWRAP_BIND_FD", not by_fd and "0" or nil)
    sh(("cd %s && rm -f blobs/moved && printf ORIGINAL > blobs/notes && printf SWAPPED > other"):format(q(repo)))
    local inside, s
    local ok, err = pcall(function()
      s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli", models = { env.ModelConfig{ name = "zq5-org/swapped" } } })
      local prepare_repos = s._prepare_repos
      s._prepare_repos = function(self)
        sh(("cd %s && %s"):format(q(repo), swap))
        return prepare_repos(self)
      end
      s:start{ name = "swapped" }
      inside = s:exec("cat /models/zq5-org--swapped/notes.txt; echo; head -c 1 /models/zq5-org--swapped/config.json")
      s:terminate()
    end)
    T.eq(s and s.pass_fds, nil, "the descriptors held for the keeper were not closed")
    return ok, ok and inside or tostring(err)
  end
  local ok1, over, ok2, aside, ok3, over_path, ok4, aside_path
  with_cache_env(function()
    -- the blob renamed over: the checked file is gone from the cache; bwrap cannot mount it and
    -- seer mounts nothing else, so start() fails saying why
    ok1, over = start_swapped(true, "mv other blobs/notes")
    -- the blob moved aside and another put in its place: the checked file, where it now is
    ok2, aside = start_swapped(true, "mv blobs/notes blobs/moved && mv other blobs/notes")
    -- the controls: mounted by path (SEER_BWRAP_BIND_FD=0), both swaps are what the sandbox gets
    ok3, over_path = start_swapped(false, "mv other blobs/notes")
    ok4, aside_path = start_swapped(false, "mv blobs/notes blobs/moved && mv other blobs/notes")
  end)
  T.ok(not ok1, "a blob renamed over after the check was mounted: " .. over)
  T.ok(not over:find("SWAPPED", 1, true), over)
  T.contains(over, "a file of a cached model, or a model folder or local_files / local_dirs entry, was replaced or removed after seer checked it")
  T.ok(ok2, aside)
  T.contains(aside, "ORIGINAL\n{", "the sandbox did not get the file that was checked")
  T.ok(ok3 and ok4, "the controls did not start: " .. over_path .. " / " .. aside_path)
  T.contains(over_path, "SWAPPED", "the control (mounted by path) did not see the swap: the probe proves nothing")
  T.contains(aside_path, "SWAPPED", "the control (mounted by path) did not see the swap: the probe proves nothing")
end)

T.test("start(): a cached model of more files than the soft open-file limit is mounted (the limit raised towards the hard one), or refused saying so", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed (make setup installs it)") end
  local repo, snap = cache_model("manyfiles")
  sh(("mkdir -p %s/extra && for i in $(seq 1 300); do echo $i > %s/blobs/x$i; ln -s ../../../blobs/x$i %s/extra/f$i.txt; done"):format(
    q(snap), q(repo), q(snap)))
  local code = ([[
local ffi = require "ffi"
pcall(ffi.cdef, "int setenv(const char *, const char *, int); struct lim { unsigned long cur, max; }; int setrlimit(int, const struct lim *);")
ffi.C.setenv("HF_HOME", %q, 1)
ffi.C.setenv("HF_HUB_OFFLINE", "1", 1)
ffi.C.setenv("SEER_SANDBOX_DIR", %q, 1)
local hard = tonumber(arg[1])
ffi.C.setrlimit(7, ffi.new("struct lim", 128, hard))
local env = require "seer.environment"
local ok, err = pcall(function()
  local s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli", models = { env.ModelConfig{ name = "zq5-org/manyfiles" } } })
    :start{ name = "many" }
  io.write("inside ", s:exec("ls /models/zq5-org--manyfiles/extra | wc -l; cat /models/zq5-org--manyfiles/extra/f250.txt"), "\n")
  s:terminate()
end)
io.write("started ", tostring(ok), " ", ok and "" or tostring(err), "\n")
]]):format(hf_home, root .. "/sbmany")
  local script = T.tmpdir() .. "/many.lua"
  for _, hard in ipairs({ 4096, 128 }) do
    seer.write_file(script, code)
    local p = io.popen(("timeout -s KILL 60 %s %s %d 2>&1"):format(q(SEER), q(script), hard))
    local out = p:read("*a")
    p:close()
    if hard == 4096 then
      T.contains(out, "started true", "a soft limit of 128 under a hard one of 4096: " .. out)
      T.contains(out, "inside 300\n250\n")
    else
      T.contains(out, "started false", "a hard limit of 128: " .. out)
      T.contains(out, "Too many open files (each file of a cached model is held open until the sandbox has mounted it")
    end
  end
end)

T.test("start(): a visible model folder, or a local_dirs folder, is mounted as it was opened; swapped for a link to a host folder afterwards, it is not what the sandbox gets", function()
  if not have_bwrap() then T.skip("bubblewrap is not installed (make setup installs it)") end
  local d = model_folder("dirswap")
  local parent = d:match("^(.*)/[^/]+$")
  local saved = os.getenv("SEER_BWRAP_BIND_FD")
  -- config: the SandboxConfig with the folder d; seen: where it is inside
  local function start_swapped(by_fd, config, seen)
    T.setenv("SEER_BWRAP_BIND_FD", not by_fd and "0" or nil)
    sh(("cd %s && rm -rf zq4-net zq4-net.moved && mkdir zq4-net && printf ORIGINAL > zq4-net/notes.txt && cp %s/*.json %s/model.safetensors zq4-net/"):format(
      q(parent), q(stories), q(stories)))
    local inside, s
    local ok, err = pcall(function()
      s = env.Sandbox(env.SandboxConfig(config))
      local prepare_repos = s._prepare_repos
      s._prepare_repos = function(self)
        -- the folder moved aside, a link to the host's secret folder put at its path
        sh(("cd %s && mv zq4-net zq4-net.moved && ln -s %s zq4-net"):format(q(parent), q(secret)))
        return prepare_repos(self)
      end
      s:start{ name = "dirswap" }
      inside = s:exec(("cat %s/notes.txt %s/id_rsa 2>&1; true"):format(seen, seen))
      s:terminate()
    end)
    sh(("cd %s && rm -f zq4-net"):format(q(parent)))
    T.eq(s and s.pass_fds, nil, "the descriptors held for the keeper were not closed")
    return ok, ok and inside or tostring(err)
  end
  local cases = {
    { "a model folder", { execution_mode = "cli", models = { env.ModelConfig{ name = d } } }, "/models/zq4-net" },
    { "local_dirs", { execution_mode = "cli", local_dirs = { { d, "/data" } } }, "/data" },
  }
  for _, c in ipairs(cases) do
    local ok1, by_fd = start_swapped(true, c[2], c[3])
    local ok2, by_path = start_swapped(false, c[2], c[3]) -- the control: mounted by path, the swap is what it gets
    T.setenv("SEER_BWRAP_BIND_FD", saved)
    T.ok(ok1, c[1] .. ": " .. by_fd)
    T.contains(by_fd, "ORIGINAL", c[1])
    T.ok(not by_fd:find("HOST-ONLY", 1, true), c[1] .. ": the host folder swapped in was mounted: " .. by_fd)
    T.ok(ok2, c[1] .. ": " .. by_path)
    T.contains(by_path, "HOST-ONLY", c[1] .. ": the control (mounted by path) did not see the swap: the probe proves nothing")
  end
end)

---------------------------------------------------------------------------------------------
-- The attempt end to end (class 2, through the attack rig): code in a sandbox writes model
-- folders in its workspace, and the researcher then uses them in a second sandbox: one hidden
-- (FIFOs named notes.json and README.md, zero.json -> /dev/zero, leak.json and
-- tokenizer_config.json linked to the host canary) and one as a Hugging Face cache whose
-- snapshot links notes.txt to the host canary, mounted visible. The second sandbox must start
-- (or refuse, naming the link) in bounded time, and the canary must be readable nowhere in it.

local A = require "attack"
local SECRET = A.canary_files["secret.txt"]:gsub("\n$", "")

local function plant_sh()
  local c = A.canary_dir .. "/secret.txt"
  local rev = ("%040x"):format(0xdef)
  return table.concat({
    "set -e; cd /workspace; rm -rf hm hfc",
    "mkdir -p hm && cp /models/stories260K/*.json /models/stories260K/model.safetensors hm/",
    "mkfifo hm/notes.json hm/README.md && ln -s /dev/zero hm/zero.json",
    ("ln -s %s hm/leak.json && rm hm/tokenizer_config.json && ln -s %s hm/tokenizer_config.json"):format(q(c), q(c)),
    "r=hfc/hub/models--zq6-org--zq6-net; mkdir -p $r/blobs $r/refs $r/snapshots/" .. rev,
    "printf " .. rev .. " > $r/refs/main",
    "for f in config.json tokenizer.json model.safetensors; do cp /models/stories260K/$f $r/blobs/b-$f; ln -s ../../blobs/b-$f $r/snapshots/" .. rev .. "/$f; done",
    ("ln -s %s $r/snapshots/%s/notes.txt"):format(q(c), rev),
    "echo planted",
  }, "\n")
end

-- Starts a second sandbox (in a fresh process, killed after 60 s) with `model` and greps every
-- file under /models for the canary's secret: what the child printed, and its status.
local function second_sandbox(model, hidden, hf_home)
  return child(([[
local ffi = require "ffi"
pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
ffi.C.setenv("SEER_SANDBOX_DIR", %q, 1)
if %q ~= "" then ffi.C.setenv("HF_HOME", %q, 1); ffi.C.setenv("HF_HUB_OFFLINE", "1", 1) end
local env = require "seer.environment"
local ok, err = pcall(function()
  local s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli", models = { env.ModelConfig{ name = %q, hidden = %s } } })
    :start{ name = "second" }
  local out = s:exec(%q)
  s:terminate()
  io.write("inside ", out, "\n")
end)
io.write("started ", tostring(ok), " ", ok and "" or tostring(err), "\n")
]]):format(root .. "/sb2", hf_home or "", hf_home or "", model, tostring(hidden),
    "ls /models/*/ | sort | tr '\\n' ' '; echo; grep -rla -- " .. q(SECRET) .. " /models/ | sed 's/^/FOUND /'; true"), 60)
end

A.attack{
  name = "models: a model folder a sandbox wrote (FIFOs, /dev/zero, links to a host file) used in a second sandbox",
  class = 2, sh = plant_sh,
  check = function(out, vector)
    T.contains(out, "planted", vector .. ": the plant failed")
    local ws = A.rig().sandbox.workspace_dir
    -- hidden: starts (nothing waited on, nothing read without bound); the links to the host
    -- file are refused by staging (tokenizer_config.json is kept) with a message naming it
    local rc, got = second_sandbox(ws .. "/hm", true)
    T.eq(rc, 0, vector .. ": the second sandbox's start did not end (137: still waiting at the timeout):\n" .. got)
    T.ok(not got:find("FOUND", 1, true), vector .. ": the host canary is readable in the second sandbox:\n" .. got)
    T.contains(got, "started false")
    T.contains(got, "/hm/tokenizer_config.json is a symbolic link that leads out of its model folder")
    -- the same folder less that link: starts, the model's files there, the canary nowhere
    os.remove(ws .. "/hm/tokenizer_config.json")
    rc, got = second_sandbox(ws .. "/hm", true)
    T.eq(rc, 0, vector .. ": the second sandbox's start did not end:\n" .. got)
    T.contains(got, "started true")
    T.contains(got, "inside config.json generation_config.json model.safetensors special_tokens_map.json tokenizer.json \n")
    T.ok(not got:find("FOUND", 1, true), vector .. ": the host canary is readable in the second sandbox:\n" .. got)
    -- visible, from the cache the sandbox wrote: refused, naming the link; the canary not mounted
    rc, got = second_sandbox("zq6-org/zq6-net", false, ws .. "/hfc")
    T.eq(rc, 0, vector .. ": the second sandbox's start did not end:\n" .. got)
    T.ok(not got:find("FOUND", 1, true), vector .. ": the host canary is readable in the second sandbox:\n" .. got)
    T.contains(got, "started false")
    T.contains(got, "/notes.txt is a symbolic link that leads out of its model folder")
  end,
}

T.test("models: cleanup (the attack rig ends)", function() A.close() end)
