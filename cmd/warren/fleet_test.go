package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warren/internal/pki"
)

// fleetCLI runs a warren fleet command line.
func fleetCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"fleet"}, args...), nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestFleetCerts: `warren fleet ca` makes a CA once, and `warren fleet
// cert` members that load against it under the identity asked for, with
// their keys private; bad roles and names are refused with the rule.
func TestFleetCerts(t *testing.T) {
	dir := t.TempDir()
	caDir, out := filepath.Join(dir, "ca"), filepath.Join(dir, "n1")
	if code, _, errOut := fleetCLI("ca", caDir); code != 0 {
		t.Fatalf("fleet ca: exit %d: %s", code, errOut)
	}
	if code, _, errOut := fleetCLI("ca", caDir); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("a second fleet ca: exit %d: %s", code, errOut)
	}
	code, stdout, errOut := fleetCLI("cert", "--ca", caDir, "--role", "node", "--name", "n1", out)
	if code != 0 {
		t.Fatalf("fleet cert: exit %d: %s", code, errOut)
	}
	if want := filepath.Join(out, "n1.pem") + "\n" + filepath.Join(out, "n1.key") + "\n"; stdout != want {
		t.Errorf("fleet cert printed %q, want %q", stdout, want)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	m, err := pki.LoadMember(read("n1.pem"), read("n1.key"), read("ca.pem"))
	if err != nil || m.ID != (pki.Identity{Role: pki.Node, Name: "n1"}) {
		t.Fatalf("the member: %+v, %v", m, err)
	}
	for _, f := range []string{filepath.Join(caDir, "ca.key"), filepath.Join(out, "n1.key")} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", f, fi.Mode(), err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cert", "--ca", caDir, "--role", "node", "--name", "n1", out}, "already exists"},
		{[]string{"cert", "--ca", caDir, "--role", "tenant", "--name", "x", out}, "role must be"},
		{[]string{"cert", "--ca", caDir, "--role", "node", "--name", "Bad/Name", out}, "name must be"},
		{[]string{"cert", "--ca", filepath.Join(dir, "none"), "--role", "node", "--name", "x", out}, "read the CA"},
		{[]string{"cert", "--role", "node", "--name", "x", out}, "--ca is required"},
	} {
		if code, _, errOut := fleetCLI(tc.args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("fleet %v: exit %d, %q; want it refused with %q", tc.args, code, errOut, tc.want)
		}
	}
}
