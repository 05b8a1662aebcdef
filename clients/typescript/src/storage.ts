/**
 * Where the client keeps what must survive a crash: the diner's session and the key of every
 * unfinished operation. An app killed after sending an order but before reading the answer
 * must, after a restart, send it again with the *same* key and the *same* diner (keys are
 * scoped per diner), or it orders twice.
 *
 * The interface is the common part of the browser's `localStorage` and React Native's
 * `AsyncStorage`, so either is passed as it is: `storage: window.localStorage` or
 * `storage: AsyncStorage`.
 */
export interface KeyValueStorage {
  getItem(key: string): string | null | Promise<string | null>;
  setItem(key: string, value: string): void | Promise<void>;
  removeItem(key: string): void | Promise<void>;
}

/** Keys live as long as the client object (the default): retries and later calls reuse them;
 * a restart forgets them. */
export function memoryStorage(): KeyValueStorage {
  const items = new Map<string, string>();
  return {
    getItem: (key) => items.get(key) ?? null,
    setItem: (key, value) => void items.set(key, value),
    removeItem: (key) => void items.delete(key),
  };
}
