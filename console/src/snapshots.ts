/**
 * The snapshots page: the tenant's snapshot lineage as a tree drawn in
 * SVG. Its nodes are every snapshot and every sandbox started from one
 * (its `origin`); its edges go from a snapshot's parent to it, and from a
 * snapshot to each sandbox restored or forked from it. A snapshot whose
 * parent was deleted is a root. Selecting a snapshot offers restore, fork
 * N (a restore of N) and delete.
 */
import type { SandboxInfo, Snapshot } from "../../sdk/typescript/src/models.js";
import { Status, bytes, button, facts, h, svg, when } from "./dom.js";
import type { PageContext } from "./session.js";

const W = 210; // a node's box
const H = 46;
const DX = 260; // from a depth to the next
const DY = 62; // from a leaf to the next

type TreeNode =
  | { kind: "snapshot"; id: string; parent?: string; snap: Snapshot }
  | { kind: "sandbox"; id: string; parent: string; sb: SandboxInfo };

export async function snapshotsPage(ctx: PageContext): Promise<void> {
  const status = new Status("snapshots");
  const panel = h("div", { id: "selection", "aria-live": "polite" }, "Select a snapshot (click it, or Tab to it and press Enter) to restore, fork or delete it.");
  const tree = h("div", { class: "tree", id: "tree" });
  ctx.main.replaceChildren(
    h("h1", {}, "Snapshots"),
    h("p", {}, "Each snapshot under its parent, and each sandbox under the snapshot it was started from (dashed)."),
    h("div", { class: "row" }, button("Reload", () => void load())),
    tree,
    panel,
    status.el,
  );

  const load = async () => {
    const [snaps, sandboxes] = await Promise.all([ctx.warren.snapshots(), ctx.warren.list()]);
    const nodes = new Map<string, TreeNode>();
    for (const s of snaps) nodes.set(s.id, { kind: "snapshot", id: s.id, parent: s.parent, snap: s });
    for (const s of sandboxes) {
      if (s.info.origin && s.info.state !== "stopped") nodes.set(s.id, { kind: "sandbox", id: s.id, parent: s.info.origin, sb: s.info });
    }
    tree.replaceChildren(draw(nodes, (n) => select(n)));
    if (!nodes.size) tree.replaceChildren(h("p", {}, "No snapshots yet: take one from a sandbox's page."));
    panel.replaceChildren("Select a snapshot (click it, or Tab to it and press Enter) to restore, fork or delete it.");
  };

  const select = (n: TreeNode) => {
    for (const g of tree.querySelectorAll("[aria-pressed]")) g.setAttribute("aria-pressed", String(g.getAttribute("data-node") === n.id));
    if (n.kind === "sandbox") {
      panel.replaceChildren(
        h("h2", {}, `Sandbox ${n.id}`),
        facts([["State", n.sb.state], ["From snapshot", n.parent], ["Created", when(n.sb.created_at)]]),
        h("p", {}, h("a", { href: `#/sandboxes/${encodeURIComponent(n.id)}` }, `Open ${n.id}`)),
      );
      return;
    }
    const s = n.snap;
    const count = h("input", { id: "fork-count", type: "number", min: 1, max: 256, value: 2, "aria-label": "How many sandboxes to fork" });
    const result = new Status("snapshot-action");
    const act = async (label: string, run: () => Promise<string>) => {
      const done = await result.run(label, run, (text) => text);
      if (done !== undefined) {
        const text = result.el.textContent ?? "";
        await load().catch((e) => status.error(e));
        panel.append(result.el);
        result.ok(text);
      }
    };
    const restore = (k: number) => act(`Starting ${k} sandbox${k > 1 ? "es" : ""} from ${s.id}…`, async () => {
      const kids = await ctx.warren.restore(s.id, { count: k });
      return `Started from ${s.id}: ${kids.map((c) => c.id).join(", ")}.`;
    });
    panel.replaceChildren(
      h("h2", {}, `Snapshot ${s.id}`),
      facts([
        ["State", s.state + (s.error ? `: ${s.error}` : "")],
        ["Of sandbox", s.sandbox_id],
        ["Parent", s.parent ?? "— (its template)"],
        ["Scope", s.scope],
        ["Disk", bytes(s.disk_bytes)],
        ["Changed", bytes(s.changed_bytes)],
        ["Stored", bytes(s.stored_bytes)],
        ["Taken", when(s.created_at)],
      ]),
      h(
        "div",
        { class: "row" },
        button("Restore", () => void restore(1), { id: "restore-button" }),
        count,
        button("Fork", () => void restore(Math.max(1, Math.min(256, Number(count.value) || 1))), { id: "fork-n-button" }),
        button("Delete", () => void act(`Deleting ${s.id}…`, async () => {
          await ctx.warren.deleteSnapshot(s.id);
          return `Deleted ${s.id}.`;
        }), { id: "delete-snapshot-button" }),
      ),
      result.el,
    );
  };

  await load();
}

