"""Does a Bloom filter earn its place in front of the one-round-trip Lua claim? (ADR 0002)

Seed chapter 5 puts a "Redis Bloom filter + idempotency-key cache" at the gateway. Our cache
layer already answers every request with one ``EVALSHA`` of ``claim.lua`` (DESIGN §3), so this
benchmark measures, in one run against the real Redis, four ways of answering a request:

``claim only``
    ``RedisIdempotencyStore.claim``: one round trip, for new and duplicate keys alike.
``local bloom + claim``
    An in-process Bloom filter per worker is checked (and updated) first, then the claim runs
    anyway: a "definitely new" key still needs the claim to take the lease, and a "maybe
    present" key needs it to fetch the stored response (or learn IN_PROGRESS / REUSED).
``redis bloom + claim``
    The same with one shared filter in Redis (no RedisBloom module on Redis 7.0 here: a Lua
    script does ``SETBIT`` on a plain string bitmap; ``SETBIT`` returns the old bit, so the
    check and the add are one atomic script), then the claim: two round trips.
``local bloom, skip claim (UNSAFE)``
    The only way a filter could save a round trip: trust "definitely new" and skip the claim.
    It takes no lease, and with several workers each filter has only seen its own traffic, so
    a duplicate that reaches another worker is "definitely new" there and runs again. Measured
    as the upper bound of what a filter could buy, with the duplicates it lets through.

Requests are spread over ``workers`` simulated workers (each with its own in-process filter);
duplicates replay finished entries seeded before the run. Variants run interleaved block by
block over the same request sequence, so drift in a shared machine's load hits all of them.

Run: ``.venv/bin/python -m bench.bloom_vs_claim`` (Redis at 127.0.0.1:6379, DB 7). Every key
lives under ``bench:bloom:<run id>:``, carries a TTL, and is deleted at the end.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import math
import os
import platform
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from idempotency.core.outcomes import Outcome, StoredResponse
from idempotency.stores.redis_store import RedisIdempotencyStore, new_owner_token

__all__ = ["VARIANTS", "BloomFilter", "VariantResult", "format_table", "run"]

DEFAULT_URL = "redis://127.0.0.1:6379/7"
PREFIX = "bench:bloom:"
LEASE_MS = 60_000
RESULT_TTL_MS = 10 * 60_000  # short: bench keys vanish by themselves if cleanup never runs
FINGERPRINT = hashlib.sha256(b"bench-payload").hexdigest()
FIELD_HASHES = {"items": "1f" * 8, "payment_method": "2e" * 8, "user": "3d" * 8}
RESPONSE = StoredResponse(
    status=201,
    headers=(("Content-Type", "application/json"), ("Location", "/api/v1/orders/o-1/")),
    body=b'{"id":"o-1","status":"CREATED","total":"42.00","items":[{"dish_id":1,"qty":2}]}' * 3,
)

CLAIM = "claim only"
LOCAL = "local bloom + claim"
REDIS = "redis bloom + claim"
UNSAFE = "local bloom, skip claim (UNSAFE)"
VARIANTS = (CLAIM, LOCAL, REDIS, UNSAFE)

# KEYS[1] the bitmap; ARGV the k bit offsets. Sets every bit; 1 if all were set ("maybe
# present"), 0 if one was not ("definitely new"). Atomic, so two concurrent requests for one
# key cannot both be told "definitely new".
BLOOM_LUA = """
local seen = 1
for i = 1, #ARGV do
  if redis.call('SETBIT', KEYS[1], ARGV[i], 1) == 0 then seen = 0 end
