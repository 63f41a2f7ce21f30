"""softib's driver for rdma-core's pyverbs test suite (kept outside this repository, run from
where it is): loads the suite as its own run_tests.py does, runs every test against DEVICE and
writes one JSON object per test to OUT (a file: the tests print on stdout themselves), so
tests/pyverbs_suite.rs can check outcomes by test name instead of parsing unittest's text.

usage: python3 driver.py SUITE_DIR DEVICE OUT
SUITE_DIR holds the suite's tests/ package (rdma-core's tests/ at a tag).
"""

import json
import os
import sys
import unittest


def main():
    suite_dir, device, out = sys.argv[1], sys.argv[2], sys.argv[3]
    tests_dir = os.path.join(suite_dir, "tests")
    # The suite imports `args_parser` as a top-level module and itself as the package `tests`.
    sys.path[:0] = [tests_dir, suite_dir]
    from args_parser import parser  # noqa: E402 (the suite's own option parser)

    sys.argv = ["pyverbs-suite", "--dev", device]
    parser.parse_args()
    import tests  # noqa: E402

    results = []

    class Recorder(unittest.TestResult):
        def _add(self, test, outcome, detail=""):
            results.append({"id": test.id(), "outcome": outcome, "detail": detail})

        def addSuccess(self, test):
            self._add(test, "ok")

        def addFailure(self, test, err):
            self._add(test, "fail", self._exc_info_to_string(err, test))

        def addError(self, test, err):
            self._add(test, "error", self._exc_info_to_string(err, test))

        def addSkip(self, test, reason):
            self._add(test, "skip", str(reason))

        def addExpectedFailure(self, test, err):
            self._add(test, "expected_failure")

        def addUnexpectedSuccess(self, test):
            self._add(test, "unexpected_success")

    suite = unittest.TestLoader().loadTestsFromModule(tests)
    suite.run(Recorder())
    with open(out, "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
