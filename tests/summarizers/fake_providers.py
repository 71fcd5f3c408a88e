"""Fake LLM provider servers speaking the real OpenAI and Anthropic wire formats.

A real HTTP server on ``127.0.0.1`` (random port) in a background thread, so
it serves clients in any event loop, thread or process (a ctxwarden server
subprocess included). Every request is recorded (path, headers, parsed
JSON body) and every reply too. It can be scripted to fail the next N
requests with a status, to be slow, or to reject a body parameter the way
OpenAI rejects ``max_tokens`` for reasoning models.

Use the context managers here, or the ``fake_openai`` / ``fake_anthropic``
fixtures of ``tests/summarizers/conftest.py`` (import them into another
conftest to share them)::

    with FakeProvider("openai") as fake:
        fake.reply_text = "## Goal\\n..."
        fake.fail_next(2, 429)
        summarizer = OpenAIChatSummarizer(fake.base_url, "gpt-4o-mini", "sk-test")
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Kind = Literal["openai", "anthropic"]

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"

# Status -> (error type, code, message), as OpenAI sends them.
_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: (
        "invalid_request_error",
        "invalid_api_key",
        "Incorrect API key provided: sk-***. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
    ),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Forbidden."),
    404: ("invalid_request_error", "model_not_found", "The model does not exist."),
    429: (
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests. Please try again in 1s.",
    ),
    500: (
        "server_error",
        None,
        "The server had an error while processing your request. Sorry about that!",
    ),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}

# Status -> (error type, message), as Anthropic sends them.
_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: (
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
    500: ("api_error", "Internal server error"),
    504: ("timeout_error", "Request timed out"),
    529: ("overloaded_error", "Overloaded"),
}


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: Any
    """The parsed JSON body, or None when it was not JSON."""


@dataclass(frozen=True)
class RecordedResponse:
    status: int
    headers: dict[str, str]
    body: Any


@dataclass
class _Failure:
    status: int
    retry_after: str | None
    message: str | None


@dataclass
class _Script:
    failures: list[_Failure] = field(default_factory=list)
    slow: list[float] = field(default_factory=list)


class FakeProvider:
    """One fake provider. ``kind`` picks the wire format and the path served."""

    def __init__(self, kind: Kind, *, api_key: str | None = None) -> None:
        self.kind: Kind = kind
        self.api_key = api_key
        """When set, requests without exactly this key get the provider's 401."""
        self.reply_text = "fake summary"
        self.finish_reason = "stop" if kind == "openai" else "end_turn"
        """OpenAI ``finish_reason`` or Anthropic ``stop_reason`` of successful replies."""
        self.reply_json: dict[str, Any] | None = None
        """Sent as is instead of the generated successful reply."""
        self.delay = 0.0
        """Seconds every request waits before being answered."""
        self.unsupported_parameters: set[str] = set()
        """Body fields answered with OpenAI's "Unsupported parameter" 400."""
        self.requests: list[RecordedRequest] = []
        self.responses: list[RecordedResponse] = []
        self._script = _Script()
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._closing = threading.Event()
        self._ids = itertools.count(1)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"fake-{kind}",
            daemon=True,
        )

    # --- lifecycle -----------------------------------------------------------

    def start(self) -> FakeProvider:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- addresses -----------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What a client is configured with: ``.../v1`` for OpenAI, the origin for Anthropic."""
        return f"{self.origin}/v1" if self.kind == "openai" else self.origin

    # --- scripting -----------------------------------------------------------

    def fail_next(
        self,
        n: int,
        status: int,
        *,
        retry_after: str | None = "0",
        message: str | None = None,
    ) -> None:
        """Answer the next ``n`` requests with ``status`` in the provider's error
        format. ``retry_after`` is sent as ``Retry-After`` on 429 and 5xx."""
        with self._lock:
            self._script.failures.extend(_Failure(status, retry_after, message) for _ in range(n))

    def slow_next(self, n: int, seconds: float) -> None:
        """Make the next ``n`` requests wait ``seconds`` before being answered."""
        with self._lock:
            self._script.slow.extend([seconds] * n)

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> int:
        """Block until ``n`` requests were recorded (or ``timeout``); how many were.

        A client that gave up on a request (its timeout) may have sent it before
        this server, busy on a loaded host, got to read it: it is recorded later."""
        with self._arrived:
            self._arrived.wait_for(lambda: len(self.requests) >= n, timeout)
            return len(self.requests)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.responses.clear()
            self._script = _Script()

    # --- serving -------------------------------------------------------------

    def _handle(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict[str, str], Any]:
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(RecordedRequest(method, path, headers, body))
            self._arrived.notify_all()
            failure = self._script.failures.pop(0) if self._script.failures else None
            slow = self._script.slow.pop(0) if self._script.slow else 0.0
        wait = max(slow, self.delay)
        if wait > 0:
            self._closing.wait(wait)
        if self.kind == "openai":
            status, extra, reply = self._openai(method, path, headers, body, failure)
        else:
            status, extra, reply = self._anthropic(method, path, headers, body, failure)
        with self._lock:
            self.responses.append(RecordedResponse(status, extra, reply))
        return status, extra, reply

    def _retry_headers(self, status: int, failure: _Failure | None) -> dict[str, str]:
        if failure is None or failure.retry_after is None:
            return {}
        if status == 429 or status >= 500:
            return {"retry-after": failure.retry_after}
        return {}

    # OpenAI ------------------------------------------------------------------

    def _openai_error(
        self,
        status: int,
        message: str | None = None,
        *,
        param: str | None = None,
        code: str | None = None,
        failure: _Failure | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        kind, default_code, default_message = _OPENAI_ERRORS.get(
            status, ("server_error" if status >= 500 else "invalid_request_error", None, "Error.")
        )
        error = {
            "message": message or default_message,
            "type": kind,
            "param": param,
            "code": code if code is not None else default_code,
        }
        return status, self._retry_headers(status, failure), {"error": error}

    def _openai(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: Any,
        failure: _Failure | None,
    ) -> tuple[int, dict[str, str], Any]:
        if method != "POST" or path != OPENAI_PATH:
            return self._openai_error(404, f"Invalid URL ({method} {path})", code=None)
        if self.api_key is not None:
            auth = headers.get("authorization", "")
            if not auth:
                return self._openai_error(
                    401,
                    "You didn't provide an API key. You need to provide your API key in an "
                    "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                    code=None,
                )
            if auth != f"Bearer {self.api_key}":
                return self._openai_error(401)
        if failure is not None:
            return self._openai_error(failure.status, failure.message, failure=failure)
        if not isinstance(body, dict):
            return self._openai_error(
                400,
                "We could not parse the JSON body of your request.",
            )
        if not isinstance(body.get("model"), str) or not body["model"]:
            return self._openai_error(400, "you must provide a model parameter")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return self._openai_error(
                400, "[] is too short - 'messages'", param="messages", code="empty_array"
            )
        for name in sorted(self.unsupported_parameters):
            if name in body:
                other = "max_completion_tokens" if name == "max_tokens" else "max_tokens"
                return self._openai_error(
                    400,
                    f"Unsupported parameter: '{name}' is not supported with this model. "
                    f"Use '{other}' instead.",
                    param=name,
                    code="unsupported_parameter",
                )
        if self.reply_json is not None:
            return 200, {}, self.reply_json
        prompt_tokens = sum(len(str(m.get("content", ""))) for m in messages) // 4 + 1
        completion_tokens = len(self.reply_text) // 4 + 1
        return (
            200,
            {"x-request-id": f"req_{next(self._ids):08d}"},
            {
                "id": f"chatcmpl-fake{next(self._ids):06d}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": self.reply_text,
                            "refusal": None,
                            "annotations": [],
                        },
                        "logprobs": None,
                        "finish_reason": self.finish_reason,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
                "service_tier": "default",
                "system_fingerprint": "fp_fake",
            },
        )

    # Anthropic ---------------------------------------------------------------

    def _anthropic_error(
        self, status: int, message: str | None = None, *, failure: _Failure | None = None
    ) -> tuple[int, dict[str, str], Any]:
        kind, default_message = _ANTHROPIC_ERRORS.get(
            status, ("api_error" if status >= 500 else "invalid_request_error", "Error.")
        )
        request_id = f"req_fake{next(self._ids):08d}"
        headers = {"request-id": request_id, **self._retry_headers(status, failure)}
        if status == 529:
            headers["x-should-retry"] = "true"
        return (
            status,
            headers,
            {
                "type": "error",
                "error": {"type": kind, "message": message or default_message},
                "request_id": request_id,
            },
        )

    def _anthropic(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: Any,
        failure: _Failure | None,
    ) -> tuple[int, dict[str, str], Any]:
        if method != "POST" or path != ANTHROPIC_PATH:
            return self._anthropic_error(404, f"Not Found: {method} {path}")
        if self.api_key is not None:
            # The documented header is x-api-key; newer official SDKs send the
            # same key as "Authorization: Bearer", which the API accepts too.
            key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix(
                "Bearer "
            )
            if not key:
                return self._anthropic_error(401, "x-api-key header is required")
            if key != self.api_key:
                return self._anthropic_error(401, "invalid x-api-key")
        if not headers.get("anthropic-version"):
            return self._anthropic_error(400, "anthropic-version: header is required")
        if failure is not None:
            return self._anthropic_error(failure.status, failure.message, failure=failure)
        if not isinstance(body, dict):
            return self._anthropic_error(400, "There was an error parsing the body as JSON")
        for required in ("model", "max_tokens", "messages"):
            if required not in body:
                return self._anthropic_error(400, f"{required}: Field required")
        if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
            return self._anthropic_error(400, "max_tokens: Input should be a valid integer >= 1")
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            return self._anthropic_error(400, "messages: at least one message is required")
        if messages[0].get("role") != "user":
            return self._anthropic_error(400, "messages: first message must use the 'user' role")
        if "system" in body and not isinstance(body["system"], (str, list)):
            return self._anthropic_error(400, "system: Input should be a valid string")
        request_id = f"req_fake{next(self._ids):08d}"
        if self.reply_json is not None:
            return 200, {"request-id": request_id}, self.reply_json
        input_tokens = (len(str(body.get("system", ""))) + len(json.dumps(messages))) // 4 + 1
        return (
            200,
            {"request-id": request_id},
            {
                "id": f"msg_fake{next(self._ids):012d}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": self.reply_text}],
                "stop_reason": self.finish_reason,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": input_tokens,
                    "output_tokens": len(self.reply_text) // 4 + 1,
                },
            },
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeProvider

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout test) leaves a broken pipe behind.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, delayed
        # ACKs add ~40 ms to every reply on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        path = self.path.split("?", 1)[0]
        status, extra, reply = self.server.fake._handle(self.command, path, headers, raw)
        data = json.dumps(reply).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_POST = _serve
    do_GET = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def fake_openai_server(*, api_key: str | None = None) -> Iterator[FakeProvider]:
    with FakeProvider("openai", api_key=api_key) as fake:
        yield fake


@contextmanager
def fake_anthropic_server(*, api_key: str | None = None) -> Iterator[FakeProvider]:
    with FakeProvider("anthropic", api_key=api_key) as fake:
        yield fake
