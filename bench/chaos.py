"""Chaos run: a mixed order load while workers die and Redis and PostgreSQL restart (issue 8.5).

One command, everything on 127.0.0.1, everything torn down at the end::

    .venv/bin/python -m bench.chaos                 # 60 s of load, about 1.5 minutes in all
    .venv/bin/python -m bench.chaos --duration 20   # shorter; --help for the knobs

What it owns for the run:

- a private PostgreSQL server (``tests/support/private_postgres.PrivatePostgres``: ``initdb``
  into a temporary directory, a free port, ``fsync=off``), migrated with ``manage.py migrate``;
  restarting it disturbs nobody else's database;
- a private ``redis-server`` (``tests/support/redis_nodes.RedisNode``), restarted on the same
  port (it comes back empty: ``--save ""``);
- gunicorn with 4 sync workers (``tests/support/live_server.live_gunicorn``, ``DEBUG=0``,
  ``IDEMPOTENCY_LEASE_MS=3000`` so a dead request's claim frees up quickly, no write rate limit).

The load: ``--clients`` asyncio clients (httpx) send ``POST /api/v1/orders/`` for ``--duration``
seconds against one tenant whose dishes have finite stock (3 x 1000 portions by default, 1-3
portions of 1-2 dishes per order, so stock usually runs out in the course of a run and refusals
are part of the mix). Per operation:

- 80 % a **new order** with a fresh ``Idempotency-Key``; one in eight of them is a **concurrent
  duplicate** (the same key on 2-3 connections at once), and one in sixteen of the others is an
  **impatient** first attempt (a 20-300 ms timeout: the client gives up with no answer, the
  server may well finish it);
- 20 % a **retry of an earlier key**, preferring keys that never got a final answer (no
  answer, connection reset, timeout, 5xx), otherwise any earlier key (which must replay).

Every attempt that ends in a connection error, a timeout, a 5xx, a 429 or a 409
``IDEMPOTENCY_REQUEST_IN_PROGRESS`` is retried with the same key and payload after a short
backoff (up to 5 attempts per operation during the load). Any other answer is *final* (2xx, or
a 4xx such as 409 ``INSUFFICIENT_STOCK``). The note of every order is its key, so the database
says which key an order belongs to.

Meanwhile: SIGKILL a random gunicorn worker every ``--kill-every`` seconds (gunicorn respawns
it), restart Redis once (SIGTERM, ``--redis-down`` s down, start on the same port; one more
worker is killed 0.5 s after, so a fresh process starts against the empty Redis) and
PostgreSQL once (``pg_ctl stop -m fast``, ``--pg-down`` s down, start).

After the load the clients retry every key that has no final answer until it gets one (bounded
by ``--settle-timeout``). Once every worker is up again, ``--probe`` fresh orders (of a dish
of their own that never runs out) go out, one attempt each: a 5xx now is no passing effect of a
fault but a lasting failure. Then the run waits out the lease, replays a sample of acknowledged
keys, and checks:

- every key the clients saw acknowledged (2xx with an order id) has exactly one order, with that
  id; no key has two orders (neither by ``Order.idempotency_key`` nor by note); no order whose
  key never got a 2xx (phantom); orders == acknowledged keys;
- every key got the same final answer each time it got one (status and order id);
- no stock negative; stock at start - stock at the end == the portions in the order lines, per
  dish; each order's lines are what its key asked for;
- idempotency records: one per key (every final answer below 500 is stored), 201 records ==
  orders;
- Redis: every key's entry is absent or finished (``st=d``) once the lease is over; the states
  right after settling are reported too;
- a sample of acknowledged keys replays 201 with the same order id;
- no 5xx after settling (probe and replays).

It prints the counts (requests, answers by status and ``X-Idempotent-Result``, connection
errors and timeouts, workers killed, restarts, the invariants) and exits 1 if any invariant is
violated. ``--json PATH`` writes them as JSON. The servers' logs are kept only with
``--log-dir`` or when an invariant fails (the path is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python -m bench.chaos"
SECRET_KEY = "bench-chaos-not-a-secret-" + "x" * 32
HASH_KEY = "bench-chaos-hash-key-not-a-secret-" + "y" * 24  # not SECRET_KEY
PROVIDER_SECRET = "bench-chaos-provider-secret-not-a-secret-" + "z" * 8  # nor either of them
DB_NAME = "chaos"
ORDERS_PATH = "/api/v1/orders/"
IN_PROGRESS_CODE = "IDEMPOTENCY_REQUEST_IN_PROGRESS"
KEY_REUSED_CODE = "IDEMPOTENCY_KEY_REUSED"
STOCK_CODE = "INSUFFICIENT_STOCK"
# Stock of the dish only the post-settle probe orders: the probe must be able to place orders
# (a refusal for stock is decided before an order ID is needed) after the load sold out.
PROBE_STOCK = 1_000_000


# --- options ----------------------------------------------------------------------------------


@dataclass
class Options:
    duration: float = 60.0  # seconds of load
    # ...and on past them until this many requests were sent (a busy machine sends fewer a
    # second; the faults go on meanwhile)
    min_requests: int = 0
    clients: int = 12  # concurrent asyncio clients
    workers: int = 4  # gunicorn workers
    dishes: int = 3
    stock: int = 1000  # portions per dish (the probe's own dish aside)
    diners: int = 8
    kill_every: float = 3.0  # seconds between worker SIGKILLs (jittered +-30 %)
    redis_restart_at: float = 0.35  # fraction of the load's duration
    redis_down: float = 2.0
    pg_restart_at: float = 0.65
    pg_down: float = 1.0
    lease_ms: int = 3000  # IDEMPOTENCY_LEASE_MS of the server
    max_attempts: int = 5  # per operation during the load
    request_timeout: float = 10.0
    settle_timeout: float = 90.0
    replay_sample: int = 100
    probe: int = 48  # fresh orders after settling (a 5xx then is a lasting failure)
    seed: int | None = None
    log_dir: Path | None = None
    quiet: bool = False


# --- what the clients saw ---------------------------------------------------------------------


@dataclass
class KeyState:
    key: str
    diner: str
    items: list[tuple[int, int]]  # (dish id, quantity)
    body: bytes
    attempts: int = 0
    in_flight: int = 0
    # First final answer (status, code, order id) and every final answer's signature.
    final: tuple[int, str, str] | None = None
    finals: set[tuple[int, str, str]] = field(default_factory=set)
    order_ids: set[str] = field(default_factory=set)
    history: list[str] = field(default_factory=list)  # "201 MISS", "conn:RemoteProtocolError"

    @property
    def acknowledged(self) -> bool:
        return self.final is not None and 200 <= self.final[0] < 300


@dataclass
class Tally:
    requests: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    results: Counter[str] = field(default_factory=Counter)  # X-Idempotent-Result of answers
    codes: Counter[str] = field(default_factory=Counter)  # problem "code" of 4xx/5xx answers
    transport_errors: Counter[str] = field(default_factory=Counter)
    timeouts: int = 0
    impatient_timeouts: int = 0
    operations: Counter[str] = field(default_factory=Counter)
    ops_unfinished_in_load: int = 0
    settle_requests: int = 0
    settle_keys: int = 0
    probe_requests: int = 0
    first_stock_out_s: float | None = None  # first 409 INSUFFICIENT_STOCK, s into the load

    @property
    def connection_errors(self) -> int:
        return sum(self.transport_errors.values())


@dataclass
class Faults:
    workers_killed: int = 0
    killed_pids: list[int] = field(default_factory=list)
    kill_misses: int = 0  # the picked worker was already gone
    redis_restarts: int = 0
    postgres_restarts: int = 0
    timeline: list[tuple[float, str]] = field(default_factory=list)


# --- orchestration ----------------------------------------------------------------------------


def say(opts: Options, message: str) -> None:
    if not opts.quiet:
        print(f"[chaos] {message}", flush=True)


def merged_env(*layers: Mapping[str, str | None]) -> dict[str, str]:
    env = dict(os.environ)
    for layer in layers:
        for k, v in layer.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
    return env


def server_env(opts: Options, database_url: str, redis_url: str, metrics_dir: Path) -> dict:
    """The gunicorn workers' (and the Django helpers') environment: our database and Redis,
    production-like settings, a short lease, no write rate limit (one principal's load would be
    a 429 test), a breaker that recovers quickly after the Redis restart."""
    return {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": database_url,
        "APP_DB_NAME": None,
        "REDIS_URL": redis_url,
        "REDIS_SHARDS": None,
        "REDIS_CLUSTER_URL": None,
        "CELERY_BROKER_URL": redis_url.rsplit("/", 1)[0] + "/1",
        "DEBUG": "0",
        "SECRET_KEY": SECRET_KEY,
        "IDEMPOTENCY_HASH_KEY": HASH_KEY,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",  # plain HTTP on loopback, no TLS proxy in front
        # off DEBUG a payment provider must be configured; orders never reach it here
        "SIMULATED_PROVIDER": "1",
        "SIMULATED_PROVIDER_SECRET": PROVIDER_SECRET,
        "PAYMENT_DEFAULT_PROVIDER": "simulated",
        "API_WRITE_RATE_PER_MINUTE": "0",
        "API_TENANT_WRITE_CEILING_PER_MINUTE": "0",
        "IDEMPOTENCY_ENABLED": "1",
        "IDEMPOTENCY_LEASE_MS": str(opts.lease_ms),
        "IDEMPOTENCY_BREAKER": json.dumps({"open_seconds": 2}),
        "IDEMPOTENCY_FORCE_SCRIPTS": None,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "LOG_LEVEL": "INFO",  # INFO adds only rare lines (order-ID worker leases)
        "PYTHONUNBUFFERED": "1",
    }


def django_helper(env: Mapping[str, str | None], args: list[str], payload: Any = None) -> Any:
    """Run a Django-side step in a child process (this process never configures Django: it may
    run inside pytest, whose Django points at the shared test database)."""
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=PROJECT_ROOT,
        env=merged_env(env),
        input=json.dumps(payload) if payload is not None else "",
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return proc.stdout


def run(opts: Options) -> dict[str, Any]:
    """The whole chaos run; the report (``report["ok"]``, ``report["violations"]``...)."""
    from tests.support.live_server import live_gunicorn
    from tests.support.private_postgres import PrivatePostgres
    from tests.support.redis_nodes import RedisNode

    if shutil.which("redis-server") is None:
        raise SystemExit("bench.chaos needs redis-server: apt-get install -y redis-server")
    started = time.monotonic()
    rng = random.Random(opts.seed)
    run_id = uuid.uuid4().hex[:6]
    keep_logs = opts.log_dir is not None
    work = Path(tempfile.mkdtemp(prefix="bench-chaos-"))
    log_dir = opts.log_dir or work / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    try:
        with ExitStack() as stack:
            say(opts, "private PostgreSQL: initdb, start")
            pg = stack.enter_context(PrivatePostgres())
            pg.create_database(DB_NAME)
            node = RedisNode()
            stack.callback(node.remove)
            node.start()
            metrics_dir = work / "metrics"
            metrics_dir.mkdir()
            env = server_env(opts, pg.url(DB_NAME), node.url, metrics_dir)
            t = time.monotonic()
            django_helper(env, ["manage.py", "migrate", "--noinput", "-v", "0"])
            seeded = json.loads(
                django_helper(
                    env,
                    ["-m", "bench.chaos", "_seed"],
                    {
                        "dishes": opts.dishes,
                        "stock": opts.stock,
                        "run": run_id,
                        "diners": opts.diners,
                    },
                )
                .strip()
                .splitlines()[-1]
            )
            say(opts, f"migrated and seeded in {time.monotonic() - t:.1f} s: {seeded['dishes']}")
            t = time.monotonic()
            server = stack.enter_context(
                live_gunicorn(
                    db_name=DB_NAME,
                    log_dir=log_dir,
                    env=env,
                    workers=opts.workers,
                    ready_timeout=60.0,
                )
            )
            say(opts, f"gunicorn ({opts.workers} workers) ready in {time.monotonic() - t:.1f} s")
            stock_start = {int(d): s for d, s in seeded["stock"].items()}
            setup_s = time.monotonic() - started
            load = Load(opts, rng, server.url, seeded, run_id)
            load.server = server
            chaos = Chaos(opts, rng, server.process.pid, node, pg)
            say(
                opts,
                f"load: {opts.clients} clients for {opts.duration:g} s; kill a worker every "
                f"~{opts.kill_every:g} s, restart Redis at {opts.redis_restart_at:.0%} and "
                f"PostgreSQL at {opts.pg_restart_at:.0%}",
            )
            timings = asyncio.run(drive(load, chaos))
            say(
                opts,
                f"load done: {load.tally.requests} requests; settled "
                f"{load.tally.settle_keys} keys with {load.tally.settle_requests} requests "
                f"in {timings['settle_s']:.1f} s",
            )
            redis_at_settle = redis_states(node, load, pg, seeded)
            wait = opts.lease_ms / 1000 + 1.0
            say(opts, f"waiting {wait:.1f} s (lease) before checking Redis again")
            time.sleep(wait)
            redis_after_lease = redis_states(node, load, pg, seeded)
            replays = asyncio.run(load.replay_sample(opts.replay_sample))
            db = check_database(pg, load, seeded, stock_start)
            logs = server_log_facts(server, load)
            children = worker_children(server.process.pid)
            report = build_report(
                opts=opts,
                load=load,
                chaos=chaos,
                db=db,
                redis_at_settle=redis_at_settle,
                redis_after_lease=redis_after_lease,
                replays=replays,
                logs=logs,
                timings={
                    "setup_s": round(setup_s, 1),
                    **{k: round(v, 1) for k, v in timings.items()},
                    "total_s": round(time.monotonic() - started, 1),
                },
                workers_alive_at_end=len(children),
            )
            if not report["ok"]:
                keep_logs = True
            report["log_dir"] = str(log_dir) if keep_logs else None
            if keep_logs:
                (log_dir / "keys.jsonl").write_text(
                    "".join(
                        json.dumps(
                            {
                                "key": k.key,
                                "final": k.final,
                                "order_ids": sorted(k.order_ids),
                                "history": k.history,
                            }
                        )
                        + "\n"
                        for k in load.keys.values()
                    )
                )
    except BaseException:
        keep_logs = True
        raise
    finally:
        if keep_logs and opts.log_dir is None and any(log_dir.iterdir()):
            # keep only the logs, in a directory of their own
            kept = Path(tempfile.mkdtemp(prefix="bench-chaos-logs-"))
            shutil.copytree(log_dir, kept, dirs_exist_ok=True)
            if report:
                report["log_dir"] = str(kept)
            else:
                print(f"[chaos] logs: {kept}", file=sys.stderr, flush=True)
        shutil.rmtree(work, ignore_errors=True)
    report["timings"]["total_s"] = round(time.monotonic() - started, 1)
    return report


async def drive(load: Load, chaos: Chaos) -> dict[str, float]:
    """Load and faults side by side; then settle every key that has no final answer."""
    import httpx

    limits = httpx.Limits(max_connections=256, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=load.url, limits=limits) as client:
        load.client = client
        t0 = time.monotonic()
        load.t0 = chaos.t0 = t0
        stop = asyncio.Event()
        clients = [asyncio.create_task(load.client_loop(i, stop)) for i in range(load.opts.clients)]
        faults = asyncio.create_task(chaos.run(stop))
        await asyncio.sleep(load.opts.duration)
        while load.tally.requests < load.opts.min_requests:
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*clients)
        await faults  # a restart still in progress finishes
        load_s = time.monotonic() - t0
        t1 = time.monotonic()
        await load.settle()
        settle_s = time.monotonic() - t1
        # Fresh orders once everything is back (every worker booted): a worker that still
        # fails now fails for good.
        await asyncio.to_thread(wait_workers_ready, load.server, load.opts.workers)
        load.probe_log_offset = load.server_log_size()
        await load.probe()
        await load.settle(probe=True)  # the probe's failed keys get their final answer too
        return {"load_s": load_s, "settle_s": settle_s}


# --- the load ---------------------------------------------------------------------------------


class Load:
    def __init__(
        self, opts: Options, rng: random.Random, url: str, seeded: dict[str, Any], run_id: str
    ) -> None:
        self.opts = opts
        self.rng = rng
        self.url = url
        self.tokens = seeded["tokens"]  # diner "d<n>" -> its session's Bearer token
        self.dish_ids = [int(d) for d in seeded["dishes"]]
        self.probe_dish = int(seeded["probe_dish"])
        self.run_id = run_id
        self.keys: dict[str, KeyState] = {}
        self.unanswered: set[str] = set()  # keys with no final answer yet
        self.tally = Tally()
        self.client: Any = None
        self.t0 = 0.0
        self._n = 0
        self._settle_deadline = 0.0
        self.server: Any = None
        self.probe_keys: list[str] = []
        self.probe_log_offset = 0

    # payloads

    def new_key(self, prefix: str = "chaos") -> KeyState:
        self._n += 1
        key = f"{prefix}-{self.run_id}-{self._n:06d}"
        if prefix == "probe":  # the probe's own dish: it never runs out
            items = [(self.probe_dish, 1)]
        else:
            dishes = self.rng.sample(self.dish_ids, k=1 if self.rng.random() < 0.7 else 2)
            items = [(d, self.rng.randint(1, 3)) for d in dishes]
        body = json.dumps(
            {
                "items": [{"dish_id": d, "quantity": q} for d, q in items],
                "payment_method": self.rng.choice(["card", "wallet", "cash"]),
                "note": key,
            },
            separators=(",", ":"),
        ).encode()
        state = KeyState(
            key=key, diner=f"d{self.rng.randrange(self.opts.diners)}", items=items, body=body
        )
        self.keys[key] = state
        self.unanswered.add(key)
        return state

    def headers(self, k: KeyState) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.tokens[k.diner]}",
            "Content-Type": "application/json",
            "Idempotency-Key": k.key,
        }

    # one attempt

    async def attempt(self, k: KeyState, *, timeout: float | None = None) -> str:
        """Send ``k`` once: ``"final"``, ``"retry"`` (5xx, 409 in progress, 429, connection
        error, timeout) or ``"impatient"`` (our own short timeout fired)."""
        import httpx

        self.tally.requests += 1
        k.attempts += 1
        k.in_flight += 1
        impatient = timeout is not None
        try:
            r = await self.client.post(
                ORDERS_PATH,
                content=k.body,
                headers=self.headers(k),
                timeout=timeout or self.opts.request_timeout,
            )
        except httpx.TimeoutException as exc:
            if impatient:
                self.tally.impatient_timeouts += 1
            else:
                self.tally.timeouts += 1
            k.history.append(f"timeout:{type(exc).__name__}")
            return "impatient" if impatient else "retry"
        except httpx.TransportError as exc:
            self.tally.transport_errors[type(exc).__name__] += 1
            k.history.append(f"conn:{type(exc).__name__}")
            return "retry"
        finally:
            k.in_flight -= 1
        result = r.headers.get("X-Idempotent-Result", "-")
        self.tally.statuses[str(r.status_code)] += 1
        self.tally.results[result] += 1
        code = ""
        if r.status_code >= 400:
            with suppress(ValueError, AttributeError):
                code = str(r.json().get("code", ""))
            self.tally.codes[f"{r.status_code} {code}"] += 1
        k.history.append(f"{r.status_code} {result} {code}".rstrip())
        if r.status_code >= 500 or r.status_code == 429 or code == IN_PROGRESS_CODE:
            return "retry"
        if code == STOCK_CODE and self.tally.first_stock_out_s is None:
            self.tally.first_stock_out_s = round(time.monotonic() - self.t0, 1)
        order_id = ""
        if 200 <= r.status_code < 300:
            with suppress(ValueError, AttributeError):
                order_id = str(r.json().get("id", ""))
            if order_id:
                k.order_ids.add(order_id)
        signature = (r.status_code, code, order_id)
        k.finals.add(signature)
        if k.final is None:
            k.final = signature
            self.unanswered.discard(k.key)
        return "final"

    async def send(
        self, k: KeyState, stop: asyncio.Event | None, *, impatient: bool = False
    ) -> bool:
        """Attempts with backoff until a final answer; during the load at most
        ``max_attempts`` and not after ``stop``. True when a final answer came."""
        for n in range(10_000):
            timeout = self.rng.uniform(0.02, 0.3) if impatient and n == 0 else None
            outcome = await self.attempt(k, timeout=timeout)
            if outcome == "final":
                return True
            if outcome == "impatient":
                return False  # this client gave up; a later retry (or settling) finishes it
            if stop is not None and (stop.is_set() or n + 1 >= self.opts.max_attempts):
                return False
            if stop is None and time.monotonic() > self._settle_deadline:
                return False
            await asyncio.sleep(min(1.0, 0.05 * 2**n) * self.rng.uniform(0.5, 1.5))
        return False

    async def client_loop(self, index: int, stop: asyncio.Event) -> None:
        while not stop.is_set():
            r = self.rng.random()
            if r < 0.8 or not self.keys:
                k = self.new_key()
                if self.rng.random() < 1 / 8:
                    self.tally.operations["new_concurrent_duplicate"] += 1
                    copies = self.rng.choice((2, 3))
                    self.tally.operations[f"duplicate_copies_{copies}"] += 1
                    done = await asyncio.gather(*(self.send(k, stop) for _ in range(copies)))
                    ok = any(done)
                elif self.rng.random() < 1 / 16:
                    self.tally.operations["new_impatient"] += 1
                    ok = await self.send(k, stop, impatient=True)
                else:
                    self.tally.operations["new"] += 1
                    ok = await self.send(k, stop)
            else:
                if self.unanswered and self.rng.random() < 0.6:
                    k = self.keys[self.rng.choice(sorted(self.unanswered))]
                    self.tally.operations["retry_unanswered"] += 1
                else:
                    k = self.keys[self.rng.choice(list(self.keys))]
                    self.tally.operations["retry_earlier"] += 1
                ok = await self.send(k, stop)
            if not ok:
                self.tally.ops_unfinished_in_load += 1

    async def settle(self, *, probe: bool = False) -> None:
        """Retry every key without a final answer until it gets one (bounded)."""
        self._settle_deadline = time.monotonic() + self.opts.settle_timeout
        pending = [self.keys[key] for key in sorted(self.unanswered)]
        before = self.tally.requests
        if not probe:
            self.tally.settle_keys = len(pending)
        gate = asyncio.Semaphore(8)

        async def one(k: KeyState) -> None:
            async with gate:
                await self.send(k, None)

        await asyncio.gather(*(one(k) for k in pending))
        if not probe:
            self.tally.settle_requests = self.tally.requests - before

    def server_log_size(self) -> int:
        return self.server.log_path.stat().st_size if self.server.log_path.exists() else 0

    async def probe(self) -> None:
        """``--probe`` fresh orders after settling, one attempt each, 4 at a time: any 5xx
        now is not a transient effect of a fault (every fault is over, every worker booted)."""
        gate = asyncio.Semaphore(4)
        before = self.tally.requests

        async def one() -> None:
            async with gate:
                k = self.new_key(prefix="probe")
                self.probe_keys.append(k.key)
                await self.attempt(k)

        await asyncio.gather(*(one() for _ in range(self.opts.probe)))
        self.tally.probe_requests = self.tally.requests - before

    async def replay_sample(self, n: int) -> dict[str, Any]:
        """Replays of acknowledged keys after everything: 201, HIT, the same order id. A 5xx is
        counted (it is a lasting failure now) and retried, up to 10 times, for the real answer."""
        import httpx

        acked = [k for k in self.keys.values() if k.acknowledged]
        sample = self.rng.sample(acked, k=min(n, len(acked)))
        out: Counter[str] = Counter()
        failures = []
        server_errors = 0
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as client:
            for k in sample:
                for attempt in range(10):
                    r = await client.post(ORDERS_PATH, content=k.body, headers=self.headers(k))
                    result = r.headers.get("X-Idempotent-Result", "-")
                    out[f"{r.status_code} {result}"] += 1
                    if r.status_code < 500:
                        break
                    server_errors += 1
                    await asyncio.sleep(0.05 * (attempt + 1))
                order_id = ""
                with suppress(ValueError, AttributeError):
                    order_id = str(r.json().get("id", ""))
                if r.status_code != 201 or result != "HIT" or order_id != k.final[2]:
                    failures.append(f"{k.key}: {r.status_code} {result} id={order_id}")
        return {
            "sent": len(sample),
            "answers": dict(out),
            "server_errors": server_errors,
            "failures": failures,
        }


# --- the faults -------------------------------------------------------------------------------


def worker_children(master: int) -> list[int]:
    """gunicorn's workers: the master's children (``/proc``; ``pgrep -P`` as a fallback)."""
    path = Path(f"/proc/{master}/task/{master}/children")
    with suppress(OSError, ValueError):
        return [int(p) for p in path.read_text().split()]
    proc = subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True)
    return [int(p) for p in proc.stdout.split()]


def wait_workers_ready(server: Any, workers: int, timeout: float = 60.0) -> None:
    """Until the master has ``workers`` children and each logged that it loaded the app."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = set(worker_children(server.process.pid))
        log = server.log_path.read_text(errors="replace")
        ready = {int(p) for p in re.findall(r"Worker ready \(pid: (\d+)\)", log)}
        if len(children) >= workers and children <= ready:
            return
        time.sleep(0.1)
    raise RuntimeError(f"gunicorn workers not all ready after {timeout:.0f} s")


