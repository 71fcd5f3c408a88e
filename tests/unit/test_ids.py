"""Sortable IDs: the fast encoding equals the plain ULID digit-by-digit one."""

from __future__ import annotations

import os
import random
import threading

import pytest

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


def test_an_id_is_its_milliseconds_and_its_random_bytes_encoded() -> None:
    ids._source.random, ids._source.pos = bytes(range(10)) * 400, 0
    made = ids.new_id()
    ms = ids._source.ms
    assert made == ids.encode(ms << 80 | int.from_bytes(bytes(range(10)), "big"))
    ids._forget_random()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    ids.new_id()  # random bytes read and mostly unused: what a child would inherit
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its IDs to the parent, then gone at once
        try:
            os.write(write, "".join(ids.new_id() for _ in range(50)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    parent = {ids.new_id()[10:] for _ in range(50)}
    assert len(child) == 50 * 26
    assert parent.isdisjoint(child[i + 10 : i + 26] for i in range(0, len(child), 26))


def test_threads_draw_their_own_random_bytes() -> None:
    made: list[list[str]] = [[] for _ in range(4)]

    def draw(out: list[str]) -> None:
        out.extend(ids.new_id() for _ in range(3000))

    threads = [threading.Thread(target=draw, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [x for out in made for x in out]
    assert len(set(every)) == len(every) == 12000
