/**
 * What the client throws. Catch `ApiError` for answers the server gave and
 * `RetriesExhaustedError` for operations whose outcome is still unknown; never catch
 * `IdempotencyKeyReusedError` to retry it: it is a bug in the calling code.
 */
import type { components } from "./generated/openapi.js";

export type Problem = components["schemas"]["Problem"];

/** Base class of everything this client throws. */
export class OrderingError extends Error {
  override name = "OrderingError";
}

/**
 * The server answered with an error that retrying cannot change (a 4xx other than 409
 * `IDEMPOTENCY_REQUEST_IN_PROGRESS` and 429). When retryable answers (5xx, 409 in progress,
 * 429) use up the attempts, `RetriesExhaustedError` is thrown instead, with the last one as
 * its `lastError`. `code` is the machine-readable `code` of the problem+json body (null if it had none).
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
 * `operationId`) for another payload. Nothing was executed; the client forgets the key it had
 * stored for the operation, so the next call makes a new one. Fix the caller; do not retry.
 */
export class IdempotencyKeyReusedError extends ApiError {
  override name = "IdempotencyKeyReusedError";
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
 * Every allowed attempt failed transiently (network, 5xx, 409 in progress, 429). The outcome
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
 * The operation has a stored key from an earlier attempt, made as another diner: that
 * attempt's guest session expired (an app that crashed mid-request and restarted after the
 * session's lifetime) and this client now acts as a new guest. The earlier attempt may have
 * executed; sending its key now would not replay it (keys are scoped per diner: the server
 * would run the operation again, as this diner's), so nothing is sent. The stored key stays
 * until `operationTtlMs` runs out; to place the order anyway, knowingly, call again with a new
 * `operationId` (or `idempotencyKey`).
 */
export class SessionChangedError extends OrderingError {
  override name = "SessionChangedError";
  constructor(
    readonly idempotencyKey: string,
    readonly previousDinerId: string,
    readonly dinerId: string,
  ) {
    super(`operation started as diner ${previousDinerId}, now ${dinerId}: not resent (its outcome is unknown)`);
  }
}
