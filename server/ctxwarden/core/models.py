"""Built-in table of model families: context window and tokenizer."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CONTEXT_WINDOW = 128000


@dataclass(frozen=True, slots=True)
class ModelInfo:
    provider: str
    context_window: int
    tokenizer: str
    known: bool = True


# Longest matching prefix wins, so dated snapshots ("gpt-4o-2024-08-06") and
# vendor-prefixed IDs find their family.
_TABLE: tuple[tuple[str, ModelInfo], ...] = (
    ("gpt-5", ModelInfo("openai", 400000, "tiktoken:o200k_base")),
    ("gpt-4.1", ModelInfo("openai", 1047576, "tiktoken:o200k_base")),
    ("gpt-4o", ModelInfo("openai", 128000, "tiktoken:o200k_base")),
    ("gpt-4-turbo", ModelInfo("openai", 128000, "tiktoken:cl100k_base")),
    ("gpt-4", ModelInfo("openai", 8192, "tiktoken:cl100k_base")),
    ("gpt-3.5-turbo", ModelInfo("openai", 16385, "tiktoken:cl100k_base")),
    ("o1", ModelInfo("openai", 200000, "tiktoken:o200k_base")),
    ("o3", ModelInfo("openai", 200000, "tiktoken:o200k_base")),
    ("o4-mini", ModelInfo("openai", 200000, "tiktoken:o200k_base")),
    ("claude-", ModelInfo("anthropic", 200000, "heuristic")),
    ("gemini-", ModelInfo("google", 1048576, "heuristic")),
    ("deepseek", ModelInfo("deepseek", 128000, "heuristic")),
    ("qwen", ModelInfo("qwen", 131072, "heuristic")),
    ("llama", ModelInfo("meta", 131072, "heuristic")),
    ("mistral", ModelInfo("mistral", 128000, "heuristic")),
)

UNKNOWN_MODEL = ModelInfo("", DEFAULT_CONTEXT_WINDOW, "heuristic", known=False)


def lookup_model(model: str) -> ModelInfo:
    """Family info for a model ID; an unknown model gets safe defaults."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    best: ModelInfo | None = None
    best_len = -1
    for prefix, info in _TABLE:
        if name.startswith(prefix) and len(prefix) > best_len:
            best, best_len = info, len(prefix)
    return best if best is not None else UNKNOWN_MODEL
