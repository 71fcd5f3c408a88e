"""The Go client works as a module from outside the repository, as client/go/README.md says.

The README's quick start program (the ```go block after ``<!-- program:
example/quickstart/main.go -->``) goes into a fresh module in a temporary directory
outside the checkout: ``go mod init``, ``go mod edit -replace`` to this checkout's
client/go, ``go mod tidy`` (grpc-go and protobuf from the Go module proxy), then
``go run .`` against a real server that requires an API key: over plaintext with
the key (``WithInsecureAPIKey``), without it (refused), and over TLS (``WithAPIKey``).
The Go build and module caches are the user's, so a second run builds little.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.server import ServerProcess, migrate_database

GO = shutil.which("go")
pytestmark = [
    # Like the other install tests: it fetches modules (here from the Go module proxy).
    pytest.mark.install,
    pytest.mark.skipif(
        GO is None, reason="go is not on PATH: the Go module example needs a Go toolchain"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
GO_CLIENT = ROOT / "client" / "go"
MODULE = "github.com/ctxwarden/ctxwarden/client/go"
MARKER = "<!-- program: example/quickstart/main.go -->"
API_KEY = "ck_go_module_example_0123456789"
EXPECTED = [
    r"model input: 1 messages, \d+ tokens",
    r'tool call: read \{"path":"setup.py"\}',
    r"rollback: RECOVERY_ACTION_RETRY",
    r"model input: 4 messages, last seq 5",
    r"  ROLE_USER",
    r"  ROLE_ASSISTANT",
    r"  ROLE_TOOL_RESULT",
    r"  ROLE_ASSISTANT",
]


def readme_program() -> str:
    text = (GO_CLIENT / "README.md").read_text()
    match = re.search(re.escape(MARKER) + r"\n```go\n(.*?)```", text, flags=re.S)
    assert match, f"client/go/README.md has no ```go block after {MARKER}"
    return match.group(1)


def _go(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    assert GO is not None
    proc = subprocess.run(
        [GO, *args],
        cwd=cwd,
        env={**os.environ, "GO111MODULE": "on", "GOWORK": "off", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"go {' '.join(args)}: exit {proc.returncode}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def go_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's module, outside the checkout, with the README's program as main.go."""
    directory = tmp_path_factory.mktemp("go-try")
    assert ROOT not in directory.resolve().parents, "the module must live outside the checkout"
    (directory / "main.go").write_text(readme_program())
    _go(["mod", "init", "example.com/try"], directory)
    _go(["mod", "edit", f"-replace={MODULE}={GO_CLIENT}"], directory)
    _go(["mod", "tidy"], directory)
    go_mod = (directory / "go.mod").read_text()
    # What the README says tidy adds: the requirement the replace stands for.
    pseudo = "v0.0.0-00010101000000-000000000000"
    assert re.search(rf"^\s*(require )?{re.escape(MODULE)} {pseudo}$", go_mod, re.M), go_mod
    assert (directory / "go.sum").read_text().count("google.golang.org/grpc ") >= 1
    return directory


def _api_keys_file(directory: Path) -> Path:
    path = directory / "api-keys"
    path.write_text(f"demo:{hashlib.sha256(API_KEY.encode()).hexdigest()}\n")
    return path


def _run(module: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert GO is not None
    base = {k: v for k, v in os.environ.items() if not k.startswith("CTXWARDEN_")}
    return subprocess.run(
        [GO, "run", "."],
        cwd=module,
        env={**base, "GO111MODULE": "on", "GOWORK": "off", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _assert_walkthrough(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(EXPECTED), proc.stdout
    for line, pattern in zip(lines, EXPECTED, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)


def test_readme_program_with_an_api_key(go_module: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ctxwarden.db'}"
    migrate_database(url)
    args = ["--api-keys-file", str(_api_keys_file(tmp_path))]
    server = ServerProcess(url, log_dir=tmp_path, extra_args=args)
    server.start()
    try:
        _assert_walkthrough(
            _run(go_module, {"CTXWARDEN_TARGET": server.target, "CTXWARDEN_API_KEY": API_KEY})
        )
        refused = _run(go_module, {"CTXWARDEN_TARGET": server.target})
        assert refused.returncode != 0, refused.stdout
        assert "code = Unauthenticated" in refused.stderr, refused.stderr
        assert "MISSING_CREDENTIALS" in refused.stderr, refused.stderr
    finally:
        server.stop()


def _tls_files(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ctxwarden test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_readme_program_over_tls(go_module: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ctxwarden.db'}"
    migrate_database(url)
    cert_file, key_file = _tls_files(tmp_path)
    args = ["--api-keys-file", str(_api_keys_file(tmp_path))]
    args += ["--tls-cert", str(cert_file), "--tls-key", str(key_file)]
    server = ServerProcess(url, log_dir=tmp_path, extra_args=args, tls_ca=cert_file.read_bytes())
    server.start()
    try:
        _assert_walkthrough(
            _run(
                go_module,
                {
                    "CTXWARDEN_TARGET": server.target,
                    "CTXWARDEN_API_KEY": API_KEY,
                    "CTXWARDEN_TLS_CA": str(cert_file),
                },
            )
        )
    finally:
        server.stop()
