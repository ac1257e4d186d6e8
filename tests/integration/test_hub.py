"""seer.hub against a local imitation of the Hugging Face hub: the API call, resolve URLs with a
redirect to a separate file host for LFS files, ETag/X-Linked-Etag/X-Repo-Commit headers,
Range requests, auth. The downloaded repo holds the real stories260K, so the cache it leaves
must load and generate through seer.model.load(repo_id). The server can also delay, corrupt,
cut short or stall single files, and counts how many file transfers overlap, for the tests of
fetching several files at once."""
import hashlib
import http.server
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse

from seertest import ROOT, SEER, env, run

MODEL = os.path.join(ROOT, "tests", "fixtures", "models", "stories260K")
REPO = "tiny-org/stories"
COMMIT = "3f1c0a9d5e7b2c4f6a8e0d1b3c5e7f9a1b2c3d4e"
TOKEN = "hf_secret_token_123"
PRELUDE = 'local hub = require "seer.hub"\n'

LFS = {"model.safetensors"}


def repo_files():
    files = {}
    for name in os.listdir(MODEL):
        p = os.path.join(MODEL, name)
        if os.path.isfile(p) and name not in ("LICENSE", "PROVENANCE.md"):
            with open(p, "rb") as f:
                files[name] = f.read()
    files["README.md"] = b"# a tiny model\n"
    files["sub/dir/extra.txt"] = b"nested file\n"
    return files


