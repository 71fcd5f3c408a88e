"""The README and the docs site's pages, and their fenced code blocks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$')
"""A pymdownx.snippets line: the block is that file, whole (mkdocs.yml, base_path the root)."""


@dataclass(frozen=True)
class Block:
    page: Path
    lang: str
    code: str

    @property
    def included(self) -> str | None:
        """The repository file the block includes whole, if it is a snippet line."""
        lines = self.code.strip().splitlines()
        match = SNIPPET.match(lines[0]) if len(lines) == 1 else None
        return match.group(1) if match else None


def pages() -> list[Path]:
    """The README first, then every page of the docs site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(lang: str | None = None) -> list[Block]:
    """Fenced code blocks (at the start of a line, not indented), of ``lang`` if given."""
    found = []
    for page in pages():
        for kind, code in re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(), flags=re.S | re.M):
            if lang is None or kind == lang:
                found.append(Block(page, kind, code))
    return found


def page_text(relative: str) -> str:
    return (DOCS / relative).read_text()
