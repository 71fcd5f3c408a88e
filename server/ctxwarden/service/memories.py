"""Long-term memory use cases: CreateMemory, GetMemory, ListMemories, UpdateMemory,
DeleteMemory, and the frozen memory block of a session (selected at creation,
at compaction and on an explicit refresh, never in between)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ctxwarden.core.context import counting_profile
from ctxwarden.core.errors import Aborted, InvalidArgument, NotFound
from ctxwarden.core.memory import (
    MAX_MEMORY_LABELS,
    MAX_MEMORY_TEXT_BYTES,
    DurableFact,
    Memory,
    MemoryBlock,
    MemoryState,
    MemoryWrite,
    block_message,
    select_block,
)
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Session
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.core.tokens import Tokenizer
from ctxwarden.core.validation import KEY_RE, check_no_nul
from ctxwarden.service.pages import clamp_page_size, decode_token, encode_token, token_id
from ctxwarden.store.errors import ConcurrentWrite, DuplicateKey
from ctxwarden.util import ids

if TYPE_CHECKING:
    from ctxwarden.service.runtime import SessionRuntime

UPDATABLE = ("text", "labels", "pinned", "state", "key")
MAX_SCOPE_ID_LENGTH = 128


def check_memory(m: Memory, prefix: str = "memory") -> None:
    """A memory's client-set fields: scope, key, text, labels."""
    if not m.user_id and not m.project_id:
        raise InvalidArgument(
            f"{prefix} needs a scope: set user_id, project_id or both",
            reason=ErrorReason.INVALID_MEMORY_SCOPE,
            field=f"{prefix}.user_id",
        )
    for name in ("user_id", "project_id"):
        value: str = getattr(m, name)
        check_no_nul(value, f"{prefix}.{name}")
        if len(value) > MAX_SCOPE_ID_LENGTH:
            raise InvalidArgument(
                f"{prefix}.{name} has {len(value)} characters; the limit is 128",
                reason=ErrorReason.FIELD_TOO_LONG,
                field=f"{prefix}.{name}",
            )
    if m.key and not KEY_RE.fullmatch(m.key):
        raise InvalidArgument(
            f"{prefix}.key must be 1-128 printable ASCII characters",
            reason=ErrorReason.INVALID_KEY,
            field=f"{prefix}.key",
        )
    if not m.text.strip():
        raise InvalidArgument(
            f"{prefix}.text is required", reason=ErrorReason.MISSING_FIELD, field=f"{prefix}.text"
        )
    check_no_nul(m.text, f"{prefix}.text")
    size = len(m.text.encode("utf-8", "surrogatepass"))
    if size > MAX_MEMORY_TEXT_BYTES:
        raise InvalidArgument(
            f"{prefix}.text is {size:,} bytes; the limit is {MAX_MEMORY_TEXT_BYTES:,}",
            reason=ErrorReason.FIELD_TOO_LARGE,
            field=f"{prefix}.text",
        )
    if len(m.labels) > MAX_MEMORY_LABELS:
        raise InvalidArgument(
            f"{prefix}.labels has {len(m.labels)} entries; the limit is {MAX_MEMORY_LABELS}",
            reason=ErrorReason.FIELD_TOO_LARGE,
            field=f"{prefix}.labels",
        )
    for key, value in m.labels.items():
        if not key:
            raise InvalidArgument(
                f"{prefix}.labels has an empty key",
                reason=ErrorReason.INVALID_LABEL,
                field=f"{prefix}.labels",
            )
        check_no_nul(key + value, f"{prefix}.labels")


def _not_found(memory_id: str) -> NotFound:
    return NotFound(
        f"memory {memory_id!r} does not exist",
        reason=ErrorReason.MEMORY_NOT_FOUND,
        metadata={"memory_id": memory_id},
    )


