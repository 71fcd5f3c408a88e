"""Sliced work leaves the loop to other calls: while another call is in flight a
pause lasts as long as the slice worked; alone, it only yields one loop turn."""

from __future__ import annotations

import contextvars
from collections.abc import Callable

import pytest

from ctxwarden.service.hot import HotSessions
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.util import loop_slices


@pytest.fixture(autouse=True, params=[1, 16])
def _pausing(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """The default rule (1: any work of more than one slice pauses) and a later start
    (CTXWARDEN_LOOP_PAUSE_AFTER=16)."""
    monkeypatch.setattr(loop_slices, "PAUSE_AFTER", request.param)


class _Recorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


async def _one_pause(sleep: _Recorder) -> None:
    slicer = loop_slices.Slicer(budget=0.001, sleep=sleep)
    slicer.slices = loop_slices.PAUSE_AFTER  # long work: it pauses from now on
    slicer.started -= 0.002  # this slice worked 2 ms: a pause is at most one budget
    await slicer.pause()


async def test_alone_a_pause_is_one_loop_turn() -> None:
    sleep = _Recorder()
    token = loop_slices.call_began()  # the big call itself
    try:
        assert loop_slices.others_in_flight() == 0
        await _one_pause(sleep)
    finally:
        loop_slices.call_ended(token)
    assert sleep.delays == [0]


async def test_with_another_call_in_flight_a_pause_is_as_long_as_the_slice() -> None:
    sleep = _Recorder()
    token = loop_slices.call_began()
    try:
        other = _other_call()  # another call began elsewhere (its own context)
        try:
            assert loop_slices.others_in_flight() == 1
            slicer = loop_slices.Slicer(budget=0.005, sleep=sleep)
            slicer.slices = loop_slices.PAUSE_AFTER
            slicer.started -= 0.004  # this slice worked 4 ms
            await slicer.pause()
        finally:
            other()
        assert loop_slices.others_in_flight() == 0
        await _one_pause(sleep)
    finally:
        loop_slices.call_ended(token)
    assert sleep.delays[0] == pytest.approx(0.004, abs=0.002)
    assert sleep.delays[1] == 0


async def test_work_outside_any_call_counts_every_call_as_another() -> None:
    sleep = _Recorder()
    end = _other_call()
    try:
        assert loop_slices.others_in_flight() == 1  # e.g. a background compaction
        await _one_pause(sleep)
    finally:
        end()
    assert sleep.delays == [0.001]


async def test_short_work_never_pauses_for_others() -> None:
    """Work of PAUSE_AFTER slices or fewer only yields a turn."""
    sleep = _Recorder()
    end = _other_call()
    try:
        slicer = loop_slices.Slicer(budget=0.001, sleep=sleep)
        for _ in range(loop_slices.PAUSE_AFTER + 1):
            slicer.started -= 0.002
            await slicer.pause()
    finally:
        end()
    assert sleep.delays == [0] * loop_slices.PAUSE_AFTER + [0.001]


async def test_zero_turns_the_pause_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_slices, "PAUSE_AFTER", 0)
    sleep = _Recorder()
    end = _other_call()
    try:
        slicer = loop_slices.Slicer(budget=0.001, sleep=sleep)
        for _ in range(40):
            slicer.started -= 0.002
            await slicer.pause()
    finally:
        end()
    assert sleep.delays == [0] * 40


async def test_work_racing_a_compare_and_set_never_pauses() -> None:
    """A write's restore: a pause would widen the window another replica wins in."""
    sleep = _Recorder()
    end = _other_call()
    try:
        with loop_slices.racing():
            assert loop_slices.in_race()
            await _one_pause(sleep)
        assert not loop_slices.in_race()
        await _one_pause(sleep)  # the same work outside the race pauses again
    finally:
        end()
    assert sleep.delays == [0, 0.001]


async def test_a_writes_restore_races_and_a_reads_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bool] = []

    async def load(self: SessionRuntime, session_id: str, *, verify: bool) -> object:
        seen.append(loop_slices.in_race())
        raise LookupError("recorded")  # nothing else of the runtime is needed

    monkeypatch.setattr(SessionRuntime, "_load", load)
    rt = object.__new__(SessionRuntime)
    rt.hot = HotSessions(10, 0)
    for call in (rt.context_locked("s"), rt.context("s")):
        with pytest.raises(LookupError):
            await call
    assert seen == [True, False]


def _other_call() -> Callable[[], None]:
    """A call begun in a context of its own; returns how to end it."""
    ctx = contextvars.Context()
    token = ctx.run(loop_slices.call_began)
    return lambda: ctx.run(loop_slices.call_ended, token)
