"""``ctxwarden config check [FILE]``."""

from __future__ import annotations

import argparse
import sys

from ctxwarden.config import checks
from ctxwarden.config import file as configfile
from ctxwarden.config.build import settings, workers_problem


def config_check(parser: argparse.ArgumentParser, serve: argparse.ArgumentParser, path: str) -> int:
    """``config check [FILE]``: validate like ``serve --config FILE`` would, print the
    effective settings with secrets masked; 2 when invalid. ``serve`` is the
    ``serve`` subparser of ``parser``, whose defaults the file sets."""
    from ctxwarden.app.server import BadConfig, make_authenticator, make_summarizer

    argv = ["serve"] + (["--config", path] if path else [])
    try:
        if path:
            configfile.apply(serve, configfile.load(path), path)
        args = parser.parse_args(argv)
        wrong = checks.problems(args) + [w for w in (workers_problem(args),) if w]
        if wrong:
            raise ValueError("\n  " + "\n  ".join(wrong))
        serve_settings = settings(args)
        make_authenticator(serve_settings)
        make_summarizer(serve_settings)
        if args.model_table:
            from ctxwarden.config.modeltable import load_model_table

            load_model_table(args.model_table)
    except (ValueError, BadConfig, SystemExit) as exc:
        print(f"ctxwarden: config is invalid: {exc}", file=sys.stderr)
        return 2
    for key, value in configfile.effective(args).items():
        print(f"{key} = {checks.shown(key, value)!r}")
    return 0
