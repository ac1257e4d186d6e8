"""seer mcp rpc end to end: a scoped interface on stories260K served by `seer rpc serve`, its
functions as MCP tools. Raw stdio (always): tools/list carries the input schemas from the
interface's annotations, tools/call runs a function, an error comes back as isError with the
remote traceback. With the official MCP Python SDK (in .venv-test; skipped without it): the
SDK client started from the mcp_config entry that seer.rpc.serve(..., {expose_as = "mcp"})
returns lists and calls the tools (model info, embedding, generation)."""
import json
import os
import subprocess
import tempfile
import time
import unittest

from seertest import ROOT, SEER, env

VENV_PY = os.environ.get("SEER_TEST_MCP_PYTHON") or os.path.join(ROOT, ".venv-test", "bin", "python")
FIX = os.path.join(ROOT, "tests", "fixtures", "rpc")


def sdk_missing():
    if not os.path.exists(VENV_PY):
        return f"no MCP SDK: {VENV_PY} is missing (make setup installs it)"
    if subprocess.run([VENV_PY, "-c", "import mcp"], capture_output=True).returncode != 0:
        return f"no MCP SDK: {VENV_PY} cannot import mcp (make setup installs it)"
    return None


SDK_MISSING = sdk_missing()


class Served:
    """seer serving an interface through seer.rpc.serve; .info is what it printed."""

    def __init__(self, testcase, interface="interface.lua", expose_as="mcp"):
        self.proc = subprocess.Popen([SEER, os.path.join(FIX, "serve.lua"), os.path.join(FIX, interface), expose_as],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env())
        line = self.proc.stdout.readline()
        if not line:
            testcase.fail("the serving script ended: " + self.proc.stderr.read())
        self.info = json.loads(line)
        testcase.addCleanup(self.close)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def raw_session(cfg, messages, timeout=30):
    """Runs the configured server over raw pipes: sends the messages, waits for an answer to each
    request, then closes stdin; returns the replies by id and the stderr text."""
    p = subprocess.Popen([cfg["command"]] + cfg["args"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env(**cfg.get("env", {})))
    want = {m["id"] for m in messages if "id" in m}
    for m in messages:
        p.stdin.write(json.dumps(m) + "\n")
    p.stdin.flush()
    replies = {}
    deadline = time.monotonic() + timeout
    while want - set(replies) and time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        m = json.loads(line)
        replies[m.get("id")] = m
    p.stdin.close()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
    return replies, p.stderr.read()


INIT = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"}]


class RawTools(unittest.TestCase):
    def test_list_and_call(self):
        s = Served(self)
        cfg = s.info["config"]["model_tools"]
        self.assertEqual(cfg["type"], "stdio")
        self.assertEqual(cfg["args"][:2], ["mcp", "rpc"])
        replies, r = raw_session(cfg, INIT + [
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get_model_info", "arguments": {}}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
             "params": {"name": "generate", "arguments": {"prompt": "Once upon a time", "max_new_tokens": 6}}},
            {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "generate", "arguments": {"prompt": 5}}},
            {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "secret_helper", "arguments": {}}},
        ])
        self.assertIn(1, replies, r)
        tools = {t["name"]: t for t in replies[1]["result"]["tools"]}
        self.assertEqual(sorted(tools), ["generate", "get_embedding", "get_model_info", "show_models"])
        emb = tools["get_embedding"]
        self.assertEqual(emb["inputSchema"]["properties"]["text"], {"type": "string", "description": "the text to embed"})
        self.assertEqual(emb["inputSchema"]["required"], ["text"])
        self.assertIn("The mean of the last layer's hidden states", emb["description"])
        self.assertEqual(tools["generate"]["inputSchema"]["properties"]["max_new_tokens"]["type"], "integer")
        info = replies[2]["result"]
        self.assertFalse(info["isError"])
        self.assertEqual(info["structuredContent"]["hidden_size"], 64)
        self.assertFalse(replies[3]["result"]["isError"], replies[3])
        self.assertTrue(replies[3]["result"]["content"][0]["text"].startswith(","), replies[3])
        self.assertEqual(replies[4]["error"]["code"], -32602)  # schema check before the call
        self.assertIn("must be string", replies[4]["error"]["message"])
        self.assertIn("unknown tool", replies[5]["error"]["message"])

    def test_remote_error_is_a_tool_error(self):
        s = Served(self, "misc.lua")
        cfg = s.info["config"]["model_tools"]
        replies, r = raw_session(cfg, INIT + [
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "fail", "arguments": {"msg": "x"}}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 3}}},
        ])
        self.assertTrue(replies[1]["result"]["isError"])
        text = replies[1]["result"]["content"][0]["text"]
        self.assertIn("boom: x", text)
        self.assertIn("remote traceback", text)
        self.assertEqual(replies[2]["result"]["content"][0]["text"], "5")

    def test_missing_connection_file(self):
        r = subprocess.run([SEER, "mcp", "rpc"], capture_output=True, text=True, env=env())
        self.assertEqual(r.returncode, 2)
        self.assertIn("--connection-file", r.stderr)


