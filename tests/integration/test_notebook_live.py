"""The live view end to end: a seer experiment opens a local notebook session (notebook server +
real seer kernel), headless Chromium opens its jupyter_url, and cells executed through
session:exec appear on the page while they run (within one second), with images and errors.
The notebook on disk is checked with nbformat's validator at the end."""
import json
import os
import subprocess
import tempfile
import threading
import time
import unittest
import queue

import cdp
from seertest import SEER, env

DRIVER = r"""
local exec = require "seer.execution"
local s = exec.create_local_notebook_session(nil, { name = "live", output_dir = arg[1] })
io.write(seer.json.encode{ url = s.jupyter_url, path = s.notebook_path }, "\n")
io.stdout:flush()
for line in io.lines() do
  local req = seer.json.decode(line)
  if req.quit then break end
  local ok, r = pcall(s.exec, s, req.code)
  io.write(seer.json.encode{ ok = ok, text = ok and r.text or tostring(r) }, "\n")
  io.stdout:flush()
end
s:terminate()
"""


class LiveNotebookTest(unittest.TestCase):
    def setUp(self):
        self.browser = cdp.Chromium()  # skips when chromium is missing
        self.addCleanup(self.browser.close)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        script = os.path.join(self.tmp.name, "driver.lua")
        with open(script, "w") as f:
            f.write(DRIVER)
        self.proc = subprocess.Popen([SEER, script, self.tmp.name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env())
        self.addCleanup(self.stop)
        self.lines = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(l) for l in self.proc.stdout], daemon=True).start()
        self.info = json.loads(self.next_line(60))

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=15)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()
        self.proc.stdout.close()
        self.proc.stdin.close()

    def next_line(self, timeout=30):
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            self.fail(f"the driver printed nothing within {timeout} s; stderr: {self.proc.stderr.read() if self.proc.poll() is not None else '(running)'}")

    def run_cell(self, code):
        self.proc.stdin.write(json.dumps({"code": code}) + "\n")
        self.proc.stdin.flush()

    def test_cells_appear_live_with_images_and_errors(self):
        b = self.browser
        url = self.info["url"]
        self.assertRegex(url, r"^http://127\.0\.0\.1:\d+/notebooks/\w+\?token=\w+$")
        b.open(url)
        b.wait_for("document.getElementById('conn').textContent === 'live'")

        # A cell that prints, then works for 2 s: it must be on the page, running, within 1 s
        # of being sent, long before it finishes.
        marker = "live_marker_%d" % os.getpid()
        code = f"print('{marker}')\nlocal t = os.clock() while os.clock() - t < 2 do end\nprint('finished')"
        t0 = time.monotonic()
        self.run_cell(code)
        b.wait_for("Array.from(document.querySelectorAll('.cell.code')).some(c => c.textContent.indexOf(%s) >= 0)"
                   % json.dumps(marker), timeout=5, interval=0.01)
        seen = time.monotonic() - t0
        print(f"    cell visible {seen * 1000:.0f} ms after session:exec was sent")
        self.assertLess(seen, 1.0)
        b.wait_for("Array.from(document.querySelectorAll('.stream.stdout')).some(s => s.textContent.indexOf(%s) >= 0)"
                   % json.dumps(marker), timeout=5, interval=0.01)
        self.assertTrue(self.lines.empty(), "the cell was still running when its output showed")
        self.assertEqual(json.loads(self.next_line())["ok"], True)
        b.wait_for("Array.from(document.querySelectorAll('.cell.code')).pop().dataset.status === 'complete'")

        # An image made by seer.plot, shown through display.image.
        self.run_cell("display.image(require('seer.plot').line{ x = {0, 4, 8}, y = {0.1, 0.4, 0.9}, title = 'probe accuracy by layer' })")
        self.assertEqual(json.loads(self.next_line())["ok"], True)
        size = b.wait_for("(function(){var i = Array.from(document.querySelectorAll('.cell.code img')).pop();"
                          "return i && i.complete && i.naturalWidth > 0 && [i.naturalWidth, i.naturalHeight];})()")
        self.assertEqual(size, [640, 400])

        # An error, with its name and traceback.
        self.run_cell("local function f() error('deliberate failure') end\nf()")
        r = json.loads(self.next_line())
        self.assertFalse(r["ok"])
        self.assertIn("deliberate failure", r["text"])
        err = b.wait_for("(function(){var e = Array.from(document.querySelectorAll('.cell.code .error')).pop();"
                         "return e && e.textContent;})()")
        self.assertIn("deliberate failure", err)
        self.assertIn("LuaError", err)

        # The notebook on disk holds the same cells and is valid nbformat.
        import nbformat
        nb = nbformat.read(self.info["path"], 4)
        nbformat.validate(nb)
        self.assertEqual([c.metadata.get("execution_status") for c in nb.cells], ["complete", "complete", "error"])
        self.assertEqual(nb.cells[1].outputs[0]["output_type"], "display_data")
        self.assertIn("image/png", nb.cells[1].outputs[0]["data"])


if __name__ == "__main__":
    unittest.main()
