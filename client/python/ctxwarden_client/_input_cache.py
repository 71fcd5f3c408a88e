"""The client-side half of incremental BuildModelInput."""

from __future__ import annotations

from .v1 import context_service_pb2

INPUT_CACHE_SESSIONS = 64


class InputCache:
    """The last model input of recently used sessions, for incremental BuildModelInput.

    The server sends only the messages after those the client already holds
    (ModelInput.messages_offset), or, for a rendered format, only the rendered
    JSON after the part the client holds (ModelInput.rendered_prefix_bytes);
    this puts the held part back in front. The
    cached input is updated in place, so the object returned for a session is
    the one the next incremental call for that session changes.
    """

    def __init__(self, capacity: int = INPUT_CACHE_SESSIONS) -> None:
        self._capacity = capacity
        self._inputs: dict[str, context_service_pb2.ModelInput] = {}

    def token(self, session_id: str) -> str:
        held = self._inputs.get(session_id)
        return held.resume_token if held is not None else ""

    def merge(
        self, session_id: str, received: context_service_pb2.ModelInput
    ) -> context_service_pb2.ModelInput:
        offset = received.messages_offset
        held = self._inputs.pop(session_id, None)
        if received.rendered_prefix_bytes:
            received.rendered_json = _splice(held, received)
            received.rendered_prefix_bytes = 0
        if offset == 0 or held is None or offset > len(held.messages):
            if offset != 0:
                raise ValueError("the server resumed an input this client does not hold")
            merged = received
        else:
            # Copying protobuf messages is slow in Python: keep the held
            # messages, replace everything else.
            del held.messages[offset:]
            held.messages.extend(received.messages)
            for field in received.DESCRIPTOR.fields:
                if field.name != "messages":
                    held.ClearField(field.name)  # type: ignore[arg-type]
            del received.messages[:]
            held.MergeFrom(received)
            held.messages_offset = 0
            merged = held
        self._inputs[session_id] = merged
        while len(self._inputs) > self._capacity:
            del self._inputs[next(iter(self._inputs))]
        return merged

    def forget(self, session_id: str) -> None:
        self._inputs.pop(session_id, None)


def _splice(
    held: context_service_pb2.ModelInput | None, received: context_service_pb2.ModelInput
) -> str:
    """The whole rendered JSON: the held one's first rendered_prefix_bytes
    bytes (UTF-8), then what was received."""
    cut = received.rendered_prefix_bytes
    kept = held.rendered_json.encode() if held is not None else b""
    if held is None or cut > len(kept):
        raise ValueError(
            f"the server resumed {cut} bytes of rendered JSON, but this client holds "
            f"{'no input' if held is None else f'{len(kept)} bytes'} for the session; "
            "the held input was dropped, the next call fetches the whole input"
        )
    return (kept[:cut] + received.rendered_json.encode()).decode()
