"""A TCP proxy in front of Redis that loses one reply: the network failing after Redis ran a call.

Every command passes through. Once armed with a byte marker, the first command whose bytes
contain it is forwarded and Redis runs it, but the proxy withholds Redis's reply and closes
the client's connection instead. The client sees ``Connection closed by server`` for a call
that did happen, which is when a client library re-sends it on a new connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class LossyProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._markers: tuple[bytes, ...] = ()
        self.lost: list[bytes] = []  # the commands whose replies were lost
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def lose_reply_to(self, *markers: bytes) -> None:
        """Lose the reply to the next command that contains every one of ``markers``."""
        with self._lock:
            self._markers = markers

    def close(self) -> None:
        self._listener.close()

    def _take_marker(self, chunk: bytes) -> bool:
        with self._lock:
            if not self._markers or not all(m in chunk for m in self._markers):
                return False
            self._markers = ()
            self.lost.append(chunk)
            return True

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self._upstream, timeout=10)
        upstream.settimeout(None)
        doomed = threading.Event()  # this connection sent the marked command
        threading.Thread(target=self._replies, args=(upstream, client, doomed), daemon=True).start()
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                if self._take_marker(chunk):
                    doomed.set()
                upstream.sendall(chunk)
        _close(client, upstream)

    def _replies(
        self, upstream: socket.socket, client: socket.socket, doomed: threading.Event
    ) -> None:
        """Redis's replies back to the client; on a doomed connection (the client waits for
        the marked command's reply, nothing else) the reply is dropped with the connection."""
        with contextlib.suppress(OSError):
            while chunk := upstream.recv(65536):
                if doomed.is_set():
                    break
                client.sendall(chunk)
        _close(client, upstream)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
