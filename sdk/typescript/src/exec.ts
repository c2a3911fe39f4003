/**
 * Commands in a sandbox: the exec request, its event stream (ndjson read as
 * it arrives), and background processes.
 */
import { WarrenError } from "./errors.js";
import type { ExecEvent, ExecResult, PTYSize, ProcessInfo } from "./models.js";
import { MAX_LIST_LIMIT, fetchPage, iterate } from "./pages.js";
import { Output, bytesOf, fromBase64, lines, toBase64 } from "./stream.js";
import { Retry, Transport, pathOf } from "./transport.js";

/** An argv run directly (`["python3", "-c", "print(1)"]`), or a command
 * line run by `/bin/sh -c`. */
export type Command = string | string[];

/** Data sent as a request body: bytes, text (as UTF-8), a Blob, or a stream
 * (sent as it is read; not retried). */
export type BodyData = Uint8Array | string | Blob | ReadableStream<Uint8Array>;

/** How a command runs. */
export interface ExecOptions {
  /** Written to the command, then closed. It travels in the JSON request,
   * which the server bounds at 1 MiB: stream more to a background process. */
  stdin?: Uint8Array | string;
  /** Environment variables, over the sandbox's. */
  env?: Record<string, string>;
  /** Working directory (default the user's home). */
  cwd?: string;
  /** The user to run as (default root). */
  user?: string;
  /** Kill the command after this long (exit code 137, `timed_out`). */
  timeoutMs?: number;
  /** A label shown in the process list. */
  tag?: string;
  /** Abandons the call (a streamed or collected exec's command is killed
   * when its connection goes). */
  signal?: AbortSignal;
}

/** A command on a terminal: its output comes as `pty` events. */
export interface PtyOptions extends ExecOptions {
  pty?: PTYSize;
}

/** A collected exec that streams its output to callbacks as it comes. */
export interface CollectOptions extends ExecOptions {
  /** Each piece of stdout, exact bytes, as it comes. Setting either
   * callback streams the command's events. */
  onStdout?: (data: Uint8Array) => void;
  onStderr?: (data: Uint8Array) => void;
}

/** The ExecRequest of a command and its options. */
export function execBody(cmd: Command, o: PtyOptions): Record<string, unknown> {
  const body: Record<string, unknown> = typeof cmd === "string" ? { shell: cmd } : { cmd };
  if (o.stdin !== undefined) body.stdin = toBase64(bytesOf(o.stdin));
  if (o.env) body.env = o.env;
  if (o.cwd) body.cwd = o.cwd;
  if (o.user) body.user = o.user;
  if (o.timeoutMs !== undefined) body.timeout_ms = Math.max(1, Math.ceil(o.timeoutMs));
  if (o.tag) body.tag = o.tag;
  if (o.pty) body.pty = o.pty;
  return body;
}

/** How long a command's call may wait for its answer: the command's own
 * timeout and a margin, or without limit for a command without one. */
export function commandTimeout(timeoutMs: number | undefined): number | null {
  return timeoutMs === undefined ? null : timeoutMs + 60_000;
}

/** An ExecEvent from its JSON line, its data decoded. */
export function parseExecEvent(line: string): ExecEvent {
  const d = JSON.parse(line) as Omit<ExecEvent, "data"> & { data?: string };
  return { ...d, data: d.data === undefined ? undefined : fromBase64(d.data) };
}

/**
 * The events of a command as they happen: iterate over it (once) with
 * `for await` for `start`, `stdout`/`stderr` (or `pty`) with exact bytes,
 * then `end`; after that `result` holds the outcome (without output).
 * Leaving the loop or `close()` before the end releases the connection,
 * which kills a streamed exec's command but leaves a background process
 * running. While iterating it throws a WarrenError: the sandbox went
 * (`conflict`, `isSandboxGone`), or `stream_broken` when the stream ended
 * before the command's end.
 */
export class ExecStream implements AsyncIterable<ExecEvent> {
  /** The command's pid, once its start event was read. */
  pid = 0;
  /** The outcome, once the end event was read. */
  result?: ExecResult;
  private readonly ctl = new AbortController();

  constructor(
    private readonly res: Response,
    private readonly what: string,
    signal?: AbortSignal,
  ) {
    signal?.addEventListener("abort", () => this.close(), { once: true });
  }

