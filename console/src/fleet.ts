/**
 * The fleet page: regions, clusters and nodes with their load, from
 * GET /v1/nodes (admin keys only); a single machine, or a key that is not
 * an admin's, is told in words.
 */
import type { Amounts, FleetNode } from "../../sdk/typescript/src/models.js";
import { WarrenError } from "../../sdk/typescript/src/errors.js";
import { cell, h, when } from "./dom.js";
import type { PageContext } from "./session.js";

export async function fleetPage(ctx: PageContext): Promise<void> {
  const title = h("h1", {}, "Fleet");
  let nodes: FleetNode[];
  try {
    nodes = await ctx.warren.nodes();
  } catch (e) {
    if (e instanceof WarrenError && e.code === "forbidden") {
      ctx.main.replaceChildren(title, h("p", { id: "fleet-message" }, "This key is not an admin's: the fleet is shown to admin keys only."));
      return;
    }
    throw e;
  }
  if (!nodes.length) {
    ctx.main.replaceChildren(title, h("p", { id: "fleet-message" }, "This server is a single machine: it runs no fleet of nodes."));
    return;
  }
  const regions = new Map<string, Map<string, FleetNode[]>>();
  for (const n of nodes) {
    const clusters = regions.get(n.region) ?? new Map<string, FleetNode[]>();
    regions.set(n.region, clusters);
    clusters.set(n.cluster, [...(clusters.get(n.cluster) ?? []), n]);
  }
  const parts: HTMLElement[] = [title];
  for (const [region, clusters] of [...regions].sort()) {
    parts.push(h("h2", {}, `Region ${region || "(none)"}`));
    for (const [cluster, list] of [...clusters].sort()) {
      parts.push(
        h("h3", {}, `Cluster ${cluster || "(none)"}`),
        h(
          "table",
          { "aria-label": `Nodes of cluster ${cluster}` },
          h("thead", {}, h("tr", {}, ...["Node", "State", "Sandboxes", "CPUs", "Memory", "Disk", "Heartbeat"].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, ...list.map((n) => h(
            "tr",
            { "data-node": n.id, "data-state": n.state },
            cell("Node", n.id, h("br"), n.addr),
            cell("State", n.state),
            cell("Sandboxes", n.sandboxes),
            cell("CPUs", load(n.allocated, n.capacity, "cpus", "")),
            cell("Memory", load(n.allocated, n.capacity, "memory_mb", " MiB")),
            cell("Disk", load(n.allocated, n.capacity, "disk_mb", " MiB")),
            cell("Heartbeat", when(n.heartbeat_at)),
          ))),
        ),
      );
    }
  }
  ctx.main.replaceChildren(...parts);
}

/** A resource's allocation against its capacity, as text and a meter. */
function load(used: Amounts, cap: Amounts, k: keyof Amounts, unit: string): HTMLElement {
  const u = used?.[k] ?? 0;
  const c = cap?.[k] ?? 0;
  return h("span", {}, `${u} of ${c}${unit} `, h("meter", { min: 0, max: c || 1, value: u, "aria-label": `${k} allocated` }));
}