class MemoryBlocks:
    """Selects a session's memory block and stores it with the session."""

    def __init__(self, rt: SessionRuntime) -> None:
        self.rt = rt

    async def select(self, session: Session, tokenizer: Tokenizer) -> MemoryBlock:
        """The block ``session`` gets now (empty when it did not opt in)."""
        budget = session.policy.memory_max_tokens
        if budget <= 0:
            return MemoryBlock()
        tenant = tenant_of(session.session_id)
        candidates = await self.rt.db(
            lambda: self.rt.store.memories.candidates(tenant, session.user_id, session.project_id)
        )
        profile = counting_profile(session.model, tokenizer)
        return select_block(
            candidates,
            budget,
            lambda text: profile.message(block_message(text)),
            tokenizer.count,
            user_id=session.user_id,
            project_id=session.project_id,
        )

    @staticmethod
    def tokens(session: Session, tokenizer: Tokenizer) -> int:
        """Tokens of ``session``'s memory block message (0 without one)."""
        if not session.memory:
            return 0
        return counting_profile(session.model, tokenizer).message(
            block_message(session.memory.text)
        )

    async def refresh(self, session_id: str) -> None:
        """Select the session's block again and store it if it changed."""
        async with self.rt.hot.lock(session_id):
            ctx = await self.rt.context_locked(session_id, verify=True)
            block = await self.select(ctx.session, ctx.tokenizer)
            if block == ctx.session.memory:
                return
            current = ctx.session
            new = replace(
                current, memory=block, version=current.version + 1, update_time_us=ids.now_us()
            )
            grown = self.tokens(new, ctx.tokenizer) - ctx.memory_tokens
            new = replace(new, context_tokens=ctx.context_tokens + grown)
            written = await self.rt.write(
                session_id,
                lambda: self.rt.store.memories.set_block(new, block, current.version),
            )
            if not written:
                raise self.rt.concurrent(session_id)
            ctx.replace_session(new)
            ctx.checked_at = self.rt.clock()

    async def store_facts(
        self, session: Session, facts: Sequence[DurableFact], mode: MemoryWrite
    ) -> tuple[str, ...]:
        """Store a compaction's durable facts as memories of the session's user
        (and project) or project: PROPOSED or ACTIVE by ``mode``; their IDs."""
        if mode is MemoryWrite.OFF or not facts:
            return ()
        state = MemoryState.ACTIVE if mode is MemoryWrite.AUTO else MemoryState.PROPOSED
        now = ids.now_us()
        memories: list[Memory] = []
        for fact in facts:
            user = "" if fact.project_scope else session.user_id
            memory = Memory(
                memory_id=ids.new_id(),
                tenant_id=tenant_of(session.session_id),
                text=fact.text.strip()[: MAX_MEMORY_TEXT_BYTES // 4],
                user_id=user,
                project_id=session.project_id,
                key=fact.key if fact.key and KEY_RE.fullmatch(fact.key) else "",
                state=state,
                create_time_us=now,
                update_time_us=now,
                source_session_id=session.session_id,
            )
            if (memory.user_id or memory.project_id) and memory.text.strip():
                memories.append(memory)
        stored = await self.rt.db(lambda: self.rt.store.memories.insert_all(memories))
        return tuple(m.memory_id for m in stored)


class Memories:
    """CreateMemory, GetMemory, ListMemories, UpdateMemory, DeleteMemory."""

    def __init__(self, rt: SessionRuntime) -> None:
        self.rt = rt

    async def create(self, memory: Memory, tenant: str) -> Memory:
        check_memory(memory)
        now = ids.now_us()
        fresh = replace(
            memory,
            memory_id=ids.new_id(),
            tenant_id=tenant,
            create_time_us=now,
            update_time_us=now,
            revision=1,
            source_session_id="",
        )
        return await self.rt.db(lambda: self.rt.store.memories.upsert(fresh))

    async def get(self, memory_id: str, tenant: str) -> Memory:
        if not memory_id:
            raise InvalidArgument(
                "memory_id is required", reason=ErrorReason.MISSING_FIELD, field="memory_id"
            )
        found = (
            await self.rt.db(lambda: self.rt.store.memories.get(tenant, memory_id))
            if KEY_RE.fullmatch(memory_id)
            else None
        )
        if found is None:
            raise _not_found(memory_id)
        return found

    async def list(
        self,
        tenant: str,
        *,
        user_id: str,
        project_id: str,
        key: str,
        labels: Mapping[str, str],
        state: MemoryState | None,
        page_size: int,
        page_token: str,
    ) -> tuple[list[Memory], str]:
        size = clamp_page_size(page_size, 50)
        # JSON has no tuples: the labels are compared as lists of [key, value].
        pairs: list[list[str]] = [[k, v] for k, v in sorted(labels.items())]
        filters: dict[str, object] = {
            "u": user_id,
            "p": project_id,
            "k": key,
            "l": pairs,
            "s": int(state or 0),
        }
        before = ""
        if page_token:
            tok = decode_token(page_token)
            if {k: tok.get(k) for k in filters} != filters:
                raise InvalidArgument(
                    "page_token was issued for different filters",
                    reason=ErrorReason.INVALID_PAGE_TOKEN,
                    field="page_token",
                )
            before = token_id(tok, "i")
        rows, more = await self.rt.db(
            lambda: self.rt.store.memories.page(
                tenant,
                user_id=user_id,
                project_id=project_id,
                key=key,
                state=state,
                labels=labels,
                limit=size,
                before=before,
            )
        )
        token = encode_token({**filters, "i": rows[-1].memory_id}) if more and rows else ""
        return rows, token

    async def update(self, memory: Memory, paths: Sequence[str], etag: str, tenant: str) -> Memory:
        current = await self.get(memory.memory_id, tenant)
        if etag and etag != current.etag:
            raise Aborted(
                f"etag {etag} is stale (current {current.etag}); re-read the memory",
                reason=ErrorReason.ETAG_MISMATCH,
                metadata={"etag": current.etag},
            )
        changes = {p: getattr(memory, p) for p in paths}
        new = replace(
            current, **changes, revision=current.revision + 1, update_time_us=ids.now_us()
        )
        check_memory(new)
        try:
            await self.rt.db(lambda: self.rt.store.memories.update(new, current.revision))
        except ConcurrentWrite:
            raise Aborted(
                f"memory {memory.memory_id!r} was changed concurrently; re-read it",
                reason=ErrorReason.ETAG_MISMATCH,
            ) from None
        except DuplicateKey:
            raise InvalidArgument(
                f"another memory of this scope has the key {new.key!r}",
                reason=ErrorReason.INVALID_KEY,
                field="memory.key",
            ) from None
        return new

    async def delete(self, memory_id: str, tenant: str) -> None:
        await self.get(memory_id, tenant)
        await self.rt.db(lambda: self.rt.store.memories.delete(tenant, memory_id))
