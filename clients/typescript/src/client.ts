/**
 * The client: a diner session, one idempotency key per operation, and safe retries.
 *
 * Every write is an *operation* with one `Idempotency-Key`. The key is made when the operation
 * starts, written to storage before the first byte is sent, reused by every retry, and
 * forgotten only when the server has given a final answer. So an answer lost on the way (a
 * dropped connection after the server committed) or an app killed mid-request ends the same
 * way: the next attempt — in this call, or after a restart with the same storage — carries the
 * same key, and the server replays its first answer instead of doing the work twice. An
 * operation with your own `operationId` keeps its key after the final success too (until
 * `operationTtlMs`, the server's replay retention): an app killed after the call returned but
 * before it saved the result calls again and gets the replay, not a second order.
 *
 * Which stored key an operation takes is decided by `operationId`: by default the request
 * itself (method, path, and the body as the server's fingerprint reads it: key order, Unicode
 * normal form and a top-level null for an absent field make no difference), so calling
 * `placeOrder` again with the same order after a crash resumes it; pass your own (e.g. the
 * cart's id) to decide what "the same operation" means. A call of an operation this client is
 * still running (a double tap) sends nothing: it waits for the running call and returns its
 * result, or throws its error.
 * Another client sharing the storage (another tab) waits for the whole operation instead
 * (`locks.ts`), then finds its stored key: unfinished, it resumes it; kept, it gets the replay.
 *
 * A key is the diner's: the server scopes it to the session's diner. Every attempt of an
 * operation is sent as the diner its key was made for; when the current session's diner is
 * another (the guest session expired between a crash and the restart, or between two attempts
 * of one call), or a 401 says the session ended after an attempt whose outcome is unknown, the
 * key is not sent, since the server would run it again as another diner's first request:
 * `SessionChangedError` says so instead, and the key stays stored.
 *
 * Runtime needs: `fetch`, `AbortController`, `setTimeout` (browsers, React Native, Node ≥ 18).
 */
import {
  ApiError,
  IdempotencyKeyReusedError,
  NetworkError,
  OrderAlreadyPlacedError,
  RetriesExhaustedError,
  SessionChangedError,
  type Problem,
} from "./errors.js";
import type { components } from "./generated/openapi.js";
import { type IssuedTokens, type KeySource, uuidKeys } from "./keys.js";
import { withLock } from "./locks.js";
import {
  defaultRetryPolicy,
  isRetryableStatus,
  parseHttpDate,
  retryAfterOf,
  type RetryEvent,
  type RetryPolicy,
  retryDelayMs,
} from "./retry.js";
import { type KeyValueStorage, memoryStorage } from "./storage.js";

type Schemas = components["schemas"];
export type Dish = Schemas["Dish"];
export type Order = Schemas["OrderDetail"];
export type OrderSummary = Schemas["Order"];
export type OrderStatus = Schemas["OrderStatusEnum"];
export type PaginatedOrders = Schemas["PaginatedOrders"];
export type PlaceOrderInput = Schemas["PlaceOrderIn"];

const KEY_REUSED = "IDEMPOTENCY_KEY_REUSED";
const ALREADY_PLACED = "ORDER_ALREADY_PLACED";
const TOKEN_UNKNOWN = "IDEMPOTENCY_TOKEN_UNKNOWN";
const TOKEN_INVALID = "IDEMPOTENCY_TOKEN_INVALID";
/** How long the server replays a key's first answer by default (the restaurant's retention). */
const SERVER_REPLAY_MS = 72 * 3_600_000;
/** How every guest's diner id begins: the server makes them, and no merchant may name one so. */
const GUEST_PREFIX = "guest_";

export interface ClientOptions {
  /** e.g. `https://api.example.com` (no trailing `/api/v1`). */
  baseUrl: string;
  /** The restaurant's publishable key (it ships in the app; it only reads the menu and opens
   * guest sessions). */
  publishableKey: string;
  /** Keeps the session and unfinished operations' keys; default in memory. Pass
   * `localStorage` or `AsyncStorage` to survive restarts. */
  storage?: KeyValueStorage;
  /** Makes new keys; default `uuidKeys()`, or `tokenKeys()` for pre-issued tokens. */
  keys?: KeySource;
  retry?: Partial<RetryPolicy>;
  /** Per attempt, default 10 s; cut to what is left of `retry.maxElapsedMs`, so an attempt
   * never runs past it. */
  timeoutMs?: number;
  /** Called before each wait between attempts. */
  onRetry?: (event: RetryEvent) => void;
  /** Refresh the session when less than this is left of it; default 5 min. */
  refreshMarginMs?: number;
  /** A stored key older than this is not resumed (an identical request that much later is a
   * new operation), and a finished operation's kept key is pruned; default 72 h, the server's
   * default replay retention: a key resumed later would find no answer to replay. */
  operationTtlMs?: number;
  /** For a diner signed in to the restaurant's own backend, which opens their session with its
   * secret key (`sessionFromAnswer` of its answer): called instead of opening a guest session
   * (none stored, or the stored one expired or could not be refreshed), and its session
   * stored; when the server answers 401 for the session, called once more and the request
   * sent again with the new session, a key only as the diner it was made for. */
  sessionProvider?: () => Promise<Session>;
  /** Default `globalThis.fetch`. */
  fetch?: typeof fetch;
}

