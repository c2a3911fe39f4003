package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"warren/api"
)

// TestWriteExecResult: the piece-by-piece answer decodes to what one
// json.Marshal of the whole result gives, for text (runes cut at piece
// boundaries, invalid UTF-8, control bytes) and base64 (exact bytes).
func TestWriteExecResult(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 3*resultChunk+17)
	for i := range random {
		random[i] = byte(rng.IntN(256))
	}
	runes := []byte(strings.Repeat("é€😀x", resultChunk/4))
	for name, out := range map[string][]byte{
		"empty":    nil,
		"nul":      make([]byte, resultChunk*2+3),
		"random":   random,
		"runes":    runes,
		"shifted":  append([]byte{'a'}, runes...),
		"shifted2": append([]byte{'a', 'b'}, runes...),
	} {
		t.Run(name, func(t *testing.T) {
			res := api.ExecResult{PID: 7, ExitCode: 3, Status: "exit status 3", DurationMs: 1.5, Truncated: true}
			for _, enc := range []string{"", api.EncodingBase64} {
				w := httptest.NewRecorder()
				if err := writeExecResult(w, res, out, out[:len(out)/2], enc); err != nil {
					t.Fatal(err)
				}
				var got api.ExecResult
				dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&got); err != nil {
					t.Fatalf("%s: %v: %.200s", enc, err, w.Body.Bytes())
				}
				want := res
				if enc == api.EncodingBase64 {
					want.Encoding = enc
					want.Stdout = base64.StdEncoding.EncodeToString(out)
					want.Stderr = base64.StdEncoding.EncodeToString(out[:len(out)/2])
				} else {
					// What json.Marshal makes of the whole output: each
					// byte of invalid UTF-8 as U+FFFD.
					whole, _ := json.Marshal(api.ExecResult{Stdout: string(out), Stderr: string(out[:len(out)/2])})
					var viaMarshal api.ExecResult
					if err := json.Unmarshal(whole, &viaMarshal); err != nil {
						t.Fatal(err)
					}
					want.Stdout, want.Stderr = viaMarshal.Stdout, viaMarshal.Stderr
					if utf8.Valid(out) && want.Stdout != string(out) {
						t.Fatal("valid UTF-8 changed by json.Marshal")
					}
				}
				if got != want {
					t.Errorf("%q: got %+.80v, want %+.80v", enc, got, want)
				}
			}
		})
	}
}

// TestBudget: output is granted up to the tenant's and the node's budgets,
// and comes back when given.
func TestBudget(t *testing.T) {
	b := &budget{perTenant: 100, onNode: 150}
	if got := b.take("a", 80); got != 80 {
		t.Errorf("a takes 80 of 100: got %d", got)
	}
	if got := b.take("a", 80); got != 20 {
		t.Errorf("a takes 80 more: got %d, want its last 20", got)
	}
	if got := b.take("b", 100); got != 50 {
		t.Errorf("b takes 100: got %d, want the node's last 50", got)
	}
	b.give("a", 100)
	if got := b.take("b", 100); got != 50 {
		t.Errorf("b after a gave back: got %d, want its last 50", got)
	}
	if got := b.take("c", -5); got != 0 {
		t.Errorf("a negative take: %d", got)
	}
	c := &capped{max: 10, take: func(n int64) int64 { return b.take("a", n) }}
	c.write([]byte("0123456789abc"))
	if string(c.buf) != "0123456789" || !c.truncated {
		t.Errorf("capped kept %q truncated %v", c.buf, c.truncated)
	}
}

func TestCounter(t *testing.T) {
	var c counter
	var releases []func()
	for range 3 {
		r, err := c.acquire("a", 3, "things")
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	if _, err := c.acquire("a", 3, "things"); !api.IsCode(err, api.CodeTooMany) || !strings.Contains(err.Error(), "limit 3") {
		t.Errorf("fourth of 3: %v, want too_many_requests naming the limit", err)
	}
	if r, err := c.acquire("b", 3, "things"); err != nil {
		t.Errorf("another key: %v", err)
	} else {
		r()
	}
	releases[0]()
	releases[0]() // a second release gives nothing back twice
	if _, err := c.acquire("a", 3, "things"); err != nil {
		t.Errorf("after a release: %v", err)
	}
	if _, err := c.acquire("a", 3, "things"); err == nil {
		t.Error("a double release freed two slots")
	}
}
