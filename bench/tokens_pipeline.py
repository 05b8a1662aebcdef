"""Pre-issued tokens: one pipeline vs one round trip per token (seed 2.4).

Seed 2.4 claims that pre-generating tokens and checking them with a Redis pipeline beats one
round trip per token. This benchmark measures it on the engine's own code, in one run against
the real Redis, for batches of ``n`` tokens (default 1,000):

``issue, pipeline``
    ``idempotency.core.tokens.new_tokens`` + ``store_tokens``: sign n tokens, then n ``SET … EX``
    in one pipeline (what ``POST /api/v1/idempotency-tokens/`` does).
``issue, one round trip per token``
    The same tokens signed the same way, then one ``SET … EX`` per token.
``check, pipeline``
    ``idempotency.core.tokens.read_token_states``: verify n signatures, then n ``GET`` in one
    pipeline (what ``POST /api/v1/idempotency-tokens/check/`` does).
``check, one round trip per token``
    Verify each signature and ``GET`` its key, one token at a time.
``sign only``
    Minting n signed tokens with no Redis at all: the part of "issue" no pipeline can save.

Each round runs every variant once on fresh tokens, in a rotated order (so drift in a shared
machine's load hits all of them), with the garbage collector paused; the table shows the median
and p90 over the rounds, round trips per batch (counted on the client), and the ratio of
one-by-one to pipelined time.

Run: ``.venv/bin/python -m bench.tokens_pipeline`` (Redis at 127.0.0.1:6379, DB 9). Every key
lives under ``bench:tok:<run id>:``, carries a 10-minute TTL, and is deleted after each round.
No Django settings are needed: the tokens are signed with a throwaway secret.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from idempotency.core.tokens import (
    TokenStatus,
    new_tokens,
    read_token_states,
    store_tokens,
    token_key,
    verify_token,
)

__all__ = ["VARIANTS", "CountingRedis", "VariantResult", "format_table", "run"]

DEFAULT_URL = "redis://127.0.0.1:6379/9"
PREFIX = "bench:tok:"
TTL_SECONDS = 600  # short: bench keys vanish by themselves if cleanup never runs
TENANT = "bench"
PRINCIPAL = "client:1/diner:bench"
SECRET = "bench-only-secret"

ISSUE_PIPE = "issue, pipeline"
ISSUE_EACH = "issue, one round trip per token"
CHECK_PIPE = "check, pipeline"
CHECK_EACH = "check, one round trip per token"
SIGN = "sign only (no Redis)"
VARIANTS = (ISSUE_PIPE, ISSUE_EACH, CHECK_PIPE, CHECK_EACH, SIGN)
# one-by-one variant -> its pipelined counterpart, for the ratio column
BASELINE = {ISSUE_EACH: ISSUE_PIPE, CHECK_EACH: CHECK_PIPE}


class CountingRedis(redis.Redis):
    """Counts round trips: one per command sent alone, one per pipeline ``execute``."""

    round_trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.round_trips += 1
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        execute = pipe.execute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.round_trips += 1
            return execute(*args, **kwargs)

        pipe.execute = counted  # type: ignore[method-assign]
        return pipe


@dataclass
class VariantResult:
    """One variant over all rounds; durations in nanoseconds, one per round."""

    variant: str
    n: int
    durations: list[int] = field(default_factory=list)
    round_trips: int = 0
    tokens: int = 0  # tokens issued or checked over all rounds
    statuses: dict[str, int] = field(default_factory=dict)  # check variants only

    def ms(self, q: float) -> float:
        """The ``q`` quantile (nearest rank) of one batch's time, in milliseconds."""
        ordered = sorted(self.durations)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] / 1e6

    @property
    def median_ms(self) -> float:
        return statistics.median(self.durations) / 1e6 if self.durations else 0.0

    def summary(self) -> dict[str, Any]:
        """Counts only (no timings): what the smoke test checks."""
        return {
            "variant": self.variant,
            "rounds": len(self.durations),
            "round_trips": self.round_trips,
            "tokens": self.tokens,
            "statuses": dict(self.statuses),
        }


def _issue_pipeline(client: CountingRedis, ns: str, n: int) -> list[str]:
    tokens = new_tokens(tenant=TENANT, principal=PRINCIPAL, count=n, secret=SECRET)
    store_tokens(
        client,
        tenant=TENANT,
        principal=PRINCIPAL,
        tokens=tokens,
        ttl_seconds=TTL_SECONDS,
        namespace=ns,
    )
    return tokens


def _issue_each(client: CountingRedis, ns: str, n: int) -> list[str]:
    tokens = new_tokens(tenant=TENANT, principal=PRINCIPAL, count=n, secret=SECRET)
    value = f"p:{PRINCIPAL}"
    for token in tokens:
        client.set(token_key(tenant=TENANT, token=token, namespace=ns), value, ex=TTL_SECONDS)
    return tokens


def _check_pipeline(client: CountingRedis, ns: str, tokens: Sequence[str]) -> list[TokenStatus]:
    return read_token_states(
        client, tenant=TENANT, principal=PRINCIPAL, tokens=tokens, namespace=ns, secret=SECRET
    )


