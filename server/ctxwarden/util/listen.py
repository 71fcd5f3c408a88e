"""The listening address: parse and check it, bind it exclusively.

``HOST:PORT`` (port 1-65535, or 0 for a free one; ``[::1]:PORT`` for IPv6) or
``unix:PATH``. A taken address is refused, never shared: gRPC's
``grpc.so_reuseport`` is 0 unless ``--reuse-port`` asks for it. A Unix socket
is local like loopback; it is created with ``--unix-socket-mode``. A socket
file left by a server that is gone is replaced; one a live server answers on
is refused.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc  # annotations only: the --workers supervisor binds no gRPC server


class ListenError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Address:
    text: str
    host: str = ""
    port: int = 0
    unix_path: str = ""

    @property
    def is_unix(self) -> bool:
        return bool(self.unix_path)

    @property
    def is_local(self) -> bool:
        """Loopback or a Unix socket: reachable from this machine only."""
        if self.is_unix or self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def bound(self, port: int) -> str:
        """The address a client connects to, with the port actually bound."""
        if self.is_unix:
            return f"unix:{self.unix_path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{port}"


def parse(text: str) -> Address:
    """``text`` as an Address (raises ListenError with what to write instead)."""
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if path.startswith("//"):  # unix:///abs/path
            path = path[2:]
        if not path:
            raise ListenError(f"--listen {text!r}: give a socket path, e.g. unix:/tmp/ctxw.sock")
        return Address(text, unix_path=path)
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ListenError(f"--listen {text!r} is not HOST:PORT or unix:PATH (e.g. 127.0.0.1:50051)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ListenError(f"--listen {text!r}: write an IPv6 address in brackets, e.g. [::1]:50051")
    try:
        port = int(port_text)
    except ValueError:
        raise ListenError(f"--listen {text!r}: the port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ListenError(f"--listen {text!r}: the port must be 1-65535 (or 0 to pick a free port)")
    return Address(text, host=host, port=port)


def grpc_options(address: Address, reuse_port: bool) -> list[tuple[str, int]]:
    return [("grpc.so_reuseport", 1 if reuse_port and not address.is_unix else 0)]


def prepare_unix(address: Address) -> None:
    """Remove a stale socket file; refuse one a live server answers on, or a non-socket."""
    path = Path(address.unix_path)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ListenError(f"cannot listen on {address.text}: {path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(2)
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        path.unlink(missing_ok=True)  # left by a server that is gone
        return
    except OSError as exc:
        raise ListenError(f"cannot listen on {address.text}: {exc}") from None
    finally:
        probe.close()
    raise ListenError(
        f"cannot listen on {address.text}: another server is listening on it; stop it or "
        "choose another path"
    )


@contextlib.contextmanager
def _umask(mode: int) -> Iterator[None]:
    old = os.umask(0o777 & ~mode)
    try:
        yield
    finally:
        os.umask(old)


def bind(
    server: grpc.aio.Server,
    address: Address,
    credentials: grpc.ServerCredentials | None,
    unix_mode: int,
) -> int:
    """Bind ``address``; returns the port (0 for a Unix socket). Raises ListenError."""
    if address.is_unix:
        prepare_unix(address)
        target = f"unix:{address.unix_path}"
    else:
        target = address.bound(address.port)
    try:
        with _umask(unix_mode) if address.is_unix else contextlib.nullcontext():
            if credentials is not None:
                port = server.add_secure_port(target, credentials)
            else:
                port = server.add_insecure_port(target)
    except RuntimeError:
        port = 0
    if port == 0:
        raise ListenError(
            f"cannot listen on {address.text}: the address is in use (another server?) or "
            "not an address of this machine"
        )
    if address.is_unix:
        try:
            os.chmod(address.unix_path, unix_mode)
        except OSError as exc:
            raise ListenError(f"cannot listen on {address.text}: {exc}") from None
        return 0
    return port
