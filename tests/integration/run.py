"""Runs the integration tests (tests/integration/test_*.py) with unittest and ends with the
line "integration: N passed, N failed". Needs only /usr/bin/python3's standard library.
Usage: run.py [-k PATTERN]  (PATTERN filters test ids, as unittest's -k does)."""
import argparse
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class Result(unittest.TextTestResult):
    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def _line(self, word, test):
        ms = (time.monotonic() - self._t0) * 1000
        self.stream.write(f"{word:<4} {test.id():<70} {ms:8.1f} ms\n")
        self.stream.flush()

    def addSuccess(self, test):
        unittest.TestResult.addSuccess(self, test)
        self._line("ok", test)

    def addFailure(self, test, err):
        unittest.TestResult.addFailure(self, test, err)
        self._line("FAIL", test)

    def addError(self, test, err):
        unittest.TestResult.addError(self, test, err)
        self._line("FAIL", test)

    def addSkip(self, test, reason):
        unittest.TestResult.addSkip(self, test, reason)
        self.stream.write(f"skip {test.id()}: {reason}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", dest="pattern", action="append")
    args = ap.parse_args()
    loader = unittest.TestLoader()
    if args.pattern:
        loader.testNamePatterns = [f"*{p}*" for p in args.pattern]
    suite = loader.discover(HERE, pattern="test_*.py", top_level_dir=HERE)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=0, resultclass=Result)
    res = runner.run(suite)
    failed = len(res.failures) + len(res.errors) + len(res.unexpectedSuccesses)
    passed = res.testsRun - failed - len(res.skipped)
    print(f"integration: {passed} passed, {failed} failed" + (f", {len(res.skipped)} skipped" if res.skipped else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
