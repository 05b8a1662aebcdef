// The client's handling of answers that a live server does not give on demand, with a fake
// fetch: an answer no longer kept, a login page in place of a session, a request that never
// answers, a deployment hiding X-Idempotent-Result; the default lifetime of a stored key; and
// which clients sharing storage take turns (Web Locks, faked here, or this realm's registry).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ApiError,
  memoryStorage,
  NetworkError,
  OrderAlreadyPlacedError,
  OrderingClient,
  type ClientOptions,
  type KeyValueStorage,
  RetriesExhaustedError,
  requestId,
  SessionChangedError,
  tokenKeys,
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

test("a device clock a day ahead keeps its session and its batch of tokens", async () => {
  // given a server whose session and tokens live 24 h by its own clock (its answers' Date),
  // and a phone whose clock is 25 h ahead of it
  const serverNow = Date.now();
  const inOneDay = new Date(serverNow + 24 * HOUR).toISOString();
  const dated = (body: object, status: number, headers: Record<string, string> = {}) =>
    new Response(JSON.stringify(body), { status, headers: { Date: new Date(serverNow).toUTCString(), ...headers } });
  const sent: string[] = [];
  let issued = 0;
  let guests = 0;
  const fakeFetch: typeof fetch = async (input) => {
    const path = new URL(String(input)).pathname;
    sent.push(path);
    if (path === "/api/v1/diner-sessions/") {
      return dated({ token: "t", diner_id: `guest_${++guests}`, expires_at: inOneDay }, 201);
    }
    if (path === "/api/v1/idempotency-tokens/") {
      const tokens = [1, 2, 3, 4, 5].map((n) => `tok_${++issued}_${n}`);
      return dated({ tokens, expires_at: inOneDay, ttl_seconds: 86_400 }, 201);
    }
    return dated({ id: "1" }, 201, { "X-Idempotent-Result": "MISS" });
  };
  const deviceClock = Date.now;
  Date.now = () => deviceClock() + 25 * HOUR;
  try {
    const client = new OrderingClient({
      baseUrl: "http://api.test",
      publishableKey: "pk_test.secret",
      fetch: fakeFetch,
      keys: tokenKeys({ batchSize: 5 }),
      retry: { baseDelayMs: 10, maxDelayMs: 50 },
    });

    // when it places three orders, one after another
    const outcomes: (number | string)[] = [];
    for (const note of ["1", "2", "3"]) {
      outcomes.push(await client.placeOrder({ ...ORDER, note }).then((placed) => placed.status, String));
    }

    // then one guest session and one batch serve them all (red: a new guest for each call,
    // whose attempt then met another new guest, SessionChangedError; a batch per order)
    assert.deepEqual(outcomes, [201, 201, 201]);
    assert.equal(sent.filter((path) => path === "/api/v1/diner-sessions/").length, 1);
    assert.equal(sent.filter((path) => path === "/api/v1/diner-sessions/refresh/").length, 0);
    assert.equal(sent.filter((path) => path === "/api/v1/idempotency-tokens/").length, 1);
  } finally {
    Date.now = deviceClock;
  }
});

test("a device clock in step with the server's keeps the session's expiry as said", async () => {
  // given an answer whose Date is in whole seconds, and read after the way back
  const expiresAt = new Date(Date.now() + 24 * HOUR + 987).toISOString();
  const fakeFetch: typeof fetch = async () =>
    new Response(JSON.stringify({ ...SESSION, expires_at: expiresAt }), {
      status: 201,
      headers: { Date: new Date(Date.now() - 2000).toUTCString() },
    });
  const client = new OrderingClient({ baseUrl: "http://api.test", publishableKey: "pk_test.secret", fetch: fakeFetch });

  // then the expiry is the server's, to the millisecond (red when every Date moved it: a
  // refreshed session could seem to end before the one it replaced)
  assert.equal((await client.session()).expiresAt, Date.parse(expiresAt));
});

