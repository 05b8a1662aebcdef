/**
 * Where a new operation's `Idempotency-Key` comes from: a UUID v4 (the default) or one of the
 * server's pre-issued tokens, fetched in batches. A key is made once per *operation* and then
 * kept in storage; these sources are asked only when an operation starts.
 */
import { OrderingError } from "./errors.js";

/** A batch from `POST /api/v1/idempotency-tokens/`; tokens are bound to `dinerId`. */
export interface IssuedTokens {
  tokens: string[];
  expiresAt: number; // epoch milliseconds, on this device's clock (from the answer's Date)
  dinerId: string;
}

/** Asks the server for `count` tokens (the client passes its own). */
export type TokenIssuer = (count: number) => Promise<IssuedTokens>;

export interface KeySource {
  nextKey(issue: TokenIssuer, dinerId: string): Promise<string>;
  /** Forget the keys held: the server refused one as unknown or invalid before anything ran
   * (its Redis lost the batch). Optional: sources that hold none need not have it. */
  discardBatch?(): void;
}

/** A random UUID v4: `crypto.randomUUID` where it exists (browsers, Node), else from
 * `crypto.getRandomValues` (React Native with a polyfill), else `Math.random` (keys need to be
 * unique within one diner's scope, not secret). */
export function randomUuid(): string {
  const c = (globalThis as { crypto?: Partial<Crypto> }).crypto;
  if (typeof c?.randomUUID === "function") return c.randomUUID();
  const bytes = new Uint8Array(16);
  if (typeof c?.getRandomValues === "function") c.getRandomValues(bytes);
  else for (let i = 0; i < 16; i++) bytes[i] = Math.floor(Math.random() * 256);
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** A fresh UUID v4 per operation: no round trip, works in every server mode. */
export function uuidKeys(): KeySource {
  return { nextKey: async () => randomUuid() };
}

/**
 * Pre-issued tokens, `batchSize` per request, one per operation. The batch is dropped when the
 * session's diner changes (tokens are bound to a diner), and no token is handed out within
 * `expiryMarginMs` of its expiry, or within half the batch's life where tokens live less than
 * twice that (a deployment's `IDEMPOTENCY_TOKEN_TTL_SECONDS` of an hour or less would otherwise
 * leave no token usable, and a batch would be asked for, and wasted, for every operation). When
 * tokens cannot be had (503 while the server's Redis is
 * down, or any other failure) the operation gets a UUID v4: a token is a convenience, never a
 * reason for an order to fail. A token the server refuses as unknown or invalid before anything
 * ran (a Redis that came back without its data no longer knows the batch) makes the client drop
 * the batch (`discardBatch`) and send the operation once more with a new key.
 */
export function tokenKeys(options: { batchSize?: number; expiryMarginMs?: number } = {}): KeySource {
  const batchSize = options.batchSize ?? 20;
  const expiryMarginMs = options.expiryMarginMs ?? 3_600_000;
  if (!(batchSize >= 1 && batchSize <= 1000)) throw new RangeError("batchSize must be 1-1000");
  let batch: IssuedTokens = { tokens: [], expiresAt: 0, dinerId: "" };
  let marginMs = expiryMarginMs; // this batch's: at most half its life
  let refill: Promise<void> | null = null;
  const usable = (dinerId: string) =>
    batch.dinerId === dinerId && Date.now() < batch.expiresAt - marginMs && batch.tokens.length > 0;
  return {
    async nextKey(issue, dinerId) {
      if (!usable(dinerId)) {
        // One request at a time: concurrent operations wait for the same batch.
        refill ??= issue(batchSize)
          .then((issued) => {
            batch = { ...issued, tokens: [...issued.tokens] };
            marginMs = Math.min(expiryMarginMs, (issued.expiresAt - Date.now()) / 2);
          })
          .finally(() => void (refill = null));
        try {
          await refill;
        } catch (error) {
          if (!(error instanceof OrderingError)) throw error;
        }
      }
      return usable(dinerId) ? batch.tokens.shift()! : randomUuid();
    },
    discardBatch() {
      batch = { tokens: [], expiresAt: 0, dinerId: "" };
    },
  };
}
