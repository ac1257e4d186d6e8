"""Setup, then attach: the reference's main workflow, end to end.

A setup script starts a detached sandbox (start{detach = true}) with a notebook session on
stories260K, prints the JSON the reference prints (session_id, jupyter_url, model_info) and exits.
Then a separate MCP client — the official Python SDK, driving `seer mcp notebook` — attaches
with the printed values and runs cells that use the preloaded model. The sandbox ends at
`seer sandbox terminate` and, in another case, at its timeout; either way nothing is left: no
process (keeper, bubblewrap, sandboxd, kernel, notebook server and its supervisor), no state
folder, no notebook-server runtime folder. The notebook stays on the host.

Runs under /usr/bin/python3; the SDK client runs under .venv-test (skipped without it)."""
import json
import os
import subprocess
import tempfile
import time
import unittest

from seertest import ROOT, SEER, env
from test_mcp_notebook import SDK_MISSING, run_sdk

MODEL = os.path.join(os.path.dirname(ROOT), "shared", "models", "stories260K")
if not os.path.isdir(MODEL):
    MODEL = os.path.join(ROOT, "tests", "fixtures", "models", "stories260K")

SETUP = r"""
local seer = require "seer"
local env, ws, exec = seer.environment, seer.workspace, seer.execution
local config = env.SandboxConfig{
  execution_mode = env.ExecutionMode.NOTEBOOK, timeout = %(timeout)d,
  models = { env.ModelConfig{ name = %(model)s } }, limits = { memory = "2G", processes = 256 },
}
local sandbox = env.Sandbox(config):start{ name = "setup", detach = true }
local session = exec.create_notebook_session(sandbox, ws.Workspace{}, { name = "probe", output_dir = %(out)s })
print(seer.json.encode{
  session_id = session.session_id, jupyter_url = session.jupyter_url, model_info = session.model_info_text,
  sandbox_id = sandbox.sandbox_id, notebook_path = session.notebook_path,
})
"""


