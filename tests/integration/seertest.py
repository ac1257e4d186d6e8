"""Helpers shared by the integration tests: where the seer binary is, running it, and a
pseudo-terminal driver for the REPL (real pty, real readline, real signals)."""
import os
import pty
import re
import select
import signal
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEER = os.environ.get("SEER") or os.path.join(ROOT, "seer")


def env(**extra):
    e = dict(os.environ)
    e.setdefault("SEER_LUA_DIR", os.path.join(ROOT, "lua"))
    e["SEER_HISTORY"] = ""
    e.update({k: v for k, v in extra.items() if v is not None})
    for k, v in extra.items():
        if v is None:
            e.pop(k, None)
    return e


def run(args, input=None, cwd=None, timeout=30, **envextra):
    return subprocess.run([SEER] + list(args), input=input, capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=env(**envextra))


class Pty:
    """seer running on a pseudo-terminal. expect() waits for a regex in what it printed since
    the last match and fails with the whole screen text when it does not come in time."""

    def __init__(self, args=(), cwd=None, **envextra):
        envextra.setdefault("TERM", "dumb")
        e = env(**envextra)
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                if cwd:
                    os.chdir(cwd)
                os.execve(SEER, [SEER] + list(args), e)
            finally:
                os._exit(127)
        self.buf = b""
        self.pos = 0
        self.status = None

    def _read(self, timeout):
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            data = b""
        if not data:
            raise EOFError
        self.buf += data
        return True

    def text(self):
        return self.buf.decode("utf-8", "replace")

    def expect(self, pattern, timeout=10):
        rx = re.compile(pattern.encode() if isinstance(pattern, str) else pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.buf, self.pos)
            if m:
                self.pos = m.end()
                return m
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {pattern!r}; output so far:\n{self.text()}")
            try:
                self._read(min(left, 0.2))
            except EOFError:
                raise AssertionError(f"seer exited while waiting for {pattern!r}; output:\n{self.text()}")

    def send(self, s):
        os.write(self.fd, s.encode() if isinstance(s, str) else s)

    def line(self, s):
        self.send(s + "\r")

    def wait(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = st
                return os.waitstatus_to_exitcode(st)
            try:
                self._read(0.05)
            except EOFError:
                time.sleep(0.02)
        raise AssertionError(f"seer did not exit; output:\n{self.text()}")

    def close(self):
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


def tmpdir(testcase):
    d = tempfile.TemporaryDirectory(prefix="seer-test-")
    testcase.addCleanup(d.cleanup)
    return d.name
