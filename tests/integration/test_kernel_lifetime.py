"""A seer kernel ends with the process that launched it (issue 19): JPY_PARENT_PID, which
jupyter_client sets for every kernel it launches (nbconvert, jupyter console, nbclient), is
watched whether or not it is the kernel's direct parent; SEER_KERNEL_DETACH=1 opts out.
The first test launches the kernel with a real jupyter_client KernelManager in a child
process and kills that process with SIGKILL."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import seertest

try:
    import jupyter_client  # noqa: F401  (the launcher below imports it in its own process)
    HAVE_JUPYTER = True
except ImportError as e:  # pragma: no cover - python3-jupyter-client is part of make setup
    HAVE_JUPYTER = False
    WHY = str(e)


def gone(pid):
    """True when pid has exited (no process, or a zombie waiting for its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_gone(pid, seconds):
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if gone(pid):
            return time.monotonic() - t0
        time.sleep(0.01)
    return None


def connection_file(d):
    path = os.path.join(d, "kernel.json")
    with open(path, "w") as f:
        json.dump({"transport": "tcp", "ip": "127.0.0.1", "shell_port": 0, "iopub_port": 0, "stdin_port": 0,
                   "control_port": 0, "hb_port": 0, "key": "k" * 32, "signature_scheme": "hmac-sha256"}, f)
    return path


def wait_bound(path, proc, seconds=20):
    """Until the kernel wrote its ports back (it is up and watching by then)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            with open(path) as f:
                if json.load(f)["shell_port"] > 0:
                    return True
        except (ValueError, OSError):
            pass
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


LAUNCHER = r"""
import os, sys, time
from jupyter_client.manager import KernelManager
os.environ["JUPYTER_PATH"] = sys.argv[1]
km = KernelManager(kernel_name="seer-life")
km.start_kernel()
kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=30)
print(km.provisioner.process.pid, flush=True)
time.sleep(600)
"""


class LifetimeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="seer-lifetime-")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def spawn(self, argv, **kw):
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    @unittest.skipUnless(HAVE_JUPYTER, "jupyter_client is not importable by /usr/bin/python3 (make setup installs it)")
    def test_killing_the_jupyter_client_ends_the_kernel_within_1s(self):
        r = seertest.run(["kernel", "install", "--prefix", self.tmp, "--name", "seer-life"])
        self.assertEqual(r.returncode, 0, r.stderr)
        client = self.spawn([sys.executable, "-c", LAUNCHER, os.path.join(self.tmp, "share", "jupyter")],
                            stdout=subprocess.PIPE, text=True)
        line = client.stdout.readline()
        self.assertTrue(line.strip().isdigit(), f"the launcher printed {line!r}")
        kernel = int(line)
        self.assertFalse(gone(kernel), "the kernel runs while its client does")
        time.sleep(0.3)
        self.assertFalse(gone(kernel), "the kernel keeps running while its client lives")
        client.send_signal(signal.SIGKILL)
        client.wait()
        took = wait_gone(kernel, 3)
        if took is None:
            os.kill(kernel, signal.SIGKILL)
        self.assertIsNotNone(took, "the kernel outlived the jupyter_client process that launched it")
        self.assertLess(took, 1.0, f"the kernel took {took:.2f} s to end")

    def test_a_launcher_that_is_not_the_parent_is_watched_and_detach_opts_out(self):
        # JPY_PARENT_PID names a process that is not the kernel's parent (a script in between)
        launcher = self.spawn(["sleep", "600"])
        detached_cf = connection_file(tempfile.mkdtemp(dir=self.tmp))
        cf = connection_file(tempfile.mkdtemp(dir=self.tmp))
        env = dict(os.environ, JPY_PARENT_PID=str(launcher.pid))
        kernel = self.spawn([seertest.SEER, "kernel", "-f", cf], env=env, stderr=subprocess.PIPE)
        detached = self.spawn([seertest.SEER, "kernel", "-f", detached_cf], env=dict(env, SEER_KERNEL_DETACH="1"),
                              stderr=subprocess.DEVNULL)
        self.assertTrue(wait_bound(cf, kernel), "the kernel did not start")
        self.assertTrue(wait_bound(detached_cf, detached), "the detached kernel did not start")
        time.sleep(0.2)
        self.assertIsNone(kernel.poll(), "the kernel runs while its launcher does")
        launcher.kill()
        launcher.wait()
        t0 = time.monotonic()
        try:
            kernel.wait(3)
        except subprocess.TimeoutExpired:
            self.fail("the kernel outlived the process named by JPY_PARENT_PID")
        self.assertLess(time.monotonic() - t0, 1.0)
        self.assertIn(f"JPY_PARENT_PID={launcher.pid}", kernel.stderr.read().decode(), "the kernel says why it left")
        time.sleep(0.5)
        self.assertIsNone(detached.poll(), "SEER_KERNEL_DETACH=1 keeps the kernel running")

    def test_a_launcher_already_gone_is_refused_at_start(self):
        p = self.spawn(["true"])
        p.wait()
        cf = connection_file(self.tmp)
        r = subprocess.run([seertest.SEER, "kernel", "-f", cf], env=dict(os.environ, JPY_PARENT_PID=str(p.pid)),
                           capture_output=True, text=True, timeout=10)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("already ended", r.stderr)


if __name__ == "__main__":
    unittest.main()
