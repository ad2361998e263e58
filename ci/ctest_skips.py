#!/usr/bin/python3
"""Lists the tests one ctest run skipped, one per line: "NAME: REASON".

ctest counts a skipped test (gtest's GTEST_SKIP, or a script's exit code 77 under
SKIP_RETURN_CODE) among the passed ones and lists it under "The following tests did not run:"
as "(Skipped)"; a test whose program is missing is "Not Run" and counted as failed, so it is
not listed here. The reason is read from the test's output in <build>/Testing/Temporary/
LastTest.log: the message gtest prints after "Skipped", or a line starting with "SKIP", or the
last line of output.

Usage: ctest_skips.py CTEST_STDOUT_LOG LAST_TEST_LOG
"""

import re
import sys


def skipped_names(ctest_stdout):
    names, listing = [], False
    for line in ctest_stdout.splitlines():
        if line.startswith("The following tests did not run:"):
            listing = True
            continue
        if listing:
            m = re.match(r"\s+\d+\s+-\s+(.+?)\s+\(Skipped\)\s*$", line)
            if m:
                names.append(m.group(1))
            elif line.strip() == "" or not line.startswith((" ", "\t")):
                listing = False
    return names


def outputs_by_test(last_test_log):
    """Test name -> its output, from ctest's LastTest.log."""
    out = {}
    for block in re.split(r"\n(?=\d+/\d+ Testing: )", last_test_log):
        m = re.search(r"^\d+/\d+ Testing: (.+)$", block, re.M)
        o = re.search(r"^Output:\n-{50,}\n(.*?)<end of output>", block, re.M | re.S)
        if m and o:
            out[m.group(1).strip()] = o.group(1)
    return out


def reason(output):
    lines = [l.strip() for l in output.splitlines() if l.strip()]
    for i, line in enumerate(lines):
        if line.endswith(": Skipped") and i + 1 < len(lines):
            return lines[i + 1]
    for line in lines:
        if line.upper().startswith("SKIP"):
            return line
    return lines[-1] if lines else "(no output)"


def main():
    with open(sys.argv[1], errors="replace") as f:
        names = skipped_names(f.read())
    try:
        with open(sys.argv[2], errors="replace") as f:
            outputs = outputs_by_test(f.read())
    except OSError:
        outputs = {}
    for name in names:
        print(f"{name}: {reason(outputs.get(name, ''))[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
