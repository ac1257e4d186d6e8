"""seer mcp notebook end to end.

Raw stdio (no SDK): protocol errors (-32700 garbage, -32600 invalid requests and over-long lines,
-32601 unknown methods, -32602 bad arguments and unknown tools), requests before initialize,
version negotiation, cancellation interrupting a running cell, progress notifications, clean
exit on EOF. With the official MCP Python SDK (in .venv-test; skipped without it): a whole small
investigation on stories260K over stdio, a session's own mcp_config, and streamable HTTP.

This module runs under /usr/bin/python3 (no mcp package); SDK clients run as helper scripts under
.venv-test/bin/python and print one JSON line of what they saw."""
import base64
import json
import os
import queue
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
import zlib

from seertest import ROOT, SEER, env

VENV_PY = os.path.join(ROOT, ".venv-test", "bin", "python")
MODEL = os.path.join(ROOT, "tests", "fixtures", "models", "stories260K")


def sdk_missing():
    if not os.path.exists(VENV_PY):
        return "no MCP SDK: .venv-test/bin/python is missing (make setup installs it)"
    r = subprocess.run([VENV_PY, "-c", "import mcp"], capture_output=True)
    if r.returncode != 0:
        return "no MCP SDK: .venv-test/bin/python cannot import mcp (make setup installs it)"
    return None


