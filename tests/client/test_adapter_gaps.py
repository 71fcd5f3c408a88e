"""Issue #28 part 4: what the frameworks' own tests do not pin down about the adapters.

The OpenAI Agents session's compaction snapshot (the compare-and-swap of a suffix the
SDK's compaction wrappers use) against concurrent writers and ctxwarden summaries;
items that ctxwarden's view would change (parallel calls, a call waiting for its
result); the LangChain history's value equality; the LangGraph store's mapping onto
memories; the client's extras admitting the tested versions; and the README's
LangGraph example (in the LangGraph suite's virtualenv, with the tested versions).
"""

from __future__ import annotations

import asyncio
import secrets
import tomllib
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Any, cast

import pytest
from agents.items import TResponseInputItem
from langchain_core.messages import AIMessage, HumanMessage
from packaging.requirements import Requirement

from ctxwarden_client import Client, session_pb2
from ctxwarden_client.integrations.langchain import CtxwardenChatMessageHistory
from ctxwarden_client.integrations.langgraph import MAX_DEPTH, CtxwardenStore, memory_key
from ctxwarden_client.integrations.openai_agents import CtxwardenSession
from tests.frameworks.frameworks import CLIENT, ROOT, SUITES, python_for
from tests.test_readme_adapters import _commented, _example, _run


@pytest.fixture
def client(server_target: str) -> Iterator[Client]:
    with Client(server_target) as c:
        yield c


def _session(client: Client, **kwargs: Any) -> CtxwardenSession:
    return CtxwardenSession(f"gaps-{secrets.token_hex(4)}", client, **kwargs)


def _items(*items: dict[str, Any]) -> list[TResponseInputItem]:
    return cast("list[TResponseInputItem]", list(items))


def _turns(n: int) -> list[TResponseInputItem]:
    return _items(
        *({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(n))
    )


SUMMARY = {"type": "compaction", "id": "cmp", "encrypted_content": "opaque"}


# -- OpenAI Agents: items as added ----------------------------------------------------


def test_parallel_calls_and_reasoning_between_them_come_back_as_added(client: Client) -> None:
    """Two calls of one response (reasoning between them), then both outputs: without
    grouping, ctxwarden would answer the first call with a synthetic result."""
    items = _items(
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "a", "name": "email", "arguments": "{}"},
        {"type": "reasoning", "id": "rs_2", "summary": []},
        {"type": "function_call", "call_id": "b", "name": "ticket", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "sent"},
        {"type": "function_call_output", "call_id": "b", "output": "T-1"},
    )
    session = _session(client)

    async def run() -> tuple[list[TResponseInputItem], TResponseInputItem | None]:
        await session.add_items(items)
        got = await session.get_items()
        model_input = client.build_model_input(session.ctxwarden_session_id)
        assert not model_input.notices  # no synthetic result, no orphaned output
        for _ in range(3):  # pop the outputs and the second call out of the grouped message
            await session.pop_item()
        return got, (await session.get_items())[-1]

    got, last = asyncio.run(run())
    assert got == items
    assert last == items[3]  # the first call and the reasoning after it stay


def test_a_call_waiting_for_its_result_has_no_synthetic_output(client: Client) -> None:
    """A run paused for an approval stored a call without its result: ctxwarden's view
    answers it for the model, but it is not one of the session's items."""
    items = _items(
        {"role": "user", "content": "charge 7"},
        {"type": "function_call", "call_id": "c", "name": "charge", "arguments": "{}"},
    )
    session = _session(client)

    async def run() -> list[TResponseInputItem]:
        await session.add_items(items)
        return await session.get_items()

    assert asyncio.run(run()) == items


# -- OpenAI Agents: the compaction snapshot --------------------------------------------


def test_snapshot_replaces_its_suffix_and_keeps_the_history(client: Client) -> None:
    session = _session(client)
    items = _turns(6)

    async def run() -> tuple[bool, list[TResponseInputItem]]:
        await session.add_items(items)
        snapshot = await session._get_compaction_snapshot(3)
        assert snapshot is not None
        assert snapshot.items == items[-3:]
        assert not snapshot.complete
        replaced = await snapshot.replace_suffix(1, _items(SUMMARY))
        return replaced, await session.get_items()

    replaced, after = asyncio.run(run())
    assert replaced
    assert after == [*items[:4], SUMMARY]
    history = list(client.list_messages(session.ctxwarden_session_id, include_rolled_back=True))
    assert len(history) == 7  # the two replaced items stay in the history


