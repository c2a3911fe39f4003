package main

import (
	"flag"
	"io"
	"reflect"
	"testing"

	"warren/api"
)

// TestNetworkFlags: the policy flags of create, restore and network, each
// repeatable and comma-separated; none given is no policy (the server's
// default).
func TestNetworkFlags(t *testing.T) {
	tests := []struct {
		args []string
		want *api.NetworkPolicy
	}{
		{nil, nil},
		{[]string{"--allow", "pypi.org,*.pythonhosted.org", "--allow", "10.1.0.0/16", "--deny", "10.1.2.3"},
			&api.NetworkPolicy{Allow: []string{"pypi.org", "*.pythonhosted.org", "10.1.0.0/16"}, Deny: []string{"10.1.2.3"}}},
		{[]string{"--no-egress"}, &api.NetworkPolicy{None: true}},
		{[]string{"--deny", " a.org , ,b.org"}, &api.NetworkPolicy{Deny: []string{"a.org", "b.org"}}},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		nf := addNetworkFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		if got := nf.policy(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: policy %+v, want %+v", tt.args, got, tt.want)
		}
	}
}