SDK_HELPER = r'''
import asyncio, json, sys
from mcp import Client, StdioServerParameters
cfg = json.loads(sys.argv[1])
async def main():
    rep = {}
    async with Client(StdioServerParameters(command=cfg["command"], args=cfg["args"], env=cfg.get("env") or None)) as c:
        tools = (await c.list_tools()).tools
        rep["tools"] = {t.name: {"schema": t.input_schema, "description": t.description} for t in tools}
        def res(r):
            return {"text": [b.text for b in r.content if b.type == "text"], "isError": r.is_error,
                    "structured": r.structured_content}
        rep["info"] = res(await c.call_tool("get_model_info", {}))
        rep["emb"] = res(await c.call_tool("get_embedding", {"text": "Once upon a time"}))
        rep["gen"] = res(await c.call_tool("generate", {"prompt": "Once upon a time", "max_new_tokens": 8}))
    print(json.dumps(rep))
asyncio.run(main())
'''


@unittest.skipIf(SDK_MISSING, SDK_MISSING or "")
class SdkTools(unittest.TestCase):
    def test_sdk_lists_and_calls(self):
        s = Served(self)
        cfg = s.info["config"]["model_tools"]
        d = tempfile.mkdtemp(prefix="seer-mcp-rpc-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
        helper = os.path.join(d, "client.py")
        with open(helper, "w") as f:
            f.write(SDK_HELPER)
        # The SDK starts the server with only the config's env (plus a few safe variables): give it
        # the test environment too (SEER_LUA_DIR for a build outside the tree, sanitizer options).
        cfg = dict(cfg, env=dict(env(), **(cfg.get("env") or {})))
        r = subprocess.run([VENV_PY, helper, json.dumps(cfg)], capture_output=True, text=True, timeout=120, env=env())
        self.assertEqual(r.returncode, 0, r.stderr[-4000:])
        rep = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(sorted(rep["tools"]), ["generate", "get_embedding", "get_model_info", "show_models"])
        self.assertEqual(rep["tools"]["generate"]["schema"]["required"], ["prompt"])
        self.assertEqual(rep["info"]["structured"]["num_layers"], 5)
        self.assertFalse(rep["emb"]["isError"])
        self.assertEqual(len(rep["emb"]["structured"]["embedding"]), 64)
        expected = subprocess.run([SEER, "model", "generate", os.path.join(ROOT, "tests", "fixtures", "models", "stories260K"),
                                   "Once upon a time", "--max-new-tokens", "8", "--temperature", "0"],
                                  capture_output=True, text=True, env=env()).stdout
        self.assertTrue(rep["gen"]["text"][0].strip() and rep["gen"]["text"][0].strip() in expected, (rep["gen"], expected))


if __name__ == "__main__":
    unittest.main()
