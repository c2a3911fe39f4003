package e2b

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"

	"warren/internal/buildspec"
)

// TestTranslate: E2B's steps become a warren spec that parses, with a
// RUN's own user around it alone, and the COPY steps' uploads one context;
// what warren cannot build is refused, naming the step.
func TestTranslate(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "app/hello.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	tw.Write([]byte("hi\n"))
	tw.Close()
	zw.Close()
	tpl := e2bTemplate{
		FromTemplate: "base",
		Steps: []e2bStep{
			{Type: "COPY", Args: []string{"app/hello.txt", "/opt/app/hello.txt", "", ""}, FilesHash: "ab12"},
			{Type: "ENV", Args: []string{"GREETING", "hi", "B", "2"}},
			{Type: "RUN", Args: []string{"apt-get update && apt-get install -y jq", "root"}},
			{Type: "USER", Args: []string{"user"}},
			{Type: "RUN", Args: []string{"echo built > /tmp/built.txt", "root"}},
			{Type: "WORKDIR", Args: []string{"/opt/app"}},
		},
		StartCmd: "python3 -m http.server 8000",
		ReadyCmd: "curl -sf localhost:8000",
	}
	var ctx bytes.Buffer
	body, has, err := translate(tpl, map[string]*io.SectionReader{"ab12": io.NewSectionReader(bytes.NewReader(gz.Bytes()), 0, int64(gz.Len()))}, &ctx)
	if err != nil || !has {
		t.Fatal(has, err)
	}
	spec := "from: " + template(tpl.FromTemplate) + "\n" + body
	s, err := buildspec.Parse([]byte(spec))
	if err != nil {
		t.Fatalf("the spec:\n%s\ndoes not parse: %v", spec, err)
	}
	var kinds []string
	for _, st := range s.Steps {
		kinds = append(kinds, string(st.Kind)+":"+st.User)
	}
	want := "copy: env: user:root run: user:root user:user user:root run: user:user workdir:"
	if got := strings.Join(kinds, " "); got != want || s.From != "default" || s.Start == nil || s.Start.Ready == "" {
		t.Errorf("steps %q (from %q, start %+v), want %q from default with the start", got, s.From, s.Start, want)
	}
	tr := tar.NewReader(&ctx)
	h, err := tr.Next()
	if err != nil || h.Name != "app/hello.txt" {
		t.Errorf("context: %v, %v", h, err)
	}
	for name, bad := range map[string]e2bTemplate{
		"no from":       {Steps: []e2bStep{{Type: "RUN", Args: []string{"true"}}}},
		"both":          {FromTemplate: "base", FromImage: "x"},
		"unknown step":  {FromTemplate: "base", Steps: []e2bStep{{Type: "HEALTHCHECK", Args: []string{"x"}}}},
		"missing files": {FromTemplate: "base", Steps: []e2bStep{{Type: "COPY", Args: []string{"a", "/a"}, FilesHash: "ff"}}},
		"odd env":       {FromTemplate: "base", Steps: []e2bStep{{Type: "ENV", Args: []string{"A"}}}},
	} {
		if _, _, err := translate(bad, nil, io.Discard); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if spec, has, err := translate(e2bTemplate{FromImage: "python:3.12"}, nil, io.Discard); err != nil || spec != "" || has {
		t.Errorf("an image alone: %q, context %v, %v; want no spec", spec, has, err)
	}
}