class Chaos:
    def __init__(self, opts: Options, rng: random.Random, master: int, node: Any, pg: Any):
        self.opts = opts
        self.rng = rng
        self.master = master
        self.node = node
        self.pg = pg
        self.faults = Faults()
        self.t0 = 0.0

    def note(self, what: str) -> None:
        self.faults.timeline.append((round(time.monotonic() - self.t0, 2), what))

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(self.kill_workers(stop), self.restart_redis(), self.restart_pg())

    def kill_one(self, why: str = "") -> None:
        pids = worker_children(self.master)
        if not pids:
            return
        pid = self.rng.choice(pids)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            self.faults.kill_misses += 1
        else:
            self.faults.workers_killed += 1
            self.faults.killed_pids.append(pid)
            self.note(f"SIGKILL worker {pid}{why}")

    async def kill_workers(self, stop: asyncio.Event) -> None:
        await asyncio.sleep(min(1.0, self.opts.kill_every / 2))
        while not stop.is_set():
            self.kill_one()
            delay = self.opts.kill_every * self.rng.uniform(0.7, 1.3)
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)

    async def restart_redis(self) -> None:
        await asyncio.sleep(self.opts.duration * self.opts.redis_restart_at)
        self.note("Redis: stop (SIGTERM)")
        await asyncio.to_thread(self.node.stop)
        await asyncio.sleep(self.opts.redis_down)
        await asyncio.to_thread(self.node.start)
        self.faults.redis_restarts += 1
        self.note("Redis: started again (empty)")
        # A worker that starts while Redis is fresh leases its order-ID worker id from an empty
        # store, before the live workers renew theirs (every ORDER_ID_LEASE_SECONDS / 3).
        await asyncio.sleep(0.5)
        self.kill_one(" (just after Redis came back)")

    async def restart_pg(self) -> None:
        await asyncio.sleep(self.opts.duration * self.opts.pg_restart_at)
        self.note("PostgreSQL: pg_ctl stop -m fast")
        await asyncio.to_thread(self.pg.stop, "fast")
        await asyncio.sleep(self.opts.pg_down)
        await asyncio.to_thread(self.pg.start)
        self.faults.postgres_restarts += 1
        self.note("PostgreSQL: started again")