export interface WriteOptions {
  /** What makes two calls "the same operation"; default: the request itself. An operation with
   * its own id keeps its key after a final success (or `OrderAlreadyPlacedError`) until
   * `operationTtlMs`, so calling it again replays the first answer instead of running it again;
   * with the default id, the same request after a final answer is a new operation. */
  operationId?: string;
  /** Send this key of your own instead of the operation's. It is sent as the current session's
   * diner and stored with that diner while its outcome is unknown, like an operation's key:
   * sent again (after `RetriesExhaustedError` or `SessionChangedError`) by another diner, it is
   * not sent but throws `SessionChangedError`. A final answer forgets it. */
  idempotencyKey?: string;
}

/** A successful answer, exactly as the server sent it. */
export interface ApiResult<T> {
  status: number;
  data: T;
  /** The raw body text. */
  body: string;
  headers: Headers;
  idempotencyKey: string | null;
  /** The server replayed the first answer to this key (`X-Idempotent-Result: HIT`). */
  replayed: boolean;
}

export interface Session {
  token: string;
  dinerId: string;
  /** Epoch milliseconds, on this device's clock (counted from the answer's `Date`). */
  expiresAt: number;
}

interface StoredOperation {
  key: string;
  createdAt: number;
  /** The diner the key was made for (absent in entries of earlier versions). */
  dinerId?: string;
}

/** An operation's key as `send` carries it: every attempt goes out as `dinerId`, the diner the
 * key was made for. `mayHaveReached` is true once the key may have reached the server: resumed
 * from storage, or an attempt of this call ended without a final answer. */
interface KeyInFlight {
  readonly key: string;
  readonly dinerId: string;
  readonly createdAt: number;
  mayHaveReached: boolean;
}

type Auth = () => Promise<Record<string, string>>;

