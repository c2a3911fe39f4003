package tenanttpl

import (
	"strings"
	"testing"

	"warren/api"
)

// TestScratchGrows: an import's scratch holds the node's free disk in
// steps as it writes, is refused once the node refuses the next step (the
// error passed on, what is refused named), and gives back every step it
// held at once.
func TestScratchGrows(t *testing.T) {
	const room = 1 << 30 // what the node lets scratches hold
	var held int64
	hold := func(n int64, what string) (func(), error) {
		if held+n > room {
			return nil, api.Errorf(api.CodeInsufficientStorage, "the node's disk is at its reserve: %s refused", what)
		}
		held += n
		return func() { held -= n }, nil
	}
	sc := &scratch{hold: hold, what: "image imports are"}
	if err := sc.add(1); err != nil {
		t.Fatal(err)
	}
	if sc.held != scratchStep || held != scratchStep {
		t.Errorf("1 byte holds %d bytes (the node counts %d), want a step of %d", sc.held, held, scratchStep)
	}
	if err := sc.add(600 << 20); err != nil {
		t.Fatal(err)
	}
	err := sc.add(1 << 30)
	if !api.IsCode(err, api.CodeInsufficientStorage) || !strings.Contains(err.Error(), "image imports are refused") {
		t.Fatalf("past the room: %v", err)
	}
	if sc.used != 600<<20+1 {
		t.Errorf("used %d after a refusal, want what was added before it", sc.used)
	}
	sc.release()
	if held != 0 {
		t.Errorf("%d bytes held after the release", held)
	}
}
