//go:build linux

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// The gvisor runtime's own benchmarks (issue 36), each against a baseline
// runtime in the same run. The others of the issue are runtime dimensions
// of older benchmarks: BenchmarkCreateToFirstExec, ...Pool,
// BenchmarkExecTrueAPI, BenchmarkLiveFork and BenchmarkIdleSandboxes.
// Run with (docs/BENCHMARKS.md has the figures):
//   sudo WARREN_TEST_TEMPLATE_CACHE=/var/cache/warren-test WARREN_BIN=$PWD/bin \
//     go test ./e2e -run '^$' -bench 'SyscallHeavy|PauseResume' -benchtime 10x

// syscallHeavy is a workload of many system calls and little else: ten
// python3 start-ups, each importing modules (stat, open, read and mmap of
// hundreds of files).
const syscallHeavy = `for i in 1 2 3 4 5 6 7 8 9 10; do python3 -c 'import json, email, http.client' || exit 1; done`

// BenchmarkSyscallHeavy: one exec of syscallHeavy per iteration, per
// runtime: container (the baseline: the host kernel serves the calls),
// then gvisor (its Sentry does); the ratio of the p50s is what gVisor's
// user-space kernel costs a system-call-bound program.
func BenchmarkSyscallHeavy(b *testing.B) {
	need(b)
	compareRuntimes(b, benchRuntimes, func(b *testing.B, rt string) map[string]float64 {
		id := shared.newSandbox(b, "--runtime", rt)
		c := shared.client()
		ctx := context.Background()
		run := func() time.Duration {
			start := time.Now()
			res, err := c.Exec(ctx, id, api.ExecRequest{Shell: syscallHeavy})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("%s: %+v, %v", syscallHeavy, res, err)
			}
			return time.Since(start)
		}
		run() // the files in the page cache, as for every later run
		var ds []time.Duration
		for b.Loop() {
			ds = append(ds, run())
		}
		return map[string]float64{"p50-ms": ms(reportPercentiles(b, ds))}
	})
}

// memoryHolder holds %d MiB of random bytes (none of it zero pages, none
// compressible) and writes its pid to /tmp/holder.pid once it does.
const memoryHolder = `
import os, time
held = bytearray(os.urandom(%d << 20))
open('/tmp/holder.pid', 'w').write(str(os.getpid()))
while True:
    time.sleep(1)
`

// BenchmarkPauseResume: pause with memory and resume of a running sandbox
// in which a process holds some memory, per runtime: vm (the baseline;
// under TCG here) and gvisor; the container runtime cannot pause. Each
// iteration times the pause call, the resume call, and the resume to the
// first exec of `true` after it; each as a p50 and its ratio to vm's in
// the same run. A paused gvisor sandbox stays frozen, its memory held,
// for the daemon's --pause-spill-after and is then saved: its figures are
// of a resume from frozen, and (saved-*) of a second pause and resume in
// each iteration, resumed once its memory was saved. Two sandboxes: one
// of 256 MiB holding 16 MiB, one of 512 MiB holding 256 MiB. The holder
// must outlive every pause.
func BenchmarkPauseResume(b *testing.B) {
	need(b)
	for _, c := range []struct{ memoryMB, holdMB int }{{256, 16}, {512, 256}} {
		b.Run(fmt.Sprintf("memory=%dMiB/held=%dMiB", c.memoryMB, c.holdMB), func(b *testing.B) {
			compareRuntimes(b, []string{"vm", "gvisor"}, func(b *testing.B, rt string) map[string]float64 {
				cl := shared.client()
				ctx := context.Background()
				id := shared.newSandbox(b, "--runtime", rt, "--memory", strconv.Itoa(c.memoryMB))
				if _, err := cl.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", fmt.Sprintf(memoryHolder, c.holdMB)}}); err != nil {
					b.Fatal(err)
				}
				wait.For(b, 2*time.Minute, "the holder to hold its memory", func() bool {
					res, err := cl.Exec(ctx, id, api.ExecRequest{Shell: "test -s /tmp/holder.pid"})
					return err == nil && res.ExitCode == 0
				})
				// pauseResume pauses and resumes the sandbox, after its
				// memory was saved when saved, and returns the three times.
				pauseResume := func(saved bool) (pause, resume, exec time.Duration) {
					before := processEnded(id)
					t0 := time.Now()
					if _, err := cl.PauseSandbox(ctx, id); err != nil {
						b.Fatalf("pause: %v\ndaemon log:\n%s", err, shared.log.tail(30))
					}
					pause = time.Since(t0)
					if saved {
						wait.For(b, spillAfter+time.Minute, "the paused sandbox's process to end", func() bool { return processEnded(id) > before })
					}
					t1 := time.Now()
					if _, err := cl.ResumeSandbox(ctx, id); err != nil {
						b.Fatalf("resume: %v\ndaemon log:\n%s", err, shared.log.tail(30))
					}
					resume = time.Since(t1)
					if res, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
						b.Fatalf("exec after resume: %+v, %v", res, err)
					}
					return pause, resume, time.Since(t1)
				}
				var pauses, resumes, execs, savedResumes, savedExecs []time.Duration
				for b.Loop() {
					p, r, e := pauseResume(false)
					pauses, resumes, execs = append(pauses, p), append(resumes, r), append(execs, e)
					if rt == "gvisor" {
						_, r, e := pauseResume(true)
						savedResumes, savedExecs = append(savedResumes, r), append(savedExecs, e)
					}
				}
				if res, err := cl.Exec(ctx, id, api.ExecRequest{Shell: "kill -0 $(cat /tmp/holder.pid)"}); err != nil || res.ExitCode != 0 {
					b.Errorf("the holder after %d pauses: %+v, %v; want it running on", len(pauses), res, err)
				}
				figs := map[string]float64{
					"pause-ms":       ms(median(pauses)),
					"resume-ms":      ms(median(resumes)),
					"resume-exec-ms": ms(median(execs)),
				}
				if len(savedResumes) > 0 {
					figs["saved-resume-ms"] = ms(median(savedResumes))
					figs["saved-resume-exec-ms"] = ms(median(savedExecs))
				}
				for unit, v := range figs {
					b.ReportMetric(v, unit)
				}
				return figs
			})
		})
	}
}
