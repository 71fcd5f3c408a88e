"""Helpers for the deployment-artifact tests: paths, rendering, parsing.

Nothing here talks to a cluster or a registry: kustomizations are rendered
with the local ``kubectl kustomize`` and validated against the JSON schemas
bundled in the ``kubernetes-validate`` wheel.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"

CTXWARDEN_UID = 10001
GRPC_PORT = 50051
METRICS_PORT = 9090
SECRET_NAME = "ctxwarden-secrets"

# Every kustomization the repository must keep renderable (a new one found
# under deploy/k8s is tested too).
EXPECTED_KUSTOMIZATIONS = (
    "base",
    "jobs/migrate",
    "overlays/dev-mysql",
    "examples/sidecar",
)

# Kubernetes versions to validate against: the oldest we support (native
# sidecar containers, restartPolicy on init containers, are on by default from
# 1.29) and the newest schema the pinned kubernetes-validate ships.
OLDEST_KUBERNETES = "1.29.0"

# Every flag the manifests use must exist in the command line (none is pending any more).
UPCOMING_SERVE_FLAGS: dict[str, bool] = {}

# Environment variables read inside the ctxwarden container that are not
# server settings: the image's HEALTHCHECK target.
EXTRA_ENV = {"CTXWARDEN_HEALTH_TARGET"}

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod", "ReplicaSet"}
LONG_RUNNING_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Pod"}


# -- kustomize ---------------------------------------------------------------


def kubectl() -> str:
    """The kubectl binary; a missing one is a failure (CI installs it), never a skip."""
    path = shutil.which("kubectl")
    if path is None:
        raise AssertionError(
            "kubectl is not installed: these tests render the kustomizations with "
            "`kubectl kustomize` (install it with `apt-get install -y kubectl`)"
        )
    return path


@functools.cache
def kustomize_version() -> tuple[int, ...]:
    out = subprocess.run(
        [kubectl(), "version", "--client", "-o", "json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    raw = json.loads(out).get("kustomizeVersion", "")
    match = re.match(r"v?(\d+)\.(\d+)", raw)
    assert match, f"kubectl does not report a kustomize version: {out}"
    return tuple(int(x) for x in match.groups())


def kustomization_dirs() -> list[str]:
    """Every directory under deploy/k8s holding a kustomization.yaml, relative."""
    return sorted(str(p.parent.relative_to(K8S)) for p in K8S.rglob("kustomization.yaml"))


@functools.cache
def _render(kdir: str) -> str:
    result = subprocess.run(
        [kubectl(), "kustomize", str(K8S / kdir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"kubectl kustomize {kdir} failed:\n{result.stderr}"
    return result.stdout


def load_yaml_documents(text: str) -> list[Any]:
    import yaml  # imported here: a missing test dependency fails tests, not collection

    return list(yaml.safe_load_all(text))


def render(kdir: str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize deploy/k8s/<kdir>`` produces (fresh copies)."""
    return [doc for doc in load_yaml_documents(_render(kdir)) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name_prefix: str = "") -> dict[str, Any]:
    found = [o for o in by_kind(objects, kind) if o["metadata"]["name"].startswith(name_prefix)]
    assert len(found) == 1, f"expected one {kind} {name_prefix!r}, got {len(found)}"
    return found[0]


# -- pods and containers ---------------------------------------------------------


def pod_template(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod template (metadata + spec) of a workload object."""
    kind = obj["kind"]
    if kind == "Pod":
        return obj
    template: dict[str, Any] = (
        obj["spec"]["jobTemplate"]["spec"]["template"]
        if kind == "CronJob"
        else obj["spec"]["template"]
    )
    return template


def workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in WORKLOAD_KINDS]


def containers(pod_spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, container) for init containers ('init' or 'sidecar') and containers ('main')."""
    for c in pod_spec.get("initContainers", []):
        yield ("sidecar" if c.get("restartPolicy") == "Always" else "init"), c
    for c in pod_spec.get("containers", []):
        yield "main", c


def image_name(image: str) -> str:
    """The repository part of an image reference (no registry port confusion)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref = ref[: len(ref) - len(last) + last.index(":")]
    return ref


def image_tag(image: str) -> str:
    """The tag of an image reference ('' when it has none)."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def is_ctxwarden(container: dict[str, Any]) -> bool:
    return image_name(container["image"]).rsplit("/", 1)[-1] == "ctxwarden"


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# -- the ctxwarden command line -------------------------------------------------


def _subparser(name: str) -> argparse.ArgumentParser:
    from ctxwarden.cli.parser import build_parser

    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]  # type: ignore[no-any-return]
    raise AssertionError("ctxwarden's parser has no subcommands")