export class OrderingClient {
  readonly storage: KeyValueStorage;
  readonly keys: KeySource;
  readonly retry: RetryPolicy;
  private readonly baseUrl: string;
  private readonly publishableKey: string;
  private readonly timeoutMs: number;
  private readonly onRetry: ((event: RetryEvent) => void) | undefined;
  private readonly refreshMarginMs: number;
  private readonly operationTtlMs: number;
  private readonly fetchImpl: typeof fetch;
  private readonly sessionProvider: (() => Promise<Session>) | undefined;
  /** Stored entries are per restaurant: an app may hold clients of several. */
  private readonly prefix: string;
  private pendingSession: Promise<Session> | null = null;
  /** Operations running in this client, by storage entry: a second call of one joins it. */
  private readonly running = new Map<string, Promise<ApiResult<unknown>>>();
  /** Updates of the finished-operations index, one at a time (storage has no transactions). */
  private indexUpdates: Promise<unknown> = Promise.resolve();

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.publishableKey = options.publishableKey;
    this.storage = options.storage ?? memoryStorage();
    this.keys = options.keys ?? uuidKeys();
    this.retry = { ...defaultRetryPolicy, ...definedMembers(options.retry ?? {}) };
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.onRetry = options.onRetry;
    this.refreshMarginMs = options.refreshMarginMs ?? 300_000;
    this.operationTtlMs = options.operationTtlMs ?? SERVER_REPLAY_MS;
    this.fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.sessionProvider = options.sessionProvider;
    this.prefix = `ordering-client:${options.publishableKey.split(".")[0]}:`;
  }

  // --- reads ---------------------------------------------------------------------------

  async menu(): Promise<Dish[]> {
    return (await this.send<Dish[]>("GET", "/api/v1/menu/", { auth: this.keyAuth })).data;
  }

  /** This diner's orders, one page, newest first: `{ count, next, previous, results }`. The next
   * page's `cursor` is in the answer's `next` link (`previous`: the newer orders' page); pass it
   * with the same `status`: the cursor is a place, not the filter, so without it the page is of
   * every order. */
  async orders(query: { status?: OrderStatus; cursor?: string } = {}): Promise<PaginatedOrders> {
    const params = new URLSearchParams();
    if (query.status) params.set("status", query.status);
    if (query.cursor) params.set("cursor", query.cursor);
    const suffix = params.toString() ? `?${params}` : "";
    return (await this.send<PaginatedOrders>("GET", `/api/v1/orders/${suffix}`, { auth: this.bearer, renew: true }))
      .data;
  }

  async order(orderId: string): Promise<Order> {
    return (await this.send<Order>("GET", `/api/v1/orders/${orderId}/`, { auth: this.bearer, renew: true })).data;
  }

  // --- writes --------------------------------------------------------------------------

  placeOrder(order: PlaceOrderInput, options?: WriteOptions): Promise<ApiResult<Order>> {
    return this.write<Order>("/api/v1/orders/", order, options);
  }

  payOrder(orderId: string, options?: WriteOptions): Promise<ApiResult<Order>> {
    return this.write<Order>(`/api/v1/orders/${orderId}/pay/`, null, options);
  }

  cancelOrder(orderId: string, options?: WriteOptions): Promise<ApiResult<Order>> {
    return this.write<Order>(`/api/v1/orders/${orderId}/cancel/`, null, options);
  }

  /**
   * POST `body` to `path` as one operation (see the module comment). Throws `ApiError` for a
   * final error answer (the operation is over: its key is forgotten),
   * `IdempotencyKeyReusedError` for a key reused with another payload,
   * `OrderAlreadyPlacedError` when the key placed an order whose answer is no longer kept, and
   * `RetriesExhaustedError` or `SessionChangedError` when the outcome is unknown (the key is
   * kept).
   */
  async write<T>(path: string, body: unknown, options: WriteOptions = {}): Promise<ApiResult<T>> {
    const content = body === null || body === undefined ? "" : JSON.stringify(body);
    const own = options.idempotencyKey;
    if (own !== undefined) {
      checkOwnKey(own);
      // The caller's key, stored with its diner like an operation's. Calls with it take turns
      // rather than join: one with another payload gets its own answer (a 422).
      const entry = `${this.prefix}key:${own}`;
      return withLock(this.storage, entry, () => this.operation<T>(entry, path, content, false, own));
    }
    const entry = `${this.prefix}op:${options.operationId ?? requestId("POST", path, body)}`;
    const running = this.running.get(entry);
    if (running) return running as Promise<ApiResult<T>>; // a double tap: the first call's outcome
    const keep = options.operationId !== undefined;
    // Other clients sharing the storage wait for the whole operation (locks.ts), then find its
    // stored key, unfinished or kept, instead of making a second one.
    const operation = withLock(this.storage, entry, () => this.operation<T>(entry, path, content, keep)).finally(() =>
      this.running.delete(entry),
    );
    this.running.set(entry, operation);
    return operation;
  }

  private async operation<T>(
    entry: string,
    path: string,
    content: string,
    keep: boolean,
    own?: string,
  ): Promise<ApiResult<T>> {
    await this.pruneFinished();
    let key = await this.operationKey(entry, own);
    try {
      let result: ApiResult<T>;
      try {
        result = await this.send<T>("POST", path, { auth: this.bearerAs(key), content, key, renew: true });
      } catch (error) {
        if (own !== undefined || !tokenRefusedUnsent(error, key)) throw error;
        // A pre-issued token the server no longer knows (its Redis came back without its data)
        // or cannot verify, refused before anything ran: the rest of the batch is as stale, so
        // it goes, and the operation takes a new key once.
        this.keys.discardBatch?.();
        key = await this.newOperationKey(entry, key.dinerId);
        result = await this.send<T>("POST", path, { auth: this.bearerAs(key), content, key, renew: true });
      }
      await this.finished(entry, key, keep);
      return result;
    } catch (error) {
      if (error instanceof OrderAlreadyPlacedError) {
        await this.finished(entry, key, keep); // placed, as a success would have: kept alike
      } else if (error instanceof IdempotencyKeyReusedError && key.mayHaveReached) {
        // Another payload under a key that may already have run this operation (kept after its
        // success, or resumed with its outcome unknown): the key still stands for that first
        // payload, so it stays. Forgotten, the first payload sent again under this operation
        // would get a new key and run a second time.
      } else if (
        (error instanceof ApiError && (error.headers.has("x-idempotent-result") || !key.mayHaveReached)) ||
        (error instanceof SessionChangedError && !key.mayHaveReached)
      ) {
        // The key's own final answer (the engine labels it X-Idempotent-Result), or a key never
        // sent: nothing to protect. A refusal from before the engine (403 TENANT_SUSPENDED,
        // ...) to a key that may already have run says nothing of it: the key stays, so the
        // same call later replays instead of ordering again.
        await this.storage.removeItem(entry);
      }
      throw error;
    }
  }

  /** The operation got its final answer. With the caller's own `operationId` its key stays
   * (calling again replays the answer) and is indexed, so it is pruned once expired; else it
   * is forgotten. */
  private async finished(entry: string, key: KeyInFlight, keep: boolean): Promise<void> {
    if (!keep) return this.storage.removeItem(entry);
    await this.updateIndex((index) => void (index[entry] = key.createdAt));
  }

  /** Sign the diner out (`POST /api/v1/diner-sessions/end/`) and forget the session. A 401 says
   * the session has ended already (a retry after the sign-out's answer was lost, or a session
   * revoked or expired): the diner is signed out, not an error.
   *
   * It holds the session's lock, as opening and refreshing it do: a refresh on its way (of this
   * client, or of another sharing the storage) finishes first, and its token is the one ended
   * and forgotten. Without it the refresh's answer, arriving after the sign-out, stored a token
   * of the ended session, and the next call got a 401. A call made meanwhile waits its turn and
   * opens a new guest. */
  endSession(): Promise<void> {
    return withLock(this.storage, `${this.prefix}session`, async () => {
      const session = await this.storedSession();
      if (session !== null) {
        try {
          await this.send("POST", "/api/v1/diner-sessions/end/", {
            auth: async () => bearerHeader(session.token),
            content: "",
          });
        } catch (error) {
          if (!(error instanceof ApiError && error.status === 401)) throw error;
        }
      }
      await this.storage.removeItem(`${this.prefix}session`);
    });
  }

  // --- the session ---------------------------------------------------------------------

  /**
   * The current session: the stored one, refreshed when close to expiry, or a new one
   * (`newSession`) when there is none, it expired (an expired token cannot be refreshed) or its
   * refresh was refused. With a `sessionProvider`, a guest's session stored (the app's client
   * before the diner signed in) is not the diner's: the provider is asked instead. Concurrent
   * callers share one request.
   */
  session(): Promise<Session> {
    // One client at a time across those sharing the storage (locks.ts): they share one guest.
    this.pendingSession ??= withLock(this.storage, `${this.prefix}session`, () => this.currentSession()).finally(() => {
      this.pendingSession = null;
    });
    return this.pendingSession;
  }

  private async currentSession(): Promise<Session> {
    const session = await this.storedSession();
    const now = Date.now();
    const guestOfBefore = this.sessionProvider !== undefined && session?.dinerId.startsWith(GUEST_PREFIX);
    if (session === null || session.expiresAt <= now || guestOfBefore) return this.newSession();
    if (session.expiresAt - now > this.refreshMarginMs) return session;
    try {
      const answer = await this.send<Schemas["DinerSessionOut"]>("POST", "/api/v1/diner-sessions/refresh/", {
        auth: async () => bearerHeader(session.token),
        content: "",
      });
      return await this.saveSession(answer);
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return this.newSession();
      throw error;
    }
  }

  /** The `sessionProvider`'s session (a signed-in diner's), or else a new guest session, stored.
   * What the provider throws reaches the caller as it is. */
  private async newSession(): Promise<Session> {
    if (this.sessionProvider === undefined) {
      const answer = await this.send<Schemas["DinerSessionOut"]>("POST", "/api/v1/diner-sessions/", {
        auth: this.keyAuth,
        content: "",
      });
      return this.saveSession(answer);
    }
    const { token, dinerId, expiresAt } = await this.sessionProvider();
    const session = { token, dinerId, expiresAt };
    await this.storage.setItem(`${this.prefix}session`, JSON.stringify(session));
    return session;
  }

  /** Forget the stored session if it is the one whose token was refused: another client on
   * the storage may have stored a newer one meanwhile (a new guest), which stays. */
  private async forgetSession(refusedToken: string): Promise<void> {
    const session = await this.storedSession();
    if (session !== null && session.token === refusedToken) await this.storage.removeItem(`${this.prefix}session`);
  }

  private async storedSession(): Promise<Session | null> {
    const raw = await this.storage.getItem(`${this.prefix}session`);
    return raw ? (JSON.parse(raw) as Session) : null;
  }

  private async saveSession({ data, headers }: ApiResult<Schemas["DinerSessionOut"]>): Promise<Session> {
    const session = sessionFromAnswer(data, headers);
    await this.storage.setItem(`${this.prefix}session`, JSON.stringify(session));
    return session;
  }

  private readonly keyAuth: Auth = async () => ({ Authorization: `Api-Key ${this.publishableKey}` });

  private readonly bearer: Auth = async () => bearerHeader((await this.session()).token);

  /** The session's token, read before each attempt, as long as its diner is the key's: a
   * session that expired between two attempts opens a new guest, and sending the key as that
   * diner would run the operation again (keys are scoped per diner). A refreshed session keeps
   * its diner and is used. */
  private bearerAs(key: KeyInFlight): Auth {
    return async () => {
      const session = await this.session();
      if (session.dinerId !== key.dinerId) throw new SessionChangedError(key.key, key.dinerId, session.dinerId);
      return bearerHeader(session.token);
    };
  }

  // --- keys ----------------------------------------------------------------------------

  /** The stored key of this operation, or a new one (`own`, the caller's, if given), stored
   * before it is ever sent; `SessionChangedError` when the stored one is another diner's
   * (module comment). */
  private async operationKey(entry: string, own?: string): Promise<KeyInFlight> {
    const { dinerId } = await this.session();
    const raw = await this.storage.getItem(entry);
    if (raw) {
      const stored = JSON.parse(raw) as StoredOperation;
      if (Date.now() - stored.createdAt < this.operationTtlMs) {
        const earlier = stored.dinerId ?? dinerId;
        if (earlier !== dinerId) throw new SessionChangedError(stored.key, earlier, dinerId);
        return { key: stored.key, dinerId, createdAt: stored.createdAt, mayHaveReached: true };
      }
    }
    return this.newOperationKey(entry, dinerId, own);
  }

  /** A new key for the operation (`own`, the caller's, if given), stored before it is ever
   * sent. */
  private async newOperationKey(entry: string, dinerId: string, own?: string): Promise<KeyInFlight> {
    const key = own ?? (await this.keys.nextKey(this.issueTokens, dinerId));
    const record: StoredOperation = { key, createdAt: Date.now(), dinerId };
    await this.storage.setItem(entry, JSON.stringify(record));
    return { key, dinerId, createdAt: record.createdAt, mayHaveReached: false };
  }

  // --- finished operations kept (own operationId) --------------------------------------

  /** Storage has no listing: this entry maps each kept finished operation's entry to its
   * key's `createdAt`, so expired ones can be found and removed. */
  private get indexEntry(): string {
    return `${this.prefix}finished`;
  }

  /** Read, change and write the index, one change at a time in this client. */
  private updateIndex(change: (index: Record<string, number>) => void | Promise<void>): Promise<void> {
    const update = this.indexUpdates.then(async () => {
      const raw = await this.storage.getItem(this.indexEntry);
      const index = raw ? (JSON.parse(raw) as Record<string, number>) : {};
      await change(index);
      const changed = JSON.stringify(index);
      if (changed === (raw ?? "{}")) return; // most operations: nothing to write
      if (changed !== "{}") await this.storage.setItem(this.indexEntry, changed);
      else await this.storage.removeItem(this.indexEntry);
    });
    this.indexUpdates = update.catch(() => undefined);
    return update;
  }

  /** Remove the kept finished operations older than `operationTtlMs` (run as each operation
   * starts), so storage does not grow with every order ever placed. An entry that holds a
   * newer key by now (the operation ran again) or belongs to a running operation stays. */
  private pruneFinished(): Promise<void> {
    const now = Date.now();
    return this.updateIndex(async (index) => {
      for (const [entry, createdAt] of Object.entries(index)) {
        if (now - createdAt < this.operationTtlMs || this.running.has(entry)) continue;
        delete index[entry];
        const raw = await this.storage.getItem(entry);
        const stored = raw ? (JSON.parse(raw) as StoredOperation) : null;
        if (stored !== null && now - stored.createdAt >= this.operationTtlMs) await this.storage.removeItem(entry);
      }
    });
  }

  /** One request for `count` pre-issued tokens, not retried (the key source falls back to a
   * UUID when it fails). */
  private readonly issueTokens = async (count: number): Promise<IssuedTokens> => {
    const { dinerId } = await this.session();
    const answer = await this.send<Schemas["IssuedTokensOut"]>("POST", "/api/v1/idempotency-tokens/", {
      auth: this.bearer,
      content: JSON.stringify({ count }),
      retry: { ...this.retry, maxAttempts: 1 },
    });
    return { tokens: answer.data.tokens, expiresAt: onThisClock(answer.data.expires_at, answer.headers), dinerId };
  };

  // --- one request, retried ------------------------------------------------------------

  /**
   * Send until a final answer: retries network errors, timeouts, answers that are not the
   * API's, 5xx, 408, 409 in progress and 429 (waiting at least `Retry-After`) within the policy's
   * bounds; throws any other error answer at once. With an operation's `key`, each attempt is
   * sent as the key's diner (`auth` throws `SessionChangedError` otherwise), and a 401 after
   * the key may have reached the server is a `SessionChangedError` too: the key must stay.
   * `renew` (a request whose `auth` reads the current session): a 401 for the session, with a
   * `sessionProvider`, sends it once more as the provider's new session.
   */
  private async send<T>(
    method: string,
    path: string,
    request: { auth: Auth; content?: string; key?: KeyInFlight; retry?: RetryPolicy; renew?: boolean },
  ): Promise<ApiResult<T>> {
    const policy = request.retry ?? this.retry;
    const key = request.key;
    let renewed = false;
    // Counted from the first attempt: opening the session before it is a request of its own.
    let started: number | null = null;
    let lastError: ApiError | NetworkError | null = null;
    for (let attempt = 1; ; attempt++) {
      const headers: Record<string, string> = { Accept: "application/json", ...(await request.auth()) };
      if (key !== undefined) headers["Idempotency-Key"] = key.key;
      if (request.content !== undefined) headers["Content-Type"] = "application/json";
      started ??= monotonicMs();
      // No attempt runs past maxElapsedMs: its timeout is cut to the time left.
      const leftMs = policy.maxElapsedMs - (monotonicMs() - started);
      if (lastError !== null && leftMs <= 0) throw new RetriesExhaustedError(attempt - 1, lastError, key?.key ?? null);
      let error: ApiError | NetworkError;
      let retryAfterMs: number | null = null;
      const answer = await this.attempt(method, path, headers, request.content, Math.max(0, Math.min(this.timeoutMs, leftMs)));
      if (answer instanceof NetworkError) {
        error = answer;
      } else {
        const { response, text } = answer;
        // A success answer to a request with a key comes from the API's idempotency engine,
        // which labels every one, and every answer of the API is JSON; any other (a captive
        // portal's page) says nothing about the request: its outcome is unknown, retried
        // (with the same key).
        const fromTheApi = key === undefined || response.headers.has("x-idempotent-result");
        const redirected = isRedirect(response);
        const data = response.status < 400 && !redirected && fromTheApi ? jsonOf(text) : NOT_JSON;
        if (data !== NOT_JSON) {
          return {
            status: response.status,
            data: data as T,
            body: text,
            headers: response.headers,
            idempotencyKey: key?.key ?? null,
            replayed: response.headers.get("x-idempotent-result") === "HIT",
          };
        }
        // A redirect (an http:// address answered by a proxy that sends clients to https://) is
        // final: nothing behind it ran the request, and following it could turn a POST into a GET.
        if (redirected) throw redirectedError(method, response, text);
        if (response.status < 400) {
          const why = fromTheApi ? "whose body is not JSON" : "without X-Idempotent-Result";
          error = new NetworkError(`a ${response.status} answer ${why}: not the API's`, null);
        } else {
          error = apiError(response, text);
          if (error.status === 401 && headers["Authorization"]?.startsWith("Bearer ")) {
            // Revoked or expired under our feet: the next call opens a new session.
            await this.forgetSession(headers["Authorization"].slice("Bearer ".length));
            if (request.renew && this.sessionProvider !== undefined && !renewed) {
              // A signed-in diner's session ended; the provider's new one is most likely the same
              // diner's, whose key the server replays (a key goes only as its own diner:
              // bearerAs). Once: a provider handing over an ended session gets its 401 thrown.
              renewed = true;
              continue;
            }
            // The key may have done its work already, as this diner's: forgetting it would let
            // the next call, as a new guest, run the operation again.
            if (key?.mayHaveReached) throw new SessionChangedError(key.key, key.dinerId, undefined);
          }
          if (error instanceof IdempotencyKeyReusedError || !isRetryableStatus(error.status, error.code)) {
            throw error;
          }
          retryAfterMs = retryAfterOf(response.headers);
        }
      }
      // No final answer: the server may have executed this attempt.
      if (key !== undefined) key.mayHaveReached = true;
      lastError = error;
      const delayMs = retryDelayMs(policy, attempt, retryAfterMs);
      if (attempt >= policy.maxAttempts || monotonicMs() - started + delayMs > policy.maxElapsedMs) {
        throw new RetriesExhaustedError(attempt, error, key?.key ?? null);
      }
      this.onRetry?.({
        attempt,
        delayMs,
        status: error instanceof ApiError ? error.status : null,
        code: error instanceof ApiError ? error.code : null,
        retryAfterMs,
        error,
      });
      await sleep(delayMs);
    }
  }

  /** One attempt within `timeoutMs`, body included; a failure to get an answer is a
   * `NetworkError` (returned, not thrown). */
  private async attempt(
    method: string,
    path: string,
    headers: Record<string, string>,
    content: string | undefined,
    timeoutMs: number,
  ): Promise<{ response: Response; text: string } | NetworkError> {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), timeoutMs);
    try {
      const response = await this.fetchImpl(`${this.baseUrl}${path}`, {
        method,
        headers,
        body: content,
        redirect: "manual",
        signal: abort.signal,
      });
      return { response, text: await response.text() };
    } catch (cause) {
      const reason = abort.signal.aborted ? `timed out after ${timeoutMs} ms` : String(cause);
      return new NetworkError(`${method} ${path}: ${reason}`, cause);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** Refuse a key of the caller's own with a character outside printable ASCII (0x20-0x7E),
 * before anything is stored or sent: the API refuses such a key (docs/idempotency.md), and
 * `fetch` cannot put one beyond Latin-1 or with a control character (a newline) in a header. It
 * failed every attempt as a network error, retried into `RetriesExhaustedError`, which says the
 * outcome is unknown, for a request that never left the device. */
function checkOwnKey(key: string): void {
  if (!/^[\x20-\x7e]*$/.test(key)) {
    throw new RangeError(`idempotencyKey must be printable ASCII (0x20-0x7E): ${JSON.stringify(key)}`);
  }
}

/** Whether the server refused a pre-issued token as unknown (expired, or lost by a Redis that
 * came back empty) or invalid, to the first attempt of a key never sent before: the refusal came
 * before any claim, and no earlier attempt can have run the operation, so a new key cannot make
 * it run twice. Any other attempt's refusal is final as it is. */
function tokenRefusedUnsent(error: unknown, key: KeyInFlight): boolean {
  return (
    error instanceof ApiError &&
    (error.code === TOKEN_UNKNOWN || error.code === TOKEN_INVALID) &&
    key.key.startsWith("tok_") &&
    !key.mayHaveReached
  );
}

/** How far apart this device's clock and the server's may be and still be taken as one: an
 * answer's `Date` is in whole seconds and reaches the device after the network's delay, so a
 * smaller difference measured is noise, and it is well inside the refresh margin. */
const CLOCK_TOLERANCE_MS = 60_000;

/** The server's `expiresAt` (ISO 8601, on the server's clock) as an instant of this device's
 * clock (`Date.now()`), which is all the client compares it with. A phone's clock may be hours
 * off: read as it is, an expiry seemed past on a clock a day ahead (every call opened a new
 * guest session, and an operation's attempt met another diner) and far off on one behind. So
 * when the answer's `Date` (the server's clock as it answered) is `CLOCK_TOLERANCE_MS` or more
 * away from this clock, the expiry is moved by that difference. An answer without a readable
 * `Date` (a cross-origin one that does not expose it) is taken as said. `Date` is read in GMT in
 * each of RFC 9110's forms (`parseHttpDate`): an asctime date (which names no zone) read in the
 * device's own zone moved the expiry by the device's distance from UTC. */
function onThisClock(expiresAt: string, headers: Headers): number {
  const expires = Date.parse(expiresAt);
  const answered = parseHttpDate(headers.get("date"));
  if (answered === null) return expires;
  const aheadMs = Date.now() - answered; // how far this clock is ahead of the server's
  return Math.abs(aheadMs) < CLOCK_TOLERANCE_MS ? expires : expires + aheadMs;
}

/** `options` without its members that are `undefined`. The type of an option (`Partial<...>`)
 * lets an app pass a setting it lacks as `undefined`, and spread as given that replaced the
 * default: `retry: { maxAttempts: undefined, baseDelayMs: undefined }` bounded no attempt and
 * waited NaN ms between them, hundreds of requests a second against a server answering 503. */
function definedMembers<T extends object>(options: T): Partial<T> {
  return Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined)) as Partial<T>;
}

