/**
 * The client: a diner session, one idempotency key per operation, and safe retries.
 *
 * Every write is an *operation* with one `Idempotency-Key`. The key is made when the operation
 * starts, written to storage before the first byte is sent, reused by every retry, and
 * forgotten only when the server has given a final answer. So an answer lost on the way (a
 * dropped connection after the server committed) or an app killed mid-request ends the same
 * way: the next attempt — in this call, or after a restart with the same storage — carries the
 * same key, and the server replays its first answer instead of doing the work twice.
 *
 * Which stored key an operation takes is decided by `operationId`: by default the request
 * itself (method, path, and the body as the server's fingerprint reads it: key order, Unicode
 * normal form and a top-level null for an absent field make no difference), so calling
 * `placeOrder` again with the same order after a crash resumes it; pass your own (e.g. the
 * cart's id) to decide what "the same operation" means. A call of an operation this client is
 * still running (a double tap) sends nothing: it waits for the running call and returns its
 * result, or throws its error.
 *
 * A key is the diner's: the server scopes it to the session's diner. A stored key whose diner
 * is not the current session's (the guest session expired between a crash and the restart) is
 * not sent, since the server would run it again as another diner's first request:
 * `SessionChangedError` says so instead.
 *
 * Runtime needs: `fetch`, `AbortController`, `setTimeout` (browsers, React Native, Node ≥ 18).
 */
import {
  ApiError,
  IdempotencyKeyReusedError,
  NetworkError,
  RetriesExhaustedError,
  SessionChangedError,
  type Problem,
} from "./errors.js";
import type { components } from "./generated/openapi.js";
import { type IssuedTokens, type KeySource, uuidKeys } from "./keys.js";
import {
  defaultRetryPolicy,
  isRetryableStatus,
  parseRetryAfter,
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
  /** Per attempt, default 10 s. */
  timeoutMs?: number;
  /** Called before each wait between attempts. */
  onRetry?: (event: RetryEvent) => void;
  /** Refresh the session when less than this is left of it; default 5 min. */
  refreshMarginMs?: number;
  /** A stored key older than this is not resumed (an identical request that much later is a
   * new operation); default 1 h. */
  operationTtlMs?: number;
  /** Default `globalThis.fetch`. */
  fetch?: typeof fetch;
}

export interface WriteOptions {
  /** What makes two calls "the same operation"; default: the request itself. */
  operationId?: string;
  /** Use this key instead of a stored one (it is then not stored). */
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
  /** Epoch milliseconds. */
  expiresAt: number;
}

