"""AppendModelOutput: an agent appends the provider's answer as the provider sent it.

Response bodies are built with the providers' official SDK types, so what the
server reads is the real wire format.
"""

from __future__ import annotations

import json

import grpc
from anthropic.types import Message as AnthropicMessage
from anthropic.types import (
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    WebSearchResultBlock,
    WebSearchToolResultBlock,
)
from anthropic.types import Usage as AnthropicUsage
from openai.types.chat import ChatCompletion
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message import ChatCompletionMessage
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from openai.types.completion_usage import CompletionUsage

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import NewSession, Stub
from tests.support.errors import expect_error

ANTHROPIC = pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES
OPENAI_CHAT = pb.MODEL_INPUT_FORMAT_OPENAI_CHAT
TOOLS = [
    ses.ToolDefinition(
        name="read",
        description="Read a file",
        parameters_json='{"type":"object","properties":{"path":{"type":"string"}}}',
    )
]


def _anthropic_turn() -> str:
    message = AnthropicMessage(
        id="msg_01",
        type="message",
        role="assistant",
        model="claude-sonnet-4-5",
        content=[
            ThinkingBlock(type="thinking", thinking="Read the file first.", signature="sig-abc"),
            TextBlock(type="text", text="Reading it."),
            ToolUseBlock(type="tool_use", id="toolu_1", name="read", input={"path": "a.py"}),
        ],
        stop_reason="tool_use",
        stop_sequence=None,
        usage=AnthropicUsage(input_tokens=120, output_tokens=30),
    )
    return message.model_dump_json(exclude_none=True)


def _user(stub: Stub, sid: str, text: str) -> None:
    stub.AppendMessages(
        pb.AppendMessagesRequest(
            session_id=sid,
            messages=[
                m.Message(role=m.ROLE_USER, content=[m.ContentBlock(text=m.TextContent(text=text))])
            ],
        ),
        timeout=10,
    )


def test_anthropic_turn_and_tool_result_round_trip(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(model="claude-sonnet-4-5", tools=TOOLS).session_id
    _user(stub, sid, "What is in a.py?")
    turn = stub.AppendModelOutput(
        pb.AppendModelOutputRequest(
            session_id=sid, format=ANTHROPIC, response_json=_anthropic_turn(), request_id="r-1"
        ),
        timeout=10,
    )
    (stored,) = turn.messages
    assert stored.role == m.ROLE_ASSISTANT
    assert stored.stop_reason == m.STOP_REASON_TOOL_USE
    assert stored.usage.input_tokens == 120 and stored.usage.output_tokens == 30
    assert stored.model == "claude-sonnet-4-5"
    kinds = [b.WhichOneof("block") for b in stored.content]
    assert kinds == ["thinking", "text", "tool_call"]
    # A retry with the same request_id is applied once.
    again = stub.AppendModelOutput(
        pb.AppendModelOutputRequest(
            session_id=sid, format=ANTHROPIC, response_json=_anthropic_turn(), request_id="r-1"
        ),
        timeout=10,
    )
    assert again.last_seq == turn.last_seq == 2

    results = [
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "print(1)"}],
        }
    ]
    stub.AppendModelOutput(
        pb.AppendModelOutputRequest(
            session_id=sid, format=ANTHROPIC, items_json=json.dumps(results)
        ),
        timeout=10,
    )
    rendered = json.loads(
        stub.BuildModelInput(
            pb.BuildModelInputRequest(session_id=sid, format=ANTHROPIC), timeout=10
        ).rendered_json
    )
    assistant = rendered["messages"][1]
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "Read the file first.",
        "signature": "sig-abc",
    }
    assert assistant["content"][2]["input"] == {"path": "a.py"}
    assert rendered["messages"][2]["content"][0]["tool_use_id"] == "toolu_1"