/** The session in an answer of `POST /api/v1/diner-sessions/` (or its refresh), its expiry on this
 * device's clock counted from the answer's `Date` in `headers` (`onThisClock`); without them, as
 * said. For a `sessionProvider`: the restaurant's backend opens the session and passes on the
 * answer's body and its `Date`. */
export function sessionFromAnswer(
  answer: { token: string; diner_id: string; expires_at: string },
  headers: Headers = new Headers(),
): Session {
  return { token: answer.token, dinerId: answer.diner_id, expiresAt: onThisClock(answer.expires_at, headers) };
}

function bearerHeader(token: string): Record<string, string> {
  return { Authorization: `Bearer ${token}` };
}

/**
 * Milliseconds on a clock that only moves forward, for the time retries may take
 * (`maxElapsedMs`): the wall clock (`Date.now()`) moves when the device corrects it, and set an
 * hour forward between two attempts it made the client give up at once, as if an hour of
 * retrying had passed. `performance.now()` (browsers, React Native, Node) where there is one.
 */
function monotonicMs(): number {
  return typeof performance !== "undefined" ? performance.now() : Date.now();
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

const NOT_JSON: unique symbol = Symbol("not JSON");

/** The body's JSON value (null for an empty body), or `NOT_JSON`. */
function jsonOf(text: string): unknown {
  if (!text) return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return NOT_JSON;
  }
}

