/**
 * The sandboxes page: the caller's sandboxes, kept live from the events
 * stream, a form to create one, and a delete button on each.
 */
import type { Sandbox } from "../../sdk/typescript/src/sandbox.js";
import type { SandboxInfo } from "../../sdk/typescript/src/models.js";
import { WarrenError } from "../../sdk/typescript/src/errors.js";
import type { Event } from "../../sdk/typescript/src/events.js";
import { Status, button, cell, h, when } from "./dom.js";
import type { PageContext } from "./session.js";

/** States of a sandbox that is gone: its row leaves the list. */
const ENDED = new Set(["stopped"]);

export async function sandboxesPage(ctx: PageContext): Promise<void> {
  const { warren, signal } = ctx;
  const status = new Status("sandboxes");
  const live = new Status("events");
  const body = h("tbody", { id: "sandbox-rows" });
  const rows = new Map<string, HTMLTableRowElement>();

  const empty = h("p", { id: "no-sandboxes" }, "No sandboxes yet: create one above.");
  const table = h(
    "table",
    { "aria-label": "Sandboxes" },
    h("thead", {}, h("tr", {}, ...["Sandbox", "State", "Template", "Runtime", "CPUs", "Memory", "Created", ""].map((c) => h("th", { scope: "col" }, c)))),
    body,
  );
  const refreshEmpty = () => {
    empty.hidden = rows.size > 0;
    table.hidden = rows.size === 0;
  };

  const remove = async (id: string) => {
    await status.run(`Deleting ${id}…`, () => warren.delete(id), () => `Deleted ${id}.`);
    drop(id);
  };
  const drop = (id: string) => {
    rows.get(id)?.remove();
    rows.delete(id);
    refreshEmpty();
  };
  const upsert = (s: SandboxInfo) => {
    if (ENDED.has(s.state)) {
      drop(s.id);
      return;
    }
    const tr = h(
      "tr",
      { "data-sandbox": s.id, "data-state": s.state },
      cell("Sandbox", h("a", { href: `#/sandboxes/${encodeURIComponent(s.id)}` }, s.id)),
      cell("State", s.state + (s.error ? `: ${s.error}` : "")),
      cell("Template", s.template),
      cell("Runtime", s.runtime),
      cell("CPUs", s.cpus),
      cell("Memory", `${s.memory_mb} MiB`),
      cell("Created", when(s.created_at)),
      cell("", button("Delete", () => void remove(s.id), { "aria-label": `Delete ${s.id}` })),
    );
    const old = rows.get(s.id);
    if (old) old.replaceWith(tr);
    else body.append(tr);
    rows.set(s.id, tr);
    refreshEmpty();
  };

  ctx.main.replaceChildren(
    h("h1", {}, "Sandboxes"),
    await createForm(ctx, (sb) => upsert(sb.info)),
    h("h2", {}, "Your sandboxes"),
    live.el,
    status.el,
    empty,
    table,
  );

  // Follow the events first, then list: a change between the two is seen
  // in the stream. Each event's sandbox is read again, so the rows show
  // the server's state whatever order the events arrive in.
  const events = warren.events({ kinds: "sandbox", signal });
  const first = events.next();
  for (const s of await warren.list()) upsert(s.info);
  refreshEmpty();
  live.ok("Live: changes appear as they happen.");
  try {
    for (let next = await first; !next.done; next = await events.next()) {
      const ev = next.value;
      if (ev.kind === "events.lost") {
        for (const s of await warren.list()) upsert(s.info);
        continue;
      }
      const id = (ev as Event).sandbox;
      if (!id) continue;
      try {
        upsert((await warren.get(id)).info);
      } catch (e) {
        if (e instanceof WarrenError && e.code === "not_found") drop(id);
        else throw e;
      }
    }
  } catch (e) {
    if (!signal.aborted) live.error(e);
  }
}

/** The form that creates a sandbox; created is told of each new one. */
async function createForm(ctx: PageContext, created: (sb: Sandbox) => void): Promise<HTMLElement> {
  const { warren } = ctx;
  const status = new Status("create");
  const template = h("select", { id: "create-template", name: "template" });
  const runtime = h("select", { id: "create-runtime", name: "runtime" }, h("option", { value: "" }, "server's default"));
  const memory = h("input", { id: "create-memory", name: "memory_mb", type: "number", min: 64, step: 64, placeholder: "default" });
  const cpus = h("input", { id: "create-cpus", name: "cpus", type: "number", min: 1, step: 1, placeholder: "default" });
  const timeout = h("input", { id: "create-timeout", name: "timeout_seconds", type: "number", min: 1, step: 1, value: 900 });
  try {
    const templates = await warren.templates();
    for (const t of templates) template.append(h("option", { value: t.name }, t.name));
    if (!templates.length) template.append(h("option", { value: "" }, "server's default"));
  } catch (e) {
    template.append(h("option", { value: "" }, "server's default"));
    status.error(e);
  }
  try {
    for (const r of (await warren.info()).runtimes ?? []) {
      runtime.append(h("option", { value: r.name, disabled: !r.available }, r.available ? `${r.name} (${r.isolation})` : `${r.name}: ${r.reason ?? "unavailable"}`));
    }
  } catch (e) {
    status.error(e);
  }
  const num = (i: HTMLInputElement) => (i.value === "" ? undefined : Number(i.value));
  const form = h(
    "form",
    { class: "fields", id: "create-form", "aria-label": "Create a sandbox" },
    h("label", {}, "Template", template),
    h("label", {}, "Runtime", runtime),
    h("label", {}, "Memory (MiB)", memory),
    h("label", {}, "CPUs", cpus),
    h("label", {}, "Timeout (s)", timeout),
    h("button", { type: "submit", id: "create-submit" }, "Create sandbox"),
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const sb = await status.run(
      "Creating a sandbox…",
      () => warren.create({
        template: template.value || undefined,
        runtime: runtime.value || undefined,
        memory_mb: num(memory),
        cpus: num(cpus),
        timeout_seconds: num(timeout),
      }),
      (sb) => `Created ${sb.id} (${sb.info.isolation}).`,
    );
    if (sb) created(sb);
  });
  return h("section", { "aria-labelledby": "create-title" }, h("h2", { id: "create-title" }, "Create a sandbox"), form, status.el);
}
