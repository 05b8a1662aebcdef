"""A TCP proxy on loopback that can delay traffic to a server: a slow Redis node on demand.

Each chunk a client sends is held for ``delay`` seconds before it is forwarded, so every
command round trip gets ``delay`` slower. ``chunks`` counts forwarded client chunks, which
tells a test whether clients are still talking to the server at all. :meth:`SlowProxy.cut`
makes the server look dead to its clients (every connection dropped) until :meth:`heal`.
With ``trickle`` set, the server's replies reach the client one byte at a time, ``trickle``
seconds apart: each read a client makes gets a byte well within its socket timeout, while a
whole reply takes many times that timeout.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from tests.support.ports import free_port


class SlowProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.delay = 0.0
        self.trickle = 0.0
        self.chunks = 0
        self.refusing = False
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        self._stopped.set()
        self._listener.close()

    def cut(self) -> None:
        """Drop every open connection, and each new one as soon as it is accepted."""
        self.refusing = True
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def heal(self) -> None:
        self.refusing = False

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)  # the timeout bounds the connect only: idle is healthy
            with self._lock:
                self._open.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, from_client: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if from_client:
                    if self.delay:
                        time.sleep(self.delay)
                    with self._lock:
                        self.chunks += 1
                elif self.trickle:
                    for byte in chunk[:-1]:
                        target.sendall(bytes([byte]))
                        time.sleep(self.trickle)
                    chunk = chunk[-1:]
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            # shut down, not only closed: the other direction's thread is blocked reading one
            # of them, which keeps a closed socket open (and its server's session alive)
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
            with self._lock:
                self._open.difference_update((source, target))
