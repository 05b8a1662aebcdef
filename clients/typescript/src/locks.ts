/**
 * One holder at a time of a storage entry, across the clients that share the storage: two
 * clients (two browser tabs on one `localStorage`, or two `OrderingClient`s on one store) that
 * both start an operation find no stored key, make two different keys and both place the order,
 * unless the second waits until the first has stored its key (or finished).
 *
 * With the Web Locks API (`navigator.locks`, in browsers) the lock is the origin's, so it holds
 * across its tabs and workers; the lock's name is the entry's. Without it (Node 20, React
 * Native) a registry of this module stands in: it is per JavaScript realm, and keyed by the
 * storage object and the entry, so only clients of one realm given the same storage object take
 * turns; two realms or processes sharing the data behind two storage objects do not.
 */

/** The part of the Web Locks API used here: the callback holds the lock until it settles. */
interface WebLocks {
  request<T>(name: string, callback: () => Promise<T>): Promise<T>;
}

/** `navigator.locks` where it exists, read at each use (a test may install one). */
export function webLocks(): WebLocks | null {
  const locks = (globalThis as { navigator?: { locks?: { request?: unknown } } }).navigator?.locks;
  return typeof locks?.request === "function" ? (locks as WebLocks) : null;
}

/** Per storage object, the last holder (or waiter) of each entry's lock. */
const registry = new WeakMap<object, Map<string, Promise<void>>>();

/** Run `critical` holding the lock of `name` over `storage`: Web Locks where they exist, else
 * this realm's registry; waits for the current holder first. */
export function withLock<T>(storage: object, name: string, critical: () => Promise<T>): Promise<T> {
  const locks = webLocks();
  if (locks !== null) return locks.request(name, () => critical());
  let held = registry.get(storage);
  if (held === undefined) registry.set(storage, (held = new Map()));
  const entries = held;
  const result = (entries.get(name) ?? Promise.resolve()).then(critical);
  const released: Promise<void> = result.then(
    () => undefined,
    () => undefined,
  );
  entries.set(name, released);
  void released.then(() => {
    if (entries.get(name) === released) entries.delete(name);
  });
  return result;
}
