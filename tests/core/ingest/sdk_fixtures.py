"""Provider responses and stream events built with the providers' SDK types.

Each builder takes the rendered provider form of one assistant message (what
``render`` makes of it) and wraps it in that provider's response type, then
dumps it as JSON, so the fixtures are the providers' real wire format. The
stream builders cut the same content into the SDK's event types.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import anthropic.types as at
import openai.types.chat as oc
import openai.types.responses as orr
from google.genai import types as gt
from openai.types import CompletionUsage
from openai.types.chat import chat_completion_chunk as chunk_types
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.completion_usage import PromptTokensDetails
from openai.types.responses.response_reasoning_summary_part_added_event import (
    Part as SummaryPart,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

MODEL = "model-a"
PIECE = 3
"""Streamed text and arguments come in pieces of this many characters."""


def pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)] or [""]


def _json(model: Any) -> Any:
    return json.loads(json.dumps(model.model_dump(mode="json", exclude_none=True)))


# -- OpenAI Chat Completions -------------------------------------------------------


def chat_usage() -> CompletionUsage:
    return CompletionUsage(
        prompt_tokens=120,
        completion_tokens=30,
        total_tokens=150,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=100, cache_write_tokens=5),
    )


def chat_completion(rendered: dict[str, Any], finish_reason: str) -> oc.ChatCompletion:
    content = rendered["content"]
    if isinstance(content, list):
        raise ValueError("a chat.completion message carries one content string")
    calls: list[oc.ChatCompletionMessageToolCallUnion] = [
        oc.ChatCompletionMessageFunctionToolCall(
            id=c["id"],
            type="function",
            function=Function(name=c["function"]["name"], arguments=c["function"]["arguments"]),
        )
        for c in rendered.get("tool_calls", [])
    ]
    message = oc.ChatCompletionMessage(role="assistant", content=content, tool_calls=calls or None)
    return oc.ChatCompletion(
        id="chatcmpl-1",
        object="chat.completion",
        created=1,
        model=MODEL,
        choices=[Choice(index=0, message=message, finish_reason=finish_reason)],  # type: ignore[arg-type]
        usage=chat_usage(),
    )


def chat_chunks(completion: oc.ChatCompletion) -> list[oc.ChatCompletionChunk]:
    message = completion.choices[0].message

    def chunk(delta: chunk_types.ChoiceDelta, finish: str | None = None) -> oc.ChatCompletionChunk:
        return oc.ChatCompletionChunk(
            id=completion.id,
            object="chat.completion.chunk",
            created=1,
            model=completion.model,
            choices=[chunk_types.Choice(index=0, delta=delta, finish_reason=finish)],  # type: ignore[arg-type]
        )

    out = [chunk(chunk_types.ChoiceDelta(role="assistant", content=""))]
    if message.content:
        out += [chunk(chunk_types.ChoiceDelta(content=p)) for p in pieces(message.content)]
    for index, call in enumerate(message.tool_calls or []):
        assert isinstance(call, oc.ChatCompletionMessageFunctionToolCall)
        head = chunk_types.ChoiceDeltaToolCall(
            index=index,
            id=call.id,
            type="function",
            function=chunk_types.ChoiceDeltaToolCallFunction(name=call.function.name, arguments=""),
        )
        out.append(chunk(chunk_types.ChoiceDelta(tool_calls=[head])))
        for part in pieces(call.function.arguments):
            delta = chunk_types.ChoiceDeltaToolCall(
                index=index, function=chunk_types.ChoiceDeltaToolCallFunction(arguments=part)
            )
            out.append(chunk(chunk_types.ChoiceDelta(tool_calls=[delta])))
    out.append(chunk(chunk_types.ChoiceDelta(), completion.choices[0].finish_reason))
    out.append(
        oc.ChatCompletionChunk(
            id=completion.id,
            object="chat.completion.chunk",
            created=1,
            model=completion.model,
            choices=[],
            usage=completion.usage,
        )
    )
    return out


# -- OpenAI Responses -----------------------------------------------------------------


def responses_usage() -> orr.ResponseUsage:
    return orr.ResponseUsage(
        input_tokens=120,
        input_tokens_details=InputTokensDetails(cached_tokens=100, cache_write_tokens=5),
        output_tokens=30,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=10),
        total_tokens=150,
    )


def responses_output(items: list[dict[str, Any]]) -> list[orr.ResponseOutputItem]:
    out: list[orr.ResponseOutputItem] = []
    for i, item in enumerate(items):
        if item.get("type") == "function_call":
            out.append(
                orr.ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{i}",
                    call_id=item["call_id"],
                    name=item["name"],
                    arguments=item["arguments"],
                    status="completed",
                )
            )
        elif item.get("type") == "reasoning":
            out.append(orr.ResponseReasoningItem.model_validate(item))
        elif item.get("type") == "web_search_call":
            out.append(orr.ResponseFunctionWebSearch.model_validate(item))
        else:
            assert item["role"] == "assistant", item
            text = orr.ResponseOutputText(type="output_text", text=item["content"], annotations=[])
            out.append(
                orr.ResponseOutputMessage(
                    type="message",
                    id=f"msg_{i}",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            )
    return out


def response(
    output: list[orr.ResponseOutputItem], status: str = "completed", **extra: Any
) -> orr.Response:
    return orr.Response(
        id="resp_1",
        object="response",
        created_at=1,
        model=MODEL,
        output=output,
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
        status=status,  # type: ignore[arg-type]
        usage=responses_usage(),
        **extra,
    )


def _empty_item(item: orr.ResponseOutputItem) -> orr.ResponseOutputItem:
    """An output item as ``response.output_item.added`` announces it."""
    if isinstance(item, orr.ResponseFunctionToolCall):
        return item.model_copy(update={"arguments": "", "status": "in_progress"})
    if isinstance(item, orr.ResponseOutputMessage):
        return item.model_copy(update={"content": [], "status": "in_progress"})
    if isinstance(item, orr.ResponseReasoningItem):
        return item.model_copy(update={"summary": []})
    if isinstance(item, orr.ResponseFunctionWebSearch):
        return item  # no deltas: announced as it ends
    raise AssertionError(item)


def responses_events(final: orr.Response, *, done: bool = True) -> list[Any]:
    """The events of a stream that ends in ``final`` (``done``: with output_item.done)."""
    seq = iter(range(10_000))
    start = final.model_copy(update={"output": [], "status": "in_progress", "usage": None})
    events: list[Any] = [
        orr.ResponseCreatedEvent(type="response.created", sequence_number=next(seq), response=start)
    ]
    for index, item in enumerate(final.output):
        events.append(
            orr.ResponseOutputItemAddedEvent(
                type="response.output_item.added",
                sequence_number=next(seq),
                output_index=index,
                item=_empty_item(item),
            )
        )
        if isinstance(item, orr.ResponseOutputMessage):
            for c, part in enumerate(item.content):
                assert isinstance(part, orr.ResponseOutputText)
                events.append(
                    orr.ResponseContentPartAddedEvent(
                        type="response.content_part.added",
                        sequence_number=next(seq),
                        item_id=item.id,
                        output_index=index,
                        content_index=c,
                        part=orr.ResponseOutputText(type="output_text", text="", annotations=[]),
                    )
                )
                for p in pieces(part.text):
                    events.append(
                        orr.ResponseTextDeltaEvent(
                            type="response.output_text.delta",
                            sequence_number=next(seq),
                            item_id=item.id,
                            output_index=index,
                            content_index=c,
                            delta=p,
                            logprobs=[],
                        )
                    )
        elif isinstance(item, orr.ResponseFunctionToolCall):
            for p in pieces(item.arguments):
                events.append(
                    orr.ResponseFunctionCallArgumentsDeltaEvent(
                        type="response.function_call_arguments.delta",
                        sequence_number=next(seq),
                        item_id=item.id or "",
                        output_index=index,
                        delta=p,
                    )
                )
        elif isinstance(item, orr.ResponseReasoningItem):
            for s, summary in enumerate(item.summary):
                events.append(
                    orr.ResponseReasoningSummaryPartAddedEvent(
                        type="response.reasoning_summary_part.added",
                        sequence_number=next(seq),
                        item_id=item.id,
                        output_index=index,
                        summary_index=s,
                        part=SummaryPart(type="summary_text", text=""),
                    )
                )
                for p in pieces(summary.text):
                    events.append(
                        orr.ResponseReasoningSummaryTextDeltaEvent(
                            type="response.reasoning_summary_text.delta",
                            sequence_number=next(seq),
                            item_id=item.id,
                            output_index=index,
                            summary_index=s,
                            delta=p,
                        )
                    )
        if done:
            events.append(
                orr.ResponseOutputItemDoneEvent(
                    type="response.output_item.done",
                    sequence_number=next(seq),
                    output_index=index,
                    item=item,
                )
            )
    events.append(
        orr.ResponseCompletedEvent(
            type="response.completed", sequence_number=next(seq), response=final
        )
    )
    return events


# -- Anthropic ----------------------------------------------------------------------


def anthropic_usage() -> at.Usage:
    return at.Usage(
        input_tokens=20,
        output_tokens=30,
        cache_read_input_tokens=100,
        cache_creation_input_tokens=5,
    )


def anthropic_message(blocks: list[dict[str, Any]], stop_reason: str) -> at.Message:
    content: list[at.ContentBlock] = []
    for block in blocks:
        kind = block["type"]
        if kind == "text":
            content.append(at.TextBlock(type="text", text=block["text"]))
        elif kind == "tool_use":
            content.append(
                at.ToolUseBlock(
                    type="tool_use", id=block["id"], name=block["name"], input=block["input"]
                )
            )
        elif kind == "thinking":
            content.append(
                at.ThinkingBlock(
                    type="thinking", thinking=block["thinking"], signature=block["signature"]
                )
            )
        elif kind == "redacted_thinking":
            content.append(at.RedactedThinkingBlock(type="redacted_thinking", data=block["data"]))
        else:
            raise AssertionError(kind)
    return at.Message(
        id="msg_1",
        type="message",
        role="assistant",
        model=MODEL,
        content=content,
        stop_reason=stop_reason,  # type: ignore[arg-type]
        stop_sequence=None,
        usage=anthropic_usage(),
    )


def anthropic_events(message: at.Message) -> list[Any]:
    start = message.model_copy(
        update={
            "content": [],
            "stop_reason": None,
            "usage": at.Usage(
                input_tokens=20,
                output_tokens=1,
                cache_read_input_tokens=100,
                cache_creation_input_tokens=5,
            ),
        }
    )
    events: list[Any] = [at.RawMessageStartEvent(type="message_start", message=start)]
    for index, block in enumerate(message.content):
        deltas: list[Any] = []
        if isinstance(block, at.TextBlock):
            first: Any = at.TextBlock(type="text", text="")
            deltas = [at.TextDelta(type="text_delta", text=p) for p in pieces(block.text)]
        elif isinstance(block, at.ToolUseBlock):
            first = at.ToolUseBlock(type="tool_use", id=block.id, name=block.name, input={})
            text = json.dumps(block.input)
            deltas = [
                at.InputJSONDelta(type="input_json_delta", partial_json=p) for p in pieces(text)
            ]
        elif isinstance(block, at.ThinkingBlock):
            first = at.ThinkingBlock(type="thinking", thinking="", signature="")
            deltas = [
                at.ThinkingDelta(type="thinking_delta", thinking=p) for p in pieces(block.thinking)
            ]
            deltas.append(at.SignatureDelta(type="signature_delta", signature=block.signature))
        else:
            first = block
        events.append(
            at.RawContentBlockStartEvent(
                type="content_block_start", index=index, content_block=first
            )
        )
        events += [
            at.RawContentBlockDeltaEvent(type="content_block_delta", index=index, delta=d)
            for d in deltas
        ]
        events.append(at.RawContentBlockStopEvent(type="content_block_stop", index=index))
    events.append(
        at.RawMessageDeltaEvent(
            type="message_delta",
            delta={"stop_reason": message.stop_reason, "stop_sequence": None},  # type: ignore[arg-type]
            usage={"output_tokens": 30},  # type: ignore[arg-type]
        )
    )
    events.append(at.RawMessageStopEvent(type="message_stop"))
    return events


# -- Gemini -------------------------------------------------------------------------


def gemini_usage() -> gt.GenerateContentResponseUsageMetadata:
    return gt.GenerateContentResponseUsageMetadata(
        prompt_token_count=120,
        cached_content_token_count=100,
        candidates_token_count=20,
        thoughts_token_count=10,
        total_token_count=150,
    )


def gemini_part(part: dict[str, Any]) -> gt.Part:
    signature = part.get("thoughtSignature")
    fields: dict[str, Any] = {}
    if signature is not None:
        fields["thought_signature"] = base64.b64decode(signature)
    if part.get("thought"):
        fields["thought"] = True
    if "text" in part:
        fields["text"] = part["text"]
    if "functionCall" in part:
        call = part["functionCall"]
        fields["function_call"] = gt.FunctionCall(
            id=call.get("id"), name=call["name"], args=call["args"]
        )
    return gt.Part(**fields)


def gemini_response(
    parts: list[gt.Part], finish_reason: str = "STOP", *, usage: bool = True
) -> gt.GenerateContentResponse:
    return gt.GenerateContentResponse(
        candidates=[
            gt.Candidate(
                content=gt.Content(role="model", parts=parts),
                finish_reason=gt.FinishReason(finish_reason) if finish_reason else None,
                index=0,
            )
        ],
        usage_metadata=gemini_usage() if usage else None,
        model_version=MODEL,
        response_id="resp-g1",
    )


def gemini_chunks(parts: list[gt.Part]) -> list[gt.GenerateContentResponse]:
    """Text parts in pieces, one chunk each; the last chunk has the finish reason."""
    split: list[gt.Part] = []
    for part in parts:
        if part.text and part.function_call is None:
            texts = pieces(part.text)
            split.append(part.model_copy(update={"text": texts[0]}))
            split += [gt.Part(text=t, thought=part.thought) for t in texts[1:]]
        else:
            split.append(part)
    out = [gemini_response([p], "", usage=False) for p in split]
    out.append(gemini_response([gt.Part(text="")], "STOP"))
    return out


def dump(model: Any) -> Any:
    """A response or event as the wire carries it (parsed JSON)."""
    return _json(model)


def dump_gemini(model: gt.GenerateContentResponse, *, camel: bool = True) -> Any:
    """Gemini as the REST API sends it (camelCase), or as ``to_json_dict()`` does."""
    if camel:
        return json.loads(
            json.dumps(model.model_dump(mode="json", by_alias=True, exclude_none=True))
        )
    return json.loads(json.dumps(model.to_json_dict()))
