"""bench.stream_cpu with ``--base``: this checkout, another one and the bare server in
one rotation (a smoke test of the benchmark, not a timing), on SQLite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import stream_cpu

ROOT = Path(__file__).resolve().parents[2]


def test_three_sides_stream_every_message_and_the_ratios_are_reported(tmp_path: Path) -> None:
    out = tmp_path / "stream.json"
    argv = ["--base", str(ROOT), "--backend", "sqlite", "--blocks", "2", "--block", "40"]
    assert stream_cpu.main([*argv, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["messages_each"] == 80
    assert set(result["server_cpu_ms_per_message"]) == {"ctxwarden", "bare", "base"}
    assert all(rate > 0 for rate in result["messages_per_s"].values())
    assert result["base"] == str(ROOT)


def test_a_base_that_is_not_a_checkout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        stream_cpu.main(["--base", str(tmp_path), "--backend", "sqlite"])
