"""The notebook live view (seer.core.http and engine/net/live_page.html) against real peers:
http.client for the routes, the token and the event stream, and headless Chromium over the
DevTools protocol for the page itself. A small seer script serves one server and obeys
commands on stdin ("publish CHANNEL TEXT" where TEXT is the notebook's JSON text written as a
JSON string, so it may hold line breaks; "raw CHANNEL TEXT" with TEXT as is; "remove CHANNEL";
"close"; "gc"), answering each with "ok" or "error: ..."; it prints "port N" first."""
import base64
import hashlib
import http.client
import json
import os
import queue
import re
import socket
import struct
import subprocess
import threading
import time
import unittest
import zlib

import cdp
import seertest

TOKEN = "0f3c9a" + "7e" * 29  # 64 hex characters, like seer.net.new_key()
INFO = {"endpoint": "tcp://127.0.0.1:5555", "key": "k", "transport": "zmq"}

DRIVER = r"""
local http = require "seer.core.http"
local json = require "seer.json"
local srv = http.serve{host = "127.0.0.1", port = 0, token = arg[1], info = arg[2]}
io.stdout:setvbuf("line")
print("port " .. srv.port)
for line in io.lines() do
  local cmd, rest = line:match("^(%S+)%s*(.*)$")
  local ok, err = pcall(function()
    if cmd == "publish" then
      local ch, text = rest:match("^(%S+) (.*)$")
      srv:publish(ch, json.decode(text))
    elseif cmd == "raw" then
      local ch, text = rest:match("^(%S+) (.*)$")
      srv:publish(ch, text)
    elseif cmd == "remove" then srv:remove(rest)
    elseif cmd == "close" then srv:close()
    elseif cmd == "gc" then srv = nil; collectgarbage(); collectgarbage()
    else error("unknown command " .. tostring(cmd)) end
  end)
  print(ok and "ok" or ("error: " .. tostring(err)))
end
"""


def notebook(cells, path="outputs/2026-01-01-00-00_Test.ipynb"):
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "seer", "display_name": "Lua (seer)", "language": "lua"},
                         "language_info": {"name": "lua"}, "seer": {"path": path}},
            "cells": cells}


def code_cell(cid, source, status="complete", count=None, outputs=()):
    return {"id": cid, "cell_type": "code", "source": source, "metadata": {"execution_status": status},
            "execution_count": count, "outputs": list(outputs)}


def md_cell(cid, source):
    return {"id": cid, "cell_type": "markdown", "source": source, "metadata": {}}


def png_bytes(width, height):
    """A real RGB PNG: a gradient, zlib-compressed scanlines with filter byte 0."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + bytes(c for x in range(width) for c in (x * 255 // width, y * 255 // height, 128))
                    for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


class Server:
    """The driver script running under seer; lines from its stdout arrive on a queue so a
    test never hangs on a dead process."""

    def __init__(self, testcase, token=TOKEN, info=INFO):
        self.dir = seertest.tmpdir(testcase)
        script = os.path.join(self.dir, "serve.lua")
        with open(script, "w") as f:
            f.write(DRIVER)
        self.proc = subprocess.Popen([seertest.SEER, script, token, json.dumps(info)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=seertest.env())
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        first = self.line(20)
        m = re.fullmatch(r"port (\d+)", first)
        if not m:
            raise AssertionError(f"expected 'port N', got {first!r}; stderr: {self.err()}")
        self.port = int(m.group(1))
        testcase.addCleanup(self.stop)

    @staticmethod
    def _pump(stream, put):
        for raw in iter(stream.readline, b""):
            put(raw.decode(errors="replace").rstrip("\n"))
        put(None)

    def err(self):
        return "".join(s + "\n" for s in self.stderr if s is not None)

    def line(self, timeout=10):
        try:
            v = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"seer said nothing for {timeout} s; stderr: {self.err()}")
        if v is None:
            raise AssertionError(f"seer exited ({self.proc.wait()}); stderr: {self.err()}")
        return v

    def send(self, line):
        self.proc.stdin.write((line.encode() if isinstance(line, str) else line) + b"\n")
        self.proc.stdin.flush()

    def cmd(self, line, timeout=20):
        self.send(line)
        reply = self.line(timeout)
        if reply != "ok":
            raise AssertionError(f"{line[:80]!r} -> {reply}")

    def publish(self, channel, nb, wait=True):
        """nb: a notebook (sent as compact JSON) or JSON text to publish exactly."""
        text = json.dumps(nb) if not isinstance(nb, str) else nb
        line = f"publish {channel} {json.dumps(text)}"
        if wait:
            self.cmd(line)
        else:
            self.send(line)

    def stop(self):
        """Ends the script (stdin EOF) and checks it exits cleanly: under ASan a leak or a
        thread error makes the exit status non-zero."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"seer did not exit after stdin closed; stderr: {self.err()}")
        time.sleep(0.05)  # let the stderr reader finish
        if self.proc.returncode != 0:
            raise AssertionError(f"seer exited with {self.proc.returncode}; stderr:\n{self.err()}")

    def get(self, path, headers=None, method="GET", timeout=10):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def events(self, channel, token=TOKEN, timeout=10):
        return EventStream(self.port, f"/api/notebooks/{channel}/events?token={token}", timeout)