test("a session's Date in asctime form is GMT, wherever the device is", async () => {
  // given an answer whose Date is in RFC 9110's asctime form, which names no zone
  const expiresAt = new Date(Date.now() + 24 * HOUR).toISOString();
  const asctime = (when: Date) => {
    const [weekday, day, month, year, time] = when.toUTCString().split(" "); // "Mon, 07 Dec 2026 03:20:00 GMT"
    return `${weekday!.slice(0, 3)} ${month} ${String(Number(day)).padStart(2, " ")} ${time} ${year}`;
  };
  const fakeFetch: typeof fetch = async () =>
    new Response(JSON.stringify({ ...SESSION, expires_at: expiresAt }), {
      status: 201,
      headers: { Date: asctime(new Date()) },
    });
  const zone = process.env.TZ;
  try {
    for (const tz of ["America/Los_Angeles", "Asia/Tokyo"]) {
      process.env.TZ = tz;
      const client = new OrderingClient({ baseUrl: "http://api.test", publishableKey: "pk_test.secret", fetch: fakeFetch });

      // then the expiry is the server's (red when read in the device's zone: in Tokyo the
      // server's clock seemed 9 h behind and the session's token was sent, refused 401, for
      // 9 h after it expired; in Los Angeles the session seemed to end 8 h early)
      assert.equal((await client.session()).expiresAt, Date.parse(expiresAt), tz);
    }
  } finally {
    if (zone === undefined) delete process.env.TZ;
    else process.env.TZ = zone;
  }
});

test("endSession waits for a refresh in flight: no token of the ended session is kept or sent", async () => {
  // given a stored session within the refresh margin, and a server whose refresh answers only
  // when let go, and whose sign-out ends every token of the session (a refreshed one too)
  const sessionOf = new Map([["t1", "s1"], ["t1-refreshed", "s1"], ["t2", "s2"]]);
  const ended = new Set<string>();
  const sent: { path: string; token: string | null }[] = [];
  let refreshArrived!: () => void;
  const arrived = new Promise<void>((resolve) => (refreshArrived = resolve));
  let letRefreshGo!: () => void;
  const gate = new Promise<void>((resolve) => (letRefreshGo = resolve));
  const json = (body: object | null, status: number) =>
    new Response(body === null ? null : JSON.stringify(body), { status });
  const fakeFetch: typeof fetch = async (input, init) => {
    const path = new URL(String(input)).pathname;
    const authorization = new Headers(init?.headers).get("authorization") ?? "";
    const token = authorization.startsWith("Bearer ") ? authorization.slice("Bearer ".length) : null;
    sent.push({ path, token });
    if (path === "/api/v1/diner-sessions/") return json({ ...SESSION, token: "t2", diner_id: "guest_2" }, 201);
    const session = sessionOf.get(token ?? "");
    if (session === undefined || ended.has(session)) return json({ code: "SESSION_REVOKED", status: 401 }, 401);
    if (path === "/api/v1/diner-sessions/refresh/") {
      refreshArrived();
      await gate;
      return json({ ...SESSION, token: "t1-refreshed" }, 200);
    }
    if (path === "/api/v1/diner-sessions/end/") {
      ended.add(session);
      return json(null, 204);
    }
    return json({ count: 0, next: null, previous: null, results: [] }, 200);
  };
  const storage = memoryStorage();
  storage.setItem(entryOf("session"), JSON.stringify({ token: "t1", dinerId: "guest_1", expiresAt: Date.now() + 60_000 }));
  const client = new OrderingClient({ baseUrl: "http://api.test", publishableKey: "pk_test.secret", fetch: fakeFetch, storage });

  // when the diner signs out while the session's refresh is on its way, which answers after
  const refreshing = client.session();
  await arrived;
  const ending = client.endSession();
  letRefreshGo();
  await refreshing;
  await ending;
  const kept = storage.getItem(entryOf("session"));
  const signedOut = sent.length;
  const afterwards = await client.orders().then(() => "listed", String);

  // then nothing of the ended session is kept, and the next call opens a new guest (red: the
  // refresh's token stored after the sign-out, and the next call an ApiError 401)
  assert.equal(kept, null);
  assert.equal(afterwards, "listed");
  assert.deepEqual(
    sent.slice(signedOut).map((request) => request.path),
    ["/api/v1/diner-sessions/", "/api/v1/orders/"],
  );
  assert.deepEqual(sent.slice(signedOut).filter((request) => sessionOf.get(request.token ?? "") === "s1"), []);
  assert.equal(ended.has("s1"), true);
});