def known_flags(command: str) -> set[str]:
    return {
        flag
        for action in _subparser(command)._actions
        for flag in action.option_strings
        if flag.startswith("--")
    }


def setting_keys() -> set[str]:
    """Names a TOML config may use: the `serve` options' dests."""
    return {
        a.dest
        for a in _subparser("serve")._actions
        if a.option_strings and a.dest not in {"help", "config"}
    } | {flag[2:].replace("-", "_") for flag in UPCOMING_SERVE_FLAGS if flag != "--config"}


def known_env_vars() -> set[str]:
    import ctxwarden.cli.parser
    import ctxwarden.config.serve_options

    source = "".join(
        inspect.getsource(m) for m in (ctxwarden.cli.parser, ctxwarden.config.serve_options)
    )
    return set(re.findall(r"CTXWARDEN_[A-Z0-9_]+", source)) | EXTRA_ENV


def check_ctxwarden_args(args: list[str]) -> argparse.Namespace:
    """Check a ctxwarden command line against the real parser.

    Flags from UPCOMING_SERVE_FLAGS that the command line does not have yet, and
    ``--config`` (a path inside the container), are taken out with their value
    before parsing; everything else must parse.
    Returns the parsed namespace.
    """
    assert args, "no ctxwarden arguments"
    command = args[0]
    assert command in {"serve", "migrate"}, f"unknown ctxwarden command {command!r}"
    known = known_flags(command)
    kept: list[str] = [command]
    i = 1
    while i < len(args):
        token = args[i]
        name = token.split("=", 1)[0]
        if name == "--config" and command == "serve":
            # A path inside the container: its content is checked on its own
            # (config.toml keys), never read here.
            i += 1 if "=" in token else 2
            continue
        if name.startswith("--") and name not in known:
            assert command == "serve" and name in UPCOMING_SERVE_FLAGS, (
                f"`ctxwarden {command}` has no flag {name} (args: {args})"
            )
            takes_value = UPCOMING_SERVE_FLAGS[name]
            i += 2 if takes_value and "=" not in token else 1
            continue
        kept.append(token)
        i += 1
    from ctxwarden.cli.parser import build_parser

    try:
        return build_parser().parse_args(kept)
    except SystemExit as exc:  # argparse reports and exits on a bad value
        raise AssertionError(f"ctxwarden rejects the arguments {args}") from exc


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of ``--flag=V`` or ``--flag V`` in an argument list."""
    for i, token in enumerate(args):
        if token.startswith(flag + "="):
            return token.split("=", 1)[1]
        if token == flag and i + 1 < len(args):
            return args[i + 1]
    return None


# -- Dockerfile -----------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line = pending + stripped
        pending = ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a line continuation"
    return out


def dockerfile_stages(text: str) -> list[dict[str, Any]]:
    """Stages with their resolved base image, name and instructions."""
    args: dict[str, str] = {}
    stages: list[dict[str, Any]] = []
    for keyword, rest in dockerfile_instructions(text):
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"')
            continue
        if keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else ""
            stages.append({"image": image, "name": name, "instructions": []})
            continue
        assert stages, f"{keyword} before the first FROM"
        stages[-1]["instructions"].append((keyword, rest))
    return stages


def healthcheck_code(text: str) -> str:
    """The python one-liner of the final stage's HEALTHCHECK (exec form)."""
    stage = dockerfile_stages(text)[-1]
    checks = [rest for kw, rest in stage["instructions"] if kw == "HEALTHCHECK"]
    assert len(checks) == 1, "the runtime stage needs exactly one HEALTHCHECK"
    _, _, exec_form = checks[0].partition("CMD ")
    command = json.loads(exec_form)
    assert command[:2] == ["python", "-c"], f"HEALTHCHECK is not a python one-liner: {command}"
    return str(command[2])


def dockerignore_patterns(path: Path) -> list[str]:
    return [
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


# -- compose ----------------------------------------------------------------------


def interpolate_defaults(value: str) -> str:
    """Resolve compose ``${VAR:-default}`` / ``${VAR}`` the way an empty environment would."""

    def repl(m: re.Match[str]) -> str:
        default = m.group(2)
        assert default is not None, f"{m.group(0)} has no default"
        return default

    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", repl, value)
