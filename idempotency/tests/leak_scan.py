"""Where a value could have been kept, read whole: every Redis key and value, every row of a
table, so a test can show a secret is in none of them (the engine's suite and the product's)."""

from __future__ import annotations

import redis
from django.db import connection

from idempotency.stores.redis_store import PACKED_MARKER, unpack_reply


def redis_dump(client: redis.Redis) -> bytes:
    """Every key of ``client``'s database and every value, whatever its type."""
    readers = {
        b"string": lambda k: [client.get(k)],
        b"hash": lambda k: [b for pair in client.hgetall(k).items() for b in pair],
        b"set": lambda k: list(client.smembers(k)),
        b"zset": lambda k: list(client.zrange(k, 0, -1)),
        b"list": lambda k: client.lrange(k, 0, -1),
    }
    out: list[bytes] = []
    for key in client.scan_iter(count=1000):
        out.append(key)
        out.extend(_plain(v) for v in readers.get(client.type(key), lambda k: [])(key) if v)
    return b"\n".join(out)


def _plain(value: bytes) -> bytes:
    """A value as the engine wrote it before compressing: stored replies are kept zlib-packed
    (``pack_reply``), where a clear copy would not show as bytes."""
    if value.startswith(PACKED_MARKER):
        return unpack_reply(value).to_bytes()
    return value


def table_dump(table: str) -> str:
    """Every row of ``table`` as PostgreSQL prints it (bytea as hex), whatever its columns."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT t::text FROM {connection.ops.quote_name(table)} t")
        return "\n".join(row[0] for row in cursor.fetchall())


def assert_no_clear_copy(secret: str, **places: bytes | str) -> None:
    """``secret`` appears in none of ``places``, as text or as the hex of a bytea column."""
    needles = (secret.encode(), secret.encode().hex().encode())
    for name, place in places.items():
        text = place if isinstance(place, bytes) else place.encode()
        assert not any(n in text for n in needles), f"{secret!r} is kept in {name}"