# --- checks -----------------------------------------------------------------------------------


def check_database(
    pg: Any, load: Load, seeded: dict[str, Any], stock_start: dict[int, int]
) -> dict[str, Any]:
    """The invariants, in raw SQL on the private database."""
    import psycopg

    tenant = seeded["tenant"]
    with psycopg.connect(pg.conninfo(DB_NAME)) as conn:
        orders = conn.execute(
            "SELECT id, note, idempotency_key FROM ordering_order WHERE tenant_id = %s",
            (tenant,),
        ).fetchall()
        dup_by_key = conn.execute(
            "SELECT idempotency_key, count(*) FROM ordering_order WHERE tenant_id = %s "
            "GROUP BY idempotency_key HAVING count(*) > 1",
            (tenant,),
        ).fetchall()
        dup_by_note = conn.execute(
            "SELECT note, count(*) FROM ordering_order WHERE tenant_id = %s "
            "GROUP BY note HAVING count(*) > 1",
            (tenant,),
        ).fetchall()
        stock_end = dict(
            conn.execute(
                "SELECT id, stock FROM ordering_dish WHERE tenant_id = %s", (tenant,)
            ).fetchall()
        )
        taken = dict(
            conn.execute(
                "SELECT dish_id, sum(quantity) FROM ordering_orderline WHERE tenant_id = %s "
                "GROUP BY dish_id",
                (tenant,),
            ).fetchall()
        )
        lines: dict[int, list[tuple[int, int]]] = {}
        for order_id, dish_id, quantity in conn.execute(
            "SELECT order_id, dish_id, quantity FROM ordering_orderline WHERE tenant_id = %s",
            (tenant,),
        ).fetchall():
            lines.setdefault(order_id, []).append((dish_id, quantity))
        records = conn.execute(
            "SELECT key, response_status, count(*) FROM idempotency_idempotencyrecord "
            "WHERE tenant_key = %s GROUP BY key, response_status",
            (str(tenant),),
        ).fetchall()
        scopes = [
            r[0]
            for r in conn.execute(
                "SELECT DISTINCT scope FROM idempotency_idempotencyrecord WHERE tenant_key = %s",
                (str(tenant),),
            ).fetchall()
        ]

    by_note: dict[str, list[int]] = {}
    for order_id, note, _ in orders:
        by_note.setdefault(note, []).append(order_id)
    acked = {k.key: k for k in load.keys.values() if k.acknowledged}
    acked_missing = [key for key in acked if key not in by_note]
    acked_id_mismatch = [
        key
        for key, k in acked.items()
        if key in by_note
        and (len(k.order_ids) != 1 or {str(i) for i in by_note[key]} != k.order_ids)
    ]
    phantom = [note for note in by_note if note not in acked]
    lines_mismatch = [
        note
        for note, ids in by_note.items()
        if note in load.keys
        for order_id in ids
        if sorted(lines.get(order_id, [])) != sorted(load.keys[note].items)
    ]
    negative = {d: s for d, s in stock_end.items() if s < 0}
    stock_rows = []
    stock_mismatch = 0
    for dish, start in sorted(stock_start.items()):
        end = stock_end.get(dish, 0)
        ordered = int(taken.get(dish, 0))
        if start - end != ordered:
            stock_mismatch += 1
        stock_rows.append({"dish": dish, "start": start, "end": end, "ordered": ordered})
    client_ordered: Counter[int] = Counter()
    for k in acked.values():
        for dish, quantity in k.items:
            client_ordered[dish] += quantity
    from idempotency.core.keys import key_digest

    # records keep each key's digest, never the key: read them back as the keys sent
    sent = {key_digest(k.key): k.key for k in load.keys.values()}
    record_keys = Counter(
        sent.get(digest, digest) for digest, _status, n in records for _ in range(n)
    )
    records_201 = sum(n for _key, status, n in records if status == 201)
    keys_final = {k.key for k in load.keys.values() if k.final is not None}
    return {
        "orders": len(orders),
        "keys_with_an_order": len(by_note),
        "acknowledged_keys": len(acked),
        "acknowledged_missing": acked_missing,
        "acknowledged_id_mismatch": acked_id_mismatch,
        "duplicate_orders_by_idempotency_key": [(k, n) for k, n in dup_by_key],
        "duplicate_orders_by_note": [(k, n) for k, n in dup_by_note],
        "phantom_orders": phantom,
        "order_lines_not_as_requested": lines_mismatch,
        "negative_stock": negative,
        "stock": stock_rows,
        "stock_mismatch": stock_mismatch,
        "stock_taken_vs_client_acknowledged": {
            "db": sum(int(v) for v in taken.values()),
            "clients": sum(client_ordered.values()),
        },
        "records": sum(record_keys.values()),
        "records_201": records_201,
        "keys_with_two_records": [k for k, n in record_keys.items() if n > 1],
        "final_keys_without_record": sorted(keys_final - set(record_keys)),
        "records_without_final_answer": sorted(set(record_keys) - keys_final),
        "scopes": scopes,
    }


