package server

import (
	"io"
	"net/http"
	"testing"
)

// The console's routes need no key and hand the request to
// Options.Console whole; without one they are a 404.
func TestConsoleRoutes(t *testing.T) {
	var got []string
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path)
		io.WriteString(w, "page")
	})
	e := newTestEnv(t, deadAgent(t), Options{Console: page})
	for _, p := range []string{"/console", "/console/", "/console/console/src/main.js"} {
		res, err := http.Get(e.url + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || string(body) != "page" {
			t.Errorf("GET %s without a key: got %d %q, want 200 from the console", p, res.StatusCode, body)
		}
	}
	want := []string{"GET /console", "GET /console/", "GET /console/console/src/main.js"}
	if len(got) != len(want) {
		t.Fatalf("console saw %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("console saw %q, want %q", got[i], want[i])
		}
	}

	none := newTestEnv(t, deadAgent(t), Options{})
	res, err := http.Get(none.url + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /console/ without a console: got %d, want 404", res.StatusCode)
	}
}