def _check_each(client: CountingRedis, ns: str, tokens: Sequence[str]) -> list[TokenStatus]:
    unused = f"p:{PRINCIPAL}".encode()
    statuses = []
    for token in tokens:
        verify_token(token, tenant=TENANT, principal=PRINCIPAL, secret=SECRET)
        value = client.get(token_key(tenant=TENANT, token=token, namespace=ns))
        statuses.append(
            TokenStatus.UNKNOWN
            if value is None
            else TokenStatus.UNUSED
            if value == unused
            else TokenStatus.USED
        )
    return statuses


def run(
    *,
    n: int = 1_000,
    rounds: int = 20,
    url: str = DEFAULT_URL,
    prefix: str = PREFIX,
) -> list[VariantResult]:
    """Run every variant ``rounds`` times on batches of ``n`` tokens; delete every key
    written, even on error."""
    if not prefix.startswith(PREFIX):
        raise ValueError(f"keys must live under {PREFIX!r}")
    client = CountingRedis.from_url(url)
    run_base = f"{prefix}{uuid.uuid4().hex[:12]}"
    results = {name: VariantResult(name, n) for name in VARIANTS}
    try:
        client.ping()  # connect outside the timings
        for index in range(rounds):
            ns = f"{run_base}:r{index}"
            _round(client, ns=ns, n=n, index=index, results=results)
            _cleanup(client, ns)
    finally:
        _cleanup(client, run_base)
        client.close()
    return [results[name] for name in VARIANTS]


def _round(
    client: CountingRedis, *, ns: str, n: int, index: int, results: dict[str, VariantResult]
) -> None:
    """One round: both issue variants and signing alone, then both checks of one batch."""
    issued: dict[str, list[str]] = {}

    def issue_pipe() -> list[str]:
        issued["pipe"] = _issue_pipeline(client, f"{ns}p", n)
        return issued["pipe"]

    def issue_each() -> list[str]:
        return _issue_each(client, f"{ns}e", n)

    def sign() -> list[str]:
        return new_tokens(tenant=TENANT, principal=PRINCIPAL, count=n, secret=SECRET)

    _timed_rotated(
        [(ISSUE_PIPE, issue_pipe), (ISSUE_EACH, issue_each), (SIGN, sign)], index, results, client
    )
    # Both checks read the same batch: the one the pipeline variant issued.
    batch = issued["pipe"]
    _timed_rotated(
        [
            (CHECK_PIPE, lambda: _check_pipeline(client, f"{ns}p", batch)),
            (CHECK_EACH, lambda: _check_each(client, f"{ns}p", batch)),
        ],
        index,
        results,
        client,
    )


def _timed_rotated(
    steps: list[tuple[str, Callable[[], Any]]],
    index: int,
    results: dict[str, VariantResult],
    client: CountingRedis,
) -> None:
    shift = index % len(steps)
    for name, step in steps[shift:] + steps[:shift]:
        result = results[name]
        gc.collect()
        gc.disable()
        try:
            before = client.round_trips
            started = time.perf_counter_ns()
            out = step()
            result.durations.append(time.perf_counter_ns() - started)
            result.round_trips += client.round_trips - before
        finally:
            gc.enable()
        result.tokens += len(out)
        if name in (CHECK_PIPE, CHECK_EACH):
            for status in out:
                result.statuses[status.value] = result.statuses.get(status.value, 0) + 1


def _cleanup(client: redis.Redis, base: str) -> None:
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{base}*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            client.unlink(*batch)
            batch.clear()
    if batch:
        client.unlink(*batch)


def format_table(results: Sequence[VariantResult]) -> str:
    """A Markdown table; "x slower" divides a one-by-one variant by its pipelined twin."""
    by_name = {r.variant: r for r in results}
    rounds = max((len(r.durations) for r in results), default=0)
    lines = [
        "| variant | tokens | round trips / batch | median ms | p90 ms | µs / token | "
        "x slower than pipeline (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        base = by_name.get(BASELINE.get(r.variant, ""))
        ratio = f"{r.median_ms / base.median_ms:.1f}x" if base and base.median_ms else "-"
        per_batch = r.round_trips / rounds if rounds else 0
        cells = (
            r.variant,
            f"{r.n:,}",
            f"{per_batch:,.0f}",
            f"{r.median_ms:.2f}",
            f"{r.ms(0.9):.2f}",
            f"{r.median_ms * 1000 / r.n:.1f}" if r.n else "-",
            ratio,
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
        f"Redis {server['redis_version']} on {server.get('tcp_port', '?')} (loopback), "
        f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n", 1)[0])
    parser.add_argument("-n", "--tokens", type=int, default=1_000, help="tokens per batch")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--url", default=DEFAULT_URL)
    args = parser.parse_args(argv)
    started = time.monotonic()
    results = run(n=args.tokens, rounds=args.rounds, url=args.url)
    print(environment(args.url))
    print(f"batches of {args.tokens:,} tokens, {args.rounds} rounds\n")
    print(format_table(results))
    print(f"\n({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
