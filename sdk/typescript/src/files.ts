/**
 * A sandbox's filesystem: contents in and out (streamed where fetch
 * allows), and stat, list, mkdir, move, remove. Paths are absolute, or
 * relative to the user's home; one that climbs above `/` is a
 * `bad_request`, never silently cleaned.
 */
import type { BodyData } from "./exec.js";
import type { FileInfo, Page, PageOptions } from "./models.js";
import { all, iterate } from "./pages.js";
import { Retry, Transport, pathOf } from "./transport.js";

/** Options of a file write. */
export interface WriteOptions {
  /** Permission bits, e.g. 0o755 (default 0o644). */
  mode?: number;
  /** The owner (default root). */
  user?: string;
  signal?: AbortSignal;
}

/** Options of a directory listing. */
export interface ListOptions extends PageOptions {
  /** How deep to descend (default 1: the directory's own entries). */
  depth?: number;
}

/** The files of one sandbox; `sandbox.files`. */
export class Files {
  constructor(
    private readonly t: Transport,
    readonly sandboxId: string,
  ) {}

  private path(...elems: string[]): string {
    return pathOf("v1", "sandboxes", this.sandboxId, "files", ...elems);
  }

  /** A file's contents as a stream, read as it arrives (a browser's fetch
   * too). Read it to its end or cancel it. */
  async readStream(path: string, options: { signal?: AbortSignal } = {}): Promise<ReadableStream<Uint8Array>> {
    const res = await this.t.send({
      method: "GET",
      path: this.path(),
      query: { path },
      retry: Retry.Idempotent,
      accept: "application/octet-stream",
      signal: options.signal,
    });
    return (res as Response).body ?? new Blob([]).stream();
  }

  /** A file's contents. */
  read(path: string, options: { signal?: AbortSignal } = {}): Promise<Uint8Array> {
    return this.t.bytes({
      method: "GET",
      path: this.path(),
      query: { path },
      retry: Retry.Idempotent,
      accept: "application/octet-stream",
      signal: options.signal,
    });
  }

  /** A file's contents as text (UTF-8; invalid bytes as U+FFFD). */
  async readText(path: string, options: { signal?: AbortSignal } = {}): Promise<string> {
    return new TextDecoder().decode(await this.read(path, options));
  }

  /** Write a file, replacing it whole at once; parents are created. A
   * ReadableStream is sent as it is read (Node; a browser's fetch streams
   * uploads only over HTTP/2). Never retried. */
  write(path: string, data: BodyData, options: WriteOptions = {}): Promise<FileInfo> {
    return this.t.json<FileInfo>({
      method: "PUT",
      path: this.path(),
      query: { path, mode: options.mode === undefined ? undefined : options.mode.toString(8).padStart(4, "0"), user: options.user },
      body: data as BodyInit,
      timeoutMs: null,
      signal: options.signal,
    });
  }

  /** A file's information. */
  stat(path: string): Promise<FileInfo> {
    return this.t.json<FileInfo>({ method: "GET", path: this.path("stat"), query: { path }, retry: Retry.Idempotent });
  }

  /** Whether something exists at path. */
  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (e) {
      if ((e as { code?: string }).code === "not_found") return false;
      throw e;
    }
  }

  /** One page of a directory's entries, depth first, each directory's in
   * byte order of their names. */
  async listPage(path: string, options: ListOptions = {}): Promise<Page<FileInfo>> {
    const doc = await this.t.json<{ entries: FileInfo[]; next_page_token?: string }>({
      method: "GET",
      path: this.path("list"),
      query: { path, depth: options.depth, limit: options.limit, page_token: options.page_token },
      retry: Retry.Idempotent,
    });
    return { items: doc.entries ?? [], next_page_token: doc.next_page_token };
  }

  /** Every entry of a directory, a page at a time. */
  iter(path: string, options: { depth?: number } = {}): AsyncGenerator<FileInfo> {
    return iterate((token) => this.listPage(path, { depth: options.depth, limit: 10000, page_token: token }));
  }

  /** Every entry of a directory. */
  list(path: string, options: { depth?: number } = {}): Promise<FileInfo[]> {
    return all(this.iter(path, options));
  }

  /** Make a directory and its parents (mode default 0o755). */
  mkdir(path: string, options: { mode?: number; user?: string } = {}): Promise<FileInfo> {
    return this.t.json<FileInfo>({
      method: "POST",
      path: this.path("mkdir"),
      json: { path, mode: options.mode, user: options.user },
      retry: Retry.Refused,
    });
  }

  /** Move (rename) a file or directory. */
  move(source: string, destination: string): Promise<FileInfo> {
    return this.t.json<FileInfo>({
      method: "POST",
      path: this.path("move"),
      json: { source, destination },
      retry: Retry.Refused,
    });
  }

  /** Remove a file, or a directory (a non-empty one only with recursive,
   * else `conflict`). */
  async remove(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.t.none({
      method: "DELETE",
      path: this.path(),
      query: { path, recursive: options.recursive ? true : undefined },
      retry: Retry.Refused,
    });
  }
}
