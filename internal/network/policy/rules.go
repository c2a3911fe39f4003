package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"warren/api"
)

// Bounds on a policy's egress rules (api.NetworkPolicy.Rules).
const (
	MaxRuleDestinations = 64
	MaxRulesPerDest     = 8
	MaxRuleHeaders      = 16   // per destination, its rules together
	maxHeaderTemplate   = 4096 // bytes of a header value as written
)

// Rule is what the egress interceptor does to a destination's requests:
// set Headers, in order (a later one of the same name wins).
type Rule struct {
	Dest    Name
	Headers []Header
}

// Header is one header a rule sets: Value is a template whose parts are
// literal text and secrets' values.
type Header struct {
	Name  string // canonical form
	Value []Part
}

// Part of a header value: Secret names a secret (its stored form), else
// Text is literal.
type Part struct {
	Text, Secret string
}

// hopHeaders may not be set by a rule: they frame the message or the
// connection, which the interceptor owns.
var hopHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Te",
	"Trailer", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Expect"}

// parseRules checks and parses a policy's rules, sorted by destination.
func parseRules(in map[string][]api.NetworkRule) ([]Rule, error) {
	if len(in) > MaxRuleDestinations {
		return nil, fmt.Errorf("network.rules: %d destinations, at most %d", len(in), MaxRuleDestinations)
	}
	var out []Rule
	seen := map[Name]string{}
	for _, dest := range slices.Sorted(maps.Keys(in)) {
		rules := in[dest]
		n, err := ParseName(dest)
		if err != nil {
			return nil, fmt.Errorf("network.rules: destination %q: %w", dest, err)
		}
		if other, ok := seen[n]; ok {
			return nil, fmt.Errorf("network.rules: destinations %q and %q are the same", other, dest)
		}
		seen[n] = dest
		if len(rules) == 0 || len(rules) > MaxRulesPerDest {
			return nil, fmt.Errorf("network.rules: %q: 1 to %d rules", dest, MaxRulesPerDest)
		}
		r := Rule{Dest: n}
		for _, rule := range rules {
			if rule.Transform == nil || len(rule.Transform.Headers) == 0 {
				return nil, fmt.Errorf("network.rules: %q: a rule needs transform.headers", dest)
			}
			for _, name := range slices.Sorted(maps.Keys(rule.Transform.Headers)) {
				h, err := parseHeader(name, rule.Transform.Headers[name])
				if err != nil {
					return nil, fmt.Errorf("network.rules: %q: %w", dest, err)
				}
				r.Headers = slices.DeleteFunc(r.Headers, func(o Header) bool { return o.Name == h.Name })
				r.Headers = append(r.Headers, h)
			}
		}
		if len(r.Headers) > MaxRuleHeaders {
			return nil, fmt.Errorf("network.rules: %q: %d headers, at most %d", dest, len(r.Headers), MaxRuleHeaders)
		}
		out = append(out, r)
	}
	return out, nil
}

func parseHeader(name, value string) (Header, error) {
	if !httpguts.ValidHeaderFieldName(name) {
		return Header{}, fmt.Errorf("header name %.70q is not a valid HTTP header name", name)
	}
	h := Header{Name: canonical(name)}
	for _, hop := range hopHeaders {
		if h.Name == hop {
			return Header{}, fmt.Errorf("header %s frames the request or connection; a rule cannot set it", h.Name)
		}
	}
	if len(value) > maxHeaderTemplate {
		return Header{}, fmt.Errorf("header %s: its value is over %d bytes", h.Name, maxHeaderTemplate)
	}
	parts, err := parseTemplate(value)
	if err != nil {
		return Header{}, fmt.Errorf("header %s: %w", h.Name, err)
	}
	for _, p := range parts {
		if p.Text != "" && !httpguts.ValidHeaderFieldValue(p.Text) {
			return Header{}, fmt.Errorf("header %s: its value has characters HTTP does not allow", h.Name)
		}
	}
	h.Value = parts
	return h, nil
}

// canonical is the header name's canonical form (textproto's, without
// importing net/http).
func canonical(name string) string {
	b := []byte(strings.ToLower(name))
	upper := true
	for i, c := range b {
		if upper && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		upper = c == '-'
	}
	return string(b)
}

// Placeholder prefixes: warren's, and E2B's.
var placeholders = []string{"${secrets.", "${e2b.secrets."}

// parseTemplate splits a header value into text and secret placeholders.
// Any "${" must open a placeholder: a value cannot mean one by accident.
func parseTemplate(v string) ([]Part, error) {
	var parts []Part
	for v != "" {
		i := strings.Index(v, "${")
		if i < 0 {
			parts = append(parts, Part{Text: v})
			break
		}
		if i > 0 {
			parts = append(parts, Part{Text: v[:i]})
		}
		v = v[i:]
		var rest string
		ok := false
		for _, p := range placeholders {
			if rest, ok = strings.CutPrefix(v, p); ok {
				break
			}
		}
		end := strings.IndexByte(rest, '}')
		if !ok || end < 0 {
			return nil, fmt.Errorf("%.40q is not a placeholder: write ${secrets.NAME}", v)
		}
		name, err := api.SecretName(rest[:end])
		if err != nil {
			return nil, fmt.Errorf("placeholder %.70q: %w", v[:len(v)-len(rest)+end+1], err)
		}
		parts = append(parts, Part{Secret: name})
		v = rest[end+1:]
	}
	return parts, nil
}

// SecretNames are the secrets the policy's rules name, sorted.
func (p *Policy) SecretNames() []string {
	var names []string
	for _, r := range p.Rules {
		for _, h := range r.Headers {
			for _, part := range h.Value {
				if part.Secret != "" && !slices.Contains(names, part.Secret) {
					names = append(names, part.Secret)
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

// RuleFor returns the rule for the host name q (any case, with or without
// the trailing dot, no port): the exact destination's, else the longest
// wildcard's that matches; nil if none.
func (p *Policy) RuleFor(q string) *Rule {
	var best *Rule
	for i := range p.Rules {
		r := &p.Rules[i]
		if !r.Dest.Match(q) {
			continue
		}
		if !r.Dest.Wildcard {
			return r
		}
		if best == nil || len(r.Dest.Domain) > len(best.Dest.Domain) {
			best = r
		}
	}
	return best
}

// Resolve is the header's value with the secrets in values put in; false
// when one of them is missing.
func (h Header) Resolve(values map[string]string) (string, bool) {
	var b strings.Builder
	for _, p := range h.Value {
		if p.Secret == "" {
			b.WriteString(p.Text)
			continue
		}
		v, ok := values[p.Secret]
		if !ok {
			return "", false
		}
		b.WriteString(v)
	}
	return b.String(), true
}
