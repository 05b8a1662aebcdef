"""The conditions under which no order ID can be issued, brought about for real in this
process: its generator's wall clock stepped back, every worker id leased by other processes, its
lease given back, or its worker id leased by another process too.

Each swaps the process-wide generator (``ordering.order_ids``) for the duration of a ``with``
block and put the original back afterwards; leases live in the real Redis under a key prefix of
their own, all released at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

from ordering import order_ids
from ordering.order_ids import OrderIdGenerator
from ordering.worker_ids import (
    KEY_PREFIX,
    WORKER_IDS,
    RedisLeaseStore,
    WorkerLeaseHandle,
    lease_worker_id,
)
from tenants.redis_routing import client_for_service
from tests.ordering.test_order_ids import FakeClock

OTHER_PROCESS = "another-host:4242:test"


def _test_prefix() -> str:
    return f"test:{uuid.uuid4().hex[:12]}:{KEY_PREFIX}"


def _test_store() -> RedisLeaseStore:
    return RedisLeaseStore(key_prefix=_test_prefix())


@contextmanager
def clock_stepped_back(*, ms: float) -> Iterator[FakeClock]:
    """This process issues IDs on a fake clock that has issued one and then stepped back ``ms``;
    ``clock.step(ms=ms)`` brings it back."""
    clock = FakeClock(at=datetime.now(UTC))
    handle = lease_worker_id(stores=[_test_store()])
    generator = OrderIdGenerator(
        worker_lease=handle,
        clock=clock,
        sleep=clock.sleep,
        max_backstep_ms=settings.ORDER_ID_MAX_CLOCK_BACKSTEP_MS,
    )
    generator.next_id(shard=0, dish_bucket=0)
    clock.step(ms=-ms)
    saved = order_ids._process_generator
    order_ids._process_generator = generator
    try:
        yield clock
    finally:
        order_ids._process_generator = saved
        handle.release()


@contextmanager
def lease_given_back() -> Iterator[None]:
    """This process's generator holds a lease it has given back, as at shutdown
    (:func:`ordering.order_ids.release_process_lease`): it refuses to issue IDs."""
    handle = lease_worker_id(stores=[_test_store()])
    generator = OrderIdGenerator(worker_lease=handle)
    handle.release()
    saved = order_ids._process_generator
    order_ids._process_generator = generator
    try:
        yield
    finally:
        order_ids._process_generator = saved


@contextmanager
def all_worker_ids_leased_elsewhere() -> Iterator[Callable[[], None]]:
    """This process has no generator yet and every worker id is leased by another process;
    yields a function that gives one of them back, as a process shutting down would."""
    store = _test_store()
    for worker_id in range(WORKER_IDS):
        claimed = store.claim(candidates=[worker_id], owner=OTHER_PROCESS, lease_seconds=60)
        assert claimed == worker_id
    leased: list[WorkerLeaseHandle] = []

    def lease_from_test_store() -> WorkerLeaseHandle:
        handle = lease_worker_id(stores=[store])
        leased.append(handle)
        return handle

    saved = order_ids._process_generator, order_ids.lease_worker_id
    order_ids._process_generator = None
    order_ids.lease_worker_id = lease_from_test_store
    try:
        yield lambda: store.release(worker_id=0, owner=OTHER_PROCESS)
    finally:
        order_ids._process_generator, order_ids.lease_worker_id = saved
        for handle in leased:
            handle.release()
        for worker_id in range(WORKER_IDS):
            store.release(worker_id=worker_id, owner=OTHER_PROCESS)


@dataclass
class SharedWorkerId:
    """This process's lease and another process's lease on the same worker id."""

    ours: WorkerLeaseHandle
    other: WorkerLeaseHandle
    other_generator: OrderIdGenerator

    @contextmanager
    def as_the_other_process(self) -> Iterator[None]:
        """Orders placed in this block get their IDs from the other process's generator."""
        saved = order_ids._process_generator
        order_ids._process_generator = self.other_generator
        try:
            yield
        finally:
            order_ids._process_generator = saved


@contextmanager
def worker_id_shared_with_another_process() -> Iterator[SharedWorkerId]:
    """This process and another hold one worker id, as after the Redis node of the leases lost
    its data: the key of our id vanished and the other process leased the id anew, while our
    lease still vouches for it until its next renewal (long: 300 s leases, so no heartbeat
    renews it during the test). Both issue IDs on one frozen clock, so the first ID the other
    issues is the next one ours would."""
    prefix = _test_prefix()
    store = RedisLeaseStore(key_prefix=prefix)
    ours = lease_worker_id(stores=[store], lease_seconds=300)
    shared_id = ours.worker_id
    client_for_service("order-id-workers").delete(store.key(shared_id))  # the node lost its data
    other = lease_worker_id(
        stores=[RedisLeaseStore(key_prefix=prefix, ids=range(shared_id, shared_id + 1))],
        lease_seconds=300,
    )
    assert other.worker_id == shared_id
    clock = FakeClock(at=datetime.now(UTC))
    saved = order_ids._process_generator
    order_ids._process_generator = OrderIdGenerator(
        worker_lease=ours, clock=clock, sleep=clock.sleep
    )
    try:
        yield SharedWorkerId(
            ours=ours,
            other=other,
            other_generator=OrderIdGenerator(worker_lease=other, clock=clock, sleep=clock.sleep),
        )
    finally:
        order_ids._process_generator = saved
        ours.release()
        other.release()
