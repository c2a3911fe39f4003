package buildspec

import (
	"errors"
	"testing"
)

// checkAccepted checks what must hold of a spec a parser accepted: it is
// valid, and its states and keys can be computed.
func checkAccepted(t *testing.T, s *Spec) {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatalf("accepted a spec Validate refuses: %v\n%+v", err, s)
	}
	each, _ := s.States()
	if len(each) != len(s.Steps) {
		t.Fatalf("%d states for %d steps", len(each), len(s.Steps))
	}
	ctx := fixedContext{}
	for _, st := range s.Steps {
		ctx[st.Src] = "sha256:00"
		if st.Layered() != (st.Kind != KindEnv && st.Kind != KindWorkdir && st.Kind != KindUser) {
			t.Fatalf("step %+v: Layered() = %v", st, st.Layered())
		}
		if (st.Command() != nil) != (st.Kind == KindRun || st.Kind == KindPip) {
			t.Fatalf("step %+v: Command() = %q", st, st.Command())
		}
	}
	if _, err := s.Keys(base, ctx); err != nil {
		t.Fatalf("Keys of an accepted spec: %v", err)
	}
}

func checkRefused(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Msg == "" {
		t.Fatalf("error %T %v is not an *Error with a message", err, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("from: x\nsteps:\n  - copy: {src: a/../b, dest: /c/}\n  - run: [a, b]\n  - env: {A: b}\n"))
	f.Add([]byte("from: x\nsteps: &s [{apt: [ab]}]\nenv: {A: *s}\n"))
	f.Add([]byte("from: x\nsteps:\n  - pip: {packages: [a], index_url: 'http://h/'}\n  - {user: '0'}\n"))
	f.Add([]byte("from: x\nstart: {command: a, ready_timeout_seconds: 600}\nlimits: {disk_mb: 64}\n"))
	f.Add([]byte("from: [x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			checkRefused(t, err)
			return
		}
		checkAccepted(t, s)
	})
}

func FuzzParseDockerfile(f *testing.F) {
	f.Add([]byte(dockerfile))
	f.Add([]byte("# escape=`\nFROM a\nRUN x `\n y\nCOPY [\"a\", \"/b/\"]\nENV A=${B:-$C} D E\n"))
	f.Add([]byte("ARG X=1\nFROM default@${X}\nWORKDIR /a\nCOPY . ..\nUSER 0\nCMD [\"a\"]\nENTRYPOINT b\n"))
	f.Add([]byte("FROM a\nENV A='x\nADD a.tar /\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseDockerfile(data)
		if err != nil {
			checkRefused(t, err)
			return
		}
		checkAccepted(t, s)
	})
}
