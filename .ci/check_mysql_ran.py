"""Fail unless the MySQL variants of the tests ran and none was skipped."""

import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
ran = skipped = 0
skipped_names = []
for case in root.iter("testcase"):
    if "[mysql" not in case.get("name", ""):
        continue
    if case.find("skipped") is not None:
        skipped += 1
        skipped_names.append(case.get("name"))
    else:
        ran += 1
print(f"MySQL tests: {ran} ran, {skipped} skipped")
if skipped or ran == 0:
    print("FAIL: MySQL tests must run in CI:", ", ".join(skipped_names[:10]), file=sys.stderr)
    sys.exit(1)
