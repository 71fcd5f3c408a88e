"""Fail unless the MySQL and the PostgreSQL variants of the tests ran and none was skipped;
with CTXWARDEN_TEST_GALERA set, the same for the Galera cluster suite (tests/cluster).

A test's backend is one of the parts of its parameter ID (``test_x[mysql]``,
``test_y[postgres-some_case]``)."""

import os
import sys
import xml.etree.ElementTree as ET

BACKENDS = {"MySQL": "mysql", "PostgreSQL": "postgres"}


def id_parts(name: str) -> set[str]:
    if "[" not in name:
        return set()
    return set(name[name.index("[") + 1 : name.rindex("]")].split("-"))


root = ET.parse(sys.argv[1]).getroot()
cases = [
    (case.get("name", ""), case.get("classname", ""), case.find("skipped") is not None)
    for case in root.iter("testcase")
]
suites = {
    label: (lambda name, cls, part=part: part in id_parts(name)) for label, part in BACKENDS.items()
}
if os.environ.get("CTXWARDEN_TEST_GALERA"):
    suites["Galera cluster"] = lambda name, cls: cls.startswith("tests.cluster.")
failed = False
for label, selected in suites.items():
    mine = [(name, skipped) for name, cls, skipped in cases if selected(name, cls)]
    skipped_names = [name for name, skipped in mine if skipped]
    ran = len(mine) - len(skipped_names)
    print(f"{label} tests: {ran} ran, {len(skipped_names)} skipped")
    if skipped_names or ran == 0:
        print(f"FAIL: {label} tests must run in CI:", ", ".join(skipped_names[:10]), file=sys.stderr)
        failed = True
sys.exit(1 if failed else 0)
