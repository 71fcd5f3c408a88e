"""bench.host_load: the CPU the rest of the host used while a benchmark ran."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

from bench.host_load import BUSY_CORES, HostLoad

WORK = "x = 0\nfor i in range(4_000_000):\n    x += i\n"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_a_process_the_benchmark_does_not_run_counts_as_other_load() -> None:
    load = HostLoad([])
    before = _children_cpu()
    with load:
        subprocess.run([sys.executable, "-c", WORK], check=True)
    spent = _children_cpu() - before
    assert spent > 0.05
    # Other processes on the host can only add to it.
    assert load.other_seconds >= 0.8 * spent
    assert load.cores > 0


def test_the_measured_processes_and_this_one_are_left_out() -> None:
    """Cores busy 3 s, of which the measured server 1 s and this process 0.5 s: 1.5 s other."""
    clock = {"busy": 100.0, 4242: 10.0, os.getpid(): 20.0}
    load = HostLoad([4242, None], busy=lambda: clock["busy"], cpu=lambda p: clock[p])
    with load:
        clock["busy"] += 3.0
        clock[4242] += 1.0
        clock[os.getpid()] += 0.5
    assert load.other_seconds == 1.5
    with load:  # blocks add up; the measured process's own CPU never counts as other
        clock[4242] += 1.0
    assert load.other_seconds == 1.5


def test_the_verdict_names_a_busy_host() -> None:
    load = HostLoad([])
    load.other_seconds, load.wall_seconds = 2 * BUSY_CORES, 1.0
    assert "the host was busy" in load.describe()
    load.other_seconds = 0.0
    assert "an idle host" in load.describe()
