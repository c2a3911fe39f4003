/**
 * The HTTP transport: URLs, the API key, timeouts, error answers and the
 * retry policy, over the global `fetch` (Node 18+, browsers).
 *
 * Retries follow the Python SDK's: a call is tried again only when repeating
 * it is safe, with a bounded exponential backoff (from `backoffMs`,
 * doubling up to 16 times it, with jitter; `attempts` tries in all).
 */
import { WarrenError, errorFromResponse } from "./errors.js";

/** When a failed call may be sent again. */
export enum Retry {
  /** Effects that must not happen twice, or a body that cannot be replayed. */
  Never,
  /** Only when the connection was refused: nothing was sent. */
  Refused,
  /** Repeating changes nothing: also after a broken connection, 502, 503. */
  Idempotent,
}

/** A query's parameters; undefined ones are left out. */
export type Query = Record<string, string | number | boolean | string[] | undefined>;

/** One call's description. */
export interface Call {
  method: string;
  /** The path, escaped (see `pathOf`). */
  path: string;
  query?: Query;
  json?: unknown;
  body?: BodyInit;
  retry?: Retry;
  /** Milliseconds before the call is abandoned (`timeout`); null: none.
   * Default: the client's. For a stream, until the answer's head. */
  timeoutMs?: number | null;
  accept?: string;
  headers?: Record<string, string>;
  /** A 404 after an attempt whose outcome is unknown is a success (a
   * repeated DELETE finds the thing gone). */
  goneIsDone?: boolean;
  /** Cancels the call, and the reading of its stream. */
  signal?: AbortSignal;
}

/** What the transport is made with. */
export interface TransportOptions {
  url: string;
  apiKey: string;
  timeoutMs: number;
  attempts: number;
  backoffMs: number;
  fetch: typeof fetch;
}

/** An escaped URL path of segments: pathOf("v1", "sandboxes", id). */
export function pathOf(...segments: string[]): string {
  return segments.map((s) => "/" + encodeURIComponent(s)).join("");
}

/** The query string of q (with its "?"), or "" when it has nothing: arrays
 * repeat the key, booleans are "true"/"false", undefined is left out. */
export function queryString(q: Query | undefined): string {
  if (!q) return "";
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined) continue;
    if (Array.isArray(v)) for (const x of v) params.append(k, x);
    else params.append(k, String(v));
  }
  const s = params.toString();
  return s ? "?" + s : "";
}

/** Whether a call of class kind may be repeated after an attempt that got
 * status (0: none), was refused, or timed out. */
export function retryable(kind: Retry, status: number, refused: boolean, timedOut: boolean): boolean {
  if (kind === Retry.Never) return false;
  if (status === 502 || status === 503) return kind === Retry.Idempotent;
  if (status || timedOut) return false;
  return refused || kind === Retry.Idempotent;
}

const ERROR_BODY_LIMIT = 64 << 10;

/** Sends the calls of one client to its server. */
export class Transport {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  private readonly key: string;
  private readonly attempts: number;
  private readonly backoffMs: number;
  private readonly fetchFn: typeof fetch;

  constructor(o: TransportOptions) {
    let u: URL;
    try {
      u = new URL(o.url);
    } catch {
      throw new WarrenError(`bad URL ${JSON.stringify(o.url)}: want http(s)://host[:port]`, "configuration");
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") {
      throw new WarrenError(`bad URL ${JSON.stringify(o.url)}: want http(s)://host[:port]`, "configuration");
    }
    this.baseUrl = o.url.replace(/\/+$/, "");
    this.key = o.apiKey;
    this.timeoutMs = o.timeoutMs;
    this.attempts = Math.max(1, o.attempts);
    this.backoffMs = Math.max(0, o.backoffMs);
    this.fetchFn = o.fetch;
  }

  /** The full URL of an escaped path and a query. */
  url(path: string, query?: Query): string {
    return this.baseUrl + path + queryString(query);
  }

  /** Milliseconds to wait after failed attempt number attempt (from 1). */
  delay(attempt: number): number {
    const d = this.backoffMs * (1 << Math.min(attempt - 1, 4));
    return d / 2 + Math.random() * (d / 2);
  }

