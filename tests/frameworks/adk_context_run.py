"""A real ADK ``Runner`` with ctxwarden's session service and context plugin, beside the
same conversation on plain ADK; ``test_adk_context.py`` runs it in the ADK virtualenv.

``python adk_context_run.py TARGET [SCENARIO...]`` plays 24 user turns (two of three call
a tool) to an ``LlmAgent`` whose model is :class:`ScriptedLlm`, a ``BaseLlm`` that records
every request and answers from the request's last content only, so every run gets the
same answers. The plain run has ``InMemorySessionService`` and no plugin; each scenario
plays the conversation again with ``CtxwardenSessionService`` on the server at TARGET
and ``CtxwardenContextPlugin``:

- ``agent-summary`` (the default): a small compaction threshold, the plugin compacting
  with a scripted summariser; ``server-summary``: the same with the server's summariser
  (a server started with ``--summarizer``). Checked request by request: (a) before the
  first compaction the contents equal the plain run's; (b) from then on they are
  ctxwarden's summary followed by the kept turns exactly as plain ADK renders them (the
  tail of the plain request), one content per message of ctxwarden's effective context,
  and shorter than the plain request; (c) in every request of both runs each function
  call is followed by its response and each response preceded by its call; the system
  instruction and tools are the plain run's.
- ``stubs``: ``keep_tool_results=2``: all but the newest two tool outputs are ctxwarden's
  stubs, everything else is the plain run's request.
- ``units``: ``apply_context`` on hand-made events (no server).

On success it prints one JSON line of counts per scenario.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.genai import types

from ctxwarden_client import Client, session_pb2
from ctxwarden_client.integrations.adk import CtxwardenSessionService
from ctxwarden_client.integrations.adk_context import (
    CtxwardenContextPlugin,
    EffectiveContext,
    apply_context,
)
from ctxwarden_client.v1 import message_pb2 as m

TURNS = 24
USER = "u1"
SESSION = "s1"
SUMMARY_HEAD = "The conversation history before this point was compacted"
POLICY = session_pb2.ContextPolicy(
    context_window=640, reserve_tokens=200, keep_recent_tokens=160, tokenizer="heuristic"
)


@dataclass
class Sent:
    """One model request as the model got it."""

    contents: list[dict[str, Any]]
    system: str
    tools: list[str]
    ctxwarden: list[m.Message] = field(default_factory=list)
    compaction_id: str = ""


RECORDS: dict[str, list[Sent]] = {}


class ScriptedLlm(BaseLlm):  # type: ignore[misc]
    """Records each request; answers a function response with a text, turn i with a call
    of ``lookup(item=i)`` (unless i is a multiple of 3) or else a text."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        RECORDS[self.model].append(
            Sent(
                [c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents],
                str(llm_request.config.system_instruction),
                sorted(llm_request.tools_dict),
            )
        )
        last = llm_request.contents[-1].parts[0]
        if last.function_response is not None:
            price = last.function_response.response["price"]
            part = types.Part(text=f"That one costs {price} euros; anything else?")
        else:
            turn = int((last.text or "").split()[1].rstrip(":"))
            if turn % 3:
                call = types.FunctionCall(name="lookup", args={"item": turn})
                part = types.Part(function_call=call)
            else:
                part = types.Part(text=f"Happy to help with turn {turn}, no lookup needed.")
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def lookup(item: int) -> dict[str, Any]:
    """Looks an item up in the catalogue."""
    return {"item": item, "price": 10 + item, "notes": f"item {item} in stock, aisle {item % 7}"}


class Probe(BasePlugin):  # type: ignore[misc]
    """Runs after the context plugin: records ctxwarden's effective context per request."""

    def __init__(self, client: Client, key: str, model: str) -> None:
        super().__init__("probe")
        self.client, self.key, self.model = client, key, model

    async def before_model_callback(self, **kwargs: Any) -> None:
        built = await asyncio.to_thread(self.client.build_model_input, self.key)
        self.pending = (list(built.messages), built.compaction_id)

    async def after_model_callback(self, **kwargs: Any) -> None:
        sent = RECORDS[self.model][-1]
        sent.ctxwarden, sent.compaction_id = self.pending


