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
import shutil
import os
import queue
import signal
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

VENV_PY = os.environ.get("SEER_TEST_MCP_PYTHON") or os.path.join(ROOT, ".venv-test", "bin", "python")
MODEL = os.path.join(ROOT, "tests", "fixtures", "models", "stories260K")


def sdk_missing():
    if not os.path.exists(VENV_PY):
        return f"no MCP SDK: {VENV_PY} is missing (make setup installs it)"
    r = subprocess.run([VENV_PY, "-c", "import mcp"], capture_output=True)
    if r.returncode != 0:
        return f"no MCP SDK: {VENV_PY} cannot import mcp (make setup installs it)"
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
        # a 10 MB valid message is served: answered (a cell's code is at most 1 MiB)
        big = "--" + "y" * (10 * 1000 * 1000)
        r = s.call("execute_code", {"session_id": "none", "code": big})
        self.assertIn("over its limit of 1048576", json.dumps(r))
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

    def test_usage_errors(self):
        # seer mcp cli and rpc exist now (test_mcp_cli.py, test_mcp_rpc.py); without their
        # required option they are usage errors that say what to give
        r = subprocess.run([SEER, "mcp", "cli"], capture_output=True, text=True, env=env(SEER_SANDBOX_ID=None), timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("cli needs --sandbox ID", r.stderr)
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

    def test_read_notebook_past_the_end_says_the_range_is_empty(self):
        s, sid = self.start()
        r = s.call("read_notebook", {"session_id": sid})["result"]
        self.assertIn("no cells yet (it is empty)", text_of(r))
        for i in range(3):
            s.call("execute_code", {"session_id": sid, "code": "print(%d)" % i})
        r = s.call("read_notebook", {"session_id": sid, "start": 100})["result"]
        text = text_of(r)
        self.assertFalse(r["isError"], r)
        self.assertIn("no cells from 100 on: the notebook has 3 cells (0 to 2); give a start from 0 to 2.", text)
        self.assertNotIn("100-99", text)
        self.assertEqual(r["structuredContent"]["count"], 0)
        self.assertEqual(r["structuredContent"]["total"], 3)
        r = s.call("read_notebook", {"session_id": sid, "start": 1, "limit": 1})["result"]
        self.assertIn(": cells 1-1 of 3", text_of(r))

    def test_execute_on_a_dead_kernel_says_so_in_the_agents_terms(self):
        s, sid = self.start()
        r = s.call("execute_code", {"session_id": sid, "code": "os.exit(3)"})["result"]
        self.assertIn("KernelDied", text_of(r))
        r = s.call("execute_code", {"session_id": sid, "code": "print(1)"})["result"]
        text = text_of(r)
        self.assertIn("KernelDied: the kernel of session %s exited with status 3" % sid, text)
        self.assertEqual(r["structuredContent"]["status"], "error")
        self.assertEqual(r["structuredContent"]["error"]["ename"], "KernelDied")
        # the Lua API's session:restart() is not a tool the agent has
        self.assertNotIn("session:restart()", json.dumps(r))

    def test_resume_and_continue(self):
        s, sid = self.start()
        s.call("execute_code", {"session_id": sid, "code": "x = 21"})
        s.call("add_markdown", {"session_id": sid, "content": "note"})
        s.call("execute_code", {"session_id": sid, "code": "print(x * 2)"})
        path = s.call("read_notebook", {"session_id": sid})["result"]["structuredContent"]["notebook_path"]
        s.call("shutdown_session", {"session_id": sid})
        r = s.call("start_session_continue_notebook", {"notebook_path": path, "experiment_name": "fork"})["result"]
        self.assertFalse(r["isError"], r)
        fork = r["structuredContent"]
        self.assertEqual((fork["status"], fork["cells_run"], fork["cells_failed"]), ("continued", 2, 0))
        self.assertNotEqual(fork["notebook_path"], path)
        self.assertTrue(fork["notebook_path"].endswith("_fork.ipynb"), fork)
        self.assertEqual(os.path.dirname(fork["notebook_path"]), os.path.dirname(path))
        r = s.call("execute_code", {"session_id": fork["session_id"], "code": "print(x)"})["result"]
        self.assertEqual(text_of(r), "21\n")
        r = s.call("start_session_resume_notebook", {"notebook_path": os.path.relpath(path)})["result"]
        self.assertFalse(r["isError"], r)
        res = r["structuredContent"]
        self.assertEqual((res["status"], res["notebook_path"], res["cells_run"]), ("resumed", path, 2))
        r = s.call("read_notebook", {"session_id": res["session_id"]})["result"]
        self.assertEqual(r["structuredContent"]["total"], 3)
        self.assertIn("42", text_of(r))
        validate_notebook(self, path)
        validate_notebook(self, fork["notebook_path"])

    def test_streams_printed_at_different_times_come_back_once(self):
        # The notebook merges consecutive stream outputs; what the call returns must not repeat them.
        s, sid = self.start()
        r = s.call("execute_code", {"session_id": sid, "code": "print('a')\nlocal t = os.clock() while os.clock() - t < 0.2 do end\nprint('b')"})
        self.assertEqual(text_of(r["result"]), "a\nb\n")

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
        self.assertIn("LuaError: [run 1]:2: boom", t)  # the kernel's "[cell 1]": run 1, not a cell number
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


# The SDK client side: run by .venv-test/bin/python; argv[1] is a JSON job, the last stdout line
# is a JSON report of what the client saw.
SDK_HELPER = r'''
import asyncio, base64, json, sys, time
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

job = json.loads(sys.argv[1])

def blocks(res):
    out = []
    for b in res.content:
        if b.type == "text":
            out.append({"type": "text", "text": b.text})
        elif b.type == "image":
            out.append({"type": "image", "data": b.data, "mimeType": b.mime_type})
        else:
            out.append({"type": b.type})
    return {"content": out, "isError": res.is_error, "structured": res.structured_content}

def connect():
    if "url" in job:
        http = create_mcp_http_client(headers={"Authorization": "Bearer " + job["token"]})
        return Client(streamable_http_client(job["url"], http_client=http)), http
    cfg = job["server"]
    return Client(StdioServerParameters(command=cfg["command"], args=cfg.get("args", []), env=cfg.get("env"),
                                        cwd=job.get("cwd"))), None

async def main():
    report = {"steps": {}}
    client, http = connect()
    async def call(name, args, **kw):
        t0 = time.monotonic()
        r = blocks(await client.call_tool(name, args, **kw))
        r["ms"] = (time.monotonic() - t0) * 1000
        return r
    async with client:
        report["protocolVersion"] = client.protocol_version
        report["server"] = client.server_info.name if client.server_info else None
        report["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
        for step in job["steps"]:
            name, args = step["tool"], dict(step.get("args", {}))
            if "session_from" in step:
                args["session_id"] = report["steps"][step["session_from"]]["structured"]["session_id"]
            progress = []
            async def on_progress(p, total, message):
                progress.append({"progress": p, "message": message})
            r = await call(name, args, progress_callback=on_progress if step.get("progress") else None)
            r["progress"] = progress
            report["steps"][step["key"]] = r
        if job.get("time_1plus1"):
            sid = report["steps"][job["time_1plus1"]]["structured"]["session_id"]
            times = []
            for _ in range(job.get("repeat", 20)):
                t0 = time.perf_counter()
                await client.call_tool("execute_code", {"session_id": sid, "code": "1+1"})
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            report["one_plus_one_ms"] = {"p50": times[len(times) // 2], "p90": times[int(len(times) * 0.9)]}
    if http is not None:
        await http.aclose()
    print(json.dumps(report))

asyncio.run(main())
'''


def run_sdk(testcase, job, timeout=120):
    d = tempfile.mkdtemp(prefix="seer-mcp-sdk-")
    testcase.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
    helper = os.path.join(d, "client.py")
    with open(helper, "w") as f:
        f.write(SDK_HELPER)
    r = subprocess.run([VENV_PY, helper, json.dumps(job)], capture_output=True, text=True, timeout=timeout, env=env())
    if r.returncode != 0:
        testcase.fail(f"the SDK client failed ({r.returncode}):\n{r.stderr[-6000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def validate_notebook(testcase, path):
    import nbformat
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return nb


INVESTIGATION = [
    {"key": "start", "tool": "start_new_session", "args": {"experiment_name": "investigation"}},
    {"key": "load", "tool": "execute_code", "session_from": "start",
     "args": {"code": f"model = seer.model.load({json.dumps(MODEL)})\n"
                      "print(model:generate('Once upon a time', { max_new_tokens = 20 }).text)"}},
    {"key": "plot", "tool": "execute_code", "session_from": "start",
     "args": {"code": "display.image(require('seer.plot').line{y = {1, 3, 2}})"}},
    {"key": "error", "tool": "execute_code", "session_from": "start", "args": {"code": "local t = nil\nreturn t.x"}},
    {"key": "edit", "tool": "edit_cell", "session_from": "start",
     "args": {"code": "print(#model:generate('One day', { max_new_tokens = 5 }).ids)", "cell_index": -1}},
    {"key": "slow", "tool": "execute_code", "session_from": "start", "progress": True,
     "args": {"code": "local t0 = os.clock()\nfor i = 1, 3 do print('tick', i) local t = os.clock() while os.clock() - t < 0.4 do end end"}},
    {"key": "markdown", "tool": "add_markdown", "session_from": "start",
     "args": {"content": "## Findings\nstories260K tells short stories."}},
    {"key": "read", "tool": "read_notebook", "session_from": "start", "args": {}},
    {"key": "read2", "tool": "read_notebook", "session_from": "start", "args": {"start": 1, "limit": 1}},
    {"key": "shutdown", "tool": "shutdown_session", "session_from": "start", "args": {}},
    {"key": "after", "tool": "execute_code", "session_from": "start", "args": {"code": "1"}},
]


class InvestigationChecks:
    """What a whole investigation must have produced, over either transport."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="seer-mcp-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.tmp]))

    def check_investigation(self, rep):
        self.assertEqual(rep["server"], "seer-notebook")
        for name in ("start_new_session", "execute_code", "edit_cell", "add_markdown", "read_notebook",
                     "interrupt", "shutdown_session", "attach_to_session"):
            self.assertIn(name, rep["tools"])
        st = rep["steps"]
        self.assertFalse(st["start"]["isError"])
        path = st["start"]["structured"]["notebook_path"]
        self.assertTrue(path.startswith(os.path.realpath(self.tmp)), path)
        load = st["load"]
        self.assertFalse(load["isError"], load)
        self.assertGreater(len(load["content"][0]["text"].split()), 5, load)  # the generated continuation
        imgs = [b for b in st["plot"]["content"] if b["type"] == "image"]
        self.assertEqual(len(imgs), 1, st["plot"])
        self.assertEqual(imgs[0]["mimeType"], "image/png")
        w, h = png_decodes(base64.b64decode(imgs[0]["data"]))
        self.assertLessEqual(max(w, h), 512)
        self.assertEqual(w, 512)  # seer.plot draws 640x400
        err = st["error"]
        self.assertFalse(err["isError"])
        self.assertEqual(err["structured"]["status"], "error")
        self.assertIn("[run 3]:2: attempt to index", err["content"][0]["text"])
        self.assertIn("stack traceback", err["content"][0]["text"])
        edit = st["edit"]
        self.assertFalse(edit["isError"])
        self.assertEqual(edit["content"][0]["text"].strip(), "5")
        self.assertEqual(edit["structured"]["cell_index"], 2)
        self.assertEqual(edit["structured"]["status"], "ok")
        slow = st["slow"]
        self.assertIn("tick\t3", slow["content"][0]["text"])
        self.assertGreaterEqual(len(slow["progress"]), 3, slow["progress"])
        self.assertEqual([p["progress"] for p in slow["progress"]], list(range(1, len(slow["progress"]) + 1)))
        self.assertEqual(st["markdown"]["structured"], {"cell_number": 4})
        read = st["read"]["content"][0]["text"]
        for piece in ("## cell 0 (code cell 0: edit_cell cell_index=0, run 1, complete)", "seer.model.load", load["content"][0]["text"].strip(), "[image",
                      "## cell 2 (code cell 2: edit_cell cell_index=2, run 4, complete)", "#model:generate('One day'", "## cell 4 (markdown)",
                      "stories260K tells short stories."):
            self.assertIn(piece, read)
        self.assertNotIn("attempt to index", read)  # the edited cell replaced the error
        self.assertEqual(st["read"]["structured"]["total"], 5)
        self.assertEqual(st["read2"]["structured"]["count"], 1)
        self.assertIn("## cell 1 (code", st["read2"]["content"][0]["text"])
        self.assertNotIn("## cell 0", st["read2"]["content"][0]["text"])
        self.assertFalse(st["shutdown"]["isError"])
        self.assertTrue(st["after"]["isError"])
        self.assertIn("unknown session_id", st["after"]["content"][0]["text"])

        nb = validate_notebook(self, path)
        self.assertEqual([c.cell_type for c in nb.cells], ["code", "code", "code", "code", "markdown"])
        self.assertEqual(nb.cells[2].source, "print(#model:generate('One day', { max_new_tokens = 5 }).ids)")
        self.assertEqual([c.metadata["execution_status"] for c in nb.cells[:4]], ["complete"] * 4)
        self.assertIn("image/png", nb.cells[1].outputs[0].data)
        return rep


@unittest.skipIf(SDK_MISSING, SDK_MISSING or "")
class SdkStdioTest(InvestigationChecks, unittest.TestCase):
    def test_whole_investigation_over_stdio(self):
        job = {"server": {"command": SEER, "args": ["mcp", "notebook", "--output-dir", self.tmp],
                          "env": {"SEER_LUA_DIR": os.path.join(ROOT, "lua")}},
               "steps": INVESTIGATION}
        self.check_investigation(run_sdk(self, job))

    def test_mcp_config_of_a_session(self):
        """An experiment creates a session and prints its mcp_config; the SDK client starts exactly
        that server and runs code in the experiment's session, which goes on working after."""
        script = os.path.join(self.tmp, "exp.lua")
        with open(script, "w") as f:
            f.write(f"""
local s = seer.execution.create_local_notebook_session(nil, {{ name = "agent", output_dir = {json.dumps(self.tmp)} }})
s:exec("secret = 41", {{ hidden = true }})
io.write(seer.json.encode{{ config = s.mcp_config, session_id = s.session_id, path = s.notebook_path }}, "\\n")
io.stdout:flush()
io.read("*l")
print(s:exec("return secret + 1").text)
s:terminate()
""")
        exp = subprocess.Popen([SEER, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env())
        self.addCleanup(lambda: exp.poll() is None and exp.kill())
        info = json.loads(exp.stdout.readline())
        cfg = info["config"]["notebook"]
        self.assertEqual(cfg["type"], "stdio")
        self.assertEqual(cfg["args"], ["mcp", "notebook"])
        self.assertEqual(cfg["env"]["SEER_SESSION_ID"], info["session_id"])
        cfg["env"]["SEER_LUA_DIR"] = os.path.join(ROOT, "lua")
        job = {"server": cfg, "steps": [
            {"key": "run", "tool": "execute_code", "args": {"session_id": info["session_id"], "code": "print(secret * 2)\nsecret = secret + 1"}},
            {"key": "md", "tool": "add_markdown", "args": {"session_id": info["session_id"], "content": "from the agent"}},
            {"key": "attach", "tool": "attach_to_session",
             "args": {"session_id": info["session_id"], "jupyter_url": cfg["env"]["SEER_NOTEBOOK_URL"]}},
            {"key": "bad", "tool": "attach_to_session",
             "args": {"session_id": "nosuch", "jupyter_url": cfg["env"]["SEER_NOTEBOOK_URL"]}},
        ]}
        rep = run_sdk(self, job)
        self.assertFalse(rep["steps"]["run"]["isError"], rep)
        self.assertEqual(rep["steps"]["run"]["content"][0]["text"], "82\n")
        self.assertEqual(rep["steps"]["md"]["structured"], {"cell_number": 1})
        self.assertEqual(rep["steps"]["attach"]["structured"]["status"], "attached")
        self.assertEqual(rep["steps"]["attach"]["structured"]["notebook_path"], info["path"])
        self.assertTrue(rep["steps"]["bad"]["isError"])
        self.assertIn("SessionNotFound", rep["steps"]["bad"]["content"][0]["text"])
        # the MCP server has exited; the experiment's session lives on
        out, err = exp.communicate("\n", timeout=30)
        self.assertEqual(exp.returncode, 0, err)
        self.assertEqual(out.strip(), "43")
        nb = validate_notebook(self, info["path"])
        self.assertEqual([c.cell_type for c in nb.cells], ["code", "markdown", "code"])
        self.assertEqual(nb.cells[0].outputs[0].text, "82\n")


@unittest.skipIf(SDK_MISSING, SDK_MISSING or "")
@unittest.skipIf(shutil.which("bwrap") is None, "bubblewrap is not installed (make setup installs it)")
class SdkSandboxedSessionTest(unittest.TestCase):
    """A sandboxed session's own mcp_config, started by the official SDK exactly as given: the
    server is bound to the sandbox, so start_new_session lands in the same sandbox with the
    model preloaded, and resume/attach reach nothing outside it (docs/mcp.md)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="seer-mcp-sbx-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.tmp]))

    def test_sandboxed_session_mcp_config(self):
        script = os.path.join(self.tmp, "exp.lua")
        host_nb = os.path.join(self.tmp, "host.ipynb")
        with open(host_nb, "w") as f:
            json.dump({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                       "cells": [{"cell_type": "code", "id": "a", "metadata": {}, "outputs": [], "execution_count": None,
                                  "source": "print('HOST ONLY')"}]}, f)
        with open(script, "w") as f:
            f.write(f"""
local env = seer.environment
local sb = env.Sandbox(env.SandboxConfig{{ models = {{ env.ModelConfig{{ name = {json.dumps(MODEL)} }} }} }}):start{{ name = "sdk" }}
local s = seer.execution.create_notebook_session(sb, nil, {{ name = "agent", output_dir = {json.dumps(self.tmp + "/out")} }})
local h = seer.execution.create_local_notebook_session(nil, {{ name = "host", output_dir = {json.dumps(self.tmp + "/hostout")} }})
io.write(seer.json.encode{{ config = s.mcp_config, session_id = s.session_id, path = s.notebook_path,
                            sandbox_id = sb.sandbox_id, host_id = h.session_id, host_url = h.jupyter_url }}, "\\n")
io.stdout:flush()
io.read("*l")
print(#seer.execution.list_sessions())
h:terminate() s:terminate() sb:terminate()
""")
        exp = subprocess.Popen([SEER, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env(SEER_SANDBOX_DIR=os.path.join(self.tmp, "sb")))
        self.addCleanup(lambda: exp.poll() is None and exp.kill())
        line = exp.stdout.readline()
        if not line:
            self.fail("the experiment did not start: " + exp.stderr.read()[-3000:])
        info = json.loads(line)
        cfg = info["config"]["notebook"]
        self.assertNotIn("SEER_NOTEBOOK_URL", cfg["env"])
        self.assertIn("SEER_NOTEBOOK_SCOPE_KEY", cfg["env"])
        cfg["env"]["SEER_LUA_DIR"] = os.path.join(ROOT, "lua")
        probe = ("print(os.getenv('SEER_SANDBOX_ID'), io.popen('id -u'):read('*l'), model ~= nil, "
                 "(io.open(%s)) == nil)" % json.dumps(host_nb))
        job = {"server": cfg, "list_tools": True, "steps": [
            {"key": "start", "tool": "start_new_session", "args": {"experiment_name": "second"}},
            {"key": "probe", "tool": "execute_code", "session_from": "start", "args": {"code": probe}},
            {"key": "resume_up", "tool": "start_session_resume_notebook", "args": {"notebook_path": "../host.ipynb"}},
            {"key": "resume_abs", "tool": "start_session_resume_notebook", "args": {"notebook_path": host_nb}},
            {"key": "resume_own", "tool": "start_session_resume_notebook",
             "args": {"notebook_path": os.path.basename(info["path"])}},
            {"key": "attach_host", "tool": "attach_to_session",
             "args": {"session_id": info["host_id"], "jupyter_url": info["host_url"]}},
            {"key": "run_host", "tool": "execute_code", "args": {"session_id": info["host_id"], "code": "print(1)"}},
        ]}
        rep = run_sdk(self, job, timeout=240)
        st = rep["steps"]
        self.assertFalse(st["start"]["isError"], st["start"])
        self.assertNotIn("/", st["start"]["structured"]["notebook_path"])
        self.assertEqual(st["probe"]["content"][0]["text"], f"{info['sandbox_id']}\t65534\ttrue\ttrue\n")
        for k in ("resume_up", "resume_abs", "attach_host", "run_host"):
            self.assertTrue(st[k]["isError"], (k, st[k]))
            self.assertNotIn("HOST ONLY", json.dumps(st[k]))
        self.assertIn("is a path", st["resume_up"]["content"][0]["text"])
        # its own notebook, by name, is found; a live session of the server holds it, so a resume
        # (two sessions saving one file) is refused, naming the file only (no host path)
        self.assertTrue(st["resume_own"]["isError"], st["resume_own"])
        own_text = st["resume_own"]["content"][0]["text"]
        self.assertIn("NotebookInUse", own_text)
        self.assertIn(os.path.basename(info["path"]), own_text)
        self.assertNotIn(os.path.dirname(info["path"]), own_text)
        out, err = exp.communicate("\n", timeout=60)
        self.assertEqual(exp.returncode, 0, err[-3000:])
        # the experiment's two sessions; the server's own sessions ended with it
        self.assertEqual(out.strip(), "2")


class HttpServer:
    """seer mcp notebook --http 127.0.0.1:0; the URL and token come from its stderr."""

    def __init__(self, testcase, args=(), token=None):
        argv = [SEER, "mcp", "notebook", "--http", "127.0.0.1:0"] + list(args)
        if token:
            argv += ["--token", token]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env(SEER_MCP_TOKEN=None))
        testcase.addCleanup(self.stop)
        self.token = token
        self.url = None
        deadline = time.monotonic() + 20
        while (self.url is None or self.token is None) and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                testcase.fail("seer mcp notebook --http ended before serving")
            if "serving MCP" in line:
                self.url = line.split(" at ")[1].strip()
            if "bearer token" in line:
                self.token = line.rsplit(": ", 1)[1].strip()
        testcase.assertTrue(self.url and self.token)
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # Ctrl-C: the server ends its sessions and exits 130
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()

    def post(self, body, headers=None, method="POST", auth=True, url=None):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if auth:
            h["Authorization"] = "Bearer " + self.token
        h.update(headers or {})
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        req = urllib.request.Request(url or self.url, data=data, headers=h, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()


class HttpTest(unittest.TestCase):
    def init(self, srv, headers=None):
        st, h, body = srv.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                           "clientInfo": {"name": "raw", "version": "1"}}}, headers)
        self.assertEqual(st, 200, body)
        self.assertEqual(json.loads(body)["result"]["protocolVersion"], "2025-11-25")
        return h["Mcp-Session-Id"]

    def test_auth_origin_and_sessions(self):
        srv = HttpServer(self, ["--allow-origin", "https://ui.example"])
        self.assertRegex(srv.url, r"^http://127\.0\.0\.1:\d+/mcp$")
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        # bearer token
        st, h, body = srv.post(ping, auth=False)
        self.assertEqual(st, 401)
        self.assertIn("Bearer", h["WWW-Authenticate"])
        self.assertIn("unauthorized", json.loads(body)["error"]["message"])
        st, _, _ = srv.post(ping, auth=False, headers={"Authorization": "Bearer wrong"})
        self.assertEqual(st, 401)
        st, _, _ = srv.post(ping, auth=False, headers={"Authorization": "Bearer " + srv.token + "x"})
        self.assertEqual(st, 401)
        # Origin: a foreign one is refused; the server's own and allowed ones pass. Without the
        # token the gate in front of the server answers 401 before any header but the token
        # is looked at (docs/mcp.md, "HTTP: limits"), whatever the Origin.
        st, _, body = srv.post(ping, headers={"Origin": "http://evil.example"})
        self.assertEqual(st, 403)
        self.assertIsNone(json.loads(body)["id"])
        st, _, _ = srv.post(ping, auth=False, headers={"Origin": "http://evil.example"})
        self.assertEqual(st, 401)
        port = srv.url.split(":")[2].split("/")[0]
        sid = self.init(srv, {"Origin": f"http://localhost:{port}"})
        self.init(srv, {"Origin": "https://ui.example"})
        # Mcp-Session-Id: required after initialize, unknown ones are 404
        st, _, body = srv.post(ping)
        self.assertEqual(st, 400)
        self.assertIn("Mcp-Session-Id", json.loads(body)["error"]["message"])
        st, _, _ = srv.post(ping, {"Mcp-Session-Id": "not-a-session"})
        self.assertEqual(st, 404)
        st, _, body = srv.post(ping, {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
        self.assertEqual((st, json.loads(body)["result"]), (200, {}))
        st, _, _ = srv.post(ping, {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "1999-01-01"})
        self.assertEqual(st, 400)
        # notifications are accepted with 202 and no body
        st, _, body = srv.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, {"Mcp-Session-Id": sid})
        self.assertEqual((st, body), (202, b""))
        # bad bodies
        st, _, body = srv.post(b"not json", {"Mcp-Session-Id": sid})
        self.assertEqual((st, json.loads(body)["error"]["code"]), (400, -32700))
        st, _, body = srv.post(b"[]", {"Mcp-Session-Id": sid})
        self.assertEqual((st, json.loads(body)["error"]["code"]), (400, -32600))
        st, _, _ = srv.post(b"{}", {"Mcp-Session-Id": sid, "Content-Type": "text/plain"})
        self.assertEqual(st, 415)
        st, _, body = srv.post({"jsonrpc": "2.0", "id": 3, "method": "nope"}, {"Mcp-Session-Id": sid})
        self.assertEqual((st, json.loads(body)["error"]["code"]), (200, -32601))
        st, _, body = srv.post({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "execute_code",
                                "arguments": {"session_id": 1}}}, {"Mcp-Session-Id": sid})
        self.assertEqual(json.loads(body)["error"]["code"], -32602)
        st, _, body = srv.post(b"x" * (17 * 1024 * 1024), {"Mcp-Session-Id": sid})
        self.assertEqual((st, json.loads(body)["error"]["code"]), (413, -32600))
        # other paths and methods
        st, _, _ = srv.post(ping, {"Mcp-Session-Id": sid}, url=srv.url.replace("/mcp", "/other"))
        self.assertEqual(st, 404)
        st, h, _ = srv.post(ping, {"Mcp-Session-Id": sid}, method="PUT")
        self.assertEqual(st, 405)
        self.assertIn("POST", h["Allow"])
        # DELETE ends the session
        st, _, _ = srv.post(None, {"Mcp-Session-Id": sid}, method="DELETE")
        self.assertEqual(st, 200)
        st, _, _ = srv.post(ping, {"Mcp-Session-Id": sid})
        self.assertEqual(st, 404)

    def test_generated_token_and_progress_stream(self):
        srv = HttpServer(self, ["--output-dir", tempfile.mkdtemp(prefix="seer-mcp-")])
        self.assertGreaterEqual(len(srv.token), 32)
        sid = self.init(srv)
        h = {"Mcp-Session-Id": sid}
        st, _, body = srv.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                "params": {"name": "start_new_session", "arguments": {}}}, h)
        nb = json.loads(body)["result"]["structuredContent"]
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", os.path.dirname(nb["notebook_path"])]))
        # a call with a progress token is answered as an event stream: progress, then the result
        st, rh, body = srv.post({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                 "params": {"name": "execute_code", "_meta": {"progressToken": 9},
                                            "arguments": {"session_id": nb["session_id"],
                                                          "code": "print('a')\nlocal t = os.clock() while os.clock() - t < 1.3 do end\nprint('b')"}}}, h)
        self.assertEqual(st, 200)
        self.assertTrue(rh["Content-Type"].startswith("text/event-stream"))
        events = [json.loads(l[len("data: "):]) for l in body.decode().splitlines() if l.startswith("data: ")]
        self.assertGreaterEqual(len(events), 3, events)
        self.assertTrue(all(e["method"] == "notifications/progress" for e in events[:-1]))
        self.assertEqual(events[-1]["id"], 3)
        self.assertTrue(events[-1]["result"]["content"][0]["text"].startswith("a\nb\n"))
        # without a token: plain JSON
        st, rh, body = srv.post({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                 "params": {"name": "execute_code", "arguments": {"session_id": nb["session_id"], "code": "1+1"}}}, h)
        self.assertTrue(rh["Content-Type"].startswith("application/json"))
        self.assertEqual(json.loads(body)["result"]["content"][0]["text"], "2\n")
        # Ctrl-C ends the server and the kernel it started
        st, _, body = srv.post({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "execute_code",
                                "arguments": {"session_id": nb["session_id"], "code": "return require('seer.process').getpid()"}}}, h)
        kernel_pid = int(json.loads(body)["result"]["content"][0]["text"])
        srv.stop()
        self.assertEqual(srv.proc.returncode, 130)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(kernel_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            self.fail("the kernel outlived seer mcp notebook --http")


@unittest.skipIf(SDK_MISSING, SDK_MISSING or "")
class SdkHttpTest(InvestigationChecks, unittest.TestCase):
    def test_whole_investigation_over_http(self):
        srv = HttpServer(self, ["--output-dir", self.tmp], token="t0ken-for-the-test")
        rep = run_sdk(self, {"url": srv.url, "token": srv.token, "steps": INVESTIGATION})
        self.check_investigation(rep)
        self.assertIn(rep["protocolVersion"], ("2025-06-18", "2025-11-25"))