class EventStream:
    """A text/event-stream reader on http.client (which undoes the chunked encoding)."""

    def __init__(self, port, path, timeout):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.conn.request("GET", path)
        self.sock = self.conn.sock  # http.client lets go of it once the response says "close"
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = {k.lower(): v for k, v in self.resp.getheaders()}
        self.comments = []
        self.ended = False

    def next(self, timeout=10):
        """The next event as {event, id, data}; None when the stream ended. Comments are
        kept in self.comments."""
        deadline = time.monotonic() + timeout
        ev = {}
        data = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout(f"no event within {timeout} s")
            if self.resp.isclosed():  # http.client saw the final chunk and let go
                raw = b""
            else:
                self.sock.settimeout(left)
                raw = self.resp.readline()
            if not raw:
                self.ended = True
                return None
            line = raw.decode().rstrip("\r\n")
            if line == "":
                if data or "event" in ev:
                    ev["data"] = "\n".join(data)
                    return ev
                continue
            if line.startswith(":"):
                self.comments.append(line)
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data.append(value)
            elif field in ("event", "id", "retry"):
                ev[field] = value

    def close(self):
        self.resp.close()
        self.conn.close()


ROUTES = ["/", "/api/info", "/notebooks/s1", "/api/notebooks/s1", "/api/notebooks/s1/events",
          "/no/such/route"]


