package server

import (
	"log/slog"
	"strings"
	"testing"

	"warren/internal/control"
)

// TestEveryRouteHasAFleetRule: every route says which node of a fleet
// answers it, for the fleet's front, which routes by this table alone
// (control.Rule; NewFront refuses a route without one).
func TestEveryRouteHasAFleetRule(t *testing.T) {
	s := New(nil, nil, nil, slog.New(slog.DiscardHandler), Options{})
	for _, rt := range s.RouteTable() {
		if rt.Rule == control.NoRule || strings.HasPrefix(rt.Rule.String(), "Rule(") {
			t.Errorf("route %s has no fleet rule: give it the control.Rule that says which node of a fleet answers it", rt)
		}
	}
}
