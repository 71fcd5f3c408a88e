"""The generated reference (docs/reference/, scripts/gen_docs.py) is current and complete."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import cast

from ctxwarden.cli.parser import build_parser
from ctxwarden.v1 import context_service_pb2
from tests.docs.pages import ROOT, page_text


def test_generated_reference_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_api_reference_has_every_rpc_and_message() -> None:
    api = page_text("reference/api.md")
    service = context_service_pb2.DESCRIPTOR.services_by_name["ContextService"]
    for method in service.methods:
        assert f"### {method.name} {{ #rpc-{method.name.lower()} }}" in api, method.name
    for name in context_service_pb2.DESCRIPTOR.message_types_by_name:
        assert f"{{ #ctxwarden.v1.{name} }}" in api, name


def _commands() -> dict[str, argparse.ArgumentParser]:
    (commands,) = [a for a in build_parser()._actions if a.dest == "command"]
    return cast(dict[str, argparse.ArgumentParser], commands.choices)


def test_cli_reference_has_every_command() -> None:
    cli = page_text("reference/cli.md")
    assert len(_commands()) > 5
    for name in _commands():
        assert f"## `ctxwarden {name}`" in cli, name


def test_configuration_reference_has_every_serve_option() -> None:
    config = page_text("reference/configuration.md")
    serve = _commands()["serve"]
    flags = [o for a in serve._actions for o in a.option_strings if o.startswith("--")]
    assert len(flags) > 40
    for flag in flags:
        if flag != "--help":
            assert f"`{flag}`" in config, flag
