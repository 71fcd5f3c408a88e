"""LangGraph: a long-term memory store (``BaseStore``) over ctxwarden's memories.

    from ctxwarden_client import Client
    from ctxwarden_client.integrations.langgraph import CtxwardenStore

    store = CtxwardenStore(Client("127.0.0.1:50051"), project_id="shop", user_index=1)
    graph = builder.compile(store=store)  # nodes get it as their ``store`` argument
    store.put(("memories", "u-42"), "food", {"likes": "pizza"})

**The mapping.** An item (namespace, key, value) is one ctxwarden memory:

- its scope: the tenant is the client's (its credentials'), ``project_id`` the
  store's, and ``user_id`` the namespace's element at ``user_index`` when that is
  set (the item is then that user's), else empty (the item is the project's). A
  session of the same tenant, project (and user) that opted into memory
  (``ContextPolicy.memory_max_tokens``) sees it in its memory block;
- its key: ``lg:`` and the SHA-256 of the namespace and key (ctxwarden keys are
  1-128 printable ASCII characters, unique in a scope), so a put is one
  ``CreateMemory`` (an upsert by key) and a get one ``ListMemories`` by key;
- its labels: ``lg.store`` (``"1"``, which marks the store's memories among the
  project's others), ``lg.key`` (the item's key), ``lg.depth`` and ``lg.ns.0``,
  ``lg.ns.1``, ... (the namespace's elements), so a search under a namespace prefix
  is a ``ListMemories`` filtered by labels;
- its text: the value as JSON (what the model reads in the memory block);
  ``created_at`` and ``updated_at`` are the memory's create and update times.

**Limits.** Namespaces have at most :data:`MAX_DEPTH` elements (ctxwarden allows 64
labels a memory) and values are JSON objects of at most 16 KiB encoded. ``search``
filters by namespace prefix on the server and applies ``filter`` (the operators of
``InMemoryStore``: equality, ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``)
on the client; ``query`` ranks by words, not meaning: the score is the share of the
query's words that the value's JSON text contains, and items without any come last
(there is no vector index, so ``index`` arguments are ignored). ``list_namespaces``
reads the labels of every item of the store's project. No TTL (``supports_ttl`` is
False). The client is blocking: ``abatch`` runs ``batch`` in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from .._errors import NotFoundError
from .._sync_client import Client
from ..v1 import memory_pb2

__all__ = ["MAX_DEPTH", "CtxwardenStore"]

MAX_DEPTH = 60
"""The most elements a namespace has: each is a label, and a memory has at most 64."""

STORE_LABEL = "lg.store"
KEY_LABEL = "lg.key"
DEPTH_LABEL = "lg.depth"
NS_LABEL = "lg.ns."
_PAGE = 1000
_WORD = re.compile(r"\w+")


def memory_key(namespace: tuple[str, ...], key: str) -> str:
    """The ctxwarden key of an item: unique per namespace and key, within 128 characters."""
    raw = json.dumps([list(namespace), key], ensure_ascii=False, separators=(",", ":"))
    return "lg:" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def _prefix_labels(path: Iterable[str]) -> dict[str, str]:
    """The labels that pin a namespace's leading elements ("*" pins nothing)."""
    return {f"{NS_LABEL}{i}": part for i, part in enumerate(path) if part != "*"}


def _namespace(memory: memory_pb2.Memory) -> tuple[str, ...] | None:
    labels = memory.labels
    try:
        depth = int(labels[DEPTH_LABEL])
        return tuple(labels[f"{NS_LABEL}{i}"] for i in range(depth))
    except (KeyError, ValueError):
        return None


