package sandbox

import (
	"context"
	"time"

	"warren/api"
	"warren/internal/metrics"
)

// registerMetrics registers the manager's gauges with reg, read at each
// scrape: its sandboxes by runtime and state, its warm pools, its memory
// images, its capacity against what it promised (admit.go), and what its
// sandboxes' networks refused.
func (m *Manager) registerMetrics(reg *metrics.Registry) {
	reg.Gauges([]metrics.Family{
		{Name: "warren_sandboxes", Help: "Sandboxes of this node, by runtime and state: running, or paused (held with its memory, or asleep in the blob store).", Labels: []string{"runtime", "state"}},
		{Name: "warren_pool_members", Help: "Warm pools' members on this node, by template, runtime and kind (ready, or target: what the node aims to keep).", Labels: []string{"template", "runtime", "kind"}},
		{Name: "warren_pool_claims", Help: "Creates that matched a warm pool on this node since it was set, by template, runtime and result (hit or miss).", Labels: []string{"template", "runtime", "result"}},
		{Name: "warren_memory_images", Help: "This node's memory images of vm sandboxes, by state (preparing, ready, failed).", Labels: []string{"state"}},
		{Name: "warren_node_capacity", Help: "What this node may promise its sandboxes (memory after overcommit), by resource: cpus, memory_mb, disk_mb.", Labels: []string{"resource"}},
		{Name: "warren_node_claimed", Help: "What this node's sandboxes (warm pools' members included) hold of its capacity, by resource: cpus, memory_mb, disk_mb.", Labels: []string{"resource"}},
		{Name: "warren_network_refusals_total", Help: "What sandboxes' egress policies refused on this node since the daemon started, by kind: denied (connections and DNS queries), rate_limited (new connections over the rate).", Labels: []string{"kind"}, Counter: true},
	}, m.metricSamples)
}

// metricSamples answers registerMetrics' families, in their order.
func (m *Manager) metricSamples() [][]metrics.Sample {
	type rs struct{ runtime, state string }
	counts := map[rs]int{}
	m.mu.Lock()
	for _, l := range m.live {
		st := api.StateRunning
		if l.paused {
			st = api.StatePaused
		}
		counts[rs{l.rt.Name(), st}]++
	}
	m.mu.Unlock()
	// The paused ones no runtime holds sleep in the blob store, on this
	// node's record.
	if asleep, err := m.deps.Store.SleepingByRuntime(context.Background(), m.deps.NodeID); err == nil {
		for rt, n := range asleep {
			counts[rs{rt, api.StatePaused}] += n
		}
	} else {
		m.log.Warn("count paused sandboxes for metrics", "err", err)
	}
	var sandboxes []metrics.Sample
	for _, rt := range m.deps.Runtimes {
		for _, st := range []string{api.StateRunning, api.StatePaused} {
			sandboxes = append(sandboxes, metrics.Sample{Labels: []string{rt.Name(), st}, Value: float64(counts[rs{rt.Name(), st}])})
		}
	}

	var members, claims []metrics.Sample
	m.poolsMu.Lock()
	for k, w := range m.pools {
		members = append(members,
			metrics.Sample{Labels: []string{k.template, k.runtime, "ready"}, Value: float64(len(w.pool.Ready()))},
			metrics.Sample{Labels: []string{k.template, k.runtime, "target"}, Value: float64(w.target)})
		claims = append(claims,
			metrics.Sample{Labels: []string{k.template, k.runtime, "hit"}, Value: float64(w.hits.Load())},
			metrics.Sample{Labels: []string{k.template, k.runtime, "miss"}, Value: float64(w.misses.Load())})
	}
	m.poolsMu.Unlock()

	images := map[string]int{"preparing": 0, "ready": 0, "failed": 0}
	for _, img := range m.Images() {
		images[img.State]++
	}
	var imageSamples []metrics.Sample
	for _, st := range []string{"preparing", "ready", "failed"} {
		imageSamples = append(imageSamples, metrics.Sample{Labels: []string{st}, Value: float64(images[st])})
	}

	u := m.Usage()
	amounts := func(a Amounts) []metrics.Sample {
		return []metrics.Sample{
			{Labels: []string{"cpus"}, Value: a.CPUs},
			{Labels: []string{"memory_mb"}, Value: float64(a.MemoryMB)},
			{Labels: []string{"disk_mb"}, Value: float64(a.DiskMB)},
		}
	}
	var refusals []metrics.Sample
	if m.deps.Network != nil {
		r := m.deps.Network.Refusals()
		refusals = []metrics.Sample{
			{Labels: []string{"denied"}, Value: float64(r.Denied)},
			{Labels: []string{"rate_limited"}, Value: float64(r.RateLimited)},
		}
	}
	return [][]metrics.Sample{sandboxes, members, claims, imageSamples, amounts(u.Capacity), amounts(u.Claimed), refusals}
}

// observe records that op, begun at t0, succeeded.
func (m *Manager) observe(op string, t0 time.Time) { m.deps.Metrics.Observe(op, time.Since(t0)) }
