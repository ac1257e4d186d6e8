"""seer mcp notebook round trips, measured on this machine (docs/mcp.md quotes them).

  /usr/bin/python3 tests/bench/mcp.py [N]

Over raw stdio pipes (a minimal client, so the numbers are the server's): start to initialize
answered, start_new_session, ping, and tools/call execute_code "1+1" (a notebook cell, saved);
over streamable HTTP with one kept-alive connection: the same call. With the official MCP SDK
in .venv-test, also the SDK client's execute_code round trip over stdio.

Every wait is bounded (MCP_BENCH_TIMEOUT seconds per reply, default 30; the SDK part N * 0.5 s
+ 60 s): a server that exits or stops answering makes that part print "FAILED: why" (with the
server's last stderr lines) and the script go on to the next, then exit 1. Before these bounds,
a server that refused to start (a bearer token shorter than the 16 characters it now requires)
left the HTTP part spinning on its closed stderr for as long as make bench let it."""
import http.client
import io
import json
import os
import queue
import secrets
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEER = os.environ.get("SEER") or os.path.join(ROOT, "seer")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
ENV = dict(os.environ, SEER_LUA_DIR=os.path.join(ROOT, "lua"))
TIMEOUT = float(os.environ.get("MCP_BENCH_TIMEOUT", "30"))


class Failed(Exception):
    pass


def lines_of(stream):
    """A queue of the stream's lines, filled by a daemon thread; None at end of stream."""
    q = queue.Queue()

    def pump():
        for line in iter(stream.readline, "" if isinstance(stream, io.TextIOBase) else b""):
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def next_line(q, what, err=None):
    try:
        line = q.get(timeout=TIMEOUT)
    except queue.Empty:
        raise Failed(f"no {what} within {TIMEOUT:g} s{tail(err)}") from None
    if line is None:
        raise Failed(f"the server closed its output before {what}{tail(err)}")
    return line


def tail(err):
    if not err:
        return ""
    time.sleep(0.2)
    got = []
    while True:
        try:
            line = err.get_nowait()
        except queue.Empty:
            break
        if line is None:
            break
        got.append(line.decode(errors="replace") if isinstance(line, bytes) else line)
    return "; server stderr: " + " | ".join(x.strip() for x in got[-3:]) if got else ""


def pct(xs):
    xs = sorted(xs)
    return f"p50 {xs[len(xs) // 2]:.2f} ms, p90 {xs[int(len(xs) * 0.9)]:.2f} ms"


def stdio(out):
    p = subprocess.Popen([SEER, "mcp", "notebook", "--output-dir", out], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        stdio_run(p)
    finally:
        p.kill()
        p.wait()


def stdio_run(p):
    n = [0]
    lines, err = lines_of(p.stdout), lines_of(p.stderr)

    def call(method, params=None):
        n[0] += 1
        try:
            p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n[0], "method": method, "params": params or {}}).encode() + b"\n")
            p.stdin.flush()
        except BrokenPipeError:
            raise Failed(f"the server exited before {method}{tail(err)}") from None
        while True:
            m = json.loads(next_line(lines, f"reply to {method}", err))
            if m.get("id") == n[0]:
                return m

    t0 = time.perf_counter()
    call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    t_init = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    sid = call("tools/call", {"name": "start_new_session", "arguments": {}})["result"]["structuredContent"]["session_id"]
    t_start = (time.perf_counter() - t0) * 1000
    pings, cells = [], []
    for _ in range(N):
        t0 = time.perf_counter()
        call("ping")
        pings.append((time.perf_counter() - t0) * 1000)
    for _ in range(N):
        t0 = time.perf_counter()
        r = call("tools/call", {"name": "execute_code", "arguments": {"session_id": sid, "code": "1+1"}})
        cells.append((time.perf_counter() - t0) * 1000)
        assert r["result"]["content"][0]["text"] == "2\n", r
    p.stdin.close()
    try:
        p.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Failed(f"the server did not exit within {TIMEOUT:g} s of its stdin closing") from None
    print(f"stdio: process start to initialize answered: {t_init:.1f} ms")
    print(f"stdio: start_new_session (notebook server + kernel + first save): {t_start:.1f} ms")
    print(f"stdio: ping round trip ({N}): {pct(pings)}")
    print(f"stdio: tools/call execute_code '1+1' ({N} cells): {pct(cells)}")


def http_rt(out):
    token = secrets.token_hex(16)  # the server wants at least 16 characters
    p = subprocess.Popen([SEER, "mcp", "notebook", "--output-dir", out, "--http", "127.0.0.1:0", "--token", token],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        http_run(p, token)
    finally:
        p.kill()
        p.wait()


def http_run(p, token):
    err = lines_of(p.stderr)
    port = None
    while port is None:
        line = next_line(err, "'serving MCP' line on stderr", err)
        if "serving MCP" in line:
            port = int(line.rsplit(":", 1)[1].split("/")[0])
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Accept": "application/json"}

    def call(i, method, params):
        c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}), h)
        r = c.getresponse()
        body = r.read()
        if method == "initialize":
            h["Mcp-Session-Id"] = r.getheader("Mcp-Session-Id")
        return json.loads(body)

    call(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    sid = call(2, "tools/call", {"name": "start_new_session", "arguments": {}})["result"]["structuredContent"]["session_id"]
    cells = []
    for i in range(N):
        t0 = time.perf_counter()
        call(10 + i, "tools/call", {"name": "execute_code", "arguments": {"session_id": sid, "code": "1+1"}})
        cells.append((time.perf_counter() - t0) * 1000)
    c.close()
    print(f"http:  tools/call execute_code '1+1' ({N} cells, one connection): {pct(cells)}")


SDK = r'''
import asyncio, json, sys, time
from mcp import Client, StdioServerParameters
async def main():
    seer, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    async with Client(StdioServerParameters(command=seer, args=["mcp", "notebook", "--output-dir", out],
                                            env={"SEER_LUA_DIR": sys.argv[4]})) as c:
        sid = (await c.call_tool("start_new_session", {})).structured_content["session_id"]
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            await c.call_tool("execute_code", {"session_id": sid, "code": "1+1"})
            ts.append((time.perf_counter() - t0) * 1000)
    ts.sort()
    print(f"sdk:   Client.call_tool execute_code '1+1' over stdio ({n} cells): p50 {ts[len(ts)//2]:.2f} ms, p90 {ts[int(len(ts)*0.9)]:.2f} ms")
asyncio.run(main())
'''


def sdk(out):
    py = os.path.join(ROOT, ".venv-test", "bin", "python")
    if not os.path.exists(py) or subprocess.run([py, "-c", "import mcp"], capture_output=True).returncode != 0:
        print("sdk:   skipped (no MCP SDK in .venv-test)")
        return
    f = os.path.join(out, "sdk.py")
    with open(f, "w") as fh:
        fh.write(SDK)
    limit = N * 0.5 + 60
    try:
        r = subprocess.run([py, f, SEER, out, str(N), os.path.join(ROOT, "lua")], timeout=limit, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        raise Failed(f"the SDK client gave no result within {limit:g} s") from None
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        said = [x.strip(" |") for x in r.stderr.splitlines() if any(ch.isalpha() for ch in x)] or ["?"]
        raise Failed(f"the SDK client exited with {r.returncode}: {said[-1]}")


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # each line out as it is known, even if killed later
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        for name, part in (("stdio", stdio), ("http", http_rt), ("sdk", sdk)):
            try:
                part(d)
            except (Failed, OSError, ValueError, KeyError, AssertionError) as e:
                print(f"{name}: FAILED: {e}")
                failed = 1
    sys.exit(failed)
