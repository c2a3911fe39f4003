package buildspec

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const base = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

// fixedContext hashes every source to a fixed digest.
type fixedContext map[string]string

func (c fixedContext) Hash(src string) (string, error) { return c[src], nil }

// keySpec is a spec with every kind of step; step 3 copies "app".
func keySpec() *Spec {
	mode := uint32(0o755)
	return &Spec{From: "default", Env: map[string]string{"LANG": "C.UTF-8"}, Steps: []Step{
		{Kind: KindApt, Packages: []string{"python3-pip"}},
		{Kind: KindPip, Packages: []string{"numpy==2.1.0"}},
		{Kind: KindCopy, Src: "app", Dest: "/opt/app", Mode: &mode, Owner: "user"},
		{Kind: KindEnv, Env: map[string]string{"APP_MODE": "prod"}},
		{Kind: KindRun, Shell: "pip install -e /opt/app"},
		{Kind: KindWorkdir, Dir: "/opt/app"},
		{Kind: KindUser, User: "user"},
		{Kind: KindRun, Argv: []string{"python3", "-c", "print(1)"}},
	}}
}

func keys(t *testing.T, s *Spec, ctx Context) []string {
	t.Helper()
	k, err := s.Keys(base, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(k) != len(s.Steps) {
		t.Fatalf("%d keys for %d steps", len(k), len(s.Steps))
	}
	return k
}

// changedFrom returns the indexes where a and b differ.
func changedFrom(a, b []string) []int {
	var d []int
	for i := range a {
		if a[i] != b[i] {
			d = append(d, i)
		}
	}
	return d
}

func TestKeysGolden(t *testing.T) {
	ctx := fixedContext{"app": "sha256:aa"}
	got := keys(t, keySpec(), ctx)
	// Changing these changes every cached build step of every template:
	// change them only with the canonical form's version.
	want := []string{
		"sha256:1f101b674d014621401d2aa824f289261f8938b99cc04f11cfa3d3b531d87ec3",
		"sha256:96f65d54e93e750deba94074e0a8a9ecc575a0a2c79e6f25e751806350b80444",
		"sha256:06e9d364f75855c0ac55d1603123f1da39b8332374efc5187a48f7ac33a3abb6",
		"sha256:bda1fe41b8bf65c964584481f4da85841d55a072f41b9f6b90e6f99a58bfb9c1",
		"sha256:f5011499aef6045eb82926cf2029782d6eaa098ee47bc2ed192a4aa4fa4608eb",
		"sha256:8a091d6442ae85ba0819386e7be66026ec4951abc0c7f33dc9bf7b28eba5863a",
		"sha256:a5b99c0589e1b0e1b2c9a2cd5f546a3abc393c21d80fe3ecbae5ef15b21c5635",
		"sha256:585455827a2d8a44e96c67a8de5bb3f27062a30878f5421cb0abdecb087ce1a5",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("keys\n%q\nwant\n%q", got, want)
	}
	if again := keys(t, keySpec(), ctx); !reflect.DeepEqual(got, again) {
		t.Errorf("keys differ between two runs:\n%q\n%q", got, again)
	}
	seen := map[string]bool{}
	for i, k := range got {
		if !strings.HasPrefix(k, "sha256:") || len(k) != len("sha256:")+64 || seen[k] {
			t.Errorf("key %d %q: not a fresh sha256 digest", i+1, k)
		}
		seen[k] = true
	}
}

func TestKeysChange(t *testing.T) {
	ctx := fixedContext{"app": "sha256:aa"}
	orig := keys(t, keySpec(), ctx)
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for _, tt := range []struct {
		name   string
		change func(s *Spec)
		ctx    Context
		want   []int // the steps whose keys change
	}{
		{"nothing", func(*Spec) {}, ctx, nil},
		{"line", func(s *Spec) { s.Steps[4].Line = 40 }, ctx, nil},
		{"start, limits, network", func(s *Spec) {
			s.Start = &Start{Command: "x", ReadyTimeout: DefaultReadyTimeout}
			s.Limits.DiskMB = 1024
			s.Network = nil
		}, ctx, nil},
		{"last step", func(s *Spec) { s.Steps[7].Argv[2] = "print(2)" }, ctx, []int{7}},
		{"last step's form", func(s *Spec) { s.Steps[7] = Step{Kind: KindRun, Shell: "python3 -c 'print(1)'"} }, ctx, []int{7}},
		{"copied content", func(*Spec) {}, fixedContext{"app": "sha256:bb"}, []int{2, 3, 4, 5, 6, 7}},
		{"copy mode", func(s *Spec) { *s.Steps[2].Mode = 0o700 }, ctx, []int{2, 3, 4, 5, 6, 7}},
		{"env step", func(s *Spec) { s.Steps[3].Env["APP_MODE"] = "dev" }, ctx, []int{3, 4, 5, 6, 7}},
		{"spec env", func(s *Spec) { s.Env["LANG"] = "C" }, ctx, all},
		{"first step", func(s *Spec) { s.Steps[0].Packages = append(s.Steps[0].Packages, "curl") }, ctx, all},
		{"workdir", func(s *Spec) { s.Steps[5].Dir = "/srv" }, ctx, []int{5, 6, 7}},
		{"user", func(s *Spec) { s.Steps[6].User = "root" }, ctx, []int{6, 7}},
		{"pip index", func(s *Spec) { s.Steps[1].IndexURL = "https://mirror/simple" }, ctx, []int{1, 2, 3, 4, 5, 6, 7}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := keySpec()
			tt.change(s)
			if got := changedFrom(orig, keys(t, s, tt.ctx)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("changed steps %v, want %v", got, tt.want)
			}
		})
	}
	k, err := keySpec().Keys("sha256:other", ctx)
	if err != nil || k[0] == orig[0] {
		t.Errorf("another base gives the same first key (%v)", err)
	}
}

