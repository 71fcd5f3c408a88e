"""AppendModelOutput: an agent appends the provider's answer as the provider sent it.

Response bodies are built with the providers' official SDK types, so what the
server reads is the real wire format.
"""

from __future__ import annotations

import json

import grpc
import pytest
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
from google.genai import types as gt
from openai.types.chat import ChatCompletion
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message import ChatCompletionMessage
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from openai.types.completion_usage import CompletionUsage
from openai.types.responses import ResponseReasoningItem

from ctxwarden.core.render import Format
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.core.ingest import sdk_fixtures as fx
from tests.core.ingest import test_error_bodies as error_bodies
from tests.core.ingest import test_lone_surrogates as surrogates
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


# -- issue #25: lone surrogates, Responses reasoning, Gemini pairing, error bodies ----------

RESPONSES_FORMAT = pb.MODEL_INPUT_FORMAT_OPENAI_RESPONSES
GEMINI = pb.MODEL_INPUT_FORMAT_GEMINI
WIRE = {
    Format.OPENAI_CHAT: OPENAI_CHAT,
    Format.OPENAI_RESPONSES: RESPONSES_FORMAT,
    Format.ANTHROPIC_MESSAGES: ANTHROPIC,
    Format.GEMINI: GEMINI,
}


def _stored_seqs(stub: Stub, sid: str) -> list[int]:
    return [x.seq for x in stub.ListMessages(pb.ListMessagesRequest(session_id=sid)).messages]


@pytest.mark.parametrize("case", sorted(surrogates.RESPONSES))
def test_a_lone_surrogate_in_model_output_is_invalid_argument(
    stub: Stub, new_session: NewSession, case: str
) -> None:
    """Anthropic's streamed input_json_delta joined into "\\ud800" passed the check,
    made before the JSON was re-serialised, and token counting failed: INTERNAL."""
    fmt, document, reason, _field = surrogates.RESPONSES[case]
    sid = new_session(model="claude-sonnet-4-5", tools=TOOLS).session_id
    _user(stub, sid, "hi")
    request = pb.AppendModelOutputRequest(
        session_id=sid, format=WIRE[fmt], response_json=json.dumps(document())
    )
    err = expect_error(
        grpc.StatusCode.INVALID_ARGUMENT, reason, stub.AppendModelOutput, request, timeout=10
    )
    assert "surrogate" in err.details()
    assert _stored_seqs(stub, sid) == [1]
    for wire in WIRE.values():
        stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, format=wire), timeout=10)


@pytest.mark.parametrize("fmt", sorted(surrogates.ITEMS), ids=lambda f: f.name)
def test_a_lone_surrogate_in_items_is_invalid_argument(
    stub: Stub, new_session: NewSession, fmt: Format
) -> None:
    sid = new_session(model="gpt-4o", tools=TOOLS).session_id
    request = pb.AppendModelOutputRequest(
        session_id=sid, format=WIRE[fmt], items_json=json.dumps(surrogates.ITEMS[fmt])
    )
    err = expect_error(
        grpc.StatusCode.INVALID_ARGUMENT, None, stub.AppendModelOutput, request, timeout=10
    )
    assert "surrogate" in err.details()
    assert _stored_seqs(stub, sid) == []


def test_a_lone_surrogate_in_appended_arguments_is_invalid_argument(
    stub: Stub, new_session: NewSession
) -> None:
    """AppendMessages and StreamMessages: tool-call arguments given as JSON that escapes one."""
    sid = new_session(tools=TOOLS).session_id
    call = m.ToolCall(id="c1", name="read", arguments_json=surrogates.ESCAPED_ARGS)
    message = m.Message(role=m.ROLE_ASSISTANT, content=[m.ContentBlock(tool_call=call)])
    request = pb.AppendMessagesRequest(session_id=sid, messages=[message])
    err = expect_error(
        grpc.StatusCode.INVALID_ARGUMENT, "INVALID_JSON", stub.AppendMessages, request, timeout=10
    )
    assert "surrogate" in err.details()
    err = expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_JSON",
        lambda: list(stub.StreamMessages(iter([request]), timeout=10)),
    )
    assert "surrogate" in err.details()
    assert _stored_seqs(stub, sid) == []


