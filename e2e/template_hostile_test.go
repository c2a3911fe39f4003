//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/internal/archive/archivetest"
)

// A hostile tenant's template builds (issue 35): what a build's sandbox
// writes never becomes a host path, a URL or an apt option, and what its
// context holds is bounded on the node's disk and in the daemon's memory.

// TestTemplateAptHostileRelease is the regression test of issue 35, rows
// 1 and 13. A build's run step set VERSION_CODENAME in the sandbox's
// /etc/os-release to a path out of the node's apt directory, and the
// apt step after it made lists/, parts/, lock and sources.list there, as
// root, and sent the path to the mirror; the host's apt-get output, the
// mirror's address among it, streamed to the tenant. Now the suite is
// warren's record of the build's base (default: bookworm), apt-get runs
// as a uid of its own, and the tenant sees its packages, not the mirror.
func TestTemplateAptHostileRelease(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, _ := newTenant(t, "tpl-release")
	target := filepath.Join(os.TempDir(), fmt.Sprintf("warren-apt-release-%d", time.Now().UnixNano()))
	t.Cleanup(func() { os.RemoveAll(target) })
	spec := fmt.Sprintf(`from: default
steps:
  - run: sed -i 's|^VERSION_CODENAME=.*|VERSION_CODENAME=%s%s|' /etc/os-release
  - apt: [hello]
`, strings.Repeat("../", 16), strings.TrimPrefix(target, "/"))
	var log strings.Builder
	tpl, err := c.CreateTemplate(ctx, api.CreateTemplateRequest{Name: "release", Spec: spec}, &log)
	if _, serr := os.Stat(target); serr == nil {
		entries, _ := os.ReadDir(target)
		t.Errorf("the build wrote %s on the host: %v", target, entries)
	}
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	for _, leak := range []string{"http://", "https://", "deb.debian.org", shared.dataDir, "Hit:", "InRelease"} {
		if strings.Contains(log.String(), leak) {
			t.Errorf("the build's log shows the tenant %q:\n%s", leak, log.String())
		}
	}
	t.Logf("build log:\n%s", log.String())
	if !strings.Contains(log.String(), "hello") {
		t.Errorf("the build's log does not name the package it fetched:\n%s", log.String())
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: tpl.Ref})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSandbox(context.Background(), sb.ID)
	if res := shellIn(t, c, sb.ID, "hello"); res.Stdout != "Hello, world!\n" {
		t.Errorf("hello in a sandbox of %s: %+v", tpl.Ref, res)
	}
	// A package apt cannot find is named in the error, and nothing of
	// the host's with it.
	log.Reset()
	_, err = c.CreateTemplate(ctx, api.CreateTemplateRequest{Name: "nope", Spec: "from: default\nsteps:\n  - apt: [warren-no-such-package]\n"}, &log)
	if err == nil || !strings.Contains(err.Error(), "Unable to locate package warren-no-such-package") || strings.Contains(err.Error()+log.String(), "http") {
		t.Errorf("an apt step of a package apt cannot find: %v\n%s", err, log.String())
	}
	// What the node keeps for apt is its own: no directory of it is
	// root's but root's, and none is anyone else's to write.
	dir := filepath.Join(shared.dataDir, "disks", "templates", ".apt")
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err == nil && st.Mode&0o002 != 0 {
			t.Errorf("%s is writable by everyone: %o", p, st.Mode&0o7777)
		}
		return nil
	})
}

// peaks samples the daemon's resident memory and the used space of the
// host's filesystem under its data directory until stop, and returns
// their growth over what they were at the start, at their highest.
func peaks(t testing.TB) (stop func() (rss, disk int64)) {
	t.Helper()
	used := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(shared.dataDir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Blocks-st.Bfree) * st.Bsize
	}
	rss0, disk0 := shared.rss(t), used()
	var mu sync.Mutex
	rssMax, diskMax := rss0, disk0
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			r, d := shared.rss(t), used()
			mu.Lock()
			rssMax, diskMax = max(rssMax, r), max(diskMax, d)
			mu.Unlock()
		}
	}()
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return rssMax - rss0, diskMax - disk0
	}
}

// buildSparse runs the attack of issue 35, row 3: a build whose context,
// a few KiB, holds a PAX sparse file that expands to size bytes, and a
// copy step of it.
func buildSparse(ctx context.Context, t testing.TB, name string, size int64) (string, error) {
	t.Helper()
	c, _ := newTenant(t, "tpl-sparse")
	var log strings.Builder
	_, err := c.CreateTemplate(ctx, api.CreateTemplateRequest{
		Name: name, Spec: "from: default\nsteps:\n  - copy: {src: big, dest: /root/big}\n", Context: archivetest.SparseTar(size),
	}, &log)
	return log.String(), err
}

// TestTemplateContextSparse is the regression test of issue 35, row 3: a
// build context of a few KiB holding a PAX sparse file wrote 512 MiB of
// real blocks under the node's disk pool, and its copy step held the file
// in the daemon's memory. Now the context is refused, sparse, before a
// byte of it is written.
func TestTemplateContextSparse(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stop := peaks(t)
	log, err := buildSparse(ctx, t, "sparse", 512<<20)
	rss, disk := stop()
	if err == nil || !strings.Contains(err.Error(), "sparse") {
		t.Errorf("a build of a sparse context: %v, want it refused as sparse\n%s", err, log)
	}
	t.Logf("daemon RSS +%d MiB, host disk +%d MiB at most", rss>>20, disk>>20)
	if rss > 64<<20 || disk > 64<<20 {
		t.Errorf("the build took the daemon %d MiB more memory and the host %d MiB more disk, want at most 64 MiB each", rss>>20, disk>>20)
	}
}

// BenchmarkTemplateContextSparse runs issue 35's row 3 attack against the
// live daemon and reports how far the daemon's resident memory and the
// host's used disk rose during it, at most.
func BenchmarkTemplateContextSparse(b *testing.B) {
	need(b)
	var rss, disk int64
	for i := range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		stop := peaks(b)
		_, err := buildSparse(ctx, b, fmt.Sprintf("sparse%d", i), 512<<20)
		r, d := stop()
		cancel()
		if err == nil {
			b.Fatal("a sparse context was accepted")
		}
		rss, disk = max(rss, r), max(disk, d)
	}
	b.ReportMetric(float64(rss)/(1<<20), "rss-growth-MiB")
	b.ReportMetric(float64(disk)/(1<<20), "disk-growth-MiB")
}
