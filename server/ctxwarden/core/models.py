"""Table of models: context window, output limit, tokenizer and framing costs.

A model ID is matched after normalisation (trimmed, lower-cased, anything up
to the last ``/`` dropped, so ``openai/gpt-4o`` and ``models/gemini-2.5-pro``
work, and a Bedrock vendor prefix such as ``us.anthropic.`` dropped) against
the table's IDs and aliases:

* an exact match wins;
* otherwise the longest ID or alias that is a prefix of the name and ends at a
  separator (``-``, ``_``, ``:``, ``@``) wins, so dated snapshots
  (``gpt-4o-2024-08-06``), Ollama tags (``qwen3:8b``) and Vertex versions
  (``claude-sonnet-4-5@20250929``) find their model. A ``.`` is not a
  separator: ``gpt-4.5`` is not a ``gpt-4``;
* keys that themselves end in ``-`` (``claude-``) are family fallbacks that
  match any name they start.

A name that matches nothing gets UNKNOWN_MODEL (``known=False``, heuristic
tokenizer, DEFAULT_CONTEXT_WINDOW); the caller tells the client.

Tokenizers are exact only where this process has the real one (tiktoken for
OpenAI); every other family uses the heuristic unless a deployment points it
at a tokenizer.json with ``hf:<path>`` through ctxwarden.modeltable.

Framing costs are what a chat template adds around each message
(``framing_tokens``) and once to prime the reply (``reply_tokens``). OpenAI's
3 + 3 are from its cookbook's counting recipe for chat models; the values
for open models count their chat-template tokens; Anthropic's and Gemini's
are estimates.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

DEFAULT_CONTEXT_WINDOW: Final = 128000

IMAGE_RULE_DEFAULT: Final = "default"

O200K: Final = "tiktoken:o200k_base"
CL100K: Final = "tiktoken:cl100k_base"
HEURISTIC: Final = "heuristic"


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the service needs to know about one model.

    Equality compares only provider, context_window, tokenizer and known; the
    other fields are descriptive and may be tuned without changing identity.
    """

    provider: str
    context_window: int
    tokenizer: str
    known: bool = True
    max_output_tokens: int = field(default=0, compare=False)
    """Largest completion the model can return; 0 when unknown or only bounded
    by the window (open-weight models)."""
    framing_tokens: int = field(default=0, compare=False)
    """Tokens the chat format adds around each message."""
    reply_tokens: int = field(default=0, compare=False)
    """Tokens added once per request to prime the reply."""
    image_rule: str = field(default=IMAGE_RULE_DEFAULT, compare=False)
    """Rule name for ctxwarden.core.images.image_tokens."""
    model_id: str = field(default="", compare=False)
    """The table entry that matched; empty for UNKNOWN_MODEL."""


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One table row: a canonical ID, other names for it, and its info."""

    model_id: str
    info: ModelInfo
    aliases: tuple[str, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.model_id, *self.aliases)


UNKNOWN_MODEL: Final = ModelInfo("", DEFAULT_CONTEXT_WINDOW, HEURISTIC, known=False)


def _entry(
    model_id: str,
    provider: str,
    window: int,
    max_out: int,
    tokenizer: str,
    framing: tuple[int, int],
    image_rule: str = IMAGE_RULE_DEFAULT,
    aliases: tuple[str, ...] = (),
) -> ModelEntry:
    info = ModelInfo(
        provider,
        window,
        tokenizer,
        known=True,
        max_output_tokens=max_out,
        framing_tokens=framing[0],
        reply_tokens=framing[1],
        image_rule=image_rule,
        model_id=model_id,
    )
    return ModelEntry(model_id, info, aliases)


def _openai(
    model_id: str,
    window: int,
    max_out: int,
    tokenizer: str = O200K,
    aliases: tuple[str, ...] = (),
    image_rule: str = "openai",
) -> ModelEntry:
    # OpenAI cookbook: every message is <|start|>{role}\n{content}<|end|>\n (3
    # tokens besides the content) and the reply is primed with 3 more.
    return _entry(model_id, "openai", window, max_out, tokenizer, (3, 3), image_rule, aliases)


def _anthropic(
    model_id: str, max_out: int, aliases: tuple[str, ...] = (), window: int = 200000
) -> ModelEntry:
    # Estimate: "\n\nHuman: " / "\n\nAssistant: " turns, about 4 per message.
    return _entry(model_id, "anthropic", window, max_out, HEURISTIC, (4, 3), "anthropic", aliases)


def _gemini(model_id: str, window: int, max_out: int) -> ModelEntry:
    # Estimate from the Gemma template: <start_of_turn>{role}\n ... <end_of_turn>\n.
    return _entry(model_id, "google", window, max_out, HEURISTIC, (5, 3), "gemini")


def _deepseek(model_id: str, max_out: int, aliases: tuple[str, ...] = ()) -> ModelEntry:
    # <(User)>...<(Assistant)>...<(end of sentence)> markers, plus BOS.
    return _entry(model_id, "deepseek", 128000, max_out, HEURISTIC, (2, 2), aliases=aliases)


def _qwen(model_id: str, window: int, max_out: int, aliases: tuple[str, ...] = ()) -> ModelEntry:
    # ChatML: <|im_start|>{role}\n ... <|im_end|>\n, reply <|im_start|>assistant\n.
    return _entry(model_id, "qwen", window, max_out, HEURISTIC, (5, 3), aliases=aliases)


def _llama(model_id: str, window: int, aliases: tuple[str, ...] = ()) -> ModelEntry:
    # Llama 3: <|start_header_id|>{role}<|end_header_id|>\n\n ... <|eot_id|>;
    # the reply header (4) plus <|begin_of_text|>.
    return _entry(model_id, "meta", window, 0, HEURISTIC, (5, 5), aliases=aliases)


def _mistral(model_id: str, window: int, aliases: tuple[str, ...] = ()) -> ModelEntry:
    # [INST] ... [/INST] around user turns, </s> after replies, plus <s>.
    return _entry(model_id, "mistral", window, 0, HEURISTIC, (2, 1), aliases=aliases)


BUILTIN_MODELS: Final[tuple[ModelEntry, ...]] = (
    # -- OpenAI ---------------------------------------------------------------------
    _openai("gpt-5", 400000, 128000),
    _openai("gpt-5-mini", 400000, 128000),
    _openai("gpt-5-nano", 400000, 128000),
    _openai("gpt-5-chat", 128000, 16384),
    _openai("gpt-5.1", 400000, 128000),
    _openai("gpt-4.1", 1047576, 32768),
    _openai("gpt-4.1-mini", 1047576, 32768),
    _openai("gpt-4.1-nano", 1047576, 32768),
    _openai("gpt-4.5", 128000, 16384),
    _openai("gpt-4o", 128000, 16384, aliases=("chatgpt-4o",)),
    _openai("gpt-4o-mini", 128000, 16384),
    _openai("gpt-4-turbo", 128000, 4096, CL100K),
    _openai("gpt-4-32k", 32768, 8192, CL100K, image_rule=IMAGE_RULE_DEFAULT),
    _openai("gpt-4", 8192, 8192, CL100K, image_rule=IMAGE_RULE_DEFAULT),
    _openai("gpt-3.5-turbo", 16385, 4096, CL100K, image_rule=IMAGE_RULE_DEFAULT),
    _openai("o1", 200000, 100000),
    _openai("o1-pro", 200000, 100000),
    _openai("o1-mini", 128000, 65536, image_rule=IMAGE_RULE_DEFAULT),
    _openai("o1-preview", 128000, 32768, image_rule=IMAGE_RULE_DEFAULT),
    _openai("o3", 200000, 100000),
    _openai("o3-pro", 200000, 100000),
    _openai("o3-mini", 200000, 100000, image_rule=IMAGE_RULE_DEFAULT),
    _openai("o4-mini", 200000, 100000),
    # Open weights; o200k_harmony is o200k_base plus special tokens only.
    _openai("gpt-oss", 131072, 131072, image_rule=IMAGE_RULE_DEFAULT),
    # -- Anthropic --------------------------------------------------------------------
    _anthropic("claude-opus-4-5", 64000, ("claude-opus-4.5",)),
    _anthropic("claude-opus-4-1", 32000, ("claude-opus-4.1",)),
    _anthropic("claude-opus-4", 32000, ("claude-4-opus",)),
    _anthropic("claude-sonnet-4-5", 64000, ("claude-sonnet-4.5",)),
    _anthropic("claude-sonnet-4", 64000, ("claude-4-sonnet",)),
    _anthropic("claude-haiku-4-5", 64000, ("claude-haiku-4.5",)),
    _anthropic("claude-3-7-sonnet", 64000, ("claude-3.7-sonnet",)),
    _anthropic("claude-3-5-sonnet", 8192, ("claude-3.5-sonnet",)),
    _anthropic("claude-3-5-haiku", 8192, ("claude-3.5-haiku",)),
    _anthropic("claude-3-opus", 4096),
    _anthropic("claude-3-haiku", 4096),
    _anthropic("claude-", 8192),  # family fallback for other Claude IDs
    # -- Google ---------------------------------------------------------------------
    _gemini("gemini-3-pro", 1048576, 65536),
    _gemini("gemini-2.5-pro", 1048576, 65536),
    _gemini("gemini-2.5-flash", 1048576, 65536),
    _gemini("gemini-2.5-flash-lite", 1048576, 65536),
    _gemini("gemini-2.0-flash", 1048576, 8192),
    _gemini("gemini-2.0-flash-lite", 1048576, 8192),
    _gemini("gemini-1.5-pro", 2097152, 8192),
    _gemini("gemini-1.5-flash", 1048576, 8192),
    _gemini("gemini-", 1048576, 8192),  # family fallback
    # -- DeepSeek (API: V3.x behind both names, 128K context) ---------------------------
    _deepseek("deepseek-chat", 8192),
    _deepseek("deepseek-reasoner", 65536),
    _deepseek("deepseek", 8192),  # family fallback: deepseek-v3, deepseek-r1, ...
    # -- Qwen -------------------------------------------------------------------------
    _qwen("qwen3-max", 262144, 65536),
    _qwen("qwen3-coder", 262144, 65536),
    _qwen("qwen3", 131072, 32768),
    _qwen("qwen2.5", 131072, 8192),
    _qwen("qwen2", 32768, 8192),
    _qwen("qwen-max", 32768, 8192),
    _qwen("qwen-plus", 131072, 16384),
    _qwen("qwen-turbo", 1000000, 16384),
    _qwen("qwq", 131072, 32768),
    _qwen("qwen", 131072, 8192),  # family fallback
    # -- Meta Llama -----------------------------------------------------------------------
    _llama("llama-4-scout", 10485760, ("llama4-scout",)),
    _llama("llama-4-maverick", 1048576, ("llama4-maverick",)),
    _llama("llama-4", 1048576, ("llama4",)),
    _llama("llama-3.3", 131072, ("llama3.3", "llama3-3", "meta-llama-3.3")),
    _llama("llama-3.2", 131072, ("llama3.2", "llama3-2", "meta-llama-3.2")),
    _llama("llama-3.1", 131072, ("llama3.1", "llama3-1", "meta-llama-3.1")),
    _llama("llama-3", 8192, ("llama3", "meta-llama-3")),
    _llama("llama-2", 4096, ("llama2",)),
    _llama("llama", 131072),  # family fallback
    # -- Mistral -----------------------------------------------------------------------
    _mistral("mistral-large", 128000),
    _mistral("mistral-medium", 128000),
    _mistral("mistral-small", 128000),
    _mistral("codestral", 256000),
    _mistral("ministral", 128000),
    _mistral("devstral", 128000),
    _mistral("mistral-nemo", 128000, ("open-mistral-nemo",)),
    _mistral("mistral", 128000),  # family fallback
)

# Separators after which a table key may end inside a longer model ID.
_SEPARATORS: Final = frozenset("-_:@")

# Bedrock IDs: "anthropic.claude-...", "us.anthropic.claude-...", "meta.llama3-1-...".
_VENDOR_PREFIX: Final = re.compile(
    r"^(?:[a-z]{2,6}\.)?(?:anthropic|meta|mistral|deepseek|qwen|openai|google)\."
)


def normalize_model_id(model: str) -> str:
    """The form of a model ID that is matched against the table's keys."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    return _VENDOR_PREFIX.sub("", name, count=1)


