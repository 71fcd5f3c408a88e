"""Retention rules: every tenant gets exactly the cutoff its own value, or else the
default's, gives; a rule at 0 gives none."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.core.retention import (
    UNIT_US,
    Cutoff,
    RetentionRule,
    RetentionRules,
    RuleKind,
)

NOW = 1_800_000_000_000_000
values = st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0, 7.0, 30.0]))
rules_st = st.builds(RetentionRule, values, values, values)
tenants = st.sampled_from(["", "acme", "beta", "gamma"])


def _applies(cut: Cutoff, tenant: str) -> bool:
    if cut.scope.only is not None:
        return cut.scope.only == tenant
    return tenant not in cut.scope.excluded


@given(rules_st, st.dictionaries(tenants, rules_st, max_size=3))
def test_each_tenant_gets_exactly_its_effective_cutoff(
    default: RetentionRule, own: dict[str, RetentionRule]
) -> None:
    rules = RetentionRules(default, own)
    cutoffs = rules.cutoffs(NOW)
    for tenant in ["", "acme", "beta", "gamma", "other"]:
        for kind in RuleKind:
            applying = [c for c in cutoffs if c.kind is kind and _applies(c, tenant)]
            value = rules.effective(tenant, kind)
            if value == 0:
                assert applying == []
            else:
                assert [c.before_us for c in applying] == [NOW - int(value * UNIT_US[kind])]
    assert rules.empty == (
        cutoffs == []
        and all(rules.effective(t, k) == 0 for t in ["", "acme", "beta", "gamma"] for k in RuleKind)
    )


def test_a_tenant_value_of_zero_turns_the_default_off_for_it() -> None:
    rules = RetentionRules(
        RetentionRule(purge_deleted_after_days=30),
        {"beta": RetentionRule(purge_deleted_after_days=0)},
    )
    assert rules.effective("beta", RuleKind.DELETED) == 0
    assert rules.effective("acme", RuleKind.DELETED) == 30
    (only,) = rules.cutoffs(NOW)
    assert only.scope.excluded == frozenset({"beta"})


def test_negative_values_are_refused() -> None:
    with pytest.raises(ValueError, match="purge_archived_after_days must be >= 0"):
        RetentionRules(RetentionRule(purge_archived_after_days=-1))