def redis_states(node: Any, load: Load, pg: Any, seeded: dict[str, Any]) -> dict[str, Any]:
    """Every key's Redis entry: absent, finished (d) or in progress (p, with its TTL); and every
    idempotency hash of the tenant, whatever key it belongs to."""
    import psycopg

    from idempotency.core.keys import redis_key_for

    tenant = str(seeded["tenant"])
    with psycopg.connect(pg.conninfo(DB_NAME)) as conn:
        scope_of = dict(
            conn.execute(
                "SELECT DISTINCT ON (scope) split_part(split_part(scope, '|', 1), 'diner:', 2), "
                "scope FROM idempotency_idempotencyrecord WHERE tenant_key = %s",
                (tenant,),
            ).fetchall()
        )
    client = node.client()
    try:
        per_key: Counter[str] = Counter()
        in_progress: list[dict[str, Any]] = []
        unknown_scope = 0
        for k in load.keys.values():
            scope = scope_of.get(k.diner)
            if scope is None:
                unknown_scope += 1
                continue
            rkey = redis_key_for(tenant=tenant, scope=scope, key=k.key)
            st = client.hget(rkey, "st")
            state = "absent" if st is None else f"st={st.decode()}"
            per_key[state] += 1
            if state == "st=p":
                in_progress.append({"key": k.key, "pttl_ms": client.pttl(rkey)})
        all_entries: Counter[str] = Counter()
        no_ttl_in_progress = 0
        for rkey in client.scan_iter(match=f"idem:{{t:{tenant}}}:*", count=1000):
            if client.type(rkey) != b"hash":
                all_entries["other"] += 1
                continue
            st = client.hget(rkey, "st")
            all_entries[f"st={st.decode()}" if st else "no st"] += 1
            if st == b"p" and client.pttl(rkey) < 0:
                no_ttl_in_progress += 1
    finally:
        client.close()
    return {
        "per_key": dict(per_key),
        "keys_not_mapped": unknown_scope,
        "in_progress": in_progress[:20],
        "all_tenant_entries": dict(all_entries),
        "in_progress_without_ttl": no_ttl_in_progress,
    }


