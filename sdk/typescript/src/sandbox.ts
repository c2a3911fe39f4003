/**
 * A sandbox: a handle on one running Linux computer, and every call about
 * it (timeout, commands, files, network, previews, pause and resume,
 * snapshots, fork, metrics, delete). Make one with `Warren.create`.
 */
import { WarrenError } from "./errors.js";
import {
  type CollectOptions,
  type Command,
  ExecStream,
  type PtyOptions,
  Process,
  collect,
  commandTimeout,
  execBody,
} from "./exec.js";
import { Files } from "./files.js";
import type {
  CreateSnapshotRequest,
  ExecResult,
  ForkRequest,
  ForkResult,
  NetworkPolicy,
  NetworkStatus,
  Page,
  Preview,
  ProcessInfo,
  SandboxInfo,
  SandboxMetrics,
  SetPreviewRequest,
  Snapshot,
  SnapshotState,
  StatePageOptions,
  StartedProcess,
} from "./models.js";
import { MAX_LIST_LIMIT, all, fetchPage, iterate } from "./pages.js";
import { Retry, Transport, newIdempotencyKey, pathOf } from "./transport.js";

/** Restores and forks may take a while: boot and disk clones of many. */
const RESTORE_TIMEOUT = 600_000;

/** Options of a call with effects that the server runs once per key. */
export interface Idempotent {
  /** Sent as Idempotency-Key: however often the call is sent (its own
   * retries, or yours with the same key within 24 hours), it takes effect
   * once. Default: a new key for this call, which makes its retries safe. */
  idempotencyKey?: string;
}

/** Options of `Sandbox.snapshot`. */
export interface SnapshotOptions extends CreateSnapshotRequest, Idempotent {}

/** Options of `Sandbox.fork`. */
export interface ForkOptions extends ForkRequest, Idempotent {}

/** One running (or recently ended) sandbox. */
export class Sandbox {
  /** The sandbox's filesystem. */
  readonly files: Files;

  constructor(
    private readonly t: Transport,
    /** As of the last call that answered it (create, get, refresh,
     * setTimeout, pause, resume). */
    public info: SandboxInfo,
  ) {
    this.files = new Files(t, info.id);
  }

  get id(): string {
    return this.info.id;
  }

  get state(): string {
    return this.info.state;
  }

  private path(...elems: string[]): string {
    return pathOf("v1", "sandboxes", this.info.id, ...elems);
  }

  private async update(p: Promise<SandboxInfo>): Promise<this> {
    this.info = await p;
    return this;
  }

  /** Read the sandbox again. */
  refresh(): Promise<this> {
    return this.update(this.t.json({ method: "GET", path: this.path(), retry: Retry.Idempotent }));
  }

  /** Delete it; deleting one that is already gone is no error when the
   * first attempt's outcome was unknown. */
  async delete(): Promise<void> {
    await this.t.none({ method: "DELETE", path: this.path(), retry: Retry.Idempotent, goneIsDone: true });
  }

  /** Make it expire seconds from now. */
  setTimeout(seconds: number): Promise<this> {
    return this.update(this.t.json({
      method: "POST",
      path: this.path("timeout"),
      json: { timeout_seconds: Math.max(1, Math.ceil(seconds)) },
      retry: Retry.Refused,
    }));
  }

  /**
   * Pause it, durably: its root disk is a durable snapshot in the blob
   * store before this answers, and it wakes from it under the same ID with
   * the same files, on this node or another. A vm or gvisor sandbox keeps
   * its memory too (`info.paused.memory` true: its processes go on where
   * they were); a container stops (`memory` false: its processes start
   * again). While paused, exec, files, processes, terminals and its ports
   * are a `conflict`, unless it was created with `auto_resume`, which
   * wakes it for them. A `conflict` if it is not running, or has a
   * workspace or always-on disk.
   */
  pause(): Promise<this> {
    return this.update(this.t.json({ method: "POST", path: this.path("pause"), retry: Retry.Refused }));
  }

  /** Run a paused sandbox again under its ID, with its files: from its
   * memory where it kept it, else from its pause snapshot (its processes
   * start again). Its timeout counts again from now. */
  resume(): Promise<this> {
    return this.update(this.t.json({ method: "POST", path: this.path("resume"), retry: Retry.Refused }));
  }

  /** Its CPU, memory, disk and task figures, measured now by its agent
   * (`conflict` if it is not running). */
  metrics(): Promise<SandboxMetrics> {
    return this.t.json({ method: "GET", path: this.path("metrics"), retry: Retry.Idempotent });
  }

  // Commands.

  /**
   * Run a command and return its result once it has ended: a string is a
   * shell command line, an array an argv. A non-zero exit code is a result,
   * not an error. With `onStdout` or `onStderr` the command's events are
   * streamed, and each piece of output passed to them as it comes. Never
   * retried.
   */
  async exec(cmd: Command, options: CollectOptions = {}): Promise<ExecResult> {
    if (options.onStdout || options.onStderr) {
      return collect(await this.execStream(cmd, options), options.onStdout, options.onStderr);
    }
    return this.t.json<ExecResult>({
      method: "POST",
      path: this.path("exec"),
      json: execBody(cmd, options),
      timeoutMs: commandTimeout(options.timeoutMs),
      signal: options.signal,
    });
  }

