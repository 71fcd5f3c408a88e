"""Options of session lifecycle and retention, shared by ``serve`` and ``purge``,
and the :class:`RetentionRules` they describe.

Server-wide rules are flags (env ``CTXWARDEN_PURGE_*``, config-file keys of the
same names); per-tenant rules live in a TOML file (``--tenant-retention``)::

    [tenants.acme]
    purge_archived_after_days = 7
    purge_idempotency_after_hours = 24

    [tenants.beta]
    purge_deleted_after_days = 0      # never, whatever the default says

A tenant's value wins over the server-wide one; a key the tenant leaves out
inherits it. 0 turns a rule off; nothing is purged that no rule names.
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

from ctxwarden.config.env import from_env
from ctxwarden.core.retention import RULE_KEYS, RetentionRule, RetentionRules

RULE_HELP = {
    "purge_archived_after_days": "purge archived sessions this many days after ArchiveSession",
    "purge_deleted_after_days": "purge deleted sessions this many days after DeleteSession",
    "purge_idempotency_after_hours": "purge idempotency records (request_id) this many hours "
    "after the request",
}


def add_retention(p: argparse.ArgumentParser | Any) -> None:
    """The rules: three server-wide values and the per-tenant file."""
    for key in RULE_KEYS.values():
        flag = "--" + key.replace("_", "-")
        env = "CTXWARDEN_" + key.upper()
        p.add_argument(
            flag,
            **from_env(env, 0.0),
            help=f"{RULE_HELP[key]}; 0: never (env {env}; default %(default)s)",
        )
    p.add_argument(
        "--tenant-retention",
        **from_env("CTXWARDEN_TENANT_RETENTION", ""),
        help="TOML file of per-tenant retention rules ([tenants.NAME] tables with the keys "
        "purge_archived_after_days, purge_deleted_after_days, purge_idempotency_after_hours) "
        "(env CTXWARDEN_TENANT_RETENTION)",
    )


def add_lifecycle(serve: argparse.ArgumentParser) -> None:
    """``serve`` only: the purge schedule and idle eviction."""
    group = serve.add_argument_group("session lifecycle and retention")
    add_retention(group)
    group.add_argument(
        "--purge-interval",
        **from_env("CTXWARDEN_PURGE_INTERVAL", 0.0),
        help="seconds between runs of the retention rules inside the server (the first one "
        "interval after start); 0: never, run `ctxwarden purge` instead "
        "(env CTXWARDEN_PURGE_INTERVAL; default %(default)s)",
    )
    group.add_argument(
        "--idle-evict-seconds",
        **from_env("CTXWARDEN_IDLE_EVICT_SECONDS", 0.0),
        help="drop a hot session from memory when no call touched it for this long "
        "(it is restored on its next call); 0: only LRU pressure evicts "
        "(env CTXWARDEN_IDLE_EVICT_SECONDS; default %(default)s)",
    )


def retention_rules(args: argparse.Namespace) -> RetentionRules:
    """The rules of parsed arguments (ValueError: a bad value or file)."""
    default = RetentionRule(**{key: getattr(args, key) for key in RULE_KEYS.values()})
    tenants = load_tenant_rules(args.tenant_retention) if args.tenant_retention else {}
    return RetentionRules(default, tenants)


def load_tenant_rules(path: str) -> dict[str, RetentionRule]:
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read tenant retention file {path}: {exc}") from None
    unknown = sorted(set(raw) - {"tenants"})
    if unknown:
        raise ValueError(f"{path}: unknown tables {', '.join(unknown)} (expected [tenants.NAME])")
    out: dict[str, RetentionRule] = {}
    for tenant, table in raw.get("tenants", {}).items():
        if not isinstance(table, dict):
            raise ValueError(f"{path}: tenants.{tenant} must be a table")
        bad = sorted(set(table) - set(RULE_KEYS.values()))
        if bad:
            raise ValueError(f"{path}: tenants.{tenant}: unknown keys {', '.join(bad)}")
        values: dict[str, float] = {}
        for key, value in table.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{path}: tenants.{tenant}.{key} must be a number >= 0")
            values[key] = float(value)
        out[tenant] = RetentionRule(**values)
    return out
