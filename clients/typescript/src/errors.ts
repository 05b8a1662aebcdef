/**
 * What the client throws. Catch `ApiError` for answers the server gave,
 * `RetriesExhaustedError` and `SessionChangedError` for operations whose outcome is still
 * unknown, and `OrderAlreadyPlacedError` for an order that exists already; never catch
 * `IdempotencyKeyReusedError` to retry it: it is a bug in the calling code.
 */
import type { components } from "./generated/openapi.js";

export type Problem = components["schemas"]["Problem"];

/** Base class of everything this client throws. */
export class OrderingError extends Error {
  override name = "OrderingError";
}

/**
 * The server answered with an error that retrying cannot change (a 4xx other than a proxy's
 * 408, 409 `IDEMPOTENCY_REQUEST_IN_PROGRESS` and 429). When retryable answers (5xx, 408, 409
 * in progress, 429) use up the attempts, `RetriesExhaustedError` is thrown instead, with the last one as
 * its `lastError`. `code` is the machine-readable `code` of the problem+json body (null if it had none).
 * A 401 answering an operation's key that may already have reached the server is a
 * `SessionChangedError` instead: the key must not be forgotten.
 */
export class ApiError extends OrderingError {
  override name = "ApiError";
  constructor(
    readonly status: number,
    readonly code: string | null,
    readonly detail: string,
    readonly problem: Partial<Problem> & Record<string, unknown>,
    readonly headers: Headers,
    readonly body: string,
  ) {
    super(`${status} ${code ?? ""}: ${detail}`);
  }
}

/**
 * 422 `IDEMPOTENCY_KEY_REUSED`: this key was already used for a *different* request.
 * A programming error, never a transient one: the calling code reused a key (or an
 * `operationId`) for another payload. Nothing was executed. A stored key that may already have
 * run the operation (kept after its success, or resumed with its outcome unknown) stays stored:
 * the `operationId` still stands for its first payload, which replays, and any other payload
 * under it is refused again. Fix the caller (a new `operationId` for a new payload); do not
 * retry.
 */
export class IdempotencyKeyReusedError extends ApiError {
  override name = "IdempotencyKeyReusedError";
}

/**
 * 409 `ORDER_ALREADY_PLACED`: this key already placed order `orderId`, but the server no longer
 * keeps that first answer (older than the restaurant's replay retention, 72 h by default, or
 * purged), so it cannot replay it. Nothing new was placed: the order exists, GET it
 * (`client.order(error.orderId)`; the `Location` header names it too). The operation is over
 * as if it had succeeded: a key kept for an `operationId` stays kept, so calling again gets
 * this answer again instead of placing another order.
 */
export class OrderAlreadyPlacedError extends ApiError {
  override name = "OrderAlreadyPlacedError";
  /** The order this key placed earlier. */
  readonly orderId: string;
  constructor(
    status: number,
    code: string | null,
    detail: string,
    problem: Partial<Problem> & Record<string, unknown>,
    headers: Headers,
    body: string,
  ) {
    super(status, code, detail, problem, headers, body);
    this.orderId = String(problem["order_id"] ?? "");
  }
}

/**
 * No answer: the connection failed, was reset, or timed out. The server may or may not have
 * executed the request; a retry with the same key finds out without doing it twice.
 */
export class NetworkError extends OrderingError {
  override name = "NetworkError";
  constructor(message: string, override readonly cause: unknown) {
    super(message);
  }
}

/**
 * Every allowed attempt failed transiently (network, 5xx, 408, 409 in progress, 429). The outcome
 * is unknown. The operation's key stays in storage: calling the same operation again (same
 * `operationId`, or the same request) reuses it, after an app restart too, so the server
 * replays its result if it did execute it.
 */
export class RetriesExhaustedError extends OrderingError {
  override name = "RetriesExhaustedError";
  constructor(
    readonly attempts: number,
    readonly lastError: ApiError | NetworkError,
    readonly idempotencyKey: string | null,
  ) {
    super(`gave up after ${attempts} attempts: ${lastError.message}`);
  }
}

/**
 * The operation's key was made for another diner than the current session's, so nothing is
 * sent: keys are scoped per diner, and the server would run the operation again as this
 * diner's first request. It happens when the session changes under an operation whose earlier
 * attempt may have executed:
 *
 * - a key resumed from storage (an app that crashed mid-request and restarted after its guest
 *   session expired), or a retry within one call after the session expired between attempts,
 *   or after the `sessionProvider` handed over another diner's session: `dinerId` is the new
 *   session's diner;
 * - a 401 (the session was revoked or ended) answering a key that may already have reached the
 *   server (resumed from storage, or an earlier attempt of this call got no final answer), and,
 *   with a `sessionProvider`, answering the provider's new session too: `dinerId` is
 *   `undefined`, no new session is open yet (the next call opens one).
 *
 * The outcome is unknown. The stored key stays until `operationTtlMs` runs out, so calling the
 * operation again throws this again rather than place it twice; to place the order anyway,
 * knowingly, call again with a new `operationId` (or `idempotencyKey`). A key that cannot have
 * reached the server yet (its first attempt not sent) is forgotten instead.
 */
export class SessionChangedError extends OrderingError {
  override name = "SessionChangedError";
  constructor(
    readonly idempotencyKey: string,
    /** The diner the key was made for. */
    readonly previousDinerId: string,
    /** The current session's diner; `undefined` after a 401, before a new session is opened. */
    readonly dinerId: string | undefined,
  ) {
    super(
      dinerId === undefined
        ? `operation started as diner ${previousDinerId}, whose session ended (401): not resent (its outcome is unknown)`
        : `operation started as diner ${previousDinerId}, now ${dinerId}: not resent (its outcome is unknown)`,
    );
  }
}