_SNAPSHOT = re.compile(r"(?:[-@]\d{8}|-\d{4}-\d{2}-\d{2})$")


def snapshot_base(model: str) -> str:
    """A model ID without its dated snapshot suffix (``claude-sonnet-4-5-20250929``,
    ``claude-3-5-sonnet@20240620``, ``gpt-4o-2024-08-06``), normalised: the alias a
    provider answers for with the dated ID of the snapshot that served it."""
    return _SNAPSHOT.sub("", normalize_model_id(model))


_CACHE_LIMIT: Final = 4096
"""Model strings come from clients: past this many, lookups are computed uncached."""


@dataclass(frozen=True, slots=True)
class _Table:
    entries: tuple[ModelEntry, ...]
    index: Mapping[str, ModelInfo]
    cache: dict[str, ModelInfo] = field(default_factory=dict)
    """Raw model string -> result, for this table only."""


def _index(entries: Iterable[ModelEntry]) -> dict[str, ModelInfo]:
    index: dict[str, ModelInfo] = {}
    for entry in entries:  # later entries win a shared key
        for key in entry.keys:
            index[normalize_model_id(key)] = entry.info
    return index


_lock = threading.Lock()
_table = _Table(BUILTIN_MODELS, _index(BUILTIN_MODELS))


def model_entries() -> tuple[ModelEntry, ...]:
    """The table as it is now: built-ins, then installed entries."""
    return _table.entries