/** Whether the answer is a redirect, which `redirect: "manual"` hands back instead of following:
 * a 3xx with its `Location` (Node), or an opaque one with none (a browser). */
function isRedirect(response: Response): boolean {
  return response.type === "opaqueredirect" || (response.status >= 300 && response.status < 400);
}

/** A redirect as the final `ApiError` it is: a client told the wrong address (`http://` where
 * the API is served over `https://`, a path behind another prefix) must be told so, not retry
 * into `RetriesExhaustedError`, and never follow it: `fetch` turns a POST redirected by 301 or
 * 302 into a GET. */
function redirectedError(method: string, response: Response, text: string): ApiError {
  const location = response.headers.get("location");
  const detail = `${method} redirected${location ? ` to ${location}` : ""}: not followed; set baseUrl to the API's own address`;
  return new ApiError(response.status, null, detail, {}, response.headers, text);
}

function apiError(response: Response, text: string): ApiError {
  let problem: Partial<Problem> & Record<string, unknown> = {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) problem = parsed as typeof problem;
  } catch {
    // not JSON (a proxy's HTML page): keep the status alone
  }
  const code = typeof problem.code === "string" ? problem.code : null;
  const detail = typeof problem.detail === "string" ? problem.detail : response.statusText;
  const ErrorClass =
    code === KEY_REUSED ? IdempotencyKeyReusedError : code === ALREADY_PLACED ? OrderAlreadyPlacedError : ApiError;
  return new ErrorClass(response.status, code, detail, problem, response.headers, text);
}

