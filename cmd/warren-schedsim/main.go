// Command warren-schedsim drives internal/scheduler through a simulated
// fleet: it generates nodes (regions, clusters, three node types, CPU
// models, runtimes, labels), a tree-search workload (fleet.go,
// workload.go), each node's layer cache (cache.go: LRU by bytes), churn
// and node failures, and plays the same stream under the locality,
// least-loaded and random policies. It reports, per policy, the bytes
// nodes downloaded, the modelled restore latency (sim.go), refusals, how
// unevenly memory was held, and the time each Place call took.
//
//	go run ./cmd/warren-schedsim -nodes 10000 -sandboxes 1000000 -seed 1
//
// Policies run one after another, on one core.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	"warren/internal/scheduler"
)

func main() {
	var o options
	var policies string
	flag.IntVar(&o.nodes, "nodes", 10000, "nodes in the fleet")
	flag.IntVar(&o.sandboxes, "sandboxes", 1000000, "sandboxes asked for (creates and restores), one per tick")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the fleet, the workload and the scheduler")
	flag.Float64Var(&o.util, "util", 0.6, "share of the fleet's memory (after overcommit) that live sandboxes hold on average")
	flag.Float64Var(&o.failures, "failures", 0.05, "nodes that fail over the run, as a share of the fleet")
	flag.Float64Var(&o.recoverAfter, "recover", 0.05, "a failed node's downtime, as a share of the run")
	flag.IntVar(&o.sched.K, "k", 0, "random candidates per decision (0: the scheduler's default)")
	flag.IntVar(&o.sched.Locality, "locality", 0, "index candidates per decision (0: the default)")
	flag.Float64Var(&o.sched.LoadWeight, "load-weight", 0, "cost of a full node, in GiB fetched (0: the default)")
	flag.StringVar(&policies, "policies", "locality,least-loaded,random", "policies to compare")
	flag.Parse()
	if o.nodes < 1 || o.sandboxes < 1 {
		fmt.Fprintln(os.Stderr, "warren-schedsim: -nodes and -sandboxes must be positive")
		os.Exit(2)
	}
	var ps []scheduler.Policy
	for _, name := range strings.Split(policies, ",") {
		p, ok := policyNamed(name)
		if !ok {
			fmt.Fprintf(os.Stderr, "warren-schedsim: unknown policy %q\n", name)
			os.Exit(2)
		}
		ps = append(ps, p)
	}
	ms, f, err := simulate(o, ps)
	if err != nil {
		fmt.Fprintln(os.Stderr, "warren-schedsim:", err)
		os.Exit(1)
	}
	report(os.Stdout, o, f, ms)
}

// simulate runs the stream under each policy in turn.
func simulate(o options, ps []scheduler.Policy) ([]*metrics, *fleet, error) {
	var ms []*metrics
	var f *fleet
	for _, p := range ps {
		m, fl, err := run(o, p)
		if err != nil {
			return nil, nil, fmt.Errorf("%v: %w", p, err)
		}
		ms, f = append(ms, m), fl
		runtime.GC() // the next policy starts from a clean heap
	}
	return ms, f, nil
}

func policyNamed(name string) (scheduler.Policy, bool) {
	for _, p := range []scheduler.Policy{scheduler.PolicyLocality, scheduler.PolicyLeastLoaded, scheduler.PolicyRandom} {
		if p.String() == strings.TrimSpace(name) {
			return p, true
		}
	}
	return 0, false
}
