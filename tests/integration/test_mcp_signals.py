"""seer mcp notebook stopped with SIGTERM, as MCP clients and timeout(1) stop servers: it ends as at
the end of stdin. The sessions it started are shut down (a running cell keeps its output so far and
is marked, the notebook saved), the sessions it attached keep running, and it exits (143) within the
grace, instead of vanishing and leaving its kernels running on a notebook server it does not own
(a sandboxed session's, an experiment's). Raw stdio, under /usr/bin/python3."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from seertest import ROOT, SEER, env
from test_mcp_notebook import Raw, text_of

BUSY = "print('partial output') io.stdout:flush() local t = os.clock() while os.clock() - t < 60 do end print('never')"


def cell_outputs(path, i):
    with open(path) as f:
        cell = json.load(f)["cells"][i]
    text = []
    for o in cell.get("outputs", []):
        t = o.get("text", o.get("evalue", ""))
        text.append("".join(t) if isinstance(t, list) else t)
    return "\n".join(text), cell["metadata"].get("execution_status")


class SigtermTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="seer-mcp-term-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.tmp]))

    def run_busy_then_term(self, s, sid):
        """Sends a cell that prints, then spins; SIGTERM while it runs. Returns (exit status, seconds)."""
        s.send({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
                "params": {"name": "execute_code", "arguments": {"session_id": sid, "code": BUSY}}})
        time.sleep(2)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        try:
            rc = s.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.fail("seer mcp notebook still runs 30 s after SIGTERM")
        took = time.monotonic() - t0
        try:
            s.proc.stdin.close()
        except OSError:
            pass
        return rc, took

    def test_host_sessions_end_with_the_server(self):
        s = Raw(self, ["--output-dir", self.tmp])
        s.initialize()
        r = s.call("start_new_session", {"experiment_name": "term"})["result"]
        sid, path = r["structuredContent"]["session_id"], r["structuredContent"]["notebook_path"]
        r = s.call("execute_code", {"session_id": sid, "code": "return require('seer.process').getpid()"})["result"]
        kernel_pid = int(text_of(r).strip())
        rc, took = self.run_busy_then_term(s, sid)
        self.assertEqual(rc, 143, b"".join(s.stderr).decode(errors="replace")[-3000:])
        self.assertLess(took, 15, "within the grace")
        self.assertIn("stopped by SIGTERM", b"".join(s.stderr).decode(errors="replace"))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(kernel_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            self.fail("the kernel outlived seer mcp notebook")
        text, status = cell_outputs(path, 1)
        self.assertIn("partial output", text, "the running cell's output so far is saved")
        self.assertNotIn("never", text)
        self.assertEqual(status, "error", "the running cell is marked")

    @unittest.skipIf(shutil.which("bwrap") is None, "bubblewrap is not installed (make setup installs it)")
    def test_sandboxed_sessions_it_started_end_the_experiments_live_on(self):
        """The kernels a sandbox-bound server starts live on the experiment's notebook server: only
        the MCP server's own shutdown ends them (SIGTERM's default left them spinning)."""
        out = os.path.join(self.tmp, "out")
        script = os.path.join(self.tmp, "exp.lua")
        with open(script, "w") as f:
            f.write(f"""
local env = seer.environment
local sb = env.Sandbox(env.SandboxConfig{{ execution_mode = "notebook" }}):start{{ name = "term" }}
local s = seer.execution.create_notebook_session(sb, nil, {{ name = "agent", output_dir = {json.dumps(out)} }})
io.write(seer.json.encode{{ config = s.mcp_config, session_id = s.session_id }}, "\\n")
io.stdout:flush()
io.read("*l")
local list = {{}}
for _, x in ipairs(seer.execution.list_sessions()) do list[#list + 1] = {{ id = x.session_id, state = x.state }} end
io.write(seer.json.encode(list), "\\n")
io.stdout:flush()
io.read("*l")
s:terminate() sb:terminate()
""")
        exp = subprocess.Popen([SEER, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env(SEER_SANDBOX_DIR=os.path.join(self.tmp, "sb")))
        self.addCleanup(lambda: exp.poll() is None and exp.kill())
        line = exp.stdout.readline()
        if not line:
            self.fail("the experiment did not start: " + exp.stderr.read()[-3000:])
        info = json.loads(line)
        cfg = info["config"]["notebook"]
        s = Raw(self, cfg["args"][2:], **cfg["env"])
        s.initialize()
        r = s.call("start_new_session", {"experiment_name": "owned"}, timeout=120)["result"]
        self.assertFalse(r["isError"], r)
        sid, name = r["structuredContent"]["session_id"], r["structuredContent"]["notebook_path"]
        rc, took = self.run_busy_then_term(s, sid)
        exp.stdin.write("\n")
        exp.stdin.flush()
        sessions = {x["id"]: x["state"] for x in json.loads(exp.stdout.readline())}
        self.assertNotIn(sid, sessions, f"the session the MCP server started was shut down: {sessions}")
        self.assertEqual(sessions.get(info["session_id"]), "idle", "the experiment's own session lives on")
        self.assertEqual(rc, 143, b"".join(s.stderr).decode(errors="replace")[-3000:])
        self.assertLess(took, 15, "within the grace")
        text, status = cell_outputs(os.path.join(out, name), 0)
        self.assertIn("partial output", text)
        self.assertEqual(status, "error")
        exp.communicate("\n", timeout=60)
        self.assertEqual(exp.returncode, 0)


if __name__ == "__main__":
    unittest.main()
