"""Fail unless the MySQL variants of the tests ran and none was skipped; with
CTXWARDEN_TEST_GALERA set, the same for the Galera cluster suite (tests/cluster)."""

import os
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()


def count(selected):
    ran = skipped = 0
    names = []
    for case in root.iter("testcase"):
        if not selected(case):
            continue
        if case.find("skipped") is not None:
            skipped += 1
            names.append(case.get("name"))
        else:
            ran += 1
    return ran, skipped, names


suites = [("MySQL", lambda case: "[mysql" in case.get("name", ""))]
if os.environ.get("CTXWARDEN_TEST_GALERA"):
    suites.append(
        ("Galera cluster", lambda case: case.get("classname", "").startswith("tests.cluster."))
    )
failed = False
for label, selected in suites:
    ran, skipped, names = count(selected)
    print(f"{label} tests: {ran} ran, {skipped} skipped")
    if skipped or ran == 0:
        print(f"FAIL: {label} tests must run in CI:", ", ".join(names[:10]), file=sys.stderr)
        failed = True
if failed:
    sys.exit(1)
