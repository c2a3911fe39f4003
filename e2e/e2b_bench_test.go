//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"warren/api"
)

// BenchmarkE2BCommandsRun times the e2b SDK from npm against warren's own
// HTTP API from the same node.js process, alternating (e2e/e2b/bench.mjs):
// commands.run('true') against an exec of the same command, and
// Sandbox.create to its first command against a create and an exec.
// Each iteration is a whole run of the script; it reports the p50s and
// their ratios.
func BenchmarkE2BCommandsRun(b *testing.B) {
	need(b)
	node, dir := e2bNode(b)
	k, err := shared.client().CreateKey(context.Background(), api.CreateKeyRequest{Tenant: "e2b-bench"})
	if err != nil {
		b.Fatal(err)
	}
	type q struct{ P50, P99 float64 }
	var res struct {
		Exec, Create struct{ E2B, Warren q }
	}
	for range b.N {
		cmd := exec.Command(node, "bench.mjs")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(),
			"E2B_API_KEY="+k.Key, "E2B_API_URL="+shared.url+"/e2b", "E2B_SANDBOX_URL="+shared.url+"/e2b",
			"WARREN_URL="+shared.url, "WARREN_KEY="+k.Key,
			"BENCH_EXECS="+strconv.Itoa(benchCount("BENCH_EXECS", 200)), "BENCH_CREATES="+strconv.Itoa(benchCount("BENCH_CREATES", 10)))
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("node bench.mjs: %v\n%s", err, out)
		}
		if err := json.Unmarshal(out, &res); err != nil {
			b.Fatalf("node bench.mjs printed %q: %v", out, err)
		}
		b.Logf("%s", out)
	}
	b.ReportMetric(res.Exec.E2B.P50, "e2b-exec-p50-ms")
	b.ReportMetric(res.Exec.Warren.P50, "warren-exec-p50-ms")
	b.ReportMetric(res.Exec.E2B.P50/res.Exec.Warren.P50, "exec-ratio")
	b.ReportMetric(res.Create.E2B.P50, "e2b-create-p50-ms")
	b.ReportMetric(res.Create.Warren.P50, "warren-create-p50-ms")
	b.ReportMetric(res.Create.E2B.P50/res.Create.Warren.P50, "create-ratio")
}

// benchCount is the number in the environment variable name, else def.
func benchCount(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
