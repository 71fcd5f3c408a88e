"""The console under TLS: HTTPS with the server's certificate, a Secure login cookie."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import ssl
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.console.conftest import KEY_A, ConsoleProcess


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_https_and_secure_cookie(backend_url: str, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    keys = tmp_path / "api-keys"
    keys.write_text(f"console-a:{hashlib.sha256(KEY_A.encode()).hexdigest()}\n")
    server = ConsoleProcess(
        backend_url,
        tmp_path,
        ["--api-keys-file", str(keys), "--tls-cert", str(cert), "--tls-key", str(key)],
    )
    server.tls_ca = cert.read_bytes()
    server.start()
    try:
        assert server.url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(cert))
        context.check_hostname = False  # the certificate names localhost, we dial the IP
        base = server.url.replace("127.0.0.1", "localhost")
        with httpx.Client(base_url=base, verify=context) as http:
            form = http.get("/login")
            assert "secure" in form.headers["set-cookie"].lower()
            assert form.headers["strict-transport-security"].startswith("max-age=")
            csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert csrf
            done = http.post(
                "/login", data={"csrf": csrf.group(1), "api_key": KEY_A, "next": "/sessions"}
            )
            assert done.status_code == 303
            cookie = done.headers["set-cookie"].lower()
            assert "secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
            assert http.get("/sessions").status_code == 200
    finally:
        server.stop()
