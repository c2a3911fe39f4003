/**
 * A sandbox's terminal over the WebSocket route
 * GET /v1/sandboxes/{id}/terminal?cols=N&rows=N (subprotocols
 * "warren.terminal" and "warren.key.<key>"): binary messages are the pty's
 * bytes each way, text ones {"resize":{cols,rows}} from the page and
 * {"exit":CODE} from the server. Drawn in a <pre> (vt.ts).
 */
import { errorFromResponse } from "../../sdk/typescript/src/errors.js";
import type { Sandbox } from "../../sdk/typescript/src/sandbox.js";
import { pathOf } from "../../sdk/typescript/src/transport.js";
import { Status, button, errorText, h } from "./dom.js";
import type { PageContext } from "./session.js";
import { Screen, keyBytes } from "./vt.js";

const ROWS = 24;

export function terminal(sb: Sandbox, ctx: PageContext): HTMLElement {
  const status = new Status("terminal");
  const pre = h("pre", {
    id: "terminal",
    class: "terminal",
    tabindex: 0,
    role: "textbox",
    "aria-multiline": "true",
    "aria-label": "Terminal: type to send keys; Tab leaves it, Ctrl-I sends a tab",
  });
  pre.hidden = true;
  let socket: WebSocket | undefined;
  let screen = new Screen();
  let drawing = false;
  const draw = () => {
    if (drawing) return;
    drawing = true;
    requestAnimationFrame(() => {
      drawing = false;
      pre.textContent = screen.text();
      pre.scrollTop = pre.scrollHeight;
    });
  };
  const cols = () => {
    const probe = h("span", {}, "0".repeat(10));
    pre.append(probe);
    const w = probe.getBoundingClientRect().width / 10;
    probe.remove();
    return Math.max(20, Math.min(500, Math.floor((pre.clientWidth - 16) / (w || 8))));
  };
  const encoder = new TextEncoder();
  const send = (s: string) => {
    if (socket?.readyState === WebSocket.OPEN) socket.send(encoder.encode(s));
  };

  pre.addEventListener("keydown", (e) => {
    const b = keyBytes(e);
    if (b === undefined) return;
    e.preventDefault();
    send(b);
  });
  pre.addEventListener("paste", (e) => {
    const text = e.clipboardData?.getData("text");
    if (!text) return;
    e.preventDefault();
    send(text);
  });
  const resize = () => {
    if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ resize: { cols: cols(), rows: ROWS } }));
  };
  window.addEventListener("resize", resize, { signal: ctx.signal });

  const open = () => {
    socket?.close(1000);
    screen = new Screen();
    pre.hidden = false;
    pre.textContent = "";
    const size = { cols: cols(), rows: ROWS };
    const url = new URL(pathOf("v1", "sandboxes", sb.id, "terminal"), location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    url.search = `?cols=${size.cols}&rows=${size.rows}`;
    status.busy("Connecting…");
    const ws = new WebSocket(url, ["warren.terminal", "warren.key." + ctx.key]);
    socket = ws;
    ws.binaryType = "arraybuffer";
    let opened = false;
    ws.onopen = () => {
      opened = true;
      pre.dataset.connected = "true";
      status.ok("Connected: the terminal has the keyboard when focused.");
      pre.focus();
    };
    ws.onmessage = (m) => {
      if (typeof m.data === "string") {
        const msg = JSON.parse(m.data) as { exit?: number };
        if (msg.exit !== undefined) status.ok(`The shell exited with code ${msg.exit}.`);
        return;
      }
      screen.write(new Uint8Array(m.data as ArrayBuffer));
      draw();
    };
    ws.onclose = (c) => {
      pre.dataset.connected = "false";
      if (socket !== ws) return;
      if (!opened) void refused(size);
      else if (c.code !== 1000) status.error(new Error(`The terminal's connection closed (code ${c.code}${c.reason ? ": " + c.reason : ""}).`));
    };
  };

  // A browser tells a script nothing of a refused upgrade: ask the route
  // over plain HTTP, whose error answer says why.
  const refused = async (size: { cols: number; rows: number }) => {
    try {
      const res = await fetch(pathOf("v1", "sandboxes", sb.id, "terminal") + `?cols=${size.cols}&rows=${size.rows}`, {
        headers: { Authorization: "Bearer " + ctx.key },
        signal: ctx.signal,
      });
      const body = await res.text();
      const why = res.ok ? new Error(`HTTP ${res.status}`) : errorFromResponse(res.status, body, res.headers.get("X-Request-Id") ?? "");
      const lead = res.status === 404 && /no route/.test(body)
        ? "The terminal is not available: this server has no terminal route"
        : "The terminal is not available: the server refused the connection";
      status.error(new Error(`${lead} (${errorText(why)}).`));
    } catch (e) {
      status.error(new Error(`The terminal is not available: ${errorText(e)}`));
    }
    pre.hidden = true;
  };

  ctx.signal.addEventListener("abort", () => socket?.close(1000));
  return h("div", {}, h("div", { class: "row" }, button("Open terminal", open, { id: "terminal-open" })), status.el, pre);
}
