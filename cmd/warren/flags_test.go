package main

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
)

// TestParseFlagsAnywhere pins parse: flags among the positional arguments
// parse as before them, and "--" ends the flags.
func TestParseFlagsAnywhere(t *testing.T) {
	tests := []struct {
		args []string
		want []string
		wait bool
		cwd  string
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, false, ""},
		{[]string{"--wait", "a"}, []string{"a"}, true, ""},
		{[]string{"a", "--wait"}, []string{"a"}, true, ""},
		{[]string{"a", "-cwd", "/d", "b"}, []string{"a", "b"}, false, "/d"},
		{[]string{"a", "--cwd=/d", "b", "-wait"}, []string{"a", "b"}, true, "/d"},
		{[]string{"a", "--wait=false", "b"}, []string{"a", "b"}, false, ""},
		{[]string{"a", "--", "--wait", "-x", "--"}, []string{"a", "--wait", "-x", "--"}, false, ""},
		{[]string{"--", "-a"}, []string{"-a"}, false, ""},
		{[]string{"a", "--cwd", "--", "b"}, []string{"a", "b"}, false, "--"}, // a flag's value is no terminator
		{[]string{"-", "a"}, []string{"-", "a"}, false, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			wait := fs.Bool("wait", false, "")
			cwd := fs.String("cwd", "", "")
			got, err := parse(fs, tt.args, 0, -1)
			if err != nil || !reflect.DeepEqual(got, tt.want) || *wait != tt.wait || *cwd != tt.cwd {
				t.Errorf("got %q, -wait %v, -cwd %q, err %v; want %q, %v, %q", got, *wait, *cwd, err, tt.want, tt.wait, tt.cwd)
			}
		})
	}
}

func TestParseBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"a", "--bogus"},
		{"a", "--cwd"}, // no value
		{"a", "---cwd", "x"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("cwd", "", "")
		if got, err := parse(fs, args, 0, -1); err == nil {
			t.Errorf("parse %q = %q, want an error", args, got)
		}
	}
}
