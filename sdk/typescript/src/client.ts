/**
 * The client: where the server is and with which key, and the calls that
 * are not about one sandbox: creating and finding sandboxes, snapshots and
 * restores, events, and the admin calls.
 */
import { WarrenError } from "./errors.js";
import { type EventsLost, type EventsOptions, type Event, followEvents } from "./events.js";
import type {
  CreateKeyRequest,
  CreateSandboxRequest,
  DebugVars,
  FleetNode,
  GCResult,
  Key,
  KeyInfo,
  NodeInfo,
  Page,
  PageOptions,
  Pool,
  PoolSpec,
  Quota,
  RestoreRequest,
  SandboxInfo,
  SandboxState,
  Secret,
  SetSecretRequest,
  Snapshot,
  SnapshotState,
  StatePageOptions,
  Template,
  TemplateBuildEvent,
} from "./models.js";
import { MAX_LIST_LIMIT, all, fetchPage, iterate } from "./pages.js";
import { type Idempotent, Sandbox } from "./sandbox.js";
import { lines } from "./stream.js";
import { Retry, Transport, newIdempotencyKey, pathOf, sleep } from "./transport.js";

/** How to reach a server. */
export interface WarrenOptions {
  /** The server, http(s)://host[:port][/prefix]; default WARREN_URL where
   * `process` exists, else http://127.0.0.1:7777. */
  url?: string;
  /** Sent as `Authorization: Bearer`; default WARREN_API_KEY where
   * `process` exists. */
  apiKey?: string;
  /** Milliseconds an ordinary call waits for its answer (default 120000);
   * commands wait as long as their own timeout, streams without limit. */
  timeoutMs?: number;
  /** Tries of a call that is safe to repeat (default 5). */
  attempts?: number;
  /** Delay before the first retry, doubling (default 100 ms). */
  backoffMs?: number;
  /** The fetch to use (default the global one). */
  fetch?: typeof fetch;
}

/** Options of `Warren.create`. */
export interface CreateOptions extends CreateSandboxRequest, Idempotent {}

/** Options of `Warren.restore`. */
export interface RestoreOptions extends RestoreRequest, Idempotent {}

/** Restores and forks may take a while: boot and disk clones of many. */
const RESTORE_TIMEOUT = 600_000;

/** The environment variable name where `process.env` exists. */
function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name] || undefined;
}

/** A client of one warren server. Safe to share: each call is one request
 * (or a few, retried). */
export class Warren {
  /** The transport the calls go through. */
  readonly transport: Transport;

  constructor(options: WarrenOptions = {}) {
    const f = options.fetch ?? globalThis.fetch;
    if (!f) throw new WarrenError("no fetch: Node 18 or later, or a browser, is needed", "configuration");
    this.transport = new Transport({
      url: options.url ?? env("WARREN_URL") ?? "http://127.0.0.1:7777",
      apiKey: options.apiKey ?? env("WARREN_API_KEY") ?? "",
      timeoutMs: options.timeoutMs ?? 120_000,
      attempts: options.attempts ?? 5,
      backoffMs: options.backoffMs ?? 100,
      fetch: f.bind(globalThis),
    });
  }

  private get t(): Transport {
    return this.transport;
  }

  /** Whether /healthz answers ok (no key needed). */
  async health(): Promise<boolean> {
    try {
      const r = await this.t.json<{ status?: string }>({ method: "GET", path: "/healthz", timeoutMs: 10_000 });
      return r?.status === "ok";
    } catch {
      return false;
    }
  }

  /** The node: version, kernel, runtimes and their isolation, … */
  info(): Promise<NodeInfo> {
    return this.t.json({ method: "GET", path: "/v1/info", retry: Retry.Idempotent });
  }

  /** The server's OpenAPI 3.1 document. */
  openapi(): Promise<Record<string, unknown>> {
    return this.t.json({ method: "GET", path: "/openapi.json", retry: Retry.Idempotent });
  }

