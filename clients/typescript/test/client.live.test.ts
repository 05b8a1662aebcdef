// The TypeScript client against a live gunicorn, with real failures injected: answers lost after
// the server committed, a request still running, a full rate-limit window. Run by
// tests/clients/test_typescript_client.py, which starts the server, the proxy and the control
// endpoint and passes their addresses in the environment.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";

import {
  ApiError,
  IdempotencyKeyReusedError,
  memoryStorage,
  NetworkError,
  OrderingClient,
  requestId,
  RetriesExhaustedError,
  type Session,
  SessionChangedError,
  sessionFromAnswer,
  type ClientOptions,
  type PlaceOrderInput,
  type RetryEvent,
  tokenKeys,
} from "../src/index.js";
import { control, type Dropped, fileAsyncStorage, live, orderBody, recordingFetch } from "./support.js";

const ORDERS = "/api/v1/orders/";
const sleepMs = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const FAST = { baseDelayMs: 50, maxDelayMs: 500 };

function clientOf(baseUrl: string, options: Partial<ClientOptions> = {}) {
  const wire = recordingFetch();
  const client = new OrderingClient({
    baseUrl,
    publishableKey: live!.publishableKey,
    retry: FAST,
    fetch: wire.fetch,
    ...options,
  });
  return { client, wire };
}

async function ordersOf(dinerId: string): Promise<number> {
  return (await control<{ count: number }>("orders-of", { diner_id: dinerId })).count;
}

/** Suspend or reactivate the restaurant, and wait until the live server's menu answers `menuStatus`. */
async function tenantStatus(status: "suspended" | "active", menuStatus: number): Promise<void> {
  await control("tenant-status", { status });
  for (let tries = 0; tries < 200; tries++) {
    const menu = await fetch(`${live!.api}/api/v1/menu/`, { headers: { Authorization: `Api-Key ${live!.publishableKey}` } });
    if (menu.status === menuStatus) return;
    await sleepMs(50);
  }
  assert.fail(`the menu never answered ${menuStatus}`);
}

/** The client's storage entries: its session, an operation's key, the finished-ops index. */
const entryOf = (name: string) => `ordering-client:${live!.publishableKey.split(".")[0]}:${name}`;

/** Make the stored session (synchronous storage) end `inMs` from now. */
function expireSession(storage: ReturnType<typeof memoryStorage>, inMs: number): void {
  const session = JSON.parse(storage.getItem(entryOf("session")) as string) as object;
  storage.setItem(entryOf("session"), JSON.stringify({ ...session, expiresAt: Date.now() + inMs }));
}

/** The merchant ends every session of the diner (as for a stolen account), and the revocation
 * reaches every worker of the server. */
async function revokeSessions(dinerId: string): Promise<void> {
  const response = await fetch(`${live!.api}/api/v1/diners/${dinerId}/revoke-sessions/`, {
    method: "POST",
    headers: { Authorization: `Api-Key ${live!.merchantKey}` },
  });
  assert.equal(response.status, 200, await response.text());
  await sleepMs(live!.sessionStateCacheMs + 200);
}

/** A client through the dropping proxy whose first order answer is lost, and whose diner's
 * sessions the merchant revokes before the retry (the retry waits for the revocation). */
async function revokedBeforeTheRetry() {
  const storage = memoryStorage();
  const wire = recordingFetch();
  let revoking: Promise<void> = Promise.resolve();
  const client = new OrderingClient({
    baseUrl: live!.proxy,
    publishableKey: live!.publishableKey,
    retry: FAST,
    storage,
    fetch: async (input, init) => (await revoking, wire.fetch(input, init)),
    onRetry: () => void (revoking = revokeSessions(first.dinerId)),
  });
  const first = await client.session();
  await control("drop", { count: 1, method: "POST", path: ORDERS });
  return { storage, wire, client, first };
}

