"""bench.unary_ab runs two servers side by side on one database (a smoke test of the
benchmark, not a timing): this checkout against itself, on SQLite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import unary_ab

ROOT = Path(__file__).resolve().parents[2]


def test_both_sides_answer_every_call_and_the_ratios_are_reported(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    argv = ["--base", str(ROOT), "--backend", "sqlite", "--blocks", "2", "--block", "3"]
    assert unary_ab.main([*argv, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["calls_each"] == 6
    assert result["median_ms"]["A"] > 0 and result["median_ms"]["B"] > 0
    assert set(result["server_cpu_ms_per_call"]) == {"A", "B"}  # (clock ticks: may be 0)
    assert result["latency_b_over_a"] > 0


def test_a_base_that_is_not_a_checkout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        unary_ab.main(["--base", str(tmp_path), "--backend", "sqlite"])
