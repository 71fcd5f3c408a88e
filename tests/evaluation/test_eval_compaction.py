"""``ctxwarden eval compaction`` on the generated suite: with the extractive
summariser, a fake LLM command and a fake OpenAI endpoint, against fixed
expectations (the suite is seeded, so the scorecard is exact)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxwarden import cli
from ctxwarden.evaluation import scenarios
from ctxwarden.evaluation.policies import POLICIES
from tests.summarizers.fake_providers import FakeProvider

FAKE_LLM = f"command:{sys.executable} {Path(__file__).with_name('fake_llm.py')}"

# (policy, summariser) -> checkpoints, clearings, and survival per category
# (path, url, identifier, quantity, constraint, open task, tool call), in %.
EXPECTED: dict[tuple[str, str], tuple[int, int, tuple[int, ...]]] = {
    ("baseline", "extractive"): (18, 0, (93, 27, 58, 33, 68, 78, 96)),
    ("baseline", "command"): (17, 0, (90, 4, 42, 0, 28, 45, 96)),
    ("baseline", "openai"): (17, 0, (90, 4, 3, 0, 27, 44, 96)),
    ("preserve", "extractive"): (18, 0, (99, 28, 59, 34, 100, 100, 96)),
    ("preserve", "command"): (17, 0, (99, 4, 43, 0, 100, 100, 96)),
    ("preserve", "openai"): (17, 0, (99, 4, 3, 0, 100, 100, 96)),
}


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    out = tmp_path / "score.json"
    assert cli.main(["eval", "compaction", "--json", str(out), *args]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("survival of anchors by category")
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def _row(total: dict[str, Any]) -> tuple[int, int, tuple[int, ...]]:
    survival = tuple(round(100 * (v if v is not None else 1)) for v in total["survival"].values())
    return total["compactions"], total["clearings"], survival


def test_scenarios_are_seeded_and_plant_every_category() -> None:
    for name in scenarios.SCENARIOS:
        a, b = scenarios.build(name, 1), scenarios.build(name, 1)
        assert a == b and a != scenarios.build(name, 2)
    from ctxwarden.core.anchors import CATEGORIES, span_anchors

    found = {
        a.category
        for name in scenarios.SCENARIOS
        for a in span_anchors(m for step in scenarios.build(name, 1).steps for m in step)
    }
    assert found == set(CATEGORIES)


def test_scorecard_of_the_extractive_summariser_and_fake_llms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeProvider("openai") as fake:
        fake.reply_text = "## Goal\n- keep the service green (fake LLM)"
        data = _run(
            tmp_path,
            capsys,
            "--policy",
            "baseline",
            "--policy",
            "preserve",
            "--summarizer",
            "extractive",
            "--summarizer",
            FAKE_LLM,
            "--summarizer",
            "openai:fake-model",
            "--llm-base-url",
            fake.base_url,
        )
        assert fake.requests, "the openai: summariser called the fake endpoint"
    assert data["seed"] == 1 and data["scenarios"] == list(scenarios.SCENARIOS)
    totals = {(t["policy"], t["summarizer"].split(":")[0]): t for t in data["totals"]}
    got = {key: _row(t) for key, t in totals.items()}
    assert got == EXPECTED, json.dumps({f"{k}": v for k, v in got.items()})
    ext, fake_cmd = totals["baseline", "extractive"], totals["baseline", "command"]
    assert ext["summarizer_tokens_in"] == 0 < ext["summarizer_tokens_out"]
    assert fake_cmd["summarizer_tokens_in"] > 0 and fake_cmd["summarizer_calls"] > 0
    for key, t in totals.items():
        assert t["prefix_invalidations"] == t["compactions"] + t["clearings"] > 0
        assert t["tokens_after"] < t["tokens_before"] and t["tokens_recached"] == t["tokens_after"]
        if key[0] == "preserve":  # constraints and open tasks are put back
            assert t["survival"]["constraint"] == t["survival"]["open_task"] == 1.0
    assert len(data["runs"]) == 2 * 3 * len(scenarios.SCENARIOS)


def test_policies_and_bad_specs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert set(POLICIES) == {"baseline", "preserve", "layered", "layered+preserve"}
    data = _run(tmp_path, capsys, "--policy", "layered", "--scenario", "tool-heavy")
    (total,) = data["totals"]
    assert total["clearings"] > 0
    assert cli.main(["eval", "compaction", "--summarizer", "nope"]) == 2
    failing = f"command:{sys.executable} -c 'import sys; sys.exit(3)'"
    assert cli.main(["eval", "compaction", "--summarizer", failing, "--scenario", "long"]) == 1
    assert "exit status 3" in capsys.readouterr().err
