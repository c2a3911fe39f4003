package policy

import (
	"slices"
	"strings"
	"testing"

	"warren/api"
)

func headers(h map[string]string) []api.NetworkRule {
	return []api.NetworkRule{{Transform: &api.Transform{Headers: h}}}
}

func TestRules(t *testing.T) {
	p, err := Parse(api.NetworkPolicy{Rules: map[string][]api.NetworkRule{
		"API.Example.com": headers(map[string]string{"authorization": "Bearer ${secrets.Tok}", "x-static": "v"}),
		"*.example.com":   headers(map[string]string{"X-Any": "${e2b.secrets.other}-${secrets.tok}"}),
		"*.b.example.com": {{Transform: &api.Transform{Headers: map[string]string{"X-Deep": "1"}}},
			{Transform: &api.Transform{Headers: map[string]string{"X-Deep": "2"}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.SecretNames(); !slices.Equal(got, []string{"other", "tok"}) {
		t.Errorf("secret names %v", got)
	}
	for q, want := range map[string]string{
		"api.example.com.":      "api.example.com",
		"www.example.com":       "*.example.com",
		"a.b.example.com":       "*.b.example.com", // the longest wildcard
		"example.com":           "",                // not below itself
		"api.example.com.evil.": "",
		"b.example.com":         "*.example.com",
	} {
		r := p.RuleFor(q)
		if got := ""; r != nil {
			got = r.Dest.String()
			if got != want {
				t.Errorf("RuleFor(%q) = %s, want %q", q, got, want)
			}
		} else if want != "" {
			t.Errorf("RuleFor(%q) = none, want %s", q, want)
		}
	}
	r := p.RuleFor("api.example.com")
	if len(r.Headers) != 2 || r.Headers[0].Name != "Authorization" {
		t.Fatalf("headers %+v", r.Headers)
	}
	if v, ok := r.Headers[0].Resolve(map[string]string{"tok": "s"}); !ok || v != "Bearer s" {
		t.Errorf("resolved %q %v", v, ok)
	}
	if _, ok := r.Headers[0].Resolve(nil); ok {
		t.Error("a missing secret resolved")
	}
	deep := p.RuleFor("x.b.example.com")
	if len(deep.Headers) != 1 || deep.Headers[0].Value[0].Text != "2" {
		t.Errorf("a later rule's header does not win: %+v", deep.Headers)
	}
	if p.IsDefault() {
		t.Error("a policy with rules is called the default")
	}
}

func TestRulesRefused(t *testing.T) {
	for name, rules := range map[string]map[string][]api.NetworkRule{
		"bare wildcard":        {"*": headers(map[string]string{"A": "b"})},
		"one-label wildcard":   {"*.com": headers(map[string]string{"A": "b"})},
		"no headers":           {"a.com": {{}}},
		"host header":          {"a.com": headers(map[string]string{"Host": "b"})},
		"content-length":       {"a.com": headers(map[string]string{"content-length": "1"})},
		"bad header name":      {"a.com": headers(map[string]string{"a b": "c"})},
		"newline in value":     {"a.com": headers(map[string]string{"A": "b\r\nX: y"})},
		"not a placeholder":    {"a.com": headers(map[string]string{"A": "${env.HOME}"})},
		"unclosed placeholder": {"a.com": headers(map[string]string{"A": "${secrets.x"})},
		"bad secret name":      {"a.com": headers(map[string]string{"A": "${secrets.sec_x}"})},
		"same destination":     {"a.com": headers(map[string]string{"A": "b"}), "A.com.": headers(map[string]string{"A": "b"})},
	} {
		if _, err := Parse(api.NetworkPolicy{Rules: rules}); err == nil || !strings.Contains(err.Error(), "network.rules") {
			t.Errorf("%s: %v, want a network.rules error", name, err)
		}
	}
}
