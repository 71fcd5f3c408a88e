"""The summarisers ``ctxwarden eval compaction`` compares, from their specs.

* ``extractive``: the built-in summariser without an LLM;
* ``openai:MODEL`` / ``anthropic:MODEL``: the server's LLM summarisers (the
  base URL, key variable, timeout and output limit as ``serve`` reads them:
  ``CTXWARDEN_SUMMARIZER_BASE_URL`` and so on, or the options of ``eval``);
* ``server``: the summariser ``serve`` would build from its environment
  (``CTXWARDEN_SUMMARIZER`` and ``CTXWARDEN_SUMMARIZER_MODEL``);
* ``command:CMD``: an external program (split like a shell would, run without
  one): it reads the prompt on stdin (the system prompt, a blank line, the
  user prompt) and writes the summary on stdout; the environment carries
  ``CTXWARDEN_SUMMARY_MAX_TOKENS`` and ``CTXWARDEN_SUMMARY_KIND`` (``history``
  or ``turn_prefix``). A non-zero exit fails the run.

Every summariser is wrapped in a ``CountingSummarizer``: the scorecard reports
the calls made and the tokens sent and received (counted with the heuristic
tokenizer, so different summarisers compare on one scale).
"""

from __future__ import annotations

import asyncio
import os
import shlex
from dataclasses import dataclass

from ctxwarden.core.compaction.extractive import ExtractiveSummarizer
from ctxwarden.core.compaction.types import Summarizer, SummarizerError, SummaryRequest
from ctxwarden.core.tokens import HeuristicTokenizer

COMMAND_MAX_OUTPUT_TOKENS = 8192
"""The output budget an external command is asked to respect at most."""


@dataclass(frozen=True, slots=True)
class LlmOptions:
    base_url: str = ""
    api_key_env: str = ""
    timeout: float = 120.0
    max_output_tokens: int = 16384

    @classmethod
    def from_env(cls) -> LlmOptions:
        """As ``serve`` reads them from its environment."""
        env = os.environ.get
        return cls(
            env("CTXWARDEN_SUMMARIZER_BASE_URL", ""),
            env("CTXWARDEN_SUMMARIZER_API_KEY_ENV", ""),
            float(env("CTXWARDEN_SUMMARIZER_TIMEOUT", "120")),
            int(env("CTXWARDEN_SUMMARIZER_MAX_OUTPUT_TOKENS", "16384")),
        )


class CommandSummarizer:
    """Runs ``command`` once per summary request (see the module docstring)."""

    def __init__(self, command: str, timeout: float = 300.0) -> None:
        self.argv = shlex.split(command)
        if not self.argv:
            raise ValueError("command: needs a program to run")
        self._name = f"command:{command}"
        self.timeout = timeout

    @property
    def name(self) -> str:
        return self._name

    @property
    def max_output_tokens(self) -> int:
        return COMMAND_MAX_OUTPUT_TOKENS

    async def summarize(self, request: SummaryRequest) -> str:
        prompt = f"{request.prompt.system}\n\n{request.prompt.user}"
        env = {
            **os.environ,
            "CTXWARDEN_SUMMARY_MAX_TOKENS": str(request.prompt.max_tokens),
            "CTXWARDEN_SUMMARY_KIND": "turn_prefix" if request.turn_prefix else "history",
        }
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
        except OSError as exc:
            raise SummarizerError(f"{self.name}: cannot run: {exc}", retryable=False) from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(prompt.encode()), self.timeout)
        except TimeoutError:
            await _stop(proc)
            raise SummarizerError(f"{self.name}: timed out", retryable=True) from None
        except BaseException:  # cancelled (another summary of the same plan failed)
            await asyncio.shield(_stop(proc))
            raise
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip()[-500:]
            raise SummarizerError(
                f"{self.name}: exit status {proc.returncode}: {tail}", retryable=False
            )
        return out.decode(errors="replace")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
    await proc.wait()


class CountingSummarizer:
    """``inner``, counting its calls and the tokens of its prompts and answers."""

    def __init__(self, inner: Summarizer, label: str = "") -> None:
        self.inner = inner
        self.label = label or inner.name
        self.calls = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self._count = HeuristicTokenizer().count

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def max_output_tokens(self) -> int:
        return self.inner.max_output_tokens

    @property
    def model(self) -> str:
        """The inner summariser's model (service.summarize reads it for the window)."""
        model = getattr(self.inner, "model", "")
        return model if isinstance(model, str) else ""

    async def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        if not isinstance(self.inner, ExtractiveSummarizer):  # it reads no prompt
            self.tokens_in += self._count(request.prompt.system) + self._count(request.prompt.user)
        answer = await self.inner.summarize(request)
        self.tokens_out += self._count(answer)
        return answer


def build(spec: str, llm: LlmOptions) -> Summarizer:
    """The summariser of ``spec`` (ValueError for an unusable one)."""
    kind, _, rest = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "server" and not rest:
        kind = os.environ.get("CTXWARDEN_SUMMARIZER", "none").strip().lower()
        rest = os.environ.get("CTXWARDEN_SUMMARIZER_MODEL", "")
        if kind not in ("extractive", "openai", "anthropic"):
            raise ValueError("server: CTXWARDEN_SUMMARIZER names no summariser")
    if kind == "extractive":
        return ExtractiveSummarizer()
    if kind == "command":
        return CommandSummarizer(rest, timeout=llm.timeout)
    if kind in ("openai", "anthropic"):
        from ctxwarden.summarizers import build_summarizer

        made = build_summarizer(
            kind,
            base_url=llm.base_url,
            model=rest,
            api_key_env=llm.api_key_env,
            timeout=llm.timeout,
            max_output_tokens=llm.max_output_tokens,
        )
        assert made is not None
        return made
    raise ValueError(
        f"unknown summarizer {spec!r}: use extractive, openai:MODEL, anthropic:MODEL, "
        "server or command:CMD"
    )
