// The client's handling of answers that a live server does not give on demand, with a fake
// fetch: an answer no longer kept, a login page in place of a session, a request that never
// answers, a deployment hiding X-Idempotent-Result; and the default lifetime of a stored key.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ApiError,
  memoryStorage,
  NetworkError,
  OrderAlreadyPlacedError,
  OrderingClient,
  type ClientOptions,
  RetriesExhaustedError,
  requestId,
} from "../src/index.js";

const HOUR = 3_600_000;
const ORDER = { items: [{ dish_id: 1, quantity: 1 }], payment_method: "card" as const };
const SESSION = { token: "t", diner_id: "guest_1", expires_at: "2999-01-01T00:00:00Z" };
const entryOf = (name: string) => `ordering-client:pk_test:${name}`;

/** A server of one guest session whose order endpoint answers `orders` (one per request, the
 * last repeated); notes every order request's key. */
function fakeApi(orders: (() => Response)[], options: Partial<ClientOptions> = {}) {
  const keys: (string | null)[] = [];
  const fakeFetch: typeof fetch = async (input, init) => {
    if (new URL(String(input)).pathname === "/api/v1/diner-sessions/") {
      return new Response(JSON.stringify(SESSION), { status: 201 });
    }
    keys.push(new Headers(init?.headers).get("idempotency-key"));
    return orders[Math.min(keys.length, orders.length) - 1]!();
  };
  const client = new OrderingClient({
    baseUrl: "http://api.test",
    publishableKey: "pk_test.secret",
    fetch: fakeFetch,
    retry: { baseDelayMs: 10, maxDelayMs: 50 },
    ...options,
  });
  return { client, keys };
}

const placed = () => new Response(JSON.stringify({ id: "1" }), { status: 201, headers: { "X-Idempotent-Result": "MISS" } });

test("a stored key is resumed for 72 hours by default, the server's replay retention", async () => {
  const storage = memoryStorage();
  const { client, keys } = fakeApi([placed], { storage });
  const entry = entryOf("op:cart-1");
  const stored = (key: string, ageMs: number) => JSON.stringify({ key, createdAt: Date.now() - ageMs, dinerId: "guest_1" });

  storage.setItem(entry, stored("from-71h-ago", 71 * HOUR));
  await client.placeOrder(ORDER, { operationId: "cart-1" });
  storage.setItem(entry, stored("from-73h-ago", 73 * HOUR));
  await client.placeOrder(ORDER, { operationId: "cart-1" });

  assert.equal(keys[0], "from-71h-ago");
  assert.ok(keys[1] && keys[1] !== "from-73h-ago");
});

test("409 ORDER_ALREADY_PLACED is an OrderAlreadyPlacedError naming the order", async () => {
  const problem = { code: "ORDER_ALREADY_PLACED", detail: "This Idempotency-Key already placed order 7", status: 409, order_id: "7" };
  const alreadyPlaced = () =>
    new Response(JSON.stringify(problem), {
      status: 409,
      headers: { "Content-Type": "application/problem+json", Location: "/api/v1/orders/7/" },
    });
  const storage = memoryStorage();
  const { client, keys } = fakeApi([alreadyPlaced], { storage });

  const error = await client.placeOrder(ORDER, { operationId: "cart-7" }).catch((e: unknown) => e);
  const again = await client.placeOrder(ORDER, { operationId: "cart-7" }).catch((e: unknown) => e);
  const byRequest = await client.placeOrder(ORDER).catch((e: unknown) => e);

  assert.ok(error instanceof OrderAlreadyPlacedError && error instanceof ApiError, String(error));
  assert.deepEqual([error.status, error.code, error.orderId], [409, "ORDER_ALREADY_PLACED", "7"]);
  assert.equal(error.headers.get("location"), "/api/v1/orders/7/");
  assert.ok(again instanceof OrderAlreadyPlacedError);
  assert.equal(keys.length, 3); // never retried
  assert.equal(keys[1], keys[0]); // the operation's key kept, as after a success
  assert.ok(byRequest instanceof OrderAlreadyPlacedError);
  assert.equal(storage.getItem(entryOf(`op:${requestId("POST", "/api/v1/orders/", ORDER)}`)), null);
});

test("a login page in place of a new guest session is retried like any page not the API's", async () => {
  let opened = 0;
  const errors: unknown[] = [];
  const fakeFetch: typeof fetch = async () =>
    ++opened === 1
      ? new Response("<html>Sign in to the cafe's wifi</html>", { status: 200, headers: { "Content-Type": "text/html" } })
      : new Response(JSON.stringify(SESSION), { status: 201 });
  const client = new OrderingClient({
    baseUrl: "http://api.test",
    publishableKey: "pk_test.secret",
    fetch: fakeFetch,
    retry: { baseDelayMs: 10, maxDelayMs: 50 },
    onRetry: (event) => void errors.push(event.error),
  });

  const session = await client.session();

  assert.equal(session.dinerId, "guest_1");
  assert.equal(opened, 2);
  assert.ok(errors[0] instanceof NetworkError && errors[0].message.includes("not the API's"), String(errors[0]));
});

test("no attempt runs past maxElapsedMs: the last one's timeout is cut to the time left", async () => {
  const never: typeof fetch = (_input, init) =>
    new Promise((_resolve, reject) => init?.signal?.addEventListener("abort", () => reject(new Error("aborted"))));
  const client = new OrderingClient({
    baseUrl: "http://api.test",
    publishableKey: "pk_test.secret",
    fetch: never,
    timeoutMs: 10_000,
    retry: { maxAttempts: 100, baseDelayMs: 10, maxDelayMs: 10, maxElapsedMs: 500 },
  });
  const started = Date.now();

  const gaveUp = await client.menu().catch((e: unknown) => e);

  const elapsedMs = Date.now() - started;
  assert.ok(gaveUp instanceof RetriesExhaustedError, String(gaveUp));
  assert.ok(gaveUp.lastError instanceof NetworkError && gaveUp.lastError.message.includes("timed out"));
  assert.ok(elapsedMs >= 450 && elapsedMs < 800, `${elapsedMs} ms`);
});

test("a deployment that hides X-Idempotent-Result (CORS without exposing it) never succeeds", async () => {
  const hidden = () => new Response(JSON.stringify({ id: "1" }), { status: 201 });
  const { client, keys } = fakeApi([hidden], { retry: { maxAttempts: 3, baseDelayMs: 10 } });

  const failed = await client.placeOrder(ORDER).catch((e: unknown) => e);

  assert.ok(failed instanceof RetriesExhaustedError && failed.lastError.message.includes("X-Idempotent-Result"));
  assert.equal(keys.length, 3);
});
