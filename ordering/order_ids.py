"""Order IDs: 64-bit integers that processes issue on their own, without asking anyone per ID.

Layout of a positive signed 64-bit integer (it fits a PostgreSQL ``bigint``), most significant
bit first::

    bit:   63   | 62 ......... 26 | 25 ... 22    | 21 ........ 10     | 9 ..... 3   | 2 ..... 0
           sign | tick (37 bits)  | shard (4)    | dish bucket (12)   | worker (7)  | sequence (3)
           0    | 10 ms ticks     | tenant shard | primary-dish hash  | leased id   | per tick

- tick: 10 ms ticks since 2026-01-01T00:00:00Z. 2^37 ticks x 10 ms is about 43.5 years, so the
  layout lasts until mid-2069.
- tenant shard (0..15, :func:`tenants.routing.tenant_shard`) and primary-dish bucket (0..4095,
  :func:`dish_bucket`) ride along so an ID alone says where the order belongs.
- worker id (0..127): leased per process (:mod:`ordering.worker_ids`), so at most 128 processes
  issue IDs at the same time.
- sequence (0..7): per process and tick, so 8 IDs per 10 ms, 800 IDs/s per process and about
  102k IDs/s for the whole platform (128 x 800). A process that runs out of sequence numbers
  waits for the next tick.

Why: the source design's 64-bit layout had no worker bits, so two processes issuing in the same
millisecond could produce the same ID, and its 32-bit millisecond field wrapped after 49.7 days.
Giving up millisecond resolution for 10 ms ticks pays for the 7 worker bits and 43 years of range.

Ordering: IDs are roughly time-ordered. They compare by tick first, so IDs from different
processes are ordered to the tick (plus the clock skew between hosts). Within one process the
tick never goes back and the sequence grows within a tick, so its IDs for one shard and bucket
strictly increase; two IDs of the same tick with different shards or buckets compare by those
fields, not by the order they were issued in.

Clock steps: the wall clock can step back (NTP correction, VM migration). A step of up to
``max_backstep_ms`` is waited out, holding the generator's lock, until the clock passes the last
tick used; a larger step raises :class:`ClockMovedBackwards` rather than stall order placement
for that long or reuse ticks. Both are counted (``ordering_order_id_clock_backsteps_total``,
by outcome) and alerted on (``docs/observability/alerts.yml``).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings

from ordering.metrics import clock_backsteps
from ordering.worker_ids import (
    WORKER_IDS,
    ForkSafeLock,
    LeaseStoreUnavailable,
    WorkerLeaseHandle,
    WorkerLeaseLost,
    lease_worker_id,
)

__all__ = [
    "EPOCH",
    "ClockMovedBackwards",
    "OrderIdGenerator",
    "OrderIdParts",
    "WorkerLeaseLost",
    "decode_order_id",
    "dish_bucket",
    "next_order_id",
    "recheck_process_lease",
]

logger = logging.getLogger(__name__)

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
TICK_MS = 10

TICK_BITS = 37
SHARD_BITS = 4
BUCKET_BITS = 12
WORKER_BITS = (WORKER_IDS - 1).bit_length()  # 7
SEQUENCE_BITS = 3

_WORKER_SHIFT = SEQUENCE_BITS
_BUCKET_SHIFT = _WORKER_SHIFT + WORKER_BITS
_SHARD_SHIFT = _BUCKET_SHIFT + BUCKET_BITS
_TICK_SHIFT = _SHARD_SHIFT + SHARD_BITS  # 26; with 37 tick bits that is 63 bits in all

_EPOCH_SECONDS = EPOCH.timestamp()
_SEQUENCE_MAX = (1 << SEQUENCE_BITS) - 1


@dataclass(frozen=True)
class OrderIdParts:
    """The fields of an order ID; ``issued_at`` is the start of its 10 ms tick, in UTC."""

    issued_at: datetime
    shard: int
    dish_bucket: int
    worker_id: int
    sequence: int


class ClockMovedBackwards(RuntimeError):
    """The wall clock stepped back further than the generator waits out."""

    def __init__(self, message: str, *, backstep_ms: float) -> None:
        super().__init__(message)
        self.backstep_ms = backstep_ms

    @property
    def retry_after_seconds(self) -> int:
        """Whole seconds until the clock is back at the last tick used (at least 1): from then
        on IDs are issued again without any wait."""
        return max(1, math.ceil(self.backstep_ms / 1000))


def dish_bucket(dish_id: int) -> int:
    """The dish's bucket, 0..4095.

    Buckets are stored inside order IDs, so the hash must be the same in every process, on every
    host and Python version: ``hash()`` is salted per process, BLAKE2b is not.
    """
    digest = hashlib.blake2b(f"dish:{dish_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (1 << BUCKET_BITS)


def decode_order_id(order_id: int) -> OrderIdParts:
    """Split an order ID into its fields."""
    if not 0 <= order_id < 1 << 63:
        raise ValueError(f"not an order ID (must be in 0..2^63-1): {order_id}")
    tick = order_id >> _TICK_SHIFT
    return OrderIdParts(
        issued_at=EPOCH + timedelta(milliseconds=tick * TICK_MS),
        shard=_bits(order_id, shift=_SHARD_SHIFT, width=SHARD_BITS),
        dish_bucket=_bits(order_id, shift=_BUCKET_SHIFT, width=BUCKET_BITS),
        worker_id=_bits(order_id, shift=_WORKER_SHIFT, width=WORKER_BITS),
        sequence=_bits(order_id, shift=0, width=SEQUENCE_BITS),
    )


def _bits(value: int, *, shift: int, width: int) -> int:
    return (value >> shift) & ((1 << width) - 1)


def _check_field(name: str, value: int, *, width: int) -> None:
    if not 0 <= value < 1 << width:
        raise ValueError(f"{name} must be in 0..{(1 << width) - 1}, got {value!r}")


# A handle feeds at most one generator, ever: two generators on one worker id (or a new one
# replacing an old one within the same tick) would hand out the same tick/sequence pairs.
_leases_in_use: weakref.WeakSet[WorkerLeaseHandle] = weakref.WeakSet()


class OrderIdGenerator:
    """Issues order IDs under one worker lease; safe to share between threads."""

    def __init__(
        self,
        *,
        worker_lease: WorkerLeaseHandle,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        max_backstep_ms: int = 200,
    ) -> None:
        if worker_lease in _leases_in_use:
            raise ValueError("this worker lease already feeds another OrderIdGenerator")
        _leases_in_use.add(worker_lease)
        self._lease = worker_lease
        self._clock = clock
        self._sleep = sleep
        self._max_backstep_ms = max_backstep_ms
        self._lock = ForkSafeLock()
        self._last_tick = -1
        self._last_ms = 0.0  # the latest clock reading, in ms since EPOCH
        self._sequence = 0

    def next_id(self, *, shard: int, dish_bucket: int) -> int:
        """A new order ID, never issued before by any live process.

        Raises :class:`WorkerLeaseLost` when the worker lease is no longer valid and
        :class:`ClockMovedBackwards` when the clock stepped back more than ``max_backstep_ms``.
        """
        _check_field("shard", shard, width=SHARD_BITS)
        _check_field("dish_bucket", dish_bucket, width=BUCKET_BITS)
        with self._lock:
            tick, sequence = self._next_slot()
            worker_id = self._lease.worker_id
            # Checked after any wait for a tick, right before the ID exists.
            if not self._lease.is_valid():
                raise WorkerLeaseLost(
                    f"the lease on order-ID worker id {worker_id} is no longer valid; "
                    f"refusing to issue order IDs"
                )
        return (
            tick << _TICK_SHIFT
            | shard << _SHARD_SHIFT
            | dish_bucket << _BUCKET_SHIFT
            | worker_id << _WORKER_SHIFT
            | sequence
        )

    def _next_slot(self) -> tuple[int, int]:
        """The (tick, sequence) of the next ID; waits while the tick is used up or behind us."""
        while True:
            now_ms = self._now_ms()
            self._refuse_long_backstep(now_ms)
            self._last_ms = max(self._last_ms, now_ms)
            tick = int(now_ms // TICK_MS)
            if tick > self._last_tick:
                self._last_tick, self._sequence = tick, 0
                return tick, 0
            if tick == self._last_tick and self._sequence < _SEQUENCE_MAX:
                self._sequence += 1
                return tick, self._sequence
            self._sleep(((self._last_tick + 1) * TICK_MS - now_ms) / 1000)

    def _now_ms(self) -> float:
        now_ms = (self._clock() - _EPOCH_SECONDS) * 1000
        if not 0 <= now_ms < (1 << TICK_BITS) * TICK_MS:
            raise OverflowError(f"the clock is outside the order-ID range: {EPOCH} + {now_ms} ms")
        return now_ms

    def _refuse_long_backstep(self, now_ms: float) -> None:
        backstep_ms = self._last_ms - now_ms
        if backstep_ms <= 0:
            return
        if backstep_ms > self._max_backstep_ms:
            clock_backsteps.labels(outcome="refused").inc()
            logger.error(
                "clock moved backwards by %.0f ms (limit %d ms); refusing to issue order IDs",
                backstep_ms,
                self._max_backstep_ms,
            )
            raise ClockMovedBackwards(
                f"clock moved backwards by {backstep_ms:.0f} ms, more than the "
                f"{self._max_backstep_ms} ms the order-ID generator waits out",
                backstep_ms=backstep_ms,
            )
        clock_backsteps.labels(outcome="waited").inc()
        logger.warning(
            "clock moved backwards by %.0f ms (limit %d ms); order IDs wait until it catches up",
            backstep_ms,
            self._max_backstep_ms,
        )


_process_generator: OrderIdGenerator | None = None
_process_generator_lock = ForkSafeLock()


def next_order_id(*, shard: int, dish_bucket: int) -> int:
    """A new order ID from this process's generator, created (and its worker id leased) on
    first use, so importing this module costs nothing and a forked child leases its own id."""
    return _generator_for_process().next_id(shard=shard, dish_bucket=dish_bucket)


def _generator_for_process() -> OrderIdGenerator:
    global _process_generator
    generator = _process_generator
    if generator is None:
        with _process_generator_lock:
            if _process_generator is None:
                _process_generator = OrderIdGenerator(
                    worker_lease=lease_worker_id(),
                    max_backstep_ms=settings.ORDER_ID_MAX_CLOCK_BACKSTEP_MS,
                )
            generator = _process_generator
    return generator


def release_process_lease() -> None:
    """Give this process's order-ID worker id back at once, if it ever leased one.

    For process shutdown (gunicorn's ``worker_exit`` hook, ``config/gunicorn.py``): the id is free
    for the next process immediately instead of after its lease lapses. The generator stays in
    place but refuses to issue IDs from now on (:class:`WorkerLeaseLost`); a new generator must
    not replace it, as it could hand out the tick/sequence pairs this one already used.
    """
    with _process_generator_lock:
        generator = _process_generator
    if generator is not None:
        generator._lease.release()


def recheck_process_lease() -> None:
    """An order ID this process issued was already in the database: renew its lease now.

    Two live processes hold one worker id only after a Redis node lost its data and handed the
    id out again (:mod:`ordering.worker_ids`). The renewal finds the other owner and leases a
    fresh id at once, instead of at the heartbeat's next turn (up to a third of the lease
    later), so the process stops issuing IDs the other one may issue too. When the lease is
    still ours, it is just extended.
    """
    with _process_generator_lock:
        generator = _process_generator
    if generator is None:
        return
    try:
        generator._lease.renew()
    except LeaseStoreUnavailable as exc:
        logger.warning("order-ID worker lease not rechecked after an ID collision: %s", exc)