def git_oid(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def bins(n, size, seed=0):
    """n files w0.bin.. of random bytes; the even ones are LFS files (on the file host)."""
    rnd = random.Random(seed)
    files = {f"w{i}.bin": rnd.randbytes(size) for i in range(n)}
    return files, {f"w{i}.bin" for i in range(0, n, 2)}


class FakeHub:
    def __init__(self):
        self.files = repo_files()
        self.requests = []  # (server, method, path, headers)
        self.require_token = False
        self.lfs = set(LFS)
        self.drop_once = set()  # file names whose first CDN GET is cut halfway
        self.delay = 0.0        # seconds before each file's GET is answered (counted as in flight)
        self.slow = {}          # name -> seconds, instead of delay, for that file
        self.latency = 0.0      # seconds before every answer (a distant server), not counted
        self.missing = set()    # listed by the API, but 404 on resolve
        self.corrupt = set()    # served with one byte changed (same length)
        self.truncate = set()   # served cut to half, with a Content-Length that says so
        self.stall = {}         # name -> seconds to hang after sending half the body
        self.endless = set()    # served with no length, running on past the file (up to 64 MiB)
        self.no_size = set()    # HEAD answered without Content-Length
        self.declared = {}      # name -> the X-Linked-Size sent instead of the real one
        self.sent = {}          # name -> bytes of the last endless body the client took
        self.api_body = None    # bytes: the API reply instead of the real one
        self.api_endless = None  # a status: the API reply is that, with a body that never ends
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_HEAD(self):
                self.handle_any(head=True)

            def do_GET(self):
                self.handle_any(head=False)

            def wait_turn(self, name, head):
                """The per-file delay; the overlap count covers only the wait, so a reply the
                client has already got is never counted as still in flight."""
                d = hub.slow.get(name, hub.delay)
                if head or not d:
                    return
                with hub.lock:
                    hub.inflight += 1
                    hub.max_inflight = max(hub.max_inflight, hub.inflight)
                time.sleep(d)
                with hub.lock:
                    hub.inflight -= 1

            def send_body(self, data, head, extra, drop=False, name=None):
                if not head and name in hub.corrupt:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[6:-1])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                for k, v in extra.items():
                    self.send_header(k, v)
                body = data[start:]
                if not head and name in hub.endless:  # no length: the file, then more and more
                    self.end_headers()
                    sent, chunk = 0, body + b"A" * (1 << 20)
                    try:
                        while sent < 64 << 20:
                            self.wfile.write(chunk)
                            sent += len(chunk)
                    except OSError:
                        pass
                    hub.sent[name] = sent
                    self.close_connection = True
                    return
                if head and name in hub.no_size:
                    self.end_headers()
                    return
                if not head and name in hub.truncate:
                    body = body[: len(body) // 2]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if head:
                    return
                if not head and name in hub.stall:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    time.sleep(hub.stall[name])
                    return
                if drop:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def handle_any(self, head):
                server = "cdn" if self.server is hub.cdn else "hub"
                with hub.lock:
                    hub.requests.append((server, self.command, self.path, dict(self.headers)))
                if hub.latency:
                    time.sleep(hub.latency)
                if server == "cdn":
                    name = urllib.parse.unquote(self.path[len("/lfs/"):])
                    drop = False
                    with hub.lock:
                        if not head and name in hub.drop_once:
                            hub.drop_once.discard(name)
                            drop = True
                    self.wait_turn(name, head)
                    return self.send_body(hub.files[name], head, {}, drop, name)
                if hub.require_token and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self.error(401)
                prefix_api = f"/api/models/{REPO}/revision/"
                prefix_res = f"/{REPO}/resolve/"
                if self.path.startswith(prefix_api) and hub.api_endless:
                    self.send_response(hub.api_endless)  # no length: the body ends when the connection does
                    self.end_headers()
                    t0 = time.monotonic()
                    try:
                        while time.monotonic() - t0 < 20:
                            self.wfile.write(b" " * 65536)
                    except OSError:
                        pass
                    self.close_connection = True
                    return
                if self.path.startswith(prefix_api) and hub.api_body is not None:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(hub.api_body)))
                    self.end_headers()
                    self.wfile.write(hub.api_body)
                    return
                if self.path.startswith(prefix_api) and self.path[len(prefix_api):] in ("main", COMMIT):
                    body = json.dumps({"id": REPO, "sha": COMMIT,
                                       "siblings": [{"rfilename": n} for n in sorted(hub.files)]}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if not head:
                        self.wfile.write(body)
                    return
                if self.path.startswith(prefix_res):
                    rev, _, name = self.path[len(prefix_res):].partition("/")
                    name = urllib.parse.unquote(name)
                    if rev not in ("main", COMMIT) or name not in hub.files or name in hub.missing:
                        return self.error(404)
                    data = hub.files[name]
                    if name in hub.lfs:
                        self.send_response(302)
                        self.send_header("Location", f"http://127.0.0.1:{hub.cdn.server_port}/lfs/"
                                                     + urllib.parse.quote(name))
                        self.send_header("X-Repo-Commit", COMMIT)
                        self.send_header("X-Linked-Etag", '"%s"' % hashlib.sha256(data).hexdigest())
                        if name not in hub.no_size:
                            self.send_header("X-Linked-Size", hub.declared.get(name, str(len(data))))
                        self.send_header("ETag", '"not-the-blob-name"')
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.wait_turn(name, head)
                    return self.send_body(data, head, {"X-Repo-Commit": COMMIT, "ETag": '"%s"' % git_oid(data)},
                                          name=name)
                return self.error(404)

            def error(self, code):
                body = b'{"error":"nope"}'
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 64  # the default 5 drops connections opened at the same moment

        self.hub = Server(("127.0.0.1", 0), Handler)
        self.cdn = Server(("127.0.0.1", 0), Handler)
        for s in (self.hub, self.cdn):
            s.handle_error = lambda *a: None  # a client that went away mid-reply is expected here
            threading.Thread(target=s.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.hub.server_port}"

    def close(self):
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    def file_requests(self):
        return [r for r in self.requests if r[0] == "cdn" or "/resolve/" in r[2]]

    def gets(self, name):
        """The GETs that carried name's bytes (the file host's for LFS files, else the hub's)."""
        if name in self.lfs:
            return [r for r in self.requests if r[0] == "cdn" and r[1] == "GET" and r[2] == f"/lfs/{name}"]
        return [r for r in self.requests if r[0] == "hub" and r[1] == "GET" and r[2].endswith(f"/{COMMIT}/{name}")]

    def etag(self, name):
        data = self.files[name]
        return hashlib.sha256(data).hexdigest() if name in self.lfs else git_oid(data)


class HubTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeHub()
        self.tmp = tempfile.mkdtemp(prefix="seer-hub-")
        self.home = os.path.join(self.tmp, "hf")
        self.repo_dir = os.path.join(self.home, "hub", "models--tiny-org--stories")

    def tearDown(self):
        self.fake.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def seer(self, code, timeout=60, **env):
        e = {"HF_HOME": self.home, "HF_ENDPOINT": self.fake.endpoint, "HF_TOKEN": None,
             "HF_HUB_OFFLINE": None, "HF_HUB_CACHE": None}
        e.update(env)
        return run(["-e", PRELUDE + code], timeout=timeout, **e)

    def download(self, opts="", timeout=60, **env):
        return self.seer(f'print(hub.download("{REPO}"{", " + opts if opts else ""}))', timeout=timeout, **env)

    def use_bins(self, n, size=64 * 1024):
        self.fake.files, self.fake.lfs = bins(n, size)

    def timed_download(self, opts="", timeout=60, **env):
        t0 = time.monotonic()
        r = self.download(opts, timeout=timeout, **env)
        return r, time.monotonic() - t0

    def cache_is_sound(self):
        """Every blob under its real name holds the bytes its name is the hash of, and every
        snapshot link reads as the served file. Returns the names linked in the snapshot."""
        blobs = os.path.join(self.repo_dir, "blobs")
        for b in os.listdir(blobs) if os.path.isdir(blobs) else []:
            if b.endswith(".incomplete"):
                continue
            with open(os.path.join(blobs, b), "rb") as f:
                data = f.read()
            self.assertIn(b, (hashlib.sha256(data).hexdigest(), git_oid(data)), f"blob {b} holds other bytes")
        snap = os.path.join(self.repo_dir, "snapshots", COMMIT)
        linked = set()
        for root, _, names in os.walk(snap):
            for n in names:
                rel = os.path.relpath(os.path.join(root, n), snap)
                with open(os.path.join(root, n), "rb") as f:
                    self.assertEqual(f.read(), self.fake.files[rel], rel)
                linked.add(rel)
        return linked

    def test_layout_load_and_no_refetch(self):
        r = self.download()
        self.assertEqual(r.returncode, 0, r.stderr)
        snap = os.path.join(self.repo_dir, "snapshots", COMMIT)
        self.assertEqual(r.stdout.strip(), snap)
        self.assertEqual(r.stderr, "")  # not a terminal: no progress output
        with open(os.path.join(self.repo_dir, "refs", "main")) as f:
            self.assertEqual(f.read(), COMMIT)
        wanted = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                  "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"}
        self.assertEqual(set(os.listdir(snap)), wanted)  # README.md and sub/ are filtered out
        blobs = set(os.listdir(os.path.join(self.repo_dir, "blobs")))
        for name in wanted:
            p = os.path.join(snap, name)
            self.assertTrue(os.path.islink(p), name)
            data = self.fake.files[name]
            etag = hashlib.sha256(data).hexdigest() if name in LFS else git_oid(data)
            self.assertEqual(os.readlink(p), "../../blobs/" + etag)
            with open(p, "rb") as f:
                self.assertEqual(f.read(), data)
        self.assertEqual(len(blobs), len(wanted))  # no .incomplete or .lock left
        # The LFS file came from the file host, and the token never went there.
        self.assertTrue(any(r[0] == "cdn" and r[1] == "GET" for r in self.fake.requests))

        n = len(self.fake.file_requests())
        r = self.download()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(self.fake.file_requests()), n, "second download fetched files again")

        r = self.seer(f'local m = require("seer.model").load("{REPO}")\n'
                      'local out = m:generate("Once upon a time", {max_new_tokens = 20})\n'
                      'io.write(table.concat(out.ids, " "))')
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(MODEL, "golden", "golden.json")) as f:
            golden = json.load(f)
        self.assertEqual([int(x) for x in r.stdout.split()], golden["greedy_new_ids"][:20])

    def test_cli_download(self):
        e = {"HF_HOME": self.home, "HF_ENDPOINT": self.fake.endpoint, "HF_TOKEN": None,
             "HF_HUB_OFFLINE": None, "HF_HUB_CACHE": None}
        r = run(["hub", "download", REPO, "--include", "*.json"], timeout=60, **e)
        self.assertEqual(r.returncode, 0, r.stderr)
        snap = os.path.join(self.repo_dir, "snapshots", COMMIT)
        self.assertEqual(r.stdout.strip(), snap)
        self.assertIn("config.json", os.listdir(snap))
        self.assertNotIn("model.safetensors", os.listdir(snap))
        r = run(["hub", "download"], timeout=30, **e)
        self.assertEqual(r.returncode, 2)
        self.assertIn("REPO_ID is missing", r.stderr)
        r = run(["hub", "fetch", REPO], timeout=30, **e)
        self.assertEqual(r.returncode, 2)
        self.assertIn('unknown command "fetch"', r.stderr)
        # a failed download is one line and status 1, no traceback
        for argv, msg in [(["../x"], "'../x' is not a repo id"),
                          (["nobody/none"], "nobody/none"),
                          ([REPO, "--revision", "no-such-branch"], "no-such-branch")]:
            r = run(["hub", "download"] + argv, timeout=60, **e)
            self.assertEqual(r.returncode, 1, (argv, r.stderr))
            self.assertTrue(r.stderr.startswith("seer hub download: "), r.stderr)
            self.assertIn(msg, r.stderr)
            self.assertNotIn("traceback", r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)

    def test_allow_patterns_nested(self):
        r = self.download('{allow_patterns = {"*.txt", "README.md"}}')
        self.assertEqual(r.returncode, 0, r.stderr)
        snap = os.path.join(self.repo_dir, "snapshots", COMMIT)
        self.assertEqual(sorted(os.listdir(snap)), ["README.md", "sub"])
        link = os.path.join(snap, "sub", "dir", "extra.txt")
        self.assertEqual(os.readlink(link), "../../../../blobs/" + git_oid(b"nested file\n"))
        with open(link, "rb") as f:
            self.assertEqual(f.read(), b"nested file\n")
        r = self.download('{allow_patterns = {"*.bin"}}')
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no file matches allow_patterns", r.stderr)

    def test_dropped_connection_resumes_with_range(self):
        self.fake.drop_once.add("model.safetensors")
        r = self.download()
        self.assertEqual(r.returncode, 0, r.stderr)
        gets = [x for x in self.fake.requests if x[0] == "cdn" and x[1] == "GET"]
        self.assertEqual(len(gets), 2)
        self.assertNotIn("Range", gets[0][3])
        half = len(self.fake.files["model.safetensors"]) // 2
        self.assertEqual(gets[1][3].get("Range"), f"bytes={half}-")
        with open(os.path.join(self.repo_dir, "snapshots", COMMIT, "model.safetensors"), "rb") as f:
            self.assertEqual(f.read(), self.fake.files["model.safetensors"])

    def test_partial_file_from_earlier_run_is_resumed(self):
        data = self.fake.files["model.safetensors"]
        blobs = os.path.join(self.repo_dir, "blobs")
        os.makedirs(blobs)
        with open(os.path.join(blobs, hashlib.sha256(data).hexdigest() + ".incomplete"), "wb") as f:
            f.write(data[:1000])
        r = self.download()
        self.assertEqual(r.returncode, 0, r.stderr)
        gets = [x for x in self.fake.requests if x[0] == "cdn" and x[1] == "GET"]
        self.assertEqual([g[3].get("Range") for g in gets], ["bytes=1000-"])

    def test_token_401_and_404(self):
        self.fake.require_token = True
        r = self.download()
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(REPO, r.stderr)
        self.assertIn("HTTP 401", r.stderr)
        self.assertIn("HF_TOKEN", r.stderr)
        self.assertIn("licence", r.stderr)
        r = self.download(HF_TOKEN="wrong")
        self.assertIn("HTTP 401", r.stderr)
        self.assertNotIn("wrong", r.stderr)
        r = self.download(HF_TOKEN=TOKEN)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn(TOKEN, r.stdout + r.stderr)
        hub_reqs = [x for x in self.fake.requests if x[0] == "hub"]
        self.assertEqual(hub_reqs[-1][3].get("Authorization"), f"Bearer {TOKEN}")
        cdn = [x for x in self.fake.requests if x[0] == "cdn"]
        self.assertTrue(cdn)
        self.assertTrue(all("Authorization" not in x[3] for x in cdn), "token sent to the file host")
        # the token option overrides the environment
        shutil.rmtree(self.home)
        r = self.download(f'{{token = "{TOKEN}"}}', HF_TOKEN="wrong")
        self.assertEqual(r.returncode, 0, r.stderr)

        r = self.seer('print(hub.download("tiny-org/missing"))', HF_TOKEN=TOKEN)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("tiny-org/missing", r.stderr)
        self.assertIn("HTTP 404", r.stderr)
        self.assertIn("check the repo id", r.stderr)
        r = self.download('{revision = "nope"}', HF_TOKEN=TOKEN)
        self.assertIn("HTTP 404", r.stderr)
        self.assertIn("revision nope", r.stderr)

    def test_file_404_names_the_file(self):
        # listed by the API but not served: drop it from the served set only after the API call
        orig = self.fake.hub.RequestHandlerClass.handle_any

        def handle_any(h, head, _orig=orig):
            if "/resolve/" in h.path and h.path.endswith("/tokenizer.json"):
                return h.error(404)
            return _orig(h, head)
        self.fake.hub.RequestHandlerClass.handle_any = handle_any
        try:
            r = self.download()
        finally:
            self.fake.hub.RequestHandlerClass.handle_any = orig
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"{REPO} (revision main): tokenizer.json: HTTP 404", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.repo_dir, "refs", "main")))

    def test_progress_when_asked(self):
        r = self.download('{progress = true, allow_patterns = {"config.json"}}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stderr, r"\x1b\[K1/1 files  664 B / 664 B  [\d.]+ \S+/s\n$")

    def test_offline(self):
        r = self.download(HF_HUB_OFFLINE="1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("HF_HUB_OFFLINE=1", r.stderr)
        self.assertIn(REPO, r.stderr)
        self.assertEqual(self.fake.requests, [])
        r = self.seer(f'print(hub.cached("{REPO}"))')
        self.assertEqual(r.stdout.strip(), "nil")

        self.assertEqual(self.download().returncode, 0)
        n = len(self.fake.requests)
        r = self.download(HF_HUB_OFFLINE="1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), os.path.join(self.repo_dir, "snapshots", COMMIT))
        self.assertEqual(len(self.fake.requests), n)
        r = self.seer(f'print(hub.cached("{REPO}"))', HF_HUB_OFFLINE="1")
        self.assertEqual(r.stdout.strip(), os.path.join(self.repo_dir, "snapshots", COMMIT))

    def test_libcurl_missing_or_wrong(self):
        # libcurl is loaded with dlopen on first use: a machine without it still runs seer, and
        # a download says what to install. SEER_LIBCURL points the loader elsewhere.
        r = self.download(SEER_LIBCURL="/nonexistent/libcurl.so.4")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("libcurl could not be loaded", r.stderr)
        self.assertIn("/nonexistent/libcurl.so.4", r.stderr)
        self.assertIn("apt-get install libcurl4", r.stderr)
        self.assertEqual(self.fake.requests, [])
        r = self.download(SEER_LIBCURL="libm.so.6")  # loads, but is not libcurl
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("has no curl_easy_init", r.stderr)
        self.assertEqual(self.fake.requests, [])
        r = self.seer('print(1 + 1)', SEER_LIBCURL="/nonexistent/libcurl.so.4")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "2"), r.stderr)
        self.assertEqual(self.download().returncode, 0)

    # ---- several files at once ------------------------------------------------------------------

    def test_files_are_fetched_at_once(self):
        self.use_bins(6)
        self.fake.delay = 0.3
        r, elapsed = self.timed_download('{allow_patterns = {"*.bin"}}')
        self.assertEqual(r.returncode, 0, r.stderr)
        serial = 6 * self.fake.delay
        self.assertLess(elapsed, 0.6 * serial, f"took {elapsed:.2f} s; one after another is {serial:.1f} s")
        self.assertGreaterEqual(self.fake.max_inflight, 2)
        self.assertLessEqual(self.fake.max_inflight, 4)  # the default
        self.assertEqual(self.cache_is_sound(), set(self.fake.files))
        for name in self.fake.files:
            self.assertEqual(len(self.fake.gets(name)), 1, name)
        with open(os.path.join(self.repo_dir, "refs", "main")) as f:
            self.assertEqual(f.read(), COMMIT)
        self.assertEqual(os.listdir(os.path.join(self.repo_dir, "blobs")).__len__(), 6)

    def test_max_workers_one_is_one_after_another(self):
        self.use_bins(4)
        self.fake.delay = 0.2
        r, elapsed = self.timed_download('{allow_patterns = {"*.bin"}, max_workers = 1}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.fake.max_inflight, 1)
        self.assertGreaterEqual(elapsed, 4 * self.fake.delay)
        self.assertEqual(self.cache_is_sound(), set(self.fake.files))

    def test_max_workers_from_env_and_cli(self):
        self.use_bins(6)
        self.fake.delay = 0.15
        r = self.download('{allow_patterns = {"*.bin"}}', SEER_HUB_MAX_WORKERS="1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.fake.max_inflight, 1)
        shutil.rmtree(self.home)
        self.fake.max_inflight = 0
        e = {"HF_HOME": self.home, "HF_ENDPOINT": self.fake.endpoint, "HF_TOKEN": None,
             "HF_HUB_OFFLINE": None, "HF_HUB_CACHE": None, "SEER_HUB_MAX_WORKERS": "1"}
        r = run(["hub", "download", REPO, "--include", "*.bin", "--max-workers", "2"], timeout=60, **e)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.fake.max_inflight, 2)  # the flag wins over the environment
        self.assertEqual(self.cache_is_sound(), set(self.fake.files))

        r = run(["hub", "download", REPO, "--max-workers", "lots"], timeout=30, **e)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--max-workers needs a whole number from 1 to 64, got lots", r.stderr)
        r = self.download('{max_workers = 0}')
        self.assertIn("max_workers must be a whole number from 1 to 64, got 0", r.stderr)
        r = self.download('{max_workers = "4"}')
        self.assertIn("max_workers must be a whole number", r.stderr)
        n = len(self.fake.requests)
        r = self.download(SEER_HUB_MAX_WORKERS="many")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("SEER_HUB_MAX_WORKERS='many'", r.stderr)
        self.assertEqual(len(self.fake.requests), n)

    def test_time_limits_from_the_cli(self):
        # seer hub download had no flags for time_floor / min_rate: only the variables set them
        self.use_bins(2)
        e = {"HF_HOME": self.home, "HF_ENDPOINT": self.fake.endpoint, "HF_TOKEN": None,
             "HF_HUB_OFFLINE": None, "HF_HUB_CACHE": None,
             "SEER_HUB_TIME_FLOOR": "60", "SEER_HUB_MIN_RATE": "1"}  # the flags win over these
        self.fake.slow = {"w0.bin": 3.0}
        t0 = time.monotonic()
        r = run(["hub", "download", REPO, "--include", "w0.bin", "--time-floor", "0.5", "--min-rate", "1000000"],
                timeout=60, **e)
        took = time.monotonic() - t0
        self.assertEqual(r.returncode, 1, r.stderr)
        # 0.5 s plus 65536 bytes at 1000000 bytes/s
        self.assertIn("w0.bin: not fetched in the 0.6 s it is allowed (0.5 s, plus 1 s per 1000000 bytes", r.stderr)
        self.assertIn("--min-rate", r.stderr)
        self.assertLess(took, 2.5, r.stderr)
        r = run(["hub", "download", REPO, "--include", "w0.bin", "--time-floor", "0.2", "--min-rate", "65536"],
                timeout=60, **e)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("w0.bin: not fetched in the 1.2 s it is allowed (0.2 s, plus 1 s per 65536 bytes", r.stderr)
        # a time that fits lets the file through, whatever the variables say
        self.fake.slow = {"w0.bin": 0.5}
        e.update(SEER_HUB_TIME_FLOOR="0.1", SEER_HUB_MIN_RATE="1000000000")
        r = run(["hub", "download", REPO, "--include", "w0.bin"], timeout=60, **e)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("not fetched in the 0.1 s it is allowed", r.stderr)
        r = run(["hub", "download", REPO, "--include", "w0.bin", "--time-floor", "5"], timeout=60, **e)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.cache_is_sound(), {"w0.bin"})

        n = len(self.fake.requests)
        for flag, value, what in [("--time-floor", "0", "a number of seconds"),
                                  ("--time-floor", "-1", "a number of seconds"),
                                  ("--time-floor", "soon", "a number of seconds"),
                                  ("--time-floor", "1e16", "a number of seconds"),
                                  ("--min-rate", "inf", "a number of bytes per second"),
                                  ("--min-rate", "nan", "a number of bytes per second"),
                                  ("--min-rate", "0x", "a number of bytes per second")]:
            r = run(["hub", "download", REPO, flag, value], timeout=30, **e)
            self.assertEqual(r.returncode, 2, (flag, value, r.stderr))
            self.assertEqual(r.stderr, f"seer hub download: {flag} needs {what} above 0, got {value}\n")
        for flag in ("--time-floor", "--min-rate"):
            r = run(["hub", "download", REPO, flag], timeout=30, **e)
            self.assertEqual(r.returncode, 2)
            self.assertIn(f"{flag} needs a value", r.stderr)
        self.assertEqual(len(self.fake.requests), n, "a refused flag still asked the hub")
        r = run(["hub", "download", "--help"], timeout=30, **e)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("[--time-floor SECONDS] [--min-rate BYTES_PER_S]", r.stdout)

    def test_one_failing_file_stops_the_others_and_is_reported(self):
        self.use_bins(6)
        self.fake.slow = {"w0.bin": 4.0}  # still coming when w3.bin fails
        self.fake.missing = {"w3.bin"}
        r, elapsed = self.timed_download('{allow_patterns = {"*.bin"}}')
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"{REPO} (revision main): w3.bin: HTTP 404: not found", r.stderr)
        self.assertLess(elapsed, 2.5, "the other transfers were not stopped")
        self.assertFalse(os.path.exists(os.path.join(self.repo_dir, "refs", "main")))
        self.assertNotIn("w0.bin", self.cache_is_sound())
        self.assertNotIn("w3.bin", self.cache_is_sound())
        self.assertFalse(any(r[2].endswith("w4.bin") or r[2].endswith("w5.bin") for r in self.fake.requests),
                         "files were started after the failure")

    def test_corrupt_file_among_many_is_not_cached(self):
        self.use_bins(6)
        self.fake.delay = 0.1
        self.fake.corrupt = {"w2.bin"}
        r = self.download('{allow_patterns = {"*.bin"}}')
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"{REPO}: w2.bin: the download does not match its checksum (ETag {self.fake.etag('w2.bin')})",
                      r.stderr)
        blobs = os.listdir(os.path.join(self.repo_dir, "blobs"))
        self.assertNotIn(self.fake.etag("w2.bin"), blobs)
        self.assertNotIn(self.fake.etag("w2.bin") + ".incomplete", blobs)  # bad bytes are not resumed
        self.assertNotIn("w2.bin", self.cache_is_sound())
        self.assertFalse(os.path.exists(os.path.join(self.repo_dir, "refs", "main")))
        # the next run fetches what is missing and keeps what came through
        self.fake.corrupt = set()
        before = {n: len(self.fake.gets(n)) for n in self.fake.files}
        r = self.download('{allow_patterns = {"*.bin"}}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.cache_is_sound(), set(self.fake.files))
        self.assertEqual(len(self.fake.gets("w2.bin")), before["w2.bin"] + 1)

    def test_short_file_among_many_is_not_cached(self):
        self.use_bins(6)
        self.fake.delay = 0.1
        self.fake.truncate = {"w5.bin"}  # a git-hashed file from the hub itself
        r = self.download('{allow_patterns = {"*.bin"}}')
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stderr, rf"{REPO}: w5\.bin: the server sent \d+ bytes but the file has 65536; run again")
        self.assertEqual(len(self.fake.gets("w5.bin")), 4)  # resumed, then given up
        self.assertNotIn(self.fake.etag("w5.bin"), os.listdir(os.path.join(self.repo_dir, "blobs")))
        self.assertNotIn("w5.bin", self.cache_is_sound())
        self.assertFalse(os.path.exists(os.path.join(self.repo_dir, "refs", "main")))

    def test_same_blob_under_two_names_is_fetched_once(self):
        same = os.urandom(50000)
        self.fake.files = {"a.bin": same, "b.bin": same, "c.bin": os.urandom(1000)}
        self.fake.lfs = {"a.bin", "b.bin"}
        self.fake.delay = 0.3
        r = self.download('{allow_patterns = {"*.bin"}}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.cache_is_sound(), {"a.bin", "b.bin", "c.bin"})
        self.assertEqual(len(self.fake.gets("a.bin")) + len(self.fake.gets("b.bin")), 1)
        self.assertEqual(len(os.listdir(os.path.join(self.repo_dir, "blobs"))), 2)

    def test_two_processes_share_the_cache(self):
        self.use_bins(6)
        self.fake.delay = 0.3
        e = env(HF_HOME=self.home, HF_ENDPOINT=self.fake.endpoint, HF_TOKEN=None, HF_HUB_OFFLINE=None,
                HF_HUB_CACHE=None)
        code = PRELUDE + f'print(hub.download("{REPO}", {{allow_patterns = {{"*.bin"}}}}))'
        procs = [subprocess.Popen([SEER, "-e", code], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        for p in procs:
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
        self.assertEqual(self.cache_is_sound(), set(self.fake.files))
        for name in self.fake.files:
            self.assertEqual(len(self.fake.gets(name)), 1, f"{name} was fetched by both")

    def test_interrupt_keeps_partial_files_for_the_next_run(self):
        self.use_bins(4, 256 * 1024)
        self.fake.stall = {"w0.bin": 30.0}
        e = env(HF_HOME=self.home, HF_ENDPOINT=self.fake.endpoint, HF_TOKEN=None, HF_HUB_OFFLINE=None,
                HF_HUB_CACHE=None)
        code = PRELUDE + f'print(hub.download("{REPO}", {{allow_patterns = {{"*.bin"}}}}))'
        p = subprocess.Popen([SEER, "-e", code], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        part = os.path.join(self.repo_dir, "blobs", self.fake.etag("w0.bin") + ".incomplete")
        half = len(self.fake.files["w0.bin"]) // 2
        deadline = time.monotonic() + 20
        while not (os.path.exists(part) and os.path.getsize(part) == half):
            self.assertLess(time.monotonic(), deadline, "the first half never arrived")
            time.sleep(0.02)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
        self.assertLess(time.monotonic() - t0, 2.0)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("interrupted", err)
        self.assertEqual(os.path.getsize(part), half)
        self.assertFalse(os.path.exists(os.path.join(self.repo_dir, "refs", "main")))
        self.fake.stall = {}
        r = self.download('{allow_patterns = {"*.bin"}}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.cache_is_sound(), set(self.fake.files))
        self.assertEqual(self.fake.gets("w0.bin")[-1][3].get("Range"), f"bytes={half}-")

    def test_one_progress_line_for_all_files(self):
        self.use_bins(6)
        self.fake.delay = 0.3
        r, elapsed = self.timed_download('{allow_patterns = {"*.bin"}, progress = true}')
        self.assertEqual(r.returncode, 0, r.stderr)
        # text mode reads each "\r" as a line end: every piece is one redraw of the same line
        draws = [x for x in r.stderr.split("\n") if x]
        line = r"\x1b\[K(\d)/6 files  [\d.]+ \S+ / [\d.]+ \S+\+?  [\d.]+ \S+/s"
        for x in draws:
            self.assertRegex(x, "^" + line + "$")
        self.assertRegex(r.stderr, r"\x1b\[K6/6 files  384\.0 KiB / 384\.0 KiB  [\d.]+ \S+/s\n$")
        self.assertLessEqual(len(draws), elapsed * 10 + 2, "redrawn more than ten times a second")
        r = self.download('{allow_patterns = {"*.bin"}, progress = true}')  # all cached: nothing to draw
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")

    # ---- a hostile hub (docs/security.md, "Exhaustion") ---------------------------------------------

    def blob_bytes(self):
        blobs = os.path.join(self.repo_dir, "blobs")
        return {b: os.path.getsize(os.path.join(blobs, b)) for b in os.listdir(blobs)} if os.path.isdir(blobs) else {}

    def test_body_past_the_declared_size_is_cut(self):
        # The HEAD declares 64 KiB; the GET sends the file and then more, with no length. The old
        # client wrote all of it (3.9 GB in 10 s from a server that never stops; here 64 MiB, four
        # times over).
        self.use_bins(2)
        for name in ("w0.bin", "w1.bin"):  # from the file host (LFS, X-Linked-Size) and from the hub
            self.fake.endless = {name}
            r, elapsed = self.timed_download(f'{{allow_patterns = {{"{name}"}}}}')
            self.assertNotEqual(r.returncode, 0)
            self.assertEqual(self.blob_bytes(), {}, "bytes past the declared size were kept")
            deadline = time.monotonic() + 5  # the server notices the closed connection on its next write
            while name not in self.fake.sent and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertLess(self.fake.sent[name], 16 << 20, "the client went on reading")
            self.assertEqual(len(self.fake.gets(name)), 1, "a server sending too much was asked again")
            self.assertLess(elapsed, 5)
            self.assertIn(f"{REPO}: {name}: the server sent more than the 65536 bytes declared for the file; "
                          "the partial download was deleted", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(self.repo_dir, "refs", "main")))
        self.fake.endless = set()
        r = self.download('{allow_patterns = {"*.bin"}}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.cache_is_sound(), set(self.fake.files))

    def test_file_size_must_be_declared_and_fit_on_the_disk(self):
        self.use_bins(2)
        for name in ("w0.bin", "w1.bin"):  # no X-Linked-Size (file host) / no Content-Length (hub)
            self.fake.no_size = {name}
            r = self.download(f'{{allow_patterns = {{"{name}"}}}}')
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(f"{REPO}: {name}: the server did not declare the file's size", r.stderr)
            self.assertEqual(self.fake.gets(name), [])
        self.fake.no_size = set()
        for size, msg in [("65536x", "the server declared a size that is not a number of bytes"),
                          ("-1", "the server declared a size that is not a number of bytes"),
                          (str(1 << 50), "1024.0 TiB more to fetch, but the disk of ")]:
            self.fake.declared = {"w0.bin": size}
            r = self.download('{allow_patterns = {"w0.bin"}}')
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(f"{REPO}: w0.bin: {msg}", r.stderr)
            self.assertEqual(self.fake.gets("w0.bin"), [])

    def test_api_reply_value_amplification_is_refused(self):
        # 20 MB of "0," is 10M JSON values: ~800 MB as a cJSON tree. Counted first, it is refused
        # with the process near the size of the text.
        self.fake.api_body = (b'{"sha":"' + COMMIT.encode() + b'","siblings":[],"pad":[' + b"0," * 10_000_000
                              + b'0]}')
        r, elapsed = self.timed_download_hwm()
        err, hwm = r
        self.assertLess(hwm, 150 << 10, f"VmHWM {hwm} kB")
        self.assertLess(elapsed, 10)
        self.assertIn(f"{REPO} (revision main): the API reply from {self.fake.endpoint} holds ", err)
        self.assertIn("JSON values, more than the 2000000 a repo's file list can need; refusing it", err)

    def timed_download_hwm(self):
        t0 = time.monotonic()
        r = self.seer(f'local ok, e = pcall(hub.download, "{REPO}")\n'
                      'io.write(tostring(e), "\\n")\n'
                      'for l in io.lines("/proc/self/status") do\n'
                      '  local kb = l:match("^VmHWM:%s*(%d+)") if kb then print(kb) end\n'
                      'end')
        self.assertEqual(r.returncode, 0, r.stderr)
        err, hwm = r.stdout.rsplit("\n", 2)[-3:-1]
        return (err, int(hwm)), time.monotonic() - t0

    def test_endless_api_body_is_cut(self):
        # A reply (or an error page) that never ends: the old client read it for ever.
        for status, msg in [(200, f"{REPO}: the API reply from {self.fake.endpoint} is larger than 64 MiB"),
                            (500, f"{REPO} (revision main): HTTP 500: the hub failed")]:
            self.fake.api_endless = status
            try:
                r, elapsed = self.timed_download(timeout=15)
            except subprocess.TimeoutExpired:
                self.fail(f"an endless API body (HTTP {status}) was read for 15 s")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(msg, r.stderr)
            self.assertLess(elapsed, 8)

    def cli_bytes(self, *args):
        e = env(HF_HOME=self.home, HF_ENDPOINT=self.fake.endpoint, HF_TOKEN=None, HF_HUB_OFFLINE=None,
                HF_HUB_CACHE=None)
        return subprocess.run([SEER, "hub", "download", REPO] + list(args), env=e, capture_output=True, timeout=30)

    def assert_terminal_safe(self, data):
        body = data[:-1] if data.endswith(b"\n") else data
        for b in body:
            self.assertTrue(0x20 <= b < 0x7F, f"byte {b:#x} written to the terminal: {data!r}")

    def test_escape_and_invisible_names_are_refused_and_quoted_escaped(self):
        names = {
            "x\x1b]0;PWNED\x07\x1b[2J.json": b"x\\x1b]0;PWNED\\x07\\x1b[2J.json",  # title, screen clear
            "config\u009b31mRED.json": b"config\\xc2\\x9b31mRED.json",  # C1 CSI in UTF-8
            "evil\u202egnp.json": b"evil\\xe2\\x80\\xaegnp.json",  # right-to-left override
            "zero\u200bwidth.json": b"zero\\xe2\\x80\\x8bwidth.json",
            "del\x7f.json": b"del\\x7f.json",
            "a\\b.json": b"a\\x5cb.json",
        }
        for name, shown in names.items():
            with self.subTest(name=name):
                self.fake.files = {name: b"{}", "config.json": b"{}"}
                self.fake.lfs = set()
                r = self.cli_bytes("--include", "*")
                self.assert_terminal_safe(r.stderr)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(b"the file list has an unsafe name '" + shown + b"'", r.stderr)
                self.assertEqual(r.stdout, b"")
                self.assertFalse(os.path.exists(os.path.join(self.repo_dir, "snapshots")), name)
                shutil.rmtree(self.home, ignore_errors=True)
        # bytes that are not UTF-8 (JSON cannot escape them; cJSON takes them as they are)
        self.fake.api_body = b'{"sha":"' + COMMIT.encode() + b'","siblings":[{"rfilename":"bad\xff\x9b2J.json"}]}'
        r = self.cli_bytes("--include", "*")
        self.assert_terminal_safe(r.stderr)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"unsafe name 'bad\\xff\\x9b2J.json'", r.stderr)
        # printable names in other scripts are still fetched
        self.fake.api_body = None
        self.fake.files = {"mod\u00e8le/\u65e5\u672c.json": b"{}", "w.bin": b"x" * 100}
        self.fake.lfs = {"w.bin"}
        r = self.cli_bytes("--include", "*")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.cache_is_sound(), set(self.fake.files))

    def test_bad_arguments(self):
        r = self.seer('print(hub.download("../etc"))')
        self.assertIn("is not a repo id", r.stderr)
        r = self.seer(f'print(hub.download("{REPO}", {{revison = "x"}}))')
        self.assertIn("unknown option 'revison'", r.stderr)
        self.assertEqual(self.fake.requests, [])


if __name__ == "__main__":
    unittest.main()