interface StoredOperation {
  key: string;
  createdAt: number;
  /** The diner the key was made for (absent in entries of earlier versions). */
  dinerId?: string;
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
  /** Stored entries are per restaurant: an app may hold clients of several. */
  private readonly prefix: string;
  private pendingSession: Promise<Session> | null = null;
  /** Operations running in this client, by storage entry: a second call of one joins it. */
  private readonly running = new Map<string, Promise<ApiResult<unknown>>>();

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.publishableKey = options.publishableKey;
    this.storage = options.storage ?? memoryStorage();
    this.keys = options.keys ?? uuidKeys();
    this.retry = { ...defaultRetryPolicy, ...options.retry };
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.onRetry = options.onRetry;
    this.refreshMarginMs = options.refreshMarginMs ?? 300_000;
    this.operationTtlMs = options.operationTtlMs ?? 3_600_000;
    this.fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.prefix = `ordering-client:${options.publishableKey.split(".")[0]}:`;
  }

  // --- reads ---------------------------------------------------------------------------

  async menu(): Promise<Dish[]> {
    return (await this.send<Dish[]>("GET", "/api/v1/menu/", { auth: this.keyAuth })).data;
  }

  /** This diner's orders, one page. */
  async orders(query: { status?: OrderStatus; page?: number } = {}): Promise<PaginatedOrders> {
    const params = new URLSearchParams();
    if (query.status) params.set("status", query.status);
    if (query.page) params.set("page", String(query.page));
    const suffix = params.toString() ? `?${params}` : "";
    return (await this.send<PaginatedOrders>("GET", `/api/v1/orders/${suffix}`, { auth: this.bearer })).data;
  }

  async order(orderId: string): Promise<Order> {
    return (await this.send<Order>("GET", `/api/v1/orders/${orderId}/`, { auth: this.bearer })).data;
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
   * `IdempotencyKeyReusedError` for a key reused with another payload, and
   * `RetriesExhaustedError` when the outcome is unknown (the key is kept).
   */
  async write<T>(path: string, body: unknown, options: WriteOptions = {}): Promise<ApiResult<T>> {
    const content = body === null || body === undefined ? "" : JSON.stringify(body);
    if (options.idempotencyKey !== undefined) {
      return this.send<T>("POST", path, { auth: this.bearer, content, key: options.idempotencyKey });
    }
    const entry = `${this.prefix}op:${options.operationId ?? requestId("POST", path, body)}`;
    const running = this.running.get(entry);
    if (running) return running as Promise<ApiResult<T>>; // a double tap: the first call's outcome
    const operation = this.operation<T>(entry, path, content).finally(() => this.running.delete(entry));
    this.running.set(entry, operation);
    return operation;
  }

  private async operation<T>(entry: string, path: string, content: string): Promise<ApiResult<T>> {
    const key = await this.operationKey(entry);
    try {
      const result = await this.send<T>("POST", path, { auth: this.bearer, content, key });
      await this.storage.removeItem(entry);
      return result;
    } catch (error) {
      if (error instanceof ApiError) await this.storage.removeItem(entry);
      throw error;
    }
  }

  /** Sign the diner out (`POST /api/v1/diner-sessions/end/`) and forget the session. */
  async endSession(): Promise<void> {
    if ((await this.storedSession()) !== null) {
      await this.send("POST", "/api/v1/diner-sessions/end/", { auth: this.bearer, content: "" });
    }
    await this.storage.removeItem(`${this.prefix}session`);
  }

  // --- the session ---------------------------------------------------------------------

  /**
   * The current session: the stored one, refreshed when close to expiry, or a new guest
   * session when there is none or it expired (an expired token cannot be refreshed).
   * Concurrent callers share one request.
   */
  session(): Promise<Session> {
    this.pendingSession ??= this.currentSession().finally(() => {
      this.pendingSession = null;
    });
    return this.pendingSession;
  }

  private async currentSession(): Promise<Session> {
    const session = await this.storedSession();
    const now = Date.now();
    if (session === null || session.expiresAt <= now) return this.openGuestSession();
    if (session.expiresAt - now > this.refreshMarginMs) return session;
    try {
      const answer = await this.send<Schemas["DinerSessionOut"]>("POST", "/api/v1/diner-sessions/refresh/", {
        auth: async () => bearerHeader(session.token),
        content: "",
      });
      return await this.saveSession(answer.data);
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return this.openGuestSession();
      throw error;
    }
  }

  private async openGuestSession(): Promise<Session> {
    const answer = await this.send<Schemas["DinerSessionOut"]>("POST", "/api/v1/diner-sessions/", {
      auth: this.keyAuth,
      content: "",
    });
    return this.saveSession(answer.data);
  }

  private async storedSession(): Promise<Session | null> {
    const raw = await this.storage.getItem(`${this.prefix}session`);
    return raw ? (JSON.parse(raw) as Session) : null;
  }

  private async saveSession(answer: Schemas["DinerSessionOut"]): Promise<Session> {
    const session = { token: answer.token, dinerId: answer.diner_id, expiresAt: Date.parse(answer.expires_at) };
    await this.storage.setItem(`${this.prefix}session`, JSON.stringify(session));
    return session;
  }

  private readonly keyAuth: Auth = async () => ({ Authorization: `Api-Key ${this.publishableKey}` });

  private readonly bearer: Auth = async () => bearerHeader((await this.session()).token);

  // --- keys ----------------------------------------------------------------------------

  /** The stored key of this operation, or a new one, stored before it is ever sent;
   * `SessionChangedError` when the stored one is another diner's (module comment). */
  private async operationKey(entry: string): Promise<string> {
    const { dinerId } = await this.session();
    const raw = await this.storage.getItem(entry);
    if (raw) {
      const stored = JSON.parse(raw) as StoredOperation;
      if (Date.now() - stored.createdAt < this.operationTtlMs) {
        const earlier = stored.dinerId ?? dinerId;
        if (earlier !== dinerId) throw new SessionChangedError(stored.key, earlier, dinerId);
        return stored.key;
      }
    }
    const key = await this.keys.nextKey(this.issueTokens, dinerId);
    const record: StoredOperation = { key, createdAt: Date.now(), dinerId };
    await this.storage.setItem(entry, JSON.stringify(record));
    return key;
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
    return { tokens: answer.data.tokens, expiresAt: Date.parse(answer.data.expires_at), dinerId };
  };

  // --- one request, retried ------------------------------------------------------------

  /**
   * Send until a final answer: retries network errors, 5xx, 409 in progress and 429 (waiting
   * at least `Retry-After`) within the policy's bounds; throws any other error answer at once.
   */
  private async send<T>(
    method: string,
    path: string,
    request: { auth: Auth; content?: string; key?: string; retry?: RetryPolicy },
  ): Promise<ApiResult<T>> {
    const policy = request.retry ?? this.retry;
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      const headers: Record<string, string> = { Accept: "application/json", ...(await request.auth()) };
      if (request.key !== undefined) headers["Idempotency-Key"] = request.key;
      if (request.content !== undefined) headers["Content-Type"] = "application/json";
      let error: ApiError | NetworkError;
      let retryAfterMs: number | null = null;
      const answer = await this.attempt(method, path, headers, request.content);
      if (answer instanceof NetworkError) {
        error = answer;
      } else {
        const { response, text } = answer;
        // A success answer to a request with a key comes from the API's idempotency engine,
        // which labels every one; any other (a captive portal's page) says nothing about the
        // operation: its outcome is unknown, retried with the same key.
        const fromTheApi = request.key === undefined || response.headers.has("x-idempotent-result");
        if (response.status < 400 && fromTheApi) {
          return {
            status: response.status,
            data: (text ? JSON.parse(text) : null) as T,
            body: text,
            headers: response.headers,
            idempotencyKey: request.key ?? null,
            replayed: response.headers.get("x-idempotent-result") === "HIT",
          };
        }
        if (response.status < 400) {
          error = new NetworkError(`a ${response.status} answer without X-Idempotent-Result: not the API's`, null);
        } else {
          error = apiError(response, text);
          if (error.status === 401 && headers["Authorization"]?.startsWith("Bearer ")) {
            // Revoked or expired under our feet: the next call opens a new session.
            await this.storage.removeItem(`${this.prefix}session`);
          }
          if (error instanceof IdempotencyKeyReusedError || !isRetryableStatus(error.status, error.code)) {
            throw error;
          }
          retryAfterMs = parseRetryAfter(response.headers.get("retry-after"));
        }
      }
      const delayMs = retryDelayMs(policy, attempt, retryAfterMs);
      if (attempt >= policy.maxAttempts || Date.now() - started + delayMs > policy.maxElapsedMs) {
        throw new RetriesExhaustedError(attempt, error, request.key ?? null);
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
  ): Promise<{ response: Response; text: string } | NetworkError> {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.timeoutMs);
    try {
      const response = await this.fetchImpl(`${this.baseUrl}${path}`, {
        method,
        headers,
        body: content,
        signal: abort.signal,
      });
      return { response, text: await response.text() };
    } catch (cause) {
      const reason = abort.signal.aborted ? `timed out after ${this.timeoutMs} ms` : String(cause);
      return new NetworkError(`${method} ${path}: ${reason}`, cause);
    } finally {
      clearTimeout(timer);
    }
  }
}

function bearerHeader(token: string): Record<string, string> {
  return { Authorization: `Bearer ${token}` };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
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
  const ErrorClass = code === KEY_REUSED ? IdempotencyKeyReusedError : ApiError;
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

/** JSON as the server's fingerprint reads it: keys sorted, strings in NFC. */
function canonicalJson(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value.normalize("NFC"));
  if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item ?? null)).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const members = Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => [k.normalize("NFC"), v] as const)
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
