"""seer.hub against a local imitation of the Hugging Face hub: the API call, resolve URLs with a
redirect to a separate file host for LFS files, ETag/X-Linked-Etag/X-Repo-Commit headers,
Range requests, auth. The downloaded repo holds the real stories260K, so the cache it leaves
must load and generate through seer.model.load(repo_id)."""
import hashlib
import http.server
import json
import os
import shutil
import tempfile
import threading
import unittest

from seertest import ROOT, run

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


class FakeHub:
    def __init__(self):
        self.files = repo_files()
        self.requests = []  # (server, method, path, headers)
        self.require_token = False
        self.drop_once = set()  # file names whose first CDN GET is cut halfway
        self.lock = threading.Lock()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_HEAD(self):
                self.handle_any(head=True)

            def do_GET(self):
                self.handle_any(head=False)

            def send_body(self, data, head, extra, drop=False):
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
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                if head:
                    return
                body = data[start:]
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
                if server == "cdn":
                    name = self.path[len("/lfs/"):]
                    drop = False
                    with hub.lock:
                        if not head and name in hub.drop_once:
                            hub.drop_once.discard(name)
                            drop = True
                    return self.send_body(hub.files[name], head, {}, drop)
                if hub.require_token and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self.error(401)
                prefix_api = f"/api/models/{REPO}/revision/"
                prefix_res = f"/{REPO}/resolve/"
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
                    if rev not in ("main", COMMIT) or name not in hub.files:
                        return self.error(404)
                    data = hub.files[name]
                    if name in LFS:
                        self.send_response(302)
                        self.send_header("Location", f"http://127.0.0.1:{hub.cdn.server_port}/lfs/{name}")
                        self.send_header("X-Repo-Commit", COMMIT)
                        self.send_header("X-Linked-Etag", '"%s"' % hashlib.sha256(data).hexdigest())
                        self.send_header("X-Linked-Size", str(len(data)))
                        self.send_header("ETag", '"not-the-blob-name"')
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    return self.send_body(data, head, {"X-Repo-Commit": COMMIT, "ETag": '"%s"' % git_oid(data)})
                return self.error(404)

            def error(self, code):
                body = b'{"error":"nope"}'
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

        self.hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.cdn = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        for s in (self.hub, self.cdn):
            threading.Thread(target=s.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.hub.server_port}"

    def close(self):
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    def file_requests(self):
        return [r for r in self.requests if r[0] == "cdn" or "/resolve/" in r[2]]


class HubTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeHub()
        self.tmp = tempfile.mkdtemp(prefix="seer-hub-")
        self.home = os.path.join(self.tmp, "hf")
        self.repo_dir = os.path.join(self.home, "hub", "models--tiny-org--stories")

    def tearDown(self):
        self.fake.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def seer(self, code, **env):
        e = {"HF_HOME": self.home, "HF_ENDPOINT": self.fake.endpoint, "HF_TOKEN": None,
             "HF_HUB_OFFLINE": None, "HF_HUB_CACHE": None}
        e.update(env)
        return run(["-e", PRELUDE + code], timeout=60, **e)

    def download(self, opts="", **env):
        return self.seer(f'print(hub.download("{REPO}"{", " + opts if opts else ""}))', **env)

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
        self.assertRegex(r.stderr, r"\x1b\[Kconfig\.json  664 B / 664 B  [\d.]+ \S+/s\n$")

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

    def test_bad_arguments(self):
        r = self.seer('print(hub.download("../etc"))')
        self.assertIn("is not a repo id", r.stderr)
        r = self.seer(f'print(hub.download("{REPO}", {{revison = "x"}}))')
        self.assertIn("unknown option 'revison'", r.stderr)
        self.assertEqual(self.fake.requests, [])


if __name__ == "__main__":
    unittest.main()
