"""The List* RPCs: which call fetches the next page, and the items of each page.

Both clients walk a :class:`Pages` the same way; only fetching a page differs
(a blocking call or an awaited one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Generic, Protocol, TypeVar

from google.protobuf import timestamp_pb2

from ._calls import Call
from .v1 import context_service_pb2 as pb
from .v1 import message_pb2, session_pb2


class Page(Protocol):
    @property
    def next_page_token(self) -> str: ...


Req = TypeVar("Req")
PageT = TypeVar("PageT", bound=Page)
Item = TypeVar("Item")


class Pages(Generic[Req, PageT, Item]):
    """The pages of one listing, fetched lazily from ``first_token`` (empty: the first page)::

    while (call := pages.next_call()) is not None:
        items = pages.items(<make call>)
    """

    def __init__(
        self,
        call_for: Callable[[str], Call[Req, PageT]],
        items: Callable[[PageT], Iterable[Item]],
        first_token: str = "",
    ) -> None:
        self._call_for = call_for
        self._items = items
        self._token: str | None = first_token

    def next_call(self) -> Call[Req, PageT] | None:
        """The call that fetches the next page; None after the last page."""
        return None if self._token is None else self._call_for(self._token)

    def items(self, page: PageT) -> Iterable[Item]:
        """The items of ``page``, the response to the last :meth:`next_call`."""
        self._token = page.next_page_token or None
        return self._items(page)


def list_sessions(
    user_id: str, project_id: str, page_size: int, page_token: str, parent_session_id: str = ""
) -> Pages[pb.ListSessionsRequest, pb.ListSessionsResponse, session_pb2.Session]:
    def call_for(token: str) -> Call[pb.ListSessionsRequest, pb.ListSessionsResponse]:
        request = pb.ListSessionsRequest(
            user_id=user_id,
            project_id=project_id,
            page_size=page_size,
            page_token=token,
            parent_session_id=parent_session_id,
        )
        return Call(lambda stub: stub.ListSessions, request, safe=True)

    return Pages(call_for, lambda page: page.sessions, page_token)


def list_messages(
    session_id: str,
    include_rolled_back: bool,
    page_size: int,
    page_token: str,
    newest_first: bool = False,
    after_seq: int | None = None,
    after_time: datetime | timestamp_pb2.Timestamp | None = None,
) -> Pages[pb.ListMessagesRequest, pb.ListMessagesResponse, message_pb2.Message]:
    """``after_time``: a Timestamp, or a datetime (a naive one is taken as UTC)."""
    when: timestamp_pb2.Timestamp | None = None
    if isinstance(after_time, datetime):
        when = timestamp_pb2.Timestamp()
        utc = after_time if after_time.tzinfo else after_time.replace(tzinfo=UTC)
        when.FromDatetime(utc)
    elif after_time is not None:
        when = after_time

    def call_for(token: str) -> Call[pb.ListMessagesRequest, pb.ListMessagesResponse]:
        request = pb.ListMessagesRequest(
            session_id=session_id,
            page_size=page_size,
            page_token=token,
            include_rolled_back=include_rolled_back,
            newest_first=newest_first,
        )
        if after_seq is not None:
            request.after_seq = after_seq
        if when is not None:
            request.after_time.CopyFrom(when)
        return Call(lambda stub: stub.ListMessages, request, safe=True)

    return Pages(call_for, lambda page: page.messages, page_token)


def list_compactions(
    session_id: str, page_size: int, page_token: str
) -> Pages[pb.ListCompactionsRequest, pb.ListCompactionsResponse, pb.Compaction]:
    def call_for(token: str) -> Call[pb.ListCompactionsRequest, pb.ListCompactionsResponse]:
        request = pb.ListCompactionsRequest(
            session_id=session_id, page_size=page_size, page_token=token
        )
        return Call(lambda stub: stub.ListCompactions, request, safe=True)

    return Pages(call_for, lambda page: page.compactions, page_token)