def test_snapshot_refuses_when_another_client_appended(client: Client) -> None:
    session = _session(client)
    other = CtxwardenSession(session.session_id, client)
    items = _turns(4)

    async def run() -> tuple[bool, bool, list[TResponseInputItem]]:
        await session.add_items(items)
        snapshot = await session._get_compaction_snapshot(10)
        assert snapshot is not None and snapshot.complete
        await other.add_items(_items({"role": "user", "content": "meanwhile"}))
        late = await snapshot.replace_suffix(0, _items(SUMMARY))
        empty = await snapshot.replace_suffix(len(items), _items(SUMMARY))
        return late, empty, await session.get_items()

    late, empty, after = asyncio.run(run())
    assert not late and not empty
    assert after == [*items, {"role": "user", "content": "meanwhile"}]


def test_snapshot_over_a_ctxwarden_summary_replaces_it_too(client: Client) -> None:
    """A suffix that starts at ctxwarden's own summary: the rewind supersedes the
    checkpoint, and what was summarised does not come back."""

    def summarize(system: str, prompt: str, max_tokens: int) -> str:
        return "## Goal\nCount."

    policy = session_pb2.ContextPolicy(keep_recent_tokens=20)
    session = _session(client, template=session_pb2.Session(policy=policy), summarizer=summarize)

    async def run() -> list[TResponseInputItem]:
        await session.add_items(
            _items(*({"role": "user", "content": "word " * 30} for _ in range(6)))
        )
        await session.run_compaction({"force": True})
        before = await session.get_items()
        assert "## Goal" in str(before[0])
        snapshot = await session._get_compaction_snapshot(100)
        assert snapshot is not None and snapshot.complete and snapshot.items == before
        assert await snapshot.replace_suffix(0, _items(SUMMARY))
        return await session.get_items()

    assert asyncio.run(run()) == [SUMMARY]


def test_snapshot_drops_the_prefix_that_prune_prefix_accepts(client: Client) -> None:
    session = _session(client)
    expired = _items(*({"role": "user", "content": f"expired {i}"} for i in range(3)))
    kept = _turns(2)
    suffix = _turns(2)

    def is_expired(item: TResponseInputItem) -> bool:
        return "expired" in str(item)

    async def run() -> list[TResponseInputItem]:
        await session.add_items([*expired, *kept, *suffix])
        snapshot = await session._get_compaction_snapshot(2, prune_prefix=is_expired)
        assert snapshot is not None
        assert await snapshot.replace_suffix(0, _items(SUMMARY))
        return await session.get_items()

    assert asyncio.run(run()) == [*kept, SUMMARY]


def test_a_subclass_that_transforms_items_has_no_snapshot(client: Client) -> None:
    class Upper(CtxwardenSession):
        async def add_items(self, items: list[TResponseInputItem]) -> None:
            await super().add_items(items)

    session = Upper(f"gaps-{secrets.token_hex(4)}", client)
    assert asyncio.run(session._get_compaction_snapshot(5)) is None


# -- LangChain: value equality ----------------------------------------------------------


@pytest.mark.filterwarnings("ignore:The class `InMemoryChatMessageHistory` was deprecated")
def test_histories_are_equal_when_their_messages_are(client: Client) -> None:
    a = CtxwardenChatMessageHistory(f"eq-{secrets.token_hex(4)}", client)
    b = CtxwardenChatMessageHistory(f"eq-{secrets.token_hex(4)}", client)
    same = CtxwardenChatMessageHistory(a.session_id, client)
    assert a == b  # both empty
    a.add_messages([HumanMessage("hi"), AIMessage("hello")])
    assert a == same and same == a
    assert a != b
    b.add_messages([HumanMessage("hi"), AIMessage("hello")])
    assert a == b
    from langchain_core.chat_history import InMemoryChatMessageHistory

    reference = InMemoryChatMessageHistory(messages=a.messages)
    assert a != reference and reference != a  # another kind of history, as with pydantic
    with pytest.raises(TypeError):
        hash(a)


