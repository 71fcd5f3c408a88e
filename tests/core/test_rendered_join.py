"""A rendering's JSON joined a chunk at a time is the JSON joined at once."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.core.rendered import Rendered

texts = st.text(max_size=6)


@given(
    head=texts,
    items=st.lists(texts, max_size=40),
    tail=texts,
    chunk=st.integers(min_value=1, max_value=50),
)
def test_joined_in_steps_is_joined_at_once(
    head: str, items: list[str], tail: str, chunk: int
) -> None:
    stepped = Rendered(None, parts=(head, items, tail))
    steps = sum(1 for _ in stepped.join_steps(chunk))
    assert steps == -(-len(items) // chunk)  # one step per chunk: the caller may pause
    whole = Rendered(None, parts=(head, items, tail))
    assert stepped.json == whole.json == head + ",".join(items) + tail
    assert list(stepped.join_steps(chunk)) == []  # joined: nothing left to do