def _item(memory: memory_pb2.Memory) -> Item | None:
    """The item a memory holds (None: not one of a store's, or its text is not JSON)."""
    namespace = _namespace(memory)
    key = memory.labels.get(KEY_LABEL)
    if namespace is None or key is None or memory.labels.get(STORE_LABEL) != "1":
        return None
    try:
        value = json.loads(memory.text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return Item(
        value=value,
        key=key,
        namespace=namespace,
        created_at=memory.create_time.ToDatetime(tzinfo=UTC),
        updated_at=memory.update_time.ToDatetime(tzinfo=UTC),
    )


class CtxwardenStore(BaseStore):
    """LangGraph's ``BaseStore`` over ctxwarden memories (see the module docstring).

    ``project_id`` is the project of every item (required unless ``user_index`` is
    set); ``user_index``, when set, is the position of the namespace element that is
    the item's user (``("memories", "u-42")`` with ``user_index=1``: user ``u-42``).
    """

    supports_ttl = False

    def __init__(
        self, client: Client, *, project_id: str = "langgraph", user_index: int | None = None
    ) -> None:
        if not project_id and user_index is None:
            raise ValueError("CtxwardenStore needs a project_id, a user_index or both")
        if user_index is not None and not 0 <= user_index < MAX_DEPTH:
            raise ValueError(f"user_index must be in 0..{MAX_DEPTH - 1}")
        self.client = client
        self.project_id = project_id
        self.user_index = user_index

    # -- BaseStore ---------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs the reads against the store as it is before the batch, then its writes
        (the last write of each namespace and key), as ``InMemoryStore`` does."""
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op.namespace, op.key))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                puts[(op.namespace, op.key)] = op
                results.append(None)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        for put in puts.values():
            self._put(put)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return await asyncio.to_thread(self.batch, ops)

    # -- the operations -----------------------------------------------------------

    def _user(self, namespace: tuple[str, ...]) -> str | None:
        """The user_id of a namespace's items (None: the namespace is too short)."""
        if self.user_index is None:
            return ""
        return namespace[self.user_index] if len(namespace) > self.user_index else None

    def _find(self, namespace: tuple[str, ...], key: str) -> memory_pb2.Memory | None:
        user = self._user(namespace)
        if user is None:
            return None
        found = self.client.list_memories(
            user, self.project_id, key=memory_key(namespace, key), page_size=1
        )
        for memory in found:
            item = _item(memory)
            if item is not None and item.namespace == namespace and item.key == key:
                return memory
        return None

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        memory = self._find(namespace, key)
        return None if memory is None else _item(memory)

    def _put(self, op: PutOp) -> None:
        namespace = op.namespace
        if op.value is None:
            memory = self._find(namespace, op.key)
            if memory is not None:
                with contextlib.suppress(NotFoundError):  # deleted meanwhile
                    self.client.delete_memory(memory.memory_id)
            return
        user = self._user(namespace)
        if user is None:
            raise ValueError(
                f"namespace {namespace!r} has no element at user_index {self.user_index}"
            )
        if len(namespace) > MAX_DEPTH:
            raise ValueError(f"namespace {namespace!r} is deeper than {MAX_DEPTH} elements")
        labels = {
            STORE_LABEL: "1",
            KEY_LABEL: op.key,
            DEPTH_LABEL: str(len(namespace)),
            **_prefix_labels(namespace),
        }
        self.client.create_memory(
            memory=memory_pb2.Memory(
                user_id=user,
                project_id=self.project_id,
                key=memory_key(namespace, op.key),
                text=json.dumps(dict(op.value), ensure_ascii=False),
                labels=labels,
            )
        )

    def _memories(
        self, path: tuple[str, ...], *, page_size: int = _PAGE
    ) -> Iterator[memory_pb2.Memory]:
        """The store's memories whose namespace starts with ``path`` ("*": any element),
        newest first."""
        user = ""
        if self.user_index is not None and len(path) > self.user_index:
            user = "" if path[self.user_index] == "*" else path[self.user_index]
        labels = {STORE_LABEL: "1", **_prefix_labels(path)}
        yield from self.client.list_memories(
            user, self.project_id, labels=labels, page_size=min(max(page_size, 1), _PAGE)
        )

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        plain = not op.filter and not _words(op.query)
        wanted = op.offset + op.limit if plain and min(op.offset, op.limit) >= 0 else None
        found: list[Item] = []
        for memory in self._memories(prefix, page_size=wanted or _PAGE):
            item = _item(memory)
            if item is None or item.namespace[: len(prefix)] != prefix:
                continue
            if op.filter and not all(_matches(item.value.get(k), v) for k, v in op.filter.items()):
                continue
            found.append(item)
            if wanted is not None and len(found) >= wanted:
                break
        scored = _rank(found, op.query)
        return [
            SearchItem(
                namespace=item.namespace,
                key=item.key,
                value=item.value,
                created_at=item.created_at,
                updated_at=item.updated_at,
                score=score,
            )
            for score, item in scored[op.offset : op.offset + op.limit]
        ]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        # A prefix condition pins leading elements on the server; the rest is matched here.
        path = next((c.path for c in conditions if c.match_type == "prefix"), ())
        namespaces: set[tuple[str, ...]] = set()
        for memory in self._memories(tuple(path)):
            namespace = _namespace(memory)
            if namespace is not None and all(_does_match(c, namespace) for c in conditions):
                namespaces.add(namespace)
        if op.max_depth is not None:
            namespaces = {ns[: op.max_depth] for ns in namespaces}
        return sorted(namespaces)[op.offset : op.offset + op.limit]


def _words(text: str | None) -> set[str]:
    return set(_WORD.findall(text.lower())) if text else set()


def _rank(items: list[Item], query: str | None) -> list[tuple[float | None, Item]]:
    """``items`` with their share of the query's words, best first (stable); without a
    query (or one without words), as they are, unscored."""
    words = _words(query)
    if not words:
        return [(None, item) for item in items]
    scored = [
        (len(words & _words(json.dumps(item.value, ensure_ascii=False))) / len(words), item)
        for item in items
    ]
    scored.sort(key=lambda pair: -pair[0])
    return [(score, item) for score, item in scored]


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """``InMemoryStore``'s namespace matching: a prefix or suffix, "*" any element."""
    if condition.match_type not in ("prefix", "suffix"):
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    path = tuple(condition.path)
    if not path:
        return True
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(p in ("*", n) for n, p in zip(part, path, strict=True))


def _matches(value: Any, wanted: Any) -> bool:
    """``InMemoryStore``'s filter comparison (JSONB-like, nested, with operators)."""
    if isinstance(wanted, Mapping):
        if any(str(k).startswith("$") for k in wanted):
            return all(_operator(value, str(op), arg) for op, arg in wanted.items())
        if not isinstance(value, Mapping):
            return False
        return all(_matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(_matches(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        try:
            a, b = float(value), float(arg)
        except (TypeError, ValueError):
            return False  # a missing or non-numeric value matches no comparison
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise ValueError(f"Unsupported operator: {op}")
