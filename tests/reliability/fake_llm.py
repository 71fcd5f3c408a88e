"""A fake LLM provider that can also misbehave below the JSON level.

``ScriptedProvider`` is tests/summarizers' ``FakeProvider`` (real OpenAI or
Anthropic wire format, scripted failures, delays) plus replies that are not
what any provider should send: a body that is not JSON (an HTML error page
from a proxy), JSON cut off mid-body, or a connection closed without any
answer. Script them with ``raw_next``; they are used before anything else.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from tests.summarizers.fake_providers import FakeProvider, Kind, RecordedRequest, _Handler

HTML_PAGE = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
TRUNCATED_JSON = b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "mes'


@dataclass(frozen=True)
class RawReply:
    body: bytes = b""
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    close: bool = False
    """Close the connection without answering at all."""


class ScriptedProvider(FakeProvider):
    def __init__(self, kind: Kind) -> None:
        super().__init__(kind)
        self._raw: list[RawReply] = []
        self._server.RequestHandlerClass = _RawHandler

    def __enter__(self) -> ScriptedProvider:
        self.start()
        return self

    def raw_next(self, n: int, reply: RawReply) -> None:
        """Answer the next ``n`` requests with ``reply`` (before any other script)."""
        with self._lock:
            self._raw.extend([reply] * n)

    def reset(self) -> None:
        """Forget scripts and recordings, and behave again (also undoes reply_json,
        reply_text and delay)."""
        super().reset()
        with self._lock:
            self._raw.clear()
        self.reply_json = None
        self.reply_text = "## Goal\nKeep the service reliable.\n## Next Steps\n1. Continue."
        self.delay = 0.0

    def pop_raw(self, method: str, path: str, headers: dict[str, str]) -> RawReply | None:
        with self._lock:
            if not self._raw:
                return None
            self.requests.append(RecordedRequest(method, path, headers, None))
            return self._raw.pop(0)


class _RawHandler(_Handler):
    def _serve(self) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake = self.server.fake
        assert isinstance(fake, ScriptedProvider)
        raw = fake.pop_raw(self.command, self.path.split("?", 1)[0], headers)
        if raw is None:
            super()._serve()
            return
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        self.close_connection = True
        if raw.close:
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        try:
            self.send_response(raw.status)
            self.send_header("content-type", raw.content_type)
            self.send_header("content-length", str(len(raw.body)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(raw.body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_POST = _serve
    do_GET = _serve