def alive(pid):
    """A process that runs (a zombie whose parent has gone does not count: here pid 1 may not reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Detached(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="seer-detach-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.tmp]))
        self.state = os.path.join(self.tmp, "sb")
        os.mkdir(self.state)
        self.out = os.path.join(self.tmp, "out")
        self.env = {"SEER_SANDBOX_DIR": self.state}
        self.addCleanup(lambda: subprocess.run([SEER, "sandbox", "terminate", "--all"], env=env(**self.env),
                                               capture_output=True))

    def setup_script(self, timeout):
        script = os.path.join(self.tmp, "setup.lua")
        with open(script, "w") as f:
            f.write(SETUP % {"timeout": timeout, "model": json.dumps(MODEL), "out": json.dumps(self.out)})
        t0 = time.monotonic()
        r = subprocess.run([SEER, script], capture_output=True, text=True, timeout=60, env=env(**self.env))
        self.assertEqual(r.returncode, 0, r.stderr)
        info = json.loads(r.stdout.strip().splitlines()[-1])
        self.setup_s = time.monotonic() - t0
        for k in ("session_id", "jupyter_url", "model_info"):
            self.assertIn(k, info)
        self.assertIn("`model`", info["model_info"])
        with open(os.path.join(self.state, info["sandbox_id"], "sandbox.json")) as f:
            rec = json.load(f)
        self.assertTrue(rec["detached"])
        pids = [rec["keeper_pid"], rec["notebook_server"]["pid"]]
        # the notebook server itself is the supervisor's child
        kids = subprocess.run(["pgrep", "-P", str(rec["notebook_server"]["pid"])], capture_output=True, text=True)
        pids += [int(p) for p in kids.stdout.split()]
        runtime = rec["notebook_server"]["endpoint"][len("ipc://"):].rsplit("/", 1)[0]
        # the setup script has exited; everything it started runs on
        for p in pids:
            self.assertTrue(alive(p), f"pid {p} should run after the setup script exited")
        self.assertTrue(os.path.isdir(runtime))
        return info, pids, runtime

    def attach_and_work(self, info):
        job = {"server": {"command": SEER, "args": ["mcp", "notebook"], "env": {"SEER_LUA_DIR": os.path.join(ROOT, "lua")}},
               "steps": [
                   {"key": "attach", "tool": "attach_to_session",
                    "args": {"session_id": info["session_id"], "jupyter_url": info["jupyter_url"]}},
                   {"key": "layers", "tool": "execute_code",
                    "args": {"session_id": info["session_id"],
                             "code": "print(model.config.num_hidden_layers, #tokenizer:encode('Once upon a time'))"}},
                   {"key": "gen", "tool": "execute_code",
                    "args": {"session_id": info["session_id"],
                             "code": "local g = model:generate('Once upon a time', { max_new_tokens = 4, min_new_tokens = 4 })\n"
                                     "print(#g.ids)"}},
                   # attaching to a sandboxed session bound this plain server to that sandbox: a new
                   # session starts inside it with the model preloaded, not as a kernel on the host
                   # (it was a host kernel, model nil, running as the host user)
                   {"key": "new", "tool": "start_new_session", "args": {"experiment_name": "second"}},
                   {"key": "where", "tool": "execute_code", "session_from": "new",
                    "args": {"code": "print(model ~= nil and model.config.num_hidden_layers, "
                                     "io.open('/proc/self/status'):read('*a'):match('Uid:%s+(%d+)'))"}},
               ]}
        rep = run_sdk(self, job)
        self.assertEqual(rep["steps"]["attach"]["structured"]["status"], "attached", rep)
        self.assertFalse(rep["steps"]["layers"]["isError"], rep)
        self.assertEqual(rep["steps"]["layers"]["content"][0]["text"].split(), ["5", "5"])
        self.assertFalse(rep["steps"]["gen"]["isError"], rep)
        self.assertEqual(rep["steps"]["gen"]["content"][0]["text"].strip(), "4")
        self.assertIn("now bound to sandbox", rep["steps"]["attach"]["content"][0]["text"], rep)
        self.assertFalse(rep["steps"]["new"]["isError"], rep)
        self.assertFalse(rep["steps"]["where"]["isError"], rep)
        layers, uid = rep["steps"]["where"]["content"][0]["text"].split()
        self.assertEqual(layers, "5", "the new session has the sandbox's model preloaded")
        self.assertNotEqual(uid, str(os.getuid()), "the new session runs in the sandbox, not as the host user")

    def assert_gone(self, info, pids, runtime, within, cells=2):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if not any(alive(p) for p in pids) and not os.path.exists(runtime) \
                    and not os.path.exists(os.path.join(self.state, info["sandbox_id"])):
                break
            time.sleep(0.1)
        for p in pids:
            self.assertFalse(alive(p), f"pid {p} still runs")
        self.assertFalse(os.path.exists(runtime), "the notebook server's runtime folder is left")
        self.assertEqual(os.listdir(self.state), [], "the sandbox's state folder is left")
        # the record of the investigation stays
        with open(info["notebook_path"]) as f:
            nb = json.load(f)
        self.assertGreaterEqual(len([c for c in nb["cells"] if c["cell_type"] == "code"]), cells)

    @unittest.skipIf(SDK_MISSING, SDK_MISSING or "")
    def test_attach_then_terminate(self):
        info, pids, runtime = self.setup_script(timeout=600)
        self.attach_and_work(info)
        # a server that already runs a host kernel is not bound by attaching: it would then reach
        # both; the attach is refused, saying what to do
        job = {"server": {"command": SEER, "args": ["mcp", "notebook", "--output-dir", os.path.join(self.tmp, "host-out")],
                          "env": {"SEER_LUA_DIR": os.path.join(ROOT, "lua")}},
               "steps": [{"key": "host", "tool": "start_new_session", "args": {"experiment_name": "host"}},
                         {"key": "attach", "tool": "attach_to_session",
                          "args": {"session_id": info["session_id"], "jupyter_url": info["jupyter_url"]}}]}
        rep = run_sdk(self, job)
        self.assertFalse(rep["steps"]["host"]["isError"], rep)
        self.assertTrue(rep["steps"]["attach"]["isError"], rep)
        self.assertIn("not both", rep["steps"]["attach"]["content"][0]["text"], rep)
        r = subprocess.run([SEER, "sandbox", "terminate", info["sandbox_id"]], capture_output=True, text=True,
                           env=env(**self.env), timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_gone(info, pids, runtime, within=5)
        # attaching now says the server is gone, not a Lua internal
        r = subprocess.run([SEER, "-e", f"seer.execution.attach_notebook_session({json.dumps(info['jupyter_url'])}, "
                                        f"{json.dumps(info['session_id'])})"],
                           capture_output=True, text=True, env=env(**self.env), timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot reach the notebook server", r.stderr)

    @unittest.skipIf(SDK_MISSING, SDK_MISSING or "")
    def test_timeout_ends_it(self):
        info, pids, runtime = self.setup_script(timeout=6)
        self.attach_and_work(info)
        self.assert_gone(info, pids, runtime, within=15)

    def test_attach_from_another_script(self):
        """Sandbox.attach(id) in a second script: exec, a second session on the sandbox's own
        server, terminate; a third script finds nothing."""
        info, pids, runtime = self.setup_script(timeout=600)
        script = os.path.join(self.tmp, "use.lua")
        with open(script, "w") as f:
            f.write(f"""
local seer = require "seer"
local sb = seer.environment.Sandbox.attach({json.dumps(info['sandbox_id'])})
local out = sb:exec("echo hi from $(hostname)")
local s = seer.execution.create_notebook_session(sb, seer.workspace.Workspace{{}}, {{ name = "second", output_dir = {json.dumps(self.out)} }})
local r = s:exec("print(model.config.vocab_size)")
print(seer.json.encode{{ exec = out, cell = r.text, url = sb.jupyter_url ~= nil }})
sb:terminate()
""")
        r = subprocess.run([SEER, script], capture_output=True, text=True, timeout=60, env=env(**self.env))
        self.assertEqual(r.returncode, 0, r.stderr)
        rep = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(rep["exec"].strip(), "hi from sandbox")
        self.assertEqual(rep["cell"].strip(), "512")
        self.assertTrue(rep["url"])
        self.assert_gone(info, pids, runtime, within=5, cells=0)
        r = subprocess.run([SEER, "-e", f"seer.environment.Sandbox.attach({json.dumps(info['sandbox_id'])})"],
                           capture_output=True, text=True, env=env(**self.env), timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no running sandbox", r.stderr)


if __name__ == "__main__":
    unittest.main()