/** The default operation id: the request itself, its body in canonical form, hashed to a
 * short storage key (two 53-bit cyrb53 hashes; no `crypto.subtle`, which React Native lacks). */
export function requestId(method: string, path: string, body: unknown): string {
  const top =
    body !== null && typeof body === "object" && !Array.isArray(body)
      ? Object.fromEntries(Object.entries(body).filter(([, v]) => v !== null && v !== undefined))
      : body;
  const text = `${method} ${path}\n${canonicalJson(top ?? {})}`;
  return cyrb53(text, 1).toString(16).padStart(14, "0") + cyrb53(text, 2).toString(16).padStart(14, "0");
}

/** Combining marks in a row past which the server refuses a string (400 INVALID_JSON):
 * Unicode's stream-safe limit, past which NFC costs time in the square of the run's length. */
const MAX_NON_STARTERS = 30;
const MARK = /\p{M}/u;

/** `text` in NFC, unless it holds a run of combining marks the server refuses (counted as NFC
 * decomposes them): putting that one in NFC held the app for seconds to minutes (150 KB of
 * TIBETAN VOWEL SIGN II took 25 s) to name an operation the server answers 400 anyway. */
function nfc(text: string): string {
  let run = 0;
  for (const char of text) {
    if (char < "\u0300") {
      run = 0;
      continue;
    }
    for (const part of char.normalize("NFD")) {
      run = MARK.test(part) ? run + 1 : 0;
      if (run > MAX_NON_STARTERS) return text;
    }
  }
  return text.normalize("NFC");
}

/** JSON as the server's fingerprint reads it: keys sorted, strings in NFC. */
function canonicalJson(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(nfc(value));
  if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item ?? null)).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const members = Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => [nfc(k), v] as const)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${members.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

function cyrb53(text: string, seed: number): number {
  let h1 = 0xdeadbeef ^ seed;
  let h2 = 0x41c6ce57 ^ seed;
  for (let i = 0; i < text.length; i++) {
    const ch = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ ch, 2654435761);
    h2 = Math.imul(h2 ^ ch, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}