func TestKeysContent(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "app/main.py"), "print(1)\n", 0o644)
	write(t, filepath.Join(dir, "requirements.txt"), "numpy\n", 0o644)
	s := &Spec{From: "default", Steps: []Step{
		{Kind: KindCopy, Src: "requirements.txt", Dest: "/opt/"},
		{Kind: KindRun, Shell: "pip install -r /opt/requirements.txt"},
		{Kind: KindCopy, Src: "app", Dest: "/opt/app"},
		{Kind: KindRun, Shell: "python3 /opt/app/main.py"},
	}}
	ctx := DirContext(dir)
	before := keys(t, s, ctx)
	write(t, filepath.Join(dir, "app/main.py"), "print(2)\n", 0o644)
	if got := changedFrom(before, keys(t, s, ctx)); !reflect.DeepEqual(got, []int{2, 3}) {
		t.Errorf("after editing app/main.py the keys of steps %v changed, want [2 3]", got)
	}
}

func TestKeysErrors(t *testing.T) {
	if _, err := keySpec().Keys(base, nil); err == nil || err.Error() != "cache keys: step 3 copies app but there is no build context" {
		t.Errorf("no context: %v", err)
	}
	if _, err := keySpec().Keys("", fixedContext{}); err == nil {
		t.Error("no base: no error")
	}
	bad := keySpec()
	bad.Steps[0].Packages = nil
	if _, err := bad.Keys(base, fixedContext{}); err == nil || err.Error() != "step 1 (apt): lists no package" {
		t.Errorf("an invalid spec: %v", err)
	}
	if _, err := keySpec().Keys(base, DirContext(t.TempDir())); err == nil || !strings.Contains(err.Error(), "step 3: build context:") {
		t.Errorf("a missing source: %v", err)
	}
}

func write(t *testing.T, name, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, mode); err != nil { // whatever the umask
		t.Fatal(err)
	}
}
