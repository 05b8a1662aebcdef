// What the live tests are handed by their pytest driver (tests/clients/test_typescript_client.py):
// a live server, a proxy in front of it that can lose answers, and a control endpoint that
// injects the server-side faults (a held row lock, a full rate-limit window) and counts rows.
import { readFile, rename, writeFile } from "node:fs/promises";

import type { KeyValueStorage } from "../src/index.js";

export const live = process.env.API_URL
  ? {
      api: process.env.API_URL,
      proxy: process.env.PROXY_URL!,
      databaseOnly: process.env.DATABASE_ONLY_API_URL!,
      control: process.env.CONTROL_URL!,
      publishableKey: process.env.PUBLISHABLE_KEY!,
      /** The restaurant's secret key: the merchant's own server (it revokes diners' sessions). */
      merchantKey: process.env.MERCHANT_KEY!,
      /** How long a revocation takes to reach every worker of the server. */
      sessionStateCacheMs: Number(process.env.SESSION_STATE_CACHE_SECONDS) * 1000,
      dishId: Number(process.env.DISH_ID),
      leaseSeconds: Number(process.env.LEASE_SECONDS),
    }
  : null;

export async function control<T = unknown>(action: string, payload: object = {}): Promise<T> {
  const response = await fetch(`${live!.control}/${action}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(payload),
  });
  if (!response.ok) throw new Error(`control ${action}: ${response.status} ${await response.text()}`);
  return (await response.json()) as T;
}

export interface Dropped {
  status: number;
  result: string;
  body: string;
}

export function orderBody(quantity = 1) {
  return { items: [{ dish_id: live!.dishId, quantity }], payment_method: "card" as const };
}

/** One request the client sent, as the wire saw it. */
export interface Exchange {
  method: string;
  path: string;
  key: string | null;
  sent: number;
  answered: number;
  status: number | null; // null: no answer
  retryAfter: string | null;
}

/** The real `fetch`, noting every request and its answer (or its failure). */
export function recordingFetch(): { fetch: typeof fetch; log: Exchange[]; posts(path: string): Exchange[] } {
  const log: Exchange[] = [];
  const recording: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    const headers = new Headers(init?.headers);
    const entry = {
      method: init?.method ?? "GET",
      path: url.pathname,
      key: headers.get("idempotency-key"),
      sent: performance.now(),
    };
    try {
      const response = await fetch(input, init);
      log.push({ ...entry, answered: performance.now(), status: response.status, retryAfter: response.headers.get("retry-after") });
      return response;
    } catch (error) {
      log.push({ ...entry, answered: performance.now(), status: null, retryAfter: null });
      throw error;
    }
  };
  return { fetch: recording, log, posts: (path) => log.filter((e) => e.method === "POST" && e.path === path) };
}

/** An AsyncStorage-shaped store kept in a JSON file: what an app's storage looks like after a
 * restart (a new object reading the same file). */
export function fileAsyncStorage(path: string): KeyValueStorage & { entries(): Promise<Record<string, string>> } {
  const load = async (): Promise<Record<string, string>> => {
    try {
      return JSON.parse(await readFile(path, "utf8")) as Record<string, string>;
    } catch {
      return {};
    }
  };
  const save = async (items: Record<string, string>) => {
    await writeFile(`${path}.tmp`, JSON.stringify(items));
    await rename(`${path}.tmp`, path);
  };
  return {
    getItem: async (key) => (await load())[key] ?? null,
    setItem: async (key, value) => save({ ...(await load()), [key]: value }),
    removeItem: async (key) => {
      const items = await load();
      delete items[key];
      await save(items);
    },
    entries: load,
  };
}