/** The tree as SVG: select is called with a node when it is chosen. */
function draw(nodes: Map<string, TreeNode>, select: (n: TreeNode) => void): SVGSVGElement {
  const children = new Map<string, TreeNode[]>();
  const roots: TreeNode[] = [];
  for (const n of nodes.values()) {
    if (n.parent && nodes.has(n.parent)) {
      const list = children.get(n.parent) ?? [];
      list.push(n);
      children.set(n.parent, list);
    } else {
      roots.push(n);
    }
  }
  const at = new Map<string, { x: number; y: number }>();
  let leaves = 0;
  let depthMax = 0;
  const place = (n: TreeNode, depth: number): number => {
    depthMax = Math.max(depthMax, depth);
    const kids = children.get(n.id) ?? [];
    let y: number;
    if (!kids.length) {
      y = 10 + leaves++ * DY;
    } else {
      const ys = kids.map((k) => place(k, depth + 1));
      y = (ys[0] + ys[ys.length - 1]) / 2;
    }
    at.set(n.id, { x: 10 + depth * DX, y });
    return y;
  };
  for (const r of roots) place(r, 0);

  const width = 20 + depthMax * DX + W;
  const height = 20 + Math.max(1, leaves) * DY - (DY - H);
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "group", "aria-label": "Snapshot lineage" });
  for (const [parent, kids] of children) {
    const p = at.get(parent)!;
    for (const k of kids) {
      const c = at.get(k.id)!;
      const x1 = p.x + W, y1 = p.y + H / 2, x2 = c.x, y2 = c.y + H / 2, mx = (x1 + x2) / 2;
      root.append(svg("path", { class: "edge", "data-from": parent, "data-to": k.id, d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` }));
    }
  }
  for (const n of nodes.values()) {
    const { x, y } = at.get(n.id)!;
    const detail = n.kind === "snapshot"
      ? `${n.snap.state} · ${bytes(n.snap.disk_bytes)}`
      : `sandbox · ${n.sb.state}`;
    const label = n.kind === "snapshot"
      ? `Snapshot ${n.id}, ${n.snap.state}, ${bytes(n.snap.disk_bytes)}${n.parent ? ", from " + n.parent : ""}`
      : `Sandbox ${n.id}, ${n.sb.state}, from snapshot ${n.parent}`;
    const g = svg(
      "g",
      {
        class: "node",
        "data-node": n.id,
        "data-kind": n.kind,
        "data-state": n.kind === "snapshot" ? n.snap.state : n.sb.state,
        "data-parent": n.parent ?? "",
        tabindex: 0,
        role: "button",
        "aria-pressed": "false",
        "aria-label": label,
        transform: `translate(${x},${y})`,
      },
      svg("title", {}, label),
      svg("rect", { width: W, height: H }),
      svg("text", { x: 8, y: 18 }, n.id),
      svg("text", { x: 8, y: 36 }, detail),
    );
    g.addEventListener("click", () => select(n));
    g.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        select(n);
      }
    });
    root.append(g);
  }
  return root;
}
