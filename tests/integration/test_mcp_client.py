"""Ctrl-C while seer's MCP client waits on a tool call: the call raises "interrupted" at once
(a script that catches it can go on using the client; one that does not ends with status 130),
the server sees notifications/cancelled each time (the fixture writes a file when its sleep is
cancelled), and no server process is left behind. The rest of the client is tested
by tests/lua/test_mcp_client.lua and tests/unit/test_mcp_client.c."""
import os
import signal
import subprocess
import tempfile
import time
import unittest

import seertest

PYTHON = os.path.join(seertest.ROOT, ".venv-test", "bin", "python")
FIXTURE = os.path.join(seertest.ROOT, "tests", "fixtures", "mcp", "sdk_server.py")


def have_sdk():
    return os.path.exists(PYTHON) and subprocess.run([PYTHON, "-c", "import mcp"], capture_output=True).returncode == 0


SCRIPT = r"""
local mcp = require "seer.mcp.client"
local c = mcp.connect({ slow = { type = "stdio", command = PYTHON, args = { FIXTURE, "--name", "slow" },
                                 env = { MCP_FIXTURE_CANCEL_FILE = CANCEL } } })
print("pid " .. c:servers()[1].pid)
print("calling")
io.stdout:flush()
local ok, err = pcall(c.call, c, "sleep", { seconds = 30 })
print("after: " .. tostring(ok) .. " " .. tostring(err))
-- the client still works after the interrupted call
print("echo: " .. c:call("echo", { text = "still here" }).content[1].text)
print("calling again")
io.stdout:flush()
c:call("sleep", { seconds = 31 }) -- not caught: ends the script
print("not reached")
"""


@unittest.skipUnless(have_sdk(), "no MCP SDK (.venv-test); run make setup")
class McpClientInterrupt(unittest.TestCase):
    def test_ctrl_c_cancels_the_call(self):
        with tempfile.TemporaryDirectory() as d:
            cancel = os.path.join(d, "cancelled")
            script = os.path.join(d, "main.lua")
            with open(script, "w") as f:
                f.write(f"local PYTHON, FIXTURE, CANCEL = {PYTHON!r}, {FIXTURE!r}, {cancel!r}\n".replace("'", '"') + SCRIPT)
            p = subprocess.Popen([seertest.SEER, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=seertest.env())
            try:
                pid = int(p.stdout.readline().split()[1])
                self.assertEqual(p.stdout.readline().strip(), "calling")
                time.sleep(0.5)  # the call is on its way
                t0 = time.monotonic()
                p.send_signal(signal.SIGINT)
                lines = [p.stdout.readline() for _ in range(3)]
                took = time.monotonic() - t0
                self.assertRegex(lines[0], r"after: false (\S+: )?interrupted\n")
                self.assertEqual(lines[1], "echo: still here\n")
                self.assertEqual(lines[2], "calling again\n")
                self.assertLess(took, 3.0)
                time.sleep(0.5)
                p.send_signal(signal.SIGINT)
                out, err = p.communicate(timeout=15)
            finally:
                if p.poll() is None:
                    p.kill()
            self.assertNotIn("not reached", out)
            self.assertEqual(p.returncode, 130, err)
            self.assertIn("interrupted", err)
            deadline = time.monotonic() + 5
            while "31" not in (open(cancel).read() if os.path.exists(cancel) else "") and time.monotonic() < deadline:
                time.sleep(0.05)
            with open(cancel) as f:
                text = f.read()
                self.assertIn("cancelled sleep 30", text)
                self.assertIn("cancelled sleep 31", text)
            # The server was shut down with the client (at exit, by the garbage collector).
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            else:
                self.fail(f"the MCP server {pid} outlived seer")


if __name__ == "__main__":
    unittest.main()
