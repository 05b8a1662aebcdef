"""Loopback ports for the servers the tests start (Redis nodes, PostgreSQL, gunicorn, proxies).

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, the one it also
gives every outgoing connection its local port from. A server a test stops and starts again on
the same port (a Redis node restarted mid-test, a private PostgreSQL) could then find it taken
by some client's connection made in between (a listener reconnecting to the stopped node, say)
and exit at once; the test waited out its deadline (seen under CPU load, with a second test
run on the machine). Ports are therefore picked below the ephemeral range, where no outgoing
connection gets one, and checked free by binding them.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

HOST = "127.0.0.1"
LOWEST = 10_000  # above the well-known and most registered services' ports


def free_port() -> int:
    """A port on loopback that nothing listens on now, outside the ephemeral range."""
    below = _ephemeral_start()
    for _ in range(200):
        port = random.randrange(LOWEST, below)
        with socket.socket() as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {LOWEST} and {below}")


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 by default on Linux)."""
    try:
        first = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]
        return int(first)
    except (OSError, ValueError, IndexError):
        return 32_768
