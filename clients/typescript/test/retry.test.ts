// Backoff, Retry-After and key making, without a server.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";

import {
  defaultRetryPolicy,
  NetworkError,
  OrderingClient,
  parseRetryAfter,
  randomUuid,
  RetriesExhaustedError,
  retryDelayMs,
} from "../src/index.js";

const cases: [string, number, number, number | null, number][] = [
  ["first retry's cap", 1, 1, null, 500],
  ["doubles", 4, 1, null, 4000],
  ["capped", 20, 1, null, 30_000],
  ["jittered", 3, 0.25, null, 500],
  ["Retry-After is a floor", 1, 0, 7000, 7000],
];
for (const [name, retry, random, retryAfterMs, expected] of cases) {
  test(`backoff: ${name}`, () => {
    assert.equal(retryDelayMs(defaultRetryPolicy, retry, retryAfterMs, () => random), expected);
  });
}

test("Retry-After is read as seconds or an HTTP date", () => {
  const now = Date.parse("2026-01-01T12:00:00Z");
  assert.equal(parseRetryAfter("3", now), 3000);
  assert.equal(parseRetryAfter("Thu, 01 Jan 2026 12:00:05 GMT", now), 5000);
  assert.equal(parseRetryAfter("soon", now), null);
  assert.equal(parseRetryAfter(null, now), null);
});

test("Retry-After in every HTTP date form is GMT, wherever the device is", () => {
  // Red when the asctime form (no zone) is read in the device's time zone: 8 h in Los Angeles,
  // so the client gave up at once; nothing to wait in Tokyo.
  const now = Date.parse("2026-01-01T12:00:00Z");
  const zone = process.env.TZ;
  try {
    for (const tz of ["UTC", "America/Los_Angeles", "Asia/Tokyo"]) {
      process.env.TZ = tz;
      assert.equal(parseRetryAfter("Thu, 01 Jan 2026 12:00:05 GMT", now), 5000, tz);
      assert.equal(parseRetryAfter("Thursday, 01-Jan-26 12:00:05 GMT", now), 5000, tz);
      assert.equal(parseRetryAfter("Thu Jan  1 12:00:05 2026", now), 5000, tz);
    }
  } finally {
    if (zone === undefined) delete process.env.TZ;
    else process.env.TZ = zone;
  }
});

test("UUID v4 keys without crypto.randomUUID", () => {
  const crypto = globalThis.crypto;
  const v4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
  try {
    Object.defineProperty(globalThis, "crypto", { value: { getRandomValues: crypto.getRandomValues.bind(crypto) }, configurable: true });
    assert.match(randomUuid(), v4);
    Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });
    const keys = new Set(Array.from({ length: 100 }, () => randomUuid()));
    assert.equal(keys.size, 100);
    for (const key of keys) assert.match(key, v4);
  } finally {
    Object.defineProperty(globalThis, "crypto", { value: crypto, configurable: true });
  }
});

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

test("retries are bounded by attempts and by total time", async () => {
  const baseUrl = `http://127.0.0.1:${await closedPort()}`;
  const bounded = new OrderingClient({ baseUrl, publishableKey: "k.s", retry: { maxAttempts: 3, baseDelayMs: 10 } });
  const exhausted = await bounded.menu().catch((e: unknown) => e);
  assert.ok(exhausted instanceof RetriesExhaustedError);
  assert.equal(exhausted.attempts, 3);
  assert.ok(exhausted.lastError instanceof NetworkError);

  const impatient = new OrderingClient({
    baseUrl,
    publishableKey: "k.s",
    retry: { maxAttempts: 100, baseDelayMs: 10_000, maxElapsedMs: 1000 },
  });
  const gaveUp = await impatient.menu().catch((e: unknown) => e);
  assert.ok(gaveUp instanceof RetriesExhaustedError && gaveUp.attempts < 100);
});

test("a retry option given as undefined keeps its default", async () => {
  // given an app whose settings lack the retry values it passes on, as its type allows
  // (Partial<RetryPolicy>), and a server down with 503
  const settings: { maxAttempts?: number; baseDelayMs?: number } = {};
  let requests = 0;
  const delays: number[] = [];
  const client = new OrderingClient({
    baseUrl: "http://api.test",
    publishableKey: "k.s",
    fetch: async () => (requests++, new Response("{}", { status: 503 })),
    retry: { maxAttempts: settings.maxAttempts, baseDelayMs: settings.baseDelayMs, maxDelayMs: 20, maxElapsedMs: 2000 },
    onRetry: (event) => void delays.push(event.delayMs),
  });

  const exhausted = await client.menu().catch((e: unknown) => e);

  // then the defaults hold: 5 attempts, each wait a number (red when undefined replaced them:
  // no bound on attempts and every wait NaN, so about 900 requests in the 2 s, back to back)
  assert.ok(exhausted instanceof RetriesExhaustedError);
  assert.equal(requests, defaultRetryPolicy.maxAttempts);
  assert.ok(delays.every(Number.isFinite), String(delays));
});

