"""What is stored is what is checked: any accepted message can be written (MariaDB
with its default max_allowed_packet included), and one bad request never fails
another's write."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select

from ctxwarden.config import Limits
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.session import Session
from ctxwarden.service.manager import SessionManager
from ctxwarden.service.pages import MessageFilter
from ctxwarden.store.errors import StoreRejected
from ctxwarden.store.models import MessageRow
from ctxwarden.util import ids
from tests.support.inproc import assistant_msg, new_session, replica, user_msg

MiB = 1024 * 1024


async def _stored_size(m: SessionManager, sid: str) -> int:
    async with m.store.engine.connect() as conn:
        size = (
            await conn.execute(
                select(func.max(func.length(MessageRow.data))).where(MessageRow.session_id == sid)
            )
        ).scalar_one()
    return int(size or 0)


@pytest.mark.parametrize(
    ("char", "size"),
    [("\x01", 3 * MiB), ('"', 5 * MiB), ("\\", int(7.9 * MiB)), ("'", int(7.5 * MiB))],
    ids=["U+0001", "quote", "backslash", "apostrophe"],
)
async def test_escape_heavy_messages_are_stored_at_their_own_size(
    backend_url: str, char: str, size: int
) -> None:
    async with replica(backend_url) as m:
        other = await new_session(m, "other-tenant", f"o-{ids.new_id()}")
        sid = await new_session(m)
        text = char * size
        big = m.append(sid, [user_msg(text)], None, None)
        small = [m.append(other, [user_msg(f"hi {i}")], None, None) for i in range(5)]
        results = await asyncio.gather(big, *small)
        assert all(r.last_seq >= 1 for r in results)
        stored = await _stored_size(m, sid)
        assert size <= stored <= size + 200  # no escaping blow-up
        m.hot.evict(sid)
        listed, _ = await m.list_messages(sid, 1, "", MessageFilter())
        assert listed[0].text == text


async def test_a_message_over_the_limit_as_stored_is_refused_up_front(backend_url: str) -> None:
    limit = 64 * 1024
    async with replica(backend_url, limits=Limits(max_message_bytes=limit)) as m:
        sid = await new_session(m)
        with pytest.raises(InvalidArgument) as info:
            await m.append(sid, [user_msg("x" * (limit + 1))], None, None)
        assert info.value.reason == "MESSAGE_TOO_LARGE"
        assert f"{limit:,}" in info.value.message
        assert (await m.get_session(sid)).last_seq == 0
        await m.append(sid, [user_msg("x" * (limit - 100))], None, None)


async def test_deep_tool_arguments_are_refused_at_ingest(backend_url: str) -> None:
    async with replica(backend_url) as m:
        sid = await new_session(m)
        deep = '{"a":' * 975 + "1" + "}" * 975
        call = assistant_msg("", calls=(("c1", "read", deep),))
        with pytest.raises(InvalidArgument) as info:
            await m.append(sid, [call], None, None)
        assert info.value.reason == "JSON_TOO_DEEP"
        ok = '{"a":' * 60 + "1" + "}" * 60
        await m.append(sid, [assistant_msg("", calls=(("c1", "read", ok),))], None, None)
        view = await m.build_model_input(sid, 0, auto_compact=True)
        assert len(view.messages) == 2  # the call and its synthetic result


def test_deep_tool_parameters_are_refused() -> None:
    from ctxwarden.api.convert_session import tool_from_pb
    from ctxwarden.v1 import session_pb2

    deep = '{"a":' * 100 + "1" + "}" * 100
    with pytest.raises(InvalidArgument) as info:
        tool_from_pb(session_pb2.ToolDefinition(name="t", parameters_json=deep), "tools[0]")
    assert info.value.reason == "JSON_TOO_DEEP"


@pytest.mark.parametrize("backend_url", ["mysql"], indirect=True)
async def test_a_row_the_database_refuses_fails_only_its_own_append(backend_url: str) -> None:
    """A per-row database error (here a message_id the column cannot hold, which
    only MySQL enforces) fails its own append alone, never its batch mates."""
    async with replica(backend_url) as m:
        repo = m.store
        sids = [await new_session(m) for _ in range(8)]
        ops = []
        for i, sid in enumerate(sids):
            msg = Message(
                role=Role.USER,
                content=(ContentBlock(ContentKind.TEXT, text=f"m{i}"),),
                seq=1,
                message_id=("x" * 300) if i == 3 else ids.new_id(),
                create_time_us=ids.now_us(),
            )
            session = Session(session_id=sid, last_seq=1, version=2, update_time_us=ids.now_us())
            ops.append(
                repo.messages.encode_append(
                    session, expected_version=1, messages=[msg], record=None
                )
            )
        results = await asyncio.gather(
            *(repo.messages.append(op) for op in ops), return_exceptions=True
        )
        for i, result in enumerate(results):
            if i == 3:
                assert isinstance(result, StoreRejected), result
            else:
                assert result is None, result


async def test_message_pages_read_no_more_than_their_byte_budget(backend_url: str) -> None:
    async with replica(backend_url) as m:
        sid = await new_session(m)
        for i in range(6):
            await m.append(sid, [user_msg(str(i) * (3 * MiB // 2))], None, None)
        pages: list[list[str]] = []
        token = ""
        while True:
            rows, token = await m.list_messages(sid, 1000, token, MessageFilter())
            pages.append([r.text[0] for r in rows])
            if not token:
                break
        assert pages == [["0", "1"], ["2", "3"], ["4", "5"]]