def find_entry(model_id: str) -> ModelEntry | None:
    """The entry whose canonical ID is ``model_id`` (normalised), if any."""
    wanted = normalize_model_id(model_id)
    for entry in reversed(_table.entries):
        if normalize_model_id(entry.model_id) == wanted:
            return entry
    return None


def install_models(entries: Iterable[ModelEntry]) -> None:
    """Add or replace entries, atomically for concurrent lookups.

    An entry whose canonical ID is already in the table replaces that entry
    (keeping its aliases, plus the new ones); any other entry is added. Keys
    of a new or replaced entry win over the same key in other entries.
    """
    global _table
    with _lock:
        current = list(_table.entries)
        for entry in entries:
            key = normalize_model_id(entry.model_id)
            merged = entry
            for i, old in enumerate(current):
                if normalize_model_id(old.model_id) == key:
                    del current[i]
                    aliases = tuple(dict.fromkeys((*old.aliases, *entry.aliases)))
                    merged = replace(entry, aliases=aliases)
                    break
            current.append(merged)
        entries_now = tuple(current)
        _table = _Table(entries_now, _index(entries_now))


def reset_models() -> None:
    """Back to the built-in table (tests, config reload)."""
    global _table
    with _lock:
        _table = _Table(BUILTIN_MODELS, _index(BUILTIN_MODELS))


def _match(name: str, index: Mapping[str, ModelInfo]) -> ModelInfo:
    if not name:
        return UNKNOWN_MODEL
    info = index.get(name)
    if info is not None:
        return info
    for end in range(len(name) - 1, 0, -1):
        if name[end] in _SEPARATORS:
            # "claude-" (a family key ending in a separator), then "claude".
            info = index.get(name[: end + 1]) or index.get(name[:end])
            if info is not None:
                return info
    return UNKNOWN_MODEL


def lookup_model(model: str) -> ModelInfo:
    """Info for a model ID; an unknown model gets UNKNOWN_MODEL (``known=False``).

    Results are cached per table, so a change of table is never answered from
    the table before it.
    """
    table = _table
    info = table.cache.get(model)
    if info is None:
        info = _match(normalize_model_id(model), table.index)
        if len(table.cache) < _CACHE_LIMIT:
            table.cache[model] = info
    return info
