"""A raw HTTP/2 client that opens gRPC streams announcing a large message, sends
part of it and stalls: the memory attack the transport limits defend against."""

from __future__ import annotations

import select
import socket
import struct
import threading
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions


@dataclass
class Flood:
    """``connections`` connections with ``streams`` streams each; every stream
    announces ``announce`` bytes and sends at most ``send`` of them."""

    host: str
    port: int
    path: str = "/ctxwarden.v1.ContextService/AppendMessages"
    connections: int = 10
    streams: int = 100
    announce: int = 60 * 1024 * 1024
    send: int = 900 * 1024
    metadata: tuple[tuple[str, str], ...] = ()
    sent: int = 0
    opened: int = 0
    reset: int = 0
    """Streams the server ended (RST_STREAM or trailers)."""
    closed_connections: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for _ in range(self.connections):
            t = threading.Thread(target=self._run, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def _run(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=5)
        except OSError:
            self._count("closed_connections")
            return
        sock.settimeout(30)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", self.path),
            (":authority", f"{self.host}:{self.port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *self.metadata,
        ]
        prefix = struct.pack(">BI", 0, self.announce)
        remaining: dict[int, int] = {}
        pending: dict[int, bytes] = {}
        alive = True
        try:
            for _ in range(self.streams):
                try:
                    sid = conn.get_next_available_stream_id()
                    conn.send_headers(sid, headers)
                except h2.exceptions.H2Error:
                    break
                remaining[sid] = self.send
                pending[sid] = prefix
                self._count("opened")
            sock.sendall(conn.data_to_send())
            while alive and not self._stop.is_set():
                for sid in list(remaining):
                    self._push(conn, sid, remaining, pending)
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
                readable, _, _ = select.select([sock], [], [], 0.05)
                if not readable:
                    continue
                data = sock.recv(65536)
                if not data:
                    break
                try:
                    events = conn.receive_data(data)
                except h2.exceptions.H2Error:
                    break
                for event in events:
                    if isinstance(event, h2.events.StreamReset | h2.events.StreamEnded):
                        if event.stream_id in remaining or event.stream_id in pending:
                            remaining.pop(event.stream_id, None)
                            pending.pop(event.stream_id, None)
                            self._count("reset")
                    elif isinstance(event, h2.events.ConnectionTerminated):
                        alive = False
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
        except OSError:
            pass
        finally:
            self._count("closed_connections")
            sock.close()

    def _push(
        self,
        conn: h2.connection.H2Connection,
        sid: int,
        remaining: dict[int, int],
        pending: dict[int, bytes],
    ) -> None:
        left = remaining[sid]
        if left <= 0:
            return
        try:
            window = conn.local_flow_control_window(sid)
        except h2.exceptions.H2Error:
            remaining[sid] = 0
            return
        size = min(window, left, conn.max_outbound_frame_size)
        if size <= 0:
            return
        head = pending.pop(sid, b"")
        chunk = (head + b"\x00" * size)[:size]
        if len(head) > size:
            pending[sid] = head[size:]
        try:
            conn.send_data(sid, chunk)
        except h2.exceptions.H2Error:
            remaining[sid] = 0
            return
        remaining[sid] = left - size
        self._count("sent", size)


def rss_kib(pid: int) -> int:
    """The process's resident set size (VmRSS) in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")