def test_openai_chat_completion_is_appended(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(model="gpt-4o", tools=TOOLS).session_id
    _user(stub, sid, "Read a.py")
    completion = ChatCompletion(
        id="chatcmpl-1",
        object="chat.completion",
        created=1,
        model="gpt-4o",
        choices=[
            Choice(
                index=0,
                finish_reason="tool_calls",
                message=ChatCompletionMessage(
                    role="assistant",
                    content=None,
                    tool_calls=[
                        ChatCompletionMessageFunctionToolCall(
                            id="call_1",
                            type="function",
                            function=Function(name="read", arguments='{"path":"a.py"}'),
                        )
                    ],
                ),
            )
        ],
        usage=CompletionUsage(prompt_tokens=50, completion_tokens=10, total_tokens=60),
    )
    out = stub.AppendModelOutput(
        pb.AppendModelOutputRequest(
            session_id=sid,
            format=OPENAI_CHAT,
            response_json=completion.model_dump_json(exclude_none=True),
        ),
        timeout=10,
    )
    (stored,) = out.messages
    assert stored.stop_reason == m.STOP_REASON_TOOL_USE
    call = stored.content[0].tool_call
    assert (call.id, call.name, call.arguments_json) == ("call_1", "read", '{"path":"a.py"}')
    assert stored.usage.total_tokens == 60
    # A tool result names no tool in OpenAI's format: it gets its call's name.
    results = [{"role": "tool", "tool_call_id": "call_1", "content": "print(1)"}]
    answered = stub.AppendModelOutput(
        pb.AppendModelOutputRequest(
            session_id=sid, format=OPENAI_CHAT, items_json=json.dumps(results)
        ),
        timeout=10,
    )
    assert answered.messages[0].role == m.ROLE_TOOL_RESULT
    assert answered.messages[0].tool_name == "read"


def test_bad_output_names_the_json_path_and_stores_nothing(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session(model="gpt-4o", tools=TOOLS).session_id
    _user(stub, sid, "hi")
    body = {
        "id": "chatcmpl-2",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "read", "arguments": "not json"},
                        }
                    ],
                },
            }
        ],
    }
    request = pb.AppendModelOutputRequest(
        session_id=sid, format=OPENAI_CHAT, response_json=json.dumps(body)
    )
    err = expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_MODEL_OUTPUT",
        stub.AppendModelOutput,
        request,
        timeout=10,
    )
    assert "choices[0].message.tool_calls[0].function.arguments" in (err.details() or "")
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_JSON",
        stub.AppendModelOutput,
        pb.AppendModelOutputRequest(session_id=sid, format=OPENAI_CHAT, response_json="{"),
        timeout=10,
    )
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_FORMAT",
        stub.AppendModelOutput,
        pb.AppendModelOutputRequest(
            session_id=sid, format=pb.MODEL_INPUT_FORMAT_NATIVE, response_json="{}"
        ),
        timeout=10,
    )
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid), timeout=10)
    assert [x.seq for x in listed.messages] == [1]


def _web_search_turn() -> tuple[str, list[str]]:
    """An Anthropic answer with a server tool call and its result, and the
    JSON of those two blocks as sent."""
    blocks: list[ServerToolUseBlock | WebSearchToolResultBlock] = [
        ServerToolUseBlock(
            type="server_tool_use",
            id="srvtoolu_1",
            name="web_search",
            input={"query": "ctxwarden ünïcode"},
        ),
        WebSearchToolResultBlock(
            type="web_search_tool_result",
            tool_use_id="srvtoolu_1",
            content=[
                WebSearchResultBlock(
                    type="web_search_result",
                    url="https://example.com/a",
                    title="A",
                    encrypted_content="EncRypted==",
                    page_age="1 day",
                )
            ],
        ),
    ]
    message = AnthropicMessage(
        id="msg_02",
        type="message",
        role="assistant",
        model="claude-sonnet-4-5",
        content=[*blocks, TextBlock(type="text", text="Found it.")],
        stop_reason="end_turn",
        stop_sequence=None,
        usage=AnthropicUsage(input_tokens=50, output_tokens=20),
    )
    body = message.model_dump_json(exclude_none=True)
    raw = [
        json.dumps(b, ensure_ascii=False, separators=(",", ":"))
        for b in json.loads(body)["content"][:2]
    ]
    return body, raw


def test_anthropic_server_tool_blocks_go_back_verbatim(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(model="claude-sonnet-4-5").session_id
    _user(stub, sid, "Search the web")
    body, raw = _web_search_turn()
    (stored,) = stub.AppendModelOutput(
        pb.AppendModelOutputRequest(session_id=sid, format=ANTHROPIC, response_json=body),
        timeout=10,
    ).messages
    assert [b.WhichOneof("block") for b in stored.content] == ["provider", "provider", "text"]
    assert [(b.provider.family, b.provider.json) for b in stored.content[:2]] == [
        ("anthropic", r) for r in raw
    ]

    mi = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=sid, format=ANTHROPIC), timeout=10
    )
    assert f'"content":[{raw[0]},{raw[1]},{{"type":"text","text":"Found it."}}]' in mi.rendered_json
    assert "PROVIDER_CONTENT_DROPPED" not in [n.code for n in mi.notices]

    chat = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=sid, format=OPENAI_CHAT), timeout=10
    )
    rendered = json.loads(chat.rendered_json)
    assert rendered["messages"][1] == {"role": "assistant", "content": "Found it."}
    assert "srvtoolu_1" not in chat.rendered_json
    dropped = [(n.code, n.seq) for n in chat.notices if n.code == "PROVIDER_CONTENT_DROPPED"]
    assert dropped == [("PROVIDER_CONTENT_DROPPED", stored.seq)] * 2
