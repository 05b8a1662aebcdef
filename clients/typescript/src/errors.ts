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
 * `IDEMPOTENCY_REQUEST_IN_PROGRESS` and 429), or a retryable answer was the last one.
 * `code` is the machine-readable `code` of the problem+json body (null if it had none).
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
