"""Retention rules: which archived sessions, deleted sessions and idempotency
records a purge removes, per tenant, and the cutoffs that follows from them.

A rule is a number of days (hours for idempotency records); 0 means the rule is
off, and nothing is purged that no rule names. A tenant's own value wins over
the server-wide default; a tenant that names no value for a rule inherits the
default's. Pure: the caller gives the time.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

DAY_US = 86_400_000_000
HOUR_US = 3_600_000_000


class RuleKind(enum.StrEnum):
    """What a rule purges (the ``rule`` label of the purge metrics)."""

    ARCHIVED = "archived_sessions"
    DELETED = "deleted_sessions"
    IDEMPOTENCY = "idempotency_records"


RULE_KEYS: Mapping[RuleKind, str] = {
    RuleKind.ARCHIVED: "purge_archived_after_days",
    RuleKind.DELETED: "purge_deleted_after_days",
    RuleKind.IDEMPOTENCY: "purge_idempotency_after_hours",
}
"""The setting (flag, config key, retention-file key) of each rule."""
UNIT_US: Mapping[RuleKind, int] = {
    RuleKind.ARCHIVED: DAY_US,
    RuleKind.DELETED: DAY_US,
    RuleKind.IDEMPOTENCY: HOUR_US,
}


@dataclass(frozen=True, slots=True)
class RetentionRule:
    """One tenant's (or the default's) values; None: inherit the default's."""

    purge_archived_after_days: float | None = None
    purge_deleted_after_days: float | None = None
    purge_idempotency_after_hours: float | None = None

    def value(self, kind: RuleKind) -> float | None:
        value: float | None = getattr(self, RULE_KEYS[kind])
        return value


@dataclass(frozen=True, slots=True)
class TenantScope:
    """The tenants one cutoff applies to: ``only`` that one, or every tenant but
    those in ``excluded`` (which have their own value for the rule)."""

    only: str | None = None
    excluded: frozenset[str] = frozenset()

    def label(self) -> str:
        return "(default)" if self.only is None else self.only


@dataclass(frozen=True, slots=True)
class Cutoff:
    """Purge what ``kind`` names in ``scope`` if it is older than ``before_us``."""

    kind: RuleKind
    scope: TenantScope
    before_us: int


@dataclass(frozen=True, slots=True)
class RetentionRules:
    default: RetentionRule = RetentionRule()
    tenants: Mapping[str, RetentionRule] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for who, rule in (("default", self.default), *self.tenants.items()):
            for kind in RuleKind:
                value = rule.value(kind)
                if value is not None and not value >= 0:
                    raise ValueError(f"{who}: {RULE_KEYS[kind]} must be >= 0, got {value}")

    def effective(self, tenant: str, kind: RuleKind) -> float:
        """The rule's value for ``tenant`` (0: off)."""
        own = self.tenants.get(tenant)
        value = own.value(kind) if own is not None else None
        if value is None:
            value = self.default.value(kind)
        return value or 0.0

    @property
    def empty(self) -> bool:
        """Whether no rule names anything (a purge would remove nothing)."""
        rules = (self.default, *self.tenants.values())
        return not any(rule.value(kind) for rule in rules for kind in RuleKind)

    def cutoffs(self, now_us: int) -> list[Cutoff]:
        """Every (rule, tenant scope, cutoff) a purge at ``now_us`` applies."""
        out: list[Cutoff] = []
        for kind in RuleKind:
            own = {t: r.value(kind) for t, r in self.tenants.items() if r.value(kind) is not None}
            for tenant, value in sorted(own.items()):
                if value:
                    out.append(Cutoff(kind, TenantScope(only=tenant), _before(now_us, kind, value)))
            default = self.default.value(kind)
            if default:
                scope = TenantScope(excluded=frozenset(own))
                out.append(Cutoff(kind, scope, _before(now_us, kind, default)))
        return out


def _before(now_us: int, kind: RuleKind, value: float) -> int:
    return now_us - int(value * UNIT_US[kind])