_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Lost|Unavailable|Backwards))\b")


def log_errors(text: str) -> Counter[str]:
    """ERROR lines of the servers' JSON log, by logger, message and exception class."""
    errors: Counter[str] = Counter()
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("level") not in ("ERROR", "CRITICAL"):
            continue
        exc = ""
        for exc_line in reversed(str(entry.get("exc", "")).splitlines()):
            m = _EXCEPTION_LINE.match(exc_line)
            if m:
                exc = m.group(1).rsplit(".", 1)[-1]
                break
        msg = str(entry.get("msg", ""))
        msg = re.sub(r"\d+", "N", msg.split(":", 1)[0] if exc else msg)[:80]
        errors[f"{entry.get('logger')}: {msg}" + (f" [{exc}]" if exc else "")] += 1
    return errors


def worker_lease_lines(log: str) -> list[str]:
    """The order-ID worker-id lease events (leased by, taken over...), oldest first."""
    out = []
    for line in log.splitlines():
        if '"ordering.worker_ids"' not in line:
            continue
        with suppress(ValueError):
            entry = json.loads(line)
            out.append(f"{entry.get('ts', '')[11:23]} {entry.get('level')} {entry.get('msg')}")
    return out[:200]


def server_log_facts(server: Any, load: Load) -> dict[str, Any]:
    """What gunicorn's logs say: workers that answered, worker deaths, errors by kind; and which
    worker answered each probe (fresh orders after settling), with the errors logged since."""
    log = server.log_path.read_text(errors="replace") if server.log_path.exists() else ""
    entries = server.access_log()
    probe = set(load.probe_keys)
    first: dict[str, Any] = {}
    for e in entries:
        if e.key in probe and e.key not in first:
            first[e.key] = e
    probe_by_pid: dict[int, Counter[str]] = {}
    for e in first.values():
        probe_by_pid.setdefault(e.pid, Counter())[str(e.status)] += 1
    raw = server.log_path.read_bytes() if server.log_path.exists() else b""
    probe_errors = log_errors(raw[load.probe_log_offset :].decode(errors="replace"))
    return {
        "workers_that_answered": len({e.pid for e in entries}),
        "answers_logged": len(entries),
        "answers_by_worker": dict(Counter(e.pid for e in entries).most_common()),
        "worker_sigkills_logged": len(re.findall(r"was sent SIGKILL", log)),
        "workers_booted": len(re.findall(r"Booting worker", log)),
        "worker_timeouts": log.count("WORKER TIMEOUT"),
        # a worker whose order-ID worker id another process took refuses every order after
        "order_id_leases_taken_over": log.count("was taken over by another owner"),
        "errors": dict(log_errors(log).most_common(15)),
        "probe_by_worker": {pid: dict(c) for pid, c in probe_by_pid.items()},
        "probe_errors": dict(probe_errors.most_common(10)),
        "order_id_worker_leases": worker_lease_lines(log),
        "probe_5xx": sum(
            n for c in probe_by_pid.values() for status, n in c.items() if int(status) >= 500
        ),
    }