SDK_MISSING = sdk_missing()


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def png_decodes(data):
    """Checks the PNG's chunks and that its IDAT stream inflates to the expected size."""
    w, h = png_size(data)
    depth, ctype = data[24], data[25]
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype]
    pos, idat = 8, b""
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        crc = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
        assert zlib.crc32(kind + body) & 0xffffffff == crc, f"bad CRC in {kind}"
        if kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    assert len(raw) == h * (1 + w * channels * depth // 8), "IDAT size does not match the header"
    return w, h


class Raw:
    """seer mcp notebook over raw pipes: send lines, read lines (each must be one JSON message)."""

    def __init__(self, testcase, args=(), cwd=None, **envextra):
        self.t = testcase
        self.proc = subprocess.Popen([SEER, "mcp", "notebook"] + list(args), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env(**envextra))
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        self.next_id = 1000
        self.notifications = []
        testcase.addCleanup(self.close)

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send_raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, obj):
        self.send_raw(json.dumps(obj).encode() + b"\n")

    def recv(self, timeout=30):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.t.fail(f"no message within {timeout} s; stderr: {b''.join(self.stderr).decode(errors='replace')[-3000:]}")
        if line is None:
            self.t.fail(f"the server closed stdout; stderr: {b''.join(self.stderr).decode(errors='replace')[-3000:]}")
        self.t.assertTrue(line.endswith(b"\n"))
        return json.loads(line)

    def response(self, rid, timeout=30):
        """The response to request rid; notifications that come first are kept."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(max(0.1, deadline - time.monotonic()))
            if "id" in msg and msg.get("id") == rid and "method" not in msg:
                return msg
            self.t.assertIn("method", msg, f"an unexpected response: {msg}")
            self.notifications.append(msg)

    def request(self, method, params=None, timeout=30, meta=None):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.response(self.next_id, timeout)

    def initialize(self, version="2025-06-18"):
        r = self.request("initialize", {"protocolVersion": version, "capabilities": {},
                                        "clientInfo": {"name": "raw", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return r

    def call(self, name, args, timeout=60):
        return self.request("tools/call", {"name": name, "arguments": args}, timeout)

    def error_code(self, msg):
        self.t.assertIn("error", msg, msg)
        return msg["error"]["code"]

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


def text_of(result):
    return "".join(b.get("text", "") for b in result["content"] if b["type"] == "text")


class RawProtocolTest(unittest.TestCase):
    def test_errors_before_and_after_initialize_and_still_serving(self):
        s = Raw(self)
        # before initialize: ping works, other requests are refused, tools/list is not served
        self.assertEqual(s.request("ping")["result"], {})
        r = s.request("tools/list")
        self.assertEqual(s.error_code(r), -32600)
        self.assertIn("initialize", r["error"]["message"])
        r = s.initialize("2025-06-18")
        self.assertEqual(r["result"]["protocolVersion"], "2025-06-18")
        self.assertEqual(r["result"]["capabilities"], {"tools": {"listChanged": False}})
        self.assertEqual(r["result"]["serverInfo"]["name"], "seer-notebook")
        self.assertIn("instructions", r["result"])
        self.assertEqual(s.error_code(s.request("initialize", {"protocolVersion": "2025-06-18"})), -32600)

        tools = {t["name"]: t for t in s.request("tools/list")["result"]["tools"]}
        for name in ("start_new_session", "attach_to_session", "start_session_resume_notebook",
                     "start_session_continue_notebook", "execute_code", "edit_cell", "add_markdown",
                     "shutdown_session", "read_notebook", "interrupt"):
            self.assertIn(name, tools)
            self.assertEqual(tools[name]["inputSchema"]["type"], "object")
            self.assertIn("annotations", tools[name])
        self.assertEqual(sorted(tools["execute_code"]["inputSchema"]["required"]), ["code", "session_id"])
        self.assertEqual(tools["edit_cell"]["inputSchema"]["properties"]["cell_index"]["type"], "integer")
        self.assertEqual(sorted(tools["attach_to_session"]["inputSchema"]["properties"]),
                         ["jupyter_url", "notebook_dir", "session_id"])

        def raw_error(data, code, id_=None):
            s.send_raw(data + b"\n")
            msg = s.recv()
            self.assertEqual(msg["error"]["code"], code, msg)
            self.assertEqual(msg["id"], id_)
            return msg

        raw_error(b"this is not json", -32700)
        raw_error(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"', -32700)
        raw_error(b'\xff\xfe{"jsonrpc": "2.0"}', -32700)
        raw_error(b"42", -32600)
        raw_error(b"[]", -32600)
        raw_error(b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', -32600)
        raw_error(b'{"id": 7, "method": "ping"}', -32600, 7)
        raw_error(b'{"jsonrpc": "2.0", "id": 8}', -32600, 8)
        raw_error(b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', -32600)
        raw_error(b'{"jsonrpc": "2.0", "id": 9, "method": 5}', -32600, 9)
        # a notification with an unknown method gets no answer at all: the next line's does
        s.send({"jsonrpc": "2.0", "method": "notifications/whatever"})
        self.assertEqual(s.request("ping")["result"], {})

        r = s.request("resources/list")
        self.assertEqual(s.error_code(r), -32601)
        self.assertIn("resources/list", r["error"]["message"])
        r = s.request("tools/call", {"name": "no_such_tool", "arguments": {}})
        self.assertEqual(s.error_code(r), -32602)
        self.assertIn("no_such_tool", r["error"]["message"])
        self.assertIn("execute_code", r["error"]["message"])
        r = s.request("tools/call", {"name": "execute_code", "arguments": {"session_id": "x", "code": 5}})
        self.assertEqual(s.error_code(r), -32602)
        self.assertIn('"code" must be string', r["error"]["message"])
        r = s.request("tools/call", {"name": "execute_code", "arguments": {"code": "1"}})
        self.assertEqual(s.error_code(r), -32602)
        self.assertIn('"session_id"', r["error"]["message"])
        r = s.request("tools/call", {"name": "edit_cell", "arguments": {"session_id": "x", "code": "1", "cell_index": 1.5}})
        self.assertEqual(s.error_code(r), -32602)
        self.assertIn('"cell_index" must be integer', r["error"]["message"])
        r = s.request("tools/call", {"name": "add_markdown", "arguments": {"session_id": "x", "content": "a", "extra": 1}})
        self.assertEqual(s.error_code(r), -32602)
        self.assertIn('"extra"', r["error"]["message"])
        r = s.request("tools/call", {"name": "execute_code", "arguments": "print(1)"})
        self.assertEqual(s.error_code(r), -32602)
        r = s.request("tools/call", {"arguments": {}})
        self.assertEqual(s.error_code(r), -32602)
        r = s.request("tools/list", [1, 2])
        self.assertEqual(s.error_code(r), -32602)
        # a tool that fails is a result with isError, not a protocol error
        r = s.call("execute_code", {"session_id": "nope", "code": "1"})
        self.assertTrue(r["result"]["isError"])
        self.assertIn("unknown session_id", text_of(r["result"]))
        self.assertEqual(s.request("ping")["result"], {})
        s.close()
        self.assertEqual(s.proc.returncode, 0)

    def test_huge_lines(self):
        s = Raw(self)
        s.initialize()
        t0 = time.monotonic()
        s.send_raw(b"x" * (10 * 1000 * 1000) + b"\n")
        msg = s.recv()
        self.assertEqual(msg["error"]["code"], -32700)
        self.assertLess(len(json.dumps(msg)), 2000, "the error must not echo the line")
        # a 10 MB valid message is served
        big = "--" + "y" * (10 * 1000 * 1000)
        r = s.call("execute_code", {"session_id": "none", "code": big})
        self.assertTrue(r["result"]["isError"])
        # over the 16 MiB limit: dropped up to its newline, answered with the limit
        s.send_raw(b'{"jsonrpc": "2.0", "id": 77, "method": "ping", "params": {"pad": "' + b"z" * (17 * 1024 * 1024) + b'"}}\n')
        msg = s.recv()
        self.assertEqual(msg["error"]["code"], -32600)
        self.assertIn("16 MiB", msg["error"]["message"])
        self.assertEqual(s.request("ping")["result"], {})
        self.assertLess(time.monotonic() - t0, 20)

    def test_version_negotiation(self):
        for asked, got in (("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"), ("2024-11-05", "2025-11-25"),
                           ("1999-01-01", "2025-11-25")):
            s = Raw(self)
            self.assertEqual(s.initialize(asked)["result"]["protocolVersion"], got)
            s.close()
        s = Raw(self)
        r = s.request("initialize", {"capabilities": {}})
        self.assertEqual(s.error_code(r), -32602)
        self.assertIn("protocolVersion", r["error"]["message"])

    def test_cli_and_rpc_say_what_they_need(self):
        for cmd, need in (("cli", "sandboxes"), ("rpc", "scoped sandboxes")):
            r = subprocess.run([SEER, "mcp", cmd], capture_output=True, text=True, env=env(), timeout=30)
            self.assertEqual(r.returncode, 2)
            self.assertEqual(r.stdout, "")
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("not available yet", r.stderr)
            self.assertIn(need, r.stderr)
        r = subprocess.run([SEER, "mcp", "notebook", "--bogus"], capture_output=True, text=True, env=env(), timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown option --bogus", r.stderr)
        r = subprocess.run([SEER, "mcp", "notebook", "--session-id", "abc"], capture_output=True, text=True,
                           env=env(SEER_NOTEBOOK_URL=None, SEER_SESSION_ID=None), timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("jupyter_url", r.stderr)


class RawSessionTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="seer-mcp-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.tmp]))

    def start(self):
        s = Raw(self, ["--output-dir", self.tmp])
        s.initialize()
        r = s.call("start_new_session", {"experiment_name": "raw"})
        self.assertFalse(r["result"]["isError"], r)
        return s, r["result"]["structuredContent"]["session_id"]

    def test_cancel_interrupts_the_cell_and_progress_arrives(self):
        s, sid = self.start()
        s.send({"jsonrpc": "2.0", "id": "spin", "method": "tools/call",
                "params": {"name": "execute_code", "arguments": {"session_id": sid, "code": "print('spinning')\nwhile true do end"},
                           "_meta": {"progressToken": "tok-1"}}})
        # progress: one for the printed output, then one a second while the cell runs
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 3 and time.monotonic() < deadline:
            m = s.recv(15)
            self.assertEqual(m.get("method"), "notifications/progress", m)
            got.append(m["params"])
        self.assertEqual([p["progressToken"] for p in got], ["tok-1"] * 3)
        self.assertEqual([p["progress"] for p in got], [1, 2, 3])
        self.assertIn("output", got[0]["message"])
        # ping is answered while the cell spins
        self.assertEqual(s.request("ping")["result"], {})
        t0 = time.monotonic()
        s.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "spin", "reason": "test"}})
        r = s.call("execute_code", {"session_id": sid, "code": "1 + 1"})
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(text_of(r["result"]).strip(), "2")
        # the cancelled request gets no answer; its cell was interrupted
        self.assertFalse([n for n in s.notifications if n.get("id") == "spin"])
        r = s.call("read_notebook", {"session_id": sid})
        text = text_of(r["result"])
        self.assertIn("while true do end", text)
        self.assertIn("interrupted", text)
        # no further progress for the cancelled call
        s.notifications.clear()
        self.assertEqual(s.request("ping")["result"], {})
        time.sleep(1.2)
        self.assertEqual(s.request("ping")["result"], {})
        self.assertFalse([n for n in s.notifications if n.get("method") == "notifications/progress"])

    def test_interrupt_tool_and_eof_ends_sessions(self):
        s, sid = self.start()
        r = s.call("execute_code", {"session_id": sid, "code": "return require('seer.process').getpid()"})
        kernel_pid = int(text_of(r["result"]).strip())
        os.kill(kernel_pid, 0)
        s.send({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": {"name": "execute_code", "arguments": {"session_id": sid, "code": "while true do end"}}})
        time.sleep(0.3)
        r = s.call("interrupt", {"session_id": sid})
        self.assertFalse(r["result"]["isError"], r)
        r = s.response(5, 10)
        self.assertFalse(r["result"]["isError"])
        self.assertEqual(r["result"]["structuredContent"]["status"], "error")
        self.assertIn("interrupted", text_of(r["result"]))
        # EOF: the server exits at once and the kernel it started is gone
        t0 = time.monotonic()
        s.proc.stdin.close()
        self.assertEqual(s.proc.wait(timeout=10), 0)
        self.assertLess(time.monotonic() - t0, 5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(kernel_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            self.fail("the kernel outlived seer mcp notebook")

    def test_errors_images_and_limits(self):
        s = Raw(self, ["--output-dir", self.tmp, "--max-output", "300"])
        s.initialize()
        sid = s.call("start_new_session", {})["result"]["structuredContent"]["session_id"]
        r = s.call("execute_code", {"session_id": sid, "code": "print('before')\nerror('boom')"})["result"]
        self.assertFalse(r["isError"])
        self.assertEqual(r["structuredContent"]["status"], "error")
        self.assertEqual(r["structuredContent"]["error"]["ename"], "LuaError")
        t = text_of(r)
        self.assertTrue(t.startswith("before\n"), t)
        self.assertIn("LuaError: [cell 1]:2: boom", t)
        self.assertIn("stack traceback", t)
        self.assertNotIn("\x1b", t)
        r = s.call("execute_code", {"session_id": sid, "code": "for i = 1, 100 do print(('line %03d'):format(i)) end"})["result"]
        t = text_of(r)
        self.assertIn("[output truncated:", t)
        self.assertLess(len(t), 500)
        self.assertTrue(r["structuredContent"]["truncated"])
        # a 1200x900 image comes back as an image no larger than 512 px
        code = ("local png = require('seer.core.png')\n"
                "display.image(png.encode(1200, 900, 3, string.rep('\\200\\40\\40', 1200 * 900)))")
        r = s.call("execute_code", {"session_id": sid, "code": code})["result"]
        imgs = [b for b in r["content"] if b["type"] == "image"]
        self.assertEqual(len(imgs), 1, r)
        self.assertEqual(imgs[0]["mimeType"], "image/png")
        self.assertEqual(png_decodes(base64.b64decode(imgs[0]["data"])), (512, 384))
        r = s.call("edit_cell", {"session_id": sid, "code": "x = 1", "cell_index": 99})["result"]
        self.assertTrue(r["isError"])
        self.assertIn("IndexError", text_of(r))
        r = s.call("start_session_resume_notebook", {"notebook_path": "/nonexistent.ipynb"})["result"]
        self.assertTrue(r["isError"])
        self.assertIn("does not exist", text_of(r))
        r = s.call("attach_to_session", {"session_id": "x", "jupyter_url": "http://127.0.0.1:1/notebooks/x?token=t"})["result"]
        self.assertTrue(r["isError"])
        self.assertIn("cannot reach", text_of(r))
