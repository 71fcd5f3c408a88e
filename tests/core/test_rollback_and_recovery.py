"""Which messages a rollback removes, and what to do after a provider error."""

from __future__ import annotations

import pytest

from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason
from ctxwarden.core.recovery import (
    DEFAULT_MAX_RETRIES,
    RETRY_CAP_SECONDS,
    ErrorClass,
    Recovery,
    RecoveryAction,
    classify_error,
    decide_recovery,
)
from ctxwarden.core.rollback import last_failure_message, rewind_to, trailing_failed_turn


def user(seq: int) -> Message:
    return Message(Role.USER, (ContentBlock.of_text("hi"),), seq=seq)


def ok(seq: int, *calls: str) -> Message:
    return Message(
        Role.ASSISTANT,
        (ContentBlock.of_text("sure"), *(ContentBlock.of_tool_call(c, "t") for c in calls)),
        seq=seq,
        stop_reason=StopReason.TOOL_USE if calls else StopReason.STOP,
    )


def failed(
    seq: int, *calls: str, error: str = "boom", stop: StopReason = StopReason.ERROR
) -> Message:
    return Message(
        Role.ASSISTANT,
        tuple(ContentBlock.of_tool_call(c, "t") for c in calls),
        seq=seq,
        stop_reason=stop,
        error_message=error,
    )


def result(seq: int, call_id: str) -> Message:
    return Message(Role.TOOL_RESULT, (ContentBlock.of_text("out"),), seq=seq, tool_call_id=call_id)


# -- trailing_failed_turn ---------------------------------------------------------


@pytest.mark.parametrize(
    "history",
    [
        [],
        [user(1)],
        [user(1), ok(2)],
        [user(1), ok(2, "c1"), result(3, "c1")],
        [user(1), failed(2), user(3)],
        [user(1), failed(2, "c1"), result(3, "c1"), ok(4)],
    ],
    ids=["empty", "user", "answer", "answered-tools", "failure-then-user", "failure-then-ok"],
)
def test_nothing_trailing_gives_empty(history: list[Message]) -> None:
    assert trailing_failed_turn(history) == []


def test_single_failed_message() -> None:
    assert trailing_failed_turn([user(1), failed(2)]) == [2]


def test_aborted_counts_as_failed() -> None:
    assert trailing_failed_turn([user(1), failed(2, stop=StopReason.ABORTED)]) == [2]


def test_failed_message_with_tool_calls_and_their_results() -> None:
    history = [user(1), failed(2, "c1", "c2"), result(3, "c1"), result(4, "c2")]
    assert trailing_failed_turn(history) == [2, 3, 4]


def test_failed_message_with_partial_results() -> None:
    history = [user(1), failed(2, "c1", "c2"), result(3, "c2")]
    assert trailing_failed_turn(history) == [2, 3]


def test_consecutive_failures_are_all_rolled_back() -> None:
    history = [
        user(1),
        failed(2, "a"),
        result(3, "a"),
        failed(4),
        failed(5, "b", stop=StopReason.ABORTED),
        result(6, "b"),
    ]
    assert trailing_failed_turn(history) == [2, 3, 4, 5, 6]


def test_stops_at_successful_message() -> None:
    history = [user(1), ok(2), failed(3), failed(4)]
    assert trailing_failed_turn(history) == [3, 4]


def test_stops_at_user_message() -> None:
    history = [user(1), failed(2), user(3), failed(4)]
    assert trailing_failed_turn(history) == [4]


def test_stops_at_results_of_a_successful_message() -> None:
    history = [user(1), ok(2, "c0"), result(3, "c0"), failed(4, "c1"), result(5, "c1")]
    assert trailing_failed_turn(history) == [4, 5]


def test_results_of_successful_message_are_never_removed() -> None:
    history = [user(1), ok(2, "c0", "c1"), result(3, "c0"), failed(4), result(5, "c1")]
    # The failed message goes; the late result of a successful call stays.
    assert trailing_failed_turn(history) == [4]


def test_trailing_failed_turn_works_on_gapped_seqs_and_tuples() -> None:
    history = (user(10), ok(20), failed(35, "x"), result(90, "x"))
    assert trailing_failed_turn(history) == [35, 90]
    assert history == (user(10), ok(20), failed(35, "x"), result(90, "x"))


# -- rewind_to ----------------------------------------------------------------------


HISTORY = [user(1), ok(2, "c"), result(3, "c"), failed(5), user(8)]


@pytest.mark.parametrize(
    ("to_seq", "expected"),
    [
        (0, [1, 2, 3, 5, 8]),
        (1, [2, 3, 5, 8]),
        (3, [5, 8]),
        (4, [5, 8]),
        (5, [8]),
        (8, []),
        (100, []),
    ],
)
def test_rewind_to(to_seq: int, expected: list[int]) -> None:
    assert rewind_to(HISTORY, to_seq) == expected


def test_rewind_to_empty() -> None:
    assert rewind_to([], 0) == []


# -- last_failure_message ------------------------------------------------------------