test("a success page not from the API is an unknown outcome, retried with the same key", async () => {
  const orderKeys: (string | null)[] = [];
  const fakeFetch: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    if (url.pathname === "/api/v1/diner-sessions/") {
      const session = { token: "t", diner_id: "guest_1", expires_at: "2999-01-01T00:00:00Z" };
      return new Response(JSON.stringify(session), { status: 201 });
    }
    orderKeys.push(new Headers(init?.headers).get("idempotency-key"));
    if (orderKeys.length === 1) {
      return new Response("<html>Sign in to the cafe's wifi</html>", { status: 200, headers: { "Content-Type": "text/html" } });
    }
    return new Response(JSON.stringify({ id: "1" }), { status: 201, headers: { "X-Idempotent-Result": "MISS" } });
  };
  const errors: unknown[] = [];
  const client = new OrderingClient({
    baseUrl: "http://api.test",
    publishableKey: "pk_test.secret",
    fetch: fakeFetch,
    retry: { baseDelayMs: 10, maxDelayMs: 50 },
    onRetry: (event) => void errors.push(event.error),
  });
  const placed = await client.placeOrder({ items: [{ dish_id: 1, quantity: 1 }], payment_method: "card" });
  assert.deepEqual([placed.status, placed.data], [201, { id: "1" }]);
  assert.equal(orderKeys.length, 2);
  assert.ok(orderKeys[0] && orderKeys[0] === orderKeys[1]);
  assert.ok(errors[0] instanceof NetworkError && errors[0].message.includes("not the API's"));
});

test("a Retry-After date is counted from the answer's Date, whatever the device's clock says", async () => {
  // given a proxy answering 503 "come back in a second" as an HTTP date, on a server clock an
  // hour behind or ahead of the device's (or, without a Date, on the device's own)
  const HOUR = 3_600_000;
  const unavailable = (serverNow: number, withDate = true) =>
    new Response("{}", {
      status: 503,
      headers: {
        "Retry-After": new Date(serverNow + 1000).toUTCString(),
        ...(withDate ? { Date: new Date(serverNow).toUTCString() } : {}),
      },
    });
  const menuAfter = async (first: () => Response) => {
    let calls = 0;
    const waited: (number | null)[] = [];
    const client = new OrderingClient({
      baseUrl: "http://api.test",
      publishableKey: "pk_test.secret",
      fetch: async () => (++calls === 1 ? first() : new Response("[]", { status: 200 })),
      retry: { baseDelayMs: 10, maxDelayMs: 50 },
      onRetry: (event) => void waited.push(event.retryAfterMs),
    });
    const outcome = await client.menu().then((dishes) => dishes.length, (e: unknown) => e);
    return { outcome, waited };
  };

  // when the menu is read through it
  const deviceAhead = await menuAfter(() => unavailable(Date.now() - HOUR));
  const deviceBehind = await menuAfter(() => unavailable(Date.now() + HOUR));
  const undated = await menuAfter(() => unavailable(Date.now() + HOUR, false));

  // then the wait is the second the server meant (red: none at all on a device clock an hour
  // ahead, and a device clock an hour behind gave up at once, as a wait past maxElapsedMs)
  assert.deepEqual(deviceAhead, { outcome: 0, waited: [1000] });
  assert.deepEqual(deviceBehind, { outcome: 0, waited: [1000] });
  // without a Date, the device's clock: an hour away, past maxElapsedMs, so no wait is started
  assert.ok(undated.outcome instanceof RetriesExhaustedError && undated.outcome.attempts === 1, String(undated.outcome));
  assert.deepEqual(undated.waited, []);
});

test("the time retries may take is measured on a clock the device's clock corrections do not move", async () => {
  // given a server answering 503 twice, and a phone whose clock is set an hour forward (a
  // network time correction) while the first wait runs
  const wallClock = Date.now;
  let attempts = 0;
  const client = new OrderingClient({
    baseUrl: "http://api.test",
    publishableKey: "k.s",
    fetch: async () => {
      attempts++;
      if (attempts === 1) {
        const setForward = wallClock() + 3_600_000 - Date.now();
        Date.now = () => wallClock() + setForward;
      }
      return attempts < 3
        ? new Response("{}", { status: 503 })
        : new Response(JSON.stringify([]), { status: 200, headers: { "Content-Type": "application/json" } });
    },
    retry: { maxAttempts: 5, baseDelayMs: 10, maxDelayMs: 20, maxElapsedMs: 2000 },
  });
  try {
    // then the third attempt is made and answers (red on the wall clock: the hour counted as
    // time spent retrying, and the client gave up after the first attempt)
    const answer = await client.menu();
    assert.equal(attempts, 3);
    assert.deepEqual(answer, []);
  } finally {
    Date.now = wallClock;
  }
});
