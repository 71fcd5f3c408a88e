"""Peak RSS of ``ctxwarden import`` and ``ctxwarden export`` against session size.

    .venv/bin/python -m bench.transfer_memory [--megabytes 1024] [--backends sqlite mysql]

Writes a native session file of about ``--megabytes`` (2.4 KB text messages) and
one of about 1 MB, imports each into a fresh database and exports it again, each
command a process of its own whose peak RSS is read with ``wait4``. Streaming
means the two sizes peak at about the same RSS; the exported file must equal the
imported one (but for the header's export time and the session's byte counter).
The test suite runs the same check at 64 MB (``tests/transfer/test_streaming.py``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from tests.transfer.test_streaming import TEXT_BYTES, _run, _session_file

from bench.common import backend_database, log

MIB = 1 << 20


def _same_file(a: Path, b: Path) -> bool:
    with a.open(encoding="utf-8") as x, b.open(encoding="utf-8") as y:
        next(x), next(y)  # the headers differ in their export time
        for n, (p, q) in enumerate(zip(x, y, strict=True)):
            if n == 0:  # the session record: compared as JSON (key order may differ)
                if json.loads(p) != json.loads(q):
                    return False
            elif p != q:
                return False
    return True


def measure(backend: str, megabytes: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="ctxw-transfer-") as tmp:
        work = Path(tmp)
        with backend_database(backend, work) as (url, _):
            for name, size_mb in (("small", 1), ("large", megabytes)):
                messages = max(1, size_mb * MIB // (TEXT_BYTES + 300))
                sid = f"transfer-{name}"
                source = work / f"{name}.jsonl"
                size = _session_file(source, sid, messages)
                log(f"{backend}: {name}: {size / MIB:,.0f} MB, {messages:,} messages: import")
                t_import, rss_import = _run("import", str(source), "--database-url", url)
                out = work / f"{name}-out.jsonl"
                log(f"{backend}: {name}: export")
                t_export, rss_export = _run("export", sid, "--database-url", url, "-o", str(out))
                same = _same_file(source, out)
                source.unlink()
                out.unlink()
                row: dict[str, object] = {
                    "backend": backend,
                    "file_mb": round(size / MIB, 1),
                    "messages": messages,
                    "import_s": round(t_import, 1),
                    "import_peak_rss_mb": round(rss_import / MIB),
                    "export_s": round(t_export, 1),
                    "export_peak_rss_mb": round(rss_export / MIB),
                    "round_trip_equal": same,
                }
                log(f"{backend}: {row}")
                rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backends", nargs="+", default=["sqlite"])
    parser.add_argument("--megabytes", type=int, default=1024)
    args = parser.parse_args(argv)
    rows = [row for b in args.backends for row in measure(b, args.megabytes)]
    print(json.dumps(rows, indent=2))
    return 0 if all(r["round_trip_equal"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
