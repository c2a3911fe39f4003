/**
 * Reading answers as they arrive: a body split into lines (ndjson and
 * server-sent events), base64, and output kept up to a limit.
 */
import { WarrenError } from "./errors.js";
import { concat, describe } from "./transport.js";

/**
 * The lines of a body, as text without their line ends ("\n", "\r\n" or a
 * lone "\r", as server-sent events allow), as they arrive. A last line
 * without an end is yielded too. A read that fails is a `network`
 * WarrenError (or the signal's reason when it was aborted); nothing arriving
 * for idleMs (when given) is a `timeout` WarrenError. Leaving the loop
 * early cancels the body.
 */
export async function* lines(
  body: ReadableStream<Uint8Array>,
  what: string,
  idleMs?: number,
  signal?: AbortSignal,
): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let cr = false; // the last chunk ended with "\r": a "\n" next belongs to it
  try {
    for (;;) {
      const { done, value } = await read(reader, what, idleMs, signal);
      let text = done ? decoder.decode() : decoder.decode(value, { stream: true });
      if (cr && text.startsWith("\n")) text = text.slice(1);
      cr = false;
      buf += text;
      let at: number;
      while ((at = buf.search(/[\r\n]/)) >= 0) {
        const line = buf.slice(0, at);
        if (buf[at] === "\r") {
          if (at + 1 === buf.length) cr = true;
          else if (buf[at + 1] === "\n") at++;
        }
        buf = buf.slice(at + 1);
        yield line;
      }
      if (done) {
        if (buf) yield buf;
        return;
      }
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
}

/** One read of reader, bounded by idleMs and signal. */
async function read(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  what: string,
  idleMs: number | undefined,
  signal: AbortSignal | undefined,
): Promise<ReadableStreamReadResult<Uint8Array>> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let onAbort: (() => void) | undefined;
  const stops: Promise<never>[] = [];
  if (idleMs !== undefined) {
    stops.push(new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new WarrenError(`${what}: nothing for ${idleMs} ms`, "timeout")), idleMs);
    }));
  }
  if (signal) {
    stops.push(new Promise<never>((_, reject) => {
      onAbort = () => reject(signal.reason);
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
    }));
  }
  try {
    return await Promise.race([reader.read(), ...stops]);
  } catch (e) {
    if (e instanceof WarrenError || signal?.aborted) throw e;
    throw new WarrenError(`${what}: connection broke: ${describe(e)}`, "network", 0, "", { cause: e });
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener("abort", onAbort);
  }
}

/** Bytes as base64. */
export function toBase64(data: Uint8Array): string {
  let s = "";
  for (let i = 0; i < data.length; i += 0x8000) {
    s += String.fromCharCode(...data.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

/** The bytes of base64 text. */
export function fromBase64(text: string): Uint8Array {
  const s = atob(text);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

/** Bytes as they are, text as UTF-8. */
export function bytesOf(data: Uint8Array | string): Uint8Array {
  return typeof data === "string" ? new TextEncoder().encode(data) : data;
}

/** Most output a collected result keeps of each stream, as the server does
 * for a collected exec. */
export const MAX_OUTPUT = 16 << 20;

/** Output kept for a result, up to MAX_OUTPUT bytes. */
export class Output {
  private parts: Uint8Array[] = [];
  private size = 0;
  truncated = false;

  add(data: Uint8Array): void {
    const room = MAX_OUTPUT - this.size;
    if (data.length > room) {
      data = data.subarray(0, Math.max(room, 0));
      this.truncated = true;
    }
    if (data.length) {
      this.parts.push(data);
      this.size += data.length;
    }
  }

  /** The output as text, invalid UTF-8 as U+FFFD. */
  text(): string {
    return new TextDecoder().decode(concat(this.parts, this.size));
  }
}
