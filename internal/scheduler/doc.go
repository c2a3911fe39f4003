// Package scheduler places a sandbox in the fleet: given a View of the
// nodes (what they last reported, plus what the control plane has placed
// on them since) and a Request, Place picks a cluster and then a node.
// It is pure: no I/O, no clock, no globals; every random choice comes from
// the *rand.Rand it is given, so a decision is a function of the view, the
// request and the seed. The simulation in cmd/warren-schedsim drives the
// same code that places real sandboxes.
//
// It is not the node's admission (internal/sandbox admits or refuses what
// it is sent, by its own figures) nor the control plane (which keeps the
// view up to date from heartbeats and tells the node what to run).
//
// # Filters
//
// A node is feasible for a request when, in this order (the order in which
// a NoFitError names the filter that emptied the field):
//
//  1. it is in the request's region, if one is named;
//  2. it is healthy and neither draining nor cordoned;
//  3. it has a runtime of the requested name (any, if none is named) with
//     at least the requested isolation and the requested accel, if any;
//  4. for a memory snapshot, its CPU is compatible with the one the
//     snapshot was taken on: the same model, when the snapshot names one,
//     and every CPU flag the snapshot's CPU had;
//  5. it has every label of the request, with the same value;
//  6. its free vCPUs, then memory, then disk cover the request, free being
//     capacity × overcommit − allocated for each resource.
//
// # Score
//
// A node's cost, lower is better:
//
//	cost = LocalityWeight × fetch/GiB + LoadWeight × load/(1 − load)
//
// fetch is the bytes the node would download to materialize the request's
// lineage: the sizes of the lineage's layers nearer than the nearest one
// it holds (the snapshot engine clones the deepest ancestor it has and
// applies the layers below it; a layer held further up, behind a missing
// one, saves nothing). A node that holds none of the lineage fetches all
// of it. load is the node's dominant share once the request is placed:
// the largest of (allocated + requested) / (capacity × overcommit) over
// vCPUs, memory and disk, or the node's reported load (0–1) if higher,
// capped at 0.99. load/(1 − load) is how queueing delay grows with
// utilization: cheap while a node has room, steep as it fills, so that
// locality packs forks onto the nodes holding their lineage until they
// are busy, not until they are full. With the defaults (1 and 1) a node
// half full costs as much as a GiB to fetch, three quarters full 3 GiB,
// 90% full 9 GiB. Ties go to fewer bytes, then to the smaller node ID.
//
// # Best-of-K
//
// Place does not score every node. It scores up to Config.Locality
// feasible nodes that the layer index says hold the lineage's nearest
// layers (walking the lineage nearest-first, from a random holder of each
// layer, so that forks of one snapshot spread over its holders), plus up
// to Config.K feasible nodes sampled at random (the power of K choices,
// for load). When the draws find fewer than K feasible nodes (few fit),
// it scans the cluster for the rest. Cluster choice comes first: clusters of the region whose
// summed free capacity could hold the request, cheapest first by the same
// formula over the cluster's aggregates (its nearest holder's fetch, its
// summed load: an estimate). Place picks the best node of the first
// cluster in which one fits, and also of the next ones while their
// estimate is below the best node's cost, up to 3 clusters: aggregates
// hide that the few nodes a request may use in a cluster (a label, a CPU
// model) are full. Ties between clusters go to the lower load, then to
// the cluster that joined first.
//
// Policies: PolicyLocality is the score above; PolicyLeastLoaded scores
// the same K random candidates by load alone; PolicyRandom takes a random
// feasible node of a random cluster. The last two exist to be compared
// with the first.
//
// # Cost
//
// With n nodes, c clusters, d lineage layers and K+L candidates, a
// decision costs O(d + c·log c) to resolve the lineage and order the
// clusters, plus O((K+L)·(filters + d)) to probe and score candidates in
// each of at most 3 clusters; a cluster scan (few sampled nodes fit) is
// O(n/c · d), and a request that fits nowhere scans the region once more
// to name the filter. Updates are
// cheap: Allocate and Release are O(1); AddLayer and RemoveLayer are O(1)
// expected plus O(c) to find the layer's holders in the node's cluster;
// Upsert is O(labels + runtimes + flags), plus O(held layers) if the node
// changes cluster; Remove is O(held layers).
//
// A View is not safe for concurrent use: the control plane serializes
// decisions and updates, as one decision is microseconds.
package scheduler
