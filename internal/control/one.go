package control

import (
	"context"
	"net/http"
)

// One is a fleet of one node in this process, the single machine's: every
// request goes to it, handed over directly.
func One(node http.Handler) Fleet { return one{node} }

type one struct{ node http.Handler }

// localNode names the one node.
const localNode = "local"

func (one) Owner(ctx context.Context, id string) (string, error)   { return localNode, nil }
func (one) Place(ctx context.Context, p Placement) (string, error) { return localNode, nil }
func (one) Any(ctx context.Context) (string, error)                { return localNode, nil }
func (o one) Node(string) (http.Handler, error)                    { return o.node, nil }
func (one) Started(string, []string)                               {}
