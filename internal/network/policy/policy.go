// Package policy parses and checks sandbox egress policies (api.NetworkPolicy)
// and answers the questions the enforcers ask of them: is this name allowed,
// denied or neither (the resolver), which networks are (the firewall). It
// does no I/O. The order rules apply in is documented in docs/NETWORK.md.
package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"warren/api"
)

// Bounds on a policy, so that one sandbox cannot make its router's rule set
// or the resolver's work unbounded.
const (
	MaxEntries  = 256 // per list
	maxNameLen  = 253
	maxLabelLen = 63
)

// Policy is a parsed, valid api.NetworkPolicy.
type Policy struct {
	None bool
	// AllowNets and DenyNets are the CIDR (and address, as /32) entries,
	// masked, sorted and without duplicates.
	AllowNets, DenyNets []netip.Prefix
	// AllowNames and DenyNames are the domain entries, lower case.
	AllowNames, DenyNames []Name
	// Rules are the egress rules (rules.go), sorted by destination.
	Rules []Rule
}

// Name is a domain pattern: an exact name, or with Wildcard every name
// strictly below Domain.
type Name struct {
	Domain   string // lower case, no trailing dot
	Wildcard bool
}

// String is the pattern as written in a policy.
func (n Name) String() string {
	if n.Wildcard {
		return "*." + n.Domain
	}
	return n.Domain
}

// Match reports whether the query name q (any case, with or without the
// trailing dot) matches the pattern.
func (n Name) Match(q string) bool {
	q = strings.ToLower(strings.TrimSuffix(q, "."))
	if n.Wildcard {
		return strings.HasSuffix(q, "."+n.Domain)
	}
	return q == n.Domain
}

// Parse checks p and parses it. Errors name the entry at fault, for the
// API's 400 answer.
func Parse(p api.NetworkPolicy) (Policy, error) {
	out := Policy{None: p.None}
	var err error
	if out.AllowNets, out.AllowNames, err = parseList("allow", p.Allow); err != nil {
		return Policy{}, err
	}
	if out.DenyNets, out.DenyNames, err = parseList("deny", p.Deny); err != nil {
		return Policy{}, err
	}
	if out.Rules, err = parseRules(p.Rules); err != nil {
		return Policy{}, err
	}
	return out, nil
}

func parseList(list string, entries []string) ([]netip.Prefix, []Name, error) {
	if len(entries) > MaxEntries {
		return nil, nil, fmt.Errorf("network.%s: %d entries, at most %d", list, len(entries), MaxEntries)
	}
	var nets []netip.Prefix
	var names []Name
	for _, e := range entries {
		if pfx, ok, err := parseNet(e); ok {
			if err != nil {
				return nil, nil, fmt.Errorf("network.%s: %q: %w", list, e, err)
			}
			nets = append(nets, pfx)
			continue
		}
		n, err := ParseName(e)
		if err != nil {
			return nil, nil, fmt.Errorf("network.%s: %q is neither an IPv4 address, a CIDR nor a domain name: %w", list, e, err)
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.SortFunc(nets, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(nets), names, nil
}

// parseNet parses an address or CIDR; ok is false when e does not look like
// one (so it is taken for a name).
func parseNet(e string) (_ netip.Prefix, ok bool, _ error) {
	if strings.Contains(e, "/") {
		pfx, err := netip.ParsePrefix(e)
		if err != nil {
			return netip.Prefix{}, true, err
		}
		if !pfx.Addr().Is4() {
			return netip.Prefix{}, true, fmt.Errorf("only IPv4 is supported (the sandbox network is IPv4)")
		}
		return pfx.Masked(), true, nil
	}
	addr, err := netip.ParseAddr(e)
	if err != nil {
		if strings.Contains(e, ":") {
			return netip.Prefix{}, true, err
		}
		return netip.Prefix{}, false, nil
	}
	if !addr.Is4() {
		return netip.Prefix{}, true, fmt.Errorf("only IPv4 is supported (the sandbox network is IPv4)")
	}
	return netip.PrefixFrom(addr, 32), true, nil
}

// ParseName parses a domain pattern: a name of letters, digits, '-' and
// '_' labels, optionally led by "*." (any name below it). A trailing dot
// is dropped; case is folded.
func ParseName(s string) (Name, error) {
	n := Name{Domain: strings.ToLower(strings.TrimSuffix(s, "."))}
	if rest, ok := strings.CutPrefix(n.Domain, "*."); ok {
		n.Domain, n.Wildcard = rest, true
	}
	if n.Domain == "" || len(n.Domain) > maxNameLen {
		return Name{}, fmt.Errorf("a name must be 1 to %d characters", maxNameLen)
	}
	labels := strings.Split(n.Domain, ".")
	if n.Wildcard && len(labels) < 2 {
		return Name{}, fmt.Errorf("a wildcard must be below a domain of at least two labels")
	}
	for _, l := range labels {
		if l == "" || len(l) > maxLabelLen {
			return Name{}, fmt.Errorf("label %q must be 1 to %d characters", l, maxLabelLen)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return Name{}, fmt.Errorf("label %q may not start or end with '-'", l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return Name{}, fmt.Errorf("label %q has the character %q", l, c)
			}
		}
	}
	return n, nil
}

// Verdict is the resolver's decision on a name.
type Verdict int

const (
	// Neutral names resolve; what they resolve to is then subject to the
	// CIDR rules (and, with an allow-list, denied unless allowed).
	Neutral Verdict = iota
	// Allowed names resolve and their answers are pinned as allowed.
	Allowed
	// Denied names are refused, and their answers pinned as denied.
	Denied
)

func (v Verdict) String() string {
	switch v {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	}
	return "neutral"
}

// Name decides a queried name: Denied if None or a deny pattern matches,
// else Allowed if an allow pattern matches, else Neutral.
func (p *Policy) Name(q string) Verdict {
	if p.None {
		return Denied
	}
	for _, n := range p.DenyNames {
		if n.Match(q) {
			return Denied
		}
	}
	for _, n := range p.AllowNames {
		if n.Match(q) {
			return Allowed
		}
	}
	return Neutral
}

// IsDefault reports whether the policy is the default one (no rule of its
// own).
func (p *Policy) IsDefault() bool {
	return !p.None && len(p.AllowNets)+len(p.DenyNets)+len(p.AllowNames)+len(p.DenyNames)+len(p.Rules) == 0
}

// AllowListed reports whether the policy has an allow-list, so that egress
// not allowed by it is denied.
func (p *Policy) AllowListed() bool { return len(p.AllowNets) > 0 || len(p.AllowNames) > 0 }
