package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"warren/api"
)

func TestParse(t *testing.T) {
	p, err := Parse(api.NetworkPolicy{
		Allow: []string{"PyPI.org.", "*.pythonhosted.org", "10.1.2.3/16", "10.1.0.0/16", "192.0.2.7"},
		Deny:  []string{"bad.example.com", "203.0.113.0/24"},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantAllow := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("192.0.2.7/32")}
	if !slices.Equal(p.AllowNets, wantAllow) {
		t.Errorf("allow nets %v, want %v", p.AllowNets, wantAllow)
	}
	if len(p.AllowNames) != 2 || p.AllowNames[0].String() != "pypi.org" || p.AllowNames[1].String() != "*.pythonhosted.org" {
		t.Errorf("allow names %v", p.AllowNames)
	}
	if !p.AllowListed() {
		t.Error("an allow-list is not reported")
	}
	for q, want := range map[string]Verdict{
		"pypi.org":                     Allowed,
		"PYPI.ORG.":                    Allowed,
		"files.pypi.org":               Neutral, // exact names match exactly
		"files.pythonhosted.org":       Allowed,
		"a.b.pythonhosted.org":         Allowed,
		"pythonhosted.org":             Neutral, // a wildcard is strictly below
		"evilpythonhosted.org":         Neutral,
		"bad.example.com":              Denied,
		"example.com":                  Neutral,
		"pypi.org.attacker.example":    Neutral,
		"files.pythonhosted.org.evil.": Neutral,
	} {
		if got := p.Name(q); got != want {
			t.Errorf("Name(%q) = %v, want %v", q, got, want)
		}
	}
	none, err := Parse(api.NetworkPolicy{None: true, Allow: []string{"pypi.org"}})
	if err != nil {
		t.Fatal(err)
	}
	if none.Name("pypi.org") != Denied {
		t.Error("none does not deny every name")
	}
	var empty Policy
	if empty.AllowListed() || empty.Name("example.com") != Neutral {
		t.Error("the empty policy is not the default")
	}
}

func TestParseRefuses(t *testing.T) {
	long := strings.Repeat("a", 64) + ".com"
	many := make([]string, MaxEntries+1)
	for i := range many {
		many[i] = "10.0.0.1"
	}
	for _, entry := range []string{
		"", ".", "*", "*.com", "a..b", "-a.com", "a-.com", "a b.com", "exa!mple.com", long,
		"10.0.0.0/33", "::1", "2001:db8::/32", "10.0.0.1/x", "*.*.example.com", "ex*ample.com",
	} {
		if _, err := Parse(api.NetworkPolicy{Allow: []string{entry}}); err == nil {
			t.Errorf("allow %q was accepted", entry)
		} else if !strings.Contains(err.Error(), "network.allow") {
			t.Errorf("error %q does not name the list", err)
		}
	}
	if _, err := Parse(api.NetworkPolicy{Deny: many}); err == nil {
		t.Error("an over-long list was accepted")
	}
}
