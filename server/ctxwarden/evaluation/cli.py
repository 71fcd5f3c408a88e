"""``ctxwarden eval compaction``: a deterministic scorecard of summarisers and policies.

Runs the generated scenarios (``evaluation.scenarios``, seeded) through each
policy and summariser in process, prints a scorecard (anchor survival per
category, tokens around the checkpoints, summariser tokens, prefix changes)
and writes it as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ctxwarden.evaluation import policies, scenarios

if TYPE_CHECKING:
    from ctxwarden.core.session import ContextPolicy
    from ctxwarden.evaluation.runner import RunResult
    from ctxwarden.evaluation.summarizers import CountingSummarizer


def add_eval_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ev = sub.add_parser("eval", help="evaluate compaction offline")
    esub = ev.add_subparsers(dest="eval_command", required=True)
    p = esub.add_parser(
        "compaction",
        help="score summarisers and policies on generated sessions (anchor survival, tokens)",
    )
    p.add_argument(
        "--summarizer",
        action="append",
        default=[],
        metavar="SPEC",
        help="extractive (default), openai:MODEL, anthropic:MODEL, server (as serve's "
        "environment sets it) or command:CMD (reads the prompt on stdin, writes the summary on "
        "stdout); repeat to compare",
    )
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        choices=sorted(policies.POLICIES),
        help="policies to compare (repeat; default: all)",
    )
    p.add_argument(
        "--scenario",
        action="append",
        default=[],
        choices=sorted(scenarios.SCENARIOS),
        help="scenarios to run (repeat; default: all)",
    )
    p.add_argument("--seed", type=int, default=1, help="scenario seed (default %(default)s)")
    p.add_argument("--instructions", default="", help="extra focus appended to every prompt")
    p.add_argument(
        "--json", default="", metavar="PATH", help="write the scorecard as JSON ('-': stdout)"
    )
    p.add_argument(
        "--llm-base-url", default=None, help="base URL of openai:/anthropic: summarisers"
    )
    p.add_argument("--llm-api-key-env", default=None, help="variable holding their API key")
    p.add_argument("--llm-timeout", type=float, default=None, help="seconds per summariser call")


def run(args: argparse.Namespace) -> int:
    from ctxwarden.core.compaction.types import SummarizerError
    from ctxwarden.core.errors import CtxwardenError
    from ctxwarden.evaluation import scorecard
    from ctxwarden.evaluation.summarizers import CountingSummarizer, LlmOptions, build

    defaults = LlmOptions.from_env()
    llm = LlmOptions(
        args.llm_base_url if args.llm_base_url is not None else defaults.base_url,
        args.llm_api_key_env if args.llm_api_key_env is not None else defaults.api_key_env,
        args.llm_timeout if args.llm_timeout is not None else defaults.timeout,
        defaults.max_output_tokens,
    )
    specs = args.summarizer or ["extractive"]
    try:
        summarizers = [CountingSummarizer(build(spec, llm), spec) for spec in specs]
    except ValueError as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    names = args.scenario or list(scenarios.SCENARIOS)
    chosen = policies.policies_named(args.policy or list(policies.POLICIES))
    try:
        runs = asyncio.run(_run_all(names, args.seed, chosen, summarizers, args.instructions))
    except (CtxwardenError, SummarizerError) as exc:
        print(f"ctxwarden: eval compaction failed: {exc}", file=sys.stderr)
        return 1
    print(scorecard.format_scorecard(runs))
    if args.json:
        text = json.dumps(scorecard.scorecard_json(runs, seed=args.seed, scenarios=names), indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


async def _run_all(
    names: list[str],
    seed: int,
    chosen: Mapping[str, ContextPolicy],
    summarizers: list[CountingSummarizer],
    instructions: str,
) -> list[RunResult]:
    from ctxwarden.evaluation import runner

    out = []
    built = [scenarios.build(name, seed) for name in names]
    for policy_name, policy in chosen.items():
        for summarizer in summarizers:
            for scenario in built:
                out.append(
                    await runner.run(scenario, policy_name, policy, summarizer, instructions)
                )
    return out