class TestHttpServer(unittest.TestCase):
    def setUp(self):
        self.srv = Server(self)

    def test_token_required_on_every_route(self):
        self.srv.publish("s1", notebook([]))
        bad = [({}, ""), ({}, "?token="), ({}, "?token=" + TOKEN[:-1]), ({}, "?token=" + TOKEN + "0"),
               ({}, "?token=" + TOKEN.upper()), ({"Authorization": "token " + TOKEN[:-1] + "x"}, ""),
               ({"Authorization": "Bearer wrong"}, ""), ({"Authorization": "Basic " + TOKEN}, ""),
               ({"Authorization": TOKEN}, ""), ({"Authorization": "token"}, "")]
        for path in ROUTES:
            for headers, query in bad:
                status, h, body = self.srv.get(path + query, headers)
                self.assertEqual(status, 403, f"{path}{query} {headers}")
                self.assertIn(b"jupyter_url", body)
                self.assertEqual(h.get("x-content-type-options"), "nosniff")
        good = [({}, "?token=" + TOKEN), ({"Authorization": "token " + TOKEN}, ""),
                ({"Authorization": "Bearer " + TOKEN}, ""), ({"Authorization": "bearer  " + TOKEN + " "}, ""),
                ({"Authorization": "token " + TOKEN}, "?token=wrong")]
        for path in ROUTES:
            want = 404 if path == "/no/such/route" else 200
            for headers, query in good:
                if path.endswith("/events"):
                    s = EventStream(self.srv.port, path + query, 5) if not headers else None
                    if s is None:
                        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=5)
                        c.request("GET", path + query, headers=headers)
                        status = c.getresponse().status
                        c.close()
                    else:
                        status = s.status
                        s.close()
                else:
                    status, _, _ = self.srv.get(path + query, headers)
                self.assertEqual(status, want, f"{path}{query} {headers}")

    def test_snapshot_404_and_methods(self):
        status, h, body = self.srv.get(f"/api/notebooks/s1?token={TOKEN}")
        self.assertEqual(status, 404)
        nb = notebook([code_cell("a", "print(1)", count=1)])
        nb["metadata"]["title"] = "h\u00e9llo \u2014 \U0001f600"
        # Published text is served byte for byte (pretty-printed, non-ASCII included).
        text = json.dumps(nb, indent=1, ensure_ascii=False).replace("\n", "\r\n")
        self.srv.publish("s1", text)
        status, h, body = self.srv.get(f"/api/notebooks/s1?token={TOKEN}")
        self.assertEqual(status, 200)
        self.assertEqual(h["content-type"], "application/json")
        self.assertEqual(h["cache-control"], "no-store")
        self.assertEqual(body.decode(), text)
        nb2 = notebook([md_cell("m", "# h\u00e9llo")])
        self.srv.publish("s1", nb2)
        self.assertEqual(json.loads(self.srv.get(f"/api/notebooks/s1?token={TOKEN}")[2]), nb2)
        self.assertEqual(self.srv.get(f"/api/notebooks/other?token={TOKEN}")[0], 404)
        self.srv.cmd("remove s1")
        self.assertEqual(self.srv.get(f"/api/notebooks/s1?token={TOKEN}")[0], 404)
        self.srv.cmd("remove never-published")
        for path in ["/api/notebooks/", "/api/notebooks/a%20b", "/api/notebooks/a/b",
                     "/notebooks/", "/notebooks/x/y", "/api/notebooks/" + "x" * 129, "/api/infox",
                     "/api/notebooks/s1/events/more"]:
            self.assertEqual(self.srv.get(path + f"?token={TOKEN}")[0], 404, path)
        # The page is served for channels that have not published yet: it waits for them.
        status, h, body = self.srv.get(f"/notebooks/{'x' * 128}?token={TOKEN}")
        self.assertEqual(status, 200)
        self.assertTrue(h["content-type"].startswith("text/html"))
        for method in ["POST", "PUT", "DELETE"]:
            status, h, _ = self.srv.get(f"/api/notebooks/s1?token={TOKEN}", method=method)
            self.assertEqual(status, 405, method)
            self.assertIn("GET", h.get("allow", ""))

    def test_info_and_index(self):
        status, h, body = self.srv.get("/api/info", {"Authorization": "token " + TOKEN})
        self.assertEqual(status, 200)
        self.assertEqual(h["content-type"], "application/json")
        self.assertEqual(json.loads(body), INFO)
        status, h, body = self.srv.get(f"/?token={TOKEN}")
        self.assertEqual(status, 200)
        self.assertIn(b"no notebooks yet", body)
        self.srv.publish("sess-1", notebook([], path="out/<b>odd</b>.ipynb"))
        self.srv.publish("sess-2", {"cells": []})
        body = self.srv.get(f"/?token={TOKEN}")[2].decode()
        self.assertIn(f'href="/notebooks/sess-1?token={TOKEN}"', body)
        self.assertIn("out/&lt;b&gt;odd&lt;/b&gt;.ipynb", body)
        self.assertNotIn("<b>odd", body)
        self.assertIn(f'href="/notebooks/sess-2?token={TOKEN}"', body)
        self.srv.cmd("remove sess-2")
        self.assertNotIn("sess-2", self.srv.get(f"/?token={TOKEN}")[2].decode())

    def test_security_headers(self):
        self.srv.publish("s1", notebook([]))
        status, h, page = self.srv.get(f"/notebooks/s1?token={TOKEN}")
        self.assertEqual(status, 200)
        csp = h["content-security-policy"]
        self.assertIn("default-src 'none'", csp)
        self.assertNotIn("unsafe-inline", csp)
        self.assertNotIn("unsafe-eval", csp)
        self.assertIn("img-src data:", csp)
        # The policy admits exactly the page's own inline script and style, by hash.
        page = page.decode()
        for tag, directive in (("script", "script-src"), ("style", "style-src")):
            bodies = re.findall(rf"<{tag}>(.*?)</{tag}>", page, re.S)
            self.assertEqual(len(bodies), 1, tag)
            digest = base64.b64encode(hashlib.sha256(bodies[0].encode()).digest()).decode()
            m = re.search(rf"{directive} ([^;]*)", csp)
            self.assertEqual(m.group(1).split(), [f"'sha256-{digest}'"])
        self.assertNotRegex(page, r"(src|href)=\"https?:", "the page must be self-contained")
        for path in ["/", "/api/info", "/api/notebooks/s1", "/nothing", "/notebooks/s1"]:
            for q in ["", f"?token={TOKEN}"]:
                _, h, _ = self.srv.get(path + q)
                self.assertEqual(h.get("x-content-type-options"), "nosniff", path + q)
                self.assertEqual(h.get("referrer-policy"), "no-referrer", path + q)
                self.assertEqual(h.get("content-security-policy"), csp, path + q)

    def test_binds_only_the_given_host(self):
        addrs = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)} - {"127.0.0.1"}
        s = socket.socket()
        self.assertEqual(s.connect_ex(("127.0.0.1", self.srv.port)), 0)
        s.close()
        for a in addrs:
            if a.startswith("127."):
                continue
            s = socket.socket()
            s.settimeout(2)
            self.assertNotEqual(s.connect_ex((a, self.srv.port)), 0, f"reachable on {a}")
            s.close()

    def test_events_initial_then_each_version(self):
        self.srv.publish("s1", notebook([code_cell("a", "x = 1", count=1)]))
        ev = self.srv.events("s1")
        self.assertEqual(ev.status, 200)
        self.assertTrue(ev.headers["content-type"].startswith("text/event-stream"))
        self.assertEqual(ev.headers["cache-control"], "no-store")
        first = ev.next()
        self.assertEqual(first["event"], "notebook")
        self.assertEqual(json.loads(first["data"])["cells"][0]["source"], "x = 1")
        last = int(first["id"])
        other = self.srv.events("s2")
        # Multi-line JSON arrives whole (one data: line per line, rejoined by the reader).
        delays = []
        for i in range(2, 6):
            nb = notebook([code_cell("a", f"x = {i}", count=i)])
            self.srv.publish("s1", json.dumps(nb, indent=2) if i % 2 else json.dumps(nb))
            t0 = time.monotonic()
            e = ev.next()
            delays.append(time.monotonic() - t0)
            self.assertEqual(e["event"], "notebook")
            self.assertGreater(int(e["id"]), last)
            last = int(e["id"])
            self.assertEqual(json.loads(e["data"]), nb)
        # Publish wakes the stream; it does not wait for a poll interval.
        self.assertLess(max(delays), 0.5, delays)
        # Another channel's stream saw none of it; it gets its own publish, then a removal.
        self.srv.publish("s2", notebook([md_cell("m", "two")]))
        e = other.next()
        self.assertEqual(json.loads(e["data"])["cells"][0]["source"], "two")
        self.srv.cmd("remove s2")
        e = other.next()
        self.assertEqual(e["event"], "removed")
        self.assertGreater(int(e["id"]), last)
        self.srv.publish("s2", notebook([md_cell("m", "back")]))
        self.assertEqual(json.loads(other.next()["data"])["cells"][0]["source"], "back")
        ev.close()
        other.close()

    def test_events_for_a_channel_that_appears_later(self):
        ev = self.srv.events("later")
        self.assertEqual(ev.status, 200)
        t0 = time.monotonic()
        with self.assertRaises(socket.timeout):
            ev.next(timeout=0.5)
        self.assertGreater(time.monotonic() - t0, 0.4)
        ev.close()
        ev = self.srv.events("later")
        self.srv.publish("later", notebook([md_cell("m", "hi")]))
        e = ev.next(timeout=5)
        self.assertEqual(json.loads(e["data"])["cells"][0]["source"], "hi")
        ev.close()

    def test_latest_wins_for_a_slow_reader(self):
        """A reader that does not read while 60 large versions are published: publish never
        waits for it, and once it reads it gets versions in increasing order, skips ones that
        were superseded, and ends on the newest."""
        self.srv.publish("s1", notebook([md_cell("m", "v0")]))
        ev = self.srv.events("s1", timeout=20)
        self.assertEqual(json.loads(ev.next()["data"])["cells"][0]["source"], "v0")
        pad = "x" * 400_000
        n = 60
        t0 = time.monotonic()
        for i in range(1, n + 1):
            self.srv.publish("s1", notebook([md_cell("m", f"v{i}"), md_cell("pad", pad)]), wait=False)
        for i in range(n):
            self.assertEqual(self.srv.line(30), "ok")
        burst = time.monotonic() - t0
        seen = []
        ids = []
        while True:
            e = ev.next(timeout=20)
            self.assertEqual(e["event"], "notebook")
            ids.append(int(e["id"]))
            seen.append(json.loads(e["data"])["cells"][0]["source"])
            if seen[-1] == f"v{n}":
                break
        self.assertEqual(ids, sorted(ids))
        self.assertEqual(len(set(ids)), len(ids))
        nums = [int(s[1:]) for s in seen]
        self.assertEqual(nums, sorted(nums))
        self.assertLess(len(seen), n, f"a stalled reader should skip versions (got {len(seen)} of {n})")
        print(f"    burst of {n} x 400 kB publishes: {burst * 1000:.0f} ms; the stalled reader got "
              f"{len(seen)} of them")
        with self.assertRaises(socket.timeout):
            ev.next(timeout=0.3)
        ev.close()

    def test_keepalive_comment(self):
        """A ': keepalive' comment every 15 s on an idle stream."""
        ev = self.srv.events("idle", timeout=25)
        t0 = time.monotonic()
        with self.assertRaises(socket.timeout):
            ev.next(timeout=16.5)
        self.assertEqual(ev.comments, [": keepalive"])
        self.assertGreater(time.monotonic() - t0, 14)
        ev.close()

    def test_close_with_clients_connected(self):
        self.srv.publish("s1", notebook([md_cell("m", "v1")]))
        streams = [self.srv.events("s1"), self.srv.events("nothing-yet")]
        self.assertEqual(streams[0].next()["event"], "notebook")
        # A keep-alive connection idle between requests and a stalled reader of a big stream.
        idle = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=5)
        for _ in range(2):
            idle.request("GET", f"/api/info?token={TOKEN}")
            idle.getresponse().read()
        self.assertIsNotNone(idle.sock, "GET responses should keep the connection alive")
        stalled = socket.create_connection(("127.0.0.1", self.srv.port))
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(f"GET /api/notebooks/s1/events?token={TOKEN} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        for i in range(5):
            self.srv.publish("s1", notebook([md_cell("m", f"big {i}"), md_cell("p", "y" * 2_000_000)]))
        t0 = time.monotonic()
        self.srv.cmd("close", timeout=10)
        took = time.monotonic() - t0
        self.assertLess(took, 3.0, "close must not wait for slow or idle clients")
        for s in streams:
            while s.next(timeout=5) is not None:
                pass
            self.assertTrue(s.ended)
            s.close()
        stalled.close()
        idle.close()
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", self.srv.port), timeout=2)
        self.assertRegex(self._reply("publish s1 {}"), r"^error: .*publish: the server is closed")
        self.srv.cmd("close")  # closing twice is harmless

    def _reply(self, line):
        self.srv.send(line)
        return self.srv.line()

    def test_gc_closes(self):
        ev = self.srv.events("s1")
        self.srv.cmd("gc")
        self.assertIsNone(ev.next(timeout=5))
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", self.srv.port), timeout=2)

    def test_publish_rejects_bad_input(self):
        cases = [("raw s1 {\"a\":", r"json_text is not valid JSON \(error near byte \d+"),
                 ("raw s1 [1,2]", r"must be a JSON object \(a notebook\), got an array"),
                 ("raw s1 {} x", r"text after the JSON value \(byte 3\)"),
                 ("raw s1 ", r"json_text is not valid JSON"),
                 ("raw bad/channel {}", r"channel must be 1 to 128 characters"),
                 ("raw " + "c" * 129 + " {}", r"channel must be 1 to 128 characters"),
                 ("remove a b", r"channel must be")]
        for line, rx in cases:
            self.assertRegex(self._reply(line), "^error: .*" + rx, line)
        self.assertRegex(self._reply(b'raw s1 {"a": "\xff"}'), r"^error: .*json_text is not valid UTF-8 \(byte 7\)")
        # Nothing bad was stored.
        self.assertEqual(self.srv.get(f"/api/notebooks/s1?token={TOKEN}")[0], 404)


LUA_ERRORS = r"""
local http = require "seer.core.http"
local function try(f, ...) local ok, e = pcall(f, ...); print(ok and "ok" or e) end
try(http.serve)
try(http.serve, {})
try(http.serve, {token = ""})
try(http.serve, {token = 5})
try(http.serve, {token = "t", port = 70000})
try(http.serve, {token = "t", port = 1.5})
try(http.serve, {token = "t", prot = 1})
try(http.serve, {token = "t", info = "{bad"})
try(http.serve, {token = "t", info = 3})
try(http.serve, {token = "t", host = "no.such.host.invalid"})
local s = http.serve{token = "t"}
try(http.serve, {token = "t", port = s.port})
try(s.publish, s, 3, "{}")
try(s.publish, s, "c", nil)
try(s.publish, "notaserver", "c", "{}")
try(function() return s:publish("c", "{\"nbformat\": 4, \"cells\": []}") end)
print(tostring(s):match("^seer.http.server%(port %d+%)$") and "tostring ok")
s:close()
try(s.remove, s, "c")
print(tostring(s))
"""


class TestLuaBinding(unittest.TestCase):
    def test_errors_name_the_bad_argument(self):
        r = seertest.run(["-e", LUA_ERRORS])
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        want = [r"http.serve: expected a table \{host, port, token, info\}, got no value",
                r"http.serve: token must be a non-empty string .*got nil",
                r"http.serve: token must be a non-empty string .*got an empty string",
                r"http.serve: token must be a non-empty string .*got number",
                r"http.serve: port must be an integer 0..65535 .*got 70000",
                r"http.serve: port must be an integer 0..65535 .*got 1.5",
                r"http.serve: unknown field 'prot' \(valid fields: host, port, token, info\)",
                r"http.serve: info is not valid JSON",
                r"http.serve: info must be JSON text \(a string\), got number",
                r"http.serve: host 'no.such.host.invalid' does not resolve",
                r"http.serve: cannot listen on 127.0.0.1:\d+: Address already in use",
                r"publish: channel \(argument 1\) must be a string, got number",
                r"publish: json_text \(argument 2\) must be a string, got nil",
                r"publish: expected a server .*got string",
                r"^ok$",
                r"^tostring ok$",
                r"remove: the server is closed",
                r"^seer.http.server\(closed\)$"]
        self.assertEqual(len(lines), len(want), r.stdout)
        for line, rx in zip(lines, want):
            self.assertRegex(line, rx)


# ---- the page in a real browser -----------------------------------------------------------

RUNNING_PROBE = """new Promise(function (resolve) {
  function ok() {
    var e = document.querySelector('[data-cell-id="%s"]');
    return e && e.dataset.status === 'running' && e.querySelector('.badge.st-running') &&
           e.textContent.indexOf('%s') >= 0;
  }
  if (ok()) return resolve(true);
  new MutationObserver(function (_, obs) {
    if (ok()) { obs.disconnect(); resolve(true); }
  }).observe(document.documentElement, {subtree: true, childList: true, attributes: true, characterData: true});
})"""


class TestLivePage(unittest.TestCase):
    def setUp(self):
        self.browser = cdp.Chromium()  # skips when chromium is missing
        self.addCleanup(self.browser.close)
        self.srv = Server(self)

    def url(self, channel, token=TOKEN):
        return f"http://127.0.0.1:{self.srv.port}/notebooks/{channel}?token={token}"

    def test_page_follows_the_session(self):
        b = self.browser
        ch = "3b2f6a1e-0d4c-4a57-9a8e-1f2e3d4c5b6a"
        path = "outputs/2026-05-01-12-00_Probe.ipynb"
        cells = [md_cell("intro", "# Probing\nSome **bold**, *italic*, `code` and [a link](https://example.com/a_b).\n\n"
                         "- one\n- two\n\n```\nx <b>not html</b>\n```\n[bad](javascript:alert(1)) <img src=x onerror=alert(1)>"),
                 code_cell("c1", "print('hi')", count=1,
                           outputs=[{"output_type": "stream", "name": "stdout", "text": ["hi\n"]},
                                    {"output_type": "stream", "name": "stderr", "text": "warn\n"}])]
        self.srv.publish(ch, notebook(cells, path=path))
        b.open(self.url(ch))
        b.wait_for("document.querySelector('[data-cell-id=\"c1\"]') !== null")
        b.wait_for("document.getElementById('conn').textContent === 'live'")
        self.assertEqual(b.evaluate("document.title"), path)
        md = b.evaluate("document.querySelector('[data-cell-id=\"intro\"] .md').innerHTML")
        self.assertIn("<h1>Probing</h1>", md)
        self.assertIn("<strong>bold</strong>", md)
        self.assertIn("<em>italic</em>", md)
        self.assertIn("<code>code</code>", md)
        self.assertIn('href="https://example.com/a_b"', md)
        self.assertIn("<li>one</li>", md)
        self.assertIn("x &lt;b&gt;not html&lt;/b&gt;", md)
        self.assertNotIn("javascript:", b.evaluate(
            "Array.from(document.querySelectorAll('a')).map(a => a.href).join(' ')"))
        self.assertEqual(b.evaluate("document.querySelectorAll('#cells img').length"), 0)
        self.assertEqual(b.evaluate("document.querySelector('.stream.stdout').textContent"), "hi\n")
        self.assertEqual(b.evaluate("document.querySelector('.stream.stderr').textContent"), "warn\n")
        self.assertNotEqual(b.evaluate("getComputedStyle(document.querySelector('.stream.stderr')).color"),
                            b.evaluate("getComputedStyle(document.querySelector('.stream.stdout')).color"))
        self.assertEqual(b.evaluate("document.querySelector('[data-cell-id=\"c1\"] .prompt').textContent"), "In [1]:")

        # A new running cell: measure publish -> visible in the DOM.
        latencies = []
        for i in range(5):
            cid = f"run{i}"
            cells = cells + [code_cell(cid, f"generate({i})", status="running")]
            probe = b.evaluate_async(RUNNING_PROBE % (cid, f"generate({i})"))
            time.sleep(0.05)  # the probe is installed before the publish starts
            t0 = time.monotonic()
            self.srv.publish(ch, notebook(cells, path=path), wait=False)
            self.assertTrue(b.evaluate_result(probe, timeout=5))
            latencies.append(time.monotonic() - t0)
            self.assertEqual(self.srv.line(), "ok")
            cells[-1] = code_cell(cid, f"generate({i})", count=2 + i)
        print(f"    page update latency (publish -> running cell in the DOM), 5 runs: "
              + ", ".join(f"{x * 1000:.1f}" for x in latencies) + " ms")
        self.assertLess(max(latencies), 1.0)
        anim = b.evaluate("""(function () { var c = document.querySelector('[data-cell-id="run4"]');
            return [getComputedStyle(c).animationName,
                    getComputedStyle(c.querySelector('.badge.st-running'), '::before').animationName,
                    c.querySelector('.prompt').textContent]; })()""")
        self.assertEqual(anim, ["edge", "spin", "In [*]:"])
        # Unchanged cells were not rendered again.
        self.assertEqual(b.evaluate("document.querySelector('[data-cell-id=\"intro\"]').dataset.renders"), "1")
        self.assertEqual(b.evaluate("document.querySelector('[data-cell-id=\"c1\"]').dataset.renders"), "1")

        # Rich outputs: a PNG, an error with ANSI colours, HTML (sandboxed), markdown, plain text.
        png = base64.b64encode(png_bytes(12, 7)).decode()
        html = ('<table><tr><td id="injected">cell</td></tr></table>'
                '<script>parent.document.title = "pwned"; window.top.pwned = 1;</script>')
        cells = cells + [
            code_cell("img", "plot()", count=10, outputs=[
                {"output_type": "display_data", "metadata": {},
                 "data": {"image/png": png[:40] + "\n" + png[40:], "text/plain": "<Figure>"}}]),
            code_cell("err", "error('boom')", status="error", count=11, outputs=[
                {"output_type": "error", "ename": "RuntimeError", "evalue": "boom",
                 "traceback": ["\x1b[31mRuntimeError\x1b[0m: boom", "stack traceback:\n\t[C]: in ?"]}]),
            code_cell("html", "df", count=12, outputs=[
                {"output_type": "execute_result", "execution_count": 12, "metadata": {},
                 "data": {"text/html": html, "text/plain": "table"}}]),
            code_cell("rich", "md", count=13, outputs=[
                {"output_type": "execute_result", "execution_count": 13, "metadata": {},
                 "data": {"text/markdown": "**rich** text", "text/plain": "rich text"}},
                {"output_type": "execute_result", "execution_count": 13, "metadata": {},
                 "data": {"text/plain": "just \x1b[1mplain\x1b[0m"}}])]
        self.srv.publish(ch, notebook(cells, path=path))
        b.wait_for("(function(){var i=document.querySelector('[data-cell-id=\"img\"] img');"
                   "return i && i.complete && i.naturalWidth > 0;})()")
        self.assertEqual(b.evaluate("(function(){var i=document.querySelector('[data-cell-id=\"img\"] img');"
                                    "return [i.naturalWidth, i.naturalHeight, i.src.slice(0, 22)];})()"),
                         [12, 7, "data:image/png;base64,"])
        err = b.evaluate("document.querySelector('[data-cell-id=\"err\"] .error').textContent")
        self.assertIn("RuntimeError: boom", err)
        self.assertIn("stack traceback:", err)
        self.assertNotIn("\x1b", err)
        self.assertEqual(b.evaluate("document.querySelector('[data-cell-id=\"err\"]').dataset.status"), "error")
        frame = b.evaluate("""(function () { var f = document.querySelector('[data-cell-id="html"] iframe');
            return f && [f.hasAttribute('sandbox'), f.getAttribute('sandbox'), f.srcdoc.indexOf('injected') >= 0]; })()""")
        self.assertEqual(frame, [True, "", True])
        self.assertIsNone(b.evaluate("document.getElementById('injected')"))
        self.assertEqual(b.evaluate("document.querySelectorAll('#cells script').length"), 0)
        self.assertEqual(b.evaluate("document.querySelector('[data-cell-id=\"html\"] .prompt.out').textContent"),
                         "Out[12]:")
        self.assertEqual(b.evaluate("document.querySelector('[data-cell-id=\"rich\"] .outs .md').innerHTML"),
                         "<p><strong>rich</strong> text</p>")
        self.assertEqual(b.evaluate("document.querySelectorAll('[data-cell-id=\"rich\"] .plain')[0].textContent"),
                         "just plain")
        time.sleep(0.3)  # give a (wrongly) running frame script time to act
        self.assertEqual(b.evaluate("document.title"), path)
        self.assertIsNone(b.evaluate("window.pwned === undefined ? null : window.pwned"))

        # Cells are keyed by id: a reorder moves nodes, a deletion removes one.
        cells = [cells[1], cells[0]] + cells[3:]
        self.srv.publish(ch, notebook(cells, path=path))
        b.wait_for("document.querySelector('#cells').firstChild.dataset.cellId === 'c1'")
        self.assertEqual(b.evaluate("document.querySelectorAll('#cells > .cell').length"), len(cells))
        self.assertEqual(b.evaluate("document.querySelector('[data-cell-id=\"intro\"]').dataset.renders"), "1")

        # The session goes away, then the server: the page says so.
        self.srv.cmd(f"remove {ch}")
        b.wait_for("document.getElementById('msg').textContent.indexOf('session ended') >= 0")
        self.srv.cmd("close")
        b.wait_for("document.getElementById('conn').textContent === 'disconnected'", timeout=5)
        problems = [m for m in b.messages()
                    if "Content Security Policy" in m or m.startswith("exception")
                    or ("error" in m.split(":")[0] and "Failed to load resource" not in m)]
        self.assertEqual(problems, [])

    def test_waits_for_a_session_and_scrolls(self):
        b = self.browser
        b.open(self.url("not-yet"))
        b.wait_for("document.getElementById('msg').textContent.indexOf('Waiting for session not-yet') >= 0")
        self.assertFalse(b.evaluate("document.getElementById('msg').hidden"))
        # Enough cells to scroll; the view follows the bottom while the reader is there.
        cells = [code_cell(f"c{i}", "\n".join(f"line {j}" for j in range(8)), count=i) for i in range(30)]
        self.srv.publish("not-yet", notebook(cells))
        b.wait_for("document.querySelectorAll('#cells > .cell').length === 30")
        self.assertTrue(b.evaluate("document.getElementById('msg').hidden"))
        b.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
        b.wait_for("window.scrollY > 0")
        cells.append(code_cell("tail", "running()", status="running"))
        self.srv.publish("not-yet", notebook(cells))
        b.wait_for("document.querySelector('[data-cell-id=\"tail\"]') !== null")
        at_bottom = ("window.innerHeight + window.scrollY >= "
                     "document.documentElement.scrollHeight - 2")
        b.wait_for(at_bottom)
        # A reader who scrolled up stays where they are.
        b.evaluate("window.scrollTo(0, 100)")
        cells.append(code_cell("tail2", "more()", status="pending"))
        self.srv.publish("not-yet", notebook(cells))
        b.wait_for("document.querySelector('[data-cell-id=\"tail2\"]') !== null")
        self.assertEqual(b.evaluate("window.scrollY"), 100)
        self.assertEqual(b.evaluate("document.querySelector('[data-cell-id=\"tail2\"] .badge').textContent"),
                         "pending")


if __name__ == "__main__":
    unittest.main()
