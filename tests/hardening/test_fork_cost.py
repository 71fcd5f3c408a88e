"""ForkSession of a hot session at its end does no work per message of its history:
the fork shares the source's view entries and the view built so far, so forking and
the fork's first BuildModelInput cost the same for 100 or 20,000 kept messages.
Counted, not timed: every message a view entry is derived for or fed to a view
builder goes through one of two functions, counted here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ctxwarden.core import context as context_module
from ctxwarden.core import view as view_module
from ctxwarden.core.clearing import view_entry
from ctxwarden.core.messages import Message
from tests.support.inproc import assistant_msg, new_session, replica, tool_result_msg, user_msg


def _history(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        if i % 4 == 0:
            out.append(user_msg(f"question {i}"))
        elif i % 4 == 1:
            out.append(assistant_msg("", calls=((f"c{i}", "read", '{"path": "a.py"}'),)))
        elif i % 4 == 2:
            out.append(tool_result_msg(f"c{i - 1}", f"result {i}"))
        else:
            out.append(assistant_msg(f"answer {i}"))
    return out


class Counted:
    def __init__(self) -> None:
        self.calls = 0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return fn(*args, **kwargs)

        return counted


@pytest.fixture
def per_message_work(monkeypatch: pytest.MonkeyPatch) -> Counted:
    counter = Counted()
    monkeypatch.setattr(context_module, "view_entry", counter.wrap(view_entry))
    monkeypatch.setattr(view_module, "_digest", counter.wrap(view_module._digest))
    return counter


async def test_a_hot_fork_at_the_end_does_no_work_per_message(
    backend_url: str, per_message_work: Counted
) -> None:
    async with replica(backend_url) as m:
        sid = await new_session(m, model="gpt-4o")
        history = _history(20_000)
        for k in range(0, len(history), 1000):
            await m.append(sid, history[k : k + 1000], None, None)
        source = await m.build_model_input(sid, 0)  # hot, its view built
        per_message_work.calls = 0
        fork = await m.fork_session(sid, 0, "", None)
        first = await m.build_model_input(fork.session_id, 0)
        assert per_message_work.calls <= 10, per_message_work.calls
        assert first.messages == source.messages and fork.last_seq == 20_000
        # The two then go their own ways, each unchanged by the other.
        await m.append(fork.session_id, [user_msg("fork only")], None, None)
        await m.append(sid, [user_msg("source only")], None, None)
        assert (await m.build_model_input(sid, 0)).messages[-1].text == "source only"
        forked = await m.build_model_input(fork.session_id, 0)
        assert forked.messages[-1].text == "fork only"
        assert forked.messages[:-1] == source.messages
