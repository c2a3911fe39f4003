package control

import "fmt"

// Rule says which node of a fleet answers a route: each route of the API's
// table (server.Server.RouteTable) declares one, and the front routes by
// that table alone, so that a new route cannot reach the wrong node
// unnoticed. The zero Rule is no rule: the server's tests fail on a route
// without one, and NewFront refuses it.
type Rule int

// The rules. "{id}" is the route pattern's path value id.
const (
	// NoRule is a route that has not said where a fleet sends it.
	NoRule Rule = iota
	// AnyNode: any node answers; nodes share the metadata store (lists,
	// snapshots, keys, templates, quotas, a node's cordon, ...).
	AnyNode
	// SandboxNode: the node that runs sandbox {id}, or any node when none
	// does (which answers 404, or for an ended sandbox from its record).
	SandboxNode
	// ParentNode is SandboxNode for a request that starts children of
	// sandbox {id} on its node (a fork): the front learns from the answer
	// which sandboxes that node runs, as it does for a placed request.
	ParentNode
	// PlaceCreate: the node the fleet places a create on, from its body
	// (api.CreateSandboxRequest), which the front reads and passes on.
	PlaceCreate
	// PlaceRestore: the node the fleet places a restore of snapshot {id}
	// (its ID, or the name of one of the caller's) on, from its body
	// (api.RestoreRequest).
	PlaceRestore
	// NamedNode: node {id}, whose own figures the route reads (its
	// metrics); 404 when the fleet has no such node.
	NamedNode
	// Local: the front's own process (Options.Local): its metrics, its
	// health, and the web console's files, which every process serves
	// from its binary.
	Local

	numRules
)

var ruleNames = [numRules]string{"no rule", "any node", "the sandbox's node", "the parent's node",
	"placed (create)", "placed (restore)", "the named node", "local"}

func (r Rule) String() string {
	if r < 0 || r >= numRules {
		return fmt.Sprintf("Rule(%d)", int(r))
	}
	return ruleNames[r]
}

// Route is a route of the API as the front reads it.
type Route struct {
	// Method is the route's HTTP method; "" for a route that serves
	// every method (the exposed-port proxy).
	Method string
	// Pattern is the route's path, as http.ServeMux writes it
	// ("/v1/sandboxes/{id}/exec").
	Pattern string
	// Rule is which node answers it.
	Rule Rule
}

// String is the route as http.ServeMux takes it: "METHOD PATTERN".
func (rt Route) String() string {
	if rt.Method == "" {
		return rt.Pattern
	}
	return rt.Method + " " + rt.Pattern
}
