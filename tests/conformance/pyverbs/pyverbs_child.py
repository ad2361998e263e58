"""Runs tests of rdma-core's pyverbs suite and reports each on its own marker line.

    pyverbs_child.py prepare SUITE_DIR        copy Debian's suite there, gunzipped
    pyverbs_child.py list SUITE_DIR DEV       print the test ids of the vendor-neutral modules
    pyverbs_child.py run SUITE_DIR DEV ID...  run those tests, in that order

`run` prints, for every test, "@@start ID" before it and one result line after it:
"@@pass ID", "@@skip ID <reason>", "@@fail ID", "@@error ID" (then the traceback, each line
prefixed "@@| "). Anything else on stdout is the tests' own output. pyverbs_suite.py reads
these lines with a deadline per test; this process never decides about time.

Runs inside `xroce exec` with Debian's /usr/bin/python3 (which owns python3-pyverbs).
"""

import gzip
import os
import shutil
import sys
import unittest
from importlib.machinery import SourceFileLoader
from pathlib import Path

DEBIAN_SUITE = Path("/usr/share/doc/rdma-core/tests")
# Modules for one vendor's devices (their own dv APIs); everything else is vendor-neutral.
VENDOR_PREFIXES = ("test_mlx5", "test_efa")


def prepare(dest: Path) -> None:
    """Copies the suite Debian ships (python3-pyverbs) into dest, gunzipping what is gzipped."""
    if not DEBIAN_SUITE.is_dir():
        raise SystemExit(f"{DEBIAN_SUITE} is missing: install python3-pyverbs")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for src in DEBIAN_SUITE.iterdir():
        if src.name.endswith(".gz"):
            with gzip.open(src, "rb") as fin, open(dest / src.name[:-3], "wb") as fout:
                shutil.copyfileobj(fin, fout)
        elif src.is_file():
            shutil.copy(src, dest / src.name)


def load_suite(suite_dir: Path, dev: str):
    """Imports the suite as run_tests.py does, with --dev DEV on its command line."""
    sys.path.insert(0, str(suite_dir))
    sys.argv = [sys.argv[0], "--dev", dev]
    from args_parser import parser  # the suite's own module

    parser.parse_args()
    return SourceFileLoader("tests", str(suite_dir / "__init__.py")).load_module()


def vendor_neutral_ids(package) -> list:
    ids = []
    loader = unittest.TestLoader()
    for module in package.__test_modules__:
        if module.__name__.split(".")[-1].startswith(VENDOR_PREFIXES):
            continue
        for case in _flatten(loader.loadTestsFromModule(module)):
            ids.append(case.id())
    return ids


def _flatten(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


class MarkerResult(unittest.TestResult):
    """Prints one marker line per event, flushed at once (the parent reads them live)."""

    @staticmethod
    def _say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def startTest(self, test):
        super().startTest(test)
        self._say(f"@@start {test.id()}")

    def addSuccess(self, test):
        super().addSuccess(test)
        self._say(f"@@pass {test.id()}")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._say(f"@@skip {test.id()} {' '.join(str(reason).split())}")

    def _bad(self, kind, test, err):
        self._say(f"@@{kind} {test.id()}")
        for line in self._exc_info_to_string(err, test).splitlines():
            self._say(f"@@| {line}")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._bad("fail", test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._bad("error", test, err)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._say(f"@@fail {test.id()}")
        self._say("@@| unexpected success of a test marked expectedFailure")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._say(f"@@pass {test.id()}")


def run(ids: list) -> None:
    loader = unittest.TestLoader()
    result = MarkerResult()
    for test_id in ids:
        try:
            suite = loader.loadTestsFromName(test_id)
        except Exception as e:  # a name the suite no longer has
            MarkerResult._say(f"@@start {test_id}")
            MarkerResult._say(f"@@error {test_id}")
            MarkerResult._say(f"@@| cannot load: {e}")
            continue
        suite.run(result)


def main() -> int:
    command, suite_dir = sys.argv[1], Path(sys.argv[2])
    if command == "prepare":
        prepare(suite_dir)
        return 0
    dev, rest = sys.argv[3], sys.argv[4:]
    os.chdir(suite_dir)
    package = load_suite(suite_dir, dev)
    if command == "list":
        for test_id in vendor_neutral_ids(package):
            print(test_id)
        return 0
    run(rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
