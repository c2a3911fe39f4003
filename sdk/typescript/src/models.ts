/**
 * The API's types, field for field as their JSON (package `api` of the
 * server, and `/openapi.json`): snake_case names, times as RFC 3339 strings,
 * byte counts as numbers. Fields the server leaves out when empty are
 * optional. The only departures are where the SDK decodes base64 for you:
 * `ExecEvent.data` is bytes, and `ExecOptions.stdin` takes bytes or text.
 */

/** An egress policy: entries are IPv4 CIDRs, addresses, or domain names
 * (`example.com` only it, `*.example.com` any name below it). `none` denies
 * all egress; a non-empty `allow` is the only egress allowed; `deny` wins.
 * `rules` transform the sandbox's HTTP and HTTPS requests as they leave the
 * node, by destination: a name or a wildcard (`*.example.com`); a request
 * takes the exact name's rules, else the longest wildcard's. Rules grant no
 * access. See docs/NETWORK.md, "Secrets at egress". */
export interface NetworkPolicy {
  none?: boolean;
  allow?: string[];
  deny?: string[];
  rules?: Record<string, NetworkRule[]>;
}

/** One egress rule of a destination:
 * `{ transform: { headers: { Authorization: "Bearer ${secrets.openai}" } } }`. */
export interface NetworkRule {
  transform?: Transform;
}

/** What a rule does to a matching request: `headers` are set on it,
 * replacing any the sandbox sent of those names. A value may name one of
 * the tenant's secrets as `${secrets.NAME}` (E2B's `${e2b.secrets.NAME}`
 * too): the node puts the value in, and the sandbox never holds it. */
export interface Transform {
  headers?: Record<string, string>;
}

/** A secret as the API shows it: never its value, which is write-only. */
export interface Secret {
  /** `sec_` and 20 random characters; every call that takes a name takes it. */
  id: string;
  /** In lower case, as stored. */
  name: string;
  /** The values it has had: 1 when created, one more at each set. */
  version: number;
  metadata: Record<string, string>;
  created_at: string;
  updated_at: string;
}

/** The body of `PUT /v1/secrets/{name}`: the value (1 byte to 16 KiB of
 * UTF-8 without CR, LF or NUL) and, when given, metadata that replaces the
 * secret's (absent: an update keeps it). */
export interface SetSecretRequest {
  value: string;
  metadata?: Record<string, string>;
}

/** A sandbox's egress policy in force, its addresses, and what was refused. */
export interface NetworkStatus {
  policy: NetworkPolicy;
  address: string;
  gateway: string;
  denied: number;
  rate_limited: number;
}

/** The last checkpoint of a sandbox with a checkpoint policy. */
export interface Checkpoint {
  snapshot: string;
  at: string;
}

/** How a sandbox started again from a checkpoint after its node was lost. */
export interface Restored {
  snapshot: string;
  snapshot_at: string;
  at: string;
  lost_seconds: number;
  reason: string;
  from?: string;
}

/** Sandbox states: starting, running, paused, moving, stopped, failed. */
export type SandboxState = "starting" | "running" | "paused" | "moving" | "stopped" | "failed";

/** What a sandbox's timeout (and its idle timeout) does: delete it, or
 * pause it durably. */
export type OnTimeout = "delete" | "pause";

/** How a sandbox sleeps and wakes (docs/API.md, "Pause, sleep and wake");
 * left out: deleted at its timeout, never idle, the server's paused TTL (a
 * week), no auto-resume. */
export interface Lifecycle {
  on_timeout?: OnTimeout;
  /** Once no exec, file call, terminal, process call or request to one of
   * its ports has used it for this long, on_timeout happens (0: never). */
  idle_timeout_seconds?: number;
  /** How long it stays paused before it is deleted. */
  paused_ttl_seconds?: number;
  /** Wake a paused sandbox for any call that needs it running (exec,
   * files, terminal, processes, its ports) before the call goes on;
   * without it such a call is a `conflict` (409) while it is paused. */
  auto_resume?: boolean;
}

