package buildspec

import "testing"

func TestDebianSuite(t *testing.T) {
	for from, want := range map[string]string{"debian:bookworm": "bookworm", "debian:sid": "sid"} {
		if got, ok := DebianSuite(from); !ok || got != want {
			t.Errorf("DebianSuite(%q) = %q, %v; want %q", from, got, ok, want)
		}
	}
	for _, from := range []string{"debian", "debian:", "debian:Bookworm", "debian:12", "debian:../x", "ubuntu:noble", "default", "debian:b"} {
		if got, ok := DebianSuite(from); ok {
			t.Errorf("DebianSuite(%q) = %q, true; want false", from, got)
		}
	}
	for _, src := range []string{"from: debian:trixie\nsteps: []\n", "FROM debian:trixie\nRUN true\n"} {
		var s *Spec
		var err error
		if src[0] == 'F' {
			s, err = ParseDockerfile([]byte(src))
		} else {
			s, err = Parse([]byte(src))
		}
		if err != nil || s.From != "debian:trixie" {
			t.Errorf("%q: %+v, %v; want from debian:trixie", src, s, err)
		}
	}
}