test("a 401 to an older session keeps the newer one another client stored meanwhile", async () => {
  // given a stored session t1, revoked on the server, and another client on the storage that
  // stores its new guest t2 while this client's list request (sent with t1) is on its way
  const newer = JSON.stringify({ token: "t2", dinerId: "guest_2", expiresAt: Date.now() + HOUR });
  const storage = memoryStorage();
  storage.setItem(entryOf("session"), JSON.stringify({ token: "t1", dinerId: "guest_1", expiresAt: Date.now() + HOUR }));
  const fakeFetch: typeof fetch = async (input, init) => {
    const token = new Headers(init?.headers).get("authorization");
    if (new URL(String(input)).pathname === "/api/v1/orders/" && token === "Bearer t1") {
      storage.setItem(entryOf("session"), newer);
      return new Response(JSON.stringify({ code: "SESSION_REVOKED", status: 401 }), { status: 401 });
    }
    return new Response(JSON.stringify({ count: 0, next: null, previous: null, results: [] }), { status: 200 });
  };
  const client = new OrderingClient({ baseUrl: "http://api.test", publishableKey: "pk_test.secret", fetch: fakeFetch, storage });

  // when the 401 answers the request sent with t1
  const refused = await client.orders().then(() => null, (error: unknown) => error);

  // then t1 is refused, and the newer session stays stored (red: the 401 removed it, and the
  // next call opened yet another guest)
  assert.ok(refused instanceof ApiError && refused.status === 401);
  assert.equal(storage.getItem(entryOf("session")), newer);
  assert.equal((await client.session()).token, "t2");
});

