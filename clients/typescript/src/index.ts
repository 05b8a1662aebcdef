/**
 * A client of the ordering API that never orders twice: it opens a diner session, gives each
 * operation one `Idempotency-Key` kept across retries and app restarts, and retries with
 * exponential backoff and full jitter, honouring `Retry-After`. See README.md.
 */
export {
  OrderingClient,
  requestId,
  sessionFromAnswer,
  type ApiResult,
  type ClientOptions,
  type Dish,
  type Order,
  type OrderStatus,
  type OrderSummary,
  type PaginatedOrders,
  type PlaceOrderInput,
  type Session,
  type WriteOptions,
} from "./client.js";
export {
  ApiError,
  IdempotencyKeyReusedError,
  NetworkError,
  OrderAlreadyPlacedError,
  OrderingError,
  RetriesExhaustedError,
  SessionChangedError,
  type Problem,
} from "./errors.js";
export { randomUuid, tokenKeys, uuidKeys, type IssuedTokens, type KeySource, type TokenIssuer } from "./keys.js";
export {
  backoffMs,
  defaultRetryPolicy,
  isRetryableStatus,
  parseRetryAfter,
  retryDelayMs,
  type RetryEvent,
  type RetryPolicy,
} from "./retry.js";
export { memoryStorage, type KeyValueStorage } from "./storage.js";
export type { components, paths } from "./generated/openapi.js";
