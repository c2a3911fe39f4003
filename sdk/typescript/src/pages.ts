/** Lists a page at a time (docs/API.md, "Lists"). */
import type { Page, StatePageOptions } from "./models.js";
import { Retry, Transport, type Query } from "./transport.js";

/** The most items a page may hold (a directory listing's: 10000). */
export const MAX_LIST_LIMIT = 1000;

/** One page of the list at path, its items under key. */
export async function fetchPage<T>(
  t: Transport,
  path: string,
  key: string,
  o: StatePageOptions<string>,
  extra?: Query,
): Promise<Page<T>> {
  const state = Array.isArray(o.state) ? o.state.join(",") : o.state;
  const doc = await t.json<Record<string, unknown>>({
    method: "GET",
    path,
    query: { ...extra, state: state || undefined, limit: o.limit, page_token: o.page_token || undefined },
    retry: Retry.Idempotent,
  });
  return { items: (doc[key] as T[] | undefined) ?? [], next_page_token: (doc.next_page_token as string | undefined) || undefined };
}

/** Every item of a list, following its pages from page_token. */
export async function* iterate<T>(fetch: (token?: string) => Promise<Page<T>>, token?: string): AsyncGenerator<T> {
  do {
    const page = await fetch(token);
    yield* page.items;
    token = page.next_page_token;
  } while (token);
}

/** Every item of an async iterable, in an array. */
export async function all<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of items) out.push(x);
  return out;
}
