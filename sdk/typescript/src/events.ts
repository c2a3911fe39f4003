/**
 * The events stream (docs/API.md, "Events"): what happens to the caller's
 * sandboxes and snapshots, as server-sent events read with fetch's body
 * reader, followed across cut connections from the last event ID, so that
 * none is lost or repeated.
 */
import { WarrenError } from "./errors.js";
import { lines } from "./stream.js";
import { Retry, Transport, sleep } from "./transport.js";

/** One change of a sandbox, a snapshot or a fleet node (the API's Event). */
export interface Event {
  /** Its position in the stream: a later event has a larger one. */
  id: number;
  at: string;
  /** e.g. sandbox.created, sandbox.restored, sandbox.paused,
   * sandbox.auto_paused (its lifecycle paused it), sandbox.auto_resumed (a
   * call woke it), snapshot.durable, node.fenced. */
  kind: string;
  tenant?: string;
  sandbox?: string;
  snapshot?: string;
  node?: string;
  /** The state it left the thing in. */
  state?: string;
  /** Why a sandbox failed, ended, paused or woke ("idle for 30s", "a call
   * to its agent"), or a snapshot failed. */
  reason?: string;
}

/** The message a stream begins with when the events after the position it
 * resumes from are gone (older than the replay window): those after
 * `after` up to `oldest`. */
export interface EventsLost {
  kind: "events.lost";
  after: number;
  oldest: number;
}

/** Filters and the start of `Warren.events`. */
export interface EventsOptions {
  /** Only the events of this sandbox. */
  sandbox?: string;
  /** Only the events of this snapshot. */
  snapshot?: string;
  /** Kinds, or families ("sandbox", "snapshot", "node") standing for theirs. */
  kinds?: string | string[];
  /** Start after this event ID (0: all the server still holds); default:
   * from now. */
  after?: number;
  /** Every tenant's events and the nodes' (admin key only). */
  allTenants?: boolean;
  /** Called each time a stream opens, with the position it starts after:
   * the iteration yields every event of a change recorded after the call,
   * so a caller that waits for it before it acts sees its act's events. */
  opened?: (after: number) => void;
  /** Stops the iteration (it then throws the signal's reason). */
  signal?: AbortSignal;
}

/** One message of a server-sent events stream. */
export interface SSEMessage {
  /** Its `id` field; undefined when it has none. */
  id?: string;
  /** Its `event` field; "message" when it has none. */
  event: string;
  /** Its `data` lines, joined by "\n". */
  data: string;
}

/**
 * The messages of server-sent event lines, as the HTML standard reads them:
 * fields `id`, `event`, `data` (several joined by "\n"), comments (":")
 * skipped, a message dispatched at a blank line; a message with an `id` but
 * no data is still yielded (warren's first message gives only the position
 * the stream starts after).
 */
export async function* sseMessages(input: AsyncIterable<string>): AsyncGenerator<SSEMessage> {
  let id: string | undefined;
  let event = "";
  let data: string[] = [];
  for await (const line of input) {
    if (line === "") {
      if (id !== undefined || data.length) yield { id, event: event || "message", data: data.join("\n") };
      id = undefined;
      event = "";
      data = [];
      continue;
    }
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "id") id = value;
    else if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
}

// A stream that says nothing for this long (it sends a keepalive every
// 15 s) is taken for cut, and followed again.
const IDLE_MS = 60_000;

/**
 * The events the options select, in order, for as long as the caller
 * iterates. A cut connection (a network error, an idle minute, the end of
 * the body, a 429 or 5xx when opening) is opened again, after a backoff,
 * with `Last-Event-ID` of the last message it got. Other errors (a bad
 * filter, a bad key) are thrown.
 */
export async function* followEvents(t: Transport, o: EventsOptions = {}): AsyncGenerator<Event | EventsLost> {
  const kinds = Array.isArray(o.kinds) ? o.kinds.join(",") : o.kinds;
  const query = {
    sandbox: o.sandbox || undefined,
    snapshot: o.snapshot || undefined,
    kind: kinds || undefined,
    after: o.after,
    all_tenants: o.allTenants ? true : undefined,
  };
  let last: string | undefined;
  let attempt = 0;
  for (;;) {
    try {
      const res = await t.send({
        method: "GET",
        path: "/v1/events",
        query,
        retry: Retry.Never,
        accept: "text/event-stream",
        headers: last === undefined ? {} : { "Last-Event-ID": last },
        signal: o.signal,
      });
      if (!res?.body) throw new WarrenError("events: the answer has no body", "stream_broken");
      let first = true;
      for await (const m of sseMessages(lines(res.body, "events", IDLE_MS, o.signal))) {
        attempt = 0;
        if (m.id) last = m.id;
        if (first && m.id && !m.data) o.opened?.(Number(m.id));
        first = false;
        if (!m.data) continue;
        const d = JSON.parse(m.data) as Record<string, unknown>;
        if (m.event === "events.lost") {
          yield { kind: "events.lost", after: Number(d.after), oldest: Number(d.oldest) };
        } else {
          yield d as unknown as Event;
        }
      }
      throw new WarrenError("events: the stream ended", "stream_broken");
    } catch (e) {
      if (o.signal?.aborted || !transient(e)) throw e;
    }
    attempt++;
    await sleep(t.delay(attempt), o.signal);
  }
}

/** Whether following the stream may work if tried again. */
function transient(e: unknown): boolean {
  if (!(e instanceof WarrenError)) return false;
  return e.status === 0 || e.status === 429 || e.status >= 500;
}
