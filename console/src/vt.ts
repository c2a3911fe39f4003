/**
 * A minimal terminal screen: printable text, CR, LF, backspace and tab,
 * erase-in-line; every other escape sequence (colours, cursor moves,
 * window titles) is read and dropped. Enough for a shell's prompt and a
 * command's output, without a terminal library.
 */

/** Lines kept above the cursor's. */
const SCROLLBACK = 2000;

const enum Mode {
  Text,
  Escape, // after ESC
  CSI, // after ESC [
  OSC, // after ESC ]: until BEL or ESC \
  OSCEscape, // ESC inside an OSC
}

export class Screen {
  /** The lines, the cursor's last. */
  lines: string[] = [""];
  private row = 0;
  private col = 0;
  private mode = Mode.Text;
  private params = "";
  private readonly decoder = new TextDecoder();

  /** Feed bytes of output (a UTF-8 character may span two calls). */
  write(data: Uint8Array | string): void {
    const text = typeof data === "string" ? data : this.decoder.decode(data, { stream: true });
    for (const ch of text) this.char(ch);
  }

  /** The screen as text. */
  text(): string {
    return this.lines.join("\n");
  }

  private char(ch: string): void {
    switch (this.mode) {
      case Mode.Escape:
        this.mode = ch === "[" ? Mode.CSI : ch === "]" ? Mode.OSC : Mode.Text;
        this.params = "";
        return;
      case Mode.CSI:
        if (ch >= "@" && ch <= "~") {
          this.mode = Mode.Text;
          this.csi(ch);
        } else {
          this.params += ch;
        }
        return;
      case Mode.OSC:
        if (ch === "\x07") this.mode = Mode.Text;
        else if (ch === "\x1b") this.mode = Mode.OSCEscape;
        return;
      case Mode.OSCEscape:
        this.mode = ch === "\\" ? Mode.Text : Mode.OSC;
        return;
      case Mode.Text:
        break;
    }
    switch (ch) {
      case "\x1b":
        this.mode = Mode.Escape;
        return;
      case "\r":
        this.col = 0;
        return;
      case "\n":
        this.newline();
        return;
      case "\b":
        if (this.col > 0) this.col--;
        return;
      case "\t":
        this.put(" ".repeat(8 - (this.col % 8)));
        return;
    }
    if (ch < " " || ch === "\x7f") return;
    this.put(ch);
  }

  /** A CSI sequence: K erases the line (0: to its end, 1: to the cursor,
   * 2: all), C and D move right and left; the rest are ignored. */
  private csi(final: string): void {
    const n = parseInt(this.params, 10);
    const line = this.lines[this.row];
    if (final === "K") {
      if (!n) this.lines[this.row] = line.slice(0, this.col);
      else if (n === 1) this.lines[this.row] = " ".repeat(this.col) + line.slice(this.col);
      else this.lines[this.row] = "";
    } else if (final === "C") {
      this.col += n || 1;
    } else if (final === "D") {
      this.col = Math.max(0, this.col - (n || 1));
    }
  }

  private put(s: string): void {
    const line = this.lines[this.row].padEnd(this.col);
    this.lines[this.row] = line.slice(0, this.col) + s + line.slice(this.col + s.length);
    this.col += s.length;
  }

  private newline(): void {
    this.row++;
    this.col = 0;
    if (this.row === this.lines.length) this.lines.push("");
    if (this.lines.length > SCROLLBACK) {
      const drop = this.lines.length - SCROLLBACK;
      this.lines.splice(0, drop);
      this.row -= drop;
    }
  }
}

/** The bytes a key sends to a terminal; undefined for keys left to the
 * browser (Tab moves the focus on: Ctrl-I sends a tab). */
export function keyBytes(e: KeyboardEvent): string | undefined {
  if (e.ctrlKey && !e.altKey && !e.metaKey && e.key.length === 1) {
    const c = e.key.toUpperCase().charCodeAt(0);
    if (c >= 64 && c <= 95) return String.fromCharCode(c - 64);
    return undefined;
  }
  if (e.metaKey) return undefined;
  const named: Record<string, string> = {
    Enter: "\r",
    Backspace: "\x7f",
    Escape: "\x1b",
    ArrowUp: "\x1b[A",
    ArrowDown: "\x1b[B",
    ArrowRight: "\x1b[C",
    ArrowLeft: "\x1b[D",
    Home: "\x1b[H",
    End: "\x1b[F",
    Delete: "\x1b[3~",
    PageUp: "\x1b[5~",
    PageDown: "\x1b[6~",
  };
  if (e.key in named) return (e.altKey ? "\x1b" : "") + named[e.key];
  if (e.key.length === 1 || [...e.key].length === 1) return (e.altKey ? "\x1b" : "") + e.key;
  return undefined;
}
