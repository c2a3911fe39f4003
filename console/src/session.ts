/**
 * The API key of this browser tab's session: kept in sessionStorage only
 * (gone when the tab closes; never a cookie, never localStorage), and the
 * SDK client that uses it against the origin that served the page.
 */
import { Warren } from "../../sdk/typescript/src/client.js";

const KEY = "warren.apiKey";

/** The key signed in with, or "" when signed out. */
export function currentKey(): string {
  return sessionStorage.getItem(KEY) ?? "";
}

/** A client of the server that served the console, with key. */
export function clientFor(key: string): Warren {
  return new Warren({ url: location.origin, apiKey: key });
}

/** Check key against the server (a page of the caller's sandboxes, which
 * any valid key may list), then keep it; a WarrenError says why not. */
export async function signIn(key: string): Promise<void> {
  await clientFor(key).listPage({ limit: 1 });
  sessionStorage.setItem(KEY, key);
}

/** Forget the key. */
export function signOut(): void {
  sessionStorage.removeItem(KEY);
}

/** What a page is given: where to draw, the client, the key (for the
 * terminal's WebSocket), and a signal aborted when the reader leaves. */
export interface PageContext {
  main: HTMLElement;
  warren: Warren;
  key: string;
  signal: AbortSignal;
}
