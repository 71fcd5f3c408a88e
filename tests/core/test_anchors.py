"""The anchor extractor (core.anchors): each category on examples, then
property tests: anchors planted in generated text are found exactly, and what
it finds in a span and in a summary is exact (lookalikes are no anchors)."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.anchor_report import AnchorLocation, Targets, place
from ctxwarden.core.anchor_sentences import sentence_key
from ctxwarden.core.anchors import (
    Anchor,
    AnchorCategory,
    anchors_of_text,
    category_named,
    span_anchors,
    structured,
)
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason

C = AnchorCategory


def found(text: str, role: Role = Role.USER) -> set[tuple[AnchorCategory, str]]:
    return {(a.category, a.key) for a in anchors_of_text(text, role)}


def texts(text: str, category: AnchorCategory, role: Role = Role.USER) -> list[str]:
    return [a.text for a in anchors_of_text(text, role) if a.category is category]


# -- each category --------------------------------------------------------------------


def test_paths() -> None:
    text = (
        "Edit src/app.py:42 and ./tests/test_x.py, then README.md. Also /etc/hosts, "
        "~/.bashrc, the src/ dir, .env and Dockerfile."
    )
    assert texts(text, C.FILE_PATH) == [
        "src/app.py",
        "./tests/test_x.py",
        "README.md",
        "/etc/hosts",
        "~/.bashrc",
        "src/",
        ".env",
        "Dockerfile",
    ]
    assert (C.FILE_PATH, "tests/test_x.py") in found(text)  # ./ is dropped from the key


@pytest.mark.parametrize(
    "text",
    [
        "and/or",
        "TCP/IP",
        "e.g. this",
        "Node.js rocks",
        "v1.2.3",
        "example.com",
        "km/h",
        "I/O bound",
        "24/7",
        "/etc",
        "a 3.5 rating",
    ],
)
def test_lookalikes_are_no_paths(text: str) -> None:
    assert not [k for c, k in found(text) if c is C.FILE_PATH]


def test_urls_are_found_whole_and_their_paths_are_not_paths() -> None:
    text = "See https://example.com/a/b.py?x=1, and (http://x.io/docs/)."
    assert texts(text, C.URL) == ["https://example.com/a/b.py?x=1", "http://x.io/docs/"]
    assert not texts(text, C.FILE_PATH)
    assert (C.URL, "http://x.io/docs") in found(text)  # a trailing slash is no difference


def test_identifiers() -> None:
    text = (
        "Commit abc1234f fixed ABC-123 and #45; error E1234, HTTP 503, HTTP/1.1 404, "
        "ORA-00942, id 550E8400-e29b-41d4-a716-446655440000."
    )
    assert texts(text, C.IDENTIFIER) == [
        "abc1234f",
        "ABC-123",
        "#45",
        "E1234",
        "HTTP 503",
        "HTTP/1.1 404",
        "ORA-00942",
        "550E8400-e29b-41d4-a716-446655440000",
    ]
    keys = {k for c, k in found(text) if c is C.IDENTIFIER}
    assert "uuid:550e8400-e29b-41d4-a716-446655440000" in keys and "http:404" in keys


@pytest.mark.parametrize(
    "text",
    ["UTF-8", "SHA-256", "ISO-8601", "decade", "1234567", "HTTP 200", "C# code", "deadbeef"],
)
def test_lookalikes_are_no_identifiers(text: str) -> None:
    assert not texts(text, C.IDENTIFIER)


def test_quantities_normalise_units_and_numbers() -> None:
    text = "Timeout 30 s, 30 seconds, memory 512 MiB, 3.5% errors, 10ms, 1,000 ms, 2 hours."
    assert [t for c, t, _ in structured(text) if c is C.QUANTITY] == [
        "30 s",
        "30 seconds",
        "512 MiB",
        "3.5%",
        "10ms",
        "1,000 ms",
        "2 hours",
    ]
    keys = [k for c, k in found(text) if c is C.QUANTITY]  # 30 s and 30 seconds: one anchor
    assert sorted(keys) == sorted(["30s", "512MiB", "3.5%", "10ms", "1000ms", "2h"])


def test_no_quantity_without_a_unit_or_inside_other_anchors() -> None:
    assert not texts("30 apples, 3 items, version 2, E1234, src/10ms.py", C.QUANTITY)


def test_constraints_only_in_user_messages_and_in_several_languages() -> None:
    text = (
        "Please refactor. You must never push to main. Always run tests! Don't touch the "
        "lockfile. Du musst immer testen. Ne jamais supprimer. Nunca borres. 必须使用中文。"
        "Nice weather."
    )
    assert texts(text, C.CONSTRAINT) == [
        "You must never push to main.",
        "Always run tests!",
        "Don't touch the lockfile.",
        "Du musst immer testen.",
        "Ne jamais supprimer.",
        "Nunca borres.",
        "必须使用中文。",
    ]
    assert not texts(text, C.CONSTRAINT, Role.ASSISTANT)


def test_open_tasks_todos_unchecked_items_and_unanswered_questions() -> None:
    span = [
        _user("Plan:\n- [ ] write docs\n- [x] ship it\nTODO: add retries\nWhat is the port?"),
        _assistant("The port is 8080."),
        _user("And the timeout?"),
        _assistant("", calls=[("read", {"path": "a.py"})]),
    ]
    tasks = [a.text for a in span_anchors(span) if a.category is C.OPEN_TASK]
    assert tasks == ["write docs", "TODO: add retries", "And the timeout?"]


def test_tool_calls_with_their_key_argument_and_paths_in_it() -> None:
    span = [
        _assistant(
            "",
            calls=[
                ("read", {"path": "src/a.py"}),
                ("bash", {"command": "pytest -k slow", "timeout": 30}),
                ("ping", {}),
                ("edit", {"path": "src/a.py", "old": "x", "new": "y"}),
            ],
        )
    ]
    found_ = span_anchors(span)
    assert [a.text for a in found_ if a.category is C.TOOL_CALL] == [
        "read path=src/a.py",
        "bash command=pytest -k slow",
        "ping",
        "edit path=src/a.py",
    ]
    assert [a.text for a in found_ if a.category is C.FILE_PATH] == ["src/a.py"]


def test_sources_error_results_only_and_never_history_only_or_failed() -> None:
    ok = Message(Role.TOOL_RESULT, (ContentBlock.of_text("src/x.py E1234"),), seq=2)
    error = Message(
        Role.TOOL_RESULT,
        (ContentBlock.of_text("HTTP 502 from https://a.io"),),
        seq=3,
        is_error=True,
    )
    failed = Message(
        Role.ASSISTANT, (ContentBlock.of_text("see b.py"),), seq=4, stop_reason=StopReason.ERROR
    )
    thinking = Message(Role.ASSISTANT, (ContentBlock(ContentKind.THINKING, "maybe c.py"),), seq=5)
    got = {a.text for a in span_anchors([ok, error, failed, thinking])}
    assert got == {"HTTP 502", "https://a.io"}


def test_each_anchor_once_at_its_first_seq() -> None:
    span = [_user("fix a.py", seq=1), _user("a.py again and ./a.py", seq=2)]
    (only,) = span_anchors(span)
    assert only == Anchor(C.FILE_PATH, "a.py", "a.py", 1)


def test_category_names() -> None:
    assert category_named("open_task") is C.OPEN_TASK
    assert category_named("FILE-PATH") is C.FILE_PATH
    assert category_named("nope") is None
    assert [c.label for c in C] == [
        "file_path",
        "url",
        "identifier",
        "quantity",
        "constraint",
        "open_task",
        "tool_call",
    ]


# -- property tests -------------------------------------------------------------------

# Filler words are never hexadecimal (so never a SHA) and hold no constraint word;
# lookalikes are text that resembles an anchor and is none.
# Filler words use only the letters n-z, a constraint's own words only g-m: no
# filler sentence can hold a constraint's words.
CONSTRAINT_WORDS = {"must", "never", "always", "only", "nie", "immer", "muss", "jamais"}
WORD = st.text("nopqrstuvwxyz", min_size=3, max_size=8).filter(lambda w: w not in CONSTRAINT_WORDS)
CONSTRAINT_WORD = st.text("ghijklm", min_size=3, max_size=8)
LOOKALIKES = st.sampled_from(
    [
        "and/or",
        "TCP/IP",
        "e.g.",
        "Node.js",
        "UTF-8 text",
        "SHA-256 hash",
        "v1.2.3 release",
        "30 apples",
        "3 items",
        "example.com",
        "HTTP 200 OK",
        "C# code",
        "the decade",
        "km/h",
        "#hashtag",
        "24/7 support",
        "version 2 final",
    ]
)
FILLER = st.lists(WORD | LOOKALIKES, min_size=1, max_size=6).map(" ".join)

EXT = st.sampled_from(["py", "ts", "go", "md", "json", "yaml", "rs", "toml"])
PATH = st.one_of(
    st.tuples(st.lists(WORD, min_size=1, max_size=3), WORD, EXT).map(
        lambda t: ("/".join(t[0]) + f"/{t[1]}.{t[2]}", "/".join(t[0]) + f"/{t[1]}.{t[2]}")
    ),
    st.tuples(WORD, EXT).map(lambda t: (f"{t[0]}.{t[1]}", f"{t[0]}.{t[1]}")),
    st.tuples(WORD, WORD, EXT).map(lambda t: (f"/{t[0]}/{t[1]}.{t[2]}",) * 2),
)
URL = st.tuples(WORD, WORD).map(lambda t: (f"https://{t[0]}.dev/{t[1]}",) * 2)
HEX = "0123456789abcdef"
SHA = (
    st.text(HEX, min_size=7, max_size=40)
    .filter(lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s))
    .map(lambda s: (s, f"sha:{s}"))
)
TICKET = st.tuples(st.text("KLMNPQRVWXYZ", min_size=2, max_size=4), st.integers(1, 99999)).map(
    lambda t: (f"{t[0]}-{t[1]}", f"ticket:{t[0]}-{t[1]}")
)
ISSUE = st.integers(1, 99999).map(lambda n: (f"#{n}", f"issue:#{n}"))
CODE = st.integers(1000, 9999).map(lambda n: (f"E{n}", f"code:E{n}"))
HTTP = st.integers(400, 599).map(lambda n: (f"HTTP {n}", f"http:{n}"))
UUID = st.uuids().map(lambda u: (str(u).upper(), f"uuid:{u}"))
IDENT = st.one_of(SHA, TICKET, ISSUE, CODE, HTTP, UUID)
UNIT = st.sampled_from([("s", "s"), ("ms", "ms"), ("MiB", "MiB"), ("%", "%"), ("seconds", "s")])
QTY = st.tuples(st.integers(1, 9999), st.booleans(), UNIT).map(
    lambda t: (f"{t[0]}{' ' if t[1] else ''}{t[2][0]}", f"{t[0]}{t[2][1]}")
)
PLANTABLE = st.one_of(
    PATH.map(lambda p: (C.FILE_PATH, *p)),
    URL.map(lambda p: (C.URL, *p)),
    IDENT.map(lambda p: (C.IDENTIFIER, *p)),
    QTY.map(lambda p: (C.QUANTITY, *p)),
)
PREFIXES = ["You must", "Never", "Always", "Do not", "Du musst immer"]


def _constraints(k: int) -> st.SearchStrategy[list[str]]:
    """k constraints, no two sharing a word of their own."""
    return st.tuples(
        st.lists(st.sampled_from(PREFIXES), min_size=k, max_size=k),
        st.lists(CONSTRAINT_WORD, min_size=3 * k, max_size=3 * k, unique=True),
    ).map(lambda t: [f"{p} {' '.join(t[1][3 * i : 3 * i + 3])}." for i, p in enumerate(t[0])])


CONSTRAINTS = st.integers(0, 4).flatmap(_constraints)


def weave(filler: list[str], planted: list[str]) -> str:
    """Filler and planted pieces alternated, each piece on a line of its own."""
    parts: list[str] = []
    for i in range(max(len(filler), len(planted))):
        if i < len(filler):
            parts.append(filler[i] + ".")
        if i < len(planted):
            parts.append(planted[i])
    return "\n".join(parts)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(PLANTABLE, max_size=8),
    st.lists(FILLER, max_size=8),
    st.sampled_from(["\n", " ", ", ", "; ", " (", ") "]),
)
def test_planted_structured_anchors_are_found_exactly(
    planted: list[tuple[AnchorCategory, str, str]], filler: list[str], sep: str
) -> None:
    text = weave(filler, [p[1] for p in planted]).replace("\n", sep)
    got = {(c, k) for c, _, k in structured(text)}
    assert got == {(c, k) for c, _, k in planted}


@settings(max_examples=200, deadline=None)
@given(CONSTRAINTS, st.lists(FILLER, max_size=6))
def test_planted_constraints_are_found_exactly(constraints: list[str], filler: list[str]) -> None:
    text = weave(filler, constraints)
    got = [a.key for a in anchors_of_text(text) if a.category is C.CONSTRAINT]
    assert sorted(set(got)) == sorted({sentence_key(c) for c in constraints})


@settings(max_examples=200, deadline=None)
@given(st.lists(PLANTABLE, max_size=8), CONSTRAINTS, st.data())
def test_survival_in_a_summary_is_exact(
    planted: list[tuple[AnchorCategory, str, str]], constraints: list[str], data: st.DataObject
) -> None:
    """A summary holding some of the span's anchors (among other filler): exactly
    those survive in it, the rest are lost."""
    pieces = data.draw(st.permutations([p[1] for p in planted] + constraints))
    span_text = weave(data.draw(st.lists(FILLER, max_size=5)), pieces)
    anchors = anchors_of_text(span_text)
    kept = data.draw(st.sets(st.sampled_from(range(len(anchors))))) if anchors else set()
    summary = weave(
        data.draw(st.lists(FILLER, max_size=5)), [anchors[i].text for i in sorted(kept)]
    )
    where = place(anchors, Targets(summary=summary))
    # A relative path survives in a longer path that ends with it (src/a.py in
    # /repo/src/a.py): keeping /nnn/a.py keeps nnn/a.py too.
    held = kept | {
        i
        for i, a in enumerate(anchors)
        if a.category is C.FILE_PATH
        and not a.key.startswith(("/", "~"))
        and any(anchors[k].key.endswith("/" + a.key) for k in kept)
    }
    assert {i for i, w in enumerate(where) if w is AnchorLocation.SUMMARY} == held
    assert all(w is AnchorLocation.LOST for i, w in enumerate(where) if i not in held)


def test_a_kept_absolute_path_keeps_the_relative_path_it_ends_with() -> None:
    """Found by the property above in CI: the span names /nnn/nnn.py and nnn/nnn.py, the
    summary only the first; the second survives in it as its tail."""
    anchors = anchors_of_text("Read /nnn/nnn.py\nthen nnn/nnn.py")
    assert [a.key for a in anchors] == ["/nnn/nnn.py", "nnn/nnn.py"]
    where = place(anchors, Targets(summary="Compared /nnn/nnn.py with the spec."))
    assert where == [AnchorLocation.SUMMARY, AnchorLocation.SUMMARY]
    where = place(anchors, Targets(summary="Compared nnn/nnn.py with the spec."))
    assert where == [AnchorLocation.LOST, AnchorLocation.SUMMARY]


# -- helpers --------------------------------------------------------------------------


def _user(text: str, seq: int = 0) -> Message:
    return Message(Role.USER, (ContentBlock.of_text(text),), seq=seq)


def _assistant(text: str, calls: list[tuple[str, dict[str, object]]] | None = None) -> Message:
    content = [ContentBlock.of_text(text)] if text else []
    for i, (name, args) in enumerate(calls or []):
        content.append(ContentBlock.of_tool_call(f"c{i}", name, json.dumps(args)))
    return Message(Role.ASSISTANT, tuple(content), stop_reason=StopReason.STOP)


def _best_extraction_seconds(texts: tuple[str, ...], rounds: int = 5) -> list[float]:
    """Each text's fastest of ``rounds`` extractions, in CPU seconds of this thread: wall time
    counts the moments the host gives the thread to another process, and a parallel test run
    made a linear 4x text look 11.5x slower. The texts are taken in turn in every round."""
    best = [float("inf")] * len(texts)
    for _ in range(rounds):
        for i, text in enumerate(texts):
            started = time.thread_time()
            anchors_of_text(text)
            best[i] = min(best[i], time.thread_time() - started)
    return best


@pytest.mark.parametrize("unit", ["\n", " \n", "\r\n", "\t\n- \n"])
def test_extraction_is_linear_in_blank_lines(unit: str) -> None:
    """Found by the structured fuzzer (an AppendMessages that auto-compacted a message of
    20,000 newlines ran out of its 20 s deadline): the unchecked-item pattern started
    ``\\s*`` at every line start, O(n²) in blank lines. Eight times the text costs about
    eight times the CPU time; quadratic would be sixty-four (the old pattern: 54-59x). The
    bound of 24 is three times the linear ratio."""
    small, big = _best_extraction_seconds((unit * 2_000, unit * 16_000))
    ratio = big / max(small, 1e-6)
    assert ratio < 24, f"8x the text took {ratio:.1f}x the time"
