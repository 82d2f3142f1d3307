#!/usr/bin/python3
"""Counts the test targets of a `bazel test` log for tools/test.sh.

  python3 tools/test_summary.py BAZEL_LOG TESTLOGS_DIR

Prints "PASSED FAILED SKIPPED" (target counts) on stdout, and the label of
each skipped target on stderr. A target is skipped when Bazel reports it
PASSED (cached or not) and every test case in its test.xml (each shard's,
for a sharded test) that ran was skipped: GoogleTest 1.12 writes
<testcase status="run" result="skipped"> with a <skipped> element for a
GTEST_SKIP; targets Bazel itself reports SKIPPED count too. A test.xml
without test cases of its own (an sh_test) or one
that cannot be read counts as passed.
"""

import glob
import os
import re
import sys
import xml.etree.ElementTree as ElementTree

PASSED = re.compile(r"^(//\S+)\s+(?:\(cached\) )?PASSED")
# Bazel's own SKIPPED: a target incompatible with the platform.
SKIPPED = re.compile(r"^(//\S+)\s+SKIPPED")
FAILED = re.compile(
    r"^(//\S+)\s+(?:\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)")


def xml_files(testlogs: str, label: str) -> list:
    """The test.xml files of `label` (one, or one per shard or run)."""
    package, _, name = label[2:].partition(":")
    base = os.path.join(testlogs, package, name)
    single = os.path.join(base, "test.xml")
    if os.path.isfile(single):
        return [single]
    return sorted(glob.glob(os.path.join(base, "*", "test.xml")))


def all_skipped(paths: list) -> bool:
    """Whether the files hold test cases that ran, all of them skipped."""
    ran = 0
    for path in paths:
        try:
            root = ElementTree.parse(path).getroot()
        except (OSError, ElementTree.ParseError):
            return False
        for case in root.iter("testcase"):
            if case.get("status") == "notrun":  # DISABLED_ tests
                continue
            skipped = (case.get("result") == "skipped"
                       or case.find("skipped") is not None)
            if not skipped:
                return False
            ran += 1
    return ran > 0


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    log, testlogs = sys.argv[1], sys.argv[2]
    passed, failed, skipped = set(), set(), set()
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            if m := PASSED.match(line):
                passed.add(m.group(1))
            elif m := FAILED.match(line):
                failed.add(m.group(1))
            elif m := SKIPPED.match(line):
                skipped.add(m.group(1))
    for label in sorted(passed):
        if all_skipped(xml_files(testlogs, label)):
            skipped.add(label)
            print(f"skipped (every test case): {label}", file=sys.stderr)
    print(len(passed - skipped), len(failed), len(skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