def build_report(
    *,
    opts: Options,
    load: Load,
    chaos: Chaos,
    db: dict[str, Any],
    redis_at_settle: dict[str, Any],
    redis_after_lease: dict[str, Any],
    replays: dict[str, Any],
    logs: dict[str, Any],
    timings: dict[str, float],
    workers_alive_at_end: int,
) -> dict[str, Any]:
    tally = load.tally
    unsettled = [k for k in load.keys.values() if k.final is None]
    inconsistent = [k for k in load.keys.values() if len(k.finals) > 1]
    key_reused = tally.codes.get(f"422 {KEY_REUSED_CODE}", 0)
    orders_vs_acked = abs(db["orders"] - db["acknowledged_keys"])
    violations = {
        "acknowledged orders missing": len(db["acknowledged_missing"]),
        "acknowledged order id differs from the stored one": len(db["acknowledged_id_mismatch"]),
        "keys with two orders (idempotency_key)": len(db["duplicate_orders_by_idempotency_key"]),
        "keys with two orders (note)": len(db["duplicate_orders_by_note"]),
        "phantom orders (key never acknowledged)": len(db["phantom_orders"]),
        "|orders - acknowledged keys|": orders_vs_acked,
        "dishes with negative stock": len(db["negative_stock"]),
        "dishes where stock taken != portions ordered": db["stock_mismatch"],
        "orders whose lines differ from the request": len(db["order_lines_not_as_requested"]),
        "keys without a final answer after settling": len(unsettled),
        "keys with two different final answers": len(inconsistent),
        "422 IDEMPOTENCY_KEY_REUSED (payloads never change)": key_reused,
        "keys with two idempotency records": len(db["keys_with_two_records"]),
        "final answers without an idempotency record": len(db["final_keys_without_record"]),
        "idempotency records without a final answer": len(db["records_without_final_answer"]),
        "201 records != orders": abs(db["records_201"] - db["orders"]),
        "Redis st=p left after the lease": redis_after_lease["per_key"].get("st=p", 0)
        + redis_after_lease["all_tenant_entries"].get("st=p", 0),
        "Redis st=p without a TTL": redis_after_lease["in_progress_without_ttl"],
        "wrong replays after settling (not 201 HIT with the acknowledged id)": len(
            replays["failures"]
        ),
        "5xx after settling (fresh orders + replays: a lasting failure)": logs["probe_5xx"]
        + replays["server_errors"],
        "faults not done (Redis restart, PostgreSQL restart, >= 1 kill)": int(
            chaos.faults.redis_restarts != 1
            or chaos.faults.postgres_restarts != 1
            or chaos.faults.workers_killed < 1
        ),
    }
    evidence = {
        "acknowledged_missing": db["acknowledged_missing"][:20],
        "acknowledged_id_mismatch": [
            {"key": key, "client": sorted(load.keys[key].order_ids)}
            for key in db["acknowledged_id_mismatch"][:20]
        ],
        "duplicates": (db["duplicate_orders_by_idempotency_key"] + db["duplicate_orders_by_note"])[
            :20
        ],
        "phantom_orders": [
            {"key": key, "history": load.keys[key].history if key in load.keys else None}
            for key in db["phantom_orders"][:20]
        ],
        "unsettled": [{"key": k.key, "history": k.history[-8:]} for k in unsettled[:20]],
        "inconsistent": [
            {"key": k.key, "finals": sorted(k.finals), "history": k.history}
            for k in inconsistent[:20]
        ],
        "replay_failures": replays["failures"][:20],
        "lasting_5xx": (
            {
                "fresh_orders_by_worker": logs["probe_by_worker"],
                "replay_5xx": replays["server_errors"],
                "errors_logged_after_settling": logs["probe_errors"],
                "order_id_worker_leases": logs["order_id_worker_leases"],
            }
            if logs["probe_5xx"] or replays["server_errors"]
            else None
        ),
        "redis_in_progress_after_lease": redis_after_lease["in_progress"],
    }
    keys = load.keys.values()
    finals = Counter(f"{k.final[0]} {k.final[1]}".rstrip() for k in keys if k.final)
    return {
        "ok": not any(violations.values()),
        "violations": violations,
        "evidence": {k: v for k, v in evidence.items() if v},
        "load": {
            "clients": opts.clients,
            "duration_s": opts.duration,
            "operations": dict(tally.operations),
            "keys": len(load.keys),
            "requests_sent": tally.requests,
            "requests_in_settle": tally.settle_requests,
            "probe_requests": tally.probe_requests,
            "first_stock_refusal_s": tally.first_stock_out_s,
            "keys_settled_after_load": tally.settle_keys,
            "operations_unfinished_during_load": tally.ops_unfinished_in_load,
            "answers_by_status": dict(sorted(tally.statuses.items())),
            "answers_by_result": dict(tally.results),
            "answers_by_code": dict(tally.codes),
            "connection_errors": tally.connection_errors,
            "connection_errors_by_kind": dict(tally.transport_errors),
            "timeouts": tally.timeouts,
            "impatient_timeouts": tally.impatient_timeouts,
            "keys_retried": sum(1 for k in keys if k.attempts > 1),
            "keys_acknowledged": sum(1 for k in keys if k.acknowledged),
            "keys_final_by_answer": dict(finals),
        },
        "faults": {
            "workers_killed": chaos.faults.workers_killed,
            "kill_misses": chaos.faults.kill_misses,
            "redis_restarts": chaos.faults.redis_restarts,
            "postgres_restarts": chaos.faults.postgres_restarts,
            "workers_alive_at_end": workers_alive_at_end,
            "timeline": chaos.faults.timeline,
        },
        "database": {
            "orders": db["orders"],
            "acknowledged_keys": db["acknowledged_keys"],
            "idempotency_records": db["records"],
            "records_201": db["records_201"],
            "stock": db["stock"],
            "stock_taken_vs_client_acknowledged": db["stock_taken_vs_client_acknowledged"],
        },
        "redis": {
            "at_settle": {k: v for k, v in redis_at_settle.items() if k != "in_progress"},
            "after_lease": {k: v for k, v in redis_after_lease.items() if k != "in_progress"},
        },
        "replays_after_settle": {k: v for k, v in replays.items() if k != "failures"},
        "server_logs": logs,
        "timings": timings,
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
    }


