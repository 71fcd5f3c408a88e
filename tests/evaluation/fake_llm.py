"""A fake LLM summariser for ``ctxwarden eval compaction --summarizer command:...``.

Deterministic: it reads the prompt on stdin and answers with the first sentence
of each user request it sees (so it keeps tickets and paths, loses most
constraints), and the running summary it was given, if any."""

from __future__ import annotations

import re
import sys


def main() -> None:
    prompt = sys.stdin.read()
    previous = re.search(r"<previous-summary>\n(.*?)\n</previous-summary>", prompt, re.S)
    lines = ["## Goal"]
    if previous:
        lines += [line for line in previous.group(1).splitlines() if line.startswith("- ")]
    for m in re.finditer(r"^\[User\]: (.*)$", prompt, re.M):
        first = re.split(r"(?<=\.)\s", m.group(1), maxsplit=1)[0]
        lines.append(f"- {first}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
