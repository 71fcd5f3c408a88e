"""The README's apt-get command installs exactly what scripts/system_packages.sh checks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_lists_every_system_package_the_suite_checks() -> None:
    listed = subprocess.run(
        [str(ROOT / "scripts" / "system_packages.sh"), "--all"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    commands = re.findall(r"^apt-get install -y (.+)$", (ROOT / "README.md").read_text(), re.M)
    assert len(commands) == 1, commands
    assert commands[0].split() == listed
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/system_packages.sh" in ci
    assert "scripts/system_packages.sh --check" in (ROOT / "scripts" / "test.sh").read_text()