test("tokens that live less than the expiry margin serve a batch each", async () => {
  // given a deployment whose tokens live 30 minutes, under tokenKeys' hour of margin
  const issued: number[] = [];
  const orderKeys: (string | null)[] = [];
  const fakeFetch: typeof fetch = async (input, init) => {
    const path = new URL(String(input)).pathname;
    const now = Date.now();
    if (path === "/api/v1/diner-sessions/") return new Response(JSON.stringify(SESSION), { status: 201 });
    if (path === "/api/v1/idempotency-tokens/") {
      const { count } = JSON.parse(String(init?.body)) as { count: number };
      issued.push(count);
      const tokens = Array.from({ length: count }, (_, n) => `tok_${issued.length}_${n}`);
      const body = { tokens, expires_at: new Date(now + 1_800_000).toISOString(), ttl_seconds: 1800 };
      return new Response(JSON.stringify(body), { status: 201, headers: { Date: new Date(now).toUTCString() } });
    }
    orderKeys.push(new Headers(init?.headers).get("idempotency-key"));
    return placed();
  };
  const client = new OrderingClient({
    baseUrl: "http://api.test",
    publishableKey: "pk_test.secret",
    fetch: fakeFetch,
    keys: tokenKeys({ batchSize: 5 }),
  });

  // when three orders are placed
  for (const quantity of [1, 2, 3]) await client.placeOrder({ ...ORDER, items: [{ dish_id: 1, quantity }] });

  // then one batch serves them (red: a batch asked for each, and a UUID sent instead)
  assert.deepEqual(issued, [5]);
  assert.deepEqual(orderKeys, ["tok_1_0", "tok_1_1", "tok_1_2"]);
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

const sleepMs = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Storage objects over one set of items, each read taking a while: each call gives another
 * object, as two tabs' `localStorage` or two processes' views of one file are. */
function sharedItems(): () => KeyValueStorage {
  const items = new Map<string, string>();
  return () => ({
    getItem: async (key) => {
      const value = items.get(key) ?? null;
      await sleepMs(20);
      return value;
    },
    setItem: (key, value) => void items.set(key, value),
    removeItem: (key) => void items.delete(key),
  });
}

/** Clients of one fake server, one per storage, placing orders that take 30 ms (the first one
 * answered 503 with `failFirst`; one attempt each then); notes the keys sent, the most order
 * requests in flight at once and the guest sessions opened. */
function clientsOf(storages: KeyValueStorage[], failFirst = false) {
  const keys: (string | null)[] = [];
  let inFlight = 0;
  const seen = { maxInFlight: 0, sessions: 0 };
  const fakeFetch: typeof fetch = async (input, init) => {
    if (new URL(String(input)).pathname === "/api/v1/diner-sessions/") {
      seen.sessions++;
      return new Response(JSON.stringify(SESSION), { status: 201 });
    }
    keys.push(new Headers(init?.headers).get("idempotency-key"));
    seen.maxInFlight = Math.max(seen.maxInFlight, ++inFlight);
    await sleepMs(30);
    inFlight--;
    return failFirst && keys.length === 1 ? new Response("{}", { status: 503 }) : placed();
  };
  const clients = storages.map(
    (storage) =>
      new OrderingClient({
        baseUrl: "http://api.test",
        publishableKey: "pk_test.secret",
        fetch: fakeFetch,
        storage,
        retry: failFirst ? { maxAttempts: 1 } : {},
      }),
  );
  return { clients, keys, seen };
}

test("with navigator.locks, clients sharing storage through other objects (tabs) take turns", async () => {
  const names: string[] = [];
  const tails = new Map<string, Promise<unknown>>();
  const locks = {
    request<T>(name: string, callback: () => Promise<T>): Promise<T> {
      names.push(name);
      const held = (tails.get(name) ?? Promise.resolve()).then(() => callback());
      tails.set(name, held.catch(() => undefined));
      return held;
    },
  };
  const before = Object.getOwnPropertyDescriptor(globalThis, "navigator");
  Object.defineProperty(globalThis, "navigator", { value: { locks }, configurable: true });
  try {
    const tab = sharedItems();
    const { clients, keys, seen } = clientsOf([tab(), tab()]);

    await Promise.all(clients.map((client) => client.placeOrder(ORDER, { operationId: "cart-9" })));

    assert.equal(keys.length, 2);
    assert.equal(keys[1], keys[0]); // the second found the first's kept key
    assert.equal(seen.maxInFlight, 1);
    assert.ok(names.includes(entryOf("op:cart-9")) && names.includes(entryOf("session")), names.join());
  } finally {
    if (before) Object.defineProperty(globalThis, "navigator", before);
    else delete (globalThis as { navigator?: unknown }).navigator;
  }
});

test("without navigator.locks, clients take turns on one storage object, not on two over one data", async () => {
  assert.equal((globalThis as { navigator?: { locks?: unknown } }).navigator?.locks, undefined); // Node 20
  const oneObject = sharedItems()();
  const together = clientsOf([oneObject, oneObject]);
  await Promise.all(together.clients.map((client) => client.placeOrder(ORDER, { operationId: "cart-10" })));
  const byRequest = clientsOf([oneObject, oneObject]); // the default id: forgotten after the answer
  await Promise.all(byRequest.clients.map((client) => client.placeOrder(ORDER)));
  const unfinished = clientsOf([oneObject, oneObject], true); // the first one's outcome unknown
  const outcomes = await Promise.allSettled(unfinished.clients.map((client) => client.placeOrder(ORDER)));
  const fresh = sharedItems()(); // no session yet, two operations: one guest opened
  const twoCarts = clientsOf([fresh, fresh]);
  await Promise.all(twoCarts.clients.map((client, i) => client.placeOrder(ORDER, { operationId: `cart-${20 + i}` })));
  const view = sharedItems(); // two processes' views of one file
  const apart = clientsOf([view(), view()]);
  await Promise.all(apart.clients.map((client) => client.placeOrder(ORDER, { operationId: "cart-11" })));

  assert.deepEqual([together.keys.length, together.keys[1] === together.keys[0], together.seen.maxInFlight], [2, true, 1]);
  assert.deepEqual([byRequest.keys.length, byRequest.keys[1] === byRequest.keys[0], byRequest.seen.maxInFlight], [2, false, 1]);
  assert.deepEqual(outcomes.map((o) => o.status), ["rejected", "fulfilled"]);
  assert.deepEqual([unfinished.keys.length, unfinished.keys[1] === unfinished.keys[0]], [2, true]); // resumed
  assert.deepEqual([twoCarts.seen.sessions, twoCarts.seen.maxInFlight], [1, 2]);
  assert.deepEqual([apart.keys.length, apart.keys[1] === apart.keys[0], apart.seen.maxInFlight], [2, false, 2]);
});

test("the caller's own key with an unknown outcome is kept with its diner: another diner does not send it", async () => {
  const storage = memoryStorage();
  const unavailable = () => new Response("{}", { status: 503 });
  const { client, keys } = fakeApi([unavailable], { storage, retry: { maxAttempts: 1 } });

  const unknown = await client.placeOrder(ORDER, { idempotencyKey: "own-1" }).catch((e: unknown) => e);
  const stored = JSON.parse(storage.getItem(entryOf("key:own-1")) as string) as { key: string; dinerId: string };
  storage.setItem(entryOf("session"), JSON.stringify({ token: "t2", dinerId: "guest_2", expiresAt: Date.now() + HOUR }));
  const changed = await client.placeOrder(ORDER, { idempotencyKey: "own-1" }).catch((e: unknown) => e);

  assert.ok(unknown instanceof RetriesExhaustedError && unknown.idempotencyKey === "own-1", String(unknown));
  assert.deepEqual([stored.key, stored.dinerId], ["own-1", "guest_1"]);
  assert.ok(changed instanceof SessionChangedError, String(changed));
  assert.deepEqual([changed.previousDinerId, changed.dinerId], ["guest_1", "guest_2"]);
  assert.deepEqual(keys, ["own-1"]); // sent once, as guest_1
});

test("a note the server refuses for its combining marks names its operation without NFC", () => {
  // given a diner's note of a letter and 150,000 TIBETAN VOWEL SIGN II, which NFC sorts as
  // U+0F71 U+0F72 ... (25 s in V8; the server refuses it: 400 INVALID_JSON)
  const note = "a" + "\u0f73".repeat(150_000);
  const original = String.prototype.normalize;
  String.prototype.normalize = function (this: string, form?: string): string {
    assert.ok(this.length < 1000, "the whole note was put in NFC"); // red: seconds, not an id
    return original.call(this, form);
  };
  try {
    // then the operation is named without putting the note in NFC, and always alike
    const body = { ...ORDER, note };
    assert.equal(requestId("POST", "/api/v1/orders/", body), requestId("POST", "/api/v1/orders/", { ...body }));
  } finally {
    String.prototype.normalize = original;
  }
  // and a note sent decomposed still names the same operation as composed
  const composed = { ...ORDER, note: "caf\u00e9" };
  const decomposed = { ...ORDER, note: "cafe\u0301" };
  assert.equal(requestId("POST", "/api/v1/orders/", composed), requestId("POST", "/api/v1/orders/", decomposed));
});

test("a redirect is a final ApiError naming where it points: never followed, so a POST never becomes a GET", async () => {
  const { createServer } = await import("node:http");
  const seen: string[] = [];
  const server = createServer((request, response) => {
    seen.push(`${request.method} ${request.url}`);
    if (request.url === "/api/v1/diner-sessions/") {
      response.writeHead(201, { "Content-Type": "application/json" }).end(JSON.stringify(SESSION));
    } else if (request.url === "/api/v1/orders/") {
      response.writeHead(301, { Location: "/moved/api/v1/orders/" }).end();
    } else {
      response.writeHead(200, { "Content-Type": "application/json", "X-Idempotent-Result": "MISS" }).end("[]");
    }
  });
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
  const { port } = server.address() as { port: number };
  try {
    const storage = memoryStorage();
    const client = new OrderingClient({
      baseUrl: `http://127.0.0.1:${port}`,
      publishableKey: "pk_test.secret",
      storage,
      retry: { baseDelayMs: 10, maxDelayMs: 50 },
    });

    const error = await client.placeOrder(ORDER, { operationId: "cart-r" }).catch((e: unknown) => e);

    assert.ok(error instanceof ApiError && !(error instanceof RetriesExhaustedError), String(error));
    assert.equal(error.status, 301);
    assert.match(error.detail, /redirected to \/moved\/api\/v1\/orders\//);
    assert.deepEqual(seen, ["POST /api/v1/diner-sessions/", "POST /api/v1/orders/"]); // once, not followed
    assert.equal(storage.getItem(entryOf("op:cart-r")), null); // its key never reached the API
  } finally {
    await new Promise((closed) => server.close(closed));
  }
});
