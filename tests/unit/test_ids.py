"""Sortable IDs: the fast encoding equals the plain ULID digit-by-digit one."""

from __future__ import annotations

import random

from ctxwarden.util import ids


def _digits(value: int) -> str:
    out = []
    for _ in range(26):
        out.append(ids._ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def test_encoding_matches_the_ulid_digits() -> None:
    rng = random.Random(7)
    for value in [0, 1, 2**130 - 1, *(rng.getrandbits(130) for _ in range(5000))]:
        assert ids.encode(value) == _digits(value)


def test_ids_are_unique_and_sorted_by_time() -> None:
    made = [ids.new_id() for _ in range(2000)]
    assert len(set(made)) == len(made)
    assert all(len(x) == 26 and set(x) <= set(ids._ALPHABET) for x in made)
    assert [x[:10] for x in made] == sorted(x[:10] for x in made)  # the time part
