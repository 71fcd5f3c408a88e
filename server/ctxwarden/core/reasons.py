"""The catalogue of ``google.rpc.ErrorInfo.reason`` codes the server sends.

Every error the server answers with carries one of these reasons (domain
``ctxwarden.dev``). The values are the wire contract: clients match on the
strings, so a value never changes; a member is added for a new failure, and
the generated reference (docs/reference/errors.md, scripts/gen_docs.py)
lists every member, with the status codes of its section.
"""

from __future__ import annotations

import enum


class ErrorReason(enum.StrEnum):
    """A stable, machine-readable code for one kind of failure."""

    # -- INVALID_ARGUMENT: the request is malformed --------------------------------

    MALFORMED_REQUEST = "MALFORMED_REQUEST"
    """The request is not valid protobuf (e.g. a string field is not UTF-8)."""
    MISSING_REQUEST = "MISSING_REQUEST"
    """A unary call ended without sending its request message."""
    MISSING_FIELD = "MISSING_FIELD"
    """A required field is empty (e.g. messages, update_mask, plan_id, summary)."""
    INVALID_SESSION_ID = "INVALID_SESSION_ID"
    """A session ID is not 1-255 characters of [A-Za-z0-9._:-]."""
    INVALID_KEY = "INVALID_KEY"
    """A message_id or request_id is not 1-128 printable ASCII characters."""
    INVALID_JSON = "INVALID_JSON"
    """A JSON field (tool arguments, schema) is not valid JSON or not an object."""
    JSON_TOO_DEEP = "JSON_TOO_DEEP"
    """A JSON field nests objects and arrays deeper than the limit."""
    NUL_CHARACTER = "NUL_CHARACTER"
    """A text field contains a NUL character (U+0000)."""
    EMPTY_CONTENT = "EMPTY_CONTENT"
    """A message has no content (only a failed assistant message may be empty)."""
    INVALID_CONTENT = "INVALID_CONTENT"
    """A content block is empty or of a kind the message's role cannot carry."""
    INVALID_ROLE = "INVALID_ROLE"
    """A message's role is unset or unknown."""
    INVALID_STOP_REASON = "INVALID_STOP_REASON"
    """A message's stop_reason is unknown."""
    INVALID_VISIBILITY = "INVALID_VISIBILITY"
    """A message's visibility is unknown."""
    INVALID_USAGE = "INVALID_USAGE"
    """A message's usage has a negative or implausibly large token count."""
    DUPLICATE_MESSAGE_ID = "DUPLICATE_MESSAGE_ID"
    """Two messages of one append have the same message_id."""
    DUPLICATE_TOOL_CALL_ID = "DUPLICATE_TOOL_CALL_ID"
    """Two tool calls of one message have the same id."""
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    """A message is larger than --max-message-bytes (sent or as stored)."""
    TOO_MANY_MESSAGES = "TOO_MANY_MESSAGES"
    """An append carries more than --max-messages-per-request messages."""
    FIELD_TOO_LARGE = "FIELD_TOO_LARGE"
    """A field, the tools or the labels exceed their size or count limit."""
    FIELD_TOO_LONG = "FIELD_TOO_LONG"
    """A session's user_id, project_id or model is longer than 128 characters."""
    STATE_TOO_LARGE = "STATE_TOO_LARGE"
    """A session, user or project state would exceed 64 KiB encoded as JSON."""
    INVALID_LABEL = "INVALID_LABEL"
    """A session label has an empty key."""
    INVALID_POLICY = "INVALID_POLICY"
    """A session policy number is negative."""
    DUPLICATE_TOOL = "DUPLICATE_TOOL"
    """A session's tools have two tools with the same name."""
    UNKNOWN_TOKENIZER = "UNKNOWN_TOKENIZER"
    """policy.tokenizer names no tokenizer the server has."""
    TOKENIZER_NOT_ALLOWED = "TOKENIZER_NOT_ALLOWED"
    """An hf: tokenizer lies outside the directories the operator allowed."""
    INVALID_UPDATE_MASK = "INVALID_UPDATE_MASK"
    """An update_mask path names a field that cannot be updated."""
    INVALID_PAGE_SIZE = "INVALID_PAGE_SIZE"
    """page_size is negative."""
    INVALID_PAGE_TOKEN = "INVALID_PAGE_TOKEN"
    """page_token was not issued by this server, or for another session or filter."""
    INVALID_SEQ = "INVALID_SEQ"
    """A seq, to_seq, as_of_seq or ForkSession's at_seq is out of the session's range."""
    INVALID_RANGE = "INVALID_RANGE"
    """GetToolOutput's offset or limit is negative."""
    NOT_A_TOOL_RESULT = "NOT_A_TOOL_RESULT"
    """GetToolOutput names a message that is not a tool result."""
    INVALID_FORMAT = "INVALID_FORMAT"
    """BuildModelInput's format is unknown."""
    INVALID_VIEW = "INVALID_VIEW"
    """BuildModelInput's view is unknown."""
    INVALID_MAX_OUTPUT_TOKENS = "INVALID_MAX_OUTPUT_TOKENS"
    """BuildModelInput's max_output_tokens is negative."""
    INVALID_KEEP_RECENT_TOKENS = "INVALID_KEEP_RECENT_TOKENS"
    """A compaction's keep_recent_tokens is negative."""
    INVALID_SUMMARIZER_CONTEXT_WINDOW = "INVALID_SUMMARIZER_CONTEXT_WINDOW"
    """PrepareCompaction's summarizer_context_window is negative."""
    INVALID_TRIGGER = "INVALID_TRIGGER"
    """Compact's trigger is unknown."""
    INVALID_ANCHOR_SURVIVAL = "INVALID_ANCHOR_SURVIVAL"
    """A min_anchor_survival names no anchor category or a fraction outside 0..1."""
    INVALID_MODEL_OUTPUT = "INVALID_MODEL_OUTPUT"
    """A provider response or input items to read are malformed or hold unsupported content."""
    PROVIDER_ERROR_OUTPUT = "PROVIDER_ERROR_OUTPUT"
    """AppendModelOutput was given a provider's error body: record it with RollbackTurn."""
    REQUEST_ID_REUSED = "REQUEST_ID_REUSED"
    """A request_id was already used for a different request."""
    WRITE_REJECTED = "WRITE_REJECTED"
    """The database refused to store the request's data."""
    INVALID_MEMORY_SCOPE = "INVALID_MEMORY_SCOPE"
    """A memory has neither a user_id nor a project_id."""
    INVALID_MEMORY_STATE = "INVALID_MEMORY_STATE"
    """A memory's state, or a policy's memory_write, is unknown."""

    # -- NOT_FOUND --------------------------------------------------------------------

    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    """The session does not exist or was deleted."""
    MESSAGE_NOT_FOUND = "MESSAGE_NOT_FOUND"
    """The session has no message with the given seq."""
    PLAN_NOT_FOUND = "PLAN_NOT_FOUND"
    """The compaction plan does not exist for the session."""
    MEMORY_NOT_FOUND = "MEMORY_NOT_FOUND"
    """The tenant has no memory with the given memory_id."""

    # -- ALREADY_EXISTS ---------------------------------------------------------------

    SESSION_ALREADY_EXISTS = "SESSION_ALREADY_EXISTS"
    """CreateSession names a session_id that is taken."""

    # -- FAILED_PRECONDITION: the session's state does not allow it ----------------

    UNKNOWN_TOOL_CALL = "UNKNOWN_TOOL_CALL"
    """Retired, no longer sent: a tool result that answers no active tool call is
    stored, and the model input leaves it out (ORPHANED_TOOL_RESULT_OMITTED)."""
    TOOL_CALL_ALREADY_ANSWERED = "TOOL_CALL_ALREADY_ANSWERED"
    """A tool result answers a tool call that already has a result."""
    NOTHING_TO_COMPACT = "NOTHING_TO_COMPACT"
    """The whole effective history fits in keep_recent_tokens."""
    PLAN_EXPIRED = "PLAN_EXPIRED"
    """The compaction plan outlived --compaction-plan-ttl."""
    NO_SUMMARIZER = "NO_SUMMARIZER"
    """Compact was called but the server has no summariser configured."""
    SESSION_ARCHIVED = "SESSION_ARCHIVED"
    """The session is archived (read-only): UnarchiveSession makes it writable again."""
    SUMMARIZER_FAILED = "SUMMARIZER_FAILED"
    """The summariser failed (UNAVAILABLE if retrying may help, else FAILED_PRECONDITION)."""
    SUMMARIZER_WINDOW_TOO_SMALL = "SUMMARIZER_WINDOW_TOO_SMALL"
    """The summariser's context window cannot hold even the fixed part of a summary prompt."""
    ANCHORS_LOST = "ANCHORS_LOST"
    """CommitCompaction's summary keeps fewer anchors of a category than its
    min_anchor_survival asks (the metadata names them); the plan stays valid."""

    # -- ABORTED: a concurrent change; re-read and retry -----------------------------

    LAST_SEQ_MISMATCH = "LAST_SEQ_MISMATCH"
    """expected_last_seq is not the session's last_seq; nothing was written."""
    ETAG_MISMATCH = "ETAG_MISMATCH"
    """UpdateSession's or UpdateMemory's etag is stale."""
    CONCURRENT_MODIFICATION = "CONCURRENT_MODIFICATION"
    """Another writer changed the session first."""
    PLAN_STALE = "PLAN_STALE"
    """A compaction was committed or messages rolled back since the plan was made."""

    # -- RESOURCE_EXHAUSTED: a limit or quota ---------------------------------------

    RESPONSE_TOO_LARGE = "RESPONSE_TOO_LARGE"
    """The response would be larger than the server may send in one message."""
    SESSION_QUOTA_EXCEEDED = "SESSION_QUOTA_EXCEEDED"
    """The tenant has --max-sessions-per-tenant sessions already."""
    STORAGE_QUOTA_EXCEEDED = "STORAGE_QUOTA_EXCEEDED"
    """The write would cross the tenant's --max-stored-bytes-per-tenant."""
    RATE_LIMITED = "RATE_LIMITED"
    """The tenant exceeded --rate-limit-rps."""
    AUTH_RATE_LIMITED = "AUTH_RATE_LIMITED"
    """The client failed authentication too often; its calls are refused for a while."""
    SERVER_BUSY = "SERVER_BUSY"
    """The server is reading too many request messages at once."""

    # -- UNAVAILABLE: retry later ----------------------------------------------------

    DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"
    """The database is unreachable or timed out."""
    SESSION_BUSY = "SESSION_BUSY"
    """Another call on the session is still waiting for the database."""

    # -- DEADLINE_EXCEEDED: retry later -----------------------------------------------

    REQUEST_READ_TIMEOUT = "REQUEST_READ_TIMEOUT"
    """The request message did not arrive within --request-read-timeout."""

    # -- UNAUTHENTICATED --------------------------------------------------------------

    MISSING_CREDENTIALS = "MISSING_CREDENTIALS"
    """The server requires credentials and the call sent none."""
    MALFORMED_CREDENTIALS = "MALFORMED_CREDENTIALS"
    """The authorization header is not 'Bearer <token>'."""
    INVALID_CREDENTIALS = "INVALID_CREDENTIALS"
    """The API key or token is not valid."""
    EXPIRED_CREDENTIALS = "EXPIRED_CREDENTIALS"
    """The token has expired."""

    # -- PERMISSION_DENIED ------------------------------------------------------------

    NO_TENANT = "NO_TENANT"
    """The token has no usable tenant claim."""
    MISSING_SCOPE = "MISSING_SCOPE"
    """The token's scopes do not allow the method."""

    # -- INTERNAL ----------------------------------------------------------------------

    INTERNAL = "INTERNAL"
    """An unexpected server error; the server log has details."""


RETIRED = frozenset({ErrorReason.UNKNOWN_TOOL_CALL})
"""Members the server no longer sends (kept: a value is never reused)."""

__all__ = ["RETIRED", "ErrorReason"]