# -- LangGraph: the store's mapping -----------------------------------------------------


def test_store_items_are_memories_of_their_scope(client: Client) -> None:
    project = f"p-{secrets.token_hex(4)}"
    store = CtxwardenStore(client, project_id=project, user_index=1)
    store.put(("facts", "u1"), "food", {"likes": "pizza", "n": 2})
    store.put(("facts", "u2"), "food", {"likes": "soup", "n": 5})
    store.put(("facts", "u1", "old"), "drink", {"likes": "tea"})

    (memory,) = client.list_memories("u1", project, key=memory_key(("facts", "u1"), "food"))
    assert memory.text == '{"likes": "pizza", "n": 2}'
    assert memory.labels["lg.key"] == "food"
    item = store.get(("facts", "u1"), "food")
    assert item is not None and item.value == {"likes": "pizza", "n": 2}
    assert item.created_at == memory.create_time.ToDatetime(tzinfo=UTC)

    assert {i.key for i in store.search(("facts", "u1"))} == {"food", "drink"}
    assert [i.namespace for i in store.search(("facts",), filter={"n": {"$gt": 3}})] == [
        ("facts", "u2")
    ]
    ranked = store.search(("facts",), query="soup please")
    assert ranked[0].value["likes"] == "soup" and ranked[0].score == 0.5
    assert store.list_namespaces(prefix=("facts", "*"), max_depth=2) == [
        ("facts", "u1"),
        ("facts", "u2"),
    ]

    store.delete(("facts", "u1"), "food")
    assert store.get(("facts", "u1"), "food") is None
    assert not list(client.list_memories("u1", project, key=memory_key(("facts", "u1"), "food")))

    with pytest.raises(ValueError, match="user_index"):
        store.put(("facts",), "x", {"a": 1})
    with pytest.raises(ValueError, match="deeper"):
        CtxwardenStore(client, project_id=project).put(("n",) * (MAX_DEPTH + 1), "x", {"a": 1})


def test_store_without_user_index_holds_project_memories(client: Client) -> None:
    project = f"p-{secrets.token_hex(4)}"
    store = CtxwardenStore(client, project_id=project)
    asyncio.run(store.aput(("notes",), "k", {"v": 1}))
    (memory,) = client.list_memories(project_id=project)
    assert (memory.user_id, memory.project_id) == ("", project)
    assert asyncio.run(store.aget(("notes",), "k")) is not None


# -- the extras ---------------------------------------------------------------------------


def _extras() -> dict[str, list[Requirement]]:
    with (CLIENT / "pyproject.toml").open("rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    return {name: [Requirement(r) for r in reqs] for name, reqs in extras.items()}


def _pins() -> dict[str, str]:
    """The exact versions the tests install: the suites' and the root test extra's."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        test = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    pins = {s.distribution: s.version for s in SUITES}
    for raw in [r for suite in SUITES for r in suite.venv] + test:
        specs = list(Requirement(raw).specifier)
        if len(specs) == 1 and specs[0].operator == "==":
            pins.setdefault(Requirement(raw).name, specs[0].version)
    return pins


def test_extras_start_at_the_tested_versions_and_stop_before_the_next_break() -> None:
    pins = _pins()
    for name, requirements in _extras().items():
        for req in requirements:
            lower = [s for s in req.specifier if s.operator == ">="]
            upper = [s for s in req.specifier if s.operator == "<"]
            assert len(lower) == 1 and len(upper) == 1, (name, str(req))
            assert lower[0].version == pins[req.name], (name, str(req), pins[req.name])
            assert pins[req.name] in req.specifier


# -- the README's LangGraph example -------------------------------------------------------


@pytest.mark.frameworks
def test_langgraph_example(server_target: str, tmp_path: Path) -> None:
    """Run as written, in the LangGraph suite's virtualenv (the tested versions)."""
    code = _example("langgraph")
    expected = _commented(code)
    code = code.replace('"shop"', f'"shop-{tmp_path.name}"')  # list_memories reads the project
    (suite,) = [s for s in SUITES if s.name == "langgraph-checkpoint"]
    assert _run(code, server_target, tmp_path, python_for(suite)) == expected
