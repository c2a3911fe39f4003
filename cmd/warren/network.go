package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"warren/api"
)

// networkFlags are the egress policy flags of create, restore and network.
type networkFlags struct {
	none        *bool
	allow, deny listFlag
	rules       ruleFlag
}

func addNetworkFlags(fs *flag.FlagSet) *networkFlags {
	nf := &networkFlags{rules: ruleFlag{}}
	nf.none = fs.Bool("no-egress", false, "deny all egress, DNS included (exposed ports still work)")
	fs.Var(&nf.allow, "allow", "allow only these destinations: a CIDR, an address, a `name` or *.domain\n(repeatable, or comma-separated; may open private ranges)")
	fs.Var(&nf.deny, "deny", "deny these destinations, even when allowed: a CIDR, an address, a `name` or *.domain\n(repeatable, or comma-separated)")
	fs.Var(nf.rules, "rule", "`DEST:HEADER=VALUE`: on HTTP and HTTPS requests to DEST (a name or *.domain) set\n"+
		"HEADER to VALUE, which may name secrets as ${secrets.NAME} (warren secret set); in single\n"+
		"quotes: 'api.openai.com:Authorization=Bearer ${secrets.openai}' (repeatable; grants no access)")
	return nf
}

// set reports whether any network flag was given.
func (nf *networkFlags) set() bool {
	return *nf.none || len(nf.allow) > 0 || len(nf.deny) > 0 || len(nf.rules) > 0
}

// policy is the policy the flags give, nil (the server's default) when none
// was given.
func (nf *networkFlags) policy() *api.NetworkPolicy {
	if !nf.set() {
		return nil
	}
	return &api.NetworkPolicy{None: *nf.none, Allow: nf.allow, Deny: nf.deny, Rules: nf.rules.rules()}
}

// listFlag collects repeated and comma-separated values.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f = append(*f, v)
		}
	}
	return nil
}

// ruleFlag collects repeated DEST:HEADER=VALUE flags into egress rules:
// every header of a destination in its one rule.
type ruleFlag map[string]map[string]string

func (f ruleFlag) String() string {
	var b strings.Builder
	for _, dest := range slices.Sorted(maps.Keys(f)) {
		for _, h := range slices.Sorted(maps.Keys(f[dest])) {
			fmt.Fprintf(&b, "%s:%s=%s ", dest, h, f[dest][h])
		}
	}
	return strings.TrimSpace(b.String())
}

func (f ruleFlag) Set(s string) error {
	dest, header, ok := strings.Cut(s, ":")
	if !ok || dest == "" {
		return errors.New("want DEST:HEADER=VALUE")
	}
	name, value, ok := strings.Cut(header, "=")
	if !ok || name == "" {
		return errors.New("want DEST:HEADER=VALUE")
	}
	if f[dest] == nil {
		f[dest] = map[string]string{}
	}
	f[dest][name] = value
	return nil
}

// rules is the policy's rules the flags give, nil when none.
func (f ruleFlag) rules() map[string][]api.NetworkRule {
	if len(f) == 0 {
		return nil
	}
	out := make(map[string][]api.NetworkRule, len(f))
	for dest, headers := range f {
		out[dest] = []api.NetworkRule{{Transform: &api.Transform{Headers: headers}}}
	}
	return out
}

// runNetwork is `warren network ID [policy flags]`: it prints the
// sandbox's egress policy and counters, after replacing the policy when
// flags (or --default) say how.
func runNetwork(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("network", "ID [flags]",
		"Show a sandbox's egress policy, its rules and what it refused; with flags, replace\n"+
			"the policy first, whole: flags not given (--rule among them) are cleared.")
	nf := addNetworkFlags(fs)
	reset := fs.Bool("default", false, "go back to the default policy (the internet, not private ranges)")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *reset && nf.set() {
		return badUsage(fs, "--default takes no other network flag")
	}
	var st *api.NetworkStatus
	if *reset || nf.set() {
		p := api.NetworkPolicy{}
		if nf.set() {
			p = *nf.policy()
		}
		st, err = cl.SetNetwork(ctx, rest[0], p)
	} else {
		st, err = cl.Network(ctx, rest[0])
	}
	if err != nil {
		return err
	}
	w := c.stdout
	fmt.Fprintf(w, "address   %s (gateway and DNS %s)\n", st.Address, st.Gateway)
	switch {
	case st.Policy.None:
		fmt.Fprintln(w, "egress    none")
	case len(st.Policy.Allow) > 0:
		fmt.Fprintf(w, "egress    only %s\n", strings.Join(st.Policy.Allow, ", "))
	default:
		fmt.Fprintln(w, "egress    the internet (not private ranges)")
	}
	if len(st.Policy.Deny) > 0 {
		fmt.Fprintf(w, "denied    %s\n", strings.Join(st.Policy.Deny, ", "))
	}
	for _, line := range ruleLines(st.Policy.Rules) {
		fmt.Fprintf(w, "rule      %s\n", line)
	}
	_, err = fmt.Fprintf(w, "refused   %d (rate limited %d)\n", st.Denied, st.RateLimited)
	return err
}

// ruleLines are rules as --rule takes them, DEST:HEADER=VALUE, a line a
// header, by destination then header; a rule without headers is its
// destination alone.
func ruleLines(rules map[string][]api.NetworkRule) []string {
	var lines []string
	for _, dest := range slices.Sorted(maps.Keys(rules)) {
		n := len(lines)
		for _, r := range rules[dest] {
			if r.Transform == nil {
				continue
			}
			for _, h := range slices.Sorted(maps.Keys(r.Transform.Headers)) {
				lines = append(lines, dest+":"+h+"="+r.Transform.Headers[h])
			}
		}
		if len(lines) == n {
			lines = append(lines, dest)
		}
	}
	return lines
}
