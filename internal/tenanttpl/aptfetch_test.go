package tenanttpl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAptLog is the regression test of issue 35, row 13: the host's
// apt-get output, mirror addresses and node paths among it, was streamed
// to the tenant as it was. Now the tenant sees what concerns its packages
// and apt's errors, with every address and path taken out.
func TestAptLog(t *testing.T) {
	var got []string
	l := &aptLog{out: func(s string) { got = append(got, s) }, scrub: []string{"mirror.internal:8080", "mirror.internal"}}
	for _, s := range []string{
		"Reading package lists...",
		"Hit:1 http://mirror.internal:8080/debian bookworm InRelease",
		"Get:2 http://mirror.internal:8080/debian bookworm/main amd64 hello amd64 2.10-3 [56.3 kB]",
		"Err:3 http://mirror.internal:8080/debian bookworm/main amd64 gone all 1.0-1",
		"  404  Not Found [IP: 10.20.30.40 8080]",
		"E: Failed to fetch http://mirror.internal:8080/debian/pool/main/g/gone/gone_1.0-1_all.deb  404  Not Found [IP: 10.20.30.40 8080]",
		"E: Unable to locate package nope",
		"W: Could not open file /var/lib/warren/disks/templates/.apt/bookworm/lists/x - open (13: Permission denied)",
		"E: Could not connect to mirror.internal:8080 (10.20.30.40). - connect (111: Connection refused)",
		"The following packages have unmet dependencies:",
		" python3-pip : Depends: python3-wheel but it is not going to be installed",
		"Fetched 56.3 kB in 0s (1124 kB/s)",
	} {
		l.line(s)
	}
	all := strings.Join(got, "\n")
	for _, leak := range []string{"http", "mirror.internal", "10.20.30.40", "/var/lib", "8080", "InRelease", "Reading"} {
		if strings.Contains(all, leak) {
			t.Errorf("the tenant sees %q:\n%s", leak, all)
		}
	}
	for _, want := range []string{"fetched hello 2.10-3 (56.3 kB)", "could not fetch gone 1.0-1", "404 Not Found",
		"E: Unable to locate package nope", "python3-pip : Depends: python3-wheel"} {
		if !strings.Contains(all, want) {
			t.Errorf("the tenant does not see %q:\n%s", want, all)
		}
	}
	if !strings.Contains(l.tail(), "Unable to locate package nope") {
		t.Errorf("the error's tail: %q", l.tail())
	}
	// What a sandbox's status can make apt say is bounded.
	n := 0
	many := &aptLog{out: func(string) { n++ }}
	for range 3 * maxAptLines {
		many.line("W: a warning")
	}
	if n != maxAptLines+1 {
		t.Errorf("%d lines shown, want %d and a line saying the rest are not", n, maxAptLines+1)
	}
}

// TestParsePrintURI: a fetch's plan is apt's --print-uris lines; a file
// name that could be a path is not one.
func TestParsePrintURI(t *testing.T) {
	d, ok := parsePrintURI("'http://deb.debian.org/debian/pool/main/p/python-pip/python3-pip_23.0.1%2bdfsg-1_all.deb' python3-pip_23.0.1%2bdfsg-1_all.deb 1325332 SHA256:0123abcd")
	if !ok || d.name != "python3-pip_23.0.1%2bdfsg-1_all.deb" || d.size != 1325332 || d.pkg != "python3-pip" || d.version != "23.0.1+dfsg-1" {
		t.Errorf("parsePrintURI = %+v, %v", d, ok)
	}
	for _, s := range []string{
		"'http://x/y.deb' ../../etc/passwd_1_all.deb 10 SHA256:00",
		"'http://x/y.deb' a/b_1_all.deb 10 SHA256:00",
		"'http://x/y.deb' hello_1_all.deb -1 SHA256:00",
		"E: Unable to locate package nope",
	} {
		if d, ok := parsePrintURI(s); ok {
			t.Errorf("parsePrintURI(%q) = %+v", s, d)
		}
	}
}

// TestSweepRuns: what a fetch of a uid left (its directory, when a daemon
// died during it) is gone before the uid's next fetch; nothing else is.
func TestSweepRuns(t *testing.T) {
	run := t.TempDir()
	for _, d := range []string{"left", "left2/cache"} {
		if err := os.MkdirAll(filepath.Join(run, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(run, "lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Directories of the test's own uid stand for the fetch's (another
	// uid's would need root to make).
	if err := sweepRuns(run, os.Getuid()+1); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(run); len(entries) != 3 {
		t.Fatalf("another uid's sweep took %d of 3 entries", 3-len(entries))
	}
	if err := sweepRuns(run, os.Getuid()); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(run)
	if len(entries) != 1 || entries[0].Name() != "lock" {
		t.Errorf("after the sweep: %v, want the lock file alone", entries)
	}
}
