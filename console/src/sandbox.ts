/**
 * One sandbox's page: its state and resources, network policy and what it
 * refused, metrics, exposed ports, snapshot and fork, files, terminal.
 */
import type { Sandbox } from "../../sdk/typescript/src/sandbox.js";
import { Status, bytes, button, facts, h, when } from "./dom.js";
import { fileBrowser } from "./files.js";
import type { PageContext } from "./session.js";
import { terminal } from "./terminal.js";

/** How often the metrics are read while the page is open. */
const METRICS_EVERY_MS = 5000;

export async function sandboxPage(ctx: PageContext, id: string): Promise<void> {
  const { warren, signal } = ctx;
  const sb = await warren.get(id);
  const status = new Status("sandbox");
  const details = h("div", { id: "sandbox-details" });
  const showDetails = () => {
    const s = sb.info;
    details.dataset.state = s.state;
    details.replaceChildren(facts([
      ["State", s.state + (s.error ? `: ${s.error}` : "")],
      ["Template", s.template],
      ["Runtime", s.isolation || s.runtime],
      ["CPUs", s.cpus],
      ["Memory", `${s.memory_mb} MiB`],
      ["Disk", `${s.disk_mb} MiB`],
      ["Tasks", s.pids],
      ["From snapshot", s.origin ? h("a", { href: "#/snapshots" }, s.origin) : "— (its template)"],
      ["Created", when(s.created_at)],
      ["Expires", when(s.expires_at)],
    ]));
  };
  showDetails();

  const actions = h(
    "div",
    { class: "row" },
    button("Refresh", () => void status.run("Reading the sandbox…", () => sb.refresh(), (s) => `State: ${s.state}.`).then(showDetails)),
    button("Snapshot", () => void status.run(
      "Taking a snapshot…",
      () => sb.snapshot({ wait: true }),
      (snap) => `Snapshot ${snap.id} is ${snap.state} (${bytes(snap.disk_bytes)} disk).`,
    ), { id: "snapshot-button" }),
    button("Fork", () => void status.run(
      "Forking…",
      () => sb.fork({ count: 1 }),
      (r) => `Forked from snapshot ${r.snapshot.id}: ${r.sandboxes.map((c) => c.id).join(", ")}.`,
    ), { id: "fork-button" }),
    button("Delete", async () => {
      const done = await status.run(`Deleting ${sb.id}…`, () => sb.delete(), () => `Deleted ${sb.id}.`);
      if (done !== undefined) location.hash = "#/sandboxes";
    }, { id: "delete-button" }),
  );

  ctx.main.replaceChildren(
    h("p", {}, h("a", { href: "#/sandboxes" }, "← All sandboxes")),
    h("h1", {}, `Sandbox ${sb.id}`),
    details,
    actions,
    status.el,
    section("Network", await network(sb)),
    section("Metrics", metrics(sb, signal)),
    section("Exposed ports", await ports(sb)),
    section("Files", fileBrowser(sb)),
    section("Terminal", terminal(sb, ctx)),
  );
}

function section(title: string, ...body: HTMLElement[]): HTMLElement {
  const id = "section-" + title.toLowerCase().replace(/\W+/g, "-");
  return h("section", { "aria-labelledby": id }, h("h2", { id }, title), ...body);
}

/** The egress policy and what it refused. */
async function network(sb: Sandbox): Promise<HTMLElement> {
  const status = new Status("network");
  try {
    const n = await sb.network();
    const p = n.policy ?? {};
    const policy = p.none ? "no network" : p.allow?.length ? `only ${p.allow.join(", ")}` : "the server's default";
    return h("div", { id: "network" }, facts([
      ["Egress", policy],
      ["Denied", p.deny?.length ? p.deny.join(", ") : "—"],
      ["Address", n.address || "—"],
      ["Gateway", n.gateway || "—"],
      ["Refused connections and DNS queries", n.denied],
      ["Rate-limited", n.rate_limited],
    ]));
  } catch (e) {
    status.error(e);
    return status.el;
  }
}

/** The metrics, read now and every few seconds until the page closes. */
function metrics(sb: Sandbox, signal: AbortSignal): HTMLElement {
  const box = h("div", { id: "metrics" }, "Reading…");
  const status = new Status("metrics");
  const read = async () => {
    try {
      const m = await sb.metrics();
      box.replaceChildren(facts([
        ["CPU", `${m.cpu_used_pct.toFixed(1)} % of ${m.cpu_count}`],
        ["Memory", `${bytes(m.memory_used_bytes)} of ${bytes(m.memory_total_bytes)} (cache ${bytes(m.memory_cache_bytes)})`],
        ["Disk", `${bytes(m.disk_used_bytes)} of ${bytes(m.disk_total_bytes)}`],
        ["Tasks", m.pids],
        ["Measured", when(m.at)],
      ]));
      status.clear();
    } catch (e) {
      status.error(e);
    }
  };
  void read();
  const timer = setInterval(() => void read(), METRICS_EVERY_MS);
  signal.addEventListener("abort", () => clearInterval(timer));
  return h("div", {}, box, status.el);
}

/** The previews, and a port field that shows the port's URL. */
async function ports(sb: Sandbox): Promise<HTMLElement> {
  const status = new Status("ports");
  const out = h("p", { id: "port-url" });
  let intro: HTMLElement;
  try {
    const p = await sb.preview();
    intro = h("p", {}, p.url
      ? `Ports are served at ${p.url}${p.public ? " (public)" : " (with the sandbox's token)"}.`
      : "This server has no preview domain: ports are reached through the API, with the key.");
  } catch (e) {
    status.error(e);
    intro = h("p", {});
  }
  const port = h("input", { id: "port", type: "number", min: 1, max: 65535, required: true, value: 8080 });
  const form = h("form", { class: "fields", "aria-label": "A port's URL" }, h("label", {}, "Port", port), h("button", { type: "submit" }, "Show URL"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const url = await status.run("Finding the URL…", () => sb.portUrl(Number(port.value)), () => "");
    if (url) out.replaceChildren(h("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, url));
  });
  return h("div", {}, intro, form, out, status.el);
}
