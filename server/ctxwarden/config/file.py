"""The TOML configuration file of ``ctxwarden serve``.

Precedence, highest first: command-line flags, environment variables
(``CTXWARDEN_<FLAG>``), the config file (``--config FILE`` or
``CTXWARDEN_CONFIG``), built-in defaults. Keys are the long flag names
without the dashes, in snake_case (``database_url = "..."``), optionally
grouped in tables, which are flattened (``[summarizer] model = "x"`` is
``summarizer_model``).
"""

from __future__ import annotations

import argparse
import os
import tomllib
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

SECRET_KEYS = ("database_url",)


def load(path: str) -> dict[str, Any]:
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read config file {path}: {exc}") from None
    flat: dict[str, Any] = {}

    def walk(prefix: str, table: dict[str, Any]) -> None:
        for key, value in table.items():
            name = f"{prefix}{key}".replace("-", "_")
            if isinstance(value, dict):
                walk(name + "_", value)
            else:
                flat[name] = value

    walk("", raw)
    return flat


def env_name(dest: str) -> str:
    return "CTXWARDEN_" + dest.upper()


def apply(parser: argparse.ArgumentParser, values: dict[str, Any], path: str) -> None:
    """Use the file's values as defaults where no environment variable is set."""
    known = {a.dest: a for a in parser._actions if a.dest not in ("help", "config")}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"{path}: unknown settings {', '.join(unknown)}")
    defaults: dict[str, Any] = {}
    for dest, value in values.items():
        if os.environ.get(env_name(dest)) not in (None, ""):
            continue  # the environment wins over the file
        action = known[dest]
        if action.type is not None and not isinstance(value, bool):
            try:
                value = action.type(value)  # type: ignore[operator]
            except (TypeError, ValueError):
                raise ValueError(f"{path}: {dest} = {value!r} is not valid") from None
        defaults[dest] = value
    parser.set_defaults(**defaults)


def effective(args: argparse.Namespace) -> dict[str, Any]:
    """The resolved settings, with secrets masked."""
    out: dict[str, Any] = {}
    for key, value in sorted(vars(args).items()):
        if key in ("command", "func"):
            continue
        if key in SECRET_KEYS and value:
            try:
                value = make_url(value).render_as_string(hide_password=True)
            except Exception:  # not a URL: mask it whole
                value = "***"
        out[key] = value
    return out
