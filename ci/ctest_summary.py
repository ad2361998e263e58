#!/usr/bin/python3
"""What one ctest run skipped or failed, read from its stdout and LastTest.log.

Skipped (the default): one line per test, "NAME: REASON".

ctest counts a skipped test (gtest's GTEST_SKIP, or a script's exit code 77 under
SKIP_RETURN_CODE) among the passed ones and lists it under "The following tests did not run:"
as "(Skipped)"; a test whose program is missing is "Not Run" and counted as failed, so it is
not listed here. The reason is read from the test's output in <build>/Testing/Temporary/
LastTest.log: the message gtest prints after "Skipped", or a line starting with "SKIP", or the
last line of output.

Failed (--failed): per failed test its name and what gtest said went wrong (each "Failure"
with the lines after it), else the last lines of its output, at most 40 lines a test: CI shows
only the end of ci/test's output, so the reason has to be there, not only in the log file.

Usage: ctest_summary.py [--failed] CTEST_STDOUT_LOG LAST_TEST_LOG
"""

import re
import sys


def listed_names(ctest_stdout, heading, kind):
    """The tests ctest lists under `heading` marked "(kind)" (Skipped, Failed, Timeout...)."""
    names, listing = [], False
    for line in ctest_stdout.splitlines():
        if line.startswith(heading):
            listing = True
            continue
        if listing:
            m = re.match(r"\s+\d+\s+-\s+(.+?)\s+\((%s)\)\s*$" % kind, line)
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


def failure_excerpt(output, limit=40):
    lines = output.splitlines()
    picked = []
    for i, line in enumerate(lines):
        if re.search(r":\d+: Failure$", line):
            picked += lines[i : i + 8] + ["..."]
    if not picked:
        picked = lines[-15:]
    return picked[:limit]


def main():
    args = sys.argv[1:]
    failed = args and args[0] == "--failed"
    if failed:
        args = args[1:]
    with open(args[0], errors="replace") as f:
        stdout = f.read()
    try:
        with open(args[1], errors="replace") as f:
            outputs = outputs_by_test(f.read())
    except OSError:
        outputs = {}
    if failed:
        for name in listed_names(stdout, "The following tests FAILED:", r"[^)]+"):
            print(f"--- {name}")
            for line in failure_excerpt(outputs.get(name, "")):
                print(f"    {line[:300]}")
        return 0
    for name in listed_names(stdout, "The following tests did not run:", "Skipped"):
        print(f"{name}: {reason(outputs.get(name, ''))[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
