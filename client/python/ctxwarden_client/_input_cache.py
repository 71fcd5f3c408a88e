"""The client-side half of incremental BuildModelInput."""

from __future__ import annotations

from .v1 import context_service_pb2

INPUT_CACHE_SESSIONS = 64


class InputCache:
    """The last model input of recently used sessions, for incremental BuildModelInput.

    The server sends only the messages after those the client already holds
    (ModelInput.messages_offset); this puts the held ones back in front. The
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
