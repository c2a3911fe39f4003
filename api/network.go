package api

import (
	"strconv"
	"strings"
)

// NetworkPolicy is a sandbox's egress policy, set at create and replaced
// whole by PUT /v1/sandboxes/{id}/network. Entries of Allow and Deny are
// IPv4 CIDRs ("10.1.0.0/16"), IPv4 addresses, or domain names
// ("example.com" matches that name only, "*.example.com" any name below
// it). Whatever the policy, link-local (the cloud metadata address among
// it), loopback, the node itself and other sandboxes are unreachable. See
// docs/NETWORK.md for the order rules apply in.
type NetworkPolicy struct {
	// None denies all egress, DNS included. Exposed ports still reach the
	// sandbox through warren's proxy.
	None bool `json:"none,omitempty"`
	// Allow, when non-empty, is the only egress allowed (plus what allowed
	// names resolve to). It may open private ranges, which are denied by
	// default.
	Allow []string `json:"allow,omitempty"`
	// Deny is refused even when Allow matches.
	Deny []string `json:"deny,omitempty"`
	// Rules transform the sandbox's HTTP and HTTPS requests to the
	// destinations they name ("api.example.com", or "*.example.com" for
	// every name below it), as they leave the node: the exact name's rules
	// apply, else the longest wildcard's. Rules grant no access: the policy
	// above still decides. See docs/NETWORK.md, "Secrets at egress".
	Rules map[string][]NetworkRule `json:"rules,omitempty"`
}

// NetworkRule is one rule of a destination.
type NetworkRule struct {
	Transform *Transform `json:"transform,omitempty"`
}

// Transform is what a rule does to a matching request: Headers are set on
// it, replacing any the sandbox sent of the same name. A value may name
// one of the tenant's secrets as ${secrets.NAME} (E2B's
// ${e2b.secrets.NAME} too), which the node puts in as the request leaves:
// the sandbox never sees it.
type Transform struct {
	Headers map[string]string `json:"headers,omitempty"`
}

// NetworkStatus is the body of GET and PUT /v1/sandboxes/{id}/network.
type NetworkStatus struct {
	Policy NetworkPolicy `json:"policy"`
	// Address is the sandbox's own address (the same in every sandbox) and
	// Gateway its router and DNS server.
	Address string `json:"address"`
	Gateway string `json:"gateway"`
	// Denied counts the connections and DNS queries the policy refused.
	Denied uint64 `json:"denied"`
	// RateLimited counts new connections refused by the connection-rate
	// limit.
	RateLimited uint64 `json:"rate_limited"`
}

// Preview is the body of GET and PUT /v1/sandboxes/{id}/preview: how the
// sandbox's ports are reached on preview host names,
// PORT-ID.<preview domain> (docs/API.md, "Exposed ports").
type Preview struct {
	// Public lets anyone reach the sandbox's ports on its preview hosts;
	// otherwise a request needs Token.
	Public bool `json:"public"`
	// Token is the sandbox's access token: header X-Warren-Access-Token,
	// query parameter warren_token (a GET is then redirected without it and
	// the browser keeps a cookie), or that cookie. Every sandbox gets its
	// own at create and restore; rotating it makes a new one.
	Token string `json:"token"`
	// URL is the preview URL of the sandbox's ports with "{port}" in place
	// of a port, e.g. "https://{port}-sb-….preview.example.com/"; null when
	// the node serves no preview domain.
	URL *string `json:"url"`
}

// PortURL is the preview URL of the sandbox's port, without the token; ""
// when the node serves no preview domain.
func (p Preview) PortURL(port int) string {
	if p.URL == nil {
		return ""
	}
	return strings.ReplaceAll(*p.URL, "{port}", strconv.Itoa(port))
}

// SetPreviewRequest is the body of PUT /v1/sandboxes/{id}/preview.
type SetPreviewRequest struct {
	// Public makes the preview hosts public (true) or private (false);
	// absent leaves it as it is.
	Public *bool `json:"public,omitempty"`
	// RotateToken replaces the access token with a new one: the old one
	// stops working at once (cookies made from it included).
	RotateToken bool `json:"rotate_token,omitempty"`
}