async def play(model: str, service: BaseSessionService, plugins: list[BasePlugin]) -> list[Sent]:
    RECORDS[model] = []
    agent = LlmAgent(
        name="clerk",
        model=ScriptedLlm(model=model),
        instruction="You are the shop's clerk. Answer price questions with the lookup tool.",
        tools=[lookup],
    )
    app = App(name="shop", root_agent=agent, plugins=plugins)
    runner = Runner(app=app, session_service=service)
    await service.create_session(app_name="shop", user_id=USER, session_id=SESSION)
    for turn in range(1, TURNS + 1):
        text = f"Turn {turn}: what does item {turn} cost, and is it in stock today?"
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for _ in runner.run_async(user_id=USER, session_id=SESSION, new_message=message):
            pass
    return RECORDS[model]


def check_pairs(contents: list[dict[str, Any]]) -> None:
    """(c): every call is answered by the next content, every response answers the last."""

    def names(content: dict[str, Any], kind: str) -> list[str]:
        return [p[kind]["name"] for p in content.get("parts", []) if kind in p]

    for i, content in enumerate(contents):
        if calls := names(content, "function_call"):
            assert i + 1 < len(contents), f"call {calls} unanswered at the end"
            assert names(contents[i + 1], "function_response") == calls, (i, contents)
        if responses := names(content, "function_response"):
            assert i > 0 and names(contents[i - 1], "function_call") == responses, (i, contents)


def role_of(message: m.Message) -> str:
    return "model" if message.role == m.ROLE_ASSISTANT else "user"


def check_compacted(sent: Sent, plain: Sent, summaries: list[str]) -> None:
    """(b): summary, then exactly the plain request's tail, one content per ctxwarden message."""
    head, kept = sent.contents[0], sent.contents[1:]
    text = head["parts"][0]["text"]
    assert head["role"] == "user" and text.startswith(SUMMARY_HEAD), head
    assert "<summary>" in text and (not summaries or "SUMMARY-" in text), text
    assert [text] == [b.text.text for b in sent.ctxwarden[0].content], sent.ctxwarden[0]
    assert len(sent.contents) < len(plain.contents)
    assert kept == plain.contents[len(plain.contents) - len(kept) :]
    assert len(sent.contents) == len(sent.ctxwarden), (len(sent.contents), len(sent.ctxwarden))
    assert sent.ctxwarden[0].metadata["ctxwarden.summary"] == sent.compaction_id
    for content, message in zip(kept, sent.ctxwarden[1:], strict=True):
        assert content["role"] == role_of(message), (content, message)
        texts = [b.text.text for b in message.content if b.WhichOneof("block") == "text"]
        if message.role == m.ROLE_TOOL_RESULT:
            assert [json.loads(texts[0])] == [
                p["function_response"]["response"] for p in content["parts"]
            ]
        else:
            assert [p["text"] for p in content["parts"] if "text" in p] == texts


async def compaction(
    target: str, token: str, plain: list[Sent], agent_side: bool
) -> dict[str, int]:
    """(a), (b), (c) with compaction by the plugin: agent-side (a scripted summariser)
    or by the server's summariser (``auto_compact``)."""
    summaries: list[str] = []

    def summarize(system: str, prompt: str, max_tokens: int) -> str:
        summaries.append(f"SUMMARY-{len(summaries) + 1}")
        return f"## Goal\n{summaries[-1]}: the user asks for item prices, one item a turn."

    with Client(target) as client:
        template = session_pb2.Session(policy=POLICY)
        side = "agent" if agent_side else "server"
        service = CtxwardenSessionService(client, template=template, namespace=side + token)
        key = service.key("shop", USER, SESSION)
        model = f"{side}-{token}"
        plugin = CtxwardenContextPlugin(service, summarizer=summarize if agent_side else None)
        sent = await play(model, service, [plugin, Probe(client, key, model)])
        compactions = list(client.list_compactions(key))

    assert len(sent) == len(plain) > TURNS, (len(sent), len(plain))
    first = next(i for i, s in enumerate(sent) if s.compaction_id)
    assert first > 0 and len(compactions) >= 2, (first, len(compactions))
    assert len(summaries) >= len(compactions) if agent_side else not summaries
    for i, (ours, theirs) in enumerate(zip(sent, plain, strict=True)):
        check_pairs(ours.contents)
        check_pairs(theirs.contents)
        assert (ours.system, ours.tools) == (theirs.system, theirs.tools)
        assert (ours.system, ours.tools) == (plain[0].system, ["lookup"])
        if i < first:
            assert not ours.compaction_id
            assert ours.contents == theirs.contents, f"request {i} differs before compaction"
        else:
            check_compacted(ours, theirs, summaries)
    return {
        "requests": len(sent),
        "first_compacted_request": first,
        "compactions": len(compactions),
        "last_contents": len(sent[-1].contents),
        "last_plain_contents": len(plain[-1].contents),
    }


