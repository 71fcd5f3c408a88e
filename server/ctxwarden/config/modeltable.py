"""Model table overrides and extensions from a TOML or JSON file.

TOML::

    [models."my-qwen"]
    provider = "qwen"
    context_window = 131072
    max_output_tokens = 8192
    tokenizer = "hf:/models/qwen/tokenizer.json"
    framing_tokens = 5
    reply_tokens = 3
    image_rule = "default"
    aliases = ["my-qwen-latest", "my-qwen-v2"]

    [models."gpt-4o"]          # an ID already in the table: only the keys
    context_window = 64000     # given change; the rest, and its aliases, stay

    [models."gpt-4o-acme"]
    extends = "gpt-4o"         # a new entry starting from another one
    framing_tokens = 4

JSON is the same shape: ``{"models": {"my-qwen": {"provider": "qwen", ...}}}``.
The format follows the file's suffix (``.toml`` or ``.json``).

A new entry needs ``provider`` and ``context_window`` unless it ``extends``
another. Names and aliases match model IDs the way built-in ones do
(ctxwarden.core.models): exactly, or as a prefix ending at ``-``, ``_``,
``:`` or ``@``, after dropping anything up to a ``/``. A ``tokenizer = "hf:..."``
file must exist when the table is loaded (it is parsed on first use). The
whole file is checked before anything is installed; any problem raises
ValueError naming the file and the entry.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from ctxwarden.core.images import IMAGE_RULES
from ctxwarden.core.models import (
    HEURISTIC,
    IMAGE_RULE_DEFAULT,
    ModelEntry,
    ModelInfo,
    find_entry,
    install_models,
    normalize_model_id,
)
from ctxwarden.tokenizers import HF_PREFIX, SUPPORTED_SPECS, is_tokenizer_spec, resolve_hf_path

_INT_FIELDS: Final = (
    "context_window",
    "max_output_tokens",
    "framing_tokens",
    "reply_tokens",
)
_STR_FIELDS: Final = ("provider", "tokenizer", "image_rule", "extends")
_KNOWN_KEYS: Final = frozenset({*_INT_FIELDS, *_STR_FIELDS, "aliases"})

_MAX_TOKENS: Final = 1 << 40
"""Sanity bound on any token count in the file."""


def _read(path: Path) -> Any:
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            with path.open("rb") as f:
                return tomllib.load(f)
        if suffix == ".json":
            return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"model table {path}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"model table {path}: not valid {suffix[1:].upper()}: {exc}") from None
    raise ValueError(f"model table {path}: unsupported file type {suffix!r}; use .toml or .json")


def _check_tokenizer(spec: str, where: str) -> None:
    if not is_tokenizer_spec(spec):
        raise ValueError(
            f"{where}: unknown tokenizer {spec!r}; use one of {', '.join(SUPPORTED_SPECS)}, "
            f"or {HF_PREFIX}<path to tokenizer.json or its directory>"
        )
    if spec.startswith(HF_PREFIX):
        try:
            resolve_hf_path(spec)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None


def _parse_entry(name: str, raw: Any, where: str, earlier: Mapping[str, ModelEntry]) -> ModelEntry:
    aliases = _check_settings(raw, where)
    info = _starting_point(name, raw, where, earlier)
    tokenizer = raw.get("tokenizer", info.tokenizer)
    _check_tokenizer(tokenizer, where)
    image_rule = raw.get("image_rule", info.image_rule)
    if image_rule not in IMAGE_RULES:
        raise ValueError(
            f"{where}: unknown image_rule {image_rule!r}; known: {', '.join(sorted(IMAGE_RULES))}"
        )
    window = raw.get("context_window", info.context_window)
    # An inherited output limit shrinks with a smaller window; a given one must fit.
    max_output = raw.get("max_output_tokens", min(info.max_output_tokens, window))
    info = ModelInfo(
        provider=raw.get("provider", info.provider),
        context_window=window,
        tokenizer=tokenizer,
        known=True,
        max_output_tokens=max_output,
        framing_tokens=raw.get("framing_tokens", info.framing_tokens),
        reply_tokens=raw.get("reply_tokens", info.reply_tokens),
        image_rule=image_rule,
        model_id=name,
    )
    if info.max_output_tokens > info.context_window:
        raise ValueError(
            f"{where}: max_output_tokens ({info.max_output_tokens}) exceeds "
            f"context_window ({info.context_window})"
        )
    return ModelEntry(name, info, aliases)


def _check_settings(raw: Any, where: str) -> tuple[str, ...]:
    """The entry's keys and value types; returns its aliases."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be a table of settings, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _KNOWN_KEYS)
    if unknown:
        raise ValueError(
            f"{where}: unknown setting(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(_KNOWN_KEYS))}"
        )
    for key in _INT_FIELDS:
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{where}: {key} must be an integer, got {value!r}")
            low = 1 if key == "context_window" else 0
            if not low <= value <= _MAX_TOKENS:
                raise ValueError(f"{where}: {key} must be >= {low}, got {value}")
    for key in _STR_FIELDS:
        if key in raw and not isinstance(raw[key], str):
            raise ValueError(f"{where}: {key} must be a string, got {raw[key]!r}")
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(
        isinstance(a, str) and normalize_model_id(a) for a in aliases
    ):
        raise ValueError(f"{where}: aliases must be a list of non-empty model IDs")
    return tuple(aliases)


def _starting_point(
    name: str, raw: dict[str, Any], where: str, earlier: Mapping[str, ModelEntry]
) -> ModelInfo:
    """What the entry changes: the model it extends, the same model defined
    earlier (or built in), or, for a new model, a blank."""
    base: ModelEntry | None
    if "extends" in raw:
        parent = str(raw["extends"])
        base = earlier.get(normalize_model_id(parent)) or find_entry(parent)
        if base is None:
            raise ValueError(f"{where}: extends {parent!r}, which is not in the model table")
        base = replace(base, aliases=())  # a new entry does not take the parent's names
    else:
        base = earlier.get(normalize_model_id(name)) or find_entry(name)
    if base is not None:
        return base.info
    missing = [k for k in ("provider", "context_window") if k not in raw]
    if missing:
        raise ValueError(
            f"{where}: a new model needs {' and '.join(missing)} "
            f"(or 'extends' naming a model to start from)"
        )
    return ModelInfo("", 1, HEURISTIC, image_rule=IMAGE_RULE_DEFAULT)


def parse_model_table(data: Any, source: str = "model table") -> list[ModelEntry]:
    """Validate the parsed document and build its entries, installing nothing."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a table at the top level")
    unknown = sorted(set(data) - {"models"})
    if unknown:
        raise ValueError(f"{source}: unknown top-level key(s) {', '.join(map(repr, unknown))}")
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise ValueError(f"{source}: 'models' must be a table of model entries")
    entries: dict[str, ModelEntry] = {}
    for name, raw in models.items():
        where = f"{source}: models.{json.dumps(name, ensure_ascii=False)}"
        key = normalize_model_id(name)
        if not key:
            raise ValueError(f"{where}: not a usable model ID")
        if key in entries:
            raise ValueError(f"{where}: the same model ID appears twice")
        entries[key] = _parse_entry(name, raw, where, entries)
    return list(entries.values())


def load_model_table(path: str | Path) -> list[str]:
    """Read ``path`` and install its entries over the current model table.

    All-or-nothing: any error raises ValueError (naming the entry) before the
    table changes. Returns the model IDs installed, in file order.
    """
    path = Path(path)
    entries = parse_model_table(_read(path), str(path))
    install_models(entries)
    return [e.model_id for e in entries]
