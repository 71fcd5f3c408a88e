"""The Python client's build_model_input passes format and view through."""

from __future__ import annotations

import json

from ctxwarden_client import AsyncClient, Client, assistant, user
from ctxwarden_client.v1 import context_service_pb2 as pb

OPENAI_CHAT = pb.MODEL_INPUT_FORMAT_OPENAI_CHAT


def test_sync_client_format_and_view(server_target: str) -> None:
    with Client(server_target) as client:
        sid = client.create_session(system_prompt="Be brief.").session_id
        client.append_messages(sid, [user("hello"), assistant("hi")])
        rendered = client.build_model_input(sid, format=OPENAI_CHAT)
        assert len(rendered.messages) == 0
        roles = [m["role"] for m in json.loads(rendered.rendered_json)["messages"]]
        assert roles == ["system", "user", "assistant"]
        both = client.build_model_input(sid, format=OPENAI_CHAT, view=pb.MODEL_INPUT_VIEW_FULL)
        assert len(both.messages) == 2
        assert both.rendered_json == rendered.rendered_json
        # incremental with a format: the server sends the rendered JSON after the
        # part held, the client splices; what comes out is the whole input.
        first = client.build_model_input(sid, format=OPENAI_CHAT, incremental=True)
        assert first.resume_token.startswith("r2.")
        client.append_messages(sid, [user("again ✓")])
        again = client.build_model_input(sid, format=OPENAI_CHAT, incremental=True)
        plain = client.build_model_input(sid, format=OPENAI_CHAT)
        assert again.rendered_json == plain.rendered_json
        assert again.rendered_prefix_bytes == 0
        assert len(json.loads(again.rendered_json)["messages"]) == 4
        raw = client.build_model_input(sid, format=OPENAI_CHAT, resume_token=first.resume_token)
        assert 0 < raw.rendered_prefix_bytes < len(plain.rendered_json.encode())
        assert len(raw.rendered_json) < len(plain.rendered_json)


async def test_async_client_format_and_view(server_target: str) -> None:
    async with AsyncClient(server_target) as client:
        sid = (await client.create_session()).session_id
        await client.append_messages(sid, [user("hello")])
        basic = await client.build_model_input(sid, view=pb.MODEL_INPUT_VIEW_BASIC)
        assert len(basic.messages) == 0
        assert basic.tokens.total_tokens > 0
        full = await client.build_model_input(
            sid, format=pb.MODEL_INPUT_FORMAT_GEMINI, view=pb.MODEL_INPUT_VIEW_FULL
        )
        assert len(full.messages) == 1
        assert json.loads(full.rendered_json)["contents"][0]["role"] == "user"
