package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"warren/api"
)

// networkFlags are the egress policy flags of create, restore and network.
type networkFlags struct {
	none        *bool
	allow, deny listFlag
}

func addNetworkFlags(fs *flag.FlagSet) *networkFlags {
	nf := &networkFlags{}
	nf.none = fs.Bool("no-egress", false, "deny all egress, DNS included (exposed ports still work)")
	fs.Var(&nf.allow, "allow", "allow only these destinations: a CIDR, an address, a `name` or *.domain\n(repeatable, or comma-separated; may open private ranges)")
	fs.Var(&nf.deny, "deny", "deny these destinations, even when allowed: a CIDR, an address, a `name` or *.domain\n(repeatable, or comma-separated)")
	return nf
}

// set reports whether any network flag was given.
func (nf *networkFlags) set() bool { return *nf.none || len(nf.allow) > 0 || len(nf.deny) > 0 }

// policy is the policy the flags give, nil (the server's default) when none
// was given.
func (nf *networkFlags) policy() *api.NetworkPolicy {
	if !nf.set() {
		return nil
	}
	return &api.NetworkPolicy{None: *nf.none, Allow: nf.allow, Deny: nf.deny}
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

// runNetwork is `warren network ID [policy flags]`: it prints the
// sandbox's egress policy and counters, after replacing the policy when
// flags (or --default) say how.
func runNetwork(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("network", "ID [flags]",
		"Show a sandbox's egress policy and what it refused; with flags, replace the policy first.")
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
	_, err = fmt.Fprintf(w, "refused   %d (rate limited %d)\n", st.Denied, st.RateLimited)
	return err
}