def test_last_failure_message_is_newest_failed_among_seqs() -> None:
    history = [user(1), failed(2, error="first"), failed(3, error="second"), failed(4, error="")]
    assert last_failure_message(history, [2, 3, 4]) == "second"
    assert last_failure_message(history, [2]) == "first"
    assert last_failure_message(history, [1]) == ""
    assert last_failure_message(history, []) == ""


# -- classify_error ------------------------------------------------------------------


OVERFLOW = [
    "prompt is too long: 215000 tokens > 200000 maximum",
    "This model's maximum context length is 128000 tokens",
    "Error code: 400 - {'error': {'code': 'context_length_exceeded'}}",
    "The input exceeds the context window of this model",
    "too many tokens in request",
    "PROMPT IS TOO LONG",
    "Input is too long for requested model.",
    "Please reduce the length of the messages or completion.",
    "Request too large for model gpt-4o",
    # overflow wins over transient wording
    "503: prompt is too long, try again later",
]
TRANSIENT = [
    "429 Too Many Requests",
    "rate limit exceeded",
    "Rate_limit reached for requests",
    "overloaded_error: Overloaded",
    "502 Bad Gateway",
    "500 Internal Server Error",
    "503 Service Unavailable",
    "504 Gateway Timeout",
    "Request timed out",
    "connection reset by peer",
    "Connection refused",
    "read ECONNRESET",
    "socket hang up",
    "resource temporarily unavailable",
]
FATAL = [
    "invalid api key",
    "401 Unauthorized: Incorrect API key provided",
    "403 Forbidden",
    "400 Bad Request: messages.0.content is required",
    "model not found",
]


@pytest.mark.parametrize("message", OVERFLOW)
def test_classify_overflow(message: str) -> None:
    assert classify_error(message) is ErrorClass.OVERFLOW


@pytest.mark.parametrize("message", TRANSIENT)
def test_classify_transient(message: str) -> None:
    assert classify_error(message) is ErrorClass.TRANSIENT


@pytest.mark.parametrize("message", FATAL)
def test_classify_fatal(message: str) -> None:
    assert classify_error(message) is ErrorClass.FATAL


@pytest.mark.parametrize("message", ["", "   ", "\n\t"])
def test_classify_nothing(message: str) -> None:
    assert classify_error(message) is ErrorClass.NONE


# -- decide_recovery -------------------------------------------------------------------


def test_transient_backs_off_2_4_8_then_fails() -> None:
    assert DEFAULT_MAX_RETRIES == 3
    actions = [decide_recovery("429 Too Many Requests", n) for n in (1, 2, 3, 4, 5)]
    assert [(r.action, r.retry_after_seconds) for r in actions] == [
        (RecoveryAction.RETRY, 2.0),
        (RecoveryAction.RETRY, 4.0),
        (RecoveryAction.RETRY, 8.0),
        (RecoveryAction.FAIL, 0.0),
        (RecoveryAction.FAIL, 0.0),
    ]
    assert "retry 1 of 3" in actions[0].reason
    assert "retry 3 of 3" in actions[2].reason
    assert "after 3 retries" in actions[3].reason
    assert "429 Too Many Requests" in actions[3].reason


def test_explicit_max_retries() -> None:
    assert decide_recovery("overloaded", 3, max_retries=3).action is RecoveryAction.RETRY
    assert decide_recovery("overloaded", 4, max_retries=3).action is RecoveryAction.FAIL
    assert decide_recovery("overloaded", 1, max_retries=0).action is RecoveryAction.FAIL
    assert decide_recovery("overloaded", 2, max_retries=1).action is RecoveryAction.FAIL


def test_zero_failures_counts_as_first_attempt() -> None:
    assert decide_recovery("502 Bad Gateway", 0) == decide_recovery("502 Bad Gateway", 1)
    assert decide_recovery("502 Bad Gateway", 0).retry_after_seconds == 2.0


def test_backoff_is_capped() -> None:
    delays = [
        decide_recovery("timeout", n, max_retries=20).retry_after_seconds for n in range(1, 21)
    ]
    assert delays[:5] == [2.0, 4.0, 8.0, 16.0, 32.0]
    assert all(d == RETRY_CAP_SECONDS for d in delays[5:])


@pytest.mark.parametrize("failures", [0, 1, 3, 10])
def test_overflow_always_compacts(failures: int) -> None:
    r = decide_recovery("prompt is too long", failures)
    assert r.action is RecoveryAction.COMPACT_AND_RETRY
    assert r.retry_after_seconds == 0.0


@pytest.mark.parametrize("failures", [0, 1, 10])
def test_fatal_fails_immediately(failures: int) -> None:
    r = decide_recovery("invalid api key", failures)
    assert r == Recovery(RecoveryAction.FAIL, 0.0, "not retryable: invalid api key")


def test_reason_quotes_at_most_200_chars_of_error() -> None:
    error = "invalid api key " + "x" * 1000
    assert decide_recovery(error, 1).reason == "not retryable: " + error[:200]
    error = "429 " + "y" * 1000
    assert decide_recovery(error, 1).reason.endswith(error[:200])


def test_no_error_means_unspecified() -> None:
    assert decide_recovery("", 5) == Recovery(
        RecoveryAction.UNSPECIFIED, 0.0, "no error to classify"
    )
