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