describe("live server", { skip: live ? false : "run by tests/clients/test_typescript_client.py" }, () => {
  test("an answer lost after commit is replayed byte for byte and orders once", async () => {
    const events: RetryEvent[] = [];
    const { client, wire } = clientOf(live!.proxy, { onRetry: (e) => void events.push(e) });
    await control("drop", { count: 1, method: "POST", path: ORDERS });

    const result = await client.placeOrder(orderBody(2));

    const lost = (await control<Dropped[]>("dropped")).at(-1);
    assert.deepEqual([lost!.status, lost!.result], [201, "MISS"]);
    assert.deepEqual(wire.posts(ORDERS).map((e) => e.status), [null, 201]);
    assert.equal(new Set(wire.posts(ORDERS).map((e) => e.key)).size, 1);
    assert.ok(events[0]!.error instanceof NetworkError);
    assert.deepEqual([result.status, result.replayed], [201, true]);
    assert.equal(result.body, lost!.body);
    const { dinerId } = await client.session();
    assert.equal(await ordersOf(dinerId), 1);
    assert.equal((await client.orders()).results.length, 1);
  });

  test("a replayed order carries null contact details, named by Idempotency-Redacted", async () => {
    const { client } = clientOf(live!.proxy);
    const contact = { phone: "+44 20 7946 0000", address: "1 High Street" };
    await control("drop", { count: 1, method: "POST", path: ORDERS });

    const result = await client.placeOrder({ ...orderBody(), contact });

    assert.ok(result.replayed);
    assert.deepEqual(result.data.contact, { phone: null, address: null });
    assert.equal(result.headers.get("Idempotency-Redacted"), "contact.phone, contact.address");
    assert.deepEqual((await client.order(result.data.id)).contact, contact);
  });

  test("signing out a session whose answer was lost, or that had ended, is done, not an error", async () => {
    for (const lost of [true, false]) {
      const storage = memoryStorage();
      const { client, wire } = clientOf(live!.proxy, { storage });
      const { dinerId } = await client.session();
      if (lost) await control("drop", { count: 1, method: "POST", path: "/api/v1/diner-sessions/end/" });
      else await revokeSessions(dinerId);

      await client.endSession(); // red: ApiError 401 SESSION_REVOKED

      const ends = wire.posts("/api/v1/diner-sessions/end/").map((e) => e.status);
      assert.deepEqual(ends, lost ? [null, 401] : [401]);
      assert.equal(storage.getItem(entryOf("session")), null);
      assert.notEqual((await client.session()).dinerId, dinerId);
    }
  });

  test("a diner pages through its orders by the cursor of each next link", async () => {
    const { client } = clientOf(live!.api);
    const placed: string[] = [];
    for (let n = 1; n <= 21; n++) placed.push((await client.placeOrder(orderBody(n))).data.id);

    const seen: string[] = [];
    const counts: number[] = [];
    let cursor: string | undefined;
    for (;;) {
      const page = await client.orders({ cursor });
      seen.push(...page.results.map((order) => order.id));
      counts.push(page.count);
      if (page.next === null) break;
      cursor = new URL(page.next).searchParams.get("cursor") ?? undefined;
    }

    assert.deepEqual(seen, placed.reverse());
    assert.deepEqual(counts, [21, 21]);
  });

  test("a request still running answers 409, then the client gets its replay", async () => {
    const events: RetryEvent[] = [];
    const storage = memoryStorage(); // one diner: the order's, then the impatient payer's
    const orderId = (await clientOf(live!.api, { storage }).client.placeOrder(orderBody())).data.id;
    const { client, wire } = clientOf(live!.api, {
      storage,
      timeoutMs: 1500,
      onRetry: (event) => {
        events.push(event);
        if (event.status === 409) void control("release"); // the first attempt may now finish
      },
    });
    await control("hold-order", { order_id: orderId });

    const result = await client.payOrder(orderId);

    const pays = wire.posts(`${ORDERS}${orderId}/pay/`);
    const statuses = pays.map((e) => e.status);
    assert.deepEqual([statuses[0], statuses.at(-1)], [null, 200]); // timed out first, the replay last
    assert.ok(events[0]!.error instanceof NetworkError);
    const inProgress = events.find((e) => e.status === 409)!;
    assert.equal(inProgress.code, "IDEMPOTENCY_REQUEST_IN_PROGRESS");
    const retryAfterMs = inProgress.retryAfterMs!;
    assert.ok(retryAfterMs >= 1000 && retryAfterMs <= live!.leaseSeconds * 1000, `${retryAfterMs}`);
    const [refused, replayed] = pays.slice(statuses.indexOf(409));
    assert.ok(replayed!.sent - refused!.answered >= retryAfterMs);
    assert.deepEqual([result.status, result.replayed], [200, true]);
    assert.equal((await control<{ count: number }>("payments-of", { order_id: orderId })).count, 1);
  });

  test("429 waits at least Retry-After, then succeeds", async () => {
    const { client, wire } = clientOf(live!.api);
    await control("exhaust-write-rate", { diner_id: (await client.session()).dinerId, for_ms: 4000 });

    const result = await client.placeOrder(orderBody());

    const [limited, placed] = wire.posts(ORDERS);
    assert.deepEqual([limited!.status, placed!.status], [429, 201]);
    const retryAfterMs = Number(limited!.retryAfter) * 1000;
    assert.ok(retryAfterMs >= 2000, `Retry-After ${limited!.retryAfter}`);
    assert.ok(placed!.sent - limited!.answered >= retryAfterMs);
    assert.equal(placed!.key, limited!.key);
    assert.equal(result.replayed, false);
  });

  test("a proxy's 408 is retried with the same key and orders once", async () => {
    // a load balancer tired of waiting for the body: the server never saw the request
    const { client, wire } = clientOf(live!.proxy);
    await control("answer-instead", { status: 408, count: 1, method: "POST", path: ORDERS });

    const result = await client.placeOrder(orderBody());

    const [timedOut, placed] = wire.posts(ORDERS);
    assert.deepEqual([timedOut!.status, placed!.status], [408, 201]);
    assert.equal(placed!.key, timedOut!.key);
    assert.deepEqual([result.status, result.replayed], [201, false]);
    assert.equal(await ordersOf((await client.session()).dinerId), 1);
  });

  test("a key reused for another payload is a programming error, never retried", async () => {
    const storage = memoryStorage();
    const { client, wire } = clientOf(live!.api, { storage });
    await client.placeOrder(orderBody(1), { idempotencyKey: "cart-7" });
    assert.equal(await storage.getItem(entryOf("key:cart-7")), null); // a final answer forgets it

    const reused = await client.placeOrder(orderBody(3), { idempotencyKey: "cart-7" }).catch((e: unknown) => e);

    assert.ok(reused instanceof IdempotencyKeyReusedError);
    assert.deepEqual([reused.status, reused.code], [422, "IDEMPOTENCY_KEY_REUSED"]);
    assert.deepEqual(wire.posts(ORDERS).map((e) => e.status), [201, 422]);
    assert.equal(await ordersOf((await client.session()).dinerId), 1);
    assert.equal(await storage.getItem(entryOf("key:cart-7")), null);
  });

  test("a key of the caller's own no request can carry is refused before anything is sent", async () => {
    // Red: fetch could not put it in a header, and each attempt failed as a network error,
    // retried into RetriesExhaustedError ("outcome unknown") for a request never sent.
    for (const own of ["заказ-1", "café-1", "cart\n7"]) {
      const storage = memoryStorage();
      const { client, wire } = clientOf(live!.api, { storage, retry: { ...FAST, maxAttempts: 2 } });

      const refused = await client.placeOrder(orderBody(1), { idempotencyKey: own }).catch((e: unknown) => e);

      assert.ok(refused instanceof RangeError, `${JSON.stringify(own)}: ${String(refused)}`);
      assert.match(refused.message, /idempotencyKey/);
      assert.deepEqual(wire.posts(ORDERS), []);
      assert.equal(await storage.getItem(entryOf(`key:${own}`)), null);
      const placed = await client.placeOrder(orderBody(1), { idempotencyKey: `cart-${randomUUID()}` });
      assert.equal(placed.status, 201);
      assert.equal(await ordersOf((await client.session()).dinerId), 1);
    }
  });

  test("another payload under a kept operationId does not free it for a second order", async () => {
    // Red when the 422 made the client forget the key: the first order, sent again, got a new
    // key and was placed twice.
    const { client, wire } = clientOf(live!.api);
    const first = await client.placeOrder(orderBody(1), { operationId: "cart-7" });

    await assert.rejects(client.placeOrder(orderBody(3), { operationId: "cart-7" }), IdempotencyKeyReusedError);
    const again = await client.placeOrder(orderBody(1), { operationId: "cart-7" });

    assert.ok(again.replayed);
    assert.equal(again.idempotencyKey, first.idempotencyKey);
    assert.deepEqual(wire.posts(ORDERS).map((e) => e.status), [201, 422, 201]);
    assert.equal(await ordersOf((await client.session()).dinerId), 1);
  });

  test("a refusal from before the engine to a resumed key keeps it: no second order", async () => {
    // The order placed, its answer lost; the retry met 403 TENANT_SUSPENDED from authentication,
    // which never looks at the key. Red when any 4xx forgot the key: once the restaurant is back,
    // the call made a new key and ordered a second time.
    const { client, wire } = clientOf(live!.proxy, { retry: { ...FAST, maxAttempts: 1 } });
    await control("drop", { count: 1, method: "POST", path: ORDERS });
    await assert.rejects(client.placeOrder(orderBody(), { operationId: "cart-9" }), RetriesExhaustedError);

    await tenantStatus("suspended", 403);
    const refused = await client.placeOrder(orderBody(), { operationId: "cart-9" }).catch((e: unknown) => e);
    await tenantStatus("active", 200);
    const again = await client.placeOrder(orderBody(), { operationId: "cart-9" });

    assert.ok(refused instanceof ApiError && refused.status === 403 && refused.code === "TENANT_SUSPENDED", String(refused));
    assert.ok(again.replayed);
    assert.deepEqual(wire.posts(ORDERS).map((e) => e.status), [null, 403, 201]);
    assert.equal(new Set(wire.posts(ORDERS).map((e) => e.key)).size, 1);
    assert.equal(await ordersOf((await client.session()).dinerId), 1);
  });

  test("the engine's final refusal to a resumed key forgets it", async () => {
    // The other side of the rule above: a refusal the engine gave under the key carries
    // X-Idempotent-Result, so it is the operation's final answer and the same call later is a new
    // operation. Red when every refusal to a resumed key kept it: the refusal replayed for ever.
    const { client, wire } = clientOf(live!.proxy, { retry: { ...FAST, maxAttempts: 1 } });
    const body = { items: [{ dish_id: live!.dishId + 1000, quantity: 1 }], payment_method: "card" as const };
    await control("drop", { count: 1, method: "POST", path: ORDERS });
    await assert.rejects(client.placeOrder(body, { operationId: "cart-10" }), RetriesExhaustedError);

    const replayed = await client.placeOrder(body, { operationId: "cart-10" }).catch((e: unknown) => e);
    const anew = await client.placeOrder(body, { operationId: "cart-10" }).catch((e: unknown) => e);

    assert.ok(replayed instanceof ApiError && replayed.code === "DISH_NOT_FOUND", String(replayed));
    assert.equal(replayed.headers.get("x-idempotent-result"), "HIT");
    assert.ok(anew instanceof ApiError && anew.headers.get("x-idempotent-result") === "MISS", String(anew));
    const keys = wire.posts(ORDERS).map((e) => e.key);
    assert.equal(keys.length, 3);
    assert.equal(keys[0], keys[1]);
    assert.notEqual(keys[1], keys[2]);
  });

  test("a 400 is final: not retried, and its key forgotten", async () => {
    const storage = memoryStorage();
    const { client, wire } = clientOf(live!.api, { storage });
    const bad = { items: [{ dish_id: live!.dishId, quantity: 0 }], payment_method: "card" as const };

    const refused = await client.placeOrder(bad).catch((e: unknown) => e);
    const again = await client.placeOrder(bad).catch((e: unknown) => e);

    assert.ok(refused instanceof ApiError && !(refused instanceof IdempotencyKeyReusedError));
    assert.deepEqual([refused.status, refused.code], [400, "VALIDATION_ERROR"]);
    assert.ok(again instanceof ApiError);
    const posts = wire.posts(ORDERS);
    assert.deepEqual(posts.map((e) => e.status), [400, 400]);
    assert.notEqual(posts[0]!.key, posts[1]!.key); // the same request later is a new operation
  });

  test("cancel is an operation, and a conflict is final", async () => {
    const { client, wire } = clientOf(live!.api);
    const orderId = (await client.placeOrder(orderBody())).data.id;

    const cancelled = await client.cancelOrder(orderId);
    const again = await client.cancelOrder(orderId, { operationId: "cancel-again" }).catch((e: unknown) => e);

    assert.equal(cancelled.data.status, "CANCELLED");
    assert.ok(again instanceof ApiError);
    assert.deepEqual([again.status, again.code], [409, "ORDER_STATUS_CONFLICT"]);
    const cancels = wire.posts(`${ORDERS}${orderId}/cancel/`);
    assert.deepEqual(cancels.map((e) => e.status), [200, 409]);
    assert.notEqual(cancels[0]!.key, cancels[1]!.key);
  });

  test("a restarted app resends with the stored key and session and gets the replay", async () => {
    const path = join(await mkdtemp(join(tmpdir(), "ordering-client-")), "storage.json");
    const crashed = clientOf(live!.proxy, { storage: fileAsyncStorage(path), retry: { maxAttempts: 1 } }).client;
    await control("drop", { count: 1, method: "POST", path: ORDERS });
    const failure = await crashed.placeOrder(orderBody(2)).catch((e: unknown) => e);
    const { dinerId } = await crashed.session();

    const storage = fileAsyncStorage(path);
    const restarted = clientOf(live!.api, { storage }).client;
    const result = await restarted.placeOrder(orderBody(2));

    assert.ok(failure instanceof RetriesExhaustedError && failure.lastError instanceof NetworkError);
    assert.equal(result.idempotencyKey, failure.idempotencyKey);
    assert.deepEqual([result.status, result.replayed], [201, true]);
    const lost = (await control<Dropped[]>("dropped")).at(-1);
    assert.equal(result.body, lost!.body);
    assert.equal((await restarted.session()).dinerId, dinerId);
    assert.equal(await ordersOf(dinerId), 1);
    assert.deepEqual(Object.keys(await storage.entries()).filter((k) => k.includes(":op:")), []);
  });

  test("a restart after the guest session expired does not resend the key as another diner", async () => {
    const path = join(await mkdtemp(join(tmpdir(), "ordering-client-")), "storage.json");
    const crashed = clientOf(live!.proxy, { storage: fileAsyncStorage(path), retry: { maxAttempts: 1 } }).client;
    await control("drop", { count: 1, method: "POST", path: ORDERS });
    const failure = await crashed.placeOrder(orderBody(2)).catch((e: unknown) => e);
    const first = await crashed.session();
    const storage = fileAsyncStorage(path);
    const entry = `ordering-client:${live!.publishableKey.split(".")[0]}:session`;
    await storage.setItem(entry, JSON.stringify({ ...first, expiresAt: Date.now() - 1000 }));

    const restarted = clientOf(live!.api, { storage });
    const changed = await restarted.client.placeOrder(orderBody(2)).catch((e: unknown) => e);

    assert.ok(failure instanceof RetriesExhaustedError);
    assert.ok(changed instanceof SessionChangedError, String(changed));
    assert.equal(changed.idempotencyKey, failure.idempotencyKey);
    assert.equal(changed.previousDinerId, first.dinerId);
    assert.notEqual(changed.dinerId, first.dinerId);
    assert.equal(restarted.wire.posts(ORDERS).length, 0); // nothing sent
    assert.equal(await ordersOf(first.dinerId), 1);
    const placed = await restarted.client.placeOrder(orderBody(2), { operationId: "again" });
    assert.deepEqual([placed.status, placed.replayed], [201, false]);
  });

  test("two calls of one operation at once send one request and order once", async () => {
    const slow = memoryStorage();
    const storage = { ...slow, getItem: async (key: string) => (await sleepMs(50), slow.getItem(key)) };
    const { client, wire } = clientOf(live!.api, { storage });
    const [a, b] = await Promise.all([client.placeOrder(orderBody(3)), client.placeOrder(orderBody(3))]);
    assert.equal(a, b); // the second joined the first
    assert.equal(wire.posts(ORDERS).length, 1);
    assert.equal(await ordersOf((await client.session()).dinerId), 1);
  });

  test("two clients sharing one storage (two tabs) run an operation once: the second replays it", async () => {
    // No session yet: the two share the one guest they open. Reads are slow (AsyncStorage's
    // are async), so without turns each would find no key stored and make its own.
    const items = memoryStorage();
    const storage = {
      ...items,
      getItem: async (key: string) => {
        const value = items.getItem(key);
        await sleepMs(50);
        return value;
      },
    };
    const tabs = [clientOf(live!.api, { storage }), clientOf(live!.api, { storage })];

    const results = await Promise.all(
      tabs.map(({ client }) => client.placeOrder(orderBody(2), { operationId: "cart-two-tabs" })),
    );

    assert.equal(await ordersOf((await tabs[0]!.client.session()).dinerId), 1);
    assert.deepEqual(results.map((r) => r.replayed).sort(), [false, true]);
    assert.equal(results[0]!.data.id, results[1]!.data.id);
    assert.equal(results[0]!.idempotencyKey, results[1]!.idempotencyKey);
    assert.equal(tabs.flatMap(({ wire }) => wire.posts("/api/v1/diner-sessions/")).length, 1);
    const [first, second] = tabs.flatMap(({ wire }) => wire.posts(ORDERS)).sort((x, y) => x.sent - y.sent);
    assert.ok(second!.sent >= first!.answered); // the second waited for the whole operation
  });

  test("the same order written another way is the same operation", async () => {
    const { client } = clientOf(live!.proxy, { retry: { maxAttempts: 1 } });
    await control("drop", { count: 1, method: "POST", path: ORDERS });
    const failure = await client.placeOrder({ ...orderBody(2), note: "Caf\u00e9" }).catch((e: unknown) => e);
    const [item] = orderBody(2).items;
    const rebuilt = {
      note: "Cafe\u0301",
      coupon_code: null,
      payment_method: "card",
      items: [{ quantity: item!.quantity, dish_id: item!.dish_id }],
    } as PlaceOrderInput;
    const result = await client.placeOrder(rebuilt);
    assert.ok(failure instanceof RetriesExhaustedError);
    assert.equal(result.idempotencyKey, failure.idempotencyKey);
    assert.deepEqual([result.status, result.replayed], [201, true]);
    assert.equal(await ordersOf((await client.session()).dinerId), 1);
  });

  test("the session is refreshed near expiry and reopened once expired", async () => {
    const storage = memoryStorage();
    const first = await clientOf(live!.api, { storage }).client.session();
    const refreshing = clientOf(live!.api, { storage, refreshMarginMs: 1e12 });

    const refreshed = await refreshing.client.session();
    assert.equal(refreshed.dinerId, first.dinerId);
    assert.ok(refreshed.expiresAt >= Math.floor(first.expiresAt / 1000) * 1000);
    assert.equal(refreshing.wire.posts("/api/v1/diner-sessions/refresh/").length, 1);

    const entry = `ordering-client:${live!.publishableKey.split(".")[0]}:session`;
    storage.setItem(entry, JSON.stringify({ ...first, expiresAt: Date.now() - 1000 }));
    const reopening = clientOf(live!.api, { storage });
    await reopening.client.placeOrder(orderBody());
    assert.notEqual((await reopening.client.session()).dinerId, first.dinerId);
    assert.equal(reopening.wire.posts("/api/v1/diner-sessions/").length, 1);
    assert.equal(reopening.wire.posts("/api/v1/diner-sessions/refresh/").length, 0);
  });

  test("pre-issued tokens come in batches, one per operation, and replay after a lost answer", async () => {
    const { client, wire } = clientOf(live!.proxy, { keys: tokenKeys({ batchSize: 2 }) });
    await control("drop", { count: 1, method: "POST", path: ORDERS });

    const results = [];
    for (const quantity of [1, 2, 3]) results.push(await client.placeOrder(orderBody(quantity)));

    assert.equal(wire.posts("/api/v1/idempotency-tokens/").length, 2);
    const keys = results.map((r) => r.idempotencyKey!);
    assert.ok(keys.every((k) => k.startsWith("tok_")) && new Set(keys).size === 3, keys.join());
    const lost = (await control<Dropped[]>("dropped")).at(-1);
    assert.ok(results[0]!.replayed);
    assert.equal(results[0]!.body, lost!.body);
    assert.equal(await ordersOf((await client.session()).dinerId), 3);
  });

  test("a batch the server's Redis lost costs no order: the client takes new keys", async () => {
    // Red without the client's re-key: the 422 IDEMPOTENCY_TOKEN_UNKNOWN fails that order, and
    // every later one until the batch is spent.
    const { client, wire } = clientOf(live!.api, { keys: tokenKeys({ batchSize: 5 }) });
    const first = await client.placeOrder(orderBody(1));
    const { count } = await control<{ count: number }>("forget-tokens");
    assert.ok(count >= 4, `forgot ${count} tokens`);

    const later = [await client.placeOrder(orderBody(2)), await client.placeOrder(orderBody(3))];

    assert.equal(wire.posts(ORDERS).filter((e) => e.status === 422).length, 1);
    assert.equal(wire.posts("/api/v1/idempotency-tokens/").length, 2);
    assert.deepEqual(later.map((r) => r.status), [201, 201]);
    const keys = [first, ...later].map((r) => r.idempotencyKey!);
    assert.ok(keys.every((k) => k.startsWith("tok_")) && new Set(keys).size === 3, keys.join());
    assert.equal(await ordersOf((await client.session()).dinerId), 3);
  });

  test("without tokens on the server the client falls back to UUID v4 keys", async () => {
    const { client, wire } = clientOf(live!.databaseOnly, { keys: tokenKeys() });

    const result = await client.placeOrder(orderBody());

    assert.deepEqual(wire.posts("/api/v1/idempotency-tokens/").map((e) => e.status), [503]);
    assert.equal(result.status, 201);
    assert.match(result.idempotencyKey!, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  test("a retry after the session expired is not sent as the new guest", async () => {
    const storage = memoryStorage();
    const { client, wire } = clientOf(live!.proxy, { storage, onRetry: () => expireSession(storage, -1000) });
    const first = await client.session();
    await control("drop", { count: 1, method: "POST", path: ORDERS });

    const changed = await client.placeOrder(orderBody(2), { operationId: "cart-expiring" }).catch((e: unknown) => e);

    const second = await client.session();
    assert.ok(changed instanceof SessionChangedError, String(changed));
    assert.notEqual(second.dinerId, first.dinerId);
    assert.deepEqual([changed.previousDinerId, changed.dinerId], [first.dinerId, second.dinerId]);
    const posts = wire.posts(ORDERS);
    assert.deepEqual(posts.map((e) => e.status), [null]); // the lost one; the retry never went out
    assert.equal(changed.idempotencyKey, posts[0]!.key);
    const stored = JSON.parse((await storage.getItem(entryOf("op:cart-expiring")))!) as { key: string };
    assert.equal(stored.key, changed.idempotencyKey); // kept: calling again does not place it again
    const again = await client.placeOrder(orderBody(2), { operationId: "cart-expiring" }).catch((e: unknown) => e);
    assert.ok(again instanceof SessionChangedError);
    assert.equal(wire.posts(ORDERS).length, 1);
    assert.deepEqual([await ordersOf(first.dinerId), await ordersOf(second.dinerId)], [1, 0]);
  });

  test("a retry after the session was refreshed keeps its diner and gets the replay", async () => {
    const storage = memoryStorage();
    const { client, wire } = clientOf(live!.proxy, { storage, onRetry: () => expireSession(storage, 60_000) });
    const { dinerId, token } = await client.session();
    await sleepMs(1100); // a token names its expiry in whole seconds: the refreshed one differs
    await control("drop", { count: 1, method: "POST", path: ORDERS });

    const result = await client.placeOrder(orderBody(2));

    assert.deepEqual(wire.posts("/api/v1/diner-sessions/refresh/").map((e) => e.status), [200]);
    const refreshed = await client.session();
    assert.deepEqual([refreshed.dinerId === dinerId, refreshed.token === token], [true, false]);
    assert.deepEqual(wire.posts(ORDERS).map((e) => e.status), [null, 201]);
    assert.deepEqual([result.status, result.replayed], [201, true]);
    assert.equal(await ordersOf(dinerId), 1);
  });

  test("a 401 on a retry keeps the key: calling again does not order as a new guest", async () => {
    const { storage, wire, client, first } = await revokedBeforeTheRetry();

    const changed = await client.placeOrder(orderBody(2)).catch((e: unknown) => e);

    assert.ok(changed instanceof SessionChangedError, String(changed));
    assert.deepEqual([changed.previousDinerId, changed.dinerId], [first.dinerId, undefined]);
    const posts = wire.posts(ORDERS);
    assert.deepEqual(posts.map((e) => e.status), [null, 401]);
    assert.equal(changed.idempotencyKey, posts[0]!.key);
    assert.notEqual(await storage.getItem(entryOf(`op:${requestId("POST", ORDERS, orderBody(2))}`)), null);
    const again = await client.placeOrder(orderBody(2)).catch((e: unknown) => e);
    const second = await client.session();
    assert.ok(again instanceof SessionChangedError, String(again));
    assert.deepEqual([again.previousDinerId, again.dinerId], [first.dinerId, second.dinerId]);
    assert.equal(wire.posts(ORDERS).length, 2); // nothing sent as the new guest
    assert.deepEqual([await ordersOf(first.dinerId), await ordersOf(second.dinerId)], [1, 0]);
  });

  test("a 401 on a retry with the caller's own key: sending that key again does not order as a new guest", async () => {
    const { storage, wire, client, first } = await revokedBeforeTheRetry();

    const changed = await client.placeOrder(orderBody(2), { idempotencyKey: "cart-revoked" }).catch((e: unknown) => e);

    assert.ok(changed instanceof SessionChangedError, String(changed));
    assert.deepEqual([changed.idempotencyKey, changed.previousDinerId, changed.dinerId], ["cart-revoked", first.dinerId, undefined]);
    assert.deepEqual(wire.posts(ORDERS).map((e) => e.status), [null, 401]);
    const again = await client.placeOrder(orderBody(2), { idempotencyKey: "cart-revoked" }).catch((e: unknown) => e);
    const second = await client.session();
    assert.ok(again instanceof SessionChangedError, String(again));
    assert.deepEqual([again.previousDinerId, again.dinerId], [first.dinerId, second.dinerId]);
    assert.deepEqual([await ordersOf(first.dinerId), await ordersOf(second.dinerId)], [1, 0]);
    assert.equal(wire.posts(ORDERS).length, 2); // nothing sent as the new guest
    const stored = JSON.parse((await storage.getItem(entryOf("key:cart-revoked")))!) as { key: string; dinerId: string };
    assert.deepEqual([stored.key, stored.dinerId], ["cart-revoked", first.dinerId]); // still kept
    const placed = await client.placeOrder(orderBody(2), { idempotencyKey: "cart-revoked-2" });
    assert.deepEqual([placed.status, placed.replayed], [201, false]); // a new key places it knowingly
  });

  test("a 401 on a key that cannot have reached the server is final, and the key forgotten", async () => {
    const storage = memoryStorage();
    const { client, wire } = clientOf(live!.api, { storage });
    const { dinerId } = await client.session();
    await revokeSessions(dinerId);

    const refused = await client.placeOrder(orderBody(2)).catch((e: unknown) => e);

    assert.ok(refused instanceof ApiError, String(refused));
    assert.deepEqual([refused.status, refused.code], [401, "SESSION_REVOKED"]);
    assert.deepEqual(wire.posts(ORDERS).map((e) => e.status), [401]);
    assert.equal(await storage.getItem(entryOf(`op:${requestId("POST", ORDERS, orderBody(2))}`)), null);
    assert.equal(await storage.getItem(entryOf("session")), null); // the next call opens a new one
  });

  test("an operation with its own id replays its answer after success instead of ordering again", async () => {
    const path = join(await mkdtemp(join(tmpdir(), "ordering-client-")), "storage.json");
    const first = clientOf(live!.api, { storage: fileAsyncStorage(path) }).client;
    const placed = await first.placeOrder(orderBody(2), { operationId: "cart-42" });
    const { dinerId } = await first.session();

    // The app was killed after placeOrder returned, before it saved the result: it calls again.
    const storage = fileAsyncStorage(path);
    const restarted = clientOf(live!.api, { storage });
    const again = await restarted.client.placeOrder(orderBody(2), { operationId: "cart-42" });

    assert.deepEqual([placed.replayed, again.replayed], [false, true]);
    assert.equal(again.idempotencyKey, placed.idempotencyKey);
    assert.equal(again.data.id, placed.data.id);
    assert.equal(again.body, placed.body);
    assert.equal(await ordersOf(dinerId), 1);
    const bad = { items: [{ dish_id: live!.dishId, quantity: 0 }], payment_method: "card" as const };
    const refused = await restarted.client.placeOrder(bad, { operationId: "cart-43" }).catch((e: unknown) => e);
    assert.ok(refused instanceof ApiError && refused.status === 400);
    const entries = await storage.entries();
    assert.ok(entryOf("op:cart-42") in entries);
    assert.ok(!(entryOf("op:cart-43") in entries)); // a final error answer forgets the key
    assert.deepEqual(Object.keys(JSON.parse(entries[entryOf("finished")]!) as object), [entryOf("op:cart-42")]);
  });

  test("kept finished operations are pruned once expired, when a new operation starts", async () => {
    const path = join(await mkdtemp(join(tmpdir(), "ordering-client-")), "storage.json");
    const storage = fileAsyncStorage(path);
    const { client } = clientOf(live!.api, { storage, operationTtlMs: 1000 });
    await client.placeOrder(orderBody(1), { operationId: "old" });
    await client.placeOrder(orderBody(2)); // the default id: forgotten after success, not indexed
    const before = await storage.entries();
    await sleepMs(1100);

    await client.placeOrder(orderBody(3), { operationId: "new" });

    const after = await storage.entries();
    const ops = (entries: Record<string, string>) => Object.keys(entries).filter((k) => k.includes(":op:"));
    assert.deepEqual(ops(before), [entryOf("op:old")]);
    assert.deepEqual(ops(after), [entryOf("op:new")]);
    assert.deepEqual(Object.keys(JSON.parse(after[entryOf("finished")]!) as object), [entryOf("op:new")]);
  });

  test("the API serves no CORS headers: a browser app must be served from its origin", async () => {
    const origin = { Origin: "https://app.example" };
    const preflight = await fetch(`${live!.api}${ORDERS}`, {
      method: "OPTIONS",
      headers: { ...origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "idempotency-key" },
    });
    const menu = await fetch(`${live!.api}/api/v1/menu/`, {
      headers: { ...origin, Authorization: `Api-Key ${live!.publishableKey}` },
    });
    assert.equal(menu.status, 200);
    for (const answer of [preflight, menu]) {
      const cors: string[] = [];
      answer.headers.forEach((_value, name) => void (name.startsWith("access-control-") && cors.push(name)));
      assert.deepEqual(cors, [], `${answer.status}`);
    }
  });
});

/** The restaurant's own backend: its diner signed in there, and it opens their ordering session
 * with the restaurant's secret key (docs/tenancy.md). `provide` is the app's `sessionProvider`
 * (here it asks the API itself; an app asks its backend, which relays the answer). */
function backendOf() {
  const backend = {
    dinerId: `alice-${randomUUID().slice(0, 8)}`,
    opened: [] as string[],
    provide: async (): Promise<Session> => {
      const answer = await fetch(`${live!.api}/api/v1/diner-sessions/`, {
        method: "POST",
        headers: { Authorization: `Api-Key ${live!.merchantKey}`, "Content-Type": "application/json" },
        body: JSON.stringify({ diner_id: backend.dinerId }),
      });
      assert.equal(answer.status, 201, await answer.clone().text());
      backend.opened.push(backend.dinerId);
      return sessionFromAnswer((await answer.json()) as { token: string; diner_id: string; expires_at: string }, answer.headers);
    },
  };
  return backend;
}

/** A signed-in diner's client through the dropping proxy whose first order answer is lost; before
 * the retry the merchant revokes the diner's sessions, and `then` runs (the retry waits). */
async function signedInRevokedBeforeTheRetry(then: () => void = () => undefined) {
  const backend = backendOf();
  const storage = memoryStorage();
  const wire = recordingFetch();
  let revoking: Promise<void> = Promise.resolve();
  const first = backend.dinerId;
  const client = new OrderingClient({
    baseUrl: live!.proxy,
    publishableKey: live!.publishableKey,
    retry: FAST,
    storage,
    sessionProvider: backend.provide,
    fetch: async (input, init) => (await revoking, wire.fetch(input, init)),
    onRetry: () => void (revoking = revokeSessions(first).then(then)),
  });
  await control("drop", { count: 1, method: "POST", path: ORDERS });
  return { backend, storage, wire, client, first };
}

describe("a diner signed in to the restaurant's backend", { skip: live ? false : "run by tests/clients/test_typescript_client.py" }, () => {
  test("orders with the session its backend opened, not a guest's", async () => {
    const backend = backendOf();
    const { client, wire } = clientOf(live!.api, { sessionProvider: backend.provide });

    const placed = await client.placeOrder(orderBody(2));
    const listed = await client.orders();

    assert.deepEqual([placed.status, placed.replayed], [201, false]);
    assert.equal((await client.session()).dinerId, backend.dinerId);
    assert.equal(await ordersOf(backend.dinerId), 1);
    assert.deepEqual(listed.results.map((o) => o.id), [placed.data.id]);
    assert.deepEqual(backend.opened, [backend.dinerId]); // asked once, then the stored session
    assert.equal(wire.posts("/api/v1/diner-sessions/").length, 0); // no guest session
    await client.endSession(); // the diner signs out of the app
    await client.placeOrder(orderBody(1));
    assert.equal(backend.opened.length, 2);
  });

  test("a guest session stored before the diner signed in is not used", async () => {
    const backend = backendOf();
    const storage = memoryStorage();
    const guest = await clientOf(live!.api, { storage }).client.session();

    const { client } = clientOf(live!.api, { storage, sessionProvider: backend.provide });
    const placed = await client.placeOrder(orderBody(1)); // red: placed as the guest

    assert.ok(guest.dinerId.startsWith("guest_"));
    assert.equal((await client.session()).dinerId, backend.dinerId);
    assert.deepEqual([await ordersOf(backend.dinerId), await ordersOf(guest.dinerId)], [1, 0]);
    assert.deepEqual([placed.status, placed.replayed], [201, false]);
  });

  test("a session near expiry is refreshed, and the provider asked once it expired", async () => {
    const backend = backendOf();
    const storage = memoryStorage();
    const { client, wire } = clientOf(live!.api, { storage, sessionProvider: backend.provide });
    await client.placeOrder(orderBody(1));

    expireSession(storage, 60_000);
    await client.placeOrder(orderBody(2));
    assert.equal(wire.posts("/api/v1/diner-sessions/refresh/").length, 1);
    assert.equal(backend.opened.length, 1);

    expireSession(storage, -1000);
    await client.placeOrder(orderBody(3));
    assert.equal(backend.opened.length, 2);

    // a refresh refused (the diner's sessions revoked) asks the provider too
    await revokeSessions(backend.dinerId);
    expireSession(storage, 60_000);
    await client.placeOrder(orderBody(4));
    assert.deepEqual(wire.posts("/api/v1/diner-sessions/refresh/").map((e) => e.status), [200, 401]);
    assert.equal(backend.opened.length, 3);
    assert.equal(await ordersOf(backend.dinerId), 4);
    assert.equal(wire.posts("/api/v1/diner-sessions/").length, 0);
  });

  test("a 401 on a retry asks the provider, and the retry replays as the same diner", async () => {
    const { backend, wire, client } = await signedInRevokedBeforeTheRetry();

    const result = await client.placeOrder(orderBody(2));

    const posts = wire.posts(ORDERS);
    assert.deepEqual(posts.map((e) => e.status), [null, 401, 201]);
    assert.equal(new Set(posts.map((e) => e.key)).size, 1);
    assert.deepEqual([result.status, result.replayed], [201, true]);
    assert.equal(result.body, (await control<Dropped[]>("dropped")).at(-1)!.body);
    assert.deepEqual(backend.opened, [backend.dinerId, backend.dinerId]);
    assert.equal(await ordersOf(backend.dinerId), 1);
  });

  test("a key is not resent as another diner the provider hands over", async () => {
    const switched = `bob-${randomUUID().slice(0, 8)}`;
    const { backend, wire, client, first } = await signedInRevokedBeforeTheRetry(() => void (backend.dinerId = switched));

    const changed = await client.placeOrder(orderBody(2)).catch((e: unknown) => e);
    const again = await client.placeOrder(orderBody(2)).catch((e: unknown) => e);

    const posts = wire.posts(ORDERS);
    assert.deepEqual(posts.map((e) => e.status), [null, 401]); // nothing sent as the other diner
    assert.ok(changed instanceof SessionChangedError, String(changed));
    assert.ok(again instanceof SessionChangedError, String(again));
    assert.deepEqual([changed.idempotencyKey, again.idempotencyKey], [posts[0]!.key, posts[0]!.key]);
    assert.deepEqual([changed.previousDinerId, changed.dinerId], [first, switched]);
    assert.deepEqual([await ordersOf(first), await ordersOf(switched)], [1, 0]);
  });

  test("a provider handing over an ended session gets the 401 once", async () => {
    const backend = backendOf();
    const ended = await backend.provide();
    const storage = memoryStorage();
    const wire = recordingFetch();
    let revoking: Promise<void> = Promise.resolve();
    const client = new OrderingClient({
      baseUrl: live!.proxy,
      publishableKey: live!.publishableKey,
      retry: FAST,
      storage,
      sessionProvider: async () => ended,
      fetch: async (input, init) => (await revoking, wire.fetch(input, init)),
      onRetry: () => void (revoking = revokeSessions(backend.dinerId)),
    });
    await control("drop", { count: 1, method: "POST", path: ORDERS });

    const changed = await client.placeOrder(orderBody(2)).catch((e: unknown) => e);

    assert.deepEqual(wire.posts(ORDERS).map((e) => e.status), [null, 401, 401]);
    assert.ok(changed instanceof SessionChangedError, String(changed));
    assert.deepEqual([changed.previousDinerId, changed.dinerId], [backend.dinerId, undefined]);
    assert.equal(await ordersOf(backend.dinerId), 1);
  });

  test("a 401 on a key's first attempt, then another diner from the provider: the key is forgotten", async () => {
    const backend = backendOf();
    const first = backend.dinerId;
    const storage = memoryStorage();
    const { client, wire } = clientOf(live!.api, { storage, sessionProvider: backend.provide });
    await client.session();
    await revokeSessions(first);
    backend.dinerId = `bob-${randomUUID().slice(0, 8)}`;

    const changed = await client.placeOrder(orderBody(2)).catch((e: unknown) => e);
    const placed = await client.placeOrder(orderBody(2));

    assert.ok(changed instanceof SessionChangedError, String(changed));
    assert.deepEqual([changed.previousDinerId, changed.dinerId], [first, backend.dinerId]);
    assert.deepEqual(wire.posts(ORDERS).map((e) => e.status), [401, 201]);
    assert.deepEqual([placed.status, placed.replayed], [201, false]);
    assert.deepEqual([await ordersOf(first), await ordersOf(backend.dinerId)], [0, 1]);
  });

  test("a restart after the diner's sessions were revoked resumes the key as the same diner", async () => {
    const backend = backendOf();
    const path = join(await mkdtemp(join(tmpdir(), "ordering-client-")), "storage.json");
    const crashed = clientOf(live!.proxy, {
      storage: fileAsyncStorage(path),
      sessionProvider: backend.provide,
      retry: { ...FAST, maxAttempts: 1 },
    });
    await control("drop", { count: 1, method: "POST", path: ORDERS });
    const failure = await crashed.client.placeOrder(orderBody(2)).catch((e: unknown) => e);
    assert.ok(failure instanceof RetriesExhaustedError, String(failure));
    await revokeSessions(backend.dinerId);

    const storage = fileAsyncStorage(path);
    const restarted = clientOf(live!.api, { storage, sessionProvider: backend.provide });
    const result = await restarted.client.placeOrder(orderBody(2));

    assert.deepEqual(restarted.wire.posts(ORDERS).map((e) => e.status), [401, 201]);
    assert.equal(result.idempotencyKey, failure.idempotencyKey);
    assert.deepEqual([result.status, result.replayed], [201, true]);
    assert.equal(await ordersOf(backend.dinerId), 1);
    assert.deepEqual(Object.keys(await storage.entries()).filter((k) => k.includes(":op:")), []);
  });

  test("a read answered 401 asks the provider and reads again", async () => {
    const backend = backendOf();
    const { client, wire } = clientOf(live!.api, { sessionProvider: backend.provide });
    const placed = await client.placeOrder(orderBody(1));
    await revokeSessions(backend.dinerId);

    const order = await client.order(String(placed.data.id));

    assert.equal(order.id, placed.data.id);
    assert.deepEqual(wire.log.filter((e) => e.method === "GET").map((e) => e.status), [401, 200]);
    assert.equal(backend.opened.length, 2);
  });

  test("a session the provider cannot give is its error, and nothing is sent", async () => {
    class SignedOut extends Error {}
    const { client, wire } = clientOf(live!.api, { sessionProvider: () => Promise.reject(new SignedOut()) });

    const refused = await client.placeOrder(orderBody(1)).catch((e: unknown) => e);

    assert.ok(refused instanceof SignedOut, String(refused));
    assert.deepEqual(wire.log, []);
  });
});