def test_openai_responses_reasoning_goes_back_verbatim(stub: Stub, new_session: NewSession) -> None:
    """A stateless loop (store: false) keeps its reasoning between tool calls:
    the reasoning item, with its encrypted_content, goes back before its call."""
    sid = new_session(model="gpt-5", tools=TOOLS).session_id
    _user(stub, sid, "Read a.py")
    reasoning = {
        "id": "rs_68a1",
        "summary": [
            {"text": "**Reading**\n\nI need a.py.", "type": "summary_text"},
            {"text": "**Then**\n\nanswer.", "type": "summary_text"},
        ],
        "type": "reasoning",
        "encrypted_content": "gAAAAB3ncrypted==",
    }
    call = {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{}"}
    body = fx.dump(fx.response([ResponseReasoningItem.model_validate(reasoning)]))
    body["output"] += [fx.dump(o) for o in fx.responses_output([call])]
    stub.AppendModelOutput(
        pb.AppendModelOutputRequest(
            session_id=sid, format=RESPONSES_FORMAT, response_json=json.dumps(body)
        ),
        timeout=10,
    )
    held = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=sid, format=RESPONSES_FORMAT), timeout=10
    )
    output = [{"type": "function_call_output", "call_id": "call_1", "output": "print(1)"}]
    stub.AppendModelOutput(
        pb.AppendModelOutputRequest(
            session_id=sid, format=RESPONSES_FORMAT, items_json=json.dumps(output)
        ),
        timeout=10,
    )
    whole = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=sid, format=RESPONSES_FORMAT), timeout=10
    )
    items = json.loads(whole.rendered_json)["input"]
    kinds = [i.get("type") for i in items]
    assert kinds == [None, "reasoning", "function_call", "function_call_output"]
    assert items[1] == reasoning
    assert "THINKING_DROPPED" not in [n.code for n in whole.notices]
    delta = stub.BuildModelInput(
        pb.BuildModelInputRequest(
            session_id=sid, format=RESPONSES_FORMAT, resume_token=held.resume_token
        ),
        timeout=10,
    )
    assert delta.rendered_prefix_bytes > len('{"input":[')
    spliced = held.rendered_json.encode()[: delta.rendered_prefix_bytes]
    assert (spliced + delta.rendered_json.encode()).decode() == whole.rendered_json
    anthropic = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=sid, format=ANTHROPIC), timeout=10
    )
    assert "rs_68a1" not in anthropic.rendered_json
    assert "THINKING_DROPPED" in [n.code for n in anthropic.notices]


def _gemini_calls(*names: str) -> str:
    """A Gemini answer calling each of ``names``, without ids (the API's usual form)."""
    parts = [gt.Part(function_call=gt.FunctionCall(name=n, args={"path": "a.py"})) for n in names]
    return json.dumps(fx.dump_gemini(fx.gemini_response(parts)))


def _gemini_results(*names: str) -> str:
    parts = [{"functionResponse": {"name": n, "response": {"output": f"{n} done"}}} for n in names]
    return json.dumps([{"role": "user", "parts": parts}])


def test_gemini_function_responses_without_ids_answer_the_sessions_open_calls(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session(model="gemini-2.5-pro", tools=TOOLS).session_id
    _user(stub, sid, "Read a.py and list")
    (answer,) = stub.AppendModelOutput(
        pb.AppendModelOutputRequest(
            session_id=sid, format=GEMINI, response_json=_gemini_calls("read", "ls")
        ),
        timeout=10,
    ).messages
    ids = [b.tool_call.id for b in answer.content]
    results = pb.AppendModelOutputRequest(
        session_id=sid, format=GEMINI, items_json=_gemini_results("ls", "read"), request_id="g-1"
    )
    stored = stub.AppendModelOutput(results, timeout=10).messages
    assert [(r.tool_call_id, r.tool_name) for r in stored] == [(ids[1], "ls"), (ids[0], "read")]
    # A retry is answered from the request log, although the calls are answered now.
    again = stub.AppendModelOutput(results, timeout=10)
    assert [r.seq for r in again.messages] == [r.seq for r in stored]
    rendered = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=sid, format=GEMINI), timeout=10
    )
    contents = json.loads(rendered.rendered_json)["contents"]
    responses = [p["functionResponse"]["id"] for p in contents[-1]["parts"]]
    assert responses == [ids[1], ids[0]]
    assert "ORPHANED_TOOL_RESULT_OMITTED" not in [n.code for n in rendered.notices]

    # Two open calls of one name: which one a response without an id answers is
    # a guess, so it is refused, naming the ids to send.
    (twice,) = stub.AppendModelOutput(
        pb.AppendModelOutputRequest(
            session_id=sid, format=GEMINI, response_json=_gemini_calls("read", "read")
        ),
        timeout=10,
    ).messages
    last = twice.seq
    request = pb.AppendModelOutputRequest(
        session_id=sid, format=GEMINI, items_json=_gemini_results("read")
    )
    err = expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_MODEL_OUTPUT",
        stub.AppendModelOutput,
        request,
        timeout=10,
    )
    assert all(b.tool_call.id in err.details() for b in twice.content)
    assert _stored_seqs(stub, sid)[-1] == last


def test_a_document_that_is_not_geminis_is_invalid_argument(
    stub: Stub, new_session: NewSession
) -> None:
    """An OpenAI body sent as Gemini was stored as a failed turn."""
    sid = new_session(model="gemini-2.5-pro").session_id
    _user(stub, sid, "hi")
    chat = fx.dump(fx.chat_completion({"content": "Hi"}, "stop"))
    request = pb.AppendModelOutputRequest(
        session_id=sid, format=GEMINI, response_json=json.dumps(chat)
    )
    err = expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_MODEL_OUTPUT",
        stub.AppendModelOutput,
        request,
        timeout=10,
    )
    assert "candidates" in err.details()
    assert _stored_seqs(stub, sid) == [1]


@pytest.mark.parametrize("case", sorted(error_bodies.ENVELOPES))
def test_a_provider_error_body_is_invalid_argument_pointing_to_rollback_turn(
    stub: Stub, new_session: NewSession, case: str
) -> None:
    fmt, body, code = error_bodies.ENVELOPES[case]
    sid = new_session().session_id
    _user(stub, sid, "hi")
    request = pb.AppendModelOutputRequest(
        session_id=sid, format=WIRE[fmt], response_json=json.dumps(body)
    )
    err = expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "PROVIDER_ERROR_OUTPUT",
        stub.AppendModelOutput,
        request,
        timeout=10,
    )
    assert code in err.details() and "RollbackTurn" in err.details()
    assert _stored_seqs(stub, sid) == [1]
