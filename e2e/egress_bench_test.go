//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"warren/api"
)

// Run with (docs/BENCHMARKS.md records the figures):
//   sudo WARREN_TEST_TEMPLATE_CACHE=/var/cache/warren-test \
//     go test ./e2e -run '^$' -bench 'Egress' -benchtime 500x

// egressClient makes n HTTPS GETs of / on each of conns kept-alive
// connections to a host of the test internet (not verified: the baseline
// sandbox does not trust the test internet's CA, and a kept-alive
// connection verifies nothing per request) and prints the latencies'
// p50 and p99 in microseconds and the requests per second of them all.
const egressClient = `
import http.client, json, ssl, sys, threading, time
host, n, conns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
lat, lock = [], threading.Lock()
def run():
    c = http.client.HTTPSConnection(host, 443, context=ctx)
    for _ in range(20):
        c.request("GET", "/"); c.getresponse().read()
    mine = []
    for _ in range(n):
        t0 = time.perf_counter(); c.request("GET", "/"); c.getresponse().read(); mine.append(time.perf_counter() - t0)
    with lock: lat.extend(mine)
ts = [threading.Thread(target=run) for _ in range(conns)]
t0 = time.perf_counter()
for t in ts: t.start()
for t in ts: t.join()
wall = time.perf_counter() - t0
lat.sort()
print(json.dumps({"p50": lat[len(lat)//2]*1e6, "p99": lat[int(len(lat)*0.99)]*1e6, "rps": len(lat)/wall}))
`

// BenchmarkEgress compares a sandbox's HTTPS requests to the same server
// of the test internet, over kept-alive connections: intercepted (its
// rule's header set, the interceptor's own TLS upstream), passed through
// by the interceptor (a name without a rule at an address it intercepts)
// and direct (a sandbox without rules). latency runs one connection;
// throughput eight at once.
func BenchmarkEgress(b *testing.B) {
	need(b)
	ctx := context.Background()
	cl := tenantClient(b, "egress-bench")
	if _, err := cl.SetSecret(ctx, "bench", api.SetSecretRequest{Value: "bench-secret"}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.DeleteSecret(context.Background(), "bench") })
	rules := map[string][]api.NetworkRule{"api.secrets.test": {{Transform: &api.Transform{Headers: map[string]string{"Authorization": "Bearer ${secrets.bench}"}}}}}
	sandbox := func(p *api.NetworkPolicy) string {
		sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: "container", Network: p}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cl.DeleteSandbox(context.Background(), sb.ID) })
		return sb.ID
	}
	withRules, without := sandbox(&api.NetworkPolicy{Rules: rules}), sandbox(nil)
	for _, load := range []struct {
		name  string
		conns int
	}{{"latency", 1}, {"throughput", 8}} {
		for _, c := range []struct{ name, id, host string }{
			{"direct", without, "api.secrets.test"},
			{"passed-through", withRules, "other.secrets.test"},
			{"intercepted", withRules, "api.secrets.test"},
		} {
			b.Run(load.name+"/"+c.name, func(b *testing.B) {
				// The rule's name resolved first: its address (the server's)
				// is intercepted for the answer's TTL, 60 s.
				res, err := cl.Exec(ctx, c.id, api.ExecRequest{Cmd: []string{"sh", "-c",
					`getent hosts api.secrets.test >/dev/null && exec python3 -c "$0" "$@"`, egressClient,
					c.host, fmt.Sprint(max(b.N/load.conns, 1)), fmt.Sprint(load.conns)}, TimeoutMs: 600000})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("client: %v %+v", err, res)
				}
				var out struct{ P50, P99, RPS float64 }
				if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
					b.Fatalf("client said %q: %v", res.Stdout, err)
				}
				b.ReportMetric(out.P50, "p50-µs")
				b.ReportMetric(out.P99, "p99-µs")
				b.ReportMetric(out.RPS, "req/s")
			})
		}
	}
}
