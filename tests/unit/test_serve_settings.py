"""Every ``serve`` option reaches :class:`Settings` (config/build.py copies options by
name, so a renamed field or a new option cannot fall through unnoticed)."""

from __future__ import annotations

import argparse
from dataclasses import fields

from ctxwarden.cli.parser import build_parser, subparser
from ctxwarden.config import Settings
from ctxwarden.config.build import DERIVED, RENAMED, settings

NOT_SETTINGS = {"help", "config", "workers"}
"""Options the command line acts on itself (``--workers``: cli runs the supervisor)."""


def _serve() -> argparse.ArgumentParser:
    return subparser(build_parser(), "serve")


def test_every_serve_option_is_read_into_settings() -> None:
    dests = {a.dest for a in _serve()._actions} - NOT_SETTINGS
    names = {f.name for f in fields(Settings)}
    used = (names - set(RENAMED)) | set(RENAMED.values())
    used |= {dest for sources in DERIVED.values() for dest in sources}
    assert dests - used == set()
    assert set(RENAMED) <= names and set(DERIVED) <= names
    assert set(RENAMED.values()) <= dests


def test_renamed_and_derived_options_arrive() -> None:
    parser = build_parser()
    args = parser.parse_args(
        [
            "serve",
            "--compaction-plan-ttl=12",
            "--health-interval=3",
            "--db-timeout=4",
            "--model-table=m.toml",
            "--no-reflection",
            "--unix-socket-mode=0600",
            "--append-writers=0",
            "--summarizer=extractive",
            "--file-read-tools=cat, view",
            "--hf-tokenizer-dir=/a",
            "--purge-deleted-after-days=2",
            "--max-hot-sessions=7",
        ]
    )
    s = settings(args)
    assert (s.plan_ttl_seconds, s.health_interval_seconds, s.db_timeout_seconds) == (12, 3, 4)
    assert s.model_table_file == "m.toml" and s.reflection is False
    assert s.unix_socket_mode == 0o600 and s.append_writers == 0
    assert s.summarizer_kind == "extractive" and s.background_compactions == 2
    assert s.file_tools.read == ("cat", "view") and s.hf_tokenizer_dirs == ("/a",)
    assert s.retention.default.purge_deleted_after_days == 2 and s.max_hot_sessions == 7
    defaults = settings(parser.parse_args(["serve"]))
    assert defaults.append_writers is None and defaults.background_compactions == 0