/** How a paused sandbox sleeps. Every pause is durable: its root disk is
 * `snapshot`, a durable snapshot it wakes from on any node. */
export interface Paused {
  at: string;
  /** "requested", or what paused it on its own, e.g. "idle for 30s". */
  reason: string;
  /** Its lifecycle paused it. */
  auto?: boolean;
  /** Its processes are kept and go on where they were when it resumes
   * (vm, gvisor); false (a container): it wakes from its disk with its
   * files, and its processes start again. */
  memory: boolean;
  snapshot: string;
  /** The durable snapshot of its workspace disk, if it has one. */
  workspace?: string;
  /** The durable memory image it wakes from, with its processes, on a
   * node other than its own (vm, gvisor). */
  image?: string;
  /** Its node holds it still, and resumes it in place. */
  held: boolean;
}

/** A sandbox as the API describes it (the API's Sandbox). */
export interface SandboxInfo extends Lifecycle {
  id: string;
  tenant: string;
  template: string;
  runtime: string;
  /** What separates it from the host, e.g. "container (shared host kernel)". */
  isolation: string;
  accel?: string;
  state: SandboxState;
  error?: string;
  disk_kept?: boolean;
  cpus: number;
  memory_mb: number;
  pids: number;
  disk_mb: number;
  /** Absent in a list's sandboxes: get the sandbox for it. */
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  agent_token?: string;
  workspace_mb?: number;
  origin?: string;
  workspace_origin?: string;
  network: NetworkPolicy;
  created_at: string;
  expires_at: string;
  checkpoint_every_seconds?: number;
  checkpoint?: Checkpoint;
  restored?: Restored;
  /** "always" for an always-on root disk, else "snapshot". */
  persistence: Persistence;
  /** An always-on disk's write-back state: in a get of a running sandbox, never in a list. */
  volume?: Volume;
  /** How it sleeps, while it is paused; absent otherwise. */
  paused?: Paused;
}

/** An always-on disk's write-back state (docs/ALWAYS-ON.md). */
export interface Volume {
  /** The newest layer in the durable tier: every flushed write is in it or below it. */
  layer: string;
  /** The time up to which object storage holds every flushed write; absent when it holds them all. */
  recovery_point?: string;
  dirty_bytes: number;
  cached_bytes: number;
  /** What the disk holds in the durable tier (its layers' chunks and those not yet reclaimed), at most durable_limit_bytes: past it a flush, and the sandbox's fsync, fails with ENOSPC. */
  durable_bytes: number;
  durable_limit_bytes: number;
  /** What the disk's own blocks take of durable_bytes. */
  used_bytes: number;
  /** Why the disk's last flush was refused; absent when it was not. */
  refused?: string;
}

/** How a root disk persists: "snapshot" keeps what explicit snapshots
 * save; "always" writes every block back, continuously, through the
 * node's block server (docs/ALWAYS-ON.md). */
export type Persistence = "snapshot" | "always";

/** What a create, a restore and a fork say of the sandboxes they start;
 * left out: the server's defaults (a fork's: the parent's values; its
 * lifecycle is the parent's unless one of its fields is given, and then
 * those given, the rest defaults). */
export interface SandboxSpec extends Lifecycle {
  /** "vm", "container" or "auto" (the strongest available; never a vm under tcg). */
  runtime?: string;
  cpus?: number;
  memory_mb?: number;
  pids?: number;
  workspace_mb?: number;
  network?: NetworkPolicy;
  timeout_seconds?: number;
  checkpoint_every_seconds?: number;
  persistence?: Persistence;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  region?: string;
  node_labels?: Record<string, string>;
}

/** The body of POST /v1/sandboxes. */
export interface CreateSandboxRequest extends SandboxSpec {
  template?: string;
  disk_mb?: number;
}

