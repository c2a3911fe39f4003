package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"warren/internal/scheduler"
)

// metrics are one policy's figures over the stream.
type metrics struct {
	policy scheduler.Policy
	// placements of new sandboxes, and of sandboxes whose node failed
	placedNew, refusedNew     int
	placedAgain, refusedAgain int
	failures                  int   // nodes that failed
	stranded                  int   // sandboxes that were on them
	bytes                     int64 // downloaded, by every placement
	latency                   []time.Duration
	decisions                 []time.Duration
	imbalance                 []float64         // fullest node's memory share / the mean, per sample
	peak                      float64           // the fullest node's share, ever
	mismatches                int               // decisions whose FetchBytes differed from what the node fetched
	depths                    [maxDepth + 2]int // placements by the length of their lineage
	wall                      time.Duration
}

func newMetrics(p scheduler.Policy, n int) *metrics {
	return &metrics{policy: p, latency: make([]time.Duration, 0, n), decisions: make([]time.Duration, 0, n)}
}

func (m *metrics) placed(again bool, bytes int64, lat time.Duration, depth int) {
	m.depths[depth]++
	if again {
		m.placedAgain++
	} else {
		m.placedNew++
	}
	m.bytes += bytes
	m.latency = append(m.latency, lat)
}

func (m *metrics) refused(again bool) {
	if again {
		m.refusedAgain++
	} else {
		m.refusedNew++
	}
}

func (m *metrics) perPlacement() float64 {
	if n := m.placedNew + m.placedAgain; n > 0 {
		return float64(m.bytes) / float64(n)
	}
	return 0
}

func percentile[T any](sorted []T, p float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

type summary struct {
	latP50, latP99       time.Duration
	decP50, decP99, decX time.Duration
	imbMean, imbMax      float64
}

func (m *metrics) summarize() summary {
	lat := slices.Clone(m.latency)
	slices.Sort(lat)
	dec := slices.Clone(m.decisions)
	slices.Sort(dec)
	var s summary
	s.latP50, s.latP99 = percentile(lat, 0.5), percentile(lat, 0.99)
	s.decP50, s.decP99 = percentile(dec, 0.5), percentile(dec, 0.99)
	if len(dec) > 0 {
		s.decX = dec[len(dec)-1]
	}
	for _, x := range m.imbalance {
		s.imbMean += x
		s.imbMax = max(s.imbMax, x)
	}
	if len(m.imbalance) > 0 {
		s.imbMean /= float64(len(m.imbalance))
	}
	return s
}

// depthAt is the lineage length below which a share p < 1 of placements
// fall.
func (m *metrics) depthAt(p float64) int {
	total := 0
	for _, n := range m.depths {
		total += n
	}
	seen := 0
	for d, n := range m.depths {
		if seen += n; float64(seen) > p*float64(total) {
			return d
		}
	}
	return len(m.depths) - 1
}

func (m *metrics) depthMax() int {
	for d := len(m.depths) - 1; d > 0; d-- {
		if m.depths[d] > 0 {
			return d
		}
	}
	return 0
}

func gib(b float64) string { return fmt.Sprintf("%.1f GiB", b/(1<<30)) }

func report(w io.Writer, o options, f *fleet, ms []*metrics) {
	fmt.Fprintf(w, "warren-schedsim: %d nodes (%d clusters, %d regions), %d sandboxes, seed %d, memory %.0f%% held on average, %d node failures\n",
		o.nodes, f.clusters, len(f.regions), o.sandboxes, o.seed, 100*o.util, ms[0].failures)
	fmt.Fprintf(w, "lineages: %d to %d layers, median %d, p99 %d\n", ms[0].depthAt(0), ms[0].depthMax(), ms[0].depthAt(0.5), ms[0].depthAt(0.99))
	fmt.Fprintf(w, "%-13s %9s %7s %9s %7s %14s %12s %10s %10s %9s %9s %10s %10s %10s %8s\n",
		"policy", "placed", "refused", "re-placed", "lost", "downloaded", "per place", "restore50", "restore99",
		"imbal", "peak", "decide50", "decide99", "decideMax", "wall")
	for _, m := range ms {
		s := m.summarize()
		fmt.Fprintf(w, "%-13s %9d %7d %9d %7d %14s %12s %10s %10s %9.2f %8.0f%% %10s %10s %10s %8s\n",
			m.policy, m.placedNew, m.refusedNew, m.placedAgain, m.refusedAgain,
			gib(float64(m.bytes)), fmt.Sprintf("%.0f MiB", m.perPlacement()/(1<<20)),
			s.latP50.Round(time.Millisecond), s.latP99.Round(time.Millisecond),
			s.imbMean, 100*m.peak, s.decP50.Round(100*time.Nanosecond), s.decP99.Round(100*time.Nanosecond),
			s.decX.Round(time.Microsecond), m.wall.Round(100*time.Millisecond))
		if m.mismatches > 0 {
			fmt.Fprintf(w, "  %s: %d decisions expected another fetch than the node made\n", m.policy, m.mismatches)
		}
	}
	loc, ll := find(ms, scheduler.PolicyLocality), find(ms, scheduler.PolicyLeastLoaded)
	if loc == nil {
		return
	}
	p99 := loc.summarize().decP99
	fmt.Fprintf(w, "goal: decision p99 < 1 ms: %s (%s)\n", verdict(p99 < time.Millisecond), p99.Round(100*time.Nanosecond))
	if ll != nil && ll.bytes > 0 {
		r := float64(loc.bytes) / float64(ll.bytes)
		fmt.Fprintf(w, "goal: locality downloads ≤ 20%% of least-loaded's: %s (%.1f%%)\n", verdict(r <= 0.2), 100*r)
	}
}

func find(ms []*metrics, p scheduler.Policy) *metrics {
	for _, m := range ms {
		if m.policy == p {
			return m
		}
	}
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
