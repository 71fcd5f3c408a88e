"""The operators' gRPC client (the same calls and credentials as any client) and
the plain table the commands print."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TextIO

import grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc


class Admin:
    def __init__(self, target: str, api_key: str = "", timeout: float = 30.0) -> None:
        self.channel = grpc.insecure_channel(target)
        self.stub = pb_grpc.ContextServiceStub(self.channel)
        self.metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def call(self, method: str, request: Any) -> Any:
        return getattr(self.stub, method)(request, metadata=self.metadata, timeout=self.timeout)

    def sessions(self, user_id: str = "", project_id: str = "") -> Iterator[Any]:
        token = ""
        while True:
            page = self.call(
                "ListSessions",
                pb.ListSessionsRequest(
                    user_id=user_id, project_id=project_id, page_size=200, page_token=token
                ),
            )
            yield from page.sessions
            token = page.next_page_token
            if not token:
                return

    def history(self, session_id: str) -> Iterator[Any]:
        token = ""
        while True:
            page = self.call(
                "ListMessages",
                pb.ListMessagesRequest(
                    session_id=session_id,
                    page_size=1000,
                    page_token=token,
                    include_rolled_back=True,
                ),
            )
            yield from page.messages
            token = page.next_page_token
            if not token:
                return


def table(rows: Sequence[Sequence[object]], headers: Sequence[str], out: TextIO) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, r in enumerate(cells):
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
        if n == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")
