"""The build's second compiler: make fuzz compiles every engine source with clang (libFuzzer and
its sanitizers), the rest of the build uses gcc, so a construct only gcc accepts breaks make fuzz
and nothing else. make fuzz-syntax runs clang over the same sources and flags, syntax only."""
import shutil
import subprocess
import unittest

from seertest import ROOT


class FuzzBuildTest(unittest.TestCase):
    def test_fuzz_sources_compile_with_clang(self):
        self.assertIsNotNone(shutil.which("clang"),
                             "clang is missing: make setup installs it (tools/debian-packages.txt)")
        r = subprocess.run(["make", "-s", "fuzz-syntax"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, "make fuzz-syntax failed:\n" + r.stdout[-4000:] + r.stderr[-4000:])


if __name__ == "__main__":
    unittest.main()
