"""How busy the rest of the host was while a benchmark ran.

The CPU-ratio benchmarks (bench.stream_cpu, bench.unary_floor) compare two
servers' CPU per message on two shared cores. Another process running beside
them (a test suite, a build) evicts their caches and inflates both sides
unevenly: on this kind of machine the same code measured 2.3x on an idle host
and 2.9-3.3x beside a test suite. So each run also reports the CPU the rest of
the host used meanwhile: every core's busy time (``/proc/stat``) minus the
processes the benchmark itself runs (this client, the servers, the database),
per second of wall time, in cores. A figure taken with other load above
``BUSY_CORES`` is flagged as such.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

BUSY_CORES = 0.15
"""Other processes' load (cores) above which a run's ratio is not a fair figure."""


def busy_seconds() -> float:
    """CPU seconds every core spent busy since boot (not idle, not waiting for I/O)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class HostLoad:
    """Accumulates, over the blocks it is entered for, the CPU of processes other
    than ``pids`` and this one (``pids`` is read at each block: a benchmark adds its
    servers to it as they start)."""

    def __init__(
        self,
        pids: Sequence[int | None],
        *,
        busy: Callable[[], float] = busy_seconds,
        cpu: Callable[[int], float] = cpu_seconds,
    ) -> None:
        self._pids = pids
        self._busy = busy
        self._cpu = cpu
        self.other_seconds = 0.0
        self.wall_seconds = 0.0

    def _ours(self) -> float:
        mine = {os.getpid(), *(p for p in self._pids if p)}
        return sum(self._cpu(p) for p in mine)

    def __enter__(self) -> HostLoad:
        self._start = (self._busy(), self._ours(), time.perf_counter())
        return self

    def __exit__(self, *exc: object) -> None:
        busy, ours, wall = self._start
        other = (self._busy() - busy) - (self._ours() - ours)
        self.other_seconds += max(0.0, other)
        self.wall_seconds += time.perf_counter() - wall

    @property
    def cores(self) -> float:
        """The other processes' mean load, in cores."""
        return self.other_seconds / self.wall_seconds if self.wall_seconds else 0.0

    def describe(self) -> str:
        verdict = (
            f"above {BUSY_CORES:g}: the host was busy, rerun on an idle one for the figure"
            if self.cores > BUSY_CORES
            else "an idle host"
        )
        return f"other processes' load meanwhile {self.cores:.2f} cores ({verdict})"
