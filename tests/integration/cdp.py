"""Headless Chromium driven over the Chrome DevTools Protocol, with nothing but the standard
library: start the browser, open a URL, evaluate JavaScript (awaiting promises), wait for a
condition, collect console messages and exceptions, and always kill the browser.

    with cdp.Chromium() as b:            # raises unittest.SkipTest if chromium is missing
        b.open("http://127.0.0.1:8888/")
        b.wait_for("document.title === 'x'")
        print(b.evaluate("document.body.innerText"))
"""
import base64
import itertools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium():
    env = os.environ.get("SEER_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class CDPError(Exception):
    pass


class WebSocket:
    """A minimal RFC 6455 client: text frames out (masked, as clients must), text or
    fragmented frames in, pings answered, close honoured."""

    def __init__(self, url, timeout=10):
        u = urllib.parse.urlparse(url)
        if u.scheme != "ws":
            raise CDPError(f"only ws:// URLs are supported, got {url}")
        self.sock = socket.create_connection((u.hostname, u.port or 80), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        path = u.path + (f"?{u.query}" if u.query else "")
        req = (f"GET {path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self.sock.sendall(req.encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise CDPError("websocket handshake: connection closed")
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        self.partial = b""
        if not head.startswith(b"HTTP/1.1 101"):
            raise CDPError(f"websocket handshake refused: {head.decode(errors='replace')}")

    def _send_frame(self, opcode, payload):
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def send(self, text):
        self._send_frame(0x1, text.encode())

    def _frame(self):
        """Takes one whole frame off the buffer: (fin, opcode, payload), or None if the buffer
        does not hold a whole frame yet (then nothing is consumed)."""
        b = self.buf
        if len(b) < 2:
            return None
        n, at = b[1] & 0x7F, 2
        if n == 126:
            if len(b) < 4:
                return None
            n, at = struct.unpack(">H", b[2:4])[0], 4
        elif n == 127:
            if len(b) < 10:
                return None
            n, at = struct.unpack(">Q", b[2:10])[0], 10
        mask = None
        if b[1] & 0x80:
            if len(b) < at + 4:
                return None
            mask, at = b[at:at + 4], at + 4
        if len(b) < at + n:
            return None
        payload = b[at:at + n]
        self.buf = b[at + n:]
        if mask:
            payload = bytes(x ^ mask[i % 4] for i, x in enumerate(payload))
        return bool(b[0] & 0x80), b[0] & 0x0F, payload

    def recv(self, timeout):
        """The next text message, or None when none was complete within timeout seconds
        (a message that has only partly arrived stays buffered for the next call)."""
        deadline = time.monotonic() + timeout
        while True:
            f = self._frame()
            if f is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.sock.settimeout(left)
                try:
                    chunk = self.sock.recv(1 << 20)
                except (socket.timeout, BlockingIOError):
                    return None
                if not chunk:
                    raise CDPError("websocket closed by the browser")
                self.buf += chunk
                continue
            fin, opcode, payload = f
            if opcode == 0x9:
                self._send_frame(0xA, payload)
            elif opcode == 0x8:
                raise CDPError("websocket closed by the browser")
            elif opcode in (0x0, 0x1, 0x2):
                self.partial += payload
                if fin:
                    message, self.partial = self.partial, b""
                    return message.decode()

    def close(self):
        try:
            self._send_frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class CDP:
    """Commands and events on one DevTools target's websocket."""

    def __init__(self, ws_url):
        self.ws = WebSocket(ws_url)
        self.ids = itertools.count(1)
        self.results = {}
        self.events = []

    def _pump(self, timeout):
        msg = self.ws.recv(timeout)
        if msg is None:
            return False
        data = json.loads(msg)
        if "id" in data:
            self.results[data["id"]] = data
        else:
            self.events.append(data)
        return True

    def send_async(self, method, params=None):
        """Sends a command and returns its id; collect the answer with result(id)."""
        i = next(self.ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params or {}}))
        return i

    def result(self, i, timeout=15):
        deadline = time.monotonic() + timeout
        while i not in self.results:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError(f"no answer to DevTools command {i} within {timeout} s")
            self._pump(left)
        data = self.results.pop(i)
        if "error" in data:
            raise CDPError(f"DevTools error: {data['error']}")
        return data.get("result", {})

    def call(self, method, params=None, timeout=15):
        return self.result(self.send_async(method, params), timeout)

    def drain(self, timeout=0.001):
        """Reads whatever events have arrived."""
        while self._pump(timeout):
            pass

    def wait_event(self, method, timeout=15, pred=None):
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for ev in self.events[seen:]:
                if ev.get("method") == method and (pred is None or pred(ev.get("params", {}))):
                    self.events.remove(ev)
                    return ev.get("params", {})
            seen = len(self.events)
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError(f"no {method} event within {timeout} s")
            self._pump(left)

    def close(self):
        self.ws.close()


def _value(result, expr):
    if "exceptionDetails" in result:
        d = result["exceptionDetails"]
        text = d.get("exception", {}).get("description") or d.get("text")
        raise CDPError(f"JavaScript error evaluating {expr!r}: {text}")
    return result.get("result", {}).get("value")


class Chromium:
    """A headless Chromium with one page. Skips the calling test when no browser is
    installed; kills the browser (its whole process group) on close, even after errors."""

    def __init__(self, timeout=30, width=1200, height=900):
        exe = find_chromium()
        if not exe:
            raise unittest.SkipTest("chromium is not installed (Debian package 'chromium'); "
                                    "the live page is not tested in a browser")
        self.tmp = tempfile.mkdtemp(prefix="seer-chromium-")
        self.proc = None
        self.cdp = None
        self.log = None
        args = [exe, "--headless=new", "--remote-debugging-port=0", f"--user-data-dir={self.tmp}",
                "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-default-apps", "--mute-audio",
                "--disable-dev-shm-usage", f"--window-size={width},{height}", "about:blank"]
        try:
            # stderr goes to a file: an unread pipe could fill up and stall the browser.
            self.log = open(os.path.join(self.tmp, "stderr.txt"), "w+b")
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=self.log, start_new_session=True)
            port = self._devtools_port(timeout)
            self.http = f"http://127.0.0.1:{port}"
            page = self._page_target(timeout)
            self.cdp = CDP(page["webSocketDebuggerUrl"])
            for domain in ("Page", "Runtime", "Log"):
                self.cdp.call(f"{domain}.enable")
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, timeout):
        # Chromium writes the port it picked to DevToolsActivePort once it listens.
        path = os.path.join(self.tmp, "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")
                raise CDPError(f"chromium exited with {self.proc.returncode}:\n{err[-3000:]}")
            try:
                with open(path) as f:
                    first = f.readline().strip()
                if first.isdigit():
                    return int(first)
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        raise CDPError(f"chromium did not report a DevTools port within {timeout} s")

    def _page_target(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.http + "/json/list", timeout=5) as r:
                    targets = json.load(r)
                pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
                if pages:
                    return pages[0]
            except OSError:
                pass
            time.sleep(0.05)
        raise CDPError("chromium has no page target")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def open(self, url, timeout=15):
        """Navigates and waits for the load event."""
        self.cdp.drain()
        self.cdp.events = [e for e in self.cdp.events if e.get("method") != "Page.loadEventFired"]
        res = self.cdp.call("Page.navigate", {"url": url}, timeout)
        if res.get("errorText"):
            raise CDPError(f"navigating to {url}: {res['errorText']}")
        self.cdp.wait_event("Page.loadEventFired", timeout)

    def evaluate(self, expr, timeout=15):
        """The JSON value of a JavaScript expression; a promise is awaited."""
        return _value(self.cdp.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                                         "awaitPromise": True}, timeout), expr)

    def evaluate_async(self, expr):
        """Starts evaluating (a promise, typically) and returns a handle for evaluate_result."""
        return self.cdp.send_async("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                                        "awaitPromise": True})

    def evaluate_result(self, handle, timeout=15):
        return _value(self.cdp.result(handle, timeout), "(async evaluation)")

    def wait_for(self, expr, timeout=10, interval=0.02):
        """Polls expr until it is truthy; returns its value or fails with the last one."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.evaluate(expr)
            if v:
                return v
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {expr!r} (last value {v!r})")
            time.sleep(interval)

    def messages(self):
        """Console messages, log entries (CSP violations land here) and uncaught exceptions
        so far, as text lines."""
        self.cdp.drain()
        out = []
        for ev in self.cdp.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Log.entryAdded":
                e = p.get("entry", {})
                out.append(f"log {e.get('level')}: {e.get('text')}")
            elif m == "Runtime.consoleAPICalled":
                args = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                out.append(f"console {p.get('type')}: {args}")
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
        return out

    def close(self):
        if self.cdp:
            try:
                self.cdp.close()
            except OSError:
                pass
            self.cdp = None
        if self.proc:
            # The whole group: renderer and GPU helpers too (start_new_session made the
            # browser its leader, so this is the browser we started and nothing else).
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if getattr(self, "log", None):
            self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
