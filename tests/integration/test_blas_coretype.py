"""Prefix sharing on the GEMM path under each OpenBLAS kernel family this CPU can run. A prompt
that takes a shared beginning computes its rest with sgemm placed at the row period OpenBLAS's
tiles repeat with (kernels_blas.c, find_period); where no period holds (SkylakeX's AVX-512
kernels, whose bits depend on the call's size) nothing may be taken. On the Zen 4 VM the
period search found 24 for SkylakeX from too few shapes and shared beginnings gave other logits
than the whole prompt (2026-12-01); seer also picked SkylakeX there, where it picks Haswell now
(as its own kernels pick their AVX2 family on AMD CPUs). make test's own run covers the default;
this runs the bit-for-bit checks under each family explicitly (OPENBLAS_CORETYPE is the user's
override, which seer keeps). On Intel CPUs with AVX-512 seer's own GEMM (kernels_gemm.c) takes the
linear layers in OpenBLAS's place; these runs set SEER_OWN_GEMM=0 so that OpenBLAS's families are
what they check, and the last test checks the own GEMM's period (1: a row's bits do not depend on
the call)."""
import os
import subprocess
import unittest

from seertest import ROOT, env, run


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


FAMILIES = ["Haswell"] if "avx2" in cpu_flags() else []
if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= cpu_flags():
    FAMILIES.append("SkylakeX")
UNIT = os.path.join(ROOT, os.environ.get("SEER_BUILD", "build"), "tests", "test_kernels")


@unittest.skipUnless(FAMILIES, "no AVX2: OpenBLAS runs neither the Haswell nor the SkylakeX kernels here")
class BlasFamilyTest(unittest.TestCase):
    def test_shared_beginnings_give_the_whole_prompts_bits(self):
        for family in FAMILIES:
            with self.subTest(family=family):
                r = run([os.path.join(ROOT, "tests", "lua", "run.lua"), os.path.join(ROOT, "tests", "lua", "test_prefix_sharing.lua")],
                        timeout=300, OPENBLAS_CORETYPE=family, SEER_OWN_GEMM="0")
                self.assertEqual(r.returncode, 0, family + ":\n" + r.stdout[-3000:] + r.stderr[-3000:])
                self.assertRegex(r.stdout, r"lua: [1-9]\d* passed, 0 failed")

    def test_period_is_none_or_holds_in_the_kernels(self):
        # the C check of each row block after a beginning against the whole call's rows
        if not os.access(UNIT, os.X_OK):
            self.skipTest(UNIT + " is not built (make test builds it)")
        for family in FAMILIES:
            with self.subTest(family=family):
                r = subprocess.run([UNIT, "--filter", "kernels/linear_multi_blas*"], capture_output=True, text=True, timeout=300,
                                   env=env(OPENBLAS_CORETYPE=family, SEER_OWN_GEMM="0"))
                self.assertEqual(r.returncode, 0, family + ":\n" + r.stdout[-3000:] + r.stderr[-3000:])
                self.assertIn("Passing: 1 | Failing: 0", r.stdout + r.stderr)

    def test_skylakex_has_no_period(self):
        if "SkylakeX" not in FAMILIES:
            self.skipTest("no AVX-512 here")
        r = run(["-e", 'io.write(require("seer.core.model").blas_row_period())'], timeout=60, OPENBLAS_CORETYPE="SkylakeX",
                SEER_OWN_GEMM="0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "0", "SkylakeX's sgemm gives rows size-dependent bits; a period found there is wrong")

    def test_own_gemm_has_period_one_on_intel_avx512(self):
        if "SkylakeX" not in FAMILIES or "GenuineIntel" not in open("/proc/cpuinfo").read():
            self.skipTest("seer's own GEMM runs on Intel CPUs with AVX-512 only")
        r = run(["-e", 'io.write(require("seer.core.model").blas_row_period())'], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "1", "the own GEMM computes every row alike in any call: its period is 1")


if __name__ == "__main__":
    unittest.main()
