/**
 * warren's TypeScript SDK: ask a warren server for Linux sandboxes, run
 * code in them, move files in and out, snapshot, fork and restore them,
 * follow their events. No dependencies: the global fetch of Node 18+ or a
 * browser.
 */
export { Warren, type WarrenOptions, type CreateOptions, type RestoreOptions } from "./client.js";
export { Sandbox, type Idempotent, type SnapshotOptions, type ForkOptions } from "./sandbox.js";
export {
  ExecStream,
  Process,
  type BodyData,
  type Command,
  type CollectOptions,
  type ExecOptions,
  type PtyOptions,
  type SignalName,
} from "./exec.js";
export { Files, type ListOptions, type WriteOptions } from "./files.js";
export { type Event, type EventsLost, type EventsOptions, type SSEMessage, followEvents, sseMessages } from "./events.js";
export { WarrenError, errorFromResponse } from "./errors.js";
export { lines } from "./stream.js";
export { pathOf, queryString } from "./transport.js";
export type * from "./models.js";