/** A running sandbox's figures, measured by its agent. */
export interface SandboxMetrics {
  at: string;
  cpu_used_pct: number;
  cpu_count: number;
  memory_used_bytes: number;
  memory_total_bytes: number;
  memory_cache_bytes: number;
  disk_used_bytes: number;
  disk_total_bytes: number;
  pids: number;
}

/** A pseudo-terminal's size, each 1 to 1000. */
export interface PTYSize {
  cols: number;
  rows: number;
}

/** The answer of a collected exec and of a process's wait (whose stdout
 * and stderr are empty). Output that is not UTF-8 shows U+FFFD. */
export interface ExecResult {
  pid: number;
  exit_code: number;
  stdout: string;
  stderr: string;
  timed_out?: boolean;
  /** e.g. "exit status 1", "signal: killed". */
  status?: string;
  duration_ms: number;
  /** Set when more output than the limit (16 MiB a stream) was dropped. */
  truncated?: boolean;
  encoding?: string;
}

/** ExecEvent types: start, stdout, stderr, pty (a terminal's output), end, error. */
export type ExecEventType = "start" | "stdout" | "stderr" | "pty" | "end" | "error";

/** One event of a streamed exec or of a process's stream; `data` holds the
 * exact bytes of output (decoded from the API's base64). */
export interface ExecEvent {
  type: ExecEventType;
  pid?: number;
  data?: Uint8Array;
  exit_code?: number;
  status?: string;
  timed_out?: boolean;
  duration_ms?: number;
  error?: string;
}

/** The answer of a background exec. */
export interface StartedProcess {
  pid: number;
  tag?: string;
}

/** A process the sandbox's agent started (the API's Process). */
export interface ProcessInfo {
  pid: number;
  tag?: string;
  cmd: string;
  args?: string[];
  running: boolean;
  exit_code?: number;
}

/** A file, directory, symlink or other in a sandbox. */
export interface FileInfo {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  /** Permission bits, e.g. 420 (0o644). */
  mode: number;
  permissions: string;
  owner: string;
  group: string;
  modified_at: string;
  symlink_target?: string;
}

/** A template's disk image. */
export interface Template {
  name: string;
  size_bytes: number;
  used_bytes: number;
  built_at: string;
}

/** One line of a template build: progress, then the template or an error. */
export interface TemplateBuildEvent {
  progress?: string;
  template?: Template;
  error?: string;
}

/** A runtime of the node and whether it can run sandboxes. */
export interface RuntimeInfo {
  name: string;
  isolation: string;
  available: boolean;
  reason?: string;
  accel?: string;
}

/** A memory image of a vm or gvisor shape (admin key only, in NodeInfo). */
export interface MemoryImage {
  runtime: string;
  template: string;
  template_built_at: string;
  vcpus: number;
  memory_mb: number;
  network: boolean;
  state: string;
  bytes: number;
  starts: number;
}

/** GET /v1/info. */
export interface NodeInfo {
  version: string;
  kernel: string;
  runtimes: RuntimeInfo[];
  clone_mode: string;
  cgroup_version: number;
  blob_store?: string;
  sandboxes: number;
  memory_images?: MemoryImage[];
}

/** CPUs, memory and disk. */
export interface Amounts {
  cpus: number;
  memory_mb: number;
  disk_mb: number;
}

/** A node of a fleet (admin key only). */
export interface FleetNode {
  id: string;
  addr: string;
  region: string;
  cluster: string;
  labels?: Record<string, string>;
  /** active, cordoned, draining or fenced. */
  state: string;
  epoch: number;
  heartbeat_at: string;
  sandboxes: number;
  capacity: Amounts;
  allocated: Amounts;
  runtimes: string[];
}

/** A sandbox's previews: public or not, its access token, and its preview
 * URL with `{port}` (null on a server without a preview domain). */
export interface Preview {
  public: boolean;
  token: string;
  url: string | null;
}

/** The body of PUT …/preview. */
export interface SetPreviewRequest {
  public?: boolean;
  rotate_token?: boolean;
}