  // Sandboxes.

  /** Create a sandbox; it answers running. Retried safely under its
   * idempotency key. */
  async create(options: CreateOptions = {}): Promise<Sandbox> {
    const { idempotencyKey, ...request } = options;
    const info = await this.t.json<SandboxInfo>({
      method: "POST",
      path: "/v1/sandboxes",
      json: request,
      retry: Retry.Idempotent,
      headers: { "Idempotency-Key": idempotencyKey || newIdempotencyKey() },
    });
    return new Sandbox(this.t, info);
  }

  /** A sandbox by ID (recently ended ones too: see its state). */
  async get(id: string): Promise<Sandbox> {
    return new Sandbox(this.t, await this.t.json<SandboxInfo>({ method: "GET", path: pathOf("v1", "sandboxes", id), retry: Retry.Idempotent }));
  }

  /** One page of the caller's sandboxes, oldest first, without their env;
   * every tenant's with allTenants (admin key only). */
  async listPage(options: StatePageOptions<SandboxState> & { allTenants?: boolean } = {}): Promise<Page<Sandbox>> {
    const page = await fetchPage<SandboxInfo>(this.t, "/v1/sandboxes", "sandboxes", options, {
      all_tenants: options.allTenants ? true : undefined,
    });
    return { ...page, items: page.items.map((s) => new Sandbox(this.t, s)) };
  }

  /** Every sandbox, a page at a time. */
  iter(options: { state?: SandboxState | SandboxState[]; allTenants?: boolean } = {}): AsyncGenerator<Sandbox> {
    return iterate((token) => this.listPage({ ...options, limit: MAX_LIST_LIMIT, page_token: token }));
  }

  /** Every sandbox. */
  list(options: { state?: SandboxState | SandboxState[]; allTenants?: boolean } = {}): Promise<Sandbox[]> {
    return all(this.iter(options));
  }

  /** Delete a sandbox by ID. */
  async delete(id: string): Promise<void> {
    await this.t.none({ method: "DELETE", path: pathOf("v1", "sandboxes", id), retry: Retry.Idempotent, goneIsDone: true });
  }

  // Snapshots.

  /** A snapshot by ID or name (also a durable one another node took);
   * every method here that takes a snapshot's ID takes its name too. */
  getSnapshot(id: string): Promise<Snapshot> {
    return this.t.json({ method: "GET", path: pathOf("v1", "snapshots", id), retry: Retry.Idempotent });
  }

  /** One page of the tenant's snapshots on this node, oldest first. */
  snapshotsPage(options: StatePageOptions<SnapshotState> = {}): Promise<Page<Snapshot>> {
    return fetchPage(this.t, "/v1/snapshots", "snapshots", options);
  }

  /** Every snapshot of the tenant on this node. */
  snapshots(options: { state?: SnapshotState | SnapshotState[] } = {}): Promise<Snapshot[]> {
    return all(iterate((token) => this.snapshotsPage({ ...options, limit: MAX_LIST_LIMIT, page_token: token })));
  }

  /** One page of a snapshot's ancestors' IDs, nearest first. */
  async lineagePage(id: string, options: PageOptions = {}): Promise<Page<string>> {
    return fetchPage<string>(this.t, pathOf("v1", "snapshots", id, "lineage"), "ancestors", options);
  }

  /** A snapshot's ancestors' IDs, nearest first, up to its chain's first. */
  lineage(id: string): Promise<string[]> {
    return all(iterate((token) => this.lineagePage(id, { limit: MAX_LIST_LIMIT, page_token: token })));
  }

  /** Delete a snapshot: restores of it are refused from then on, and its
   * name is free again. */
  async deleteSnapshot(id: string): Promise<void> {
    await this.t.none({ method: "DELETE", path: pathOf("v1", "snapshots", id), retry: Retry.Idempotent, goneIsDone: true });
  }