  /** Send a call; its JSON answer (undefined for an empty body). */
  async json<T>(c: Call): Promise<T> {
    const res = await this.send(c);
    if (res === null) return undefined as T;
    const text = await readText(res, c);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** Send a call; its answer's body as bytes. */
  async bytes(c: Call): Promise<Uint8Array> {
    const res = await this.send(c);
    if (res === null) return new Uint8Array(0);
    try {
      return new Uint8Array(await res.arrayBuffer());
    } catch (e) {
      throw readError(e, c);
    }
  }

  /** Send a call and drop its answer's body. */
  async none(c: Call): Promise<void> {
    const res = await this.send(c);
    if (res !== null) await readText(res, c);
  }

  /** Send a call and return its 2xx answer, its body unread (null for a
   * 404 that goneIsDone makes a success); an error answer is thrown as its
   * WarrenError. The timeout covers the answer's head only: the caller
   * reads the body under `c.signal`. */
  async send(c: Call): Promise<Response | null> {
    const headers: Record<string, string> = { Accept: c.accept ?? "application/json", ...c.headers };
    if (this.key) headers["Authorization"] = "Bearer " + this.key;
    let body: BodyInit | undefined;
    if (c.json !== undefined) {
      body = JSON.stringify(c.json);
      headers["Content-Type"] = "application/json";
    } else if (c.body !== undefined) {
      body = c.body;
      headers["Content-Type"] = "application/octet-stream";
    }
    const streamed = typeof ReadableStream !== "undefined" && body instanceof ReadableStream;
    // A stream cannot be sent twice.
    const kind = streamed ? Retry.Never : (c.retry ?? Retry.Never);
    const tries = kind === Retry.Never ? 1 : this.attempts;
    const url = this.url(c.path, c.query);
    const timeoutMs = c.timeoutMs === undefined ? this.timeoutMs : c.timeoutMs;
    let unknown = false; // an earlier attempt may have reached the server
    for (let attempt = 1; ; attempt++) {
      const ctl = new AbortController();
      const timer = timeoutMs === null ? undefined : setTimeout(() => ctl.abort(), timeoutMs);
      const onAbort = () => ctl.abort();
      c.signal?.addEventListener("abort", onAbort);
      let status = 0;
      let refused = false;
      let timedOut = false;
      let err: WarrenError;
      try {
        const init: RequestInit & { duplex?: string } = { method: c.method, headers, body, signal: ctl.signal };
        if (streamed) init.duplex = "half";
        const res = await this.fetchFn(url, init);
        status = res.status;
        if (status >= 200 && status < 300) {
          // The body is the caller's now: the caller's signal (whose
          // listener stays) still cuts it, the timeout no longer.
          clearTimeout(timer);
          return res;
        }
        const text = await readLimited(res, ERROR_BODY_LIMIT);
        if (status === 404 && c.goneIsDone && unknown) return null;
        err = errorFromResponse(status, text, res.headers.get("X-Request-Id") ?? "");
      } catch (e) {
        if (c.signal?.aborted) {
          clearTimeout(timer);
          throw c.signal.reason ?? e;
        }
        if (ctl.signal.aborted) {
          timedOut = true;
          err = new WarrenError(`${c.method} ${c.path}: no answer from ${this.baseUrl} within ${timeoutMs} ms`, "timeout", 0, "", { cause: e });
        } else {
          refused = isRefused(e);
          err = new WarrenError(`${c.method} ${c.path}: connection to ${this.baseUrl} failed: ${describe(e)}`, "network", 0, "", { cause: e });
        }
      }
      clearTimeout(timer);
      c.signal?.removeEventListener("abort", onAbort);
      if (attempt >= tries || !retryable(kind, status, refused, timedOut)) throw err;
      unknown = unknown || (status === 0 && !refused);
      await sleep(this.delay(attempt), c.signal);
    }
  }
}

/** The body of res as text, read under the call's timeout. */
async function readText(res: Response, c: Call): Promise<string> {
  try {
    return await res.text();
  } catch (e) {
    throw readError(e, c);
  }
}

/** The error of a failed read of call c's answer. */
function readError(e: unknown, c: Call): unknown {
  if (c.signal?.aborted) return c.signal.reason ?? e;
  return new WarrenError(`${c.method} ${c.path}: connection broke while reading the answer: ${describe(e)}`, "network", 0, "", { cause: e });
}

/** At most limit bytes of an error answer's body, as text; "" when it
 * cannot be read. */
async function readLimited(res: Response, limit: number): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < limit) {
      const { done, value } = await reader.read();
      if (done) break;
      parts.push(value);
      size += value.length;
    }
  } catch {
    return "";
  } finally {
    reader.cancel().catch(() => undefined);
  }
  return new TextDecoder().decode(concat(parts, size).subarray(0, limit));
}

/** The bytes of parts, size in all, as one array. */
export function concat(parts: Uint8Array[], size: number): Uint8Array {
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p.subarray(0, size - at), at);
    at += Math.min(p.length, size - at);
  }
  return out;
}

/** Whether a fetch failure was a refused connection (Node says so in its
 * cause's code; a browser does not, and its failures count as unknown). */
function isRefused(e: unknown): boolean {
  const cause = (e as { cause?: { code?: unknown } } | null)?.cause;
  return cause?.code === "ECONNREFUSED";
}

/** A failure's message, with its cause's. */
export function describe(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  const cause = (e as { cause?: unknown } | null)?.cause;
  return cause instanceof Error ? `${msg} (${cause.message})` : msg;
}

/** Resolves after ms, or rejects when signal aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A new idempotency key: 32 hex digits, random (from the platform's
 * crypto where it has one, as Node 19+ and browsers do). */
export function newIdempotencyKey(): string {
  const b = new Uint8Array(16);
  const c = (globalThis as { crypto?: { getRandomValues?: (a: Uint8Array) => Uint8Array } }).crypto;
  if (c?.getRandomValues) c.getRandomValues(b);
  else for (let i = 0; i < b.length; i++) b[i] = Math.floor(Math.random() * 256);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}
