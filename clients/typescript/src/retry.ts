/**
 * When to retry and how long to wait: exponential backoff with full jitter, `Retry-After` as a
 * floor, bounded by attempts and by total time.
 *
 * Full jitter (a uniformly random delay between 0 and the exponential cap) spreads the retries
 * of many clients that failed together, so they do not come back in one wave; `Retry-After` is
 * the server saying when trying again is worth it, so the client never comes back sooner.
 */
import type { ApiError, NetworkError } from "./errors.js";

export const IN_PROGRESS = "IDEMPOTENCY_REQUEST_IN_PROGRESS";

/** `maxAttempts` counts the first try; a wait that would end after `maxElapsedMs` (from the
 * first try) is not started, and each attempt's timeout is cut to what is left of it, so no
 * attempt runs past it. */
export interface RetryPolicy {
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  maxElapsedMs: number;
}

export const defaultRetryPolicy: Readonly<RetryPolicy> = Object.freeze({
  maxAttempts: 5,
  baseDelayMs: 500,
  maxDelayMs: 30_000,
  maxElapsedMs: 60_000,
});

/** Passed to `onRetry` before each wait: what failed and how long the client now waits. */
export interface RetryEvent {
  /** The attempt that failed (1 for the first). */
  attempt: number;
  delayMs: number;
  /** null for a network error. */
  status: number | null;
  code: string | null;
  retryAfterMs: number | null;
  error: ApiError | NetworkError;
}

/** Full-jitter delay before retry number `retry` (1 for the first retry). */
export function backoffMs(policy: RetryPolicy, retry: number, random: () => number = Math.random): number {
  return random() * Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (retry - 1));
}

/** The wait before retry `retry`: the jittered backoff, never less than `retryAfterMs`. */
export function retryDelayMs(
  policy: RetryPolicy,
  retry: number,
  retryAfterMs: number | null,
  random: () => number = Math.random,
): number {
  return Math.max(retryAfterMs ?? 0, backoffMs(policy, retry, random));
}

/** 408, 409 in progress, 429 and every 5xx; nothing else (another 4xx is a final answer,
 * stored under the key, that a retry would only replay). A 408 is a proxy's that tired of
 * waiting for the request: the server never had it, and the same key keeps a retry safe. */
export function isRetryableStatus(status: number, code: string | null): boolean {
  return status >= 500 || status === 408 || status === 429 || (status === 409 && code === IN_PROGRESS);
}

/** `Sun Nov  6 08:49:37 1994`: the one HTTP date form without a zone. */
const ASCTIME = /^[A-Za-z]{3} [A-Za-z]{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$/;

/** An HTTP date (any of RFC 9110's three forms) in epoch milliseconds; null if absent or
 * unreadable. */
export function parseHttpDate(value: string | null): number | null {
  if (!value) return null;
  const trimmed = value.trim();
  // RFC 9110's asctime form names no zone, and Date.parse would read it in the device's own
  // (off by hours, east or west of UTC); every HTTP date is in GMT.
  const when = Date.parse(ASCTIME.test(trimmed) ? `${trimmed} GMT` : trimmed);
  return Number.isNaN(when) ? null : when;
}

/** Milliseconds from a `Retry-After` header (delta-seconds or an HTTP date); null if absent or
 * unreadable. A date is counted from `now`: pass the answer's `Date` (`retryAfterOf`). */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | null {
  if (!value) return null;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const when = parseHttpDate(trimmed);
  return when === null ? null : Math.max(0, when - now);
}

/** Milliseconds an answer's `Retry-After` asks to wait. A date in it is on the server's clock
 * (or a proxy's), so it is counted from the answer's `Date`, not from this device's clock: a
 * phone an hour behind read "in a second" as an hour and gave up at once (a wait past
 * `maxElapsedMs` is not started), and one ahead did not wait at all. Only an answer without a
 * readable `Date` (a cross-origin one that does not expose it) is counted on this device's
 * clock. */
export function retryAfterOf(headers: Headers): number | null {
  return parseRetryAfter(headers.get("retry-after"), parseHttpDate(headers.get("date")) ?? Date.now());
}
