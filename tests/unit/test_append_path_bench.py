"""bench.append_path runs its stages on real requests (a smoke test of the
benchmark, not a timing)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import append_path


def test_the_benchmark_times_every_stage_and_both_counts(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    raw = append_path._requests(8)
    stages = append_path.stages_per_message(raw, runs=3, run=4)
    assert set(stages) == set(append_path.STAGES)
    assert all(us > 0 for us in stages.values())
    assert append_path.counting(["some text to count"] * 2, cold=True) > 0
    assert append_path.main(["--runs", "2", "--run", "2", "--texts", "4", "--json", str(out)]) == 0
    assert {"total", "count_warm", "count_cold"} <= set(json.loads(out.read_text()))