  /** Stop reading; idempotent. */
  close(): void {
    this.ctl.abort(new WarrenError(`${this.what}: closed`, "stream_broken"));
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ExecEvent> {
    if (!this.res.body) throw new WarrenError(`${this.what}: the answer has no body`, "stream_broken");
    try {
      for await (const line of lines(this.res.body, this.what, undefined, this.ctl.signal)) {
        if (!line.trim()) continue;
        let ev: ExecEvent;
        try {
          ev = parseExecEvent(line);
        } catch (e) {
          throw new WarrenError(`${this.what}: bad event ${line.slice(0, 200)}: ${e}`, "stream_broken");
        }
        if (ev.type === "error") {
          const msg = ev.error || "the stream broke";
          throw new WarrenError(msg, /^sandbox \S+ is /.test(msg) ? "conflict" : "stream_broken");
        }
        if (ev.pid) this.pid = ev.pid;
        if (ev.type === "end") {
          this.result = {
            pid: this.pid,
            exit_code: ev.exit_code ?? -1,
            stdout: "",
            stderr: "",
            timed_out: ev.timed_out,
            status: ev.status,
            duration_ms: ev.duration_ms ?? 0,
          };
          yield ev;
          return;
        }
        yield ev;
      }
    } finally {
      this.close();
    }
    throw new WarrenError(`${this.what}: the stream ended before the command's end`, "stream_broken");
  }
}

/** Read a stream to its end, keeping its output (16 MiB a stream at most;
 * a terminal's counts as stdout) and passing each piece to the callbacks;
 * the result with its output. */
export async function collect(
  events: ExecStream,
  onStdout?: (data: Uint8Array) => void,
  onStderr?: (data: Uint8Array) => void,
): Promise<ExecResult> {
  const out = new Output();
  const err = new Output();
  for await (const ev of events) {
    if (!ev.data) continue;
    if (ev.type === "stdout" || ev.type === "pty") {
      out.add(ev.data);
      onStdout?.(ev.data);
    } else if (ev.type === "stderr") {
      err.add(ev.data);
      onStderr?.(ev.data);
    }
  }
  const end = events.result as ExecResult;
  return { ...end, stdout: out.text(), stderr: err.text(), truncated: out.truncated || err.truncated || undefined };
}

/** Signals the server sends: TERM KILL INT HUP QUIT USR1 USR2 STOP CONT. */
export type SignalName = "TERM" | "KILL" | "INT" | "HUP" | "QUIT" | "USR1" | "USR2" | "STOP" | "CONT";

/**
 * A command started in the background (`Sandbox.start`), or one found by
 * pid. Its output is kept by the sandbox's agent: `stream({ replay: true })`
 * returns all of it, from its start.
 */
export class Process {
  constructor(
    private readonly t: Transport,
    /** The sandbox it runs in. */
    readonly sandboxId: string,
    readonly pid: number,
    readonly tag = "",
  ) {}

  private path(...elems: string[]): string {
    return pathOf("v1", "sandboxes", this.sandboxId, "processes", String(this.pid), ...elems);
  }

  /** Wait for the process to end: its exit code, status and duration
   * (stdout and stderr empty: see `output`). Past timeoutMs a WarrenError
   * `timeout` (504), the process running on. */
  wait(timeoutMs?: number): Promise<ExecResult> {
    return this.t.json<ExecResult>({
      method: "POST",
      path: this.path("wait"),
      query: { timeout_ms: timeoutMs === undefined ? undefined : Math.max(1, Math.ceil(timeoutMs)) },
      retry: Retry.Refused,
      timeoutMs: commandTimeout(timeoutMs),
    });
  }

  /** Wait for the process to end and return its result with its output
   * (replayed from its start; 16 MiB a stream at most). */
  async output(timeoutMs?: number): Promise<ExecResult> {
    if (timeoutMs !== undefined) await this.wait(timeoutMs);
    return collect(await this.stream({ replay: true }));
  }

  /** Write to the process's stdin, in order; with close, then send EOF
   * (refused for a pty: send "\x04"). A stream is sent as it is read.
   * Never retried. */
  async sendStdin(data: BodyData, options: { close?: boolean } = {}): Promise<void> {
    await this.t.none({
      method: "POST",
      path: this.path("stdin"),
      query: { close: options.close ? true : undefined },
      body: data as BodyInit,
      timeoutMs: null,
    });
  }

  /** Close the process's stdin: it reads EOF. */
  closeStdin(): Promise<void> {
    return this.sendStdin("", { close: true });
  }

  /** Set the size of a pty process's terminal (it gets SIGWINCH); a
   * process without one is a `conflict`. */
  async resize(cols: number, rows: number): Promise<void> {
    await this.t.none({ method: "POST", path: this.path("resize"), json: { cols, rows }, retry: Retry.Refused });
  }

  /** Send a signal, by name ("TERM", "SIGINT", any case). */
  async signal(name: SignalName | string): Promise<void> {
    const sig = name.toUpperCase().replace(/^SIG/, "");
    await this.t.none({ method: "POST", path: this.path("signal"), json: { signal: sig }, retry: Retry.Refused });
  }

  /** Send SIGKILL. */
  kill(): Promise<void> {
    return this.signal("KILL");
  }

  /** The process's events until it ends; with replay (the default) first
   * its output so far. Leaving the stream leaves the process running. */
  async stream(options: { replay?: boolean; signal?: AbortSignal } = {}): Promise<ExecStream> {
    const res = await this.t.send({
      method: "GET",
      path: this.path("stream"),
      query: { replay: options.replay === false ? undefined : true },
      retry: Retry.Idempotent,
      accept: "application/x-ndjson",
      signal: options.signal,
    });
    return new ExecStream(res as Response, `process ${this.pid}`, options.signal);
  }

  /** The process as the sandbox's process list shows it. */
  async info(): Promise<ProcessInfo> {
    const path = pathOf("v1", "sandboxes", this.sandboxId, "processes");
    for await (const p of iterate((token) => fetchPage<ProcessInfo>(this.t, path, "processes", { limit: MAX_LIST_LIMIT, page_token: token }))) {
      if (p.pid === this.pid) return p;
    }
    throw new WarrenError(`process ${this.pid} not found in sandbox ${this.sandboxId}`, "not_found");
  }
}