  /**
   * Run a command and return its events as they happen (see ExecStream);
   * with `pty` on a terminal of that size, its output as `pty` events.
   * Leaving the stream before the end kills the command. Never retried.
   */
  async execStream(cmd: Command, options: PtyOptions = {}): Promise<ExecStream> {
    const res = await this.t.send({
      method: "POST",
      path: this.path("exec"),
      json: { ...execBody(cmd, options), stream: true },
      timeoutMs: commandTimeout(options.timeoutMs),
      accept: "application/x-ndjson",
      signal: options.signal,
    });
    return new ExecStream(res as Response, `exec in ${this.id}`, options.signal);
  }

  /**
   * Start a command in the background and return its Process at once. Its
   * stdin stays open (after the optional initial `stdin`) until
   * `sendStdin` closes it; with `pty` it runs on a terminal (`resize`).
   * Never retried.
   */
  async start(cmd: Command, options: PtyOptions = {}): Promise<Process> {
    const p = await this.t.json<StartedProcess>({
      method: "POST",
      path: this.path("exec"),
      json: { ...execBody(cmd, options), background: true },
      signal: options.signal,
    });
    return new Process(this.t, this.id, p.pid, p.tag ?? "");
  }

  /** A handle on a process of this sandbox, by pid. */
  process(pid: number): Process {
    return new Process(this.t, this.id, pid);
  }

  /** One page of the processes the sandbox's agent started, by pid. */
  processesPage(options: StatePageOptions<"running" | "exited"> = {}): Promise<Page<ProcessInfo>> {
    return fetchPage(this.t, this.path("processes"), "processes", options);
  }

  /** Every process the sandbox's agent started (or only those in state). */
  processes(options: { state?: "running" | "exited" } = {}): Promise<ProcessInfo[]> {
    return all(iterate((token) => this.processesPage({ ...options, limit: MAX_LIST_LIMIT, page_token: token })));
  }

  // Network and previews.

  /** The egress policy, the sandbox's address, and what it refused. */
  network(): Promise<NetworkStatus> {
    return this.t.json({ method: "GET", path: this.path("network"), retry: Retry.Idempotent });
  }

  /** Replace the egress policy whole, at once ({}: the default). */
  setNetwork(policy: NetworkPolicy): Promise<NetworkStatus> {
    return this.t.json({ method: "PUT", path: this.path("network"), json: policy, retry: Retry.Idempotent });
  }

  /** Its previews: public or not, the access token, the URL with `{port}`. */
  preview(): Promise<Preview> {
    return this.t.json({ method: "GET", path: this.path("preview"), retry: Retry.Idempotent });
  }

  /** Make previews public or private, or rotate the token. */
  setPreview(request: SetPreviewRequest): Promise<Preview> {
    return this.t.json({
      method: "PUT",
      path: this.path("preview"),
      json: request,
      retry: request.rotate_token ? Retry.Refused : Retry.Idempotent,
    });
  }

  /**
   * The URL of a port of the sandbox: its preview URL (with
   * `?warren_token=` unless public or withToken is false) on a server with
   * a preview domain, else the API's `/v1/sandboxes/ID/ports/PORT/`, which
   * takes the API key.
   */
  async portUrl(port: number, options: { withToken?: boolean } = {}): Promise<string> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new WarrenError(`port ${port}: want 1-65535`, "bad_request");
    }
    const p = await this.preview();
    if (!p.url) return this.t.url(this.path("ports", String(port)) + "/");
    const url = p.url.replace("{port}", String(port));
    if (p.public || options.withToken === false) return url;
    return url + (url.includes("?") ? "&" : "?") + "warren_token=" + encodeURIComponent(p.token);
  }

  // Snapshots and fork.

  /**
   * Snapshot the sandbox's disk (root by default): pending at once, or,
   * with `wait`, once durable or failed (a `timeout` 504 past
   * `wait_timeout_seconds`). Retried safely under its idempotency key.
   */
  snapshot(options: SnapshotOptions = {}): Promise<Snapshot> {
    const { idempotencyKey, ...request } = options;
    const waitMs = request.wait ? (request.wait_timeout_seconds ?? 600) * 1000 : undefined;
    return this.t.json({
      method: "POST",
      path: this.path("snapshots"),
      json: request,
      retry: Retry.Idempotent,
      headers: { "Idempotency-Key": idempotencyKey || newIdempotencyKey() },
      timeoutMs: waitMs === undefined ? undefined : commandTimeout(waitMs),
    });
  }

  /** One page of the sandbox's snapshots, oldest first. */
  snapshotsPage(options: StatePageOptions<SnapshotState> = {}): Promise<Page<Snapshot>> {
    return fetchPage(this.t, this.path("snapshots"), "snapshots", options);
  }

  /** Every snapshot of the sandbox, oldest first (or only those in state). */
  snapshots(options: { state?: SnapshotState | SnapshotState[] } = {}): Promise<Snapshot[]> {
    return all(iterate((token) => this.snapshotsPage({ ...options, limit: MAX_LIST_LIMIT, page_token: token })));
  }

  /**
   * Start `count` children of this running sandbox from a snapshot of its
   * disk (and a vm's memory); fields left out take the parent's values.
   * All or nothing. Retried safely under its idempotency key.
   */
  async fork(options: ForkOptions = {}): Promise<{ snapshot: Snapshot; paused_ms: number; sandboxes: Sandbox[] }> {
    const { idempotencyKey, ...request } = options;
    const r = await this.t.json<ForkResult>({
      method: "POST",
      path: this.path("fork"),
      json: request,
      retry: Retry.Idempotent,
      headers: { "Idempotency-Key": idempotencyKey || newIdempotencyKey() },
      timeoutMs: Math.max(this.t.timeoutMs, RESTORE_TIMEOUT),
    });
    return { ...r, sandboxes: r.sandboxes.map((s) => new Sandbox(this.t, s)) };
  }
}
