"""The append path's copies (core.fast_replace) are dataclasses.replace's, and the
written-out ledger arithmetic covers every field."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from ctxwarden.core.fast_replace import replacer
from ctxwarden.core.messages import ContentBlock, Message, Role, Usage, Visibility
from ctxwarden.core.session import Session
from ctxwarden.core.usage_ledger import TokenTotals


def test_a_replacer_copies_as_replace_does() -> None:
    rng = random.Random(5)
    copy_message, copy_session = replacer(Message), replacer(Session)
    m = Message(Role.ASSISTANT, (ContentBlock.of_text("hi"),), usage=Usage(1, 2, 3, 4, 10, 0))
    s = Session(session_id="s", title="t", version=4)
    for _ in range(200):
        changes: dict[str, Any] = {
            "seq": rng.randrange(100),
            "token_count": rng.randrange(100),
            "visibility": rng.choice(list(Visibility)),
            "metadata": {"k": str(rng.random())},
        }
        picked = dict(rng.sample(sorted(changes.items()), rng.randrange(len(changes) + 1)))
        assert copy_message(m, **picked) == dataclasses.replace(m, **picked)
        version = rng.randrange(9)
        assert copy_session(s, version=version) == dataclasses.replace(s, version=version)
    assert copy_message(m) == m and copy_message(m) is not m
    assert copy_session(s, last_seq=7) == dataclasses.replace(s, last_seq=7)


def test_a_replacer_refuses_an_unknown_field_and_a_class_it_cannot_copy() -> None:
    with pytest.raises(TypeError):
        replacer(Message)(Message(Role.USER), no_such_field=1)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Derived:
        a: int
        b: int = dataclasses.field(init=False, default=0)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("a < 0")

    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        a: int

    for cls in (Derived, Checked, Mutable, Unslotted):
        with pytest.raises(TypeError, match="cannot copy"):
            replacer(cls)


def test_a_copy_is_as_frozen_as_the_original() -> None:
    s = Session(session_id="s", title="t", version=4)
    copy = replacer(Session)(s, version=5)
    assert type(copy) is Session and copy == dataclasses.replace(s, version=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.version = 6  # type: ignore[misc]


def test_token_totals_add_and_list_every_field() -> None:
    n = len(dataclasses.fields(TokenTotals))
    a = TokenTotals(*range(1, n + 1))
    b = TokenTotals(*range(10, 10 * (n + 1), 10))
    assert a.counts() == tuple(range(1, n + 1))
    assert (a + b).counts() == tuple(x + y for x, y in zip(a.counts(), b.counts(), strict=True))