# --- output -----------------------------------------------------------------------------------


def format_report(report: dict[str, Any]) -> str:
    load, faults, db, redis_, logs = (
        report["load"],
        report["faults"],
        report["database"],
        report["redis"],
        report["server_logs"],
    )
    t = report["timings"]
    lines = [
        "",
        f"chaos run: {load['clients']} clients, {load['duration_s']:g} s of load "
        f"(setup {t['setup_s']} s, load {t['load_s']} s, settle {t['settle_s']} s, "
        f"total {t['total_s']} s)",
        "",
        f"requests sent            {load['requests_sent']}  (of which {load['requests_in_settle']}"
        f" while settling {load['keys_settled_after_load']} keys)",
        f"keys (operations)        {load['keys']} keys; ops {load['operations']}",
        f"answers by status        {load['answers_by_status']}",
        f"answers by result        {load['answers_by_result']}",
        f"error answers by code    {load['answers_by_code']}",
        f"connection errors        {load['connection_errors']} {load['connection_errors_by_kind']}",
        f"timeouts                 {load['timeouts']} (+ {load['impatient_timeouts']} impatient "
        "first attempts that gave up on purpose)",
        f"keys retried             {load['keys_retried']}",
        f"final answers per key    {load['keys_final_by_answer']}",
        f"first stock refusal      {load['first_stock_refusal_s']} s into the load",
        f"workers killed           {faults['workers_killed']} (alive at the end: "
        f"{faults['workers_alive_at_end']})",
        f"restarts                 Redis {faults['redis_restarts']}, PostgreSQL "
        f"{faults['postgres_restarts']}",
        f"orders in the database   {db['orders']} (acknowledged keys {db['acknowledged_keys']}, "
        f"idempotency records {db['idempotency_records']}, of which 201: {db['records_201']})",
        "stock (start/end/ordered) "
        + ", ".join(
            f"dish {s['dish']}: {s['start']}/{s['end']}/{s['ordered']}" for s in db["stock"]
        ),
        f"Redis entries at settle  {redis_['at_settle']['per_key']}",
        f"Redis after the lease    {redis_['after_lease']['per_key']} (all tenant hashes: "
        f"{redis_['after_lease']['all_tenant_entries']})",
        f"replays after settling   {report['replays_after_settle']}",
        f"fresh orders after settling (probe) {load['probe_requests']}: by worker "
        f"{logs['probe_by_worker']}",
        f"workers                  booted {logs['workers_booted']}, answered "
        f"{logs['workers_that_answered']}, SIGKILLs logged {logs['worker_sigkills_logged']}, "
        f"timeouts {logs['worker_timeouts']}, order-ID worker ids taken over from a live "
        f"worker {logs['order_id_leases_taken_over']}",
        "errors logged by the servers:",
        *(f"  {n:>5}  {what}" for what, n in logs["errors"].items()),
        "",
        "invariants (each must be 0):",
    ]
    for name, value in report["violations"].items():
        lines.append(f"  {'ok  ' if not value else 'FAIL'} {value:>5}  {name}")
    lines.append("")
    lines.append("RESULT: " + ("OK" if report["ok"] else "INVARIANTS VIOLATED"))
    if report.get("evidence"):
        lines.append("evidence: " + json.dumps(report["evidence"], indent=1)[:6000])
    if report.get("log_dir"):
        lines.append(f"logs: {report['log_dir']}")
    return "\n".join(lines)


