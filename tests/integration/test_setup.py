"""make setup's script: idempotent when everything is installed, and as a non-root user it
prints the exact apt-get line for what is missing instead of trying to install."""
import os
import shutil
import subprocess
import unittest

from seertest import ROOT, tmpdir

SETUP = os.path.join(ROOT, "tools", "setup.sh")


class SetupTest(unittest.TestCase):
    def run_setup(self, listing, as_nobody=False):
        d = tmpdir(self)
        path = os.path.join(d, "packages.txt")
        with open(path, "w") as f:
            f.write(listing)
        # The unprivileged user may not be able to enter the checkout (a clone under a 0700
        # directory), so it runs a copy of the script from the world-readable temp dir.
        script = os.path.join(d, "setup.sh")
        shutil.copy(SETUP, script)
        os.chmod(d, 0o755)
        os.chmod(path, 0o644)
        os.chmod(script, 0o755)
        cmd = ["bash", script]
        if as_nobody:
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + cmd
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                              cwd="/", env=dict(os.environ, SEER_PACKAGES_FILE=path))

    def test_nothing_to_do_when_all_present(self):
        r = self.run_setup("# a comment\nbash   # why\n\ncoreutils\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "setup: all 2 packages present\n")

    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv"), "needs root to switch to an unprivileged user")
    def test_non_root_prints_the_sudo_line(self):
        r = self.run_setup("bash\nseer-test-no-such-package  # missing on purpose\n", as_nobody=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("missing packages: seer-test-no-such-package", r.stderr)
        self.assertIn("sudo apt-get update && sudo apt-get install -y --no-install-recommends seer-test-no-such-package",
                      r.stderr)


if __name__ == "__main__":
    unittest.main()
