"""A StreamMessages client to be killed mid-stream by a test.

Run as ``python stream_client.py TARGET SESSION_ID REQUESTS [STALL_AFTER]``: it
streams REQUESTS appends of MESSAGES_PER_REQUEST messages each
(``stream_request``), as fast as flow control lets it, and prints
``ack <index> <last_seq>`` for every acknowledged request, flushed, so the
parent knows exactly what was acknowledged when it sends SIGKILL. With
STALL_AFTER it stops reading after that many acknowledgements (printing
``stalled``) with a small receive window, so the server ends up blocked
sending its answers: a slow reader.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m

MESSAGES_PER_REQUEST = 3
FILLER = "streamed while the client may vanish at any moment; " * 16
SLOW_READER_OPTIONS = [("grpc.http2.lookahead_bytes", 4096), ("grpc.http2.bdp_probe", 0)]
"""A small receive window that does not grow: unread answers soon block the server."""


def message_id(request: int, k: int) -> str:
    return f"s{request:05d}-{k}"


def stream_request(session_id: str, request: int) -> pb.AppendMessagesRequest:
    """Request ``request`` of a stream: MESSAGES_PER_REQUEST user messages with known IDs."""
    messages = [
        m.Message(
            role=m.ROLE_USER,
            message_id=message_id(request, k),
            content=[m.ContentBlock(text=m.TextContent(text=f"{request}/{k}: {FILLER}"))],
        )
        for k in range(MESSAGES_PER_REQUEST)
    ]
    return pb.AppendMessagesRequest(session_id=session_id, messages=messages)


def _requests(session_id: str, n: int) -> Iterator[pb.AppendMessagesRequest]:
    for i in range(n):
        yield stream_request(session_id, i)


def main(argv: list[str]) -> int:
    target, session_id, n = argv[1], argv[2], int(argv[3])
    stall_after = int(argv[4]) if len(argv) > 4 else 0
    options = SLOW_READER_OPTIONS if stall_after else []
    with grpc.insecure_channel(target, options=options) as channel:
        stub = pb_grpc.ContextServiceStub(channel)
        for i, resp in enumerate(stub.StreamMessages(_requests(session_id, n), timeout=120)):
            print(f"ack {i} {resp.last_seq}", flush=True)
            if i + 1 == stall_after:
                print("stalled", flush=True)
                time.sleep(120)  # never read again; the parent kills us
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
