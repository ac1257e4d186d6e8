"""seer mcp notebook round trips, measured on this machine (docs/mcp.md quotes them).

  /usr/bin/python3 tests/bench/mcp.py [N]

Over raw stdio pipes (a minimal client, so the numbers are the server's): start to initialize
answered, start_new_session, ping, and tools/call execute_code "1+1" (a notebook cell, saved);
over streamable HTTP with one kept-alive connection: the same call. With the official MCP SDK
in .venv-test, also the SDK client's execute_code round trip over stdio."""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEER = os.environ.get("SEER") or os.path.join(ROOT, "seer")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
ENV = dict(os.environ, SEER_LUA_DIR=os.path.join(ROOT, "lua"))


def pct(xs):
    xs = sorted(xs)
    return f"p50 {xs[len(xs) // 2]:.2f} ms, p90 {xs[int(len(xs) * 0.9)]:.2f} ms"


def stdio(out):
    p = subprocess.Popen([SEER, "mcp", "notebook", "--output-dir", out], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV)
    n = [0]

    def call(method, params=None):
        n[0] += 1
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n[0], "method": method, "params": params or {}}).encode() + b"\n")
        p.stdin.flush()
        while True:
            m = json.loads(p.stdout.readline())
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
    p.wait(timeout=10)
    print(f"stdio: process start to initialize answered: {t_init:.1f} ms")
    print(f"stdio: start_new_session (notebook server + kernel + first save): {t_start:.1f} ms")
    print(f"stdio: ping round trip ({N}): {pct(pings)}")
    print(f"stdio: tools/call execute_code '1+1' ({N} cells): {pct(cells)}")


def http_rt(out):
    p = subprocess.Popen([SEER, "mcp", "notebook", "--output-dir", out, "--http", "127.0.0.1:0", "--token", "bench"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    port = None
    while port is None:
        line = p.stderr.readline()
        if "serving MCP" in line:
            port = int(line.rsplit(":", 1)[1].split("/")[0])
    c = http.client.HTTPConnection("127.0.0.1", port)
    h = {"Authorization": "Bearer bench", "Content-Type": "application/json", "Accept": "application/json"}

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
    p.terminate()
    p.wait(timeout=10)
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
    subprocess.run([py, f, SEER, out, str(N), os.path.join(ROOT, "lua")], check=True)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        stdio(d)
        http_rt(d)
        sdk(d)