async def stubs(target: str, token: str, plain: list[Sent]) -> dict[str, int]:
    """Tool outputs: with keep_tool_results=2 the older ones are ctxwarden's stubs, the
    rest of each request is the plain run's."""
    policy = session_pb2.ContextPolicy(keep_tool_results=2, tokenizer="heuristic")
    with Client(target) as client:
        template = session_pb2.Session(policy=policy)
        service = CtxwardenSessionService(client, template=template, namespace="stubs" + token)
        sent = await play(f"stubs-{token}", service, [CtxwardenContextPlugin(service)])
    stubbed = 0
    for ours, theirs in zip(sent, plain, strict=True):
        check_pairs(ours.contents)
        assert len(ours.contents) == len(theirs.contents)
        results = [i for i, c in enumerate(theirs.contents) if "function_response" in c["parts"][0]]
        for i, (content, original) in enumerate(zip(ours.contents, theirs.contents, strict=True)):
            if i in results[:-2]:
                (part,) = content["parts"]
                assert part["function_response"]["name"] == "lookup"
                stub = part["function_response"]["response"]["result"]
                assert stub.startswith("[ctxwarden: older tool output omitted"), stub
                stubbed += 1
            else:
                assert content == original
    assert stubbed > TURNS
    return {"requests": len(sent), "stubbed_outputs": stubbed}


def units() -> dict[str, int]:
    """``apply_context`` on hand-made events: what is not an event's stays where ADK put
    it; a prefix without a compaction (a memory block) goes before the first event's
    content; nothing is added when ADK sends none of the history (include_contents
    "none"); a kept content equal to a compacted one stays."""

    def said(role: str, text: str) -> types.Content:
        return types.Content(role=role, parts=[types.Part(text=text)])

    events = [
        Event(author="user" if i % 2 == 0 else "clerk", content=said(role, text))
        for i, (role, text) in enumerate(
            [("user", "hi"), ("model", "hello"), ("user", "hi"), ("model", "bye")]
        )
    ]
    contents = [e.content.model_copy() for e in events]
    added = said("user", "an instruction ADK inserts")
    prefix = [said("user", "<summary>")]
    compacted = EffectiveContext(prefix, True, frozenset(e.id for e in events[2:]), {})
    assert apply_context([added, *contents], events, compacted) == [added, *prefix, *contents[2:]]
    assert apply_context(contents[2:], events, compacted) == contents[2:]
    memory = EffectiveContext(prefix, False, frozenset(e.id for e in events), {})
    assert apply_context([*contents[:3], added, contents[3]], events, memory) == [
        *prefix,
        *contents[:3],
        added,
        contents[3],
    ]
    assert apply_context(contents[1:], events, memory) == contents[1:]
    return {"cases": 4}


async def main(target: str, scenarios: list[str]) -> dict[str, dict[str, int]]:
    token = secrets.token_hex(4)
    plain = await play(f"plain-{token}", InMemorySessionService(), [])
    out: dict[str, dict[str, int]] = {}
    for name in scenarios:
        if name == "units":
            out[name] = units()
        elif name == "stubs":
            out[name] = await stubs(target, token, plain)
        else:
            out[name] = await compaction(target, token, plain, agent_side=name == "agent-summary")
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2:] or ["agent-summary"]))))