  /** Poll a snapshot until it is durable or failed; a `timeout`
   * WarrenError past timeoutMs (default 600000). */
  async waitSnapshot(id: string, options: { timeoutMs?: number; intervalMs?: number } = {}): Promise<Snapshot> {
    const deadline = Date.now() + (options.timeoutMs ?? 600_000);
    for (;;) {
      const s = await this.getSnapshot(id);
      if (s.state !== "pending") return s;
      if (Date.now() >= deadline) throw new WarrenError(`snapshot ${id} is still pending`, "timeout");
      await sleep(Math.min(options.intervalMs ?? 500, Math.max(0, deadline - Date.now())));
    }
  }

  /** Start `count` (1-256, default 1) sandboxes from a snapshot, each with
   * a fresh identity; all or nothing. Retried safely under its idempotency
   * key. */
  async restore(snapshotId: string, options: RestoreOptions = {}): Promise<Sandbox[]> {
    const { idempotencyKey, ...request } = options;
    const r = await this.t.json<{ sandboxes: SandboxInfo[] }>({
      method: "POST",
      path: pathOf("v1", "snapshots", snapshotId, "restore"),
      json: request,
      retry: Retry.Idempotent,
      headers: { "Idempotency-Key": idempotencyKey || newIdempotencyKey() },
      timeoutMs: Math.max(this.t.timeoutMs, RESTORE_TIMEOUT),
    });
    return r.sandboxes.map((s) => new Sandbox(this.t, s));
  }

  /** Collect the layers and chunks no snapshot needs (admin key only). */
  gc(options: { graceSeconds?: number } = {}): Promise<GCResult> {
    return this.t.json({ method: "POST", path: "/v1/gc", json: { grace_seconds: options.graceSeconds }, retry: Retry.Refused });
  }

  // Events.

  /** What happens to the caller's sandboxes and snapshots, as it happens,
   * for as long as the caller iterates (see followEvents). */
  events(options: EventsOptions = {}): AsyncGenerator<Event | EventsLost> {
    return followEvents(this.t, options);
  }

  // Templates.

  /** One page of the templates, by name. */
  templatesPage(options: PageOptions = {}): Promise<Page<Template>> {
    return fetchPage(this.t, "/v1/templates", "templates", options);
  }

  /** Every template. */
  templates(): Promise<Template[]> {
    return all(iterate((token) => this.templatesPage({ limit: MAX_LIST_LIMIT, page_token: token })));
  }

  /** Build a template (admin key only), passing each progress line to
   * onProgress; the template once built. */
  async buildTemplate(name: string, onProgress?: (line: string) => void): Promise<Template> {
    const res = await this.t.send({
      method: "POST",
      path: pathOf("v1", "templates", name, "build"),
      accept: "application/x-ndjson",
      timeoutMs: null,
    });
    for await (const line of lines((res as Response).body ?? new Blob([]).stream(), `build of ${name}`)) {
      if (!line.trim()) continue;
      const ev = JSON.parse(line) as TemplateBuildEvent;
      if (ev.error) throw new WarrenError(`build of ${name}: ${ev.error}`, "stream_broken");
      if (ev.progress) onProgress?.(ev.progress);
      if (ev.template) return ev.template;
    }
    throw new WarrenError(`build of ${name}: the stream ended before the template`, "stream_broken");
  }

  // Secrets.

  /** Create the caller's secret `name`, or give it a new version with
   * this value; the answer never holds the value (nor does any other).
   * Egress rules name it as `${secrets.NAME}`. Names are stored in lower
   * case. Sent again only when the connection was refused: each set that
   * reaches the server counts a version. */
  async setSecret(name: string, request: SetSecretRequest): Promise<Secret> {
    return this.t.json({ method: "PUT", path: secretPath(name), json: request, retry: Retry.Refused });
  }

  /** The caller's secrets (at most 1000), by name, without values. */
  async secrets(): Promise<Secret[]> {
    return (await this.t.json<{ secrets: Secret[] }>({ method: "GET", path: "/v1/secrets", retry: Retry.Idempotent })).secrets ?? [];
  }

