/**
 * The few DOM helpers the pages share: building elements, a status line
 * that says what happened in words, and formatting.
 */
import { WarrenError } from "../../sdk/typescript/src/errors.js";

/** What an element may hold. */
export type Child = Node | string | number | null | undefined | false;

/** Attributes of h: "on…" functions are listeners, booleans present or
 * absent attributes, the rest strings. */
export type Attrs = Record<string, string | number | boolean | undefined | ((e: Event) => void)>;

function apply(el: Element, attrs: Attrs, children: Child[]): void {
  for (const [k, v] of Object.entries(attrs)) {
    if (typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else if (v !== false && v !== undefined) el.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === "number" ? String(c) : c);
  }
}

/** An HTML element. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  apply(el, attrs, children);
  return el;
}

/** An SVG element. */
export function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): SVGElementTagNameMap[K] {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  apply(el, attrs, children);
  return el;
}

/** A button that runs action when pressed (a click, Enter or Space). */
export function button(label: string, action: () => void, attrs: Attrs = {}): HTMLButtonElement {
  return h("button", { type: "button", onclick: () => action(), ...attrs }, label);
}

/** An error in words: a WarrenError's message with its code, anything
 * else's message. */
export function errorText(e: unknown): string {
  if (e instanceof WarrenError) {
    if (e.code === "unauthorized") return `The server refused the key: ${e.message}. Sign out and sign in with a valid key.`;
    return `${e.message} (${e.code}${e.status ? ", HTTP " + e.status : ""})`;
  }
  if (e instanceof Error) return e.message;
  return String(e);
}

/** A line that tells what an action is doing, did, or why it failed;
 * screen readers hear it change. */
export class Status {
  readonly el = h("p", { class: "status", role: "status", "aria-live": "polite" });

  constructor(name: string) {
    this.el.dataset.status = name;
  }

  busy(text: string): void {
    this.set(text, "busy");
  }

  ok(text: string): void {
    this.set(text, "ok");
  }

  error(e: unknown): void {
    this.set(errorText(e), "error");
  }

  clear(): void {
    this.set("", "");
  }

  private set(text: string, kind: string): void {
    this.el.textContent = text;
    this.el.className = "status " + kind;
    this.el.dataset.kind = kind;
  }

  /** Run an action, saying so while it runs and how it ended. */
  async run<T>(busy: string, action: () => Promise<T>, done: (v: T) => string): Promise<T | undefined> {
    this.busy(busy);
    try {
      const v = await action();
      this.ok(done(v));
      return v;
    } catch (e) {
      this.error(e);
      return undefined;
    }
  }
}

/** A number of bytes, in binary units. */
export function bytes(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

/** A time in the reader's locale. */
export function when(iso: string | undefined): string {
  if (!iso) return "—";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

/** A definition list of label and value pairs. */
export function facts(rows: [string, Child][]): HTMLDListElement {
  const dl = h("dl");
  for (const [k, v] of rows) dl.append(h("dt", {}, k), h("dd", {}, v ?? "—"));
  return dl;
}

/** A table cell with its column's name, which a narrow window shows. */
export function cell(label: string, ...children: Child[]): HTMLTableCellElement {
  return h("td", { "data-label": label || undefined }, ...children);
}
