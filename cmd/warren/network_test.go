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
		// Several --rule of one destination are one rule; DEST ends at the
		// first ':' and HEADER at the first '='.
		{[]string{"--allow", "api.openai.com", "--rule", "api.openai.com:Authorization=Bearer ${secrets.openai}",
			"--rule", "api.openai.com:X-Org=a=b:c", "--rule", "*.example.com:X-Key=${e2b.secrets.k}", "--rule", "api.openai.com:X-Org=acme"},
			&api.NetworkPolicy{Allow: []string{"api.openai.com"}, Rules: map[string][]api.NetworkRule{
				"api.openai.com": {{Transform: &api.Transform{Headers: map[string]string{"Authorization": "Bearer ${secrets.openai}", "X-Org": "acme"}}}},
				"*.example.com":  {{Transform: &api.Transform{Headers: map[string]string{"X-Key": "${e2b.secrets.k}"}}}},
			}}},
		{[]string{"--rule", "a.org:X-Empty="}, &api.NetworkPolicy{Rules: map[string][]api.NetworkRule{
			"a.org": {{Transform: &api.Transform{Headers: map[string]string{"X-Empty": ""}}}}}}},
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

// TestRuleFlagRefuses: a --rule without a destination, a header name or
// its '=' is a usage error.
func TestRuleFlagRefuses(t *testing.T) {
	for _, arg := range []string{"api.openai.com", ":X=1", "a.org:", "a.org:X", "a.org:=v", "X=1"} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		addNetworkFlags(fs)
		if err := fs.Parse([]string{"--rule", arg}); err == nil {
			t.Errorf("--rule %q parsed, want an error", arg)
		}
	}
}

func TestRuleLines(t *testing.T) {
	rules := map[string][]api.NetworkRule{
		"b.org":         {{Transform: &api.Transform{Headers: map[string]string{"X-B": "2", "Authorization": "Bearer ${secrets.b}"}}}},
		"*.example.com": {{}, {Transform: &api.Transform{Headers: map[string]string{"X-Key": "k"}}}},
		"c.org":         {{}},
	}
	want := []string{"*.example.com:X-Key=k", "b.org:Authorization=Bearer ${secrets.b}", "b.org:X-B=2", "c.org"}
	if got := ruleLines(rules); !reflect.DeepEqual(got, want) {
		t.Errorf("ruleLines = %q, want %q", got, want)
	}
	if got := ruleLines(nil); got != nil {
		t.Errorf("ruleLines(nil) = %q, want none", got)
	}
}