  /** A secret of the caller's by name (any case) or ID, without its value. */
  async getSecret(ref: string): Promise<Secret> {
    return this.t.json({ method: "GET", path: secretPath(ref), retry: Retry.Idempotent });
  }

  /** Delete a secret (by name or ID), every version of it. Sandboxes whose
   * rules resolved it keep the value they have. */
  async deleteSecret(ref: string): Promise<void> {
    await this.t.none({ method: "DELETE", path: secretPath(ref), retry: Retry.Idempotent, goneIsDone: true });
  }

  // Admin: keys, pools, quotas, nodes, debug.

  /** A new key for a tenant, shown once. */
  createKey(request: CreateKeyRequest): Promise<Key> {
    return this.t.json({ method: "POST", path: "/v1/keys", json: request });
  }

  /** One page of the keys (never the keys themselves), oldest first. */
  keysPage(options: PageOptions = {}): Promise<Page<KeyInfo>> {
    return fetchPage(this.t, "/v1/keys", "keys", options);
  }

  /** Every key's information. */
  keys(): Promise<KeyInfo[]> {
    return all(iterate((token) => this.keysPage({ limit: MAX_LIST_LIMIT, page_token: token })));
  }

  /** Revoke a key by its id. */
  async deleteKey(id: string): Promise<void> {
    await this.t.none({ method: "DELETE", path: pathOf("v1", "keys", id), retry: Retry.Idempotent, goneIsDone: true });
  }

  /** Every warm pool. */
  async pools(): Promise<Pool[]> {
    return (await this.t.json<{ pools: Pool[] }>({ method: "GET", path: "/v1/pools", retry: Retry.Idempotent })).pools ?? [];
  }

  /** Set the warm pool of a template (and the spec's runtime), whole. */
  setPool(template: string, spec: PoolSpec): Promise<Pool> {
    return this.t.json({ method: "PUT", path: pathOf("v1", "pools", template), json: spec, retry: Retry.Idempotent });
  }

  /** Remove the warm pool of a template (and runtime) and its members. */
  async deletePool(template: string, options: { runtime?: string } = {}): Promise<void> {
    await this.t.none({ method: "DELETE", path: pathOf("v1", "pools", template), query: { runtime: options.runtime }, retry: Retry.Idempotent });
  }

  /** What a tenant may hold in the whole fleet. */
  quota(tenant: string): Promise<Quota> {
    return this.t.json({ method: "GET", path: pathOf("v1", "tenants", tenant, "quota"), retry: Retry.Idempotent });
  }

  /** Set a tenant's quota, whole. */
  setQuota(tenant: string, quota: Quota): Promise<Quota> {
    return this.t.json({ method: "PUT", path: pathOf("v1", "tenants", tenant, "quota"), json: quota, retry: Retry.Idempotent });
  }

  /** The fleet's nodes (none on a single machine). */
  async nodes(): Promise<FleetNode[]> {
    return (await this.t.json<{ nodes: FleetNode[] }>({ method: "GET", path: "/v1/nodes", retry: Retry.Idempotent })).nodes ?? [];
  }

  /** Cordon, uncordon or drain a fleet node. */
  nodeAction(id: string, action: "cordon" | "uncordon" | "drain"): Promise<FleetNode> {
    return this.t.json({ method: "POST", path: pathOf("v1", "nodes", id, action), retry: Retry.Refused });
  }

  /** The daemon's goroutines, descriptors and heap. */
  debugVars(): Promise<DebugVars> {
    return this.t.json({ method: "GET", path: "/v1/debug/vars", retry: Retry.Idempotent });
  }
}

/** The path of a secret's routes; an empty name is refused before
 * anything is sent (it would name the list). */
function secretPath(ref: string): string {
  if (!ref) throw new WarrenError("a secret's name is empty", "bad_request");
  return pathOf("v1", "secrets", ref);
}
