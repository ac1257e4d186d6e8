-- seer.hub against a hostile hub (docs/hub.md, "Limits"; docs/security.md): HF_ENDPOINT names a
-- mirror the host does not trust, and the hub cache may hold what an earlier download or a
-- sandbox that can write it left there. The server is a Python script written by the test that
-- plays a scenario (scenario.json: the API reply, and per file its ETag, size, body or redirect,
-- a body sent slowly, a redirect with an endless body) and logs every request with its
-- Authorization header.
local T = require "testing"
local hub = require "seer.hub"
local process = require "seer.process"
local json = seer.json
local safe_fs = require "seer.safe_fs"

-- the hub is online here, whatever an earlier test file of this process or the caller set
T.setenv("HF_HUB_OFFLINE", nil)
T.setenv("HF_HUB_CACHE", nil)

local SERVER = [==[
import json, os, sys, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
DIR, PORT_FILE = sys.argv[1], sys.argv[2]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_HEAD(self): self.answer(False)
    def do_GET(self): self.answer(True)
    def answer(self, get):
        s = json.load(open(os.path.join(DIR, "scenario.json")))
        with open(os.path.join(DIR, "log"), "a") as f:
            f.write(json.dumps([self.command, self.headers.get("host"), self.path,
                                self.headers.get("authorization")]) + "\n")
        p = urllib.parse.unquote(self.path)
        status, headers, body = 404, {}, b""
        if p.startswith("/api/models/"):
            status, body = 200, json.dumps(s["api"]).encode()
        elif "/resolve/" in p:
            name = p.split("/resolve/", 1)[1].split("/", 1)[1]
            f = s["files"].get(name)
            if f:
                data = f.get("body", "").encode("latin-1")
                headers["X-Linked-Etag"] = '"%s"' % f["etag"]
                headers["X-Linked-Size"] = str(f.get("size", len(data)))
                if get and f.get("redirect"):
                    status, headers["Location"] = 302, f["redirect"]
                else:
                    status, body = 200, data
        elif p.startswith("/cdn/"):
            status, body = 200, s["cdn"].encode("latin-1")
        elif p.startswith("/loop"):
            status, headers["Location"] = 302, p
        rb = get and "/resolve/" in p and status == 302 and f and f.get("redirect_body")
        self.send_response(status)
        for k, v in headers.items(): self.send_header(k, v)
        if rb and rb["framing"] == "chunked": self.send_header("Transfer-Encoding", "chunked")
        else: self.send_header("Content-Length", str(10 ** 15 if rb else len(body)))
        self.end_headers()
        import time
        if rb:  # a redirect whose body never ends, on a kept-alive connection: "A"s for seconds
            t0, chunk = time.monotonic(), b"A" * rb.get("chunk", 65536)
            try:
                while time.monotonic() - t0 < rb["seconds"]:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if rb["framing"] == "chunked" else chunk)
                    self.wfile.flush()
                    if rb.get("every"): time.sleep(rb["every"])
            except OSError: pass
            self.close_connection = True
            return
        if get and "/resolve/" in p and f and f.get("stall"):
            time.sleep(f["stall"])
        if get and "/resolve/" in p and f and f.get("drip"):  # the body, a chunk at a time
            try:
                for i in range(0, len(body), f["drip"]["chunk"]):
                    self.wfile.write(body[i:i + f["drip"]["chunk"]])
                    self.wfile.flush()
                    time.sleep(f["drip"]["every"])
            except OSError: pass
            return
        if get: self.wfile.write(body)
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
open(PORT_FILE + ".tmp", "w").write(str(s.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
s.serve_forever()
]==]

local srv -- {url, port, dir, child}

local function read(path) -- the file's text, or nil when it is not there
  local f = io.open(path, "rb")
  if not f then return nil end
  local t = f:read("*a")
  f:close()
  return t
end

local function server()
  if srv then return srv end
  local dir = T.tmpdir()
  seer.write_file(dir .. "/server.py", SERVER)
  seer.write_file(dir .. "/scenario.json", "{}")
  local child = process.spawn{ argv = { "/usr/bin/python3", dir .. "/server.py", dir, dir .. "/port" },
                               stdout = "null", stderr = dir .. "/stderr" }
  local deadline = process.now_ms() + 10000
  while true do
    local port = read(dir .. "/port")
    if port then
      srv = { url = "http://127.0.0.1:" .. port, port = port, dir = dir, child = child }
      return srv
    end
    if process.now_ms() > deadline then
      child:stop(200)
      error("the hostile hub did not start: " .. (read(dir .. "/stderr") or ""))
    end
    process.sleep_ms(20)
  end
end

local COMMIT = "0123456789abcdef0123456789abcdef01234567"

-- Plays files ({name = {etag=, body=, size=, redirect=}}) from a fresh cache; returns the
-- download's result (ok, snapshot dir or error), the cache directory and the request log.
local function play(files, opts, api)
  local s = server()
  local sib = {}
  for name in pairs(files) do sib[#sib + 1] = { rfilename = name } end
  table.sort(sib, function(a, b) return a.rfilename < b.rfilename end)
  seer.write_file(s.dir .. "/scenario.json", json.encode{
    api = api or { sha = COMMIT, siblings = sib }, files = files, cdn = "from the file host" })
  os.remove(s.dir .. "/log")
  opts = opts or {}
  local cache = opts.cache_dir or (T.tmpdir() .. "/hub")
  local o = { endpoint = s.url, cache_dir = cache, allow_patterns = { "*" }, progress = false, max_workers = 1 }
  for k, v in pairs(opts) do o[k] = v end
  local ok, res = pcall(hub.download, "org/m", o)
  local log = {}
  for l in (read(s.dir .. "/log") or ""):gmatch("[^\n]+") do log[#log + 1] = json.decode(l) end
  return ok, res, cache, log
end

local function planted_cache()
  local cache = T.tmpdir() .. "/hub"
  assert(os.execute(("mkdir -p '%s/models--org--m/blobs' '%s/.locks/models--org--m'"):format(cache, cache)) == 0)
  return cache, cache .. "/models--org--m"
end

-- ---- links planted in the cache ---------------------------------------------------------------

T.test("a blob's .incomplete planted as a link to a file outside the cache is refused, the file untouched", function()
  local cache, rd = planted_cache()
  local victim = T.tmpdir() .. "/bashrc"
  seer.write_file(victim, "the user's own file\n")
  assert(os.execute(("ln -s '%s' '%s/blobs/e1-1.incomplete'"):format(victim, rd)) == 0)
  local ok, err = play({ ["x.bin"] = { etag = "e1-1", body = "hostile bytes" } }, { cache_dir = cache })
  T.eq(seer.read_file(victim), "the user's own file\n", "the download wrote through the planted link")
  T.eq(ok, false)
  T.contains(tostring(err), "blobs/e1-1.incomplete")
  T.contains(tostring(err), "not a plain file")
end)

T.test("a blob's .incomplete planted as a hard link to a file outside the cache is refused", function()
  local cache, rd = planted_cache()
  local victim = cache .. "/../victim"
  seer.write_file(victim, "the user's own file\n")
  assert(os.execute(("ln '%s' '%s/blobs/e2-1.incomplete'"):format(victim, rd)) == 0)
  local ok, err = play({ ["x.bin"] = { etag = "e2-1", body = "hostile bytes" } }, { cache_dir = cache })
  T.eq(seer.read_file(victim), "the user's own file\n", "the download wrote through the planted hard link")
  T.eq(ok, false)
  T.contains(tostring(err), "not a plain file")
end)

T.test("a lock file planted as a link is refused, nothing is created where it points", function()
  local cache = planted_cache()
  local target = T.tmpdir() .. "/created-by-seer"
  assert(os.execute(("ln -s '%s' '%s/.locks/models--org--m/e3-1.lock'"):format(target, cache)) == 0)
  local ok, err = play({ ["x.bin"] = { etag = "e3-1", body = "abc" } }, { cache_dir = cache })
  T.eq(safe_fs.lstat(target), nil, "the lock was created through the planted link")
  T.eq(ok, false)
  T.contains(tostring(err), "e3-1.lock")
end)

T.test("a directory of the repo planted as a link out of the cache is refused before anything is written there", function()
  for _, where in ipairs{ "blobs", "snapshots/" .. COMMIT, "snapshots/" .. COMMIT .. "/sub" } do
    local cache, rd = planted_cache()
    local outside = T.tmpdir()
    assert(os.execute(("rm -rf '%s/blobs'; mkdir -p \"$(dirname '%s/%s')\"; ln -s '%s' '%s/%s'")
      :format(rd, rd, where, outside, rd, where)) == 0)
    local ok, err = play({ ["sub/x.bin"] = { etag = "e4-1", body = "abc" } }, { cache_dir = cache })
    local _, listing = T.sh("ls -A '" .. outside .. "'")
    T.eq(listing, "", where .. ": the download wrote outside the cache: " .. listing)
    T.eq(ok, false, where)
    T.contains(tostring(err), "symbolic link", where)
  end
end)

-- ---- what the server names -------------------------------------------------------------------

T.test("unsafe file names from the listing are refused and quoted, nothing is written", function()
  for _, name in ipairs{ "../../x", "/etc/x", "a/../../x", "a//b", "./a", "a\nb", "a\027[2Jb", "a\\b",
                         "a\226\128\174b" } do
    local ok, err, cache = play({ [name] = { etag = "e5-1", body = "abc" } })
    T.eq(ok, false, name)
    T.contains(tostring(err), "unsafe name", name)
    T.ok(not tostring(err):find("[\n\027]"), "the message holds a raw control byte")
    T.eq(safe_fs.lstat(cache .. "/models--org--m/blobs"), nil, name)
  end
end)

T.test("ETags and commits that are not a plain token are refused", function()
  for _, etag in ipairs{ "../../x", "a/b", ".hidden", ("e"):rep(129), "e6.incomplete" } do
    local ok, err = play({ ["x.bin"] = { etag = etag, body = "abc" } })
    T.eq(ok, false, etag)
    T.contains(tostring(err), "no usable ETag", etag)
  end
  for _, sha in ipairs{ "../x", "a/b", ("c"):rep(200) } do
    local ok, err = play({ ["x.bin"] = { etag = "e7-1", body = "abc" } }, nil,
      { sha = sha, siblings = { { rfilename = "x.bin" } } })
    T.eq(ok, false, sha)
    T.contains(tostring(err), "did not answer with a model's sha", sha)
  end
end)

T.test("a revision pinned to a commit is refused when the server answers another commit", function()
  local other = ("9"):rep(40)
  local ok, err = play({ ["x.bin"] = { etag = "e8-1", body = "abc" } }, { revision = COMMIT }, {
    sha = other, siblings = { { rfilename = "x.bin" } } })
  T.eq(ok, false)
  T.contains(tostring(err), "answered with commit " .. other)
end)

T.test("a ref in the cache that is not a commit is not followed", function()
  local cache, rd = planted_cache()
  assert(os.execute(("mkdir -p '%s/refs' '%s/snapshots/a/b'; printf 'a/b' > '%s/refs/main'"):format(rd, rd, rd)) == 0)
  local ok, err = pcall(hub.cached, "org/m", { cache_dir = cache })
  T.eq(ok, false)
  T.contains(tostring(err), rd .. "/refs/main holds 'a/b', not a commit id; seer does not follow it (remove it and run again)")
end)

-- ---- what the cache holds, read by the offline lookup ------------------------------------------

-- Runs hub.cached (or, with offline, hub.download under HF_HUB_OFFLINE=1) for org/m in the cache
-- in a child seer, which gets timeout_ms: a FIFO read by path would hang this process for good.
-- Returns "ok <dir>", "nil", "err <message>", or "hung".
local function cached_in_child(cache, offline, timeout_ms)
  local dir = T.tmpdir()
  local code = ([[
local hub = require "seer.hub"
local ok, r = pcall(%s, "org/m", { cache_dir = %q })
local f = io.open(%q, "wb")
f:write(not ok and ("err " .. tostring(r)) or r == nil and "nil" or ("ok " .. r))
f:close()
]]):format(offline and "hub.download" or "hub.cached", cache, dir .. "/out")
  local child = process.spawn{ argv = { require("seer.jupyter").seer_binary(), "-e", code },
    env = { HF_HUB_OFFLINE = offline and "1" or false,
            SEER_LUA_DIR = os.getenv("SEER_LUA_DIR") or (seer.script_dir() .. "/../../lua") },
    stdout = "null", stderr = dir .. "/stderr" }
  if not child:wait(timeout_ms or 5000) then
    child:stop(0)
    return "hung"
  end
  return read(dir .. "/out") or ("no answer: " .. (read(dir .. "/stderr") or ""))
end

-- A repo in the cache as huggingface_hub leaves it: refs/main names COMMIT, whose snapshot links
-- config.json and sub/w.bin to blobs.
local function good_repo()
  local cache, rd = planted_cache()
  local snap = rd .. "/snapshots/" .. COMMIT
  assert(os.execute(([[mkdir -p '%s/refs' '%s/sub' && printf '%s' > '%s/refs/main' &&
    printf '{}' > '%s/blobs/e30-1' && printf 'w' > '%s/blobs/e31-1' &&
    ln -s ../../blobs/e30-1 '%s/config.json' && ln -s ../../../blobs/e31-1 '%s/sub/w.bin']]):format(
    rd, snap, COMMIT, rd, rd, rd, snap, snap)) == 0)
  return cache, rd, snap
end

T.test("refs/<revision> that is a FIFO, a link, a folder, too long or not a commit is refused naming it, never waited on", function()
  -- the old code read refs/main with fopen by path: a FIFO there hung hub.cached (and so
  -- sandbox starts and offline downloads) for good, and a link was followed anywhere
  local outside = T.tmpdir()
  seer.write_file(outside .. "/ref", COMMIT)
  for _, c in ipairs{
    { "mkfifo '%s'", "is a FIFO, not a regular file; seer does not read it (remove it and run again)" },
    { "ln -s '" .. outside .. "/ref' '%s'", "is a symbolic link; seer does not follow links inside the model cache (remove it and run again)" },
    { "ln -s /dev/zero '%s'", "is a symbolic link; seer does not follow links" },
    { "mkdir '%s'", "is a directory, not a regular file" },
    { "head -c 100000 /dev/zero | tr '\\0' 0 > '%s'", "holds 100000 bytes, more than a ref (a commit id) can (256 at most)" },
    { "printf '../../../etc' > '%s'", "holds '../../../etc', not a commit id" },
    { "printf '' > '%s'", "holds '', not a commit id" },
  } do
    local cache, rd = good_repo()
    local ref = rd .. "/refs/main"
    assert(os.execute("rm -f '" .. ref .. "' && " .. c[1]:format(ref)) == 0, c[1])
    for _, offline in ipairs{ false, true } do
      local t0 = process.now_ms()
      local got = cached_in_child(cache, offline)
      T.ok(got ~= "hung", c[1] .. ": hung")
      T.contains(got, "err ", c[1])
      T.contains(got, ref .. " " .. c[2], c[1])
      T.ok(process.now_ms() - t0 < 4000, c[1])
    end
  end
  -- the same repo with a plain ref is found
  local cache, _, snap = good_repo()
  T.eq(cached_in_child(cache, false), "ok " .. snap)
  T.eq(hub.cached("org/m", { cache_dir = cache }), snap)
end)

T.test("a folder of the repo that is a link is not followed by the offline lookup", function()
  -- the old code stat'ed snapshots/<commit> by path: a link to any folder was handed out as
  -- the model (the sandbox mounts it)
  for _, where in ipairs{ "refs", "snapshots", "snapshots/" .. COMMIT } do
    local cache, rd = good_repo()
    local moved = T.tmpdir() .. "/moved"
    assert(os.execute(("mv '%s/%s' '%s' && ln -s '%s' '%s/%s'"):format(rd, where, moved, moved, rd, where)) == 0)
    local ok, err = pcall(hub.cached, "org/m", { cache_dir = cache })
    T.eq(ok, false, where)
    T.contains(tostring(err), rd .. "/" .. where .. " is a symbolic link; seer does not follow links inside the model cache", where)
  end
  local cache, rd = good_repo()
  local other = T.tmpdir()
  assert(os.execute(("mv '%s' '%s/repo' && ln -s '%s/repo' '%s'"):format(rd, other, other, rd)) == 0)
  local ok, err = pcall(hub.cached, "org/m", { cache_dir = cache })
  T.eq(ok, false)
  T.contains(tostring(err), rd .. " is a symbolic link")
end)

T.test("a download replaces a snapshot file that leads elsewhere instead of taking it as fetched", function()
  -- the old code took any entry that stat() could follow as already fetched: a link to a file
  -- outside the cache (or a FIFO, or a link to a blob that is itself a link out) stayed in the
  -- snapshot it handed back as the file it was asked for
  local victim = T.tmpdir() .. "/id_rsa"
  seer.write_file(victim, "secret\n")
  for _, planted in ipairs{ "ln -s '" .. victim .. "' '%s/x.bin'", "mkfifo '%s/x.bin'",
                            "ln -s ../../../../../x.bin '%s/x.bin'", "ln -s ../blobs/e40-1 '%s/x.bin'",
                            "ln -s '" .. victim .. "' '%s/../../blobs/e40-9' && ln -s ../../blobs/e40-9 '%s/x.bin'" } do
    local cache, rd = planted_cache()
    local snap = rd .. "/snapshots/" .. COMMIT
    assert(os.execute(("mkdir -p '%s' && " .. planted):format(snap, snap, snap)) == 0, planted)
    local ok, res = play({ ["x.bin"] = { etag = "e40-1", body = "served bytes" } }, { cache_dir = cache })
    T.eq(ok, true, planted .. ": " .. tostring(res))
    T.eq(seer.read_file(res .. "/x.bin"), "served bytes", planted)
    local _, target = T.sh("readlink '" .. snap .. "/x.bin'")
    T.eq(target, "../../blobs/e40-1\n", planted)
    T.eq(seer.read_file(victim), "secret\n")
  end
  -- seer's own link to a blob that is there, and a regular file, are taken as fetched: no GET
  for _, planted in ipairs{ "printf 'served bytes' > '%s/../../blobs/e40-1' && ln -s ../../blobs/e40-1 '%s/x.bin'",
                            "printf 'a copy' > '%s/x.bin'" } do
    local cache, rd = planted_cache()
    local snap = rd .. "/snapshots/" .. COMMIT
    assert(os.execute(("mkdir -p '%s' && " .. planted):format(snap, snap, snap)) == 0, planted)
    local ok, res, _, log = play({ ["x.bin"] = { etag = "e40-1", body = "served bytes" } }, { cache_dir = cache })
    T.eq(ok, true, planted .. ": " .. tostring(res))
    for _, l in ipairs(log) do T.ok(not l[3]:find("/resolve/", 1, true), planted .. ": fetched again: " .. l[3]) end
  end
end)

T.test("a blob planted as a link or a FIFO is not linked into the snapshot", function()
  -- the old code stat'ed blobs/<etag> following links: a link to a file anywhere was taken as
  -- the blob and the snapshot linked to it
  local victim = T.tmpdir() .. "/id_rsa"
  seer.write_file(victim, "secret\n")
  for _, c in ipairs{ { "ln -s '" .. victim .. "' '%s'", "is a symbolic link, not a regular file" },
                      { "mkfifo '%s'", "is a FIFO, not a regular file" } } do
    local cache, rd = planted_cache()
    assert(os.execute(c[1]:format(rd .. "/blobs/e43-1")) == 0)
    local ok, err = play({ ["x.bin"] = { etag = "e43-1", body = "abc" } }, { cache_dir = cache })
    T.eq(ok, false, c[1])
    T.contains(tostring(err), rd .. "/blobs/e43-1 " .. c[2] .. "; seer does not follow it or link a snapshot to it (remove it and run again)", c[1])
    T.eq(safe_fs.lstat(rd .. "/snapshots/" .. COMMIT .. "/x.bin"), nil, c[1])
  end
end)

T.test("a lock file planted as a FIFO is refused", function()
  local cache = planted_cache()
  local lock = cache .. "/.locks/models--org--m/e44-1.lock"
  assert(os.execute(("mkfifo '%s'"):format(lock)) == 0)
  local ok, err = play({ ["x.bin"] = { etag = "e44-1", body = "abc" } }, { cache_dir = cache })
  T.eq(ok, false)
  T.contains(tostring(err), "cannot lock " .. lock .. ": it is a FIFO, not a regular file (remove it and run again)")
end)

-- ---- sizes and redirects ----------------------------------------------------------------------

T.test("a body longer than the declared size is cut and not kept", function()
  local ok, err, cache = play({ ["x.bin"] = { etag = "e9-1", body = ("z"):rep(100000), size = 10 } })
  T.eq(ok, false)
  T.contains(tostring(err), "more than the 10 bytes declared")
  T.eq(safe_fs.lstat(cache .. "/models--org--m/blobs/e9-1.incomplete"), nil)
end)

T.test("the token does not follow a redirect to another host; file:// and loops are refused", function()
  local s = server()
  local ok, res, _, log = play({ ["x.bin"] = { etag = "e10-1", size = 18,
    redirect = "http://localhost:" .. s.port .. "/cdn/x" } }, { token = "hf_secret" })
  T.eq(ok, true, tostring(res))
  local cdn = 0
  for _, l in ipairs(log) do
    if l[3]:find("^/cdn/") then
      cdn = cdn + 1
      T.ok(type(l[4]) ~= "string", "the token went to the file host: " .. json.encode(l))
    else
      T.eq(l[4], "Bearer hf_secret")
    end
  end
  T.eq(cdn, 1)
  ok, res, _, log = play({ ["x.bin"] = { etag = "e11-1", size = 5, redirect = "file:///etc/hostname" } })
  T.eq(ok, false)
  T.contains(tostring(res), "\"file\" not supported or disabled")
  T.contains(tostring(res), "the file host's redirect cannot be followed")
  local gets = 0
  for _, l in ipairs(log) do if l[1] == "GET" and l[3]:find("/resolve/", 1, true) then gets = gets + 1 end end
  T.eq(gets, 1, "a redirect to file:// was tried again as if the network broke")
  ok, res = play({ ["x.bin"] = { etag = "e12-1", size = 5, redirect = s.url .. "/loop" } })
  T.eq(ok, false)
  T.contains(tostring(res), "redirect")
end)

T.test("a file that is also a folder of another is refused naming both, before anything is written", function()
  -- "a" and "a/b": the download failed later on a misleading "a is a symbolic link" message
  local ok, err, cache = play({ ["a"] = { etag = "e13-1", body = "1" }, ["a-b"] = { etag = "e14-1", body = "2" },
                                ["a/b"] = { etag = "e15-1", body = "3" } })
  T.eq(ok, false)
  T.contains(tostring(err), "names 'a' both as a file and as a folder of 'a/b'")
  T.eq(safe_fs.lstat(cache .. "/models--org--m/blobs"), nil)
  -- only the files to fetch count: "a/b" alone is fine when "a" is not asked for
  local ok2, res2 = play({ ["a"] = { etag = "e16-1", body = "1" }, ["a/b"] = { etag = "e17-1", body = "3" } },
                         { allow_patterns = { "a/*" } })
  T.eq(ok2, true, tostring(res2))
end)

T.test("files fetched together may not declare more than the disk holds together", function()
  -- each of several files declaring most of the free space passed the check alone
  local probe = T.tmpdir()
  local p = io.popen("df -B1 --output=avail '" .. probe .. "' | tail -1")
  local avail = tonumber((p:read("*a") or ""):match("%d+"))
  p:close()
  if not avail or avail < 1e6 then T.skip("cannot read the free space of " .. probe) end
  local big = math.floor(avail * 0.6)
  local ok, err = play({ ["x1.bin"] = { etag = "e18-1", size = big, body = "x", stall = 3 },
                         ["x2.bin"] = { etag = "e19-1", size = big, body = "y", stall = 3 } }, { max_workers = 2 })
  T.eq(ok, false)
  T.contains(tostring(err), "more to fetch beside the")
end)

-- ---- the cache changed while seer works -------------------------------------------------------

-- Takes the blob's lock (as another process fetching it would), waits until seer has asked for
-- the file (HEAD, or GET with phase "get"), then swaps the repo's blobs folder for a link out
-- of the cache and lets go of the lock: what a process that can write the cache can do while
-- seer is between its checks and its writes.
local RACER = [[
import fcntl, json, os, sys, time
lock, log, name, method, blobs, outside, ready = sys.argv[1:8]
f = open(lock, "a+")
if method == "HEAD": fcntl.flock(f, fcntl.LOCK_EX)
open(ready, "w").write("1")
def asked():
    try: lines = open(log).read().splitlines()
    except OSError: return False
    return any(json.loads(l)[0] == method and json.loads(l)[2].endswith("/" + name) for l in lines)
deadline = time.time() + 10
while not asked() and time.time() < deadline: time.sleep(0.01)
time.sleep(0.4)
os.rename(blobs, blobs + ".moved")
os.symlink(outside, blobs)
fcntl.flock(f, fcntl.LOCK_UN)
]]

local function race(name, etag, method, file)
  local cache, rd = planted_cache()
  local outside, dir = T.tmpdir(), T.tmpdir()
  seer.write_file(dir .. "/racer.py", RACER)
  local s = server()
  local racer = process.spawn{ argv = { "/usr/bin/python3", dir .. "/racer.py",
    cache .. "/.locks/models--org--m/" .. etag .. ".lock", s.dir .. "/log", name, method, rd .. "/blobs", outside,
    dir .. "/ready" }, stdout = "null", stderr = dir .. "/stderr" }
  local deadline = process.now_ms() + 10000
  while not read(dir .. "/ready") and process.now_ms() < deadline do process.sleep_ms(10) end
  local ok, err = play({ [name] = file }, { cache_dir = cache })
  T.ok(racer:wait(10000), "the racer did not end")
  T.eq(read(dir .. "/stderr"), "", "the racer failed")
  local _, listing = T.sh("ls -A '" .. outside .. "'")
  return ok, err, listing
end

T.test("a blobs folder swapped for a link while seer waits for the blob's lock is not written through", function()
  -- the old code checked the folders for links (lstat) before taking the lock and wrote the
  -- .incomplete by path after it: the file was created, filled and renamed through the link
  local ok, err, listing = race("race1.bin", "e23-1", "HEAD", { etag = "e23-1", body = "raced bytes" })
  T.eq(listing, "", "the download wrote outside the cache: " .. listing)
  T.eq(ok, false)
  T.contains(tostring(err), "models--org--m/blobs is a symbolic link; seer does not follow links inside the model cache")
end)

T.test("a blobs folder swapped for a link during the GET is not written through, nor linked as if fetched", function()
  -- the blob is written and renamed in the folder seer opened; the snapshot link would lead
  -- through the new link to nothing, so the download fails naming it
  local ok, err, listing = race("race2.bin", "e24-1", "GET", { etag = "e24-1", body = "raced bytes", stall = 1.5 })
  T.eq(listing, "", "the download wrote outside the cache: " .. listing)
  T.eq(ok, false)
  T.contains(tostring(err), "models--org--m/blobs is a symbolic link")
end)

-- ---- time ----------------------------------------------------------------------------------------

-- Runs fn with the environment variables vars set (a value false: unset), then restores them.
local function with_env(vars, fn)
  local old = {}
  for k, v in pairs(vars) do
    old[k] = os.getenv(k) or false
    T.setenv(k, v or nil)
  end
  local ok, e = pcall(fn)
  for k, v in pairs(old) do T.setenv(k, v or nil) end
  if not ok then error(e, 0) end
end

local function timed_play(...)
  local t0 = process.now_ms()
  local ok, res, cache, log = play(...)
  return ok, res, process.now_ms() - t0, cache, log
end

T.test("an endless body on a redirect is cut at 64 KiB, not read for as long as the server sends", function()
  -- curl reads a followed redirect's body to keep the connection and gives it to no callback:
  -- the old code read 15 GB in 6 s of it, for as long as the server went on
  local s = server()
  for _, framing in ipairs{ "length", "chunked" } do
    local ok, err, took = timed_play({ ["x.bin"] = { etag = "e25-1", size = 18, redirect = s.url .. "/cdn/x",
      redirect_body = { framing = framing, seconds = 4 } } })
    T.eq(ok, false, framing)
    T.contains(tostring(err), "org/m: x.bin: a redirect came with a body of more than 64 KiB", framing)
    T.ok(took < 2000, framing .. ": took " .. took .. " ms")
  end
end)

T.test("a redirect's body dripping in forever is cut by the file's time", function()
  -- under 64 KiB for longer than the test runs, above the stall rate: only the time bounds it
  local s = server()
  with_env({ SEER_HUB_TIME_FLOOR = "1", SEER_HUB_MIN_RATE = "1000000" }, function()
    local ok, err, took = timed_play({ ["x.bin"] = { etag = "e26-1", size = 18, redirect = s.url .. "/cdn/x",
      redirect_body = { framing = "length", seconds = 4, chunk = 200, every = 0.05 } } })
    T.eq(ok, false)
    T.contains(tostring(err), "org/m: x.bin: not fetched in the 1.0 s it is allowed (1 s, plus 1 s per 1000000 bytes")
    T.ok(took < 2500, "took " .. took .. " ms")
  end)
end)

T.test("a file dripping in slower than its time allows is cut, and what arrived is kept", function()
  local body = ("d"):rep(4096) -- 512 bytes every 0.2 s: 1.6 s in all, 2.5 KiB/s (no stall)
  local file = { etag = "e27-1", body = body, drip = { chunk = 512, every = 0.2 } }
  with_env({ SEER_HUB_TIME_FLOOR = "0.5", SEER_HUB_MIN_RATE = "1000000" }, function()
    local ok, err, took, cache = timed_play({ ["x.bin"] = file })
    T.eq(ok, false)
    T.contains(tostring(err), "org/m: x.bin: not fetched in the 0.5 s it is allowed (0.5 s, plus 1 s per 1000000 bytes")
    T.contains(tostring(err), "of 4096 bytes are kept: run again to resume")
    T.ok(took < 1400, "took " .. took .. " ms")
    local part = safe_fs.lstat(cache .. "/models--org--m/blobs/e27-1.incomplete")
    T.ok(part and part.size > 0 and part.size < 4096, "the bytes that arrived were not kept")
  end)
  -- the options win over the variables
  with_env({ SEER_HUB_TIME_FLOOR = "60" }, function()
    local ok, err, took = timed_play({ ["x.bin"] = file }, { time_floor = 0.3, min_rate = 4096 })
    T.eq(ok, false)
    T.contains(tostring(err), "not fetched in the 1.3 s it is allowed (0.3 s, plus 1 s per 4096 bytes")
    T.ok(took < 1500, "took " .. took .. " ms")
  end)
  -- a time that fits lets it through
  with_env({ SEER_HUB_TIME_FLOOR = "5" }, function()
    local ok, res = play({ ["x.bin"] = file })
    T.eq(ok, true, tostring(res))
    T.eq(seer.read_file(res .. "/x.bin"), body)
  end)
end)

T.test("time_floor and min_rate must be numbers above 0", function()
  for _, bad in ipairs{ 0, -1, "1", 1 / 0 } do
    local ok, err = play({ ["x.bin"] = { etag = "e28-1", body = "abc" } }, { min_rate = bad })
    T.eq(ok, false, tostring(bad))
    T.contains(tostring(err), "min_rate must be a number above 0", tostring(bad))
    ok, err = play({ ["x.bin"] = { etag = "e28-1", body = "abc" } }, { time_floor = bad })
    T.contains(tostring(err), "time_floor must be a number above 0", tostring(bad))
  end
  for _, v in ipairs{ { "SEER_HUB_MIN_RATE", "fast" }, { "SEER_HUB_TIME_FLOOR", "-3" } } do
    with_env({ [v[1]] = v[2] }, function()
      local ok, err = play({ ["x.bin"] = { etag = "e28-1", body = "abc" } })
      T.eq(ok, false, v[1])
      T.contains(tostring(err), v[1] .. "='" .. v[2] .. "': expected ")
    end)
  end
end)

T.test("the server is stopped", function()
  if srv then srv.child:stop(200) end
  srv = nil
end)