end
return seen
"""


class BloomFilter:
    """A plain Bloom filter: ``m`` bits in a ``bytearray``, ``k`` positions per item.

    Positions come from one BLAKE2b digest by double hashing (Kirsch-Mitzenmacher:
    ``h1 + i*h2 mod m``). Bit ``p`` is bit ``7 - p % 8`` of byte ``p // 8``, the layout of
    Redis ``SETBIT``, so the in-process and the Redis-side filter agree bit for bit.
    """

    def __init__(self, capacity: int, error_rate: float = 0.01) -> None:
        if capacity <= 0 or not 0 < error_rate < 1:
            raise ValueError("capacity must be positive and error_rate in (0, 1)")
        self.m = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
        self.k = max(1, round(self.m / capacity * math.log(2)))
        self.bits = bytearray((self.m + 7) // 8)

    def positions(self, item: str) -> list[int]:
        digest = hashlib.blake2b(item.encode(), digest_size=16).digest()
        h1 = int.from_bytes(digest[:8], "little")
        h2 = int.from_bytes(digest[8:], "little") | 1
        return [(h1 + i * h2) % self.m for i in range(self.k)]

    def __contains__(self, item: str) -> bool:
        bits = self.bits
        return all(bits[p >> 3] & (0x80 >> (p & 7)) for p in self.positions(item))

    def add(self, item: str) -> bool:
        """Add ``item``; ``True`` if it was maybe present already, ``False`` if surely new."""
        seen = True
        bits = self.bits
        for p in self.positions(item):
            mask = 0x80 >> (p & 7)
            if not bits[p >> 3] & mask:
                seen = False
                bits[p >> 3] |= mask
        return seen


class CountingRedis(redis.Redis):
    """A client that counts commands sent outside pipelines: one each is one round trip."""

    round_trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.round_trips += 1
        return super().execute_command(*args, **options)


@dataclass
class VariantResult:
    """One variant under one new-key ratio; latencies in nanoseconds."""

    variant: str
    new_ratio: float
    requests: int = 0
    new_requests: int = 0
    dup_requests: int = 0
    round_trips: int = 0
    wall_ns: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    bloom_new: int = 0  # "definitely new" verdicts
    false_new: int = 0  # ... for a key that was already in Redis (another worker saw it)
    false_maybe: int = 0  # "maybe present" for a key that was new (false positive)
    dups_executed: int = 0  # duplicates that would have run the operation again
    lat_new: list[int] = field(default_factory=list)
    lat_dup: list[int] = field(default_factory=list)

    @property
    def rt_per_request(self) -> float:
        return self.round_trips / self.requests if self.requests else 0.0

    @property
    def throughput(self) -> float:
        return self.requests / (self.wall_ns / 1e9) if self.wall_ns else 0.0

    def percentile(self, q: float, kind: str = "all") -> float:
        """The ``q`` quantile (nearest rank) in microseconds of ``new``, ``dup`` or ``all``."""
        values = {"new": self.lat_new, "dup": self.lat_dup}.get(kind, self.lat_new + self.lat_dup)
        if not values:
            return 0.0
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] / 1000

    def summary(self) -> dict[str, Any]:
        """Counts only (no timings): what the smoke test checks."""
        return {
            "variant": self.variant,
            "new_ratio": self.new_ratio,
            "requests": self.requests,
            "new_requests": self.new_requests,
            "dup_requests": self.dup_requests,
            "round_trips": self.round_trips,
            "outcomes": dict(self.outcomes),
            "bloom_new": self.bloom_new,
            "false_new": self.false_new,
            "false_maybe": self.false_maybe,
            "dups_executed": self.dups_executed,
            "latencies": len(self.lat_new) + len(self.lat_dup),
        }


@dataclass(frozen=True)
class _Request:
    index: int
    is_new: bool
    worker: int
    pool_key: str  # the duplicate's existing key; "" for a new key


class _Variant:
    """What one variant keeps across blocks: its filters, its new keys' namespace, its result.

    A handler answers one request with ``(outcome, seen)``: the claim's outcome (or
    ``"SKIPPED"``) and the filter's verdict (``None`` without a filter, ``True`` for "maybe
    present", ``False`` for "definitely new").
    """

    def __init__(
        self,
        result: VariantResult,
        *,
        store: RedisIdempotencyStore,
        client: CountingRedis,
        base: str,
        filters: list[BloomFilter],
        bitmap: str,
    ) -> None:
        self.result = result
        self.store = store
        self.client = client
        self.base = base
        self.filters = filters
        self.bitmap = bitmap
        self.bloom_script = client.register_script(BLOOM_LUA)
        handlers: dict[str, Callable[[str, int], tuple[str, bool | None]]] = {
            CLAIM: self._claim_only,
            LOCAL: self._local_then_claim,
            REDIS: self._redis_then_claim,
            UNSAFE: self._local_skip_if_new,
        }
        self.handle = handlers[result.variant]

    def _claim(self, key: str) -> str:
        return self.store.claim(
            key=key,
            fingerprints={1: FINGERPRINT},
            current_version=1,
            owner=new_owner_token(),
            lease_ms=LEASE_MS,
            field_hashes=FIELD_HASHES,
        ).outcome.value

    def _claim_only(self, key: str, worker: int) -> tuple[str, bool | None]:
        return self._claim(key), None

    def _local_then_claim(self, key: str, worker: int) -> tuple[str, bool | None]:
        seen = self.filters[worker].add(key)
        return self._claim(key), seen  # "new" needs the lease, "maybe" the stored answer

    def _redis_then_claim(self, key: str, worker: int) -> tuple[str, bool | None]:
        positions = self.filters[0].positions(key)
        seen = self.bloom_script(keys=[self.bitmap], args=positions) == 1
        return self._claim(key), seen

    def _local_skip_if_new(self, key: str, worker: int) -> tuple[str, bool | None]:
        if not self.filters[worker].add(key):
            return "SKIPPED", False  # would run the operation with no lease, nothing stored
        return self._claim(key), True

    def serve(self, requests: Sequence[_Request]) -> None:
        result, handle, clock = self.result, self.handle, time.perf_counter_ns
        rt_before = self.client.round_trips
        started = clock()
        for request in requests:
            key = request.pool_key or f"{self.base}n:{request.index}"
            t0 = clock()
            outcome, seen = handle(key, request.worker)
            elapsed = clock() - t0
            if request.is_new:
                result.lat_new.append(elapsed)
                result.false_maybe += seen is True
            else:
                result.lat_dup.append(elapsed)
                result.false_new += seen is False
                result.dups_executed += outcome != Outcome.HIT.value
            result.bloom_new += seen is False
            result.outcomes[outcome] += 1
        result.wall_ns += clock() - started
        result.round_trips += self.client.round_trips - rt_before
        result.requests += len(requests)
        result.new_requests += sum(r.is_new for r in requests)
        result.dup_requests += sum(not r.is_new for r in requests)


def _workload(
    n: int, new_ratio: float, workers: int, pool: Sequence[str], rng: random.Random
) -> list[_Request]:
    new_count = round(n * new_ratio)
    kinds = [True] * new_count + [False] * (n - new_count)
    rng.shuffle(kinds)
    return [
        _Request(i, is_new, rng.randrange(workers), "" if is_new else rng.choice(pool))
        for i, is_new in enumerate(kinds)
    ]


def run(
    *,
    n_requests: int = 20_000,
    new_ratios: Sequence[float] = (0.8, 0.2),
    workers: int = 2,
    pool_size: int = 2_000,
    blocks: int = 40,
    error_rate: float = 0.01,
    url: str = DEFAULT_URL,
    prefix: str = PREFIX,
    seed: int = 7,
) -> list[VariantResult]:
    """Run every variant under every new-key ratio; delete every key written, even on error.

    Each variant sees the same request sequence (same new/duplicate order, same workers, same
    duplicate keys); its new keys get their own namespace. Blocks rotate the variants' order.
    """
    if not prefix.startswith(PREFIX):
        raise ValueError(f"keys must live under {PREFIX!r}")
    client = CountingRedis.from_url(url)
    store = RedisIdempotencyStore(client)
    run_base = f"{prefix}{uuid.uuid4().hex[:12]}:"
    rng = random.Random(seed)
    results: list[VariantResult] = []
    try:
        pool = _seed_pool(store, run_base, pool_size)
        origin = {key: rng.randrange(workers) for key in pool}  # the worker that served it
        for new_ratio in new_ratios:
            requests = _workload(n_requests, new_ratio, workers, pool, rng)
            active = []
            for index, name in enumerate(VARIANTS):
                base = f"{run_base}{{t:bench}}:r{round(new_ratio * 100)}:v{index}:"
                filters = [BloomFilter(pool_size + n_requests, error_rate) for _ in range(workers)]
                for key in pool:
                    filters[origin[key]].add(key)
                if name == REDIS:
                    _seed_bitmap(client, f"{base}bloom", pool, filters[0])
                result = VariantResult(name, new_ratio)
                results.append(result)
                variant = _Variant(
                    result,
                    store=store,
                    client=client,
                    base=base,
                    filters=filters,
                    bitmap=f"{base}bloom",
                )
                active.append(variant)
            for variant in active:  # load the scripts, open the connection: nothing timed
                for i in range(20):
                    variant.handle(f"{run_base}{{t:bench}}:warm:{variant.base}{i}", 0)
            size = math.ceil(len(requests) / blocks)
            for block in range(blocks):
                chunk = requests[block * size : (block + 1) * size]
                shift = block % len(active)
                gc.collect()
                gc.disable()
                try:
                    for variant in active[shift:] + active[:shift]:
                        variant.serve(chunk)
                finally:
                    gc.enable()
    finally:
        _cleanup(client, run_base)
        client.close()
    return results


def _seed_pool(store: RedisIdempotencyStore, run_base: str, size: int) -> list[str]:
    """Finished entries that the duplicate requests replay."""
    pool = [f"{run_base}{{t:bench}}:pool:{i}" for i in range(size)]
    for key in pool:
        owner = new_owner_token()
        store.claim(
            key=key,
            fingerprints={1: FINGERPRINT},
            current_version=1,
            owner=owner,
            lease_ms=LEASE_MS,
            field_hashes=FIELD_HASHES,
        )
        store.finish(key=key, owner=owner, response=RESPONSE, ttl_ms=RESULT_TTL_MS)
    return pool


def _seed_bitmap(client: redis.Redis, bitmap: str, pool: Sequence[str], bloom: BloomFilter) -> None:
    pipe = client.pipeline(transaction=False)
    pipe.setbit(bitmap, bloom.m - 1, 0)  # allocate the whole bitmap once
    for key in pool:
        for position in bloom.positions(key):
            pipe.setbit(bitmap, position, 1)
    pipe.pexpire(bitmap, RESULT_TTL_MS)
    pipe.execute()


def _cleanup(client: redis.Redis, run_base: str) -> None:
    """Delete this run's keys (and only those): ``SCAN MATCH <run prefix>*``, then ``UNLINK``."""
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{run_base}*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            client.unlink(*batch)
            batch.clear()
    if batch:
        client.unlink(*batch)


