"""The ``serve --workers N`` supervisor, in a fresh interpreter of its own.

The command that parses ``serve`` has imported every command's module (SQLAlchemy,
gRPC, protobuf, the core: ~70 MiB), none of which the supervisor uses: it starts
and watches the workers, holds the port and merges their metrics. So that process
replaces itself (``exec``: the same process ID, so signals, the container's PID 1
and ``ps`` see no difference) with ``python -m ctxwarden.app.supervise``, which
imports the supervisor alone (~30 MiB) and reads the settings, already checked,
from a pipe it inherits. The workers are ordinary servers in their own processes,
as before.
"""

from __future__ import annotations

import os
import pickle
import site
import sys
from pathlib import Path
from typing import NoReturn

import ctxwarden
from ctxwarden.config import Settings

SETTINGS_FD_ENV = "CTXWARDEN_SUPERVISOR_SETTINGS_FD"
"""The inherited pipe the settings arrive on (not a setting: set by exec_supervisor)."""
PIPE_CAPACITY = 60 * 1024
"""Settings longer than this are not sent through a pipe nobody reads yet (Linux's
pipe buffer is 64 KiB); the supervisor then runs in the parsing process."""


def exec_supervisor(settings: Settings, workers: int, words: list[str]) -> int:
    """Become the supervisor of ``workers`` workers; returns only where exec cannot
    be used (not POSIX, or settings too long for the pipe): then it supervises here."""
    data = pickle.dumps((settings, workers))
    if os.name != "posix" or len(data) > PIPE_CAPACITY:
        from ctxwarden.app.workers_run import run_workers

        return run_workers(settings, workers)
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    os.set_inheritable(read, True)
    os.environ[SETTINGS_FD_ENV] = str(read)
    # The same ctxwarden as this process's, however it was found (installed, or a source
    # tree on sys.path), and never a directory of that name in the working directory
    # (-P: the working directory is not put first on sys.path).
    _find_this_ctxwarden()
    sys.stdout.flush()
    sys.stderr.flush()
    # The words after the module name only show ps what was asked for.
    _exec([sys.executable, "-P", "-m", "ctxwarden.app.supervise", *words])


def _find_this_ctxwarden() -> None:
    """Put the directory holding this ``ctxwarden`` on the new interpreter's path unless
    it is a site-packages directory (found anyway; ahead of the standard library it
    could shadow it)."""
    here = str(Path(ctxwarden.__file__).resolve().parent.parent)
    sites = {str(Path(p).resolve()) for p in (*site.getsitepackages(), site.getusersitepackages())}
    if here in sites:
        return
    known = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, known) if p)


def _exec(argv: list[str]) -> NoReturn:
    os.execv(argv[0], argv)


def _settings_from_pipe() -> tuple[Settings, int]:
    fd = int(os.environ.pop(SETTINGS_FD_ENV))
    with os.fdopen(fd, "rb") as pipe:
        settings, workers = pickle.loads(pipe.read())  # written by exec_supervisor
    assert isinstance(settings, Settings) and isinstance(workers, int)
    return settings, workers


def main() -> int:
    if SETTINGS_FD_ENV not in os.environ:
        print(
            "ctxwarden: this module is started by `ctxwarden serve --workers N`; run that",
            file=sys.stderr,
        )
        return 2
    settings, workers = _settings_from_pipe()
    from ctxwarden.app.workers_run import run_workers

    return run_workers(settings, workers)


if __name__ == "__main__":
    raise SystemExit(main())
