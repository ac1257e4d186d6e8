"""The peer for tests/bench/mcp_client.lua: the official MCP SDK's own client doing what seer's
client does in the same run, against the same fixture server. Prints one line per transport:
"<transport> <connect ms> <tools/call round trip ms> <4 MB result ms> <negotiated version>".
Usage: mcp_client_peer.py PYTHON FIXTURE N HTTP_URL"""
import asyncio
import os
import sys
import time

# tests/bench has an mcp.py of its own: keep it from shadowing the SDK's package.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
from mcp import Client, StdioServerParameters  # noqa: E402

python, fixture, n, url = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]


async def measure(kind, target):
    t0 = time.perf_counter()
    async with Client(target) as c:
        await c.list_tools()
        connect = time.perf_counter() - t0
        await c.call_tool("add", {"a": 1, "b": 2})
        t0 = time.perf_counter()
        for i in range(n):
            await c.call_tool("add", {"a": i, "b": 2})
        rt = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        r = await c.call_tool("big", {"n": 4000000})
        assert len(r.content[0].text) == 4000000
        big = time.perf_counter() - t0
        version = c.protocol_version
    print(f"{kind} {connect * 1000:.1f} {rt * 1000:.3f} {big * 1000:.1f} {version}", flush=True)


async def main():
    await measure("stdio", StdioServerParameters(command=python, args=[fixture, "--name", "peer"]))
    await measure("http", url)


asyncio.run(main())