# --- Django side (child process) --------------------------------------------------------------


def _seed_main() -> None:
    """Seed one tenant with finite-stock dishes and a diner-app API key (DATABASE_URL's DB)."""
    import django

    django.setup()
    from decimal import Decimal

    from django.db import transaction

    from ordering.models import Dish
    from tenants.api_keys import issue_api_key
    from tenants.diner_sessions import open_session
    from tenants.models import ApiClient, Tenant

    payload = json.loads(sys.stdin.read() or "{}")
    with transaction.atomic():
        tenant = Tenant.objects.create(slug=f"chaos-{payload['run']}", name="Chaos Kitchen")
        dishes = [
            Dish.objects.for_tenant(tenant).create(
                tenant=tenant,
                name=f"Dish {i + 1}",
                price=Decimal("7.50") + i,
                stock=payload["stock"],
            )
            for i in range(payload["dishes"])
        ]
        probe = Dish.objects.for_tenant(tenant).create(
            tenant=tenant, name="Probe dish", price=Decimal("1.00"), stock=PROBE_STOCK
        )
        # Diners act through sessions, signed in by the restaurant's backend key.
        backend, _ = issue_api_key(tenant=tenant, name="chaos", kind=ApiClient.Kind.MERCHANT)
        tokens = {
            f"d{i}": open_session(client=backend, diner_id=f"d{i}").token
            for i in range(payload["diners"])
        }
    print(
        json.dumps(
            {
                "tenant": tenant.pk,
                "tokens": tokens,
                "dishes": [d.pk for d in dishes],
                "probe_dish": probe.pk,
                "stock": {str(d.pk): d.stock for d in [*dishes, probe]},
            }
        )
    )


# --- command line -----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> tuple[Options, Path | None]:
    d = Options()
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=d.duration, help="seconds of load")
    p.add_argument(
        "--min-requests", type=int, default=d.min_requests, help="load on until this many sent"
    )
    p.add_argument("--clients", type=int, default=d.clients)
    p.add_argument("--workers", type=int, default=d.workers)
    p.add_argument("--dishes", type=int, default=d.dishes)
    p.add_argument("--stock", type=int, default=d.stock, help="portions per dish")
    p.add_argument("--kill-every", type=float, default=d.kill_every)
    p.add_argument("--redis-restart-at", type=float, default=d.redis_restart_at)
    p.add_argument("--redis-down", type=float, default=d.redis_down)
    p.add_argument("--pg-restart-at", type=float, default=d.pg_restart_at)
    p.add_argument("--pg-down", type=float, default=d.pg_down)
    p.add_argument("--lease-ms", type=int, default=d.lease_ms)
    p.add_argument("--settle-timeout", type=float, default=d.settle_timeout)
    p.add_argument("--replay-sample", type=int, default=d.replay_sample)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--log-dir", type=Path, default=None, help="keep the servers' logs here")
    p.add_argument("--json", type=Path, default=None, help="write the report as JSON")
    a = p.parse_args(argv)
    opts = Options(
        duration=a.duration,
        min_requests=a.min_requests,
        clients=a.clients,
        workers=a.workers,
        dishes=a.dishes,
        stock=a.stock,
        kill_every=a.kill_every,
        redis_restart_at=a.redis_restart_at,
        redis_down=a.redis_down,
        pg_restart_at=a.pg_restart_at,
        pg_down=a.pg_down,
        lease_ms=a.lease_ms,
        settle_timeout=a.settle_timeout,
        replay_sample=a.replay_sample,
        seed=a.seed,
        log_dir=a.log_dir,
    )
    return opts, a.json


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_seed"]:
        _seed_main()
        return 0
    opts, json_path = parse_args(argv)
    report = run(opts)
    print(format_report(report), flush=True)
    if json_path:
        json_path.write_text(json.dumps(report, indent=2, default=str))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
