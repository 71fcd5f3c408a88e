"""A fake OpenAI Responses endpoint (POST /v1/responses) built from the SDK's types.

Turn 1 answers with a function call to ``read``; once the conversation holds its
output, it answers with text. Every request body is recorded for the test.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from openai.types import responses as orr
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails


def _response(output: list[orr.ResponseOutputItem], n: int) -> orr.Response:
    return orr.Response(
        id=f"resp_{n}",
        object="response",
        created_at=1,
        model="gpt-5",
        output=output,
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
        status="completed",
        usage=orr.ResponseUsage(
            input_tokens=100 + n,
            input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
            output_tokens=20,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            total_tokens=120 + n,
        ),
    )


def answer(body: dict[str, Any], n: int) -> orr.Response:
    answered = any(item.get("type") == "function_call_output" for item in body["input"])
    if not answered:
        call = orr.ResponseFunctionToolCall(
            type="function_call",
            id="fc_1",
            call_id="call_1",
            name="read",
            arguments='{"path":"a.py"}',
            status="completed",
        )
        return _response([call], n)
    text = orr.ResponseOutputText(type="output_text", text="a.py prints 1.", annotations=[])
    message = orr.ResponseOutputMessage(
        type="message", id="msg_2", role="assistant", status="completed", content=[text]
    )
    return _response([message], n)


@contextmanager
def serving() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The base URL (``http://127.0.0.1:PORT/v1``) and the request bodies received."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append(body)
            data = answer(body, len(received)).model_dump_json(exclude_none=True).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", received
    finally:
        server.shutdown()
        server.server_close()
