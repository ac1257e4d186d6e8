"""seer mcp cli end to end with the official MCP Python SDK client (in .venv-test; skipped without
it): a seer script starts a real sandbox and hands its id to `seer mcp cli --sandbox ID`, which
the SDK client drives: list the tools, run commands (exit codes, isolation seen from the agent's
side), Lua, files, listings, and a cancelled long command that must not keep running.

This module runs under /usr/bin/python3; the SDK client runs as a helper script under
.venv-test/bin/python and prints one JSON line of what it saw."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from seertest import ROOT, SEER, env

VENV_PY = os.environ.get("SEER_TEST_MCP_PYTHON") or os.path.join(ROOT, ".venv-test", "bin", "python")


def sdk_missing():
    if not os.path.exists(VENV_PY):
        return f"no MCP SDK: {VENV_PY} is missing (make setup installs it)"
    if subprocess.run([VENV_PY, "-c", "import mcp"], capture_output=True).returncode != 0:
        return f"no MCP SDK: {VENV_PY} cannot import mcp (make setup installs it)"
    if not shutil.which("bwrap"):
        return "bubblewrap is not installed (make setup installs it)"
    return None


SDK_MISSING = sdk_missing()

HOLDER = r'''
local env = require "seer.environment"
local exec = require "seer.execution"
local s = env.Sandbox(env.SandboxConfig{ execution_mode = "cli", env = { PROBE = "from-config" } }):start{ name = "mcpcli" }
local session = exec.create_cli_session(s, nil, { name = "shell" })
print(seer.json.encode(session.mcp_config)); io.stdout:flush()
io.read("*l")
s:terminate()
'''

SDK_HELPER = r'''
import asyncio, json, sys, time
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

cfg = json.loads(sys.argv[1])

def text(r):
    return "".join(c.text for c in r.content if c.type == "text")

async def main():
    rep = {}
    params = StdioServerParameters(command=cfg["command"], args=cfg["args"], env=cfg["env"])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            init = await s.initialize()
            rep["server"] = init.server_info.name
            rep["tools"] = sorted(t.name for t in (await s.list_tools()).tools)
            async def call(name, args):
                res = await s.call_tool(name, args)
                return {"isError": bool(res.is_error), "text": text(res)}
            rep["echo"] = await call("run_command", {"command": "echo $PROBE; id -u; exit 3"})
            rep["escape"] = await call("run_command", {"command": "cat /etc/shadow; touch /usr/x; ls /proc | grep -c '^[0-9]'"})
            rep["write"] = await call("write_file", {"path": "notes/a.txt", "content": "hello sandbox"})
            rep["read"] = await call("read_file", {"path": "/workspace/notes/a.txt"})
            rep["missing"] = await call("read_file", {"path": "nope.txt"})
            rep["list"] = await call("list_files", {"path": "notes"})
            rep["lua"] = await call("run_lua", {"code": "print(require('seer.json').encode({6 * 7}))"})
            try:
                rep["badargs"] = await call("run_command", {"command": 42})
            except Exception as e:  # the SDK raises JSON-RPC errors (-32602 here)
                rep["badargs"] = {"isError": True, "text": str(e)}
            rep["timeout"] = await call("run_command", {"command": "sleep 5", "timeout": 0.3})
            # cancellation: the client gives up on a long command; the command must stop
            t0 = time.monotonic()
            try:
                with anyio.fail_after(1.0):
                    await s.call_tool("run_command", {"command": "sleep 31337"})
                rep["cancel"] = "completed?"
            except TimeoutError:
                rep["cancel"] = "cancelled"
            await anyio.sleep(0.5)
            rep["after_cancel"] = await call("run_command", {"command": "ps -eo args | grep -c '^sleep 31337' || true"})
            rep["cancel_s"] = time.monotonic() - t0
    print(json.dumps(rep))

asyncio.run(main())
'''


@unittest.skipIf(SDK_MISSING, SDK_MISSING or "")
class McpCliWithSdk(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="seer-mcp-cli-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.tmp]))
        script = os.path.join(self.tmp, "holder.lua")
        with open(script, "w") as f:
            f.write(HOLDER)
        self.holder = subprocess.Popen([SEER, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       env=env(SEER_SANDBOX_DIR=os.path.join(self.tmp, "sb")))
        self.addCleanup(self.stop_holder)
        line = self.holder.stdout.readline()
        self.assertTrue(line, "the sandbox did not start")
        self.config = json.loads(line)["shell"]

    def stop_holder(self):
        if self.holder.poll() is None:
            self.holder.stdin.write("\n")
            self.holder.stdin.flush()
            self.holder.wait(20)

    def test_agent_shell_in_a_sandbox(self):
        self.assertEqual(self.config["args"][:3], ["mcp", "cli", "--sandbox"])
        d = tempfile.mkdtemp(dir=self.tmp)
        helper = os.path.join(d, "client.py")
        with open(helper, "w") as f:
            f.write(SDK_HELPER)
        cfg = dict(self.config)
        cfg["env"] = dict(env(), **cfg.get("env", {}))
        r = subprocess.run([VENV_PY, helper, json.dumps(cfg)], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-4000:])
        rep = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(rep["server"], "seer-cli")
        self.assertEqual(rep["tools"], ["list_files", "read_file", "run_command", "run_lua", "write_file"])
        self.assertEqual(rep["echo"], {"isError": False, "text": "from-config\n65534\n[exit code 3]"})
        esc = rep["escape"]["text"]
        self.assertIn("No such file", esc)
        self.assertIn("Read-only file system", esc)
        self.assertLessEqual(int(esc.split("\n")[0]), 6, esc)  # stdout first: a handful of processes, the sandbox's own
        self.assertEqual(rep["write"]["text"], "wrote 13 bytes to /workspace/notes/a.txt")
        self.assertEqual(rep["read"], {"isError": False, "text": "hello sandbox"})
        self.assertTrue(rep["missing"]["isError"])
        self.assertIn("nope.txt", rep["missing"]["text"])
        self.assertIn("a.txt", rep["list"]["text"])
        self.assertEqual(rep["lua"]["text"], "[42]\n[exit code 0]")
        self.assertTrue(rep["badargs"]["isError"])
        self.assertIn('"command" must be string', rep["badargs"]["text"])
        self.assertIn("killed: the command ran past its timeout", rep["timeout"]["text"])
        self.assertEqual(rep["cancel"], "cancelled")
        self.assertTrue(rep["after_cancel"]["text"].startswith("0\n"), rep["after_cancel"])
        # the file the agent wrote is in the sandbox's workspace on the host side
        sb_dir = os.path.join(self.tmp, "sb")
        ids = os.listdir(sb_dir)
        self.assertEqual(len(ids), 1)
        with open(os.path.join(sb_dir, ids[0], "workspace", "notes", "a.txt")) as f:
            self.assertEqual(f.read(), "hello sandbox")

    def test_unknown_sandbox(self):
        r = subprocess.run([SEER, "mcp", "cli", "--sandbox", "no-such-sandbox"], input="", capture_output=True,
                           text=True, timeout=30, env=env(SEER_SANDBOX_DIR=os.path.join(self.tmp, "sb")))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no running sandbox no-such-sandbox", r.stderr)


if __name__ == "__main__":
    unittest.main()
