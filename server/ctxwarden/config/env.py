"""Option defaults from the environment: the leaf every option group imports.

Each option's default comes from its environment variable when that is set, so
flags beat variables, which beat the config file (applied below them as parser
defaults), which beats the built-in default.
"""

from __future__ import annotations

import os
from typing import Any


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"ctxwarden: {name} must be an integer, got {value!r}") from None


def from_env(name: str, default: str | int | float) -> dict[str, Any]:
    """``add_argument`` keywords: ``default`` from environment variable ``name``
    (else ``default``), and ``type`` when ``default`` is an int or a float."""
    if isinstance(default, bool):
        raise TypeError("a switch is action='store_true'")
    if isinstance(default, int):
        return {"type": int, "default": env_int(name, default)}
    if isinstance(default, float):
        return {"type": float, "default": float(os.environ.get(name, default))}
    return {"default": os.environ.get(name, default)}