/** The body of POST /v1/keys. */
export interface CreateKeyRequest {
  tenant: string;
  /** "metrics": a key that may only read /metrics. */
  scope?: string;
}

/** A new key, shown once. */
export interface Key {
  id: string;
  key: string;
  tenant: string;
  scope?: string;
}

/** A key as listed: never the key itself. */
export interface KeyInfo {
  id: string;
  tenant: string;
  admin: boolean;
  scope?: string;
  created_at: string;
}

/** What a tenant may hold in the whole fleet; 0 bounds nothing. */
export interface Quota {
  sandboxes: number;
  cpus: number;
  memory_mb: number;
  disk_mb: number;
  snapshots: number;
  snapshot_bytes: number;
  creates_per_minute: number;
}

/** Snapshot states: pending (uploading), then durable or failed (final). */
export type SnapshotState = "pending" | "durable" | "failed";

/** A snapshot of a sandbox's root or workspace disk. */
export interface Snapshot {
  id: string;
  /** The name it was given, unique among the tenant's snapshots; it
   * stands for the ID wherever one is taken. */
  name?: string;
  sandbox_id: string;
  /** root or workspace. */
  scope: string;
  parent?: string;
  template: string;
  state: SnapshotState;
  error?: string;
  disk_bytes: number;
  changed_bytes: number;
  stored_bytes: number;
  created_at: string;
  durable_at?: string;
  ack_ms: number;
  upload_ms?: number;
}

/** The body of POST …/snapshots. */
export interface CreateSnapshotRequest {
  /** A name for it: 1 to 63 letters, digits, ".", "_" and "-", starting
   * with a letter or a digit and not with "sn-" (a 400 otherwise);
   * another of the tenant's snapshots' is a 409 `conflict`. */
  name?: string;
  scope?: string;
  /** Answer once durable or failed (504 `timeout` past wait_timeout_seconds). */
  wait?: boolean;
  wait_timeout_seconds?: number;
}

/** The body of POST /v1/snapshots/{id}/restore. */
export interface RestoreRequest extends SandboxSpec {
  /** 1 to 256, default 1. */
  count?: number;
}

/** The body of POST /v1/sandboxes/{id}/fork. */
export interface ForkRequest extends SandboxSpec {
  count?: number;
}

/** A fork's snapshot, how long the parent waited, and the children. */
export interface ForkResult {
  snapshot: Snapshot;
  paused_ms: number;
  sandboxes: SandboxInfo[];
}

/** What a collection of unreferenced layers and chunks freed. */
export interface GCResult {
  manifests_deleted: number;
  chunks_deleted: number;
  bytes_freed: number;
  chunks_kept: number;
}

/** The daemon's goroutines, descriptors and heap (admin key only). */
export interface DebugVars {
  goroutines: number;
  open_fds: number;
  heap_alloc_bytes: number;
  heap_objects: number;
  sys_bytes: number;
  num_gc: number;
}

/** The setting of a warm pool. */
export interface PoolSpec {
  runtime?: string;
  min: number;
  max?: number;
  cpus?: number;
  memory_mb?: number;
  pids?: number;
  disk_mb?: number;
}

/** A warm pool on one node. */
export interface PoolNode {
  node: string;
  target: number;
  ready: number;
  hits: number;
  misses: number;
  reported_at: string;
  error?: string;
}

/** A warm pool and its state, summed over its nodes. */
export interface Pool extends PoolSpec {
  template: string;
  target: number;
  ready: number;
  hits: number;
  misses: number;
  nodes?: PoolNode[];
  updated_at: string;
}

/** One page of a list; pass `next_page_token` as `page_token` for the
 * next (absent on the last page). */
export interface Page<T> {
  items: T[];
  next_page_token?: string;
}

/** Paging of a list call. */
export interface PageOptions {
  /** At most this many items (1-1000; a directory 1-10000). */
  limit?: number;
  page_token?: string;
}

/** Paging of a list call whose items have states. */
export interface StatePageOptions<S extends string> extends PageOptions {
  state?: S | S[];
}