def _us(ns_value: float) -> str:
    return f"{ns_value:.0f}"


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}" if base else "-"


def _share(count: int, total: int) -> str:
    return f"{count} ({count / total:.0%})" if total else str(count)


def format_table(results: Sequence[VariantResult]) -> str:
    """A Markdown table; the "ratio" columns divide by ``claim only`` at the same new-key ratio."""
    columns = (
        "new keys",
        "variant",
        "RT/req",
        "p50 new µs",
        "p99 new µs",
        "p50 dup µs",
        "p99 dup µs",
        "p50 µs",
        "p99 µs",
        "req/s",
        "p50 ratio",
        "p99 ratio",
        "req/s ratio",
        'false "maybe" (of new)',
        'false "new" (of dups)',
        "dups run again",
    )
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    baseline = {r.new_ratio: r for r in results if r.variant == CLAIM}
    for r in results:
        base = baseline.get(r.new_ratio, r)
        p50, p99 = r.percentile(0.5), r.percentile(0.99)
        cells = (
            f"{r.new_ratio:.0%}",
            r.variant,
            f"{r.rt_per_request:.2f}",
            _us(r.percentile(0.5, "new")),
            _us(r.percentile(0.99, "new")),
            _us(r.percentile(0.5, "dup")),
            _us(r.percentile(0.99, "dup")),
            _us(p50),
            _us(p99),
            f"{r.throughput:,.0f}",
            _ratio(p50, base.percentile(0.5)),
            _ratio(p99, base.percentile(0.99)),
            _ratio(r.throughput, base.throughput),
            _share(r.false_maybe, r.new_requests),
            _share(r.false_new, r.dup_requests),
            _share(r.dups_executed, r.dup_requests),
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment(url: str = DEFAULT_URL) -> str:
    """One line naming what the numbers were measured on."""
    client = redis.Redis.from_url(url)
    try:
        server = client.info("server")
    finally:
        client.close()
    return (
        f"Python {platform.python_version()}, redis-py {redis.__version__} "
        f"(hiredis {'on' if redis.utils.HIREDIS_AVAILABLE else 'off'}), "
        f"Redis {server['redis_version']} on {server.get('tcp_port', '?')}, "
        f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("-n", "--requests", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pool", type=int, default=2_000, help="distinct duplicate keys")
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    started = time.monotonic()
    results = run(
        n_requests=args.requests,
        workers=args.workers,
        pool_size=args.pool,
        url=args.url,
        seed=args.seed,
    )
    bloom = BloomFilter(args.pool + args.requests)
    print(environment(args.url))
    print(
        f"{args.requests} requests per row, {args.workers} simulated workers, "
        f"{args.pool} finished keys replayed as duplicates, Bloom m={bloom.m} bits "
        f"({len(bloom.bits) / 1024:.0f} KiB) k={bloom.k} for 1% false positives\n"
    )
    print(format_table(results))
    print(f"\n({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
